/*
 * fuzz_direct_head: the response head of the direct receive path
 * (objfs_direct_parse_head, then http_resp's range validation) on
 * arbitrary bytes, as a lying server would send them.
 *
 * The request is bytes 100-149 of a 1000-byte object with a pinned strong
 * ETag. Invariant, the one that keeps wrong bytes out of the caller's
 * buffer: whenever the direct path would go on to the body (a head that
 * parses, status 206, a Content-Length, no Transfer-Encoding, validation
 * passed), the server promised exactly the bytes asked for: Content-Range
 * 100-149/1000, Content-Length 50, and the pinned ETag or none. Anything
 * else must be -EPROTO from the parser, or a fallback to libcurl, or an
 * error from the validation.
 */
#include "config.h"

#include <errno.h>

#include "engine_i.h"
#include "fuzz.h"
#include "http_resp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *head = malloc(size + 1), *end;
	struct objfs_req r;
	int keep, chunked, rc;

	if (!head)
		abort();
	memcpy(head, data, size);
	head[size] = '\0';
	end = size >= 4 ? memmem(head, size, "\r\n\r\n", 4) : NULL;
	objfs_req_init(&r);
	r.url = "http://fuzz/obj";
	r.method = OBJFS_GET;
	r.off = 100;
	r.len = 50;
	r.expect_size = 1000;
	r.etag = "\"pinned\"";
	rc = objfs_direct_parse_head(&r, head, end ? (size_t)(end - head) + 4 : size, &keep,
				     &chunked);
	FUZZ_CHECK(rc == 0 || rc == -EPROTO, "rc %d", rc);
	FUZZ_CHECK(rc || (r.status >= 0 && r.status <= 999), "status %ld", r.status);
	FUZZ_CHECK(rc || !memchr(head, '\0', end ? (size_t)(end - head) + 4 : size),
		   "a head with a NUL byte parsed");
	if (rc == 0 && r.status == 206 && r.clen >= 0 && !chunked &&
	    objfs_http_check_range(&r) == 0) {
		FUZZ_CHECK(r.cr_first == 100 && r.cr_last == 149, "range %lld-%lld accepted",
			   (long long)r.cr_first, (long long)r.cr_last);
		FUZZ_CHECK(r.clen == 50, "Content-Length %lld accepted", (long long)r.clen);
		FUZZ_CHECK(r.cr_total == 1000 || r.cr_total == -1, "size %lld accepted",
			   (long long)r.cr_total);
		FUZZ_CHECK(!r.etag_out[0] || strcmp(r.etag_out, "\"pinned\"") == 0,
			   "ETag %s accepted", r.etag_out);
	}
	objfs_req_clear(&r);
	free(head);
	return 0;
}
