/* SPDX-License-Identifier: MIT */
/*
 * attend_portable.c - attention kernels in plain C (see internal.h)
 *
 * The exp() here and in attend_avx2.c is the same Cephes-style polynomial,
 * accurate to a few ulp, so the paths differ only in rounding order.
 */
#include <math.h>
#include <string.h>

#include "kvmem/quant.h"
#include "internal.h"
#include "quant_word.h"

float kvmem__expf(float x)
{
	union kvmem_f32 e;
	float n, r, y;

	if (x < -87.0f)
		return 0.0f;
	n = rintf(x * 1.44269504f);
	r = x - n * 0.693359375f + n * 2.12194440e-4f;
	y = 1.9875691500e-4f;
	y = y * r + 1.3981999507e-3f;
	y = y * r + 8.3334519073e-3f;
	y = y * r + 4.1665795894e-2f;
	y = y * r + 1.6666665459e-1f;
	y = y * r + 5.0000001201e-1f;
	y = y * r * r + r + 1.0f;
	e.u = (uint32_t)((int)n + 127) << 23;
	return y * e.f;
}

static float softmax(float *x, unsigned int n, float *m)
{
	float mx = *m, sum = 0.0f;
	unsigned int i;

	for (i = 0; i < n; i++)
		if (x[i] > mx)
			mx = x[i];
	for (i = 0; i < n; i++) {
		x[i] = kvmem__expf(x[i] - mx);
		sum += x[i];
	}
	*m = mx;
	return sum;
}

static int scales_ok(const float *x, unsigned int n)
{
	unsigned int i;
	int ok = 1;

	for (i = 0; i < n; i++)
		ok &= x[i] >= 0.0f && x[i] <= 65504.0f;
	return ok;
}

static void dequant_cw4(const uint8_t *code, unsigned int dim,
			unsigned int group, const float *scales,
			const float *levels, float *out)
{
	unsigned int i;

	for (i = 0; i < dim; i++)
		out[i] = (levels ? levels[code[i] & 0xf]
				 : (float)kvmem_sext(code[i], 4)) *
			 scales[i / group];
}

static void scores(const float *q, unsigned int ng, const float *k,
		   unsigned int n, unsigned int dim, float scale, float *s)
{
	unsigned int g, t, d;

	for (g = 0; g < ng; g++)
		for (t = 0; t < n; t++) {
			const float *qg = q + (size_t)g * dim;
			const float *kt = k + (size_t)t * dim;
			float acc = 0.0f;

			for (d = 0; d < dim; d++)
				acc += qg[d] * kt[d];
			s[(size_t)g * n + t] = scale * acc;
		}
}

static void accum(const float *p, unsigned int ng, const float *v,
		  unsigned int n, unsigned int dim, float *acc)
{
	unsigned int g, t, d;

	for (g = 0; g < ng; g++)
		for (t = 0; t < n; t++) {
			float w = p[(size_t)g * n + t];

			for (d = 0; d < dim; d++)
				acc[(size_t)g * dim + d] +=
					w * v[(size_t)t * dim + d];
		}
}

static void rescale(float *x, unsigned int n, float f)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		x[i] *= f;
}

/* Value @d of a row: int4 in the low nibble of its byte, the level the
 * nibble indexes (@lv), or a byte of @b8 (KVMEM_FMT_INT8 or _FP8). */
static float val(const uint8_t *c, unsigned int d, int b8, const float *lv)
{
	if (lv)
		return lv[c[d] & 0xf];
	if (b8 == KVMEM_FMT_FP8)
		return kvmem_e4m3_to_float(c[d]);
	return b8 ? (float)(int8_t)c[d] : (float)kvmem_sext(c[d], 4);
}

static void scores_vals(const float *q, unsigned int ng, const uint8_t *code,
			size_t stride, unsigned int n, unsigned int dim,
			unsigned int group, const float *scales, size_t sstride,
			float scale, float *s, unsigned int ld, int b8,
			const float *lv)
{
	unsigned int g, t, d;

	for (g = 0; g < ng; g++)
		for (t = 0; t < n; t++) {
			const uint8_t *c = code + t * stride;
			const float *sc = scales + t * sstride;
			float acc = 0.0f;

			for (d = 0; d < dim; d++)
				acc += q[(size_t)g * dim + d] *
				       (val(c, d, b8, lv) * sc[d / group]);
			s[(size_t)g * ld + t] = scale * acc;
		}
}

static void accum_vals(const float *p, unsigned int ng, const uint8_t *code,
		       size_t stride, unsigned int n, unsigned int dim,
		       unsigned int group, const float *scales, size_t sstride,
		       float *acc, unsigned int ld, int b8, const float *lv)
{
	unsigned int g, t, d;

	for (g = 0; g < ng; g++)
		for (t = 0; t < n; t++) {
			const uint8_t *c = code + t * stride;
			const float *sc = scales + t * sstride;
			float w = p[(size_t)g * ld + t];

			for (d = 0; d < dim; d++)
				acc[(size_t)g * dim + d] +=
					w * (val(c, d, b8, lv) * sc[d / group]);
		}
}

static void scores_cw4(const float *q, unsigned int ng, const uint8_t *code,
		       size_t stride, unsigned int n, unsigned int dim,
		       unsigned int group, const float *scales, size_t sstride,
		       float scale, float *s, unsigned int ld,
		       const float *levels)
{
	scores_vals(q, ng, code, stride, n, dim, group, scales, sstride, scale,
		    s, ld, 0, levels);
}

static void accum_cw4(const float *p, unsigned int ng, const uint8_t *code,
		      size_t stride, unsigned int n, unsigned int dim,
		      unsigned int group, const float *scales, size_t sstride,
		      float *acc, unsigned int ld, const float *levels)
{
	accum_vals(p, ng, code, stride, n, dim, group, scales, sstride, acc, ld,
		   0, levels);
}

static void scores_b8(const float *q, unsigned int ng, const uint8_t *code,
		      size_t stride, unsigned int n, unsigned int dim,
		      unsigned int group, const float *scales, size_t sstride,
		      float scale, float *s, unsigned int ld, int fmt)
{
	scores_vals(q, ng, code, stride, n, dim, group, scales, sstride, scale,
		    s, ld, fmt, NULL);
}

static void accum_b8(const float *p, unsigned int ng, const uint8_t *code,
		     size_t stride, unsigned int n, unsigned int dim,
		     unsigned int group, const float *scales, size_t sstride,
		     float *acc, unsigned int ld, int fmt)
{
	accum_vals(p, ng, code, stride, n, dim, group, scales, sstride, acc, ld,
		   fmt, NULL);
}

/* Value @d of a vq2 row @c: its entry's in @book. */
static float vq_val(const uint8_t *c, unsigned int d, const float *book)
{
	return book[4 * c[d / 4] + d % 4];
}

static void scores_vq(const float *q, unsigned int ng, const uint8_t *idx,
		      size_t stride, unsigned int n, unsigned int dim,
		      const float *book, float scale, float *s, unsigned int ld)
{
	unsigned int g, t, d;

	for (g = 0; g < ng; g++)
		for (t = 0; t < n; t++) {
			const uint8_t *c = idx + t * stride;
			float acc = 0.0f;

			for (d = 0; d < dim; d++)
				acc += q[(size_t)g * dim + d] *
				       vq_val(c, d, book);
			s[(size_t)g * ld + t] = scale * acc;
		}
}

static void accum_vq(const float *p, unsigned int ng, const uint8_t *idx,
		     size_t stride, unsigned int n, unsigned int dim,
		     const float *book, float *acc, unsigned int ld)
{
	unsigned int g, t, d;

	for (g = 0; g < ng; g++)
		for (t = 0; t < n; t++) {
			const uint8_t *c = idx + t * stride;
			float w = p[(size_t)g * ld + t];

			for (d = 0; d < dim; d++)
				acc[(size_t)g * dim + d] +=
					w * vq_val(c, d, book);
		}
}

static void scores_q8(const int8_t *q8, const float *qs, const int32_t *qsum,
		      unsigned int ng, const uint8_t *code, size_t stride,
		      unsigned int n, unsigned int dim, unsigned int group,
		      const float *scales, size_t sstride, float scale,
		      float *s, unsigned int ld, int i8)
{
	unsigned int g, t, d, e;

	(void)qsum;
	for (g = 0; g < ng; g++) {
		const int8_t *qg = q8 + (size_t)g * dim;
		const float f = scale * qs[g];

		for (t = 0; t < n; t++) {
			const uint8_t *c = code + t * stride;
			const float *sc = scales + t * sstride;
			float acc = 0.0f;

			for (d = 0; d < dim; d += group) {
				int32_t dot = 0;

				for (e = d; e < d + group; e++)
					dot += qg[e] *
					       (i8 ? (int8_t)c[e]
						   : kvmem_sext(c[e], 4));
				acc = fmaf((float)dot, sc[d / group], acc);
			}
			s[(size_t)g * ld + t] = acc * f;
		}
	}
}

static void golay_nibbles(const uint8_t *code, size_t code_bytes,
			  unsigned int nvals, uint8_t *out)
{
	unsigned int i;

	(void)code_bytes;
	/* Word w: d0..d11 in bytes 3w (all) and 3w + 1 (low nibble). */
	for (i = 0; i < nvals; i += 3, code += 3) {
		out[i] = code[0] & 0xf;
		if (i + 1 < nvals)
			out[i + 1] = code[0] >> 4;
		if (i + 2 < nvals)
			out[i + 2] = code[1] & 0xf;
	}
}

/*
 * Eight codes a step: with the sign bits set a NaN code (S.1111.111) is
 * 0xff, so the complement has a zero byte there, which
 * (v - 0x01..) & ~v & 0x80.. finds exactly.
 */
static int fp8_nan(const uint8_t *c, size_t n)
{
	const uint64_t ones = 0x0101010101010101ull, highs = ones << 7;
	uint64_t nan = 0, v;
	size_t i;

	for (i = 0; i + 8 <= n; i += 8) {
		memcpy(&v, c + i, 8);
		v = ~(v | highs);
		nan |= (v - ones) & ~v & highs;
	}
	for (; i < n; i++)
		nan |= (c[i] & 0x7f) == KVMEM_E4M3_NAN;
	return !!nan;
}

/*
 * lm3 codes from h74/h84 words: eight codes (24 bits) from the data nibbles
 * of six words, gathered into one word and spread a code a byte.
 */
static void lm3_codes(const uint8_t *code, size_t code_bytes,
		      unsigned int nvals, uint8_t *out)
{
	unsigned int i, j;
	uint64_t x, y;

	(void)code_bytes;
	for (i = 0; i + 8 <= nvals; i += 8, code += 6) {
		for (x = 0, j = 0; j < 6; j++)
			x |= (uint64_t)(code[j] & 0xf) << (4 * j);
		y = (x & 0xfff) | (x & 0xfff000) << 20;
		y = (y & 0x0000003f0000003full) | (y & 0x00000fc000000fc0ull)
							  << 10;
		y = (y & 0x0007000700070007ull) | (y & 0x0038003800380038ull)
							  << 5;
		for (j = 0; j < 8; j++)
			out[i + j] = (uint8_t)(y >> (8 * j));
	}
	/* The rest from the same six words' nibbles, bit by bit. */
	for (j = 0; i < nvals; i++, j++) {
		const unsigned int b = 3 * j;
		unsigned int w = code[b / 4] & 0xf;

		if (b % 4 > 1)
			w |= (code[b / 4 + 1] & 0xfu) << 4;
		out[i] = (uint8_t)(w >> (b % 4) & 7);
	}
}

const struct kvmem__attn_kernels kvmem__attn_portable = {
	.dequant = kvmem__dequant_row,
	.dequant_cw4 = dequant_cw4,
	.scores = scores,
	.accum = accum,
	.softmax = softmax,
	.rescale = rescale,
	.scales_ok = scales_ok,
	.fp8_nan = fp8_nan,
	.golay_nibbles = golay_nibbles,
	.lm3_codes = lm3_codes,
	.scores_vq = scores_vq,
	.accum_vq = accum_vq,
	.scores_cw4 = scores_cw4,
	.accum_cw4 = accum_cw4,
	.scores_b8 = scores_b8,
	.accum_b8 = accum_b8,
	.scores_q8 = scores_q8,
};

const struct kvmem__attn_kernels *kvmem__attn(void)
{
	static const struct kvmem__attn_kernels *const impls[KVMEM__SIMD_NR] = {
		[KVMEM__SIMD_PORTABLE] = &kvmem__attn_portable,
		[KVMEM__SIMD_AVX2] = &kvmem__attn_avx2,
		[KVMEM__SIMD_AVX512] = &kvmem__attn_avx512,
	};

	return impls[kvmem__simd_active()];
}
