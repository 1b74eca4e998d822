/*
 * prefetch: see prefetch.h.
 */
#include "config.h"

#include "prefetch.h"

/* Inside a stream, seeks this close to the expected offset still count as
 * sequential: the kernel's readahead requests reach the worker threads out
 * of order. */
#define SEEK_SLACK (8 << 20)
/*
 * Outside a stream, only a read that starts where the last one ended (give
 * or take this) continues it, and it takes two in a row to start a stream.
 * With the stream's 8 MiB slack, random preads of a 96 MiB object landed
 * "near" one in six times, and a 1 MiB pread (two FUSE requests, the second
 * continuing the first) then started a stream: each cost a 4 MiB block and
 * a window, 2.1x the bytes asked (tests/integration/diskcache_random.sh).
 */
#define CONT_SLACK (64 << 10)

void objfs_prefetch_init(struct objfs_prefetch *p, size_t min_window, size_t max_window)
{
	p->min_window = min_window;
	p->max_window = max_window < min_window ? min_window : max_window;
	p->window = min_window;
	p->next = 0;
	p->ahead = 0;
	p->seq = 0;
	p->rand = 0;
	p->random = 0;
	p->stream = 0;
	p->origin = 0;
	p->proof = 0;
}

void objfs_prefetch_set_proof(struct objfs_prefetch *p, size_t bytes)
{
	p->proof = bytes;
}

void objfs_prefetch_set_max(struct objfs_prefetch *p, size_t max)
{
	p->max_window = max < p->min_window ? p->min_window : max;
	if (p->window > p->max_window)
		p->window = p->max_window;
}

/* Starts (or restarts) a stream at the read ending at @end. */
static void stream_start(struct objfs_prefetch *p, int64_t end)
{
	p->stream = 1;
	p->origin = end;
	p->random = 0;
	p->rand = 0;
	p->seq = 1;
	p->window = p->min_window;
	p->next = end;
	p->ahead = end;
}

void objfs_prefetch_on_read(struct objfs_prefetch *p, int64_t off, size_t len, int64_t size,
			    struct objfs_prefetch_plan *plan)
{
	int64_t end = off + (int64_t)len;
	int64_t d = off - p->next;
	int near = d >= -(int64_t)SEEK_SLACK && d <= (int64_t)SEEK_SLACK;
	int cont = d >= -(int64_t)CONT_SLACK && d <= (int64_t)CONT_SLACK;

	plan->off = 0;
	plan->len = 0;
	plan->sequential = 0;
	if (p->stream && near) {
		p->seq++;
		if (end > p->next)
			p->next = end;
		if (p->seq > 1 && p->window < p->max_window)
			p->window = p->window * 2 > p->max_window ? p->max_window : p->window * 2;
	} else if (off == 0 && !p->random) {
		stream_start(p, end); /* a first read, or a re-read, from the start */
		p->origin = 0;
	} else if (!p->stream && cont) {
		if (end > p->next)
			p->next = end;
		if (++p->seq < 2)
			return; /* one continuation alone is chance (or a split read) */
		stream_start(p, end);
	} else {
		/* far: served as asked; two in a row mean random */
		p->stream = 0;
		p->seq = 0;
		p->next = end;
		p->window = p->min_window;
		p->ahead = end;
		if (++p->rand >= 2)
			p->random = 1;
		return;
	}
	/* A stream that began mid-object proves itself over @proof bytes first. */
	if (p->origin > 0 && p->next - p->origin < (int64_t)p->proof)
		return;
	plan->sequential = 1;
	{
		int64_t from = p->ahead > end ? p->ahead : end;
		int64_t to = end + (int64_t)p->window;

		if (to > size)
			to = size;
		if (from < to) {
			plan->off = from;
			plan->len = (size_t)(to - from);
			p->ahead = to;
		}
	}
}
