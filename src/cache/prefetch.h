/*
 * prefetch: where one handle's reads land, and what each read should fetch.
 *
 * Reads are classified by where they land, not by the handle's history: a
 * handle tracks a few runs (streams) at once, as an HDF5 or Parquet reader
 * walks a header, then jumps to a chunk, then reads it through. A read
 * that continues a run (starts within a small slack of where the run
 * ended) extends it; any other read starts a new candidate run in the
 * least recently used slot, so a jump never erases what other runs have
 * shown.
 *
 *   random      a read that continues nothing, or only the first
 *               continuation of a run (chance, or the second FUSE request
 *               of one pread split in two): served as asked, rounded to
 *               4 KiB pages, no prefetch.
 *   sequential  the second and later continuations: the run has read
 *               `evidence` bytes contiguously, and earns a prefetch window
 *               of half that (at most the cache's share, max_window). A run
 *               that has read a whole cache block is served in whole blocks
 *               (zero copy, block-sized prefetch); a shorter one in pages.
 *   around      a read inside a run's recent past or just ahead of it (the
 *               kernel's readahead requests arrive out of order; an mmap
 *               fault asks for a read-around window centred on the fault):
 *               served like the run, with no new prefetch.
 *
 * Why half the evidence: a run that stops (a zip member, a column chunk)
 * then over-fetches at most half of what it read, while one that goes on
 * still doubles its window each time it reads the last one; the kernel's
 * own readahead already runs ahead of the program.
 *
 * Pure state machine (no I/O, no locks): the caller serialises calls per
 * handle. Unit-tested in tests/check_prefetch.c.
 */
#ifndef OBJFS_PREFETCH_H
#define OBJFS_PREFETCH_H

#include <stddef.h>
#include <stdint.h>

#define OBJFS_PREFETCH_RUNS 4

enum objfs_read_kind { OBJFS_READ_RANDOM, OBJFS_READ_SEQ, OBJFS_READ_AROUND, OBJFS_READ_KINDS };

struct objfs_prefetch_run {
	int64_t origin;      /* where its contiguous reads began */
	int64_t next;        /* where the next read would start */
	int64_t ahead;       /* prefetch issued up to here */
	unsigned reads;      /* reads that extended it (1: just started) */
	uint64_t used;       /* last use, for replacement */
};

struct objfs_prefetch {
	size_t max_window;   /* the cache's share for one handle */
	size_t whole;        /* evidence that earns whole blocks (a cache block) */
	uint64_t clock;
	struct objfs_prefetch_run run[OBJFS_PREFETCH_RUNS];
	int streaming;       /* some run is sequential (counted in the cache's streams) */
};

struct objfs_prefetch_plan {
	enum objfs_read_kind kind;
	int whole;           /* serve in whole blocks */
	int64_t off;         /* prefetch this range (len 0: nothing) */
	size_t len;
};

/* @whole: the evidence that earns whole-block service (the cache block);
 * @max_window: the largest window. */
void objfs_prefetch_init(struct objfs_prefetch *p, size_t whole, size_t max_window);

/* Caps the window at @max: the handle's share of the cache's prefetch room,
 * which shrinks as streams are added. */
void objfs_prefetch_set_max(struct objfs_prefetch *p, size_t max);

/* Feeds one read of @len bytes at @off of a @size-byte object; *@plan says
 * how to serve it and what to prefetch. */
void objfs_prefetch_on_read(struct objfs_prefetch *p, int64_t off, size_t len, int64_t size,
			    struct objfs_prefetch_plan *plan);

/* The prefetch of a run reached only @reached (the cache's cap): it is
 * asked again from there next time. */
void objfs_prefetch_reached(struct objfs_prefetch *p, int64_t from, int64_t reached);

/* The kind's name, for logs and counters: "random", "sequential", "around". */
const char *objfs_read_kind_name(enum objfs_read_kind k);

#endif
