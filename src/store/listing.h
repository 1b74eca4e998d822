/*
 * listing: parsers for HTTP directory listings.
 *
 * Three formats are understood: nginx "autoindex_format json", and HTML index
 * pages (nginx and Apache autoindex, or any page of links). nginx's own
 * JSON is read by a reader of that exact form, anything else by json-c. HTML is parsed
 * with libxml2's HTML parser, never by hand, because index pages come from
 * servers we do not control. Every name that comes out is a valid single path
 * component (not empty, not "." or "..", no '/', no NUL, at most 255 bytes);
 * anything else is dropped with a debug log line. Duplicate names keep their
 * first entry.
 */
#ifndef OBJFS_LISTING_H
#define OBJFS_LISTING_H

#include <stddef.h>
#include <stdint.h>

struct objfs_listent {
	char *name;    /* decoded file name, owned by the listing */
	int is_dir;
	int64_t size;  /* bytes, or -1 when the listing does not say */
	int64_t mtime; /* seconds since the epoch, or -1 when unknown */
	char *etag;    /* owned, NULL when the listing does not say */
};

struct objfs_listing {
	struct objfs_listent *ents; /* owned */
	size_t n, cap;
	size_t max; /* entries at most (0: no cap); beyond it appends fail with
		       -E2BIG, and the parsers stop with -E2BIG (a hostile or
		       runaway listing: max_dir_entries) */
	size_t bytes;     /* what the entries stand for: objfs_listent_bytes() summed */
	size_t max_bytes; /* bytes at most (0: no cap); an append or ETag past it
			     fails with -EFBIG, and the parsers stop with
			     -EFBIG (max_dir_bytes) */
};

/*
 * What the daemon holds for one listed entry besides its name and ETag:
 * its node (128 bytes, a short name inline), its hash and listing slots
 * and the allocator's rounding. Measured at the peak of a listing: 282
 * bytes an entry for 1M S3 keys of 74 bytes with 4-byte ETags, 306 for an
 * nginx index of 1M 49-byte names (265 kept).
 */
#define OBJFS_LISTENT_BYTES 224

/* The memory entry @e stands for: OBJFS_LISTENT_BYTES, its name and its ETag. */
size_t objfs_listent_bytes(const struct objfs_listent *e);

/* Frees all entries; the listing is empty and reusable afterwards (max kept). */
void objfs_listing_clear(struct objfs_listing *l);

/* Frees the entries after the first @n (none when l->n <= n); the array stays. */
void objfs_listing_truncate(struct objfs_listing *l, size_t n);

/*
 * Append an entry (name copied). Returns 0, -EINVAL when @name is not a valid
 * path component (the entry is skipped), -EEXIST when the name is already
 * present (skipped), -E2BIG when the listing holds l->max entries already,
 * -EFBIG when the entry would take l->bytes past l->max_bytes, or -ENOMEM.
 */
int objfs_listing_add(struct objfs_listing *l, const char *name, size_t namelen,
		      int is_dir, int64_t size, int64_t mtime);

/* Sets the ETag of @e, an entry of @l, to a copy of @etag[0..len). 0,
 * -EFBIG past l->max_bytes (@e keeps its ETag), or -ENOMEM. */
int objfs_listing_set_etag(struct objfs_listing *l, struct objfs_listent *e, const char *etag,
			   size_t len);

/*
 * Drops later entries whose names repeat an earlier one, keeping order;
 * objfs_listing_add() only catches repeats in small listings. 0 or -ENOMEM.
 */
int objfs_listing_dedupe(struct objfs_listing *l);

/* Initialises the XML parser; call once before threads start. */
void objfs_listing_global_init(void);

/* Returns 1 when @name[0..len) is usable as a file name, else 0. */
int objfs_name_valid(const char *name, size_t len);

/*
 * Parse an nginx JSON listing: an array of {"name","type","mtime","size"}.
 * Returns 0 with entries appended to @out, -EPROTO for a body that is not
 * such an array, -E2BIG past out->max entries, -EFBIG past out->max_bytes,
 * or -ENOMEM (the listing is then left empty). Element by element: memory is the entries, not a
 * document tree of the whole body.
 */
int objfs_listing_parse_json(const char *buf, size_t len, struct objfs_listing *out);

/*
 * objfs_listing_parse_json() through json-c's tokener alone, without the
 * reader of nginx's own output that objfs_listing_parse_json() tries
 * first: the same results (for tests and fuzzers, which compare them).
 */
int objfs_listing_parse_json_tokener(const char *buf, size_t len, struct objfs_listing *out);

/*
 * Helpers the listing parsers share (listing.c, s3_list.c).
 * objfs_listing_civil: seconds since the epoch of a UTC calendar time, as
 * timegm() normalises it (a day past the month's end runs into the next).
 * objfs_listing_hms: "HH:MM:SS" at @s into tm6[3..5], with tm6[0..2]
 * (year, month, day) already set; 1 when all six lie where strptime()
 * would take them (year from 1900, seconds below 60), else 0.
 * objfs_listing_digits: the value of the @n decimal digits at @s (all
 * readable), or -1.
 */
int64_t objfs_listing_civil(int year, int mon, int day, int hour, int min, int sec);
int objfs_listing_hms(const char *s, int tm6[6]);
int objfs_listing_digits(const char *s, int n);

/*
 * Parse an HTML index page that was served for directory @dir_path (decoded
 * absolute URL path ending in '/'). Each <a href> that names a direct child
 * of @dir_path becomes an entry: relative hrefs ("x", "./x", "x/"), or
 * absolute-path hrefs under @dir_path. Parent links, query links (Apache's
 * "?C=N;O=D"), fragments, other hosts and deeper paths are ignored. A
 * trailing '/' marks a directory. Sizes and times are left unknown (-1).
 * Returns 0, -EPROTO when the page cannot be parsed at all, -E2BIG past
 * out->max entries, -EFBIG past out->max_bytes, or -ENOMEM (the listing is
 * then left empty).
 */
int objfs_listing_parse_html(const char *buf, size_t len, const char *dir_path,
			     struct objfs_listing *out);

#endif
