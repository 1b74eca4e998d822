/*
 * metrics: see metrics.h.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "buf.h"
#include "clock.h"
#include "counters.h"
#include "log.h"
#include "metrics.h"

#define BODY_MAX   (64u << 10)
#define HEAD_ROOM  256       /* the answer's header, written in front of the body */
#define REQ_MAX    4096      /* request bytes read; the first line is all that counts */
#define CONNS_MAX  64        /* connections served at once */
#define ACCEPT_MAX 16        /* accepted per turn of the loop; the rest wait in the queue */
#define IO_TIMEOUT 2         /* seconds for a whole request, then for a whole answer */

/* One connection: reading its request (out == NULL), then sending its answer. */
struct conn {
	int fd;               /* -1: a free slot */
	int64_t since;        /* accepted (monotonic ns): the oldest is dropped first */
	int64_t deadline;     /* of the whole request, then of the whole answer */
	size_t got;           /* request bytes in req */
	char *out;            /* the answer (owned), from out_off to out_len left to send */
	size_t out_off, out_len;
	char req[REQ_MAX + 1];
};

struct objfs_metrics {
	int lfd, wake[2];
	pthread_t thread;
	objfs_metrics_text_fn fn;
	void *arg;
	char labels[2048];
	struct conn conns[CONNS_MAX];
};

size_t objfs_metrics_render(char *buf, size_t cap, const char *text,
			    const struct objfs_stats *s, const char *labels)
{
	size_t len = 0;
	uint64_t cum = 0;

	if (cap)
		buf[0] = '\0';
	for (const char *p = text; *p;) {
		const char *nl = strchr(p, '\n'), *sp;
		char key[128], val[64];
		const struct objfs_counter *k;
		size_t kl, vl;

		if (!nl)
			nl = p + strlen(p);
		sp = memchr(p, ' ', (size_t)(nl - p));
		kl = sp ? (size_t)(sp - p) : 0;
		vl = sp ? (size_t)(nl - sp - 1) : 0;
		if (sp && kl && kl < sizeof(key) && vl && vl < sizeof(val)) {
			int gauge;

			memcpy(key, p, kl);
			key[kl] = '\0';
			memcpy(val, sp + 1, vl);
			val[vl] = '\0';
			/* disk_cache_state on|off: a gauge of 1 or 0 */
			if (strcmp(val, "on") == 0 || strcmp(val, "off") == 0)
				strcpy(val, val[1] == 'n' ? "1" : "0");
			if (strspn(val, "0123456789.") != strlen(val)) {
				p = *nl ? nl + 1 : nl; /* not a number: no sample */
				continue;
			}
			k = objfs_counter_find(key);
			gauge = k && k->kind == OBJFS_GAUGE;
			objfs_appendf(buf, cap, &len,
			    "# HELP objfs_%s%s %s (%s; objfs(1), STATISTICS)\n"
			    "# TYPE objfs_%s%s %s\nobjfs_%s%s{%s} %s\n",
			    key, gauge ? "" : "_total", k ? k->meaning : "objfs statistic",
			    k ? k->unit : key, key, gauge ? "" : "_total",
			    gauge ? "gauge" : "counter", key, gauge ? "" : "_total", labels, val);
		}
		p = *nl ? nl + 1 : nl;
	}
	objfs_appendf(buf, cap, &len,
	    "# HELP objfs_ttfb_seconds Time to the first byte of finished requests.\n"
	    "# TYPE objfs_ttfb_seconds histogram\n");
	for (unsigned i = 0; i + 1 < OBJFS_STATS_BUCKETS; i++) {
		cum += s->ttfb[i];
		/* bucket i holds whole microseconds up to 2^(i+1) - 1 */
		objfs_appendf(buf, cap, &len, "objfs_ttfb_seconds_bucket{%s,le=\"%.6f\"} %llu\n", labels,
		    (double)((1ull << (i + 1)) - 1) / 1e6, (unsigned long long)cum);
	}
	cum += s->ttfb[OBJFS_STATS_BUCKETS - 1];
	objfs_appendf(buf, cap, &len, "objfs_ttfb_seconds_bucket{%s,le=\"+Inf\"} %llu\n", labels,
	    (unsigned long long)cum);
	objfs_appendf(buf, cap, &len, "objfs_ttfb_seconds_sum{%s} %.6f\nobjfs_ttfb_seconds_count{%s} %llu\n",
	    labels, (double)s->ttfb_sum_us / 1e6, labels, (unsigned long long)cum);
	return len;
}

/* Appends @v to @dst as a label value: \, " and newlines escaped. */
static void label_escape(char *dst, size_t cap, const char *v)
{
	size_t n = strlen(dst);

	for (; *v && n + 3 < cap; v++) {
		if (*v == '\\' || *v == '"') {
			dst[n++] = '\\';
			dst[n++] = *v;
		} else if (*v == '\n') {
			dst[n++] = '\\';
			dst[n++] = 'n';
		} else {
			dst[n++] = *v;
		}
	}
	dst[n] = '\0';
}

static void make_labels(struct objfs_metrics *m, const char *source, const char *mountpoint)
{
	const char *scheme = strstr(source, "://"), *host, *at, *slash;
	char clean[1024];

	snprintf(clean, sizeof(clean), "%s", source);
	if (scheme) { /* drop user:password@ from the authority */
		host = scheme + 3;
		slash = strchr(host, '/');
		at = strchr(host, '@');
		if (at && (!slash || at < slash))
			snprintf(clean, sizeof(clean), "%.*s%s", (int)(host - source), source, at + 1);
	}
	strcpy(m->labels, "mount=\"");
	label_escape(m->labels, sizeof(m->labels) - 16, mountpoint);
	strcat(m->labels, "\",source=\"");
	label_escape(m->labels, sizeof(m->labels) - 2, clean);
	strcat(m->labels, "\"");
}

static void conn_close(struct conn *c)
{
	close(c->fd);
	free(c->out);
	c->fd = -1;
	c->out = NULL;
}

/* Sends what the socket takes now; closes the connection once all is sent. */
static void conn_send(struct conn *c)
{
	while (c->out_off < c->out_len) {
		ssize_t k = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (k <= 0)
			break;
		c->out_off += (size_t)k;
	}
	conn_close(c);
}

/* The request is in: renders the answer into c->out and starts sending it. */
static void conn_answer(struct objfs_metrics *m, struct conn *c)
{
	static const char nf[] = "HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\n"
				 "Content-Length: 25\r\n\r\nonly GET /metrics is here";
	const char *req = c->req;
	char text[8192], head[HEAD_ROOM];
	struct objfs_stats s;
	size_t blen, hlen;

	c->out = malloc(HEAD_ROOM + BODY_MAX);
	if (!c->out) {
		conn_close(c);
		return;
	}
	c->deadline = objfs_now_ns() + (int64_t)IO_TIMEOUT * 1000000000;
	if (strncmp(req, "GET /metrics ", 13) && strncmp(req, "GET / ", 6) &&
	    strncmp(req, "GET /metrics?", 13)) {
		memcpy(c->out, nf, sizeof(nf) - 1);
		c->out_off = 0;
		c->out_len = sizeof(nf) - 1;
		conn_send(c);
		return;
	}
	m->fn(m->arg, text, sizeof(text));
	objfs_stats_get(&s);
	blen = objfs_metrics_render(c->out + HEAD_ROOM, BODY_MAX, text, &s, m->labels);
	if (blen >= BODY_MAX)
		blen = BODY_MAX - 1;
	hlen = (size_t)snprintf(head, sizeof(head), "HTTP/1.0 200 OK\r\nContent-Type: text/plain; "
				"version=0.0.4; charset=utf-8\r\nContent-Length: %zu\r\n\r\n", blen);
	c->out_off = HEAD_ROOM - hlen;
	c->out_len = HEAD_ROOM + blen;
	memcpy(c->out + c->out_off, head, hlen);
	conn_send(c);
}

/* Reads what has come of the request; answers once its header is whole. */
static void conn_read(struct objfs_metrics *m, struct conn *c)
{
	while (c->got < REQ_MAX) {
		size_t from = c->got > 3 ? c->got - 3 : 0;
		ssize_t k = recv(c->fd, c->req + c->got, REQ_MAX - c->got, MSG_DONTWAIT);

		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (k <= 0) {
			conn_close(c);
			return;
		}
		c->got += (size_t)k;
		c->req[c->got] = '\0';
		if (strstr(c->req + from, "\r\n\r\n") || strstr(c->req + from, "\n\n"))
			break;
	}
	conn_answer(m, c); /* a whole header, or REQ_MAX bytes of one */
}

/*
 * A slot for a new connection: a free one, else the oldest still reading
 * its request (idle or slow), else the oldest of all, closed first. A
 * client that sends its request at once leaves this state within one
 * turn, so idle connections cannot crowd a scrape out.
 */
static struct conn *conn_slot(struct objfs_metrics *m)
{
	struct conn *reading = NULL, *any = NULL;

	for (int i = 0; i < CONNS_MAX; i++) {
		struct conn *c = &m->conns[i];

		if (c->fd < 0)
			return c;
		if (!c->out && (!reading || c->since < reading->since))
			reading = c;
		if (!any || c->since < any->since)
			any = c;
	}
	any = reading ? reading : any;
	conn_close(any);
	return any;
}

/* Accepts up to ACCEPT_MAX waiting connections. */
static void accept_some(struct objfs_metrics *m)
{
	for (int i = 0; i < ACCEPT_MAX; i++) {
		int fd = accept4(m->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		struct conn *c;

		if (fd < 0) {
			int e = errno;

			if (e == ECONNABORTED)
				continue;
			if (e == EMFILE || e == ENFILE) {
				struct pollfd w = { m->wake[0], POLLIN, 0 };

				poll(&w, 1, 100); /* out of descriptors: do not spin */
			}
			return;
		}
		c = conn_slot(m);
		c->fd = fd;
		c->since = objfs_now_ns();
		c->deadline = c->since + (int64_t)IO_TIMEOUT * 1000000000;
		c->got = 0;
		c->req[0] = '\0';
	}
}

/*
 * One thread, one poll() over the listener and every connection, all
 * non-blocking: a connection that sends nothing or trickles costs a slot
 * until its deadline or until a newer one needs the slot, never the
 * others' turn.
 */
static void *metrics_main(void *arg)
{
	struct objfs_metrics *m = arg;
	struct pollfd p[2 + CONNS_MAX];
	struct conn *of[2 + CONNS_MAX];

	for (;;) {
		int64_t now = objfs_now_ns(), next = INT64_MAX;
		nfds_t n = 2;
		int ms;

		p[0] = (struct pollfd){ m->lfd, POLLIN, 0 };
		p[1] = (struct pollfd){ m->wake[0], POLLIN, 0 };
		for (int i = 0; i < CONNS_MAX; i++) {
			struct conn *c = &m->conns[i];

			if (c->fd < 0)
				continue;
			if (now >= c->deadline) {
				conn_close(c);
				continue;
			}
			if (c->deadline < next)
				next = c->deadline;
			p[n] = (struct pollfd){ c->fd, c->out ? POLLOUT : POLLIN, 0 };
			of[n++] = c;
		}
		ms = next == INT64_MAX ? -1 : (int)((next - now) / 1000000 + 1);
		if (poll(p, n, ms) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents)
			break;
		for (nfds_t k = 2; k < n; k++) {
			if (!p[k].revents)
				continue;
			if (of[k]->out)
				conn_send(of[k]);
			else
				conn_read(m, of[k]);
		}
		if (p[0].revents & POLLIN)
			accept_some(m);
	}
	for (int i = 0; i < CONNS_MAX; i++)
		if (m->conns[i].fd >= 0)
			conn_close(&m->conns[i]);
	return NULL;
}

/* Splits "[ADDR:]PORT" / "[V6]:PORT" into @host and @port. 0 or -EINVAL. */
static int split_spec(const char *spec, char *host, size_t hcap, char *port, size_t pcap)
{
	const char *colon;

	if (spec[0] == '[') {
		const char *end = strchr(spec, ']');

		if (!end || end[1] != ':' || (size_t)(end - spec - 1) >= hcap)
			return -EINVAL;
		snprintf(host, hcap, "%.*s", (int)(end - spec - 1), spec + 1);
		colon = end + 1;
	} else if ((colon = strrchr(spec, ':'))) {
		if ((size_t)(colon - spec) >= hcap || colon == spec)
			return -EINVAL;
		snprintf(host, hcap, "%.*s", (int)(colon - spec), spec);
	} else {
		snprintf(host, hcap, "127.0.0.1");
		colon = spec - 1;
	}
	if (!colon[1] || strlen(colon + 1) >= pcap || strlen(colon + 1) > 5 ||
	    strspn(colon + 1, "0123456789") != strlen(colon + 1) || atoi(colon + 1) > 65535 ||
	    atoi(colon + 1) < 1) /* 1-65535: else 4294967297 would be port 1, 0 a random one */
		return -EINVAL;
	snprintf(port, pcap, "%s", colon + 1);
	return 0;
}

int objfs_metrics_start(const char *spec, const char *source, const char *mountpoint,
			objfs_metrics_text_fn fn, void *arg, struct objfs_metrics **out,
			char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_flags = AI_PASSIVE | AI_NUMERICSERV,
				  .ai_socktype = SOCK_STREAM }, *ai = NULL;
	struct objfs_metrics *m;
	char host[256], port[16];
	int one = 1, ret;

	*out = NULL;
	if (split_spec(spec, host, sizeof(host), port, sizeof(port))) {
		snprintf(err, errlen, "metrics=%s: expected PORT, ADDR:PORT or [ADDR6]:PORT", spec);
		return -EINVAL;
	}
	ret = getaddrinfo(host, port, &hints, &ai);
	if (ret) {
		snprintf(err, errlen, "metrics=%s: %s", spec, gai_strerror(ret));
		return -EINVAL;
	}
	m = calloc(1, sizeof(*m));
	if (!m) {
		freeaddrinfo(ai);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	m->fn = fn;
	m->arg = arg;
	m->wake[0] = m->wake[1] = -1;
	for (int i = 0; i < CONNS_MAX; i++)
		m->conns[i].fd = -1;
	make_labels(m, source, mountpoint);
	m->lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (m->lfd < 0 || setsockopt(m->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(m->lfd, ai->ai_addr, ai->ai_addrlen) || listen(m->lfd, 128) ||
	    pipe2(m->wake, O_CLOEXEC)) {
		ret = -errno;
		snprintf(err, errlen, "metrics=%s: cannot listen: %s", spec, strerror(errno));
		goto fail;
	}
	ret = -pthread_create(&m->thread, NULL, metrics_main, m);
	if (ret) {
		snprintf(err, errlen, "metrics: cannot start its thread: %s", strerror(-ret));
		goto fail;
	}
	pthread_setname_np(m->thread, "objfs-metrics");
	freeaddrinfo(ai);
	objfs_info("metrics on http://%s:%s/metrics", host, port);
	*out = m;
	return 0;
fail:
	freeaddrinfo(ai);
	if (m->lfd >= 0)
		close(m->lfd);
	if (m->wake[0] >= 0) {
		close(m->wake[0]);
		close(m->wake[1]);
	}
	free(m);
	return ret;
}

void objfs_metrics_stop(struct objfs_metrics *m)
{
	if (!m)
		return;
	(void)!write(m->wake[1], "x", 1);
	pthread_join(m->thread, NULL);
	close(m->lfd);
	close(m->wake[0]);
	close(m->wake[1]);
	free(m);
}
