/*
 * fuzz.h: helpers shared by the libFuzzer targets in tests/fuzz/.
 *
 * Every target is one LLVMFuzzerTestOneInput() over the real parser, built
 * by tests/fuzz/run.sh with clang's -fsanitize=fuzzer,address,undefined from
 * the project's own sources. Crashes, leaks and undefined behaviour are found
 * by the sanitizers; what they cannot see (a listing that promises valid,
 * unique names but returns "..", a URL that does not survive its own
 * re-serialisation) is checked here with FUZZ_CHECK, which aborts so that
 * libFuzzer saves the input like any crash.
 */
#ifndef OBJFS_FUZZ_H
#define OBJFS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#include <sanitizer/common_interface_defs.h>

#include "listing.h"
#include "log.h"

/*
 * run.sh closes the targets' stdout and stderr (-close_fd_mask=3: the
 * debug log would drown the output); sanitizer reports still reach
 * libFuzzer's copy of stderr, so the message goes out as a report summary.
 */
#define FUZZ_CHECK(cond, ...)                                                  \
	do {                                                                   \
		if (!(cond)) {                                                 \
			char fuzz_msg_[1024];                                  \
			int fuzz_n_ = snprintf(fuzz_msg_, sizeof(fuzz_msg_),   \
					       "%s:%d: invariant failed: %s: ",\
					       __FILE__, __LINE__, #cond);     \
			if (fuzz_n_ > 0 && (size_t)fuzz_n_ < sizeof(fuzz_msg_))\
				snprintf(fuzz_msg_ + fuzz_n_,                  \
					 sizeof(fuzz_msg_) - (size_t)fuzz_n_,  \
					 __VA_ARGS__);                         \
			__sanitizer_report_error_summary(fuzz_msg_);           \
			abort();                                               \
		}                                                              \
	} while (0)

/* libFuzzer's entry points, defined by each target (Initialize optional). */
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * A target that defines FUZZ_PARSER_INIT before including this gets
 * libFuzzer's initialiser from here: libxml2 initialised, and debug logging
 * on, since the messages about skipped entries format hostile names.
 */
#ifdef FUZZ_PARSER_INIT
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	objfs_listing_global_init();
	objfs_log_set_level(OBJFS_LOG_DEBUG);
	return 0;
}
#endif

/* The content of the fake objects of the side-API targets: byte at @off. */
static inline unsigned char fuzz_byte_at(int64_t off)
{
	return (unsigned char)((off * 131 + (off >> 9) + 7) & 0xff);
}

/* Little-endian unsigned of @n bytes at @p. */
static inline uint64_t fuzz_le(const uint8_t *p, size_t n)
{
	uint64_t v = 0;

	for (size_t i = n; i-- > 0;)
		v = v << 8 | p[i];
	return v;
}

/* @data as a NUL-terminated string (embedded NULs end it early). Caller frees. */
static inline char *fuzz_str(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	if (!s)
		abort();
	memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

static int fuzz_cmp_names(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * The promises of listing.h: every name valid (1..255 bytes, no '/', no NUL,
 * not "." or ".."), is_dir 0 or 1, size and mtime -1 or sane, and, when
 * @unique, no name twice.
 */
static inline void fuzz_check_listing(const struct objfs_listing *l, int unique)
{
	const char **names;

	FUZZ_CHECK(l->n <= l->cap, "n %zu cap %zu", l->n, l->cap);
	for (size_t i = 0; i < l->n; i++) {
		const struct objfs_listent *e = &l->ents[i];

		FUZZ_CHECK(e->name && objfs_name_valid(e->name, strlen(e->name)),
			   "entry %zu has an invalid name", i);
		FUZZ_CHECK(e->is_dir == 0 || e->is_dir == 1, "is_dir %d", e->is_dir);
		FUZZ_CHECK(e->size >= -1, "size %lld", (long long)e->size);
		FUZZ_CHECK(!e->is_dir || e->size == -1, "directory with size %lld",
			   (long long)e->size);
	}
	if (!unique || l->n < 2)
		return;
	names = malloc(l->n * sizeof(*names));
	if (!names)
		abort();
	for (size_t i = 0; i < l->n; i++)
		names[i] = l->ents[i].name;
	qsort(names, l->n, sizeof(*names), fuzz_cmp_names);
	for (size_t i = 1; i < l->n; i++)
		FUZZ_CHECK(strcmp(names[i - 1], names[i]) != 0, "name \"%s\" twice", names[i]);
	free(names);
}

#endif
