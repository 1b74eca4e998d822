/*
 * store: backend-independent read path. See store.h.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "range.h"
#include "store.h"

/* Pieces fetched at once; larger reads loop. Bounded: reqs live on the stack. */
#define MAX_PIECES 64

int objfs_store_read(struct objfs_store *s, const char *path, const char *etag,
		     int64_t size, int64_t off, size_t len, char *buf)
{
	int64_t offs[MAX_PIECES];
	size_t lens[MAX_PIECES], n, done = 0;
	int err = 0;

	while (done < len && !err) {
		struct objfs_req reqs[MAX_PIECES], *ptrs[MAX_PIECES];
		void *cookies[MAX_PIECES];
		size_t ready = 0, batch = 0;

		n = objfs_range_split(off + (int64_t)done, len - done, s->chunk_size,
				      MAX_PIECES, offs, lens);
		for (size_t i = 0; i < n; i++) {
			struct objfs_req *r = &reqs[i];

			objfs_req_init(r);
			err = s->ops->prepare(s, path, r, &cookies[i]);
			if (err)
				break;
			ready++;
			r->method = OBJFS_GET;
			r->off = offs[i];
			r->len = lens[i];
			r->dst = buf + done + batch;
			r->expect_size = size;
			r->etag = (etag && etag[0]) ? etag : NULL;
			ptrs[i] = r;
			batch += lens[i];
		}
		if (!err)
			err = objfs_engine_run(s->engine, ptrs, n);
		for (size_t i = 0; i < ready; i++) {
			objfs_req_clear(&reqs[i]);
			s->ops->release(s, cookies[i]);
		}
		done += batch;
	}
	/* Past-EOF from the server means the object shrank: not "no data". */
	if (err == -ERANGE || err == -ESTALE || err == -ENOENT)
		err = -EIO;
	return err;
}

void objfs_store_free(struct objfs_store *s)
{
	if (s)
		s->ops->free(s);
}
