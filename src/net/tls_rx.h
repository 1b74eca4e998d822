/*
 * tls_rx: the receiving half of a TLS 1.3 connection, after OpenSSL's
 * handshake, decrypting each record straight into the caller's memory.
 *
 * Why: OpenSSL decrypts a record in place in its own read buffer and then
 * copies it into the caller's; for the direct path that copy writes every
 * byte of a body into a cold cache block or ring slot, a large share of
 * the engine's CPU at one HTTPS connection (docs/benchmarks.md, "Where one
 * connection's CPU goes"), and kernel TLS, which would decrypt into the
 * destination, is not available on every host. Here a
 * record whose plaintext fits the caller's buffer is decrypted into it
 * (AES-GCM, the tag checked before the bytes are reported); a smaller read
 * (a response head) goes through a record-sized buffer.
 *
 * Scope, and what keeps it safe: TLS 1.3 with AES-128-GCM or AES-256-GCM
 * only (RFC 8446, 5.2-5.3): every record's nonce is the IV xored with its
 * sequence number and its header is the tag's additional data, so a key,
 * a sequence number or a byte that is wrong fails the tag: an error, never
 * wrong bytes. Application data is handed on; NewSessionTicket is skipped
 * (OpenSSL had the handshake's tickets before the takeover); KeyUpdate
 * moves to the next secret (4.6.3) and says whether the peer asked for
 * ours, which the caller has OpenSSL send; a handshake message may span
 * records (5.1), with no other record between them and none past a
 * KeyUpdate's last byte; close_notify is the end; any other record, alert
 * or handshake message is an error. The sending half stays with OpenSSL.
 *
 * Not thread-safe: one connection, one thread (the engine thread's).
 * Unit tests: tests/check_tls_rx.c (and check_engine's test_tls_own_records
 * against OpenSSL); fuzz target fuzz_tls_rx.
 */
#ifndef OBJFS_TLS_RX_H
#define OBJFS_TLS_RX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct objfs_tls_rx;

/* The longest handshake message taken: a NewSessionTicket at its largest
 * (RFC 8446, 4.6.1: lifetime, age_add, a nonce of 255 bytes, a ticket and
 * extensions of 2^16 - 1 each), with its 4-byte header. */
#define OBJFS_TLS_RX_HS_MAX (4 + 4 + 4 + 1 + 255 + 2 + 65535 + 2 + 65535)

/* TLS 1.3 cipher suites (the low 16 bits of OpenSSL's cipher ids). */
#define OBJFS_TLS_AES_128_GCM_SHA256 0x1301
#define OBJFS_TLS_AES_256_GCM_SHA384 0x1302

/*
 * The receiving state of a connection whose server traffic secret is
 * @secret (@len bytes: 32 for 0x1301, 48 for 0x1302), the next record
 * being number @seq under it. 0, -EINVAL (another suite, a wrong length)
 * or -ENOMEM. The secret is copied (and wiped at free).
 */
int objfs_tls_rx_new(unsigned suite, const unsigned char *secret, size_t len, uint64_t seq,
		     struct objfs_tls_rx **out);
void objfs_tls_rx_free(struct objfs_tls_rx *rx);

/*
 * Reads up to @n (> 0) bytes of application data from the non-blocking
 * socket @fd into @p: > 0 bytes; 0 the end (close_notify, or the stream's
 * end between records); -EAGAIN nothing whole yet (wait for POLLIN);
 * -EIO a record that fails its tag, a stream cut inside a record, an
 * alert, anything this reader does not take (then the connection is done:
 * every later call fails too). Bytes of @p past the count returned may
 * have been written. *@update_asked is set when the peer's KeyUpdate asked
 * for ours (the caller has the sending side send one).
 */
ssize_t objfs_tls_rx_read(struct objfs_tls_rx *rx, int fd, char *p, size_t n,
			  int *update_asked);

/* Whether bytes are buffered (ciphertext not yet read, plaintext not yet
 * handed on, or part of a handshake message the next record goes on
 * with): an idle connection with any is not reused. */
int objfs_tls_rx_pending(const struct objfs_tls_rx *rx);

/* HKDF-Expand-Label(@secret, @label, "", @out_len) with SHA-256 (@secret
 * 32 bytes) or SHA-384 (48) (RFC 8446, 7.1). 0 or -EIO. For tests. */
int objfs_tls_rx_expand_label(const unsigned char *secret, size_t len, const char *label,
			      unsigned char *out, size_t out_len);

#endif
