/*
 * safepath: opening a path that root (or the mounting user) names, in a
 * tree where other users own or may write some directories, without
 * letting them choose what is opened.
 *
 * Why: the daemon runs as root. A path such as /tmp/objfs.log or a
 * cache_dir under a loose /var/log/x lets another user put a symlink or a
 * file of their own at a name, or swap one in between two opens (logrotate
 * and SIGHUP), and so choose which file root appends to, truncates or
 * creates. So the path is walked from / one component at a time (openat
 * O_PATH|O_NOFOLLOW, fstat of each fd, not of the name: nothing can be
 * swapped between the check and the use): every directory on the way is
 * owned by root or the euid and not writable by group or others unless
 * sticky (as /tmp: others' names there cannot replace ours, and whatever
 * they create is refused below); a symlink on the way is followed only
 * when root or the euid owns it, its target walked the same way, at most
 * SAFEPATH_MAX_LINKS. The last component is then opened relative to the
 * directory's fd with O_NOFOLLOW, and checked through the new fd.
 *
 * Messages name @what (the option, "cache_dir", "log_file"), the path as
 * given and what is wrong, e.g. "log_file /var/log/x/objfs.log: /var/log/x
 * is writable by group or others (mode 0777) and not sticky".
 *
 * Thread-safe (no shared state); not async-signal-safe (snprintf).
 */
#ifndef OBJFS_SAFEPATH_H
#define OBJFS_SAFEPATH_H

#include <stddef.h>
#include <sys/types.h>

#define SAFEPATH_MAX_LINKS 40

/*
 * Walks @path (relative: against the working directory) as the header
 * says, up to its last component, which may be missing (a trusted symlink
 * there is followed; "." when @path names / or ends in "/."). Returns an
 * O_PATH fd of the directory that holds it, the caller's to close, and
 * the last component in @name (NAME_MAX + 1 bytes) to open relative to
 * it with O_NOFOLLOW; or -errno (-EPERM: a directory or symlink others
 * control) with the reason in @err.
 */
int objfs_safepath_parent(const char *what, const char *path, uid_t euid, char *name,
			  char *err, size_t errlen);

/*
 * Opens the file @path for appending (O_WRONLY|O_APPEND|O_CLOEXEC), made
 * with @mode when missing. Refused unless reached by
 * objfs_safepath_parent(), not a symlink itself, and, checked through
 * the new fd: a regular file owned by @euid, not writable by group or
 * others, with one name (a hard link to a file elsewhere has two). Returns
 * the fd, the caller's to close, or -errno with the reason in @err.
 */
int objfs_safepath_append(const char *what, const char *path, uid_t euid, mode_t mode,
			  char *err, size_t errlen);

#endif
