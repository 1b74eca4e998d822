/*
 * Unit tests of src/cache/reader.c (the read policy of an open handle) on a
 * real block cache, a fake store (tests/fake_store.c: bytes a function of
 * the offset, fetches counted) and, for the last case, a real disk cache in
 * a temporary directory:
 *   - sequential reads: whole blocks, prefetch starts, bytes exact;
 *   - random reads of a large object: only the 4 KiB pages around each read
 *     are fetched (a pass of random preads fetches at most 1.1x the bytes
 *     asked, rounded to pages), bytes exact;
 *   - a small object (a quarter of the cache at most) read at random: whole
 *     blocks, each fetched once; pages instead while the objects open do
 *     not fit in the cache together;
 *   - blocks in memory: no fetch;
 *   - odd inputs: past EOF, len 0, offsets beyond the size;
 *   - failed fetches fail the read and are fetched again by the next one;
 *   - concurrent reads of one reader;
 *   - random reads, everything freed, the disk cache reopened, the same
 *     reads: exact bytes, all from disk, zero fetches.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "diskcache.h"
#include "prefetch.h"
#include "fake_store.h"
#include "object.h"
#include "reader.h"

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#define MiB   ((int64_t)1 << 20)
#define GiB   ((int64_t)1 << 30)
#define BS    ((size_t)MiB)      /* block size */
#define CAP   ((size_t)256 * MiB) /* cache cap: objects up to 64 MiB are "small" */
#define PAGE  ((int64_t)4096)
#define LARGE (4 * GiB + 1234)   /* never allocated: the fake computes its bytes */

static const struct objfs_reader_cfg rcfg = {
	.window_max = 4 * (size_t)MiB, .drop_lag = 2 * (size_t)MiB,
};

/* One open handle of one object on a fresh cache. */
struct env {
	struct fake_store f;
	struct objfs_cache *c;
	struct objfs_object *obj;
	struct objfs_reader *r;
};

static void env_open(struct env *e, int64_t size, struct objfs_diskcache *dc)
{
	memset(e, 0, sizeof(*e));
	e->f.salt = 9;
	ck_assert_int_eq(objfs_cache_new(CAP, BS, &e->c), 0);
	if (dc)
		objfs_cache_set_disk(e->c, dc);
	ck_assert_int_eq(objfs_object_new(NULL, "dir/obj", "\"v1\"", -1, size, fake_store_fetch,
					  &e->f, &e->obj), 0);
	ck_assert_int_eq(objfs_reader_new(e->c, e->obj, &rcfg, &e->r), 0);
}

static void env_close(struct env *e)
{
	objfs_reader_free(e->r);
	objfs_object_put(e->obj);
	objfs_cache_free(e->c); /* waits for prefetches in flight */
}

static int64_t pages_of(int64_t off, size_t len, int64_t size)
{
	int64_t from = off & ~(PAGE - 1), to = (off + (int64_t)len + PAGE - 1) & ~(PAGE - 1);

	return (to > size ? size : to) - from;
}

/*
 * Reads [off, off+len) through the reader, checks it returns @want bytes
 * and that they are the object's, and returns the bytes this read fetched
 * (prefetches it started included).
 */
static long long rd(struct env *e, int64_t off, size_t len, size_t want)
{
	struct objfs_reader_buf b;
	long long before = atomic_load(&e->f.bytes);
	int64_t at = off;

	ck_assert_int_eq(objfs_reader_read(e->r, off, len, &b), 0);
	ck_assert_uint_eq(b.len, want);
	for (size_t i = 0; i < b.niov; i++) {
		size_t ok = fake_store_check(&e->f, b.iov[i].iov_base, at, b.iov[i].iov_len);

		ck_assert_msg(ok == b.iov[i].iov_len, "read %lld+%zu: byte %lld wrong",
			      (long long)off, len, (long long)(at + (int64_t)ok));
		at += (int64_t)b.iov[i].iov_len;
	}
	ck_assert_int_eq(at - off, (int64_t)want);
	objfs_reader_release(e->r, &b);
	return atomic_load(&e->f.bytes) - before;
}

/*
 * An object version with no ETag is named by its pinned mtime: two mtimes
 * never share cache blocks, and every GET must answer with that mtime; with
 * an ETag the mtime plays no part (opens without a HEAD).
 */
START_TEST(test_object_versions)
{
	struct objfs_object *a, *b, *c, *e1, *e2;
	int fake = 0;

	ck_assert_int_eq(objfs_object_new(NULL, "d/f", "", 1767225600, 10, fake_store_fetch,
					  &fake, &a), 0);
	ck_assert_int_eq(objfs_object_new(NULL, "d/f", NULL, 1767225601, 10, fake_store_fetch,
					  &fake, &b), 0);
	ck_assert_int_eq(objfs_object_new(NULL, "d/f", "", -1, 10, fake_store_fetch, &fake, &c),
			 0);
	ck_assert_int_eq(objfs_object_new(NULL, "d/f", "\"e\"", 1767225600, 10,
					  fake_store_fetch, &fake, &e1), 0);
	ck_assert_int_eq(objfs_object_new(NULL, "d/f", "\"e\"", 5, 10, fake_store_fetch, &fake,
					  &e2), 0);
	ck_assert_str_ne(a->cobj.id, b->cobj.id);
	ck_assert_str_ne(a->cobj.id, c->cobj.id);
	ck_assert_str_ne(a->cobj.id, e1->cobj.id);
	ck_assert_str_eq(e1->cobj.id, e2->cobj.id);
	ck_assert_int_eq(a->sobj.mtime, 1767225600);
	ck_assert_int_eq(c->sobj.mtime, -1);
	ck_assert_int_eq(e1->sobj.mtime, -1); /* the ETag pins it */
	objfs_object_put(a);
	objfs_object_put(b);
	objfs_object_put(c);
	objfs_object_put(e1);
	objfs_object_put(e2);
}
END_TEST

START_TEST(test_sequential)
{
	struct env e;
	struct objfs_cache_stats st;
	long long fetched = 0;
	const size_t rs = 256 << 10;

	env_open(&e, 64 * MiB, NULL);
	for (int64_t off = 0; off < 16 * MiB; off += (int64_t)rs) {
		fetched += rd(&e, off, rs, rs);
		if (off == 2 * (int64_t)rs) { /* the third read starts the window */
			objfs_cache_get_stats(e.c, &st);
			ck_assert_uint_ge(st.ranges_kept, 1);
		}
	}
	/* pages for the first block, whole blocks from there, each byte once:
	 * what was read plus at most the window ahead */
	ck_assert_int_eq(atomic_load(&e.f.max_len), (long long)BS);
	ck_assert_int_ge(fetched, 16 * MiB);
	ck_assert_int_le(fetched, 16 * MiB + (int64_t)rcfg.window_max + (int64_t)BS);
	objfs_cache_get_stats(e.c, &st);
	ck_assert_uint_eq(st.refetched_bytes, 0);
	ck_assert_uint_ge(st.prefetched, 1);
	ck_assert_uint_le(st.bytes, st.cap);
	ck_assert_uint_ge(st.evictions, 1); /* drop-behind reused passed blocks */
	env_close(&e);
}
END_TEST

/* Random reads of a large object: each fetches the pages it covers, no more;
 * the small ones read again are served from memory (kept ranges). */
static const struct {
	int64_t off;
	size_t len;
} random_reads[] = {
	{ 3 * GiB + 12345, 4096 },         /* the first read, far from 0 */
	{ 1 * GiB + 7, 100 },
	{ 2 * GiB - 1000, 5000 },          /* crosses a block boundary */
	{ 512 * MiB + 4096, 128 << 10 },   /* aligned */
	{ 700 * MiB + 3, 1 << 20 },        /* a FUSE-sized read, unaligned */
	{ LARGE - 10, 4096 },              /* the tail: 10 bytes, pages clamped to EOF */
	{ 2 * GiB + 8192 + 777, 1 },
};

START_TEST(test_random_large)
{
	struct env e;

	env_open(&e, LARGE, NULL);
	for (size_t i = 0; i < sizeof(random_reads) / sizeof(random_reads[0]); i++) {
		int64_t off = random_reads[i].off;
		size_t len = random_reads[i].len;
		size_t want = off + (int64_t)len > LARGE ? (size_t)(LARGE - off) : len;
		long long got = rd(&e, off, len, want);

		ck_assert_msg(got <= pages_of(off, want, LARGE) && got >= (long long)want,
			      "read %zu fetched %lld bytes", i, got);
	}
	ck_assert_int_le(atomic_load(&e.f.max_len), MiB + PAGE); /* never a whole-block GET */
	/* again: the small reads' pages were kept (a quarter block at most), the 1 MiB one not */
	for (size_t i = 0; i < sizeof(random_reads) / sizeof(random_reads[0]); i++) {
		int64_t off = random_reads[i].off;
		size_t len = random_reads[i].len;
		size_t want = off + (int64_t)len > LARGE ? (size_t)(LARGE - off) : len;
		long long got = rd(&e, off, len, want);

		ck_assert_msg(len > BS / 4 ? got >= (long long)want : got == 0,
			      "read %zu again fetched %lld bytes", i, got);
	}
	env_close(&e);
}
END_TEST

/* A pass of random 4 KiB preads: at most 1.1x the bytes asked, rounded to pages. */
START_TEST(test_random_pass)
{
	struct env e;
	uint64_t x = 88172645463325252ull;
	long long asked = 0, fetched = 0;

	env_open(&e, LARGE, NULL);
	for (int i = 0; i < 300; i++) {
		int64_t off;

		x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
		off = (int64_t)(x % (uint64_t)(LARGE - 4096));
		asked += pages_of(off, 4096, LARGE);
		fetched += rd(&e, off, 4096, 4096);
	}
	ck_assert_msg(fetched * 10 <= asked * 11, "fetched %lld for %lld", fetched, asked);
	env_close(&e);
}
END_TEST

/*
 * Random reads fetch their 4 KiB pages and nothing more, each page once:
 * a read again is a copy, a neighbouring read fetches only the pages it
 * adds, whatever the object's size (no whole blocks for small objects).
 */
START_TEST(test_random_pages_once)
{
	static const struct {
		int64_t off;
		size_t len, want;
		long long fetched;
	} t[] = {
		{ 30 * MiB + 5, 100, 100, 4096 },
		{ 2 * MiB + 17, 4096, 4096, 8192 },       /* two pages */
		{ 30 * MiB + 5, 100, 100, 0 },            /* again */
		{ 30 * MiB + 50, 8000, 8000, 4096 },      /* its page kept, one more */
		{ 48 * MiB + 100, 1000, 23, 123 },        /* the short last page, clamped */
		{ 20 * MiB - 10, 20, 20, 8192 },          /* a page of blocks 19 and 20 */
		{ 2 * MiB - 10, 20000, 20000, 4096 * 4 }, /* around the two kept pages */
	};
	struct objfs_cache_stats st;
	struct env e;

	env_open(&e, 48 * MiB + 123, NULL);
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		ck_assert_msg(rd(&e, t[i].off, t[i].len, t[i].want) == t[i].fetched, "read %zu", i);
	objfs_cache_get_stats(e.c, &st);
	ck_assert_uint_eq(st.refetched_bytes, 0);
	ck_assert_uint_eq(st.reads[OBJFS_READ_RANDOM], sizeof(t) / sizeof(t[0]));
	env_close(&e);
}
END_TEST

/*
 * A run earns prefetch by its evidence: a header read at 0 earns nothing
 * for a jump; a run's first two reads fetch what they ask; from the third
 * the window is half of what the run has read, so a run that stops has
 * over-fetched at most half of it; no byte is fetched twice.
 */
START_TEST(test_runs_earn_windows)
{
	const size_t rs = 65536;
	struct objfs_cache_stats st;
	long long fetched = 0;
	struct env e;

	env_open(&e, 64 * MiB, NULL);
	ck_assert_int_eq(rd(&e, 0, 4096, 4096), 4096);                /* a header */
	ck_assert_int_eq(rd(&e, 40 * MiB, rs, rs), (long long)rs);    /* a jump: no window */
	ck_assert_int_eq(rd(&e, 20 * MiB, rs, rs), (long long)rs);    /* a run's start */
	ck_assert_int_eq(rd(&e, 20 * MiB + (int64_t)rs, rs, rs), (long long)rs); /* chance */
	/* the third: sequential, a window of half of 192 KiB past its end */
	ck_assert_int_eq(rd(&e, 20 * MiB + 2 * (int64_t)rs, rs, rs),
			 (long long)rs + 3 * (long long)rs / 2);
	objfs_cache_get_stats(e.c, &st);
	ck_assert_uint_eq(st.reads[OBJFS_READ_SEQ], 1);
	ck_assert_uint_eq(st.reads[OBJFS_READ_RANDOM], 4);
	/* the run goes on to 512 KiB and stops: at most half again fetched */
	for (int64_t off = 20 * MiB + 3 * (int64_t)rs; off < 20 * MiB + 8 * (int64_t)rs;
	     off += (int64_t)rs)
		fetched += rd(&e, off, rs, rs);
	fetched += 3 * (long long)rs + 3 * (long long)rs / 2;
	ck_assert_int_ge(fetched, 8 * (long long)rs);
	ck_assert_int_le(fetched, 12 * (long long)rs);
	/* the earlier jump's run was not disturbed: it continues as a candidate */
	ck_assert_int_eq(rd(&e, 40 * MiB + (int64_t)rs, rs, rs), (long long)rs);
	objfs_cache_get_stats(e.c, &st);
	ck_assert_uint_eq(st.refetched_bytes, 0);
	env_close(&e);
}
END_TEST

/*
 * Small objects read whole, one after another (the ImageNet shape): each
 * one's block is dropped behind once read to its end, so the next takes
 * its warm buffer instead of growing the cache with fresh memory.
 */
START_TEST(test_small_files_reuse)
{
	struct fake_store f = { .salt = 4 };
	struct objfs_cache *c;
	struct objfs_cache_stats st;
	char path[32];

	ck_assert_int_eq(objfs_cache_new(CAP, BS, &c), 0);
	for (int i = 0; i < 20; i++) {
		struct objfs_object *o;
		struct objfs_reader *r;
		struct objfs_reader_buf b;

		snprintf(path, sizeof(path), "small/%d", i);
		ck_assert_int_eq(objfs_object_new(NULL, path, "\"v\"", -1, 100000, fake_store_fetch,
						  &f, &o), 0);
		ck_assert_int_eq(objfs_reader_new(c, o, &rcfg, &r), 0);
		ck_assert_int_eq(objfs_reader_read(r, 0, 131072, &b), 0);
		ck_assert_uint_eq(b.len, 100000);
		ck_assert_uint_eq(fake_store_check(&f, b.iov[0].iov_base, 0, 100000), 100000);
		objfs_reader_release(r, &b);
		objfs_reader_free(r);
		objfs_object_put(o);
	}
	objfs_cache_get_stats(c, &st);
	ck_assert_uint_le(st.bytes, 2 * 131072); /* not 20 blocks */
	ck_assert_uint_ge(st.evictions, 18);
	objfs_cache_free(c);
}
END_TEST

/*
 * objfs_reader_start (fs.c calls it on open when the kernel holds no page
 * of the file): an object of at most one block is fetched at once, whole,
 * and the first read then waits for that fetch instead of starting its
 * own; a larger object, or one cached already, is not fetched at open.
 */
START_TEST(test_start_small)
{
	struct env e;
	struct objfs_reader *r2;

	env_open(&e, 100000, NULL);
	atomic_store(&e.f.hold, 1); /* the fetch stays in flight: the read must join it */
	objfs_reader_start(e.r);
	ck_assert_int_eq(atomic_load(&e.f.calls), 1);
	ck_assert_int_eq(atomic_load(&e.f.bytes), 100000);
	objfs_reader_start(e.r); /* in flight: not again */
	ck_assert_int_eq(atomic_load(&e.f.calls), 1);
	atomic_store(&e.f.hold, 0);
	ck_assert_int_eq(rd(&e, 0, 131072, 100000), 0);
	ck_assert_int_eq(atomic_load(&e.f.calls), 1);
	/* a second open of the cached object fetches nothing */
	ck_assert_int_eq(objfs_reader_new(e.c, e.obj, &rcfg, &r2), 0);
	objfs_reader_start(r2);
	ck_assert_int_eq(atomic_load(&e.f.calls), 1);
	objfs_reader_free(r2);
	env_close(&e);

	env_open(&e, (int64_t)BS + 1, NULL); /* two blocks: wait for a read */
	objfs_reader_start(e.r);
	ck_assert_int_eq(atomic_load(&e.f.calls), 0);
	env_close(&e);

	env_open(&e, 0, NULL); /* empty (or of unknown size) */
	objfs_reader_start(e.r);
	ck_assert_int_eq(atomic_load(&e.f.calls), 0);
	env_close(&e);
}
END_TEST

/* Blocks in memory serve random reads of a large object without a fetch. */
START_TEST(test_cached_no_fetch)
{
	struct env e;
	char buf[16];
	const int64_t b = 1000 * MiB; /* block 1000 */

	env_open(&e, LARGE, NULL);
	ck_assert_int_eq(objfs_cache_read(e.c, &e.obj->cobj, b, sizeof(buf), buf), 0);
	ck_assert_int_eq(atomic_load(&e.f.calls), 1);
	ck_assert_int_eq(rd(&e, b + 12345, 4096, 4096), 0);
	ck_assert_int_eq(rd(&e, 3 * GiB, 4096, 4096), 4096); /* far: random mode */
	ck_assert_int_eq(rd(&e, b + 77, 300000, 300000), 0);
	ck_assert_int_eq(rd(&e, b, (size_t)MiB, (size_t)MiB), 0);
	ck_assert_int_eq(rd(&e, 2 * GiB, 4096, 4096), 4096); /* two near reads would be a stream */
	/* half in block 1000, half in 1001: only the pages of 1001 */
	ck_assert_int_eq(rd(&e, b + MiB - 8192, 16384, 16384), 8192);
	env_close(&e);
}
END_TEST

START_TEST(test_odd_inputs)
{
	static const struct {
		int64_t off;
		size_t len, want;
	} t[] = {
		{ 10 * MiB + 7, 10, 0 },      /* at EOF */
		{ 10 * MiB + 7 + MiB, 10, 0 }, /* beyond it */
		{ INT64_MAX, 1, 0 },
		{ -5, 10, 0 },
		{ 10 * MiB, 4096, 7 },        /* past EOF: clamped */
		{ 5 * MiB, 0, 0 },            /* nothing asked */
		{ 0, 0, 0 },
		{ 3, (size_t)-1, 10 * MiB + 4 }, /* everything after 3 */
	};
	struct env e;

	env_open(&e, 10 * MiB + 7, NULL);
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		rd(&e, t[i].off, t[i].len, t[i].want);
	env_close(&e);
	env_open(&e, 0, NULL); /* an empty object */
	rd(&e, 0, 4096, 0);
	ck_assert_int_eq(atomic_load(&e.f.calls), 0);
	env_close(&e);
}
END_TEST

/* A failed fetch fails the read, nothing of it is kept, the next read fetches again. */
START_TEST(test_failure_then_retry)
{
	static const struct {
		int64_t size, off; /* pages; whole blocks of a small object; a stream */
	} t[] = { { LARGE, 3 * GiB - 4096 }, { 3 * MiB, 2 * MiB - 4096 }, { LARGE, MiB - 4096 } };
	struct env e;
	struct objfs_reader_buf b;

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		env_open(&e, t[i].size, NULL);
		atomic_store(&e.f.fail_next, 1); /* before any read: no prefetch races for it */
		ck_assert_int_eq(objfs_reader_read(e.r, t[i].off, 8192, &b), -EIO);
		ck_assert_uint_eq(b.len, 0);
		objfs_reader_release(e.r, &b);
		objfs_reader_release(e.r, &b); /* idempotent */
		rd(&e, t[i].off, 8192, 8192);  /* fetched again, exact */
		env_close(&e);
	}
}
END_TEST

struct worker {
	struct env *e;
	unsigned seed;
};

static void *worker_run(void *a)
{
	struct worker *w = a;

	for (int i = 0; i < 40; i++) {
		int64_t off = (int64_t)(rand_r(&w->seed) % 4096) * 1000003 + rand_r(&w->seed) % 4096;
		size_t len = 1 + (size_t)rand_r(&w->seed) % (300 << 10);

		rd(w->e, off, len, len);
	}
	return NULL;
}

START_TEST(test_concurrent)
{
	struct env e;
	struct worker w[4];
	pthread_t t[4];

	env_open(&e, LARGE, NULL);
	for (unsigned i = 0; i < 4; i++) {
		w[i] = (struct worker){ &e, i + 1 };
		ck_assert_int_eq(pthread_create(&t[i], NULL, worker_run, &w[i]), 0);
	}
	for (unsigned i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	env_close(&e);
}
END_TEST

static struct objfs_diskcache *disk_open(const char *dir)
{
	const struct objfs_diskcache_cfg cfg = {
		.dir = dir, .cap = 512 * (uint64_t)MiB, .source = "fake://", .block_size = BS,
	};
	struct objfs_diskcache *dc = NULL;
	char err[512];
	int ret = objfs_diskcache_open(&cfg, &dc, err, sizeof(err));

	ck_assert_msg(ret == 0, "disk cache: %s", err);
	return dc;
}

/*
 * Random reads with a disk cache; everything freed; the disk cache
 * reopened (as by the next mount); the same reads: exact bytes, and not
 * one byte fetched: whole blocks and the pages of partly read blocks
 * (objfs_diskcache_put_range) are read from disk, a whole chunk or a
 * partial one.
 */
/*
 * Many sequential streams over a small cache: their prefetch windows
 * share half the cache, so prefetched blocks are not evicted before they
 * are read and nothing is fetched twice: 16 readers, cache_size=256M, the
 * default prefetch_max (64 MiB) and fs.c's drop lag (8 MiB).
 */
struct stream_arg {
	struct objfs_cache *c;
	struct fake_store *f;
	int idx;
	size_t window_max;
	int64_t size;
	int bad;
};

static void *stream_main(void *a)
{
	struct stream_arg *sa = a;
	const struct objfs_reader_cfg cfg = { /* as fs.c sets it, with the default prefetch_max */
		.window_max = sa->window_max, .drop_lag = 8 * (size_t)MiB,
	};
	struct objfs_object *obj;
	struct objfs_reader *r;
	char path[32];

	snprintf(path, sizeof(path), "dir/stream%d", sa->idx);
	ck_assert_int_eq(objfs_object_new(NULL, path, "\"v1\"", -1, sa->size, fake_store_fetch, sa->f,
					  &obj), 0);
	ck_assert_int_eq(objfs_reader_new(sa->c, obj, &cfg, &r), 0);
	for (int64_t off = 0; off < sa->size; off += 128 << 10) {
		struct objfs_reader_buf b;
		size_t got = 0;

		if (objfs_reader_read(r, off, 128 << 10, &b)) {
			sa->bad++;
			break;
		}
		for (size_t i = 0; i < b.niov; i++) {
			if (fake_store_check(sa->f, b.iov[i].iov_base, off + (int64_t)got,
					     b.iov[i].iov_len) != b.iov[i].iov_len)
				sa->bad++;
			got += b.iov[i].iov_len;
		}
		objfs_reader_release(r, &b);
	}
	objfs_reader_free(r);
	objfs_object_put(obj);
	return NULL;
}

START_TEST(test_streams_share_prefetch)
{
	enum { N = 16 };
	struct fake_store f = { .salt = 3, .delay_us = 300 };
	struct stream_arg sa[N];
	pthread_t t[N];
	struct objfs_cache *c;
	int64_t size = 48 * MiB, read_total = N * size;
	long long fetched;

	ck_assert_int_eq(objfs_cache_new(256 * (size_t)MiB, BS, &c), 0);
	for (int i = 0; i < N; i++) {
		sa[i] = (struct stream_arg){ c, &f, i, 64 * (size_t)MiB, size, 0 };
		pthread_create(&t[i], NULL, stream_main, &sa[i]);
	}
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		ck_assert_int_eq(sa[i].bad, 0);
	}
	objfs_cache_free(c);
	fetched = atomic_load(&f.bytes);
	ck_assert_msg(fetched <= read_total + read_total / 50,
		      "%d streams fetched %lld bytes for %lld read (%.3fx)", N, fetched,
		      (long long)read_total, (double)fetched / (double)read_total);
}
END_TEST

START_TEST(test_disk_reopen)
{
	static const struct {
		int64_t off;
		size_t len;
	} t[] = {
		{ 3 * GiB + 12345, 4096 },
		{ 1 * GiB + 7, 100 },
		{ 100 * MiB, (size_t)MiB },         /* exactly block 100 */
		{ 2 * GiB - 1000, 5000 },           /* the edges of two blocks */
		{ 300 * MiB, 2 * (size_t)MiB },     /* blocks 300 and 301 */
		{ 300 * MiB + 5000, 3000 },         /* part of block 300 */
		{ 101 * MiB - 10, 4096 + 10 },      /* block 100's end, 101's first page */
		{ LARGE - 10, 4096 },               /* the tail: a partial short block */
	};
	char dir[] = "/tmp/check_reader.XXXXXX", cmd[64];
	struct objfs_diskcache_stats ds;
	struct objfs_diskcache *dc;
	struct env e;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	for (int pass = 0; pass < 2; pass++) {
		long long fetched = 0;

		dc = disk_open(dir);
		env_open(&e, LARGE, dc);
		if (pass == 1) /* the pages of the first read, a partial chunk */
			ck_assert(objfs_diskcache_has_range(dc, e.obj->cobj.id, (3 * GiB) / MiB,
							    12288, 8192));
		for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
			size_t want = t[i].off + (int64_t)t[i].len > LARGE ?
				      (size_t)(LARGE - t[i].off) : t[i].len;
			long long got = rd(&e, t[i].off, t[i].len, want);

			if (pass == 0)
				ck_assert_msg(got <= pages_of(t[i].off, want, LARGE),
					      "read %zu fetched %lld", i, got);
			else
				ck_assert_msg(got == 0, "read %zu fetched %lld again", i, got);
			fetched += got;
		}
		if (pass == 0) {
			ck_assert_int_gt(fetched, 0);
		} else {
			ck_assert_int_eq(fetched, 0);
			objfs_diskcache_get_stats(dc, &ds);
			ck_assert_uint_ge(ds.hits, sizeof(t) / sizeof(t[0]));
		}
		env_close(&e);
		objfs_diskcache_free(dc);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	(void)!system(cmd);
}
END_TEST

static Suite *reader_suite(void)
{
	Suite *s = suite_create("reader");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_object_versions);
	tcase_add_test(tc, test_sequential);
	tcase_add_test(tc, test_random_large);
	tcase_add_test(tc, test_random_pass);
	tcase_add_test(tc, test_random_pages_once);
	tcase_add_test(tc, test_runs_earn_windows);
	tcase_add_test(tc, test_small_files_reuse);
	tcase_add_test(tc, test_start_small);
	tcase_add_test(tc, test_cached_no_fetch);
	tcase_add_test(tc, test_odd_inputs);
	tcase_add_test(tc, test_failure_then_retry);
	tcase_add_test(tc, test_concurrent);
	tcase_add_test(tc, test_streams_share_prefetch);
	suite_add_tcase(s, tc);
	/*
	 * The disk cache's io_uring thread starves every other thread under
	 * valgrind (tests/valgrind.sh leaves check_diskcache out for it): the
	 * disk case runs in the normal and the sanitizer suites only.
	 */
	if (!RUNNING_ON_VALGRIND) {
		tc = tcase_create("disk");
		tcase_set_timeout(tc, 60);
		tcase_add_test(tc, test_disk_reopen);
		suite_add_tcase(s, tc);
	}
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(reader_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
