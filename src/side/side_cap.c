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
 * Lookup: a HELLO's or ATTACH's token picks a bucket of a hash table by a
 * keyed hash (a random 64-bit key of this daemon mixed with the token's
 * first 8 bytes, multiplied and shifted), and is compared with the
 * records of that bucket only, each in constant time and without an early
 * exit (objfs_side_token_eq). Before (version 1) it was compared with
 * every record, which made 10,000 ATTACHes of one process quadratic. The
 * bucket's timing can tell an attacker only about keyed-hash bits of a
 * token he does not know, never how much of a token was right; side.c
 * answers every mismatch (token, uid, inode) with one EACCES. A found
 * record counts a session reference (per handle) until it is detached.
 *
 * Expiry: a record nobody uses (no session, no fetch in flight) for
 * cap_ttl seconds is dropped at the next grant; at most max_caps live at
 * once (-ENOSPC beyond), which bounds what ioctls can make the daemon keep,
 * and one uid holds at most its share of them (uid_caps, a quarter by
 * default), outside the reserve of root and the mounting user
 * (objfs_side_room), so that no user, nor a few together, can leave the
 * others (root included) with ENOSPC for cap_ttl (docs/reliability.md).
 *
 * Open object: a record holds one reference on the open object version of
 * the handle it was granted through (cache/object.h), the same object the
 * FUSE handle reads, so fills and FUSE reads share blocks and a record may
 * outlive the handle. The cache borrows the object's fetch context only
 * while it starts a fetch, so no fetch in flight needs the record.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
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

/* ---------------------------------------------------------- records */

/* ---------------------------------------------------------- per-uid use */

struct uid_use *objfs_side_uid_get(struct objfs_side *s, uid_t uid)
{
	struct uid_use *u;

	for (u = s->uids; u; u = u->next)
		if (u->uid == uid)
			return u;
	u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	u->uid = uid;
	TAILQ_INIT(&u->jsess);
	u->next = s->uids;
	s->uids = u;
	return u;
}

/* What @u holds of bound @b, and the bound's global and per-uid settings. */
static uint64_t held(const struct uid_use *u, enum objfs_side_bound b)
{
	return b == OBJFS_SIDE_SESSIONS ? u->sessions : b == OBJFS_SIDE_CAPS ? u->caps
									  : u->ring_bytes;
}

static uint64_t held_all(const struct objfs_side *s, enum objfs_side_bound b)
{
	return b == OBJFS_SIDE_SESSIONS ? s->st.sessions_open : b == OBJFS_SIDE_CAPS ? s->ncaps
										   : s->ring_bytes;
}

static void bound_of(const struct objfs_side *s, enum objfs_side_bound b, uint64_t *global,
		     uint64_t *per_uid)
{
	const struct objfs_side_cfg *c = &s->cfg;

	*global = b == OBJFS_SIDE_SESSIONS ? c->max_sessions : b == OBJFS_SIDE_CAPS ? c->max_caps
										    : c->ring_budget;
	*per_uid = b == OBJFS_SIDE_SESSIONS ? c->uid_sessions : b == OBJFS_SIDE_CAPS ? c->uid_caps
										     : c->uid_ring_budget;
}

/*
 * Shares: each uid up to its share (a quarter by default), so that four
 * users are needed to take a bound; and root and the mounting user each
 * keep a quarter of every bound out of the other uids' reach (less what
 * they hold already), so that they can always open, however many users
 * take their shares.
 */
int objfs_side_room(const struct objfs_side *s, const struct uid_use *u,
		    enum objfs_side_bound b, uint64_t n)
{
	uint64_t global, per_uid, keep = 0;

	bound_of(s, b, &global, &per_uid);
	if (!objfs_side_reserved(s, u->uid)) {
		uid_t r[2] = { 0, s->owner };

		for (int i = 0; i < (s->owner ? 2 : 1); i++) {
			const struct uid_use *q = s->uids;
			uint64_t h;

			while (q && q->uid != r[i])
				q = q->next;
			h = q ? held(q, b) : 0;
			if (h < objfs_side_quarter(global))
				keep += objfs_side_quarter(global) - h;
		}
	}
	if (held_all(s, b) + n + keep > global)
		return 2;
	return held(u, b) + n > objfs_side_share(global, per_uid);
}

void objfs_side_uid_put(struct objfs_side *s, struct uid_use *u)
{
	if (!u || u->pending || u->sessions || u->caps || u->ring_bytes)
		return;
	for (struct uid_use **pp = &s->uids; *pp; pp = &(*pp)->next) {
		if (*pp == u) {
			*pp = u->next;
			free(u);
			return;
		}
	}
}

/* ---------------------------------------------------------- records */

static void cap_free(struct cap *c)
{
	if (!c)
		return;
	objfs_object_put(c->obj);
	free(c);
}

/* Unlinked @c from the list: uncounts it. With side->lock held. */
static void cap_uncount(struct objfs_side *s, struct cap *c)
{
	struct uid_use *u = objfs_side_uid_get(s, c->uid);

	s->ncaps--;
	if (u) {
		u->caps--;
		objfs_side_uid_put(s, u);
	}
}

/* The bucket of @token in side->chash (side_cap.c's header says why keyed). */
static size_t cap_bucket(const struct objfs_side *s, const uint8_t *token)
{
	uint64_t k;

	memcpy(&k, token, sizeof(k));
	k = (k ^ s->chash_key) * 0x9e3779b97f4a7c15ull;
	return (size_t)(k >> 32) & (s->chash_n - 1);
}

/* Unlinks @c from its hash bucket. side->lock held. */
static void cap_unhash(struct objfs_side *s, struct cap *c)
{
	for (struct cap **pp = &s->chash[cap_bucket(s, c->token)]; *pp; pp = &(*pp)->hnext) {
		if (*pp == c) {
			*pp = c->hnext;
			return;
		}
	}
}

int objfs_side_caps_init(struct objfs_side *s)
{
	size_t n = 64;

	while (n < s->cfg.max_caps && n < (1u << 20))
		n *= 2;
	if (getrandom(&s->chash_key, sizeof(s->chash_key), 0) != (ssize_t)sizeof(s->chash_key))
		return -EIO;
	s->chash = calloc(n, sizeof(*s->chash));
	if (!s->chash)
		return -ENOMEM;
	s->chash_n = n;
	return 0;
}

/*
 * Drops records nobody uses that expired (all unused ones with @all).
 * Walks every record: a grant calls it at most once a second, or when a
 * bound is reached. Called with side->lock held.
 */
static void caps_purge(struct objfs_side *s, int all)
{
	double now = objfs_now_s();

	s->purged_at = now;
	for (struct cap **pp = &s->caps; *pp;) {
		struct cap *c = *pp;

		if (!c->sessions && (all || now - c->last_used > s->cfg.cap_ttl)) {
			*pp = c->next;
			cap_unhash(s, c);
			cap_uncount(s, c);
			cap_free(c);
		} else {
			pp = &c->next;
		}
	}
}

int objfs_side_grant(struct objfs_side *s, uid_t uid, const struct objfs_side_obj *o,
		     struct objfs_side_cap *cap)
{
	struct uid_use *u;
	struct cap *c;
	int err;

	if (!o->obj)
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
	c->obj = objfs_object_get(o->obj);

	pthread_mutex_lock(&s->lock);
	u = objfs_side_uid_get(s, uid);
	if (!u) {
		pthread_mutex_unlock(&s->lock);
		err = -ENOMEM;
		goto out_cap;
	}
	if (objfs_now_s() - s->purged_at > 1.0 || objfs_side_room(s, u, OBJFS_SIDE_CAPS, 1))
		caps_purge(s, 0); /* may free @u's record only if it held nothing: it holds caps */
	u = objfs_side_uid_get(s, uid);
	if (!u) {
		pthread_mutex_unlock(&s->lock);
		err = -ENOMEM;
		goto out_cap;
	}
	if (objfs_side_room(s, u, OBJFS_SIDE_CAPS, 1)) {
		unsigned mine = u->caps, live = s->ncaps;

		objfs_side_uid_put(s, u);
		pthread_mutex_unlock(&s->lock);
		objfs_warn("side: refusing a capability to uid %u (ino %llu): %u live, %u of "
			   "them this uid's (bounds %u, %llu per uid; root and the mounting user "
			   "keep a quarter each)", (unsigned)uid,
			   (unsigned long long)o->ino, live, mine, s->cfg.max_caps,
			   (unsigned long long)objfs_side_share(s->cfg.max_caps, s->cfg.uid_caps));
		err = -ENOSPC;
		goto out_cap;
	}
	u->caps++;
	c->last_used = objfs_now_s();
	c->next = s->caps;
	s->caps = c;
	c->hnext = s->chash[cap_bucket(s, c->token)];
	s->chash[cap_bucket(s, c->token)] = c;
	s->ncaps++;
	s->st.caps++;
	pthread_mutex_unlock(&s->lock);

	memset(cap, 0, sizeof(*cap));
	cap->magic = OBJFS_SIDE_MAGIC;
	cap->version = OBJFS_SIDE_VERSION;
	cap->struct_size = sizeof(*cap);
	cap->ino = o->ino;
	cap->generation = o->generation;
	cap->size = c->obj->size;
	cap->ring_slots = s->cfg.ring_slots;
	cap->ring_slot_size = s->cfg.ring_slot_size;
	memcpy(cap->token, c->token, sizeof(cap->token));
	snprintf(cap->etag, sizeof(cap->etag), "%s", c->obj->etag); /* < 192: object.h */
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
	for (struct cap *c = s->chash[cap_bucket(s, token)]; c; c = c->hnext)
		if (objfs_side_token_eq(c->token, token))
			found = c; /* no early exit within the bucket */
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
	caps_purge(s, 1);
	free(s->chash);
	s->chash = NULL;
	s->chash_n = 0;
	while (s->uids) { /* only records of uids that held nothing else are left */
		struct uid_use *u = s->uids;

		s->uids = u->next;
		free(u);
	}
}
