/*
 * reader: see reader.h for the policy.
 *
 * The two ways a read is served, side by side:
 *   whole blocks  objfs_cache_pin(): blocks stay in the cache, the reply
 *                 points into them (zero copy), prefetch and drop-behind
 *                 apply;
 *   pages         objfs_cache_fill_wait() of the range rounded out to 4 KiB
 *                 pages into a malloc'd buffer; the reply points at the
 *                 sub-range asked for.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
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
	/* whole blocks once a run has read two: their rounding then costs at
	 * most half of what the run has shown */
	objfs_prefetch_init(&r->pf, 2 * objfs_cache_block_size(cache), cfg->window_max);
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

/*
 * Pages: the 4 KiB pages around [off, off+n), clamped to the object, into
 * a heap buffer through objfs_cache_fill_wait(); @b describes [off, off+n).
 */
static int read_pages(struct objfs_reader *r, int64_t off, size_t n, struct objfs_reader_buf *b,
		      uint64_t *fetched)
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
	err = objfs_cache_fill_wait(r->cache, &r->obj->cobj, from, (size_t)(to - from), mem,
				    fetched);
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
static int read_blocks(struct objfs_reader *r, int64_t off, size_t n, struct objfs_reader_buf *b,
		       uint64_t *fetched)
{
	int err = objfs_cache_pin(r->cache, &r->obj->cobj, off, n, &b->pin);

	if (err)
		return err;
	*fetched = b->pin.fetched;
	b->iov = b->pin.iov;
	b->niov = b->pin.n;
	return 0;
}

/* Feeds the read to the run detector under the lock: *@plan says what to do. */
static void plan_read(struct objfs_reader *r, int64_t off, size_t n,
		      struct objfs_prefetch_plan *plan)
{
	size_t share = objfs_cache_stream_window(r->cache, r->cfg.drop_lag +
					       objfs_cache_block_size(r->cache));

	pthread_mutex_lock(&r->lock);
	objfs_prefetch_set_max(&r->pf, share < r->cfg.window_max ? share : r->cfg.window_max);
	objfs_prefetch_on_read(&r->pf, off, n, r->obj->size, plan);
	if (r->pf.streaming != r->joined) { /* a stream began or ended: the shares change */
		r->joined = r->pf.streaming;
		if (r->joined)
			objfs_cache_stream_join(r->cache);
		else
			objfs_cache_stream_leave(r->cache);
	}
	pthread_mutex_unlock(&r->lock);
}

/*
 * Starts the plan's prefetch; the bytes started. In pages, a read that
 * earned a window is prefetched together with it, from @from (its first
 * page): one request for the read and its window, which the read then
 * joins, not a request for each.
 */
static uint64_t prefetch(struct objfs_reader *r, const struct objfs_prefetch_plan *plan,
			 int64_t from)
{
	const struct objfs_cache_obj *o = &r->obj->cobj;
	int64_t reached, end = plan->off + (int64_t)plan->len;
	uint64_t got;

	if (!plan->len)
		return 0;
	/* whole pages: the next read's pages must not overlap a part-page range */
	end = (end + PAGE - 1) & ~(PAGE - 1);
	if (end > r->obj->size)
		end = r->obj->size;
	if (plan->whole)
		got = objfs_cache_prefetch(r->cache, o, plan->off, plan->len, &reached);
	else
		got = objfs_cache_prefetch_range(r->cache, o, from, (size_t)(end - from), &reached);
	if (reached < (plan->whole ? plan->off + (int64_t)plan->len : end)) { /* the cap */
		pthread_mutex_lock(&r->lock);
		objfs_prefetch_reached(&r->pf, plan->off, reached);
		pthread_mutex_unlock(&r->lock);
	}
	return got;
}

int objfs_reader_read(struct objfs_reader *r, int64_t off, size_t len,
		      struct objfs_reader_buf *out)
{
	const struct objfs_cache_obj *o = &r->obj->cobj;
	size_t n = objfs_range_clamp(r->obj->size, off, len);
	struct objfs_prefetch_plan plan;
	uint64_t fetched = 0, ahead = 0;
	int whole, err;

	memset(out, 0, sizeof(*out));
	out->iov = &out->one;
	if (n == 0)
		return 0;
	plan_read(r, off, n, &plan);
	/* a read of the whole object (a small file read at once) is one block */
	whole = plan.whole || (off == 0 && (int64_t)n == r->obj->size &&
			       (uint64_t)n <= objfs_cache_block_size(r->cache)) ||
		all_cached(r, off, n);
	if (!whole) /* the window first, from the read's first page: the read joins it */
		fetched = prefetch(r, &plan, off & ~(PAGE - 1));
	if (whole)
		err = read_blocks(r, off, n, out, &fetched);
	else
		err = read_pages(r, off, n, out, &ahead);
	if (err) {
		out->iov = &out->one;
		return err;
	}
	out->len = n;
	if (whole)
		fetched += prefetch(r, &plan, plan.off);
	else
		fetched += ahead;
	if (plan.whole)
		objfs_cache_drop_behind(r->cache, o, off - (int64_t)r->cfg.drop_lag);
	if (whole && off + (int64_t)n >= r->obj->size) {
		size_t bs = objfs_cache_block_size(r->cache);

		/* read to the end: its last block too (the kernel's pages hold
		 * it now), so a pass over many small files reuses warm buffers
		 * instead of growing the cache with fresh ones */
		objfs_cache_drop_behind(r->cache, o, (r->obj->size + (int64_t)bs - 1) /
						   (int64_t)bs * (int64_t)bs);
	}
	objfs_cache_note_read(r->cache, (unsigned)plan.kind, n, fetched);
	objfs_debug("read %s [%lld, +%zu): %s, %s, fetched %llu, prefetch [%lld, +%zu)",
		    r->obj->path, (long long)off, n, objfs_read_kind_name(plan.kind),
		    whole ? "blocks" : "pages", (unsigned long long)fetched,
		    (long long)plan.off, plan.len);
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
