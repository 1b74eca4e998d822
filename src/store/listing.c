/*
 * listing: see listing.h.
 *
 * Design
 *
 * A listing is a plain growable array of entries (capacity doubles, so
 * appending is amortised O(1)). The two parsers turn untrusted server output
 * into entries and enforce the invariants promised in listing.h:
 *
 *  - every name passes objfs_name_valid() (1..255 bytes, not "." or "..",
 *    no '/', no NUL);
 *  - names are unique, the first occurrence wins, order is otherwise that of
 *    the server.
 *
 * Duplicates. Directories with 100,000 entries are normal for object stores,
 * so a linear scan per entry (O(n^2), seconds of CPU) is not acceptable and
 * struct objfs_listing has no room for a hash index. Instead the parsers
 * append without looking for duplicates and finish with one objfs_listing_dedupe() pass:
 * sort pointers to the entries by (name, position), drop every entry whose
 * name equals its predecessor's in that order, then compact the array in its
 * original order. O(n log n), with one temporary array of n pointers.
 * objfs_listing_add() on its own only checks for duplicates while the
 * listing is small (fewer than DUP_SCAN_MAX entries); for larger listings
 * built by hand a duplicate is appended and only a later parse removes it.
 *
 * JSON is nginx "autoindex_format json": an array of objects with "name"
 * (raw UTF-8, not percent-encoded), "type" ("file", "directory", "other";
 * "other" is skipped, "link" from look-alike servers counts as a file),
 * "mtime" (RFC 1123 date) and "size" (files only). A body that is not such an
 * array is -EPROTO and leaves the listing empty; single bad elements are
 * skipped. Dates are parsed with strptime() under a thread-local C locale,
 * since the process locale may not be English.
 *
 * HTML is parsed with libxml2's forgiving HTML parser and we look only at
 * <a href>. The href rules (on the raw, still percent-encoded value):
 * anything with '?' or '#', a scheme (':' before the first '/'), a
 * network-path ("//host"), or raw control characters is ignored. An href
 * starting with '/' is decoded and must start with the (decoded) directory
 * path; the rest is then handled like a relative href. A relative href
 * loses any leading "./"; "." and ".." (and anything under "../") are
 * ignored; what remains must be one path component with an optional
 * trailing '/' (which marks a directory). The component is then
 * percent-decoded ('+' stays '+'); malformed escapes and escapes of NUL drop
 * the link. Servers percent-encode non-ASCII bytes; a raw byte that is not
 * UTF-8 reaches us only as libxml2's Latin-1 guess. An empty body is an empty
 * listing. The document tree is walked iteratively so hostile nesting cannot
 * exhaust the stack. JSON is read one array element at a time, so no tree
 * of the whole body is built (a 1M-entry nginx index built one of over
 * 1 GB). HTML neither: libxml2's HTML parser runs with one SAX callback,
 * for start tags, on the same parser context htmlReadMemory() uses (so the
 * same encoding detection and recovery), and builds no document (a review
 * measured 481 MiB for a 17 MiB page of links as a tree, ~7 GiB at the
 * body cap).
 *
 * Caps: a listing holds at most l->max entries (max_dir_entries) and
 * l->max_bytes of what its entries stand for in the daemon (max_dir_bytes,
 * objfs_listent_bytes: the node each becomes, not only the copy here); one
 * more stops the parse with -E2BIG or -EFBIG and an empty listing.
 *
 * Errors: on any failure (-EPROTO, -E2BIG, -EFBIG, -ENOMEM) both parsers leave the listing
 * empty, so a caller never sees half a directory.
 *
 * Thread safety: functions touch only the listing passed in. libxml2 wants
 * xmlInitParser() called once by the main thread before threads start.
 */
#include "config.h"

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strptime, timegm; config.h normally defines it */
#endif

#include <errno.h>
#include <limits.h>
#include <locale.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>
#include <libxml/HTMLparser.h>
#include <libxml/tree.h>

#include "buf.h"
#include "listing.h"
#include "log.h"
#include "range.h"
#include "url.h"

/* objfs_listing_add() scans for duplicates only below this many entries. */
#define DUP_SCAN_MAX 64
/* How much of a rejected name a debug line shows. */
#define LOG_NAME_MAX 48
#define NAME_MAX_BYTES 255

/*
 * Log that an entry was skipped. Names come from the network: show at most
 * LOG_NAME_MAX bytes with anything unprintable replaced by '?'.
 */
static void log_skip(const char *why, const char *name, size_t len)
{
	char buf[LOG_NAME_MAX + 1];
	size_t n = len < LOG_NAME_MAX ? len : LOG_NAME_MAX;

	if (objfs_log_get_level() < OBJFS_LOG_DEBUG)
		return;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)name[i];

		buf[i] = (c < 0x20 || c == 0x7f || c == '"') ? '?' : (char)c;
	}
	buf[n] = '\0';
	objfs_debug("listing: skipping entry with %s \"%s%s\" (%zu bytes)", why,
		    buf, len > n ? "..." : "", len);
}

void objfs_listing_clear(struct objfs_listing *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++) {
		free(l->ents[i].name);
		free(l->ents[i].etag);
	}
	free(l->ents);
	l->ents = NULL;
	l->n = 0;
	l->cap = 0;
	l->bytes = 0;
}

/* What an entry with a name of @namelen bytes and an ETag of @etaglen
 * bytes (SIZE_MAX: none) stands for. */
static size_t ent_bytes(size_t namelen, size_t etaglen)
{
	return OBJFS_LISTENT_BYTES + namelen + 1 + (etaglen == SIZE_MAX ? 0 : etaglen + 1);
}

size_t objfs_listent_bytes(const struct objfs_listent *e)
{
	return ent_bytes(strlen(e->name), e->etag ? strlen(e->etag) : SIZE_MAX);
}

/* Whether @more bytes take @l past its max_bytes (l->bytes never is). */
static int over_bytes(const struct objfs_listing *l, size_t more)
{
	return l->max_bytes && more > l->max_bytes - l->bytes;
}

void objfs_listing_truncate(struct objfs_listing *l, size_t n)
{
	while (l->n > n) {
		l->n--;
		l->bytes -= objfs_listent_bytes(&l->ents[l->n]);
		free(l->ents[l->n].name);
		free(l->ents[l->n].etag);
	}
}

int objfs_name_valid(const char *name, size_t len)
{
	if (!name || len == 0 || len > NAME_MAX_BYTES)
		return 0;
	if (name[0] == '.' && (len == 1 || (len == 2 && name[1] == '.')))
		return 0;
	if (memchr(name, '/', len) || memchr(name, '\0', len))
		return 0;
	return 1;
}

static int grow(struct objfs_listing *l)
{
	struct objfs_listent *ents;
	size_t cap;

	if (l->n < l->cap)
		return 0;
	cap = l->cap ? l->cap : 16;
	if (l->cap) {
		if (cap > SIZE_MAX / 2)
			return -ENOMEM;
		cap *= 2;
	}
	if (cap > SIZE_MAX / sizeof(*ents))
		return -ENOMEM;
	ents = realloc(l->ents, cap * sizeof(*ents));
	if (!ents)
		return -ENOMEM;
	l->ents = ents;
	l->cap = cap;
	return 0;
}

/* Validate and append; duplicates are the caller's business. */
static int append(struct objfs_listing *l, const char *name, size_t len,
		  int is_dir, int64_t size, int64_t mtime)
{
	struct objfs_listent *e;
	char *copy;
	int rc;

	if (!objfs_name_valid(name, len)) {
		log_skip("invalid name", name ? name : "", name ? len : 0);
		return -EINVAL;
	}
	if (l->max && l->n >= l->max)
		return -E2BIG;
	if (over_bytes(l, ent_bytes(len, SIZE_MAX)))
		return -EFBIG;
	rc = grow(l);
	if (rc)
		return rc;
	copy = malloc(len + 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, name, len);
	copy[len] = '\0';
	e = &l->ents[l->n++];
	e->name = copy;
	e->is_dir = is_dir ? 1 : 0;
	e->size = size;
	e->mtime = mtime;
	e->etag = NULL;
	l->bytes += ent_bytes(len, SIZE_MAX);
	return 0;
}

int objfs_listing_set_etag(struct objfs_listing *l, struct objfs_listent *e, const char *etag,
			   size_t len)
{
	size_t was = objfs_listent_bytes(e), now;
	char *copy;

	len = strnlen(etag, len);
	now = ent_bytes(strlen(e->name), len);
	if (now > was && over_bytes(l, now - was))
		return -EFBIG;
	copy = strndup(etag, len);
	if (!copy)
		return -ENOMEM;
	free(e->etag);
	e->etag = copy;
	l->bytes = l->bytes - was + now;
	return 0;
}

int objfs_listing_add(struct objfs_listing *l, const char *name, size_t namelen,
		      int is_dir, int64_t size, int64_t mtime)
{
	if (objfs_name_valid(name, namelen) && l->n < DUP_SCAN_MAX) {
		for (size_t i = 0; i < l->n; i++) {
			if (strlen(l->ents[i].name) == namelen &&
			    memcmp(l->ents[i].name, name, namelen) == 0) {
				log_skip("duplicate name", name, namelen);
				return -EEXIST;
			}
		}
	}
	return append(l, name, namelen, is_dir, size, mtime);
}

/* Order by name, then by position in the array (earlier first). */
static int cmp_ent_ptr(const void *a, const void *b)
{
	const struct objfs_listent *x = *(const struct objfs_listent *const *)a;
	const struct objfs_listent *y = *(const struct objfs_listent *const *)b;
	int c = strcmp(x->name, y->name);

	if (c)
		return c;
	return x < y ? -1 : x > y;
}

/*
 * Remove later duplicates, keeping the first occurrence of each name and the
 * order of the survivors. Returns 0 or -ENOMEM (listing unchanged).
 */
int objfs_listing_dedupe(struct objfs_listing *l)
{
	struct objfs_listent **p;
	size_t i, j;

	if (l->n < 2)
		return 0;
	p = malloc(l->n * sizeof(*p)); /* n <= cap, cap * sizeof(ent) fit */
	if (!p)
		return -ENOMEM;
	for (i = 0; i < l->n; i++)
		p[i] = &l->ents[i];
	qsort(p, l->n, sizeof(*p), cmp_ent_ptr);
	/* Within a run of equal names p[] is in array order: drop all but
	 * the first. Free the name and mark the entry with NULL. Compare
	 * against the run's first entry, whose name is still alive. */
	for (i = 0; i < l->n;) {
		for (j = i + 1; j < l->n && strcmp(p[i]->name, p[j]->name) == 0; j++) {
			log_skip("duplicate name", p[j]->name, strlen(p[j]->name));
			l->bytes -= objfs_listent_bytes(p[j]);
			free(p[j]->name);
			free(p[j]->etag);
			p[j]->name = NULL;
			p[j]->etag = NULL;
		}
		i = j;
	}
	free(p);
	for (i = j = 0; i < l->n; i++) {
		if (l->ents[i].name)
			l->ents[j++] = l->ents[i];
	}
	l->n = j;
	return 0;
}

/* ---- nginx JSON ---- */

int64_t objfs_listing_civil(int year, int mon, int day, int hour, int min, int sec)
{
	int64_t y = year - (mon <= 2), era = (y >= 0 ? y : y - 399) / 400;
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (mon + (mon > 2 ? -3 : 9)) + 2) / 5 + day - 1;
	int64_t days = era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;

	return days * 86400 + hour * 3600 + min * 60 + sec;
}

int objfs_listing_digits(const char *s, int n)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

int objfs_listing_hms(const char *s, int tm6[6])
{
	tm6[3] = objfs_listing_digits(s, 2);
	tm6[4] = objfs_listing_digits(s + 3, 2);
	tm6[5] = objfs_listing_digits(s + 6, 2);
	return s[2] == ':' && s[5] == ':' && tm6[3] >= 0 && tm6[3] <= 23 && tm6[4] >= 0 &&
	       tm6[4] <= 59 && tm6[5] >= 0 && tm6[5] <= 59 && tm6[0] >= 1900 && tm6[1] >= 1 &&
	       tm6[1] <= 12 && tm6[2] >= 1 && tm6[2] <= 31;
}

/*
 * "Sun, 06 Nov 1994 08:49:37 GMT" exactly as servers write it: seconds, or
 * -2 for any other form (strptime decides those). The same result as
 * strptime and timegm (check_listing compares them).
 */
static int64_t http_date_fast(const char *s, size_t len)
{
	static const char days[] = "SunMonTueWedThuFriSat";
	static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
	int t[6], d, m;

	if (len != 29 || s[3] != ',' || s[4] != ' ' || s[7] != ' ' || s[11] != ' ' ||
	    s[16] != ' ' || memcmp(s + 25, " GMT", 4) != 0)
		return -2;
	for (d = 0; d < 7 && memcmp(days + 3 * d, s, 3) != 0; d++)
		;
	for (m = 0; m < 12 && memcmp(months + 3 * m, s + 8, 3) != 0; m++)
		;
	t[0] = objfs_listing_digits(s + 12, 4);
	t[1] = m + 1;
	t[2] = objfs_listing_digits(s + 5, 2);
	if (d == 7 || m == 12 || !objfs_listing_hms(s + 17, t))
		return -2;
	return objfs_listing_civil(t[0], t[1], t[2], t[3], t[4], t[5]);
}

/*
 * RFC 1123 date ("Sun, 06 Nov 1994 08:49:37 GMT", NUL at @len) to seconds,
 * or -1. strptime() in the caller's C locale for any form but the usual.
 */
static int64_t parse_http_date(const char *s, size_t len)
{
	int64_t fast = http_date_fast(s, len);
	struct tm tm;
	const char *end;
	time_t t;

	if (fast != -2)
		return fast;
	memset(&tm, 0, sizeof(tm));
	end = strptime(s, "%a, %d %b %Y %H:%M:%S GMT", &tm);
	if (!end || end != s + len)
		return -1;
	tm.tm_isdst = 0;
	t = timegm(&tm);
	if (t == (time_t)-1)
		return -1;
	return (int64_t)t;
}

/* What one element of the array says, as either reader finds it. */
struct json_el {
	const char *name;  /* NULL: no string "name"; may hold NULs */
	size_t namelen;
	const char *type;  /* NULL: no string "type" */
	const char *mtime; /* NULL: no string "mtime"; NUL at mtimelen */
	size_t mtimelen;
	int has_size;      /* "size" is an integer */
	int64_t size;      /* its value, -1 when negative or out of range */
};

/* One element's entry; returns 0 (added or skipped), -ENOMEM, -E2BIG or -EFBIG. */
static int json_el_add(const struct json_el *el, struct objfs_listing *out)
{
	int64_t mtime = -1;
	int is_dir, rc;

	if (!el->name) {
		objfs_debug("listing: skipping JSON element without a string name");
		return 0;
	}
	if (!el->type) {
		log_skip("no type", el->name, el->namelen);
		return 0;
	}
	if (strcmp(el->type, "directory") == 0) {
		is_dir = 1;
	} else if (strcmp(el->type, "file") == 0 || strcmp(el->type, "link") == 0) {
		is_dir = 0;
	} else {
		log_skip("unsupported type", el->name, el->namelen);
		return 0;
	}
	if (el->mtime)
		mtime = parse_http_date(el->mtime, el->mtimelen);
	rc = append(out, el->name, el->namelen, is_dir, !is_dir && el->has_size ? el->size : -1,
		    mtime);
	return rc == -EINVAL ? 0 : rc; /* an invalid name is skipped */
}

/* One array element parsed by json-c; returns as json_el_add(). */
static int json_entry(struct json_object *o, struct objfs_listing *out)
{
	struct json_object *jname, *jtype, *jmtime, *jsize;
	struct json_el el = { 0 };

	if (!json_object_is_type(o, json_type_object)) {
		objfs_debug("listing: skipping JSON element that is not an object");
		return 0;
	}
	if (json_object_object_get_ex(o, "name", &jname) &&
	    json_object_is_type(jname, json_type_string)) {
		el.name = json_object_get_string(jname);
		el.namelen = (size_t)json_object_get_string_len(jname);
	}
	if (json_object_object_get_ex(o, "type", &jtype) &&
	    json_object_is_type(jtype, json_type_string))
		el.type = json_object_get_string(jtype);
	if (json_object_object_get_ex(o, "mtime", &jmtime) &&
	    json_object_is_type(jmtime, json_type_string)) {
		el.mtime = json_object_get_string(jmtime);
		el.mtimelen = (size_t)json_object_get_string_len(jmtime);
	}
	if (json_object_object_get_ex(o, "size", &jsize) &&
	    json_object_is_type(jsize, json_type_int)) {
		el.has_size = 1;
		errno = 0;
		el.size = json_object_get_int64(jsize);
		if (el.size < 0 || el.size > OBJFS_OBJECT_SIZE_MAX || errno) /* or clamped */
			el.size = -1;
	}
	return json_el_add(&el, out);
}

static size_t skip_ws(const char *buf, size_t len, size_t i)
{
	while (i < len && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r' || buf[i] == '\n'))
		i++;
	return i;
}

/*
 * The reader of nginx's own JSON. nginx writes its index one way:
 *   [
 *   { "name":"a b", "type":"file", "mtime":"Wed, 26 Nov 2026 04:00:00 GMT", "size":0 },
 *   ...
 *   ]
 * json-c's tokener made a json_object per element, a hash table and four
 * values in it, and strptime() looked the day and month up among the
 * locale's names: ~0.75 s for a 100,000-entry index on two cores, 5-8x
 * the fetch of the index. This reader takes that subset of JSON only: an
 * array of flat objects whose keys are distinct and whose values are
 * strings (escapes \" \\ \/ \b \f \n \r \t and \u0001-\u007f) or
 * integers without sign, fraction or exponent (up to 18 digits). On
 * anything else (json-c's extensions, other values, a \u escape past
 * ASCII or of NUL, raw control bytes in a string, malformed JSON) it gives
 * up, entries it appended are dropped, and json-c reads the body from the
 * start as before. The same json_el_add() turns an element into an entry
 * for both; fuzz_listing_json checks both give the same listing for every
 * body the reader takes.
 */
#define JSON_GIVE_UP (-EAGAIN)
#define JSON_TRAILING (-EBADMSG) /* json_tokener_read: bytes after the array */

struct jreader {
	const char *p, *end;
	char *sc;        /* this element's strings, each NUL-terminated */
	size_t scn, sccap;
};

static void jskip_ws(struct jreader *r)
{
	while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\r' || *r->p == '\n'))
		r->p++;
}

/* The string at p ('"'), decoded into sc at *off (NUL-terminated). */
static int jstring(struct jreader *r, size_t *off, size_t *len)
{
	const char *s = ++r->p;

	*off = r->scn;
	for (;;) {
		const char *q = s;
		char c;

		while (q < r->end && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20)
			q++;
		if (objfs_buf_reserve(&r->sc, &r->sccap, r->scn + (size_t)(q - s) + 2, 4096))
			return -ENOMEM;
		memcpy(r->sc + r->scn, s, (size_t)(q - s));
		r->scn += (size_t)(q - s);
		if (q >= r->end || (unsigned char)*q < 0x20)
			return JSON_GIVE_UP;
		if (*q == '"') {
			r->p = q + 1;
			break;
		}
		if (q + 1 >= r->end)
			return JSON_GIVE_UP;
		switch (q[1]) {
		case '"': case '\\': case '/': c = q[1]; break;
		case 'b': c = '\b'; break;
		case 'f': c = '\f'; break;
		case 'n': c = '\n'; break;
		case 'r': c = '\r'; break;
		case 't': c = '\t'; break;
		case 'u': {
			int v = 0;

			for (int i = 2; i < 6; i++) {
				int h = q + i < r->end ? objfs_hexval((unsigned char)q[i]) : -1;

				if (h < 0)
					return JSON_GIVE_UP;
				v = v * 16 + h;
			}
			if (v < 1 || v > 0x7f)
				return JSON_GIVE_UP;
			c = (char)v;
			q += 4;
			break;
		}
		default:
			return JSON_GIVE_UP;
		}
		r->sc[r->scn++] = c;
		s = q + 2;
	}
	*len = r->scn - *off;
	r->sc[r->scn++] = '\0';
	return 0;
}

/* A plain integer at p: up to 18 digits, no leading zero. */
static int jinteger(struct jreader *r, int64_t *v)
{
	const char *s = r->p;

	*v = 0;
	while (r->p < r->end && *r->p >= '0' && *r->p <= '9' && r->p - s < 18)
		*v = *v * 10 + (*r->p++ - '0');
	/* a 19th digit is no delimiter: json-c's ranges decide */
	if (r->p == s || (*s == '0' && r->p - s > 1) ||
	    (r->p < r->end && *r->p != ',' && *r->p != '}' && *r->p != ' ' && *r->p != '\t' &&
	     *r->p != '\r' && *r->p != '\n'))
		return JSON_GIVE_UP;
	return 0;
}

/* One object at p ('{') into @el (strings in r->sc). */
static int jobject(struct jreader *r, struct json_el *el)
{
	static const char *const keys[] = { "name", "type", "mtime", "size" };
	size_t at[3] = { 0 }, lens[3] = { 0 };
	unsigned seen = 0;
	int have[3] = { 0 }, rc;

	memset(el, 0, sizeof(*el));
	r->scn = 0;
	r->p++;
	jskip_ws(r);
	if (r->p < r->end && *r->p == '}') {
		r->p++;
		return 0;
	}
	for (;;) {
		size_t koff, klen, voff, vlen;
		int k;

		if (r->p >= r->end || *r->p != '"')
			return JSON_GIVE_UP;
		if ((rc = jstring(r, &koff, &klen)))
			return rc;
		for (k = 0; k < 4 && !(klen == strlen(keys[k]) && !memcmp(r->sc + koff, keys[k], klen));
		     k++)
			;
		if (k == 4 || (seen & (1u << k)))
			return JSON_GIVE_UP; /* another key, or one twice: json-c's rules */
		seen |= 1u << k;
		jskip_ws(r);
		if (r->p >= r->end || *r->p != ':')
			return JSON_GIVE_UP;
		r->p++;
		jskip_ws(r);
		if (r->p < r->end && *r->p == '"') {
			if ((rc = jstring(r, &voff, &vlen)))
				return rc;
			if (k < 3) {
				at[k] = voff;
				lens[k] = vlen;
				have[k] = 1;
			}
		} else if (k == 3 && r->p < r->end && *r->p >= '0' && *r->p <= '9') {
			if ((rc = jinteger(r, &el->size)))
				return rc;
			el->has_size = 1;
		} else {
			return JSON_GIVE_UP;
		}
		jskip_ws(r);
		if (r->p < r->end && *r->p == ',') {
			r->p++;
			jskip_ws(r);
			continue;
		}
		if (r->p < r->end && *r->p == '}') {
			r->p++;
			break;
		}
		return JSON_GIVE_UP;
	}
	/* sc is complete: its strings do not move any more */
	if (have[0]) {
		el->name = r->sc + at[0];
		el->namelen = lens[0];
	}
	if (have[1])
		el->type = r->sc + at[1];
	if (have[2]) {
		el->mtime = r->sc + at[2];
		el->mtimelen = lens[2];
	}
	return 0;
}

/*
 * The array from @pos (after '[') by the reader; 0 when it read the whole
 * body, -ENOMEM, -E2BIG, -EFBIG, or JSON_GIVE_UP with nothing appended.
 */
static int json_fast(const char *buf, size_t len, size_t pos, struct objfs_listing *out)
{
	struct jreader r = { buf + pos, buf + len, NULL, 0, 0 };
	size_t n0 = out->n;
	int rc = 0;

	if (r.p < r.end && *r.p == ']') {
		r.p++;
	} else {
		for (;;) {
			struct json_el el;

			if (r.p >= r.end || *r.p != '{') {
				rc = JSON_GIVE_UP;
				break;
			}
			if ((rc = jobject(&r, &el)) || (rc = json_el_add(&el, out)))
				break;
			jskip_ws(&r);
			if (r.p < r.end && *r.p == ',') {
				r.p++;
				jskip_ws(&r);
				continue;
			}
			if (r.p < r.end && *r.p == ']') {
				r.p++;
				break;
			}
			rc = JSON_GIVE_UP;
			break;
		}
	}
	if (!rc) {
		jskip_ws(&r);
		if (r.p != r.end)
			rc = JSON_GIVE_UP; /* trailing bytes: json-c's path says why */
	}
	if (rc == JSON_GIVE_UP)
		objfs_listing_truncate(out, n0);
	free(r.sc);
	return rc;
}

/*
 * The array is read one element at a time: '[' and the separators here,
 * each element by json-c's tokener, turned into an entry and freed. A
 * document tree of the whole body cost about ten times the body (a
 * 1M-entry index: over 1 GB); now a listing costs its entries.
 */
/* The array from @pos (after '[') by json-c, one element at a time, to the end of the body. */
static int json_tokener_read(const char *buf, size_t len, size_t pos, struct objfs_listing *out)
{
	struct json_tokener *tok;
	int rc = 0;

	if (pos < len && buf[pos] == ']')
		return skip_ws(buf, len, pos + 1) == len ? 0 : JSON_TRAILING;
	tok = json_tokener_new();
	if (!tok)
		return -ENOMEM;
	for (;;) {
		struct json_object *el;
		enum json_tokener_error jerr;

		json_tokener_reset(tok);
		el = json_tokener_parse_ex(tok, buf + pos, (int)(len - pos));
		jerr = json_tokener_get_error(tok);
		if (jerr != json_tokener_success) {
			objfs_debug("listing: malformed JSON listing: %s",
				    json_tokener_error_desc(jerr));
			json_object_put(el);
			rc = -EPROTO;
			break;
		}
		pos += json_tokener_get_parse_end(tok);
		rc = json_entry(el, out);
		json_object_put(el);
		if (rc)
			break;
		pos = skip_ws(buf, len, pos);
		if (pos < len && buf[pos] == ',') {
			pos = skip_ws(buf, len, pos + 1);
			continue;
		}
		if (pos < len && buf[pos] == ']') {
			rc = skip_ws(buf, len, pos + 1) == len ? 0 : JSON_TRAILING;
			break;
		}
		objfs_debug("listing: malformed JSON listing: no ',' or ']' after an element");
		rc = -EPROTO;
		break;
	}
	json_tokener_free(tok);
	return rc;
}

/* objfs_listing_parse_json(); @fast: nginx's JSON by the reader first. */
static int parse_json(const char *buf, size_t len, struct objfs_listing *out, int fast)
{
	locale_t c_loc, old_loc = (locale_t)0;
	size_t pos;
	int rc = JSON_GIVE_UP;

	if (!buf || len == 0 || len > INT_MAX) {
		objfs_debug("listing: JSON body empty or too large (%zu bytes)", len);
		objfs_listing_clear(out);
		return -EPROTO;
	}
	pos = skip_ws(buf, len, 0);
	if (pos >= len || buf[pos] != '[') {
		objfs_debug("listing: JSON listing is not an array");
		objfs_listing_clear(out);
		return -EPROTO;
	}
	pos = skip_ws(buf, len, pos + 1);
	/* Month and day names in dates are English whatever the process
	 * locale is: run strptime() in the C locale (this thread only). */
	c_loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
	if (c_loc)
		old_loc = uselocale(c_loc);
	if (fast)
		rc = json_fast(buf, len, pos, out);
	if (rc == JSON_GIVE_UP)
		rc = json_tokener_read(buf, len, pos, out);
	if (c_loc) {
		uselocale(old_loc);
		freelocale(c_loc);
	}
	if (rc == JSON_TRAILING) {
		objfs_debug("listing: trailing bytes after JSON listing");
		rc = -EPROTO;
	}
	if (!rc)
		rc = objfs_listing_dedupe(out);
	if (rc)
		objfs_listing_clear(out);
	return rc;
}

int objfs_listing_parse_json(const char *buf, size_t len, struct objfs_listing *out)
{
	return parse_json(buf, len, out, 1);
}

int objfs_listing_parse_json_tokener(const char *buf, size_t len, struct objfs_listing *out)
{
	return parse_json(buf, len, out, 0);
}

/* ---- HTML ---- */

/*
 * @s[0..len) is the part of an href that should name a child: strip "./",
 * refuse "." and ".." forms, and require "name" or "name/". On success sets
 * *nlen to the component's length and *is_dir, and returns the component's
 * start; returns NULL to ignore the link.
 */
static const char *child_component(const char *s, size_t len, size_t *nlen,
				   int *is_dir)
{
	const char *slash;

	while (len >= 2 && s[0] == '.' && s[1] == '/') {
		s += 2;
		len -= 2;
	}
	if (len == 0)
		return NULL; /* the directory itself */
	slash = memchr(s, '/', len);
	if (slash && slash != s + len - 1)
		return NULL; /* deeper path, or "../x" */
	*is_dir = slash != NULL;
	*nlen = slash ? (size_t)(slash - s) : len;
	if (*nlen == 0 || (s[0] == '.' && (*nlen == 1 || (*nlen == 2 && s[1] == '.'))))
		return NULL; /* "." or "..": not a child */
	return s;
}

/*
 * One href. Returns 0 (added or ignored), or -ENOMEM, -E2BIG or -EFBIG,
 * which stop the parse. @dir_path is decoded;
 * @dlen excludes a trailing '/'.
 */
static int html_href(const char *href, const char *dir_path, size_t dlen,
		     struct objfs_listing *out)
{
	size_t len = strlen(href), colon, slash, nlen;
	const char *comp;
	char *dec, *name;
	int is_dir = 0, rc;

	if (len == 0 || strpbrk(href, "?#"))
		return 0; /* self, query links (Apache sort order), fragments */
	for (size_t i = 0; i < len; i++) {
		if ((unsigned char)href[i] < 0x20 || href[i] == 0x7f)
			return 0;
	}
	colon = strcspn(href, ":");
	slash = strcspn(href, "/");
	if (colon < len && colon < slash)
		return 0; /* has a scheme: http:, mailto:, javascript: */
	if (href[0] == '/') {
		if (href[1] == '/' || !dir_path)
			return 0; /* other host, or no path to compare with */
		dec = objfs_url_decode(href, len);
		if (!dec) {
			log_skip("malformed %-escape", href, len);
			return 0;
		}
		rc = 0;
		if (strncmp(dec, dir_path, dlen) == 0 && dec[dlen] == '/') {
			comp = child_component(dec + dlen + 1, strlen(dec + dlen + 1),
					       &nlen, &is_dir);
			if (comp)
				rc = append(out, comp, nlen, is_dir, -1, -1);
		}
		free(dec);
		return rc == -EINVAL ? 0 : rc; /* an invalid name is skipped */
	}
	comp = child_component(href, len, &nlen, &is_dir);
	if (!comp)
		return 0;
	name = objfs_url_decode(comp, nlen);
	if (!name) {
		log_skip("malformed %-escape", comp, nlen);
		return 0;
	}
	rc = append(out, name, strlen(name), is_dir, -1, -1);
	free(name);
	return rc == -EINVAL ? 0 : rc; /* an invalid name is skipped */
}

/* What the start-tag callback needs (the parser context's _private). */
struct html_walk {
	const char *dir_path;
	size_t dlen;
	struct objfs_listing *out;
	int rc;
	int started;    /* the parser began a document (a tree would exist) */
};

/* The document begins: without this (input it could not decode from the
 * start) htmlReadMemory() gave no tree, and the page is -EPROTO. */
static void html_begin(void *ctx)
{
	((struct html_walk *)((htmlParserCtxtPtr)ctx)->_private)->started = 1;
}

/* A start tag: an <a>'s first href, as the document tree would hold it. */
static void html_start(void *ctx, const xmlChar *name, const xmlChar **atts)
{
	htmlParserCtxtPtr c = ctx;
	struct html_walk *w = c->_private;

	if (w->rc || !name || !atts || xmlStrcasecmp(name, BAD_CAST "a") != 0)
		return;
	for (; atts[0]; atts += 2) {
		if (xmlStrcmp(atts[0], BAD_CAST "href") != 0)
			continue;
		if (atts[1])
			w->rc = html_href((const char *)atts[1], w->dir_path, w->dlen, w->out);
		if (w->rc)
			xmlStopParser(c);
		return;
	}
}

int objfs_listing_parse_html(const char *buf, size_t len, const char *dir_path,
			     struct objfs_listing *out)
{
	const int opts = HTML_PARSE_NOERROR | HTML_PARSE_NOWARNING |
			 HTML_PARSE_NONET | HTML_PARSE_RECOVER;
	struct html_walk w = { dir_path, 0, out, 0, 0 };
	htmlSAXHandler sax;
	htmlParserCtxtPtr ctxt;
	xmlSAXHandlerPtr own;

	if (len == 0)
		return 0; /* an empty page lists nothing */
	if (!buf || len > INT_MAX) {
		objfs_debug("listing: HTML page too large (%zu bytes)", len);
		objfs_listing_clear(out);
		return -EPROTO;
	}
	if (dir_path) {
		w.dlen = strlen(dir_path);
		while (w.dlen > 0 && dir_path[w.dlen - 1] == '/')
			w.dlen--;
	}
	ctxt = htmlCreateMemoryParserCtxt(buf, (int)len);
	if (!ctxt) {
		objfs_debug("listing: HTML page could not be parsed");
		objfs_listing_clear(out);
		return -ENOMEM;
	}
	/* as htmlReadMemory()'s context starts (its is an XML context's, with
	 * the HTML handlers): input taken for UTF-8 until a byte says not */
	ctxt->charset = XML_CHAR_ENCODING_UTF8;
	memset(&sax, 0, sizeof(sax));
	sax.startDocument = html_begin;
	sax.startElement = html_start;
	own = ctxt->sax;
	ctxt->sax = (xmlSAXHandlerPtr)&sax;
	ctxt->_private = &w;
	htmlCtxtUseOptions(ctxt, opts);
	(void)htmlParseDocument(ctxt); /* recovers from anything; w.rc says what we made of it */
	ctxt->sax = own; /* the context frees its own */
	if (ctxt->myDoc)
		xmlFreeDoc(ctxt->myDoc);
	ctxt->myDoc = NULL;
	htmlFreeParserCtxt(ctxt);
	if (!w.rc && !w.started) {
		objfs_debug("listing: HTML page could not be parsed");
		w.rc = -EPROTO;
	}
	if (!w.rc)
		w.rc = objfs_listing_dedupe(out);
	if (w.rc)
		objfs_listing_clear(out);
	return w.rc;
}

void objfs_listing_global_init(void)
{
	xmlInitParser();
}
