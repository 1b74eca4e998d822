/*
 * Unit tests of src/util/stats.c: request counters, the time-to-first-byte
 * histogram and its percentiles, and the text format (truncation behaves
 * like snprintf; disk cache lines only when a disk cache is given); the
 * counter table (src/counters.c) against the text, the metrics, objfs(1)
 * STATISTICS and README; the table objfs stats shows (src/cli_stats.c).
 */
#include "config.h"

#include <check.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "counters.h"
#include "doc_text.h"
#include "metrics.h"
#include "mount.h"
#include "stats.h"

START_TEST(test_counters)
{
	struct objfs_stats s;

	objfs_stats_reset();
	objfs_stats_request(1, 100, 0, 1000);
	objfs_stats_request(3, 50, 0, 3000);
	objfs_stats_request(4, 0, -EIO, -1);
	objfs_stats_get(&s);
	ck_assert_uint_eq(s.requests, 3);
	ck_assert_uint_eq(s.errors, 1);
	ck_assert_uint_eq(s.retries, 5);
	ck_assert_uint_eq(s.bytes, 150);
	/* 1000 us is in [512, 1024), 3000 us in [2048, 4096); -1: no sample */
	ck_assert_uint_eq(s.ttfb[9], 1);
	ck_assert_uint_eq(s.ttfb[11], 1);
	uint64_t n = 0;
	for (int i = 0; i < OBJFS_STATS_BUCKETS; i++)
		n += s.ttfb[i];
	ck_assert_uint_eq(n, 2);
}
END_TEST

START_TEST(test_percentiles)
{
	uint64_t h[OBJFS_STATS_BUCKETS] = { 0 };

	ck_assert_uint_eq(objfs_stats_percentile(h, 50), 0);
	h[4] = 90; /* [16, 32) us */
	h[10] = 9; /* [1024, 2048) us */
	h[20] = 1; /* [1 s, 2 s) */
	ck_assert_uint_eq(objfs_stats_percentile(h, 50), 32);
	ck_assert_uint_eq(objfs_stats_percentile(h, 90), 32);
	ck_assert_uint_eq(objfs_stats_percentile(h, 91), 2048);
	ck_assert_uint_eq(objfs_stats_percentile(h, 99), 2048);
	ck_assert_uint_eq(objfs_stats_percentile(h, 100), 2u << 20);
	ck_assert_uint_eq(objfs_stats_percentile(h, 0), 32);
}
END_TEST

START_TEST(test_format)
{
	struct objfs_stats s = { .requests = 7, .errors = 1, .retries = 2, .bytes = 12345 };
	struct objfs_cache_stats c = { .hits = 5, .misses = 6, .bytes = 4096, .cap = 8192 };
	char buf[2048], small[16];
	size_t n;

	s.ttfb[3] = 1;
	n = objfs_stats_format(buf, sizeof(buf), &s, &c, NULL, NULL);
	ck_assert_uint_eq(n, strlen(buf));
	ck_assert_ptr_nonnull(strstr(buf, "requests 7\n"));
	ck_assert_ptr_nonnull(strstr(buf, "request_errors 1\n"));
	ck_assert_ptr_nonnull(strstr(buf, "retries 2\n"));
	ck_assert_ptr_nonnull(strstr(buf, "bytes 12345\n"));
	ck_assert_ptr_nonnull(strstr(buf, "ttfb_p50_us 16\n"));
	ck_assert_ptr_nonnull(strstr(buf, "cache_hits 5\n"));
	ck_assert_ptr_nonnull(strstr(buf, "cache_misses 6\n"));
	ck_assert_ptr_nonnull(strstr(buf, "cache_cap 8192\n"));
	ck_assert_ptr_null(strstr(buf, "disk_cache"));
	ck_assert(buf[n - 1] == '\n');
	/* Without cache counters: only the engine's lines. */
	ck_assert_uint_lt(objfs_stats_format(buf, sizeof(buf), &s, NULL, NULL, NULL), n);
	ck_assert_ptr_null(strstr(buf, "cache_"));
	/* Truncated: NUL-terminated, returns the length needed. */
	ck_assert_uint_eq(objfs_stats_format(small, sizeof(small), &s, &c, NULL, NULL), n);
	ck_assert_uint_eq(strlen(small), sizeof(small) - 1);
	ck_assert_int_eq(strncmp(small, "requests 7\nrequ", sizeof(small) - 1), 0);
	ck_assert_uint_eq(objfs_stats_format(NULL, 0, &s, &c, NULL, NULL), n);
}
END_TEST

START_TEST(test_format_disk)
{
	struct objfs_stats s = { .requests = 1 };
	struct objfs_cache_stats c = { .hits = 1 };
	struct objfs_diskcache_stats d = {
		.hits = 256, .misses = 3, .bad = 2, .read_errors = 1, .writes = 250,
		.write_bytes = 1048576000, .writes_dropped = 6, .evictions = 4, .files = 250,
		.bytes = 1049600000, .cap = 2147483648ULL,
	};
	static const char *const want[] = {
		"disk_cache_state on\n", "disk_cache_hits 256\n", "disk_cache_misses 3\n",
		"disk_cache_bad 2\n", "disk_cache_read_errors 1\n", "disk_cache_writes 250\n",
		"disk_cache_write_bytes 1048576000\n", "disk_cache_writes_dropped 6\n",
		"disk_cache_evictions 4\n", "disk_cache_files 250\n",
		"disk_cache_bytes 1049600000\n", "disk_cache_cap 2147483648\n",
	};
	struct objfs_side_stats g = { .sessions_open = 1, .sessions_total = 3, .fills = 7,
				      .fill_bytes = 4096, .fill_errors = 2, .ring_wait_us = 1500,
				      .sessions_refused = 4, .ring_bytes = 1 << 20,
				      .replies_deferred = 9, .fill_runs = 5,
				      .fills_cancelled = 45 };
	char buf[4096];
	size_t n = objfs_stats_format(buf, sizeof(buf), &s, &c, &d, &g);

	ck_assert_uint_eq(n, strlen(buf));
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		ck_assert_msg(strstr(buf, want[i]), "missing '%s' in:\n%s", want[i], buf);
	ck_assert_ptr_nonnull(strstr(buf, "cache_hits 1\n"));
	ck_assert_ptr_nonnull(strstr(buf, "side_sessions_open 1\nside_sessions_total 3\n"
					  "side_fills 7\nside_fill_bytes 4096\n"
					  "side_fill_errors 2\nside_ring_wait_us 1500\n"
					  "side_sessions_refused 4\nside_ring_bytes 1048576\n"
					  "side_replies_deferred 9\nside_fill_runs 5\n"
					  "side_fills_cancelled 45\n"));
	/* switched off after a disk error */
	d.degraded = 1;
	objfs_stats_format(buf, sizeof(buf), &s, &c, &d, NULL);
	ck_assert_ptr_nonnull(strstr(buf, "disk_cache_state off\n"));
	ck_assert_ptr_null(strstr(buf, "disk_cache_state on"));
	/* the stats file's 4 KiB holds every line */
	ck_assert_uint_lt(n, 4096);
}
END_TEST

/* The Prometheus exposition of the stats text (src/metrics.c). */
START_TEST(test_metrics_render)
{
	struct objfs_stats s = { 0 };
	char buf[16384];
	size_t n;

	s.ttfb[0] = 1;    /* <= 1 us */
	s.ttfb[10] = 3;   /* 1024-2047 us */
	s.ttfb[31] = 1;   /* beyond every finite bucket */
	s.ttfb_sum_us = 9000000;
	n = objfs_metrics_render(buf, sizeof(buf), "requests 12\ncache_bytes 4096\n"
				 "disk_cache_state off\nbad line\n", &s, "mount=\"/m\"");
	ck_assert_uint_eq(n, strlen(buf));
	ck_assert_ptr_nonnull(strstr(buf, "# TYPE objfs_requests_total counter\n"
					  "objfs_requests_total{mount=\"/m\"} 12\n"));
	ck_assert_ptr_nonnull(strstr(buf, "# TYPE objfs_cache_bytes gauge\n"
					  "objfs_cache_bytes{mount=\"/m\"} 4096\n"));
	ck_assert_ptr_nonnull(strstr(buf, "objfs_disk_cache_state{mount=\"/m\"} 0\n"));
	ck_assert_ptr_null(strstr(buf, "bad"));
	ck_assert_ptr_nonnull(strstr(buf, "objfs_ttfb_seconds_bucket{mount=\"/m\",le=\"0.000001\"} 1\n"));
	ck_assert_ptr_nonnull(strstr(buf, "objfs_ttfb_seconds_bucket{mount=\"/m\",le=\"0.002047\"} 4\n"));
	ck_assert_ptr_nonnull(strstr(buf, "objfs_ttfb_seconds_bucket{mount=\"/m\",le=\"+Inf\"} 5\n"));
	ck_assert_ptr_nonnull(strstr(buf, "objfs_ttfb_seconds_sum{mount=\"/m\"} 9.000000\n"
					  "objfs_ttfb_seconds_count{mount=\"/m\"} 5\n"));
	/* a short buffer: the length needed, nothing past the end */
	ck_assert_uint_eq(objfs_metrics_render(buf, 10, "requests 12\n", &s, "a=\"b\""),
			  objfs_metrics_render(NULL, 0, "requests 12\n", &s, "a=\"b\""));
	ck_assert_uint_eq(strlen(buf), 9);
}
END_TEST

static size_t no_text(void *arg, char *buf, size_t cap)
{
	(void)arg;
	if (cap)
		buf[0] = '\0';
	return 0;
}

/*
 * The metrics endpoint gives a request IO_TIMEOUT (2 s) in all: a client
 * sending a byte now and then must not hold its thread, and the unmount
 * joining it, for as long as it goes on (11 s for 12 bytes, hours possible).
 * Ports are 1-65535 (not 4294967297 read as port 1, nor 0 a random one).
 */
START_TEST(test_metrics_slow_client)
{
	struct objfs_metrics *m = NULL;
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	char err[256], spec[64];
	struct timespec t0, t1;
	int l = socket(AF_INET, SOCK_STREAM, 0), c, closed = 0;

	ck_assert_int_eq(objfs_metrics_start("127.0.0.1:4294967297", "http://h/", "/m", no_text, NULL,
					     &m, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(objfs_metrics_start("127.0.0.1:0", "http://h/", "/m", no_text, NULL, &m,
					     err, sizeof(err)), -EINVAL);
	/* a free port */
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ck_assert_int_eq(bind(l, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(getsockname(l, (struct sockaddr *)&sa, &sl), 0);
	close(l);
	snprintf(spec, sizeof(spec), "127.0.0.1:%d", ntohs(sa.sin_port));
	ck_assert_int_eq(objfs_metrics_start(spec, "http://h/", "/m", no_text, NULL, &m, err,
					     sizeof(err)), 0);
	c = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_eq(connect(c, (struct sockaddr *)&sa, sizeof(sa)), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	/* a byte of "GET /metrics" every 0.4 s: never silent for 2 s */
	for (int i = 0; i < 10 && !closed; i++) {
		char b;

		if (send(c, "GET /metrics" + i, 1, MSG_NOSIGNAL) != 1 ||
		    recv(c, &b, 1, MSG_DONTWAIT) == 0)
			closed = 1;
		else
			usleep(400 * 1000);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	close(c);
	objfs_metrics_stop(m);
	/* cut at 2 s (before: served as long as the bytes came) */
	ck_assert_msg(closed && t1.tv_sec - t0.tv_sec <= 3, "closed %d after %ld s", closed,
		      (long)(t1.tv_sec - t0.tv_sec));
}
END_TEST

/*
 * The counter table (src/counters.c) is the stats text: every line the
 * format writes has a row, every row is written when its part is there,
 * and names are unique.
 */
START_TEST(test_counter_table)
{
	struct objfs_stats s = { .requests = 1 };
	struct objfs_cache_stats c = { .hits = 1 };
	struct objfs_diskcache_stats d = { .hits = 1 };
	struct objfs_side_stats g = { .fills = 1 };
	char buf[8192];
	size_t rows = 0, lines = 0;

	objfs_stats_format(buf, sizeof(buf), &s, &c, &d, &g);
	for (const char *p = buf; *p; p = strchr(p, '\n') + 1) {
		char key[128];

		ck_assert_int_eq(sscanf(p, "%127s", key), 1);
		ck_assert_msg(objfs_counter_find(key), "stats line '%s' has no row in the counter "
			      "table (src/counters.c)", key);
		lines++;
	}
	for (const struct objfs_counter *k = objfs_counters; k->name; k++) {
		char want[160];

		rows++;
		ck_assert_msg(k->unit && k->unit[0] && k->meaning && k->meaning[0] &&
			      strlen(k->meaning) < 120, "row %s: a unit and a one-line meaning",
			      k->name);
		ck_assert_msg(objfs_counter_find(k->name) == k, "two rows named %s", k->name);
		if (k->from == OBJFS_FROM_MOUNT)
			continue;
		snprintf(want, sizeof(want), "%s%s ", k == objfs_counters ? "" : "\n", k->name);
		ck_assert_msg(strstr(buf, want), "row %s is not in the stats text", k->name);
	}
	ck_assert_uint_eq(lines + 1, rows); /* inodes: mount.c's own line */
	ck_assert_ptr_nonnull(objfs_counter_find("inodes"));
	/* documented nowhere once; each must have its row (and so its doc) */
	ck_assert_ptr_nonnull(objfs_counter_find("cache_wait_us"));
	ck_assert_ptr_nonnull(objfs_counter_find("prefetch_capped"));
	ck_assert_ptr_nonnull(objfs_counter_find("cache_pool_bytes"));
	ck_assert_ptr_nonnull(objfs_counter_find("cache_direct_bytes"));
	ck_assert_ptr_nonnull(objfs_counter_find("side_replies_deferred"));
	ck_assert_ptr_nonnull(objfs_counter_find("side_fill_runs"));
}
END_TEST

/* HELP text and type come from the counter table; its pointer exists. */
START_TEST(test_metrics_help)
{
	struct objfs_stats s = { 0 };
	char buf[16384], want[512], *man = doc_read("docs/objfs.1");
	const struct objfs_counter *w = objfs_counter_find("cache_wait_us"),
				   *pool = objfs_counter_find("cache_pool_bytes");

	objfs_metrics_render(buf, sizeof(buf), "cache_wait_us 5\ncache_pool_bytes 7\n", &s,
			     "m=\"x\"");
	snprintf(want, sizeof(want), "# HELP objfs_cache_wait_us_total %s (us; objfs(1), "
		 "STATISTICS)\n# TYPE objfs_cache_wait_us_total counter\n", w->meaning);
	ck_assert_msg(strstr(buf, want), "want:\n%s\ngot:\n%s", want, buf);
	snprintf(want, sizeof(want), "# HELP objfs_cache_pool_bytes %s (bytes; objfs(1), "
		 "STATISTICS)\n# TYPE objfs_cache_pool_bytes gauge\n", pool->meaning);
	ck_assert_msg(strstr(buf, want), "want:\n%s\ngot:\n%s", want, buf);
	ck_assert_msg(man, "docs/objfs.1 not found (srcdir)");
	ck_assert_msg(strstr(man, "\n.SH STATISTICS\n"), "the HELP text points to objfs(1) "
		      "STATISTICS, which does not exist");
	free(man);
}
END_TEST

/* objfs(1) STATISTICS has an item ".BR name \" (kind, unit)\"" per row, and no other. */
START_TEST(test_man_statistics)
{
	char *man = doc_read("docs/objfs.1"), *sec;
	struct doc_list heads = { 0 }, names = { 0 };

	ck_assert_msg(man, "docs/objfs.1 not found (srcdir)");
	sec = doc_man_section(man, "STATISTICS");
	ck_assert_msg(sec, "objfs(1) has no STATISTICS section");
	doc_man_heads(sec, &heads);
	for (size_t i = 0; i < heads.n; i++) {
		struct doc_list one = { 0 };
		const struct objfs_counter *k;
		char want[128];

		doc_bold_names(heads.v[i], &one);
		ck_assert_msg(one.n == 1, "STATISTICS item '%s': one counter name", heads.v[i]);
		k = objfs_counter_find(one.v[0]);
		ck_assert_msg(k, "objfs(1) STATISTICS has an item for '%s', which is no counter",
			      one.v[0]);
		snprintf(want, sizeof(want), "(%s, %s)", k->kind == OBJFS_GAUGE ? "gauge" :
			 "counter", k->unit);
		ck_assert_msg(strstr(heads.v[i], want), "objfs(1) STATISTICS: %s should say %s, "
			      "says '%s'", k->name, want, heads.v[i]);
		ck_assert_msg(!doc_list_has(&names, k->name), "two items for %s", k->name);
		doc_list_add(&names, k->name);
		doc_list_free(&one);
	}
	for (const struct objfs_counter *k = objfs_counters; k->name; k++)
		ck_assert_msg(doc_list_has(&names, k->name), "objfs(1) STATISTICS does not "
			      "describe %s", k->name);
	doc_list_free(&heads);
	doc_list_free(&names);
	free(sec);
	free(man);
}
END_TEST

/* README's counter table: a row per counter, its kind and unit. */
START_TEST(test_readme_counters)
{
	char *md = doc_read("README.md"), cell[1024];
	struct doc_list rows = { 0 }, names = { 0 };

	ck_assert_msg(md, "README.md not found (srcdir)");
	doc_md_rows(md, "| counter |", &rows);
	for (size_t i = 0; i < rows.n; i++) {
		struct doc_list one = { 0 };
		const struct objfs_counter *k;

		doc_md_cell(rows.v[i], 0, cell, sizeof(cell));
		doc_md_names(cell, &one);
		ck_assert_msg(one.n == 1, "README counter row '%s': one name", rows.v[i]);
		k = objfs_counter_find(one.v[0]);
		ck_assert_msg(k, "README's counter table lists '%s', which is no counter",
			      one.v[0]);
		doc_md_cell(rows.v[i], 1, cell, sizeof(cell));
		ck_assert_msg(!strcmp(cell, k->kind == OBJFS_GAUGE ? "gauge" : "counter"),
			      "README: %s is a %s, its row says %s", k->name,
			      k->kind == OBJFS_GAUGE ? "gauge" : "counter", cell);
		doc_md_cell(rows.v[i], 2, cell, sizeof(cell));
		ck_assert_msg(!strcmp(cell, k->unit), "README: %s counts %s, its row says %s",
			      k->name, k->unit, cell);
		doc_list_add(&names, k->name);
		doc_list_free(&one);
	}
	for (const struct objfs_counter *k = objfs_counters; k->name; k++)
		ck_assert_msg(doc_list_has(&names, k->name), "README's counter table has no row "
			      "for %s", k->name);
	doc_list_free(&rows);
	doc_list_free(&names);
	free(md);
}
END_TEST

/* objfs stats' table: sections, units for people, rates, keys it does not know. */
START_TEST(test_cli_table)
{
	const char *prev = "requests 100\nbytes 1048576\ncache_bytes 4096\n"
			   "cache_wait_us 1000\n";
	const char *cur = "requests 150\nbytes 11534336\ncache_bytes 2147483648\n"
			  "cache_wait_us 3000000\nnew_counter 7\ndisk_cache_state off\n";
	char buf[4096], h[64];
	size_t n;

	ck_assert_str_eq(objfs_cli_human(h, sizeof(h), 1536, "bytes", 0), "1.5 KiB");
	ck_assert_str_eq(objfs_cli_human(h, sizeof(h), 512, "bytes", 1), "512 B/s");
	ck_assert_str_eq(objfs_cli_human(h, sizeof(h), 2500, "us", 0), "2.5 ms");
	ck_assert_str_eq(objfs_cli_human(h, sizeof(h), 3e6, "us", 0), "3.00 s");
	ck_assert_str_eq(objfs_cli_human(h, sizeof(h), 1234, "requests", 0), "1234");
	ck_assert_str_eq(objfs_cli_human(h, sizeof(h), 1234567, "blocks", 0), "1.2M");
	ck_assert_str_eq(objfs_cli_human(h, sizeof(h), 2.5, "requests", 1), "2.5/s");
	n = objfs_cli_stats_table(buf, sizeof(buf), cur, prev, 2.0);
	ck_assert_uint_eq(n, strlen(buf));
	ck_assert_msg(strstr(buf, "requests\n") && strstr(buf, "memory cache\n") &&
		      strstr(buf, "disk cache (cache_dir)\n") && strstr(buf, "other\n"),
		      "sections:\n%s", buf);
	/* 50 requests and 10 MiB in 2 s; a gauge has no rate; keys kept in order */
	ck_assert_msg(strstr(buf, "  requests ") && strstr(buf, " 150             25/s\n"), "%s",
		      buf);
	ck_assert_msg(strstr(buf, " 11.0 MiB        5.0 MiB/s\n"), "%s", buf);
	ck_assert_msg(strstr(buf, " 2.0 GiB\n"), "%s", buf);
	ck_assert_msg(strstr(buf, " 3.00 s         1.50 s/s\n"), "%s", buf);
	ck_assert_msg(strstr(buf, "  disk_cache_state ") && strstr(buf, " off\n"), "%s", buf);
	ck_assert_msg(strstr(buf, "  new_counter ") && strstr(buf, " 7\n"), "%s", buf);
	ck_assert(strstr(buf, "requests ") < strstr(buf, "cache_bytes "));
	/* no earlier text: values only; a counter that went down (a new mount): "-" */
	objfs_cli_stats_table(buf, sizeof(buf), cur, NULL, 0);
	ck_assert_ptr_null(strstr(buf, "/s"));
	objfs_cli_stats_table(buf, sizeof(buf), prev, cur, 1);
	ck_assert_msg(strstr(buf, " 100                -\n"), "%s", buf);
	/* truncated like snprintf */
	ck_assert_uint_eq(objfs_cli_stats_table(buf, 16, cur, prev, 2.0), n);
	ck_assert_uint_eq(strlen(buf), 15);
}
END_TEST

static Suite *stats_suite(void)
{
	Suite *s = suite_create("stats");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_counters);
	tcase_add_test(tc, test_percentiles);
	tcase_add_test(tc, test_format);
	tcase_add_test(tc, test_format_disk);
	tcase_add_test(tc, test_metrics_render);
	tcase_add_test(tc, test_metrics_slow_client);
	tcase_add_test(tc, test_counter_table);
	tcase_add_test(tc, test_metrics_help);
	tcase_add_test(tc, test_man_statistics);
	tcase_add_test(tc, test_readme_counters);
	tcase_add_test(tc, test_cli_table);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(stats_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
