/* SPDX-License-Identifier: MIT */
/*
 * attend_avx2.c - attention kernels with AVX2, FMA and F16C (built with
 * those flags, reached only after a runtime check of all three)
 *
 * Rows are in L1 when these run: attention decodes a page tile by tile into
 * a small buffer, so the kernels are written for compute, not bandwidth.
 * What does not vectorise cleanly (int2, odd sizes) goes to the portable
 * code. FP8 rows are dequantized here and read by the float kernels.
 */
#include <immintrin.h>
#include <string.h>

#include "kvmem/quant.h"
#include "internal.h"

static float hsum(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v),
			      _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* Sign-extend 8 nibbles (one per byte, low 4 bits) to floats. */
static __m256 nib8f(__m128i b)
{
	const __m128i m = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
	__m128i x =
		_mm_sub_epi8(_mm_xor_si128(_mm_and_si128(b, m), eight), eight);

	return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x));
}

static __m256 nib8(__m128i b, __m256 scale)
{
	return _mm256_mul_ps(nib8f(b), scale);
}

/* Eight int4 codewords (h74/h84, one value per byte) as floats. */
static __m256 cw8(const uint8_t *c)
{
	return nib8f(_mm_loadl_epi64((const void *)c));
}

/*
 * Thirty-two int4 codewords as floats, v[k] holding values 8k..8k+7. Every
 * FP16 number from -8 to 7 has a zero low byte, so one lookup of the
 * nibble gives the high byte of its FP16 pattern; F16C converts exactly.
 */
static __m128i f16_hi(void)
{
	return _mm_setr_epi8(0x00, 0x3c, 0x40, 0x42, 0x44, 0x45, 0x46, 0x47,
			     (char)0xc8, (char)0xc7, (char)0xc6, (char)0xc5,
			     (char)0xc4, (char)0xc2, (char)0xc0, (char)0xbc);
}

static void cw32(const uint8_t *c, __m256 *v)
{
	const __m256i hi = _mm256_broadcastsi128_si256(f16_hi());
	__m256i x = _mm256_loadu_si256((const void *)c);
	__m256i h = _mm256_shuffle_epi8(
		hi, _mm256_and_si256(x, _mm256_set1_epi8(0x0f)));
	/* In-lane unpacks: lo holds values 0-7 and 16-23, up 8-15, 24-31. */
	__m256i lo = _mm256_unpacklo_epi8(_mm256_setzero_si256(), h);
	__m256i up = _mm256_unpackhi_epi8(_mm256_setzero_si256(), h);

	v[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(lo));
	v[1] = _mm256_cvtph_ps(_mm256_castsi256_si128(up));
	v[2] = _mm256_cvtph_ps(_mm256_extracti128_si256(lo, 1));
	v[3] = _mm256_cvtph_ps(_mm256_extracti128_si256(up, 1));
}

/* Sixteen int4 codewords as floats, as cw32() on one lane. */
static void cw16(const uint8_t *c, __m256 *v)
{
	__m128i x = _mm_loadu_si128((const void *)c);
	__m128i h = _mm_shuffle_epi8(f16_hi(),
				     _mm_and_si128(x, _mm_set1_epi8(0x0f)));

	v[0] = _mm256_cvtph_ps(_mm_unpacklo_epi8(_mm_setzero_si128(), h));
	v[1] = _mm256_cvtph_ps(_mm_unpackhi_epi8(_mm_setzero_si128(), h));
}

/*
 * Eight 4-bit codes, one a byte in their low nibble, as their levels: the
 * levels of codes 0-7 and 8-15 looked up by one permute each and blended
 * on bit 3.
 */
static __m256 levels8(__m128i b, const float *levels)
{
	__m256i idx = _mm256_and_si256(_mm256_cvtepu8_epi32(b),
				       _mm256_set1_epi32(0xf));

	return _mm256_blendv_ps(
		_mm256_permutevar8x32_ps(_mm256_loadu_ps(levels), idx),
		_mm256_permutevar8x32_ps(_mm256_loadu_ps(levels + 8), idx),
		_mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

/*
 * Eight E4M3 codes, widened to 16 bits, as FP16 patterns: S.EEEE.MMM
 * shifted to S.0EEEE.MMM0000000 is the FP16 number 2^-8 times the E4M3
 * one (exponent bias 15 against 7), subnormals included; the NaN code
 * gets the FP16 NaN exponent, so it reads NaN as in kvmem_e4m3_to_float().
 */
static __m128i fp8_halves(__m128i w)
{
	const __m128i mag =
		_mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x7f)), 7);
	const __m128i nan =
		_mm_and_si128(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7f << 7)),
			      _mm_set1_epi16(0x7c00));

	return _mm_or_si128(
		_mm_or_si128(mag, nan),
		_mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x80)), 8));
}

/*
 * fp8_halves() of codes that are not the NaN code, in three operations:
 * the sign bit added to itself carries into bit 8, so (w + (w & 0x80))
 * << 7 puts the sign at bit 15 and the magnitude's seven bits at 7..13.
 */
static __m128i fp8_halves_num(__m128i w)
{
	return _mm_slli_epi16(
		_mm_add_epi16(w, _mm_and_si128(w, _mm_set1_epi16(0x80))), 7);
}

/*
 * Eight E4M3 values times @scale: F16C converts exactly and 256 * scale is
 * exact, so each product is the one rounding of kvmem__dequant_row().
 */
static __m256 fp8x8(const uint8_t *c, __m256 scale)
{
	__m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64((const void *)c));

	return _mm256_mul_ps(_mm256_cvtph_ps(fp8_halves(w)),
			     _mm256_mul_ps(scale, _mm256_set1_ps(256.0f)));
}

/*
 * @W (8, 16 or 32) values of a row from @c as floats, v[k] holding values
 * 8k..8k+7: int4 codewords, the levels their nibbles index (@lv: lm), or
 * with @B8 bytes of int8 values (KVMEM_FMT_INT8) or E4M3 codes
 * (KVMEM_FMT_FP8, none the NaN code, which kvmem__page_rows_b8() keeps
 * from these kernels: each its number, fp8_halves_num()'s FP16 times 256,
 * exact, so that times its scale it is fp8x8()'s product).
 */
static inline __attribute__((always_inline)) void
vals(const uint8_t *c, const unsigned int W, const int B8, const float *lv,
     __m256 *v)
{
	unsigned int k;

	if (!B8 && lv) {
#pragma GCC unroll 4
		for (k = 0; k < W / 8; k++)
			v[k] = levels8(
				_mm_loadl_epi64((const void *)(c + 8 * k)), lv);
		return;
	}
	if (!B8 && W == 32) {
		cw32(c, v);
		return;
	}
	if (!B8 && W == 16) {
		cw16(c, v);
		return;
	}
	if (!B8) {
		v[0] = cw8(c);
		return;
	}
#pragma GCC unroll 4
	for (k = 0; k < W / 8; k++) {
		__m128i b = _mm_loadl_epi64((const void *)(c + 8 * k));

		v[k] = B8 == KVMEM_FMT_FP8
			       ? _mm256_mul_ps(_mm256_cvtph_ps(fp8_halves_num(
						       _mm_cvtepu8_epi16(b))),
					       _mm256_set1_ps(256.0f))
			       : _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
	}
}

static int vec_ok(unsigned int dim, unsigned int group)
{
	return dim % 8 == 0 && (group == 1 || group % 8 == 0);
}

/*
 * Scales for values i..i+7 of a row walked in steps of 8: one per value
 * (group 1, channel scales), or the group's, fetched when a group starts.
 */
struct scale_walk {
	const float *scales;
	unsigned int group, next, gi;
	__m256 cur;
};

static __m256 scale_at(struct scale_walk *w, unsigned int i)
{
	if (w->group == 1)
		return _mm256_loadu_ps(w->scales + i);
	if (i == w->next) {
		w->cur = _mm256_set1_ps(w->scales[w->gi++]);
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
		kvmem__attn_portable.dequant_cw4(code, dim, group, scales,
						 levels, out);
		return;
	}
	if (levels) {
		for (i = 0; i < dim; i += 8)
			_mm256_storeu_ps(
				out + i,
				_mm256_mul_ps(
					levels8(_mm_loadl_epi64(
							(const void *)(code +
								       i)),
						levels),
					scale_at(&w, i)));
		return;
	}
	for (i = 0; i < dim; i += 8)
		_mm256_storeu_ps(out + i,
				 nib8(_mm_loadl_epi64((const void *)(code + i)),
				      scale_at(&w, i)));
}

/*
 * Eight lm4 values from four bytes (low nibble first), times the scale:
 * the table product of kvmem__dequant_row(), the same bits.
 */
static __m256 lm4x8(const uint8_t *d, const float *levels, __m256 scale)
{
	const __m128i m = _mm_set1_epi8(0x0f);
	__m128i b;
	int32_t v;

	memcpy(&v, d, sizeof(v));
	b = _mm_cvtsi32_si128(v);
	b = _mm_unpacklo_epi8(_mm_and_si128(b, m),
			      _mm_and_si128(_mm_srli_epi16(b, 4), m));
	return _mm256_mul_ps(levels8(b, levels), scale);
}

/* Eight 2-bit values (lm2, int2) from two bytes, codes 2k bits up, looked
 * up in @tab
 * (the four levels in its low lanes), times the scale. */
static __m256 lm2x8(const uint8_t *d, __m256 tab, __m256 scale)
{
	const __m256i shift = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
	__m256i idx = _mm256_and_si256(
		_mm256_srlv_epi32(_mm256_set1_epi32(d[0] | d[1] << 8), shift),
		_mm256_set1_epi32(3));

	return _mm256_mul_ps(_mm256_permutevar8x32_ps(tab, idx), scale);
}

/* Eight lm3 values from three bytes, codes 3k bits up, looked up in the
 * eight levels, times the scale. */
static __m256 lm3x8(const uint8_t *d, __m256 tab, __m256 scale)
{
	const __m256i shift = _mm256_setr_epi32(0, 3, 6, 9, 12, 15, 18, 21);
	uint32_t v =
		(uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16;
	__m256i idx = _mm256_and_si256(
		_mm256_srlv_epi32(_mm256_set1_epi32((int)v), shift),
		_mm256_set1_epi32(7));

	return _mm256_mul_ps(_mm256_permutevar8x32_ps(tab, idx), scale);
}

static void dequant(int fmt, const uint8_t *data, unsigned int dim,
		    unsigned int group, const float *scales, float *out)
{
	const __m128i m = _mm_set1_epi8(0x0f);
	const float *lv = kvmem__code_values(fmt);
	struct scale_walk w = { .scales = scales, .group = group };
	__m256 tab = _mm256_setzero_ps(); /* a 2- or 3-bit code's values */
	unsigned int i;
	__m128i b;
	int32_t v;

	if (fmt == KVMEM_FMT_FP16 && dim % 8 == 0) {
		for (i = 0; i < dim; i += 8)
			_mm256_storeu_ps(out + i,
					 _mm256_cvtph_ps(_mm_loadu_si128((
						 const void *)(data + 2 * i))));
		return;
	}
	if (!vec_ok(dim, group) || fmt == KVMEM_FMT_FP16) {
		kvmem__dequant_row(fmt, data, dim, group, scales, out);
		return;
	}
	if (lv) /* lm2's, int2's or lm3's (lm4 takes its sixteen) */
		tab = _mm256_loadu_ps(lv);
	for (i = 0; i < dim; i += 8) {
		if (fmt == KVMEM_FMT_LM4) {
			_mm256_storeu_ps(out + i, lm4x8(data + i / 2, lv,
							scale_at(&w, i)));
			continue;
		}
		if (fmt == KVMEM_FMT_LM2 || fmt == KVMEM_FMT_INT2) {
			_mm256_storeu_ps(out + i, lm2x8(data + i / 4, tab,
							scale_at(&w, i)));
			continue;
		}
		if (fmt == KVMEM_FMT_LM3) {
			_mm256_storeu_ps(out + i, lm3x8(data + i / 8 * 3, tab,
							scale_at(&w, i)));
			continue;
		}
		if (fmt == KVMEM_FMT_FP8) {
			_mm256_storeu_ps(out + i,
					 fp8x8(data + i, scale_at(&w, i)));
			continue;
		}
		if (fmt == KVMEM_FMT_INT8) {
			b = _mm_loadl_epi64((const void *)(data + i));
			_mm256_storeu_ps(
				out + i,
				_mm256_mul_ps(_mm256_cvtepi32_ps(
						      _mm256_cvtepi8_epi32(b)),
					      scale_at(&w, i)));
			continue;
		}
		/* int4, low nibble first */
		memcpy(&v, data + i / 2, sizeof(v));
		b = _mm_cvtsi32_si128(v);
		b = _mm_unpacklo_epi8(_mm_and_si128(b, m),
				      _mm_and_si128(_mm_srli_epi16(b, 4), m));
		_mm256_storeu_ps(out + i, nib8(b, scale_at(&w, i)));
	}
}

/* The four horizontal sums of a0..a3, in lanes 0..3. */
static __m128 hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3)
{
	__m256 t =
		_mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));

	return _mm_add_ps(_mm256_castps256_ps128(t),
			  _mm256_extractf128_ps(t, 1));
}

/* Row t's scores of @NB heads from their sums @a: s[j * sn] = scale * a[j]
 * summed across. */
static inline __attribute__((always_inline)) void
row_scores(const __m256 a[8], unsigned int NB, float scale, float *s,
	   unsigned int sn)
{
	float r[8];
	unsigned int j;

	if (NB < 4) {
		s[0] = scale * hsum(a[0]);
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

	if (dim % 8) {
		kvmem__attn_portable.scores(q, ng, k, n, dim, scale, s);
		return;
	}
	/* Four query heads share each load of a key row. */
	for (; g + 4 <= ng; g += 4) {
		const float *q0 = q + (size_t)g * dim;

		for (t = 0; t < n; t++) {
			const float *kt = k + (size_t)t * dim;
			__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0,
			       a3 = a0;
			float r[4];

			for (d = 0; d < dim; d += 8) {
				__m256 kv = _mm256_loadu_ps(kt + d);

				a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d),
						     kv, a0);
				a1 = _mm256_fmadd_ps(
					_mm256_loadu_ps(q0 + dim + d), kv, a1);
				a2 = _mm256_fmadd_ps(
					_mm256_loadu_ps(q0 + 2 * dim + d), kv,
					a2);
				a3 = _mm256_fmadd_ps(
					_mm256_loadu_ps(q0 + 3 * dim + d), kv,
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
			__m256 a = _mm256_setzero_ps();

			for (d = 0; d < dim; d += 8)
				a = _mm256_fmadd_ps(
					_mm256_loadu_ps(q + (size_t)g * dim +
							d),
					_mm256_loadu_ps(k + (size_t)t * dim +
							d),
					a);
			s[(size_t)g * n + t] = scale * hsum(a);
		}
}

/* acc[g][d..d+8*w) += sum_t p[g][t] v[t][d..], for heads g and g + 1. */
static void accum2(const float *p0, const float *p1, const float *v,
		   unsigned int n, unsigned int dim, unsigned int d,
		   float *acc0, float *acc1)
{
	__m256 a0 = _mm256_loadu_ps(acc0 + d),
	       a1 = _mm256_loadu_ps(acc0 + d + 8);
	__m256 a2 = _mm256_loadu_ps(acc0 + d + 16);
	__m256 a3 = _mm256_loadu_ps(acc0 + d + 24);
	__m256 b0 = _mm256_loadu_ps(acc1 + d),
	       b1 = _mm256_loadu_ps(acc1 + d + 8);
	__m256 b2 = _mm256_loadu_ps(acc1 + d + 16);
	__m256 b3 = _mm256_loadu_ps(acc1 + d + 24);
	unsigned int t;

	/* Eight independent FMA chains: enough to hide their latency. */
	for (t = 0; t < n; t++) {
		const float *vt = v + (size_t)t * dim + d;
		__m256 w0 = _mm256_broadcast_ss(p0 + t);
		__m256 w1 = _mm256_broadcast_ss(p1 + t);
		__m256 v0 = _mm256_loadu_ps(vt), v1 = _mm256_loadu_ps(vt + 8);
		__m256 v2 = _mm256_loadu_ps(vt + 16);
		__m256 v3 = _mm256_loadu_ps(vt + 24);

		a0 = _mm256_fmadd_ps(w0, v0, a0);
		a1 = _mm256_fmadd_ps(w0, v1, a1);
		a2 = _mm256_fmadd_ps(w0, v2, a2);
		a3 = _mm256_fmadd_ps(w0, v3, a3);
		b0 = _mm256_fmadd_ps(w1, v0, b0);
		b1 = _mm256_fmadd_ps(w1, v1, b1);
		b2 = _mm256_fmadd_ps(w1, v2, b2);
		b3 = _mm256_fmadd_ps(w1, v3, b3);
	}
	_mm256_storeu_ps(acc0 + d, a0);
	_mm256_storeu_ps(acc0 + d + 8, a1);
	_mm256_storeu_ps(acc0 + d + 16, a2);
	_mm256_storeu_ps(acc0 + d + 24, a3);
	_mm256_storeu_ps(acc1 + d, b0);
	_mm256_storeu_ps(acc1 + d + 8, b1);
	_mm256_storeu_ps(acc1 + d + 16, b2);
	_mm256_storeu_ps(acc1 + d + 24, b3);
}

static void accum(const float *p, unsigned int ng, const float *v,
		  unsigned int n, unsigned int dim, float *acc)
{
	unsigned int g, t, d;

	if (dim % 32) {
		kvmem__attn_portable.accum(p, ng, v, n, dim, acc);
		return;
	}
	for (g = 0; g + 2 <= ng; g += 2)
		for (d = 0; d < dim; d += 32)
			accum2(p + (size_t)g * n, p + (size_t)(g + 1) * n, v, n,
			       dim, d, acc + (size_t)g * dim,
			       acc + (size_t)(g + 1) * dim);
	for (; g < ng; g++)
		for (d = 0; d < dim; d += 8) {
			__m256 a = _mm256_loadu_ps(acc + (size_t)g * dim + d);

			for (t = 0; t < n; t++)
				a = _mm256_fmadd_ps(
					_mm256_broadcast_ss(p + (size_t)g * n +
							    t),
					_mm256_loadu_ps(v + (size_t)t * dim +
							d),
					a);
			_mm256_storeu_ps(acc + (size_t)g * dim + d, a);
		}
}

/*
 * Scores of @NB (1, 4 or 8) query heads over rows of int4 codewords (or of
 * values a byte, @B8): each row is decoded and scaled once, into the values
 * kvmem__page_rows() would give, @W (8 or 32) at a time, and dotted with
 * every head. @DIM and @GROUP are literals where the caller knows them, so
 * that the loop over a row unrolls (GROUP 0: channel scales, one per
 * value).
 */
static inline __attribute__((always_inline)) void
scores_cw4_nb(const float *q, unsigned int NB, const uint8_t *code,
	      size_t stride, unsigned int n, unsigned int DIM,
	      unsigned int GROUP, const unsigned int W, const float *scales,
	      size_t sstride, float scale, float *s, unsigned int sn,
	      const int B8, const float *lv)
{
	unsigned int t, d, j, k;

	for (t = 0; t < n; t++) {
		const uint8_t *c = code + t * stride;
		const float *sc = scales + t * sstride;
		__m256 a[8];

#pragma GCC unroll 8
		for (j = 0; j < NB; j++)
			a[j] = _mm256_setzero_ps();
#pragma GCC unroll 4
		for (d = 0; d < DIM; d += W) {
			__m256 v[4];

			vals(c + d, W, B8, lv, v);
#pragma GCC unroll 4
			for (k = 0; k < W / 8; k++) {
				const unsigned int i = d + 8 * k;
				__m256 kv = _mm256_mul_ps(
					v[k],
					GROUP ? _mm256_set1_ps(sc[i / GROUP])
					      : _mm256_loadu_ps(sc + i));

#pragma GCC unroll 8
				for (j = 0; j < NB; j++)
					a[j] = _mm256_fmadd_ps(
						_mm256_loadu_ps(q + j * DIM +
								i),
						kv, a[j]);
			}
		}
		row_scores(a, NB, scale, s + t, sn);
	}
}

/* Heads @NB at a time, specialised for the common shape. */
static inline __attribute__((always_inline)) void
scores_heads(const float *q, unsigned int NB, const uint8_t *code,
	     size_t stride, unsigned int n, unsigned int dim,
	     unsigned int group, const float *scales, size_t sstride,
	     float scale, float *s, unsigned int sn, const int B8,
	     const float *lv)
{
	/* 32 values a step where the row and the groups allow it. */
	const int wide = dim % 32 == 0 && (group == 1 || group % 32 == 0);

	if (dim == 128 && group == 32)
		scores_cw4_nb(q, NB, code, stride, n, 128, 32, 32, scales,
			      sstride, scale, s, sn, B8, lv);
	else if (wide)
		scores_cw4_nb(q, NB, code, stride, n, dim,
			      group == 1 ? 0 : group, 32, scales, sstride,
			      scale, s, sn, B8, lv);
	else
		scores_cw4_nb(q, NB, code, stride, n, dim,
			      group == 1 ? 0 : group, 8, scales, sstride, scale,
			      s, sn, B8, lv);
}

static inline __attribute__((always_inline)) void
scores_vals(const float *q, unsigned int ng, const uint8_t *code, size_t stride,
	    unsigned int n, unsigned int dim, unsigned int group,
	    const float *scales, size_t sstride, float scale, float *s,
	    unsigned int ld, const int B8, const float *lv)
{
	unsigned int g = 0;

	/* Eight heads a pass where there are (GQA 8, several queries)
	 * decode each row half as often as four; a row's sums are the same
	 * either way. */
	for (; g + 8 <= ng; g += 8)
		scores_heads(q + (size_t)g * dim, 8, code, stride, n, dim,
			     group, scales, sstride, scale, s + (size_t)g * ld,
			     ld, B8, lv);
	for (; g + 4 <= ng; g += 4)
		scores_heads(q + (size_t)g * dim, 4, code, stride, n, dim,
			     group, scales, sstride, scale, s + (size_t)g * ld,
			     ld, B8, lv);
	for (; g < ng; g++)
		scores_heads(q + (size_t)g * dim, 1, code, stride, n, dim,
			     group, scales, sstride, scale, s + (size_t)g * ld,
			     ld, B8, lv);
}

static void scores_cw4(const float *q, unsigned int ng, const uint8_t *code,
		       size_t stride, unsigned int n, unsigned int dim,
		       unsigned int group, const float *scales, size_t sstride,
		       float scale, float *s, unsigned int ld,
		       const float *levels)
{
	if (!vec_ok(dim, group))
		kvmem__attn_portable.scores_cw4(q, ng, code, stride, n, dim,
						group, scales, sstride, scale,
						s, ld, levels);
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
 * acc[g][d..d+32) += sum_t p[g][t] * v[t][d..] for @NB (1 or 2) heads, v
 * read from int4 codewords (or values a byte, @B8): the row's scale goes into
 * the weight (group of 32 or more), or onto the values (channel scales).
 */
static inline __attribute__((always_inline)) void
accum_cw4_nb(const float *p, unsigned int NB, const uint8_t *code,
	     size_t stride, unsigned int n, unsigned int dim,
	     unsigned int group, const int CHAN, const float *scales,
	     size_t sstride, unsigned int d, float *acc, unsigned int pn,
	     const int B8, const float *lv)
{
	const unsigned int gi = CHAN ? 0 : d / group;
	__m256 a[2][4];
	unsigned int t, j, k;

#pragma GCC unroll 4
	for (j = 0; j < NB; j++)
#pragma GCC unroll 4
		for (k = 0; k < 4; k++)
			a[j][k] = _mm256_loadu_ps(acc + (size_t)j * dim + d +
						  8 * k);
	for (t = 0; t < n; t++) {
		const uint8_t *c = code + t * stride + d;
		const float *sc = scales + t * sstride;
		__m256 v[4];

		vals(c, 32, B8, lv, v);
#pragma GCC unroll 4
		for (k = 0; k < 4; k++)
			if (CHAN)
				v[k] = _mm256_mul_ps(
					v[k], _mm256_loadu_ps(sc + d + 8 * k));
#pragma GCC unroll 4
		for (j = 0; j < NB; j++) {
			float wj =
				p[(size_t)j * pn + t] * (CHAN ? 1.0f : sc[gi]);
			__m256 w = _mm256_set1_ps(wj);

#pragma GCC unroll 4
			for (k = 0; k < 4; k++)
				a[j][k] = _mm256_fmadd_ps(w, v[k], a[j][k]);
		}
	}
#pragma GCC unroll 4
	for (j = 0; j < NB; j++)
#pragma GCC unroll 4
		for (k = 0; k < 4; k++)
			_mm256_storeu_ps(acc + (size_t)j * dim + d + 8 * k,
					 a[j][k]);
}

/* Tokens whose weights accum_x4() takes ahead at once. */
#define X4_TOKENS 64

/*
 * accum_cw4_nb() for four rows at once with group scales: each V row is
 * decoded once for the four, sixteen values at a time (the accumulators of
 * 32 would not fit in the registers), and the weights p[g][t] * scale are
 * taken ahead per group, up to X4_TOKENS tokens, so that the loop reads
 * them broadcast. The same products added in the same order: the same
 * bits.
 */
static inline __attribute__((always_inline)) void
accum_x4(const float *p, const uint8_t *code, size_t stride, unsigned int n,
	 unsigned int dim, unsigned int group, const float *scales,
	 size_t sstride, float *acc, unsigned int ld, const int B8,
	 const float *lv)
{
	float w[4][X4_TOKENS] __attribute__((aligned(32)));
	float sc[X4_TOKENS] __attribute__((aligned(32)));
	unsigned int t0, m, gi, t, j, d;

	for (t0 = 0; t0 < n; t0 += m) {
		m = n - t0 < X4_TOKENS ? n - t0 : X4_TOKENS;
		for (gi = 0; gi < dim / group; gi++) {
			for (t = 0; t < m; t++)
				sc[t] = scales[(t0 + t) * sstride + gi];
#pragma GCC unroll 4
			for (j = 0; j < 4; j++) {
				const float *pj = p + (size_t)j * ld + t0;

				for (t = 0; t + 8 <= m; t += 8)
					_mm256_store_ps(
						&w[j][t],
						_mm256_mul_ps(
							_mm256_loadu_ps(pj + t),
							_mm256_load_ps(sc +
								       t)));
				for (; t < m; t++)
					w[j][t] = pj[t] * sc[t];
			}
			for (d = gi * group; d < (gi + 1) * group; d += 16) {
				const uint8_t *c =
					code + (size_t)t0 * stride + d;
				__m256 a[4][2];

#pragma GCC unroll 4
				for (j = 0; j < 4; j++) {
					a[j][0] = _mm256_loadu_ps(
						acc + (size_t)j * dim + d);
					a[j][1] = _mm256_loadu_ps(
						acc + (size_t)j * dim + d + 8);
				}
				for (t = 0; t < m; t++, c += stride) {
					__m256 v[2];

					vals(c, 16, B8, lv, v);
#pragma GCC unroll 4
					for (j = 0; j < 4; j++) {
						__m256 b = _mm256_broadcast_ss(
							&w[j][t]);

						a[j][0] = _mm256_fmadd_ps(
							b, v[0], a[j][0]);
						a[j][1] = _mm256_fmadd_ps(
							b, v[1], a[j][1]);
					}
				}
#pragma GCC unroll 4
				for (j = 0; j < 4; j++) {
					_mm256_storeu_ps(acc + (size_t)j * dim +
								 d,
							 a[j][0]);
					_mm256_storeu_ps(acc + (size_t)j * dim +
								 d + 8,
							 a[j][1]);
				}
			}
		}
	}
}

static inline __attribute__((always_inline)) void
accum_vals(const float *p, unsigned int ng, const uint8_t *code, size_t stride,
	   unsigned int n, unsigned int dim, unsigned int group,
	   const float *scales, size_t sstride, float *acc, unsigned int ld,
	   const int B8, const float *lv)
{
	unsigned int g = 0, d;

	if (group != 1)
		for (; g + 4 <= ng; g += 4)
			accum_x4(p + (size_t)g * ld, code, stride, n, dim,
				 group, scales, sstride, acc + (size_t)g * dim,
				 ld, B8, lv);
	/* Literal arguments: each call is its own specialised copy. */
	for (; g + 2 <= ng; g += 2)
		for (d = 0; d < dim; d += 32)
			if (group == 1)
				accum_cw4_nb(p + (size_t)g * ld, 2, code,
					     stride, n, dim, 1, 1, scales,
					     sstride, d, acc + (size_t)g * dim,
					     ld, B8, lv);
			else
				accum_cw4_nb(p + (size_t)g * ld, 2, code,
					     stride, n, dim, group, 0, scales,
					     sstride, d, acc + (size_t)g * dim,
					     ld, B8, lv);
	for (; g < ng; g++)
		for (d = 0; d < dim; d += 32)
			accum_cw4_nb(p + (size_t)g * ld, 1, code, stride, n,
				     dim, group, group == 1, scales, sstride, d,
				     acc + (size_t)g * dim, ld, B8, lv);
}

/* Rows of 32 values and more: whole vectors, and a group scale each. */
static int accum_ok(unsigned int dim, unsigned int group)
{
	return dim % 32 == 0 && (group == 1 || group % 32 == 0);
}

static void accum_cw4(const float *p, unsigned int ng, const uint8_t *code,
		      size_t stride, unsigned int n, unsigned int dim,
		      unsigned int group, const float *scales, size_t sstride,
		      float *acc, unsigned int ld, const float *levels)
{
	if (!accum_ok(dim, group))
		kvmem__attn_portable.accum_cw4(p, ng, code, stride, n, dim,
					       group, scales, sstride, acc, ld,
					       levels);
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

/* Eight rows of eight dwords to eight vectors: r[i] holds dword i of each
 * row, row t in dword t. */
static void tr8x8(__m256i *r)
{
	__m256i a0 = _mm256_unpacklo_epi32(r[0], r[1]);
	__m256i a1 = _mm256_unpackhi_epi32(r[0], r[1]);
	__m256i a2 = _mm256_unpacklo_epi32(r[2], r[3]);
	__m256i a3 = _mm256_unpackhi_epi32(r[2], r[3]);
	__m256i a4 = _mm256_unpacklo_epi32(r[4], r[5]);
	__m256i a5 = _mm256_unpackhi_epi32(r[4], r[5]);
	__m256i a6 = _mm256_unpacklo_epi32(r[6], r[7]);
	__m256i a7 = _mm256_unpackhi_epi32(r[6], r[7]);
	__m256i b0 = _mm256_unpacklo_epi64(a0, a2);
	__m256i b1 = _mm256_unpackhi_epi64(a0, a2);
	__m256i b2 = _mm256_unpacklo_epi64(a1, a3);
	__m256i b3 = _mm256_unpackhi_epi64(a1, a3);
	__m256i b4 = _mm256_unpacklo_epi64(a4, a6);
	__m256i b5 = _mm256_unpackhi_epi64(a4, a6);
	__m256i b6 = _mm256_unpacklo_epi64(a5, a7);
	__m256i b7 = _mm256_unpackhi_epi64(a5, a7);

	r[0] = _mm256_permute2x128_si256(b0, b4, 0x20);
	r[1] = _mm256_permute2x128_si256(b1, b5, 0x20);
	r[2] = _mm256_permute2x128_si256(b2, b6, 0x20);
	r[3] = _mm256_permute2x128_si256(b3, b7, 0x20);
	r[4] = _mm256_permute2x128_si256(b0, b4, 0x31);
	r[5] = _mm256_permute2x128_si256(b1, b5, 0x31);
	r[6] = _mm256_permute2x128_si256(b2, b6, 0x31);
	r[7] = _mm256_permute2x128_si256(b3, b7, 0x31);
}

/*
 * int8 scores, shaped as a matrix product: K rows are packed eight tokens
 * a vector, four values of each (P[s] holds values 4s..4s+3 of the eight
 * tokens), so one VPMADDUBSW against four values of a query row broadcast
 * gives eight tokens' sums at once, and no sum is ever horizontal. int4
 * values go in as u = v + 8 (unsigned), the 8 * sum(q) of each group taken
 * off after; a pair is at most 2 * 15 * 127, so eight steps add up in 16
 * bits. int8 values: |k| against q with k's sign (VPSIGNB), a pair at most
 * 2 * 128 * 127, widened every step. Each token's lane then takes the
 * portable kernel's float steps.
 */
#define Q8_MAX_DIM 256
#define Q8_BLOCKS 4 /* of eight tokens, packed at once */

/* Four int8 values at @p, in every dword. */
static __m256i q8_bcast(const int8_t *p)
{
	int32_t w;

	memcpy(&w, p, sizeof(w));
	return _mm256_set1_epi32(w);
}

/* 32 values of @R (1 or 2) query rows against packed K @kc, into @a16
 * (int4) or @a32 (int8). */
static inline __attribute__((always_inline)) void
q8_chunk(const int8_t *q0, const int8_t *q1, const unsigned int R,
	 const __m256i *kc, __m256i *a16, __m256i *a32, const int I8)
{
	const __m256i ones = _mm256_set1_epi16(1);
	unsigned int i;

#pragma GCC unroll 8
	for (i = 0; i < 8; i++) {
		const __m256i k = kc[i];
		const __m256i v0 = q8_bcast(q0 + 4 * i);

		if (I8) {
			const __m256i ka = _mm256_abs_epi8(k);

			a32[0] = _mm256_add_epi32(
				a32[0],
				_mm256_madd_epi16(
					_mm256_maddubs_epi16(
						ka, _mm256_sign_epi8(v0, k)),
					ones));
			if (R == 2)
				a32[1] = _mm256_add_epi32(
					a32[1],
					_mm256_madd_epi16(
						_mm256_maddubs_epi16(
							ka,
							_mm256_sign_epi8(
								q8_bcast(q1 +
									 4 * i),
								k)),
						ones));
		} else {
			a16[0] = _mm256_add_epi16(a16[0],
						  _mm256_maddubs_epi16(k, v0));
			if (R == 2)
				a16[1] = _mm256_add_epi16(
					a16[1],
					_mm256_maddubs_epi16(
						k, q8_bcast(q1 + 4 * i)));
		}
	}
}

static inline __attribute__((always_inline)) void
q8_rows(const int8_t *q8, const float *qs, const int32_t *qsum,
	const unsigned int R, const __m256i *P, const float *SC,
	unsigned int nb, const unsigned int dim, const unsigned int group,
	float scale, float *s, unsigned int ld, const int I8)
{
	const __m256i ones = _mm256_set1_epi16(1);
	const unsigned int ngr = dim / group, cpg = group / 32;
	const float f0 = scale * qs[0], f1 = R == 2 ? scale * qs[1] : 0.0f;
	int32_t bias[2][Q8_MAX_DIM / 32];
	unsigned int b, g, c;

	/* int4: 8 * the sum of the row's values of each group */
	for (g = 0; !I8 && g < ngr; g++)
		for (c = 0; c < R; c++) {
			int32_t sum = 0;
			unsigned int e;

			for (e = g * cpg; e < (g + 1) * cpg; e++)
				sum += qsum[(size_t)c * (dim / 32) + e];
			bias[c][g] = 8 * sum;
		}
	for (b = 0; b < nb; b++) {
		const __m256i *pb = P + (size_t)b * (dim / 4);
		const float *sb = SC + (size_t)b * ngr * 8;
		__m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;

		for (g = 0; g < ngr; g++) {
			__m256i a32[2] = { _mm256_setzero_si256(),
					   _mm256_setzero_si256() };
			__m256 sc = _mm256_loadu_ps(sb + 8 * g);

			for (c = g * cpg; c < (g + 1) * cpg; c++) {
				__m256i a16[2] = { _mm256_setzero_si256(),
						   _mm256_setzero_si256() };

				q8_chunk(q8 + 32 * c,
					 R == 2 ? q8 + dim + 32 * c : q8, R,
					 pb + 8 * c, a16, a32, I8);
				if (!I8) {
					a32[0] = _mm256_add_epi32(
						a32[0], _mm256_madd_epi16(
								a16[0], ones));
					if (R == 2)
						a32[1] = _mm256_add_epi32(
							a32[1],
							_mm256_madd_epi16(
								a16[1], ones));
				}
			}
			if (!I8) {
				a32[0] = _mm256_sub_epi32(
					a32[0], _mm256_set1_epi32(bias[0][g]));
				if (R == 2)
					a32[1] = _mm256_sub_epi32(
						a32[1],
						_mm256_set1_epi32(bias[1][g]));
			}
			acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(a32[0]), sc,
					       acc0);
			if (R == 2)
				acc1 = _mm256_fmadd_ps(
					_mm256_cvtepi32_ps(a32[1]), sc, acc1);
		}
		_mm256_storeu_ps(s + 8 * b,
				 _mm256_mul_ps(acc0, _mm256_set1_ps(f0)));
		if (R == 2)
			_mm256_storeu_ps(
				s + ld + 8 * b,
				_mm256_mul_ps(acc1, _mm256_set1_ps(f1)));
	}
}

/* q8_rows() for every row, literal shapes where they are the common ones. */
static inline __attribute__((always_inline)) void
q8_all(const int8_t *q8, const float *qs, const int32_t *qsum, unsigned int ng,
       const __m256i *P, const float *SC, unsigned int nb,
       const unsigned int dim, const unsigned int group, float scale, float *s,
       unsigned int ld, const int I8)
{
	unsigned int r;

	for (r = 0; r + 2 <= ng; r += 2)
		q8_rows(q8 + (size_t)r * dim, qs + r,
			qsum + (size_t)r * (dim / 32), 2, P, SC, nb, dim, group,
			scale, s + (size_t)r * ld, ld, I8);
	if (r < ng)
		q8_rows(q8 + (size_t)r * dim, qs + r,
			qsum + (size_t)r * (dim / 32), 1, P, SC, nb, dim, group,
			scale, s + (size_t)r * ld, ld, I8);
}

/*
 * @nb blocks of eight K rows from @code into @P (int4 as u = v + 8) and
 * their scales into @SC, [block][group][token].
 */
static void q8_pack(const uint8_t *code, size_t stride, const float *scales,
		    size_t sstride, unsigned int nb, unsigned int dim,
		    unsigned int group, int i8, __m256i *P, float *SC)
{
	const __m256i low4 = _mm256_set1_epi8(0x0f);
	const __m256i eight = _mm256_set1_epi8(8);
	const unsigned int ngr = dim / group;
	unsigned int b, c, i, g, t;

	for (b = 0; b < nb; b++) {
		const uint8_t *cb = code + 8 * b * stride;
		const float *sb = scales + 8 * b * sstride;
		__m256i *pb = P + (size_t)b * (dim / 4);

		for (c = 0; c < dim / 32; c++) {
			__m256i rw[8];

			for (t = 0; t < 8; t++)
				rw[t] = _mm256_loadu_si256(
					(const void *)(cb + t * stride +
						       32 * c));
			tr8x8(rw);
			for (i = 0; i < 8; i++)
				pb[8 * c + i] =
					i8 ? rw[i]
					   : _mm256_xor_si256(
						     _mm256_and_si256(rw[i],
								      low4),
						     eight);
		}
		for (g = 0; g < ngr; g++)
			for (t = 0; t < 8; t++)
				SC[(b * ngr + g) * 8 + t] = sb[t * sstride + g];
	}
}

static void scores_q8(const int8_t *q8, const float *qs, const int32_t *qsum,
		      unsigned int ng, const uint8_t *code, size_t stride,
		      unsigned int n, unsigned int dim, unsigned int group,
		      const float *scales, size_t sstride, float scale,
		      float *s, unsigned int ld, int i8)
{
	__m256i P[Q8_BLOCKS * (Q8_MAX_DIM / 4)];
	float SC[Q8_BLOCKS * (Q8_MAX_DIM / 32) * 8];
	unsigned int t0 = 0, nb;

	if (dim % 32 == 0 && group % 32 == 0 && dim <= Q8_MAX_DIM && qsum)
		for (; t0 + 8 <= n; t0 += 8 * nb) {
			nb = (n - t0) / 8 < Q8_BLOCKS ? (n - t0) / 8
						      : Q8_BLOCKS;
			q8_pack(code + t0 * stride, stride,
				scales + t0 * sstride, sstride, nb, dim, group,
				i8, P, SC);
			if (dim == 128 && group == 32 && i8)
				q8_all(q8, qs, qsum, ng, P, SC, nb, 128, 32,
				       scale, s + t0, ld, 1);
			else if (dim == 128 && group == 32)
				q8_all(q8, qs, qsum, ng, P, SC, nb, 128, 32,
				       scale, s + t0, ld, 0);
			else if (i8)
				q8_all(q8, qs, qsum, ng, P, SC, nb, dim, group,
				       scale, s + t0, ld, 1);
			else
				q8_all(q8, qs, qsum, ng, P, SC, nb, dim, group,
				       scale, s + t0, ld, 0);
		}
	if (t0 < n)
		kvmem__attn_portable.scores_q8(
			q8, qs, qsum, ng, code + t0 * stride, stride, n - t0,
			dim, group, scales + t0 * sstride, sstride, scale,
			s + t0, ld, i8);
}

/*
 * Golay words to one int4 value per byte: each 12-byte half of a vector
 * holds four words, whose bytes b0, b0, b1 go to three value bytes; the
 * middle one is the high nibble of b0. Each step reads 28 bytes for 24 and
 * writes 28 for 24 (see internal.h for the room that needs).
 */
static void golay_nibbles(const uint8_t *code, size_t code_bytes,
			  unsigned int nvals, uint8_t *out)
{
	const __m256i pick = _mm256_broadcastsi128_si256(_mm_setr_epi8(
		0, 0, 1, 3, 3, 4, 6, 6, 7, 9, 9, 10, -1, -1, -1, -1));
	const __m256i odd = _mm256_broadcastsi128_si256(_mm_setr_epi8(
		0, -1, 0, 0, -1, 0, 0, -1, 0, 0, -1, 0, 0, 0, 0, 0));
	const __m256i low4 = _mm256_set1_epi8(0x0f);
	unsigned int i = 0;

	/* Value i sits in byte i of the codewords: 3 values per 3 bytes. */
	for (; i + 24 <= nvals && i + 28 <= code_bytes; i += 24) {
		__m256i x = _mm256_shuffle_epi8(
			_mm256_loadu2_m128i((const void *)(code + i + 12),
					    (const void *)(code + i)),
			pick);
		__m256i v = _mm256_and_si256(
			_mm256_blendv_epi8(x, _mm256_srli_epi16(x, 4), odd),
			low4);

		_mm_storeu_si128((void *)(out + i), _mm256_castsi256_si128(v));
		_mm_storeu_si128((void *)(out + i + 12),
				 _mm256_extracti128_si256(v, 1));
	}
	kvmem__attn_portable.golay_nibbles(code + i, code_bytes - i, nvals - i,
					   out + i);
}

/* Eight values of a vq2 row: the entries of the two indices at @c. */
static inline __attribute__((always_inline)) __m256 vq8(const uint8_t *c,
							const float *book)
{
	return _mm256_insertf128_ps(
		_mm256_castps128_ps256(_mm_loadu_ps(book + 4 * c[0])),
		_mm_loadu_ps(book + 4 * c[1]), 1);
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
		__m256 a[8];

#pragma GCC unroll 8
		for (j = 0; j < NB; j++)
			a[j] = _mm256_setzero_ps();
#pragma GCC unroll 16
		for (d = 0; d < DIM; d += 8) {
			__m256 kv = vq8(c + d / 4, book);

#pragma GCC unroll 8
			for (j = 0; j < NB; j++)
				a[j] = _mm256_fmadd_ps(
					_mm256_loadu_ps(q + j * DIM + d), kv,
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

	if (dim % 8) {
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
 * acc[g + j][d..d+16) += sum_t p[g + j][t] * v[t][d..] for @NB (1 or 4)
 * heads, v looked up from vq2 rows once for all of them.
 */
static inline __attribute__((always_inline)) void
accum_vq_nb(const float *p, unsigned int NB, const uint8_t *idx, size_t stride,
	    unsigned int n, unsigned int dim, const float *book, unsigned int d,
	    float *acc, unsigned int pn)
{
	__m256 a[4][2];
	unsigned int t, j, k;

#pragma GCC unroll 4
	for (j = 0; j < NB; j++)
#pragma GCC unroll 2
		for (k = 0; k < 2; k++)
			a[j][k] = _mm256_loadu_ps(acc + (size_t)j * dim + d +
						  8 * k);
	for (t = 0; t < n; t++) {
		const uint8_t *c = idx + t * stride + d / 4;
		const __m256 v0 = vq8(c, book), v1 = vq8(c + 2, book);

#pragma GCC unroll 4
		for (j = 0; j < NB; j++) {
			__m256 w = _mm256_broadcast_ss(p + (size_t)j * pn + t);

			a[j][0] = _mm256_fmadd_ps(w, v0, a[j][0]);
			a[j][1] = _mm256_fmadd_ps(w, v1, a[j][1]);
		}
	}
#pragma GCC unroll 4
	for (j = 0; j < NB; j++)
#pragma GCC unroll 2
		for (k = 0; k < 2; k++)
			_mm256_storeu_ps(acc + (size_t)j * dim + d + 8 * k,
					 a[j][k]);
}

static void accum_vq(const float *p, unsigned int ng, const uint8_t *idx,
		     size_t stride, unsigned int n, unsigned int dim,
		     const float *book, float *acc, unsigned int ld)
{
	unsigned int g = 0, d;

	if (dim % 16) {
		kvmem__attn_portable.accum_vq(p, ng, idx, stride, n, dim, book,
					      acc, ld);
		return;
	}
	for (; g + 4 <= ng; g += 4)
		for (d = 0; d < dim; d += 16)
			accum_vq_nb(p + (size_t)g * ld, 4, idx, stride, n, dim,
				    book, d, acc + (size_t)g * dim, ld);
	for (; g < ng; g++)
		for (d = 0; d < dim; d += 16)
			accum_vq_nb(p + (size_t)g * ld, 1, idx, stride, n, dim,
				    book, d, acc + (size_t)g * dim, ld);
}

/*
 * lm3 codes from h74/h84 words, sixteen from twelve words a step: code c
 * is bits s = 3c % 4 .. s + 2 of the byte made of nibbles 3c / 4 and the
 * one after, which a shuffle puts in a 16-bit lane; times 2^(3 - s), a
 * shift right by 3 takes the code down. Each step reads 16 bytes.
 */
static void lm3_codes(const uint8_t *code, size_t code_bytes,
		      unsigned int nvals, uint8_t *out)
{
	const __m256i pick = _mm256_setr_epi8(
		0, 1, 0, 1, 1, 2, 2, 3, 3, 4, 3, 4, 4, 5, 5, 6, 6, 7, 6, 7, 7,
		8, 8, 9, 9, 10, 9, 10, 10, 11, 11, 12);
	const __m256i up = _mm256_setr_epi16(8, 1, 2, 4, 8, 1, 2, 4, 8, 1, 2, 4,
					     8, 1, 2, 4);
	const __m256i low4 = _mm256_set1_epi8(0x0f);
	unsigned int i = 0;

	for (; i + 16 <= nvals && (size_t)i / 4 * 3 + 16 <= code_bytes;
	     i += 16) {
		__m256i x = _mm256_and_si256(
			_mm256_shuffle_epi8(
				_mm256_broadcastsi128_si256(_mm_loadu_si128(
					(const void *)(code + i / 4 * 3))),
				pick),
			low4);
		__m256i c = _mm256_and_si256(
			_mm256_srli_epi16(
				_mm256_mullo_epi16(
					_mm256_or_si256(
						x, _mm256_srli_epi16(x, 4)),
					up),
				3),
			_mm256_set1_epi16(7));

		c = _mm256_packus_epi16(c, c);
		_mm_storeu_si128((void *)(out + i),
				 _mm256_castsi256_si128(
					 _mm256_permute4x64_epi64(c, 0x08)));
	}
	kvmem__attn_portable.lm3_codes(code + i / 4 * 3, code_bytes - i / 4 * 3,
				       nvals - i, out + i);
}

/* kvmem__expf() of eight values at once. */
static __m256 exp8(__m256 v)
{
	const __m256 under =
		_mm256_cmp_ps(v, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
	__m256 nf =
		_mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(1.44269504f)),
				_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(0.693359375f), v);
	__m256 y;
	__m256i e;

	r = _mm256_fmadd_ps(nf, _mm256_set1_ps(2.12194440e-4f), r);
	y = _mm256_set1_ps(1.9875691500e-4f);
	y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
	y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
	y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
	y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
	y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
	y = _mm256_fmadd_ps(_mm256_mul_ps(y, r), r,
			    _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
	e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(nf),
					       _mm256_set1_epi32(127)),
			      23);
	return _mm256_andnot_ps(under,
				_mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

static void rescale(float *x, unsigned int n, float f)
{
	const __m256 fv = _mm256_set1_ps(f);
	unsigned int i;

	for (i = 0; i + 8 <= n; i += 8)
		_mm256_storeu_ps(x + i,
				 _mm256_mul_ps(_mm256_loadu_ps(x + i), fv));
	for (; i < n; i++)
		x[i] *= f;
}

static float softmax(float *x, unsigned int n, float *m)
{
	__m256 mv = _mm256_set1_ps(*m), sv = _mm256_setzero_ps();
	__m128 h;
	float mx, sum;
	unsigned int i;

	for (i = 0; i + 8 <= n; i += 8)
		mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
	h = _mm_max_ps(_mm256_castps256_ps128(mv),
		       _mm256_extractf128_ps(mv, 1));
	h = _mm_max_ps(h, _mm_movehl_ps(h, h));
	h = _mm_max_ss(h, _mm_movehdup_ps(h));
	mx = _mm_cvtss_f32(h);
	for (; i < n; i++)
		if (x[i] > mx)
			mx = x[i];
	mv = _mm256_set1_ps(mx);
	for (i = 0; i + 8 <= n; i += 8) {
		__m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));

		_mm256_storeu_ps(x + i, e);
		sv = _mm256_add_ps(sv, e);
	}
	sum = hsum(sv);
	for (; i < n; i++) {
		x[i] = kvmem__expf(x[i] - mx);
		sum += x[i];
	}
	*m = mx;
	return sum;
}

static int scales_ok(const float *x, unsigned int n)
{
	const __m256 lo = _mm256_setzero_ps(), hi = _mm256_set1_ps(65504.0f);
	__m256 ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
	unsigned int i;

	/* Ordered compares: a NaN fails both. */
	for (i = 0; i + 8 <= n; i += 8) {
		__m256 v = _mm256_loadu_ps(x + i);

		ok = _mm256_and_ps(
			ok, _mm256_and_ps(_mm256_cmp_ps(v, lo, _CMP_GE_OQ),
					  _mm256_cmp_ps(v, hi, _CMP_LE_OQ)));
	}
	return _mm256_movemask_ps(ok) == 0xff &&
	       kvmem__attn_portable.scales_ok(x + i, n - i);
}

/* Thirty-two codes a step, the rest the portable kernel's. */
static int fp8_nan(const uint8_t *c, size_t n)
{
	const __m256i low = _mm256_set1_epi8(0x7f);
	__m256i nan = _mm256_setzero_si256();
	size_t i;

	for (i = 0; i + 32 <= n; i += 32)
		nan = _mm256_or_si256(
			nan,
			_mm256_cmpeq_epi8(
				_mm256_and_si256(_mm256_loadu_si256(
							 (const void *)(c + i)),
						 low),
				low));
	return !_mm256_testz_si256(nan, nan) ||
	       kvmem__attn_portable.fp8_nan(c + i, n - i);
}

const struct kvmem__attn_kernels kvmem__attn_avx2 = {
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
