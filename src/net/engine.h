/*
 * engine: the one fetch engine every byte of objfs goes through.
 *
 * N engine threads each own a libcurl multi handle and run an event loop
 * (curl_multi_poll, woken by curl_multi_wakeup when work is queued). Requests
 * go to the least loaded thread; connections are pooled per thread
 * and capped per host so warm keep-alive connections are reused. DNS and TLS
 * sessions are shared between threads through one share handle.
 *
 * A request is a plain struct the caller owns. The engine validates every
 * response against what was asked before a byte reaches the caller's buffer
 * (status, Content-Range, object size, pinned ETag): a server that ignores
 * Range (200 instead of 206) is handled by skipping to the offset in the
 * body; one that answers a different range or a different object version
 * fails the request. Transient failures (connection errors, stalls, 5xx,
 * 429, truncated bodies) are retried with exponential backoff and jitter.
 * A stall is an attempt that receives nothing for cfg.timeout seconds once
 * its request is on a connection; the engine's own watchdog ends it (see
 * engine.c), so an attempt never waits much past the timeout.
 *
 * With cfg.direct, ranged GETs over HTTP/1.1, plain or TLS, skip libcurl's
 * receive buffer: the engine's own small reader (engine_direct.c) writes
 * request and validates the head itself and lets the kernel's recv() (or
 * OpenSSL's SSL_read, verifying as libcurl does) write the body into dst. It takes only the happy path; anything else is handed to
 * libcurl, so both paths give the same results and errors.
 *
 * Errors come out as -errno only: http_resp.h holds the tables from HTTP
 * status and S3 error code to errno, and the response checks both receive
 * paths share.
 */
#ifndef OBJFS_ENGINE_H
#define OBJFS_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

struct curl_slist;
struct objfs_engine;

struct objfs_engine_cfg {
	unsigned threads;        /* engine threads, >= 1 */
	unsigned max_host_conns; /* per host, over all threads */
	const char *ca_file;     /* NULL: system CA store */
	int insecure;            /* skip TLS verification */
	double timeout;          /* seconds without progress before a retry */
	unsigned retries;        /* extra attempts after the first */
	int direct;              /* ranged GETs over HTTP/1.1 (http and
				    https) received straight into dst, not
				    through libcurl's buffer (engine_direct.c) */
	int redirects;           /* enum objfs_redirects: which 3xx are followed */
	int http2;               /* offer HTTP/2 over TLS (-o http_version=2);
				    0: HTTP/1.1 only, a connection per request
				    in flight, as parallel ranged GETs want */
};

/*
 * Which redirects the engine follows (-o allow_redirects=). Whatever the
 * policy, https never redirects to http (a downgrade hands the bytes, and
 * S3's signed headers, to anyone on the path). The default keeps a source
 * within its origin (scheme, host and port of the request's URL), so a
 * listing or a data GET cannot be sent to a host the user never named.
 */
enum objfs_redirects {
	OBJFS_REDIR_ORIGIN = 0, /* within the request's origin only (default) */
	OBJFS_REDIR_ANY,        /* to any host, https -> http still refused */
	OBJFS_REDIR_NONE,       /* none: a 3xx to follow fails with -EIO */
};

enum objfs_method { OBJFS_GET, OBJFS_HEAD };

struct objfs_req {
	/* Set by the caller; borrowed by the engine until done() is called. */
	const char *url;
	enum objfs_method method;
	struct curl_slist *headers; /* extra request headers, or NULL */
	int64_t off;                /* ranged GET: first byte */
	size_t len;                 /* ranged GET: bytes; 0 = whole body */
	char *dst;                  /* ranged GET: receives exactly len bytes */
	int64_t expect_size;        /* object size, -1 if unknown */
	const char *etag;           /* pinned ETag (sent as If-Match when strong) */
	int64_t expect_mtime;       /* pinned Last-Modified (no ETag known), -1 none:
				       an answer that sends another is stale */
	int no_redirect;            /* do not follow 3xx; HEAD and whole-body
				       GETs then succeed with the 3xx status */
	size_t body_max;            /* whole-body GET: cap, bytes */
	int64_t deadline_ns;        /* 0, or a monotonic time (objfs_now_ns) by
				       which the request, retries included, has
				       ended: past it an attempt is cut and the
				       request fails with -ETIMEDOUT (a listing
				       trickling at 1 byte/s is never a stall) */
	void (*done)(struct objfs_req *r); /* runs on an engine thread */
	void *priv;

	/* Results, valid from done() on. */
	int err;                /* 0 or -errno */
	long status;            /* last HTTP status, 0 if none */
	size_t got;             /* bytes delivered (dst or body) */
	char *body;             /* whole-body GET, or error body: NUL-terminated,
				   owned by the request, freed by objfs_req_clear */
	int64_t total;          /* object size (Content-Range or Length), -1 */
	int64_t mtime;          /* Last-Modified, -1 */
	char etag_out[192];     /* ETag of the response, "" if none */
	char content_type[128];
	char location[1024];    /* Location of a 3xx */
	char amz_region[64];    /* x-amz-bucket-region */
	char s3_code[64];       /* <Code> of an S3 error body, "" if none */
	unsigned attempts;

	/* Engine private. */
	size_t body_cap;
	int64_t skip;           /* 200 instead of 206: bytes left to skip */
	int64_t clen;           /* Content-Length of this response, -1 */
	int64_t cr_first, cr_last, cr_total; /* Content-Range, cr_first -1 */
	int checked;            /* response headers validated */
	int full_early;         /* all wanted bytes arrived; rest discarded */
	int64_t due_ns;         /* retry time */
	int64_t progress_ns;    /* in flight: last byte received, or the request
				   going out on a connection; 0 while curl still
				   waits for a connection */
	struct curl_slist *own_headers;
	void *easy;             /* in flight: its curl handle */
	void *dconn;            /* in flight on the direct path: its connection */
	int no_direct;          /* this request goes through libcurl only */
	int64_t sent_ns;        /* direct path: request written (for ttfb) */
	size_t rcvd;            /* direct path: bytes received on the connection
				   for this request (head and body) */
	int64_t slow_ns;        /* direct path: start of the low-speed window
				   (engine.c, watch_stalls); 0 none yet */
	size_t slow_mark;       /* rcvd at slow_ns */
	struct objfs_req *joined; /* direct path: the next part of this GET (a
				     waiting request whose range continues
				     this one's, engine_direct.c "Joined GETs") */
	int no_join;            /* direct path: a GET this request led with
				   parts joined to it ended early: it goes
				   alone from then on */
	size_t head_bytes;      /* bytes of the current response head so far */
	int refused;            /* the head was refused (too large, a redirect
				   the policy forbids): -EIO, not retried */
	int redirects;          /* enum objfs_redirects, from the engine's cfg */
	char curl_err[256];     /* libcurl's words for a failed attempt
				   (CURLOPT_ERRORBUFFER, CURL_ERROR_SIZE) */
	struct objfs_engine *eng; /* submitted to: r->body's spare goes back there */
	/* On one engine list at a time (engine_i.h): the submit queue, the
	 * retry list, the direct path's wait queue or the in-flight list. */
	TAILQ_ENTRY(objfs_req) link;
};

/* Bytes the current attempt of @r asks the server for, from r->off: its
 * own, or with parts joined to it on the direct path, theirs too. */
static inline size_t objfs_req_span(const struct objfs_req *r)
{
	size_t n = 0;

	for (; r; r = r->joined)
		n += r->len;
	return n;
}

/* Creates the engine and starts its threads. 0 or -errno. */
int objfs_engine_new(const struct objfs_engine_cfg *cfg, struct objfs_engine **out);
/* Stops the threads, fails queued requests with -ECANCELED. Accepts NULL. */
void objfs_engine_free(struct objfs_engine *e);

/* Prepares @r for (re)use: zeroes results, keeps nothing. */
void objfs_req_init(struct objfs_req *r);
/*
 * Frees what the engine allocated in @r (body; a listing-size body goes
 * back to the engine that received it, for its next one). r->body is
 * invalid afterwards. A request that was submitted is cleared before its
 * engine is freed. Accepts NULL.
 */
void objfs_req_clear(struct objfs_req *r);

/* Queues @r; r->done is called exactly once, on an engine thread. */
void objfs_engine_submit(struct objfs_engine *e, struct objfs_req *r);

/*
 * Runs @n requests concurrently and waits for all of them. Their done
 * fields are ignored. Returns 0 when every request succeeded, else the
 * first request's error in array order.
 */
int objfs_engine_run(struct objfs_engine *e, struct objfs_req **reqs, size_t n);

#endif
