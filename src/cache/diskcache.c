/*
 * diskcache: see diskcache.h for what it guarantees; diskcache_i.h for the
 * chunk file format, diskcache_chunk.c for its (fuzzed) parser.
 *
 * Layout of the cache directory:
 *   DIR/lock                 flock()ed by the mount that owns DIR (holds its pid)
 *   DIR/key                  the cache's secret: 32 random bytes, mode 0600,
 *                            the key of every chunk MAC (diskcache_chunk.c)
 *   DIR/chunks/XY/HASH.c3    a whole chunk: metadata area (4 KiB for 64 KiB
 *                            blocks, 12 KiB for 4 MiB ones), then every byte of
 *                            the block; HASH is 32 hex digits, XY its first two
 *   DIR/chunks/XY/HASH.p3    a partial chunk: the same layout, only the pages
 *                            its bitmap marks valid written (holes elsewhere)
 *   DIR/tmp/HASH             a chunk being created; renamed into place when
 *                            complete (files left here by a crash are removed
 *                            at open)
 * A chunk has one name at a time; a bare HASH (format 1) or HASH.c2/.p2
 * (format 2, unkeyed sums) is removed at open, never data.
 *
 * Who may touch DIR: a cache_dir another user can write lets
 * that user swap the lock file for a symlink to a root file (truncated and
 * written by the daemon), plant symlinks where chunks are created, or
 * write chunks whose sums verify -- the identity is public -- so that root
 * reads forged bytes. So objfs_diskcache_open() walks the path from / a
 * component at a time (util/safepath.c: openat O_PATH|O_NOFOLLOW, fstat of
 * each fd, not of the name): every directory above DIR is owned by root or the mounting
 * user (the euid) and not writable by group or others unless sticky, as
 * /tmp; a symlink on the way is followed only when root or the euid owns
 * it (its target is walked the same way); DIR itself (made 0700 when
 * missing) is owned by the euid and not group/other-writable, and so are
 * its subdirectories (checked at open; a symlink or file in their place is
 * replaced). The fd of DIR is kept for the cache's life and every later
 * file operation -- lock, key, fan-out directories, chunk and temporary
 * files, renames, unlinks, the scan -- is relative to it (openat,
 * renameat, unlinkat, fstatat) with O_NOFOLLOW/AT_SYMLINK_NOFOLLOW; new
 * files are O_CREAT|O_EXCL|O_NOFOLLOW. The paths below DIR go through
 * directories only the euid can change, so no one else can redirect them.
 * The lock file is opened without O_TRUNC and truncated only once it is
 * known to be a regular file of the euid with one link, and locked.
 * Chunk validity needs DIR/key (the MAC of each page and of the metadata):
 * a chunk written by anyone without the key is dropped, never served. A
 * key present must be a regular file of the euid, 32 bytes, no group or
 * other permission bits; else the open is refused. The key lives in memory
 * in a page of its own marked MADV_DONTDUMP, wiped at free. A new key
 * (none was there) removes the chunk files found: none can verify.
 *
 * Index: a hash table of the chunk files keyed by their 128-bit name, with
 * an LRU list (head: most recently used) and the byte total: the real
 * bytes, metadata plus valid pages (a partial chunk's holes are not
 * counted), so cache_dir_size bounds what the disk holds. A whole entry
 * needs no more than its file size; a partial entry keeps its page bitmap
 * in memory (128 bytes for a 4 MiB block), so has_range() answers on a FUSE
 * thread without I/O. An entry being created (writing=1) is on the LRU and
 * counted (so the cap holds for what is in flight) but is not readable and
 * never evicted; one whose pages are being added (merging=1) stays readable
 * (for the pages it had) and is not evicted.
 *
 * Warm start: the scan takes whole chunks from their names and sizes
 * alone, as format 1 did (one readdir per fan-out directory; the block
 * length follows from the size, objfs_dcmeta_block_len), and reads the
 * metadata of each partial chunk (one open + pread of its 4-12 KiB area,
 * verified, the identity's hash checked against the name) to learn its
 * valid pages. So completeness is in the name and the pages in the file:
 * sequential readers, whose chunks are whole, pay nothing at mount, and a
 * random reader's next epoch after a remount finds its pages. Measured on
 * the 2-core development VM, objfs_diskcache_open() over 1,000 partial
 * chunks of 4 MiB blocks (12 KiB of metadata each): 13 ms with the files in
 * the page cache, 100 ms with their pages dropped (posix_fadvise
 * DONTNEED), against 4 ms for 1,000 whole chunks; so ~0.1 ms per partial
 * chunk from the disk, 1 s per 10,000. A partial chunk whose metadata is
 * bad is removed; one whose bitmap is full (a crash between its last merge
 * and the rename) is renamed whole.
 *
 * Threads: callers (FUSE threads, engine threads, side workers) only look
 * the index up, queue requests and poke an eventfd. One disk thread owns the
 * io_uring and every file operation: it takes every queued request at once
 * (batched into one io_uring_submit), opens, renames and unlinks files
 * itself (metadata calls on a local disk, kept off the callers), and
 * completes reads -- verify, then done() -- and writes. Many chunk
 * transfers are in flight at once (RING_OPS) while the thread waits for
 * completions.
 *
 * Per-chunk order: the disk thread lets the requests of one chunk run
 * concurrently only when they are all reads; a write (create or merge) has
 * the chunk to itself, and later requests of that chunk wait behind it in
 * arrival order (struct busy, the disk thread's own). So two put_range()s
 * of one chunk merge one after the other -- the second reads the
 * metadata the first wrote -- and no read ever sees metadata half
 * rewritten.
 *
 * Writes, and why a torn one never yields wrong bytes:
 *   - Create: the metadata (only the written pages valid, each with its
 *     MAC) and the pages go to DIR/tmp/HASH, renamed to .c3 or .p3
 *     when all of it is written: a chunk name never shows a file being
 *     written.
 *   - Merge (new pages into a .p3): the disk thread preads the metadata,
 *     verifies it and checks its bitmap against the index's; writes the new
 *     pages, which no reader reads (they are not valid yet); then writes
 *     the new metadata (old and new pages valid, new MACs, new header MAC)
 *     over the old in one write; then, when the bitmap is full, renames
 *     .p3 to .c3. The index learns the new pages only after that.
 *     Nothing is fsync()ed (write-behind; a lost chunk costs a fetch), so
 *     after a crash any mix may be on disk: new metadata with old or
 *     missing pages fails those pages' MACs (RETRY, chunk dropped);
 *     metadata half old and half new fails the header MAC (the scan
 *     removes the chunk) or, where only page MACs tore, the MACs of the
 *     pages they belong to; old metadata with new pages is the old chunk.
 *     Every byte served passes the MAC of its page, and each page's MAC
 *     binds its chunk and index, so wrong bytes need a forged HMAC-SHA256
 *     (or the key). A torn page MAC is a page that fails, as a torn page.
 *   - A failed merge drops the chunk (entry and file): its metadata may be
 *     torn.
 *
 * Reads of whole blocks use O_DIRECT (the metadata area is a multiple of
 * 4 KiB, the block cache's full-size buffers 2 MiB aligned): the bytes land
 * in the block cache once, instead of also filling the page cache with a
 * second copy, and the reads are truly asynchronous. Measured on the 2-core
 * development VM, 4 MiB io_uring reads at depth 16 from a file not in the
 * page cache: 405 MB/s buffered, 1588 MB/s O_DIRECT (fio). The last, short
 * block of an object and file systems that refuse O_DIRECT (EINVAL) read
 * buffered. Range reads (parts of a block) read buffered, the pages they
 * need plus the metadata, which then stays in the page cache for the next
 * range of that chunk; a range that is not whole pages lands in a bounce
 * buffer and is copied out after the check. Writes stay buffered
 * (write-behind: the page cache absorbs them, the kernel flushes).
 *
 * Write-behind holds the block cache's own buffer (a reference on the READY
 * block, taken through dc->hold before the fetch completes, dropped through
 * dc->release when the write ends), not a copy: copying each fetched block
 * into a fixed queue and dropping the write when it was full dropped most
 * of a cold read's chunks (154 of 256 at ~400 MB/s), so the next epoch read
 * little from disk. Now up to wq_cap bytes (half the block cache) wait for the disk at no extra
 * memory, the engine thread no longer copies and checksums 4 MiB (the disk
 * thread checksums when it writes), and a write is dropped only beyond
 * that bound. put()/put_range() copy (their callers' memory is not a
 * block) and count against the same bound. Held blocks cannot be evicted,
 * so a lagging disk shrinks the room the block cache has for prefetching
 * (objfs_cache_prefetch stops at its cap) rather than losing chunks. Every
 * request that held a buffer releases it exactly once (write_end), before
 * it stops counting in wq_count: objfs_diskcache_flush() returning means
 * nothing is held, which is what lets objfs_cache_free() free its blocks.
 *
 * Locking: dc->lock guards the index (entries, their bitmaps and flags), the
 * LRU, the byte total, the request queue, the write-behind accounting and
 * the counters. The disk thread's ring, in-flight count, busy chunks and
 * ready list are its own. Files are only created, renamed and unlinked by
 * the disk thread (and by open/free, when it does not run), so an
 * eviction's unlink can never remove a newer file of the same name.
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
#include <sys/mman.h>
#include <sys/queue.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>

#include <openssl/crypto.h>

#include "diskcache.h"
#include "diskcache_i.h"
#include "hash.h"
#include "log.h"
#include "safepath.h"

#define PAGE         OBJFS_DCMETA_PAGE
#define IDENT_BUF    (OBJFS_DCMETA_IDENT_MAX + 1)
#define RING_OPS     64u        /* reads + writes in flight on the ring */
#define IOV_BATCH    16u        /* iovecs of one readv/writev */
#define FANOUT       256
#define DIRECT_ALIGN 4096u      /* O_DIRECT buffer, offset and length alignment */
#define SCAN_META    16384u     /* first read of a partial chunk's metadata at open */

struct key {
	uint64_t hi, lo;
};

/* The names of a chunk: being created, whole, partial; formats 1 and 2. */
enum kind { K_TMP, K_WHOLE, K_PART, K_OLD };

struct dent {
	struct key key;
	uint64_t bytes;                 /* real bytes: metadata + valid pages */
	uint64_t gen;
	uint64_t block_len;             /* 0: a whole chunk from the scan, not yet looked up */
	unsigned char *bm;              /* partial: its valid pages (owned); NULL: whole */
	int writing;                    /* being created: not readable, not evicted */
	int merging;                    /* pages being added: not evicted */
	struct dent *hnext;
	TAILQ_ENTRY(dent) lru;          /* every entry is on dc->lru */
};

/* An evicted chunk: its file, for the caller to unlink outside the lock. */
struct victim {
	struct key key;
	enum kind kind;
};

enum op { OP_READ, OP_WRITE };

/* How a write ended, for the counters. */
enum wend { W_DONE, W_DROPPED, W_NOOP };

/* One contiguous piece of a transfer: @len bytes at file offset @foff. */
struct seg {
	uint64_t foff;
	char *buf;
	size_t len;
};

/* One read or write; owned by the queue, then by the disk thread. */
struct dreq {
	enum op op;
	struct dreq *next;         /* queue, ready list, or a busy chunk's waiters */
	struct key key;
	uint64_t gen;              /* entry generation looked up (read) or made (write) */
	int fd;
	int direct;                /* read: opened O_DIRECT */
	int held;                  /* the chunk's busy record counts this request */
	struct seg *segs;          /* the transfer, in order: segs[0 .. nseg) */
	struct seg seg_in[2];      /* segs when two suffice (reads, creates) */
	unsigned nseg, si;         /* segments; the one in progress */
	size_t spos;               /* bytes done of segs[si] */
	struct iovec cur[IOV_BATCH]; /* what is submitted */
	uint64_t block_len;        /* the chunk's block length, as the index knows it */
	size_t off, len;           /* the bytes of the block read or written */
	char *meta;                /* meta_len bytes, DIRECT_ALIGN aligned */
	size_t meta_len;
	char *data;                /* read: the caller's dst (borrowed); write: the
				    * range's bytes: the fetch's dst held through
				    * dc->hold until the write ends, or a copy
				    * (owned) freed then */
	char *bounce;              /* read: the pages, when dst cannot take them (owned) */
	int whole;                 /* read: the whole block, whose length must be len */
	int owned;
	int merge;                 /* write: pages added to the existing partial chunk */
	int complete;              /* write: the chunk is whole afterwards */
	unsigned char *bm_before;  /* merge: the index's bitmap when it started (owned) */
	uint64_t added;            /* write: bytes it adds to the index */
	objfs_fetch_done_fn done;  /* read */
	void *arg;                 /* read: done's; write: hold's, for release */
	size_t ident_len;
	char ident[];              /* the identity: expected (read), to write (write) */
};

/* The requests of one chunk on the disk thread: who runs, who waits. */
struct busy {
	struct key key;
	unsigned readers;
	int writer;
	struct dreq *wait_head, *wait_tail;
	struct busy *next;
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

/* The secret, in a page of its own (MADV_DONTDUMP), wiped and unmapped at free. */
struct keypage {
	struct objfs_dckey mac;                 /* the keyed MAC state: what is used */
	unsigned char secret[OBJFS_DCKEY_LEN];  /* DIR/key's bytes: wiped once derived */
};

struct objfs_diskcache {
	char *dir, *source;
	size_t bsize;
	int dfd;                      /* DIR, checked at open: every file op is relative */
	struct keypage *key;          /* mmap'd; read-only after open */
	int lock_fd, ev_fd;
	uint64_t ev_buf;              /* the armed eventfd read lands here */
	struct io_uring ring;
	int ring_ok;
	pthread_t thread;
	int thread_ok;
	unsigned nio;                 /* disk thread: requests on the ring */
	struct busy *busy;            /* disk thread: chunks with requests running */
	struct dreq *rd_head, *rd_tail; /* disk thread: requests whose chunk is free now */
	int no_direct;                /* O_DIRECT refused here: buffered reads */

	pthread_mutex_t lock;
	pthread_cond_t cond;          /* wq_count reached 0 */
	struct dent **hash;           /* lock */
	size_t nbuckets, nents;       /* lock */
	TAILQ_HEAD(dent_lru, dent) lru; /* lock; head: most recently used */
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
	int n = snprintf(buf, IDENT_BUF, "objfs-chunk\n%s\n%zu\n%s\n%llu", dc->source, dc->bsize,
			 id, (unsigned long long)idx);

	if (n < 0 || (size_t)n >= IDENT_BUF)
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

static const char *const kind_suffix[] = { [K_TMP] = "", [K_WHOLE] = ".c3", [K_PART] = ".p3",
					    [K_OLD] = "" };

/*
 * Parses a file name of DIR/chunks: HASH.c3 (K_WHOLE), HASH.p3 (K_PART), or
 * a bare HASH (format 1), HASH.c2 or HASH.p2 (format 2): K_OLD. -EINVAL
 * for anything else.
 */
static int key_parse(const char *s, struct key *k, enum kind *kind)
{
	char part[17];
	char *end;

	if (strspn(s, "0123456789abcdef") != 32)
		return -EINVAL;
	if (!s[32] || !strcmp(s + 32, ".c2") || !strcmp(s + 32, ".p2"))
		*kind = K_OLD;
	else if (!strcmp(s + 32, kind_suffix[K_WHOLE]))
		*kind = K_WHOLE;
	else if (!strcmp(s + 32, kind_suffix[K_PART]))
		*kind = K_PART;
	else
		return -EINVAL;
	memcpy(part, s, 16);
	part[16] = '\0';
	k->hi = strtoull(part, &end, 16);
	memcpy(part, s + 16, 16);
	k->lo = strtoull(part, &end, 16);
	return 0;
}

/* tmp/HASH, chunks/XY/HASH.c3 or chunks/XY/HASH.p3: relative to dc->dfd. */
static void key_path(struct key k, enum kind kind, char buf[64])
{
	char hex[33];

	key_hex(k, hex);
	if (kind == K_TMP)
		snprintf(buf, 64, "tmp/%s", hex);
	else
		snprintf(buf, 64, "chunks/%.2s/%s%s", hex, hex, kind_suffix[kind]);
}

/* ------------------------------------------------------------ index (lock held) */

static size_t key_hash(struct key k)
{
	return (size_t)(k.lo ^ (k.hi >> 7));
}

static size_t bucket(const struct objfs_diskcache *dc, struct key k)
{
	return key_hash(k) & (dc->nbuckets - 1);
}

static struct dent *find(struct objfs_diskcache *dc, struct key k)
{
	for (struct dent *e = dc->hash[bucket(dc, k)]; e; e = e->hnext)
		if (key_eq(e->key, k))
			return e;
	return NULL;
}

static enum kind dent_kind(const struct dent *e)
{
	return e && e->bm ? K_PART : K_WHOLE;
}


#define DENT_HASH(e) key_hash((e)->key)

/* Longer chains when out of memory: still correct. */
static void grow(struct objfs_diskcache *dc)
{
	(void)OBJFS_HASH_GROW(&dc->hash, &dc->nbuckets, struct dent, hnext, DENT_HASH);
}

/*
 * Adds an entry at the LRU head, taking @bm (a partial chunk's bitmap, or
 * NULL: whole) even on failure. NULL when out of memory.
 */
static struct dent *index_add(struct objfs_diskcache *dc, struct key k, uint64_t bytes,
			      uint64_t block_len, unsigned char *bm, int writing)
{
	struct dent *e = calloc(1, sizeof(*e));

	if (!e) {
		free(bm);
		return NULL;
	}
	if (dc->nents >= dc->nbuckets)
		grow(dc);
	e->key = k;
	e->bytes = bytes;
	e->block_len = block_len;
	e->bm = bm;
	e->writing = writing;
	e->gen = ++dc->gen;
	e->hnext = dc->hash[bucket(dc, k)];
	dc->hash[bucket(dc, k)] = e;
	TAILQ_INSERT_HEAD(&dc->lru, e, lru);
	dc->nents++;
	dc->bytes += bytes;
	return e;
}

static void dent_free(struct dent *e)
{
	free(e->bm);
	free(e);
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
	TAILQ_REMOVE(&dc->lru, e, lru);
	dc->nents--;
	dc->bytes -= e->bytes;
	dent_free(e);
}

/*
 * Evicts idle entries from the LRU tail until the total fits the cap;
 * their files go to @victims (at most @max) for the caller to unlink
 * outside the lock. Returns how many.
 */
static size_t evict(struct objfs_diskcache *dc, struct victim *victims, size_t max)
{
	size_t n = 0;
	struct dent *e = TAILQ_LAST(&dc->lru, dent_lru), *prev;

	for (; e && dc->bytes > dc->cap && n < max; e = prev) {
		prev = TAILQ_PREV(e, dent_lru, lru);
		if (e->writing || e->merging)
			continue;
		victims[n++] = (struct victim){ e->key, dent_kind(e) };
		index_del(dc, e);
		dc->st.evictions++;
	}
	return n;
}

static void unlink_chunk(struct objfs_diskcache *dc, struct key k, enum kind kind)
{
	char path[64];

	key_path(k, kind, path);
	if (unlinkat(dc->dfd, path, 0) && errno != ENOENT)
		objfs_debug("disk cache %s: cannot remove %s: %s", dc->dir, path, strerror(errno));
}

static void unlink_victims(struct objfs_diskcache *dc, const struct victim *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		unlink_chunk(dc, v[i].key, v[i].kind);
}

/*
 * Whether @e (looked up for an identity of @ilen bytes) holds [off,
 * off+len) readable -- with @whole, the whole block, of any length (checked
 * when read). Learns a scanned whole chunk's block length from its size.
 */
static int covers(struct dent *e, size_t ilen, size_t off, size_t len, int whole)
{
	if (!e || e->writing)
		return 0;
	if (!e->block_len)
		e->block_len = objfs_dcmeta_block_len(e->bytes, ilen);
	if (whole)
		return !e->bm;
	if (!e->block_len || !len || off >= e->block_len || len > e->block_len - off)
		return 0;
	return !e->bm || objfs_dcmeta_bits_all(e->bm, off / PAGE, (off + len + PAGE - 1) / PAGE);
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

/* Appends @r to the list @head/@tail. */
static void dreq_append(struct dreq **head, struct dreq **tail, struct dreq *r)
{
	r->next = NULL;
	if (*tail)
		(*tail)->next = r;
	else
		*head = r;
	*tail = r;
}

/* Takes the first request of the list @head/@tail, or NULL. */
static struct dreq *dreq_pop(struct dreq **head, struct dreq **tail)
{
	struct dreq *r = *head;

	if (r) {
		*head = r->next;
		if (!*head)
			*tail = NULL;
	}
	return r;
}

static void enqueue(struct objfs_diskcache *dc, struct dreq *r)
{
	pthread_mutex_lock(&dc->lock);
	dreq_append(&dc->q_head, &dc->q_tail, r);
	/* woken under the lock: once it is dropped the disk thread may finish
	 * @r, a flush return and the cache be freed (a review: the wake's
	 * write then went to a closed descriptor of a freed cache) */
	wake(dc);
	pthread_mutex_unlock(&dc->lock);
}

/*
 * A request for the chunk @key (@ident) of a @block_len-byte block, with
 * its metadata buffer (aligned for O_DIRECT); the rest zeroed. NULL: no
 * memory, or a block or identity out of the format's bounds.
 */
static struct dreq *dreq_new(enum op op, struct key key, const char *ident, size_t ident_len,
			     uint64_t block_len)
{
	size_t meta_len = objfs_dcmeta_size(block_len, ident_len);
	struct dreq *r = meta_len ? calloc(1, sizeof(*r) + ident_len) : NULL;

	if (r && posix_memalign((void **)&r->meta, DIRECT_ALIGN, meta_len)) {
		free(r);
		return NULL;
	}
	if (!r)
		return NULL;
	r->op = op;
	r->key = key;
	r->fd = -1;
	r->block_len = block_len;
	r->meta_len = meta_len;
	r->ident_len = ident_len;
	memcpy(r->ident, ident, ident_len);
	return r;
}

static void dreq_free(struct dreq *r)
{
	if (!r)
		return;
	if (r->segs != r->seg_in)
		free(r->segs);
	free(r->bm_before);
	free(r->bounce);
	free(r->meta);
	free(r);
}

/*
 * A write of @len held bytes that had room is over. The buffer is
 * released before this: objfs_diskcache_flush() returning means no buffer
 * is held any more, so its owner may free them all.
 */
static void unreserve(struct objfs_diskcache *dc, size_t len, enum wend how, uint64_t bytes)
{
	pthread_mutex_lock(&dc->lock);
	dc->wq_bytes -= len;
	if (how == W_DONE) {
		dc->st.writes++;
		dc->st.write_bytes += bytes;
	} else if (how == W_DROPPED) {
		dc->st.writes_dropped++;
	}
	if (--dc->wq_count == 0)
		pthread_cond_broadcast(&dc->cond);
	pthread_mutex_unlock(&dc->lock);
}

/* ------------------------------------------------------------ busy chunks (disk thread) */

static struct busy *busy_find(struct objfs_diskcache *dc, struct key k)
{
	for (struct busy *b = dc->busy; b; b = b->next)
		if (key_eq(b->key, k))
			return b;
	return NULL;
}

/*
 * Lets @r run on its chunk: 1 (it counts there now), 0 (it waits behind the
 * requests running there, or before it; busy_leave() readies it), -ENOMEM.
 * Reads share a chunk; a write has it alone.
 */
static int busy_enter(struct objfs_diskcache *dc, struct dreq *r)
{
	struct busy *b = busy_find(dc, r->key);

	if (b && (b->wait_head || b->writer || (r->op == OP_WRITE && b->readers))) {
		dreq_append(&b->wait_head, &b->wait_tail, r);
		return 0;
	}
	if (!b) {
		b = calloc(1, sizeof(*b));
		if (!b)
			return -ENOMEM;
		b->key = r->key;
		b->next = dc->busy;
		dc->busy = b;
	}
	if (r->op == OP_WRITE)
		b->writer = 1;
	else
		b->readers++;
	r->held = 1;
	return 1;
}

/* @r is over on its chunk: the waiters that may run now go to the ready list. */
static void busy_leave(struct objfs_diskcache *dc, struct dreq *r)
{
	struct busy *b, **pp;

	if (!r->held)
		return;
	r->held = 0;
	b = busy_find(dc, r->key);
	if (r->op == OP_WRITE)
		b->writer = 0;
	else
		b->readers--;
	while (b->wait_head && !b->writer && !(b->wait_head->op == OP_WRITE && b->readers)) {
		struct dreq *w = dreq_pop(&b->wait_head, &b->wait_tail);

		if (w->op == OP_WRITE)
			b->writer = 1;
		else
			b->readers++;
		w->held = 1;
		dreq_append(&dc->rd_head, &dc->rd_tail, w);
	}
	if (b->writer || b->readers)
		return;
	for (pp = &dc->busy; *pp != b; pp = &(*pp)->next)
		;
	*pp = b->next;
	free(b);
}

/* ------------------------------------------------------------ disk thread: I/O */

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
 * Prepares the (rest of the) transfer of @r: one readv/writev of the
 * segments that follow each other in the file from the one in progress;
 * the disk thread submits all prepared SQEs at once per loop turn.
 */
static void submit_io(struct objfs_diskcache *dc, struct dreq *r)
{
	struct io_uring_sqe *sqe = get_sqe(dc);
	uint64_t start = r->segs[r->si].foff + r->spos, at = start;
	size_t pos = r->spos;
	unsigned n = 0;

	for (unsigned i = r->si; i < r->nseg && n < IOV_BATCH && r->segs[i].foff + pos == at;
	     i++, pos = 0) {
		r->cur[n].iov_base = r->segs[i].buf + pos;
		r->cur[n].iov_len = r->segs[i].len - pos;
		at += r->cur[n++].iov_len;
	}
	if (r->op == OP_READ)
		io_uring_prep_readv(sqe, r->fd, r->cur, n, start);
	else
		io_uring_prep_writev(sqe, r->fd, r->cur, n, start);
	io_uring_sqe_set_data(sqe, r);
}

/* Starts the transfer of @r's segments, in order, on its open fd. */
static void io_begin(struct objfs_diskcache *dc, struct dreq *r)
{
	r->si = 0;
	r->spos = 0;
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
	for (size_t left = res > 0 ? (size_t)res : 0; left && r->si < r->nseg;) {
		size_t room = r->segs[r->si].len - r->spos;

		if (left < room) {
			r->spos += left;
			break;
		}
		left -= room;
		r->si++;
		r->spos = 0;
	}
	if (res > 0 && r->si < r->nseg) {
		submit_io(dc, r);
		return 1;
	}
	dc->nio--;
	return res < 0 ? res : res == 0 ? -ENODATA : 0;
}

/* ------------------------------------------------------------ disk thread: reads */

/* Drops the index entry a read looked up (if still that one) and its file. */
static void drop_entry(struct objfs_diskcache *dc, struct key k, uint64_t gen)
{
	struct dent *e;
	enum kind kind = K_WHOLE;
	int gone = 0;

	pthread_mutex_lock(&dc->lock);
	e = find(dc, k);
	if (e && e->gen == gen && !e->writing && !e->merging) {
		kind = dent_kind(e);
		index_del(dc, e);
		gone = 1;
	}
	pthread_mutex_unlock(&dc->lock);
	if (gone)
		unlink_chunk(dc, k, kind);
}

static void read_finish(struct objfs_diskcache *dc, struct dreq *r, int err)
{
	objfs_fetch_done_fn done = r->done;
	void *arg = r->arg;

	if (r->fd >= 0)
		close(r->fd);
	busy_leave(dc, r);
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
	read_finish(dc, r, OBJFS_DISKCACHE_RETRY);
}

/* First page and end of the pages a read of @r covers. */
static size_t read_p0(const struct dreq *r)
{
	return r->off / PAGE;
}

static size_t read_p1(const struct dreq *r)
{
	return (r->off + r->len + PAGE - 1) / PAGE;
}

static void read_start(struct objfs_diskcache *dc, struct dreq *r)
{
	char path[64], *buf = r->bounce ? r->bounce : r->data;
	uint64_t pstart = (uint64_t)read_p0(r) * PAGE;
	uint64_t pend = r->whole ? r->len : (uint64_t)read_p1(r) * PAGE;
	enum kind kind;

	if (pend > r->block_len && !r->whole)
		pend = r->block_len;
	pthread_mutex_lock(&dc->lock);
	kind = dent_kind(find(dc, r->key));
	pthread_mutex_unlock(&dc->lock);
	key_path(r->key, kind, path);
	/* O_DIRECT for whole blocks where the buffer allows it (full blocks:
	 * 2 MiB aligned by the block cache): see the file header */
	r->direct = !__atomic_load_n(&dc->no_direct, __ATOMIC_RELAXED) && pstart == 0 &&
		    pend == r->block_len && (uintptr_t)buf % DIRECT_ALIGN == 0 &&
		    pend % DIRECT_ALIGN == 0;
	r->fd = openat(dc->dfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW |
		       (r->direct ? O_DIRECT : 0));
	if (r->fd < 0 && r->direct && errno == EINVAL) {
		__atomic_store_n(&dc->no_direct, 1, __ATOMIC_RELAXED);
		r->direct = 0;
		r->fd = openat(dc->dfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	}
	if (r->fd < 0) {
		read_fail(dc, r, "open", errno);
		return;
	}
	r->segs = r->seg_in;
	r->segs[0] = (struct seg){ 0, r->meta, r->meta_len };
	r->segs[1] = (struct seg){ r->meta_len + pstart, buf, (size_t)(pend - pstart) };
	r->nseg = 2;
	io_begin(dc, r);
}

static void read_done(struct objfs_diskcache *dc, struct dreq *r, int res)
{
	struct objfs_dcmeta m;
	const char *why;
	size_t p0 = read_p0(r), p1 = read_p1(r);
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
	if (objfs_dcmeta_parse(&dc->key->mac, r->meta, r->meta_len, r->ident, r->ident_len,
			       r->whole ? r->len : 0, &m, &why)) {
		read_fail(dc, r, why, 0);
		return;
	}
	/* a range is read to the block length the index knows (from the file
	 * size for a whole chunk found by the scan: a torn file says less than
	 * its header), and the check reads whole pages of the header's: they
	 * must agree, or it reads past the destination */
	if (m.meta_len != r->meta_len || r->off + r->len > m.block_len ||
	    (!r->whole && m.block_len != r->block_len)) {
		read_fail(dc, r, "length mismatch", 0);
		return;
	}
	if (objfs_dcmeta_check(&dc->key->mac, &m, p0, p1, r->bounce ? r->bounce : r->data,
			       &why)) {
		read_fail(dc, r, why, 0);
		return;
	}
	if (r->bounce)
		memcpy(r->data, r->bounce + (r->off - p0 * PAGE), r->len);
	/* the warm-start scan orders by mtime: a hit makes the chunk the
	 * newest, so LRU order survives a remount (best effort) */
	(void)futimens(r->fd, (const struct timespec[2]){ { 0, UTIME_OMIT }, { 0, UTIME_NOW } });
	pthread_mutex_lock(&dc->lock);
	dc->st.hits++;
	pthread_mutex_unlock(&dc->lock);
	read_finish(dc, r, 0);
}

/* ------------------------------------------------------------ disk thread: writes */

/* Bytes of pages [p0, p1) of a @block_len-byte block. */
static uint64_t pages_bytes(uint64_t block_len, size_t p0, size_t p1)
{
	uint64_t end = (uint64_t)p1 * PAGE;

	return (end < block_len ? end : block_len) - (uint64_t)p0 * PAGE;
}

static void write_end(struct objfs_diskcache *dc, struct dreq *r, enum wend how)
{
	size_t len = r->len;
	uint64_t bytes = r->added;

	if (r->fd >= 0)
		close(r->fd);
	if (r->owned)
		free(r->data);
	else
		dc->release(r->arg); /* outside dc->lock: the owner takes its own lock */
	busy_leave(dc, r);
	dreq_free(r);
	unreserve(dc, len, how, bytes);
}

/*
 * Ends a write that did not make it: the entry goes, and its file -- the
 * temporary one, or the chunk a merge was adding to (its metadata may be
 * torn).
 */
static void write_fail(struct objfs_diskcache *dc, struct dreq *r, const char *what, int err)
{
	struct dent *e;

	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	pthread_mutex_lock(&dc->lock);
	e = find(dc, r->key);
	if (e && e->gen == r->gen)
		index_del(dc, e);
	pthread_mutex_unlock(&dc->lock);
	unlink_chunk(dc, r->key, r->merge ? K_PART : K_TMP);
	if (err && disk_failure(err))
		degrade(dc, what, err);
	else if (err)
		objfs_info("disk cache %s: %s: %s (chunk not cached)", dc->dir, what, strerror(err));
	else
		objfs_warn("disk cache %s: %s (chunk dropped)", dc->dir, what);
	write_end(dc, r, W_DROPPED);
}

/*
 * Index side of a write, under the lock: a new entry (writing, with the
 * pages it will have), or pages to add to a partial one (merging, bytes
 * reserved, the new pages as @r's segments). W_DONE: go on; W_NOOP: the
 * pages are there already; W_DROPPED: off, or no memory. Evicts for room.
 */
static enum wend write_claim(struct objfs_diskcache *dc, struct dreq *r, struct victim *victims,
			     size_t *nv)
{
	size_t p0 = r->off / PAGE, p1 = (r->off + r->len + PAGE - 1) / PAGE;
	size_t np = objfs_dcmeta_npages(r->block_len), bmlen = (np + 7) / 8, nvalid = 0, nrun = 0;
	struct dent *e = find(dc, r->key);
	unsigned char *bm = NULL;

	if (dc->degraded)
		return W_DROPPED;
	if (e && (e->writing || !e->bm))
		return W_NOOP; /* whole already (writing: cannot be, the chunk is ours) */
	if (e && e->block_len != r->block_len) {
		objfs_debug("disk cache: a block of %llu bytes put for a chunk of %llu: ignored",
			    (unsigned long long)r->block_len, (unsigned long long)e->block_len);
		return W_DROPPED;
	}
	if (!e) {
		r->complete = p0 == 0 && p1 == np;
		if (!r->complete) {
			bm = calloc(1, bmlen);
			if (!bm)
				return W_DROPPED;
			for (size_t p = p0; p < p1; p++)
				objfs_dcmeta_bit_set(bm, p);
		}
		r->added = pages_bytes(r->block_len, p0, p1);
		e = index_add(dc, r->key, r->meta_len + r->added, r->block_len, bm, 1);
		if (!e)
			return W_DROPPED;
		r->gen = e->gen;
		r->segs = r->seg_in;
		r->segs[0] = (struct seg){ 0, r->meta, r->meta_len };
		r->segs[1] = (struct seg){ r->meta_len + r->off, r->data, r->len };
		r->nseg = 2;
		*nv = evict(dc, victims, *nv);
		return W_DONE;
	}
	/* a merge: the runs of pages it adds, then the metadata */
	for (size_t p = 0; p < np; p++)
		nvalid += objfs_dcmeta_bit(e->bm, p);
	for (size_t p = p0; p < p1; p++)
		nrun += !objfs_dcmeta_bit(e->bm, p) && (p == p0 || objfs_dcmeta_bit(e->bm, p - 1));
	if (!nrun)
		return W_NOOP;
	r->segs = calloc(nrun + 1, sizeof(*r->segs));
	r->bm_before = malloc(bmlen);
	if (!r->segs || !r->bm_before)
		return W_DROPPED;
	memcpy(r->bm_before, e->bm, bmlen);
	for (size_t p = p0; p < p1; p++) {
		size_t q = p;

		if (objfs_dcmeta_bit(e->bm, p))
			continue;
		while (q + 1 < p1 && !objfs_dcmeta_bit(e->bm, q + 1))
			q++;
		r->segs[r->nseg++] = (struct seg){ r->meta_len + (uint64_t)p * PAGE,
						   r->data + (p * PAGE - r->off),
						   (size_t)pages_bytes(r->block_len, p, q + 1) };
		r->added += r->segs[r->nseg - 1].len;
		nvalid += q + 1 - p;
		p = q;
	}
	r->segs[r->nseg++] = (struct seg){ 0, r->meta, r->meta_len }; /* last: see the header */
	r->merge = 1;
	r->complete = nvalid == np;
	r->gen = e->gen;
	e->merging = 1;
	e->bytes += r->added;
	dc->bytes += r->added;
	*nv = evict(dc, victims, *nv);
	return W_DONE;
}

/*
 * Reads and checks the metadata of the partial chunk a merge adds to (it
 * must be what the index knew), then marks the new pages valid in it.
 * NULL, or why not.
 */
static const char *merge_meta(struct objfs_diskcache *dc, struct dreq *r)
{
	struct objfs_dcmeta m;
	const char *why;
	ssize_t n = pread(r->fd, r->meta, r->meta_len, 0);

	if (n != (ssize_t)r->meta_len)
		return n < 0 ? "reading the metadata of a partial chunk" : "partial chunk truncated";
	if (objfs_dcmeta_parse(&dc->key->mac, r->meta, r->meta_len, r->ident, r->ident_len,
			       r->block_len, &m, &why))
		return why;
	if (memcmp(m.bitmap, r->bm_before, (m.npages + 7) / 8))
		return "partial chunk's pages differ from the index's";
	for (unsigned i = 0; i + 1 < r->nseg; i++)
		for (size_t p = (r->segs[i].foff - r->meta_len) / PAGE, k = 0; k < r->segs[i].len;
		     p++, k += PAGE)
			objfs_dcmeta_add(&dc->key->mac, r->meta, &m, p, r->segs[i].buf + k);
	objfs_dcmeta_seal(&dc->key->mac, r->meta);
	return NULL;
}

static void write_start(struct objfs_diskcache *dc, struct dreq *r)
{
	struct victim victims[64];
	size_t nv = sizeof(victims) / sizeof(victims[0]);
	struct objfs_dcmeta m;
	char path[64];
	const char *why;
	enum wend how;

	pthread_mutex_lock(&dc->lock);
	how = write_claim(dc, r, victims, &nv);
	pthread_mutex_unlock(&dc->lock);
	if (how != W_DONE) {
		r->added = 0;
		write_end(dc, r, how);
		return;
	}
	unlink_victims(dc, victims, nv);
	key_path(r->key, r->merge ? K_PART : K_TMP, path);
	if (!r->merge) {
		/* MACed here, not on the engine thread that fetched the block */
		objfs_dcmeta_init(r->meta, r->block_len, r->ident, r->ident_len, &m);
		for (size_t p = r->off / PAGE, k = 0; k < r->len; p++, k += PAGE)
			objfs_dcmeta_add(&dc->key->mac, r->meta, &m, p, r->data + k);
		objfs_dcmeta_seal(&dc->key->mac, r->meta);
		/* a new file, never one found there: a leftover of a failed
		 * write of this chunk is removed first */
		r->fd = openat(dc->dfd, path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
			       0600);
		if (r->fd < 0 && errno == EEXIST && !unlinkat(dc->dfd, path, 0))
			r->fd = openat(dc->dfd, path,
				       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (r->fd < 0) {
			write_fail(dc, r, "creating a chunk file", errno);
			return;
		}
		io_begin(dc, r);
		return;
	}
	r->fd = openat(dc->dfd, path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (r->fd < 0) {
		write_fail(dc, r, "opening a partial chunk", errno);
		return;
	}
	why = merge_meta(dc, r);
	if (why) {
		write_fail(dc, r, why, 0);
		return;
	}
	io_begin(dc, r);
}

static void write_done(struct objfs_diskcache *dc, struct dreq *r, int res)
{
	char from[64], to[64];
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
	key_path(r->key, r->merge ? K_PART : K_TMP, from);
	key_path(r->key, r->complete ? K_WHOLE : K_PART, to);
	if ((!r->merge || r->complete) && renameat(dc->dfd, from, dc->dfd, to)) {
		write_fail(dc, r, "renaming a chunk file into place", errno);
		return;
	}
	pthread_mutex_lock(&dc->lock);
	e = find(dc, r->key);
	if (e && e->gen == r->gen) {
		if (r->complete) {
			free(e->bm);
			e->bm = NULL;
		} else if (r->merge) {
			for (size_t p = r->off / PAGE; p * PAGE < r->off + r->len; p++)
				objfs_dcmeta_bit_set(e->bm, p);
		}
		e->writing = e->merging = 0;
	}
	pthread_mutex_unlock(&dc->lock);
	write_end(dc, r, W_DONE);
}

static void arm_eventfd(struct objfs_diskcache *dc)
{
	struct io_uring_sqe *sqe = get_sqe(dc);

	io_uring_prep_read(sqe, dc->ev_fd, &dc->ev_buf, sizeof(dc->ev_buf), 0);
	io_uring_sqe_set_data(sqe, NULL);
}

/* Starts ready and queued requests while the ring has room. */
static void start_queued(struct objfs_diskcache *dc)
{
	while (dc->nio < RING_OPS) {
		struct dreq *r = dreq_pop(&dc->rd_head, &dc->rd_tail);
		int rc = 1;

		if (!r) {
			pthread_mutex_lock(&dc->lock);
			r = dreq_pop(&dc->q_head, &dc->q_tail);
			pthread_mutex_unlock(&dc->lock);
			if (!r)
				return;
			rc = busy_enter(dc, r);
		}
		if (rc == 0)
			continue; /* waits for its chunk */
		if (r->op == OP_READ && rc < 0)
			read_finish(dc, r, OBJFS_DISKCACHE_RETRY);
		else if (rc < 0)
			write_end(dc, r, W_DROPPED);
		else if (r->op == OP_READ)
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
		queued = dc->q_head != NULL || dc->rd_head != NULL;
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

/* ------------------------------------------------------------ callers */

/*
 * A write of [off, off+len) of a @block_len-byte block becomes a queued
 * request, when fewer than wq_cap bytes are held for writing: @data is
 * held (through dc->hold(@arg), no copy) or, @owned, a copy freed when the
 * write ends. Runs before a fetch's done(), while the fetch still owns the
 * buffer. NULL when the write is dropped (counted): no holder, bound
 * reached, or out of memory; an owned @data is then the caller's still.
 */
static struct dreq *write_req(struct objfs_diskcache *dc, struct key key, const char *ident,
			      size_t ident_len, uint64_t block_len, size_t off, char *data,
			      size_t len, void *arg, int owned)
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
	r = dreq_new(OP_WRITE, key, ident, ident_len, block_len);
	if (!r) {
		unreserve(dc, len, W_DROPPED, 0);
		return NULL;
	}
	r->off = off;
	r->len = len;
	r->data = data;
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
		r = write_req(dc, m->key, m->ident, m->ident_len, m->len, 0, m->dst, m->len, m->arg,
			      0);
	m->done(m->arg, err);
	if (r)
		enqueue(dc, r);
	free(m);
}

/*
 * Looks [off, off+len) of block @idx of @id up (@whole: the whole block,
 * @len long) and, when the index holds it, queues its read into @dst.
 * 0: queued (done() follows); -ENOENT: not cached (or not cacheable);
 * -ENOMEM. *@ident/@ilen receive the chunk identity either way.
 */
static int read_queue(struct objfs_diskcache *dc, const char *id, uint64_t idx, size_t off,
		      size_t len, int whole, char *dst, objfs_fetch_done_fn done, void *arg,
		      char *ident, size_t *ilen)
{
	uint64_t gen, block_len, pend;
	struct key k;
	struct dent *e;
	struct dreq *r;

	if (is_degraded(dc) || ident_make(dc, id, idx, ident, ilen))
		return -ENOENT;
	k = key_of(ident, *ilen);
	pthread_mutex_lock(&dc->lock);
	e = find(dc, k);
	if (!covers(e, *ilen, off, len, whole)) {
		dc->st.misses++;
		pthread_mutex_unlock(&dc->lock);
		return -ENOENT;
	}
	TAILQ_REMOVE(&dc->lru, e, lru);
	TAILQ_INSERT_HEAD(&dc->lru, e, lru);
	gen = e->gen;
	block_len = e->block_len ? e->block_len : len; /* whole: checked when read */
	pthread_mutex_unlock(&dc->lock);
	r = dreq_new(OP_READ, k, ident, *ilen, block_len);
	if (!r)
		return -ENOMEM;
	pend = pages_bytes(block_len, 0, (off + len + PAGE - 1) / PAGE);
	if (!whole && (off % PAGE || off + len != pend) &&
	    posix_memalign((void **)&r->bounce, DIRECT_ALIGN, pend - off / PAGE * PAGE)) {
		r->bounce = NULL;
		dreq_free(r);
		return -ENOMEM;
	}
	r->gen = gen;
	r->off = off;
	r->len = len;
	r->whole = whole;
	r->data = dst;
	r->done = done;
	r->arg = arg;
	enqueue(dc, r);
	return 0;
}

int objfs_diskcache_read(struct objfs_diskcache *dc, const char *id, uint64_t idx, size_t len,
			 char *dst, objfs_fetch_done_fn done, void *arg)
{
	char ident[IDENT_BUF];
	size_t ilen;

	return read_queue(dc, id, idx, 0, len, 1, dst, done, arg, ident, &ilen);
}

int objfs_diskcache_read_range(struct objfs_diskcache *dc, const char *id, uint64_t idx,
			       size_t off, size_t len, char *dst, objfs_fetch_done_fn done,
			       void *arg)
{
	char ident[IDENT_BUF];
	size_t ilen;

	return read_queue(dc, id, idx, off, len, 0, dst, done, arg, ident, &ilen);
}

void objfs_diskcache_put_range(struct objfs_diskcache *dc, const char *id, uint64_t idx,
			       size_t block_len, size_t off, const char *data, size_t len)
{
	char ident[IDENT_BUF];
	size_t ilen;
	struct key k;
	struct dent *e;
	struct dreq *r;
	char *copy;
	int have;

	if (!len || !block_len || block_len > dc->bsize || off % PAGE || off >= block_len ||
	    len > block_len - off || (len % PAGE && off + len != block_len))
		return;
	if (is_degraded(dc) || ident_make(dc, id, idx, ident, &ilen))
		return;
	k = key_of(ident, ilen);
	/* nothing to do when the pages are there or on their way (a merge in
	 * flight is not known here: the disk thread finds it has nothing to add) */
	pthread_mutex_lock(&dc->lock);
	e = find(dc, k);
	have = e && (!e->bm || objfs_dcmeta_bits_all(e->bm, off / PAGE,
						      (off + len + PAGE - 1) / PAGE));
	pthread_mutex_unlock(&dc->lock);
	if (have || !(copy = malloc(len)))
		return;
	memcpy(copy, data, len);
	r = write_req(dc, k, ident, ilen, block_len, off, copy, len, NULL, 1);
	if (r)
		enqueue(dc, r);
	else
		free(copy);
}

void objfs_diskcache_put(struct objfs_diskcache *dc, const char *id, uint64_t idx,
			 const char *data, size_t len)
{
	objfs_diskcache_put_range(dc, id, idx, len, 0, data, len);
}

void objfs_diskcache_fetch(struct objfs_diskcache *dc, const char *id, uint64_t idx,
			   objfs_fetch_fn inner, void *inner_ctx, int64_t off, size_t len,
			   char *dst, objfs_fetch_done_fn done, void *arg)
{
	char ident[IDENT_BUF];
	size_t ilen = 0;
	struct miss *m;
	int rc = read_queue(dc, id, idx, 0, len, 1, dst, done, arg, ident, &ilen);

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

/* Under the lock: whether the index holds [off, off+len) of block @idx of @id readable. */
static int has_locked(struct objfs_diskcache *dc, const char *id, uint64_t idx, size_t off,
		      size_t len, int whole)
{
	char ident[IDENT_BUF];
	size_t ilen;
	int has;

	if (ident_make(dc, id, idx, ident, &ilen))
		return 0;
	pthread_mutex_lock(&dc->lock);
	has = covers(find(dc, key_of(ident, ilen)), ilen, off, len, whole);
	pthread_mutex_unlock(&dc->lock);
	return has;
}

int objfs_diskcache_has(struct objfs_diskcache *dc, const char *id, uint64_t idx)
{
	return has_locked(dc, id, idx, 0, 0, 1);
}

int objfs_diskcache_has_range(struct objfs_diskcache *dc, const char *id, uint64_t idx,
			      size_t off, size_t len)
{
	return has_locked(dc, id, idx, off, len, 0);
}

int objfs_diskcache_chunk_path(struct objfs_diskcache *dc, const char *id, uint64_t idx,
			       char *buf, size_t cap)
{
	char ident[IDENT_BUF], rel[64];
	size_t ilen;
	struct key k;
	enum kind kind;
	int n;

	if (ident_make(dc, id, idx, ident, &ilen))
		return -ENAMETOOLONG;
	k = key_of(ident, ilen);
	pthread_mutex_lock(&dc->lock);
	kind = dent_kind(find(dc, k));
	pthread_mutex_unlock(&dc->lock);
	key_path(k, kind, rel);
	n = snprintf(buf, cap, "%s/%s", dc->dir, rel);
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
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

/* ------------------------------------------------------------ open: the directory */

/*
 * Whether the directory @fd, shown as @shown, may be the cache's own (DIR
 * or one below it): a directory owned by @euid, not writable by group or
 * others. 0, or -EPERM / -ENOTDIR with the reason in @err.
 */
static int own_dir_ok(int fd, const char *shown, uid_t euid, char *err, size_t errlen)
{
	struct stat st;

	if (fstat(fd, &st)) {
		int e = errno;

		snprintf(err, errlen, "cache_dir %s: cannot stat: %s", shown, strerror(e));
		return -e;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "cache_dir %s: not a directory", shown);
		return -ENOTDIR;
	}
	if (st.st_uid != euid) {
		snprintf(err, errlen, "cache_dir %s: owned by uid %u, not by the mounting user %u",
			 shown, (unsigned)st.st_uid, (unsigned)euid);
		return -EPERM;
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(err, errlen, "cache_dir %s: writable by group or others (mode %04o); "
			 "it must be writable by the mounting user only", shown,
			 (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

/*
 * Opens the cache directory @path, reached by objfs_safepath_parent() (see
 * the file header) and checked by own_dir_ok(); made 0700 when missing.
 * Returns the directory's fd (O_RDONLY), or -errno with the reason,
 * naming the path and what is wrong, in @err.
 */
static int dir_open(const char *path, uid_t euid, char *err, size_t errlen)
{
	char name[NAME_MAX + 1];
	int at, fd, ret;

	at = objfs_safepath_parent("cache_dir", path, euid, name, err, errlen);
	if (at < 0)
		return at;
	if (mkdirat(at, name, 0700) && errno != EEXIST) {
		ret = -errno;
		snprintf(err, errlen, "cache_dir %s: cannot create it: %s", path, strerror(-ret));
		close(at);
		return ret;
	}
	fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	ret = fd < 0 ? -errno : 0;
	close(at);
	if (ret) {
		snprintf(err, errlen, "cache_dir %s: cannot open it: %s", path,
			 ret == -ELOOP ? "a symbolic link appeared" : strerror(-ret));
		return ret;
	}
	ret = own_dir_ok(fd, path, euid, err, errlen);
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
}

/*
 * Opens (creating, 0700) the directory @name below @at, one of the cache's
 * own: own_dir_ok() or refused. A symlink or a file in its place is
 * removed and the directory made (nothing of ours is ever one). Returns
 * its fd, or -errno with the reason in @err.
 */
static int subdir_open(struct objfs_diskcache *dc, int at, const char *name, uid_t euid,
		       char *err, size_t errlen)
{
	char shown[PATH_MAX];
	int fd, ret;

	snprintf(shown, sizeof(shown), "%s/%s", dc->dir, name);
	if (mkdirat(at, name, 0700) && errno != EEXIST)
		goto fail;
	fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && (errno == ELOOP || errno == ENOTDIR)) {
		objfs_warn("disk cache: %s is not a directory (a symlink?): replaced", shown);
		if (unlinkat(at, name, 0) || mkdirat(at, name, 0700))
			goto fail;
		fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	}
	if (fd < 0)
		goto fail;
	ret = own_dir_ok(fd, shown, euid, err, errlen);
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
fail:
	ret = -errno;
	snprintf(err, errlen, "cache_dir: cannot create %s: %s", shown, strerror(-ret));
	return ret;
}

/* Creates and checks DIR/chunks, DIR/chunks/XY and DIR/tmp; empties DIR/tmp. */
static int make_dirs(struct objfs_diskcache *dc, uid_t euid, char *err, size_t errlen)
{
	int chunks, fd;
	DIR *d;
	struct dirent *de;

	chunks = subdir_open(dc, dc->dfd, "chunks", euid, err, errlen);
	if (chunks < 0)
		return chunks;
	for (int i = 0; i < FANOUT; i++) {
		char xy[16];

		snprintf(xy, sizeof(xy), "%02x", i);
		fd = subdir_open(dc, chunks, xy, euid, err, errlen);
		if (fd < 0) {
			close(chunks);
			return fd;
		}
		close(fd);
	}
	close(chunks);
	fd = subdir_open(dc, dc->dfd, "tmp", euid, err, errlen);
	if (fd < 0)
		return fd;
	d = fdopendir(fd);
	if (!d) {
		int e = errno;

		close(fd);
		snprintf(err, errlen, "cache_dir: cannot read %s/tmp: %s", dc->dir, strerror(e));
		return -e;
	}
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			(void)unlinkat(dirfd(d), de->d_name, 0);
	closedir(d);
	return 0;
}

/* ------------------------------------------------------------ open / scan */

/* A chunk file found by the scan. */
struct found {
	struct key key;
	uint64_t bytes, block_len;    /* block_len: partial chunks only (0: whole) */
	unsigned char *bm;            /* partial: its valid pages (owned) */
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

/*
 * Reads the metadata of the partial chunk @name (in directory @dfd, file
 * name of @key) into @f: its valid pages, real bytes, block length. 0; 1
 * when it turned out whole (renamed so, @f a whole chunk now); -1 when it
 * is not a usable chunk (the caller removes it); -ENOMEM.
 */
static int scan_partial(struct objfs_diskcache *dc, int dfd, const char *name, struct key key,
			struct found *f)
{
	char *buf = malloc(SCAN_META), *nb;
	struct objfs_dcmeta m;
	const char *why;
	size_t want;
	ssize_t n = -1;
	int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), ret = -1;

	if (!buf) {
		ret = -ENOMEM;
		goto out;
	}
	if (fd < 0 || (n = pread(fd, buf, SCAN_META, 0)) < (ssize_t)OBJFS_DCMETA_FIXED)
		goto out;
	want = objfs_dcmeta_claimed_len(buf, (size_t)n);
	if (want > (size_t)n) { /* a big block's metadata: read the rest */
		nb = realloc(buf, want);
		if (!nb) {
			ret = -ENOMEM;
			goto out;
		}
		buf = nb;
		n = pread(fd, buf, want, 0);
	}
	if (n < 0 || objfs_dcmeta_parse(&dc->key->mac, buf, (size_t)n, NULL, 0, 0, &m, &why)) {
		objfs_debug("disk cache: partial chunk %s removed: %s", name,
			    n < 0 ? strerror(errno) : why);
		goto out;
	}
	if (!key_eq(key_of(m.ident, m.ident_len), key) || !m.nvalid)
		goto out; /* not the chunk its name says, or no pages */
	f->block_len = m.block_len;
	f->bytes = m.meta_len;
	for (size_t p = 0; p < m.npages; p++)
		if (objfs_dcmeta_bit(m.bitmap, p))
			f->bytes += objfs_dcmeta_page_len(m.block_len, p);
	if (m.nvalid == m.npages) {
		/* a crash between the last merge and its rename: whole */
		char hex[33], whole[64];

		key_hex(key, hex);
		snprintf(whole, sizeof(whole), "%s%s", hex, kind_suffix[K_WHOLE]);
		ret = renameat(dfd, name, dfd, whole) ? -1 : 1;
		goto out;
	}
	f->bm = malloc((m.npages + 7) / 8);
	if (!f->bm) {
		ret = -ENOMEM;
		goto out;
	}
	memcpy(f->bm, m.bitmap, (m.npages + 7) / 8);
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	return ret;
}

/*
 * Indexes the files of DIR/chunks/XY (@i) into @*f (@*n of @*capn): whole
 * chunks by name and size, partial ones by their metadata; removes chunks
 * of formats 1 and 2, unusable partial ones and, with @fresh (a new key:
 * none can verify), every chunk (counted in @*removed). 0 or -ENOMEM.
 */
static int scan_dir(struct objfs_diskcache *dc, int i, int fresh, struct found **f, size_t *n,
		    size_t *capn, size_t *removed)
{
	char path[16], xy[3];
	struct dirent *de;
	DIR *d;
	int ret = 0, fd;

	snprintf(path, sizeof(path), "chunks/%02x", i);
	fd = openat(dc->dfd, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return 0;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return 0;
	}
	snprintf(xy, sizeof(xy), "%02x", i);
	while (!ret && (de = readdir(d))) {
		struct found *x;
		struct stat st;
		enum kind kind;
		struct key k;
		int rc = 0;

		if (key_parse(de->d_name, &k, &kind) || strncmp(de->d_name, xy, 2))
			continue; /* not one of ours: left alone */
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
			continue;
		if (*n == *capn) {
			size_t nc = *capn ? *capn * 2 : 1024;
			struct found *nf = realloc(*f, nc * sizeof(**f));

			if (!nf) {
				ret = -ENOMEM;
				break;
			}
			*f = nf;
			*capn = nc;
		}
		x = &(*f)[*n];
		*x = (struct found){ .key = k, .bytes = (uint64_t)st.st_size, .mtime = st.st_mtim };
		if (kind == K_PART && !fresh)
			rc = scan_partial(dc, dirfd(d), de->d_name, k, x);
		if (kind == K_OLD || fresh || rc < 0) {
			if (rc == -ENOMEM)
				ret = rc;
			else if (!unlinkat(dirfd(d), de->d_name, 0))
				++*removed; /* formats 1-2, another key's, an unusable partial */
			continue;
		}
		++*n;
	}
	closedir(d);
	return ret;
}

/* Adds what the scan found to the index, oldest first; a whole chunk wins over a partial one. */
static int scan_index(struct objfs_diskcache *dc, struct found *f, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct dent *e = find(dc, f[i].key);

		if (e) { /* both names of one chunk: only a foreign hand makes that */
			struct dent *part = f[i].bm ? NULL : e;

			unlink_chunk(dc, f[i].key, K_PART);
			if (!part) {
				free(f[i].bm);
				f[i].bm = NULL;
				continue;
			}
			index_del(dc, part);
		}
		e = index_add(dc, f[i].key, f[i].bytes, f[i].block_len, f[i].bm, 0);
		f[i].bm = NULL;
		if (!e)
			return -ENOMEM;
	}
	return 0;
}

/*
 * Indexes the chunk files in DIR/chunks, oldest first, then trims to the
 * cap; @fresh: the key is new, every chunk file goes.
 */
static int scan(struct objfs_diskcache *dc, int fresh, char *err, size_t errlen)
{
	struct found *f = NULL;
	size_t n = 0, capn = 0, removed = 0;
	int ret = 0;

	for (int i = 0; i < FANOUT && !ret; i++)
		ret = scan_dir(dc, i, fresh, &f, &n, &capn, &removed);
	if (!ret && n) /* qsort(NULL, 0) is undefined: UBSan flags an empty cache_dir */
		qsort(f, n, sizeof(*f), found_cmp);
	if (!ret)
		ret = scan_index(dc, f, n);
	for (size_t i = 0; i < n; i++)
		free(f[i].bm);
	free(f);
	if (ret) {
		snprintf(err, errlen, "cache_dir: out of memory indexing %s", dc->dir);
		return ret;
	}
	for (;;) {
		struct victim victims[64];
		size_t nv = evict(dc, victims, 64);

		if (!nv)
			break;
		unlink_victims(dc, victims, nv);
	}
	if (removed)
		objfs_info("disk cache %s: removed %zu chunk files %s", dc->dir, removed,
			   fresh ? "made under another key (a new key was made)" :
				   "of formats 1-2 or with bad metadata");
	objfs_info("disk cache %s: %zu chunk files, %llu bytes (cap %llu)", dc->dir, dc->nents,
		   (unsigned long long)dc->bytes, (unsigned long long)dc->cap);
	return 0;
}

/*
 * Takes DIR/lock: opened relative to DIR, never through a symlink, never
 * truncated before it is known to be a regular file of @euid with one
 * link and is locked; then holds the pid.
 */
static int take_lock(struct objfs_diskcache *dc, uid_t euid, char *err, size_t errlen)
{
	char pid[32];
	struct stat st;
	ssize_t n;
	int e;

	dc->lock_fd = openat(dc->dfd, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (dc->lock_fd < 0) {
		e = errno;
		snprintf(err, errlen, "cache_dir %s: cannot open the lock file %s/lock: %s", dc->dir,
			 dc->dir, e == ELOOP ? "it is a symbolic link" : strerror(e));
		return -e;
	}
	if (fstat(dc->lock_fd, &st)) {
		e = errno;
		snprintf(err, errlen, "cache_dir %s: cannot stat %s/lock: %s", dc->dir, dc->dir,
			 strerror(e));
		return -e;
	}
	if (!S_ISREG(st.st_mode) || st.st_uid != euid || st.st_nlink != 1) {
		snprintf(err, errlen, "cache_dir %s: the lock file %s/lock is not a regular file of "
			 "the mounting user %u with one link (uid %u, %lu links); remove it",
			 dc->dir, dc->dir, (unsigned)euid, (unsigned)st.st_uid,
			 (unsigned long)st.st_nlink);
		return -EPERM;
	}
	if (flock(dc->lock_fd, LOCK_EX | LOCK_NB)) {
		e = errno;
		if (e == EWOULDBLOCK) {
			n = pread(dc->lock_fd, pid, sizeof(pid) - 1, 0);
			pid[n > 0 ? n : 0] = '\0';
			pid[strcspn(pid, "\n")] = '\0';
			snprintf(err, errlen, "cache_dir '%s' is in use by another objfs mount%s%s%s "
				 "(lock %s/lock); give each mount its own cache_dir", dc->dir,
				 pid[0] ? " (pid " : "", pid, pid[0] ? ")" : "", dc->dir);
			return -EBUSY;
		}
		snprintf(err, errlen, "cache_dir: cannot lock %s/lock: %s", dc->dir, strerror(e));
		return -e;
	}
	n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
	if (ftruncate(dc->lock_fd, 0) == 0)
		(void)!pwrite(dc->lock_fd, pid, (size_t)n, 0);
	return 0;
}

/* Reads exactly @n bytes at @fd's offset 0 into @buf: 0, or -errno (-EIO: short). */
static int read_all(int fd, unsigned char *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = pread(fd, buf + got, n - got, (off_t)got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		got += (size_t)r;
	}
	return 0;
}

/*
 * Makes DIR/key: 32 bytes from getrandom(), written to DIR/tmp/key
 * (O_CREAT|O_EXCL|O_NOFOLLOW, 0600) and synced, then linked to DIR/key,
 * so that a crash never leaves a short key. Takes the lock's protection:
 * no other mount runs on DIR. 0 or -errno with @err.
 */
static int key_create(struct objfs_diskcache *dc, unsigned char *secret, char *err,
		      size_t errlen)
{
	const char *what = "creating";
	size_t got = 0;
	int fd, ret = 0;

	(void)unlinkat(dc->dfd, "tmp/key", 0);
	fd = openat(dc->dfd, "tmp/key", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		    0600);
	if (fd < 0)
		goto fail;
	what = "filling";
	while (got < OBJFS_DCKEY_LEN) {
		ssize_t r = getrandom(secret + got, OBJFS_DCKEY_LEN - got, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			goto fail;
		got += (size_t)r;
	}
	what = "writing";
	errno = 0;
	if (write(fd, secret, OBJFS_DCKEY_LEN) != (ssize_t)OBJFS_DCKEY_LEN) {
		if (errno == 0)
			errno = EIO;
		goto fail;
	}
	if (fsync(fd))
		goto fail;
	what = "linking";
	if (linkat(dc->dfd, "tmp/key", dc->dfd, "key", 0))
		goto fail;
	goto out;
fail:
	ret = -errno;
	snprintf(err, errlen, "cache_dir %s: %s the key file %s/key: %s", dc->dir, what, dc->dir,
		 strerror(-ret));
out:
	if (fd >= 0)
		close(fd);
	(void)unlinkat(dc->dfd, "tmp/key", 0);
	return ret;
}

/*
 * Loads DIR/key (making it when missing: *@fresh = 1) into dc->key, a
 * page of its own kept out of core dumps: a regular file of @euid, exactly
 * OBJFS_DCKEY_LEN bytes, no group or other permission bits, else refused
 * (-EPERM, the reason in @err).
 */
static int key_load(struct objfs_diskcache *dc, uid_t euid, int *fresh, char *err,
		    size_t errlen)
{
	struct keypage *kp;
	struct stat st;
	int fd, ret;

	kp = mmap(NULL, sizeof(*kp), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (kp == MAP_FAILED) {
		snprintf(err, errlen, "cache_dir: out of memory for the key");
		return -ENOMEM;
	}
	dc->key = kp;
	if (madvise(kp, sizeof(*kp), MADV_DONTDUMP))
		objfs_debug("disk cache: madvise(MADV_DONTDUMP) on the key: %s", strerror(errno));
	*fresh = 0;
	fd = openat(dc->dfd, "key", O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		ret = key_create(dc, kp->secret, err, errlen);
		if (ret)
			return ret;
		*fresh = 1;
		objfs_info("disk cache %s: made a new key (%s/key)", dc->dir, dc->dir);
		goto derive;
	}
	if (fd < 0) {
		ret = -errno;
		snprintf(err, errlen, "cache_dir %s: cannot open the key file %s/key: %s", dc->dir,
			 dc->dir, ret == -ELOOP ? "it is a symbolic link" : strerror(-ret));
		return ret;
	}
	ret = fstat(fd, &st) ? -errno : 0;
	if (!ret && (!S_ISREG(st.st_mode) || st.st_uid != euid || (st.st_mode & 077) ||
		     st.st_size != OBJFS_DCKEY_LEN)) {
		snprintf(err, errlen, "cache_dir %s: the key file %s/key must be a regular file of "
			 "the mounting user %u, mode 0600 or less, %u bytes (found uid %u, mode %04o, "
			 "%lld bytes); remove it to start the cache afresh", dc->dir, dc->dir,
			 (unsigned)euid, OBJFS_DCKEY_LEN, (unsigned)st.st_uid,
			 (unsigned)(st.st_mode & 07777), (long long)st.st_size);
		close(fd);
		return -EPERM;
	}
	if (!ret)
		ret = read_all(fd, kp->secret, OBJFS_DCKEY_LEN);
	close(fd);
	if (ret) {
		snprintf(err, errlen, "cache_dir %s: cannot read the key file %s/key: %s", dc->dir,
			 dc->dir, strerror(-ret));
		return ret;
	}
derive:
	objfs_dckey_init(&kp->mac, kp->secret);
	OPENSSL_cleanse(kp->secret, sizeof(kp->secret));
	return 0;
}

/* Wipes and unmaps the key page. */
static void key_free(struct objfs_diskcache *dc)
{
	if (!dc->key)
		return;
	OPENSSL_cleanse(dc->key, sizeof(*dc->key));
	munmap(dc->key, sizeof(*dc->key));
	dc->key = NULL;
}

int objfs_diskcache_open(const struct objfs_diskcache_cfg *cfg, struct objfs_diskcache **out,
			 char *err, size_t errlen)
{
	struct objfs_diskcache *dc;
	uid_t euid = geteuid();
	int ret, fresh;

	err[0] = '\0';
	if (!cfg->dir || !*cfg->dir || !cfg->block_size) {
		snprintf(err, errlen, "cache_dir: no directory given");
		return -EINVAL;
	}
	if (cfg->block_size > OBJFS_DCMETA_BLOCK_MAX) {
		snprintf(err, errlen, "cache_dir: chunk_size beyond %u bytes", OBJFS_DCMETA_BLOCK_MAX);
		return -EINVAL;
	}
	if (cfg->cap < 2 * (cfg->block_size + objfs_dcmeta_size(cfg->block_size, 1))) {
		snprintf(err, errlen, "cache_dir_size must hold at least two chunks (2 x (%zu + "
			 "%zu) bytes with chunk_size=%zu)", cfg->block_size,
			 objfs_dcmeta_size(cfg->block_size, 1), cfg->block_size);
		return -EINVAL;
	}
	dc = calloc(1, sizeof(*dc));
	if (!dc) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	TAILQ_INIT(&dc->lru);
	dc->lock_fd = dc->ev_fd = dc->dfd = -1;
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
	dc->dfd = dir_open(dc->dir, euid, err, errlen);
	if (dc->dfd < 0) {
		ret = dc->dfd;
		goto out_dc;
	}
	ret = take_lock(dc, euid, err, errlen);
	if (ret)
		goto out_dc;
	ret = make_dirs(dc, euid, err, errlen);
	if (ret)
		goto out_dc;
	ret = key_load(dc, euid, &fresh, err, errlen);
	if (ret)
		goto out_dc;
	ret = scan(dc, fresh, err, errlen);
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
	if (dc->dfd >= 0)
		close(dc->dfd);
	key_free(dc);
	for (struct dent *e = TAILQ_FIRST(&dc->lru), *next; e; e = next) {
		next = TAILQ_NEXT(e, lru);
		dent_free(e);
	}
	free(dc->hash);
	free(dc->dir);
	free(dc->source);
	pthread_mutex_destroy(&dc->lock);
	pthread_cond_destroy(&dc->cond);
	free(dc);
}
