/*
 * fuzz_diskcache_chunk: the disk cache's chunk format (diskcache_chunk.c),
 * the code that reads what the disk hands back.
 *
 * Each input is used twice:
 *   1. As a metadata area read from a chunk file: objfs_dcmeta_parse() on
 *      the raw bytes (the seeds: a valid format 2 area, a format 1 header,
 *      a truncated area). It must never read past the input (ASan), and
 *      what it accepts must be self-consistent: meta_len a multiple of 4096
 *      within the input and the size its lengths imply, npages matching
 *      block_len, nvalid the bitmap's count, the identity inside the area;
 *      resealing it changes nothing, the block length inverts from the
 *      file size, its own identity is accepted and another one refused, and
 *      objfs_dcmeta_check() over a few of its pages answers 0 or -EINVAL.
 *   2. As a recipe: a block length (up to 20 pages), an identity, which
 *      pages are valid and their bytes, then one byte to flip. The chunk is
 *      built with init/add/seal; it must parse back with the pages it was
 *      given, every valid page must check, and the flipped byte --
 *      anywhere in the metadata or the valid pages -- must be caught: by
 *      the parse, or by the check of the page it lies in (wrong bytes are
 *      the worst bug of the project).
 */
#include "config.h"

#include <errno.h>

#include "diskcache_i.h"
#include "fuzz.h"

#define MAX_PAGES 20u

/* Part 1: arbitrary bytes as a metadata area. */
static void raw(const uint8_t *data, size_t size)
{
	const char *buf = (const char *)data, *why = NULL;
	struct objfs_dcmeta m;
	size_t nvalid = 0;
	char *copy, other[8] = "x";
	int rc = objfs_dcmeta_parse(buf, size, NULL, 0, 0, &m, &why);

	FUZZ_CHECK(rc == 0 || (rc == -EINVAL && why && *why), "rc %d", rc);
	if (rc)
		return;
	FUZZ_CHECK(m.meta_len % OBJFS_DCMETA_PAGE == 0 && m.meta_len <= size, "meta_len %zu",
		   m.meta_len);
	FUZZ_CHECK(m.meta_len == objfs_dcmeta_size(m.block_len, m.ident_len), "meta_len %zu",
		   m.meta_len);
	FUZZ_CHECK(m.npages == objfs_dcmeta_npages(m.block_len), "npages %zu", m.npages);
	FUZZ_CHECK(m.ident >= buf && m.ident + m.ident_len <= buf + m.meta_len, "identity");
	FUZZ_CHECK(objfs_dcmeta_claimed_len(buf, size) == m.meta_len, "claimed length");
	for (size_t p = 0; p < m.npages; p++)
		nvalid += (size_t)objfs_dcmeta_bit(m.bitmap, p);
	FUZZ_CHECK(nvalid == m.nvalid, "nvalid %zu, bitmap %zu", m.nvalid, nvalid);
	FUZZ_CHECK(objfs_dcmeta_block_len(m.meta_len + m.block_len, m.ident_len) == m.block_len,
		   "block length does not invert");
	copy = malloc(m.meta_len);
	if (!copy)
		abort();
	memcpy(copy, buf, m.meta_len);
	objfs_dcmeta_seal(copy);
	FUZZ_CHECK(memcmp(copy, buf, m.meta_len) == 0, "resealing changed the area");
	rc = objfs_dcmeta_parse(buf, size, copy + (m.ident - buf), m.ident_len, m.block_len, &m,
				&why);
	FUZZ_CHECK(rc == 0, "own identity refused: %s", why);
	rc = objfs_dcmeta_parse(buf, size, other, m.ident_len == 1 && m.ident[0] == 'x' ? 2 : 1,
				0, &m, &why);
	FUZZ_CHECK(rc == -EINVAL, "another identity accepted");
	free(copy);
	/* a few pages, checked against the input's tail (any answer but a crash) */
	{
		size_t p0 = size % m.npages, p1 = p0 + 3 < m.npages ? p0 + 3 : m.npages;
		char page[3 * OBJFS_DCMETA_PAGE] = { 0 };

		memcpy(page, buf + size - (size < sizeof(page) ? size : sizeof(page)),
		       size < sizeof(page) ? size : sizeof(page));
		rc = objfs_dcmeta_check(&m, p0, p1, page, &why);
		FUZZ_CHECK(rc == 0 || (rc == -EINVAL && why), "check rc %d", rc);
	}
}

/* Part 2: the input as a recipe for a chunk, then one flipped byte. */
static void recipe(const uint8_t *data, size_t size)
{
	uint64_t block_len, flip;
	size_t ident_len, meta_len, np, nvalid = 0, p;
	char ident[64], *meta, *pages;
	unsigned char want[(MAX_PAGES + 7) / 8] = { 0 };
	struct objfs_dcmeta m;
	const char *why;
	int caught;

	if (size < 16)
		return;
	block_len = 1 + fuzz_le(data, 3) % (MAX_PAGES * OBJFS_DCMETA_PAGE);
	ident_len = 1 + data[3] % sizeof(ident);
	flip = fuzz_le(data + 4, 4);
	memcpy(want, data + 8, sizeof(want));
	data += 16;
	size -= 16;
	for (size_t i = 0; i < ident_len; i++)
		ident[i] = (char)(i < size ? data[i] : i);
	np = objfs_dcmeta_npages(block_len);
	meta_len = objfs_dcmeta_size(block_len, ident_len);
	FUZZ_CHECK(meta_len && meta_len % OBJFS_DCMETA_PAGE == 0, "meta_len %zu", meta_len);
	FUZZ_CHECK(objfs_dcmeta_block_len(meta_len + block_len, ident_len) == block_len,
		   "block length %llu does not invert", (unsigned long long)block_len);
	meta = malloc(meta_len);
	pages = malloc(block_len);
	if (!meta || !pages)
		abort();
	for (uint64_t i = 0; i < block_len; i++)
		pages[i] = (char)(size ? data[i % size] ^ (uint8_t)(i / size) : (uint8_t)i);
	objfs_dcmeta_init(meta, block_len, ident, ident_len);
	for (p = 0; p < np; p++) {
		if (!objfs_dcmeta_bit(want, p))
			continue;
		objfs_dcmeta_add(meta, p, pages + p * OBJFS_DCMETA_PAGE);
		nvalid++;
	}
	objfs_dcmeta_seal(meta);
	FUZZ_CHECK(objfs_dcmeta_parse(meta, meta_len, ident, ident_len, block_len, &m, &why) == 0,
		   "a built chunk does not parse: %s", why);
	FUZZ_CHECK(m.nvalid == nvalid && m.npages == np, "nvalid %zu of %zu", m.nvalid, nvalid);
	for (p = 0; p < np; p++) {
		int rc = objfs_dcmeta_check(&m, p, p + 1, pages + p * OBJFS_DCMETA_PAGE, &why);

		FUZZ_CHECK(objfs_dcmeta_bit(want, p) ? rc == 0 : rc == -EINVAL,
			   "page %zu: rc %d", p, rc);
	}
	/* one flipped byte, in the metadata (but the reserved tail of the magic
	 * is checked as such) or in a page: caught by the parse or the check */
	flip %= meta_len + block_len;
	if (flip < meta_len) {
		meta[flip] ^= (char)(1u | want[0]); /* never 0 */
		caught = objfs_dcmeta_parse(meta, meta_len, ident, ident_len, block_len, &m, &why) != 0;
		FUZZ_CHECK(caught, "metadata byte %llu flipped, still parses",
			   (unsigned long long)flip);
	} else {
		p = (size_t)((flip - meta_len) / OBJFS_DCMETA_PAGE);
		pages[flip - meta_len] ^= 0x20;
		caught = objfs_dcmeta_check(&m, p, p + 1, pages + p * OBJFS_DCMETA_PAGE, &why) != 0;
		FUZZ_CHECK(caught, "page %zu flipped, still checks", p);
	}
	free(meta);
	free(pages);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	raw(data, size);
	recipe(data, size);
	return 0;
}
