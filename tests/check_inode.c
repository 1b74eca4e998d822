/*
 * Unit tests of src/inode.c with a fake store (no network): concurrent
 * lookups of one directory share one listing, its success and its failure.
 * A failed listing used to be repeated by every thread that had waited for
 * it, one timeout each, so N lookups of a stalled directory took N
 * timeouts (found with tests/integration/faultproxy.py). Lookups in a
 * backend with its own lookup (S3) never list the directory (issue 14).
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "inode.h"
#include "listing.h"
#include "store.h"

static atomic_int list_calls;
static atomic_int list_fail; /* the next listings fail with -EIO */

static int fake_list(struct objfs_store *s, const char *path, struct objfs_listing *out)
{
	(void)s;
	(void)path;
	atomic_fetch_add(&list_calls, 1);
	usleep(300 * 1000); /* long enough for every thread to queue behind it */
	if (atomic_load(&list_fail))
		return -EIO;
	return objfs_listing_add(out, "a.bin", 5, 0, 123, 1);
}

static int fake_stat(struct objfs_store *s, const char *path, struct objfs_stat *st)
{
	(void)s;
	(void)path;
	(void)st;
	return -ENOENT;
}

/* Entries of handle @d (a listing that ended), their names into @names
 * (NULL: not kept), '/' after a directory's. */
static size_t snap_count(struct objfs_dirsnap *d, char names[][NAME_MAX + 2], size_t max)
{
	struct objfs_attr a;
	char name[NAME_MAX + 1];
	size_t i = 0;
	int r;

	while ((r = objfs_dirsnap_entry(d, i, 0, name, &a, NULL, NULL)) == 1) {
		if (names && i < max)
			snprintf(names[i], NAME_MAX + 2, "%s%s", name, a.is_dir ? "/" : "");
		i++;
	}
	ck_assert_int_eq(r, 0);
	return i;
}

static const struct objfs_store_ops fake_ops = { .name = "fake", .list = fake_list,
						 .stat = fake_stat };

struct lookup_arg {
	struct objfs_inodes *t;
	int err;
};

static void *lookup_run(void *p)
{
	struct lookup_arg *a = p;
	struct objfs_attr at;

	a->err = objfs_inode_lookup(a->t, OBJFS_ROOT_INO, "a.bin", &at);
	if (!a->err)
		objfs_inode_forget(a->t, at.ino, 1);
	return NULL;
}

/* Three lookups at once: returns how many listings they caused. */
static int lookups3(struct objfs_inodes *t, int want_err)
{
	struct lookup_arg a[3];
	pthread_t th[3];
	int before = atomic_load(&list_calls);

	for (int i = 0; i < 3; i++) {
		a[i] = (struct lookup_arg){ t, 1 };
		ck_assert_int_eq(pthread_create(&th[i], NULL, lookup_run, &a[i]), 0);
	}
	for (int i = 0; i < 3; i++) {
		pthread_join(th[i], NULL);
		ck_assert_int_eq(a[i].err, want_err);
	}
	return atomic_load(&list_calls) - before;
}

START_TEST(test_waiters_share_the_listing)
{
	struct objfs_store st = { .ops = &fake_ops };
	struct objfs_inodes *t;

	ck_assert_int_eq(objfs_inodes_new(&st, 60, 60, &t), 0);
	/* failing: one listing, its error for all three */
	atomic_store(&list_fail, 1);
	ck_assert_int_eq(lookups3(t, -EIO), 1);
	/* a failure is not remembered: the next lookups list again, and share
	 * the success */
	atomic_store(&list_fail, 0);
	ck_assert_int_eq(lookups3(t, 0), 1);
	/* within list_ttl: no listing at all */
	ck_assert_int_eq(lookups3(t, 0), 0);
	objfs_inodes_free(t);
}
END_TEST

/*
 * A backend with a lookup of its own (as S3's HEAD + one-key listing): a
 * flat "bucket" where "f.bin" is a file (its type flips with flip_type),
 * "d" a directory, "both" an object and a prefix, and nothing else; paths
 * asked are recorded.
 */
static atomic_int lk_calls, lk_lists, flip_type;
static char lk_last[256];

static int lk_lookup(struct objfs_store *s, const char *path, struct objfs_stat *st)
{
	(void)s;
	atomic_fetch_add(&lk_calls, 1);
	snprintf(lk_last, sizeof(lk_last), "%s", path);
	memset(st, 0, sizeof(*st));
	st->size = st->mtime = -1;
	if (!strcmp(path, "f.bin") && !atomic_load(&flip_type)) {
		st->size = 10;
		st->mtime = 5;
		snprintf(st->etag, sizeof(st->etag), "\"e1\"");
		return 0;
	}
	if (!strcmp(path, "d") || !strcmp(path, "both") || !strcmp(path, "f.bin"))
		return st->is_dir = 1, 0;
	if (!strcmp(path, "d/x.bin")) {
		st->size = 3;
		return 0;
	}
	return -ENOENT;
}

static int lk_list(struct objfs_store *s, const char *path, struct objfs_listing *out)
{
	(void)s;
	(void)path;
	atomic_fetch_add(&lk_lists, 1);
	if (objfs_listing_add(out, "d", 1, 1, -1, -1) || objfs_listing_add(out, "both", 4, 1, -1, -1))
		return -ENOMEM;
	return objfs_listing_add(out, "f.bin", 5, 0, 10, 5);
}

static const struct objfs_store_ops lk_ops = { .name = "lk", .list = lk_list, .stat = fake_stat,
					       .lookup = lk_lookup };

START_TEST(test_direct_lookup)
{
	struct objfs_store st = { .ops = &lk_ops };
	struct objfs_inodes *t;
	struct objfs_attr a, b;
	struct objfs_dirsnap *snap;

	atomic_store(&lk_calls, 0);
	atomic_store(&lk_lists, 0);
	atomic_store(&flip_type, 0);
	ck_assert_int_eq(objfs_inodes_new(&st, 60, 60, &t), 0);
	/* One file of an unlisted directory: one lookup, no listing. */
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &a), 0);
	ck_assert_int_eq(a.is_dir, 0);
	ck_assert_int_eq(a.size, 10);
	ck_assert_str_eq(a.etag, "\"e1\"");
	ck_assert_int_eq(atomic_load(&lk_calls), 1);
	ck_assert_int_eq(atomic_load(&lk_lists), 0);
	/* Again within attr_ttl: nothing asked, the same inode. */
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &b), 0);
	ck_assert_int_eq(b.ino, a.ino);
	ck_assert_int_eq(atomic_load(&lk_calls), 1);
	/* A missing name: one lookup, -ENOENT. */
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "nope", &b), -ENOENT);
	ck_assert_int_eq(atomic_load(&lk_calls), 2);
	/* A directory, and a name inside it: the store sees the whole path. */
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "d", &b), 0);
	ck_assert_int_eq(b.is_dir, 1);
	ck_assert_int_eq(objfs_inode_lookup(t, b.ino, "x.bin", &b), 0);
	ck_assert_str_eq(lk_last, "d/x.bin");
	ck_assert_int_eq(b.size, 3);
	/* An object that is also a prefix is a directory. */
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "both", &b), 0);
	ck_assert_int_eq(b.is_dir, 1);
	ck_assert_int_eq(atomic_load(&lk_lists), 0);
	/* readdir lists; lookups then come from the fresh listing, inodes kept. */
	ck_assert_int_eq(objfs_inode_opendir(t, OBJFS_ROOT_INO, &snap), 0);
	ck_assert_uint_eq(snap_count(snap, NULL, 0), 3);
	objfs_dirsnap_free(snap);
	ck_assert_int_eq(atomic_load(&lk_lists), 1);
	int calls = atomic_load(&lk_calls);
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &b), 0);
	ck_assert_int_eq(b.ino, a.ino);
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "nope", &b), -ENOENT);
	ck_assert_int_eq(atomic_load(&lk_calls), calls);
	objfs_inodes_free(t);

	/* attr_ttl 0: every lookup asks again; a type change makes a new inode. */
	ck_assert_int_eq(objfs_inodes_new(&st, 0, 0, &t), 0);
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &a), 0);
	calls = atomic_load(&lk_calls);
	atomic_store(&flip_type, 1);
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &b), 0);
	ck_assert_int_eq(atomic_load(&lk_calls), calls + 1);
	ck_assert_int_eq(b.is_dir, 1);
	ck_assert_int_ne(b.ino, a.ino);
	atomic_store(&flip_type, 0);
	objfs_inodes_free(t);

	/* TTLs of forever (attr_timeout=inf): asked once, never again. */
	ck_assert_int_eq(objfs_inodes_new(&st, INFINITY, INFINITY, &t), 0);
	calls = atomic_load(&lk_calls);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &a), 0);
	ck_assert_int_eq(objfs_inode_getattr(t, a.ino, &b), 0);
	ck_assert_int_eq(atomic_load(&lk_calls), calls + 1);
	objfs_inodes_free(t);
}
END_TEST

/*
 * A deep tree (security audit, finding 9): every directory holds "d" and,
 * at the bottom, "f.bin". Each node used to keep its full path, so a walk
 * to depth N cost O(N^2) bytes (825 MiB at 20,000); with names and parent
 * pointers it is linear. The store sees the right path at every depth.
 */
static atomic_int deep_bad;

static int deep_list(struct objfs_store *s, const char *path, struct objfs_listing *out)
{
	size_t depth = strlen(path) ? (strlen(path) + 1) / 2 : 0; /* "d/d/d" */

	(void)s;
	for (size_t i = 0; i < depth; i++)
		if (path[2 * i] != 'd' || (i + 1 < depth && path[2 * i + 1] != '/'))
			atomic_fetch_add(&deep_bad, 1);
	if (depth == 2000)
		return objfs_listing_add(out, "f.bin", 5, 0, 7, 1);
	return objfs_listing_add(out, "d", 1, 1, -1, -1);
}

static int deep_stat(struct objfs_store *s, const char *path, struct objfs_stat *st)
{
	(void)s;
	if (strlen(path) != 2000 * 2 + 5 || strcmp(path + 4000, "f.bin") != 0)
		atomic_fetch_add(&deep_bad, 1);
	memset(st, 0, sizeof(*st));
	st->size = 7;
	st->mtime = 1;
	snprintf(st->etag, sizeof(st->etag), "\"e\"");
	return 0;
}

static const struct objfs_store_ops deep_ops = { .name = "deep", .list = deep_list,
						 .stat = deep_stat };

START_TEST(test_deep_tree_linear)
{
	struct objfs_store st = { .ops = &deep_ops };
	struct objfs_inodes *t;
	struct objfs_attr a;
	uint64_t ino = OBJFS_ROOT_INO;
	size_t before, grew;
	char *path = NULL;
	int keep;

	ck_assert_int_eq(objfs_inodes_new(&st, 60, 60, &t), 0);
	before = mallinfo2().uordblks;
	for (int i = 0; i < 2000; i++) {
		ck_assert_int_eq(objfs_inode_lookup(t, ino, "d", &a), 0);
		ino = a.ino;
	}
	grew = mallinfo2().uordblks - before;
	/* 2,000 nodes: a few hundred bytes each, not 2,000 paths of ~2 KiB */
	ck_assert_msg(grew < 2000 * 512, "2,000 nested directories took %zu bytes", grew);
	ck_assert_int_eq(objfs_inode_lookup(t, ino, "f.bin", &a), 0);
	ck_assert_int_eq(objfs_inode_open(t, a.ino, &a, &keep, &path), 0);
	ck_assert_uint_eq(strlen(path), 4005);
	ck_assert_str_eq(path + 3996, "d/d/f.bin");
	free(path);
	ck_assert_int_eq(atomic_load(&deep_bad), 0);
	objfs_inodes_free(t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("inode");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_waiters_share_the_listing);
	tcase_add_test(tc, test_deep_tree_linear);
	tcase_add_test(tc, test_direct_lookup);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
