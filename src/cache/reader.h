/*
 * reader: the read policy of one open handle. The FUSE layer asks "read
 * [off, off+len) of this open object" and replies with what it gets back;
 * everything about how the bytes are found lives here (as mountpoint-s3's
 * read is request.read(offset, size) with the prefetcher owning the
 * policy). The reader decides what to fetch; the cache (cache.h) carries
 * it out from memory, the disk cache or the store.
 *
 * One objfs_reader_read():
 *   1. clamps the range to the object's pinned size (0 bytes at or past
 *      EOF, and for len 0);
 *   2. feeds it to the handle's run detector (prefetch.h), which says
 *      random, sequential or around, whether the run has earned whole
 *      blocks, and what window to prefetch (half the run's evidence);
 *   3. serves it
 *      - in whole blocks, pinned and returned as iovecs into block memory
 *        (zero copy), when its run has read a whole block already or every
 *        block it touches is in memory;
 *      - otherwise in 4 KiB pages through objfs_cache_fill_wait() into a
 *        heap buffer: memory's blocks and kept ranges are copied, ranges
 *        in flight joined, and only the missing pages fetched, kept as
 *        ranges for the next read. A 4 KiB read costs a 4 KiB GET, not a
 *        block: SQLite's pages are 4 KiB, HDF5 rows are read as asked, and
 *        locality is left to run detection, not to a coarser granule;
 *   4. prefetches the window (whole blocks, or pages for a young run) and,
 *      in whole-block runs, marks the block cfg.drop_lag bytes behind the
 *      reader for reuse first (drop-behind);
 *   5. counts the read by decision, with the bytes it asked of the disk or
 *      the store (objfs_cache_note_read), and logs the decision at debug.
 *
 * The reply stays valid until objfs_reader_release(), which unpins the
 * blocks or frees the buffer. Nothing large is kept on the stack.
 *
 * Thread safety: reads of one reader may run concurrently (FUSE worker
 * threads): the run detector has its own lock, held only to feed it;
 * everything else is the cache's. The reader holds one reference on its
 * object and borrows the cache, which must outlive it.
 */
#ifndef OBJFS_READER_H
#define OBJFS_READER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "cache.h"
#include "object.h"

struct objfs_reader;

struct objfs_reader_cfg {
	size_t window_max; /* largest prefetch window, bytes */
	/*
	 * Drop-behind lags the reader by this many bytes. The kernel's
	 * readahead requests reach the worker threads out of order, and a block
	 * dropped before its last read lands is fetched twice: fs.c passes
	 * twice the kernel readahead (measured: 10% over-fetch without the lag).
	 */
	size_t drop_lag;
};

/*
 * What one read returns: @len bytes as @niov iovecs, in order, valid until
 * objfs_reader_release(). The struct must not be copied (iov may point
 * into it). niov 0 and len 0 at EOF.
 */
struct objfs_reader_buf {
	const struct iovec *iov;
	size_t niov;
	size_t len;
	/* private to reader.c */
	struct objfs_cache_pin pin;
	char *mem;
	struct iovec one;
};

/*
 * Creates the reader of one open handle of @obj (the reader takes its own
 * reference) on @cache (borrowed; outlives the reader). @cfg is copied.
 * 0 or -ENOMEM.
 */
int objfs_reader_new(struct objfs_cache *cache, struct objfs_object *obj,
		     const struct objfs_reader_cfg *cfg, struct objfs_reader **out);

/*
 * The file was just opened and the kernel holds none of its pages: an
 * object of one block or less (the small-file shape: 100 KiB images) is
 * fetched now, without waiting, so its GET runs while the open's answer
 * goes back and the first READ comes in, one FUSE round trip earlier than
 * from objfs_reader_read(). Larger objects wait for their first read (an
 * open says nothing of where it will read). Nothing is fetched that is
 * cached or in flight, or beyond the cache's prefetch room.
 */
void objfs_reader_start(struct objfs_reader *r);

/* Frees the reader and drops its object reference. No read may be running. Accepts NULL. */
void objfs_reader_free(struct objfs_reader *r);

/*
 * Reads [off, off+len) of the reader's object, clamped to its size, into
 * *@out. 0 or -errno; on error *@out holds nothing to deliver, and must
 * still be released (a no-op then). Blocks the calling thread until the
 * bytes are there.
 */
int objfs_reader_read(struct objfs_reader *r, int64_t off, size_t len,
		      struct objfs_reader_buf *out);

/* Releases what objfs_reader_read() put in @b (pins, buffer). Idempotent. */
void objfs_reader_release(struct objfs_reader *r, struct objfs_reader_buf *b);

#endif
