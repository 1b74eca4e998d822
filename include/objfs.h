/*
 * objfs.h: the public C API of libobjfs, the client side of objfs's GPU
 * side API. Link with `pkg-config --cflags --libs objfs`.
 *
 * A program opens a file on an objfs mount as usual (so the kernel's
 * permission checks apply), then hands the descriptor to objfs_gpu_open().
 * The handle talks to the objfs daemon over a unix socket and shares a
 * bounce ring with it: the daemon copies the file's bytes from its block
 * cache into the ring, and the library copies them on to the caller's
 * buffer. Device buffers are filled with cudaMemcpyAsync from the ring
 * (registered once with cudaHostRegister), ordered on the caller's CUDA
 * stream with stream memory operations: no host synchronisation.
 *
 * Buffers: every function that takes `buf` accepts device memory of any
 * allocator (cudaMalloc, cudaMallocAsync pools, managed memory, PyTorch's
 * caching allocator) and host memory (pinned or pageable). A libobjfs built
 * without CUDA, or running where no GPU is usable, serves host memory and
 * returns -EOPNOTSUPP for memory the CPU cannot access.
 *
 * Sessions: the handles of one mount in one process share one session
 * (one connection, one ring of ring_slots x ring_slot_size bytes pinned
 * once, one watchdog thread): the first objfs_gpu_open of a mount makes it,
 * later ones attach to it (no memory, and no wait for the daemon: tens
 * of microseconds each, the FUSE ioctl included), the last
 * objfs_gpu_close ends it. Opening thousands of shard files costs
 * thousands of handles, not thousands of rings. The daemon bounds the
 * handles of one user (its capability share, -ENOSPC beyond). Handles are
 * not inherited across fork(): the parent's handles must not be used in
 * the child, whose first objfs_gpu_open of a mount makes its own session.
 *
 * Batches: objfs_gpu_readv reads many ranges of many files of one mount in
 * one request: the daemon coalesces adjacent and overlapping ranges of a
 * file, serves cached bytes from memory or its disk cache, fetches the
 * rest in parallel, and small ranges share ring slots. Each entry gets
 * its own result; a failed entry does not fail the others.
 *
 * Errors: every int-returning function returns 0 or a negative errno;
 * objfs_strerror() turns one into text. After -EIO from the session (the
 * daemon went away) every handle of the mount is dead: every later call
 * fails, close them and open the files again (a new session is made). A
 * failed range (the store answered an error) fails only its entry.
 *
 * Threading: handles may be used from several threads at once; requests
 * of one session are served in the order they were submitted. A read
 * enqueued on a stream must not wait (through events) for a read submitted
 * later on any handle of the same mount, or both wait for ever (the
 * watchdog cannot tell this from a slow network).
 */
#ifndef OBJFS_H
#define OBJFS_H

#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define OBJFS_API __attribute__((visibility("default")))

/* Opaque handle; one per opened file. */
struct objfs_gpu;

/*
 * One range of a batch: @len bytes at @off of @h's file into @buf (device
 * or host memory, as for objfs_gpu_read). @nread is the library's to write:
 * the byte count (less than @len only at the end of the file, 0 at or past
 * it or for @len 0) or a negative errno for this entry alone (-EINVAL:
 * negative @off; -EFAULT, -EOPNOTSUPP: @buf; -EIO or the store's errno:
 * the range could not be read, @buf's contents are then undefined).
 */
struct objfs_gpu_iov {
	struct objfs_gpu *h;
	void *buf;
	size_t len;
	off_t off;
	ssize_t nread;
};

/* Most entries of one objfs_gpu_readv call. */
#define OBJFS_GPU_READV_MAX 65536

/* cudaStream_t is `struct CUstream_st *`: pass a cudaStream_t (or 0). */
struct CUstream_st;

/*
 * Opens a GPU side handle for @fd, a file opened (read-only) on an objfs
 * mount: the first of a mount in this process makes the mount's session,
 * later ones attach to it without waiting for the daemon's answer (the
 * first read naming the handle waits for it; a refusal -- -ENOSPC: this
 * user's handles reached the daemon's bound, -EACCES -- is then every
 * entry's result). @fd stays the caller's: it may be closed right after
 * this call. On success *h is a new handle, owned by the caller until
 * objfs_gpu_close(). Returns 0, -ENOTTY (@fd is not a file on an objfs
 * mount), -EOPNOTSUPP (the daemon runs with side=off), -EACCES, -ENOSPC
 * (capabilities: the ioctl), -ENOMEM, -EIO (the mount's session is dead
 * and a new one could not be made) or another -errno.
 */
OBJFS_API int objfs_gpu_open(int fd, struct objfs_gpu **h);

/*
 * Validates and records [@buf, @buf + @len) as a destination of later
 * reads on @h and every handle of its mount (the cuFileBufRegister pattern): reads into it skip the
 * pointer lookup and are checked against its bounds (-EFAULT when a read
 * would run past it). Reads into unregistered buffers work as well. The
 * memory stays the caller's; deregister it before freeing it. Returns 0,
 * -EEXIST (overlaps a registered buffer), -ENOSPC (too many), -EINVAL,
 * -EOPNOTSUPP (device memory without CUDA).
 */
OBJFS_API int objfs_gpu_buf_register(struct objfs_gpu *h, void *buf, size_t len);
/* Forgets a buffer registered with exactly (@buf, @len). 0 or -ENOENT. */
OBJFS_API int objfs_gpu_buf_deregister(struct objfs_gpu *h, void *buf, size_t len);

/*
 * Reads @len bytes at @file_off of the file into @buf and waits for them.
 * *@nread gets the number of bytes read: less than @len only at the end of
 * the file (0 at or past it). For device memory the copy runs on a stream
 * of the library's that synchronises with the legacy default stream.
 * Returns 0 or -errno (*nread is then undefined and @buf's contents too).
 */
OBJFS_API int objfs_gpu_read(struct objfs_gpu *h, void *buf, size_t len, off_t file_off,
			     ssize_t *nread);

/*
 * Enqueues the same read on @stream and returns without waiting. When the
 * stream reaches the end of the read, *@nread (which must stay valid until
 * then) gets the byte count or a negative errno (-EIO: the fill failed or
 * the daemon went away; @buf's contents are then undefined). The stream
 * never hangs on a dead daemon: the library's watchdog releases it. Work
 * enqueued after this call on @stream sees the data. Returns 0 when the
 * read was enqueued, or -errno (nothing was enqueued, *nread untouched).
 * Reads that transfer nothing (at or past the end) write *nread = 0 before
 * returning. Without CUDA (or for host memory without a usable GPU) the
 * read completes before returning; @stream must then be NULL.
 */
OBJFS_API int objfs_gpu_read_async(struct objfs_gpu *h, void *buf, size_t len,
				   off_t file_off, ssize_t *nread, struct CUstream_st *stream);

/*
 * Reads the @n ranges of @iov (all handles of one mount) as one batch and
 * waits for them; every iov[i].nread gets its result. Device memory is
 * filled on a stream of the library's that synchronises with the legacy
 * default stream. Returns 0 when every entry got its result (check each
 * nread), or -errno when none was read (nothing written to any buffer; the
 * nread of entries that transfer nothing or fail their own checks may have
 * been set, no other): -EINVAL (NULL @iov with n > 0, a NULL handle, a
 * NULL buffer with len > 0, n < 0), -E2BIG (n > OBJFS_GPU_READV_MAX), -EXDEV (handles of two
 * mounts), -EIO (the session is dead), -ENOMEM. n == 0 returns 0.
 * Entries are copied in order; overlapping destination buffers get the
 * later entry's bytes only where the copies do not race (don't).
 */
OBJFS_API int objfs_gpu_readv(struct objfs_gpu_iov *iov, int n);

/*
 * Enqueues the same batch on @stream and returns without waiting: when the
 * stream reaches the batch's end, every iov[i].nread (@iov must stay valid
 * until then) gets its result; work enqueued after it on @stream sees the
 * data. Entries that transfer nothing or fail their checks get nread
 * before this returns. The stream never hangs on a dead daemon: the
 * library's watchdog releases it and the entries get -EIO. Returns 0 when
 * enqueued, or -errno as objfs_gpu_readv (then nothing was enqueued).
 * Without CUDA (or without a usable GPU) the batch completes before
 * returning; @stream must then be NULL (-EOPNOTSUPP otherwise).
 */
OBJFS_API int objfs_gpu_readv_async(struct objfs_gpu_iov *iov, int n, struct CUstream_st *stream);

/*
 * Detaches @h from its session and frees it; the last handle of a mount
 * waits until every read enqueued on the session has been consumed by its
 * stream and ends the session. Reads of @h already enqueued complete.
 * Accepts NULL.
 */
OBJFS_API void objfs_gpu_close(struct objfs_gpu *h);

/* Text for an error returned by this library (either sign). Never NULL. */
OBJFS_API const char *objfs_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif
