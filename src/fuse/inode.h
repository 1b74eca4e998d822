/*
 * inode: the inode table and the metadata cache in front of the store.
 *
 * Every path the kernel knows has a node whose inode number stays the same
 * while the kernel knows it. Numbers are handed out in sequence and never
 * reused; a node is freed once the kernel has forgotten it (FORGET down to
 * nlookup 0) and nothing inside holds it (a child holds its parent, a
 * listing its entries, a thread its node while the lock is dropped), so a
 * re-lookup after that may get a new number (memory stays bounded by what
 * the kernel keeps, not by what was ever seen).
 *
 * File attributes come from the listing when it has them and from the
 * store's stat (HEAD) otherwise, and are revalidated after attr_ttl
 * seconds. A lookup in a directory not freshly listed asks the store for
 * that name alone when the backend can (S3: a HEAD and a one-key listing at
 * once), so opening a file of a million-key prefix costs two requests, not
 * a thousand pages; the directory is listed only for readdir. HTTP index
 * directories are listed, once at a time, and lookups wait for the listing.
 *
 * Listings stream: a listing is an append-only array of held nodes that
 * grows page by page while it is fetched; a directory handle (dirsnap)
 * holds the listing it was opened on, and entry i stays at offset i for
 * that handle's life, so a readdir continued at an offset resumes where it
 * was. opendir answers after the first page; a readdir past the entries
 * listed so far waits for the next page. A second opendir while a listing
 * is under way reads the same listing: a directory is never listed twice
 * at once. A name that is both an object and a directory shows once, as
 * the directory, even when the two come in different pages (see inode.c).
 * A listing is kept after its last handle is closed for list_ttl, to
 * answer lookups and the next opendir, unless it is larger than
 * OBJFS_LIST_KEEP_MAX entries and the store can look names up itself, or
 * the kernel has forgotten its directory, or list_ttl has passed and the
 * kernel forgets one of its entries. A listing nobody reads any more is
 * stopped at its next page when the store can look names up.
 *
 * Locking: one mutex guards the table, every node, every listing and every
 * handle's listing state; network calls are made without it. The _async
 * calls wait without a thread: a lookup, opendir or readdir that must wait
 * for a listing is parked on it and completed, through its callback, by
 * the thread that lists, once the page it needs has come or the listing
 * ended. So one slow listing (trickling at 1 byte/s) holds one FUSE
 * worker, not all of them, and reads of cached files go on.
 */
#ifndef OBJFS_INODE_H
#define OBJFS_INODE_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

struct objfs_inodes;
struct objfs_node;

#define OBJFS_ROOT_INO 1

struct objfs_attr {
	uint64_t ino;
	int is_dir;
	int64_t size;   /* -1 when unknown (HTML listing, not yet stat'ed) */
	int64_t mtime;  /* -1 when unknown */
	char etag[192];
};

/* @store is borrowed and must outlive the table. 0 or -ENOMEM. */
int objfs_inodes_new(struct objfs_store *store, double list_ttl, double attr_ttl,
		     struct objfs_inodes **out);
/* Frees every node. Accepts NULL. */
void objfs_inodes_free(struct objfs_inodes *t);

/*
 * Finds @name in directory @parent, listing it if needed, and fills @a with
 * fresh attributes (a file's size is always known on success). Adds one
 * lookup reference to the node. 0, -ENOENT, -ENOTDIR or -errno.
 */
int objfs_inode_lookup(struct objfs_inodes *t, uint64_t parent, const char *name,
		       struct objfs_attr *a);
/*
 * Completion of a parked lookup or opendir: @err and, on success, @a
 * (lookup) or @snap (opendir, owned by the callee: objfs_dirsnap_free).
 * Called once, without the table's lock, on the thread that listed.
 */
struct objfs_dirsnap;
typedef void (*objfs_parked_fn)(void *arg, int err, const struct objfs_attr *a,
				struct objfs_dirsnap *snap);

/*
 * objfs_inode_lookup, but when another thread is listing @parent now the
 * lookup is parked (@name copied) and -EINPROGRESS returned: @done(@arg,
 * ...) reports the result later. Any other return is the result itself
 * (@done is not called).
 */
int objfs_inode_lookup_async(struct objfs_inodes *t, uint64_t parent, const char *name,
			     struct objfs_attr *a, objfs_parked_fn done, void *arg);

/* Drops @n lookup references of @ino; at none left the node is freed once
 * nothing else holds it (and a directory's kept listing dropped). */
void objfs_inode_forget(struct objfs_inodes *t, uint64_t ino, uint64_t n);
/* Adds one lookup reference (readdirplus entries). */
void objfs_inode_ref(struct objfs_inodes *t, uint64_t ino);

/* Attributes of @ino, revalidated when older than attr_ttl. 0 or -errno. */
int objfs_inode_getattr(struct objfs_inodes *t, uint64_t ino, struct objfs_attr *a);

/*
 * An open file handle's claim on its inode's page cache. The kernel keeps
 * one page cache and one size per inode, so a node is one version of an
 * object while handles have it open: a handle pinned to version B
 * reading or mapping the pages of a handle still open on version A would
 * mix them (B's bytes read through A's handle, then through a mapping of
 * B's), and A's handles reading with B's size would end early.
 * Wherever another version of an open node's object is noticed (a
 * lookup, listing or open after attr_timeout; a getattr leaves the open
 * inode as it is) the name gets a new node (a new inode number) with the
 * new attributes, and the old node
 * keeps its version's until the kernel forgets it, never revalidated
 * again. The kernel finds the new inode at its next lookup of the name;
 * an open that reaches the old one answers -ESTALE, after which the
 * kernel looks the name up again and retries the open there (a reopen
 * through /proc/self/fd is not looked up again: it stays -ESTALE). Two
 * descriptions are one version when their ETags match, or with an ETag on
 * one side only their mtimes, and their sizes always (a listing gives an
 * mtime where a HEAD gives an ETag); a version with neither ETag nor mtime
 * cannot be told from another: such a file stays one node.
 */
struct objfs_open {
	struct objfs_node *node; /* held until objfs_inode_close() */
	int keep_cache;          /* the kernel's pages are of this version */
	int inval;               /* drops the pages: until objfs_inode_opened(), no
				    other open may keep them */
};

/*
 * Opens file @ino: revalidates its attributes when stale and fills @a with
 * the size and ETag the handle pins, and @o (see above; keep_cache when the
 * previous open saw the same ETag and size). A size that changed from the
 * one the kernel holds is -ESTALE (the kernel looks the name up again,
 * learns the size, and retries the open), and so is a new version while
 * the old one is open (above). Returns 0, -EISDIR, -ENOENT,
 * -ESTALE or -errno. *path receives the store path, allocated: the caller
 * frees it (NULL on error). Every 0 needs one objfs_inode_close(@o).
 */
int objfs_inode_open(struct objfs_inodes *t, uint64_t ino, struct objfs_attr *a,
		     char **path, struct objfs_open *o);

/* The kernel got the handle (its open dropped the pages, if it was to). */
void objfs_inode_opened(struct objfs_inodes *t, struct objfs_open *o);

/*
 * Ends a handle of objfs_inode_open(). @used: the kernel got the handle
 * (an open that failed after objfs_inode_open, or never reached the kernel,
 * did not make it drop its pages: the next open must not keep them).
 */
void objfs_inode_close(struct objfs_inodes *t, struct objfs_open *o, int used);

/*
 * A directory handle for readdir: the listing it reads, at stable offsets
 * (entry i stays entry i). self and parent are the inode numbers of "."
 * and "..".
 */
struct objfs_dirsnap {
	uint64_t self, parent;
	struct objfs_inodes *t;   /* borrowed */
	struct objfs_dirlist *l;  /* one reference */
};

/* Listings larger than this are not kept once unread when the store can
 * look names up on its own (see above): a million-key listing would
 * otherwise hold a million nodes for list_ttl. */
#define OBJFS_LIST_KEEP_MAX 65536

/*
 * Opens directory @ino for readdir: on its fresh listing, the one under way,
 * or a new one that this thread then fetches (every page: the call returns
 * when the listing has ended). Caller frees *@out with objfs_dirsnap_free.
 * 0, -ENOTDIR or -errno (the listing failed).
 */
int objfs_inode_opendir(struct objfs_inodes *t, uint64_t ino, struct objfs_dirsnap **out);
/*
 * objfs_inode_opendir, parked: when the listing has no page yet the opendir
 * is parked and -EINPROGRESS returned, and @done(@arg, err, NULL, snap)
 * reports it once the first page has come (or the listing failed). A
 * listing this call starts is fetched by this thread before it returns.
 */
int objfs_inode_opendir_async(struct objfs_inodes *t, uint64_t ino, struct objfs_dirsnap **out,
			      objfs_parked_fn done, void *arg);
/* Closes a handle. Accepts NULL. */
void objfs_dirsnap_free(struct objfs_dirsnap *d);

/* A parked readdir's wake-up: the entry it waits for has come, or the
 * listing ended. Called once, without the table's lock, on the thread that
 * lists. */
typedef void (*objfs_wake_fn)(void *arg);

/*
 * Entry @i of handle @d: its name into @name (NAME_MAX + 1 bytes) and its
 * attributes into @a; with @ref, one lookup reference is added to its node
 * (readdirplus: objfs_inode_forget(ino, 1) gives it back when the entry is
 * not sent after all). Returns 1; 0 past the last entry of a listing that
 * ended; -errno when the listing failed before entry @i; -EINPROGRESS when
 * entry @i is not listed yet, and then, if @wake is set, @wake(@arg) is
 * called once when it is or the listing ends.
 */
int objfs_dirsnap_entry(struct objfs_dirsnap *d, size_t i, int ref, char *name,
			struct objfs_attr *a, objfs_wake_fn wake, void *arg);

/* objfs_dirsnap_read's consumer of one entry: 0 took it, non-zero did not
 * (no room) and wants no more. Called with the table's lock held: it must
 * not call into the table. */
typedef int (*objfs_dirent_fn)(void *arg, const char *name, const struct objfs_attr *a);

/*
 * Entries @i, @i+1, ... of handle @d, in order, to @fill until it refuses
 * one or no further entry is listed yet: a readdir's whole reply in one
 * call (the lock is taken once per DIRSNAP_HOLD_MAX entries, not once an
 * entry). With @ref, each entry @fill took gets one lookup reference
 * (readdirplus); a refused one gets none. Returns how many @fill took
 * (> 0); -ENOSPC when it refused entry @i itself; otherwise, with none
 * taken, as objfs_dirsnap_entry: 0 at the end, -errno, or -EINPROGRESS
 * (parked with @wake(@warg) when @wake is set).
 */
int objfs_dirsnap_read(struct objfs_dirsnap *d, size_t i, int ref, objfs_dirent_fn fill,
		       void *arg, objfs_wake_fn wake, void *warg);

/* Nodes alive now (the root included): for tests and the counters. */
size_t objfs_inodes_live(struct objfs_inodes *t);

#endif
