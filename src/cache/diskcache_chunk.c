/*
 * diskcache_chunk: builds, parses and verifies the metadata area of a chunk
 * file (format 3, laid out in diskcache_i.h). Pure functions over caller
 * memory -- no I/O, no allocation, no globals -- so that
 * tests/fuzz/fuzz_diskcache_chunk.c can feed them arbitrary bytes: what the
 * disk hands back is untrusted (torn writes, bit rot, files of another
 * version, another object, another program -- or another user, where the
 * cache directory was ever writable by one).
 *
 * Invariants a caller can rely on:
 *   - objfs_dcmeta_parse() succeeds only for an area whose every field is
 *     in bounds and consistent (meta_len is the size the lengths imply and
 *     lies within the bytes given, npages matches block_len, no bitmap bit
 *     past npages, zeros after the identity) and whose MAC matches under
 *     the cache's key; it never reads past @n.
 *   - A page is served only when its bit is set and its bytes match its own
 *     MAC (objfs_dcmeta_check), which binds the page to its chunk's
 *     identity, its index and the block length: a valid page moved to
 *     another index or another chunk fails. A read of 4 KiB of a 4 MiB
 *     chunk MACs 4 KiB of data plus ~300 bytes of metadata (not the 8 KiB
 *     of page MACs: see diskcache_i.h).
 *   - Every MAC goes through mac_begin()/mac_end(): HMAC-SHA256 under the
 *     key the caller derived once (objfs_dckey_init), truncated to 64 bits.
 *
 * Why a keyed MAC: format 2 summed with XXH3, which anyone can
 * compute, and the identity is public (URL, ETag, size); a user who could
 * write into cache_dir wrote chunks with valid sums and root read forged
 * bytes. Now validity needs DIR/key (0600, the mounting user's).
 *
 * Why HMAC-SHA256 through the low-level SHA256_CTX: measured on the 2-core
 * development VM (SHA-NI), one MAC of a 4 KiB page costs 2.4 us (1.7 GB/s)
 * with the keyed inner/outer contexts copied as plain structs per call;
 * EVP_MD_CTX_copy_ex of keyed EVP contexts 2.5 us (and it allocates inside),
 * EVP_MAC_init(NULL key) on a reused EVP_MAC_CTX 2.5 us (one context per
 * thread needed), EVP_MAC_CTX_dup per call 2.8 us, one-shot HMAC() 3.5-3.8
 * us; keyed BLAKE2b runs 0.75 GB/s. XXH3-64, format 2's sum, took 0.22 us:
 * a whole 4 MiB block now costs ~2.5 ms of MAC on the disk thread against
 * 0.22 ms. End to end on that VM (objfs_diskcache_read of 64 whole 4 MiB
 * chunks, 4 in flight, O_DIRECT from its virtio disk; 3 rounds, twice):
 * 0.46-0.88 ms of CPU per block and 0.77-1.28 GB/s with XXH3, 2.8-3.3 ms
 * and 0.68-1.07 GB/s with the MAC -- the disk thread verifies one block
 * while the next ones are read; random 4 KiB read_range()s, one at a time,
 * 61-76 us each either way (the 2.5 us of MAC is lost in the hand-offs).
 * SHA256_Init & co. are deprecated in OpenSSL 3.0 but kept through 3.x;
 * this is the only file that uses them.
 *
 * Why per-page MACs and a bitmap rather than format 1's one checksum of
 * the whole block: a random reader fetches only the pages it needs, and
 * those must reach the disk (and be verified on the way back) without the
 * rest of the block. Why the MACs live in the metadata rather than next to
 * each page: the data area stays the block's bytes at a 4 KiB aligned
 * offset, so whole-block reads remain one O_DIRECT readv straight into the
 * block cache's buffer.
 */
#define OPENSSL_SUPPRESS_DEPRECATED /* SHA256_Init/Update/Final: see above */
#include "config.h"

#include <errno.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "diskcache_i.h"

#define MAGIC    "OBJFSDC3"
#define FORMAT   3u
#define SUM_FROM 16u /* hdr_sum covers [SUM_FROM, OBJFS_DCMETA_FIXED), bitmap, identity */
#define HMAC_BLOCK 64u

/* Domain labels: a page MAC's input never reads as a metadata MAC's. */
static const char page_label[16] = "objfs-dc3-page";
static const char meta_label[16] = "objfs-dc3-meta";

/* The fixed fields at offset 0 of the metadata area (48 bytes, no padding). */
struct fixed {
	char magic[8];
	uint64_t hdr_sum;
	uint32_t version;
	uint32_t page_size;
	uint64_t block_len;
	uint32_t meta_len;
	uint32_t ident_len;
	uint32_t npages;
	uint32_t reserved;
};

_Static_assert(sizeof(struct fixed) == OBJFS_DCMETA_FIXED, "fixed metadata fields");

void objfs_dckey_init(struct objfs_dckey *k, const unsigned char *secret)
{
	unsigned char pad[HMAC_BLOCK];

	memset(pad, 0x36, sizeof(pad));
	for (size_t i = 0; i < OBJFS_DCKEY_LEN; i++)
		pad[i] ^= secret[i];
	SHA256_Init(&k->inner);
	SHA256_Update(&k->inner, pad, sizeof(pad));
	memset(pad, 0x5c, sizeof(pad));
	for (size_t i = 0; i < OBJFS_DCKEY_LEN; i++)
		pad[i] ^= secret[i];
	SHA256_Init(&k->outer);
	SHA256_Update(&k->outer, pad, sizeof(pad));
	OPENSSL_cleanse(pad, sizeof(pad));
}

/* An HMAC under @k in @c: copies the keyed inner state (no allocation). */
static void mac_begin(const struct objfs_dckey *k, SHA256_CTX *c)
{
	*c = k->inner;
}

/* Ends the HMAC in @c: its first 64 bits. */
static uint64_t mac_end(const struct objfs_dckey *k, SHA256_CTX *c)
{
	unsigned char h[SHA256_DIGEST_LENGTH];
	uint64_t v;

	SHA256_Final(h, c);
	*c = k->outer;
	SHA256_Update(c, h, sizeof(h));
	SHA256_Final(h, c);
	memcpy(&v, h, sizeof(v));
	return v;
}

/*
 * The MAC of page @p (@len bytes at @data) of the chunk whose identity
 * hashes to @ident_sum, of a @block_len-byte block: the one checksum of
 * the pages. The label, the identity, the index and the length make one
 * 64-byte SHA-256 block ahead of the data.
 */
static uint64_t page_mac(const struct objfs_dckey *k, const unsigned char *ident_sum,
			 uint64_t block_len, size_t p, const char *data, size_t len)
{
	unsigned char pre[HMAC_BLOCK];
	uint64_t idx = p;
	SHA256_CTX c;

	memcpy(pre, page_label, 16);
	memcpy(pre + 16, ident_sum, 32);
	memcpy(pre + 48, &idx, 8);
	memcpy(pre + 56, &block_len, 8);
	mac_begin(k, &c);
	SHA256_Update(&c, pre, sizeof(pre));
	SHA256_Update(&c, data, len);
	return mac_end(k, &c);
}

static size_t bitmap_off(size_t npages)
{
	return OBJFS_DCMETA_FIXED + 8 * npages;
}

static size_t ident_off(size_t npages)
{
	return bitmap_off(npages) + (npages + 7) / 8;
}

/* The metadata MAC of the area @buf whose fixed fields are @f (sane). */
static uint64_t meta_mac(const struct objfs_dckey *k, const char *buf, const struct fixed *f)
{
	size_t bm = bitmap_off(f->npages);
	SHA256_CTX c;

	mac_begin(k, &c);
	SHA256_Update(&c, meta_label, sizeof(meta_label));
	SHA256_Update(&c, buf + SUM_FROM, OBJFS_DCMETA_FIXED - SUM_FROM);
	SHA256_Update(&c, buf + bm, ident_off(f->npages) + f->ident_len - bm);
	return mac_end(k, &c);
}

size_t objfs_dcmeta_size(uint64_t block_len, size_t ident_len)
{
	size_t raw;

	if (!block_len || block_len > OBJFS_DCMETA_BLOCK_MAX || !ident_len ||
	    ident_len > OBJFS_DCMETA_IDENT_MAX)
		return 0;
	raw = ident_off(objfs_dcmeta_npages(block_len)) + ident_len;
	return (raw + OBJFS_DCMETA_PAGE - 1) / OBJFS_DCMETA_PAGE * OBJFS_DCMETA_PAGE;
}

uint64_t objfs_dcmeta_block_len(uint64_t file_size, size_t ident_len)
{
	uint64_t b_hi, b_lo;
	size_t m_hi, m;

	if (file_size <= OBJFS_DCMETA_PAGE)
		return 0;
	/* the metadata grows with the block: the real size m lies in
	 * [size(b_lo), size(b_hi)], a step or two of 4 KiB apart */
	b_hi = file_size - OBJFS_DCMETA_PAGE;
	if (b_hi > OBJFS_DCMETA_BLOCK_MAX)
		b_hi = OBJFS_DCMETA_BLOCK_MAX;
	m_hi = objfs_dcmeta_size(b_hi, ident_len);
	if (!m_hi || m_hi >= file_size)
		return 0;
	b_lo = file_size - m_hi;
	for (m = objfs_dcmeta_size(b_lo, ident_len); m && m <= m_hi; m += OBJFS_DCMETA_PAGE) {
		uint64_t b = file_size - m;

		if (b <= OBJFS_DCMETA_BLOCK_MAX && objfs_dcmeta_size(b, ident_len) == m)
			return b;
	}
	return 0;
}

/* Fills @m for the area @buf with the (sane) fixed fields @f; nvalid left 0. */
static void meta_fill(const char *buf, const struct fixed *f, struct objfs_dcmeta *m)
{
	*m = (struct objfs_dcmeta){
		.block_len = f->block_len, .npages = f->npages, .meta_len = f->meta_len,
		.sums = (const unsigned char *)buf + OBJFS_DCMETA_FIXED,
		.bitmap = (const unsigned char *)buf + bitmap_off(f->npages),
		.ident = buf + ident_off(f->npages), .ident_len = f->ident_len,
	};
	SHA256((const unsigned char *)m->ident, m->ident_len, m->ident_sum);
}

void objfs_dcmeta_init(char *buf, uint64_t block_len, const char *ident, size_t ident_len,
		       struct objfs_dcmeta *m)
{
	size_t np = objfs_dcmeta_npages(block_len);
	struct fixed f = {
		.version = FORMAT, .page_size = OBJFS_DCMETA_PAGE, .block_len = block_len,
		.meta_len = (uint32_t)objfs_dcmeta_size(block_len, ident_len),
		.ident_len = (uint32_t)ident_len, .npages = (uint32_t)np,
	};

	memcpy(f.magic, MAGIC, sizeof(f.magic));
	memset(buf, 0, f.meta_len);
	memcpy(buf, &f, sizeof(f));
	memcpy(buf + ident_off(np), ident, ident_len);
	meta_fill(buf, &f, m);
}

void objfs_dcmeta_add(const struct objfs_dckey *k, char *buf, struct objfs_dcmeta *m, size_t p,
		      const char *data)
{
	uint64_t sum = page_mac(k, m->ident_sum, m->block_len, p, data,
				objfs_dcmeta_page_len(m->block_len, p));
	unsigned char *bm = (unsigned char *)buf + bitmap_off(m->npages);

	memcpy(buf + OBJFS_DCMETA_FIXED + 8 * p, &sum, sizeof(sum));
	if (!objfs_dcmeta_bit(bm, p)) {
		objfs_dcmeta_bit_set(bm, p);
		m->nvalid++;
	}
}

void objfs_dcmeta_seal(const struct objfs_dckey *k, char *buf)
{
	struct fixed f;

	memcpy(&f, buf, sizeof(f));
	f.hdr_sum = meta_mac(k, buf, &f);
	memcpy(buf, &f, sizeof(f));
}

/* The fixed fields of @buf when the magic, version and lengths are sane: 0, else -EINVAL. */
static int fixed_get(const char *buf, size_t n, struct fixed *f, const char **why)
{
	if (n < sizeof(*f)) {
		*why = "truncated metadata";
		return -EINVAL;
	}
	memcpy(f, buf, sizeof(*f));
	if (memcmp(f->magic, MAGIC, sizeof(f->magic)) || f->version != FORMAT) {
		*why = "not a chunk file of this version";
		return -EINVAL;
	}
	if (f->page_size != OBJFS_DCMETA_PAGE || f->reserved ||
	    f->npages != objfs_dcmeta_npages(f->block_len) ||
	    f->meta_len != objfs_dcmeta_size(f->block_len, f->ident_len) || !f->meta_len) {
		*why = "inconsistent metadata lengths";
		return -EINVAL;
	}
	return 0;
}

size_t objfs_dcmeta_claimed_len(const char *buf, size_t n)
{
	struct fixed f;
	const char *why;

	return fixed_get(buf, n, &f, &why) ? 0 : f.meta_len;
}

/* Whether the @n bytes at @p are all 0. */
static int all_zero(const char *p, size_t n)
{
	return !n || (!p[0] && !memcmp(p, p + 1, n - 1));
}

int objfs_dcmeta_parse(const struct objfs_dckey *k, const char *buf, size_t n,
		       const char *ident, size_t ident_len, uint64_t block_len,
		       struct objfs_dcmeta *m, const char **why)
{
	const unsigned char *bm;
	struct fixed f;
	size_t np, nvalid = 0, end;

	if (fixed_get(buf, n, &f, why))
		return -EINVAL;
	if (f.meta_len > n) {
		*why = "truncated metadata";
		return -EINVAL;
	}
	np = f.npages;
	end = ident_off(np) + f.ident_len;
	if (!all_zero(buf + end, f.meta_len - end)) {
		*why = "bytes after the identity";
		return -EINVAL;
	}
	if (meta_mac(k, buf, &f) != f.hdr_sum) {
		*why = "header checksum mismatch (MAC: another key, or forged)";
		return -EINVAL;
	}
	bm = (const unsigned char *)buf + bitmap_off(np);
	if (np % 8 && bm[np / 8] >> (np % 8)) {
		*why = "bitmap bits past the block";
		return -EINVAL;
	}
	for (size_t i = 0; i < (np + 7) / 8; i++)
		nvalid += (size_t)__builtin_popcount(bm[i]);
	if (ident && (f.ident_len != ident_len || memcmp(buf + ident_off(np), ident, ident_len))) {
		*why = "identity mismatch (another object, version or block)";
		return -EINVAL;
	}
	if (block_len && f.block_len != block_len) {
		*why = "length mismatch";
		return -EINVAL;
	}
	meta_fill(buf, &f, m);
	m->nvalid = nvalid;
	return 0;
}

int objfs_dcmeta_check(const struct objfs_dckey *k, const struct objfs_dcmeta *m, size_t p0,
		       size_t p1, const char *data, const char **why)
{
	for (size_t p = p0; p < p1; p++) {
		size_t len = objfs_dcmeta_page_len(m->block_len, p);
		uint64_t want;

		if (!objfs_dcmeta_bit(m->bitmap, p)) {
			*why = "page not valid";
			return -EINVAL;
		}
		memcpy(&want, m->sums + 8 * p, sizeof(want));
		if (page_mac(k, m->ident_sum, m->block_len, p, data, len) != want) {
			*why = "data checksum mismatch";
			return -EINVAL;
		}
		data += len;
	}
	return 0;
}
