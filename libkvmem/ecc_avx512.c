/*
 * ecc_avx512.c - AVX-512 bulk codec kernels (built with AVX-512 F/BW/VL and
 * GFNI, reached only after a runtime check of the avx512 level)
 *
 * An h74/h84 syndrome is a linear map of the code byte over GF(2), which is
 * exactly what GF2P8AFFINEQB applies to each of 64 bytes at once: one
 * instruction gives 64 syndromes (see h74_gf and h84_gf in
 * kvmem__ecc_tables). Kernels not defined here come from the AVX2 level.
 */
#include <immintrin.h>

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

const struct kvmem__ecc_kernels kvmem__ecc_avx512[KVMEM_CODEC_NR] = {
	[KVMEM_CODEC_H74] = {
		.scan = h74_scan,
	},
	[KVMEM_CODEC_H84] = {
		.scan = h84_scan,
	},
};
