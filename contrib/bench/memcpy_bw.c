/*
 * memcpy_bw: the machine's ceiling for one CPU copy per byte. A warm
 * objfs_gpu_readv copies each sample once, cache block -> ring
 * slot, on the side API's fill workers, while the GPU's DMA reads the ring;
 * the pread path copies page cache -> pinned buffer. This times that copy
 * alone on the same shape: 64 KiB pieces from random places of a 2 GiB
 * source into a 128 MiB destination (the default ring), 655 MB a run (the
 * benchmark's 10,000 samples), by 1-16 threads, twice. What it reports for
 * 16 threads bounds any path that copies every byte once on this machine.
 *
 * With "nt" as its argument the copies are objfs_copy_stream's (util/buf.h:
 * streaming stores, no read for ownership of the destination's lines,
 * nothing left in the cache), as fills into GPU ring slots copy.
 *
 *   memcpy_bw [nt]       (contrib/gpu/run_device.sh pack builds it)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "buf.h" /* objfs_copy_stream, the fills' copy */

#define SRC_BYTES (2ull << 30)
#define DST_BYTES (128ull << 20)
#define PIECE (64u << 10)
#define TOTAL 655360000ull
#define MAX_THREADS 64

static char *src, *dst;
static unsigned nthreads;
static int nt;

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Thread @arg's share of the pieces: random sources, destinations in turn. */
static void *run(void *arg)
{
	uint64_t id = (uint64_t)(uintptr_t)arg, x = id * 7919 + 1;
	size_t n = TOTAL / PIECE / nthreads;

	for (size_t i = 0; i < n; i++) {
		size_t s, d;

		x = x * 6364136223846793005ull + 1442695040888963407ull;
		s = (size_t)((x >> 20) % (SRC_BYTES / PIECE)) * PIECE;
		d = (size_t)((i * nthreads + id) % (DST_BYTES / PIECE)) * PIECE;
		if (nt)
			objfs_copy_stream(dst + d, src + s, PIECE);
		else
			memcpy(dst + d, src + s, PIECE);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	static const unsigned counts[] = { 1, 2, 4, 8, 12, 16 };
	pthread_t t[MAX_THREADS];

	src = mmap(NULL, SRC_BYTES, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	dst = mmap(NULL, DST_BYTES, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (src == MAP_FAILED || dst == MAP_FAILED) {
		perror("memcpy_bw: mmap");
		return 1;
	}
	nt = argc > 1 && strcmp(argv[1], "nt") == 0;
	printf("memcpy_bw: %s\n", nt ? "non-temporal stores" : "memcpy");
	memset(src, 1, SRC_BYTES); /* every page really there, not the zero page */
	memset(dst, 2, DST_BYTES);
	for (int rep = 0; rep < 2; rep++) {
		for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
			double t0, dt;

			nthreads = counts[k];
			t0 = now();
			for (unsigned i = 0; i < nthreads; i++)
				if (pthread_create(&t[i], NULL, run, (void *)(uintptr_t)i)) {
					fprintf(stderr, "memcpy_bw: cannot start a thread\n");
					return 1;
				}
			for (unsigned i = 0; i < nthreads; i++)
				pthread_join(t[i], NULL);
			dt = now() - t0;
			printf("threads %2u: %5.1f GB/s (%4.1f a thread), 655 MB in %5.1f ms\n",
			       nthreads, (double)TOTAL / dt / 1e9,
			       (double)TOTAL / dt / 1e9 / nthreads, dt * 1e3);
		}
	}
	return 0;
}
