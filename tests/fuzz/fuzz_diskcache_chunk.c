/*
 * fuzz_diskcache_chunk: the disk cache's chunk format (diskcache_chunk.c),
 * the code that reads what the disk hands back.
 *
 * Every MAC is under one fixed key (fuzz_key, all 0x42), the seeds' key;
 * another key (0x43) must refuse what the first accepts.
 *
 * Each input is used twice:
 *   1. As a metadata area read from a chunk file: objfs_dcmeta_parse() on
 *      the raw bytes (the seeds: valid format 3 areas, format 1 and 2
 *      headers, a truncated area), and once more resealed under the key
 *      when its fixed fields are sane, so that the checks behind the MAC
 *      see arbitrary bytes too (no mutation forges a MAC). It must never
 *      read past the input (ASan), and what it accepts must be
 *      self-consistent: meta_len a multiple of 4096
 *      within the input and the size its lengths imply, npages matching
 *      block_len, nvalid the bitmap's count, the identity inside the area;
 *      resealing it changes nothing, the block length inverts from the
 *      file size, its own identity is accepted and another one refused,
 *      another key refuses it, and objfs_dcmeta_check() over a few of its
 *      pages answers 0 or -EINVAL.
 *   2. As a recipe: a block length (up to 20 pages), an identity, which
 *      pages are valid and their bytes, then one byte to flip. The chunk is
 *      built with init/add/seal; it must parse back with the pages it was
 *      given, every valid page must check, a valid page's bytes and MAC
 *      put at another index (resealed with the key) must fail there, and
 *      the flipped byte -- anywhere in the metadata or the valid pages --
 *      must be caught: by the parse, or by the check of the page it lies
 *      in or whose MAC it hits (a flip in the MAC of a page not valid
 *      changes nothing served) -- wrong bytes are the worst bug of the
 *      project.
 */
#include "config.h"

#include <errno.h>

#include "diskcache_i.h"
#include "fuzz.h"

#define MAX_PAGES 20u

static struct objfs_dckey fuzz_key, other_key;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	unsigned char secret[OBJFS_DCKEY_LEN];

	(void)argc;
	(void)argv;
	memset(secret, 0x42, sizeof(secret));
	objfs_dckey_init(&fuzz_key, secret);
	memset(secret, 0x43, sizeof(secret));
	objfs_dckey_init(&other_key, secret);
	return 0;
}

/* Part 1: arbitrary bytes as a metadata area (@size bytes at @buf). */
static void raw_area(const char *buf, size_t size)
{
	const char *why = NULL;
	struct objfs_dcmeta m, m2;
	size_t nvalid = 0;
	char *copy, other[8] = "x";
	int rc = objfs_dcmeta_parse(&fuzz_key, buf, size, NULL, 0, 0, &m, &why);

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
	objfs_dcmeta_seal(&fuzz_key, copy);
	FUZZ_CHECK(memcmp(copy, buf, m.meta_len) == 0, "resealing changed the area");
	rc = objfs_dcmeta_parse(&fuzz_key, buf, size, copy + (m.ident - buf), m.ident_len,
				m.block_len, &m, &why);
	FUZZ_CHECK(rc == 0, "own identity refused: %s", why);
	rc = objfs_dcmeta_parse(&fuzz_key, buf, size, other,
				m.ident_len == 1 && m.ident[0] == 'x' ? 2 : 1, 0, &m2, &why);
	FUZZ_CHECK(rc == -EINVAL, "another identity accepted");
	rc = objfs_dcmeta_parse(&other_key, buf, size, NULL, 0, 0, &m2, &why);
	FUZZ_CHECK(rc == -EINVAL, "another key accepted");
	free(copy);
	/* a few pages, checked against the input's tail (any answer but a crash) */
	{
		size_t p0 = size % m.npages, p1 = p0 + 3 < m.npages ? p0 + 3 : m.npages;
		char page[3 * OBJFS_DCMETA_PAGE] = { 0 };

		memcpy(page, buf + size - (size < sizeof(page) ? size : sizeof(page)),
		       size < sizeof(page) ? size : sizeof(page));
		rc = objfs_dcmeta_check(&fuzz_key, &m, p0, p1, page, &why);
		FUZZ_CHECK(rc == 0 || (rc == -EINVAL && why), "check rc %d", rc);
	}
}

/* Part 1 on the input, then on it resealed when its fixed fields are sane. */
static void raw(const uint8_t *data, size_t size)
{
	size_t len = objfs_dcmeta_claimed_len((const char *)data, size);
	char *copy;

	raw_area((const char *)data, size);
	if (!len || len > size)
		return;
	copy = malloc(size);
	if (!copy)
		abort();
	memcpy(copy, data, size);
	objfs_dcmeta_seal(&fuzz_key, copy);
	raw_area(copy, size);
	free(copy);
}

/* Part 2: the input as a recipe for a chunk, then one flipped byte. */
static void recipe(const uint8_t *data, size_t size)
{
	uint64_t block_len, flip;
	size_t ident_len, meta_len, np, nvalid = 0, p;
	char ident[64], *meta, *pages, *moved;
	unsigned char want[(MAX_PAGES + 7) / 8] = { 0 };
	struct objfs_dcmeta m, mm;
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
	objfs_dcmeta_init(meta, block_len, ident, ident_len, &m);
	for (p = 0; p < np; p++) {
		if (!objfs_dcmeta_bit(want, p))
			continue;
		objfs_dcmeta_add(&fuzz_key, meta, &m, p, pages + p * OBJFS_DCMETA_PAGE);
		nvalid++;
	}
	FUZZ_CHECK(m.nvalid == nvalid, "add counted %zu of %zu", m.nvalid, nvalid);
	objfs_dcmeta_seal(&fuzz_key, meta);
	FUZZ_CHECK(objfs_dcmeta_parse(&fuzz_key, meta, meta_len, ident, ident_len, block_len, &m,
				      &why) == 0, "a built chunk does not parse: %s", why);
	FUZZ_CHECK(m.nvalid == nvalid && m.npages == np, "nvalid %zu of %zu", m.nvalid, nvalid);
	FUZZ_CHECK(objfs_dcmeta_parse(&other_key, meta, meta_len, NULL, 0, 0, &mm, &why) != 0,
		   "another key accepted a built chunk");
	for (p = 0; p < np; p++) {
		int rc = objfs_dcmeta_check(&fuzz_key, &m, p, p + 1, pages + p * OBJFS_DCMETA_PAGE,
					    &why);

		FUZZ_CHECK(objfs_dcmeta_bit(want, p) ? rc == 0 : rc == -EINVAL,
			   "page %zu: rc %d", p, rc);
	}
	/* a valid page and its MAC moved to another full-length index (the
	 * metadata resealed with the key, as only its owner could): refused */
	p = flip % np;
	if (objfs_dcmeta_bit(want, p) && np > 1 &&
	    objfs_dcmeta_page_len(block_len, p) == OBJFS_DCMETA_PAGE) {
		size_t q = (p + 1 + (flip >> 8) % (np - 1)) % np;

		moved = malloc(meta_len);
		if (!moved)
			abort();
		memcpy(moved, meta, meta_len);
		memcpy(moved + OBJFS_DCMETA_FIXED + 8 * q, meta + OBJFS_DCMETA_FIXED + 8 * p, 8);
		objfs_dcmeta_bit_set((unsigned char *)moved + (m.bitmap - (unsigned char *)meta), q);
		objfs_dcmeta_seal(&fuzz_key, moved);
		FUZZ_CHECK(objfs_dcmeta_parse(&fuzz_key, moved, meta_len, ident, ident_len,
					      block_len, &mm, &why) == 0, "moved: %s", why);
		if (objfs_dcmeta_page_len(block_len, q) == OBJFS_DCMETA_PAGE)
			FUZZ_CHECK(objfs_dcmeta_check(&fuzz_key, &mm, q, q + 1,
						      pages + p * OBJFS_DCMETA_PAGE, &why) != 0,
				   "page %zu accepted at index %zu", p, q);
		free(moved);
	}
	/* one flipped byte, in the metadata (but the reserved tail of the magic
	 * is checked as such) or in a page: caught by the parse or the check */
	flip %= meta_len + block_len;
	if (flip < meta_len) {
		size_t sums_end = OBJFS_DCMETA_FIXED + 8 * np;

		meta[flip] ^= (char)(1u | want[0]); /* never 0 */
		caught = objfs_dcmeta_parse(&fuzz_key, meta, meta_len, ident, ident_len, block_len,
					    &m, &why) != 0;
		if (!caught && flip >= OBJFS_DCMETA_FIXED && flip < sums_end) {
			/* a page MAC: not under the header's; that page fails, if valid */
			p = (size_t)(flip - OBJFS_DCMETA_FIXED) / 8;
			caught = objfs_dcmeta_check(&fuzz_key, &m, p, p + 1,
						    pages + p * OBJFS_DCMETA_PAGE, &why) != 0 ||
				 !objfs_dcmeta_bit(want, p);
		}
		FUZZ_CHECK(caught, "metadata byte %llu flipped, still parses and serves",
			   (unsigned long long)flip);
	} else {
		p = (size_t)((flip - meta_len) / OBJFS_DCMETA_PAGE);
		pages[flip - meta_len] ^= 0x20;
		caught = objfs_dcmeta_check(&fuzz_key, &m, p, p + 1, pages + p * OBJFS_DCMETA_PAGE,
					    &why) != 0;
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
