/*
 * log: leveled logging to stderr or syslog.
 *
 * One global level, set once at start-up. Messages are single lines (control
 * characters are printed as '?'); callers never pass secrets (credentials
 * are redacted by their owners before they reach a format string).
 * Thread-safe: each message is one write(2)-sized fprintf under stdio's own
 * lock.
 *
 * One prefix for every line a user reads: "objfs: " and the message, on
 * stderr as in main's own messages, whatever the level (a message says
 * what went wrong in its words, not with a level tag). The level shows
 * where lines are kept: "error: " or "warning: " after the prefix in the
 * log_file, and syslog's priority. With a log_file, errors go to stderr
 * too until the daemon leaves its terminal (objfs_log_use_syslog): a
 * mount that fails says why where it was asked for.
 */
#ifndef OBJFS_LOG_H
#define OBJFS_LOG_H

#include <stddef.h>

enum objfs_log_level {
	OBJFS_LOG_ERR = 0,
	OBJFS_LOG_WARN,
	OBJFS_LOG_INFO,
	OBJFS_LOG_DEBUG,
};

/* Parse "error|warn|info|debug"; returns 0 or -EINVAL. */
int objfs_log_parse_level(const char *s, enum objfs_log_level *out);
void objfs_log_set_level(enum objfs_log_level lvl);
enum objfs_log_level objfs_log_get_level(void);
/* After daemonising, send messages to syslog instead of stderr. */
void objfs_log_use_syslog(int on);
/*
 * Sends every message to the file at @path (absolute), timestamped, from
 * now on and ahead of syslog; SIGHUP reopens it (log.c). Opened and
 * reopened only as objfs_safepath_append() allows. 0, or -errno with the
 * reason, naming the path, in @err.
 */
int objfs_log_open_file(const char *path, char *err, size_t errlen);
int objfs_log_to_file(void);

void objfs_log(enum objfs_log_level lvl, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/*
 * A line for operators (the summary at mount): always written to a log
 * file or syslog, to stderr only from log_level=info on.
 */
void objfs_log_notice(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define objfs_err(...)   objfs_log(OBJFS_LOG_ERR, __VA_ARGS__)
#define objfs_warn(...)  objfs_log(OBJFS_LOG_WARN, __VA_ARGS__)
#define objfs_info(...)  objfs_log(OBJFS_LOG_INFO, __VA_ARGS__)
#define objfs_debug(...)                                              \
	do {                                                          \
		if (objfs_log_get_level() >= OBJFS_LOG_DEBUG)         \
			objfs_log(OBJFS_LOG_DEBUG, __VA_ARGS__);      \
	} while (0)

#endif
