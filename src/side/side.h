/*
 * side: the daemon half of the GPU side API (the client half is libobjfs,
 * lib/client.c and lib/client_cuda.c; the contract between them is
 * include/objfs/side_proto.h). Two files behind this header: side.c
 * (sessions, fills, the ring) and side_cap.c (capabilities), sharing
 * side_i.h.
 *
 * A capability is granted through the FUSE ioctl on an open file (fs.c
 * calls objfs_side_grant with the caller's uid): a record holding a random
 * 32-byte token, the uid and inode it is bound to, and its own copy of the
 * pinned object version (cache identity, size, ETag), so it stays valid
 * after the file is closed. Unused records expire after cap_ttl seconds.
 *
 * Clients connect to one SOCK_SEQPACKET unix socket. An accept thread
 * starts one thread per connection (bounded per uid before HELLO); a
 * session thread validates HELLO (token, SO_PEERCRED uid, inode, a ring
 * memfd on tmpfs of the right size and seals, the uid's bounds), maps the
 * ring, then serves the session: one per (process, mount) since protocol
 * version 2, its handles being capabilities added by ATTACH
 * (bounded by the uid's capability share) and dropped by DETACH. A FILL
 * request is a batch of (handle, offset, length) entries, placed in ring
 * pieces by the packing side_proto.h defines (small entries share a
 * slot); the session thread dispatches the pieces in order: for each
 * piece it waits for the slot's release word (wrap-around) and hands the
 * piece to a pool of fill workers shared by all sessions. A worker starts
 * objfs_cache_fill() into the slot: what the shared block cache holds is
 * copied from it (the same blocks that serve FUSE reads), whole blocks on
 * the disk cache are read into the slot, the rest is fetched from the
 * network straight into the slot; up to one piece per slot is in flight,
 * so the ring is the fill's readahead window, and a cold fill received
 * straight into it comes close to curl (docs/benchmarks.md). Whoever
 * finishes publishes the sequence words of the finished pieces strictly in
 * piece order. A peer that vanishes (EOF or a hangup on the socket) ends
 * its session: no more of its pieces are started, those queued are
 * dropped; nothing else is affected. A session's ring (pages and budget)
 * lasts until its client has hung up, however the session ended: a client
 * may still copy pieces published before the end, and may keep the memfd
 * after; at the hangup its pages are punched out and the budget given back
 * together.
 *
 * Ownership: the side server borrows the cache and, through granted
 * records, the store and node paths: objfs_side_free() must run before
 * they are freed (mount.c frees it after the FUSE loop ends).
 */
#ifndef OBJFS_SIDE_H
#define OBJFS_SIDE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache.h"
#include "object.h"
#include "objfs/side_proto.h"

struct objfs_side;

/*
 * Bounds. Every global bound has a per-uid share (0: a quarter of the
 * global one) so that one user cannot deny the side API to the others
 * (docs/reliability.md), and root and the mounting user (the daemon's
 * euid) each keep a quarter of every bound out of the other uids' reach,
 * so that they can always open: sessions and rings are refused at HELLO
 * (-EBUSY for sessions, -ENOMEM for the global ring budget, -EDQUOT for a
 * uid's), capabilities at the ioctl (-ENOSPC). A connection holds no
 * session before its HELLO proved a capability of its own uid; until then
 * it counts as pending, at most OBJFS_SIDE_PENDING_PER_UID per uid.
 */
#define OBJFS_SIDE_PENDING_PER_UID 4

struct objfs_side_cfg {
	uint32_t ring_slots;     /* told to clients through the capability */
	uint32_t ring_slot_size; /* bytes, multiple of 4096 */
	unsigned max_sessions;   /* concurrent sessions; more are refused */
	unsigned uid_sessions;   /* of them one uid's; 0: a quarter */
	unsigned max_caps;       /* capability records kept */
	unsigned uid_caps;       /* of them one uid's; 0: a quarter */
	uint64_t ring_budget;    /* bytes of rings mapped at once; 0: a quarter of RAM */
	uint64_t uid_ring_budget; /* of them one uid's; 0: a quarter */
	double cap_ttl;          /* seconds an unused capability stays valid */
	unsigned fill_threads;   /* fill workers; 0: one per core, 4 to 64 */
	int only_uid;            /* >= 0: connections of other uids are closed at accept */
	const char *sock_name;   /* NULL: "@objfs.<pid>.<random>"; copied */
};

/*
 * What a capability grants access to: the open object version of the
 * handle it was granted through (the capability takes its own reference,
 * so it may outlive the handle), and the inode it is bound to.
 */
struct objfs_side_obj {
	uint64_t ino;
	uint64_t generation;
	struct objfs_object *obj;   /* borrowed for the call; referenced by the grant */
};

struct objfs_side_stats {
	uint64_t sessions_open, sessions_total, sessions_refused;
	uint64_t ring_bytes;   /* rings mapped now */
	uint64_t replies_deferred; /* DONEs a full socket made wait for the session thread */
	uint64_t caps, fills, fill_bytes, fill_errors;
	uint64_t ring_wait_us; /* dispatch waited for consumers to free a slot */
	uint64_t fill_runs;    /* cache fills started: coalesced runs of entries (fills
				* counts requests, fill_errors failed entries) */
	uint64_t fills_cancelled; /* pieces of requests left unfilled because their
				   * session ended (a client gone, a protocol error) */
};

/*
 * Creates the server and starts its accept thread on a new socket. @cache
 * is borrowed until objfs_side_free(). 0 or -errno.
 */
int objfs_side_new(const struct objfs_side_cfg *cfg, struct objfs_cache *cache,
		   struct objfs_side **out);

/*
 * Grants a capability for @o to @uid and describes it in @cap (token,
 * socket name, geometry). Thread-safe. 0, -ENOSPC (too many live
 * capabilities), -EINVAL or -ENOMEM.
 */
int objfs_side_grant(struct objfs_side *s, uid_t uid, const struct objfs_side_obj *o,
		     struct objfs_side_cap *cap);

void objfs_side_get_stats(struct objfs_side *s, struct objfs_side_stats *st);

/*
 * Stops accepting, ends every session (their clients see EOF and poison
 * their rings), waits for the threads and for fetches started on behalf of
 * capabilities, and frees everything. Accepts NULL.
 */
void objfs_side_free(struct objfs_side *s);

#endif
