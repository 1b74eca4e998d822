/*
 * inode: see inode.h for the design and the locking rule.
 *
 * Nodes are found two ways: by inode number through a dense array (numbers
 * are handed out sequentially from 1 and never reused), and by (parent, name)
 * through a chained hash table, so a lookup in a directory of 100,000 entries
 * costs O(1). A directory's kids array is its latest listing in server order;
 * nodes that left the listing stay in the tables (an open file keeps working
 * and a name that comes back keeps its inode number).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

#include "inode.h"
#include "clock.h"
#include "hash.h"
#include "log.h"

/* A lookup (name) or opendir (no name) waiting, without a thread, for its
 * directory's listing in progress (see inode.h). */
struct parked {
	struct parked *next;
	objfs_parked_fn done;
	void *arg;
	int opendir;
	char name[]; /* lookup: the name asked for */
};

struct objfs_node {
	uint64_t ino;
	uint64_t nlookup;
	struct objfs_node *parent;
	char *name;             /* immutable; the store path is built from the
				   names up to the root (node_path): a node
				   holding its full path cost O(depth^2) in a
				   deep tree, 825 MiB at depth 20,000 */
	int is_dir;             /* immutable: a type change makes a new node */
	int present;            /* in the parent's latest listing */
	int64_t size, mtime;
	char *etag;             /* NULL: none known (most HTTP listings) */
	double attr_at;         /* monotonic time attrs were fetched, 0 never */
	double found_at;        /* monotonic time a lookup of its own (no listing)
				   found it, 0 never: see direct_lookup */
	char *open_etag;        /* ETag seen by the last open (keep_cache); NULL none */
	int64_t open_size;
	/* Directories only: */
	struct objfs_node **kids;
	size_t nkids;
	double listed_at;       /* 0: never listed */
	int listing;            /* a thread is listing it now */
	unsigned list_gen;      /* listings ended; with list_err, the last one's */
	int list_err;           /* result, for threads that waited for it */
	struct parked *parked;  /* waiting for the listing in progress; taken
				   by the thread that listed, when it ends */
	struct objfs_node *hnext;
};

struct objfs_inodes {
	struct objfs_store *store;
	double list_ttl, attr_ttl;
	pthread_mutex_t lock;
	pthread_cond_t listed;
	struct objfs_node **by_ino; /* index = ino */
	size_t nino, capino;
	struct objfs_node **hash;
	size_t nhash, nbuckets;
};

static size_t name_hash(uint64_t parent, const char *name)
{
	return objfs_hash_fold(objfs_fnv1a(OBJFS_FNV_OFFSET ^ parent, name), 29);
}

static struct objfs_node *hash_find(struct objfs_inodes *t, uint64_t parent, const char *name)
{
	struct objfs_node *n = t->hash[name_hash(parent, name) & (t->nbuckets - 1)];

	for (; n; n = n->hnext)
		if (n->parent && n->parent->ino == parent && strcmp(n->name, name) == 0)
			return n;
	return NULL;
}

#define NODE_HASH(n) name_hash((n)->parent->ino, (n)->name)

static int hash_grow(struct objfs_inodes *t)
{
	return OBJFS_HASH_GROW(&t->hash, &t->nbuckets, struct objfs_node, hnext, NODE_HASH);
}

static void hash_remove(struct objfs_inodes *t, struct objfs_node *n)
{
	struct objfs_node **pp = &t->hash[name_hash(n->parent->ino, n->name) & (t->nbuckets - 1)];

	for (; *pp; pp = &(*pp)->hnext) {
		if (*pp == n) {
			*pp = n->hnext;
			n->hnext = NULL;
			t->nhash--;
			return;
		}
	}
}

/* Creates a node under @parent (NULL for the root). Lock held. */
static struct objfs_node *node_new(struct objfs_inodes *t, struct objfs_node *parent,
				   const char *name, int is_dir)
{
	struct objfs_node *n;

	if (t->nino >= t->capino) {
		size_t nc = t->capino ? t->capino * 2 : 1024;
		struct objfs_node **a = realloc(t->by_ino, nc * sizeof(*a));

		if (!a)
			return NULL;
		t->by_ino = a;
		t->capino = nc;
	}
	if (parent && t->nhash >= t->nbuckets && hash_grow(t))
		return NULL;
	n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	n->name = strdup(name);
	if (!n->name) {
		free(n);
		return NULL;
	}
	n->parent = parent;
	n->is_dir = is_dir;
	n->size = -1;
	n->mtime = -1;
	n->ino = t->nino;
	t->by_ino[t->nino++] = n;
	if (parent) {
		size_t b = name_hash(parent->ino, name) & (t->nbuckets - 1);

		n->hnext = t->hash[b];
		t->hash[b] = n;
		t->nhash++;
	}
	return n;
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
	t->nbuckets = 1024;
	t->hash = calloc(t->nbuckets, sizeof(*t->hash));
	t->nino = 1; /* inode 0 does not exist */
	if (!t->hash || !node_new(t, NULL, "", 1)) {
		objfs_inodes_free(t);
		return -ENOMEM;
	}
	t->by_ino[OBJFS_ROOT_INO]->present = 1;
	*out = t;
	return 0;
}

void objfs_inodes_free(struct objfs_inodes *t)
{
	if (!t)
		return;
	for (size_t i = 1; i < t->nino; i++) {
		struct objfs_node *n = t->by_ino[i];

		free(n->name);
		free(n->etag);
		free(n->open_etag);
		free(n->kids);
		while (n->parked) { /* unmounted mid-listing: nobody to answer */
			struct parked *p = n->parked;

			n->parked = p->next;
			free(p);
		}
		free(n);
	}
	free(t->by_ino);
	free(t->hash);
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->listed);
	free(t);
}

static struct objfs_node *node_get(struct objfs_inodes *t, uint64_t ino)
{
	return (ino && ino < t->nino) ? t->by_ino[ino] : NULL;
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
	a->ino = n->ino;
	a->is_dir = n->is_dir;
	a->size = n->size;
	a->mtime = n->mtime;
	snprintf(a->etag, sizeof(a->etag), "%s", n->etag ? n->etag : "");
}

/* Replaces @d's listing with @l. Lock held. */
static int merge_listing(struct objfs_inodes *t, struct objfs_node *d,
			 const struct objfs_listing *l, double now)
{
	struct objfs_node **kids = malloc((l->n ? l->n : 1) * sizeof(*kids));
	size_t nk = 0;

	if (!kids)
		return -ENOMEM;
	for (size_t i = 0; i < d->nkids; i++)
		d->kids[i]->present = 0;
	for (size_t i = 0; i < l->n; i++) {
		const struct objfs_listent *e = &l->ents[i];
		struct objfs_node *n = hash_find(t, d->ino, e->name);

		if (n && n->is_dir != e->is_dir) {
			hash_remove(t, n);
			n = NULL;
		}
		if (!n)
			n = node_new(t, d, e->name, e->is_dir);
		if (!n) {
			free(kids);
			return -ENOMEM;
		}
		if (n->present)
			continue; /* listed twice */
		n->present = 1;
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
			} else if (n->attr_at && now - n->attr_at >= t->attr_ttl) {
				n->size = -1;
			}
		}
		kids[nk++] = n;
	}
	free(d->kids);
	d->kids = kids;
	d->nkids = nk;
	d->listed_at = now;
	return 0;
}

/* Makes sure @d's listing is fresh. Lock held on entry and exit. When
 * this thread listed, the requests parked meanwhile are moved to *@done
 * (NULL: none), for complete_parked() once the lock is dropped. */
static int ensure_listed(struct objfs_inodes *t, struct objfs_node *d, struct parked **done)
{
	struct objfs_listing l = { 0 };
	char *path;
	int err;

	if (d->listing) {
		unsigned gen = d->list_gen;

		while (d->listing)
			pthread_cond_wait(&t->listed, &t->lock);
		/* The listing we waited for failed: its error is ours too. Listing
		 * again here would queue every waiter behind one more timeout
		 * each (3 lookups of a stalled directory took 13, 20 and 33 s). */
		if (d->list_gen != gen && d->list_err)
			return d->list_err;
	}
	if (d->listed_at && objfs_now_s() - d->listed_at < t->list_ttl)
		return 0;
	path = node_path(d);
	if (!path)
		return -ENOMEM;
	d->listing = 1;
	pthread_mutex_unlock(&t->lock);
	err = t->store->ops->list(t->store, path, &l);
	pthread_mutex_lock(&t->lock);
	if (!err)
		err = merge_listing(t, d, &l, objfs_now_s());
	d->listing = 0;
	d->list_err = err;
	d->list_gen++;
	pthread_cond_broadcast(&t->listed);
	*done = d->parked;
	d->parked = NULL;
	objfs_listing_clear(&l);
	if (err)
		objfs_info("listing '/%s' failed: %s", path, strerror(-err));
	free(path);
	return err;
}

/* Stats file @n when its attributes are unknown or older than attr_ttl.
 * Lock held on entry and exit. */
static int revalidate(struct objfs_inodes *t, struct objfs_node *n, int force)
{
	struct objfs_stat st;
	char *path;
	int err;

	if (n->is_dir)
		return 0;
	if (!force && n->size >= 0 && objfs_now_s() - n->attr_at < t->attr_ttl)
		return 0;
	path = node_path(n);
	if (!path)
		return -ENOMEM;
	pthread_mutex_unlock(&t->lock);
	err = t->store->ops->stat(t->store, path, &st);
	free(path);
	pthread_mutex_lock(&t->lock);
	if (err)
		return err;
	if (st.is_dir)
		return -EIO; /* became a directory: the parent's next listing sorts it out */
	n->size = st.size;
	if (st.mtime >= 0)
		n->mtime = st.mtime;
	set_str(&n->etag, st.etag);
	n->attr_at = objfs_now_s();
	return 0;
}

/* The lookup of @name in listed directory @d. Lock held (revalidate may
 * drop it for a while). */
static int lookup_in(struct objfs_inodes *t, struct objfs_node *d, const char *name,
		     struct objfs_attr *a)
{
	struct objfs_node *n = hash_find(t, d->ino, name);
	int err;

	if (!n || !n->present)
		return -ENOENT;
	err = revalidate(t, n, 0);
	if (err)
		return err;
	n->nlookup++;
	attr_fill(n, a);
	return 0;
}

/*
 * The lookup of @name in @d by the store's own lookup (a HEAD and a
 * one-key listing on S3), for a directory not listed or listed too long
 * ago: a million-key prefix is never listed to open one file (issue 14).
 * A hit stays good for attr_timeout (files) or list_ttl (directories).
 * Lock held (dropped while the store is asked).
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
		n = NULL;
	}
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
	attr_fill(n, a);
	return 0;
}

static int snapshot(struct objfs_node *n, struct objfs_dirsnap **out);

/*
 * Completes the requests parked on @d while this thread listed it, one by
 * one, each under the lock and reported without it. @lerr: the listing's
 * result. Lock not held.
 */
static void complete_parked(struct objfs_inodes *t, struct objfs_node *d, struct parked *p,
			    int lerr)
{
	while (p) {
		struct parked *next = p->next;
		struct objfs_dirsnap *snap = NULL;
		struct objfs_attr a;
		int err = lerr;

		memset(&a, 0, sizeof(a));
		if (!err) {
			pthread_mutex_lock(&t->lock);
			err = p->opendir ? snapshot(d, &snap) : lookup_in(t, d, p->name, &a);
			pthread_mutex_unlock(&t->lock);
		}
		p->done(p->arg, err, err ? NULL : &a, snap);
		free(p);
		p = next;
	}
}

/* Parks a request on @d, whose listing is in progress. Lock held. */
static int park(struct objfs_node *d, const char *name, objfs_parked_fn done, void *arg)
{
	size_t len = name ? strlen(name) : 0;
	struct parked *p = malloc(sizeof(*p) + len + 1);

	if (!p)
		return -ENOMEM;
	p->done = done;
	p->arg = arg;
	p->opendir = name == NULL;
	memcpy(p->name, name ? name : "", len + 1);
	p->next = d->parked;
	d->parked = p;
	return -EINPROGRESS;
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
 * A lookup of @name (into @a) or, @name NULL, an opendir (into @snap) in
 * directory @ino: parked when another thread is listing it and @done is
 * set (-EINPROGRESS), else listed when stale and answered; the requests
 * parked meanwhile are completed after.
 */
static int dir_request(struct objfs_inodes *t, uint64_t ino, const char *name,
		       struct objfs_attr *a, struct objfs_dirsnap **snap, objfs_parked_fn done,
		       void *arg)
{
	struct parked *p = NULL;
	struct objfs_node *d;
	int err, lerr = 0;

	pthread_mutex_lock(&t->lock);
	err = dir_get(t, ino, &d);
	if (!err && name && t->store->ops->lookup && !d->listing &&
	    !(d->listed_at && objfs_now_s() - d->listed_at < t->list_ttl)) {
		err = direct_lookup(t, d, name, a);
		pthread_mutex_unlock(&t->lock);
		return err;
	}
	if (!err && d->listing && done) {
		err = park(d, name, done, arg);
		pthread_mutex_unlock(&t->lock);
		return err;
	}
	if (!err)
		err = lerr = ensure_listed(t, d, &p);
	if (!err)
		err = name ? lookup_in(t, d, name, a) : snapshot(d, snap);
	pthread_mutex_unlock(&t->lock);
	if (p)
		complete_parked(t, d, p, lerr);
	return err;
}

int objfs_inode_lookup_async(struct objfs_inodes *t, uint64_t parent, const char *name,
			     struct objfs_attr *a, objfs_parked_fn done, void *arg)
{
	return dir_request(t, parent, name, a, NULL, done, arg);
}

int objfs_inode_lookup(struct objfs_inodes *t, uint64_t parent, const char *name,
		       struct objfs_attr *a)
{
	return objfs_inode_lookup_async(t, parent, name, a, NULL, NULL);
}

void objfs_inode_forget(struct objfs_inodes *t, uint64_t ino, uint64_t nlookup)
{
	struct objfs_node *n;

	pthread_mutex_lock(&t->lock);
	n = node_get(t, ino);
	if (n)
		n->nlookup = n->nlookup > nlookup ? n->nlookup - nlookup : 0;
	pthread_mutex_unlock(&t->lock);
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
	int err;

	pthread_mutex_lock(&t->lock);
	n = node_get(t, ino);
	err = n ? revalidate(t, n, 0) : -ENOENT;
	if (!err)
		attr_fill(n, a);
	pthread_mutex_unlock(&t->lock);
	return err;
}

int objfs_inode_open(struct objfs_inodes *t, uint64_t ino, struct objfs_attr *a,
		     int *keep_cache, char **path)
{
	struct objfs_node *n;
	int64_t told;
	int err, force;

	*path = NULL;
	pthread_mutex_lock(&t->lock);
	n = node_get(t, ino);
	if (!n) {
		err = -ENOENT;
		goto out;
	}
	if (n->is_dir) {
		err = -EISDIR;
		goto out;
	}
	/* A read found this object changed (an S3 listing's ETag would pin the
	 * old version until attr_timeout), or the listing gave neither an ETag
	 * nor an mtime to pin the handle to: fetch the current attributes. An
	 * HTTP index's mtime (to the second, as Last-Modified) pins the version
	 * without a HEAD: every GET's Last-Modified must match it (issue 13:
	 * small files paid a HEAD and a GET each). */
	told = n->size;
	*path = node_path(n);
	if (!*path) {
		err = -ENOMEM;
		goto out;
	}
	force = objfs_store_take_stale(t->store, *path) || (!n->etag && n->mtime < 0);
	err = revalidate(t, n, force);
	if (err)
		goto out;
	if (force && told >= 0 && n->size != told) {
		/* The kernel still has the old size and would cut reads short at
		 * it: -ESTALE makes the VFS look the name up again (LOOKUP_REVAL),
		 * which hands it the new size, and retry the open once. */
		objfs_info("'%s' changed size (%lld -> %lld bytes): open retried with the new "
			   "size", *path, (long long)told, (long long)n->size);
		err = -ESTALE;
		goto out;
	}
	*keep_cache = n->open_etag && n->etag && strcmp(n->open_etag, n->etag) == 0 &&
		      n->open_size == n->size;
	set_str(&n->open_etag, n->etag);
	n->open_size = n->size;
	attr_fill(n, a);
out:
	pthread_mutex_unlock(&t->lock);
	if (err) {
		free(*path);
		*path = NULL;
	}
	return err;
}

/* A snapshot of listed directory @n's entries. Lock held. */
static int snapshot(struct objfs_node *n, struct objfs_dirsnap **out)
{
	struct objfs_dirsnap *d = calloc(1, sizeof(*d));

	if (!d || !(d->ents = malloc((n->nkids ? n->nkids : 1) * sizeof(*d->ents)))) {
		free(d);
		return -ENOMEM;
	}
	memcpy(d->ents, n->kids, n->nkids * sizeof(*d->ents));
	d->n = n->nkids;
	d->self = n->ino;
	d->parent = n->parent ? n->parent->ino : n->ino;
	*out = d;
	return 0;
}

int objfs_inode_opendir_async(struct objfs_inodes *t, uint64_t ino, struct objfs_dirsnap **out,
			      objfs_parked_fn done, void *arg)
{
	return dir_request(t, ino, NULL, NULL, out, done, arg);
}

int objfs_inode_opendir(struct objfs_inodes *t, uint64_t ino, struct objfs_dirsnap **out)
{
	return objfs_inode_opendir_async(t, ino, out, NULL, NULL);
}

void objfs_dirsnap_free(struct objfs_dirsnap *d)
{
	if (!d)
		return;
	free(d->ents);
	free(d);
}

const char *objfs_dirsnap_entry(struct objfs_inodes *t, struct objfs_dirsnap *d, size_t i,
				struct objfs_attr *a)
{
	struct objfs_node *n = d->ents[i];

	pthread_mutex_lock(&t->lock);
	attr_fill(n, a);
	pthread_mutex_unlock(&t->lock);
	return n->name;
}
