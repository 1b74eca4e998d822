/*
 * log: see log.h. Kept tiny on purpose: every module logs, so this file must
 * depend on nothing else in objfs. Control characters in a message (object
 * names carry any byte but '/' and NUL) are written as '?', so one message
 * stays one line.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>

#include "log.h"

static enum objfs_log_level g_level = OBJFS_LOG_WARN;
static int g_syslog;

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

void objfs_log(enum objfs_log_level lvl, const char *fmt, ...)
{
	static const int prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };
	char line[1024];
	va_list ap;

	if (lvl > g_level)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* Names and keys come from the network: a newline in one must not
	 * forge a log line, nor an escape sequence drive the terminal. */
	for (char *p = line; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	if (g_syslog)
		syslog(prio[lvl], "%s", line);
	else
		fprintf(stderr, "objfs: %s%s\n",
			lvl == OBJFS_LOG_ERR ? "error: " :
			lvl == OBJFS_LOG_WARN ? "warning: " : "", line);
}
