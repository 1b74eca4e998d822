/*
 * Unit tests of src/cache/prefetch.c: runs earn windows by their evidence,
 * several runs per handle, reordered and read-around requests, jumps.
 */
#include "config.h"

#include <check.h>
#include <stdlib.h>

#include "prefetch.h"

#define KiB (1 << 10)
#define MiB (1 << 20)
#define GiB (1LL << 30)
#define WHOLE (4 * MiB)

static struct objfs_prefetch_plan rd(struct objfs_prefetch *p, int64_t off, size_t len)
{
	struct objfs_prefetch_plan pl;

	objfs_prefetch_on_read(p, off, len, GiB, &pl);
	return pl;
}

/* From offset 0: two reads as asked, then a window of half the evidence,
 * each read extending it past its end; whole blocks once a block is read. */
START_TEST(test_sequential_earns)
{
	struct objfs_prefetch p;
	struct objfs_prefetch_plan pl;
	int64_t off = 0, ahead = 0;
	const size_t rs = 128 * KiB;

	objfs_prefetch_init(&p, WHOLE, 64 * MiB);
	for (int i = 0; i < 1100; i++, off += (int64_t)rs) {
		pl = rd(&p, off, rs);
		if (i < 2) {
			ck_assert_int_eq(pl.kind, OBJFS_READ_RANDOM);
			ck_assert_uint_eq(pl.len, 0);
			continue;
		}
		ck_assert_int_eq(pl.kind, OBJFS_READ_SEQ);
		ck_assert_int_eq(pl.whole, off + (int64_t)rs >= WHOLE);
		/* never past half the evidence, never what was asked for already */
		ck_assert_int_le(pl.off + (int64_t)pl.len,
				 off + (int64_t)rs + (off + (int64_t)rs) / 2);
		ck_assert_int_le(pl.off + (int64_t)pl.len, off + (int64_t)rs + 64 * MiB);
		if (pl.len) {
			ck_assert_int_ge(pl.off, off + (int64_t)rs);
			ck_assert_int_ge(pl.off, ahead);
			ahead = pl.off + (int64_t)pl.len;
		}
	}
	ck_assert_int_eq(ahead, off + 64 * MiB); /* the cap */
	ck_assert(p.streaming);
}
END_TEST

START_TEST(test_window_clamped_to_eof)
{
	struct objfs_prefetch p;
	struct objfs_prefetch_plan pl;

	objfs_prefetch_init(&p, WHOLE, 64 * MiB);
	for (int64_t off = 0; off < 10 * MiB; off += MiB) {
		objfs_prefetch_on_read(&p, off, MiB, 10 * MiB, &pl);
		ck_assert_int_le(pl.off + (int64_t)pl.len, 10 * MiB);
	}
}
END_TEST

/* A header read at 0 and a jump: no run, no window (each format's header). */
START_TEST(test_header_then_jump)
{
	struct objfs_prefetch p;
	struct objfs_prefetch_plan pl;

	objfs_prefetch_init(&p, WHOLE, 64 * MiB);
	pl = rd(&p, 0, 16 * KiB);
	ck_assert_int_eq(pl.kind, OBJFS_READ_RANDOM);
	ck_assert_uint_eq(pl.len, 0);
	pl = rd(&p, 16 * KiB, 16 * KiB); /* one continuation: chance */
	ck_assert_uint_eq(pl.len, 0);
	pl = rd(&p, 500 * MiB, 16 * KiB);
	ck_assert_int_eq(pl.kind, OBJFS_READ_RANDOM);
	ck_assert_uint_eq(pl.len, 0);
	ck_assert(!pl.whole);
	ck_assert(!p.streaming);
}
END_TEST

/* Two runs on one handle, interleaved (a zip member and its directory, two
 * columns): both become sequential, each with its own window. */
START_TEST(test_two_runs)
{
	struct objfs_prefetch p;
	struct objfs_prefetch_plan pl;
	const size_t rs = 64 * KiB;

	objfs_prefetch_init(&p, WHOLE, 64 * MiB);
	for (int i = 0; i < 6; i++) {
		pl = rd(&p, 100 * MiB + i * (int64_t)rs, rs);
		if (i >= 2) {
			ck_assert_int_eq(pl.kind, OBJFS_READ_SEQ);
			ck_assert_int_ge(pl.off, 100 * MiB + (i + 1) * (int64_t)rs);
			ck_assert_int_lt(pl.off, 300 * MiB);
		}
		pl = rd(&p, 300 * MiB + i * (int64_t)rs, rs);
		if (i >= 2) {
			ck_assert_int_eq(pl.kind, OBJFS_READ_SEQ);
			ck_assert_int_ge(pl.off, 300 * MiB + (i + 1) * (int64_t)rs);
		}
	}
}
END_TEST

/* A sequential run survives a few random reads elsewhere (they take other
 * slots) and goes on where it was, window and all. */
START_TEST(test_run_survives_jumps)
{
	struct objfs_prefetch p;
	struct objfs_prefetch_plan pl;
	const size_t rs = MiB;
	int64_t off = 0;

	objfs_prefetch_init(&p, WHOLE, 64 * MiB);
	for (; off < 8 * MiB; off += (int64_t)rs)
		pl = rd(&p, off, rs);
	ck_assert(pl.whole);
	for (int i = 0; i < OBJFS_PREFETCH_RUNS - 1; i++) {
		pl = rd(&p, 200 * MiB + i * 50 * MiB, 4 * KiB);
		ck_assert_int_eq(pl.kind, OBJFS_READ_RANDOM);
		ck_assert_uint_eq(pl.len, 0);
	}
	pl = rd(&p, off, rs);
	ck_assert_int_eq(pl.kind, OBJFS_READ_SEQ);
	ck_assert(pl.whole);
	ck_assert_uint_gt(pl.len, 0);
}
END_TEST

/* Out-of-order requests near a run (the kernel's readahead on several
 * threads; an mmap fault's read-around centred on it) stay with the run:
 * those behind its end are "around" and prefetch nothing. */
START_TEST(test_reordered_and_around)
{
	struct objfs_prefetch p;
	struct objfs_prefetch_plan pl;
	const size_t rs = 128 * KiB;

	objfs_prefetch_init(&p, WHOLE, 64 * MiB);
	for (int64_t off = 0; off < 4 * MiB; off += (int64_t)rs)
		pl = rd(&p, off, rs);
	pl = rd(&p, 4 * MiB + (int64_t)rs, rs); /* skips one: still the run */
	ck_assert_int_eq(pl.kind, OBJFS_READ_SEQ);
	pl = rd(&p, 4 * MiB, rs);               /* the one skipped, late */
	ck_assert_int_eq(pl.kind, OBJFS_READ_AROUND);
	ck_assert_uint_eq(pl.len, 0);
	ck_assert(pl.whole);
	pl = rd(&p, 2 * MiB, rs);               /* read-around behind the end */
	ck_assert_int_eq(pl.kind, OBJFS_READ_AROUND);
	pl = rd(&p, 4 * MiB + 2 * (int64_t)rs, rs);
	ck_assert_int_eq(pl.kind, OBJFS_READ_SEQ);
}
END_TEST

/* A run that catches up with a later one becomes one run; a run inside
 * another adds nothing. */
START_TEST(test_runs_merge)
{
	struct objfs_prefetch p;
	struct objfs_prefetch_plan pl;
	const size_t rs = 64 * KiB;

	objfs_prefetch_init(&p, WHOLE, 64 * MiB);
	pl = rd(&p, 10 * MiB + 2 * (int64_t)rs, rs); /* a request that came first */
	pl = rd(&p, 10 * MiB, rs);
	pl = rd(&p, 10 * MiB + (int64_t)rs, rs); /* reaches the first: one run of 3 reads */
	ck_assert_int_eq(pl.kind, OBJFS_READ_SEQ);
	pl = rd(&p, 10 * MiB + 3 * (int64_t)rs, rs);
	ck_assert_int_eq(pl.kind, OBJFS_READ_SEQ);
}
END_TEST

/* The cache's cap cut a prefetch short: the window is asked again from
 * where it stopped. */
START_TEST(test_reached)
{
	struct objfs_prefetch p;
	struct objfs_prefetch_plan pl;
	int64_t off = 0;

	objfs_prefetch_init(&p, WHOLE, 64 * MiB);
	for (; off < 3 * MiB; off += MiB)
		pl = rd(&p, off, MiB);
	ck_assert_uint_gt(pl.len, 0);
	objfs_prefetch_reached(&p, pl.off, pl.off);
	pl = rd(&p, off, MiB);
	ck_assert_int_eq(pl.off, off + MiB); /* from the read's end again */
}
END_TEST

static Suite *prefetch_suite(void)
{
	Suite *s = suite_create("prefetch");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_sequential_earns);
	tcase_add_test(tc, test_window_clamped_to_eof);
	tcase_add_test(tc, test_header_then_jump);
	tcase_add_test(tc, test_two_runs);
	tcase_add_test(tc, test_run_survives_jumps);
	tcase_add_test(tc, test_reordered_and_around);
	tcase_add_test(tc, test_runs_merge);
	tcase_add_test(tc, test_reached);
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
