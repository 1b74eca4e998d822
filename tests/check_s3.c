/*
 * Unit tests of the S3 backend's parsing (src/store_s3.c through
 * store_s3_i.h): ListObjectsV2 pages with encoding-type=url, keys that
 * cannot be file names, marker objects, pagination tokens, hostile bodies;
 * and the precedence objfs_s3_resolve_cfg() applies to region, endpoint and
 * addressing style (option, environment, profile, default), table-driven.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "creds.h"
#include "listing.h"
#include "store.h"
#include "store_s3_i.h"

#define HDR "<?xml version=\"1.0\" encoding=\"UTF-8\"?>" \
	"<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"

static const struct objfs_listent *find(const struct objfs_listing *l, const char *name)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->ents[i].name, name) == 0)
			return &l->ents[i];
	return NULL;
}

START_TEST(test_page)
{
	static const char xml[] = HDR
		"<Name>b</Name><Prefix>data%2F</Prefix><KeyCount>7</KeyCount>"
		"<MaxKeys>1000</MaxKeys><Delimiter>%2F</Delimiter><IsTruncated>true</IsTruncated>"
		"<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
		"<EncodingType>url</EncodingType>"
		"<Contents><Key>data%2F</Key><LastModified>2026-11-22T10:00:00.000Z</LastModified>"
		"<ETag>&quot;d41d8cd98f00b204e9800998ecf8427e&quot;</ETag><Size>0</Size></Contents>"
		"<Contents><Key>data%2Fa+b.txt</Key><LastModified>2026-11-22T10:00:01.000Z</LastModified>"
		"<ETag>&quot;aaa&quot;</ETag><Size>12</Size><StorageClass>STANDARD</StorageClass></Contents>"
		"<Contents><Key>data%2Fplus%2Bsign</Key><LastModified>2026-11-22T10:00:01Z</LastModified>"
		"<ETag>&quot;bbb-2&quot;</ETag><Size>9999999999</Size></Contents>"
		"<Contents><Key>data%2F%E6%97%A5%25%26%3F%3D%7E%2A%27</Key><LastModified>bad</LastModified>"
		"<Size>1</Size></Contents>"
		"<Contents><Key>data%2F..</Key><Size>1</Size></Contents>"
		"<Contents><Key>data%2F.</Key><Size>1</Size></Contents>"
		"<Contents><Key>other%2Fx</Key><Size>1</Size></Contents>"
		"<Contents><Key>data%2Fnosize</Key></Contents>"
		"<Contents><Key>data%2Fbadsize</Key><Size>-5</Size></Contents>"
		"<CommonPrefixes><Prefix>data%2Fsub%2F</Prefix></CommonPrefixes>"
		"<CommonPrefixes><Prefix>data%2F%2F</Prefix></CommonPrefixes>"
		"<CommonPrefixes><Prefix>data%2F..%2F</Prefix></CommonPrefixes>"
		"<CommonPrefixes><Prefix>data%2Fnoslash</Prefix></CommonPrefixes>"
		"</ListBucketResult>";
	struct objfs_listing f = { 0 }, d = { 0 };
	struct objfs_s3_page pg;
	const struct objfs_listent *e;

	ck_assert_int_eq(objfs_s3_parse_list(xml, strlen(xml), "data/", &f, &d, &pg), 0);
	ck_assert(pg.truncated);
	ck_assert_str_eq(pg.next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
	ck_assert_uint_eq(f.n, 3);
	e = find(&f, "a b.txt"); /* '+' is a space in S3's url encoding */
	ck_assert_ptr_nonnull(e);
	ck_assert_int_eq(e->size, 12);
	ck_assert_int_eq(e->mtime, 1795341601);
	ck_assert_str_eq(e->etag, "\"aaa\"");
	e = find(&f, "plus+sign");
	ck_assert_ptr_nonnull(e);
	ck_assert_int_eq(e->size, 9999999999LL);
	e = find(&f, "\xe6\x97\xa5%&?=~*'");
	ck_assert_ptr_nonnull(e);
	ck_assert_int_eq(e->mtime, -1);
	ck_assert_ptr_null(e->etag);
	ck_assert_uint_eq(d.n, 1);
	ck_assert_str_eq(d.ents[0].name, "sub");
	ck_assert(d.ents[0].is_dir);
	free(pg.next_token);
	objfs_listing_clear(&f);
	objfs_listing_clear(&d);
}
END_TEST

START_TEST(test_root_last_page)
{
	static const char xml[] = HDR
		"<IsTruncated>false</IsTruncated>"
		"<Contents><Key>top</Key><Size>3</Size></Contents>"
		"<CommonPrefixes><Prefix>a%2F</Prefix></CommonPrefixes></ListBucketResult>";
	struct objfs_listing f = { 0 }, d = { 0 };
	struct objfs_s3_page pg;

	ck_assert_int_eq(objfs_s3_parse_list(xml, strlen(xml), "", &f, &d, &pg), 0);
	ck_assert(!pg.truncated);
	ck_assert_ptr_null(pg.next_token);
	ck_assert_uint_eq(f.n, 1);
	ck_assert_uint_eq(d.n, 1);
	objfs_listing_clear(&f);
	objfs_listing_clear(&d);
}
END_TEST

static const char *const hostile[] = {
	"",
	"not xml at all",
	"<Error><Code>NoSuchBucket</Code></Error>",
	HDR "<IsTruncated>true</IsTruncated></ListBucketResult>", /* no token */
	"<?xml version=\"1.0\"?><!DOCTYPE x [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">"
	"<!ENTITY c \"&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;\">]><ListBucketResult><Contents><Key>&c;</Key>"
	"<Size>1</Size></Contents><IsTruncated>true</IsTruncated></ListBucketResult>",
	HDR "<Contents><Key>",
	"\x00\x01\x02<ListBucketResult>",
};

START_TEST(test_hostile)
{
	struct objfs_listing f = { 0 }, d = { 0 };
	struct objfs_s3_page pg;
	size_t len = _i == 6 ? 22 : strlen(hostile[_i]);

	ck_assert_int_eq(objfs_s3_parse_list(hostile[_i], len, "", &f, &d, &pg), -EPROTO);
	ck_assert_ptr_null(pg.next_token);
	objfs_listing_clear(&f);
	objfs_listing_clear(&d);
}
END_TEST

START_TEST(test_long_key_and_decode)
{
	char xml[2048], name[300];
	struct objfs_listing f = { 0 }, d = { 0 };
	struct objfs_s3_page pg;
	char *dec;

	memset(name, 'x', 256);
	name[256] = '\0';
	snprintf(xml, sizeof(xml), HDR "<Contents><Key>%s</Key><Size>1</Size></Contents>"
		 "<Contents><Key>%.255s</Key><Size>2</Size></Contents></ListBucketResult>",
		 name, name);
	ck_assert_int_eq(objfs_s3_parse_list(xml, strlen(xml), "", &f, &d, &pg), 0);
	ck_assert_uint_eq(f.n, 1); /* 256 bytes skipped, 255 kept */
	ck_assert_int_eq(f.ents[0].size, 2);
	objfs_listing_clear(&f);

	dec = objfs_s3_decode("a+b%2Bc%20d", 11);
	ck_assert_str_eq(dec, "a b+c d");
	free(dec);
	ck_assert_ptr_null(objfs_s3_decode("%zz", 3));
	ck_assert_ptr_null(objfs_s3_decode("%00", 3));
}
END_TEST

START_TEST(test_misc)
{
	ck_assert_int_eq(objfs_s3_parse_time("1970-01-01T00:00:10.000Z"), 10);
	ck_assert_int_eq(objfs_s3_parse_time("2026-11-22T10:00:01Z"), 1795341601);
	ck_assert_int_eq(objfs_s3_parse_time("garbage"), -1);
	ck_assert_int_eq(objfs_s3_parse_time("2026-11-22T10:00:01+junk"), -1);
	ck_assert(objfs_s3_bucket_valid("my-bucket.1"));
	ck_assert(objfs_s3_bucket_valid("Legacy_Bucket"));
	ck_assert(!objfs_s3_bucket_valid("ab"));
	ck_assert(!objfs_s3_bucket_valid("-abc"));
	ck_assert(!objfs_s3_bucket_valid("a/b/c"));
	ck_assert(!objfs_s3_bucket_valid("a b c"));
	ck_assert(!objfs_s3_bucket_valid("abc?x"));
}
END_TEST

/* The environment variables objfs_s3_resolve_cfg() reads, in this order. */
static const char *const resolve_vars[] = {
	"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL",
};

#define AWS_EP(r) "https://s3." r ".amazonaws.com"

/* One row: what is set (NULL: not set) and what must win. */
static const struct resolve_case {
	const char *name;
	struct objfs_s3_cfg o;          /* endpoint, region, profile, path_style, virtual_host */
	const char *env[4];             /* in resolve_vars order */
	struct objfs_aws_profile prof;  /* region, endpoint_url */
	const char *region, *endpoint;
	int vhost;
} resolve_cases[] = {
	{ "defaults", { 0 }, { 0 }, { 0 }, "us-east-1", AWS_EP("us-east-1"), 1 },
	{ "profile region", { 0 }, { 0 }, { "eu-west-3", NULL },
	  "eu-west-3", AWS_EP("eu-west-3"), 1 },
	{ "AWS_DEFAULT_REGION over profile", { 0 }, { NULL, "ap-south-1" }, { "eu-west-3", NULL },
	  "ap-south-1", AWS_EP("ap-south-1"), 1 },
	{ "AWS_REGION over AWS_DEFAULT_REGION", { 0 }, { "us-west-2", "ap-south-1" }, { 0 },
	  "us-west-2", AWS_EP("us-west-2"), 1 },
	{ "empty AWS_REGION is unset", { 0 }, { "", "ap-south-1" }, { 0 },
	  "ap-south-1", AWS_EP("ap-south-1"), 1 },
	{ "option region over all", { .region = "sa-east-1" }, { "us-west-2", "ap-south-1" },
	  { "eu-west-3", NULL }, "sa-east-1", AWS_EP("sa-east-1"), 1 },
	{ "path_style on AWS", { .path_style = 1 }, { 0 }, { 0 },
	  "us-east-1", AWS_EP("us-east-1"), 0 },
	{ "profile endpoint: path style", { 0 }, { 0 }, { NULL, "http://prof:1" },
	  "us-east-1", "http://prof:1", 0 },
	{ "AWS_ENDPOINT_URL over profile", { 0 }, { NULL, NULL, NULL, "http://env:2" },
	  { NULL, "http://prof:1" }, "us-east-1", "http://env:2", 0 },
	{ "AWS_ENDPOINT_URL_S3 over AWS_ENDPOINT_URL", { 0 },
	  { NULL, NULL, "http://s3env:3", "http://env:2" }, { 0 }, "us-east-1", "http://s3env:3", 0 },
	{ "empty AWS_ENDPOINT_URL_S3 is unset", { 0 }, { NULL, NULL, "", "http://env:2" }, { 0 },
	  "us-east-1", "http://env:2", 0 },
	{ "option endpoint over all", { .endpoint = "http://opt:4" },
	  { NULL, NULL, "http://s3env:3", "http://env:2" }, { NULL, "http://prof:1" },
	  "us-east-1", "http://opt:4", 0 },
	{ "virtual_host on an endpoint", { .endpoint = "http://opt:4", .virtual_host = 1 },
	  { 0 }, { 0 }, "us-east-1", "http://opt:4", 1 },
	{ "path_style wins over virtual_host", { .endpoint = "http://opt:4", .path_style = 1,
	  .virtual_host = 1 }, { 0 }, { 0 }, "us-east-1", "http://opt:4", 0 },
	{ "both styles on AWS", { .path_style = 1, .virtual_host = 1 }, { 0 }, { 0 },
	  "us-east-1", AWS_EP("us-east-1"), 0 },
	{ "region from env, endpoint from profile", { 0 }, { "eu-north-1" },
	  { "eu-west-3", "http://prof:1" }, "eu-north-1", "http://prof:1", 0 },
};

START_TEST(test_resolve_cfg)
{
	const struct resolve_case *c = &resolve_cases[_i];
	struct objfs_s3_where w;
	size_t nvars = sizeof(resolve_vars) / sizeof(resolve_vars[0]);

	for (size_t v = 0; v < nvars; v++) {
		if (c->env[v])
			setenv(resolve_vars[v], c->env[v], 1);
		else
			unsetenv(resolve_vars[v]);
	}
	ck_assert_msg(objfs_s3_resolve_cfg(&c->o, &c->prof, &w) == 0, "%s", c->name);
	ck_assert_msg(strcmp(w.region, c->region) == 0, "%s: region %s, want %s", c->name,
		      w.region, c->region);
	ck_assert_msg(strcmp(w.endpoint, c->endpoint) == 0, "%s: endpoint %s, want %s",
		      c->name, w.endpoint, c->endpoint);
	ck_assert_msg(w.vhost == c->vhost, "%s: vhost %d, want %d", c->name, w.vhost, c->vhost);
	objfs_s3_where_clear(&w);
	ck_assert_ptr_null(w.region);
	objfs_s3_where_clear(NULL);
	for (size_t v = 0; v < nvars; v++)
		unsetenv(resolve_vars[v]);
}
END_TEST

static Suite *s3_suite(void)
{
	Suite *s = suite_create("s3");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_page);
	tcase_add_test(tc, test_root_last_page);
	tcase_add_loop_test(tc, test_hostile, 0, sizeof(hostile) / sizeof(hostile[0]));
	tcase_add_test(tc, test_long_key_and_decode);
	tcase_add_test(tc, test_misc);
	tcase_add_loop_test(tc, test_resolve_cfg, 0,
			    sizeof(resolve_cases) / sizeof(resolve_cases[0]));
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(s3_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
