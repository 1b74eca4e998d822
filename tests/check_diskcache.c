/*
 * Unit tests of src/cache/diskcache.c on a temporary directory, with a fake
 * network fetch that fills a byte pattern and counts its calls: misses go to
 * the network and are written behind, hits are served from disk with the
 * right bytes, LRU eviction order and the byte cap, checksum and identity
 * mismatches are misses (the file is deleted, the block never served), the
 * index is rebuilt by scanning, a second open of one directory is refused,
 * and a full disk degrades to network-only.
 *
 * Write-behind holds the fetch's own buffer (no copy): each fetch here is a
 * refcounted buffer, held and released through objfs_diskcache_set_holder
 * as the block cache does it. Every hold must be released (also on failed
 * writes and at free), a burst of misses must all be written, and only
 * beyond the held-bytes bound is a write dropped.
 *
 * Parts of blocks (put_range/has_range/read_range): pages put are readable
 * to the byte and nothing else is; two puts merge (also many in flight at
 * once); pages that cover the block make a whole chunk; a flipped byte in a
 * page read is RETRY (pages not read are still served) and one in the
 * metadata a miss, on read or at the warm-start scan; a remount keeps the
 * pages; format 1 files are removed; odd ranges are refused, not crashed on.
 */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include "cache.h"
#include "diskcache.h"

#define BS   (64u << 10)
#define HDR  4096u

static atomic_int net_calls;
static unsigned char net_salt;

static unsigned char byte_at(int64_t off)
{
	return (unsigned char)((off * 131 + (off >> 9) + net_salt) & 0xff);
}

/* The network: fills the pattern at once, on the caller's thread. */
static void net_fetch(void *ctx, int64_t off, size_t len, char *dst, objfs_fetch_done_fn done,
		      void *arg)
{
	(void)ctx;
	atomic_fetch_add(&net_calls, 1);
	for (size_t i = 0; i < len; i++)
		dst[i] = (char)byte_at(off + (int64_t)i);
	done(arg, 0);
}

/* One fetch: its buffer, freed when the test and the disk cache let go. */
struct wait {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int done, err;
	char *buf;
	atomic_int refs;
};

static atomic_int holds, releases;
/* release() waits while the gate is closed: stalls the disk thread */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate_closed;

static void wait_put(struct wait *w)
{
	if (atomic_fetch_sub(&w->refs, 1) == 1) {
		free(w->buf);
		free(w);
	}
}

static void t_hold(void *arg)
{
	struct wait *w = arg;

	atomic_fetch_add(&holds, 1);
	atomic_fetch_add(&w->refs, 1);
}

static void t_release(void *arg)
{
	pthread_mutex_lock(&gate_lock);
	while (gate_closed)
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);
	atomic_fetch_add(&releases, 1);
	wait_put(arg);
}

static void gate_set(int closed)
{
	pthread_mutex_lock(&gate_lock);
	gate_closed = closed;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
}

static void on_done(void *arg, int err)
{
	struct wait *w = arg;

	pthread_mutex_lock(&w->lock);
	w->done = 1;
	w->err = err;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

/* Waits for on_done(@w): the error it got. */
static int wait_done(struct wait *w)
{
	pthread_mutex_lock(&w->lock);
	while (!w->done)
		pthread_cond_wait(&w->cond, &w->lock);
	pthread_mutex_unlock(&w->lock);
	return w->err;
}

#define WRONG_BYTES 1000 /* fetch_raw(): served, but not the right bytes */

/*
 * One block fetch through the disk cache: its error, WRONG_BYTES, or
 * -ENOMEM. No ck_assert here: Check's asserts are not for other threads.
 */
static int fetch_raw(struct objfs_diskcache *dc, const char *id, uint64_t idx, size_t len)
{
	struct wait *w = calloc(1, sizeof(*w));
	int64_t off = (int64_t)(idx * BS);
	char *buf;
	int err;

	if (!w)
		return -ENOMEM;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	atomic_init(&w->refs, 1); /* ours */
	/* page aligned, as the block cache's full blocks: the O_DIRECT path */
	buf = w->buf = aligned_alloc(4096, (len + 4095) / 4096 * 4096);
	if (!buf) {
		free(w);
		return -ENOMEM;
	}
	memset(buf, 0x5a, len);
	objfs_diskcache_fetch(dc, id, idx, net_fetch, NULL, off, len, buf, on_done, w);
	err = wait_done(w);
	for (size_t i = 0; !err && i < len; i++)
		if ((unsigned char)buf[i] != byte_at(off + (int64_t)i))
			err = WRONG_BYTES;
	/* the disk cache may still hold it for writing: freed by the last put */
	wait_put(w);
	return err;
}

/* fetch_raw() that fails the test on wrong bytes or no memory. */
static int fetch(struct objfs_diskcache *dc, const char *id, uint64_t idx, size_t len)
{
	int err = fetch_raw(dc, id, idx, len);

	ck_assert_msg(err != WRONG_BYTES, "wrong bytes in block %llu", (unsigned long long)idx);
	ck_assert_int_ne(err, -ENOMEM);
	return err;
}

static char dir[256];

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/check_diskcache.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	atomic_store(&net_calls, 0);
	atomic_store(&holds, 0);
	atomic_store(&releases, 0);
	gate_set(0);
	net_salt = 7;
}

static void teardown(void)
{
	char cmd[512];

	/* every buffer held for writing was released (dc freed by the test) */
	ck_assert_int_eq(atomic_load(&releases), atomic_load(&holds));
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	(void)!system(cmd);
}

static struct objfs_diskcache *open_dc(uint64_t cap)
{
	struct objfs_diskcache_cfg cfg = {
		.dir = dir, .cap = cap, .source = "http://origin/", .block_size = BS,
	};
	struct objfs_diskcache *dc = NULL;
	char err[512];
	int ret = objfs_diskcache_open(&cfg, &dc, err, sizeof(err));

	ck_assert_msg(ret == 0, "open failed: %s", err);
	objfs_diskcache_set_holder(dc, t_hold, t_release, 64u << 20);
	return dc;
}

static void chunk_path(struct objfs_diskcache *dc, const char *id, uint64_t idx, char *p,
		       size_t cap)
{
	ck_assert_int_eq(objfs_diskcache_chunk_path(dc, id, idx, p, cap), 0);
}

START_TEST(test_miss_write_hit)
{
	struct objfs_diskcache *dc = open_dc(16 * (BS + HDR));
	struct objfs_diskcache_stats st;
	char path[1024];
	struct stat sb;

	ck_assert_int_eq(fetch(dc, "a\netag1\n300000", 0, BS), 0);
	ck_assert_int_eq(fetch(dc, "a\netag1\n300000", 4, 300000 - 4 * BS), 0); /* short last */
	ck_assert_int_eq(atomic_load(&net_calls), 2);
	objfs_diskcache_flush(dc);
	ck_assert(objfs_diskcache_has(dc, "a\netag1\n300000", 0));
	chunk_path(dc, "a\netag1\n300000", 0, path, sizeof(path));
	ck_assert_int_eq(stat(path, &sb), 0);
	ck_assert_int_eq(sb.st_size, BS + HDR);
	/* served from disk: no network call, right bytes */
	ck_assert_int_eq(fetch(dc, "a\netag1\n300000", 0, BS), 0);
	ck_assert_int_eq(fetch(dc, "a\netag1\n300000", 4, 300000 - 4 * BS), 0);
	ck_assert_int_eq(atomic_load(&net_calls), 2);
	/* another ETag is another object: a miss */
	ck_assert(!objfs_diskcache_has(dc, "a\netag2\n300000", 0));
	ck_assert_int_eq(fetch(dc, "a\netag2\n300000", 0, BS), 0);
	ck_assert_int_eq(atomic_load(&net_calls), 3);
	objfs_diskcache_flush(dc);
	objfs_diskcache_get_stats(dc, &st);
	ck_assert_uint_eq(st.hits, 2);
	ck_assert_uint_eq(st.misses, 3);
	ck_assert_uint_eq(st.writes, 3);
	ck_assert_uint_eq(st.files, 3);
	objfs_diskcache_free(dc);
}
END_TEST

START_TEST(test_lru_eviction_and_cap)
{
	/* room for 3 chunks */
	struct objfs_diskcache *dc = open_dc(3 * (BS + HDR) + 100);
	struct objfs_diskcache_stats st;
	const char *id = "obj\ne\n10000000";

	for (uint64_t i = 0; i < 3; i++)
		ck_assert_int_eq(fetch(dc, id, i, BS), 0);
	objfs_diskcache_flush(dc);
	/* use block 0: block 1 is now the least recently used */
	ck_assert_int_eq(fetch(dc, id, 0, BS), 0);
	ck_assert_int_eq(fetch(dc, id, 3, BS), 0);
	objfs_diskcache_flush(dc);
	ck_assert(objfs_diskcache_has(dc, id, 0));
	ck_assert(!objfs_diskcache_has(dc, id, 1));
	ck_assert(objfs_diskcache_has(dc, id, 2));
	ck_assert(objfs_diskcache_has(dc, id, 3));
	ck_assert_int_eq(fetch(dc, id, 4, BS), 0);
	objfs_diskcache_flush(dc);
	ck_assert(!objfs_diskcache_has(dc, id, 2));
	objfs_diskcache_get_stats(dc, &st);
	ck_assert_uint_eq(st.evictions, 2);
	ck_assert_uint_eq(st.files, 3);
	ck_assert(st.bytes <= st.cap);
	/* the evicted files are gone from the disk too */
	{
		char p[1024];

		chunk_path(dc, id, 1, p, sizeof(p));
		ck_assert_int_eq(access(p, F_OK), -1);
	}
	objfs_diskcache_free(dc);
}
END_TEST

static void flip_byte(const char *path, off_t off)
{
	int fd = open(path, O_RDWR);
	unsigned char c;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &c, 1, off), 1);
	c ^= 0xff;
	ck_assert_int_eq(pwrite(fd, &c, 1, off), 1);
	close(fd);
}

START_TEST(test_checksum_mismatch)
{
	struct objfs_diskcache *dc = open_dc(16 * (BS + HDR));
	struct objfs_diskcache_stats st;
	const char *id = "c\ne\n65536";
	char path[1024];

	ck_assert_int_eq(fetch(dc, id, 0, BS), 0);
	objfs_diskcache_flush(dc);
	chunk_path(dc, id, 0, path, sizeof(path));
	flip_byte(path, HDR + 1234);
	/* bad copy: never served; the file is dropped and the caller told to retry */
	ck_assert_int_eq(fetch(dc, id, 0, BS), OBJFS_DISKCACHE_RETRY);
	ck_assert_int_eq(access(path, F_OK), -1);
	ck_assert(!objfs_diskcache_has(dc, id, 0));
	ck_assert_int_eq(fetch(dc, id, 0, BS), 0); /* the retry: from the network */
	ck_assert_int_eq(atomic_load(&net_calls), 2);
	objfs_diskcache_get_stats(dc, &st);
	ck_assert_uint_eq(st.bad, 1);
	objfs_diskcache_flush(dc);
	/* a flipped header byte is caught too */
	flip_byte(path, 30);
	ck_assert_int_eq(fetch(dc, id, 0, BS), OBJFS_DISKCACHE_RETRY);
	/* a truncated file */
	ck_assert_int_eq(fetch(dc, id, 0, BS), 0);
	objfs_diskcache_flush(dc);
	ck_assert_int_eq(truncate(path, HDR + 100), 0);
	ck_assert_int_eq(fetch(dc, id, 0, BS), OBJFS_DISKCACHE_RETRY);
	objfs_diskcache_free(dc);
}
END_TEST

START_TEST(test_identity_mismatch)
{
	struct objfs_diskcache *dc = open_dc(16 * (BS + HDR));
	const char *a = "x\nea\n65536", *b = "y\neb\n65536";
	char pa[1024], pb[1024], cmd[2100];

	/* the same bytes under two names, then A's file put where B's goes:
	 * a checksum-valid file of another identity must not be served */
	ck_assert_int_eq(fetch(dc, a, 0, BS), 0);
	ck_assert_int_eq(fetch(dc, b, 0, BS), 0);
	objfs_diskcache_flush(dc);
	chunk_path(dc, a, 0, pa, sizeof(pa));
	chunk_path(dc, b, 0, pb, sizeof(pb));
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", pa, pb);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert_int_eq(fetch(dc, b, 0, BS), OBJFS_DISKCACHE_RETRY);
	ck_assert_int_eq(access(pb, F_OK), -1);
	ck_assert_int_eq(fetch(dc, a, 0, BS), 0); /* A is untouched */
	ck_assert_int_eq(atomic_load(&net_calls), 2);
	objfs_diskcache_free(dc);
}
END_TEST

START_TEST(test_rebuild_by_scan)
{
	struct objfs_diskcache *dc = open_dc(16 * (BS + HDR));
	const char *id = "r\ne\n1000000";
	struct objfs_diskcache_stats st;
	char junk[512];
	FILE *f;

	for (uint64_t i = 0; i < 5; i++)
		ck_assert_int_eq(fetch(dc, id, i, BS), 0);
	objfs_diskcache_free(dc); /* writes out what is queued */
	/* a foreign file and a crash leftover in tmp/ */
	snprintf(junk, sizeof(junk), "%s/chunks/00/notes.txt", dir);
	f = fopen(junk, "w");
	ck_assert_ptr_nonnull(f);
	fputs("hello", f);
	fclose(f);
	snprintf(junk, sizeof(junk), "%s/tmp/0123", dir);
	f = fopen(junk, "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	atomic_store(&net_calls, 0);
	dc = open_dc(16 * (BS + HDR));
	objfs_diskcache_get_stats(dc, &st);
	ck_assert_uint_eq(st.files, 5);
	ck_assert_uint_eq(st.bytes, 5 * (BS + HDR));
	ck_assert_int_eq(access(junk, F_OK), -1);
	for (uint64_t i = 0; i < 5; i++)
		ck_assert_int_eq(fetch(dc, id, i, BS), 0);
	ck_assert_int_eq(atomic_load(&net_calls), 0);
	objfs_diskcache_free(dc);
	/* reopened with a smaller cap: trimmed to it */
	dc = open_dc(2 * (BS + HDR));
	objfs_diskcache_get_stats(dc, &st);
	ck_assert_uint_eq(st.files, 2);
	objfs_diskcache_free(dc);
	/* another source or block size never sees these chunks */
	{
		struct objfs_diskcache_cfg cfg = {
			.dir = dir, .cap = 16 * (BS + HDR), .source = "http://other/",
			.block_size = BS,
		};
		char err[512];

		ck_assert_int_eq(objfs_diskcache_open(&cfg, &dc, err, sizeof(err)), 0);
		ck_assert(!objfs_diskcache_has(dc, id, 4) && !objfs_diskcache_has(dc, id, 3));
		objfs_diskcache_free(dc);
	}
}
END_TEST

START_TEST(test_lock_refusal)
{
	struct objfs_diskcache *dc = open_dc(16 * (BS + HDR)), *dc2 = NULL;
	struct objfs_diskcache_cfg cfg = {
		.dir = dir, .cap = 16 * (BS + HDR), .source = "s", .block_size = BS,
	};
	char err[1024];

	ck_assert_int_eq(objfs_diskcache_open(&cfg, &dc2, err, sizeof(err)), -EBUSY);
	ck_assert_ptr_null(dc2);
	ck_assert_msg(strstr(err, dir) && strstr(err, "in use"), "message: %s", err);
	objfs_diskcache_free(dc);
	/* released at free */
	ck_assert_int_eq(objfs_diskcache_open(&cfg, &dc2, err, sizeof(err)), 0);
	objfs_diskcache_free(dc2);
	/* a cap below two chunks is refused */
	cfg.cap = BS;
	ck_assert_int_eq(objfs_diskcache_open(&cfg, &dc2, err, sizeof(err)), -EINVAL);
}
END_TEST

START_TEST(test_write_failure_not_cached)
{
	struct objfs_diskcache *dc = open_dc(16 * (BS + HDR));
	struct objfs_diskcache_stats st;
	const char *id = "d\ne\n1000000";
	char tmpdir[512], cmd[1200];

	/* tmp/ made unusable: creating a chunk fails with ENOTDIR, which is not
	 * a disk failure: the chunk is just not cached */
	snprintf(tmpdir, sizeof(tmpdir), "%s/tmp", dir);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s' && touch '%s'", tmpdir, tmpdir);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert_int_eq(fetch(dc, id, 0, BS), 0);
	objfs_diskcache_flush(dc);
	objfs_diskcache_get_stats(dc, &st);
	ck_assert_uint_eq(st.writes, 0);
	ck_assert_int_eq(st.degraded, 0);
	ck_assert(!objfs_diskcache_has(dc, id, 0));
	ck_assert_uint_eq(st.files, 0);
	ck_assert_int_eq(fetch(dc, id, 0, BS), 0);
	ck_assert_int_eq(atomic_load(&net_calls), 2);
	objfs_diskcache_flush(dc);
	objfs_diskcache_free(dc);
}
END_TEST

/* Fetches blocks [first, first+n) of @id from @nthreads threads at once. */
struct burst {
	struct objfs_diskcache *dc;
	const char *id;
	uint64_t first, n, step;
	int failed;
};

static void *burst_thread(void *arg)
{
	struct burst *b = arg;

	for (uint64_t i = b->first; i < b->n; i += b->step)
		if (fetch_raw(b->dc, b->id, i, BS))
			b->failed++;
	return NULL;
}

START_TEST(test_burst_all_written)
{
	/* 256 misses as fast as 4 threads can fetch them, no flush in between:
	 * the old 64 MiB queue of copies dropped most writes of such a burst
	 * when the disk thread lagged; holding the buffers, none may drop */
	enum { N = 256, T = 4 };
	struct objfs_diskcache *dc = open_dc((uint64_t)N * (BS + HDR));
	struct objfs_diskcache_stats st;
	struct burst b[T];
	pthread_t th[T];
	const char *id = "burst\ne\n99999999";

	for (int t = 0; t < T; t++) {
		b[t] = (struct burst){ dc, id, (uint64_t)t, N, T, 0 };
		ck_assert_int_eq(pthread_create(&th[t], NULL, burst_thread, &b[t]), 0);
	}
	for (int t = 0; t < T; t++) {
		pthread_join(th[t], NULL);
		ck_assert_int_eq(b[t].failed, 0);
	}
	objfs_diskcache_flush(dc);
	objfs_diskcache_get_stats(dc, &st);
	ck_assert_uint_eq(st.writes_dropped, 0);
	ck_assert_uint_eq(st.writes, N);
	ck_assert_uint_eq(st.files, N);
	ck_assert_int_eq(atomic_load(&holds), N);
	ck_assert_int_eq(atomic_load(&releases), N);
	/* all of it served from disk now */
	atomic_store(&net_calls, 0);
	for (uint64_t i = 0; i < N; i++)
		ck_assert_int_eq(fetch(dc, id, i, BS), 0);
	ck_assert_int_eq(atomic_load(&net_calls), 0);
	objfs_diskcache_get_stats(dc, &st);
	ck_assert_uint_eq(st.hits, N);
	objfs_diskcache_free(dc);
}
END_TEST

START_TEST(test_hold_bound_drops)
{
	/* at most two blocks held: with the disk thread stalled in release(),
	 * the third miss is dropped (counted), the first two still written */
	struct objfs_diskcache *dc = open_dc(16 * (BS + HDR));
	struct objfs_diskcache_stats st;
	const char *id = "bound\ne\n1000000";

	objfs_diskcache_set_holder(dc, t_hold, t_release, 2 * BS);
	gate_set(1);
	ck_assert_int_eq(fetch(dc, id, 0, BS), 0);
	ck_assert_int_eq(fetch(dc, id, 1, BS), 0);
	ck_assert_int_eq(fetch(dc, id, 2, BS), 0); /* still right bytes */
	objfs_diskcache_get_stats(dc, &st);
	ck_assert_uint_eq(st.writes_dropped, 1);
	ck_assert_int_eq(atomic_load(&holds), 2);
	gate_set(0);
	objfs_diskcache_flush(dc);
	ck_assert_int_eq(atomic_load(&releases), 2);
	objfs_diskcache_get_stats(dc, &st);
	ck_assert_uint_eq(st.writes, 2);
	ck_assert_uint_eq(st.writes_dropped, 1);
	ck_assert(objfs_diskcache_has(dc, id, 0) && objfs_diskcache_has(dc, id, 1));
	ck_assert(!objfs_diskcache_has(dc, id, 2));
	/* without a holder nothing is written (and nothing held) */
	objfs_diskcache_set_holder(dc, NULL, NULL, 0);
	ck_assert_int_eq(fetch(dc, id, 3, BS), 0);
	objfs_diskcache_flush(dc);
	ck_assert(!objfs_diskcache_has(dc, id, 3));
	ck_assert_int_eq(atomic_load(&holds), 2);
	objfs_diskcache_free(dc);
}
END_TEST

START_TEST(test_free_releases_held)
{
	/* free without a flush: queued writes are written out and released
	 * before the thread stops (the block cache then frees its blocks) */
	struct objfs_diskcache *dc = open_dc(64 * (BS + HDR));
	const char *id = "free\ne\n9999999";

	for (uint64_t i = 0; i < 32; i++)
		ck_assert_int_eq(fetch(dc, id, i, BS), 0);
	objfs_diskcache_free(dc);
	ck_assert_int_eq(atomic_load(&holds), 32);
	ck_assert_int_eq(atomic_load(&releases), 32);
	dc = open_dc(64 * (BS + HDR));
	for (uint64_t i = 0; i < 32; i++)
		ck_assert(objfs_diskcache_has(dc, id, i));
	objfs_diskcache_free(dc);
}
END_TEST

/* objfs_diskcache_read() into @buf; its done() error, or -ENOENT when not queued. */
static int read_only(struct objfs_diskcache *dc, const char *id, uint64_t idx, size_t len,
		     char *buf)
{
	struct wait w = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
	int rc = objfs_diskcache_read(dc, id, idx, len, buf, on_done, &w);

	return rc ? rc : wait_done(&w);
}

START_TEST(test_read_without_fallback)
{
	struct objfs_diskcache *dc = open_dc(16 * (BS + HDR));
	const char *id = "ro\ne\n1000000";
	char *buf = aligned_alloc(4096, BS), path[1024];
	int i = 0;

	ck_assert_ptr_nonnull(buf);
	/* not cached: refused at once, no network, nothing written */
	ck_assert_int_eq(read_only(dc, id, 1, BS, buf), -ENOENT);
	ck_assert_int_eq(atomic_load(&net_calls), 0);
	ck_assert_int_eq(fetch(dc, id, 1, BS), 0);
	objfs_diskcache_flush(dc);
	/* cached: from disk, the right bytes; an unaligned buffer reads buffered */
	memset(buf, 0, BS);
	ck_assert_int_eq(read_only(dc, id, 1, BS, buf), 0);
	while (i < (int)BS && (unsigned char)buf[i] == byte_at(BS + i))
		i++;
	ck_assert_int_eq(i, BS);
	ck_assert_int_eq(read_only(dc, id, 1, BS - 4096, buf + 1), OBJFS_DISKCACHE_RETRY);
	ck_assert_int_eq(atomic_load(&net_calls), 1);
	/* the length did not match the chunk: dropped, as any bad copy */
	ck_assert(!objfs_diskcache_has(dc, id, 1));
	ck_assert_int_eq(fetch(dc, id, 1, BS), 0);
	objfs_diskcache_flush(dc);
	chunk_path(dc, id, 1, path, sizeof(path));
	flip_byte(path, HDR + 77);
	ck_assert_int_eq(read_only(dc, id, 1, BS, buf), OBJFS_DISKCACHE_RETRY);
	ck_assert(!objfs_diskcache_has(dc, id, 1));
	free(buf);
	objfs_diskcache_free(dc);
}
END_TEST

START_TEST(test_lru_order_survives_remount)
{
	struct objfs_diskcache *dc = open_dc(16 * (BS + HDR));
	const char *id = "lru\ne\n1000000";

	for (uint64_t i = 0; i < 3; i++) {
		ck_assert_int_eq(fetch(dc, id, i, BS), 0);
		objfs_diskcache_flush(dc); /* written in order 0, 1, 2 */
		usleep(20000);
	}
	ck_assert_int_eq(fetch(dc, id, 0, BS), 0); /* a hit: 0 is now the newest */
	ck_assert_int_eq(atomic_load(&net_calls), 3);
	objfs_diskcache_free(dc);
	/* room for two: the least recently used (1) goes, not the oldest written (0) */
	dc = open_dc(2 * (BS + HDR));
	ck_assert(objfs_diskcache_has(dc, id, 0));
	ck_assert(!objfs_diskcache_has(dc, id, 1));
	ck_assert(objfs_diskcache_has(dc, id, 2));
	objfs_diskcache_free(dc);
}
END_TEST

/* objfs_cache_fill() of [off, off+len) into @buf, checked against the pattern. */
static void fill_check(struct objfs_cache *c, const struct objfs_cache_obj *o, int64_t off,
		       size_t len, char *buf)
{
	struct wait w = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
	size_t i = 0;

	memset(buf, 0x5a, len);
	objfs_cache_fill(c, o, off, len, buf, 0, on_done, &w);
	ck_assert_int_eq(wait_done(&w), 0);
	while (i < len && (unsigned char)buf[i] == byte_at(off + (int64_t)i))
		i++;
	ck_assert_msg(i == len, "byte %lld wrong", (long long)(off + (int64_t)i));
}

/* GPU fills (objfs_cache_fill) with a disk cache: whole blocks on disk are
 * read straight into the destination, parts of blocks go through the cache. */
START_TEST(test_fill_from_disk)
{
	struct objfs_diskcache *dc = open_dc(64 * (BS + HDR));
	struct objfs_cache *c;
	struct objfs_cache_obj o = { "fill\ne\n1000000", 1000000, net_fetch, NULL };
	struct objfs_cache_stats cs;
	struct objfs_diskcache_stats ds;
	char *buf = aligned_alloc(4096, 11 * BS);

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(objfs_cache_new(4u << 20, BS, &c), 0);
	objfs_cache_set_disk(c, dc);
	/* blocks 0..7 on disk through the cache's read path, then out of memory */
	ck_assert_int_eq(objfs_cache_read(c, &o, 0, 8 * BS, buf), 0);
	objfs_cache_free(c); /* flushes the disk writes */
	ck_assert_int_eq(objfs_cache_new(4u << 20, BS, &c), 0);
	objfs_cache_set_disk(c, dc);
	atomic_store(&net_calls, 0);
	/* whole blocks 1..5: all from disk, straight into buf, nothing kept */
	fill_check(c, &o, BS, 5 * BS, buf);
	objfs_diskcache_get_stats(dc, &ds);
	ck_assert_uint_eq(ds.hits, 5);
	objfs_cache_get_stats(c, &cs);
	ck_assert_uint_eq(cs.bytes, 0);
	ck_assert_int_eq(atomic_load(&net_calls), 0);
	/* an odd start: part of block 0 straight from disk (parts of blocks
	 * are read from disk too, not pinned whole through the memory
	 * cache), whole blocks 1..7 straight from disk, blocks 8..10 (not
	 * on disk) from the network in one run, straight into buf */
	fill_check(c, &o, 100, 10 * BS + 1000 - 100, buf);
	objfs_diskcache_get_stats(dc, &ds);
	ck_assert_uint_eq(ds.hits, 5 + 1 + 7);
	objfs_cache_get_stats(c, &cs);
	ck_assert_uint_eq(cs.bytes, 0);
	ck_assert_uint_eq(cs.direct_bytes, 2 * BS + 1000);
	ck_assert_int_eq(atomic_load(&net_calls), 1);
	/* the whole blocks fetched straight into buf are written behind from
	 * copies (the next pass reads them from disk); the partial one is not */
	objfs_diskcache_flush(dc);
	ck_assert(objfs_diskcache_has(dc, o.id, 8) && objfs_diskcache_has(dc, o.id, 9));
	ck_assert(!objfs_diskcache_has(dc, o.id, 10));
	fill_check(c, &o, 8 * BS, 2 * BS, buf);
	ck_assert_int_eq(atomic_load(&net_calls), 1);
	/* the object's last, short block counts as whole */
	fill_check(c, &o, 15 * BS, 1000000 - 15 * BS, buf);
	objfs_diskcache_flush(dc);
	ck_assert(objfs_diskcache_has(dc, o.id, 15));
	/* part of block 3, on disk: straight from disk too, nothing kept */
	fill_check(c, &o, 3 * BS + 5, BS - 10, buf);
	objfs_diskcache_get_stats(dc, &ds);
	ck_assert_uint_eq(ds.hits, 5 + 1 + 7 + 2 + 1); /* + blocks 8, 9 above */
	objfs_cache_get_stats(c, &cs);
	ck_assert_uint_eq(cs.bytes, 0);
	ck_assert_int_eq(atomic_load(&net_calls), 2); /* + block 15 above */
	objfs_cache_free(c);
	objfs_diskcache_free(dc);
	free(buf);
}
END_TEST

/*
 * A fill part whose own buffer cannot get room however much is evicted
 * (blocks held fill most of the cap) goes without one and leaves the LRU
 * alone, rather than a large part (with a disk cache, any part has one)
 * emptying the memory cache first, for nothing. Cap 8 blocks: 6 pinned,
 * 2 cached on the LRU, then a fill of 3 blocks not in memory.
 */
START_TEST(test_fill_no_room_evicts_nothing)
{
	struct objfs_diskcache *dc = open_dc(64 * (BS + HDR));
	struct objfs_cache *c;
	struct objfs_cache_obj o = { "full\ne\n4000000", 4000000, net_fetch, NULL };
	struct objfs_cache_pin pins[6];
	char *buf = aligned_alloc(4096, 3 * BS);

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(objfs_cache_new(8 * BS, BS, &c), 0);
	objfs_cache_set_disk(c, dc);
	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(objfs_cache_pin(c, &o, (int64_t)i * BS, BS, &pins[i]), 0);
	ck_assert_int_eq(objfs_cache_read(c, &o, 6 * BS, 2 * BS, buf), 0);
	ck_assert(objfs_cache_has(c, o.id, 6) && objfs_cache_has(c, o.id, 7));
	fill_check(c, &o, 20 * BS, 3 * BS, buf);
	ck_assert(objfs_cache_has(c, o.id, 6) && objfs_cache_has(c, o.id, 7));
	for (int i = 0; i < 6; i++)
		objfs_cache_unpin(c, &pins[i]);
	objfs_cache_free(c);
	objfs_diskcache_free(dc);
	free(buf);
}
END_TEST

/* The network as net_fetch, whose end scribbles on the fill's destination
 * first: a GPU client writing its ring slot while a fill is in flight. */
static char *scribble_on;
static size_t scribble_len;

static void scribble_fetch(void *ctx, int64_t off, size_t len, char *dst,
			   objfs_fetch_done_fn done, void *arg)
{
	(void)ctx;
	atomic_fetch_add(&net_calls, 1);
	for (size_t i = 0; i < len; i++)
		dst[i] = (char)byte_at(off + (int64_t)i);
	memset(scribble_on, 0xa5, scribble_len);
	done(arg, 0);
}

/* What a fill writes behind to disk is its own bytes, never what its
 * destination holds (a client may write its ring slot meanwhile). */
START_TEST(test_fill_writes_behind_only_its_bytes)
{
	struct objfs_diskcache *dc = open_dc(64 * (BS + HDR));
	struct objfs_cache *c;
	struct objfs_cache_obj o = { "scribbled\ne\n1000000", 1000000, scribble_fetch, NULL };
	char *ring = aligned_alloc(4096, 2 * BS), *buf = aligned_alloc(4096, 2 * BS);

	ck_assert(ring && buf);
	ck_assert_int_eq(objfs_cache_new(4u << 20, BS, &c), 0);
	objfs_cache_set_disk(c, dc);
	scribble_on = ring;
	scribble_len = 2 * BS;
	atomic_store(&net_calls, 0);
	fill_check(c, &o, 2 * BS, 2 * BS, ring); /* blocks 2 and 3, whole */
	objfs_cache_free(c); /* flushes the disk writes */
	ck_assert(objfs_diskcache_has(dc, o.id, 2) && objfs_diskcache_has(dc, o.id, 3));
	ck_assert_int_eq(objfs_cache_new(4u << 20, BS, &c), 0);
	objfs_cache_set_disk(c, dc);
	fill_check(c, &o, 2 * BS, 2 * BS, buf); /* from disk: the right bytes */
	ck_assert_int_eq(atomic_load(&net_calls), 1);
	objfs_cache_free(c);
	objfs_diskcache_free(dc);
	free(ring);
	free(buf);
}
END_TEST

/* ---------------------------------------------------------------- parts of blocks */

#define PG 4096u

/* put_range() of [off, off+len) of block @idx (@block_len long) of @id, from the pattern. */
static void put_part(struct objfs_diskcache *dc, const char *id, uint64_t idx, size_t block_len,
		     size_t off, size_t len)
{
	char *b = malloc(len ? len : 1);

	ck_assert_ptr_nonnull(b);
	for (size_t i = 0; i < len; i++)
		b[i] = (char)byte_at((int64_t)(idx * BS + off + i));
	objfs_diskcache_put_range(dc, id, idx, block_len, off, b, len);
	memset(b, 0, len); /* copied before put_range returned */
	free(b);
}

/* read_range() of [off, off+len) of block @idx into @buf: its done() error, or the
 * call's (-ENOENT); WRONG_BYTES when served but not the pattern. */
static int read_part(struct objfs_diskcache *dc, const char *id, uint64_t idx, size_t off,
		     size_t len, char *buf)
{
	struct wait w = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
	int rc;

	memset(buf, 0x5a, len);
	rc = objfs_diskcache_read_range(dc, id, idx, off, len, buf, on_done, &w);
	if (rc)
		return rc;
	rc = wait_done(&w);
	for (size_t i = 0; !rc && i < len; i++)
		if ((unsigned char)buf[i] != byte_at((int64_t)(idx * BS + off + i)))
			rc = WRONG_BYTES;
	return rc;
}

static uint64_t disk_bytes(struct objfs_diskcache *dc)
{
	struct objfs_diskcache_stats st;

	objfs_diskcache_get_stats(dc, &st);
	return st.bytes;
}

START_TEST(test_partial_put_read)
{
	struct objfs_diskcache *dc = open_dc(16 * (BS + HDR));
	const char *id = "p\ne\n1000000";
	char *buf = malloc(BS + 1), path[1024];
	struct stat sb;

	ck_assert_ptr_nonnull(buf);
	put_part(dc, id, 2, BS, PG, 2 * PG);
	objfs_diskcache_flush(dc);
	/* the pages put, and only those, from memory */
	ck_assert(objfs_diskcache_has_range(dc, id, 2, PG, 2 * PG));
	ck_assert(objfs_diskcache_has_range(dc, id, 2, PG + 100, 5000));
	ck_assert(!objfs_diskcache_has_range(dc, id, 2, 0, PG));
	ck_assert(!objfs_diskcache_has_range(dc, id, 2, PG, 2 * PG + 1));
	ck_assert(!objfs_diskcache_has(dc, id, 2));
	ck_assert(!objfs_diskcache_has_range(dc, id, 1, PG, PG));
	/* the cap counts real bytes: metadata and two pages, no holes */
	ck_assert_uint_eq(disk_bytes(dc), HDR + 2 * PG);
	chunk_path(dc, id, 2, path, sizeof(path));
	ck_assert_ptr_nonnull(strstr(path, ".p3"));
	ck_assert_int_eq(stat(path, &sb), 0);
	ck_assert_int_eq(sb.st_size, HDR + 3 * PG);
	/* exact bytes, aligned or not, into an odd destination */
	ck_assert_int_eq(read_part(dc, id, 2, PG, 2 * PG, buf), 0);
	ck_assert_int_eq(read_part(dc, id, 2, PG + 100, 5000, buf + 1), 0);
	ck_assert_int_eq(read_part(dc, id, 2, 3 * PG - 1, 1, buf), 0);
	ck_assert_int_eq(read_part(dc, id, 2, 0, 10, buf), -ENOENT);
	/* a whole-block read of a partial chunk is a miss: the network, which
	 * completes the chunk */
	ck_assert_int_eq(read_only(dc, id, 2, BS, buf), -ENOENT);
	ck_assert_int_eq(fetch(dc, id, 2, BS), 0);
	ck_assert_int_eq(atomic_load(&net_calls), 1);
	objfs_diskcache_flush(dc);
	ck_assert(objfs_diskcache_has(dc, id, 2));
	ck_assert_uint_eq(disk_bytes(dc), BS + HDR);
	chunk_path(dc, id, 2, path, sizeof(path));
	ck_assert_ptr_nonnull(strstr(path, ".c3"));
	ck_assert_int_eq(stat(path, &sb), 0);
	ck_assert_int_eq(sb.st_size, BS + HDR);
	ck_assert_int_eq(fetch(dc, id, 2, BS), 0);
	ck_assert_int_eq(read_part(dc, id, 2, 0, BS, buf + 1), 0);
	ck_assert_int_eq(read_part(dc, id, 2, 777, 9999, buf), 0);
	ck_assert_int_eq(atomic_load(&net_calls), 1);
	free(buf);
	objfs_diskcache_free(dc);
}
END_TEST

START_TEST(test_partial_merge_complete)
{
	struct objfs_diskcache *dc = open_dc(16 * (BS + HDR));
	struct objfs_diskcache_stats st;
	const char *id = "m\ne\n1000000";
	char *buf = malloc(BS), path[1024];

	ck_assert_ptr_nonnull(buf);
	put_part(dc, id, 0, BS, 0, PG);
	put_part(dc, id, 0, BS, 2 * PG, PG);
	objfs_diskcache_flush(dc);
	ck_assert(objfs_diskcache_has_range(dc, id, 0, 0, PG));
	ck_assert(objfs_diskcache_has_range(dc, id, 0, 2 * PG, PG));
	ck_assert(!objfs_diskcache_has_range(dc, id, 0, 0, 3 * PG));
	ck_assert_uint_eq(disk_bytes(dc), HDR + 2 * PG);
	ck_assert_int_eq(read_part(dc, id, 0, 10, PG - 10, buf), 0);
	ck_assert_int_eq(read_part(dc, id, 0, 2 * PG, PG, buf), 0);
	/* over both and the hole between: only the hole is added */
	put_part(dc, id, 0, BS, 0, 4 * PG);
	objfs_diskcache_flush(dc);
	ck_assert(objfs_diskcache_has_range(dc, id, 0, 0, 4 * PG));
	ck_assert_uint_eq(disk_bytes(dc), HDR + 4 * PG);
	ck_assert_int_eq(read_part(dc, id, 0, 1, 4 * PG - 2, buf), 0);
	/* pages already there: nothing happens */
	objfs_diskcache_get_stats(dc, &st);
	put_part(dc, id, 0, BS, PG, PG);
	objfs_diskcache_flush(dc);
	{
		struct objfs_diskcache_stats st2;

		objfs_diskcache_get_stats(dc, &st2);
		ck_assert_uint_eq(st2.writes, st.writes);
		ck_assert_uint_eq(st2.writes_dropped, st.writes_dropped);
	}
	/* the rest of the block: a whole chunk */
	put_part(dc, id, 0, BS, 4 * PG, BS - 4 * PG);
	objfs_diskcache_flush(dc);
	ck_assert(objfs_diskcache_has(dc, id, 0));
	ck_assert_uint_eq(disk_bytes(dc), BS + HDR);
	chunk_path(dc, id, 0, path, sizeof(path));
	ck_assert_ptr_nonnull(strstr(path, ".c3"));
	ck_assert_int_eq(fetch(dc, id, 0, BS), 0);
	ck_assert_int_eq(atomic_load(&net_calls), 0);
	objfs_diskcache_get_stats(dc, &st);
	ck_assert_uint_eq(st.files, 1);
	ck_assert_uint_eq(st.bad, 0);
	free(buf);
	objfs_diskcache_free(dc);
}
END_TEST

/* put_range()s of single pages of one block from several threads, no flush between. */
struct pages {
	struct objfs_diskcache *dc;
	const char *id;
	size_t first, step;
};

static void *pages_thread(void *arg)
{
	struct pages *p = arg;
	char b[PG];

	for (size_t pg = p->first; pg < BS / PG; pg += p->step) {
		for (size_t i = 0; i < PG; i++)
			b[i] = (char)byte_at((int64_t)(5 * BS + pg * PG + i));
		objfs_diskcache_put_range(p->dc, p->id, 5, BS, pg * PG, b, PG);
	}
	return NULL;
}

START_TEST(test_partial_concurrent_merges)
{
	/* 16 pages put as 16 requests in flight at once, from 4 threads: each
	 * merge reads the metadata the one before wrote, none is lost */
	enum { T = 4 };
	struct objfs_diskcache *dc = open_dc(16 * (BS + HDR));
	struct objfs_diskcache_stats st;
	const char *id = "cc\ne\n1000000";
	struct pages p[T];
	pthread_t th[T];
	char *buf = aligned_alloc(4096, BS);

	ck_assert_ptr_nonnull(buf);
	for (int t = 0; t < T; t++) {
		p[t] = (struct pages){ dc, id, (size_t)t, T };
		ck_assert_int_eq(pthread_create(&th[t], NULL, pages_thread, &p[t]), 0);
	}
	for (int t = 0; t < T; t++)
		pthread_join(th[t], NULL);
	objfs_diskcache_flush(dc);
	objfs_diskcache_get_stats(dc, &st);
	ck_assert_uint_eq(st.writes_dropped, 0);
	ck_assert_uint_eq(st.bad, 0);
	ck_assert(objfs_diskcache_has(dc, id, 5));
	ck_assert_uint_eq(st.bytes, BS + HDR);
	ck_assert_int_eq(read_only(dc, id, 5, BS, buf), 0);
	for (size_t i = 0; i < BS; i++)
		ck_assert_msg((unsigned char)buf[i] == byte_at((int64_t)(5 * BS + i)), "byte %zu",
			      i);
	free(buf);
	objfs_diskcache_free(dc);
}
END_TEST

START_TEST(test_partial_flipped_page)
{
	struct objfs_diskcache *dc = open_dc(16 * (BS + HDR));
	struct objfs_diskcache_stats st;
	const char *id = "fp\ne\n1000000";
	char buf[4 * PG], path[1024];

	put_part(dc, id, 1, BS, 0, 4 * PG);
	objfs_diskcache_flush(dc);
	chunk_path(dc, id, 1, path, sizeof(path));
	flip_byte(path, HDR + 2 * PG + 7);
	/* only the pages read are verified: page 0 and 3 are fine */
	ck_assert_int_eq(read_part(dc, id, 1, 0, PG, buf), 0);
	ck_assert_int_eq(read_part(dc, id, 1, 3 * PG + 5, 100, buf), 0);
	/* page 2: never served; the chunk goes */
	ck_assert_int_eq(read_part(dc, id, 1, PG, 2 * PG, buf), OBJFS_DISKCACHE_RETRY);
	ck_assert(!objfs_diskcache_has_range(dc, id, 1, 0, PG));
	ck_assert_int_eq(access(path, F_OK), -1);
	ck_assert_int_eq(read_part(dc, id, 1, 0, PG, buf), -ENOENT);
	objfs_diskcache_get_stats(dc, &st);
	ck_assert_uint_eq(st.bad, 1);
	ck_assert_uint_eq(st.files, 0);
	ck_assert_uint_eq(st.bytes, 0);
	objfs_diskcache_free(dc);
}
END_TEST

START_TEST(test_partial_flipped_meta)
{
	struct objfs_diskcache *dc = open_dc(16 * (BS + HDR));
	const char *id = "fm\ne\n1000000";
	char buf[PG], path[1024];
	/* fixed fields, a page MAC, the bitmap, the identity, the padding */
	const off_t offs[] = { 3, 12, 20, 40, 48 + 8, 48 + 8 * 16, 48 + 8 * 16 + 3, 300, 4000 };

	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		put_part(dc, id, 0, BS, PG, PG);
		objfs_diskcache_flush(dc);
		ck_assert(objfs_diskcache_has_range(dc, id, 0, PG, PG));
		chunk_path(dc, id, 0, path, sizeof(path));
		flip_byte(path, offs[i]);
		ck_assert_msg(read_part(dc, id, 0, PG, PG, buf) == OBJFS_DISKCACHE_RETRY,
			      "flip at %lld served", (long long)offs[i]);
		ck_assert(!objfs_diskcache_has_range(dc, id, 0, PG, PG)); /* a miss now */
	}
	/* found by the warm-start scan instead: removed there, a miss at once
	 * (a flipped bitmap byte: the header MAC covers it; a flipped page MAC
	 * is not under the header MAC and fails when its page is read, above) */
	put_part(dc, id, 0, BS, PG, PG);
	objfs_diskcache_flush(dc);
	chunk_path(dc, id, 0, path, sizeof(path));
	objfs_diskcache_free(dc);
	flip_byte(path, 48 + 8 * 16);
	dc = open_dc(16 * (BS + HDR));
	ck_assert(!objfs_diskcache_has_range(dc, id, 0, PG, PG));
	ck_assert_int_eq(access(path, F_OK), -1);
	objfs_diskcache_free(dc);
}
END_TEST

START_TEST(test_partial_warm_start)
{
	struct objfs_diskcache *dc = open_dc(16 * (BS + HDR));
	struct objfs_diskcache_stats st;
	const char *id = "w\ne\n1000000";
	char *buf = malloc(BS), path[1024], v1[1100], cmd[2300];

	ck_assert_ptr_nonnull(buf);
	put_part(dc, id, 3, BS, 2 * PG, 3 * PG);
	put_part(dc, id, 3, BS, 8 * PG, PG);
	ck_assert_int_eq(fetch(dc, id, 4, BS), 0); /* and a whole one */
	objfs_diskcache_free(dc);
	dc = open_dc(16 * (BS + HDR));
	objfs_diskcache_get_stats(dc, &st);
	ck_assert_uint_eq(st.files, 2);
	ck_assert_uint_eq(st.bytes, HDR + 4 * PG + BS + HDR);
	ck_assert(objfs_diskcache_has_range(dc, id, 3, 2 * PG, 3 * PG));
	ck_assert(objfs_diskcache_has_range(dc, id, 3, 8 * PG + 1, PG - 1));
	ck_assert(!objfs_diskcache_has_range(dc, id, 3, 5 * PG, PG));
	ck_assert(!objfs_diskcache_has(dc, id, 3));
	ck_assert(objfs_diskcache_has_range(dc, id, 4, 5, BS - 5)); /* whole: length from size */
	ck_assert(!objfs_diskcache_has_range(dc, id, 4, 5, BS));
	ck_assert_int_eq(read_part(dc, id, 3, 2 * PG + 3, 3 * PG - 3, buf), 0);
	ck_assert_int_eq(read_part(dc, id, 3, 8 * PG, PG, buf), 0);
	ck_assert_int_eq(read_part(dc, id, 4, 5, BS - 5, buf), 0);
	/* and merges on after the remount */
	put_part(dc, id, 3, BS, 5 * PG, 3 * PG);
	objfs_diskcache_flush(dc);
	ck_assert(objfs_diskcache_has_range(dc, id, 3, 2 * PG, 7 * PG));
	ck_assert_int_eq(read_part(dc, id, 3, 2 * PG, 7 * PG, buf), 0);
	ck_assert_int_eq(atomic_load(&net_calls), 1);
	/* a format 1 file (bare name) is removed at open, never data */
	chunk_path(dc, id, 4, path, sizeof(path));
	objfs_diskcache_free(dc);
	snprintf(v1, sizeof(v1), "%.*s", (int)(strlen(path) - 3), path);
	snprintf(cmd, sizeof(cmd), "mv '%s' '%s'", path, v1);
	ck_assert_int_eq(system(cmd), 0);
	dc = open_dc(16 * (BS + HDR));
	ck_assert(!objfs_diskcache_has(dc, id, 4));
	ck_assert_int_eq(access(v1, F_OK), -1);
	ck_assert(objfs_diskcache_has_range(dc, id, 3, 2 * PG, 7 * PG));
	/* a partial name with every page valid (a crash before the rename that
	 * ends a merge): whole, under the whole name */
	ck_assert_int_eq(fetch(dc, id, 6, BS), 0);
	objfs_diskcache_flush(dc);
	chunk_path(dc, id, 6, path, sizeof(path));
	objfs_diskcache_free(dc);
	snprintf(v1, sizeof(v1), "%.*s.p3", (int)(strlen(path) - 3), path);
	ck_assert_int_eq(rename(path, v1), 0);
	dc = open_dc(16 * (BS + HDR));
	ck_assert(objfs_diskcache_has(dc, id, 6));
	ck_assert_int_eq(access(path, F_OK), 0);
	ck_assert_int_eq(access(v1, F_OK), -1);
	ck_assert_int_eq(fetch(dc, id, 6, BS), 0);
	ck_assert_int_eq(atomic_load(&net_calls), 2);
	free(buf);
	objfs_diskcache_free(dc);
}
END_TEST

/*
 * A whole chunk cut short (a crash: chunks are never fsync'd) is indexed
 * at the next open with a block length from its size. A range read to
 * that length goes into the caller's buffer without a bounce buffer, and
 * a check that MACed whole pages of the block length its header names
 * would read up to 4 KiB past the buffer (the MAC fails, so no wrong
 * bytes, but a GPU ring slot at the end of its mapping makes it a
 * crash). The header's block length must match the index's: the read is
 * refused before the check. The buffer here ends at a PROT_NONE page.
 */
START_TEST(test_torn_whole_chunk)
{
	struct objfs_diskcache *dc = open_dc(16 * (BS + HDR));
	const char *id = "t\ne\n1000000";
	size_t cut = BS - 3996, np = (cut + PG - 1) / PG + 1;
	char path[1024], *base, *buf;
	int rc;

	ck_assert_int_eq(fetch(dc, id, 4, BS), 0);
	objfs_diskcache_flush(dc);
	chunk_path(dc, id, 4, path, sizeof(path));
	objfs_diskcache_free(dc);
	ck_assert_int_eq(truncate(path, HDR + (off_t)cut), 0);
	dc = open_dc(16 * (BS + HDR));
	ck_assert(objfs_diskcache_has_range(dc, id, 4, 0, cut));
	base = mmap(NULL, np * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(base, MAP_FAILED);
	ck_assert_int_eq(mprotect(base + (np - 1) * PG, PG, PROT_NONE), 0);
	buf = base + (np - 1) * PG - cut; /* page-aligned start, ends at the guard */
	rc = read_part(dc, id, 4, 0, cut, buf);
	ck_assert_msg(rc != 0 && rc != WRONG_BYTES, "torn chunk read: %d", rc);
	ck_assert(!objfs_diskcache_has(dc, id, 4));
	munmap(base, np * PG);
	objfs_diskcache_free(dc);
}
END_TEST

START_TEST(test_range_hostile)
{
	struct objfs_diskcache *dc = open_dc(16 * (BS + HDR));
	struct objfs_diskcache_stats st;
	const char *id = "h\ne\n272144"; /* 4 blocks and a short one of 10000 bytes */
	const size_t last = 10000;
	char *buf = malloc(BS);

	ck_assert_ptr_nonnull(buf);
	/* puts that break the rules are ignored */
	put_part(dc, id, 0, BS, 100, PG);         /* off not a page */
	put_part(dc, id, 0, BS, 0, 0);            /* empty */
	put_part(dc, id, 0, BS, BS - PG, 2 * PG); /* beyond the block */
	put_part(dc, id, 0, BS, BS, PG);          /* at the block's end */
	put_part(dc, id, 0, BS, 0, PG + 1);       /* len not pages, not to the end */
	put_part(dc, id, 0, 2 * BS, 0, PG);       /* a block longer than blocks are */
	put_part(dc, id, 0, 0, 0, PG);            /* a block of nothing */
	objfs_diskcache_put_range(dc, id, 0, BS, (size_t)-PG, buf, 2 * PG); /* wraps */
	objfs_diskcache_flush(dc);
	objfs_diskcache_get_stats(dc, &st);
	ck_assert_uint_eq(st.files, 0);
	ck_assert_uint_eq(st.writes + st.writes_dropped, 0);
	/* the short last block, page by page */
	put_part(dc, id, 4, last, 2 * PG, last - 2 * PG);
	objfs_diskcache_flush(dc);
	ck_assert(objfs_diskcache_has_range(dc, id, 4, 2 * PG, last - 2 * PG));
	ck_assert(!objfs_diskcache_has_range(dc, id, 4, 2 * PG, last - 2 * PG + 1));
	ck_assert_int_eq(read_part(dc, id, 4, 2 * PG + 1, last - 2 * PG - 1, buf), 0);
	/* odd lookups: nothing, beyond, wrapping */
	ck_assert(!objfs_diskcache_has_range(dc, id, 4, 2 * PG, 0));
	ck_assert(!objfs_diskcache_has_range(dc, id, 4, last, 1));
	ck_assert(!objfs_diskcache_has_range(dc, id, 4, (size_t)-1, 2));
	ck_assert(!objfs_diskcache_has_range(dc, id, 4, 2 * PG, (size_t)-1));
	ck_assert_int_eq(read_part(dc, id, 4, 2 * PG, 0, buf), -ENOENT);
	ck_assert_int_eq(read_part(dc, id, 4, last - 1, 2, buf), -ENOENT);
	ck_assert_int_eq(objfs_diskcache_read_range(dc, id, 4, (size_t)-1, 2, buf, on_done, NULL),
			 -ENOENT);
	/* completed by the rest: a whole chunk, served to fetch() */
	put_part(dc, id, 4, last, 0, 2 * PG);
	objfs_diskcache_flush(dc);
	ck_assert(objfs_diskcache_has(dc, id, 4));
	ck_assert_int_eq(fetch(dc, id, 4, last), 0);
	ck_assert_int_eq(read_part(dc, id, 4, 0, last, buf), 0);
	ck_assert_int_eq(atomic_load(&net_calls), 0);
	objfs_diskcache_get_stats(dc, &st);
	ck_assert_uint_eq(st.bytes, HDR + last);
	ck_assert_uint_eq(st.bad, 0);
	free(buf);
	objfs_diskcache_free(dc);
}
END_TEST

/* ------------------------------------------------------------ security */

/*
 * A forger of chunk files, written from the format's description
 * (diskcache_i.h), not from the code under test: it recomputes every sum of
 * a chunk file whose bytes it changed. The file's own magic says how: a
 * format 2 file ("OBJFSDC2") as format 2 summed, XXH3-64 of each page and of
 * the metadata after hdr_sum, no key; anything else as format 3, HMAC-SHA256
 * under @secret. So run against the code before the keyed MAC, every forgery
 * here is a valid chunk -- which is what these tests showed failing there.
 */
struct ffixed {
	char magic[8];
	uint64_t hdr_sum;
	uint32_t version, page_size;
	uint64_t block_len;
	uint32_t meta_len, ident_len, npages, reserved;
};

struct fchunk {
	unsigned char *b;       /* the whole file */
	size_t n;
	struct ffixed f;
	int v2;
};

static void fchunk_read(const char *path, struct fchunk *c)
{
	struct stat st;
	int fd = open(path, O_RDONLY);

	ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
	ck_assert_int_eq(fstat(fd, &st), 0);
	c->n = (size_t)st.st_size;
	c->b = calloc(1, c->n);
	ck_assert_ptr_nonnull(c->b);
	ck_assert_int_eq(pread(fd, c->b, c->n, 0), (ssize_t)c->n);
	close(fd);
	memcpy(&c->f, c->b, sizeof(c->f));
	c->v2 = !memcmp(c->f.magic, "OBJFSDC2", 8);
}

static void fchunk_write(const char *path, struct fchunk *c)
{
	int fd = open(path, O_WRONLY | O_TRUNC);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, c->b, c->n, 0), (ssize_t)c->n);
	close(fd);
	free(c->b);
	c->b = NULL;
}

static size_t f_bitmap(const struct fchunk *c)
{
	return 48 + 8 * (size_t)c->f.npages;
}

static size_t f_ident(const struct fchunk *c)
{
	return f_bitmap(c) + (c->f.npages + 7) / 8;
}

static unsigned char *f_page(struct fchunk *c, size_t p)
{
	return c->b + c->f.meta_len + p * PG;
}

static uint64_t first64(const unsigned char *h)
{
	uint64_t v;

	memcpy(&v, h, sizeof(v));
	return v;
}

/* Page @p's sum as the file's format computes it ([p * 4096, +4096) of the block). */
static uint64_t f_page_sum(struct fchunk *c, const unsigned char *secret, size_t p)
{
	unsigned char in[64 + PG], h[32];
	unsigned int hl;
	uint64_t idx = p, bl = c->f.block_len;
	size_t len = bl - p * PG < PG ? bl - p * PG : PG;

	if (c->v2)
		return XXH3_64bits(f_page(c, p), len);
	/* "objfs-dc3-page" padded to 16, SHA-256(identity), index, block length, the page */
	memset(in, 0, 64);
	memcpy(in, "objfs-dc3-page", 14);
	SHA256(c->b + f_ident(c), c->f.ident_len, in + 16);
	memcpy(in + 48, &idx, 8);
	memcpy(in + 56, &bl, 8);
	memcpy(in + 64, f_page(c, p), len);
	ck_assert_ptr_nonnull(HMAC(EVP_sha256(), secret, 32, in, 64 + len, h, &hl));
	return first64(h);
}

/* Sets page @p's sum (and its bit) in the metadata. */
static void f_set_sum(struct fchunk *c, size_t p, uint64_t sum)
{
	memcpy(c->b + 48 + 8 * p, &sum, 8);
	c->b[f_bitmap(c) + p / 8] |= (unsigned char)(1u << (p % 8));
}

/* Recomputes hdr_sum as the file's format does. */
static void f_seal(struct fchunk *c, const unsigned char *secret)
{
	unsigned char h[32], *in;
	unsigned int hl;
	size_t tail = f_ident(c) + c->f.ident_len - f_bitmap(c);
	uint64_t sum;

	if (c->v2) {
		sum = XXH3_64bits(c->b + 16, c->f.meta_len - 16);
	} else {
		/* "objfs-dc3-meta" padded to 16, bytes [16, 48), bitmap and identity */
		in = calloc(1, 48 + tail);
		ck_assert_ptr_nonnull(in);
		memcpy(in, "objfs-dc3-meta", 14);
		memcpy(in + 16, c->b + 16, 32);
		memcpy(in + 48, c->b + f_bitmap(c), tail);
		ck_assert_ptr_nonnull(HMAC(EVP_sha256(), secret, 32, in, 48 + tail, h, &hl));
		free(in);
		sum = first64(h);
	}
	memcpy(c->b + 8, &sum, 8);
}

/* Resums every valid page, then the metadata. */
static void f_resum_all(struct fchunk *c, const unsigned char *secret)
{
	for (size_t p = 0; p < c->f.npages; p++)
		if (c->b[f_bitmap(c) + p / 8] >> (p % 8) & 1)
			f_set_sum(c, p, f_page_sum(c, secret, p));
	f_seal(c, secret);
}

/* DIR/key into @secret (32 bytes); 0 when there is none (the code before the key). */
static int read_key(unsigned char *secret)
{
	char path[512];
	int fd, n;

	snprintf(path, sizeof(path), "%s/key", dir);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return 0;
	n = (int)read(fd, secret, 32);
	close(fd);
	return n == 32;
}

/*
 * A chunk whose bytes were replaced and whose sums were recomputed -- with
 * the old unkeyed sums, with a key that is not the cache's, or (the
 * forger's own check) with the cache's key -- is served only in the last
 * case; else it is dropped (RETRY, file gone, counted bad) and the block
 * comes from the network right. Whole chunks (fetch) and partial ones
 * (read_range), at read and at the warm-start scan.
 */
START_TEST(test_forged_chunk_refused)
{
	struct objfs_diskcache *dc = open_dc(16 * (BS + HDR));
	struct objfs_diskcache_stats st;
	const char *id = "forge\ne\n655360";
	unsigned char real[32], wrong[32];
	char path[1024], buf[PG];
	struct fchunk c;
	int keyed = read_key(real);

	memset(wrong, 0x77, sizeof(wrong));
	for (int how = 0; how < 3; how++) { /* 0 unkeyed, 1 wrong key, 2 the real key */
		ck_assert_int_eq(fetch(dc, id, 0, BS), 0);
		objfs_diskcache_flush(dc);
		chunk_path(dc, id, 0, path, sizeof(path));
		fchunk_read(path, &c);
		memset(f_page(&c, 3), 'X', PG); /* the forged bytes */
		if (how == 0)
			c.v2 = 1; /* sums as format 2 computed them, whatever the magic */
		f_resum_all(&c, how == 2 && keyed ? real : wrong);
		fchunk_write(path, &c);
		if (how == 2) { /* the forger is right: only the key was missing */
			ck_assert_int_eq(fetch_raw(dc, id, 0, BS), WRONG_BYTES);
			ck_assert_int_eq(unlink(path), 0);
			objfs_diskcache_free(dc);
			dc = open_dc(16 * (BS + HDR));
			continue;
		}
		ck_assert_msg(fetch_raw(dc, id, 0, BS) == OBJFS_DISKCACHE_RETRY,
			      "forged chunk (%s) not refused", how ? "another key" : "unkeyed sums");
		ck_assert_int_eq(access(path, F_OK), -1);
		ck_assert_int_eq(fetch(dc, id, 0, BS), 0); /* from the network, right */
		objfs_diskcache_flush(dc);
	}
	objfs_diskcache_get_stats(dc, &st);
	(void)st;
	/* a partial chunk: refused at read, and at the warm-start scan */
	for (int at_scan = 0; at_scan < 2; at_scan++) {
		put_part(dc, id, 1, BS, 2 * PG, 4 * PG);
		objfs_diskcache_flush(dc);
		ck_assert(objfs_diskcache_has_range(dc, id, 1, 2 * PG, 4 * PG));
		chunk_path(dc, id, 1, path, sizeof(path));
		fchunk_read(path, &c);
		memset(f_page(&c, 3), 'Y', PG);
		f_resum_all(&c, wrong);
		fchunk_write(path, &c);
		if (at_scan) {
			objfs_diskcache_free(dc);
			dc = open_dc(16 * (BS + HDR));
			ck_assert(!objfs_diskcache_has_range(dc, id, 1, 2 * PG, 4 * PG));
			ck_assert_int_eq(access(path, F_OK), -1);
		} else {
			ck_assert_msg(read_part(dc, id, 1, 3 * PG, PG, buf) == OBJFS_DISKCACHE_RETRY,
				      "forged partial chunk served");
		}
	}
	objfs_diskcache_free(dc);
}
END_TEST

/*
 * A valid page moved, with its sum, to another index of its chunk or into
 * another chunk (the metadata resealed with the cache's key: more than an
 * attacker has) is refused: a page's MAC binds its place.
 */
START_TEST(test_page_moved_refused)
{
	struct objfs_diskcache *dc = open_dc(16 * (BS + HDR));
	const char *id = "move\ne\n655360";
	unsigned char real[32], tmp[PG];
	char p0[1024], p1[1024];
	struct fchunk a, b;
	uint64_t s2, s5;

	if (!read_key(real))
		memset(real, 0, sizeof(real)); /* format 2: unkeyed, the key unused */
	ck_assert_int_eq(fetch(dc, id, 0, BS), 0);
	ck_assert_int_eq(fetch(dc, id, 1, BS), 0);
	objfs_diskcache_flush(dc);
	chunk_path(dc, id, 0, p0, sizeof(p0));
	chunk_path(dc, id, 1, p1, sizeof(p1));
	/* pages 2 and 5 of chunk 0 swapped, with their sums */
	fchunk_read(p0, &a);
	memcpy(&s2, a.b + 48 + 8 * 2, 8);
	memcpy(&s5, a.b + 48 + 8 * 5, 8);
	memcpy(tmp, f_page(&a, 2), PG);
	memcpy(f_page(&a, 2), f_page(&a, 5), PG);
	memcpy(f_page(&a, 5), tmp, PG);
	f_set_sum(&a, 2, s5);
	f_set_sum(&a, 5, s2);
	f_seal(&a, real);
	fchunk_write(p0, &a);
	ck_assert_msg(fetch_raw(dc, id, 0, BS) == OBJFS_DISKCACHE_RETRY,
		      "pages swapped within a chunk not refused");
	ck_assert_int_eq(access(p0, F_OK), -1);
	/* page 2 of chunk 1 put at page 2 of chunk 0, with its sum */
	ck_assert_int_eq(fetch(dc, id, 0, BS), 0);
	objfs_diskcache_flush(dc);
	fchunk_read(p0, &a);
	fchunk_read(p1, &b);
	memcpy(f_page(&a, 2), f_page(&b, 2), PG);
	memcpy(&s2, b.b + 48 + 8 * 2, 8);
	f_set_sum(&a, 2, s2);
	f_seal(&a, real);
	fchunk_write(p0, &a);
	free(b.b);
	ck_assert_msg(fetch_raw(dc, id, 0, BS) == OBJFS_DISKCACHE_RETRY,
		      "a page of another chunk not refused");
	/* chunk 1 itself still serves */
	ck_assert_int_eq(fetch(dc, id, 1, BS), 0);
	objfs_diskcache_free(dc);
}
END_TEST

static int open_err(const char *d, char *err, size_t errlen)
{
	struct objfs_diskcache_cfg cfg = {
		.dir = d, .cap = 16 * (BS + HDR), .source = "s", .block_size = BS,
	};
	struct objfs_diskcache *dc = NULL;
	int ret;

	err[0] = '\0';
	ret = objfs_diskcache_open(&cfg, &dc, err, errlen);
	objfs_diskcache_free(dc);
	return ret;
}

/* DIR/key: made 0600, 32 bytes, the euid's; kept across mounts; a lost key drops the chunks. */
START_TEST(test_key_created)
{
	struct objfs_diskcache *dc = open_dc(16 * (BS + HDR));
	unsigned char k1[32], k2[32];
	char path[512];
	struct stat sb;

	objfs_diskcache_free(dc);
	snprintf(path, sizeof(path), "%s/key", dir);
	ck_assert_msg(lstat(path, &sb) == 0, "no key file %s", path);
	ck_assert(S_ISREG(sb.st_mode));
	ck_assert_uint_eq(sb.st_mode & 07777, 0600);
	ck_assert_int_eq(sb.st_size, 32);
	ck_assert_uint_eq(sb.st_uid, geteuid());
	ck_assert(read_key(k1));
	dc = open_dc(16 * (BS + HDR));
	ck_assert_int_eq(fetch(dc, "k\ne\n65536", 0, BS), 0);
	objfs_diskcache_free(dc);
	ck_assert(read_key(k2));
	ck_assert_mem_eq(k1, k2, 32); /* the same key: not made again */
	dc = open_dc(16 * (BS + HDR));
	ck_assert(objfs_diskcache_has(dc, "k\ne\n65536", 0));
	objfs_diskcache_free(dc);
	/* the key gone: a new one, and the chunks made under the old are removed */
	ck_assert_int_eq(unlink(path), 0);
	dc = open_dc(16 * (BS + HDR));
	ck_assert(!objfs_diskcache_has(dc, "k\ne\n65536", 0));
	ck_assert(read_key(k2));
	ck_assert(memcmp(k1, k2, 32) != 0);
	objfs_diskcache_free(dc);
}
END_TEST

/* A key file with the wrong mode, size, type or owner: the open is refused, naming it. */
START_TEST(test_key_refused)
{
	struct objfs_diskcache *dc = open_dc(16 * (BS + HDR));
	char path[512], other[512], err[1024];

	objfs_diskcache_free(dc);
	snprintf(path, sizeof(path), "%s/key", dir);
	snprintf(other, sizeof(other), "%s/key.elsewhere", dir);
	ck_assert_int_eq(chmod(path, 0644), 0);
	ck_assert_int_eq(open_err(dir, err, sizeof(err)), -EPERM);
	ck_assert_msg(strstr(err, "key") && strstr(err, "0644"), "message: %s", err);
	ck_assert_int_eq(chmod(path, 0640), 0);
	ck_assert_int_ne(open_err(dir, err, sizeof(err)), 0);
	ck_assert_int_eq(chmod(path, 0400), 0); /* read-only for the owner: fine */
	ck_assert_msg(open_err(dir, err, sizeof(err)) == 0, "0400 key refused: %s", err);
	ck_assert_int_eq(chmod(path, 0600), 0);
	ck_assert_int_eq(truncate(path, 31), 0);
	ck_assert_int_eq(open_err(dir, err, sizeof(err)), -EPERM);
	ck_assert_msg(strstr(err, "key") && strstr(err, "31 bytes"), "message: %s", err);
	ck_assert_int_eq(truncate(path, 33), 0);
	ck_assert_int_ne(open_err(dir, err, sizeof(err)), 0);
	ck_assert_int_eq(truncate(path, 32), 0);
	/* a symlink to a key elsewhere (even a good one) */
	ck_assert_int_eq(rename(path, other), 0);
	ck_assert_int_eq(symlink(other, path), 0);
	ck_assert_int_ne(open_err(dir, err, sizeof(err)), 0);
	ck_assert_msg(strstr(err, "key"), "message: %s", err);
	ck_assert_int_eq(unlink(path), 0);
	ck_assert_int_eq(mkdir(path, 0700), 0); /* a directory */
	ck_assert_int_ne(open_err(dir, err, sizeof(err)), 0);
	ck_assert_int_eq(rmdir(path), 0);
	ck_assert_int_eq(rename(other, path), 0);
	if (geteuid() == 0) { /* another user's key */
		ck_assert_int_eq(chown(path, 65534, 65534), 0);
		ck_assert_int_eq(open_err(dir, err, sizeof(err)), -EPERM);
		ck_assert_msg(strstr(err, "key") && strstr(err, "65534"), "message: %s", err);
		ck_assert_int_eq(chown(path, 0, 0), 0);
	}
	ck_assert_msg(open_err(dir, err, sizeof(err)) == 0, "good key refused: %s", err);
}
END_TEST

/*
 * cache_dir and the directories above it: refused when another user owns
 * them or may write them (sticky directories such as /tmp excepted), with
 * a message naming the path and what is wrong; symlinks of root or the
 * user followed, others' refused.
 */
START_TEST(test_dir_refused)
{
	char d[512], par[512], link[512], err[1024];
	struct stat sb;

	/* missing: made 0700 */
	snprintf(d, sizeof(d), "%s/new", dir);
	ck_assert_msg(open_err(d, err, sizeof(err)) == 0, "open: %s", err);
	ck_assert_int_eq(stat(d, &sb), 0);
	ck_assert_uint_eq(sb.st_mode & 07777, 0700);
	/* writable by others, or by the group */
	ck_assert_int_eq(chmod(d, 0777), 0);
	ck_assert_int_eq(open_err(d, err, sizeof(err)), -EPERM);
	ck_assert_msg(strstr(err, d) && strstr(err, "writable by group or others"), "message: %s",
		      err);
	ck_assert_int_eq(chmod(d, 0770), 0);
	ck_assert_int_eq(open_err(d, err, sizeof(err)), -EPERM);
	ck_assert_int_eq(chmod(d, 01777), 0); /* sticky does not make it ours */
	ck_assert_int_eq(open_err(d, err, sizeof(err)), -EPERM);
	ck_assert_int_eq(chmod(d, 0755), 0);
	ck_assert_msg(open_err(d, err, sizeof(err)) == 0, "0755 refused: %s", err);
	/* a parent writable by others, not sticky; then sticky, as /tmp */
	snprintf(par, sizeof(par), "%s/par", dir);
	ck_assert_int_eq(mkdir(par, 0777), 0);
	ck_assert_int_eq(chmod(par, 0777), 0);
	snprintf(d, sizeof(d), "%s/par/cache", dir);
	ck_assert_int_eq(open_err(d, err, sizeof(err)), -EPERM);
	ck_assert_msg(strstr(err, par) && strstr(err, "not sticky"), "message: %s", err);
	ck_assert_int_eq(chmod(par, 01777), 0);
	ck_assert_msg(open_err(d, err, sizeof(err)) == 0, "under a sticky parent: %s", err);
	/* a symlink of ours to it, as cache_dir and as a component */
	snprintf(link, sizeof(link), "%s/link", dir);
	ck_assert_int_eq(symlink(par, link), 0);
	snprintf(d, sizeof(d), "%s/link/cache", dir);
	ck_assert_msg(open_err(d, err, sizeof(err)) == 0, "through a symlink: %s", err);
	snprintf(d, sizeof(d), "%s/link2", dir);
	snprintf(link, sizeof(link), "%s/par/cache", dir);
	ck_assert_int_eq(symlink(link, d), 0);
	ck_assert_msg(open_err(d, err, sizeof(err)) == 0, "cache_dir a symlink: %s", err);
	if (geteuid() != 0)
		return;
	/* another user's: the cache_dir, a parent, a symlink on the way */
	snprintf(d, sizeof(d), "%s/par/cache", dir);
	ck_assert_int_eq(chown(d, 65534, 65534), 0);
	ck_assert_int_eq(open_err(d, err, sizeof(err)), -EPERM);
	ck_assert_msg(strstr(err, d) && strstr(err, "owned by uid 65534"), "message: %s", err);
	ck_assert_int_eq(chown(d, 0, 0), 0);
	ck_assert_int_eq(chmod(par, 0755), 0);
	ck_assert_int_eq(chown(par, 65534, 65534), 0);
	ck_assert_int_eq(open_err(d, err, sizeof(err)), -EPERM);
	ck_assert_msg(strstr(err, par) && strstr(err, "65534"), "message: %s", err);
	ck_assert_int_eq(chown(par, 0, 0), 0);
	ck_assert_int_eq(chmod(par, 01777), 0);
	snprintf(link, sizeof(link), "%s/par/evil", dir); /* in a sticky dir, another's link */
	ck_assert_int_eq(symlink(d, link), 0);
	ck_assert_int_eq(lchown(link, 65534, 65534), 0);
	ck_assert_int_eq(open_err(link, err, sizeof(err)), -EPERM);
	ck_assert_msg(strstr(err, "symbolic link owned by uid 65534"), "message: %s", err);
}
END_TEST

/* Writes @text to @path (made 0644). */
static void put_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static void file_is(const char *path, const char *text)
{
	char buf[256] = "";
	int fd = open(path, O_RDONLY);
	ssize_t n;

	ck_assert_int_ge(fd, 0);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	ck_assert_msg(n == (ssize_t)strlen(text) && !memcmp(buf, text, strlen(text)),
		      "%s changed: '%.*s'", path, (int)(n > 0 ? n : 0), buf);
}

/*
 * DIR/lock a symlink to, or a hard link of, a file elsewhere: the file is
 * never truncated nor written (the open is refused). DIR/tmp or a fan-out
 * directory a symlink to a directory elsewhere: nothing there is removed
 * or written; the link is replaced by a directory of ours.
 */
START_TEST(test_links_in_dir)
{
	struct objfs_diskcache *dc;
	char d[512], victim[512], lock[512], out[512], p[600], err[1024];
	struct stat sb;

	snprintf(d, sizeof(d), "%s/c", dir);
	snprintf(victim, sizeof(victim), "%s/victim", dir);
	snprintf(lock, sizeof(lock), "%s/c/lock", dir);
	snprintf(out, sizeof(out), "%s/outside", dir);
	ck_assert_int_eq(mkdir(d, 0700), 0);
	put_file(victim, "precious\n");
	ck_assert_int_eq(symlink(victim, lock), 0);
	ck_assert_int_ne(open_err(d, err, sizeof(err)), 0);
	ck_assert_msg(strstr(err, "lock"), "message: %s", err);
	file_is(victim, "precious\n");
	ck_assert_int_eq(unlink(lock), 0);
	ck_assert_int_eq(link(victim, lock), 0); /* a hard link: two names */
	ck_assert_int_ne(open_err(d, err, sizeof(err)), 0);
	ck_assert_msg(strstr(err, "lock"), "message: %s", err);
	file_is(victim, "precious\n");
	ck_assert_int_eq(unlink(lock), 0);
	/* tmp and chunks/00 symlinks to a directory with a file in it */
	ck_assert_int_eq(mkdir(out, 0700), 0);
	snprintf(p, sizeof(p), "%s/keepme", out);
	put_file(p, "keep\n");
	snprintf(p, sizeof(p), "%s/tmp", d);
	ck_assert_int_eq(symlink(out, p), 0);
	snprintf(p, sizeof(p), "%s/chunks", d);
	ck_assert_int_eq(mkdir(p, 0700), 0);
	snprintf(p, sizeof(p), "%s/chunks/00", d);
	ck_assert_int_eq(symlink(out, p), 0);
	ck_assert_msg(open_err(d, err, sizeof(err)) == 0, "open: %s", err);
	snprintf(p, sizeof(p), "%s/keepme", out);
	file_is(p, "keep\n");
	snprintf(p, sizeof(p), "%s/tmp", d);
	ck_assert_int_eq(lstat(p, &sb), 0);
	ck_assert(S_ISDIR(sb.st_mode));
	snprintf(p, sizeof(p), "%s/chunks/00", d);
	ck_assert_int_eq(lstat(p, &sb), 0);
	ck_assert(S_ISDIR(sb.st_mode));
	/* chunks land in the cache's own directories only */
	{
		struct objfs_diskcache_cfg cfg = {
			.dir = d, .cap = 16 * (BS + HDR), .source = "s", .block_size = BS,
		};

		ck_assert_int_eq(objfs_diskcache_open(&cfg, &dc, err, sizeof(err)), 0);
		objfs_diskcache_set_holder(dc, t_hold, t_release, 64u << 20);
		for (uint64_t i = 0; i < 8; i++)
			ck_assert_int_eq(fetch(dc, "l\ne\n655360", i, BS), 0);
		objfs_diskcache_free(dc);
	}
	{
		DIR *od = opendir(out);
		struct dirent *de;
		int n = 0;

		ck_assert_ptr_nonnull(od);
		while ((de = readdir(od)))
			n += de->d_name[0] != '.';
		closedir(od);
		ck_assert_int_eq(n, 1); /* keepme alone */
	}
}
END_TEST

static Suite *diskcache_suite(void)
{
	Suite *s = suite_create("diskcache");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_miss_write_hit);
	tcase_add_test(tc, test_lru_eviction_and_cap);
	tcase_add_test(tc, test_checksum_mismatch);
	tcase_add_test(tc, test_identity_mismatch);
	tcase_add_test(tc, test_rebuild_by_scan);
	tcase_add_test(tc, test_lock_refusal);
	tcase_add_test(tc, test_write_failure_not_cached);
	tcase_add_test(tc, test_burst_all_written);
	tcase_add_test(tc, test_hold_bound_drops);
	tcase_add_test(tc, test_free_releases_held);
	tcase_add_test(tc, test_read_without_fallback);
	tcase_add_test(tc, test_lru_order_survives_remount);
	tcase_add_test(tc, test_fill_from_disk);
	tcase_add_test(tc, test_fill_writes_behind_only_its_bytes);
	tcase_add_test(tc, test_partial_put_read);
	tcase_add_test(tc, test_partial_merge_complete);
	tcase_add_test(tc, test_partial_concurrent_merges);
	tcase_add_test(tc, test_partial_flipped_page);
	tcase_add_test(tc, test_partial_flipped_meta);
	tcase_add_test(tc, test_partial_warm_start);
	tcase_add_test(tc, test_torn_whole_chunk);
	tcase_add_test(tc, test_fill_no_room_evicts_nothing);
	tcase_add_test(tc, test_range_hostile);
	tcase_add_test(tc, test_forged_chunk_refused);
	tcase_add_test(tc, test_page_moved_refused);
	tcase_add_test(tc, test_key_created);
	tcase_add_test(tc, test_key_refused);
	tcase_add_test(tc, test_dir_refused);
	tcase_add_test(tc, test_links_in_dir);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(diskcache_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
