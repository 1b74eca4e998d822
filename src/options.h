/*
 * options: the -o option set, its defaults, and its parser.
 *
 * Parsing is separate from main so it can be unit tested and so every bad
 * option produces one message naming the option and what was expected.
 * Numbers accept K/M/G (powers of 1024) for sizes and fractions for times.
 */
#ifndef OBJFS_OPTIONS_H
#define OBJFS_OPTIONS_H

#include <stddef.h>
#include <sys/types.h>

struct objfs_opts {
	size_t chunk_size;        /* range GET granularity, bytes */
	unsigned max_connections; /* per-host connection cap */
	double attr_timeout;      /* kernel attribute cache, seconds */
	double entry_timeout;     /* kernel dentry cache, seconds */
	double list_ttl;          /* our directory listing cache, seconds */
	unsigned retries;         /* retries of a failed request */
	double timeout;           /* stall timeout of one request, seconds */
	size_t cache_size;        /* block cache memory cap, bytes */
	size_t prefetch_max;      /* largest readahead window per handle */
	unsigned threads;         /* FUSE worker threads, at most */
	unsigned engine_threads;  /* fetch engine threads */
	int stats;                /* print counters at unmount */
	int side;                 /* GPU side API server on (default) or off */
	int direct_recv;          /* plain-HTTP bodies straight into buffers (on) */
	unsigned ring_slots;      /* GPU side API ring: slots per session */
	size_t ring_slot_size;    /* GPU side API ring: bytes per slot */
	char *cache_dir;          /* owned; NULL: no disk cache */
	size_t cache_dir_size;    /* disk cache cap, bytes */
	int allow_other;
	int default_permissions;
	uid_t uid;
	gid_t gid;
	mode_t umask;
	int have_uid, have_gid, have_umask;
	char *ca_file;            /* owned */
	int insecure;
	int log_level;            /* enum objfs_log_level */
	/* S3 */
	char *endpoint;           /* owned; NULL: AWS or environment */
	char *region;             /* owned */
	char *profile;            /* owned */
	int path_style;
	int virtual_host;
	int no_sign;
	/* Hardening (issue 19) */
	int debug_dumpable;       /* keep core dumps possible (default: not dumpable) */
	int allow_redirects;      /* 0 origin (default), 1 any, 2 none: enum objfs_redirects */
	unsigned max_dir_entries; /* entries of one directory listing, at most */
	unsigned max_list_pages;  /* requests (S3 pages) of one listing, at most */
	double list_timeout;      /* seconds one listing may take, all pages */
};

void objfs_opts_init(struct objfs_opts *o);
/* Frees strings owned by @o; safe to call twice. */
void objfs_opts_clear(struct objfs_opts *o);

/*
 * Parse one comma-separated -o list into @o. Returns 0, or -EINVAL with an
 * error message in @err (always NUL-terminated, at most @errlen bytes).
 */
int objfs_opts_parse(struct objfs_opts *o, const char *list, char *err, size_t errlen);

/* Parse "123", "4K", "8M", "1G" into bytes; -EINVAL on junk or overflow. */
int objfs_parse_size(const char *s, size_t *out);

#endif
