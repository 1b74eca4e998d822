/*
 * engine_direct: ranged GETs over HTTP/1.1, plain or TLS, received
 * straight into the caller's buffer: the kernel's recv() writes the body
 * into r->dst, and over https OpenSSL's SSL_read, or tls_rx (tls_rx.h) once
 * a TLS 1.3 connection is idle, decrypts into it. libcurl would copy every
 * body byte out of its own receive buffer (figures: docs/benchmarks.md).
 *
 * Scope: only the happy path of a ranged GET. Proxies (the path is off for
 * a scheme when a proxy variable libcurl reads is set), HTTP/2, redirects,
 * connection errors, failed TLS handshakes, error statuses, chunked or
 * length-less bodies and servers that ignore Range are handed to libcurl
 * ("fallback", uncounted) before a body byte is used, so errors and their
 * messages come from one place (engine.c). The head goes through the same
 * parser and range check as libcurl's (http_resp.c); body bytes reach dst
 * only after it, and never past r->len.
 *
 * Failure budgets (struct direct_budget): an answer that speaks of the
 * server rather than the moment (a 2xx that is not "206 with
 * Content-Length", a redirect, a head that is not strict HTTP/1.x, a
 * certificate refused here that libcurl accepted) turns the path off for
 * the origin; TLS_RX_FAILS connections with a record tls_rx refused within
 * TLS_RX_WINDOW_NS turn tls_rx off for it. Each for a rest that doubles up
 * to REST_MAX_NS, never for good.
 *
 * Hand-back: this file calls nothing of engine.c. engine.c starts attempts
 * (objfs_direct_start) and keeps the in-flight list; objfs_direct_progress
 * returns those that ended, each with its verdict or "again" (a stale
 * kept-alive connection, a hand-over to libcurl). No request is started
 * while the connection list is walked (a start may close an idle one).
 * At most th->per connections per engine thread, kept alive (dc_get,
 * origin_pick); requests beyond wait in th->dwait, not in flight: waiting
 * is not a stall. A reused connection the server closed before answering
 * is retried on a new one, uncounted.
 *
 * Joined GETs: a request that gets a connection takes along the requests
 * waiting in th->dwait that continue its range (same URL, headers but
 * SigV4's signing time, pins) as one GET of at most JOIN_MAX bytes; each
 * part is handed back once its last byte is in. Only waiting requests are
 * joined, so nothing is delayed or overtaken; an attempt that ends early
 * puts the parts not begun back, in order (unjoin).
 *
 * Threading: everything runs on the engine thread that owns th, but the
 * origin table, shared with the other threads and the resolver thread
 * under e->origin_lock.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <arpa/inet.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "clock.h"
#include "engine_i.h"
#include "http_resp.h"
#include "log.h"
#include "stats.h"
#include "tls_rx.h"
#include "url.h"

#define REQ_MAX 8192   /* request text: S3 headers with a session token fit */
#define HEAD_MAX 16384 /* response head: larger ones go to libcurl */
#define JOIN_MAX ((size_t)64 << 20) /* bytes of one joined GET */
#define JOIN_SCAN 64   /* waiting requests looked at per part joined */

enum dc_state { DC_IDLE, DC_CONNECT, DC_TLS, DC_SEND, DC_HEAD, DC_BODY };
enum { DC_FAIL_ADDR = 1, DC_FAIL_SHORT = 2 }; /* why no connection was made */

struct objfs_dconn {
	int fd;
	enum dc_state state;
	int reused;    /* served a response before the current request */
	int keep;      /* the current response leaves the connection usable */
	int chunked;   /* the current response has a Transfer-Encoding */
	int wi;        /* index in th->wfds of the last poll, -1 if none */
	SSL *ssl;      /* https: the TLS session on fd, else NULL */
	short want;    /* https: what the last TLS call waits for (POLLIN or
			  POLLOUT), 0: what the state implies */
	/* https, TLS 1.3: the receiving half taken from OpenSSL once it is
	 * idle (tls_take), records decrypted into the destination; until
	 * then what taking it needs: the server's traffic secret (keylog)
	 * and the records OpenSSL read after the server's Finished */
	struct objfs_tls_rx *rx;
	unsigned char rx_secret[48];
	size_t rx_secret_len;
	uint64_t rx_records;
	int rx_counting;  /* the server's Finished was read: records count */
	int rx_never;     /* OpenSSL read something that changes the keys */
	int rx_failed;    /* the reader failed: a failure of its origin's tls_rx */
	int64_t ttfb;  /* microseconds from request to complete head */
	struct sockaddr_storage sa; /* the origin's address it went to */
	socklen_t salen;
	struct objfs_req *r;
	char auth[256];
	char req[REQ_MAX];
	size_t req_len, req_off;
	char head[HEAD_MAX];
	size_t head_len;
	size_t hoff;   /* DC_BODY: body bytes that came with the head are
			  head[hoff, head_len), taken before the socket's */
	LIST_ENTRY(objfs_dconn) link; /* th->dconns */
};

/* The attempts one objfs_direct_progress pass ended: the caller's array. */
struct ends {
	struct objfs_direct_end *v;
	unsigned n, cap;
};

/* Hands @r back to engine.c, to conclude with @err, @retry and @ttfb. Its
 * connection is already done with (dc_end). */
static void hand_back(struct ends *out, struct objfs_req *r, int err, int retry, int64_t ttfb)
{
	out->v[out->n++] = (struct objfs_direct_end){ .r = r, .err = err, .retry = retry,
						      .ttfb = ttfb };
}

/* Hands @r back to engine.c, to start again without counting the attempt
 * (after the walk over the connections: a start may close one). */
static void again(struct ends *out, struct objfs_req *r)
{
	out->v[out->n++] = (struct objfs_direct_end){ .r = r, .again = 1, .ttfb = -1 };
}

static const char *const state_names[] = { "idle", "connect", "tls", "send", "head", "body" };

/* The one place a connection changes state (debug log). */
static void dc_state(struct objfs_dconn *dc, enum dc_state s)
{
	objfs_debug("direct fd %d: %s -> %s", dc->fd, state_names[dc->state], state_names[s]);
	dc->state = s;
	dc->want = 0;
}

int objfs_direct_usable(int tls)
{
	/* what libcurl reads for http:// (not HTTP_PROXY: see CURLOPT_PROXY),
	 * and for https:// */
	static const char *const http[] = { "http_proxy", "all_proxy", "ALL_PROXY", NULL };
	static const char *const https[] = { "https_proxy", "HTTPS_PROXY", "all_proxy",
					     "ALL_PROXY", NULL };

	for (const char *const *v = tls ? https : http; *v; v++) {
		const char *val = getenv(*v);

		if (val && *val)
			return 0;
	}
	return 1;
}

/* Bytes a request line or header may not carry. */
static int bad_text(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] == 0x7f)
			return 1;
	return 0;
}

/* Appends like snprintf; sets *len past @cap when it does not fit. */
static void add(char *out, size_t cap, size_t *len, const char *s, size_t n)
{
	if (*len + n < cap)
		memcpy(out + *len, s, n);
	*len += n;
}

/* Where the authority of an origin key ("http://host[:port]") starts. */
static size_t key_scheme_len(const char *key)
{
	return key[4] == 's' ? 8 : 7;
}

/* Whether origin key @key is an https one. */
static int key_tls(const char *key)
{
	return key[4] == 's';
}

/* The origin key of http:// or https:// URL @url ("scheme://host[:port]",
 * as the URL writes it) into @key (@cap bytes): its length, or 0 when @url
 * is neither or it does not fit. */
static size_t url_origin(const char *url, char *key, size_t cap)
{
	size_t s = strncmp(url, "http://", 7) == 0 ? 7 : strncmp(url, "https://", 8) == 0 ? 8 : 0;
	size_t n;

	if (!s)
		return 0;
	n = strcspn(url + s, "/?#");
	if (!n || s + n >= cap)
		return 0;
	memcpy(key, url, s + n);
	key[s + n] = '\0';
	return s + n;
}

int objfs_direct_request_text(const struct objfs_req *r, char *out, size_t cap, char *auth,
			      size_t acap)
{
	const char *a, *path, *host = NULL, *port;
	char line[160];
	size_t klen = url_origin(r->url, auth, acap), alen, plen, hlen = 0, len = 0;
	int n;

	if (!klen)
		return -EAGAIN;
	a = r->url + key_scheme_len(auth);
	alen = klen - key_scheme_len(auth);
	port = key_tls(auth) ? ":443" : ":80";
	path = a + alen;
	plen = strlen(path);
	if (memchr(a, '@', alen) || bad_text(a, alen) || memchr(a, ' ', alen) ||
	    memchr(path, '#', plen) || memchr(path, ' ', plen) || bad_text(path, plen))
		return -EAGAIN;
	for (const struct curl_slist *s = r->headers; s; s = s->next) {
		size_t sl = strlen(s->data), nl = strcspn(s->data, ":;");

		/* curl's "Name:" (remove) and "Name;" (empty) forms, a line
		 * without a name or starting with white space (it would fold
		 * into the previous header), and text a header cannot carry:
		 * leave those to curl */
		if (nl == sl || !nl || s->data[0] == ' ' || s->data[0] == '\t' ||
		    s->data[nl] == ';' || nl + 1 == sl || bad_text(s->data, sl))
			return -EAGAIN;
		if (nl == 4 && strncasecmp(s->data, "host", 4) == 0) {
			if (host)
				return -EAGAIN; /* two Hosts: a server must refuse it */
			host = s->data;
		}
		if (nl == 5 && strncasecmp(s->data, "range", 5) == 0)
			return -EAGAIN;
	}
	add(out, cap, &len, "GET ", 4);
	if (*path == '/') {
		add(out, cap, &len, path, plen);
	} else {
		add(out, cap, &len, "/", 1); /* "http://host?q" */
		add(out, cap, &len, path, plen);
	}
	add(out, cap, &len, " HTTP/1.1\r\n", 11);
	if (!host) {
		/* as curl writes it: no port when it is the default one */
		hlen = alen;
		if (hlen > strlen(port) && strncmp(a + hlen - strlen(port), port, strlen(port)) == 0)
			hlen -= strlen(port);
		add(out, cap, &len, "Host: ", 6);
		add(out, cap, &len, a, hlen);
		add(out, cap, &len, "\r\n", 2);
	}
	n = snprintf(line, sizeof(line),
		     "User-Agent: objfs/" PACKAGE_VERSION "\r\nAccept: */*\r\n"
		     "Range: bytes=%" PRId64 "-%" PRId64 "\r\n",
		     r->off, r->off + (int64_t)objfs_req_span(r) - 1);
	add(out, cap, &len, line, (size_t)n);
	if (r->etag && r->etag[0] == '"') {
		size_t el = strlen(r->etag);

		if (bad_text(r->etag, el))
			return -EAGAIN;
		add(out, cap, &len, "If-Match: ", 10);
		add(out, cap, &len, r->etag, el);
		add(out, cap, &len, "\r\n", 2);
	}
	for (const struct curl_slist *s = r->headers; s; s = s->next) {
		add(out, cap, &len, s->data, strlen(s->data));
		add(out, cap, &len, "\r\n", 2);
	}
	add(out, cap, &len, "\r\n", 2);
	if (len >= cap)
		return -EAGAIN;
	out[len] = '\0';
	return (int)len;
}

/* The table entry of origin @auth, or NULL. The caller holds
 * e->origin_lock. */
static struct direct_origin *origin_lookup(struct objfs_engine *e, const char *auth)
{
	for (unsigned i = 0; i < e->norigins; i++)
		if (strcmp(e->origins[i].authority, auth) == 0)
			return &e->origins[i];
	return NULL;
}

static int addr_eq(const struct sockaddr_storage *a, socklen_t al,
		   const struct sockaddr_storage *b, socklen_t bl)
{
	return al == bl && memcmp(a, b, al) == 0;
}

/* @sa as text ("192.0.2.1", "2001:db8::1") for the logs. */
static const char *addr_text(const struct sockaddr_storage *sa, socklen_t salen, char *buf,
			     size_t cap)
{
	if (getnameinfo((const struct sockaddr *)sa, salen, buf, (socklen_t)cap, NULL, 0,
			NI_NUMERICHOST))
		snprintf(buf, cap, "?");
	return buf;
}

static void *resolver_main(void *arg);
static int tls_ctx_new(struct objfs_engine *e);

/* Has @o resolved on the resolver thread (started on first use). The
 * caller holds e->origin_lock. */
static void origin_want_resolve(struct objfs_engine *e, struct direct_origin *o)
{
	if (o->resolving || e->resolver_stop)
		return;
	if (!e->resolver_started) {
		if (pthread_create(&e->resolver, NULL, resolver_main, e)) {
			o->resolve_due_ns = objfs_now_ns() + e->resolve_every_ns;
			return; /* the address libcurl used stays the only one */
		}
		pthread_setname_np(e->resolver, "objfs-resolve");
		e->resolver_started = 1;
	}
	o->resolving = 1;
	pthread_cond_signal(&e->resolve_cond);
}

/* Whether the direct path is on for origin @auth: known, and not turned
 * off for a rest. */
static int origin_on(struct objfs_engine *e, const char *auth)
{
	struct direct_origin *o;
	int on;

	pthread_mutex_lock(&e->origin_lock);
	o = origin_lookup(e, auth);
	on = o && o->naddrs &&
	     objfs_direct_budget_on(&o->direct, &e->direct_rule, auth, objfs_now_ns());
	pthread_mutex_unlock(&e->origin_lock);
	return on;
}

/*
 * The address for a new connection to @auth: the next one round robin
 * that is not resting. 0 when there is none (the request goes to
 * libcurl). Asks for a resolution when one is due, or when every address
 * rests (at most every RESOLVE_GAP_NS).
 */
static int origin_pick(struct objfs_engine *e, const char *auth, struct sockaddr_storage *sa,
		       socklen_t *salen)
{
	int64_t now = objfs_now_ns();
	struct direct_origin *o;
	int found = 0;

	pthread_mutex_lock(&e->origin_lock);
	o = origin_lookup(e, auth);
	if (o && objfs_direct_budget_on(&o->direct, &e->direct_rule, auth, now)) {
		for (unsigned k = 0; k < o->naddrs && !found; k++) {
			unsigned i = (o->next + k) % o->naddrs;

			if (now < o->addrs[i].rest_until_ns)
				continue;
			*sa = o->addrs[i].sa;
			*salen = o->addrs[i].salen;
			o->next = i + 1;
			found = 1;
		}
		if (now >= o->resolve_due_ns ||
		    (!found && now - o->resolved_ns >= RESOLVE_GAP_NS))
			origin_want_resolve(e, o);
	}
	pthread_mutex_unlock(&e->origin_lock);
	return found;
}

/* Address @sa of @auth failed to connect: no new connection goes there
 * for e->addr_rest_ns. */
static void origin_rest(struct objfs_engine *e, const char *auth,
			const struct sockaddr_storage *sa, socklen_t salen)
{
	struct direct_origin *o;
	char text[INET6_ADDRSTRLEN];

	pthread_mutex_lock(&e->origin_lock);
	o = origin_lookup(e, auth);
	for (unsigned i = 0; o && i < o->naddrs; i++) {
		if (!addr_eq(&o->addrs[i].sa, o->addrs[i].salen, sa, salen))
			continue;
		o->addrs[i].rest_until_ns = objfs_now_ns() + e->addr_rest_ns;
		objfs_info("%s: %s did not take a connection; not used for %.0f s",
			   auth, addr_text(sa, salen, text, sizeof(text)),
			   (double)e->addr_rest_ns / 1e9);
	}
	pthread_mutex_unlock(&e->origin_lock);
}

/* The longest rest of @rule's @offs-th switch-off in a row. */
static int64_t budget_rest(const struct direct_rule *rule, unsigned offs)
{
	int64_t rest = rule->rest_ns;

	for (unsigned i = 1; i < offs && rest < rule->max_ns; i++)
		rest *= 2;
	return rest < rule->max_ns ? rest : rule->max_ns;
}

int objfs_direct_budget_on(struct direct_budget *b, const struct direct_rule *rule,
			   const char *auth, int64_t now)
{
	if (now < b->off_until_ns)
		return 0;
	if (b->off) {
		b->off = 0;
		objfs_info("%s: %s", auth, rule->on_text);
	}
	return 1;
}

int64_t objfs_direct_budget_fail(struct direct_budget *b, const struct direct_rule *rule,
				 const char *auth, const char *why, int64_t now)
{
	int64_t rest;

	if (!objfs_direct_budget_on(b, rule, auth, now))
		return 0;
	if (!b->fails || now - b->first_ns >= rule->window_ns) {
		b->fails = 0;
		b->first_ns = now;
	}
	if (++b->fails < rule->limit) {
		objfs_info("%s: %s (%u of %u within %.0f s turn it off)", auth, why, b->fails,
			   rule->limit, (double)rule->window_ns / 1e9);
		return 0;
	}
	if (b->offs && now - b->off_until_ns >= 2 * budget_rest(rule, b->offs))
		b->offs = 0; /* on for twice its last rest: the doubling starts over */
	rest = budget_rest(rule, ++b->offs);
	b->fails = 0;
	b->off = 1;
	b->off_until_ns = now + rest;
	objfs_info("%s: %s; %s for %.0f s", auth, why, rule->off_text, (double)rest / 1e9);
	return rest;
}

/* The direct path of @auth answered @why: off for a rest (e->direct_rule). */
static void origin_off(struct objfs_engine *e, const char *auth, const char *why)
{
	struct direct_origin *o;

	pthread_mutex_lock(&e->origin_lock);
	o = origin_lookup(e, auth);
	if (o)
		(void)objfs_direct_budget_fail(&o->direct, &e->direct_rule, auth, why,
					       objfs_now_ns());
	pthread_mutex_unlock(&e->origin_lock);
}

/* Splits origin key @key ("http://host", "https://host:port",
 * "http://[v6]:port") into @host (no brackets) and @port (80 or 443 when
 * none is given). 0, or -EINVAL. */
static int split_origin(const char *key, char *host, size_t hcap, char *port, size_t pcap)
{
	const char *auth = key + key_scheme_len(key), *colon, *h = auth;
	size_t hl;

	if (*auth == '[') {
		const char *close = strchr(auth, ']');

		if (!close)
			return -EINVAL;
		h = auth + 1;
		hl = (size_t)(close - h);
		colon = close[1] == ':' ? close + 1 : NULL;
		if (close[1] && !colon)
			return -EINVAL;
	} else {
		colon = strrchr(auth, ':');
		hl = colon ? (size_t)(colon - auth) : strlen(auth);
	}
	if (!hl || hl >= hcap || (colon && (!colon[1] || strlen(colon + 1) >= pcap)))
		return -EINVAL;
	memcpy(host, h, hl);
	host[hl] = '\0';
	snprintf(port, pcap, "%s", colon ? colon + 1 : key_tls(key) ? "443" : "80");
	return 0;
}

int objfs_direct_resolve(void *arg, const char *host, const char *port, struct direct_addr *out,
			 unsigned cap)
{
	/* both families, as libcurl asks; an address this host cannot reach
	 * (no IPv6 route) fails to connect and rests */
	const struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
					.ai_flags = AI_NUMERICSERV };
	struct addrinfo *ai, *p;
	unsigned n = 0;
	int rc;

	(void)arg;
	rc = getaddrinfo(host, port, &hints, &ai);
	if (rc)
		return rc == EAI_MEMORY ? -ENOMEM : rc == EAI_SYSTEM ? -errno : -EHOSTUNREACH;
	for (p = ai; p && n < cap; p = p->ai_next) {
		unsigned i;

		if (p->ai_addrlen > sizeof(out[n].sa) ||
		    (p->ai_family != AF_INET && p->ai_family != AF_INET6))
			continue;
		memset(&out[n], 0, sizeof(out[n]));
		memcpy(&out[n].sa, p->ai_addr, p->ai_addrlen);
		out[n].salen = p->ai_addrlen;
		for (i = 0; i < n && !addr_eq(&out[i].sa, out[i].salen, &out[n].sa, out[n].salen);
		     i++)
			;
		n += i == n; /* a duplicate is overwritten by the next */
	}
	freeaddrinfo(ai);
	return n ? (int)n : -EHOSTUNREACH;
}

/* The new address list @got (@n of them) of origin @o: an address that
 * stays keeps its rest. The caller holds e->origin_lock. */
static void origin_set_addrs(struct direct_origin *o, struct direct_addr *got, unsigned n)
{
	char text[INET6_ADDRSTRLEN];

	for (unsigned i = 0; i < n; i++) {
		for (unsigned j = 0; j < o->naddrs; j++)
			if (addr_eq(&got[i].sa, got[i].salen, &o->addrs[j].sa, o->addrs[j].salen))
				got[i].rest_until_ns = o->addrs[j].rest_until_ns;
		objfs_debug("direct: %s at %s", o->authority,
			    addr_text(&got[i].sa, got[i].salen, text, sizeof(text)));
	}
	memcpy(o->addrs, got, n * sizeof(*got));
	o->naddrs = n;
	o->next %= n;
}

/*
 * The resolver thread: resolves the origins that ask (origin_want_resolve),
 * one at a time, outside the lock, so a slow DNS server never holds up an
 * engine thread; a failed resolution keeps the addresses there are.
 */
static void *resolver_main(void *arg)
{
	struct objfs_engine *e = arg;

	pthread_mutex_lock(&e->origin_lock);
	while (!e->resolver_stop) {
		struct direct_addr got[DIRECT_ADDRS];
		char auth[256], host[256], port[8];
		struct direct_origin *o = NULL;
		objfs_resolve_fn fn = e->resolve;
		void *fn_arg = e->resolve_arg;
		int n;

		for (unsigned i = 0; i < e->norigins && !o; i++)
			if (e->origins[i].resolving == 1)
				o = &e->origins[i]; /* entries never move */
		if (!o) {
			pthread_cond_wait(&e->resolve_cond, &e->origin_lock);
			continue;
		}
		o->resolving = 2;
		memcpy(auth, o->authority, sizeof(auth));
		pthread_mutex_unlock(&e->origin_lock);
		n = split_origin(auth, host, sizeof(host), port, sizeof(port));
		if (!n)
			n = fn(fn_arg, host, port, got, DIRECT_ADDRS);
		pthread_mutex_lock(&e->origin_lock);
		if (n > 0)
			origin_set_addrs(o, got, (unsigned)n);
		else
			objfs_info("%s: resolving %s: %s; the %u address(es) known stay",
				   auth, host, strerror(-n), o->naddrs);
		o->resolved_ns = objfs_now_ns();
		o->resolve_due_ns = o->resolved_ns + e->resolve_every_ns;
		o->resolving = 0;
	}
	pthread_mutex_unlock(&e->origin_lock);
	return NULL;
}

int objfs_direct_engine_init(struct objfs_engine *e)
{
	int err = pthread_mutex_init(&e->origin_lock, NULL);

	if (err)
		return -err;
	err = pthread_cond_init(&e->resolve_cond, NULL);
	if (err) {
		pthread_mutex_destroy(&e->origin_lock);
		return -err;
	}
	e->direct = e->cfg.direct && objfs_direct_usable(0);
	e->direct_tls = e->cfg.direct && !e->cfg.http2 && objfs_direct_usable(1) &&
			!tls_ctx_new(e);
	e->direct_rule = (struct direct_rule){
		.limit = 1, .rest_ns = DIRECT_REST_NS, .max_ns = REST_MAX_NS,
		.off_text = "reading it through libcurl", .on_text = "reading it directly again",
	};
	e->tls_rx_rule = (struct direct_rule){
		.limit = TLS_RX_FAILS, .window_ns = TLS_RX_WINDOW_NS, .rest_ns = TLS_RX_REST_NS,
		.max_ns = REST_MAX_NS, .off_text = "its TLS records read through OpenSSL",
		.on_text = "objfs reads its TLS records itself again",
	};
	e->resolve = objfs_direct_resolve;
	e->resolve_every_ns = RESOLVE_EVERY_NS;
	e->addr_rest_ns = ADDR_REST_NS;
	e->direct_inited = 1;
	return 0;
}

void objfs_direct_engine_free(struct objfs_engine *e)
{
	if (!e->direct_inited)
		return;
	pthread_mutex_lock(&e->origin_lock);
	e->resolver_stop = 1;
	pthread_cond_signal(&e->resolve_cond);
	pthread_mutex_unlock(&e->origin_lock);
	if (e->resolver_started)
		pthread_join(e->resolver, NULL); /* a lookup under way ends first */
	for (unsigned i = 0; i < e->norigins; i++)
		SSL_SESSION_free(e->origins[i].sess);
	SSL_CTX_free(e->ssl_ctx);
	pthread_cond_destroy(&e->resolve_cond);
	pthread_mutex_destroy(&e->origin_lock);
}

void objfs_direct_learn(struct objfs_engine *e, CURL *h, const char *url, int ok)
{
	const struct addrinfo hints = { .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV,
					.ai_socktype = SOCK_STREAM };
	char auth[256], serv[8], *ip = NULL;
	long port = 0, redirs = 0;
	struct direct_origin *o;
	struct addrinfo *ai;
	struct direct_addr a = { .salen = 0 };
	size_t alen;

	if (!(alen = url_origin(url, auth, sizeof(auth))) ||
	    !(key_tls(auth) ? e->direct_tls && ok : e->direct))
		return;
	if (curl_easy_getinfo(h, CURLINFO_REDIRECT_COUNT, &redirs) != CURLE_OK || redirs ||
	    curl_easy_getinfo(h, CURLINFO_PRIMARY_IP, &ip) != CURLE_OK || !ip || !*ip ||
	    curl_easy_getinfo(h, CURLINFO_PRIMARY_PORT, &port) != CURLE_OK || port <= 0 ||
	    port > 65535)
		return;
	/* numeric only: IPv4 or IPv6, never a name lookup */
	snprintf(serv, sizeof(serv), "%ld", port);
	if (getaddrinfo(ip, serv, &hints, &ai))
		return;
	if (ai->ai_addrlen <= sizeof(a.sa)) {
		memcpy(&a.sa, ai->ai_addr, ai->ai_addrlen);
		a.salen = ai->ai_addrlen;
	}
	freeaddrinfo(ai);
	if (!a.salen)
		return;
	pthread_mutex_lock(&e->origin_lock);
	o = origin_lookup(e, auth);
	if (!o && e->norigins < DIRECT_ORIGINS) {
		/* libcurl's address until the host's own are resolved */
		o = &e->origins[e->norigins++];
		memset(o, 0, sizeof(*o));
		memcpy(o->authority, auth, alen + 1);
		o->addrs[0] = a;
		o->naddrs = 1;
		objfs_debug("direct: %s is at %s port %ld", auth, ip, port);
		origin_want_resolve(e, o);
	} else if (o) {
		/* libcurl just connected there: it takes connections again */
		for (unsigned i = 0; i < o->naddrs; i++)
			if (addr_eq(&o->addrs[i].sa, o->addrs[i].salen, &a.sa, a.salen))
				o->addrs[i].rest_until_ns = 0;
	}
	pthread_mutex_unlock(&e->origin_lock);
}

/*
 * TLS (https origins). One client context per engine, set up as libcurl
 * sets up its own (lib/vtls/openssl.c) for objfs's options, so the two
 * paths trust the same certificates: the CA file is cfg.ca_file, else
 * libcurl's built-in bundle, plus libcurl's built-in CA directory
 * (CURLINFO_CAINFO/CAPATH; OpenSSL's default paths when libcurl has
 * none); a CA file that cannot be read turns direct TLS off (libcurl then
 * says why). Partial chains are accepted, as libcurl does unless told
 * otherwise; the peer is verified and the host name (or IP address)
 * checked on every connection unless cfg.insecure (libcurl's VERIFYPEER 0
 * and VERIFYHOST 0), by OpenSSL's matching, a little stricter than
 * libcurl's so that it accepts nothing libcurl refuses: subjectAltName
 * only, never the common name, no partial wildcards; the rare certificate
 * only libcurl accepts (a common name and no subjectAltName) just leaves
 * the origin with libcurl. ALPN offers http/1.1 only. Sessions: the last one
 * each origin got (TLS 1.3 tickets come after the handshake, hence the
 * new-session callback) is offered on its next connection.
 */
static int tls_new_session(SSL *ssl, SSL_SESSION *sess)
{
	struct objfs_engine *e = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
	struct objfs_dconn *dc = SSL_get_app_data(ssl);
	struct direct_origin *o;
	int kept = 0;

	pthread_mutex_lock(&e->origin_lock);
	o = origin_lookup(e, dc->auth);
	if (o) {
		SSL_SESSION_free(o->sess);
		o->sess = sess; /* the reference OpenSSL passed is ours now */
		kept = 1;
	}
	pthread_mutex_unlock(&e->origin_lock);
	return kept;
}

/*
 * What taking the receiving half from OpenSSL needs (tls_take): the server
 * traffic secret, from the key log (the one place OpenSSL 3 hands it out),
 * and how many records OpenSSL has read under it: every record after the
 * server's Finished, counted by their headers; a post-handshake message
 * other than a ticket (a KeyUpdate, a CertificateRequest) changes what
 * the count means, and the connection then stays with OpenSSL.
 */
/* Wipes the traffic secret kept for tls_take (taken, or never to be). */
static void rx_forget_secret(struct objfs_dconn *dc)
{
	OPENSSL_cleanse(dc->rx_secret, sizeof(dc->rx_secret));
	dc->rx_secret_len = 0;
}

static void tls_keylog(const SSL *ssl, const char *line)
{
	static const char label[] = "SERVER_TRAFFIC_SECRET_0 ";
	struct objfs_dconn *dc = SSL_get_app_data(ssl);
	const char *hex;
	size_t n = 0;

	if (!dc || strncmp(line, label, sizeof(label) - 1))
		return;
	hex = strchr(line + sizeof(label) - 1, ' '); /* past the client random */
	if (!hex)
		return;
	for (hex++; objfs_hexval((unsigned char)hex[0]) >= 0 &&
		    objfs_hexval((unsigned char)hex[1]) >= 0 && n < sizeof(dc->rx_secret); hex += 2)
		dc->rx_secret[n++] = (unsigned char)(objfs_hexval((unsigned char)hex[0]) << 4 |
						     objfs_hexval((unsigned char)hex[1]));
	dc->rx_secret_len = *hex ? 0 : n; /* all of it, or nothing */
}

static void tls_msg(int write_p, int version, int type, const void *buf, size_t len, SSL *ssl,
		    void *arg)
{
	struct objfs_dconn *dc = SSL_get_app_data(ssl);
	unsigned char mt = len ? *(const unsigned char *)buf : 0;

	(void)version;
	(void)arg;
	if (write_p || !dc)
		return;
	if (type == SSL3_RT_HEADER) {
		dc->rx_records += dc->rx_counting;
	} else if (type == SSL3_RT_HANDSHAKE && len) {
		if (mt == SSL3_MT_FINISHED && !dc->rx_counting) {
			dc->rx_counting = 1;
			dc->rx_records = 0;
		} else if (dc->rx_counting && mt != SSL3_MT_NEWSESSION_TICKET) {
			dc->rx_never = 1; /* and the secret is not wanted any more */
			rx_forget_secret(dc);
		}
	}
}

/* OBJFS_TLS_RX=openssl keeps every https connection's reading with
 * OpenSSL (for comparisons; docs/benchmarks.md). */
static int tls_rx_wanted(void)
{
	const char *v = getenv("OBJFS_TLS_RX");

	return !v || strcmp(v, "openssl") != 0;
}

static int tls_ctx_new(struct objfs_engine *e)
{
	static const unsigned char alpn[] = "\x08http/1.1";
	const char *cafile = e->ca_file, *capath = NULL;
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	CURL *h;

	if (!ctx)
		return -ENOMEM;
	h = curl_easy_init();
#if LIBCURL_VERSION_NUM >= 0x075400 /* 7.84.0: CURLINFO_CAINFO, CURLINFO_CAPATH */
	if (h) {
		char *p = NULL;

		if (!cafile && curl_easy_getinfo(h, CURLINFO_CAINFO, &p) == CURLE_OK && p)
			cafile = p;
		p = NULL;
		if (curl_easy_getinfo(h, CURLINFO_CAPATH, &p) == CURLE_OK && p)
			capath = p;
	}
#endif
	if (!e->cfg.insecure) {
		if (cafile && SSL_CTX_load_verify_file(ctx, cafile) != 1)
			goto off; /* libcurl fails the same way and says so */
		if (capath)
			(void)SSL_CTX_load_verify_dir(ctx, capath); /* libcurl: a warning */
		if (!cafile && !capath && SSL_CTX_set_default_verify_paths(ctx) != 1)
			goto off;
		X509_STORE_set_flags(SSL_CTX_get_cert_store(ctx), X509_V_FLAG_PARTIAL_CHAIN);
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	} else {
		SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
	}
	curl_easy_cleanup(h);
	h = NULL;
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	/* an EOF without close_notify reads as the end: a body still short of
	 * its Content-Length fails as a truncated one */
	SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
	/* Without read-ahead OpenSSL reads each record with two recv()s, its
	 * 5-byte header and then its body: 2 system calls per 16 KiB. With it,
	 * one recv() fills a 128 KiB buffer (~8 records; 128 KiB a busy
	 * connection: 32 MiB at 256 connections). Bytes it holds count as
	 * pending: an idle connection with any is not reused (idle_alive). */
	SSL_CTX_set_read_ahead(ctx, 1);
	SSL_CTX_set_default_read_buffer_len(ctx, 128 << 10);
	if (SSL_CTX_set_alpn_protos(ctx, alpn, sizeof(alpn) - 1))
		goto off;
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT |
				       SSL_SESS_CACHE_NO_INTERNAL_STORE);
	SSL_CTX_sess_set_new_cb(ctx, tls_new_session);
	if (tls_rx_wanted()) {
		SSL_CTX_set_keylog_callback(ctx, tls_keylog);
		SSL_CTX_set_msg_callback(ctx, tls_msg);
	}
	SSL_CTX_set_app_data(ctx, e);
	e->ssl_ctx = ctx;
	return 0;
off:
	objfs_debug("direct: no TLS context (%s): https stays with libcurl",
		    ERR_reason_error_string(ERR_peek_last_error()));
	ERR_clear_error();
	curl_easy_cleanup(h);
	SSL_CTX_free(ctx);
	return -EIO;
}

/* Whether @host is an IPv4 or IPv6 address, not a name. */
static int host_is_ip(const char *host)
{
	unsigned char buf[sizeof(struct in6_addr)];

	return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

/* A TLS session for new connection @dc to https origin dc->auth: SNI
 * (names only, as libcurl), the name or address to verify, the origin's
 * last session. 0, or -ENOMEM. */
static int tls_new(struct objfs_engine *e, struct objfs_dconn *dc)
{
	char host[256], port[8];
	struct direct_origin *o;
	SSL *ssl;

	if (split_origin(dc->auth, host, sizeof(host), port, sizeof(port)))
		return -EINVAL;
	ssl = SSL_new(e->ssl_ctx);
	if (!ssl || SSL_set_fd(ssl, dc->fd) != 1)
		goto err;
	SSL_set_app_data(ssl, dc);
	if (host_is_ip(host)) {
		if (!e->cfg.insecure &&
		    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) != 1)
			goto err;
	} else {
		if (SSL_set_tlsext_host_name(ssl, host) != 1)
			goto err;
		if (!e->cfg.insecure) {
			SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS |
					       X509_CHECK_FLAG_NEVER_CHECK_SUBJECT);
			if (SSL_set1_host(ssl, host) != 1)
				goto err;
		}
	}
	pthread_mutex_lock(&e->origin_lock);
	o = origin_lookup(e, dc->auth);
	if (o && o->sess)
		(void)SSL_set_session(ssl, o->sess); /* takes its own reference */
	pthread_mutex_unlock(&e->origin_lock);
	SSL_set_connect_state(ssl);
	dc->ssl = ssl;
	return 0;
err:
	ERR_clear_error();
	SSL_free(ssl);
	return -ENOMEM;
}

/* What TLS call @k on @dc came to: > 0 bytes; 0 the end of the stream;
 * -EAGAIN waiting (dc->want says for what); -EIO anything else. */
static ssize_t tls_result(struct objfs_dconn *dc, int k)
{
	if (k > 0)
		return k;
	switch (SSL_get_error(dc->ssl, k)) {
	case SSL_ERROR_WANT_READ:
		dc->want = POLLIN;
		return -EAGAIN;
	case SSL_ERROR_WANT_WRITE:
		dc->want = POLLOUT;
		return -EAGAIN;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	default:
		ERR_clear_error();
		return -EIO;
	}
}

/* send() on @dc, through TLS on an https one: bytes, -EAGAIN, -EIO. */
static ssize_t dc_send(struct objfs_dconn *dc, const char *p, size_t n)
{
	ssize_t k;

	if (dc->ssl) {
		ERR_clear_error();
		k = tls_result(dc, SSL_write(dc->ssl, p, n > INT_MAX ? INT_MAX : (int)n));
		return k ? k : -EIO;
	}
	do
		k = send(dc->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (k < 0 && errno == EINTR);
	if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return -EAGAIN;
	return k > 0 ? k : -EIO;
}

/* recv() on @dc into @p, through TLS on an https one (the bytes are
 * decrypted into @p itself): bytes, 0 at the end, -EAGAIN, -EIO. */
static ssize_t dc_recv(struct objfs_dconn *dc, char *p, size_t n)
{
	ssize_t k;

	if (dc->rx) {
		int asked = 0;

		k = objfs_tls_rx_read(dc->rx, dc->fd, p, n, &asked);
		if (asked) /* the server's KeyUpdate asked for ours: with the next write */
			(void)SSL_key_update(dc->ssl, SSL_KEY_UPDATE_NOT_REQUESTED);
		if (k == -EAGAIN)
			dc->want = POLLIN;
		else if (k == -EIO)
			dc->rx_failed = 1;
		return k;
	}
	if (dc->ssl) {
		ERR_clear_error();
		return tls_result(dc, SSL_read(dc->ssl, p, n > INT_MAX ? INT_MAX : (int)n));
	}
	do
		k = recv(dc->fd, p, n, MSG_DONTWAIT);
	while (k < 0 && errno == EINTR);
	if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return -EAGAIN;
	return k < 0 ? -EIO : k;
}

static void dc_close(struct engine_thread *th, struct objfs_dconn *dc)
{
	if (dc->rx_failed) {
		struct direct_origin *o;

		objfs_stats_tls_own(1);
		pthread_mutex_lock(&th->e->origin_lock);
		o = origin_lookup(th->e, dc->auth);
		if (o && objfs_direct_budget_fail(&o->tls_rx, &th->e->tls_rx_rule, dc->auth,
						  "a TLS record objfs's reader refused (or one "
						  "that failed its check) ended a connection",
						  objfs_now_ns()))
			objfs_stats_tls_own_off();
		pthread_mutex_unlock(&th->e->origin_lock);
	}
	LIST_REMOVE(dc, link);
	th->ndconns--;
	objfs_debug("direct fd %d: closed", dc->fd);
	if (dc->ssl && SSL_is_init_finished(dc->ssl)) {
		/* no close_notify (the server takes the EOF), but a clean end
		 * for OpenSSL: SSL_free would mark the session unresumable */
		SSL_set_quiet_shutdown(dc->ssl, 1);
		(void)SSL_shutdown(dc->ssl);
	}
	SSL_free(dc->ssl);
	ERR_clear_error();
	objfs_tls_rx_free(dc->rx);
	rx_forget_secret(dc);
	close(dc->fd);
	free(dc);
}

/* Whether an idle keep-alive connection is still usable: nothing to read
 * (the server neither closed it nor sent anything unasked, TLS records
 * included). */
static int idle_alive(struct objfs_dconn *dc)
{
	char c;
	ssize_t n;

	if ((dc->ssl && SSL_has_pending(dc->ssl)) || (dc->rx && objfs_tls_rx_pending(dc->rx)))
		return 0;
	n = recv(dc->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* A new connection to @sa, or NULL with *failed: DC_FAIL_ADDR when
 * connect() refused at once, DC_FAIL_SHORT when memory or descriptors ran
 * out (the address is not to blame). */
static struct objfs_dconn *dc_connect(struct engine_thread *th, const char *auth,
				      const struct sockaddr_storage *sa, socklen_t salen,
				      int *failed)
{
	struct objfs_dconn *dc = calloc(1, sizeof(*dc));
	int one = 1;

	*failed = DC_FAIL_SHORT;
	if (!dc)
		return NULL;
	dc->fd = socket(sa->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (dc->fd < 0) {
		free(dc);
		return NULL;
	}
	(void)setsockopt(dc->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	(void)setsockopt(dc->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	snprintf(dc->auth, sizeof(dc->auth), "%s", auth);
	dc->sa = *sa;
	dc->salen = salen;
	dc->wi = -1;
	dc->state = DC_CONNECT; /* born here: dc_state() logs what follows */
	if (key_tls(auth) && tls_new(th->e, dc)) {
		close(dc->fd);
		free(dc);
		return NULL;
	}
	if (connect(dc->fd, (const struct sockaddr *)sa, salen) == 0) {
		dc_state(dc, dc->ssl ? DC_TLS : DC_SEND);
	} else if (errno != EINPROGRESS) {
		*failed = errno == ENOBUFS || errno == ENOMEM ? DC_FAIL_SHORT : DC_FAIL_ADDR;
		SSL_free(dc->ssl);
		close(dc->fd);
		free(dc);
		return NULL;
	}
	*failed = 0;
	LIST_INSERT_HEAD(&th->dconns, dc, link);
	th->ndconns++;
	return dc;
}

/* Puts @r on @dc: the request text is ready in dc->req. */
static void dc_begin(struct objfs_dconn *dc, struct objfs_req *r)
{
	dc->r = r;
	dc->req_off = 0;
	dc->head_len = 0;
	dc->hoff = 0;
	dc->keep = 1;
	dc->chunked = 0;
	r->dconn = dc;
	r->progress_ns = objfs_now_ns(); /* it has a connection: the clock runs */
	r->slow_ns = 0;
	r->rcvd = 0;
	r->sent_ns = 0;
	if (dc->state != DC_CONNECT && dc->state != DC_TLS)
		dc_state(dc, DC_SEND);
}

/*
 * A connection for @auth: an idle one that is still alive, else a new one
 * to the origin's next address (origin_pick) when the thread is under its
 * cap (closing an idle one of another origin if need be). NULL: none now
 * (@r waits), or *failed (see dc_connect; DC_FAIL_ADDR too when no
 * address takes connections now).
 */
static struct objfs_dconn *dc_get(struct engine_thread *th, const char *auth, int *failed)
{
	struct objfs_dconn *dc, *next, *other = NULL;
	struct sockaddr_storage sa;
	socklen_t salen;

	*failed = 0;
	for (dc = LIST_FIRST(&th->dconns); dc; dc = next) {
		next = LIST_NEXT(dc, link);
		if (dc->state != DC_IDLE)
			continue;
		if (strcmp(dc->auth, auth) != 0) {
			other = dc;
			continue;
		}
		if (idle_alive(dc))
			return dc;
		dc_close(th, dc);
	}
	if (th->ndconns >= th->per && !other)
		return NULL;
	if (!origin_pick(th->e, auth, &sa, &salen)) {
		*failed = DC_FAIL_ADDR;
		return NULL;
	}
	if (th->ndconns >= th->per)
		dc_close(th, other);
	dc = dc_connect(th, auth, &sa, salen, failed);
	if (*failed == DC_FAIL_ADDR)
		origin_rest(th->e, auth, &sa, salen);
	return dc;
}

/*
 * Whether header line @h carries a request's signing time: SigV4's
 * x-amz-date and the Authorization signed over it. Two GETs of one object
 * signed in different seconds differ only there (the Range is not
 * signed), so a joined GET goes out with its leader's pair, which signs
 * every other line the parts share; without this, ranges of an S3 stream
 * queued across a second boundary never joined.
 */
static int signing_line(const char *h)
{
	return strncasecmp(h, "x-amz-date:", 11) == 0 || strncasecmp(h, "authorization:", 14) == 0;
}

/* Whether one GET can serve @a and @b: the same URL, header lines (in the
 * same order; the signing time's may differ) and pins (ETag, mtime, size),
 * and neither bound by a deadline. */
static int same_get(const struct objfs_req *a, const struct objfs_req *b)
{
	const struct curl_slist *x = a->headers, *y = b->headers;

	if (strcmp(a->url, b->url) != 0 || a->expect_size != b->expect_size ||
	    a->expect_mtime != b->expect_mtime || a->no_redirect != b->no_redirect ||
	    a->deadline_ns || b->deadline_ns || !a->etag != !b->etag ||
	    (a->etag && strcmp(a->etag, b->etag) != 0))
		return 0;
	for (; x && y; x = x->next, y = y->next) {
		int sx = signing_line(x->data), sy = signing_line(y->data);

		if (sx != sy || (sx && strncasecmp(x->data, y->data, 11) != 0) ||
		    (!sx && strcmp(x->data, y->data) != 0))
			return 0;
	}
	return !x && !y;
}

/*
 * Joins to @r, which just got a connection, the waiting requests that
 * continue its range, in range order (see "Joined GETs" in the file
 * header). Each pass over th->dwait takes the part that
 * continues the last one wherever it waits among requests of the same
 * URL (fill workers submit a GPU fill's pieces nearly, not exactly, in
 * order) and stops at one of another URL.
 */
static void join_waiting(struct engine_thread *th, struct objfs_req *r)
{
	struct objfs_req *last = r, *w;
	size_t span = r->len;
	int found = r->len < JOIN_MAX && !r->no_join;

	while (found) {
		unsigned k = 0;

		found = 0;
		TAILQ_FOREACH(w, &th->dwait, link) {
			if (k++ == JOIN_SCAN || strcmp(w->url, r->url) != 0)
				break;
			if (w->off != last->off + (int64_t)last->len || w->method != OBJFS_GET ||
			    !w->len || !w->dst || w->no_direct || w->no_join ||
			    w->len > JOIN_MAX - span || !same_get(r, w))
				continue;
			TAILQ_REMOVE(&th->dwait, w, link);
			last->joined = w;
			last = w;
			span += w->len;
			found = 1;
			break;
		}
	}
}

/* Puts the parts joined to @r back at the head of th->dwait, in range
 * order, as the waiting requests they were; @r asks for its own range
 * again, alone from now on (a server that mishandles the union, say by
 * answering a range of its own, costs each part one attempt at most). */
static void unjoin(struct engine_thread *th, struct objfs_req *r)
{
	struct objfs_req *w = r->joined, *prev = NULL;

	if (w)
		r->no_join = 1;
	r->joined = NULL;
	while (w) {
		struct objfs_req *next = w->joined;

		w->joined = NULL;
		if (prev)
			TAILQ_INSERT_AFTER(&th->dwait, prev, w, link);
		else
			TAILQ_INSERT_HEAD(&th->dwait, w, link);
		prev = w;
		w = next;
	}
}

int objfs_direct_start(struct engine_thread *th, struct objfs_req *r)
{
	struct objfs_engine *e = th->e;
	char auth[256], text[REQ_MAX];
	struct objfs_dconn *dc;
	int n, failed;

	/* no_redirect (every S3 request) needs nothing more: a 3xx goes to
	 * libcurl, which then does not follow it either */
	if ((!e->direct && !e->direct_tls) || r->no_direct || r->method != OBJFS_GET || !r->len ||
	    !r->dst)
		return -EAGAIN;
	n = objfs_direct_request_text(r, text, sizeof(text), auth, sizeof(auth));
	if (n < 0 || !(key_tls(auth) ? e->direct_tls : e->direct) || !origin_on(e, auth))
		return -EAGAIN;
	dc = dc_get(th, auth, &failed);
	if (failed)
		return -EAGAIN; /* libcurl connects, and says why it cannot */
	if (!dc) {
		TAILQ_INSERT_TAIL(&th->dwait, r, link);
		return 1;
	}
	join_waiting(th, r);
	if (r->joined) {
		n = objfs_direct_request_text(r, text, sizeof(text), auth, sizeof(auth));
		if (n < 0) { /* the longer Range did not fit: alone after all */
			unjoin(th, r);
			n = objfs_direct_request_text(r, text, sizeof(text), auth, sizeof(auth));
		}
	}
	memcpy(dc->req, text, (size_t)n);
	dc->req_len = (size_t)n;
	dc_begin(dc, r);
	return 0;
}

struct objfs_req *objfs_direct_next_waiting(struct engine_thread *th)
{
	struct objfs_req *r = TAILQ_FIRST(&th->dwait);
	struct objfs_dconn *dc;
	unsigned busy = 0;

	if (!r)
		return NULL;
	LIST_FOREACH(dc, &th->dconns, link)
		busy += dc->state != DC_IDLE;
	if (busy >= th->per)
		return NULL;
	TAILQ_REMOVE(&th->dwait, r, link);
	return r;
}

/*
 * A TLS 1.3 connection between responses, with nothing in OpenSSL's
 * buffers: its reading moves to tls_rx (records decrypted into the
 * destination, tls_rx.h), which takes the traffic secret and the record
 * count kept since the handshake. Other suites, TLS 1.2, a connection
 * whose keys OpenSSL saw change, an origin whose tls_rx budget is off
 * (direct_origin.tls_rx): left with OpenSSL.
 */
static void tls_take(struct engine_thread *th, struct objfs_dconn *dc)
{
	struct direct_origin *o;
	unsigned suite;
	int off;

	if (!dc->ssl || dc->rx || dc->rx_never)
		return;
	pthread_mutex_lock(&th->e->origin_lock);
	o = origin_lookup(th->e, dc->auth);
	off = !o || !objfs_direct_budget_on(&o->tls_rx, &th->e->tls_rx_rule, dc->auth,
					    objfs_now_ns());
	pthread_mutex_unlock(&th->e->origin_lock);
	suite = SSL_get_current_cipher(dc->ssl) ?
		SSL_CIPHER_get_id(SSL_get_current_cipher(dc->ssl)) & 0xffff : 0;
	if (off || !dc->rx_counting || !dc->rx_secret_len ||
	    SSL_version(dc->ssl) != TLS1_3_VERSION || SSL_has_pending(dc->ssl) ||
	    objfs_tls_rx_new(suite, dc->rx_secret, dc->rx_secret_len, dc->rx_records, &dc->rx)) {
		objfs_debug("direct fd %d: TLS records stay with OpenSSL (%s, suite %04x, "
			    "origin off %d, secret %zu bytes, counting %d, pending %d)", dc->fd,
			    SSL_get_version(dc->ssl), suite, off, dc->rx_secret_len,
			    dc->rx_counting, SSL_has_pending(dc->ssl));
		dc->rx_never = 1;
	} else {
		objfs_stats_tls_own(0);
	}
	rx_forget_secret(dc);
}

/* Ends the attempt on @dc: the connection is kept idle or closed. The
 * request is the caller's to hand back. */
static void dc_end(struct engine_thread *th, struct objfs_dconn *dc, int keep)
{
	struct objfs_req *r = dc->r;

	if (r) {
		unjoin(th, r);
		r->dconn = NULL;
		dc->r = NULL;
	}
	if (keep) {
		dc->reused = 1;
		tls_take(th, dc);
		dc_state(dc, DC_IDLE);
	} else {
		dc_close(th, dc);
	}
}

/* Microseconds from the request written to now (the head complete). */
static int64_t ttfb_us(const struct objfs_req *r)
{
	return r->sent_ns ? (objfs_now_ns() - r->sent_ns) / 1000 : -1;
}

/* The attempt failed on the wire after it began: retried like libcurl's
 * receive errors. A reused connection that the server had closed before
 * answering anything is retried on a new one without counting. */
static void wire_error(struct engine_thread *th, struct objfs_dconn *dc, const char *what,
		       struct ends *out)
{
	struct objfs_req *r = dc->r;
	int stale = dc->reused && dc->state != DC_BODY && dc->head_len == 0;

	dc_end(th, dc, 0);
	if (stale) {
		objfs_debug("%s: kept-alive connection was closed; again on a new one", r->url);
		again(out, r);
		return;
	}
	objfs_info("%s: %s (attempt %u)", r->url, what, r->attempts);
	hand_back(out, r, -EIO, 1, -1);
}

/* @dc's request goes to libcurl, for this attempt (uncounted) and the rest
 * of its life; @off: the origin's too (see the file header). */
static void dc_fallback(struct engine_thread *th, struct objfs_dconn *dc, const char *why,
			int off, struct ends *out)
{
	struct objfs_req *r = dc->r;

	if (off)
		origin_off(th->e, dc->auth, why);
	dc_end(th, dc, 0);
	objfs_debug("%s: direct GET handed to libcurl: %s", r->url, why);
	objfs_stats_direct(1);
	r->no_direct = 1;
	again(out, r);
}

/*
 * dc->r has all its bytes. The last part of a GET ends the attempt (the
 * connection kept or closed); a part with another joined to it is handed
 * back with that one as the connection's request (the head, checked for
 * the union, holds for it). Returns 1 when @dc goes on with the next part.
 */
static int part_done(struct engine_thread *th, struct objfs_dconn *dc, struct ends *out)
{
	struct objfs_req *r = dc->r, *n = r->joined;
	int64_t t = dc->ttfb;

	objfs_stats_direct(0);
	if (!n) {
		dc_end(th, dc, dc->keep);
		hand_back(out, r, 0, 0, t);
		return 0;
	}
	r->joined = NULL;
	r->dconn = NULL;
	n->status = r->status;
	n->total = r->total;
	n->mtime = r->mtime;
	memcpy(n->etag_out, r->etag_out, sizeof(n->etag_out));
	memcpy(n->content_type, r->content_type, sizeof(n->content_type));
	n->clen = (int64_t)n->len;
	n->cr_first = n->off;
	n->cr_last = n->off + (int64_t)n->len - 1;
	n->cr_total = r->cr_total;
	n->checked = 1;
	n->dconn = dc;
	n->sent_ns = r->sent_ns;
	n->progress_ns = objfs_now_ns();
	n->slow_ns = 0; /* its own low-speed window (engine.c, watch_stalls) */
	n->rcvd = 0;
	dc->r = n;
	dc->ttfb = -1; /* the time to a first byte is the GET's, counted once */
	objfs_stats_joined();
	out->v[out->n++] = (struct objfs_direct_end){ .r = r, .ttfb = t, .next = n };
	return 1;
}

int objfs_direct_parse_head(struct objfs_req *r, const char *head, size_t end, int *keep,
			    int *chunked)
{
	const char *p = head, *stop = head + end - 2; /* the last CRLF ends the head */
	int first = 1;

	*keep = 1;
	*chunked = 0;
	if (end < 4 || memcmp(head + end - 4, "\r\n\r\n", 4) != 0 || memchr(head, '\0', end))
		return -EPROTO;
	while (p < stop) {
		const char *eol = memchr(p, '\n', (size_t)(stop - p));
		size_t n = eol ? (size_t)(eol - p) + 1 : (size_t)(stop - p);

		if (first) {
			/* "HTTP/1.x NNN": anything else is libcurl's to judge */
			if (n < 13 || strncmp(p, "HTTP/1.", 7) != 0 || p[8] != ' ' ||
			    !isdigit((unsigned char)p[9]) || !isdigit((unsigned char)p[10]) ||
			    !isdigit((unsigned char)p[11]) || (p[12] != ' ' && p[12] != '\r'))
				return -EPROTO;
			if (p[7] == '0')
				*keep = 0;
			first = 0;
		} else if (n >= 5 && strncmp(p, "HTTP/", 5) == 0) {
			return -EPROTO; /* a second status line: the header code
					   would start a new response on it */
		} else if (n > 18 && strncasecmp(p, "transfer-encoding:", 18) == 0) {
			*chunked = 1;
		} else if (n > 11 && strncasecmp(p, "connection:", 11) == 0) {
			for (const char *v = p + 11; v + 5 <= p + n; v++)
				if (strncasecmp(v, "close", 5) == 0)
					*keep = 0;
		}
		(void)objfs_http_header_line(r, p, n); /* the head is under HEAD_MAX here */
		p += n;
	}
	return first ? -EPROTO : 0;
}

/*
 * The head is complete (@end: its length, CRLFCRLF included). Parses it
 * through http_resp's header code, validates, and moves to the body.
 * Returns 0 while the attempt goes on on @dc, 1 once @dc is done with
 * (the attempt is then in @out).
 */
static int head_done(struct engine_thread *th, struct objfs_dconn *dc, size_t end,
		     struct ends *out)
{
	struct objfs_req *r = dc->r;
	size_t extra = dc->head_len - end;
	int err;

	dc->ttfb = ttfb_us(r);
	if (objfs_direct_parse_head(r, dc->head, end, &dc->keep, &dc->chunked)) {
		dc_fallback(th, dc, "not an HTTP/1.x response", 1, out);
		return 1;
	}
	if (r->status >= 300 && r->status < 400) {
		/* a redirecting origin redirects every range: libcurl's job */
		dc_fallback(th, dc, "redirect", 1, out);
		return 1;
	}
	if (r->status < 200 || r->status >= 300) {
		dc_fallback(th, dc, "error status", 0, out);
		return 1;
	}
	if (r->status != 206 || r->clen < 0 || dc->chunked) {
		dc_fallback(th, dc, "not 206 with a Content-Length", 1, out);
		return 1;
	}
	r->checked = 1;
	err = objfs_http_check_range(r);
	if (!err && extra > objfs_req_span(r)) {
		objfs_warn("%s: server sent more bytes than its range", r->url);
		err = -EIO;
	}
	if (err) {
		int64_t t = dc->ttfb;

		dc_end(th, dc, 0); /* frees dc */
		hand_back(out, r, err, err == -EIO, t);
		return 1;
	}
	dc->hoff = end; /* the body bytes that came with the head go first */
	dc_state(dc, DC_BODY);
	return 0;
}

/*
 * The TLS handshake of new https connection @dc, as far as it goes
 * without blocking. 0 once done (or under way: dc->want set, the state
 * still DC_TLS); 1 when the attempt ended (in @out): a handshake that
 * fails goes to libcurl, which connects and verifies again and says why
 * it cannot; a certificate or name this path refused (libcurl had
 * accepted the origin's) also rests the origin.
 */
static int tls_step(struct engine_thread *th, struct objfs_dconn *dc, struct ends *out)
{
	char why[160];
	ssize_t k;
	long v;

	ERR_clear_error();
	k = tls_result(dc, SSL_connect(dc->ssl));
	if (k > 0) {
		objfs_debug("direct fd %d: %s, %s%s", dc->fd, SSL_get_version(dc->ssl),
			    SSL_get_cipher_name(dc->ssl),
			    SSL_session_reused(dc->ssl) ? ", resumed" : "");
		dc_state(dc, DC_SEND);
		return 0;
	}
	if (k == -EAGAIN)
		return 1; /* nothing more now; the state stays DC_TLS */
	v = SSL_get_verify_result(dc->ssl);
	if (v != X509_V_OK) {
		snprintf(why, sizeof(why), "TLS certificate not verified: %s",
			 X509_verify_cert_error_string(v));
		dc_fallback(th, dc, why, 1, out);
	} else {
		dc_fallback(th, dc, "TLS handshake failed", 0, out);
	}
	return 1;
}

/*
 * Whether [@from, @to) of @head holds a line end that is a bare LF (a
 * '\n' not after '\r'): "\n\n" and "\n\r\n" alike, the second of which
 * libcurl ends the head at while a search for CRLF CRLF never finds it.
 */
static int bare_lf(const char *head, size_t from, size_t to)
{
	const char *p = from < to ? memchr(head + from, '\n', to - from) : NULL;

	for (; p; p = memchr(p + 1, '\n', (size_t)(head + to - (p + 1))))
		if (p == head || p[-1] != '\r')
			return 1;
	return 0;
}

/* Moves @dc along as far as it goes without blocking; an attempt that
 * ends goes to @out. Returns 1 when @dc went on with a joined part, which
 * is to be stepped next (its bytes may be buffered already). */
static int dc_step(struct engine_thread *th, struct objfs_dconn *dc, struct ends *out)
{
	struct objfs_req *r = dc->r;

	if (dc->state == DC_CONNECT) {
		int soerr = 0;
		socklen_t l = sizeof(soerr);
		struct pollfd p = { .fd = dc->fd, .events = POLLOUT };

		if (poll(&p, 1, 0) <= 0)
			return 0;
		if (getsockopt(dc->fd, SOL_SOCKET, SO_ERROR, &soerr, &l) || soerr) {
			/* libcurl connects again, and reports it if it fails */
			origin_rest(th->e, dc->auth, &dc->sa, dc->salen);
			dc_fallback(th, dc, "connect failed", 0, out);
			return 0;
		}
		dc_state(dc, dc->ssl ? DC_TLS : DC_SEND);
	}
	if (dc->state == DC_TLS && tls_step(th, dc, out))
		return 0;
	if (dc->state == DC_SEND) {
		while (dc->req_off < dc->req_len) {
			ssize_t n = dc_send(dc, dc->req + dc->req_off, dc->req_len - dc->req_off);

			if (n == -EAGAIN)
				return 0;
			if (n < 0) {
				wire_error(th, dc, "send failed", out);
				return 0;
			}
			dc->req_off += (size_t)n;
		}
		r->sent_ns = objfs_now_ns();
		r->progress_ns = r->sent_ns;
		dc_state(dc, DC_HEAD);
	}
	while (dc->state == DC_HEAD) {
		size_t seen = dc->head_len, from = seen > 3 ? seen - 3 : 0;
		ssize_t n;
		char *end;

		if (dc->head_len == sizeof(dc->head) - 1) {
			dc_fallback(th, dc, "response head too large", 0, out);
			return 0;
		}
		n = dc_recv(dc, dc->head + dc->head_len, sizeof(dc->head) - 1 - dc->head_len);
		if (n == -EAGAIN)
			return 0;
		if (n <= 0) {
			wire_error(th, dc, n ? "receive failed" : "connection closed before the "
				   "response", out);
			return 0;
		}
		r->progress_ns = objfs_now_ns();
		r->rcvd += (size_t)n;
		dc->head_len += (size_t)n;
		end = memmem(dc->head + from, dc->head_len - from, "\r\n\r\n", 4);
		/* only up to the head's end: what follows is body (up to 16 KiB
		 * of it, scanned for nothing on every GET of a small file) */
		if (bare_lf(dc->head, seen, end ? (size_t)(end - dc->head) + 4 : dc->head_len)) {
			/* bare LF line ends: libcurl's tolerance, not ours */
			dc_fallback(th, dc, "response head without CRLF line ends", 1, out);
			return 0;
		}
		if (end && head_done(th, dc, (size_t)(end - dc->head) + 4, out))
			return 0;
	}
	while (dc->state == DC_BODY) {
		size_t want = r->len - r->got;
		ssize_t n;

		if (dc->hoff < dc->head_len) { /* came with the head */
			n = (ssize_t)(dc->head_len - dc->hoff < want ? dc->head_len - dc->hoff : want);
			memcpy(r->dst + r->got, dc->head + dc->hoff, (size_t)n);
			dc->hoff += (size_t)n;
		} else {
			n = dc_recv(dc, r->dst + r->got, want);
			if (n == -EAGAIN)
				return 0;
			if (n <= 0) {
				objfs_info("%s: body ended after %zu of %zu bytes", r->url, r->got,
					   r->len);
				wire_error(th, dc, n ? "receive failed" : "connection closed in the body",
					   out);
				return 0;
			}
			r->rcvd += (size_t)n;
		}
		r->progress_ns = objfs_now_ns();
		r->got += (size_t)n;
		if (r->got == r->len)
			return part_done(th, dc, out);
	}
	return 0;
}

unsigned objfs_direct_waitfds(struct engine_thread *th)
{
	struct objfs_dconn *dc;
	unsigned n = 0;

	LIST_FOREACH(dc, &th->dconns, link) {
		dc->wi = -1;
		if (n >= th->per)
			continue;
		th->wfds[n].fd = dc->fd;
		if (dc->want)
			th->wfds[n].events = dc->want; /* a TLS call waits for it */
		else
			th->wfds[n].events = (short)(dc->state == DC_CONNECT ||
						     dc->state == DC_TLS || dc->state == DC_SEND ?
						     POLLOUT : POLLIN);
		th->wfds[n].revents = 0;
		dc->wi = (int)n++;
	}
	return n;
}

unsigned objfs_direct_progress(struct engine_thread *th, unsigned nwfds,
			       struct objfs_direct_end *ends, unsigned cap,
			       struct objfs_dconn **cursor)
{
	struct ends out = { ends, 0, cap };
	struct objfs_dconn *dc, *next;

	for (dc = *cursor ? *cursor : LIST_FIRST(&th->dconns); dc; dc = next) {
		next = LIST_NEXT(dc, link); /* dc may be closed below */
		if (dc->state == DC_IDLE) {
			/* readable while idle: closed by the server, or junk */
			if (dc->wi >= 0 && (unsigned)dc->wi < nwfds && th->wfds[dc->wi].revents)
				dc_close(th, dc);
			continue;
		}
		if (dc_step(th, dc, &out)) /* ends at most one attempt */
			next = dc;         /* went on with a joined part: again */
		if (out.n == out.cap) {
			*cursor = next;
			return out.n;
		}
	}
	*cursor = NULL;
	return out.n;
}

void objfs_direct_abort(struct engine_thread *th, struct objfs_req *r)
{
	struct objfs_dconn *dc = r->dconn;

	if (!dc)
		return;
	if (dc->state == DC_CONNECT) {
		/* never connected within the timeout: the address rests; the
		 * retry goes through libcurl, which resolves again */
		origin_rest(th->e, dc->auth, &dc->sa, dc->salen);
		r->no_direct = 1;
	} else if (dc->state == DC_TLS) {
		r->no_direct = 1; /* a handshake that stalls: libcurl's to judge */
	}
	unjoin(th, r);
	dc->r = NULL;
	r->dconn = NULL;
	dc_close(th, dc);
}

void objfs_direct_free(struct engine_thread *th)
{
	while (!LIST_EMPTY(&th->dconns))
		dc_close(th, LIST_FIRST(&th->dconns));
}
