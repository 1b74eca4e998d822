/*
 * store_s3_i.h: S3 backend internals exposed for unit tests and fuzzers:
 * the ListObjectsV2 parser (s3_list.c) and the pure configuration step of
 * objfs_store_s3_new() (which option, variable or profile setting wins).
 */
#ifndef OBJFS_STORE_S3_I_H
#define OBJFS_STORE_S3_I_H

#include <stddef.h>
#include <stdint.h>

#include "listing.h"

struct objfs_s3_cfg;
struct objfs_aws_profile;

/*
 * Keys a listing leaves out (they cannot be file names, or the server
 * sent them malformed): how many, and the first few with the reason, so
 * that one line per listing names them (s3_list_pages) while a hostile
 * listing cannot flood the log.
 */
#define OBJFS_S3_SKIPS_NAMED 4
struct objfs_s3_skips {
	unsigned n;     /* keys left out */
	unsigned named; /* of which in first[] */
	struct {
		char key[104];   /* the key (a common prefix ends in '/'), cut with "..." */
		const char *why; /* static */
	} first[OBJFS_S3_SKIPS_NAMED];
};

/* Counts @key (NULL: none) as left out for @why (static), naming it while room is left. */
void objfs_s3_skips_add(struct objfs_s3_skips *k, const char *key, const char *why);
/* Adds what @from counted to @to. */
void objfs_s3_skips_merge(struct objfs_s3_skips *to, const struct objfs_s3_skips *from);
/* Writes "'KEY' (why), ..." for @k into @buf (NUL-terminated). */
void objfs_s3_skips_text(const struct objfs_s3_skips *k, char *buf, size_t cap);

struct objfs_s3_page {
	int truncated;
	char *next_token; /* owned; NULL when absent */
	unsigned entries; /* Contents and CommonPrefixes seen, markers and skipped keys included */
	struct objfs_s3_skips skipped; /* keys of this page left out */
};

/*
 * Parses one ListObjectsV2 page listed under @prefix (the decoded prefix
 * asked for, "" or ending in '/'); keys are url-decoded when the page says
 * <EncodingType>url (we ask for it; some servers ignore it and send keys
 * as they are), values trimmed of XML white space. Objects are appended
 * to @files, common prefixes to @dirs, as names relative to @prefix. Keys
 * that cannot be file names (empty or "."/".." segments, over 255 bytes)
 * are left out and counted in @page->skipped; a directory marker
 * ("prefix/" itself) is skipped silently. Returns 0, -EPROTO for a body that is not a
 * well-formed ListBucketResult (or a truncated page without a token),
 * -E2BIG or -EFBIG past the listings' caps, or -ENOMEM; @page->next_token
 * (owned by the caller) is NULL on failure. Nothing is appended for a body
 * that is not well-formed.
 *
 * objfs_s3_parse_list_fast() first (s3_list.c: no allocation per element),
 * objfs_s3_parse_list_tree() (libxml2's document tree) for any page the
 * fast one gives up on.
 */
int objfs_s3_parse_list(const char *xml, size_t len, const char *prefix,
			struct objfs_listing *files, struct objfs_listing *dirs,
			struct objfs_s3_page *page);

/*
 * objfs_s3_parse_list() by s3_list.c's own reader of the subset of XML S3
 * servers send; -EAGAIN, with nothing appended and @page zeroed, for any
 * other document (malformed ones included). Same results as the tree
 * parser for every document it takes (fuzz_s3_list checks it).
 */
int objfs_s3_parse_list_fast(const char *xml, size_t len, const char *prefix,
			     struct objfs_listing *files, struct objfs_listing *dirs,
			     struct objfs_s3_page *page);

/* objfs_s3_parse_list() through libxml2's document tree: any document. */
int objfs_s3_parse_list_tree(const char *xml, size_t len, const char *prefix,
			     struct objfs_listing *files, struct objfs_listing *dirs,
			     struct objfs_s3_page *page);

/* Decodes S3's url encoding ('+' is a space, %XX a byte). Caller frees. */
char *objfs_s3_decode(const char *in, size_t len);

/* ISO 8601 "2009-10-12T17:50:30.000Z" to seconds, -1 if malformed. */
int64_t objfs_s3_parse_time(const char *s);

/* Whether @b is usable as a bucket name in a URL (3-255 chars of
 * [A-Za-z0-9._-], no leading '.' or '-'). */
int objfs_s3_bucket_valid(const char *b);

/* Where an S3 mount sends its requests, as objfs_s3_resolve_cfg() decides. */
struct objfs_s3_where {
	char *region;   /* owned */
	char *endpoint; /* owned */
	int vhost;      /* virtual-host addressing; 0: path style */
};

/*
 * Resolves region, endpoint and addressing style of an S3 mount, each from
 * the first that is set of: the option in @o (non-NULL), the environment
 * (non-empty), the profile settings @prof (as objfs_aws_profile_load()
 * filled them for the profile it chose: option, AWS_PROFILE, "default"),
 * the default:
 *   region:   o->region, AWS_REGION, AWS_DEFAULT_REGION, prof->region,
 *             "us-east-1";
 *   endpoint: o->endpoint, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL,
 *             prof->endpoint_url, https://s3.REGION.amazonaws.com;
 *   style:    o->path_style wins over o->virtual_host; neither: virtual
 *             host on AWS's endpoint, path style on any endpoint given.
 * Reads the environment and nothing else: no file, no network. 0 or
 * -ENOMEM (then @out holds nothing). The caller owns @out's strings and
 * frees them with objfs_s3_where_clear().
 */
int objfs_s3_resolve_cfg(const struct objfs_s3_cfg *o, const struct objfs_aws_profile *prof,
			 struct objfs_s3_where *out);

/* Frees @w's strings; @w is zeroed. Accepts NULL. */
void objfs_s3_where_clear(struct objfs_s3_where *w);

#endif
