/*
 * tls_rx: see tls_rx.h.
 */
#include "config.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "tls_rx.h"

#define REC_MAX   (16384 + 256)   /* a TLS 1.3 record's ciphertext, at most (5.2) */
#define TAG       16
#define IVLEN     12
#define CBUF      ((128 << 10) + 5 + REC_MAX) /* one recv() reads ~8 records */

enum { CT_ALERT = 21, CT_HANDSHAKE = 22, CT_APPDATA = 23 };
enum { HS_NEW_SESSION_TICKET = 4, HS_KEY_UPDATE = 24 };
#define HS_MAX OBJFS_TLS_RX_HS_MAX
#define HS_BUF    (HS_MAX + REC_MAX) /* what a message leaves (< HS_MAX) and a whole record */

struct objfs_tls_rx {
	EVP_CIPHER_CTX *ctx;
	const EVP_CIPHER *cipher;
	const EVP_MD *md;
	unsigned char secret[48];
	size_t slen, klen;
	unsigned char iv[IVLEN];
	uint64_t seq;
	int dead, eof;
	size_t coff, cend;            /* ciphertext not yet used: cbuf[coff, cend) */
	size_t poff, pend;            /* plaintext not yet handed on: pbuf[poff, pend) */
	unsigned char *hs;            /* owned, HS_BUF bytes once needed: the start of a */
	size_t hs_len;                /* handshake message the next record goes on with */
	unsigned char pbuf[REC_MAX];
	unsigned char cbuf[CBUF];
};

int objfs_tls_rx_expand_label(const unsigned char *secret, size_t len, const char *label,
			      unsigned char *out, size_t out_len)
{
	unsigned char info[2 + 1 + 255 + 1];
	size_t llen = 6 + strlen(label), ilen = 0, got = out_len;
	EVP_PKEY_CTX *pc;
	int ok;

	if ((len != 32 && len != 48) || llen > 255 || out_len > 0xffff)
		return -EIO;
	info[ilen++] = (unsigned char)(out_len >> 8);
	info[ilen++] = (unsigned char)out_len;
	info[ilen++] = (unsigned char)llen;
	memcpy(info + ilen, "tls13 ", 6);
	memcpy(info + ilen + 6, label, llen - 6);
	ilen += llen;
	info[ilen++] = 0; /* no context */
	pc = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
	ok = pc && EVP_PKEY_derive_init(pc) > 0 &&
	     EVP_PKEY_CTX_set_hkdf_mode(pc, EVP_PKEY_HKDEF_MODE_EXPAND_ONLY) > 0 &&
	     EVP_PKEY_CTX_set_hkdf_md(pc, len == 32 ? EVP_sha256() : EVP_sha384()) > 0 &&
	     EVP_PKEY_CTX_set1_hkdf_key(pc, secret, (int)len) > 0 &&
	     EVP_PKEY_CTX_add1_hkdf_info(pc, info, (int)ilen) > 0 &&
	     EVP_PKEY_derive(pc, out, &got) > 0 && got == out_len;
	EVP_PKEY_CTX_free(pc);
	return ok ? 0 : -EIO;
}

/* Key and IV of rx->secret into the cipher; the sequence from 0. */
static int rekey(struct objfs_tls_rx *rx)
{
	unsigned char key[32];
	int ok = objfs_tls_rx_expand_label(rx->secret, rx->slen, "key", key, rx->klen) == 0 &&
		 objfs_tls_rx_expand_label(rx->secret, rx->slen, "iv", rx->iv, IVLEN) == 0 &&
		 EVP_DecryptInit_ex(rx->ctx, rx->cipher, NULL, key, NULL) == 1;

	OPENSSL_cleanse(key, sizeof(key));
	rx->seq = 0;
	return ok ? 0 : -EIO;
}

int objfs_tls_rx_new(unsigned suite, const unsigned char *secret, size_t len, uint64_t seq,
		     struct objfs_tls_rx **out)
{
	struct objfs_tls_rx *rx;

	*out = NULL;
	if (!((suite == OBJFS_TLS_AES_128_GCM_SHA256 && len == 32) ||
	      (suite == OBJFS_TLS_AES_256_GCM_SHA384 && len == 48)))
		return -EINVAL;
	rx = calloc(1, sizeof(*rx));
	if (!rx)
		return -ENOMEM;
	rx->ctx = EVP_CIPHER_CTX_new();
	rx->cipher = len == 32 ? EVP_aes_128_gcm() : EVP_aes_256_gcm();
	rx->klen = len == 32 ? 16 : 32;
	rx->slen = len;
	memcpy(rx->secret, secret, len);
	if (!rx->ctx || rekey(rx)) {
		objfs_tls_rx_free(rx);
		return -ENOMEM;
	}
	rx->seq = seq;
	*out = rx;
	return 0;
}

void objfs_tls_rx_free(struct objfs_tls_rx *rx)
{
	if (!rx)
		return;
	EVP_CIPHER_CTX_free(rx->ctx);
	free(rx->hs);
	OPENSSL_cleanse(rx, sizeof(*rx));
	free(rx);
}

int objfs_tls_rx_pending(const struct objfs_tls_rx *rx)
{
	return rx->cend > rx->coff || rx->pend > rx->poff || rx->hs_len;
}

static ssize_t fail(struct objfs_tls_rx *rx)
{
	rx->dead = 1;
	return -EIO;
}

/*
 * The whole handshake messages at the start of @m (@n bytes): tickets
 * skipped, a KeyUpdate (which must end the record: 5.1, no message spans a
 * key change) moves to the next secret. Returns how many bytes they take
 * (a message not yet whole starts there), or -EIO: a message of another
 * type, known as soon as its first byte is, or longer than any ticket.
 */
static ssize_t hs_take(struct objfs_tls_rx *rx, const unsigned char *m, size_t n, int *asked)
{
	size_t off = 0;

	while (off < n) {
		size_t len;

		if (m[off] != HS_NEW_SESSION_TICKET && m[off] != HS_KEY_UPDATE)
			return -EIO;
		if (n - off < 4)
			break;
		len = (size_t)m[off + 1] << 16 | (size_t)m[off + 2] << 8 | m[off + 3];
		if (len > HS_MAX - 4)
			return -EIO;
		if (len > n - off - 4)
			break;
		if (m[off] == HS_KEY_UPDATE) {
			unsigned char next[48];

			if (len != 1 || m[off + 4] > 1 || off + 5 != n)
				return -EIO;
			if (objfs_tls_rx_expand_label(rx->secret, rx->slen, "traffic upd", next,
						      rx->slen))
				return -EIO;
			memcpy(rx->secret, next, rx->slen);
			OPENSSL_cleanse(next, sizeof(next));
			if (rekey(rx))
				return -EIO;
			if (m[off + 4])
				*asked = 1;
		}
		off += 4 + len;
	}
	return (ssize_t)off;
}

/*
 * A handshake record's plaintext (@m, @n bytes). A message may span
 * records (5.1; a server that sends small records splits a ticket), so
 * what the records before left of one (rx->hs) comes first, and what this
 * one leaves is kept for the next, which must be a handshake record too.
 */
static int handshake(struct objfs_tls_rx *rx, const unsigned char *m, size_t n, int *asked)
{
	ssize_t k;
	size_t rest;

	if (!n)
		return -EIO; /* 5.1: no zero-length handshake fragments */
	if (rx->hs_len) {
		if (n > HS_BUF - rx->hs_len)
			return -EIO; /* not reached: hs_len < HS_MAX, n <= REC_MAX */
		memcpy(rx->hs + rx->hs_len, m, n);
		m = rx->hs;
		n += rx->hs_len;
	}
	k = hs_take(rx, m, n, asked);
	if (k < 0)
		return -EIO;
	rest = n - (size_t)k;
	if (rest) {
		if (!rx->hs && !(rx->hs = malloc(HS_BUF)))
			return -EIO;
		memmove(rx->hs, m + k, rest);
	}
	rx->hs_len = rest;
	return 0;
}

/*
 * Decrypts the whole record at rx->cbuf + rx->coff (its header checked)
 * into @out (room for its ciphertext's length). The plaintext's length
 * and type in *@len and *@type. 0 or -EIO.
 */
static int open_record(struct objfs_tls_rx *rx, unsigned char *out, size_t *len, int *type)
{
	const unsigned char *h = rx->cbuf + rx->coff;
	size_t rlen = (size_t)h[3] << 8 | h[4], clen = rlen - TAG;
	unsigned char nonce[IVLEN];
	int ol = 0, fl = 0;
	size_t i;

	memcpy(nonce, rx->iv, IVLEN);
	for (i = 0; i < 8; i++)
		nonce[IVLEN - 1 - i] ^= (unsigned char)(rx->seq >> (8 * i));
	if (EVP_DecryptInit_ex(rx->ctx, NULL, NULL, NULL, nonce) != 1 ||
	    EVP_DecryptUpdate(rx->ctx, NULL, &ol, h, 5) != 1 ||
	    EVP_DecryptUpdate(rx->ctx, out, &ol, h + 5, (int)clen) != 1 ||
	    EVP_CIPHER_CTX_ctrl(rx->ctx, EVP_CTRL_GCM_SET_TAG, TAG, (void *)(h + 5 + clen)) != 1 ||
	    EVP_DecryptFinal_ex(rx->ctx, out + ol, &fl) != 1)
		return -EIO;
	rx->seq++;
	rx->coff += 5 + rlen;
	if (rx->coff == rx->cend)
		rx->coff = rx->cend = 0;
	/* the content type is the last byte that is not padding (5.4) */
	for (i = clen; i > 0 && out[i - 1] == 0; i--)
		;
	if (i == 0)
		return -EIO;
	*type = out[i - 1];
	*len = i - 1;
	return 0;
}

ssize_t objfs_tls_rx_read(struct objfs_tls_rx *rx, int fd, char *p, size_t n, int *update_asked)
{
	if (rx->dead)
		return -EIO;
	if (rx->pend > rx->poff) {
		size_t k = rx->pend - rx->poff < n ? rx->pend - rx->poff : n;

		memcpy(p, rx->pbuf + rx->poff, k);
		rx->poff += k;
		return (ssize_t)k;
	}
	while (!rx->eof) {
		size_t avail = rx->cend - rx->coff, rlen = 0;
		ssize_t k;

		if (avail >= 5) {
			const unsigned char *h = rx->cbuf + rx->coff;

			rlen = (size_t)h[3] << 8 | h[4];
			/* after the handshake every record is application_data outside */
			if (h[0] != CT_APPDATA || h[1] != 3 || h[2] != 3 || rlen <= TAG ||
			    rlen > REC_MAX)
				return fail(rx);
		}
		if (avail >= 5 && avail >= 5 + rlen) {
			unsigned char *out = n >= rlen - TAG ? (unsigned char *)p : rx->pbuf;
			size_t len;
			int type;

			if (open_record(rx, out, &len, &type))
				return fail(rx);
			if (type != CT_HANDSHAKE && rx->hs_len)
				return fail(rx); /* 5.1: nothing between a message's records */
			if (type == CT_APPDATA) {
				if (!len)
					continue;
				if (out == (unsigned char *)p)
					return (ssize_t)len;
				rx->poff = 0;
				rx->pend = len;
				return objfs_tls_rx_read(rx, fd, p, n, update_asked);
			}
			if (type == CT_HANDSHAKE) {
				if (handshake(rx, out, len, update_asked))
					return fail(rx);
				continue;
			}
			if (type == CT_ALERT && len == 2 && out[1] == 0) { /* close_notify */
				rx->eof = 1;
				break;
			}
			return fail(rx);
		}
		if (rx->coff && CBUF - rx->coff < 5 + REC_MAX) { /* room for a whole record */
			memmove(rx->cbuf, rx->cbuf + rx->coff, avail);
			rx->coff = 0;
			rx->cend = avail;
		}
		do
			k = recv(fd, rx->cbuf + rx->cend, CBUF - rx->cend, MSG_DONTWAIT);
		while (k < 0 && errno == EINTR);
		if (k < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : fail(rx);
		if (k == 0) {
			if (avail || rx->hs_len)
				return fail(rx); /* cut inside a record, or a message */
			rx->eof = 1;
			break;
		}
		rx->cend += (size_t)k;
	}
	return 0;
}
