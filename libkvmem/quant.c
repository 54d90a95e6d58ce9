/* SPDX-License-Identifier: MIT */
/*
 * quant.c - value formats and symmetric quantization (see kvmem/quant.h)
 *
 * This is the write side and the reference read side; attention dequantizes
 * with the kernels of attend_*.c, which the tests hold to the same results.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "kvmem/quant.h"
#include "internal.h"
#include "quant_word.h"

static const struct kvmem_format_info formats[] = {
	[KVMEM_FMT_FP16] = { .name = "fp16", .bits = 16, .qmax = 0 },
	[KVMEM_FMT_INT8] = { .name = "int8", .bits = 8, .qmax = 127 },
	[KVMEM_FMT_INT4] = { .name = "int4", .bits = 4, .qmax = 7 },
	[KVMEM_FMT_INT2] = { .name = "int2", .bits = 2, .qmax = 1 },
	[KVMEM_FMT_FP8] = { .name = "fp8", .bits = 8, .qmax = 448 },
	[KVMEM_FMT_LM2] = { .name = "lm2", .bits = 2, .qmax = 2 },
	[KVMEM_FMT_LM3] = { .name = "lm3", .bits = 3, .qmax = 4 },
	[KVMEM_FMT_LM4] = { .name = "lm4", .bits = 4, .qmax = 8 },
	[KVMEM_FMT_VQ2] = { .name = "vq2", .bits = 2, .qmax = 0 },
};
_Static_assert(KVMEM_ARRAY_SIZE(formats) == KVMEM_FMT_NR,
	       "format table must cover enum kvmem_format");

/*
 * The Lloyd-Max quantizers of a unit Gaussian with 4, 8 and 16 levels
 * (Max, 1960): each level the mean of the density between the midpoints to
 * its neighbours. The test suite finds the same fixed point on its own.
 */
/* Sixteen floats each, zeros past the levels: the vector kernels look a
 * 4-bit index up in all sixteen at once. */
static const float lm2_levels[16] = { -1.510417608f, -0.452780035f,
				      0.452780035f, 1.510417608f };
static const float lm3_levels[16] = { -2.151945705f, -1.343909279f,
				      -0.756005281f, -0.245094179f,
				      0.245094179f,  0.756005281f,
				      1.343909279f,  2.151945705f };
static const float lm4_levels[16] = {
	-2.732589571f, -2.069017227f, -1.618046386f, -1.256231197f,
	-0.942340456f, -0.656759119f, -0.388048299f, -0.128395030f,
	0.128395030f,  0.388048299f,  0.656759119f,  0.942340456f,
	1.256231197f,  1.618046386f,  2.069017227f,  2.732589571f,
};

/* int2's two's complement as a table, zeros past it as lm2's. */
static const float int2_values[16] = { 0.0f, 1.0f, -2.0f, -1.0f };

const float *kvmem__code_values(int fmt)
{
	return fmt == KVMEM_FMT_INT2 ? int2_values : kvmem_format_levels(fmt);
}

const float *kvmem_format_levels(int fmt)
{
	switch (fmt) {
	case KVMEM_FMT_LM2:
		return lm2_levels;
	case KVMEM_FMT_LM3:
		return lm3_levels;
	case KVMEM_FMT_LM4:
		return lm4_levels;
	default:
		return NULL;
	}
}

/*
 * The code of the level nearest @y, from its magnitude so that the codes
 * are symmetric; a tie between two levels goes to the smaller magnitude.
 */
static unsigned int lm_code(int fmt, float y)
{
	const unsigned int half = (unsigned int)formats[fmt].qmax;
	const float *lv = kvmem_format_levels(fmt) + half;
	const float a = fabsf(y);
	unsigned int j = 0;

	while (j + 1 < half && a > 0.5f * (lv[j] + lv[j + 1]))
		j++;
	return y < 0.0f ? half - 1 - j : half + j;
}

static int is_lm(int fmt)
{
	return fmt >= KVMEM_FMT_LM2 && fmt <= KVMEM_FMT_LM4;
}

const struct kvmem_format_info *kvmem_format_get(int fmt)
{
	if (fmt < 0 || fmt >= KVMEM_FMT_NR)
		return NULL;
	return &formats[fmt];
}

int kvmem_format_by_name(const char *name)
{
	int f;

	if (!name)
		return -EINVAL;
	for (f = 0; f < KVMEM_FMT_NR; f++)
		if (!strcmp(name, formats[f].name))
			return f;
	return -EINVAL;
}

uint16_t kvmem_half_from_float(float f)
{
	return kvmem_f2h(f);
}

float kvmem_half_to_float(uint16_t h)
{
	return kvmem_h2f(h);
}

/* Value @i of a bitstream of @bits-bit values, raw. */
static inline unsigned int get_value(const uint8_t *s, size_t i,
				     unsigned int bits)
{
	switch (bits) {
	case 16:
		return s[2 * i] | (unsigned int)s[2 * i + 1] << 8;
	case 8:
		return s[i];
	case 4:
		return s[i / 2] >> (4 * (i % 2)) & 0xf;
	case 3: {
		/* Bits [3i, 3i + 3) may span two bytes. */
		size_t b = 3 * i;
		unsigned int w = s[b / 8];

		if (b % 8 > 5)
			w |= (unsigned int)s[b / 8 + 1] << 8;
		return w >> (b % 8) & 0x7;
	}
	default:
		return s[i / 4] >> (2 * (i % 4)) & 0x3;
	}
}

/* Values are written in order into a zeroed stream, so OR is enough. */
static void put_value(uint8_t *s, size_t i, unsigned int bits, unsigned int v)
{
	switch (bits) {
	case 16:
		s[2 * i] = (uint8_t)v;
		s[2 * i + 1] = (uint8_t)(v >> 8);
		break;
	case 8:
		s[i] = (uint8_t)v;
		break;
	case 4:
		s[i / 2] |= (uint8_t)((v & 0xf) << (4 * (i % 2)));
		break;
	case 3: {
		size_t b = 3 * i;
		unsigned int w = (v & 0x7) << (b % 8);

		s[b / 8] |= (uint8_t)w;
		if (b % 8 > 5)
			s[b / 8 + 1] |= (uint8_t)(w >> 8);
		break;
	}
	default:
		s[i / 4] |= (uint8_t)((v & 0x3) << (2 * (i % 4)));
		break;
	}
}

/* Value @x with scale @s as the stored bits of @fmt, a quantized format. */
static unsigned int quant_val(int fmt, float x, float s)
{
	if (fmt == KVMEM_FMT_FP8)
		return kvmem_quant_fp8(x, s);
	if (is_lm(fmt))
		return lm_code(fmt,
			       s == 0.0f ? 0.0f : kvmem_finite_or_zero(x) / s);
	return kvmem_quant_one(x, s, formats[fmt].qmax);
}

/* Stored bits @v of @fmt read back: unscaled, or an FP16 value. */
static float unquant_val(int fmt, unsigned int v)
{
	switch (fmt) {
	case KVMEM_FMT_FP16:
		return kvmem_h2f((uint16_t)v);
	case KVMEM_FMT_FP8:
		return kvmem_e4m3_to_float(v);
	case KVMEM_FMT_LM2:
	case KVMEM_FMT_LM3:
	case KVMEM_FMT_LM4:
		return kvmem_format_levels(fmt)[v];
	default:
		return (float)kvmem_sext(v, formats[fmt].bits);
	}
}

/* The scale of values x[0], x[stride], ... (n of them). */
static uint16_t group_scale(const float *x, size_t n, size_t stride, int qmax)
{
	float amax = 0.0f;
	size_t i;

	for (i = 0; i < n; i++) {
		float a = fabsf(kvmem_finite_or_zero(x[i * stride]));

		if (a > amax)
			amax = a;
	}
	return kvmem_scale_of(amax, qmax);
}

static size_t stream_bytes(size_t n, unsigned int bits)
{
	return (n * bits + 7) / 8;
}

/* The Lloyd-Max formats' scale: the root mean square, nearest FP16. */
static uint16_t rms_scale(const float *x, size_t n, size_t stride)
{
	double sum = 0.0;
	size_t i;

	for (i = 0; i < n; i++) {
		double v = kvmem_finite_or_zero(x[i * stride]);

		sum += v * v;
	}
	return n ? kvmem_f2h((float)sqrt(sum / (double)n)) : 0;
}

uint16_t kvmem__scale(int fmt, const float *x, size_t n, size_t stride)
{
	if (is_lm(fmt))
		return rms_scale(x, n, stride);
	return group_scale(x, n, stride, formats[fmt].qmax);
}

void kvmem__quantize_row(int fmt, const float *x, size_t n, unsigned int group,
			 const uint16_t *scales, uint8_t *out)
{
	const struct kvmem_format_info *fi = &formats[fmt];
	float s = 0.0f;
	size_t i;

	memset(out, 0, stream_bytes(n, fi->bits));
	for (i = 0; i < n; i++) {
		if (!fi->qmax) {
			put_value(out, i, 16,
				  kvmem_f2h(kvmem_finite_or_zero(x[i])));
			continue;
		}
		if (i % group == 0)
			s = kvmem_h2f(scales[i / group]);
		put_value(out, i, fi->bits, quant_val(fmt, x[i], s));
	}
}

int kvmem_quantize(int fmt, const float *x, size_t n, unsigned int group,
		   uint16_t *scales, void *bits)
{
	const struct kvmem_format_info *fi = kvmem_format_get(fmt);
	size_t g;

	if (!fi || fmt == KVMEM_FMT_VQ2 || (fi->qmax && !group) ||
	    (n && (!x || !bits || (fi->qmax && !scales))))
		return -EINVAL;
	if (!n)
		return 0;
	if (fi->qmax)
		for (g = 0; g * group < n; g++)
			scales[g] = kvmem__scale(
				fmt, x + g * group,
				n - g * group < group ? n - g * group : group,
				1);
	kvmem__quantize_row(fmt, x, n, group, scales, bits);
	return 0;
}

int kvmem_dequantize(int fmt, const void *bits, const uint16_t *scales,
		     size_t n, unsigned int group, float *x)
{
	const struct kvmem_format_info *fi = kvmem_format_get(fmt);
	size_t i;

	if (!fi || fmt == KVMEM_FMT_VQ2 || (fi->qmax && !group) ||
	    (n && (!x || !bits || (fi->qmax && !scales))))
		return -EINVAL;
	for (i = 0; i < n; i++) {
		unsigned int v = get_value(bits, i, fi->bits);

		x[i] = unquant_val(fmt, v);
		if (fi->qmax)
			x[i] *= kvmem_h2f(scales[i / group]);
	}
	return 0;
}

int kvmem_quantize_channels(int fmt, const float *x, size_t ntok,
			    unsigned int dim, uint16_t *scales, void *bits)
{
	const struct kvmem_format_info *fi = kvmem_format_get(fmt);
	uint8_t *out = bits;
	size_t t, c;

	if (!fi || !fi->qmax || !dim || !scales || (ntok && (!x || !out)))
		return -EINVAL;
	for (c = 0; c < dim; c++)
		scales[c] = kvmem__scale(fmt, x + c, ntok, dim);
	if (!ntok)
		return 0;
	memset(out, 0, stream_bytes(ntok * dim, fi->bits));
	for (t = 0; t < ntok; t++)
		for (c = 0; c < dim; c++)
			put_value(out, t * dim + c, fi->bits,
				  quant_val(fmt, x[t * dim + c],
					    kvmem_h2f(scales[c])));
	return 0;
}

/*
 * Rows of the formats whose codes index a small table (the lm levels,
 * int2's two's complement): a group at a time, the width a constant of
 * each caller so that the compiler unrolls the unpacking. The same
 * product, code value times scale, as the loop below: the same bits.
 */
static inline void dequant_table(const float *tab, unsigned int bits,
				 const uint8_t *data, unsigned int dim,
				 unsigned int group, const float *scales,
				 float *out)
{
	unsigned int g0, i;

	for (g0 = 0; g0 < dim; g0 += group) {
		const unsigned int end = dim - g0 < group ? dim : g0 + group;
		const float s = scales[g0 / group];

		for (i = g0; i < end; i++)
			out[i] = tab[get_value(data, i, bits)] * s;
	}
}

void kvmem__dequant_row(int fmt, const uint8_t *data, unsigned int dim,
			unsigned int group, const float *scales, float *out)
{
	const struct kvmem_format_info *fi = &formats[fmt];
	const float *tab = kvmem__code_values(fmt);
	unsigned int i;

	/* Constant widths, for the compiler to unpack each its own way. */
	switch (tab ? fi->bits : 0) {
	case 2:
		dequant_table(tab, 2, data, dim, group, scales, out);
		return;
	case 3:
		dequant_table(tab, 3, data, dim, group, scales, out);
		return;
	case 4:
		dequant_table(tab, 4, data, dim, group, scales, out);
		return;
	}
	for (i = 0; i < dim; i++) {
		float x = unquant_val(fmt, get_value(data, i, fi->bits));

		out[i] = fi->qmax ? x * scales[i / group] : x;
	}
}
