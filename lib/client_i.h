/*
 * client_i.h: what the two halves of libobjfs share, and nothing else sees
 * (not installed; lib/ sees only include/ besides this).
 *
 *   client.c       portable: handles, the session socket, the watchdog, the
 *                  ring's CPU consumer, host-buffer reads, registration.
 *   client_cuda.c  everything that calls CUDA: ring registration with
 *                  cudaHostRegister, pointer classification, the
 *                  stream-ordered consumers and the synchronous device read.
 *
 * The seam is libfuse's fuse_uring_i.h pattern: client.c calls the
 * objfs_cuda_* functions unconditionally and has no #if of its own;
 * client_cuda.c built without HAVE_CUDA provides the same functions as
 * stubs (objfs_cuda_attach leaves h->cuda NULL, the rest return
 * -EOPNOTSUPP). Since a handle whose ring is not registered has h->cuda ==
 * NULL, and client.c reaches objfs_cuda_classify and objfs_cuda_read_async
 * only when it is not, a build without CUDA serves host memory exactly as
 * a CUDA build on a machine without a usable GPU does.
 *
 * Everything declared here is hidden: the library exports only objfs.h.
 */
#ifndef OBJFS_CLIENT_I_H
#define OBJFS_CLIENT_I_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "objfs.h"
#include "objfs/side_proto.h"

#define OBJFS_HIDDEN __attribute__((visibility("hidden")))

#define MAX_OUTSTANDING 512
#define MAX_REGS        256
#define MAX_DEVS        64

enum mem_kind { MEM_HOST, MEM_DEVICE };

struct reg {
	char *buf;
	size_t len;
	enum mem_kind kind;
	int dev;
};

/* client_cuda.c's per-handle state (registration, private streams). */
struct cuda_state;

struct objfs_gpu {
	int sock;
	int wakefd;                  /* tells the watchdog to exit */
	struct objfs_side_cap cap;
	struct objfs_ring_hdr *ring; /* shared with the daemon */
	size_t ring_bytes;
	uint32_t slots, slot_size;
	char *data;
	pthread_t watchdog;
	struct cuda_state *cuda;     /* NULL: the ring is not registered with CUDA;
				      * set at open, freed at close, else constant */
	pthread_mutex_t lock;        /* guards everything below */
	pthread_cond_t cond;         /* outstanding or pending dropped, or dead */
	uint64_t next_piece, next_req;
	unsigned outstanding;        /* FILLs without DONE */
	unsigned pending;            /* stream callbacks not yet run */
	int dead;                    /* positive errno once the session is over */
	struct reg regs[MAX_REGS];
	unsigned nregs;
};

/* A read after its checks: the clamped byte count and where it goes. */
struct read_plan {
	size_t n;                    /* > 0, within the file */
	enum mem_kind kind;
	int dev;                     /* with MEM_DEVICE: the buffer's device */
};

/* Internal entry point (tests, fuzzing): open a session from a capability. */
OBJFS_HIDDEN int objfs_gpu_open_cap(const struct objfs_side_cap *cap, struct objfs_gpu **h);

/* ------------------------------------------------ client.c, for client_cuda.c */

/*
 * Sends one FILL of @len bytes at @off (already clamped) and reserves its
 * pieces; *first gets the first piece number. Called with h->lock held;
 * may wait on h->cond (more than MAX_OUTSTANDING reads). 0 or -errno.
 */
OBJFS_HIDDEN int objfs_client_submit_locked(struct objfs_gpu *h, int64_t off, size_t len,
					    uint64_t *first);

/* The CPU consumer: copies the pieces from @first on into @buf. 0 or -errno. */
OBJFS_HIDDEN int objfs_client_cpu_read(struct objfs_gpu *h, char *buf, size_t len,
				       uint64_t first);

/*
 * Waits (any thread) until piece @p is published or the ring is poisoned.
 * Returns the seq word seen: its gen, or OBJFS_SEQ_ERROR.
 */
OBJFS_HIDDEN uint32_t objfs_client_wait_piece(struct objfs_gpu *h, uint64_t p);

/* Releases piece @p's slot to the daemon (rel = its gen) and wakes it. */
OBJFS_HIDDEN void objfs_client_release_piece(struct objfs_gpu *h, uint64_t p);

/* Result of a read whose last piece is @last: 0 or -errno. */
OBJFS_HIDDEN int objfs_client_read_result(const struct objfs_gpu *h, uint64_t last);

/* Poisons the ring from the first piece the daemon has not published. */
OBJFS_HIDDEN void objfs_client_poison(struct objfs_gpu *h, int err);

/* Whether the CPU can read and write [buf, buf+len). */
OBJFS_HIDDEN int objfs_client_cpu_accessible(void *buf, size_t len);

/* ------------------------------------------------ client_cuda.c, for client.c */

/*
 * Registers @h's ring with CUDA when a GPU is usable and sets h->cuda; a
 * failure only leaves h->cuda NULL (host memory is served all the same).
 * Called once, after the session is up and before @h is shared.
 */
OBJFS_HIDDEN void objfs_cuda_attach(struct objfs_gpu *h);

/* Undoes objfs_cuda_attach (streams, registration) once no stream uses the ring. */
OBJFS_HIDDEN void objfs_cuda_detach(struct objfs_gpu *h);

/*
 * Classifies @buf for a handle with h->cuda: *kind MEM_DEVICE (memory a
 * copy engine must write) or MEM_HOST, *dev its device. 0, -EFAULT (neither
 * CUDA nor the CPU knows it) or -EOPNOTSUPP.
 */
OBJFS_HIDDEN int objfs_cuda_classify(struct objfs_gpu *h, void *buf, size_t len,
				     enum mem_kind *kind, int *dev);

/*
 * objfs_gpu_read_async for a handle with h->cuda: submits the FILL and
 * enqueues its consumers on @stream (device memory: copies from the ring;
 * host memory: the CPU consumer in a host function). 0 or -errno.
 */
OBJFS_HIDDEN int objfs_cuda_read_async(struct objfs_gpu *h, void *buf, off_t file_off,
				       const struct read_plan *rp, ssize_t *nread,
				       struct CUstream_st *stream);

/*
 * objfs_gpu_read into device memory (@rp->kind MEM_DEVICE): the same read
 * on a private stream of the library's for @rp->dev, then waits for it.
 * 0 or -errno.
 */
OBJFS_HIDDEN int objfs_cuda_read(struct objfs_gpu *h, void *buf, off_t file_off,
				 const struct read_plan *rp, ssize_t *nread);

#endif
