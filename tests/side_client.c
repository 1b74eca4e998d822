/*
 * side_client: the libobjfs client used by tests/integration/side_host.sh
 * against a real mount. Host memory only (runs without a GPU).
 *
 *   side_client reads MNTFILE SRCFILE   odd offsets and sizes, compared with
 *                                       the source file; short count at EOF
 *   side_client hang MNTFILE            a whole-file read into host memory:
 *                                       prints "reading", then "read ended:
 *                                       RESULT" (the script may kill it)
 *   side_client wrongino MNT_A MNT_B    a token of B is refused for A
 *   side_client ringfd MNTFILE PATH     HELLO carrying a descriptor of PATH:
 *                                       refused (EPROTO), never opened
 *   side_client open MNTFILE            prints objfs_gpu_open's result
 *   side_client cap MNTFILE OUT         writes the file's capability to OUT
 *   side_client batch MNTDIR SRCDIR     every file of MNTDIR opened (one
 *                                       session, one ring in this process),
 *                                       random batches over all of them at
 *                                       odd offsets and sizes, compared with
 *                                       the same files in SRCDIR
 *   side_client fill MNTFILE GOFILE     contrib/gpu/bench_multi.sh's client
 *                                       without a GPU: opens MNTFILE, prints
 *                                       "ready", waits for GOFILE to exist,
 *                                       reads the whole
 *                                       file into host memory in one
 *                                       objfs_gpu_read and prints "fill
 *                                       BYTES T0 T1 RESULT" (CLOCK_MONOTONIC
 *                                       seconds, comparable across processes)
 *   side_client samples MNTDIR N P [SRCDIR]
 *                                       N random 64 KiB samples over the
 *                                       files of MNTDIR, P passes of one
 *                                       readv each, samples/s per pass (for
 *                                       profiling the fill path); with
 *                                       SRCDIR every sample of every pass
 *                                       is compared with the source file
 *   side_client hello CAPFILE           HELLO with the capability in CAPFILE
 *                                       (run as another user: perms.sh);
 *                                       prints "accepted" or "refused ERRNO"
 *
 * Hostile clients (tests/integration/side_hostile.sh runs them as another
 * user, the local attacks of docs/reliability.md); each prints
 * one line of what it got and exits 0 unless it could not even try:
 *   side_client nodone CAPFILE SECS     FILLs for SECS s, DONEs never read
 *   side_client pending CAPFILE N SECS  N connections that never say HELLO
 *   side_client sessions CAPFILE N SECS N sessions held for SECS s
 *   side_client caps MNTFILE N          N capability ioctls
 *   side_client norelease CAPFILE SECS  a full ring never released
 *
 * Exit status 0 when every check held; messages say what was expected.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "objfs.h"
#include "objfs/side_proto.h"

static int failures;

static void check(int ok, const char *what)
{
	printf("%s: %s\n", ok ? "ok" : "NOT OK", what);
	if (!ok)
		failures++;
}

static int open_handle(const char *path, struct objfs_gpu **h)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), err;

	if (fd < 0) {
		fprintf(stderr, "open %s: %s\n", path, strerror(errno));
		exit(2);
	}
	err = objfs_gpu_open(fd, h);
	close(fd); /* the handle does not need the descriptor */
	return err;
}

static int do_reads(const char *mnt, const char *src)
{
	struct objfs_gpu *h;
	struct stat st;
	int sfd = open(src, O_RDONLY), err;
	char *got, *want, msg[256];
	int64_t size;

	if (sfd < 0 || fstat(sfd, &st))
		return 2;
	size = st.st_size;
	err = open_handle(mnt, &h);
	if (err) {
		fprintf(stderr, "objfs_gpu_open(%s): %s\n", mnt, objfs_strerror(err));
		return 1;
	}
	got = malloc((size_t)size + 65536);
	want = malloc((size_t)size + 65536);
	struct { int64_t off; int64_t len; } v[] = {
		{ 0, 1 }, { 1, 1 }, { 7, 4093 }, { 4095, 65537 }, { 1 << 20, 3 },
		{ 12345, (8 << 20) + 1 }, { 999999, (17 << 20) + 333 }, { size - 1, 1 },
		{ size - 77, 4096 }, { size, 10 }, { size + 5, 10 }, { 0, size },
		{ 3, size + 100 },
	};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		int64_t expect = v[i].off >= size ? 0 :
				 (v[i].len < size - v[i].off ? v[i].len : size - v[i].off);
		ssize_t n = -1;

		if (v[i].off < 0 || v[i].len <= 0)
			continue;
		memset(got, 0x5a, (size_t)(v[i].len < size ? v[i].len : size) + 1);
		err = objfs_gpu_read(h, got, (size_t)v[i].len, v[i].off, &n);
		snprintf(msg, sizeof(msg), "read of %lld bytes at %lld: expected %lld bytes, got "
			 "%zd (%s)", (long long)v[i].len, (long long)v[i].off, (long long)expect, n,
			 objfs_strerror(err));
		check(!err && n == expect, msg);
		if (err || n != expect)
			continue;
		if (pread(sfd, want, (size_t)n, v[i].off) != n)
			return 2;
		snprintf(msg, sizeof(msg), "read of %lld bytes at %lld: bytes equal the source and "
			 "nothing written past them", (long long)v[i].len, (long long)v[i].off);
		check(memcmp(got, want, (size_t)n) == 0 && (unsigned char)got[n] == 0x5a, msg);
	}
	if (size >= 8192) {
		ssize_t n;

		check(objfs_gpu_read(h, got, 1, -1, &n) == -EINVAL, "negative offset: -EINVAL");
		check(objfs_gpu_buf_register(h, got, 4096) == 0, "register a host buffer");
		check(objfs_gpu_buf_register(h, got + 100, 10) == -EEXIST, "overlap: -EEXIST");
		check(objfs_gpu_read(h, got + 4000, 200, 0, &n) == -EFAULT,
		      "a read running past a registered buffer: -EFAULT");
		check(objfs_gpu_read(h, got, 4096, 5, &n) == 0 && n == 4096 &&
		      pread(sfd, want, 4096, 5) == 4096 && memcmp(got, want, 4096) == 0,
		      "a read into the registered buffer");
		check(objfs_gpu_buf_deregister(h, got, 4096) == 0, "deregister");
		check(objfs_gpu_buf_deregister(h, got, 4096) == -ENOENT, "deregister twice: -ENOENT");
	}
	objfs_gpu_close(h);
	free(got);
	free(want);
	close(sfd);
	return failures ? 1 : 0;
}

/* Rings of libobjfs mapped in this process (one per session). */
static int my_rings(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, "memfd:objfs-ring") != NULL;
	if (f)
		fclose(f);
	return n;
}

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t xs = 0x9e3779b97f4a7c15ull;

static uint64_t xrand(void)
{
	xs ^= xs << 13;
	xs ^= xs >> 7;
	xs ^= xs << 17;
	return xs;
}

static int do_batch(const char *mntdir, const char *srcdir)
{
	enum { MAXF = 4096, MAXN = 3000 };
	static struct objfs_gpu *h[MAXF];
	static int sfd[MAXF];
	static int64_t size[MAXF];
	static struct objfs_gpu_iov v[MAXN];
	static int64_t want[MAXN];
	static int fidx[MAXN];
	DIR *d = opendir(mntdir);
	struct dirent *de;
	int nf = 0, bad = 0, bad_before;
	double t0, t_first = 0, t_rest = 0;
	char path[4096], msg[256];
	char *buf, *ref;

	if (!d)
		return 2;
	while ((de = readdir(d)) && nf < MAXF) {
		struct stat st;
		int err, fd;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", srcdir, de->d_name);
		sfd[nf] = open(path, O_RDONLY);
		if (sfd[nf] < 0 || fstat(sfd[nf], &st))
			return 2;
		size[nf] = st.st_size;
		snprintf(path, sizeof(path), "%s/%s", mntdir, de->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return 2;
		t0 = mono_s(); /* objfs_gpu_open alone: the ioctl and HELLO or ATTACH */
		err = objfs_gpu_open(fd, &h[nf]);
		close(fd);
		if (nf)
			t_rest += mono_s() - t0;
		else
			t_first = mono_s() - t0;
		if (err) {
			fprintf(stderr, "objfs_gpu_open(%s): %s\n", path, objfs_strerror(err));
			return 1;
		}
		nf++;
	}
	closedir(d);
	printf("opened %d handles: first %.0f us, the others %.1f us each (ioctl through FUSE "
	       "included, open() not)\n", nf, t_first * 1e6, nf > 1 ? t_rest * 1e6 / (nf - 1) : 0.0);
	snprintf(msg, sizeof(msg), "%d handles share one session: one ring mapped (%d)", nf,
		 my_rings());
	check(my_rings() == 1, msg);
	buf = malloc((size_t)MAXN * 70000);
	ref = malloc(70000);
	for (int round = 0; round < 20; round++) {
		int n = round == 0 ? 1 : (int)(xrand() % MAXN) + 1;
		int async = round % 3 == 2, err;

		for (int i = 0; i < n; i++) {
			uint64_t r = xrand();
			int f = (int)(r % (uint64_t)nf);
			size_t len = (size_t)((r >> 16) % 70000);
			int64_t off = size[f] ? (int64_t)((r >> 32) % (uint64_t)(size[f] + 100)) : 0;

			fidx[i] = f;
			v[i] = (struct objfs_gpu_iov){ h[f], buf + (size_t)i * 70000, len, off, -999 };
			want[i] = off >= size[f] ? 0 : ((int64_t)len < size[f] - off ? (int64_t)len
										   : size[f] - off);
		}
		err = async ? objfs_gpu_readv_async(v, n, NULL) : objfs_gpu_readv(v, n);
		if (err) {
			snprintf(msg, sizeof(msg), "batch %d of %d entries: %s", round, n,
				 objfs_strerror(err));
			check(0, msg);
			continue;
		}
		/*
		 * readv_async with no stream is synchronous without a GPU, but where
		 * CUDA works it runs on the legacy default stream: each nread is
		 * written when the stream gets there (this program links no CUDA to
		 * synchronize with), so wait for every sentinel to go, 30 s at most.
		 */
		for (double since = mono_s(); async && mono_s() - since < 30;) {
			int left = 0;

			for (int i = 0; i < n; i++)
				left += __atomic_load_n(&v[i].nread, __ATOMIC_ACQUIRE) == -999;
			if (!left)
				break;
			usleep(1000);
		}
		bad_before = bad;
		for (int i = 0; i < n; i++) {
			if (v[i].nread != want[i] ||
			    pread(sfd[fidx[i]], ref, (size_t)want[i], v[i].off) != want[i] ||
			    memcmp(ref, v[i].buf, (size_t)want[i])) {
				if (bad++ < 5)
					fprintf(stderr, "entry %d of batch %d: %zu at %lld of file %d: "
						"nread %zd, want %lld\n", i, round, v[i].len,
						(long long)v[i].off, fidx[i], v[i].nread,
						(long long)want[i]);
			}
		}
		snprintf(msg, sizeof(msg), "batch %d: %d entries over %d files%s equal the source",
			 round, n, nf, async ? " (readv_async, no stream)" : "");
		check(bad == bad_before, msg);
	}
	for (int i = 0; i < nf; i++) {
		objfs_gpu_close(h[i]);
		close(sfd[i]);
	}
	check(my_rings() == 0, "the last close unmapped the ring");
	free(buf);
	free(ref);
	return failures ? 1 : 0;
}

/*
 * The issue-17 benchmark's shape in host memory, for profiling the daemon's
 * fill path where there is no GPU: every file of MNTDIR opened, @n samples
 * of 64 KiB (whole, inside each file) at random offsets over them, the same
 * set each pass, @passes readv calls of all @n; prints samples per second
 * of each pass (the first cold, the others warm). With @srcdir each
 * sample is compared with the same bytes of the file of that name there:
 * 1 when one differs.
 */
static int do_samples(const char *mntdir, int n, int passes, const char *srcdir)
{
	enum { MAXF = 4096, LEN = 65536 };
	static struct objfs_gpu *h[MAXF];
	static int64_t size[MAXF];
	static char name[MAXF][256];
	int *fidx, bad = 0;
	struct objfs_gpu_iov *v;
	DIR *d = opendir(mntdir);
	struct dirent *de;
	int nf = 0;
	char path[4096], *buf;

	if (!d || n <= 0 || passes <= 0)
		return 2;
	while ((de = readdir(d)) && nf < MAXF) {
		struct stat st;
		int fd, err;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", mntdir, de->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || fstat(fd, &st))
			return 2;
		if (st.st_size < LEN) {
			close(fd);
			continue;
		}
		err = objfs_gpu_open(fd, &h[nf]);
		close(fd);
		if (err) {
			fprintf(stderr, "objfs_gpu_open(%s): %s\n", path, objfs_strerror(err));
			return 1;
		}
		snprintf(name[nf], sizeof(name[nf]), "%s", de->d_name);
		size[nf++] = st.st_size;
	}
	closedir(d);
	if (!nf)
		return 2;
	v = calloc((size_t)n, sizeof(*v));
	fidx = calloc((size_t)n, sizeof(*fidx));
	buf = malloc((size_t)n * LEN);
	if (!v || !fidx || !buf)
		return 2;
	for (int i = 0; i < n; i++) {
		uint64_t r = xrand();
		int f = (int)(r % (uint64_t)nf);

		fidx[i] = f;
		v[i] = (struct objfs_gpu_iov){ h[f], buf + (size_t)i * LEN, LEN,
					       (off_t)((r >> 20) % (uint64_t)(size[f] - LEN + 1)), 0 };
	}
	for (int p = 0; p < passes; p++) {
		double t0;
		int err, short_ = 0;

		memset(buf, 0, (size_t)n * LEN);
		t0 = mono_s();
		err = objfs_gpu_readv(v, n);
		for (int i = 0; i < n; i++)
			short_ += v[i].nread != LEN;
		printf("pass %d: %d samples over %d files in %.4f s: %.0f samples/s%s%s\n", p, n, nf,
		       mono_s() - t0, n / (mono_s() - t0), err ? ", readv failed: " : "",
		       err ? objfs_strerror(err) : short_ ? ", some short" : "");
		for (int i = 0; srcdir && i < n; i++) {
			char want[LEN];
			int fd;

			snprintf(path, sizeof(path), "%s/%s", srcdir, name[fidx[i]]);
			fd = open(path, O_RDONLY | O_CLOEXEC);
			if (fd < 0 || pread(fd, want, LEN, v[i].off) != LEN ||
			    memcmp(want, v[i].buf, LEN) != 0) {
				printf("pass %d: sample %d (%s at %lld) differs\n", p, i,
				       name[fidx[i]], (long long)v[i].off);
				bad = 1;
			}
			if (fd >= 0)
				close(fd);
		}
		bad |= err != 0 || short_ != 0;
	}
	for (int i = 0; i < nf; i++)
		objfs_gpu_close(h[i]);
	free(v);
	free(fidx);
	free(buf);
	return bad;
}

static int do_hang(const char *mnt)
{
	struct objfs_gpu *h;
	struct stat st;
	ssize_t n;
	char *buf;
	int err;

	if (stat(mnt, &st))
		return 2;
	err = open_handle(mnt, &h);
	if (err) {
		fprintf(stderr, "objfs_gpu_open(%s): %s\n", mnt, objfs_strerror(err));
		return 1;
	}
	buf = malloc((size_t)st.st_size ? (size_t)st.st_size : 1);
	if (!buf) {
		objfs_gpu_close(h);
		return 1;
	}
	printf("reading\n");
	fflush(stdout);
	err = objfs_gpu_read(h, buf, (size_t)st.st_size, 0, &n);
	printf("read ended: %s\n", objfs_strerror(err));
	objfs_gpu_close(h);
	free(buf);
	return 0;
}

static int cap_of(const char *path, struct objfs_side_cap *cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc;

	if (fd < 0)
		return -errno;
	rc = ioctl(fd, OBJFS_IOC_GPU_CAP, cap) ? -errno : 0;
	close(fd);
	return rc;
}

/* A raw session: its socket and ring (the client's side of it). */
struct raw {
	int sock;
	struct objfs_ring_hdr *ring;
	uint64_t bytes;
};

/*
 * Sends HELLO for @ino with @token (and descriptor @pass, unless -1: the
 * daemon must refuse that), reads the answer into @buf (OBJFS_MSG_MAX
 * bytes) and the ring HELLO_OK carries into *@ringfd (-1 none). Returns the
 * connected socket, or -1 when the client could not even ask (errno set).
 */
static int hello_send(const struct objfs_side_cap *cap, const uint8_t *token, uint64_t ino,
		      int pass, char *buf, int *ringfd)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t n = strlen(cap->sock);
	struct objfs_msg_hello m = { 0 };
	union objfs_fd_cmsg cb;
	struct iovec iov = { &m, sizeof(m) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *cm;
	int sock;

	*ringfd = -1;
	memcpy(sa.sun_path, cap->sock, n);
	sa.sun_path[0] = '\0';
	sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return -1;
	if (connect(sock, (struct sockaddr *)&sa,
		    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n))) {
		close(sock);
		return -1;
	}
	objfs_msg_init(&m.h, OBJFS_MSG_HELLO, sizeof(m));
	memcpy(m.token, token, OBJFS_TOKEN_LEN);
	m.ino = ino;
	m.slots = cap->ring_slots;
	m.slot_size = cap->ring_slot_size;
	m.ring_bytes = objfs_ring_bytes(cap->ring_slots, cap->ring_slot_size);
	if (pass >= 0)
		objfs_msg_attach_fd(&mh, &cb, pass);
	if (sendmsg(sock, &mh, 0) != (ssize_t)sizeof(m)) {
		close(sock);
		return -1;
	}
	iov = (struct iovec){ buf, OBJFS_MSG_MAX };
	mh = (struct msghdr){ .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb.b,
			      .msg_controllen = sizeof(cb.b) };
	if (recvmsg(sock, &mh, MSG_CMSG_CLOEXEC) < 16) {
		close(sock);
		return -1;
	}
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
			memcpy(ringfd, CMSG_DATA(cm), sizeof(int));
	return sock;
}

/*
 * HELLO for @ino with @token; returns 0 or the errno the daemon answered,
 * -1 when the client could not even ask (errno set). @r (may be NULL)
 * keeps the socket and the ring the daemon gave, mapped.
 */
static int raw_session(const struct objfs_side_cap *cap, const uint8_t *token, uint64_t ino,
		       struct raw *r_out)
{
	char buf[OBJFS_MSG_MAX] __attribute__((aligned(8)));
	uint64_t bytes = objfs_ring_bytes(cap->ring_slots, cap->ring_slot_size);
	struct objfs_ring_hdr *r = NULL;
	int sock, ringfd;

	sock = hello_send(cap, token, ino, -1, buf, &ringfd);
	if (sock < 0)
		return -1;
	if (ringfd >= 0) {
		r = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, ringfd, 0);
		close(ringfd);
		if (r == MAP_FAILED) {
			close(sock);
			return -1;
		}
	}
	if (r_out) {
		r_out->sock = sock;
		r_out->ring = r;
		r_out->bytes = bytes;
	} else {
		close(sock);
		if (r)
			munmap(r, bytes);
	}
	if (((struct objfs_msg_hdr *)buf)->type == OBJFS_MSG_HELLO_OK)
		return 0;
	return ((struct objfs_msg_err *)buf)->err;
}

/* HELLO for @ino with @token; returns 0 or the errno the daemon answered. */
static int raw_hello(const struct objfs_side_cap *cap, const uint8_t *token, uint64_t ino,
		     int *sock_out)
{
	struct raw r = { -1, NULL, 0 };
	int rc = raw_session(cap, token, ino, &r);

	*sock_out = r.sock;
	if (r.ring)
		munmap(r.ring, r.bytes);
	return rc;
}

/*
 * HELLO for @mnt's file carrying a descriptor of @path (a file of a FUSE
 * mount whose FLUSH is never answered: tests/hang_fuse.c). The daemon must
 * refuse it at once (EPROTO) without ever opening it, so that nothing of
 * it waits on that mount. Prints the answer. The descriptor stays open
 * here: this process's exit then waits for hang_fuse.
 */
static int do_ringfd(const char *mnt, const char *path)
{
	char buf[OBJFS_MSG_MAX] __attribute__((aligned(8)));
	struct objfs_side_cap cap;
	int fd, sock, rc, ringfd;

	if (cap_of(mnt, &cap)) {
		fprintf(stderr, "ioctl failed: %s\n", strerror(errno));
		return 2;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return 2;
	}
	sock = hello_send(&cap, cap.token, cap.ino, fd, buf, &ringfd);
	if (sock < 0 && errno == EPERM) { /* Linux >= 6.16: SO_PASSRIGHTS */
		printf("HELLO carrying a descriptor: refused by the daemon's socket\n");
		return 0;
	}
	if (sock < 0) {
		printf("no answer: %s\n", strerror(errno));
		return 1;
	}
	rc = ((struct objfs_msg_hdr *)buf)->type == OBJFS_MSG_HELLO_OK
		     ? 0 : ((struct objfs_msg_err *)buf)->err;
	printf("HELLO carrying a descriptor: %s\n", rc ? strerror(rc) : "accepted");
	fflush(stdout);
	close(sock);
	return rc == EPROTO && ringfd < 0 ? 0 : 1;
}

static int do_wrongino(const char *a, const char *b)
{
	struct objfs_side_cap ca, cb;
	struct objfs_msg_attach at = { 0 };
	char fb[OBJFS_MSG_MAX] __attribute__((aligned(8))) = { 0 };
	struct objfs_msg_fill *f = (struct objfs_msg_fill *)fb;
	char buf[OBJFS_MSG_MAX] __attribute__((aligned(8)));
	int sock, rc;

	if (cap_of(a, &ca) || cap_of(b, &cb)) {
		fprintf(stderr, "ioctl failed: %s\n", strerror(errno));
		return 2;
	}
	check(ca.ino != cb.ino, "the two files have different inodes");
	rc = raw_hello(&ca, cb.token, ca.ino, &sock);
	check(rc == EACCES, "HELLO for A with B's token: refused with EACCES");
	close(sock);
	rc = raw_hello(&ca, ca.token, ca.ino, &sock);
	check(rc == 0, "HELLO for A with A's token: accepted");
	/* B's token named as inode A: refused, the session goes on. */
	objfs_msg_init(&at.h, OBJFS_MSG_ATTACH, sizeof(at));
	memcpy(at.token, cb.token, OBJFS_TOKEN_LEN);
	at.ino = ca.ino;
	at.cookie = 9;
	rc = (int)send(sock, &at, sizeof(at), 0);
	rc = (int)recv(sock, buf, sizeof(buf), 0);
	check(rc == sizeof(struct objfs_msg_attach_ok) &&
	      ((struct objfs_msg_hdr *)buf)->type == OBJFS_MSG_ATTACH_OK &&
	      ((struct objfs_msg_attach_ok *)buf)->err == EACCES,
	      "ATTACH of B's token as inode A: ATTACH_OK with EACCES");
	/* A FILL naming a handle the session does not have ends it. */
	objfs_msg_init(&f->h, OBJFS_MSG_FILL, (uint32_t)objfs_msg_size(OBJFS_MSG_FILL, 1));
	f->req_id = 1;
	f->nent = 1;
	f->count = 1;
	f->ent[0] = (struct objfs_fill_ent){ 7, 0, 0, 10 };
	rc = (int)send(sock, f, f->h.len, 0);
	rc = (int)recv(sock, buf, sizeof(buf), 0);
	check(rc == sizeof(struct objfs_msg_err) &&
	      ((struct objfs_msg_hdr *)buf)->type == OBJFS_MSG_ERR &&
	      ((struct objfs_msg_err *)buf)->err == EBADF,
	      "FILL naming an unknown handle: ERR EBADF");
	close(sock);
	return failures ? 1 : 0;
}

/* A capability saved by "cap", presented by whoever runs "hello". */
static int do_cap(const char *mnt, const char *out)
{
	struct objfs_side_cap cap;
	FILE *f;
	int rc = cap_of(mnt, &cap);

	if (rc) {
		printf("ioctl failed: %s\n", strerror(-rc));
		return 1;
	}
	f = fopen(out, "wb");
	if (!f || fwrite(&cap, sizeof(cap), 1, f) != 1 || fclose(f))
		return 2;
	return 0;
}

static int read_cap(const char *capfile, struct objfs_side_cap *cap)
{
	FILE *f = fopen(capfile, "rb");
	int ok = f && fread(cap, sizeof(*cap), 1, f) == 1;

	if (f)
		fclose(f);
	if (!ok)
		fprintf(stderr, "cannot read a capability from %s\n", capfile);
	return ok ? 0 : -1;
}

static int do_hello(const char *capfile)
{
	struct objfs_side_cap cap;
	int sock = -1, rc;

	if (read_cap(capfile, &cap))
		return 2;
	rc = raw_hello(&cap, cap.token, cap.ino, &sock);
	if (rc < 0) {
		printf("connection failed: %s\n", strerror(errno));
		return 2;
	}
	if (rc == 0)
		printf("accepted\n");
	else
		printf("refused %s\n", strerror(rc));
	close(sock);
	return 0;
}

/*
 * One process of the multi-process benchmark: the handle is opened (session
 * and ring made) before the start signal, so the timed part is the fill.
 */
static int do_fill(const char *mnt, const char *go)
{
	struct objfs_gpu *h;
	struct stat st;
	ssize_t n = 0;
	double t0, t1;
	char *buf;
	int err;

	if (stat(mnt, &st) || !(buf = malloc((size_t)st.st_size ? (size_t)st.st_size : 1))) {
		fprintf(stderr, "fill %s: %s\n", mnt, strerror(errno));
		return 2;
	}
	err = open_handle(mnt, &h);
	if (err) {
		fprintf(stderr, "objfs_gpu_open %s: %s\n", mnt, objfs_strerror(err));
		return 2;
	}
	memset(buf, 0, (size_t)st.st_size); /* faulted in before the clock starts */
	printf("ready\n");
	fflush(stdout);
	while (access(go, F_OK))
		usleep(200);
	t0 = mono_s();
	err = objfs_gpu_read(h, buf, (size_t)st.st_size, 0, &n);
	t1 = mono_s();
	printf("fill %zd %.6f %.6f %s\n", n, t0, t1, err ? objfs_strerror(err) : "ok");
	objfs_gpu_close(h);
	free(buf);
	return err || n != st.st_size;
}

/* ---------------------------------------------------------- hostile */

static void release_all(const struct raw *r, uint32_t slots)
{
	for (uint32_t i = 0; i < slots; i++)
		__atomic_store_n(&r->ring->ctl[i].rel, OBJFS_RING_GEN_MAX - 1, __ATOMIC_RELEASE);
}

static void fill(int sock, const struct objfs_side_cap *cap, uint64_t first, int64_t off,
		 uint64_t len, int flags, ssize_t *sent)
{
	char b[OBJFS_MSG_MAX] __attribute__((aligned(8))) = { 0 };
	struct objfs_msg_fill *f = (struct objfs_msg_fill *)b;

	(void)cap; /* handle 0: the HELLO's capability */
	objfs_msg_init(&f->h, OBJFS_MSG_FILL, (uint32_t)objfs_msg_size(OBJFS_MSG_FILL, 1));
	f->req_id = first + 1;
	f->first_piece = first;
	f->nent = 1;
	f->count = 1;
	f->ent[0] = (struct objfs_fill_ent){ 0, 0, off, len };
	*sent = send(sock, f, f->h.len, MSG_NOSIGNAL | flags);
}

/*
 * A session on the capability in @capfile: 1 when it is up (*@cap, *@r),
 * else what the mode exits with: 0 after printing the refusal, 2 when the
 * capability cannot be read.
 */
static int hostile_session(const char *capfile, struct objfs_side_cap *cap, struct raw *r)
{
	int rc;

	if (read_cap(capfile, cap))
		return 2;
	rc = raw_session(cap, cap->token, cap->ino, r);
	if (rc) {
		printf("refused %s\n", rc < 0 ? strerror(errno) : strerror(rc));
		return 0;
	}
	return 1;
}

/* One-piece FILLs as fast as the daemon takes them; DONEs never read. */
static int do_nodone(const char *capfile, double secs)
{
	struct objfs_side_cap cap;
	struct raw r;
	uint64_t n = 0;
	double t0 = mono_s();
	int rc = hostile_session(capfile, &cap, &r);

	if (rc != 1)
		return rc;
	release_all(&r, cap.ring_slots);
	while (mono_s() - t0 < secs) {
		struct pollfd p = { r.sock, POLLOUT, 0 };
		uint64_t len = cap.size < 4096 ? (uint64_t)cap.size : 4096;
		ssize_t k;

		if (poll(&p, 1, 200) != 1)
			continue; /* the daemon does not read: keep trying until SECS */
		if (p.revents & (POLLHUP | POLLERR))
			break;
		fill(r.sock, &cap, n, (int64_t)((n * 4096) % (uint64_t)(cap.size - (int64_t)len + 1)),
		     len, MSG_DONTWAIT, &k);
		if (k < 0 && errno == EAGAIN)
			continue;
		if (k < 0)
			break;
		n++;
	}
	printf("sent %llu fills in %.1f s without reading a reply\n", (unsigned long long)n,
	       mono_s() - t0);
	return 0;
}


/* N connections that never say HELLO, held SECS s: how many were refused. */
static int do_pending(const char *capfile, int n, double secs)
{
	struct objfs_side_cap cap;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int refused = 0, *socks = calloc((size_t)n, sizeof(int));
	size_t len;

	if (read_cap(capfile, &cap) || !socks)
		return 2;
	len = strlen(cap.sock);
	memcpy(sa.sun_path, cap.sock, len);
	sa.sun_path[0] = '\0';
	for (int i = 0; i < n; i++) {
		struct pollfd p;

		socks[i] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (connect(socks[i], (struct sockaddr *)&sa,
			    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len))) {
			refused++;
			continue;
		}
		p = (struct pollfd){ socks[i], POLLIN, 0 };
		if (poll(&p, 1, 50) == 1) /* an ERR or EOF at once: refused */
			refused++;
	}
	printf("%d of %d connections refused at once\n", refused, n);
	fflush(stdout);
	usleep((useconds_t)(secs * 1e6));
	return 0;
}

/* N sessions held SECS s: how many were accepted, and the first refusal. */
static int do_sessions(const char *capfile, int n, double secs)
{
	struct objfs_side_cap cap;
	int ok = 0, first_err = 0;

	if (read_cap(capfile, &cap))
		return 2;
	for (int i = 0; i < n; i++) {
		struct raw r;
		int rc = raw_session(&cap, cap.token, cap.ino, &r);

		if (rc == 0)
			ok++;
		else if (!first_err)
			first_err = rc < 0 ? errno : rc;
	}
	printf("%d of %d sessions accepted%s%s\n", ok, n, first_err ? ", then refused " : "",
	       first_err ? strerror(first_err) : "");
	fflush(stdout);
	usleep((useconds_t)(secs * 1e6));
	return 0;
}

/* N capability ioctls on one open file. */
static int do_caps(const char *mnt, int n)
{
	struct objfs_side_cap cap;
	int fd = open(mnt, O_RDONLY | O_CLOEXEC), ok = 0, err = 0;

	if (fd < 0)
		return 2;
	for (int i = 0; i < n && !err; i++) {
		if (ioctl(fd, OBJFS_IOC_GPU_CAP, &cap))
			err = errno;
		else
			ok++;
	}
	printf("%d capabilities granted%s%s\n", ok, err ? ", then " : "", err ? strerror(err) : "");
	close(fd);
	return 0;
}

/* A FILL longer than the ring, whose slots are never released. */
static int do_norelease(const char *capfile, double secs)
{
	struct objfs_side_cap cap;
	struct raw r;
	uint64_t len;
	ssize_t k;
	int rc = hostile_session(capfile, &cap, &r);

	if (rc != 1)
		return rc;
	len = (uint64_t)cap.ring_slots * cap.ring_slot_size + cap.ring_slot_size;
	if (len > (uint64_t)cap.size)
		len = (uint64_t)cap.size;
	fill(r.sock, &cap, 0, 0, len, 0, &k);
	printf("holding a full ring for %.0f s\n", secs);
	fflush(stdout);
	usleep((useconds_t)(secs * 1e6));
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "reads") == 0)
		return do_reads(argv[2], argv[3]);
	if ((argc == 5 || argc == 6) && strcmp(argv[1], "samples") == 0)
		return do_samples(argv[2], atoi(argv[3]), atoi(argv[4]), argc == 6 ? argv[5] : NULL);
	if (argc == 4 && strcmp(argv[1], "batch") == 0)
		return do_batch(argv[2], argv[3]);
	if (argc == 3 && strcmp(argv[1], "hang") == 0)
		return do_hang(argv[2]);
	if (argc == 4 && strcmp(argv[1], "wrongino") == 0)
		return do_wrongino(argv[2], argv[3]);
	if (argc == 4 && strcmp(argv[1], "ringfd") == 0)
		return do_ringfd(argv[2], argv[3]);
	if (argc == 4 && strcmp(argv[1], "cap") == 0)
		return do_cap(argv[2], argv[3]);
	if (argc == 4 && strcmp(argv[1], "fill") == 0)
		return do_fill(argv[2], argv[3]);
	if (argc == 3 && strcmp(argv[1], "hello") == 0)
		return do_hello(argv[2]);
	if (argc == 4 && strcmp(argv[1], "nodone") == 0)
		return do_nodone(argv[2], atof(argv[3]));
	if (argc == 5 && strcmp(argv[1], "pending") == 0)
		return do_pending(argv[2], atoi(argv[3]), atof(argv[4]));
	if (argc == 5 && strcmp(argv[1], "sessions") == 0)
		return do_sessions(argv[2], atoi(argv[3]), atof(argv[4]));
	if (argc == 4 && strcmp(argv[1], "caps") == 0)
		return do_caps(argv[2], atoi(argv[3]));
	if (argc == 4 && strcmp(argv[1], "norelease") == 0)
		return do_norelease(argv[2], atof(argv[3]));
	if (argc == 3 && strcmp(argv[1], "open") == 0) {
		struct objfs_gpu *h;
		int err = open_handle(argv[2], &h);

		printf("%d %s\n", err, objfs_strerror(err));
		objfs_gpu_close(h);
		return 0;
	}
	fprintf(stderr, "usage: see the header of tests/side_client.c\n");
	return 2;
}
