/*
 * hash: FNV-1a over strings, for the hash tables of the inode table, the
 * block cache and the store's stale-object notes (none of which hash
 * attacker-chosen keys into a table an attacker can observe the timing of
 * beyond its own lookups; chains stay short because the tables grow).
 */
#ifndef OBJFS_HASH_H
#define OBJFS_HASH_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

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

/*
 * Doubles the chained hash table *@tab of *@n buckets (a power of two):
 * every entry, of type @type and chained through its field @next, moves to
 * bucket hashof(entry) & (2n - 1). Evaluates to 0, or to -ENOMEM with the
 * table as it was (longer chains, still correct). One loop for the tables
 * of the block cache, the disk cache index and the inode table.
 */
#define OBJFS_HASH_GROW(tab, n, type, next, hashof) __extension__({		\
	size_t nb_ = *(n) * 2;							\
	type **h_ = calloc(nb_, sizeof(*h_));					\
										\
	if (h_) {								\
		for (size_t i_ = 0; i_ < *(n); i_++) {				\
			for (type *e_ = (*(tab))[i_], *nx_; e_; e_ = nx_) {	\
				size_t b_ = (size_t)(hashof(e_)) & (nb_ - 1);	\
										\
				nx_ = e_->next;					\
				e_->next = h_[b_];				\
				h_[b_] = e_;					\
			}							\
		}								\
		free(*(tab));							\
		*(tab) = h_;							\
		*(n) = nb_;							\
	}									\
	h_ ? 0 : -ENOMEM;							\
})

#endif
