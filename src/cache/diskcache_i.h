/*
 * diskcache_i.h: the disk cache's chunk file format (format 2), private to
 * src/cache/diskcache*.c and tests/fuzz/fuzz_diskcache_chunk.c. The
 * functions are pure (no I/O, no allocation): diskcache_chunk.c builds,
 * parses and verifies the bytes, diskcache.c moves them.
 *
 * A chunk file holds block @idx of one object: a metadata area of
 * meta_len bytes (a multiple of 4096, so the data start stays aligned for
 * O_DIRECT), then the block's bytes at meta_len + offset in the block. The
 * block is cut in pages of 4096 bytes (the last one may be short); a page
 * is in the file only when its bit in the metadata's bitmap is set, with
 * its own checksum, so a partly fetched block is a chunk with some pages
 * (a "partial" chunk), and a read of a few pages verifies just those.
 *
 * Metadata area, host byte order (the cache is local to the machine):
 *
 *     0  magic      "OBJFSDC2"
 *     8  hdr_sum    chunk checksum of bytes [16, meta_len)
 *    16  version    2
 *    20  page_size  4096
 *    24  block_len  the whole block's length, 1 .. OBJFS_DCMETA_BLOCK_MAX
 *    32  meta_len   objfs_dcmeta_size(block_len, ident_len)
 *    36  ident_len  1 .. OBJFS_DCMETA_IDENT_MAX
 *    40  npages     ceil(block_len / 4096)
 *    44  reserved   0
 *    48  sums       npages x 8 bytes: page p's checksum (0 while not valid)
 *     .  bitmap     ceil(npages / 8) bytes: bit p % 8 of byte p / 8 = page p
 *                   valid; the bits past npages are 0
 *     .  identity   ident_len bytes (the chunk's full identity, see diskcache.c)
 *     .  zeros up to meta_len
 *
 * hdr_sum covers every metadata byte after itself but the magic (checked
 * as such): version, lengths, every page checksum, the bitmap and the
 * identity. With 4 MiB blocks and a 100-byte identity the area is 12 KiB
 * (8 KiB of page checksums); with 64 KiB blocks, 4 KiB, as format 1's
 * header. Format 1 files ("OBJFSDC1", one checksum of all data) fail the
 * magic: they are never data.
 *
 * Every checksum (pages and metadata) is computed by one function in
 * diskcache_chunk.c (chunk_sum, XXH3-64 today), so that it can become a
 * keyed MAC in one place.
 */
#ifndef OBJFS_DISKCACHE_I_H
#define OBJFS_DISKCACHE_I_H

#include <stddef.h>
#include <stdint.h>

#define OBJFS_DCMETA_PAGE      4096u
#define OBJFS_DCMETA_FIXED     48u          /* the fixed fields, before the sums */
#define OBJFS_DCMETA_BLOCK_MAX (1u << 30)   /* chunk_size's upper bound */
#define OBJFS_DCMETA_IDENT_MAX 4056u        /* format 1's bound: the same objects cache */

/* A verified metadata area: pointers into the parsed buffer, which must outlive it. */
struct objfs_dcmeta {
	uint64_t block_len;
	size_t npages, nvalid;        /* pages of the block; pages valid */
	size_t meta_len;
	const unsigned char *sums;    /* npages x 8 bytes */
	const unsigned char *bitmap;  /* ceil(npages / 8) bytes */
	const char *ident;            /* not NUL-terminated */
	size_t ident_len;
};

/* Pages of a block of @block_len bytes. */
static inline size_t objfs_dcmeta_npages(uint64_t block_len)
{
	return (size_t)((block_len + OBJFS_DCMETA_PAGE - 1) / OBJFS_DCMETA_PAGE);
}

/* Bytes of page @p of a block of @block_len bytes (p < npages). */
static inline size_t objfs_dcmeta_page_len(uint64_t block_len, size_t p)
{
	uint64_t start = (uint64_t)p * OBJFS_DCMETA_PAGE;

	return (size_t)(block_len - start < OBJFS_DCMETA_PAGE ? block_len - start :
								 OBJFS_DCMETA_PAGE);
}

/* Whether bit @p of bitmap @bm is set. */
static inline int objfs_dcmeta_bit(const unsigned char *bm, size_t p)
{
	return bm[p / 8] >> (p % 8) & 1;
}

static inline void objfs_dcmeta_bit_set(unsigned char *bm, size_t p)
{
	bm[p / 8] |= (unsigned char)(1u << (p % 8));
}

/* Whether bits [p0, p1) of @bm are all set. */
static inline int objfs_dcmeta_bits_all(const unsigned char *bm, size_t p0, size_t p1)
{
	for (size_t p = p0; p < p1; p++)
		if (!objfs_dcmeta_bit(bm, p))
			return 0;
	return 1;
}

/*
 * Bytes of the metadata area of a chunk of a @block_len-byte block with an
 * identity of @ident_len bytes: a multiple of 4096. 0 when either is out of
 * bounds (0 or beyond the _MAX above).
 */
size_t objfs_dcmeta_size(uint64_t block_len, size_t ident_len);

/*
 * The block length of a whole chunk (every page valid) whose file is
 * @file_size bytes and whose identity is @ident_len bytes, or 0 when no
 * block length gives that size: the inverse of size + block_len, which
 * grows strictly with block_len. Lets the index keep one number per whole
 * chunk (its file size, from a directory scan) and still bound ranges.
 */
uint64_t objfs_dcmeta_block_len(uint64_t file_size, size_t ident_len);

/*
 * Writes into @buf (objfs_dcmeta_size() bytes, which must be > 0) the
 * metadata of a chunk with no valid page yet. Add pages, then seal.
 */
void objfs_dcmeta_init(char *buf, uint64_t block_len, const char *ident, size_t ident_len);

/*
 * Marks page @p valid in the metadata @buf (initialised, or parsed without
 * error) with the checksum of @data, the page's objfs_dcmeta_page_len()
 * bytes. @p must be below npages. Unseals @buf until objfs_dcmeta_seal().
 */
void objfs_dcmeta_add(char *buf, size_t p, const char *data);

/* Computes hdr_sum over the metadata @buf: last step before writing it. */
void objfs_dcmeta_seal(char *buf);

/*
 * Parses and verifies the @n bytes at @buf as a metadata area: magic,
 * version, page size, bounds, meta_len consistent with the lengths and
 * within @n, no bitmap bit past npages, hdr_sum; then, when @ident is not
 * NULL, that the identity is @ident (@ident_len bytes), and, when
 * @block_len is not 0, that the block is that long. Fills @m (pointing into
 * @buf) and returns 0; or returns -EINVAL with *@why a static reason
 * ("header checksum mismatch", "identity mismatch ...", ...). Reads nothing
 * beyond @n bytes whatever they hold.
 */
int objfs_dcmeta_parse(const char *buf, size_t n, const char *ident, size_t ident_len,
		       uint64_t block_len, struct objfs_dcmeta *m, const char **why);

/*
 * The meta_len a metadata area starting at @buf (@n bytes, at least the
 * fixed fields) claims, when its magic and version are right and the value
 * is in bounds; else 0. Not verified: for reading the rest of the area
 * before objfs_dcmeta_parse().
 */
size_t objfs_dcmeta_claimed_len(const char *buf, size_t n);

/*
 * Verifies pages [p0, p1) of a parsed chunk: each valid in @m and @data
 * (their bytes, consecutive, the last one short when it is the block's
 * last) matching its checksum. 0, or -EINVAL with *@why "page not valid"
 * or "data checksum mismatch". p0 < p1 <= m->npages.
 */
int objfs_dcmeta_check(const struct objfs_dcmeta *m, size_t p0, size_t p1, const char *data,
		       const char **why);

#endif
