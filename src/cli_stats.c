/*
 * cli_stats: `objfs stats MOUNT [-i SECS] [-n COUNT]` (cli.h).
 *
 * Reads MOUNT/.objfs-stats (a fresh snapshot at each open) and shows it as
 * a table in the counter table's sections, with units for people. With -i
 * it reads again every SECS seconds and adds each counter's rate per
 * second since the last table; on a terminal the table is redrawn in
 * place, otherwise each one follows the last as plain lines. SIGINT and
 * SIGTERM end it with status 0; a mount that goes away (unmounted, its
 * daemon gone) ends it with a message and status 1.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "buf.h"
#include "cli.h"
#include "counters.h"

#define TEXT_MAX (64u << 10)

static const char *const sections[] = {
	[OBJFS_FROM_ENGINE] = "requests",
	[OBJFS_FROM_CACHE] = "memory cache",
	[OBJFS_FROM_DISK] = "disk cache (cache_dir)",
	[OBJFS_FROM_SIDE] = "GPU side API",
	[OBJFS_FROM_MOUNT] = "metadata",
};

/* The value of @key in the stats text @text into @val; 0 or -ENOENT. */
static int text_get(const char *text, const char *key, char *val, size_t cap)
{
	size_t kl = strlen(key);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (strncmp(p, key, kl) == 0 && p[kl] == ' ') {
			size_t vl = strcspn(p + kl + 1, "\n");

			snprintf(val, cap, "%.*s", (int)vl, p + kl + 1);
			return 0;
		}
	}
	return -ENOENT;
}

/* Whether @s is a whole number, into *@v. */
static int number(const char *s, double *v)
{
	if (!*s || strspn(s, "0123456789") != strlen(s))
		return 0;
	*v = strtod(s, NULL);
	return 1;
}

/* One row: name, value for people, rate (counters, given @prev). */
static void row(char *buf, size_t cap, size_t *len, const struct objfs_counter *k,
		const char *name, const char *val, const char *prev, double secs)
{
	char shown[64], rate[48] = "", pv[64];
	double v, p;

	if (k && number(val, &v))
		objfs_cli_human(shown, sizeof(shown), v, k->unit, 0);
	else
		snprintf(shown, sizeof(shown), "%s", val);
	if (prev && k && k->kind == OBJFS_COUNTER && secs > 0 && number(val, &v)) {
		if (text_get(prev, name, pv, sizeof(pv)) || !number(pv, &p) || v < p)
			snprintf(rate, sizeof(rate), "-");
		else
			objfs_cli_human(rate, sizeof(rate), (v - p) / secs, k->unit, 1);
	}
	if (rate[0])
		objfs_appendf(buf, cap, len, "  %-26s %14s %16s\n", name, shown, rate);
	else
		objfs_appendf(buf, cap, len, "  %-26s %14s\n", name, shown);
}

size_t objfs_cli_stats_table(char *buf, size_t cap, const char *cur, const char *prev,
			     double secs)
{
	int section = -1, other = 0;
	size_t len = 0;

	if (cap)
		buf[0] = '\0';
	objfs_appendf(buf, cap, &len, prev ? "  %-26s %14s %16s\n" : "  %-26s %14s\n", "",
		      "value", "per second");
	for (const struct objfs_counter *k = objfs_counters; k->name; k++) {
		char val[64];

		if (text_get(cur, k->name, val, sizeof(val)))
			continue;
		if ((int)k->from != section) {
			section = (int)k->from;
			objfs_appendf(buf, cap, &len, "%s\n", sections[section]);
		}
		row(buf, cap, &len, k, k->name, val, prev, secs);
	}
	/* keys of a newer daemon than this table knows: shown as they are */
	for (const char *p = cur; *p;) {
		size_t ll = strcspn(p, "\n"), kl = strcspn(p, " \n");
		char key[128], val[64];

		if (kl < ll && kl < sizeof(key)) {
			snprintf(key, sizeof(key), "%.*s", (int)kl, p);
			snprintf(val, sizeof(val), "%.*s", (int)(ll - kl - 1), p + kl + 1);
			if (!objfs_counter_find(key)) {
				if (!other++)
					objfs_appendf(buf, cap, &len, "other\n");
				row(buf, cap, &len, NULL, key, val, NULL, 0);
			}
		}
		p += ll;
		if (*p)
			p++;
	}
	return len;
}

/* Reads @path whole into @buf (NUL-terminated). 0 or -errno. */
static int read_text(const char *path, char *buf, size_t cap)
{
	size_t n = 0;
	ssize_t k;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	while (n + 1 < cap && (k = read(fd, buf + n, cap - 1 - n)) != 0) {
		if (k < 0) {
			int e = errno;

			if (e == EINTR)
				continue;
			close(fd);
			return -e;
		}
		n += (size_t)k;
	}
	close(fd);
	buf[n] = '\0';
	return 0;
}

static volatile sig_atomic_t stop;

static void on_stop(int sig)
{
	(void)sig;
	stop = 1;
}

/* Sleeps @secs unless a signal ends it first. */
static void nap(double secs)
{
	struct timespec ts = { (time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9) };

	while (!stop && nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int usage(FILE *f, int status)
{
	fputs("usage: objfs stats MOUNT [-i SECS] [-n COUNT]\n"
	      "  the counters of the objfs mount MOUNT (MOUNT/.objfs-stats) as a table;\n"
	      "  -i SECS: again every SECS seconds, with rates per second (Ctrl-C ends);\n"
	      "  -n COUNT: stop after COUNT tables. objfs(1), STATISTICS, explains each.\n", f);
	return status;
}

int objfs_cli_stats(int argc, char **argv)
{
	const char *mount = NULL;
	char root[PATH_MAX], path[PATH_MAX + 16], *cur, *prev, *out;
	double every = 0, t_prev = 0;
	long count = 0, shown = 0;
	struct stat st0, st;
	struct sigaction sa = { .sa_handler = on_stop };
	int tty = isatty(STDOUT_FILENO), ret;

	for (int i = 1; i < argc; i++) {
		char *end;

		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return usage(stdout, 0);
		if ((!strcmp(argv[i], "-i") || !strcmp(argv[i], "-n")) && i + 1 < argc) {
			double v = strtod(argv[i + 1], &end);

			if (*end || !(v > 0) || v > 86400 || (argv[i][1] == 'n' && v != (long)v)) {
				fprintf(stderr, "objfs stats: %s expects a number above 0, got "
					"'%s'\n", argv[i], argv[i + 1]);
				return 2;
			}
			if (argv[i][1] == 'i')
				every = v;
			else
				count = (long)v;
			i++;
		} else if (argv[i][0] == '-' || mount) {
			return usage(stderr, 2);
		} else {
			mount = argv[i];
		}
	}
	if (!mount)
		return usage(stderr, 2);
	ret = objfs_cli_mount_root(mount, root, sizeof(root));
	if (ret == -ENOENT) {
		fprintf(stderr, "objfs stats: %s is not on an objfs mount\n", mount);
		return 1;
	}
	if (ret || stat(root, &st0)) {
		fprintf(stderr, "objfs stats: %s: %s\n", mount, strerror(ret ? -ret : errno));
		return 1;
	}
	snprintf(path, sizeof(path), "%s/.objfs-stats", root);
	cur = malloc(TEXT_MAX);
	prev = malloc(TEXT_MAX);
	out = malloc(4 * TEXT_MAX);
	if (!cur || !prev || !out) {
		fprintf(stderr, "objfs stats: out of memory\n");
		ret = 1;
		goto out;
	}
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	for (;;) {
		double t = now_s();
		char when[16];
		time_t wall = time(NULL);
		struct tm tm;

		/* gone: unmounted (the directory is another file system's again)
		 * or its daemon died (ENOTCONN) */
		ret = stat(root, &st) ? -errno : st.st_dev != st0.st_dev ? -ENODEV : 0;
		if (!ret)
			ret = read_text(path, cur, TEXT_MAX);
		if (stop)
			break;
		if (ret) {
			fprintf(stderr, "objfs stats: %s: the mount went away (%s)\n", root,
				ret == -ENODEV ? "unmounted" : strerror(-ret));
			ret = 1;
			goto out;
		}
		objfs_cli_stats_table(out, 4 * TEXT_MAX, cur, shown ? prev : NULL, t - t_prev);
		strftime(when, sizeof(when), "%H:%M:%S", localtime_r(&wall, &tm));
		if (every)
			printf("%s%s  %s%s\n", tty ? "\033[H\033[2J" : shown ? "\n" : "", root, when,
			       tty ? "  (Ctrl-C ends)" : "");
		fputs(out, stdout);
		fflush(stdout);
		shown++; /* rates from the next table on */
		if (!every || (count && shown >= count))
			break;
		memcpy(prev, cur, strlen(cur) + 1);
		t_prev = t;
		nap(every);
		if (stop)
			break;
	}
	ret = 0;
out:
	free(cur);
	free(prev);
	free(out);
	return ret;
}
