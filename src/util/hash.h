/*
 * hash: FNV-1a over strings, for the hash tables of the inode table, the
 * block cache and the store's stale-object notes (none of which hash
 * attacker-chosen keys into a table an attacker can observe the timing of
 * beyond its own lookups; chains stay short because the tables grow).
 */
#ifndef OBJFS_HASH_H
#define OBJFS_HASH_H

#include <stddef.h>
#include <stdint.h>

#define OBJFS_FNV_OFFSET 1469598103934665603ULL
#define OBJFS_FNV_PRIME  1099511628211ULL

/* FNV-1a of NUL-terminated @s, continuing from @h (start: OBJFS_FNV_OFFSET). */
static inline uint64_t objfs_fnv1a(uint64_t h, const char *s)
{
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * OBJFS_FNV_PRIME;
	return h;
}

/* Folds the high bits of @h into the low ones, for power-of-two tables. */
static inline size_t objfs_hash_fold(uint64_t h, unsigned shift)
{
	return (size_t)(h ^ (h >> shift));
}

#endif
