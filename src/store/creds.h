/*
 * creds: the AWS credential chain and profile settings.
 *
 * Order, as the AWS SDKs (botocore) use it: the environment's keys
 * (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN; not when a
 * profile is named); the profile's role (role_arn with
 * web_identity_token_file, source_profile or credential_source: STS);
 * web identity from the environment (AWS_WEB_IDENTITY_TOKEN_FILE,
 * AWS_ROLE_ARN); the profile's keys (-o profile=, else AWS_PROFILE, else
 * "default") in the shared credentials file (AWS_SHARED_CREDENTIALS_FILE,
 * ~/.aws/credentials), then the config file (AWS_CONFIG_FILE,
 * ~/.aws/config, section "[profile NAME]"); the profile's
 * credential_process; container credentials (AWS_CONTAINER_CREDENTIALS_*);
 * then EC2 instance metadata (IMDSv2 with a session token, short timeouts,
 * endpoint AWS_EC2_METADATA_SERVICE_ENDPOINT, off with
 * AWS_EC2_METADATA_DISABLED). creds_remote.c has the remote sources.
 *
 * The provider refreshes temporary credentials five minutes before they
 * expire, and reads keys from the shared files again when a file changes;
 * a failed refresh is logged with its source and the current credentials
 * serve until they expire.
 *
 * Secrets never appear in a log line or a message: messages name the
 * source and the file, never a value. Secret strings are wiped on free.
 */
#ifndef OBJFS_CREDS_H
#define OBJFS_CREDS_H

#include <stddef.h>
#include <stdint.h>

struct objfs_creds {
	char *access_key, *secret_key; /* owned */
	char *session_token;           /* owned, may be NULL */
	int64_t expires;               /* unix time, 0 = never */
	const char *source;            /* static description */
};

/* Wipes and frees @c's strings; @c is zeroed. Accepts NULL. */
void objfs_creds_clear(struct objfs_creds *c);

struct objfs_aws_profile {
	char *region;        /* owned, NULL when unset */
	char *endpoint_url;  /* owned, NULL when unset (s3 sub-section wins) */
};

void objfs_aws_profile_clear(struct objfs_aws_profile *p);

/*
 * Loads region and endpoint_url of @profile (NULL: AWS_PROFILE or
 * "default") from the config file. Missing files are not an error unless a
 * profile was named explicitly and exists in neither file (-ENOENT, message
 * in @err).
 */
int objfs_aws_profile_load(const char *profile, struct objfs_aws_profile *out, char *err,
			   size_t errlen);

/*
 * Resolves credentials once along the chain. 0; -ENOENT when none is found;
 * -EINVAL for a half-set environment or a malformed file. @err gets a
 * message naming what to fix.
 */
int objfs_creds_resolve(const char *profile, struct objfs_creds *out, char *err, size_t errlen);

/* Thread-safe holder that refreshes expiring credentials. */
struct objfs_creds_provider;

/* Resolves now (so a mount fails early). 0 or -errno with @err set. */
int objfs_creds_provider_new(const char *profile, int no_sign, struct objfs_creds_provider **out,
			     char *err, size_t errlen);
void objfs_creds_provider_free(struct objfs_creds_provider *p);
/* Copies the current credentials into @out (caller clears). 0 or -errno. */
int objfs_creds_get(struct objfs_creds_provider *p, struct objfs_creds *out);

/*
 * The store refused a request signed with access key id @access_key as
 * expired or unknown (S3's ExpiredToken, InvalidToken, TokenRefreshRequired,
 * InvalidAccessKeyId): temporary credentials revoked or rotated before the
 * expiry they came with, which the provider would otherwise keep using
 * until five minutes before it. When they are still the current ones, the
 * next signer resolves them again (the others wait for it): at most once
 * a second, a gap that doubles up to five minutes while every answer of
 * the source is refused, and for the key id refused last once in ten
 * seconds, so a source that keeps handing out refused credentials is not
 * asked on every request. 1 if that was arranged, 0 if not (other
 * credentials are current already, or one was arranged lately). Keys the
 * user gave (environment, a shared file) are read again all the same, and
 * the log line says the key was refused and where to check it: nothing
 * can refresh them.
 */
int objfs_creds_reject(struct objfs_creds_provider *p, const char *access_key);

/* Whether the current credentials carry a session token, without
 * resolving anything (for messages). */
int objfs_creds_has_token(struct objfs_creds_provider *p);

/*
 * The current credentials, shared and read-only, held until
 * objfs_creds_drop(): what signing a request needs, without the copy
 * objfs_creds_get() makes (two secret mappings made and unmapped a
 * request, ~19 us and TLB shootdowns on every core: 54,000 signatures a
 * second on one thread, fewer on two). A refresh replaces them for later
 * holders; these stay valid until dropped. NULL with *@err -errno.
 */
const struct objfs_creds *objfs_creds_hold(struct objfs_creds_provider *p, int *err);
void objfs_creds_drop(const struct objfs_creds *c);

/* INI parsing, exposed for tests and fuzzing. */
struct objfs_ini;
/* Parses @buf; 0, -EINVAL (a line over 64 KiB) or -ENOMEM. */
int objfs_ini_parse(const char *buf, size_t len, struct objfs_ini **out);
/* Value of @key in @section (section "s3" of a nested block is
 * "SECTION.s3"), or NULL. Borrowed from @ini. */
const char *objfs_ini_get(const struct objfs_ini *ini, const char *section, const char *key);
void objfs_ini_free(struct objfs_ini *ini);

#endif
