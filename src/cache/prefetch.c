/*
 * prefetch: see prefetch.h.
 */
#include "config.h"

#include "prefetch.h"

/* Seeks this close to the expected offset still count as sequential. */
#define SEEK_SLACK (8 << 20)

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
}

void objfs_prefetch_on_read(struct objfs_prefetch *p, int64_t off, size_t len, int64_t size,
			    struct objfs_prefetch_plan *plan)
{
	int64_t end = off + (int64_t)len;
	int64_t d = off - p->next;
	int near = d >= -(int64_t)SEEK_SLACK && d <= (int64_t)SEEK_SLACK;

	plan->off = 0;
	plan->len = 0;
	if (near || (off == 0 && p->seq == 0 && !p->random)) {
		p->seq++;
		p->rand = 0;
		if (end > p->next)
			p->next = end;
		if (p->random) {
			/*
			 * Two near reads in a row end random mode; one alone is
			 * chance (on a 2 GiB object ~0.2% of random 256 KiB reads
			 * land near the last one, and each such flip used to pin
			 * whole blocks and prefetch: 1 GiB of cache in 15 s).
			 */
			if (p->seq < 2) {
				plan->off = 0;
				plan->len = 0;
				plan->sequential = 0;
				return;
			}
			p->random = 0;
			p->window = p->min_window;
			p->ahead = end;
		} else if (p->seq > 1 && p->window < p->max_window) {
			p->window = p->window * 2 > p->max_window ? p->max_window : p->window * 2;
		}
	} else {
		p->next = end;
		p->seq = 0;
		p->window = p->min_window;
		p->ahead = end;
		if (++p->rand >= 2)
			p->random = 1;
		/*
		 * One far read is served as asked, without prefetch: taking it
		 * as a stream cost every random reader a whole block and a
		 * window (8 MiB for a first 4 KiB pread with 4 MiB blocks).
		 * The handle stays hopeful, so a read that continues it is
		 * sequential at once. A jump back to offset 0 is a re-read.
		 */
		if (!p->random && off != 0) {
			plan->sequential = 0;
			return;
		}
	}
	plan->sequential = !p->random;
	if (p->random)
		return;
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
