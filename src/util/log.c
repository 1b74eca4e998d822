/*
 * log: see log.h. Kept tiny on purpose: every module logs, so this file must
 * depend on nothing else in objfs. Control characters in a message (object
 * names carry any byte but '/' and NUL) are written as '?', so one message
 * stays one line.
 *
 * log_file: messages are appended to a file, each with a UTC timestamp,
 * through one descriptor opened O_APPEND, written with one write(2) per
 * line (lines of concurrent threads do not interleave). The daemon runs as
 * root and the file may lie where other users can create names (/tmp), so
 * it is opened by objfs_safepath_append(): never through another user's
 * symlink, only a regular file of the daemon's euid with one name and no
 * group or other write bit (made 0640 when missing).
 *
 * logrotate moves the file and sends SIGHUP. The walk and its checks are
 * not async-signal-safe, so the handler only raises a flag; the first
 * thread that logs after it opens the path again, with the same checks,
 * and dup2()s the new descriptor over the old one (writers never see a
 * closed descriptor) before it writes: no line goes to the rotated file
 * after the signal, and a daemon that logs nothing opens nothing. A
 * reopen that fails keeps the old descriptor and says why in one line.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "safepath.h"

static enum objfs_log_level g_level = OBJFS_LOG_WARN;
static int g_syslog;
static int g_file_fd = -1;
static char g_file_path[4096];

#define FILE_MODE 0640

static atomic_int g_hup;  /* SIGHUP seen: reopen before the next line */
static pthread_mutex_t g_reopen_lock = PTHREAD_MUTEX_INITIALIZER;

static void on_sighup(int sig)
{
	(void)sig;
	atomic_store(&g_hup, 1);
}

/* Opens the path again once per SIGHUP; on failure the old fd stays. */
static void reopen(void)
{
	char err[1024];
	int fd = 0;

	pthread_mutex_lock(&g_reopen_lock);
	if (atomic_exchange(&g_hup, 0)) {
		fd = objfs_safepath_append("log_file", g_file_path, geteuid(), FILE_MODE, err,
					   sizeof(err));
		if (fd >= 0) {
			dup2(fd, g_file_fd);
			close(fd);
		}
	}
	pthread_mutex_unlock(&g_reopen_lock);
	if (fd < 0)
		objfs_log(OBJFS_LOG_ERR, "%s; not reopened on SIGHUP, still writing to the file "
			  "opened before", err);
}

int objfs_log_open_file(const char *path, char *err, size_t errlen)
{
	struct sigaction sa;
	int fd;

	if (!path || path[0] != '/' || strlen(path) >= sizeof(g_file_path)) {
		snprintf(err, errlen, "log_file %s: not an absolute path shorter than %zu bytes",
			 path ? path : "(none)", sizeof(g_file_path));
		return -EINVAL;
	}
	fd = objfs_safepath_append("log_file", path, geteuid(), FILE_MODE, err, errlen);
	if (fd < 0)
		return fd;
	strcpy(g_file_path, path);
	g_file_fd = fd;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sighup;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGHUP, &sa, NULL);
	return 0;
}

int objfs_log_to_file(void) { return g_file_fd >= 0; }

static const char *const level_names[] = { "error", "warn", "info", "debug" };

int objfs_log_parse_level(const char *s, enum objfs_log_level *out)
{
	for (unsigned i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcmp(s, level_names[i]) == 0) {
			*out = (enum objfs_log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

void objfs_log_set_level(enum objfs_log_level lvl) { g_level = lvl; }
enum objfs_log_level objfs_log_get_level(void) { return g_level; }

void objfs_log_use_syslog(int on)
{
	if (on && !g_syslog)
		openlog("objfs", LOG_PID, LOG_DAEMON);
	g_syslog = on;
}

static void vlog(enum objfs_log_level lvl, const char *fmt, va_list ap)
{
	static const int prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };
	char line[1024];

	if (g_file_fd >= 0 && atomic_load_explicit(&g_hup, memory_order_relaxed))
		reopen();
	vsnprintf(line, sizeof(line), fmt, ap);
	/* Names and keys come from the network: a newline in one must not
	 * forge a log line, nor an escape sequence drive the terminal. */
	for (char *p = line; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	if (g_file_fd >= 0) {
		char out[1200];
		struct timespec ts;
		struct tm tm;
		int n;

		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		n = snprintf(out, sizeof(out), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ objfs[%d]: %s%s\n",
			     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
			     tm.tm_sec, ts.tv_nsec / 1000000, (int)getpid(),
			     lvl == OBJFS_LOG_ERR ? "error: " :
			     lvl == OBJFS_LOG_WARN ? "warning: " : "", line);
		if (n > (int)sizeof(out) - 1)
			n = (int)sizeof(out) - 1, out[n - 1] = '\n';
		(void)!write(g_file_fd, out, (size_t)n);
		/* until the daemon lets its terminal go, an error is the user's
		 * to read too: the reason a mount failed */
		if (lvl == OBJFS_LOG_ERR && !g_syslog)
			fprintf(stderr, "objfs: %s\n", line);
	} else if (g_syslog)
		syslog(prio[lvl], "%s", line);
	else
		fprintf(stderr, "objfs: %s\n", line);
}

void objfs_log(enum objfs_log_level lvl, const char *fmt, ...)
{
	va_list ap;

	if (lvl > g_level)
		return;
	va_start(ap, fmt);
	vlog(lvl, fmt, ap);
	va_end(ap);
}

void objfs_log_notice(const char *fmt, ...)
{
	va_list ap;

	if (g_file_fd < 0 && !g_syslog && g_level < OBJFS_LOG_INFO)
		return;
	va_start(ap, fmt);
	vlog(OBJFS_LOG_INFO, fmt, ap);
	va_end(ap);
}
