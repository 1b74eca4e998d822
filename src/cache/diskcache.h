/*
 * diskcache: a persistent chunk cache on local disk, under the block cache,
 * driven by io_uring (liburing) on the disk cache's own thread.
 *
 * Every block the in-memory cache fetches goes through
 * objfs_diskcache_fetch(): an index hit is read from its chunk file (one
 * readv of metadata + data, completed and verified on the disk thread); a miss
 * goes to the network through the block's own fetch and, once the bytes are
 * there, is queued for the disk thread to write out (write-behind). FUSE
 * threads never wait for disk writes; engine threads only queue them.
 *
 * Write-behind holds the fetched buffer itself -- the block cache's block,
 * READY and immutable, kept by a reference (objfs_diskcache_set_holder) --
 * instead of a copy, so it costs no memory beyond the block cache and no
 * memcpy. At most max_bytes are held at once; only beyond that is a write
 * dropped (counted in writes_dropped). Measured on the 2-core development
 * VM, cold 1 GiB read then a second mount: the earlier design, a 64 MiB
 * queue of copies, dropped 154 of 256 chunk writes, so the second epoch
 * read only 40% from disk; see diskcache.c for the figures since.
 *
 * A chunk file holds one block, or the pages of it that were fetched: a
 * random reader fetches only the 4 KiB pages it needs (a 4 KiB read must not
 * cost a 4 MiB GET), and objfs_diskcache_put_range() keeps those too, so the
 * same random reads in the next epoch -- after a remount as well -- are
 * local. A partial chunk records which pages are valid; more pages of the
 * block merge into it, and once they cover the block it is a whole chunk,
 * as if the block had been written in one piece.
 *
 * A chunk file is named by a 128-bit hash of its identity (the mounted
 * source, the block size, the block cache identity of the object -- path,
 * ETag and size -- and the block index) and starts with a metadata area
 * (format 2, diskcache_i.h) that holds the full identity, the block's
 * length, which pages are valid, a checksum of each page and one of the
 * metadata; the data follows at a 4 KiB aligned offset. A page is served
 * only when all of it matches: a hash collision, a stale or foreign file, a
 * torn or flipped-bit file is a miss (deleted, then fetched from the
 * network), never data; a read checks the pages it reads. A changed object
 * has a new ETag, so a new identity; its old files age out through the LRU.
 * Files of format 1 (whole blocks, one checksum) are removed at open.
 *
 * Never a failed read: anything that goes wrong on the disk side ends either
 * in a network fetch or in OBJFS_DISKCACHE_RETRY, on which the block cache
 * fetches the block again (the index entry is gone by then, so the retry goes
 * to the network). A full or failing disk (ENOSPC, EIO, EDQUOT, EROFS)
 * switches the disk cache off for the rest of the mount, with one log line.
 */
#ifndef OBJFS_DISKCACHE_H
#define OBJFS_DISKCACHE_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "fetch.h"

/* A fetch's error meaning "the disk copy was unusable, fetch it again". */
#define OBJFS_DISKCACHE_RETRY (-EBADMSG)

struct objfs_diskcache;

struct objfs_diskcache_cfg {
	const char *dir;       /* cache directory, created if missing; borrowed */
	uint64_t cap;          /* bytes of chunk files (metadata and valid pages), at most */
	const char *source;    /* what is mounted (SOURCE and S3 endpoint); borrowed */
	size_t block_size;     /* the block cache's block size */
};

struct objfs_diskcache_stats {
	uint64_t hits, misses;        /* lookups: served from disk / not indexed */
	uint64_t bad;                 /* chunk files that failed verification */
	uint64_t read_errors;         /* reads that failed (missing file, I/O) */
	uint64_t writes, write_bytes; /* chunk writes (new chunks, pages merged) and their data */
	uint64_t writes_dropped;      /* not written: bound reached, off, error */
	uint64_t evictions;           /* files removed to stay under the cap */
	uint64_t files, bytes, cap;   /* now */
	int degraded;                 /* 1: switched off after a disk error */
};

/*
 * Opens (creating) the cache in cfg->dir: takes an exclusive flock on
 * DIR/lock (a second mount on the same directory gets -EBUSY and a message
 * naming the directory), indexes the chunk files already there (whole
 * chunks by name and size, checked lazily when read; partial chunks by
 * their metadata, read and checked here), trims them to the cap and starts
 * the disk thread. On failure returns -errno with a one-line reason in @err.
 * The caller owns *@out and frees it with objfs_diskcache_free().
 */
int objfs_diskcache_open(const struct objfs_diskcache_cfg *cfg, struct objfs_diskcache **out,
			 char *err, size_t errlen);

/*
 * Writes out the queued chunks (releasing their buffers), stops the disk
 * thread, releases the lock. No fetch may be in flight, and the holder's
 * buffers must still be alive: the block cache flushes the disk cache
 * before it frees its blocks (objfs_cache_free), then this frees it.
 * Accepts NULL.
 */
void objfs_diskcache_free(struct objfs_diskcache *dc);

/*
 * The block cache's fetch with the disk in between: fills @dst with block
 * @idx ([off, off+len)) of the object whose block cache identity is @id and
 * calls done(arg, err) exactly once, from any thread: 0 (from disk, or from
 * inner()), inner's error, or OBJFS_DISKCACHE_RETRY. inner(inner_ctx, ...)
 * is only ever called before this function returns, so @inner_ctx is
 * borrowed for the call only; @id too. Only a whole chunk is a hit; a
 * block fetched from the network is written behind whole, completing a
 * partial chunk of it.
 */
void objfs_diskcache_fetch(struct objfs_diskcache *dc, const char *id, uint64_t idx,
			   objfs_fetch_fn inner, void *inner_ctx, int64_t off, size_t len,
			   char *dst, objfs_fetch_done_fn done, void *arg);

/*
 * Reads block @idx of @id ([len] bytes) from disk into @dst when the index
 * holds it, with no network fallback and no write-behind: for callers whose
 * @dst is not a block cache block (the side API's ring). Returns 0 when the
 * read is queued -- then done(arg, err) follows once, from the disk thread,
 * with 0 or OBJFS_DISKCACHE_RETRY (the copy was bad and is gone) -- or
 * -ENOENT (not cached) / -ENOMEM, and then done() is never called.
 */
int objfs_diskcache_read(struct objfs_diskcache *dc, const char *id, uint64_t idx, size_t len,
			 char *dst, objfs_fetch_done_fn done, void *arg);

/*
 * Queues a write-behind of block @idx of @id from a copy of @data (@len
 * bytes, the whole block), for fetches that did not land in a block cache
 * block (GPU fills straight into the ring): put_range() of the whole block.
 * The copy is made before this returns; it counts against the write-behind
 * bound like held blocks and is dropped (counted) beyond it. Nothing
 * happens when the chunk is cached or being written already; a partial
 * chunk of the block is completed.
 */
void objfs_diskcache_put(struct objfs_diskcache *dc, const char *id, uint64_t idx,
			 const char *data, size_t len);

/*
 * Enables write-behind. For a miss fetched without error, hold(arg) -- the
 * fetch's done() argument -- is called before done(arg, 0) and must keep
 * the fetch's @dst alive and unchanged; release(arg) is called once the
 * chunk is written or dropped, from the disk thread (never with disk cache
 * locks held; it may free the buffer). At most @max_bytes of buffers are
 * held at once: beyond that a miss is not written (writes_dropped). Call
 * before the first fetch. Without a holder, misses are not written at all.
 */
void objfs_diskcache_set_holder(struct objfs_diskcache *dc, void (*hold)(void *arg),
				void (*release)(void *arg), size_t max_bytes);

/*
 * Waits until every queued chunk write has finished or been dropped: then
 * no buffer is held any more (every release() has returned).
 */
void objfs_diskcache_flush(struct objfs_diskcache *dc);

/* Whether the index holds a readable chunk for block @idx of @id: the whole
 * block (a partial chunk does not count). */
int objfs_diskcache_has(struct objfs_diskcache *dc, const char *id, uint64_t idx);

/*
 * Partial blocks. Offsets are relative to the block's start; a page is 4096
 * bytes of the block (the last one may be short). @id is borrowed for the
 * call only.
 *
 * Whether the index holds block @idx of @id with every byte of [off,
 * off+len) valid: a whole chunk, or a partial chunk whose valid pages cover
 * the range. Answered from memory (no I/O): cheap enough for FUSE threads.
 * 0 for len 0 and for a range beyond the block.
 */
int objfs_diskcache_has_range(struct objfs_diskcache *dc, const char *id, uint64_t idx,
			      size_t off, size_t len);

/*
 * Reads [off, off+len) of block @idx of @id into @dst (@len bytes, any
 * alignment, borrowed until done() is called) when has_range() holds,
 * verified (only the pages read are checked) before done(arg, 0). Like
 * objfs_diskcache_read: returns 0 when queued -- then done(arg, err) follows
 * once, from the disk thread, with 0 or OBJFS_DISKCACHE_RETRY (the copy was
 * bad and is gone) -- or -ENOENT (not cached, or not all of the range) /
 * -ENOMEM, and then done() is never called.
 */
int objfs_diskcache_read_range(struct objfs_diskcache *dc, const char *id, uint64_t idx,
			       size_t off, size_t len, char *dst, objfs_fetch_done_fn done,
			       void *arg);

/*
 * Queues a write-behind of [off, off+len) of block @idx of @id, whose full
 * length is @block_len, from a copy of @data made before this returns.
 * @off is a multiple of 4096 and @len is too unless off+len == block_len
 * (anything else, or a @block_len beyond the block size, is ignored). The
 * pages are merged into the chunk's existing pages; a chunk whose pages
 * cover the block is a whole chunk (has() holds). Counts against the
 * write-behind bound like objfs_diskcache_put (dropped and counted beyond
 * it); nothing happens for pages already valid.
 */
void objfs_diskcache_put_range(struct objfs_diskcache *dc, const char *id, uint64_t idx,
			       size_t block_len, size_t off, const char *data, size_t len);

/*
 * Writes the chunk file path of block @idx of @id into @buf (@cap bytes):
 * the partial chunk's name while the index holds a partial chunk, else the
 * whole one's.
 * 0, or -ENAMETOOLONG when it does not fit (or the identity is too long to
 * be cached at all).
 */
int objfs_diskcache_chunk_path(struct objfs_diskcache *dc, const char *id, uint64_t idx,
			       char *buf, size_t cap);

void objfs_diskcache_get_stats(struct objfs_diskcache *dc, struct objfs_diskcache_stats *st);

#endif
