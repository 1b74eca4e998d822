/*
 * aesgcm: AES-GCM decryption (AES-128 and AES-256, 96-bit nonces) with the
 * x86 vector AES and carry-less multiply instructions (VAES, VPCLMULQDQ on
 * 512-bit registers: 16 blocks a step), for tls_rx's records.
 *
 * Why: over HTTPS the engine's CPU per byte is the kernel's receive copy
 * and AES-GCM, each about a third (docs/benchmarks.md, "objfs's own TLS 1.3
 * record reader"). OpenSSL 3.0, the one Debian 12 ships, decrypts GCM with
 * its 128-bit AES-NI code (~0.6 cycles a byte on the H200 machine's Xeon);
 * the 512-bit form of the same algorithm does four blocks an instruction.
 * This is the only cipher code of objfs: the handshake, the sending side
 * and every other suite stay with OpenSSL, and so does any machine
 * without these instructions (objfs_aesgcm_usable() says 0).
 *
 * The algorithm is GCM as NIST SP 800-38D defines it: counter mode from
 * inc32(J0) with J0 = nonce || 1, GHASH over the additional data and the
 * ciphertext, the tag E(K, J0) xor GHASH compared in constant time.
 * GHASH multiplies byte-reflected blocks and reduces modulo the reflected
 * polynomial x^128 + x^127 + x^126 + x^121 + 1 (Montgomery style, two
 * folds by 0xc2 << 56); H is kept premultiplied by x so that no product
 * needs the one-bit shift, and the products of 16 blocks are summed before
 * one reduction. Checked against NIST's test vectors and against OpenSSL
 * at every length (tests/check_tls_rx.c, fuzz_tls_rx).
 *
 * OBJFS_AESGCM=openssl in the environment leaves GCM to OpenSSL (for
 * measuring one build both ways). Valgrind hides these instructions from
 * the programs it runs, so its runs take OpenSSL's path.
 */
#ifndef OBJFS_AESGCM_H
#define OBJFS_AESGCM_H

#include <stddef.h>

struct objfs_aesgcm;

/* 1 when this CPU (and the environment) lets objfs_aesgcm_new succeed. */
int objfs_aesgcm_usable(void);

/*
 * The key schedule and GHASH powers of @key (@klen 16 or 32 bytes) into
 * *@out, which the caller frees (wiped) with objfs_aesgcm_free. 0,
 * -EINVAL (another length), -ENOTSUP (not usable here) or -ENOMEM.
 */
int objfs_aesgcm_new(const unsigned char *key, size_t klen, struct objfs_aesgcm **out);
void objfs_aesgcm_free(struct objfs_aesgcm *g);

/*
 * Decrypts @len bytes of @in into @out (the same place as @in, or not
 * overlapping it) under the 12-byte @nonce, with @alen bytes of @aad, and
 * checks the 16-byte @tag. 0, or -EBADMSG when the tag does not match
 * (then @out holds bytes that must not be used).
 */
int objfs_aesgcm_open(const struct objfs_aesgcm *g, const unsigned char *nonce,
		      const unsigned char *aad, size_t alen, const unsigned char *in, size_t len,
		      const unsigned char *tag, unsigned char *out);

#endif
