/*
 * fs: the FUSE lowlevel operations table. The only file that includes
 * fuse_lowlevel.h; it translates FUSE requests into inode and store calls
 * and ends every handler in exactly one fuse_reply_*.
 */
#ifndef OBJFS_FS_H
#define OBJFS_FS_H

#include <sys/types.h>

#include "cache.h"
#include "inode.h"
#include "options.h"
#include "store.h"

struct objfs_fs {
	struct objfs_inodes *inodes; /* borrowed */
	struct objfs_store *store;   /* borrowed */
	struct objfs_cache *cache;   /* borrowed */
	struct objfs_side *side;     /* borrowed; NULL with side=off */
	struct objfs_diskcache *disk; /* borrowed; NULL without cache_dir */
	const struct objfs_opts *opts;
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
