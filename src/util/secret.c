/*
 * secret: see secret.h for why. Each buffer is one anonymous mapping: a
 * 16-byte header holding the mapping's length, then the caller's bytes.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "secret.h"

#define HDR 16 /* keeps the caller's pointer 16-byte aligned */

void *objfs_secret_alloc(size_t n)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), len;
	unsigned char *p;

	if (n > SIZE_MAX - HDR - page) {
		errno = ENOMEM;
		return NULL;
	}
	len = (n + HDR + page - 1) / page * page;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	/* Not fatal if refused (an old kernel): the process is still not
	 * dumpable unless debug_dumpable asked for dumps. */
	(void)madvise(p, len, MADV_DONTDUMP);
	(void)madvise(p, len, MADV_DONTFORK);
	memcpy(p, &len, sizeof(len));
	return p + HDR;
}

char *objfs_secret_strdup(const char *s)
{
	size_t n = strlen(s);
	char *d = objfs_secret_alloc(n + 1);

	if (d)
		memcpy(d, s, n + 1);
	return d;
}

void objfs_secret_free(void *p)
{
	unsigned char *base;
	size_t len;

	if (!p)
		return;
	base = (unsigned char *)p - HDR;
	memcpy(&len, base, sizeof(len));
	explicit_bzero(base, len);
	munmap(base, len);
}

int objfs_secret_nodump_process(int keep_dumps)
{
	if (keep_dumps)
		return 0;
	return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) ? -errno : 0;
}

int objfs_secret_dumpable(void)
{
	int v = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);

	return v < 0 ? -errno : v;
}
