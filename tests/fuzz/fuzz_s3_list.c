/*
 * fuzz_s3_list: objfs_s3_parse_list(), the S3 ListObjectsV2 page parser
 * (encoding-type=url), on arbitrary XML.
 *
 * Each page is parsed as the bucket root ("") and as a listing of
 * "photos/", the prefix the seeds use. Two parsers stand behind it
 * (s3_list.c): a reader of the subset of XML S3 servers send, which gives
 * up (-EAGAIN, nothing appended) on anything else, and libxml2's tree.
 * For every input the reader takes, both must give the same result:
 * return, truncation, token, entry count and every entry. Contract
 * (store_s3_i.h): 0 or
 * -EPROTO; names are valid path components relative to the prefix (so a
 * key can never name "..", "." or something with a '/' in it: the mount
 * cannot be escaped); objects are files with a size, common prefixes are
 * directories; a truncated page has a continuation token; on failure there
 * is no token. Small listings are also free of repeats (objfs_listing_add
 * refuses them below its scan limit).
 */
#include "config.h"

#include <errno.h>

#define FUZZ_PARSER_INIT
#include "fuzz.h"
#include "listing.h"
#include "log.h"
#include "store_s3_i.h"

static int same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void check_same(const struct objfs_listing *a, const struct objfs_listing *b,
		       const char *what)
{
	FUZZ_CHECK(a->n == b->n, "%s: %zu entries by the reader, %zu by the tree", what, a->n,
		   b->n);
	for (size_t i = 0; i < a->n; i++) {
		const struct objfs_listent *x = &a->ents[i], *y = &b->ents[i];

		FUZZ_CHECK(same_str(x->name, y->name) && x->is_dir == y->is_dir &&
			   x->size == y->size && x->mtime == y->mtime && same_str(x->etag, y->etag),
			   "%s %zu differs: '%s' %lld %lld '%s' / '%s' %lld %lld '%s'", what, i,
			   x->name, (long long)x->size, (long long)x->mtime, x->etag ? x->etag : "-",
			   y->name, (long long)y->size, (long long)y->mtime, y->etag ? y->etag : "-");
	}
}

/* The reader against the tree, for one prefix. */
static void differential(const uint8_t *data, size_t size, const char *prefix)
{
	struct objfs_listing ff = { 0 }, fd = { 0 }, tf = { 0 }, td = { 0 };
	struct objfs_s3_page fp = { 1, (char *)"junk", 7 }, tp = { 0 };
	int frc = objfs_s3_parse_list_fast((const char *)data, size, prefix, &ff, &fd, &fp);

	if (frc == -EAGAIN) {
		FUZZ_CHECK(ff.n == 0 && fd.n == 0 && !fp.next_token && !fp.truncated &&
			   !fp.entries, "the reader gave up with something left");
		objfs_listing_clear(&ff); /* empty, its array may be kept */
		objfs_listing_clear(&fd);
		return;
	}
	{
		int trc = objfs_s3_parse_list_tree((const char *)data, size, prefix, &tf, &td, &tp);

		FUZZ_CHECK(frc == trc, "reader %d, tree %d", frc, trc);
		FUZZ_CHECK(fp.truncated == tp.truncated && fp.entries == tp.entries &&
			   same_str(fp.next_token, tp.next_token),
			   "page: reader %d %u '%s', tree %d %u '%s'", fp.truncated, fp.entries,
			   fp.next_token ? fp.next_token : "-", tp.truncated, tp.entries,
			   tp.next_token ? tp.next_token : "-");
		check_same(&ff, &tf, "object");
		check_same(&fd, &td, "prefix");
	}
	free(fp.next_token);
	free(tp.next_token);
	objfs_listing_clear(&ff);
	objfs_listing_clear(&fd);
	objfs_listing_clear(&tf);
	objfs_listing_clear(&td);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const prefixes[] = { "", "photos/" };

	for (size_t p = 0; p < sizeof(prefixes) / sizeof(prefixes[0]); p++) {
		struct objfs_listing files = { 0 }, dirs = { 0 };
		struct objfs_s3_page page = { 1, (char *)"junk" };
		int rc = objfs_s3_parse_list((const char *)data, size, prefixes[p], &files, &dirs,
					     &page);

		FUZZ_CHECK(rc == 0 || rc == -EPROTO, "rc %d", rc);
		if (rc)
			FUZZ_CHECK(!page.next_token, "token left after a failure");
		if (!rc && page.truncated)
			FUZZ_CHECK(page.next_token && *page.next_token, "truncated, no token");
		/* objfs_listing_add() refuses repeats while a listing is small */
		fuzz_check_listing(&files, files.n <= 64);
		fuzz_check_listing(&dirs, dirs.n <= 64);
		for (size_t i = 0; i < files.n; i++)
			FUZZ_CHECK(!files.ents[i].is_dir && files.ents[i].size >= 0,
				   "object %zu: is_dir %d size %lld", i, files.ents[i].is_dir,
				   (long long)files.ents[i].size);
		for (size_t i = 0; i < dirs.n; i++)
			FUZZ_CHECK(dirs.ents[i].is_dir && !dirs.ents[i].etag, "prefix %zu", i);
		free(page.next_token);
		objfs_listing_clear(&files);
		objfs_listing_clear(&dirs);
		differential(data, size, prefixes[p]);
	}
	return 0;
}
