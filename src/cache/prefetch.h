/*
 * prefetch: per-handle access-pattern detection and readahead window.
 *
 * A stream starts at a read at offset 0 (unless the handle is in random
 * mode), or after two reads in a row that each start where the last one
 * ended (within 64 KiB). Inside a stream, a read near the expected offset
 * (within 8 MiB, forward or backward, as the kernel's concurrent readahead
 * reorders requests) continues it; stream reads grow the window from
 * `min_window`, doubling up to `max_window`, and the caller prefetches the
 * window past the read and serves whole blocks. Every other read is served
 * as asked: no prefetch, and misses fetched at the size of the read, not
 * whole cache blocks. A far read ends a stream; two far reads in a row
 * switch the handle to random mode (where even a read at 0 is only a read).
 * One continuation alone never starts a stream: it is chance, or the
 * second FUSE request of one pread split in two.
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
	int stream;          /* a sequential stream: whole blocks, prefetch */
	int64_t origin;      /* where the stream began (0: at the start) */
	size_t proof;        /* see objfs_prefetch_set_proof */
};

struct objfs_prefetch_plan {
	int sequential;      /* a stream: whole blocks through the block cache */
	int64_t off;         /* prefetch this range (len 0: nothing) */
	size_t len;
};

void objfs_prefetch_init(struct objfs_prefetch *p, size_t min_window, size_t max_window);

/*
 * A stream that began mid-object (not at offset 0) is served as asked, with
 * no prefetch, until it has run @bytes contiguously past where it began
 * (default 0: at once). The reader sets one cache block: the kernel splits
 * one large random pread into many contiguous FUSE requests (128 KiB each
 * without readahead), which look like a stream; with this, they cost only
 * the pages asked, and a real stream pays page-granular reads for its
 * first block only.
 */
void objfs_prefetch_set_proof(struct objfs_prefetch *p, size_t bytes);

/*
 * Caps the window at @max (never below min_window): the reader's share of
 * the cache's prefetch room, which shrinks as streams are added.
 */
void objfs_prefetch_set_max(struct objfs_prefetch *p, size_t max);

/* Feeds one read of @len bytes at @off of a @size-byte object. */
void objfs_prefetch_on_read(struct objfs_prefetch *p, int64_t off, size_t len, int64_t size,
			    struct objfs_prefetch_plan *plan);

#endif
