/*
 * fuzz_listing_html: objfs_listing_parse_html(), the index-page parser
 * (nginx/Apache autoindex, any page of links), on arbitrary bodies.
 *
 * Each body is parsed for three directories: the root, a nested directory
 * (so absolute hrefs are compared with it) and none. Contract (listing.h):
 * 0 with valid, unique names whose size and time are unknown, or -EPROTO
 * with the listing left empty.
 */
#include "config.h"

#include <errno.h>

#define FUZZ_PARSER_INIT
#include "fuzz.h"
#include "listing.h"
#include "log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const dirs[] = { "/", "/data/sub dir/", NULL };

	for (size_t d = 0; d < sizeof(dirs) / sizeof(dirs[0]); d++) {
		struct objfs_listing l = { 0 };
		int rc = objfs_listing_parse_html((const char *)data, size, dirs[d], &l);

		FUZZ_CHECK(rc == 0 || rc == -EPROTO, "rc %d", rc);
		if (rc)
			FUZZ_CHECK(l.n == 0, "failed parse left %zu entries", l.n);
		fuzz_check_listing(&l, 1);
		for (size_t i = 0; i < l.n; i++)
			FUZZ_CHECK(l.ents[i].size == -1 && l.ents[i].mtime == -1 && !l.ents[i].etag,
				   "HTML entry with a size, time or ETag");
		objfs_listing_clear(&l);
	}
	return 0;
}
