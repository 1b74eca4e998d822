/*
 * buf: growing a heap buffer by doubling, for the text objfs builds up
 * piece by piece (response bodies in the engine, canonical requests in
 * SigV4). Callers keep their own caps on what they accept; this only
 * grows.
 */
#ifndef OBJFS_BUF_H
#define OBJFS_BUF_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/*
 * Makes *@p (of *@cap bytes, NULL/0 at first) hold at least @need bytes,
 * doubling from @first. 0 or -ENOMEM; on error *@p and *@cap are unchanged.
 */
static inline int objfs_buf_reserve(char **p, size_t *cap, size_t need, size_t first)
{
	size_t nc = *cap ? *cap : first;
	char *np;

	if (need <= *cap)
		return 0;
	while (nc < need)
		nc *= 2;
	np = realloc(*p, nc);
	if (!np)
		return -ENOMEM;
	*p = np;
	*cap = nc;
	return 0;
}

/*
 * Appends to the fixed buffer @buf (@cap bytes) like snprintf at *@len;
 * *@len counts what the whole text needs, so a caller learns the size it
 * would have taken (the stats and metrics texts).
 */
static inline void objfs_appendf(char *buf, size_t cap, size_t *len, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static inline void objfs_appendf(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(*len < cap ? buf + *len : NULL, *len < cap ? cap - *len : 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		*len += (size_t)n;
}

#endif
