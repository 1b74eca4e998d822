/*
 * side_cap: the side server's capabilities (side.h tells what one grants,
 * side_i.h the record and its locking; side.c serves the sessions).
 *
 * objfs_side_grant (the FUSE ioctl, through fs.c) makes a record: 32 bytes
 * from getrandom() as the token, the caller's uid and the inode it is bound
 * to, and its own copy of the pinned object version (store object, cache
 * identity, size, ETag), so it stays valid after the file is closed and
 * FUSE reads and fills share cache blocks (the same cache identity as
 * fs.c's handles). The answer carries the token, the socket name and the
 * ring geometry.
 *
 * Lookup: a HELLO's token is compared with every record in constant time
 * and without an early exit (objfs_side_token_eq), so neither the answer
 * nor its timing says how much of a token was right or where its record
 * is; side.c answers every mismatch (token, uid, inode) with one EACCES.
 * A found record counts a session reference until the session ends.
 *
 * Expiry: a record nobody uses (no session, no fetch in flight) for
 * cap_ttl seconds is dropped at the next grant; at most max_caps live at
 * once (-ENOSPC beyond), which bounds what ioctls can make the daemon keep.
 *
 * Counted fetch: the cache fetches for a capability through cap_fetch,
 * which wraps the real fetch (objfs_store_fetch, or the caller's) and
 * counts it in cap->inflight while it runs: a cache prefetch may outlive
 * the session that started it and borrows the record until it completes,
 * so records are freed only when that count is zero too
 * (objfs_side_caps_drain at the end waits for it).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "clock.h"
#include "log.h"
#include "side_i.h"

/* ---------------------------------------------------------- tokens */

int objfs_side_token_eq(const uint8_t *a, const uint8_t *b)
{
	uint8_t d = 0;

	for (size_t i = 0; i < OBJFS_TOKEN_LEN; i++)
		d |= (uint8_t)(a[i] ^ b[i]);
	return d == 0;
}

/* ---------------------------------------------------------- counted fetch */

struct fetch_wrap {
	struct cap *cap;
	objfs_fetch_done_fn done;
	void *arg;
	struct objfs_side *side;
};

static void cap_fetch_done(void *arg, int err)
{
	struct fetch_wrap *w = arg;
	struct objfs_side *s = w->side;

	w->done(w->arg, err);
	pthread_mutex_lock(&s->lock);
	w->cap->inflight--;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	free(w);
}

/* The cache's fetch for a capability: counts fetches that borrow the record. */
static void cap_fetch(void *ctx, int64_t off, size_t len, char *dst, objfs_fetch_done_fn done,
		      void *arg)
{
	struct cap *c = ctx;
	struct fetch_wrap *w = malloc(sizeof(*w));

	if (!w) {
		done(arg, -ENOMEM);
		return;
	}
	w->cap = c;
	w->done = done;
	w->arg = arg;
	w->side = c->side;
	pthread_mutex_lock(&c->side->lock);
	c->inflight++;
	pthread_mutex_unlock(&c->side->lock);
	c->inner(c->inner_ctx, off, len, dst, cap_fetch_done, w);
}

/* ---------------------------------------------------------- records */

static void cap_free(struct cap *c)
{
	if (!c)
		return;
	free((char *)c->cobj.id);
	free(c);
}

/* Drops records nobody uses that expired. Called with side->lock held. */
static void caps_purge(struct objfs_side *s, int all)
{
	double now = objfs_now_s();

	for (struct cap **pp = &s->caps; *pp;) {
		struct cap *c = *pp;

		if (!c->sessions && !c->inflight && (all || now - c->last_used > s->cfg.cap_ttl)) {
			*pp = c->next;
			s->ncaps--;
			cap_free(c);
		} else {
			pp = &c->next;
		}
	}
}

int objfs_side_grant(struct objfs_side *s, uid_t uid, const struct objfs_side_obj *o,
		     struct objfs_side_cap *cap)
{
	const char *etag = o->etag ? o->etag : "";
	struct cap *c;
	int err;

	if (o->size < 0 || strlen(etag) >= sizeof(c->etag) || (!o->fetch && (!o->store || !o->path)))
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	if (getrandom(c->token, sizeof(c->token), 0) != (ssize_t)sizeof(c->token)) {
		err = -EIO;
		goto out_cap;
	}
	c->uid = uid;
	c->ino = o->ino;
	c->generation = o->generation;
	c->side = s;
	strcpy(c->etag, etag);
	c->sobj.store = o->store;
	c->sobj.path = o->path;
	c->sobj.etag = c->etag;
	c->sobj.size = o->size;
	c->inner = o->fetch ? o->fetch : objfs_store_fetch;
	c->inner_ctx = o->fetch ? o->fetch_ctx : &c->sobj;
	/* The same identity as fs.c's handles: FUSE reads and fills share blocks. */
	c->cobj.id = objfs_cache_obj_id(o->path ? o->path : "", c->etag, o->size);
	if (!c->cobj.id) {
		err = -ENOMEM;
		goto out_cap;
	}
	c->cobj.size = o->size;
	c->cobj.fetch = cap_fetch;
	c->cobj.ctx = c;

	pthread_mutex_lock(&s->lock);
	caps_purge(s, 0);
	if (s->ncaps >= s->cfg.max_caps) {
		pthread_mutex_unlock(&s->lock);
		objfs_warn("side: %u capabilities live, refusing another (uid %u, ino %llu)",
			   s->ncaps, (unsigned)uid, (unsigned long long)o->ino);
		err = -ENOSPC;
		goto out_cap;
	}
	c->last_used = objfs_now_s();
	c->next = s->caps;
	s->caps = c;
	s->ncaps++;
	s->st.caps++;
	pthread_mutex_unlock(&s->lock);

	memset(cap, 0, sizeof(*cap));
	cap->magic = OBJFS_SIDE_MAGIC;
	cap->version = OBJFS_SIDE_VERSION;
	cap->struct_size = sizeof(*cap);
	cap->ino = o->ino;
	cap->generation = o->generation;
	cap->size = o->size;
	cap->ring_slots = s->cfg.ring_slots;
	cap->ring_slot_size = s->cfg.ring_slot_size;
	memcpy(cap->token, c->token, sizeof(cap->token));
	strcpy(cap->etag, c->etag);
	memcpy(cap->sock, s->sock, sizeof(cap->sock));
	return 0;
out_cap:
	cap_free(c);
	return err;
}

/* ---------------------------------------------------------- sessions' references */

struct cap *objfs_side_cap_ref(struct objfs_side *s, const uint8_t *token)
{
	struct cap *found = NULL;

	pthread_mutex_lock(&s->lock);
	for (struct cap *c = s->caps; c; c = c->next)
		if (objfs_side_token_eq(c->token, token))
			found = c; /* no early exit: time does not depend on the position */
	if (found)
		found->sessions++;
	pthread_mutex_unlock(&s->lock);
	return found;
}

void objfs_side_cap_unref(struct objfs_side *s, struct cap *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&s->lock);
	c->sessions--;
	c->last_used = objfs_now_s();
	pthread_mutex_unlock(&s->lock);
}

void objfs_side_caps_drain(struct objfs_side *s)
{
	for (;;) {
		unsigned busy = 0;

		for (struct cap *c = s->caps; c; c = c->next)
			busy += c->inflight;
		if (!busy)
			break;
		pthread_cond_wait(&s->cond, &s->lock);
	}
	caps_purge(s, 1);
}
