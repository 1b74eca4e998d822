/*
 * sigv4: see sigv4.h.
 *
 * Canonicalisation follows the SigV4 specification:
 *   canonical request = METHOD \n URI \n QUERY \n HEADERS \n SIGNED \n PAYLOAD
 * with the URI normalised and encoded (S3: as sent), query parameters
 * encoded and sorted by name then value, header names lower-cased, values
 * trimmed with inner runs of spaces folded, headers sorted and repeated
 * names joined with ','. Every intermediate string is built in a growable
 * buffer with a hard cap, so hostile input cannot make it unbounded.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "secret.h"
#include "sigv4.h"

#define CANON_MAX (1u << 20)
#define KEY_SLOTS 4

/* ---- a small bounded string builder ---- */

struct sb {
	char *p;
	size_t n, cap;
	int err;
};

static void sb_add(struct sb *b, const char *s, size_t n)
{
	if (b->err)
		return;
	if (b->n + n + 1 > CANON_MAX) {
		b->err = -EINVAL;
		return;
	}
	if (objfs_buf_reserve(&b->p, &b->cap, b->n + n + 1, 256)) {
		b->err = -ENOMEM;
		return;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}

static void sb_str(struct sb *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

static void sb_chr(struct sb *b, char c)
{
	sb_add(b, &c, 1);
}

/* Appends AWS UriEncode(@s[0..n)): unreserved stay, the rest %XX. */
static void sb_uri_encode(struct sb *b, const char *s, size_t n, int keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
		    (keep_slash && c == '/')) {
			sb_chr(b, (char)c);
		} else {
			char e[3] = { '%', hex[c >> 4], hex[c & 15] };

			sb_add(b, e, 3);
		}
	}
}

/* ---- hashing ---- */

void objfs_sha256_hex(const void *data, size_t len, char out[65])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[32];
	unsigned int mdlen = 0;

	EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL);
	for (unsigned i = 0; i < 32; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 15];
	}
	out[64] = '\0';
}

static void hmac(const void *key, size_t keylen, const void *msg, size_t len,
		 unsigned char out[32])
{
	unsigned int outlen = 32;

	HMAC(EVP_sha256(), key, (int)keylen, msg, len, out, &outlen);
}

void objfs_sigv4_amz_date(time_t now, char out[17])
{
	struct tm tm;

	gmtime_r(&now, &tm);
	strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
}

/* ---- canonical URI ---- */

/* Generic services: remove dot segments and empty segments, then encode. */
static void canon_uri_generic(struct sb *b, const char *path)
{
	const char *segs[256];
	size_t lens[256], n = 0, plen = strlen(path);
	const char *p = path;

	while (*p) {
		const char *e = strchr(p, '/');
		size_t l = e ? (size_t)(e - p) : strlen(p);

		if (l == 0 || (l == 1 && p[0] == '.')) {
			/* skip */
		} else if (l == 2 && p[0] == '.' && p[1] == '.') {
			if (n)
				n--;
		} else if (n < 256) {
			segs[n] = p;
			lens[n++] = l;
		} else {
			b->err = -EINVAL;
			return;
		}
		p += l;
		if (*p == '/')
			p++;
	}
	for (size_t i = 0; i < n; i++) {
		sb_chr(b, '/');
		sb_uri_encode(b, segs[i], lens[i], 0);
	}
	if (n == 0 || (plen && path[plen - 1] == '/'))
		sb_chr(b, '/');
}

/* ---- canonical query ---- */

struct param {
	char *k, *v;
};

static int cmp_param(const void *a, const void *b)
{
	const struct param *x = a, *y = b;
	int c = strcmp(x->k, y->k);

	return c ? c : strcmp(x->v, y->v);
}

static char *encoded(const char *s, size_t n, int s3)
{
	struct sb b = { 0 };

	if (s3)
		sb_add(&b, s, n); /* already in wire (= canonical) form */
	else
		sb_uri_encode(&b, s, n, 0);
	if (!b.p && !b.err)
		sb_add(&b, "", 0);
	if (b.err) {
		free(b.p);
		return NULL;
	}
	return b.p;
}

static void canon_query(struct sb *b, const char *q, int s3)
{
	struct param *ps = NULL;
	size_t n = 0, cap = 0;
	const char *p = q;

	while (*p && !b->err) {
		const char *e = strchr(p, '&'), *eq;
		size_t l = e ? (size_t)(e - p) : strlen(p);

		if (l) {
			if (n == cap) {
				size_t nc = cap ? cap * 2 : 16;
				struct param *np = nc > 4096 ? NULL : realloc(ps, nc * sizeof(*ps));

				if (!np) {
					b->err = nc > 4096 ? -EINVAL : -ENOMEM;
					break;
				}
				ps = np;
				cap = nc;
			}
			eq = memchr(p, '=', l);
			ps[n].k = encoded(p, eq ? (size_t)(eq - p) : l, s3);
			ps[n].v = eq ? encoded(eq + 1, l - (size_t)(eq + 1 - p), s3) : strdup("");
			if (!ps[n].k || !ps[n].v) {
				free(ps[n].k);
				free(ps[n].v);
				b->err = -ENOMEM;
				break;
			}
			n++;
		}
		p += l;
		if (*p == '&')
			p++;
	}
	if (!b->err && n)
		qsort(ps, n, sizeof(*ps), cmp_param);
	for (size_t i = 0; i < n; i++) {
		if (i)
			sb_chr(b, '&');
		sb_str(b, ps[i].k);
		sb_chr(b, '=');
		sb_str(b, ps[i].v);
		free(ps[i].k);
		free(ps[i].v);
	}
	free(ps);
}

/* ---- canonical headers ---- */

struct hdr {
	char *name; /* lower case */
	char *value; /* trimmed, spaces folded */
	size_t order;
};

static int cmp_hdr(const void *a, const void *b)
{
	const struct hdr *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	if (c)
		return c;
	return x->order < y->order ? -1 : x->order > y->order;
}

static int parse_headers(const char *const *in, struct hdr **out, size_t *nout)
{
	size_t n = 0;
	struct hdr *h;

	while (in && in[n])
		n++;
	if (n > 256)
		return -EINVAL;
	h = calloc(n ? n : 1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const char *colon = strchr(in[i], ':'), *v;
		char *o;

		if (!colon || colon == in[i]) {
			*nout = i;
			*out = h;
			return -EINVAL;
		}
		h[i].order = i;
		h[i].name = strndup(in[i], (size_t)(colon - in[i]));
		h[i].value = malloc(strlen(colon) + 1);
		if (!h[i].name || !h[i].value) {
			*nout = i + 1;
			*out = h;
			return -ENOMEM;
		}
		for (o = h[i].name; *o; o++)
			*o = (char)tolower((unsigned char)*o);
		v = colon + 1;
		while (*v == ' ' || *v == '\t')
			v++;
		o = h[i].value;
		for (; *v; v++) {
			if (*v == ' ' || *v == '\t' || *v == '\r' || *v == '\n') {
				if (o > h[i].value && o[-1] != ' ')
					*o++ = ' ';
			} else {
				*o++ = *v;
			}
		}
		while (o > h[i].value && o[-1] == ' ')
			o--;
		*o = '\0';
	}
	if (n)
		qsort(h, n, sizeof(*h), cmp_hdr);
	*out = h;
	*nout = n;
	return 0;
}

static void free_headers(struct hdr *h, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(h[i].name);
		free(h[i].value);
	}
	free(h);
}

/* Appends the canonical header block; also returns the signed-headers list. */
static void canon_headers(struct sb *b, struct sb *signed_list, const struct hdr *h, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int first = i == 0 || strcmp(h[i].name, h[i - 1].name) != 0;

		if (first) {
			if (i)
				sb_chr(b, '\n');
			sb_str(b, h[i].name);
			sb_chr(b, ':');
			if (signed_list->n)
				sb_chr(signed_list, ';');
			sb_str(signed_list, h[i].name);
		} else {
			sb_chr(b, ',');
		}
		sb_str(b, h[i].value);
	}
	sb_chr(b, '\n');
}

static int canonical(const struct objfs_sigv4_req *r, char **out, char **signed_headers)
{
	struct sb b = { 0 }, sl = { 0 };
	struct hdr *h = NULL;
	size_t nh = 0;
	int err;

	if (!r->method || !r->path || !r->payload_hash || !r->region || !r->service)
		return -EINVAL;
	err = parse_headers(r->headers, &h, &nh);
	if (err) {
		free_headers(h, nh);
		return err;
	}
	sb_str(&b, r->method);
	sb_chr(&b, '\n');
	if (r->s3)
		sb_str(&b, *r->path ? r->path : "/");
	else
		canon_uri_generic(&b, r->path);
	sb_chr(&b, '\n');
	canon_query(&b, r->query ? r->query : "", r->s3);
	sb_chr(&b, '\n');
	canon_headers(&b, &sl, h, nh);
	sb_chr(&b, '\n');
	sb_str(&b, sl.p ? sl.p : "");
	sb_chr(&b, '\n');
	sb_str(&b, r->payload_hash);
	free_headers(h, nh);
	err = b.err ? b.err : sl.err;
	if (err) {
		free(b.p);
		free(sl.p);
		return err;
	}
	*out = b.p;
	if (signed_headers)
		*signed_headers = sl.p ? sl.p : strdup("");
	else
		free(sl.p);
	return 0;
}

int objfs_sigv4_canonical_request(const struct objfs_sigv4_req *r, char **out)
{
	return canonical(r, out, NULL);
}

int objfs_sigv4_string_to_sign(const struct objfs_sigv4_req *r, const char *amz_date,
			       const char *canon, char **out)
{
	char hash[65];

	if (strlen(amz_date) != 16)
		return -EINVAL;
	objfs_sha256_hex(canon, strlen(canon), hash);
	if (asprintf(out, "AWS4-HMAC-SHA256\n%s\n%.8s/%s/%s/aws4_request\n%s", amz_date,
		     amz_date, r->region, r->service, hash) < 0)
		return -ENOMEM;
	return 0;
}

/* ---- signing key cache ---- */

struct key_slot {
	char date[9];
	char region[64];
	char service[32];
	unsigned char secret_id[32]; /* SHA-256 of the secret, never the secret */
	unsigned char key[32];
	int used;
};

struct objfs_sigv4 {
	pthread_mutex_t lock;
	struct key_slot slots[KEY_SLOTS];
	unsigned next;
};

int objfs_sigv4_new(struct objfs_sigv4 **out)
{
	/* the cache holds signing keys: out of core dumps, wiped when freed */
	struct objfs_sigv4 *s = objfs_secret_alloc(sizeof(*s));

	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->lock, NULL);
	*out = s;
	return 0;
}

void objfs_sigv4_free(struct objfs_sigv4 *s)
{
	if (!s)
		return;
	pthread_mutex_destroy(&s->lock);
	objfs_secret_free(s); /* wipes */
}

static void derive(const char *secret, const char *date, const char *region,
		   const char *service, unsigned char out[32])
{
	size_t sl = strlen(secret);
	char *k = objfs_secret_alloc(sl + 5);
	unsigned char a[32], b[32];

	if (!k) {
		memset(out, 0, 32);
		return;
	}
	memcpy(k, "AWS4", 4);
	memcpy(k + 4, secret, sl + 1);
	hmac(k, sl + 4, date, 8, a);
	hmac(a, 32, region, strlen(region), b);
	hmac(b, 32, service, strlen(service), a);
	hmac(a, 32, "aws4_request", 12, out);
	explicit_bzero(a, sizeof(a));
	explicit_bzero(b, sizeof(b));
	objfs_secret_free(k); /* wipes */
}

static void signing_key(struct objfs_sigv4 *s, const char *secret, const char *date8,
			const char *region, const char *service, unsigned char out[32])
{
	unsigned char id[32];
	unsigned int idlen = 0;
	struct key_slot *k;

	EVP_Digest(secret, strlen(secret), id, &idlen, EVP_sha256(), NULL);
	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < KEY_SLOTS; i++) {
		k = &s->slots[i];
		if (k->used && strncmp(k->date, date8, 8) == 0 && strcmp(k->region, region) == 0 &&
		    strcmp(k->service, service) == 0 && memcmp(k->secret_id, id, 32) == 0) {
			memcpy(out, k->key, 32);
			pthread_mutex_unlock(&s->lock);
			return;
		}
	}
	derive(secret, date8, region, service, out);
	if (strlen(region) < sizeof(k->region) && strlen(service) < sizeof(k->service)) {
		k = &s->slots[s->next++ % KEY_SLOTS];
		memcpy(k->date, date8, 8);
		k->date[8] = '\0';
		strcpy(k->region, region);
		strcpy(k->service, service);
		memcpy(k->secret_id, id, 32);
		memcpy(k->key, out, 32);
		k->used = 1;
	}
	pthread_mutex_unlock(&s->lock);
}

int objfs_sigv4_authorization(struct objfs_sigv4 *s, const struct objfs_sigv4_creds *c,
			      const struct objfs_sigv4_req *r, const char *amz_date,
			      char *authorization, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	char *canon = NULL, *sts = NULL, *signed_hdrs = NULL, sig[65];
	unsigned char key[32], mac[32];
	int err, n;

	if (!c || !c->access_key || !c->secret_key || strlen(amz_date) != 16)
		return -EINVAL;
	err = canonical(r, &canon, &signed_hdrs);
	if (!err)
		err = objfs_sigv4_string_to_sign(r, amz_date, canon, &sts);
	if (err)
		goto out;
	signing_key(s, c->secret_key, amz_date, r->region, r->service, key);
	hmac(key, 32, sts, strlen(sts), mac);
	explicit_bzero(key, sizeof(key));
	for (unsigned i = 0; i < 32; i++) {
		sig[2 * i] = hex[mac[i] >> 4];
		sig[2 * i + 1] = hex[mac[i] & 15];
	}
	sig[64] = '\0';
	n = snprintf(authorization, len,
		     "AWS4-HMAC-SHA256 Credential=%s/%.8s/%s/%s/aws4_request, "
		     "SignedHeaders=%s, Signature=%s", c->access_key, amz_date, r->region,
		     r->service, signed_hdrs, sig);
	if (n < 0 || (size_t)n >= len)
		err = -EINVAL;
out:
	free(canon);
	free(sts);
	free(signed_hdrs);
	return err;
}
