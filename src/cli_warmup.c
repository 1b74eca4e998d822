/*
 * cli_warmup: `objfs warmup [-p N] [-q] PATH...` (cli.h).
 *
 * Lists the files under each PATH (a file, or a tree walked without
 * leaving its mount), then N threads read them whole, each a file at a
 * time, largest first (so the last file to finish is a small one and the
 * readers stay busy to the end). What a read fetches stays in the mount's
 * memory cache, and with cache_dir on its disk cache, so the next reader
 * of those files pays no fetch. On a terminal (stderr) a progress line
 * counts files, bytes, the rate and the time left; otherwise one summary
 * line is all. A file that cannot be walked, opened or read is named on
 * stderr with the reason as it happens, the others go on, and the exit
 * status is 1.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define READ_SIZE (1u << 20)
#define READERS_DEFAULT 16
#define READERS_MAX 1024

struct wfile {
	char *path;
	uint64_t size;
};

struct warmup {
	struct wfile *files;
	size_t n, cap;
	uint64_t total;     /* bytes of every file listed */
	size_t next;        /* the next file to read (atomic) */
	size_t done;        /* files finished, read or failed (atomic) */
	uint64_t bytes;     /* bytes read so far (atomic) */
	size_t failed;      /* (atomic) */
	int progress;       /* a progress line is on stderr: clear it before a message */
	pthread_mutex_t out; /* stderr lines */
};

/* nftw() takes no argument: the one walk under way. */
static struct warmup *walking;

static void failure(struct warmup *w, const char *path, int err)
{
	__atomic_add_fetch(&w->failed, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&w->out);
	fprintf(stderr, "%sobjfs warmup: %s: %s\n", w->progress ? "\r\033[K" : "", path,
		strerror(err));
	pthread_mutex_unlock(&w->out);
}

static int add(struct warmup *w, const char *path, uint64_t size)
{
	if (w->n == w->cap) {
		size_t nc = w->cap ? 2 * w->cap : 1024;
		struct wfile *nf = realloc(w->files, nc * sizeof(*nf));

		if (!nf)
			return -ENOMEM;
		w->files = nf;
		w->cap = nc;
	}
	w->files[w->n].path = strdup(path);
	if (!w->files[w->n].path)
		return -ENOMEM;
	w->files[w->n++].size = size;
	w->total += size;
	return 0;
}

static int walk_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)ftw;
	if (type == FTW_F && S_ISREG(st->st_mode))
		return add(walking, path, (uint64_t)st->st_size) ? FTW_STOP : FTW_CONTINUE;
	if (type == FTW_DNR || type == FTW_NS)
		failure(walking, path, errno ? errno : EIO);
	return FTW_CONTINUE;
}

static int by_size_down(const void *a, const void *b)
{
	const struct wfile *x = a, *y = b;

	return x->size < y->size ? 1 : x->size > y->size ? -1 : 0;
}

static void *reader_main(void *arg)
{
	struct warmup *w = arg;
	char *buf = malloc(READ_SIZE);

	for (;;) {
		size_t i = __atomic_fetch_add(&w->next, 1, __ATOMIC_RELAXED);
		int fd, err = 0;
		ssize_t k;

		if (i >= w->n)
			break;
		fd = buf ? open(w->files[i].path, O_RDONLY | O_CLOEXEC) : -1;
		if (fd < 0) {
			err = buf ? errno : ENOMEM;
		} else {
			while ((k = read(fd, buf, READ_SIZE)) != 0) {
				if (k < 0 && errno == EINTR)
					continue;
				if (k < 0) {
					err = errno;
					break;
				}
				__atomic_add_fetch(&w->bytes, (uint64_t)k, __ATOMIC_RELAXED);
			}
			close(fd);
		}
		if (err)
			failure(w, w->files[i].path, err);
		__atomic_add_fetch(&w->done, 1, __ATOMIC_RELEASE);
	}
	free(buf);
	return NULL;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* "files, bytes, rate" of @w after @secs, into @buf. */
static void describe(const struct warmup *w, size_t done, uint64_t bytes, double secs,
		     char *buf, size_t cap)
{
	char b[32], t[32], r[32];

	snprintf(buf, cap, "%zu/%zu files, %s/%s, %s", done, w->n,
		 objfs_cli_human(b, sizeof(b), (double)bytes, "bytes", 0),
		 objfs_cli_human(t, sizeof(t), (double)w->total, "bytes", 0),
		 objfs_cli_human(r, sizeof(r), secs > 0 ? (double)bytes / secs : 0, "bytes", 1));
}

static int usage(FILE *f, int status)
{
	fprintf(f, "usage: objfs warmup [-p N] [-q] PATH...\n"
		"  reads the files and trees PATH of an objfs mount whole, N at once\n"
		"  (default %d), so they land in its memory and disk caches; -q: no\n"
		"  progress line. Exit status 1 when a file could not be read.\n",
		READERS_DEFAULT);
	return status;
}

int objfs_cli_warmup(int argc, char **argv)
{
	struct warmup w = { .out = PTHREAD_MUTEX_INITIALIZER };
	long readers = READERS_DEFAULT;
	int quiet = 0, npaths = 0, ret = 0;
	pthread_t *th = NULL;
	size_t started = 0;
	double t0;
	char line[256];

	for (int i = 1; i < argc; i++) {
		char *end;

		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return usage(stdout, 0);
		if (!strcmp(argv[i], "-q")) {
			quiet = 1;
		} else if (!strcmp(argv[i], "-p") && i + 1 < argc) {
			readers = strtol(argv[++i], &end, 10);
			if (*end || readers < 1 || readers > READERS_MAX) {
				fprintf(stderr, "objfs warmup: -p expects 1 to %d readers, got "
					"'%s'\n", READERS_MAX, argv[i]);
				return 2;
			}
		} else if (!strcmp(argv[i], "--")) {
			npaths += argc - i - 1;
			break;
		} else if (argv[i][0] == '-') {
			return usage(stderr, 2);
		} else {
			npaths++;
		}
	}
	if (!npaths)
		return usage(stderr, 2);
	walking = &w;
	for (int i = 1, opts = 1; i < argc; i++) {
		char root[PATH_MAX];
		struct stat st;
		int r;

		if (opts && !strcmp(argv[i], "--")) {
			opts = 0;
			continue;
		}
		if (opts && (!strcmp(argv[i], "-p") || !strcmp(argv[i], "-q"))) {
			i += argv[i][1] == 'p';
			continue;
		}
		r = objfs_cli_mount_root(argv[i], root, sizeof(root));
		if (r == -ENOENT) {
			fprintf(stderr, "objfs warmup: %s is not on an objfs mount\n", argv[i]);
			ret = 1;
			continue;
		}
		if (r || stat(argv[i], &st)) {
			failure(&w, argv[i], r ? -r : errno);
			continue;
		}
		if (S_ISDIR(st.st_mode))
			r = nftw(argv[i], walk_one, 32, FTW_PHYS | FTW_MOUNT);
		else if (S_ISREG(st.st_mode))
			r = add(&w, argv[i], (uint64_t)st.st_size);
		if (r) {
			fprintf(stderr, "objfs warmup: %s: %s\n", argv[i], strerror(r < 0 ? -r : ENOMEM));
			ret = 1;
			goto out;
		}
	}
	qsort(w.files, w.n, sizeof(*w.files), by_size_down);
	if (readers > (long)w.n)
		readers = (long)w.n;
	th = calloc((size_t)readers + 1, sizeof(*th));
	if (!th) {
		fprintf(stderr, "objfs warmup: out of memory\n");
		ret = 1;
		goto out;
	}
	w.progress = !quiet && isatty(STDERR_FILENO);
	t0 = now_s();
	for (; started < (size_t)readers; started++) {
		int e = pthread_create(&th[started], NULL, reader_main, &w);

		if (e) {
			if (!started) {
				fprintf(stderr, "objfs warmup: no reader thread: %s\n", strerror(e));
				ret = 1;
				goto out;
			}
			break;
		}
	}
	while (__atomic_load_n(&w.done, __ATOMIC_ACQUIRE) < w.n) {
		struct timespec tick = { 0, 250 * 1000 * 1000 };
		uint64_t bytes = __atomic_load_n(&w.bytes, __ATOMIC_RELAXED);
		double secs = now_s() - t0, rate = secs > 0 ? (double)bytes / secs : 0;

		if (w.progress) {
			describe(&w, __atomic_load_n(&w.done, __ATOMIC_RELAXED), bytes, secs, line,
				 sizeof(line));
			pthread_mutex_lock(&w.out);
			if (rate > 0 && bytes < w.total)
				fprintf(stderr, "\r\033[K%s, ETA %.0f s", line,
					(double)(w.total - bytes) / rate + 0.5);
			else
				fprintf(stderr, "\r\033[K%s", line);
			pthread_mutex_unlock(&w.out);
		}
		nanosleep(&tick, NULL);
	}
	for (size_t i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	if (w.progress)
		fputs("\r\033[K", stderr);
	{
		double secs = now_s() - t0;
		char b[32], r[32];

		printf("warmup: %zu files, %s in %.1f s (%s)", w.n,
		       objfs_cli_human(b, sizeof(b), (double)w.bytes, "bytes", 0), secs,
		       objfs_cli_human(r, sizeof(r), secs > 0 ? (double)w.bytes / secs : 0,
				       "bytes", 1));
		if (w.failed)
			printf(", %zu failed (named above)", w.failed);
		putchar('\n');
	}
	fflush(stdout);
	if (w.failed)
		ret = 1;
out:
	for (size_t i = 0; i < w.n; i++)
		free(w.files[i].path);
	free(w.files);
	free(th);
	return ret;
}
