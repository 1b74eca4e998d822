/*
 * stats: see stats.h.
 */
#include "config.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "stats.h"

static struct {
	atomic_uint_fast64_t requests, errors, retries, bytes, direct, direct_fallbacks, joined;
	atomic_uint_fast64_t tls_own, tls_own_failed, tls_own_offs;
	atomic_uint_fast64_t ttfb[OBJFS_STATS_BUCKETS], ttfb_sum_us;
} g;

static unsigned bucket_of(uint64_t us)
{
	unsigned b = 0;

	while (us > 1 && b < OBJFS_STATS_BUCKETS - 1) {
		us >>= 1;
		b++;
	}
	return b;
}

void objfs_stats_request(unsigned attempts, size_t bytes, int err, int64_t ttfb_us)
{
	atomic_fetch_add_explicit(&g.requests, 1, memory_order_relaxed);
	if (err)
		atomic_fetch_add_explicit(&g.errors, 1, memory_order_relaxed);
	if (attempts > 1)
		atomic_fetch_add_explicit(&g.retries, attempts - 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&g.bytes, bytes, memory_order_relaxed);
	if (ttfb_us >= 0) {
		atomic_fetch_add_explicit(&g.ttfb[bucket_of((uint64_t)ttfb_us)], 1,
					  memory_order_relaxed);
		atomic_fetch_add_explicit(&g.ttfb_sum_us, (uint64_t)ttfb_us, memory_order_relaxed);
	}
}

void objfs_stats_direct(int fallback)
{
	atomic_fetch_add_explicit(fallback ? &g.direct_fallbacks : &g.direct, 1,
				  memory_order_relaxed);
}

void objfs_stats_joined(void)
{
	atomic_fetch_add_explicit(&g.joined, 1, memory_order_relaxed);
}

void objfs_stats_tls_own(int failed)
{
	atomic_fetch_add_explicit(failed ? &g.tls_own_failed : &g.tls_own, 1, memory_order_relaxed);
}

void objfs_stats_tls_own_off(void)
{
	atomic_fetch_add_explicit(&g.tls_own_offs, 1, memory_order_relaxed);
}

void objfs_stats_get(struct objfs_stats *out)
{
	out->requests = atomic_load_explicit(&g.requests, memory_order_relaxed);
	out->errors = atomic_load_explicit(&g.errors, memory_order_relaxed);
	out->retries = atomic_load_explicit(&g.retries, memory_order_relaxed);
	out->bytes = atomic_load_explicit(&g.bytes, memory_order_relaxed);
	out->direct = atomic_load_explicit(&g.direct, memory_order_relaxed);
	out->direct_fallbacks = atomic_load_explicit(&g.direct_fallbacks, memory_order_relaxed);
	out->joined = atomic_load_explicit(&g.joined, memory_order_relaxed);
	out->tls_own = atomic_load_explicit(&g.tls_own, memory_order_relaxed);
	out->tls_own_failed = atomic_load_explicit(&g.tls_own_failed, memory_order_relaxed);
	out->tls_own_offs = atomic_load_explicit(&g.tls_own_offs, memory_order_relaxed);
	for (unsigned i = 0; i < OBJFS_STATS_BUCKETS; i++)
		out->ttfb[i] = atomic_load_explicit(&g.ttfb[i], memory_order_relaxed);
	out->ttfb_sum_us = atomic_load_explicit(&g.ttfb_sum_us, memory_order_relaxed);
}

void objfs_stats_reset(void)
{
	atomic_store(&g.requests, 0);
	atomic_store(&g.errors, 0);
	atomic_store(&g.retries, 0);
	atomic_store(&g.bytes, 0);
	atomic_store(&g.direct, 0);
	atomic_store(&g.direct_fallbacks, 0);
	atomic_store(&g.joined, 0);
	atomic_store(&g.tls_own, 0);
	atomic_store(&g.tls_own_failed, 0);
	atomic_store(&g.tls_own_offs, 0);
	for (unsigned i = 0; i < OBJFS_STATS_BUCKETS; i++)
		atomic_store(&g.ttfb[i], 0);
	atomic_store(&g.ttfb_sum_us, 0);
}

uint64_t objfs_stats_percentile(const uint64_t h[OBJFS_STATS_BUCKETS], double p)
{
	uint64_t total = 0, seen = 0, want;

	for (unsigned i = 0; i < OBJFS_STATS_BUCKETS; i++)
		total += h[i];
	if (!total)
		return 0;
	want = (uint64_t)((double)total * p / 100.0 + 0.999999);
	if (want == 0)
		want = 1;
	for (unsigned i = 0; i < OBJFS_STATS_BUCKETS; i++) {
		seen += h[i];
		if (seen >= want)
			return (uint64_t)2 << i;
	}
	return (uint64_t)2 << (OBJFS_STATS_BUCKETS - 1);
}
