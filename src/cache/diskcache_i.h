/*
 * diskcache_i.h: the disk cache's chunk file format (format 3), private to
 * src/cache/diskcache*.c and tests/fuzz/fuzz_diskcache_chunk.c. The
 * functions are pure (no I/O, no allocation): diskcache_chunk.c builds,
 * parses and verifies the bytes, diskcache.c moves them.
 *
 * A chunk file holds block @idx of one object: a metadata area of
 * meta_len bytes (a multiple of 4096, so the data start stays aligned for
 * O_DIRECT), then the block's bytes at meta_len + offset in the block. The
 * block is cut in pages of 4096 bytes (the last one may be short); a page
 * is in the file only when its bit in the metadata's bitmap is set, with
 * its own MAC, so a partly fetched block is a chunk with some pages
 * (a "partial" chunk), and a read of a few pages verifies just those.
 *
 * Metadata area, host byte order (the cache is local to the machine):
 *
 *     0  magic      "OBJFSDC3"
 *     8  hdr_sum    metadata MAC (below)
 *    16  version    3
 *    20  page_size  4096
 *    24  block_len  the whole block's length, 1 .. OBJFS_DCMETA_BLOCK_MAX
 *    32  meta_len   objfs_dcmeta_size(block_len, ident_len)
 *    36  ident_len  1 .. OBJFS_DCMETA_IDENT_MAX
 *    40  npages     ceil(block_len / 4096)
 *    44  reserved   0
 *    48  sums       npages x 8 bytes: page p's MAC (0 while not valid)
 *     .  bitmap     ceil(npages / 8) bytes: bit p % 8 of byte p / 8 = page p
 *                   valid; the bits past npages are 0
 *     .  identity   ident_len bytes (the chunk's full identity, see diskcache.c)
 *     .  zeros up to meta_len (checked as such)
 *
 * Every MAC is HMAC-SHA256 under the cache's secret key (DIR/key, made
 * and kept by diskcache.c), its first 8 bytes stored:
 *   - page p:   HMAC(key, "objfs-dc3-page\0\0" || SHA-256(identity) ||
 *                    p || block_len || the page's bytes)
 *               (p and block_len 8 bytes each: a 64-byte first block)
 *   - hdr_sum:  HMAC(key, "objfs-dc3-meta\0\0" || bytes [16, 48) ||
 *                    bitmap || identity)
 * So a page is valid only at its own index of its own chunk (identity:
 * source, object path, ETag, size, block index) and block length, and only
 * with the key: a user who can write the files but not read DIR/key cannot
 * make one, nor move one made for another place. The page MACs need not
 * be under hdr_sum (each binds its own place), which keeps a 4 KiB read of
 * a 4 MiB chunk from MACing the 8 KiB of sums.
 * Formats 1 and 2 (unkeyed XXH3 sums, "OBJFSDC1"/"OBJFSDC2") fail the
 * magic: never data; diskcache.c removes their files by name at open.
 */
#ifndef OBJFS_DISKCACHE_I_H
#define OBJFS_DISKCACHE_I_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/sha.h>

#define OBJFS_DCMETA_PAGE      4096u
#define OBJFS_DCMETA_FIXED     48u          /* the fixed fields, before the sums */
#define OBJFS_DCMETA_BLOCK_MAX (1u << 30)   /* chunk_size's upper bound */
#define OBJFS_DCMETA_IDENT_MAX 4056u        /* format 1's bound: the same objects cache */
#define OBJFS_DCKEY_LEN        32u          /* bytes of the cache's secret */

/*
 * The keyed state of the chunk MAC (HMAC-SHA256): SHA-256 after the
 * secret ^ ipad and secret ^ opad blocks, copied per MAC (no allocation).
 * Made by the caller with objfs_dckey_init() from the secret; as secret as
 * the key itself: keep it out of core dumps and wipe it when done.
 */
struct objfs_dckey {
	SHA256_CTX inner, outer;
};

/* A verified metadata area: pointers into the parsed buffer, which must outlive it. */
struct objfs_dcmeta {
	uint64_t block_len;
	size_t npages, nvalid;        /* pages of the block; pages valid */
	size_t meta_len;
	const unsigned char *sums;    /* npages x 8 bytes */
	const unsigned char *bitmap;  /* ceil(npages / 8) bytes */
	const char *ident;            /* not NUL-terminated */
	size_t ident_len;
	unsigned char ident_sum[32];  /* SHA-256 of the identity: binds each page MAC */
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
 * Fills @k from the @secret (OBJFS_DCKEY_LEN bytes); the caller may wipe
 * @secret afterwards, and owns @k (wipe it with OPENSSL_cleanse when done).
 */
void objfs_dckey_init(struct objfs_dckey *k, const unsigned char *secret);

/*
 * Writes into @buf (objfs_dcmeta_size() bytes, which must be > 0) the
 * metadata of a chunk with no valid page yet, and fills @m as a parse
 * would (pointing into @buf). Add pages, then seal.
 */
void objfs_dcmeta_init(char *buf, uint64_t block_len, const char *ident, size_t ident_len,
		       struct objfs_dcmeta *m);

/*
 * Marks page @p valid in the metadata @buf with the MAC under @k of @data,
 * the page's objfs_dcmeta_page_len() bytes; @m is @buf's, from
 * objfs_dcmeta_init() or objfs_dcmeta_parse() (its nvalid is kept up to
 * date). @p must be below npages. Unseals @buf until objfs_dcmeta_seal().
 */
void objfs_dcmeta_add(const struct objfs_dckey *k, char *buf, struct objfs_dcmeta *m, size_t p,
		      const char *data);

/* Computes hdr_sum over the metadata @buf under @k: last step before writing it. */
void objfs_dcmeta_seal(const struct objfs_dckey *k, char *buf);

/*
 * Parses and verifies the @n bytes at @buf as a metadata area: magic,
 * version, page size, bounds, meta_len consistent with the lengths and
 * within @n, no bitmap bit past npages, zeros after the identity, hdr_sum
 * under @k; then, when @ident is not
 * NULL, that the identity is @ident (@ident_len bytes), and, when
 * @block_len is not 0, that the block is that long. Fills @m (pointing into
 * @buf) and returns 0; or returns -EINVAL with *@why a static reason
 * ("header MAC mismatch", "identity mismatch ...", ...). Reads nothing
 * beyond @n bytes whatever they hold.
 */
int objfs_dcmeta_parse(const struct objfs_dckey *k, const char *buf, size_t n,
		       const char *ident, size_t ident_len, uint64_t block_len,
		       struct objfs_dcmeta *m, const char **why);

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
 * last) matching its MAC under @k for its index in this chunk. 0, or
 * -EINVAL with *@why "page not valid" or "data checksum mismatch".
 * p0 < p1 <= m->npages.
 */
int objfs_dcmeta_check(const struct objfs_dckey *k, const struct objfs_dcmeta *m, size_t p0,
		       size_t p1, const char *data, const char **why);

#endif
