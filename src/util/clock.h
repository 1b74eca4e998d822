/*
 * clock: the monotonic clock, in the units its callers want. One place, so
 * every timeout, TTL and latency in objfs is measured on the same clock
 * (CLOCK_MONOTONIC: never steps with the wall clock).
 */
#ifndef OBJFS_CLOCK_H
#define OBJFS_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Monotonic time in nanoseconds. */
static inline int64_t objfs_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Monotonic time in seconds. */
static inline double objfs_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* @ns nanoseconds (>= 0) as a relative timespec: tv_nsec always < 1e9. */
static inline struct timespec objfs_ns_to_timespec(int64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000), (long)(ns % 1000000000) };

	return ts;
}

#endif
