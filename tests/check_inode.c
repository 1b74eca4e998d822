/*
 * Unit tests of src/fuse/inode.c with a fake store (no network): concurrent
 * lookups of one directory share one listing, its success and its failure
 * (a failed listing repeated by every thread that waited for it would cost
 * N lookups of a stalled directory N timeouts). Lookups in a backend with
 * its own lookup (S3) never list the directory.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
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
	usleep(1000 * 1000); /* long enough for every thread to queue behind it, under
				 valgrind on a loaded machine too (300 ms was not) */
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
 * keep_cache at open: not at a node's first open, kept while the version
 * stays (ETag and size), dropped once it changed. The version is the one
 * stat gives (attr_ttl 0: every open asks).
 */
static char pv_etag[16] = "\"a\"";
static int64_t pv_size = 10;

static int pv_stat(struct objfs_store *s, const char *path, struct objfs_stat *st)
{
	(void)s;
	if (strcmp(path, "f.bin"))
		return -ENOENT;
	memset(st, 0, sizeof(*st));
	st->size = pv_size;
	st->mtime = 5;
	snprintf(st->etag, sizeof(st->etag), "%s", pv_etag);
	return 0;
}

/* a lookup of its own answers as stat does */
static const struct objfs_store_ops pv_ops = { .name = "pv", .list = lk_list, .stat = pv_stat,
					       .lookup = pv_stat };

/* objfs_inode_open's keep_cache for @ino, the handle closed at once (the
 * path is freed). */
static int open_keep(struct objfs_inodes *t, uint64_t ino, struct objfs_attr *a)
{
	struct objfs_open o;
	char *path = NULL;
	int keep;

	ck_assert_int_eq(objfs_inode_open(t, ino, a, &path, &o), 0);
	free(path);
	keep = o.keep_cache;
	objfs_inode_close(t, &o, 1);
	return keep;
}

/* objfs_inode_open of @ino that must succeed (the path is freed). */
static void open_ok(struct objfs_inodes *t, uint64_t ino, struct objfs_attr *a, struct objfs_open *h)
{
	char *path = NULL;

	ck_assert_int_eq(objfs_inode_open(t, ino, a, &path, h), 0);
	free(path);
}

START_TEST(test_open_keep_cache)
{
	struct objfs_store st = { .ops = &pv_ops };
	struct objfs_inodes *t;
	struct objfs_attr a;

	ck_assert_int_eq(objfs_inodes_new(&st, 0, 0, &t), 0);
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &a), 0);
	ck_assert_int_eq(open_keep(t, a.ino, &a), 0);
	ck_assert_int_eq(open_keep(t, a.ino, &a), 1);
	snprintf(pv_etag, sizeof(pv_etag), "\"b\""); /* new bytes, same size */
	ck_assert_int_eq(open_keep(t, a.ino, &a), 0);
	ck_assert_str_eq(a.etag, "\"b\"");
	ck_assert_int_eq(open_keep(t, a.ino, &a), 1);
	pv_size = 20; /* same ETag, another size: the kernel looks it up again first */
	{
		struct objfs_open o;
		char *path = NULL;

		ck_assert_int_eq(objfs_inode_open(t, a.ino, &a, &path, &o), -ESTALE);
		ck_assert_ptr_null(path);
		ck_assert_int_eq(objfs_inode_open(t, a.ino, &a, &path, &o), -ESTALE);
	}
	/* the kernel looks the name up again (LOOKUP_REVAL) and learns the size */
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &a), 0);
	ck_assert_int_eq(a.size, 20);
	ck_assert_int_eq(open_keep(t, a.ino, &a), 0); /* then: not kept either */
	ck_assert_int_eq(a.size, 20);
	objfs_inodes_free(t);
}
END_TEST

/* An HTML-like index: names, no sizes; the object's size from its stat. */
static int64_t hx_size = 10;

static int hx_list(struct objfs_store *s, const char *path, struct objfs_listing *out)
{
	(void)s;
	(void)path;
	return objfs_listing_add(out, "f.bin", 5, 0, -1, -1);
}

static int hx_stat(struct objfs_store *s, const char *path, struct objfs_stat *st)
{
	(void)s;
	(void)path;
	memset(st, 0, sizeof(*st));
	st->size = hx_size;
	st->mtime = -1;
	return 0;
}

static const struct objfs_store_ops hx_ops = { .name = "hx", .list = hx_list, .stat = hx_stat,
					       .lookup = hx_stat };

/*
 * The size an open compares with is the one the kernel was given, not the
 * node's: a listing with no sizes marks a file's size unknown after
 * attr_ttl, and the kernel's (from a lookup) must still be compared (else
 * cat prints 10 of 60 bytes).
 */
START_TEST(test_open_told_size)
{
	struct objfs_store st = { .ops = &hx_ops };
	struct objfs_inodes *t;
	struct objfs_dirsnap *snap;
	struct objfs_open o;
	struct objfs_attr a;
	char *path = NULL;

	hx_size = 10;
	ck_assert_int_eq(objfs_inodes_new(&st, 0.05, 0.05, &t), 0);
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &a), 0);
	ck_assert_int_eq(a.size, 10); /* the kernel holds 10 */
	hx_size = 60;                 /* replaced */
	usleep(100 * 1000);           /* past attr_ttl and list_ttl */
	ck_assert_int_eq(objfs_inode_opendir(t, OBJFS_ROOT_INO, &snap), 0); /* relisted */
	objfs_dirsnap_free(snap);
	ck_assert_int_eq(objfs_inode_open(t, a.ino, &a, &path, &o), -ESTALE);
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &a), 0);
	ck_assert_int_eq(a.size, 60);
	ck_assert_int_eq(objfs_inode_open(t, a.ino, &a, &path, &o), 0);
	free(path);
	objfs_inode_close(t, &o, 1);
	objfs_inodes_free(t);
}
END_TEST

/* The inode number of @name in the root's current listing, 0 when absent. */
static uint64_t listed_ino(struct objfs_inodes *t, const char *name)
{
	struct objfs_dirsnap *snap;
	struct objfs_attr a;
	char got[256];
	uint64_t ino = 0;

	ck_assert_int_eq(objfs_inode_opendir(t, OBJFS_ROOT_INO, &snap), 0);
	for (size_t i = 0; objfs_dirsnap_entry(snap, i, 0, got, &a, NULL, NULL) > 0; i++)
		if (strcmp(got, name) == 0)
			ino = a.ino;
	objfs_dirsnap_free(snap);
	return ino;
}

/*
 * An inode is one version while a handle has it open (else version B
 * could be read through a handle of version A, and through a mapping of B): an
 * open finding another version gives the name a new node and answers
 * -ESTALE; the lookup the kernel then makes finds the new node, in the
 * directory's listing too, and the old one keeps version A's attributes
 * for its handles (getattr asks the store nothing) and refuses opens.
 * Once A's handles closed, a new version of the same node takes the pages
 * over in place (not kept). An open the kernel never got forgets the
 * version it would have made the kernel keep.
 */
START_TEST(test_open_versions)
{
	struct objfs_store st = { .ops = &pv_ops };
	struct objfs_inodes *t;
	struct objfs_open h1, h2, h3;
	struct objfs_attr a, b;
	uint64_t old;
	char *path;

	pv_size = 10;
	snprintf(pv_etag, sizeof(pv_etag), "\"v1\"");
	ck_assert_int_eq(objfs_inodes_new(&st, 60, 0, &t), 0);
	old = listed_ino(t, "f.bin"); /* listed (list_ttl 60 s) */
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &a), 0);
	ck_assert_uint_eq(a.ino, old);
	ck_assert_int_eq(objfs_inode_open(t, old, &a, &path, &h1), 0);
	free(path);
	ck_assert(!h1.keep_cache && h1.inval);
	objfs_inode_opened(t, &h1);
	snprintf(pv_etag, sizeof(pv_etag), "\"v2\""); /* replaced */
	pv_size = 12;
	path = (char *)1;
	ck_assert_int_eq(objfs_inode_open(t, old, &a, &path, &h2), -ESTALE);
	ck_assert_ptr_null(path);
	ck_assert_int_eq(objfs_inode_open(t, old, &a, &path, &h2), -ESTALE); /* the old node */
	ck_assert_int_eq(objfs_inode_getattr(t, old, &b), 0);
	ck_assert_int_eq(b.size, 10);
	ck_assert_str_eq(b.etag, "\"v1\"");
	/* the kernel's second lookup: a new inode, with the new version */
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &a), 0);
	ck_assert_uint_ne(a.ino, old);
	ck_assert_int_eq(a.size, 12);
	ck_assert_uint_eq(listed_ino(t, "f.bin"), a.ino);
	ck_assert_int_eq(objfs_inode_open(t, a.ino, &a, &path, &h2), 0);
	free(path);
	ck_assert_str_eq(a.etag, "\"v2\"");
	ck_assert(!h2.keep_cache);
	objfs_inode_opened(t, &h2);
	ck_assert_int_eq(objfs_inode_getattr(t, old, &b), 0); /* still A's */
	ck_assert_int_eq(b.size, 10);
	objfs_inode_close(t, &h1, 1);
	objfs_inode_forget(t, old, 1);
	objfs_inode_close(t, &h2, 1);
	/* no handle open: a new version takes the same node over */
	snprintf(pv_etag, sizeof(pv_etag), "\"v3\"");
	ck_assert_int_eq(objfs_inode_open(t, a.ino, &a, &path, &h3), 0);
	free(path);
	ck_assert(!h3.keep_cache); /* v2's pages dropped */
	objfs_inode_close(t, &h3, 0); /* never reached the kernel */
	ck_assert_int_eq(open_keep(t, a.ino, &a), 0); /* so v2's pages may still be there */
	ck_assert_int_eq(open_keep(t, a.ino, &a), 1);
	/* an open dropping the pages, not yet answered: a second keeps nothing */
	snprintf(pv_etag, sizeof(pv_etag), "\"v4\"");
	ck_assert_int_eq(objfs_inode_open(t, a.ino, &a, &path, &h1), 0);
	free(path);
	ck_assert(!h1.keep_cache && h1.inval);
	ck_assert_int_eq(objfs_inode_open(t, a.ino, &a, &path, &h2), 0);
	free(path);
	ck_assert(!h2.keep_cache); /* v4 like h1, but h1's drop is not done */
	objfs_inode_opened(t, &h1);
	objfs_inode_opened(t, &h2);
	ck_assert_int_eq(objfs_inode_open(t, a.ino, &a, &path, &h3), 0);
	free(path);
	ck_assert(h3.keep_cache);
	objfs_inode_close(t, &h3, 1);
	objfs_inode_close(t, &h2, 1);
	objfs_inode_close(t, &h1, 1);
	objfs_inode_forget(t, a.ino, 1);
	objfs_inodes_free(t);
}
END_TEST

/*
 * The node per version under races: a getattr or an open whose stat is
 * under way (the lock dropped) while another open splits the node must
 * not write version B into the old node, which would then tell the kernel
 * B's size for A's inode for good; nor may two such opens split twice and
 * leave the name's second new node unlisted (lookups ENOENT). The racing
 * call leaves a split node alone, and the name's next lookup finds the
 * one new node.
 */
static sem_t race_in, race_go;
static atomic_int race_block; /* the next stat waits for race_go */

static int race_stat(struct objfs_store *s, const char *path, struct objfs_stat *st)
{
	if (atomic_exchange(&race_block, 0)) {
		sem_post(&race_in);
		sem_wait(&race_go);
	}
	return pv_stat(s, path, st);
}

static const struct objfs_store_ops race_ops = { .name = "race", .list = lk_list,
						 .stat = race_stat, .lookup = race_stat };

struct race_op {
	struct objfs_inodes *t;
	uint64_t ino;
	int open; /* 0: getattr */
	int err;
	struct objfs_attr a;
};

static void *race_run(void *p)
{
	struct race_op *o = p;
	struct objfs_open h;
	char *path = NULL;

	if (!o->open) {
		o->err = objfs_inode_getattr(o->t, o->ino, &o->a);
		return NULL;
	}
	o->err = objfs_inode_open(o->t, o->ino, &o->a, &path, &h);
	free(path);
	if (!o->err)
		objfs_inode_close(o->t, &h, 1);
	return NULL;
}

static void split_race(int open)
{
	struct objfs_store st = { .ops = &race_ops };
	struct objfs_inodes *t;
	struct objfs_open h1, h2;
	struct objfs_attr a, b;
	struct race_op o;
	pthread_t th;
	uint64_t old;
	char *path;

	ck_assert_int_eq(sem_init(&race_in, 0, 0), 0);
	ck_assert_int_eq(sem_init(&race_go, 0, 0), 0);
	pv_size = 10;
	snprintf(pv_etag, sizeof(pv_etag), "\"v1\"");
	ck_assert_int_eq(objfs_inodes_new(&st, 60, 0, &t), 0);
	old = listed_ino(t, "f.bin");
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &a), 0);
	ck_assert_int_eq(objfs_inode_open(t, old, &a, &path, &h1), 0);
	free(path);
	objfs_inode_opened(t, &h1);
	snprintf(pv_etag, sizeof(pv_etag), "\"v2\""); /* replaced */
	pv_size = 12;
	o = (struct race_op){ .t = t, .ino = old, .open = open };
	atomic_store(&race_block, 1);
	ck_assert_int_eq(pthread_create(&th, NULL, race_run, &o), 0);
	sem_wait(&race_in); /* its stat is under way, the lock dropped */
	ck_assert_int_eq(objfs_inode_open(t, old, &a, &path, &h2), -ESTALE); /* the split */
	sem_post(&race_go);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	if (open)
		ck_assert_int_eq(o.err, -ESTALE);
	else
		ck_assert_int_eq(o.a.size, 10); /* the getattr of A's inode: A's size */
	ck_assert_int_eq(objfs_inode_getattr(t, old, &b), 0);
	ck_assert_int_eq(b.size, 10);
	ck_assert_str_eq(b.etag, "\"v1\"");
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &a), 0);
	ck_assert_uint_ne(a.ino, old);
	ck_assert_int_eq(a.size, 12);
	ck_assert_uint_eq(listed_ino(t, "f.bin"), a.ino);
	objfs_inode_close(t, &h1, 1);
	objfs_inode_forget(t, old, 1);
	objfs_inode_forget(t, a.ino, 1);
	ck_assert_uint_eq(objfs_inodes_live(t), 4); /* root, d, both, f.bin: listed */
	objfs_inodes_free(t);
	sem_destroy(&race_in);
	sem_destroy(&race_go);
}

START_TEST(test_split_race_getattr)
{
	split_race(0);
}
END_TEST

START_TEST(test_split_race_open)
{
	split_race(1);
}
END_TEST

/*
 * A server giving neither an ETag nor a Last-Modified: nothing tells
 * versions apart, so opens while the file is open stay on its node (if
 * each split it, the kernel's one retry of an open would find the next
 * split: open(2) would fail with ESTALE). An open the kernel never got
 * leaves the version pinned while other handles hold it (else the next
 * open of the unchanged object would split the node).
 */
START_TEST(test_open_no_version)
{
	struct objfs_store st = { .ops = &hx_ops };
	struct objfs_inodes *t;
	struct objfs_open h1, h2, h3;
	struct objfs_attr a;

	hx_size = 10;
	ck_assert_int_eq(objfs_inodes_new(&st, 60, 60, &t), 0);
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &a), 0);
	open_ok(t, a.ino, &a, &h1);
	objfs_inode_opened(t, &h1);
	open_ok(t, a.ino, &a, &h2);
	ck_assert(!h2.keep_cache); /* no version: never kept */
	objfs_inode_opened(t, &h2);
	open_ok(t, a.ino, &a, &h3);
	objfs_inode_close(t, &h3, 1);
	objfs_inode_close(t, &h2, 1);
	objfs_inode_close(t, &h1, 1);
	objfs_inodes_free(t);
}
END_TEST

START_TEST(test_open_interrupted_keeps_version)
{
	struct objfs_store st = { .ops = &pv_ops };
	struct objfs_inodes *t;
	struct objfs_open h1, h2, h3;
	struct objfs_attr a;
	uint64_t ino;

	pv_size = 10;
	snprintf(pv_etag, sizeof(pv_etag), "\"v1\"");
	ck_assert_int_eq(objfs_inodes_new(&st, 60, 60, &t), 0);
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &a), 0);
	ino = a.ino;
	open_ok(t, ino, &a, &h1);
	open_ok(t, ino, &a, &h2);
	objfs_inode_close(t, &h2, 0); /* its opener was interrupted */
	objfs_inode_opened(t, &h1);
	open_ok(t, ino, &a, &h3); /* unchanged: no split */
	ck_assert_uint_eq(a.ino, ino);
	ck_assert(h3.keep_cache);
	objfs_inode_close(t, &h3, 1);
	objfs_inode_close(t, &h1, 1);
	objfs_inodes_free(t);
}
END_TEST

/*
 * A listing that finds a new version of an open file (an HTTP index: size
 * and mtime, no ETag) gives the name a new node there and then: the open
 * node keeps its version, so getattr of it (fstat of the old handle) and
 * the kernel's size for its pages stay the old ones (a listing that
 * overwrote them would end reads of the old handle at the new size).
 */
static int64_t vl_size = 10, vl_mtime = 5;

static int vl_list(struct objfs_store *s, const char *path, struct objfs_listing *out)
{
	(void)s;
	(void)path;
	return objfs_listing_add(out, "f.bin", 5, 0, vl_size, vl_mtime);
}

static const struct objfs_store_ops vl_ops = { .name = "vl", .list = vl_list };

START_TEST(test_listing_new_version_while_open)
{
	struct objfs_store st = { .ops = &vl_ops };
	struct objfs_inodes *t;
	struct objfs_open h1, h2;
	struct objfs_attr a, b;
	uint64_t old;

	vl_size = 10;
	vl_mtime = 5;
	ck_assert_int_eq(objfs_inodes_new(&st, 0.05, 60, &t), 0);
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &a), 0);
	old = a.ino;
	open_ok(t, old, &a, &h1);
	objfs_inode_opened(t, &h1);
	vl_size = 4; /* replaced by a shorter object */
	vl_mtime = 6;
	usleep(100 * 1000); /* past list_ttl */
	ck_assert_uint_ne(listed_ino(t, "f.bin"), old); /* relisted: the new version's node */
	ck_assert_int_eq(objfs_inode_getattr(t, old, &b), 0);
	ck_assert_int_eq(b.size, 10);
	ck_assert_int_eq(b.mtime, 5);
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &a), 0);
	ck_assert_uint_ne(a.ino, old);
	ck_assert_int_eq(a.size, 4);
	open_ok(t, a.ino, &a, &h2);
	ck_assert(!h2.keep_cache);
	objfs_inode_close(t, &h2, 1);
	objfs_inode_close(t, &h1, 1);
	objfs_inode_forget(t, old, 1);
	objfs_inode_forget(t, a.ino, 1);
	objfs_inodes_free(t);
}
END_TEST

/*
 * The node per version with an HTML listing (no sizes): after
 * attr_timeout it marks an open node's size unknown, and the split a later
 * HEAD makes must not leave the old inode at -1, or the kernel is told 0
 * and truncates the open file's pages.
 */
static const struct objfs_store_ops hv_ops = { .name = "hv", .list = hx_list, .stat = pv_stat };

START_TEST(test_html_listing_keeps_open_size)
{
	struct objfs_store st = { .ops = &hv_ops };
	struct objfs_inodes *t;
	struct objfs_dirsnap *snap;
	struct objfs_open h1;
	struct objfs_attr a, b;

	pv_size = 10;
	snprintf(pv_etag, sizeof(pv_etag), "\"v1\"");
	ck_assert_int_eq(objfs_inodes_new(&st, 0.05, 0.05, &t), 0);
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &a), 0);
	ck_assert_int_eq(a.size, 10);
	open_ok(t, a.ino, &a, &h1);
	objfs_inode_opened(t, &h1);
	usleep(100 * 1000); /* past attr_ttl and list_ttl */
	ck_assert_int_eq(objfs_inode_opendir(t, OBJFS_ROOT_INO, &snap), 0); /* no sizes */
	objfs_dirsnap_free(snap);
	snprintf(pv_etag, sizeof(pv_etag), "\"v2\""); /* replaced */
	pv_size = 12;
	ck_assert_int_eq(objfs_inode_getattr(t, a.ino, &b), 0); /* fstat of h1 */
	ck_assert_int_eq(b.size, 10);
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &b), 0);
	ck_assert_uint_ne(b.ino, a.ino);
	ck_assert_int_eq(b.size, 12);
	ck_assert_int_eq(objfs_inode_getattr(t, a.ino, &b), 0);
	ck_assert_int_eq(b.size, 10);
	objfs_inode_close(t, &h1, 1);
	objfs_inodes_free(t);
}
END_TEST

/*
 * The same object described by two sources is one version: nginx's JSON
 * index gives a size and an mtime, its HEAD an ETag as well. Compared as
 * strings ("@5" against the ETag) an unchanged open file was split at
 * every HEAD and every listing (a reopen through /proc/self/fd: ESTALE).
 */
static const struct objfs_store_ops jv_ops = { .name = "jv", .list = vl_list, .stat = pv_stat };

START_TEST(test_sources_agree_on_version)
{
	struct objfs_store st = { .ops = &jv_ops };
	struct objfs_inodes *t;
	struct objfs_open h1, h2;
	struct objfs_attr a, b;
	uint64_t ino;

	vl_size = 10; /* the listing */
	vl_mtime = 5;
	pv_size = 10; /* its HEAD: the same object, mtime 5, with an ETag */
	snprintf(pv_etag, sizeof(pv_etag), "\"v1\"");
	ck_assert_int_eq(objfs_inodes_new(&st, 0.05, 0.01, &t), 0);
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &a), 0);
	ino = a.ino;
	open_ok(t, ino, &a, &h1); /* pinned by the listing: "@5" */
	objfs_inode_opened(t, &h1);
	usleep(30 * 1000);
	ck_assert_int_eq(objfs_inode_getattr(t, ino, &b), 0); /* a HEAD */
	open_ok(t, ino, &b, &h2); /* unchanged: the same node */
	ck_assert(h2.keep_cache);
	objfs_inode_opened(t, &h2);
	usleep(100 * 1000);
	ck_assert_uint_eq(listed_ino(t, "f.bin"), ino); /* relisted, no ETag: the same */
	objfs_inode_close(t, &h2, 1);
	objfs_inode_close(t, &h1, 1);
	objfs_inodes_free(t);
}
END_TEST

/*
 * A getattr finding a new version of an open file leaves its inode as it
 * is and makes no node that nothing would hold (one would be left over
 * after the file was closed and forgotten).
 */
START_TEST(test_getattr_new_version_no_orphan)
{
	struct objfs_store st = { .ops = &pv_ops };
	struct objfs_inodes *t;
	struct objfs_open h1;
	struct objfs_attr a, b;

	pv_size = 10;
	snprintf(pv_etag, sizeof(pv_etag), "\"v1\"");
	ck_assert_int_eq(objfs_inodes_new(&st, 60, 0, &t), 0);
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &a), 0); /* direct */
	open_ok(t, a.ino, &a, &h1);
	objfs_inode_opened(t, &h1);
	snprintf(pv_etag, sizeof(pv_etag), "\"v2\"");
	ck_assert_int_eq(objfs_inode_getattr(t, a.ino, &b), 0);
	ck_assert_str_eq(b.etag, "\"v1\"");
	objfs_inode_close(t, &h1, 1);
	objfs_inode_forget(t, a.ino, 1);
	ck_assert_uint_eq(objfs_inodes_live(t), 1);
	objfs_inodes_free(t);
}
END_TEST

/*
 * A lookup whose HEAD was under way (the listing it came from not held)
 * while the listing expired, a new one replaced it and split the open node:
 * the lookup read the freed listing (ASan) and answered ENOENT. It now
 * takes the name's new node.
 */
static char ul_etag[16] = "\"v1\"";
static int64_t ul_size = 10;

static int ul_list(struct objfs_store *s, const char *path, struct objfs_listing *out)
{
	int rc;

	(void)s;
	(void)path;
	rc = objfs_listing_add(out, "f.bin", 5, 0, ul_size, 5);
	return rc ? rc : objfs_listing_set_etag(out, &out->ents[0], ul_etag, strlen(ul_etag));
}

static int ul_stat(struct objfs_store *s, const char *path, struct objfs_stat *st)
{
	(void)s;
	(void)path;
	if (atomic_exchange(&race_block, 0)) {
		sem_post(&race_in);
		sem_wait(&race_go);
	}
	memset(st, 0, sizeof(*st));
	st->size = 10; /* answered before the replacement */
	st->mtime = 5;
	snprintf(st->etag, sizeof(st->etag), "\"v1\"");
	return 0;
}

static const struct objfs_store_ops ul_ops = { .name = "ul", .list = ul_list, .stat = ul_stat };

struct relist_op {
	struct objfs_inodes *t;
	int err;
	struct objfs_attr a;
};

static void *relist_lookup_run(void *p)
{
	struct relist_op *o = p;

	o->err = objfs_inode_lookup(o->t, OBJFS_ROOT_INO, "f.bin", &o->a);
	return NULL;
}

START_TEST(test_lookup_across_relisting)
{
	struct objfs_store st = { .ops = &ul_ops };
	struct objfs_inodes *t;
	struct objfs_dirsnap *snap;
	struct objfs_open h1;
	struct objfs_attr a;
	struct relist_op o;
	pthread_t th;

	ul_size = 10;
	snprintf(ul_etag, sizeof(ul_etag), "\"v1\"");
	ck_assert_int_eq(sem_init(&race_in, 0, 0), 0);
	ck_assert_int_eq(sem_init(&race_go, 0, 0), 0);
	ck_assert_int_eq(objfs_inodes_new(&st, 0.3, 0.05, &t), 0);
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "f.bin", &a), 0);
	open_ok(t, a.ino, &a, &h1);
	objfs_inode_opened(t, &h1);
	usleep(100 * 1000); /* attributes stale, the listing fresh */
	o = (struct relist_op){ .t = t };
	atomic_store(&race_block, 1);
	ck_assert_int_eq(pthread_create(&th, NULL, relist_lookup_run, &o), 0);
	sem_wait(&race_in); /* its HEAD under way, the lock dropped */
	usleep(300 * 1000); /* the listing expires */
	snprintf(ul_etag, sizeof(ul_etag), "\"v2\""); /* replaced */
	ul_size = 12;
	ck_assert_int_eq(objfs_inode_opendir(t, OBJFS_ROOT_INO, &snap), 0); /* relists, splits */
	objfs_dirsnap_free(snap);
	sem_post(&race_go);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_int_eq(o.err, 0);
	ck_assert_uint_ne(o.a.ino, a.ino);
	ck_assert_int_eq(o.a.size, 12);
	objfs_inode_close(t, &h1, 1);
	objfs_inodes_free(t);
	sem_destroy(&race_in);
	sem_destroy(&race_go);
}
END_TEST

/*
 * A deep tree (docs/reliability.md): every directory holds "d" and, at the
 * bottom, "f.bin". A node keeps its name and parent pointer, not its full
 * path, which would make a walk to depth N cost O(N^2) bytes (825 MiB at
 * 20,000); so memory is linear. The store sees the right path at every
 * depth.
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
	struct objfs_open o;

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
	ck_assert_int_eq(objfs_inode_open(t, a.ino, &a, &path, &o), 0);
	ck_assert_uint_eq(strlen(path), 4005);
	ck_assert_str_eq(path + 3996, "d/d/f.bin");
	free(path);
	objfs_inode_close(t, &o, 1);
	ck_assert_int_eq(atomic_load(&deep_bad), 0);
	objfs_inodes_free(t);
}
END_TEST

/*
 * A paged store whose pages the test lets out one at a time (pg_allow):
 * readdir streams, a name that is both object and directory across pages,
 * stable offsets, a second opendir and lookups while a listing is under
 * way. Entries are "name" (object) or "name/" (directory).
 */
struct fpage {
	const char *ents[8];
	const char *upto; /* NULL: none said */
};

static const struct fpage *pg_tab;
static int pg_n, pg_allow, pg_served, pg_stopped, pg_gen_n;
static atomic_int pg_calls, pg_lookups;
static pthread_mutex_t pg_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pg_cv = PTHREAD_COND_INITIALIZER;

static void pg_set(const struct fpage *tab, int n)
{
	pthread_mutex_lock(&pg_mu);
	pg_tab = tab;
	pg_n = n;
	pg_allow = pg_served = pg_stopped = 0;
	pthread_mutex_unlock(&pg_mu);
	atomic_store(&pg_calls, 0);
	atomic_store(&pg_lookups, 0);
}

/* Lets every page out, without waiting: no listing runs yet. */
static void pg_allow_all(void)
{
	pthread_mutex_lock(&pg_mu);
	pg_allow = pg_n;
	pthread_mutex_unlock(&pg_mu);
}

/* Lets pages up to @n out and waits until they were handed over (or the
 * listing stopped). */
static void pg_release(int n)
{
	pthread_mutex_lock(&pg_mu);
	pg_allow = n;
	pthread_cond_broadcast(&pg_cv);
	while (pg_served < n && pg_served < pg_n && !pg_stopped)
		pthread_cond_wait(&pg_cv, &pg_mu);
	pthread_mutex_unlock(&pg_mu);
}

static int pg_list_pages(struct objfs_store *s, const char *path, objfs_list_page_fn fn,
			 void *arg)
{
	int rc = 0;

	(void)s;
	(void)path;
	atomic_fetch_add(&pg_calls, 1);
	for (int i = 0; i < pg_n && !rc; i++) {
		struct objfs_listing l = { 0 };

		pthread_mutex_lock(&pg_mu);
		while (pg_allow <= i)
			pthread_cond_wait(&pg_cv, &pg_mu);
		pthread_mutex_unlock(&pg_mu);
		/* directories, then objects: an object and a directory of one
		 * name may share a page, as the S3 store hands them over */
		for (int dirs = 1; dirs >= 0; dirs--) {
			for (int j = 0; j < 8 && pg_tab[i].ents[j]; j++) {
				const char *e = pg_tab[i].ents[j];
				size_t len = strlen(e);
				struct objfs_listing one = { 0 };

				if ((e[len - 1] == '/') != dirs)
					continue;
				ck_assert_int_eq(objfs_listing_add(&one, e, len - dirs, dirs,
								   dirs ? -1 : 7, 1), 0);
				l.ents = realloc(l.ents, (l.n + 1) * sizeof(*l.ents));
				l.ents[l.n++] = one.ents[0];
				l.cap = l.n;
				free(one.ents);
			}
		}
		rc = fn(arg, &l, pg_tab[i].upto);
		objfs_listing_clear(&l);
		pthread_mutex_lock(&pg_mu);
		pg_served = i + 1;
		pg_stopped = rc;
		pthread_cond_broadcast(&pg_cv);
		pthread_mutex_unlock(&pg_mu);
	}
	return rc;
}

/* Generated pages: pg_gen_n objects "k%07d", 1,000 a page, no waiting. */
static int gen_list_pages(struct objfs_store *s, const char *path, objfs_list_page_fn fn,
			  void *arg)
{
	int rc = 0;

	(void)s;
	(void)path;
	atomic_fetch_add(&pg_calls, 1);
	for (int i = 0; i < pg_gen_n && !rc; i += 1000) {
		struct objfs_listing l = { 0 };
		char name[16], upto[16];

		for (int j = i; j < i + 1000 && j < pg_gen_n; j++) {
			snprintf(name, sizeof(name), "k%07d", j);
			ck_assert_int_eq(objfs_listing_add(&l, name, 8, 0, j, 1), 0);
			memcpy(upto, name, sizeof(name));
		}
		rc = fn(arg, &l, upto);
		objfs_listing_clear(&l);
	}
	return rc;
}

static int pg_list(struct objfs_store *s, const char *path, struct objfs_listing *out)
{
	(void)s;
	(void)path;
	(void)out;
	ck_abort_msg("list() called: listings go page by page");
	return -EIO;
}

/* A lookup of its own (S3-like): objects "k..." and "x" exist, "a" and
 * "d" are directories. */
static int pg_lookup(struct objfs_store *s, const char *path, struct objfs_stat *st)
{
	(void)s;
	atomic_fetch_add(&pg_lookups, 1);
	memset(st, 0, sizeof(*st));
	st->size = 7;
	st->mtime = 1;
	if (!strcmp(path, "a") || !strcmp(path, "d"))
		return st->is_dir = 1, 0;
	if (path[0] == 'k' || !strcmp(path, "x") || !strncmp(path, "d/", 2))
		return 0;
	return -ENOENT;
}

static const struct objfs_store_ops pg_ops = { .name = "pg", .list = pg_list,
					       .list_pages = pg_list_pages,
					       .stat = fake_stat, .lookup = pg_lookup };
static const struct objfs_store_ops pg_http_ops = { .name = "pg-http", .list = pg_list,
						    .list_pages = pg_list_pages,
						    .stat = fake_stat };
static const struct objfs_store_ops gen_ops = { .name = "gen", .list = pg_list,
						.list_pages = gen_list_pages,
						.stat = fake_stat, .lookup = pg_lookup };

/* An opendir answered later (objfs_parked_fn), and a readdir woken. */
struct waiter {
	sem_t sem;
	int err;
	struct objfs_dirsnap *snap;
	struct objfs_attr a;
};

static void waiter_done(void *arg, int err, const struct objfs_attr *a,
			struct objfs_dirsnap *snap)
{
	struct waiter *w = arg;

	w->err = err;
	w->snap = snap;
	if (a)
		w->a = *a;
	sem_post(&w->sem);
}

static void waiter_wake(void *arg)
{
	sem_post(&((struct waiter *)arg)->sem);
}

/* Whether @w was posted within 5 s. */
static int waited(struct waiter *w)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 5;
	return sem_timedwait(&w->sem, &ts) == 0;
}

/* Whether @w is posted already (after a short grace). */
static int posted(struct waiter *w)
{
	usleep(50 * 1000);
	return sem_trywait(&w->sem) == 0;
}

struct opener {
	struct objfs_inodes *t;
	uint64_t ino;
	struct waiter w;
	int ret;
	struct objfs_dirsnap *sync;
};

/* The lister: an async opendir that lists on this thread until the end. */
static void *opener_run(void *p)
{
	struct opener *o = p;

	o->ret = objfs_inode_opendir_async(o->t, o->ino, &o->sync, waiter_done, &o->w);
	return NULL;
}

static void opener_start(struct opener *o, struct objfs_inodes *t, uint64_t ino, pthread_t *th)
{
	memset(o, 0, sizeof(*o));
	o->t = t;
	o->ino = ino;
	sem_init(&o->w.sem, 0, 0);
	ck_assert_int_eq(pthread_create(th, NULL, opener_run, o), 0);
}

/* Entry @i of @d as "name" or "name/"; 1, 0 or -errno as objfs_dirsnap_entry. */
static int entry(struct objfs_dirsnap *d, size_t i, char *out, struct objfs_attr *a)
{
	char name[NAME_MAX + 1];
	struct objfs_attr b;
	int r = objfs_dirsnap_entry(d, i, 0, name, a ? a : &b, NULL, NULL);

	if (r == 1)
		sprintf(out, "%s%s", name, (a ? a : &b)->is_dir ? "/" : "");
	return r;
}

static const struct fpage flat_pages[] = {
	{ { "k1", "k2", "k3" }, "k3" },
	{ { "k4", "k5", "x" }, "x" },
	{ { "z1", "z2" }, "z2" },
};

START_TEST(test_readdir_streams)
{
	struct objfs_store st = { .ops = &pg_ops };
	struct objfs_inodes *t;
	struct opener o;
	struct waiter rw, lw;
	struct objfs_dirsnap *d2;
	struct objfs_attr a;
	pthread_t th;
	char e[NAME_MAX + 2];

	pg_set(flat_pages, 3);
	ck_assert_int_eq(objfs_inodes_new(&st, 60, 60, &t), 0);
	opener_start(&o, t, OBJFS_ROOT_INO, &th);
	/* no page yet: the opendir waits */
	ck_assert(!posted(&o.w));
	pg_release(1);
	ck_assert(waited(&o.w));
	ck_assert_int_eq(o.w.err, 0);
	/* the first page's objects but its last are there (k3 may still turn
	 * out to be a directory k3/) */
	ck_assert_int_eq(entry(o.w.snap, 0, e, NULL), 1);
	ck_assert_str_eq(e, "k1");
	ck_assert_int_eq(entry(o.w.snap, 1, e, NULL), 1);
	ck_assert_str_eq(e, "k2");
	ck_assert_int_eq(entry(o.w.snap, 2, e, NULL), -EINPROGRESS);
	/* a readdir past them is parked and woken by the next page */
	sem_init(&rw.sem, 0, 0);
	ck_assert_int_eq(objfs_dirsnap_entry(o.w.snap, 2, 0, e, &a, waiter_wake, &rw),
			 -EINPROGRESS);
	/* a second opendir meanwhile reads the same listing: no second one */
	ck_assert_int_eq(objfs_inode_opendir(t, OBJFS_ROOT_INO, &d2), 0);
	ck_assert_int_eq(atomic_load(&pg_calls), 1);
	ck_assert_int_eq(entry(d2, 1, e, NULL), 1);
	ck_assert_str_eq(e, "k2");
	/* lookups while it streams: a listed name costs nothing, one not
	 * listed yet is asked for alone */
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "k1", &a), 0);
	ck_assert_int_eq(atomic_load(&pg_lookups), 0);
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "k5", &a), 0);
	ck_assert_int_eq(atomic_load(&pg_lookups), 1);
	uint64_t k5 = a.ino;
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "nope", &a), -ENOENT);
	ck_assert(!posted(&rw));
	pg_release(2);
	ck_assert(waited(&rw));
	ck_assert_int_eq(entry(o.w.snap, 2, e, NULL), 1);
	ck_assert_str_eq(e, "k3");
	/* k5, looked up before it was listed, keeps its inode number */
	ck_assert_int_eq(entry(o.w.snap, 4, e, &a), 1);
	ck_assert_str_eq(e, "k5");
	ck_assert_uint_eq(a.ino, k5);
	pg_release(3);
	pthread_join(th, NULL);
	ck_assert_int_eq(o.ret, -EINPROGRESS);
	ck_assert_int_eq(atomic_load(&pg_calls), 1);
	{
		char names[8][NAME_MAX + 2];

		ck_assert_uint_eq(snap_count(o.w.snap, names, 8), 8);
		ck_assert_str_eq(names[5], "x");
		ck_assert_str_eq(names[7], "z2");
		ck_assert_uint_eq(snap_count(d2, NULL, 0), 8);
	}
	/* ended and fresh: lookups answer from it, a miss is a miss */
	int before = atomic_load(&pg_lookups);
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "z1", &a), 0);
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "k9", &a), -ENOENT);
	ck_assert_int_eq(atomic_load(&pg_lookups), before);
	objfs_dirsnap_free(d2);
	objfs_dirsnap_free(o.w.snap);
	/* a lookup parked on an HTTP-like listing (no lookup of its own) is
	 * answered at its end */
	objfs_inodes_free(t);
	st.ops = &pg_http_ops;
	pg_set(flat_pages, 3);
	ck_assert_int_eq(objfs_inodes_new(&st, 60, 60, &t), 0);
	opener_start(&o, t, OBJFS_ROOT_INO, &th);
	pg_release(1);
	ck_assert(waited(&o.w));
	sem_init(&lw.sem, 0, 0);
	ck_assert_int_eq(objfs_inode_lookup_async(t, OBJFS_ROOT_INO, "z2", &a, waiter_done, &lw),
			 -EINPROGRESS);
	ck_assert(!posted(&lw));
	pg_release(3);
	ck_assert(waited(&lw));
	ck_assert_int_eq(lw.err, 0);
	pthread_join(th, NULL);
	ck_assert_int_eq(atomic_load(&pg_calls), 1);
	objfs_dirsnap_free(o.w.snap);
	objfs_inodes_free(t);
}
END_TEST

/* Names, in listing order, of a listing of @tab (all pages at once). */
static size_t list_all(const struct fpage *tab, int n, char names[][NAME_MAX + 2], size_t max)
{
	struct objfs_store st = { .ops = &pg_ops };
	struct objfs_inodes *t;
	struct objfs_dirsnap *d;
	size_t got;

	pg_set(tab, n);
	pg_allow_all();
	ck_assert_int_eq(objfs_inodes_new(&st, 60, 60, &t), 0);
	ck_assert_int_eq(objfs_inode_opendir(t, OBJFS_ROOT_INO, &d), 0);
	got = snap_count(d, names, max);
	objfs_dirsnap_free(d);
	objfs_inodes_free(t);
	return got;
}

/* S3 order: "a" < "a-1" < "a.txt" < "a/" < "b": the prefix "a/" of the
 * object "a" comes two pages later. */
static const struct fpage split_pages[] = {
	{ { "a", "a-1" }, "a-1" },
	{ { "a.txt" }, "a.txt" },
	{ { "a/", "b" }, "b" },
};
/* one page: the object and the prefix side by side */
static const struct fpage same_page[] = {
	{ { "x", "x/", "y" }, "y" },
};
/* out of order: "a" given out (upto says so), then its directory */
static const struct fpage late_dir[] = {
	{ { "a", "b" }, "c" },
	{ { "a/", "d" }, "d" },
};

START_TEST(test_dedupe_across_pages)
{
	char n[8][NAME_MAX + 2];
	struct objfs_store st = { .ops = &pg_ops };
	struct objfs_inodes *t;
	struct objfs_attr a;
	struct opener o;
	pthread_t th;
	char e[NAME_MAX + 2];

	ck_assert_uint_eq(list_all(split_pages, 3, n, 8), 4);
	ck_assert_str_eq(n[0], "a-1");
	ck_assert_str_eq(n[1], "a/");
	ck_assert_str_eq(n[2], "a.txt");
	ck_assert_str_eq(n[3], "b");
	ck_assert_uint_eq(list_all(same_page, 1, n, 8), 2);
	ck_assert_str_eq(n[0], "x/");
	ck_assert_str_eq(n[1], "y");
	ck_assert_uint_eq(list_all(late_dir, 2, n, 8), 3);
	ck_assert_str_eq(n[0], "a/");
	ck_assert_str_eq(n[1], "b");
	ck_assert_str_eq(n[2], "d");

	/* While it streams: "a" is held back until "a/" can no longer come;
	 * the lookup of "a" meanwhile asks the store, which says directory. */
	pg_set(split_pages, 3);
	ck_assert_int_eq(objfs_inodes_new(&st, 60, 60, &t), 0);
	opener_start(&o, t, OBJFS_ROOT_INO, &th);
	pg_release(1);
	ck_assert(waited(&o.w));
	ck_assert_int_eq(entry(o.w.snap, 0, e, NULL), -EINPROGRESS);
	pg_release(2);
	ck_assert_int_eq(entry(o.w.snap, 0, e, NULL), 1);
	ck_assert_str_eq(e, "a-1");
	ck_assert_int_eq(entry(o.w.snap, 1, e, NULL), -EINPROGRESS);
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "a", &a), 0);
	ck_assert_int_eq(a.is_dir, 1);
	uint64_t ino = a.ino;
	pg_release(3);
	pthread_join(th, NULL);
	ck_assert_int_eq(entry(o.w.snap, 1, e, &a), 1);
	ck_assert_str_eq(e, "a/");
	ck_assert_uint_eq(a.ino, ino);
	ck_assert_uint_eq(snap_count(o.w.snap, NULL, 0), 4);
	objfs_dirsnap_free(o.w.snap);
	objfs_inodes_free(t);
}
END_TEST

/*
 * Offsets: entry i of a handle stays entry i, whatever was read in
 * between and after a newer listing replaced it (list_ttl 0: every opendir
 * lists again), and a name's inode number stays while the kernel holds it.
 */
START_TEST(test_offsets_stable)
{
	struct objfs_store st = { .ops = &gen_ops };
	struct objfs_inodes *t;
	struct objfs_dirsnap *d1, *d2;
	struct objfs_attr a, b;
	char e[NAME_MAX + 2], name[NAME_MAX + 1];

	pg_gen_n = 2500;
	atomic_store(&pg_calls, 0);
	ck_assert_int_eq(objfs_inodes_new(&st, 0, 60, &t), 0);
	ck_assert_int_eq(objfs_inode_opendir(t, OBJFS_ROOT_INO, &d1), 0);
	/* the kernel holds k0001234 (readdirplus) */
	ck_assert_int_eq(objfs_dirsnap_entry(d1, 1234, 1, name, &a, NULL, NULL), 1);
	ck_assert_str_eq(name, "k0001234");
	ck_assert_int_eq(objfs_inode_opendir(t, OBJFS_ROOT_INO, &d2), 0);
	ck_assert_int_eq(atomic_load(&pg_calls), 2);
	for (size_t i = 2499; i > 0; i -= 7) {
		char want[16];

		snprintf(want, sizeof(want), "k%07zu", i);
		ck_assert_int_eq(entry(d1, i, e, NULL), 1);
		ck_assert_str_eq(e, want);
		ck_assert_int_eq(entry(d2, i, e, NULL), 1);
		ck_assert_str_eq(e, want);
	}
	ck_assert_int_eq(entry(d1, 2500, e, NULL), 0);
	ck_assert_int_eq(objfs_dirsnap_entry(d2, 1234, 0, name, &b, NULL, NULL), 1);
	ck_assert_uint_eq(b.ino, a.ino);
	objfs_dirsnap_free(d1);
	objfs_dirsnap_free(d2);
	objfs_inode_forget(t, a.ino, 1);
	objfs_inodes_free(t);
}
END_TEST

/*
 * Forgotten nodes are freed: lookups alone; a huge listing (dropped once
 * unread: the store looks names up itself) whose entries the kernel held;
 * a small one, kept until the kernel forgets its directory.
 */
START_TEST(test_forget_frees)
{
	struct objfs_store st = { .ops = &gen_ops };
	struct objfs_inodes *t;
	struct objfs_dirsnap *d;
	struct objfs_attr a, da;
	uint64_t *inos;
	char name[NAME_MAX + 1];
	size_t n = OBJFS_LIST_KEEP_MAX + 1000;

	ck_assert_int_eq(objfs_inodes_new(&st, 60, 60, &t), 0);
	ck_assert_uint_eq(objfs_inodes_live(t), 1);
	/* direct lookups, twice each: same inode while held */
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "x", &a), 0);
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "x", &da), 0);
	ck_assert_uint_eq(a.ino, da.ino);
	ck_assert_uint_eq(objfs_inodes_live(t), 2);
	objfs_inode_forget(t, a.ino, 1);
	ck_assert_uint_eq(objfs_inodes_live(t), 2);
	objfs_inode_forget(t, a.ino, 1);
	ck_assert_uint_eq(objfs_inodes_live(t), 1);
	/* a forgotten number is gone: nothing answers for it */
	ck_assert_int_eq(objfs_inode_getattr(t, a.ino, &da), -ENOENT);

	/* huge: readdirplus of everything, handle closed, all forgotten */
	pg_gen_n = (int)n;
	inos = malloc(n * sizeof(*inos));
	ck_assert_int_eq(objfs_inode_opendir(t, OBJFS_ROOT_INO, &d), 0);
	for (size_t i = 0; i < n; i++) {
		ck_assert_int_eq(objfs_dirsnap_entry(d, i, 1, name, &a, NULL, NULL), 1);
		inos[i] = a.ino;
	}
	objfs_dirsnap_free(d);
	ck_assert_uint_eq(objfs_inodes_live(t), n + 1);
	for (size_t i = 0; i < n; i++)
		objfs_inode_forget(t, inos[i], 1);
	ck_assert_uint_eq(objfs_inodes_live(t), 1);
	free(inos);

	/* small, in directory d: kept while d is known, freed with it */
	pg_gen_n = 100;
	ck_assert_int_eq(objfs_inode_lookup(t, OBJFS_ROOT_INO, "d", &da), 0);
	ck_assert_int_eq(objfs_inode_opendir(t, da.ino, &d), 0);
	for (size_t i = 0; i < 100; i++)
		ck_assert_int_eq(objfs_dirsnap_entry(d, i, 1, name, &a, NULL, NULL), 1);
	objfs_dirsnap_free(d);
	for (size_t i = 0; i < 100; i++) {
		snprintf(name, sizeof(name), "k%07zu", i);
		ck_assert_int_eq(objfs_inode_lookup(t, da.ino, name, &a), 0);
		objfs_inode_forget(t, a.ino, 2);
	}
	ck_assert_uint_eq(objfs_inodes_live(t), 102); /* the kept listing holds them */
	objfs_inode_forget(t, da.ino, 1);
	ck_assert_uint_eq(objfs_inodes_live(t), 1);
	objfs_inodes_free(t);
}
END_TEST

/* A listing nobody reads any more (`ls -f | head`) stops at its next page. */
START_TEST(test_unread_listing_stops)
{
	struct objfs_store st = { .ops = &pg_ops };
	struct objfs_inodes *t;
	struct opener o;
	pthread_t th;

	pg_set(flat_pages, 3);
	ck_assert_int_eq(objfs_inodes_new(&st, 60, 60, &t), 0);
	opener_start(&o, t, OBJFS_ROOT_INO, &th);
	pg_release(1);
	ck_assert(waited(&o.w));
	objfs_dirsnap_free(o.w.snap);
	pg_release(3);
	pthread_join(th, NULL);
	ck_assert_int_eq(pg_served, 2);
	ck_assert_int_eq(pg_stopped, -ECANCELED);
	ck_assert_uint_eq(objfs_inodes_live(t), 1);
	/* the next opendir lists anew */
	pg_set(flat_pages, 3);
	pg_allow_all();
	ck_assert_int_eq(objfs_inode_opendir(t, OBJFS_ROOT_INO, &o.sync), 0);
	ck_assert_uint_eq(snap_count(o.sync, NULL, 0), 8);
	objfs_dirsnap_free(o.sync);
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
	tcase_add_test(tc, test_open_keep_cache);
	tcase_add_test(tc, test_open_versions);
	tcase_add_test(tc, test_open_told_size);
	tcase_add_test(tc, test_split_race_getattr);
	tcase_add_test(tc, test_split_race_open);
	tcase_add_test(tc, test_open_no_version);
	tcase_add_test(tc, test_open_interrupted_keeps_version);
	tcase_add_test(tc, test_listing_new_version_while_open);
	tcase_add_test(tc, test_html_listing_keeps_open_size);
	tcase_add_test(tc, test_sources_agree_on_version);
	tcase_add_test(tc, test_getattr_new_version_no_orphan);
	tcase_add_test(tc, test_lookup_across_relisting);
	tcase_add_test(tc, test_readdir_streams);
	tcase_add_test(tc, test_dedupe_across_pages);
	tcase_add_test(tc, test_offsets_stable);
	tcase_add_test(tc, test_forget_frees);
	tcase_add_test(tc, test_unread_listing_stops);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
