/*
 * fuzz_creds_remote: the parsers of what remote credential sources answer
 * (src/store/creds_remote.c): container endpoint and instance metadata
 * JSON, credential_process output, STS XML, and their time stamps. These
 * answers come from the network or from another program: hostile input.
 *
 * The first byte picks the parser ('j' container JSON, 'p' process JSON,
 * 's' STS XML, 't' a time stamp; anything else: all of them), the rest is
 * the answer.
 *
 * Invariants: a success has a non-empty key and secret, a token that is
 * NULL or non-empty, an expiry that is 0 or positive, and the source
 * named; a failure has a message that starts with the source and leaves
 * the credentials cleared; a parsed time stamp round-trips through
 * objfs_creds_time of its own formatting.
 */
#include "config.h"

#include <errno.h>
#include <time.h>

#include "creds_i.h"
#include "fuzz.h"
#include "log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	objfs_log_set_level(OBJFS_LOG_DEBUG);
	return 0;
}

static void check(int rc, const struct objfs_creds *c, const char *err)
{
	if (rc == 0) {
		FUZZ_CHECK(c->access_key && *c->access_key && c->secret_key && *c->secret_key,
			   "empty credentials");
		FUZZ_CHECK(!c->session_token || *c->session_token, "empty token");
		FUZZ_CHECK(c->expires >= 0, "negative expiry %lld", (long long)c->expires);
		FUZZ_CHECK(c->source && !strcmp(c->source, "src"), "source");
	} else {
		FUZZ_CHECK(rc == -EPROTO || rc == -EACCES || rc == -ENOMEM, "rc %d", rc);
		FUZZ_CHECK(!c->access_key && !c->secret_key && !c->session_token, "not cleared");
		FUZZ_CHECK(!strncmp(err, "src: ", 5), "message '%s'", err);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct objfs_creds c;
	char err[512], *doc;
	char mode;

	if (!size)
		return 0;
	mode = (char)data[0];
	/* A NUL-terminated copy, as the sources hand it over (bodies are strings). */
	doc = malloc(size);
	if (!doc)
		return 0;
	memcpy(doc, data + 1, size - 1);
	doc[size - 1] = '\0';
	for (int p = 0; p < 2; p++) {
		if ((mode == 'j' && p) || (mode == 'p' && !p) || mode == 's' || mode == 't')
			continue;
		err[0] = '\0';
		check(objfs_creds_parse_json(doc, size - 1, p, "src", &c, err, sizeof(err)), &c, err);
		objfs_creds_clear(&c);
	}
	if (mode != 'j' && mode != 'p' && mode != 't') {
		err[0] = '\0';
		check(objfs_creds_parse_sts(doc, size - 1, "src", &c, err, sizeof(err)), &c, err);
		objfs_creds_clear(&c);
	}
	if (mode != 'j' && mode != 'p' && mode != 's') {
		int64_t t = objfs_creds_time(doc);

		if (t >= 0) {
			char again[32];
			time_t tt = (time_t)t;
			struct tm tm;

			if (gmtime_r(&tt, &tm) && tm.tm_year >= 0 && tm.tm_year < 8000) {
				strftime(again, sizeof(again), "%Y-%m-%dT%H:%M:%SZ", &tm);
				FUZZ_CHECK(objfs_creds_time(again) == t, "'%s' -> %lld -> '%s'", doc,
					   (long long)t, again);
			}
		}
	}
	free(doc);
	return 0;
}
