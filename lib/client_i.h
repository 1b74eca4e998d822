/*
 * client_i.h: what the two halves of libobjfs share, and nothing else sees
 * (not installed; lib/ sees only include/ besides this).
 *
 *   client.c       portable: sessions (one per process and mount) and their
 *                  handles, the socket, the watchdog, batches (every read is
 *                  one), the ring's CPU consumer, registration.
 *   client_cuda.c  everything that calls CUDA: ring registration with
 *                  cudaHostRegister, pointer classification, the
 *                  stream-ordered consumers of a batch.
 *
 * The seam is libfuse's fuse_uring_i.h pattern: client.c calls the
 * objfs_cuda_* functions unconditionally and has no #if of its own;
 * client_cuda.c built without HAVE_CUDA provides the same functions as
 * stubs (objfs_cuda_attach leaves s->cuda NULL, the rest return
 * -EOPNOTSUPP). Since a session whose ring is not registered has s->cuda ==
 * NULL, and client.c reaches objfs_cuda_classify and objfs_cuda_submit
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
#include <sys/queue.h>
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

/* client_cuda.c's per-session state (registration, private streams). */
struct cuda_state;

/* One entry of a batch as sent: clamped, classified, placed. */
struct bent {
	char *buf;
	uint64_t len;                /* > 0, within the file */
	int64_t off;
	uint32_t handle;
	uint32_t slot_off;           /* in its first piece's slot */
	uint64_t piece;              /* its first piece (absolute once submitted) */
	ssize_t *nread;              /* where its result goes; the caller's */
	int err;                     /* 0, or -errno from the daemon's DONE */
	enum mem_kind kind;
	int dev;
};

/*
 * A request: the entries of one readv (or one read) that reach the daemon.
 * Made and freed by the caller of objfs_client_submit_locked (or by the
 * stream callback that ends it); linked in s->waiting from submission to
 * its last DONE (the watchdog unlinks it then; the waiter does when the
 * session died first).
 */
struct batch {
	STAILQ_ENTRY(batch) next;    /* s->waiting */
	struct objfs_sess *s;
	uint64_t id;
	uint64_t first_piece, last_piece;
	uint32_t n;
	int done;                    /* s->lock: the last DONE came */
	int err;                     /* s->lock: positive errno for every entry */
	struct bent e[];
};

/*
 * A session: the connection, ring and watchdog that every handle of one
 * mount in this process shares (side_proto.h, 5). Refcounted by its
 * handles (the registry lock in client.c guards refs and next).
 */
struct objfs_sess {
	char name[OBJFS_SOCK_LEN];   /* the daemon's socket: names the mount */
	unsigned refs;               /* registry lock */
	struct objfs_sess *next;     /* registry lock */
	int sock;
	int wakefd;                  /* tells the watchdog to exit */
	struct objfs_ring_hdr *ring; /* shared with the daemon */
	size_t ring_bytes;
	uint32_t slots, slot_size;
	char *data;
	pthread_t watchdog;
	struct cuda_state *cuda;     /* NULL: the ring is not registered with CUDA;
				      * set at open, freed at the end, else constant */
	pthread_mutex_t lock;        /* guards everything below; every send too */
	pthread_cond_t cond;         /* a DONE or ATTACH_OK came, pending dropped, or dead */
	uint64_t next_piece, next_req;
	unsigned outstanding;        /* requests without their last DONE */
	uint64_t qents;              /* their entries */
	unsigned pending;            /* stream callbacks not yet run */
	int dead;                    /* positive errno once the session is over */
	STAILQ_HEAD(, batch) waiting; /* requests awaiting DONEs, in order */
	STAILQ_HEAD(, objfs_gpu) attaching; /* handles whose ATTACH_OK is awaited, in order */
	unsigned nattaching;         /* their number, at most OBJFS_ATTACH_PIPELINE */
	struct reg regs[MAX_REGS];   /* registered buffers, of every handle */
	unsigned nregs;
};

/*
 * A handle: a capability attached to a session. No pinned memory of its
 * own. Its ATTACH is pipelined: objfs_gpu_open returns once it is sent,
 * the watchdog records the answer (the daemon answers ATTACHes in order),
 * and a read naming the handle first waits for it.
 */
struct objfs_gpu {
	struct objfs_sess *s;        /* one reference */
	uint32_t handle;             /* s->lock until attached, then constant */
	int attached;                /* s->lock: the answer came (always, for handle 0) */
	int attach_err;              /* s->lock: positive errno: refused (EACCES, ENOSPC) */
	STAILQ_ENTRY(objfs_gpu) anext; /* s->attaching */
	uint64_t ino;
	int64_t size;                /* pinned at grant time */
};

/* Internal entry point (tests, fuzzing): open a handle from a capability. */
OBJFS_HIDDEN int objfs_gpu_open_cap(const struct objfs_side_cap *cap, struct objfs_gpu **h);

/* ------------------------------------------------ client.c, for client_cuda.c */

/*
 * Sends @b as one request (FILL messages), reserves its pieces (b->e[].piece
 * become absolute) and links it in s->waiting. Called with s->lock held;
 * may wait on s->cond (too many requests or entries queued). 0 or -errno.
 */
OBJFS_HIDDEN int objfs_client_submit_locked(struct objfs_sess *s, struct batch *b);

/*
 * Walks @b's pieces in order (side_proto.h, 6): open(arg, p) before the
 * first copy from piece p, copy(arg, e, src, dst_off, len) for each part of
 * an entry in it (src in the ring), close(arg, p, len) after the last, len
 * being the piece's bytes. Stops at the first non-zero return, and returns it.
 */
struct walk_ops {
	int (*open)(void *arg, uint64_t p);
	int (*copy)(void *arg, const struct bent *e, const char *src, uint64_t dst_off,
		    size_t len);
	int (*close)(void *arg, uint64_t p, size_t len);
};
OBJFS_HIDDEN int objfs_client_walk(const struct batch *b, const struct walk_ops *ops, void *arg);

/* The CPU consumer of @b: copies every piece into the buffers. 0 or -errno. */
OBJFS_HIDDEN int objfs_client_cpu_consume(struct batch *b);

/*
 * Waits for @b's last DONE (or the session's end), then writes every
 * entry's result to its nread: its length, or a negative errno (@cerr, a
 * consumer's failure, when non-zero). Does not free @b.
 */
OBJFS_HIDDEN void objfs_client_finish(struct batch *b, int cerr);

/*
 * Waits (any thread) until piece @p is published or the ring is poisoned.
 * Returns the seq word seen: its gen, or OBJFS_SEQ_ERROR.
 */
OBJFS_HIDDEN uint32_t objfs_client_wait_piece(struct objfs_sess *s, uint64_t p);

/* Releases piece @p's slot to the daemon (rel = its gen) and wakes it. */
OBJFS_HIDDEN void objfs_client_release_piece(struct objfs_sess *s, uint64_t p);

/* Poisons the ring from the first piece the daemon has not published. */
OBJFS_HIDDEN void objfs_client_poison(struct objfs_sess *s, int err);

/* Whether the CPU can read and write [buf, buf+len), probed at its two
 * ends: 1 yes, 0 not mapped, -1 mapped but not writable. */
OBJFS_HIDDEN int objfs_client_cpu_accessible(void *buf, size_t len);

/* ------------------------------------------------ client_cuda.c, for client.c */

/*
 * Places @s's ring (mapped, not yet touched) on the NUMA node of the current
 * CUDA device, on a machine of several nodes: a preferred-node policy on
 * the memfd, which the pages follow when cudaHostRegister faults them in.
 * Advisory: nothing fails when it cannot.
 */
OBJFS_HIDDEN void objfs_cuda_place(struct objfs_sess *s);

/*
 * Registers @s's ring with CUDA when a GPU is usable and sets s->cuda; a
 * failure only leaves s->cuda NULL (host memory is served all the same).
 * Called once, after the session is up and before it is shared.
 */
OBJFS_HIDDEN void objfs_cuda_attach(struct objfs_sess *s);

/* Undoes objfs_cuda_attach (streams, registration) once no stream uses the ring. */
OBJFS_HIDDEN void objfs_cuda_detach(struct objfs_sess *s);

/*
 * Classifies @buf for a session with s->cuda: *kind MEM_DEVICE (memory a
 * copy engine must write) or MEM_HOST, *dev its device. For device memory
 * *alloc gets the whole allocation holding @buf (every byte of it is of
 * the same kind and device) when the driver tells it, else alloc->len 0.
 * 0, -EFAULT (neither CUDA nor the CPU knows it) or -EOPNOTSUPP.
 */
OBJFS_HIDDEN int objfs_cuda_classify(struct objfs_sess *s, void *buf, size_t len,
				     enum mem_kind *kind, int *dev, struct reg *alloc);

/*
 * Submits @b and enqueues its consumers on @stream (copies from the ring
 * into every entry's buffer, then a host function that finishes and frees
 * @b). For a session with s->cuda. On success @b belongs to the stream;
 * on error it is still the caller's and nothing was enqueued. 0 or -errno.
 */
OBJFS_HIDDEN int objfs_cuda_submit(struct objfs_sess *s, struct batch *b,
				   struct CUstream_st *stream);

/*
 * A private stream of the library's on device @dev (blocking flavour:
 * ordered after the legacy default stream) in *@st. 0 or -errno.
 */
OBJFS_HIDDEN int objfs_cuda_priv_stream(struct objfs_sess *s, int dev, struct CUstream_st **st);

/* Waits for everything enqueued on @st. 0 or -EIO. */
OBJFS_HIDDEN int objfs_cuda_sync(struct CUstream_st *st);

#endif
