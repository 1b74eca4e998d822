/*
 * creds: see creds.h for the chain and the secrecy rule.
 *
 * The INI reader keeps every (section, key, value) triple in file order and
 * answers lookups from the end, so a later duplicate wins, as in the AWS
 * CLI. Indented lines under a key with an empty value ("s3 =") form a nested
 * block, stored under the section "SECTION.KEY".
 *
 * The profile settings (objfs_aws_profile_load) and the chain's file step
 * (from_files) read the same two files of the same profile through one
 * loader, aws_files_load: the credentials file first, as secret, then the
 * config file.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "clock.h"
#include "creds_i.h"
#include "log.h"
#include "secret.h"

#define INI_LINE_MAX (64u << 10)
#define FILE_MAX (1u << 20)

/* ---- INI ---- */

struct ini_ent {
	char *section, *key, *value;
};

struct objfs_ini {
	struct ini_ent *e;
	size_t n, cap;
};

void objfs_ini_free(struct objfs_ini *ini)
{
	if (!ini)
		return;
	for (size_t i = 0; i < ini->n; i++) {
		free(ini->e[i].section);
		free(ini->e[i].key);
		if (ini->e[i].value) {
			explicit_bzero(ini->e[i].value, strlen(ini->e[i].value));
			free(ini->e[i].value);
		}
	}
	free(ini->e);
	free(ini);
}

static char *trimmed(const char *s, size_t n)
{
	while (n && isspace((unsigned char)*s)) {
		s++;
		n--;
	}
	while (n && isspace((unsigned char)s[n - 1]))
		n--;
	return strndup(s, n);
}

static int ini_add(struct objfs_ini *ini, const char *section, char *key, char *value)
{
	if (ini->n == ini->cap) {
		size_t nc = ini->cap ? ini->cap * 2 : 16;
		struct ini_ent *ne = realloc(ini->e, nc * sizeof(*ne));

		if (!ne)
			return -ENOMEM;
		ini->e = ne;
		ini->cap = nc;
	}
	ini->e[ini->n].section = strdup(section);
	ini->e[ini->n].key = key;
	ini->e[ini->n].value = value;
	if (!ini->e[ini->n].section)
		return -ENOMEM;
	ini->n++;
	return 0;
}

int objfs_ini_parse(const char *buf, size_t len, struct objfs_ini **out)
{
	struct objfs_ini *ini = calloc(1, sizeof(*ini));
	char *section = strdup(""), *nest = NULL;
	size_t pos = 0;
	int err = 0;

	if (!ini || !section) {
		free(ini);
		free(section);
		return -ENOMEM;
	}
	while (pos < len && !err) {
		const char *line = buf + pos, *nl = memchr(line, '\n', len - pos);
		size_t n = nl ? (size_t)(nl - line) : len - pos;
		int indented = n && (line[0] == ' ' || line[0] == '\t');
		const char *eq;
		char *t;

		pos += n + (nl ? 1 : 0);
		if (n > INI_LINE_MAX) {
			err = -EINVAL;
			break;
		}
		t = trimmed(line, n);
		if (!t) {
			err = -ENOMEM;
			break;
		}
		if (!*t || *t == '#' || *t == ';') {
			free(t);
			continue;
		}
		if (*t == '[') {
			char *rb = strchr(t, ']');

			free(section);
			section = rb ? trimmed(t + 1, (size_t)(rb - t - 1)) : strdup("");
			free(nest);
			nest = NULL;
			free(t);
			if (!section)
				err = -ENOMEM;
			continue;
		}
		eq = strchr(t, '=');
		if (!eq) {
			free(t);
			continue; /* not a key line: ignored, like the AWS CLI */
		}
		{
			char *key = trimmed(t, (size_t)(eq - t));
			char *value = trimmed(eq + 1, strlen(eq + 1));
			char *sec = NULL;

			if (!key || !value) {
				free(key);
				free(value);
				err = -ENOMEM;
			} else if (indented && nest) {
				if (asprintf(&sec, "%s.%s", section, nest) < 0)
					sec = NULL;
				err = sec ? ini_add(ini, sec, key, value) : -ENOMEM;
				if (!sec) {
					free(key);
					free(value);
				}
				free(sec);
			} else {
				free(nest);
				nest = !*value ? strdup(key) : NULL;
				err = ini_add(ini, section, key, value);
			}
		}
		explicit_bzero(t, strlen(t));
		free(t);
	}
	free(section);
	free(nest);
	if (err) {
		objfs_ini_free(ini);
		return err;
	}
	*out = ini;
	return 0;
}

const char *objfs_ini_get(const struct objfs_ini *ini, const char *section, const char *key)
{
	for (size_t i = ini ? ini->n : 0; i-- > 0;)
		if (strcmp(ini->e[i].section, section) == 0 && strcmp(ini->e[i].key, key) == 0)
			return ini->e[i].value;
	return NULL;
}

static int ini_has_section(const struct objfs_ini *ini, const char *section)
{
	for (size_t i = 0; ini && i < ini->n; i++)
		if (strcmp(ini->e[i].section, section) == 0)
			return 1;
	return 0;
}

/* A file holding secrets that others may read: say so (it still works). */
static void warn_shared(const char *path, mode_t mode)
{
	if (mode & 077)
		objfs_warn("%s is readable by other users: run chmod 600 %s", path, path);
}

/* Reads and parses @path; *out stays NULL when the file does not exist. */
static int ini_load(const char *path, int secret, struct objfs_ini **out)
{
	struct stat st;
	FILE *f;
	char *buf;
	size_t n, cap = FILE_MAX;
	int err;

	*out = NULL;
	f = fopen(path, "r");
	if (!f)
		return errno == ENOENT ? 0 : -errno;
	if (fstat(fileno(f), &st) == 0) {
		if (st.st_size > (off_t)FILE_MAX) {
			fclose(f);
			objfs_warn("%s is larger than 1 MiB: ignored", path);
			return -EINVAL;
		}
		if (secret)
			warn_shared(path, st.st_mode);
		/* not 1 MiB for a 200-byte file; pipes (size 0) get the cap */
		if (S_ISREG(st.st_mode) && (size_t)st.st_size + 4096 < FILE_MAX)
			cap = (size_t)st.st_size + 4096;
	}
	buf = malloc(cap);
	if (!buf) {
		fclose(f);
		return -ENOMEM;
	}
	n = fread(buf, 1, cap, f);
	fclose(f);
	err = objfs_ini_parse(buf, n, out);
	explicit_bzero(buf, n);
	free(buf);
	if (err == -EINVAL)
		objfs_warn("%s has a line longer than 64 KiB: ignored", path);
	return err;
}

static char *aws_file(const char *env, const char *name)
{
	const char *v = getenv(env), *home = getenv("HOME");
	char *p;

	if (v && *v)
		return strdup(v);
	if (asprintf(&p, "%s/.aws/%s", home && *home ? home : "", name) < 0)
		return NULL;
	return p;
}

static const char *profile_name(const char *profile)
{
	const char *env = getenv("AWS_PROFILE");

	if (profile && *profile)
		return profile;
	return env && *env ? env : "default";
}

/* Config file section of @name: "default" or "profile NAME". Caller frees. */
static char *config_section(const char *name)
{
	char *s;

	if (strcmp(name, "default") == 0)
		return strdup("default");
	if (asprintf(&s, "profile %s", name) < 0)
		return NULL;
	return s;
}

/*
 * The shared files of one profile, as both the settings and the chain read
 * them: the credentials file is parsed as secret (wiped, mode checked).
 */
struct aws_files {
	const char *name;        /* profile name: borrowed (argument or environment) */
	char *cfg, *crd;         /* owned paths */
	char *sec;               /* owned: the profile's config file section */
	struct objfs_ini *ci;    /* owned; NULL when the config file is absent */
	struct objfs_ini *cr;    /* owned; NULL when the credentials file is absent */
};

static void aws_files_clear(struct aws_files *f)
{
	objfs_ini_free(f->ci);
	objfs_ini_free(f->cr);
	free(f->cfg);
	free(f->crd);
	free(f->sec);
	memset(f, 0, sizeof(*f));
}

/*
 * Finds and parses the files of @profile (NULL: AWS_PROFILE or "default"),
 * the credentials file first. 0; -ENOMEM with @f cleared (f->cfg NULL); or
 * the -errno of a file that cannot be read, with the paths left in @f for
 * the caller's message. The caller clears @f either way.
 */
static int aws_files_load(const char *profile, struct aws_files *f)
{
	int rc;

	memset(f, 0, sizeof(*f));
	f->name = profile_name(profile);
	f->cfg = aws_file("AWS_CONFIG_FILE", "config");
	f->crd = aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
	f->sec = config_section(f->name);
	if (!f->cfg || !f->crd || !f->sec) {
		aws_files_clear(f);
		return -ENOMEM;
	}
	rc = ini_load(f->crd, 1, &f->cr);
	if (!rc)
		rc = ini_load(f->cfg, 0, &f->ci);
	return rc;
}

/* Whether profile @f->name, named explicitly as @profile, is in neither file. */
static int profile_missing(const struct aws_files *f, const char *profile)
{
	return profile && *profile && !ini_has_section(f->ci, f->sec) &&
	       !ini_has_section(f->cr, f->name);
}

/* ---- credentials ---- */

void objfs_creds_clear(struct objfs_creds *c)
{
	if (!c)
		return;
	if (c->access_key)
		free(c->access_key);
	/* secret buffers: wiped whole and unmapped (secret.h) */
	objfs_secret_free(c->secret_key);
	objfs_secret_free(c->session_token);
	memset(c, 0, sizeof(*c));
}

void objfs_aws_profile_clear(struct objfs_aws_profile *p)
{
	if (!p)
		return;
	free(p->region);
	free(p->endpoint_url);
	p->region = p->endpoint_url = NULL;
}

int objfs_creds_set(struct objfs_creds *c, const char *ak, const char *sk, const char *tok,
		    int64_t expires, const char *source)
{
	c->access_key = strdup(ak);
	c->secret_key = objfs_secret_strdup(sk);
	c->session_token = tok && *tok ? objfs_secret_strdup(tok) : NULL;
	c->expires = expires;
	c->source = source;
	if (!c->access_key || !c->secret_key || (tok && *tok && !c->session_token)) {
		objfs_creds_clear(c);
		return -ENOMEM;
	}
	return 0;
}

int objfs_aws_profile_load(const char *profile, struct objfs_aws_profile *out, char *err,
			   size_t errlen)
{
	struct aws_files f;
	char *s3sec = NULL;
	const char *v;
	int rc = aws_files_load(profile, &f);

	memset(out, 0, sizeof(*out));
	if (rc) {
		if (f.cfg)
			snprintf(err, errlen, "cannot read AWS config files (%s, %s): %s", f.cfg,
				 f.crd, strerror(-rc));
		goto out;
	}
	if (asprintf(&s3sec, "%s.s3", f.sec) < 0) {
		s3sec = NULL;
		rc = -ENOMEM;
		goto out;
	}
	if (profile_missing(&f, profile)) {
		snprintf(err, errlen, "profile '%s' not found in %s or %s", f.name, f.cfg, f.crd);
		rc = -ENOENT;
		goto out;
	}
	if ((v = objfs_ini_get(f.ci, f.sec, "region")) && *v)
		out->region = strdup(v);
	if (((v = objfs_ini_get(f.ci, s3sec, "endpoint_url")) && *v) ||
	    ((v = objfs_ini_get(f.ci, f.sec, "endpoint_url")) && *v))
		out->endpoint_url = strdup(v);
out:
	aws_files_clear(&f);
	free(s3sec);
	return rc;
}

/* A setting of profile @name: its credentials file section, then its config file section. */
static const char *pget(const struct aws_files *f, const char *name, const char *key)
{
	char sec[300];
	const char *v = objfs_ini_get(f->cr, name, key);

	if (v && *v)
		return v;
	snprintf(sec, sizeof(sec), strcmp(name, "default") ? "profile %s" : "%s", name);
	v = objfs_ini_get(f->ci, sec, key);
	return v && *v ? v : NULL;
}

/* Static keys of profile @name from the shared files. 0, 1 when it has none, -errno. */
static int profile_static(const struct aws_files *f, const char *name, struct objfs_creds *out,
			  char *err, size_t errlen)
{
	char sec[300];
	const char *ak, *sk, *tok, *where;
	struct stat st;
	int rc;

	snprintf(sec, sizeof(sec), strcmp(name, "default") ? "profile %s" : "%s", name);
	ak = objfs_ini_get(f->cr, name, "aws_access_key_id");
	sk = objfs_ini_get(f->cr, name, "aws_secret_access_key");
	tok = objfs_ini_get(f->cr, name, "aws_session_token");
	where = f->crd;
	if (!ak && !sk) {
		ak = objfs_ini_get(f->ci, sec, "aws_access_key_id");
		sk = objfs_ini_get(f->ci, sec, "aws_secret_access_key");
		tok = objfs_ini_get(f->ci, sec, "aws_session_token");
		where = f->cfg;
	}
	if (!ak && !sk)
		return 1;
	if (!ak || !sk || !*ak || !*sk) {
		snprintf(err, errlen, "profile '%s' in %s has %s but not %s", name, where,
			 ak ? "aws_access_key_id" : "aws_secret_access_key",
			 ak ? "aws_secret_access_key" : "aws_access_key_id");
		return -EINVAL;
	}
	/* the config file is loaded as not secret; this profile keeps its key there */
	if (where == f->cfg && stat(f->cfg, &st) == 0)
		warn_shared(f->cfg, st.st_mode);
	rc = objfs_creds_set(out, ak, sk, tok, 0, where == f->crd ? "shared credentials file" :
				   "config file");
	if (!rc)
		objfs_info("credentials: profile '%s' from %s", name, where);
	return rc;
}

/* credential_process of profile @name. 0, 1 when it has none, -errno. */
static int profile_process(const struct aws_files *f, const char *name, struct objfs_creds *out,
			   char *err, size_t errlen)
{
	const char *cmd = pget(f, name, "credential_process");

	return cmd ? objfs_creds_from_process(cmd, out, err, errlen) : 1;
}

/* The environment's keys. 0, 1 when unset, -EINVAL when half set. */
static int env_keys(struct objfs_creds *out, char *err, size_t errlen)
{
	const char *ak = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");

	if (ak && !*ak)
		ak = NULL;
	if (sk && !*sk)
		sk = NULL;
	if (!ak && !sk)
		return 1;
	if (!ak || !sk) {
		snprintf(err, errlen, "%s is set but %s is not", ak ? "AWS_ACCESS_KEY_ID" :
			 "AWS_SECRET_ACCESS_KEY", ak ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
		return -EINVAL;
	}
	objfs_info("credentials: environment");
	return objfs_creds_set(out, ak, sk, getenv("AWS_SESSION_TOKEN"), 0, "environment");
}

static int from_imds(struct objfs_creds *out);

/* The region STS calls go to: AWS_REGION, AWS_DEFAULT_REGION, then the profile's. */
static const char *sts_region(const struct aws_files *f, const char *name)
{
	const char *r = getenv("AWS_REGION");

	if (!r || !*r)
		r = getenv("AWS_DEFAULT_REGION");
	return r && *r ? r : f ? pget(f, name, "region") : NULL;
}

#define ROLE_DEPTH_MAX 5

/*
 * role_arn of profile @name: AssumeRoleWithWebIdentity with its
 * web_identity_token_file, else AssumeRole signed with the credentials of
 * its source_profile (that profile's own role, keys or process; its own
 * keys when it names itself) or of its credential_source. 0, 1 when the
 * profile has no role_arn, -errno.
 */
static int profile_role(const struct aws_files *f, const char *name, int depth,
			struct objfs_creds *out, char *err, size_t errlen)
{
	const char *arn = pget(f, name, "role_arn"), *sp, *cs, *wf;
	struct objfs_creds src = { 0 };
	struct objfs_sts_call c = { 0 };
	int rc;

	if (!arn)
		return 1;
	c.role_arn = arn;
	c.session_name = pget(f, name, "role_session_name");
	c.external_id = pget(f, name, "external_id");
	c.region = sts_region(f, name);
	wf = pget(f, name, "web_identity_token_file");
	sp = pget(f, name, "source_profile");
	cs = pget(f, name, "credential_source");
	if (wf) {
		c.token_file = wf;
		return objfs_creds_from_sts(&c, out, err, errlen);
	}
	if (sp) {
		if (depth >= ROLE_DEPTH_MAX) {
			snprintf(err, errlen, "profile '%s': more than %d source_profile steps (a loop?)",
				 name, ROLE_DEPTH_MAX);
			return -ELOOP;
		}
		if (!strcmp(sp, name)) {
			rc = profile_static(f, sp, &src, err, errlen);
		} else {
			rc = profile_role(f, sp, depth + 1, &src, err, errlen);
			if (rc == 1)
				rc = profile_static(f, sp, &src, err, errlen);
			if (rc == 1)
				rc = profile_process(f, sp, &src, err, errlen);
		}
		if (rc == 1)
			snprintf(err, errlen, "profile '%s': its source_profile '%s' has no credentials",
				 name, sp);
	} else if (cs) {
		if (!strcasecmp(cs, "Environment"))
			rc = env_keys(&src, err, errlen);
		else if (!strcasecmp(cs, "Ec2InstanceMetadata"))
			rc = from_imds(&src);
		else if (!strcasecmp(cs, "EcsContainer"))
			rc = objfs_creds_from_container(&src, err, errlen);
		else {
			snprintf(err, errlen, "profile '%s': credential_source must be Environment, "
				 "Ec2InstanceMetadata or EcsContainer, not '%.40s'", name, cs);
			return -EINVAL;
		}
		if (rc == 1)
			snprintf(err, errlen, "profile '%s': credential_source %s gave no credentials",
				 name, cs);
	} else {
		snprintf(err, errlen, "profile '%s' has role_arn but no source_profile, "
			 "credential_source or web_identity_token_file", name);
		return -EINVAL;
	}
	if (rc == 0) {
		c.src = &src;
		rc = objfs_creds_from_sts(&c, out, err, errlen);
	}
	objfs_creds_clear(&src);
	return rc == 1 ? -ENOENT : rc;
}

/* AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (EKS IRSA). 0, 1 when unset, -errno. */
static int env_web_identity(const struct aws_files *f, struct objfs_creds *out, char *err,
			    size_t errlen)
{
	const char *tf = getenv("AWS_WEB_IDENTITY_TOKEN_FILE"), *arn = getenv("AWS_ROLE_ARN");
	struct objfs_sts_call c = { 0 };

	if (!tf || !*tf)
		return 1;
	if (!arn || !*arn) {
		snprintf(err, errlen, "AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not");
		return -EINVAL;
	}
	c.role_arn = arn;
	c.token_file = tf;
	c.session_name = getenv("AWS_ROLE_SESSION_NAME");
	c.region = sts_region(f, f->name);
	return objfs_creds_from_sts(&c, out, err, errlen);
}

/* ---- instance metadata (IMDSv2) ---- */

static void wipe_free(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}


/* One IMDS request, tried twice; the body in *body (caller wipes, frees). */
static int imds_call(const char *url, int put, const char *hdr, char **body)
{
	const char *h[] = { hdr, NULL };
	long status = 0;
	int rc = -EHOSTUNREACH;

	for (int attempt = 0; attempt < 2 && rc == -EHOSTUNREACH; attempt++)
		rc = objfs_creds_http(put ? "PUT" : "GET", url, h, NULL, 2000, 0, body, &status);
	if (!rc && status != 200) {
		wipe_free(*body);
		*body = NULL;
		rc = -EACCES;
	}
	return rc;
}

static int from_imds(struct objfs_creds *out)
{
	const char *dis = getenv("AWS_EC2_METADATA_DISABLED");
	const char *ep = getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT");
	char url[1024], hdr[1024], *token = NULL, *role = NULL, *doc = NULL;
	size_t rl;
	int rc;

	if (dis && strcasecmp(dis, "true") == 0)
		return 1;
	if (!ep || !*ep)
		ep = "http://169.254.169.254";
	rl = strlen(ep);
	while (rl && ep[rl - 1] == '/')
		rl--;
	snprintf(url, sizeof(url), "%.*s/latest/api/token", (int)rl, ep);
	rc = imds_call(url, 1, "X-aws-ec2-metadata-token-ttl-seconds: 21600", &token);
	if (rc)
		return 1;
	token[strcspn(token, "\r\n")] = '\0';
	snprintf(hdr, sizeof(hdr), "X-aws-ec2-metadata-token: %s", token);
	snprintf(url, sizeof(url), "%.*s/latest/meta-data/iam/security-credentials/", (int)rl, ep);
	rc = imds_call(url, 0, hdr, &role);
	if (rc)
		goto out;
	role[strcspn(role, "\r\n")] = '\0';
	if (!*role || strchr(role, '/')) {
		rc = -EPROTO;
		goto out;
	}
	snprintf(url, sizeof(url), "%.*s/latest/meta-data/iam/security-credentials/%s", (int)rl,
		 ep, role);
	rc = imds_call(url, 0, hdr, &doc);
	if (rc)
		goto out;
	{
		char perr[256];

		rc = objfs_creds_parse_json(doc, strlen(doc), 0, "instance metadata", out, perr,
					    sizeof(perr));
		if (rc)
			objfs_info("%s", perr);
	}
	if (!rc)
		objfs_info("credentials: instance metadata role '%s'", role);
out:
	if (rc < 0)
		objfs_info("instance metadata: %s", rc == -EPROTO ? "malformed answer" :
			   strerror(-rc));
	wipe_free(token);
	wipe_free(doc);
	free(role);
	explicit_bzero(hdr, sizeof(hdr));
	return rc < 0 ? 1 : rc;
}

int objfs_creds_resolve(const char *profile, struct objfs_creds *out, char *err, size_t errlen)
{
	int named = profile && *profile;
	struct aws_files f;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!named && (rc = env_keys(out, err, errlen)) <= 0)
		return rc;
	rc = aws_files_load(profile, &f);
	if (rc) {
		if (f.cfg)
			snprintf(err, errlen, "cannot read AWS credentials (%s, %s): %s", f.crd,
				 f.cfg, strerror(-rc));
		goto out;
	}
	if (profile_missing(&f, profile)) {
		snprintf(err, errlen, "profile '%s' not found in %s or %s", f.name, f.crd, f.cfg);
		rc = -ENOENT;
		goto out;
	}
	/* The SDKs' order (botocore's): a profile's role, web identity, keys, process. */
	rc = profile_role(&f, f.name, 0, out, err, errlen);
	if (rc == 1)
		rc = env_web_identity(&f, out, err, errlen);
	if (rc == 1)
		rc = profile_static(&f, f.name, out, err, errlen);
	if (rc == 1)
		rc = profile_process(&f, f.name, out, err, errlen);
	if (rc == 1)
		rc = objfs_creds_from_container(out, err, errlen);
	if (rc == 1)
		rc = from_imds(out);
	if (rc == 1) {
		snprintf(err, errlen, "no AWS credentials found: set AWS_ACCESS_KEY_ID and "
			 "AWS_SECRET_ACCESS_KEY, add profile '%s' to %s, run on an instance "
			 "or in a container with a role, or use -o no_sign for a public bucket",
			 f.name, f.crd);
		rc = -ENOENT;
	}
out:
	aws_files_clear(&f);
	return rc;
}

/* ---- provider ---- */

#define REFRESH_BEFORE_S   300 /* ask again five minutes before expiry */
#define FILE_CHECK_EVERY_S 5   /* static keys from files: look for a change this often */
#define FAIL_LOG_EVERY_S   60  /* a failing refresh is logged at most this often */
#define RETRY_AFTER_S      10  /* a failed refresh is not tried again sooner */
/* A store's refusal (objfs_creds_reject) resolves again at most once a
 * REJECT_GAP_NS, a gap that doubles while refusals follow one another
 * (a source whose every answer is refused: STS tokens S3 does not take)
 * up to REJECT_GAP_MAX_NS and falls back to the first once one pair is
 * further apart; for the key id refused last, never sooner than
 * REJECT_SAME_NS (a source handing out the same refused key again). */
#define REJECT_GAP_NS      1000000000LL
#define REJECT_GAP_MAX_NS  (300 * 1000000000LL)
#define REJECT_SAME_NS     (10 * 1000000000LL)

/* The identity of a file as stat sees it; all zero when it does not exist. */
struct file_id {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
};

/* Credentials shared by their holders (objfs_creds_hold). */
struct creds_snap {
	unsigned refs;            /* atomic: holders, and the provider while current */
	struct objfs_creds c;
};

static void snap_drop(struct creds_snap *sn)
{
	if (sn && __atomic_sub_fetch(&sn->refs, 1, __ATOMIC_ACQ_REL) == 0) {
		objfs_creds_clear(&sn->c);
		free(sn);
	}
}

struct objfs_creds_provider {
	pthread_mutex_t lock;
	struct creds_snap *snap;  /* lock: p->cur shared, made at the first hold after a change */
	pthread_cond_t refreshed;  /* a refresh ended */
	int refreshing;           /* a thread resolves, outside the lock */
	char *profile;
	int anonymous;
	struct objfs_creds cur;   /* guarded by lock */
	struct file_id files[2];  /* the credentials and config files at resolution */
	int64_t checked, failed_log; /* unix times: last file check, last failure logged */
	int64_t retry_at;         /* after a failed refresh, not before this */
	int rejected;             /* the store refused p->cur: resolve before the next use */
	int64_t rejected_ns;      /* monotonic time of the last refusal taken, 0 none */
	int64_t reject_gap_ns;    /* the least time from it to the next one taken */
	char rejected_key[128];   /* its access key id */
};

static void file_ids(struct file_id id[2])
{
	char *path[2] = { aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials"),
			  aws_file("AWS_CONFIG_FILE", "config") };

	for (int i = 0; i < 2; i++) {
		struct stat st;

		memset(&id[i], 0, sizeof(id[i]));
		if (path[i] && stat(path[i], &st) == 0)
			id[i] = (struct file_id){ st.st_dev, st.st_ino, st.st_size, st.st_mtim };
		free(path[i]);
	}
}

static int from_a_file(const struct objfs_creds *c)
{
	return c->source && (!strcmp(c->source, "shared credentials file") ||
			     !strcmp(c->source, "config file"));
}

/* Keys the user gave (environment, a file): none a source could refresh. */
static int user_given(const struct objfs_creds *c)
{
	return from_a_file(c) || (c->source && !strcmp(c->source, "environment"));
}

int objfs_creds_provider_new(const char *profile, int no_sign, struct objfs_creds_provider **out,
			     char *err, size_t errlen)
{
	struct objfs_creds_provider *p = calloc(1, sizeof(*p));
	int rc = 0;

	if (!p)
		return -ENOMEM;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->refreshed, NULL);
	p->anonymous = no_sign;
	if (profile && !(p->profile = strdup(profile)))
		rc = -ENOMEM;
	if (!rc && !no_sign) {
		file_ids(p->files);
		rc = objfs_creds_resolve(profile, &p->cur, err, errlen);
	}
	p->checked = (int64_t)time(NULL);
	if (rc) {
		objfs_creds_provider_free(p);
		return rc;
	}
	*out = p;
	return 0;
}

void objfs_creds_provider_free(struct objfs_creds_provider *p)
{
	if (!p)
		return;
	snap_drop(p->snap);
	objfs_creds_clear(&p->cur);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->refreshed);
	free(p->profile);
	free(p);
}

/*
 * Whether p->cur should be resolved again: it expires within five minutes,
 * or it came from a file that changed since (checked every few seconds).
 * Called with p->lock held.
 */
static int stale(struct objfs_creds_provider *p, int64_t now)
{
	struct file_id id[2];

	if (now < p->retry_at)
		return 0;
	if (p->rejected)
		return 1;
	if (p->cur.expires)
		return now > p->cur.expires - REFRESH_BEFORE_S;
	if (!from_a_file(&p->cur) || now - p->checked < FILE_CHECK_EVERY_S)
		return 0;
	p->checked = now;
	file_ids(id);
	return memcmp(id, p->files, sizeof(id)) != 0;
}

/*
 * Resolves p->cur again, the lock dropped meanwhile (a remote source can
 * take seconds, a credential_process up to a minute: signers must not
 * wait behind it while what they hold is valid), then takes the answer
 * or keeps the current ones. Called with p->lock held and p->refreshing
 * set by the caller; -EACCES when the current ones expired and could not
 * be refreshed.
 */
static int refresh_locked(struct objfs_creds_provider *p)
{
	struct objfs_creds fresh;
	struct file_id id[2];
	char err[512] = "";
	int64_t now;
	int ok, rc = 0;

	pthread_mutex_unlock(&p->lock);
	file_ids(id);
	ok = objfs_creds_resolve(p->profile, &fresh, err, sizeof(err)) == 0;
	pthread_mutex_lock(&p->lock);
	now = (int64_t)time(NULL); /* after the resolve: it may have taken a while */
	p->rejected = 0; /* resolved again, whatever came of it */
	if (ok) {
		snap_drop(p->snap); /* its holders keep it */
		p->snap = NULL;
		objfs_creds_clear(&p->cur);
		p->cur = fresh;
		memcpy(p->files, id, sizeof(id));
		p->failed_log = p->retry_at = 0;
		/* already within the refresh window (a helper caching to the
		 * end): not asked again on every request */
		if (p->cur.expires && now > p->cur.expires - REFRESH_BEFORE_S)
			p->retry_at = now + RETRY_AFTER_S;
	} else if (p->cur.expires && now >= p->cur.expires) {
		objfs_warn("credentials from %s expired and could not be refreshed: %s",
			   p->cur.source, err);
		p->retry_at = now + RETRY_AFTER_S;
		rc = -EACCES;
	} else {
		p->retry_at = now + RETRY_AFTER_S;
		if (!p->cur.expires) /* a file changed into something unusable: its next change */
			memcpy(p->files, id, sizeof(id));
	}
	if (!ok && !rc && now - p->failed_log >= FAIL_LOG_EVERY_S) {
		p->failed_log = now;
		objfs_warn("credentials: refreshing those from %s failed: %s; the current ones "
			   "are used %s", p->cur.source, err,
			   p->cur.expires ? "until they expire" : "until the file is fixed");
	}
	return rc;
}

/* Refreshes p->cur if it is stale (one thread; the others use what is
 * valid meanwhile). p->lock held. 0, or -EACCES once they expired. */
static int current_locked(struct objfs_creds_provider *p)
{
	int64_t now = (int64_t)time(NULL);
	int rc = 0;

	while (stale(p, now)) {
		if (!p->refreshing) {
			p->refreshing = 1;
			rc = refresh_locked(p);
			p->refreshing = 0;
			pthread_cond_broadcast(&p->refreshed);
			break;
		}
		/* another thread refreshes: what we hold serves while valid
		 * (refused ones do not: wait for the new ones) */
		if (!p->rejected && (!p->cur.expires || now < p->cur.expires))
			break;
		pthread_cond_wait(&p->refreshed, &p->lock);
		now = (int64_t)time(NULL);
	}
	now = (int64_t)time(NULL);
	if (!rc && p->cur.expires && now >= p->cur.expires)
		rc = -EACCES; /* expired, and the last refresh failed moments ago */
	return rc;
}

int objfs_creds_get(struct objfs_creds_provider *p, struct objfs_creds *out)
{
	int rc;

	memset(out, 0, sizeof(*out));
	if (p->anonymous)
		return -ENOKEY;
	pthread_mutex_lock(&p->lock);
	rc = current_locked(p);
	if (!rc)
		rc = objfs_creds_set(out, p->cur.access_key, p->cur.secret_key,
				     p->cur.session_token, p->cur.expires, p->cur.source);
	pthread_mutex_unlock(&p->lock);
	return rc;
}

int objfs_creds_reject(struct objfs_creds_provider *p, const char *access_key)
{
	int64_t now = objfs_now_ns(), gap;
	int taken = 0;

	if (!p || p->anonymous || !access_key)
		return 0;
	pthread_mutex_lock(&p->lock);
	gap = p->reject_gap_ns;
	if (!strcmp(p->rejected_key, access_key) && gap < REJECT_SAME_NS)
		gap = REJECT_SAME_NS;
	if (p->cur.access_key && strcmp(p->cur.access_key, access_key) == 0 && !p->rejected &&
	    (!p->rejected_ns || now - p->rejected_ns >= gap)) {
		/* refused again soon after the last: wait longer next time */
		if (p->rejected_ns && now - p->rejected_ns < 2 * gap)
			p->reject_gap_ns = p->reject_gap_ns * 2 < REJECT_GAP_MAX_NS ?
					   p->reject_gap_ns * 2 : REJECT_GAP_MAX_NS;
		else
			p->reject_gap_ns = REJECT_GAP_NS;
		p->rejected = 1;
		p->rejected_ns = now;
		p->retry_at = 0;
		snprintf(p->rejected_key, sizeof(p->rejected_key), "%s", access_key);
		taken = 1;
		if (user_given(&p->cur)) /* nothing to refresh: read again all the same */
			objfs_warn("the access key from %s was refused by the store (unknown to "
				   "it, or its session token ended): check %s", p->cur.source,
				   from_a_file(&p->cur) ? "the file (read again when it changes)" :
				   "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN");
		else
			objfs_warn("credentials from %s were refused by the store as expired or "
				   "unknown: resolving them again (next refusal taken after %.0f s "
				   "at the earliest)", p->cur.source,
				   (double)p->reject_gap_ns / 1e9);
	}
	pthread_mutex_unlock(&p->lock);
	return taken;
}

int objfs_creds_has_token(struct objfs_creds_provider *p)
{
	int yes;

	if (!p || p->anonymous)
		return 0;
	pthread_mutex_lock(&p->lock);
	yes = p->cur.session_token != NULL;
	pthread_mutex_unlock(&p->lock);
	return yes;
}

const struct objfs_creds *objfs_creds_hold(struct objfs_creds_provider *p, int *err)
{
	struct creds_snap *sn = NULL;
	int rc;

	if (p->anonymous) {
		*err = -ENOKEY;
		return NULL;
	}
	pthread_mutex_lock(&p->lock);
	rc = current_locked(p);
	if (!rc && !p->snap) {
		if (!(p->snap = calloc(1, sizeof(*p->snap)))) {
			rc = -ENOMEM;
		} else if ((rc = objfs_creds_set(&p->snap->c, p->cur.access_key, p->cur.secret_key,
						 p->cur.session_token, p->cur.expires,
						 p->cur.source))) {
			free(p->snap);
			p->snap = NULL;
		} else {
			p->snap->refs = 1; /* the provider's */
		}
	}
	if (!rc) {
		sn = p->snap;
		__atomic_add_fetch(&sn->refs, 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&p->lock);
	*err = rc;
	return sn ? &sn->c : NULL;
}

void objfs_creds_drop(const struct objfs_creds *c)
{
	if (c)
		snap_drop((struct creds_snap *)(void *)((char *)(uintptr_t)c -
							offsetof(struct creds_snap, c)));
}
