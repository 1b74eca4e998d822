/*
 * hang_fuse: a FUSE file system whose one file, "f" (4 KiB of zeros),
 * opens and reads normally but whose FLUSH is never answered: a close()
 * of it waits, unkillably (the kernel sends FLUSH as a forced request),
 * until this process exits or the mount is aborted. A hostile client of
 * the side API can send such a descriptor to the daemon (side_client
 * ringfd); the daemon must never hold it (side_host.sh).
 *
 *   hang_fuse MOUNTPOINT
 *
 * Runs in the foreground until killed or unmounted.
 */
#define FUSE_USE_VERSION 312
#define _GNU_SOURCE
#include <errno.h>
#include <fuse_lowlevel.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FILE_INO 2
#define FILE_SIZE 4096

static int stat_of(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	if (ino == FUSE_ROOT_ID) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
	} else if (ino == FILE_INO) {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = FILE_SIZE;
	} else {
		return -ENOENT;
	}
	return 0;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e = { .ino = FILE_INO, .attr_timeout = 60, .entry_timeout = 60 };

	if (parent != FUSE_ROOT_ID || strcmp(name, "f") != 0) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	stat_of(FILE_INO, &e.attr);
	fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;

	(void)fi;
	if (stat_of(ino, &st))
		fuse_reply_err(req, ENOENT);
	else
		fuse_reply_attr(req, &st, 60);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino != FILE_INO)
		fuse_reply_err(req, EISDIR);
	else
		fuse_reply_open(req, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	static const char zeros[FILE_SIZE];

	(void)ino;
	(void)fi;
	if (off >= FILE_SIZE)
		size = 0;
	else if (size > (size_t)(FILE_SIZE - off))
		size = (size_t)(FILE_SIZE - off);
	fuse_reply_buf(req, zeros, size);
}

/* Never answered: the closer waits for as long as this process lives. */
static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)req;
	(void)ino;
	(void)fi;
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	fuse_reply_err(req, 0);
}

static const struct fuse_lowlevel_ops ops = {
	.lookup = op_lookup,
	.getattr = op_getattr,
	.open = op_open,
	.read = op_read,
	.flush = op_flush,
	.release = op_release,
};

int main(int argc, char **argv)
{
	char *fargv[] = { argv[0], "-o", "ro", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
	struct fuse_session *se;
	int rc = 1;

	if (argc != 2) {
		fprintf(stderr, "usage: hang_fuse MOUNTPOINT\n");
		return 2;
	}
	se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
	if (se && fuse_session_mount(se, argv[1]) == 0) {
		rc = fuse_session_loop(se) ? 1 : 0;
		fuse_session_unmount(se);
	}
	if (se)
		fuse_session_destroy(se);
	return rc;
}
