/*
 * store: backend-independent read path. See store.h.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "hash.h"
#include "store.h"

/*
 * Objects a read found changed (see objfs_store_take_stale). A ring of
 * (store, path hash): a hash collision costs one needless HEAD at the next
 * open, an entry pushed out of the ring only the wait for attr_timeout.
 */
#define STALE_MAX 64
static struct {
	const struct objfs_store *s;
	uint64_t h;
} stale[STALE_MAX];
static unsigned stale_next;
static pthread_mutex_t stale_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t path_hash(const char *p)
{
	return objfs_fnv1a(OBJFS_FNV_OFFSET, p);
}

static void stale_note(const struct objfs_store *s, uint64_t h, int err)
{
	if (err != -ESTALE && err != -ENOENT)
		return;
	pthread_mutex_lock(&stale_lock);
	stale[stale_next].s = s;
	stale[stale_next].h = h;
	stale_next = (stale_next + 1) % STALE_MAX;
	pthread_mutex_unlock(&stale_lock);
}

int objfs_store_take_stale(struct objfs_store *s, const char *path)
{
	uint64_t h = path_hash(path);
	int found = 0;

	pthread_mutex_lock(&stale_lock);
	for (unsigned i = 0; i < STALE_MAX; i++) {
		if (stale[i].s == s && stale[i].h == h) {
			stale[i].s = NULL;
			found = 1;
		}
	}
	pthread_mutex_unlock(&stale_lock);
	return found;
}

/* Sets up @r as a ranged GET of [off, off+len) into @dst, pinned to @etag. */
static int prep_get(struct objfs_store *s, const char *path, const char *etag, int64_t size,
		    int64_t off, size_t len, char *dst, struct objfs_req *r, void **cookie)
{
	int err;

	objfs_req_init(r);
	err = s->ops->prepare(s, path, r, cookie);
	if (err)
		return err;
	r->method = OBJFS_GET;
	r->off = off;
	r->len = len;
	r->dst = dst;
	r->expect_size = size;
	r->etag = (etag && etag[0]) ? etag : NULL;
	return 0;
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
	void (*done)(void *arg, int err);
	void *arg;
};

static void fetch_op_done(struct objfs_req *r)
{
	struct fetch_op *op = r->priv;
	int err = read_errno(r->err);

	stale_note(op->s, op->path_h, r->err);
	objfs_req_clear(&op->r);
	op->s->ops->release(op->s, op->cookie);
	op->done(op->arg, err);
	free(op);
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
	err = prep_get(o->store, o->path, op->etag, o->size, off, len, dst, &op->r, &op->cookie);
	if (err) {
		free(op);
		done(arg, read_errno(err));
		return;
	}
	op->s = o->store;
	op->path_h = path_hash(o->path);
	op->done = done;
	op->arg = arg;
	op->r.done = fetch_op_done;
	op->r.priv = op;
	objfs_engine_submit(o->store->engine, &op->r);
}

void objfs_store_free(struct objfs_store *s)
{
	if (s)
		s->ops->free(s);
}
