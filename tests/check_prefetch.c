/*
 * Unit tests of src/cache/prefetch.c: sequential, strided, random, seek-back
 * and single far-read patterns.
 */
#include "config.h"

#include <check.h>
#include <stdlib.h>

#include "prefetch.h"

#define MiB (1 << 20)
#define GiB (1LL << 30)

START_TEST(test_sequential_grows)
{
	struct objfs_prefetch p;
	struct objfs_prefetch_plan pl;
	int64_t off = 0;
	size_t last_window = 0;

	objfs_prefetch_init(&p, 1 * MiB, 64 * MiB);
	for (int i = 0; i < 20; i++, off += 128 * 1024) {
		objfs_prefetch_on_read(&p, off, 128 * 1024, GiB, &pl);
		ck_assert(pl.sequential);
		ck_assert_uint_ge(p.window, last_window);
		last_window = p.window;
		if (pl.len) /* never re-prefetch what was asked for already */
			ck_assert_int_ge(pl.off, off + 128 * 1024);
	}
	ck_assert_uint_eq(p.window, 64 * MiB); /* capped */
	ck_assert_int_le(p.ahead, off + 64 * MiB);
}
END_TEST

START_TEST(test_window_clamped_to_eof)
{
	struct objfs_prefetch p;
	struct objfs_prefetch_plan pl;

	objfs_prefetch_init(&p, 1 * MiB, 64 * MiB);
	objfs_prefetch_on_read(&p, 0, 4096, 10000, &pl);
	ck_assert(pl.sequential);
	ck_assert_int_eq(pl.off, 4096);
	ck_assert_uint_eq(pl.len, 10000 - 4096);
	objfs_prefetch_on_read(&p, 4096, 4096, 10000, &pl);
	ck_assert_uint_eq(pl.len, 0); /* all of it is on its way already */
}
END_TEST

START_TEST(test_random_stops_prefetch)
{
	struct objfs_prefetch p;
	struct objfs_prefetch_plan pl;
	static const int64_t offs[] = { 500 * MiB, 3 * MiB, 900 * MiB, 77 * MiB, 10 * MiB };

	objfs_prefetch_init(&p, 1 * MiB, 64 * MiB);
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		objfs_prefetch_on_read(&p, offs[i], 4096, GiB, &pl);
		if (i >= 1) {
			ck_assert(!pl.sequential);
			ck_assert_uint_eq(pl.len, 0);
		}
	}
	ck_assert(p.random);
	/* One read right after the last one is chance: still random. */
	objfs_prefetch_on_read(&p, 10 * MiB + 4096, 4096, GiB, &pl);
	ck_assert(!pl.sequential);
	ck_assert(p.random);
	ck_assert_uint_eq(pl.len, 0);
	/* A second one in a row starts over with the small window. */
	objfs_prefetch_on_read(&p, 10 * MiB + 8192, 4096, GiB, &pl);
	ck_assert(pl.sequential);
	ck_assert_uint_eq(p.window, 1 * MiB);
	ck_assert_uint_gt(pl.len, 0);
	/* Random again, then a near read followed by a far one stays random. */
	objfs_prefetch_on_read(&p, 500 * MiB, 4096, GiB, &pl);
	objfs_prefetch_on_read(&p, 100 * MiB, 4096, GiB, &pl);
	ck_assert(p.random);
	objfs_prefetch_on_read(&p, 100 * MiB + 4096, 4096, GiB, &pl);
	ck_assert(!pl.sequential);
	objfs_prefetch_on_read(&p, 300 * MiB, 4096, GiB, &pl);
	ck_assert(!pl.sequential);
	ck_assert(p.random);
}
END_TEST

START_TEST(test_small_seeks_tolerated)
{
	struct objfs_prefetch p;
	struct objfs_prefetch_plan pl;

	objfs_prefetch_init(&p, 1 * MiB, 64 * MiB);
	objfs_prefetch_on_read(&p, 0, MiB, GiB, &pl);
	objfs_prefetch_on_read(&p, MiB, MiB, GiB, &pl);
	/* Kernel readahead reorders: a read slightly behind, then slightly ahead. */
	objfs_prefetch_on_read(&p, MiB + 512 * 1024, 128 * 1024, GiB, &pl);
	ck_assert(pl.sequential);
	objfs_prefetch_on_read(&p, 3 * MiB, MiB, GiB, &pl);
	ck_assert(pl.sequential);
	ck_assert(!p.random);
	ck_assert_uint_ge(p.window, 4 * MiB);
}
END_TEST

START_TEST(test_strided)
{
	struct objfs_prefetch p;
	struct objfs_prefetch_plan pl;

	/* Large strides (every 64 MiB) look random: no wasted prefetch. */
	objfs_prefetch_init(&p, 1 * MiB, 64 * MiB);
	for (int i = 1; i < 8; i++)
		objfs_prefetch_on_read(&p, (int64_t)i * 64 * MiB, 64 * 1024, 100 * GiB, &pl);
	ck_assert(p.random);
	ck_assert_uint_eq(pl.len, 0);
	/* Small strides (1 MiB) stay sequential. */
	objfs_prefetch_init(&p, 1 * MiB, 64 * MiB);
	for (int i = 0; i < 8; i++)
		objfs_prefetch_on_read(&p, (int64_t)i * MiB, 64 * 1024, 100 * GiB, &pl);
	ck_assert(!p.random);
}
END_TEST

START_TEST(test_seek_back_far)
{
	struct objfs_prefetch p;
	struct objfs_prefetch_plan pl;

	objfs_prefetch_init(&p, 1 * MiB, 64 * MiB);
	for (int64_t off = 0; off < 32 * MiB; off += MiB)
		objfs_prefetch_on_read(&p, off, MiB, GiB, &pl);
	ck_assert_uint_gt(p.window, 1 * MiB);
	/* Rewind to the start (re-reading a file): one far read resets the
	 * window but does not yet mean random. */
	objfs_prefetch_on_read(&p, 0, MiB, GiB, &pl);
	ck_assert(pl.sequential);
	ck_assert_uint_eq(p.window, 1 * MiB);
	objfs_prefetch_on_read(&p, MiB, MiB, GiB, &pl);
	ck_assert(pl.sequential);
	ck_assert_uint_gt(pl.len, 0);
}
END_TEST

/* A far read is served as asked; two continuations in a row make a stream. */
START_TEST(test_far_read_as_asked)
{
	struct objfs_prefetch p;
	struct objfs_prefetch_plan pl;

	objfs_prefetch_init(&p, 1 * MiB, 64 * MiB);
	objfs_prefetch_on_read(&p, 500 * MiB, 4096, GiB, &pl); /* a first read, far from 0 */
	ck_assert(!pl.sequential);
	ck_assert_uint_eq(pl.len, 0);
	ck_assert(!p.random);
	/* it continues: once is chance (a pread split in two FUSE requests) */
	objfs_prefetch_on_read(&p, 500 * MiB + 4096, MiB, GiB, &pl);
	ck_assert(!pl.sequential);
	ck_assert_uint_eq(pl.len, 0);
	objfs_prefetch_on_read(&p, 501 * MiB + 4096, MiB, GiB, &pl); /* twice: a stream */
	ck_assert(pl.sequential);
	ck_assert_int_eq(pl.off, 502 * MiB + 4096);
	ck_assert_uint_eq(pl.len, 1 * MiB);
	/* mid-stream, one far read: as asked; two continuations start it again */
	objfs_prefetch_on_read(&p, 100 * MiB, MiB, GiB, &pl);
	ck_assert(!pl.sequential);
	ck_assert_uint_eq(pl.len, 0);
	objfs_prefetch_on_read(&p, 101 * MiB, MiB, GiB, &pl);
	ck_assert(!pl.sequential);
	objfs_prefetch_on_read(&p, 102 * MiB, MiB, GiB, &pl);
	ck_assert(pl.sequential);
	ck_assert_uint_gt(pl.len, 0);
	/* random preads near each other: a read within 8 MiB of the last one's
	 * end, then its split continuation, is not a stream */
	objfs_prefetch_init(&p, 1 * MiB, 64 * MiB);
	objfs_prefetch_on_read(&p, 50 * MiB, MiB, GiB, &pl);
	objfs_prefetch_on_read(&p, 51 * MiB, 4096, GiB, &pl);    /* split: chance */
	objfs_prefetch_on_read(&p, 47 * MiB, MiB, GiB, &pl);     /* 4 MiB behind */
	ck_assert(!pl.sequential);
	objfs_prefetch_on_read(&p, 48 * MiB, 4096, GiB, &pl);    /* split again */
	ck_assert(!pl.sequential);
	ck_assert_uint_eq(pl.len, 0);
}
END_TEST

static Suite *prefetch_suite(void)
{
	Suite *s = suite_create("prefetch");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_sequential_grows);
	tcase_add_test(tc, test_window_clamped_to_eof);
	tcase_add_test(tc, test_random_stops_prefetch);
	tcase_add_test(tc, test_small_seeks_tolerated);
	tcase_add_test(tc, test_strided);
	tcase_add_test(tc, test_seek_back_far);
	tcase_add_test(tc, test_far_read_as_asked);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(prefetch_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
