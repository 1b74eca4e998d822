/*
 * range: see range.h.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "range.h"

static int parse_i64(const char **p, int64_t *out)
{
	const char *s = *p;
	int64_t v = 0;

	if (!isdigit((unsigned char)*s))
		return -EPROTO;
	while (isdigit((unsigned char)*s)) {
		int d = *s++ - '0';

		v = v * 10 + d;
		if (v > OBJFS_OBJECT_SIZE_MAX)
			return -EPROTO;
	}
	*out = v;
	*p = s;
	return 0;
}

int objfs_parse_content_range(const char *v, int64_t *first, int64_t *last, int64_t *total)
{
	const char *p = v;

	while (*p == ' ' || *p == '\t')
		p++;
	if (strncasecmp(p, "bytes", 5) != 0)
		return -EPROTO;
	p += 5;
	if (*p != ' ' && *p != '=')
		return -EPROTO;
	while (*p == ' ' || *p == '=')
		p++;
	if (parse_i64(&p, first) || *p++ != '-' || parse_i64(&p, last) || *p++ != '/')
		return -EPROTO;
	if (*p == '*') {
		*total = -1;
		p++;
	} else if (parse_i64(&p, total)) {
		return -EPROTO;
	}
	while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
		p++;
	if (*p || *last < *first || (*total >= 0 && *last >= *total))
		return -EPROTO;
	return 0;
}

size_t objfs_range_clamp(int64_t file_size, int64_t off, size_t size)
{
	if (off < 0 || file_size <= off)
		return 0;
	if ((uint64_t)(file_size - off) < size)
		return (size_t)(file_size - off);
	return size;
}

size_t objfs_range_split(int64_t off, size_t len, size_t chunk, size_t max,
			 int64_t *offs, size_t *lens)
{
	size_t n = 0;

	while (len && n < max) {
		size_t room = chunk - (size_t)(off % (int64_t)chunk);
		size_t take = len < room ? len : room;

		offs[n] = off;
		lens[n] = take;
		n++;
		off += (int64_t)take;
		len -= take;
	}
	return n;
}
