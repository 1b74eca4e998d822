/*
 * fuzz_sigv4: SigV4 canonicalisation and signing (src/store/sigv4.c) on arbitrary
 * requests.
 *
 * The input is newline-separated: flags (a '1' anywhere selects S3 path
 * rules), method, path, query, payload hash, region, service, then one
 * "name:value" header per line. Invariants: canonicalisation gives 0,
 * -EINVAL or -ENOMEM and, on success, starts with the method line and (S3)
 * the path exactly as sent; signing succeeds exactly when canonicalisation
 * does, gives "AWS4-HMAC-SHA256 Credential=..." with a 64-hex signature, and
 * the same signature whether the signing key comes from a fresh cache or a
 * warm one (the cache must never hand out a key for other inputs).
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>

#include "fuzz.h"
#include "sigv4.h"

#define MAX_HDRS 300

static struct objfs_sigv4 *warm;

static const char *signature(const char *auth)
{
	size_t n = strlen(auth);
	const char *s = auth + n - 64;

	FUZZ_CHECK(n > 64 + 12 && strncmp(s - 12, ", Signature=", 12) == 0,
		   "no signature at the end of %s", auth);
	for (const char *p = s; *p; p++)
		FUZZ_CHECK(isxdigit((unsigned char)*p) && !isupper((unsigned char)*p),
			   "signature %s", s);
	return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = fuzz_str(data, size), *fields[7] = { 0 }, *p = buf, *canon = NULL;
	const char *hdrs[MAX_HDRS + 1];
	struct objfs_sigv4_req r = { 0 };
	struct objfs_sigv4_creds c = { "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
				       NULL };
	struct objfs_sigv4 *fresh = NULL;
	size_t nh = 0, alen = 2 * size + 1024;
	char *a1 = malloc(alen), *a2 = malloc(alen);
	int rc, rc1, rc2;

	if (!a1 || !a2)
		abort();
	for (size_t i = 0; i < 7; i++) {
		fields[i] = p;
		if (p) {
			p = strchr(p, '\n');
			if (p)
				*p++ = '\0';
		}
	}
	while (p && nh < MAX_HDRS) {
		hdrs[nh++] = p;
		p = strchr(p, '\n');
		if (p)
			*p++ = '\0';
	}
	hdrs[nh] = NULL;
	r.s3 = fields[0] && strchr(fields[0], '1');
	r.method = fields[1];
	r.path = fields[2];
	r.query = fields[3];
	r.payload_hash = fields[4];
	r.region = fields[5];
	r.service = fields[6];
	r.headers = hdrs;

	rc = objfs_sigv4_canonical_request(&r, &canon);
	FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM, "rc %d", rc);
	if (rc == 0) {
		size_t ml = strlen(r.method);

		FUZZ_CHECK(strncmp(canon, r.method, ml) == 0 && canon[ml] == '\n',
			   "canonical request does not start with the method");
		if (r.s3 && !strchr(r.method, '\n')) {
			const char *want = *r.path ? r.path : "/";

			FUZZ_CHECK(strncmp(canon + ml + 1, want, strlen(want)) == 0 &&
				   canon[ml + 1 + strlen(want)] == '\n',
				   "S3 canonical URI is not the path as sent");
		}
	}
	if (!warm && objfs_sigv4_new(&warm))
		abort();
	if (objfs_sigv4_new(&fresh))
		abort();
	rc1 = objfs_sigv4_authorization(fresh, &c, &r, "20150830T123600Z", a1, alen);
	rc2 = objfs_sigv4_authorization(warm, &c, &r, "20150830T123600Z", a2, alen);
	FUZZ_CHECK(rc1 == rc2, "fresh %d, warm %d", rc1, rc2);
	FUZZ_CHECK((rc1 == 0) == (rc == 0), "signing %d, canonicalisation %d", rc1, rc);
	if (rc1 == 0) {
		static const char head[] = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/";

		FUZZ_CHECK(strncmp(a1, head, sizeof(head) - 1) == 0, "authorization %s", a1);
		FUZZ_CHECK(strcmp(signature(a1), signature(a2)) == 0,
			   "a warm signing key differs from a fresh one");
	}
	if (rc == 0) {
		char *sts = NULL;

		rc = objfs_sigv4_string_to_sign(&r, "20150830T123600Z", canon, &sts);
		FUZZ_CHECK(rc == 0, "string to sign: %d", rc);
		FUZZ_CHECK(strncmp(sts, "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/", 43) == 0,
			   "string to sign %s", sts);
		free(sts);
	}
	objfs_sigv4_free(fresh);
	free(canon);
	free(a1);
	free(a2);
	free(buf);
	return 0;
}
