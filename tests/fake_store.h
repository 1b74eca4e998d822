/*
 * fake_store: the store that unit tests fetch from, shared by the cache
 * and reader tests, so that no test file has a fake fetch of its own.
 *
 * An object's bytes are a pure function of (salt, offset): no memory is
 * needed for objects of any size, and a wrong byte anywhere -- from another
 * offset, another object version (another salt) or a stale buffer -- shows.
 * fake_store_fetch() has the shape of objfs_fetch_fn with a struct
 * fake_store as its context and completes on a thread of its own after
 * delay_us, as the engine does on its threads. It counts fetches and bytes,
 * keeps the largest single fetch, and fails the next fail_next fetches with
 * -EIO (failure injection). Zero-initialise, then set what the test needs:
 * struct fake_store f = { .salt = 7 };
 */
#ifndef OBJFS_FAKE_STORE_H
#define OBJFS_FAKE_STORE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fetch.h"

struct fake_store {
	unsigned char salt;    /* the byte pattern differs per object version */
	int delay_us;          /* each fetch completes this late, on its own thread */
	atomic_int calls;      /* fetches started */
	atomic_llong bytes;    /* bytes asked for by those fetches */
	atomic_llong max_len;  /* the largest single fetch */
	atomic_int fail_next;  /* fail this many fetches with -EIO */
	atomic_int hold;       /* while set, fetches in flight do not complete */
};

/* The byte at @off of the object @f serves. */
unsigned char fake_store_byte(const struct fake_store *f, int64_t off);

/* objfs_fetch_fn on @ctx, a struct fake_store (borrowed until done runs). */
void fake_store_fetch(void *ctx, int64_t off, size_t len, char *dst, objfs_fetch_done_fn done,
		      void *arg);

/* How many leading bytes of @buf match [off, off+len) of @f: @len when all do. */
size_t fake_store_check(const struct fake_store *f, const char *buf, int64_t off, size_t len);

#endif
