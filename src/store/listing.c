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
 * 1 GB); HTML still builds libxml2's tree (its SAX interface guesses the
 * encoding of raw bytes otherwise), bounded by the body cap.
 *
 * Cap: a listing holds at most l->max entries (max_dir_entries); one more
 * stops the parse with -E2BIG and an empty listing.
 *
 * Errors: on any failure (-EPROTO, -E2BIG, -ENOMEM) both parsers leave the listing
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

#include "listing.h"
#include "log.h"
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
	return 0;
}

int objfs_listing_set_etag(struct objfs_listent *e, const char *etag, size_t len)
{
	char *copy = strndup(etag, len);

	if (!copy)
		return -ENOMEM;
	free(e->etag);
	e->etag = copy;
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

/* RFC 1123 date ("Sun, 06 Nov 1994 08:49:37 GMT") to seconds, or -1. */
static int64_t parse_http_date(const char *s, size_t len)
{
	struct tm tm;
	const char *end;
	time_t t;

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

/* One array element; returns 0 (added or skipped) or -ENOMEM. */
static int json_entry(struct json_object *o, struct objfs_listing *out)
{
	struct json_object *jname, *jtype, *jmtime, *jsize;
	const char *name, *type;
	size_t namelen;
	int64_t size = -1, mtime = -1;
	int is_dir, rc;

	if (!json_object_is_type(o, json_type_object)) {
		objfs_debug("listing: skipping JSON element that is not an object");
		return 0;
	}
	if (!json_object_object_get_ex(o, "name", &jname) ||
	    !json_object_is_type(jname, json_type_string)) {
		objfs_debug("listing: skipping JSON element without a string name");
		return 0;
	}
	name = json_object_get_string(jname);
	namelen = (size_t)json_object_get_string_len(jname); /* may hold NULs */

	if (!json_object_object_get_ex(o, "type", &jtype) ||
	    !json_object_is_type(jtype, json_type_string)) {
		log_skip("no type", name, namelen);
		return 0;
	}
	type = json_object_get_string(jtype);
	if (strcmp(type, "directory") == 0) {
		is_dir = 1;
	} else if (strcmp(type, "file") == 0 || strcmp(type, "link") == 0) {
		is_dir = 0;
	} else {
		log_skip("unsupported type", name, namelen);
		return 0;
	}

	if (json_object_object_get_ex(o, "mtime", &jmtime) &&
	    json_object_is_type(jmtime, json_type_string))
		mtime = parse_http_date(json_object_get_string(jmtime),
					(size_t)json_object_get_string_len(jmtime));
	if (!is_dir && json_object_object_get_ex(o, "size", &jsize) &&
	    json_object_is_type(jsize, json_type_int)) {
		errno = 0;
		size = json_object_get_int64(jsize);
		if (size < 0 || errno) /* negative, or clamped out of range */
			size = -1;
	}

	rc = append(out, name, namelen, is_dir, size, mtime);
	return rc == -ENOMEM || rc == -E2BIG ? rc : 0;
}

static size_t skip_ws(const char *buf, size_t len, size_t i)
{
	while (i < len && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r' || buf[i] == '\n'))
		i++;
	return i;
}

/*
 * The array is read one element at a time: '[' and the separators here,
 * each element by json-c's tokener, turned into an entry and freed. A
 * document tree of the whole body cost about ten times the body (a
 * 1M-entry index: over 1 GB); now a listing costs its entries.
 */
int objfs_listing_parse_json(const char *buf, size_t len, struct objfs_listing *out)
{
	struct json_tokener *tok;
	locale_t c_loc, old_loc = (locale_t)0;
	size_t pos;
	int rc = 0;

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
	tok = json_tokener_new();
	if (!tok) {
		objfs_listing_clear(out);
		return -ENOMEM;
	}
	/* Month and day names in dates are English whatever the process
	 * locale is: run strptime() in the C locale (this thread only). */
	c_loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
	if (c_loc)
		old_loc = uselocale(c_loc);
	if (pos < len && buf[pos] == ']') {
		pos++;
	} else {
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
				pos++;
				break;
			}
			objfs_debug("listing: malformed JSON listing: no ',' or ']' after an element");
			rc = -EPROTO;
			break;
		}
	}
	if (c_loc) {
		uselocale(old_loc);
		freelocale(c_loc);
	}
	json_tokener_free(tok);
	if (!rc && skip_ws(buf, len, pos) != len) {
		objfs_debug("listing: trailing bytes after JSON listing");
		rc = -EPROTO;
	}
	if (!rc)
		rc = objfs_listing_dedupe(out);
	if (rc)
		objfs_listing_clear(out);
	return rc;
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
 * One href. Returns 0 (added or ignored) or -ENOMEM. @dir_path is decoded;
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
		return rc == -ENOMEM || rc == -E2BIG ? rc : 0;
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
	return rc == -ENOMEM || rc == -E2BIG ? rc : 0;
}

int objfs_listing_parse_html(const char *buf, size_t len, const char *dir_path,
			     struct objfs_listing *out)
{
	const int opts = HTML_PARSE_NOERROR | HTML_PARSE_NOWARNING |
			 HTML_PARSE_NONET | HTML_PARSE_RECOVER;
	htmlDocPtr doc;
	xmlNodePtr node;
	size_t dlen = 0;
	int rc = 0;

	if (len == 0)
		return 0; /* an empty page lists nothing */
	if (!buf || len > INT_MAX) {
		objfs_debug("listing: HTML page too large (%zu bytes)", len);
		objfs_listing_clear(out);
		return -EPROTO;
	}
	if (dir_path) {
		dlen = strlen(dir_path);
		while (dlen > 0 && dir_path[dlen - 1] == '/')
			dlen--;
	}
	doc = htmlReadMemory(buf, (int)len, NULL, NULL, opts);
	if (!doc) {
		objfs_debug("listing: HTML page could not be parsed");
		objfs_listing_clear(out);
		return -EPROTO;
	}
	/* Pre-order walk without recursion: children, then next, then up. */
	node = doc->children;
	while (node) {
		if (node->type == XML_ELEMENT_NODE && node->name &&
		    xmlStrcasecmp(node->name, BAD_CAST "a") == 0) {
			xmlChar *href = xmlGetNoNsProp(node, BAD_CAST "href");

			if (href) {
				rc = html_href((const char *)href, dir_path, dlen, out);
				xmlFree(href);
				if (rc)
					break;
			}
		}
		if (node->type == XML_ELEMENT_NODE && node->children) {
			node = node->children;
			continue;
		}
		while (node && !node->next) {
			node = node->parent;
			if ((void *)node == (void *)doc)
				node = NULL;
		}
		if (node)
			node = node->next;
	}
	xmlFreeDoc(doc);
	if (!rc)
		rc = objfs_listing_dedupe(out);
	if (rc)
		objfs_listing_clear(out);
	return rc;
}

void objfs_listing_global_init(void)
{
	xmlInitParser();
}
