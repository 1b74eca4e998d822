/*
 * fs: see fs.h.
 *
 * The mount is read-only: FUSE's "ro" mount flag makes the kernel refuse
 * writes, creates and renames with EROFS before they reach us; the handlers
 * below that could still be called for writing answer EROFS as well.
 *
 * File handles pin the object version: open builds one struct objfs_object
 * (object.h: path, size, ETag, cache identity) from the attributes it saw;
 * every read of that handle is checked against them (If-Match and the
 * response ETag and size), so a reader sees one version of an object or
 * gets EIO, never a mix. keep_cache is granted when the ETag and size match
 * the last open, so the kernel page cache survives across opens of
 * unchanged objects; a version opened while another is open gets an inode
 * of its own (inode.h, struct objfs_open), so each page cache is one version.
 *
 * Reads: the handle's reader (reader.h) owns the whole read policy --
 * clamping, sequential or random, whole blocks or pages, prefetch and
 * drop-behind, memory and disk cache -- so op_read asks it for [off,
 * off+size), replies with the iovecs it returns (fuse_reply_iov: a writev
 * of the pinned block memory or of the reader's buffer, no copy here), and
 * releases them. This file keeps the kernel's side only: READAHEAD_KB for
 * INIT and the bdi, and the drop-behind lag derived from it.
 */
#define FUSE_USE_VERSION 312
#include "config.h"

#include <errno.h>
#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "fs.h"
#include "log.h"
#include "object.h"
#include "reader.h"
#include "side.h"
#include "spares.h"

#define MAX_READ (1u << 20)
#define READAHEAD_KB 4096 /* kernel readahead: four MAX_READ requests in flight */

/*
 * The counters while mounted: `cat MOUNT/.objfs-stats` (as JuiceFS's
 * `.stats`). The file is not listed by readdir, so find, cp -r and ls -a
 * never see it; an object of that name at the root is shadowed. Not an
 * xattr: implementing getxattr makes the kernel send two GETXATTR requests
 * per file to every `ls -l`.
 */
#define STATS_NAME ".objfs-stats"
#define STATS_INO ((fuse_ino_t)1 << 62) /* inode.c numbers never get here */

/* An open file: one pinned object version and the reader of this handle. */
struct fh {
	struct objfs_object *obj;    /* one reference; NULL for the stats file */
	struct objfs_reader *reader; /* NULL for the stats file */
	char *text;                  /* the stats file: snapshot taken at open */
	size_t text_len;
	struct objfs_inodes *inodes; /* with open: objfs_inode_close at the end */
	struct objfs_open open;
	int used;                    /* the kernel got the handle */
};

static void fh_free(struct fh *h)
{
	if (!h)
		return;
	if (h->inodes)
		objfs_inode_close(h->inodes, &h->open, h->used);
	objfs_reader_free(h->reader);
	objfs_object_put(h->obj);
	free(h->text);
	free(h);
}

/*
 * Handle table. The kernel can send RELEASE for a handle while a READ of it
 * is still being served: a reader killed by SIGKILL does not wait for its
 * answer, its files close at once, and libfuse runs the two requests on
 * different threads (ASan caught a read of .objfs-stats after its release).
 * So fi->fh carries an id, never reused, rather than a pointer: a request
 * looks the id up and holds a reference while it runs; release unlinks the
 * entry and drops the table's reference; the last reference frees. An id
 * that is gone answers EBADF, never another file's bytes. One table per
 * process (one mount per process); the lock is held only for lookups.
 */
#define HND_BUCKETS 4096

struct hnd {
	uint64_t id;
	unsigned refs;            /* the table's, until release, + requests */
	void *obj;
	void (*free)(void *obj);
	struct hnd *next;
};

static pthread_mutex_t hnd_lock = PTHREAD_MUTEX_INITIALIZER;
static struct hnd *hnd_tab[HND_BUCKETS]; /* guarded by hnd_lock */
static uint64_t hnd_next = 1;            /* guarded by hnd_lock */

/* Registers @obj (freed with @fr once released and idle); *id for fi->fh. */
static int hnd_add(void *obj, void (*fr)(void *obj), uint64_t *id)
{
	struct hnd *e = calloc(1, sizeof(*e));

	if (!e)
		return -ENOMEM;
	e->refs = 1;
	e->obj = obj;
	e->free = fr;
	pthread_mutex_lock(&hnd_lock);
	e->id = hnd_next++;
	e->next = hnd_tab[e->id % HND_BUCKETS];
	hnd_tab[e->id % HND_BUCKETS] = e;
	pthread_mutex_unlock(&hnd_lock);
	*id = e->id;
	return 0;
}

static void hnd_put(struct hnd *e)
{
	unsigned left;

	pthread_mutex_lock(&hnd_lock);
	left = --e->refs;
	pthread_mutex_unlock(&hnd_lock);
	if (!left) {
		e->free(e->obj);
		free(e);
	}
}

/* The object of handle @id with a reference in *ref, or NULL when released. */
static void *hnd_get(uint64_t id, struct hnd **ref)
{
	struct hnd *e;

	pthread_mutex_lock(&hnd_lock);
	for (e = hnd_tab[id % HND_BUCKETS]; e && e->id != id; e = e->next)
		;
	if (e)
		e->refs++;
	pthread_mutex_unlock(&hnd_lock);
	*ref = e;
	return e ? e->obj : NULL;
}

/* Unlinks handle @id; frees it now or when its last request ends. */
static void hnd_release(uint64_t id)
{
	struct hnd **pp, *e = NULL;

	pthread_mutex_lock(&hnd_lock);
	for (pp = &hnd_tab[id % HND_BUCKETS]; *pp; pp = &(*pp)->next) {
		if ((*pp)->id == id) {
			e = *pp;
			*pp = e->next;
			break;
		}
	}
	pthread_mutex_unlock(&hnd_lock);
	if (e)
		hnd_put(e);
}

static void fh_free_v(void *h)
{
	fh_free(h);
}

static void dirsnap_free_v(void *d)
{
	objfs_dirsnap_free(d);
}

static struct objfs_fs *fs_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static void attr_to_stat(const struct objfs_fs *fs, const struct objfs_attr *a, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = a->ino;
	if (a->is_dir) {
		st->st_mode = S_IFDIR | (0755 & ~fs->umask);
		st->st_nlink = 2;
		st->st_size = 4096;
	} else {
		st->st_mode = S_IFREG | (0644 & ~fs->umask);
		st->st_nlink = 1;
		st->st_size = a->size > 0 ? a->size : 0;
	}
	/* Read-only mount: no write bits, whatever the umask says. */
	st->st_mode &= (mode_t)~0222;
	st->st_uid = fs->uid;
	st->st_gid = fs->gid;
	st->st_blksize = 1 << 20;
	st->st_blocks = (st->st_size + 511) / 512;
	st->st_mtime = st->st_ctime = st->st_atime =
		a->mtime >= 0 ? (time_t)a->mtime : (time_t)fs->mount_time;
}

static void fill_entry(const struct objfs_fs *fs, const struct objfs_attr *a,
		       struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = a->ino;
	e->generation = 1;
	attr_to_stat(fs, a, &e->attr);
	e->attr_timeout = fs->attr_timeout;
	e->entry_timeout = fs->entry_timeout;
}

static void stats_entry(const struct objfs_fs *fs, struct fuse_entry_param *e)
{
	const struct objfs_attr a = { .ino = STATS_INO, .size = 0, .mtime = -1 };

	fill_entry(fs, &a, e);
	e->attr_timeout = 0;
}

/* The one reply of a lookup: now, or from the thread that listed. */
static void reply_lookup(fuse_req_t req, int err, const struct objfs_attr *a)
{
	struct objfs_fs *fs = fs_of(req);
	struct fuse_entry_param e;

	if (err == -ENOENT) {
		/* Negative entry: the kernel caches the miss for negative_timeout. */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = fs->negative_timeout;
		fuse_reply_entry(req, &e);
		return;
	}
	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	fill_entry(fs, a, &e);
	fuse_reply_entry(req, &e);
}

static void lookup_parked(void *arg, int err, const struct objfs_attr *a,
			  struct objfs_dirsnap *snap)
{
	(void)snap;
	reply_lookup(arg, err, a);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct objfs_fs *fs = fs_of(req);
	struct fuse_entry_param e;
	struct objfs_attr a;
	int err;

	/* The kernel passes names up to 1024 bytes; no listing holds one over
	 * NAME_MAX (statfs says so too): a clear errno rather than ENOENT. */
	if (strlen(name) > NAME_MAX) {
		fuse_reply_err(req, ENAMETOOLONG);
		return;
	}
	if (parent == OBJFS_ROOT_INO && strcmp(name, STATS_NAME) == 0) {
		stats_entry(fs, &e);
		fuse_reply_entry(req, &e);
		return;
	}
	/* A directory being listed by another worker: parked, this worker
	 * is free at once (inode.h). */
	err = objfs_inode_lookup_async(fs->inodes, parent, name, &a, lookup_parked, req);
	if (err != -EINPROGRESS)
		reply_lookup(req, err, &a);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	if (ino != STATS_INO)
		objfs_inode_forget(fs_of(req)->inodes, ino, nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f)
{
	for (size_t i = 0; i < count; i++)
		if (f[i].ino != STATS_INO)
			objfs_inode_forget(fs_of(req)->inodes, f[i].ino, f[i].nlookup);
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct objfs_fs *fs = fs_of(req);
	struct objfs_attr a;
	struct stat st;
	int err;

	(void)fi;
	if (ino == STATS_INO) {
		struct fuse_entry_param e;

		stats_entry(fs, &e);
		fuse_reply_attr(req, &e.attr, 0);
		return;
	}
	err = objfs_inode_getattr(fs->inodes, ino, &a);
	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	attr_to_stat(fs, &a, &st);
	fuse_reply_attr(req, &st, fs->attr_timeout);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	(void)ino;
	(void)attr;
	(void)to_set;
	(void)fi;
	fuse_reply_err(req, EROFS);
}

/* Opens the stats file: a snapshot of the counters, read with direct I/O
 * since its size (0 to the kernel) is not its length. */
static void stats_open(fuse_req_t req, struct objfs_fs *fs, struct fuse_file_info *fi)
{
	struct fh *h = calloc(1, sizeof(*h));
	size_t cap = 4096;

	if (h)
		h->text = malloc(cap);
	if (!h || !h->text) {
		free(h);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	h->text_len = fs->stats_text(fs->stats_arg, h->text, cap);
	if (h->text_len >= cap)
		h->text_len = cap - 1;
	if (hnd_add(h, fh_free_v, &fi->fh)) {
		fh_free(h);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fi->direct_io = 1;
	if (fuse_reply_open(req, fi) == -ENOENT)
		hnd_release(fi->fh);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct objfs_fs *fs = fs_of(req);
	const struct objfs_reader_cfg rcfg = {
		.window_max = fs->prefetch_max,
		/* reads arrive out of order over twice the kernel readahead */
		.drop_lag = 2 * ((size_t)READAHEAD_KB << 10),
	};
	struct objfs_open op;
	struct objfs_attr a;
	struct hnd *ref;
	struct fh *h;
	int err;
	char *path;

	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (ino == STATS_INO) {
		stats_open(req, fs, fi);
		return;
	}
	err = objfs_inode_open(fs->inodes, ino, &a, &path, &op);
	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		objfs_inode_close(fs->inodes, &op, 0);
		free(path);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	h->inodes = fs->inodes;
	h->open = op;
	/* an unknown size (-1) is 0 bytes, as attr_to_stat tells the kernel */
	err = objfs_object_new(fs->store, path, a.etag, a.mtime, a.size > 0 ? a.size : 0, NULL,
			       NULL, &h->obj);
	free(path); /* the object keeps its own copy */
	if (!err)
		err = objfs_reader_new(fs->cache, h->obj, &rcfg, &h->reader);
	if (!err)
		err = hnd_add(h, fh_free_v, &fi->fh);
	if (err) {
		fh_free(h);
		fuse_reply_err(req, -err);
		return;
	}
	fi->keep_cache = op.keep_cache;
	fi->direct_io = fs->direct_io;
	if (!op.keep_cache || fi->direct_io)
		objfs_reader_start(h->reader); /* the first READ will come to us */
	h->used = 1; /* no RELEASE can come before the reply */
	(void)hnd_get(fi->fh, &ref); /* h stays while it is marked opened below */
	if (fuse_reply_open(req, fi) == -ENOENT) {
		h->used = 0;
		hnd_release(fi->fh); /* the opener was interrupted */
	} else {
		objfs_inode_opened(fs->inodes, &h->open);
	}
	hnd_put(ref);
}

static void read_fh(fuse_req_t req, struct fh *h, size_t size, off_t off)
{
	struct objfs_reader_buf b;
	int err;

	if (h->text) {
		size_t from = (uint64_t)off < h->text_len ? (size_t)off : h->text_len;

		fuse_reply_buf(req, h->text + from,
			       size < h->text_len - from ? size : h->text_len - from);
		return;
	}
	err = objfs_reader_read(h->reader, off, size, &b);
	if (err) {
		objfs_info("read of '/%s' at %lld+%zu failed: %s", h->obj->path, (long long)off,
			   size, strerror(-err));
		fuse_reply_err(req, -err);
	} else {
		fuse_reply_iov(req, b.iov, (int)b.niov);
	}
	objfs_reader_release(h->reader, &b);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct hnd *ref;
	struct fh *h = hnd_get(fi->fh, &ref);

	(void)ino;
	if (!h) {
		fuse_reply_err(req, EBADF);
		return;
	}
	read_fh(req, h, size, off);
	hnd_put(ref);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	hnd_release(fi->fh);
	fuse_reply_err(req, 0);
}

/* The one reply of an opendir: now, or from the thread that listed. */
static void reply_opendir(fuse_req_t req, struct fuse_file_info *fi, int err,
			  struct objfs_dirsnap *d)
{
	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	if (hnd_add(d, dirsnap_free_v, &fi->fh)) {
		objfs_dirsnap_free(d);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fi->cache_readdir = 0;
	if (fuse_reply_open(req, fi) == -ENOENT)
		hnd_release(fi->fh);
}

/* A parked opendir: its request and a copy of its file info (libfuse's
 * lives on the worker's stack, gone once op_opendir returns). */
struct opendir_wait {
	fuse_req_t req;
	struct fuse_file_info fi;
};

static void opendir_parked(void *arg, int err, const struct objfs_attr *a,
			   struct objfs_dirsnap *snap)
{
	struct opendir_wait *w = arg;

	(void)a;
	reply_opendir(w->req, &w->fi, err, snap);
	free(w);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct objfs_fs *fs = fs_of(req);
	struct objfs_dirsnap *d = NULL;
	struct opendir_wait *w = malloc(sizeof(*w));
	int err;

	if (!w) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	w->req = req;
	w->fi = *fi;
	err = objfs_inode_opendir_async(fs->inodes, ino, &d, opendir_parked, w);
	if (err == -EINPROGRESS)
		return; /* parked: w is the callback's */
	free(w);
	reply_opendir(req, fi, err, d);
}

/*
 * A readdir: its request and arguments, kept while it waits for the
 * listing (parked: readdir_fill runs again on the thread that lists once
 * the entry it needs has come).
 */
struct readdir_wait {
	fuse_req_t req;
	size_t size;
	off_t off;
	int plus;
	struct hnd *ref;           /* keeps the handle until the reply */
	struct objfs_dirsnap *d;
};

static void readdir_fill(void *arg);

/*
 * Readdir reply buffers. The kernel asks for up to max_pages (1 MiB, from
 * max_write) per READDIRPLUS, and main.c fixes malloc's mmap threshold at
 * 128 KiB, so a buffer malloc'd per reply would be a fresh mapping, its
 * pages faulted in as entries are added and unmapped after the reply: a
 * tenth of the daemon's CPU in `ls -l` of a large directory. Buffers
 * of 128 KiB or more go back to two spares (2 MiB at most) and the
 * next reply that fits takes one; one `ls` reads one directory at a time.
 */
static struct objfs_spares rdbufs = OBJFS_SPARES_INIT(2, 128u << 10, MAX_READ);

/* A buffer of at least @size bytes, its size in *@cap; NULL when out of
 * memory. Given back with objfs_spares_put(&rdbufs, ...). */
static char *rdbuf_get(size_t size, size_t *cap)
{
	char *p = objfs_spares_take(&rdbufs, size, cap);

	if (!p) {
		p = malloc(size);
		*cap = size;
	}
	return p;
}

/* One readdir reply being built (objfs_dirent_fn's arg). */
struct dirbuf {
	fuse_req_t req;
	const struct objfs_fs *fs;
	char *buf;
	size_t size, used;
	off_t off;  /* offset of the next entry: 0 ".", 1 "..", 2 + i */
	int plus;
};

/* Adds entry @name, @a at b->off: 0, or 1 when it does not fit (nothing
 * added). "." and ".." (b->off < 2) are never looked up: ino 0. */
static int dirbuf_add(void *arg, const char *name, const struct objfs_attr *a)
{
	struct dirbuf *b = arg;
	size_t left = b->size - b->used, used;
	struct fuse_entry_param e;

	fill_entry(b->fs, a, &e);
	if (b->plus) {
		if (b->off < 2) {
			memset(&e, 0, sizeof(e));
			e.attr.st_ino = a->ino;
			e.attr.st_mode = S_IFDIR;
		} else if (!a->is_dir && a->size < 0) {
			/* Size unknown (an HTML index after attr_ttl): no attributes
			 * at all, as for "." (no lookup counted either, dirsnap_read),
			 * so the kernel keeps the size it has and looks up when it
			 * needs one. A size of 0 sent here would truncate the
			 * kernel's pages of an open file (SIGBUS through a mapping). */
			memset(&e, 0, sizeof(e));
			e.attr.st_ino = a->ino;
			e.attr.st_mode = S_IFREG;
		}
		used = fuse_add_direntry_plus(b->req, b->buf + b->used, left, name, &e,
					      b->off + 1);
	} else {
		used = fuse_add_direntry(b->req, b->buf + b->used, left, name, &e.attr,
					 b->off + 1);
	}
	if (used > left)
		return 1;
	b->used += used;
	b->off++;
	return 0;
}

/*
 * Replies to readdir @arg (a struct readdir_wait, freed here) with the
 * entries from its offset on that are listed now. Offsets: 1 is ".", 2 is
 * "..", 3 + i is listing entry i; entry i never moves, so a readdir
 * continued at an offset resumes where it was. When not even the first
 * entry asked for is listed yet, the request is parked on the listing and
 * answered when it is: an empty reply would mean the end of the directory.
 * The listing's entries come in one objfs_dirsnap_read, straight into the
 * reply (a lock per entry before).
 */
static void readdir_fill(void *arg)
{
	struct readdir_wait *w = arg;
	fuse_req_t req = w->req;
	struct dirbuf b = { req, fs_of(req), NULL, 0, 0, w->off, w->plus };
	size_t cap;
	int err = 0, r;

	b.buf = rdbuf_get(w->size, &cap);
	if (!b.buf) {
		fuse_reply_err(req, ENOMEM);
		hnd_put(w->ref);
		free(w);
		return;
	}
	b.size = w->size;
	for (; b.off < 2; ) {
		struct objfs_attr a = { .ino = b.off == 0 ? w->d->self : w->d->parent,
					.is_dir = 1, .mtime = -1 };

		if (dirbuf_add(&b, b.off == 0 ? "." : "..", &a))
			break;
	}
	if (b.off >= 2) {
		/* parks only when nothing was added yet; then w is the waker's
		 * from here on */
		r = objfs_dirsnap_read(w->d, (size_t)b.off - 2, b.plus, dirbuf_add, &b,
				       b.used ? NULL : readdir_fill, w);
		if (r == -EINPROGRESS && !b.used) {
			objfs_spares_put(&rdbufs, b.buf, cap);
			return;
		}
		if (r < 0 && r != -EINPROGRESS && r != -ENOSPC && !b.used)
			err = r; /* failed here: said once nothing else is */
	}
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_buf(req, b.buf, b.used);
	objfs_spares_put(&rdbufs, b.buf, cap);
	hnd_put(w->ref);
	free(w);
}

static void do_readdir(fuse_req_t req, size_t size, off_t off, struct fuse_file_info *fi,
		       int plus)
{
	struct readdir_wait *w = malloc(sizeof(*w));

	if (!w) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	w->d = hnd_get(fi->fh, &w->ref);
	if (!w->d) {
		fuse_reply_err(req, EBADF);
		free(w);
		return;
	}
	w->req = req;
	w->size = size;
	w->off = off;
	w->plus = plus;
	readdir_fill(w);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	(void)ino;
	do_readdir(req, size, off, fi, 0);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	(void)ino;
	do_readdir(req, size, off, fi, 1);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	hnd_release(fi->fh);
	fuse_reply_err(req, 0);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;

	(void)ino;
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = 1 << 20;
	sv.f_frsize = 1 << 20;
	sv.f_namemax = 255;
	sv.f_flag = ST_RDONLY;
	fuse_reply_statfs(req, &sv);
}

static void op_erofs_entry(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
			   dev_t rdev)
{
	(void)parent;
	(void)name;
	(void)mode;
	(void)rdev;
	fuse_reply_err(req, EROFS);
}

static void op_erofs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	(void)parent;
	(void)name;
	(void)mode;
	fuse_reply_err(req, EROFS);
}

static void op_erofs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	(void)parent;
	(void)name;
	fuse_reply_err(req, EROFS);
}

static void op_erofs_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
			    fuse_ino_t newparent, const char *newname, unsigned int flags)
{
	(void)parent;
	(void)name;
	(void)newparent;
	(void)newname;
	(void)flags;
	fuse_reply_err(req, EROFS);
}

static void op_erofs_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
			    struct fuse_file_info *fi)
{
	(void)parent;
	(void)name;
	(void)mode;
	(void)fi;
	fuse_reply_err(req, EROFS);
}

/*
 * The kernel's side of the read path. Its defaults hold 16 readers to
 * a third of the network: at most 12 background requests
 * (readahead is background) for the whole mount, and 128 KiB per request.
 *   max_write  libfuse derives max_pages from it (FUSE_MAX_PAGES): read
 *              and readahead requests of up to MAX_READ (1 MiB) instead of
 *              32 pages; read-only, so nothing else uses it.
 *   max_background, congestion_threshold
 *              four readahead requests of each worker thread may be queued
 *              (READAHEAD_KB / MAX_READ), at least 64, at most 1024; the
 *              kernel marks the mount congested at three quarters.
 */
static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct objfs_fs *fs = userdata;
	unsigned bg = fs->threads * (READAHEAD_KB / (MAX_READ >> 10));

	conn->want |= FUSE_CAP_ASYNC_READ;
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS | FUSE_CAP_READDIRPLUS_AUTO;
	conn->want &= ~(unsigned)FUSE_CAP_AUTO_INVAL_DATA;
#ifdef FUSE_CAP_DIRECT_IO_ALLOW_MMAP /* libfuse >= 3.17.1; before it, init_hooks */
	if (conn->capable & FUSE_CAP_DIRECT_IO_ALLOW_MMAP)
		conn->want |= FUSE_CAP_DIRECT_IO_ALLOW_MMAP;
#endif
	conn->max_readahead = READAHEAD_KB << 10;
	conn->max_write = MAX_READ;
	bg = bg < 64 ? 64 : bg > 1024 ? 1024 : bg;
	conn->max_background = bg;
	conn->congestion_threshold = bg * 3 / 4;
}

/*
 * Two INIT flags libfuse 3.14 (Debian 12's) cannot give the kernel; the
 * session's device I/O goes through the two hooks below
 * (fuse_session_custom_io on the fd fuse_session_mount opened): reads pass
 * through and note the INIT request's unique and what the kernel offers;
 * writes pass through, and the INIT reply gets the flags. Nothing else is
 * changed.
 *
 * FUSE_PARALLEL_DIROPS: libfuse before 3.17.1 turns the capability on in
 * conn->want by default but never puts it in its INIT reply ("Pass
 * FUSE_PARALLEL_DIROPS to kernel" in libfuse), so the kernel serialises
 * every LOOKUP and READDIR of one directory on that directory's inode
 * mutex: 16 workers each opening small files of one directory spend a
 * large part of their time in fuse_lock_inode under fuse_lookup. The
 * inode layer already serves lookups and listings of one directory
 * concurrently (one lock; lookups parked on a listing under way), as it
 * does for different directories.
 *
 * FUSE_DIRECT_IO_ALLOW_MMAP (Linux 6.6, protocol 7.39; libfuse asks for it
 * from 3.17.1, and objfs then does through conn->want): without it the
 * kernel refuses a shared mmap of a file opened with direct_io (ENODEV),
 * so -o direct_io, faster than the page cache for many streaming readers
 * (docs/benchmarks.md), would break numpy's and safetensors' read-only
 * mappings. With it such a mapping reads through
 * the page cache as any other file's does.
 */
#define INIT_DIROPS 1u
#define INIT_MMAP   2u
#ifndef FUSE_DIRECT_IO_ALLOW_MMAP
#define FUSE_DIRECT_IO_ALLOW_MMAP (1ULL << 36)
#endif
#define ALLOW_MMAP_FLAGS2 ((uint32_t)(FUSE_DIRECT_IO_ALLOW_MMAP >> 32))

static _Atomic uint64_t init_unique; /* the INIT request's, until answered */
static _Atomic unsigned init_add;    /* INIT_*: what its reply gets */
static unsigned init_want;           /* INIT_*: what this libfuse lacks */

static ssize_t io_read(int fd, void *buf, size_t len, void *userdata)
{
	ssize_t n = read(fd, buf, len);
	const struct fuse_in_header *in = buf;
	const struct fuse_init_in *ii = (const struct fuse_init_in *)(in + 1);
	unsigned add = 0;

	(void)userdata;
	if (n < (ssize_t)(sizeof(*in) + offsetof(struct fuse_init_in, flags2)) ||
	    in->opcode != FUSE_INIT)
		return n;
	if ((init_want & INIT_DIROPS) && (ii->flags & FUSE_PARALLEL_DIROPS))
		add |= INIT_DIROPS;
	if ((init_want & INIT_MMAP) && (ii->flags & FUSE_INIT_EXT) &&
	    n >= (ssize_t)(sizeof(*in) + offsetof(struct fuse_init_in, flags2) + sizeof(uint32_t)) &&
	    (ii->flags2 & ALLOW_MMAP_FLAGS2))
		add |= INIT_MMAP;
	if (add) {
		atomic_store(&init_add, add);
		atomic_store(&init_unique, in->unique);
	}
	return n;
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	const struct fuse_out_header *out = iov[0].iov_base;
	struct fuse_init_out init;
	uint64_t u = atomic_load_explicit(&init_unique, memory_order_relaxed);
	unsigned add;

	(void)userdata;
	if (u && count >= 2 && iov[0].iov_len >= sizeof(*out) && out->unique == u &&
	    out->error == 0 && iov[1].iov_len >= offsetof(struct fuse_init_out, max_background) &&
	    iov[1].iov_len <= sizeof(init)) {
		add = atomic_load(&init_add);
		memcpy(&init, iov[1].iov_base, iov[1].iov_len);
		if (add & INIT_DIROPS)
			init.flags |= FUSE_PARALLEL_DIROPS;
		if ((add & INIT_MMAP) &&
		    iov[1].iov_len >= offsetof(struct fuse_init_out, flags2) + sizeof(uint32_t)) {
			init.flags |= FUSE_INIT_EXT;
			init.flags2 |= ALLOW_MMAP_FLAGS2;
		}
		iov[1].iov_base = &init; /* libfuse's array, on its stack: ours until we return */
		atomic_store(&init_unique, 0);
		objfs_debug("INIT: asked for%s%s (libfuse %d)",
			    add & INIT_DIROPS ? " parallel lookups and readdirs" : "",
			    add & INIT_MMAP ? " shared mmap of direct_io files" : "", fuse_version());
	}
	return writev(fd, iov, count);
}

/* Routes the session's I/O through the hooks above where libfuse needs them. */
static void init_hooks(struct fuse_session *se)
{
	static const struct fuse_custom_io io = { .writev = io_writev, .read = io_read };

	init_want = fuse_version() < 317 ? INIT_DIROPS : 0;
#ifndef FUSE_CAP_DIRECT_IO_ALLOW_MMAP
	/* headers that cannot ask for it, whichever libfuse runs: the hook
	 * does (OR-ing the flag into a reply that has it changes nothing) */
	init_want |= INIT_MMAP;
#endif
	if (!init_want)
		return;
	if (fuse_session_custom_io(se, &io, fuse_session_fd(se)))
		objfs_info("cannot hook the FUSE device: lookups in one directory stay serialised, "
			   "and shared mmap of direct_io files refused");
}

/*
 * OBJFS_IOC_GPU_CAP: grants the caller (its uid, this inode, the version
 * pinned by this handle) a GPU side API capability. A restricted ioctl:
 * the kernel copies out exactly _IOC_SIZE bytes, so the reply is the fixed
 * struct. Anything else is ENOTTY, as for a file that knows no ioctls.
 */
static void ioctl_fh(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, struct fh *h,
		     unsigned flags, size_t out_bufsz);

static void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		     struct fuse_file_info *fi, unsigned flags, const void *in_buf,
		     size_t in_bufsz, size_t out_bufsz)
{
	struct hnd *ref;
	struct fh *h;

	(void)arg;
	(void)in_buf;
	(void)in_bufsz;
	if (flags & FUSE_IOCTL_DIR) {
		fuse_reply_err(req, ENOTTY);
		return;
	}
	h = hnd_get(fi->fh, &ref);
	if (!h) {
		fuse_reply_err(req, EBADF);
		return;
	}
	ioctl_fh(req, ino, cmd, h, flags, out_bufsz);
	hnd_put(ref);
}

static void ioctl_fh(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, struct fh *h,
		     unsigned flags, size_t out_bufsz)
{
	struct objfs_fs *fs = fs_of(req);
	struct objfs_side_cap cap;
	struct objfs_side_obj o;
	int err;

	if (cmd != OBJFS_IOC_GPU_CAP || (flags & FUSE_IOCTL_DIR)) {
		fuse_reply_err(req, ENOTTY);
		return;
	}
	if (h->text) {
		fuse_reply_err(req, ENOTTY);
		return;
	}
	if (!fs->side) {
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	if (out_bufsz < sizeof(cap)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	memset(&o, 0, sizeof(o));
	o.ino = ino;
	o.generation = 1; /* fill_entry's generation */
	o.obj = h->obj; /* the capability takes its own reference */
	err = objfs_side_grant(fs->side, fuse_req_ctx(req)->uid, &o, &cap);
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_ioctl(req, 0, &cap, sizeof(cap));
}

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.mknod = op_erofs_entry,
	.mkdir = op_erofs_mkdir,
	.unlink = op_erofs_unlink,
	.rmdir = op_erofs_unlink,
	.rename = op_erofs_rename,
	.create = op_erofs_create,
	.open = op_open,
	.read = op_read,
	.release = op_release,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.releasedir = op_releasedir,
	.statfs = op_statfs,
	.ioctl = op_ioctl,
};

/* Undoes mountinfo's octal escapes (\040 for ' ') in place. */
static void mountinfo_unescape(char *s)
{
	char *d = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*d++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'));
			s += 3;
		} else {
			*d++ = *s;
		}
	}
	*d = '\0';
}

/*
 * Looks through /proc/self/mountinfo (stat()ing our own mount before the
 * session loop runs would deadlock). With @path: the last FUSE mount on it
 * (ours), its device into *maj:*min. With NULL: whether a mount of device
 * *maj:*min is still there. 1 found, 0 not (or unreadable).
 */
static int fuse_mount_find(const char *path, unsigned *maj, unsigned *min)
{
	char line[PATH_MAX * 2];
	int found = 0;
	FILE *f = fopen("/proc/self/mountinfo", "re");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char mnt[PATH_MAX], fstype[64];
		unsigned a, b;

		if (sscanf(line, "%*s %*s %u:%u %*s %4095s %*[^-]- %63s", &a, &b, mnt,
			   fstype) != 4 || strncmp(fstype, "fuse", 4) != 0)
			continue;
		mountinfo_unescape(mnt);
		if (path && strcmp(mnt, path) == 0) {
			*maj = a, *min = b, found = 1; /* the last one is ours */
		} else if (!path && a == *maj && b == *min) {
			found = 1;
			break;
		}
	}
	fclose(f);
	return found;
}

/*
 * The kernel caps a FUSE mount's readahead at the block-device default
 * (128 KiB) whatever INIT asks for, so sequential reads arrive as 128 KiB
 * requests, one FUSE round trip each. Raising the mount's bdi read_ahead_kb
 * (device @maj:@min) lets the kernel send max_pages-sized requests and keep
 * several in flight. Needs root; otherwise reads still work, in smaller
 * requests.
 */
static void set_readahead(unsigned maj, unsigned min, unsigned kb)
{
	char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", maj, min);
	f = fopen(path, "we");
	if (f) {
		int bad = fprintf(f, "%u\n", kb) < 0;

		if (fclose(f) == 0 && !bad)
			return;
	}
	objfs_debug("cannot raise readahead through %s: %s (reads stay at 128 KiB)", path,
		    strerror(errno));
}

/*
 * How the session loop ended, as an exit: 0 or -EIO. A worker that takes
 * a request off the queue just as the kernel tears the connection down
 * (the last file of a lazily unmounted mount closed) reads ECONNABORTED,
 * not ENODEV (fs/fuse/dev.c checks its queue before copying the request
 * out), and libfuse ends the loop with that error (many readers closing
 * as the mount goes, as in load.sh, can meet it). When our mount (device
 * @maj:@min, 0:0 when it was never found) is gone, that is the normal end;
 * while it is still mounted the connection was aborted (through
 * /sys/fs/fuse/connections), and that stays an error, as any other.
 */
static int loop_end(int ret, unsigned maj, unsigned min)
{
	if (!ret)
		return 0;
	if (ret == -ECONNABORTED && !(maj | min ? fuse_mount_find(NULL, &maj, &min) : 0)) {
		objfs_debug("the FUSE connection ended while a request was being read: unmounted");
		return 0;
	}
	/* libfuse returns a worker's failed read of /dev/fuse (a negative
	 * errno) or the signal that stopped it (positive) */
	if (ret > 0)
		objfs_info("stopped by %s, the mount is gone", strsignal(ret));
	else
		objfs_err("the FUSE session ended with an error: %s", strerror(-ret));
	return -EIO;
}

int objfs_fs_run(struct objfs_fs *fs, int fuse_argc, char **fuse_argv, const char *mountpoint,
		 void (*ready)(void *arg), void *arg)
{
	struct fuse_args args = FUSE_ARGS_INIT(fuse_argc, fuse_argv);
	struct fuse_loop_config *cfg;
	struct fuse_session *se;
	unsigned maj = 0, min = 0; /* our mount's device, once found */
	int ret = -EIO;

	se = fuse_session_new(&args, &ops, sizeof(ops), fs);
	if (!se) {
		objfs_err("cannot create the FUSE session (bad FUSE option?)");
		goto out_args;
	}
	if (fuse_set_signal_handlers(se)) {
		objfs_err("cannot install signal handlers");
		goto out_session;
	}
	if (fuse_session_mount(se, mountpoint)) {
		objfs_err("cannot mount on '%s' (is /dev/fuse available and fusermount3 "
			  "installed?)", mountpoint);
		goto out_signals;
	}
	init_hooks(se);
	{
		char real[PATH_MAX];

		if (realpath(mountpoint, real) && fuse_mount_find(real, &maj, &min))
			set_readahead(maj, min, READAHEAD_KB);
	}
	if (ready)
		ready(arg);
	cfg = fuse_loop_cfg_create();
	if (!cfg) {
		ret = -ENOMEM;
		goto out_unmount;
	}
	/* a /dev/fuse clone per worker: each waits on its own queue, not all on one */
	fuse_loop_cfg_set_clone_fd(cfg, 1);
	fuse_loop_cfg_set_max_threads(cfg, fs->threads);
	ret = loop_end(fuse_session_loop_mt(se, cfg), maj, min);
	fuse_loop_cfg_destroy(cfg);
	objfs_spares_drop(&rdbufs);
out_unmount:
	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out_session:
	fuse_session_destroy(se);
out_args:
	fuse_opt_free_args(&args);
	return ret;
}
