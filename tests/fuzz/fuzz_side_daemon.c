/*
 * fuzz_side_daemon: the GPU side API daemon (src/side/side.c) against a hostile
 * client, through its real socket.
 *
 * A real side server runs on a real block cache whose fetcher is fake (each
 * byte a function of its offset; one 64 KiB block always fails). For every
 * input the fuzzer connects as a client and plays a script decoded from the
 * input: a valid HELLO (the daemon answers with its ring, protocol version
 * 3), or none; then records
 *   [kind][len][len bytes]
 * where kind & 7 is
 *   0 raw bytes as a message (the fuzzer builds the header itself)
 *   1 FILL of one entry of handle 0 (the HELLO's capability): first piece,
 *     offset, length from the bytes
 *   2 HELLO (again) with token, inode, geometry and ring size from the bytes
 *   3 FILL naming a handle the session does not have (1..4)
 *   4 raw bytes behind a well-formed header of type bytes[0] % 9 (ATTACH,
 *     DETACH and multi-entry FILLs with any body among them)
 *   5 an oversized message
 *   6 a lying release word (rel) written into the ring
 *   7 consume for a while (let the daemon run)
 * and kind & 8 attaches a descriptor, which the daemon's socket refuses
 * (SO_PASSRIGHTS, Linux >= 6.16: sendmsg fails with EPERM and the message
 * is not sent, so the model does not count it) or the daemon must (the
 * message refused). The client then
 * consumes what was published and closes.
 *
 * The daemon must: answer only well-formed HELLO_OK / DONE / ERR /
 * ATTACH_OK messages, HELLO_OK with its ring (a memfd sealed against
 * shrinking and growing, of the ring's size, its header written) and no
 * other message with a descriptor; send DONEs in request order for FILLs it was sent,
 * with the request's byte count when they succeed and the entry listed as
 * failed when its range covers the failing block (protocol version 2: a
 * failed fetch fails its entry, the ring is not poisoned); publish exactly
 * the bytes asked for, piece by piece (a piece below err_piece is intact
 * even in a poisoned ring; a failed entry's bytes are not checked); and end
 * the session within seconds once the client has gone, whatever came
 * before. Once the script has lied about a release the ring's data is the
 * client's own problem and is no longer checked. A session the daemon
 * ended (a protocol error of the script's, an oversized message, a
 * descriptor) keeps its ring's pages until the client hangs up, so every
 * piece published before the end is checked when it is consumed (the seed
 * refused-fill-after-publish).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "fuzz.h"
#include "log.h"
#include "side.h"
#include "objfs/side_proto.h"
#include "clock.h"

#define SLOTS     2
#define SLOT_SIZE (64u << 10)
#define FILE_SIZE ((int64_t)(1u << 20) + 12345)
#define FAIL_BLOCK 9 /* fetches of this 64 KiB block fail */
#define MAX_FILLS 256

static struct objfs_cache *cache;
static struct objfs_side *side;
static struct objfs_side_cap cap, other;

static void fake_fetch(void *ctx, int64_t off, size_t len, char *dst, objfs_fetch_done_fn done,
		       void *arg)
{
	(void)ctx;
	if (off / SLOT_SIZE <= FAIL_BLOCK && (off + (int64_t)len - 1) / SLOT_SIZE >= FAIL_BLOCK) {
		done(arg, -EIO);
		return;
	}
	for (size_t i = 0; i < len; i++)
		dst[i] = (char)fuzz_byte_at(off + (int64_t)i);
	done(arg, 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct objfs_side_cfg cfg = {
		.ring_slots = SLOTS, .ring_slot_size = SLOT_SIZE, .max_sessions = 4,
		.max_caps = 16, .cap_ttl = 86400, .fill_threads = 2,
	};
	struct objfs_side_obj o = { .ino = 42, .generation = 1 };
	struct objfs_object *other_obj;

	(void)argc;
	(void)argv;
	objfs_log_set_level(OBJFS_LOG_DEBUG);
	if (objfs_cache_new(8u << 20, SLOT_SIZE, &cache) || objfs_side_new(&cfg, cache, &side) ||
	    objfs_object_new(NULL, "dir/file", "\"e1\"", -1, FILE_SIZE, fake_fetch, NULL, &o.obj) ||
	    objfs_object_new(NULL, "dir/other", "\"e1\"", -1, FILE_SIZE, fake_fetch, NULL,
			     &other_obj) ||
	    objfs_side_grant(side, getuid(), &o, &cap))
		abort();
	o.ino = 43;
	o.obj = other_obj;
	if (objfs_side_grant(side, getuid(), &o, &other))
		abort();
	return 0;
}

/* ---------------------------------------------------------------- client */

struct fill {
	uint64_t req_id, first, pieces, len;
	int64_t off;
	int fails;           /* covers FAIL_BLOCK: its entry fails */
};

struct client {
	int sock, spare;     /* spare: a descriptor to attach (/dev/null) */
	int hellos;          /* HELLOs sent */
	int odd;             /* the first asked for another geometry: its ring is
				not modelled (taken, not consumed or checked) */
	struct objfs_ring_hdr *ring;
	size_t ring_bytes;
	char *data;
	int consume, verify, eof;
	int raw;             /* a raw message went out: it may have been a valid FILL
			      * (version 2 FILLs name a handle, not a token), so
			      * requests and bytes are no longer modelled */
	int partial;         /* a FILL of an unfinished request went out */
	struct fill fills[MAX_FILLS];
	size_t nfills, ndone;
	uint64_t next_first; /* first piece of the next FILL, if all are accepted */
	uint64_t cons_piece; /* next piece to consume */
};

static int sock_connect(const char *name)
{
	struct sockaddr_un sa;
	socklen_t salen;

	if (objfs_sock_addr(name, &sa, &salen))
		abort();
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, salen))
		abort();
	return fd;
}

/* Sends; 0, or -1 once the daemon has closed (the script then stops). */
static int send_fd(struct client *c, const void *m, size_t len, int fd)
{
	union objfs_fd_cmsg cbuf;
	struct iovec iov = { (void *)m, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (fd >= 0)
		objfs_msg_attach_fd(&mh, &cbuf, fd);
	for (int tries = 0; tries < 100; tries++) {
		if (sendmsg(c->sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) >= 0)
			return 0;
		if (errno == EPERM && fd >= 0)
			return 1; /* the socket refuses descriptors: nothing was sent */
		if (errno != EAGAIN)
			return -1;
		usleep(1000);
	}
	return -1;
}

/* The FILL that piece @p belongs to if every FILL so far was accepted. */
static const struct fill *fill_of(const struct client *c, uint64_t p)
{
	uint64_t first = 0;

	for (size_t i = 0; i < c->nfills; i++) {
		const struct fill *f = &c->fills[i];

		if (f->first != first)
			return NULL; /* the daemon must have refused this one */
		if (p < first + f->pieces)
			return f;
		first += f->pieces;
	}
	return NULL;
}

static void check_piece(const struct client *c, uint64_t p, uint32_t slot)
{
	const struct fill *f = fill_of(c, p);
	uint64_t k, plen;
	int64_t poff;
	const unsigned char *d = (const unsigned char *)c->data + (size_t)slot * SLOT_SIZE;

	FUZZ_CHECK(f, "piece %llu published, but no accepted FILL covers it",
		   (unsigned long long)p);
	if (f->fails)
		return; /* a failed entry's bytes are undefined */
	k = p - f->first;
	poff = f->off + (int64_t)(k * SLOT_SIZE);
	plen = f->len - k * SLOT_SIZE < SLOT_SIZE ? f->len - k * SLOT_SIZE : SLOT_SIZE;
	FUZZ_CHECK(__atomic_load_n(&c->ring->ctl[slot].len, __ATOMIC_RELAXED) == plen,
		   "piece %llu: len %u, want %llu", (unsigned long long)p,
		   c->ring->ctl[slot].len, (unsigned long long)plen);
	for (uint64_t i = 0; i < plen; i++)
		FUZZ_CHECK(d[i] == fuzz_byte_at(poff + (int64_t)i), "piece %llu: byte %llu wrong",
			   (unsigned long long)p, (unsigned long long)i);
}

static void ring_take(struct client *c, int fd);

/* Reads and checks what the daemon sent. Returns 1 when something came. */
static int drain(struct client *c)
{
	char buf[OBJFS_MSG_MAX * 2] __attribute__((aligned(8)));
	const struct objfs_msg_hdr *h = (const void *)buf;
	int got = 0;

	while (!c->eof) {
		union objfs_fd_cmsg cbuf;
		struct iovec iov = { buf, sizeof(buf) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.b,
				     .msg_controllen = sizeof(cbuf.b) };
		struct cmsghdr *cm;
		int fd = -1;
		ssize_t n = recvmsg(c->sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0) {
			c->eof = 1;
			break;
		}
		for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
			if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
				memcpy(&fd, CMSG_DATA(cm), sizeof(int));
		FUZZ_CHECK(!(mh.msg_flags & MSG_CTRUNC), "more than one descriptor from the daemon");
		FUZZ_CHECK(fd < 0 || (n >= (ssize_t)sizeof(*h) && h->type == OBJFS_MSG_HELLO_OK &&
				      !c->ring),
			   "a descriptor with a message other than the first HELLO_OK");
		if (fd >= 0)
			ring_take(c, fd);
		got = 1;
		FUZZ_CHECK((size_t)n >= sizeof(*h) && h->magic == OBJFS_SIDE_MAGIC &&
			   h->version == OBJFS_SIDE_VERSION && h->len == (size_t)n && !h->reserved,
			   "malformed message from the daemon (%zd bytes)", n);
		switch (h->type) {
		case OBJFS_MSG_HELLO_OK:
			FUZZ_CHECK((size_t)n == sizeof(struct objfs_msg_hello_ok), "HELLO_OK size");
			break;
		case OBJFS_MSG_ERR: {
			const struct objfs_msg_err *e = (const void *)buf;

			FUZZ_CHECK((size_t)n == sizeof(*e) && e->err > 0 && e->err < 4096,
				   "ERR size %zd err %d", n, e->err);
			break;
		}
		case OBJFS_MSG_ATTACH_OK: {
			const struct objfs_msg_attach_ok *a = (const void *)buf;

			FUZZ_CHECK((size_t)n == sizeof(*a) && a->err >= 0 && a->err < 4096,
				   "ATTACH_OK size %zd err %d", n, a->err);
			break;
		}
		case OBJFS_MSG_DONE: {
			const struct objfs_msg_done *d = (const void *)buf;
			const struct fill *f;

			FUZZ_CHECK((size_t)n == objfs_msg_size(OBJFS_MSG_DONE, d->count),
				   "DONE size %zd count %u", n, d->count);
			if (c->raw)
				break;
			FUZZ_CHECK(d->count <= 1 && !d->more, "DONE count %u more %u", d->count,
				   d->more);
			FUZZ_CHECK(c->ndone < c->nfills, "DONE %llu without a FILL",
				   (unsigned long long)d->req_id);
			f = &c->fills[c->ndone++];
			FUZZ_CHECK(d->req_id == f->req_id, "DONE for request %llu, want %llu",
				   (unsigned long long)d->req_id, (unsigned long long)f->req_id);
			FUZZ_CHECK(d->err >= 0 && d->err < 4096, "DONE err %d", d->err);
			FUZZ_CHECK(d->err || d->count == (uint32_t)f->fails,
				   "DONE lists %u failures, want %d", d->count, f->fails);
			FUZZ_CHECK(d->err || d->count || d->bytes == f->len,
				   "DONE bytes %llu, want %llu", (unsigned long long)d->bytes,
				   (unsigned long long)f->len);
			break;
		}
		default:
			FUZZ_CHECK(0, "message of type %u from the daemon", h->type);
		}
	}
	return got;
}

/* Consumes published pieces in order, like libobjfs's CPU path. 1 on progress. */
static int consume_ready(struct client *c)
{
	int progress = 0;

	while (c->ring && c->consume) {
		uint64_t p = c->cons_piece;
		uint32_t slot = (uint32_t)(p % SLOTS), g = (uint32_t)(p / SLOTS + 1);
		uint32_t v = __atomic_load_n(&c->ring->ctl[slot].seq, __ATOMIC_ACQUIRE);

		if (v == OBJFS_SEQ_ERROR) {
			uint64_t ep = __atomic_load_n(&c->ring->err_piece, __ATOMIC_SEQ_CST);

			FUZZ_CHECK(ep != UINT64_MAX, "poisoned ring without err_piece");
			if (p >= ep || !fill_of(c, p))
				break; /* nothing valid from here on */
		} else if (v < g) {
			break;
		} else {
			/* after a lying release the daemon may legitimately be ahead */
			FUZZ_CHECK(v == g || !c->verify, "slot %u at gen %u, want %u", slot, v, g);
		}
		if (c->verify)
			check_piece(c, p, slot);
		__atomic_store_n(&c->ring->ctl[slot].rel, g, __ATOMIC_RELEASE);
		objfs_futex_wake_all(&c->ring->ctl[slot].rel);
		c->cons_piece++;
		progress = 1;
	}
	return progress;
}

/*
 * Lets the daemon run for up to @ms, consuming and reading its answers;
 * stops early after @idle_ms without anything happening.
 */
static void pump(struct client *c, double ms, double idle_ms)
{
	double t = objfs_now_s(), end = t + ms / 1000, last = t;

	do {
		int a = drain(c), b = consume_ready(c);

		if (c->eof && !b)
			break;
		t = objfs_now_s();
		if (a || b)
			last = t;
		else if (t - last > idle_ms / 1000)
			break;
		else
			usleep(100);
	} while (t < end);
}

/* The ring HELLO_OK handed over (@fd, closed here): what side_proto.h says
 * the daemon makes. */
static void ring_take(struct client *c, int fd)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);

	if (c->odd) { /* a ring of the geometry asked for: not modelled */
		FUZZ_CHECK(seals >= 0 && (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) ==
					 (F_SEAL_SHRINK | F_SEAL_GROW), "the daemon's ring: seals");
		close(fd);
		c->consume = 0;
		c->verify = 0;
		return;
	}
	c->ring_bytes = objfs_ring_bytes(SLOTS, SLOT_SIZE);
	FUZZ_CHECK(seals >= 0 && (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) ==
				 (F_SEAL_SHRINK | F_SEAL_GROW) && fstat(fd, &st) == 0 &&
		   (uint64_t)st.st_size == c->ring_bytes, "the daemon's ring: seals or size");
	c->ring = mmap(NULL, c->ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (c->ring == MAP_FAILED)
		abort();
	FUZZ_CHECK(c->ring->magic == OBJFS_SIDE_MAGIC && c->ring->slots == SLOTS &&
		   c->ring->slot_size == SLOT_SIZE && c->ring->err_piece == UINT64_MAX,
		   "the daemon's ring header");
	c->data = (char *)c->ring + objfs_ring_hdr_size(SLOTS);
}

static void hello(struct objfs_msg_hello *m, const uint8_t *token, uint64_t ino)
{
	memset(m, 0, sizeof(*m));
	objfs_msg_init(&m->h, OBJFS_MSG_HELLO, sizeof(*m));
	memcpy(m->token, token, OBJFS_TOKEN_LEN);
	m->ino = ino;
	m->slots = SLOTS;
	m->slot_size = SLOT_SIZE;
	m->ring_bytes = objfs_ring_bytes(SLOTS, SLOT_SIZE);
}

/* One FILL record: returns -1 when the script must stop. */
static int do_fill(struct client *c, const uint8_t *p, size_t n, int other_cap, int fd)
{
	uint8_t b[26] = { 0 };
	char mb[OBJFS_MSG_MAX] __attribute__((aligned(8)));
	struct objfs_msg_fill *m = (struct objfs_msg_fill *)mb;
	size_t len = objfs_msg_size(OBJFS_MSG_FILL, 1);
	struct fill f;
	int rc;

	memcpy(b, p, n < sizeof(b) ? n : sizeof(b));
	f.first = c->next_first + ((b[0] & 1) ? (uint64_t)(int64_t)(int8_t)b[1] : 0);
	if (b[0] & 2)
		f.off = (int64_t)fuzz_le(b + 2, 8);
	else
		f.off = (int64_t)(fuzz_le(b + 2, 4) % (FILE_SIZE + 2));
	if (b[0] & 4)
		f.len = fuzz_le(b + 10, 8);
	else
		f.len = fuzz_le(b + 10, 4) % (uint64_t)(f.off >= 0 && f.off <= FILE_SIZE ?
						   FILE_SIZE - f.off + 2 : 1000);
	f.req_id = (b[0] & 8) ? fuzz_le(b + 18, 8) : c->nfills + 1000;
	f.pieces = f.len / SLOT_SIZE + (f.len % SLOT_SIZE != 0);
	f.fails = f.off >= 0 && f.off < (int64_t)(FAIL_BLOCK + 1) * (64 << 10) &&
		  f.len <= (uint64_t)FILE_SIZE &&
		  (uint64_t)f.off + f.len > (uint64_t)FAIL_BLOCK * (64 << 10);
	memset(mb, 0, len);
	objfs_msg_init(&m->h, OBJFS_MSG_FILL, (uint32_t)len);
	m->req_id = f.req_id;
	m->first_piece = f.first;
	m->nent = 1;
	m->count = 1;
	m->ent[0] = (struct objfs_fill_ent){ other_cap ? 1 + b[0] % 4 : 0, 0, f.off, f.len };
	if (!other_cap && !(b[0] & 16) && c->nfills == MAX_FILLS)
		return -1; /* the model is full: stop here */
	if (!other_cap && (b[0] & 16))
		m->nent = 2; /* an unfinished request: the next FILL breaks the sequence */
	rc = send_fd(c, m, len, fd);
	if (rc) /* not sent (a refused descriptor) or an error: the model stays */
		return rc > 0 ? 0 : -1;
	if (!other_cap && !(b[0] & 16)) {
		c->fills[c->nfills++] = f;
		c->next_first = f.first + f.pieces;
	} else if (!other_cap) {
		c->partial = 1;
	}
	return 0;
}

static int do_hello(struct client *c, const uint8_t *p, size_t n, int fd)
{
	uint8_t b[17] = { 0 };
	struct objfs_msg_hello m;

	int rc;

	memcpy(b, p, n < sizeof(b) ? n : sizeof(b));
	hello(&m, (b[0] & 1) ? other.token : cap.token, (b[0] & 2) ? 43 : 42);
	if (b[0] & 4)
		m.slots = (uint32_t)fuzz_le(b + 1, 4);
	if (b[0] & 8)
		m.slot_size = (uint32_t)fuzz_le(b + 5, 4);
	if (b[0] & 16)
		m.ring_bytes = fuzz_le(b + 9, 8);
	rc = send_fd(c, &m, sizeof(m), fd);
	if (rc) /* not sent (a refused descriptor) or an error */
		return rc > 0 ? 0 : -1;
	if (!c->hellos++ && (b[0] & (4 | 8 | 16)))
		c->odd = 1;
	return 0;
}

static int do_raw(struct client *c, const uint8_t *p, size_t n, int framed, int fd)
{
	char buf[OBJFS_MSG_MAX + sizeof(struct objfs_msg_hdr)] __attribute__((aligned(8)));
	size_t len = n;

	c->raw = 1;
	c->verify = 0;
	memset(buf, 0, sizeof(buf));
	if (framed) {
		struct objfs_msg_hdr *h = (struct objfs_msg_hdr *)buf;

		len = sizeof(*h) + (n ? n - 1 : 0);
		objfs_msg_init(h, (enum objfs_msg_type)(n ? p[0] % 9 : 0), (uint32_t)len);
		if (n > 1)
			memcpy(buf + sizeof(*h), p + 1, n - 1);
	} else {
		memcpy(buf, p, n);
	}
	return send_fd(c, buf, len, fd) < 0 ? -1 : 0;
}

static void wait_sessions_closed(void)
{
	struct objfs_side_stats st;
	double t0 = objfs_now_s();

	for (;;) {
		objfs_side_get_stats(side, &st);
		if (st.sessions_open == 0)
			return;
		FUZZ_CHECK(objfs_now_s() - t0 < 10, "a session outlived its client by 10 s");
		usleep(100);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct client c;
	uint8_t flags = size ? data[0] : 0;
	size_t pos = 1;

	if (size > 4096)
		return 0;
	memset(&c, 0, sizeof(c));
	c.consume = flags & 2;
	c.verify = 1;
	c.spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (c.spare < 0)
		abort();
	c.sock = sock_connect(cap.sock);
	if (flags & 1) {
		struct objfs_msg_hello m;

		int rc;

		hello(&m, cap.token, 42);
		rc = send_fd(&c, &m, sizeof(m), (flags & 4) ? c.spare : -1);
		if (rc < 0)
			goto out;
		c.hellos += rc == 0; /* 1: refused with its descriptor, not sent */
	}
	while (pos + 2 <= size) {
		uint8_t kind = data[pos], n = data[pos + 1];
		const uint8_t *p = data + pos + 2;
		int fd = (kind & 8) ? c.spare : -1, rc = 0;

		if (n > size - pos - 2)
			n = (uint8_t)(size - pos - 2);
		pos += 2 + (size_t)n;
		switch (kind & 7) {
		case 0: rc = do_raw(&c, p, n, 0, fd); break;
		case 1: rc = do_fill(&c, p, n, 0, fd); break;
		case 2: rc = do_hello(&c, p, n, fd); break;
		case 3: rc = do_fill(&c, p, n, 1, fd); break;
		case 4: rc = do_raw(&c, p, n, 1, fd); break;
		case 5: {
			char big[OBJFS_MSG_MAX * 2];

			for (size_t i = 0; i < sizeof(big); i++)
				big[i] = n ? (char)p[i % n] : 0;
			rc = send_fd(&c, big, sizeof(big), fd) < 0 ? -1 : 0;
			break;
		}
		case 6:
			if (n >= 5 && c.ring) {
				uint32_t *rel = &c.ring->ctl[p[0] % SLOTS].rel;
				uint32_t lie = (uint32_t)fuzz_le(p + 1, 4);

				__atomic_store_n(rel, lie, __ATOMIC_SEQ_CST);
				c.verify = 0; /* now the daemon may overwrite our data */
			}
			break;
		case 7: pump(&c, n % 20, n % 20); break;
		}
		if (rc)
			break;
	}
	pump(&c, 100, 5);
out:
	close(c.sock);
	wait_sessions_closed();
	if (c.ring)
		munmap(c.ring, c.ring_bytes);
	close(c.spare);
	return 0;
}
