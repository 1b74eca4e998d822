/*
 * fuzz_listing_json: objfs_listing_parse_json(), the nginx
 * "autoindex_format json" parser, on arbitrary bodies.
 *
 * Contract (listing.h): 0 with valid, unique names, or -EPROTO with the
 * listing left empty. The body is parsed twice, into an empty listing and
 * into one that already holds an entry, because callers may append. And
 * once more by json-c's tokener alone (objfs_listing_parse_json_tokener):
 * the reader of nginx's own form, which objfs_listing_parse_json() tries
 * first, must give exactly the same listing (every field of every entry).
 */
#include "config.h"

#include <errno.h>

#define FUZZ_PARSER_INIT
#include "fuzz.h"
#include "listing.h"
#include "log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct objfs_listing l = { 0 }, t = { 0 };
	int rc = objfs_listing_parse_json((const char *)data, size, &l);
	int trc = objfs_listing_parse_json_tokener((const char *)data, size, &t);

	FUZZ_CHECK(rc == trc, "reader and tokener: rc %d / %d", rc, trc);
	FUZZ_CHECK(l.n == t.n, "reader and tokener: %zu / %zu entries", l.n, t.n);
	for (size_t i = 0; i < l.n; i++) {
		const struct objfs_listent *x = &l.ents[i], *y = &t.ents[i];

		FUZZ_CHECK(strcmp(x->name, y->name) == 0 && x->is_dir == y->is_dir &&
			   x->size == y->size && x->mtime == y->mtime && !x->etag && !y->etag,
			   "entry %zu: '%s' %d %lld %lld / '%s' %d %lld %lld", i, x->name, x->is_dir,
			   (long long)x->size, (long long)x->mtime, y->name, y->is_dir,
			   (long long)y->size, (long long)y->mtime);
	}
	objfs_listing_clear(&t);

	FUZZ_CHECK(rc == 0 || rc == -EPROTO, "rc %d", rc);
	if (rc)
		FUZZ_CHECK(l.n == 0, "failed parse left %zu entries", l.n);
	fuzz_check_listing(&l, 1);
	objfs_listing_clear(&l);

	if (objfs_listing_add(&l, "pre", 3, 0, 1, 1) != 0)
		abort();
	rc = objfs_listing_parse_json((const char *)data, size, &l);
	FUZZ_CHECK(rc == 0 || rc == -EPROTO, "rc %d", rc);
	if (rc)
		FUZZ_CHECK(l.n == 0, "failed parse left %zu entries", l.n);
	else
		FUZZ_CHECK(l.n >= 1 && strcmp(l.ents[0].name, "pre") == 0 &&
			   l.ents[0].size == 1, "the entry added first is gone");
	fuzz_check_listing(&l, 1);
	objfs_listing_clear(&l);
	return 0;
}
