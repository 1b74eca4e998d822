/*
 * Unit tests of src/store/creds.c and creds_remote.c: the INI reader, the
 * credential chain in SDK order (environment, a profile's role, web
 * identity, shared credentials file, config file, credential_process,
 * container endpoint, instance metadata; the remote ones through the
 * loopback stand-in tests/imds_stub.py), the JSON and STS parsers, the
 * container URI rule, files re-read when they change, profile settings, refresh of
 * expiring credentials, and that no secret ever reaches the log; which
 * profile is read (argument, AWS_PROFILE, "default"), table-driven.
 * Every test runs with its own HOME and AWS_* environment. Secrets live in
 * buffers left out of core dumps (VmFlags "dd" in /proc/self/smaps), and
 * the daemon switch makes the process not dumpable (docs/reliability.md).
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "creds_i.h"
#include "log.h"
#include "sigv4.h"
#ifdef OBJFS_BEFORE_FIX
#define objfs_secret_dumpable() 1
#define objfs_secret_nodump_process(k) 0
#else
#include "secret.h"
#endif

static char home[256];

static void write_file(const char *rel, const char *text, mode_t mode)
{
	char path[512], dir[512];
	FILE *f;

	snprintf(dir, sizeof(dir), "%s/.aws", home);
	mkdir(dir, 0700);
	snprintf(path, sizeof(path), "%s/%s", home, rel);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
	chmod(path, mode);
}

static void setup(void)
{
	static const char *const vars[] = {
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE", "AWS_EC2_METADATA_SERVICE_ENDPOINT",
		"AWS_EC2_METADATA_DISABLED", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
		"AWS_ROLE_SESSION_NAME", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL",
		"AWS_REGION", "AWS_DEFAULT_REGION",
	};

	snprintf(home, sizeof(home), "/tmp/objfs-creds-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(home));
	setenv("HOME", home, 1);
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	/* Never reach a real metadata service from a test. */
	setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1", 1);
}

static void teardown(void)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", home);
	(void)!system(cmd);
}

START_TEST(test_ini)
{
	static const char text[] =
		"# comment\r\n; other\r\n[default]\r\naws_access_key_id = AK1\r\n"
		"  region=eu-west-1  \n[profile x]\nregion = us-west-2\ns3 =\n"
		"  endpoint_url = http://127.0.0.1:9000\n  addressing_style = path\n"
		"garbage line\n\x01\x02\xff=\xfe\n[default]\naws_access_key_id=AK2\n";
	struct objfs_ini *ini;

	ck_assert_int_eq(objfs_ini_parse(text, sizeof(text) - 1, &ini), 0);
	ck_assert_str_eq(objfs_ini_get(ini, "default", "aws_access_key_id"), "AK2"); /* last wins */
	ck_assert_str_eq(objfs_ini_get(ini, "default", "region"), "eu-west-1");
	ck_assert_str_eq(objfs_ini_get(ini, "profile x", "region"), "us-west-2");
	ck_assert_str_eq(objfs_ini_get(ini, "profile x.s3", "endpoint_url"),
			 "http://127.0.0.1:9000");
	ck_assert_ptr_null(objfs_ini_get(ini, "profile x", "endpoint_url"));
	ck_assert_ptr_null(objfs_ini_get(ini, "nope", "region"));
	objfs_ini_free(ini);
	objfs_ini_free(NULL);
}
END_TEST

START_TEST(test_ini_long_line)
{
	size_t n = (64u << 10) + 10;
	char *big = malloc(n);
	struct objfs_ini *ini = NULL;

	memset(big, 'a', n);
	ck_assert_int_eq(objfs_ini_parse(big, n, &ini), -EINVAL);
	ck_assert_int_eq(objfs_ini_parse("", 0, &ini), 0);
	objfs_ini_free(ini);
	free(big);
}
END_TEST

START_TEST(test_env)
{
	struct objfs_creds c;
	char err[512] = "";

	setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "secretEnv", 1);
	setenv("AWS_SESSION_TOKEN", "tokEnv", 1);
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.access_key, "AKENV");
	ck_assert_str_eq(c.secret_key, "secretEnv");
	ck_assert_str_eq(c.session_token, "tokEnv");
	ck_assert_str_eq(c.source, "environment");
	objfs_creds_clear(&c);
	unsetenv("AWS_SECRET_ACCESS_KEY");
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "AWS_SECRET_ACCESS_KEY"));
}
END_TEST

START_TEST(test_files)
{
	struct objfs_creds c;
	struct objfs_aws_profile p;
	char err[512] = "";

	write_file(".aws/credentials", "[default]\naws_access_key_id=AKDEF\n"
		   "aws_secret_access_key=secretDef\n[work]\naws_access_key_id = AKWORK\r\n"
		   "aws_secret_access_key = secretWork\r\naws_session_token = tokWork\r\n", 0600);
	write_file(".aws/config", "[default]\nregion=eu-central-1\n[profile cfgonly]\n"
		   "aws_access_key_id=AKCFG\naws_secret_access_key=secretCfg\nregion=ap-south-1\n"
		   "endpoint_url=http://generic:1\ns3 =\n  endpoint_url = http://s3only:2\n"
		   "[profile half]\naws_access_key_id=AKHALF\n", 0644);
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.access_key, "AKDEF");
	ck_assert_ptr_null(c.session_token);
	objfs_creds_clear(&c);
	ck_assert_int_eq(objfs_creds_resolve("work", &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.access_key, "AKWORK");
	ck_assert_str_eq(c.session_token, "tokWork");
	objfs_creds_clear(&c);
	setenv("AWS_PROFILE", "cfgonly", 1);
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.access_key, "AKCFG");
	ck_assert_str_eq(c.source, "config file");
	objfs_creds_clear(&c);
	ck_assert_int_eq(objfs_aws_profile_load(NULL, &p, err, sizeof(err)), 0);
	ck_assert_str_eq(p.region, "ap-south-1");
	ck_assert_str_eq(p.endpoint_url, "http://s3only:2"); /* s3 block wins */
	objfs_aws_profile_clear(&p);
	unsetenv("AWS_PROFILE");
	ck_assert_int_eq(objfs_aws_profile_load(NULL, &p, err, sizeof(err)), 0);
	ck_assert_str_eq(p.region, "eu-central-1");
	ck_assert_ptr_null(p.endpoint_url);
	objfs_aws_profile_clear(&p);
	ck_assert_int_eq(objfs_creds_resolve("missing", &c, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "profile 'missing' not found"));
	ck_assert_int_eq(objfs_aws_profile_load("missing", &p, err, sizeof(err)), -ENOENT);
	ck_assert_int_eq(objfs_creds_resolve("half", &c, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "aws_secret_access_key"));
	/* Explicit locations through the environment. */
	write_file("other.ini", "[default]\naws_access_key_id=AKOTHER\naws_secret_access_key=s\n",
		   0600);
	{
		char path[512];

		snprintf(path, sizeof(path), "%s/other.ini", home);
		setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	}
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.access_key, "AKOTHER");
	objfs_creds_clear(&c);
}
END_TEST

/*
 * The file is read into a buffer of its own size (plus slack), pipes up to
 * the 1 MiB cap: a credentials file that is a pipe (<(pass show aws)) and
 * one just under the cap are both read to their last line.
 */
START_TEST(test_files_pipe_and_large)
{
	static const char tail[] = "[default]\naws_access_key_id=AKEND\naws_secret_access_key=s\n";
	char path[512], line[80];
	struct objfs_creds c;
	char err[512] = "";
	size_t filler;
	pid_t pid;
	FILE *f;

	memset(line, '#', sizeof(line) - 1);
	line[sizeof(line) - 2] = '\n';
	line[sizeof(line) - 1] = '\0';
	snprintf(path, sizeof(path), "%s/fifo", home);
	ck_assert_int_eq(mkfifo(path, 0600), 0);
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		f = fopen(path, "w");
		for (int i = 0; f && i < 200; i++) /* 16 KiB before the profile */
			fputs(line, f);
		if (f)
			fputs(tail, f);
		_exit(f && fclose(f) == 0 ? 0 : 1);
	}
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.access_key, "AKEND");
	objfs_creds_clear(&c);
	ck_assert_int_eq(waitpid(pid, NULL, 0), pid);

	snprintf(path, sizeof(path), "%s/large", home);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	for (filler = 0; filler + sizeof(line) - 1 + sizeof(tail) - 1 < (1u << 20);)
		filler += (size_t)fprintf(f, "%s", line);
	fputs(tail, f);
	ck_assert_int_eq(fclose(f), 0);
	chmod(path, 0600);
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.access_key, "AKEND");
	objfs_creds_clear(&c);
}
END_TEST

/* Runs @fn with stderr captured at debug level; returns the captured text. */
static char *capture(void (*fn)(void))
{
	char path[512], *buf;
	int fd, saved = dup(2);
	off_t len;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/stderr.txt", home);
	fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
	dup2(fd, 2);
	objfs_log_set_level(OBJFS_LOG_DEBUG);
	fn();
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	len = lseek(fd, 0, SEEK_END);
	buf = calloc(1, (size_t)len + 1);
	n = pread(fd, buf, (size_t)len, 0);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

static void chain_with_bad_files(void)
{
	struct objfs_creds c;
	struct objfs_creds_provider *p;
	char err[512] = "";

	(void)objfs_creds_resolve(NULL, &c, err, sizeof(err));
	fprintf(stderr, "%s\n", err);
	objfs_creds_clear(&c);
	(void)objfs_creds_resolve("half", &c, err, sizeof(err));
	fprintf(stderr, "%s\n", err);
	if (objfs_creds_provider_new(NULL, 0, &p, err, sizeof(err)) == 0)
		objfs_creds_provider_free(p);
	fprintf(stderr, "%s\n", err);
}

START_TEST(test_no_secret_in_logs)
{
	char *out;

	write_file(".aws/credentials", "[default]\naws_access_key_id=AKLOG\n"
		   "aws_secret_access_key=TOPSECRETVALUE\naws_session_token=TOPSECRETTOKEN\n", 0644);
	write_file(".aws/config", "[profile half]\naws_secret_access_key=TOPSECRETHALF\n", 0600);
	out = capture(chain_with_bad_files);
	ck_assert_ptr_null(strstr(out, "TOPSECRET"));
	ck_assert_msg(strstr(out, "chmod 600") != NULL, "no permission warning in: %s", out);
	free(out);
}
END_TEST

/*
 * Which profile the settings and the chain read: the argument (-o profile=)
 * over AWS_PROFILE over "default", an empty one counting as unset. Only a
 * profile named as argument must exist; one named by AWS_PROFILE may not.
 */
static const struct profile_case {
	const char *arg, *env;  /* NULL: not given */
	int load_rc;            /* objfs_aws_profile_load */
	const char *region;     /* its region, NULL: none */
	int creds_rc;           /* objfs_creds_resolve */
	const char *key;        /* its access key */
} profile_cases[] = {
	{ NULL, NULL, 0, "r-default", 0, "AKDEF" },
	{ NULL, "envp", 0, "r-env", 0, "AKENVP" },
	{ "optp", "envp", 0, "r-opt", 0, "AKOPTP" },
	{ "optp", NULL, 0, "r-opt", 0, "AKOPTP" },
	{ "", "envp", 0, "r-env", 0, "AKENVP" },
	{ NULL, "", 0, "r-default", 0, "AKDEF" },
	{ NULL, "nope", 0, NULL, -ENOENT, NULL },
	{ "nope", "envp", -ENOENT, NULL, -ENOENT, NULL },
	{ "credonly", NULL, 0, NULL, 0, "AKCRED" },
};

START_TEST(test_profile_choice)
{
	const struct profile_case *t = &profile_cases[_i];
	struct objfs_aws_profile p;
	struct objfs_creds c;
	char err[512] = "";

	write_file(".aws/config", "[default]\nregion=r-default\n[profile envp]\nregion=r-env\n"
		   "[profile optp]\nregion=r-opt\n", 0600);
	write_file(".aws/credentials", "[default]\naws_access_key_id=AKDEF\n"
		   "aws_secret_access_key=s\n[envp]\naws_access_key_id=AKENVP\n"
		   "aws_secret_access_key=s\n[optp]\naws_access_key_id=AKOPTP\n"
		   "aws_secret_access_key=s\n[credonly]\naws_access_key_id=AKCRED\n"
		   "aws_secret_access_key=s\n", 0600);
	if (t->env)
		setenv("AWS_PROFILE", t->env, 1);
	ck_assert_int_eq(objfs_aws_profile_load(t->arg, &p, err, sizeof(err)), t->load_rc);
	if (t->region)
		ck_assert_str_eq(p.region, t->region);
	else
		ck_assert_ptr_null(p.region);
	if (t->load_rc == -ENOENT)
		ck_assert_ptr_nonnull(strstr(err, "profile 'nope' not found"));
	objfs_aws_profile_clear(&p);
	ck_assert_int_eq(objfs_creds_resolve(t->arg, &c, err, sizeof(err)), t->creds_rc);
	if (t->key)
		ck_assert_str_eq(c.access_key, t->key);
	objfs_creds_clear(&c);
	unsetenv("AWS_PROFILE");
}
END_TEST

/* A file that cannot be read fails both readers, each naming both files. */
START_TEST(test_files_unreadable)
{
	struct objfs_aws_profile p;
	struct objfs_creds c;
	char err[2048] = "", want[2048], cfg[512], crd[512];
	FILE *f;

	snprintf(cfg, sizeof(cfg), "%s/big-config", home);
	snprintf(crd, sizeof(crd), "%s/.aws/credentials", home);
	write_file(".aws/credentials", "[default]\naws_access_key_id=AK\n"
		   "aws_secret_access_key=s\n", 0600);
	f = fopen(cfg, "w");
	ck_assert_ptr_nonnull(f);
	for (int i = 0; i < (1 << 20) / 16 + 1; i++)
		fputs("# over 1 MiB...\n", f);
	ck_assert_int_eq(fclose(f), 0);
	setenv("AWS_CONFIG_FILE", cfg, 1);
	ck_assert_int_eq(objfs_aws_profile_load(NULL, &p, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "cannot read AWS config files (%s, %s): %s", cfg, crd,
		 strerror(EINVAL));
	ck_assert_str_eq(err, want);
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "cannot read AWS credentials (%s, %s): %s", crd, cfg,
		 strerror(EINVAL));
	ck_assert_str_eq(err, want);
}
END_TEST

static pid_t stub_pid;

/* Starts tests/imds_stub.py; returns its port, or 0 when it cannot run. */
static int stub_start(int expires_in)
{
	const char *srcdir = getenv("srcdir");
	char script[512], arg[16];
	int pfd[2];
	char line[32] = "";
	FILE *f;

	snprintf(script, sizeof(script), "%s/tests/imds_stub.py", srcdir ? srcdir : ".");
	if (access(script, R_OK))
		snprintf(script, sizeof(script), "../tests/imds_stub.py");
	if (access(script, R_OK) || access("/usr/bin/python3", X_OK))
		return 0;
	snprintf(arg, sizeof(arg), "%d", expires_in);
	ck_assert_int_eq(pipe(pfd), 0);
	stub_pid = fork();
	if (stub_pid == 0) {
		dup2(pfd[1], 1);
		close(pfd[0]);
		execl("/usr/bin/python3", "python3", script, arg, (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	f = fdopen(pfd[0], "r");
	if (!fgets(line, sizeof(line), f))
		line[0] = '\0';
	fclose(f);
	return atoi(line);
}

static void stub_stop(void)
{
	if (stub_pid > 0) {
		kill(stub_pid, SIGTERM);
		waitpid(stub_pid, NULL, 0);
		stub_pid = 0;
	}
}

START_TEST(test_imds)
{
	struct objfs_creds c;
	struct objfs_creds_provider *p;
	char err[512] = "", ep[64];
	int port = stub_start(3600);

	ck_assert_msg(port > 0, "could not start tests/imds_stub.py");
	snprintf(ep, sizeof(ep), "http://127.0.0.1:%d/", port);
	setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", ep, 1);
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.access_key, "ASIAIMDSSTUB1");
	ck_assert_str_eq(c.secret_key, "imdsSecretValue");
	ck_assert_str_eq(c.session_token, "imdsTokenValue");
	ck_assert_str_eq(c.source, "instance metadata");
	ck_assert_int_gt(c.expires, time(NULL) + 3000);
	objfs_creds_clear(&c);
	/* Disabled: the chain ends without credentials. */
	setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err, "no_sign"));
	unsetenv("AWS_EC2_METADATA_DISABLED");
	/* A provider refreshes credentials that expire within five minutes. */
	stub_stop();
	port = stub_start(120);
	snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", port);
	setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", ep, 1);
	ck_assert_int_eq(objfs_creds_provider_new(NULL, 0, &p, err, sizeof(err)), 0);
	ck_assert_int_eq(objfs_creds_get(p, &c), 0);
	ck_assert_str_eq(c.access_key, "ASIAIMDSSTUB2"); /* fetched again already */
	objfs_creds_clear(&c);
	/* Those fresh ones expire within the window too: not fetched again on
	 * every request (each signer re-running the source),
	 * only after RETRY_AFTER_S. */
	ck_assert_int_eq(objfs_creds_get(p, &c), 0);
	ck_assert_str_eq(c.access_key, "ASIAIMDSSTUB2");
	objfs_creds_clear(&c);
	{
		int rc = 1;
		const struct objfs_creds *h = objfs_creds_hold(p, &rc);

		ck_assert_ptr_nonnull(h);
		ck_assert_str_eq(h->access_key, "ASIAIMDSSTUB2");
		ck_assert_ptr_eq(objfs_creds_hold(p, &rc), h);
		objfs_creds_drop(h);
		objfs_creds_drop(h);
	}
	objfs_creds_provider_free(p);
	stub_stop();
}
END_TEST

START_TEST(test_imds_unreachable_fast)
{
	struct objfs_creds c;
	char err[512] = "";
	time_t t0 = time(NULL);

	setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1", 1);
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), -ENOENT);
	ck_assert_int_lt(time(NULL) - t0, 5);
}
END_TEST

START_TEST(test_anonymous)
{
	struct objfs_creds_provider *p;
	struct objfs_creds c;
	char err[64];

	ck_assert_int_eq(objfs_creds_provider_new(NULL, 1, &p, err, sizeof(err)), 0);
	ck_assert_int_eq(objfs_creds_get(p, &c), -ENOKEY);
	objfs_creds_provider_free(p);
	objfs_creds_provider_free(NULL);
	objfs_creds_clear(NULL);
}
END_TEST

/* Whether the mapping holding @addr is marked MADV_DONTDUMP ("dd" among
 * its VmFlags in /proc/self/smaps). */
static int not_dumped(const void *addr)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	int in = 0, dd = -1;

	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
			in = (unsigned long)addr >= lo && (unsigned long)addr < hi;
		} else if (in && strncmp(line, "VmFlags:", 8) == 0) {
			dd = strstr(line, " dd") != NULL;
			break;
		}
	}
	fclose(f);
	ck_assert_msg(dd >= 0, "no mapping found for %p", addr);
	return dd;
}

/* Secret key, session token and the SigV4 signing-key cache are kept out
 * of core dumps; plain heap memory is not (the check can fail). */
START_TEST(test_secrets_not_dumped)
{
	struct objfs_creds c;
	struct objfs_sigv4 *sv;
	char err[512] = "", *plain;

	setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "secretEnv", 1);
	setenv("AWS_SESSION_TOKEN", "tokEnv", 1);
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), 0);
	ck_assert_msg(not_dumped(c.secret_key), "the secret key would be in a core dump");
	ck_assert_msg(not_dumped(c.session_token), "the session token would be in a core dump");
	ck_assert_int_eq(objfs_sigv4_new(&sv), 0);
	ck_assert_msg(not_dumped(sv), "the signing-key cache would be in a core dump");
	plain = calloc(1, 64);
	ck_assert_ptr_nonnull(plain);
	ck_assert_msg(!not_dumped(plain), "the smaps check cannot tell");
	free(plain);
	objfs_sigv4_free(sv);
	objfs_creds_clear(&c);
}
END_TEST

/* objfs_secret_nodump_process: not dumpable, unless asked to keep dumps. */
START_TEST(test_process_not_dumpable)
{
	for (int keep = 0; keep < 2; keep++) {
		int st;
		pid_t pid = fork();

		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			if (objfs_secret_dumpable() != 1)
				_exit(2);
			if (objfs_secret_nodump_process(keep))
				_exit(3);
			_exit(objfs_secret_dumpable() == keep ? 0 : 1);
		}
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
			      "keep_dumps=%d: child status %d", keep, st);
	}
}
END_TEST

/* ---- parsers ---- */

static const struct json_case {
	const char *doc;
	int process, rc;
	const char *ak, *tok;
	int64_t expires;
} json_cases[] = {
	{ "{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"SK\",\"Token\":\"T\","
	  "\"Expiration\":\"2030-01-02T03:04:05Z\"}", 0, 0, "AK", "T", 1893553445 },
	{ "{\"Version\":1,\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"SK\","
	  "\"SessionToken\":\"T\",\"Expiration\":\"2030-01-02T03:04:05.123+00:00\"}", 1, 0, "AK",
	  "T", 1893553445 },
	{ "{\"Version\":1,\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"SK\"}", 1, 0, "AK", NULL, 0 },
	{ "{\"Version\":2,\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"SK\"}", 1, -EPROTO },
	{ "{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"SK\"}", 1, -EPROTO }, /* no Version */
	{ "{\"Version\":\"1\",\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"SK\"}", 1, -EPROTO },
	{ "{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"SK\",\"Expiration\":\"soon\"}", 0, -EPROTO },
	{ "{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"SK\",\"Expiration\":\"2030-01-02T03:04:05Zjunk\"}",
	  0, -EPROTO },
	{ "{\"AccessKeyId\":\"AK\"}", 0, -EPROTO },
	{ "{\"AccessKeyId\":\"\",\"SecretAccessKey\":\"SK\"}", 0, -EPROTO },
	{ "{\"AccessKeyId\":1,\"SecretAccessKey\":\"SK\"}", 0, -EPROTO },
	{ "[\"AccessKeyId\"]", 0, -EPROTO },
	{ "{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"SK\"} trailing", 0, -EPROTO },
	{ "", 0, -EPROTO },
	{ "{\"Code\":\"Denied\",\"Message\":\"no role\"}", 0, -EPROTO },
	/* an Expiration that is not a date must not mean "never" */
	{ "{\"Version\":1,\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"SK\","
	  "\"Expiration\":1735689600}", 1, -EPROTO },
	{ "{\"Version\":1,\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"SK\","
	  "\"Expiration\":null}", 1, -EPROTO },
	/* the instance's and container's roles always expire */
	{ "{\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"SK\",\"Token\":\"T\"}", 0, -EPROTO },
	{ "{\"Version\":1,\"AccessKeyId\":\"AK\",\"SecretAccessKey\":\"SK\","
	  "\"Expiration\":\"2030-01-02T03:04:05+0000\"}", 1, 0, "AK", NULL, 1893553445 },
};

START_TEST(test_parse_json)
{
	const struct json_case *t = &json_cases[_i];
	struct objfs_creds c;
	char err[512] = "";
	int rc = objfs_creds_parse_json(t->doc, strlen(t->doc), t->process, "src", &c, err,
					sizeof(err));

	ck_assert_msg(rc == t->rc, "case %d: %d (%s)", _i, rc, err);
	if (rc) {
		ck_assert_ptr_null(c.access_key);
		ck_assert_msg(!strncmp(err, "src: ", 5), "case %d: message '%s'", _i, err);
		ck_assert_ptr_null(strstr(err, "SK"));
		return;
	}
	ck_assert_str_eq(c.access_key, t->ak);
	ck_assert_str_eq(c.secret_key, "SK");
	if (t->tok)
		ck_assert_str_eq(c.session_token, t->tok);
	else
		ck_assert_ptr_null(c.session_token);
	ck_assert_int_eq(c.expires, t->expires);
	ck_assert_str_eq(c.source, "src");
	objfs_creds_clear(&c);
}
END_TEST

START_TEST(test_parse_sts)
{
	static const char ok[] =
		"<AssumeRoleResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
		"<AssumeRoleResult><AssumedRoleUser><Arn>arn:x</Arn></AssumedRoleUser><Credentials>"
		"<AccessKeyId>ASIA1</AccessKeyId><SecretAccessKey>s+k/&amp;&lt;x&gt;</SecretAccessKey>"
		"<SessionToken>tok&quot;en</SessionToken><Expiration>2030-01-02T03:04:05Z</Expiration>"
		"</Credentials></AssumeRoleResult></AssumeRoleResponse>";
	static const char denied[] =
		"<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>"
		"<Message>Not authorized to perform sts:AssumeRole</Message></Error></ErrorResponse>";
	static const char *const bad[] = {
		"", "<Credentials>", "<Credentials><AccessKeyId>A</AccessKeyId></Credentials>",
		"<Credentials><AccessKeyId>A</AccessKeyId><SecretAccessKey>S</SecretAccessKey>"
		"<SessionToken>T</SessionToken></Credentials>", /* no Expiration */
		"<Credentials><AccessKeyId>A</AccessKeyId><SecretAccessKey>S</SecretAccessKey>"
		"<SessionToken>T</SessionToken><Expiration>x</Expiration></Credentials>",
		"<Credentials><AccessKeyId>A<AccessKeyId>", "<Code>unterminated",
	};
	struct objfs_creds c;
	char err[512] = "";

	ck_assert_int_eq(objfs_creds_parse_sts(ok, sizeof(ok) - 1, "sts", &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.access_key, "ASIA1");
	ck_assert_str_eq(c.secret_key, "s+k/&<x>");
	ck_assert_str_eq(c.session_token, "tok\"en");
	ck_assert_int_eq(c.expires, 1893553445);
	objfs_creds_clear(&c);
	ck_assert_int_eq(objfs_creds_parse_sts(denied, sizeof(denied) - 1, "sts", &c, err,
					       sizeof(err)), -EACCES);
	ck_assert_str_eq(err, "sts: AccessDenied: Not authorized to perform sts:AssumeRole");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(objfs_creds_parse_sts(bad[i], strlen(bad[i]), "sts", &c, err,
						    sizeof(err)) == -EPROTO, "bad[%zu]", i);
		ck_assert_ptr_null(c.access_key);
	}
}
END_TEST

START_TEST(test_creds_time)
{
	ck_assert_int_eq(objfs_creds_time("2030-01-02T03:04:05Z"), 1893553445);
	ck_assert_int_eq(objfs_creds_time("2030-01-02T03:04:05"), 1893553445);
	ck_assert_int_eq(objfs_creds_time("2030-01-02T03:04:05.999999Z"), 1893553445);
	ck_assert_int_eq(objfs_creds_time("2030-01-02T04:04:05+01:00"), 1893553445);
	ck_assert_int_eq(objfs_creds_time("2030-01-02T02:04:05-01:00"), 1893553445);
	ck_assert_int_eq(objfs_creds_time("2030-01-02T04:34:05+0130"), 1893553445);
	ck_assert_int_eq(objfs_creds_time("2030-01-02T03:04:05+01"), -1);
	ck_assert_int_eq(objfs_creds_time("2030-01-02T03:04:05+01:0"), -1);
	ck_assert_int_eq(objfs_creds_time("2030-01-02"), -1);
	ck_assert_int_eq(objfs_creds_time("2030-01-02T03:04:05Q"), -1);
	ck_assert_int_eq(objfs_creds_time(NULL), -1);
}
END_TEST

START_TEST(test_container_uri)
{
	static const struct { const char *uri; int ok; } t[] = {
		{ "https://example.com/creds", 1 },
		{ "http://127.0.0.1:8080/creds", 1 },
		{ "http://127.1.2.3/creds", 1 },
		{ "http://169.254.170.2/v2/creds", 1 },
		{ "http://169.254.170.23/v1/credentials", 1 },
		{ "http://[fd00:ec2::23]/v1/credentials", 1 },
		{ "http://localhost:9/x", 1 },
		{ "http://[::1]:9/x", 1 },
		{ "http://example.com/creds", 0 },
		{ "http://169.254.169.254/latest", 0 },
		{ "http://127.0.0.1.example.com/x", 0 },
		{ "http://127.0.0.256/x", 0 },
		{ "ftp://127.0.0.1/x", 0 },
		{ "not a url", 0 },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		ck_assert_msg(objfs_creds_container_uri_ok(t[i].uri) == t[i].ok, "%s", t[i].uri);
}
END_TEST

/* ---- credential_process ---- */

static void write_script(const char *name, const char *body)
{
	char rel[128];

	snprintf(rel, sizeof(rel), ".aws/%s", name);
	write_file(rel, body, 0700);
}

START_TEST(test_process)
{
	struct objfs_creds c;
	char err[512] = "", cmd[1200];

	write_script("ok.sh", "#!/bin/sh\necho progress >&2\nprintf '{\"Version\": 1, "
		     "\"AccessKeyId\": \"AKPROC\", \"SecretAccessKey\": \"SKPROC\", "
		     "\"SessionToken\": \"TPROC\", \"Expiration\": \"2030-01-02T03:04:05Z\"}'\n");
	write_script("fail.sh", "#!/bin/sh\necho 'token expired, run aws sso login' >&2\nexit 3\n");
	write_script("junk.sh", "#!/bin/sh\necho hello\n");
	write_script("v2.sh", "#!/bin/sh\necho '{\"Version\":2,\"AccessKeyId\":\"A\","
		     "\"SecretAccessKey\":\"S\"}'\n");
	snprintf(cmd, sizeof(cmd), "%s/.aws/ok.sh --profile 'a b'", home);
	ck_assert_int_eq(objfs_creds_from_process(cmd, &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.access_key, "AKPROC");
	ck_assert_str_eq(c.session_token, "TPROC");
	ck_assert_int_eq(c.expires, 1893553445);
	ck_assert_str_eq(c.source, "credential_process");
	objfs_creds_clear(&c);
	snprintf(cmd, sizeof(cmd), "%s/.aws/fail.sh", home);
	ck_assert_int_eq(objfs_creds_from_process(cmd, &c, err, sizeof(err)), -EACCES);
	ck_assert_msg(strstr(err, "exit status 3") != NULL, "%s", err);
	snprintf(cmd, sizeof(cmd), "%s/.aws/junk.sh", home);
	ck_assert_int_eq(objfs_creds_from_process(cmd, &c, err, sizeof(err)), -EPROTO);
	ck_assert_msg(strstr(err, "not a JSON object") != NULL, "%s", err);
	snprintf(cmd, sizeof(cmd), "%s/.aws/v2.sh", home);
	ck_assert_int_eq(objfs_creds_from_process(cmd, &c, err, sizeof(err)), -EPROTO);
	ck_assert_msg(strstr(err, "Version") != NULL, "%s", err);
	ck_assert_int_eq(objfs_creds_from_process("/nonexistent/helper", &c, err, sizeof(err)),
			 -EACCES);
	ck_assert_msg(strstr(err, "exit status 127") != NULL, "%s", err);
	/* Its output complete and closed, the program runs on: killed at the
	 * deadline, not waited for (waitpid would hold the lock as long). */
	write_script("linger.sh", "#!/bin/sh\nprintf '{\"Version\": 1, \"AccessKeyId\": \"A\", "
		     "\"SecretAccessKey\": \"S\"}'\nexec >&- 2>&-\nsleep 30\n");
	snprintf(cmd, sizeof(cmd), "%s/.aws/linger.sh", home);
	{
		int64_t t0 = objfs_now_ns();

		ck_assert_int_eq(objfs_creds_from_process_tmo(cmd, 1000, &c, err, sizeof(err)),
				 -ETIMEDOUT);
		ck_assert_msg(objfs_now_ns() - t0 < 5000000000LL, "waited %lld ms",
			      (long long)((objfs_now_ns() - t0) / 1000000));
		ck_assert_msg(strstr(err, "did not finish within 1 s") != NULL, "%s", err);
	}
	/* From a profile; static keys of the same profile win over the process. */
	snprintf(cmd, sizeof(cmd), "[profile p]\ncredential_process = %s/.aws/ok.sh\n"
		 "[profile both]\ncredential_process = %s/.aws/fail.sh\n", home, home);
	write_file(".aws/config", cmd, 0600);
	write_file(".aws/credentials", "[both]\naws_access_key_id=AKSTATIC\n"
		   "aws_secret_access_key=SKSTATIC\n", 0600);
	ck_assert_int_eq(objfs_creds_resolve("p", &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.access_key, "AKPROC");
	objfs_creds_clear(&c);
	ck_assert_int_eq(objfs_creds_resolve("both", &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.access_key, "AKSTATIC");
	objfs_creds_clear(&c);
}
END_TEST

/*
 * A program that writes megabytes to stderr: at most STDERR_LOG_MAX (4 KiB)
 * of it reaches the log, with one line counting the rest; the program does
 * not block on the pipe and its credentials resolve.
 */
static int loud_rc;

static void loud_process(void)
{
	struct objfs_creds c;
	char err[512] = "", cmd[600];

	snprintf(cmd, sizeof(cmd), "%s/.aws/loud.sh", home);
	loud_rc = objfs_creds_from_process(cmd, &c, err, sizeof(err));
	if (!loud_rc && strcmp(c.access_key, "AKLOUD") != 0)
		loud_rc = -EINVAL;
	objfs_creds_clear(&c);
}

START_TEST(test_process_stderr_capped)
{
	/* 65,536 lines of 63 'Q', then 1 MiB of 'Q' with no newline at all */
	const unsigned long long total = 65536ull * 63 + (1ull << 20);
	unsigned long long logged = 0, dropped = 0;
	size_t lines = 0;
	char *out, *note;

	write_script("loud.sh", "#!/bin/sh\nq=QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ\n"
		     "i=0; while [ $i -lt 16 ]; do i=$((i + 1)); yes $q | head -n 4096 >&2; done\n"
		     "head -c 1048576 /dev/zero | tr '\\0' Q >&2\n"
		     "printf '{\"Version\": 1, \"AccessKeyId\": \"AKLOUD\", "
		     "\"SecretAccessKey\": \"SKLOUD\"}'\n");
	out = capture(loud_process);
	ck_assert_int_eq(loud_rc, 0);
	for (const char *p = out; *p; p++)
		logged += *p == 'Q';
	note = strstr(out, "more bytes not logged (at most 4096 a run)");
	ck_assert_msg(note != NULL, "no note of what was dropped: %.300s", out);
	while (note > out && note[-1] != ':')
		note--;
	dropped = strtoull(note, NULL, 10);
	ck_assert_uint_eq(logged, 4096 / 63 * 63);
	ck_assert_uint_eq(logged + dropped, total);
	/* the log: the lines that carry those 4 KiB (65 of 63 bytes), and the note */
	for (const char *p = out; (p = strstr(p, "credential_process stderr: ")); p++)
		lines++;
	ck_assert_uint_le(lines, 4096 / 63 + 1);
	ck_assert_uint_le(strlen(out), 4096 + (lines + 1) * sizeof("objfs: warning: "
								   "credential_process stderr: ") + 100);
	free(out);
}
END_TEST

/* The stand-in's /counts field @key (a number or a string). */
static char *stub_count(int port, const char *key)
{
	char url[128], *body = NULL, *v, *r;
	char pat[64];
	long st;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/counts", port);
	ck_assert_int_eq(objfs_creds_http("GET", url, NULL, NULL, 2000, 0, &body, &st), 0);
	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	v = strstr(body, pat);
	ck_assert_ptr_nonnull(v);
	v += strlen(pat);
	if (*v == '"')
		v++;
	r = strndup(v, strcspn(v, "\","));
	free(body);
	return r;
}

static int count_is(int port, const char *key, const char *want)
{
	char *v = stub_count(port, key);
	int ok = !strcmp(v, want);

	if (!ok)
		fprintf(stderr, "stub count %s: %s, expected %s\n", key, v, want);
	free(v);
	return ok;
}

/* STS through the stand-in: web identity (environment and profile), roles chained. */
START_TEST(test_sts_chain)
{
	struct objfs_creds c;
	char err[512] = "", ep[64], text[2048];
	int port = stub_start(3600);

	ck_assert_msg(port > 0, "could not start tests/imds_stub.py");
	snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", port);
	setenv("AWS_ENDPOINT_URL_STS", ep, 1);
	setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
	write_file(".aws/token", "eyJhbGciOi.web.token\n", 0600);
	snprintf(text, sizeof(text), "%s/.aws/token", home);
	/* Environment web identity (EKS IRSA). */
	setenv("AWS_WEB_IDENTITY_TOKEN_FILE", text, 1);
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "AWS_ROLE_ARN") != NULL, "%s", err);
	setenv("AWS_ROLE_ARN", "arn:aws:iam::1:role/irsa", 1);
	setenv("AWS_ROLE_SESSION_NAME", "pod-7", 1);
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.source, "web identity (STS AssumeRoleWithWebIdentity)");
	ck_assert_ptr_nonnull(c.session_token);
	ck_assert_int_gt(c.expires, time(NULL) + 3000);
	objfs_creds_clear(&c);
	ck_assert(count_is(port, "web_identity", "1"));
	ck_assert(count_is(port, "last_role", "arn:aws:iam::1:role/irsa"));
	ck_assert(count_is(port, "last_session", "pod-7"));
	/* It comes before a profile's static keys, as in the SDKs. */
	write_file(".aws/credentials", "[default]\naws_access_key_id=AKSRC\n"
		   "aws_secret_access_key=SKSRC\n", 0600);
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.source, "web identity (STS AssumeRoleWithWebIdentity)");
	objfs_creds_clear(&c);
	/* An empty token file is refused with its name. */
	write_file(".aws/token", "\n", 0600);
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), -EACCES);
	ck_assert_msg(strstr(err, "is empty") != NULL, "%s", err);
	unsetenv("AWS_WEB_IDENTITY_TOKEN_FILE");
	unsetenv("AWS_ROLE_ARN");
	/* role_arn + source_profile: AssumeRole signed with the source's keys. */
	snprintf(text, sizeof(text),
		 "[profile role]\nrole_arn = arn:aws:iam::1:role/reader\nsource_profile = default\n"
		 "role_session_name = s1\n"
		 "[profile chained]\nrole_arn = arn:aws:iam::1:role/second\nsource_profile = role\n"
		 "[profile self]\nrole_arn = arn:aws:iam::1:role/self\nsource_profile = self\n"
		 "aws_access_key_id = AKSELF\naws_secret_access_key = SKSELF\n"
		 "[profile envsrc]\nrole_arn = arn:aws:iam::1:role/e\ncredential_source = Environment\n"
		 "[profile badsrc]\nrole_arn = arn:aws:iam::1:role/e\ncredential_source = Moon\n"
		 "[profile nosrc]\nrole_arn = arn:aws:iam::1:role/e\n"
		 "[profile loop1]\nrole_arn = arn:aws:iam::1:role/l\nsource_profile = loop2\n"
		 "[profile loop2]\nrole_arn = arn:aws:iam::1:role/l\nsource_profile = loop1\n"
		 "[profile deny]\nrole_arn = arn:aws:iam::1:role/deny\nsource_profile = default\n"
		 "[profile webp]\nrole_arn = arn:aws:iam::1:role/webp\n"
		 "web_identity_token_file = %s/.aws/token\n", home);
	write_file(".aws/config", text, 0600);
	ck_assert_int_eq(objfs_creds_resolve("role", &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.source, "assumed role (STS AssumeRole)");
	objfs_creds_clear(&c);
	ck_assert(count_is(port, "last_signer", "AKSRC"));
	ck_assert(count_is(port, "last_session", "s1"));
	ck_assert_int_eq(objfs_creds_resolve("chained", &c, err, sizeof(err)), 0);
	objfs_creds_clear(&c);
	ck_assert(count_is(port, "last_role", "arn:aws:iam::1:role/second"));
	ck_assert(count_is(port, "assume_role", "3")); /* role, then chained's two steps */
	ck_assert_int_eq(objfs_creds_resolve("self", &c, err, sizeof(err)), 0);
	objfs_creds_clear(&c);
	ck_assert(count_is(port, "last_signer", "AKSELF"));
	ck_assert_int_eq(objfs_creds_resolve("envsrc", &c, err, sizeof(err)), -ENOENT);
	ck_assert_msg(strstr(err, "credential_source Environment") != NULL, "%s", err);
	setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "SKENV", 1);
	ck_assert_int_eq(objfs_creds_resolve("envsrc", &c, err, sizeof(err)), 0);
	objfs_creds_clear(&c);
	ck_assert(count_is(port, "last_signer", "AKENV"));
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	ck_assert_int_eq(objfs_creds_resolve("badsrc", &c, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "Moon") != NULL, "%s", err);
	ck_assert_int_eq(objfs_creds_resolve("nosrc", &c, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(objfs_creds_resolve("loop1", &c, err, sizeof(err)), -ELOOP);
	ck_assert_int_eq(objfs_creds_resolve("deny", &c, err, sizeof(err)), -EACCES);
	ck_assert_msg(strstr(err, "AccessDenied: Not authorized") != NULL, "%s", err);
	write_file(".aws/token", "eyJhbGciOi.web.token\n", 0600);
	ck_assert_int_eq(objfs_creds_resolve("webp", &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.source, "web identity (STS AssumeRoleWithWebIdentity)");
	objfs_creds_clear(&c);
	ck_assert(count_is(port, "web_identity", "3"));
	/* An unreachable STS: a clear message, quickly. */
	setenv("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:1", 1);
	ck_assert_int_eq(objfs_creds_resolve("role", &c, err, sizeof(err)), -EHOSTUNREACH);
	ck_assert_msg(strstr(err, "no answer from http://127.0.0.1:1") != NULL, "%s", err);
	stub_stop();
}
END_TEST

START_TEST(test_container)
{
	struct objfs_creds c;
	char err[512] = "", uri[128], path[512];
	int port = stub_start(3600);

	ck_assert_msg(port > 0, "could not start tests/imds_stub.py");
	setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
	snprintf(uri, sizeof(uri), "http://127.0.0.1:%d/container/creds", port);
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", uri, 1);
	/* No token: the endpoint refuses, and the message says so. */
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), -EACCES);
	ck_assert_msg(strstr(err, "HTTP 401") != NULL, "%s", err);
	setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "stub-container-token", 1);
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.source, "container credentials");
	ck_assert_ptr_nonnull(c.session_token);
	objfs_creds_clear(&c);
	/* The token file wins over the variable (EKS Pod Identity rotates it). */
	write_file(".aws/eks-token", "wrong-token\n", 0600);
	snprintf(path, sizeof(path), "%s/.aws/eks-token", home);
	setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", path, 1);
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), -EACCES);
	write_file(".aws/eks-token", "stub-container-token\n", 0600);
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), 0);
	objfs_creds_clear(&c);
	ck_assert(count_is(port, "container", "2"));
	/* A host the rule refuses is not asked at all. */
	setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://example.com/creds", 1);
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "loopback") != NULL, "%s", err);
	/* Static keys in a file come first. */
	write_file(".aws/credentials", "[default]\naws_access_key_id=AKF\n"
		   "aws_secret_access_key=SKF\n", 0600);
	ck_assert_int_eq(objfs_creds_resolve(NULL, &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.access_key, "AKF");
	objfs_creds_clear(&c);
	stub_stop();
}
END_TEST

/* Keys from a file are read again when the file changes; a broken file keeps the old ones. */
START_TEST(test_file_reread)
{
	struct objfs_creds_provider *p;
	struct objfs_creds c;
	char err[512] = "";

	write_file(".aws/credentials", "[default]\naws_access_key_id=AKOLD\n"
		   "aws_secret_access_key=SKOLD\n", 0600);
	ck_assert_int_eq(objfs_creds_provider_new(NULL, 0, &p, err, sizeof(err)), 0);
	ck_assert_int_eq(objfs_creds_get(p, &c), 0);
	ck_assert_str_eq(c.access_key, "AKOLD");
	objfs_creds_clear(&c);
	write_file(".aws/credentials", "[default]\naws_access_key_id=AKNEW1\n"
		   "aws_secret_access_key=SKNEW\n", 0600);
	sleep(6); /* FILE_CHECK_EVERY_S */
	ck_assert_int_eq(objfs_creds_get(p, &c), 0);
	ck_assert_str_eq(c.access_key, "AKNEW1");
	objfs_creds_clear(&c);
	write_file(".aws/credentials", "[default]\naws_access_key_id=AKHALF\n", 0600);
	sleep(6);
	ck_assert_int_eq(objfs_creds_get(p, &c), 0);
	ck_assert_str_eq(c.access_key, "AKNEW1"); /* kept, and the failure logged */
	objfs_creds_clear(&c);
	objfs_creds_provider_free(p);
}
END_TEST

/* The remote sources at debug level: no secret in anything logged. */
static int secret_port;

static void remote_sources(void)
{
	struct objfs_creds c;
	char err[512] = "", ep[64];

	snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", secret_port);
	setenv("AWS_ENDPOINT_URL_STS", ep, 1);
	if (objfs_creds_resolve("role", &c, err, sizeof(err)) == 0)
		objfs_creds_clear(&c);
	fprintf(stderr, "%s\n", err);
	if (objfs_creds_resolve("proc", &c, err, sizeof(err)) == 0)
		objfs_creds_clear(&c);
	fprintf(stderr, "%s\n", err);
	if (objfs_creds_resolve("deny", &c, err, sizeof(err)) == 0)
		objfs_creds_clear(&c);
	fprintf(stderr, "%s\n", err);
}

START_TEST(test_remote_no_secret_in_logs)
{
	char text[1024], *out;

	setenv("IMDS_STUB_ACCESS_KEY", "AKREMOTE", 1);
	setenv("IMDS_STUB_SECRET_KEY", "TOPSECRETREMOTE", 1);
	setenv("IMDS_STUB_SESSION_TOKEN", "TOPSECRETSESSION", 1);
	secret_port = stub_start(3600);
	unsetenv("IMDS_STUB_ACCESS_KEY");
	unsetenv("IMDS_STUB_SECRET_KEY");
	unsetenv("IMDS_STUB_SESSION_TOKEN");
	ck_assert_msg(secret_port > 0, "could not start tests/imds_stub.py");
	write_file(".aws/credentials", "[default]\naws_access_key_id=AKSRC\n"
		   "aws_secret_access_key=TOPSECRETSOURCE\n", 0600);
	write_script("p.sh", "#!/bin/sh\necho 'TOPSECRET is not echoed here' >/dev/null\n"
		     "echo '{\"Version\":1,\"AccessKeyId\":\"AKP\",\"SecretAccessKey\":\"TOPSECRETPROC\"}'\n");
	snprintf(text, sizeof(text),
		 "[profile role]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = default\n"
		 "[profile deny]\nrole_arn = arn:aws:iam::1:role/deny\nsource_profile = default\n"
		 "[profile proc]\ncredential_process = %s/.aws/p.sh\n", home);
	write_file(".aws/config", text, 0600);
	out = capture(remote_sources);
	ck_assert_msg(strstr(out, "credentials: assumed role") != NULL, "log: %s", out);
	ck_assert_msg(strstr(out, "TOPSECRET") == NULL, "a secret in the log: %s", out);
	free(out);
	stub_stop();
}
END_TEST

/* Held credentials are shared (no copy a request) and outlive a refresh
 * or the provider itself until dropped. */
START_TEST(test_hold_shared)
{
	struct objfs_creds_provider *p;
	const struct objfs_creds *a, *b;
	char err[512] = "";
	int rc = 1;

	setenv("AWS_ACCESS_KEY_ID", "AKHOLD", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "SKHOLD", 1);
	setenv("AWS_SESSION_TOKEN", "TKHOLD", 1);
	ck_assert_int_eq(objfs_creds_provider_new(NULL, 0, &p, err, sizeof(err)), 0);
	a = objfs_creds_hold(p, &rc);
	ck_assert_ptr_nonnull(a);
	ck_assert_int_eq(rc, 0);
	b = objfs_creds_hold(p, &rc);
	ck_assert_ptr_eq(a, b); /* one snapshot until the credentials change */
	ck_assert_str_eq(a->access_key, "AKHOLD");
	ck_assert_str_eq(a->session_token, "TKHOLD");
	objfs_creds_drop(b);
	objfs_creds_provider_free(p);
	ck_assert_str_eq(a->secret_key, "SKHOLD"); /* still held */
	objfs_creds_drop(a);
	objfs_creds_drop(NULL);
	ck_assert_int_eq(objfs_creds_provider_new(NULL, 1, &p, err, sizeof(err)), 0);
	ck_assert_ptr_null(objfs_creds_hold(p, &rc)); /* no_sign */
	ck_assert_int_eq(rc, -ENOKEY);
	objfs_creds_provider_free(p);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	unsetenv("AWS_SESSION_TOKEN");
}
END_TEST

/*
 * The store refused the current credentials (ExpiredToken and the like):
 * they are resolved again before the next use, once. Keys from the
 * environment are otherwise never resolved again, so what the provider
 * hands out shows whether it did; a refusal of keys no longer current, or
 * a second one within the limits (objfs_creds_reject), changes nothing.
 */
START_TEST(test_reject)
{
	struct objfs_creds_provider *p;
	const struct objfs_creds *h;
	struct objfs_creds c;
	char err[512] = "";
	int rc = 1;

	setenv("AWS_ACCESS_KEY_ID", "AKREJ1", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "SKREJ1", 1);
	setenv("AWS_SESSION_TOKEN", "TKREJ1", 1);
	ck_assert_int_eq(objfs_creds_provider_new(NULL, 0, &p, err, sizeof(err)), 0);
	setenv("AWS_ACCESS_KEY_ID", "AKREJ2", 1); /* rotated at the source */
	setenv("AWS_SESSION_TOKEN", "TKREJ2", 1);
	ck_assert_int_eq(objfs_creds_get(p, &c), 0);
	ck_assert_str_eq(c.access_key, "AKREJ1"); /* kept: nothing says they changed */
	objfs_creds_clear(&c);
	ck_assert_int_eq(objfs_creds_reject(p, "AKOTHER"), 0); /* not the current ones */
	ck_assert_int_eq(objfs_creds_reject(p, NULL), 0);
	h = objfs_creds_hold(p, &rc);
	ck_assert_ptr_nonnull(h);
	ck_assert_str_eq(h->access_key, "AKREJ1");
	ck_assert_int_eq(objfs_creds_reject(p, "AKREJ1"), 1);
	ck_assert_int_eq(objfs_creds_get(p, &c), 0);
	ck_assert_str_eq(c.access_key, "AKREJ2");
	ck_assert_str_eq(c.session_token, "TKREJ2");
	objfs_creds_clear(&c);
	ck_assert_str_eq(h->session_token, "TKREJ1"); /* a holder keeps its own */
	objfs_creds_drop(h);
	h = objfs_creds_hold(p, &rc);
	ck_assert_ptr_nonnull(h);
	ck_assert_str_eq(h->access_key, "AKREJ2"); /* a new snapshot */
	objfs_creds_drop(h);
	setenv("AWS_ACCESS_KEY_ID", "AKREJ3", 1);
	ck_assert_int_eq(objfs_creds_reject(p, "AKREJ2"), 0); /* again at once: not asked */
	ck_assert_int_eq(objfs_creds_get(p, &c), 0);
	ck_assert_str_eq(c.access_key, "AKREJ2");
	objfs_creds_clear(&c);
	sleep(2); /* a second, for other keys than the last refused one */
	ck_assert_int_eq(objfs_creds_reject(p, "AKREJ2"), 1);
	ck_assert_int_eq(objfs_creds_get(p, &c), 0);
	ck_assert_str_eq(c.access_key, "AKREJ3");
	objfs_creds_clear(&c);
	setenv("AWS_ACCESS_KEY_ID", "AKREJ2", 1); /* the source hands the refused one again */
	sleep(2);
	ck_assert_int_eq(objfs_creds_reject(p, "AKREJ3"), 1);
	ck_assert_int_eq(objfs_creds_get(p, &c), 0);
	ck_assert_str_eq(c.access_key, "AKREJ2");
	objfs_creds_clear(&c);
	sleep(2);
	ck_assert_int_eq(objfs_creds_reject(p, "AKREJ2"), 1); /* the last refused was AKREJ3 */
	ck_assert_int_eq(objfs_creds_get(p, &c), 0);
	ck_assert_str_eq(c.access_key, "AKREJ2"); /* the source's answer, refused or not */
	objfs_creds_clear(&c);
	sleep(2);
	ck_assert_int_eq(objfs_creds_reject(p, "AKREJ2"), 0); /* the same key: once in 10 s */
	objfs_creds_provider_free(p);
	ck_assert_int_eq(objfs_creds_provider_new(NULL, 1, &p, err, sizeof(err)), 0);
	ck_assert_int_eq(objfs_creds_reject(p, "AKREJ2"), 0); /* no_sign */
	objfs_creds_provider_free(p);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	unsetenv("AWS_SESSION_TOKEN");
}
END_TEST

/*
 * A source whose every answer the store refuses is asked less and less
 * often: the gap between refusals taken doubles while they follow one
 * another (1 s, then 2 s), so a mount whose STS tokens S3 never takes does
 * not ask STS every second for good.
 */
START_TEST(test_reject_backoff)
{
	struct objfs_creds_provider *p;
	struct objfs_creds c;
	char err[512] = "";
	int64_t t0;
	int rc;

	setenv("AWS_ACCESS_KEY_ID", "AKBO1", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "SKBO", 1);
	ck_assert_int_eq(objfs_creds_provider_new(NULL, 0, &p, err, sizeof(err)), 0);
	setenv("AWS_ACCESS_KEY_ID", "AKBO2", 1);
	ck_assert_int_eq(objfs_creds_reject(p, "AKBO1"), 1); /* gap 1 s */
	ck_assert_int_eq(objfs_creds_get(p, &c), 0);
	ck_assert_str_eq(c.access_key, "AKBO2");
	objfs_creds_clear(&c);
	usleep(1100 * 1000);
	setenv("AWS_ACCESS_KEY_ID", "AKBO3", 1);
	ck_assert_int_eq(objfs_creds_reject(p, "AKBO2"), 1); /* 1.1 s after: gap 2 s */
	ck_assert_int_eq(objfs_creds_get(p, &c), 0);
	ck_assert_str_eq(c.access_key, "AKBO3");
	objfs_creds_clear(&c);
	t0 = objfs_now_ns();
	usleep(1100 * 1000);
	rc = objfs_creds_reject(p, "AKBO3");
	if (objfs_now_ns() - t0 < 1900000000LL) /* a loaded machine may oversleep */
		ck_assert_int_eq(rc, 0); /* 1.1 s: within the 2 */
	usleep(1000 * 1000);
	ck_assert_int_eq(objfs_creds_reject(p, "AKBO3"), rc ? 0 : 1); /* 2.1 s: taken, gap 4 s */
	objfs_creds_provider_free(p);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
}
END_TEST

/*
 * A refresh runs outside the provider's lock: while credential_process
 * refreshes ones that expire within the window, another signer gets the
 * current ones at once, not after the whole refresh behind the lock.
 * The program's second run blocks on a FIFO the
 * test opens only after that other get() returned: no timing involved.
 */
static void *get_in_thread(void *arg)
{
	struct objfs_creds *c = malloc(sizeof(*c));

	ck_assert_int_eq(objfs_creds_get(arg, c), 0);
	return c;
}

/*
 * Profile @name: a credential_process handing out AK1, AK2, ... valid for
 * @valid_s seconds; every run after the first blocks on the FIFO
 * ~/.aws/gate until gate_open().
 */
static void gated_profile(const char *name, int valid_s)
{
	char body[1024], script[64], text[1200], path[600];

	snprintf(body, sizeof(body), "#!/bin/sh\nn=$(cat \"$HOME/.aws/n\" 2>/dev/null || echo 0)\n"
		 "echo $((n + 1)) > \"$HOME/.aws/n\"\n"
		 "[ \"$n\" -gt 0 ] && read x < \"$HOME/.aws/gate\"\n"
		 "printf '{\"Version\":1,\"AccessKeyId\":\"AK%%s\",\"SecretAccessKey\":\"S\","
		 "\"Expiration\":\"%%s\"}' $((n + 1)) "
		 "\"$(date -u -d '+%d seconds' +%%Y-%%m-%%dT%%H:%%M:%%SZ)\"\n", valid_s);
	snprintf(script, sizeof(script), "%s.sh", name);
	write_script(script, body);
	snprintf(path, sizeof(path), "%s/.aws/gate", home);
	ck_assert_int_eq(mkfifo(path, 0600), 0);
	snprintf(text, sizeof(text), "[profile %s]\ncredential_process = %s/.aws/%s\n", name,
		 home, script);
	write_file(".aws/config", text, 0600);
}

/* Waits until the gated program's second run started (it blocks then). */
static void gate_reached(void)
{
	char path[600];
	FILE *f;
	int n = 0;

	snprintf(path, sizeof(path), "%s/.aws/n", home);
	while (n < 2) {
		struct timespec tick = { 0, 10 * 1000000 };

		nanosleep(&tick, NULL);
		if ((f = fopen(path, "r"))) {
			if (fscanf(f, "%d", &n) != 1)
				n = 0;
			fclose(f);
		}
	}
}

/* Lets the gated program's blocked run go on. */
static void gate_open(void)
{
	char path[600];
	FILE *f;

	snprintf(path, sizeof(path), "%s/.aws/gate", home);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("go\n", f);
	fclose(f);
}

START_TEST(test_refresh_outside_lock)
{
	struct objfs_creds_provider *p;
	struct objfs_creds c, *ca;
	char err[512] = "";
	pthread_t t;

	gated_profile("slow", 200); /* within the refresh window: stale at once */
	ck_assert_int_eq(objfs_creds_provider_new("slow", 0, &p, err, sizeof(err)), 0);
	ck_assert_int_eq(pthread_create(&t, NULL, get_in_thread, p), 0);
	gate_reached(); /* the refresh's program started */
	ck_assert_int_eq(objfs_creds_get(p, &c), 0); /* not behind the refresh */
	ck_assert_str_eq(c.access_key, "AK1");
	objfs_creds_clear(&c);
	gate_open();
	ck_assert_int_eq(pthread_join(t, (void **)&ca), 0);
	ck_assert_str_eq(ca->access_key, "AK2");
	objfs_creds_clear(ca);
	free(ca);
	objfs_creds_provider_free(p);
}
END_TEST

/*
 * While one signer resolves refused credentials, the others wait for the
 * new ones instead of signing with what they hold (known bad): the
 * credential_process's second run blocks on a FIFO; a second get()
 * started meanwhile has not returned 0.3 s later, and both get the new
 * key once the FIFO opens. (Without the wait it returned AK1 at once.)
 */
static atomic_int waiter_done;

static void *get_flag_thread(void *arg)
{
	struct objfs_creds *c = get_in_thread(arg);

	atomic_store(&waiter_done, 1);
	return c;
}

START_TEST(test_reject_waits)
{
	struct objfs_creds_provider *p;
	struct objfs_creds *ca, *cb;
	char err[512] = "";
	struct timespec nap = { 0, 300 * 1000000 };
	pthread_t a, b;

	gated_profile("gated", 3600); /* not stale: only the refusal resolves */
	ck_assert_int_eq(objfs_creds_provider_new("gated", 0, &p, err, sizeof(err)), 0);
	ck_assert_int_eq(objfs_creds_reject(p, "AK1"), 1);
	ck_assert_int_eq(pthread_create(&a, NULL, get_in_thread, p), 0); /* resolves */
	gate_reached();
	atomic_store(&waiter_done, 0);
	ck_assert_int_eq(pthread_create(&b, NULL, get_flag_thread, p), 0);
	nanosleep(&nap, NULL);
	ck_assert_int_eq(atomic_load(&waiter_done), 0); /* waits for the new ones */
	gate_open();
	ck_assert_int_eq(pthread_join(a, (void **)&ca), 0);
	ck_assert_int_eq(pthread_join(b, (void **)&cb), 0);
	ck_assert_str_eq(ca->access_key, "AK2");
	ck_assert_str_eq(cb->access_key, "AK2");
	objfs_creds_clear(ca);
	objfs_creds_clear(cb);
	free(ca);
	free(cb);
	objfs_creds_provider_free(p);
}
END_TEST

static Suite *creds_suite(void)
{
	Suite *s = suite_create("creds");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_ini);
	tcase_add_test(tc, test_ini_long_line);
	tcase_add_test(tc, test_env);
	tcase_add_test(tc, test_files);
	tcase_add_test(tc, test_files_pipe_and_large);
	tcase_add_loop_test(tc, test_profile_choice, 0,
			    sizeof(profile_cases) / sizeof(profile_cases[0]));
	tcase_add_test(tc, test_files_unreadable);
	tcase_add_test(tc, test_no_secret_in_logs);
	tcase_add_test(tc, test_imds);
	tcase_add_test(tc, test_refresh_outside_lock);
	tcase_add_test(tc, test_hold_shared);
	tcase_add_test(tc, test_imds_unreachable_fast);
	tcase_add_test(tc, test_anonymous);
	tcase_add_test(tc, test_secrets_not_dumped);
	tcase_add_test(tc, test_process_not_dumpable);
	tcase_add_loop_test(tc, test_parse_json, 0, sizeof(json_cases) / sizeof(json_cases[0]));
	tcase_add_test(tc, test_parse_sts);
	tcase_add_test(tc, test_creds_time);
	tcase_add_test(tc, test_container_uri);
	tcase_add_test(tc, test_process);
	tcase_add_test(tc, test_process_stderr_capped);
	tcase_add_test(tc, test_sts_chain);
	tcase_add_test(tc, test_container);
	tcase_add_test(tc, test_file_reread);
	tcase_add_test(tc, test_reject);
	tcase_add_test(tc, test_reject_backoff);
	tcase_add_test(tc, test_reject_waits);
	tcase_add_test(tc, test_remote_no_secret_in_logs);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(creds_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
