/*
 * buf: growing a heap buffer by doubling, for the text objfs builds up
 * piece by piece (response bodies in the engine, canonical requests in
 * SigV4; callers keep their own caps on what they accept, this only
 * grows), appending to a fixed one, and copying into memory that a
 * device reads next (GPU ring slots: objfs_copy_stream).
 */
#ifndef OBJFS_BUF_H
#define OBJFS_BUF_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#endif

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
 * memcpy for memory a device reads next, not this processor (a GPU ring
 * slot, which the GPU's DMA reads from memory): on x86-64, full cache
 * lines are written with streaming stores, which neither read the
 * destination's lines first (a plain store does, "for ownership") nor
 * leave them in the caches, so many threads copying into one ring move
 * more bytes a second than with memcpy (contrib/bench/memcpy_bw.c
 * measures both). An sfence at the end orders the streamed
 * bytes before the caller's next store (a completion it publishes).
 * Short copies, and everything elsewhere, are memcpy.
 */
static inline void objfs_copy_stream(void *dst, const void *src, size_t n)
{
#if defined(__x86_64__) && defined(__SSE2__)
	char *d = dst;
	const char *s = src;
	size_t head = (64 - ((uintptr_t)d & 63)) & 63;

	if (n < 4096) {
		memcpy(dst, src, n);
		return;
	}
	memcpy(d, s, head);
	d += head;
	s += head;
	n -= head;
	for (; n >= 64; d += 64, s += 64, n -= 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));

		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	memcpy(d, s, n);
	_mm_sfence();
#else
	memcpy(dst, src, n);
#endif
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
