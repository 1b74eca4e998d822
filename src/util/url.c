/*
 * url: see url.h. Written by hand because the grammar we accept is tiny and
 * must reject more than curl's parser does (userinfo, fragments, control
 * characters), and because backends need the decoded path, not a curl handle.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "url.h"

void objfs_url_clear(struct objfs_url *u)
{
	if (!u)
		return;
	free(u->scheme);
	free(u->host);
	free(u->origin);
	free(u->path);
	memset(u, 0, sizeof(*u));
}

int objfs_hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c |= 0x20;
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int objfs_url_decode_to(char *out, const char *in, size_t len, int plus)
{
	char *o = out;

	for (size_t i = 0; i < len; i++) {
		if (in[i] == '%') {
			int hi, lo;

			if (i + 2 >= len)
				return -1;
			hi = objfs_hexval((unsigned char)in[i + 1]);
			lo = objfs_hexval((unsigned char)in[i + 2]);
			if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
				return -1;
			*o++ = (char)(hi * 16 + lo);
			i += 2;
		} else if (in[i] == '\0') {
			return -1;
		} else {
			*o++ = plus && in[i] == '+' ? ' ' : in[i];
		}
	}
	*o = '\0';
	return 0;
}

char *objfs_url_decode(const char *in, size_t len)
{
	char *out = malloc(len + 1);

	if (out && objfs_url_decode_to(out, in, len, 0)) {
		free(out);
		out = NULL;
	}
	return out;
}

char *objfs_url_encode(const char *in, size_t len, int keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = malloc(len * 3 + 1), *o = out;

	if (!out)
		return NULL;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)in[i];

		if (isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' ||
		    (keep_slash && c == '/')) {
			*o++ = (char)c;
		} else {
			*o++ = '%';
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		}
	}
	*o = '\0';
	return out;
}

#define SOURCE_FORMS "s3://BUCKET[/PREFIX], http://HOST[:PORT]/PATH or https://HOST[:PORT]/PATH"

int objfs_url_source_why(const char *s, char *buf, size_t cap)
{
	static const char *const schemes[] = { "s3", "https", "http" };
	size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-");
	const char *rest;

	if (strncasecmp(s, "http://", 7) == 0 || strncasecmp(s, "https://", 8) == 0)
		return 0;
	for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++) {
		size_t k = strlen(schemes[i]);

		if (strncasecmp(s, schemes[i], k) || s[k] != ':')
			continue;
		/* "s3:/b", "http:host/": the slashes are off */
		for (rest = s + k + 1; *rest == '/'; rest++)
			;
		snprintf(buf, cap, "%s: must be followed by two slashes (did you mean "
			 "%s://%s ?); SOURCE is " SOURCE_FORMS, schemes[i], schemes[i], rest);
		return 1;
	}
	if (n && isalpha((unsigned char)s[0]) && strncmp(s + n, "://", 3) == 0) {
		snprintf(buf, cap, "URL scheme %.*s:// is not one objfs mounts; SOURCE is "
			 SOURCE_FORMS, (int)(n > 16 ? 16 : n), s);
		return 1;
	}
	if (s[0] && s[0] != '/' && !strchr(s, ' ') && memchr(s, ':', strcspn(s, "/")))
		snprintf(buf, cap, "no scheme (did you mean http://%s ?); SOURCE is "
			 SOURCE_FORMS, s);
	else if (s[0] && s[0] != '/' && !strchr(s, ' '))
		snprintf(buf, cap, "no scheme (did you mean s3://%s or http://%s ?); SOURCE is "
			 SOURCE_FORMS, s, s);
	else
		snprintf(buf, cap, "not a URL; SOURCE is " SOURCE_FORMS);
	return 1;
}

int objfs_url_parse(const char *s, struct objfs_url *u, const char **why)
{
	const char *p, *host, *host_end, *path;
	const char *msg = NULL;
	char *end;
	long port;

	memset(u, 0, sizeof(*u));
	for (p = s; *p; p++) {
		if ((unsigned char)*p <= 0x20 || *p == 0x7f) {
			msg = "URL contains spaces or control characters (percent-encode them)";
			goto bad;
		}
	}
	if (strncasecmp(s, "http://", 7) == 0) {
		u->scheme = strdup("http");
		u->port = 80;
		host = s + 7;
	} else if (strncasecmp(s, "https://", 8) == 0) {
		u->scheme = strdup("https");
		u->port = 443;
		host = s + 8;
	} else {
		msg = "URL scheme must be http:// or https://";
		goto bad;
	}
	if (!u->scheme)
		goto nomem;
	path = host + strcspn(host, "/?#");
	if (*path == '?' || *path == '#' || strchr(path, '?') || strchr(path, '#')) {
		msg = "URL must not have a query or fragment";
		goto bad;
	}
	if (memchr(host, '@', (size_t)(path - host))) {
		msg = "URL must not contain user:password@ (use credentials options)";
		goto bad;
	}
	host_end = path;
	if (*host == '[') {
		const char *rb = memchr(host, ']', (size_t)(path - host));

		if (!rb || rb == host + 1) {
			msg = "malformed IPv6 address in URL";
			goto bad;
		}
		host_end = rb + 1;
	} else {
		const char *colon = memchr(host, ':', (size_t)(path - host));

		if (colon)
			host_end = colon;
	}
	if (host_end == host) {
		msg = "URL has no host";
		goto bad;
	}
	for (p = host; p < host_end; p++) {
		if (*host == '[')
			break;
		if (!isalnum((unsigned char)*p) && *p != '-' && *p != '.' && *p != '_') {
			msg = "URL host contains invalid characters";
			goto bad;
		}
	}
	if (host_end < path) {
		if (*host_end != ':' || host_end + 1 == path) {
			msg = "malformed port in URL";
			goto bad;
		}
		errno = 0;
		port = strtol(host_end + 1, &end, 10);
		if (errno || end != path || port < 1 || port > 65535 ||
		    !isdigit((unsigned char)host_end[1])) {
			msg = "URL port must be a number from 1 to 65535";
			goto bad;
		}
		u->port = (int)port;
	}
	u->host = strndup(host, (size_t)(host_end - host));
	if (!u->host)
		goto nomem;
	for (char *h = u->host; *h; h++)
		*h = (char)tolower((unsigned char)*h);
	if (*path == '\0')
		path = "/";
	if (strcasestr(path, "%2f")) {
		/* decoded it would be a '/', and the requests would ask for
		 * another path (a review: http://h/a%2Fb/ listed /a/b/) */
		msg = "URL path has an encoded '/' (%2F), which cannot be told from a '/'";
		goto bad;
	}
	u->path = objfs_url_decode(path, strlen(path));
	if (!u->path) {
		msg = "URL path has a malformed %-escape";
		goto bad;
	}
	if (asprintf(&u->origin, "%s://%s:%d", u->scheme, u->host, u->port) < 0) {
		u->origin = NULL;
		goto nomem;
	}
	return 0;
nomem:
	objfs_url_clear(u);
	if (why)
		*why = "out of memory";
	return -ENOMEM;
bad:
	objfs_url_clear(u);
	if (why)
		*why = msg;
	return -EINVAL;
}
