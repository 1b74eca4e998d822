/*
 * prefetch: see prefetch.h.
 */
#include "config.h"

#include <string.h>

#include "prefetch.h"

/* A candidate run is continued only by a read that starts where it ended,
 * give or take this (a 4 KiB-page rounding, a small skip). */
#define CONT_SLACK ((int64_t)64 << 10)
/* A sequential run tolerates reads out of order by up to its evidence,
 * at most this: the kernel's readahead requests reach the worker threads
 * out of order, and an mmap fault's read-around is centred on the fault. */
#define SEEK_SLACK ((int64_t)8 << 20)
/* Reads that make a run sequential: its start and two continuations. */
#define SEQ_READS 3

void objfs_prefetch_init(struct objfs_prefetch *p, size_t whole, size_t max_window)
{
	memset(p, 0, sizeof(*p));
	p->whole = whole;
	p->max_window = max_window;
}

void objfs_prefetch_set_max(struct objfs_prefetch *p, size_t max)
{
	p->max_window = max;
}

const char *objfs_read_kind_name(enum objfs_read_kind k)
{
	static const char *const names[] = { "random", "sequential", "around" };

	return (unsigned)k < OBJFS_READ_KINDS ? names[k] : "?";
}

static int64_t evidence(const struct objfs_prefetch_run *r)
{
	return r->next - r->origin;
}

/* How far from @r's end a read may land and still belong to it. */
static int64_t slack(const struct objfs_prefetch_run *r)
{
	int64_t e = evidence(r);

	if (r->reads < SEQ_READS)
		return CONT_SLACK;
	return e < CONT_SLACK ? CONT_SLACK : e > SEEK_SLACK ? SEEK_SLACK : e;
}

/*
 * Whether a read at [off, end) belongs to @r: from where it ended, or
 * behind that within its slack (late, or read-around), or ahead of it by
 * a few of its own lengths (the kernel's readahead requests, all of one
 * size, overtaking each other). A small read far ahead is a jump (tar
 * reading the next member's header): not the run's.
 */
static int belongs(const struct objfs_prefetch_run *r, int64_t off, int64_t end)
{
	int64_t s = slack(r), ahead = 4 * (end - off);

	if (!r->reads)
		return 0;
	if (r->reads < SEQ_READS) /* a candidate: only a read from where it ended */
		return off >= r->next - CONT_SLACK && off <= r->next + CONT_SLACK && end > r->next;
	if (ahead < CONT_SLACK)
		ahead = CONT_SLACK;
	return off >= r->next - s && off <= r->next + (ahead < s ? ahead : s);
}

/* @r grew to reach the start of another run: the two are one (a run
 * wholly inside @r adds nothing). */
static void merge(struct objfs_prefetch *p, struct objfs_prefetch_run *r)
{
	for (unsigned i = 0; i < OBJFS_PREFETCH_RUNS; i++) {
		struct objfs_prefetch_run *t = &p->run[i];

		if (t == r || !t->reads || t->origin < r->origin || t->origin > r->next + CONT_SLACK)
			continue;
		if (t->next > r->next) { /* r ran into t from behind: t's reads continue r */
			r->next = t->next;
			r->reads += t->reads;
		}
		if (t->ahead > r->ahead)
			r->ahead = t->ahead;
		memset(t, 0, sizeof(*t)); /* inside r, or joined */
	}
}

/* A new candidate run at [off, end), in a free slot or the least recently used. */
static void start_run(struct objfs_prefetch *p, int64_t off, int64_t end)
{
	struct objfs_prefetch_run *r = &p->run[0];

	for (unsigned i = 1; i < OBJFS_PREFETCH_RUNS && r->reads; i++)
		if (!p->run[i].reads || p->run[i].used < r->used)
			r = &p->run[i];
	*r = (struct objfs_prefetch_run){ off, end, end, 1, p->clock };
}

static void update_streaming(struct objfs_prefetch *p)
{
	p->streaming = 0;
	for (unsigned i = 0; i < OBJFS_PREFETCH_RUNS; i++)
		if (p->run[i].reads >= SEQ_READS)
			p->streaming = 1;
}

void objfs_prefetch_on_read(struct objfs_prefetch *p, int64_t off, size_t len, int64_t size,
			    struct objfs_prefetch_plan *plan)
{
	int64_t end = off + (int64_t)len;
	struct objfs_prefetch_run *r = NULL;

	memset(plan, 0, sizeof(*plan));
	plan->kind = OBJFS_READ_RANDOM;
	p->clock++;
	/* a sequential run first: a candidate must not steal its reads */
	for (unsigned pass = 0; pass < 2 && !r; pass++)
		for (unsigned i = 0; i < OBJFS_PREFETCH_RUNS && !r; i++)
			if ((p->run[i].reads >= SEQ_READS) == !pass && belongs(&p->run[i], off, end))
				r = &p->run[i];
	if (!r) {
		start_run(p, off, end);
		update_streaming(p);
		return;
	}
	r->used = p->clock;
	if (end > r->next) {
		r->next = end;
		r->reads++;
		merge(p, r);
		if (r->reads < SEQ_READS)
			return; /* one continuation alone is chance */
		plan->kind = OBJFS_READ_SEQ;
	} else {
		if (r->reads < SEQ_READS)
			return;
		plan->kind = OBJFS_READ_AROUND;
	}
	update_streaming(p);
	plan->whole = evidence(r) >= (int64_t)p->whole;
	if (plan->kind == OBJFS_READ_SEQ) {
		int64_t win = evidence(r) / 2;
		int64_t from = r->ahead > r->next ? r->ahead : r->next;
		int64_t to;

		if (win > (int64_t)p->max_window)
			win = (int64_t)p->max_window;
		to = r->next + win < size ? r->next + win : size;
		if (from < to) {
			plan->off = from;
			plan->len = (size_t)(to - from);
			r->ahead = to;
		}
	}
}

void objfs_prefetch_reached(struct objfs_prefetch *p, int64_t from, int64_t reached)
{
	for (unsigned i = 0; i < OBJFS_PREFETCH_RUNS; i++) {
		struct objfs_prefetch_run *r = &p->run[i];

		if (r->reads && r->origin <= from && from <= r->ahead && reached < r->ahead)
			r->ahead = reached > r->next ? reached : r->next;
	}
}
