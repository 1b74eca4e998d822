/*
 * fetch: the shape of an asynchronous ranged fetch, shared by the block
 * cache (which calls one per block) and the disk cache (which sits between
 * the block cache and the store and calls the same shape through).
 * objfs_store_fetch() is the real one; tests pass fakes.
 */
#ifndef OBJFS_FETCH_H
#define OBJFS_FETCH_H

#include <stddef.h>
#include <stdint.h>

/*
 * Fetches [off, off+len) of the object @ctx into @dst and calls
 * done(arg, err) exactly once, from any thread, without holding cache locks.
 */
typedef void (*objfs_fetch_done_fn)(void *arg, int err);
typedef void (*objfs_fetch_fn)(void *ctx, int64_t off, size_t len, char *dst,
			       objfs_fetch_done_fn done, void *arg);

#endif
