/*
 * engine_i.h: what engine.c and engine_direct.c share; nothing else
 * includes it.
 *
 * engine.c runs the event loop and drives libcurl; engine_direct.c is the
 * direct receive path for plain-HTTP ranged GETs (see its file header). A
 * request on either path is in its thread's in-flight list, so the stall
 * watchdog, retries and the final accounting are the same for both.
 */
#ifndef OBJFS_ENGINE_I_H
#define OBJFS_ENGINE_I_H

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "engine.h"

#define EASY_POOL_MAX 64
#define DIRECT_ORIGINS 8

struct objfs_dconn;

struct engine_thread {
	struct objfs_engine *e;
	pthread_t tid;
	CURLM *multi;
	pthread_mutex_t lock;
	struct objfs_req *q_head, *q_tail; /* guarded by lock */
	int stop;                          /* guarded by lock */
	/* Engine thread only: */
	struct objfs_req *delayed;
	struct objfs_req *inflight; /* doubly linked through next/prev */
	int64_t watched_ns;         /* last stall watchdog pass */
	CURL *pool[EASY_POOL_MAX];
	unsigned npool;
	int started;
	atomic_uint load; /* requests submitted here and not finished */
	unsigned per;     /* connections per host on this thread, each path */
	/* Direct path (engine thread only): */
	struct objfs_dconn *dconns;          /* busy and idle connections */
	unsigned ndconns;
	struct objfs_req *dwait, *dwait_tail; /* waiting for a connection */
	struct objfs_req *again; /* to start again, uncounted, once the
				    connection list is not being walked */
	struct curl_waitfd *wfds;            /* per entries, for curl_multi_poll */
};

/* A plain-HTTP origin ("host[:port]" as in the URL) and the address libcurl
 * connected to for it. */
struct direct_origin {
	char authority[256];
	struct sockaddr_storage sa;
	socklen_t salen;
	int off; /* answered a range without 206 + Content-Length: curl only */
};

struct objfs_engine {
	struct objfs_engine_cfg cfg;
	char *ca_file;
	CURLSH *share;
	pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];
	unsigned nthreads;
	struct engine_thread *th;
	atomic_uint rr;
	int direct; /* cfg.direct and no proxy in the environment */
	pthread_mutex_t origin_lock;
	struct direct_origin origins[DIRECT_ORIGINS]; /* guarded by origin_lock */
	unsigned norigins;                            /* guarded by origin_lock */
};

/* engine.c, for the direct path. */
int64_t objfs_engine_now_ns(void);
/* Takes one response header line (with its CRLF) into @r, like curl's
 * header callback; the status line sets r->status. */
void objfs_engine_header_line(struct objfs_req *r, char *line, size_t n);
/* Validates a 2xx ranged response before its first body byte: 0 or -errno. */
int objfs_engine_check_range(struct objfs_req *r);
/* Starts (another) attempt of @r on this thread, on whichever path. */
void objfs_engine_launch(struct engine_thread *th, struct objfs_req *r);
void objfs_engine_inflight_add(struct engine_thread *th, struct objfs_req *r);
/* Takes @r off the in-flight list (its connection stays as it is). */
void objfs_engine_inflight_unlink(struct engine_thread *th, struct objfs_req *r);
/* An attempt ended with @err: retry it, or finish the request. @ttfb in
 * microseconds, < 0 when no byte arrived. */
void objfs_engine_conclude(struct engine_thread *th, struct objfs_req *r, int err, int retry,
			   int64_t ttfb);

/* engine_direct.c */
/* Whether direct receive can be used at all (no proxy configured). */
int objfs_direct_usable(void);
/* Starts @r on the direct path: 0 (on a connection, or waiting for one), or
 * -EAGAIN when it must go through libcurl. */
int objfs_direct_start(struct engine_thread *th, struct objfs_req *r);
/* After a libcurl transfer of @url on @h: remembers where a plain-HTTP
 * origin lives, so later ranged GETs can go direct. */
void objfs_direct_learn(struct objfs_engine *e, CURL *h, const char *url);
/* Fills th->wfds for curl_multi_poll; returns how many. */
unsigned objfs_direct_waitfds(struct engine_thread *th);
/* Moves every direct connection along after a poll (never blocks). */
void objfs_direct_progress(struct engine_thread *th, unsigned nwfds);
/* Closes the connection of in-flight @r (stalled, or the engine stops). */
void objfs_direct_abort(struct engine_thread *th, struct objfs_req *r);
/* Engine stopping: closes the idle connections (th->dwait is failed by
 * engine.c with its other queues). */
void objfs_direct_free(struct engine_thread *th);
/*
 * Parses response head @head (@end bytes, ending with CRLFCRLF) into @r
 * through engine.c's header code; *keep: the connection may serve another
 * request; *chunked: a Transfer-Encoding was given. 0, or -EPROTO when it
 * is not an HTTP/1.x response. @head is only read.
 */
int objfs_direct_parse_head(struct objfs_req *r, char *head, size_t end, int *keep,
			    int *chunked);
/*
 * Writes the request text of ranged GET @r into @out (@cap bytes) and the
 * URL's "host[:port]" into @auth (@acap bytes). Returns the text's length,
 * or -EAGAIN when @r is not one for the direct path (not http://, user
 * info, characters a request line cannot carry, too long).
 */
int objfs_direct_request_text(const struct objfs_req *r, char *out, size_t cap, char *auth,
			      size_t acap);

#endif
