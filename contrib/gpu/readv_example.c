/*
 * readv_example: random fixed-size samples of many shard files of an objfs
 * mount into one device buffer with one objfs_gpu_readv_async, then a
 * cudaStreamSynchronize. The shape of a data loader's step.
 *
 *   cc -O2 readv_example.c $(pkg-config --cflags --libs objfs) -lcudart -o readv_example
 *   ./readv_example SAMPLE_BYTES NSAMPLES /mnt/data/shard-*.bin
 */
#include <cuda_runtime.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <objfs.h>

int main(int argc, char **argv)
{
	size_t len = argc > 3 ? strtoull(argv[1], NULL, 0) : 0;
	int n = argc > 3 ? atoi(argv[2]) : 0, nf = argc - 3, err, bad = 0;
	struct objfs_gpu **h = calloc(nf > 0 ? nf : 1, sizeof(*h));
	off_t *size = calloc(nf > 0 ? nf : 1, sizeof(*size));
	struct objfs_gpu_iov *v = calloc(n > 0 ? n : 1, sizeof(*v));
	cudaStream_t st;
	char *d;

	if (!len || n <= 0 || nf <= 0) {
		fprintf(stderr, "usage: %s SAMPLE_BYTES NSAMPLES FILE...\n", argv[0]);
		return 2;
	}
	for (int i = 0; i < nf; i++) { /* all on one mount: one session, one ring */
		struct stat sb;
		int fd = open(argv[3 + i], O_RDONLY);

		if (fd < 0 || fstat(fd, &sb) || (err = objfs_gpu_open(fd, &h[i]))) {
			fprintf(stderr, "%s: %s\n", argv[3 + i], fd < 0 ? "cannot open" :
				objfs_strerror(err));
			return 1;
		}
		size[i] = sb.st_size;
		close(fd); /* the handle does not need it */
	}
	if (cudaMalloc((void **)&d, len * (size_t)n) || cudaStreamCreate(&st))
		return 1;
	for (int i = 0; i < n; i++) {
		int f = rand() % nf;
		off_t off = size[f] > (off_t)len ? rand() % (size[f] - (off_t)len) : 0;

		v[i] = (struct objfs_gpu_iov){ h[f], d + (size_t)i * len, len, off, 0 };
	}
	err = objfs_gpu_readv_async(v, n, st);
	if (err) {
		fprintf(stderr, "objfs_gpu_readv_async: %s\n", objfs_strerror(err));
		return 1;
	}
	/* kernels enqueued on st here would see the samples */
	cudaStreamSynchronize(st);
	for (int i = 0; i < n; i++)
		if (v[i].nread < 0 && bad++ < 5)
			fprintf(stderr, "sample %d: %s\n", i, objfs_strerror((int)v[i].nread));
	printf("%d samples of %zu bytes from %d files, %d failed\n", n, len, nf, bad);
	for (int i = 0; i < nf; i++)
		objfs_gpu_close(h[i]);
	cudaFree(d);
	return bad ? 1 : 0;
}
