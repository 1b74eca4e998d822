/*
 * fuzz_direct_request: the request text of the direct receive path
 * (objfs_direct_request_text) from arbitrary URLs and headers, http and
 * https alike.
 *
 * Input: the first line is the URL, after "http://" or "https://" (the
 * first byte's low bit picks which); each further line is an extra header
 * of the caller's, and a line starting with "E" the pinned ETag. The
 * request is bytes 10-14.
 *
 * Invariants, the ones that keep a hostile key or URL from smuggling a
 * second request or header onto a connection objfs owns: when a text is
 * written it is one GET request line to a path of the URL, header lines
 * of "Name: value" (a name first: no fold) with CR LF only as their ends,
 * exactly one Host and one
 * Range, and one empty line at its very end; the origin key is the URL's
 * scheme and authority, and the scheme decides http or https.
 */
#include "config.h"

#include <curl/curl.h>
#include <errno.h>
#include <strings.h>

#include "engine_i.h"
#include "fuzz.h"

/* How many lines of @text start with @name (case-insensitive). */
static int count_lines(const char *text, const char *name)
{
	size_t n = strlen(name);
	int k = 0;

	for (const char *p = text; p; p = strstr(p, "\r\n"), p = p ? p + 2 : NULL)
		k += strncasecmp(p, name, n) == 0;
	return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *scheme = size && (data[0] & 1) ? "https://" : "http://";
	char *in, *url, *line, *save = NULL, text[8192], key[256];
	struct curl_slist *hdrs = NULL;
	struct objfs_req r;
	size_t sl = strlen(scheme);
	int n;

	if (!size || size > 16384)
		return 0;
	in = malloc(size);
	url = malloc(sl + size);
	if (!in || !url)
		abort();
	memcpy(in, data + 1, size - 1);
	in[size - 1] = '\0';
	objfs_req_init(&r);
	r.method = OBJFS_GET;
	r.off = 10;
	r.len = 5;
	line = strtok_r(in, "\n", &save);
	snprintf(url, sl + size, "%s%s", scheme, line ? line : "");
	r.url = url;
	while ((line = strtok_r(NULL, "\n", &save))) {
		struct curl_slist *h;

		if (line[0] == 'E') {
			r.etag = line + 1;
			continue;
		}
		h = curl_slist_append(hdrs, line);
		if (!h)
			abort();
		hdrs = h;
	}
	r.headers = hdrs;
	n = objfs_direct_request_text(&r, text, sizeof(text), key, sizeof(key));
	FUZZ_CHECK(n == -EAGAIN || (n > 0 && (size_t)n == strlen(text)), "n %d", n);
	if (n > 0) {
		const char *p, *blank = strstr(text, "\r\n\r\n");

		FUZZ_CHECK(strncmp(text, "GET /", 5) == 0, "request line %.40s", text);
		FUZZ_CHECK(blank && blank + 4 == text + n, "an empty line before the end");
		for (p = text; *p; p++)
			FUZZ_CHECK((*p != '\r' || p[1] == '\n') && (*p != '\n' || (p > text && p[-1] == '\r')) &&
				   ((unsigned char)*p >= 0x20 || *p == '\r' || *p == '\n') && *p != 0x7f,
				   "a bare CR, LF or control byte at %zu", (size_t)(p - text));
		p = strstr(text, "\r\n");
		FUZZ_CHECK(p - text >= 14 && strncmp(p - 9, " HTTP/1.1", 9) == 0, "request line end");
		for (p += 2; p < blank; p = strstr(p, "\r\n") + 2) {
			const char *colon = strchr(p, ':'), *eol = strstr(p, "\r\n");

			FUZZ_CHECK(colon && colon < eol && colon > p && *p != ' ' && *p != '\t',
				   "a header line without a name, or folded");
		}
		FUZZ_CHECK(count_lines(text, "host:") == 1, "%d Host lines", count_lines(text, "host:"));
		FUZZ_CHECK(count_lines(text, "range:") == 1, "%d Range lines",
			   count_lines(text, "range:"));
		FUZZ_CHECK(strncmp(key, scheme, sl) == 0 && strncmp(url, key, strlen(key)) == 0 &&
			   !strpbrk(key + sl, "/?#"), "key %s of %s", key, url);
	}
	curl_slist_free_all(hdrs);
	free(url);
	free(in);
	return 0;
}
