/*
 * main: command line, start-up and shutdown.
 *
 * Everything that can be checked cheaply (options, URL, mount point) is
 * checked before anything else, so a mistake costs one message and exit 1.
 * Without -f the process forks before any thread exists (libcurl and the
 * engine threads do not survive fork); the child probes the source, mounts,
 * and only then tells the parent, which exits 0 — or exits 1 when the child
 * failed, after the child printed its reason on the shared stderr. Nothing is
 * left mounted on any failure path.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "listing.h"
#include "log.h"
#include "mount.h"
#include "options.h"
#include "secret.h"

struct cli {
	struct objfs_opts opts;
	int foreground;
	int debug;
	const char *source;
	const char *mountpoint;
	int ready_fd; /* daemon mode: pipe to the waiting parent, else -1 */
};

static void usage(FILE *f, const char *prog)
{
	fprintf(f,
"usage: %s [options] SOURCE MOUNTPOINT\n"
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
"  -V, --version      print the version\n"
"\n"
"Options:\n"
"  chunk_size=SIZE        cache block and largest ranged GET (default 4M)\n"
"  cache_size=SIZE        memory block cache cap (default 1G)\n"
"  prefetch_max=SIZE      largest readahead window of one file (default 64M)\n"
"  max_connections=N      connections per host (default 16)\n"
"  threads=N              FUSE worker threads (default 16)\n"
"  engine_threads=N       fetch engine threads (default 2)\n"
"  stats                  log the counters at unmount (also: MOUNT/.objfs-stats)\n"
"  attr_timeout=SECS      attribute cache time, kernel and objfs (default 60)\n"
"  entry_timeout=SECS     name cache time in the kernel (default 60)\n"
"  list_ttl=SECS          directory listing cache time (default 60)\n"
"  retries=N              retries of a failed request (default 3)\n"
"  timeout=SECS           a request making no progress this long fails (default 30)\n"
"  allow_other            let other users access the mount\n"
"  default_permissions    let the kernel check permissions from the modes\n"
"  uid=N, gid=N           owner of all files (default: the mounting user)\n"
"  umask=OCTAL            permission mask (default 022; the mount is read-only)\n"
"  ca_file=PATH           CA certificates for https (default: system store)\n"
"  insecure               do not verify TLS certificates (dangerous)\n"
"  log_level=LEVEL        error, warn (default), info or debug\n"
"  side=on|off            GPU side API server for libobjfs (default on)\n"
"  direct_recv=on|off     http:// bodies received straight into the destination,\n"
"                         not through libcurl's buffer (default on)\n"
"  ring_slots=N           GPU side API ring slots per session (default 16)\n"
"  ring_slot_size=SIZE    GPU side API ring slot size (default 8M)\n"
"  cache_dir=PATH         persistent chunk cache on local disk (default: none)\n"
"  cache_dir_size=SIZE    disk cache cap, LRU evicted (default 10G)\n"
"  max_dir_entries=N      entries of one directory, at most (default 10000000)\n"
"  max_list_pages=N       requests (S3 pages) of one listing (default 20000)\n"
"  list_timeout=SECS      time one directory listing may take (default 1800)\n"
"  allow_redirects=WHICH  origin (default), any or none; never https to http\n"
"  debug_dumpable         allow core dumps (default: the daemon is not dumpable;\n"
"                         secret buffers are left out of dumps either way)\n"
"\n"
"S3 options:\n"
"  endpoint=URL           S3-compatible server (default: AWS, or AWS_ENDPOINT_URL)\n"
"  region=R               signing region (default: AWS_REGION, profile, us-east-1)\n"
"  profile=P              profile in ~/.aws/credentials and config (default: AWS_PROFILE)\n"
"  path_style             HOST/BUCKET/KEY requests (default with endpoint=)\n"
"  virtual_host           BUCKET.HOST/KEY requests (default on AWS)\n"
"  no_sign                anonymous requests, for public buckets\n", prog);
}

static int parse_cli(int argc, char **argv, struct cli *c)
{
	char err[512];

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout, argv[0]);
			exit(0);
		} else if (strcmp(a, "-V") == 0 || strcmp(a, "--version") == 0) {
			printf("objfs %s\n", PACKAGE_VERSION);
			exit(0);
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
	if (!c->source || !c->mountpoint) {
		usage(stderr, argv[0]);
		return -EINVAL;
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
	 * tests/integration/load.sh (64 readers past the page cache,
	 * cache_size=32M) peaked at 89-141 MiB RSS; with the threshold fixed at
	 * 128 KiB (every large buffer a mapping of its own) at 52 MiB. Cost:
	 * fresh pages to fault in, 10-19% more CPU on a cold 512 MiB loopback
	 * read (2-core VM).
	 */
	mallopt(M_MMAP_THRESHOLD, 128 << 10);
	objfs_opts_init(&c.opts);
	if (parse_cli(argc, argv, &c)) {
		objfs_opts_clear(&c.opts);
		return 1;
	}
	objfs_log_set_level((enum objfs_log_level)c.opts.log_level);
	/* Before any secret is read (the environment's already is: not
	 * dumpable also closes /proc/PID/environ to other users). Inherited by
	 * the daemon child across fork. */
	if (objfs_secret_nodump_process(c.opts.debug_dumpable))
		objfs_warn("could not turn core dumps off: %s", strerror(errno));
	objfs_listing_global_init();
	if (stat(c.mountpoint, &st) || !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "objfs: mount point '%s' does not exist or is not a "
			"directory\n", c.mountpoint);
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
	if (pipe(pipefd)) {
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
