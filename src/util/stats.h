/*
 * stats: process-wide request counters and a time-to-first-byte histogram.
 *
 * The engine records every finished request (objfs_stats_request); the
 * block cache, the disk cache and the GPU side API keep their own counters.
 * A leaf: it knows none of them. The composition root (mount.c,
 * objfs_stats_format) renders them all as "key value" lines, which the
 * mount shows while it runs (the hidden file .objfs-stats at the mount's
 * root) and prints at unmount with -o stats.
 *
 * Counters are relaxed atomics: no lock on the request path, and a reader
 * sees each counter exact but the set not necessarily from one instant.
 * Time to first byte goes into buckets of powers of two microseconds
 * (bucket i holds [2^i, 2^(i+1)) us), so percentiles are reported as the
 * upper bound of the bucket they fall in: coarse (within 2x) but cheap and
 * bounded in memory.
 */
#ifndef OBJFS_STATS_H
#define OBJFS_STATS_H

#include <stddef.h>
#include <stdint.h>

#define OBJFS_STATS_BUCKETS 32

struct objfs_stats {
	uint64_t requests;      /* finished requests, successful or not */
	uint64_t errors;        /* finished with an error after retries */
	uint64_t retries;       /* extra attempts */
	uint64_t bytes;         /* body bytes delivered */
	uint64_t direct;        /* ranged GETs received by the engine's direct
				   path (engine_direct.c), not through libcurl */
	uint64_t direct_fallbacks; /* direct attempts handed over to libcurl */
	uint64_t joined;        /* of the direct ones, ranges received on the GET
				   of the range before them (joined GETs) */
	uint64_t tls_own;       /* https connections whose records objfs decrypts
				   itself (tls_rx.h) */
	uint64_t tls_own_failed; /* of them, ended by a record the reader failed */
	uint64_t tls_own_offs;  /* times the reader was switched off for an
				   origin for a rest (repeated failures) */
	uint64_t ttfb[OBJFS_STATS_BUCKETS]; /* bucket i: [2^i, 2^(i+1)) us (0 and 1 in 0) */
	uint64_t ttfb_sum_us;   /* of every time counted in ttfb */
};

/* Records one finished request: attempts made, bytes, error, time to first
 * byte of the last attempt in microseconds (< 0: none arrived). */
void objfs_stats_request(unsigned attempts, size_t bytes, int err, int64_t ttfb_us);

/* Records a ranged GET finished on the direct path (@fallback 0) or one
 * of its attempts handed over to libcurl (@fallback 1). */
void objfs_stats_direct(int fallback);

/* Records a ranged GET that rode on the GET of the range before it. */
void objfs_stats_joined(void);

/* Records an https connection whose reading objfs took from OpenSSL
 * (@failed 0), or one that a record the reader failed ended (1). */
void objfs_stats_tls_own(int failed);
/* Records the reader switched off for an origin, for a rest. */
void objfs_stats_tls_own_off(void);

/* Copies the current counters into @out. */
void objfs_stats_get(struct objfs_stats *out);

/* Resets every counter (tests). */
void objfs_stats_reset(void);

/* Upper bound in microseconds of the bucket holding percentile @p (0-100)
 * of @h; 0 when empty. */
uint64_t objfs_stats_percentile(const uint64_t h[OBJFS_STATS_BUCKETS], double p);

#endif
