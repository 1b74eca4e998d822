/*
 * prefetch: per-handle access-pattern detection and readahead window.
 *
 * A handle starts hopeful: a read at offset 0, or one that continues where
 * the last read ended (give or take a small seek, forward or backward, as
 * the kernel's concurrent readahead reorders requests), counts as
 * sequential. Sequential reads grow the window from `min_window`, doubling
 * up to `max_window`; the caller then prefetches the window past the read.
 * A read far from the expected offset (other than a jump back to 0) is not
 * sequential: no prefetch, and misses are fetched at the size of the read
 * itself instead of whole cache blocks; one alone leaves the handle
 * hopeful, so the next read that continues it is sequential again. Two far
 * reads in a row switch the handle to random mode; two sequential reads in
 * a row after that start growing again (one alone is chance).
 *
 * Pure state machine (no I/O, no locks): the caller serialises calls per
 * handle. Unit-tested in tests/check_prefetch.c.
 */
#ifndef OBJFS_PREFETCH_H
#define OBJFS_PREFETCH_H

#include <stddef.h>
#include <stdint.h>

struct objfs_prefetch {
	size_t min_window, max_window, window;
	int64_t next;        /* where a sequential read would start */
	int64_t ahead;       /* prefetch issued up to here */
	unsigned seq;        /* sequential reads in a row */
	unsigned rand;       /* far reads in a row */
	int random;          /* random mode */
};

struct objfs_prefetch_plan {
	int sequential;      /* a stream: whole blocks through the block cache */
	int64_t off;         /* prefetch this range (len 0: nothing) */
	size_t len;
};

void objfs_prefetch_init(struct objfs_prefetch *p, size_t min_window, size_t max_window);

/* Feeds one read of @len bytes at @off of a @size-byte object. */
void objfs_prefetch_on_read(struct objfs_prefetch *p, int64_t off, size_t len, int64_t size,
			    struct objfs_prefetch_plan *plan);

#endif
