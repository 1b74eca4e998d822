/*
 * http_resp: see http_resp.h for what it judges and for whom.
 *
 * Design: the header code takes one line at a time, as libcurl's header
 * callback delivers them, so the direct path feeds it the lines of the head
 * it read itself and gets exactly the same fields. Values are copied into
 * the request's fixed-size fields (trimmed, truncated to fit); a number or
 * a Content-Range that does not parse leaves its field at -1, which the
 * range check then refuses. Nothing here allocates except libxml2 while it
 * reads an S3 error body, which is capped by the engine (ERR_BODY_MAX).
 *
 * Invariant, the one that keeps wrong bytes out of the caller's buffer:
 * objfs_http_check_range accepts a 206 only when its Content-Range is
 * exactly the range asked for and its Content-Length (when given) agrees,
 * and a 200 only when it is at least long enough; both paths call it
 * before a body byte reaches dst (tests/fuzz/fuzz_direct_head.c checks
 * this on arbitrary heads).
 */
#include "config.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "http_resp.h"
#include "log.h"
#include "range.h"

/* The one table from HTTP status to errno. */
int objfs_http_errno(long status)
{
	if (status >= 200 && status < 300)
		return 0;
	switch (status) {
	case 400: return -EINVAL;
	case 401:
	case 403: return -EACCES;
	case 404:
	case 410: return -ENOENT;
	case 412: return -ESTALE;
	case 416: return -ERANGE;
	default: return -EIO;
	}
}

static int status_retryable(long status)
{
	return status == 408 || status == 429 || (status >= 500 && status <= 599);
}

/* S3 error codes that decide differently from their HTTP status. */
static const struct {
	const char *code;
	int err;
	int retry;
} s3_codes[] = {
	{ "RequestTimeout", -EIO, 1 },
	{ "SlowDown", -EIO, 1 },
	{ "InternalError", -EIO, 1 },
	{ "ServiceUnavailable", -EIO, 1 },
	{ "RequestTimeTooSkewed", -EACCES, 0 },
	{ "SignatureDoesNotMatch", -EACCES, 0 },
	{ "InvalidAccessKeyId", -EACCES, 0 },
	{ "ExpiredToken", -EACCES, 0 }, /* 400: a refused session token */
	{ "InvalidToken", -EACCES, 0 },
	{ "TokenRefreshRequired", -EACCES, 0 },
	{ "AccessDenied", -EACCES, 0 },
	{ "NoSuchBucket", -ENOENT, 0 },
	{ "NoSuchKey", -ENOENT, 0 },
	{ "AuthorizationHeaderMalformed", -EINVAL, 0 },
	{ "PermanentRedirect", -EINVAL, 0 },
	{ "InvalidRange", -ERANGE, 0 },
	{ "PreconditionFailed", -ESTALE, 0 },
};

/* Extracts <Error><Code> from an S3 error body (libxml2, never by hand). */
static void s3_error_code(struct objfs_req *r)
{
	xmlDocPtr doc;
	xmlNodePtr root;

	r->s3_code[0] = '\0';
	if (!r->body || r->got < 8 || r->body[0] != '<')
		return;
	doc = xmlReadMemory(r->body, (int)r->got, NULL, NULL,
			    XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
	if (!doc)
		return;
	root = xmlDocGetRootElement(doc);
	if (root && xmlStrcmp(root->name, BAD_CAST "Error") == 0) {
		for (xmlNodePtr c = root->children; c; c = c->next) {
			if (c->type == XML_ELEMENT_NODE &&
			    xmlStrcmp(c->name, BAD_CAST "Code") == 0) {
				xmlChar *v = xmlNodeGetContent(c);

				if (v)
					snprintf(r->s3_code, sizeof(r->s3_code), "%s", (char *)v);
				xmlFree(v);
				break;
			}
		}
	}
	xmlFreeDoc(doc);
}

/* The one table: an HTTP error response (and its S3 code) to -errno. */
int objfs_http_response_errno(struct objfs_req *r, int *retry)
{
	s3_error_code(r);
	for (size_t i = 0; r->s3_code[0] && i < sizeof(s3_codes) / sizeof(s3_codes[0]); i++) {
		if (strcmp(r->s3_code, s3_codes[i].code) == 0) {
			*retry = s3_codes[i].retry;
			return s3_codes[i].err;
		}
	}
	*retry = status_retryable(r->status);
	return objfs_http_errno(r->status);
}

static void copy_value(char *dst, size_t cap, const char *v, size_t n)
{
	while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
		n--;
	while (n && (*v == ' ' || *v == '\t')) {
		v++;
		n--;
	}
	if (n >= cap)
		n = cap - 1;
	memcpy(dst, v, n);
	dst[n] = '\0';
}

static int header_is(const char *line, size_t n, const char *name, const char **val)
{
	size_t k = strlen(name);

	if (n <= k || line[k] != ':' || strncasecmp(line, name, k) != 0)
		return 0;
	*val = line + k + 1;
	return 1;
}

int objfs_http_header_line(struct objfs_req *r, const char *line, size_t n)
{
	const char *v;
	char tmp[256];

	if (n >= 5 && strncmp(line, "HTTP/", 5) == 0)
		r->head_bytes = 0; /* a new response: its own head counts */
	if (r->head_bytes > OBJFS_HTTP_HEAD_MAX)
		return -EIO; /* refused already */
	if (n > OBJFS_HTTP_HEAD_MAX - r->head_bytes) {
		if (r->head_bytes <= OBJFS_HTTP_HEAD_MAX)
			objfs_warn("%s: response head larger than %u KiB: refused (EIO)", r->url,
				   OBJFS_HTTP_HEAD_MAX >> 10);
		r->head_bytes = OBJFS_HTTP_HEAD_MAX + 1; /* warn once */
		return -EIO;
	}
	r->head_bytes += n;
	if (n >= 5 && strncmp(line, "HTTP/", 5) == 0) {
		/* A new response (redirect hop or interim): its status, and
		 * forget the last one's headers. */
		if (n >= 12) {
			const char *sp = memchr(line, ' ', n);

			if (sp && sp + 4 <= line + n)
				r->status = strtol(sp + 1, NULL, 10);
		}
		r->etag_out[0] = r->content_type[0] = r->location[0] = '\0';
		r->amz_region[0] = '\0';
		r->clen = -1;
		r->cr_first = r->cr_last = r->cr_total = -1;
		r->mtime = -1;
		return 0;
	}
	if (header_is(line, n, "etag", &v)) {
		copy_value(r->etag_out, sizeof(r->etag_out), v, n - (size_t)(v - line));
	} else if (header_is(line, n, "content-type", &v)) {
		copy_value(r->content_type, sizeof(r->content_type), v, n - (size_t)(v - line));
	} else if (header_is(line, n, "location", &v)) {
		copy_value(r->location, sizeof(r->location), v, n - (size_t)(v - line));
	} else if (header_is(line, n, "x-amz-bucket-region", &v)) {
		copy_value(r->amz_region, sizeof(r->amz_region), v, n - (size_t)(v - line));
	} else if (header_is(line, n, "content-length", &v)) {
		char *end;
		long long cl;

		copy_value(tmp, sizeof(tmp), v, n - (size_t)(v - line));
		errno = 0;
		cl = strtoll(tmp, &end, 10);
		r->clen = (errno || *end || cl < 0 || end == tmp || cl > OBJFS_OBJECT_SIZE_MAX) ? -1 : cl;
	} else if (header_is(line, n, "content-range", &v)) {
		copy_value(tmp, sizeof(tmp), v, n - (size_t)(v - line));
		if (objfs_parse_content_range(tmp, &r->cr_first, &r->cr_last, &r->cr_total))
			r->cr_first = r->cr_last = r->cr_total = -1;
	} else if (header_is(line, n, "last-modified", &v)) {
		copy_value(tmp, sizeof(tmp), v, n - (size_t)(v - line));
		time_t t = curl_getdate(tmp, NULL);
		r->mtime = t < 0 ? -1 : (int64_t)t;
	}
	return 0;
}

/* Scheme, host and port (the scheme's default when none is written) of
 * @u, into @s, @h, @p (curl_free them). 0 or -1. */
static int url_origin(CURLU *u, char **s, char **h, char **p)
{
	*s = *h = *p = NULL;
	if (curl_url_get(u, CURLUPART_SCHEME, s, 0) || curl_url_get(u, CURLUPART_HOST, h, 0) ||
	    curl_url_get(u, CURLUPART_PORT, p, CURLU_DEFAULT_PORT))
		return -1;
	return 0;
}

int objfs_http_redirect_check(const char *first, const char *cur, const char *location,
			      int policy)
{
	static const char *const opt[] = { "origin", "any", "none" };
	CURLU *a = curl_url(), *b = curl_url();
	char *as, *ah, *ap, *bs, *bh, *bp, *to = NULL;
	const char *why = NULL;
	int from_https = strncasecmp(first, "https:", 6) == 0 || strncasecmp(cur, "https:", 6) == 0;

	as = ah = ap = bs = bh = bp = NULL;
	if (!a || !b || curl_url_set(a, CURLUPART_URL, first, 0) ||
	    curl_url_set(b, CURLUPART_URL, cur, 0) ||
	    curl_url_set(b, CURLUPART_URL, location, 0) || /* resolved against cur */
	    curl_url_get(b, CURLUPART_URL, &to, 0) || url_origin(a, &as, &ah, &ap) ||
	    url_origin(b, &bs, &bh, &bp))
		why = "the Location cannot be parsed";
	else if (strcasecmp(bs, "http") != 0 && strcasecmp(bs, "https") != 0)
		why = "only http and https are followed";
	else if (from_https && strcasecmp(bs, "https") != 0)
		why = "https must not redirect to another scheme (never allowed)";
	else if (policy == OBJFS_REDIR_NONE)
		why = "redirects are off (allow_redirects=none)";
	else if (policy == OBJFS_REDIR_ORIGIN && (strcasecmp(as, bs) != 0 ||
		 strcasecmp(ah, bh) != 0 || strcmp(ap, bp) != 0))
		why = "it leaves the source's origin (allow_redirects=any allows it)";
	if (why)
		objfs_warn("%s: redirect to %.300s refused: %s", first, to ? to : location, why);
	else
		objfs_debug("%s: redirect to %s followed (allow_redirects=%s)", first, to,
			    policy >= 0 && policy <= 2 ? opt[policy] : "?");
	curl_free(as);
	curl_free(ah);
	curl_free(ap);
	curl_free(bs);
	curl_free(bh);
	curl_free(bp);
	curl_free(to);
	curl_url_cleanup(a);
	curl_url_cleanup(b);
	return why ? -EIO : 0;
}

int objfs_http_check_range(struct objfs_req *r)
{
	int64_t end = r->off + (int64_t)objfs_req_span(r) - 1;

	if (r->etag && r->etag_out[0] && strcmp(r->etag, r->etag_out) != 0) {
		objfs_info("%s: object changed (ETag %s, pinned %s)", r->url,
			   r->etag_out, r->etag);
		return -ESTALE;
	}
	if (r->expect_mtime >= 0 && r->mtime >= 0 && r->mtime != r->expect_mtime) {
		objfs_info("%s: object changed (Last-Modified %" PRId64 ", pinned %" PRId64 ")",
			   r->url, r->mtime, r->expect_mtime);
		return -ESTALE;
	}
	if (r->status == 206) {
		if (r->cr_first < 0) {
			objfs_warn("%s: 206 without a valid Content-Range", r->url);
			return -EIO;
		}
		if (r->expect_size >= 0 && r->cr_total >= 0 && r->cr_total != r->expect_size) {
			objfs_info("%s: object size changed from %" PRId64 " to %" PRId64,
				   r->url, r->expect_size, r->cr_total);
			return -ESTALE;
		}
		if (r->cr_first != r->off || r->cr_last != end) {
			objfs_warn("%s: asked for bytes %" PRId64 "-%" PRId64 ", server sent %"
				   PRId64 "-%" PRId64, r->url, r->off, end, r->cr_first,
				   r->cr_last);
			return -EIO;
		}
		if (r->clen >= 0 && r->clen != (int64_t)objfs_req_span(r)) {
			objfs_warn("%s: Content-Length %" PRId64 " disagrees with range",
				   r->url, r->clen);
			return -EIO;
		}
		r->total = r->cr_total;
		return 0;
	}
	if (r->status == 200) {
		/* Range ignored: the body is the whole object. */
		if (r->clen >= 0 && r->expect_size >= 0 && r->clen != r->expect_size) {
			objfs_info("%s: object size changed from %" PRId64 " to %" PRId64,
				   r->url, r->expect_size, r->clen);
			return -ESTALE;
		}
		if (r->clen >= 0 && r->clen <= end) {
			objfs_warn("%s: object is shorter than the range asked for", r->url);
			return -EIO;
		}
		objfs_debug("%s: server ignored Range, skipping %" PRId64 " bytes", r->url, r->off);
		r->skip = r->off;
		r->total = r->clen;
		return 0;
	}
	objfs_warn("%s: unexpected HTTP status %ld for a ranged GET", r->url, r->status);
	return -EIO;
}
