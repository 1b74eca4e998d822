/*
 * side: the side server's sessions (side.h has the design, side_proto.h
 * the protocol; capabilities are in side_cap.c, what the two files share in
 * side_i.h). Here: the socket and its accept thread, HELLO and FILL, the
 * fill workers, and the ring discipline.
 *
 * Threads: one accept thread, one per session, a pool of fill workers.
 * The session thread reads the socket, waits for slot releases and
 * dispatches pieces (struct job, one per slot); workers fill pieces in
 * parallel, each as runs of its entries (struct run: adjacent or
 * overlapping ranges of one object, one objfs_cache_fill each). Pieces are
 * published strictly in order all the same, which makes err_piece exact:
 * the worker that ends a job publishes every consecutive finished piece
 * from ss->pub_piece on (publish_locked). A failed run marks its entries
 * (ent.err) and the session goes on, since one session serves every file
 * of a process; only a session that fails (SIGBUS guard, a vanished
 * client, a job cancelled) poisons the ring, everything below published
 * and intact. The ring is unmapped only after the last job ended
 * (ss->inflight == 0). Workers take jobs in turn between uids and each
 * uid's sessions (job_take), so no user's batches hold every worker.
 *
 * Nothing a client does blocks a shared thread. DONEs and ATTACH answers go
 * out in order with MSG_DONTWAIT under ss->lock, from whoever published the
 * last piece; those a full socket refuses wait for the session thread
 * (POLLOUT). A request keeps its queue entry until its last DONE, so a
 * client that never reads runs out of entries (OBJFS_SESSION_QUEUE) and
 * its session ends. A hangup (POLLHUP, POLLRDHUP) ends the session before
 * its unread messages, and the dispatcher looks for one before each piece;
 * queued jobs are then dropped and counted (fills_cancelled). DETACH only
 * marks a handle: handles_sweep frees it once every request queued before
 * has had its DONE by the daemon's own count (ss->done_seq), never by the
 * client's ids, which a hostile client could make go backwards.
 *
 * Waiting: only for a slot still in use (wrap-around), on a futex on the
 * rel word with a timeout that doubles as a poll for GPU consumers
 * (cuStreamWriteValue32 cannot wake a futex) and backs off (release_poll_ns),
 * so a ring never released costs little CPU; the socket is polled between.
 *
 * The ring's end (linger): the ring stays charged to the budget until the
 * client hangs up (side.h), then its pages are punched out and the budget
 * given back together; at the unmount nothing waits.
 *
 * Locking: ss->lock (a session's queue, job states, publication cursor)
 * comes before side->lock; side->jlock (the workers' job queue) is never
 * held with another lock.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
#include <sys/queue.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "buf.h"
#include "clock.h"
#include "log.h"
#include "side_i.h"

#define HELLO_TIMEOUT_MS     5000
#define RELEASE_POLL_NS      50000L
#define RELEASE_FAST_POLLS   64
#define RELEASE_POLL_MAX_NS  2000000L
#define SOCK_POLL_EVERY      16 /* release waits between socket polls */
#define BUSY_POLL_MS         10 /* session thread's socket poll while requests are open */
#define PUMP_BATCH           64 /* messages handled per socket poll */
/*
 * A session's fills in flight (runs: one GET each when missed). Entries
 * are bounded (OBJFS_SESSION_ENTS), but sparse one-byte entries are one run
 * each, so one session could put 131,072 GETs in the engine's queue at
 * once, ~275 MB of requests under no cap, every other reader of the mount
 * behind them. Past RUNS_MAX a job parks and goes on once its session's
 * runs are below RUNS_RESUME; 1,024 are enough to keep the engine's
 * connections busy with a cold batch of sparse samples.
 */
#define RUNS_MAX             1024
#define RUNS_RESUME          768

/* Linux >= 6.16 (asm-generic value; the architectures with their own
 * socket.h numbering are not built for). */
#if !defined(SO_PASSRIGHTS) && (defined(__x86_64__) || defined(__i386__) || \
				defined(__aarch64__) || defined(__arm__) || defined(__riscv))
#define SO_PASSRIGHTS 83
#endif

enum sess_state { S_HELLO, S_SERVING, S_CLOSED };

/* One entry of a request, as received and placed (side_proto.h, 6). */
struct ent {
	struct cap *cap;             /* borrowed from the handle table (detach defers) */
	int64_t off;
	uint64_t len;
	uint64_t piece;              /* its first piece */
	uint32_t slot_off;           /* in that piece's slot */
	int err;                     /* positive errno once its fill failed (atomic) */
};

struct req {
	uint64_t id;
	struct ent *ents;            /* owned; nent entries */
	uint32_t nent;
	uint32_t got;                /* entries received (while assembling) */
	uint64_t first_piece, last_piece; /* DONE is owed once last_piece is published */
	uint32_t disp_ent;           /* next entry to dispatch */
	uint64_t disp_done;          /* bytes of a long entry dispatched */
	uint32_t nfail, fail_sent;   /* failed entries; of them reported in DONEs */
	uint32_t fail_cursor;        /* entries scanned for the DONE being sent */
	uint64_t bytes;              /* bytes of entries that succeeded */
	int err;                     /* positive errno for the DONE, once owed */
};

/*
 * One fill of a job: a run of the piece's entries (sorted by object and
 * offset) that are adjacent or overlap, filled with one objfs_cache_fill,
 * straight into the slot when the run is laid out there as in the file,
 * else into @tmp and copied to each entry.
 */
struct run {
	struct job *j;                /* its job */
	const uint32_t *idx;         /* entries of the run: r->ents[idx[0..n)] */
	uint32_t n;
	int64_t off;                 /* the run's range */
	char *tmp;                   /* owned; NULL: filled in place */
};

/* A slot's piece between dispatch and publication (ss->lock). */
enum job_state { J_FREE, J_RUNNING, J_DONE, J_FAILED };

struct job {
	struct session *ss;
	struct req *r;               /* its request (stays queued until its DONE) */
	uint64_t piece;
	uint32_t e0, ne;             /* entries [e0, e0 + ne) of r, in this piece */
	int64_t sub_off;             /* with a long entry (ne 1): its part in this piece */
	size_t sub_len;
	size_t len;                  /* bytes of the piece (the published len) */
	uint32_t slot;
	unsigned left;               /* fills running + 1 while they are started (atomic) */
	void *mem;                   /* owned while running: entry order and runs */
	struct run one;              /* the run of a long entry's part */
	enum job_state state;
	int err;                     /* positive errno with J_FAILED */
	uint32_t at, nr;             /* runs started: from entry idx[at] on, runs[nr] next */
	int resumed;                 /* taken off ss->parked: goes before those parked */
	int cancelled;               /* fills of it were not started: the session ended */
	int mapped_in;               /* the slot's pages are in the daemon's page tables */
	STAILQ_ENTRY(job) next;      /* ss->jq, or ss->parked */
};

/* A handle of a session: a capability reference (side_proto.h, 5). */
struct hnd {
	struct cap *cap;             /* NULL: free */
	uint64_t detached_at;        /* detached; freed once requests up to this id are done */
	int detached;
};

struct session {
	struct objfs_side *side;
	int fd;
	pthread_t thread;
	uint64_t id;
	enum sess_state state;
	uid_t uid;
	pid_t pid;
	int node_logged;             /* session thread: log_ring_node done */
	struct hnd *hnd;             /* session thread: the handle table, handle 0 = HELLO's */
	uint32_t nhnd, hcount;       /* table size, handles held (detached ones included) */
	uint32_t hmax;               /* the uid's capability share */
	uint32_t ndet;               /* detached handles not yet freed */
	struct objfs_msg_attach_ok aq[OBJFS_ATTACH_PIPELINE]; /* session thread: answers */
	unsigned aq_head, aq_len;    /* waiting for room in the socket */
	struct objfs_ring_hdr *ring; /* shared with the client: untrusted */
	size_t ring_bytes;
	int ringfd;                  /* the ring's memfd, until the client hung up, -1 */
	int ring_given;              /* HELLO_OK handed the memfd over */
	uint32_t slots, slot_size;   /* from the validated HELLO */
	char *data;                  /* slot 0 */
	uint64_t next_piece;         /* first piece of the next FILL */
	uint64_t fill_piece;         /* next piece to dispatch (written under ss->lock) */
	struct objfs_pack pack;      /* session thread: the request being assembled */
	uint64_t last_seq;           /* session thread: requests queued so far */
	pthread_mutex_t lock;        /* guards what follows, up to finished */
	pthread_cond_t cond;         /* a job of this session ended */
	struct req q[OBJFS_SESSION_QUEUE]; /* FILLs until their DONE is sent */
	unsigned qhead, qlen;
	unsigned qowed;              /* q[qhead..] whose DONE is owed (published) */
	unsigned qdisp;              /* q[qhead + qdisp] is the one being dispatched */
	int assembling;              /* q[qhead + qlen] is being received */
	uint64_t qents;              /* entries of queued (and assembling) requests */
	uint64_t done_seq;           /* requests whose last DONE went out */
	uint64_t pub_piece;          /* pieces below are published */
	unsigned inflight;           /* jobs queued or running */
	STAILQ_HEAD(, job) parked;   /* jobs waiting for RUNS_MAX to give room, in order */
	unsigned nparked;            /* atomic: jobs on parked */
	unsigned runs;               /* atomic: the session's fills in flight */
	int failed;                  /* positive errno: nothing more is published */
	int ending;                  /* the session is over: jobs skip their copy */
	struct job jobs[OBJFS_RING_MAX_SLOTS]; /* by slot */
	int finished;                /* side->lock: the thread has ended */
	int pending;                 /* side->lock: counted as pending (before HELLO) */
	int counted;                 /* side->lock: counted as a session, with ring_bytes */
	struct uid_use *use;         /* its uid's record, while counted */
	STAILQ_HEAD(, job) jq;       /* side->jlock: its jobs waiting for a worker */
	TAILQ_ENTRY(session) jlink;  /* side->jlock: in use->jsess while jq has any */
	struct session *next;
};

/* ---------------------------------------------------------- messages */

static void sess_state(struct session *ss, enum sess_state to, const char *why)
{
	static const char *const names[] = { "HELLO", "SERVING", "CLOSED" };

	objfs_debug("side: session %llu (pid %d uid %u) %s -> %s%s%s",
		    (unsigned long long)ss->id, (int)ss->pid, (unsigned)ss->uid,
		    names[ss->state], names[to], why ? ": " : "", why ? why : "");
	ss->state = to;
}

/* Sends @m with descriptor @pass (SCM_RIGHTS), or none when -1. Never
 * blocks: -EAGAIN when the client's socket is full. */
static int send_msg_fd(int fd, const void *m, size_t len, int pass)
{
	struct iovec iov = { (void *)m, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	union objfs_fd_cmsg cb;
	ssize_t n;

	if (pass >= 0)
		objfs_msg_attach_fd(&mh, &cb, pass);
	n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EIO;
}

static int send_msg(int fd, const void *m, size_t len)
{
	return send_msg_fd(fd, m, len, -1);
}

static void send_err(int fd, int err)
{
	struct objfs_msg_err m = { 0 };

	objfs_msg_init(&m.h, OBJFS_MSG_ERR, sizeof(m));
	m.err = err;
	(void)send_msg(fd, &m, sizeof(m));
}

/*
 * Receives one message into @buf (OBJFS_MSG_MAX bytes) and checks its
 * header and size against its type. No message to the daemon carries a
 * descriptor: the socket refuses them (refuse_rights), and where the
 * kernel cannot, one sent is dropped by the kernel (no control buffer:
 * MSG_CTRUNC) and the message refused, so none is ever installed or
 * closed here.
 * Returns the message size, -ECONNRESET on EOF, or -errno (-EMSGSIZE,
 * -EPROTO, -EPROTONOSUPPORT) for a malformed message.
 */
static ssize_t recv_msg(int fd, void *buf)
{
	struct iovec iov = { buf, OBJFS_MSG_MAX };
	struct msghdr mh = { 0 };
	const struct objfs_msg_hdr *h = buf;
	ssize_t n;
	int err;

	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	if (n < 0)
		return -errno;
	if (n == 0)
		return -ECONNRESET;
	if (mh.msg_flags & MSG_TRUNC)
		return -EMSGSIZE;
	err = objfs_msg_check(buf, (size_t)n);
	/* Clients send HELLO, FILL, ATTACH and DETACH, none with a descriptor. */
	if (!err && ((mh.msg_flags & MSG_CTRUNC) ||
		     (h->type != OBJFS_MSG_HELLO && h->type != OBJFS_MSG_FILL &&
		      h->type != OBJFS_MSG_ATTACH && h->type != OBJFS_MSG_DETACH)))
		err = -EPROTO;
	return err ? err : n;
}

/* ---------------------------------------------------------- sessions */

/*
 * Turns a pending connection into a session of @bytes of ring, within the
 * bounds of side.h (global and the uid's share). 0, -EBUSY (sessions),
 * -ENOMEM (the global ring budget) or -EDQUOT (the uid's).
 */
static int admit(struct session *ss, uint64_t bytes)
{
	struct objfs_side *s = ss->side;
	struct uid_use *u;
	int err = 0, r;

	pthread_mutex_lock(&s->lock);
	u = objfs_side_uid_get(s, ss->uid);
	if (!u)
		err = -ENOMEM;
	else if (objfs_side_room(s, u, OBJFS_SIDE_SESSIONS, 1))
		err = -EBUSY;
	else if ((r = objfs_side_room(s, u, OBJFS_SIDE_RING, bytes)))
		err = r == 1 ? -EDQUOT : -ENOMEM;
	if (!err) {
		u->sessions++;
		u->ring_bytes += bytes;
		s->ring_bytes += bytes;
		ss->ring_bytes = bytes;
		s->st.sessions_open++;
		s->st.sessions_total++;
		ss->counted = 1;
		ss->use = u;
	} else {
		s->st.sessions_refused++;
	}
	if (u) {
		u->pending -= ss->pending;
		s->pending -= ss->pending;
		ss->pending = 0;
		objfs_side_uid_put(s, u);
	}
	pthread_mutex_unlock(&s->lock);
	if (err)
		objfs_warn("side: session %llu (pid %d uid %u) refused: %s",
			   (unsigned long long)ss->id, (int)ss->pid, (unsigned)ss->uid,
			   err == -EBUSY ? "too many sessions (of this uid, or all the others "
					   "may have)" :
			   err == -EDQUOT ? "this uid's ring memory budget is spent" :
			   "the ring memory budget others may have is spent");
	return err;
}

/*
 * Logs the NUMA node of a new ring, on a machine of several, at its first
 * FILL: the client places it by its GPU's node (lib/client_cuda.c) once it
 * has it, and this line is how an operator sees the choice. Reading the
 * node faults the page in under the ring's own policy, so it lands where
 * the client asked.
 */
static void log_ring_node(const struct session *ss)
{
	int node = -1;

	if (access("/sys/devices/system/node/node1", F_OK))
		return;
	/* get_mempolicy(MPOL_F_NODE | MPOL_F_ADDR): the node of the page at ss->data */
	if (syscall(SYS_get_mempolicy, &node, NULL, 0, ss->data, 3) != 0)
		node = -1;
	objfs_info("side: session %llu (pid %d uid %u): ring of %llu MiB on NUMA node %d",
		   (unsigned long long)ss->id, (int)ss->pid, (unsigned)ss->uid,
		   (unsigned long long)(ss->ring_bytes >> 20), node);
}

/*
 * The bounce ring of @ss's HELLO @m: a memfd of the ring's size, sealed
 * against shrinking, growing and new seals (no access inside it can then
 * fault: side_guard.c guards it anyway), mapped here with its header
 * written. Returns the memfd to hand to the client, or -errno.
 */
static int ring_make(struct session *ss, const struct objfs_msg_hello *m)
{
	int fd = memfd_create("objfs-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING), err = 0;
	void *map;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)m->ring_bytes) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		err = -errno;
		close(fd);
		return err;
	}
	map = mmap(NULL, m->ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		err = -errno;
		close(fd);
		return err;
	}
	ss->ring = map;
	ss->ring_bytes = m->ring_bytes;
	ss->slots = m->slots;
	ss->slot_size = m->slot_size;
	ss->data = (char *)map + objfs_ring_hdr_size(m->slots);
	/* the header only: the client places the slots before it touches them */
	objfs_ring_init(ss->ring, m->slots, m->slot_size);
	return fd;
}

/* Validates HELLO, makes the ring and answers with it. 0 or -errno. */
static int do_hello(struct session *ss, const struct objfs_msg_hello *m)
{
	struct objfs_side *s = ss->side;
	struct objfs_msg_hello_ok ok = { 0 };
	struct cap *c;
	int err, fd;

	c = objfs_side_cap_ref(s, m->token);
	/* One answer for every mismatch: no oracle for tokens. */
	if (!c || c->uid != ss->uid || c->ino != m->ino) {
		objfs_side_cap_unref(s, c);
		return -EACCES;
	}
	ss->hnd = calloc(16, sizeof(*ss->hnd));
	if (!ss->hnd) {
		objfs_side_cap_unref(s, c);
		return -ENOMEM;
	}
	ss->nhnd = 16;
	ss->hnd[0].cap = c;
	ss->hcount = 1;
	ss->hmax = (uint32_t)objfs_side_share(s->cfg.max_caps, s->cfg.uid_caps);
	if (!objfs_ring_geometry_ok(m->slots, m->slot_size) ||
	    m->ring_bytes != objfs_ring_bytes(m->slots, m->slot_size))
		return -EINVAL;
	err = admit(ss, m->ring_bytes);
	if (err)
		return err;
	fd = ring_make(ss, m);
	if (fd < 0)
		return fd;
	if (objfs_side_guard_add(ss->ring, ss->ring_bytes, &ss->failed)) {
		close(fd);
		return -EBUSY; /* more rings than the guard's table: cannot happen below its size */
	}
	objfs_msg_init(&ok.h, OBJFS_MSG_HELLO_OK, sizeof(ok));
	ok.session = ss->id;
	ss->ringfd = fd; /* ours: a memfd, whose close waits for nothing */
	err = send_msg_fd(ss->fd, &ok, sizeof(ok), fd);
	ss->ring_given = !err;
	return err;
}

/*
 * ATTACH: adds the capability of @m->token to the session as a new handle
 * (side_proto.h, 5). A refusal (EACCES for any mismatch, ENOSPC past the
 * uid's capability share, ENOMEM) is answered and the session goes on.
 * Session thread. 0, or -errno when the answer cannot be sent.
 */
static int do_attach(struct session *ss, const struct objfs_msg_attach *m)
{
	struct objfs_side *s = ss->side;
	struct objfs_msg_attach_ok ok = { 0 };
	struct cap *c = NULL;
	uint32_t h = 0;
	int err = 0;

	if (ss->hcount >= ss->hmax) {
		err = ENOSPC;
		goto answer;
	}
	c = objfs_side_cap_ref(s, m->token);
	if (!c || c->uid != ss->uid || c->ino != m->ino) {
		err = EACCES;
		goto answer;
	}
	for (h = ss->hcount; h < ss->nhnd && ss->hnd[h].cap; h++)
		;
	if (h == ss->nhnd) { /* below hcount there may be holes: look there too */
		for (h = 0; h < ss->nhnd && ss->hnd[h].cap; h++)
			;
	}
	if (h == ss->nhnd) {
		uint32_t n = ss->nhnd * 2;
		struct hnd *t = realloc(ss->hnd, n * sizeof(*t));

		if (!t) {
			err = ENOMEM;
			goto answer;
		}
		memset(t + ss->nhnd, 0, (n - ss->nhnd) * sizeof(*t));
		ss->hnd = t;
		ss->nhnd = n;
	}
	ss->hnd[h] = (struct hnd){ c, 0, 0 };
	ss->hcount++;
	c = NULL;
answer:
	objfs_side_cap_unref(s, c);
	objfs_msg_init(&ok.h, OBJFS_MSG_ATTACH_OK, sizeof(ok));
	ok.cookie = m->cookie;
	ok.err = err;
	ok.handle = err ? 0 : h;
	/*
	 * Clients pipeline ATTACHes (10,000 opens in a row), so the answers can
	 * fill the socket. As for DONEs, nothing waits: answers a full socket
	 * refuses wait in ss->aq (in order) for pump's POLLOUT. A client keeps
	 * at most OBJFS_ATTACH_PIPELINE unanswered; one that does not read past
	 * the queue's room has its session ended.
	 */
	if (!ss->aq_len) {
		int r = send_msg(ss->fd, &ok, sizeof(ok));

		if (r != -EAGAIN)
			return r;
	}
	if (ss->aq_len == OBJFS_ATTACH_PIPELINE)
		return -EAGAIN;
	ss->aq[(ss->aq_head + ss->aq_len++) % OBJFS_ATTACH_PIPELINE] = ok;
	return 0;
}

/* Sends the ATTACH_OKs a full socket held back, in order. Session thread. */
static int aq_flush(struct session *ss)
{
	while (ss->aq_len) {
		int r = send_msg(ss->fd, &ss->aq[ss->aq_head], sizeof(ss->aq[0]));

		if (r == -EAGAIN)
			return 0;
		if (r)
			return r;
		ss->aq_head = (ss->aq_head + 1) % OBJFS_ATTACH_PIPELINE;
		ss->aq_len--;
	}
	return 0;
}

/*
 * Frees detached handles that no queued request can name any more (their
 * DETACH came after the last request naming them was queued, and that one's
 * DONE has gone out). Session thread.
 */
static void handles_sweep(struct session *ss)
{
	uint64_t done;

	pthread_mutex_lock(&ss->lock);
	done = ss->done_seq;
	pthread_mutex_unlock(&ss->lock);
	for (uint32_t h = 0; h < ss->nhnd; h++) {
		struct hnd *x = &ss->hnd[h];

		if (x->cap && x->detached && x->detached_at <= done) {
			objfs_side_cap_unref(ss->side, x->cap);
			*x = (struct hnd){ NULL, 0, 0 };
			ss->hcount--;
			ss->ndet--;
		}
	}
}

/* DETACH: the handle is gone for the client. 0, or -EBADF (unknown handle). */
static int do_detach(struct session *ss, const struct objfs_msg_detach *m)
{
	struct hnd *x;

	if (m->handle >= ss->nhnd || !ss->hnd[m->handle].cap || ss->hnd[m->handle].detached)
		return -EBADF;
	x = &ss->hnd[m->handle];
	x->detached = 1;
	x->detached_at = ss->last_seq; /* requests after it cannot name it */
	ss->ndet++;
	handles_sweep(ss);
	return 0;
}

static void plan_blocks(struct session *ss, const struct req *r);

/*
 * Receives one FILL message: the first of a request reserves its queue
 * entry and entries, every one places its entries (side_proto.h, 6); the
 * last queues the request. Session thread. 0, or -errno (the session then
 * ends): -EPROTO (out of sequence), -EBADF (unknown handle), -EINVAL (a
 * range past the object, len 0), -EAGAIN (queue or entry bounds),
 * -EOVERFLOW (ring generations).
 */
static int do_fill(struct session *ss, const struct objfs_msg_fill *m)
{
	struct req *r;
	uint64_t pieces;

	/* Its place: qhead + qlen moves only here (workers move both at once). */
	pthread_mutex_lock(&ss->lock);
	r = &ss->q[(ss->qhead + ss->qlen) % OBJFS_SESSION_QUEUE];
	pthread_mutex_unlock(&ss->lock);

	if (!ss->node_logged) {
		ss->node_logged = 1;
		log_ring_node(ss);
	}
	if (!ss->assembling) {
		if (m->first != 0 || m->first_piece != ss->next_piece)
			return -EPROTO;
		if (!m->nent || m->nent > OBJFS_FILL_MAX_ENTS)
			return -EINVAL;
		pthread_mutex_lock(&ss->lock);
		if (ss->qlen == OBJFS_SESSION_QUEUE || ss->qents + m->nent > OBJFS_SESSION_ENTS) {
			pthread_mutex_unlock(&ss->lock);
			return -EAGAIN;
		}
		ss->qents += m->nent;
		pthread_mutex_unlock(&ss->lock);
		memset(r, 0, sizeof(*r));
		r->ents = calloc(m->nent, sizeof(*r->ents));
		if (!r->ents)
			return -ENOMEM;
		r->id = m->req_id;
		r->nent = m->nent;
		r->first_piece = ss->next_piece;
		ss->pack = (struct objfs_pack){ 0, 0 };
		ss->assembling = 1;
	} else if (m->req_id != r->id || m->nent != r->nent || m->first != r->got ||
		   m->first_piece != r->first_piece) {
		return -EPROTO;
	}
	if (m->count > r->nent - r->got)
		return -EPROTO;
	for (uint32_t i = 0; i < m->count; i++) {
		const struct objfs_fill_ent *e = &m->ent[i];
		struct ent *x = &r->ents[r->got + i];
		struct cap *c;

		if (e->handle >= ss->nhnd || !ss->hnd[e->handle].cap || ss->hnd[e->handle].detached)
			return -EBADF;
		c = ss->hnd[e->handle].cap;
		if (!e->len || e->len > OBJFS_FILL_MAX_LEN || e->off < 0 ||
		    (uint64_t)e->off > (uint64_t)c->obj->size ||
		    e->len > (uint64_t)c->obj->size - (uint64_t)e->off)
			return -EINVAL;
		x->cap = c;
		x->off = e->off;
		x->len = e->len;
		x->piece = r->first_piece +
			   objfs_pack_place(&ss->pack, e->len, ss->slot_size, &x->slot_off);
	}
	r->got += m->count;
	if (r->got < r->nent)
		return 0;
	pieces = objfs_pack_pieces(&ss->pack);
	if (objfs_piece_gen(r->first_piece + pieces - 1, ss->slots) >= OBJFS_RING_GEN_MAX)
		return -EOVERFLOW;
	r->last_piece = r->first_piece + pieces - 1;
	plan_blocks(ss, r);
	ss->assembling = 0;
	ss->last_seq++;
	pthread_mutex_lock(&ss->lock);
	ss->qlen++;
	pthread_mutex_unlock(&ss->lock);
	ss->next_piece += pieces;
	return 0;
}

/*
 * The next DONE message of @r (the first of them, or the one after the
 * failures reported so far) into @d, whose room holds
 * OBJFS_DONE_FAILS_PER_MSG failures. Returns its size; r->fail_cursor and
 * r->fail_sent move on only when the caller sent it (done_advance).
 */
static size_t done_build(const struct req *r, struct objfs_msg_done *d, uint32_t *cursor)
{
	uint32_t k = 0, i = r->fail_cursor;
	size_t len;

	if (!r->err) {
		for (; i < r->nent && k < OBJFS_DONE_FAILS_PER_MSG; i++) {
			int e = __atomic_load_n(&r->ents[i].err, __ATOMIC_RELAXED);

			if (e) {
				d->fail[k].idx = i;
				d->fail[k].err = e;
				k++;
			}
		}
	}
	len = objfs_msg_size(OBJFS_MSG_DONE, k);
	objfs_msg_init(&d->h, OBJFS_MSG_DONE, (uint32_t)len);
	d->req_id = r->id;
	d->err = r->err;
	d->count = k;
	d->more = !r->err && r->fail_sent + k < r->nfail;
	d->pad = 0;
	d->bytes = r->err ? 0 : r->bytes;
	*cursor = i;
	return len;
}

/*
 * Sends the DONEs owed, oldest first, without blocking; each frees its
 * queue entry. Stops at a full socket (they wait for POLLOUT). With
 * ss->lock held. 0, or -errno when the client is gone (the session fails).
 */
static int flush_locked(struct session *ss)
{
	char buf[OBJFS_MSG_MAX] __attribute__((aligned(8)));
	struct objfs_msg_done *d = (struct objfs_msg_done *)buf;

	while (ss->qowed) {
		struct req *r = &ss->q[ss->qhead];
		uint32_t cursor;
		size_t len = done_build(r, d, &cursor);
		int err;

		err = send_msg(ss->fd, d, len);
		if (err == -EAGAIN) {
			pthread_mutex_lock(&ss->side->lock);
			ss->side->st.replies_deferred++;
			pthread_mutex_unlock(&ss->side->lock);
			return 0;
		}
		if (err) {
			if (!ss->failed)
				__atomic_store_n(&ss->failed, -err, __ATOMIC_RELAXED);
			return err;
		}
		r->fail_sent += d->count;
		r->fail_cursor = cursor;
		if (d->more)
			continue;
		ss->done_seq++; /* requests complete in queue order */
		ss->qents -= r->nent;
		free(r->ents);
		r->ents = NULL;
		ss->qhead = (ss->qhead + 1) % OBJFS_SESSION_QUEUE;
		ss->qlen--;
		ss->qowed--;
		ss->qdisp--;
	}
	return 0;
}

/*
 * Whether the client has hung up (closed, exited, or shut its sending
 * side: the session ends either way). One poll, no wait.
 */
static int peer_gone(const struct session *ss)
{
	struct pollfd p = { ss->fd, POLLRDHUP, 0 };

	return poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR));
}

/*
 * Handles what the socket has, waiting up to @timeout_ms for it, and sends
 * the DONEs a full socket held back once it has room. 0 when nothing or a
 * FILL arrived, -errno when the session must end: -ECONNRESET as soon as
 * the client hung up, what it left unread is not handled (its FILLs would
 * only start fetches for nobody).
 */
static int pump(struct session *ss, int timeout_ms)
{
	char buf[OBJFS_MSG_MAX] __attribute__((aligned(8)));
	struct pollfd p = { ss->fd, POLLIN | POLLRDHUP, 0 };
	ssize_t n;
	int r;

	if (__atomic_load_n(&ss->side->stopping, __ATOMIC_RELAXED))
		return -ESHUTDOWN;
	pthread_mutex_lock(&ss->lock);
	if (ss->qowed || ss->aq_len)
		p.events |= POLLOUT;
	if (ss->qlen && timeout_ms > BUSY_POLL_MS)
		timeout_ms = BUSY_POLL_MS; /* a worker may meet a full socket meanwhile */
	pthread_mutex_unlock(&ss->lock);
	r = poll(&p, 1, timeout_ms);
	if (r < 0)
		return errno == EINTR ? 0 : -errno;
	if (r == 0)
		return 0;
	if (p.revents & (POLLHUP | POLLRDHUP))
		return -ECONNRESET;
	if (p.revents & POLLOUT) {
		pthread_mutex_lock(&ss->lock);
		r = flush_locked(ss);
		pthread_mutex_unlock(&ss->lock);
		if (!r)
			r = aq_flush(ss);
		if (r)
			return r;
	}
	if (!(p.revents & (POLLIN | POLLHUP | POLLERR)))
		return 0;
	/*
	 * Up to PUMP_BATCH messages a call: a request of 65,536 entries is 410
	 * FILL messages, and wait_release calls this only every SOCK_POLL_EVERY
	 * waits, so one message a call held such a request back by seconds.
	 */
	for (int k = 0; k < PUMP_BATCH; k++) {
		n = recv_msg(ss->fd, buf);
		if (n == -EAGAIN)
			return 0;
		if (n < 0)
			return (int)n;
		switch (((struct objfs_msg_hdr *)buf)->type) {
		case OBJFS_MSG_FILL: r = do_fill(ss, (const struct objfs_msg_fill *)buf); break;
		case OBJFS_MSG_ATTACH:
			r = ss->assembling ? -EPROTO
					   : do_attach(ss, (const struct objfs_msg_attach *)buf);
			break;
		case OBJFS_MSG_DETACH:
			r = ss->assembling ? -EPROTO
					   : do_detach(ss, (const struct objfs_msg_detach *)buf);
			break;
		default: r = -EPROTO;
		}
		if (r)
			return r;
	}
	return 0;
}

/*
 * The @i-th wait's poll: RELEASE_POLL_NS for the first RELEASE_FAST_POLLS
 * waits (a GPU frees a slot within that in a streaming fill), then doubling
 * up to RELEASE_POLL_MAX_NS, so a client that never releases costs ~500
 * wake-ups a second, not 20,000.
 */
static long release_poll_ns(unsigned i)
{
	unsigned k = i <= RELEASE_FAST_POLLS ? 0 : i - RELEASE_FAST_POLLS;
	long ns = RELEASE_POLL_NS;

	while (k-- && ns < RELEASE_POLL_MAX_NS)
		ns *= 2;
	return ns < RELEASE_POLL_MAX_NS ? ns : RELEASE_POLL_MAX_NS;
}

/* Waits until slot use @g - 1 is released. 0, or -errno to end the session. */
static int wait_release(struct session *ss, uint32_t slot, uint32_t g)
{
	uint32_t *rel = &ss->ring->ctl[slot].rel;
	double t0 = 0;
	int err = 0;

	for (unsigned i = 1;; i++) {
		uint32_t v = __atomic_load_n(rel, __ATOMIC_ACQUIRE);

		if (v >= g - 1 && v < OBJFS_RING_GEN_MAX)
			break;
		if (__atomic_load_n(&ss->failed, __ATOMIC_RELAXED))
			break; /* the dispatcher sees it next */
		if (i % SOCK_POLL_EVERY == 0) {
			err = pump(ss, 0);
			if (err)
				break;
		}
		if (i == 1)
			t0 = objfs_now_s();
		objfs_futex_wait_ns(rel, v, release_poll_ns(i));
	}
	if (t0 > 0) { /* how long consumers, not fetches, held the fill back */
		uint64_t us = (uint64_t)((objfs_now_s() - t0) * 1e6);

		pthread_mutex_lock(&ss->side->lock);
		ss->side->st.ring_wait_us += us;
		pthread_mutex_unlock(&ss->side->lock);
	}
	return err;
}

/*
 * Publishes, in piece order, every finished piece from ss->pub_piece on;
 * a request whose last piece is published gets its DONE owed. Stops at a
 * running piece or at a failed one: that piece poisons the ring
 * (err_piece = it: every piece below is published and intact), its
 * request is owed an error DONE and the session is failed. Called with
 * ss->lock held, by whoever just ended a job; flush_locked sends.
 */
static void publish_locked(struct session *ss)
{
	struct objfs_side *s = ss->side;

	while (!ss->failed && !ss->ending && ss->pub_piece < ss->fill_piece) {
		uint64_t p = ss->pub_piece;
		uint32_t slot = objfs_piece_slot(p, ss->slots), prev;
		uint32_t g = (uint32_t)objfs_piece_gen(p, ss->slots);
		struct job *j = &ss->jobs[slot];
		struct req *r = &ss->q[(ss->qhead + ss->qowed) % OBJFS_SESSION_QUEUE];

		if (j->state == J_RUNNING || j->state == J_FREE || j->piece != p)
			break;
		if (j->state == J_FAILED) {
			objfs_info("side: session %llu: piece %llu failed: %s",
				   (unsigned long long)ss->id, (unsigned long long)p, strerror(j->err));
			/* The session ends (its requests fail with it). No DONE is
			 * owed: flushing one would free r's entries while its other
			 * pieces may still be filling into them. */
			objfs_ring_poison(ss->ring, ss->slots, p, j->err);
			__atomic_store_n(&ss->failed, j->err, __ATOMIC_RELAXED);
			pthread_mutex_lock(&s->lock);
			s->st.fill_errors++;
			pthread_mutex_unlock(&s->lock);
			break;
		}
		__atomic_store_n(&ss->ring->ctl[slot].len, (uint32_t)j->len, __ATOMIC_RELAXED);
		/*
		 * OBJFS_SEQ_ERROR is sticky: if the client's watchdog poisoned the ring
		 * meanwhile, publishing over it would strand its waiters on this slot.
		 */
		prev = g - 1;
		if (!__atomic_compare_exchange_n(&ss->ring->ctl[slot].seq, &prev, g, 0,
						 __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
			__atomic_store_n(&ss->failed, ECANCELED, __ATOMIC_RELAXED);
			break;
		}
		objfs_futex_wake_all(&ss->ring->ctl[slot].seq);
		j->state = J_FREE;
		ss->pub_piece++;
		if (p == r->last_piece) {
			uint64_t bytes = 0;
			uint32_t nfail = 0;

			for (uint32_t i = 0; i < r->nent; i++) {
				if (__atomic_load_n(&r->ents[i].err, __ATOMIC_RELAXED))
					nfail++;
				else
					bytes += r->ents[i].len;
			}
			r->err = 0;
			r->nfail = nfail;
			r->bytes = bytes;
			ss->qowed++;
			pthread_mutex_lock(&s->lock);
			s->st.fills++;
			s->st.fill_bytes += bytes;
			s->st.fill_errors += nfail;
			pthread_mutex_unlock(&s->lock);
		}
	}
	pthread_cond_broadcast(&ss->cond);
}

/* A job's fills ended (any thread): publish what is in order, send its DONEs. */
static void job_end(struct job *j, int err)
{
	struct session *ss = j->ss;

	if (j->cancelled || err == -ECANCELED)
		__atomic_add_fetch(&ss->side->fills_cancelled, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&ss->lock);
	j->state = err ? J_FAILED : J_DONE;
	j->err = -err;
	publish_locked(ss);
	(void)flush_locked(ss); /* never blocks; a full socket leaves them to the session */
	/* Last: once inflight drops, the session may unmap the ring and close. */
	ss->inflight--;
	pthread_cond_broadcast(&ss->cond);
	pthread_mutex_unlock(&ss->lock);
}

/* Drops one of j->left; the last publishes (entries' failures are theirs). */
static void job_put(struct job *j)
{
	if (__atomic_sub_fetch(&j->left, 1, __ATOMIC_ACQ_REL) == 0) {
		free(j->mem);
		j->mem = NULL;
		job_end(j, 0);
	}
}

/* A run's fill ended (any thread): scatter or mark its entries failed. */
static void run_done(void *arg, int err)
{
	struct run *u = arg;
	struct job *j = u->j;
	struct session *ss = j->ss;
	char *slot = ss->data + (size_t)j->slot * ss->slot_size;

	for (uint32_t i = 0; i < u->n; i++) {
		struct ent *e = &j->r->ents[u->idx[i]];
		int zero = 0;

		if (err)
			__atomic_compare_exchange_n(&e->err, &zero, -err, 0, __ATOMIC_RELAXED,
						    __ATOMIC_RELAXED);
		else if (u->tmp && !__atomic_load_n(&ss->failed, __ATOMIC_RELAXED))
			objfs_copy_stream(slot + e->slot_off, u->tmp + (e->off - u->off), e->len);
	}
	free(u->tmp);
	job_put(j);
}

/* Orders entry indexes by (object, offset). */
static int ent_cmp(const void *a, const void *b, void *arg)
{
	const struct ent *ents = arg;
	const struct ent *x = &ents[*(const uint32_t *)a], *y = &ents[*(const uint32_t *)b];

	if (x->cap->obj != y->cap->obj)
		return (uintptr_t)x->cap->obj < (uintptr_t)y->cap->obj ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

struct pgroup { /* a block small entries of a request fall in */
	const struct objfs_object *obj;
	uint64_t blk;
	uint32_t n, at; /* its entries; where they start in plan_blocks' order */
};

/* Sorts @n entry indexes of one object by offset (groups are mostly small). */
static void sort_by_off(const struct ent *ents, uint32_t *idx, uint32_t n)
{
	if (n > 16) {
		qsort_r(idx, n, sizeof(*idx), ent_cmp, (void *)ents);
		return;
	}
	for (uint32_t i = 1; i < n; i++) {
		uint32_t v = idx[i], k = i;

		for (; k > 0 && ents[idx[k - 1]].off > ents[v].off; k--)
			idx[k] = idx[k - 1];
		idx[k] = v;
	}
}

/*
 * Whole blocks for dense samples. A batch of many small ranges would
 * cost one GET each, even when ten of them fall into one 2 MiB shard: the
 * fills of a piece only see the piece's entries, and a 10,000-sample batch
 * over 1,000 shards spreads each shard's samples over many pieces. Here the
 * whole request is seen at once: a block that two or more small entries
 * (a quarter of a block at most, within one block) touch, covering at
 * least a quarter of it (so at most 4x the bytes asked), is fetched whole
 * into the block cache, in the
 * order the request first names it (the order its pieces are filled); the
 * fills then copy from it (objfs_cache_fill waits for a block in flight).
 * One GET instead of several, and a second pass over the same shards is
 * served from memory. Bounded by what the cache's prefetch room takes
 * (objfs_cache_prefetch never passes the cap). The quarter trades bytes
 * for requests: up to 4x the bytes is dear on a loopback, where bytes are
 * cheap, but cheap on S3, where a request costs ~20 ms; and a warm second
 * pass is served from memory instead of fetched again
 * (contrib/gpu/bench_batch.sh measures both passes). Session thread.
 */
static void plan_blocks(struct session *ss, const struct req *r)
{
	struct objfs_cache *cache = ss->side->cache;
	uint64_t bs = objfs_cache_block_size(cache);
	uint32_t ng = 0, *tab = NULL, *gid = NULL, *order = NULL, mask = 1;
	struct pgroup *g = NULL;

	if (r->nent < 2)
		return;
	while (mask < 2 * r->nent)
		mask <<= 1;
	/*
	 * Grouped by (object, block) through a hash table, in the order the
	 * request first names each block: a qsort of 10,000 entries took ~2 ms
	 * on the session thread before the first piece could start.
	 */
	tab = malloc(mask * sizeof(*tab));
	gid = malloc(r->nent * sizeof(*gid));
	order = malloc(r->nent * sizeof(*order));
	g = malloc(r->nent * sizeof(*g));
	if (!tab || !gid || !order || !g)
		goto out;
	memset(tab, 0xff, mask * sizeof(*tab));
	mask--;
	for (uint32_t i = 0; i < r->nent; i++) {
		const struct ent *e = &r->ents[i];
		uint64_t blk = (uint64_t)e->off / bs, h;
		uint32_t k;

		gid[i] = UINT32_MAX;
		if (e->len > bs / 4 || (e->off + (int64_t)e->len - 1) / (int64_t)bs != (int64_t)blk)
			continue; /* only small entries within one block count */
		h = ((uint64_t)(uintptr_t)e->cap->obj ^ blk * 0x9e3779b97f4a7c15ull) *
		    0xc2b2ae3d27d4eb4full;
		for (k = (uint32_t)(h >> 32) & mask; tab[k] != UINT32_MAX; k = (k + 1) & mask)
			if (g[tab[k]].obj == e->cap->obj && g[tab[k]].blk == blk)
				break;
		if (tab[k] == UINT32_MAX) {
			g[ng] = (struct pgroup){ e->cap->obj, blk, 0, 0 };
			tab[k] = ng++;
		}
		gid[i] = tab[k];
		g[gid[i]].n++;
	}
	for (uint32_t k = 0, at = 0; k < ng; k++) {
		g[k].at = at;
		at += g[k].n;
		g[k].n = 0;
	}
	for (uint32_t i = 0; i < r->nent; i++)
		if (gid[i] != UINT32_MAX)
			order[g[gid[i]].at + g[gid[i]].n++] = i;
	for (uint32_t k = 0; k < ng; k++) {
		uint32_t *idx = order + g[k].at;
		uint64_t covered = 0, blen = bs;
		int64_t end = 0;

		if (g[k].n < 2)
			continue;
		if ((uint64_t)g[k].obj->size - g[k].blk * bs < bs)
			blen = (uint64_t)g[k].obj->size - g[k].blk * bs;
		sort_by_off(r->ents, idx, g[k].n);
		for (uint32_t i = 0; i < g[k].n; i++) { /* count each byte once */
			const struct ent *e = &r->ents[idx[i]];

			if (e->off + (int64_t)e->len > end) {
				covered += (uint64_t)(e->off + (int64_t)e->len -
						      (e->off > end ? e->off : end));
				end = e->off + (int64_t)e->len;
			}
		}
		if (covered * 4 < blen ||
		    objfs_cache_has(cache, g[k].obj->cobj.id, g[k].blk))
			continue;
		if (!objfs_cache_prefetch(cache, &g[k].obj->cobj, (int64_t)(g[k].blk * bs), bs,
					  NULL))
			break; /* no room: the rest are filled as they are */
	}
out:
	free(tab);
	free(gid);
	free(order);
	free(g);
}

/* Queues @j for a fill worker: behind its session's jobs, the session
 * and its uid joining the turns when they had none queued. */
static void job_queue(struct job *j)
{
	struct session *ss = j->ss;
	struct objfs_side *s = ss->side;
	struct uid_use *u = ss->use;

	pthread_mutex_lock(&s->jlock);
	if (STAILQ_EMPTY(&ss->jq)) {
		if (TAILQ_EMPTY(&u->jsess))
			TAILQ_INSERT_TAIL(&s->jturn, u, jlink);
		TAILQ_INSERT_TAIL(&u->jsess, ss, jlink);
	}
	STAILQ_INSERT_TAIL(&ss->jq, j, next);
	s->jqueued++;
	pthread_cond_signal(&s->jcond);
	pthread_mutex_unlock(&s->jlock);
}

/*
 * The next job for a worker, or NULL: the first job of the first session
 * of the uid whose turn it is; the session goes behind the uid's others,
 * the uid behind the other uids. jlock held.
 */
static struct job *job_take(struct objfs_side *s)
{
	struct uid_use *u = TAILQ_FIRST(&s->jturn);
	struct session *ss;
	struct job *j;

	if (!u)
		return NULL;
	ss = TAILQ_FIRST(&u->jsess);
	j = STAILQ_FIRST(&ss->jq);
	STAILQ_REMOVE_HEAD(&ss->jq, next);
	TAILQ_REMOVE(&u->jsess, ss, jlink);
	TAILQ_REMOVE(&s->jturn, u, jlink);
	if (!STAILQ_EMPTY(&ss->jq))
		TAILQ_INSERT_TAIL(&u->jsess, ss, jlink);
	if (!TAILQ_EMPTY(&u->jsess))
		TAILQ_INSERT_TAIL(&s->jturn, u, jlink);
	s->jqueued--;
	return j;
}

/* The first parked job, taken off ss->parked, when the session's runs
 * are below RUNS_RESUME; else NULL. ss->lock held. */
static struct job *runs_wake_locked(struct session *ss)
{
	struct job *w = STAILQ_FIRST(&ss->parked);

	if (!w || __atomic_load_n(&ss->runs, __ATOMIC_SEQ_CST) >= RUNS_RESUME)
		return NULL;
	STAILQ_REMOVE_HEAD(&ss->parked, next);
	__atomic_sub_fetch(&ss->nparked, 1, __ATOMIC_SEQ_CST);
	w->resumed = 1;
	return w;
}

/* Wakes the first parked job of @ss if its runs are below RUNS_RESUME. */
static void runs_wake(struct session *ss)
{
	struct job *w;

	if (!__atomic_load_n(&ss->nparked, __ATOMIC_SEQ_CST))
		return;
	pthread_mutex_lock(&ss->lock);
	w = runs_wake_locked(ss);
	pthread_mutex_unlock(&ss->lock);
	if (w)
		job_queue(w);
}

/*
 * Room for one more run of @j's session: 1, or 0 with @j parked (its
 * start count held) until runs_wake() queues it again. A job that jobs
 * parked before it meets parks behind them (pieces are published in
 * order: a later piece taking the room would only hold the earlier back);
 * one woken goes first. Parking publishes nparked before reading runs, and
 * a run's end writes runs before reading nparked, so one of the two sees
 * the other: no job parks with nobody left to wake it.
 */
static int runs_take(struct session *ss, struct job *j)
{
	struct job *w;

	if (j->resumed || !__atomic_load_n(&ss->nparked, __ATOMIC_SEQ_CST)) {
		if (__atomic_add_fetch(&ss->runs, 1, __ATOMIC_SEQ_CST) <= RUNS_MAX)
			return 1;
		__atomic_sub_fetch(&ss->runs, 1, __ATOMIC_SEQ_CST);
	}
	pthread_mutex_lock(&ss->lock);
	if (j->resumed)
		STAILQ_INSERT_HEAD(&ss->parked, j, next);
	else
		STAILQ_INSERT_TAIL(&ss->parked, j, next);
	j->resumed = 0;
	__atomic_add_fetch(&ss->nparked, 1, __ATOMIC_SEQ_CST);
	w = runs_wake_locked(ss);
	pthread_mutex_unlock(&ss->lock);
	if (w == j) { /* the room came back meanwhile */
		__atomic_add_fetch(&ss->runs, 1, __ATOMIC_SEQ_CST);
		return 1;
	}
	if (w)
		job_queue(w);
	return 0;
}

/* A run's fill ended: its room goes back, then run_done(). */
static void fill_done(void *arg, int err)
{
	struct run *u = arg;
	struct session *ss = u->j->ss;

	__atomic_sub_fetch(&ss->runs, 1, __ATOMIC_SEQ_CST);
	runs_wake(ss); /* before run_done: the job holds the session */
	run_done(u, err);
}

/*
 * Starts @j's runs from where it stopped (j->at, j->nr), each as the
 * session's RUNS_MAX gives room; parks @j when it gives none. Once every
 * run is started (or the session ended: the rest are cancelled), drops
 * the start count.
 */
static void job_start_runs(struct job *j)
{
	struct session *ss = j->ss;
	struct objfs_cache *cache = ss->side->cache;
	char *slot = ss->data + (size_t)j->slot * ss->slot_size;
	struct ent *ents = j->r->ents;
	uint32_t *idx = j->mem;
	struct run *runs = (struct run *)(void *)(idx + j->ne + (j->ne & 1));

	while (j->at < j->ne) {
		uint32_t a = j->at, b = a + 1;
		const struct ent *f = &ents[idx[a]];
		int64_t end = f->off + (int64_t)f->len;
		int64_t delta = (int64_t)f->slot_off - f->off;
		int direct = 1, over = __atomic_load_n(&ss->ending, __ATOMIC_RELAXED) ||
				      __atomic_load_n(&ss->failed, __ATOMIC_RELAXED);
		struct run *u = &runs[j->nr];

		if (!over && !runs_take(ss, j))
			return; /* parked: resumed by a run's end */
		for (; b < j->ne; b++) {
			const struct ent *e = &ents[idx[b]];

			if (e->cap->obj != f->cap->obj || e->off > end)
				break;
			if (e->off < end || (int64_t)e->slot_off - e->off != delta)
				direct = 0;
			if (e->off + (int64_t)e->len > end)
				end = e->off + (int64_t)e->len;
		}
		*u = (struct run){ j, idx + a, b - a, f->off, NULL };
		j->at = b;
		j->nr++;
		__atomic_add_fetch(&j->left, 1, __ATOMIC_ACQ_REL);
		if (!over && !direct && !(u->tmp = malloc((size_t)(end - f->off))))
			over = ENOMEM;
		if (over) {
			if (over == ENOMEM) {
				fill_done(u, -ENOMEM);
			} else {
				j->cancelled = 1;
				run_done(u, -ECANCELED);
			}
			continue;
		}
		__atomic_add_fetch(&ss->side->fill_runs, 1, __ATOMIC_RELAXED);
		objfs_cache_fill(cache, &f->cap->obj->cobj, f->off, (size_t)(end - f->off),
				 u->tmp ? u->tmp : slot + f->off + delta,
				 u->tmp ? 0 : OBJFS_FILL_DEVICE, fill_done, u);
	}
	if (j->resumed) {
		j->resumed = 0;
		runs_wake(ss); /* the next parked one, if the room is there */
	}
	job_put(j);
}

/*
 * Runs one job on a fill worker: its entries sorted by object and offset,
 * cut into runs of adjacent or overlapping ranges (side_proto.h, 6), one
 * objfs_cache_fill each (cached blocks are copied, the rest lands in the
 * slot from the network or the disk cache); the last fill to end
 * publishes. A long entry's part is one run. A job parked for its
 * session's RUNS_MAX comes back here to go on.
 */
static void job_run(struct job *j)
{
	struct session *ss = j->ss;
	struct objfs_cache *cache = ss->side->cache;
	char *slot = ss->data + (size_t)j->slot * ss->slot_size;
	struct ent *ents = j->r->ents;
	uint32_t *idx;

	if (j->resumed) {
		job_start_runs(j);
		return;
	}
	if (__atomic_load_n(&ss->ending, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&ss->failed, __ATOMIC_RELAXED)) {
		job_end(j, -ECANCELED);
		return;
	}
	if (!j->mapped_in) {
		/*
		 * The slot's first fill of this session: if its pages are in
		 * memory (the client's cudaHostRegister faulted them in) they are
		 * mapped here in one call, not a page fault per 4 KiB page inside
		 * the copies (512 a 2 MiB slot, ~1.5 us each). A slot the client
		 * never touched (host memory) faults in only what is filled.
		 * Older kernels: faults, as before.
		 */
		uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)slot & ~(pg - 1);
		unsigned char in = 0;

		if (!mincore((void *)(((uintptr_t)slot + ss->slot_size - 1) & ~(pg - 1)), 1, &in) &&
		    (in & 1))
			(void)madvise((void *)a, (uintptr_t)slot + ss->slot_size - a,
				      MADV_POPULATE_WRITE);
		j->mapped_in = 1;
	}
	j->left = 1;
	j->mem = NULL;
	if (j->sub_len) { /* a part of a long entry: one run, marked failed if it fails */
		j->one = (struct run){ j, &j->e0, 1, j->sub_off, NULL };
		j->left++;
		__atomic_add_fetch(&ss->side->fill_runs, 1, __ATOMIC_RELAXED);
		objfs_cache_fill(cache, &ents[j->e0].cap->obj->cobj, j->sub_off, j->sub_len, slot,
				 OBJFS_FILL_DEVICE, run_done, &j->one);
		job_put(j);
		return;
	}
	/* idx, then the runs at an 8-byte boundary; freed by job_put. */
	idx = malloc((j->ne + 1) * sizeof(*idx) + j->ne * sizeof(struct run));
	if (!idx) {
		j->left = 0;
		job_end(j, -ENOMEM);
		return;
	}
	for (uint32_t i = 0; i < j->ne; i++)
		idx[i] = j->e0 + i;
	qsort_r(idx, j->ne, sizeof(*idx), ent_cmp, ents);
	j->mem = idx;
	j->at = 0;
	j->nr = 0;
	job_start_runs(j);
}

static void *worker_main(void *arg)
{
	struct objfs_side *s = arg;

	for (;;) {
		struct job *j;

		pthread_mutex_lock(&s->jlock);
		while (!s->jqueued && !s->jstop)
			pthread_cond_wait(&s->jcond, &s->jlock);
		j = job_take(s);
		pthread_mutex_unlock(&s->jlock);
		if (!j)
			return NULL; /* stopping, and nothing left */
		job_run(j);
	}
}

/*
 * Ends @ss's jobs still queued for a worker, on this thread (the session
 * is ending: each is cancelled without a fill, or a parked one starts no
 * more). Session thread.
 */
static void jobs_drop(struct session *ss)
{
	struct objfs_side *s = ss->side;
	STAILQ_HEAD(, job) mine = STAILQ_HEAD_INITIALIZER(mine);
	struct job *j;

	pthread_mutex_lock(&s->jlock);
	if (!STAILQ_EMPTY(&ss->jq)) {
		struct uid_use *u = ss->use;

		while ((j = STAILQ_FIRST(&ss->jq))) {
			STAILQ_REMOVE_HEAD(&ss->jq, next);
			STAILQ_INSERT_TAIL(&mine, j, next);
			s->jqueued--;
		}
		TAILQ_REMOVE(&u->jsess, ss, jlink);
		if (TAILQ_EMPTY(&u->jsess))
			TAILQ_REMOVE(&s->jturn, u, jlink);
	}
	pthread_mutex_unlock(&s->jlock);
	while ((j = STAILQ_FIRST(&mine))) {
		STAILQ_REMOVE_HEAD(&mine, next);
		job_run(j);
	}
}

/*
 * Hands the next piece of the oldest undispatched request to the fill
 * workers, once its slot is free (wrap-around: the only wait). Session
 * thread only. 0, or -errno to end the session.
 */
static int dispatch_one(struct session *ss)
{
	uint64_t p = ss->fill_piece;
	uint32_t slot = objfs_piece_slot(p, ss->slots);
	uint32_t g = (uint32_t)objfs_piece_gen(p, ss->slots);
	struct job *j = &ss->jobs[slot];
	struct req *r;
	struct ent *e;
	int err;

	err = wait_release(ss, slot, g);
	if (err)
		return err;
	pthread_mutex_lock(&ss->lock);
	/* A client that lies about rel must not make us reuse a busy slot. */
	while (j->state != J_FREE && !ss->failed)
		pthread_cond_wait(&ss->cond, &ss->lock);
	if (ss->failed) {
		pthread_mutex_unlock(&ss->lock);
		return 0;
	}
	if (peer_gone(ss)) { /* slots released in advance: no other wait notices */
		pthread_mutex_unlock(&ss->lock);
		return -ECONNRESET;
	}
	r = &ss->q[(ss->qhead + ss->qdisp) % OBJFS_SESSION_QUEUE];
	j->ss = ss;
	j->r = r;
	j->piece = p;
	j->slot = slot;
	j->state = J_RUNNING;
	j->err = 0;
	j->resumed = 0;
	j->cancelled = 0;
	j->e0 = r->disp_ent;
	e = &r->ents[r->disp_ent];
	if (e->len > ss->slot_size) { /* a long entry: its next part, a whole piece */
		j->ne = 1;
		j->sub_off = e->off + (int64_t)r->disp_done;
		j->sub_len = e->len - r->disp_done < ss->slot_size ? (size_t)(e->len - r->disp_done)
								    : ss->slot_size;
		j->len = j->sub_len;
		r->disp_done += j->sub_len;
		if (r->disp_done == e->len) {
			r->disp_ent++;
			r->disp_done = 0;
		}
	} else { /* every entry placed in this piece */
		uint32_t k = r->disp_ent;

		while (k < r->nent && r->ents[k].piece == p)
			k++;
		j->ne = k - r->disp_ent;
		j->sub_off = 0;
		j->sub_len = 0;
		j->len = r->ents[k - 1].slot_off + r->ents[k - 1].len;
		r->disp_ent = k;
	}
	if (r->disp_ent == r->nent)
		ss->qdisp++;
	ss->inflight++;
	ss->fill_piece++;
	pthread_mutex_unlock(&ss->lock);
	job_queue(j);
	return 0;
}

/* Whether a request has pieces left to dispatch. Session thread. */
static int has_work(struct session *ss)
{
	int w;

	pthread_mutex_lock(&ss->lock);
	w = ss->qdisp < ss->qlen;
	pthread_mutex_unlock(&ss->lock);
	return w;
}

/* What a connection held (pending, or a session and its ring). side->lock held. */
static void uncount_locked(struct session *ss)
{
	struct objfs_side *s = ss->side;
	struct uid_use *u = objfs_side_uid_get(s, ss->uid);

	if (ss->counted) {
		s->st.sessions_open--;
		s->ring_bytes -= ss->ring_bytes;
	}
	s->pending -= ss->pending;
	if (u) { /* found: it was made when the connection was counted */
		u->pending -= ss->pending;
		if (ss->counted) {
			u->sessions--;
			u->ring_bytes -= ss->ring_bytes;
		}
		objfs_side_uid_put(s, u);
	}
	ss->pending = 0;
	ss->counted = 0;
}

/*
 * Waits, after the session ended, until its client hangs up (side.c's
 * header: the ring's end). The sending side is shut: the client reads EOF
 * after what was sent, and sees POLLRDHUP. Nothing more is read: what the
 * client still sends stays in the socket's bounded queue and its sends
 * then block. With the sending side shut, POLLHUP comes when the client
 * closes (or shuts its own sending side), or objfs_side_free shuts the
 * socket. 1 at the hangup, 0 when the server stops. Session thread.
 */
static int linger(struct session *ss)
{
	struct pollfd p = { ss->fd, 0, 0 };

	shutdown(ss->fd, SHUT_WR);
	while (!__atomic_load_n(&ss->side->stopping, __ATOMIC_RELAXED)) {
		if (poll(&p, 1, 1000) == 1 && (p.revents & (POLLHUP | POLLERR | POLLNVAL)))
			return !__atomic_load_n(&ss->side->stopping, __ATOMIC_RELAXED);
	}
	return 0;
}

static void *session_main(void *arg)
{
	struct session *ss = arg;
	struct objfs_side *s = ss->side;
	char buf[OBJFS_MSG_MAX] __attribute__((aligned(8)));
	struct pollfd p = { ss->fd, POLLIN, 0 };
	int err;
	ssize_t n;

	/* HELLO, within a bounded time. */
	err = poll(&p, 1, HELLO_TIMEOUT_MS);
	if (err <= 0) {
		err = err == 0 ? -ETIMEDOUT : -errno;
		goto out;
	}
	n = recv_msg(ss->fd, buf);
	if (n < 0) {
		err = (int)n;
		goto out;
	}
	if (((struct objfs_msg_hdr *)buf)->type != OBJFS_MSG_HELLO) {
		err = -EPROTO;
		goto out;
	}
	err = do_hello(ss, (const struct objfs_msg_hello *)buf);
	if (err)
		goto out;
	sess_state(ss, S_SERVING, NULL);
	while (!__atomic_load_n(&s->stopping, __ATOMIC_RELAXED)) {
		int failed = __atomic_load_n(&ss->failed, __ATOMIC_RELAXED);

		if (failed) {
			err = -failed;
			break;
		}
		err = has_work(ss) ? dispatch_one(ss) : pump(ss, 200);
		if (err)
			break;
		if (ss->ndet)
			handles_sweep(ss);
	}
	/* Jobs of ours still queued are dropped; those copying into the ring end. */
	pthread_mutex_lock(&ss->lock);
	__atomic_store_n(&ss->ending, 1, __ATOMIC_RELAXED); /* job_run reads it unlocked */
	pthread_mutex_unlock(&ss->lock);
	jobs_drop(ss);
	pthread_mutex_lock(&ss->lock);
	while (ss->inflight)
		pthread_cond_wait(&ss->cond, &ss->lock);
	pthread_mutex_unlock(&ss->lock);
	/* pieces of queued requests never dispatched (the assembling one has none) */
	__atomic_add_fetch(&s->fills_cancelled, ss->next_piece - ss->fill_piece,
			   __ATOMIC_RELAXED);
out:
	if (err && err != -ECONNRESET && err != -ESHUTDOWN && err != -ECANCELED) {
		objfs_info("side: session %llu (pid %d uid %u) ends: %s",
			   (unsigned long long)ss->id, (int)ss->pid, (unsigned)ss->uid,
			   strerror(-err));
		send_err(ss->fd, -err);
	}
	sess_state(ss, S_CLOSED, err ? strerror(-err) : NULL);
	if (ss->ring) {
		objfs_side_guard_del(ss->ring);
		munmap(ss->ring, ss->ring_bytes);
	}
	ss->ring = NULL;
	for (uint32_t h = 0; h < ss->nhnd; h++)
		objfs_side_cap_unref(s, ss->hnd[h].cap);
	free(ss->hnd);
	ss->hnd = NULL;
	ss->nhnd = 0;
	for (unsigned i = 0; i < OBJFS_SESSION_QUEUE; i++) {
		free(ss->q[i].ents);
		ss->q[i].ents = NULL;
	}
	if (ss->ringfd >= 0) {
		/*
		 * The ring's pages (the fills' are charged to the daemon) and its
		 * budget end together, at the client's hangup: the whole ring,
		 * header included, is punched out (a memfd the client kept then
		 * holds nothing of ours), then uncount_locked gives the budget
		 * back. Not at the unmount: a client may still copy what was
		 * published, and the budget ends with the server.
		 */
		if (ss->ring_given && linger(ss))
			(void)fallocate(ss->ringfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
					(off_t)ss->ring_bytes);
		close(ss->ringfd);
		ss->ringfd = -1;
	}
	/*
	 * What was sent (DONEs, the ERR that says why the session ended) must
	 * reach the client before its EOF. A SEQPACKET socket closed with the
	 * peer's messages still unread makes the kernel report ECONNRESET to
	 * the peer ahead of everything queued for it (the datagram receive
	 * path checks the error first): a client that kept sending FILLs as
	 * its session ended lost every DONE and the ERR (check_side's
	 * test_unread_dones, now and then). So nothing more from the client
	 * (SHUT_RD: its sends fail with EPIPE), what it sent is discarded,
	 * then the close.
	 */
	shutdown(ss->fd, SHUT_RD);
	for (unsigned i = 0; i < (1u << 16); i++) {
		char b[64];

		if (recv(ss->fd, b, sizeof(b), MSG_DONTWAIT) <= 0)
			break;
	}
	pthread_mutex_lock(&s->lock);
	close(ss->fd);
	ss->fd = -1;
	ss->finished = 1;
	uncount_locked(ss);
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* Joins and frees finished sessions (all when @all). With side->lock held. */
static void sessions_reap(struct objfs_side *s, int all)
{
	for (struct session **pp = &s->sessions; *pp;) {
		struct session *ss = *pp;

		if (ss->finished || all) {
			*pp = ss->next;
			pthread_mutex_unlock(&s->lock);
			pthread_join(ss->thread, NULL);
			pthread_cond_destroy(&ss->cond);
			pthread_mutex_destroy(&ss->lock);
			free(ss);
			pthread_mutex_lock(&s->lock);
			pp = &s->sessions; /* the list may have changed meanwhile */
		} else {
			pp = &ss->next;
		}
	}
}

/*
 * Makes the kernel refuse descriptors sent to socket @fd (SO_PASSRIGHTS
 * 0: the sender's sendmsg fails with EPERM), on the listening socket
 * before listen() so that every connection inherits it, and on each
 * accepted one again. No file of a client's then ever reaches the daemon:
 * the last reference to a file dropped here (a message read, a socket
 * closed with messages queued) runs its release in this thread, and a
 * file of the client's own FUSE mount can make that wait, unkillably
 * (docs/reliability.md). Linux 6.16 has the option; before it, logged
 * once as the limit it is. 0 refused, -1 not available.
 */
static int refuse_rights(int fd)
{
	static int logged;
	int zero = 0;

#ifdef SO_PASSRIGHTS
	if (setsockopt(fd, SOL_SOCKET, SO_PASSRIGHTS, &zero, sizeof(zero)) == 0)
		return 0;
#else
	(void)zero;
#endif
	if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
		objfs_info("side: this kernel cannot refuse descriptors on the side socket "
			   "(SO_PASSRIGHTS, Linux 6.16): a local client that sends one can make "
			   "the daemon wait on its release");
	return -1;
}

/*
 * Accepts one connection: -EMFILE/-ENFILE when out of descriptors (then the
 * caller sheds it), 0 otherwise, whether it was admitted or refused.
 * Admission: the peer's SO_PEERCRED uid is checked here (the connection is
 * closed at once when the mount admits one uid only), and the connection
 * counts as pending, at most OBJFS_SIDE_PENDING_PER_UID per uid, until its
 * HELLO; only a HELLO with a capability of the same uid makes it a
 * session, within the session and ring-byte bounds of side.h. The daemon
 * makes the ring and never takes a descriptor from a client
 * (refuse_rights, recv_msg).
 */
static int accept_one(struct objfs_side *s)
{
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	struct session *ss;
	struct uid_use *u;
	const char *why = NULL;
	int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC), err;

	if (fd < 0)
		return errno == EMFILE || errno == ENFILE ? -errno : 0;
	refuse_rights(fd); /* inherited from the listener where the kernel does */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl)) {
		close(fd);
		return 0;
	}
	if (s->cfg.only_uid >= 0 && cred.uid != (uid_t)s->cfg.only_uid) {
		close(fd); /* cannot use the mount at all: nothing to say to it */
		return 0;
	}
	pthread_mutex_lock(&s->lock);
	sessions_reap(s, 0);
	u = objfs_side_uid_get(s, cred.uid);
	if (!u)
		why = "out of memory";
	else if (u->pending >= OBJFS_SIDE_PENDING_PER_UID ||
		 (s->pending >= s->cfg.max_sessions && !objfs_side_reserved(s, cred.uid)))
		why = "too many connections waiting for their HELLO";
	if (why) {
		s->st.sessions_refused++;
		objfs_side_uid_put(s, u);
		pthread_mutex_unlock(&s->lock);
		objfs_warn("side: refusing a connection of pid %d uid %u: %s", (int)cred.pid,
			   (unsigned)cred.uid, why);
		send_err(fd, EBUSY);
		close(fd);
		return 0;
	}
	ss = calloc(1, sizeof(*ss));
	if (!ss) {
		objfs_side_uid_put(s, u);
		pthread_mutex_unlock(&s->lock);
		close(fd);
		return 0;
	}
	ss->side = s;
	ss->fd = fd;
	ss->ringfd = -1;
	ss->uid = cred.uid;
	ss->pid = cred.pid;
	ss->id = ++s->next_session;
	ss->state = S_HELLO;
	ss->pending = 1;
	u->pending++;
	s->pending++;
	pthread_mutex_init(&ss->lock, NULL);
	pthread_cond_init(&ss->cond, NULL);
	STAILQ_INIT(&ss->parked);
	STAILQ_INIT(&ss->jq);
	err = pthread_create(&ss->thread, NULL, session_main, ss);
	if (err) {
		uncount_locked(ss);
		pthread_mutex_unlock(&s->lock);
		objfs_warn("side: cannot start a session thread: %s", strerror(err));
		send_err(fd, EAGAIN);
		close(fd);
		pthread_cond_destroy(&ss->cond);
		pthread_mutex_destroy(&ss->lock);
		free(ss);
		return 0;
	}
	pthread_setname_np(ss->thread, "objfs-session");
	ss->next = s->sessions;
	s->sessions = ss;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/*
 * The accept thread. Out of descriptors, the pending connection would make
 * poll return at once forever (a spinning thread): a reserved descriptor
 * is closed to accept it and close it at once (the client sees EOF), then
 * reopened, and the event is logged at most once a minute.
 */
static void *accept_main(void *arg)
{
	struct objfs_side *s = arg;
	struct pollfd p[2] = { { s->lfd, POLLIN, 0 }, { s->wakefd, POLLIN, 0 } };
	int spare = s->spare; /* opened before this thread: it may start late */
	double logged = 0;

	while (!__atomic_load_n(&s->stopping, __ATOMIC_RELAXED)) {
		int err;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (__atomic_load_n(&s->stopping, __ATOMIC_RELAXED))
			break;
		if (!(p[0].revents & POLLIN))
			continue;
		err = accept_one(s);
		if (!err)
			continue;
		if (objfs_now_s() - logged > 60) {
			logged = objfs_now_s();
			objfs_warn("side: out of file descriptors (%s): shedding connections",
				   strerror(-err));
		}
		if (spare >= 0) {
			close(spare);
			close(accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC));
			spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
		} else {
			poll(p + 1, 1, 100); /* no spare either: at least do not spin */
		}
	}
	if (spare >= 0)
		close(spare);
	s->spare = -1;
	return NULL;
}

/* ---------------------------------------------------------- server */

/*
 * Fill workers by default: one per core, 4 to 64. A warm readv is one
 * copy per byte (cache -> ring) on these workers while the GPU's DMA reads
 * the ring, so it is bound by the machine's memory bandwidth, which more
 * copiers reach further: one thread's memcpy reaches a fraction of it
 * (contrib/bench/memcpy_bw.c), and a worker per core makes warm batches
 * faster than half as many (contrib/gpu/bench_batch.sh).
 */
static unsigned default_workers(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 4 ? 4 : n > 64 ? 64 : (unsigned)n;
}

/* The global ring budget by default: a quarter of RAM, at least one ring. */
static uint64_t default_ring_budget(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	uint64_t b = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 4 : 1ull << 30;

	return b > OBJFS_RING_MAX_BYTES ? b : OBJFS_RING_MAX_BYTES;
}

/* Ends the fill workers once their queue is empty; frees the array. */
static void workers_stop(struct objfs_side *s)
{
	pthread_mutex_lock(&s->jlock);
	s->jstop = 1;
	pthread_cond_broadcast(&s->jcond);
	pthread_mutex_unlock(&s->jlock);
	for (unsigned i = 0; i < s->nworkers; i++)
		pthread_join(s->workers[i], NULL);
	free(s->workers);
	s->workers = NULL;
	s->nworkers = 0;
}

static int make_name(struct objfs_side *s, struct sockaddr_un *sa, socklen_t *salen)
{
	uint8_t r[8];

	if (s->cfg.sock_name) {
		if (strlen(s->cfg.sock_name) >= sizeof(s->sock) - 1 || !s->cfg.sock_name[0])
			return -ENAMETOOLONG;
		strcpy(s->sock, s->cfg.sock_name);
	} else {
		if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
			return -EIO;
		snprintf(s->sock, sizeof(s->sock), "@objfs.%d.%02x%02x%02x%02x%02x%02x%02x%02x",
			 (int)getpid(), r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
	}
	if (s->sock[0] != '@')
		unlink(s->sock);
	return objfs_sock_addr(s->sock, sa, salen);
}

int objfs_side_new(const struct objfs_side_cfg *cfg, struct objfs_cache *cache,
		   struct objfs_side **out)
{
	struct sockaddr_un sa;
	socklen_t salen;
	struct objfs_side *s;
	int err;

	*out = NULL;
	if (!objfs_ring_geometry_ok(cfg->ring_slots, cfg->ring_slot_size) || !cfg->max_sessions ||
	    !cfg->max_caps)
		return -EINVAL;
	err = objfs_side_guard_install();
	if (err)
		return err;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cfg = *cfg;
	s->cfg.sock_name = NULL;
	if (!s->cfg.ring_budget)
		s->cfg.ring_budget = default_ring_budget();
	s->cache = cache;
	s->wakefd = -1;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	pthread_mutex_init(&s->jlock, NULL);
	pthread_cond_init(&s->jcond, NULL);
	TAILQ_INIT(&s->jturn);
	s->owner = geteuid();
	err = objfs_side_caps_init(s);
	if (err)
		goto out_side;
	s->cfg.sock_name = cfg->sock_name;
	err = make_name(s, &sa, &salen);
	s->cfg.sock_name = NULL; /* not kept: the caller's string */
	if (err)
		goto out_side;
	s->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s->lfd < 0) {
		err = -errno;
		goto out_side;
	}
	refuse_rights(s->lfd);
	if (bind(s->lfd, (struct sockaddr *)&sa, salen) || listen(s->lfd, 64)) {
		err = -errno;
		goto out_sock;
	}
	if (s->sock[0] != '@')
		chmod(s->sock, 0666); /* access is checked per session: token + uid */
	s->wakefd = eventfd(0, EFD_CLOEXEC);
	if (s->wakefd < 0) {
		err = -errno;
		goto out_sock;
	}
	s->spare = open("/dev/null", O_RDONLY | O_CLOEXEC); /* -1: no shedding, only a pause */
	s->nworkers = cfg->fill_threads ? cfg->fill_threads : default_workers();
	s->workers = calloc(s->nworkers, sizeof(*s->workers));
	if (!s->workers) {
		err = -ENOMEM;
		goto out_wake;
	}
	for (unsigned i = 0; i < s->nworkers; i++) {
		err = -pthread_create(&s->workers[i], NULL, worker_main, s);
		if (err) {
			s->nworkers = i;
			goto out_workers;
		}
		pthread_setname_np(s->workers[i], "objfs-fill");
	}
	err = -pthread_create(&s->acceptor, NULL, accept_main, s);
	if (err)
		goto out_workers;
	s->acceptor_started = 1;
	objfs_info("side: GPU side API listening on %s (ring %u x %u bytes, %u fill workers)",
		   s->sock, cfg->ring_slots, cfg->ring_slot_size, s->nworkers);
	*out = s;
	return 0;
out_workers:
	workers_stop(s);
out_wake:
	if (s->spare >= 0)
		close(s->spare);
	close(s->wakefd);
out_sock:
	close(s->lfd);
	if (s->sock[0] != '@')
		unlink(s->sock);
out_side:
	free(s->chash);
	pthread_cond_destroy(&s->jcond);
	pthread_mutex_destroy(&s->jlock);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
	return err;
}

void objfs_side_get_stats(struct objfs_side *s, struct objfs_side_stats *st)
{
	pthread_mutex_lock(&s->lock);
	*st = s->st;
	st->fill_runs = __atomic_load_n(&s->fill_runs, __ATOMIC_RELAXED);
	st->fills_cancelled = __atomic_load_n(&s->fills_cancelled, __ATOMIC_RELAXED);
	st->caps = s->ncaps;
	st->ring_bytes = s->ring_bytes;
	pthread_mutex_unlock(&s->lock);
}

void objfs_side_free(struct objfs_side *s)
{
	uint64_t one = 1;

	if (!s)
		return;
	__atomic_store_n(&s->stopping, 1, __ATOMIC_RELAXED); /* the acceptor reads it unlocked */
	(void)!write(s->wakefd, &one, sizeof(one));
	if (s->acceptor_started)
		pthread_join(s->acceptor, NULL);
	pthread_mutex_lock(&s->lock);
	for (struct session *ss = s->sessions; ss; ss = ss->next)
		if (ss->fd >= 0)
			shutdown(ss->fd, SHUT_RDWR);
	sessions_reap(s, 1);
	/* Fetches started for capabilities borrow the records: wait for them. */
	objfs_side_caps_drain(s);
	pthread_mutex_unlock(&s->lock);
	workers_stop(s); /* every session has ended: no job is left */
	close(s->lfd);
	close(s->wakefd);
	if (s->sock[0] != '@')
		unlink(s->sock);
	pthread_cond_destroy(&s->jcond);
	pthread_mutex_destroy(&s->jlock);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
