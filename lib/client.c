/*
 * client: libobjfs, the client half of the GPU side API, without CUDA
 * (include/objfs.h is the public API, include/objfs/side_proto.h the
 * protocol and the ring layout shared with the daemon, src/side/ the daemon
 * half). Everything that calls CUDA is in client_cuda.c, behind
 * client_i.h; this file has no #if HAVE_CUDA and is the whole library when
 * CUDA is absent.
 *
 * Sessions. One per (process, mount), found in a registry by the daemon's
 * socket name (side_proto.h, 5): the first objfs_gpu_open of a mount makes
 * the session (socket, a sealed memfd ring the daemon makes and hands over
 * with HELLO_OK, mapped here and in the daemon, registered with
 * cudaHostRegister by client_cuda.c when a GPU is usable, a watchdog
 * thread) with HELLO; later opens ATTACH their capability to it: no memory
 * to pin (a ring per open would pin 128 GB for 1,000 shards), and no round
 * trip either: objfs_gpu_open returns once the ATTACH is sent, the
 * watchdog records the answer (handle id or refusal; the daemon answers in
 * order), and the first read naming the handle waits for it. Handles hold
 * a reference; the last close ends the session.
 *
 * Reads. Every read is a batch (struct batch, client_i.h): objfs_gpu_read
 * is a batch of one. Entries are checked, clamped to their file, their
 * buffers classified (the registry first, then client_cuda.c or a probe
 * of the CPU's view); those with bytes to read are placed in ring pieces
 * with the packing both sides compute (objfs_pack_place) and sent as one
 * FILL request under s->lock, which also covers enqueuing the pieces'
 * consumers, so on any one stream consumers appear in piece order
 * (otherwise a later piece could wait on a slot an earlier one must
 * free). Piece p lives in slot p % k as its use g = p / k + 1. The
 * consumer here is the CPU one (objfs_client_walk with memcpy): wait for
 * seq >= g on a futex, copy each entry's part, store rel = g and wake the
 * daemon; client_cuda.c has the stream-ordered one. An entry's result is
 * known only once the request's last DONE came (the daemon lists failed
 * entries there): the waiter, or the stream's last host function, waits
 * for it (the daemon sends it right after the last piece is published).
 *
 * Failure. The watchdog blocks on the socket. DONE messages complete
 * requests, ATTACH_OK answers the open waiting for it; ERR or EOF (daemon
 * killed, unmounted, or it ended the session) poisons the ring as
 * side_proto.h describes (OBJFS_SEQ_ERROR into every seq word releases
 * every GPU stream wait and every CPU waiter at once) and marks the
 * session dead: every entry of a request without its last DONE gets -EIO
 * (or the daemon's errno), later calls on its handles fail, and the next
 * objfs_gpu_open of the mount makes a new session. EOF arrives as soon as
 * the daemon process dies. The watchdog is portable (a socket and the
 * shared ring), so it lives here, not with the CUDA code it also protects.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "client_i.h"

#define HELLO_TIMEOUT_MS 10000
#define CPU_WAIT_NS     100000000L

/* ---------------------------------------------------------- ring state */

/* First piece the daemon has not published (it publishes in order). */
static uint64_t first_unpublished(const struct objfs_sess *s)
{
	uint64_t p = UINT64_MAX;

	for (uint32_t i = 0; i < s->slots; i++) {
		uint32_t g = __atomic_load_n(&s->ring->ctl[i].seq, __ATOMIC_ACQUIRE);
		uint64_t next;

		if (g >= OBJFS_RING_GEN_MAX)
			continue; /* poisoned already */
		next = i + (uint64_t)g * s->slots;
		if (next < p)
			p = next;
	}
	return p;
}

void objfs_client_poison(struct objfs_sess *s, int err)
{
	objfs_ring_poison(s->ring, s->slots, first_unpublished(s), err);
}

/* An errno from the daemon (a message or the shared ring: any value) as a
 * positive errno the caller may see: 1..4095, anything else EIO. */
static int peer_errno(int64_t e)
{
	return e > 0 && e < 4096 ? (int)e : EIO;
}

static void set_dead(struct objfs_sess *s, int err)
{
	pthread_mutex_lock(&s->lock);
	if (!s->dead)
		s->dead = err;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

/* A DONE message: completes (the last one of) the oldest request. 0 or -EPROTO. */
static int on_done(struct objfs_sess *s, const struct objfs_msg_done *d)
{
	struct batch *b;
	int err = 0;

	pthread_mutex_lock(&s->lock);
	b = STAILQ_FIRST(&s->waiting);
	if (!b || b->id != d->req_id) {
		err = -EPROTO;
	} else {
		for (uint32_t i = 0; i < d->count; i++)
			if (d->fail[i].idx < b->n)
				b->e[d->fail[i].idx].err = -peer_errno(d->fail[i].err);
		if (d->err)
			b->err = peer_errno(d->err);
		if (!d->more) {
			b->done = 1;
			STAILQ_REMOVE_HEAD(&s->waiting, next);
			s->outstanding--;
			s->qents -= b->n;
			pthread_cond_broadcast(&s->cond);
		}
	}
	pthread_mutex_unlock(&s->lock);
	return err;
}

static void *watchdog_main(void *arg)
{
	struct objfs_sess *s = arg;
	struct pollfd p[2] = { { s->sock, POLLIN, 0 }, { s->wakefd, POLLIN, 0 } };
	char buf[OBJFS_MSG_MAX] __attribute__((aligned(8)));
	int err = 0;

	for (;;) {
		const struct objfs_msg_hdr *m = (const void *)buf;
		ssize_t n;

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			err = errno;
			break;
		}
		if (p[1].revents)
			return NULL; /* the session's last handle is closing */
		n = recv(s->sock, buf, sizeof(buf), MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0) {
			err = n < 0 ? errno : EIO;
			break;
		}
		err = -objfs_msg_check(buf, (size_t)n);
		if (err)
			break;
		if (m->type == OBJFS_MSG_DONE) {
			err = -on_done(s, (const void *)buf);
			if (err)
				break;
		} else if (m->type == OBJFS_MSG_ATTACH_OK) {
			const struct objfs_msg_attach_ok *a = (const void *)buf;
			struct objfs_gpu *h;

			pthread_mutex_lock(&s->lock);
			h = STAILQ_FIRST(&s->attaching);
			if (h) {
				STAILQ_REMOVE_HEAD(&s->attaching, anext);
				s->nattaching--;
				h->handle = a->handle;
				h->attach_err = a->err ? peer_errno(a->err) : 0;
				h->attached = 1;
				pthread_cond_broadcast(&s->cond);
			}
			pthread_mutex_unlock(&s->lock);
			if (!h) {
				err = EPROTO;
				break;
			}
		} else if (m->type == OBJFS_MSG_ERR) {
			const struct objfs_msg_err *e = (const void *)buf;

			err = peer_errno(e->err);
			break;
		} else {
			err = EPROTO;
			break;
		}
	}
	/* The daemon ended the session or died: release everyone. */
	objfs_client_poison(s, err == ECONNRESET || err == EPIPE ? EIO : err);
	set_dead(s, EIO);
	return NULL;
}

/* ---------------------------------------------------------- CPU consumer */

uint32_t objfs_client_wait_piece(struct objfs_sess *s, uint64_t p)
{
	uint32_t *seq = &s->ring->ctl[objfs_piece_slot(p, s->slots)].seq;
	uint32_t g = (uint32_t)objfs_piece_gen(p, s->slots), v;

	while ((v = __atomic_load_n(seq, __ATOMIC_ACQUIRE)) < g)
		objfs_futex_wait_ns(seq, v, CPU_WAIT_NS);
	return v;
}

void objfs_client_release_piece(struct objfs_sess *s, uint64_t p)
{
	uint32_t *rel = &s->ring->ctl[objfs_piece_slot(p, s->slots)].rel;

	__atomic_store_n(rel, (uint32_t)objfs_piece_gen(p, s->slots), __ATOMIC_RELEASE);
	objfs_futex_wake_all(rel);
}

int objfs_client_walk(const struct batch *b, const struct walk_ops *ops, void *arg)
{
	const struct objfs_sess *s = b->s;
	uint64_t cur = UINT64_MAX;
	size_t used = 0;
	int err = 0;

	for (uint32_t i = 0; i < b->n && !err; i++) {
		const struct bent *e = &b->e[i];
		uint64_t np = e->len > s->slot_size ? objfs_pieces(e->len, s->slot_size) : 1;

		for (uint64_t k = 0; k < np && !err; k++) {
			uint64_t p = e->piece + k, done = k * s->slot_size;
			size_t len = e->len - done < s->slot_size ? (size_t)(e->len - done) : s->slot_size;
			const char *src = s->data + (size_t)objfs_piece_slot(p, s->slots) * s->slot_size;

			if (p != cur) {
				if (cur != UINT64_MAX)
					err = ops->close(arg, cur, used);
				if (!err)
					err = ops->open(arg, p);
				cur = p;
				used = 0;
			}
			if (!err)
				err = ops->copy(arg, e, src + e->slot_off, done, len);
			used = e->slot_off + len;
		}
	}
	if (!err && cur != UINT64_MAX)
		err = ops->close(arg, cur, used);
	return err;
}

static int cpu_open(void *arg, uint64_t p)
{
	struct objfs_sess *s = arg;

	if (objfs_client_wait_piece(s, p) != OBJFS_SEQ_ERROR)
		return 0;
	/* Poisoned: published pieces below err_piece are intact. */
	if (p < __atomic_load_n(&s->ring->err_piece, __ATOMIC_SEQ_CST))
		return 0;
	return -peer_errno(__atomic_load_n(&s->ring->err, __ATOMIC_SEQ_CST));
}

static int cpu_copy(void *arg, const struct bent *e, const char *src, uint64_t dst_off,
		    size_t len)
{
	(void)arg;
	memcpy(e->buf + dst_off, src, len);
	return 0;
}

static int cpu_close(void *arg, uint64_t p, size_t len)
{
	struct objfs_sess *s = arg;
	uint32_t slot = objfs_piece_slot(p, s->slots);

	if (__atomic_load_n(&s->ring->ctl[slot].len, __ATOMIC_RELAXED) != len &&
	    __atomic_load_n(&s->ring->ctl[slot].seq, __ATOMIC_ACQUIRE) != OBJFS_SEQ_ERROR) {
		objfs_client_poison(s, EPROTO);
		return -EPROTO;
	}
	objfs_client_release_piece(s, p);
	return 0;
}

static const struct walk_ops cpu_ops = { cpu_open, cpu_copy, cpu_close };

int objfs_client_cpu_consume(struct batch *b)
{
	return objfs_client_walk(b, &cpu_ops, b->s);
}

void objfs_client_finish(struct batch *b, int cerr)
{
	struct objfs_sess *s = b->s;
	int err;

	pthread_mutex_lock(&s->lock);
	/*
	 * A consumer that failed (a poisoned ring, a piece of the wrong length)
	 * released no more slots: the daemon may never get to the DONE. The
	 * session is over for this process; do not wait for it.
	 */
	if (cerr && !s->dead) {
		s->dead = EIO;
		pthread_cond_broadcast(&s->cond);
	}
	while (!b->done && !s->dead)
		pthread_cond_wait(&s->cond, &s->lock);
	if (!b->done) { /* the session ended first: the watchdog no longer completes it */
		STAILQ_REMOVE(&s->waiting, b, batch, next);
		s->outstanding--;
		s->qents -= b->n;
		b->done = 1;
		b->err = s->dead;
	}
	err = cerr ? cerr : b->err ? -b->err : 0;
	pthread_mutex_unlock(&s->lock);
	for (uint32_t i = 0; i < b->n; i++)
		*b->e[i].nread = err ? err : b->e[i].err ? b->e[i].err : (ssize_t)b->e[i].len;
}

/* ---------------------------------------------------------- submission */

/* Sends @len bytes at @m under s->lock; a failure kills the session. 0 or -errno. */
static int send_locked(struct objfs_sess *s, const void *m, size_t len)
{
	ssize_t r = send(s->sock, m, len, MSG_NOSIGNAL);

	if (r == (ssize_t)len)
		return 0;
	if (!s->dead)
		s->dead = EIO;
	return r < 0 && errno != EPIPE && errno != ECONNRESET ? -errno : -EIO;
}

int objfs_client_submit_locked(struct objfs_sess *s, struct batch *b)
{
	char buf[OBJFS_MSG_MAX] __attribute__((aligned(8)));
	struct objfs_msg_fill *m = (struct objfs_msg_fill *)buf;
	struct objfs_pack pk = { 0, 0 };
	uint64_t pieces;
	int err;

	for (uint32_t i = 0; i < b->n; i++)
		b->e[i].piece = objfs_pack_place(&pk, b->e[i].len, s->slot_size, &b->e[i].slot_off);
	pieces = objfs_pack_pieces(&pk);
	while (!s->dead && (s->outstanding >= MAX_OUTSTANDING ||
			    (s->qents && s->qents + b->n > OBJFS_SESSION_ENTS)))
		pthread_cond_wait(&s->cond, &s->lock);
	if (s->dead)
		return -s->dead;
	if (objfs_piece_gen(s->next_piece + pieces - 1, s->slots) >= OBJFS_RING_GEN_MAX)
		return -EOVERFLOW; /* about 4 PiB through one session: reopen */
	b->id = ++s->next_req;
	b->first_piece = s->next_piece;
	b->last_piece = s->next_piece + pieces - 1;
	for (uint32_t first = 0; first < b->n;) {
		uint32_t count = b->n - first < OBJFS_FILL_ENTS_PER_MSG ? b->n - first
									: OBJFS_FILL_ENTS_PER_MSG;
		size_t len = objfs_msg_size(OBJFS_MSG_FILL, count);

		memset(m, 0, sizeof(*m));
		objfs_msg_init(&m->h, OBJFS_MSG_FILL, (uint32_t)len);
		m->req_id = b->id;
		m->first_piece = b->first_piece;
		m->nent = b->n;
		m->first = first;
		m->count = count;
		for (uint32_t i = 0; i < count; i++) {
			const struct bent *e = &b->e[first + i];

			m->ent[i] = (struct objfs_fill_ent){ e->handle, 0, e->off, e->len };
		}
		err = send_locked(s, m, len);
		if (err)
			return err; /* the session is dead: nothing waits for these pieces */
		first += count;
	}
	for (uint32_t i = 0; i < b->n; i++)
		b->e[i].piece += b->first_piece;
	s->next_piece += pieces;
	s->outstanding++;
	s->qents += b->n;
	STAILQ_INSERT_TAIL(&s->waiting, b, next);
	return 0;
}

int objfs_client_cpu_accessible(void *buf, size_t len)
{
	char b;
	struct iovec local = { &b, 1 }, remote;

	if (!len)
		return 1;
	/*
	 * Probes the two ends: each byte read, then written back as it was
	 * (a read-only mapping passes the read alone, and the copy into it
	 * would raise SIGSEGV in the caller instead of -EFAULT). The
	 * buffer is the fill's destination: its bytes are about to change.
	 */
	for (int i = 0; i < 2; i++) {
		remote.iov_base = (char *)buf + (i ? len - 1 : 0);
		remote.iov_len = 1;
		if (syscall(SYS_process_vm_readv, getpid(), &local, 1, &remote, 1, 0) != 1)
			return errno == EFAULT ? 0 : 1; /* other errors (seccomp): assume host */
		if (syscall(SYS_process_vm_writev, getpid(), &local, 1, &remote, 1, 0) != 1)
			return errno == EFAULT ? -1 : 1;
	}
	return 1;
}

/* ---------------------------------------------------------- registration */

/*
 * Classifies @buf by looking: through CUDA when the ring is registered,
 * else it must be memory the CPU can reach. 0 or -errno.
 */
static int classify(struct objfs_sess *s, void *buf, size_t len, enum mem_kind *kind, int *dev,
		    struct reg *alloc)
{
	alloc->len = 0;
	if (s->cuda)
		return objfs_cuda_classify(s, buf, len, kind, dev, alloc);
	*dev = 0;
	*kind = MEM_HOST;
	switch (objfs_client_cpu_accessible(buf, len)) {
	case 1: return 0;
	case 0: return -EOPNOTSUPP; /* not mapped: device memory, and no CUDA */
	default: return -EFAULT;    /* mapped, not writable */
	}
}

/* Whether a registration of @s overlaps [buf, buf + len). s->lock held. */
static int regs_overlap_locked(const struct objfs_sess *s, const char *buf, size_t len)
{
	for (unsigned i = 0; i < s->nregs; i++)
		if (buf < s->regs[i].buf + s->regs[i].len && s->regs[i].buf < buf + len)
			return 1;
	return 0;
}

/*
 * Kind of @buf: from the registry, else by looking. *known gets a range
 * around @buf of that same kind where every entry would get this same
 * answer (the registration, or an allocation no registration overlaps),
 * or known->len 0. 0 or -errno.
 */
static int mem_kind_of(struct objfs_sess *s, char *buf, size_t len, enum mem_kind *kind, int *dev,
		       struct reg *known)
{
	int found = 0, err;

	known->len = 0;
	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < s->nregs; i++) {
		struct reg *r = &s->regs[i];

		if (buf >= r->buf && buf < r->buf + r->len) {
			found = len <= (size_t)(r->buf + r->len - buf) ? 1 : -1;
			*kind = r->kind;
			*dev = r->dev;
			*known = *r;
			break;
		}
	}
	pthread_mutex_unlock(&s->lock);
	if (found < 0)
		return -EFAULT;
	if (found)
		return 0;
	err = classify(s, buf, len, kind, dev, known);
	if (!err && known->len) { /* a registration inside keeps its own bounds */
		pthread_mutex_lock(&s->lock);
		if (regs_overlap_locked(s, known->buf, known->len))
			known->len = 0;
		pthread_mutex_unlock(&s->lock);
	}
	return err;
}

/* Whether [buf, buf + len) lies inside @r. */
static int reg_holds(const struct reg *r, const char *buf, size_t len)
{
	return r->len && buf >= r->buf && (size_t)(buf - r->buf) <= r->len &&
	       len <= r->len - (size_t)(buf - r->buf);
}

int objfs_gpu_buf_register(struct objfs_gpu *h, void *buf, size_t len)
{
	struct objfs_sess *s;
	enum mem_kind kind;
	struct reg alloc;
	int dev, err;

	if (!h || !buf || !len || (uintptr_t)buf + len < (uintptr_t)buf)
		return -EINVAL;
	s = h->s;
	err = classify(s, buf, len, &kind, &dev, &alloc);
	if (err)
		return err;
	pthread_mutex_lock(&s->lock);
	if (regs_overlap_locked(s, buf, len)) {
		pthread_mutex_unlock(&s->lock);
		return -EEXIST;
	}
	if (s->nregs == MAX_REGS) {
		pthread_mutex_unlock(&s->lock);
		return -ENOSPC;
	}
	s->regs[s->nregs++] = (struct reg){ buf, len, kind, dev };
	pthread_mutex_unlock(&s->lock);
	return 0;
}

int objfs_gpu_buf_deregister(struct objfs_gpu *h, void *buf, size_t len)
{
	struct objfs_sess *s;
	int err = -ENOENT;

	if (!h)
		return -EINVAL;
	s = h->s;
	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < s->nregs; i++) {
		if (s->regs[i].buf == buf && s->regs[i].len == len) {
			s->regs[i] = s->regs[--s->nregs];
			err = 0;
			break;
		}
	}
	pthread_mutex_unlock(&s->lock);
	return err;
}

/* ---------------------------------------------------------- reads */

/*
 * Checks @iov[0..@n) and makes the batch of the entries with bytes to read
 * (*out; NULL when none has); the others get their nread now: 0 at or past
 * the end of the file or for len 0, -EINVAL (negative offset, len past
 * SSIZE_MAX), -EFAULT or -EOPNOTSUPP (a buffer that cannot be filled).
 * *any_dev: some entry is device memory. 0, or -errno for the whole call
 * (nothing written): -EINVAL (NULL handle or buffer), -E2BIG (n), -EXDEV
 * (handles of two sessions).
 */
static int batch_prep(struct objfs_gpu_iov *iov, int n, struct batch **out, int *any_dev)
{
	struct objfs_sess *s;
	struct batch *b;
	struct reg last = { 0 }; /* the range the last entry's kind came from */
	uint32_t k = 0;

	*out = NULL;
	*any_dev = 0;
	if (n < 0 || (n && !iov))
		return -EINVAL;
	if ((unsigned)n > OBJFS_GPU_READV_MAX)
		return -E2BIG;
	if (n == 0)
		return 0;
	for (int i = 0; i < n; i++) {
		if (!iov[i].h || (!iov[i].buf && iov[i].len))
			return -EINVAL;
		if (iov[i].h->s != iov[0].h->s)
			return -EXDEV;
	}
	s = iov[0].h->s;
	/* Handles whose ATTACH is not answered yet: their answers come in order. */
	pthread_mutex_lock(&s->lock);
	for (int i = 0; i < n; i++)
		while (!iov[i].h->attached && !s->dead)
			pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
	b = calloc(1, sizeof(*b) + (size_t)n * sizeof(b->e[0]));
	if (!b)
		return -ENOMEM;
	b->s = s;
	for (int i = 0; i < n; i++) {
		struct objfs_gpu_iov *v = &iov[i];
		struct bent *e = &b->e[k];
		int64_t len;
		int err;

		if (v->off < 0 || v->len > (size_t)SSIZE_MAX) {
			v->nread = -EINVAL;
			continue;
		}
		if (!v->h->attached || v->h->attach_err) { /* refused, or the session died */
			v->nread = v->h->attached ? -v->h->attach_err : -EIO;
			continue;
		}
		if (v->off >= v->h->size || !v->len) {
			v->nread = 0;
			continue;
		}
		len = (int64_t)v->len < v->h->size - v->off ? (int64_t)v->len : v->h->size - v->off;
		if (reg_holds(&last, v->buf, (size_t)len)) { /* samples into one tensor */
			e->kind = last.kind;
			e->dev = last.dev;
		} else if ((err = mem_kind_of(s, v->buf, (size_t)len, &e->kind, &e->dev, &last))) {
			v->nread = err;
			continue;
		}
		e->buf = v->buf;
		e->len = (uint64_t)len;
		e->off = v->off;
		e->handle = v->h->handle;
		e->nread = &v->nread;
		if (e->kind == MEM_DEVICE)
			*any_dev = 1;
		k++;
	}
	b->n = k;
	if (!k) {
		free(b);
		return 0;
	}
	*out = b;
	return 0;
}

/* A batch read by the CPU on the caller's thread: submit, copy, wait. 0 or -errno. */
static int host_batch(struct batch *b)
{
	struct objfs_sess *s = b->s;
	int err;

	pthread_mutex_lock(&s->lock);
	err = objfs_client_submit_locked(s, b);
	pthread_mutex_unlock(&s->lock);
	if (err)
		return err;
	objfs_client_finish(b, objfs_client_cpu_consume(b));
	return 0;
}

int objfs_gpu_readv_async(struct objfs_gpu_iov *iov, int n, struct CUstream_st *stream)
{
	struct objfs_sess *s;
	struct batch *b;
	int any_dev, err = batch_prep(iov, n, &b, &any_dev);

	if (err || !b)
		return err;
	s = b->s;
	if (s->cuda)
		err = objfs_cuda_submit(s, b, stream); /* on success @b is the stream's */
	else if (any_dev || stream)
		err = -EOPNOTSUPP;
	else
		err = host_batch(b);
	if (err || !s->cuda)
		free(b);
	return err;
}

int objfs_gpu_readv(struct objfs_gpu_iov *iov, int n)
{
	struct CUstream_st *st = NULL;
	struct batch *b;
	int any_dev, err = batch_prep(iov, n, &b, &any_dev);

	if (err || !b)
		return err;
	if (!any_dev) {
		err = host_batch(b);
		free(b);
		return err;
	}
	for (uint32_t i = 0; i < b->n && !st; i++)
		if (b->e[i].kind == MEM_DEVICE)
			err = objfs_cuda_priv_stream(b->s, b->e[i].dev, &st);
	if (!err)
		err = objfs_cuda_submit(b->s, b, st);
	if (err) {
		free(b);
		return err;
	}
	return objfs_cuda_sync(st); /* the stream's last host function wrote every nread */
}

int objfs_gpu_read_async(struct objfs_gpu *h, void *buf, size_t len, off_t file_off,
			 ssize_t *nread, struct CUstream_st *stream)
{
	struct objfs_gpu_iov v = { h, buf, len, file_off, 0 };
	struct batch *b;
	int any_dev, err;

	if (!h || !nread)
		return -EINVAL;
	err = batch_prep(&v, 1, &b, &any_dev);
	if (err)
		return err;
	if (!b) { /* nothing to read, or an argument error */
		if (v.nread < 0)
			return (int)v.nread;
		*nread = 0;
		return 0;
	}
	b->e[0].nread = nread; /* written when the stream gets there */
	if (h->s->cuda) {
		err = objfs_cuda_submit(h->s, b, stream);
	} else if (any_dev || stream) {
		err = -EOPNOTSUPP;
	} else {
		err = host_batch(b);
		if (!err && *nread < 0)
			err = (int)*nread;
	}
	if (err || !h->s->cuda)
		free(b);
	return err;
}

int objfs_gpu_read(struct objfs_gpu *h, void *buf, size_t len, off_t file_off, ssize_t *nread)
{
	struct objfs_gpu_iov v = { h, buf, len, file_off, 0 };
	int err;

	if (!h || !nread)
		return -EINVAL;
	err = objfs_gpu_readv(&v, 1);
	if (err)
		return err;
	if (v.nread < 0)
		return (int)v.nread;
	*nread = v.nread;
	return 0;
}

/* ---------------------------------------------------------- sessions */

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct objfs_sess *reg_list; /* reg_lock: live sessions, by socket name */
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;

/*
 * In a fork()ed child (a DataLoader worker, say) the parent's sessions are
 * not usable: their watchdogs did not come along and the sockets are
 * shared with the parent. The child forgets them (their memory stays
 * allocated: the parent's handles in the child must not be used) and its
 * first objfs_gpu_open of a mount makes a session of its own.
 */
static void reg_atfork_child(void)
{
	pthread_mutex_init(&reg_lock, NULL);
	reg_list = NULL;
}

static void reg_init(void)
{
	pthread_atfork(NULL, NULL, reg_atfork_child);
}

static int connect_sock(const char *name)
{
	struct sockaddr_un sa;
	socklen_t salen;
	int fd, err;

	err = objfs_sock_addr(name, &sa, &salen);
	if (err)
		return err;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, salen)) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

/*
 * The ring descriptor of HELLO_OK: a memfd of @bytes whose size is sealed
 * (F_GET_SEALS answers for a memfd only). Closes @fd and returns -EPROTO
 * otherwise.
 */
static int ring_fd_check(int fd, uint64_t bytes)
{
	struct statfs sf;
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);

	/* tmpfs, not hugetlbfs: a page punched out of the latter faults */
	if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW) ||
	    fstat(fd, &st) || (uint64_t)st.st_size != bytes || fstatfs(fd, &sf) ||
	    sf.f_type != 0x01021994 /* TMPFS_MAGIC */) {
		close(fd);
		return -EPROTO;
	}
	return fd;
}

/* Sends HELLO and waits for the answer: the ring's descriptor, or -errno. */
static int hello(struct objfs_sess *s, const struct objfs_side_cap *cap)
{
	struct objfs_msg_hello m = { 0 };
	union objfs_fd_cmsg cbuf;
	char buf[OBJFS_MSG_MAX] __attribute__((aligned(8)));
	struct iovec iov = { buf, sizeof(buf) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = cbuf.b, .msg_controllen = sizeof(cbuf.b) };
	const struct objfs_msg_hdr *r = (const void *)buf;
	struct pollfd p = { s->sock, POLLIN, 0 };
	struct cmsghdr *cm;
	int err, fd = -1, extra = 0;
	ssize_t n;

	objfs_msg_init(&m.h, OBJFS_MSG_HELLO, sizeof(m));
	memcpy(m.token, cap->token, sizeof(m.token));
	m.ino = cap->ino;
	m.slots = s->slots;
	m.slot_size = s->slot_size;
	m.ring_bytes = s->ring_bytes;
	if (send(s->sock, &m, sizeof(m), MSG_NOSIGNAL) != (ssize_t)sizeof(m))
		return -errno ? -errno : -EIO;
	n = poll(&p, 1, HELLO_TIMEOUT_MS);
	if (n <= 0)
		return n == 0 ? -ETIMEDOUT : -errno;
	memset(&cbuf, 0, sizeof(cbuf));
	n = recvmsg(s->sock, &mh, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return -errno;
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int got;

			memcpy(&got, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (fd < 0) {
				fd = got; /* the ring */
			} else {
				close(got); /* anything more is not the protocol */
				extra = 1;
			}
		}
	}
	err = objfs_msg_check(buf, (size_t)n);
	if (!err && extra)
		err = -EPROTO;
	if (!err && r->type == OBJFS_MSG_ERR)
		err = -peer_errno(((const struct objfs_msg_err *)buf)->err);
	else if (!err && (r->type != OBJFS_MSG_HELLO_OK || fd < 0 || (mh.msg_flags & MSG_CTRUNC)))
		err = -EPROTO;
	if (err) {
		if (fd >= 0)
			close(fd);
		return err;
	}
	return ring_fd_check(fd, s->ring_bytes);
}

/* Makes a session with @cap as its handle 0 (one reference). 0 or -errno. */
static int sess_new(const struct objfs_side_cap *cap, struct objfs_sess **out)
{
	struct objfs_sess *s;
	int memfd, err;
	void *map;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	memcpy(s->name, cap->sock, sizeof(s->name));
	s->refs = 1;
	s->slots = cap->ring_slots;
	s->slot_size = cap->ring_slot_size;
	s->ring_bytes = objfs_ring_bytes(s->slots, s->slot_size);
	s->wakefd = -1;
	STAILQ_INIT(&s->waiting);
	STAILQ_INIT(&s->attaching);
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);

	s->sock = connect_sock(cap->sock);
	if (s->sock < 0) {
		err = s->sock;
		goto out_s;
	}
	memfd = hello(s, cap);
	if (memfd < 0) {
		err = memfd;
		goto out_sock;
	}
	map = mmap(NULL, s->ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	err = map == MAP_FAILED ? -errno : 0;
	close(memfd);
	if (err)
		goto out_sock;
	s->ring = map;
	if (s->ring->magic != OBJFS_SIDE_MAGIC || s->ring->slots != s->slots ||
	    s->ring->slot_size != s->slot_size || s->ring->hdr_size != objfs_ring_hdr_size(s->slots)) {
		err = -EPROTO; /* the header the daemon wrote; no slot touched yet */
		goto out_map;
	}
	objfs_cuda_place(s); /* before the first touch of a slot */
	s->data = (char *)map + objfs_ring_hdr_size(s->slots);
	s->wakefd = eventfd(0, EFD_CLOEXEC);
	if (s->wakefd < 0) {
		err = -errno;
		goto out_map;
	}
	err = -pthread_create(&s->watchdog, NULL, watchdog_main, s);
	if (err)
		goto out_wake;
	objfs_cuda_attach(s);
	*out = s;
	return 0;
out_wake:
	close(s->wakefd);
out_map:
	munmap(s->ring, s->ring_bytes);
out_sock:
	close(s->sock);
out_s:
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
	return err;
}

/* Ends @s (its last handle closed): waits for its stream callbacks, frees it. */
static void sess_free(struct objfs_sess *s)
{
	uint64_t one = 1;

	/* Streams still hold pieces: wait until their callbacks ran. */
	pthread_mutex_lock(&s->lock);
	while (s->pending)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
	(void)!write(s->wakefd, &one, sizeof(one));
	pthread_join(s->watchdog, NULL);
	close(s->wakefd);
	objfs_cuda_detach(s);
	munmap(s->ring, s->ring_bytes);
	close(s->sock); /* last: at this hangup the daemon frees the ring's pages */
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/*
 * ATTACH: asks the daemon to add @cap to @s as handle @h (side_proto.h, 5)
 * and returns once it is sent; the watchdog records the answer in @h.
 * 0, or -EIO (the session is dead).
 */
static int sess_attach(struct objfs_sess *s, const struct objfs_side_cap *cap,
		       struct objfs_gpu *h)
{
	struct objfs_msg_attach m = { 0 };
	int err;

	objfs_msg_init(&m.h, OBJFS_MSG_ATTACH, sizeof(m));
	memcpy(m.token, cap->token, sizeof(m.token));
	m.ino = cap->ino;
	pthread_mutex_lock(&s->lock);
	while (!s->dead && s->nattaching >= OBJFS_ATTACH_PIPELINE)
		pthread_cond_wait(&s->cond, &s->lock);
	m.cookie = ++s->next_req; /* informative: answers are matched by order */
	err = s->dead ? -EIO : send_locked(s, &m, sizeof(m));
	if (!err) {
		h->s = s;
		h->attached = 0;
		STAILQ_INSERT_TAIL(&s->attaching, h, anext);
		s->nattaching++;
	}
	pthread_mutex_unlock(&s->lock);
	return err;
}

/* Tells the daemon @handle is gone (no answer). Errors only mean the session is dead. */
static void sess_detach(struct objfs_sess *s, uint32_t handle)
{
	struct objfs_msg_detach m = { 0 };

	objfs_msg_init(&m.h, OBJFS_MSG_DETACH, sizeof(m));
	m.handle = handle;
	pthread_mutex_lock(&s->lock);
	if (!s->dead)
		(void)send_locked(s, &m, sizeof(m));
	pthread_mutex_unlock(&s->lock);
}

/* Drops a handle's reference on @s; the last one unlinks and frees it. */
static void sess_put(struct objfs_sess *s)
{
	int last;

	pthread_mutex_lock(&reg_lock);
	last = --s->refs == 0;
	if (last)
		for (struct objfs_sess **pp = &reg_list; *pp; pp = &(*pp)->next)
			if (*pp == s) {
				*pp = s->next;
				break;
			}
	pthread_mutex_unlock(&reg_lock);
	if (last)
		sess_free(s);
}

/* ---------------------------------------------------------- open/close */

int objfs_gpu_open_cap(const struct objfs_side_cap *cap, struct objfs_gpu **out)
{
	struct objfs_sess *s, **pp;
	struct objfs_gpu *h;
	int err = 0;

	*out = NULL;
	if (cap->magic != OBJFS_SIDE_MAGIC || cap->struct_size != sizeof(*cap))
		return -EPROTO;
	if (cap->version != OBJFS_SIDE_VERSION)
		return -EPROTONOSUPPORT;
	if (!objfs_ring_geometry_ok(cap->ring_slots, cap->ring_slot_size) || cap->size < 0 ||
	    !memchr(cap->sock, '\0', sizeof(cap->sock)))
		return -EPROTO;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->ino = cap->ino;
	h->size = cap->size;

	/* The session of this mount, unless it died (then it goes from the registry). */
	pthread_once(&reg_once, reg_init);
	pthread_mutex_lock(&reg_lock);
	for (pp = &reg_list; (s = *pp); pp = &s->next) {
		int dead;

		if (strncmp(s->name, cap->sock, sizeof(s->name)))
			continue;
		pthread_mutex_lock(&s->lock);
		dead = s->dead;
		pthread_mutex_unlock(&s->lock);
		if (!dead) {
			s->refs++;
			break;
		}
		*pp = s->next; /* its handles keep it until they close */
		s->next = NULL;
		s = NULL;
		break;
	}
	if (!s) { /* a new session; the registry lock makes concurrent first opens wait */
		err = sess_new(cap, &s);
		if (!err) {
			s->next = reg_list;
			reg_list = s;
			h->handle = 0;
			h->attached = 1;
		}
		pthread_mutex_unlock(&reg_lock);
		if (err) {
			free(h);
			return err;
		}
	} else {
		pthread_mutex_unlock(&reg_lock);
		err = sess_attach(s, cap, h);
		if (err) {
			sess_put(s);
			free(h);
			return err;
		}
	}
	h->s = s;
	*out = h;
	return 0;
}

int objfs_gpu_open(int fd, struct objfs_gpu **h)
{
	struct objfs_side_cap cap;

	if (!h)
		return -EINVAL;
	*h = NULL;
	memset(&cap, 0, sizeof(cap));
	if (ioctl(fd, OBJFS_IOC_GPU_CAP, &cap))
		return errno == EINVAL ? -ENOTTY : -errno; /* FUSE answers EINVAL for non-objfs */
	return objfs_gpu_open_cap(&cap, h);
}

void objfs_gpu_close(struct objfs_gpu *h)
{
	struct objfs_sess *s;

	if (!h)
		return;
	s = h->s;
	/*
	 * Every close waits for its ATTACH's answer and detaches, the last
	 * one too: deciding "last" here would race an open of the same mount
	 * (the handle freed while still on the attaching list, where the
	 * watchdog then writes its answer, and its capability kept by the
	 * daemon). DETACH just before the session ends costs one message.
	 */
	pthread_mutex_lock(&s->lock);
	while (!h->attached && !s->dead)
		pthread_cond_wait(&s->cond, &s->lock);
	if (!h->attached) { /* dead: the watchdog is gone */
		STAILQ_REMOVE(&s->attaching, h, objfs_gpu, anext);
		s->nattaching--;
	}
	pthread_mutex_unlock(&s->lock);
	if (h->attached && !h->attach_err)
		sess_detach(s, h->handle);
	sess_put(s);
	free(h);
}

const char *objfs_strerror(int err)
{
	if (err < 0)
		err = -err;
	switch (err) {
	case 0: return "success";
	case ENOTTY: return "not a file on an objfs mount";
	case EOPNOTSUPP:
		return "not supported (device memory needs libobjfs built with CUDA and a usable "
		       "GPU, or the daemon runs with side=off)";
	case EACCES: return "capability refused (wrong user, inode or token)";
	case EIO: return "input/output error (a fill failed or the objfs daemon went away; "
			 "reopen the file)";
	case EFAULT: return "bad buffer (the read runs past a registered buffer, or the memory "
			    "is not accessible)";
	case EPROTO: return "protocol error between libobjfs and the objfs daemon";
	case EPROTONOSUPPORT: return "libobjfs and the objfs daemon speak different versions";
	case EBUSY: return "the objfs daemon has no session left for this user (close handles "
			   "of other processes, or wait)";
	case EDQUOT: return "this user's share of the daemon's ring memory is spent "
			    "(side_ring_budget)";
	case ENOMEM: return "out of memory, or the daemon's ring memory budget is spent "
			    "(side_ring_budget)";
	case ENOSPC: return "the objfs daemon holds too many capabilities for this user "
			    "(unused ones expire)";
	default: {
		const char *s = strerrordesc_np(err);

		return s ? s : "unknown error";
	}
	}
}
