/*
 * spares: a few freed heap buffers kept for the next user of the same size
 * range. main.c fixes malloc's mmap threshold at 128 KiB, so every larger
 * buffer is a mapping of its own: malloc'd and freed per listing page or
 * per readdir reply, its pages were faulted in and unmapped each time
 * (TLB shootdowns, a large share of the daemon's CPU in `ls -l` of a
 * large directory). The engine keeps listing bodies here, the FUSE layer its
 * readdir reply buffers. At most @max buffers of @lo..@hi bytes stay
 * allocated; the smallest that fits is taken.
 */
#ifndef OBJFS_SPARES_H
#define OBJFS_SPARES_H

#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>

#define OBJFS_SPARES_MAX 4

struct objfs_spares {
	pthread_mutex_t lock;
	unsigned max;                   /* kept at most, <= OBJFS_SPARES_MAX */
	size_t lo, hi;                  /* sizes kept */
	unsigned n;                     /* lock */
	void *p[OBJFS_SPARES_MAX];      /* lock */
	size_t cap[OBJFS_SPARES_MAX];   /* lock */
};

/* A static initialiser; objfs_spares_init for one made at run time. */
#define OBJFS_SPARES_INIT(max_, lo_, hi_) \
	{ PTHREAD_MUTEX_INITIALIZER, (max_), (lo_), (hi_), 0, { NULL }, { 0 } }

static inline void objfs_spares_init(struct objfs_spares *s, unsigned max, size_t lo, size_t hi)
{
	*s = (struct objfs_spares){ .max = max < OBJFS_SPARES_MAX ? max : OBJFS_SPARES_MAX,
				    .lo = lo, .hi = hi };
	pthread_mutex_init(&s->lock, NULL);
}

/*
 * The smallest spare of at least @need bytes (its size in *@cap), now the
 * caller's; NULL when none fits.
 */
static inline void *objfs_spares_take(struct objfs_spares *s, size_t need, size_t *cap)
{
	unsigned best = s->max;
	void *p = NULL;

	if (need > s->hi)
		return NULL;
	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < s->n; i++)
		if (s->cap[i] >= need && (best == s->max || s->cap[i] < s->cap[best]))
			best = i;
	if (best < s->max) {
		p = s->p[best];
		*cap = s->cap[best];
		s->n--;
		s->p[best] = s->p[s->n];
		s->cap[best] = s->cap[s->n];
	}
	pthread_mutex_unlock(&s->lock);
	return p;
}

/* Takes @p (@cap bytes, malloc'd; NULL is nothing): kept, or freed. */
static inline void objfs_spares_put(struct objfs_spares *s, void *p, size_t cap)
{
	if (p && cap >= s->lo && cap <= s->hi) {
		pthread_mutex_lock(&s->lock);
		if (s->n < s->max) {
			s->p[s->n] = p;
			s->cap[s->n++] = cap;
			p = NULL;
		}
		pthread_mutex_unlock(&s->lock);
	}
	free(p);
}

/* Frees every spare (the pool stays usable). */
static inline void objfs_spares_drop(struct objfs_spares *s)
{
	pthread_mutex_lock(&s->lock);
	while (s->n)
		free(s->p[--s->n]);
	pthread_mutex_unlock(&s->lock);
}

#endif
