/*
 * object: one open object version, named once.
 *
 * open() pins one version of an object: its path, size and ETag as the
 * attributes seen at open said. Everything that reads that version names
 * it through one refcounted struct objfs_object, built here, instead of
 * assembling ETag, store object and cache object by hand in each place:
 * the FUSE handle and its reader (reader.h) hold references; the GPU
 * capability granted through the handle is built from its fields (until
 * side.c holds references too, it keeps copies and borrows the node's
 * path, which outlives the handle). It carries both views the lower layers
 * need, embedded:
 *   - sobj, the store's (objfs_store_fetch's context): every GET is pinned
 *     to the ETag with If-Match and checked against the size, so a changed
 *     object reads as EIO, never as a mix of versions;
 *   - cobj, the block cache's: identity objfs_cache_obj_id(path, ETag,
 *     size), so blocks of two versions never mix, and fetch =
 *     objfs_store_fetch on &sobj (or the fetch given to objfs_object_new,
 *     for tests).
 *
 * Invariants: every field is set by objfs_object_new() and never changes
 * afterwards, so any thread holding a reference reads them without a lock;
 * sobj and cobj point into the object itself (path, etag, id) and are valid
 * exactly as long as a reference is held. A fetch borrows &sobj only for
 * the call that starts it (objfs_store_fetch copies the ETag and builds the
 * request before returning), so blocks still in flight after the last put
 * are safe. The store is borrowed: it outlives every object.
 *
 * Refcount: atomic; objfs_object_get() and objfs_object_put() from any
 * thread; the put that drops the last reference frees.
 */
#ifndef OBJFS_OBJECT_H
#define OBJFS_OBJECT_H

#include <stdatomic.h>
#include <stdint.h>

#include "cache.h"
#include "store.h"

struct objfs_object {
	atomic_uint refs;            /* private: objfs_object_get / _put */
	char *path;                  /* owned: store path of the object */
	char *etag;                  /* owned: pinned ETag, "" when the store gives none */
	int64_t size;                /* pinned size, bytes */
	int64_t mtime;               /* pinned Last-Modified when no ETag, -1 none */
	struct objfs_store *store;   /* borrowed; NULL with a fetch of its own */
	struct objfs_store_obj sobj; /* the store's view: path, etag point at ours */
	struct objfs_cache_obj cobj; /* the cache's view: id owned here */
};

/*
 * Creates the object version (@path, @etag, @size) of @store with one
 * reference for the caller. @path and @etag (NULL: none; fewer than 192
 * bytes) are copied. With no ETag, @mtime (>= 0; -1 none) names the
 * version instead: in the cache identity, and as the Last-Modified every
 * GET's answer must carry (an HTTP index's listing gives mtimes to the
 * second but no ETags; pinning them spares a HEAD per open). @fetch NULL: blocks are fetched with objfs_store_fetch
 * from @store; otherwise with fetch(@fetch_ctx, ...), @fetch_ctx borrowed
 * for the object's life (tests pass a fake store). 0, -EINVAL (negative
 * size, ETag too long, neither @store nor @fetch) or -ENOMEM.
 */
int objfs_object_new(struct objfs_store *store, const char *path, const char *etag,
		     int64_t mtime, int64_t size, objfs_fetch_fn fetch, void *fetch_ctx,
		     struct objfs_object **out);

/* Adds a reference; returns @o. */
struct objfs_object *objfs_object_get(struct objfs_object *o);

/* Drops a reference; the last one frees @o. Accepts NULL. */
void objfs_object_put(struct objfs_object *o);

#endif
