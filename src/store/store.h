/*
 * store: the backend interface (list, stat, read_range) and the parts that
 * are the same for every backend.
 *
 * Paths handed to a store are store-relative: "" is the mount root, then
 * "dir", "dir/file" (no leading or trailing '/'). A backend only knows how to
 * turn a path into requests; checking every response belongs to this layer
 * and the engine, so every backend gets the same correctness guarantees.
 * Reads are asynchronous ranged fetches (objfs_store_fetch); the block
 * cache above decides their sizes.
 */
#ifndef OBJFS_STORE_H
#define OBJFS_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "listing.h"

struct objfs_stat {
	int is_dir;
	int64_t size;   /* bytes, -1 unknown */
	int64_t mtime;  /* seconds, -1 unknown */
	char etag[192]; /* "" when the server gives none */
};

struct objfs_store;

/*
 * One page of a listing in progress (objfs_store_list_pages): @page holds
 * its entries, read only and freed once this returns. A name may come
 * twice, as an object and as a directory, in one page or in two. @upto:
 * every key up to it has now been delivered, in byte order, a key being a
 * name with '/' after it for a directory (S3 lists in that order, so an
 * object "a" whose prefix "a/" sorts after @upto may still turn out to be
 * a directory); NULL when the page says nothing of the sort. Returns 0 to
 * go on, or -errno to stop the listing, which then fails with it.
 */
typedef int (*objfs_list_page_fn)(void *arg, const struct objfs_listing *page,
				  const char *upto);

struct objfs_store_ops {
	const char *name;
	/* Lists directory @path into @out. 0, -ENOENT, -ENOTDIR or -errno. */
	int (*list)(struct objfs_store *s, const char *path, struct objfs_listing *out);
	/*
	 * Lists directory @path page by page, @page(@arg, ...) for each as it
	 * arrives, so that readdir can stream. NULL: list() is
	 * delivered as one page. 0 once every page was delivered, or -errno
	 * (those delivered are then not the whole directory).
	 */
	int (*list_pages)(struct objfs_store *s, const char *path, objfs_list_page_fn page,
			  void *arg);
	/* Metadata of object @path. 0, -ENOENT or -errno. */
	int (*stat)(struct objfs_store *s, const char *path, struct objfs_stat *st);
	/*
	 * Whether @path (a file or a directory) exists, without listing its
	 * directory: a few requests whatever the directory's size. NULL when
	 * the backend cannot (HTTP indexes: a listing is the only way). 0
	 * with @st filled (is_dir set; a directory wins over an object of the
	 * same name), -ENOENT or -errno.
	 */
	int (*lookup)(struct objfs_store *s, const char *path, struct objfs_stat *st);
	/*
	 * Prepares @r (already objfs_req_init'ed) to GET object @path: sets
	 * r->url and r->headers, which stay owned by the backend through
	 * *cookie until release(). 0 or -errno.
	 */
	int (*prepare)(struct objfs_store *s, const char *path, struct objfs_req *r,
		       void **cookie);
	/*
	 * Optional. Whether the answer @r to @cookie's request refused the
	 * credentials it was signed with, in a way signing it anew may mend
	 * (S3: ExpiredToken and the like; the backend has the credentials
	 * resolved again). 1: objfs_store_fetch asks resign() and sends the
	 * request once more; 0: the answer stands.
	 */
	int (*refused)(struct objfs_store *s, void *cookie, const struct objfs_req *r);
	/*
	 * Optional, with refused(). Signs @cookie's request anew and sets
	 * r->url and r->headers from it again. May block (the credentials
	 * resolved again: a remote source, a credential_process): never
	 * called on an engine thread. 0 or -errno.
	 */
	int (*resign)(struct objfs_store *s, void *cookie, struct objfs_req *r);
	void (*release)(struct objfs_store *s, void *cookie);
	void (*free)(struct objfs_store *s);
};

/*
 * What one directory listing may cost (an S3 endpoint answering
 * IsTruncated=true forever grew the daemon by GiB; a listing trickling at
 * 1 byte/s held its threads for good). Past any of them the listing fails
 * (EIO to the caller) with one warning naming the directory, the bound and
 * the option. 0 in a field: its default.
 */
struct objfs_list_limits {
	size_t max_bytes;   /* memory its entries stand for (objfs_listent_bytes),
			       the index page of an HTTP listing too (max_dir_bytes) */
	size_t max_entries; /* entries of one directory (max_dir_entries) */
	unsigned max_pages; /* requests of one listing: S3 pages (max_list_pages) */
	double timeout;     /* seconds for the whole listing, every page and
			       retry included (list_timeout) */
};

#define OBJFS_LIST_MAX_BYTES (1ull << 30) /* the mount sizes it from memory */
#define OBJFS_LIST_MAX_ENTRIES 10000000u /* a 10M-key prefix lists */
#define OBJFS_LIST_MAX_PAGES 20000u      /* 10M keys at 500 a page */
#define OBJFS_LIST_TIMEOUT 1800.0        /* 10,000 pages at 180 ms */

struct objfs_store_stale;  /* store.c's */
struct objfs_store_resign; /* store.c's */

/* The part of every backend's store (its first member); objfs_store_init sets it. */
struct objfs_store {
	const struct objfs_store_ops *ops;
	struct objfs_engine *engine; /* borrowed; set before use */
	size_t chunk_size;           /* largest single ranged GET */
	struct objfs_store_stale *stale; /* owned; NULL: no stale notes kept */
	struct objfs_store_resign *resign; /* owned; NULL: refused fetches not
					      sent again */
	const char *auth;            /* static: where credentials came from, never a value */
	struct objfs_list_limits lim;    /* set by objfs_store_init, defaults filled */
};

/*
 * Sets up the common part @s of a backend's store (zeroed by the caller):
 * @ops, @engine (borrowed), @chunk_size and the stale notes. 0 or -ENOMEM;
 * @s->ops is set either way, so the constructor frees @s with
 * objfs_store_free() on every path. A store built without it (a test's
 * fake) works but keeps no stale notes.
 */
int objfs_store_init(struct objfs_store *s, const struct objfs_store_ops *ops,
		     struct objfs_engine *engine, size_t chunk_size);

/*
 * Lists @path of @s page by page: ops->list_pages, or ops->list as one
 * page. The pages' entries are counted as they go (objfs_listent_bytes):
 * past s->lim.max_bytes the listing stops before the page that would pass
 * it, with -EIO and objfs_store_list_refused's warning. Whoever keeps the
 * pages may stop it at any page by returning -errno from @page: -ECANCELED
 * (nobody waits for the listing any more) comes back as it is.
 */
int objfs_store_list_pages(struct objfs_store *s, const char *path, objfs_list_page_fn page,
			   void *arg);

/* Sets @s's listing limits from @lim (NULL or 0 fields: the defaults). */
void objfs_store_set_limits(struct objfs_store *s, const struct objfs_list_limits *lim);

/* The deadline (objfs_now_ns() time) of a listing starting now. */
int64_t objfs_store_list_deadline(const struct objfs_store *s);

/*
 * The one warning of a listing of @path that went past a limit: @err is
 * -EFBIG (bytes), -E2BIG (entries), -EMLINK (pages), -ELOOP (a repeated S3
 * continuation token) or -ETIMEDOUT (list_timeout). Returns @err.
 */
int objfs_store_list_refused(const struct objfs_store *s, const char *path, int err);

/* One open object version, the context of objfs_store_fetch(). */
struct objfs_store_obj {
	struct objfs_store *store; /* borrowed */
	const char *path;          /* borrowed */
	const char *etag;          /* borrowed, "" when none */
	int64_t mtime;             /* with no ETag: the Last-Modified pinned, -1 none */
	int64_t size;
};

/*
 * Asynchronous ranged fetch of [off, off+len) of the object @ctx (a struct
 * objfs_store_obj, read only during this call: its ETag is copied and its
 * path hashed before this returns, so @ctx may go as soon as it does) into
 * @dst; calls done(arg, err)
 * once, on an engine thread (or at once on a set-up error). Matches
 * objfs_fetch_fn so the block cache can use it.
 */
void objfs_store_fetch(void *ctx, int64_t off, size_t len, char *dst,
		       void (*done)(void *arg, int err), void *arg);

/*
 * What a lookup, open or readdir reports for a list() or stat() error: 0,
 * -ENOENT, -ENOTDIR, -EACCES and -ENOMEM as they are, everything else
 * (refused, reset or timed-out connections, 5xx after the retries, an
 * unresolvable host, a garbled listing) -EIO, as reads do. Backends apply it
 * in their ops; their mount-time probes keep the precise error for the
 * message.
 */
int objfs_store_meta_errno(int err);

/* Frees a store made by a backend constructor (its stale notes, then
 * ops->free). Accepts NULL. */
void objfs_store_free(struct objfs_store *s);

/*
 * Whether a read of object @path through @s found it changed or gone since
 * its attributes were taken (-ESTALE: If-Match failed, another ETag or size;
 * -ENOENT), once: the note is cleared. objfs_inode_open() then fetches the
 * current version instead of pinning the stale one until attr_timeout.
 * Notes belong to @s: another store never sees them. A store without
 * objfs_store_init() answers 0.
 */
int objfs_store_take_stale(struct objfs_store *s, const char *path);

/*
 * HTTP(S) backend for @url (http:// or https://), listings bounded by @lim
 * (NULL: defaults). Probes the source with the
 * engine: a directory (nginx JSON or HTML index) or a single file, which is
 * then shown as a directory holding that file. On failure returns -errno and
 * writes a one-line reason to @err.
 */
int objfs_store_http_new(const char *url, struct objfs_engine *engine, size_t chunk_size,
			 const struct objfs_list_limits *lim, struct objfs_store **out, char *err,
			 size_t errlen);

/* What the mount's options say about S3; NULL / 0: not given. Borrowed. */
struct objfs_s3_cfg {
	const char *endpoint;  /* S3-compatible server; NULL: AWS or environment */
	const char *region;
	const char *profile;
	int path_style;
	int virtual_host;
	int no_sign;           /* anonymous requests */
};

/*
 * S3 backend for @url ("s3://bucket[/prefix]") with the options of @o,
 * the AWS environment and config files. Resolves credentials and probes the
 * bucket, so bad credentials, a wrong region or a missing bucket fail here
 * with a message in @err that names the fix.
 */
int objfs_store_s3_new(const char *url, const struct objfs_s3_cfg *o,
		       struct objfs_engine *engine, size_t chunk_size,
		       const struct objfs_list_limits *lim, struct objfs_store **out, char *err,
		       size_t errlen);

#endif
