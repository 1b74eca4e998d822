/*
 * object: see object.h for what an open object version holds and why its
 * fields never change after objfs_object_new().
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "object.h"

/* store.c's fetch copies the ETag into a 192-byte buffer; refuse what would not fit. */
#define ETAG_MAX 192

static void object_free(struct objfs_object *o)
{
	free((char *)o->cobj.id);
	free(o->etag);
	free(o->path);
	free(o);
}

int objfs_object_new(struct objfs_store *store, const char *path, const char *etag,
		     int64_t mtime, int64_t size, objfs_fetch_fn fetch, void *fetch_ctx,
		     struct objfs_object **out)
{
	char version[32];
	struct objfs_object *o;

	if (!etag)
		etag = "";
	if (size < 0 || !path || strlen(etag) >= ETAG_MAX || (!store && !fetch))
		return -EINVAL;
	o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	o->path = strdup(path);
	o->etag = strdup(etag);
	if (etag[0] || mtime < 0)
		mtime = -1;
	/* "@<mtime>" cannot be an ETag: those are quoted */
	snprintf(version, sizeof(version), "@%lld", (long long)mtime);
	o->cobj.id = objfs_cache_obj_id(path, mtime >= 0 ? version : etag, size);
	if (!o->path || !o->etag || !o->cobj.id) {
		object_free(o);
		return -ENOMEM;
	}
	atomic_init(&o->refs, 1);
	o->size = size;
	o->mtime = mtime;
	o->store = store;
	o->sobj = (struct objfs_store_obj){ store, o->path, o->etag, mtime, size };
	o->cobj.size = size;
	o->cobj.fetch = fetch ? fetch : objfs_store_fetch;
	o->cobj.ctx = fetch ? fetch_ctx : &o->sobj;
	*out = o;
	return 0;
}

struct objfs_object *objfs_object_get(struct objfs_object *o)
{
	atomic_fetch_add_explicit(&o->refs, 1, memory_order_relaxed);
	return o;
}

void objfs_object_put(struct objfs_object *o)
{
	/* acq_rel: every holder's reads happen before the free */
	if (o && atomic_fetch_sub_explicit(&o->refs, 1, memory_order_acq_rel) == 1)
		object_free(o);
}
