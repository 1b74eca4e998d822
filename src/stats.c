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
	atomic_uint_fast64_t requests, errors, retries, bytes, direct, direct_fallbacks;
	atomic_uint_fast64_t ttfb[OBJFS_STATS_BUCKETS];
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
	if (ttfb_us >= 0)
		atomic_fetch_add_explicit(&g.ttfb[bucket_of((uint64_t)ttfb_us)], 1,
					  memory_order_relaxed);
}

void objfs_stats_direct(int fallback)
{
	atomic_fetch_add_explicit(fallback ? &g.direct_fallbacks : &g.direct, 1,
				  memory_order_relaxed);
}

void objfs_stats_get(struct objfs_stats *out)
{
	out->requests = atomic_load_explicit(&g.requests, memory_order_relaxed);
	out->errors = atomic_load_explicit(&g.errors, memory_order_relaxed);
	out->retries = atomic_load_explicit(&g.retries, memory_order_relaxed);
	out->bytes = atomic_load_explicit(&g.bytes, memory_order_relaxed);
	out->direct = atomic_load_explicit(&g.direct, memory_order_relaxed);
	out->direct_fallbacks = atomic_load_explicit(&g.direct_fallbacks, memory_order_relaxed);
	for (unsigned i = 0; i < OBJFS_STATS_BUCKETS; i++)
		out->ttfb[i] = atomic_load_explicit(&g.ttfb[i], memory_order_relaxed);
}

void objfs_stats_reset(void)
{
	atomic_store(&g.requests, 0);
	atomic_store(&g.errors, 0);
	atomic_store(&g.retries, 0);
	atomic_store(&g.bytes, 0);
	atomic_store(&g.direct, 0);
	atomic_store(&g.direct_fallbacks, 0);
	for (unsigned i = 0; i < OBJFS_STATS_BUCKETS; i++)
		atomic_store(&g.ttfb[i], 0);
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

/* Appends to buf like snprintf; *len counts what the whole text needs. */
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(*len < cap ? buf + *len : NULL, *len < cap ? cap - *len : 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		*len += (size_t)n;
}

size_t objfs_stats_format(char *buf, size_t cap, const struct objfs_stats *s,
			  const struct objfs_cache_stats *c,
			  const struct objfs_diskcache_stats *d,
			  const struct objfs_side_stats *sd)
{
	size_t len = 0;

	if (cap)
		buf[0] = '\0';
	put(buf, cap, &len, "requests %llu\nrequest_errors %llu\nretries %llu\nbytes %llu\n",
	    (unsigned long long)s->requests, (unsigned long long)s->errors,
	    (unsigned long long)s->retries, (unsigned long long)s->bytes);
	put(buf, cap, &len, "requests_direct %llu\ndirect_fallbacks %llu\n",
	    (unsigned long long)s->direct, (unsigned long long)s->direct_fallbacks);
	put(buf, cap, &len, "ttfb_p50_us %llu\nttfb_p90_us %llu\nttfb_p99_us %llu\n",
	    (unsigned long long)objfs_stats_percentile(s->ttfb, 50),
	    (unsigned long long)objfs_stats_percentile(s->ttfb, 90),
	    (unsigned long long)objfs_stats_percentile(s->ttfb, 99));
	if (c)
		put(buf, cap, &len,
		    "cache_hits %llu\ncache_misses %llu\ncache_waits %llu\ncache_fetches %llu\n"
		    "cache_fetch_bytes %llu\ncache_fetch_errors %llu\nprefetched_blocks %llu\n"
		    "prefetch_unused_blocks %llu\ncache_evictions %llu\ncache_direct_bytes %llu\n"
		    "cache_bytes %zu\ncache_cap %zu\n",
		    (unsigned long long)c->hits, (unsigned long long)c->misses,
		    (unsigned long long)c->waits, (unsigned long long)c->fetches,
		    (unsigned long long)c->fetch_bytes, (unsigned long long)c->fetch_errors,
		    (unsigned long long)c->prefetched, (unsigned long long)c->prefetch_unused,
		    (unsigned long long)c->evictions, (unsigned long long)c->direct_bytes,
		    c->bytes, c->cap);
	if (d)
		put(buf, cap, &len,
		    "disk_cache_state %s\ndisk_cache_hits %llu\ndisk_cache_misses %llu\n"
		    "disk_cache_bad %llu\ndisk_cache_read_errors %llu\ndisk_cache_writes %llu\n"
		    "disk_cache_write_bytes %llu\ndisk_cache_writes_dropped %llu\n"
		    "disk_cache_evictions %llu\ndisk_cache_files %llu\ndisk_cache_bytes %llu\n"
		    "disk_cache_cap %llu\n",
		    d->degraded ? "off" : "on", (unsigned long long)d->hits,
		    (unsigned long long)d->misses, (unsigned long long)d->bad,
		    (unsigned long long)d->read_errors, (unsigned long long)d->writes,
		    (unsigned long long)d->write_bytes, (unsigned long long)d->writes_dropped,
		    (unsigned long long)d->evictions, (unsigned long long)d->files,
		    (unsigned long long)d->bytes, (unsigned long long)d->cap);
	if (sd)
		put(buf, cap, &len,
		    "side_sessions_open %llu\nside_sessions_total %llu\nside_fills %llu\n"
		    "side_fill_bytes %llu\nside_fill_errors %llu\nside_ring_wait_us %llu\n",
		    (unsigned long long)sd->sessions_open, (unsigned long long)sd->sessions_total,
		    (unsigned long long)sd->fills, (unsigned long long)sd->fill_bytes,
		    (unsigned long long)sd->fill_errors, (unsigned long long)sd->ring_wait_us);
	return len;
}
