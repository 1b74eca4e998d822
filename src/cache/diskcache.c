/*
 * diskcache: see diskcache.h for what it guarantees.
 *
 * Layout of the cache directory:
 *   DIR/lock              flock()ed by the mount that owns DIR (holds its pid)
 *   DIR/chunks/XY/HASH    one chunk: 4 KiB header, then the block's bytes;
 *                         HASH is 32 hex digits, XY its first two
 *   DIR/tmp/HASH          a chunk being written; renamed into place when
 *                         complete, so a chunk file is never seen half written
 *                         (files left here by a crash are removed at open)
 *
 * Index: a hash table of the chunk files keyed by their 128-bit name, with
 * an LRU list (head: most recently used) and the byte total. At open it is
 * rebuilt by scanning DIR/chunks (names and sizes only, ordered by mtime,
 * which every verified hit bumps, so the order is the last use's);
 * headers are verified when a chunk is read, so a warm start costs one
 * readdir per fan-out directory. An entry being written (writing=1) is on
 * the LRU and counted in the total (so the cap holds for what is in flight)
 * but is not readable and never evicted.
 *
 * Threads: callers (FUSE threads, engine threads, side workers) only look
 * the index up, queue requests and poke an eventfd. One disk thread owns the
 * io_uring: it takes every queued request at once (batched into one
 * io_uring_submit), opens, renames and unlinks files itself (metadata calls
 * on a local disk, kept off the callers), and completes reads -- verify,
 * then done() -- and writes. Many chunk transfers are in flight at once
 * (RING_OPS) while the thread waits for completions.
 *
 * Reads of full blocks use O_DIRECT (the header is 4 KiB, the block cache's
 * full-size buffers 2 MiB aligned): the bytes land in the block cache once,
 * instead of also filling the page cache with a second copy, and the reads
 * are truly asynchronous. Measured on the 2-core development VM, 4 MiB
 * io_uring reads at depth 16 from a file not in the page cache: 405 MB/s
 * buffered, 1588 MB/s O_DIRECT (fio). The last, short block of an object
 * and file systems that refuse O_DIRECT (EINVAL) read buffered. Writes stay
 * buffered (write-behind: the page cache absorbs them, the kernel flushes).
 *
 * Write-behind holds the block cache's own buffer (a reference on the READY
 * block, taken through dc->hold before the fetch completes, dropped through
 * dc->release when the write ends), not a copy. The first design copied
 * each fetched block into a 64 MiB queue and dropped the write when it was
 * full: a cold 1 GiB read (~400 MB/s) on the 2-core development VM dropped
 * 154 of 256 chunk writes, so the next epoch read only 40% from disk. Now
 * up to wq_cap bytes (half the block
 * cache) wait for the disk at no extra memory, the engine thread no longer
 * copies and checksums 4 MiB (the disk thread checksums when it writes), and
 * a write is dropped only beyond that bound. Held blocks cannot be evicted,
 * so a lagging disk shrinks the room the block cache has for prefetching
 * (objfs_cache_prefetch stops at its cap) rather than losing chunks. Every
 * request that held a buffer releases it exactly once (write_end), before
 * it stops counting in wq_count: objfs_diskcache_flush() returning means
 * nothing is held, which is what lets objfs_cache_free() free its blocks.
 *
 * Locking: dc->lock guards the index, the LRU, the byte total, the request
 * queue, the write-behind accounting and the counters. The disk thread's
 * ring and in-flight count are its own. Files are only created, renamed and
 * unlinked by the disk thread (and by open/free, when it does not run), so
 * an eviction's unlink can never remove a newer file of the same name.
 *
 * A file's generation (dent.gen) lets a failed read drop the entry it looked
 * up without dropping a newer one written in between.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>

#include "diskcache.h"
#include "log.h"

#define HDR_SIZE     4096u
#define MAGIC        "OBJFSDC1"
#define FORMAT       1u  /* header version */
#define RING_OPS     64u        /* reads + writes in flight on the ring */
#define FANOUT       256
#define DIRECT_ALIGN 4096u      /* O_DIRECT buffer, offset and length alignment */

/* The chunk file header; the identity follows it, zero padding to HDR_SIZE. */
struct hdr {
	char magic[8];
	uint32_t version;
	uint32_t ident_len;
	uint64_t data_len;
	uint64_t data_sum;  /* XXH3_64bits of the data */
	uint64_t hdr_sum;   /* XXH3_64bits of the HDR_SIZE header with this field 0 */
};
#define IDENT_MAX (HDR_SIZE - sizeof(struct hdr))

struct key {
	uint64_t hi, lo;
};

struct dent {
	struct key key;
	uint64_t bytes;                 /* file size */
	uint64_t gen;
	int writing;
	struct dent *hnext;
	struct dent *lprev, *lnext;
};

enum op { OP_READ, OP_WRITE };

/* One read or write; owned by the queue, then by the disk thread. */
struct dreq {
	enum op op;
	struct dreq *next;
	struct key key;
	uint64_t gen;              /* read: entry generation looked up */
	int fd;
	int direct;                /* read: opened O_DIRECT */
	struct iovec iov[2];       /* the whole transfer: header, data */
	struct iovec cur[2];       /* what is left of it, as submitted */
	size_t total, pos;         /* bytes to transfer, transferred */
	char *data;                /* the fetch's dst, borrowed: read into, or (write)
				    * held through dc->hold until the write ends;
				    * owned: a copy, freed when the write ends */
	int owned;
	size_t len;
	objfs_fetch_done_fn done;  /* read */
	void *arg;                 /* read: done's; write: hold's, for release */
	size_t ident_len;
	char *hdr;                 /* HDR_SIZE bytes; writes: built, reads: read into */
	char ident[];              /* the identity: expected (read), to write (write) */
};

/* A miss on its way from the network: becomes a write when it arrives. */
struct miss {
	struct objfs_diskcache *dc;
	struct key key;
	char *dst;
	size_t len;
	objfs_fetch_done_fn done;
	void *arg;
	size_t ident_len;
	char ident[];
};

struct objfs_diskcache {
	char *dir, *source;
	size_t bsize;
	int lock_fd, ev_fd;
	uint64_t ev_buf;              /* the armed eventfd read lands here */
	struct io_uring ring;
	int ring_ok;
	pthread_t thread;
	int thread_ok;
	unsigned nio;                 /* disk thread: requests on the ring */
	int no_direct;                /* O_DIRECT refused here: buffered reads */

	pthread_mutex_t lock;
	pthread_cond_t cond;          /* wq_count reached 0 */
	struct dent **hash;           /* lock */
	size_t nbuckets, nents;       /* lock */
	struct dent *lru_head, *lru_tail; /* lock */
	uint64_t bytes, cap, gen;     /* lock */
	struct dreq *q_head, *q_tail; /* lock: requests for the disk thread */
	size_t wq_bytes, wq_cap;      /* lock: write-behind buffers held, and the bound */
	unsigned wq_count;            /* lock */
	void (*hold)(void *arg);      /* lock; set before the first fetch */
	void (*release)(void *arg);   /* lock; called without it */
	int stop;                     /* lock */
	int degraded;                 /* lock for writes; read unlocked as a hint */
	struct objfs_diskcache_stats st; /* lock */
};

/* ------------------------------------------------------------ naming */

static int ident_make(const struct objfs_diskcache *dc, const char *id, uint64_t idx,
		      char *buf, size_t *len)
{
	int n = snprintf(buf, IDENT_MAX, "objfs-chunk\n%s\n%zu\n%s\n%llu", dc->source, dc->bsize,
			 id, (unsigned long long)idx);

	if (n < 0 || (size_t)n >= IDENT_MAX)
		return -ENAMETOOLONG;
	*len = (size_t)n;
	return 0;
}

static struct key key_of(const char *ident, size_t len)
{
	XXH128_hash_t h = XXH3_128bits(ident, len);

	return (struct key){ h.high64, h.low64 };
}

static int key_eq(struct key a, struct key b)
{
	return a.hi == b.hi && a.lo == b.lo;
}

static void key_hex(struct key k, char out[33])
{
	snprintf(out, 33, "%016llx%016llx", (unsigned long long)k.hi, (unsigned long long)k.lo);
}

static int key_parse(const char *s, struct key *k)
{
	char part[17];
	char *end;

	if (strlen(s) != 32 || strspn(s, "0123456789abcdef") != 32)
		return -EINVAL;
	memcpy(part, s, 16);
	part[16] = '\0';
	k->hi = strtoull(part, &end, 16);
	k->lo = strtoull(s + 16, &end, 16);
	return 0;
}

/* DIR/chunks/XY/HASH, or DIR/tmp/HASH. */
static int key_path(const struct objfs_diskcache *dc, struct key k, int tmp, char *buf,
		    size_t cap)
{
	char hex[33];
	int n;

	key_hex(k, hex);
	if (tmp)
		n = snprintf(buf, cap, "%s/tmp/%s", dc->dir, hex);
	else
		n = snprintf(buf, cap, "%s/chunks/%.2s/%s", dc->dir, hex, hex);
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* ------------------------------------------------------------ index (lock held) */

static size_t bucket(const struct objfs_diskcache *dc, struct key k)
{
	return (size_t)(k.lo ^ (k.hi >> 7)) & (dc->nbuckets - 1);
}

static struct dent *find(struct objfs_diskcache *dc, struct key k)
{
	for (struct dent *e = dc->hash[bucket(dc, k)]; e; e = e->hnext)
		if (key_eq(e->key, k))
			return e;
	return NULL;
}

static void lru_remove(struct objfs_diskcache *dc, struct dent *e)
{
	if (e->lprev)
		e->lprev->lnext = e->lnext;
	else
		dc->lru_head = e->lnext;
	if (e->lnext)
		e->lnext->lprev = e->lprev;
	else
		dc->lru_tail = e->lprev;
	e->lprev = e->lnext = NULL;
}

static void lru_push(struct objfs_diskcache *dc, struct dent *e)
{
	e->lprev = NULL;
	e->lnext = dc->lru_head;
	if (dc->lru_head)
		dc->lru_head->lprev = e;
	dc->lru_head = e;
	if (!dc->lru_tail)
		dc->lru_tail = e;
}

static void grow(struct objfs_diskcache *dc)
{
	size_t nb = dc->nbuckets * 2, old = dc->nbuckets;
	struct dent **h = calloc(nb, sizeof(*h)), **oh = dc->hash;

	if (!h)
		return; /* longer chains, still correct */
	dc->hash = h;
	dc->nbuckets = nb;
	for (size_t i = 0; i < old; i++) {
		for (struct dent *e = oh[i], *next; e; e = next) {
			next = e->hnext;
			e->hnext = h[bucket(dc, e->key)];
			h[bucket(dc, e->key)] = e;
		}
	}
	free(oh);
}

/* Adds an entry at the LRU head. NULL when out of memory. */
static struct dent *index_add(struct objfs_diskcache *dc, struct key k, uint64_t bytes,
			      int writing)
{
	struct dent *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	if (dc->nents >= dc->nbuckets)
		grow(dc);
	e->key = k;
	e->bytes = bytes;
	e->writing = writing;
	e->gen = ++dc->gen;
	e->hnext = dc->hash[bucket(dc, k)];
	dc->hash[bucket(dc, k)] = e;
	lru_push(dc, e);
	dc->nents++;
	dc->bytes += bytes;
	return e;
}

/* Unhashes and frees @e; the caller deals with its file. */
static void index_del(struct objfs_diskcache *dc, struct dent *e)
{
	struct dent **pp = &dc->hash[bucket(dc, e->key)];

	for (; *pp; pp = &(*pp)->hnext) {
		if (*pp == e) {
			*pp = e->hnext;
			break;
		}
	}
	lru_remove(dc, e);
	dc->nents--;
	dc->bytes -= e->bytes;
	free(e);
}

/*
 * Evicts readable entries from the LRU tail until the total fits the cap;
 * their keys go to @victims (at most @max) for the caller to unlink outside
 * the lock. Returns how many.
 */
static size_t evict(struct objfs_diskcache *dc, struct key *victims, size_t max)
{
	size_t n = 0;
	struct dent *e = dc->lru_tail, *prev;

	for (; e && dc->bytes > dc->cap && n < max; e = prev) {
		prev = e->lprev;
		if (e->writing)
			continue;
		victims[n++] = e->key;
		index_del(dc, e);
		dc->st.evictions++;
	}
	return n;
}

static void unlink_keys(struct objfs_diskcache *dc, const struct key *keys, size_t n)
{
	char path[PATH_MAX];

	for (size_t i = 0; i < n; i++)
		if (!key_path(dc, keys[i], 0, path, sizeof(path)) && unlink(path) && errno != ENOENT)
			objfs_debug("disk cache: cannot remove %s: %s", path, strerror(errno));
}

/* ------------------------------------------------------------ state */

/* Switches writes and lookups off for the rest of the mount; logs once. */
static void degrade(struct objfs_diskcache *dc, const char *what, int err)
{
	int first;

	pthread_mutex_lock(&dc->lock);
	first = !dc->degraded;
	__atomic_store_n(&dc->degraded, 1, __ATOMIC_RELAXED);
	dc->st.degraded = 1;
	pthread_mutex_unlock(&dc->lock);
	if (first)
		objfs_err("disk cache %s: %s: %s; degrading to memory-only caching for the rest "
			  "of this mount", dc->dir, what, strerror(err));
}

static int disk_failure(int err)
{
	return err == ENOSPC || err == EIO || err == EDQUOT || err == EROFS;
}

static int is_degraded(struct objfs_diskcache *dc)
{
	return __atomic_load_n(&dc->degraded, __ATOMIC_RELAXED);
}

static void wake(struct objfs_diskcache *dc)
{
	uint64_t one = 1;

	(void)!write(dc->ev_fd, &one, sizeof(one));
}

static void enqueue(struct objfs_diskcache *dc, struct dreq *r)
{
	pthread_mutex_lock(&dc->lock);
	r->next = NULL;
	if (dc->q_tail)
		dc->q_tail->next = r;
	else
		dc->q_head = r;
	dc->q_tail = r;
	pthread_mutex_unlock(&dc->lock);
	wake(dc);
}

/* A request for the chunk @key (@ident) moving @len bytes at @data, with its
 * header buffer (aligned for O_DIRECT reads); the rest zeroed. NULL: no memory. */
static struct dreq *dreq_new(enum op op, struct key key, const char *ident, size_t ident_len,
			     char *data, size_t len)
{
	struct dreq *r = calloc(1, sizeof(*r) + ident_len);

	if (r && posix_memalign((void **)&r->hdr, DIRECT_ALIGN, HDR_SIZE)) {
		free(r);
		return NULL;
	}
	if (!r)
		return NULL;
	r->op = op;
	r->key = key;
	r->fd = -1;
	r->data = data;
	r->len = len;
	r->ident_len = ident_len;
	memcpy(r->ident, ident, ident_len);
	return r;
}

static void dreq_free(struct dreq *r)
{
	if (!r)
		return;
	free(r->hdr);
	free(r);
}

/*
 * A write of @len bytes that had room is over (written or dropped). The
 * buffer is released before this: objfs_diskcache_flush() returning means
 * no buffer is held any more, so its owner may free them all.
 */
static void unreserve(struct objfs_diskcache *dc, size_t len, int written)
{
	pthread_mutex_lock(&dc->lock);
	dc->wq_bytes -= len;
	if (written) {
		dc->st.writes++;
		dc->st.write_bytes += len;
	} else {
		dc->st.writes_dropped++;
	}
	if (--dc->wq_count == 0)
		pthread_cond_broadcast(&dc->cond);
	pthread_mutex_unlock(&dc->lock);
}

static void write_end(struct objfs_diskcache *dc, struct dreq *r, int written)
{
	size_t len = r->len;

	if (r->owned)
		free(r->data);
	else
		dc->release(r->arg); /* outside dc->lock: the owner takes its own lock */
	dreq_free(r);
	unreserve(dc, len, written);
}

/* ------------------------------------------------------------ chunk format */

static void hdr_build(char *buf, const char *ident, size_t ident_len, const char *data,
		      size_t len)
{
	struct hdr h;

	memset(buf, 0, HDR_SIZE);
	memcpy(h.magic, MAGIC, sizeof(h.magic));
	h.version = FORMAT;
	h.ident_len = (uint32_t)ident_len;
	h.data_len = len;
	h.data_sum = XXH3_64bits(data, len);
	h.hdr_sum = 0;
	memcpy(buf, &h, sizeof(h));
	memcpy(buf + sizeof(h), ident, ident_len);
	h.hdr_sum = XXH3_64bits(buf, HDR_SIZE);
	memcpy(buf, &h, sizeof(h));
}

/* Checks a chunk read back: NULL when it is the wanted one, else why not. */
static const char *chunk_check(char *hdrbuf, const char *ident, size_t ident_len,
			       const char *data, size_t len)
{
	struct hdr h;
	uint64_t sum;

	memcpy(&h, hdrbuf, sizeof(h));
	if (memcmp(h.magic, MAGIC, sizeof(h.magic)) || h.version != FORMAT)
		return "not a chunk file of this version";
	sum = h.hdr_sum;
	h.hdr_sum = 0;
	memcpy(hdrbuf, &h, sizeof(h));
	if (XXH3_64bits(hdrbuf, HDR_SIZE) != sum)
		return "header checksum mismatch";
	if (h.ident_len != ident_len || memcmp(hdrbuf + sizeof(h), ident, ident_len))
		return "identity mismatch (another object, version or block)";
	if (h.data_len != len)
		return "length mismatch";
	if (XXH3_64bits(data, len) != h.data_sum)
		return "data checksum mismatch";
	return NULL;
}

/* ------------------------------------------------------------ disk thread */

/* Drops the index entry a read looked up (if still that one) and its file. */
static void drop_entry(struct objfs_diskcache *dc, struct key k, uint64_t gen)
{
	struct dent *e;
	int gone = 0;

	pthread_mutex_lock(&dc->lock);
	e = find(dc, k);
	if (e && e->gen == gen && !e->writing) {
		index_del(dc, e);
		gone = 1;
	}
	pthread_mutex_unlock(&dc->lock);
	if (gone)
		unlink_keys(dc, &k, 1);
}

static void read_finish(struct dreq *r, int err)
{
	objfs_fetch_done_fn done = r->done;
	void *arg = r->arg;

	if (r->fd >= 0)
		close(r->fd);
	dreq_free(r);
	done(arg, err);
}

/* The read failed or the file is bad: never served, the block is fetched again. */
static void read_fail(struct objfs_diskcache *dc, struct dreq *r, const char *why, int err)
{
	char hex[33];

	key_hex(r->key, hex);
	pthread_mutex_lock(&dc->lock);
	if (err)
		dc->st.read_errors++;
	else
		dc->st.bad++;
	pthread_mutex_unlock(&dc->lock);
	if (err)
		objfs_info("disk cache: reading chunk %s failed: %s: %s (fetching it again)", hex,
			   why, strerror(err));
	else
		objfs_warn("disk cache: chunk %s dropped: %s (fetching it again)", hex, why);
	drop_entry(dc, r->key, r->gen);
	if (err && disk_failure(err))
		degrade(dc, "reading a chunk", err);
	read_finish(r, OBJFS_DISKCACHE_RETRY);
}

static struct io_uring_sqe *get_sqe(struct objfs_diskcache *dc)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&dc->ring);

	/* RING_OPS requests and the eventfd read on a ring of 2 x RING_OPS + 2:
	 * never full, but submitting makes room if it ever is */
	while (!sqe) {
		io_uring_submit(&dc->ring);
		sqe = io_uring_get_sqe(&dc->ring);
	}
	return sqe;
}

/*
 * Prepares the (rest of the) transfer of @r; the disk thread submits all
 * prepared SQEs at once per loop turn.
 */
static void submit_io(struct objfs_diskcache *dc, struct dreq *r)
{
	struct io_uring_sqe *sqe = get_sqe(dc);
	unsigned n = 0;
	size_t pos = r->pos;

	for (int i = 0; i < 2; i++) {
		if (pos >= r->iov[i].iov_len) {
			pos -= r->iov[i].iov_len;
			continue;
		}
		r->cur[n].iov_base = (char *)r->iov[i].iov_base + pos;
		r->cur[n].iov_len = r->iov[i].iov_len - pos;
		pos = 0;
		n++;
	}
	if (r->op == OP_READ)
		io_uring_prep_readv(sqe, r->fd, r->cur, n, r->pos);
	else
		io_uring_prep_writev(sqe, r->fd, r->cur, n, r->pos);
	io_uring_sqe_set_data(sqe, r);
}

/* Starts the whole transfer of @r (header, then data) on its open fd. */
static void io_begin(struct objfs_diskcache *dc, struct dreq *r)
{
	r->iov[0].iov_base = r->hdr;
	r->iov[0].iov_len = HDR_SIZE;
	r->iov[1].iov_base = r->data;
	r->iov[1].iov_len = r->len;
	r->total = HDR_SIZE + r->len;
	r->pos = 0;
	dc->nio++;
	submit_io(dc, r);
}

/*
 * Accounts a completion of @r: resubmits what is left of an interrupted or
 * short transfer and returns 1; returns 0 once all of it is done, or -errno
 * (-ENODATA when no byte moved: end of file, or no room).
 */
static int io_progress(struct objfs_diskcache *dc, struct dreq *r, int res)
{
	if (res == -EINTR || res == -EAGAIN) {
		submit_io(dc, r);
		return 1;
	}
	if (res > 0) {
		r->pos += (size_t)res;
		if (r->pos < r->total) {
			submit_io(dc, r);
			return 1;
		}
	}
	dc->nio--;
	return res < 0 ? res : res == 0 ? -ENODATA : 0;
}

static void read_start(struct objfs_diskcache *dc, struct dreq *r)
{
	char path[PATH_MAX];

	r->fd = -1;
	if (key_path(dc, r->key, 0, path, sizeof(path))) {
		read_fail(dc, r, "path too long", ENAMETOOLONG);
		return;
	}
	/* O_DIRECT where the block buffer allows it (full blocks: 2 MiB
	 * aligned by the block cache): see the file header */
	r->direct = !__atomic_load_n(&dc->no_direct, __ATOMIC_RELAXED) &&
		    (uintptr_t)r->data % DIRECT_ALIGN == 0 && r->len % DIRECT_ALIGN == 0;
	r->fd = open(path, O_RDONLY | O_CLOEXEC | (r->direct ? O_DIRECT : 0));
	if (r->fd < 0 && r->direct && errno == EINVAL) {
		__atomic_store_n(&dc->no_direct, 1, __ATOMIC_RELAXED);
		r->direct = 0;
		r->fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	if (r->fd < 0) {
		read_fail(dc, r, "open", errno);
		return;
	}
	io_begin(dc, r);
}

static void read_done(struct objfs_diskcache *dc, struct dreq *r, int res)
{
	const char *why;

	int rc = io_progress(dc, r, res);

	if (rc > 0)
		return;
	if (rc == -ENODATA) {
		read_fail(dc, r, "file shorter than its header says", 0);
		return;
	}
	if (rc == -EINVAL && r->direct)
		__atomic_store_n(&dc->no_direct, 1, __ATOMIC_RELAXED); /* buffered from now on */
	if (rc < 0) {
		read_fail(dc, r, "read", -rc);
		return;
	}
	why = chunk_check(r->hdr, r->ident, r->ident_len, r->data, r->len);
	if (why) {
		read_fail(dc, r, why, 0);
		return;
	}
	/* the warm-start scan orders by mtime: a hit makes the chunk the
	 * newest, so LRU order survives a remount (best effort) */
	(void)futimens(r->fd, (const struct timespec[2]){ { 0, UTIME_OMIT }, { 0, UTIME_NOW } });
	pthread_mutex_lock(&dc->lock);
	dc->st.hits++;
	pthread_mutex_unlock(&dc->lock);
	read_finish(r, 0);
}

/* Ends a write that did not make it: entry and temporary file go. */
static void write_fail(struct objfs_diskcache *dc, struct dreq *r, const char *what, int err)
{
	char tmp[PATH_MAX];
	struct dent *e;

	if (r->fd >= 0)
		close(r->fd);
	if (!key_path(dc, r->key, 1, tmp, sizeof(tmp)))
		unlink(tmp);
	pthread_mutex_lock(&dc->lock);
	e = find(dc, r->key);
	if (e && e->gen == r->gen)
		index_del(dc, e);
	pthread_mutex_unlock(&dc->lock);
	if (err && disk_failure(err))
		degrade(dc, what, err);
	else if (err)
		objfs_info("disk cache %s: %s: %s (chunk not cached)", dc->dir, what, strerror(err));
	write_end(dc, r, 0);
}

static void write_start(struct objfs_diskcache *dc, struct dreq *r)
{
	struct key victims[64] = { { 0, 0 } };
	char tmp[PATH_MAX];
	struct dent *e;
	size_t nv = 0;

	r->fd = -1;
	pthread_mutex_lock(&dc->lock);
	if (dc->degraded || find(dc, r->key)) {
		pthread_mutex_unlock(&dc->lock);
		write_end(dc, r, 0); /* off, or cached / being written already */
		return;
	}
	e = index_add(dc, r->key, HDR_SIZE + r->len, 1);
	if (e) {
		r->gen = e->gen;
		nv = evict(dc, victims, sizeof(victims) / sizeof(victims[0]));
	}
	pthread_mutex_unlock(&dc->lock);
	unlink_keys(dc, victims, nv);
	if (!e) {
		write_end(dc, r, 0);
		return;
	}
	if (key_path(dc, r->key, 1, tmp, sizeof(tmp))) {
		write_fail(dc, r, "temporary path", ENAMETOOLONG);
		return;
	}
	/* checksummed here, not on the engine thread that fetched the block */
	hdr_build(r->hdr, r->ident, r->ident_len, r->data, r->len);
	r->fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (r->fd < 0) {
		write_fail(dc, r, "creating a chunk file", errno);
		return;
	}
	io_begin(dc, r);
}

static void write_done(struct objfs_diskcache *dc, struct dreq *r, int res)
{
	char tmp[PATH_MAX], path[PATH_MAX];
	struct dent *e;
	int fd, rc = io_progress(dc, r, res);

	if (rc > 0)
		return;
	if (rc < 0) {
		/* a write that makes no progress: the disk is full */
		write_fail(dc, r, "writing a chunk file", rc == -ENODATA ? ENOSPC : -rc);
		return;
	}
	fd = r->fd;
	r->fd = -1;
	if (close(fd)) {
		write_fail(dc, r, "closing a chunk file", errno);
		return;
	}
	if (key_path(dc, r->key, 1, tmp, sizeof(tmp)) || key_path(dc, r->key, 0, path,
								 sizeof(path))) {
		write_fail(dc, r, "chunk path", ENAMETOOLONG);
		return;
	}
	if (rename(tmp, path)) {
		write_fail(dc, r, "renaming a chunk file into place", errno);
		return;
	}
	pthread_mutex_lock(&dc->lock);
	e = find(dc, r->key);
	if (e && e->gen == r->gen)
		e->writing = 0;
	pthread_mutex_unlock(&dc->lock);
	write_end(dc, r, 1);
}

static void arm_eventfd(struct objfs_diskcache *dc)
{
	struct io_uring_sqe *sqe = get_sqe(dc);

	io_uring_prep_read(sqe, dc->ev_fd, &dc->ev_buf, sizeof(dc->ev_buf), 0);
	io_uring_sqe_set_data(sqe, NULL);
}

/* Starts queued requests while the ring has room. */
static void start_queued(struct objfs_diskcache *dc)
{
	while (dc->nio < RING_OPS) {
		struct dreq *r;

		pthread_mutex_lock(&dc->lock);
		r = dc->q_head;
		if (r) {
			dc->q_head = r->next;
			if (!dc->q_head)
				dc->q_tail = NULL;
		}
		pthread_mutex_unlock(&dc->lock);
		if (!r)
			return;
		if (r->op == OP_READ)
			read_start(dc, r);
		else
			write_start(dc, r);
	}
}

static void *disk_thread(void *arg)
{
	struct objfs_diskcache *dc = arg;

	arm_eventfd(dc);
	for (;;) {
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		int stop, queued, rc;

		start_queued(dc);
		io_uring_submit(&dc->ring); /* everything prepared this turn, at once */
		pthread_mutex_lock(&dc->lock);
		stop = dc->stop;
		queued = dc->q_head != NULL;
		pthread_mutex_unlock(&dc->lock);
		if (stop && !queued && !dc->nio)
			break;
		rc = io_uring_wait_cqe(&dc->ring, &cqe);
		if (rc == -EINTR)
			continue;
		if (rc < 0) {
			objfs_err("disk cache %s: io_uring wait failed: %s", dc->dir, strerror(-rc));
			break; /* cannot happen with a valid ring */
		}
		io_uring_for_each_cqe(&dc->ring, head, cqe) {
			struct dreq *r = io_uring_cqe_get_data(cqe);
			int res = cqe->res;

			seen++;
			if (!r) {
				arm_eventfd(dc);
				continue;
			}
			if (r->op == OP_READ)
				read_done(dc, r, res);
			else
				write_done(dc, r, res);
		}
		io_uring_cq_advance(&dc->ring, seen);
	}
	return NULL;
}

/* ------------------------------------------------------------ fetch */

/*
 * A fetched block becomes a queued write, when fewer than wq_cap bytes are
 * held for writing: its buffer is held (no copy) until the write ends. Runs
 * before done(), while the fetch still owns the buffer. NULL when the write
 * is dropped (counted): no holder, bound reached, or out of memory.
 */
static struct dreq *write_req(struct objfs_diskcache *dc, struct key key, const char *ident,
			      size_t ident_len, char *data, size_t len, void *arg, int owned)
{
	struct dreq *r;
	int room;

	pthread_mutex_lock(&dc->lock);
	room = (owned || dc->hold) && !dc->degraded && dc->wq_bytes + len <= dc->wq_cap;
	if (room) {
		dc->wq_bytes += len;
		dc->wq_count++;
	} else {
		dc->st.writes_dropped++;
	}
	pthread_mutex_unlock(&dc->lock);
	if (!room)
		return NULL;
	r = dreq_new(OP_WRITE, key, ident, ident_len, data, len);
	if (!r) {
		unreserve(dc, len, 0);
		return NULL;
	}
	r->owned = owned;
	r->arg = arg;
	if (!owned)
		dc->hold(arg);
	return r;
}

static void miss_done(void *arg, int err)
{
	struct miss *m = arg;
	struct objfs_diskcache *dc = m->dc;
	struct dreq *r = NULL;

	if (!err && !is_degraded(dc))
		r = write_req(dc, m->key, m->ident, m->ident_len, m->dst, m->len, m->arg, 0);
	m->done(m->arg, err);
	if (r)
		enqueue(dc, r);
	free(m);
}

/*
 * Looks block @idx of @id up and, when indexed, queues its read into @dst.
 * 0: queued (done() follows); -ENOENT: not cached (or not cacheable);
 * -ENOMEM. *@ident/@ilen receive the chunk identity either way.
 */
static int read_hit(struct objfs_diskcache *dc, const char *id, uint64_t idx, size_t len,
		    char *dst, objfs_fetch_done_fn done, void *arg, char *ident, size_t *ilen)
{
	struct key k;
	struct dent *e;
	struct dreq *r;
	uint64_t gen;

	if (is_degraded(dc) || ident_make(dc, id, idx, ident, ilen))
		return -ENOENT;
	k = key_of(ident, *ilen);
	pthread_mutex_lock(&dc->lock);
	e = find(dc, k);
	if (!e || e->writing) {
		dc->st.misses++;
		pthread_mutex_unlock(&dc->lock);
		return -ENOENT;
	}
	lru_remove(dc, e);
	lru_push(dc, e);
	gen = e->gen;
	pthread_mutex_unlock(&dc->lock);
	r = dreq_new(OP_READ, k, ident, *ilen, dst, len);
	if (!r)
		return -ENOMEM;
	r->gen = gen;
	r->done = done;
	r->arg = arg;
	enqueue(dc, r);
	return 0;
}

int objfs_diskcache_read(struct objfs_diskcache *dc, const char *id, uint64_t idx, size_t len,
			 char *dst, objfs_fetch_done_fn done, void *arg)
{
	char ident[IDENT_MAX];
	size_t ilen;

	return read_hit(dc, id, idx, len, dst, done, arg, ident, &ilen);
}

void objfs_diskcache_put(struct objfs_diskcache *dc, const char *id, uint64_t idx,
			 const char *data, size_t len)
{
	char ident[IDENT_MAX];
	size_t ilen;
	struct key k;
	struct dreq *r;
	char *copy;
	int have;

	if (is_degraded(dc) || ident_make(dc, id, idx, ident, &ilen))
		return;
	k = key_of(ident, ilen);
	pthread_mutex_lock(&dc->lock);
	have = find(dc, k) != NULL;
	pthread_mutex_unlock(&dc->lock);
	if (have || !(copy = malloc(len ? len : 1)))
		return;
	memcpy(copy, data, len);
	r = write_req(dc, k, ident, ilen, copy, len, NULL, 1);
	if (r)
		enqueue(dc, r);
	else
		free(copy);
}

void objfs_diskcache_fetch(struct objfs_diskcache *dc, const char *id, uint64_t idx,
			   objfs_fetch_fn inner, void *inner_ctx, int64_t off, size_t len,
			   char *dst, objfs_fetch_done_fn done, void *arg)
{
	char ident[IDENT_MAX];
	size_t ilen = 0;
	struct miss *m;
	int rc = read_hit(dc, id, idx, len, dst, done, arg, ident, &ilen);

	if (rc == 0)
		return;
	/* not cached, or no memory for the read: to the network; only a
	 * cacheable miss is written behind */
	m = rc == -ENOENT && ilen && !is_degraded(dc) ? malloc(sizeof(*m) + ilen) : NULL;
	if (!m) {
		inner(inner_ctx, off, len, dst, done, arg);
		return;
	}
	m->dc = dc;
	m->key = key_of(ident, ilen);
	m->dst = dst;
	m->len = len;
	m->done = done;
	m->arg = arg;
	m->ident_len = ilen;
	memcpy(m->ident, ident, ilen);
	inner(inner_ctx, off, len, dst, miss_done, m);
}

/* ------------------------------------------------------------ open / scan */

struct found {
	struct key key;
	uint64_t bytes;
	struct timespec mtime;
};

static int found_cmp(const void *a, const void *b)
{
	const struct found *x = a, *y = b;

	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	return 0;
}

/* Creates DIR/chunks/XY and DIR/tmp, empties DIR/tmp. */
static int make_dirs(struct objfs_diskcache *dc, char *err, size_t errlen)
{
	char path[PATH_MAX];
	DIR *d;
	struct dirent *de;

	snprintf(path, sizeof(path), "%s/chunks", dc->dir);
	if (mkdir(path, 0700) && errno != EEXIST)
		goto fail;
	for (int i = 0; i < FANOUT; i++) {
		snprintf(path, sizeof(path), "%s/chunks/%02x", dc->dir, i);
		if (mkdir(path, 0700) && errno != EEXIST)
			goto fail;
	}
	snprintf(path, sizeof(path), "%s/tmp", dc->dir);
	if (mkdir(path, 0700) && errno != EEXIST)
		goto fail;
	d = opendir(path);
	if (!d)
		goto fail;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			(void)unlinkat(dirfd(d), de->d_name, 0);
	closedir(d);
	return 0;
fail: {
	int e = errno;

	snprintf(err, errlen, "cache_dir: cannot create %s: %s", path, strerror(e));
	return -e;
	}
}

/* Indexes the chunk files in DIR/chunks, oldest first, then trims to the cap. */
static int scan(struct objfs_diskcache *dc, char *err, size_t errlen)
{
	struct found *f = NULL;
	size_t n = 0, capn = 0;
	char path[PATH_MAX];
	int ret = 0;

	for (int i = 0; i < FANOUT && !ret; i++) {
		struct dirent *de;
		char xy[3];
		DIR *d;

		snprintf(path, sizeof(path), "%s/chunks/%02x", dc->dir, i);
		d = opendir(path);
		if (!d)
			continue;
		snprintf(xy, sizeof(xy), "%02x", i);
		while ((de = readdir(d))) {
			struct stat st;
			struct key k;

			if (key_parse(de->d_name, &k) || strncmp(de->d_name, xy, 2))
				continue; /* not one of ours: left alone */
			if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
			    !S_ISREG(st.st_mode))
				continue;
			if (n == capn) {
				size_t nc = capn ? capn * 2 : 1024;
				struct found *nf = realloc(f, nc * sizeof(*f));

				if (!nf) {
					ret = -ENOMEM;
					break;
				}
				f = nf;
				capn = nc;
			}
			f[n].key = k;
			f[n].bytes = (uint64_t)st.st_size;
			f[n].mtime = st.st_mtim;
			n++;
		}
		closedir(d);
	}
	if (ret) {
		snprintf(err, errlen, "cache_dir: out of memory indexing %s", dc->dir);
		free(f);
		return ret;
	}
	if (n) /* qsort(NULL, 0) is undefined: UBSan flags an empty cache_dir */
		qsort(f, n, sizeof(*f), found_cmp);
	for (size_t i = 0; i < n; i++) {
		if (!index_add(dc, f[i].key, f[i].bytes, 0)) {
			snprintf(err, errlen, "cache_dir: out of memory indexing %s", dc->dir);
			free(f);
			return -ENOMEM;
		}
	}
	free(f);
	for (;;) {
		struct key victims[64];
		size_t nv = evict(dc, victims, 64);

		if (!nv)
			break;
		unlink_keys(dc, victims, nv);
	}
	objfs_info("disk cache %s: %zu chunk files, %llu bytes (cap %llu)", dc->dir, dc->nents,
		   (unsigned long long)dc->bytes, (unsigned long long)dc->cap);
	return 0;
}

static int take_lock(struct objfs_diskcache *dc, char *err, size_t errlen)
{
	char path[PATH_MAX], pid[32];
	ssize_t n;
	int e;

	snprintf(path, sizeof(path), "%s/lock", dc->dir);
	dc->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (dc->lock_fd < 0) {
		e = errno;
		snprintf(err, errlen, "cache_dir: cannot open the lock file %s: %s", path,
			 strerror(e));
		return -e;
	}
	if (flock(dc->lock_fd, LOCK_EX | LOCK_NB)) {
		e = errno;
		if (e == EWOULDBLOCK) {
			n = pread(dc->lock_fd, pid, sizeof(pid) - 1, 0);
			pid[n > 0 ? n : 0] = '\0';
			pid[strcspn(pid, "\n")] = '\0';
			snprintf(err, errlen, "cache_dir '%s' is in use by another objfs mount%s%s%s "
				 "(lock %s); give each mount its own cache_dir", dc->dir,
				 pid[0] ? " (pid " : "", pid, pid[0] ? ")" : "", path);
			return -EBUSY;
		}
		snprintf(err, errlen, "cache_dir: cannot lock %s: %s", path, strerror(e));
		return -e;
	}
	n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
	if (ftruncate(dc->lock_fd, 0) == 0)
		(void)!pwrite(dc->lock_fd, pid, (size_t)n, 0);
	return 0;
}

int objfs_diskcache_open(const struct objfs_diskcache_cfg *cfg, struct objfs_diskcache **out,
			 char *err, size_t errlen)
{
	struct objfs_diskcache *dc;
	int ret;

	err[0] = '\0';
	if (!cfg->dir || !*cfg->dir || !cfg->block_size) {
		snprintf(err, errlen, "cache_dir: no directory given");
		return -EINVAL;
	}
	if (cfg->cap < 2 * (cfg->block_size + HDR_SIZE)) {
		snprintf(err, errlen, "cache_dir_size must hold at least two chunks (2 x (%zu + "
			 "%u) bytes with chunk_size=%zu)", cfg->block_size, HDR_SIZE,
			 cfg->block_size);
		return -EINVAL;
	}
	dc = calloc(1, sizeof(*dc));
	if (!dc) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	dc->lock_fd = dc->ev_fd = -1;
	dc->cap = cfg->cap;
	dc->bsize = cfg->block_size;
	dc->nbuckets = 1024;
	dc->dir = strdup(cfg->dir);
	dc->source = strdup(cfg->source ? cfg->source : "");
	dc->hash = calloc(dc->nbuckets, sizeof(*dc->hash));
	pthread_mutex_init(&dc->lock, NULL);
	pthread_cond_init(&dc->cond, NULL);
	if (!dc->dir || !dc->source || !dc->hash) {
		snprintf(err, errlen, "out of memory");
		ret = -ENOMEM;
		goto out_dc;
	}
	while (strlen(dc->dir) > 1 && dc->dir[strlen(dc->dir) - 1] == '/')
		dc->dir[strlen(dc->dir) - 1] = '\0';
	if (strlen(dc->dir) > PATH_MAX - 64) {
		snprintf(err, errlen, "cache_dir: path too long");
		ret = -ENAMETOOLONG;
		goto out_dc;
	}
	if (mkdir(dc->dir, 0700) && errno != EEXIST) {
		ret = -errno;
		snprintf(err, errlen, "cache_dir: cannot create %s: %s", dc->dir, strerror(-ret));
		goto out_dc;
	}
	ret = take_lock(dc, err, errlen);
	if (ret)
		goto out_dc;
	ret = make_dirs(dc, err, errlen);
	if (ret)
		goto out_dc;
	ret = scan(dc, err, errlen);
	if (ret)
		goto out_dc;
	dc->ev_fd = eventfd(0, EFD_CLOEXEC);
	if (dc->ev_fd < 0) {
		ret = -errno;
		snprintf(err, errlen, "cache_dir: eventfd: %s", strerror(-ret));
		goto out_dc;
	}
	ret = io_uring_queue_init(2 * RING_OPS + 2, &dc->ring, 0);
	if (ret) {
		snprintf(err, errlen, "cache_dir: cannot set up io_uring: %s (is it disabled by "
			 "kernel.io_uring_disabled or a seccomp filter?)", strerror(-ret));
		goto out_dc;
	}
	dc->ring_ok = 1;
	ret = -pthread_create(&dc->thread, NULL, disk_thread, dc);
	if (ret) {
		snprintf(err, errlen, "cache_dir: cannot start the disk thread: %s",
			 strerror(-ret));
		goto out_dc;
	}
	dc->thread_ok = 1;
	*out = dc;
	return 0;
out_dc:
	objfs_diskcache_free(dc);
	return ret;
}

void objfs_diskcache_set_holder(struct objfs_diskcache *dc, void (*hold)(void *arg),
				void (*release)(void *arg), size_t max_bytes)
{
	pthread_mutex_lock(&dc->lock);
	dc->hold = hold && release ? hold : NULL;
	dc->release = release;
	dc->wq_cap = max_bytes;
	pthread_mutex_unlock(&dc->lock);
}

void objfs_diskcache_flush(struct objfs_diskcache *dc)
{
	pthread_mutex_lock(&dc->lock);
	while (dc->wq_count)
		pthread_cond_wait(&dc->cond, &dc->lock);
	pthread_mutex_unlock(&dc->lock);
}

void objfs_diskcache_free(struct objfs_diskcache *dc)
{
	if (!dc)
		return;
	if (dc->thread_ok) {
		objfs_diskcache_flush(dc); /* every held buffer released */
		pthread_mutex_lock(&dc->lock);
		dc->stop = 1;
		pthread_mutex_unlock(&dc->lock);
		wake(dc);
		pthread_join(dc->thread, NULL);
	}
	if (dc->ring_ok)
		io_uring_queue_exit(&dc->ring);
	if (dc->ev_fd >= 0)
		close(dc->ev_fd);
	if (dc->lock_fd >= 0)
		close(dc->lock_fd); /* releases the flock */
	for (struct dent *e = dc->lru_head, *next; e; e = next) {
		next = e->lnext;
		free(e);
	}
	free(dc->hash);
	free(dc->dir);
	free(dc->source);
	pthread_mutex_destroy(&dc->lock);
	pthread_cond_destroy(&dc->cond);
	free(dc);
}

int objfs_diskcache_has(struct objfs_diskcache *dc, const char *id, uint64_t idx)
{
	char ident[IDENT_MAX];
	size_t ilen;
	struct dent *e;
	int has;

	if (ident_make(dc, id, idx, ident, &ilen))
		return 0;
	pthread_mutex_lock(&dc->lock);
	e = find(dc, key_of(ident, ilen));
	has = e && !e->writing;
	pthread_mutex_unlock(&dc->lock);
	return has;
}

int objfs_diskcache_chunk_path(struct objfs_diskcache *dc, const char *id, uint64_t idx,
			       char *buf, size_t cap)
{
	char ident[IDENT_MAX];
	size_t ilen;

	if (ident_make(dc, id, idx, ident, &ilen))
		return -ENAMETOOLONG;
	return key_path(dc, key_of(ident, ilen), 0, buf, cap);
}

void objfs_diskcache_get_stats(struct objfs_diskcache *dc, struct objfs_diskcache_stats *st)
{
	pthread_mutex_lock(&dc->lock);
	*st = dc->st;
	st->files = dc->nents;
	st->bytes = dc->bytes;
	st->cap = dc->cap;
	pthread_mutex_unlock(&dc->lock);
}

/* ------------------------------------------------------------ ranges (interim: whole chunks) */

/* Data length of the readable entry of block @idx of @id, or 0. */
static uint64_t whole_len(struct objfs_diskcache *dc, const char *id, uint64_t idx)
{
	char ident[IDENT_MAX];
	size_t ilen;
	struct dent *e;
	uint64_t n = 0;

	if (ident_make(dc, id, idx, ident, &ilen))
		return 0;
	pthread_mutex_lock(&dc->lock);
	e = find(dc, key_of(ident, ilen));
	if (e && !e->writing)
		n = e->bytes - HDR_SIZE;
	pthread_mutex_unlock(&dc->lock);
	return n;
}

int objfs_diskcache_has_range(struct objfs_diskcache *dc, const char *id, uint64_t idx,
			      size_t off, size_t len)
{
	uint64_t n = whole_len(dc, id, idx);

	return len && off < n && len <= n - off;
}

struct range_rd {
	char *bounce, *dst;
	size_t off, len;
	objfs_fetch_done_fn done;
	void *arg;
};

static void range_rd_done(void *arg, int err)
{
	struct range_rd *q = arg;

	if (!err)
		memcpy(q->dst, q->bounce + q->off, q->len);
	q->done(q->arg, err);
	free(q->bounce);
	free(q);
}

int objfs_diskcache_read_range(struct objfs_diskcache *dc, const char *id, uint64_t idx,
			       size_t off, size_t len, char *dst, objfs_fetch_done_fn done,
			       void *arg)
{
	uint64_t n = whole_len(dc, id, idx);
	struct range_rd *q;
	int rc;

	if (!len || off >= n || len > n - off)
		return -ENOENT;
	q = calloc(1, sizeof(*q));
	if (!q || posix_memalign((void **)&q->bounce, DIRECT_ALIGN, n ? n : 1)) {
		free(q);
		return -ENOMEM;
	}
	*q = (struct range_rd){ q->bounce, dst, off, len, done, arg };
	rc = objfs_diskcache_read(dc, id, idx, n, q->bounce, range_rd_done, q);
	if (rc) {
		free(q->bounce);
		free(q);
	}
	return rc;
}

void objfs_diskcache_put_range(struct objfs_diskcache *dc, const char *id, uint64_t idx,
			       size_t block_len, size_t off, const char *data, size_t len)
{
	if (off == 0 && len == block_len && len)
		objfs_diskcache_put(dc, id, idx, data, len);
}
