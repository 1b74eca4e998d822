/*
 * nullfs: a FUSE file system with nothing behind it, as the floor of the
 * FUSE read path on a machine. It serves N read-only files
 * obj0.bin ... obj(N-1).bin of SIZE bytes each, and a directory small/ of
 * M files f00000.bin ... of 100 KiB (fuse_scale.sh's small files), answering
 * every READ from a 64 MiB buffer of random bytes (so the reply copy reads
 * memory, not a hot cache line), with the kernel settings objfs asks for:
 * 1 MiB requests, 4 MiB readahead (the mount's bdi raised as objfs does),
 * asynchronous reads, max_background from the worker count, a /dev/fuse
 * clone per worker, open files kept in the page cache, and lookups in one
 * directory in parallel (like objfs it adds FUSE_PARALLEL_DIROPS to the
 * INIT reply, which libfuse before 3.17.1 leaves out: src/fuse/fs.c).
 * What the readers get from it is what any FUSE file system using the
 * page cache can give them on that machine before a byte is fetched;
 * fuse_probe.sh runs it beside objfs and curl (PROBE_NULLFS).
 *
 *   nullfs MOUNTPOINT N SIZE [THREADS [M [OPTS]]]
 *
 * OPTS, comma-separated: direct_io (replies bypass the page cache), noopen
 * (OPEN answered ENOSYS, so the kernel sends no OPEN or RELEASE for any
 * file after the first: the floor of zero-message opens), io_uring (FUSE
 * over io_uring, kernel >= 6.14 with /sys/module/fuse/parameters/
 * enable_uring set: requests and replies through per-CPU io_uring queues
 * instead of read() and writev() on /dev/fuse; needs libfuse >= 3.18, so
 * build nullfs against it: with an older libfuse the option does nothing).
 *
 * Runs in the foreground until unmounted (fusermount3 -u MOUNTPOINT).
 */
#define FUSE_USE_VERSION 312
#define _GNU_SOURCE
#include <errno.h>
#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <limits.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_READ (1u << 20)
#define READAHEAD_KB 4096
#define SRC_BYTES (64u << 20)
#define SMALL_SIZE 102400

static unsigned nfiles, nsmall, nthreads = 64;
static unsigned long long fsize;
static int direct_io, noopen;
static char *src; /* SRC_BYTES of random bytes, then MAX_READ more (a reply never wraps) */

/* Inodes: the root 1, obj@i.bin i + 2, small/ SMALL_DIR, small/f@j.bin
 * SMALL_DIR + 1 + j. */
#define SMALL_DIR ((fuse_ino_t)nfiles + 2)

/* The size of file @ino, or -1 for a directory or no such inode. */
static long long size_of(fuse_ino_t ino)
{
	if (ino >= 2 && ino - 2 < nfiles)
		return (long long)fsize;
	if (ino > SMALL_DIR && ino - SMALL_DIR - 1 < nsmall)
		return SMALL_SIZE;
	return -1;
}

static int attr_of(fuse_ino_t ino, struct stat *st)
{
	long long size = size_of(ino);

	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_nlink = 1;
	if (ino == FUSE_ROOT_ID || ino == SMALL_DIR) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
	} else if (size >= 0) {
		st->st_mode = S_IFREG | 0444;
		st->st_size = (off_t)size;
	} else {
		return -1;
	}
	return 0;
}

/* "PREFIX<number>.bin" below @max: the number, else -1. */
static long number_in(const char *name, const char *prefix, unsigned max)
{
	size_t pl = strlen(prefix);
	char *end;
	unsigned long i;

	if (strncmp(name, prefix, pl) != 0)
		return -1;
	i = strtoul(name + pl, &end, 10);
	return end == name + pl || strcmp(end, ".bin") != 0 || i >= max ? -1 : (long)i;
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	unsigned bg = nthreads * (READAHEAD_KB / (MAX_READ >> 10));

	(void)userdata;
	conn->want |= FUSE_CAP_ASYNC_READ;
	conn->want &= ~(unsigned)FUSE_CAP_AUTO_INVAL_DATA;
	conn->max_readahead = READAHEAD_KB << 10;
	conn->max_write = MAX_READ;
	bg = bg < 64 ? 64 : bg > 1024 ? 1024 : bg;
	conn->max_background = bg;
	conn->congestion_threshold = bg * 3 / 4;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e = { .attr_timeout = 3600, .entry_timeout = 3600 };
	long i;

	if (parent == FUSE_ROOT_ID && strcmp(name, "small") == 0 && nsmall) {
		e.ino = SMALL_DIR;
	} else if (parent == FUSE_ROOT_ID && (i = number_in(name, "obj", nfiles)) >= 0) {
		e.ino = (fuse_ino_t)i + 2;
	} else if (parent == SMALL_DIR && (i = number_in(name, "f", nsmall)) >= 0) {
		e.ino = SMALL_DIR + 1 + (fuse_ino_t)i;
	} else {
		fuse_reply_err(req, ENOENT);
		return;
	}
	attr_of(e.ino, &e.attr);
	fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;

	(void)fi;
	if (attr_of(ino, &st)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fuse_reply_attr(req, &st, 3600);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (size_of(ino) < 0) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if (noopen) {
		fuse_reply_err(req, ENOSYS);
		return;
	}
	fi->keep_cache = 1;
	fi->direct_io = direct_io;
	fuse_reply_open(req, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	unsigned long long n, end = (unsigned long long)size_of(ino);

	(void)fi;
	if (off < 0 || (unsigned long long)off >= end) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	n = end - (unsigned long long)off < size ? end - (unsigned long long)off : size;
	if (n > MAX_READ)
		n = MAX_READ;
	fuse_reply_buf(req, src + (unsigned long long)off % SRC_BYTES, (size_t)n);
}

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.lookup = op_lookup,
	.getattr = op_getattr,
	.open = op_open,
	.read = op_read,
};

/* FUSE_PARALLEL_DIROPS into the INIT reply (see the file header). */
static _Atomic uint64_t init_req;

static ssize_t dev_read(int fd, void *buf, size_t len, void *userdata)
{
	const struct fuse_in_header *h = buf;
	ssize_t n = read(fd, buf, len);

	(void)userdata;
	if (n >= (ssize_t)(sizeof(*h) + sizeof(struct fuse_init_in)) && h->opcode == FUSE_INIT)
		atomic_store(&init_req, h->unique);
	return n;
}

static ssize_t dev_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	const struct fuse_out_header *h = iov[0].iov_base;
	struct fuse_init_out reply;

	(void)userdata;
	if (count == 2 && h->unique == atomic_load(&init_req) && !h->error &&
	    iov[1].iov_len <= sizeof(reply)) {
		memcpy(&reply, iov[1].iov_base, iov[1].iov_len);
		reply.flags |= FUSE_PARALLEL_DIROPS;
		iov[1].iov_base = &reply;
	}
	return writev(fd, iov, count);
}

/* The mount's read_ahead_kb, as objfs raises it (the kernel caps a FUSE
 * mount's readahead at 128 KiB whatever INIT says). */
static void raise_readahead(const char *mnt)
{
	char real[PATH_MAX], line[4096], path[128];
	unsigned maj = 0, min = 0;
	FILE *f;

	if (!realpath(mnt, real) || !(f = fopen("/proc/self/mountinfo", "re")))
		return;
	while (fgets(line, sizeof(line), f)) {
		char mp[PATH_MAX];
		unsigned a, b;

		if (sscanf(line, "%*s %*s %u:%u %*s %4095s", &a, &b, mp) == 3 &&
		    strcmp(mp, real) == 0) {
			maj = a;
			min = b;
		}
	}
	fclose(f);
	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", maj, min);
	if (!(maj | min) || !(f = fopen(path, "we")) || fprintf(f, "%u\n", READAHEAD_KB) < 0)
		fprintf(stderr, "nullfs: cannot raise readahead through %s\n", path);
	if (f)
		fclose(f);
}

int main(int argc, char **argv)
{
	char *fargv[] = { argv[0], "-o", "ro,default_permissions,allow_other,fsname=nullfs" };
	struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
	struct fuse_loop_config *cfg;
	struct fuse_session *se;
	int ret = 1;

	static const struct fuse_custom_io io = { .read = dev_read, .writev = dev_writev };

	if (argc < 4) {
		fprintf(stderr, "usage: nullfs MOUNTPOINT N SIZE [THREADS [M [direct_io,noopen,io_uring]]]\n");
		return 2;
	}
	nfiles = (unsigned)strtoul(argv[2], NULL, 10);
	fsize = strtoull(argv[3], NULL, 10);
	if (argc > 4)
		nthreads = (unsigned)strtoul(argv[4], NULL, 10);
	if (argc > 5)
		nsmall = (unsigned)strtoul(argv[5], NULL, 10);
	direct_io = argc > 6 && strstr(argv[6], "direct_io") != NULL;
	noopen = argc > 6 && strstr(argv[6], "noopen") != NULL;
	if (argc > 6 && strstr(argv[6], "io_uring"))
		setenv("FUSE_URING_ENABLE", "1", 1); /* libfuse >= 3.18 reads it */
	src = malloc(SRC_BYTES + MAX_READ);
	if (!src || !nthreads)
		return 2;
	for (size_t k = 0; k < SRC_BYTES + MAX_READ;) {
		ssize_t n = getrandom(src + k, SRC_BYTES + MAX_READ - k, 0);

		if (n > 0)
			k += (size_t)n;
	}
	se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
	if (!se || fuse_set_signal_handlers(se) || fuse_session_mount(se, argv[1]))
		return 1;
	if (fuse_version() < 317 && fuse_session_custom_io(se, &io, fuse_session_fd(se)))
		fprintf(stderr, "nullfs: lookups in one directory stay serialised\n");
	raise_readahead(argv[1]);
	cfg = fuse_loop_cfg_create();
	if (cfg) {
		fuse_loop_cfg_set_clone_fd(cfg, 1);
		fuse_loop_cfg_set_max_threads(cfg, nthreads);
		ret = fuse_session_loop_mt(se, cfg) ? 1 : 0;
		fuse_loop_cfg_destroy(cfg);
	}
	fuse_session_unmount(se);
	fuse_remove_signal_handlers(se);
	fuse_session_destroy(se);
	return ret;
}
