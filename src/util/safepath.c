/*
 * safepath: see safepath.h. The walk keeps two strings: what is left of
 * the path to walk (a symlink's target is put in front of it) and the
 * directory reached so far, as shown in messages.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safepath.h"

/* "/DIR" of @shown for a message about its entry: "" for / itself. */
static const char *in(const char *shown)
{
	return strcmp(shown, "/") ? shown : "";
}

/*
 * Whether the directory @fd, shown as @shown, may lie on the way: owned
 * by root or @euid, not writable by group or others unless sticky. 0, or
 * -EPERM / -ENOTDIR with the reason in @err.
 */
static int ancestor_ok(int fd, const char *what, const char *path, const char *shown,
		       uid_t euid, char *err, size_t errlen)
{
	struct stat st;

	if (fstat(fd, &st)) {
		int e = errno;

		snprintf(err, errlen, "%s %s: cannot stat %s: %s", what, path, shown, strerror(e));
		return -e;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "%s %s: %s is not a directory", what, path, shown);
		return -ENOTDIR;
	}
	if (st.st_uid != 0 && st.st_uid != euid) {
		snprintf(err, errlen, "%s %s: %s is owned by uid %u, not by root or the "
			 "mounting user %u", what, path, shown, (unsigned)st.st_uid, (unsigned)euid);
		return -EPERM;
	}
	if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX)) {
		snprintf(err, errlen, "%s %s: %s is writable by group or others (mode %04o) and "
			 "not sticky", what, path, shown, (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

/* @shown (PATH_MAX bytes) one step further: "/@name", ".." one step back. */
static void shown_step(char *shown, const char *name)
{
	size_t n = strlen(shown);

	if (!strcmp(name, "..")) {
		while (n && shown[n - 1] != '/')
			n--;
		shown[n > 1 ? n - 1 : n] = '\0';
		if (!shown[0])
			strcpy(shown, "/");
		return;
	}
	snprintf(shown + n, PATH_MAX - n, "%s%s", n > 1 ? "/" : "", name);
}

int objfs_safepath_parent(const char *what, const char *path, uid_t euid, char *name,
			  char *err, size_t errlen)
{
	char rest[2 * PATH_MAX + 2], tmp[2 * PATH_MAX + 2], shown[PATH_MAX], target[PATH_MAX];
	const char *pos;
	int cur, next, links = 0, ret;

	if (errlen)
		err[0] = '\0';
	strcpy(name, ".");
	if (path[0] != '/' && !getcwd(shown, sizeof(shown))) {
		ret = -errno;
		snprintf(err, errlen, "%s %s: cannot resolve against the working directory: %s",
			 what, path, strerror(-ret));
		return ret;
	}
	if (snprintf(rest, sizeof(rest), "%s/%s", path[0] == '/' ? "" : shown, path) >=
	    (int)sizeof(rest)) {
		snprintf(err, errlen, "%s %s: path too long", what, path);
		return -ENAMETOOLONG;
	}
	cur = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (cur < 0) {
		ret = -errno;
		snprintf(err, errlen, "%s %s: cannot open /: %s", what, path, strerror(-ret));
		return ret;
	}
	strcpy(shown, "/");
	ret = ancestor_ok(cur, what, path, shown, euid, err, errlen);
	for (pos = rest; !ret;) {
		char comp[NAME_MAX + 1];
		size_t len;
		struct stat st;
		int last;

		pos += strspn(pos, "/");
		if (!*pos)
			break;
		len = strcspn(pos, "/");
		if (len > NAME_MAX) {
			snprintf(err, errlen, "%s %s: a component is too long", what, path);
			ret = -ENAMETOOLONG;
			break;
		}
		memcpy(comp, pos, len);
		comp[len] = '\0';
		pos += len;
		last = !pos[strspn(pos, "/")];
		if (last || !strcmp(comp, "."))
			strcpy(name, last ? comp : ".");
		if (!strcmp(comp, "."))
			continue;
		if (strcmp(comp, "..")) {
			if (fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW)) {
				ret = -errno;
				if (ret == -ENOENT && last) { /* the caller makes it */
					ret = 0;
					break;
				}
				snprintf(err, errlen, "%s %s: %s/%s: %s", what, path, in(shown), comp,
					 strerror(-ret));
				break;
			}
			if (S_ISLNK(st.st_mode)) {
				ssize_t n;

				if (st.st_uid != 0 && st.st_uid != euid) {
					snprintf(err, errlen, "%s %s: %s/%s is a symbolic link owned "
						 "by uid %u, not by root or the mounting user %u",
						 what, path, in(shown), comp, (unsigned)st.st_uid,
						 (unsigned)euid);
					ret = -EPERM;
					break;
				}
				n = readlinkat(cur, comp, target, sizeof(target) - 1);
				if (n <= 0 || ++links > SAFEPATH_MAX_LINKS) {
					ret = n < 0 ? -errno : -ELOOP;
					snprintf(err, errlen, "%s %s: following %s/%s: %s", what, path,
						 in(shown), comp, strerror(-ret));
					break;
				}
				target[n] = '\0';
				if (snprintf(tmp, sizeof(tmp), "%s/%s", target, pos) >=
				    (int)sizeof(tmp)) {
					snprintf(err, errlen, "%s %s: path too long", what, path);
					ret = -ENAMETOOLONG;
					break;
				}
				memcpy(rest, tmp, sizeof(rest));
				pos = rest;
				strcpy(name, ".");
				if (target[0] == '/') { /* from / again */
					next = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
					if (next < 0) {
						ret = -errno;
						snprintf(err, errlen, "%s %s: cannot open /: %s", what,
							 path, strerror(-ret));
						break;
					}
					close(cur);
					cur = next;
					strcpy(shown, "/");
				}
				continue;
			}
			if (last) /* the caller opens it, O_NOFOLLOW */
				break;
		} else if (last) {
			break;
		}
		next = openat(cur, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0) {
			ret = -errno;
			snprintf(err, errlen, "%s %s: %s/%s: %s", what, path, in(shown), comp,
				 ret == -ELOOP ? "a symbolic link appeared" : strerror(-ret));
			break;
		}
		close(cur);
		cur = next;
		shown_step(shown, comp);
		ret = ancestor_ok(cur, what, path, shown, euid, err, errlen);
	}
	if (ret) {
		close(cur);
		return ret;
	}
	return cur;
}

int objfs_safepath_append(const char *what, const char *path, uid_t euid, mode_t mode,
			  char *err, size_t errlen)
{
	char name[NAME_MAX + 1];
	struct stat st;
	int at, fd, ret;

	at = objfs_safepath_parent(what, path, euid, name, err, errlen);
	if (at < 0)
		return at;
	/* O_NONBLOCK: a FIFO in its place fails (ENXIO) or opens, never blocks */
	fd = openat(at, name, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY |
		    O_CLOEXEC, mode);
	ret = fd < 0 ? -errno : 0;
	close(at);
	if (ret) {
		snprintf(err, errlen, "%s %s: %s", what, path,
			 ret == -ELOOP ? "a symbolic link: not followed" :
			 ret == -ENXIO ? "not a regular file" : strerror(-ret));
		return ret;
	}
	if (fstat(fd, &st)) {
		ret = -errno;
		snprintf(err, errlen, "%s %s: cannot stat: %s", what, path, strerror(-ret));
	} else if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s %s: not a regular file", what, path);
		ret = -EPERM;
	} else if (st.st_uid != euid) {
		snprintf(err, errlen, "%s %s: owned by uid %u, not by the mounting user %u", what,
			 path, (unsigned)st.st_uid, (unsigned)euid);
		ret = -EPERM;
	} else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(err, errlen, "%s %s: writable by group or others (mode %04o)", what, path,
			 (unsigned)(st.st_mode & 07777));
		ret = -EPERM;
	} else if (st.st_nlink != 1) {
		snprintf(err, errlen, "%s %s: has %lu names (hard links); it must have one", what,
			 path, (unsigned long)st.st_nlink);
		ret = -EPERM;
	} else if (fcntl(fd, F_SETFL, O_APPEND) < 0) { /* blocking again */
		ret = -errno;
		snprintf(err, errlen, "%s %s: %s", what, path, strerror(-ret));
	}
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
}
