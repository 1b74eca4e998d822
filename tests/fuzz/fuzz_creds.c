/*
 * fuzz_creds: the AWS shared credentials / config file reader (src/store/creds.c)
 * on arbitrary files.
 *
 * The input is the credentials file, optionally followed by a line
 * "#--config--" and the config file. Both go through objfs_ini_parse()
 * directly and through the real loaders, objfs_creds_resolve() and
 * objfs_aws_profile_load(), which read them from disk (instance metadata is
 * switched off, the environment holds no keys) for three profiles. Files
 * whose profiles name a role reach STS at a closed loopback port (a quick
 * refusal); inputs holding "credential_process" skip the loaders, which
 * would run the fuzzed command (tests/check_creds.c covers that source).
 *
 * Invariants: INI values come back trimmed; resolved credentials have a
 * non-empty key and secret; a failure has a message, and no message ever
 * contains a secret from the files (a secret is checked when it is long and
 * distinctive enough not to appear in a message by chance: 12 or more bytes
 * with a digit, while the file paths here have no digits).
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "creds.h"
#include "fuzz.h"
#include "log.h"

#define CONFIG_MARK "\n#--config--\n"

static char dir[64], crd_path[96], cfg_path[96];

static void cleanup(void)
{
	unlink(crd_path);
	unlink(cfg_path);
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char tag[17];
	unsigned long v = (unsigned long)getpid();
	const char *tmp = getenv("TMPDIR");
	size_t i;

	(void)argc;
	(void)argv;
	/* A digit-free private path, so the secret check cannot match a path. */
	for (i = 0; i < 16; i++, v >>= 4)
		tag[i] = (char)('a' + (v & 15));
	tag[i] = '\0';
	if (!tmp || !*tmp || strpbrk(tmp, "0123456789") || strlen(tmp) > 24)
		tmp = "/tmp";
	snprintf(dir, sizeof(dir), "%s/objfs-fuzz-creds-%s", tmp, tag);
	snprintf(crd_path, sizeof(crd_path), "%s/credentials", dir);
	snprintf(cfg_path, sizeof(cfg_path), "%s/config", dir);
	if (mkdir(dir, 0700) && errno != EEXIST)
		abort();
	atexit(cleanup);
	setenv("AWS_SHARED_CREDENTIALS_FILE", crd_path, 1);
	setenv("AWS_CONFIG_FILE", cfg_path, 1);
	setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
	setenv("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:1", 1);
	unsetenv("AWS_WEB_IDENTITY_TOKEN_FILE");
	unsetenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
	unsetenv("AWS_CONTAINER_CREDENTIALS_FULL_URI");
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	unsetenv("AWS_SESSION_TOKEN");
	unsetenv("AWS_PROFILE");
	objfs_log_set_level(OBJFS_LOG_DEBUG);
	return 0;
}

static void put_file(const char *path, const uint8_t *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0 || (n && write(fd, p, n) != (ssize_t)n) || close(fd))
		abort();
}

static void check_trimmed(const char *v)
{
	size_t n;

	if (!v)
		return;
	n = strlen(v);
	FUZZ_CHECK(n == 0 || (!isspace((unsigned char)v[0]) && !isspace((unsigned char)v[n - 1])),
		   "value \"%s\" not trimmed", v);
}

/* Whether @s is a secret distinctive enough to look for in messages. */
static int distinctive(const char *s)
{
	return s && strlen(s) >= 12 && strpbrk(s, "0123456789");
}

static void check_no_secret(const char *msg, const struct objfs_ini *a, const struct objfs_ini *b,
			    const char *section)
{
	static const char *const keys[] = { "aws_secret_access_key", "aws_session_token" };

	for (size_t k = 0; k < 2; k++) {
		const char *va = objfs_ini_get(a, section, keys[k]);
		const char *vb = objfs_ini_get(b, section, keys[k]);

		FUZZ_CHECK(!distinctive(va) || !strstr(msg, va), "secret in message: %s", msg);
		FUZZ_CHECK(!distinctive(vb) || !strstr(msg, vb), "secret in message: %s", msg);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const profiles[] = { NULL, "dev", "s3 test" };
	static const char *const sections[] = { "default", "dev", "s3 test" };
	static const char *const cfg_sections[] = { "default", "profile dev", "profile s3 test" };
	const uint8_t *mark = memmem(data, size, CONFIG_MARK, strlen(CONFIG_MARK));
	size_t crd_len = mark ? (size_t)(mark - data) : size;
	const uint8_t *cfg = mark ? mark + strlen(CONFIG_MARK) : NULL;
	size_t cfg_len = mark ? size - crd_len - strlen(CONFIG_MARK) : 0;
	struct objfs_ini *ci = NULL, *cr = NULL;
	int rc;

	rc = objfs_ini_parse((const char *)data, crd_len, &cr);
	FUZZ_CHECK(rc == 0 || rc == -EINVAL, "rc %d", rc);
	if (rc)
		cr = NULL;
	rc = objfs_ini_parse(cfg ? (const char *)cfg : "", cfg_len, &ci);
	FUZZ_CHECK(rc == 0 || rc == -EINVAL, "rc %d", rc);
	if (rc)
		ci = NULL;
	for (size_t p = 0; p < 3; p++) {
		check_trimmed(objfs_ini_get(cr, sections[p], "aws_access_key_id"));
		check_trimmed(objfs_ini_get(cr, sections[p], "aws_secret_access_key"));
		check_trimmed(objfs_ini_get(ci, cfg_sections[p], "region"));
	}

	if (memmem(data, size, "credential_process", 18)) {
		objfs_ini_free(cr);
		objfs_ini_free(ci);
		return 0;
	}
	put_file(crd_path, data, crd_len);
	if (cfg)
		put_file(cfg_path, cfg, cfg_len);
	else
		unlink(cfg_path);
	for (size_t p = 0; p < 3; p++) {
		struct objfs_creds c;
		struct objfs_aws_profile prof;
		char err[512] = "";

		rc = objfs_creds_resolve(profiles[p], &c, err, sizeof(err));
		FUZZ_CHECK(rc == 0 || rc == -ENOENT || rc == -EINVAL || rc == -ELOOP ||
			   rc == -EACCES || rc == -EHOSTUNREACH, "resolve rc %d", rc);
		if (rc == 0) {
			FUZZ_CHECK(c.access_key && *c.access_key && c.secret_key && *c.secret_key,
				   "empty credentials");
			FUZZ_CHECK(!c.session_token || *c.session_token, "empty token");
			FUZZ_CHECK(c.source && *c.source, "no source");
		} else {
			FUZZ_CHECK(err[0], "resolve failed (%d) without a message", rc);
			check_no_secret(err, cr, ci, sections[p]);
			check_no_secret(err, cr, ci, cfg_sections[p]);
		}
		objfs_creds_clear(&c);
		objfs_creds_clear(&c);

		err[0] = '\0';
		rc = objfs_aws_profile_load(profiles[p], &prof, err, sizeof(err));
		FUZZ_CHECK(rc == 0 || rc == -ENOENT || rc == -EINVAL, "profile rc %d", rc);
		if (rc) {
			FUZZ_CHECK(err[0], "profile load failed (%d) without a message", rc);
			check_no_secret(err, cr, ci, sections[p]);
		}
		FUZZ_CHECK(!prof.region || *prof.region, "empty region");
		FUZZ_CHECK(!prof.endpoint_url || *prof.endpoint_url, "empty endpoint");
		objfs_aws_profile_clear(&prof);
	}
	objfs_ini_free(cr);
	objfs_ini_free(ci);
	return 0;
}
