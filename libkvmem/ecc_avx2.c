/* SPDX-License-Identifier: MIT */
/*
 * ecc_avx2.c - AVX2 bulk codec kernels (built with -mavx2, reached only
 * after a runtime check)
 *
 * Syndromes are linear over GF(2), so the syndrome of a word is the XOR of
 * the syndromes of its nibbles, and VPSHUFB looks up 32 nibbles in a 16-entry
 * table at once. The scan kernels OR syndromes together over a block and
 * branch once; only a block that comes out non-zero is searched for its first
 * dirty word, with a byte or lane mask. Kernels not defined here are NULL and fall back to the
 * portable ones (see KERNEL() in ecc.c).
 */
#include <immintrin.h>
#include <string.h>

#include "internal.h"

/* Bytes per scan block: 4 vectors OR-ed before one branch. */
#define BLOCK 128

static __m256i table16(const uint8_t *t)
{
	return _mm256_broadcastsi128_si256(_mm_loadu_si128((const void *)t));
}

/* Syndromes of 32 one-byte codewords; a byte is non-zero iff dirty. */
static __m256i nibble_syn(__m256i lo_t, __m256i hi_t, const uint8_t *p)
{
	const __m256i low4 = _mm256_set1_epi8(0x0f);
	__m256i x = _mm256_loadu_si256((const void *)p);
	__m256i lo = _mm256_and_si256(x, low4);
	__m256i hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), low4);

	return _mm256_xor_si256(_mm256_shuffle_epi8(lo_t, lo),
				_mm256_shuffle_epi8(hi_t, hi));
}

/* Index of the first non-zero byte of a vector known to have one. */
static unsigned int first_nonzero8(__m256i v)
{
	uint32_t zero = (uint32_t)_mm256_movemask_epi8(
		_mm256_cmpeq_epi8(v, _mm256_setzero_si256()));

	return (unsigned int)__builtin_ctz(~zero);
}

static size_t nibble_scan(const uint8_t (*syn)[16], const uint8_t *code,
			  size_t n, const struct kvmem__ecc_kernels *tail)
{
	const __m256i lo_t = table16(syn[0]), hi_t = table16(syn[1]);
	size_t i;
	int v;

	for (i = 0; i + BLOCK <= n; i += BLOCK) {
		__m256i s[BLOCK / 32], acc = _mm256_setzero_si256();

		for (v = 0; v < BLOCK / 32; v++) {
			s[v] = nibble_syn(lo_t, hi_t, code + i + 32 * v);
			acc = _mm256_or_si256(acc, s[v]);
		}
		if (_mm256_testz_si256(acc, acc))
			continue;
		for (v = 0; _mm256_testz_si256(s[v], s[v]); v++)
			;
		return i + 32 * (size_t)v + first_nonzero8(s[v]);
	}
	for (; i + 32 <= n; i += 32) {
		__m256i x = nibble_syn(lo_t, hi_t, code + i);

		if (!_mm256_testz_si256(x, x))
			return i + first_nonzero8(x);
	}
	return i + tail->scan(code + i, n - i);
}

static size_t h74_scan(const uint8_t *code, size_t n)
{
	return nibble_scan(kvmem__ecc_tables()->h74_syn, code, n,
			   &kvmem__ecc_portable[KVMEM_CODEC_H74]);
}

static size_t h84_scan(const uint8_t *code, size_t n)
{
	return nibble_scan(kvmem__ecc_tables()->h84_syn, code, n,
			   &kvmem__ecc_portable[KVMEM_CODEC_H84]);
}

/* 32 data bytes -> 64 codewords, low nibble first. */
static void nibble_encode(const uint8_t *enc, const uint8_t *data,
			  uint8_t *code, size_t n, int codec)
{
	const __m256i t = table16(enc);
	const __m256i low4 = _mm256_set1_epi8(0x0f);
	size_t i;

	for (i = 0; i + 64 <= n; i += 64) {
		__m256i x = _mm256_loadu_si256((const void *)(data + i / 2));
		__m256i lo = _mm256_shuffle_epi8(t, _mm256_and_si256(x, low4));
		__m256i hi = _mm256_shuffle_epi8(
			t, _mm256_and_si256(_mm256_srli_epi16(x, 4), low4));
		/* Interleave within each 128-bit lane, then put lanes in order. */
		__m256i a = _mm256_unpacklo_epi8(lo, hi);
		__m256i b = _mm256_unpackhi_epi8(lo, hi);

		_mm256_storeu_si256((void *)(code + i),
				    _mm256_permute2x128_si256(a, b, 0x20));
		_mm256_storeu_si256((void *)(code + i + 32),
				    _mm256_permute2x128_si256(a, b, 0x31));
	}
	kvmem__ecc_portable[codec].encode(data + i / 2, code + i, n - i);
}

static void h74_encode(const uint8_t *data, uint8_t *code, size_t n)
{
	nibble_encode(kvmem__ecc_tables()->h74_enc, data, code, n,
		      KVMEM_CODEC_H74);
}

static void h84_encode(const uint8_t *data, uint8_t *code, size_t n)
{
	nibble_encode(kvmem__ecc_tables()->h84_enc, data, code, n,
		      KVMEM_CODEC_H84);
}

/* 64 codewords -> 32 data bytes: (c[2i] & 15) | (c[2i+1] & 15) << 4. */
static void nibble_extract(const uint8_t *code, uint8_t *data, size_t n)
{
	const __m256i low4 = _mm256_set1_epi8(0x0f);
	const __m256i mul = _mm256_set1_epi16(0x1001); /* bytes 1, 16 */
	size_t i;

	for (i = 0; i + 64 <= n; i += 64) {
		__m256i a = _mm256_and_si256(
			_mm256_loadu_si256((const void *)(code + i)), low4);
		__m256i b = _mm256_and_si256(
			_mm256_loadu_si256((const void *)(code + i + 32)),
			low4);
		__m256i p = _mm256_packus_epi16(_mm256_maddubs_epi16(a, mul),
						_mm256_maddubs_epi16(b, mul));

		_mm256_storeu_si256(
			(void *)(data + i / 2),
			_mm256_permute4x64_epi64(p, _MM_SHUFFLE(3, 1, 2, 0)));
	}
	kvmem__ecc_portable[KVMEM_CODEC_H84].extract(code + i, data + i / 2,
						     n - i);
}

/*
 * Golay: 8 words (24 bytes) per vector, one per 32-bit lane. The parity
 * half of the syndrome, d.B, is the XOR of three nibble lookups (d0..d3,
 * d4..d7, d8..d11), each giving a low byte and a high nibble.
 */
static size_t golay_scan(const uint8_t *code, size_t n)
{
	const struct kvmem__ecc_tables *t = kvmem__ecc_tables();
	/* Bytes 3k..3k+2 of each 12-byte half into lane k, top byte zero. */
	const __m256i spread = _mm256_broadcastsi128_si256(_mm_setr_epi8(
		0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1));
	const __m256i nib = _mm256_set1_epi32(0x0f);
	const __m256i p0l = table16(t->golay_par[0][0]);
	const __m256i p0h = table16(t->golay_par[0][1]);
	const __m256i p1l = table16(t->golay_par[1][0]);
	const __m256i p1h = table16(t->golay_par[1][1]);
	const __m256i p2l = table16(t->golay_par[2][0]);
	const __m256i p2h = table16(t->golay_par[2][1]);
	size_t i;

	/* Each lane loads 16 bytes for 12: stop while 28 remain readable. */
	for (i = 0; i + 8 <= n && (n - i) * 3 >= 28; i += 8) {
		const uint8_t *p = code + 3 * i;
		__m256i x = _mm256_shuffle_epi8(
			_mm256_loadu2_m128i((const void *)(p + 12),
					    (const void *)p),
			spread);
		__m256i n0 = _mm256_and_si256(x, nib);
		__m256i n1 = _mm256_and_si256(_mm256_srli_epi32(x, 4), nib);
		__m256i n2 = _mm256_and_si256(_mm256_srli_epi32(x, 8), nib);
		__m256i lo = _mm256_xor_si256(
			_mm256_xor_si256(_mm256_shuffle_epi8(p0l, n0),
					 _mm256_shuffle_epi8(p1l, n1)),
			_mm256_shuffle_epi8(p2l, n2));
		__m256i hi = _mm256_xor_si256(
			_mm256_xor_si256(_mm256_shuffle_epi8(p0h, n0),
					 _mm256_shuffle_epi8(p1h, n1)),
			_mm256_shuffle_epi8(p2h, n2));
		/* Index bytes 1..3 of each lane are zero, and table[0] = 0,
		 * so only byte 0 of each lookup is non-zero. */
		__m256i par = _mm256_or_si256(lo, _mm256_slli_epi32(hi, 8));
		__m256i syn = _mm256_xor_si256(par, _mm256_srli_epi32(x, 12));

		if (!_mm256_testz_si256(syn, syn)) {
			uint32_t zero = (uint32_t)_mm256_movemask_ps(
				_mm256_castsi256_ps(_mm256_cmpeq_epi32(
					syn, _mm256_setzero_si256())));

			return i + (size_t)__builtin_ctz(~zero);
		}
	}
	return i + kvmem__ecc_portable[KVMEM_CODEC_GOLAY24].scan(code + 3 * i,
								 n - i);
}

/*
 * Golay extract: the data half of two words is 24 bits, the low 12 of each.
 * Per lane, eight words (24 bytes, from two loads 8 bytes apart): a
 * shuffle puts bytes 0, 1, 3 and 4 of each word pair in a dword, a mask and
 * a shift pack the pair's 24 bits, and a second shuffle closes the gaps.
 * Each lane's 12 bytes are stored 16 wide, the second lane's over the
 * first's spare four.
 */
static void golay_extract(const uint8_t *code, uint8_t *data, size_t n)
{
	const __m256i pick_a = _mm256_broadcastsi128_si256(_mm_setr_epi8(
		0, 1, 3, 4, 6, 7, 9, 10, -1, -1, -1, -1, -1, -1, -1, -1));
	const __m256i pick_b = _mm256_broadcastsi128_si256(_mm_setr_epi8(
		-1, -1, -1, -1, -1, -1, -1, -1, 4, 5, 7, 8, 10, 11, 13, 14));
	const __m256i pack = _mm256_broadcastsi128_si256(_mm_setr_epi8(
		0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1));
	const __m256i lo12 = _mm256_set1_epi32(0xfff);
	const __m256i hi12 = _mm256_set1_epi32(0xfff000);
	size_t i;

	/* Loads end at word i + 16; the second store at data byte
	 * 1.5 i + 28, inside the 1.5 n of n words while i + 19 <= n. */
	for (i = 0; i + 19 <= n; i += 16) {
		const uint8_t *c = code + 3 * i;
		uint8_t *d = data + i / 2 * 3;
		__m256i a = _mm256_loadu2_m128i((const void *)(c + 24),
						(const void *)c);
		__m256i b = _mm256_loadu2_m128i((const void *)(c + 32),
						(const void *)(c + 8));
		__m256i x = _mm256_or_si256(_mm256_shuffle_epi8(a, pick_a),
					    _mm256_shuffle_epi8(b, pick_b));

		x = _mm256_or_si256(
			_mm256_and_si256(x, lo12),
			_mm256_and_si256(_mm256_srli_epi32(x, 4), hi12));
		x = _mm256_shuffle_epi8(x, pack);
		_mm_storeu_si128((void *)d, _mm256_castsi256_si128(x));
		_mm_storeu_si128((void *)(d + 12),
				 _mm256_extracti128_si256(x, 1));
	}
	kvmem__ecc_portable[KVMEM_CODEC_GOLAY24].extract(
		code + 3 * i, data + i / 2 * 3, n - i);
}

/*
 * SECDED(72,64), 32 words (288 bytes) a step in two halves of 16, one per
 * 128-bit lane. The check byte of a word is the XOR over k of T_k(data byte
 * k), T_k linear: two nibble lookups in byte k's tables. VPSHUFB takes one
 * table for all the bytes of a lane, so the data is transposed first: the
 * data qwords of words i and i + 8 of a half share a lane, and four rounds
 * of unpacks (bytes, words, dwords, qwords) turn eight such vectors into
 * r[k], byte k of the half's 16 words in word order. Scan compares the
 * result with the stored check bytes, gathered from the half's nine
 * 16-byte blocks by one VPSHUFB each.
 */
#define SD_STEP 32
#define SD_HALF 144 /* bytes of 16 codewords */

struct sd_tables {
	__m256i lo[8], hi[8];
};

static void sd_tables(struct sd_tables *t)
{
	const struct kvmem__ecc_tables *e = kvmem__ecc_tables();
	int k;

	for (k = 0; k < 8; k++) {
		t->lo[k] = table16(e->secded_check[k]);
		t->hi[k] = table16(e->secded_hi[k]);
	}
}

ALWAYS_INLINE __m128i load2x64(const uint8_t *lo, const uint8_t *hi)
{
	__m128i v = _mm_loadl_epi64((const void *)lo);

	return _mm_castpd_si128(
		_mm_loadh_pd(_mm_castsi128_pd(v), (const double *)hi));
}

/* The check bytes of 32 words whose data qwords are at @p + @stride * w. */
ALWAYS_INLINE __m256i sd_checks(const struct sd_tables *t, const uint8_t *p,
				size_t stride)
{
	const __m256i low4 = _mm256_set1_epi8(0x0f);
	__m256i x[8], a[8], b[8], r[8], c;
	int i;

	for (i = 0; i < 8; i++)
		x[i] = _mm256_inserti128_si256(
			_mm256_castsi128_si256(
				load2x64(p + stride * i, p + stride * (i + 8))),
			load2x64(p + stride * (i + 16), p + stride * (i + 24)),
			1);
	/* a[i], a[i + 4]: words 2i, 2i + 1 and 2i + 8, 2i + 9, byte by byte */
	for (i = 0; i < 4; i++) {
		a[i] = _mm256_unpacklo_epi8(x[2 * i], x[2 * i + 1]);
		a[i + 4] = _mm256_unpackhi_epi8(x[2 * i], x[2 * i + 1]);
	}
	/* b[2i], b[2i + 1]: bytes 0-3 and 4-7 of four words */
	for (i = 0; i < 4; i++) {
		b[2 * i] = _mm256_unpacklo_epi16(a[2 * i], a[2 * i + 1]);
		b[2 * i + 1] = _mm256_unpackhi_epi16(a[2 * i], a[2 * i + 1]);
	}
	/* a[]: two bytes of eight words each; words 0-7 in 0-3, 8-15 in 4-7 */
	for (i = 0; i < 2; i++) {
		a[2 * i] = _mm256_unpacklo_epi32(b[i], b[i + 2]);
		a[2 * i + 1] = _mm256_unpackhi_epi32(b[i], b[i + 2]);
		a[2 * i + 4] = _mm256_unpacklo_epi32(b[i + 4], b[i + 6]);
		a[2 * i + 5] = _mm256_unpackhi_epi32(b[i + 4], b[i + 6]);
	}
	for (i = 0; i < 4; i++) {
		r[2 * i] = _mm256_unpacklo_epi64(a[i], a[i + 4]);
		r[2 * i + 1] = _mm256_unpackhi_epi64(a[i], a[i + 4]);
	}
	c = _mm256_setzero_si256();
	for (i = 0; i < 8; i++) {
		__m256i lo = _mm256_and_si256(r[i], low4);
		__m256i hi = _mm256_and_si256(_mm256_srli_epi16(r[i], 4), low4);

		c = _mm256_xor_si256(
			c, _mm256_xor_si256(_mm256_shuffle_epi8(t->lo[i], lo),
					    _mm256_shuffle_epi8(t->hi[i], hi)));
	}
	return c;
}

/* Byte w of a half's block j: the offset in it of word w's check byte. */
#define SD_AT(j, w) \
	((char)((9 * (w) + 8) >> 4 == (j) ? (9 * (w) + 8) & 15 : 0x80))
#define SD_GATHER(j)                                                  \
	_mm256_broadcastsi128_si256(_mm_setr_epi8(                    \
		SD_AT(j, 0), SD_AT(j, 1), SD_AT(j, 2), SD_AT(j, 3),   \
		SD_AT(j, 4), SD_AT(j, 5), SD_AT(j, 6), SD_AT(j, 7),   \
		SD_AT(j, 8), SD_AT(j, 9), SD_AT(j, 10), SD_AT(j, 11), \
		SD_AT(j, 12), SD_AT(j, 13), SD_AT(j, 14), SD_AT(j, 15)))

/* Block j of both halves of the 32 codewords at @p, picked by @m. */
ALWAYS_INLINE __m256i sd_pick(const uint8_t *p, int j, __m256i m)
{
	return _mm256_shuffle_epi8(
		_mm256_loadu2_m128i((const void *)(p + SD_HALF + 16 * j),
				    (const void *)(p + 16 * j)),
		m);
}

/* The stored check bytes of the 32 codewords at @p, in word order. */
ALWAYS_INLINE __m256i sd_stored(const uint8_t *p)
{
	__m256i s = _mm256_or_si256(sd_pick(p, 0, SD_GATHER(0)),
				    sd_pick(p, 1, SD_GATHER(1)));

	s = _mm256_or_si256(s, sd_pick(p, 2, SD_GATHER(2)));
	s = _mm256_or_si256(s, sd_pick(p, 3, SD_GATHER(3)));
	s = _mm256_or_si256(s, sd_pick(p, 4, SD_GATHER(4)));
	s = _mm256_or_si256(s, sd_pick(p, 5, SD_GATHER(5)));
	s = _mm256_or_si256(s, sd_pick(p, 6, SD_GATHER(6)));
	s = _mm256_or_si256(s, sd_pick(p, 7, SD_GATHER(7)));
	return _mm256_or_si256(s, sd_pick(p, 8, SD_GATHER(8)));
}

static size_t secded_scan(const uint8_t *code, size_t n)
{
	struct sd_tables t;
	size_t i = 0;

	if (n >= SD_STEP) {
		sd_tables(&t);
		for (; i + SD_STEP <= n; i += SD_STEP) {
			const uint8_t *p = code + 9 * i;
			__m256i syn = _mm256_xor_si256(sd_checks(&t, p, 9),
						       sd_stored(p));

			if (!_mm256_testz_si256(syn, syn))
				return i + first_nonzero8(syn);
		}
	}
	return i + kvmem__ecc_portable[KVMEM_CODEC_SECDED72].scan(code + 9 * i,
								  n - i);
}

static void secded_encode(const uint8_t *data, uint8_t *code, size_t n)
{
	struct sd_tables t;
	uint8_t chk[SD_STEP];
	uint64_t v;
	size_t i = 0;
	int w;

	if (n >= SD_STEP) {
		sd_tables(&t);
		for (; i + SD_STEP <= n; i += SD_STEP) {
			_mm256_storeu_si256((void *)chk,
					    sd_checks(&t, data + 8 * i, 8));
			for (w = 0; w < SD_STEP; w++) {
				memcpy(&v, data + 8 * (i + w), 8);
				memcpy(code + 9 * (i + w), &v, 8);
				code[9 * (i + w) + 8] = chk[w];
			}
		}
	}
	kvmem__ecc_portable[KVMEM_CODEC_SECDED72].encode(data + 8 * i,
							 code + 9 * i, n - i);
}

const struct kvmem__ecc_kernels kvmem__ecc_avx2[KVMEM_CODEC_NR] = {
	[KVMEM_CODEC_H74] = {
		.scan = h74_scan,
		.encode = h74_encode,
		.extract = nibble_extract,
	},
	[KVMEM_CODEC_H84] = {
		.scan = h84_scan,
		.encode = h84_encode,
		.extract = nibble_extract,
	},
	[KVMEM_CODEC_GOLAY24] = {
		.scan = golay_scan,
		.extract = golay_extract,
	},
	[KVMEM_CODEC_SECDED72] = {
		.scan = secded_scan,
		.encode = secded_encode,
	},
};
