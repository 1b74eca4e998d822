/*
 * side_proto: the GPU side API's wire protocol and shared ring layout, the
 * contract between the daemon (src/side.c) and the client library
 * (lib/objfs_client.c). Both sides include this one header; nothing in it
 * allocates or calls anything.
 *
 * 1. Capability. The client opens a file through the mount and issues
 *    OBJFS_IOC_GPU_CAP on the fd: a restricted _IOR ioctl (fixed size, far
 *    below FUSE's 16 KiB limit). The daemon answers a struct objfs_side_cap:
 *    inode, generation, pinned size and ETag, the session socket's address
 *    and a 32-byte random token bound to (caller uid, inode, object version).
 *
 * 2. Session. The client connects to the socket (SOCK_SEQPACKET; a name
 *    starting with '@' is in the abstract namespace) and sends HELLO with
 *    the token and a memfd (SCM_RIGHTS): the bounce ring. The daemon checks
 *    SO_PEERCRED's uid against the token's uid, the memfd's size and seals
 *    (F_SEAL_SHRINK is required: a client that shrank the ring would make
 *    the daemon's copies fault), then maps it and answers HELLO_OK or ERR.
 *
 * 3. Ring. [header page(s)][slot 0][slot 1]...[slot k-1]. Each slot has a
 *    control line in the header with two 32-bit words:
 *      seq  written by the daemon: "use number g of this slot holds data"
 *      rel  written by the consumer (GPU stream or client CPU): "use g of
 *           this slot has been copied out; the daemon may refill it".
 *    Pieces are numbered per session from 0 in request order. Piece p uses
 *    slot p % k and is that slot's use g = p / k + 1. The daemon fills
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
 *    seq word. Pieces below err_piece were published before and their data
 *    is intact; a request is good exactly when its last piece is below
 *    err_piece. A poisoned session is dead; the client must reopen.
 *
 * The daemon never trusts the shared memory: it reads geometry only from
 * the validated HELLO, and reads nothing from the ring but rel words (a
 * lying client can only stall or corrupt its own session).
 */
#ifndef OBJFS_SIDE_PROTO_H
#define OBJFS_SIDE_PROTO_H

#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#define OBJFS_SIDE_MAGIC   0x4f424a53u /* "OBJS" */
#define OBJFS_SIDE_VERSION 1
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

/* Largest single fill request and most requests queued per session. */
#define OBJFS_FILL_MAX_LEN  (1ull << 40)
#define OBJFS_SESSION_QUEUE 1024
#define OBJFS_MSG_MAX       512

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

/* Messages: a fixed header, then a body whose size is fixed per type. */
enum objfs_msg_type {
	OBJFS_MSG_HELLO = 1,    /* client -> daemon, carries the ring memfd */
	OBJFS_MSG_HELLO_OK = 2, /* daemon -> client */
	OBJFS_MSG_FILL = 3,     /* client -> daemon */
	OBJFS_MSG_DONE = 4,     /* daemon -> client, one per FILL */
	OBJFS_MSG_ERR = 5,      /* daemon -> client; the daemon then closes */
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

struct objfs_msg_fill {
	struct objfs_msg_hdr h;
	uint8_t token[OBJFS_TOKEN_LEN];
	uint64_t ino;
	uint64_t req_id;
	uint64_t first_piece;   /* must equal the daemon's next piece */
	int64_t off;
	uint64_t len;           /* > 0; off + len <= the pinned size */
};

struct objfs_msg_done {
	struct objfs_msg_hdr h;
	uint64_t req_id;
	int32_t err;            /* 0 or positive errno */
	uint32_t pad;
	uint64_t bytes;
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

/* Control buffer for one descriptor passed with SCM_RIGHTS (HELLO's ring). */
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

/* Pieces of a request of @len bytes with @slot_size slots. */
static inline uint64_t objfs_pieces(uint64_t len, uint32_t slot_size)
{
	return (len + slot_size - 1) / slot_size;
}

#endif
