/*
 * cache: see cache.h for the design, the cap rule and the locking rule.
 *
 * Block life cycle:
 *   LOADING --fetch ok--> READY --refs 0--> on LRU --evict--> freed
 *      \--fetch error--> FAILED (unhashed at once, so the next reader
 *                        fetches again; freed when its last reader lets go)
 * The fetch itself holds one reference while it runs, so a block can never
 * be freed under the engine thread writing into it.
 *
 * A block can also be RANGES: no block buffer, only page ranges of it,
 * each with its own buffer, sorted and not overlapping, each LOADING (a
 * fill or a range prefetch is fetching it: later fills join it as waiters)
 * or READY. A fill copies what the ranges hold and fetches only the gaps,
 * as new ranges (fill_block); a reader that wants the whole block gets a
 * LOADING block made of the ranges plus the gaps between them
 * (block_assemble), so no byte the cache holds is fetched again.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/queue.h>

#include "buf.h"
#include "cache.h"
#include "clock.h"
#include "diskcache.h"
#include "hash.h"
#include "log.h"

enum bstate { B_LOADING, B_READY, B_FAILED, B_RANGES };

/* A range a RANGES block keeps: its bytes never change once READY. */
struct brange {
	int64_t off; /* in the block */
	size_t len, alloc;
	char *data;
	int loading;                /* being fetched: fills join as waiters */
	struct blk_waiter *waiters; /* fills copying from it once it is READY */
};
#define RANGES_MAX 128 /* a block keeps at most this many ranges */

struct objfs_block {
	char *id;
	uint64_t idx;
	size_t hash;
	char *data;     /* NULL for RANGES */
	size_t len;
	size_t alloc;   /* bytes of data's buffer: its size class (buf_class); RANGES: of its ranges' */
	struct brange *ranges; /* RANGES: nranges kept ranges (c->lock) */
	unsigned nranges;
	enum bstate state;
	int err;
	unsigned refs;
	int hashed;
	int prefetched; /* fetched ahead of any reader */
	int touched;    /* a reader used it */
	int behind;     /* a sequential reader has passed it: evict first */
	int assembled;  /* LOADING from kept ranges and fetched gaps */
	struct objfs_block *from;   /* LOADING: the RANGES block it is made from */
	objfs_fetch_fn fetch;       /* LOADING: the store's fetch (counted, net_fetch) */
	void *fctx;
	struct blk_waiter *waiters; /* fills copying from it once LOADING ends */
	struct objfs_block *hnext;
	TAILQ_ENTRY(objfs_block) lru; /* on c->lru exactly when hashed with refs 0 */
	struct objfs_cache *cache;
};

#define WAITQ 64

/* A fill's part waiting for a block in flight (objfs_cache_fill never
 * blocks its caller): copied from the block by whoever ends its fetch. */
struct blk_waiter {
	struct blk_waiter *next;
	struct fill *f;
	int64_t off;  /* in the object */
	size_t len;
	char *dst;
};
/* An object open through readers, registered once however many (objfs_cache_open_obj). */
struct open_obj {
	struct open_obj *next;
	char *id;
	int64_t size;
	unsigned n; /* readers of it */
	/* which 4 KiB pages were fetched while it was open, a bitmap per
	 * block, made when first needed (refetched_bytes) */
	uint64_t **pages;
	size_t nblk;
};
#define OPEN_TRACK_MAX ((size_t)1 << 20) /* blocks: larger objects are not tracked */
#define OPEN_BUCKETS 1024

#define NCLASS 24 /* size classes: 0 the block size, i: 2^(i+11) bytes (4 KiB..16 GiB) */

struct objfs_cache {
	pthread_mutex_t lock;
	pthread_cond_t cond;       /* the last fetch in flight ended (inflight 0) */
	/*
	 * A block left LOADING: its waiters sleep on waitq[hash % WAITQ], not
	 * on one condition of the whole cache. With one, each finished block
	 * woke every reader waiting for any block: 64 readers spent 14x the
	 * CPU of 16 in the FUSE workers.
	 */
	pthread_cond_t waitq[WAITQ];
	size_t cap, bsize, bytes;
	struct objfs_block **hash;
	size_t nbuckets, nblocks;
	TAILQ_HEAD(lru_list, objfs_block) lru; /* head: most recently used */
	size_t lru_bytes;          /* what evicting the whole LRU would free */
	unsigned inflight;
	unsigned streams;          /* atomic: sequential streams sharing the prefetch room */
	struct objfs_cache_stats st;
	/* Freed block buffers kept for reuse, one list per size class (linked
	 * through their first word), counted with the blocks under the cap. */
	void *pool[NCLASS];
	size_t pool_bytes;
	struct objfs_diskcache *disk; /* optional tier below; set before use */
	struct open_obj *open[OPEN_BUCKETS]; /* objects open through readers */
};

#define HUGE_PAGE (2u << 20)

/*
 * Block memory. Page faults dominate a fresh buffer's first fill: ~40% of a
 * receive-bound read on the development VM, and with 100 KiB objects (the
 * ImageNet shape) every block was fresh memory: 29% of the daemon's CPU in
 * the kernel zeroing pages for recv(). So a freed buffer goes to a pool of
 * its size class (the block size, or a power of two from 4 KiB: a short
 * block's buffer is rounded up) and the next block of that class takes it,
 * warm. Pooled buffers count with the blocks under the cap (bytes +
 * pool_bytes <= cap, the pool gives way first), so the resident memory
 * stays within cache_size. Full-size buffers are 2 MiB aligned and advised
 * for transparent huge pages. All under c->lock.
 */
static size_t buf_class(const struct objfs_cache *c, size_t len, unsigned *idx)
{
	size_t size = 4096;
	unsigned i = 1;

	while (size < len && size < c->bsize) {
		size <<= 1;
		i++;
	}
	if (size >= c->bsize || i >= NCLASS) {
		*idx = 0;
		return c->bsize;
	}
	*idx = i;
	return size;
}

/* Frees pooled buffers, largest classes first, until @need more bytes fit. */
static void pool_trim(struct objfs_cache *c, size_t need)
{
	for (unsigned i = 0; i < NCLASS && c->bytes + c->pool_bytes + need > c->cap; i++) {
		unsigned k = i == 0 ? 0 : NCLASS - i; /* 0 (block size), then high to low */

		while (c->pool[k] && c->bytes + c->pool_bytes + need > c->cap) {
			void *p = c->pool[k];
			size_t size = k ? (size_t)1 << (k + 11) : c->bsize;

			c->pool[k] = *(void **)p;
			c->pool_bytes -= size;
			free(p);
		}
	}
}

/* A pooled buffer for @len bytes, or NULL if none of its class is;
 * @alloc gets the class's size either way (c->lock held). */
static void *pool_take(struct objfs_cache *c, size_t len, size_t *alloc)
{
	unsigned k;
	size_t size = buf_class(c, len ? len : 1, &k);
	void *p = c->pool[k];

	*alloc = size;
	if (p) {
		c->pool[k] = *(void **)p;
		c->pool_bytes -= size;
	}
	return p;
}

/* A fresh buffer of a class's @size (huge-page aligned from 2 MiB). */
static void *buf_fresh(size_t size)
{
	void *p;

	if (size >= HUGE_PAGE) {
		if (posix_memalign(&p, HUGE_PAGE, size))
			return NULL;
		(void)madvise(p, size, MADV_HUGEPAGE);
		return p;
	}
	return malloc(size);
}

/* A buffer for @len bytes: pooled if one of its class is, else fresh;
 * @alloc gets its size. Counted in c->bytes by the caller. */
static void *buf_alloc(struct objfs_cache *c, size_t len, size_t *alloc)
{
	void *p = pool_take(c, len, alloc);

	return p ? p : buf_fresh(*alloc);
}

/* Keeps @p (of @alloc bytes, from buf_alloc) for the next block of its
 * class, within the cap. */
static void buf_free(struct objfs_cache *c, void *p, size_t alloc)
{
	unsigned k;

	(void)buf_class(c, alloc, &k);
	*(void **)p = c->pool[k];
	c->pool[k] = p;
	c->pool_bytes += alloc;
	pool_trim(c, 0);
}

static size_t key_hash(const char *id, uint64_t idx)
{
	uint64_t h = objfs_fnv1a(OBJFS_FNV_OFFSET, id) ^ idx * 0x9e3779b97f4a7c15ULL;

	return objfs_hash_fold(h, 31);
}

char *objfs_cache_obj_id(const char *path, const char *etag, int64_t size)
{
	char *id;

	if (asprintf(&id, "%s\n%s\n%lld", path, etag ? etag : "", (long long)size) < 0)
		return NULL;
	return id;
}

int objfs_cache_new(size_t cap, size_t block_size, struct objfs_cache **out)
{
	struct objfs_cache *c;
	pthread_mutexattr_t ma;

	if (!block_size || cap < block_size)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->cap = cap;
	c->bsize = block_size;
	c->nbuckets = 4096;
	c->hash = calloc(c->nbuckets, sizeof(*c->hash));
	if (!c->hash) {
		free(c);
		return -ENOMEM;
	}
	/*
	 * Every fill takes the lock twice, briefly (a lookup and a reference;
	 * the reference dropped after the copy), on up to 64 fill workers and
	 * the engine's threads at once. A plain mutex put a contended taker to
	 * sleep in the kernel: 16 workers filling a batch spent a third of
	 * their time in its futex calls. An adaptive one spins a while first.
	 */
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
	pthread_mutex_init(&c->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	pthread_cond_init(&c->cond, NULL);
	for (unsigned i = 0; i < WAITQ; i++)
		pthread_cond_init(&c->waitq[i], NULL);
	TAILQ_INIT(&c->lru);
	*out = c;
	return 0;
}

size_t objfs_cache_block_size(const struct objfs_cache *c)
{
	return c->bsize;
}

size_t objfs_cache_cap(const struct objfs_cache *c)
{
	return c->cap;
}

void objfs_cache_stream_join(struct objfs_cache *c)
{
	__atomic_add_fetch(&c->streams, 1, __ATOMIC_RELAXED);
}

void objfs_cache_stream_leave(struct objfs_cache *c)
{
	__atomic_sub_fetch(&c->streams, 1, __ATOMIC_RELAXED);
}

size_t objfs_cache_stream_window(const struct objfs_cache *c, size_t reserve)
{
	unsigned n = __atomic_load_n(&c->streams, __ATOMIC_RELAXED);
	size_t share = c->cap / 4 * 3 / (n ? n : 1);

	return share > reserve ? share - reserve : 0;
}

static void open_obj_free(struct open_obj *x)
{
	for (size_t i = 0; x->pages && i < x->nblk; i++)
		free(x->pages[i]);
	free(x->pages);
	free(x->id);
	free(x);
}

static struct open_obj *open_find(struct objfs_cache *c, const char *id)
{
	struct open_obj *x = c->open[objfs_fnv1a(OBJFS_FNV_OFFSET, id) % OPEN_BUCKETS];

	while (x && strcmp(x->id, id))
		x = x->next;
	return x;
}

/*
 * [off, off+len) of @id is being asked of the store: the pages of it that
 * were asked before while the object was open count as refetched_bytes
 * (whole pages; our fetches are page-aligned). Only objects open through
 * readers are tracked, by a bitmap of 4 KiB pages per block.
 */
static void note_fetch(struct objfs_cache *c, const char *id, int64_t off, size_t len)
{
	const size_t bits = c->bsize / 4096;
	struct open_obj *x;

	pthread_mutex_lock(&c->lock);
	x = open_find(c, id);
	if (x && !x->pages && x->size > 0 && (uint64_t)x->size / c->bsize < OPEN_TRACK_MAX) {
		x->nblk = (size_t)(((uint64_t)x->size + c->bsize - 1) / c->bsize);
		x->pages = calloc(x->nblk, sizeof(*x->pages));
	}
	for (int64_t pg = off / 4096; x && x->pages && pg * 4096 < off + (int64_t)len; pg++) {
		size_t blk = (size_t)pg / bits, bit = (size_t)pg % bits;

		if (blk >= x->nblk)
			break;
		if (!x->pages[blk] && !(x->pages[blk] = calloc((bits + 63) / 64, 8)))
			continue;
		if (x->pages[blk][bit / 64] & (1ull << (bit % 64)))
			c->st.refetched_bytes += 4096;
		x->pages[blk][bit / 64] |= 1ull << (bit % 64);
	}
	pthread_mutex_unlock(&c->lock);
}

void objfs_cache_note_read(struct objfs_cache *c, unsigned kind, size_t len, uint64_t fetched)
{
	if (kind >= OBJFS_CACHE_READ_KINDS)
		return;
	/* atomics, not the lock: every FUSE read passes here */
	__atomic_add_fetch(&c->st.reads[kind], 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&c->st.read_bytes[kind], len, __ATOMIC_RELAXED);
	__atomic_add_fetch(&c->st.read_fetched[kind], fetched, __ATOMIC_RELAXED);
}

int objfs_cache_open_obj(struct objfs_cache *c, const char *id, int64_t size)
{
	struct open_obj **pp = &c->open[objfs_fnv1a(OBJFS_FNV_OFFSET, id) % OPEN_BUCKETS], *x;

	pthread_mutex_lock(&c->lock);
	for (x = *pp; x && strcmp(x->id, id); x = x->next)
		;
	if (!x && (x = calloc(1, sizeof(*x))) && !(x->id = strdup(id))) {
		free(x);
		x = NULL;
	}
	if (x && !x->n++) { /* first reader */
		x->size = size;
		x->next = *pp;
		*pp = x;
	}
	pthread_mutex_unlock(&c->lock);
	/* not counted: the caller must not close it (it fails its open) */
	return x ? 0 : -ENOMEM;
}

void objfs_cache_close_obj(struct objfs_cache *c, const char *id)
{
	struct open_obj **pp = &c->open[objfs_fnv1a(OBJFS_FNV_OFFSET, id) % OPEN_BUCKETS], *x;

	pthread_mutex_lock(&c->lock);
	for (; *pp && strcmp((*pp)->id, id); pp = &(*pp)->next)
		;
	x = *pp;
	if (x && !--x->n) {
		*pp = x->next;
		open_obj_free(x);
	}
	pthread_mutex_unlock(&c->lock);
}

static void unhash(struct objfs_cache *c, struct objfs_block *b)
{
	struct objfs_block **pp = &c->hash[b->hash & (c->nbuckets - 1)];

	for (; *pp; pp = &(*pp)->hnext) {
		if (*pp == b) {
			*pp = b->hnext;
			break;
		}
	}
	b->hashed = 0;
	c->nblocks--;
}

static void block_free(struct objfs_cache *c, struct objfs_block *b)
{
	c->bytes -= b->alloc;
	if (b->state == B_RANGES)
		for (unsigned i = 0; i < b->nranges; i++)
			buf_free(c, b->ranges[i].data, b->ranges[i].alloc);
	else
		buf_free(c, b->data, b->alloc);
	free(b->ranges);
	free(b->id);
	free(b);
}

/* The LRU holds the blocks nobody references; lru_bytes counts them. */
static void lru_remove(struct objfs_cache *c, struct objfs_block *b)
{
	TAILQ_REMOVE(&c->lru, b, lru);
	c->lru_bytes -= b->alloc;
}

static void lru_insert(struct objfs_cache *c, struct objfs_block *b, int tail)
{
	if (tail)
		TAILQ_INSERT_TAIL(&c->lru, b, lru);
	else
		TAILQ_INSERT_HEAD(&c->lru, b, lru);
	c->lru_bytes += b->alloc;
}

static void evict_one(struct objfs_cache *c, struct objfs_block *b)
{
	lru_remove(c, b);
	unhash(c, b);
	c->st.evictions++;
	if (b->prefetched && !b->touched)
		c->st.prefetch_unused++;
	block_free(c, b);
}

/* Evicts unreferenced blocks until @need more bytes fit under the cap
 * (their buffers go to the pool, which gives way as needed). */
static void evict(struct objfs_cache *c, size_t need)
{
	while (c->bytes + need > c->cap && TAILQ_LAST(&c->lru, lru_list))
		evict_one(c, TAILQ_LAST(&c->lru, lru_list));
	pool_trim(c, need);
}

/*
 * Whether @need more bytes fit under the cap, evicting for them only when
 * what the LRU holds can make the room: blocks held or being fetched and
 * the buffers of fills in flight may fill the cap on their own, and
 * emptying the LRU would then gain nothing (a large fill part would wipe
 * the cache and still go without).
 */
static int evict_for(struct objfs_cache *c, size_t need)
{
	if (c->bytes - c->lru_bytes + need > c->cap)
		return 0;
	evict(c, need);
	return c->bytes + need <= c->cap;
}

/*
 * Makes room for one new block. A block a sequential reader has passed
 * (drop-behind, at the LRU tail) gives up its warm buffer even under the
 * cap: touching fresh pages costs more than the fetch itself on our VMs
 * (58% of a cold sequential read was the kernel zeroing new pages), and the
 * kernel page cache still holds what the reader passed.
 */
static void make_room(struct objfs_cache *c)
{
	if (TAILQ_LAST(&c->lru, lru_list) && TAILQ_LAST(&c->lru, lru_list)->behind)
		evict_one(c, TAILQ_LAST(&c->lru, lru_list));
	evict(c, c->bsize);
}

/*
 * A reference to @b for a reader or a fill (c->lock held): off the LRU
 * while anyone holds it, marked used, counted as a hit or a wait on its
 * fetch. unref lets go.
 */
static void ref(struct objfs_cache *c, struct objfs_block *b)
{
	if (b->refs == 0)
		lru_remove(c, b);
	b->refs++;
	b->touched = 1;
	if (b->state == B_LOADING)
		c->st.waits++;
	else
		c->st.hits++;
}

static void unref(struct objfs_cache *c, struct objfs_block *b)
{
	if (--b->refs)
		return;
	if (!b->hashed)
		block_free(c, b);
	else
		lru_insert(c, b, b->behind);
}

static struct objfs_block *find(struct objfs_cache *c, const char *id, uint64_t idx, size_t h)
{
	struct objfs_block *b = c->hash[h & (c->nbuckets - 1)];

	for (; b; b = b->hnext)
		if (b->hash == h && b->idx == idx && strcmp(b->id, id) == 0)
			return b;
	return NULL;
}

#define BLOCK_HASH(b) ((b)->hash)

/* Longer chains when out of memory: still correct. */
static void grow_hash(struct objfs_cache *c)
{
	(void)OBJFS_HASH_GROW(&c->hash, &c->nbuckets, struct objfs_block, hnext, BLOCK_HASH);
}

/* Puts @b, with its id, idx, hash and alloc set, into the hash. Lock held. */
static void hash_insert(struct objfs_cache *c, struct objfs_block *b)
{
	if (c->nblocks >= c->nbuckets)
		grow_hash(c);
	b->hashed = 1;
	b->cache = c;
	b->hnext = c->hash[b->hash & (c->nbuckets - 1)];
	c->hash[b->hash & (c->nbuckets - 1)] = b;
	c->nblocks++;
	c->bytes += b->alloc;
}

/* Holds @b (off the LRU, so neither evicted nor freed) before making room. Lock held. */
static void hold(struct objfs_cache *c, struct objfs_block *b)
{
	if (b->refs++ == 0)
		lru_remove(c, b);
}

/* Whether a range of RANGES block @b is being fetched. Lock held. */
static int ranges_loading(const struct objfs_block *b)
{
	for (unsigned i = 0; i < b->nranges; i++)
		if (b->ranges[i].loading)
			return 1;
	return 0;
}

/* The bytes RANGES block @b keeps. */
static size_t ranges_bytes(const struct objfs_block *b)
{
	size_t n = 0;

	for (unsigned i = 0; i < b->nranges; i++)
		n += b->ranges[i].len;
	return n;
}

/* Sleeps until a range of some block ends (range_end), holding @b meanwhile. Lock held. */
static void ranges_wait(struct objfs_cache *c, struct objfs_block *b)
{
	hold(c, b);
	pthread_cond_wait(&c->waitq[b->hash % WAITQ], &c->lock);
	unref(c, b);
}

/* Creates a LOADING block with one reference for its fetch. Lock held. */
static struct objfs_block *block_new(struct objfs_cache *c, const struct objfs_cache_obj *o,
				     uint64_t idx, size_t h)
{
	int64_t start = (int64_t)(idx * c->bsize);
	size_t len = (size_t)(o->size - start) < c->bsize ? (size_t)(o->size - start) : c->bsize;
	struct objfs_block *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->id = strdup(o->id);
	b->data = b->id ? buf_alloc(c, len, &b->alloc) : NULL;
	if (!b->data) {
		free(b->id);
		free(b);
		return NULL;
	}
	b->idx = idx;
	b->hash = h;
	b->len = len;
	b->state = B_LOADING;
	b->refs = 1;
	b->fetch = o->fetch;
	b->fctx = o->ctx;
	hash_insert(c, b);
	pool_trim(c, 0);
	c->inflight++;
	c->st.fetches++;
	return b;
}

/*
 * The whole block in place of RANGES block @ob (none of its ranges in
 * flight; held by the caller, hold()): a LOADING block that
 * block_assemble() makes of @ob's ranges and the gaps between them. @ob is
 * unhashed and stays held until then. Lock held.
 */
static struct objfs_block *block_from_ranges(struct objfs_cache *c,
					     const struct objfs_cache_obj *o,
					     struct objfs_block *ob, uint64_t idx, size_t h)
{
	struct objfs_block *b;

	unhash(c, ob);
	b = block_new(c, o, idx, h);
	if (!b) {
		unref(c, ob);
		return NULL;
	}
	b->from = ob;
	b->assembled = 1;
	return b;
}

/* The bytes a new LOADING block @b asks of the disk or the store. */
static size_t block_fetched(const struct objfs_block *b)
{
	return b->from ? b->len - ranges_bytes(b->from) : b->len;
}

static void waiters_run(struct objfs_block *b, struct blk_waiter *w, int err);

static void fetch_done(void *arg, int err)
{
	struct objfs_block *b = arg;
	struct objfs_cache *c = b->cache;
	pthread_cond_t *q = &c->waitq[b->hash % WAITQ];
	struct blk_waiter *w;

	pthread_mutex_lock(&c->lock);
	w = b->waiters;
	b->waiters = NULL;
	if (err) {
		b->state = B_FAILED;
		b->err = err;
		c->st.fetch_errors++;
		unhash(c, b); /* the next reader tries again */
	} else {
		b->state = B_READY;
		if (!b->assembled)
			c->st.fetch_bytes += b->len;
	}
	unref(c, b); /* the waiters hold their own references */
	pthread_mutex_unlock(&c->lock);
	/*
	 * The sleepers are woken once the lock is free: woken under it, each
	 * went back to sleep on the lock and was woken a second time (a VM
	 * profile of small-file reads: half a context switch per file). The
	 * state changed under the lock, so none misses this. The cache stays
	 * alive: objfs_cache_free() waits for inflight, dropped only below.
	 */
	pthread_cond_broadcast(q);
	if (w)
		waiters_run(b, w, err);
	pthread_mutex_lock(&c->lock);
	if (!--c->inflight)
		pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

/* A block's fetch from the store (@ctx is the LOADING block), counted. */
static void net_fetch(void *ctx, int64_t off, size_t len, char *dst, objfs_fetch_done_fn done,
		      void *arg)
{
	struct objfs_block *b = ctx;

	note_fetch(b->cache, b->id, off, len);
	b->fetch(b->fctx, off, len, dst, done, arg);
}

static void block_assemble(const struct objfs_cache_obj *o, struct objfs_block *b);

static void start_fetch(const struct objfs_cache_obj *o, struct objfs_block *b)
{
	int64_t off = (int64_t)(b->idx * b->cache->bsize);

	if (b->from)
		block_assemble(o, b);
	else if (b->cache->disk)
		objfs_diskcache_fetch(b->cache->disk, b->id, b->idx, net_fetch, b, off, b->len,
				      b->data, fetch_done, b);
	else
		net_fetch(b, off, b->len, b->data, fetch_done, b);
}

/*
 * Write-behind to the disk cache holds the block itself (no copy): a held
 * block has a reference, so it stays off the LRU and is never evicted or
 * reused until the chunk is on disk; READY blocks never change, so the disk
 * thread reads them without our lock. hold() runs before fetch_done(),
 * while the fetch's own reference keeps the block.
 */
static void block_hold(void *arg)
{
	struct objfs_block *b = arg;

	pthread_mutex_lock(&b->cache->lock);
	b->refs++;
	pthread_mutex_unlock(&b->cache->lock);
}

static void block_release(void *arg)
{
	struct objfs_block *b = arg;
	struct objfs_cache *c = b->cache;

	pthread_mutex_lock(&c->lock);
	unref(c, b);
	evict(c, 0);
	pthread_mutex_unlock(&c->lock);
}

void objfs_cache_set_disk(struct objfs_cache *c, struct objfs_diskcache *dc)
{
	c->disk = dc;
	/* half the cache at most waits for the disk; the rest serves readers */
	if (dc)
		objfs_diskcache_set_holder(dc, block_hold, block_release,
					   c->cap / 2 > c->bsize ? c->cap / 2 : c->bsize);
}

static int pin_once(struct objfs_cache *c, const struct objfs_cache_obj *o, int64_t off,
		    size_t len, struct objfs_cache_pin *pin)
{
	uint64_t first, last, n;
	struct objfs_block **bl, **start;
	struct iovec *iov;
	size_t nstart = 0;
	int err = 0;

	memset(pin, 0, sizeof(*pin));
	if (!len)
		return 0;
	if (off < 0 || off + (int64_t)len > o->size)
		return -EINVAL;
	first = (uint64_t)off / c->bsize;
	last = (uint64_t)(off + (int64_t)len - 1) / c->bsize;
	n = last - first + 1;
	bl = calloc(n, sizeof(*bl));
	start = calloc(n, sizeof(*start));
	iov = calloc(n, sizeof(*iov));
	if (!bl || !start || !iov) {
		free(bl);
		free(start);
		free(iov);
		return -ENOMEM;
	}
	pthread_mutex_lock(&c->lock);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t idx = first + i;
		size_t h = key_hash(o->id, idx);
		struct objfs_block *b = find(c, o->id, idx, h);

		while (b && b->state == B_RANGES && ranges_loading(b)) {
			ranges_wait(c, b); /* its ranges in flight become part of the block */
			b = find(c, o->id, idx, h);
		}
		if (b && b->state != B_RANGES) {
			ref(c, b);
		} else {
			if (b)
				hold(c, b); /* make_room must not evict it */
			make_room(c);
			b = b ? block_from_ranges(c, o, b, idx, h) : block_new(c, o, idx, h);
			if (!b) {
				err = -ENOMEM;
				break;
			}
			b->refs++; /* ours, besides the fetch's */
			pin->fetched += block_fetched(b);
			start[nstart++] = b;
			c->st.misses++;
		}
		b->touched = 1;
		bl[i] = b;
	}
	pthread_mutex_unlock(&c->lock);
	for (size_t i = 0; i < nstart; i++)
		start_fetch(o, start[i]);
	free(start);
	pthread_mutex_lock(&c->lock);
	for (uint64_t i = 0; i < n && bl[i]; i++) {
		struct objfs_block *b = bl[i];

		if (b->state == B_LOADING) {
			int64_t t0 = objfs_now_ns();

			while (b->state == B_LOADING)
				pthread_cond_wait(&c->waitq[b->hash % WAITQ], &c->lock);
			c->st.wait_us += (uint64_t)(objfs_now_ns() - t0) / 1000;
		}
		if (b->state == B_FAILED && !err)
			err = b->err;
	}
	if (err) {
		for (uint64_t i = 0; i < n && bl[i]; i++)
			unref(c, bl[i]);
		evict(c, 0);
	}
	pthread_mutex_unlock(&c->lock);
	if (err) {
		free(bl);
		free(iov);
		return err;
	}
	/* READY blocks never change again: describe them without the lock. */
	for (uint64_t i = 0; i < n; i++) {
		int64_t bstart = (int64_t)((first + i) * c->bsize);
		int64_t from = off > bstart ? off : bstart;
		int64_t to = off + (int64_t)len < bstart + (int64_t)bl[i]->len ?
			     off + (int64_t)len : bstart + (int64_t)bl[i]->len;

		iov[i].iov_base = bl[i]->data + (from - bstart);
		iov[i].iov_len = (size_t)(to - from);
	}
	pin->n = n;
	pin->blocks = bl;
	pin->iov = iov;
	return 0;
}

/*
 * A disk cache copy that failed verification ends its block's fetch with
 * OBJFS_DISKCACHE_RETRY after dropping the copy: the reader, who still holds
 * @o, pins again and the block comes from the network. Bounded, in case a
 * bad copy is written again in between.
 */
int objfs_cache_pin(struct objfs_cache *c, const struct objfs_cache_obj *o, int64_t off,
		    size_t len, struct objfs_cache_pin *pin)
{
	int err = OBJFS_DISKCACHE_RETRY;

	for (int tries = 0; err == OBJFS_DISKCACHE_RETRY && tries < 4; tries++)
		err = pin_once(c, o, off, len, pin);
	return err == OBJFS_DISKCACHE_RETRY ? -EIO : err;
}

void objfs_cache_unpin(struct objfs_cache *c, struct objfs_cache_pin *pin)
{
	if (!pin->n)
		return;
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < pin->n; i++)
		unref(c, pin->blocks[i]);
	evict(c, 0);
	pthread_mutex_unlock(&c->lock);
	free(pin->blocks);
	free(pin->iov);
	memset(pin, 0, sizeof(*pin));
}

int objfs_cache_read(struct objfs_cache *c, const struct objfs_cache_obj *o, int64_t off,
		     size_t len, char *buf)
{
	struct objfs_cache_pin pin;
	int err = objfs_cache_pin(c, o, off, len, &pin);

	for (size_t i = 0; !err && i < pin.n; i++) {
		memcpy(buf, pin.iov[i].iov_base, pin.iov[i].iov_len);
		buf += pin.iov[i].iov_len;
	}
	objfs_cache_unpin(c, &pin);
	return err;
}

size_t objfs_cache_prefetch(struct objfs_cache *c, const struct objfs_cache_obj *o,
			    int64_t off, size_t len, int64_t *reached)
{
	struct objfs_block *start[64];
	size_t bytes = 0;
	uint64_t first, last, idx;
	int stop = 0;

	if (reached)
		*reached = off;
	if (!len || off < 0 || off >= o->size)
		return 0;
	if (off + (int64_t)len > o->size)
		len = (size_t)(o->size - off);
	first = (uint64_t)off / c->bsize;
	last = (uint64_t)(off + (int64_t)len - 1) / c->bsize;
	/* 64 blocks a round, started outside the lock, until the window's end
	 * or the cap */
	for (idx = first; idx <= last && !stop;) {
		size_t nstart = 0;

		pthread_mutex_lock(&c->lock);
		for (; idx <= last && nstart < 64; idx++) {
			size_t h = key_hash(o->id, idx);
			struct objfs_block *b = find(c, o->id, idx, h);

			/* cached or coming; or ranges coming, which a reader assembles */
			if (b && (b->state != B_RANGES || ranges_loading(b)))
				continue;
			if (b)
				hold(c, b); /* make_room must not evict it */
			make_room(c);
			if (c->bytes + c->bsize > c->cap) {
				if (b)
					unref(c, b);
				c->st.prefetch_capped++;
				stop = 1;
				break; /* no room: prefetching never pushes past the cap */
			}
			b = b ? block_from_ranges(c, o, b, idx, h) : block_new(c, o, idx, h);
			if (!b) {
				stop = 1;
				break;
			}
			b->prefetched = 1;
			c->st.prefetched++;
			start[nstart++] = b;
			bytes += block_fetched(b);
		}
		pthread_mutex_unlock(&c->lock);
		for (size_t i = 0; i < nstart; i++)
			start_fetch(o, start[i]);
	}
	if (reached) /* blocks below idx are cached, coming or started */
		*reached = idx > last ? off + (int64_t)len : (int64_t)(idx * c->bsize);
	return bytes;
}

void objfs_cache_drop_behind(struct objfs_cache *c, const struct objfs_cache_obj *o,
			     int64_t off)
{
	uint64_t idx = (uint64_t)off / c->bsize;
	struct objfs_block *b;
	size_t h;

	if (off <= 0 || idx == 0)
		return;
	idx--;
	h = key_hash(o->id, idx); /* outside the lock, as fill_from_block does */
	pthread_mutex_lock(&c->lock);
	b = find(c, o->id, idx, h);
	if (b && b->state == B_READY && !b->behind) {
		b->behind = 1;
		if (b->refs == 0) {
			TAILQ_REMOVE(&c->lru, b, lru);
			TAILQ_INSERT_TAIL(&c->lru, b, lru);
		}
	}
	pthread_mutex_unlock(&c->lock);
}

/* ------------------------------------------------------ direct fills */

/*
 * One objfs_cache_fill(): @pending counts the parts in flight plus one for
 * the caller while it is still issuing them; the last to finish calls done.
 */
struct fill {
	struct objfs_cache *c;
	const struct objfs_cache_obj *o;
	unsigned pending;      /* atomic: parts not yet ended, + 1 while starting */
	int err;               /* atomic: the first error */
	objfs_fetch_done_fn done;
	void *arg;
	unsigned flags;        /* OBJFS_FILL_*, FILL_* */
	uint64_t started;      /* atomic: bytes asked of the disk or the store */
	int64_t stop;          /* FILL_PREFETCH: where the cap stopped it, or -1 */
	struct objfs_cache_obj own_o; /* FILL_ASYNC: o is this copy (own_o.id ours) */
	uint64_t *started_out; /* gets @started when the fill ends */
};

/* Internal fill flags, besides OBJFS_FILL_*. */
#define FILL_PREFETCH 0x100u /* no destination: only gaps, kept as ranges, within the cap */
#define FILL_ASYNC    0x200u /* nobody waits: @o is copied, and a bad disk copy
			      * fails its part instead of going to the store later */

/* A fill of @o (copied when @flags has FILL_ASYNC), counted once for its starter. NULL: ENOMEM. */
static struct fill *fill_new(struct objfs_cache *c, const struct objfs_cache_obj *o,
			     unsigned flags, objfs_fetch_done_fn done, void *arg)
{
	struct fill *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	*f = (struct fill){ .c = c, .o = o, .pending = 1, .done = done, .arg = arg,
			    .flags = flags, .stop = -1 };
	if (flags & FILL_ASYNC) {
		f->own_o = *o;
		f->own_o.id = strdup(o->id);
		f->o = &f->own_o;
		if (!f->own_o.id) {
			free(f);
			return NULL;
		}
	}
	return f;
}

/* @n bytes of memory into @f's destination at @dst (none for a prefetch). */
static void fill_copy(const struct fill *f, char *dst, const char *src, size_t n)
{
	if (!dst)
		return;
	if (f->flags & OBJFS_FILL_DEVICE)
		objfs_copy_stream(dst, src, n);
	else
		memcpy(dst, src, n);
}

#define PAGE ((int64_t)4096)

/*
 * One asynchronous part: a disk read, or a store fetch, into the caller's
 * memory, or into @own first when its bytes are to be kept (a range of a
 * RANGES block, or written behind to disk). The cache never reads back
 * from @dst: it may be memory another process can write (a GPU client's
 * ring slot), and what it wrote there must not become the cache's bytes
 * for every other reader.
 */
struct fill_part {
	struct fill *f;
	int64_t off;
	size_t len;
	char *dst;             /* NULL for a prefetch */
	int from_disk;
	char *own;             /* NULL, or @len bytes of ours the part lands in first,
				  counted in c->bytes (own_alloc, else len) */
	size_t own_alloc;      /* a small part's: @own's size class (pooled), else 0 */
	struct objfs_block *kb; /* a kept range's block (held), @own its range's data */
	int64_t koff;          /* the range's offset in kb */
};

/*
 * Gives @p its own buffer, counted under the cap like a block: a small
 * part's from the pool of its size class (or fresh), a large one's
 * page-aligned (whole blocks read from disk stay O_DIRECT). With no room
 * once what the LRU can give is evicted, or no memory, @p has none: then
 * it is fetched, not read from disk (a disk read checks what it read, and
 * the destination may be a client's memory).
 */
static void part_own_take(struct objfs_cache *c, struct fill_part *p, int small)
{
	size_t size = p->len;
	int fresh = 0;

	pthread_mutex_lock(&c->lock);
	if (small)
		p->own = pool_take(c, p->len, &size); /* from the pool: counted there */
	if (!p->own) /* fresh memory: the pool's idle buffers count too */
		fresh = evict_for(c, size) && c->bytes + c->pool_bytes + size <= c->cap;
	if (p->own || fresh)
		c->bytes += size;
	pthread_mutex_unlock(&c->lock);
	if (small)
		p->own_alloc = size;
	if (!fresh)
		return;
	if (small) {
		/* Allocated outside the lock (malloc may wait for the mmap lock)
		 * and touched here, so the engine's recv() into it does not take
		 * its page faults inside the socket's lock (cold sparse GPU fills
		 * ran a third slower with that). */
		if ((p->own = buf_fresh(size)))
			memset(p->own, 0, p->len);
	} else {
		void *m = NULL;

		p->own = posix_memalign(&m, (size_t)PAGE, size) ? NULL : m;
	}
	if (!p->own) {
		pthread_mutex_lock(&c->lock);
		c->bytes -= size;
		pthread_mutex_unlock(&c->lock);
	}
}

/* Frees @p's own buffer, if it still has one and it is not a kept range's,
 * and uncounts it: a small part's to the pool of its class (own_alloc), a
 * large one's to the heap. */
static void part_own_free(struct objfs_cache *c, struct fill_part *p)
{
	if (!p->own || p->kb)
		return;
	pthread_mutex_lock(&c->lock);
	if (p->own_alloc) {
		c->bytes -= p->own_alloc;
		buf_free(c, p->own, p->own_alloc);
	} else {
		c->bytes -= p->len;
	}
	pthread_mutex_unlock(&c->lock);
	if (!p->own_alloc)
		free(p->own);
	p->own = NULL;
}

/* Where part @p's bytes land: its own buffer when it has one, else dst. */
static char *part_to(const struct fill_part *p)
{
	return p->own ? p->own : p->dst;
}

/*
 * Ends one count of @f (a part, or the start), with @err if it failed; the
 * last calls done() with the first error. Atomics, not c->lock: a warm
 * sample of the GPU side API took the cache lock four times, and 16 fill
 * workers spent a fifth of their time contending for it.
 */
static void fill_fail(struct fill *f, int err);

static void fill_put(struct fill *f, int err)
{
	if (err)
		fill_fail(f, err);
	/* acq_rel: the error stored before it is seen by whoever ends last */
	if (__atomic_sub_fetch(&f->pending, 1, __ATOMIC_ACQ_REL))
		return;
	if (f->started_out)
		*f->started_out = __atomic_load_n(&f->started, __ATOMIC_RELAXED);
	f->done(f->arg, __atomic_load_n(&f->err, __ATOMIC_RELAXED));
	free((char *)f->own_o.id);
	free(f);
}

/* Records @err as @f's error (the first one wins) without ending a count. */
static void fill_fail(struct fill *f, int err)
{
	int none = 0;

	__atomic_compare_exchange_n(&f->err, &none, err, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

static void fill_part_done(void *arg, int err);

/* Starts @p, which the fill counts already: from the store, into part_to(p). */
static void fill_part_fetch(struct fill_part *p)
{
	struct objfs_cache *c = p->f->c;

	pthread_mutex_lock(&c->lock);
	c->inflight++;
	c->st.direct_bytes += p->len;
	pthread_mutex_unlock(&c->lock);
	p->from_disk = 0;
	note_fetch(c, p->f->o->id, p->off, p->len);
	p->f->o->fetch(p->f->o->ctx, p->off, p->len, part_to(p), fill_part_done, p);
}

/* The end of block @idx of @o: its start plus the block size, or the
 * object's end (compared before adding: no overflow near 2^63). */
static int64_t block_end(const struct objfs_cache *c, const struct objfs_cache_obj *o,
			 uint64_t idx)
{
	int64_t bstart = (int64_t)(idx * c->bsize);

	return o->size - bstart > (int64_t)c->bsize ? bstart + (int64_t)c->bsize : o->size;
}

/*
 * A part fetched outside a whole block bypassed the disk cache's
 * write-behind of blocks: the pages it covers in each block (whole 4 KiB
 * pages of the block, the block's short tail included) are written behind
 * from the part's own buffer (never from the caller's memory: struct
 * fill_part), so a second pass reads from disk.
 */
static void fill_write_behind(struct objfs_cache *c, const struct fill_part *p)
{
	const struct objfs_cache_obj *o = p->f->o;
	int64_t end = p->off + (int64_t)p->len;

	for (uint64_t idx = (uint64_t)p->off / c->bsize;; idx++) {
		int64_t bstart = (int64_t)(idx * c->bsize), bend = block_end(c, o, idx);
		int64_t from = p->off > bstart ? p->off : bstart, to = end < bend ? end : bend;

		if (bstart >= end)
			break;
		/* block-relative pages: round the start up, the end down unless it is the block's */
		from = bstart + ((from - bstart + PAGE - 1) & ~(PAGE - 1));
		if (to != bend)
			to = bstart + ((to - bstart) & ~(PAGE - 1));
		if (from < to)
			objfs_diskcache_put_range(c->disk, o->id, idx, (size_t)(bend - bstart),
						  (size_t)(from - bstart), p->own + (from - p->off),
						  (size_t)(to - from));
	}
}

static int fill_part_start(struct fill *f, int64_t off, size_t len, char *dst, int from_disk);

/* The index of @b's range at @off, or -1. Lock held. */
static int range_at(const struct objfs_block *b, int64_t off)
{
	for (unsigned i = 0; i < b->nranges; i++)
		if (b->ranges[i].off == off)
			return (int)i;
	return -1;
}

/*
 * Kept range @koff of @b, fetched for part @p, ended with @err: READY, its
 * waiters copy from it and go on; on error it is dropped and each waiter
 * fetches its part from the store.
 * Sleepers waiting for the block's ranges (pin_once) are woken.
 */
static void range_end(struct objfs_cache *c, struct fill_part *p, int err)
{
	struct objfs_block *b = p->kb;
	pthread_cond_t *q = &c->waitq[b->hash % WAITQ]; /* b may be freed below */
	struct blk_waiter *w = NULL;
	struct brange *r;
	int i;

	pthread_mutex_lock(&c->lock);
	i = range_at(b, p->koff);
	if (i >= 0) {
		r = &b->ranges[i];
		w = r->waiters;
		r->waiters = NULL;
		r->loading = 0;
		if (err) { /* dropped now, so no fill joins it after its waiters left */
			b->alloc -= r->alloc;
			c->bytes -= r->alloc;
			buf_free(c, r->data, r->alloc);
			memmove(r, r + 1, (b->nranges - (unsigned)i - 1) * sizeof(*r));
			b->nranges--;
		}
	}
	pthread_mutex_unlock(&c->lock);
	for (struct blk_waiter *x = w; x && !err; x = x->next)
		fill_copy(x->f, x->dst, p->own + (x->off - p->off), x->len);
	while (w) { /* on error each waiter fetches its part itself: the range's
		     * fetch may have been a prefetch that gives up on a bad disk copy */
		struct blk_waiter *next = w->next;

		fill_put(w->f, err ? fill_part_start(w->f, w->off, w->len, w->dst, 0) : 0);
		free(w);
		w = next;
	}
	pthread_mutex_lock(&c->lock);
	unref(c, b);
	evict(c, 0);
	pthread_mutex_unlock(&c->lock);
	pthread_cond_broadcast(q);
}

static void fill_part_done(void *arg, int err)
{
	struct fill_part *p = arg;
	struct fill *f = p->f;
	struct objfs_cache *c = f->c;

	/* the disk copy was bad and is gone: fetched again, unless nobody
	 * waits (f->o's store may be gone), then the retry is the next reader's
	 * (a kept range's waiters, an assembled block's pin) */
	if (p->from_disk && err == OBJFS_DISKCACHE_RETRY && !(f->flags & FILL_ASYNC)) {
		fill_part_fetch(p);
		return;
	}
	if (!err && p->own) {
		fill_copy(f, p->dst, p->own, p->len);
		if (!p->from_disk && c->disk)
			fill_write_behind(c, p); /* from a copy of its own */
	}
	if (p->kb)
		range_end(c, p, err); /* before inflight drops: cache_free waits for it */
	part_own_free(c, p);
	if (!p->from_disk) {
		pthread_mutex_lock(&c->lock);
		if (!--c->inflight)
			pthread_cond_broadcast(&c->cond);
		pthread_mutex_unlock(&c->lock);
	}
	free(p);
	fill_put(f, err);
}

/* Reads @p, within one block, from the disk cache: 0 when queued (then fill_part_done). */
static int fill_part_disk(struct objfs_cache *c, struct fill_part *p)
{
	const struct objfs_cache_obj *o = p->f->o;
	uint64_t idx = (uint64_t)p->off / c->bsize;
	int64_t bstart = (int64_t)(idx * c->bsize);

	if (p->off == bstart && p->off + (int64_t)p->len == block_end(c, o, idx))
		return objfs_diskcache_read(c->disk, o->id, idx, p->len, part_to(p), fill_part_done, p);
	return objfs_diskcache_read_range(c->disk, o->id, idx, (size_t)(p->off - bstart), p->len,
					  part_to(p), fill_part_done, p);
}

/* Whether [off, off+len) of @o, within one block, is on disk. */
static int on_disk(struct objfs_cache *c, const struct objfs_cache_obj *o, int64_t off,
		   size_t len)
{
	uint64_t idx = (uint64_t)off / c->bsize;

	return c->disk && objfs_diskcache_has_range(c->disk, o->id, idx,
						    (size_t)(off - (int64_t)(idx * c->bsize)), len);
}

/* Starts @p (counted in its fill already): from disk when it is there, else the store. */
static void part_go(struct objfs_cache *c, struct fill_part *p, int from_disk)
{
	__atomic_add_fetch(&p->f->started, p->len, __ATOMIC_RELAXED);
	p->from_disk = from_disk && p->own;
	if (p->from_disk && fill_part_disk(c, p) == 0)
		return;
	fill_part_fetch(p);
}

/*
 * Adds one part to @f and starts it: a disk read when @from_disk (within
 * one block; a fetch after all when the disk no longer has it), else a fetch.
 */
static int fill_part_start(struct fill *f, int64_t off, size_t len, char *dst, int from_disk)
{
	struct objfs_cache *c = f->c;
	struct fill_part *p = malloc(sizeof(*p));

	if (!p)
		return -ENOMEM;
	*p = (struct fill_part){ f, off, len, dst, from_disk, NULL, 0, NULL, 0 };
	/* bytes land in our memory first when they are written behind to
	 * disk (and what a disk read checks), or small (a pooled buffer) */
	if (len <= c->bsize / 4 || c->disk)
		part_own_take(c, p, len <= c->bsize / 4);
	__atomic_add_fetch(&f->pending, 1, __ATOMIC_RELAXED);
	part_go(c, p, from_disk);
	return 0;
}

/*
 * Starts the part that fetches kept range @koff (LOADING, @len bytes into
 * @data) of @b, which the caller holds for it; @dst: where @f wants the
 * bytes (NULL: a prefetch). On ENOMEM the range is dropped again.
 */
static void fill_part_kept(struct fill *f, struct objfs_block *b, int64_t koff, size_t len,
			   char *data, char *dst)
{
	struct objfs_cache *c = f->c;
	int64_t off = (int64_t)(b->idx * c->bsize) + koff;
	struct fill_part *p = malloc(sizeof(*p));
	struct fill_part dead = { f, off, len, dst, 0, data, 0, b, koff };

	__atomic_add_fetch(&f->pending, 1, __ATOMIC_RELAXED);
	if (!p) {
		range_end(c, &dead, -ENOMEM);
		fill_put(f, -ENOMEM);
		return;
	}
	*p = dead;
	part_go(c, p, on_disk(c, f->o, off, len));
}

/*
 * Inserts a LOADING range [off, off+len) with @data (@alloc bytes, counted
 * by the caller) into @b's sorted ranges. 0, or -ENOMEM. Lock held.
 */
static int range_insert(struct objfs_block *b, int64_t off, size_t len, char *data, size_t alloc)
{
	struct brange *nr = realloc(b->ranges, (b->nranges + 1) * sizeof(*nr));
	unsigned i = 0;

	if (!nr)
		return -ENOMEM;
	b->ranges = nr;
	while (i < b->nranges && nr[i].off < off)
		i++;
	memmove(nr + i + 1, nr + i, (b->nranges - i) * sizeof(*nr));
	nr[i] = (struct brange){ off, len, alloc, data, 1, NULL };
	b->nranges++;
	b->alloc += alloc;
	return 0;
}

/* The RANGES block of (@o, @idx) with hash @h, made empty and hashed (and
 * held, refs 1) when none is there. Lock held. */
static struct objfs_block *ranges_block(struct objfs_cache *c, const struct objfs_cache_obj *o,
					uint64_t idx, size_t h)
{
	struct objfs_block *b = calloc(1, sizeof(*b));

	if (!b || !(b->id = strdup(o->id))) {
		free(b);
		return NULL;
	}
	b->idx = idx;
	b->hash = h;
	b->len = (size_t)(block_end(c, o, idx) - (int64_t)(idx * c->bsize));
	b->state = B_RANGES;
	b->refs = 1;
	hash_insert(c, b);
	return b;
}

/* What fill_block does with one piece of a block outside its ranges. */
struct gap {
	int64_t off;   /* in the block */
	size_t len;
	char *data;    /* kept: the new range's buffer; NULL: fetched unkept */
};
#define GAPS (RANGES_MAX + 2)

/*
 * Makes @g a kept LOADING range of *@bp (a RANGES block, made when NULL)
 * when it is a quarter block at most (@any: whatever its size) and the cap
 * and the range count allow; else leaves it unkept. Each kept range holds the block for its
 * part. Lock held.
 */
static void gap_keep(struct objfs_cache *c, const struct objfs_cache_obj *o, uint64_t idx,
		     size_t h, struct objfs_block **bp, struct gap *g, int any)
{
	size_t alloc;
	unsigned k;

	g->data = NULL;
	if ((g->len > c->bsize / 4 && !any) || (*bp && (*bp)->nranges >= RANGES_MAX) ||
	    !evict_for(c, buf_class(c, g->len, &k)))
		return;
	if (!*bp && !(*bp = ranges_block(c, o, idx, h)))
		return;
	g->data = buf_alloc(c, g->len, &alloc);
	if (!g->data)
		return;
	if (range_insert(*bp, g->off, g->len, g->data, alloc)) {
		buf_free(c, g->data, alloc);
		g->data = NULL;
		return;
	}
	c->bytes += alloc;
	c->st.ranges_kept++;
	(*bp)->refs++; /* the part's */
}

/*
 * Copies [off, off+len) of block @idx of f->o, in memory or being
 * fetched, into @dst: now when the block is READY, as a waiter when it is
 * LOADING (waiters_run), so a fill never blocks its caller on the network.
 * With no whole block, what kept ranges hold is copied (or waited for) and
 * only the gaps between them are fetched, each kept as a new range when
 * small (joined by later fills while in flight) and fetched into @dst
 * otherwise. 0; 1 when nothing of the block is in memory and the fill is
 * @long (over a quarter block: the caller fetches the piece in a run with
 * its neighbours, not kept: a stream, a GPU fill); or -ENOMEM. A prefetch
 * (FILL_PREFETCH, @dst NULL) only starts the gaps, all kept, one request
 * each; the cap stops it (f->stop).
 */
static int fill_block(struct fill *f, uint64_t idx, int64_t off, size_t len, char *dst, int longfill)
{
	struct objfs_cache *c = f->c;
	const struct objfs_cache_obj *o = f->o;
	const int pre = !!(f->flags & FILL_PREFETCH);
	int64_t bstart = (int64_t)(idx * c->bsize), boff = off - bstart, bend = boff + (int64_t)len;
	struct { int64_t off; size_t len; const char *src; } copy[RANGES_MAX];
	struct gap gaps[GAPS];
	unsigned ncopy = 0, ngap = 0;
	int64_t pos = boff;
	struct objfs_block *b;
	size_t h = key_hash(o->id, idx); /* outside the lock: it reads the whole id */

	pthread_mutex_lock(&c->lock);
	b = find(c, o->id, idx, h);
	if (b && b->state != B_RANGES) { /* the whole block: READY or LOADING */
		struct blk_waiter *w = NULL;

		if (pre) {
			pthread_mutex_unlock(&c->lock);
			return 0;
		}
		if (b->state == B_LOADING && !(w = malloc(sizeof(*w)))) {
			pthread_mutex_unlock(&c->lock);
			return -ENOMEM;
		}
		ref(c, b);
		if (w) {
			*w = (struct blk_waiter){ b->waiters, f, off, len, dst };
			b->waiters = w;
			__atomic_add_fetch(&f->pending, 1, __ATOMIC_RELAXED);
			pthread_mutex_unlock(&c->lock);
			return 0;
		}
		pthread_mutex_unlock(&c->lock);
		/* READY blocks never change: copied without the lock */
		fill_copy(f, dst, b->data + boff, len);
		pthread_mutex_lock(&c->lock);
		unref(c, b);
		evict(c, 0);
		pthread_mutex_unlock(&c->lock);
		return 0;
	}
	if (!pre && longfill && (!b || !b->nranges)) {
		pthread_mutex_unlock(&c->lock);
		return 1;
	}
	if (b)
		hold(c, b); /* ours while we copy */
	/* the ranges that meet the piece, in order: copies, waiters, gaps */
	for (unsigned i = 0; b && i < b->nranges && pos < bend; i++) {
		struct brange *r = &b->ranges[i];
		int64_t rend = r->off + (int64_t)r->len, to;

		if (rend <= pos)
			continue;
		if (r->off >= bend)
			break;
		if (r->off > pos)
			gaps[ngap++] = (struct gap){ pos, (size_t)(r->off - pos), NULL };
		pos = r->off > pos ? r->off : pos;
		to = rend < bend ? rend : bend;
		if (pre) {
			/* nothing to copy or wait for */
		} else if (r->loading) {
			struct blk_waiter *w = malloc(sizeof(*w));

			if (!w) {
				unref(c, b);
				pthread_mutex_unlock(&c->lock);
				return -ENOMEM; /* the waiters added so far still end the fill */
			}
			*w = (struct blk_waiter){ r->waiters, f, bstart + pos, (size_t)(to - pos),
						  dst + (pos - boff) };
			r->waiters = w;
			__atomic_add_fetch(&f->pending, 1, __ATOMIC_RELAXED);
		} else {
			copy[ncopy].off = pos;
			copy[ncopy].len = (size_t)(to - pos);
			copy[ncopy++].src = r->data + (pos - r->off);
		}
		pos = to;
	}
	if (pos < bend)
		gaps[ngap++] = (struct gap){ pos, (size_t)(bend - pos), NULL };
	for (unsigned i = 0; i < ngap; i++) {
		gap_keep(c, o, idx, h, &b, &gaps[i], pre); /* a block made here is held for us too */
		if (!gaps[i].data && pre) {
			c->st.prefetch_capped++;
			f->stop = bstart + gaps[i].off;
			ngap = i;
			break;
		}
	}
	pthread_mutex_unlock(&c->lock);
	for (unsigned i = 0; i < ncopy; i++) /* READY ranges never change */
		fill_copy(f, dst + (copy[i].off - boff), copy[i].src, copy[i].len);
	for (unsigned i = 0; i < ngap; i++) {
		struct gap *g = &gaps[i];
		char *to = dst ? dst + (g->off - boff) : NULL;

		if (g->data)
			fill_part_kept(f, b, g->off, g->len, g->data, to);
		else if (fill_part_start(f, bstart + g->off, g->len, to,
					 on_disk(c, o, bstart + g->off, g->len)))
			fill_fail(f, -ENOMEM);
	}
	if (b) {
		pthread_mutex_lock(&c->lock);
		unref(c, b);
		evict(c, 0);
		pthread_mutex_unlock(&c->lock);
	}
	return 0;
}

/*
 * The fills waiting for block @b, whose fetch ended with @err: each copies
 * its part (the block is READY and each holds a reference) and lets go. A
 * disk copy that failed verification (OBJFS_DISKCACHE_RETRY) sends each to
 * the store instead; any other error fails them.
 */
static void waiters_run(struct objfs_block *b, struct blk_waiter *w, int err)
{
	struct objfs_cache *c = b->cache;
	int64_t bstart = (int64_t)(b->idx * c->bsize);

	for (struct blk_waiter *x = w; x; x = x->next)
		if (!err)
			fill_copy(x->f, x->dst, b->data + (x->off - bstart), x->len);
	pthread_mutex_lock(&c->lock);
	for (struct blk_waiter *x = w; x; x = x->next)
		unref(c, b);
	evict(c, 0);
	pthread_mutex_unlock(&c->lock);
	while (w) {
		struct blk_waiter *next = w->next;
		int e = err;

		if (err == OBJFS_DISKCACHE_RETRY)
			e = fill_part_start(w->f, w->off, w->len, w->dst, 0);
		fill_put(w->f, e);
		free(w);
		w = next;
	}
}

/*
 * Fills [off, off+len) of f->o into @dst (NULL: a prefetch), block by
 * block: what memory holds or is fetching is copied or joined
 * (fill_block), pieces on disk are read from it, and neighbouring pieces
 * that are nowhere are fetched as one run. 0 or -errno (parts started
 * before an error still end the fill).
 */
static int fill_range(struct fill *f, int64_t off, size_t len, char *dst)
{
	struct objfs_cache *c = f->c;
	const struct objfs_cache_obj *o = f->o;
	int64_t end = off + (int64_t)len, run = -1; /* run: start of the store run */
	int err = 0;

	for (int64_t at = off; at < end && !err && f->stop < 0;) {
		uint64_t idx = (uint64_t)at / c->bsize;
		int64_t to = end < block_end(c, o, idx) ? end : block_end(c, o, idx);
		size_t n = (size_t)(to - at);
		int got = fill_block(f, idx, at, n, dst ? dst + (at - off) : NULL,
				     len > c->bsize / 4), disk = 0;

		if (got < 0) {
			err = got;
			break;
		}
		if (got == 1) { /* nothing in memory: on disk, or from the store */
			disk = on_disk(c, o, at, n);
			if (!disk) {
				if (run < 0)
					run = at; /* merged with its neighbours */
				at = to;
				continue;
			}
		}
		if (run >= 0)
			err = fill_part_start(f, run, (size_t)(at - run), dst + (run - off), 0);
		run = -1;
		if (!err && disk) /* the whole block or just this part: straight into dst */
			err = fill_part_start(f, at, n, dst + (at - off), 1);
		at = to;
	}
	if (run >= 0 && !err)
		err = fill_part_start(f, run, (size_t)(end - run), dst + (run - off), 0);
	return err;
}

void objfs_cache_fill(struct objfs_cache *c, const struct objfs_cache_obj *o, int64_t off,
		      size_t len, char *dst, unsigned flags, objfs_fetch_done_fn done, void *arg)
{
	struct fill *f;

	if (off < 0 || off + (int64_t)len > o->size || off + (int64_t)len < off) {
		done(arg, -EINVAL);
		return;
	}
	f = fill_new(c, o, flags & OBJFS_FILL_DEVICE, done, arg);
	if (!f) {
		done(arg, -ENOMEM);
		return;
	}
	fill_put(f, fill_range(f, off, len, dst));
}

static void prefetch_done(void *arg, int err)
{
	(void)arg;
	(void)err;
}

size_t objfs_cache_prefetch_range(struct objfs_cache *c, const struct objfs_cache_obj *o,
				  int64_t off, size_t len, int64_t *reached)
{
	struct fill *f;
	size_t started;

	if (reached)
		*reached = off;
	if (!len || off < 0 || off >= o->size)
		return 0;
	if (off + (int64_t)len > o->size)
		len = (size_t)(o->size - off);
	f = fill_new(c, o, FILL_PREFETCH | FILL_ASYNC, prefetch_done, NULL);
	if (!f)
		return 0;
	(void)fill_range(f, off, len, NULL);
	started = (size_t)__atomic_load_n(&f->started, __ATOMIC_RELAXED);
	if (reached)
		*reached = f->stop >= 0 ? f->stop : off + (int64_t)len;
	fill_put(f, 0);
	return started;
}

/*
 * Fetches LOADING block @b (made by block_from_ranges) from the RANGES
 * block it replaces: the ranges are copied in, the gaps between them read
 * from disk or fetched (fill parts into the block), and the block's fetch
 * ends (fetch_done) when the last gap is in.
 */
static void block_assemble(const struct objfs_cache_obj *o, struct objfs_block *b)
{
	struct objfs_cache *c = b->cache;
	struct objfs_block *ob = b->from;
	int64_t bstart = (int64_t)(b->idx * c->bsize), pos = 0;
	struct fill *f = fill_new(c, o, FILL_ASYNC, fetch_done, b);
	int err = f ? 0 : -ENOMEM;

	b->from = NULL;
	/* ob is unhashed and none of its ranges in flight: they no longer change */
	for (unsigned i = 0; i < ob->nranges && !err; i++) {
		const struct brange *r = &ob->ranges[i];

		memcpy(b->data + r->off, r->data, r->len);
		if (r->off > pos)
			err = fill_part_start(f, bstart + pos, (size_t)(r->off - pos), b->data + pos,
					      on_disk(c, o, bstart + pos, (size_t)(r->off - pos)));
		pos = r->off + (int64_t)r->len;
	}
	if (!err && pos < (int64_t)b->len)
		err = fill_part_start(f, bstart + pos, b->len - (size_t)pos, b->data + pos,
				      on_disk(c, o, bstart + pos, b->len - (size_t)pos));
	pthread_mutex_lock(&c->lock);
	unref(c, ob);
	pthread_mutex_unlock(&c->lock);
	if (f)
		fill_put(f, err);
	else
		fetch_done(b, err);
}

/* objfs_cache_fill_wait(): the fill's outcome, handed from done() to the waiter. */
struct fill_wait {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int done, err;
};

static void fill_wait_done(void *arg, int err)
{
	struct fill_wait *w = arg;

	pthread_mutex_lock(&w->lock);
	w->done = 1;
	w->err = err;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

int objfs_cache_fill_wait(struct objfs_cache *c, const struct objfs_cache_obj *o, int64_t off,
			  size_t len, char *dst, uint64_t *fetched)
{
	struct fill_wait w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0 };
	struct fill *f;

	if (fetched)
		*fetched = 0;
	if (off < 0 || off + (int64_t)len > o->size || off + (int64_t)len < off)
		return -EINVAL;
	f = fill_new(c, o, 0, fill_wait_done, &w);
	if (!f)
		return -ENOMEM;
	f->started_out = fetched;
	fill_put(f, fill_range(f, off, len, dst));
	pthread_mutex_lock(&w.lock);
	while (!w.done)
		pthread_cond_wait(&w.cond, &w.lock);
	pthread_mutex_unlock(&w.lock);
	/* done() unlocked before we could lock: nothing touches w any more */
	pthread_mutex_destroy(&w.lock);
	pthread_cond_destroy(&w.cond);
	return w.err;
}

int objfs_cache_has(struct objfs_cache *c, const char *id, uint64_t idx)
{
	struct objfs_block *b;
	int has;
	size_t h = key_hash(id, idx);

	pthread_mutex_lock(&c->lock);
	b = find(c, id, idx, h);
	has = b && b->state != B_RANGES;
	pthread_mutex_unlock(&c->lock);
	return has;
}

void objfs_cache_get_stats(struct objfs_cache *c, struct objfs_cache_stats *st)
{
	pthread_mutex_lock(&c->lock);
	*st = c->st;
	st->bytes = c->bytes;
	st->pool_bytes = c->pool_bytes;
	st->cap = c->cap;
	pthread_mutex_unlock(&c->lock);
}

void objfs_cache_free(struct objfs_cache *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	while (c->inflight)
		pthread_cond_wait(&c->cond, &c->lock);
	pthread_mutex_unlock(&c->lock);
	if (c->disk)
		objfs_diskcache_flush(c->disk); /* releases the blocks held for writing */
	for (size_t i = 0; i < c->nbuckets; i++) {
		struct objfs_block *b = c->hash[i], *next;

		for (; b; b = next) {
			next = b->hnext;
			block_free(c, b);
		}
	}
	c->cap = 0;
	pool_trim(c, 0); /* frees every pooled buffer */
	for (unsigned i = 0; i < OPEN_BUCKETS; i++)
		while (c->open[i]) { /* readers not freed: a caller's leak, not ours to keep */
			struct open_obj *x = c->open[i];

			c->open[i] = x->next;
			open_obj_free(x);
		}
	free(c->hash);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->cond);
	for (unsigned i = 0; i < WAITQ; i++)
		pthread_cond_destroy(&c->waitq[i]);
	free(c);
}
