/*
 * Unit tests of src/cache/cache.c with a fake fetcher (no network): contents,
 * single flight, refcounts under eviction, the memory cap, prefetch limits,
 * failed fetches that are retried, and object identity (a new ETag never
 * serves old bytes). The fetcher is tests/fake_store.c: it completes on its
 * own thread after a delay, like the engine does.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "cache.h"
#include "fake_store.h"

static void obj_init(struct objfs_cache_obj *o, struct fake_store *f, const char *id,
		     int64_t size)
{
	o->id = id;
	o->size = size;
	o->fetch = fake_store_fetch;
	o->ctx = f;
}

static void check_bytes(const struct fake_store *f, const char *buf, int64_t off, size_t len)
{
	/* One assertion per call: Check's asserts cost a syscall each. */
	size_t i = fake_store_check(f, buf, off, len);

	ck_assert_msg(i == len, "byte %lld wrong", (long long)(off + (int64_t)i));
}

/*
 * An object whose size is near 2^63 (its last block's end must not
 * overflow in block_end, or a fill of it walks ~2^47 blocks, never calling
 * done). The stores refuse such sizes (OBJFS_OBJECT_SIZE_MAX); the cache's
 * arithmetic holds anyway.
 */
START_TEST(test_fill_near_int64_max)
{
	struct objfs_cache *c;
	struct objfs_cache_obj o;
	struct fake_store f = { .salt = 11 };
	static char buf[100];

	ck_assert_int_eq(objfs_cache_new(1 << 20, 65536, &c), 0);
	obj_init(&o, &f, "huge", INT64_MAX);
	ck_assert_int_eq(objfs_cache_fill_wait(c, &o, INT64_MAX - 100, 100, buf, NULL), 0);
	check_bytes(&f, buf, INT64_MAX - 100, 100);
	objfs_cache_free(c);
}
END_TEST

START_TEST(test_contents_and_hits)
{
	struct objfs_cache *c;
	struct objfs_cache_obj o;
	struct objfs_cache_stats st;
	struct fake_store f = { .salt = 7 };
	static char buf[300000];

	ck_assert_int_eq(objfs_cache_new(1 << 20, 65536, &c), 0);
	obj_init(&o, &f, "obj-a", 1000003);
	/* Unaligned, spanning blocks, ending at EOF. */
	ck_assert_int_eq(objfs_cache_read(c, &o, 12345, 200000, buf), 0);
	check_bytes(&f, buf, 12345, 200000);
	ck_assert_int_eq(objfs_cache_read(c, &o, 1000003 - 77, 77, buf), 0);
	check_bytes(&f, buf, 1000003 - 77, 77);
	int calls = atomic_load(&f.calls);
	ck_assert_int_eq(objfs_cache_read(c, &o, 20000, 100000, buf), 0); /* all hits */
	check_bytes(&f, buf, 20000, 100000);
	ck_assert_int_eq(atomic_load(&f.calls), calls);
	objfs_cache_get_stats(c, &st);
	ck_assert_uint_ge(st.hits, 2);
	ck_assert_int_eq(objfs_cache_read(c, &o, 1000000, 100, buf), -EINVAL); /* past EOF */
	objfs_cache_free(c);
}
END_TEST

struct reader {
	struct objfs_cache *c;
	struct objfs_cache_obj *o;
	struct fake_store *f;
	int64_t off;
};

static void *reader_run(void *a)
{
	struct reader *r = a;
	char *buf = malloc(65536);

	ck_assert_int_eq(objfs_cache_read(r->c, r->o, r->off, 65536, buf), 0);
	check_bytes(r->f, buf, r->off, 65536);
	free(buf);
	return NULL;
}

START_TEST(test_single_flight)
{
	struct objfs_cache *c;
	struct objfs_cache_obj o;
	struct fake_store f = { .salt = 1, .delay_us = 100000 };
	struct reader r[16];
	pthread_t t[16];

	ck_assert_int_eq(objfs_cache_new(8 << 20, 1 << 20, &c), 0);
	obj_init(&o, &f, "obj-sf", 4 << 20);
	for (int i = 0; i < 16; i++) {
		r[i] = (struct reader){ c, &o, &f, (int64_t)(i % 2) * 65536 };
		pthread_create(&t[i], NULL, reader_run, &r[i]);
	}
	for (int i = 0; i < 16; i++)
		pthread_join(t[i], NULL);
	ck_assert_int_eq(atomic_load(&f.calls), 1); /* 16 readers, one block, one GET */
	objfs_cache_free(c);
}
END_TEST

START_TEST(test_cap_and_eviction)
{
	struct objfs_cache *c;
	struct objfs_cache_obj o;
	struct objfs_cache_stats st;
	struct fake_store f = { .salt = 3 };
	char *buf = malloc(1 << 16);

	ck_assert_int_eq(objfs_cache_new(1 << 18, 1 << 16, &c), 0);
	obj_init(&o, &f, "obj-cap", 64 << 16);
	for (int64_t off = 0; off < (64 << 16); off += 1 << 16) {
		ck_assert_int_eq(objfs_cache_read(c, &o, off, 1 << 16, buf), 0);
		check_bytes(&f, buf, off, 1 << 16);
		objfs_cache_get_stats(c, &st);
		ck_assert_uint_le(st.bytes, st.cap);
	}
	ck_assert_uint_ge(st.evictions, 60);
	/* The first block was evicted: reading it again fetches again. */
	int calls = atomic_load(&f.calls);
	ck_assert_int_eq(objfs_cache_read(c, &o, 0, 10, buf), 0);
	ck_assert_int_eq(atomic_load(&f.calls), calls + 1);
	free(buf);
	objfs_cache_free(c);
}
END_TEST

/* A fill's outcome, for tests that look before it ends. */
struct fill_seen {
	atomic_int done, err;
};

static void fill_seen_cb(void *arg, int err)
{
	struct fill_seen *w = arg;

	atomic_store(&w->err, err);
	atomic_store(&w->done, 1);
}

/*
 * objfs_copy_stream (util/buf.h; fills into GPU ring slots): the bytes of
 * memcpy at every alignment of both ends and around the lengths where it
 * changes method (under 4 KiB, the aligning head, whole lines, the tail),
 * and not a byte outside the destination.
 */
START_TEST(test_copy_stream)
{
	static const size_t lens[] = { 0, 1, 63, 64, 65, 4095, 4096, 4097, 4096 + 63, 4096 + 64,
				       65536 + 17, 200000 };
	enum { ROOM = 200000 + 256 };
	unsigned char *src = malloc(ROOM), *dst = malloc(ROOM);

	ck_assert(src && dst);
	for (size_t i = 0; i < ROOM; i++)
		src[i] = (unsigned char)(i * 131 + (i >> 9));
	for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
		for (size_t d = 0; d < 70; d += (lens[l] > 4096 ? 3 : 1))
			for (size_t so = 0; so < 5; so++) {
				memset(dst, 0xee, ROOM);
				objfs_copy_stream(dst + d, src + so, lens[l]);
				ck_assert(memcmp(dst + d, src + so, lens[l]) == 0);
				for (size_t i = 0; i < d; i++)
					ck_assert_uint_eq(dst[i], 0xee);
				for (size_t i = d + lens[l]; i < d + lens[l] + 128 && i < ROOM; i++)
					ck_assert_uint_eq(dst[i], 0xee);
			}
	free(src);
	free(dst);
}
END_TEST

/*
 * A fill over a block in flight does not wait for it: the call returns
 * with the fill still open, and the bytes are copied when the block lands
 * (the GPU side API's shared fill workers never block on the network). A
 * failed block fails its waiters.
 */
START_TEST(test_fill_waits_without_blocking)
{
	struct objfs_cache *c;
	struct objfs_cache_obj o;
	struct fake_store f = { .salt = 9 };
	struct fill_seen w = { 0 }, w2 = { 0 };
	static char buf[3 * 65536];

	ck_assert_int_eq(objfs_cache_new(1 << 20, 65536, &c), 0);
	obj_init(&o, &f, "obj-wait", 4 * 65536);
	atomic_store(&f.hold, 1);
	ck_assert_uint_eq(objfs_cache_prefetch(c, &o, 0, 2 * 65536, NULL), 2 * 65536);
	/* blocks 0 and 1 in flight, block 2 not cached: one waits, one fetches */
	objfs_cache_fill(c, &o, 100, 2 * 65536 + 50, buf, OBJFS_FILL_DEVICE, fill_seen_cb, &w);
	ck_assert_int_eq(atomic_load(&w.done), 0); /* returned, still open */
	atomic_store(&f.hold, 0);
	while (!atomic_load(&w.done))
		usleep(1000);
	ck_assert_int_eq(atomic_load(&w.err), 0);
	check_bytes(&f, buf, 100, 2 * 65536 + 50);
	/* a block that fails fails its waiter */
	atomic_store(&f.hold, 1);
	atomic_store(&f.fail_next, 1);
	ck_assert_uint_eq(objfs_cache_prefetch(c, &o, 3 * 65536, 65536, NULL), 65536);
	objfs_cache_fill(c, &o, 3 * 65536 + 10, 20, buf, 0, fill_seen_cb, &w2);
	ck_assert_int_eq(atomic_load(&w2.done), 0);
	atomic_store(&f.hold, 0);
	while (!atomic_load(&w2.done))
		usleep(1000);
	ck_assert_int_eq(atomic_load(&w2.err), -EIO);
	objfs_cache_free(c);
}
END_TEST

/*
 * Freed block buffers go to a pool of their size class and the next block
 * of that class takes one (warm memory, no page faults): a failed fetch's
 * buffer is pooled, the retry reuses it. Short blocks (small objects) are
 * rounded up to a power of two; blocks and pool together never pass the
 * cap, the pool giving way first.
 */
START_TEST(test_buffer_pool)
{
	struct objfs_cache *c;
	struct objfs_cache_obj small[40], big;
	struct objfs_cache_stats st;
	struct fake_store f = { .salt = 5 };
	char ids[40][16], buf[1 << 16];

	ck_assert_int_eq(objfs_cache_new(1 << 19, 1 << 16, &c), 0);
	obj_init(&big, &f, "obj-big", 3 << 16);
	atomic_store(&f.fail_next, 1);
	ck_assert_int_eq(objfs_cache_read(c, &big, 0, 100, buf), -EIO);
	objfs_cache_get_stats(c, &st);
	ck_assert_uint_eq(st.bytes, 0);
	ck_assert_uint_eq(st.pool_bytes, 1 << 16);  /* the failed block's buffer */
	ck_assert_int_eq(objfs_cache_read(c, &big, 0, 100, buf), 0);
	check_bytes(&f, buf, 0, 100);
	objfs_cache_get_stats(c, &st);
	ck_assert_uint_eq(st.bytes, 1 << 16);
	ck_assert_uint_eq(st.pool_bytes, 0);        /* taken again */
	/* 40 objects of 10,000 bytes: 16 KiB each, 512 KiB of cap: evictions,
	 * the big block's buffer trimmed from the pool, never past the cap */
	for (int i = 0; i < 40; i++) {
		snprintf(ids[i], sizeof(ids[i]), "small-%d", i);
		obj_init(&small[i], &f, ids[i], 10000);
		ck_assert_int_eq(objfs_cache_read(c, &small[i], 0, 10000, buf), 0);
		check_bytes(&f, buf, 0, 10000);
		objfs_cache_get_stats(c, &st);
		ck_assert_uint_le(st.bytes + st.pool_bytes, st.cap);
		ck_assert_uint_eq(st.bytes % (16 << 10), 0);
	}
	ck_assert_uint_ge(st.evictions, 8);
	objfs_cache_free(c);
}
END_TEST

/*
 * Drop-behind: a block a sequential reader has passed is reused for the next
 * new block even far under the cap, so a stream keeps a small, warm working
 * set; blocks not passed stay cached.
 */
START_TEST(test_drop_behind)
{
	struct objfs_cache *c;
	struct objfs_cache_obj o;
	struct objfs_cache_stats st;
	struct fake_store f = { .salt = 5 };
	const size_t bs = 1 << 16;
	char *buf = malloc(bs);

	ck_assert_int_eq(objfs_cache_new(64 * bs, bs, &c), 0);
	obj_init(&o, &f, "obj-behind", 32 * (int64_t)bs);
	for (int64_t i = 0; i < 32; i++) {
		ck_assert_int_eq(objfs_cache_read(c, &o, i * (int64_t)bs, bs, buf), 0);
		check_bytes(&f, buf, i * (int64_t)bs, bs);
		objfs_cache_drop_behind(c, &o, i * (int64_t)bs);
	}
	objfs_cache_get_stats(c, &st);
	/* Under a cap of 64 blocks, only the newest two stay. */
	ck_assert_uint_eq(st.evictions, 30);
	ck_assert_uint_le(st.bytes, 2 * bs);
	ck_assert_int_eq(objfs_cache_has(c, o.id, 31), 1);
	ck_assert_int_eq(objfs_cache_has(c, o.id, 30), 1);
	ck_assert_int_eq(objfs_cache_has(c, o.id, 5), 0);

	/* Without drop-behind, blocks stay under the cap. */
	obj_init(&o, &f, "obj-kept", 8 * (int64_t)bs);
	for (int64_t i = 0; i < 8; i++)
		ck_assert_int_eq(objfs_cache_read(c, &o, i * (int64_t)bs, bs, buf), 0);
	for (uint64_t i = 0; i < 8; i++)
		ck_assert_int_eq(objfs_cache_has(c, o.id, i), 1);
	free(buf);
	objfs_cache_free(c);
}
END_TEST

START_TEST(test_prefetch_respects_cap)
{
	struct objfs_cache *c;
	struct objfs_cache_obj o;
	struct objfs_cache_stats st;
	struct fake_store f = { .salt = 4, .delay_us = 50000 };
	char buf[100];
	size_t started;
	int64_t reached;

	ck_assert_int_eq(objfs_cache_new(4 << 20, 1 << 20, &c), 0);
	obj_init(&o, &f, "obj-pf", 64 << 20);
	started = objfs_cache_prefetch(c, &o, 0, 32 << 20, &reached);
	ck_assert_uint_le(started, 4 << 20); /* only what fits */
	ck_assert_int_eq(reached, (int64_t)started); /* where the cap stopped it */
	objfs_cache_get_stats(c, &st);
	ck_assert_uint_le(st.bytes, st.cap);
	ck_assert_int_eq(objfs_cache_read(c, &o, 100, 100, buf), 0); /* waits on the prefetch */
	check_bytes(&f, buf, 100, 100);
	ck_assert_int_eq(atomic_load(&f.calls), (int)(started >> 20));
	objfs_cache_free(c); /* waits for fetches in flight */
}
END_TEST

/* A window of more than 64 blocks is started whole (not the first 64
 * alone, the rest left to be fetched on demand), and reaches its end. */
START_TEST(test_prefetch_whole_window)
{
	struct objfs_cache *c;
	struct objfs_cache_obj o;
	struct fake_store f = { .salt = 9 };
	int64_t reached = 0;

	ck_assert_int_eq(objfs_cache_new(64 << 20, 65536, &c), 0);
	obj_init(&o, &f, "obj-wide", 32 << 20);
	ck_assert_uint_eq(objfs_cache_prefetch(c, &o, 65536, 200 * 65536, &reached),
			  200 * 65536);
	ck_assert_int_eq(reached, 201 * 65536);
	ck_assert_uint_eq(objfs_cache_prefetch(c, &o, 65536, 300 * 65536, &reached),
			  100 * 65536); /* the first 200 are there already */
	ck_assert_int_eq(reached, 301 * 65536);
	objfs_cache_free(c);
	ck_assert_int_eq(atomic_load(&f.calls), 300);
}
END_TEST

START_TEST(test_failure_not_cached)
{
	struct objfs_cache *c;
	struct objfs_cache_obj o;
	struct fake_store f = { .salt = 5 };
	char buf[4096];

	ck_assert_int_eq(objfs_cache_new(4 << 20, 65536, &c), 0);
	obj_init(&o, &f, "obj-fail", 1 << 20);
	atomic_store(&f.fail_next, 1);
	ck_assert_int_eq(objfs_cache_read(c, &o, 0, 4096, buf), -EIO);
	ck_assert_int_eq(objfs_cache_read(c, &o, 0, 4096, buf), 0); /* fetched again */
	check_bytes(&f, buf, 0, 4096);
	ck_assert_int_eq(atomic_load(&f.calls), 2);
	objfs_cache_free(c);
}
END_TEST

START_TEST(test_identity)
{
	struct objfs_cache *c;
	struct objfs_cache_obj o1, o2;
	struct fake_store f1 = { .salt = 10 }, f2 = { .salt = 99 };
	char *id1 = objfs_cache_obj_id("dir/x", "\"v1\"", 5000);
	char *id2 = objfs_cache_obj_id("dir/x", "\"v2\"", 5000);
	char buf[5000];

	ck_assert_str_ne(id1, id2);
	ck_assert_int_eq(objfs_cache_new(1 << 20, 4096, &c), 0);
	obj_init(&o1, &f1, id1, 5000);
	obj_init(&o2, &f2, id2, 5000);
	ck_assert_int_eq(objfs_cache_read(c, &o1, 0, 5000, buf), 0);
	check_bytes(&f1, buf, 0, 5000);
	ck_assert_int_eq(objfs_cache_read(c, &o2, 0, 5000, buf), 0); /* new ETag: new bytes */
	check_bytes(&f2, buf, 0, 5000);
	free(id1);
	free(id2);
	objfs_cache_free(c);
}
END_TEST

/* objfs_cache_fill(), waited for: its error. */
static int fill(struct objfs_cache *c, const struct objfs_cache_obj *o, int64_t off, size_t len,
		char *buf)
{
	return objfs_cache_fill_wait(c, o, off, len, buf, NULL);
}

START_TEST(test_fill_direct)
{
	struct objfs_cache *c;
	struct objfs_cache_obj o;
	struct objfs_cache_stats st;
	struct fake_store f = { .salt = 3, .delay_us = 1000 };
	static char buf[400000];

	ck_assert_int_eq(objfs_cache_new(1 << 20, 65536, &c), 0);
	obj_init(&o, &f, "obj-fill", 1000003);
	/* nothing cached: one fetch straight into buf, nothing kept */
	ck_assert_int_eq(fill(c, &o, 12345, 300000, buf), 0);
	check_bytes(&f, buf, 12345, 300000);
	ck_assert_int_eq(atomic_load(&f.calls), 1);
	objfs_cache_get_stats(c, &st);
	ck_assert_uint_eq(st.bytes, 0);
	ck_assert_uint_eq(st.direct_bytes, 300000);
	/* block 3 cached: copied from the cache, the runs around it fetched */
	ck_assert_int_eq(objfs_cache_read(c, &o, 3 * 65536 + 10, 100, buf), 0);
	ck_assert_int_eq(atomic_load(&f.calls), 2);
	memset(buf, 0, sizeof(buf));
	ck_assert_int_eq(fill(c, &o, 12345, 300000, buf), 0);
	check_bytes(&f, buf, 12345, 300000);
	ck_assert_int_eq(atomic_load(&f.calls), 4);
	objfs_cache_get_stats(c, &st);
	ck_assert_uint_eq(st.direct_bytes, 300000 + 300000 - 65536);
	ck_assert_uint_eq(st.bytes, 65536);
	/* up to the last, short block; zero bytes; out of range */
	ck_assert_int_eq(fill(c, &o, 1000003 - 70000, 70000, buf), 0);
	check_bytes(&f, buf, 1000003 - 70000, 70000);
	ck_assert_int_eq(fill(c, &o, 5, 0, buf), 0);
	ck_assert_int_eq(fill(c, &o, 1000000, 100, buf), -EINVAL);
	ck_assert_int_eq(fill(c, &o, -1, 10, buf), -EINVAL);
	objfs_cache_free(c);
}
END_TEST

START_TEST(test_fill_failure)
{
	struct objfs_cache *c;
	struct objfs_cache_obj o;
	struct fake_store f = { .salt = 4 };
	static char buf[5 * 65536];

	ck_assert_int_eq(objfs_cache_new(1 << 20, 65536, &c), 0);
	obj_init(&o, &f, "obj-fill-fail", 1 << 20);
	ck_assert_int_eq(objfs_cache_read(c, &o, 2 * 65536, 10, buf), 0); /* splits the range */
	atomic_store(&f.fail_next, 1);
	/* two runs, one fails: the fill fails, once both have ended */
	ck_assert_int_eq(fill(c, &o, 0, 5 * 65536, buf), -EIO);
	ck_assert_int_eq(fill(c, &o, 0, 5 * 65536, buf), 0);
	check_bytes(&f, buf, 0, 5 * 65536);
	objfs_cache_free(c);
}
END_TEST

/*
 * Small ranges a fill fetched straight into the caller are kept as ranges
 * of their blocks (the next epoch's samples): the same range again, or
 * one inside it, is copied with no fetch; one reaching past it is fetched;
 * a range across a block boundary is kept in both blocks; a long run (over
 * a quarter block) is not kept; a failed fetch keeps nothing; a block read
 * whole replaces its ranges; a block keeps 64 ranges at most.
 */
/*
 * A fetch whose end scribbles on the fill's destination first: a GPU client
 * writing its ring slot while a fill into it is in flight. What the client
 * wrote must not become the cache's bytes for the next reader (as it
 * would if kept ranges were copied from the destination).
 */
static char *scribble_on;
static size_t scribble_len;

struct scribble {
	objfs_fetch_done_fn done;
	void *arg;
};

static void scribble_done(void *arg, int err)
{
	struct scribble s = *(struct scribble *)arg;

	free(arg);
	memset(scribble_on, 0xa5, scribble_len);
	s.done(s.arg, err);
}

static void scribble_fetch(void *ctx, int64_t off, size_t len, char *dst,
			   objfs_fetch_done_fn done, void *arg)
{
	struct scribble *s = malloc(sizeof(*s));

	ck_assert_ptr_nonnull(s);
	*s = (struct scribble){ done, arg };
	fake_store_fetch(ctx, off, len, dst, scribble_done, s);
}

START_TEST(test_fill_keeps_only_its_bytes)
{
	struct objfs_cache *c;
	struct objfs_cache_obj o;
	struct objfs_cache_stats st;
	struct fake_store f = { .salt = 24 };
	static char ring[8192], buf[8192];

	ck_assert_int_eq(objfs_cache_new(1 << 20, 65536, &c), 0);
	obj_init(&o, &f, "obj-scribbled", 1000003);
	o.fetch = scribble_fetch;
	scribble_on = ring;
	scribble_len = 5000;
	ck_assert_int_eq(fill(c, &o, 12345, 5000, ring), 0);
	check_bytes(&f, ring, 12345, 5000); /* the fill's own bytes, not the scribble */
	objfs_cache_get_stats(c, &st);
	ck_assert_uint_eq(st.ranges_kept, 1);
	ck_assert_int_eq(fill(c, &o, 12345, 5000, buf), 0); /* from the kept range */
	check_bytes(&f, buf, 12345, 5000);
	ck_assert_int_eq(atomic_load(&f.calls), 1);
	objfs_cache_free(c);
}
END_TEST

/*
 * Fill parts' own buffers count under the cap while in flight (uncounted,
 * 256 small fills would hold 4 MiB of heap past a 512 KiB cap while the
 * counters said 0). 256 fills of 16 KiB into distinct blocks with the fetches held:
 * the counters stay within the cap and the heap grows by no more than it
 * (and some slack for the fake store's own bookkeeping); every fill still
 * gets its bytes (those past the cap straight into their destination,
 * nothing kept). mallinfo2 reads 0 under ASan: the heap check is then moot.
 */
static atomic_int held_done;

static void held_cb(void *arg, int err)
{
	*(int *)arg = err;
	atomic_fetch_add(&held_done, 1);
}

static size_t heap_now(void)
{
	struct mallinfo2 m = mallinfo2();

	return m.uordblks + m.hblkhd;
}

START_TEST(test_fill_buffers_within_cap)
{
	enum { N = 256, BSZ = 65536, CAP = 8 * BSZ };
	struct objfs_cache *c;
	struct objfs_cache_obj o;
	struct objfs_cache_stats st;
	struct fake_store f = { .salt = 25 };
	static char dst[N][BSZ / 4];
	static int errs[N];
	size_t h0, h1;

	ck_assert_int_eq(objfs_cache_new(CAP, BSZ, &c), 0);
	obj_init(&o, &f, "obj-held", (int64_t)N * BSZ);
	atomic_store(&held_done, 0);
	atomic_store(&f.hold, 1);
	h0 = heap_now();
	for (int i = 0; i < N; i++)
		objfs_cache_fill(c, &o, (int64_t)i * BSZ + 100, BSZ / 4, dst[i],
				 i % 2 ? OBJFS_FILL_DEVICE : 0, held_cb, &errs[i]);
	h1 = heap_now();
	objfs_cache_get_stats(c, &st);
	ck_assert_uint_le(st.bytes + st.pool_bytes, CAP);
	ck_assert_msg(h1 - h0 <= CAP + (256u << 10), "256 fills in flight took %zu KiB of heap, "
		      "cap %u KiB", (h1 - h0) >> 10, CAP >> 10);
	atomic_store(&f.hold, 0);
	while (atomic_load(&held_done) < N)
		usleep(1000);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(errs[i], 0);
		check_bytes(&f, dst[i], (int64_t)i * BSZ + 100, BSZ / 4);
	}
	objfs_cache_get_stats(c, &st);
	ck_assert_uint_le(st.bytes + st.pool_bytes, CAP);
	objfs_cache_free(c);
}
END_TEST

START_TEST(test_fill_keeps_ranges)
{
	struct objfs_cache *c;
	struct objfs_cache_obj o;
	struct objfs_cache_stats st;
	struct fake_store f = { .salt = 21, .delay_us = 200 };
	static char buf[65536];

	ck_assert_int_eq(objfs_cache_new(1 << 20, 65536, &c), 0);
	obj_init(&o, &f, "obj-ranges", 1000003);
	ck_assert_int_eq(fill(c, &o, 12345, 5000, buf), 0);
	check_bytes(&f, buf, 12345, 5000);
	ck_assert_int_eq(atomic_load(&f.calls), 1);
	objfs_cache_get_stats(c, &st);
	ck_assert_uint_eq(st.ranges_kept, 1);
	ck_assert_uint_eq(st.bytes, 8192); /* its buffer's size class */
	ck_assert_int_eq(objfs_cache_has(c, o.id, 0), 0); /* no whole block */
	memset(buf, 0, sizeof(buf));
	ck_assert_int_eq(fill(c, &o, 12345, 5000, buf), 0); /* again: a copy */
	check_bytes(&f, buf, 12345, 5000);
	ck_assert_int_eq(fill(c, &o, 13000, 100, buf), 0); /* inside it */
	check_bytes(&f, buf, 13000, 100);
	ck_assert_int_eq(atomic_load(&f.calls), 1);
	/* past its start: only the gap before it is fetched, the rest copied */
	{
		long long before = atomic_load(&f.bytes);

		ck_assert_int_eq(fill(c, &o, 12000, 1000, buf), 0);
		check_bytes(&f, buf, 12000, 1000);
		ck_assert_int_eq(atomic_load(&f.calls), 2);
		ck_assert_int_eq(atomic_load(&f.bytes) - before, 12345 - 12000);
	}
	/* across blocks 0 and 1: a range kept in each, copied from both */
	ck_assert_int_eq(fill(c, &o, 65536 - 100, 300, buf), 0);
	ck_assert_int_eq(atomic_load(&f.calls), 4);
	memset(buf, 0, sizeof(buf));
	ck_assert_int_eq(fill(c, &o, 65536 - 100, 300, buf), 0);
	check_bytes(&f, buf, 65536 - 100, 300);
	ck_assert_int_eq(atomic_load(&f.calls), 4);
	objfs_cache_get_stats(c, &st);
	ck_assert_uint_eq(st.ranges_kept, 4);
	/* a long run (over a quarter block) is a stream: not kept */
	ck_assert_int_eq(fill(c, &o, 200000, 20000, buf), 0);
	ck_assert_int_eq(fill(c, &o, 200000, 20000, buf), 0);
	check_bytes(&f, buf, 200000, 20000);
	ck_assert_int_eq(atomic_load(&f.calls), 6);
	/* a failed fetch keeps nothing */
	atomic_store(&f.fail_next, 1);
	ck_assert_int_eq(fill(c, &o, 300000, 100, buf), -EIO);
	ck_assert_int_eq(fill(c, &o, 300000, 100, buf), 0);
	check_bytes(&f, buf, 300000, 100);
	ck_assert_int_eq(atomic_load(&f.calls), 8);
	/* block 0 read whole: made of its ranges and the two gaps between
	 * them, fetched; nothing kept is fetched again; fills copy from it */
	{
		long long before = atomic_load(&f.bytes);

		ck_assert_int_eq(objfs_cache_read(c, &o, 0, 100, buf), 0);
		check_bytes(&f, buf, 0, 100);
		ck_assert_int_eq(atomic_load(&f.calls), 10);
		ck_assert_int_eq(atomic_load(&f.bytes) - before, 65536 - (17345 - 12000) - 100);
	}
	ck_assert_int_eq(objfs_cache_has(c, o.id, 0), 1);
	ck_assert_int_eq(fill(c, &o, 1000, 60000, buf), 0);
	check_bytes(&f, buf, 1000, 60000);
	ck_assert_int_eq(atomic_load(&f.calls), 10);
	/* 140 ranges of block 5: 128 kept, the rest fetched each time (6
	 * kept before, the failed one among them) */
	for (int i = 0; i < 140; i++)
		ck_assert_int_eq(fill(c, &o, 5 * 65536 + i * 450, 100, buf), 0);
	objfs_cache_get_stats(c, &st);
	ck_assert_uint_eq(st.ranges_kept, 6 + 128);
	for (int i = 0; i < 140; i++) {
		memset(buf, 0, 100);
		ck_assert_int_eq(fill(c, &o, 5 * 65536 + i * 450, 100, buf), 0);
		check_bytes(&f, buf, 5 * 65536 + i * 450, 100);
	}
	ck_assert_int_eq(atomic_load(&f.calls), 10 + 140 + 12);
	objfs_cache_free(c);
}
END_TEST

/*
 * Kept ranges stay under the cap: 400 ranges of 4 KiB in a cache of two
 * 64 KiB blocks, the oldest evicted; every fill right, the cache never
 * over its cap, and a pinned block is never evicted for a range.
 */
START_TEST(test_ranges_within_cap)
{
	struct objfs_cache *c;
	struct objfs_cache_obj o;
	struct objfs_cache_stats st;
	struct objfs_cache_pin pin;
	struct fake_store f = { .salt = 22 };
	static char buf[4096];

	ck_assert_int_eq(objfs_cache_new(2 * 65536, 65536, &c), 0);
	obj_init(&o, &f, "obj-ranges-cap", 400 * 65536);
	ck_assert_int_eq(objfs_cache_pin(c, &o, 0, 10, &pin), 0);
	for (int i = 1; i < 400; i++) {
		ck_assert_int_eq(fill(c, &o, (int64_t)i * 65536 + 4096, 4096, buf), 0);
		check_bytes(&f, buf, (int64_t)i * 65536 + 4096, 4096);
		objfs_cache_get_stats(c, &st);
		ck_assert_uint_le(st.bytes + st.pool_bytes, 2 * 65536);
	}
	ck_assert_uint_eq(st.ranges_kept, 399);
	ck_assert_uint_eq(st.bytes, 2 * 65536); /* the pinned block and 16 ranges */
	check_bytes(&f, pin.iov[0].iov_base, 0, 10);
	/* the last 16 are kept, the ones before were evicted */
	ck_assert_int_eq(fill(c, &o, 399 * 65536 + 4096, 4096, buf), 0);
	ck_assert_int_eq(atomic_load(&f.calls), 400);
	ck_assert_int_eq(fill(c, &o, 1 * 65536 + 4096, 4096, buf), 0);
	check_bytes(&f, buf, 1 * 65536 + 4096, 4096);
	ck_assert_int_eq(atomic_load(&f.calls), 401);
	objfs_cache_unpin(c, &pin);
	objfs_cache_free(c);
}
END_TEST

/* Fills of small ranges and whole-block reads of the same blocks at once,
 * from 8 threads: ranges are kept and dropped under the readers, and every
 * byte is right. */
struct race_arg {
	struct objfs_cache *c;
	struct objfs_cache_obj *o;
	struct fake_store *f;
	unsigned seed;
	int bad;
};

static void *race_main(void *arg)
{
	struct race_arg *a = arg;
	char buf[20000];

	for (int i = 0; i < 400; i++) {
		int64_t off = (int64_t)(rand_r(&a->seed) % (16 * 65536 - 20000));
		size_t len = 1 + rand_r(&a->seed) % 16000;
		int err = rand_r(&a->seed) % 8 ? fill(a->c, a->o, off, len, buf) :
						 objfs_cache_read(a->c, a->o, off, len, buf);

		if (err || fake_store_check(a->f, buf, off, len) != len)
			a->bad++;
	}
	return NULL;
}

START_TEST(test_ranges_race_blocks)
{
	struct objfs_cache *c;
	struct objfs_cache_obj o;
	struct fake_store f = { .salt = 23, .delay_us = 50 };
	struct race_arg a[8];
	pthread_t t[8];

	ck_assert_int_eq(objfs_cache_new(6 * 65536, 65536, &c), 0);
	obj_init(&o, &f, "obj-ranges-race", 16 * 65536);
	for (int i = 0; i < 8; i++) {
		a[i] = (struct race_arg){ c, &o, &f, (unsigned)i + 1, 0 };
		ck_assert_int_eq(pthread_create(&t[i], NULL, race_main, &a[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		ck_assert_int_eq(a[i].bad, 0);
	}
	objfs_cache_free(c);
}
END_TEST

/* 10,000 blocks: the hash table grows twice (4,096 buckets at first) and
 * every block is still found, with the right bytes. */
START_TEST(test_hash_grows)
{
	struct objfs_cache *c;
	struct objfs_cache_obj o;
	struct fake_store f = { .salt = 11 };
	static char buf[64 * 10000];
	int calls;

	ck_assert_int_eq(objfs_cache_new(1 << 20, 64, &c), 0);
	obj_init(&o, &f, "obj-many", sizeof(buf));
	for (int64_t off = 0; off < (int64_t)sizeof(buf); off += 6400)
		ck_assert_int_eq(objfs_cache_read(c, &o, off, 6400, buf + off), 0);
	check_bytes(&f, buf, 0, sizeof(buf));
	calls = atomic_load(&f.calls);
	memset(buf, 0, sizeof(buf));
	ck_assert_int_eq(objfs_cache_read(c, &o, 0, sizeof(buf), buf), 0); /* all hits */
	check_bytes(&f, buf, 0, sizeof(buf));
	ck_assert_int_eq(atomic_load(&f.calls), calls);
	objfs_cache_free(c);
}
END_TEST

static Suite *cache_suite(void)
{
	Suite *s = suite_create("cache");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_fill_near_int64_max);
	tcase_add_test(tc, test_contents_and_hits);
	tcase_add_test(tc, test_single_flight);
	tcase_add_test(tc, test_cap_and_eviction);
	tcase_add_test(tc, test_buffer_pool);
	tcase_add_test(tc, test_fill_waits_without_blocking);
	tcase_add_test(tc, test_copy_stream);
	tcase_add_test(tc, test_drop_behind);
	tcase_add_test(tc, test_prefetch_respects_cap);
	tcase_add_test(tc, test_prefetch_whole_window);
	tcase_add_test(tc, test_failure_not_cached);
	tcase_add_test(tc, test_identity);
	tcase_add_test(tc, test_fill_direct);
	tcase_add_test(tc, test_fill_failure);
	tcase_add_test(tc, test_hash_grows);
	tcase_add_test(tc, test_fill_keeps_ranges);
	tcase_add_test(tc, test_fill_keeps_only_its_bytes);
	tcase_add_test(tc, test_fill_buffers_within_cap);
	tcase_add_test(tc, test_ranges_within_cap);
	tcase_add_test(tc, test_ranges_race_blocks);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(cache_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
