/*
 * fuzz_options: objfs_opts_parse() (one -o list) and objfs_parse_size() on
 * arbitrary strings.
 *
 * The first byte picks the size of the error buffer (1..64 bytes) so that
 * message truncation is exercised; the rest is the option list. Invariants:
 * 0 or -EINVAL (-ENOMEM never happens here); the message is NUL-terminated
 * inside its buffer and says something on failure; every numeric option that
 * was accepted lies in its documented range; clearing twice is safe. A size
 * that objfs_parse_size() accepts starts with a digit and is what its
 * digits and suffix say.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>

#include "fuzz.h"
#include "options.h"

static void check_ranges(const struct objfs_opts *o)
{
	FUZZ_CHECK(o->chunk_size >= 4096 && o->chunk_size <= (1u << 30), "chunk_size %zu",
		   o->chunk_size);
	FUZZ_CHECK(o->max_connections >= 1 && o->max_connections <= 1024, "max_connections");
	/* metadata TTLs: finite and non-negative, or "inf" (never NaN) */
	FUZZ_CHECK(o->attr_timeout >= 0, "attr_timeout %g", o->attr_timeout);
	FUZZ_CHECK(o->entry_timeout >= 0, "entry_timeout %g", o->entry_timeout);
	FUZZ_CHECK(o->negative_timeout >= 0, "negative_timeout %g", o->negative_timeout);
	FUZZ_CHECK(o->list_ttl >= 0, "list_ttl %g", o->list_ttl);
	FUZZ_CHECK(o->retries <= 100, "retries %u", o->retries);
	FUZZ_CHECK(o->timeout >= 1 && o->timeout <= 86400, "timeout %g", o->timeout);
	FUZZ_CHECK(o->cache_size >= (1u << 20) && o->cache_size <= (1ull << 40), "cache_size");
	FUZZ_CHECK(o->prefetch_max <= (1u << 30), "prefetch_max");
	FUZZ_CHECK(o->threads >= 1 && o->threads <= 1024, "threads");
	FUZZ_CHECK(o->engine_threads >= 1 && o->engine_threads <= 64, "engine_threads");
	FUZZ_CHECK(o->ring_slots >= 2 && o->ring_slots <= 64, "ring_slots");
	FUZZ_CHECK(o->ring_slot_size >= (64u << 10) && o->ring_slot_size <= (64u << 20),
		   "ring_slot_size");
	FUZZ_CHECK(o->cache_dir_size >= (1u << 20) && o->cache_dir_size <= (1ull << 50),
		   "cache_dir_size");
	FUZZ_CHECK(o->umask <= 0777, "umask %o", (unsigned)o->umask);
	FUZZ_CHECK(o->side == 0 || o->side == 1, "side %d", o->side);
	FUZZ_CHECK(o->log_level >= 0 && o->log_level <= 3, "log_level %d", o->log_level);
}

/* What @s says in digits and suffix, computed independently; 0 if it overflows. */
static unsigned long long expected_size(const char *s)
{
	unsigned long long v = 0;

	for (; isdigit((unsigned char)*s); s++)
		if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *s - '0', &v))
			return 0;
	switch (*s) {
	case 'k': case 'K': return v > (~0ull >> 10) ? 0 : v << 10;
	case 'm': case 'M': return v > (~0ull >> 20) ? 0 : v << 20;
	case 'g': case 'G': return v > (~0ull >> 30) ? 0 : v << 30;
	default: return v;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct objfs_opts o;
	char err[64], *list;
	size_t errlen, sz = 0;
	int rc;

	if (size < 1)
		return 0;
	errlen = (size_t)(data[0] % sizeof(err)) + 1;
	list = fuzz_str(data + 1, size - 1);
	memset(err, 'X', sizeof(err));
	objfs_opts_init(&o);
	rc = objfs_opts_parse(&o, list, err, errlen);
	FUZZ_CHECK(rc == 0 || rc == -EINVAL, "rc %d", rc);
	FUZZ_CHECK(memchr(err, '\0', errlen), "message not terminated in %zu bytes", errlen);
	FUZZ_CHECK(!memchr(err + errlen, '\0', sizeof(err) - errlen) ||
		   errlen == sizeof(err), "message written past %zu bytes", errlen);
	if (rc)
		FUZZ_CHECK(errlen == 1 || err[0] != '\0', "failure without a message");
	else
		FUZZ_CHECK(err[0] == '\0', "success with a message: %s", err);
	/* as main does: counts left at 0 come from the machine (any core count
	 * and memory size, unknown included) */
	{
		const struct objfs_machine m = { (long)(size % 300), (uint64_t)(size % 67) << 30 };

		objfs_opts_machine(&o, &m);
		check_ranges(&o);
		objfs_opts_describe(&o, &m, err, errlen);
	}
	FUZZ_CHECK(memchr(err, '\0', errlen), "description not terminated in %zu bytes", errlen);
	objfs_opts_clear(&o);
	objfs_opts_clear(&o);

	if (objfs_parse_size(list, &sz) == 0) {
		FUZZ_CHECK(isdigit((unsigned char)list[0]), "size \"%s\" accepted", list);
		FUZZ_CHECK(sz == expected_size(list), "size \"%s\" is %zu", list, sz);
	}
	free(list);
	return 0;
}
