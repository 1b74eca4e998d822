/*
 * fuzz_url: objfs_url_parse(), objfs_url_decode() and objfs_url_encode()
 * on arbitrary strings.
 *
 * Invariants: a parsed URL is http or https with a lower-case host, a port
 * in 1..65535, a decoded path that starts with '/' and holds no NUL, and an
 * origin that is exactly "scheme://host:port"; re-serialised as origin +
 * encoded path it parses back to the same fields. A failure says why and
 * leaves the struct cleared. Decoding never yields a NUL or more bytes than
 * it was given, and decode(encode(x)) == x for every x without a NUL.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>

#include "fuzz.h"
#include "url.h"

static void check_parsed(const struct objfs_url *u)
{
	char *origin = NULL;

	FUZZ_CHECK(strcmp(u->scheme, "http") == 0 || strcmp(u->scheme, "https") == 0,
		   "scheme %s", u->scheme);
	FUZZ_CHECK(u->host[0] != '\0', "empty host");
	for (const char *h = u->host; *h; h++)
		FUZZ_CHECK(!isupper((unsigned char)*h), "host %s not lower case", u->host);
	FUZZ_CHECK(u->port >= 1 && u->port <= 65535, "port %d", u->port);
	FUZZ_CHECK(u->path[0] == '/', "path %s", u->path);
	if (asprintf(&origin, "%s://%s:%d", u->scheme, u->host, u->port) < 0)
		abort();
	FUZZ_CHECK(strcmp(origin, u->origin) == 0, "origin %s, want %s", u->origin, origin);
	free(origin);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_str(data, size), *dec, *enc, *again, *url2 = NULL;
	struct objfs_url u, u2;
	const char *why = NULL;
	int rc;

	rc = objfs_url_parse(s, &u, &why);
	FUZZ_CHECK(rc == 0 || rc == -EINVAL, "rc %d", rc);
	if (rc) {
		FUZZ_CHECK(why && *why, "no reason given");
		FUZZ_CHECK(!u.scheme && !u.host && !u.origin && !u.path, "not cleared");
	} else {
		check_parsed(&u);
		enc = objfs_url_encode(u.path, strlen(u.path), 1);
		if (!enc || asprintf(&url2, "%s%s", u.origin, enc) < 0)
			abort();
		rc = objfs_url_parse(url2, &u2, &why);
		FUZZ_CHECK(rc == 0, "re-serialised \"%s\" does not parse: %s", url2, why);
		check_parsed(&u2);
		FUZZ_CHECK(strcmp(u.scheme, u2.scheme) == 0 && strcmp(u.host, u2.host) == 0 &&
			   u.port == u2.port && strcmp(u.path, u2.path) == 0 &&
			   strcmp(u.origin, u2.origin) == 0,
			   "\"%s\" re-parsed differently", url2);
		objfs_url_clear(&u2);
		objfs_url_clear(&u2); /* twice is allowed */
		free(url2);
		free(enc);
	}
	objfs_url_clear(&u);

	/* the raw bytes, embedded NULs included */
	dec = objfs_url_decode((const char *)data, size);
	if (dec) {
		FUZZ_CHECK(strlen(dec) <= size, "decoded longer than the input");
		FUZZ_CHECK(!memchr(data, '\0', size), "input with a NUL decoded");
		free(dec);
	}
	for (int keep = 0; keep < 2; keep++) {
		enc = objfs_url_encode((const char *)data, size, keep);
		if (!enc)
			abort();
		for (const char *e = enc; *e; e++)
			FUZZ_CHECK(isalnum((unsigned char)*e) || strchr("-._~%", *e) ||
				   (keep && *e == '/'), "encoded \"%s\" has '%c'", enc, *e);
		again = objfs_url_decode(enc, strlen(enc));
		if (memchr(data, '\0', size)) {
			FUZZ_CHECK(!again, "an escaped NUL decoded");
		} else {
			FUZZ_CHECK(again && strlen(again) == size && memcmp(again, data, size) == 0,
				   "decode(encode(x)) != x");
		}
		free(again);
		free(enc);
	}
	free(s);
	return 0;
}
