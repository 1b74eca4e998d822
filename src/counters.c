/*
 * counters: see counters.h. One row a line; the FIELD macros give a row's
 * source, offset and size, so a counter of a struct is named once.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "counters.h"

#define FIELD(from, type, f) from, offsetof(type, f), sizeof(((type *)0)->f), NULL
#define ENGINE(f) FIELD(OBJFS_FROM_ENGINE, struct objfs_stats, f)
#define CACHE(f) FIELD(OBJFS_FROM_CACHE, struct objfs_cache_stats, f)
#define DISK(f) FIELD(OBJFS_FROM_DISK, struct objfs_diskcache_stats, f)
#define SIDE(f) FIELD(OBJFS_FROM_SIDE, struct objfs_side_stats, f)
#define GET(from, fn) from, 0, 0, fn

static uint64_t ttfb_p50(const struct objfs_counter_set *s)
{
	return objfs_stats_percentile(s->engine->ttfb, 50);
}

static uint64_t ttfb_p90(const struct objfs_counter_set *s)
{
	return objfs_stats_percentile(s->engine->ttfb, 90);
}

static uint64_t ttfb_p99(const struct objfs_counter_set *s)
{
	return objfs_stats_percentile(s->engine->ttfb, 99);
}

static uint64_t disk_on(const struct objfs_counter_set *s)
{
	return !s->disk->degraded;
}

const struct objfs_counter objfs_counters[] = {
	{ "requests", OBJFS_COUNTER, "requests", "requests finished, data and metadata, "
	  "successful or not", ENGINE(requests) },
	{ "request_errors", OBJFS_COUNTER, "requests", "requests that failed after their "
	  "retries", ENGINE(errors) },
	{ "retries", OBJFS_COUNTER, "attempts", "attempts beyond the first of a request",
	  ENGINE(retries) },
	{ "bytes", OBJFS_COUNTER, "bytes", "response body bytes received, data and listings",
	  ENGINE(bytes) },
	{ "requests_direct", OBJFS_COUNTER, "requests", "ranged GETs received on objfs's own "
	  "receive path (direct_recv)", ENGINE(direct) },
	{ "direct_fallbacks", OBJFS_COUNTER, "requests", "ranged GET attempts the direct path "
	  "handed to libcurl", ENGINE(direct_fallbacks) },
	{ "requests_joined", OBJFS_COUNTER, "requests", "direct ranges received on the GET of "
	  "the range before them", ENGINE(joined) },
	{ "tls_own_conns", OBJFS_COUNTER, "connections", "HTTPS connections whose TLS records "
	  "objfs decrypts itself", ENGINE(tls_own) },
	{ "tls_own_failures", OBJFS_COUNTER, "connections", "of those, the ones a record the "
	  "reader refused ended", ENGINE(tls_own_failed) },
	{ "tls_own_offs", OBJFS_COUNTER, "events", "times repeated failures turned the own TLS "
	  "reader off for an origin, for a rest", ENGINE(tls_own_offs) },
	{ "ttfb_p50_us", OBJFS_GAUGE, "us", "median time to first byte (the upper bound of its "
	  "power-of-two bucket)", GET(OBJFS_FROM_ENGINE, ttfb_p50) },
	{ "ttfb_p90_us", OBJFS_GAUGE, "us", "90th percentile of the time to first byte",
	  GET(OBJFS_FROM_ENGINE, ttfb_p90) },
	{ "ttfb_p99_us", OBJFS_GAUGE, "us", "99th percentile of the time to first byte",
	  GET(OBJFS_FROM_ENGINE, ttfb_p99) },
	{ "cache_hits", OBJFS_COUNTER, "blocks", "block lookups the memory cache answered",
	  CACHE(hits) },
	{ "cache_misses", OBJFS_COUNTER, "blocks", "block lookups that started a fetch",
	  CACHE(misses) },
	{ "cache_waits", OBJFS_COUNTER, "blocks", "block lookups that joined a fetch in flight "
	  "(single flight)", CACHE(waits) },
	{ "cache_fetches", OBJFS_COUNTER, "blocks", "block fetches started, from the disk cache "
	  "or the network", CACHE(fetches) },
	{ "cache_fetch_bytes", OBJFS_COUNTER, "bytes", "bytes of the blocks fetched",
	  CACHE(fetch_bytes) },
	{ "cache_fetch_errors", OBJFS_COUNTER, "blocks", "block fetches that failed",
	  CACHE(fetch_errors) },
	{ "prefetched_blocks", OBJFS_COUNTER, "blocks", "blocks fetched ahead of a sequential "
	  "reader", CACHE(prefetched) },
	{ "prefetch_unused_blocks", OBJFS_COUNTER, "blocks", "prefetched blocks evicted before "
	  "anyone read them", CACHE(prefetch_unused) },
	{ "cache_evictions", OBJFS_COUNTER, "blocks", "blocks evicted to stay under cache_size",
	  CACHE(evictions) },
	{ "cache_direct_bytes", OBJFS_COUNTER, "bytes", "bytes fetched from the network "
	  "straight into a caller's memory (random reads, GPU fills), not into blocks",
	  CACHE(direct_bytes) },
	{ "cache_wait_us", OBJFS_COUNTER, "us", "time readers spent waiting for blocks in "
	  "flight, summed over readers", CACHE(wait_us) },
	{ "prefetch_capped", OBJFS_COUNTER, "events", "prefetches cut short for want of room "
	  "under cache_size", CACHE(prefetch_capped) },
	{ "cache_bytes", OBJFS_GAUGE, "bytes", "block memory held now", CACHE(bytes) },
	{ "cache_pool_bytes", OBJFS_GAUGE, "bytes", "of cache_bytes, freed block buffers kept "
	  "for reuse", CACHE(pool_bytes) },
	{ "cache_cap", OBJFS_GAUGE, "bytes", "the memory cache's cap (cache_size)",
	  CACHE(cap) },
	{ "cache_ranges_kept", OBJFS_COUNTER, "ranges", "page ranges of blocks kept in memory "
	  "(random pages, samples, a young stream's prefetch)", CACHE(ranges_kept) },
	{ "refetched_bytes", OBJFS_COUNTER, "bytes", "bytes asked of the store again while "
	  "their object was open (evicted, or fetched twice)", CACHE(refetched_bytes) },
	{ "read_random", OBJFS_COUNTER, "reads", "reads the read policy served as random "
	  "(the pages asked, no prefetch)", CACHE(reads[0]) },
	{ "read_random_bytes", OBJFS_COUNTER, "bytes", "bytes of those reads",
	  CACHE(read_bytes[0]) },
	{ "read_random_fetched_bytes", OBJFS_COUNTER, "bytes", "bytes those reads asked of "
	  "the disk cache or the store", CACHE(read_fetched[0]) },
	{ "read_sequential", OBJFS_COUNTER, "reads", "reads that continued a sequential run "
	  "(prefetch earned by the run)", CACHE(reads[1]) },
	{ "read_sequential_bytes", OBJFS_COUNTER, "bytes", "bytes of those reads",
	  CACHE(read_bytes[1]) },
	{ "read_sequential_fetched_bytes", OBJFS_COUNTER, "bytes", "bytes those reads and "
	  "their prefetch asked of the disk cache or the store", CACHE(read_fetched[1]) },
	{ "read_around", OBJFS_COUNTER, "reads", "reads near a run but behind its end "
	  "(reordered readahead, mmap read-around)", CACHE(reads[2]) },
	{ "read_around_bytes", OBJFS_COUNTER, "bytes", "bytes of those reads",
	  CACHE(read_bytes[2]) },
	{ "read_around_fetched_bytes", OBJFS_COUNTER, "bytes", "bytes those reads asked of "
	  "the disk cache or the store", CACHE(read_fetched[2]) },
	{ "disk_cache_state", OBJFS_GAUGE, "on|off", "the disk cache works (on) or a disk error "
	  "turned it off", GET(OBJFS_FROM_DISK, disk_on) },
	{ "disk_cache_hits", OBJFS_COUNTER, "lookups", "lookups the disk cache answered",
	  DISK(hits) },
	{ "disk_cache_misses", OBJFS_COUNTER, "lookups", "lookups of what the disk cache does "
	  "not hold", DISK(misses) },
	{ "disk_cache_bad", OBJFS_COUNTER, "files", "chunk files that failed verification "
	  "(deleted, fetched again)", DISK(bad) },
	{ "disk_cache_read_errors", OBJFS_COUNTER, "reads", "disk reads that failed",
	  DISK(read_errors) },
	{ "disk_cache_writes", OBJFS_COUNTER, "writes", "chunk writes: new chunks and pages "
	  "merged into one", DISK(writes) },
	{ "disk_cache_write_bytes", OBJFS_COUNTER, "bytes", "data bytes written",
	  DISK(write_bytes) },
	{ "disk_cache_writes_dropped", OBJFS_COUNTER, "writes", "writes not made: too much "
	  "waiting, cache off, or an error", DISK(writes_dropped) },
	{ "disk_cache_evictions", OBJFS_COUNTER, "files", "chunk files removed to stay under "
	  "cache_dir_size", DISK(evictions) },
	{ "disk_cache_files", OBJFS_GAUGE, "files", "chunk files held now", DISK(files) },
	{ "disk_cache_bytes", OBJFS_GAUGE, "bytes", "bytes the chunk files take now",
	  DISK(bytes) },
	{ "disk_cache_cap", OBJFS_GAUGE, "bytes", "the disk cache's cap (cache_dir_size)",
	  DISK(cap) },
	{ "side_sessions_open", OBJFS_GAUGE, "sessions", "GPU side API sessions open now",
	  SIDE(sessions_open) },
	{ "side_sessions_total", OBJFS_COUNTER, "sessions", "sessions opened",
	  SIDE(sessions_total) },
	{ "side_fills", OBJFS_COUNTER, "requests", "fill requests (one read or readv each)",
	  SIDE(fills) },
	{ "side_fill_bytes", OBJFS_COUNTER, "bytes", "bytes filled into rings",
	  SIDE(fill_bytes) },
	{ "side_fill_errors", OBJFS_COUNTER, "entries", "fill entries that failed",
	  SIDE(fill_errors) },
	{ "side_ring_wait_us", OBJFS_COUNTER, "us", "time fills waited for clients to free a "
	  "ring slot", SIDE(ring_wait_us) },
	{ "side_sessions_refused", OBJFS_COUNTER, "sessions", "sessions refused (limits, "
	  "budget, bad hello)", SIDE(sessions_refused) },
	{ "side_ring_bytes", OBJFS_GAUGE, "bytes", "client ring bytes mapped now",
	  SIDE(ring_bytes) },
	{ "side_replies_deferred", OBJFS_COUNTER, "replies", "replies a full socket left to "
	  "the session thread to send", SIDE(replies_deferred) },
	{ "side_fill_runs", OBJFS_COUNTER, "runs", "cache fills started: runs of adjacent "
	  "entries coalesced", SIDE(fill_runs) },
	{ "side_fills_cancelled", OBJFS_COUNTER, "pieces", "pieces left unfilled because "
	  "their session ended", SIDE(fills_cancelled) },
	{ "inodes", OBJFS_GAUGE, "nodes", "metadata nodes alive: those the kernel holds and "
	  "those kept listings hold", GET(OBJFS_FROM_MOUNT, NULL) },
	{ NULL },
};

const struct objfs_counter *objfs_counter_find(const char *name)
{
	for (const struct objfs_counter *k = objfs_counters; k->name; k++)
		if (strcmp(k->name, name) == 0)
			return k;
	return NULL;
}

int objfs_counter_value(const struct objfs_counter *k, const struct objfs_counter_set *set,
			char *buf, size_t cap)
{
	const void *from[] = {
		[OBJFS_FROM_ENGINE] = set->engine,
		[OBJFS_FROM_CACHE] = set->cache,
		[OBJFS_FROM_DISK] = set->disk,
		[OBJFS_FROM_SIDE] = set->side,
		[OBJFS_FROM_MOUNT] = NULL,
	};
	const char *base = from[k->from];
	uint64_t v;

	if (!base || (!k->get && k->size != 4 && k->size != 8))
		return -ENOENT;
	if (k->get) {
		v = k->get(set);
	} else if (k->size == 8) {
		memcpy(&v, base + k->off, 8);
	} else {
		uint32_t v32;

		memcpy(&v32, base + k->off, 4);
		v = v32;
	}
	if (strcmp(k->unit, "on|off") == 0)
		snprintf(buf, cap, "%s", v ? "on" : "off");
	else
		snprintf(buf, cap, "%" PRIu64, v);
	return 0;
}
