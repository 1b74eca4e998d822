/* Unit tests of src/util/range.c: Content-Range parsing and range arithmetic. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>

#include "range.h"

static const struct {
	const char *in;
	int ok;
	int64_t first, last, total;
} cr[] = {
	{ "bytes 0-0/1", 1, 0, 0, 1 },
	{ "bytes 100-199/1000", 1, 100, 199, 1000 },
	{ "  bytes 5-9/*\r\n", 1, 5, 9, -1 },
	{ "BYTES 0-4095/4096", 1, 0, 4095, 4096 },
	{ "bytes 0-9007199254740991/9007199254740992", 1, 0, 9007199254740991LL,
	  9007199254740992LL }, /* 2^53: OBJFS_OBJECT_SIZE_MAX */
	{ "bytes 0-9/9007199254740993", 0, 0, 0, 0 },   /* total past it */
	{ "bytes 9223372036854775706-9223372036854775806/9223372036854775807", 0, 0, 0, 0 },
	{ "bytes 10-5/100", 0, 0, 0, 0 },        /* last < first */
	{ "bytes 0-100/100", 0, 0, 0, 0 },       /* last beyond total */
	{ "bytes */100", 0, 0, 0, 0 },           /* unsatisfied form */
	{ "bytes -5-9/10", 0, 0, 0, 0 },
	{ "items 0-1/2", 0, 0, 0, 0 },
	{ "bytes 0-1/2 junk", 0, 0, 0, 0 },
	{ "bytes 0-99999999999999999999/1", 0, 0, 0, 0 }, /* overflow */
	{ "", 0, 0, 0, 0 },
	{ "bytes 1-2", 0, 0, 0, 0 },
};

START_TEST(test_content_range)
{
	int64_t f = -7, l = -7, t = -7;
	int rc = objfs_parse_content_range(cr[_i].in, &f, &l, &t);

	if (cr[_i].ok) {
		ck_assert_int_eq(rc, 0);
		ck_assert_int_eq(f, cr[_i].first);
		ck_assert_int_eq(l, cr[_i].last);
		ck_assert_int_eq(t, cr[_i].total);
	} else {
		ck_assert_int_eq(rc, -EPROTO);
	}
}
END_TEST

START_TEST(test_clamp)
{
	ck_assert_uint_eq(objfs_range_clamp(100, 0, 10), 10);
	ck_assert_uint_eq(objfs_range_clamp(100, 95, 10), 5);
	ck_assert_uint_eq(objfs_range_clamp(100, 100, 10), 0);
	ck_assert_uint_eq(objfs_range_clamp(100, 1000, 10), 0);
	ck_assert_uint_eq(objfs_range_clamp(0, 0, 10), 0);
	ck_assert_uint_eq(objfs_range_clamp(100, -1, 10), 0);
	ck_assert_uint_eq(objfs_range_clamp(INT64_MAX, INT64_MAX - 3, 10), 3);
}
END_TEST

START_TEST(test_split)
{
	int64_t offs[8];
	size_t lens[8], n, sum = 0;

	n = objfs_range_split(0, 10, 4, 8, offs, lens);
	ck_assert_uint_eq(n, 3);
	ck_assert_int_eq(offs[0], 0); ck_assert_uint_eq(lens[0], 4);
	ck_assert_int_eq(offs[1], 4); ck_assert_uint_eq(lens[1], 4);
	ck_assert_int_eq(offs[2], 8); ck_assert_uint_eq(lens[2], 2);

	n = objfs_range_split(3, 6, 4, 8, offs, lens); /* unaligned start and end */
	ck_assert_uint_eq(n, 3);
	ck_assert_int_eq(offs[0], 3); ck_assert_uint_eq(lens[0], 1);
	ck_assert_int_eq(offs[1], 4); ck_assert_uint_eq(lens[1], 4);
	ck_assert_int_eq(offs[2], 8); ck_assert_uint_eq(lens[2], 1);
	ck_assert_uint_eq(objfs_range_split(0, 0, 4, 8, offs, lens), 0);

	n = objfs_range_split(1, 100, 4, 8, offs, lens); /* capped at max */
	ck_assert_uint_eq(n, 8);
	for (size_t i = 0; i < n; i++) {
		ck_assert_uint_le(lens[i], 4);
		ck_assert_int_eq((offs[i] + (int64_t)lens[i] - 1) / 4, offs[i] / 4);
		if (i)
			ck_assert_int_eq(offs[i], offs[i - 1] + (int64_t)lens[i - 1]);
		sum += lens[i];
	}
	ck_assert_uint_eq(sum, 3 + 7 * 4);
}
END_TEST

static Suite *range_suite(void)
{
	Suite *s = suite_create("range");
	TCase *tc = tcase_create("core");

	tcase_add_loop_test(tc, test_content_range, 0, sizeof(cr) / sizeof(cr[0]));
	tcase_add_test(tc, test_clamp);
	tcase_add_test(tc, test_split);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(range_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
