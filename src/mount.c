/*
 * mount: see mount.h.
 *
 * Order of construction: engine, store (its probe is the first request),
 * inodes, block cache, disk cache under it, side API server, then the FUSE
 * session. Teardown runs the other way round, and each step says what it
 * waits for: the side server ends its sessions before the cache goes, the
 * cache waits for its fetches before the engine goes, the disk cache
 * writes out what is queued after the cache has flushed into it.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "fs.h"
#include "inode.h"
#include "buf.h"
#include "counters.h"
#include "log.h"
#include "metrics.h"
#include "mount.h"
#include "notify.h"
#include "store.h"

/* One mount's object graph; each part borrows only the parts built before it. */
struct objfs_mount {
	const struct objfs_mount_cfg *cfg;
	struct objfs_engine *engine;
	struct objfs_store *store;
	struct objfs_inodes *inodes;
	struct objfs_cache *cache;
	struct objfs_diskcache *disk; /* NULL without cache_dir */
	struct objfs_side *side;      /* NULL with side=off */
	struct objfs_metrics *metrics; /* NULL without metrics= */
	struct objfs_fs fs;
};

/* Appends @s to @dst escaping ',' and '\' for FUSE's option parser. */
static void opt_escape(char *dst, size_t cap, const char *s)
{
	size_t n = strlen(dst);

	for (; *s && n + 2 < cap; s++) {
		if (*s == ',' || *s == '\\')
			dst[n++] = '\\';
		dst[n++] = *s;
	}
	dst[n] = '\0';
}

/* The one stats text of @arg (a struct objfs_mount), for .objfs-stats and -o stats. */
static size_t stats_text(void *arg, char *buf, size_t cap)
{
	struct objfs_mount *m = arg;
	struct objfs_stats s;
	struct objfs_cache_stats cs;
	struct objfs_diskcache_stats ds;
	struct objfs_side_stats gs;
	size_t n;

	objfs_stats_get(&s);
	objfs_cache_get_stats(m->cache, &cs);
	if (m->disk)
		objfs_diskcache_get_stats(m->disk, &ds);
	if (m->side)
		objfs_side_get_stats(m->side, &gs);
	n = objfs_stats_format(buf, cap, &s, &cs, m->disk ? &ds : NULL, m->side ? &gs : NULL);
	/* nodes alive: what the kernel holds and listings keep */
	if (n < cap)
		n += (size_t)snprintf(buf + n, cap - n, "inodes %zu\n", objfs_inodes_live(m->inodes));
	return n;
}

/*
 * -o stats: the stats text as one line "stats: key=value,..." at unmount,
 * on standard output (objfs -f) and in the log (log_file, syslog once
 * detached, stderr from log_level=info on): a report asked for, not an
 * error.
 */
static void log_stats(struct objfs_mount *m)
{
	char text[4096];
	size_t n = stats_text(m, text, sizeof(text));

	if (n >= sizeof(text))
		n = sizeof(text) - 1;
	while (n && text[n - 1] == '\n')
		text[--n] = '\0';
	for (size_t i = 0; i < n; i++)
		if (text[i] == '\n')
			text[i] = ',';
		else if (text[i] == ' ')
			text[i] = '=';
	printf("stats: %s\n", text);
	fflush(stdout);
	objfs_log_notice("stats: %s", text);
}

/* The store for SOURCE: s3:// or http(s)://. 0 or -errno with a reason in @err. */
static int store_new(struct objfs_mount *m, char *err, size_t errlen)
{
	const struct objfs_opts *o = m->cfg->opts;
	const struct objfs_s3_cfg s3 = {
		.endpoint = o->endpoint,
		.region = o->region,
		.profile = o->profile,
		.path_style = o->path_style,
		.virtual_host = o->virtual_host,
		.no_sign = o->no_sign,
	};

	const struct objfs_list_limits lim = {
		.max_bytes = o->max_dir_bytes,
		.max_entries = o->max_dir_entries,
		.max_pages = o->max_list_pages,
		.timeout = o->list_timeout,
	};

	if (strncasecmp(m->cfg->source, "s3://", 5) == 0)
		return objfs_store_s3_new(m->cfg->source, &s3, m->engine, o->chunk_size, &lim,
					  &m->store, err, errlen);
	return objfs_store_http_new(m->cfg->source, m->engine, o->chunk_size, &lim, &m->store,
				    err, errlen);
}

/* The disk cache in cache_dir, under the block cache. 0 or -errno, @err set. */
static int disk_new(struct objfs_mount *m, char *err, size_t errlen)
{
	const struct objfs_opts *o = m->cfg->opts;
	/* the disk copies belong to this source: the same path elsewhere is another object */
	char source[2048];
	struct objfs_diskcache_cfg dcfg = {
		.dir = o->cache_dir,
		.cap = o->cache_dir_size,
		.source = source,
		.block_size = o->chunk_size,
	};
	int ret;

	snprintf(source, sizeof(source), "%s\n%s", m->cfg->source,
		 o->endpoint ? o->endpoint : "");
	ret = objfs_diskcache_open(&dcfg, &m->disk, err, errlen);
	if (!ret)
		objfs_cache_set_disk(m->cache, m->disk);
	return ret;
}

static int side_new(struct objfs_mount *m)
{
	const struct objfs_opts *o = m->cfg->opts;
	struct objfs_side_cfg scfg = {
		.ring_slots = o->ring_slots,
		.ring_slot_size = (uint32_t)o->ring_slot_size,
		.fill_threads = o->fill_threads,
		.max_sessions = 64,
		.max_caps = 65536, /* a uid's quarter: 16,384 handles (10,000 shards per process) */
		.ring_budget = o->side_ring_budget,
		.cap_ttl = 300,
		/* Without allow_other only the mounting user can use the mount. */
		.only_uid = o->allow_other ? -1 : (int)geteuid(),
	};
	int ret = objfs_side_new(&scfg, m->cache, &m->side);

	if (ret)
		objfs_err("cannot start the GPU side API server: %s%s", strerror(-ret),
			  ret == -EINVAL ? " (ring_slot_size must be a multiple of 4K and "
			  "ring_slots x ring_slot_size at most 1G)" : "");
	return ret;
}

/* Builds the graph up to the FUSE file system. 0 or -errno, logged. */
static int build(struct objfs_mount *m)
{
	const struct objfs_opts *o = m->cfg->opts;
	struct objfs_engine_cfg ecfg = {
		.threads = o->engine_threads,
		.max_host_conns = o->max_connections,
		.ca_file = o->ca_file,
		.insecure = o->insecure,
		.timeout = o->timeout,
		.retries = o->retries,
		.direct = o->direct_recv,
		.redirects = o->allow_redirects, /* same order as enum objfs_redirects */
		.http2 = o->http_version == 1,
	};
	char err[1024] = "";
	int ret;

	/* Loud: not even log_level=error silences it. */
	if (o->insecure)
		objfs_log(o->log_level < OBJFS_LOG_WARN ? OBJFS_LOG_ERR : OBJFS_LOG_WARN,
			  "TLS certificate verification is OFF (insecure): anyone on the "
			  "network path can feed this mount forged data");
	ret = objfs_engine_new(&ecfg, &m->engine);
	if (ret) {
		objfs_err("cannot start the fetch engine: %s", strerror(-ret));
		return ret;
	}
	ret = store_new(m, err, sizeof(err));
	if (ret) {
		objfs_err("%s", err);
		return ret;
	}
	ret = objfs_inodes_new(m->store, o->list_ttl, o->attr_timeout, &m->inodes);
	if (ret) {
		objfs_err("out of memory");
		return ret;
	}
	ret = objfs_cache_new(o->cache_size, o->chunk_size, &m->cache);
	if (ret) {
		objfs_err("cache_size must be at least chunk_size");
		return ret;
	}
	if (o->cache_dir && (ret = disk_new(m, err, sizeof(err)))) {
		objfs_err("%s", err);
		return ret;
	}
	if (o->side && (ret = side_new(m)))
		return ret;
	if (o->metrics && (ret = objfs_metrics_start(o->metrics, m->cfg->source,
						     m->cfg->mountpoint, stats_text, m,
						     &m->metrics, err, sizeof(err)))) {
		objfs_err("%s", err);
		return ret;
	}
	m->fs = (struct objfs_fs){
		.inodes = m->inodes,
		.store = m->store,
		.cache = m->cache,
		.side = m->side,
		.stats_text = stats_text,
		.stats_arg = m,
		.attr_timeout = o->attr_timeout,
		.entry_timeout = o->entry_timeout,
		.negative_timeout = o->negative_timeout,
		.prefetch_max = o->prefetch_max,
		.threads = o->threads,
		.direct_io = o->direct_io,
		.uid = o->have_uid ? o->uid : getuid(),
		.gid = o->have_gid ? o->gid : getgid(),
		.umask = o->have_umask ? o->umask : 022,
		.mount_time = (double)time(NULL),
	};
	return 0;
}

/* Frees what build() made, each part after everything that borrows it. */
static void teardown(struct objfs_mount *m)
{
	objfs_metrics_stop(m->metrics); /* reads every part's counters */
	objfs_side_free(m->side);       /* ends sessions; before the cache, store and nodes */
	objfs_cache_free(m->cache);     /* before the engine: waits for its fetches */
	objfs_diskcache_free(m->disk);  /* after the cache: writes out what is queued */
	objfs_inodes_free(m->inodes);
	objfs_store_free(m->store);
	objfs_engine_free(m->engine);
}

/*
 * Readiness for systemd (Type=notify): READY=1 only once the mount answers.
 * mounted() runs right after the kernel mount, before the FUSE loop
 * starts, so a thread stats the mount point -- which waits for the loop to
 * answer the kernel's INIT and GETATTR -- and only then notifies. Given
 * /dev/fd/N, whoever mounted holds the mount point and READY=1 goes out at
 * once. Without $NOTIFY_SOCKET nothing is started.
 */
static void *ready_main(void *arg)
{
	char *msg = arg, *mnt = msg + strlen(msg) + 1; /* "READY=1...\0MOUNTPOINT\0" */
	struct stat st;

	if (strncmp(mnt, "/dev/fd/", 8) == 0 || stat(mnt, &st) == 0)
		objfs_notify(msg);
	free(msg);
	return NULL;
}

/* The mount is up (the FUSE loop about to start): tell whoever waits. */
static void mounted(void *arg)
{
	struct objfs_mount *m = arg;
	const struct objfs_mount_cfg *cfg = m->cfg;
	struct objfs_machine mach;
	char desc[1024];
	pthread_t t;

	objfs_machine_probe(&mach);
	objfs_opts_describe(cfg->opts, &mach, desc, sizeof(desc));
	objfs_log_notice("mounted %s on %s (pid %d%s%s%s%s)", cfg->source, cfg->mountpoint,
			 (int)getpid(), m->store->auth ? "; credentials: " : "",
			 m->store->auth ? m->store->auth : "",
			 desc[0] ? "; options differing from the defaults: " : "", desc);
	if (cfg->ready)
		cfg->ready(cfg->ready_arg);
	if (getenv("NOTIFY_SOCKET")) { /* the thread owns its copy: it may outlive the mount */
		size_t n = strlen(cfg->source) + strlen(cfg->mountpoint) + 64;
		char *msg = malloc(n);
		int k;

		if (!msg)
			return;
		k = snprintf(msg, n, "READY=1\nSTATUS=serving %s", cfg->source);
		strcpy(msg + k + 1, cfg->mountpoint);
		if (pthread_create(&t, NULL, ready_main, msg))
			free(msg);
		else
			pthread_detach(t);
	}
}

/* Mounts and runs the FUSE session. 0 or -errno. */
static int serve(struct objfs_mount *m)
{
	const struct objfs_mount_cfg *cfg = m->cfg;
	const char *fo = cfg->opts->fuse_opts;
	/* room for every part, the source escaped at twice its length (a
	 * fixed 4 KiB overflowed with a long source and allow_other: review) */
	size_t cap = 96 + 2 * strlen(cfg->source) + (fo ? strlen(fo) : 0);
	char *fopts = malloc(cap), *fargv[4];
	int fargc = 0, err;

	if (!fopts)
		return -ENOMEM;
	strcpy(fopts, "ro,subtype=objfs,fsname=");
	opt_escape(fopts, cap, cfg->source);
	if (cfg->opts->allow_other)
		strcat(fopts, ",allow_other");
	if (cfg->opts->default_permissions)
		strcat(fopts, ",default_permissions");
	if (fo) {
		strcat(fopts, ",");
		strcat(fopts, fo);
	}
	fargv[fargc++] = (char *)cfg->argv0;
	fargv[fargc++] = "-o";
	fargv[fargc++] = fopts;
	if (cfg->debug)
		fargv[fargc++] = "-d";
	err = objfs_fs_run(&m->fs, fargc, fargv, cfg->mountpoint, mounted, m);
	free(fopts);
	return err;
}

/* @path as /proc/self/mountinfo writes it: ' ', tab, newline and '\\' octal. */
static void mountinfo_escape(const char *path, char *out, size_t cap)
{
	size_t n = 0;

	for (; *path && n + 5 < cap; path++) {
		unsigned char c = (unsigned char)*path;

		if (c == ' ' || c == '\t' || c == '\n' || c == '\\')
			n += (size_t)snprintf(out + n, cap - n, "\\%03o", c);
		else
			out[n++] = (char)c;
	}
	out[n] = '\0';
}

/*
 * Whether something is mounted on @real (absolute, no symlinks): the
 * topmost mount of it in /proc/self/mountinfo, as "FSTYPE SOURCE" in
 * @what. 1 yes, 0 no, -1 when mountinfo cannot be read.
 */
static int mounted_on(const char *real, char *what, size_t cap)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char esc[4 * PATH_MAX], *line = NULL;
	size_t len = 0;
	int found = 0;

	if (!f)
		return -1;
	mountinfo_escape(real, esc, sizeof(esc));
	/* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [TAGS...] - FSTYPE SOURCE SUPER */
	while (getline(&line, &len, f) > 0) {
		char *save = NULL, *tok = strtok_r(line, " ", &save), *sep;
		char *type = NULL, *src = NULL;

		for (int i = 1; tok && i < 5; i++)
			tok = strtok_r(NULL, " ", &save);
		if (!tok || strcmp(tok, esc) != 0)
			continue;
		found = 1;
		sep = save ? strstr(save, " - ") : NULL;
		if (sep) {
			type = strtok_r(sep + 3, " ", &save);
			src = type ? strtok_r(NULL, " ", &save) : NULL;
		}
		snprintf(what, cap, "%s %s", type ? type : "?", src ? src : "?");
	}
	free(line);
	fclose(f);
	return found;
}

int objfs_mount_check_point(const char *mnt, int nonempty)
{
	char real[PATH_MAX], what[512] = "", first[2][NAME_MAX + 1];
	struct dirent *de;
	struct stat st, up;
	size_t n = 0;
	DIR *d;
	int on;

	if (strncmp(mnt, "/dev/fd/", 8) == 0 || nonempty)
		return 0;
	if (!realpath(mnt, real))
		return 0; /* main checked it is a directory; the mount says why not */
	on = mounted_on(real, what, sizeof(what));
	if (on > 0 && strncmp(what, "autofs ", 7) == 0)
		return 0; /* systemd's automount point: the mount it waits for is ours */
	if (on < 0) { /* no /proc: another device than its parent's is a mount */
		char parent[PATH_MAX + 4];

		snprintf(parent, sizeof(parent), "%s/..", real);
		on = !stat(real, &st) && !stat(parent, &up) &&
		     (st.st_dev != up.st_dev || st.st_ino == up.st_ino);
		snprintf(what, sizeof(what), "another file system");
	}
	if (on) {
		objfs_err("mount point '%s' is already a mount point (%s): a second mount "
			  "would stack over it; unmount it first (%s %s), or choose another "
			  "directory (-o nonempty mounts over it anyway)", mnt, what,
			  strncmp(what, "fuse", 4) ? "umount" : "fusermount3 -u", mnt);
		return -EBUSY;
	}
	d = opendir(real);
	if (!d)
		return 0; /* unreadable: fusermount3 decides */
	while (n < 2 && (de = readdir(d))) {
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			snprintf(first[n++], sizeof(first[0]), "%s", de->d_name);
	}
	closedir(d);
	if (!n)
		return 0;
	objfs_err("mount point '%s' is not empty (it holds '%s'%s): the mount would hide "
		  "what is there; choose an empty directory, or add -o nonempty to mount "
		  "over it anyway", mnt, first[0], n > 1 ? " and more" : "");
	return -ENOTEMPTY;
}

int objfs_mount_run(const struct objfs_mount_cfg *cfg)
{
	struct objfs_mount m = { .cfg = cfg };
	int ret;

	if (objfs_mount_check_point(cfg->mountpoint, cfg->opts->nonempty))
		return 1;
	ret = build(&m);
	if (!ret) {
		ret = serve(&m);
		objfs_notify("STOPPING=1");
		if (cfg->opts->stats)
			log_stats(&m);
	}
	teardown(&m);
	return ret ? 1 : 0;
}

size_t objfs_stats_format(char *buf, size_t cap, const struct objfs_stats *s,
			  const struct objfs_cache_stats *c,
			  const struct objfs_diskcache_stats *d,
			  const struct objfs_side_stats *sd)
{
	const struct objfs_counter_set set = { .engine = s, .cache = c, .disk = d, .side = sd };
	size_t len = 0;

	if (cap)
		buf[0] = '\0';
	/* the rows of counters.c, in order; a part not given leaves its rows out */
	for (const struct objfs_counter *k = objfs_counters; k->name; k++) {
		char v[32];

		if (objfs_counter_value(k, &set, v, sizeof(v)) == 0)
			objfs_appendf(buf, cap, &len, "%s %s\n", k->name, v);
	}
	return len;
}
