/*
 * Unit tests of src/util/safepath.c (a path walked so that no other user
 * chooses what is opened) and of log_file, which opens its file through
 * it at start and at each SIGHUP. The parts that need another user's
 * files (chown to uid 65534) run as root only.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "safepath.h"

#define OTHER 65534

static char dir[256];

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/check_safepath.XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	(void)!system(cmd);
}

/* @dir/@rel into @out (PATH_MAX bytes). */
static char *at_dir(char *out, const char *rel)
{
	snprintf(out, PATH_MAX, "%s/%s", dir, rel);
	return out;
}

static void put_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	ck_assert_int_eq(chmod(path, mode), 0);
}

/* The whole file @path (up to 4 KiB) into @buf. */
static const char *slurp(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY);
	ssize_t n;

	ck_assert_int_ge(fd, 0);
	n = read(fd, buf, cap - 1);
	close(fd);
	ck_assert_int_ge(n, 0);
	buf[n] = '\0';
	return buf;
}

static void file_is(const char *path, const char *text)
{
	char buf[4096];

	ck_assert_str_eq(slurp(path, buf, sizeof(buf)), text);
}

/* objfs_safepath_append as the current euid, the reason in @err. */
static int append(const char *path, char *err, size_t errlen)
{
	return objfs_safepath_append("log_file", path, geteuid(), 0640, err, errlen);
}

/* A missing file is made 0640 (umask 022) and appended to; an existing one kept. */
START_TEST(test_append_creates_and_appends)
{
	char p[PATH_MAX], err[1024];
	struct stat st;
	int fd;

	umask(022);
	fd = append(at_dir(p, "log"), err, sizeof(err));
	ck_assert_msg(fd >= 0, "refused: %s", err);
	ck_assert_int_eq(write(fd, "a\n", 2), 2);
	close(fd);
	ck_assert_int_eq(stat(p, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0640);
	ck_assert_int_eq((int)st.st_uid, (int)geteuid());
	fd = append(p, err, sizeof(err));
	ck_assert_msg(fd >= 0, "refused: %s", err);
	ck_assert_int_eq(fcntl(fd, F_GETFL) & (O_NONBLOCK | O_APPEND), O_APPEND);
	ck_assert_int_ne(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
	ck_assert_int_eq(write(fd, "b\n", 2), 2);
	close(fd);
	file_is(p, "a\nb\n");
}
END_TEST

/*
 * At the name: a file writable by others, a hard link to a file
 * elsewhere, a FIFO (the open must not block), a directory. Each refused
 * with the path and the reason; the file behind it keeps its bytes.
 */
START_TEST(test_append_refuses_what_is_there)
{
	char p[PATH_MAX], victim[PATH_MAX], err[1024];

	at_dir(p, "log");
	put_file(p, "theirs\n", 0666);
	ck_assert_int_eq(append(p, err, sizeof(err)), -EPERM);
	ck_assert_msg(strstr(err, p) && strstr(err, "writable by group or others"), "%s", err);
	file_is(p, "theirs\n");
	ck_assert_int_eq(unlink(p), 0);

	put_file(at_dir(victim, "victim"), "precious\n", 0600);
	ck_assert_int_eq(link(victim, p), 0);
	ck_assert_int_eq(append(p, err, sizeof(err)), -EPERM);
	ck_assert_msg(strstr(err, p) && strstr(err, "hard links"), "%s", err);
	file_is(victim, "precious\n");
	ck_assert_int_eq(unlink(p), 0);

	ck_assert_int_eq(mkfifo(p, 0600), 0);
	ck_assert_int_lt(append(p, err, sizeof(err)), 0);
	ck_assert_msg(strstr(err, p) && strstr(err, "not a regular file"), "%s", err);
	ck_assert_int_eq(unlink(p), 0);

	ck_assert_int_eq(mkdir(p, 0700), 0);
	ck_assert_int_lt(append(p, err, sizeof(err)), 0);
	ck_assert_msg(strstr(err, p), "%s", err);
}
END_TEST

/*
 * Another user's file or symlink at the name (root only): refused, the
 * symlink's target untouched; in a directory others may write and that is
 * not sticky, nothing is created at all.
 */
START_TEST(test_append_refuses_other_users)
{
	char p[PATH_MAX], victim[PATH_MAX], loose[PATH_MAX], err[1024];
	struct stat st;

	if (geteuid() != 0)
		return;
	at_dir(p, "log");
	put_file(p, "theirs\n", 0600);
	ck_assert_int_eq(chown(p, OTHER, OTHER), 0);
	ck_assert_int_eq(append(p, err, sizeof(err)), -EPERM);
	ck_assert_msg(strstr(err, p) && strstr(err, "owned by uid 65534"), "%s", err);
	file_is(p, "theirs\n");
	ck_assert_int_eq(unlink(p), 0);

	put_file(at_dir(victim, "victim"), "precious\n", 0600);
	ck_assert_int_eq(symlink(victim, p), 0);
	ck_assert_int_eq(lchown(p, OTHER, OTHER), 0);
	ck_assert_int_eq(append(p, err, sizeof(err)), -EPERM);
	ck_assert_msg(strstr(err, p) && strstr(err, "symbolic link owned by uid 65534"), "%s",
		      err);
	file_is(victim, "precious\n");
	ck_assert_int_eq(lstat(p, &st), 0);
	ck_assert(S_ISLNK(st.st_mode));
	ck_assert_int_eq(unlink(p), 0);
	/* a dangling one: O_CREAT must not make its target */
	at_dir(victim, "made");
	ck_assert_int_eq(symlink(victim, p), 0);
	ck_assert_int_eq(lchown(p, OTHER, OTHER), 0);
	ck_assert_int_eq(append(p, err, sizeof(err)), -EPERM);
	ck_assert_int_eq(access(victim, F_OK), -1);
	ck_assert_int_eq(unlink(p), 0);

	ck_assert_int_eq(mkdir(at_dir(loose, "loose"), 0777), 0);
	ck_assert_int_eq(chmod(loose, 0777), 0);
	snprintf(p, sizeof(p), "%s/log", loose);
	ck_assert_int_eq(append(p, err, sizeof(err)), -EPERM);
	ck_assert_msg(strstr(err, loose) && strstr(err, "not sticky"), "%s", err);
	ck_assert_int_eq(access(p, F_OK), -1);
	ck_assert_int_eq(chmod(loose, 01777), 0); /* as /tmp */
	ck_assert_int_ge(append(p, err, sizeof(err)), 0);
}
END_TEST

/*
 * The parent walk: the last component returned (missing or not), a
 * symlink of ours followed to its target's directory, "." and trailing
 * slashes, a relative path, a missing directory on the way, a loop.
 */
START_TEST(test_parent_walk)
{
	char p[PATH_MAX], q[PATH_MAX], name[NAME_MAX + 1], err[1024], here[PATH_MAX];
	struct stat a, b;
	int fd;

	ck_assert_int_eq(mkdir(at_dir(p, "d"), 0755), 0);
	fd = objfs_safepath_parent("x", at_dir(p, "d/missing"), geteuid(), name, err, sizeof(err));
	ck_assert_msg(fd >= 0, "%s", err);
	ck_assert_str_eq(name, "missing");
	ck_assert_int_eq(fstat(fd, &a), 0);
	ck_assert_int_eq(stat(at_dir(q, "d"), &b), 0);
	ck_assert(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
	close(fd);

	put_file(at_dir(p, "d/target"), "", 0600);
	ck_assert_int_eq(symlink(at_dir(q, "d/target"), at_dir(p, "link")), 0);
	fd = objfs_safepath_parent("x", p, geteuid(), name, err, sizeof(err));
	ck_assert_msg(fd >= 0, "%s", err);
	ck_assert_str_eq(name, "target");
	ck_assert_int_eq(fstat(fd, &a), 0);
	ck_assert(a.st_ino == b.st_ino);
	close(fd);

	fd = objfs_safepath_parent("x", at_dir(p, "d/./"), geteuid(), name, err, sizeof(err));
	ck_assert_msg(fd >= 0, "%s", err);
	ck_assert_str_eq(name, ".");
	ck_assert_int_eq(fstat(fd, &a), 0);
	ck_assert(a.st_ino == b.st_ino);
	close(fd);
	fd = objfs_safepath_parent("x", "/", geteuid(), name, err, sizeof(err));
	ck_assert_msg(fd >= 0, "%s", err);
	ck_assert_str_eq(name, ".");
	close(fd);

	ck_assert_ptr_nonnull(getcwd(here, sizeof(here)));
	ck_assert_int_eq(chdir(dir), 0);
	fd = objfs_safepath_parent("x", "d/target", geteuid(), name, err, sizeof(err));
	ck_assert_int_eq(chdir(here), 0);
	ck_assert_msg(fd >= 0, "%s", err);
	ck_assert_str_eq(name, "target");
	close(fd);

	ck_assert_int_eq(objfs_safepath_parent("x", at_dir(p, "none/log"), geteuid(), name, err,
					       sizeof(err)), -ENOENT);
	ck_assert_msg(strstr(err, "x ") == err && strstr(err, "none"), "%s", err);
	ck_assert_int_eq(symlink(at_dir(q, "loop2"), at_dir(p, "loop1")), 0);
	ck_assert_int_eq(symlink(at_dir(q, "loop1"), at_dir(p, "loop2")), 0);
	ck_assert_int_eq(objfs_safepath_parent("x", p, geteuid(), name, err, sizeof(err)), -ELOOP);
}
END_TEST

/*
 * log_file across SIGHUP: the file rotated and a hard link to another
 * file (or, as root, another user's symlink to it) put in its place. The
 * reopen is refused, the lines go on to the old file with one line saying
 * why, the other file keeps its bytes; once the name is free again the
 * next SIGHUP opens a new file. Check runs each test in a child of its
 * own, so the log's globals do not outlive it.
 */
START_TEST(test_log_reopen_refused)
{
	char p[PATH_MAX], rotated[PATH_MAX], victim[PATH_MAX], err[1024], buf[4096];

	objfs_log_set_level(OBJFS_LOG_WARN);
	ck_assert_msg(objfs_log_open_file(at_dir(p, "log"), err, sizeof(err)) == 0, "%s", err);
	objfs_warn("line one");
	ck_assert_int_eq(rename(p, at_dir(rotated, "log.1")), 0);
	put_file(at_dir(victim, "victim"), "precious\n", 0600);
	if (geteuid() == 0) {
		ck_assert_int_eq(symlink(victim, p), 0);
		ck_assert_int_eq(lchown(p, OTHER, OTHER), 0);
	} else {
		ck_assert_int_eq(link(victim, p), 0);
	}
	ck_assert_int_eq(raise(SIGHUP), 0);
	objfs_warn("line two");
	file_is(victim, "precious\n");
	slurp(rotated, buf, sizeof(buf));
	ck_assert_msg(strstr(buf, "line one") && strstr(buf, "line two"), "%s", buf);
	ck_assert_msg(strstr(buf, "not reopened on SIGHUP") && strstr(buf, p), "%s", buf);
	ck_assert_ptr_eq(strstr(strstr(buf, "not reopened") + 1, "not reopened"), NULL);

	ck_assert_int_eq(unlink(p), 0);
	ck_assert_int_eq(raise(SIGHUP), 0);
	objfs_warn("line three");
	ck_assert_ptr_null(strstr(slurp(rotated, buf, sizeof(buf)), "line three"));
	ck_assert_ptr_nonnull(strstr(slurp(p, buf, sizeof(buf)), "line three"));
	file_is(victim, "precious\n");
}
END_TEST

/* At start the same checks refuse, naming the path and the reason. */
START_TEST(test_log_open_refused)
{
	char p[PATH_MAX], victim[PATH_MAX], err[1024];

	put_file(at_dir(victim, "victim"), "precious\n", 0600);
	ck_assert_int_eq(link(victim, at_dir(p, "log")), 0);
	ck_assert_int_ne(objfs_log_open_file(p, err, sizeof(err)), 0);
	ck_assert_msg(strstr(err, "log_file ") == err && strstr(err, p), "%s", err);
	ck_assert_int_eq(objfs_log_to_file(), 0);
	file_is(victim, "precious\n");
	ck_assert_int_eq(objfs_log_open_file("relative/log", err, sizeof(err)), -EINVAL);
}
END_TEST

static Suite *safepath_suite(void)
{
	Suite *s = suite_create("safepath");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_append_creates_and_appends);
	tcase_add_test(tc, test_append_refuses_what_is_there);
	tcase_add_test(tc, test_append_refuses_other_users);
	tcase_add_test(tc, test_parent_walk);
	tcase_add_test(tc, test_log_open_refused); /* first: no log file open yet (CK_FORK=no) */
	tcase_add_test(tc, test_log_reopen_refused);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(safepath_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
