/*
 * fuzz_tls_rx: the TLS 1.3 record reader of the direct path (tls_rx.c)
 * on streams a server could send after the handshake.
 *
 * The input is a script: its first byte picks the suite and the read
 * sizes, then steps of [op][len_hi][len_lo][len bytes]: a sealed record
 * of application data, handshake bytes (messages may span records, as
 * RFC 8446 5.1 allows: the script keeps what its records leave of one and
 * judges them as the RFC does; a KeyUpdate moves its keys on as the reader
 * must), an alert or any inner type,
 * raw bytes, a byte flipped in the last record, or a record sealed under
 * a wrong sequence number. The stream goes through a socket pair and is
 * read back at the chosen sizes. Invariant, the one that keeps wrong
 * bytes out of a cache block or ring slot: what the reader returns is
 * always a prefix of the application data of the records the script
 * sealed correctly before its first damage, in order, never a byte of
 * anything else.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "fuzz.h"
#include "tls_seal.h"

#define REC_MAX TLS_SEAL_REC_MAX
#define OUT_MAX (1 << 20)
#define HS_MAX  OBJFS_TLS_RX_HS_MAX

/*
 * The script's own judgement of a handshake record's @n bytes @d, after
 * the @*held bytes of a message the records before left in @hs (room for
 * HS_MAX + REC_MAX): 1 when a reader must fail on it (no bytes, a message
 * neither ticket nor KeyUpdate, longer than any ticket, or a KeyUpdate not
 * ending the record), else 0, the
 * keys moved on past a KeyUpdate and what is left of a message kept.
 */
static int hs_judge(struct tls_seal *s, const uint8_t *d, size_t n, uint8_t *hs, size_t *held)
{
	size_t off = 0, len, all;

	if (!n)
		return 1; /* 5.1: no zero-length handshake fragments */
	memcpy(hs + *held, d, n);
	all = *held + n;
	while (off < all) {
		if (hs[off] != 4 && hs[off] != 24)
			return 1;
		if (all - off < 4)
			break;
		len = (size_t)hs[off + 1] << 16 | (size_t)hs[off + 2] << 8 | hs[off + 3];
		if (len > HS_MAX - 4)
			return 1;
		if (len > all - off - 4)
			break;
		if (hs[off] == 24) {
			if (len != 1 || hs[off + 4] > 1 || off + 5 != all)
				return 1;
			tls_seal_update(s); /* the keys move on after this record */
		}
		off += 4 + len;
	}
	memmove(hs, hs + off, all - off);
	*held = all - off;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static unsigned char stream[OUT_MAX + 2 * REC_MAX], want[OUT_MAX], got[OUT_MAX],
		hs[HS_MAX + REC_MAX];
	size_t held = 0; /* bytes of a handshake message the records so far left */
	int must_fail = 0; /* another record came between a message's records */
	static const size_t steps[] = { 1, 5, 100, 4096, 16400, 65536 };
	struct objfs_tls_rx *rx;
	struct tls_seal s;
	size_t slen = 0, wlen = 0, glen = 0, last = 0, sent = 0, step;
	int damaged = 0, asked = 0, fd[2];
	ssize_t k;

	if (size < 1)
		return 0;
	tls_seal_init(&s, data[0] & 1 ? 48 : 32, 0x5c);
	step = steps[(data[0] >> 1) % 6];
	if (objfs_tls_rx_new(s.slen == 48 ? OBJFS_TLS_AES_256_GCM_SHA384 :
					    OBJFS_TLS_AES_128_GCM_SHA256,
			     s.secret, s.slen, 0, &rx))
		abort();
	/* Each step is sealed right (the reader must go on), or may end the
	 * stream (damaged: the script stops after it; what was read before
	 * must still be a prefix of the data sealed right). */
	for (size_t i = 1; i + 3 <= size && slen < OUT_MAX && !damaged;) {
		unsigned op = data[i];
		size_t n = (size_t)data[i + 1] << 8 | data[i + 2], rec, dlen = 0;
		const uint8_t *d = data + i + 3;
		int type;

		if (n > size - i - 3)
			n = size - i - 3;
		i += 3 + n;
		switch (op % 7) {
		case 0: /* application data, padded by op's high bits */
		case 6: /* any inner type; application data is data */
			/* (type 0 is padding: such a record's type is its last
			 * non-zero byte, 5.4, so the script never seals it) */
			type = op % 7 == 0 ? 23 : (n && d[0] ? d[0] : 20);
			if (op % 7 == 6 && n)
				d++, n--;
			rec = tls_seal_record(&s, type, d, n, op >> 3, stream + slen, &dlen);
			if (type == 23 && !held) {
				if (wlen + dlen > OUT_MAX)
					dlen = 0, damaged = 1;
				memcpy(want + wlen, d, dlen);
				wlen += dlen;
			} else {
				damaged = 1;
				must_fail |= held && type != 22;
			}
			break;
		case 1: /* handshake bytes */
			rec = tls_seal_record(&s, 22, d, n, 0, stream + slen, &dlen);
			damaged = hs_judge(&s, d, dlen, hs, &held);
			break;
		case 2: /* an alert: close_notify ends the stream, others fail it */
			rec = tls_seal_record(&s, 21, d, n, 0, stream + slen, &dlen);
			damaged = 1;
			must_fail |= held != 0;
			break;
		case 3: /* raw bytes */
			rec = n < 2 * REC_MAX ? n : 2 * REC_MAX;
			memcpy(stream + slen, d, rec);
			damaged = 1;
			break;
		case 4: /* a byte of the last record flipped */
			rec = 0;
			if (slen > last) {
				stream[last + (n ? d[0] : 0) % (slen - last)] ^=
					(unsigned char)(n > 1 ? d[1] | 1 : 1);
				damaged = 1;
			}
			break;
		default: /* sealed under a sequence number ahead */
			s.seq += 1 + (n ? d[0] : 0);
			rec = tls_seal_record(&s, 23, d, n, 0, stream + slen, &dlen);
			damaged = 1;
			break;
		}
		if (rec) {
			last = slen;
			slen += rec;
		}
	}
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, fd))
		abort();
	fcntl(fd[0], F_SETFL, O_NONBLOCK);
	for (;;) {
		k = objfs_tls_rx_read(rx, fd[0], (char *)got + glen,
				      glen + step <= OUT_MAX ? step : OUT_MAX - glen, &asked);
		if (k > 0) {
			FUZZ_CHECK(glen + (size_t)k <= wlen, "returned %zu bytes past the %zu sealed",
				   glen + (size_t)k, wlen);
			FUZZ_CHECK(!memcmp(got + glen, want + glen, (size_t)k),
				   "bytes %zu-%zu are not the sealed data", glen, glen + (size_t)k);
			glen += (size_t)k;
			if (glen == OUT_MAX)
				break;
			continue;
		}
		if (k != -EAGAIN)
			break;
		if (sent == slen) {
			close(fd[1]);
			fd[1] = -1;
			continue;
		}
		size_t w = slen - sent < 65536 ? slen - sent : 65536;

		if (write(fd[1], stream + sent, w) != (ssize_t)w)
			abort();
		sent += w;
	}
	/* a stream sealed whole and read to its end gives all of it, and is
	 * not refused; one that ends inside a handshake message is */
	FUZZ_CHECK(damaged || k != 0 || glen == wlen, "ended at %zu of %zu", glen, wlen);
	FUZZ_CHECK(damaged || held || k >= 0, "a stream sealed right failed (%zd)", k);
	FUZZ_CHECK(damaged || !held || k < 0, "a message cut by the stream's end was taken");
	FUZZ_CHECK(!must_fail || k < 0 || glen == OUT_MAX,
		   "a record between a message's records was taken (%zd)", k);
	close(fd[0]);
	if (fd[1] >= 0)
		close(fd[1]);
	objfs_tls_rx_free(rx);
	return 0;
}
