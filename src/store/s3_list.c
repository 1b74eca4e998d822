/*
 * s3_list: the ListObjectsV2 page parser (store_s3_i.h).
 *
 * Why a reader of our own. libxml2's tree of one 1,000-key page is about a
 * megabyte of small allocations, built and freed once a page. In `ls -l`
 * of a million keys the parse was ~46% of the
 * daemon's CPU, most of it malloc growing and trimming the listing
 * thread's heap: page faults, and TLB shootdowns as the pages went back.
 * The reader here allocates nothing per element: it walks the page once,
 * collects the few texts a listing needs (Key, Size, LastModified, ETag,
 * CommonPrefixes/Prefix, IsTruncated, NextContinuationToken) into one
 * scratch buffer, and hands each entry over as its element closes.
 *
 * Why it cannot be less correct than libxml2. It reads only a subset of
 * XML, the one S3 servers send: UTF-8 (checked), an optional XML
 * declaration (version 1.0, encoding UTF-8), elements and attributes with
 * plain ASCII names (no namespace prefix), attribute values without
 * references, text with the five predefined entities, character references
 * and CDATA sections. Anything else -- a DOCTYPE (and so any entity of
 * its own), comments, processing instructions, another encoding, a BOM,
 * '\r', a prefixed name, a malformed or truncated document, texts or
 * nesting past its limits -- makes it give up (-EAGAIN) with nothing
 * appended, and the page goes to libxml2's tree exactly as before. So the
 * reader never has to decide that a document is malformed: libxml2 stays
 * the only judge of that, and for the documents the reader does take,
 * tests/fuzz/fuzz_s3_list.c checks that both give the same result
 * (return, truncation, token, every entry), input by input.
 *
 * Keys are url-decoded only on a page that says <EncodingType>url</...>:
 * we always ask for it, but some S3 servers ignore the parameter and send
 * keys as they are ("a+b" would be listed as "a b" and "x%41" as "xA",
 * and fetched as another key). The reader decodes as it goes, taking
 * url until the page says otherwise; a page that ends without saying url
 * after an entry was decoded goes to libxml2's tree, which reads
 * EncodingType first.
 *
 * What a page means is one function for both, s3_entry(): the same
 * first-occurrence rules (the first Key of a Contents, the first
 * IsTruncated of the page, as libxml2's tree walk found them), the texts
 * of nested elements included as xmlNodeGetContent() includes them.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

#include "buf.h"
#include "listing.h"
#include "log.h"
#include "range.h"
#include "store_s3_i.h"
#include "url.h"

/* The reader gives up past these (libxml2's own limits are larger). */
#define FAST_DEPTH_MAX 64
#define FAST_NAME_MAX 200
#define FAST_ATTRS_MAX 8
#define FAST_TEXT_MAX (1u << 20)  /* one field's text, one attribute value */

/* ---- shared by both parsers ---- */

char *objfs_s3_decode(const char *in, size_t len)
{
	char *out = malloc(len + 1);

	if (out && objfs_url_decode_to(out, in, len, 1)) {
		free(out);
		out = NULL;
	}
	return out;
}

int64_t objfs_s3_parse_time(const char *s)
{
	struct tm tm = { 0 };
	const char *end = s + 19;
	int t[6];
	int64_t v;

	/* "2009-10-12T17:50:30" as S3 writes it without strptime's cost (a
	 * sixth of a page's parse); any other form through strptime */
	if (strnlen(s, 19) == 19 && s[4] == '-' && s[7] == '-' && s[10] == 'T' &&
	    (t[0] = objfs_listing_digits(s, 4)) >= 0 && (t[1] = objfs_listing_digits(s + 5, 2)) >= 0 &&
	    (t[2] = objfs_listing_digits(s + 8, 2)) >= 0 && objfs_listing_hms(s + 11, t)) {
		v = objfs_listing_civil(t[0], t[1], t[2], t[3], t[4], t[5]);
	} else {
		end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
		if (!end)
			return -1;
		v = (int64_t)timegm(&tm);
	}
	if (*end == '.')
		for (end++; isdigit((unsigned char)*end); end++)
			;
	if (*end != 'Z' && *end != '\0')
		return -1;
	return v;
}

/* A growing byte buffer; the reader's scratch and decode space. */
struct sbuf {
	char *p;
	size_t n, cap;
};

/* Room for @more bytes after n. 0 or -ENOMEM. */
static int sbuf_room(struct sbuf *b, size_t more)
{
	return objfs_buf_reserve(&b->p, &b->cap, b->n + more, 4096);
}

/* XML Schema's white space around a value (xs:boolean, xs:long, a token). */
static int xml_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Whether text @s is @lit, white space around it allowed. */
static int text_is(const char *s, const char *lit)
{
	size_t n = strlen(lit);

	while (xml_ws(*s))
		s++;
	if (strncmp(s, lit, n) != 0)
		return 0;
	for (s += n; xml_ws(*s); s++)
		;
	return *s == '\0';
}

void objfs_s3_skips_add(struct objfs_s3_skips *k, const char *key, const char *why)
{
	objfs_debug("listing: key '%.200s' left out: %s", key ? key : "(none)", why);
	if (k->n++ >= OBJFS_S3_SKIPS_NAMED)
		return;
	k->first[k->named].why = why;
	if (!key)
		key = "";
	if (strlen(key) < sizeof(k->first[0].key))
		strcpy(k->first[k->named].key, key);
	else
		snprintf(k->first[k->named].key, sizeof(k->first[0].key), "%.*s...",
			 (int)sizeof(k->first[0].key) - 4, key);
	k->named++;
}

void objfs_s3_skips_merge(struct objfs_s3_skips *to, const struct objfs_s3_skips *from)
{
	for (unsigned i = 0; i < from->named && to->named < OBJFS_S3_SKIPS_NAMED; i++)
		to->first[to->named++] = from->first[i];
	to->n += from->n;
}

void objfs_s3_skips_text(const struct objfs_s3_skips *k, char *buf, size_t cap)
{
	size_t len = 0;

	if (cap)
		buf[0] = '\0';
	for (unsigned i = 0; i < k->named; i++)
		objfs_appendf(buf, cap, &len, "%s'%s' (%s)", i ? ", " : "", k->first[i].key,
			      k->first[i].why);
	if (k->n > k->named)
		objfs_appendf(buf, cap, &len, " and %u more", k->n - k->named);
}

/* Why valid-looking name @name (@len bytes) cannot be a file name. */
static const char *name_why(const char *name, size_t len)
{
	if (len == 0)
		return "an empty segment: '//', or '/' first";
	if (len == 1 && name[0] == '.')
		return "a '.' segment";
	if (len == 2 && name[0] == '.' && name[1] == '.')
		return "a '..' segment";
	if (len > 255)
		return "a name over 255 bytes";
	return "a '/' in the name";
}

/*
 * Adds key @enc (url-encoded when @decode, else as it is; NUL-terminated)
 * relative to @prefix; @dir for common prefixes. @tmp is room to decode
 * into; a key left out is counted in @page. 0, -ENOMEM, or -E2BIG or
 * -EFBIG past @out's caps.
 */
static int add_key(const char *enc, int decode, const char *prefix, int dir, int64_t size,
		   int64_t mtime, const char *etag, struct objfs_listing *out, struct sbuf *tmp,
		   struct objfs_s3_page *page)
{
	size_t plen = strlen(prefix), elen = strlen(enc), nlen;
	const char *name;
	char *key;
	int rc;

	tmp->n = 0;
	if (sbuf_room(tmp, elen + 1))
		return -ENOMEM;
	key = tmp->p;
	if (!decode) {
		memcpy(key, enc, elen + 1);
	} else if (objfs_url_decode_to(key, enc, elen, 1)) {
		objfs_s3_skips_add(&page->skipped, enc, "a malformed %-escape");
		return 0;
	}
	if (strncmp(key, prefix, plen) != 0) {
		objfs_s3_skips_add(&page->skipped, key, "outside the prefix asked for");
		return 0;
	}
	name = key + plen;
	nlen = strlen(name);
	if (dir) {
		if (nlen == 0 || name[nlen - 1] != '/') {
			objfs_s3_skips_add(&page->skipped, key, "a common prefix without its '/'");
			return 0;
		}
		nlen--;
	} else if (nlen == 0) {
		return 0; /* the directory's own marker object */
	}
	if (!objfs_name_valid(name, nlen)) {
		objfs_s3_skips_add(&page->skipped, key, name_why(name, nlen));
		return 0;
	}
	rc = objfs_listing_add(out, name, nlen, dir, dir ? -1 : size, mtime);
	if (rc == -EINVAL || rc == -EEXIST)
		rc = 0;
	else if (!rc && etag && etag[0])
		rc = objfs_listing_set_etag(out, &out->ents[out->n - 1], etag, strlen(etag));
	return rc;
}

/* An object's Size: digits, white space around them; -1 if not, or past
 * 2^53 (no object is that large: a lying server's size would reach the
 * cache's offset arithmetic). */
static int64_t s3_size(const char *s)
{
	char *end;
	long long v;

	while (xml_ws(*s))
		s++;
	if (!isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	while (xml_ws(*end))
		end++;
	return errno || *end || v > OBJFS_OBJECT_SIZE_MAX ? -1 : (int64_t)v;
}

/* One Contents element's texts (NULL: no such child); keys url-encoded
 * when @decode. */
static int s3_object(const char *key, const char *size, const char *mt, const char *etag,
		     int decode, const char *prefix, struct objfs_listing *files,
		     struct objfs_s3_page *page, struct sbuf *tmp)
{
	int64_t sz = size ? s3_size(size) : -1;

	page->entries += key != NULL;
	if (key && sz >= 0)
		return add_key(key, decode, prefix, 0, sz, mt ? objfs_s3_parse_time(mt) : -1, etag,
			       files, tmp, page);
	tmp->n = 0;
	if (key && decode && !sbuf_room(tmp, strlen(key) + 1) &&
	    !objfs_url_decode_to(tmp->p, key, strlen(key), 1))
		key = tmp->p; /* named as it is meant */
	objfs_s3_skips_add(&page->skipped, key, key ? "no valid Size" : "an entry without a Key");
	return 0;
}

/* One CommonPrefixes element's Prefix (NULL: none). */
static int s3_common_prefix(const char *p, int decode, const char *prefix,
			    struct objfs_listing *dirs, struct objfs_s3_page *page,
			    struct sbuf *tmp)
{
	page->entries += p != NULL;
	return p ? add_key(p, decode, prefix, 1, -1, -1, NULL, dirs, tmp, page) : 0;
}

/*
 * The page's IsTruncated and NextContinuationToken texts (NULL: absent),
 * after its entries: sets @page, and checks a truncated page has a token.
 * @rc is the entries' outcome; returns the page's.
 */
static int s3_page_end(const char *trunc, const char *token, int rc, struct objfs_s3_page *page)
{
	page->truncated = trunc && (text_is(trunc, "true") || text_is(trunc, "1"));
	if (!rc && token && *token) {
		page->next_token = strdup(token);
		if (!page->next_token)
			rc = -ENOMEM;
	}
	if (page->truncated && !page->next_token && !rc) {
		objfs_warn("listing: truncated page without a continuation token");
		rc = -EPROTO;
	}
	if (rc) {
		free(page->next_token);
		page->next_token = NULL;
	}
	return rc;
}

/* ---- libxml2's tree: every document the reader gives up on ---- */

static xmlNodePtr child(xmlNodePtr n, const char *name)
{
	for (xmlNodePtr c = n ? n->children : NULL; c; c = c->next)
		if (c->type == XML_ELEMENT_NODE && xmlStrcmp(c->name, BAD_CAST name) == 0)
			return c;
	return NULL;
}

/* Text of element @name under @n, or NULL; caller xmlFree()s. */
static char *child_text(xmlNodePtr n, const char *name)
{
	xmlNodePtr c = child(n, name);

	return c ? (char *)xmlNodeGetContent(c) : NULL;
}

int objfs_s3_parse_list_tree(const char *xml, size_t len, const char *prefix,
			     struct objfs_listing *files, struct objfs_listing *dirs,
			     struct objfs_s3_page *page)
{
	struct sbuf tmp = { 0 };
	xmlDocPtr doc;
	xmlNodePtr root;
	char *trunc, *token, *enc;
	int rc = 0, decode;

	page->truncated = 0;
	page->next_token = NULL;
	page->entries = 0;
	memset(&page->skipped, 0, sizeof(page->skipped));
	if (len > (size_t)INT32_MAX)
		return -EPROTO;
	doc = xmlReadMemory(xml, (int)len, NULL, NULL,
			    XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
	if (!doc)
		return -EPROTO;
	root = xmlDocGetRootElement(doc);
	if (!root || xmlStrcmp(root->name, BAD_CAST "ListBucketResult") != 0) {
		xmlFreeDoc(doc);
		return -EPROTO;
	}
	enc = child_text(root, "EncodingType");
	decode = enc && text_is(enc, "url");
	xmlFree(enc);
	for (xmlNodePtr c = root->children; c && !rc; c = c->next) {
		if (c->type != XML_ELEMENT_NODE)
			continue;
		if (xmlStrcmp(c->name, BAD_CAST "Contents") == 0) {
			char *key = child_text(c, "Key"), *size = child_text(c, "Size");
			char *mt = child_text(c, "LastModified"), *etag = child_text(c, "ETag");

			rc = s3_object(key, size, mt, etag, decode, prefix, files, page, &tmp);
			xmlFree(key);
			xmlFree(size);
			xmlFree(mt);
			xmlFree(etag);
		} else if (xmlStrcmp(c->name, BAD_CAST "CommonPrefixes") == 0) {
			char *p = child_text(c, "Prefix");

			rc = s3_common_prefix(p, decode, prefix, dirs, page, &tmp);
			xmlFree(p);
		}
	}
	trunc = child_text(root, "IsTruncated");
	token = child_text(root, "NextContinuationToken");
	rc = s3_page_end(trunc, token, rc, page);
	xmlFree(trunc);
	xmlFree(token);
	free(tmp.p);
	xmlFreeDoc(doc);
	return rc;
}

/* ---- the reader ---- */

/* Byte classes: what may stand in text as it is. */
enum { C_BAD = 0, C_TEXT, C_WS, C_SPECIAL, C_HIGH };

static inline int cls(unsigned char c)
{
	if (c >= 0x80)
		return C_HIGH;
	if (c == '<' || c == '&' || c == ']')
		return C_SPECIAL;
	if (c >= 0x20)
		return C_TEXT;
	return c == '\t' || c == '\n' ? C_WS : C_BAD; /* '\r' (normalised by XML) is C_BAD */
}

/* Fields the reader collects; a text's place in the scratch buffer. */
enum { F_KEY, F_SIZE, F_MTIME, F_ETAG, F_PREFIX, F_TRUNC, F_TOKEN, F_ENC, F_N };

struct reader {
	const char *p, *end;
	const char *prefix;
	struct objfs_listing *files, *dirs;
	struct objfs_s3_page *page;
	struct sbuf sc;          /* collected texts, each NUL-terminated */
	struct sbuf tmp;         /* add_key's decode space */
	size_t off[F_N];         /* where field f's text starts in sc */
	int have[F_N];           /* field f was seen (its first element) */
	int cap;                 /* the field being collected, -1: none */
	int cap_depth;           /* ... at this depth */
	int depth;
	int kind;                /* element at depth 2: F_N, or 1 Contents, 2 CommonPrefixes */
	size_t keep;             /* sc bytes of the page-level fields */
	int rc;                  /* the entries' outcome: first error stops them */
	int decoded;             /* an entry was url-decoded (no EncodingType seen yet) */
	size_t textlen;          /* bytes of text since the last markup */
	const char *names[FAST_DEPTH_MAX + 1];
	size_t lens[FAST_DEPTH_MAX + 1];
};

#define GIVE_UP (-EAGAIN)

static int name_start(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static int name_char(unsigned char c)
{
	return name_start(c) || (c >= '0' && c <= '9') || c == '.' || c == '-';
}

/* A plain ASCII name at p; sets its length. 0 or GIVE_UP (a ':' too). */
static int read_name(struct reader *r, size_t *len)
{
	const char *s = r->p;

	if (s >= r->end || !name_start((unsigned char)*s))
		return GIVE_UP;
	while (s < r->end && name_char((unsigned char)*s))
		s++;
	*len = (size_t)(s - r->p);
	if (*len > FAST_NAME_MAX)
		return GIVE_UP;
	r->p = s;
	return 0;
}

static int is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n';
}

static void skip_ws(struct reader *r)
{
	while (r->p < r->end && is_ws(*r->p))
		r->p++;
}

static int eq(const char *a, size_t alen, const char *lit)
{
	return alen == strlen(lit) && memcmp(a, lit, alen) == 0;
}

/*
 * The length of a UTF-8 sequence at @s (before @end) that encodes an XML
 * character (no overlong forms, surrogates, U+FFFE/U+FFFF or past
 * U+10FFFF), or 0.
 */
static size_t utf8_char(const unsigned char *s, const unsigned char *end)
{
	size_t n = *s >= 0xf0 ? 4 : *s >= 0xe0 ? 3 : *s >= 0xc2 ? 2 : 0;
	unsigned lo = 0x80, hi = 0xbf;

	if (!n || *s > 0xf4 || (size_t)(end - s) < n)
		return 0;
	if (*s == 0xe0)
		lo = 0xa0;
	else if (*s == 0xed)
		hi = 0x9f;
	else if (*s == 0xf0)
		lo = 0x90;
	else if (*s == 0xf4)
		hi = 0x8f;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if (n == 3 && s[0] == 0xef && s[1] == 0xbf && s[2] >= 0xbe)
		return 0;
	return n;
}

/* Appends @n bytes to the field being collected, if any. */
static int collect(struct reader *r, const char *s, size_t n)
{
	if (r->cap < 0 || !n)
		return 0;
	if (r->sc.n - r->off[r->cap] + n > FAST_TEXT_MAX)
		return GIVE_UP;
	if (sbuf_room(&r->sc, n))
		return -ENOMEM;
	memcpy(r->sc.p + r->sc.n, s, n);
	r->sc.n += n;
	return 0;
}

/*
 * Checks text up to the next '<' (or '&' or ']', returned at), every byte
 * an XML character of UTF-8 and no '\r'; collects it. 0 or GIVE_UP.
 */
static int text_run(struct reader *r)
{
	const unsigned char *s = (const unsigned char *)r->p, *e = (const unsigned char *)r->end;
	const char *start = r->p;

	while (s < e) {
		unsigned char k = cls(*s);

		if (k == C_TEXT || k == C_WS) {
			s++;
		} else if (k == C_HIGH) {
			size_t n = utf8_char(s, e);

			if (!n)
				return GIVE_UP;
			s += n;
		} else if (k == C_SPECIAL) {
			break;
		} else {
			return GIVE_UP;
		}
	}
	r->p = (const char *)s;
	return collect(r, start, (size_t)(r->p - start));
}

/* A reference at p ('&'): a predefined entity or a character reference. */
static int reference(struct reader *r)
{
	static const struct { const char *name; char c; } ents[] = {
		{ "lt;", '<' }, { "gt;", '>' }, { "amp;", '&' }, { "quot;", '"' }, { "apos;", '\'' },
	};
	const char *s = r->p + 1;
	size_t left = (size_t)(r->end - s);
	unsigned long v = 0;
	char u[4];
	size_t n = 0;

	for (size_t i = 0; i < sizeof(ents) / sizeof(ents[0]); i++) {
		size_t l = strlen(ents[i].name);

		if (left >= l && memcmp(s, ents[i].name, l) == 0) {
			r->p = s + l;
			return collect(r, &ents[i].c, 1);
		}
	}
	if (left < 3 || s[0] != '#')
		return GIVE_UP;
	s++;
	if (*s == 'x') {
		for (s++; s < r->end && objfs_hexval((unsigned char)*s) >= 0 && n < 8; s++, n++)
			v = v * 16 + (unsigned long)objfs_hexval((unsigned char)*s);
	} else {
		for (; s < r->end && *s >= '0' && *s <= '9' && n < 8; s++, n++)
			v = v * 10 + (unsigned long)(*s - '0');
	}
	if (!n || s >= r->end || *s != ';')
		return GIVE_UP;
	if (!(v == 0x9 || v == 0xa || v == 0xd || (v >= 0x20 && v <= 0xd7ff) ||
	      (v >= 0xe000 && v <= 0xfffd) || (v >= 0x10000 && v <= 0x10ffff)))
		return GIVE_UP;
	r->p = s + 1;
	if (v < 0x80) {
		u[0] = (char)v;
		n = 1;
	} else if (v < 0x800) {
		u[0] = (char)(0xc0 | v >> 6);
		u[1] = (char)(0x80 | (v & 0x3f));
		n = 2;
	} else if (v < 0x10000) {
		u[0] = (char)(0xe0 | v >> 12);
		u[1] = (char)(0x80 | ((v >> 6) & 0x3f));
		u[2] = (char)(0x80 | (v & 0x3f));
		n = 3;
	} else {
		u[0] = (char)(0xf0 | v >> 18);
		u[1] = (char)(0x80 | ((v >> 12) & 0x3f));
		u[2] = (char)(0x80 | ((v >> 6) & 0x3f));
		u[3] = (char)(0x80 | (v & 0x3f));
		n = 4;
	}
	return collect(r, u, n);
}

/* A CDATA section at p ("<![CDATA["): its characters, as they are. */
static int cdata(struct reader *r)
{
	const char *s = r->p + 9, *close = NULL;

	for (const char *q = s; q + 3 <= r->end; q++) {
		if (q[0] == ']' && q[1] == ']' && q[2] == '>') {
			close = q;
			break;
		}
	}
	if (!close || (size_t)(close - s) > FAST_TEXT_MAX)
		return GIVE_UP;
	for (const unsigned char *q = (const unsigned char *)s; q < (const unsigned char *)close;) {
		unsigned char k = cls(*q);
		size_t n = k == C_HIGH ? utf8_char(q, (const unsigned char *)close) : 1;

		if (k == C_BAD || !n)
			return GIVE_UP;
		q += n;
	}
	r->p = close + 3;
	return collect(r, s, (size_t)(close - s));
}

/* Ends the field being collected at this depth: NUL-terminated in sc. */
static int field_end(struct reader *r)
{
	char nul = '\0';
	int f = r->cap;

	if (f < 0 || r->cap_depth != r->depth)
		return 0;
	if (sbuf_room(&r->sc, 1))
		return -ENOMEM;
	r->sc.p[r->sc.n++] = nul;
	r->have[f] = 1;
	r->cap = -1;
	return 0;
}

static const char *field(struct reader *r, int f)
{
	return r->have[f] ? r->sc.p + r->off[f] : NULL;
}

static void field_begin(struct reader *r, int f)
{
	r->cap = f;
	r->cap_depth = r->depth;
	r->off[f] = r->sc.n;
}

/* An element at the current depth opened: what it starts to collect. */
static int elem_open(struct reader *r, const char *name, size_t len)
{
	static const char *const fields[] = { "Key", "Size", "LastModified", "ETag" };

	if (r->depth == 1)
		return eq(name, len, "ListBucketResult") ? 0 : GIVE_UP;
	if (r->cap >= 0)
		return 0; /* inside a field: its text, nothing else */
	if (r->depth == 2) {
		r->kind = eq(name, len, "Contents") ? 1 : eq(name, len, "CommonPrefixes") ? 2 : 0;
		if (r->kind) {
			r->sc.n = r->keep; /* the last entry's texts are done with */
			for (int f = F_KEY; f <= F_PREFIX; f++)
				r->have[f] = 0;
		} else if (eq(name, len, "IsTruncated") && !r->have[F_TRUNC]) {
			field_begin(r, F_TRUNC);
		} else if (eq(name, len, "NextContinuationToken") && !r->have[F_TOKEN]) {
			field_begin(r, F_TOKEN);
		} else if (eq(name, len, "EncodingType") && !r->have[F_ENC]) {
			field_begin(r, F_ENC);
		}
		return 0;
	}
	if (r->depth == 3 && r->kind == 1) {
		for (int f = F_KEY; f <= F_ETAG; f++)
			if (eq(name, len, fields[f]) && !r->have[f])
				field_begin(r, f);
	} else if (r->depth == 3 && r->kind == 2 && eq(name, len, "Prefix") && !r->have[F_PREFIX]) {
		field_begin(r, F_PREFIX);
	}
	return 0;
}

/* The element at the current depth closed. */
static int elem_close(struct reader *r)
{
	int rc = field_end(r);

	if (rc)
		return rc;
	if (r->depth == 2 && (r->cap < 0)) {
		if (r->kind == 0) {
			r->keep = r->sc.n; /* page-level texts stay */
		} else if (!r->rc) {
			/* url unless the page said otherwise before its entry */
			int decode = r->have[F_ENC] ? text_is(field(r, F_ENC), "url") : 1;

			r->decoded |= decode && !r->have[F_ENC];
			if (r->kind == 1)
				r->rc = s3_object(field(r, F_KEY), field(r, F_SIZE), field(r, F_MTIME),
						  field(r, F_ETAG), decode, r->prefix, r->files,
						  r->page, &r->tmp);
			else
				r->rc = s3_common_prefix(field(r, F_PREFIX), decode, r->prefix,
							 r->dirs, r->page, &r->tmp);
			if (r->rc == -ENOMEM)
				return -ENOMEM;
		}
		r->kind = 0;
	}
	return 0;
}

/* "= 'value'" or '= "value"' (white space around '='): the opening quote, 0 if none. */
static char value_open(struct reader *r)
{
	skip_ws(r);
	if (r->p >= r->end || *r->p != '=')
		return 0;
	r->p++;
	skip_ws(r);
	if (r->p >= r->end || (*r->p != '"' && *r->p != '\''))
		return 0;
	return *r->p++;
}

/*
 * The attributes of a start tag, after its name: ' name="value"' each,
 * distinct names, values without '<', '&' or odd bytes; then '>' or '/>'.
 * Sets *empty for '/>'. 0 or GIVE_UP.
 */
static int attributes(struct reader *r, int *empty)
{
	const char *an[FAST_ATTRS_MAX];
	size_t al[FAST_ATTRS_MAX], na = 0;

	for (;;) {
		const char *ws = r->p, *v;
		size_t len;
		char q;

		skip_ws(r);
		if (r->p >= r->end)
			return GIVE_UP;
		if (*r->p == '>' || (*r->p == '/' && r->p + 1 < r->end && r->p[1] == '>')) {
			*empty = *r->p == '/';
			r->p += *empty ? 2 : 1;
			return 0;
		}
		if (r->p == ws || na == FAST_ATTRS_MAX)
			return GIVE_UP; /* attributes are apart by white space */
		an[na] = r->p;
		if (read_name(r, &len))
			return GIVE_UP;
		for (size_t i = 0; i < na; i++)
			if (al[i] == len && memcmp(an[i], an[na], len) == 0)
				return GIVE_UP;
		al[na++] = len;
		if (!(q = value_open(r)))
			return GIVE_UP;
		for (v = r->p; r->p < r->end && *r->p != q; ) {
			unsigned char k = cls((unsigned char)*r->p);
			size_t n = k == C_HIGH ? utf8_char((const unsigned char *)r->p,
							   (const unsigned char *)r->end) : 1;

			if (k == C_BAD || k == C_WS || !n || *r->p == '<' || *r->p == '&')
				return GIVE_UP; /* white space other than ' ' is normalised */
			r->p += n;
		}
		if (r->p >= r->end || (size_t)(r->p - v) > FAST_TEXT_MAX)
			return GIVE_UP;
		r->p++;
	}
}

/*
 * "<?xml version="1.0" [encoding="UTF-8"] [standalone="yes|no"]?>" at p,
 * in that order, the version required.
 */
static int xml_decl(struct reader *r)
{
	static const char *const keys[] = { "version", "encoding", "standalone" };
	int k = 0; /* the next pseudo-attribute may be keys[k..] */

	r->p += 5;
	for (;;) {
		const char *ws = r->p, *v;
		size_t len;
		char q;

		skip_ws(r);
		if (r->end - r->p >= 2 && r->p[0] == '?' && r->p[1] == '>')
			break;
		if (r->p == ws || read_name(r, &len))
			return GIVE_UP;
		while (k < 3 && !eq(r->p - len, len, keys[k]) && k > 0)
			k++;
		if (k == 3 || !eq(r->p - len, len, keys[k]) || !(q = value_open(r)))
			return GIVE_UP;
		v = r->p;
		while (r->p < r->end && *r->p != q && (size_t)(r->p - v) < 16)
			r->p++;
		if (r->p >= r->end || *r->p != q)
			return GIVE_UP;
		len = (size_t)(r->p - v);
		r->p++;
		if ((k == 0 && !eq(v, len, "1.0")) ||
		    (k == 1 && !(len == 5 && strncasecmp(v, "UTF-8", 5) == 0)) ||
		    (k == 2 && !eq(v, len, "yes") && !eq(v, len, "no")))
			return GIVE_UP;
		k++;
	}
	if (k == 0)
		return GIVE_UP; /* no version */
	r->p += 2;
	return 0;
}

/* The whole document; 0 when it was read, GIVE_UP or -ENOMEM. */
static int read_doc(struct reader *r)
{
	int rc, root_done = 0;

	if (r->end - r->p >= 6 && memcmp(r->p, "<?xml", 5) == 0 && is_ws(r->p[5]) &&
	    (rc = xml_decl(r)))
		return rc;
	while (r->p < r->end) {
		if (r->depth == 0) {
			skip_ws(r);
			if (r->p >= r->end)
				break;
			if (*r->p != '<' || root_done)
				return GIVE_UP; /* text, or a second root */
		} else if (*r->p != '<') {
			const char *at = r->p;

			if (*r->p == '&') {
				rc = reference(r);
			} else if (*r->p == ']') {
				if (r->end - r->p >= 3 && r->p[1] == ']' && r->p[2] == '>')
					return GIVE_UP; /* "]]>" outside CDATA */
				r->p++;
				rc = collect(r, "]", 1);
			} else {
				rc = text_run(r);
			}
			if (rc)
				return rc;
			r->textlen += (size_t)(r->p - at);
			if (r->textlen > FAST_TEXT_MAX)
				return GIVE_UP; /* libxml2 has limits of its own on text nodes */
			continue;
		}
		/* markup at p */
		r->textlen = 0;
		if (r->end - r->p < 2)
			return GIVE_UP;
		if (r->p[1] == '/') {
			size_t len;

			r->p += 2;
			if (r->depth == 0 || read_name(r, &len) || len != r->lens[r->depth] ||
			    memcmp(r->p - len, r->names[r->depth], len) != 0)
				return GIVE_UP;
			skip_ws(r);
			if (r->p >= r->end || *r->p != '>')
				return GIVE_UP;
			r->p++;
			if ((rc = elem_close(r)))
				return rc;
			if (--r->depth == 0)
				root_done = 1;
		} else if (r->p[1] == '!') {
			if (r->depth == 0 || r->end - r->p < 9 || memcmp(r->p, "<![CDATA[", 9) != 0)
				return GIVE_UP; /* DOCTYPE, comment */
			if ((rc = cdata(r)))
				return rc;
		} else if (r->p[1] == '?') {
			return GIVE_UP; /* processing instruction */
		} else {
			const char *name;
			size_t len;
			int empty = 0;

			r->p++;
			name = r->p;
			if (root_done || r->depth == FAST_DEPTH_MAX || read_name(r, &len) ||
			    attributes(r, &empty))
				return GIVE_UP;
			r->depth++;
			r->names[r->depth] = name;
			r->lens[r->depth] = len;
			if ((rc = elem_open(r, name, len)))
				return rc;
			if (empty) {
				if ((rc = elem_close(r)))
					return rc;
				if (--r->depth == 0)
					root_done = 1;
			}
		}
	}
	return root_done ? 0 : GIVE_UP;
}

int objfs_s3_parse_list_fast(const char *xml, size_t len, const char *prefix,
			     struct objfs_listing *files, struct objfs_listing *dirs,
			     struct objfs_s3_page *page)
{
	struct reader r = { .p = xml, .end = xml + len, .prefix = prefix, .files = files,
			    .dirs = dirs, .page = page, .cap = -1 };
	size_t nf = files->n, nd = dirs->n;
	int rc;

	page->truncated = 0;
	page->next_token = NULL;
	page->entries = 0;
	memset(&page->skipped, 0, sizeof(page->skipped));
	rc = xml ? read_doc(&r) : GIVE_UP;
	if (!rc && r.decoded && !(r.have[F_ENC] && text_is(field(&r, F_ENC), "url")))
		rc = GIVE_UP; /* decoded on a page that never said url (top of file) */
	if (!rc)
		rc = s3_page_end(field(&r, F_TRUNC), field(&r, F_TOKEN), r.rc, page);
	else {
		objfs_listing_truncate(files, nf);
		objfs_listing_truncate(dirs, nd);
		page->entries = 0;
		memset(&page->skipped, 0, sizeof(page->skipped));
	}
	free(r.sc.p);
	free(r.tmp.p);
	return rc;
}

int objfs_s3_parse_list(const char *xml, size_t len, const char *prefix,
			struct objfs_listing *files, struct objfs_listing *dirs,
			struct objfs_s3_page *page)
{
	int rc = objfs_s3_parse_list_fast(xml, len, prefix, files, dirs, page);

	if (rc == GIVE_UP)
		rc = objfs_s3_parse_list_tree(xml, len, prefix, files, dirs, page);
	return rc;
}
