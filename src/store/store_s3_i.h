/*
 * store_s3_i.h: S3 backend internals exposed for unit tests and fuzzers.
 */
#ifndef OBJFS_STORE_S3_I_H
#define OBJFS_STORE_S3_I_H

#include <stddef.h>
#include <stdint.h>

#include "listing.h"

struct objfs_s3_page {
	int truncated;
	char *next_token; /* owned; NULL when absent */
};

/*
 * Parses one ListObjectsV2 page (encoding-type=url) listed under @prefix
 * (the decoded prefix asked for, "" or ending in '/'). Objects are appended
 * to @files, common prefixes to @dirs, as names relative to @prefix. Keys
 * that cannot be file names (empty or "."/".." segments, over 255 bytes)
 * are skipped with a log line; a directory marker ("prefix/" itself) is
 * skipped silently. Returns 0 or -EPROTO for a body that is not a
 * ListBucketResult; @page->next_token is then NULL.
 */
int objfs_s3_parse_list(const char *xml, size_t len, const char *prefix,
			struct objfs_listing *files, struct objfs_listing *dirs,
			struct objfs_s3_page *page);

/* Decodes S3's url encoding ('+' is a space, %XX a byte). Caller frees. */
char *objfs_s3_decode(const char *in, size_t len);

/* ISO 8601 "2009-10-12T17:50:30.000Z" to seconds, -1 if malformed. */
int64_t objfs_s3_parse_time(const char *s);

/* Whether @b is usable as a bucket name in a URL (3-255 chars of
 * [A-Za-z0-9._-], no leading '.' or '-'). */
int objfs_s3_bucket_valid(const char *b);

#endif
