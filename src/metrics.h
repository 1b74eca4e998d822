/*
 * metrics: the mount's counters in the Prometheus text exposition format
 * (version 0.0.4), served over HTTP/1.0 on -o metrics=[ADDR:]PORT
 * (ADDR defaults to 127.0.0.1: counters say what a mount reads, so they
 * stay on the host unless asked otherwise).
 *
 * What is served is rendered from the one stats text (mount.c,
 * objfs_stats_format: the same "key value" lines as .objfs-stats), so a
 * counter added there appears here without a second list. Each sample's
 * type and HELP text come from its row of the counter table (counters.h):
 * counters as objfs_KEY_total, gauges (bytes held, sessions open, caps,
 * percentiles) as objfs_KEY; plus the time-to-first-byte histogram
 * objfs_ttfb_seconds from struct objfs_stats. Every sample carries the
 * labels mount="MOUNTPOINT" and source="SOURCE" (the URL without any
 * user:password@).
 *
 * The listener is one thread serving up to 64 connections at once through
 * one poll() loop of non-blocking sockets: each has 2 s for its whole
 * request (at most 4 KiB read) and 2 s for its whole answer, and when all
 * slots are taken the oldest connection still waiting for its request is
 * dropped for the new one. So any local user's idle or slow connections
 * never keep a scraper, which sends its request at once, from an answer.
 */
#ifndef OBJFS_METRICS_H
#define OBJFS_METRICS_H

#include <stddef.h>

#include "stats.h"

struct objfs_metrics;

/* Writes the stats text of @arg into @buf (like snprintf); returns its length. */
typedef size_t (*objfs_metrics_text_fn)(void *arg, char *buf, size_t cap);

/*
 * Binds @spec ("PORT", "ADDR:PORT" or "[ADDR6]:PORT") and starts serving.
 * @source and @mountpoint are copied; @fn and @arg are borrowed until
 * objfs_metrics_stop(). 0, or -errno with a message in @err.
 */
int objfs_metrics_start(const char *spec, const char *source, const char *mountpoint,
			objfs_metrics_text_fn fn, void *arg, struct objfs_metrics **out,
			char *err, size_t errlen);

/* Stops the listener and frees everything. Accepts NULL. */
void objfs_metrics_stop(struct objfs_metrics *m);

/*
 * Renders @text (the stats text) and @s's histogram with @labels (already
 * escaped 'k="v",...') into @buf. Returns the length the whole exposition
 * needs (like snprintf). Pure: for tests/check_metrics.c.
 */
size_t objfs_metrics_render(char *buf, size_t cap, const char *text,
			    const struct objfs_stats *s, const char *labels);

#endif
