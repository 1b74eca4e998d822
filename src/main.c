/*
 * main: command line, start-up and shutdown.
 *
 * `objfs stats` and `objfs warmup` are commands of their own (cli.h), told
 * apart by their first word before any option is parsed. For a mount,
 * everything that can be checked cheaply (options, URL, mount point) is
 * checked before anything else, so a mistake costs one message and exit 1
 * (exit 2 and a short usage when operands are missing).
 * Without -f the process forks before any thread exists (libcurl and the
 * engine threads do not survive fork); the child probes the source, mounts,
 * and only then tells the parent, which exits 0 — or exits 1 when the child
 * failed, after the child printed its reason on the shared stderr. Nothing is
 * left mounted on any failure path.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "creds.h"
#include "listing.h"
#include "log.h"
#include "mount.h"
#include "objfs_git.h"
#include "options.h"
#include "secret.h"

struct cli {
	struct objfs_opts opts;
	int foreground;
	int debug;
	const char *source;
	const char *mountpoint;
	int ready_fd; /* daemon mode: pipe to the waiting parent, else -1 */
	int show_creds; /* --show-credential-source: no mount point, nothing mounted */
};

/* Plain `objfs`, or operands missing: what to type, and where to read more. */
static void short_usage(FILE *f)
{
	fputs("usage: objfs [-f] [-d] [-o opt[,opt...]] SOURCE MOUNTPOINT\n"
	      "       objfs stats MOUNT [-i SECS]      counters of a mount\n"
	      "       objfs warmup [-p N] PATH...      read files into the caches\n"
	      "objfs --help lists every option; man objfs explains them.\n", f);
}

static void usage(FILE *f)
{
	fputs(
"usage: objfs [options] SOURCE MOUNTPOINT\n"
"       objfs [-o options] --show-credential-source s3://BUCKET\n"
"       objfs stats MOUNT [-i SECS] [-n COUNT]\n"
"       objfs warmup [-p N] [-q] PATH...\n"
"\n"
"Mount an HTTP(S) object store or an S3 bucket read-only as a directory tree.\n"
"SOURCE is http://host[:port]/path/ (a directory index), the URL of one file,\n"
"or s3://BUCKET[/PREFIX] (credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY,\n"
"~/.aws/credentials and config, EC2 instance metadata; see objfs(1)).\n"
"\n"
"  -f                 stay in the foreground\n"
"  -d                 debug: foreground, log_level=debug, FUSE request trace\n"
"  -o opt[,opt...]    mount options (below)\n"
"  -h, --help         this help\n"
"  -V, --version      the version, the libraries' versions, the build's features\n"
"  --show-credential-source  name the credential source that wins for SOURCE\n"
"                     (never a secret) and exit\n"
"\n"
"Commands:\n"
"  stats MOUNT        the counters of a mount as a table; -i SECS refreshes it\n"
"                     with rates per second, -n COUNT stops after COUNT tables\n"
"  warmup PATH...     read files and trees of a mount into its caches; -p N\n"
"                     readers at once (default 16), -q no progress line\n", f);
	objfs_opts_help(f);
	fputs(
"\n"
"MOUNTPOINT may be /dev/fd/N: an open /dev/fuse descriptor whose mount the caller\n"
"made (containers, CSI drivers). As a mount helper: mount -t fuse.objfs SOURCE DIR.\n"
"objfs(1) explains every option, command and counter.\n", f);
}

static int parse_cli(int argc, char **argv, struct cli *c)
{
	char err[512];

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			exit(0);
		} else if (strcmp(a, "-V") == 0 || strcmp(a, "--version") == 0) {
			objfs_version_print(stdout, OBJFS_GIT_COMMIT);
			exit(0);
		} else if (strcmp(a, "--show-credential-source") == 0) {
			c->show_creds = 1;
		} else if (strcmp(a, "-f") == 0) {
			c->foreground = 1;
		} else if (strcmp(a, "-d") == 0) {
			c->foreground = c->debug = 1;
		} else if (strncmp(a, "-o", 2) == 0) {
			const char *list = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);

			if (!list) {
				fprintf(stderr, "objfs: -o needs an option list\n");
				return -EINVAL;
			}
			if (objfs_opts_parse(&c->opts, list, err, sizeof(err))) {
				fprintf(stderr, "objfs: %s\n", err);
				return -EINVAL;
			}
		} else if (a[0] == '-' && a[1]) {
			fprintf(stderr, "objfs: unknown flag '%s' (see objfs --help)\n", a);
			return -EINVAL;
		} else if (!c->source) {
			c->source = a;
		} else if (!c->mountpoint) {
			c->mountpoint = a;
		} else {
			fprintf(stderr, "objfs: unexpected argument '%s'\n", a);
			return -EINVAL;
		}
	}
	if (!c->source || (!c->mountpoint && !c->show_creds)) {
		short_usage(stderr);
		return -EDOM; /* exit 2: the command line's shape */
	}
	if (c->debug)
		c->opts.log_level = OBJFS_LOG_DEBUG;
	return 0;
}

static void on_ready(void *arg)
{
	struct cli *c = arg;
	int fd;

	if (c->ready_fd < 0)
		return;
	(void)!write(c->ready_fd, "", 1);
	close(c->ready_fd);
	c->ready_fd = -1;
	fd = open("/dev/null", O_RDWR);
	if (fd >= 0) {
		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		if (fd > 2)
			close(fd);
	}
	objfs_log_use_syslog(1);
}

/*
 * --show-credential-source: resolves the chain as a mount of @c->source
 * would and prints which source won and when its credentials expire,
 * never a key. The exit status says whether a mount could sign.
 */
static int show_creds(const struct cli *c)
{
	struct objfs_creds cr;
	char err[512] = "";
	int rc;

	if (strncmp(c->source, "s3://", 5)) {
		printf("%s: no credentials (http and https sources are read unsigned)\n", c->source);
		return 0;
	}
	if (c->opts.no_sign) {
		printf("%s: anonymous (no_sign)\n", c->source);
		return 0;
	}
	rc = objfs_creds_resolve(c->opts.profile, &cr, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "objfs: %s: %s\n", c->source, err);
		return 1;
	}
	if (cr.expires) {
		char when[32];
		time_t t = (time_t)cr.expires;
		struct tm tm;

		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
		printf("%s: %s (temporary, expires %s)\n", c->source, cr.source, when);
	} else {
		printf("%s: %s\n", c->source, cr.source);
	}
	objfs_creds_clear(&cr);
	return 0;
}

/* Probe, mount and serve. Returns the process exit status. */
static int serve(struct cli *c, char *argv0)
{
	const struct objfs_mount_cfg cfg = {
		.source = c->source,
		.mountpoint = c->mountpoint,
		.opts = &c->opts,
		.argv0 = argv0,
		.debug = c->debug,
		.ready = on_ready,
		.ready_arg = c,
	};

	return objfs_mount_run(&cfg);
}

/*
 * Whether @mnt is "/dev/fd/N" (an open /dev/fuse handed over by whoever
 * mounted, as libfuse 3.3+ accepts): then *ok is 0, or -EBADF when N is
 * not an open character device.
 */
static int fuse_fd_mountpoint(const char *mnt, int *ok)
{
	struct stat st;
	char *end;
	long fd;

	*ok = 0;
	if (strncmp(mnt, "/dev/fd/", 8) != 0 || !mnt[8])
		return 0;
	fd = strtol(mnt + 8, &end, 10);
	if (*end || fd < 0 || fd > 1 << 20 || fstat((int)fd, &st) || !S_ISCHR(st.st_mode))
		*ok = -EBADF;
	return 1;
}

/*
 * Options that stand for environment variables (so that an fstab line can
 * carry them): set before any thread or library reads the environment.
 */
static int set_env_options(const struct objfs_opts *o)
{
	static const struct { size_t off; const char *vars[3]; } map[] = {
		{ offsetof(struct objfs_opts, credentials_file), { "AWS_SHARED_CREDENTIALS_FILE" } },
		{ offsetof(struct objfs_opts, config_file), { "AWS_CONFIG_FILE" } },
		{ offsetof(struct objfs_opts, proxy), { "http_proxy", "https_proxy", "HTTPS_PROXY" } },
	};

	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
		const char *v = *(char *const *)((const char *)o + map[i].off);

		for (size_t k = 0; v && k < 3 && map[i].vars[k]; k++) {
			if (setenv(map[i].vars[k], v, 1)) {
				perror("objfs: setenv");
				return -1;
			}
		}
	}
	return 0;
}

/*
 * log_file=: opened now, as an absolute path (the daemon changes directory)
 * made without resolving symlinks: objfs_log_open_file() walks it itself,
 * now and at each SIGHUP, following only what root or the euid owns.
 */
static int open_log_file(const struct objfs_opts *o)
{
	char abs[4096], cwd[4096], err[1024];

	if (!o->log_file)
		return 0;
	if (o->log_file[0] != '/' && !getcwd(cwd, sizeof(cwd))) {
		fprintf(stderr, "objfs: log_file %s: %s\n", o->log_file, strerror(errno));
		return -1;
	}
	if (snprintf(abs, sizeof(abs), "%s%s%s", o->log_file[0] == '/' ? "" : cwd,
		     o->log_file[0] == '/' ? "" : "/", o->log_file) >= (int)sizeof(abs)) {
		fprintf(stderr, "objfs: log_file %s: path too long\n", o->log_file);
		return -1;
	}
	if (objfs_log_open_file(abs, err, sizeof(err))) {
		fprintf(stderr, "objfs: %s\n", err);
		return -1;
	}
	return 0;
}

static pid_t forward_to;

static void forward(int sig)
{
	kill(forward_to, sig);
}

/*
 * The waiting parent passes SIGINT, SIGTERM and SIGHUP on to the child (in
 * a session of its own, it gets none from the terminal or from timeout(1)):
 * otherwise an objfs interrupted while it probes the server would mount
 * all the same after its command had failed. The parent then waits for the
 * child's end as for any failure.
 */
static void forward_signals(pid_t child)
{
	struct sigaction sa = { .sa_handler = forward, .sa_flags = SA_RESTART };

	forward_to = child;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

/*
 * Overwrites the user:password of every proxy= URL in @arg with '*', in
 * place (parsed already): /proc/PID/cmdline is readable by every user, so
 * ps would show a proxy's password.
 */
static void hide_proxy_password(char *arg)
{
	for (char *p = strstr(arg, "proxy="); p; p = strstr(p + 1, "proxy=")) {
		char *v = p + 6, *end = v + strcspn(v, ","), *host = strstr(v, "://"), *at;

		host = host && host < end ? host + 3 : v;
		at = memchr(host, '@', (size_t)(end - host));
		if (at && !memchr(host, '/', (size_t)(at - host)))
			memset(host, '*', (size_t)(at - host));
	}
}

int main(int argc, char **argv)
{
	struct cli c = { .ready_fd = -1 };
	struct stat st;
	int pipefd[2], status, ret;
	pid_t pid;
	char byte;

	/*
	 * Memory freed must go back to the kernel, or cache_size caps nothing:
	 * glibc raises its mmap threshold to the size of the first large block
	 * freed (cache blocks, curl's 512 KiB receive buffers), and from then
	 * on serves such sizes from per-thread arenas that keep what is freed.
	 * With the threshold fixed at 128 KiB every large buffer is a mapping
	 * of its own, given back when freed: tests/integration/load.sh (64
	 * readers past the page cache, cache_size=32M) peaks at about 52 MiB
	 * RSS instead of 89-141. The cost is fresh pages to fault in, some more
	 * CPU on a cold read.
	 */
	mallopt(M_MMAP_THRESHOLD, 128 << 10);
	/* commands first: SOURCE is a URL, so no mount's first operand is one */
	if (argc > 1 && strcmp(argv[1], "stats") == 0)
		return objfs_cli_stats(argc - 1, argv + 1);
	if (argc > 1 && strcmp(argv[1], "warmup") == 0)
		return objfs_cli_warmup(argc - 1, argv + 1);
	objfs_opts_init(&c.opts);
	ret = parse_cli(argc, argv, &c);
	if (ret) {
		objfs_opts_clear(&c.opts);
		return ret == -EDOM ? 2 : 1;
	}
	for (int i = 1; i < argc; i++)
		hide_proxy_password(argv[i]);
	objfs_log_set_level((enum objfs_log_level)c.opts.log_level);
	{
		struct objfs_machine mach;

		objfs_machine_probe(&mach);
		objfs_opts_machine(&c.opts, &mach);
	}
	/* Before any secret is read (the environment's already is: not
	 * dumpable also closes /proc/PID/environ to other users). Inherited by
	 * the daemon child across fork. */
	if (objfs_secret_nodump_process(c.opts.debug_dumpable))
		objfs_warn("could not turn core dumps off: %s", strerror(errno));
	objfs_listing_global_init();
	if (c.show_creds) {
		ret = set_env_options(&c.opts) ? 1 : show_creds(&c);
		objfs_opts_clear(&c.opts);
		return ret;
	}
	if (fuse_fd_mountpoint(c.mountpoint, &ret)) {
		if (ret < 0) {
			fprintf(stderr, "objfs: mount point '%s' names no open descriptor of "
				"/dev/fuse\n", c.mountpoint);
			objfs_opts_clear(&c.opts);
			return 1;
		}
	} else if (stat(c.mountpoint, &st) || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "objfs: mount point '%s' does not exist or is not a "
			"directory\n", c.mountpoint);
		objfs_opts_clear(&c.opts);
		return 1;
	}
	if (c.opts.saw_rw)
		fprintf(stderr, "objfs: option 'rw' ignored: objfs mounts read-only\n");
	if (set_env_options(&c.opts) || open_log_file(&c.opts)) {
		objfs_opts_clear(&c.opts);
		return 1;
	}
	/* curl would only say "TLS verification failed" at the first request */
	if (c.opts.ca_file && access(c.opts.ca_file, R_OK)) {
		fprintf(stderr, "objfs: ca_file '%s': %s\n", c.opts.ca_file, strerror(errno));
		objfs_opts_clear(&c.opts);
		return 1;
	}
	if (c.foreground) {
		ret = serve(&c, argv[0]);
		objfs_opts_clear(&c.opts);
		return ret;
	}
	/* close-on-exec: a credential_process's own children must not hold
	 * the parent's wait open after the daemon gave up */
	if (pipe2(pipefd, O_CLOEXEC)) {
		perror("objfs: pipe");
		return 1;
	}
	pid = fork();
	if (pid < 0) {
		perror("objfs: fork");
		return 1;
	}
	if (pid > 0) {
		/* the parent only waits: its copy of the options (endpoint,
		 * region, profile strings) is freed here, so LeakSanitizer
		 * stays quiet on both exits */
		objfs_opts_clear(&c.opts);
		close(pipefd[1]);
		forward_signals(pid);
		if (read(pipefd[0], &byte, 1) == 1)
			return 0; /* mounted; the child serves */
		waitpid(pid, &status, 0);
		return WIFEXITED(status) && WEXITSTATUS(status) ? WEXITSTATUS(status) : 1;
	}
	close(pipefd[0]);
	c.ready_fd = pipefd[1];
	if (setsid() < 0)
		perror("objfs: setsid");
	ret = serve(&c, argv[0]);
	objfs_opts_clear(&c.opts);
	return ret;
}
