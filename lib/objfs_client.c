/*
 * objfs_client: libobjfs, the client half of the GPU side API (include/
 * objfs.h is the public API, src/side_proto.h the protocol and the ring
 * layout shared with the daemon, src/side.c the daemon half). The only
 * file of objfs that calls CUDA.
 *
 * A handle owns: the session socket, the ring (a sealed memfd mapped here
 * and in the daemon, registered once with cudaHostRegister when a GPU is
 * usable) and a watchdog thread.
 *
 * Reads. A read is clamped to the file size, then submitted as one FILL of
 * n pieces (slot-sized) under h->lock; the lock also covers enqueuing the
 * pieces' consumers, so on any one stream consumers appear in piece order
 * (otherwise a later piece could wait on a slot an earlier one must free).
 * Consumers, per piece p in slot s = p % k, use g = p / k + 1:
 *   - GPU, stream memory operations (cuStreamWaitValue32 GEQ on seq,
 *     cudaMemcpyAsync slot -> buf, cuStreamWriteValue32 rel = g), then one
 *     cudaLaunchHostFunc per read that writes *nread. No host sync at all.
 *   - GPU without stream memory operations (or OBJFS_GPU_NO_MEMOPS=1): a
 *     host function that waits for seq, the copy, a host function that
 *     stores rel. CUDA runs host functions on its own thread: that is the
 *     helper thread.
 *   - CPU (host buffers): wait for seq on a futex, memcpy, store rel and
 *     wake the daemon. For read_async on a stream this runs inside a host
 *     function, so it is ordered on the stream too.
 * The daemon is the one that waits for rel (ring wrap-around); the
 * caller's thread never blocks in the async path, except when more than
 * MAX_OUTSTANDING reads are queued on one handle.
 *
 * Failure. The watchdog blocks on the socket. DONE messages count down the
 * outstanding reads; ERR or EOF (daemon killed, unmounted, or it ended the
 * session) poisons the ring as side_proto.h describes: err_piece = the first
 * piece the daemon never published (pieces are published in order), then
 * OBJFS_SEQ_ERROR into every seq word, which releases every GPU stream wait
 * and every CPU waiter at once. A read whose last piece is at or past
 * err_piece reports -EIO (or the daemon's errno). Bounded time: EOF arrives
 * as soon as the daemon process dies.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#ifdef HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif

#include "objfs.h"
#include "objfs/side_proto.h"

#define MAX_OUTSTANDING 512
#define MAX_REGS        256
#define MAX_DEVS        64
#define HELLO_TIMEOUT_MS 10000
#define CPU_WAIT_NS     100000000L

/* Internal entry point (tests): open a session from a capability. */
int objfs_gpu_open_cap(const struct objfs_side_cap *cap, struct objfs_gpu **h)
	__attribute__((visibility("hidden")));

enum mem_kind { MEM_HOST, MEM_DEVICE };

struct reg {
	char *buf;
	size_t len;
	enum mem_kind kind;
	int dev;
};

struct objfs_gpu {
	int sock;
	int wakefd;                  /* tells the watchdog to exit */
	struct objfs_side_cap cap;
	struct objfs_ring_hdr *ring; /* shared with the daemon */
	size_t ring_bytes;
	uint32_t slots, slot_size;
	char *data;
	pthread_t watchdog;
	pthread_mutex_t lock;        /* guards everything below */
	pthread_cond_t cond;         /* outstanding or pending dropped, or dead */
	uint64_t next_piece, next_req;
	unsigned outstanding;        /* FILLs without DONE */
	unsigned pending;            /* stream callbacks not yet run */
	int dead;                    /* positive errno once the session is over */
	struct reg regs[MAX_REGS];
	unsigned nregs;
#ifdef HAVE_CUDA
	int cuda;                    /* the ring is registered with CUDA */
	int memops;                  /* stream memory operations usable */
	CUdeviceptr dring;           /* the ring as the device sees it */
	cudaStream_t priv[MAX_DEVS]; /* for objfs_gpu_read, per device */
#endif
};

static void futex_wake_all(uint32_t *w)
{
	syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void futex_wait_ns(uint32_t *w, uint32_t val, long ns)
{
	struct timespec ts = { ns / 1000000000L, ns % 1000000000L };

	syscall(SYS_futex, w, FUTEX_WAIT, val, &ts, NULL, 0);
}

/* ---------------------------------------------------------- ring state */

/* First piece the daemon has not published (it publishes in order). */
static uint64_t first_unpublished(const struct objfs_gpu *h)
{
	uint64_t p = UINT64_MAX;

	for (uint32_t s = 0; s < h->slots; s++) {
		uint32_t g = __atomic_load_n(&h->ring->ctl[s].seq, __ATOMIC_ACQUIRE);
		uint64_t next;

		if (g >= OBJFS_RING_GEN_MAX)
			continue; /* poisoned already */
		next = s + (uint64_t)g * h->slots;
		if (next < p)
			p = next;
	}
	return p;
}

/* Poisons the ring from the first unpublished piece on (side_proto.h, 4). */
static void poison(struct objfs_gpu *h, int err)
{
	uint64_t none = UINT64_MAX, p = first_unpublished(h);

	if (__atomic_compare_exchange_n(&h->ring->err_piece, &none, p, 0, __ATOMIC_SEQ_CST,
					__ATOMIC_SEQ_CST))
		__atomic_store_n(&h->ring->err, err, __ATOMIC_SEQ_CST);
	for (uint32_t s = 0; s < h->slots; s++) {
		__atomic_store_n(&h->ring->ctl[s].seq, OBJFS_SEQ_ERROR, __ATOMIC_SEQ_CST);
		futex_wake_all(&h->ring->ctl[s].seq);
	}
}

/* An errno from the daemon (a message or the shared ring: any value) as a
 * positive errno the caller may see: 1..4095, anything else EIO. */
static int peer_errno(int64_t e)
{
	return e > 0 && e < 4096 ? (int)e : EIO;
}

/* Result of a read whose last piece is @last: 0 or -errno. */
static int read_result(const struct objfs_gpu *h, uint64_t last)
{
	uint64_t ep = __atomic_load_n(&h->ring->err_piece, __ATOMIC_SEQ_CST);
	int err;

	if (ep == UINT64_MAX || last < ep)
		return 0;
	err = __atomic_load_n(&h->ring->err, __ATOMIC_SEQ_CST);
	return -peer_errno(err);
}

static void set_dead(struct objfs_gpu *h, int err)
{
	pthread_mutex_lock(&h->lock);
	if (!h->dead)
		h->dead = err;
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
}

static void *watchdog_main(void *arg)
{
	struct objfs_gpu *h = arg;
	struct pollfd p[2] = { { h->sock, POLLIN, 0 }, { h->wakefd, POLLIN, 0 } };
	char buf[OBJFS_MSG_MAX] __attribute__((aligned(8)));
	int err = 0;

	for (;;) {
		const struct objfs_msg_hdr *m = (const void *)buf;
		ssize_t n;

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			err = errno;
			break;
		}
		if (p[1].revents)
			return NULL; /* objfs_gpu_close */
		n = recv(h->sock, buf, sizeof(buf), MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0) {
			err = n < 0 ? errno : EIO;
			break;
		}
		if ((size_t)n < sizeof(*m) || m->magic != OBJFS_SIDE_MAGIC || m->len != (size_t)n) {
			err = EPROTO;
			break;
		}
		if (m->type == OBJFS_MSG_DONE && (size_t)n == sizeof(struct objfs_msg_done)) {
			const struct objfs_msg_done *d = (const void *)buf;

			pthread_mutex_lock(&h->lock);
			if (h->outstanding)
				h->outstanding--;
			pthread_cond_broadcast(&h->cond);
			pthread_mutex_unlock(&h->lock);
			if (d->err) {
				err = peer_errno(d->err);
				break;
			}
		} else if (m->type == OBJFS_MSG_ERR && (size_t)n == sizeof(struct objfs_msg_err)) {
			const struct objfs_msg_err *e = (const void *)buf;

			err = peer_errno(e->err);
			break;
		} else {
			err = EPROTO;
			break;
		}
	}
	/* The daemon failed a fill, ended the session or died: release everyone. */
	poison(h, err == ECONNRESET || err == EPIPE ? EIO : err);
	set_dead(h, EIO);
	return NULL;
}

/* ---------------------------------------------------------- CPU consumer */

/* Copies piece @p (@want bytes) into @dst and releases its slot. 0 or -errno. */
static int cpu_piece(struct objfs_gpu *h, uint64_t p, char *dst, size_t want)
{
	uint32_t s = (uint32_t)(p % h->slots), g = (uint32_t)(p / h->slots + 1);
	struct objfs_ring_ctl *c = &h->ring->ctl[s];
	uint32_t v;
	int err;

	while ((v = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE)) < g)
		futex_wait_ns(&c->seq, v, CPU_WAIT_NS);
	if (v == OBJFS_SEQ_ERROR) {
		err = read_result(h, p);
		if (err)
			return err;
	}
	if (__atomic_load_n(&c->len, __ATOMIC_RELAXED) != want) {
		poison(h, EPROTO);
		return -EPROTO;
	}
	memcpy(dst, h->data + (size_t)s * h->slot_size, want);
	__atomic_store_n(&c->rel, g, __ATOMIC_RELEASE);
	futex_wake_all(&c->rel);
	return 0;
}

static int cpu_read(struct objfs_gpu *h, char *buf, size_t len, uint64_t first)
{
	uint64_t n = objfs_pieces(len, h->slot_size);
	int err = 0;

	for (uint64_t i = 0; i < n && !err; i++) {
		size_t off = (size_t)i * h->slot_size;
		size_t want = len - off < h->slot_size ? len - off : h->slot_size;

		err = cpu_piece(h, first + i, buf + off, want);
	}
	return err;
}

/* ---------------------------------------------------------- submission */

/*
 * Sends one FILL of @len bytes at @off (already clamped) and reserves its
 * pieces; *first gets the first piece number. Called with h->lock held.
 */
static int submit_locked(struct objfs_gpu *h, int64_t off, size_t len, uint64_t *first)
{
	struct objfs_msg_fill m = { 0 };
	uint64_t n = objfs_pieces(len, h->slot_size);
	ssize_t r;

	while (!h->dead && h->outstanding >= MAX_OUTSTANDING)
		pthread_cond_wait(&h->cond, &h->lock);
	if (h->dead)
		return -h->dead;
	if ((h->next_piece + n - 1) / h->slots + 1 >= OBJFS_RING_GEN_MAX)
		return -EOVERFLOW; /* about 4 PiB through one handle: reopen */
	objfs_msg_init(&m.h, OBJFS_MSG_FILL, sizeof(m));
	memcpy(m.token, h->cap.token, sizeof(m.token));
	m.ino = h->cap.ino;
	m.req_id = ++h->next_req;
	m.first_piece = h->next_piece;
	m.off = off;
	m.len = len;
	r = send(h->sock, &m, sizeof(m), MSG_NOSIGNAL);
	if (r != (ssize_t)sizeof(m)) {
		int err = r < 0 ? errno : EIO;

		h->dead = EIO;
		return -(err == EPIPE || err == ECONNRESET ? EIO : err);
	}
	*first = h->next_piece;
	h->next_piece += n;
	h->outstanding++;
	return 0;
}

/* Clamps a read to the file. Returns the byte count, or -EINVAL. */
static int64_t clamp(const struct objfs_gpu *h, size_t len, off_t off)
{
	if (off < 0 || len > (size_t)SSIZE_MAX)
		return -EINVAL;
	if (off >= h->cap.size)
		return 0;
	return (int64_t)len < h->cap.size - off ? (int64_t)len : h->cap.size - off;
}

/* Whether the CPU can read and write [buf, buf+len): probes the two ends. */
static int cpu_accessible(void *buf, size_t len)
{
	char b;
	struct iovec local = { &b, 1 }, remote;

	if (!len)
		return 1;
	for (int i = 0; i < 2; i++) {
		remote.iov_base = (char *)buf + (i ? len - 1 : 0);
		remote.iov_len = 1;
		if (syscall(SYS_process_vm_readv, getpid(), &local, 1, &remote, 1, 0) != 1)
			return errno != EFAULT; /* other errors (seccomp): assume host */
	}
	return 1;
}

/* ---------------------------------------------------------- CUDA */

#ifdef HAVE_CUDA
typedef CUresult (*wait32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*write32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*hostdevptr_fn)(CUdeviceptr *, void *, unsigned int);

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static int cuda_usable;
static wait32_fn p_wait32;
static write32_fn p_write32;
static hostdevptr_fn p_hostdevptr;

static void cuda_init(void)
{
	enum cudaDriverEntryPointQueryResult q;
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
		(void)cudaGetLastError();
		return;
	}
	cuda_usable = 1;
	if (getenv("OBJFS_GPU_NO_MEMOPS") && strcmp(getenv("OBJFS_GPU_NO_MEMOPS"), "0"))
		return;
	if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", (void **)&p_wait32, 12000,
					     cudaEnableDefault, &q) != cudaSuccess ||
	    q != cudaDriverEntryPointSuccess ||
	    cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", (void **)&p_write32, 12000,
					     cudaEnableDefault, &q) != cudaSuccess ||
	    q != cudaDriverEntryPointSuccess ||
	    cudaGetDriverEntryPointByVersion("cuMemHostGetDevicePointer", (void **)&p_hostdevptr,
					     12000, cudaEnableDefault, &q) != cudaSuccess ||
	    q != cudaDriverEntryPointSuccess) {
		(void)cudaGetLastError();
		p_wait32 = NULL;
		p_write32 = NULL;
		p_hostdevptr = NULL;
	}
}

static int cuda_err(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return 0;
	case cudaErrorMemoryAllocation: return -ENOMEM;
	case cudaErrorInvalidValue: return -EINVAL;
	case cudaErrorInvalidDevicePointer: return -EFAULT;
	case cudaErrorNotSupported: return -EOPNOTSUPP;
	default: return -EIO;
	}
}

static void ring_cuda_setup(struct objfs_gpu *h)
{
	pthread_once(&cuda_once, cuda_init);
	if (!cuda_usable)
		return;
	if (cudaHostRegister(h->ring, h->ring_bytes,
			     cudaHostRegisterPortable | cudaHostRegisterMapped) != cudaSuccess) {
		(void)cudaGetLastError();
		return;
	}
	h->cuda = 1;
	if (p_wait32 && p_hostdevptr(&h->dring, h->ring, 0) == CUDA_SUCCESS)
		h->memops = 1;
}

static void ring_cuda_teardown(struct objfs_gpu *h)
{
	for (int d = 0; d < MAX_DEVS; d++)
		if (h->priv[d])
			cudaStreamDestroy(h->priv[d]);
	if (h->cuda)
		cudaHostUnregister(h->ring);
}

/* Classifies @buf: MEM_DEVICE (any memory a copy engine must write) or MEM_HOST. */
static int classify(struct objfs_gpu *h, void *buf, size_t len, enum mem_kind *kind, int *dev)
{
	struct cudaPointerAttributes a;

	*dev = 0;
	if (!h->cuda) {
		*kind = MEM_HOST;
		return cpu_accessible(buf, len) ? 0 : -EOPNOTSUPP;
	}
	if (cudaPointerGetAttributes(&a, buf) != cudaSuccess) {
		(void)cudaGetLastError();
		*kind = MEM_HOST;
		return cpu_accessible(buf, len) ? 0 : -EFAULT;
	}
	*dev = a.device;
	*kind = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? MEM_DEVICE
										  : MEM_HOST;
	if (*kind == MEM_DEVICE && (a.device < 0 || a.device >= MAX_DEVS))
		return -EOPNOTSUPP;
	return 0;
}

struct piece_cb {
	struct objfs_gpu *h;
	uint64_t p;
};

/* Fallback consumer, part 1: wait for the piece on CUDA's callback thread. */
static void CUDART_CB wait_cb(void *arg)
{
	struct piece_cb *c = arg;
	struct objfs_gpu *h = c->h;
	uint32_t s = (uint32_t)(c->p % h->slots), g = (uint32_t)(c->p / h->slots + 1);
	uint32_t v;

	while ((v = __atomic_load_n(&h->ring->ctl[s].seq, __ATOMIC_ACQUIRE)) < g)
		futex_wait_ns(&h->ring->ctl[s].seq, v, CPU_WAIT_NS);
}

/* Fallback consumer, part 3: release the slot after the copy. */
static void CUDART_CB release_cb(void *arg)
{
	struct piece_cb *c = arg;
	struct objfs_gpu *h = c->h;
	uint32_t s = (uint32_t)(c->p % h->slots), g = (uint32_t)(c->p / h->slots + 1);

	__atomic_store_n(&h->ring->ctl[s].rel, g, __ATOMIC_RELEASE);
	futex_wake_all(&h->ring->ctl[s].rel);
	free(c);
}

struct read_cb {
	struct objfs_gpu *h;
	uint64_t first, last;
	char *buf;       /* host reads only */
	size_t len;
	ssize_t *nread;
};

static void pending_drop(struct objfs_gpu *h)
{
	pthread_mutex_lock(&h->lock);
	h->pending--;
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
}

/* End of a device read on its stream: publish the result. */
static void CUDART_CB done_cb(void *arg)
{
	struct read_cb *r = arg;
	int err = read_result(r->h, r->last);

	*r->nread = err ? err : (ssize_t)r->len;
	pending_drop(r->h);
	free(r);
}

/* A host read ordered on a stream: the CPU consumer, on CUDA's thread. */
static void CUDART_CB host_cb(void *arg)
{
	struct read_cb *r = arg;
	int err = cpu_read(r->h, r->buf, r->len, r->first);

	*r->nread = err ? err : (ssize_t)r->len;
	pending_drop(r->h);
	free(r);
}

/* Enqueues the consumers of a device read. Called with h->lock held. */
static int enqueue_device(struct objfs_gpu *h, char *buf, size_t len, uint64_t first,
			  cudaStream_t st)
{
	uint64_t n = objfs_pieces(len, h->slot_size);

	for (uint64_t i = 0; i < n; i++) {
		uint64_t p = first + i;
		uint32_t s = (uint32_t)(p % h->slots), g = (uint32_t)(p / h->slots + 1);
		size_t off = (size_t)i * h->slot_size;
		size_t want = len - off < h->slot_size ? len - off : h->slot_size;
		size_t seq_off = offsetof(struct objfs_ring_hdr, ctl) + s * sizeof(struct objfs_ring_ctl);
		struct piece_cb *c = NULL;
		cudaError_t e;

		if (h->memops) {
			if (p_wait32((CUstream)st, h->dring + seq_off, g, CU_STREAM_WAIT_VALUE_GEQ))
				return -EIO;
		} else {
			c = malloc(sizeof(*c));
			if (!c)
				return -ENOMEM;
			c->h = h;
			c->p = p;
			e = cudaLaunchHostFunc(st, wait_cb, c);
			if (e) {
				free(c);
				return cuda_err(e);
			}
		}
		e = cudaMemcpyAsync(buf + off, h->data + (size_t)s * h->slot_size, want,
				    cudaMemcpyDefault, st);
		if (e)
			return cuda_err(e);
		if (h->memops) {
			if (p_write32((CUstream)st, h->dring + seq_off + offsetof(struct objfs_ring_ctl, rel),
				      g, CU_STREAM_WRITE_VALUE_DEFAULT))
				return -EIO;
		} else {
			e = cudaLaunchHostFunc(st, release_cb, c);
			if (e)
				return cuda_err(e);
		}
	}
	return 0;
}
#endif /* HAVE_CUDA */

/* ---------------------------------------------------------- registration */

/* Kind of @buf: from the registry, else by looking. 0 or -errno. */
static int mem_kind_of(struct objfs_gpu *h, char *buf, size_t len, enum mem_kind *kind, int *dev)
{
	int found = 0, err;

	pthread_mutex_lock(&h->lock);
	for (unsigned i = 0; i < h->nregs; i++) {
		struct reg *r = &h->regs[i];

		if (buf >= r->buf && buf < r->buf + r->len) {
			found = len <= (size_t)(r->buf + r->len - buf) ? 1 : -1;
			*kind = r->kind;
			*dev = r->dev;
			break;
		}
	}
	pthread_mutex_unlock(&h->lock);
	if (found < 0)
		return -EFAULT;
	if (found)
		return 0;
#ifdef HAVE_CUDA
	err = classify(h, buf, len, kind, dev);
#else
	*dev = 0;
	*kind = MEM_HOST;
	err = cpu_accessible(buf, len) ? 0 : -EOPNOTSUPP;
#endif
	return err;
}

int objfs_gpu_buf_register(struct objfs_gpu *h, void *buf, size_t len)
{
	enum mem_kind kind;
	int dev, err;

	if (!h || !buf || !len || (uintptr_t)buf + len < (uintptr_t)buf)
		return -EINVAL;
#ifdef HAVE_CUDA
	err = classify(h, buf, len, &kind, &dev);
#else
	dev = 0;
	kind = MEM_HOST;
	err = cpu_accessible(buf, len) ? 0 : -EOPNOTSUPP;
#endif
	if (err)
		return err;
	pthread_mutex_lock(&h->lock);
	for (unsigned i = 0; i < h->nregs; i++) {
		struct reg *r = &h->regs[i];

		if ((char *)buf < r->buf + r->len && r->buf < (char *)buf + len) {
			pthread_mutex_unlock(&h->lock);
			return -EEXIST;
		}
	}
	if (h->nregs == MAX_REGS) {
		pthread_mutex_unlock(&h->lock);
		return -ENOSPC;
	}
	h->regs[h->nregs++] = (struct reg){ buf, len, kind, dev };
	pthread_mutex_unlock(&h->lock);
	return 0;
}

int objfs_gpu_buf_deregister(struct objfs_gpu *h, void *buf, size_t len)
{
	int err = -ENOENT;

	if (!h)
		return -EINVAL;
	pthread_mutex_lock(&h->lock);
	for (unsigned i = 0; i < h->nregs; i++) {
		if (h->regs[i].buf == buf && h->regs[i].len == len) {
			h->regs[i] = h->regs[--h->nregs];
			err = 0;
			break;
		}
	}
	pthread_mutex_unlock(&h->lock);
	return err;
}

/* ---------------------------------------------------------- reads */

/* A host read of @n (clamped) bytes, on the caller's thread. */
static int host_read(struct objfs_gpu *h, char *buf, size_t n, off_t off, ssize_t *nread)
{
	uint64_t first;
	int err;

	pthread_mutex_lock(&h->lock);
	err = submit_locked(h, off, n, &first);
	pthread_mutex_unlock(&h->lock);
	if (!err)
		err = cpu_read(h, buf, n, first);
	if (!err)
		*nread = (ssize_t)n;
	return err;
}

/*
 * The checks both read calls start with: arguments, the range clamped to
 * the file (*n bytes), and what kind of memory @buf is. Returns 1 to go on,
 * 0 when there is nothing to read (*nread = 0), or -errno.
 */
static int read_prep(struct objfs_gpu *h, void *buf, size_t len, off_t file_off,
		     ssize_t *nread, int64_t *n, enum mem_kind *kind, int *dev)
{
	int err;

	if (!h || !nread || (!buf && len))
		return -EINVAL;
	*n = clamp(h, len, file_off);
	if (*n < 0)
		return (int)*n;
	if (*n == 0) {
		*nread = 0;
		return 0;
	}
	err = mem_kind_of(h, buf, (size_t)*n, kind, dev);
	return err ? err : 1;
}

int objfs_gpu_read_async(struct objfs_gpu *h, void *buf, size_t len, off_t file_off,
			 ssize_t *nread, struct CUstream_st *stream)
{
	enum mem_kind kind;
	int64_t n;
	int dev, err;

	err = read_prep(h, buf, len, file_off, nread, &n, &kind, &dev);
	if (err <= 0)
		return err;
#ifdef HAVE_CUDA
	if (h->cuda) {
		struct read_cb *r = calloc(1, sizeof(*r));
		uint64_t first;
		cudaError_t e;

		if (!r)
			return -ENOMEM;
		r->h = h;
		r->buf = buf;
		r->len = (size_t)n;
		r->nread = nread;
		pthread_mutex_lock(&h->lock);
		err = submit_locked(h, file_off, (size_t)n, &first);
		if (err) {
			pthread_mutex_unlock(&h->lock);
			free(r);
			return err;
		}
		r->first = first;
		r->last = first + objfs_pieces((uint64_t)n, h->slot_size) - 1;
		if (kind == MEM_DEVICE) {
			err = enqueue_device(h, buf, (size_t)n, first, (cudaStream_t)stream);
			e = err ? cudaSuccess : cudaLaunchHostFunc((cudaStream_t)stream, done_cb, r);
		} else {
			e = cudaLaunchHostFunc((cudaStream_t)stream, host_cb, r);
		}
		if (!err && e)
			err = cuda_err(e);
		if (err) {
			/* Pieces are promised to the daemon that no stream will release. */
			h->dead = EIO;
			pthread_mutex_unlock(&h->lock);
			poison(h, EIO);
			free(r);
			return err;
		}
		h->pending++;
		pthread_mutex_unlock(&h->lock);
		return 0;
	}
#endif
	if (kind == MEM_DEVICE || stream)
		return -EOPNOTSUPP;
	return host_read(h, buf, (size_t)n, file_off, nread);
}

int objfs_gpu_read(struct objfs_gpu *h, void *buf, size_t len, off_t file_off, ssize_t *nread)
{
	enum mem_kind kind;
	int64_t n;
	int dev, err;

	err = read_prep(h, buf, len, file_off, nread, &n, &kind, &dev);
	if (err <= 0)
		return err;
	if (kind == MEM_HOST)
		return host_read(h, buf, (size_t)n, file_off, nread);
#ifdef HAVE_CUDA
	{
		cudaStream_t st;
		ssize_t got = 0;
		int cur;

		if (cudaGetDevice(&cur) != cudaSuccess)
			return -EIO;
		pthread_mutex_lock(&h->lock);
		if (!h->priv[dev]) {
			cudaSetDevice(dev);
			/* Blocking flavour: ordered after the legacy default stream. */
			if (cudaStreamCreate(&h->priv[dev]) != cudaSuccess)
				h->priv[dev] = NULL;
			cudaSetDevice(cur);
		}
		st = h->priv[dev];
		pthread_mutex_unlock(&h->lock);
		if (!st)
			return -ENOMEM;
		err = objfs_gpu_read_async(h, buf, len, file_off, &got, (struct CUstream_st *)st);
		if (err)
			return err;
		if (cudaStreamSynchronize(st) != cudaSuccess)
			return -EIO;
		if (got < 0)
			return (int)got;
		*nread = got;
		return 0;
	}
#else
	return -EOPNOTSUPP;
#endif
}

/* ---------------------------------------------------------- open/close */

static int connect_sock(const char *name)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t n = strnlen(name, OBJFS_SOCK_LEN);
	socklen_t salen;
	int fd, err;

	if (n == 0 || n >= sizeof(sa.sun_path))
		return -EINVAL;
	memcpy(sa.sun_path, name, n);
	if (name[0] == '@') {
		sa.sun_path[0] = '\0';
		salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	} else {
		salen = sizeof(sa);
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, salen)) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

/* Sends HELLO with the ring and waits for the answer. 0 or -errno. */
static int hello(struct objfs_gpu *h, int memfd)
{
	struct objfs_msg_hello m = { 0 };
	union objfs_fd_cmsg cbuf;
	struct iovec iov = { &m, sizeof(m) };
	struct msghdr mh = { 0 };
	char buf[OBJFS_MSG_MAX] __attribute__((aligned(8)));
	const struct objfs_msg_hdr *r = (const void *)buf;
	struct pollfd p = { h->sock, POLLIN, 0 };
	ssize_t n;

	objfs_msg_init(&m.h, OBJFS_MSG_HELLO, sizeof(m));
	memcpy(m.token, h->cap.token, sizeof(m.token));
	m.ino = h->cap.ino;
	m.slots = h->slots;
	m.slot_size = h->slot_size;
	m.ring_bytes = h->ring_bytes;
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	objfs_msg_attach_fd(&mh, &cbuf, memfd);
	if (sendmsg(h->sock, &mh, MSG_NOSIGNAL) != (ssize_t)sizeof(m))
		return -errno ? -errno : -EIO;
	n = poll(&p, 1, HELLO_TIMEOUT_MS);
	if (n <= 0)
		return n == 0 ? -ETIMEDOUT : -errno;
	n = recv(h->sock, buf, sizeof(buf), 0);
	if (n < 0)
		return -errno;
	if ((size_t)n < sizeof(*r) || r->magic != OBJFS_SIDE_MAGIC || r->len != (size_t)n)
		return -EPROTO;
	if (r->type == OBJFS_MSG_ERR && (size_t)n == sizeof(struct objfs_msg_err)) {
		int e = ((const struct objfs_msg_err *)buf)->err;

		return -peer_errno(e);
	}
	if (r->type != OBJFS_MSG_HELLO_OK || (size_t)n != sizeof(struct objfs_msg_hello_ok))
		return -EPROTO;
	return 0;
}

int objfs_gpu_open_cap(const struct objfs_side_cap *cap, struct objfs_gpu **out)
{
	struct objfs_gpu *h;
	int memfd, err;
	void *map;

	*out = NULL;
	if (cap->magic != OBJFS_SIDE_MAGIC || cap->struct_size != sizeof(*cap))
		return -EPROTO;
	if (cap->version != OBJFS_SIDE_VERSION)
		return -EPROTONOSUPPORT;
	if (!objfs_ring_geometry_ok(cap->ring_slots, cap->ring_slot_size) || cap->size < 0 ||
	    !memchr(cap->sock, '\0', sizeof(cap->sock)))
		return -EPROTO;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->cap = *cap;
	h->slots = cap->ring_slots;
	h->slot_size = cap->ring_slot_size;
	h->ring_bytes = objfs_ring_bytes(h->slots, h->slot_size);
	h->wakefd = -1;
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->cond, NULL);

	memfd = memfd_create("objfs-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (memfd < 0) {
		err = -errno;
		goto out_h;
	}
	if (ftruncate(memfd, (off_t)h->ring_bytes) ||
	    fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		err = -errno;
		goto out_memfd;
	}
	map = mmap(NULL, h->ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (map == MAP_FAILED) {
		err = -errno;
		goto out_memfd;
	}
	h->ring = map;
	h->data = (char *)map + objfs_ring_hdr_size(h->slots);
	h->ring->magic = OBJFS_SIDE_MAGIC;
	h->ring->version = OBJFS_SIDE_VERSION;
	h->ring->slots = h->slots;
	h->ring->slot_size = h->slot_size;
	h->ring->hdr_size = objfs_ring_hdr_size(h->slots);
	h->ring->err_piece = UINT64_MAX;

	h->sock = connect_sock(cap->sock);
	if (h->sock < 0) {
		err = h->sock;
		goto out_map;
	}
	err = hello(h, memfd);
	if (err)
		goto out_sock;
	close(memfd);
	memfd = -1;
	h->wakefd = eventfd(0, EFD_CLOEXEC);
	if (h->wakefd < 0) {
		err = -errno;
		goto out_sock;
	}
	err = -pthread_create(&h->watchdog, NULL, watchdog_main, h);
	if (err)
		goto out_wake;
#ifdef HAVE_CUDA
	ring_cuda_setup(h);
#endif
	*out = h;
	return 0;
out_wake:
	close(h->wakefd);
out_sock:
	close(h->sock);
out_map:
	munmap(h->ring, h->ring_bytes);
out_memfd:
	if (memfd >= 0)
		close(memfd);
out_h:
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
	free(h);
	return err;
}

int objfs_gpu_open(int fd, struct objfs_gpu **h)
{
	struct objfs_side_cap cap;

	if (!h)
		return -EINVAL;
	*h = NULL;
	memset(&cap, 0, sizeof(cap));
	if (ioctl(fd, OBJFS_IOC_GPU_CAP, &cap))
		return errno == EINVAL ? -ENOTTY : -errno; /* FUSE answers EINVAL for non-objfs */
	return objfs_gpu_open_cap(&cap, h);
}

void objfs_gpu_close(struct objfs_gpu *h)
{
	uint64_t one = 1;

	if (!h)
		return;
	/* Streams still hold pieces: wait until their callbacks ran. */
	pthread_mutex_lock(&h->lock);
	while (h->pending)
		pthread_cond_wait(&h->cond, &h->lock);
	pthread_mutex_unlock(&h->lock);
	(void)!write(h->wakefd, &one, sizeof(one));
	pthread_join(h->watchdog, NULL);
	close(h->wakefd);
	close(h->sock);
#ifdef HAVE_CUDA
	ring_cuda_teardown(h);
#endif
	munmap(h->ring, h->ring_bytes);
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

const char *objfs_strerror(int err)
{
	if (err < 0)
		err = -err;
	switch (err) {
	case 0: return "success";
	case ENOTTY: return "not a file on an objfs mount";
	case EOPNOTSUPP:
		return "not supported (device memory needs libobjfs built with CUDA and a usable "
		       "GPU, or the daemon runs with side=off)";
	case EACCES: return "capability refused (wrong user, inode or token)";
	case EIO: return "input/output error (a fill failed or the objfs daemon went away; "
			 "reopen the file)";
	case EFAULT: return "bad buffer (the read runs past a registered buffer, or the memory "
			    "is not accessible)";
	case EPROTO: return "protocol error between libobjfs and the objfs daemon";
	case EPROTONOSUPPORT: return "libobjfs and the objfs daemon speak different versions";
	default: {
		const char *s = strerrordesc_np(err);

		return s ? s : "unknown error";
	}
	}
}
