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
#include <curl/curl.h>
#include <errno.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "creds.h"
#include "log.h"
#include "secret.h"

#define INI_LINE_MAX (64u << 10)
#define FILE_MAX (1u << 20)
#define IMDS_BODY_MAX (64u << 10)

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

static int set_creds(struct objfs_creds *c, const char *ak, const char *sk, const char *tok,
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

/* Credentials of profile @name from the shared files. 0, 1 when absent. */
static int from_files(const char *profile, struct objfs_creds *out, char *err, size_t errlen)
{
	struct aws_files f;
	const char *ak, *sk, *tok, *where = NULL;
	struct stat st;
	int rc = aws_files_load(profile, &f);

	if (rc) {
		if (f.cfg)
			snprintf(err, errlen, "cannot read AWS credentials (%s, %s): %s", f.crd,
				 f.cfg, strerror(-rc));
		goto out;
	}
	ak = objfs_ini_get(f.cr, f.name, "aws_access_key_id");
	sk = objfs_ini_get(f.cr, f.name, "aws_secret_access_key");
	tok = objfs_ini_get(f.cr, f.name, "aws_session_token");
	if (ak || sk) {
		where = f.crd;
	} else {
		ak = objfs_ini_get(f.ci, f.sec, "aws_access_key_id");
		sk = objfs_ini_get(f.ci, f.sec, "aws_secret_access_key");
		tok = objfs_ini_get(f.ci, f.sec, "aws_session_token");
		where = f.cfg;
	}
	if (!ak && !sk) {
		if (profile_missing(&f, profile)) {
			snprintf(err, errlen, "profile '%s' not found in %s or %s", f.name, f.crd,
				 f.cfg);
			rc = -ENOENT;
		} else {
			rc = 1;
		}
		goto out;
	}
	if (!ak || !sk || !*ak || !*sk) {
		snprintf(err, errlen, "profile '%s' in %s has %s but not %s", f.name, where,
			 ak ? "aws_access_key_id" : "aws_secret_access_key",
			 ak ? "aws_secret_access_key" : "aws_access_key_id");
		rc = -EINVAL;
		goto out;
	}
	/* the config file is loaded as not secret; this profile keeps its key there */
	if (where == f.cfg && stat(f.cfg, &st) == 0)
		warn_shared(f.cfg, st.st_mode);
	rc = set_creds(out, ak, sk, tok, 0, where == f.crd ? "shared credentials file" :
					   "config file");
	if (!rc)
		objfs_info("credentials: profile '%s' from %s", f.name, where);
out:
	aws_files_clear(&f);
	return rc;
}

/* ---- instance metadata (IMDSv2) ---- */

struct membuf {
	char *p;
	size_t n;
};

static size_t mem_write(char *p, size_t sz, size_t nm, void *ud)
{
	struct membuf *m = ud;
	size_t n = sz * nm;
	char *np;

	if (m->n + n > IMDS_BODY_MAX)
		return 0;
	np = realloc(m->p, m->n + n + 1);
	if (!np)
		return 0;
	memcpy(np + m->n, p, n);
	m->p = np;
	m->n += n;
	m->p[m->n] = '\0';
	return n;
}

/* One IMDS request; the body is returned in *body (caller wipes, frees). */
static int imds_call(const char *url, int put, const char *hdr, char **body)
{
	struct membuf m = { 0 };
	struct curl_slist *h = NULL;
	long status = 0;
	CURLcode rc = CURLE_FAILED_INIT;
	CURL *c;

	for (int attempt = 0; attempt < 2 && rc != CURLE_OK; attempt++) {
		c = curl_easy_init();
		if (!c)
			return -ENOMEM;
		free(m.p);
		m.p = NULL;
		m.n = 0;
		h = curl_slist_append(NULL, hdr);
		curl_easy_setopt(c, CURLOPT_URL, url);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
		curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
		curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 2000L);
		curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
		curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, mem_write);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, &m);
		if (put)
			curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "PUT");
		rc = curl_easy_perform(c);
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
		curl_easy_cleanup(c);
		curl_slist_free_all(h);
		if (rc == CURLE_OK && status != 200)
			break;
	}
	if (rc != CURLE_OK || status != 200 || !m.p) {
		if (m.p) {
			explicit_bzero(m.p, m.n);
			free(m.p);
		}
		return rc != CURLE_OK ? -EHOSTUNREACH : -EACCES;
	}
	*body = m.p;
	return 0;
}

static void wipe_free(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

static int64_t iso8601(const char *s)
{
	struct tm tm = { 0 };
	const char *end = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;

	return end ? (int64_t)timegm(&tm) : 0;
}

static int from_imds(struct objfs_creds *out)
{
	const char *dis = getenv("AWS_EC2_METADATA_DISABLED");
	const char *ep = getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT");
	char url[1024], hdr[1024], *token = NULL, *role = NULL, *doc = NULL;
	struct json_object *j = NULL, *ak, *sk, *tk, *ex;
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
	j = json_tokener_parse(doc);
	if (!j || !json_object_object_get_ex(j, "AccessKeyId", &ak) ||
	    !json_object_object_get_ex(j, "SecretAccessKey", &sk) ||
	    !json_object_is_type(ak, json_type_string) || !json_object_is_type(sk, json_type_string)) {
		rc = -EPROTO;
		goto out;
	}
	if (!json_object_object_get_ex(j, "Token", &tk) || !json_object_is_type(tk, json_type_string))
		tk = NULL;
	if (!json_object_object_get_ex(j, "Expiration", &ex) ||
	    !json_object_is_type(ex, json_type_string))
		ex = NULL;
	rc = set_creds(out, json_object_get_string(ak), json_object_get_string(sk),
		       tk ? json_object_get_string(tk) : NULL,
		       ex ? iso8601(json_object_get_string(ex)) : 0, "instance metadata");
	if (!rc)
		objfs_info("credentials: instance metadata role '%s'", role);
out:
	if (rc < 0)
		objfs_info("instance metadata: %s", rc == -EPROTO ? "malformed answer" :
			   strerror(-rc));
	json_object_put(j);
	wipe_free(token);
	wipe_free(doc);
	free(role);
	explicit_bzero(hdr, sizeof(hdr));
	return rc < 0 ? 1 : rc;
}

int objfs_creds_resolve(const char *profile, struct objfs_creds *out, char *err, size_t errlen)
{
	const char *ak = getenv("AWS_ACCESS_KEY_ID"), *sk = getenv("AWS_SECRET_ACCESS_KEY");
	int rc;

	memset(out, 0, sizeof(*out));
	if (ak && !*ak)
		ak = NULL;
	if (sk && !*sk)
		sk = NULL;
	if (ak && sk && !(profile && *profile)) {
		objfs_info("credentials: environment");
		return set_creds(out, ak, sk, getenv("AWS_SESSION_TOKEN"), 0, "environment");
	}
	if ((ak || sk) && !(profile && *profile)) {
		snprintf(err, errlen, "%s is set but %s is not", ak ? "AWS_ACCESS_KEY_ID" :
			 "AWS_SECRET_ACCESS_KEY", ak ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
		return -EINVAL;
	}
	rc = from_files(profile, out, err, errlen);
	if (rc <= 0)
		return rc;
	if (from_imds(out) == 0)
		return 0;
	{
		/* name the file actually looked at (AWS_SHARED_CREDENTIALS_FILE) */
		char *crd = aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials");

		snprintf(err, errlen, "no AWS credentials found: set AWS_ACCESS_KEY_ID and "
			 "AWS_SECRET_ACCESS_KEY, add profile '%s' to %s, run on an instance "
			 "with a role, or use -o no_sign for a public bucket",
			 profile_name(profile), crd ? crd : "~/.aws/credentials");
		free(crd);
	}
	return -ENOENT;
}

/* ---- provider ---- */

struct objfs_creds_provider {
	pthread_mutex_t lock;
	char *profile;
	int anonymous;
	struct objfs_creds cur; /* guarded by lock */
};

int objfs_creds_provider_new(const char *profile, int no_sign, struct objfs_creds_provider **out,
			     char *err, size_t errlen)
{
	struct objfs_creds_provider *p = calloc(1, sizeof(*p));
	int rc = 0;

	if (!p)
		return -ENOMEM;
	pthread_mutex_init(&p->lock, NULL);
	p->anonymous = no_sign;
	if (profile && !(p->profile = strdup(profile)))
		rc = -ENOMEM;
	if (!rc && !no_sign)
		rc = objfs_creds_resolve(profile, &p->cur, err, errlen);
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
	objfs_creds_clear(&p->cur);
	pthread_mutex_destroy(&p->lock);
	free(p->profile);
	free(p);
}

int objfs_creds_get(struct objfs_creds_provider *p, struct objfs_creds *out)
{
	int64_t now = (int64_t)time(NULL);
	int rc = 0;

	memset(out, 0, sizeof(*out));
	if (p->anonymous)
		return -ENOKEY;
	pthread_mutex_lock(&p->lock);
	if (p->cur.expires && now > p->cur.expires - 300) {
		struct objfs_creds fresh;
		char err[512] = "";

		if (objfs_creds_resolve(p->profile, &fresh, err, sizeof(err)) == 0) {
			objfs_creds_clear(&p->cur);
			p->cur = fresh;
		} else if (now >= p->cur.expires) {
			objfs_warn("credentials expired and could not be refreshed: %s", err);
			rc = -EACCES;
		}
	}
	if (!rc)
		rc = set_creds(out, p->cur.access_key, p->cur.secret_key, p->cur.session_token,
			       p->cur.expires, p->cur.source);
	pthread_mutex_unlock(&p->lock);
	return rc;
}
