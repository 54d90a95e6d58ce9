/* SPDX-License-Identifier: MIT */
/*
 * quant_ref.h - reference FP16 and quantizer for the tests, written from
 * the contract in kvmem/quant.h, not from the library
 *
 * The FP16 conversion is bit-level integer arithmetic (round to nearest,
 * ties to even), "the smallest FP16 >= x" is a binary search over the FP16
 * values decoded by that reference, and q = round(x / s) is computed in
 * double.
 *
 * Like ecc_ref.h this is deliberately independent of libkvmem: it calls no
 * library function and takes nothing from the public headers but their
 * constants and the geometry's fields, so that the library is only ever
 * the thing being compared against it.
 */
#ifndef KVMEM_QUANT_REF_H
#define KVMEM_QUANT_REF_H

#include <stddef.h>
#include <stdint.h>

#include "kvmem/quant.h"

struct kvmem_geometry;

/* The bits of a float, and back. */
uint32_t ref_f2u(float f);
float ref_u2f(uint32_t u);

/* Nearest FP16, ties to even; NaN 0, +-inf and overflow +-65504. */
uint16_t ref_f2h(float f);
/* The value of an FP16 bit pattern (IEEE binary16). */
float ref_h2f(uint16_t h);
/* The nearest FP16 value of @x: ref_h2f(ref_f2h(x)). */
float ref_half(float x);
/* The smallest FP16 >= @x (0 for x <= 0), 65504 beyond the range. */
uint16_t ref_half_ceil(double x);

/* The value formats of quant.h, written down. */
struct ref_fmt {
	const char *name;
	unsigned int bits;
	int qmax; /* 0 for fp16 */
};

extern const struct ref_fmt ref_fmts[KVMEM_FMT_NR];

/* Whether @fmt is one of the Lloyd-Max formats lm2, lm3, lm4. */
int ref_is_lm(int fmt);

/*
 * The levels of lm format @fmt, ascending, found here by Lloyd's fixed
 * point for a unit Gaussian (each level the mean of the density between
 * the midpoints to its neighbours), in double.
 */
const double *ref_lm_levels(int fmt);

/*
 * How far an lm value @x may read back from itself with scale @s: half the
 * widest gap between neighbouring levels, or, beyond the outermost level,
 * its distance from it (the format clips).
 */
double ref_lm_bound(int fmt, double x, double s);

/*
 * The scale of the @n values @x[0], @x[stride], ... in quantized format
 * @fmt: the smallest FP16 >= amax / qmax over the finite values, 0 for a
 * group of zeros; for the lm formats the FP16 nearest their root mean
 * square (over all n, non-finite ones counted as 0).
 */
uint16_t ref_scale(int fmt, const float *x, size_t n, size_t stride);

/*
 * q = round(x / s) clamped to +-qmax, s the FP16 scale @sh. *alt is the
 * other neighbour when x / s lies within a few float ulps of a tie, else
 * *q.
 */
void ref_q(float x, uint16_t sh, int qmax, int *q, int *alt);

/*
 * E4M3 written down from its definition (quant.h): code S.EEEE.MMM is
 * (8 + M) * 2^(E - 10), or M * 2^-9 for E = 0, negative with S; NaN for
 * S.1111.111.
 */
double ref_e4m3(unsigned int code);

/*
 * The stored bits of @x in quantized format @fmt with FP16 scale @sh: q of
 * ref_q() in @bits-bit two's complement, or for fp8 the E4M3 code whose
 * value is nearest |x| / s, found by search over every finite code (ties
 * to the even code), with x's sign; for lm the level nearest x / s (ties
 * to the smaller magnitude). *alt as ref_q()'s.
 */
void ref_code(int fmt, float x, uint16_t sh, uint32_t *code, uint32_t *alt);

/* What stored bits @raw of quantized format @fmt with scale @sh read back
 * as: q * s, E4M3 * s or level * s, rounded once to a float. */
float ref_read(int fmt, uint32_t raw, uint16_t sh);

/*
 * Does token @t of a layer of @n tokens live in a sealed page (kvmem.h's
 * picture: sink page, sealed pages of tokens_per_page, FP16 tail)? With
 * @full_tail, the last full page has not been sealed yet.
 */
int ref_tok_sealed(const struct kvmem_geometry *g, uint32_t n, int full_tail,
		   uint32_t t);

/*
 * A bound on |read - x| for value (@t, @h, @d) of a sealed page of a layer
 * with inputs @x ([tokens][kv_heads][head_dim]), @is_k for keys: s / 2 with
 * s the smallest FP16 >= amax / qmax (amax over the group, or the page's
 * channel, of the inputs and of their FP16 copies since a tail may be
 * sealed from either), plus 2^-20 relative for the quantizer's own float
 * division, plus |half(x) - x|. For fp8, half an E4M3 step of |x| / s
 * times s instead of s / 2: at most |x| / 16, or s * 2^-10 below 2^-6 * s.
 */
double ref_sealed_bound(const struct kvmem_geometry *g, const float *x,
			int is_k, uint32_t t, uint32_t h, uint32_t d);

#endif /* KVMEM_QUANT_REF_H */
