/* Unit tests of src/util/url.c: SOURCE URL parsing and percent-encoding. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "url.h"

static const struct {
	const char *in, *origin, *host, *path;
	int port;
} good[] = {
	{ "http://127.0.0.1:8080/data/", "http://127.0.0.1:8080", "127.0.0.1", "/data/", 8080 },
	{ "http://example.com", "http://example.com:80", "example.com", "/", 80 },
	{ "HTTPS://Example.COM/a%20b/", "https://example.com:443", "example.com", "/a b/", 443 },
	{ "http://[::1]:9000/x", "http://[::1]:9000", "[::1]", "/x", 9000 },
	{ "http://h/a+b%2Bc", "http://h:80", "h", "/a+b+c", 80 },
	{ "http://h/%E6%97%A5", "http://h:80", "h", "/\xe6\x97\xa5", 80 },
};

static const char *const bad[] = {
	"", "htp:/x", "ftp://h/", "http://", "http:///path", "http://h:/x", "http://h:0/",
	"http://h:65536/", "http://h:12ab/", "http://user:pw@h/", "http://h/a b",
	"http://h/a?q=1", "http://h/a#f", "http://h/%zz", "http://h/%00", "http://h/%4",
	"http://[::1/", "http://h\x01/", "http://ho st/", "s3://bucket/",
	"http://h/a%2Fb/", "http://h/a%2f", /* an encoded '/': another path once decoded */
};

START_TEST(test_good)
{
	struct objfs_url u;
	const char *why = NULL;

	ck_assert_int_eq(objfs_url_parse(good[_i].in, &u, &why), 0);
	ck_assert_str_eq(u.origin, good[_i].origin);
	ck_assert_str_eq(u.host, good[_i].host);
	ck_assert_str_eq(u.path, good[_i].path);
	ck_assert_int_eq(u.port, good[_i].port);
	objfs_url_clear(&u);
	objfs_url_clear(&u); /* idempotent */
}
END_TEST

START_TEST(test_bad)
{
	struct objfs_url u;
	const char *why = NULL;

	ck_assert_int_eq(objfs_url_parse(bad[_i], &u, &why), -EINVAL);
	ck_assert_ptr_nonnull(why);
	ck_assert_ptr_null(u.path);
}
END_TEST

/*
 * SOURCEs that are no http(s) URL: the message names every accepted form
 * (s3:// too, which objfs_url_parse() alone does not take) and, where it
 * can, the SOURCE meant.
 */
START_TEST(test_source_why)
{
	static const struct { const char *in, *want; } v[] = {
		{ "s3:/b", "did you mean s3://b ?" },
		{ "s3:bucket/x", "did you mean s3://bucket/x ?" },
		{ "S3:///b", "did you mean s3://b ?" },
		{ "http:/h/x/", "did you mean http://h/x/ ?" },
		{ "https:h", "did you mean https://h ?" },
		{ "ftp://h/", "URL scheme ftp:// is not one objfs mounts" },
		{ "127.0.0.1:8080/data/", "no scheme (did you mean http://127.0.0.1:8080/data/ ?)" },
		{ "localhost:80", "no scheme (did you mean http://localhost:80 ?)" },
		{ "bucket/prefix", "no scheme (did you mean s3://bucket/prefix or http://bucket/prefix ?)" },
		{ "/srv/data", "not a URL" },
		{ "", "not a URL" },
	};
	char buf[512];

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		memset(buf, 'x', sizeof(buf));
		ck_assert_int_eq(objfs_url_source_why(v[i].in, buf, sizeof(buf)), 1);
		ck_assert_msg(strstr(buf, v[i].want), "'%s': '%s' lacks '%s'", v[i].in, buf,
			      v[i].want);
		ck_assert_msg(strstr(buf, "s3://BUCKET[/PREFIX], http://HOST[:PORT]/PATH or "
				     "https://HOST[:PORT]/PATH"), "'%s': '%s' lacks the forms",
			      v[i].in, buf);
		ck_assert_ptr_null(strstr(buf, "must be http:// or https://"));
	}
	/* http(s) URLs: objfs_url_parse() says what is wrong with them */
	ck_assert_int_eq(objfs_url_source_why("http://h:0/", buf, sizeof(buf)), 0);
	ck_assert_int_eq(objfs_url_source_why("HTTPS://h/a#f", buf, sizeof(buf)), 0);
	/* a small buffer is cut, never overrun */
	ck_assert_int_eq(objfs_url_source_why("ftp://h/", buf, 8), 1);
	ck_assert_uint_eq(strlen(buf), 7);
}
END_TEST

START_TEST(test_encode)
{
	static const struct { const char *in, *out; int slash; } v[] = {
		{ "a b", "a%20b", 1 },
		{ "100% done.txt", "100%25%20done.txt", 1 },
		{ "a+b&c#d?e=f", "a%2Bb%26c%23d%3Fe%3Df", 1 },
		{ "dir/sub/f~x_y-z.1", "dir/sub/f~x_y-z.1", 1 },
		{ "dir/sub", "dir%2Fsub", 0 },
		{ "\xc3\xa9", "%C3%A9", 1 },
	};

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		char *e = objfs_url_encode(v[i].in, strlen(v[i].in), v[i].slash);
		char *d = objfs_url_decode(e, strlen(e));

		ck_assert_str_eq(e, v[i].out);
		ck_assert_str_eq(d, v[i].in); /* round trip */
		free(e);
		free(d);
	}
}
END_TEST

START_TEST(test_decode_bad)
{
	static const char *const v[] = { "%", "%2", "%g0", "a%0", "%00", "x%0G" };

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		ck_assert_ptr_null(objfs_url_decode(v[i], strlen(v[i])));
	/* '+' is literal in paths. */
	char *d = objfs_url_decode("a+b", 3);
	ck_assert_str_eq(d, "a+b");
	free(d);
}
END_TEST

static Suite *url_suite(void)
{
	Suite *s = suite_create("url");
	TCase *tc = tcase_create("core");

	tcase_add_loop_test(tc, test_good, 0, sizeof(good) / sizeof(good[0]));
	tcase_add_loop_test(tc, test_bad, 0, sizeof(bad) / sizeof(bad[0]));
	tcase_add_test(tc, test_source_why);
	tcase_add_test(tc, test_encode);
	tcase_add_test(tc, test_decode_bad);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(url_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
