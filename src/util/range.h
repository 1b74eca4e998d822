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
 * Parse a Content-Range header value "bytes FIRST-LAST/TOTAL" (TOTAL may be
 * '*'; then *total is set to -1). Returns 0 or -EPROTO.
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
