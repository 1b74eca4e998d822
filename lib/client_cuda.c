/*
 * client_cuda: the part of libobjfs that calls CUDA, and the only file of
 * objfs that does (client_i.h describes the seam with client.c). Built
 * without HAVE_CUDA it shrinks to stubs: objfs_cuda_attach leaves h->cuda
 * NULL, so client.c serves host memory only and never calls the others,
 * which return -EOPNOTSUPP all the same (libfuse's fuse_uring_i.h pattern).
 *
 * Registration. At open the ring is registered once with cudaHostRegister
 * (portable, mapped) when a GPU is usable: copies from it run at pinned
 * speed (measured on the H100: memfd + cudaHostRegister, 4 MiB copies,
 * 53 GB/s H2D, as pinned memory; pageable memory ~7 GB/s). A
 * failure to register is not an error: the handle serves host memory.
 *
 * Consumers, per piece p in slot s = p % k, use g = p / k + 1, all enqueued
 * on the caller's stream under h->lock (client.c says why):
 *   - stream memory operations (cuStreamWaitValue32 GEQ on seq through the
 *     ring's device pointer, cudaMemcpyAsync slot -> buf,
 *     cuStreamWriteValue32 rel = g), then one cudaLaunchHostFunc per read
 *     that writes *nread. No host synchronisation at all.
 *   - without stream memory operations (or OBJFS_GPU_NO_MEMOPS=1): a host
 *     function that waits for seq (client.c's CPU wait), the copy, a host
 *     function that stores rel. CUDA runs host functions on its own
 *     thread: that is the helper thread of the design.
 *   - host memory read on a stream: client.c's CPU consumer inside one host
 *     function, so it is ordered on the stream too.
 * Every host function counts in h->pending until it ran; objfs_gpu_close
 * waits for zero before it unmaps the ring. A consumer that cannot be
 * enqueued leaves pieces promised to the daemon that nothing will release:
 * the handle is then dead and the ring poisoned.
 *
 * The driver entry points for stream memory operations are looked up once
 * per process (cudaGetDriverEntryPointByVersion, CUDA 12 ABI), so the
 * library links only libcudart.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client_i.h"

#ifdef HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>

typedef CUresult (*wait32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*write32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*hostdevptr_fn)(CUdeviceptr *, void *, unsigned int);

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static int cuda_usable;
static wait32_fn p_wait32;
static write32_fn p_write32;
static hostdevptr_fn p_hostdevptr;

struct cuda_state {
	int memops;                  /* stream memory operations usable */
	CUdeviceptr dring;           /* the ring as the device sees it */
	cudaStream_t priv[MAX_DEVS]; /* for objfs_gpu_read, per device; h->lock */
};

/* ---------------------------------------------------------- registration */

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

void objfs_cuda_attach(struct objfs_gpu *h)
{
	struct cuda_state *c;

	pthread_once(&cuda_once, cuda_init);
	if (!cuda_usable)
		return;
	c = calloc(1, sizeof(*c));
	if (!c)
		return;
	if (cudaHostRegister(h->ring, h->ring_bytes,
			     cudaHostRegisterPortable | cudaHostRegisterMapped) != cudaSuccess) {
		(void)cudaGetLastError();
		free(c);
		return;
	}
	if (p_wait32 && p_hostdevptr(&c->dring, h->ring, 0) == CUDA_SUCCESS)
		c->memops = 1;
	h->cuda = c;
}

void objfs_cuda_detach(struct objfs_gpu *h)
{
	struct cuda_state *c = h->cuda;

	if (!c)
		return;
	for (int d = 0; d < MAX_DEVS; d++)
		if (c->priv[d])
			cudaStreamDestroy(c->priv[d]);
	cudaHostUnregister(h->ring);
	free(c);
	h->cuda = NULL;
}

/* ---------------------------------------------------------- classification */

int objfs_cuda_classify(struct objfs_gpu *h, void *buf, size_t len, enum mem_kind *kind,
			int *dev)
{
	struct cudaPointerAttributes a;

	(void)h;
	*dev = 0;
	if (cudaPointerGetAttributes(&a, buf) != cudaSuccess) {
		(void)cudaGetLastError();
		*kind = MEM_HOST;
		return objfs_client_cpu_accessible(buf, len) ? 0 : -EFAULT;
	}
	*dev = a.device;
	*kind = a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? MEM_DEVICE
										  : MEM_HOST;
	if (*kind == MEM_DEVICE && (a.device < 0 || a.device >= MAX_DEVS))
		return -EOPNOTSUPP;
	return 0;
}

/* ---------------------------------------------------------- stream consumers */

struct piece_cb {
	struct objfs_gpu *h;
	uint64_t p;
};

/* Fallback consumer, part 1: wait for the piece on CUDA's callback thread. */
static void CUDART_CB wait_cb(void *arg)
{
	struct piece_cb *c = arg;

	(void)objfs_client_wait_piece(c->h, c->p);
}

/* Fallback consumer, part 3: release the slot after the copy. */
static void CUDART_CB release_cb(void *arg)
{
	struct piece_cb *c = arg;

	objfs_client_release_piece(c->h, c->p);
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
	int err = objfs_client_read_result(r->h, r->last);

	*r->nread = err ? err : (ssize_t)r->len;
	pending_drop(r->h);
	free(r);
}

/* A host read ordered on a stream: the CPU consumer, on CUDA's thread. */
static void CUDART_CB host_cb(void *arg)
{
	struct read_cb *r = arg;
	int err = objfs_client_cpu_read(r->h, r->buf, r->len, r->first);

	*r->nread = err ? err : (ssize_t)r->len;
	pending_drop(r->h);
	free(r);
}

/* Enqueues the consumers of a device read. Called with h->lock held. */
static int enqueue_device(struct objfs_gpu *h, char *buf, size_t len, uint64_t first,
			  cudaStream_t st)
{
	const struct cuda_state *cs = h->cuda;
	uint64_t n = objfs_pieces(len, h->slot_size);

	for (uint64_t i = 0; i < n; i++) {
		uint64_t p = first + i;
		uint32_t s = objfs_piece_slot(p, h->slots);
		uint32_t g = (uint32_t)objfs_piece_gen(p, h->slots);
		size_t off = (size_t)i * h->slot_size;
		size_t want = len - off < h->slot_size ? len - off : h->slot_size;
		size_t seq_off = offsetof(struct objfs_ring_hdr, ctl) + s * sizeof(struct objfs_ring_ctl);
		struct piece_cb *c = NULL;
		cudaError_t e;

		if (cs->memops) {
			if (p_wait32((CUstream)st, cs->dring + seq_off, g, CU_STREAM_WAIT_VALUE_GEQ))
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
		if (cs->memops) {
			if (p_write32((CUstream)st,
				      cs->dring + seq_off + offsetof(struct objfs_ring_ctl, rel), g,
				      CU_STREAM_WRITE_VALUE_DEFAULT))
				return -EIO;
		} else {
			e = cudaLaunchHostFunc(st, release_cb, c);
			if (e)
				return cuda_err(e);
		}
	}
	return 0;
}

/* ---------------------------------------------------------- reads */

int objfs_cuda_read_async(struct objfs_gpu *h, void *buf, off_t file_off,
			  const struct read_plan *rp, ssize_t *nread, struct CUstream_st *stream)
{
	struct read_cb *r = calloc(1, sizeof(*r));
	uint64_t first;
	cudaError_t e;
	int err;

	if (!r)
		return -ENOMEM;
	r->h = h;
	r->buf = buf;
	r->len = rp->n;
	r->nread = nread;
	pthread_mutex_lock(&h->lock);
	err = objfs_client_submit_locked(h, file_off, rp->n, &first);
	if (err) {
		pthread_mutex_unlock(&h->lock);
		free(r);
		return err;
	}
	r->first = first;
	r->last = first + objfs_pieces(rp->n, h->slot_size) - 1;
	if (rp->kind == MEM_DEVICE) {
		err = enqueue_device(h, buf, rp->n, first, (cudaStream_t)stream);
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
		objfs_client_poison(h, EIO);
		free(r);
		return err;
	}
	h->pending++;
	pthread_mutex_unlock(&h->lock);
	return 0;
}

int objfs_cuda_read(struct objfs_gpu *h, void *buf, off_t file_off, const struct read_plan *rp,
		    ssize_t *nread)
{
	struct cuda_state *c = h->cuda;
	cudaStream_t st;
	ssize_t got = 0;
	int cur, err;

	if (!c)
		return -EOPNOTSUPP; /* not reached: MEM_DEVICE needs a registered ring */
	if (cudaGetDevice(&cur) != cudaSuccess)
		return -EIO;
	pthread_mutex_lock(&h->lock);
	if (!c->priv[rp->dev]) {
		cudaSetDevice(rp->dev);
		/* Blocking flavour: ordered after the legacy default stream. */
		if (cudaStreamCreate(&c->priv[rp->dev]) != cudaSuccess)
			c->priv[rp->dev] = NULL;
		cudaSetDevice(cur);
	}
	st = c->priv[rp->dev];
	pthread_mutex_unlock(&h->lock);
	if (!st)
		return -ENOMEM;
	err = objfs_cuda_read_async(h, buf, file_off, rp, &got, (struct CUstream_st *)st);
	if (err)
		return err;
	if (cudaStreamSynchronize(st) != cudaSuccess)
		return -EIO;
	if (got < 0)
		return (int)got;
	*nread = got;
	return 0;
}

#else /* !HAVE_CUDA: stubs; client.c reaches none but attach and detach */

void objfs_cuda_attach(struct objfs_gpu *h)
{
	h->cuda = NULL;
}

void objfs_cuda_detach(struct objfs_gpu *h)
{
	(void)h;
}

int objfs_cuda_classify(struct objfs_gpu *h, void *buf, size_t len, enum mem_kind *kind,
			int *dev)
{
	(void)h, (void)buf, (void)len, (void)kind, (void)dev;
	return -EOPNOTSUPP;
}

int objfs_cuda_read_async(struct objfs_gpu *h, void *buf, off_t file_off,
			  const struct read_plan *rp, ssize_t *nread, struct CUstream_st *stream)
{
	(void)h, (void)buf, (void)file_off, (void)rp, (void)nread, (void)stream;
	return -EOPNOTSUPP;
}

int objfs_cuda_read(struct objfs_gpu *h, void *buf, off_t file_off, const struct read_plan *rp,
		    ssize_t *nread)
{
	(void)h, (void)buf, (void)file_off, (void)rp, (void)nread;
	return -EOPNOTSUPP;
}

#endif /* HAVE_CUDA */
