/* SPDX-License-Identifier: MIT */
/*
 * kvmem/quant.h - KV value formats and symmetric group-wise quantization
 *
 * Formats store a value in b bits: fp16 (IEEE half), int8, int4 and int2
 * (two's complement), and fp8 (E4M3). The integer formats are symmetric: a
 * group of values shares one FP16 scale s and value x is stored as
 * q = round(x / s) with |q| <= qmax = 2^(b-1) - 1 (127, 7, 1), read back as
 * q * s.
 *
 * The scale of a group is the smallest FP16 number >= amax / qmax, amax being
 * the largest |x| of the group, so no value is clipped and every value is
 * read back within s / 2 of what was written. A group of zeros has scale 0.
 * Non-finite inputs (NaN, +-inf) are stored as 0 in every format and do
 * not count towards amax; finite values beyond the FP16 range saturate at
 * +-65504 (fp16) or +-65504 * qmax.
 *
 * fp8 is E4M3 as in OCP FP8 and CUDA's __nv_fp8_e4m3: a sign, 4 exponent
 * bits biased by 7 and 3 mantissa bits, subnormals (m * 2^-9) below 2^-6,
 * no infinities, largest value 448 (code 0x7e) and S.1111.111 NaN. Its
 * groups have scales chosen by the same rule with qmax = 448: s is the
 * smallest FP16 >= amax / 448, and x is stored as the E4M3 number nearest
 * x / s (ties to even), saturated at +-448, read back as that number times
 * s. So |x| / s >= 2^-6 is read back within 2^-4 of itself (relative),
 * smaller values within s * 2^-10. A value that rounds to zero keeps its
 * sign (0x80 for -0). The NaN code is never written: one that is read back
 * was damaged, and the page decoder treats it as an erased value
 * (kvmem_dequantize() alone gives NaN for it).
 *
 * lm2, lm3 and lm4 store a value as the code of one of 4, 8 or 16 levels:
 * the Lloyd-Max quantizer of a unit Gaussian (kvmem_format_levels(), in
 * ascending order, code i for level i). They are meant for values that are
 * near Gaussian, as K and V are after a random rotation (kvmem/page.h's
 * rotation): the codebook does not depend on the data, so it never drifts.
 * A group's scale s is the FP16 nearest the root mean square of its finite
 * values, and x is stored as the code of the level nearest x / s (a tie
 * goes to the smaller magnitude), read back as that level times s. Values
 * beyond the outermost level are read back as it: these formats clip (at
 * 1.51, 2.15 and 2.73 times the group's RMS) instead of bounding the
 * error, in exchange for a smaller mean square error on Gaussian values
 * (0.1175, 0.03454, 0.009497 times the variance). qmax is the number of
 * levels on each side of zero (2, 4, 8).
 *
 * vq2 stores four consecutive values of a row (channels 4j to 4j + 3) as
 * the 8-bit index of one of 256 entries of a codebook, 2 bits a value:
 * the vector quantization Shard uses for the middle of a prompt. The
 * codebook belongs to a sequence, one per layer, K or V and KV head,
 * learned from that sequence's values by k-means (kvmem/kvmem.h,
 * kvmem_seq_archive()) or given by the engine, and protected apart from
 * the pages: the functions below know no codebook and refuse vq2, which
 * is only ever the format of a sequence's archived pages. An index whose
 * word is uncorrectable is erased with its four values, which
 * KVMEM_ERASE_KEEP reads as the entry it names (within the book's range,
 * as an int4 value past its word reads within its scale); a lost entry
 * erases every value that indexes it under every policy.
 *
 * Quantized values form one bitstream, value i at bits [i*b, i*b + b)
 * (LSB-first, as in kvmem/ecc.h), which the codecs then cut into data words.
 */
#ifndef KVMEM_QUANT_H
#define KVMEM_QUANT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum kvmem_format {
	KVMEM_FMT_FP16 = 0,
	KVMEM_FMT_INT8 = 1,
	KVMEM_FMT_INT4 = 2,
	KVMEM_FMT_INT2 = 3,
	KVMEM_FMT_FP8 = 4, /* E4M3; appended, so the others keep their values */
	KVMEM_FMT_LM2 = 5, /* Lloyd-Max codes of a unit Gaussian, 2 bits */
	KVMEM_FMT_LM3 = 6, /* 3 bits */
	KVMEM_FMT_LM4 = 7, /* 4 bits */
	KVMEM_FMT_VQ2 = 8, /* a codebook index for 4 values, 2 bits a value */
	KVMEM_FMT_NR,
};

struct kvmem_format_info {
	const char *name; /* "fp16", "int8", "int4", "int2", "fp8", "lm2".. */
	unsigned int bits; /* per value */
	/* largest |q| (448 for fp8, levels a side for lm); 0: no scales
	 * (fp16, and vq2, whose codebook takes their place) */
	int qmax;
};

/**
 * kvmem_format_get() - describe a format
 * @fmt: one of enum kvmem_format
 *
 * Return: the format's constant description, or NULL for an unknown one.
 */
const struct kvmem_format_info *kvmem_format_get(int fmt);

/**
 * kvmem_format_by_name() - look a format up by name
 * @name: "fp16", "int8", "int4", "int2", "fp8", "lm2", "lm3", "lm4" or
 *        "vq2"
 *
 * Return: the enum kvmem_format value, or -EINVAL.
 */
int kvmem_format_by_name(const char *name);

/**
 * kvmem_format_levels() - the levels of a Lloyd-Max format
 * @fmt: one of enum kvmem_format
 *
 * Return: the 2^bits levels of lm2, lm3 or lm4 in ascending order (code i
 * reads back as level i times the scale), followed by zeros up to sixteen
 * floats, or NULL for any other format.
 */
const float *kvmem_format_levels(int fmt);

/**
 * kvmem_half_from_float() - nearest FP16 (ties to even), saturating
 * @f: the value; NaN gives 0, +-inf and out-of-range values +-65504
 *
 * Return: the FP16 bit pattern.
 */
uint16_t kvmem_half_from_float(float f);

/**
 * kvmem_half_to_float() - the float value of an FP16 bit pattern
 * @h: the bit pattern
 *
 * Return: its value (exact: every FP16 value is a float).
 */
float kvmem_half_to_float(uint16_t h);

/**
 * kvmem_quantize() - quantize values with one scale per group
 * @fmt: the format
 * @x: @n values
 * @n: their number
 * @group: values per scale; the last group may be shorter. Ignored for fp16.
 * @scales: receives ceil(n / group) FP16 scales (not written for fp16)
 * @bits: receives ceil(n * b / 8) bytes of bitstream; spare bits are zero
 *
 * Return: 0, or -EINVAL for an unknown format, vq2, @group of 0 or a NULL
 * buffer with @n > 0.
 */
int kvmem_quantize(int fmt, const float *x, size_t n, unsigned int group,
		   uint16_t *scales, void *bits);

/**
 * kvmem_dequantize() - read quantized values back
 * @fmt: the format
 * @bits: the bitstream written by kvmem_quantize()
 * @scales: its scales (unused for fp16)
 * @n: number of values
 * @group: values per scale, as given to kvmem_quantize()
 * @x: receives @n values
 *
 * Return: 0, or -EINVAL as kvmem_quantize().
 */
int kvmem_dequantize(int fmt, const void *bits, const uint16_t *scales,
		     size_t n, unsigned int group, float *x);

/**
 * kvmem_quantize_channels() - quantize a block with one scale per channel
 * @fmt: a quantized format (int8, int4, int2, fp8, lm2, lm3 or lm4)
 * @x: @ntok rows of @dim values
 * @ntok: rows (tokens)
 * @dim: values per row (channels)
 * @scales: receives @dim FP16 scales, scale c covering column c of every row
 * @bits: receives the bitstream of all rows, row-major
 *
 * KIVI-style key quantization: keys have outlier channels, so one scale per
 * channel over a page's tokens follows them better than a scale per token.
 *
 * Return: 0, or -EINVAL for fp16, vq2, an unknown format or bad sizes.
 */
int kvmem_quantize_channels(int fmt, const float *x, size_t ntok,
			    unsigned int dim, uint16_t *scales, void *bits);

#ifdef __cplusplus
}
#endif

#endif /* KVMEM_QUANT_H */
