/*
 * gpu_batch: GPU tests and benchmarks of libobjfs's batches,
 * against a real objfs mount (driven by tests/gpu/side_gpu_batch.sh and
 * contrib/gpu/bench_batch.sh). Checks compare on the GPU: one kernel
 * computes every entry's position-weighted checksum (the weight of a byte
 * is a function of its file offset and file index), the CPU computes the
 * same over the source files, and the guard bytes between destinations
 * must be untouched.
 *
 *   gpu_batch probe                              exit 77 without a usable GPU
 *   gpu_batch check MNTDIR SRCDIR NFILES NENT MAXLEN SEED
 *        NENT random entries (file, odd offset, 1..MAXLEN bytes, some past
 *        the end) over files s0..s{NFILES-1}, into one device buffer at odd
 *        offsets with guards, through objfs_gpu_readv_async on a stream;
 *        a writer kernel before it and the checksum kernel after it on the
 *        same stream, no host synchronisation in between (stream order);
 *        then the same batch with objfs_gpu_readv into host memory
 *   gpu_batch kill MNTDIR NFILES NENT LEN
 *        enqueues a batch, prints "enqueued", then when the stream
 *        completes: "stream completed eio=K of N at T"
 *   gpu_batch opens MNTDIR NFILES NHANDLES
 *        NHANDLES objfs_gpu_open of the files in turn (NHANDLES/NFILES per
 *        file): the first and the rest, microseconds per open (open() of
 *        the file untimed), and the process's pinned ring count
 *   gpu_batch bench MNTDIR NFILES NSAMPLES LEN MODE SEED
 *        NSAMPLES random LEN-byte samples across NFILES files into one
 *        device buffer; MODE readv (one objfs_gpu_readv), readva (one
 *        objfs_gpu_readv_async on a stream, then its synchronize; the line
 *        adds "enqueue SECONDS", the call's own time), loop (a loop of
 *        objfs_gpu_read), pread16 (16 threads of pread into pinned memory +
 *        cudaMemcpyAsync on a stream each); prints
 *        "bench MODE SECONDS SAMPLES/S GB/S"
 *
 * Exit 0 when every check held, 1 otherwise, 77 without a GPU.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "objfs.h"
#include "gpu_test.cuh"

#define GUARD 0xa5

static int failures;

static uint64_t xs;

static uint64_t xrand(void)
{
	xs ^= xs << 13;
	xs ^= xs >> 7;
	xs ^= xs << 17;
	return xs;
}

/* An entry as the checksum kernel sees it. */
struct dent {
	uint64_t dst;    /* offset in the device buffer */
	uint64_t n;      /* bytes to sum (the expected count) */
	uint64_t base;   /* file offset + file index << 40 */
};

/* One block per entry: sum of b[i] * weight(base + i). */
__global__ void k_sums(const unsigned char *buf, const struct dent *e, unsigned long long *out)
{
	const struct dent d = e[blockIdx.x];
	unsigned long long s = 0;

	for (uint64_t i = threadIdx.x; i < d.n; i += blockDim.x)
		s += (unsigned long long)buf[d.dst + i] * weight(d.base + i);
	for (int o = 16; o; o >>= 1)
		s += __shfl_down_sync(0xffffffffu, s, o);
	if ((threadIdx.x & 31) == 0)
		atomicAdd(&out[blockIdx.x], s);
}

struct files {
	int n;
	struct objfs_gpu **h;
	int *sfd;       /* sources, or -1 */
	int64_t *size;
	double t_first, t_rest; /* objfs_gpu_open times */
};

/* Opens s0..s{n-1} of @mnt (handles) and of @src (descriptors; NULL: none). */
static void files_open(struct files *f, const char *mnt, const char *src, int n, int reps)
{
	char path[4096];

	f->n = n;
	f->h = (struct objfs_gpu **)calloc((size_t)n * reps, sizeof(*f->h));
	f->sfd = (int *)calloc(n, sizeof(int));
	f->size = (int64_t *)calloc(n, sizeof(int64_t));
	f->t_first = f->t_rest = 0;
	for (int k = 0; k < n * reps; k++) {
		int i = k % n, fd, err;
		struct stat st;
		double t0;

		snprintf(path, sizeof(path), "%s/s%d.bin", mnt, i);
		fd = open(path, O_RDONLY);
		if (fd < 0 || fstat(fd, &st)) {
			perror(path);
			exit(2);
		}
		f->size[i] = st.st_size;
		t0 = now();
		err = objfs_gpu_open(fd, &f->h[k]);
		if (k)
			f->t_rest += now() - t0;
		else
			f->t_first = now() - t0;
		close(fd);
		if (err) {
			fprintf(stderr, "objfs_gpu_open(%s) #%d: %s\n", path, k, objfs_strerror(err));
			exit(1);
		}
		if (k < n) {
			f->sfd[i] = -1;
			if (src) {
				snprintf(path, sizeof(path), "%s/s%d.bin", src, i);
				f->sfd[i] = open(path, O_RDONLY);
			}
		}
	}
}

static void files_close(struct files *f, int reps)
{
	for (int k = 0; k < f->n * reps; k++)
		objfs_gpu_close(f->h[k]);
	for (int i = 0; i < f->n; i++)
		if (f->sfd[i] >= 0)
			close(f->sfd[i]);
	free(f->h);
	free(f->sfd);
	free(f->size);
}

static int ok_line(int ok, const char *what)
{
	printf("%s: %s\n", ok ? "ok" : "NOT OK", what);
	fflush(stdout);
	if (!ok)
		failures++;
	return ok;
}

static int do_check(const char *mnt, const char *src, int nfiles, int nent, size_t maxlen,
		    uint64_t seed)
{
	struct files f;
	struct objfs_gpu_iov *v = (struct objfs_gpu_iov *)calloc(nent, sizeof(*v));
	struct dent *e = (struct dent *)calloc(nent, sizeof(*e)), *de;
	int64_t *want = (int64_t *)calloc(nent, sizeof(int64_t));
	int *fi = (int *)calloc(nent, sizeof(int));
	unsigned long long *sums, *h_sums = (unsigned long long *)calloc(nent, 8), *acc, h;
	uint64_t total = 64;
	unsigned char *d, *hb;
	cudaStream_t st;
	char msg[512];
	int err, bad = 0;

	xs = seed * 2654435761u + 1;
	files_open(&f, mnt, src, nfiles, 1);
	for (int i = 0; i < nent; i++) {
		uint64_t r = xrand();
		int k = (int)(r % (uint64_t)nfiles);
		size_t len = (size_t)((r >> 20) % maxlen) + 1;
		int64_t off = (int64_t)((xrand() >> 8) % (uint64_t)(f.size[k] + 64));

		if (i % 97 == 5)
			off = f.size[k]; /* at the end: 0 */
		fi[i] = k;
		want[i] = off >= f.size[k] ? 0 : ((int64_t)len < f.size[k] - off ? (int64_t)len
										 : f.size[k] - off);
		total += (uint64_t)(xrand() % 7) + 1; /* an odd gap: guard bytes */
		e[i] = (struct dent){ total, (uint64_t)want[i], (uint64_t)off + ((uint64_t)k << 40) };
		v[i] = (struct objfs_gpu_iov){ f.h[k], NULL, len, off, -999 };
		total += len;
	}
	total += 64;
	CK(cudaMalloc(&d, total));
	CK(cudaMalloc(&de, (size_t)nent * sizeof(*de)));
	CK(cudaMalloc(&sums, (size_t)nent * 8));
	CK(cudaMalloc(&acc, 8));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	CK(cudaMemcpy(de, e, (size_t)nent * sizeof(*de), cudaMemcpyHostToDevice));
	CK(cudaMemset(sums, 0, (size_t)nent * 8));
	for (int i = 0; i < nent; i++)
		v[i].buf = d + e[i].dst;
	/* writer (late) -> batch -> checksums, one stream, no host sync */
	k_late_fill<<<256, 256, 0, st>>>(d, total, GUARD, 20000000);
	double t0 = now();
	err = objfs_gpu_readv_async(v, nent, st);
	if (!ok_line(err == 0, "objfs_gpu_readv_async enqueued"))
		return 1;
	k_sums<<<nent, 128, 0, st>>>(d, de, sums);
	CK(cudaStreamSynchronize(st));
	double dt = now() - t0;
	CK(cudaMemcpy(h_sums, sums, (size_t)nent * 8, cudaMemcpyDeviceToHost));
	for (int i = 0; i < nent; i++) {
		uint64_t cs;

		if (v[i].nread != want[i]) {
			if (bad++ < 5)
				fprintf(stderr, "entry %d: nread %zd, want %lld\n", i, v[i].nread,
					(long long)want[i]);
			continue;
		}
		cs = cpu_sum(f.sfd[fi[i]], v[i].off, (size_t)want[i], e[i].base);
		if (cs != h_sums[i] && bad++ < 5)
			fprintf(stderr, "entry %d (%zu at %lld of s%d): checksum differs\n", i, v[i].len,
				(long long)v[i].off, fi[i]);
	}
	snprintf(msg, sizeof(msg), "%d entries over %d files (1..%zu bytes, %.1f MB): counts and "
		 "GPU checksums equal the source, after a writer kernel, before the checksum "
		 "kernel (%.3f s)", nent, nfiles, maxlen, total / 1e6, dt);
	ok_line(bad == 0, msg);
	/* Guards: the bytes between entries and past each count keep the writer's value. */
	{
		uint64_t guards = 0;

		for (int i = 0; i < nent; i++) {
			uint64_t a = e[i].dst + e[i].n, b = i + 1 < nent ? e[i + 1].dst : total;

			guards += b - a;
		}
		guards += e[0].dst;
		CK(cudaMemset(acc, 0, 8));
		k_count_not<<<256, 256>>>(d, total, GUARD, acc);
		CK(cudaMemcpy(&h, acc, 8, cudaMemcpyDeviceToHost));
		/* bytes != GUARD are data bytes: at most total - guards (data may hold 0xa5) */
		snprintf(msg, sizeof(msg), "guard bytes untouched (%llu bytes not the guard value, "
			 "at most %llu data bytes)", h, (unsigned long long)(total - guards));
		ok_line(h <= total - guards, msg);
	}
	/* The same batch into host memory, waited for. */
	hb = (unsigned char *)malloc(total);
	memset(hb, GUARD, total);
	for (int i = 0; i < nent; i++) {
		v[i].buf = hb + e[i].dst;
		v[i].nread = -999;
	}
	err = objfs_gpu_readv(v, nent);
	bad = 0;
	for (int i = 0; i < nent && !err; i++) {
		uint64_t s = 0;

		for (int64_t k = 0; k < want[i]; k++)
			s += (uint64_t)hb[e[i].dst + k] * weight(e[i].base + k);
		if ((v[i].nread != want[i] || s != h_sums[i]) && bad++ < 5)
			fprintf(stderr, "host entry %d: nread %zd want %lld\n", i, v[i].nread,
				(long long)want[i]);
	}
	snprintf(msg, sizeof(msg), "the same batch into host memory (objfs_gpu_readv): %s",
		 err ? objfs_strerror(err) : "equal");
	ok_line(!err && bad == 0, msg);
	/*
	 * Two device allocations and host memory in turn within one batch: each
	 * entry's kind and device are its own (libobjfs looks a kind up once
	 * per allocation and reuses it while entries stay inside).
	 */
	{
		unsigned char *d2, *where[3];
		unsigned long long *sums2, *h_sums2 = (unsigned long long *)calloc(nent, 8);

		CK(cudaMalloc(&d2, total));
		CK(cudaMalloc(&sums2, (size_t)nent * 8));
		CK(cudaMemset(d, GUARD, total));
		CK(cudaMemset(d2, GUARD, total));
		memset(hb, GUARD, total);
		where[0] = d;
		where[1] = d2;
		where[2] = hb;
		for (int i = 0; i < nent; i++) {
			v[i].buf = where[(i / 3) % 3] + e[i].dst; /* runs of three alike */
			v[i].nread = -999;
		}
		err = objfs_gpu_readv(v, nent);
		CK(cudaMemset(sums, 0, (size_t)nent * 8));
		CK(cudaMemset(sums2, 0, (size_t)nent * 8));
		k_sums<<<nent, 128>>>(d, de, sums);
		k_sums<<<nent, 128>>>(d2, de, sums2);
		CK(cudaDeviceSynchronize());
		CK(cudaMemcpy(h_sums, sums, (size_t)nent * 8, cudaMemcpyDeviceToHost));
		CK(cudaMemcpy(h_sums2, sums2, (size_t)nent * 8, cudaMemcpyDeviceToHost));
		bad = 0;
		for (int i = 0; i < nent && !err; i++) {
			int w = (i / 3) % 3;
			uint64_t cs = cpu_sum(f.sfd[fi[i]], v[i].off, (size_t)want[i], e[i].base), got = 0;

			if (w == 2)
				for (int64_t k = 0; k < want[i]; k++)
					got += (uint64_t)hb[e[i].dst + k] * weight(e[i].base + k);
			else
				got = w ? h_sums2[i] : h_sums[i];
			if ((v[i].nread != want[i] || got != cs) && bad++ < 5)
				fprintf(stderr, "mixed entry %d (%s): nread %zd want %lld\n", i,
					w == 2 ? "host" : "device", v[i].nread, (long long)want[i]);
		}
		snprintf(msg, sizeof(msg), "two device buffers and host memory in turn, one batch: %s",
			 err ? objfs_strerror(err) : "equal");
		ok_line(!err && bad == 0, msg);
		cudaFree(d2);
		cudaFree(sums2);
		free(h_sums2);
	}
	/*
	 * A registration keeps its bounds even when an entry before it, outside
	 * it in the same allocation, made the library learn the allocation:
	 * the second entry runs 100 bytes past the registered half.
	 */
	if (total >= 8192 && f.size[0] >= 4096) {
		size_t half = (size_t)total / 2;
		struct objfs_gpu_iov r[2] = {
			{ f.h[0], d + half + 1024, 4096 < total - half - 1024 ? 4096 : total - half - 1024, 0, -999 },
			{ f.h[0], d + half - 100, 200, 0, -999 },
		};

		err = objfs_gpu_buf_register(f.h[0], d, half);
		if (!err)
			err = objfs_gpu_readv(r, 2);
		snprintf(msg, sizeof(msg), "past a registered buffer after an entry outside it in the "
			 "same allocation: nread %zd, %zd (want %zu, -EFAULT)", r[0].nread, r[1].nread,
			 r[0].len);
		ok_line(!err && r[0].nread == (ssize_t)r[0].len && r[1].nread == -EFAULT, msg);
		if (objfs_gpu_buf_deregister(f.h[0], d, half))
			ok_line(0, "deregister");
	}
	free(hb);
	files_close(&f, 1);
	cudaFree(d);
	cudaFree(de);
	cudaFree(sums);
	cudaFree(acc);
	return failures ? 1 : 0;
}

static int do_kill(const char *mnt, int nfiles, int nent, size_t len)
{
	struct files f;
	struct objfs_gpu_iov *v = (struct objfs_gpu_iov *)calloc(nent, sizeof(*v));
	unsigned char *d;
	cudaStream_t st;
	struct timespec ts;
	int done;
	int eio = 0, other = 0;

	files_open(&f, mnt, NULL, nfiles, 1);
	CK(cudaMalloc(&d, (size_t)nent * len));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	xs = 12345;
	for (int i = 0; i < nent; i++) {
		int k = (int)(xrand() % (uint64_t)nfiles);
		int64_t off = f.size[k] > (int64_t)len ? (int64_t)(xrand() % (uint64_t)(f.size[k] - len)) : 0;

		v[i] = (struct objfs_gpu_iov){ f.h[k], d + (size_t)i * len, len, off, -999 };
	}
	if (objfs_gpu_readv_async(v, nent, st)) {
		printf("enqueue failed\n");
		return 1;
	}
	printf("enqueued\n");
	fflush(stdout);
	done = stream_wait(st, 120, &ts);
	for (int i = 0; i < nent; i++) {
		eio += v[i].nread == -EIO;
		other += v[i].nread != -EIO && v[i].nread != (ssize_t)len;
	}
	printf("stream %s eio=%d ok=%d other=%d of %d at %.3f\n",
	       done ? "completed" : "HUNG", eio, nent - eio - other,
	       other, nent, ts.tv_sec + ts.tv_nsec / 1e9);
	fflush(stdout);
	files_close(&f, 1);
	return 0;
}

static int rings(void)
{
	FILE *fp = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	while (fp && fgets(line, sizeof(line), fp))
		n += strstr(line, "memfd:objfs-ring") != NULL;
	if (fp)
		fclose(fp);
	return n;
}

static int do_opens(const char *mnt, int nfiles, int nhandles)
{
	struct files f;
	int reps = (nhandles + nfiles - 1) / nfiles;

	files_open(&f, mnt, NULL, nfiles, reps);
	printf("opens %d handles of %d files: first %.0f us, the others %.1f us each "
	       "(objfs_gpu_open: ioctl + ATTACH), rings mapped %d\n",
	       nfiles * reps, nfiles, f.t_first * 1e6, f.t_rest * 1e6 / (nfiles * reps - 1), rings());
	ok_line(rings() == 1, "one ring for every handle");
	ok_line(f.t_rest * 1e6 / (nfiles * reps - 1) <= 50, "<= 50 us per open after the first");
	files_close(&f, reps);
	return failures ? 1 : 0;
}

/* ---------------------------------------------------------- benchmark */

struct sample {
	int file;
	int64_t off;
};

struct pr_arg {
	const struct sample *s;
	int from, to;
	size_t len;
	int *fds;
	unsigned char *d;
};

static void *pread_thread(void *a)
{
	struct pr_arg *p = (struct pr_arg *)a;
	unsigned char *hb;
	cudaStream_t st;

	CK(cudaMallocHost(&hb, p->len * 8));
	CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
	for (int i = p->from; i < p->to; i++) {
		unsigned char *b = hb + (size_t)(i % 8) * p->len;

		if (i - p->from >= 8 && (i % 8) == 0)
			CK(cudaStreamSynchronize(st)); /* the 8 staging buffers are free again */
		if (pread(p->fds[p->s[i].file], b, p->len, p->s[i].off) != (ssize_t)p->len) {
			perror("pread");
			exit(1);
		}
		CK(cudaMemcpyAsync(p->d + (size_t)i * p->len, b, p->len, cudaMemcpyHostToDevice, st));
	}
	CK(cudaStreamSynchronize(st));
	cudaFreeHost(hb);
	cudaStreamDestroy(st);
	return NULL;
}

static int do_bench(const char *mnt, int nfiles, int nsamples, size_t len, const char *mode,
		    uint64_t seed)
{
	struct files f;
	struct sample *s = (struct sample *)calloc(nsamples, sizeof(*s));
	unsigned char *d;
	double t0, dt, enq = -1;
	int bad = 0;

	xs = seed * 2654435761u + 7;
	files_open(&f, mnt, NULL, nfiles, 1);
	for (int i = 0; i < nsamples; i++) {
		int k = (int)(xrand() % (uint64_t)nfiles);

		s[i].file = k;
		s[i].off = (int64_t)(xrand() % (uint64_t)(f.size[k] - (int64_t)len + 1));
	}
	CK(cudaMalloc(&d, (size_t)nsamples * len));
	CK(cudaDeviceSynchronize());
	if (!strcmp(mode, "readv") || !strcmp(mode, "readva")) {
		struct objfs_gpu_iov *v = (struct objfs_gpu_iov *)calloc(nsamples, sizeof(*v));
		cudaStream_t st;

		CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
		for (int i = 0; i < nsamples; i++)
			v[i] = (struct objfs_gpu_iov){ f.h[s[i].file], d + (size_t)i * len, len,
						       s[i].off, 0 };
		t0 = now();
		if (!strcmp(mode, "readv")) {
			if (objfs_gpu_readv(v, nsamples))
				bad++;
		} else {
			if (objfs_gpu_readv_async(v, nsamples, st))
				bad++;
			enq = now() - t0;
			CK(cudaStreamSynchronize(st));
		}
		dt = now() - t0;
		CK(cudaStreamDestroy(st));
		for (int i = 0; i < nsamples; i++)
			bad += v[i].nread != (ssize_t)len;
		free(v);
	} else if (!strcmp(mode, "loop")) {
		t0 = now();
		for (int i = 0; i < nsamples; i++) {
			ssize_t n;

			if (objfs_gpu_read(f.h[s[i].file], d + (size_t)i * len, len, s[i].off, &n) ||
			    n != (ssize_t)len)
				bad++;
		}
		dt = now() - t0;
	} else {
		enum { T = 16 };
		pthread_t th[T];
		struct pr_arg a[T];
		int *fds = (int *)calloc(nfiles, sizeof(int));
		char path[4096];

		for (int i = 0; i < nfiles; i++) { /* opened untimed, as the handles are */
			snprintf(path, sizeof(path), "%s/s%d.bin", mnt, i);
			fds[i] = open(path, O_RDONLY);
		}
		t0 = now();
		for (int t = 0; t < T; t++) {
			a[t] = (struct pr_arg){ s, nsamples * t / T, nsamples * (t + 1) / T, len, fds, d };
			pthread_create(&th[t], NULL, pread_thread, &a[t]);
		}
		for (int t = 0; t < T; t++)
			pthread_join(th[t], NULL);
		dt = now() - t0;
		for (int i = 0; i < nfiles; i++)
			close(fds[i]);
		free(fds);
	}
	printf("bench %s %.4f s %.0f samples/s %.2f GB/s%s", mode, dt, nsamples / dt,
	       nsamples * (double)len / dt / 1e9, bad ? " ERRORS" : "");
	if (enq >= 0)
		printf(" enqueue %.4f s", enq);
	printf("\n");
	files_close(&f, 1);
	cudaFree(d);
	free(s);
	return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0)
		return 77;
	if (argc == 2 && !strcmp(argv[1], "probe"))
		return 0;
	if (argc == 8 && !strcmp(argv[1], "check"))
		return do_check(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]),
				(size_t)atoll(argv[6]), (uint64_t)atoll(argv[7]));
	if (argc == 6 && !strcmp(argv[1], "kill"))
		return do_kill(argv[2], atoi(argv[3]), atoi(argv[4]), (size_t)atoll(argv[5]));
	if (argc == 5 && !strcmp(argv[1], "opens"))
		return do_opens(argv[2], atoi(argv[3]), atoi(argv[4]));
	if (argc == 8 && !strcmp(argv[1], "bench"))
		return do_bench(argv[2], atoi(argv[3]), atoi(argv[4]), (size_t)atoll(argv[5]),
				argv[6], (uint64_t)atoll(argv[7]));
	fprintf(stderr, "usage: see the header of tests/gpu/gpu_batch.cu\n");
	return 2;
}
