/*
 * inode: see inode.h for the design and the locking rule.
 *
 * Tables. Nodes are found by inode number and by (parent, name), each
 * through a chained hash table that grows, so a lookup in a directory of a
 * million entries costs O(1), and a freed node leaves no hole (the dense
 * array by number this replaced kept 8 bytes for every node ever made).
 *
 * References. n->nlookup counts the kernel's lookups, n->refs the holds
 * from inside: each child on its parent (node_path walks up), each listing
 * on its directory and on every entry it holds, a thread on a node while
 * the lock is dropped, the table on the root. A node with neither is freed
 * at once (node_release) and its parent loses a hold, up the tree in a loop
 * (no recursion: trees 20,000 deep exist). A kept listing holds its
 * directory's children, which hold the directory: cache_settle breaks that
 * cycle by dropping the listing when the kernel forgets the directory or an
 * entry of a listing past list_ttl, when it failed, or when it is too large
 * to keep (inode.h).
 *
 * Listings. A struct objfs_dirlist is one listing of one directory: an
 * array of held nodes, appended to page by page by the thread that lists
 * (list_run, called by the opendir or lookup that found no fresh listing)
 * and never reordered, so an entry's index is its readdir offset for every
 * handle on that listing. The directory's current listing is dir->cur;
 * handles keep theirs, even after a newer one replaced it. A node listed
 * by a listing carries its gen in list_gen: "listed here" is one compare,
 * and a fresh listing's negative answers need no other index.
 *
 * Object and directory of one name. S3 lists keys in byte order with each
 * CommonPrefix in its place, so the prefix "a/" of an object "a" may come
 * pages after it, with "a-1" and "a.txt" in between. An object whose key
 * "NAME/" sorts after the page's upto (the store's largest key so far) is
 * held back in l->pending until a page reaches past "NAME/" or the listing
 * ends, and given out then unless its directory came. Held-back names are
 * prefixes of upto, so at most a few wait at a time, and the first page of
 * a flat prefix gives out all of its objects but the last. A server that
 * lists out of order may still send a directory after its object was
 * given out: that slot then holds the directory (readdir from there on
 * shows it once, as the directory), with a log line.
 *
 * Compact entries. A node is one allocation with its name inline; files'
 * ETags and directories' listings share a union. A million listed keys
 * cost one node each (128 bytes with an 8-byte name, plus the ETag), two
 * hash slots and one listing slot (see docs/benchmarks.md for the measured
 * bytes per entry). Memory freed in bulk is handed back to the system
 * (malloc_trim), so the daemon shrinks when the kernel drops its caches.
 */
#include "config.h"

#include <errno.h>
#include <malloc.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

#include "inode.h"
#include "clock.h"
#include "hash.h"
#include "log.h"

/* Freed nodes between two malloc_trim calls. */
#define TRIM_AFTER 65536

/* Entries objfs_dirsnap_read hands out under one hold of the lock. */
#define DIRSNAP_HOLD_MAX 256

/* What a parked request waits for (see inode.h). */
enum park_kind {
	P_LOOKUP,  /* the listing's end, then the lookup of name */
	P_OPENDIR, /* its first page */
	P_READDIR, /* entry index */
};

struct parked {
	struct parked *next;
	enum park_kind kind;
	size_t index;         /* P_READDIR */
	objfs_parked_fn done; /* P_LOOKUP, P_OPENDIR */
	objfs_wake_fn wake;   /* P_READDIR */
	void *arg;
	char name[];          /* P_LOOKUP: the name asked for */
};

enum list_state { L_LISTING, L_DONE, L_FAILED };

struct objfs_dirlist {
	struct objfs_node *dir;   /* held */
	struct objfs_node **ents; /* held, in the order given out; append-only */
	size_t n, cap;
	unsigned refs;            /* dir->cur's, each handle's, the lister's, each
				     thread waiting for it */
	unsigned handles;         /* handles open on it */
	unsigned pages;           /* pages merged so far */
	size_t hidden;            /* objects hidden by a directory of their name */
	char *hidden_names;       /* the first HIDDEN_NAMED of them, quoted, for the log */
	uint32_t gen;             /* what its nodes carry in list_gen */
	enum list_state state;
	int err;                  /* L_FAILED: why */
	int cancel;               /* nobody reads it: stop at the next page
				     unless somebody does by then */
	double done_at;           /* monotonic time it ended */
	struct objfs_listing pending; /* objects held back: their directory may
					 still come in a later page */
	struct parked *parked;    /* waiting for a page or the end */
	struct objfs_dirlist *prev, *next; /* every listing of the table */
};

struct objfs_node {
	struct objfs_node *hnext;  /* (parent, name) chain; only while hashed */
	uint32_t hash;             /* name_hash(parent's ino, name): immutable;
				      next to hnext, so that walking a chain
				      and growing the table read one cache
				      line of a node, not its name */
	uint32_t list_gen;         /* gen of the last listing that gave it out */
	struct objfs_node *inext;  /* inode number chain */
	struct objfs_node *parent; /* held; NULL for the root */
	union {
		struct {                   /* files */
			char *etag;        /* NULL: none known (most HTTP listings) */
			char *open_etag;   /* version seen by the last open
					      (keep_cache): its ETag, or
					      "@<mtime>" with none; NULL none */
		};
		struct objfs_dirlist *cur; /* directories: the latest listing */
	};
	uint64_t ino;
	uint64_t nlookup;          /* the kernel's references */
	int64_t size, mtime;
	int64_t open_size, open_mtime; /* files: open_etag's size and mtime */
	int64_t told;              /* files: the size the kernel was last given, -1 none */
	uint32_t open_n;           /* files: open handles of the open_etag version
				      (a node is one version while it has any:
				      split_node) */
	uint32_t open_inval;       /* files: of those, opens dropping the kernel's pages
				      that the kernel has not got yet (objfs_inode_opened) */
	double attr_at;            /* monotonic time attrs were fetched, 0 never */
	double found_at;           /* monotonic time a lookup of its own (no
				      listing) found it, 0 never: direct_lookup */
	uint32_t refs;             /* holds from inside (see above) */
	uint8_t is_dir;            /* immutable: a type change makes a new node */
	uint8_t hashed;            /* findable by (parent, name): a newer node of
				      the same name unhashes an old one (a file
				      node unhashed keeps its attributes) */
	char name[];               /* immutable; the store path is built from
				      the names up to the root (node_path): a
				      node holding its full path cost
				      O(depth^2) in a deep tree, 825 MiB at
				      depth 20,000 */
};

struct objfs_inodes {
	struct objfs_store *store;
	double list_ttl, attr_ttl;
	pthread_mutex_t lock;
	pthread_cond_t listed;       /* a listing got a page or ended */
	struct objfs_node *root;
	struct objfs_node **hash;    /* by (parent, name) */
	size_t nhash, nbuckets;
	struct objfs_node **itab;    /* by inode number; t->live entries */
	size_t nitab;
	size_t live;
	uint64_t next_ino;
	uint32_t next_gen;
	size_t freed;                /* since the last malloc_trim */
	struct objfs_dirlist *lists;
};

static uint32_t name_hash(uint64_t parent, const char *name)
{
	return (uint32_t)objfs_hash_fold(objfs_fnv1a(OBJFS_FNV_OFFSET ^ parent, name), 29);
}

/* The node of (@parent, @name), whose name_hash is @h, or NULL. Lock held. */
static struct objfs_node *hash_find_h(struct objfs_inodes *t, uint64_t parent, const char *name,
				      uint32_t h)
{
	struct objfs_node *n = t->hash[h & (t->nbuckets - 1)];

	for (; n; n = n->hnext)
		if (n->hash == h && n->parent->ino == parent && strcmp(n->name, name) == 0)
			return n;
	return NULL;
}

static struct objfs_node *hash_find(struct objfs_inodes *t, uint64_t parent, const char *name)
{
	return hash_find_h(t, parent, name, name_hash(parent, name));
}

#define NODE_HASH(n) ((size_t)(n)->hash)
#define NODE_IHASH(n) ((size_t)(n)->ino)

static void hash_remove(struct objfs_inodes *t, struct objfs_node *n)
{
	struct objfs_node **pp;

	if (!n->hashed)
		return;
	for (pp = &t->hash[NODE_HASH(n) & (t->nbuckets - 1)]; *pp; pp = &(*pp)->hnext) {
		if (*pp == n) {
			*pp = n->hnext;
			n->hnext = NULL;
			n->hashed = 0;
			t->nhash--;
			return;
		}
	}
}

static struct objfs_node *node_get(struct objfs_inodes *t, uint64_t ino)
{
	struct objfs_node *n = ino ? t->itab[ino & (t->nitab - 1)] : NULL;

	while (n && n->ino != ino)
		n = n->inext;
	return n;
}

/*
 * Creates a node under @parent (NULL for the root), hashed (@h: its
 * name_hash), with no reference: the caller gives it one, or
 * node_release()s it. Lock held. NULL when out of memory.
 */
static struct objfs_node *node_new_h(struct objfs_inodes *t, struct objfs_node *parent,
				     const char *name, int is_dir, uint32_t h)
{
	size_t len = strlen(name);
	struct objfs_node *n;

	/* A table that cannot grow stays correct, with longer chains. */
	if (t->live >= t->nitab)
		(void)OBJFS_HASH_GROW(&t->itab, &t->nitab, struct objfs_node, inext, NODE_IHASH);
	if (parent && t->nhash >= t->nbuckets)
		(void)OBJFS_HASH_GROW(&t->hash, &t->nbuckets, struct objfs_node, hnext, NODE_HASH);
	n = calloc(1, offsetof(struct objfs_node, name) + len + 1);
	if (!n)
		return NULL;
	memcpy(n->name, name, len + 1);
	n->parent = parent;
	n->hash = h;
	n->is_dir = is_dir ? 1 : 0;
	n->size = -1;
	n->told = -1;
	n->mtime = -1;
	n->ino = t->next_ino++;
	n->inext = t->itab[n->ino & (t->nitab - 1)];
	t->itab[n->ino & (t->nitab - 1)] = n;
	t->live++;
	if (parent) {
		size_t b = NODE_HASH(n) & (t->nbuckets - 1);

		parent->refs++;
		n->hnext = t->hash[b];
		t->hash[b] = n;
		n->hashed = 1;
		t->nhash++;
	}
	return n;
}

static struct objfs_node *node_new(struct objfs_inodes *t, struct objfs_node *parent,
				   const char *name, int is_dir)
{
	return node_new_h(t, parent, name, is_dir, parent ? name_hash(parent->ino, name) : 0);
}

/* Unlinks and frees @n (no references left, no listing). Lock held. */
static void node_free(struct objfs_inodes *t, struct objfs_node *n)
{
	struct objfs_node **pp = &t->itab[n->ino & (t->nitab - 1)];

	hash_remove(t, n);
	while (*pp != n)
		pp = &(*pp)->inext;
	*pp = n->inext;
	if (!n->is_dir) {
		free(n->etag);
		free(n->open_etag);
	}
	free(n);
	t->live--;
	t->freed++;
}

/* Frees @n if nothing holds it any more, then its parent likewise, up the
 * tree. Lock held. */
static void node_release(struct objfs_inodes *t, struct objfs_node *n)
{
	while (n && n != t->root && !n->refs && !n->nlookup) {
		struct objfs_node *p = n->parent;

		node_free(t, n);
		n = p;
		if (n)
			n->refs--; /* the child's hold */
	}
}

/* Drops one hold of @n. Lock held. */
static void node_put(struct objfs_inodes *t, struct objfs_node *n)
{
	n->refs--;
	node_release(t, n);
}

/* Drops one reference to listing @l; the last frees it and releases its
 * entries and directory. Lock held. */
static void list_put(struct objfs_inodes *t, struct objfs_dirlist *l)
{
	if (--l->refs)
		return;
	if (l->prev)
		l->prev->next = l->next;
	else
		t->lists = l->next;
	if (l->next)
		l->next->prev = l->prev;
	/* the children's parent is l->dir, held by l until the end: the
	 * cascade up from a freed child stops there */
	for (size_t i = 0; i < l->n; i++)
		node_put(t, l->ents[i]);
	free(l->ents);
	free(l->hidden_names);
	objfs_listing_clear(&l->pending);
	node_put(t, l->dir);
	free(l);
}

/* Names kept of the objects a listing hides: the log line says which. */
#define HIDDEN_NAMED 3

/* Object @name of listing @l is hidden by a directory of its name. */
static void note_hidden(struct objfs_dirlist *l, const char *name)
{
	size_t have = l->hidden_names ? strlen(l->hidden_names) : 0;
	char *p;

	if (l->hidden++ >= HIDDEN_NAMED)
		return;
	p = realloc(l->hidden_names, have + strlen(name) + 5);
	if (!p)
		return; /* the count still says how many */
	sprintf(p + have, "%s'%s'", have ? ", " : "", name);
	l->hidden_names = p;
}

static int list_fresh(const struct objfs_inodes *t, const struct objfs_dirlist *l);

/*
 * Drops @d's kept listing when nothing needs it any more, or asks the one
 * under way to stop when nobody reads it (see inode.h). Called whenever one
 * of the conditions may have changed. Lock held.
 */
static void cache_settle(struct objfs_inodes *t, struct objfs_node *d)
{
	struct objfs_dirlist *l = d->cur;
	int forgotten = d != t->root && !d->nlookup;

	if (!l || l->handles || l->parked)
		return;
	if (l->state == L_LISTING) {
		if (t->store->ops->lookup || forgotten)
			l->cancel = 1; /* acted upon at the next page: page_cb */
		return;
	}
	if (l->state == L_FAILED || forgotten || !list_fresh(t, l) ||
	    (t->store->ops->lookup && l->n > OBJFS_LIST_KEEP_MAX)) {
		d->cur = NULL;
		list_put(t, l);
	}
}

int objfs_inodes_new(struct objfs_store *store, double list_ttl, double attr_ttl,
		     struct objfs_inodes **out)
{
	struct objfs_inodes *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	t->store = store;
	t->list_ttl = list_ttl;
	t->attr_ttl = attr_ttl;
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->listed, NULL);
	t->nbuckets = t->nitab = 1024;
	t->hash = calloc(t->nbuckets, sizeof(*t->hash));
	t->itab = calloc(t->nitab, sizeof(*t->itab));
	t->next_ino = OBJFS_ROOT_INO;
	t->next_gen = 1;
	if (!t->hash || !t->itab || !(t->root = node_new(t, NULL, "", 1))) {
		objfs_inodes_free(t);
		return -ENOMEM;
	}
	t->root->refs = 1; /* the table's */
	t->root->nlookup = 1;
	*out = t;
	return 0;
}

void objfs_inodes_free(struct objfs_inodes *t)
{
	if (!t)
		return;
	while (t->lists) {
		struct objfs_dirlist *l = t->lists;

		t->lists = l->next;
		while (l->parked) { /* unmounted mid-listing: nobody to answer */
			struct parked *p = l->parked;

			l->parked = p->next;
			free(p);
		}
		free(l->ents);
		free(l->hidden_names);
		objfs_listing_clear(&l->pending);
		free(l);
	}
	for (size_t i = 0; t->itab && i < t->nitab; i++) {
		while (t->itab[i]) {
			struct objfs_node *n = t->itab[i];

			t->itab[i] = n->inext;
			if (!n->is_dir) {
				free(n->etag);
				free(n->open_etag);
			}
			free(n);
		}
	}
	free(t->itab);
	free(t->hash);
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->listed);
	free(t);
}

size_t objfs_inodes_live(struct objfs_inodes *t)
{
	size_t n;

	pthread_mutex_lock(&t->lock);
	n = t->live;
	pthread_mutex_unlock(&t->lock);
	return n;
}

/* Whether enough was freed to hand memory back; resets the count. Lock held. */
static int trim_due(struct objfs_inodes *t)
{
	if (t->freed < TRIM_AFTER)
		return 0;
	t->freed = 0;
	return 1;
}

/*
 * The store path of @n ("a/b/c"; "" for the root), built from the names up
 * to the root. Allocated, the caller frees; NULL when out of memory. Lock
 * held (names and parents are immutable, but nodes must stay alive).
 */
static char *node_path(const struct objfs_node *n)
{
	size_t len = 0, at;
	char *p;

	for (const struct objfs_node *m = n; m->parent; m = m->parent)
		len += strlen(m->name) + 1;
	p = malloc(len ? len : 1);
	if (!p)
		return NULL;
	at = len ? len - 1 : 0;
	p[at] = '\0';
	for (const struct objfs_node *m = n; m->parent; m = m->parent) {
		size_t k = strlen(m->name);

		at -= k;
		memcpy(p + at, m->name, k);
		if (at)
			p[--at] = '/';
	}
	return p;
}

/* Sets *@dst to a copy of @v ("" or NULL: none). Out of memory, none too:
 * an unknown ETag only costs a HEAD at the next open. */
static void set_str(char **dst, const char *v)
{
	if (*dst && v && strcmp(*dst, v) == 0)
		return;
	free(*dst);
	*dst = v && *v ? strdup(v) : NULL;
}

static void attr_fill(const struct objfs_node *n, struct objfs_attr *a)
{
	const char *etag = !n->is_dir && n->etag ? n->etag : "";
	size_t len = strlen(etag);

	if (len >= sizeof(a->etag))
		len = sizeof(a->etag) - 1;
	a->ino = n->ino;
	a->is_dir = n->is_dir;
	a->size = n->size;
	a->mtime = n->mtime;
	memcpy(a->etag, etag, len);
	a->etag[len] = '\0';
}

/* attr_fill() for a reply that gives the kernel @n's attributes: what
 * size it now holds (attr_to_stat: an unknown size is 0). */
static void attr_tell(struct objfs_node *n, struct objfs_attr *a)
{
	attr_fill(n, a);
	if (!n->is_dir)
		n->told = n->size > 0 ? n->size : 0;
}

/* ---- listings ---- */

/* Puts @m in @old's slot of listing @l, if @l gave @old out (its hold
 * moves to @m). Lock held. */
static void list_swap(struct objfs_inodes *t, struct objfs_dirlist *l, struct objfs_node *old,
		      struct objfs_node *m)
{
	size_t i;

	if (old->list_gen != l->gen)
		return;
	for (i = l->n; i > 0 && l->ents[i - 1] != old; i--)
		;
	if (!i)
		return; /* cannot be: list_gen is set when appended */
	m->refs++;
	m->list_gen = l->gen;
	old->list_gen = 0;
	l->ents[i - 1] = m;
	node_put(t, old);
}

/* Versions. */

/* The ETag @n's handles pinned, or NULL (none, or an "@<mtime>" pin). */
static const char *pinned_etag(const struct objfs_node *n)
{
	return n->open_etag && n->open_etag[0] != '@' ? n->open_etag : NULL;
}

/*
 * Whether attributes (@etag, "" or NULL for none; @size; @mtime, -1 none)
 * describe another version than the one @n's handles pinned (open_etag:
 * an ETag, or "@<mtime>" with none; open_size, open_mtime). Sources differ
 * in what they give (nginx's JSON index a size and an mtime, a HEAD an ETag
 * as well, S3 all three), so ETags are compared only when both sides have
 * one, else the mtimes when both are known; the size always. Lock held.
 */
static int version_differs(const struct objfs_node *n, const char *etag, int64_t size,
			   int64_t mtime)
{
	const char *pin = pinned_etag(n);

	if (size != n->open_size)
		return 1;
	if (etag && *etag && pin)
		return strcmp(etag, pin) != 0;
	return mtime >= 0 && n->open_mtime >= 0 && mtime != n->open_mtime;
}

/* Whether @n has open handles and the attributes are another version. */
static int other_version(const struct objfs_node *n, const char *etag, int64_t size,
			 int64_t mtime)
{
	return !n->is_dir && n->open_n && n->open_etag && version_differs(n, etag, size, mtime);
}

/*
 * Gives file node @n's name a new node, in @n's place in the hash and in
 * its directory's current listing, with @n's attributes as they are (the
 * caller gives it the new ones): the kernel then has one inode, one page
 * cache and one size per version. @n goes back to the version its open
 * handles pinned and is never revalidated again (an open of it is
 * -ESTALE). Lock held. The new node, or NULL (out of memory: nothing
 * changed).
 */
static struct objfs_node *split_node(struct objfs_inodes *t, struct objfs_node *n)
{
	struct objfs_node *d = n->parent, *m = node_new_h(t, d, n->name, 0, n->hash);

	if (!m)
		return NULL;
	m->size = n->size;
	m->mtime = n->mtime;
	m->attr_at = n->attr_at;
	m->found_at = n->found_at;
	set_str(&m->etag, n->etag);
	hash_remove(t, n);
	if (d->cur)
		list_swap(t, d->cur, n, m);
	n->size = n->open_size;
	n->mtime = n->open_mtime;
	set_str(&n->etag, pinned_etag(n));
	return m;
}

/*
 * The node that takes attributes (@etag, @size, @mtime) found for @n's
 * name: @n, or a new one when they are another version than @n's open
 * handles read (split_node; @n itself when that fails). Lock held.
 */
static struct objfs_node *version_node(struct objfs_inodes *t, struct objfs_node *n,
				       const char *etag, int64_t size, int64_t mtime)
{
	struct objfs_node *m;

	if (!other_version(n, etag, size, mtime) || !(m = split_node(t, n)))
		return n;
	objfs_info("'%s' changed while open: the new version gets a new inode", n->name);
	return m;
}

/*
 * Gives listing @l entry @e (a copy is made when its node is new): appended
 * unless listed already (a directory wins over an object of the same name).
 * File attributes come with it. Lock held. 0 or -ENOMEM.
 */
static int list_add(struct objfs_inodes *t, struct objfs_dirlist *l,
		    const struct objfs_listent *e, double now)
{
	uint32_t h = name_hash(l->dir->ino, e->name); /* once for the find and the new node */
	struct objfs_node *d = l->dir, *n = hash_find_h(t, d->ino, e->name, h), *m;

	if (n && n->list_gen == l->gen) {
		if (n->is_dir && !e->is_dir)
			note_hidden(l, e->name);
		if (n->is_dir || !e->is_dir)
			return 0; /* listed already */
		/* The directory of an object already given out (a server that
		 * lists out of order): its slot becomes the directory. */
		m = node_new_h(t, d, e->name, 1, h);
		if (!m)
			return -ENOMEM;
		hash_remove(t, n);
		list_swap(t, l, n, m);
		objfs_info("listing: '%s' came as a directory after it was listed as an object "
			   "(server out of order): shown as the directory from here on", e->name);
		return 0;
	}
	if (l->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 4;
		struct objfs_node **a = realloc(l->ents, nc * sizeof(*a));

		if (!a)
			return -ENOMEM;
		l->ents = a;
		l->cap = nc;
	}
	if (n && n->is_dir != e->is_dir) {
		hash_remove(t, n); /* a new node; the kernel may still hold the old */
		node_release(t, n);
		n = NULL;
	}
	if (n && e->size >= 0)
		n = version_node(t, n, e->etag, e->size, e->mtime >= 0 ? e->mtime : n->mtime);
	if (!n && !(n = node_new_h(t, d, e->name, e->is_dir, h)))
		return -ENOMEM;
	n->refs++;
	n->list_gen = l->gen;
	l->ents[l->n++] = n;
	if (e->mtime >= 0)
		n->mtime = e->mtime;
	if (!n->is_dir) {
		if (e->size >= 0) {
			if (e->etag)
				set_str(&n->etag, e->etag);
			else if (n->size != e->size)
				set_str(&n->etag, NULL);
			n->size = e->size;
			n->attr_at = now;
		} else if (n->attr_at && now - n->attr_at >= t->attr_ttl && !n->open_n) {
			n->size = -1; /* (an open node keeps its version's: revalidate asks) */
		}
	}
	return 0;
}

/* Whether key "@name/" sorts after @upto (byte order). */
static int dirkey_after(const char *name, const char *upto)
{
	size_t i = 0;

	for (; name[i] && name[i] == upto[i]; i++)
		;
	if (name[i])
		return (unsigned char)name[i] > (unsigned char)upto[i];
	return (unsigned char)upto[i] < '/'; /* upto ends here (NUL) or goes on below '/' */
}

/* Removes held-back entry @i of @l. Lock held. */
static void pending_remove(struct objfs_dirlist *l, size_t i)
{
	free(l->pending.ents[i].name);
	free(l->pending.ents[i].etag);
	memmove(&l->pending.ents[i], &l->pending.ents[i + 1],
		(l->pending.n - i - 1) * sizeof(l->pending.ents[0]));
	l->pending.n--;
}

/* Holds object @e back (a copy). Lock held. 0 or -ENOMEM. */
static int pending_add(struct objfs_dirlist *l, const struct objfs_listent *e)
{
	int rc = objfs_listing_add(&l->pending, e->name, strlen(e->name), 0, e->size, e->mtime);

	if (rc == -EEXIST || rc == -EINVAL)
		return 0; /* held back already; names were checked by the store */
	if (!rc && e->etag)
		rc = objfs_listing_set_etag(&l->pending, &l->pending.ents[l->pending.n - 1],
					    e->etag, strlen(e->etag));
	return rc;
}

/*
 * Merges one page into @l: its directories, then the held-back objects
 * that @upto has passed, then its objects, each given out unless a
 * directory of the same name may still come (see above). @upto NULL: nothing is held
 * back (a one-page listing, or a store that says nothing of its order).
 * Lock held. 0 or -ENOMEM.
 */
static int page_merge(struct objfs_inodes *t, struct objfs_dirlist *l,
		      const struct objfs_listing *pg, const char *upto, double now)
{
	int err = 0;

	for (size_t i = 0; !err && i < pg->n; i++) {
		const struct objfs_listent *e = &pg->ents[i];

		if (!e->is_dir)
			continue;
		for (size_t j = 0; j < l->pending.n; j++) {
			if (strcmp(l->pending.ents[j].name, e->name) == 0) {
				note_hidden(l, e->name);
				pending_remove(l, j);
				break;
			}
		}
		err = list_add(t, l, e, now);
	}
	/* held back from earlier pages, in order: before this page's own */
	for (size_t j = 0; !err && upto && j < l->pending.n;) {
		if (dirkey_after(l->pending.ents[j].name, upto)) {
			j++;
			continue;
		}
		err = list_add(t, l, &l->pending.ents[j], now);
		pending_remove(l, j);
	}
	for (size_t i = 0; !err && i < pg->n; i++) {
		const struct objfs_listent *e = &pg->ents[i];

		if (e->is_dir)
			continue;
		if (upto && dirkey_after(e->name, upto))
			err = pending_add(l, e);
		else
			err = list_add(t, l, e, now);
	}
	return err;
}

/* Moves the requests parked on @l that can be answered now (all of them
 * once it ended) to the returned list. Lock held. */
static struct parked *take_ready(struct objfs_dirlist *l)
{
	struct parked *ready = NULL, **pp = &l->parked;

	while (*pp) {
		struct parked *p = *pp;

		if (l->state != L_LISTING || p->kind == P_OPENDIR ||
		    (p->kind == P_READDIR && p->index < l->n)) {
			*pp = p->next;
			p->next = ready;
			ready = p;
		} else {
			pp = &p->next;
		}
	}
	return ready;
}

static int lookup_in(struct objfs_inodes *t, struct objfs_dirlist *l, const char *name,
		     struct objfs_attr *a);
static int snap_new(struct objfs_inodes *t, struct objfs_dirlist *l, struct objfs_dirsnap **out);

/*
 * Answers requests @p parked on @l, each under the lock and reported
 * without it. Lock not held.
 */
static void complete_parked(struct objfs_inodes *t, struct objfs_dirlist *l, struct parked *p)
{
	while (p) {
		struct parked *next = p->next;
		struct objfs_dirsnap *snap = NULL;
		struct objfs_attr a;
		int err;

		if (p->kind == P_READDIR) {
			p->wake(p->arg);
			free(p);
			p = next;
			continue;
		}
		memset(&a, 0, sizeof(a));
		pthread_mutex_lock(&t->lock);
		if (l->state == L_FAILED)
			err = l->err;
		else if (p->kind == P_OPENDIR)
			err = snap_new(t, l, &snap);
		else
			err = lookup_in(t, l, p->name, &a);
		pthread_mutex_unlock(&t->lock);
		p->done(p->arg, err, err ? NULL : &a, snap);
		free(p);
		p = next;
	}
}

struct page_ctx {
	struct objfs_inodes *t;
	struct objfs_dirlist *l;
};

/* One page of the listing under way (objfs_list_page_fn). */
static int page_cb(void *arg, const struct objfs_listing *pg, const char *upto)
{
	struct page_ctx *c = arg;
	struct objfs_inodes *t = c->t;
	struct objfs_dirlist *l = c->l;
	struct parked *ready;
	int err;

	pthread_mutex_lock(&t->lock);
	if (l->cancel && !l->parked && l->refs == 2) { /* the lister's and dir->cur's */
		/* Nobody reads it (`ls -f | head` gone): not kept, so stop. A
		 * new opendir from now on starts a listing of its own. */
		if (l->dir->cur == l) {
			l->dir->cur = NULL;
			list_put(t, l);
		}
		pthread_mutex_unlock(&t->lock);
		return -ECANCELED;
	}
	l->cancel = 0;
	err = page_merge(t, l, pg, upto, objfs_now_s());
	l->pages++;
	ready = take_ready(l);
	pthread_cond_broadcast(&t->listed);
	pthread_mutex_unlock(&t->lock);
	complete_parked(t, l, ready);
	return err;
}

/*
 * A new listing of @d, made its current one (a previous one is dropped;
 * handles keep theirs): the caller lists it with list_run and ends with
 * list_finish. Lock held. NULL when out of memory.
 */
static struct objfs_dirlist *list_start(struct objfs_inodes *t, struct objfs_node *d)
{
	struct objfs_dirlist *l = calloc(1, sizeof(*l)), *old = d->cur;

	if (!l)
		return NULL;
	l->dir = d;
	d->refs++;
	l->refs = 2; /* the lister's and d->cur's */
	l->gen = t->next_gen++;
	if (!t->next_gen)
		t->next_gen = 1; /* 0: listed nowhere */
	l->state = L_LISTING;
	l->next = t->lists;
	if (t->lists)
		t->lists->prev = l;
	t->lists = l;
	d->cur = l;
	if (old)
		list_put(t, old);
	return l;
}

/*
 * Fetches listing @l, every page merged as it comes and the requests it
 * can answer then answered. Lock held on entry and exit (dropped while
 * listing). The requests still parked at the end are moved to *@done for
 * list_finish. Returns the listing's result.
 */
static int list_run(struct objfs_inodes *t, struct objfs_dirlist *l, struct parked **done)
{
	struct page_ctx c = { t, l };
	char *path = node_path(l->dir);
	int err = -ENOMEM;

	if (path) {
		pthread_mutex_unlock(&t->lock);
		err = objfs_store_list_pages(t->store, path, page_cb, &c);
		pthread_mutex_lock(&t->lock);
	}
	/* the end: every object held back is given out */
	for (size_t j = 0; !err && j < l->pending.n; j++)
		err = list_add(t, l, &l->pending.ents[j], objfs_now_s());
	objfs_listing_clear(&l->pending);
	l->state = err ? L_FAILED : L_DONE;
	l->err = err;
	l->done_at = objfs_now_s();
	if (err && l->dir->cur == l) {
		/* a failure is not remembered: the next request lists again */
		l->dir->cur = NULL;
		list_put(t, l);
	}
	*done = take_ready(l);
	pthread_cond_broadcast(&t->listed);
	if (err && err != -ECANCELED)
		objfs_info("listing '/%s' failed: %s", path ? path : "?", strerror(-err));
	if (!err && l->hidden)
		objfs_warn("listing '/%s': %zu object(s) not shown, each hidden by a directory of "
			   "the same name: %s%s", path, l->hidden,
			   l->hidden_names ? l->hidden_names : "?",
			   l->hidden > HIDDEN_NAMED ? ", ..." : "");
	free(l->hidden_names); /* said: no longer needed */
	l->hidden_names = NULL;
	free(path);
	return err;
}

/* After list_run: answers @p, settles the cache and drops the lister's
 * reference. Lock not held. */
static void list_finish(struct objfs_inodes *t, struct objfs_dirlist *l, struct parked *p)
{
	int trim;

	complete_parked(t, l, p);
	pthread_mutex_lock(&t->lock);
	if (l->dir->cur == l)
		cache_settle(t, l->dir);
	list_put(t, l);
	trim = trim_due(t);
	pthread_mutex_unlock(&t->lock);
	if (trim)
		malloc_trim(0);
}

/* Parks a request on listing @l (in progress). Lock held. -EINPROGRESS or
 * -ENOMEM. */
static int park(struct objfs_dirlist *l, enum park_kind kind, const char *name, size_t index,
		objfs_parked_fn done, objfs_wake_fn wake, void *arg)
{
	size_t len = name ? strlen(name) : 0;
	struct parked *p = malloc(sizeof(*p) + len + 1);

	if (!p)
		return -ENOMEM;
	p->kind = kind;
	p->index = index;
	p->done = done;
	p->wake = wake;
	p->arg = arg;
	memcpy(p->name, name ? name : "", len + 1);
	p->next = l->parked;
	l->parked = p;
	return -EINPROGRESS;
}

/* Waits, holding @l, until it got a page (@first) or ended. Lock held. */
static void list_wait(struct objfs_inodes *t, struct objfs_dirlist *l, int first)
{
	l->refs++;
	while (l->state == L_LISTING && !(first && l->pages))
		pthread_cond_wait(&t->listed, &t->lock);
}

/* Whether @l answers for its directory's names: ended well, within list_ttl. */
static int list_fresh(const struct objfs_inodes *t, const struct objfs_dirlist *l)
{
	return l && l->state == L_DONE && objfs_now_s() - l->done_at < t->list_ttl;
}

/* ---- lookups ---- */

/* Stats file @n when its attributes are unknown or older than attr_ttl.
 * Lock held on entry and exit; the caller holds @n. */
static int revalidate(struct objfs_inodes *t, struct objfs_node *n, int force, int split)
{
	struct objfs_stat st;
	char *path;
	int err;

	if (n->is_dir || !n->hashed)
		return 0; /* an old version's node keeps its attributes (split_node) */
	if (!force && n->size >= 0 && objfs_now_s() - n->attr_at < t->attr_ttl)
		return 0;
	path = node_path(n);
	if (!path)
		return -ENOMEM;
	pthread_mutex_unlock(&t->lock);
	err = t->store->ops->stat(t->store, path, &st);
	free(path);
	pthread_mutex_lock(&t->lock);
	if (!n->hashed)
		return 0; /* split meanwhile: it keeps its version */
	if (err)
		return err;
	if (st.is_dir)
		return -EIO; /* became a directory: the parent's next listing sorts it out */
	if (other_version(n, st.etag, st.size, st.mtime >= 0 ? st.mtime : n->mtime)) {
		/* A new version while open: a new node takes it, @n keeps its
		 * own. Not for a getattr (@split 0): nothing would hold the new
		 * node; the name's next lookup finds the version again. */
		if (!split)
			return 0;
		n = version_node(t, n, st.etag, st.size, st.mtime >= 0 ? st.mtime : n->mtime);
	}
	n->size = st.size;
	if (st.mtime >= 0)
		n->mtime = st.mtime;
	set_str(&n->etag, st.etag);
	n->attr_at = objfs_now_s();
	return 0;
}

/* The lookup of @name in listing @l (ended, or under way and holding it).
 * Lock held (revalidate may drop it for a while). */
static int lookup_in(struct objfs_inodes *t, struct objfs_dirlist *l, const char *name,
		     struct objfs_attr *a)
{
	uint64_t dir = l->dir->ino; /* @l is not held: not used once the lock was dropped */
	struct objfs_node *n = hash_find(t, dir, name);
	int err, tries = 0;

	if (!n || n->list_gen != l->gen)
		return -ENOENT;
	for (;;) {
		n->refs++;
		err = revalidate(t, n, 0, 1);
		if (err || n->hashed || ++tries == 4) {
			if (!err) {
				n->nlookup++;
				attr_tell(n, a);
			}
			node_put(t, n);
			return err;
		}
		/* split meanwhile (a new version while open): the name's node
		 * is the new one */
		node_put(t, n);
		n = hash_find(t, dir, name);
		if (!n)
			return -ENOENT;
	}
}

/*
 * The lookup of @name in @d by the store's own lookup (a HEAD and a
 * one-key listing on S3), for a directory not listed, listed too long ago
 * or being listed: a million-key prefix is never listed to open one file.
 * A hit stays good for attr_timeout (files) or list_ttl
 * (directories). Lock held (dropped while the store is asked); the caller
 * holds @d.
 */
static int direct_lookup(struct objfs_inodes *t, struct objfs_node *d, const char *name,
			 struct objfs_attr *a)
{
	struct objfs_node *n = hash_find(t, d->ino, name);
	struct objfs_stat st;
	double now = objfs_now_s();
	char *dpath, *path;
	int err;

	if (n && n->found_at && now - n->found_at < (n->is_dir ? t->list_ttl : t->attr_ttl))
		goto found;
	dpath = node_path(d);
	if (!dpath)
		return -ENOMEM;
	if (asprintf(&path, "%s%s%s", dpath, *dpath ? "/" : "", name) < 0)
		path = NULL;
	free(dpath);
	if (!path)
		return -ENOMEM;
	pthread_mutex_unlock(&t->lock);
	err = t->store->ops->lookup(t->store, path, &st);
	free(path);
	pthread_mutex_lock(&t->lock);
	n = hash_find(t, d->ino, name); /* the table may have changed meanwhile */
	if (err) {
		if (n)
			n->found_at = 0;
		return err;
	}
	if (n && n->is_dir != st.is_dir) {
		hash_remove(t, n); /* a new node; the kernel may still hold the old */
		node_release(t, n);
		n = NULL;
	}
	if (n && !st.is_dir)
		n = version_node(t, n, st.etag, st.size, st.mtime >= 0 ? st.mtime : n->mtime);
	if (!n)
		n = node_new(t, d, name, st.is_dir);
	if (!n)
		return -ENOMEM;
	n->found_at = objfs_now_s();
	if (!n->is_dir) {
		n->size = st.size;
		if (st.mtime >= 0)
			n->mtime = st.mtime;
		set_str(&n->etag, st.etag);
		n->attr_at = n->found_at;
	}
found:
	n->nlookup++;
	attr_tell(n, a);
	return 0;
}

/* The directory @ino names, or an error. Lock held. */
static int dir_get(struct objfs_inodes *t, uint64_t ino, struct objfs_node **d)
{
	*d = node_get(t, ino);
	if (!*d)
		return -ENOENT;
	return (*d)->is_dir ? 0 : -ENOTDIR;
}

/*
 * A lookup of @name in @d (held), in the order: a fresh listing; the
 * listing under way when it has the name already; the store's own lookup;
 * the end of the listing under way (parked, or waited for); a listing this
 * thread makes (*@mine, *@p: for list_finish). Lock held.
 */
static int lookup_locked(struct objfs_inodes *t, struct objfs_node *d, const char *name,
			 struct objfs_attr *a, objfs_parked_fn done, void *arg,
			 struct objfs_dirlist **mine, struct parked **p)
{
	struct objfs_dirlist *l = d->cur;
	struct objfs_node *n;
	int err;

	if (list_fresh(t, l))
		return lookup_in(t, l, name, a);
	if (l && l->state == L_LISTING) {
		n = hash_find(t, d->ino, name);
		if (n && n->list_gen == l->gen)
			return lookup_in(t, l, name, a);
		if (t->store->ops->lookup)
			return direct_lookup(t, d, name, a);
		if (done)
			return park(l, P_LOOKUP, name, 0, done, NULL, arg);
		/* The listing we waited for failed: its error is ours too.
		 * Listing again here would queue every waiter behind one more
		 * timeout each (3 lookups of a stalled directory took 13, 20
		 * and 33 s). */
		list_wait(t, l, 0);
		err = l->state == L_FAILED ? l->err : lookup_in(t, l, name, a);
		list_put(t, l);
		return err;
	}
	if (t->store->ops->lookup)
		return direct_lookup(t, d, name, a);
	l = list_start(t, d);
	if (!l)
		return -ENOMEM;
	*mine = l;
	err = list_run(t, l, p);
	return err ? err : lookup_in(t, l, name, a);
}

int objfs_inode_lookup_async(struct objfs_inodes *t, uint64_t parent, const char *name,
			     struct objfs_attr *a, objfs_parked_fn done, void *arg)
{
	struct objfs_dirlist *mine = NULL;
	struct parked *p = NULL;
	struct objfs_node *d;
	int err;

	pthread_mutex_lock(&t->lock);
	err = dir_get(t, parent, &d);
	if (!err) {
		d->refs++;
		err = lookup_locked(t, d, name, a, done, arg, &mine, &p);
		node_put(t, d);
	}
	pthread_mutex_unlock(&t->lock);
	if (mine)
		list_finish(t, mine, p);
	return err;
}

int objfs_inode_lookup(struct objfs_inodes *t, uint64_t parent, const char *name,
		       struct objfs_attr *a)
{
	return objfs_inode_lookup_async(t, parent, name, a, NULL, NULL);
}

void objfs_inode_forget(struct objfs_inodes *t, uint64_t ino, uint64_t nlookup)
{
	struct objfs_node *n;
	int trim;

	pthread_mutex_lock(&t->lock);
	n = node_get(t, ino);
	if (n && n != t->root && n->nlookup) {
		n->nlookup = n->nlookup > nlookup ? n->nlookup - nlookup : 0;
		if (!n->nlookup) {
			n->refs++;
			if (n->is_dir)
				cache_settle(t, n);
			/* a kept listing past list_ttl answers nothing: it goes
			 * as the kernel forgets its entries (drop_caches) */
			if (n->parent->cur)
				cache_settle(t, n->parent);
			node_put(t, n);
		}
	}
	trim = trim_due(t);
	pthread_mutex_unlock(&t->lock);
	if (trim)
		malloc_trim(0);
}

void objfs_inode_ref(struct objfs_inodes *t, uint64_t ino)
{
	struct objfs_node *n;

	pthread_mutex_lock(&t->lock);
	n = node_get(t, ino);
	if (n)
		n->nlookup++;
	pthread_mutex_unlock(&t->lock);
}

int objfs_inode_getattr(struct objfs_inodes *t, uint64_t ino, struct objfs_attr *a)
{
	struct objfs_node *n;
	int err = -ENOENT;

	pthread_mutex_lock(&t->lock);
	n = node_get(t, ino);
	if (n) {
		n->refs++;
		err = revalidate(t, n, 0, 0);
		if (!err)
			attr_tell(n, a);
		node_put(t, n);
	}
	pthread_mutex_unlock(&t->lock);
	return err;
}

int objfs_inode_open(struct objfs_inodes *t, uint64_t ino, struct objfs_attr *a,
		     char **path, struct objfs_open *o)
{
	struct objfs_node *n;
	const char *v;
	char ver[32];
	int64_t told;
	int err, force, same;

	*path = NULL;
	memset(o, 0, sizeof(*o));
	pthread_mutex_lock(&t->lock);
	n = node_get(t, ino);
	if (!n) {
		pthread_mutex_unlock(&t->lock);
		return -ENOENT;
	}
	n->refs++;
	if (n->is_dir) {
		err = -EISDIR;
		goto out;
	}
	if (!n->hashed) {
		err = -ESTALE; /* an old version (split_node): look the name up again */
		goto out;
	}
	/* A read found this object changed (an S3 listing's ETag would pin the
	 * old version until attr_timeout), or the listing gave neither an ETag
	 * nor an mtime to pin the handle to: fetch the current attributes. An
	 * HTTP index's mtime (to the second, as Last-Modified) pins the version
	 * without a HEAD: every GET's Last-Modified must match it (small files
	 * would pay a HEAD and a GET each). */
	told = n->told; /* what the kernel holds (a listing may have changed n->size) */
	*path = node_path(n);
	if (!*path) {
		err = -ENOMEM;
		goto out;
	}
	force = objfs_store_take_stale(t->store, *path) || (!n->etag && n->mtime < 0);
	err = revalidate(t, n, force, 1);
	if (!err && !n->hashed)
		err = -ESTALE;
	if (err)
		goto out;
	/* the version the kernel's pages are of: the ETag, or with none the
	 * pinned mtime ("@<mtime>": ETags are quoted) */
	v = n->etag;
	if (!v && n->mtime >= 0) {
		snprintf(ver, sizeof(ver), "@%lld", (long long)n->mtime);
		v = ver;
	}
	same = v && n->open_etag && !version_differs(n, n->etag, n->size, n->mtime);
	if (n->open_n && !same && v) {
		/* Another version reached this node anyway (a split that found
		 * no memory): the new node takes it, this one goes back to its
		 * handles' version. */
		if (!split_node(t, n)) {
			err = -ENOMEM;
			goto out;
		}
		objfs_info("'%s' changed while open: the new version gets a new inode, the open "
			   "is retried there", *path);
		err = -ESTALE;
		goto out;
	}
	if (told >= 0 && n->size != told) {
		/* The kernel still has the old size and would cut reads short at
		 * it: -ESTALE makes the VFS look the name up again (LOOKUP_REVAL),
		 * which hands it the new size, and retry the open once. Not only
		 * when the open forced a restat: one after attr_ttl finds a new
		 * size just the same, while a listing may have renewed the
		 * kernel's (a review read 6 bytes of a 23-byte file so). */
		objfs_info("'%s' changed size (%lld -> %lld bytes): open retried with the new "
			   "size", *path, (long long)told, (long long)n->size);
		err = -ESTALE;
		goto out;
	}
	/* not while an open that drops them has not reached the kernel: its
	 * pages may still be the old version's (review) */
	o->keep_cache = same && !n->open_inval;
	set_str(&n->open_etag, v);
	n->open_size = n->size;
	n->open_mtime = n->mtime;
	n->open_n++;
	if (!o->keep_cache) {
		n->open_inval++;
		o->inval = 1;
	}
	attr_fill(n, a);
	o->node = n;
	n->refs++; /* the handle's, until objfs_inode_close */
out:
	node_put(t, n);
	pthread_mutex_unlock(&t->lock);
	if (err) {
		free(*path);
		*path = NULL;
	}
	return err;
}

void objfs_inode_opened(struct objfs_inodes *t, struct objfs_open *o)
{
	if (!o->inval)
		return;
	pthread_mutex_lock(&t->lock);
	o->node->open_inval--;
	pthread_mutex_unlock(&t->lock);
	o->inval = 0;
}

void objfs_inode_close(struct objfs_inodes *t, struct objfs_open *o, int used)
{
	struct objfs_node *n = o->node;

	if (!n)
		return;
	pthread_mutex_lock(&t->lock);
	if (o->inval)
		n->open_inval--;
	/* an open the kernel never got kept the pages it was to drop: the next
	 * must not keep them, unless open handles of the version still hold
	 * them (a node is one version while it has any) */
	if (!--n->open_n && !used && !o->keep_cache)
		set_str(&n->open_etag, NULL);
	node_put(t, n);
	pthread_mutex_unlock(&t->lock);
	o->node = NULL;
	o->inval = 0;
}

/* ---- directory handles ---- */

/* A handle on listing @l. Lock held. 0 or -ENOMEM. */
static int snap_new(struct objfs_inodes *t, struct objfs_dirlist *l, struct objfs_dirsnap **out)
{
	struct objfs_dirsnap *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->t = t;
	s->l = l;
	l->refs++;
	l->handles++;
	s->self = l->dir->ino;
	s->parent = l->dir->parent ? l->dir->parent->ino : l->dir->ino;
	*out = s;
	return 0;
}

/* Closes handle @s. Lock held. Returns whether memory should be trimmed. */
static int snap_free_locked(struct objfs_dirsnap *s)
{
	struct objfs_inodes *t = s->t;
	struct objfs_dirlist *l = s->l;
	struct objfs_node *d = l->dir;

	d->refs++;
	l->handles--;
	if (d->cur == l)
		cache_settle(t, d);
	list_put(t, l);
	node_put(t, d);
	free(s);
	return trim_due(t);
}

void objfs_dirsnap_free(struct objfs_dirsnap *s)
{
	struct objfs_inodes *t;
	int trim;

	if (!s)
		return;
	t = s->t;
	pthread_mutex_lock(&t->lock);
	trim = snap_free_locked(s);
	pthread_mutex_unlock(&t->lock);
	if (trim)
		malloc_trim(0);
}

int objfs_inode_opendir_async(struct objfs_inodes *t, uint64_t ino, struct objfs_dirsnap **out,
			      objfs_parked_fn done, void *arg)
{
	struct objfs_dirlist *l, *mine = NULL;
	struct parked *p = NULL;
	struct objfs_node *d;
	int err;

	*out = NULL;
	pthread_mutex_lock(&t->lock);
	err = dir_get(t, ino, &d);
	if (err)
		goto unlock;
	l = d->cur;
	if (l && l->state == L_LISTING) {
		/* under way: read the same listing, once it has a page */
		if (l->pages) {
			err = snap_new(t, l, out);
		} else if (done) {
			err = park(l, P_OPENDIR, NULL, 0, done, NULL, arg);
		} else {
			list_wait(t, l, 1);
			err = l->state == L_FAILED ? l->err : snap_new(t, l, out);
			list_put(t, l);
		}
		goto unlock;
	}
	if (list_fresh(t, l)) {
		err = snap_new(t, l, out);
		goto unlock;
	}
	l = list_start(t, d);
	if (!l) {
		err = -ENOMEM;
		goto unlock;
	}
	mine = l;
	/* Answered at the first page (parked), or at the end (the handle is
	 * made first, so that the listing is read: never cancelled). */
	err = done ? park(l, P_OPENDIR, NULL, 0, done, NULL, arg) : snap_new(t, l, out);
	if (err == -ENOMEM) {
		l->state = L_FAILED; /* never listed: list_finish drops it */
		l->err = err;
		d->cur = NULL;
		list_put(t, l);
		goto unlock;
	}
	if (list_run(t, l, &p) && *out) {
		err = l->err;
		snap_free_locked(*out);
		*out = NULL;
	}
unlock:
	pthread_mutex_unlock(&t->lock);
	if (mine)
		list_finish(t, mine, p);
	return err;
}

int objfs_inode_opendir(struct objfs_inodes *t, uint64_t ino, struct objfs_dirsnap **out)
{
	return objfs_inode_opendir_async(t, ino, out, NULL, NULL);
}

int objfs_dirsnap_read(struct objfs_dirsnap *s, size_t i, int ref, objfs_dirent_fn fill,
		       void *arg, objfs_wake_fn wake, void *warg)
{
	struct objfs_inodes *t = s->t;
	struct objfs_dirlist *l = s->l;
	struct objfs_attr a;
	int taken = 0;

	pthread_mutex_lock(&t->lock);
	for (size_t held = 0; i < l->n; i++) {
		struct objfs_node *n;

		if (held++ == DIRSNAP_HOLD_MAX) {
			/* let the lister merge its page, and lookups, through */
			pthread_mutex_unlock(&t->lock);
			pthread_mutex_lock(&t->lock);
			held = 1;
		}
		n = l->ents[i]; /* entries only come: i < l->n still */
		attr_fill(n, &a);
		if (fill(arg, n->name, &a)) {
			if (!taken)
				taken = -ENOSPC;
			break;
		}
		if (ref && (a.is_dir || a.size >= 0)) {
			n->nlookup++; /* fs.c sends no attributes for a size unknown */
			attr_tell(n, &a);
		}
		taken++;
	}
	if (!taken && l->state != L_LISTING)
		taken = l->state == L_FAILED ? l->err : 0;
	else if (!taken)
		taken = wake ? park(l, P_READDIR, NULL, i, NULL, wake, warg) : -EINPROGRESS;
	pthread_mutex_unlock(&t->lock);
	return taken;
}

/* objfs_dirsnap_entry's @fill: one entry copied out, then no more. */
struct entry_copy {
	char *name;
	struct objfs_attr *a;
	int taken;
};

static int entry_copy(void *arg, const char *name, const struct objfs_attr *a)
{
	struct entry_copy *c = arg;

	if (c->taken)
		return 1;
	memcpy(c->name, name, strlen(name) + 1);
	*c->a = *a;
	c->taken = 1;
	return 0;
}

int objfs_dirsnap_entry(struct objfs_dirsnap *s, size_t i, int ref, char *name,
			struct objfs_attr *a, objfs_wake_fn wake, void *arg)
{
	struct entry_copy c = { name, a, 0 };
	int r = objfs_dirsnap_read(s, i, ref, entry_copy, &c, wake, arg);

	return r > 0 ? 1 : r;
}
