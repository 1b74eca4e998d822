/*
 * client_cuda: the part of libobjfs that calls CUDA, and the only file of
 * objfs that does (client_i.h describes the seam with client.c). Built
 * without HAVE_CUDA it shrinks to stubs: objfs_cuda_attach leaves s->cuda
 * NULL, so client.c serves host memory only and never calls the others,
 * which return -EOPNOTSUPP all the same (libfuse's fuse_uring_i.h pattern).
 *
 * Registration: a session's ring is registered once with cudaHostRegister
 * (portable, mapped) when a GPU is usable, so copies from it run at pinned
 * speed, several times pageable memory's. A failure to register is not an
 * error: the handle serves host memory. On a machine of several NUMA nodes
 * the ring goes to the node of the GPU current at the session's first open
 * (objfs_cuda_place: a preferred-node policy on the untouched mapping,
 * which the daemon's faults follow too); a process per GPU, the usual
 * layout, gets each ring beside its GPU.
 *
 * Consumers of a batch, per piece p in slot s = p % k, use g = p / k + 1,
 * all enqueued on the caller's stream under s->lock (client.c says why):
 *   - stream memory operations (cuStreamWaitValue32 GEQ on seq through the
 *     ring's device pointer, cudaMemcpyAsync slot -> buf for each entry's
 *     part, cuStreamWriteValue32 rel = g), then one cudaLaunchHostFunc per
 *     batch that waits for its last DONE (at most a socket hop after the
 *     last piece) and writes every nread. No other host synchronisation.
 *   - without them (or OBJFS_GPU_NO_MEMOPS=1): host functions that wait
 *     for seq (client.c's CPU wait) and store rel around the copies.
 * Host memory is copied by cudaMemcpyAsync too, ordered like the rest.
 * Copies of entries that are neighbours in the slot and in memory (rows of
 * one tensor) are merged, and a piece's copies into device memory go to
 * the driver as one cudaMemcpyBatchAsync (CUDA >= 12.8, not the legacy
 * default stream, not OBJFS_GPU_NO_BATCHCOPY=1), ENQ_MAX at a time: a copy
 * call per 64 KiB sample would bound a warm readv well below the bus
 * (contrib/gpu/bench_copies.c). Copies of one batch run in no set order,
 * so overlapping destinations get their bytes in no set order either.
 * Every host function counts in s->pending until it ran; the last
 * objfs_gpu_close waits for zero before it unmaps the ring. A consumer that
 * cannot be enqueued leaves pieces promised that nothing will release: the
 * session is then dead and the ring poisoned.
 *
 * Classification: cudaPointerGetAttributes says device or host, and
 * cuMemGetAddressRange the allocation around device memory, which
 * batch_prep reuses while entries stay inside it (a batch of 10,000
 * samples into one tensor asks once). Driver entry points are looked up
 * once (cudaGetDriverEntryPointByVersion), so only libcudart is linked.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "client_i.h"

#ifdef HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>

typedef CUresult (*wait32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*write32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*hostdevptr_fn)(CUdeviceptr *, void *, unsigned int);
typedef CUresult (*addrrange_fn)(CUdeviceptr *, size_t *, CUdeviceptr);

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static int cuda_usable;
static int batch_copy;               /* cudaMemcpyBatchAsync usable; cleared if the driver refuses it */
static wait32_fn p_wait32;
static write32_fn p_write32;
static hostdevptr_fn p_hostdevptr;
static addrrange_fn p_addrrange; /* NULL: classify every buffer */

struct cuda_state {
	int memops;                  /* stream memory operations usable */
	CUdeviceptr dring;           /* the ring as the device sees it */
	cudaStream_t priv[MAX_DEVS]; /* for objfs_gpu_read(v), per device; s->lock */
};

/* ---------------------------------------------------------- registration */

/* Whether the switch @name is set in the environment (to anything but "0"). */
static int env_on(const char *name)
{
	const char *v = getenv(name);

	return v && strcmp(v, "0");
}

static void cuda_init(void)
{
	enum cudaDriverEntryPointQueryResult q;
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
		(void)cudaGetLastError();
		return;
	}
	cuda_usable = 1;
	if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", (void **)&p_addrrange, 12000,
					     cudaEnableDefault, &q) != cudaSuccess ||
	    q != cudaDriverEntryPointSuccess) {
		(void)cudaGetLastError();
		p_addrrange = NULL;
	}
#if CUDART_VERSION >= 12080
	batch_copy = !env_on("OBJFS_GPU_NO_BATCHCOPY");
#endif
	if (env_on("OBJFS_GPU_NO_MEMOPS"))
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

/* The NUMA node of the current device from sysfs, or -1 (one node, unknown). */
static int device_node(void)
{
	char bus[32], path[96];
	int dev, node = -1;
	FILE *f;

	if (access("/sys/devices/system/node/node1", F_OK))
		return -1; /* one node: nothing to place */
	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetPCIBusId(bus, sizeof(bus), dev) != cudaSuccess) {
		(void)cudaGetLastError();
		return -1;
	}
	for (char *p = bus; *p; p++) /* CUDA writes 0000:3B:00.0, sysfs 0000:3b:00.0 */
		if (*p >= 'A' && *p <= 'F')
			*p = (char)(*p - 'A' + 'a');
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", bus);
	f = fopen(path, "re");
	if (f) {
		if (fscanf(f, "%d", &node) != 1)
			node = -1;
		fclose(f);
	}
	return node;
}

void objfs_cuda_place(struct objfs_sess *s)
{
	unsigned long mask[16] = { 0 }; /* 1,024 nodes */
	int node;

	pthread_once(&cuda_once, cuda_init);
	if (!cuda_usable || (node = device_node()) < 0 || node >= 1024)
		return;
	mask[node / 64] = 1ul << (node % 64);
	/* MPOL_PREFERRED (1): the node if it has room, others otherwise; no libnuma. */
	(void)syscall(SYS_mbind, s->ring, s->ring_bytes, 1, mask, sizeof(mask) * 8 + 1, 0);
}

void objfs_cuda_attach(struct objfs_sess *s)
{
	struct cuda_state *c;

	pthread_once(&cuda_once, cuda_init);
	if (!cuda_usable)
		return;
	c = calloc(1, sizeof(*c));
	if (!c)
		return;
	if (cudaHostRegister(s->ring, s->ring_bytes,
			     cudaHostRegisterPortable | cudaHostRegisterMapped) != cudaSuccess) {
		(void)cudaGetLastError();
		free(c);
		return;
	}
	if (p_wait32 && p_hostdevptr(&c->dring, s->ring, 0) == CUDA_SUCCESS)
		c->memops = 1;
	s->cuda = c;
}

void objfs_cuda_detach(struct objfs_sess *s)
{
	struct cuda_state *c = s->cuda;

	if (!c)
		return;
	for (int d = 0; d < MAX_DEVS; d++)
		if (c->priv[d])
			cudaStreamDestroy(c->priv[d]);
	cudaHostUnregister(s->ring);
	free(c);
	s->cuda = NULL;
}

/* ---------------------------------------------------------- classification */

int objfs_cuda_classify(struct objfs_sess *s, void *buf, size_t len, enum mem_kind *kind,
			int *dev, struct reg *alloc)
{
	struct cudaPointerAttributes a;
	CUdeviceptr base;
	size_t size;

	(void)s;
	*dev = 0;
	alloc->len = 0;
	if (cudaPointerGetAttributes(&a, buf) != cudaSuccess) {
		(void)cudaGetLastError();
		*kind = MEM_HOST;
		return objfs_client_cpu_accessible(buf, len) > 0 ? 0 : -EFAULT;
	}
	*dev = a.device;
	*kind = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? MEM_DEVICE
										  : MEM_HOST;
	if (*kind == MEM_DEVICE && (a.device < 0 || a.device >= MAX_DEVS))
		return -EOPNOTSUPP;
	/* The allocation, so that its other entries need no lookup (above). */
	if (*kind == MEM_DEVICE && p_addrrange &&
	    p_addrrange(&base, &size, (CUdeviceptr)(uintptr_t)buf) == CUDA_SUCCESS &&
	    base <= (CUdeviceptr)(uintptr_t)buf && size > (uintptr_t)buf - base)
		*alloc = (struct reg){ (char *)(uintptr_t)base, size, MEM_DEVICE, a.device };
	if (*kind == MEM_HOST && a.type == cudaMemoryTypeUnregistered &&
	    objfs_client_cpu_accessible(buf, len) <= 0)
		return -EFAULT;
	return 0;
}

/* ---------------------------------------------------------- stream consumers */

struct piece_cb {
	struct objfs_sess *s;
	uint64_t p;
};

/* Fallback consumer, part 1: wait for the piece on CUDA's callback thread. */
static void CUDART_CB wait_cb(void *arg)
{
	struct piece_cb *c = arg;

	(void)objfs_client_wait_piece(c->s, c->p);
}

/* Fallback consumer, part 3: release the slot after the copy. */
static void CUDART_CB release_cb(void *arg)
{
	struct piece_cb *c = arg;

	objfs_client_release_piece(c->s, c->p);
	free(c);
}

static void pending_drop(struct objfs_sess *s)
{
	pthread_mutex_lock(&s->lock);
	s->pending--;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

/* End of a batch on its stream: wait for its DONE, publish the results. */
static void CUDART_CB done_cb(void *arg)
{
	struct batch *b = arg;
	struct objfs_sess *s = b->s;

	objfs_client_finish(b, 0);
	free(b);
	pending_drop(s);
}

/* The walk's state while a batch's consumers are enqueued (s->lock held). */
#define ENQ_MAX 256 /* copies handed to the driver at once */
struct enq {
	struct objfs_sess *s;
	cudaStream_t st;
	struct piece_cb *cb;         /* fallback: the open piece's */
	unsigned n;                  /* copies not yet enqueued */
	int all_dev;                 /* every one of them into device memory */
	void *dst[ENQ_MAX];
	const void *src[ENQ_MAX];
	size_t len[ENQ_MAX];
};

/* One call for the copies queued, if the driver takes it: 0, 1 (not taken) or -errno. */
static int enq_batch(struct enq *q)
{
#if CUDART_VERSION >= 12080
	struct cudaMemcpyAttributes at = { .srcAccessOrder = cudaMemcpySrcAccessOrderStream };
	size_t ai = 0;
	cudaError_t e;

	if (!__atomic_load_n(&batch_copy, __ATOMIC_RELAXED) || q->n < 2 || !q->all_dev ||
	    !q->st || q->st == cudaStreamLegacy)
		return 1;
#if CUDART_VERSION >= 13000
	e = cudaMemcpyBatchAsync(q->dst, q->src, q->len, q->n, &at, &ai, 1, q->st);
#else
	size_t fail;

	e = cudaMemcpyBatchAsync(q->dst, (void **)q->src, q->len, q->n, &at, &ai, 1, &fail, q->st);
#endif
	if (e == cudaErrorNotSupported || e == cudaErrorCallRequiresNewerDriver) {
		(void)cudaGetLastError();
		__atomic_store_n(&batch_copy, 0, __ATOMIC_RELAXED); /* a driver older than the runtime */
		return 1;
	}
	return cuda_err(e);
#else
	(void)q;
	return 1;
#endif
}

static int enq_flush(struct enq *q)
{
	int err = enq_batch(q);

	if (err == 1) { /* one by one */
		err = 0;
		for (unsigned i = 0; !err && i < q->n; i++)
			err = cuda_err(cudaMemcpyAsync(q->dst[i], q->src[i], q->len[i],
						       cudaMemcpyDefault, q->st));
	}
	q->n = 0;
	q->all_dev = 1;
	return err;
}

static size_t seq_off_of(const struct objfs_sess *s, uint64_t p)
{
	return offsetof(struct objfs_ring_hdr, ctl) +
	       objfs_piece_slot(p, s->slots) * sizeof(struct objfs_ring_ctl);
}

static int enq_open(void *arg, uint64_t p)
{
	struct enq *q = arg;
	const struct cuda_state *cs = q->s->cuda;
	uint32_t g = (uint32_t)objfs_piece_gen(p, q->s->slots);
	cudaError_t e;

	if (cs->memops)
		return p_wait32((CUstream)q->st, cs->dring + seq_off_of(q->s, p), g,
				CU_STREAM_WAIT_VALUE_GEQ) ? -EIO : 0;
	q->cb = malloc(sizeof(*q->cb));
	if (!q->cb)
		return -ENOMEM;
	q->cb->s = q->s;
	q->cb->p = p;
	e = cudaLaunchHostFunc(q->st, wait_cb, q->cb);
	if (e) {
		free(q->cb);
		q->cb = NULL;
	}
	return cuda_err(e);
}

static int enq_copy(void *arg, const struct bent *e, const char *src, uint64_t dst_off,
		    size_t len)
{
	struct enq *q = arg;
	char *dst = e->buf + dst_off;
	unsigned k = q->n - 1;
	int err;

	if (q->n && (char *)q->dst[k] + q->len[k] == dst && (const char *)q->src[k] + q->len[k] == src) {
		q->len[k] += len;
		return 0;
	}
	if (q->n == ENQ_MAX && (err = enq_flush(q)))
		return err;
	q->dst[q->n] = dst;
	q->src[q->n] = src;
	q->len[q->n] = len;
	q->all_dev &= e->kind == MEM_DEVICE;
	q->n++;
	return 0;
}

static int enq_close(void *arg, uint64_t p, size_t len)
{
	struct enq *q = arg;
	const struct cuda_state *cs = q->s->cuda;
	int err = enq_flush(q);
	cudaError_t e;

	(void)len;
	if (err)
		return err;
	if (cs->memops)
		return p_write32((CUstream)q->st,
				 cs->dring + seq_off_of(q->s, p) + offsetof(struct objfs_ring_ctl, rel),
				 (uint32_t)objfs_piece_gen(p, q->s->slots),
				 CU_STREAM_WRITE_VALUE_DEFAULT) ? -EIO : 0;
	e = cudaLaunchHostFunc(q->st, release_cb, q->cb);
	if (e)
		free(q->cb);
	q->cb = NULL;
	return cuda_err(e);
}

static const struct walk_ops enq_ops = { enq_open, enq_copy, enq_close };

int objfs_cuda_submit(struct objfs_sess *s, struct batch *b, struct CUstream_st *stream)
{
	struct enq q = { .s = s, .st = (cudaStream_t)stream, .all_dev = 1 };
	cudaError_t e;
	int err;

	pthread_mutex_lock(&s->lock);
	err = objfs_client_submit_locked(s, b);
	if (err) {
		pthread_mutex_unlock(&s->lock);
		return err;
	}
	err = objfs_client_walk(b, &enq_ops, &q);
	e = err ? cudaSuccess : cudaLaunchHostFunc(q.st, done_cb, b);
	if (!err && e)
		err = cuda_err(e);
	if (err) {
		/* Pieces are promised to the daemon that no stream will release. */
		free(q.cb);
		s->dead = EIO;
		STAILQ_REMOVE(&s->waiting, b, batch, next);
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->lock);
		objfs_client_poison(s, EIO);
		return err;
	}
	s->pending++;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

int objfs_cuda_priv_stream(struct objfs_sess *s, int dev, struct CUstream_st **out)
{
	struct cuda_state *c = s->cuda;
	int cur;

	if (!c || dev < 0 || dev >= MAX_DEVS)
		return -EOPNOTSUPP; /* not reached: MEM_DEVICE needs a registered ring */
	if (cudaGetDevice(&cur) != cudaSuccess)
		return -EIO;
	pthread_mutex_lock(&s->lock);
	if (!c->priv[dev]) {
		cudaSetDevice(dev);
		/* Blocking flavour: ordered after the legacy default stream. */
		if (cudaStreamCreate(&c->priv[dev]) != cudaSuccess)
			c->priv[dev] = NULL;
		cudaSetDevice(cur);
	}
	*out = (struct CUstream_st *)c->priv[dev];
	pthread_mutex_unlock(&s->lock);
	return *out ? 0 : -ENOMEM;
}

int objfs_cuda_sync(struct CUstream_st *st)
{
	return cudaStreamSynchronize((cudaStream_t)st) == cudaSuccess ? 0 : -EIO;
}

#else /* !HAVE_CUDA: stubs; client.c reaches none but place, attach and detach */

void objfs_cuda_place(struct objfs_sess *s)
{
	(void)s;
}

void objfs_cuda_attach(struct objfs_sess *s)
{
	s->cuda = NULL;
}

void objfs_cuda_detach(struct objfs_sess *s)
{
	(void)s;
}

int objfs_cuda_classify(struct objfs_sess *s, void *buf, size_t len, enum mem_kind *kind,
			int *dev, struct reg *alloc)
{
	(void)s, (void)buf, (void)len, (void)kind, (void)dev, (void)alloc;
	return -EOPNOTSUPP;
}

int objfs_cuda_submit(struct objfs_sess *s, struct batch *b, struct CUstream_st *stream)
{
	(void)s, (void)b, (void)stream;
	return -EOPNOTSUPP;
}

int objfs_cuda_priv_stream(struct objfs_sess *s, int dev, struct CUstream_st **st)
{
	(void)s, (void)dev;
	*st = NULL;
	return -EOPNOTSUPP;
}

int objfs_cuda_sync(struct CUstream_st *st)
{
	(void)st;
	return -EOPNOTSUPP;
}

#endif /* HAVE_CUDA */
