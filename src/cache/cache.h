/*
 * cache: the shared in-memory block cache every read goes through.
 *
 * Objects are cut into fixed-size blocks (block_size bytes, the last one
 * short). A block is identified by the object's identity string (backend
 * path, ETag and size: a changed object has another identity, so old and new
 * bytes never mix) and its index. Blocks are refcounted; unreferenced ready
 * blocks sit on an LRU list and are evicted to keep the total under the
 * memory cap. A missing block is fetched once however many readers want it
 * (single flight): the first miss creates the block in LOADING state and
 * starts the fetch; later readers take a reference and wait.
 *
 * The cap is hard for what the cache keeps; blocks that readers hold or that
 * are being fetched are counted too, as are the buffers fills receive into
 * before the bytes go to the caller (a fill with no room gets none: it
 * receives straight into the caller's memory and keeps nothing), and
 * prefetching (objfs_cache_prefetch) is refused when it would exceed the
 * cap, so memory stays bounded while demand reads still always make
 * progress.
 *
 * Two ways in, and every read takes one of them (the read policy that
 * chooses is reader.h's, per open handle; the GPU side API always fills):
 *   - objfs_cache_pin(): whole blocks, kept; the caller gets iovecs into
 *     block memory (sequential FUSE reads, small objects, cached blocks);
 *   - objfs_cache_fill(): a range into the caller's memory; cached blocks
 *     are copied, the disk cache is read, the rest is fetched straight
 *     into the caller's memory in runs and not kept (random FUSE reads of
 *     large objects, page-granular; GPU fills into the ring).
 * With a disk cache under it (objfs_cache_set_disk) both ways read what the
 * disk holds before going to the network.
 *
 * Locking: one mutex guards the hash, the LRU and every block's state;
 * block data is written only by the fetch that owns a LOADING block and read
 * only once the block is READY, so copies happen outside the lock. It is
 * held briefly and taken by many threads at once (every fill worker of the
 * GPU side API, twice a fill): an adaptive mutex, which spins before it
 * sleeps (objfs_cache_new).
 */
#ifndef OBJFS_CACHE_H
#define OBJFS_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "fetch.h"

struct objfs_cache;
struct objfs_block;

/* The read policy's decisions the cache counts (reader.h: random,
 * sequential, around), in that order. */
#define OBJFS_CACHE_READ_KINDS 3

/* What the cache needs to fetch blocks of one open object. Borrowed. */
struct objfs_cache_obj {
	const char *id;       /* identity: path, ETag and size (objfs_cache_obj_id) */
	int64_t size;         /* pinned size */
	objfs_fetch_fn fetch; /* objfs_store_fetch for real stores */
	void *ctx;            /* fetch's first argument */
};

struct objfs_cache_stats {
	uint64_t hits, misses, waits;     /* block lookups */
	uint64_t fetches, fetch_bytes, fetch_errors;
	uint64_t direct_bytes;            /* fetched into callers' memory (fill) */
	uint64_t ranges_kept;             /* page ranges of blocks kept (fills, range prefetch) */
	uint64_t refetched_bytes;         /* asked of the store again while the object
					     was open (whole 4 KiB pages) */
	/* per read-policy decision (objfs_cache_note_read): reads, bytes read,
	 * bytes asked of the disk or the store for them and their prefetch */
	uint64_t reads[3], read_bytes[3], read_fetched[3];
	uint64_t prefetched, prefetch_unused; /* blocks, and those evicted unread */
	uint64_t evictions;
	uint64_t wait_us;                 /* readers' time waiting for blocks in flight */
	uint64_t prefetch_capped;         /* prefetches cut short: no room under the cap */
	size_t bytes, cap;                /* current and cap */
	size_t pool_bytes;                /* freed buffers kept for reuse, within the cap */
};

/* @cap bytes of block memory, blocks of @block_size bytes. 0 or -errno. */
int objfs_cache_new(size_t cap, size_t block_size, struct objfs_cache **out);
/* Waits for fetches in flight, frees everything. Accepts NULL. */
void objfs_cache_free(struct objfs_cache *c);

size_t objfs_cache_block_size(const struct objfs_cache *c);
/* The memory cap given to objfs_cache_new(), bytes. */
size_t objfs_cache_cap(const struct objfs_cache *c);

/*
 * The prefetch budget shared by every sequential stream of the cache:
 * three quarters of the cache hold the streams, split evenly between those
 * running; each stream's share holds @reserve bytes besides its window
 * (the blocks it reads and those it keeps behind, drop_lag), and the rest
 * is its window (the reader still gives it its minimum window). A reader
 * joins when its handle starts a stream and leaves when the stream ends
 * or the handle closes; objfs_cache_stream_window says its window now.
 * Why: with 16 readers each allowed 64 MiB, windows summed to the whole
 * 1 GiB cache, streams evicted each other's prefetched blocks before they
 * were read, and objfs fetched 1.44x the bytes it served.
 */
void objfs_cache_stream_join(struct objfs_cache *c);
void objfs_cache_stream_leave(struct objfs_cache *c);
size_t objfs_cache_stream_window(const struct objfs_cache *c, size_t reserve);

/*
 * The objects open through readers, each registered once however many
 * handles read it: while open, the pages fetched of it are tracked, and
 * fetching one again counts in refetched_bytes. objfs_cache_open_obj() when
 * a reader of (@id, @size) is made (0, or -ENOMEM: not registered, so not
 * to be closed), objfs_cache_close_obj() when it is freed.
 */
int objfs_cache_open_obj(struct objfs_cache *c, const char *id, int64_t size);
void objfs_cache_close_obj(struct objfs_cache *c, const char *id);

/* Writes the identity string of (path, etag, size) into a malloc'd string. */
char *objfs_cache_obj_id(const char *path, const char *etag, int64_t size);

/*
 * Copies @len bytes at @off of @o into @buf, fetching missing blocks (in
 * parallel) through the store. The range must lie inside the object.
 * Returns 0 or -errno; on error @buf must not be delivered.
 */
int objfs_cache_read(struct objfs_cache *c, const struct objfs_cache_obj *o, int64_t off,
		     size_t len, char *buf);

/*
 * Fills @dst with [off, off+len) of @o for a consumer that owns @dst until
 * done() -- the side API's ring, a reader's page buffer -- at the least
 * cost per byte, and never asking the store twice for what memory holds:
 *   - whole blocks the cache holds or is fetching are copied (single flight);
 *   - in a block held only in part (kept page ranges), the ranges are
 *     copied, ranges in flight are joined, and only the gaps are fetched;
 *   - a piece of a quarter block or less that memory lacks (a sample, a
 *     random reader's pages) is fetched as a new kept range of its block,
 *     which later fills copy or join (a block read whole later is made of
 *     its ranges plus what is missing);
 *   - larger pieces (streams, GPU fills) are read from the disk cache when
 *     it has them (objfs_diskcache_has_range), else fetched straight into
 *     @dst in runs of neighbouring blocks and not kept (with a disk cache,
 *     their pages are written behind from copies, objfs_diskcache_put_range).
 * Never waits for the network: the bytes of fetches in flight are copied
 * by the thread that ends them. done(arg, err) is called exactly once,
 * from any thread, possibly before this returns; on error @dst must not be
 * delivered. @o must stay valid until done().
 */
void objfs_cache_fill(struct objfs_cache *c, const struct objfs_cache_obj *o, int64_t off,
		      size_t len, char *dst, unsigned flags, objfs_fetch_done_fn done, void *arg);

/* objfs_cache_fill()'s @flags. */
#define OBJFS_FILL_DEVICE 1u /* @dst is read next by a device, not by this CPU (a GPU
			       * ring slot): bytes from memory are copied with
			       * streaming stores (objfs_copy_stream, util/buf.h) */

/* objfs_cache_fill(), waited for: 0 or -errno (then @dst must not be
 * delivered). *@fetched (may be NULL): the bytes it asked of the disk or the store. */
int objfs_cache_fill_wait(struct objfs_cache *c, const struct objfs_cache_obj *o, int64_t off,
			  size_t len, char *dst, uint64_t *fetched);

/*
 * Zero-copy access: pins the blocks covering [off, off+len) of @o (fetching
 * what is missing) and describes the bytes as iovecs into block memory,
 * valid until objfs_cache_unpin(). On error nothing stays pinned.
 */
struct objfs_cache_pin {
	size_t n;                    /* blocks pinned = iovecs used */
	uint64_t fetched;            /* bytes it asked of the disk or the store */
	struct objfs_block **blocks; /* owned by the pin */
	struct iovec *iov;           /* owned by the pin */
};
int objfs_cache_pin(struct objfs_cache *c, const struct objfs_cache_obj *o, int64_t off,
		    size_t len, struct objfs_cache_pin *pin);
/* Releases a pin made by objfs_cache_pin(); accepts an empty pin. */
void objfs_cache_unpin(struct objfs_cache *c, struct objfs_cache_pin *pin);

/*
 * Starts fetching the blocks covering [off, off+len) of @o that are not
 * cached, without waiting, as long as the cache has room. Returns the
 * number of bytes of fetches started; *@reached (may be NULL) is where the
 * blocks cached, in flight or started end: off + len, or the first block
 * the cap (or memory) refused.
 */
size_t objfs_cache_prefetch(struct objfs_cache *c, const struct objfs_cache_obj *o,
			    int64_t off, size_t len, int64_t *reached);

/*
 * The page-granular prefetch of a stream that has not yet earned whole
 * blocks: the 4 KiB pages of [off, off+len) that neither a block nor a
 * kept range holds or is fetching are fetched, without waiting, as kept
 * ranges, one request for each gap in each block, which reads copy or join. Returns the
 * bytes started; *@reached as objfs_cache_prefetch's (the cap stops it).
 * @o need not outlive the call.
 */
size_t objfs_cache_prefetch_range(struct objfs_cache *c, const struct objfs_cache_obj *o,
				  int64_t off, size_t len, int64_t *reached);

/* Counts one read of @len bytes by the read policy's decision @kind
 * (< OBJFS_CACHE_READ_KINDS) that asked @fetched bytes of the disk or the store. */
void objfs_cache_note_read(struct objfs_cache *c, unsigned kind, size_t len, uint64_t fetched);

/*
 * Drop-behind: a sequential reader of @o is at @off, so the block before
 * the one holding @off will likely not be read again through us. It moves
 * to the LRU tail and its buffer is the first reused for a new block.
 */
void objfs_cache_drop_behind(struct objfs_cache *c, const struct objfs_cache_obj *o,
			     int64_t off);

/*
 * Puts the disk cache @dc (borrowed; freed after the cache) under the cache:
 * every block fetch then goes through objfs_diskcache_fetch(), and fetched
 * blocks are written behind from the blocks themselves, held by a
 * reference until written (at most half the cap held so). Call before the
 * first read. objfs_cache_free() waits for those writes.
 */
struct objfs_diskcache;
void objfs_cache_set_disk(struct objfs_cache *c, struct objfs_diskcache *dc);

/* Whether block @idx of @o is cached or being fetched. */
int objfs_cache_has(struct objfs_cache *c, const char *id, uint64_t idx);

void objfs_cache_get_stats(struct objfs_cache *c, struct objfs_cache_stats *st);

#endif
