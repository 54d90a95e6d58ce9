/* SPDX-License-Identifier: MIT */
/*
 * ecc_avx512.c - AVX-512 bulk codec kernels (built with AVX-512 F/BW/VL and
 * GFNI, reached only after a runtime check of the avx512 level)
 *
 * An h74/h84 syndrome is a linear map of the code byte over GF(2), which is
 * exactly what GF2P8AFFINEQB applies to each of 64 bytes at once: one
 * instruction gives 64 syndromes (see h74_gf and h84_gf in
 * kvmem__ecc_tables). The wider codes are sums of such maps, one per byte
 * of the word, with VPERMB/VPERMT2B moving the bytes into place. Kernels
 * not defined here come from the AVX2 level.
 *
 * Every kernel reads and writes exactly the bytes of its buffers: a ragged
 * end goes through the same code with masked loads and stores, and a
 * masked-off byte reads 0, which is part of a clean codeword.
 */
#include <immintrin.h>
#include <stdint.h>

#include "ecc_word.h"
#include "internal.h"

/* Bytes per scan block: 4 vectors OR-ed before one branch. */
#define BLOCK 256

static __m512i gf_syn(__m512i x, __m512i m)
{
	return _mm512_gf2p8affine_epi64_epi8(x, m, 0);
}

static size_t nibble_scan(uint64_t gf, const uint8_t *code, size_t n)
{
	const __m512i m = _mm512_set1_epi64((long long)gf);
	__mmask64 k;
	size_t i;

	for (i = 0; i + BLOCK <= n; i += BLOCK) {
		__m512i s0 = gf_syn(_mm512_loadu_si512(code + i), m);
		__m512i s1 = gf_syn(_mm512_loadu_si512(code + i + 64), m);
		__m512i s2 = gf_syn(_mm512_loadu_si512(code + i + 128), m);
		__m512i s3 = gf_syn(_mm512_loadu_si512(code + i + 192), m);

		if (!_mm512_test_epi8_mask(
			    _mm512_or_si512(_mm512_or_si512(s0, s1),
					    _mm512_or_si512(s2, s3)),
			    _mm512_set1_epi8(-1)))
			continue;
		break;
	}
	/* The rest, and the block that held a dirty word, 64 at a time; a
	 * masked-off byte reads 0, whose syndrome is 0. */
	for (; i < n; i += 64) {
		size_t left = n - i < 64 ? n - i : 64;
		__mmask64 valid = left == 64 ? ~0ull : (1ull << left) - 1;

		k = _mm512_test_epi8_mask(
			gf_syn(_mm512_maskz_loadu_epi8(valid, code + i), m),
			_mm512_set1_epi8(-1));
		if (k)
			return i + (size_t)__builtin_ctzll(k);
	}
	return n;
}

static size_t h74_scan(const uint8_t *code, size_t n)
{
	return nibble_scan(kvmem__ecc_tables()->h74_gf, code, n);
}

static size_t h84_scan(const uint8_t *code, size_t n)
{
	return nibble_scan(kvmem__ecc_tables()->h84_gf, code, n);
}

/* Index tables, byte o of each written out by the macro f(i, o). */
#define R8(f, i, o)                                                            \
	f(i, (o)), f(i, (o) + 1), f(i, (o) + 2), f(i, (o) + 3), f(i, (o) + 4), \
		f(i, (o) + 5), f(i, (o) + 6), f(i, (o) + 7)
#define R64(f, i)                                                              \
	{                                                                      \
		R8(f, i, 0), R8(f, i, 8), R8(f, i, 16), R8(f, i, 24),          \
			R8(f, i, 32), R8(f, i, 40), R8(f, i, 48), R8(f, i, 56) \
	}

/* A length that stands for "all of it": loads and stores unmasked. */
#define FULL SIZE_MAX

/* The bytes of [off, off + 64) below len. */
ALWAYS_INLINE __mmask64 span(size_t len, size_t off)
{
	if (len <= off)
		return 0;
	return len - off >= 64 ? ~0ull : (1ull << (len - off)) - 1;
}

ALWAYS_INLINE __m512i load64(const uint8_t *p, size_t len, size_t off)
{
	if (len == FULL)
		return _mm512_loadu_si512(p + off);
	return _mm512_maskz_loadu_epi8(span(len, off), p + off);
}

ALWAYS_INLINE void store64(uint8_t *p, size_t len, size_t off, __m512i v)
{
	if (len == FULL)
		_mm512_storeu_si512(p + off, v);
	else if (len > off)
		_mm512_mask_storeu_epi8(p + off, span(len, off), v);
}

ALWAYS_INLINE __m512i idx64(const uint8_t *t)
{
	return _mm512_loadu_si512(t);
}

/*
 * SECDED(72,64). The check byte of a word is the XOR over k of T_k(data
 * byte k), T_k linear (secded_check[k] in the tables): bit i of T_k(x) is
 * the parity of x and byte k of row i of H. As a GF2P8AFFINEQB matrix, byte
 * 7 - i is that byte of row i; SD_GF(k) builds it from ecc_word.h's rows at
 * compile time, which spares short calls the trip to kvmem__ecc_tables().
 *
 * A block is 64 words, 576 bytes, nine vectors v0..v8; group b, words
 * 8b..8b+7, lies in v_b and v_b+1 from byte 8b. One VPERMT2B gathers byte k
 * of the group's words into qword k, one GF2P8AFFINEQB with T_k in qword k
 * maps them, and the check bytes of the group are the XOR of its 8 qwords.
 * The 8 groups' XORs are folded together as a tree (sd_fold): one vector
 * holds the 64 check bytes, byte w that of word w. Compared with the stored
 * check bytes, gathered by five more permutes, that is 64 words' scan;
 * encode does the same from 8 data vectors and scatters data and check
 * bytes into the 9 code vectors, extract is 8 permutes.
 */
#define SD_WORDS 64

#define SD_GF_ROW(row, i, k) \
	((((row) >> (8 * (k))) & 0xffull) << (8 * (7 - (i))))
#define SD_GF(k)                                         \
	(long long)(SD_GF_ROW(KVMEM_SECDED72_M0, 0, k) | \
		    SD_GF_ROW(KVMEM_SECDED72_M1, 1, k) | \
		    SD_GF_ROW(KVMEM_SECDED72_M2, 2, k) | \
		    SD_GF_ROW(KVMEM_SECDED72_M3, 3, k) | \
		    SD_GF_ROW(KVMEM_SECDED72_M4, 4, k) | \
		    SD_GF_ROW(KVMEM_SECDED72_M5, 5, k) | \
		    SD_GF_ROW(KVMEM_SECDED72_M6, 6, k) | \
		    SD_GF_ROW(KVMEM_SECDED72_M7, 7, k))

ALWAYS_INLINE __m512i sd_matrices(void)
{
	return _mm512_setr_epi64(SD_GF(0), SD_GF(1), SD_GF(2), SD_GF(3),
				 SD_GF(4), SD_GF(5), SD_GF(6), SD_GF(7));
}

/*
 * Below this many words the portable kernels win: the vector code is a
 * chain of about 30 cycles however few words it has.
 */
#define SD_SHORT 4

/* Group b, byte 8k + j: byte k of word j, from the pair v_b, v_b+1. */
#define SD_GATHER(b, o) (8 * (b) + 9 * ((o) % 8) + (o) / 8)
/* Extract, group b, byte 8j + k: byte k of word j. */
#define SD_EXTRACT(b, o) (8 * (b) + 9 * ((o) / 8) + (o) % 8)
/* Encode, byte 8k + j: data byte k of word j. */
#define SD_TRANSPOSE(i, o) (8 * ((o) % 8) + (o) / 8)
/* The check byte of word o, in the 128-byte window v_2q, v_2q+1 it lies
 * in: words [0, 14) in window 0, [14, 28) in 1 and so on. */
#define SD_CHECK(i, o) ((9 * (o) + 8) % 128)
/* Encode, byte o of code vector i, at p = 64i + o: data byte p % 9 of word
 * p / 9 in the pair d_i-1, d_i (d0, d0 for i = 0, d7, d7 for i = 8), or
 * 0x80 | w for the check byte of word w. */
#define SD_P(i, o) (64 * (i) + (o))
#define SD_ENCODE(i, o)                                                \
	(SD_P(i, o) % 9 == 8 ? 0x80 | SD_P(i, o) / 9                   \
			     : 8 * (SD_P(i, o) / 9) + SD_P(i, o) % 9 - \
				       64 * ((i) ? (i)-1 : 0))

static const uint8_t sd_gather[8][64] = {
	R64(SD_GATHER, 0), R64(SD_GATHER, 1), R64(SD_GATHER, 2),
	R64(SD_GATHER, 3), R64(SD_GATHER, 4), R64(SD_GATHER, 5),
	R64(SD_GATHER, 6), R64(SD_GATHER, 7),
};
static const uint8_t sd_extract_idx[8][64] = {
	R64(SD_EXTRACT, 0), R64(SD_EXTRACT, 1), R64(SD_EXTRACT, 2),
	R64(SD_EXTRACT, 3), R64(SD_EXTRACT, 4), R64(SD_EXTRACT, 5),
	R64(SD_EXTRACT, 6), R64(SD_EXTRACT, 7),
};
static const uint8_t sd_transpose[64] = R64(SD_TRANSPOSE, 0);
static const uint8_t sd_check[64] = R64(SD_CHECK, 0);
static const uint8_t sd_encode_idx[9][64] = {
	R64(SD_ENCODE, 0), R64(SD_ENCODE, 1), R64(SD_ENCODE, 2),
	R64(SD_ENCODE, 3), R64(SD_ENCODE, 4), R64(SD_ENCODE, 5),
	R64(SD_ENCODE, 6), R64(SD_ENCODE, 7), R64(SD_ENCODE, 8),
};

/* Words [lo, hi) as bits. */
#define WORDS(lo, hi) \
	((((hi) < 64 ? 1ull << (hi) : 0) - 1) & ~((1ull << (lo)) - 1))

/*
 * The fold tree. Each step XORs pairs of partial sums of one group and
 * packs two vectors' worth into one: a blend picks half from each, a
 * shuffle brings the other halves to meet them.
 *
 * fold1(x, y): qwords 0-3 x_k ^ x_k+4, 4-7 y_k+4 ^ y_k.
 * fold2(Q(a, b), Q(c, d)): 128-bit lanes a, c, b, d, each two partials.
 * fold3(R, S): lane i holds R's lane i as qword 0, S's as qword 1.
 */
ALWAYS_INLINE __m512i fold1(__m512i x, __m512i y)
{
	return _mm512_xor_si512(_mm512_mask_blend_epi64(0xf0, x, y),
				_mm512_shuffle_i64x2(x, y, 0x4e));
}

ALWAYS_INLINE __m512i fold2(__m512i x, __m512i y)
{
	const __m512i swap = _mm512_setr_epi64(2, 3, 8, 9, 6, 7, 12, 13);

	return _mm512_xor_si512(_mm512_mask_blend_epi64(0xcc, x, y),
				_mm512_permutex2var_epi64(x, swap, y));
}

ALWAYS_INLINE __m512i fold3(__m512i x, __m512i y)
{
	return _mm512_xor_si512(_mm512_mask_blend_epi64(0xaa, x, y),
				_mm512_alignr_epi8(y, x, 8));
}

/* Group b's partial sums in g[b] -> the 64 sums, word order. */
ALWAYS_INLINE __m512i sd_fold(const __m512i *g)
{
	return fold3(fold2(fold1(g[0], g[4]), fold1(g[2], g[6])),
		     fold2(fold1(g[1], g[5]), fold1(g[3], g[7])));
}

/* Load the block at p, @len bytes of it (or FULL). */
ALWAYS_INLINE void sd_load(const uint8_t *p, size_t len, __m512i *v)
{
	int i;

#pragma GCC unroll 9
	for (i = 0; i < 9; i++)
		v[i] = load64(p, len, 64 * (size_t)i);
}

/* Bit w set iff word w of the block in v is not a codeword. */
ALWAYS_INLINE __mmask64 sd_dirty(const __m512i *v, __m512i m)
{
	const __m512i ci = idx64(sd_check);
	__m512i g[8], c;
	int b;

#pragma GCC unroll 8
	for (b = 0; b < 8; b++)
		g[b] = _mm512_gf2p8affine_epi64_epi8(
			_mm512_permutex2var_epi8(v[b], idx64(sd_gather[b]),
						 v[b + 1]),
			m, 0);
	c = _mm512_ternarylogic_epi64(
		_mm512_maskz_permutex2var_epi8(WORDS(0, 14), v[0], ci, v[1]),
		_mm512_maskz_permutex2var_epi8(WORDS(14, 28), v[2], ci, v[3]),
		_mm512_maskz_permutex2var_epi8(WORDS(28, 42), v[4], ci, v[5]),
		0xfe);
	c = _mm512_ternarylogic_epi64(
		c,
		_mm512_maskz_permutex2var_epi8(WORDS(42, 56), v[6], ci, v[7]),
		_mm512_maskz_permutexvar_epi8(WORDS(56, 64), ci, v[8]), 0xfe);
	return _mm512_cmpneq_epi8_mask(sd_fold(g), c);
}

static size_t secded_scan(const uint8_t *code, size_t n)
{
	const __m512i m = sd_matrices();
	__m512i v[9];
	__mmask64 d;
	size_t i;

	if (n < SD_SHORT)
		return kvmem__ecc_portable[KVMEM_CODEC_SECDED72].scan(code, n);

	for (i = 0; i + SD_WORDS <= n; i += SD_WORDS) {
		sd_load(code + 9 * i, FULL, v);
		d = sd_dirty(v, m);
		if (d)
			return i + (size_t)__builtin_ctzll(d);
	}
	if (i < n) {
		sd_load(code + 9 * i, 9 * (n - i), v);
		d = sd_dirty(v, m);
		if (d)
			return i + (size_t)__builtin_ctzll(d);
	}
	return n;
}

/* The data bytes of the block at code, @len of them (or FULL). */
ALWAYS_INLINE void sd_extract_block(const uint8_t *code, uint8_t *data,
				    size_t len)
{
	__m512i v[9];
	int b;

	sd_load(code, len == FULL ? FULL : len / 8 * 9, v);
#pragma GCC unroll 8
	for (b = 0; b < 8; b++)
		store64(data, len, 64 * (size_t)b,
			_mm512_permutex2var_epi8(v[b], idx64(sd_extract_idx[b]),
						 v[b + 1]));
}

static void secded_extract(const uint8_t *code, uint8_t *data, size_t n)
{
	size_t i;

	if (n < SD_SHORT) {
		kvmem__ecc_portable[KVMEM_CODEC_SECDED72].extract(code, data,
								  n);
		return;
	}

	for (i = 0; i + SD_WORDS <= n; i += SD_WORDS)
		sd_extract_block(code + 9 * i, data + 8 * i, FULL);
	if (i < n)
		sd_extract_block(code + 9 * i, data + 8 * i, 8 * (n - i));
}

/* Encode the block of data at @data, @len bytes of it (or FULL). */
ALWAYS_INLINE void sd_encode_block(const uint8_t *data, uint8_t *code,
				   size_t len, __m512i m)
{
	const __m512i tr = idx64(sd_transpose);
	size_t clen = len == FULL ? FULL : len / 8 * 9;
	__m512i d[8], g[8], c;
	int b, i;

#pragma GCC unroll 8
	for (b = 0; b < 8; b++) {
		d[b] = load64(data, len, 64 * (size_t)b);
		g[b] = _mm512_gf2p8affine_epi64_epi8(
			_mm512_permutexvar_epi8(tr, d[b]), m, 0);
	}
	c = sd_fold(g);
#pragma GCC unroll 9
	for (i = 0; i < 9; i++) {
		const __m512i x = idx64(sd_encode_idx[i]);
		__m512i o = _mm512_permutex2var_epi8(d[i ? i - 1 : 0], x,
						     d[i < 8 ? i : 7]);

		o = _mm512_mask_permutexvar_epi8(o, _mm512_movepi8_mask(x), x,
						 c);
		store64(code, clen, 64 * (size_t)i, o);
	}
}

static void secded_encode(const uint8_t *data, uint8_t *code, size_t n)
{
	const __m512i m = sd_matrices();
	size_t i;

	if (n < SD_SHORT) {
		kvmem__ecc_portable[KVMEM_CODEC_SECDED72].encode(data, code, n);
		return;
	}

	for (i = 0; i + SD_WORDS <= n; i += SD_WORDS)
		sd_encode_block(data + 8 * i, code + 9 * i, FULL, m);
	if (i < n)
		sd_encode_block(data + 8 * i, code + 9 * i, 8 * (n - i), m);
}

/*
 * Golay(24,12): the 12-bit syndrome of a word is the XOR over its three
 * bytes k of linear maps, golay_gf[k][0] giving syndrome bits 0-7 and
 * golay_gf[k][1] bits 8-11. A block is 64 words, 192 bytes, three vectors;
 * one VPERMT2B and one merging VPERMB gather byte k of all 64 words, word
 * order, and six GF2P8AFFINEQB give the syndromes of all of them.
 */
#define GL_WORDS 64

/* Byte k of word o: below 128 in the first two vectors, else (bit 7 set)
 * at its low 6 bits in the third. */
#define GL_GATHER(k, o) (3 * (o) + (k))

static const uint8_t gl_gather[3][64] = {
	R64(GL_GATHER, 0),
	R64(GL_GATHER, 1),
	R64(GL_GATHER, 2),
};

/* Bit w set iff word w of the block at p, @len bytes (or FULL), is dirty. */
ALWAYS_INLINE __mmask64 gl_dirty(const uint8_t *p, size_t len, const __m512i *m)
{
	const __m512i v0 = load64(p, len, 0), v1 = load64(p, len, 64);
	const __m512i v2 = load64(p, len, 128);
	__m512i lo[3], hi[3], s;
	int k;

#pragma GCC unroll 3
	for (k = 0; k < 3; k++) {
		const __m512i x = idx64(gl_gather[k]);
		__m512i b = _mm512_permutex2var_epi8(v0, x, v1);

		b = _mm512_mask_permutexvar_epi8(b, _mm512_movepi8_mask(x), x,
						 v2);
		lo[k] = _mm512_gf2p8affine_epi64_epi8(b, m[2 * k], 0);
		hi[k] = _mm512_gf2p8affine_epi64_epi8(b, m[2 * k + 1], 0);
	}
	s = _mm512_or_si512(
		_mm512_ternarylogic_epi64(lo[0], lo[1], lo[2], 0x96),
		_mm512_ternarylogic_epi64(hi[0], hi[1], hi[2], 0x96));
	return _mm512_test_epi8_mask(s, s);
}

static size_t golay_scan(const uint8_t *code, size_t n)
{
	const uint64_t *gf = &kvmem__ecc_tables()->golay_gf[0][0];
	__m512i m[6];
	__mmask64 d;
	size_t i;
	int k;

	for (k = 0; k < 6; k++)
		m[k] = _mm512_set1_epi64((long long)gf[k]);
	for (i = 0; i + GL_WORDS <= n; i += GL_WORDS) {
		d = gl_dirty(code + 3 * i, FULL, m);
		if (d)
			return i + (size_t)__builtin_ctzll(d);
	}
	if (i < n) {
		d = gl_dirty(code + 3 * i, 3 * (n - i), m);
		if (d)
			return i + (size_t)__builtin_ctzll(d);
	}
	return n;
}

/*
 * Golay extract: the 12 data bits of each word (its first byte and the low
 * nibble of its second), packed two words to three bytes. A block is 64
 * words: two VPERMT2B put the first two bytes of words 0-31 and 32-63 in
 * 16-bit lanes, a dword is then a pair (w0 | w1 << 16) and one bitwise
 * select makes it w0 | w1 << 12; two more permutes drop every fourth byte.
 */
/* Byte o of the lanes of words base.., as an index into the vector pair
 * starting at byte 2 * base of the block (v0 for words 0-31, v1 for 32-63). */
#define GL_LANE(base, o) (3 * ((base) + (o) / 2) + (o) % 2 - 2 * (base))
/* Output byte o of a block: pair o / 3, byte o % 3, in the first vector
 * (pairs 0-15) or, from index 64, the second. */
#define GL_OUT(p, b) ((p) < 16 ? 4 * (p) + (b) : 64 + 4 * ((p)-16) + (b))
#define GL_PACK(i, o) GL_OUT(((i) + (o)) / 3, ((i) + (o)) % 3)

static const uint8_t gl_lanes[2][64] = {
	R64(GL_LANE, 0),
	R64(GL_LANE, 32),
};
static const uint8_t gl_pack[2][64] = {
	R64(GL_PACK, 0),
	R64(GL_PACK, 64),
};

static void gl_extract_block(const uint8_t *code, uint8_t *data, size_t len,
			     size_t out)
{
	const __m512i v0 = load64(code, len, 0), v1 = load64(code, len, 64);
	const __m512i v2 = load64(code, len, 128);
	const __m512i keep = _mm512_set1_epi32(0x0fff0fff);
	const __m512i low = _mm512_set1_epi32(0xfff);
	__m512i w[2], r[2];
	int k;

	w[0] = _mm512_permutex2var_epi8(v0, idx64(gl_lanes[0]), v1);
	w[1] = _mm512_permutex2var_epi8(v1, idx64(gl_lanes[1]), v2);
	for (k = 0; k < 2; k++) {
		const __m512i x = _mm512_and_si512(w[k], keep);

		r[k] = _mm512_ternarylogic_epi32(low, x,
						 _mm512_srli_epi32(x, 4), 0xca);
	}
	store64(data, out, 0,
		_mm512_permutex2var_epi8(r[0], idx64(gl_pack[0]), r[1]));
	store64(data, out, 64,
		_mm512_permutexvar_epi8(idx64(gl_pack[1]), r[1]));
}

static void golay_extract(const uint8_t *code, uint8_t *data, size_t n)
{
	size_t i;

	for (i = 0; i + GL_WORDS <= n; i += GL_WORDS)
		gl_extract_block(code + 3 * i, data + 3 * i / 2, FULL, 96);
	if (i < n)
		gl_extract_block(code + 3 * i, data + 3 * i / 2, 3 * (n - i),
				 (3 * (n - i) + 1) / 2);
}

const struct kvmem__ecc_kernels kvmem__ecc_avx512[KVMEM_CODEC_NR] = {
	[KVMEM_CODEC_H74] = {
		.scan = h74_scan,
	},
	[KVMEM_CODEC_H84] = {
		.scan = h84_scan,
	},
	[KVMEM_CODEC_GOLAY24] = {
		.scan = golay_scan,
		.extract = golay_extract,
	},
	[KVMEM_CODEC_SECDED72] = {
		.scan = secded_scan,
		.encode = secded_encode,
		.extract = secded_extract,
	},
};
