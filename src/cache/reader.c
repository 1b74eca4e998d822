/*
 * reader: see reader.h for the policy and its measured reasons.
 *
 * The two ways a read is served, side by side:
 *   whole blocks  objfs_cache_pin(): blocks stay in the cache, the reply
 *                 points into them (zero copy), prefetch and drop-behind
 *                 apply;
 *   pages         objfs_cache_fill() of the range rounded out to 4 KiB
 *                 pages into a malloc'd buffer: the pages fetched are kept
 *                 as a range of their block when small (the disk cache may
 *                 write them behind), the reply points at the sub-range
 *                 asked for.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "prefetch.h"
#include "range.h"
#include "reader.h"

#define PAGE ((int64_t)4096)

struct objfs_reader {
	struct objfs_cache *cache;   /* borrowed */
	struct objfs_object *obj;    /* one reference */
	struct objfs_reader_cfg cfg;
	pthread_mutex_t lock;        /* guards pf and joined */
	struct objfs_prefetch pf;
	int joined;                  /* counted in the cache's streams */
};

int objfs_reader_new(struct objfs_cache *cache, struct objfs_object *obj,
		     const struct objfs_reader_cfg *cfg, struct objfs_reader **out)
{
	struct objfs_reader *r = calloc(1, sizeof(*r));

	if (!r || objfs_cache_open_obj(cache, obj->cobj.id, obj->size)) {
		free(r);
		return -ENOMEM;
	}
	r->cache = cache;
	r->obj = objfs_object_get(obj);
	r->cfg = *cfg;
	pthread_mutex_init(&r->lock, NULL);
	objfs_prefetch_init(&r->pf, cfg->window_min, cfg->window_max);
	objfs_prefetch_set_proof(&r->pf, objfs_cache_block_size(cache));
	*out = r;
	return 0;
}

void objfs_reader_start(struct objfs_reader *r)
{
	int64_t size = r->obj->size;

	if (size > 0 && (uint64_t)size <= objfs_cache_block_size(r->cache))
		objfs_cache_prefetch(r->cache, &r->obj->cobj, 0, (size_t)size, NULL);
}

void objfs_reader_free(struct objfs_reader *r)
{
	if (!r)
		return;
	if (r->joined)
		objfs_cache_stream_leave(r->cache);
	objfs_cache_close_obj(r->cache, r->obj->cobj.id);
	objfs_object_put(r->obj);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

/* Whether every block of [off, off+n) is in memory (or on its way). */
static int all_cached(struct objfs_reader *r, int64_t off, size_t n)
{
	size_t bs = objfs_cache_block_size(r->cache);
	uint64_t last = (uint64_t)(off + (int64_t)n - 1) / bs;

	for (uint64_t i = (uint64_t)off / bs; i <= last; i++)
		if (!objfs_cache_has(r->cache, r->obj->cobj.id, i))
			return 0;
	return 1;
}

/* Whether a random read of the object may fetch whole blocks: it fits in a
 * quarter of the cache, and the objects open now fit in the cache together. */
static int whole_fits(struct objfs_reader *r)
{
	size_t cap = objfs_cache_cap(r->cache);

	return (uint64_t)r->obj->size <= cap / 4 && objfs_cache_open_bytes(r->cache) <= cap;
}

/*
 * Pages: the 4 KiB pages around [off, off+n), clamped to the object, into
 * a heap buffer through objfs_cache_fill(); @b describes [off, off+n).
 */
static int read_pages(struct objfs_reader *r, int64_t off, size_t n, struct objfs_reader_buf *b)
{
	int64_t size = r->obj->size;
	int64_t from = off & ~(PAGE - 1);
	int64_t to = (off + (int64_t)n + PAGE - 1) & ~(PAGE - 1);
	char *mem;
	int err;

	if (to > size)
		to = size;
	mem = malloc((size_t)(to - from));
	if (!mem)
		return -ENOMEM;
	err = objfs_cache_fill_wait(r->cache, &r->obj->cobj, from, (size_t)(to - from), mem);
	if (err) {
		free(mem);
		return err;
	}
	b->mem = mem;
	b->one.iov_base = mem + (off - from);
	b->one.iov_len = n;
	b->iov = &b->one;
	b->niov = 1;
	return 0;
}

/* Whole blocks: pinned, @b points into them. */
static int read_blocks(struct objfs_reader *r, int64_t off, size_t n, struct objfs_reader_buf *b)
{
	int err = objfs_cache_pin(r->cache, &r->obj->cobj, off, n, &b->pin);

	if (err)
		return err;
	b->iov = b->pin.iov;
	b->niov = b->pin.n;
	return 0;
}

int objfs_reader_read(struct objfs_reader *r, int64_t off, size_t len,
		      struct objfs_reader_buf *out)
{
	const struct objfs_cache_obj *o = &r->obj->cobj;
	size_t n = objfs_range_clamp(r->obj->size, off, len);
	struct objfs_prefetch_plan plan;
	int err;

	memset(out, 0, sizeof(*out));
	out->iov = &out->one;
	if (n == 0)
		return 0;
	pthread_mutex_lock(&r->lock);
	{
		size_t share = objfs_cache_stream_window(r->cache, r->cfg.drop_lag +
							 objfs_cache_block_size(r->cache));

		objfs_prefetch_set_max(&r->pf, share < r->cfg.window_max ? share : r->cfg.window_max);
	}
	objfs_prefetch_on_read(&r->pf, off, n, r->obj->size, &plan);
	if (r->pf.stream != r->joined) { /* the stream began or ended: the shares change */
		r->joined = r->pf.stream;
		if (r->joined)
			objfs_cache_stream_join(r->cache);
		else
			objfs_cache_stream_leave(r->cache);
	}
	pthread_mutex_unlock(&r->lock);
	if (plan.sequential || whole_fits(r) || all_cached(r, off, n))
		err = read_blocks(r, off, n, out);
	else
		err = read_pages(r, off, n, out);
	if (err) {
		out->iov = &out->one;
		return err;
	}
	out->len = n;
	if (plan.len) {
		int64_t reached;

		objfs_cache_prefetch(r->cache, o, plan.off, plan.len, &reached);
		if (reached < plan.off + (int64_t)plan.len) { /* the cap: asked again next read */
			pthread_mutex_lock(&r->lock);
			if (reached < r->pf.ahead)
				r->pf.ahead = reached;
			pthread_mutex_unlock(&r->lock);
		}
	}
	if (plan.sequential) {
		size_t bs = objfs_cache_block_size(r->cache);

		objfs_cache_drop_behind(r->cache, o, off - (int64_t)r->cfg.drop_lag);
		/* read to the end: its last block too (the kernel's pages hold
		 * it now), so a pass over many small files reuses warm buffers
		 * instead of growing the cache with fresh ones (issue 13) */
		if (off + (int64_t)n >= r->obj->size)
			objfs_cache_drop_behind(r->cache, o, (r->obj->size + (int64_t)bs - 1) /
							   (int64_t)bs * (int64_t)bs);
	}
	return 0;
}

void objfs_reader_release(struct objfs_reader *r, struct objfs_reader_buf *b)
{
	objfs_cache_unpin(r->cache, &b->pin);
	free(b->mem);
	b->mem = NULL;
	b->iov = &b->one;
	b->niov = 0;
	b->len = 0;
}
