/*
 * Unit tests of src/engine.c's stall watchdog, against a small HTTP server
 * on 127.0.0.1 run by the test itself (one thread per connection). What it
 * answers depends on the path:
 *
 *   /stall    206 headers and 10 of the 100 body bytes, then silence until
 *             the client closes (curl's low-speed check alone gave up only
 *             ~5 s after the timeout: its rate is averaged over 5 s)
 *   /silent   nothing at all (a first byte that never comes)
 *   /trickle  the 100 bytes in 10 pieces 250 ms apart: slower in total than
 *             the timeout, but never silent for it, so it must succeed
 *   /ok       the 100 bytes at once
 *
 * Every body is bytes 0-99 of a 1000-byte object whose byte i is i * 7.
 */
#include "config.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"

#define BODY 100
#define MAX_CONNS 64

struct srv {
	int fd, port;
	atomic_int stop, requests;
	pthread_t acc;
	pthread_mutex_t lock;
	pthread_t conns[MAX_CONNS];
	int nconns;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void body_of(char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (char)(i * 7);
}

/* A peer that went away is no reason for SIGPIPE: the asserts tell. */
static void put(int c, const char *p, size_t n)
{
	(void)!send(c, p, n, MSG_NOSIGNAL);
}

/* Blocks until the peer closes (or errors). */
static void wait_close(int c)
{
	char tmp[256];

	while (recv(c, tmp, sizeof(tmp), 0) > 0)
		;
}

static void *conn_main(void *arg)
{
	struct srv *s = ((void **)arg)[0];
	int c = (int)(intptr_t)((void **)arg)[1];
	char req[4096], body[BODY], head[256];
	size_t got = 0;

	free(arg);
	body_of(body, sizeof(body));
	snprintf(head, sizeof(head), "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes "
		 "0-%d/1000\r\nContent-Length: %d\r\nETag: \"e1\"\r\n\r\n", BODY - 1, BODY);
	for (;;) {
		ssize_t n = recv(c, req + got, sizeof(req) - 1 - got, 0);
		char *end;

		if (n <= 0)
			break;
		got += (size_t)n;
		req[got] = '\0';
		end = strstr(req, "\r\n\r\n");
		if (!end)
			continue;
		atomic_fetch_add(&s->requests, 1);
		got = 0;
		if (strncmp(req, "GET /stall ", 11) == 0) {
			put(c, head, strlen(head));
			put(c, body, 10);
			wait_close(c);
			break;
		} else if (strncmp(req, "GET /silent ", 12) == 0) {
			wait_close(c);
			break;
		} else if (strncmp(req, "GET /trickle ", 13) == 0) {
			put(c, head, strlen(head));
			for (int i = 0; i < 10; i++) {
				usleep(250 * 1000);
				put(c, body + i * 10, 10);
			}
		} else {
			put(c, head, strlen(head));
			put(c, body, BODY);
		}
	}
	close(c);
	return NULL;
}

static void *accept_main(void *arg)
{
	struct srv *s = arg;

	while (!atomic_load(&s->stop)) {
		struct pollfd p = { .fd = s->fd, .events = POLLIN };
		void **a;
		int c;

		if (poll(&p, 1, 50) <= 0)
			continue;
		c = accept(s->fd, NULL, NULL);
		if (c < 0)
			continue;
		a = malloc(2 * sizeof(*a));
		ck_assert_ptr_nonnull(a);
		a[0] = s;
		a[1] = (void *)(intptr_t)c;
		pthread_mutex_lock(&s->lock);
		ck_assert_int_lt(s->nconns, MAX_CONNS);
		ck_assert_int_eq(pthread_create(&s->conns[s->nconns++], NULL, conn_main, a), 0);
		pthread_mutex_unlock(&s->lock);
	}
	return NULL;
}

static void srv_start(struct srv *s)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);

	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	s->fd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(s->fd, 0);
	ck_assert_int_eq(bind(s->fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(s->fd, 16), 0);
	ck_assert_int_eq(getsockname(s->fd, (struct sockaddr *)&a, &len), 0);
	s->port = ntohs(a.sin_port);
	ck_assert_int_eq(pthread_create(&s->acc, NULL, accept_main, s), 0);
}

/* After objfs_engine_free (which closes the client side of every connection). */
static void srv_stop(struct srv *s)
{
	atomic_store(&s->stop, 1);
	pthread_join(s->acc, NULL);
	for (int i = 0; i < s->nconns; i++)
		pthread_join(s->conns[i], NULL);
	close(s->fd);
	pthread_mutex_destroy(&s->lock);
}

static struct objfs_engine *engine(unsigned conns)
{
	struct objfs_engine_cfg cfg = {
		.threads = 1, .max_host_conns = conns, .timeout = 1.0, .retries = 1,
	};
	struct objfs_engine *e = NULL;

	ck_assert_int_eq(objfs_engine_new(&cfg, &e), 0);
	return e;
}

static void ranged(struct objfs_req *r, char *url, size_t cap, int port, const char *path,
		   char *dst)
{
	snprintf(url, cap, "http://127.0.0.1:%d%s", port, path);
	objfs_req_init(r);
	r->url = url;
	r->method = OBJFS_GET;
	r->off = 0;
	r->len = BODY;
	r->dst = dst;
	r->expect_size = 1000;
}

/*
 * Runs ranged GETs of @paths (@n of them) into @dst (n x BODY bytes) on a
 * fresh server and engine (@conns connections); returns the engine's result
 * and, through @el and @served, the seconds it took and the requests the
 * server saw. @r receives the finished requests.
 */
static int fetch(const char *const *paths, size_t n, unsigned conns, struct objfs_req *r,
		 char *dst, double *el, int *served)
{
	struct objfs_req *rp[4];
	char url[4][128];
	struct objfs_engine *e;
	struct srv s;
	double t0;
	int err;

	ck_assert_uint_le(n, 4);
	srv_start(&s);
	e = engine(conns);
	for (size_t i = 0; i < n; i++) {
		ranged(&r[i], url[i], sizeof(url[i]), s.port, paths[i], dst + i * BODY);
		rp[i] = &r[i];
	}
	t0 = now_s();
	err = objfs_engine_run(e, rp, n);
	*el = now_s() - t0;
	for (size_t i = 0; i < n; i++)
		objfs_req_clear(&r[i]);
	objfs_engine_free(e);
	srv_stop(&s);
	*served = atomic_load(&s.requests);
	return err;
}

static const char *const stalled[] = { "/stall", "/silent" };

/* A silent attempt is ended after the timeout and retried; then EIO-class
 * -ETIMEDOUT, after about (retries + 1) x timeout, not timeout + 5 s each. */
START_TEST(test_stall_retried_then_fails)
{
	struct objfs_req r;
	char dst[BODY];
	double el;
	int served, err = fetch(&stalled[_i], 1, 4, &r, dst, &el, &served);

	ck_assert_int_eq(err, -ETIMEDOUT);
	ck_assert_uint_eq(r.attempts, 2);
	ck_assert_int_eq(served, 2);
	ck_assert_msg(el >= 2.0 && el < 5.0, "%s: failed after %.2f s, expected 2-5 s "
		      "(2 attempts of a 1 s timeout)", stalled[_i], el);
}
END_TEST

/* Slow in total but never silent for the timeout: one attempt, right bytes. */
START_TEST(test_trickle_is_progress)
{
	static const char *const paths[] = { "/trickle" };
	struct objfs_req r;
	char dst[BODY], want[BODY];
	double el;
	int served, err = fetch(paths, 1, 4, &r, dst, &el, &served);

	body_of(want, sizeof(want));
	ck_assert_int_eq(err, 0);
	ck_assert_uint_eq(r.attempts, 1);
	ck_assert_uint_eq(r.got, BODY);
	ck_assert_mem_eq(dst, want, BODY);
	ck_assert_msg(el >= 2.0, "the trickle took %.2f s, expected about 2.5 s", el);
}
END_TEST

/* One connection: the second request waits in curl's queue longer than the
 * timeout behind a trickling one. Queued is not stalled: both succeed with
 * one attempt each. */
START_TEST(test_queued_is_not_stalled)
{
	static const char *const paths[] = { "/trickle", "/ok" };
	struct objfs_req r[2];
	char dst[2 * BODY], want[BODY];
	double el;
	int served, err = fetch(paths, 2, 1, r, dst, &el, &served);

	body_of(want, sizeof(want));
	ck_assert_int_eq(err, 0);
	ck_assert_uint_eq(r[0].attempts, 1);
	ck_assert_uint_eq(r[1].attempts, 1);
	ck_assert_int_eq(served, 2);
	ck_assert_mem_eq(dst, want, BODY);
	ck_assert_mem_eq(dst + BODY, want, BODY);
}
END_TEST

static Suite *engine_suite(void)
{
	Suite *s = suite_create("engine");
	TCase *tc = tcase_create("watchdog");

	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_stall_retried_then_fails, 0,
			    sizeof(stalled) / sizeof(stalled[0]));
	tcase_add_test(tc, test_trickle_is_progress);
	tcase_add_test(tc, test_queued_is_not_stalled);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(engine_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
