/*
 * store: backend-independent read path and the per-store state every
 * backend shares (objfs_store_init). See store.h.
 *
 * Stale notes live in the store instance, not in file statics: two mounts
 * in one process (or two stores in one test) keep their own ring and lock,
 * and a freed store's notes go with it.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "hash.h"
#include "log.h"
#include "store.h"

/*
 * Fetches whose answer refused the credentials (ops->refused: S3's
 * ExpiredToken and the like, credentials revoked or rotated before their
 * expiry) are signed anew and sent once more, so a reader does not see
 * EACCES for credentials the source has already replaced. Signing anew
 * may resolve the credentials (IMDS, STS, a credential_process of up to a
 * minute), which must not stall an engine thread and every transfer on
 * it: fetch_op_done, on the engine thread, hands the fetch to this
 * store's resign thread, started at the first such answer, which signs
 * and submits again. The cache waits for its fetches before the store is
 * freed, so the thread has nothing left by then; objfs_store_free stops it.
 */
struct fetch_op;
struct objfs_store_resign {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct fetch_op *head, *tail; /* guarded by lock: waiting to be signed anew */
	pthread_t thread;
	int started, stop;            /* guarded by lock */
};

/*
 * Objects a read of this store found changed (see objfs_store_take_stale):
 * a ring of path hashes. A hash collision costs one needless HEAD at the
 * next open, an entry pushed out of the ring only the wait for attr_timeout.
 */
#define STALE_MAX 64
struct objfs_store_stale {
	pthread_mutex_t lock;
	unsigned next;            /* guarded by lock */
	struct {
		uint64_t h;
		int set;
	} e[STALE_MAX];           /* guarded by lock */
};

static uint64_t path_hash(const char *p)
{
	return objfs_fnv1a(OBJFS_FNV_OFFSET, p);
}

static void stale_note(const struct objfs_store *s, uint64_t h, int err)
{
	struct objfs_store_stale *st = s->stale;

	if (!st || (err != -ESTALE && err != -ENOENT))
		return;
	pthread_mutex_lock(&st->lock);
	st->e[st->next].h = h;
	st->e[st->next].set = 1;
	st->next = (st->next + 1) % STALE_MAX;
	pthread_mutex_unlock(&st->lock);
}

int objfs_store_take_stale(struct objfs_store *s, const char *path)
{
	struct objfs_store_stale *st = s->stale;
	uint64_t h;
	int found = 0;

	if (!st)
		return 0;
	h = path_hash(path);
	pthread_mutex_lock(&st->lock);
	for (unsigned i = 0; i < STALE_MAX; i++) {
		if (st->e[i].set && st->e[i].h == h) {
			st->e[i].set = 0;
			found = 1;
		}
	}
	pthread_mutex_unlock(&st->lock);
	return found;
}

int objfs_store_init(struct objfs_store *s, const struct objfs_store_ops *ops,
		     struct objfs_engine *engine, size_t chunk_size)
{
	s->ops = ops;
	s->engine = engine;
	s->chunk_size = chunk_size;
	s->stale = calloc(1, sizeof(*s->stale));
	s->resign = calloc(1, sizeof(*s->resign));
	if (!s->stale || !s->resign) {
		free(s->stale);
		free(s->resign);
		s->stale = NULL;
		s->resign = NULL;
		return -ENOMEM;
	}
	pthread_mutex_init(&s->stale->lock, NULL);
	pthread_mutex_init(&s->resign->lock, NULL);
	pthread_cond_init(&s->resign->cond, NULL);
	objfs_store_set_limits(s, NULL);
	return 0;
}

/* The bytes one listing of @s may stand for (a store made without
 * objfs_store_init, a test's, has none set). */
static size_t list_max_bytes(const struct objfs_store *s)
{
	return s->lim.max_bytes ? s->lim.max_bytes : OBJFS_LIST_MAX_BYTES;
}

/*
 * A listing's pages on their way to the caller's @page, counted: what the
 * entries delivered so far stand for in the caller's memory. @bytes never
 * passes @max: the page that would is not delivered.
 */
struct list_count {
	objfs_list_page_fn page;
	void *arg;
	size_t bytes, max;
	int over; /* stopped at @max */
};

static int list_count_page(void *arg, const struct objfs_listing *pg, const char *upto)
{
	struct list_count *c = arg;
	size_t b = 0;

	for (size_t i = 0; i < pg->n; i++)
		b += objfs_listent_bytes(&pg->ents[i]);
	if (b > c->max - c->bytes) {
		c->over = 1;
		return -EFBIG;
	}
	c->bytes += b;
	return c->page(c->arg, pg, upto);
}

int objfs_store_list_pages(struct objfs_store *s, const char *path, objfs_list_page_fn page,
			   void *arg)
{
	struct list_count c = { page, arg, 0, list_max_bytes(s), 0 };
	struct objfs_listing l = { .max_bytes = c.max };
	int err;

	if (s->ops->list_pages) {
		err = s->ops->list_pages(s, path, list_count_page, &c);
	} else {
		err = s->ops->list(s, path, &l); /* its appends stop at the bound */
		c.over = err == -EFBIG;
		if (!err)
			err = list_count_page(&c, &l, NULL);
		objfs_listing_clear(&l);
	}
	if (c.over) {
		objfs_store_list_refused(s, path, -EFBIG);
		err = -EIO;
	}
	return err;
}

void objfs_store_set_limits(struct objfs_store *s, const struct objfs_list_limits *lim)
{
	s->lim.max_bytes = lim && lim->max_bytes ? lim->max_bytes : OBJFS_LIST_MAX_BYTES;
	s->lim.max_entries = lim && lim->max_entries ? lim->max_entries : OBJFS_LIST_MAX_ENTRIES;
	s->lim.max_pages = lim && lim->max_pages ? lim->max_pages : OBJFS_LIST_MAX_PAGES;
	s->lim.timeout = lim && lim->timeout > 0 ? lim->timeout : OBJFS_LIST_TIMEOUT;
}

int64_t objfs_store_list_deadline(const struct objfs_store *s)
{
	double t = s->lim.timeout > 0 ? s->lim.timeout : OBJFS_LIST_TIMEOUT;

	return objfs_now_ns() + (int64_t)(t * 1e9);
}

int objfs_store_list_refused(const struct objfs_store *s, const char *path, int err)
{
	switch (err) {
	case -EFBIG:
		objfs_warn("listing '/%s' refused: its entries take more than %zu bytes "
			   "(%.1f MiB) of memory (max_dir_bytes)", path, list_max_bytes(s),
			   (double)list_max_bytes(s) / (1 << 20));
		break;
	case -E2BIG:
		objfs_warn("listing '/%s' refused: more than %zu entries (max_dir_entries)", path,
			   s->lim.max_entries);
		break;
	case -EMLINK:
		objfs_warn("listing '/%s' refused: more than %u pages (max_list_pages)", path,
			   s->lim.max_pages);
		break;
	case -ELOOP:
		objfs_warn("listing '/%s' refused: the server repeated a continuation token "
			   "(a listing that never ends)", path);
		break;
	case -ETIMEDOUT:
		objfs_warn("listing '/%s' refused: not done within %.0f s (list_timeout)", path,
			   s->lim.timeout);
		break;
	default:
		break;
	}
	return err;
}
/* Sets up the ranged GET @r (its URL and headers prepared) of [off,
 * off+len) into @dst, pinned to @etag. */
static void setup_get(struct objfs_req *r, const char *etag, int64_t mtime, int64_t size,
		      int64_t off, size_t len, char *dst)
{
	r->method = OBJFS_GET;
	r->off = off;
	r->len = len;
	r->dst = dst;
	r->expect_size = size;
	r->etag = (etag && etag[0]) ? etag : NULL;
	/* The mtime pin keeps the parts of one object from mixing versions;
	 * one answer with the whole object cannot mix, so a listing whose
	 * mtime is off (stale, or made up) costs small files nothing. */
	r->expect_mtime = r->etag || (off == 0 && (int64_t)len >= size) ? -1 : mtime;
}

/*
 * What a reader sees. Past-EOF from the server means the object shrank (not
 * "no data"), a failed If-Match or a vanished object means it changed, and a
 * refused, reset or timed-out connection is an I/O error to read(2): all EIO.
 * Only "out of memory" and "access denied" say something more useful.
 */
static int read_errno(int err)
{
	if (err == 0 || err == -ENOMEM || err == -EACCES)
		return err;
	return -EIO;
}

int objfs_store_meta_errno(int err)
{
	switch (err) {
	case 0:
	case -ENOENT:
	case -ENOTDIR:
	case -EACCES:
	case -ENOMEM:
		return err;
	default:
		return -EIO;
	}
}

struct fetch_op {
	struct objfs_req r;
	char etag[192];  /* ours: the opener's handle may be released mid-fetch */
	struct objfs_store *s;
	uint64_t path_h; /* for stale_note: the path is not ours to keep */
	void *cookie;
	int64_t mtime, size, off; /* what setup_get needs again for a second send */
	size_t len;
	char *dst;
	int resigned;    /* sent once more after refused credentials */
	struct fetch_op *next; /* on the resign thread's list */
	void (*done)(void *arg, int err);
	void *arg;
};

static void fetch_op_done(struct objfs_req *r);

/* Ends @op with @err: the backend's cookie released, the caller told. */
static void fetch_op_end(struct fetch_op *op, int err)
{
	stale_note(op->s, op->path_h, err);
	objfs_req_clear(&op->r);
	op->s->ops->release(op->s, op->cookie);
	op->done(op->arg, read_errno(err));
	free(op);
}

/* (Re)sends @op's GET; its URL and headers are set. */
static void fetch_op_submit(struct fetch_op *op)
{
	setup_get(&op->r, op->etag, op->mtime, op->size, op->off, op->len, op->dst);
	op->r.done = fetch_op_done;
	op->r.priv = op;
	objfs_engine_submit(op->s->engine, &op->r);
}

static void *resign_main(void *arg)
{
	struct objfs_store *s = arg;
	struct objfs_store_resign *rs = s->resign;

	pthread_mutex_lock(&rs->lock);
	for (;;) {
		struct fetch_op *op = rs->head;
		int err;

		if (!op) {
			if (rs->stop)
				break;
			pthread_cond_wait(&rs->cond, &rs->lock);
			continue;
		}
		rs->head = op->next;
		if (!rs->head)
			rs->tail = NULL;
		pthread_mutex_unlock(&rs->lock);
		objfs_req_clear(&op->r);
		objfs_req_init(&op->r);
		err = s->ops->resign(s, op->cookie, &op->r);
		if (err)
			fetch_op_end(op, err);
		else
			fetch_op_submit(op);
		pthread_mutex_lock(&rs->lock);
	}
	pthread_mutex_unlock(&rs->lock);
	return NULL;
}

/* Hands @op to the resign thread (started now if it is not yet); 0, or
 * -errno when it cannot be started (then @op is the caller's still). */
static int resign_later(struct fetch_op *op)
{
	struct objfs_store_resign *rs = op->s->resign;
	int err = 0;

	pthread_mutex_lock(&rs->lock);
	if (!rs->started && !rs->stop) {
		err = -pthread_create(&rs->thread, NULL, resign_main, op->s);
		if (!err) {
			rs->started = 1;
			pthread_setname_np(rs->thread, "objfs-resign");
		}
	}
	if (!err && rs->stop)
		err = -ESHUTDOWN;
	if (!err) {
		op->next = NULL;
		if (rs->tail)
			rs->tail->next = op;
		else
			rs->head = op;
		rs->tail = op;
		pthread_cond_signal(&rs->cond);
	}
	pthread_mutex_unlock(&rs->lock);
	return err;
}

static void fetch_op_done(struct objfs_req *r)
{
	struct fetch_op *op = r->priv;
	struct objfs_store *s = op->s;

	if (r->err && !op->resigned && s->resign && s->ops->refused && s->ops->resign &&
	    s->ops->refused(s, op->cookie, r)) {
		op->resigned = 1;
		if (!resign_later(op))
			return;
	}
	fetch_op_end(op, r->err);
}

void objfs_store_fetch(void *ctx, int64_t off, size_t len, char *dst,
		       void (*done)(void *arg, int err), void *arg)
{
	const struct objfs_store_obj *o = ctx;
	struct fetch_op *op = calloc(1, sizeof(*op));
	int err;

	if (!op) {
		done(arg, -ENOMEM);
		return;
	}
	if (o->etag)
		snprintf(op->etag, sizeof(op->etag), "%s", o->etag);
	objfs_req_init(&op->r);
	err = o->store->ops->prepare(o->store, o->path, &op->r, &op->cookie);
	if (err) {
		free(op);
		done(arg, read_errno(err));
		return;
	}
	op->s = o->store;
	op->path_h = path_hash(o->path);
	op->mtime = o->mtime;
	op->size = o->size;
	op->off = off;
	op->len = len;
	op->dst = dst;
	op->done = done;
	op->arg = arg;
	fetch_op_submit(op);
}

void objfs_store_free(struct objfs_store *s)
{
	if (!s)
		return;
	if (s->stale) {
		pthread_mutex_destroy(&s->stale->lock);
		free(s->stale);
		s->stale = NULL;
	}
	if (s->resign) {
		struct objfs_store_resign *rs = s->resign;
		int started;

		pthread_mutex_lock(&rs->lock);
		rs->stop = 1; /* what is queued is still signed and sent: the engine lives on */
		started = rs->started;
		pthread_cond_signal(&rs->cond);
		pthread_mutex_unlock(&rs->lock);
		if (started)
			pthread_join(rs->thread, NULL);
		pthread_cond_destroy(&rs->cond);
		pthread_mutex_destroy(&rs->lock);
		free(rs);
		s->resign = NULL;
	}
	s->ops->free(s);
}
