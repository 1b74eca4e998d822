/*
 * mount: the composition root. Builds one mount's object graph from the
 * parsed options -- engine, store, inode table, block cache, disk cache,
 * side API server, FUSE file system -- serves until unmount and tears the
 * graph down in the one order that is safe (each part after everything
 * that borrows it). It alone knows every subsystem, so it alone formats
 * their counters into the one stats text (MOUNT/.objfs-stats, -o stats).
 */
#ifndef OBJFS_MOUNT_H
#define OBJFS_MOUNT_H

#include <stddef.h>

#include "cache.h"
#include "diskcache.h"
#include "options.h"
#include "side.h"
#include "stats.h"

struct objfs_mount_cfg {
	const char *source;           /* SOURCE as given; borrowed */
	const char *mountpoint;       /* borrowed */
	const struct objfs_opts *opts; /* borrowed */
	const char *argv0;            /* for FUSE's argv */
	int debug;                    /* -d: FUSE request trace */
	void (*ready)(void *arg);     /* called once after the mount succeeded */
	void *ready_arg;
};

/*
 * Probes the source, mounts, serves until unmount or a signal, and frees
 * everything. Failures are logged with the reason. Returns the process exit
 * status (0 or 1).
 */
int objfs_mount_run(const struct objfs_mount_cfg *cfg);

/*
 * Refuses mount point @mnt (a path, or /dev/fd/N: never refused) when a
 * mount there would hide something: when it is a mount point already (a
 * second objfs on it stacks over the first; /proc/self/mountinfo says, as
 * a bind mount keeps its parent's device) or holds entries; @nonempty
 * (-o nonempty, as libfuse 2 and s3fs spell it) allows both. An autofs
 * point is let through unread: systemd's automount waits there for this
 * very mount. 0, or -EBUSY / -ENOTEMPTY with the reason and the way out
 * logged.
 */
int objfs_mount_check_point(const char *mnt, int nonempty);

/*
 * Writes the engine counters of @s and, when not NULL, the block cache
 * counters of @c, the disk cache counters of @d (disk_cache_*; state "on",
 * or "off" once a disk error switched it off) and the side API counters of
 * @sd as "key value\n" lines into @buf (always NUL-terminated when @cap > 0).
 * Returns the length the full text needs, like snprintf.
 */
size_t objfs_stats_format(char *buf, size_t cap, const struct objfs_stats *s,
			  const struct objfs_cache_stats *c,
			  const struct objfs_diskcache_stats *d,
			  const struct objfs_side_stats *sd);

#endif
