/*
 * tls_seal.h: the sending half of TLS 1.3 records for the tests of the
 * direct path's record reader (src/net/tls_rx.c): tests/check_tls_rx.c and
 * the fuzz target fuzz_tls_rx.c seal their streams with it (RFC 8446,
 * 5.2-5.4: the nonce is the IV xored with the sequence number, the 5-byte
 * header the tag's additional data, the inner content type after the
 * data, then zero padding). The key schedule is tls_rx's own
 * objfs_tls_rx_expand_label, checked against RFC 8448 in check_tls_rx.
 * Any failure aborts (Check reports it as the test's error).
 */
#ifndef OBJFS_TLS_SEAL_H
#define OBJFS_TLS_SEAL_H

#include <openssl/evp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tls_rx.h"

#define TLS_SEAL_REC_MAX (16384 + 256) /* a record's ciphertext, at most */

struct tls_seal {
	unsigned char secret[48], key[32], iv[12];
	size_t slen; /* 32: AES-128-GCM / SHA-256, 48: AES-256-GCM / SHA-384 */
	uint64_t seq;
};

/* Key and IV of s->secret; the sequence from 0. */
static inline void tls_seal_keys(struct tls_seal *s)
{
	if (objfs_tls_rx_expand_label(s->secret, s->slen, "key", s->key, s->slen == 32 ? 16 : 32) ||
	    objfs_tls_rx_expand_label(s->secret, s->slen, "iv", s->iv, 12))
		abort();
	s->seq = 0;
}

/* A secret of @slen bytes of @fill, its keys. */
static inline void tls_seal_init(struct tls_seal *s, size_t slen, unsigned char fill)
{
	memset(s, 0, sizeof(*s));
	s->slen = slen;
	memset(s->secret, fill, slen);
	tls_seal_keys(s);
}

/* The next secret (KeyUpdate, 7.2), keys from 0. */
static inline void tls_seal_update(struct tls_seal *s)
{
	unsigned char next[48];

	if (objfs_tls_rx_expand_label(s->secret, s->slen, "traffic upd", next, s->slen))
		abort();
	memcpy(s->secret, next, s->slen);
	tls_seal_keys(s);
}

/*
 * Seals at most @n bytes of @d (*@dlen gets how many: what fits a record)
 * as inner @type with up to @pad zeros (what still fits) at @out: the
 * record's length.
 */
static inline size_t tls_seal_record(struct tls_seal *s, int type, const void *d, size_t n,
				     size_t pad, unsigned char *out, size_t *dlen)
{
	static unsigned char inner[TLS_SEAL_REC_MAX];
	unsigned char nonce[12];
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	size_t ilen;
	int ol;

	if (n > TLS_SEAL_REC_MAX - 17)
		n = TLS_SEAL_REC_MAX - 17;
	if (n + 1 + pad + 16 > TLS_SEAL_REC_MAX)
		pad = TLS_SEAL_REC_MAX - 16 - 1 - n;
	ilen = n + 1 + pad;
	memcpy(inner, d, n);
	inner[n] = (unsigned char)type;
	memset(inner + n + 1, 0, pad);
	out[0] = 23, out[1] = 3, out[2] = 3;
	out[3] = (unsigned char)((ilen + 16) >> 8), out[4] = (unsigned char)(ilen + 16);
	memcpy(nonce, s->iv, 12);
	for (int i = 0; i < 8; i++)
		nonce[11 - i] ^= (unsigned char)(s->seq >> (8 * i));
	s->seq++;
	if (!c || EVP_EncryptInit_ex(c, s->slen == 32 ? EVP_aes_128_gcm() : EVP_aes_256_gcm(), NULL,
				     s->key, nonce) != 1 ||
	    EVP_EncryptUpdate(c, NULL, &ol, out, 5) != 1 ||
	    EVP_EncryptUpdate(c, out + 5, &ol, inner, (int)ilen) != 1 ||
	    EVP_EncryptFinal_ex(c, out + 5 + ol, &ol) != 1 ||
	    EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, 16, out + 5 + ilen) != 1)
		abort();
	EVP_CIPHER_CTX_free(c);
	*dlen = n;
	return 5 + ilen + 16;
}

#endif
