/*
 * side_i.h: what the two files of the side server share (side.h is the
 * module's interface, this header is private to src/side/).
 *
 *   side.c      the server: socket and accept thread, sessions, fills and
 *               the ring discipline, the fill workers.
 *   side_cap.c  capabilities: grant, lookup by token, session references,
 *               expiry, freeing them all at the end; and what each uid
 *               holds (struct uid_use), which bounds one user's share.
 *   side_guard.c the SIGBUS guard over mapped rings.
 *
 * A capability record is written once by objfs_side_grant before it is
 * linked into side->caps; after that only sessions and last_used change
 * (under side->lock), so a session that holds a reference reads the other
 * fields without a lock.
 *
 * Locking: side->lock guards the capability list, the session list and the
 * counters; side->cond signals sessions ending. A session's own lock comes before
 * side->lock (side.c); side->jlock, the workers' job queues, is never held
 * with another lock. Capability records are freed only with no session
 * using them. A fill borrows the record's object only until its done():
 * the cache calls the object's fetch only while a fill or a fetch it
 * started is being set up, and the object outlives every reference.
 */
#ifndef OBJFS_SIDE_I_H
#define OBJFS_SIDE_I_H

#include <pthread.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>

#include "side.h"

struct session;

/*
 * What one uid holds (side->lock): connections not yet past HELLO,
 * sessions, capability records and ring bytes. Each is bounded per uid
 * (a share of the global bound, side.h) so that one user cannot take the
 * side API from the others. A record exists while any count is non-zero.
 * The fill workers take turns between uids, then between a uid's sessions
 * (jsess, jlink: side->jlock); a session with jobs queued is counted, so
 * its uid's record outlives them.
 */
struct uid_use {
	uid_t uid;
	unsigned pending, sessions, caps;
	uint64_t ring_bytes;
	struct uid_use *next;
	TAILQ_HEAD(, session) jsess; /* side->jlock: its sessions with jobs queued, in turn */
	TAILQ_ENTRY(uid_use) jlink;  /* side->jlock: in side->jturn while jsess has any */
};

/* The bounds of side.h that each uid has a share of. */
enum objfs_side_bound { OBJFS_SIDE_SESSIONS, OBJFS_SIDE_CAPS, OBJFS_SIDE_RING };

struct cap {
	uint8_t token[OBJFS_TOKEN_LEN];
	uid_t uid;
	uint64_t ino, generation;
	struct objfs_object *obj;    /* one reference, dropped with the record */
	unsigned sessions;           /* side->lock */
	double last_used;            /* side->lock; monotonic seconds */
	struct objfs_side *side;
	struct cap *next;            /* side->lock */
	struct cap *hnext;           /* side->lock: side->chash bucket */
};

struct job;

struct objfs_side {
	struct objfs_side_cfg cfg;   /* sock_name is NULL: not kept */
	char sock[OBJFS_SOCK_LEN];
	struct objfs_cache *cache;
	int lfd, wakefd;
	int spare;                   /* the accept thread's reserve descriptor (EMFILE) */
	pthread_t acceptor;
	int acceptor_started;
	int stopping;                 /* atomic: objfs_side_free sets it */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct cap *caps;            /* lock */
	unsigned ncaps;              /* lock */
	struct cap **chash;          /* lock: records by keyed token hash (side_cap.c) */
	size_t chash_n;              /* buckets, a power of two */
	uint64_t chash_key;          /* random, constant after objfs_side_caps_init */
	double purged_at;            /* lock: last expiry walk */
	struct uid_use *uids;        /* lock */
	unsigned pending;            /* lock: connections before their HELLO */
	uint64_t ring_bytes;         /* lock: rings mapped by sessions */
	struct session *sessions;    /* lock */
	uint64_t next_session;       /* lock */
	struct objfs_side_stats st;  /* lock */
	uint64_t fill_runs;          /* atomic: objfs_cache_fill calls of fills */
	uint64_t fills_cancelled;    /* atomic: pieces left unfilled by their session's end */
	uid_t owner;                 /* the daemon's euid: the mounting user */
	/* Fill workers: jobs (one piece each) from every session, queued per
	 * session and taken in turn between uids and their sessions. */
	pthread_mutex_t jlock;
	pthread_cond_t jcond;
	TAILQ_HEAD(, uid_use) jturn; /* jlock: uids with jobs queued, in turn */
	unsigned jqueued;            /* jlock: jobs queued for a worker */
	int jstop;                   /* jlock */
	pthread_t *workers;
	unsigned nworkers;
};

/* Constant-time comparison of two OBJFS_TOKEN_LEN-byte tokens. */
int objfs_side_token_eq(const uint8_t *a, const uint8_t *b);

/*
 * The record whose token is @token, with one session reference taken, or
 * NULL. A keyed hash picks the bucket; within it the comparison takes the
 * same time wherever (or whether) the record is (side_cap.c).
 */
struct cap *objfs_side_cap_ref(struct objfs_side *s, const uint8_t *token);

/* Makes the token hash table (objfs_side_new, once). 0, -ENOMEM or -EIO. */
int objfs_side_caps_init(struct objfs_side *s);

/* Drops a reference of objfs_side_cap_ref; the TTL restarts. Accepts NULL. */
void objfs_side_cap_unref(struct objfs_side *s, struct cap *c);

/* At the end, with side->lock held and every session ended: frees every record. */
void objfs_side_caps_drain(struct objfs_side *s);

/*
 * The record of @uid, made when missing (NULL only when out of memory).
 * objfs_side_uid_put frees it once every count is zero. side->lock held.
 */
struct uid_use *objfs_side_uid_get(struct objfs_side *s, uid_t uid);
void objfs_side_uid_put(struct objfs_side *s, struct uid_use *u);

/* A quarter of a global bound, at least 1: a uid's share by default, and
 * what root and the mounting user each keep in reserve (side.h). */
static inline uint64_t objfs_side_quarter(uint64_t global)
{
	return global / 4 ? global / 4 : 1;
}

/* A per-uid share of a global bound (side.h: a quarter, at least 1). */
static inline uint64_t objfs_side_share(uint64_t global, uint64_t per_uid)
{
	if (per_uid)
		return per_uid < global ? per_uid : global;
	return objfs_side_quarter(global);
}

/*
 * Whether @u may take @n more of bound @b (side.h): 0; 2 past the global
 * bound or, for a uid other than root and the mounting user, into their
 * reserve; else 1 past the uid's share. side->lock held.
 */
int objfs_side_room(const struct objfs_side *s, const struct uid_use *u,
		    enum objfs_side_bound b, uint64_t n);

/* Whether @uid is root or the mounting user (they have a reserve). */
static inline int objfs_side_reserved(const struct objfs_side *s, uid_t uid)
{
	return uid == 0 || uid == s->owner;
}

/*
 * The SIGBUS guard (side_guard.c). install: once per process, before the
 * first ring is mapped. add: registers the ring [start, start + len) with
 * the word that gets EFAULT if a SIGBUS hits it (then the ring is replaced
 * by anonymous memory); -EBUSY when the table is full. del: before unmap,
 * once no copy into the ring can run.
 */
int objfs_side_guard_install(void);
int objfs_side_guard_add(void *start, size_t len, int *failed);
void objfs_side_guard_del(void *start);

#endif
