/*
 * creds_remote: the credential sources that are not files (creds.c has the
 * files, the profiles and the order): STS (AssumeRole, signed with source
 * credentials; AssumeRoleWithWebIdentity, with a token file read again on
 * every call, as EKS rotates it), container endpoints (ECS task roles, EKS
 * Pod Identity) and credential_process programs (SSO helpers, vaults).
 *
 * Each answers with temporary credentials and an expiry; the provider
 * (creds.c) asks again five minutes before it. Everything they return is
 * untrusted: bodies are bounded (OBJFS_CREDS_BODY_MAX), parsed strictly
 * (a malformed Expiration is an error, not "never expires", which would
 * keep dead keys forever), and failures name the source and the reason,
 * never a value. A program's stderr goes to the log because that is where
 * its own explanation is, at most STDERR_LOG_MAX bytes a run (the rest is
 * read, so the program never blocks on a full pipe, and counted in one
 * line); its stdout, which holds the secret, never does.
 */
#include "config.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "creds_i.h"
#include "log.h"
#include "secret.h"
#include "sigv4.h"
#include "url.h"

#define PROCESS_TIMEOUT_MS 60000
#define STS_TIMEOUT_MS     10000
#define CONTAINER_TIMEOUT_MS 5000
#define NENT 5 /* XML entities decoded */

static void wipe_free(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

int64_t objfs_creds_time(const char *s)
{
	struct tm tm = { 0 };
	const char *end = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
	int64_t t;

	if (!end)
		return -1;
	t = (int64_t)timegm(&tm);
	if (*end == '.') /* fraction of a second */
		while (*++end >= '0' && *end <= '9')
			;
	if (*end == 'Z' || *end == 'z')
		end++;
	else if ((*end == '+' || *end == '-') && isdigit((unsigned char)end[1]) &&
		 isdigit((unsigned char)end[2])) {
		int colon = end[3] == ':'; /* "+HH:MM", or "+HHMM" as date +%z prints */
		const char *m = end + 3 + colon;

		if (!isdigit((unsigned char)m[0]) || !isdigit((unsigned char)m[1]))
			return -1;
		t += (*end == '+' ? -1 : 1) * (((end[1] - '0') * 10 + end[2] - '0') * 3600 +
					      ((m[0] - '0') * 10 + m[1] - '0') * 60);
		end = m + 2;
	}
	return *end ? -1 : t;
}

/* ---- HTTP ---- */

struct membuf {
	char *p;
	size_t n;
	int over;
};

static size_t mem_write(char *p, size_t sz, size_t nm, void *ud)
{
	struct membuf *m = ud;
	size_t n = sz * nm;
	char *np;

	if (m->n + n > OBJFS_CREDS_BODY_MAX) {
		m->over = 1;
		return 0;
	}
	np = realloc(m->p, m->n + n + 1);
	if (!np)
		return 0;
	memcpy(np + m->n, p, n);
	m->p = np;
	m->n += n;
	m->p[m->n] = '\0';
	return n;
}

int objfs_creds_http(const char *method, const char *url, const char *const *hdrs,
		     const char *body, long timeout_ms, int remote, char **out, long *status)
{
	const char *ca = getenv("AWS_CA_BUNDLE");
	long connect_ms = remote ? 3000 : 1000;
	struct membuf m = { 0 };
	struct curl_slist *h = NULL, *t;
	CURLcode rc;
	CURL *c = curl_easy_init();

	*out = NULL;
	*status = 0;
	if (!c)
		return -ENOMEM;
	for (; hdrs && *hdrs; hdrs++) {
		t = curl_slist_append(h, *hdrs);
		if (!t) {
			curl_slist_free_all(h);
			curl_easy_cleanup(c);
			return -ENOMEM;
		}
		h = t;
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < connect_ms ? timeout_ms : connect_ms);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
	if (!remote)
		curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
	else if (ca && *ca)
		curl_easy_setopt(c, CURLOPT_CAINFO, ca);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, mem_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &m);
	if (body)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	if (strcmp(method, "GET") && strcmp(method, "POST"))
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	rc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
	curl_easy_cleanup(c);
	curl_slist_free_all(h);
	if (rc != CURLE_OK || !m.p) {
		if (m.p) {
			explicit_bzero(m.p, m.n);
			free(m.p);
		}
		if (rc == CURLE_OK) /* an empty body */
			return (*out = strdup("")) ? 0 : -ENOMEM;
		return m.over ? -EMSGSIZE : -EHOSTUNREACH;
	}
	*out = m.p;
	return 0;
}

/* ---- JSON documents ---- */

static const char *jstr(struct json_object *j, const char *key)
{
	struct json_object *v;

	if (!json_object_object_get_ex(j, key, &v) || !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

int objfs_creds_parse_json(const char *doc, size_t len, int process, const char *source,
			   struct objfs_creds *out, char *err, size_t errlen)
{
	struct json_tokener *tk = json_tokener_new();
	struct json_object *j = NULL, *ver, *exo;
	const char *ak, *sk, *tok, *ex;
	int64_t expires = 0;
	int rc = -EPROTO;

	memset(out, 0, sizeof(*out));
	if (!tk)
		return -ENOMEM;
	if (len <= OBJFS_CREDS_BODY_MAX && len <= (size_t)INT32_MAX)
		j = json_tokener_parse_ex(tk, doc, (int)len);
	if (j) /* one object and nothing after it but white space */
		for (size_t i = json_tokener_get_parse_end(tk); i < len; i++)
			if (!strchr(" \t\r\n", doc[i]) || !doc[i]) {
				json_object_put(j);
				j = NULL;
				break;
			}
	if (!j || json_tokener_get_error(tk) != json_tokener_success ||
	    !json_object_is_type(j, json_type_object)) {
		snprintf(err, errlen, "%s: the answer is not a JSON object", source);
		goto out;
	}
	if (process && (!json_object_object_get_ex(j, "Version", &ver) ||
			!json_object_is_type(ver, json_type_int) || json_object_get_int(ver) != 1)) {
		snprintf(err, errlen, "%s: expected \"Version\": 1 in its output", source);
		goto out;
	}
	ak = jstr(j, "AccessKeyId");
	sk = jstr(j, "SecretAccessKey");
	tok = jstr(j, process ? "SessionToken" : "Token");
	if (!tok)
		tok = jstr(j, process ? "Token" : "SessionToken");
	ex = jstr(j, "Expiration");
	if (!ak || !sk || !*ak || !*sk) {
		const char *code = jstr(j, "Code"), *msg = jstr(j, "Message");

		snprintf(err, errlen, "%s: no AccessKeyId and SecretAccessKey in the answer%s%.80s%s%.200s",
			 source, code ? " (" : "", code ? code : "", code && msg ? ": " : "",
			 code && msg ? msg : "");
		if (code)
			strncat(err, ")", errlen - strlen(err) - 1);
		goto out;
	}
	if (json_object_object_get_ex(j, "Expiration", &exo) && !ex) {
		/* a number or null must not mean "never expires" (a review) */
		snprintf(err, errlen, "%s: Expiration is not a date string", source);
		goto out;
	}
	if (!process && !ex) { /* the instance's and container's roles rotate */
		snprintf(err, errlen, "%s: no Expiration in the answer", source);
		goto out;
	}
	if (ex && (expires = objfs_creds_time(ex)) < 0) {
		snprintf(err, errlen, "%s: malformed Expiration '%.40s'", source, ex);
		goto out;
	}
	if (ex && !expires)
		expires = 1; /* the epoch itself: expired, not "never" (0) */
	rc = objfs_creds_set(out, ak, sk, tok, expires, source);
out:
	json_object_put(j);
	json_tokener_free(tk);
	return rc;
}

/* ---- STS ---- */

/*
 * The text of the first <tag>...</tag> in [p, end), entities decoded, as a
 * new secret string; NULL when absent (or ENOMEM). STS answers are flat
 * and machine-made: no CDATA, no attributes on these elements.
 */
static char *xml_text(const char *p, const char *end, const char *tag)
{
	char open[48], close[48];
	const char *a, *b;
	size_t lo = (size_t)snprintf(open, sizeof(open), "<%s>", tag);
	char *v, *w;

	snprintf(close, sizeof(close), "</%s>", tag);
	a = memmem(p, (size_t)(end - p), open, lo);
	if (!a)
		return NULL;
	a += lo;
	b = memmem(a, (size_t)(end - a), close, strlen(close));
	if (!b)
		return NULL;
	v = objfs_secret_alloc((size_t)(b - a) + 1);
	if (!v)
		return NULL;
	for (w = v; a < b; a++) {
		static const struct { const char *e; char c; } ent[] = {
			{ "&amp;", '&' }, { "&lt;", '<' }, { "&gt;", '>' },
			{ "&quot;", '"' }, { "&apos;", '\'' },
		};
		size_t k = NENT;

		if (*a == '&')
			for (k = 0; k < NENT; k++)
				if ((size_t)(b - a) >= strlen(ent[k].e) &&
				    !memcmp(a, ent[k].e, strlen(ent[k].e)))
					break;
		if (k < NENT) {
			*w++ = ent[k].c;
			a += strlen(ent[k].e) - 1;
		} else {
			*w++ = *a;
		}
	}
	*w = '\0';
	return v;
}

int objfs_creds_parse_sts(const char *doc, size_t len, const char *source,
			  struct objfs_creds *out, char *err, size_t errlen)
{
	const char *end = doc + len, *cr;
	char *ak = NULL, *sk = NULL, *tok = NULL, *ex = NULL;
	int64_t expires = 0;
	int rc = -EPROTO;

	memset(out, 0, sizeof(*out));
	cr = memmem(doc, len, "<Credentials>", 13);
	if (!cr) {
		char *code = xml_text(doc, end, "Code"), *msg = xml_text(doc, end, "Message");

		if (code) {
			snprintf(err, errlen, "%s: %.80s%s%.300s", source, code, msg ? ": " : "",
				 msg ? msg : "");
			rc = -EACCES;
		} else {
			snprintf(err, errlen, "%s: no Credentials in the answer", source);
		}
		objfs_secret_free(code);
		objfs_secret_free(msg);
		return rc;
	}
	ak = xml_text(cr, end, "AccessKeyId");
	sk = xml_text(cr, end, "SecretAccessKey");
	tok = xml_text(cr, end, "SessionToken");
	ex = xml_text(cr, end, "Expiration");
	if (!ak || !sk || !tok || !*ak || !*sk || !*tok)
		snprintf(err, errlen, "%s: the answer lacks AccessKeyId, SecretAccessKey or SessionToken",
			 source);
	else if (!ex || (expires = objfs_creds_time(ex)) < 0)
		snprintf(err, errlen, "%s: missing or malformed Expiration", source);
	else /* the epoch itself is expired, not "never" (0) */
		rc = objfs_creds_set(out, ak, sk, tok, expires ? expires : 1, source);
	objfs_secret_free(ak);
	objfs_secret_free(sk);
	objfs_secret_free(tok);
	objfs_secret_free(ex);
	return rc;
}

/* Appends "&name=value" (form-encoded) to the secret buffer *@b. */
static int form_add(char **b, const char *name, const char *value)
{
	char *ev = objfs_url_encode(value, strlen(value), 0), *nb;
	size_t n = (*b ? strlen(*b) : 0) + strlen(name) + strlen(ev ? ev : "") + 3;
	int rc = -ENOMEM;

	if (ev && (nb = objfs_secret_alloc(n))) {
		snprintf(nb, n, "%s%s%s=%s", *b ? *b : "", *b ? "&" : "", name, ev);
		objfs_secret_free(*b);
		*b = nb;
		rc = 0;
	}
	wipe_free(ev);
	return rc;
}

/* The token file's contents, trimmed, as a secret string; NULL with @err set. */
static char *read_token_file(const char *path, const char *what, char *err, size_t errlen)
{
	char *v = objfs_secret_alloc(OBJFS_CREDS_BODY_MAX + 1);
	ssize_t n = -1;
	int fd = v ? open(path, O_RDONLY | O_CLOEXEC) : -1, e = v ? 0 : ENOMEM;

	if (fd >= 0) {
		n = read(fd, v, OBJFS_CREDS_BODY_MAX + 1);
		e = errno;
		close(fd);
	} else if (v) {
		e = errno;
	}
	if (n < 0 || n > (ssize_t)OBJFS_CREDS_BODY_MAX) {
		snprintf(err, errlen, "%s: cannot read %s: %s", what, path,
			 n > 0 ? "larger than 64 KiB" : strerror(e));
		objfs_secret_free(v);
		return NULL;
	}
	while (n && (v[n - 1] == '\n' || v[n - 1] == '\r' || v[n - 1] == ' '))
		n--;
	v[n] = '\0';
	if (!n || strpbrk(v, "\r\n")) {
		snprintf(err, errlen, "%s: %s is %s", what, path, n ? "more than one line" : "empty");
		objfs_secret_free(v);
		return NULL;
	}
	return v;
}

/* Signs an AssumeRole POST: fills the three header lines (caller frees). */
static int sts_sign(const struct objfs_sts_call *c, const struct objfs_url *u, const char *body,
		    const char *region, char **hdate, char **htok, char **hauth)
{
	struct objfs_sigv4 *sg = NULL;
	struct objfs_sigv4_creds sc = { c->src->access_key, c->src->secret_key,
					 c->src->session_token };
	char date[17], sha[65], auth[1024], host[300], hhost[320], ddate[40];
	char *dtok = NULL;
	int def = (!strcmp(u->scheme, "https") && u->port == 443) ||
		  (!strcmp(u->scheme, "http") && u->port == 80);
	int rc;

	objfs_sigv4_amz_date(time(NULL), date);
	objfs_sha256_hex(body, strlen(body), sha);
	snprintf(host, sizeof(host), def ? "%s" : "%s:%d", u->host, u->port);
	snprintf(hhost, sizeof(hhost), "host:%s", host);
	snprintf(ddate, sizeof(ddate), "x-amz-date:%s", date);
	if (sc.session_token && asprintf(&dtok, "x-amz-security-token:%s", sc.session_token) < 0)
		return -ENOMEM;
	{
		const char *h[] = { "content-type:application/x-www-form-urlencoded; charset=utf-8",
				    hhost, ddate, dtok, NULL };
		struct objfs_sigv4_req r = {
			.method = "POST", .path = "/", .query = "", .headers = h,
			.payload_hash = sha, .region = region, .service = "sts", .s3 = 0,
		};

		rc = objfs_sigv4_new(&sg);
		if (!rc)
			rc = objfs_sigv4_authorization(sg, &sc, &r, date, auth, sizeof(auth));
		objfs_sigv4_free(sg);
	}
	wipe_free(dtok);
	if (rc)
		return rc;
	if (asprintf(hdate, "X-Amz-Date: %s", date) < 0)
		*hdate = NULL;
	if (sc.session_token && asprintf(htok, "X-Amz-Security-Token: %s", sc.session_token) < 0)
		*htok = NULL;
	if (asprintf(hauth, "Authorization: %s", auth) < 0)
		*hauth = NULL;
	explicit_bzero(auth, sizeof(auth));
	return *hdate && *hauth && (!sc.session_token || *htok) ? 0 : -ENOMEM;
}

int objfs_creds_from_sts(const struct objfs_sts_call *c, struct objfs_creds *out, char *err,
			 size_t errlen)
{
	const char *web = c->token_file ? "AssumeRoleWithWebIdentity" : "AssumeRole";
	const char *source = c->token_file ? "web identity (STS AssumeRoleWithWebIdentity)" :
					     "assumed role (STS AssumeRole)";
	const char *region = c->region && *c->region ? c->region : "us-east-1";
	const char *ep = getenv("AWS_ENDPOINT_URL_STS"), *why = NULL;
	char regional[160], session[64], *body = NULL, *token = NULL, *ans = NULL;
	char *hdate = NULL, *htok = NULL, *hauth = NULL;
	struct objfs_url u = { 0 };
	long status = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!ep || !*ep)
		ep = getenv("AWS_ENDPOINT_URL");
	if (!ep || !*ep) {
		snprintf(regional, sizeof(regional), "https://sts.%s.amazonaws.com%s", region,
			 strncmp(region, "cn-", 3) ? "" : ".cn");
		ep = regional;
	}
	if (objfs_url_parse(ep, &u, &why)) {
		snprintf(err, errlen, "%s: STS endpoint '%.200s': %s", source, ep, why ? why : "bad URL");
		return -EINVAL;
	}
	if (c->session_name && *c->session_name)
		snprintf(session, sizeof(session), "%.63s", c->session_name);
	else
		snprintf(session, sizeof(session), "objfs-%lld", (long long)time(NULL));
	if (c->token_file && !(token = read_token_file(c->token_file, source, err, errlen))) {
		rc = -EACCES;
		goto out;
	}
	rc = form_add(&body, "Action", web);
	if (!rc)
		rc = form_add(&body, "Version", "2011-06-15");
	if (!rc)
		rc = form_add(&body, "RoleArn", c->role_arn);
	if (!rc)
		rc = form_add(&body, "RoleSessionName", session);
	if (!rc && token)
		rc = form_add(&body, "WebIdentityToken", token);
	if (!rc && !token && c->external_id && *c->external_id)
		rc = form_add(&body, "ExternalId", c->external_id);
	if (rc)
		goto out;
	if (!token) {
		if (!c->src || !c->src->access_key) {
			snprintf(err, errlen, "%s: no source credentials to sign with", source);
			rc = -EINVAL;
			goto out;
		}
		rc = sts_sign(c, &u, body, region, &hdate, &htok, &hauth);
		if (rc)
			goto out;
	}
	{
		char url[1200];
		const char *h[] = { "Content-Type: application/x-www-form-urlencoded; charset=utf-8",
				    "Accept: application/xml", hdate, hauth, htok, NULL };

		snprintf(url, sizeof(url), "%s/", u.origin);
		if (!hdate)
			h[2] = NULL;
		rc = objfs_creds_http("POST", url, h, body, STS_TIMEOUT_MS, 1, &ans, &status);
	}
	if (rc) {
		snprintf(err, errlen, "%s: no answer from %s: %s", source, u.origin, strerror(-rc));
		goto out;
	}
	rc = objfs_creds_parse_sts(ans, strlen(ans), source, out, err, errlen);
	if (rc == -EPROTO && status != 200)
		snprintf(err, errlen, "%s: %s answered HTTP %ld", source, u.origin, status);
	if (!rc)
		objfs_info("credentials: %s, role %s, session %s", source, c->role_arn, session);
out:
	objfs_secret_free(token);
	objfs_secret_free(body);
	wipe_free(ans);
	wipe_free(hauth);
	wipe_free(htok);
	free(hdate);
	objfs_url_clear(&u);
	return rc;
}

/* ---- container endpoints ---- */

int objfs_creds_container_uri_ok(const char *uri)
{
	static const char *const ok_hosts[] = {
		"169.254.170.2", "169.254.170.23", "[fd00:ec2::23]", "localhost", "[::1]",
	};
	struct objfs_url u = { 0 };
	int ok = 0;

	if (objfs_url_parse(uri, &u, NULL))
		return 0;
	if (!strcmp(u.scheme, "https")) {
		ok = 1;
	} else {
		for (size_t i = 0; i < sizeof(ok_hosts) / sizeof(ok_hosts[0]); i++)
			ok |= !strcasecmp(u.host, ok_hosts[i]);
		if (!strncmp(u.host, "127.", 4)) { /* 127.0.0.0/8, a dotted quad only */
			unsigned a, b, c, d;
			char tail;

			ok |= sscanf(u.host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4 &&
			      a == 127 && b < 256 && c < 256 && d < 256;
		}
	}
	objfs_url_clear(&u);
	return ok;
}

int objfs_creds_from_container(struct objfs_creds *out, char *err, size_t errlen)
{
	const char *rel = getenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
	const char *full = getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI");
	const char *tfile = getenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
	const char *tenv = getenv("AWS_CONTAINER_AUTHORIZATION_TOKEN");
	const char *src = "container credentials";
	char url[2048], *tok = NULL, *hdr = NULL, *ans = NULL;
	long status = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	if (rel && *rel) {
		snprintf(url, sizeof(url), "http://169.254.170.2%s%s", *rel == '/' ? "" : "/", rel);
	} else if (full && *full) {
		if (!objfs_creds_container_uri_ok(full)) {
			snprintf(err, errlen, "%s: AWS_CONTAINER_CREDENTIALS_FULL_URI must be https, or "
				 "http to a loopback address or 169.254.170.2/.23: '%.200s'", src, full);
			return -EINVAL;
		}
		snprintf(url, sizeof(url), "%s", full);
	} else {
		return 1;
	}
	if (tfile && *tfile) {
		tok = read_token_file(tfile, src, err, errlen);
		if (!tok)
			return -EACCES;
	} else if (tenv && *tenv) {
		if (strpbrk(tenv, "\r\n")) {
			snprintf(err, errlen, "%s: AWS_CONTAINER_AUTHORIZATION_TOKEN holds a line break", src);
			return -EINVAL;
		}
		tok = objfs_secret_strdup(tenv);
		if (!tok)
			return -ENOMEM;
	}
	if (tok && asprintf(&hdr, "Authorization: %s", tok) < 0) {
		hdr = NULL;
		rc = -ENOMEM;
		goto out;
	}
	{
		const char *h[] = { "Accept: application/json", hdr, NULL };

		rc = objfs_creds_http("GET", url, h, NULL, CONTAINER_TIMEOUT_MS, 0, &ans, &status);
	}
	if (rc) {
		snprintf(err, errlen, "%s: no answer from the endpoint: %s", src, strerror(-rc));
		goto out;
	}
	if (status != 200) {
		snprintf(err, errlen, "%s: the endpoint answered HTTP %ld", src, status);
		rc = status == 401 || status == 403 ? -EACCES : -EPROTO;
		goto out;
	}
	rc = objfs_creds_parse_json(ans, strlen(ans), 0, src, out, err, errlen);
	if (!rc)
		objfs_info("credentials: container endpoint%s", tok ? " with an authorization token" : "");
out:
	objfs_secret_free(tok);
	wipe_free(hdr);
	wipe_free(ans);
	return rc;
}

/* ---- credential_process ---- */

/* What of a program's stderr reaches the log: lines of at most
 * STDERR_LINE_MAX bytes, STDERR_LOG_MAX bytes a run in all. */
#define STDERR_LINE_MAX 300
#define STDERR_LOG_MAX 4096

/* A program's stderr on its way to the log. */
struct err_log {
	char b[1024];      /* the line being read (a longer one goes in pieces) */
	size_t n;          /* bytes in b */
	size_t logged;     /* bytes of it logged this run */
	uint64_t dropped;  /* bytes not logged (newlines not counted) */
};

/* Logs what the budget leaves of line @s (@len bytes, no newline). */
static void log_line(struct err_log *e, const char *s, size_t len)
{
	size_t show = len < STDERR_LINE_MAX ? len : STDERR_LINE_MAX;

	if (show > STDERR_LOG_MAX - e->logged) {
		show = 0;
		e->logged = STDERR_LOG_MAX; /* from here on only counted */
	}
	if (show)
		objfs_warn("credential_process stderr: %.*s", (int)show, s);
	e->logged += show;
	e->dropped += len - show;
}

/* Logs the complete lines in @e, keeps the rest; all of it when @flush. */
static void log_lines(struct err_log *e, int flush)
{
	char *s = e->b, *nl;

	while ((nl = memchr(s, '\n', e->n - (size_t)(s - e->b)))) {
		log_line(e, s, (size_t)(nl - s));
		s = nl + 1;
	}
	e->n -= (size_t)(s - e->b);
	memmove(e->b, s, e->n);
	if (flush && e->n) {
		log_line(e, e->b, e->n);
		e->n = 0;
	}
}

/*
 * Reaps @pid by @deadline, else kills and reaps it: a program that closed
 * its output but runs on must not hold the credentials lock, and every
 * signer behind it, for as long as it runs. 0, or -ETIMEDOUT.
 */
static int reap(pid_t pid, int64_t deadline, int *status)
{
	for (;;) {
		pid_t r = waitpid(pid, status, WNOHANG);
		struct timespec nap = { 0, 2 * 1000000 };

		if (r == pid || (r < 0 && errno != EINTR))
			return 0;
		if (objfs_now_ns() >= deadline)
			break;
		if (r == 0)
			nanosleep(&nap, NULL);
	}
	kill(pid, SIGKILL);
	while (waitpid(pid, status, 0) < 0 && errno == EINTR)
		;
	return -ETIMEDOUT;
}

int objfs_creds_from_process(const char *cmd, struct objfs_creds *out, char *err, size_t errlen)
{
	return objfs_creds_from_process_tmo(cmd, PROCESS_TIMEOUT_MS, out, err, errlen);
}

int objfs_creds_from_process_tmo(const char *cmd, long timeout_ms, struct objfs_creds *out,
				 char *err, size_t errlen)
{
	const char *src = "credential_process";
	int po[2] = { -1, -1 }, pe[2] = { -1, -1 }, status = 0, rc = 0, open_fds = 2;
	char *buf = objfs_secret_alloc(OBJFS_CREDS_BODY_MAX + 1);
	struct err_log el = { .n = 0 };
	size_t n = 0;
	int64_t deadline = objfs_now_ns() + (int64_t)timeout_ms * 1000000;
	pid_t pid;

	memset(out, 0, sizeof(*out));
	if (!buf || pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC)) {
		rc = buf ? -errno : -ENOMEM;
		snprintf(err, errlen, "%s: %s", src, strerror(-rc));
		goto out;
	}
	pid = fork();
	if (pid < 0) {
		rc = -errno;
		snprintf(err, errlen, "%s: fork: %s", src, strerror(-rc));
		goto out;
	}
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDONLY);
		sigset_t none;

		/* the daemon's blocked and ignored signals (SIGPIPE) are not the program's */
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);

		if (devnull >= 0)
			dup2(devnull, 0);
		dup2(po[1], 1);
		dup2(pe[1], 2);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	close(po[1]);
	close(pe[1]);
	po[1] = pe[1] = -1;
	while (open_fds) {
		struct pollfd p[2] = { { po[0], POLLIN, 0 }, { pe[0], POLLIN, 0 } };
		int64_t left = (deadline - objfs_now_ns()) / 1000000;
		ssize_t r;

		if (left <= 0 || poll(p, 2, (int)left) == 0) {
			kill(pid, SIGKILL);
			rc = -ETIMEDOUT;
			break;
		}
		if (p[0].revents && po[0] >= 0) {
			r = read(po[0], buf + n, OBJFS_CREDS_BODY_MAX + 1 - n);
			if (r > 0)
				n += (size_t)r;
			if (n > OBJFS_CREDS_BODY_MAX) {
				kill(pid, SIGKILL);
				snprintf(err, errlen, "%s: '%.200s' printed more than 64 KiB", src, cmd);
				rc = -EMSGSIZE;
				break;
			}
			if (r == 0 || (r < 0 && errno != EINTR)) {
				close(po[0]);
				po[0] = -1;
				open_fds--;
			}
		}
		if (p[1].revents && pe[0] >= 0) {
			r = read(pe[0], el.b + el.n, sizeof(el.b) - el.n);
			if (r > 0) {
				el.n += (size_t)r;
				log_lines(&el, el.n == sizeof(el.b));
			} else if (r == 0 || errno != EINTR) {
				close(pe[0]);
				pe[0] = -1;
				open_fds--;
			}
		}
	}
	log_lines(&el, 1);
	if (el.dropped)
		objfs_warn("credential_process stderr: %llu more bytes not logged (at most %d a run)",
			   (unsigned long long)el.dropped, STDERR_LOG_MAX);
	if (reap(pid, rc ? 0 : deadline, &status) && !rc)
		rc = -ETIMEDOUT;
	if (rc == -ETIMEDOUT)
		snprintf(err, errlen, "%s: '%.200s' did not finish within %ld s", src, cmd,
			 (timeout_ms + 999) / 1000);
	if (rc)
		goto out;
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		snprintf(err, errlen, "%s: '%.200s' failed (%s %d); its stderr is in the log", src, cmd,
			 WIFEXITED(status) ? "exit status" : "signal",
			 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
		rc = -EACCES;
		goto out;
	}
	buf[n] = '\0';
	rc = objfs_creds_parse_json(buf, n, 1, src, out, err, errlen);
	if (rc == -EPROTO)
		snprintf(err + strlen(err), errlen - strlen(err), " (program '%.200s')", cmd);
	if (!rc)
		objfs_info("credentials: credential_process");
out:
	for (int i = 0; i < 2; i++) {
		if (po[i] >= 0)
			close(po[i]);
		if (pe[i] >= 0)
			close(pe[i]);
	}
	objfs_secret_free(buf);
	return rc;
}
