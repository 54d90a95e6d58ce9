/* SPDX-License-Identifier: MIT */
/*
 * attend_avx512.c - attention kernels with AVX-512 (built with the avx512
 * level's flags, reached only after a runtime check of all of them)
 *
 * The same loops as attend_avx2.c, sixteen floats wide. An int4 value,
 * the low nibble of its byte (a codeword, or a nibble unpacked from data),
 * becomes a float in one VPERMPS: the instruction reads only the low four
 * bits of each index, so the parity bits above them need no masking. What
 * does not fill whole vectors goes to the AVX2 kernels.
 */
#include <immintrin.h>
#include <string.h>

#include "kvmem/quant.h"
#include "internal.h"

#define AVX2 kvmem__attn_avx2

/* Sixteen int4 values, the low nibbles of 16 bytes at @c, as floats. */
static __m512 nib16(__m128i b)
{
	const __m512 lut = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6,
					  -5, -4, -3, -2, -1);

	return _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(b), lut);
}

static __m512 cw16(const uint8_t *c)
{
	return nib16(_mm_loadu_si128((const void *)c));
}

static int vec_ok(unsigned int dim, unsigned int group)
{
	return dim % 16 == 0 && (group == 1 || group % 16 == 0);
}

/*
 * Scales for values i..i+15 of a row walked in steps of 16: one per value
 * (group 1, channel scales), or the group's, fetched when a group starts.
 */
struct scale_walk {
	const float *scales;
	unsigned int group, next, gi;
	__m512 cur;
};

static __m512 scale_at(struct scale_walk *w, unsigned int i)
{
	if (w->group == 1)
		return _mm512_loadu_ps(w->scales + i);
	if (i == w->next) {
		w->cur = _mm512_set1_ps(w->scales[w->gi++]);
		w->next += w->group;
	}
	return w->cur;
}

static void dequant_cw4(const uint8_t *code, unsigned int dim,
			unsigned int group, const float *scales,
			const float *levels, float *out)
{
	struct scale_walk w = { .scales = scales, .group = group };
	unsigned int i;

	if (!vec_ok(dim, group)) {
		AVX2.dequant_cw4(code, dim, group, scales, levels, out);
		return;
	}
	if (levels) {
		/* Sixteen levels: one permute looks all of them up. */
		const __m512 tab = _mm512_loadu_ps(levels);

		for (i = 0; i < dim; i += 16) {
			__m512i idx = _mm512_and_si512(
				_mm512_cvtepu8_epi32(_mm_loadu_si128(
					(const void *)(code + i))),
				_mm512_set1_epi32(0xf));

			_mm512_storeu_ps(
				out + i,
				_mm512_mul_ps(_mm512_permutexvar_ps(idx, tab),
					      scale_at(&w, i)));
		}
		return;
	}
	for (i = 0; i < dim; i += 16)
		_mm512_storeu_ps(out + i, _mm512_mul_ps(cw16(code + i),
							scale_at(&w, i)));
}

/* attend_avx2.c's fp8_halves() for sixteen codes widened to 16 bits. */
static __m256i fp8_halves(__m256i w)
{
	const __m256i mag = _mm256_slli_epi16(
		_mm256_and_si256(w, _mm256_set1_epi16(0x7f)), 7);
	const __m256i nan = _mm256_and_si256(
		_mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7f << 7)),
		_mm256_set1_epi16(0x7c00));

	return _mm256_or_si256(
		_mm256_or_si256(mag, nan),
		_mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)),
				  8));
}

/* attend_avx2.c's fp8_halves_num() for sixteen codes widened to 16 bits. */
static __m256i fp8_halves_num(__m256i w)
{
	return _mm256_slli_epi16(
		_mm256_add_epi16(w,
				 _mm256_and_si256(w, _mm256_set1_epi16(0x80))),
		7);
}

static void dequant(int fmt, const uint8_t *data, unsigned int dim,
		    unsigned int group, const float *scales, float *out)
{
	const __m128i m = _mm_set1_epi8(0x0f);
	struct scale_walk w = { .scales = scales, .group = group };
	unsigned int i;
	__m128i b;

	if (fmt == KVMEM_FMT_FP16 && dim % 16 == 0) {
		for (i = 0; i < dim; i += 16)
			_mm512_storeu_ps(out + i,
					 _mm512_cvtph_ps(_mm256_loadu_si256((
						 const void *)(data + 2 * i))));
		return;
	}
	/* int2 and the lm formats: AVX2's (table lookups), or the
	 * portable row. */
	if (!vec_ok(dim, group) ||
	    (fmt != KVMEM_FMT_INT8 && fmt != KVMEM_FMT_INT4 &&
	     fmt != KVMEM_FMT_FP8)) {
		AVX2.dequant(fmt, data, dim, group, scales, out);
		return;
	}
	for (i = 0; i < dim; i += 16) {
		__m512 x;

		if (fmt == KVMEM_FMT_FP8) {
			/* As attend_avx2.c's fp8x8(), sixteen wide. */
			b = _mm_loadu_si128((const void *)(data + i));
			x = _mm512_cvtph_ps(
				fp8_halves(_mm256_cvtepu8_epi16(b)));
			_mm512_storeu_ps(
				out + i,
				_mm512_mul_ps(
					x,
					_mm512_mul_ps(scale_at(&w, i),
						      _mm512_set1_ps(256.0f))));
			continue;
		}
		if (fmt == KVMEM_FMT_INT8) {
			b = _mm_loadu_si128((const void *)(data + i));
			x = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
		} else {
			/* int4, low nibble first */
			b = _mm_loadl_epi64((const void *)(data + i / 2));
			x = nib16(_mm_unpacklo_epi8(
				_mm_and_si128(b, m),
				_mm_and_si128(_mm_srli_epi16(b, 4), m)));
		}
		_mm512_storeu_ps(out + i, _mm512_mul_ps(x, scale_at(&w, i)));
	}
}

/* The four horizontal sums of a0..a3, in lanes 0..3. */
static __m128 hsum4(__m512 a0, __m512 a1, __m512 a2, __m512 a3)
{
	/* Per 128-bit lane: {a0, a1, a0, a1} partial sums, then {a0..a3}. */
	__m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1),
				  _mm512_unpackhi_ps(a0, a1));
	__m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3),
				  _mm512_unpackhi_ps(a2, a3));
	__m512 x = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, 0x44),
				 _mm512_shuffle_ps(ab, cd, 0xee));
	__m256 y = _mm256_add_ps(_mm512_castps512_ps256(x),
				 _mm256_castpd_ps(_mm512_extractf64x4_pd(
					 _mm512_castps_pd(x), 1)));

	return _mm_add_ps(_mm256_castps256_ps128(y),
			  _mm256_extractf128_ps(y, 1));
}

/* Row t's scores of @NB heads from their sums @a: s[j * sn] = scale * a[j]
 * summed across. */
static inline __attribute__((always_inline)) void
row_scores(const __m512 a[8], unsigned int NB, float scale, float *s,
	   unsigned int sn)
{
	float r[8];
	unsigned int j;

	if (NB < 4) {
		s[0] = scale * _mm512_reduce_add_ps(a[0]);
		return;
	}
#pragma GCC unroll 2
	for (j = 0; j < NB; j += 4)
		_mm_storeu_ps(r + j, _mm_mul_ps(hsum4(a[j], a[j + 1], a[j + 2],
						      a[j + 3]),
						_mm_set1_ps(scale)));
#pragma GCC unroll 8
	for (j = 0; j < NB; j++)
		s[(size_t)j * sn] = r[j];
}

static void scores(const float *q, unsigned int ng, const float *k,
		   unsigned int n, unsigned int dim, float scale, float *s)
{
	unsigned int g = 0, t, d;

	if (dim % 16) {
		AVX2.scores(q, ng, k, n, dim, scale, s);
		return;
	}
	/* Four query heads share each load of a key row. */
	for (; g + 4 <= ng; g += 4) {
		const float *q0 = q + (size_t)g * dim;

		for (t = 0; t < n; t++) {
			const float *kt = k + (size_t)t * dim;
			__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0,
			       a3 = a0;
			float r[4];

			for (d = 0; d < dim; d += 16) {
				__m512 kv = _mm512_loadu_ps(kt + d);

				a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + d),
						     kv, a0);
				a1 = _mm512_fmadd_ps(
					_mm512_loadu_ps(q0 + dim + d), kv, a1);
				a2 = _mm512_fmadd_ps(
					_mm512_loadu_ps(q0 + 2 * dim + d), kv,
					a2);
				a3 = _mm512_fmadd_ps(
					_mm512_loadu_ps(q0 + 3 * dim + d), kv,
					a3);
			}
			_mm_storeu_ps(r, _mm_mul_ps(hsum4(a0, a1, a2, a3),
						    _mm_set1_ps(scale)));
			s[(size_t)g * n + t] = r[0];
			s[(size_t)(g + 1) * n + t] = r[1];
			s[(size_t)(g + 2) * n + t] = r[2];
			s[(size_t)(g + 3) * n + t] = r[3];
		}
	}
	for (; g < ng; g++)
		for (t = 0; t < n; t++) {
			__m512 a = _mm512_setzero_ps();

			for (d = 0; d < dim; d += 16)
				a = _mm512_fmadd_ps(
					_mm512_loadu_ps(q + (size_t)g * dim +
							d),
					_mm512_loadu_ps(k + (size_t)t * dim +
							d),
					a);
			s[(size_t)g * n + t] = scale * _mm512_reduce_add_ps(a);
		}
}

/*
 * The four accumulator vectors of @NB heads for acc[g + j][d..d+64): loaded,
 * given one row of V (@x, 64 floats) weighted by p[g + j][t], stored.
 */
static inline __attribute__((always_inline)) void
acc_load(__m512 a[4][4], unsigned int NB, const float *acc, unsigned int dim,
	 unsigned int d)
{
	unsigned int j, k;

#pragma GCC unroll 4
	for (j = 0; j < NB; j++)
#pragma GCC unroll 4
		for (k = 0; k < 4; k++)
			a[j][k] = _mm512_loadu_ps(acc + (size_t)j * dim + d +
						  16 * k);
}

static inline __attribute__((always_inline)) void
acc_row(__m512 a[4][4], unsigned int NB, const float *p, unsigned int pn,
	unsigned int t, const __m512 x[4])
{
	unsigned int j, k;

#pragma GCC unroll 4
	for (j = 0; j < NB; j++) {
		__m512 w = _mm512_set1_ps(p[(size_t)j * pn + t]);

#pragma GCC unroll 4
		for (k = 0; k < 4; k++)
			a[j][k] = _mm512_fmadd_ps(w, x[k], a[j][k]);
	}
}

static inline __attribute__((always_inline)) void
acc_store(__m512 a[4][4], unsigned int NB, float *acc, unsigned int dim,
	  unsigned int d)
{
	unsigned int j, k;

#pragma GCC unroll 4
	for (j = 0; j < NB; j++)
#pragma GCC unroll 4
		for (k = 0; k < 4; k++)
			_mm512_storeu_ps(acc + (size_t)j * dim + d + 16 * k,
					 a[j][k]);
}

/*
 * acc[g + j][d..d+64) += sum_t p[g + j][t] v[t][d..] for @NB (1 or 4)
 * heads: each V load feeds all of them.
 */
static inline __attribute__((always_inline)) void
accum_nb(const float *p, unsigned int NB, const float *v, unsigned int n,
	 unsigned int dim, unsigned int d, float *acc)
{
	__m512 a[4][4];
	unsigned int t, k;

	acc_load(a, NB, acc, dim, d);
	for (t = 0; t < n; t++) {
		const float *vt = v + (size_t)t * dim + d;
		__m512 x[4];

#pragma GCC unroll 4
		for (k = 0; k < 4; k++)
			x[k] = _mm512_loadu_ps(vt + 16 * k);
		acc_row(a, NB, p, n, t, x);
	}
	acc_store(a, NB, acc, dim, d);
}

static void accum(const float *p, unsigned int ng, const float *v,
		  unsigned int n, unsigned int dim, float *acc)
{
	unsigned int g = 0, d;

	if (dim % 64) {
		AVX2.accum(p, ng, v, n, dim, acc);
		return;
	}
	for (; g + 4 <= ng; g += 4)
		for (d = 0; d < dim; d += 64)
			accum_nb(p + (size_t)g * n, 4, v, n, dim, d,
				 acc + (size_t)g * dim);
	for (; g < ng; g++)
		for (d = 0; d < dim; d += 64)
			accum_nb(p + (size_t)g * n, 1, v, n, dim, d,
				 acc + (size_t)g * dim);
}

/*
 * Sixteen values at @c, one a byte: int4 in the low nibble, the levels the
 * nibbles index (@lv: lm, one permute of all sixteen), or with @B8 int8
 * values (KVMEM_FMT_INT8) or E4M3 codes (KVMEM_FMT_FP8, none the NaN code,
 * which kvmem__page_rows_b8() keeps from these kernels: each its number,
 * fp8_halves_num()'s FP16 times 256, exact, so that times its scale it is
 * dequant()'s product).
 */
static inline __attribute__((always_inline)) __m512
val16(const uint8_t *c, const int B8, const float *lv)
{
	const __m128i b = _mm_loadu_si128((const void *)c);

	if (!B8 && lv)
		return _mm512_permutexvar_ps(
			_mm512_and_si512(_mm512_cvtepu8_epi32(b),
					 _mm512_set1_epi32(0xf)),
			_mm512_loadu_ps(lv));
	if (B8 == KVMEM_FMT_FP8)
		return _mm512_mul_ps(_mm512_cvtph_ps(fp8_halves_num(
					     _mm256_cvtepu8_epi16(b))),
				     _mm512_set1_ps(256.0f));
	if (B8)
		return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
	return cw16(c);
}

/*
 * Scores of @NB (1, 4 or 8) query heads over rows of int4 codewords (or of
 * values a byte, @B8): each row is decoded and scaled once, into the values
 * kvmem__page_rows() would give, and dotted with every head. @DIM and
 * @GROUP are literals where the caller knows them, so that the loop over a
 * row unrolls (0 for channel scales, one per value).
 */
static inline __attribute__((always_inline)) void
scores_cw4_nb(const float *q, unsigned int NB, const uint8_t *code,
	      size_t stride, unsigned int n, unsigned int DIM,
	      unsigned int GROUP, const float *scales, size_t sstride,
	      float scale, float *s, unsigned int sn, const int B8,
	      const float *lv)
{
	unsigned int t, d, j;

	for (t = 0; t < n; t++) {
		const uint8_t *c = code + t * stride;
		const float *sc = scales + t * sstride;
		__m512 a[8];

#pragma GCC unroll 8
		for (j = 0; j < NB; j++)
			a[j] = _mm512_setzero_ps();
#pragma GCC unroll 16
		for (d = 0; d < DIM; d += 16) {
			__m512 kv = _mm512_mul_ps(
				val16(c + d, B8, lv),
				GROUP ? _mm512_set1_ps(sc[d / GROUP])
				      : _mm512_loadu_ps(sc + d));

#pragma GCC unroll 8
			for (j = 0; j < NB; j++)
				a[j] = _mm512_fmadd_ps(
					_mm512_loadu_ps(q + j * DIM + d), kv,
					a[j]);
		}
		row_scores(a, NB, scale, s + t, sn);
	}
}

static inline __attribute__((always_inline)) void
scores_vals(const float *q, unsigned int ng, const uint8_t *code, size_t stride,
	    unsigned int n, unsigned int dim, unsigned int group,
	    const float *scales, size_t sstride, float scale, float *s,
	    unsigned int ld, const int B8, const float *lv)
{
	unsigned int g = 0;

	/* Literal arguments: each call is its own specialised copy. Eight
	 * heads a pass where there are (GQA 8, several queries) decode each
	 * row half as often; a row's sums are the same either way. */
	for (; g + 8 <= ng; g += 8) {
		const float *qg = q + (size_t)g * dim;
		float *sg = s + (size_t)g * ld;

		if (dim == 128 && group == 32)
			scores_cw4_nb(qg, 8, code, stride, n, 128, 32, scales,
				      sstride, scale, sg, ld, B8, lv);
		else
			scores_cw4_nb(qg, 8, code, stride, n, dim,
				      group == 1 ? 0 : group, scales, sstride,
				      scale, sg, ld, B8, lv);
	}
	for (; g + 4 <= ng; g += 4) {
		const float *qg = q + (size_t)g * dim;
		float *sg = s + (size_t)g * ld;

		if (dim == 128 && group == 32)
			scores_cw4_nb(qg, 4, code, stride, n, 128, 32, scales,
				      sstride, scale, sg, ld, B8, lv);
		else if (dim == 128 && group == 1)
			scores_cw4_nb(qg, 4, code, stride, n, 128, 0, scales,
				      sstride, scale, sg, ld, B8, lv);
		else if (group == 1)
			scores_cw4_nb(qg, 4, code, stride, n, dim, 0, scales,
				      sstride, scale, sg, ld, B8, lv);
		else
			scores_cw4_nb(qg, 4, code, stride, n, dim, group,
				      scales, sstride, scale, sg, ld, B8, lv);
	}
	for (; g < ng; g++)
		scores_cw4_nb(q + (size_t)g * dim, 1, code, stride, n, dim,
			      group == 1 ? 0 : group, scales, sstride, scale,
			      s + (size_t)g * ld, ld, B8, lv);
}

static void scores_cw4(const float *q, unsigned int ng, const uint8_t *code,
		       size_t stride, unsigned int n, unsigned int dim,
		       unsigned int group, const float *scales, size_t sstride,
		       float scale, float *s, unsigned int ld,
		       const float *levels)
{
	if (!vec_ok(dim, group))
		AVX2.scores_cw4(q, ng, code, stride, n, dim, group, scales,
				sstride, scale, s, ld, levels);
	else
		scores_vals(q, ng, code, stride, n, dim, group, scales, sstride,
			    scale, s, ld, 0, levels);
}

static void scores_b8(const float *q, unsigned int ng, const uint8_t *code,
		      size_t stride, unsigned int n, unsigned int dim,
		      unsigned int group, const float *scales, size_t sstride,
		      float scale, float *s, unsigned int ld, int fmt)
{
	if (!vec_ok(dim, group))
		kvmem__attn_portable.scores_b8(q, ng, code, stride, n, dim,
					       group, scales, sstride, scale, s,
					       ld, fmt);
	else if (fmt == KVMEM_FMT_FP8)
		scores_vals(q, ng, code, stride, n, dim, group, scales, sstride,
			    scale, s, ld, KVMEM_FMT_FP8, NULL);
	else
		scores_vals(q, ng, code, stride, n, dim, group, scales, sstride,
			    scale, s, ld, KVMEM_FMT_INT8, NULL);
}

/*
 * Values d..d+16 of a V row at @c (int4 codewords, or int8 values with
 * @B8) times their scales @sc: per channel with @CHAN, else per group.
 */
static inline __attribute__((always_inline)) __m512
vscaled16(const uint8_t *c, const float *sc, unsigned int d, unsigned int group,
	  const int CHAN, const int B8, const float *lv)
{
	return _mm512_mul_ps(val16(c, B8, lv),
			     CHAN ? _mm512_loadu_ps(sc + d)
				  : _mm512_set1_ps(sc[d / group]));
}

/*
 * acc[g + j][d..d+64) += sum_t p[g + j][t] * v[t][d..] for @NB (1 or 4)
 * heads, v read from int4 codewords (or values a byte, @B8) with its scales
 * applied once for all heads.
 */
static inline __attribute__((always_inline)) void
accum_cw4_nb(const float *p, unsigned int NB, const uint8_t *code,
	     size_t stride, unsigned int n, unsigned int dim,
	     unsigned int group, const int CHAN, const float *scales,
	     size_t sstride, unsigned int d, float *acc, unsigned int pn,
	     const int B8, const float *lv)
{
	__m512 a[4][4];
	unsigned int t, k;

	acc_load(a, NB, acc, dim, d);
	for (t = 0; t < n; t++) {
		const uint8_t *c = code + t * stride + d;
		const float *sc = scales + t * sstride;
		__m512 v[4];

#pragma GCC unroll 4
		for (k = 0; k < 4; k++)
			v[k] = vscaled16(c + 16 * k, sc, d + 16 * k, group,
					 CHAN, B8, lv);
		acc_row(a, NB, p, pn, t, v);
	}
	acc_store(a, NB, acc, dim, d);
}

/*
 * acc[g + j][d..d+32) += sum_t p[g + j][t] * v[t][d..] for eight heads:
 * the same sums as accum_cw4_nb(), each V row decoded once for the eight.
 */
static inline __attribute__((always_inline)) void
accum8_nb(const float *p, const uint8_t *code, size_t stride, unsigned int n,
	  unsigned int dim, unsigned int group, const int CHAN,
	  const float *scales, size_t sstride, unsigned int d, float *acc,
	  unsigned int pn, const int B8, const float *lv)
{
	__m512 a[8][2];
	unsigned int t, j, k;

#pragma GCC unroll 8
	for (j = 0; j < 8; j++)
#pragma GCC unroll 2
		for (k = 0; k < 2; k++)
			a[j][k] = _mm512_loadu_ps(acc + (size_t)j * dim + d +
						  16 * k);
	for (t = 0; t < n; t++) {
		const uint8_t *c = code + t * stride + d;
		const float *sc = scales + t * sstride;
		__m512 v[2];

#pragma GCC unroll 2
		for (k = 0; k < 2; k++)
			v[k] = vscaled16(c + 16 * k, sc, d + 16 * k, group,
					 CHAN, B8, lv);
#pragma GCC unroll 8
		for (j = 0; j < 8; j++) {
			__m512 w = _mm512_set1_ps(p[(size_t)j * pn + t]);

#pragma GCC unroll 2
			for (k = 0; k < 2; k++)
				a[j][k] = _mm512_fmadd_ps(w, v[k], a[j][k]);
		}
	}
#pragma GCC unroll 8
	for (j = 0; j < 8; j++)
#pragma GCC unroll 2
		for (k = 0; k < 2; k++)
			_mm512_storeu_ps(acc + (size_t)j * dim + d + 16 * k,
					 a[j][k]);
}

static int accum_ok(unsigned int dim, unsigned int group)
{
	return dim % 64 == 0 && (group == 1 || group % 16 == 0);
}

static inline __attribute__((always_inline)) void
accum_vals(const float *p, unsigned int ng, const uint8_t *code, size_t stride,
	   unsigned int n, unsigned int dim, unsigned int group,
	   const float *scales, size_t sstride, float *acc, unsigned int ld,
	   const int B8, const float *lv)
{
	unsigned int g = 0, d;

	for (; g + 8 <= ng; g += 8)
		for (d = 0; d < dim; d += 32)
			if (group == 1)
				accum8_nb(p + (size_t)g * ld, code, stride, n,
					  dim, 1, 1, scales, sstride, d,
					  acc + (size_t)g * dim, ld, B8, lv);
			else
				accum8_nb(p + (size_t)g * ld, code, stride, n,
					  dim, group, 0, scales, sstride, d,
					  acc + (size_t)g * dim, ld, B8, lv);
	for (; g + 4 <= ng; g += 4)
		for (d = 0; d < dim; d += 64)
			if (group == 1)
				accum_cw4_nb(p + (size_t)g * ld, 4, code,
					     stride, n, dim, 1, 1, scales,
					     sstride, d, acc + (size_t)g * dim,
					     ld, B8, lv);
			else
				accum_cw4_nb(p + (size_t)g * ld, 4, code,
					     stride, n, dim, group, 0, scales,
					     sstride, d, acc + (size_t)g * dim,
					     ld, B8, lv);
	for (; g < ng; g++)
		for (d = 0; d < dim; d += 64)
			accum_cw4_nb(p + (size_t)g * ld, 1, code, stride, n,
				     dim, group, group == 1, scales, sstride, d,
				     acc + (size_t)g * dim, ld, B8, lv);
}

static void accum_cw4(const float *p, unsigned int ng, const uint8_t *code,
		      size_t stride, unsigned int n, unsigned int dim,
		      unsigned int group, const float *scales, size_t sstride,
		      float *acc, unsigned int ld, const float *levels)
{
	if (!accum_ok(dim, group))
		AVX2.accum_cw4(p, ng, code, stride, n, dim, group, scales,
			       sstride, acc, ld, levels);
	else
		accum_vals(p, ng, code, stride, n, dim, group, scales, sstride,
			   acc, ld, 0, levels);
}

static void accum_b8(const float *p, unsigned int ng, const uint8_t *code,
		     size_t stride, unsigned int n, unsigned int dim,
		     unsigned int group, const float *scales, size_t sstride,
		     float *acc, unsigned int ld, int fmt)
{
	if (!accum_ok(dim, group))
		kvmem__attn_portable.accum_b8(p, ng, code, stride, n, dim,
					      group, scales, sstride, acc, ld,
					      fmt);
	else if (fmt == KVMEM_FMT_FP8)
		accum_vals(p, ng, code, stride, n, dim, group, scales, sstride,
			   acc, ld, KVMEM_FMT_FP8, NULL);
	else
		accum_vals(p, ng, code, stride, n, dim, group, scales, sstride,
			   acc, ld, KVMEM_FMT_INT8, NULL);
}

/* Sixteen values of a vq2 row: the entries of the four indices at @c. */
static inline __attribute__((always_inline)) __m512 vq16(const uint8_t *c,
							 const float *book)
{
	__m512 v = _mm512_castps128_ps512(_mm_loadu_ps(book + 4 * c[0]));

	v = _mm512_insertf32x4(v, _mm_loadu_ps(book + 4 * c[1]), 1);
	v = _mm512_insertf32x4(v, _mm_loadu_ps(book + 4 * c[2]), 2);
	return _mm512_insertf32x4(v, _mm_loadu_ps(book + 4 * c[3]), 3);
}

/*
 * Scores of @NB (1, 4 or 8) query heads over vq2 rows, each row's values
 * looked up once for all of them (@DIM a literal where the caller knows
 * it).
 */
static inline __attribute__((always_inline)) void
scores_vq_nb(const float *q, unsigned int NB, const uint8_t *idx, size_t stride,
	     unsigned int n, unsigned int DIM, const float *book, float scale,
	     float *s, unsigned int sn)
{
	unsigned int t, d, j;

	for (t = 0; t < n; t++) {
		const uint8_t *c = idx + t * stride;
		__m512 a[8];

#pragma GCC unroll 8
		for (j = 0; j < NB; j++)
			a[j] = _mm512_setzero_ps();
#pragma GCC unroll 8
		for (d = 0; d < DIM; d += 16) {
			__m512 kv = vq16(c + d / 4, book);

#pragma GCC unroll 8
			for (j = 0; j < NB; j++)
				a[j] = _mm512_fmadd_ps(
					_mm512_loadu_ps(q + j * DIM + d), kv,
					a[j]);
		}
		row_scores(a, NB, scale, s + t, sn);
	}
}

static void scores_vq(const float *q, unsigned int ng, const uint8_t *idx,
		      size_t stride, unsigned int n, unsigned int dim,
		      const float *book, float scale, float *s, unsigned int ld)
{
	unsigned int g = 0;

	if (dim % 16) {
		kvmem__attn_portable.scores_vq(q, ng, idx, stride, n, dim, book,
					       scale, s, ld);
		return;
	}
	for (; g + 8 <= ng; g += 8)
		scores_vq_nb(q + (size_t)g * dim, 8, idx, stride, n, dim, book,
			     scale, s + (size_t)g * ld, ld);
	for (; g + 4 <= ng; g += 4)
		if (dim == 128)
			scores_vq_nb(q + (size_t)g * dim, 4, idx, stride, n,
				     128, book, scale, s + (size_t)g * ld, ld);
		else
			scores_vq_nb(q + (size_t)g * dim, 4, idx, stride, n,
				     dim, book, scale, s + (size_t)g * ld, ld);
	for (; g < ng; g++)
		scores_vq_nb(q + (size_t)g * dim, 1, idx, stride, n, dim, book,
			     scale, s + (size_t)g * ld, ld);
}

/*
 * acc[g + j][d..d+64) += sum_t p[g + j][t] * v[t][d..] for @NB (1 or 4)
 * heads, v looked up from vq2 rows once for all of them.
 */
static inline __attribute__((always_inline)) void
accum_vq_nb(const float *p, unsigned int NB, const uint8_t *idx, size_t stride,
	    unsigned int n, unsigned int dim, const float *book, unsigned int d,
	    float *acc, unsigned int pn)
{
	__m512 a[4][4];
	unsigned int t, k;

	acc_load(a, NB, acc, dim, d);
	for (t = 0; t < n; t++) {
		const uint8_t *c = idx + t * stride + d / 4;
		__m512 v[4];

#pragma GCC unroll 4
		for (k = 0; k < 4; k++)
			v[k] = vq16(c + 4 * k, book);
		acc_row(a, NB, p, pn, t, v);
	}
	acc_store(a, NB, acc, dim, d);
}

static void accum_vq(const float *p, unsigned int ng, const uint8_t *idx,
		     size_t stride, unsigned int n, unsigned int dim,
		     const float *book, float *acc, unsigned int ld)
{
	unsigned int g = 0, d;

	if (dim % 64) {
		kvmem__attn_portable.accum_vq(p, ng, idx, stride, n, dim, book,
					      acc, ld);
		return;
	}
	for (; g + 4 <= ng; g += 4)
		for (d = 0; d < dim; d += 64)
			accum_vq_nb(p + (size_t)g * ld, 4, idx, stride, n, dim,
				    book, d, acc + (size_t)g * dim, ld);
	for (; g < ng; g++)
		for (d = 0; d < dim; d += 64)
			accum_vq_nb(p + (size_t)g * ld, 1, idx, stride, n, dim,
				    book, d, acc + (size_t)g * dim, ld);
}

/*
 * Golay words to one int4 value per byte. Word w's bytes b0 b1 b2 hold
 * values b0 & 15, b0 >> 4 and b1 & 15, so value i comes from byte i - (i %
 * 3 != 0), shifted down a nibble where i % 3 == 1: one VPERMB, a shift and
 * a blend for 63 values (21 words), input and output in step.
 */
static void golay_nibbles(const uint8_t *code, size_t code_bytes,
			  unsigned int nvals, uint8_t *out)
{
	static const uint8_t pick[64] = {
		0,  0,	1,  3,	3,  4,	6,  6,	7,  9,	9,  10, 12, 12, 13, 15,
		15, 16, 18, 18, 19, 21, 21, 22, 24, 24, 25, 27, 27, 28, 30, 30,
		31, 33, 33, 34, 36, 36, 37, 39, 39, 40, 42, 42, 43, 45, 45, 46,
		48, 48, 49, 51, 51, 52, 54, 54, 55, 57, 57, 58, 60, 60, 61, 63,
	};
	const __mmask64 hi = 0x2492492492492492ull; /* i % 3 == 1 */
	const __m512i lo4 = _mm512_set1_epi8(0x0f);
	const __m512i idx = _mm512_loadu_si512(pick);
	unsigned int i;

	for (i = 0; i < nvals; i += 63) {
		size_t in = code_bytes - i < 64 ? code_bytes - i : 64;
		unsigned int n = nvals - i < 63 ? nvals - i : 63;
		__m512i x = _mm512_maskz_loadu_epi8(
			in == 64 ? ~0ull : (1ull << in) - 1, code + i);
		__m512i y = _mm512_permutexvar_epi8(idx, x);

		y = _mm512_mask_blend_epi8(hi, y, _mm512_srli_epi16(y, 4));
		_mm512_mask_storeu_epi8(out + i, (1ull << n) - 1,
					_mm512_and_si512(y, lo4));
	}
}

/* kvmem__expf() of sixteen values at once. */
static __m512 exp16(__m512 v)
{
	const __mmask16 under =
		_mm512_cmp_ps_mask(v, _mm512_set1_ps(-87.0f), _CMP_LT_OQ);
	__m512 nf = _mm512_roundscale_ps(
		_mm512_mul_ps(v, _mm512_set1_ps(1.44269504f)),
		_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(0.693359375f), v);
	__m512 y;
	__m512i e;

	r = _mm512_fmadd_ps(nf, _mm512_set1_ps(2.12194440e-4f), r);
	y = _mm512_set1_ps(1.9875691500e-4f);
	y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
	y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
	y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
	y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
	y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
	y = _mm512_fmadd_ps(_mm512_mul_ps(y, r), r,
			    _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
	e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(nf),
					       _mm512_set1_epi32(127)),
			      23);
	return _mm512_maskz_mul_ps((__mmask16)~under, y,
				   _mm512_castsi512_ps(e));
}

static void rescale(float *x, unsigned int n, float f)
{
	const __m512 fv = _mm512_set1_ps(f);
	unsigned int i;

	for (i = 0; i < n; i += 16) {
		__mmask16 in = n - i >= 16 ? 0xffff : (1u << (n - i)) - 1;

		_mm512_mask_storeu_ps(
			x + i, in,
			_mm512_mul_ps(_mm512_maskz_loadu_ps(in, x + i), fv));
	}
}

static float softmax(float *x, unsigned int n, float *m)
{
	__m512 mv = _mm512_set1_ps(*m), sv = _mm512_setzero_ps();
	float mx, sum;
	unsigned int i;

	for (i = 0; i + 16 <= n; i += 16)
		mv = _mm512_max_ps(mv, _mm512_loadu_ps(x + i));
	mx = _mm512_reduce_max_ps(mv);
	for (; i < n; i++)
		if (x[i] > mx)
			mx = x[i];
	mv = _mm512_set1_ps(mx);
	for (i = 0; i + 16 <= n; i += 16) {
		__m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv));

		_mm512_storeu_ps(x + i, e);
		sv = _mm512_add_ps(sv, e);
	}
	sum = _mm512_reduce_add_ps(sv);
	for (; i < n; i++) {
		x[i] = kvmem__expf(x[i] - mx);
		sum += x[i];
	}
	*m = mx;
	return sum;
}

static int scales_ok(const float *x, unsigned int n)
{
	const __m512 lo = _mm512_setzero_ps(), hi = _mm512_set1_ps(65504.0f);
	__mmask16 ok = 0xffff;
	unsigned int i;

	/* Ordered compares: a NaN fails both. Lanes past @n read 0. */
	for (i = 0; i < n && ok == 0xffff; i += 16) {
		__mmask16 in = n - i >= 16 ? 0xffff : (1u << (n - i)) - 1;
		__m512 v = _mm512_maskz_loadu_ps(in, x + i);

		ok = _mm512_cmp_ps_mask(v, lo, _CMP_GE_OQ) &
		     _mm512_cmp_ps_mask(v, hi, _CMP_LE_OQ);
	}
	return ok == 0xffff;
}

/* Sixty-four codes a step, the last ones by a masked load. */
static int fp8_nan(const uint8_t *c, size_t n)
{
	const __m512i low = _mm512_set1_epi8(0x7f);
	__mmask64 nan = 0;
	size_t i;

	for (i = 0; i < n && !nan; i += 64) {
		const __mmask64 in =
			n - i >= 64 ? ~0ull : (1ull << (n - i)) - 1;

		nan = _mm512_mask_cmpeq_epi8_mask(
			in,
			_mm512_and_si512(_mm512_maskz_loadu_epi8(in, c + i),
					 low),
			low);
	}
	return nan != 0;
}

/* No AVX-512 version yet (VPDPBUSD would fit): the AVX2 kernel's bits. */
static void scores_q8(const int8_t *q8, const float *qs, const int32_t *qsum,
		      unsigned int ng, const uint8_t *code, size_t stride,
		      unsigned int n, unsigned int dim, unsigned int group,
		      const float *scales, size_t sstride, float scale,
		      float *s, unsigned int ld, int i8)
{
	AVX2.scores_q8(q8, qs, qsum, ng, code, stride, n, dim, group, scales,
		       sstride, scale, s, ld, i8);
}

/*
 * lm3 codes from h74/h84 words, 32 from 24 words a step: a byte permute
 * puts nibbles 3c / 4 and the one after in 16-bit lane c, shifted right
 * by 3c % 4 (see the AVX2 kernel). Each step reads 32 bytes.
 */
static void lm3_codes(const uint8_t *code, size_t code_bytes,
		      unsigned int nvals, uint8_t *out)
{
	const __m512i pick = _mm512_set_epi8(
		24, 23, 23, 22, 22, 21, 22, 21, 21, 20, 20, 19, 19, 18, 19, 18,
		18, 17, 17, 16, 16, 15, 16, 15, 15, 14, 14, 13, 13, 12, 13, 12,
		12, 11, 11, 10, 10, 9, 10, 9, 9, 8, 8, 7, 7, 6, 7, 6, 6, 5, 5,
		4, 4, 3, 4, 3, 3, 2, 2, 1, 1, 0, 1, 0);
	const __m512i down = _mm512_set_epi16(1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3,
					      0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2,
					      3, 0, 1, 2, 3, 0, 1, 2, 3, 0);
	const __m512i low4 = _mm512_set1_epi8(0x0f);
	unsigned int i = 0;

	for (; i + 32 <= nvals && (size_t)i / 4 * 3 + 32 <= code_bytes;
	     i += 32) {
		__m512i x = _mm512_and_si512(
			_mm512_permutexvar_epi8(
				pick,
				_mm512_castsi256_si512(_mm256_loadu_si256(
					(const void *)(code + i / 4 * 3)))),
			low4);
		__m512i c = _mm512_and_si512(
			_mm512_srlv_epi16(
				_mm512_or_si512(x, _mm512_srli_epi16(x, 4)),
				down),
			_mm512_set1_epi16(7));

		_mm256_storeu_si256((void *)(out + i), _mm512_cvtepi16_epi8(c));
	}
	AVX2.lm3_codes(code + i / 4 * 3, code_bytes - i / 4 * 3, nvals - i,
		       out + i);
}

const struct kvmem__attn_kernels kvmem__attn_avx512 = {
	.dequant = dequant,
	.dequant_cw4 = dequant_cw4,
	.scores = scores,
	.accum = accum,
	.softmax = softmax,
	.rescale = rescale,
	.scales_ok = scales_ok,
	.fp8_nan = fp8_nan,
	.golay_nibbles = golay_nibbles,
	.lm3_codes = lm3_codes,
	.scores_cw4 = scores_cw4,
	.accum_cw4 = accum_cw4,
	.scores_b8 = scores_b8,
	.accum_b8 = accum_b8,
	.scores_vq = scores_vq,
	.accum_vq = accum_vq,
	.scores_q8 = scores_q8,
};
