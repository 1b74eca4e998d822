/*
 * fs: the FUSE lowlevel operations table. The only file that includes
 * fuse_lowlevel.h; it translates FUSE requests into inode calls and, for
 * reads, into one call of the open handle's reader (reader.h, which owns
 * the read policy), and ends every handler in exactly one fuse_reply_*.
 */
#ifndef OBJFS_FS_H
#define OBJFS_FS_H

#include <sys/types.h>

#include "cache.h"
#include "inode.h"
#include "side.h"
#include "store.h"

struct objfs_fs {
	struct objfs_inodes *inodes; /* borrowed */
	struct objfs_store *store;   /* borrowed */
	struct objfs_cache *cache;   /* borrowed */
	struct objfs_side *side;     /* borrowed; NULL with side=off */
	/* The text of MOUNT/.objfs-stats: like snprintf into @buf, returns the
	 * length the whole text needs. Set by the composition root, which
	 * alone knows every subsystem's counters. */
	size_t (*stats_text)(void *arg, char *buf, size_t cap);
	void *stats_arg;
	double attr_timeout;         /* seconds, kernel and objfs */
	double entry_timeout;        /* seconds, kernel dentries */
	double negative_timeout;     /* seconds, kernel negative dentries */
	size_t prefetch_max;         /* largest readahead window of one handle */
	unsigned threads;            /* FUSE worker threads, at most */
	int direct_io;               /* opens bypass the kernel page cache */
	uid_t uid;
	gid_t gid;
	mode_t umask;
	double mount_time;           /* wall clock, for directory times */
};

/*
 * Creates the FUSE session for @mountpoint with @fuse_argv (argv[0] first),
 * mounts it, runs the multi-threaded loop until unmount or a signal, and
 * unmounts. @ready is called once after a successful mount (to detach from
 * the terminal). Returns 0 or -errno; mount failures are logged.
 */
int objfs_fs_run(struct objfs_fs *fs, int fuse_argc, char **fuse_argv, const char *mountpoint,
		 void (*ready)(void *arg), void *arg);

#endif
