/*
 * creds_bench: what taking the credentials costs each signed S3 request,
 * the copy (objfs_creds_get + objfs_creds_clear: two secret mappings made
 * and unmapped) against the shared snapshot (objfs_creds_hold +
 * objfs_creds_drop), alternating, on 1..N threads.
 *
 *   gcc -O2 -Isrc/store -Isrc/util -Ibuild contrib/bench/creds_bench.c \
 *       build/src/.libs/libobjfscore.a -lcurl -lfuse3 -lpthread -ljson-c -lxml2 \
 *       -lssl -lcrypto -luring -lxxhash -o /tmp/creds_bench
 *   /tmp/creds_bench [max_threads] [calls_per_thread] [reps]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "creds.h"

static struct objfs_creds_provider *prov;
static int calls = 100000;

static void *copy_loop(void *arg)
{
	struct objfs_creds c;

	(void)arg;
	for (int i = 0; i < calls; i++) {
		if (objfs_creds_get(prov, &c))
			abort();
		objfs_creds_clear(&c);
	}
	return NULL;
}

static void *hold_loop(void *arg)
{
	int err;

	(void)arg;
	for (int i = 0; i < calls; i++) {
		const struct objfs_creds *c = objfs_creds_hold(prov, &err);

		if (!c)
			abort();
		objfs_creds_drop(c);
	}
	return NULL;
}

/* Calls a second over @threads threads running @fn. */
static double rate(void *(*fn)(void *), int threads)
{
	pthread_t t[256];
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < threads; i++)
		if (pthread_create(&t[i], NULL, fn, NULL))
			abort();
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	return threads * (double)calls /
	       ((double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9);
}

int main(int argc, char **argv)
{
	int max = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 3 ? atoi(argv[3]) : 3;
	char err[256];

	if (argc > 2)
		calls = atoi(argv[2]);
	if (max < 1 || max > 256 || calls < 1 || reps < 1)
		return 2;
	setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", 1);
	setenv("AWS_SESSION_TOKEN", "FwoGZXIvYXdzEXAMPLETOKEN", 1);
	if (objfs_creds_provider_new(NULL, 0, &prov, err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	printf("threads rep copy_calls_per_s hold_calls_per_s\n");
	for (int n = 1; n <= max; n *= 2)
		for (int r = 0; r < reps; r++) {
			double c = rate(copy_loop, n), h = rate(hold_loop, n);

			printf("%d %d %.0f %.0f\n", n, r, c, h);
		}
	objfs_creds_provider_free(prov);
	return 0;
}
