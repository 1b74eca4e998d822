/*
 * client: libobjfs, the client half of the GPU side API, without CUDA
 * (include/objfs.h is the public API, include/objfs/side_proto.h the
 * protocol and the ring layout shared with the daemon, src/side/ the daemon
 * half). Everything that calls CUDA is in client_cuda.c, behind
 * client_i.h; this file has no #if HAVE_CUDA and is the whole library when
 * CUDA is absent.
 *
 * A handle owns: the session socket, the ring (a sealed memfd mapped here
 * and in the daemon; client_cuda.c registers it with cudaHostRegister when
 * a GPU is usable) and a watchdog thread.
 *
 * Reads. A read is clamped to the file size, its buffer classified (the
 * registry first, then client_cuda.c or a probe of the CPU's view), then
 * submitted as one FILL of n pieces (slot-sized) under h->lock; the lock
 * also covers enqueuing the pieces' consumers, so on any one stream
 * consumers appear in piece order (otherwise a later piece could wait on a
 * slot an earlier one must free). Piece p lives in slot p % k as its use
 * g = p / k + 1. The consumer here is the CPU one: wait for seq >= g on a
 * futex, memcpy, store rel = g and wake the daemon. Host reads run it on
 * the caller's thread; client_cuda.c runs it inside a host function for a
 * host read ordered on a stream, and has its own consumers for device
 * memory. The daemon is the one that waits for rel (ring wrap-around); the
 * caller's thread never blocks in the async path, except when more than
 * MAX_OUTSTANDING reads are queued on one handle.
 *
 * Failure. The watchdog blocks on the socket. DONE messages count down the
 * outstanding reads; ERR or EOF (daemon killed, unmounted, or it ended the
 * session) poisons the ring as side_proto.h describes: err_piece = the first
 * piece the daemon never published (pieces are published in order), then
 * OBJFS_SEQ_ERROR into every seq word, which releases every GPU stream wait
 * and every CPU waiter at once. A read whose last piece is at or past
 * err_piece reports -EIO (or the daemon's errno). Bounded time: EOF arrives
 * as soon as the daemon process dies. The watchdog is portable (a socket
 * and the shared ring) and so lives here, not with the CUDA code it also
 * protects.
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
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "client_i.h"

#define HELLO_TIMEOUT_MS 10000
#define CPU_WAIT_NS     100000000L

/* ---------------------------------------------------------- ring state */

/* First piece the daemon has not published (it publishes in order). */
static uint64_t first_unpublished(const struct objfs_gpu *h)
{
	uint64_t p = UINT64_MAX;

	for (uint32_t s = 0; s < h->slots; s++) {
		uint32_t g = __atomic_load_n(&h->ring->ctl[s].seq, __ATOMIC_ACQUIRE);
		uint64_t next;

		if (g >= OBJFS_RING_GEN_MAX)
			continue; /* poisoned already */
		next = s + (uint64_t)g * h->slots;
		if (next < p)
			p = next;
	}
	return p;
}

void objfs_client_poison(struct objfs_gpu *h, int err)
{
	objfs_ring_poison(h->ring, h->slots, first_unpublished(h), err);
}

/* An errno from the daemon (a message or the shared ring: any value) as a
 * positive errno the caller may see: 1..4095, anything else EIO. */
static int peer_errno(int64_t e)
{
	return e > 0 && e < 4096 ? (int)e : EIO;
}

int objfs_client_read_result(const struct objfs_gpu *h, uint64_t last)
{
	uint64_t ep = __atomic_load_n(&h->ring->err_piece, __ATOMIC_SEQ_CST);
	int err;

	if (ep == UINT64_MAX || last < ep)
		return 0;
	err = __atomic_load_n(&h->ring->err, __ATOMIC_SEQ_CST);
	return -peer_errno(err);
}

static void set_dead(struct objfs_gpu *h, int err)
{
	pthread_mutex_lock(&h->lock);
	if (!h->dead)
		h->dead = err;
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
}

static void *watchdog_main(void *arg)
{
	struct objfs_gpu *h = arg;
	struct pollfd p[2] = { { h->sock, POLLIN, 0 }, { h->wakefd, POLLIN, 0 } };
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
			return NULL; /* objfs_gpu_close */
		n = recv(h->sock, buf, sizeof(buf), MSG_DONTWAIT);
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
			const struct objfs_msg_done *d = (const void *)buf;

			pthread_mutex_lock(&h->lock);
			if (h->outstanding)
				h->outstanding--;
			pthread_cond_broadcast(&h->cond);
			pthread_mutex_unlock(&h->lock);
			if (d->err) {
				err = peer_errno(d->err);
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
	/* The daemon failed a fill, ended the session or died: release everyone. */
	objfs_client_poison(h, err == ECONNRESET || err == EPIPE ? EIO : err);
	set_dead(h, EIO);
	return NULL;
}

/* ---------------------------------------------------------- CPU consumer */

uint32_t objfs_client_wait_piece(struct objfs_gpu *h, uint64_t p)
{
	uint32_t *seq = &h->ring->ctl[objfs_piece_slot(p, h->slots)].seq;
	uint32_t g = (uint32_t)objfs_piece_gen(p, h->slots), v;

	while ((v = __atomic_load_n(seq, __ATOMIC_ACQUIRE)) < g)
		objfs_futex_wait_ns(seq, v, CPU_WAIT_NS);
	return v;
}

void objfs_client_release_piece(struct objfs_gpu *h, uint64_t p)
{
	uint32_t *rel = &h->ring->ctl[objfs_piece_slot(p, h->slots)].rel;

	__atomic_store_n(rel, (uint32_t)objfs_piece_gen(p, h->slots), __ATOMIC_RELEASE);
	objfs_futex_wake_all(rel);
}

/* Copies piece @p (@want bytes) into @dst and releases its slot. 0 or -errno. */
static int cpu_piece(struct objfs_gpu *h, uint64_t p, char *dst, size_t want)
{
	uint32_t s = objfs_piece_slot(p, h->slots);
	int err;

	if (objfs_client_wait_piece(h, p) == OBJFS_SEQ_ERROR) {
		err = objfs_client_read_result(h, p);
		if (err)
			return err;
	}
	if (__atomic_load_n(&h->ring->ctl[s].len, __ATOMIC_RELAXED) != want) {
		objfs_client_poison(h, EPROTO);
		return -EPROTO;
	}
	memcpy(dst, h->data + (size_t)s * h->slot_size, want);
	objfs_client_release_piece(h, p);
	return 0;
}

int objfs_client_cpu_read(struct objfs_gpu *h, char *buf, size_t len, uint64_t first)
{
	uint64_t n = objfs_pieces(len, h->slot_size);
	int err = 0;

	for (uint64_t i = 0; i < n && !err; i++) {
		size_t off = (size_t)i * h->slot_size;
		size_t want = len - off < h->slot_size ? len - off : h->slot_size;

		err = cpu_piece(h, first + i, buf + off, want);
	}
	return err;
}

/* ---------------------------------------------------------- submission */

int objfs_client_submit_locked(struct objfs_gpu *h, int64_t off, size_t len, uint64_t *first)
{
	struct objfs_msg_fill m = { 0 };
	uint64_t n = objfs_pieces(len, h->slot_size);
	ssize_t r;

	while (!h->dead && h->outstanding >= MAX_OUTSTANDING)
		pthread_cond_wait(&h->cond, &h->lock);
	if (h->dead)
		return -h->dead;
	if (objfs_piece_gen(h->next_piece + n - 1, h->slots) >= OBJFS_RING_GEN_MAX)
		return -EOVERFLOW; /* about 4 PiB through one handle: reopen */
	objfs_msg_init(&m.h, OBJFS_MSG_FILL, sizeof(m));
	memcpy(m.token, h->cap.token, sizeof(m.token));
	m.ino = h->cap.ino;
	m.req_id = ++h->next_req;
	m.first_piece = h->next_piece;
	m.off = off;
	m.len = len;
	r = send(h->sock, &m, sizeof(m), MSG_NOSIGNAL);
	if (r != (ssize_t)sizeof(m)) {
		int err = r < 0 ? errno : EIO;

		h->dead = EIO;
		return -(err == EPIPE || err == ECONNRESET ? EIO : err);
	}
	*first = h->next_piece;
	h->next_piece += n;
	h->outstanding++;
	return 0;
}

/* Clamps a read to the file. Returns the byte count, or -EINVAL. */
static int64_t clamp(const struct objfs_gpu *h, size_t len, off_t off)
{
	if (off < 0 || len > (size_t)SSIZE_MAX)
		return -EINVAL;
	if (off >= h->cap.size)
		return 0;
	return (int64_t)len < h->cap.size - off ? (int64_t)len : h->cap.size - off;
}

int objfs_client_cpu_accessible(void *buf, size_t len)
{
	char b;
	struct iovec local = { &b, 1 }, remote;

	if (!len)
		return 1;
	/* Probes the two ends. */
	for (int i = 0; i < 2; i++) {
		remote.iov_base = (char *)buf + (i ? len - 1 : 0);
		remote.iov_len = 1;
		if (syscall(SYS_process_vm_readv, getpid(), &local, 1, &remote, 1, 0) != 1)
			return errno != EFAULT; /* other errors (seccomp): assume host */
	}
	return 1;
}

/* ---------------------------------------------------------- registration */

/*
 * Classifies @buf by looking: through CUDA when the ring is registered,
 * else it must be memory the CPU can reach. 0 or -errno.
 */
static int classify(struct objfs_gpu *h, void *buf, size_t len, enum mem_kind *kind, int *dev)
{
	if (h->cuda)
		return objfs_cuda_classify(h, buf, len, kind, dev);
	*dev = 0;
	*kind = MEM_HOST;
	return objfs_client_cpu_accessible(buf, len) ? 0 : -EOPNOTSUPP;
}

/* Kind of @buf: from the registry, else by looking. 0 or -errno. */
static int mem_kind_of(struct objfs_gpu *h, char *buf, size_t len, enum mem_kind *kind, int *dev)
{
	int found = 0;

	pthread_mutex_lock(&h->lock);
	for (unsigned i = 0; i < h->nregs; i++) {
		struct reg *r = &h->regs[i];

		if (buf >= r->buf && buf < r->buf + r->len) {
			found = len <= (size_t)(r->buf + r->len - buf) ? 1 : -1;
			*kind = r->kind;
			*dev = r->dev;
			break;
		}
	}
	pthread_mutex_unlock(&h->lock);
	if (found < 0)
		return -EFAULT;
	if (found)
		return 0;
	return classify(h, buf, len, kind, dev);
}

int objfs_gpu_buf_register(struct objfs_gpu *h, void *buf, size_t len)
{
	enum mem_kind kind;
	int dev, err;

	if (!h || !buf || !len || (uintptr_t)buf + len < (uintptr_t)buf)
		return -EINVAL;
	err = classify(h, buf, len, &kind, &dev);
	if (err)
		return err;
	pthread_mutex_lock(&h->lock);
	for (unsigned i = 0; i < h->nregs; i++) {
		struct reg *r = &h->regs[i];

		if ((char *)buf < r->buf + r->len && r->buf < (char *)buf + len) {
			pthread_mutex_unlock(&h->lock);
			return -EEXIST;
		}
	}
	if (h->nregs == MAX_REGS) {
		pthread_mutex_unlock(&h->lock);
		return -ENOSPC;
	}
	h->regs[h->nregs++] = (struct reg){ buf, len, kind, dev };
	pthread_mutex_unlock(&h->lock);
	return 0;
}

int objfs_gpu_buf_deregister(struct objfs_gpu *h, void *buf, size_t len)
{
	int err = -ENOENT;

	if (!h)
		return -EINVAL;
	pthread_mutex_lock(&h->lock);
	for (unsigned i = 0; i < h->nregs; i++) {
		if (h->regs[i].buf == buf && h->regs[i].len == len) {
			h->regs[i] = h->regs[--h->nregs];
			err = 0;
			break;
		}
	}
	pthread_mutex_unlock(&h->lock);
	return err;
}

/* ---------------------------------------------------------- reads */

/* A host read of @n (clamped) bytes, on the caller's thread. */
static int host_read(struct objfs_gpu *h, char *buf, size_t n, off_t off, ssize_t *nread)
{
	uint64_t first;
	int err;

	pthread_mutex_lock(&h->lock);
	err = objfs_client_submit_locked(h, off, n, &first);
	pthread_mutex_unlock(&h->lock);
	if (!err)
		err = objfs_client_cpu_read(h, buf, n, first);
	if (!err)
		*nread = (ssize_t)n;
	return err;
}

/*
 * The checks both read calls start with: arguments, the range clamped to
 * the file, and what kind of memory @buf is (*rp). Returns 1 to go on, 0
 * when there is nothing to read (*nread = 0), or -errno.
 */
static int read_prep(struct objfs_gpu *h, void *buf, size_t len, off_t file_off,
		     ssize_t *nread, struct read_plan *rp)
{
	int64_t n;
	int err;

	if (!h || !nread || (!buf && len))
		return -EINVAL;
	n = clamp(h, len, file_off);
	if (n < 0)
		return (int)n;
	if (n == 0) {
		*nread = 0;
		return 0;
	}
	rp->n = (size_t)n;
	err = mem_kind_of(h, buf, rp->n, &rp->kind, &rp->dev);
	return err ? err : 1;
}

int objfs_gpu_read_async(struct objfs_gpu *h, void *buf, size_t len, off_t file_off,
			 ssize_t *nread, struct CUstream_st *stream)
{
	struct read_plan rp;
	int err = read_prep(h, buf, len, file_off, nread, &rp);

	if (err <= 0)
		return err;
	if (h->cuda)
		return objfs_cuda_read_async(h, buf, file_off, &rp, nread, stream);
	if (rp.kind == MEM_DEVICE || stream)
		return -EOPNOTSUPP;
	return host_read(h, buf, rp.n, file_off, nread);
}

int objfs_gpu_read(struct objfs_gpu *h, void *buf, size_t len, off_t file_off, ssize_t *nread)
{
	struct read_plan rp;
	int err = read_prep(h, buf, len, file_off, nread, &rp);

	if (err <= 0)
		return err;
	if (rp.kind == MEM_HOST)
		return host_read(h, buf, rp.n, file_off, nread);
	return objfs_cuda_read(h, buf, file_off, &rp, nread);
}

/* ---------------------------------------------------------- open/close */

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

/* Sends HELLO with the ring and waits for the answer. 0 or -errno. */
static int hello(struct objfs_gpu *h, int memfd)
{
	struct objfs_msg_hello m = { 0 };
	union objfs_fd_cmsg cbuf;
	struct iovec iov = { &m, sizeof(m) };
	struct msghdr mh = { 0 };
	char buf[OBJFS_MSG_MAX] __attribute__((aligned(8)));
	const struct objfs_msg_hdr *r = (const void *)buf;
	struct pollfd p = { h->sock, POLLIN, 0 };
	ssize_t n;
	int err;

	objfs_msg_init(&m.h, OBJFS_MSG_HELLO, sizeof(m));
	memcpy(m.token, h->cap.token, sizeof(m.token));
	m.ino = h->cap.ino;
	m.slots = h->slots;
	m.slot_size = h->slot_size;
	m.ring_bytes = h->ring_bytes;
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	objfs_msg_attach_fd(&mh, &cbuf, memfd);
	if (sendmsg(h->sock, &mh, MSG_NOSIGNAL) != (ssize_t)sizeof(m))
		return -errno ? -errno : -EIO;
	n = poll(&p, 1, HELLO_TIMEOUT_MS);
	if (n <= 0)
		return n == 0 ? -ETIMEDOUT : -errno;
	n = recv(h->sock, buf, sizeof(buf), 0);
	if (n < 0)
		return -errno;
	err = objfs_msg_check(buf, (size_t)n);
	if (err)
		return err;
	if (r->type == OBJFS_MSG_ERR)
		return -peer_errno(((const struct objfs_msg_err *)buf)->err);
	return r->type == OBJFS_MSG_HELLO_OK ? 0 : -EPROTO;
}

int objfs_gpu_open_cap(const struct objfs_side_cap *cap, struct objfs_gpu **out)
{
	struct objfs_gpu *h;
	int memfd, err;
	void *map;

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
	h->cap = *cap;
	h->slots = cap->ring_slots;
	h->slot_size = cap->ring_slot_size;
	h->ring_bytes = objfs_ring_bytes(h->slots, h->slot_size);
	h->wakefd = -1;
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->cond, NULL);

	memfd = memfd_create("objfs-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (memfd < 0) {
		err = -errno;
		goto out_h;
	}
	if (ftruncate(memfd, (off_t)h->ring_bytes) ||
	    fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		err = -errno;
		goto out_memfd;
	}
	map = mmap(NULL, h->ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (map == MAP_FAILED) {
		err = -errno;
		goto out_memfd;
	}
	h->ring = map;
	h->data = (char *)map + objfs_ring_hdr_size(h->slots);
	h->ring->magic = OBJFS_SIDE_MAGIC;
	h->ring->version = OBJFS_SIDE_VERSION;
	h->ring->slots = h->slots;
	h->ring->slot_size = h->slot_size;
	h->ring->hdr_size = objfs_ring_hdr_size(h->slots);
	h->ring->err_piece = UINT64_MAX;

	h->sock = connect_sock(cap->sock);
	if (h->sock < 0) {
		err = h->sock;
		goto out_map;
	}
	err = hello(h, memfd);
	if (err)
		goto out_sock;
	close(memfd);
	memfd = -1;
	h->wakefd = eventfd(0, EFD_CLOEXEC);
	if (h->wakefd < 0) {
		err = -errno;
		goto out_sock;
	}
	err = -pthread_create(&h->watchdog, NULL, watchdog_main, h);
	if (err)
		goto out_wake;
	objfs_cuda_attach(h);
	*out = h;
	return 0;
out_wake:
	close(h->wakefd);
out_sock:
	close(h->sock);
out_map:
	munmap(h->ring, h->ring_bytes);
out_memfd:
	if (memfd >= 0)
		close(memfd);
out_h:
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
	free(h);
	return err;
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
	uint64_t one = 1;

	if (!h)
		return;
	/* Streams still hold pieces: wait until their callbacks ran. */
	pthread_mutex_lock(&h->lock);
	while (h->pending)
		pthread_cond_wait(&h->cond, &h->lock);
	pthread_mutex_unlock(&h->lock);
	(void)!write(h->wakefd, &one, sizeof(one));
	pthread_join(h->watchdog, NULL);
	close(h->wakefd);
	close(h->sock);
	objfs_cuda_detach(h);
	munmap(h->ring, h->ring_bytes);
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->lock);
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
	case EBADFD: return "the daemon refused the ring (not a sealed tmpfs memfd)";
	default: {
		const char *s = strerrordesc_np(err);

		return s ? s : "unknown error";
	}
	}
}
