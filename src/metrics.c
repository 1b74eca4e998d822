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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "buf.h"
#include "clock.h"
#include "log.h"
#include "metrics.h"

#define BODY_MAX   (64u << 10)
#define REQ_MAX    8192
#define IO_TIMEOUT 2 /* seconds, each of the request and the answer */

struct objfs_metrics {
	int lfd, wake[2];
	pthread_t thread;
	objfs_metrics_text_fn fn;
	void *arg;
	char labels[2048];
};

/* Levels, not counts: served as gauges, the rest as counters (_total). */
static const char *const gauges[] = {
	"ttfb_p50_us", "ttfb_p90_us", "ttfb_p99_us", "cache_bytes", "cache_pool_bytes", "cache_cap",
	"disk_cache_state", "disk_cache_files", "disk_cache_bytes", "disk_cache_cap",
	"side_sessions_open", "side_ring_bytes", "inodes",
};

static int is_gauge(const char *key)
{
	for (size_t i = 0; i < sizeof(gauges) / sizeof(gauges[0]); i++)
		if (strcmp(key, gauges[i]) == 0)
			return 1;
	return 0;
}

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
			gauge = is_gauge(key);
			objfs_appendf(buf, cap, &len,
			    "# HELP objfs_%s%s objfs statistic %s (objfs(1), STATISTICS)\n"
			    "# TYPE objfs_%s%s %s\nobjfs_%s%s{%s} %s\n",
			    key, gauge ? "" : "_total", key, key, gauge ? "" : "_total",
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

/*
 * Waits for @events on @fd until @deadline (monotonic ns): 1 ready, 0 not.
 * One deadline for a whole request or answer: a per-call timeout let a
 * client sending a byte a second hold the thread (and the unmount that
 * joins it) for hours (a review).
 */
static int wait_io(int fd, short events, int64_t deadline)
{
	struct pollfd p = { fd, events, 0 };
	int64_t left = (deadline - objfs_now_ns()) / 1000000;

	return left > 0 && poll(&p, 1, (int)left) == 1;
}

static void send_all(int fd, const char *p, size_t n, int64_t deadline)
{
	while (n && wait_io(fd, POLLOUT, deadline)) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (k <= 0)
			return;
		p += k;
		n -= (size_t)k;
	}
}

static void serve_one(struct objfs_metrics *m, int fd)
{
	char req[REQ_MAX + 1], head[256], *body, *text;
	int64_t deadline = objfs_now_ns() + (int64_t)IO_TIMEOUT * 1000000000;
	size_t got = 0, blen;
	struct objfs_stats s;
	int ok;

	while (got < REQ_MAX) {
		ssize_t k;

		if (!wait_io(fd, POLLIN, deadline))
			return; /* the whole request within IO_TIMEOUT, or nothing */
		k = recv(fd, req + got, REQ_MAX - got, MSG_DONTWAIT);
		if (k <= 0)
			return;
		got += (size_t)k;
		req[got] = '\0';
		if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
			break;
	}
	req[got] = '\0';
	ok = strncmp(req, "GET /metrics ", 13) == 0 || strncmp(req, "GET / ", 6) == 0 ||
	     strncmp(req, "GET /metrics?", 13) == 0;
	if (!ok) {
		static const char nf[] = "HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\n"
					 "Content-Length: 25\r\n\r\nonly GET /metrics is here";
		send_all(fd, nf, sizeof(nf) - 1, objfs_now_ns() + (int64_t)IO_TIMEOUT * 1000000000);
		return;
	}
	text = malloc(8192);
	body = malloc(BODY_MAX);
	if (!text || !body) {
		free(text);
		free(body);
		return;
	}
	m->fn(m->arg, text, 8192);
	objfs_stats_get(&s);
	blen = objfs_metrics_render(body, BODY_MAX, text, &s, m->labels);
	if (blen >= BODY_MAX)
		blen = BODY_MAX - 1;
	snprintf(head, sizeof(head), "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; "
		 "charset=utf-8\r\nContent-Length: %zu\r\n\r\n", blen);
	deadline = objfs_now_ns() + (int64_t)IO_TIMEOUT * 1000000000;
	send_all(fd, head, strlen(head), deadline);
	send_all(fd, body, blen, deadline);
	free(text);
	free(body);
}

static void *metrics_main(void *arg)
{
	struct objfs_metrics *m = arg;
	struct pollfd p[2] = { { m->lfd, POLLIN, 0 }, { m->wake[0], POLLIN, 0 } };

	for (;;) {
		int fd;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		if (!(p[0].revents & POLLIN))
			continue;
		fd = accept4(m->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE)
				poll(p + 1, 1, 100); /* out of descriptors: do not spin */
			continue;
		}
		serve_one(m, fd);
		close(fd);
	}
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
	    atoi(colon + 1) < 1) /* 1-65535: 4294967297 was port 1, 0 a random one (review) */
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
	make_labels(m, source, mountpoint);
	m->lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (m->lfd < 0 || setsockopt(m->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(m->lfd, ai->ai_addr, ai->ai_addrlen) || listen(m->lfd, 16) ||
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
