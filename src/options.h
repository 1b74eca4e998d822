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
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* What the defaults are fitted to. */
struct objfs_machine {
	long ncpu;    /* online cores */
	uint64_t mem; /* bytes of memory: RAM, or the cgroup's memory.max when lower; 0 unknown */
};

struct objfs_opts {
	size_t chunk_size;        /* range GET granularity, bytes */
	unsigned max_connections; /* per-host connection cap */
	double attr_timeout;      /* kernel attribute cache, seconds */
	double entry_timeout;     /* kernel dentry cache, seconds */
	double list_ttl;          /* our directory listing cache, seconds */
	double negative_timeout;  /* kernel cache of a name that does not exist, seconds */
	unsigned retries;         /* retries of a failed request */
	double timeout;           /* stall timeout of one request, seconds */
	size_t cache_size;        /* block cache memory cap, bytes; 0: from the machine */
	size_t prefetch_max;      /* largest readahead window per handle */
	unsigned threads;         /* FUSE worker threads, at most */
	unsigned engine_threads;  /* fetch engine threads */
	int stats;                /* print counters at unmount */
	int side;                 /* GPU side API server on (default) or off */
	int direct_recv;          /* plain-HTTP bodies straight into buffers (on) */
	int direct_io;            /* reads bypass the kernel page cache (off) */
	unsigned ring_slots;      /* GPU side API ring: slots per session */
	size_t ring_slot_size;    /* GPU side API ring: bytes per slot */
	unsigned fill_threads;    /* GPU side API fill workers; 0: from the core count */
	char *cache_dir;          /* owned; NULL: no disk cache */
	size_t cache_dir_size;    /* disk cache cap, bytes */
	size_t side_ring_budget;  /* GPU side API: client ring bytes mapped at once; 0: RAM/4 */
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
	char *credentials_file;   /* owned; AWS_SHARED_CREDENTIALS_FILE as an option */
	char *config_file;        /* owned; AWS_CONFIG_FILE as an option */
	/* Running as a system mount (fstab, systemd, containers) */
	char *proxy;              /* owned; http_proxy/https_proxy as an option */
	char *log_file;           /* owned; NULL: stderr, then syslog once daemonized */
	char *metrics;            /* owned; [ADDR:]PORT of the Prometheus endpoint */
	char *fuse_opts;          /* owned; generic mount options passed to libfuse */
	int saw_rw;               /* "rw" was given (mount(8) adds it): noted, mount stays ro */
	int nonempty;             /* mount over a directory with entries, or a mount point */
	/* Hardening against hostile servers and local users */
	int debug_dumpable;       /* keep core dumps possible (default: not dumpable) */
	int allow_redirects;      /* 0 origin (default), 1 any, 2 none: enum objfs_redirects */
	int http_version;         /* 0: HTTP/1.1 (default), 1: HTTP/2 offered over TLS */
	size_t max_dir_bytes;     /* memory of one directory listing, bytes; 0: from the machine */
	unsigned max_dir_entries; /* entries of one directory listing, at most */
	unsigned max_list_pages;  /* requests (S3 pages) of one listing, at most */
	double list_timeout;      /* seconds one listing may take, all pages */
};

/* The sections of --help, and of objfs(1)'s OPTIONS. */
enum objfs_opt_group {
	OBJFS_OPT_MAIN,
	OBJFS_OPT_S3,
	OBJFS_OPT_GENERIC, /* mount(8)'s options: accepted, listed by name only */
};

/*
 * One -o option as it is documented. --help is generated from these rows;
 * tests/check_options.c checks that objfs(1)'s OPTIONS section, README's
 * option tables and contrib/completion/objfs.bash name every one of them
 * (and nothing else), and that a default given as a value is the one
 * objfs_opts_init() sets. The long text of each lives in objfs(1).
 */
struct objfs_opt_doc {
	const char *name;
	const char *arg;  /* the value's form ("SIZE", "on|off"); NULL: takes none */
	const char *def;  /* the default as --help says it; NULL: off or none */
	const char *help; /* one line; NULL in the generic group */
	enum objfs_opt_group group;
};

/* Row @i of the option table, in --help's order; NULL past the last. Static. */
const struct objfs_opt_doc *objfs_opts_doc(size_t i);

/* Writes the option part of --help, generated from the table, to @f. */
void objfs_opts_help(FILE *f);

void objfs_opts_init(struct objfs_opts *o);
/* Frees strings owned by @o; safe to call twice. */
void objfs_opts_clear(struct objfs_opts *o);

/*
 * Generic mount options, so that mount(8), mount.fuse3, fstab and systemd
 * work: dev, nodev, suid, nosuid, exec, noexec, noatime, nodiratime, sync,
 * async and dirsync go to libfuse (objfs_opts.fuse_opts); rw is accepted
 * (the mount stays read-only; main prints one notice); ro, defaults, auto,
 * noauto, user, users, nouser, _netdev, nofail, atime, relatime and every
 * x-* and comment= option belong to mount(8) and are dropped.
 *
 * Parse one comma-separated -o list into @o. Returns 0, or -EINVAL with an
 * error message in @err (always NUL-terminated, at most @errlen bytes).
 */
int objfs_opts_parse(struct objfs_opts *o, const char *list, char *err, size_t errlen);

/*
 * Writes the options of @o that differ from the defaults for @ncpu cores
 * (objfs_opts_machine: counts filled from the machine are defaults too) as
 * one "-o" list, for the summary at mount; no option holds a secret.
 * Returns its length.
 */
size_t objfs_opts_describe(const struct objfs_opts *o, const struct objfs_machine *m, char *buf,
			   size_t cap);

/* Reads this machine's cores and memory. */
void objfs_machine_probe(struct objfs_machine *m);

/*
 * Fills the options left at 0 ("from the machine") for @m:
 *   threads          FUSE workers, 8 per core (64 to 512): a worker waits
 *                    for the block its request needs, so the kernel's
 *                    requests of 64 readers (4 readahead requests each)
 *                    wait for a free worker behind ones that wait for the
 *                    network: 64 readers reach full speed only with 128
 *                    workers or more (16 readers with any count);
 *   engine_threads   1 per core (2 to 64): several processes filling their
 *                    GPUs at once keep gaining up to one thread per core;
 *   max_connections  per host, 4 per core (16 to 256): 16 workers reading
 *                    100 KiB files, each file's GET waiting for a free
 *                    connection and engine thread, run about 1.5x faster
 *                    with 16 threads and 64 connections than with 8 and 32;
 *   cache_size       a sixteenth of memory (1 GiB to 16 GiB): the prefetch
 *                    windows of 64 readers starve in 1 GiB (about a fifth
 *                    slower than with 8 GiB);
 *   max_dir_bytes    an eighth of memory (64 MiB to 4 GiB): a hostile or
 *                    endless listing fails before it takes the machine;
 *                    ~300 bytes an entry, so 4 GiB holds ~14M entries.
 */
void objfs_opts_machine(struct objfs_opts *o, const struct objfs_machine *m);

/* Parse "123", "4K", "8M", "1G" into bytes; -EINVAL on junk or overflow. */
int objfs_parse_size(const char *s, size_t *out);

#endif
