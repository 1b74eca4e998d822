/*
 * bench_copies: how fast can many small pieces of pinned host memory reach
 * scattered places in GPU memory? The question behind a warm
 * objfs_gpu_readv: its samples already sit in the ring, and what is left is one
 * host-to-device copy per sample. This times, on the same pinned source and
 * the same scattered destinations:
 *   loop   one cudaMemcpyAsync per piece (OBJFS_GPU_NO_BATCHCOPY=1)
 *   batch  cudaMemcpyBatchAsync, BATCH pieces a call (CUDA >= 12.8)
 *   one    one copy of all the bytes (the bus's ceiling for this size)
 * Build: gcc -O2 -I/usr/local/cuda/include bench_copies.c \
 *          -L/usr/local/cuda/lib64 -lcudart_static -ldl -lrt -lpthread
 * Run:   bench_copies [pieces=10000] [piece_kib=64] [batch=128] [reps=5]
 */
#include "bench_cuda.h"

int main(int argc, char **argv)
{
	size_t n = argc > 1 ? strtoul(argv[1], NULL, 0) : 10000;
	size_t len = (argc > 2 ? strtoul(argv[2], NULL, 0) : 64) << 10;
	size_t batch = argc > 3 ? strtoul(argv[3], NULL, 0) : 128;
	int reps = argc > 4 ? atoi(argv[4]) : 5;
	char *src, *dst;
	void **dsts = malloc(n * sizeof(*dsts));
	const void **srcs = malloc(n * sizeof(*srcs));
	size_t *sizes = malloc(n * sizeof(*sizes)), *perm = malloc(n * sizeof(*perm));
	cudaStream_t st;

	if (!n || !len || !batch || !dsts || !srcs || !sizes || !perm)
		return 2;
	CK(cudaMallocHost((void **)&src, n * len));
	CK(cudaMalloc((void **)&dst, n * len));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	for (size_t i = 0; i < n; i++)
		perm[i] = i;
	srand(1);
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = (size_t)rand() % (i + 1), t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
	}
	for (size_t i = 0; i < n; i++) {
		srcs[i] = src + i * len;
		dsts[i] = dst + perm[i] * len;
		sizes[i] = len;
		src[i * len] = (char)i;
	}
	printf("# %zu pieces of %zu KiB, batch %zu, %d reps\n", n, len >> 10, batch, reps);
	for (int r = 0; r < reps; r++) {
		double t0, t_loop, t_batch = 0, t_one;

		t0 = now();
		for (size_t i = 0; i < n; i++)
			CK(cudaMemcpyAsync(dsts[i], srcs[i], len, cudaMemcpyHostToDevice, st));
		CK(cudaStreamSynchronize(st));
		t_loop = now() - t0;
#if CUDART_VERSION >= 12080
		{
			struct cudaMemcpyAttributes at = { 0 };
			size_t ai = 0;

			at.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
			t0 = now();
			for (size_t i = 0; i < n; i += batch) {
				size_t k = n - i < batch ? n - i : batch;
#if CUDART_VERSION >= 13000
				CK(cudaMemcpyBatchAsync(dsts + i, srcs + i, sizes + i, k, &at, &ai, 1,
							st));
#else
				size_t fail;

				CK(cudaMemcpyBatchAsync(dsts + i, (void **)srcs + i, sizes + i, k, &at,
							&ai, 1, &fail, st));
#endif
			}
			CK(cudaStreamSynchronize(st));
			t_batch = now() - t0;
		}
#endif
		t0 = now();
		CK(cudaMemcpyAsync(dst, src, n * len, cudaMemcpyHostToDevice, st));
		CK(cudaStreamSynchronize(st));
		t_one = now() - t0;
		printf("rep %d: loop %.1f ms %.2f GB/s %.0f/s | batch %.1f ms %.2f GB/s %.0f/s | one %.1f ms %.2f GB/s\n",
		       r, t_loop * 1e3, (double)(n * len) / t_loop / 1e9, (double)n / t_loop,
		       t_batch * 1e3, t_batch ? (double)(n * len) / t_batch / 1e9 : 0,
		       t_batch ? (double)n / t_batch : 0, t_one * 1e3,
		       (double)(n * len) / t_one / 1e9);
	}
	return 0;
}
