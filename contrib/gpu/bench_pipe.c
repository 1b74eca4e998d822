/*
 * bench_pipe: the ceiling of a warm objfs_gpu_readv's design, without objfs.
 * A warm readv is a pipeline: CPU threads copy 64 KiB samples from cache
 * memory into the slots of a pinned ring, publish each slot (seq), and the
 * GPU, in order on one stream, waits for the slot (cuStreamWaitValue32),
 * copies it to device memory and releases it (cuStreamWriteValue32 rel),
 * which the CPU side waits for before it reuses the slot. This program runs
 * that pipeline alone, so that a readv's figure has the design's own
 * ceiling beside it, and each stage can be taken out:
 *   fill=none    the CPU side publishes without copying: the GPU side alone
 *   fill=memcpy  memcpy into the slot
 *   fill=nt      streaming stores (what objfs does for a device fill)
 *   gpu=none     the CPU side alone: it releases each slot itself
 * plus "one": a single copy of the same bytes (the bus).
 * Build: gcc -O2 -pthread -I/usr/local/cuda/include -I../../src/util bench_pipe.c \
 *          -L/usr/local/cuda/lib64 -lcudart_static -ldl -lrt
 * Run:   bench_pipe [threads=16] [slots=64] [slot_kib=2048] [total_mib=640] [reps=3] [group=1]
 * group: the GPU side takes that many slots at a time (waits for all, one
 * copy of those contiguous in the ring, then releases all).
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bench_cuda.h"
#include "buf.h"

#define SAMPLE (64u << 10)
#define CACHE_BYTES (2048ul << 20)

typedef CUresult (*wait32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*write32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*hostdevptr_fn)(CUdeviceptr *, void *, unsigned int);

static wait32_fn p_wait32;
static write32_fn p_write32;
static hostdevptr_fn p_hostdevptr;

enum fill { F_NONE, F_MEMCPY, F_NT };

struct pipe {
	unsigned threads, slots;
	size_t slot, pieces, group;
	enum fill fill;
	int gpu;
	char *ring, *cache;
	uint32_t *seq, *rel; /* slots each, pinned */
};

struct worker {
	struct pipe *p;
	unsigned id;
};

static void *producer(void *arg)
{
	struct worker *w = arg;
	struct pipe *p = w->p;
	uint64_t x = 88172645463325252ull + w->id;

	for (size_t k = w->id; k < p->pieces; k += p->threads) {
		unsigned s = (unsigned)(k % p->slots);
		uint32_t g = (uint32_t)(k / p->slots + 1);
		char *dst = p->ring + (size_t)s * p->slot;

		while (__atomic_load_n(&p->rel[s], __ATOMIC_ACQUIRE) < g - 1)
			sched_yield();
		for (size_t o = 0; p->fill != F_NONE && o < p->slot; o += SAMPLE) {
			const char *src;

			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			src = p->cache + (x % (CACHE_BYTES / SAMPLE)) * SAMPLE;
			if (p->fill == F_NT)
				objfs_copy_stream(dst + o, src, SAMPLE);
			else
				memcpy(dst + o, src, SAMPLE);
		}
		/* Published in any order; the consumer takes them in order. */
		__atomic_store_n(&p->seq[s], g, __ATOMIC_RELEASE);
		if (!p->gpu) /* no consumer: release it ourselves */
			__atomic_store_n(&p->rel[s], g, __ATOMIC_RELEASE);
	}
	return NULL;
}

static double run(struct pipe *p, char *d, cudaStream_t st, CUdeviceptr dseq, CUdeviceptr drel)
{
	pthread_t th[256];
	struct worker w[256];
	double t0;

	memset(p->seq, 0, p->slots * sizeof(uint32_t));
	memset(p->rel, 0, p->slots * sizeof(uint32_t));
	CK(cudaStreamSynchronize(st));
	t0 = now();
	for (unsigned i = 0; i < p->threads; i++) {
		w[i] = (struct worker){ p, i };
		pthread_create(&th[i], NULL, producer, &w[i]);
	}
	/* Groups of p->group slots: one wait (every slot of the group published:
	 * waits on each, back to back), one copy where they are contiguous. */
	for (size_t k0 = 0; p->gpu && k0 < p->pieces; k0 += p->group) {
		size_t n = p->pieces - k0 < p->group ? p->pieces - k0 : p->group, run = 0;
		int bad = 0;

		for (size_t k = k0; k < k0 + n; k++)
			bad |= p_wait32((CUstream)st, dseq + (k % p->slots) * 4,
					(uint32_t)(k / p->slots + 1), CU_STREAM_WAIT_VALUE_GEQ);
		for (size_t k = k0; k < k0 + n; k++) {
			run++;
			if (k + 1 == k0 + n || (k + 1) % p->slots == 0) {
				size_t f = k + 1 - run;

				bad |= cudaMemcpyAsync(d + f * p->slot,
						       p->ring + (f % p->slots) * p->slot,
						       run * p->slot, cudaMemcpyHostToDevice, st);
				run = 0;
			}
		}
		for (size_t k = k0; k < k0 + n; k++)
			bad |= p_write32((CUstream)st, drel + (k % p->slots) * 4,
					 (uint32_t)(k / p->slots + 1), CU_STREAM_WRITE_VALUE_DEFAULT);
		if (bad) {
			fprintf(stderr, "enqueue failed\n");
			exit(1);
		}
	}
	for (unsigned i = 0; i < p->threads; i++)
		pthread_join(th[i], NULL);
	CK(cudaStreamSynchronize(st));
	return now() - t0;
}

int main(int argc, char **argv)
{
	struct pipe p = { 0 };
	size_t total;
	int reps;
	enum cudaDriverEntryPointQueryResult q;
	cudaStream_t st;
	CUdeviceptr dseq, drel;
	char *d;
	uint32_t *ctl;
	static const char *fname[] = { "none", "memcpy", "nt" };

	p.threads = argc > 1 ? (unsigned)atoi(argv[1]) : 16;
	p.slots = argc > 2 ? (unsigned)atoi(argv[2]) : 64;
	p.slot = (argc > 3 ? strtoul(argv[3], NULL, 0) : 2048) << 10;
	total = (argc > 4 ? strtoul(argv[4], NULL, 0) : 640) << 20;
	reps = argc > 5 ? atoi(argv[5]) : 3;
	p.group = argc > 6 ? strtoul(argv[6], NULL, 0) : 1;
	if (!p.threads || p.threads > 256 || !p.slots || p.slot < SAMPLE || p.slot % SAMPLE ||
	    !p.group || p.group > p.slots / 2)
		return 2;
	p.pieces = total / p.slot;
	if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", (void **)&p_wait32, 12000,
					     cudaEnableDefault, &q) ||
	    cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", (void **)&p_write32, 12000,
					     cudaEnableDefault, &q) ||
	    cudaGetDriverEntryPointByVersion("cuMemHostGetDevicePointer", (void **)&p_hostdevptr,
					     12000, cudaEnableDefault, &q)) {
		fprintf(stderr, "no stream memory operations\n");
		return 1;
	}
	/* The ring as objfs makes it: shared memory on 4 KiB pages, registered. */
	p.ring = mmap(NULL, p.slots * p.slot, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		      -1, 0);
	p.cache = mmap(NULL, CACHE_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		       0);
	if (p.ring == MAP_FAILED || p.cache == MAP_FAILED)
		return 1;
	madvise(p.cache, CACHE_BYTES, MADV_HUGEPAGE); /* as the block cache's blocks */
	memset(p.cache, 0x5a, CACHE_BYTES);
	CK(cudaHostRegister(p.ring, p.slots * p.slot,
			    cudaHostRegisterPortable | cudaHostRegisterMapped));
	CK(cudaHostAlloc((void **)&ctl, 2 * p.slots * sizeof(uint32_t), cudaHostAllocMapped));
	p.seq = ctl;
	p.rel = ctl + p.slots;
	if (p_hostdevptr(&dseq, p.seq, 0) || p_hostdevptr(&drel, p.rel, 0))
		return 1;
	CK(cudaMalloc((void **)&d, p.pieces * p.slot));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	printf("# %u threads, %u slots of %zu KiB, %zu MiB a pass (%zu pieces), groups of %zu, %d reps\n",
	       p.threads, p.slots, p.slot >> 10, (p.pieces * p.slot) >> 20, p.pieces, p.group, reps);
	for (int r = 0; r < reps; r++) {
		double t;

		/* (fill, gpu): the pipeline, each stage taken out in turn */
		static const int runs[][2] = { { F_NONE, 1 },   { F_MEMCPY, 1 }, { F_NT, 1 },
					       { F_MEMCPY, 0 }, { F_NT, 0 } };

		for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
			p.fill = (enum fill)runs[i][0];
			p.gpu = runs[i][1];
			t = run(&p, d, st, dseq, drel);
			printf("rep %d fill=%s gpu=%s: %.2f ms %.2f GB/s\n", r, fname[p.fill],
			       p.gpu ? "copy" : "none", t * 1e3, (double)(p.pieces * p.slot) / t / 1e9);
		}
		t = now();
		CK(cudaMemcpyAsync(d, p.ring, p.slots * p.slot < p.pieces * p.slot
						      ? p.slots * p.slot : p.pieces * p.slot,
				   cudaMemcpyHostToDevice, st));
		CK(cudaStreamSynchronize(st));
		t = now() - t;
		printf("rep %d one copy of the ring: %.2f GB/s\n", r,
		       (double)(p.slots * p.slot < p.pieces * p.slot ? p.slots * p.slot
								      : p.pieces * p.slot) / t / 1e9);
	}
	return 0;
}
