/*
 * gpu_test.cuh: what the GPU test programs (gpu_fill.cu, gpu_batch.cu)
 * share: the CUDA error check, a monotonic clock, the position weight of
 * their checksums, and the guard-counting and late-writer kernels. Each
 * program includes it once (static and __global__ definitions).
 */
#ifndef OBJFS_GPU_TEST_CUH
#define OBJFS_GPU_TEST_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define CK(x)                                                                      \
	do {                                                                       \
		cudaError_t e_ = (x);                                              \
		if (e_ != cudaSuccess) {                                           \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, \
				cudaGetErrorString(e_));                           \
			exit(1);                                                   \
		}                                                                  \
	} while (0)

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

__host__ __device__ static inline uint64_t weight(uint64_t pos)
{
	return ((pos * 0x9E3779B97F4A7C15ull) >> 40) | 1;
}

__global__ void k_count_not(const unsigned char *b, size_t n, unsigned char v,
			    unsigned long long *out)
{
	unsigned long long c = 0;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		c += b[i] != v;
	for (int o = 16; o; o >>= 1)
		c += __shfl_down_sync(0xffffffffu, c, o);
	if ((threadIdx.x & 31) == 0)
		atomicAdd(out, c);
}

/* Spins ~@ns on the GPU, then writes @v over the buffer: the "writer" kernel. */
__global__ void k_late_fill(unsigned char *b, size_t n, unsigned char v, long long ns)
{
	long long t0 = clock64();

	if (ns)
		while (clock64() - t0 < ns * 2) /* clock64 ticks ~2 per ns at ~2 GHz */
			;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		b[i] = v;
}

/*
 * Waits (polling, not blocking in CUDA) up to @secs for @st to complete,
 * then stamps the wall clock in *@ts. 1 when it completed, 0 when it hung.
 */
static int stream_wait(cudaStream_t st, double secs, struct timespec *ts)
{
	int done = 0;

	for (double t0 = now(); now() - t0 < secs;) {
		if ((done = cudaStreamQuery(st) == cudaSuccess))
			break;
		usleep(1000);
	}
	clock_gettime(CLOCK_REALTIME, ts);
	return done;
}

/* The checksum of @n bytes at @off of @fd on the CPU, weights from @base on. */
static uint64_t cpu_sum(int fd, int64_t off, size_t n, uint64_t base)
{
	static unsigned char buf[1 << 22];
	uint64_t s = 0;
	size_t done = 0;

	while (done < n) {
		size_t want = n - done < sizeof(buf) ? n - done : sizeof(buf);
		ssize_t r = pread(fd, buf, want, off + (int64_t)done);

		if (r <= 0) {
			perror("pread source");
			exit(2);
		}
		for (ssize_t i = 0; i < r; i++)
			s += (uint64_t)buf[i] * weight(base + done + (size_t)i);
		done += (size_t)r;
	}
	return s;
}

#endif
