/*
 * url: parsing of SOURCE URLs and the percent-encoding rules objfs needs.
 *
 * A parsed URL keeps the origin ("http://host:port") apart from the path so
 * that backends can build request URLs by appending encoded object keys to a
 * fixed prefix. Only http and https (and s3, parsed by the S3 backend) exist;
 * anything else, userinfo, a missing host, a bad port or control characters
 * is rejected with -EINVAL so the user sees one clear message at mount time.
 */
#ifndef OBJFS_URL_H
#define OBJFS_URL_H

#include <stddef.h>

struct objfs_url {
	char *scheme;  /* "http" or "https", lower case */
	char *host;    /* as written, IPv6 literals keep their brackets */
	int port;      /* explicit or the scheme's default */
	char *origin;  /* "scheme://host[:port]" ready to prefix a path */
	char *path;    /* decoded path, always starts with '/' */
};

/*
 * Parse @s into @u. On success the caller owns @u's strings and releases
 * them with objfs_url_clear(). On failure returns -EINVAL and sets *why (may
 * be NULL) to a static description; @u is left cleared.
 */
int objfs_url_parse(const char *s, struct objfs_url *u, const char **why);
/* Frees @u's strings; safe on a zeroed or already-cleared struct. */
void objfs_url_clear(struct objfs_url *u);

/*
 * Why SOURCE @s is none of the forms objfs mounts, when it is not an
 * http(s) URL at all (objfs_url_parse() says what is wrong with one that
 * is): a scheme objfs does not mount, "s3:" or "http:" without both
 * slashes, no scheme. Names every accepted form, and the SOURCE meant
 * where it can tell. Writes @buf (NUL-terminated, at most @cap bytes) and
 * returns 1; 0 (nothing written) for an http:// or https:// URL.
 */
int objfs_url_source_why(const char *s, char *buf, size_t cap);

/*
 * Percent-encode @in for use in a URL path: unreserved characters (RFC 3986)
 * stay, '/' stays when @keep_slash, everything else becomes %XX (upper case).
 * Returns a malloc'd string owned by the caller, or NULL on ENOMEM.
 */
char *objfs_url_encode(const char *in, size_t len, int keep_slash);

/*
 * Decode %XX escapes of @in (and nothing else: '+' stays '+', as in a path).
 * Returns a malloc'd string, or NULL when an escape is malformed, decodes to
 * NUL, or memory runs out.
 */
char *objfs_url_decode(const char *in, size_t len);

/*
 * The same into @out (room for @len + 1 bytes), '+' decoded as a space
 * when @plus (S3's encoding-type=url). 0, or -1 when an escape is
 * malformed or a byte would be NUL (then @out holds part of it).
 */
int objfs_url_decode_to(char *out, const char *in, size_t len, int plus);

/* The value of hex digit @c (either case), or -1. */
int objfs_hexval(int c);

#endif
