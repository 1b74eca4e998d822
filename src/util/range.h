/*
 * range: byte-range arithmetic and validation of ranged responses.
 *
 * Returning bytes from the wrong place of an object is the worst bug objfs
 * could have, so every response is checked here against what was asked:
 * status, Content-Range and the object's known size.
 */
#ifndef OBJFS_RANGE_H
#define OBJFS_RANGE_H

#include <stddef.h>
#include <stdint.h>

/*
 * The largest object size objfs believes (2^53 bytes, 8 PiB; S3's limit is
 * 5 TiB). A larger one is a lying server's, and block arithmetic near 2^63
 * overflows (a Content-Length of 2^63 - 100 would make a fill of the
 * last block walk ~2^47 blocks, hanging the reader). Every size and offset
 * a store reports is checked against it where it is parsed.
 */
#define OBJFS_OBJECT_SIZE_MAX (INT64_C(1) << 53)

/*
 * Parse a Content-Range header value "bytes FIRST-LAST/TOTAL" (TOTAL may be
 * '*'; then *total is set to -1). Returns 0 or -EPROTO (also for a number
 * above OBJFS_OBJECT_SIZE_MAX).
 */
int objfs_parse_content_range(const char *v, int64_t *first, int64_t *last, int64_t *total);

/*
 * Clamp a read of @size bytes at @off to a file of @file_size bytes.
 * Returns the number of bytes that can be read (0 at or past EOF).
 */
size_t objfs_range_clamp(int64_t file_size, int64_t off, size_t size);

/*
 * Split [off, off+len) into pieces that never cross a multiple of @chunk.
 * Returns the number of pieces (at most @max); piece i is
 * [offs[i], offs[i]+lens[i]). Returns 0 when len is 0.
 */
size_t objfs_range_split(int64_t off, size_t len, size_t chunk, size_t max,
			 int64_t *offs, size_t *lens);

#endif
