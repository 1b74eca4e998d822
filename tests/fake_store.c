/*
 * fake_store: see fake_store.h. One detached thread per fetch: simple, and
 * completions arrive on another thread, in any order, as with the engine.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "fake_store.h"

struct job {
	struct fake_store *f;
	int64_t off;
	size_t len;
	char *dst;
	objfs_fetch_done_fn done;
	void *arg;
};

unsigned char fake_store_byte(const struct fake_store *f, int64_t off)
{
	/* unsigned: offsets near 2^63 (test_fill_near_int64_max) must not overflow */
	return (unsigned char)(((uint64_t)off * 131u + ((uint64_t)off >> 9) + (uint64_t)f->salt) & 0xff);
}

size_t fake_store_check(const struct fake_store *f, const char *buf, int64_t off, size_t len)
{
	size_t i = 0;

	while (i < len && (unsigned char)buf[i] == fake_store_byte(f, off + (int64_t)i))
		i++;
	return i;
}

static void *job_run(void *a)
{
	struct job *j = a;
	int err = 0;

	if (j->f->delay_us)
		usleep((useconds_t)j->f->delay_us);
	while (atomic_load(&j->f->hold))
		usleep(1000);
	if (atomic_fetch_sub(&j->f->fail_next, 1) > 0) {
		err = -EIO;
	} else {
		atomic_fetch_add(&j->f->fail_next, 1);
		for (size_t i = 0; i < j->len; i++)
			j->dst[i] = (char)fake_store_byte(j->f, j->off + (int64_t)i);
	}
	j->done(j->arg, err);
	free(j);
	return NULL;
}

void fake_store_fetch(void *ctx, int64_t off, size_t len, char *dst, objfs_fetch_done_fn done,
		      void *arg)
{
	struct fake_store *f = ctx;
	struct job *j = malloc(sizeof(*j));
	long long max = atomic_load(&f->max_len);
	pthread_t t;

	atomic_fetch_add(&f->calls, 1);
	atomic_fetch_add(&f->bytes, (long long)len);
	while ((long long)len > max && !atomic_compare_exchange_weak(&f->max_len, &max, (long long)len))
		;
	if (!j) {
		done(arg, -ENOMEM);
		return;
	}
	*j = (struct job){ f, off, len, dst, done, arg };
	if (pthread_create(&t, NULL, job_run, j)) {
		free(j);
		done(arg, -EAGAIN);
		return;
	}
	pthread_detach(t);
}
