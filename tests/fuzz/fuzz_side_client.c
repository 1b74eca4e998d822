/*
 * fuzz_side_client: libobjfs (lib/client.c, lib/client_cuda.c) against a hostile or
 * broken daemon, through a real socket and a real shared ring.
 *
 * For every input a fake daemon thread listens on an abstract socket; the
 * client opens a session from a capability (objfs_gpu_open_cap, as after
 * the ioctl) and reads into host memory with objfs_gpu_read (a batch of
 * one entry, protocol version 3; the fake daemon makes the ring and sends
 * it with HELLO_OK, and sends the request's DONE once it published its
 * last piece, as side.c does). The input is
 *   [flags][cap bytes: 16][read: off 4, len 4][hello mode][records...]
 * flags & 1 takes the capability's geometry, size and version from the cap
 * bytes instead of a valid default; the hello mode answers HELLO with
 * HELLO_OK and the ring, ERR, garbage, a hang-up, HELLO_OK without a ring,
 * with an unsealed ring, with a ring of the wrong size, or with two
 * descriptors. Records are [kind][len][len bytes]:
 *   0 raw bytes as a message          1 a well-formed header of type b[0] % 9
 *   2 publish the next piece right    3 publish it with a lying len or seq
 *   4 poison the ring (err_piece, err from the bytes)
 *   5 DONE with an error from the bytes   6 hang up now   7 pause
 * and the daemon hangs up after the last record, as a dying daemon would.
 *
 * libobjfs must: send a well-formed HELLO (its geometry, no descriptor),
 * refuse a ring that is not a sealed memfd of the right size, and send
 * well-formed FILLs with consecutive pieces inside the file; never hang (the daemon's death poisons the ring and releases the
 * reader); return 0 or a plain -errno (-1..-4095) from every call; report
 * the full clamped length on success, and the right bytes when the daemon
 * told no lies.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fuzz.h"
#include "objfs.h"
#include "objfs/side_proto.h"
#include "clock.h"

#define SLOTS     2
#define SLOT_SIZE (64u << 10)
#define FILE_SIZE ((int64_t)(1u << 20) + 12345)
#define READ_MAX  (256u << 10)

int objfs_gpu_open_cap(const struct objfs_side_cap *cap, struct objfs_gpu **h);
static int lfd = -1;
static char sock_name[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct sockaddr_un sa;
	socklen_t salen;

	(void)argc;
	(void)argv;
	snprintf(sock_name, sizeof(sock_name), "@objfs-fuzz-client.%d", (int)getpid());
	if (objfs_sock_addr(sock_name, &sa, &salen))
		abort();
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, salen) || listen(lfd, 4))
		abort();
	return 0;
}

/* ---------------------------------------------------------- fake daemon */

struct daemon {
	const uint8_t *script;
	size_t len;
	int hello_mode;
	int stopfd;
	struct objfs_side_cap cap;
	int lied;              /* out: the data may be wrong, by design */
	/* the session */
	int fd;
	int memfd;             /* the ring this daemon made, until HELLO_OK */
	struct objfs_ring_hdr *ring;
	size_t ring_bytes;
	char *data;
	uint64_t fill_first[64], fill_len[64], fill_req[64];
	int64_t fill_off[64];
	size_t nfills;
	uint64_t pieces;       /* pieces the FILLs so far asked for */
	uint64_t pub;          /* next piece to publish */
};

static void dsend(struct daemon *d, const void *m, size_t n)
{
	(void)send(d->fd, m, n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Waits up to @ms for the client's next message; checks FILLs. 0 on EOF/timeout. */
static int client_msg(struct daemon *d, int ms)
{
	char buf[OBJFS_MSG_MAX * 2] __attribute__((aligned(8)));
	const struct objfs_msg_fill *m = (const void *)buf;
	struct pollfd p = { d->fd, POLLIN, 0 };
	ssize_t n;

	if (poll(&p, 1, ms) <= 0)
		return 0;
	n = recv(d->fd, buf, sizeof(buf), MSG_DONTWAIT);
	if (n <= 0)
		return 0;
	/* objfs_gpu_close detaches its handle, the last one too, then ends the
	 * session: taken as the end */
	if ((size_t)n == sizeof(struct objfs_msg_detach) && m->h.type == OBJFS_MSG_DETACH) {
		const struct objfs_msg_detach *dm = (const void *)buf;

		FUZZ_CHECK(m->h.magic == OBJFS_SIDE_MAGIC && m->h.version == OBJFS_SIDE_VERSION &&
			   objfs_msg_check(buf, (size_t)n) == 0 && dm->handle == 0,
			   "malformed DETACH from libobjfs");
		return 0;
	}
	FUZZ_CHECK((size_t)n >= sizeof(*m) && m->h.magic == OBJFS_SIDE_MAGIC &&
		   m->h.version == OBJFS_SIDE_VERSION && m->h.type == OBJFS_MSG_FILL &&
		   objfs_msg_check(buf, (size_t)n) == 0, "malformed message from libobjfs");
	/* One read: a request of one entry of handle 0, in one message. */
	FUZZ_CHECK(m->nent == 1 && m->first == 0 && m->count == 1 && m->ent[0].handle == 0,
		   "FILL of %u entries (first %u, count %u, handle %u)", m->nent, m->first,
		   m->count, m->ent[0].handle);
	FUZZ_CHECK(m->first_piece == d->pieces, "FILL first piece %llu, want %llu",
		   (unsigned long long)m->first_piece, (unsigned long long)d->pieces);
	FUZZ_CHECK(m->ent[0].len > 0 && m->ent[0].off >= 0 &&
		   m->ent[0].off + (int64_t)m->ent[0].len <= d->cap.size,
		   "FILL %lld+%llu outside the file", (long long)m->ent[0].off,
		   (unsigned long long)m->ent[0].len);
	if (d->nfills < 64) {
		d->fill_first[d->nfills] = m->first_piece;
		d->fill_off[d->nfills] = m->ent[0].off;
		d->fill_len[d->nfills] = m->ent[0].len;
		d->fill_req[d->nfills++] = m->req_id;
	}
	d->pieces += objfs_pieces(m->ent[0].len, d->cap.ring_slot_size);
	return 1;
}

/* Publishes the next piece (waiting a little for a FILL and a free slot). */
static void publish(struct daemon *d, const uint8_t *b, size_t n, int lie)
{
	uint32_t ss = d->cap.ring_slot_size, slots = d->cap.ring_slots;
	uint64_t p = d->pub, k, plen;
	uint32_t slot = (uint32_t)(p % slots), g = (uint32_t)(p / slots + 1), len, prev;
	size_t i;
	double t0 = objfs_now_s();

	while (p >= d->pieces && objfs_now_s() - t0 < 0.05)
		if (!client_msg(d, 10) && objfs_now_s() - t0 >= 0.05)
			return;
	for (i = 0; i < d->nfills; i++)
		if (p >= d->fill_first[i] &&
		    p < d->fill_first[i] + objfs_pieces(d->fill_len[i], ss))
			break;
	if (i == d->nfills)
		return; /* not a piece of a FILL we kept */
	while (__atomic_load_n(&d->ring->ctl[slot].rel, __ATOMIC_ACQUIRE) < g - 1) {
		if (objfs_now_s() - t0 > 0.1)
			return; /* the reader is not there */
		usleep(100);
	}
	k = p - d->fill_first[i];
	plen = d->fill_len[i] - k * ss < ss ? d->fill_len[i] - k * ss : ss;
	for (uint64_t j = 0; j < plen; j++)
		d->data[(size_t)slot * ss + j] =
			(char)fuzz_byte_at(d->fill_off[i] + (int64_t)(k * ss + j));
	len = (uint32_t)plen;
	if (lie && n >= 5) {
		d->lied = 1;
		if (b[0] & 1)
			len = (uint32_t)fuzz_le(b + 1, 4);
		else
			g = (uint32_t)fuzz_le(b + 1, 4);
		if (b[0] & 2)
			d->data[(size_t)slot * ss] ^= 0x55;
	}
	__atomic_store_n(&d->ring->ctl[slot].len, len, __ATOMIC_RELAXED);
	/*
	 * Even a lying daemon keeps OBJFS_SEQ_ERROR sticky, as side_proto.h
	 * asks and side.c does: one that un-poisons a ring after the client's
	 * watchdog gave up on it can strand a CPU reader (it is not watched
	 * any more), and that is outside what libobjfs can defend.
	 */
	prev = __atomic_load_n(&d->ring->ctl[slot].seq, __ATOMIC_ACQUIRE);
	if (prev == OBJFS_SEQ_ERROR ||
	    !__atomic_compare_exchange_n(&d->ring->ctl[slot].seq, &prev, g, 0, __ATOMIC_RELEASE,
					 __ATOMIC_RELAXED))
		return;
	objfs_futex_wake_all(&d->ring->ctl[slot].seq);
	d->pub++;
	if (k + 1 == objfs_pieces(d->fill_len[i], ss)) { /* its last piece: the DONE */
		struct objfs_msg_done m = { 0 };

		objfs_msg_init(&m.h, OBJFS_MSG_DONE, sizeof(m));
		m.req_id = d->fill_req[i];
		m.bytes = d->fill_len[i];
		dsend(d, &m, sizeof(m));
	}
}

/* Poisons the ring as side_proto.h says, with any err_piece and err. */
static void poison(struct daemon *d, uint64_t err_piece, int32_t err)
{
	d->lied = 1;
	__atomic_store_n(&d->ring->err_piece, err_piece, __ATOMIC_SEQ_CST);
	__atomic_store_n(&d->ring->err, err, __ATOMIC_SEQ_CST);
	for (uint32_t s = 0; s < d->cap.ring_slots; s++) {
		__atomic_store_n(&d->ring->ctl[s].seq, OBJFS_SEQ_ERROR, __ATOMIC_SEQ_CST);
		objfs_futex_wake_all(&d->ring->ctl[s].seq);
	}
}

/*
 * Makes a ring of @bytes the way side.c does (@bad 1: unsealed, 2: a page
 * short); maps it into @d. The memfd, or -1.
 */
static int make_ring(struct daemon *d, uint64_t bytes, int bad)
{
	int fd = memfd_create("fuzz-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0 || ftruncate(fd, (off_t)(bad == 2 ? bytes - 4096 : bytes)) ||
	    (bad != 1 && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)))
		abort();
	d->ring_bytes = bad == 2 ? bytes - 4096 : bytes;
	d->ring = mmap(NULL, d->ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (d->ring == MAP_FAILED)
		abort();
	objfs_ring_init(d->ring, d->cap.ring_slots, d->cap.ring_slot_size);
	d->data = (char *)d->ring + objfs_ring_hdr_size(d->cap.ring_slots);
	return fd;
}

/* Sends @m with descriptors @fds (@nfds of them, 0-2). */
static void dsend_fds(struct daemon *d, const void *m, size_t n, const int *fds, int nfds)
{
	union {
		struct cmsghdr align;
		char b[CMSG_SPACE(sizeof(int) * 2)];
	} cbuf;
	struct iovec iov = { (void *)m, n };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *cm;

	if (nfds) {
		memset(&cbuf, 0, sizeof(cbuf));
		mh.msg_control = cbuf.b;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
	}
	(void)sendmsg(d->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Accepts the session and checks the client's HELLO. 0 when it is served. */
static int accept_hello(struct daemon *d)
{
	struct pollfd p[2] = { { lfd, POLLIN, 0 }, { d->stopfd, POLLIN, 0 } };
	union {
		struct cmsghdr align;
		char b[CMSG_SPACE(sizeof(int) * 4)];
	} cbuf;
	struct objfs_msg_hello m;
	struct iovec iov = { &m, sizeof(m) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.b,
			     .msg_controllen = sizeof(cbuf.b) };
	ssize_t n;

	if (poll(p, 2, 5000) <= 0 || !(p[0].revents & POLLIN))
		return -1; /* the client gave up before connecting */
	d->fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (d->fd < 0)
		abort();
	p[0].fd = d->fd;
	if (poll(p, 1, 5000) <= 0)
		return -1;
	n = recvmsg(d->fd, &mh, MSG_CMSG_CLOEXEC);
	if (n == 0)
		return -1; /* it hung up without a word */
	FUZZ_CHECK(n == (ssize_t)sizeof(m) && !CMSG_FIRSTHDR(&mh), "HELLO with a descriptor");
	FUZZ_CHECK(m.h.magic == OBJFS_SIDE_MAGIC && m.h.version == OBJFS_SIDE_VERSION &&
		   m.h.type == OBJFS_MSG_HELLO && m.h.len == sizeof(m) && !m.h.reserved,
		   "malformed HELLO");
	FUZZ_CHECK(memcmp(m.token, d->cap.token, OBJFS_TOKEN_LEN) == 0 && m.ino == d->cap.ino &&
		   m.slots == d->cap.ring_slots && m.slot_size == d->cap.ring_slot_size &&
		   m.ring_bytes == objfs_ring_bytes(m.slots, m.slot_size),
		   "HELLO does not match the capability");
	d->memfd = make_ring(d, m.ring_bytes,
			     d->hello_mode % 8 == 5 ? 1 : d->hello_mode % 8 == 6 ? 2 : 0);
	return 0;
}

static void *daemon_main(void *arg)
{
	struct daemon *d = arg;
	size_t pos = 0;

	d->fd = -1;
	d->memfd = -1;
	if (accept_hello(d))
		goto out;
	switch (d->hello_mode % 8) {
	case 0: case 4: case 5: case 6: case 7: {
		/* 0 the ring; 4 none; 5 unsealed; 6 a page short; 7 two */
		struct objfs_msg_hello_ok ok = { 0 };
		int fds[2] = { d->memfd, d->memfd };
		int k = d->hello_mode % 8;

		objfs_msg_init(&ok.h, OBJFS_MSG_HELLO_OK, sizeof(ok));
		dsend_fds(d, &ok, sizeof(ok), fds, k == 4 ? 0 : k == 7 ? 2 : 1);
		if (k != 0)
			d->lied = 1; /* the client must refuse the session */
		break;
	}
	case 1: {
		struct objfs_msg_err e = { 0 };

		objfs_msg_init(&e.h, OBJFS_MSG_ERR, sizeof(e));
		e.err = (int32_t)(d->hello_mode >> 2) - 8;
		dsend(d, &e, sizeof(e));
		goto out;
	}
	case 2:
		dsend(d, "garbage", 7);
		goto out;
	case 3:
		goto out;
	}
	while (pos + 2 <= d->len) {
		uint8_t kind = d->script[pos], n = d->script[pos + 1];
		const uint8_t *b = d->script + pos + 2;
		char buf[OBJFS_MSG_MAX + 16] __attribute__((aligned(8)));

		if (n > d->len - pos - 2)
			n = (uint8_t)(d->len - pos - 2);
		pos += 2 + (size_t)n;
		memset(buf, 0, sizeof(buf));
		switch (kind & 7) {
		case 0:
			memcpy(buf, b, n);
			dsend(d, buf, n);
			break;
		case 1: {
			struct objfs_msg_hdr *h = (struct objfs_msg_hdr *)buf;
			size_t len = sizeof(*h) + (n ? n - 1u : 0);

			objfs_msg_init(h, (enum objfs_msg_type)(n ? b[0] % 9 : 0), (uint32_t)len);
			if (n > 1)
				memcpy(buf + sizeof(*h), b + 1, n - 1u);
			d->lied = 1; /* a well-formed DONE may end a read early */
			dsend(d, buf, len);
			break;
		}
		case 2: publish(d, b, n, 0); break;
		case 3: publish(d, b, n, 1); break;
		case 4:
			if (n >= 12)
				poison(d, fuzz_le(b, 8), (int32_t)fuzz_le(b + 8, 4));
			break;
		case 5: {
			struct objfs_msg_done m = { 0 };

			objfs_msg_init(&m.h, OBJFS_MSG_DONE, sizeof(m));
			m.req_id = d->nfills ? d->fill_req[0] : 1;
			m.err = n >= 4 ? (int32_t)fuzz_le(b, 4) : EIO;
			m.bytes = n >= 12 ? fuzz_le(b + 4, 8) : 0;
			d->lied = 1;
			dsend(d, &m, sizeof(m));
			break;
		}
		case 6:
			goto out;
		case 7:
			(void)client_msg(d, n % 16);
			break;
		}
	}
out:
	/* the daemon dies: the client's watchdog must release its reader */
	if (d->memfd >= 0)
		close(d->memfd);
	if (d->fd >= 0)
		close(d->fd);
	if (d->ring && d->ring != MAP_FAILED)
		munmap(d->ring, d->ring_bytes);
	return NULL;
}

/* ---------------------------------------------------------- client side */

static void check_err(int rc, const char *what)
{
	FUZZ_CHECK(rc <= 0 && rc > -4096, "%s returned %d", what, rc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t hdr[26] = { 0 };
	struct daemon d;
	struct objfs_gpu *h = NULL;
	pthread_t t;
	uint64_t one = 1;
	char *buf;
	int rc;

	if (size > 4096)
		return 0;
	memcpy(hdr, data, size < sizeof(hdr) ? size : sizeof(hdr));
	memset(&d, 0, sizeof(d));
	d.cap.magic = OBJFS_SIDE_MAGIC;
	d.cap.version = OBJFS_SIDE_VERSION;
	d.cap.struct_size = sizeof(d.cap);
	d.cap.ino = 42;
	d.cap.generation = 1;
	d.cap.size = FILE_SIZE;
	d.cap.ring_slots = SLOTS;
	d.cap.ring_slot_size = SLOT_SIZE;
	for (int i = 0; i < OBJFS_TOKEN_LEN; i++)
		d.cap.token[i] = (uint8_t)(i * 7 + 1);
	snprintf(d.cap.etag, sizeof(d.cap.etag), "\"e1\"");
	snprintf(d.cap.sock, sizeof(d.cap.sock), "%s", sock_name);
	if (hdr[0] & 1) {
		d.cap.ring_slots = (uint32_t)fuzz_le(hdr + 1, 1);
		d.cap.ring_slot_size = (uint32_t)fuzz_le(hdr + 2, 4);
		d.cap.size = (int64_t)fuzz_le(hdr + 6, 8);
		d.cap.version = (uint16_t)fuzz_le(hdr + 14, 2);
		if (hdr[0] & 2)
			memset(d.cap.sock, 'x', sizeof(d.cap.sock)); /* not terminated */
	}
	d.hello_mode = hdr[24];
	d.script = data + (size < sizeof(hdr) ? size : sizeof(hdr));
	d.len = size - (size_t)(d.script - data);
	d.stopfd = eventfd(0, EFD_CLOEXEC);
	if (d.stopfd < 0 || pthread_create(&t, NULL, daemon_main, &d))
		abort();

	rc = objfs_gpu_open_cap(&d.cap, &h);
	check_err(rc, "objfs_gpu_open_cap");
	if (!(hdr[0] & 1) && d.hello_mode % 8 >= 4) /* no ring, or not a ring it may use */
		FUZZ_CHECK(rc < 0, "a session on a broken ring (hello mode %d)", d.hello_mode % 8);
	if (rc == 0) {
		int64_t off = (int64_t)(fuzz_le(hdr + 16, 4) % (uint64_t)(FILE_SIZE + 100));
		size_t len = (size_t)(fuzz_le(hdr + 20, 4) % (READ_MAX + 1));
		int64_t want = off >= d.cap.size ? 0 : (int64_t)len < d.cap.size - off ?
			       (int64_t)len : d.cap.size - off;
		ssize_t nread = -12345;

		buf = malloc(len ? len : 1);
		if (!buf)
			abort();
		rc = objfs_gpu_read(h, buf, len, (off_t)off, &nread);
		check_err(rc, "objfs_gpu_read");
		if (rc == 0)
			FUZZ_CHECK(nread == want, "read %zd bytes, want %lld", nread,
				   (long long)want);
		if (rc == 0 && !__atomic_load_n(&d.lied, __ATOMIC_SEQ_CST))
			for (int64_t i = 0; i < want; i++)
				FUZZ_CHECK((unsigned char)buf[i] == fuzz_byte_at(off + i),
					   "byte %lld of a read at %lld is wrong", (long long)i,
					   (long long)off);
		/* again, on a session that may be dead by now: fail, never hang */
		rc = objfs_gpu_read(h, buf, len, (off_t)off, &nread);
		check_err(rc, "the second objfs_gpu_read");
		free(buf);
		objfs_gpu_close(h);
	}
	(void)!write(d.stopfd, &one, sizeof(one));
	pthread_join(t, NULL);
	close(d.stopfd);
	return 0;
}
