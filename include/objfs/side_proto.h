/*
 * side_proto: the GPU side API's wire protocol and shared ring layout, the
 * contract between the daemon (src/side/) and the client library (lib/).
 * Both sides include this one header, as liburing's library and the kernel
 * share io_uring.h; nothing in it allocates. Besides the layout it holds
 * the few operations on the ring and the messages that both sides perform
 * (geometry check, poisoning, futex waits and wakes, socket address,
 * message check) as static inline functions, so that the two halves cannot
 * drift apart.
 *
 * 1. Capability. The client opens a file through the mount and issues
 *    OBJFS_IOC_GPU_CAP on the fd: a restricted _IOR ioctl (fixed size, far
 *    below FUSE's 16 KiB limit). The daemon answers a struct objfs_side_cap:
 *    inode, generation, pinned size and ETag, the session socket's address
 *    and a 32-byte random token bound to (caller uid, inode, object version).
 *
 * 2. Session. The client connects to the socket (SOCK_SEQPACKET; a name
 *    starting with '@' is in the abstract namespace) and sends HELLO with
 *    the token and the ring geometry. The daemon checks SO_PEERCRED's uid
 *    against the token's uid, then the session and ring bounds of its uid,
 *    makes the bounce ring (a memfd on tmpfs of the geometry's size, its
 *    header written, sealed against shrinking, growing and new seals),
 *    maps it and answers HELLO_OK carrying the memfd (SCM_RIGHTS), or ERR
 *    (EACCES, EINVAL, EBUSY, ENOMEM, EDQUOT). No message to the daemon
 *    carries a descriptor: the daemon's socket refuses them (SO_PASSRIGHTS
 *    0, Linux >= 6.16: the client's sendmsg fails with EPERM), and on
 *    older kernels a message that carries one is refused (EPROTO; since
 *    version 3: a file of the client's own FUSE mount sent in a ring's
 *    place would have the daemon's close() wait for that mount's server,
 *    unkillably, its exit with it). The
 *    client places the ring (NUMA) before it touches a slot. However a
 *    session ends (ERR, then EOF), its ring stays whole and counted in the
 *    uid's budget until the client closes its socket; then the daemon
 *    punches all its pages out: a client closes its socket last, once
 *    nothing of its reads the ring. DONE replies are never awaited by the
 *    daemon: a client must read them (libobjfs's watchdog thread does);
 *    one that lets 1,024 requests' DONEs pile up has its session ended.
 *
 * 3. Ring. [header page(s)][slot 0][slot 1]...[slot k-1]. Each slot has a
 *    control line in the header with two 32-bit words:
 *      seq  written by the daemon: "use number g of this slot holds data"
 *      rel  written by the consumer (GPU stream or client CPU): "use g of
 *           this slot has been copied out; the daemon may refill it".
 *    Pieces are numbered per session from 0 in request order. Piece p uses
 *    slot p % k and is that slot's use g = p / k + 1 (objfs_piece_slot,
 *    objfs_piece_gen). The daemon fills
 *    pieces strictly in order: it waits for rel >= g - 1, copies, stores
 *    len, then publishes seq = g (release). The consumer waits for seq >= g,
 *    copies len bytes, then stores rel = g. Only wrap-around ever waits.
 *    Gens stay below OBJFS_RING_GEN_MAX so that cuStreamWaitValue32's
 *    cyclic ">=" ((int32_t)(seq - g) >= 0) agrees with plain ">=", and
 *    OBJFS_SEQ_ERROR compares ">=" every gen: writing it into every seq word
 *    releases every waiter, on the GPU and on the CPU.
 *
 * 4. Errors. Whoever poisons a ring (the daemon when a fill fails, the
 *    client's watchdog when the daemon's socket dies) first stores the
 *    errno in hdr.err and the number of the first piece that did NOT get
 *    valid data in hdr.err_piece, then writes OBJFS_SEQ_ERROR into every
 *    seq word (objfs_ring_poison). Pieces below err_piece were published
 *    before and their data is intact; a request is good exactly when its
 *    last piece is below err_piece. A poisoned session is dead; the client
 *    must reopen.
 *
 * 5. Handles (version 2). A session belongs to one (process, mount): the
 *    HELLO's capability becomes handle 0; ATTACH(token, ino) adds another
 *    capability of the same uid to the session and is answered ATTACH_OK
 *    (handle id, or a per-attach errno: the session goes on), DETACH(handle)
 *    drops one (the daemon keeps its record until no queued request names
 *    it). A handle costs the daemon a table entry and a capability
 *    reference, the client no pinned memory: one ring serves every handle.
 *    ATTACHes may be pipelined (answers come in order), at most
 *    OBJFS_ATTACH_PIPELINE unanswered; a FILL may name a handle only once
 *    its ATTACH_OK came.
 *    The daemon bounds handles per session by the uid's capability share.
 *
 * 6. Batches. A FILL names up to OBJFS_FILL_MAX_ENTS entries (handle, off,
 *    len), sent in as many FILL messages as needed (at most
 *    OBJFS_FILL_ENTS_PER_MSG entries each, consecutive, nothing else in
 *    between). Both sides place the entries in ring pieces with the same
 *    deterministic packing (objfs_pack_place): in order, an entry that does
 *    not fit the rest of the current piece starts the next one, an entry
 *    longer than a slot starts a piece and spans whole pieces (the next
 *    entry starts a new one). A plain read is a FILL of one entry. A piece
 *    is the unit of dispatch, fetch and publication; within one piece the
 *    daemon coalesces adjacent and overlapping ranges of one object into
 *    one fill (objfs_cache_fill: cached bytes from memory or disk, the rest
 *    fetched, pieces in parallel). Runs never cross pieces: a later piece
 *    may have no slot yet (wrap-around), and holding a fetch for it would
 *    hold the ring. Pieces are still published in order, as in 3: that
 *    keeps err_piece meaningful and the consumers (a GPU stream waits on
 *    one seq word per piece, in order) simple; a piece fetched early waits
 *    only for its predecessors, which were dispatched first.
 *    Per-entry failures do not poison the ring: the piece is published
 *    anyway (the failed entry's bytes are undefined) and the request's DONE
 *    messages list the failed entries (index, errno), at most
 *    OBJFS_DONE_FAILS_PER_MSG per message, `more` set on all but the last.
 *    A client reports an entry's count only once the request's last DONE
 *    came; a session that ends first fails every entry of its open
 *    requests (-EIO). Entries the daemon must refuse (unknown handle, a
 *    range past the pinned size, len 0, counts past the bounds) are a
 *    broken or hostile client: the session ends with ERR.
 *
 * The daemon never trusts the shared memory: it reads geometry only from
 * the validated HELLO, and reads nothing from the ring but rel words (a
 * lying client can only stall or corrupt its own session). The inline
 * functions below therefore take the geometry as arguments, never from the
 * ring header.
 */
#ifndef OBJFS_SIDE_PROTO_H
#define OBJFS_SIDE_PROTO_H

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define OBJFS_SIDE_MAGIC   0x4f424a53u /* "OBJS" */
#define OBJFS_SIDE_VERSION 3
#define OBJFS_TOKEN_LEN    32
#define OBJFS_SOCK_LEN     108 /* sizeof(sun_path) */

/* Ring geometry limits, checked by both sides. */
#define OBJFS_RING_MIN_SLOTS     2
#define OBJFS_RING_MAX_SLOTS     64
#define OBJFS_RING_MIN_SLOT_SIZE (64u << 10)
#define OBJFS_RING_MAX_SLOT_SIZE (64u << 20)
#define OBJFS_RING_MAX_BYTES     (1ull << 30)
#define OBJFS_RING_ALIGN         4096u
#define OBJFS_RING_GEN_MAX       0x40000000u
#define OBJFS_SEQ_ERROR          0x7fffffffu

/*
 * Bounds of requests: the longest entry, requests and entries queued per
 * session (the daemon holds ~48 bytes per queued entry), entries of one
 * FILL, entries per FILL message and failures per DONE message (both keep
 * a message within OBJFS_MSG_MAX).
 */
#define OBJFS_FILL_MAX_LEN       (1ull << 40)
#define OBJFS_SESSION_QUEUE      1024
#define OBJFS_SESSION_ENTS       (1u << 17)
#define OBJFS_FILL_MAX_ENTS      (1u << 16)
#define OBJFS_FILL_ENTS_PER_MSG  160
#define OBJFS_DONE_FAILS_PER_MSG 480
#define OBJFS_MSG_MAX            4096
/* Most ATTACHes a client keeps unanswered (the daemon queues no more answers). */
#define OBJFS_ATTACH_PIPELINE    1024

/* Answer of OBJFS_IOC_GPU_CAP. Fixed layout (no pointers, no longs). */
struct objfs_side_cap {
	uint32_t magic;
	uint16_t version;
	uint16_t struct_size;      /* sizeof(struct objfs_side_cap) */
	uint64_t ino;
	uint64_t generation;
	int64_t size;              /* object size pinned at grant time */
	uint32_t ring_slots;       /* the daemon's configured ring geometry */
	uint32_t ring_slot_size;
	uint8_t token[OBJFS_TOKEN_LEN];
	char etag[192];            /* NUL-terminated, "" when none */
	char sock[OBJFS_SOCK_LEN]; /* NUL-terminated; '@' = abstract namespace */
	uint8_t pad[12];
};
_Static_assert(sizeof(struct objfs_side_cap) == 384, "cap layout");

#define OBJFS_IOC_GPU_CAP _IOR('O', 0x47, struct objfs_side_cap)

/* Per-slot control words, one cache line each. */
struct objfs_ring_ctl {
	uint32_t seq;  /* daemon: published gen, or OBJFS_SEQ_ERROR */
	uint32_t rel;  /* consumer: released gen */
	uint32_t len;  /* daemon: bytes of data in the published use */
	uint32_t pad[13];
};
_Static_assert(sizeof(struct objfs_ring_ctl) == 64, "ctl layout");

struct objfs_ring_hdr {
	uint32_t magic;
	uint32_t version;
	uint32_t slots;
	uint32_t slot_size;
	uint64_t hdr_size;   /* offset of slot 0's data */
	uint64_t err_piece;  /* first piece without valid data; UINT64_MAX: none */
	int32_t err;         /* positive errno once poisoned, else 0 */
	uint32_t pad[7];
	struct objfs_ring_ctl ctl[];
};
_Static_assert(sizeof(struct objfs_ring_hdr) == 64, "hdr layout");

static inline uint64_t objfs_ring_hdr_size(uint32_t slots)
{
	uint64_t n = sizeof(struct objfs_ring_hdr) + (uint64_t)slots * sizeof(struct objfs_ring_ctl);

	return (n + OBJFS_RING_ALIGN - 1) / OBJFS_RING_ALIGN * OBJFS_RING_ALIGN;
}

/* Whether a geometry is acceptable; both sides use exactly this test. */
static inline int objfs_ring_geometry_ok(uint64_t slots, uint64_t slot_size)
{
	return slots >= OBJFS_RING_MIN_SLOTS && slots <= OBJFS_RING_MAX_SLOTS &&
	       slot_size >= OBJFS_RING_MIN_SLOT_SIZE && slot_size <= OBJFS_RING_MAX_SLOT_SIZE &&
	       slot_size % OBJFS_RING_ALIGN == 0 &&
	       objfs_ring_hdr_size((uint32_t)slots) + slots * slot_size <= OBJFS_RING_MAX_BYTES;
}

static inline uint64_t objfs_ring_bytes(uint32_t slots, uint32_t slot_size)
{
	return objfs_ring_hdr_size(slots) + (uint64_t)slots * slot_size;
}

/* Writes the header of a new (zeroed) ring of @slots x @slot_size: what the
 * daemon does before it hands the ring over (section 2). */
static inline void objfs_ring_init(struct objfs_ring_hdr *r, uint32_t slots, uint32_t slot_size)
{
	r->magic = OBJFS_SIDE_MAGIC;
	r->version = OBJFS_SIDE_VERSION;
	r->slots = slots;
	r->slot_size = slot_size;
	r->hdr_size = objfs_ring_hdr_size(slots);
	r->err_piece = UINT64_MAX;
}

/* The slot of piece @p in a ring of @slots slots (side_proto.h, 3). */
static inline uint32_t objfs_piece_slot(uint64_t p, uint32_t slots)
{
	return (uint32_t)(p % slots);
}

/*
 * The use number (gen) of its slot that piece @p is: 1 for the first round.
 * 64 bits, so that a caller can test it against OBJFS_RING_GEN_MAX before
 * it narrows it to a ring word.
 */
static inline uint64_t objfs_piece_gen(uint64_t p, uint32_t slots)
{
	return p / slots + 1;
}

/*
 * Wakes every thread waiting on the ring word @w (seq or rel). The ring is
 * a shared mapping between two processes: no FUTEX_PRIVATE_FLAG.
 */
static inline void objfs_futex_wake_all(uint32_t *w)
{
	syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/*
 * Sleeps while *@w == @val, at most @ns nanoseconds (any value: a timeout
 * of a second or more is split into tv_sec and tv_nsec; a negative one
 * counts as 0). Returns 0 when woken (or spuriously), -ETIMEDOUT, -EAGAIN
 * (*@w was not @val), -EINTR; callers re-check the word in a loop either way.
 */
static inline int objfs_futex_wait_ns(uint32_t *w, uint32_t val, int64_t ns)
{
	struct timespec ts;

	if (ns < 0)
		ns = 0;
	ts.tv_sec = (time_t)(ns / 1000000000);
	ts.tv_nsec = (long)(ns % 1000000000);
	return syscall(SYS_futex, w, FUTEX_WAIT, val, &ts, NULL, 0) ? -errno : 0;
}

/*
 * Poisons @ring (side_proto.h, 4): unless it is poisoned already, records
 * @err_piece and @err (positive errno); then writes OBJFS_SEQ_ERROR into
 * the seq word of each of the @slots slots (the caller's validated
 * geometry) and wakes their waiters. Either side, any thread.
 */
static inline void objfs_ring_poison(struct objfs_ring_hdr *ring, uint32_t slots,
				     uint64_t err_piece, int err)
{
	uint64_t none = UINT64_MAX;

	if (__atomic_compare_exchange_n(&ring->err_piece, &none, err_piece, 0, __ATOMIC_SEQ_CST,
					__ATOMIC_SEQ_CST))
		__atomic_store_n(&ring->err, err, __ATOMIC_SEQ_CST);
	for (uint32_t s = 0; s < slots; s++) {
		__atomic_store_n(&ring->ctl[s].seq, OBJFS_SEQ_ERROR, __ATOMIC_SEQ_CST);
		objfs_futex_wake_all(&ring->ctl[s].seq);
	}
}

/*
 * The address of the session socket called @name (side_proto.h, 2: a
 * leading '@' names the abstract namespace) in @sa and *@salen. 0, or
 * -EINVAL for an empty name or one that does not fit sun_path.
 */
static inline int objfs_sock_addr(const char *name, struct sockaddr_un *sa, socklen_t *salen)
{
	size_t n = strnlen(name, sizeof(sa->sun_path));

	if (n == 0 || n >= sizeof(sa->sun_path))
		return -EINVAL;
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	memcpy(sa->sun_path, name, n);
	if (name[0] == '@') {
		sa->sun_path[0] = '\0';
		*salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	} else {
		*salen = (socklen_t)sizeof(*sa);
	}
	return 0;
}

/* Messages: a fixed header, then a body whose size is fixed per type. */
enum objfs_msg_type {
	OBJFS_MSG_HELLO = 1,    /* client -> daemon */
	OBJFS_MSG_HELLO_OK = 2, /* daemon -> client, carries the ring memfd */
	OBJFS_MSG_FILL = 3,     /* client -> daemon; a request is 1+ of them */
	OBJFS_MSG_DONE = 4,     /* daemon -> client, 1+ per request */
	OBJFS_MSG_ERR = 5,      /* daemon -> client; the daemon then closes */
	OBJFS_MSG_ATTACH = 6,   /* client -> daemon */
	OBJFS_MSG_ATTACH_OK = 7, /* daemon -> client, one per ATTACH */
	OBJFS_MSG_DETACH = 8,   /* client -> daemon, no answer */
};

struct objfs_msg_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t len;           /* whole message, header included */
	uint32_t reserved;      /* must be 0 */
};

struct objfs_msg_hello {
	struct objfs_msg_hdr h;
	uint8_t token[OBJFS_TOKEN_LEN];
	uint64_t ino;
	uint32_t slots;
	uint32_t slot_size;
	uint64_t ring_bytes;
};

struct objfs_msg_hello_ok {
	struct objfs_msg_hdr h;
	uint64_t session;
};

/* HELLO_OK: the HELLO's capability is handle 0 of the session. */

struct objfs_msg_attach {
	struct objfs_msg_hdr h;
	uint8_t token[OBJFS_TOKEN_LEN];
	uint64_t ino;
	uint64_t cookie;        /* echoed in ATTACH_OK */
};

struct objfs_msg_attach_ok {
	struct objfs_msg_hdr h;
	uint64_t cookie;
	int32_t err;            /* 0, or positive errno (EACCES, ENOSPC): no handle */
	uint32_t handle;
};

struct objfs_msg_detach {
	struct objfs_msg_hdr h;
	uint32_t handle;
	uint32_t pad;
};

/* One entry of a FILL: @len bytes (> 0) at @off of handle @handle's object. */
struct objfs_fill_ent {
	uint32_t handle;
	uint32_t pad;
	int64_t off;
	uint64_t len;           /* off + len <= the pinned size */
};

struct objfs_msg_fill {
	struct objfs_msg_hdr h;
	uint64_t req_id;
	uint64_t first_piece;   /* must equal the daemon's next piece */
	uint32_t nent;          /* entries of the whole request, 1..OBJFS_FILL_MAX_ENTS */
	uint32_t first;         /* index of ent[0] in the request: the entries so far */
	uint32_t count;         /* entries in this message, 1..OBJFS_FILL_ENTS_PER_MSG */
	uint32_t pad;
	struct objfs_fill_ent ent[];
};

/* A failed entry of a request: its index and positive errno. */
struct objfs_done_fail {
	uint32_t idx;
	int32_t err;
};

struct objfs_msg_done {
	struct objfs_msg_hdr h;
	uint64_t req_id;
	int32_t err;            /* 0, or positive errno: the whole request failed */
	uint32_t count;         /* failures in this message */
	uint32_t more;          /* 1: another DONE of this request follows */
	uint32_t pad;
	uint64_t bytes;         /* bytes of the entries that succeeded (last DONE) */
	struct objfs_done_fail fail[];
};

struct objfs_msg_err {
	struct objfs_msg_hdr h;
	int32_t err;            /* positive errno */
	uint32_t pad;
};

static inline void objfs_msg_init(struct objfs_msg_hdr *h, enum objfs_msg_type type,
				  uint32_t len)
{
	h->magic = OBJFS_SIDE_MAGIC;
	h->version = OBJFS_SIDE_VERSION;
	h->type = (uint16_t)type;
	h->len = len;
	h->reserved = 0;
}

/*
 * The size a message of @type must have, given @count entries (FILL) or
 * failures (DONE) and nothing for the others; 0: unknown type or too many.
 */
static inline size_t objfs_msg_size(uint32_t type, uint32_t count)
{
	switch (type) {
	case OBJFS_MSG_HELLO: return sizeof(struct objfs_msg_hello);
	case OBJFS_MSG_HELLO_OK: return sizeof(struct objfs_msg_hello_ok);
	case OBJFS_MSG_FILL:
		return count >= 1 && count <= OBJFS_FILL_ENTS_PER_MSG
			       ? sizeof(struct objfs_msg_fill) + count * sizeof(struct objfs_fill_ent)
			       : 0;
	case OBJFS_MSG_DONE:
		return count <= OBJFS_DONE_FAILS_PER_MSG
			       ? sizeof(struct objfs_msg_done) + count * sizeof(struct objfs_done_fail)
			       : 0;
	case OBJFS_MSG_ERR: return sizeof(struct objfs_msg_err);
	case OBJFS_MSG_ATTACH: return sizeof(struct objfs_msg_attach);
	case OBJFS_MSG_ATTACH_OK: return sizeof(struct objfs_msg_attach_ok);
	case OBJFS_MSG_DETACH: return sizeof(struct objfs_msg_detach);
	default: return 0;
	}
}

/*
 * Checks a received message of @n bytes at @buf (8-byte aligned): magic,
 * reserved, length, version, and the size its type (and count) requires.
 * 0, -EPROTO, or -EPROTONOSUPPORT (the peer speaks another version). Which
 * types are welcome is the receiver's business.
 */
static inline int objfs_msg_check(const void *buf, size_t n)
{
	const struct objfs_msg_hdr *h = (const struct objfs_msg_hdr *)buf;
	uint32_t count = 0;

	if (n < sizeof(*h) || h->magic != OBJFS_SIDE_MAGIC || h->reserved || h->len != n)
		return -EPROTO;
	if (h->version != OBJFS_SIDE_VERSION)
		return -EPROTONOSUPPORT;
	if (h->type == OBJFS_MSG_FILL && n >= sizeof(struct objfs_msg_fill))
		count = ((const struct objfs_msg_fill *)buf)->count;
	else if (h->type == OBJFS_MSG_DONE && n >= sizeof(struct objfs_msg_done))
		count = ((const struct objfs_msg_done *)buf)->count;
	else if (h->type == OBJFS_MSG_FILL || h->type == OBJFS_MSG_DONE)
		return -EPROTO;
	return n == objfs_msg_size(h->type, count) ? 0 : -EPROTO;
}

/* Control buffer for one descriptor passed with SCM_RIGHTS (HELLO_OK's ring). */
union objfs_fd_cmsg {
	struct cmsghdr align;
	char b[CMSG_SPACE(sizeof(int))];
};

/* Attaches @fd to @mh through @cb, which must live until sendmsg(). */
static inline void objfs_msg_attach_fd(struct msghdr *mh, union objfs_fd_cmsg *cb, int fd)
{
	struct cmsghdr *cm;

	memset(cb, 0, sizeof(*cb));
	mh->msg_control = cb->b;
	mh->msg_controllen = sizeof(cb->b);
	cm = CMSG_FIRSTHDR(mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
}

/* Pieces of an entry of @len bytes with @slot_size slots. */
static inline uint64_t objfs_pieces(uint64_t len, uint32_t slot_size)
{
	return (len + slot_size - 1) / slot_size;
}

/*
 * The packing of a request's entries into pieces (side_proto.h, 6), the
 * same on both sides. Start with {0, 0}; place each entry (len > 0) in
 * order. objfs_pack_place returns the entry's first piece, relative to the
 * request's first, and its offset in that piece's slot (0 for an entry
 * longer than a slot, which spans objfs_pieces(len) pieces).
 * objfs_pack_pieces: the request's pieces once every entry is placed.
 * Lengths are below OBJFS_FILL_MAX_LEN and counts below
 * OBJFS_FILL_MAX_ENTS, so nothing here overflows.
 */
struct objfs_pack {
	uint64_t piece;         /* the current piece */
	uint64_t used;          /* bytes of it taken */
};

static inline uint64_t objfs_pack_place(struct objfs_pack *pk, uint64_t len, uint32_t slot_size,
					uint32_t *slot_off)
{
	uint64_t first;

	if (len > slot_size) {
		if (pk->used)
			pk->piece++;
		first = pk->piece;
		pk->piece += objfs_pieces(len, slot_size);
		pk->used = 0;
		*slot_off = 0;
		return first;
	}
	if (pk->used + len > slot_size) {
		pk->piece++;
		pk->used = 0;
	}
	*slot_off = (uint32_t)pk->used;
	pk->used += len;
	return pk->piece;
}

static inline uint64_t objfs_pack_pieces(const struct objfs_pack *pk)
{
	return pk->piece + (pk->used > 0);
}

#endif
