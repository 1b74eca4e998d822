/*
 * aesgcm: see aesgcm.h.
 *
 * Layout of the work: a record's ciphertext goes 256 bytes (16 blocks, four
 * 512-bit registers) a step; each step encrypts 16 counter blocks, xors
 * them into the ciphertext, and multiplies the 16 byte-reflected
 * ciphertext blocks by H^16..H^1 (the running hash added to the first),
 * summing the three partial products (low, middle, high) of all 16 before
 * one reduction. The last step takes what is left (1-255 bytes) with
 * masked loads and stores; its missing blocks are zeros, which add nothing
 * to the hash whatever power they meet.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "aesgcm.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_VAES 1
#include <cpuid.h>
#include <immintrin.h>
#endif

#ifdef HAVE_VAES

#define VTARGET __attribute__((target("avx512f,avx512bw,avx512vl,vaes,vpclmulqdq,aes,pclmul,sse4.1")))

struct objfs_aesgcm {
	__m512i zrk[15];     /* round keys, each in all four lanes */
	__m128i rk[15];
	__m128i hd;          /* H (byte-reflected) times x: see aesgcm.h */
	__m128i pw[32];      /* pw[i] = H^(16-i) for i < 16, zeros after */
	int nr;              /* rounds: 10 or 14 */
};

/* CPUID leaf 1 ECX: PCLMULQDQ, AES, OSXSAVE; leaf 7 EBX: AVX512F, BW, VL;
 * leaf 7 ECX: VAES, VPCLMULQDQ; XCR0: the OS saves SSE, AVX and the
 * AVX-512 state (opmask, upper halves, upper 16 registers). */
static int cpu_has_vaes(void)
{
	unsigned a, b, c, d, lo, hi;

	if (!__get_cpuid(1, &a, &b, &c, &d) || (c & 0x0a000002) != 0x0a000002)
		return 0;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	if ((lo & 0xe6) != 0xe6)
		return 0;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return 0;
	return (b & 0xc0010000) == 0xc0010000 && (c & 0x600) == 0x600;
}

int objfs_aesgcm_usable(void)
{
	static int usable = -1; /* racing first calls compute the same */
	int u = __atomic_load_n(&usable, __ATOMIC_RELAXED);
	const char *env;

	if (u < 0) {
		env = getenv("OBJFS_AESGCM");
		u = !(env && !strcmp(env, "openssl")) && cpu_has_vaes();
		__atomic_store_n(&usable, u, __ATOMIC_RELAXED);
	}
	return u;
}

/* The key expansions of FIPS 197 (5.2) in Intel's AES-NI form. */
VTARGET static __m128i expand_step(__m128i k, __m128i kg)
{
	k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
	k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
	k = _mm_xor_si128(k, _mm_slli_si128(k, 4));
	return _mm_xor_si128(k, kg);
}

#define K128(i, rcon) \
	rk[i] = expand_step(rk[(i) - 1], \
			    _mm_shuffle_epi32(_mm_aeskeygenassist_si128(rk[(i) - 1], rcon), 0xff))

VTARGET static void expand128(const unsigned char *key, __m128i *rk)
{
	rk[0] = _mm_loadu_si128((const __m128i *)key);
	K128(1, 0x01); K128(2, 0x02); K128(3, 0x04); K128(4, 0x08); K128(5, 0x10);
	K128(6, 0x20); K128(7, 0x40); K128(8, 0x80); K128(9, 0x1b); K128(10, 0x36);
}

/* Even round keys from the one two back with the rcon word (0xff), odd
 * ones with the SubWord of the one before (0xaa, no rcon). */
#define K256(i, rcon) do { \
	rk[i] = expand_step(rk[(i) - 2], \
			    _mm_shuffle_epi32(_mm_aeskeygenassist_si128(rk[(i) - 1], rcon), 0xff)); \
	if ((i) < 14) \
		rk[(i) + 1] = expand_step(rk[(i) - 1], \
					  _mm_shuffle_epi32(_mm_aeskeygenassist_si128(rk[i], 0), \
							    0xaa)); \
} while (0)

VTARGET static void expand256(const unsigned char *key, __m128i *rk)
{
	rk[0] = _mm_loadu_si128((const __m128i *)key);
	rk[1] = _mm_loadu_si128((const __m128i *)(key + 16));
	K256(2, 0x01); K256(4, 0x02); K256(6, 0x04); K256(8, 0x08); K256(10, 0x10);
	K256(12, 0x20); K256(14, 0x40);
}

VTARGET static __m128i encrypt1(const struct objfs_aesgcm *g, __m128i x)
{
	int i;

	x = _mm_xor_si128(x, g->rk[0]);
	for (i = 1; i < g->nr; i++)
		x = _mm_aesenc_si128(x, g->rk[i]);
	return _mm_aesenclast_si128(x, g->rk[g->nr]);
}

VTARGET static __m128i bswap128(__m128i x)
{
	return _mm_shuffle_epi8(x, _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

VTARGET static __m512i bswap512(__m512i x)
{
	return _mm512_shuffle_epi8(x, _mm512_broadcast_i32x4(_mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8,
									  9, 10, 11, 12, 13, 14, 15)));
}

/* The reduction of lo + mid x^64 + hi x^128 (see aesgcm.h). */
VTARGET static __m128i reduce(__m128i lo, __m128i mid, __m128i hi)
{
	const __m128i poly = _mm_set_epi64x(0, (long long)0xc200000000000000ULL);

	mid = _mm_xor_si128(mid, _mm_xor_si128(_mm_clmulepi64_si128(lo, poly, 0x00),
					       _mm_shuffle_epi32(lo, 0x4e)));
	return _mm_xor_si128(hi, _mm_xor_si128(_mm_clmulepi64_si128(mid, poly, 0x00),
					       _mm_shuffle_epi32(mid, 0x4e)));
}

/* a * b in the reflected domain (b one of the stored powers). */
VTARGET static __m128i gmul(__m128i a, __m128i b)
{
	__m128i lo = _mm_clmulepi64_si128(a, b, 0x00), hi = _mm_clmulepi64_si128(a, b, 0x11);
	__m128i mid = _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x01),
				    _mm_clmulepi64_si128(a, b, 0x10));

	return reduce(lo, mid, hi);
}

/* The xor of the four 128-bit lanes of @z. */
VTARGET static __m128i fold4(__m512i z)
{
	__m256i h = _mm256_xor_si256(_mm512_castsi512_si256(z), _mm512_extracti64x4_epi64(z, 1));

	return _mm_xor_si128(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

VTARGET static void setup(const unsigned char *key, size_t klen, struct objfs_aesgcm *g)
{
	__m128i h;
	uint64_t hi, lo, carry;
	int i;

	g->nr = klen == 16 ? 10 : 14;
	if (klen == 16)
		expand128(key, g->rk);
	else
		expand256(key, g->rk);
	for (i = 0; i <= g->nr; i++)
		g->zrk[i] = _mm512_broadcast_i32x4(g->rk[i]);
	/* H = E(K, 0), byte-reflected, times x: a shift left by one, the
	 * bit carried out reduced by x^128 = x^127 + x^126 + x^121 + 1 */
	h = bswap128(encrypt1(g, _mm_setzero_si128()));
	hi = (uint64_t)_mm_extract_epi64(h, 1);
	lo = (uint64_t)_mm_extract_epi64(h, 0);
	carry = hi >> 63;
	hi = hi << 1 | lo >> 63;
	lo <<= 1;
	hi ^= carry ? 0xc200000000000000ULL : 0;
	lo ^= carry;
	g->hd = _mm_set_epi64x((long long)hi, (long long)lo);
	g->pw[15] = g->hd;
	for (i = 14; i >= 0; i--)
		g->pw[i] = gmul(g->pw[i + 1], g->hd);
	for (i = 16; i < 32; i++)
		g->pw[i] = _mm_setzero_si128();
}

int objfs_aesgcm_new(const unsigned char *key, size_t klen, struct objfs_aesgcm **out)
{
	struct objfs_aesgcm *g;

	*out = NULL;
	if (klen != 16 && klen != 32)
		return -EINVAL;
	if (!objfs_aesgcm_usable())
		return -ENOTSUP;
	g = aligned_alloc(64, sizeof(*g));
	if (!g)
		return -ENOMEM;
	setup(key, klen, g);
	*out = g;
	return 0;
}

void objfs_aesgcm_free(struct objfs_aesgcm *g)
{
	if (!g)
		return;
	explicit_bzero(g, sizeof(*g));
	free(g);
}

/* 16 counter blocks (ctr: four lanes of byte-reflected counters) through
 * AES into k0..k3. */
#define AES16(g, ctr, k0, k1, k2, k3) do { \
	const __m512i four_ = _mm512_broadcast_i32x4(_mm_set_epi32(0, 0, 0, 4)); \
	__m512i rk_ = (g)->zrk[0]; \
	int r_; \
	k0 = _mm512_xor_si512(bswap512(ctr), rk_); \
	ctr = _mm512_add_epi32(ctr, four_); \
	k1 = _mm512_xor_si512(bswap512(ctr), rk_); \
	ctr = _mm512_add_epi32(ctr, four_); \
	k2 = _mm512_xor_si512(bswap512(ctr), rk_); \
	ctr = _mm512_add_epi32(ctr, four_); \
	k3 = _mm512_xor_si512(bswap512(ctr), rk_); \
	ctr = _mm512_add_epi32(ctr, four_); \
	for (r_ = 1; r_ < (g)->nr; r_++) { \
		rk_ = (g)->zrk[r_]; \
		k0 = _mm512_aesenc_epi128(k0, rk_); \
		k1 = _mm512_aesenc_epi128(k1, rk_); \
		k2 = _mm512_aesenc_epi128(k2, rk_); \
		k3 = _mm512_aesenc_epi128(k3, rk_); \
	} \
	rk_ = (g)->zrk[(g)->nr]; \
	k0 = _mm512_aesenclast_epi128(k0, rk_); \
	k1 = _mm512_aesenclast_epi128(k1, rk_); \
	k2 = _mm512_aesenclast_epi128(k2, rk_); \
	k3 = _mm512_aesenclast_epi128(k3, rk_); \
} while (0)

/* The products of x (four blocks) and p (their four powers) into lo, mid, hi. */
#define MUL4(x, p, lo, mid, hi) do { \
	lo = _mm512_xor_si512(lo, _mm512_clmulepi64_epi128(x, p, 0x00)); \
	hi = _mm512_xor_si512(hi, _mm512_clmulepi64_epi128(x, p, 0x11)); \
	mid = _mm512_xor_si512(mid, _mm512_xor_si512(_mm512_clmulepi64_epi128(x, p, 0x01), \
						     _mm512_clmulepi64_epi128(x, p, 0x10))); \
} while (0)

/* Decrypts and hashes 256 bytes at @in into @out, the hash @acc (returns
 * the next), from the counters *@ctr: the steady state, unrolled. */
VTARGET static __m128i step256(const struct objfs_aesgcm *g, __m512i *ctr, __m128i acc,
			       const unsigned char *in, unsigned char *out)
{
	__m512i c0 = _mm512_loadu_si512(in), c1 = _mm512_loadu_si512(in + 64);
	__m512i c2 = _mm512_loadu_si512(in + 128), c3 = _mm512_loadu_si512(in + 192);
	__m512i k0, k1, k2, k3, x, p;
	__m512i lo = _mm512_setzero_si512(), mid = lo, hi = lo;

	AES16(g, *ctr, k0, k1, k2, k3);
	x = _mm512_xor_si512(bswap512(c0), _mm512_zextsi128_si512(acc));
	p = _mm512_loadu_si512(g->pw);
	MUL4(x, p, lo, mid, hi);
	p = _mm512_loadu_si512(g->pw + 4);
	MUL4(bswap512(c1), p, lo, mid, hi);
	p = _mm512_loadu_si512(g->pw + 8);
	MUL4(bswap512(c2), p, lo, mid, hi);
	p = _mm512_loadu_si512(g->pw + 12);
	MUL4(bswap512(c3), p, lo, mid, hi);
	_mm512_storeu_si512(out, _mm512_xor_si512(k0, c0));
	_mm512_storeu_si512(out + 64, _mm512_xor_si512(k1, c1));
	_mm512_storeu_si512(out + 128, _mm512_xor_si512(k2, c2));
	_mm512_storeu_si512(out + 192, _mm512_xor_si512(k3, c3));
	return reduce(fold4(lo), fold4(mid), fold4(hi));
}

/* The last 1-255 bytes (@n), as step256 with masked loads and stores. */
VTARGET static __m128i step_tail(const struct objfs_aesgcm *g, __m512i *ctr, __m128i acc,
				 const unsigned char *in, unsigned char *out, size_t n)
{
	__m512i c[4], k[4], lo, mid, hi;
	const __m128i *pw = g->pw + 16 - (n + 15) / 16; /* the first block meets H^nblocks */
	int i;

	for (i = 0; i < 4; i++) {
		size_t off = (size_t)i * 64, m = n > off ? (n - off < 64 ? n - off : 64) : 0;

		c[i] = _mm512_maskz_loadu_epi8(m ? (__mmask64)(~0ULL >> (64 - m)) : 0, in + off);
	}
	AES16(g, *ctr, k[0], k[1], k[2], k[3]);
	lo = mid = hi = _mm512_setzero_si512();
	for (i = 0; i < 4; i++) {
		size_t off = (size_t)i * 64, m = n > off ? (n - off < 64 ? n - off : 64) : 0;
		__m512i x = bswap512(c[i]), p = _mm512_loadu_si512(pw + 4 * i);

		if (i == 0)
			x = _mm512_xor_si512(x, _mm512_zextsi128_si512(acc));
		MUL4(x, p, lo, mid, hi);
		if (m)
			_mm512_mask_storeu_epi8(out + off, (__mmask64)(~0ULL >> (64 - m)),
						_mm512_xor_si512(k[i], c[i]));
	}
	return reduce(fold4(lo), fold4(mid), fold4(hi));
}

VTARGET static int open_vaes(const struct objfs_aesgcm *g, const unsigned char *nonce,
			     const unsigned char *aad, size_t alen, const unsigned char *in,
			     size_t len, const unsigned char *tag, unsigned char *out)
{
	unsigned char j0[16];
	__m128i acc = _mm_setzero_si128(), j, t;
	__m512i ctr;
	size_t off;

	for (off = 0; off < alen; off += 16) {
		unsigned char blk[16] = { 0 };

		memcpy(blk, aad + off, alen - off < 16 ? alen - off : 16);
		acc = gmul(_mm_xor_si128(acc, bswap128(_mm_loadu_si128((const __m128i *)blk))),
			   g->hd);
	}
	memcpy(j0, nonce, 12);
	j0[12] = j0[13] = j0[14] = 0;
	j0[15] = 1;
	j = _mm_loadu_si128((const __m128i *)j0);
	/* the four lanes count J0 + 1 .. J0 + 4, byte-reflected (so the
	 * 32-bit counter is each lane's low word) */
	ctr = _mm512_add_epi32(_mm512_broadcast_i32x4(bswap128(j)),
			       _mm512_set_epi32(0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 1));
	for (off = 0; len - off >= 256; off += 256)
		acc = step256(g, &ctr, acc, in + off, out + off);
	if (off < len)
		acc = step_tail(g, &ctr, acc, in + off, out + off, len - off);
	acc = gmul(_mm_xor_si128(acc, _mm_set_epi64x((long long)((uint64_t)alen * 8),
						     (long long)((uint64_t)len * 8))), g->hd);
	t = _mm_xor_si128(bswap128(acc), encrypt1(g, j));
	t = _mm_xor_si128(t, _mm_loadu_si128((const __m128i *)tag));
	return _mm_testz_si128(t, t) ? 0 : -EBADMSG;
}

int objfs_aesgcm_open(const struct objfs_aesgcm *g, const unsigned char *nonce,
		      const unsigned char *aad, size_t alen, const unsigned char *in, size_t len,
		      const unsigned char *tag, unsigned char *out)
{
	return open_vaes(g, nonce, aad, alen, in, len, tag, out);
}

#else /* no x86-64 vector AES here: OpenSSL does GCM */

struct objfs_aesgcm {
	int unused;
};

int objfs_aesgcm_usable(void)
{
	return 0;
}

int objfs_aesgcm_new(const unsigned char *key, size_t klen, struct objfs_aesgcm **out)
{
	(void)key;
	*out = NULL;
	return klen != 16 && klen != 32 ? -EINVAL : -ENOTSUP;
}

void objfs_aesgcm_free(struct objfs_aesgcm *g)
{
	free(g);
}

int objfs_aesgcm_open(const struct objfs_aesgcm *g, const unsigned char *nonce,
		      const unsigned char *aad, size_t alen, const unsigned char *in, size_t len,
		      const unsigned char *tag, unsigned char *out)
{
	(void)g; (void)nonce; (void)aad; (void)alen; (void)in; (void)len; (void)tag; (void)out;
	return -EBADMSG;
}

#endif
