/*
 * gpu_fill: GPU tests of libobjfs against a real objfs mount (driven by
 * tests/gpu/side_gpu.sh). Every check compares on the GPU: a kernel
 * computes a position-weighted checksum of the device bytes, the CPU
 * computes the same over the source file, and guard bytes around the
 * destination must be untouched.
 *
 *   gpu_fill probe                     exit 77 without a usable GPU
 *   gpu_fill sizes MNTFILE SRC [MAX]   1 B .. MAX (default 1 GiB) at odd file
 *                                      offsets into odd device offsets, sync and
 *                                      async, registered and not; host async
 *   gpu_fill order MNTFILE SRC         kernel writes buf -> fill -> kernel reads,
 *                                      one stream, no host sync in between
 *   gpu_fill pool MNTFILE SRC          cudaMallocAsync pool memory
 *   gpu_fill kill MNTFILE              enqueue a long fill, print "enqueued",
 *                                      then report when the stream completes
 *   gpu_fill bench MNTFILE             read()+cudaMemcpy (pageable, pinned) and
 *                                      objfs_gpu_read, GB/s
 *   gpu_fill bench1 MODE MNTFILE       one timed pass over the whole file into
 *                                      device memory, MODE pageable (read() into
 *                                      malloc'd memory + cudaMemcpy), pinned
 *                                      (read() into cudaMallocHost memory +
 *                                      cudaMemcpy) or gpu (one objfs_gpu_read);
 *                                      prints "bench1 MODE GBPS SECONDS BYTES
 *                                      open SECONDS" (objfs_gpu_open, untimed);
 *                                      gpu runs $BENCH_SNAP_CMD (if set) with
 *                                      system() right before and after the read
 *                                      (contrib/gpu/bench_gpu.sh)
 *   gpu_fill fill DEV MNTFILE GOFILE   contrib/gpu/bench_multi.sh's client: on
 *                                      device DEV, opens MNTFILE, prints
 *                                      "ready", waits for GOFILE to exist,
 *                                      one objfs_gpu_read of the whole file
 *                                      into device memory;
 *                                      prints "fill BYTES T0 T1 RESULT"
 *                                      (CLOCK_MONOTONIC seconds)
 *   gpu_fill h2d                       the PCIe ceiling: 8 MiB cudaMemcpyAsync
 *                                      host -> device on one stream, from
 *                                      cudaMallocHost memory and from a
 *                                      cudaHostRegister'ed shared memfd mapping
 *                                      (what the ring is), GB/s
 *
 * Exit 0 when every check held, 1 otherwise, 77 without a GPU.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "objfs.h"
#include "gpu_test.cuh"

static int failures;

static void check(int ok, const char *fmt, const char *what, long long a, long long b)
{
	printf("%s: ", ok ? "ok" : "NOT OK");
	printf(fmt, what, a, b);
	printf("\n");
	fflush(stdout);
	if (!ok)
		failures++;
}

/* sum of b[i] * weight(base + i), and count of bytes != guard in the guards */
__global__ void k_sum(const unsigned char *b, size_t n, uint64_t base, unsigned long long *out)
{
	unsigned long long s = 0;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		s += (unsigned long long)b[i] * weight(base + i);
	for (int o = 16; o; o >>= 1)
		s += __shfl_down_sync(0xffffffffu, s, o);
	if ((threadIdx.x & 31) == 0)
		atomicAdd(out, s);
}

static uint64_t gpu_sum(const unsigned char *d, size_t n, uint64_t base, cudaStream_t st,
			unsigned long long *acc)
{
	unsigned long long h;

	CK(cudaMemsetAsync(acc, 0, sizeof(*acc), st));
	if (n)
		k_sum<<<1024, 256, 0, st>>>(d, n, base, acc);
	CK(cudaMemcpyAsync(&h, acc, sizeof(h), cudaMemcpyDeviceToHost, st));
	CK(cudaStreamSynchronize(st));
	return h;
}

static uint64_t gpu_count_not(const unsigned char *d, size_t n, unsigned char v,
			      unsigned long long *acc)
{
	unsigned long long h;

	CK(cudaMemset(acc, 0, sizeof(*acc)));
	if (n)
		k_count_not<<<256, 256>>>(d, n, v, acc);
	CK(cudaMemcpy(&h, acc, sizeof(h), cudaMemcpyDeviceToHost));
	return h;
}

static struct objfs_gpu *open_h(const char *path, int64_t *size)
{
	struct objfs_gpu *h;
	struct stat st;
	int fd = open(path, O_RDONLY), err;

	if (fd < 0 || fstat(fd, &st)) {
		perror(path);
		exit(2);
	}
	*size = st.st_size;
	err = objfs_gpu_open(fd, &h);
	close(fd);
	if (err) {
		fprintf(stderr, "objfs_gpu_open(%s): %s\n", path, objfs_strerror(err));
		exit(1);
	}
	return h;
}

static int do_sizes(const char *mnt, const char *src, size_t max)
{
	static const size_t sizes[] = {
		1, 2, 3, 4095, 4097, 65537, (1u << 20) + 1, (8u << 20) - 1, (8u << 20) + 1,
		(64u << 20) + 3, (256u << 20) + 5, 1u << 30,
	};
	const size_t guard = 4096;
	int64_t size;
	struct objfs_gpu *h = open_h(mnt, &size);
	int sfd = open(src, O_RDONLY);
	unsigned long long *acc;
	unsigned char *d;
	cudaStream_t st;
	char what[200];

	CK(cudaMalloc(&acc, sizeof(*acc)));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CK(cudaMalloc(&d, max + 2 * guard + 64));
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t len = sizes[i];
		int64_t off = (int64_t)(i * 7919 + 1) % 1000003; /* odd-ish offsets */
		size_t doff = guard + (i * 13 + 1) % 61;          /* odd device offsets */
		int async = i % 2, reg = i % 3 == 0;
		size_t want;
		ssize_t n = -7;
		double t0, dt;
		int err;

		if (len > max)
			continue;
		if (off + (int64_t)len > size)
			off = size - (int64_t)len - 1;
		want = len;
		CK(cudaMemset(d, 0xA5, max + 2 * guard + 64));
		if (reg && objfs_gpu_buf_register(h, d + doff, len))
			failures++;
		t0 = now();
		if (async) {
			err = objfs_gpu_read_async(h, d + doff, len, off, &n, st);
			if (!err)
				CK(cudaStreamSynchronize(st));
		} else {
			err = objfs_gpu_read(h, d + doff, len, off, &n);
		}
		dt = now() - t0;
		if (reg)
			objfs_gpu_buf_deregister(h, d + doff, len);
		snprintf(what, sizeof(what), "%s%s fill of %zu bytes at file offset %lld into device "
			 "offset %zu (%.1f ms, %.2f GB/s)", async ? "async" : "sync",
			 reg ? " registered" : "", len, (long long)off, doff, dt * 1e3,
			 len / dt / 1e9);
		check(!err && n == (ssize_t)want, "%s: count %lld, want %lld", what, n,
		      (long long)want);
		if (err || n != (ssize_t)want)
			continue;
		check(gpu_sum(d + doff, want, (uint64_t)off, st, acc) == cpu_sum(sfd, off, want, (uint64_t)off),
		      "%s: GPU checksum equals the source's%lld%lld", what, 0, 0);
		check(gpu_count_not(d, doff, 0xA5, acc) == 0 &&
		      gpu_count_not(d + doff + want, max + 2 * guard + 64 - doff - want, 0xA5, acc) == 0,
		      "%s: guard bytes untouched%lld%lld", what, 0, 0);
	}
	/* Short count at the end of the file, into device memory. */
	{
		ssize_t n = -7;
		int err = objfs_gpu_read(h, d + 1, 4096, size - 100, &n);

		check(!err && n == 100, "%s: %lld bytes, want %lld", "read across EOF", n, 100);
		check(gpu_sum(d + 1, 100, (uint64_t)size - 100, st, acc) ==
			      cpu_sum(sfd, size - 100, 100, (uint64_t)(size - 100)),
		      "%s: checksum%lld%lld", "read across EOF", 0, 0);
	}
	/* Pageable host memory, ordered on a stream (host function path). */
	{
		size_t len = (24u << 20) + 3;
		unsigned char *hb = (unsigned char *)malloc(len), *want = (unsigned char *)malloc(len);
		ssize_t n = -7;
		int err = objfs_gpu_read_async(h, hb, len, 12345, &n, st);

		if (!err)
			CK(cudaStreamSynchronize(st));
		check(!err && n == (ssize_t)len && pread(sfd, want, len, 12345) == (ssize_t)len &&
		      memcmp(hb, want, len) == 0, "%s: %lld bytes (want %lld), equal to the source",
		      "async read into pageable host memory", n, (long long)len);
		free(hb);
		free(want);
	}
	objfs_gpu_close(h);
	CK(cudaFree(d));
	return failures ? 1 : 0;
}

static int do_order(const char *mnt, const char *src)
{
	int64_t size;
	struct objfs_gpu *h = open_h(mnt, &size);
	int sfd = open(src, O_RDONLY);
	size_t len = (96u << 20) + 7;
	unsigned long long *acc, got = 0;
	unsigned char *d;
	cudaStream_t st;
	ssize_t n = -7;
	int err;

	CK(cudaMalloc(&acc, sizeof(*acc)));
	CK(cudaMalloc(&d, len));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	for (int round = 0; round < 3; round++) {
		int64_t off = 1 + round * 1000001;

		CK(cudaStreamSynchronize(st));
		/*
		 * Writer kernel: spins 200 ms, then overwrites the buffer. If the
		 * fill were not ordered after it, the fill's bytes would be
		 * overwritten (or the reader would run first): wrong checksum.
		 */
		k_late_fill<<<1024, 256, 0, st>>>(d, len, 0xEE, 200000000LL);
		err = objfs_gpu_read_async(h, d, len, off, &n, st);
		if (err) {
			check(0, "%s: %lld %lld", "enqueue", err, 0);
			break;
		}
		CK(cudaMemsetAsync(acc, 0, sizeof(*acc), st));
		k_sum<<<1024, 256, 0, st>>>(d, len, (uint64_t)off, acc);
		CK(cudaMemcpyAsync(&got, acc, sizeof(got), cudaMemcpyDeviceToHost, st));
		CK(cudaStreamSynchronize(st));
		check(n == (ssize_t)len && got == cpu_sum(sfd, off, len, (uint64_t)off),
		      "%s: writer kernel, fill, reader kernel on one stream: count %lld (want %lld), "
		      "checksum equal to the source", "stream order", n, (long long)len);
	}
	objfs_gpu_close(h);
	return failures ? 1 : 0;
}

static int do_pool(const char *mnt, const char *src)
{
	int64_t size;
	struct objfs_gpu *h = open_h(mnt, &size);
	int sfd = open(src, O_RDONLY);
	unsigned long long *acc;
	cudaStream_t st;

	CK(cudaMalloc(&acc, sizeof(*acc)));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	for (int i = 0; i < 4; i++) {
		size_t len = ((size_t)(i + 1) << 24) + 11;
		int64_t off = 3 + i * 77777;
		unsigned char *d;
		ssize_t n = -7;
		int err;

		CK(cudaMallocAsync(&d, len + 5, st));
		err = objfs_gpu_read_async(h, d + 5, len, off, &n, st);
		check(!err, "%s %lld: enqueue into cudaMallocAsync memory: %lld", "pool", i, err);
		int sum_ok = gpu_sum(d + 5, len, (uint64_t)off, st, acc) ==
			     cpu_sum(sfd, off, len, (uint64_t)off);

		check(sum_ok && n == (ssize_t)len, "%s %lld: count %lld and checksum right", "pool", i, n);
		CK(cudaFreeAsync(d, st));
	}
	CK(cudaStreamSynchronize(st));
	objfs_gpu_close(h);
	return failures ? 1 : 0;
}

static int do_kill(const char *mnt)
{
	int64_t size;
	struct objfs_gpu *h = open_h(mnt, &size);
	size_t len = size > (1 << 30) ? (1u << 30) : (size_t)size;
	volatile ssize_t n = 12345;
	unsigned char *d;
	cudaStream_t st;
	struct timespec ts;
	int done;
	int err;

	CK(cudaMalloc(&d, len));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	err = objfs_gpu_read_async(h, d, len, 0, (ssize_t *)&n, st);
	if (err) {
		printf("enqueue failed: %s\n", objfs_strerror(err));
		return 1;
	}
	printf("enqueued\n");
	fflush(stdout);
	done = stream_wait(st, 120, &ts);
	printf("stream %s nread=%zd at %.3f\n",
	       done ? "completed" : "HUNG", (ssize_t)n,
	       ts.tv_sec + ts.tv_nsec / 1e9);
	fflush(stdout);
	objfs_gpu_close(h);
	return 0;
}

static void bench_read_copy(const char *mnt, int64_t size, int pinned, unsigned char *d)
{
	size_t chunk = 64u << 20;
	unsigned char *hb;
	double t0, dt;
	int fd = open(mnt, O_RDONLY);

	if (pinned)
		CK(cudaMallocHost(&hb, chunk));
	else
		hb = (unsigned char *)malloc(chunk);
	t0 = now();
	for (int64_t off = 0; off < size;) {
		ssize_t r = pread(fd, hb, chunk, off);

		if (r <= 0)
			break;
		CK(cudaMemcpy(d + off, hb, (size_t)r, cudaMemcpyHostToDevice));
		off += r;
	}
	dt = now() - t0;
	printf("bench: read() into %s memory + cudaMemcpy: %.2f GB/s (%.2f s)\n",
	       pinned ? "pinned" : "pageable", size / dt / 1e9, dt);
	if (pinned)
		cudaFreeHost(hb);
	else
		free(hb);
	close(fd);
}

static int do_bench(const char *mnt)
{
	int64_t size;
	struct objfs_gpu *h = open_h(mnt, &size);
	unsigned char *d;

	CK(cudaMalloc(&d, (size_t)size));
	for (int i = 0; i < 3; i++) {
		ssize_t n;
		double t0 = now(), dt;
		int err = objfs_gpu_read(h, d, (size_t)size, 0, &n);

		dt = now() - t0;
		printf("bench: objfs_gpu_read of %lld bytes (%s): %s %.2f GB/s (%.2f s)\n",
		       (long long)size, i ? "daemon cache warm" : "first read, from nginx",
		       err ? objfs_strerror(err) : "ok", size / dt / 1e9, dt);
	}
	bench_read_copy(mnt, size, 0, d);
	bench_read_copy(mnt, size, 1, d);
	objfs_gpu_close(h);
	return 0;
}

/*
 * One pass for contrib/gpu/bench_gpu.sh. The read()+copy modes use 64 MiB
 * reads and synchronous copies, the plain way a program does it; the timer
 * covers open to last byte on the device (device buffer allocated before).
 */
static int do_bench1(const char *mode, const char *mnt)
{
	size_t chunk = 64u << 20;
	struct stat st;
	unsigned char *d, *hb = NULL;
	double t0, dt, topen = 0;
	int64_t size, got = 0;
	struct objfs_gpu *h = NULL;
	int fd, pinned = !strcmp(mode, "pinned"), gpu = !strcmp(mode, "gpu");
	const char *snap = getenv("BENCH_SNAP_CMD");

	if (!gpu && !pinned && strcmp(mode, "pageable")) {
		fprintf(stderr, "bench1: unknown mode %s\n", mode);
		return 2;
	}
	if (stat(mnt, &st)) {
		perror(mnt);
		return 1;
	}
	size = st.st_size;
	CK(cudaMalloc(&d, (size_t)size));
	CK(cudaMemset(d, 0, (size_t)size));
	if (pinned)
		CK(cudaMallocHost(&hb, chunk));
	else if (!gpu && !(hb = (unsigned char *)malloc(chunk)))
		return 1;
	CK(cudaDeviceSynchronize());
	t0 = now();
	fd = open(mnt, O_RDONLY);
	if (fd < 0) {
		perror(mnt);
		return 1;
	}
	if (gpu) {
		ssize_t n = 0;
		int err = objfs_gpu_open(fd, &h);

		/* Opening (ioctl, session, ring registration) is once per file: not timed. */
		topen = now() - t0;
		if (snap)
			(void)!system(snap); /* bench_gpu.sh: the daemon's CPU, before */
		t0 = now();
		if (!err)
			err = objfs_gpu_read(h, d, (size_t)size, 0, &n);
		dt = now() - t0;
		if (snap)
			(void)!system(snap); /* and after */
		if (err) {
			printf("bench1 %s failed: %s\n", mode, objfs_strerror(err));
			return 1;
		}
		got = n;
		objfs_gpu_close(h);
	} else {
		for (;;) {
			ssize_t r = read(fd, hb, chunk);

			if (r < 0) {
				perror("read");
				return 1;
			}
			if (r == 0)
				break;
			CK(cudaMemcpy(d + got, hb, (size_t)r, cudaMemcpyHostToDevice));
			got += r;
		}
	}
	if (!gpu)
		dt = now() - t0;
	close(fd);
	if (got != size) {
		printf("bench1 %s: short read, %lld of %lld bytes\n", mode, (long long)got,
		       (long long)size);
		return 1;
	}
	printf("bench1 %s %.3f %.3f %lld open %.4f\n", mode, size / dt / 1e9, dt, (long long)size,
	       topen);
	if (pinned)
		cudaFreeHost(hb);
	else
		free(hb);
	cudaFree(d);
	return 0;
}

/* Copies 4 GiB host -> device in 8 MiB pieces from @src (256 MiB, pinned), one stream. */
static double h2d_rate(const char *src, unsigned char *d, cudaStream_t st)
{
	const size_t piece = 8u << 20, span = 256u << 20, total = 4ull << 30;
	double t0;

	CK(cudaStreamSynchronize(st));
	t0 = now();
	for (size_t at = 0; at < total; at += piece)
		CK(cudaMemcpyAsync(d + at % span, src + at % span, piece, cudaMemcpyHostToDevice, st));
	CK(cudaStreamSynchronize(st));
	return (double)total / (now() - t0) / 1e9;
}

static int do_h2d(void)
{
	const size_t span = 256u << 20;
	unsigned char *d, *h;
	cudaStream_t st;
	int fd = memfd_create("h2d", MFD_CLOEXEC);
	void *m;

	if (fd < 0 || ftruncate(fd, (off_t)span))
		return 1;
	m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return 1;
	memset(m, 1, span);
	CK(cudaHostRegister(m, span, cudaHostRegisterDefault));
	CK(cudaMallocHost(&h, span));
	memset(h, 1, span);
	CK(cudaMalloc(&d, span));
	CK(cudaStreamCreate(&st));
	(void)h2d_rate((const char *)h, d, st); /* warm up */
	printf("h2d cudaMallocHost %.2f GB/s\n", h2d_rate((const char *)h, d, st));
	printf("h2d memfd-registered %.2f GB/s\n", h2d_rate((const char *)m, d, st));
	CK(cudaHostUnregister(m));
	munmap(m, span);
	close(fd);
	CK(cudaFreeHost(h));
	CK(cudaFree(d));
	return 0;
}

/* One process of the multi-process benchmark; side_client fill is its host twin. */
static int do_fill(int dev, const char *mnt, const char *go)
{
	int64_t size;
	struct objfs_gpu *h;
	unsigned char *d;
	ssize_t n = 0;
	double t0, t1;
	int err;

	CK(cudaSetDevice(dev));
	h = open_h(mnt, &size); /* the session's ring is registered on this device */
	CK(cudaMalloc(&d, (size_t)size));
	CK(cudaMemset(d, 0, (size_t)size));
	CK(cudaDeviceSynchronize());
	printf("ready\n");
	fflush(stdout);
	while (access(go, F_OK))
		usleep(200);
	t0 = now();
	err = objfs_gpu_read(h, d, (size_t)size, 0, &n);
	t1 = now();
	printf("fill %zd %.6f %.6f %s\n", n, t0, t1, err ? objfs_strerror(err) : "ok");
	objfs_gpu_close(h);
	cudaFree(d);
	return err || n != size;
}

int main(int argc, char **argv)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		printf("no usable GPU\n");
		return 77;
	}
	if (argc == 2 && !strcmp(argv[1], "probe"))
		return 0;
	if (argc >= 4 && !strcmp(argv[1], "sizes"))
		return do_sizes(argv[2], argv[3], argc > 4 ? strtoull(argv[4], NULL, 0) : 1u << 30);
	if (argc == 4 && !strcmp(argv[1], "order"))
		return do_order(argv[2], argv[3]);
	if (argc == 4 && !strcmp(argv[1], "pool"))
		return do_pool(argv[2], argv[3]);
	if (argc == 5 && !strcmp(argv[1], "fill"))
		return do_fill(atoi(argv[2]), argv[3], argv[4]);
	if (argc == 3 && !strcmp(argv[1], "kill"))
		return do_kill(argv[2]);
	if (argc == 2 && !strcmp(argv[1], "h2d"))
		return do_h2d();
	if (argc == 3 && !strcmp(argv[1], "bench"))
		return do_bench(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "bench1"))
		return do_bench1(argv[2], argv[3]);
	fprintf(stderr, "usage: see the header of tests/gpu/gpu_fill.cu\n");
	return 2;
}
