/*
 * fuzz_s3_list: objfs_s3_parse_list(), the S3 ListObjectsV2 page parser
 * (encoding-type=url), on arbitrary XML.
 *
 * Each page is parsed as the bucket root ("") and as a listing of
 * "photos/", the prefix the seeds use. Contract (store_s3_i.h): 0 or
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
	}
	return 0;
}
