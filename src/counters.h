/*
 * counters: the one table of the counters a mount shows.
 *
 * Every line of MOUNT/.objfs-stats is a row here: its name, whether it only
 * grows (a counter) or is a level (a gauge), its unit, a one-line meaning
 * and where its value comes from (a field of a subsystem's stats struct, or
 * a function of them). objfs_stats_format (mount.c) writes the rows in
 * order, the metrics endpoint takes each sample's type and HELP text from
 * its row, `objfs stats` its unit, and tests/check_stats.c checks that
 * objfs(1)'s STATISTICS section and README's counter table describe every
 * row and nothing else. Adding a counter is one row plus its value.
 */
#ifndef OBJFS_COUNTERS_H
#define OBJFS_COUNTERS_H

#include <stddef.h>
#include <stdint.h>

#include "cache.h"
#include "diskcache.h"
#include "side.h"
#include "stats.h"

enum objfs_counter_kind {
	OBJFS_COUNTER, /* only grows while mounted: rates make sense */
	OBJFS_GAUGE,   /* a level now (bytes held, sessions open, a percentile) */
};

/* Whose counter it is: the sections of `objfs stats`. */
enum objfs_counter_from {
	OBJFS_FROM_ENGINE, /* struct objfs_stats (requests) */
	OBJFS_FROM_CACHE,  /* struct objfs_cache_stats (memory block cache) */
	OBJFS_FROM_DISK,   /* struct objfs_diskcache_stats (cache_dir) */
	OBJFS_FROM_SIDE,   /* struct objfs_side_stats (GPU side API) */
	OBJFS_FROM_MOUNT,  /* formatted by mount.c itself (inodes) */
};

/* The stats structs of one snapshot; NULL: that part is absent (no cache_dir, side=off). */
struct objfs_counter_set {
	const struct objfs_stats *engine;
	const struct objfs_cache_stats *cache;
	const struct objfs_diskcache_stats *disk;
	const struct objfs_side_stats *side;
};

struct objfs_counter {
	const char *name;
	enum objfs_counter_kind kind;
	const char *unit;    /* "bytes", "us", "requests", ...; "on|off" for a state */
	const char *meaning; /* one line */
	enum objfs_counter_from from;
	size_t off, size;    /* the field in from's struct (size 4 or 8), when get is NULL */
	uint64_t (*get)(const struct objfs_counter_set *set);
};

/* The table, ending with a row whose name is NULL. */
extern const struct objfs_counter objfs_counters[];

/* The row named @name (a key of the stats text), or NULL. */
const struct objfs_counter *objfs_counter_find(const char *name);

/*
 * Writes @k's value in @set as the stats text shows it ("123", "on") into
 * @buf. 0, or -ENOENT when @set lacks its part (and for OBJFS_FROM_MOUNT).
 */
int objfs_counter_value(const struct objfs_counter *k, const struct objfs_counter_set *set,
			char *buf, size_t cap);

#endif
