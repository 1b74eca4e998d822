/*
 * Unit tests of src/net/tls_rx.c, the receiving half of TLS 1.3 after the
 * handshake: records sealed here with the same keys (RFC 8446, 5.2-5.4),
 * written into a socket pair, read back through objfs_tls_rx_read at every
 * read size; application data byte-exact across padding, empty records,
 * tickets and KeyUpdates; every tampered or hostile record an error, never
 * bytes. The interop with OpenSSL itself is check_engine's test_tls_direct.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tls_rx.h"

#include "fuzz/tls_seal.h"

#define REC_MAX TLS_SEAL_REC_MAX

/* A record of inner @type with @n bytes of @data and @pad zeros into
 * @out (returns its length): all of them, the test asks for no more. */
static size_t seal_record(struct tls_seal *s, int type, const void *data, size_t n, size_t pad,
			  unsigned char *out)
{
	size_t dlen, len;

	ck_assert_uint_le(n + 1 + pad + 16, REC_MAX);
	len = tls_seal_record(s, type, data, n, pad, out, &dlen);
	ck_assert_uint_eq(dlen, n);
	return len;
}

/* A stream of records, written to the pair's far end as it is read. */
struct stream {
	unsigned char *buf;
	size_t len, cap;
	int fd[2];
};

static void stream_init(struct stream *st)
{
	memset(st, 0, sizeof(*st));
	st->cap = 1 << 20;
	st->buf = malloc(st->cap);
	ck_assert_ptr_nonnull(st->buf);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, st->fd), 0);
	fcntl(st->fd[0], F_SETFL, O_NONBLOCK);
}

static void add(struct stream *st, struct tls_seal *s, int type, const void *d, size_t n, size_t pad)
{
	ck_assert_uint_le(st->len + n + pad + 64, st->cap);
	st->len += seal_record(s, type, d, n, pad, st->buf + st->len);
}

static void add_raw(struct stream *st, const void *d, size_t n)
{
	memcpy(st->buf + st->len, d, n);
	st->len += n;
}

/* Keys from @seed, an empty stream, and a reader of that stream's first secret. */
static void start(struct tls_seal *s, struct stream *st, unsigned char seed,
		  struct objfs_tls_rx **rx)
{
	tls_seal_init(s, 32, seed);
	stream_init(st);
	ck_assert_int_eq(objfs_tls_rx_new(OBJFS_TLS_AES_128_GCM_SHA256, s->secret, 32, 0, rx), 0);
}

static void stream_free(struct stream *st)
{
	close(st->fd[0]);
	if (st->fd[1] >= 0)
		close(st->fd[1]);
	free(st->buf);
}

/*
 * Reads everything through @rx in reads of @step bytes, the writer
 * feeding the pair in pieces of 1000 bytes and closing it at the end;
 * the application data into @got (*@n), the last result returned.
 */
static ssize_t drain(struct objfs_tls_rx *rx, struct stream *st, size_t step, char *got,
		     size_t *n, int *asked)
{
	size_t sent = 0;
	ssize_t k = 0;

	*n = 0;
	for (;;) {
		k = objfs_tls_rx_read(rx, st->fd[0], got + *n, step, asked);
		if (k > 0) {
			ck_assert_uint_le((size_t)k, step);
			*n += (size_t)k;
			continue;
		}
		if (k != -EAGAIN)
			return k;
		if (sent == st->len) {
			close(st->fd[1]);
			st->fd[1] = -1;
			continue;
		}
		size_t w = st->len - sent < 1000 ? st->len - sent : 1000;

		ck_assert_int_eq(write(st->fd[1], st->buf + sent, w), (ssize_t)w);
		sent += w;
	}
}

static void pattern(char *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (char)((i * 131 + seed * 7 + (i >> 9)) & 0xff);
}

/* Application data across record sizes, padding, empty records and a
 * ticket, byte-exact at every read size; close_notify ends it. */
START_TEST(test_tls_rx_stream)
{
	static const size_t steps[] = { 1, 7, 100, 4096, 16383, 16384, 65536, 1 << 20 };
	static const size_t sizes[] = { 1, 100, 16384, 0, 5000, 16000, 3 };
	static const size_t pads[] = { 0, 0, 0, 0, 256, 239, 100 };
	static char want[1 << 17], got[1 << 20];
	unsigned char ticket[4 + 40] = { 4, 0, 0, 40 };
	size_t wn = 0, n;
	int asked = 0;

	for (size_t si = 0; si < sizeof(steps) / sizeof(steps[0]); si++) {
		struct tls_seal s;
		struct stream st;
		struct objfs_tls_rx *rx;

		tls_seal_init(&s, 32, 0x11);
		stream_init(&st);
		wn = 0;
		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
			pattern(want + wn, sizes[i], (unsigned)i);
			add(&st, &s, 23, want + wn, sizes[i], pads[i]);
			wn += sizes[i];
			if (i == 2)
				add(&st, &s, 22, ticket, sizeof(ticket), 0); /* skipped */
		}
		add(&st, &s, 21, "\1\0", 2, 0); /* close_notify */
		ck_assert_int_eq(objfs_tls_rx_new(OBJFS_TLS_AES_128_GCM_SHA256, s.secret, 32, 0, &rx),
				 0);
		ck_assert_int_eq(drain(rx, &st, steps[si], got, &n, &asked), 0);
		ck_assert_uint_eq(n, wn);
		ck_assert_mem_eq(got, want, wn);
		ck_assert_int_eq(asked, 0);
		ck_assert_int_eq(objfs_tls_rx_read(rx, st.fd[0], got, 10, &asked), 0); /* stays ended */
		objfs_tls_rx_free(rx);
		stream_free(&st);
	}
}
END_TEST

/* KeyUpdate: the next records are under the next secret; an update asked
 * for is reported; AES-256-GCM / SHA-384 as well. */
START_TEST(test_tls_rx_key_update)
{
	static char want[40000], got[1 << 20];
	unsigned char ku[5] = { 24, 0, 0, 1, 1 };
	size_t slen = _i ? 48 : 32, n;
	unsigned suite = _i ? OBJFS_TLS_AES_256_GCM_SHA384 : OBJFS_TLS_AES_128_GCM_SHA256;
	struct objfs_tls_rx *rx;
	struct stream st;
	struct tls_seal s;
	int asked = 0;

	tls_seal_init(&s, slen, 0x5a);
	stream_init(&st);
	s.seq = 9; /* OpenSSL read 9 records under this secret before the takeover */
	pattern(want, sizeof(want), 3);
	add(&st, &s, 23, want, 10000, 0);
	ck_assert_int_eq(objfs_tls_rx_new(suite, s.secret, slen, 9, &rx), 0);
	add(&st, &s, 22, ku, sizeof(ku), 0); /* update_requested */
	tls_seal_update(&s);
	add(&st, &s, 23, want + 10000, 10000, 7);
	ku[4] = 0;
	add(&st, &s, 22, ku, sizeof(ku), 0);
	tls_seal_update(&s);
	add(&st, &s, 23, want + 20000, 16384, 0);
	add(&st, &s, 23, want + 36384, 3616, 0);
	ck_assert_int_eq(drain(rx, &st, 4096, got, &n, &asked), 0); /* the stream's end */
	ck_assert_uint_eq(n, sizeof(want));
	ck_assert_mem_eq(got, want, sizeof(want));
	ck_assert_int_eq(asked, 1);
	objfs_tls_rx_free(rx);
	stream_free(&st);
}
END_TEST

/*
 * Handshake messages across records (RFC 8446, 5.1): a ticket cut inside
 * its header and again inside its body, one longer than a record, and a
 * KeyUpdate cut in two after a whole ticket (the key changes after its
 * last byte): the application data around them byte-exact at every read
 * size, the update asked for reported.
 */
START_TEST(test_tls_rx_split_handshake)
{
	static const size_t steps[] = { 1, 100, 4096, 1 << 20 };
	static unsigned char t1[4 + 300], t2[4 + 20000], hs[4 + 40 + 5];
	static char want[8000], got[1 << 20];

	pattern((char *)t1, sizeof(t1), 1);
	memcpy(t1, "\x04\0\x01\x2c", 4); /* 300 */
	pattern((char *)t2, sizeof(t2), 2);
	memcpy(t2, "\x04\0\x4e\x20", 4); /* 20,000 */
	memset(hs, 0, sizeof(hs));
	memcpy(hs, "\x04\0\0\x28", 4); /* a ticket of 40, then KeyUpdate(update_requested) */
	memcpy(hs + 44, "\x18\0\0\1\1", 5);
	pattern(want, sizeof(want), 4);
	for (size_t si = 0; si < sizeof(steps) / sizeof(steps[0]); si++) {
		struct objfs_tls_rx *rx;
		struct stream st;
		struct tls_seal s;
		size_t n;
		int asked = 0;

		start(&s, &st, 0x21, &rx);
		add(&st, &s, 23, want, 1000, 0);
		add(&st, &s, 22, t1, 2, 0);
		add(&st, &s, 22, t1 + 2, 150, 3);
		add(&st, &s, 22, t1 + 152, sizeof(t1) - 152, 0);
		add(&st, &s, 23, want + 1000, 2000, 0);
		add(&st, &s, 22, t2, 16000, 0);
		add(&st, &s, 22, t2 + 16000, sizeof(t2) - 16000, 0);
		add(&st, &s, 23, want + 3000, 2000, 0);
		add(&st, &s, 22, hs, 44 + 3, 0);
		add(&st, &s, 22, hs + 47, 2, 0);
		tls_seal_update(&s);
		add(&st, &s, 23, want + 5000, 3000, 0);
		add(&st, &s, 21, "\1\0", 2, 0); /* close_notify */
		ck_assert_int_eq(drain(rx, &st, steps[si], got, &n, &asked), 0);
		ck_assert_uint_eq(n, sizeof(want));
		ck_assert_mem_eq(got, want, sizeof(want));
		ck_assert_int_eq(asked, 1);
		ck_assert_int_eq(objfs_tls_rx_pending(rx), 0);
		objfs_tls_rx_free(rx);
		stream_free(&st);
	}
}
END_TEST

/*
 * A ticket as long as one can be (RFC 8446 4.6.1), in records of 16,000
 * bytes, the last of them also starting the next ticket: taken.
 */
START_TEST(test_tls_rx_largest_ticket)
{
	static unsigned char t[OBJFS_TLS_RX_HS_MAX + 6];
	static char want[3000], got[1 << 16];
	const size_t len = OBJFS_TLS_RX_HS_MAX - 4;
	struct objfs_tls_rx *rx;
	struct stream st;
	struct tls_seal s;
	size_t n, at = 0;
	int asked = 0;

	pattern((char *)t, sizeof(t), 5);
	t[0] = 4;
	t[1] = (unsigned char)(len >> 16);
	t[2] = (unsigned char)(len >> 8);
	t[3] = (unsigned char)len;
	memcpy(t + OBJFS_TLS_RX_HS_MAX, "\x04\0\0\x02\xaa\xbb", 6); /* the next ticket */
	pattern(want, sizeof(want), 6);
	start(&s, &st, 0x44, &rx);
	add(&st, &s, 23, want, 1000, 0);
	while (at < OBJFS_TLS_RX_HS_MAX + 2) { /* the last record ends inside the next one */
		size_t k = OBJFS_TLS_RX_HS_MAX + 2 - at < 16000 ? OBJFS_TLS_RX_HS_MAX + 2 - at : 16000;

		add(&st, &s, 22, t + at, k, 0);
		at += k;
	}
	add(&st, &s, 22, t + at, 4, 0);
	add(&st, &s, 23, want + 1000, 2000, 0);
	ck_assert_int_eq(drain(rx, &st, 4096, got, &n, &asked), 0);
	ck_assert_uint_eq(n, sizeof(want));
	ck_assert_mem_eq(got, want, sizeof(want));
	objfs_tls_rx_free(rx);
	stream_free(&st);
}
END_TEST

/*
 * A handshake message the reader cannot take is refused as soon as its
 * record is read, not when the stream ends: the first bytes of another
 * type, a length longer than any ticket, with the socket left open.
 */
START_TEST(test_tls_rx_refused_at_once)
{
	static const struct { const char *b; size_t n; } bad[] = {
		{ "\x0d\0", 2 }, { "\x04\x03\0\0\0", 5 }, { "\x18", 1 },
	};
	static char got[4096];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct objfs_tls_rx *rx;
		struct stream st;
		struct tls_seal s;
		ssize_t k;
		int asked = 0;

		start(&s, &st, 0x45, &rx);
		add(&st, &s, 22, bad[i].b, bad[i].n, 0);
		ck_assert_int_eq(write(st.fd[1], st.buf, st.len), (ssize_t)st.len);
		k = objfs_tls_rx_read(rx, st.fd[0], got, sizeof(got), &asked);
		if (i == 2) /* a KeyUpdate's first byte: it may go on */
			ck_assert_int_eq(k, -EAGAIN);
		else
			ck_assert_msg(k == -EIO, "case %zu: %zd", i, k);
		objfs_tls_rx_free(rx);
		stream_free(&st);
	}
}
END_TEST

/* Every kind of damage: an error, and nothing of the damaged record. */
enum damage {
	D_CIPHERTEXT, D_TAG, D_HEADER_LEN, D_WRONG_SEQ, D_WRONG_KEY, D_PLAIN_ALERT,
	D_VERSION, D_TOO_SHORT, D_TOO_LONG, D_NO_TYPE, D_ALERT, D_HS_UNKNOWN, D_KU_NOT_LAST,
	D_KU_VALUE, D_HS_SPANS, D_CUT, D_INNER_TYPE, D_SKIP_RECORD, D_HS_INTERLEAVED,
	D_HS_PART_UNKNOWN, D_HS_HUGE, D_HS_ALERT, D_HS_EMPTY_DATA, D_HS_EMPTY, ND
};

START_TEST(test_tls_rx_damage)
{
	static char want[3000], got[1 << 16];
	unsigned char rec[REC_MAX + 5], zeros[32] = { 0 };
	struct objfs_tls_rx *rx;
	struct stream st;
	struct tls_seal s, other;
	size_t n, len;
	ssize_t k;
	int asked = 0, d = _i;

	tls_seal_init(&s, 32, 0x33);
	stream_init(&st);
	pattern(want, sizeof(want), 9);
	add(&st, &s, 23, want, 1000, 0); /* a good record first */
	switch (d) {
	case D_CIPHERTEXT:
	case D_TAG:
	case D_HEADER_LEN:
		len = seal_record(&s, 23, want + 1000, 2000, 0, rec);
		if (d == D_CIPHERTEXT)
			rec[5 + 700] ^= 0x01;
		else if (d == D_TAG)
			rec[len - 1] ^= 0x80;
		else
			rec[4] ^= 0x01; /* a byte shorter: the tag is not where it was */
		add_raw(&st, rec, len);
		break;
	case D_WRONG_SEQ:
		s.seq++;
		add(&st, &s, 23, want + 1000, 2000, 0);
		break;
	case D_WRONG_KEY:
		tls_seal_init(&other, 32, 0x34);
		add(&st, &other, 23, want + 1000, 2000, 0);
		break;
	case D_PLAIN_ALERT:
		add_raw(&st, "\x15\x03\x03\x00\x02\x02\x28", 7);
		break;
	case D_VERSION:
		len = seal_record(&s, 23, want + 1000, 2000, 0, rec);
		rec[2] = 1;
		add_raw(&st, rec, len);
		break;
	case D_TOO_SHORT:
		add_raw(&st, "\x17\x03\x03\x00\x10", 5);
		add_raw(&st, zeros, 16);
		break;
	case D_TOO_LONG:
		add_raw(&st, "\x17\x03\x03\x41\x01", 5);
		break;
	case D_NO_TYPE: { /* all zeros inside: no content type */
		unsigned char z[16] = { 0 };

		len = seal_record(&s, 0, z, 16, 0, rec);
		add_raw(&st, rec, len);
		break;
	}
	case D_ALERT:
		add(&st, &s, 21, "\2\x28", 2, 0); /* handshake_failure */
		break;
	case D_HS_UNKNOWN:
		add(&st, &s, 22, "\x0d\0\0\0", 4, 0); /* CertificateRequest */
		break;
	case D_KU_NOT_LAST:
		add(&st, &s, 22, "\x18\0\0\1\0\x04\0\0\0", 9, 0);
		break;
	case D_KU_VALUE:
		add(&st, &s, 22, "\x18\0\0\1\2", 5, 0);
		break;
	case D_HS_SPANS: /* a ticket's start, then the stream's end */
		add(&st, &s, 22, "\x04\0\0\x50\0\0", 6, 0);
		break;
	case D_HS_INTERLEAVED: /* a ticket's start, then application data (5.1) */
		add(&st, &s, 22, "\x04\0\0\x50\0\0", 6, 0);
		add(&st, &s, 23, want + 1000, 100, 0);
		break;
	case D_HS_PART_UNKNOWN: /* the first bytes of a CertificateRequest */
		add(&st, &s, 22, "\x0d\0", 2, 0);
		break;
	case D_HS_HUGE: /* longer than any ticket */
		add(&st, &s, 22, "\x04\x03\0\0\0", 5, 0);
		break;
	case D_HS_ALERT: /* a ticket's start, then close_notify */
		add(&st, &s, 22, "\x04\0\0\x50\0\0", 6, 0);
		add(&st, &s, 21, "\1\0", 2, 0);
		break;
	case D_HS_EMPTY_DATA: /* a ticket's start, an empty application data record, its end */
		add(&st, &s, 22, "\x04\0", 2, 0);
		add(&st, &s, 23, "", 0, 0);
		add(&st, &s, 22, "\0\x01\0", 3, 0);
		break;
	case D_HS_EMPTY: /* a handshake record of no bytes (5.1) */
		add(&st, &s, 22, "", 0, 0);
		break;
	case D_CUT:
		len = seal_record(&s, 23, want + 1000, 2000, 0, rec);
		add_raw(&st, rec, len - 1);
		break;
	case D_INNER_TYPE:
		add(&st, &s, 20, "\1", 1, 0); /* change_cipher_spec inside */
		break;
	case D_SKIP_RECORD: /* a record dropped on the way: the next fails */
		len = seal_record(&s, 23, want + 1000, 1000, 0, rec);
		add(&st, &s, 23, want + 2000, 1000, 0);
		break;
	}
	ck_assert_int_eq(objfs_tls_rx_new(OBJFS_TLS_AES_128_GCM_SHA256, s.secret, 32, 0, &rx), 0);
	k = drain(rx, &st, 4096, got, &n, &asked);
	ck_assert_msg(k == -EIO, "damage %d: read returned %zd", d, k);
	ck_assert_uint_eq(n, 1000); /* the good record, nothing of the damaged one */
	ck_assert_mem_eq(got, want, 1000);
	ck_assert_int_eq(objfs_tls_rx_read(rx, st.fd[0], got, 100, &asked), -EIO); /* stays failed */
	objfs_tls_rx_free(rx);
	stream_free(&st);
}
END_TEST

/* RFC 8448 (3, "Simple 1-RTT Handshake"): the server handshake traffic
 * secret's key and IV. */
START_TEST(test_tls_rx_expand_label)
{
	static const unsigned char secret[32] = {
		0xb6, 0x7b, 0x7d, 0x69, 0x0c, 0xc1, 0x6c, 0x4e, 0x75, 0xe5, 0x42, 0x13, 0xcb, 0x2d,
		0x37, 0xb4, 0xe9, 0xc9, 0x12, 0xbc, 0xde, 0xd9, 0x10, 0x5d, 0x42, 0xbe, 0xfd, 0x59,
		0xd3, 0x91, 0xad, 0x38 };
	static const unsigned char key[16] = { 0x3f, 0xce, 0x51, 0x60, 0x09, 0xc2, 0x17, 0x27,
					       0xd0, 0xf2, 0xe4, 0xe8, 0x6e, 0xe4, 0x03, 0xbc };
	static const unsigned char iv[12] = { 0x5d, 0x31, 0x3e, 0xb2, 0x67, 0x12, 0x76, 0xee,
					      0x13, 0x00, 0x0b, 0x30 };
	unsigned char out[16];
	struct objfs_tls_rx *rx;

	ck_assert_int_eq(objfs_tls_rx_expand_label(secret, 32, "key", out, 16), 0);
	ck_assert_mem_eq(out, key, 16);
	ck_assert_int_eq(objfs_tls_rx_expand_label(secret, 32, "iv", out, 12), 0);
	ck_assert_mem_eq(out, iv, 12);
	/* suites and lengths that do not go together */
	ck_assert_int_eq(objfs_tls_rx_new(0x1303, secret, 32, 0, &rx), -EINVAL);
	ck_assert_int_eq(objfs_tls_rx_new(OBJFS_TLS_AES_256_GCM_SHA384, secret, 32, 0, &rx),
			 -EINVAL);
	ck_assert_int_eq(objfs_tls_rx_new(OBJFS_TLS_AES_128_GCM_SHA256, secret, 48, 0, &rx),
			 -EINVAL);
}
END_TEST

static Suite *tls_rx_suite(void)
{
	Suite *s = suite_create("tls_rx");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_tls_rx_stream);
	tcase_add_loop_test(tc, test_tls_rx_key_update, 0, 2);
	tcase_add_test(tc, test_tls_rx_split_handshake);
	tcase_add_test(tc, test_tls_rx_largest_ticket);
	tcase_add_test(tc, test_tls_rx_refused_at_once);
	tcase_add_loop_test(tc, test_tls_rx_damage, 0, ND);
	tcase_add_test(tc, test_tls_rx_expand_label);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(tls_rx_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
