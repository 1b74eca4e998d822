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
 * Errors: every int-returning function returns 0 or a negative errno;
 * objfs_strerror() turns one into text. After -EIO (a failed fill, or the
 * daemon went away) the handle is dead: every later call fails, close it and
 * open the file again.
 *
 * Threading: a handle may be used from several threads at once; requests
 * are served in the order they were submitted. A read enqueued on a stream
 * must not wait (through events) for a read submitted later on the same
 * handle, or both wait for ever (the watchdog cannot tell this from a slow
 * network).
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

/* cudaStream_t is `struct CUstream_st *`: pass a cudaStream_t (or 0). */
struct CUstream_st;

/*
 * Opens a GPU side session for @fd, a file opened (read-only) on an objfs
 * mount. @fd stays the caller's: it may be closed right after this call.
 * On success *h is a new handle, owned by the caller until
 * objfs_gpu_close(). Returns 0, -ENOTTY (@fd is not a file on an objfs
 * mount), -EOPNOTSUPP (the daemon runs with side=off), -EACCES, -ENOMEM or
 * another -errno.
 */
OBJFS_API int objfs_gpu_open(int fd, struct objfs_gpu **h);

/*
 * Validates and records [@buf, @buf + @len) as a destination of later
 * reads on @h (the cuFileBufRegister pattern): reads into it skip the
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
 * Waits until every read enqueued on @h has been consumed by its stream,
 * ends the session and frees @h. Accepts NULL.
 */
OBJFS_API void objfs_gpu_close(struct objfs_gpu *h);

/* Text for an error returned by this library (either sign). Never NULL. */
OBJFS_API const char *objfs_strerror(int err);

#ifdef __cplusplus
}
#endif

#endif
