/*
 * store_s3: S3 and S3-compatible stores (AWS, Ceph RGW, MinIO, ...).
 *
 * The namespace is ListObjectsV2 with delimiter '/': common prefixes become
 * directories (so implicit directories work, and "dir/" marker objects are
 * folded into their directory), objects become files whose size, time and
 * ETag come from the listing, so `ls -l` costs one request per 1,000 entries
 * and no HEAD per file. A key that is both an object and a prefix ("a" and
 * "a/b") shows as the directory; the object is hidden with a log line, so
 * everything under the prefix stays reachable.
 *
 * Every request is signed with SigV4 (unless no_sign) when it is prepared;
 * the engine's retries reuse that signature, valid for 15 minutes. Addressing
 * is virtual-host style on AWS and path style on custom endpoints unless
 * told otherwise (path_style / virtual_host). Keys are encoded with RFC 3986
 * unreserved characters only, which is both the wire form and SigV4's
 * canonical form, so what is signed is exactly what is sent.
 *
 * objfs_store_s3_new() runs in steps towards one exit: bucket and prefix
 * (s3_source), the profile's settings, the precedence of option,
 * environment, profile and default (objfs_s3_resolve_cfg: reads nothing but
 * the environment, so check_s3 tests it table-driven), the request origin
 * (s3_origin), signer and credentials, then the probe (s3_probe): a
 * one-key listing whose failure becomes one line that names the fix.
 */
#include "config.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "creds.h"
#include "hash.h"
#include "log.h"
#include "sigv4.h"
#include "store.h"
#include "store_s3_i.h"
#include "url.h"

/* A listing page's body: 1,000 keys of 1,024 bytes url-encoded are ~3.3
 * MB. A page libxml2 parses as a tree takes ~30x its size (a review
 * measured 548 MiB for 16 MiB), so the cap bounds that too; a lookup's
 * page (max-keys=1) is smaller still. */
#define PAGE_MAX (16u << 20)
#define LOOKUP_PAGE_MAX (1u << 20)

struct s3_store {
	struct objfs_store base;
	char *bucket;
	char *prefix;     /* decoded; "" or ends with '/' */
	char *origin;     /* scheme://host[:port] requests go to */
	char *host;       /* Host header value, as signed */
	char *path_base;  /* "/bucket" (path style) or "" (virtual host) */
	char *region;
	char *endpoint;   /* for messages */
	struct objfs_sigv4 *signer;
	struct objfs_creds_provider *creds; /* NULL: anonymous */
};

/* What prepare() hands out: freed by release(). */
struct s3_cookie {
	char *url;
	struct curl_slist *headers;
	const char *method; /* static: "GET" or "HEAD" */
	char *epath, *query; /* as signed, for signing anew (s3_resign) */
	char akid[128]; /* the access key id it was signed with ("" unsigned):
			   not a secret, the Authorization header names it */
};

/* ---- names (exposed through store_s3_i.h; the page parser is s3_list.c) ---- */

int objfs_s3_bucket_valid(const char *b)
{
	size_t n = strlen(b);

	if (n < 3 || n > 255 || b[0] == '.' || b[0] == '-')
		return 0;
	for (; *b; b++)
		if (!isalnum((unsigned char)*b) && *b != '.' && *b != '-' && *b != '_')
			return 0;
	return 1;
}

/* ---- requests ---- */

static void cookie_free(struct s3_cookie *c)
{
	if (!c)
		return;
	free(c->url);
	free(c->epath);
	free(c->query);
	curl_slist_free_all(c->headers);
	free(c);
}

/* Any length: a session token has no documented maximum (a fixed buffer
 * failed every signed request with a token past ~4 KiB). */
static int add_header(struct curl_slist **l, const char *name, const char *value)
{
	struct curl_slist *n;
	char *line;

	if (asprintf(&line, "%s: %s", name, value) < 0)
		return -ENOMEM;
	n = curl_slist_append(*l, line);
	explicit_bzero(line, strlen(line)); /* a session token's copy */
	free(line);
	if (!n)
		return -ENOMEM;
	*l = n;
	return 0;
}

/* Adds the SigV4 headers for this request to @hdrs, and the access key id
 * used to @akid (@akid_len bytes). 0 or -errno. */
static int s3_sign(struct s3_store *s, const char *method, const char *epath,
		   const char *query, struct curl_slist **hdrs, char *akid, size_t akid_len)
{
	char date[17], auth[1024], hhost[512], hsha[128], hdate[64];
	char *htok = NULL;
	int err;
	const struct objfs_creds *cr = objfs_creds_hold(s->creds, &err);

	if (!cr)
		return err;
	objfs_sigv4_amz_date(time(NULL), date);
	snprintf(hhost, sizeof(hhost), "host:%s", s->host);
	snprintf(hsha, sizeof(hsha), "x-amz-content-sha256:%s", OBJFS_SHA256_EMPTY);
	snprintf(hdate, sizeof(hdate), "x-amz-date:%s", date);
	if (cr->session_token && asprintf(&htok, "x-amz-security-token:%s", cr->session_token) < 0) {
		htok = NULL;
		err = -ENOMEM;
		goto out;
	}
	{
		const char *signed_hdrs[] = { hhost, hsha, hdate, htok, NULL };
		struct objfs_sigv4_creds sc = { cr->access_key, cr->secret_key, cr->session_token };
		struct objfs_sigv4_req sr = {
			.method = method, .path = epath, .query = query, .headers = signed_hdrs,
			.payload_hash = OBJFS_SHA256_EMPTY, .region = s->region,
			.service = "s3", .s3 = 1,
		};

		err = objfs_sigv4_authorization(s->signer, &sc, &sr, date, auth, sizeof(auth));
	}
	if (!err)
		err = add_header(hdrs, "x-amz-content-sha256", OBJFS_SHA256_EMPTY);
	if (!err)
		err = add_header(hdrs, "x-amz-date", date);
	if (!err && cr->session_token)
		err = add_header(hdrs, "x-amz-security-token", cr->session_token);
	if (!err)
		err = add_header(hdrs, "Authorization", auth);
	if (!err)
		snprintf(akid, akid_len, "%s", cr->access_key);
	explicit_bzero(auth, sizeof(auth));
out:
	if (htok) {
		explicit_bzero(htok, strlen(htok));
		free(htok);
	}
	objfs_creds_drop(cr);
	return err;
}

/*
 * Builds a signed request for @epath (wire-encoded path, starting with '/')
 * and @query (sorted, encoded, "" for none). Returns 0 or -errno.
 */
/* The Host and signature headers of @c's request into c->headers,
 * replacing any it had. 0 or -errno. */
static int s3_headers(struct s3_store *s, struct s3_cookie *c)
{
	struct curl_slist *h = NULL;
	int err = add_header(&h, "Host", s->host);

	c->akid[0] = '\0';
	if (!err && s->creds)
		err = s3_sign(s, c->method, c->epath, c->query, &h, c->akid, sizeof(c->akid));
	if (err) {
		curl_slist_free_all(h);
		return err;
	}
	curl_slist_free_all(c->headers);
	c->headers = h;
	return 0;
}

static int s3_build(struct s3_store *s, const char *method, const char *epath,
		    const char *query, struct s3_cookie **out)
{
	struct s3_cookie *c = calloc(1, sizeof(*c));
	int err;

	if (!c)
		return -ENOMEM;
	c->method = method;
	if (asprintf(&c->url, "%s%s%s%s", s->origin, epath, *query ? "?" : "", query) < 0) {
		c->url = NULL;
		err = -ENOMEM;
	} else if (!(c->epath = strdup(epath)) || !(c->query = strdup(query))) {
		err = -ENOMEM;
	} else {
		err = s3_headers(s, c);
	}
	if (err) {
		cookie_free(c);
		return err;
	}
	*out = c;
	return 0;
}

/* Wire path of key @key ("" for the bucket root). Caller frees. */
static char *key_path(struct s3_store *s, const char *key)
{
	char *enc = objfs_url_encode(key, strlen(key), 1), *out;

	if (!enc)
		return NULL;
	if (asprintf(&out, "%s/%s", s->path_base, enc) < 0)
		out = NULL;
	free(enc);
	return out;
}

/* Full key of store path @path. Caller frees. */
static char *full_key(struct s3_store *s, const char *path)
{
	char *k;

	if (asprintf(&k, "%s%s", s->prefix, path) < 0)
		return NULL;
	return k;
}

/* s3_build for object @path of the store (prefix prepended, key encoded). */
static int s3_build_key(struct s3_store *s, const char *method, const char *path,
			struct s3_cookie **out)
{
	char *key = full_key(s, path), *ep = key ? key_path(s, key) : NULL;
	int err = ep ? s3_build(s, method, ep, "", out) : -ENOMEM;

	free(ep);
	free(key);
	return err;
}

/*
 * Whether answer @r to @c refused the credentials it was signed with: S3
 * refuses temporary ones revoked or rotated before their expiry with these
 * codes, and the provider would keep signing with them until five minutes
 * before it. Then the provider resolves them again before the next
 * signature (objfs_creds_reject), and 1: signing @c anew may mend it.
 */
static int s3_answered(struct s3_store *s, const struct s3_cookie *c, const struct objfs_req *r)
{
	static const char *const refused[] = { "ExpiredToken", "InvalidToken",
					       "TokenRefreshRequired", "InvalidAccessKeyId" };
	int yes = 0;

	if (!s->creds || !c || !c->akid[0] || !r || (r->status != 400 && r->status != 403))
		return 0;
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		yes |= strcmp(r->s3_code, refused[i]) == 0;
	if (yes)
		(void)objfs_creds_reject(s->creds, c->akid);
	return yes;
}

static int list_page_build(struct s3_store *s, const char *prefix, const char *token,
			   unsigned max_keys, struct s3_cookie **c);
static void cookie_into(const struct s3_cookie *c, struct objfs_req *r);

/*
 * Whether a 400 without a body to HEAD @r refused its credentials. A HEAD's
 * answer has no body, so no code: it may be a session token refused or,
 * say, an SSE-C object asked without its key. A one-key listing, signed
 * with the current credentials, says which (its body has the code, and
 * s3_answered takes a refusal it finds). Only for a request signed with a
 * session token; on the caller's thread (a synchronous request).
 */
static int head_refused(struct s3_store *s, const struct objfs_req *r)
{
	struct s3_cookie *lc = NULL;
	struct objfs_req lr, *rp = &lr;
	int yes = 0;

	if (r->method != OBJFS_HEAD || r->status != 400 || r->s3_code[0] ||
	    !objfs_creds_has_token(s->creds) || list_page_build(s, s->prefix, NULL, 1, &lc))
		return 0;
	objfs_req_init(&lr);
	cookie_into(lc, &lr);
	lr.method = OBJFS_GET;
	lr.body_max = LOOKUP_PAGE_MAX;
	(void)objfs_engine_run(s->base.engine, &rp, 1);
	yes = s3_answered(s, lc, &lr);
	objfs_req_clear(&lr);
	cookie_free(lc);
	return yes;
}

/* Runs @c as a single request into @r (objfs_req_init'ed by the caller,
 * who may have set its deadline); once more, signed anew, when the answer
 * refused the credentials (s3_answered): -EACCES if it does again. */
static int run_one(struct s3_store *s, struct s3_cookie *c, enum objfs_method m,
		   struct objfs_req *r)
{
	int64_t deadline = r->deadline_ns;
	int err;

	for (int again = 0;; again = 1) {
		struct objfs_req *rp = r;

		r->url = c->url;
		r->headers = c->headers;
		r->method = m;
		r->no_redirect = 1;
		r->deadline_ns = deadline;
		if (m == OBJFS_GET)
			r->body_max = PAGE_MAX;
		err = objfs_engine_run(s->base.engine, &rp, 1);
		if (!s3_answered(s, c, r) && !head_refused(s, r))
			return err;
		if (again)
			return -EACCES;
		err = s3_headers(s, c);
		if (err)
			return err;
		objfs_req_clear(r);
		objfs_req_init(r);
	}
}

/* Builds the request of one ListObjectsV2 page of @prefix into *@c. 0 or -errno. */
static int list_page_build(struct s3_store *s, const char *prefix, const char *token,
			   unsigned max_keys, struct s3_cookie **c)
{
	char *etok = NULL, *epre = objfs_url_encode(prefix, strlen(prefix), 0);
	char *query = NULL;
	int err;

	if (!epre)
		return -ENOMEM;
	if (token && !(etok = objfs_url_encode(token, strlen(token), 0))) {
		free(epre);
		return -ENOMEM;
	}
	if (asprintf(&query, "%s%s%sdelimiter=%%2F&encoding-type=url&list-type=2&"
		     "max-keys=%u&prefix=%s", etok ? "continuation-token=" : "",
		     etok ? etok : "", etok ? "&" : "", max_keys, epre) < 0) {
		query = NULL;
		err = -ENOMEM;
	} else {
		err = s3_build(s, "GET", *s->path_base ? s->path_base : "/", query, c);
	}
	free(query);
	free(epre);
	free(etok);
	return err;
}

/* The outcome of a listing request @r of @prefix, parsed into @files/@dirs. */
static int list_page_parse(struct objfs_req *r, int err, const char *prefix,
			   struct objfs_listing *files, struct objfs_listing *dirs,
			   struct objfs_s3_page *page)
{
	memset(&page->skipped, 0, sizeof(page->skipped));
	if (!err && r->status >= 300)
		err = -EINVAL; /* a redirect: the bucket lives in another region */
	if (!err)
		err = objfs_s3_parse_list(r->body ? r->body : "", r->got, prefix, files, dirs,
					  page);
	return err;
}

/*
 * One page request, runnable on a thread of its own: the next page of a
 * listing is fetched while this one is parsed (see s3_list).
 */
struct page_fetch {
	struct s3_store *s;
	const char *prefix;
	char *token;          /* owned; NULL: the first page */
	int64_t deadline;
	struct objfs_req r;   /* the response, cleared by page_fetch_clear */
	struct s3_cookie *c;
	int err;
};

static void *page_fetch_run(void *arg)
{
	struct page_fetch *f = arg;

	objfs_req_init(&f->r);
	f->err = list_page_build(f->s, f->prefix, f->token, 1000, &f->c);
	if (!f->err) {
		f->r.deadline_ns = f->deadline;
		f->err = run_one(f->s, f->c, OBJFS_GET, &f->r);
	}
	return NULL;
}

static void page_fetch_clear(struct page_fetch *f)
{
	objfs_req_clear(&f->r);
	cookie_free(f->c);
	free(f->token);
	f->c = NULL;
	f->token = NULL;
}

/* Lists one page of @prefix into @files/@dirs; @r keeps the response. */
static int list_page(struct s3_store *s, const char *prefix, const char *token,
		     unsigned max_keys, int64_t deadline, struct objfs_listing *files,
		     struct objfs_listing *dirs, struct objfs_s3_page *page,
		     struct objfs_req *r)
{
	struct s3_cookie *c = NULL;
	int err;

	objfs_req_init(r); /* the caller clears @r whatever the result */
	err = list_page_build(s, prefix, token, max_keys, &c);
	if (!err) {
		r->deadline_ns = deadline;
		err = run_one(s, c, OBJFS_GET, r);
	}
	err = list_page_parse(r, err, prefix, files, dirs, page);
	cookie_free(c);
	return err;
}

/*
 * The continuation token of a page, found by a plain search before the
 * page is parsed, so that the next request can go out at once; NULL when
 * there is none or it holds an XML escape (the parser's token is used
 * then). s3_list checks it against the parser's before trusting it.
 */
static char *quick_token(const struct objfs_req *r)
{
	static const char open[] = "<NextContinuationToken>", close[] = "</NextContinuationToken>";
	const char *b = r->body, *a, *e;

	if (!b || !memmem(b, r->got, "<IsTruncated>true</IsTruncated>", 31))
		return NULL;
	a = memmem(b, r->got, open, sizeof(open) - 1);
	if (!a)
		return NULL;
	a += sizeof(open) - 1;
	e = memmem(a, r->got - (size_t)(a - b), close, sizeof(close) - 1);
	if (!e || e == a || memchr(a, '&', (size_t)(e - a)) || memchr(a, '<', (size_t)(e - a)))
		return NULL;
	return strndup(a, (size_t)(e - a));
}

/*
 * The continuation tokens one listing has seen, as 64-bit hashes in an
 * open-addressing set: a token that comes back means the server loops
 * (A, B, A, ... never ends), and the listing fails at once instead of at
 * max_list_pages.
 */
struct token_set {
	uint64_t *v; /* 0: empty slot */
	size_t n, cap;
};

/* Adds @tok: 0, -ELOOP when it was seen before, or -ENOMEM. */
static int token_add(struct token_set *t, const char *tok)
{
	uint64_t h = objfs_fnv1a(OBJFS_FNV_OFFSET, tok) | 1;
	size_t i;

	if (2 * (t->n + 1) > t->cap) {
		size_t nc = t->cap ? 2 * t->cap : 64;
		uint64_t *nv = calloc(nc, sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		for (size_t j = 0; j < t->cap; j++) {
			if (!t->v[j])
				continue;
			for (i = t->v[j] & (nc - 1); nv[i]; i = (i + 1) & (nc - 1))
				;
			nv[i] = t->v[j];
		}
		free(t->v);
		t->v = nv;
		t->cap = nc;
	}
	for (i = h & (t->cap - 1); t->v[i]; i = (i + 1) & (t->cap - 1))
		if (t->v[i] == h)
			return -ELOOP;
	t->v[i] = h;
	t->n++;
	return 0;
}

/* Byte @i of key @s (@len bytes, then '/' when @dir), -1 past its end. */
static int key_at(const char *s, size_t len, int dir, size_t i)
{
	return i < len ? (unsigned char)s[i] : i == len && dir ? '/' : -1;
}

/* Whether key @a (a name, '/' after it when @adir) sorts after key @b. */
static int key_after(const char *a, int adir, const char *b, int bdir)
{
	size_t la = strlen(a), lb = strlen(b);

	for (size_t i = 0;; i++) {
		int ca = key_at(a, la, adir, i), cb = key_at(b, lb, bdir, i);

		if (ca != cb)
			return ca > cb;
		if (ca == -1)
			return 0;
	}
}

/*
 * Hands one parsed page to @fn: directories first, then objects, each
 * entry moved out of @dirs and @files (left empty), with the largest key
 * of the page as upto. 0 or -errno.
 */
static int page_deliver(struct objfs_listing *dirs, struct objfs_listing *files,
			objfs_list_page_fn fn, void *arg)
{
	struct objfs_listing pg = { 0 };
	const struct objfs_listent *top = NULL;
	char *upto = NULL;
	int err = 0;

	pg.cap = dirs->n + files->n;
	if (pg.cap && !(pg.ents = malloc(pg.cap * sizeof(*pg.ents))))
		return -ENOMEM;
	if (dirs->n)
		memcpy(pg.ents, dirs->ents, dirs->n * sizeof(*pg.ents));
	if (files->n)
		memcpy(pg.ents + dirs->n, files->ents, files->n * sizeof(*pg.ents));
	pg.n = pg.cap;
	dirs->n = files->n = 0; /* the names are pg's now */
	for (size_t i = 0; i < pg.n; i++)
		if (!top || key_after(pg.ents[i].name, pg.ents[i].is_dir, top->name, top->is_dir))
			top = &pg.ents[i];
	if (top && asprintf(&upto, "%s%s", top->name, top->is_dir ? "/" : "") < 0)
		err = -ENOMEM;
	if (!err)
		err = fn(arg, &pg, upto);
	free(upto);
	objfs_listing_clear(&pg);
	return err;
}

/*
 * Bounded: entries, pages, repeated tokens, total time.
 * Pipelined: once a page has arrived its continuation token is picked out
 * by a plain search and the next page requested on a thread of its own
 * while this one is parsed and handed over; the parser's token must match,
 * or that request is dropped and the page asked for again. Each page costs
 * one round trip, not a round trip plus its parse (a 100,000-key listing at
 * 20 ms a request). Pages are handed to @fn as they come, so
 * readdir streams.
 */
static int s3_list_pages(struct objfs_store *st, const char *path, objfs_list_page_fn fn,
			 void *arg)
{
	struct s3_store *s = (struct s3_store *)st;
	struct objfs_listing files = { 0 }, dirs = { 0 };
	struct objfs_s3_page page = { 0 };
	struct objfs_s3_skips skipped = { 0 };
	struct token_set seen = { 0 };
	int64_t deadline = objfs_store_list_deadline(st);
	char *prefix, *token = NULL;
	unsigned pages = 0;
	size_t total = 0;
	int err;

	if (asprintf(&prefix, "%s%s%s", s->prefix, path, *path ? "/" : "") < 0)
		return -ENOMEM;
	files.max = dirs.max = st->lim.max_entries;
	{
		struct page_fetch cur = { s, prefix, NULL, deadline }, next;
		pthread_t th;
		int ahead = 0;

		page_fetch_run(&cur);
		for (;;) {
			char *qt = cur.err ? NULL : quick_token(&cur.r);

			pages++;
			ahead = 0;
			if (qt && pages < st->lim.max_pages) {
				next = (struct page_fetch){ s, prefix, qt, deadline };
				ahead = pthread_create(&th, NULL, page_fetch_run, &next) == 0;
				if (!ahead)
					free(qt);
			} else {
				free(qt);
			}
			err = list_page_parse(&cur.r, cur.err, prefix, &files, &dirs, &page);
			objfs_s3_skips_merge(&skipped, &page.skipped);
			page_fetch_clear(&cur);
			token = page.next_token;
			page.next_token = NULL;
			total += files.n + dirs.n;
			if (!err && total > st->lim.max_entries)
				err = -E2BIG;
			if (!err && page.truncated && token && pages >= st->lim.max_pages)
				err = -EMLINK;
			if (!err && page.truncated && token)
				err = token_add(&seen, token);
			if (!err)
				err = page_deliver(&dirs, &files, fn, arg);
			objfs_listing_clear(&files);
			objfs_listing_clear(&dirs);
			if (ahead)
				pthread_join(th, NULL);
			if (err || !page.truncated || !token) {
				if (ahead)
					page_fetch_clear(&next);
				break;
			}
			if (ahead && !strcmp(next.token, token)) {
				cur = next; /* the request already made is the right one */
				free(token);
				token = NULL;
			} else {
				if (ahead)
					page_fetch_clear(&next);
				cur = (struct page_fetch){ s, prefix, token, deadline };
				token = NULL;
				page_fetch_run(&cur);
			}
		}
	}
	free(token);
	free(seen.v);
	if (err == -E2BIG || err == -EMLINK || err == -ELOOP ||
	    (err == -ETIMEDOUT && objfs_now_ns() >= deadline))
		objfs_store_list_refused(st, path, err);
	if (skipped.n) { /* once per listing, at the default level: names the keys */
		char text[800];

		objfs_s3_skips_text(&skipped, text, sizeof(text));
		objfs_warn("listing '/%s': %u key(s) left out, not file names objfs can show: %s",
			   path, skipped.n, text);
	}
	objfs_debug("listed '%s' in %u page(s): %zu entries", prefix, pages, total);
	free(prefix);
	return err == -ECANCELED ? err : objfs_store_meta_errno(err); /* @fn's own stop */
}

/* s3_list's pages, gathered: directories and objects apart. */
struct list_acc {
	struct objfs_listing dirs, files;
};

static int list_acc_page(void *arg, const struct objfs_listing *pg, const char *upto)
{
	struct list_acc *acc = arg;

	(void)upto;
	for (size_t i = 0; i < pg->n; i++) {
		const struct objfs_listent *e = &pg->ents[i];
		struct objfs_listing *to = e->is_dir ? &acc->dirs : &acc->files;
		int rc = objfs_listing_add(to, e->name, strlen(e->name), e->is_dir, e->size,
					   e->mtime);

		if (rc == -ENOMEM)
			return rc;
		if (!rc && e->etag && objfs_listing_set_etag(to, &to->ents[to->n - 1], e->etag,
								 strlen(e->etag)))
			return -ENOMEM;
	}
	return 0;
}

/* The whole listing at once: every page (counted as any listing is:
 * objfs_store_list_pages), a directory hiding an object of the same name. */
static int s3_list(struct objfs_store *st, const char *path, struct objfs_listing *out)
{
	struct list_acc acc = { 0 };
	size_t hidden = 0;
	int err = objfs_store_list_pages(st, path, list_acc_page, &acc);

	/* Directories first, so dedupe keeps a directory over a same-named object. */
	for (size_t i = 0; !err && i < acc.dirs.n; i++)
		err = objfs_listing_add(out, acc.dirs.ents[i].name, strlen(acc.dirs.ents[i].name),
					1, -1, -1) == -ENOMEM ? -ENOMEM : 0;
	/* An object named like a directory is dropped here (-EEXIST) in small
	 * listings, by the dedupe below in large ones: count both. */
	for (size_t i = 0; !err && i < acc.files.n; i++) {
		struct objfs_listent *e = &acc.files.ents[i];
		int rc = objfs_listing_add(out, e->name, strlen(e->name), 0, e->size, e->mtime);

		if (rc == -ENOMEM)
			err = rc;
		else if (rc == -EEXIST)
			hidden++;
		else if (!rc && e->etag)
			err = objfs_listing_set_etag(out, &out->ents[out->n - 1], e->etag,
						     strlen(e->etag));
		/* copied: the names are not held twice while the copy grows */
		free(e->name);
		free(e->etag);
		e->name = e->etag = NULL;
	}
	if (!err) {
		size_t before = out->n;

		err = objfs_listing_dedupe(out);
		hidden += before - out->n;
		if (!err && hidden)
			objfs_info("listing '/%s': %zu object(s) hidden by a directory of the "
				   "same name", path, hidden);
	}
	objfs_listing_clear(&acc.files);
	objfs_listing_clear(&acc.dirs);
	if (err)
		objfs_listing_clear(out);
	return objfs_store_meta_errno(err);
}

static int s3_stat(struct objfs_store *st, const char *path, struct objfs_stat *out)
{
	struct s3_store *s = (struct s3_store *)st;
	struct s3_cookie *c = NULL;
	struct objfs_req r;
	int err = s3_build_key(s, "HEAD", path, &c);

	objfs_req_init(&r);
	if (!err)
		err = run_one(s, c, OBJFS_HEAD, &r);
	if (!err && r.status >= 300)
		err = -EIO;
	if (!err) {
		memset(out, 0, sizeof(*out));
		out->size = r.total;
		out->mtime = r.mtime;
		snprintf(out->etag, sizeof(out->etag), "%s", r.etag_out);
		if (out->size < 0)
			err = -EIO;
	}
	objfs_req_clear(&r);
	cookie_free(c);
	return objfs_store_meta_errno(err);
}

/*
 * One name, without listing its directory: a HEAD of the key and
 * a one-key listing of "KEY/" at once, as mountpoint-s3 does, two requests
 * and one round trip. Anything under "KEY/" (a marker object included)
 * makes it a directory, which wins over an object of the same name, as in
 * a listing.
 */
static int s3_lookup(struct objfs_store *st, const char *path, struct objfs_stat *out)
{
	struct s3_store *s = (struct s3_store *)st;
	struct objfs_listing files = { 0 }, dirs = { 0 };
	struct objfs_s3_page page = { 0 };
	struct s3_cookie *hc = NULL, *lc = NULL;
	struct objfs_req head, list, *rs[2] = { &head, &list };
	char *prefix = NULL;
	int err, herr, lerr;

	objfs_req_init(&head);
	objfs_req_init(&list);
	if (asprintf(&prefix, "%s%s/", s->prefix, path) < 0) {
		prefix = NULL;
		err = -ENOMEM;
		goto out;
	}
	err = s3_build_key(s, "HEAD", path, &hc);
	if (!err)
		err = list_page_build(s, prefix, NULL, 1, &lc);
	if (err)
		goto out;
	for (int again = 0;; again = 1) {
		int refused;

		head.url = hc->url;
		head.headers = hc->headers;
		head.method = OBJFS_HEAD;
		head.no_redirect = 1;
		list.url = lc->url;
		list.headers = lc->headers;
		list.method = OBJFS_GET;
		list.no_redirect = 1;
		list.body_max = LOOKUP_PAGE_MAX;
		list.deadline_ns = objfs_store_list_deadline(st);
		(void)objfs_engine_run(s->base.engine, rs, 2);
		/* the HEAD's answer has no body, so no code: the listing's tells */
		refused = s3_answered(s, hc, &head) | s3_answered(s, lc, &list);
		if (again || !refused || s3_headers(s, hc) || s3_headers(s, lc))
			break;
		objfs_req_clear(&head);
		objfs_req_clear(&list);
		objfs_req_init(&head);
		objfs_req_init(&list);
	}
	herr = head.err;
	lerr = list_page_parse(&list, list.err, prefix, &files, &dirs, &page);
	free(page.next_token);
	memset(out, 0, sizeof(*out));
	if (!lerr && page.entries) {
		out->is_dir = 1;
		out->size = out->mtime = -1;
	} else if (!herr && head.status < 300 && head.total >= 0) {
		out->size = head.total;
		out->mtime = head.mtime;
		snprintf(out->etag, sizeof(out->etag), "%s", head.etag_out);
	} else if (!herr && head.status >= 300) {
		err = -EIO;
	} else {
		/* both said nothing is there, or the one that failed explains */
		err = lerr && lerr != -ENOENT ? lerr : herr;
		if (!err)
			err = -EIO; /* a HEAD without a size */
	}
	objfs_debug("lookup '%s': %s", path, err ? strerror(-err) : out->is_dir ? "directory" :
		    "object");
out:
	objfs_listing_clear(&files);
	objfs_listing_clear(&dirs);
	objfs_req_clear(&head);
	objfs_req_clear(&list);
	cookie_free(hc);
	cookie_free(lc);
	free(prefix);
	return objfs_store_meta_errno(err);
}

/* @c's request as @r's URL and headers (borrowed from @c). */
static void cookie_into(const struct s3_cookie *c, struct objfs_req *r)
{
	r->url = c->url;
	r->headers = c->headers;
	r->no_redirect = 1;
}

static int s3_prepare(struct objfs_store *st, const char *path, struct objfs_req *r,
		      void **cookie)
{
	struct s3_store *s = (struct s3_store *)st;
	struct s3_cookie *c = NULL;
	int err = s3_build_key(s, "GET", path, &c);

	if (err)
		return err;
	cookie_into(c, r);
	*cookie = c;
	return 0;
}

static int s3_refused(struct objfs_store *st, void *cookie, const struct objfs_req *r)
{
	return s3_answered((struct s3_store *)st, cookie, r);
}

static int s3_resign(struct objfs_store *st, void *cookie, struct objfs_req *r)
{
	struct s3_cookie *c = cookie;
	int err = s3_headers((struct s3_store *)st, c);

	if (!err)
		cookie_into(c, r);
	return err;
}

static void s3_release(struct objfs_store *st, void *cookie)
{
	(void)st;
	cookie_free(cookie);
}

static void s3_free(struct objfs_store *st)
{
	struct s3_store *s = (struct s3_store *)st;

	free(s->bucket);
	free(s->prefix);
	free(s->origin);
	free(s->host);
	free(s->path_base);
	free(s->region);
	free(s->endpoint);
	objfs_sigv4_free(s->signer);
	objfs_creds_provider_free(s->creds);
	free(s);
}

static const struct objfs_store_ops s3_ops = {
	.name = "s3",
	.list = s3_list,
	.list_pages = s3_list_pages,
	.stat = s3_stat,
	.lookup = s3_lookup,
	.prepare = s3_prepare,
	.refused = s3_refused,
	.resign = s3_resign,
	.release = s3_release,
	.free = s3_free,
};

/* ---- construction ---- */

static const char *first_env(const char *a, const char *b)
{
	const char *v = getenv(a);

	if (v && *v)
		return v;
	v = b ? getenv(b) : NULL;
	return v && *v ? v : NULL;
}

void objfs_s3_where_clear(struct objfs_s3_where *w)
{
	if (!w)
		return;
	free(w->region);
	free(w->endpoint);
	memset(w, 0, sizeof(*w));
}

int objfs_s3_resolve_cfg(const struct objfs_s3_cfg *o, const struct objfs_aws_profile *prof,
			 struct objfs_s3_where *out)
{
	const char *region = o->region ? o->region : first_env("AWS_REGION", "AWS_DEFAULT_REGION");
	const char *endpoint = o->endpoint ? o->endpoint :
			       first_env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL");

	memset(out, 0, sizeof(*out));
	if (!region)
		region = prof->region ? prof->region : "us-east-1";
	if (!endpoint)
		endpoint = prof->endpoint_url;
	out->region = strdup(region);
	if (endpoint) {
		out->endpoint = strdup(endpoint);
		out->vhost = o->virtual_host && !o->path_style;
	} else {
		if (asprintf(&out->endpoint, "https://s3.%s.amazonaws.com", region) < 0)
			out->endpoint = NULL;
		out->vhost = !o->path_style;
	}
	if (!out->region || !out->endpoint) {
		objfs_s3_where_clear(out);
		return -ENOMEM;
	}
	return 0;
}

/* Bucket and prefix of @src ("s3://bucket[/prefix]"). 0 or -errno, @msg set. */
static int s3_source(struct s3_store *s, const char *src, char *msg, size_t msglen)
{
	const char *rest = src + 5; /* "s3://" */
	const char *slash = strchr(rest, '/'), *p = slash ? slash + 1 : "";
	size_t n = strlen(p);

	s->bucket = slash ? strndup(rest, (size_t)(slash - rest)) : strdup(rest);
	if (!s->bucket)
		return -ENOMEM;
	if (!objfs_s3_bucket_valid(s->bucket)) {
		snprintf(msg, msglen, "'%s': bucket name must be 3 or more letters, digits, "
			 "'.', '-' or '_'", src);
		return -EINVAL;
	}
	if (asprintf(&s->prefix, "%s%s", p, (n && p[n - 1] != '/') ? "/" : "") < 0) {
		s->prefix = NULL;
		return -ENOMEM;
	}
	return 0;
}

/*
 * Where requests go, from s->endpoint and s->bucket: the origin, the Host
 * header (the bucket leads the host name when @vhost) and the path base
 * ("/bucket" in path style). 0 or -errno, @msg set for an endpoint that is
 * not a bare origin.
 */
static int s3_origin(struct s3_store *s, int vhost, char *msg, size_t msglen)
{
	struct objfs_url ep = { 0 };
	const char *why = NULL;
	char port[16] = "", *eb = NULL;
	int err = objfs_url_parse(s->endpoint, &ep, &why);

	if (err || strcmp(ep.path, "/") != 0) {
		snprintf(msg, msglen, "bad endpoint '%s': %s", s->endpoint,
			 err ? why : "it must not have a path");
		err = -EINVAL;
		goto out;
	}
	if (vhost && strchr(s->bucket, '.') && strcmp(ep.scheme, "https") == 0)
		objfs_warn("bucket names with dots do not match the TLS certificate in virtual-"
			   "host style; consider -o path_style");
	if (ep.port != (strcmp(ep.scheme, "https") == 0 ? 443 : 80))
		snprintf(port, sizeof(port), ":%d", ep.port);
	if (asprintf(&s->host, "%s%s%s%s", vhost ? s->bucket : "", vhost ? "." : "", ep.host,
		     port) < 0)
		s->host = NULL;
	if (s->host && asprintf(&s->origin, "%s://%s", ep.scheme, s->host) < 0)
		s->origin = NULL;
	if (vhost)
		s->path_base = strdup("");
	else if ((eb = objfs_url_encode(s->bucket, strlen(s->bucket), 0)) &&
		 asprintf(&s->path_base, "/%s", eb) < 0)
		s->path_base = NULL;
	err = s->host && s->origin && s->path_base ? 0 : -ENOMEM;
out:
	free(eb);
	objfs_url_clear(&ep);
	return err;
}

/* Explains a failed probe of the bucket in one line. */
static void probe_message(struct s3_store *s, const struct objfs_req *r, int err, char *msg,
			  size_t len)
{
	const char *code = r->s3_code;

	if (r->amz_region[0] && strcmp(r->amz_region, s->region) != 0)
		snprintf(msg, len, "bucket '%s' is in region %s, not %s: add -o region=%s",
			 s->bucket, r->amz_region, s->region, r->amz_region);
	else if (strcmp(code, "SignatureDoesNotMatch") == 0)
		snprintf(msg, len, "signature rejected by %s (SignatureDoesNotMatch): the "
			 "secret key does not match the access key", s->endpoint);
	else if (strcmp(code, "InvalidAccessKeyId") == 0)
		snprintf(msg, len, "access key not known to %s (InvalidAccessKeyId): check "
			 "the credentials or the endpoint%s", s->endpoint,
			 objfs_creds_has_token(s->creds) ? "; with a session token, the temporary "
			 "credentials may have expired or the token may not match" : "");
	else if (strcmp(code, "ExpiredToken") == 0 || strcmp(code, "InvalidToken") == 0 ||
		 strcmp(code, "TokenRefreshRequired") == 0 ||
		 (strcmp(code, "InvalidArgument") == 0 && objfs_creds_has_token(s->creds)))
		/* RGW says InvalidArgument for a token it cannot decode */
		snprintf(msg, len, "session token rejected by %s (%s): the temporary "
			 "credentials expired or do not belong together; get new ones "
			 "(AWS_SESSION_TOKEN or the profile's aws_session_token)", s->endpoint, code);
	else if (strcmp(code, "RequestTimeTooSkewed") == 0)
		snprintf(msg, len, "this machine's clock is too far from %s's "
			 "(RequestTimeTooSkewed): fix the clock, e.g. enable NTP", s->endpoint);
	else if (strcmp(code, "AuthorizationHeaderMalformed") == 0 ||
		 strcmp(code, "PermanentRedirect") == 0 || (r->status >= 300 && r->status < 400))
		snprintf(msg, len, "bucket '%s' is not in region %s (%s): set -o region= to the "
			 "bucket's region", s->bucket, s->region, code[0] ? code : "redirect");
	else if (strcmp(code, "NoSuchBucket") == 0 || (err == -ENOENT))
		snprintf(msg, len, "bucket '%s' does not exist at %s", s->bucket, s->endpoint);
	else if (err == -EACCES && !r->status)
		/* no HTTP answer at all: curl refused the server's certificate */
		snprintf(msg, len, "TLS certificate of %s not trusted (verification failed): "
			 "pass -o ca_file=PATH with the CA that signed it", s->endpoint);
	else if (strcmp(code, "AccessDenied") == 0 || err == -EACCES)
		snprintf(msg, len, "access to bucket '%s' denied (%s): check the credentials "
			 "and their s3:ListBucket permission%s", s->bucket,
			 code[0] ? code : "HTTP 403", s->creds ? "" : " (no_sign is set)");
	else if (err == -EHOSTUNREACH)
		snprintf(msg, len, "cannot reach %s: its host name could not be resolved (DNS): "
			 "check the endpoint", s->endpoint);
	else if (err == -ECONNREFUSED || err == -ETIMEDOUT)
		snprintf(msg, len, "cannot reach %s: %s", s->endpoint, strerror(-err));
	else if (err == -EPROTO)
		snprintf(msg, len, "%s did not answer with an S3 listing: is it an S3 endpoint?",
			 s->endpoint);
	else
		snprintf(msg, len, "listing bucket '%s' at %s failed: %s%s%s", s->bucket,
			 s->endpoint, strerror(-err), code[0] ? " " : "", code);
}

/*
 * Lists one key under the prefix: a bad key, secret, region or bucket fails
 * the mount here, with @msg naming the fix. 0 or -errno.
 */
static int s3_probe(struct s3_store *s, int vhost, char *msg, size_t msglen)
{
	struct objfs_listing f = { 0 }, d = { 0 };
	struct objfs_s3_page page = { 0 };
	struct objfs_req r;
	int err = list_page(s, s->prefix, NULL, 1, objfs_store_list_deadline(&s->base), &f, &d,
			    &page, &r);

	if (err) {
		probe_message(s, &r, err, msg, msglen);
		goto out;
	}
	objfs_info("s3: bucket '%s' prefix '%s' at %s (%s style, region %s)", s->bucket,
		   s->prefix, s->origin, vhost ? "virtual-host" : "path", s->region);
	/* A prefix is no object: nothing under it is not an error (it may be
	 * filled later), but most often a typo, so say so. */
	if (s->prefix[0] && f.n == 0 && d.n == 0)
		objfs_warn("nothing to show under prefix '%s' of bucket '%s' (yet): the mount "
			   "starts empty", s->prefix, s->bucket);
out:
	objfs_req_clear(&r);
	free(page.next_token);
	objfs_listing_clear(&f);
	objfs_listing_clear(&d);
	return err;
}

int objfs_store_s3_new(const char *src, const struct objfs_s3_cfg *o,
		       struct objfs_engine *engine, size_t chunk_size,
		       const struct objfs_list_limits *lim, struct objfs_store **out, char *msg,
		       size_t msglen)
{
	struct s3_store *s = calloc(1, sizeof(*s));
	struct objfs_aws_profile prof = { 0 };
	struct objfs_s3_where w = { 0 };
	int err;

	if (!s)
		return -ENOMEM;
	err = objfs_store_init(&s->base, &s3_ops, engine, chunk_size);
	if (!err)
		objfs_store_set_limits(&s->base, lim);
	if (!err)
		err = s3_source(s, src, msg, msglen);
	if (!err)
		err = objfs_aws_profile_load(o->profile, &prof, msg, msglen);
	if (!err)
		err = objfs_s3_resolve_cfg(o, &prof, &w);
	if (err)
		goto out;
	s->region = w.region;     /* the store owns them from here */
	s->endpoint = w.endpoint;
	err = s3_origin(s, w.vhost, msg, msglen);
	if (err)
		goto out;
	err = objfs_sigv4_new(&s->signer);
	if (!err && !o->no_sign)
		err = objfs_creds_provider_new(o->profile, 0, &s->creds, msg, msglen);
	if (err) {
		if (!msg[0])
			snprintf(msg, msglen, "credentials: %s", strerror(-err));
		goto out;
	}
	s->base.auth = "anonymous (no_sign)";
	if (s->creds) {
		struct objfs_creds cr;

		if (!objfs_creds_get(s->creds, &cr)) {
			s->base.auth = cr.source; /* static */
			objfs_creds_clear(&cr);
		}
	}
	err = s3_probe(s, w.vhost, msg, msglen);
out:
	objfs_aws_profile_clear(&prof);
	if (err)
		objfs_store_free(&s->base);
	else
		*out = &s->base;
	return err;
}
