/*
 * Unit tests of the S3 backend's parsing (src/store/s3_list.c and
 * store_s3.c through store_s3_i.h): ListObjectsV2 pages with
 * encoding-type=url, keys that cannot be file names, marker objects,
 * pagination tokens, hostile bodies; the page reader against libxml2's
 * tree on the documents it takes (entities, CDATA, nested and repeated
 * fields, huge keys, every truncation of a page) and the ones it leaves to
 * the tree (DOCTYPE, comments, '\r', other encodings, prefixes);
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

/* A page opening as the servers we ask (encoding-type=url) answer. */
#define ENC "<EncodingType>url</EncodingType>"
#define HDR "<?xml version=\"1.0\" encoding=\"UTF-8\"?>" \
	"<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">" ENC

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

/*
 * The keys a page leaves out, for the one line a listing logs: counted
 * all, the first few named with the reason, alike by both parsers; a
 * listing of several pages adds them up.
 */
START_TEST(test_skipped_named)
{
	static const char xml[] = HDR
		"<IsTruncated>false</IsTruncated>"
		"<Contents><Key>d%2F..</Key><Size>1</Size></Contents>"
		"<Contents><Key>d%2Fok</Key><Size>1</Size></Contents>"
		"<Contents><Key>d%2Fnosize</Key></Contents>"
		"<CommonPrefixes><Prefix>d%2F%2F</Prefix></CommonPrefixes>"
		"<CommonPrefixes><Prefix>d%2F.%2F</Prefix></CommonPrefixes>"
		"<CommonPrefixes><Prefix>elsewhere%2F</Prefix></CommonPrefixes>"
		"</ListBucketResult>";
	static const char want[] = "'d/..' (a '..' segment), 'd/nosize' (no valid Size), "
		"'d//' (an empty segment: '//', or '/' first), 'd/./' (a '.' segment) and 1 more";
	struct objfs_listing f = { 0 }, d = { 0 };
	struct objfs_s3_page pg;
	struct objfs_s3_skips all = { 0 };
	char text[800], big[300];

	ck_assert_int_eq(objfs_s3_parse_list_fast(xml, strlen(xml), "d/", &f, &d, &pg), 0);
	ck_assert_uint_eq(f.n, 1);
	ck_assert_uint_eq(d.n, 0);
	ck_assert_uint_eq(pg.skipped.n, 5);
	ck_assert_uint_eq(pg.skipped.named, OBJFS_S3_SKIPS_NAMED);
	objfs_s3_skips_text(&pg.skipped, text, sizeof(text));
	ck_assert_str_eq(text, want);
	objfs_s3_skips_merge(&all, &pg.skipped);
	objfs_listing_clear(&f);
	ck_assert_int_eq(objfs_s3_parse_list_tree(xml, strlen(xml), "d/", &f, &d, &pg), 0);
	objfs_s3_skips_text(&pg.skipped, text, sizeof(text));
	ck_assert_str_eq(text, want);
	objfs_s3_skips_merge(&all, &pg.skipped);
	ck_assert_uint_eq(all.n, 10);
	ck_assert_uint_eq(all.named, OBJFS_S3_SKIPS_NAMED);
	objfs_s3_skips_text(&all, text, sizeof(text));
	ck_assert_ptr_nonnull(strstr(text, "and 6 more"));
	/* a new page starts from nothing */
	objfs_listing_clear(&f);
	ck_assert_int_eq(objfs_s3_parse_list(xml, strlen(xml), "d/", &f, &d, &pg), 0);
	ck_assert_uint_eq(pg.skipped.n, 5);
	/* a long key is cut, the text stays within its buffer */
	memset(big, 'k', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	memset(&all, 0, sizeof(all));
	objfs_s3_skips_add(&all, big, "a name over 255 bytes");
	objfs_s3_skips_add(&all, NULL, "an entry without a Key");
	objfs_s3_skips_text(&all, text, 40);
	ck_assert_uint_eq(strlen(text), 39);
	objfs_s3_skips_text(&all, text, sizeof(text));
	ck_assert_ptr_nonnull(strstr(text, "kkk...' (a name over 255 bytes), '' (an entry without a Key)"));
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

/* Both parsers on @xml: the same return, page and entries. Returns the reader's rc. */
static int same_both(const char *xml, size_t len, const char *prefix)
{
	struct objfs_listing ff = { 0 }, fd = { 0 }, tf = { 0 }, td = { 0 };
	struct objfs_s3_page fp, tp;
	int frc = objfs_s3_parse_list_fast(xml, len, prefix, &ff, &fd, &fp);
	int trc = objfs_s3_parse_list_tree(xml, len, prefix, &tf, &td, &tp);

	if (frc == -EAGAIN) {
		ck_assert_uint_eq(ff.n + fd.n, 0);
		ck_assert_ptr_null(fp.next_token);
	} else {
		ck_assert_int_eq(frc, trc);
		ck_assert_int_eq(fp.truncated, tp.truncated);
		ck_assert_uint_eq(fp.entries, tp.entries);
		ck_assert((!fp.next_token && !tp.next_token) ||
			  (fp.next_token && tp.next_token && !strcmp(fp.next_token, tp.next_token)));
		ck_assert_uint_eq(ff.n, tf.n);
		ck_assert_uint_eq(fd.n, td.n);
		for (size_t i = 0; i < ff.n + fd.n; i++) {
			const struct objfs_listent *x = i < ff.n ? &ff.ents[i] : &fd.ents[i - ff.n];
			const struct objfs_listent *y = i < ff.n ? &tf.ents[i] : &td.ents[i - ff.n];

			ck_assert_str_eq(x->name, y->name);
			ck_assert_int_eq(x->is_dir, y->is_dir);
			ck_assert_int_eq(x->size, y->size);
			ck_assert_int_eq(x->mtime, y->mtime);
			ck_assert((!x->etag && !y->etag) ||
				  (x->etag && y->etag && !strcmp(x->etag, y->etag)));
		}
	}
	free(fp.next_token);
	free(tp.next_token);
	objfs_listing_clear(&ff);
	objfs_listing_clear(&fd);
	objfs_listing_clear(&tf);
	objfs_listing_clear(&td);
	return frc;
}

/* Documents the reader takes (expect 0 or its own error), with the tree's result. */
static const struct {
	const char *xml;
	int rc; /* the reader's, = the tree's */
} fast_docs[] = {
	{ HDR "<IsTruncated>false</IsTruncated><Contents><Key>a</Key><Size>1</Size></Contents>"
	  "</ListBucketResult>", 0 },
	/* no declaration, single quotes, standalone, white space in tags */
	{ "<ListBucketResult xmlns='x' >" ENC "<Contents ><Key>a</Key ><Size>1</Size></Contents>"
	  "</ListBucketResult >\n", 0 },
	{ "<?xml version='1.0' encoding='utf-8' standalone='yes' ?>\n<ListBucketResult>" ENC
	  "<Contents><Key>a</Key><Size>1</Size></Contents></ListBucketResult>", 0 },
	/* entities and character references, in keys, ETags and the token */
	{ HDR "<IsTruncated>true</IsTruncated><NextContinuationToken>a&amp;b&#x3C;&#62;"
	  "</NextContinuationToken><Contents><Key>x%26y&amp;z&#x41;&#66;&#xe9;&#x1F600;</Key>"
	  "<ETag>&quot;e&apos;</ETag><Size>1</Size></Contents></ListBucketResult>", 0 },
	/* CDATA, split texts, a nested element inside a field, self-closing fields */
	{ HDR "<Contents><Key><![CDATA[c<d>&amp;]]>tail</Key><Size>0<![CDATA[7]]></Size>"
	  "<ETag/></Contents><Contents><Key>n<i>este</i>d</Key><Size>2</Size></Contents>"
	  "<Contents><Key/><Size>3</Size></Contents></ListBucketResult>", 0 },
	/* repeated fields: the first wins; IsTruncated after the entries */
	{ HDR "<Contents><Key>first</Key><Key>second</Key><Size>1</Size><Size>2</Size>"
	  "</Contents><CommonPrefixes><Prefix>p%2F</Prefix><Prefix>q%2F</Prefix></CommonPrefixes>"
	  "<NextContinuationToken>t1</NextContinuationToken><IsTruncated>true</IsTruncated>"
	  "<IsTruncated>false</IsTruncated><NextContinuationToken>t2</NextContinuationToken>"
	  "</ListBucketResult>", 0 },
	/* missing fields: no Size, no Key, no LastModified/ETag, no Prefix */
	{ HDR "<Contents><Key>nosize</Key></Contents><Contents><Size>1</Size></Contents>"
	  "<Contents><Key>bare</Key><Size>1</Size></Contents><CommonPrefixes/>"
	  "<CommonPrefixes><X>y</X></CommonPrefixes></ListBucketResult>", 0 },
	/* fields at the wrong depth do not count */
	{ HDR "<Key>top</Key><Size>1</Size><X><Contents><Key>deep</Key><Size>1</Size></Contents>"
	  "</X><Contents><Owner><Key>owner</Key></Owner><Key>k</Key><Size>1</Size></Contents>"
	  "</ListBucketResult>", 0 },
	/* truncated without a token, and an empty token */
	{ HDR "<IsTruncated>true</IsTruncated><Contents><Key>a</Key><Size>1</Size></Contents>"
	  "</ListBucketResult>", -EPROTO },
	{ HDR "<IsTruncated>true</IsTruncated><NextContinuationToken/></ListBucketResult>",
	  -EPROTO },
	/* non-ASCII UTF-8 and ']' in text */
	{ HDR "<Name>caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80 a]b]]c</Name><Contents><Key>"
	  "%C3%A9</Key><Size>1</Size></Contents></ListBucketResult>", 0 },
};

START_TEST(test_fast_same)
{
	ck_assert_int_eq(same_both(fast_docs[_i].xml, strlen(fast_docs[_i].xml), ""),
			 fast_docs[_i].rc);
	same_both(fast_docs[_i].xml, strlen(fast_docs[_i].xml), "p/");
}
END_TEST

/* Documents the reader leaves to the tree (some well-formed, some not). */
static const char *const tree_docs[] = {
	"<?xml version=\"1.0\"?><!DOCTYPE x [<!ENTITY e \"ent\">]><ListBucketResult><Contents>"
	"<Key>&e;</Key><Size>1</Size></Contents></ListBucketResult>",
	HDR "<!-- comment --><Contents><Key>a</Key><Size>1</Size></Contents></ListBucketResult>",
	HDR "<?pi x?></ListBucketResult>",
	HDR "\r\n<Contents><Key>a\r\nb</Key><Size>1</Size></Contents></ListBucketResult>",
	"\xef\xbb\xbf" HDR "</ListBucketResult>",
	"<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?><ListBucketResult><Contents><Key>\xe9"
	"</Key><Size>1</Size></Contents></ListBucketResult>",
	"<ListBucketResult xmlns:s3=\"u\"><s3:Contents><s3:Key>a</s3:Key><s3:Size>1</s3:Size>"
	"</s3:Contents></ListBucketResult>",
	HDR "<Contents><Key>&nbsp;</Key><Size>1</Size></Contents></ListBucketResult>",
	HDR "<Contents><Key>a</Key><Size>1</Size></Contents>",
	HDR "<Contents><Key>a</Size></Contents></ListBucketResult>",
	HDR "<Name>a]]>b</Name></ListBucketResult>",
	HDR "<Name>\xc0\xaf</Name></ListBucketResult>",
	HDR "<Name>\xed\xa0\x80</Name></ListBucketResult>",
	HDR "<Name>\xef\xbf\xbe</Name></ListBucketResult>",
	HDR "<Name>&#0;</Name></ListBucketResult>",
	HDR "<Name>&#xD800;</Name></ListBucketResult>",
	HDR "</ListBucketResult><ListBucketResult></ListBucketResult>",
	HDR "</ListBucketResult>trailing",
	"<ListBucketResult a=\"1\" a=\"2\"></ListBucketResult>",
	"<ListBucketResult a=\"1\"b=\"2\"></ListBucketResult>",
	"<Error><Code>NoSuchBucket</Code></Error>",
	" <?xml version=\"1.0\"?><ListBucketResult/>",
	"<?xml encoding=\"UTF-8\"?><ListBucketResult/>",
	"<?xml version=\"1.1\"?><ListBucketResult/>",
};

START_TEST(test_tree_docs)
{
	struct objfs_listing f = { 0 }, d = { 0 };
	struct objfs_s3_page pg;
	const char *xml = tree_docs[_i];

	ck_assert_int_eq(objfs_s3_parse_list_fast(xml, strlen(xml), "", &f, &d, &pg), -EAGAIN);
	ck_assert_uint_eq(f.n + d.n, 0);
	objfs_listing_clear(&f);
	objfs_listing_clear(&d);
}
END_TEST

/*
 * A page says whether its keys are url-encoded: some S3 servers ignore
 * encoding-type=url and send keys as they are, with no EncodingType (decoded
 * anyway, "a+b" would list as "a b" and "x%41" as "xA", fetched as
 * another key). Both parsers, with EncodingType absent, other, before or
 * after the entries; and values with XML white space around them
 * (IsTruncated "1", a Size "\n12\n"), a Size past 2^53 skipped.
 */
static const struct {
	const char *xml;
	int fast_rc;             /* the reader's: 0, or -EAGAIN (to the tree) */
	const char *files[4];    /* expected names, in order */
	const char *dir;         /* the one common prefix, or NULL */
	int truncated;
} enc_docs[] = {
	/* raw keys, no EncodingType: decoded by the reader first, so given up */
	{ "<ListBucketResult><IsTruncated>false</IsTruncated>"
	  "<Contents><Key>p/a+b.txt</Key><Size>1</Size></Contents>"
	  "<Contents><Key>p/x%41</Key><Size>2</Size></Contents>"
	  "<Contents><Key>p/100%.csv</Key><Size>3</Size></Contents>"
	  "<CommonPrefixes><Prefix>p/d+e/</Prefix></CommonPrefixes></ListBucketResult>",
	  -EAGAIN, { "a+b.txt", "x%41", "100%.csv" }, "d+e", 0 },
	/* another encoding named before the entries: taken as they are */
	{ "<ListBucketResult><EncodingType>none</EncodingType>"
	  "<Contents><Key>p/a+b%20</Key><Size>1</Size></Contents></ListBucketResult>",
	  0, { "a+b%20" }, NULL, 0 },
	/* url after the entries (the reader assumed it): decoded, no fallback */
	{ "<ListBucketResult><Contents><Key>p%2Fa+b%41</Key><Size>1</Size></Contents>"
	  "<IsTruncated> 1\n</IsTruncated><NextContinuationToken>t</NextContinuationToken>"
	  "<EncodingType> url </EncodingType></ListBucketResult>",
	  0, { "a bA" }, NULL, 1 },
	/* url named after entries as something else: the tree decides (raw) */
	{ "<ListBucketResult><Contents><Key>p/a+b</Key><Size>1</Size></Contents>"
	  "<EncodingType>URL-ish</EncodingType></ListBucketResult>",
	  -EAGAIN, { "a+b" }, NULL, 0 },
	/* sizes: white space around is a size; past 2^53 or signed is not */
	{ "<ListBucketResult>" ENC "<IsTruncated>\ntrue\n</IsTruncated>"
	  "<NextContinuationToken>t</NextContinuationToken>"
	  "<Contents><Key>p%2Fws</Key><Size>\n12\n</Size></Contents>"
	  "<Contents><Key>p%2Fhuge</Key><Size>99999999999999999999</Size></Contents>"
	  "<Contents><Key>p%2Fpast53</Key><Size>9007199254740993</Size></Contents>"
	  "<Contents><Key>p%2Fplus</Key><Size>+5</Size></Contents>"
	  "<Contents><Key>p%2Fmax</Key><Size>9007199254740992</Size></Contents></ListBucketResult>",
	  0, { "ws", "max" }, NULL, 1 },
};

START_TEST(test_encoding_type)
{
	struct objfs_listing f = { 0 }, d = { 0 };
	struct objfs_s3_page pg;
	size_t n = 0;

	ck_assert_int_eq(same_both(enc_docs[_i].xml, strlen(enc_docs[_i].xml), "p/"),
			 enc_docs[_i].fast_rc);
	ck_assert_int_eq(objfs_s3_parse_list(enc_docs[_i].xml, strlen(enc_docs[_i].xml), "p/",
					     &f, &d, &pg), 0);
	while (n < 4 && enc_docs[_i].files[n])
		n++;
	ck_assert_uint_eq(f.n, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_str_eq(f.ents[i].name, enc_docs[_i].files[i]);
	ck_assert_int_eq(f.n ? f.ents[0].size : 0, f.n ? (_i == 4 ? 12 : 1) : 0);
	ck_assert_uint_eq(d.n, enc_docs[_i].dir != NULL);
	if (enc_docs[_i].dir)
		ck_assert_str_eq(d.ents[0].name, enc_docs[_i].dir);
	ck_assert_int_eq(pg.truncated, enc_docs[_i].truncated);
	free(pg.next_token);
	objfs_listing_clear(&f);
	objfs_listing_clear(&d);
}
END_TEST

/* What the reader makes of entities, CDATA and missing fields. */
START_TEST(test_fast_values)
{
	static const char xml[] = HDR
		"<IsTruncated>true</IsTruncated><NextContinuationToken>t&amp;k"
		"</NextContinuationToken>"
		"<Contents><Key>a%26b&amp;c&#x2B;d</Key><LastModified>1970-01-01T00:00:10.000Z"
		"</LastModified><ETag>&quot;e1&quot;</ETag><Size>5</Size></Contents>"
		"<Contents><Key><![CDATA[x<y>]]></Key><Size>6</Size><ETag></ETag></Contents>"
		"<Contents><Key>nosize</Key></Contents>"
		"<CommonPrefixes><Prefix>d%2F</Prefix></CommonPrefixes>"
		"</ListBucketResult>";
	struct objfs_listing f = { 0 }, d = { 0 };
	struct objfs_s3_page pg;
	const struct objfs_listent *e;

	ck_assert_int_eq(objfs_s3_parse_list_fast(xml, strlen(xml), "", &f, &d, &pg), 0);
	ck_assert(pg.truncated);
	ck_assert_str_eq(pg.next_token, "t&k");
	ck_assert_uint_eq(pg.entries, 4);
	ck_assert_uint_eq(f.n, 2);
	e = find(&f, "a&b&c d"); /* &#x2B; is a '+', a space in S3's url encoding */
	ck_assert_ptr_nonnull(e);
	ck_assert_int_eq(e->size, 5);
	ck_assert_int_eq(e->mtime, 10);
	ck_assert_str_eq(e->etag, "\"e1\"");
	e = find(&f, "x<y>");
	ck_assert_ptr_nonnull(e);
	ck_assert_int_eq(e->size, 6);
	ck_assert_int_eq(e->mtime, -1);
	ck_assert_ptr_null(e->etag);
	ck_assert_uint_eq(d.n, 1);
	ck_assert_str_eq(d.ents[0].name, "d");
	free(pg.next_token);
	objfs_listing_clear(&f);
	objfs_listing_clear(&d);
}
END_TEST

/*
 * Huge keys: 100 KB (read, skipped: over 255 bytes) and 2 MiB (past the
 * reader's limit on one text: the tree reads it, and skips it too).
 */
START_TEST(test_huge_keys)
{
	size_t big = _i ? (2u << 20) : 100000, len;
	char *xml = malloc(big + 512), *p = xml;
	struct objfs_listing f = { 0 }, d = { 0 };
	struct objfs_s3_page pg;

	p += sprintf(p, HDR "<Contents><Key>");
	memset(p, 'k', big);
	p += big;
	p += sprintf(p, "</Key><Size>1</Size></Contents><Contents><Key>ok</Key><Size>2</Size>"
		     "</Contents></ListBucketResult>");
	len = (size_t)(p - xml);
	ck_assert_int_eq(same_both(xml, len, ""), _i ? -EAGAIN : 0);
	ck_assert_int_eq(objfs_s3_parse_list(xml, len, "", &f, &d, &pg), 0);
	ck_assert_uint_eq(f.n, 1);
	ck_assert_str_eq(f.ents[0].name, "ok");
	ck_assert_uint_eq(pg.entries, 2);
	objfs_listing_clear(&f);
	free(xml);
}
END_TEST

/* Every cut of a page short of its end tag is -EPROTO with nothing listed. */
START_TEST(test_truncated_xml)
{
	static const char xml[] = HDR
		"<IsTruncated>true</IsTruncated><NextContinuationToken>tok</NextContinuationToken>"
		"<Contents><Key>a&amp;b</Key><LastModified>2026-11-22T10:00:01Z</LastModified>"
		"<ETag>&quot;x&quot;</ETag><Size>12</Size></Contents>"
		"<Contents><Key><![CDATA[c]]></Key><Size>1</Size></Contents>"
		"<CommonPrefixes><Prefix>p%2F</Prefix></CommonPrefixes></ListBucketResult>";
	size_t full = strlen(xml);

	for (size_t cut = 0; cut < full; cut++) {
		struct objfs_listing f = { 0 }, d = { 0 };
		struct objfs_s3_page pg;

		ck_assert_int_eq(objfs_s3_parse_list_fast(xml, cut, "", &f, &d, &pg), -EAGAIN);
		ck_assert_int_eq(objfs_s3_parse_list(xml, cut, "", &f, &d, &pg), -EPROTO);
		ck_assert_uint_eq(f.n + d.n, 0);
		ck_assert_ptr_null(pg.next_token);
		objfs_listing_clear(&f);
		objfs_listing_clear(&d);
	}
	ck_assert_int_eq(same_both(xml, full, ""), 0);
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
	tcase_add_test(tc, test_skipped_named);
	tcase_add_test(tc, test_root_last_page);
	tcase_add_loop_test(tc, test_hostile, 0, sizeof(hostile) / sizeof(hostile[0]));
	tcase_add_test(tc, test_long_key_and_decode);
	tcase_add_test(tc, test_misc);
	tcase_add_loop_test(tc, test_fast_same, 0, sizeof(fast_docs) / sizeof(fast_docs[0]));
	tcase_add_loop_test(tc, test_tree_docs, 0, sizeof(tree_docs) / sizeof(tree_docs[0]));
	tcase_add_test(tc, test_fast_values);
	tcase_add_loop_test(tc, test_encoding_type, 0, sizeof(enc_docs) / sizeof(enc_docs[0]));
	tcase_add_loop_test(tc, test_huge_keys, 0, 2);
	tcase_add_test(tc, test_truncated_xml);
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
