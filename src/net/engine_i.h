/*
 * engine_i.h: what engine.c and engine_direct.c share; nothing else
 * includes it (but the unit tests and the direct_head fuzz target).
 *
 * engine.c runs the event loop and drives libcurl; engine_direct.c is the
 * direct receive path for ranged GETs, plain or TLS (see its file header). A
 * request on either path is in its thread's in-flight list, so the stall
 * watchdog, retries and the final accounting are the same for both.
 *
 * Calls go one way only: engine.c calls the objfs_direct_* functions below;
 * engine_direct.c calls nothing of engine.c. What it needs to judge a
 * response is in http_resp.h, which both paths call and which calls
 * neither. The direct path hands every attempt it is done with back to its
 * caller (objfs_direct_progress fills an array of struct objfs_direct_end);
 * engine.c then takes the request off the in-flight list and concludes it
 * (success, failure or retry) or starts it again, on whichever path. The
 * in-flight list is engine.c's alone: objfs_direct_start says whether the
 * request got a connection, and engine.c puts it in flight.
 *
 * Lists are <sys/queue.h> TAILQs linked through objfs_req.link: a request
 * is on at most one of them at a time.
 */
#ifndef OBJFS_ENGINE_I_H
#define OBJFS_ENGINE_I_H

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include "engine.h"
#include "spares.h"

#define EASY_POOL_MAX 64
#define DIRECT_ORIGINS 8

struct objfs_dconn;
struct objfs_direct_end;

/* A list of requests, linked through objfs_req.link. */
TAILQ_HEAD(objfs_req_list, objfs_req);

struct engine_thread {
	struct objfs_engine *e;
	pthread_t tid;
	CURLM *multi;
	pthread_mutex_t lock;
	struct objfs_req_list q; /* submitted, not started; guarded by lock */
	int stop;                /* guarded by lock */
	/* Engine thread only: */
	struct objfs_req_list delayed;  /* waiting for their retry time */
	struct objfs_req_list inflight; /* on a connection, or waiting for a
					   libcurl one: the watchdog's list */
	int64_t watched_ns;             /* last stall watchdog pass */
	CURL *pool[EASY_POOL_MAX];
	unsigned npool;
	int started;
	atomic_uint load; /* requests submitted here and not finished */
	unsigned per;     /* connections per host on this thread, each path */
	/* Direct path (engine thread only): */
	LIST_HEAD(, objfs_dconn) dconns; /* busy and idle connections */
	unsigned ndconns;                /* at most per */
	struct objfs_req_list dwait;     /* waiting for a connection (not in
					    flight: waiting is not a stall) */
	struct curl_waitfd *wfds;        /* per entries, for curl_multi_poll */
	struct objfs_direct_end *ends;   /* per entries, for objfs_direct_progress */
};

/* One address of an origin. */
struct direct_addr {
	struct sockaddr_storage sa;
	socklen_t salen;
	/* Failed to connect (refused, unreachable, or not within the
	 * timeout): no new connection goes there before this time
	 * (monotonic, ns). */
	int64_t rest_until_ns;
};

#define DIRECT_ADDRS 16 /* addresses kept per origin (S3 answers with 8) */

/*
 * Resolves @host (a name, or a numeric address without brackets) for TCP
 * port @port into at most @cap addresses at @out (rest_until_ns 0).
 * Returns how many (>= 1), or -errno. Runs on the engine's resolver
 * thread, never on an engine thread; may block. The engine's default is
 * objfs_direct_resolve (getaddrinfo, IPv4 and IPv6); tests set their own
 * in e->resolve before the first request.
 */
typedef int (*objfs_resolve_fn)(void *arg, const char *host, const char *port,
				struct direct_addr *out, unsigned cap);

/*
 * A failure budget: how a part of the direct path (the path itself, or
 * tls_rx reading the records) is switched off for one origin and back on.
 * Off after @limit failures within @window_ns of the first of them, for a
 * rest of @rest_ns that doubles with each switch-off in a row up to
 * @max_ns, and starts over once the origin stayed on for twice its last
 * rest; then on again. A failure while off is not counted (it comes from a
 * connection made before). So a one-off failure (a hiccup, a record
 * tampered with on the path) costs that connection's attempt only, a
 * server the part cannot follow costs @limit attempts per rest, and no
 * failure turns a part off for the rest of the mount. Guarded by
 * e->origin_lock.
 */
struct direct_rule {
	unsigned limit;
	int64_t window_ns, rest_ns, max_ns;
	const char *off_text; /* the log's words for off, then on again */
	const char *on_text;
};

struct direct_budget {
	unsigned fails;       /* failures counted since first_ns */
	unsigned offs;        /* switch-offs in a row */
	int off;              /* switched off, not yet seen on again */
	int64_t first_ns;     /* the first failure counted (monotonic) */
	int64_t off_until_ns; /* off before this time (monotonic) */
};

/* Whether @b of origin @auth is on at @now (logs the first call that
 * finds it on again after a rest). */
int objfs_direct_budget_on(struct direct_budget *b, const struct direct_rule *rule,
			   const char *auth, int64_t now);
/* A failure (@why) at @now: returns the rest in ns when it switches @b
 * off (logged), else 0. */
int64_t objfs_direct_budget_fail(struct direct_budget *b, const struct direct_rule *rule,
				 const char *auth, const char *why, int64_t now);

/* An origin ("http://host[:port]" or "https://host[:port]", as the URL
 * writes it: the origin key) and its addresses. */
struct direct_origin {
	char authority[256];
	/* https: the TLS session of the last handshake (or the last ticket the
	 * server sent), offered on the next connection (resumption); owned
	 * here, NULL if none. */
	struct ssl_session_st *sess;
	/* The host's addresses as last resolved (or, until then, the one
	 * libcurl connected to); new connections take them round robin from
	 * next on, skipping resting ones. */
	struct direct_addr addrs[DIRECT_ADDRS];
	unsigned naddrs;
	unsigned next;
	int64_t resolve_due_ns; /* resolve again from this time on */
	int64_t resolved_ns;    /* last resolution ended (0: none yet) */
	int resolving;          /* 1: asked of the resolver thread, 2: under way */
	/* The direct path for this origin: off after an answer that says
	 * something about the server (not 206 with a Content-Length, a
	 * redirect, a head that is not strict HTTP/1.x, a certificate libcurl
	 * accepted and this path refused); e->direct_rule. */
	struct direct_budget direct;
	/* https: tls_rx reading its connections' records: off after records
	 * it refused on several connections; e->tls_rx_rule. */
	struct direct_budget tls_rx;
};

#define DIRECT_REST_NS (30 * 1000000000LL)       /* first rest of the direct path */
#define TLS_RX_FAILS 3                           /* tls_rx: failures that turn it off */
#define TLS_RX_WINDOW_NS (60 * 1000000000LL)     /* ... within this time */
#define TLS_RX_REST_NS (60 * 1000000000LL)       /* first rest of tls_rx */
#define REST_MAX_NS (3600 * 1000000000LL)        /* longest rest of either */
#define ADDR_REST_NS (30 * 1000000000LL)         /* rest of an address */
#define RESOLVE_EVERY_NS (60 * 1000000000LL)     /* re-resolution period */
#define RESOLVE_GAP_NS (1000000000LL) /* all addresses resting: resolve again,
					 but not more often than this */

/* Spare whole-body buffers kept for reuse (engine.c, "Body buffers"). */
#define BODY_SPARES 4

struct objfs_engine {
	struct objfs_engine_cfg cfg;
	struct objfs_spares spares;      /* whole-body buffers kept for reuse */
	char *ca_file;
	CURLSH *share;
	pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];
	unsigned nthreads;
	struct engine_thread *th;
	atomic_uint rr;
	int direct;     /* cfg.direct and no proxy for http:// in the environment */
	int direct_tls; /* cfg.direct, HTTP/1.1 (not cfg.http2), no proxy for
			   https://, and ssl_ctx made: https GETs go direct too */
	struct ssl_ctx_st *ssl_ctx; /* the direct path's TLS client context:
				       the CA files and verification libcurl uses */
	pthread_mutex_t origin_lock;
	struct direct_origin origins[DIRECT_ORIGINS]; /* guarded by origin_lock */
	unsigned norigins;                            /* guarded by origin_lock */
	/* Set by objfs_direct_engine_init; tests may change them before the
	 * first request. */
	struct direct_rule direct_rule; /* the direct path: off at one answer */
	struct direct_rule tls_rx_rule; /* tls_rx: off at TLS_RX_FAILS */
	/* The resolver thread (engine_direct.c), started with the first
	 * origin learned; the fields are guarded by origin_lock. */
	pthread_cond_t resolve_cond; /* an origin asks, or stop */
	pthread_t resolver;
	int resolver_started, resolver_stop;
	/* Set by objfs_engine_new; tests may change them before the first
	 * request (then they are read under origin_lock only). */
	objfs_resolve_fn resolve;
	void *resolve_arg;
	int64_t resolve_every_ns; /* RESOLVE_EVERY_NS */
	int64_t addr_rest_ns;     /* ADDR_REST_NS */
	int direct_inited;        /* objfs_direct_engine_init ran */
	atomic_int tls_told;      /* a failed TLS handshake was logged at error */
};

/* engine_direct.c, called by engine.c on the engine thread that owns @th. */

/*
 * An attempt the direct path is done with, handed back to engine.c. Its
 * connection is already kept idle or closed, and r->dconn is NULL; @r is
 * still on th->inflight.
 */
struct objfs_direct_end {
	struct objfs_req *r;
	int again;    /* 1: start @r again without counting the attempt: its
			 kept-alive connection was stale, or it was handed to
			 libcurl (r->no_direct set). 0: conclude it with: */
	int err;      /* 0 or -errno */
	int retry;    /* whether @err may be retried */
	int64_t ttfb; /* microseconds to the complete head, < 0 if none */
	struct objfs_req *next; /* @r was a part of a joined GET, done: the
				   connection goes on with this part, which
				   waited (not in flight) until now: the
				   caller puts it in flight */
};

/* Sets the direct path's part of a new engine (origin table, resolver
 * defaults); 0 or -errno. objfs_direct_engine_free undoes it, after the
 * engine threads have stopped, and accepts an engine it never set up
 * (zeroed). */
int objfs_direct_engine_init(struct objfs_engine *e);
void objfs_direct_engine_free(struct objfs_engine *e);
/* The default resolver: getaddrinfo, IPv4 and IPv6 (see objfs_resolve_fn). */
int objfs_direct_resolve(void *arg, const char *host, const char *port, struct direct_addr *out,
			 unsigned cap);
/* Whether direct receive can be used at all for http:// (@tls 0) or
 * https:// (@tls 1) URLs: no proxy configured for them. */
int objfs_direct_usable(int tls);
/*
 * Starts @r on the direct path. 0: it is on a connection (the caller puts
 * it in flight); 1: it waits in th->dwait for one (see
 * objfs_direct_next_waiting); -EAGAIN: it must go through libcurl.
 */
int objfs_direct_start(struct engine_thread *th, struct objfs_req *r);
/* After a libcurl transfer of @url on @h (@ok: it ended with CURLE_OK):
 * remembers that an origin answers, and the address libcurl connected to,
 * so later ranged GETs can go direct (and has the host's addresses
 * resolved). An https origin only once libcurl's transfer succeeded. */
void objfs_direct_learn(struct objfs_engine *e, CURL *h, const char *url, int ok);
/* Fills th->wfds for curl_multi_poll; returns how many. */
unsigned objfs_direct_waitfds(struct engine_thread *th);
/*
 * Moves the direct connections along after a poll (@nwfds: entries of
 * th->wfds that poll filled; never blocks), from *@cursor (NULL: the
 * first), and writes the attempts that ended into @ends. Stops once @cap
 * attempts have ended: *@cursor is then the next connection to move, to
 * call again with; NULL when every connection was moved. Returns how many
 * ended; the caller concludes or restarts each. Between two calls of one
 * walk the caller may conclude attempts but must start none (a start may
 * close an idle connection, the cursor among them).
 */
unsigned objfs_direct_progress(struct engine_thread *th, unsigned nwfds,
			       struct objfs_direct_end *ends, unsigned cap,
			       struct objfs_dconn **cursor);
/*
 * The first request of th->dwait, taken off it, when a connection can be
 * had now; else NULL. The caller starts it again, uncounted (it may go
 * direct again, or to libcurl).
 */
struct objfs_req *objfs_direct_next_waiting(struct engine_thread *th);
/* Closes the connection of in-flight @r (stalled, or the engine stops);
 * the caller takes @r off the in-flight list. */
void objfs_direct_abort(struct engine_thread *th, struct objfs_req *r);
/* Engine stopping: closes the connections (th->dwait is failed by engine.c
 * with its other lists). */
void objfs_direct_free(struct engine_thread *th);
/*
 * Parses response head @head (@end bytes, ending with CRLFCRLF) into @r
 * through http_resp's header code (objfs_http_header_line); *keep: the
 * connection may serve another request; *chunked: a Transfer-Encoding was
 * given. 0, or -EPROTO when it is not an HTTP/1.x response.
 */
int objfs_direct_parse_head(struct objfs_req *r, const char *head, size_t end, int *keep,
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
