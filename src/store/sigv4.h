/*
 * sigv4: AWS Signature Version 4 on OpenSSL.
 *
 * Pure functions over a request description, so every step (canonical
 * request, string to sign, signature) is tested against the published AWS
 * test suite. The derived signing key (four chained HMACs) depends only on
 * the secret, the date, the region and the service, so it is cached and
 * recomputed once a day instead of for every request.
 *
 * S3 differs from other services: its canonical URI is the path exactly as
 * sent (no dot-segment removal, no double encoding); s3=1 selects that.
 * Secrets never reach a log line or an error message from this module.
 */
#ifndef OBJFS_SIGV4_H
#define OBJFS_SIGV4_H

#include <stddef.h>
#include <time.h>

#define OBJFS_SHA256_EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

struct objfs_sigv4_creds {
	const char *access_key, *secret_key, *session_token; /* token may be NULL */
};

struct objfs_sigv4_req {
	const char *method;         /* "GET", "HEAD", "POST" */
	const char *path;           /* URI path as sent (percent-encoded) */
	const char *query;          /* query string as sent, no '?', "" if none */
	const char *const *headers; /* NULL-terminated "name:value" to sign (with host) */
	const char *payload_hash;   /* hex SHA-256 of the body, or "UNSIGNED-PAYLOAD" */
	const char *region, *service;
	int s3;                     /* S3 path rules (see above) */
};

struct objfs_sigv4;

/* Canonical request of @r; *out malloc'd, caller frees. 0 or -errno. */
int objfs_sigv4_canonical_request(const struct objfs_sigv4_req *r, char **out);
/* String to sign for @canonical at @amz_date; *out malloc'd. 0 or -errno. */
int objfs_sigv4_string_to_sign(const struct objfs_sigv4_req *r, const char *amz_date,
			       const char *canonical, char **out);

/* The signing-key cache; thread-safe. 0 or -ENOMEM. */
int objfs_sigv4_new(struct objfs_sigv4 **out);
/* Wipes and frees the cache. Accepts NULL. */
void objfs_sigv4_free(struct objfs_sigv4 *s);

/*
 * Writes the Authorization header value for @r signed at @amz_date into
 * @authorization (@len bytes). The caller sends x-amz-date (and any
 * x-amz-security-token) and lists them in r->headers. 0, -EINVAL or -ENOMEM.
 */
int objfs_sigv4_authorization(struct objfs_sigv4 *s, const struct objfs_sigv4_creds *c,
			      const struct objfs_sigv4_req *r, const char *amz_date,
			      char *authorization, size_t len);

/* "YYYYMMDDTHHMMSSZ" for @now (UTC). */
void objfs_sigv4_amz_date(time_t now, char out[17]);
/* Lower-case hex SHA-256 of @data. */
void objfs_sha256_hex(const void *data, size_t len, char out[65]);

#endif
