/*
 * bench_cuda.h: what the standalone CUDA microbenchmarks of contrib/gpu
 * (bench_copies.c, bench_pipe.c) share: a check that ends the program on a
 * CUDA error, and a monotonic clock. Each builds as one file with gcc.
 */
#ifndef OBJFS_BENCH_CUDA_H
#define OBJFS_BENCH_CUDA_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x)                                                                        \
	do {                                                                         \
		cudaError_t e_ = (x);                                                \
		if (e_) {                                                            \
			fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));     \
			exit(1);                                                     \
		}                                                                    \
	} while (0)

static inline double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

#endif
