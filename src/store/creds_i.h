/*
 * creds_i: what creds.c (the files, the profiles and the chain) and
 * creds_remote.c (the sources that answer over HTTP or from a program:
 * STS, container endpoints, credential_process) share, and the parsers the
 * unit tests and fuzz targets reach. Not for other modules: they see
 * creds.h only.
 *
 * Every function here that fills a struct objfs_creds leaves it cleared on
 * failure, and writes a message naming the source (never a value) to @err.
 */
#ifndef OBJFS_CREDS_I_H
#define OBJFS_CREDS_I_H

#include <stddef.h>
#include <stdint.h>

#include "creds.h"

#define OBJFS_CREDS_BODY_MAX (64u << 10) /* any answer or program output */

/* Sets @c from copies of the strings (secrets in MADV_DONTDUMP memory). 0 or -ENOMEM. */
int objfs_creds_set(struct objfs_creds *c, const char *ak, const char *sk, const char *tok,
		    int64_t expires, const char *source);

/* "2026-11-23T23:00:00Z" (fraction and offset allowed) as unix time; -1 when malformed. */
int64_t objfs_creds_time(const char *s);

/*
 * One HTTP request: @method "GET", "PUT" or "POST" (@body sent when not
 * NULL), @hdrs NULL-terminated "Name: value" lines, the given total
 * timeout. @remote: a service across the network (STS), reached through
 * the proxy the environment names, with AWS_CA_BUNDLE honoured and 3 s to
 * connect; else a local endpoint (instance metadata, container agent):
 * never through a proxy, 1 s to connect. *@out gets the body (caller wipes
 * and frees), *@status the HTTP status. 0; -EHOSTUNREACH when no answer
 * came; -EMSGSIZE for a body over OBJFS_CREDS_BODY_MAX; -ENOMEM.
 */
int objfs_creds_http(const char *method, const char *url, const char *const *hdrs,
		     const char *body, long timeout_ms, int remote, char **out, long *status);

/*
 * A JSON credential document: a container endpoint's or IMDS's
 * (AccessKeyId, SecretAccessKey, Token, Expiration), or, when @process,
 * credential_process output (Version 1 required; SessionToken). A present
 * but malformed Expiration is an error. 0 or -EPROTO (message in @err).
 */
int objfs_creds_parse_json(const char *doc, size_t len, int process, const char *source,
			   struct objfs_creds *out, char *err, size_t errlen);

/*
 * An STS AssumeRole / AssumeRoleWithWebIdentity answer (XML): its
 * Credentials, or the ErrorResponse's code and message in @err
 * (-EACCES), or -EPROTO.
 */
int objfs_creds_parse_sts(const char *doc, size_t len, const char *source,
			  struct objfs_creds *out, char *err, size_t errlen);

/*
 * Container credentials (ECS: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI; EKS
 * Pod Identity and others: AWS_CONTAINER_CREDENTIALS_FULL_URI with
 * AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or _TOKEN). 0; 1 when neither
 * variable is set; -errno with @err.
 */
int objfs_creds_from_container(struct objfs_creds *out, char *err, size_t errlen);

/*
 * Whether a full URI may be used, by the SDKs' rule: https to any host;
 * http only to a loopback address or the ECS/EKS link-local endpoints.
 */
int objfs_creds_container_uri_ok(const char *uri);

/*
 * credential_process: runs @cmd with /bin/sh -c (as the SDKs do), its
 * stdout parsed as Version 1 JSON, its stderr passed to the log line by
 * line; 60 s at most, until it has exited (a program that closes its
 * output and runs on is killed then). 0 or -errno with @err.
 */
int objfs_creds_from_process(const char *cmd, struct objfs_creds *out, char *err, size_t errlen);

/* The same within @timeout_ms (tests). */
int objfs_creds_from_process_tmo(const char *cmd, long timeout_ms, struct objfs_creds *out,
				 char *err, size_t errlen);

/* One STS call: AssumeRoleWithWebIdentity when @token_file, else AssumeRole signed with @src. */
struct objfs_sts_call {
	const char *role_arn;
	const char *session_name;   /* NULL: "objfs-<unix time>" */
	const char *token_file;     /* web identity: read again on every call */
	const char *external_id;    /* AssumeRole, may be NULL */
	const char *region;         /* NULL: us-east-1 */
	const struct objfs_creds *src; /* AssumeRole's source credentials */
};

/* Endpoint: AWS_ENDPOINT_URL_STS, else AWS_ENDPOINT_URL, else the regional one. */
int objfs_creds_from_sts(const struct objfs_sts_call *c, struct objfs_creds *out, char *err,
			 size_t errlen);

#endif
