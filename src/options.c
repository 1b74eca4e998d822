/*
 * options: see options.h. A table of option names with their documentation,
 * a kind and a field offset keeps the parser, --help and the documentation
 * checks (tests/check_options.c) to one list; adding an option is one table
 * row plus its paragraph in objfs(1) and its README row.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "log.h"
#include "options.h"

enum opt_kind {
	K_SIZE, K_UINT, K_TIME, K_FLAG, K_STR, K_ID, K_MODE, K_LOG, K_ONOFF, K_CHOICE,
	K_FUSE,   /* a generic mount option libfuse applies: kept in fuse_opts */
	K_MOUNT,  /* a generic option that is mount(8)'s business: accepted, dropped */
};

/*
 * One row per option: its documentation (options.h, struct objfs_opt_doc)
 * and how it is parsed. Rows are in --help's order, group by group.
 */
struct opt_def {
	struct objfs_opt_doc doc;
	enum opt_kind kind;
	size_t off;
	size_t have_off; /* for K_ID / K_MODE: the "have" flag, else 0 */
	double min, max;
	const char *const *choices; /* K_CHOICE: NULL-terminated; the int is the index */
};

static const char *const redirect_choices[] = { "origin", "any", "none", NULL };
static const char *const http_version_choices[] = { "1.1", "2", NULL };

#define F(f) offsetof(struct objfs_opts, f)
#define MAIN(n, a, d, h) { n, a, d, h, OBJFS_OPT_MAIN }
#define S3(n, a, d, h) { n, a, d, h, OBJFS_OPT_S3 }
#define GEN(n) { n, NULL, NULL, NULL, OBJFS_OPT_GENERIC }
static const struct opt_def defs[] = {
	{ MAIN("chunk_size", "SIZE", "4M", "cache block and largest ranged GET"),
	  K_SIZE, F(chunk_size), 0, 4096, 1 << 30 },
	{ MAIN("cache_size", "SIZE", "1/16 of memory, 1G-16G", "memory block cache cap"),
	  K_SIZE, F(cache_size), 0, 1 << 20, 1ULL << 40 },
	{ MAIN("prefetch_max", "SIZE", "64M", "largest readahead window of one file"),
	  K_SIZE, F(prefetch_max), 0, 0, 1 << 30 },
	{ MAIN("max_connections", "N", "4 per core, 16-256", "connections per host"),
	  K_UINT, F(max_connections), 0, 1, 1024 },
	{ MAIN("threads", "N", "8 per core, 64-512", "FUSE worker threads, at most"),
	  K_UINT, F(threads), 0, 1, 1024 },
	{ MAIN("engine_threads", "N", "1 per core, 2-64", "fetch engine threads"),
	  K_UINT, F(engine_threads), 0, 1, 64 },
	{ MAIN("stats", NULL, NULL, "print the counters at unmount (MOUNT/.objfs-stats shows "
	       "them while mounted)"), K_FLAG, F(stats), 0, 0, 0 },
	/* metadata TTLs: max INFINITY, so "inf" (immutable datasets) is accepted */
	{ MAIN("attr_timeout", "SECS", "60", "attribute cache time, kernel and objfs; inf "
	       "(here and in the three below): never expire, for immutable datasets"),
	  K_TIME, F(attr_timeout), 0, 0, INFINITY },
	{ MAIN("entry_timeout", "SECS", "60", "name cache time in the kernel"),
	  K_TIME, F(entry_timeout), 0, 0, INFINITY },
	{ MAIN("negative_timeout", "SECS", "60", "cache time of a name that does not exist"),
	  K_TIME, F(negative_timeout), 0, 0, INFINITY },
	{ MAIN("list_ttl", "SECS", "60", "directory listing cache time"),
	  K_TIME, F(list_ttl), 0, 0, INFINITY },
	{ MAIN("retries", "N", "3", "retries of a failed request"),
	  K_UINT, F(retries), 0, 0, 100 },
	{ MAIN("timeout", "SECS", "30", "a request making no progress this long fails"),
	  K_TIME, F(timeout), 0, 1, 86400 },
	{ MAIN("allow_other", NULL, NULL, "let other users access the mount"),
	  K_FLAG, F(allow_other), 0, 0, 0 },
	{ MAIN("nonempty", NULL, NULL, "mount over a directory that holds entries or is a "
	       "mount point already (refused by default)"), K_FLAG, F(nonempty), 0, 0, 0 },
	{ MAIN("default_permissions", NULL, NULL, "let the kernel check permissions from the "
	       "modes"), K_FLAG, F(default_permissions), 0, 0, 0 },
	{ MAIN("uid", "N", "the mounting user", "owner of all files"),
	  K_ID, F(uid), F(have_uid), 0, 4294967294.0 },
	{ MAIN("gid", "N", "the mounting user's group", "group of all files"),
	  K_ID, F(gid), F(have_gid), 0, 4294967294.0 },
	{ MAIN("umask", "OCTAL", "022", "permission mask; the mount is read-only"),
	  K_MODE, F(umask), F(have_umask), 0, 0777 },
	{ MAIN("ca_file", "PATH", "the system store", "CA certificates for https"),
	  K_STR, F(ca_file), 0, 0, 0 },
	{ MAIN("insecure", NULL, NULL, "do not verify TLS certificates (dangerous)"),
	  K_FLAG, F(insecure), 0, 0, 0 },
	{ MAIN("log_level", "LEVEL", "warn", "error, warn, info or debug"),
	  K_LOG, F(log_level), 0, 0, 0 },
	{ MAIN("log_file", "PATH", NULL, "log to this file, timestamped (reopened on SIGHUP)"),
	  K_STR, F(log_file), 0, 0, 0 },
	{ MAIN("side", "on|off", "on", "GPU side API server for libobjfs"),
	  K_ONOFF, F(side), 0, 0, 0 },
	{ MAIN("direct_recv", "on|off", "on", "ranged GET bodies (http and https) received "
	       "straight into the destination, not through libcurl's buffer"),
	  K_ONOFF, F(direct_recv), 0, 0, 0 },
	{ MAIN("direct_io", NULL, NULL, "reads bypass the kernel page cache: one copy less per "
	       "byte, a request per read(); shared mmap from Linux 6.6 on"),
	  K_FLAG, F(direct_io), 0, 0, 0 },
	{ MAIN("ring_slots", "N", "64", "GPU side API ring slots per session"),
	  K_UINT, F(ring_slots), 0, 2, 64 },
	{ MAIN("ring_slot_size", "SIZE", "2M", "GPU side API ring slot size"),
	  K_SIZE, F(ring_slot_size), 0, 64 << 10, 64 << 20 },
	{ MAIN("fill_threads", "N", "1 per core, 4-64", "GPU side API threads that copy "
	       "cached and fetched bytes into the rings"),
	  K_UINT, F(fill_threads), 0, 1, 256 },
	{ MAIN("side_ring_budget", "SIZE", "RAM/4", "GPU side API ring bytes mapped at once; "
	       "one uid gets a quarter"),
	  K_SIZE, F(side_ring_budget), 0, 1 << 20, 1ULL << 50 },
	{ MAIN("cache_dir", "PATH", NULL, "persistent chunk cache on local disk"),
	  K_STR, F(cache_dir), 0, 0, 0 },
	{ MAIN("cache_dir_size", "SIZE", "10G", "disk cache cap, least recently used evicted"),
	  K_SIZE, F(cache_dir_size), 0, 1 << 20, 1ULL << 50 },
	{ MAIN("metrics", "[ADDR:]PORT", NULL, "Prometheus metrics on "
	       "http://ADDR:PORT/metrics (ADDR default 127.0.0.1)"),
	  K_STR, F(metrics), 0, 0, 0 },
	{ MAIN("proxy", "URL", "http_proxy, https_proxy", "HTTP(S) proxy"),
	  K_STR, F(proxy), 0, 0, 0 },
	{ MAIN("max_dir_bytes", "SIZE", "RAM/8, 64M-4G", "memory one directory listing may "
	       "take, ~300 bytes an entry"),
	  K_SIZE, F(max_dir_bytes), 0, 1 << 20, 1ULL << 44 },
	{ MAIN("max_dir_entries", "N", "10000000", "entries of one directory, at most"),
	  K_UINT, F(max_dir_entries), 0, 1, 4000000000.0 },
	{ MAIN("max_list_pages", "N", "20000", "requests (S3 pages) of one listing, at most"),
	  K_UINT, F(max_list_pages), 0, 1, 100000000 },
	{ MAIN("list_timeout", "SECS", "1800", "time one directory listing may take"),
	  K_TIME, F(list_timeout), 0, 1, 86400 * 7 },
	{ MAIN("allow_redirects", "origin|any|none", "origin", "which redirects are followed; "
	       "never https to http"),
	  K_CHOICE, F(allow_redirects), 0, 0, 0, redirect_choices },
	{ MAIN("http_version", "1.1|2", "1.1", "HTTP/1.1 only, or offer HTTP/2 over TLS"),
	  K_CHOICE, F(http_version), 0, 0, 0, http_version_choices },
	{ MAIN("debug_dumpable", NULL, NULL, "allow core dumps (secret buffers are left out "
	       "of dumps either way)"),
	  K_FLAG, F(debug_dumpable), 0, 0, 0 },
	{ S3("endpoint", "URL", "AWS, or AWS_ENDPOINT_URL", "S3-compatible server"),
	  K_STR, F(endpoint), 0, 0, 0 },
	{ S3("region", "R", "AWS_REGION, the profile's, us-east-1", "signing region"),
	  K_STR, F(region), 0, 0, 0 },
	{ S3("profile", "P", "AWS_PROFILE", "profile in ~/.aws/credentials and config"),
	  K_STR, F(profile), 0, 0, 0 },
	{ S3("path_style", NULL, NULL, "HOST/BUCKET/KEY requests (the default with endpoint=)"),
	  K_FLAG, F(path_style), 0, 0, 0 },
	{ S3("virtual_host", NULL, NULL, "BUCKET.HOST/KEY requests (the default on AWS)"),
	  K_FLAG, F(virtual_host), 0, 0, 0 },
	{ S3("no_sign", NULL, NULL, "anonymous requests, for public buckets"),
	  K_FLAG, F(no_sign), 0, 0, 0 },
	{ S3("credentials_file", "PATH", "AWS_SHARED_CREDENTIALS_FILE", "shared credentials "
	     "file"), K_STR, F(credentials_file), 0, 0, 0 },
	{ S3("config_file", "PATH", "AWS_CONFIG_FILE", "shared config file"),
	  K_STR, F(config_file), 0, 0, 0 },
	/* Generic mount options (options.h): the mount is always read-only. */
	{ GEN("rw"), K_FLAG, F(saw_rw) },
	{ GEN("ro"), K_MOUNT },
	{ GEN("defaults"), K_MOUNT },
	{ GEN("auto"), K_MOUNT },
	{ GEN("noauto"), K_MOUNT },
	{ GEN("user"), K_MOUNT },
	{ GEN("users"), K_MOUNT },
	{ GEN("nouser"), K_MOUNT },
	{ GEN("_netdev"), K_MOUNT },
	{ GEN("nofail"), K_MOUNT },
	{ GEN("atime"), K_MOUNT },
	{ GEN("relatime"), K_MOUNT },
	{ GEN("norelatime"), K_MOUNT },
	{ GEN("strictatime"), K_MOUNT },
	{ GEN("nostrictatime"), K_MOUNT },
	{ GEN("lazytime"), K_MOUNT },
	{ GEN("nolazytime"), K_MOUNT },
	{ GEN("owner"), K_MOUNT },
	{ GEN("group"), K_MOUNT },
	{ GEN("silent"), K_MOUNT },
	{ GEN("loud"), K_MOUNT },
	{ GEN("helper"), K_MOUNT },
	{ GEN("nosymfollow"), K_MOUNT },
	{ GEN("dev"), K_FUSE },
	{ GEN("nodev"), K_FUSE },
	{ GEN("suid"), K_FUSE },
	{ GEN("nosuid"), K_FUSE },
	{ GEN("exec"), K_FUSE },
	{ GEN("noexec"), K_FUSE },
	{ GEN("noatime"), K_FUSE },
	{ GEN("nodiratime"), K_FUSE },
	{ GEN("sync"), K_FUSE },
	{ GEN("async"), K_FUSE },
	{ GEN("dirsync"), K_FUSE },
};
#undef GEN
#undef S3
#undef MAIN
#undef F

const struct objfs_opt_doc *objfs_opts_doc(size_t i)
{
	return i < sizeof(defs) / sizeof(defs[0]) ? &defs[i].doc : NULL;
}

/*
 * Writes @text to @f as words wrapped at 79 columns, the first line from
 * column @col (where the caller left off), the next ones from @indent.
 */
static void wrap(FILE *f, const char *text, int col, int indent)
{
	for (const char *p = text; *p;) {
		int n = (int)strcspn(p, " ");

		if (col > indent && col + 1 + n > 79) {
			fprintf(f, "\n%*s", indent, "");
			col = indent;
		} else if (col > indent) {
			fputc(' ', f);
			col++;
		}
		fprintf(f, "%.*s", n, p);
		col += n;
		p += n;
		p += strspn(p, " ");
	}
	fputc('\n', f);
}

void objfs_opts_help(FILE *f)
{
	static const char *const heads[] = {
		[OBJFS_OPT_MAIN] = "Options (-o opt[,opt...]):",
		[OBJFS_OPT_S3] = "S3 options:",
		[OBJFS_OPT_GENERIC] = "Generic mount options, as mount(8) and fstab pass them, "
				      "are accepted, x-* and comment= too (kernel flags go to "
				      "the mount; the mount is always read-only):",
	};
	char gen[1024] = "";
	int group = -1;

	for (size_t i = 0; i < sizeof(defs) / sizeof(defs[0]); i++) {
		const struct objfs_opt_doc *d = &defs[i].doc;
		char text[512];
		int col;

		if ((int)d->group != group) {
			group = (int)d->group;
			fputc('\n', f);
			wrap(f, heads[group], 0, 0);
		}
		if (d->group == OBJFS_OPT_GENERIC) {
			snprintf(gen + strlen(gen), sizeof(gen) - strlen(gen), "%s%s",
				 gen[0] ? ", " : "", d->name);
			continue;
		}
		col = fprintf(f, "  %s%s%s", d->name, d->arg ? "=" : "", d->arg ? d->arg : "");
		if (col + 2 > 25) {
			fprintf(f, "\n%*s", 25, "");
			col = 25;
		} else {
			col += fprintf(f, "%*s", 25 - col, "");
		}
		snprintf(text, sizeof(text), "%s%s%s%s", d->help, d->def ? " (default: " : "",
			 d->def ? d->def : "", d->def ? ")" : "");
		wrap(f, text, col, 25);
	}
	if (gen[0]) {
		fputs("  ", f);
		wrap(f, gen, 2, 2);
	}
}

/*
 * "=@v" for the log, a URL's user:password (a proxy's) left out: options
 * hold no secret of objfs's own, but a proxy URL may carry one, and every
 * mount logs its options.
 */
static void str_described(char *out, size_t cap, const char *v)
{
	const char *scheme = strstr(v, "://"), *host = scheme ? scheme + 3 : v;
	const char *at = strchr(host, '@'), *slash = strchr(host, '/');

	if (at && (!slash || at < slash))
		snprintf(out, cap, "=%.*s***@%s", (int)(host - v), v, at + 1);
	else
		snprintf(out, cap, "=%s", v);
}

void objfs_opts_init(struct objfs_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->chunk_size = 4u << 20;
	o->max_connections = 0; /* 0: from the core count (objfs_opts_machine) */
	o->attr_timeout = 60;
	o->entry_timeout = 60;
	o->list_ttl = 60;
	o->negative_timeout = 60;
	o->retries = 3;
	o->timeout = 30;
	o->cache_size = 0; /* from memory (objfs_opts_machine) */
	o->prefetch_max = 64u << 20;
	o->threads = 0;
	o->engine_threads = 0;
	o->side = 1;
	o->direct_recv = 1;
	/* 128 MiB pinned in 2 MiB slots: 64 GETs in flight per fill, so slow
	 * connections (TLS, a distant store) do not idle behind the one piece
	 * the GPU waits for; 16 slots of 8M hold GPU fills over HTTPS at 16
	 * connections to about half the speed (docs/benchmarks.md), and plain
	 * HTTP gains nothing from them */
	o->ring_slots = 64;
	o->ring_slot_size = 2u << 20;
	o->cache_dir_size = 10ull << 30;
	o->log_level = OBJFS_LOG_WARN;
	/* the store's defaults (store.h: OBJFS_LIST_*), repeated for --help */
	o->max_dir_bytes = 0; /* from memory (objfs_opts_machine) */
	o->max_dir_entries = 10000000;
	o->max_list_pages = 20000;
	o->list_timeout = 1800;
}

void objfs_opts_clear(struct objfs_opts *o)
{
	free(o->ca_file);
	free(o->endpoint);
	free(o->region);
	free(o->profile);
	free(o->cache_dir);
	free(o->credentials_file);
	free(o->config_file);
	free(o->proxy);
	free(o->log_file);
	free(o->metrics);
	free(o->fuse_opts);
	o->ca_file = o->endpoint = o->region = o->profile = o->cache_dir = NULL;
	o->credentials_file = o->config_file = o->proxy = o->log_file = o->metrics = NULL;
	o->fuse_opts = NULL;
}

int objfs_parse_size(const char *s, size_t *out)
{
	unsigned long long v, mul = 1;
	char *end;

	/* strtoull() would skip spaces and negate " -5" into a huge size */
	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	switch (*end) {
	case '\0': break;
	case 'k': case 'K': mul = 1ull << 10; end++; break;
	case 'm': case 'M': mul = 1ull << 20; end++; break;
	case 'g': case 'G': mul = 1ull << 30; end++; break;
	default: return -EINVAL;
	}
	if (*end == 'i' || *end == 'B')
		end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
	if (*end || (v && mul > ULLONG_MAX / v) || v * mul > SIZE_MAX)
		return -EINVAL;
	*out = (size_t)(v * mul);
	return 0;
}

/* Appends @name to o->fuse_opts. 0 or -ENOMEM. */
static int fuse_opt_add(struct objfs_opts *o, const char *name, char *err, size_t errlen)
{
	size_t n = o->fuse_opts ? strlen(o->fuse_opts) : 0;
	char *p = realloc(o->fuse_opts, n + strlen(name) + 2);

	if (!p) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	if (n)
		p[n++] = ',';
	strcpy(p + n, name);
	o->fuse_opts = p;
	return 0;
}

static int parse_one(struct objfs_opts *o, const struct opt_def *d, const char *val,
		     char *err, size_t errlen)
{
	char *base = (char *)o, *end;
	double dv;
	size_t sz;
	unsigned long long uv;

	/* mount(8)'s; "user=alice" is what util-linux <= 2.38 hands a helper
	 * for a "user" fstab line, which must not be refused */
	if (d->kind == K_MOUNT &&
	    (!val || !strcmp(d->doc.name, "user") || !strcmp(d->doc.name, "helper")))
		return 0;
	if (d->kind == K_FLAG || d->kind == K_FUSE || d->kind == K_MOUNT) {
		if (val) {
			snprintf(err, errlen, "option '%s' takes no value", d->doc.name);
			return -EINVAL;
		}
		if (d->kind == K_FLAG)
			*(int *)(base + d->off) = 1;
		else if (d->kind == K_FUSE)
			return fuse_opt_add(o, d->doc.name, err, errlen);
		return 0;
	}
	if (!val || !*val) {
		snprintf(err, errlen, "option '%s' needs a value (%s=...)", d->doc.name, d->doc.name);
		return -EINVAL;
	}
	switch (d->kind) {
	case K_SIZE:
		if (objfs_parse_size(val, &sz) || sz < d->min || sz > d->max) {
			snprintf(err, errlen, "option '%s': expected a size from %.0f to %.0f "
				 "bytes (K/M/G suffixes allowed), got '%s'", d->doc.name, d->min,
				 d->max, val);
			return -EINVAL;
		}
		*(size_t *)(base + d->off) = sz;
		return 0;
	case K_UINT:
	case K_ID:
		errno = 0;
		uv = strtoull(val, &end, 10);
		if (errno || *end || !isdigit((unsigned char)*val) || uv < d->min || uv > d->max) {
			snprintf(err, errlen, "option '%s': expected a whole number from "
				 "%.0f to %.0f, got '%s'", d->doc.name, d->min, d->max, val);
			return -EINVAL;
		}
		if (d->kind == K_UINT) {
			*(unsigned *)(base + d->off) = (unsigned)uv;
		} else {
			*(uid_t *)(base + d->off) = (uid_t)uv; /* uid_t and gid_t alike */
			*(int *)(base + d->have_off) = 1;
		}
		return 0;
	case K_TIME:
		errno = 0;
		if (isinf(d->max) && (!strcasecmp(val, "inf") || !strcasecmp(val, "infinity") ||
				      !strcasecmp(val, "forever"))) {
			*(double *)(base + d->off) = INFINITY;
			return 0;
		}
		dv = strtod(val, &end);
		if (errno || *end || !isfinite(dv) || dv < d->min || dv > d->max) {
			snprintf(err, errlen, "option '%s': expected seconds from %g to %g, "
				 "got '%s'", d->doc.name, d->min, d->max, val);
			return -EINVAL;
		}
		*(double *)(base + d->off) = dv;
		return 0;
	case K_MODE:
		errno = 0;
		uv = strtoull(val, &end, 8);
		if (errno || *end || !isdigit((unsigned char)*val) || uv > 0777) {
			snprintf(err, errlen, "option '%s': expected an octal mask such as "
				 "022, got '%s'", d->doc.name, val);
			return -EINVAL;
		}
		*(mode_t *)(base + d->off) = (mode_t)uv;
		*(int *)(base + d->have_off) = 1;
		return 0;
	case K_STR: {
		char **slot = (char **)(base + d->off), *dup = strdup(val);

		if (!dup) {
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		free(*slot);
		*slot = dup;
		return 0;
	}
	case K_LOG: {
		enum objfs_log_level lvl;

		if (objfs_log_parse_level(val, &lvl)) {
			snprintf(err, errlen, "option 'log_level': expected error, warn, "
				 "info or debug, got '%s'", val);
			return -EINVAL;
		}
		o->log_level = (int)lvl;
		return 0;
	}
	case K_ONOFF:
		if (strcmp(val, "on") && strcmp(val, "off")) {
			snprintf(err, errlen, "option '%s': expected on or off, got '%s'", d->doc.name,
				 val);
			return -EINVAL;
		}
		*(int *)(base + d->off) = strcmp(val, "on") == 0;
		return 0;
	case K_CHOICE: {
		char list[128] = "";

		for (int i = 0; d->choices[i]; i++) {
			if (strcmp(val, d->choices[i]) == 0) {
				*(int *)(base + d->off) = i;
				return 0;
			}
			snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
				 i ? ", " : "", d->choices[i]);
		}
		snprintf(err, errlen, "option '%s': expected one of %s, got '%s'", d->doc.name, list,
			 val);
		return -EINVAL;
	}
	case K_FLAG:
	case K_FUSE:
	case K_MOUNT:
		break;
	}
	return -EINVAL;
}

/* Whether @tok is one of mount(8)'s own options that no table can list. */
static int mount_own(const char *tok)
{
	return strncmp(tok, "x-", 2) == 0 || strncmp(tok, "comment=", 8) == 0;
}

int objfs_opts_parse(struct objfs_opts *o, const char *list, char *err, size_t errlen)
{
	char *copy = strdup(list), *save = NULL, *tok;
	int ret = 0;

	err[0] = '\0';
	if (!copy) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '=');
		const struct opt_def *d = NULL;

		if (mount_own(tok))
			continue;
		if (eq)
			*eq = '\0';
		for (size_t i = 0; i < sizeof(defs) / sizeof(defs[0]); i++) {
			if (strcmp(defs[i].doc.name, tok) == 0) {
				d = &defs[i];
				break;
			}
		}
		if (!d) {
			snprintf(err, errlen, "unknown option '%s' (see objfs --help)", tok);
			ret = -EINVAL;
			break;
		}
		ret = parse_one(o, d, eq ? eq + 1 : NULL, err, errlen);
		if (ret)
			break;
	}
	free(copy);
	return ret;
}

size_t objfs_opts_describe(const struct objfs_opts *o, const struct objfs_machine *m, char *buf,
			   size_t cap)
{
	struct objfs_opts def;
	size_t len = 0;

	objfs_opts_init(&def);
	objfs_opts_machine(&def, m);
	if (cap)
		buf[0] = '\0';
	for (size_t i = 0; i < sizeof(defs) / sizeof(defs[0]); i++) {
		const struct opt_def *d = &defs[i];
		const char *a = (const char *)o + d->off, *b = (const char *)&def + d->off;
		char val[320] = "";
		int differs = 0;

		switch (d->kind) {
		case K_SIZE:
			differs = *(const size_t *)a != *(const size_t *)b;
			snprintf(val, sizeof(val), "=%zu", *(const size_t *)a);
			break;
		case K_UINT:
			differs = *(const unsigned *)a != *(const unsigned *)b;
			snprintf(val, sizeof(val), "=%u", *(const unsigned *)a);
			break;
		case K_TIME:
			differs = *(const double *)a != *(const double *)b;
			snprintf(val, sizeof(val), "=%g", *(const double *)a);
			break;
		case K_FLAG:
		case K_ONOFF:
			differs = *(const int *)a != *(const int *)b;
			if (d->kind == K_ONOFF)
				snprintf(val, sizeof(val), "=%s", *(const int *)a ? "on" : "off");
			break;
		case K_STR:
			differs = *(char *const *)a != NULL;
			if (differs)
				str_described(val, sizeof(val), *(char *const *)a);
			break;
		case K_ID:
		case K_MODE:
			differs = *(const int *)((const char *)o + d->have_off);
			snprintf(val, sizeof(val), d->kind == K_ID ? "=%u" : "=%03o",
				 d->kind == K_ID ? (unsigned)*(const uid_t *)a :
				 (unsigned)*(const mode_t *)a);
			break;
		case K_LOG: {
			static const char *const names[] = { "error", "warn", "info", "debug" };

			differs = o->log_level != def.log_level;
			snprintf(val, sizeof(val), "=%s", o->log_level >= 0 && o->log_level < 4 ?
				 names[o->log_level] : "?");
			break;
		}
		case K_CHOICE:
			differs = *(const int *)a != *(const int *)b;
			snprintf(val, sizeof(val), "=%s", d->choices[*(const int *)a]);
			break;
		case K_FUSE:
		case K_MOUNT:
			break;
		}
		if (differs && len < cap)
			len += (size_t)snprintf(buf + len, cap - len, "%s%s%s", len ? "," : "",
						d->doc.name, val);
	}
	if (o->fuse_opts && len < cap)
		len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? "," : "", o->fuse_opts);
	objfs_opts_clear(&def);
	return len;
}

static unsigned clampu(long v, unsigned lo, unsigned hi)
{
	return v < (long)lo ? lo : v > (long)hi ? hi : (unsigned)v;
}

/* cgroup v2 memory.max of this process, 0 when none or unlimited */
static uint64_t cgroup_mem_max(void)
{
	char line[512], path[640];
	unsigned long long v = 0;
	FILE *f = fopen("/proc/self/cgroup", "re");
	int found = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "0::", 3) == 0) {
			line[strcspn(line, "\n")] = '\0';
			snprintf(path, sizeof(path), "/sys/fs/cgroup%s/memory.max", line + 3);
			found = 1;
			break;
		}
	}
	fclose(f);
	if (!found || !(f = fopen(path, "re")))
		return 0;
	if (fscanf(f, "%llu", &v) != 1)
		v = 0; /* "max" */
	fclose(f);
	return v;
}

void objfs_machine_probe(struct objfs_machine *m)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	uint64_t cg = cgroup_mem_max();

	m->ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	m->mem = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
	if (cg && (!m->mem || cg < m->mem))
		m->mem = cg;
}

/* A @div-th of @m's memory, @lo to @hi, in whole MiB */
static size_t mem_share(const struct objfs_machine *m, unsigned div, uint64_t lo, uint64_t hi)
{
	uint64_t c = m->mem / div;

	c = c < lo ? lo : c > hi ? hi : c;
	return (size_t)c & ~(size_t)((1 << 20) - 1);
}

void objfs_opts_machine(struct objfs_opts *o, const struct objfs_machine *m)
{
	long ncpu = m->ncpu < 1 ? 1 : m->ncpu;

	if (!o->threads)
		o->threads = clampu(8 * ncpu, 64, 512);
	if (!o->engine_threads)
		o->engine_threads = clampu(ncpu, 2, 64);
	if (!o->max_connections)
		o->max_connections = clampu(4 * ncpu, 16, 256);
	if (!o->cache_size)
		o->cache_size = mem_share(m, 16, 1ull << 30, 16ull << 30);
	if (!o->max_dir_bytes)
		o->max_dir_bytes = mem_share(m, 8, 64ull << 20, 4ull << 30);
}
