/*
 * inode: the inode table and the metadata cache in front of the store.
 *
 * Every path the kernel has seen gets a node with an inode number that stays
 * the same for the life of the mount (nodes are never reused or freed before
 * unmount, so a node pointer is valid until objfs_inodes_free). Directories
 * cache their listing for list_ttl seconds; a name missing from a fresh
 * listing is a cached negative answer. File attributes come from the listing
 * when it has them and from the store's stat (HEAD) otherwise, and are
 * revalidated after attr_ttl seconds.
 *
 * A lookup in a directory not freshly listed asks the store for that name
 * alone when the backend can (S3: a HEAD and a one-key listing at once),
 * so opening a file of a million-key prefix costs two requests, not a
 * thousand pages; the directory is listed only for readdir. HTTP indexes
 * have no such lookup: their directories are listed, once at a time.
 *
 * Locking: one mutex guards the table and every node's mutable fields;
 * network calls are made without it. A directory is listed by one thread at
 * a time (single flight); others wait for that listing. The _async calls
 * wait without a thread: a lookup or opendir of a directory another thread
 * is listing is parked on the directory and completed, through its
 * callback, by the thread that listed it, once the listing ends. So one
 * slow listing holds one FUSE worker, not all of them (issue 19: a listing
 * trickling at 1 byte/s held all 16 and reads of cached files hung).
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

/* Drops @n lookup references of @ino. */
void objfs_inode_forget(struct objfs_inodes *t, uint64_t ino, uint64_t n);
/* Adds one lookup reference (readdirplus entries). */
void objfs_inode_ref(struct objfs_inodes *t, uint64_t ino);

/* Attributes of @ino, revalidated when older than attr_ttl. 0 or -errno. */
int objfs_inode_getattr(struct objfs_inodes *t, uint64_t ino, struct objfs_attr *a);

/*
 * Opens file @ino: revalidates its attributes when stale and fills @a with
 * the size and ETag the handle pins. *keep_cache is 1 when the previous open
 * saw the same ETag and size, so the kernel page cache can be kept.
 * Returns 0, -EISDIR, -ENOENT or -errno. *path receives the store path,
 * allocated: the caller frees it (NULL on error).
 */
int objfs_inode_open(struct objfs_inodes *t, uint64_t ino, struct objfs_attr *a,
		     int *keep_cache, char **path);

/* A directory snapshot for readdir: stable offsets across calls. */
struct objfs_dirsnap {
	size_t n;
	uint64_t self, parent;
	struct objfs_node **ents; /* borrowed nodes */
};

/* Lists @ino (when stale) and snapshots its entries. Caller frees with
 * objfs_dirsnap_free. 0, -ENOTDIR or -errno. */
int objfs_inode_opendir(struct objfs_inodes *t, uint64_t ino, struct objfs_dirsnap **out);
/* objfs_inode_opendir, parked like objfs_inode_lookup_async. */
int objfs_inode_opendir_async(struct objfs_inodes *t, uint64_t ino, struct objfs_dirsnap **out,
			      objfs_parked_fn done, void *arg);
void objfs_dirsnap_free(struct objfs_dirsnap *d);
/* Name and current attributes of snapshot entry @i. */
const char *objfs_dirsnap_entry(struct objfs_inodes *t, struct objfs_dirsnap *d, size_t i,
				struct objfs_attr *a);

#endif
