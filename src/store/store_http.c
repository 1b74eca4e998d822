/*
 * store_http: plain HTTP(S) origins (nginx, Apache, any static server).
 *
 * Directories are read from the server's index pages: nginx's
 * "autoindex_format json" carries sizes and times; HTML pages only carry
 * names, so sizes then come from HEAD. A SOURCE that names a file (no
 * trailing '/', and the server does not redirect it to a directory) is shown
 * as a directory holding just that file, as httpdirfs and rclone do.
 *
 * Paths map to URLs as origin + percent-encode(base path + store path); the
 * encoder leaves only RFC 3986 unreserved characters and '/', so names with
 * spaces, '%', '+', '#', '&', '?' or UTF-8 reach the server intact.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "store.h"
#include "url.h"

#define LISTING_MAX (256u << 20)

struct http_store {
	struct objfs_store base;
	struct objfs_url url;
	char *dir_path;    /* decoded base path, ends with '/' */
	char *single_name; /* set when SOURCE names one file */
	char *single_path; /* that file's decoded URL path */
};

/* Builds the URL of @path; @dir adds the trailing '/'. Caller frees. */
static char *path_url(struct http_store *h, const char *path, int dir)
{
	const char *p;
	char *full, *enc, *out = NULL;

	if (h->single_name) {
		if (*path == '\0')
			return NULL;
		p = h->single_path;
		full = strdup(p);
	} else if (asprintf(&full, "%s%s%s", h->dir_path, path,
			    (dir && *path) ? "/" : "") < 0) {
		full = NULL;
	}
	if (!full)
		return NULL;
	enc = objfs_url_encode(full, strlen(full), 1);
	free(full);
	if (!enc)
		return NULL;
	if (asprintf(&out, "%s%s", h->url.origin, enc) < 0)
		out = NULL;
	free(enc);
	return out;
}

static int head(struct http_store *h, const char *url, int no_redirect, struct objfs_req *r)
{
	struct objfs_req *rp = r;

	objfs_req_init(r);
	r->url = url;
	r->method = OBJFS_HEAD;
	r->no_redirect = no_redirect;
	return objfs_engine_run(h->base.engine, &rp, 1);
}

static void fill_stat(const struct objfs_req *r, struct objfs_stat *st)
{
	st->is_dir = 0;
	st->size = r->total;
	st->mtime = r->mtime;
	snprintf(st->etag, sizeof(st->etag), "%s", r->etag_out);
}

static int http_stat(struct objfs_store *s, const char *path, struct objfs_stat *st)
{
	struct http_store *h = (struct http_store *)s;
	struct objfs_req r;
	char *url;
	int err;

	if (h->single_name && strcmp(path, h->single_name) != 0)
		return -ENOENT;
	url = path_url(h, path, 0);
	if (!url)
		return -ENOMEM;
	err = head(h, url, 1, &r);
	if (!err && r.status >= 300 && r.status < 400) {
		/* A directory served at "name" redirects to "name/". */
		size_t ll = strlen(r.location);

		if (ll && r.location[ll - 1] == '/') {
			memset(st, 0, sizeof(*st));
			st->is_dir = 1;
			st->size = -1;
			st->mtime = -1;
		} else {
			err = -EIO;
		}
	} else if (!err) {
		fill_stat(&r, st);
		if (st->size < 0) {
			objfs_warn("%s: server gives no Content-Length", url);
			err = -EIO;
		}
	}
	objfs_req_clear(&r);
	free(url);
	return err;
}

/* What the mount probe's answer said, for a message that names the fix. */
struct probe_note {
	long status;     /* HTTP status of the failed answer, 0: none came */
	char s3_code[64]; /* <Code> of an S3 error document, "" none */
	int s3_listing;  /* the page is an S3 ListBucketResult */
};

/* http_list, noting in @pn (NULL: not) what a failed answer said. */
static int http_list_noted(struct objfs_store *s, const char *path, struct objfs_listing *out,
			   struct probe_note *pn)
{
	struct http_store *h = (struct http_store *)s;
	struct objfs_req r, *rp = &r;
	char *url, *dir = NULL;
	const char *cap;
	int err;

	if (h->single_name) {
		struct objfs_stat st;

		if (*path)
			return -ENOTDIR;
		err = http_stat(s, h->single_name, &st);
		if (err)
			return err;
		return objfs_listing_add(out, h->single_name, strlen(h->single_name), 0,
					 st.size, st.mtime);
	}
	url = path_url(h, path, 1);
	if (!url)
		return -ENOMEM;
	objfs_req_init(&r);
	r.url = url;
	r.method = OBJFS_GET;
	/* the page is held while it is read, so it counts against the
	 * listing's memory; an index page holds well under 1 KiB an entry */
	r.body_max = LISTING_MAX;
	cap = "";
	if (s->lim.max_entries < r.body_max / 1024) {
		r.body_max = s->lim.max_entries * 1024;
		cap = " (max_dir_entries, at 1 KiB an entry)";
	}
	if (s->lim.max_bytes && s->lim.max_bytes < r.body_max) {
		r.body_max = s->lim.max_bytes;
		cap = " (max_dir_bytes)";
	}
	r.deadline_ns = objfs_store_list_deadline(s);
	out->max = s->lim.max_entries;
	out->max_bytes = s->lim.max_bytes;
	err = objfs_engine_run(s->engine, &rp, 1);
	if (err && pn) {
		pn->status = r.status;
		snprintf(pn->s3_code, sizeof(pn->s3_code), "%s", r.s3_code);
	}
	if (err == -ETIMEDOUT && objfs_now_ns() >= r.deadline_ns)
		err = objfs_store_list_refused(s, path, -ETIMEDOUT);
	else if (err == -EFBIG)
		objfs_warn("listing '/%s' refused: index page larger than %zu bytes%s", path,
			   r.body_max, cap);
	if (!err) {
		const char *body = r.body ? r.body : "";

		if (strstr(r.content_type, "json")) {
			err = objfs_listing_parse_json(body, r.got, out);
		} else if (asprintf(&dir, "%s%s%s", h->dir_path, path, *path ? "/" : "") < 0) {
			dir = NULL;
			err = -ENOMEM;
		} else {
			err = objfs_listing_parse_html(body, r.got, dir, out);
		}
		if (err == -EPROTO && pn)
			pn->s3_listing = strstr(body, "<ListBucketResult") != NULL;
		if (err == -EPROTO)
			objfs_warn("%s: not a directory listing this server's index format "
				   "objfs understands", url);
		else if (err == -E2BIG || err == -EFBIG)
			objfs_store_list_refused(s, path, err);
	}
	free(dir);
	objfs_req_clear(&r);
	free(url);
	return err;
}

static int http_list(struct objfs_store *s, const char *path, struct objfs_listing *out)
{
	return http_list_noted(s, path, out, NULL);
}

static int http_prepare(struct objfs_store *s, const char *path, struct objfs_req *r,
			void **cookie)
{
	struct http_store *h = (struct http_store *)s;
	char *url = path_url(h, path, 0);

	if (!url)
		return -ENOMEM;
	r->url = url;
	*cookie = url;
	return 0;
}

static void http_release(struct objfs_store *s, void *cookie)
{
	(void)s;
	free(cookie);
}

static void http_free(struct objfs_store *s)
{
	struct http_store *h = (struct http_store *)s;

	objfs_url_clear(&h->url);
	free(h->dir_path);
	free(h->single_name);
	free(h->single_path);
	free(h);
}

/* The ops see EIO for transport failures (objfs_store_meta_errno); the
 * mount probe calls http_list itself for the precise reason. */
static int http_list_op(struct objfs_store *s, const char *path, struct objfs_listing *out)
{
	return objfs_store_meta_errno(http_list(s, path, out));
}

static int http_stat_op(struct objfs_store *s, const char *path, struct objfs_stat *st)
{
	return objfs_store_meta_errno(http_stat(s, path, st));
}

static const struct objfs_store_ops http_ops = {
	.name = "http",
	.list = http_list_op,
	.stat = http_stat_op,
	.prepare = http_prepare,
	.release = http_release,
	.free = http_free,
};

static const char *errno_reason(int err)
{
	switch (err) {
	case -ENOENT: return "not found (HTTP 404)";
	case -EACCES: return "access denied (HTTP 401/403)";
	case -ECONNREFUSED: return "connection refused: is the server running?";
	case -EHOSTUNREACH: return "host name could not be resolved";
	case -ETIMEDOUT: return "timed out";
	case -EPROTO: return "the server's answer is not a directory listing";
	default: return strerror(-err);
	}
}

/*
 * Why the probe of SOURCE failed, into @buf: @err and what the answer
 * said (@pn). An S3 server's answer (an S3 error document, a bucket
 * listing) names the s3:// SOURCE and endpoint= to mount instead.
 */
static void probe_reason(const struct http_store *h, int err, const struct probe_note *pn,
			 char *buf, size_t cap)
{
	const char *bucket = h->url.path + 1, *slash = strchr(bucket, '/');
	const char *prefix = slash ? slash + 1 : "";
	int blen = slash ? (int)(slash - bucket) : (int)strlen(bucket);
	char port[16] = "";
	size_t n;

	if (err == -EACCES && pn->status)
		snprintf(buf, cap, "access denied (HTTP %ld%s%s)", pn->status,
			 pn->s3_code[0] ? " " : "", pn->s3_code);
	else if (err == -EACCES) /* no answer: libcurl refused the certificate */
		snprintf(buf, cap, "the server's TLS certificate was not accepted "
			 "(ca_file= names the CA that signed it)");
	else
		snprintf(buf, cap, "%s", errno_reason(err));
	n = strlen(buf);
	if (!(pn->s3_code[0] || pn->s3_listing) || !blen)
		return;
	if (h->url.port != (strcmp(h->url.scheme, "https") ? 80 : 443))
		snprintf(port, sizeof(port), ":%d", h->url.port);
	snprintf(buf + n, cap - n, "; the server answers as S3 does: to mount the bucket, use "
		 "s3://%.*s%s%s with -o endpoint=%s://%s%s", blen, bucket, *prefix ? "/" : "",
		 prefix, h->url.scheme, h->url.host, port);
}

int objfs_store_http_new(const char *src, struct objfs_engine *engine, size_t chunk_size,
			 const struct objfs_list_limits *lim, struct objfs_store **out, char *err,
			 size_t errlen)
{
	struct http_store *h = calloc(1, sizeof(*h));
	struct objfs_listing probe = { 0 };
	struct probe_note pn = { 0 };
	const char *why = NULL;
	size_t plen;
	int ret;

	if (!h)
		return -ENOMEM;
	ret = objfs_store_init(&h->base, &http_ops, engine, chunk_size);
	if (ret)
		goto err_free;
	objfs_store_set_limits(&h->base, lim);
	ret = objfs_url_parse(src, &h->url, &why);
	if (ret) {
		char forms[512];

		snprintf(err, errlen, "bad SOURCE '%s': %s", src,
			 objfs_url_source_why(src, forms, sizeof(forms)) ? forms : why);
		goto err_free;
	}
	plen = strlen(h->url.path);
	if (h->url.path[plen - 1] == '/') {
		h->dir_path = strdup(h->url.path);
	} else {
		/* A file, or a directory named without its '/'. */
		struct objfs_req r;
		char *url = NULL;

		if (asprintf(&url, "%s", src) < 0) {
			ret = -ENOMEM;
			goto err_free;
		}
		ret = head(h, url, 1, &r);
		if (!ret && r.status >= 300 && r.status < 400 && r.location[0] &&
		    r.location[strlen(r.location) - 1] == '/') {
			ret = asprintf(&h->dir_path, "%s/", h->url.path) < 0 ? -ENOMEM : 0;
		} else if (!ret && r.status >= 200 && r.status < 300) {
			const char *slash = strrchr(h->url.path, '/');

			h->single_path = strdup(h->url.path);
			h->single_name = strdup(slash + 1);
			h->dir_path = strndup(h->url.path, (size_t)(slash + 1 - h->url.path));
			if (!h->single_path || !h->single_name || !h->dir_path) {
				ret = -ENOMEM;
			} else if (!objfs_name_valid(h->single_name, strlen(h->single_name))) {
				snprintf(err, errlen, "'%s': the file name cannot be shown "
					 "as a file", src);
				ret = -EINVAL;
			}
		} else if (!ret) {
			ret = -EIO;
		}
		if (ret)
			pn.status = r.status;
		objfs_req_clear(&r);
		free(url);
		if (ret) {
			char why_open[512];

			probe_reason(h, ret, &pn, why_open, sizeof(why_open));
			if (!err[0])
				snprintf(err, errlen, "cannot open '%s': %s", src, why_open);
			goto err_free;
		}
	}
	if (!h->dir_path) {
		ret = -ENOMEM;
		goto err_free;
	}
	/* Probe now so a bad source fails the mount, not the first ls. */
	ret = http_list_noted(&h->base, "", &probe, &pn);
	objfs_listing_clear(&probe);
	if (ret) {
		char why_list[512];

		probe_reason(h, ret, &pn, why_list, sizeof(why_list));
		snprintf(err, errlen, "cannot list '%s': %s", src, why_list);
		goto err_free;
	}
	*out = &h->base;
	return 0;
err_free:
	objfs_store_free(&h->base);
	return ret;
}
