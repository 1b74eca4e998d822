/*
 * Unit tests of the GPU side API's ring and session protocol (src/side/,
 * include/objfs/side_proto.h and its inline ring operations, and
 * libobjfs's lib/client.c with lib/client_cuda.c), CPU only.
 *
 * A real side server runs on a real block cache whose fetcher is fake
 * (bytes are a function of the offset; fetches can be made to fail or to
 * stall). Two kinds of client: libobjfs itself (objfs_gpu_open_cap, host
 * buffers) and a raw client that speaks the wire protocol by hand, so the
 * tests can watch sequence words, hold slots, and send malformed or hostile
 * messages. After every hostile case the server must still serve a normal
 * session.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "objfs.h"
#include "side.h"
#include "side_i.h"

#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif
#include "objfs/side_proto.h"

int objfs_gpu_open_cap(const struct objfs_side_cap *cap, struct objfs_gpu **h);

#define SLOTS     4
#define SLOT_SIZE (64u << 10)
#define FILE_SIZE ((int64_t)(3u << 20) + 12345)

static atomic_llong fail_from = -1; /* fetches reaching this offset fail */
static atomic_int fetch_delay_ms;
static atomic_int fetches;          /* fake_fetch calls */
static atomic_llong fetched;        /* bytes they asked for */
static atomic_int jobs_live;        /* fake_fetch threads not yet returned */
static atomic_int hold;             /* fetches wait in held[] until released */
static atomic_int gate;             /* fetches block their caller while it is set */
static atomic_int record;           /* fetches are listed in seen[] while it is set */

static unsigned char byte_at(int64_t off)
{
	return (unsigned char)((off * 131 + (off >> 9) + 7) & 0xff);
}

struct job {
	int64_t off;
	size_t len;
	char *dst;
	objfs_fetch_done_fn done;
	void *arg;
};

static void *job_run(void *a)
{
	struct job *j = a;
	long long ff = atomic_load(&fail_from);
	int err = 0;

	if (atomic_load(&fetch_delay_ms))
		usleep((useconds_t)atomic_load(&fetch_delay_ms) * 1000);
	if (ff >= 0 && j->off + (int64_t)j->len > ff)
		err = -EIO;
	else
		for (size_t i = 0; i < j->len; i++)
			j->dst[i] = (char)byte_at(j->off + (int64_t)i);
	j->done(j->arg, err);
	free(j);
	atomic_fetch_sub(&jobs_live, 1);
	return NULL;
}

#define HELD_MAX 8192
static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static struct job *held[HELD_MAX];
static int nheld;

static int held_count(void)
{
	int n;

	pthread_mutex_lock(&held_lock);
	n = nheld;
	pthread_mutex_unlock(&held_lock);
	return n;
}

/* Completes every held fetch, on this thread; returns how many. */
static int held_release(void)
{
	struct job *j[HELD_MAX];
	int n;

	pthread_mutex_lock(&held_lock);
	n = nheld;
	memcpy(j, held, (size_t)n * sizeof(*j));
	nheld = 0;
	pthread_mutex_unlock(&held_lock);
	for (int i = 0; i < n; i++)
		job_run(j[i]);
	return n;
}

/* Fetches in the order they were asked for (record), and the gate. */
#define SEEN_MAX 256
static struct { const void *ctx; int64_t off; } seen[SEEN_MAX];
static int nseen, gated; /* held_lock: entries of seen[], callers at the gate */
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;

static int gated_count(void)
{
	int n;

	pthread_mutex_lock(&held_lock);
	n = gated;
	pthread_mutex_unlock(&held_lock);
	return n;
}

static void gate_open(void)
{
	pthread_mutex_lock(&held_lock);
	atomic_store(&gate, 0);
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&held_lock);
}

static void fake_fetch(void *ctx, int64_t off, size_t len, char *dst, objfs_fetch_done_fn done,
		       void *arg)
{
	struct job *j = malloc(sizeof(*j));
	pthread_t t;

	pthread_mutex_lock(&held_lock);
	if (atomic_load(&record) && nseen < SEEN_MAX) {
		seen[nseen].ctx = ctx;
		seen[nseen++].off = off;
	}
	gated++;
	while (atomic_load(&gate))
		pthread_cond_wait(&gate_cond, &held_lock);
	gated--;
	pthread_mutex_unlock(&held_lock);
	atomic_fetch_add(&fetches, 1);
	atomic_fetch_add(&fetched, (long long)len);
	*j = (struct job){ off, len, dst, done, arg };
	atomic_fetch_add(&jobs_live, 1);
	if (atomic_load(&hold)) {
		pthread_mutex_lock(&held_lock);
		if (nheld < HELD_MAX) {
			held[nheld++] = j;
			j = NULL;
		}
		pthread_mutex_unlock(&held_lock);
		if (!j)
			return;
	}
	if (pthread_create(&t, NULL, job_run, j)) {
		atomic_fetch_sub(&jobs_live, 1);
		free(j);
		done(arg, -EAGAIN);
		return;
	}
	pthread_detach(t);
}

static struct objfs_cache *cache;
static struct objfs_side *side;
static struct objfs_side_cap cap;

static struct objfs_side *server_cfg(const struct objfs_side_cfg *cfg)
{
	struct objfs_side *s;

	ck_assert_int_eq(objfs_side_new(cfg, cache, &s), 0);
	return s;
}

/* A server whose one uid may take every session and capability. */
static struct objfs_side *server_new(unsigned max_sessions, unsigned max_caps)
{
	struct objfs_side_cfg cfg = {
		.ring_slots = SLOTS, .ring_slot_size = SLOT_SIZE, .max_sessions = max_sessions,
		.uid_sessions = max_sessions, .max_caps = max_caps, .uid_caps = max_caps,
		.cap_ttl = 60, .only_uid = -1,
	};

	return server_cfg(&cfg);
}

/* A capability of @uid for @ino (42: dir/file, else dir/other), whose
 * object's fetches get @ctx. */
static int grant_ctx(struct objfs_side *s, uid_t uid, uint64_t ino, void *ctx,
		     struct objfs_side_cap *c)
{
	struct objfs_side_obj o = { .ino = ino, .generation = 1 };
	int err = objfs_object_new(NULL, ino == 42 ? "dir/file" : "dir/other", "\"e1\"", -1,
				   FILE_SIZE, fake_fetch, ctx, &o.obj);

	if (err)
		return err;
	err = objfs_side_grant(s, uid, &o, c);
	objfs_object_put(o.obj); /* the capability keeps its own */
	return err;
}

static int grant(struct objfs_side *s, uid_t uid, uint64_t ino, struct objfs_side_cap *c)
{
	return grant_ctx(s, uid, ino, NULL, c);
}

static void setup(void)
{
	atomic_store(&fail_from, -1);
	atomic_store(&fetch_delay_ms, 0);
	atomic_store(&record, 0);
	nseen = 0;
	ck_assert_int_eq(objfs_cache_new(16u << 20, SLOT_SIZE, &cache), 0);
	side = server_new(8, 64);
	ck_assert_int_eq(grant(side, getuid(), 42, &cap), 0);
}

static void teardown(void)
{
	objfs_side_free(side);
	objfs_cache_free(cache);
	side = NULL;
	cache = NULL;
}

static void check_bytes(const char *buf, int64_t off, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)buf[i] != byte_at(off + (int64_t)i))
			ck_abort_msg("byte %zu of the read at %lld is wrong", i, (long long)off);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void wait_sessions(uint64_t open, double secs)
{
	struct objfs_side_stats st;
	double t0 = now();

	do {
		objfs_side_get_stats(side, &st);
		if (st.sessions_open == open)
			return;
		usleep(10000);
	} while (now() - t0 < secs);
	ck_abort_msg("expected %llu open sessions, have %llu", (unsigned long long)open,
		     (unsigned long long)st.sessions_open);
}

static struct objfs_side_stats stats(void)
{
	struct objfs_side_stats st;

	objfs_side_get_stats(side, &st);
	return st;
}

/* ------------------------------------------------------------ raw client */

struct raw {
	int sock;
	struct objfs_ring_hdr *ring; /* the daemon's, once HELLO_OK gave it */
	int memfd;                   /* the ring's memfd, kept; -1 */
	size_t bytes;
	char *data;
	uint32_t slots, slot_size;
};

static int raw_connect(const char *name)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t n = strlen(name);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	memcpy(sa.sun_path, name, n);
	sa.sun_path[0] = '\0';
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa,
				 (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)), 0);
	return fd;
}

/* A connection that will ask for a ring of @slots x @slot_size. */
static void raw_ring(struct raw *r, uint32_t slots, uint32_t slot_size)
{
	memset(r, 0, sizeof(*r));
	r->memfd = -1;
	r->slots = slots;
	r->slot_size = slot_size;
	r->bytes = objfs_ring_bytes(slots, slot_size);
	r->sock = raw_connect(cap.sock);
}

static void raw_free(struct raw *r)
{
	if (r->sock >= 0)
		close(r->sock);
	if (r->memfd >= 0)
		close(r->memfd);
	if (r->ring)
		munmap(r->ring, r->bytes);
}

/* Sends @m with descriptor @fd (none when -1). 0 or -errno. */
static int raw_send_fd(int sock, const void *m, size_t len, int fd)
{
	union objfs_fd_cmsg cbuf;
	struct iovec iov = { (void *)m, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (fd >= 0)
		objfs_msg_attach_fd(&mh, &cbuf, fd);
	n = sendmsg(sock, &mh, MSG_NOSIGNAL);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EIO;
}

static void raw_send(int sock, const void *m, size_t len, int fd)
{
	ck_assert_int_eq(raw_send_fd(sock, m, len, fd), 0);
}

/*
 * Next message: its type (the body in @out), 0 on EOF, -ETIMEDOUT. An ERR
 * message returns OBJFS_MSG_ERR with its errno in *err.
 */
static int raw_recv(int sock, void *out, size_t cap_len, int timeout_ms, int *err)
{
	char buf[OBJFS_MSG_MAX] __attribute__((aligned(8)));
	struct pollfd p = { sock, POLLIN, 0 };
	const struct objfs_msg_hdr *h = (const void *)buf;
	ssize_t n;

	if (poll(&p, 1, timeout_ms) <= 0)
		return -ETIMEDOUT;
	n = recv(sock, buf, sizeof(buf), 0);
	if (n <= 0)
		return 0;
	ck_assert_uint_ge((size_t)n, sizeof(*h));
	ck_assert_uint_eq(h->magic, OBJFS_SIDE_MAGIC);
	ck_assert_uint_eq(h->len, (size_t)n);
	if (h->type == OBJFS_MSG_ERR && err)
		*err = ((const struct objfs_msg_err *)buf)->err;
	if (out)
		memcpy(out, buf, (size_t)n < cap_len ? (size_t)n : cap_len);
	return h->type;
}

static void hello_msg(struct objfs_msg_hello *m, const struct raw *r, const uint8_t *token,
		      uint64_t ino)
{
	memset(m, 0, sizeof(*m));
	objfs_msg_init(&m->h, OBJFS_MSG_HELLO, sizeof(*m));
	memcpy(m->token, token, OBJFS_TOKEN_LEN);
	m->ino = ino;
	m->slots = r->slots;
	m->slot_size = r->slot_size;
	m->ring_bytes = objfs_ring_bytes(r->slots, r->slot_size);
}

/*
 * HELLO; returns 0 when accepted (the ring HELLO_OK carried is then mapped
 * at r->ring and kept open as r->memfd: a sealed memfd of the ring's size,
 * its header written), else the errno the daemon answered.
 */
static int raw_hello(struct raw *r, const uint8_t *token, uint64_t ino)
{
	char buf[OBJFS_MSG_MAX] __attribute__((aligned(8)));
	union objfs_fd_cmsg cbuf;
	struct iovec iov = { buf, sizeof(buf) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = cbuf.b, .msg_controllen = sizeof(cbuf.b) };
	const struct objfs_msg_hdr *h = (const void *)buf;
	struct pollfd p = { r->sock, POLLIN, 0 };
	struct objfs_msg_hello m;
	struct cmsghdr *cm;
	struct stat st;
	int fd = -1, seals;
	ssize_t n;

	hello_msg(&m, r, token, ino);
	raw_send(r->sock, &m, sizeof(m), -1);
	ck_assert_int_eq(poll(&p, 1, 5000), 1);
	n = recvmsg(r->sock, &mh, MSG_CMSG_CLOEXEC);
	ck_assert_int_ge(n, (ssize_t)sizeof(*h));
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
			memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	if (h->type == OBJFS_MSG_ERR) {
		ck_assert_int_lt(fd, 0);
		return ((const struct objfs_msg_err *)buf)->err;
	}
	ck_assert_int_eq(h->type, OBJFS_MSG_HELLO_OK);
	ck_assert_int_ge(fd, 0);
	seals = fcntl(fd, F_GET_SEALS);
	ck_assert_int_eq(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
			 F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_uint_eq((uint64_t)st.st_size, r->bytes);
	r->ring = mmap(NULL, r->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert(r->ring != MAP_FAILED);
	r->memfd = fd;
	ck_assert_uint_eq(r->ring->magic, OBJFS_SIDE_MAGIC);
	ck_assert_uint_eq(r->ring->slots, r->slots);
	ck_assert_uint_eq(r->ring->slot_size, r->slot_size);
	ck_assert_uint_eq(r->ring->err_piece, UINT64_MAX);
	r->data = (char *)r->ring + objfs_ring_hdr_size(r->slots);
	return 0;
}

/* A FILL of one entry, laid out as struct objfs_msg_fill with ent[1]. */
struct fill1 {
	struct objfs_msg_hdr h;
	uint64_t req_id, first_piece;
	uint32_t nent, first, count, pad;
	struct objfs_fill_ent e;
};
_Static_assert(sizeof(struct fill1) == sizeof(struct objfs_msg_fill) +
	       sizeof(struct objfs_fill_ent), "fill1 layout");

static void fill_msg(struct fill1 *m, uint32_t handle, uint64_t first, int64_t off, uint64_t len)
{
	memset(m, 0, sizeof(*m));
	objfs_msg_init(&m->h, OBJFS_MSG_FILL, sizeof(*m));
	m->req_id = first + 1;
	m->first_piece = first;
	m->nent = 1;
	m->count = 1;
	m->e = (struct objfs_fill_ent){ handle, 0, off, len };
}

/* ATTACH of @token as @ino; returns ATTACH_OK's errno, *handle its handle. */
static int raw_attach(struct raw *r, const uint8_t *token, uint64_t ino, uint32_t *handle)
{
	struct objfs_msg_attach m = { 0 };
	struct objfs_msg_attach_ok ok = { 0 };

	objfs_msg_init(&m.h, OBJFS_MSG_ATTACH, sizeof(m));
	memcpy(m.token, token, OBJFS_TOKEN_LEN);
	m.ino = ino;
	m.cookie = 77;
	raw_send(r->sock, &m, sizeof(m), -1);
	ck_assert_int_eq(raw_recv(r->sock, &ok, sizeof(ok), 5000, NULL), OBJFS_MSG_ATTACH_OK);
	ck_assert_uint_eq(ok.cookie, 77);
	if (handle)
		*handle = ok.handle;
	return ok.err;
}

static uint32_t seq_of(struct raw *r, uint32_t s)
{
	return __atomic_load_n(&r->ring->ctl[s].seq, __ATOMIC_ACQUIRE);
}

/* Waits (bounded) until slot @s's seq reaches @g; returns the value seen. */
static uint32_t wait_seq(struct raw *r, uint32_t s, uint32_t g)
{
	double t0 = now();
	uint32_t v;

	while ((v = seq_of(r, s)) < g && now() - t0 < 5)
		usleep(200);
	return v;
}

/* A normal session still works: the server survived what came before. */
static void assert_healthy(void)
{
	struct objfs_gpu *h;
	char buf[1000];
	ssize_t n = 0;

	ck_assert_int_eq(objfs_gpu_open_cap(&cap, &h), 0);
	ck_assert_int_eq(objfs_gpu_read(h, buf, sizeof(buf), 777777, &n), 0);
	ck_assert_int_eq(n, (ssize_t)sizeof(buf));
	check_bytes(buf, 777777, sizeof(buf));
	objfs_gpu_close(h);
}

/* ------------------------------------------------------------ tests */

START_TEST(test_cap_fields)
{
	struct objfs_side_cap c2;

	ck_assert_uint_eq(cap.magic, OBJFS_SIDE_MAGIC);
	ck_assert_uint_eq(cap.struct_size, sizeof(cap));
	ck_assert_uint_eq(cap.ino, 42);
	ck_assert_int_eq(cap.size, FILE_SIZE);
	ck_assert_uint_eq(cap.ring_slots, SLOTS);
	ck_assert_uint_eq(cap.ring_slot_size, SLOT_SIZE);
	ck_assert_str_eq(cap.etag, "\"e1\"");
	ck_assert(cap.sock[0] == '@' && strlen(cap.sock) > 10);
	/* Tokens are random: two grants of the same file differ. */
	ck_assert_int_eq(grant(side, getuid(), 42, &c2), 0);
	ck_assert(memcmp(cap.token, c2.token, OBJFS_TOKEN_LEN) != 0);
}
END_TEST

/* libobjfs into host memory: odd offsets and sizes, many wrap-arounds. */
START_TEST(test_client_reads)
{
	static const struct { int64_t off; size_t len; ssize_t want; } v[] = {
		{ 0, 1, 1 }, { 1, 3, 3 }, { 65535, 2, 2 }, { 12345, 65536, 65536 },
		{ 99, (5u << 20) / 4 + 17, (5u << 20) / 4 + 17 }, { 3, 3u << 20, 3u << 20 },
		{ FILE_SIZE - 5, 100, 5 }, { FILE_SIZE, 10, 0 }, { FILE_SIZE + 99, 10, 0 },
		{ 0, (size_t)FILE_SIZE + 4096, FILE_SIZE },
	};
	struct objfs_gpu *h;
	char *buf = malloc((size_t)FILE_SIZE + 8192);

	ck_assert_int_eq(objfs_gpu_open_cap(&cap, &h), 0);
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		ssize_t n = -1;

		memset(buf, 0, (size_t)FILE_SIZE + 8192);
		ck_assert_int_eq(objfs_gpu_read(h, buf, v[i].len, v[i].off, &n), 0);
		ck_assert_msg(n == v[i].want, "read %zu at %lld gave %zd, want %zd", v[i].len,
			      (long long)v[i].off, n, v[i].want);
		check_bytes(buf, v[i].off, (size_t)n);
		ck_assert_int_eq(buf[n], 0); /* nothing written past the count */
	}
	/* The async call without a GPU completes at once for host memory. */
	{
		ssize_t n = -1;

		ck_assert_int_eq(objfs_gpu_read_async(h, buf, 5000, 4242, &n, NULL), 0);
		ck_assert_int_eq(n, 5000);
		check_bytes(buf, 4242, 5000);
	}
	ck_assert_int_eq(objfs_gpu_read(h, buf, 10, -1, &(ssize_t){ 0 }), -EINVAL);
	objfs_gpu_close(h);
	free(buf);
}
END_TEST

/* Two threads reading through one handle: pieces interleave in the ring. */
struct thr { struct objfs_gpu *h; int64_t off; int ok; };

static void *reader(void *a)
{
	struct thr *t = a;
	char *buf = malloc(300000);

	t->ok = 1;
	for (int i = 0; i < 20; i++) {
		ssize_t n = 0;
		int64_t off = t->off + i * 7919;

		if (objfs_gpu_read(t->h, buf, 300000, off, &n) || n != 300000) {
			t->ok = 0;
			break;
		}
		for (size_t k = 0; k < 300000; k++)
			if ((unsigned char)buf[k] != byte_at(off + (int64_t)k))
				t->ok = 0;
	}
	free(buf);
	return NULL;
}

START_TEST(test_client_threads)
{
	struct objfs_gpu *h;
	struct thr t[3];
	pthread_t th[3];

	ck_assert_int_eq(objfs_gpu_open_cap(&cap, &h), 0);
	for (int i = 0; i < 3; i++) {
		t[i] = (struct thr){ h, 1000 + i * 500000, 0 };
		pthread_create(&th[i], NULL, reader, &t[i]);
	}
	for (int i = 0; i < 3; i++) {
		pthread_join(th[i], NULL);
		ck_assert_msg(t[i].ok, "reader %d saw wrong bytes or an error", i);
	}
	objfs_gpu_close(h);
}
END_TEST

/* Sequence numbers and wrap-around, watched word by word. */
START_TEST(test_ring_sequence)
{
	struct raw r;
	struct fill1 f;
	struct objfs_msg_done d;
	const uint32_t npieces = 10;
	int err = 0;

	raw_ring(&r, SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&r, cap.token, 42), 0);
	fill_msg(&f, 0, 0, 5, (uint64_t)SLOT_SIZE * (npieces - 1) + 10);
	raw_send(r.sock, &f, sizeof(f), -1);
	/* The first k pieces are published as use 1 of each slot... */
	for (uint32_t s = 0; s < SLOTS; s++)
		ck_assert_uint_eq(wait_seq(&r, s, 1), 1);
	/* ...and piece k waits for slot 0's release: nothing is overwritten. */
	usleep(100000);
	ck_assert_uint_eq(seq_of(&r, 0), 1);
	check_bytes(r.data, 5, SLOT_SIZE);
	for (uint32_t p = 0; p < npieces; p++) {
		uint32_t s = p % SLOTS, g = p / SLOTS + 1;
		size_t want = p == npieces - 1 ? 10 : SLOT_SIZE;

		ck_assert_uint_eq(wait_seq(&r, s, g), g);
		ck_assert_uint_eq(r.ring->ctl[s].len, want);
		check_bytes(r.data + (size_t)s * SLOT_SIZE, 5 + (int64_t)p * SLOT_SIZE, want);
		__atomic_store_n(&r.ring->ctl[s].rel, g, __ATOMIC_RELEASE);
	}
	ck_assert_int_eq(raw_recv(r.sock, &d, sizeof(d), 5000, &err), OBJFS_MSG_DONE);
	ck_assert_uint_eq(d.req_id, 1);
	ck_assert_int_eq(d.err, 0);
	ck_assert_uint_eq(d.bytes, f.e.len);
	/* The next request continues the numbering: piece 10 is slot 2, use 3. */
	fill_msg(&f, 0, npieces, 0, 100);
	raw_send(r.sock, &f, sizeof(f), -1);
	ck_assert_uint_eq(wait_seq(&r, 2, 3), 3);
	check_bytes(r.data + 2 * SLOT_SIZE, 0, 100);
	ck_assert_uint_eq(r.ring->err_piece, UINT64_MAX);
	raw_free(&r);
	wait_sessions(0, 5);
}
END_TEST

/*
 * A failed fetch fails its entry only (version 2): every piece is still
 * published, the DONE lists the entry, the ring is not poisoned and the
 * session goes on.
 */
START_TEST(test_fill_error)
{
	struct raw r;
	struct fill1 f;
	char db[OBJFS_MSG_MAX] __attribute__((aligned(8)));
	struct objfs_msg_done *d = (struct objfs_msg_done *)db;
	struct objfs_gpu *h;
	char buf[4096];
	ssize_t n;
	int err = 0;

	atomic_store(&fail_from, 2 * SLOT_SIZE + 1);
	raw_ring(&r, SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&r, cap.token, 42), 0);
	fill_msg(&f, 0, 0, 0, 3 * SLOT_SIZE);
	raw_send(r.sock, &f, sizeof(f), -1);
	for (uint32_t s = 0; s < 3; s++)
		ck_assert_uint_eq(wait_seq(&r, s, 1), 1);
	ck_assert_int_eq(raw_recv(r.sock, d, sizeof(db), 5000, &err), OBJFS_MSG_DONE);
	ck_assert_int_eq(d->err, 0);
	ck_assert_uint_eq(d->count, 1);
	ck_assert_uint_eq(d->more, 0);
	ck_assert_uint_eq(d->fail[0].idx, 0);
	ck_assert_int_eq(d->fail[0].err, EIO);
	ck_assert_uint_eq(d->bytes, 0);
	ck_assert_uint_eq(r.ring->err_piece, UINT64_MAX);
	check_bytes(r.data, 0, SLOT_SIZE);
	/* The session goes on. */
	for (uint32_t s = 0; s < 3; s++)
		__atomic_store_n(&r.ring->ctl[s].rel, 1, __ATOMIC_RELEASE);
	fill_msg(&f, 0, 3, 100, 100);
	raw_send(r.sock, &f, sizeof(f), -1);
	ck_assert_int_eq(raw_recv(r.sock, d, sizeof(db), 5000, &err), OBJFS_MSG_DONE);
	ck_assert_uint_eq(d->count, 0);
	ck_assert_uint_eq(d->bytes, 100);
	check_bytes(r.data + 3 * SLOT_SIZE, 100, 100);
	raw_free(&r);

	/* Through libobjfs: -EIO for that read, the next one works. */
	ck_assert_int_eq(objfs_gpu_open_cap(&cap, &h), 0);
	ck_assert_int_eq(objfs_gpu_read(h, buf, sizeof(buf), 3 * SLOT_SIZE, &n), -EIO);
	ck_assert_int_eq(objfs_gpu_read(h, buf, sizeof(buf), 0, &n), 0);
	ck_assert_int_eq(n, sizeof(buf));
	check_bytes(buf, 0, sizeof(buf));
	atomic_store(&fail_from, -1);
	objfs_gpu_close(h);
	assert_healthy();
}
END_TEST

START_TEST(test_wrong_uid)
{
	struct objfs_side_cap other;
	struct raw r;

	ck_assert_int_eq(grant(side, getuid() + 1, 42, &other), 0);
	raw_ring(&r, SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&r, other.token, 42), EACCES);
	raw_free(&r);
	{
		struct objfs_gpu *h = NULL;

		ck_assert_int_eq(objfs_gpu_open_cap(&other, &h), -EACCES);
		ck_assert(h == NULL);
	}
	assert_healthy();
}
END_TEST

START_TEST(test_wrong_inode)
{
	struct objfs_side_cap other;
	struct fill1 f;
	struct raw r;
	uint8_t forged[OBJFS_TOKEN_LEN];
	int err = 0;

	ck_assert_int_eq(grant(side, getuid(), 43, &other), 0);
	/* HELLO naming another inode than the token's. */
	raw_ring(&r, SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&r, other.token, 42), EACCES);
	raw_free(&r);
	/* A forged token. */
	memcpy(forged, cap.token, sizeof(forged));
	forged[7] ^= 1;
	raw_ring(&r, SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&r, forged, 42), EACCES);
	raw_free(&r);
	/* In a session for inode 42: inode 43's token attached as 42 (refused,
	 * the session goes on), a forged one, then a FILL naming a handle the
	 * session does not have (it ends). */
	raw_ring(&r, SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&r, cap.token, 42), 0);
	ck_assert_int_eq(raw_attach(&r, other.token, 42, NULL), EACCES);
	ck_assert_int_eq(raw_attach(&r, forged, 42, NULL), EACCES);
	fill_msg(&f, 1, 0, 0, 100);
	raw_send(r.sock, &f, sizeof(f), -1);
	ck_assert_int_eq(raw_recv(r.sock, NULL, 0, 5000, &err), OBJFS_MSG_ERR);
	ck_assert_int_eq(err, EBADF);
	ck_assert_int_eq(raw_recv(r.sock, NULL, 0, 5000, NULL), 0); /* then EOF */
	ck_assert_uint_eq(seq_of(&r, 0), 0);                         /* nothing filled */
	raw_free(&r);
	assert_healthy();
}
END_TEST

/* Whether this kernel has SO_PASSRIGHTS (a socket that refuses
 * descriptors: the daemon sets it on its socket). */
static int passrights_here(void)
{
	int sv[2], zero = 0, ok;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	ok = setsockopt(sv[0], SOL_SOCKET, 83 /* SO_PASSRIGHTS */, &zero, sizeof(zero)) == 0;
	close(sv[0]);
	close(sv[1]);
	return ok;
}

/* Malformed, oversized and out-of-order messages: table-driven. */
enum bad_kind {
	BAD_HUGE, BAD_MAGIC, BAD_VERSION, BAD_LEN, BAD_RESERVED, BAD_TYPE, HELLO_WITH_FD,
	HELLO_SHORT, FILL_FIRST, RING_SIZE, GEOMETRY, FILL_EOF, FILL_ZERO, FILL_NEG, FILL_PIECE,
	FILL_WITH_FD, HELLO_TWICE,
};
static const struct { const char *name; enum bad_kind kind; int err; } bad[] = {
	{ "oversized message", BAD_HUGE, EMSGSIZE },
	{ "bad magic", BAD_MAGIC, EPROTO },
	{ "other version", BAD_VERSION, EPROTONOSUPPORT },
	{ "header length lies", BAD_LEN, EPROTO },
	{ "reserved field set", BAD_RESERVED, EPROTO },
	{ "unknown type", BAD_TYPE, EPROTO },
	{ "HELLO carrying a descriptor", HELLO_WITH_FD, EPROTO },
	{ "HELLO too short", HELLO_SHORT, EPROTO },
	{ "FILL before HELLO", FILL_FIRST, EPROTO },
	{ "ring size not the geometry's", RING_SIZE, EINVAL },
	{ "one-slot ring", GEOMETRY, EINVAL },
	{ "FILL past the end", FILL_EOF, EINVAL },
	{ "FILL of nothing", FILL_ZERO, EINVAL },
	{ "FILL at a negative offset", FILL_NEG, EINVAL },
	{ "FILL with the wrong first piece", FILL_PIECE, EPROTO },
	{ "FILL carrying a descriptor", FILL_WITH_FD, EPROTO },
	{ "second HELLO", HELLO_TWICE, EPROTO },
};

START_TEST(test_malformed)
{
	enum bad_kind k = bad[_i].kind;
	struct objfs_msg_hello m;
	struct fill1 f;
	struct raw r;
	int err = 0, t, refused = 0, spare = open("/dev/null", O_RDONLY | O_CLOEXEC);

	ck_assert_int_ge(spare, 0);
	raw_ring(&r, k == GEOMETRY ? 1 : SLOTS, SLOT_SIZE);
	hello_msg(&m, &r, cap.token, 42);
	fill_msg(&f, 0, 0, 0, 100);
	if (k >= FILL_EOF)
		ck_assert_int_eq(raw_hello(&r, cap.token, 42), 0);
	switch (k) {
	case BAD_HUGE: {
		char big[OBJFS_MSG_MAX * 4];

		memset(big, 0, sizeof(big));
		memcpy(big, &m, sizeof(m));
		((struct objfs_msg_hdr *)big)->len = sizeof(big);
		raw_send(r.sock, big, sizeof(big), -1);
		break;
	}
	case BAD_MAGIC: m.h.magic ^= 1; raw_send(r.sock, &m, sizeof(m), -1); break;
	case BAD_VERSION: m.h.version = 99; raw_send(r.sock, &m, sizeof(m), -1); break;
	case BAD_LEN: m.h.len = 40; raw_send(r.sock, &m, sizeof(m), -1); break;
	case BAD_RESERVED: m.h.reserved = 1; raw_send(r.sock, &m, sizeof(m), -1); break;
	case BAD_TYPE: m.h.type = 77; raw_send(r.sock, &m, sizeof(m), -1); break;
	case HELLO_WITH_FD: refused = raw_send_fd(r.sock, &m, sizeof(m), spare); break;
	case HELLO_SHORT:
		m.h.len = sizeof(m) - 8;
		raw_send(r.sock, &m, sizeof(m) - 8, -1);
		break;
	case FILL_FIRST: raw_send(r.sock, &f, sizeof(f), -1); break;
	case RING_SIZE: m.ring_bytes += 4096; raw_send(r.sock, &m, sizeof(m), -1); break;
	case GEOMETRY: raw_send(r.sock, &m, sizeof(m), -1); break;
	case FILL_EOF: f.e.off = FILE_SIZE - 10; f.e.len = 11; raw_send(r.sock, &f, sizeof(f), -1); break;
	case FILL_ZERO: f.e.len = 0; raw_send(r.sock, &f, sizeof(f), -1); break;
	case FILL_NEG: f.e.off = -1; raw_send(r.sock, &f, sizeof(f), -1); break;
	case FILL_PIECE: f.first_piece = 5; raw_send(r.sock, &f, sizeof(f), -1); break;
	case FILL_WITH_FD: refused = raw_send_fd(r.sock, &f, sizeof(f), spare); break;
	case HELLO_TWICE: raw_send(r.sock, &m, sizeof(m), -1); break;
	}
	close(spare);
	if (refused) {
		/* SO_PASSRIGHTS (Linux >= 6.16): the socket refused the
		 * descriptor, the daemon never got the message */
		ck_assert_int_eq(refused, -EPERM);
		ck_assert_int_eq(passrights_here(), 1);
	} else {
		if (k == HELLO_WITH_FD || k == FILL_WITH_FD)
			ck_assert_int_eq(passrights_here(), 0);
		t = raw_recv(r.sock, NULL, 0, 5000, &err);
		ck_assert_msg(t == OBJFS_MSG_ERR && err == bad[_i].err,
			      "%s: expected ERR %d, got type %d err %d", bad[_i].name, bad[_i].err,
			      t, err);
		ck_assert_int_eq(raw_recv(r.sock, NULL, 0, 5000, NULL), 0); /* the daemon closed */
	}
	raw_free(&r);
	wait_sessions(0, 5);
	assert_healthy();
}
END_TEST

/*
 * A ring's pages and its budget end together, at the client's hangup,
 * however the session ended (a FILL past the end, an unknown handle, a
 * full queue, the client's own poison), so a client that keeps the memfd
 * keeps no page the budget does not count. Here the uid's budget is one
 * ring: while the client keeps its socket, the ring is
 * intact (a piece published before the end still reads right) and still
 * charged (a second HELLO gets EDQUOT); once it closes the socket, the
 * memfd it kept holds no page, header included, and the budget takes the
 * next ring.
 */
enum ring_end { END_CLOSE, END_BAD_FILL, END_BAD_HANDLE, END_FULL_QUEUE, END_POISON };
static const struct { const char *name; enum ring_end kind; int err; } ring_ends[] = {
	{ "the client closes", END_CLOSE, 0 },
	{ "a FILL past the end", END_BAD_FILL, EINVAL },
	{ "a FILL of a handle never attached", END_BAD_HANDLE, EBADF },
	{ "more requests than the queue holds", END_FULL_QUEUE, EAGAIN },
	{ "the client's own poison", END_POISON, 0 },
};

/* Sends @m once the socket takes it: 0, or -1 when the daemon ended the
 * session first (its EOF is queued: POLLRDHUP). */
static int send_or_end(int sock, const void *m, size_t len)
{
	for (;;) {
		struct pollfd p = { sock, POLLOUT | POLLRDHUP, 0 };

		ck_assert_int_eq(poll(&p, 1, 5000), 1);
		if (p.revents & (POLLRDHUP | POLLHUP))
			return -1;
		if (send(sock, m, len, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)len)
			return 0;
		ck_assert_int_eq(errno, EAGAIN);
	}
}

START_TEST(test_ring_ends_with_client)
{
	const uint64_t rb = objfs_ring_bytes(SLOTS, SLOT_SIZE);
	struct objfs_side_cfg cfg = {
		.ring_slots = SLOTS, .ring_slot_size = SLOT_SIZE, .max_sessions = 8,
		.uid_sessions = 8, .max_caps = 8, .cap_ttl = 60, .only_uid = -1,
		.ring_budget = 4 * rb, .uid_ring_budget = rb,
	};
	enum ring_end k = ring_ends[_i].kind;
	struct fill1 f;
	struct raw r, r2;
	struct stat sb;
	int err = 0, t;

	objfs_side_free(side);
	side = server_cfg(&cfg);
	ck_assert_int_eq(grant(side, getuid(), 42, &cap), 0);
	raw_ring(&r, SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&r, cap.token, 42), 0);
	/* Every slot filled by the daemon (its pages), and DONE. */
	fill_msg(&f, 0, 0, 0, (uint64_t)SLOTS * SLOT_SIZE);
	raw_send(r.sock, &f, sizeof(f), -1);
	ck_assert_int_eq(raw_recv(r.sock, NULL, 0, 5000, NULL), OBJFS_MSG_DONE);
	ck_assert_int_eq(fstat(r.memfd, &sb), 0);
	ck_assert_uint_ge((uint64_t)sb.st_blocks * 512, (uint64_t)SLOTS * SLOT_SIZE);
	/* The end (slots not released: later requests stay queued). */
	switch (k) {
	case END_CLOSE:
		break;
	case END_BAD_FILL:
		fill_msg(&f, 0, SLOTS, FILE_SIZE - 10, 11);
		raw_send(r.sock, &f, sizeof(f), -1);
		break;
	case END_BAD_HANDLE:
		fill_msg(&f, 3, SLOTS, 0, 100);
		raw_send(r.sock, &f, sizeof(f), -1);
		break;
	case END_FULL_QUEUE:
		for (uint64_t i = 0;; i++) {
			ck_assert_uint_le(i, 2 * OBJFS_SESSION_QUEUE);
			fill_msg(&f, 0, SLOTS + i, (int64_t)i, 1);
			if (send_or_end(r.sock, &f, sizeof(f)))
				break;
		}
		break;
	case END_POISON: /* as libobjfs writes when a stream enqueue fails */
		for (unsigned i = 0; i < SLOTS; i++)
			__atomic_store_n(&r.ring->ctl[i].seq, OBJFS_SEQ_ERROR, __ATOMIC_SEQ_CST);
		__atomic_store_n(&r.ring->ctl[0].rel, 1, __ATOMIC_RELEASE);
		fill_msg(&f, 0, SLOTS, 0, 100); /* filled, then its publication fails */
		raw_send(r.sock, &f, sizeof(f), -1);
		break;
	}
	if (k != END_CLOSE) {
		/* The daemon ended the session: ERR when it refused something, then EOF. */
		if (ring_ends[_i].err) {
			t = raw_recv(r.sock, NULL, 0, 5000, &err);
			ck_assert_msg(t == OBJFS_MSG_ERR && err == ring_ends[_i].err,
				      "%s: got type %d err %d", ring_ends[_i].name, t, err);
		}
		ck_assert_int_eq(raw_recv(r.sock, NULL, 0, 5000, NULL), 0);
		/* The client still holds its socket: its ring is intact and charged. */
		check_bytes(r.data + (size_t)(SLOTS - 1) * SLOT_SIZE,
			    (int64_t)(SLOTS - 1) * SLOT_SIZE, SLOT_SIZE);
		ck_assert_uint_eq(stats().ring_bytes, rb);
		raw_ring(&r2, SLOTS, SLOT_SIZE);
		ck_assert_msg(raw_hello(&r2, cap.token, 42) == EDQUOT,
			      "%s: the budget was given back before the ring's pages",
			      ring_ends[_i].name);
		raw_free(&r2);
	}
	/* The hangup (the memfd and the mapping kept): no page left, budget back. */
	close(r.sock);
	r.sock = -1;
	wait_sessions(0, 5);
	ck_assert_int_eq(fstat(r.memfd, &sb), 0);
	ck_assert_uint_eq(sb.st_size, rb); /* sealed: only holes */
	ck_assert_msg(sb.st_blocks == 0, "%s: %lld bytes of the ring kept", ring_ends[_i].name,
		      (long long)sb.st_blocks * 512);
	for (size_t i = 0; i < rb; i += 4096)
		ck_assert_int_eq(((const char *)r.ring)[i], 0);
	ck_assert_uint_eq(stats().ring_bytes, 0);
	raw_ring(&r2, SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&r2, cap.token, 42), 0);
	raw_free(&r2);
	raw_free(&r);
	wait_sessions(0, 5);
}
END_TEST

/* A peer that vanishes while the daemon waits on its full ring. */
START_TEST(test_peer_vanishes)
{
	struct fill1 f;
	struct raw r;

	raw_ring(&r, SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&r, cap.token, 42), 0);
	fill_msg(&f, 0, 0, 0, 20 * SLOT_SIZE);
	raw_send(r.sock, &f, sizeof(f), -1);
	ck_assert_uint_eq(wait_seq(&r, SLOTS - 1, 1), 1); /* the ring is full */
	wait_sessions(1, 1);
	close(r.sock);
	r.sock = -1;
	wait_sessions(0, 2);
	raw_free(&r);
	assert_healthy();
}
END_TEST

/* A client process killed mid-fill (SIGKILL, nothing cleaned up). */
START_TEST(test_client_killed)
{
	int pfd[2];
	pid_t pid;
	char c;

	ck_assert_int_eq(pipe(pfd), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct fill1 f;
		struct raw r;

		close(pfd[0]);
		raw_ring(&r, SLOTS, SLOT_SIZE);
		if (raw_hello(&r, cap.token, 42))
			_exit(1);
		fill_msg(&f, 0, 0, 0, 40 * SLOT_SIZE);
		raw_send(r.sock, &f, sizeof(f), -1);
		wait_seq(&r, 1, 1);
		(void)!write(pfd[1], "x", 1);
		pause();
		_exit(0);
	}
	close(pfd[1]);
	ck_assert_int_eq(read(pfd[0], &c, 1), 1);
	wait_sessions(1, 1);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(pfd[0]);
	wait_sessions(0, 2);
	assert_healthy();
}
END_TEST

/*
 * A client that released its slots in advance, asked for a whole file and
 * went away: its session's fills stop at once. Fetches are held, so one
 * piece per slot was started when the client closed; every other piece
 * is cancelled, not filled (with every slot free, only the dispatcher's
 * own look at the socket notices).
 */
START_TEST(test_dead_client_cancelled)
{
	const uint64_t pieces = ((uint64_t)FILE_SIZE + SLOT_SIZE - 1) / SLOT_SIZE;
	struct objfs_side_stats st0, st;
	struct fill1 f;
	struct raw r;
	double t0;

	atomic_store(&hold, 1);
	raw_ring(&r, SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&r, cap.token, 42), 0);
	for (uint32_t i = 0; i < SLOTS; i++)
		__atomic_store_n(&r.ring->ctl[i].rel, OBJFS_RING_GEN_MAX - 1, __ATOMIC_RELEASE);
	st0 = stats();
	fill_msg(&f, 0, 0, 0, (uint64_t)FILE_SIZE);
	raw_send(r.sock, &f, sizeof(f), -1);
	for (t0 = now(); held_count() < SLOTS && now() - t0 < 5;)
		usleep(1000);
	ck_assert_int_eq(held_count(), SLOTS); /* a piece in every slot */
	raw_free(&r); /* the client is gone */
	for (t0 = now(); stats().sessions_open && now() - t0 < 10;) {
		held_release();
		usleep(1000);
	}
	atomic_store(&hold, 0);
	held_release();
	st = stats();
	ck_assert_uint_eq(st.sessions_open, 0);
	ck_assert_uint_eq(st.fill_runs - st0.fill_runs, SLOTS);
	ck_assert_uint_eq(st.fills_cancelled - st0.fills_cancelled, pieces - SLOTS);
	assert_healthy();
}
END_TEST

/* Jobs waiting for a fill worker (side_i.h). */
static unsigned jqueued(void)
{
	unsigned n;

	pthread_mutex_lock(&side->jlock);
	n = side->jqueued;
	pthread_mutex_unlock(&side->jlock);
	return n;
}

/*
 * Fill workers take turns between sessions (and uids). One worker, held
 * in session A's first fetch while A's other 15 slots queue their pieces;
 * then session B asks for one piece: B's fetch comes after one more of
 * A's, not after all 15 (as one FIFO for every session would have it).
 */
START_TEST(test_fill_turns)
{
	enum { A_SLOTS = 16 };
	struct objfs_side_cfg cfg = {
		.ring_slots = SLOTS, .ring_slot_size = SLOT_SIZE, .max_sessions = 8,
		.uid_sessions = 8, .max_caps = 64, .uid_caps = 64, .cap_ttl = 60, .only_uid = -1,
		.fill_threads = 1,
	};
	static int b_obj; /* B's fetches carry its address */
	struct objfs_side_cap cb;
	struct fill1 f;
	struct raw a, b;
	int pos = -1;
	double t0;

	objfs_side_free(side);
	side = server_cfg(&cfg);
	ck_assert_int_eq(grant(side, getuid(), 42, &cap), 0);
	ck_assert_int_eq(grant_ctx(side, getuid(), 43, &b_obj, &cb), 0);
	raw_ring(&a, A_SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&a, cap.token, 42), 0);
	raw_ring(&b, SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&b, cb.token, 43), 0);
	for (uint32_t i = 0; i < A_SLOTS; i++)
		__atomic_store_n(&a.ring->ctl[i].rel, OBJFS_RING_GEN_MAX - 1, __ATOMIC_RELEASE);
	atomic_store(&record, 1);
	atomic_store(&gate, 1);
	fill_msg(&f, 0, 0, 0, (uint64_t)FILE_SIZE);
	raw_send(a.sock, &f, sizeof(f), -1);
	for (t0 = now(); (gated_count() < 1 || jqueued() < A_SLOTS - 1) && now() - t0 < 5;)
		usleep(1000);
	ck_assert_int_eq(gated_count(), 1);
	ck_assert_uint_eq(jqueued(), A_SLOTS - 1);
	fill_msg(&f, 0, 0, 100, 100);
	raw_send(b.sock, &f, sizeof(f), -1);
	for (t0 = now(); jqueued() < A_SLOTS && now() - t0 < 5;)
		usleep(1000);
	ck_assert_uint_eq(jqueued(), A_SLOTS);
	gate_open();
	ck_assert_int_eq(raw_recv(b.sock, NULL, 0, 5000, NULL), OBJFS_MSG_DONE);
	check_bytes(b.data, 100, 100);
	atomic_store(&record, 0);
	pthread_mutex_lock(&held_lock);
	for (int i = 0; i < nseen && pos < 0; i++)
		if (seen[i].ctx == &b_obj)
			pos = i;
	pthread_mutex_unlock(&held_lock);
	ck_assert_msg(pos == 2, "B's fetch came after %d of A's (want 2)", pos);
	raw_free(&a);
	raw_free(&b);
	wait_sessions(0, 5);
}
END_TEST

/* The daemon goes away mid-read: the client's read fails, in bounded time. */
struct bg { struct objfs_gpu *h; int rc; ssize_t n; double t_end; };

static void *bg_read(void *a)
{
	struct bg *b = a;
	size_t len = 2u << 20;
	char *buf = malloc(len);

	b->rc = objfs_gpu_read(b->h, buf, len, 0, &b->n);
	b->t_end = now();
	free(buf);
	return NULL;
}

START_TEST(test_daemon_dies)
{
	struct bg b = { 0 };
	pthread_t t;
	double t_kill;

	atomic_store(&fetch_delay_ms, 400);
	ck_assert_int_eq(objfs_gpu_open_cap(&cap, &b.h), 0);
	pthread_create(&t, NULL, bg_read, &b);
	usleep(100000);
	t_kill = now();
	objfs_side_free(side); /* every session's socket is shut down first */
	side = NULL;
	pthread_join(t, NULL);
	ck_assert_int_eq(b.rc, -EIO);
	ck_assert_msg(b.t_end - t_kill < 3.0, "the read took %.2f s to fail", b.t_end - t_kill);
	{
		char x[10];
		ssize_t n;

		ck_assert_int_eq(objfs_gpu_read(b.h, x, sizeof(x), 0, &n), -EIO);
	}
	objfs_gpu_close(b.h);
	side = server_new(8, 64); /* for teardown */
}
END_TEST

START_TEST(test_limits)
{
	struct objfs_side *s2;
	struct objfs_side_cap c[4];
	struct objfs_side_stats st;
	struct raw r[3];

	/* Capabilities are capped. */
	s2 = server_new(2, 3);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(grant(s2, getuid(), 42, &c[i]), 0);
	ck_assert_int_eq(grant(s2, getuid(), 42, &c[3]), -ENOSPC);
	objfs_side_free(s2);
	/* Sessions are capped: the third HELLO is refused with EBUSY. */
	objfs_side_free(side);
	side = server_new(2, 64);
	ck_assert_int_eq(grant(side, getuid(), 42, &cap), 0);
	for (int i = 0; i < 2; i++) {
		raw_ring(&r[i], SLOTS, SLOT_SIZE);
		ck_assert_int_eq(raw_hello(&r[i], cap.token, 42), 0);
	}
	raw_ring(&r[2], SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&r[2], cap.token, 42), EBUSY);
	objfs_side_get_stats(side, &st);
	ck_assert_uint_eq(st.sessions_refused, 1);
	ck_assert_uint_eq(st.ring_bytes, 2 * objfs_ring_bytes(SLOTS, SLOT_SIZE));
	for (int i = 0; i < 3; i++)
		raw_free(&r[i]);
	wait_sessions(0, 2);
	objfs_side_get_stats(side, &st);
	ck_assert_uint_eq(st.ring_bytes, 0);
	assert_healthy();
}
END_TEST

/*
 * Per-uid shares: with the defaults one uid gets a quarter of every bound,
 * and root and the mounting user (the daemon's euid: here the test's)
 * each keep a quarter out of the other uids' reach, so they can always
 * open, however many users take their shares. A
 * connection holds no session before its HELLO, and at most
 * OBJFS_SIDE_PENDING_PER_UID wait for theirs.
 */
START_TEST(test_uid_shares)
{
	struct objfs_side_cfg cfg = {
		.ring_slots = SLOTS, .ring_slot_size = SLOT_SIZE, .max_sessions = 8,
		.max_caps = 8, .cap_ttl = 60, .only_uid = -1,
	};
	struct objfs_side_cap c;
	struct raw r[OBJFS_SIDE_PENDING_PER_UID + 1];
	uid_t me = getuid(), other = 100000;
	unsigned kept = me == 0 ? 1 : 2, others = 0; /* root, and the mounting user */
	int err = 0;

	ck_assert_uint_eq(me, geteuid());
	objfs_side_free(side);
	side = server_cfg(&cfg);
	ck_assert_int_eq(grant(side, me, 42, &cap), 0);
	/* Other uids: 2 of 8 capabilities each, until only the reserve is left. */
	for (uid_t u = other; u < other + 4; u++) {
		int got = 0;

		while (got < 3 && grant(side, u, 42, &c) == 0)
			got++;
		ck_assert_int_le(got, 2);
		others += (unsigned)got;
	}
	ck_assert_uint_eq(others, 8 - 2 * kept);
	/* Root and the mounting user still get theirs: 2 each, not more. */
	ck_assert_int_eq(grant(side, me, 42, &c), 0);
	ck_assert_int_eq(grant(side, me, 42, &c), -ENOSPC);
	if (me != 0) {
		ck_assert_int_eq(grant(side, 0, 42, &c), 0);
		ck_assert_int_eq(grant(side, 0, 42, &c), 0);
		ck_assert_int_eq(grant(side, 0, 42, &c), -ENOSPC);
	}
	/* Connections waiting for HELLO: 4 per uid, the fifth refused at once. */
	for (int i = 0; i <= OBJFS_SIDE_PENDING_PER_UID; i++)
		raw_ring(&r[i], SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_recv(r[OBJFS_SIDE_PENDING_PER_UID].sock, NULL, 0, 5000, &err),
			 OBJFS_MSG_ERR);
	ck_assert_int_eq(err, EBUSY);
	/* Pending ones hold no session: HELLOs still get in, 2 of 8 sessions per uid. */
	ck_assert_int_eq(raw_hello(&r[0], cap.token, 42), 0);
	ck_assert_int_eq(raw_hello(&r[1], cap.token, 42), 0);
	ck_assert_int_eq(raw_hello(&r[2], cap.token, 42), EBUSY);
	for (int i = 0; i <= OBJFS_SIDE_PENDING_PER_UID; i++)
		raw_free(&r[i]);
	wait_sessions(0, 2);
}
END_TEST

/* Ring memory (docs/reliability.md): -EDQUOT past a uid's share, -ENOMEM past the total. */
START_TEST(test_ring_budget)
{
	uint64_t rb = objfs_ring_bytes(SLOTS, SLOT_SIZE);
	struct objfs_side_cfg cfg = {
		.ring_slots = SLOTS, .ring_slot_size = SLOT_SIZE, .max_sessions = 8,
		.uid_sessions = 8, .max_caps = 8, .cap_ttl = 60, .only_uid = -1,
		.ring_budget = rb * 5, /* a uid's quarter: one ring and a quarter */
	};
	struct raw r[3];

	objfs_side_free(side);
	side = server_cfg(&cfg);
	ck_assert_int_eq(grant(side, getuid(), 42, &cap), 0);
	raw_ring(&r[0], SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&r[0], cap.token, 42), 0);
	raw_ring(&r[1], SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&r[1], cap.token, 42), EDQUOT);
	raw_free(&r[0]);
	raw_free(&r[1]);
	wait_sessions(0, 2);
	objfs_side_free(side);
	cfg.ring_budget = rb * 3 / 2;
	cfg.uid_ring_budget = cfg.ring_budget;
	side = server_cfg(&cfg);
	ck_assert_int_eq(grant(side, getuid(), 42, &cap), 0);
	raw_ring(&r[0], SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&r[0], cap.token, 42), 0);
	raw_ring(&r[1], SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&r[1], cap.token, 42), ENOMEM);
	raw_free(&r[1]);
	/* Freed with its session: the budget is whole again. */
	raw_free(&r[0]);
	wait_sessions(0, 2);
	raw_ring(&r[2], SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&r[2], cap.token, 42), 0);
	raw_free(&r[2]);
	wait_sessions(0, 2);
}
END_TEST

/* A mount without allow_other: other uids are closed at accept, told nothing. */
START_TEST(test_only_uid)
{
	struct objfs_side_cfg cfg = {
		.ring_slots = SLOTS, .ring_slot_size = SLOT_SIZE, .max_sessions = 8,
		.max_caps = 8, .cap_ttl = 60, .only_uid = (int)getuid() + 1,
	};
	struct raw r;

	objfs_side_free(side);
	side = server_cfg(&cfg);
	ck_assert_int_eq(grant(side, getuid(), 42, &cap), 0);
	raw_ring(&r, SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_recv(r.sock, NULL, 0, 5000, NULL), 0); /* EOF */
	raw_free(&r);
}
END_TEST

/*
 * A client that never reads its DONEs (docs/reliability.md): replies must
 * never block a shared thread, or ~300 unread DONEs fill the socket, the
 * threads that send them block, and every other fill (and FUSE read)
 * hangs. The DONEs wait in the session's queue; the client runs out of
 * queue entries and its session ends, while another session still reads.
 */
START_TEST(test_unread_dones)
{
	struct objfs_side_stats st;
	struct fill1 f;
	struct raw r;
	unsigned sent = 0, dones = 0, errs = 0;
	int t;

	uint64_t deferred0;

	objfs_side_get_stats(side, &st);
	deferred0 = st.replies_deferred;
	raw_ring(&r, SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&r, cap.token, 42), 0);
	for (uint32_t i = 0; i < SLOTS; i++) /* every slot released for good */
		__atomic_store_n(&r.ring->ctl[i].rel, OBJFS_RING_GEN_MAX - 1, __ATOMIC_RELEASE);
	for (; sent < 3 * OBJFS_SESSION_QUEUE; sent++) {
		struct pollfd p = { r.sock, POLLOUT, 0 };

		/*
		 * Before the queue can run out, let the fills catch up until the
		 * socket is full of DONEs (replies deferred): on a loaded machine
		 * the FILLs otherwise outran every fill, the queue filled with
		 * requests still running and the session ended with no DONE sent.
		 */
		for (int w = 0; sent == OBJFS_SESSION_QUEUE - 64 && w < 3000; w++) {
			objfs_side_get_stats(side, &st);
			if (st.replies_deferred > deferred0)
				break;
			usleep(10000);
		}

		fill_msg(&f, 0, sent, (int64_t)(sent % 64) * 4096, 4096);
		if (poll(&p, 1, 2000) != 1 || !(p.revents & POLLOUT) ||
		    send(r.sock, &f, sizeof(f), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(f))
			break; /* the session ended, or the daemon stopped reading */
	}
	ck_assert_uint_gt(sent, OBJFS_SESSION_QUEUE);
	ck_assert_uint_lt(sent, 3 * OBJFS_SESSION_QUEUE); /* its queue ran out: ended */
	/* Another session is served meanwhile. */
	assert_healthy();
	/* The DONEs held back went out in order; then the session ended. */
	for (;;) {
		struct objfs_msg_done d;
		int err = 0;

		t = raw_recv(r.sock, &d, sizeof(d), 5000, &err);
		if (t == OBJFS_MSG_DONE) {
			ck_assert_uint_eq(d.req_id, dones + 1);
			ck_assert_int_eq(d.err, 0);
			dones++;
		} else if (t == OBJFS_MSG_ERR) {
			errs++;
		} else {
			break;
		}
	}
	objfs_side_get_stats(side, &st);
	ck_assert_int_eq(t, 0); /* EOF, not a timeout */
	ck_assert_uint_le(errs, 1);
	/* what the socket held (~280 here) */
	ck_assert_msg(dones >= 100, "%u DONEs (sent %u FILLs; %llu fills, %llu replies deferred, "
		      "%llu before)", dones, sent, (unsigned long long)st.fills,
		      (unsigned long long)st.replies_deferred, (unsigned long long)deferred0);
	ck_assert_uint_le(dones, OBJFS_SESSION_QUEUE);
	objfs_side_get_stats(side, &st);
	ck_assert_uint_gt(st.replies_deferred, 0);
	raw_free(&r);
	wait_sessions(0, 2);
	assert_healthy();
}
END_TEST

/* A slow reader of DONEs is not punished: every DONE arrives, in order. */
START_TEST(test_late_reader)
{
	struct fill1 f;
	struct objfs_msg_done d;
	struct raw r;
	const unsigned n = 800;

	raw_ring(&r, SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&r, cap.token, 42), 0);
	for (uint32_t i = 0; i < SLOTS; i++)
		__atomic_store_n(&r.ring->ctl[i].rel, OBJFS_RING_GEN_MAX - 1, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < n; i++) {
		fill_msg(&f, 0, i, (int64_t)(i % 64) * 4096, 4096);
		raw_send(r.sock, &f, sizeof(f), -1);
	}
	usleep(500000); /* the socket fills; the rest wait in the queue */
	for (unsigned i = 0; i < n; i++) {
		ck_assert_int_eq(raw_recv(r.sock, &d, sizeof(d), 5000, NULL), OBJFS_MSG_DONE);
		ck_assert_uint_eq(d.req_id, i + 1);
		ck_assert_uint_eq(d.bytes, 4096);
	}
	raw_free(&r);
	wait_sessions(0, 2);
}
END_TEST

/*
 * Out of descriptors (docs/reliability.md): accept() fails with EMFILE while the
 * connection stays pending, so poll wakes the accept thread at once,
 * forever. The connection is shed instead: its client sees EOF.
 */
START_TEST(test_accept_emfile)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t n = strlen(cap.sock);
	struct rlimit old, low;
	int c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), fds[64], nfds = 0, fd;
	char b[OBJFS_MSG_MAX];
	struct pollfd p = { c, POLLIN, 0 };

	/* valgrind keeps descriptors of its own and emulates RLIMIT_NOFILE */
	if (RUNNING_ON_VALGRIND) {
		close(c);
		return;
	}
	ck_assert_int_ge(c, 0);
	memcpy(sa.sun_path, cap.sock, n);
	sa.sun_path[0] = '\0';
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
	/* The lowest free descriptors taken, the limit just above them. */
	while (nfds < 32 && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
		fds[nfds++] = fd;
	low = old;
	low.rlim_cur = (rlim_t)fds[nfds - 1] + 1;
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
	while (nfds < 64 && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
		fds[nfds++] = fd; /* any free one below the limit */
	ck_assert_int_eq(connect(c, (struct sockaddr *)&sa,
				 (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)), 0);
	ck_assert_int_eq(poll(&p, 1, 3000), 1);
	ck_assert_int_eq(recv(c, b, sizeof(b), 0), 0); /* shed: EOF */
	close(c);
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
	while (nfds)
		close(fds[--nfds]);
	assert_healthy();
}
END_TEST

/* The SIGBUS guard (side_guard.c): a fault in a registered ring is survived. */
START_TEST(test_sigbus_guard)
{
	size_t len = 64u << 10;
	int fd = memfd_create("guard", MFD_CLOEXEC), failed = 0, status;
	char *map;
	pid_t pid;

	/* valgrind emulates signals: a fault its handler repaired is not resumed */
	if (RUNNING_ON_VALGRIND) {
		close(fd);
		return;
	}
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, (off_t)len), 0);
	map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert(map != MAP_FAILED);
	ck_assert_int_eq(objfs_side_guard_install(), 0);
	ck_assert_int_eq(objfs_side_guard_add(map, len, &failed), 0);
	ck_assert_int_eq(ftruncate(fd, 0), 0); /* every page now past the end: SIGBUS */
	memset(map, 7, len);
	ck_assert_int_eq(failed, EFAULT);
	ck_assert_int_eq(map[len - 1], 7); /* the copy went on into anonymous memory */
	objfs_side_guard_del(map);
	munmap(map, len);
	/* Outside every registered ring, SIGBUS still kills (a bug of ours). */
	ck_assert_int_eq(ftruncate(fd, (off_t)len), 0);
	map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert(map != MAP_FAILED);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct rlimit no_core = { 0, 0 };

		setrlimit(RLIMIT_CORE, &no_core);
		if (ftruncate(fd, 0) == 0)
			map[0] = 1;
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS);
	munmap(map, len);
	close(fd);
}
END_TEST

START_TEST(test_strerror)
{
	ck_assert_str_eq(objfs_strerror(0), "success");
	ck_assert(strstr(objfs_strerror(-ENOTTY), "objfs mount") != NULL);
	ck_assert(strcmp(objfs_strerror(-EIO), objfs_strerror(EIO)) == 0);
	ck_assert(objfs_strerror(-99999) != NULL);
}
END_TEST

/* ------------------------------------------------ side_proto.h's inline ops */

/*
 * Futex waits of a second or more: the timeout must be split into tv_sec and
 * tv_nsec ({0, ns} is EINVAL from 1 s on and returned at once). Each row
 * waits on a word nobody wakes and must time out after about @ns.
 */
static const int64_t futex_timeouts_ns[] = { 0, 20000000, 999999999, 1000000000, 1250000000 };

START_TEST(test_futex_timeout)
{
	int64_t ns = futex_timeouts_ns[_i];
	uint32_t w = 7;
	double t0 = now(), dt;
	int r = objfs_futex_wait_ns(&w, 7, ns);

	dt = now() - t0;
	ck_assert_msg(r == -ETIMEDOUT || (r == -EINTR && dt < ns / 1e9),
		      "wait of %lld ns returned %d", (long long)ns, r);
	if (r == -ETIMEDOUT)
		ck_assert_msg(dt >= ns / 1e9 - 0.001 && dt < ns / 1e9 + 2,
			      "wait of %lld ns took %.3f s", (long long)ns, dt);
}
END_TEST

static void *wake_later(void *arg)
{
	uint32_t *w = arg;

	usleep(100000);
	__atomic_store_n(w, 1, __ATOMIC_RELEASE);
	objfs_futex_wake_all(w);
	return NULL;
}

/* A long timeout ends at the wake, not at the timeout; a stale value at once. */
START_TEST(test_futex_wake)
{
	uint32_t w = 0;
	pthread_t t;
	double t0 = now();
	int r;

	ck_assert_int_eq(objfs_futex_wait_ns(&w, 1, 5000000000LL), -EAGAIN);
	ck_assert_int_eq(pthread_create(&t, NULL, wake_later, &w), 0);
	while (__atomic_load_n(&w, __ATOMIC_ACQUIRE) == 0) {
		r = objfs_futex_wait_ns(&w, 0, 5000000000LL);
		ck_assert_msg(r == 0 || r == -EAGAIN || r == -EINTR, "wait returned %d", r);
	}
	ck_assert(now() - t0 < 3);
	pthread_join(t, NULL);
}
END_TEST

/* Poisoning is sticky (the first err_piece and errno stay) and hits every slot. */
START_TEST(test_ring_poison)
{
	size_t bytes = objfs_ring_bytes(SLOTS, SLOT_SIZE);
	struct objfs_ring_hdr *ring = calloc(1, bytes);

	ck_assert_ptr_nonnull(ring);
	ring->err_piece = UINT64_MAX;
	for (uint32_t s = 0; s < SLOTS; s++)
		ring->ctl[s].seq = s;
	objfs_ring_poison(ring, SLOTS, 9, EIO);
	objfs_ring_poison(ring, SLOTS, 3, EPROTO);
	ck_assert_uint_eq(ring->err_piece, 9);
	ck_assert_int_eq(ring->err, EIO);
	for (uint32_t s = 0; s < SLOTS; s++)
		ck_assert_uint_eq(ring->ctl[s].seq, OBJFS_SEQ_ERROR);
	free(ring);
}
END_TEST

START_TEST(test_piece_numbers)
{
	ck_assert_uint_eq(objfs_piece_slot(0, 4), 0);
	ck_assert_uint_eq(objfs_piece_gen(0, 4), 1);
	ck_assert_uint_eq(objfs_piece_slot(9, 4), 1);
	ck_assert_uint_eq(objfs_piece_gen(9, 4), 3);
	/* 64 bits: a too-late piece is seen as such, not wrapped below the limit. */
	ck_assert(objfs_piece_gen((uint64_t)OBJFS_RING_GEN_MAX * 64, 64) > OBJFS_RING_GEN_MAX);
}
END_TEST

START_TEST(test_sock_addr)
{
	struct sockaddr_un sa;
	socklen_t len;
	char big[sizeof(sa.sun_path) + 1];

	ck_assert_int_eq(objfs_sock_addr("@objfs.1", &sa, &len), 0);
	ck_assert_int_eq(sa.sun_family, AF_UNIX);
	ck_assert_int_eq(sa.sun_path[0], '\0');
	ck_assert_int_eq(memcmp(sa.sun_path + 1, "objfs.1", 7), 0);
	ck_assert_uint_eq(len, offsetof(struct sockaddr_un, sun_path) + 8);
	ck_assert_int_eq(objfs_sock_addr("/run/objfs.sock", &sa, &len), 0);
	ck_assert_str_eq(sa.sun_path, "/run/objfs.sock");
	ck_assert_uint_eq(len, sizeof(sa));
	ck_assert_int_eq(objfs_sock_addr("", &sa, &len), -EINVAL);
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	ck_assert_int_eq(objfs_sock_addr(big, &sa, &len), -EINVAL);
	big[sizeof(sa.sun_path) - 1] = '\0';
	ck_assert_int_eq(objfs_sock_addr(big, &sa, &len), 0);
}
END_TEST

/* Every way a header can be wrong, and the errno objfs_msg_check gives it. */
static const struct {
	const char *name;
	uint16_t type;
	size_t size;       /* bytes received */
	int field;         /* 0 none, 1 magic, 2 version, 3 reserved, 4 len */
	int want;
} msg_cases[] = {
	{ "hello", OBJFS_MSG_HELLO, sizeof(struct objfs_msg_hello), 0, 0 },
	{ "hello_ok", OBJFS_MSG_HELLO_OK, sizeof(struct objfs_msg_hello_ok), 0, 0 },
	{ "fill without entries", OBJFS_MSG_FILL, sizeof(struct objfs_msg_fill), 0, -EPROTO },
	{ "done without failures", OBJFS_MSG_DONE, sizeof(struct objfs_msg_done), 0, 0 },
	{ "attach", OBJFS_MSG_ATTACH, sizeof(struct objfs_msg_attach), 0, 0 },
	{ "attach_ok", OBJFS_MSG_ATTACH_OK, sizeof(struct objfs_msg_attach_ok), 0, 0 },
	{ "detach", OBJFS_MSG_DETACH, sizeof(struct objfs_msg_detach), 0, 0 },
	{ "done shorter than its header", OBJFS_MSG_DONE, sizeof(struct objfs_msg_done) - 8, 0,
	  -EPROTO },
	{ "err", OBJFS_MSG_ERR, sizeof(struct objfs_msg_err), 0, 0 },
	{ "short", OBJFS_MSG_FILL, sizeof(struct objfs_msg_hdr) - 1, 0, -EPROTO },
	{ "size of another type", OBJFS_MSG_DONE, sizeof(struct objfs_msg_err), 0, -EPROTO },
	{ "unknown type", 99, sizeof(struct objfs_msg_err), 0, -EPROTO },
	{ "magic", OBJFS_MSG_ERR, sizeof(struct objfs_msg_err), 1, -EPROTO },
	{ "version", OBJFS_MSG_ERR, sizeof(struct objfs_msg_err), 2, -EPROTONOSUPPORT },
	{ "reserved", OBJFS_MSG_ERR, sizeof(struct objfs_msg_err), 3, -EPROTO },
	{ "len", OBJFS_MSG_ERR, sizeof(struct objfs_msg_err), 4, -EPROTO },
};

START_TEST(test_msg_check)
{
	char buf[OBJFS_MSG_MAX] __attribute__((aligned(8))) = { 0 };
	struct objfs_msg_hdr *h = (struct objfs_msg_hdr *)buf;

	objfs_msg_init(h, (enum objfs_msg_type)msg_cases[_i].type, (uint32_t)msg_cases[_i].size);
	switch (msg_cases[_i].field) {
	case 1: h->magic ^= 1; break;
	case 2: h->version++; break;
	case 3: h->reserved = 1; break;
	case 4: h->len++; break;
	}
	ck_assert_msg(objfs_msg_check(buf, msg_cases[_i].size) == msg_cases[_i].want, "%s",
		      msg_cases[_i].name);
}
END_TEST


/* ------------------------------------------------------------ batches (version 2) */

/* The side server's stats now. */
/* Opens a handle of a new grant of @ino (42 or 43). */
static struct objfs_gpu *open_ino(uint64_t ino)
{
	struct objfs_side_cap c;
	struct objfs_gpu *h;

	ck_assert_int_eq(grant(side, getuid(), ino, &c), 0);
	ck_assert_int_eq(objfs_gpu_open_cap(&c, &h), 0);
	return h;
}

static uint64_t rnd_state = 88172645463325252ull;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

/*
 * A batch in order: odd offsets and sizes over two handles, entries that
 * share slots, entries longer than a slot, len 0, at and past the end,
 * negative offsets; every entry gets its own count and bytes, nothing is
 * written past a count.
 */
START_TEST(test_batch_order)
{
	enum { N = 300 };
	struct objfs_gpu *h[2] = { open_ino(42), open_ino(43) };
	struct objfs_gpu_iov v[N];
	char *buf[N];
	ssize_t want[N];

	for (int i = 0; i < N; i++) {
		uint64_t r = rnd();
		size_t len = r % 7 == 0 ? (size_t)(r % (3 * SLOT_SIZE)) : (size_t)(r % 9000) + 1;
		int64_t off = (int64_t)((r >> 20) % (uint64_t)FILE_SIZE);

		if (i % 50 == 7)
			len = 0;
		if (i % 50 == 11)
			off = FILE_SIZE - 3;
		if (i % 50 == 13)
			off = FILE_SIZE + 5;
		if (i % 50 == 17)
			off = -5;
		want[i] = off < 0 ? -EINVAL : off >= FILE_SIZE ? 0
			: (ssize_t)(len < (size_t)(FILE_SIZE - off) ? len : (size_t)(FILE_SIZE - off));
		buf[i] = calloc(1, len + 1);
		v[i] = (struct objfs_gpu_iov){ h[i & 1], buf[i], len, off, 12345 };
	}
	ck_assert_int_eq(objfs_gpu_readv(v, N), 0);
	for (int i = 0; i < N; i++) {
		ck_assert_msg(v[i].nread == want[i], "entry %d (%zu at %lld): %zd, want %zd", i,
			      v[i].len, (long long)v[i].off, v[i].nread, want[i]);
		if (want[i] > 0)
			check_bytes(buf[i], v[i].off, (size_t)want[i]);
		ck_assert_int_eq(buf[i][want[i] > 0 ? want[i] : 0], 0);
		free(buf[i]);
	}
	/* The async call without a GPU completes at once. */
	{
		char b[100];
		struct objfs_gpu_iov one = { h[1], b, sizeof(b), 999, 0 };

		ck_assert_int_eq(objfs_gpu_readv_async(&one, 1, NULL), 0);
		ck_assert_int_eq(one.nread, sizeof(b));
		check_bytes(b, 999, sizeof(b));
	}
	ck_assert_uint_eq(stats().sessions_open, 1); /* one session for both handles */
	objfs_gpu_close(h[0]);
	objfs_gpu_close(h[1]);
	wait_sessions(0, 5);
}
END_TEST

/* A failed range fails its entry only; the others and later batches are fine. */
START_TEST(test_batch_partial_failure)
{
	struct objfs_gpu *h = open_ino(42);
	static char a[5000], b[5000], c[3 * SLOT_SIZE], d[100];
	struct objfs_gpu_iov v[] = {
		{ h, a, sizeof(a), 1000, 0 },                    /* block 0 */
		{ h, b, sizeof(b), 40 * SLOT_SIZE + 7, 0 },      /* past fail_from */
		{ h, c, sizeof(c), 38 * SLOT_SIZE, 0 },          /* long, its last part fails */
		{ h, d, sizeof(d), 5 * SLOT_SIZE, 0 },           /* block 5 */
	};

	atomic_store(&fail_from, 40 * SLOT_SIZE);
	ck_assert_int_eq(objfs_gpu_readv(v, 4), 0);
	ck_assert_int_eq(v[0].nread, sizeof(a));
	ck_assert_int_eq(v[1].nread, -EIO);
	ck_assert_int_eq(v[2].nread, -EIO);
	ck_assert_int_eq(v[3].nread, sizeof(d));
	check_bytes(a, 1000, sizeof(a));
	check_bytes(d, 5 * SLOT_SIZE, sizeof(d));
	ck_assert_uint_eq(stats().fill_errors, 2);
	atomic_store(&fail_from, -1);
	ck_assert_int_eq(objfs_gpu_readv(v, 4), 0);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(v[i].nread, (ssize_t)v[i].len);
	check_bytes(b, 40 * SLOT_SIZE + 7, sizeof(b));
	check_bytes(c, 38 * SLOT_SIZE, sizeof(c));
	objfs_gpu_close(h);
}
END_TEST

/*
 * Coalescing, counted at the fake store: 16 adjacent 4 KiB entries in
 * order (one slot, laid out as in the file: one fill straight into it),
 * then the same ranges shuffled and overlapping (one fill through a
 * buffer), then two objects interleaved (one fill each). Within one block
 * every run is one fetch.
 */
START_TEST(test_batch_coalesce)
{
	struct objfs_gpu *h = open_ino(42), *h2 = open_ino(43);
	static char buf[32][4096];
	struct objfs_gpu_iov v[32];
	uint64_t runs0 = stats().fill_runs;
	int f0;

	for (int i = 0; i < 16; i++)
		v[i] = (struct objfs_gpu_iov){ h, buf[i], 4096, 8 * SLOT_SIZE + i * 4096, 0 };
	f0 = atomic_load(&fetches);
	ck_assert_int_eq(objfs_gpu_readv(v, 16), 0);
	for (int i = 0; i < 16; i++) {
		ck_assert_int_eq(v[i].nread, 4096);
		check_bytes(buf[i], v[i].off, 4096);
	}
	ck_assert_uint_eq(stats().fill_runs - runs0, 1);
	ck_assert_int_eq(atomic_load(&fetches) - f0, 1);

	/* Shuffled, with overlaps: offsets 2 KiB apart, reverse order. */
	for (int i = 0; i < 16; i++)
		v[i] = (struct objfs_gpu_iov){ h, buf[i], 4096, 12 * SLOT_SIZE + (15 - i) * 2048, 0 };
	runs0 = stats().fill_runs;
	f0 = atomic_load(&fetches);
	ck_assert_int_eq(objfs_gpu_readv(v, 16), 0);
	for (int i = 0; i < 16; i++)
		check_bytes(buf[i], v[i].off, 4096);
	ck_assert_uint_eq(stats().fill_runs - runs0, 1);
	ck_assert_int_eq(atomic_load(&fetches) - f0, 1);

	/* Two objects interleaved: one run each. */
	for (int i = 0; i < 32; i++)
		v[i] = (struct objfs_gpu_iov){ i & 1 ? h2 : h, buf[i], 1024,
					       16 * SLOT_SIZE + (i / 2) * 1024, 0 };
	runs0 = stats().fill_runs;
	ck_assert_int_eq(objfs_gpu_readv(v, 32), 0);
	for (int i = 0; i < 32; i++)
		check_bytes(buf[i], v[i].off, 1024);
	ck_assert_uint_eq(stats().fill_runs - runs0, 2);
	objfs_gpu_close(h);
	objfs_gpu_close(h2);
}
END_TEST

/*
 * Dense samples: small entries that cover a quarter of a block or more,
 * two at least, fetch the block whole into the cache (one GET, whatever
 * the pieces), and a second pass is served from memory; sparse ones are
 * fetched as they are. The object's short last block counts its own size.
 */
START_TEST(test_batch_dense_blocks)
{
	struct objfs_gpu *h = open_ino(42);
	static char buf[24][2048];
	struct objfs_gpu_iov v[24];
	const int64_t last = (FILE_SIZE / SLOT_SIZE) * SLOT_SIZE;
	int f0;

	/* two blocks, 10 samples of 2 KiB each, 4 KiB apart, interleaved */
	for (int i = 0; i < 20; i++)
		v[i] = (struct objfs_gpu_iov){ h, buf[i], 2048,
					       (30 + (i & 1)) * (int64_t)SLOT_SIZE + (i / 2) * 6144, 0 };
	/* (20 KiB of 64: dense) */
	/* the short last block: 2 of 2 KiB in 12,345 bytes */
	v[20] = (struct objfs_gpu_iov){ h, buf[20], 2048, last + 100, 0 };
	v[21] = (struct objfs_gpu_iov){ h, buf[21], 2048, last + 5000, 0 };
	f0 = atomic_load(&fetches);
	ck_assert_int_eq(objfs_gpu_readv(v, 22), 0);
	for (int i = 0; i < 22; i++) {
		ck_assert_int_eq(v[i].nread, (ssize_t)v[i].len);
		check_bytes(buf[i], v[i].off, v[i].len);
	}
	ck_assert_int_eq(atomic_load(&fetches) - f0, 3); /* three blocks, whole */
	memset(buf, 0, sizeof(buf));
	f0 = atomic_load(&fetches);
	ck_assert_int_eq(objfs_gpu_readv(v, 22), 0);
	for (int i = 0; i < 22; i++)
		check_bytes(buf[i], v[i].off, v[i].len);
	ck_assert_int_eq(atomic_load(&fetches) - f0, 0); /* from memory */

	/* sparse: 2 of 2 KiB in a 64 KiB block (an eighth), far apart: two small GETs */
	v[0] = (struct objfs_gpu_iov){ h, buf[0], 2048, 40 * (int64_t)SLOT_SIZE + 10, 0 };
	v[1] = (struct objfs_gpu_iov){ h, buf[1], 2048, 40 * (int64_t)SLOT_SIZE + 40000, 0 };
	f0 = atomic_load(&fetches);
	ck_assert_int_eq(objfs_gpu_readv(v, 2), 0);
	check_bytes(buf[0], v[0].off, 2048);
	check_bytes(buf[1], v[1].off, 2048);
	ck_assert_int_eq(atomic_load(&fetches) - f0, 2);
	objfs_gpu_close(h);
}
END_TEST

/*
 * Many entries of one block, named in reverse and overlapping: their union,
 * not their sum, decides. 20 of 2 KiB 800 bytes apart cover 17,248 bytes of
 * 64 KiB (dense: the block whole); 10 at one offset cover 2 KiB (sparse,
 * though their sum is 20 KiB): only those bytes are fetched. All 30 fit
 * one piece (one run each block).
 */
START_TEST(test_batch_dense_overlaps)
{
	struct objfs_gpu *h = open_ino(42);
	static char buf[30][2048];
	struct objfs_gpu_iov v[30];
	long long b0;
	int f0;

	for (int i = 0; i < 20; i++)
		v[i] = (struct objfs_gpu_iov){ h, buf[i], 2048,
					       44 * (int64_t)SLOT_SIZE + (19 - i) * 800, 0 };
	for (int i = 20; i < 30; i++)
		v[i] = (struct objfs_gpu_iov){ h, buf[i], 2048, 46 * (int64_t)SLOT_SIZE + 100, 0 };
	f0 = atomic_load(&fetches);
	b0 = atomic_load(&fetched);
	ck_assert_int_eq(objfs_gpu_readv(v, 30), 0);
	for (int i = 0; i < 30; i++) {
		ck_assert_int_eq(v[i].nread, 2048);
		check_bytes(buf[i], v[i].off, 2048);
	}
	ck_assert_int_eq(atomic_load(&fetches) - f0, 2);
	ck_assert_int_eq(atomic_load(&fetched) - b0, SLOT_SIZE + 2048);
	objfs_gpu_close(h);
}
END_TEST

/* The packing both sides compute (side_proto.h, 6), against a table. */
START_TEST(test_pack)
{
	static const struct { uint64_t len; uint64_t piece; uint32_t off; } v[] = {
		{ 100, 0, 0 }, { SLOT_SIZE - 100, 0, 100 }, { 1, 1, 0 },
		{ SLOT_SIZE, 2, 0 },                 /* does not fit the rest of piece 1 */
		{ SLOT_SIZE + 1, 3, 0 },             /* long: pieces 3 and 4 */
		{ 10, 5, 0 }, { SLOT_SIZE - 10, 5, 10 }, { 5, 6, 0 },
		{ 3 * SLOT_SIZE, 7, 0 },             /* pieces 7, 8, 9 */
		{ 7, 10, 0 },
	};
	struct objfs_pack pk = { 0, 0 };

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		uint32_t off;
		uint64_t p = objfs_pack_place(&pk, v[i].len, SLOT_SIZE, &off);

		ck_assert_msg(p == v[i].piece && off == v[i].off, "entry %zu: piece %llu off %u", i,
			      (unsigned long long)p, off);
	}
	ck_assert_uint_eq(objfs_pack_pieces(&pk), 11);
}
END_TEST

/* Arguments of the whole call: clean errors, nothing read. */
START_TEST(test_batch_limits)
{
	struct objfs_gpu *h = open_ino(42), *other;
	struct objfs_side *side2 = server_new(8, 64);
	struct objfs_side_cap c2;
	char b[10];
	struct objfs_gpu_iov v[2] = { { h, b, 10, 0, 7 }, { h, b, 10, 0, 7 } };
	struct objfs_gpu_iov *big;

	ck_assert_int_eq(objfs_gpu_readv(v, 0), 0);
	ck_assert_int_eq(objfs_gpu_readv(NULL, 0), 0);
	ck_assert_int_eq(objfs_gpu_readv(NULL, 3), -EINVAL);
	ck_assert_int_eq(objfs_gpu_readv(v, -1), -EINVAL);
	ck_assert_int_eq(objfs_gpu_readv(v, INT_MAX), -E2BIG);
	v[1].h = NULL;
	ck_assert_int_eq(objfs_gpu_readv(v, 2), -EINVAL);
	v[1] = (struct objfs_gpu_iov){ h, NULL, 10, 0, 7 };
	ck_assert_int_eq(objfs_gpu_readv(v, 2), -EINVAL);
	ck_assert_int_eq(v[0].nread, 7); /* untouched */
	/* A handle of another mount (another daemon): -EXDEV. */
	ck_assert_int_eq(grant(side2, getuid(), 42, &c2), 0);
	ck_assert_int_eq(objfs_gpu_open_cap(&c2, &other), 0);
	v[1] = (struct objfs_gpu_iov){ other, b, 10, 0, 7 };
	ck_assert_int_eq(objfs_gpu_readv(v, 2), -EXDEV);
	/* Entry-level: sizes past SSIZE_MAX, sums that overflow. */
	v[1] = (struct objfs_gpu_iov){ h, b, SIZE_MAX, 5, 7 };
	ck_assert_int_eq(objfs_gpu_readv(v, 2), 0);
	ck_assert_int_eq(v[0].nread, 10);
	ck_assert_int_eq(v[1].nread, -EINVAL);
	v[1] = (struct objfs_gpu_iov){ h, b, (size_t)SSIZE_MAX, INT64_MAX, 7 };
	ck_assert_int_eq(objfs_gpu_readv(v, 2), 0);
	ck_assert_int_eq(v[1].nread, 0);
	/* A read-only mapping as the destination: -EFAULT, not SIGSEGV. */
	{
		char *ro = mmap(NULL, 8192, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		ssize_t n = 7;

		ck_assert_ptr_ne(ro, MAP_FAILED);
		v[1] = (struct objfs_gpu_iov){ h, ro + 100, 5000, 0, 7 };
		ck_assert_int_eq(objfs_gpu_readv(v, 2), 0);
		ck_assert_int_eq(v[0].nread, 10);
		ck_assert_int_eq(v[1].nread, -EFAULT);
		ck_assert_int_eq(objfs_gpu_read(h, ro, 10, 0, &n), -EFAULT);
		munmap(ro, 8192);
	}
	/* The most entries of one call, all of one byte, 3 bytes apart: several
	 * FILL messages, planned as one request (dense: their blocks fetched
	 * whole, a handful of GETs, not one a byte: 10,000 fake fetches were
	 * 10,000 threads, past the timeout under ASan on a loaded machine). */
	big = calloc(OBJFS_GPU_READV_MAX, sizeof(*big));
	char *bb = malloc(OBJFS_GPU_READV_MAX);
	int f0 = atomic_load(&fetches);

	for (int i = 0; i < OBJFS_GPU_READV_MAX; i++)
		big[i] = (struct objfs_gpu_iov){ h, bb + i, 1, (off_t)i * 3, 0 };
	ck_assert_int_eq(objfs_gpu_readv(big, OBJFS_GPU_READV_MAX), 0);
	for (int i = 0; i < OBJFS_GPU_READV_MAX; i++) {
		ck_assert_int_eq(big[i].nread, 1);
		ck_assert_uint_eq((unsigned char)bb[i], byte_at((int64_t)i * 3));
	}
	ck_assert_int_le(atomic_load(&fetches) - f0, (OBJFS_GPU_READV_MAX * 3) / SLOT_SIZE + 2);
	free(big);
	free(bb);
	objfs_gpu_close(other);
	objfs_gpu_close(h);
	objfs_side_free(side2);
}
END_TEST

/* Hostile FILLs, ATTACHes and DETACHes from a raw client: the session ends
 * with a clean ERR (or ATTACH_OK's errno), the server serves on. */
enum bad_batch {
	BB_NENT_ZERO, BB_NENT_HUGE, BB_COUNT_ZERO, BB_COUNT_LIES, BB_FIRST, BB_REQ_CHANGES,
	BB_TOO_MANY, BB_HANDLE, BB_LEN_ZERO, BB_OFF_OVERFLOW, BB_LEN_HUGE, BB_ATTACH_MID,
	BB_DETACH_UNKNOWN, BB_DETACH_TWICE,
};
static const struct { const char *name; enum bad_batch kind; int err; } bad_batch[] = {
	{ "nent 0", BB_NENT_ZERO, EINVAL },
	{ "nent past the bound", BB_NENT_HUGE, EINVAL },
	{ "count 0", BB_COUNT_ZERO, EPROTO },
	{ "count past the message", BB_COUNT_LIES, EPROTO },
	{ "second message out of sequence", BB_FIRST, EPROTO },
	{ "request id changes mid-request", BB_REQ_CHANGES, EPROTO },
	{ "more entries than nent", BB_TOO_MANY, EPROTO },
	{ "handle never attached", BB_HANDLE, EBADF },
	{ "len 0", BB_LEN_ZERO, EINVAL },
	{ "off + len overflows", BB_OFF_OVERFLOW, EINVAL },
	{ "len past the bound", BB_LEN_HUGE, EINVAL },
	{ "ATTACH inside a request", BB_ATTACH_MID, EPROTO },
	{ "DETACH of an unknown handle", BB_DETACH_UNKNOWN, EBADF },
	{ "DETACH twice", BB_DETACH_TWICE, EBADF },
};

START_TEST(test_batch_hostile)
{
	char mb[OBJFS_MSG_MAX] __attribute__((aligned(8))) = { 0 };
	struct objfs_msg_fill *m = (struct objfs_msg_fill *)mb;
	struct objfs_msg_detach dt = { 0 };
	struct objfs_msg_attach at = { 0 };
	struct raw r;
	size_t len = objfs_msg_size(OBJFS_MSG_FILL, 2);
	int err = 0, t;

	raw_ring(&r, SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&r, cap.token, 42), 0);
	objfs_msg_init(&m->h, OBJFS_MSG_FILL, (uint32_t)len);
	m->req_id = 1;
	m->nent = 4;
	m->count = 2;
	m->ent[0] = (struct objfs_fill_ent){ 0, 0, 0, 100 };
	m->ent[1] = (struct objfs_fill_ent){ 0, 0, 100, 100 };
	objfs_msg_init(&dt.h, OBJFS_MSG_DETACH, sizeof(dt));
	objfs_msg_init(&at.h, OBJFS_MSG_ATTACH, sizeof(at));
	switch (bad_batch[_i].kind) {
	case BB_NENT_ZERO: m->nent = 0; break;
	case BB_NENT_HUGE: m->nent = OBJFS_FILL_MAX_ENTS + 1; break;
	case BB_COUNT_ZERO: m->count = 0; break;
	case BB_COUNT_LIES: m->count = 3; break;
	case BB_FIRST: raw_send(r.sock, m, len, -1); m->first = 1; break;
	case BB_REQ_CHANGES: raw_send(r.sock, m, len, -1); m->first = 2; m->req_id = 9; break;
	case BB_TOO_MANY: m->nent = 1; break;
	case BB_HANDLE: m->ent[1].handle = 3; break;
	case BB_LEN_ZERO: m->ent[1].len = 0; break;
	case BB_OFF_OVERFLOW: m->ent[1].off = INT64_MAX; m->ent[1].len = 2; break;
	case BB_LEN_HUGE: m->ent[1].len = OBJFS_FILL_MAX_LEN + 1; break;
	case BB_ATTACH_MID: raw_send(r.sock, m, len, -1); break;
	case BB_DETACH_UNKNOWN: dt.handle = 99; break;
	case BB_DETACH_TWICE: raw_send(r.sock, &dt, sizeof(dt), -1); break;
	}
	if (bad_batch[_i].kind == BB_ATTACH_MID) {
		memcpy(at.token, cap.token, OBJFS_TOKEN_LEN);
		at.ino = 42;
		raw_send(r.sock, &at, sizeof(at), -1);
	} else if (bad_batch[_i].kind == BB_DETACH_UNKNOWN || bad_batch[_i].kind == BB_DETACH_TWICE) {
		raw_send(r.sock, &dt, sizeof(dt), -1);
	} else if (bad_batch[_i].kind == BB_COUNT_LIES) {
		objfs_msg_init(&m->h, OBJFS_MSG_FILL, (uint32_t)len);
		raw_send(r.sock, m, len, -1); /* objfs_msg_check: size and count disagree */
	} else {
		raw_send(r.sock, m, len, -1);
	}
	t = raw_recv(r.sock, NULL, 0, 5000, &err);
	ck_assert_msg(t == OBJFS_MSG_ERR && err == bad_batch[_i].err, "%s: got type %d err %d",
		      bad_batch[_i].name, t, err);
	raw_free(&r);
	wait_sessions(0, 5);
	assert_healthy();
}
END_TEST

/*
 * Sparse entries are a fill each, but a session keeps at most RUNS_MAX
 * (side.c: 1,024) in flight: the rest wait for room and every entry
 * still arrives (uncapped, one session could put 131,072 GETs in the
 * engine's queue at once). Fetches are held until the test lets them
 * go, so what is in flight at once is counted exactly.
 */
struct batch {
	struct objfs_gpu_iov *v;
	int n, rc;
	atomic_int done;
};

static void *readv_thread(void *arg)
{
	struct batch *b = arg;

	b->rc = objfs_gpu_readv(b->v, b->n);
	atomic_store(&b->done, 1);
	return NULL;
}

START_TEST(test_batch_runs_bounded)
{
	enum { N = 5000, LEN = 64 };
	struct objfs_gpu *h = open_ino(42);
	static char buf[N][LEN];
	static struct objfs_gpu_iov v[N];
	struct batch b = { v, N, -1, 0 };
	int most = 0, same = 0, last = -1;
	pthread_t t;

	for (int i = 0; i < N; i++) /* an eighth of each 512 bytes: not a dense block */
		v[i] = (struct objfs_gpu_iov){ h, buf[i], LEN, (int64_t)i * 512 + 3, 0 };
	atomic_store(&hold, 1);
	ck_assert_int_eq(pthread_create(&t, NULL, readv_thread, &b), 0);
	while (!atomic_load(&b.done)) {
		struct timespec nap = { 0, 10 * 1000000 };
		int n;

		nanosleep(&nap, NULL);
		n = held_count();
		same = n == last ? same + 1 : 0;
		last = n;
		if (n > most)
			most = n;
		if (n && same >= 5) /* no more come: let them go */
			held_release();
	}
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	atomic_store(&hold, 0);
	held_release();
	ck_assert_int_eq(b.rc, 0);
	ck_assert_msg(most > 0 && most <= 1024, "%d fetches in flight at once", most);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(v[i].nread, LEN);
		check_bytes(buf[i], v[i].off, LEN);
	}
	objfs_gpu_close(h);
	assert_healthy();
}
END_TEST

/* Handles past the uid's capability share: ATTACH_OK ENOSPC, the session goes on. */
START_TEST(test_attach_bound)
{
	struct objfs_side_cfg cfg = {
		.ring_slots = SLOTS, .ring_slot_size = SLOT_SIZE, .max_sessions = 8,
		.max_caps = 64, .uid_caps = 4, .cap_ttl = 60, .only_uid = -1,
	};
	struct objfs_side_cap c[5];
	struct objfs_gpu *h[5];
	char b[10];
	ssize_t n;

	objfs_side_free(side);
	side = server_cfg(&cfg);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(grant(side, getuid(), 42, &c[i]), 0);
	ck_assert_int_eq(grant(side, getuid(), 42, &c[4]), -ENOSPC);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(objfs_gpu_open_cap(&c[i], &h[i]), 0);
	/* A fifth attach of an already attached capability: past the share. The
	 * open is pipelined (returns once sent); its reads give the refusal. */
	ck_assert_int_eq(objfs_gpu_open_cap(&c[0], &h[4]), 0);
	ck_assert_int_eq(objfs_gpu_read(h[4], b, sizeof(b), 5, &n), -ENOSPC);
	objfs_gpu_close(h[4]);
	ck_assert_int_eq(objfs_gpu_read(h[3], b, sizeof(b), 5, &n), 0);
	check_bytes(b, 5, sizeof(b));
	/* Detached handles make room (once no request names them). */
	objfs_gpu_close(h[3]);
	for (double t0 = now(); now() - t0 < 5;) {
		ck_assert_int_eq(objfs_gpu_open_cap(&c[3], &h[3]), 0);
		if (objfs_gpu_read(h[3], b, sizeof(b), 5, &n) == 0)
			break;
		objfs_gpu_close(h[3]);
		h[3] = NULL;
		usleep(10000);
	}
	ck_assert(h[3] != NULL);
	for (int i = 0; i < 4; i++)
		objfs_gpu_close(h[i]);
	wait_sessions(0, 5);
}
END_TEST

/*
 * A DETACH while a request naming the handle is still queued keeps the
 * capability record until that request is done, whatever request ids the
 * client uses (ids going backwards once freed the record early; an expired,
 * purged record was then read by the queued fill: ASan's use after free).
 */
START_TEST(test_detach_queued)
{
	struct objfs_side_cfg cfg = {
		.ring_slots = SLOTS, .ring_slot_size = SLOT_SIZE, .max_sessions = 8,
		.uid_sessions = 8, .max_caps = 64, .uid_caps = 64, .cap_ttl = 0.01, .only_uid = -1,
	};
	struct objfs_side_cap c2, c3;
	struct objfs_msg_detach dt = { 0 };
	char db[OBJFS_MSG_MAX] __attribute__((aligned(8)));
	struct objfs_msg_done *d = (struct objfs_msg_done *)db;
	struct fill1 f;
	struct raw r;
	uint32_t h1;
	int err = 0;

	objfs_side_free(side);
	side = server_cfg(&cfg);
	ck_assert_int_eq(grant(side, getuid(), 42, &cap), 0);
	ck_assert_int_eq(grant(side, getuid(), 43, &c2), 0);
	raw_ring(&r, SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&r, cap.token, 42), 0);
	ck_assert_int_eq(raw_attach(&r, c2.token, 43, &h1), 0);
	fill_msg(&f, 0, 0, 0, 100); /* request id 1 ... */
	f.req_id = 10;              /* ... called 10 */
	raw_send(r.sock, &f, sizeof(f), -1);
	ck_assert_int_eq(raw_recv(r.sock, d, sizeof(db), 5000, &err), OBJFS_MSG_DONE);
	__atomic_store_n(&r.ring->ctl[0].rel, 1, __ATOMIC_RELEASE);
	/* Handle 1, more pieces than the ring: it waits for releases. Id 5. */
	fill_msg(&f, h1, 1, 0, (uint64_t)(SLOTS + 3) * SLOT_SIZE);
	f.req_id = 5;
	raw_send(r.sock, &f, sizeof(f), -1);
	objfs_msg_init(&dt.h, OBJFS_MSG_DETACH, sizeof(dt));
	dt.handle = h1;
	raw_send(r.sock, &dt, sizeof(dt), -1);
	usleep(1200000);                                      /* past the TTL and the purge period */
	ck_assert_int_eq(grant(side, getuid(), 42, &c3), 0); /* a grant purges expired records */
	for (uint32_t p = 1; p < 1 + SLOTS + 3; p++) {        /* now let the request run */
		uint32_t s = p % SLOTS, g = p / SLOTS + 1;

		ck_assert_uint_eq(wait_seq(&r, s, g), g);
		check_bytes(r.data + (size_t)s * SLOT_SIZE, (int64_t)(p - 1) * SLOT_SIZE, SLOT_SIZE);
		__atomic_store_n(&r.ring->ctl[s].rel, g, __ATOMIC_RELEASE);
	}
	ck_assert_int_eq(raw_recv(r.sock, d, sizeof(db), 5000, &err), OBJFS_MSG_DONE);
	ck_assert_uint_eq(d->req_id, 5);
	ck_assert_uint_eq(d->count, 0);
	raw_free(&r);
	wait_sessions(0, 5);
}
END_TEST

/* A fork()ed child (a DataLoader worker) makes its own session; the parent's goes on. */
START_TEST(test_fork_child)
{
	struct objfs_gpu *h;
	char b[100];
	ssize_t n;
	int status;
	pid_t pid;

	/* valgrind checks the child too: the parent's handle it inherits and
	 * must not touch would be reported lost when the child exits */
	if (RUNNING_ON_VALGRIND)
		return;
	h = open_ino(42);

	ck_assert_int_eq(objfs_gpu_read(h, b, sizeof(b), 10, &n), 0);
	/* no fetch thread may be starting or ending at the fork: GCC 12's
	 * AddressSanitizer does not take its thread registry lock across
	 * fork(), so a child forked while another thread is being created or
	 * torn down hangs in its own first pthread_create (seen in CI; a
	 * stand-alone reproducer hangs 40 of 300 forks). The 100 ms let the
	 * last fetch thread finish exiting after its counter drops. */
	for (int i = 0; i < 500 && atomic_load(&jobs_live); i++)
		usleep(10000);
	ck_assert_int_eq(atomic_load(&jobs_live), 0);
	usleep(100000);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct objfs_gpu *c;

		/* the server's threads are the parent's: this is a client only */
		if (objfs_gpu_open_cap(&cap, &c))
			_exit(1);
		if (objfs_gpu_read(c, b, sizeof(b), 777, &n) || n != (ssize_t)sizeof(b))
			_exit(2);
		for (size_t i = 0; i < sizeof(b); i++)
			if ((unsigned char)b[i] != byte_at(777 + (int64_t)i))
				_exit(3);
		objfs_gpu_close(c);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "the child: exit %d (1 open, 2 read, 3 bytes)", WEXITSTATUS(status));
	ck_assert_uint_eq(stats().sessions_total, 2); /* the child's was a session of its own */
	ck_assert_int_eq(objfs_gpu_read(h, b, sizeof(b), 55, &n), 0);
	check_bytes(b, 55, sizeof(b));
	objfs_gpu_close(h);
	wait_sessions(0, 5);
}
END_TEST

/* ATTACHes whose answers are never read: the session ends, nothing blocks. */
START_TEST(test_attach_unread)
{
	struct objfs_msg_attach m = { 0 };
	struct raw r;
	double t0 = now();
	int sent = 0, err = 0;

	raw_ring(&r, SLOTS, SLOT_SIZE);
	ck_assert_int_eq(raw_hello(&r, cap.token, 42), 0);
	objfs_msg_init(&m.h, OBJFS_MSG_ATTACH, sizeof(m));
	m.ino = 42; /* a zero token: refused, answered each time */
	while (now() - t0 < 10) {
		ssize_t k = send(r.sock, &m, sizeof(m), MSG_NOSIGNAL | MSG_DONTWAIT);

		if (k < 0 && errno == EAGAIN) {
			struct pollfd p = { r.sock, POLLRDHUP, 0 };

			if (poll(&p, 1, 0) == 1 && (p.revents & POLLRDHUP))
				break; /* the daemon ended the session: its EOF waits behind the answers */
			usleep(1000);
			continue;
		}
		if (k < 0)
			break;
		sent++;
	}
	ck_assert_int_gt(sent, OBJFS_ATTACH_PIPELINE);
	ck_assert_msg(now() - t0 < 10, "the session did not end (%d ATTACHes sent)", sent);
	(void)err;
	raw_free(&r);
	wait_sessions(0, 5);
	assert_healthy();
}
END_TEST

/*
 * Shared session refcounting: handles of one mount share one session and
 * ring, closing all but one keeps it, closing the last ends it, the next
 * open makes a new one; a session whose daemon ended it is replaced.
 */
START_TEST(test_shared_session)
{
	struct objfs_gpu *h[3];
	uint64_t ring;
	char b[64];
	ssize_t n;

	for (int i = 0; i < 3; i++)
		h[i] = open_ino(i == 1 ? 43 : 42);
	ck_assert_uint_eq(stats().sessions_open, 1);
	ring = stats().ring_bytes;
	ck_assert_uint_eq(ring, objfs_ring_bytes(SLOTS, SLOT_SIZE));
	objfs_gpu_close(h[0]);
	objfs_gpu_close(h[2]);
	ck_assert_int_eq(objfs_gpu_read(h[1], b, sizeof(b), 64, &n), 0);
	check_bytes(b, 64, sizeof(b));
	ck_assert_uint_eq(stats().sessions_open, 1);
	objfs_gpu_close(h[1]);
	wait_sessions(0, 5);
	h[0] = open_ino(42);
	ck_assert_uint_eq(stats().sessions_total, 2);
	ck_assert_int_eq(objfs_gpu_read(h[0], b, sizeof(b), 0, &n), 0);
	objfs_gpu_close(h[0]);
	wait_sessions(0, 5);
}
END_TEST

/*
 * 10,000 handles in one process: one session, the ring's bytes pinned
 * once, every handle readable in one batch. Times are printed, not
 * asserted (the target, <= 50 us per open after the first, is checked
 * through a mount by tests/gpu/gpu_batch.cu).
 */
START_TEST(test_many_handles)
{
	enum { N = 10000 };
	struct objfs_side_cfg cfg = {
		.ring_slots = SLOTS, .ring_slot_size = SLOT_SIZE, .max_sessions = 8,
		.uid_sessions = 8, .max_caps = 2 * N + 16, .uid_caps = 2 * N + 16, .cap_ttl = 60,
		.only_uid = -1,
	};
	struct objfs_side_cap *c = calloc(N, sizeof(*c));
	struct objfs_gpu **h = calloc(N, sizeof(*h));
	struct objfs_gpu_iov *v = calloc(N, sizeof(*v));
	unsigned char *b = malloc(N);
	double t0, t1;

	objfs_side_free(side);
	side = server_cfg(&cfg);
	t0 = now();
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(grant(side, getuid(), 42, &c[i]), 0);
	t1 = now();
	ck_assert_int_eq(objfs_gpu_open_cap(&c[0], &h[0]), 0);
	for (int i = 1; i < N; i++)
		ck_assert_int_eq(objfs_gpu_open_cap(&c[i], &h[i]), 0);
	fprintf(stderr, "check_side: %d grants %.1f us each; %d attaches %.1f us each\n", N,
		(t1 - t0) * 1e6 / N, N - 1, (now() - t1) * 1e6 / N);
	ck_assert_uint_eq(stats().sessions_open, 1);
	ck_assert_uint_eq(stats().ring_bytes, objfs_ring_bytes(SLOTS, SLOT_SIZE));
	for (int i = 0; i < N; i++)
		v[i] = (struct objfs_gpu_iov){ h[i], b + i, 1, (off_t)i * 311, 0 };
	ck_assert_int_eq(objfs_gpu_readv(v, N), 0);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(v[i].nread, 1);
		ck_assert_uint_eq(b[i], byte_at((int64_t)i * 311));
	}
	for (int i = N - 1; i >= 0; i--)
		objfs_gpu_close(h[i]);
	wait_sessions(0, 5);
	free(c);
	free(h);
	free(v);
	free(b);
}
END_TEST

/* The daemon goes away with a batch in flight: every entry -EIO, no hang. */
struct bgv {
	struct objfs_gpu_iov *v;
	int n, rc;
	double t_end;
};

static void *bg_readv(void *a)
{
	struct bgv *b = a;

	b->rc = objfs_gpu_readv(b->v, b->n);
	b->t_end = now();
	return NULL;
}

START_TEST(test_batch_daemon_dies)
{
	enum { N = 64 };
	struct objfs_gpu *h = open_ino(42);
	char *buf = malloc((size_t)N * 5000);
	struct objfs_gpu_iov v[N];
	struct bgv b = { v, N, 1, 0 };
	pthread_t t;
	double t_kill;

	for (int i = 0; i < N; i++) /* 13 entries a slot, the ring wraps */
		v[i] = (struct objfs_gpu_iov){ h, buf + i * 5000, 5000, (off_t)i * 40000, 0 };
	atomic_store(&fetch_delay_ms, 400);
	pthread_create(&t, NULL, bg_readv, &b);
	usleep(100000);
	t_kill = now();
	objfs_side_free(side);
	side = NULL;
	pthread_join(t, NULL);
	ck_assert_int_eq(b.rc, 0);
	for (int i = 0; i < N; i++)
		ck_assert_msg(v[i].nread == -EIO, "entry %d: %zd", i, v[i].nread);
	ck_assert_msg(b.t_end - t_kill < 3.0, "the batch took %.2f s to fail", b.t_end - t_kill);
	ck_assert_int_eq(objfs_gpu_readv(v, 1), -EIO); /* the session is dead */
	objfs_gpu_close(h);
	free(buf);
	side = server_new(8, 64); /* for teardown */
}
END_TEST

static Suite *side_suite(void)
{
	Suite *s = suite_create("side");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cap_fields);
	tcase_add_test(tc, test_pack);
	tcase_add_test(tc, test_batch_order);
	tcase_add_test(tc, test_batch_partial_failure);
	tcase_add_test(tc, test_batch_coalesce);
	tcase_add_test(tc, test_batch_dense_blocks);
	tcase_add_test(tc, test_batch_dense_overlaps);
	tcase_add_test(tc, test_batch_limits);
	tcase_add_test(tc, test_batch_runs_bounded);
	tcase_add_loop_test(tc, test_batch_hostile, 0, sizeof(bad_batch) / sizeof(bad_batch[0]));
	tcase_add_test(tc, test_attach_bound);
	tcase_add_test(tc, test_attach_unread);
	tcase_add_test(tc, test_detach_queued);
	tcase_add_test(tc, test_fork_child);
	tcase_add_test(tc, test_shared_session);
	tcase_add_test(tc, test_many_handles);
	tcase_add_test(tc, test_batch_daemon_dies);
	tcase_add_test(tc, test_client_reads);
	tcase_add_test(tc, test_client_threads);
	tcase_add_test(tc, test_ring_sequence);
	tcase_add_test(tc, test_fill_error);
	tcase_add_test(tc, test_wrong_uid);
	tcase_add_test(tc, test_wrong_inode);
	tcase_add_loop_test(tc, test_malformed, 0, sizeof(bad) / sizeof(bad[0]));
	tcase_add_test(tc, test_peer_vanishes);
	tcase_add_loop_test(tc, test_ring_ends_with_client, 0,
			    sizeof(ring_ends) / sizeof(ring_ends[0]));
	tcase_add_test(tc, test_dead_client_cancelled);
	tcase_add_test(tc, test_fill_turns);
	tcase_add_test(tc, test_client_killed);
	tcase_add_test(tc, test_daemon_dies);
	tcase_add_test(tc, test_limits);
	tcase_add_test(tc, test_uid_shares);
	tcase_add_test(tc, test_ring_budget);
	tcase_add_test(tc, test_only_uid);
	tcase_add_test(tc, test_unread_dones);
	tcase_add_test(tc, test_late_reader);
	tcase_add_test(tc, test_sigbus_guard);
	tcase_add_test(tc, test_accept_emfile);
	tcase_add_test(tc, test_strerror);
	suite_add_tcase(s, tc);
	tc = tcase_create("proto");
	tcase_set_timeout(tc, 30);
	tcase_add_loop_test(tc, test_futex_timeout, 0,
			    sizeof(futex_timeouts_ns) / sizeof(futex_timeouts_ns[0]));
	tcase_add_test(tc, test_futex_wake);
	tcase_add_test(tc, test_ring_poison);
	tcase_add_test(tc, test_piece_numbers);
	tcase_add_test(tc, test_sock_addr);
	tcase_add_loop_test(tc, test_msg_check, 0, sizeof(msg_cases) / sizeof(msg_cases[0]));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(side_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
