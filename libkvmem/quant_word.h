/* SPDX-License-Identifier: MIT */
/*
 * quant_word.h - per-value FP16 and FP8 conversion, shared by C and CUDA
 *
 * Integer-only except for one float addition in the subnormal case, which
 * relies on round-to-nearest (the default everywhere, and what CUDA's
 * device code does without -ftz).
 */
#ifndef KVMEM_QUANT_WORD_H
#define KVMEM_QUANT_WORD_H

#include <math.h>
#include <stdint.h>

#include "ecc_word.h"

#define KVMEM_HALF_MAX 0x7bffu /* 65504 */

union kvmem_f32 {
	float f;
	uint32_t u;
};

/*
 * Round to nearest even, saturating: NaN -> 0, overflow and +-inf ->
 * +-65504. A cache must never hand attention an inf or a NaN it made.
 * After Giesen's float_to_half_fast3_rtne: a normal result is the float's
 * bits shifted, with the rounding bias added first; a subnormal one falls out
 * of adding a magic number that puts the half's LSB at the float's.
 */
KVMEM_WORD_FN uint16_t kvmem_f2h(float f)
{
	const union kvmem_f32 denorm_magic = { .u = (127 - 15 + 23 - 10 + 1)
						    << 23 };
	union kvmem_f32 v = { .f = f };
	uint32_t sign = v.u & 0x80000000u;
	uint32_t o;

	v.u ^= sign;
	if (v.u > 0x7f800000u)
		return 0;
	if (v.u >= 0x477ff000u) /* 65520: rounds to inf */
		return (uint16_t)(sign >> 16 | KVMEM_HALF_MAX);
	if (v.u < (113u << 23)) { /* below 2^-14: subnormal or zero */
		v.f += denorm_magic.f;
		o = v.u - denorm_magic.u;
	} else {
		uint32_t odd = (v.u >> 13) & 1;

		v.u += ((uint32_t)(15 - 127) << 23) + 0xfff + odd;
		o = v.u >> 13;
	}
	return (uint16_t)(sign >> 16 | o);
}

KVMEM_WORD_FN float kvmem_h2f(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = h >> 10 & 0x1f, mant = h & 0x3ff;
	union kvmem_f32 v;

	if (exp == 0) {
		/* zero or subnormal: mant * 2^-24, exact in a float */
		v.f = (float)mant * 0x1p-24f;
		v.u |= sign;
	} else if (exp == 31) {
		v.u = sign | 0x7f800000u | mant << 13;
	} else {
		v.u = sign | (exp + 112) << 23 | mant << 13;
	}
	return v.f;
}

/* The smallest FP16 >= x, for x >= 0; saturates at 65504. */
KVMEM_WORD_FN uint16_t kvmem_f2h_up(float x)
{
	uint16_t h = kvmem_f2h(x);

	if (kvmem_h2f(h) < x && h < KVMEM_HALF_MAX)
		h++;
	return h;
}

/*
 * FP8 E4M3 (OCP FP8, CUDA's __nv_fp8_e4m3): sign, 4 exponent bits biased
 * by 7, 3 mantissa bits; subnormals below 2^-6, no infinities, the largest
 * value 448 (S.1111.110) and S.1111.111 NaN. The encoder never writes the
 * NaN code, so one read back was damaged past what the code saw.
 */
#define KVMEM_E4M3_MAX 448.0f
#define KVMEM_E4M3_MAXCODE 0x7eu
#define KVMEM_E4M3_NAN 0x7fu

/*
 * Nearest E4M3 (ties to even), saturating: NaN -> 0, +-inf and |f| >= 448
 * -> +-448. Saturating rather than rounding past 448 keeps the NaN code
 * unwritten. The same two steps as kvmem_f2h(), for 3 mantissa bits.
 */
KVMEM_WORD_FN uint8_t kvmem_f2e4m3(float f)
{
	/* A float whose ulp is E4M3's subnormal step, 2^-9. */
	const union kvmem_f32 denorm_magic = { .u = (127 - 7 + 23 - 3 + 1)
						    << 23 };
	union kvmem_f32 v = { .f = f };
	uint32_t sign = v.u >> 24 & 0x80;
	uint32_t o;

	v.u &= 0x7fffffffu;
	if (v.u > 0x7f800000u)
		return 0;
	if (v.f >= KVMEM_E4M3_MAX)
		return (uint8_t)(sign | KVMEM_E4M3_MAXCODE);
	if (v.u < (121u << 23)) { /* below 2^-6: subnormal or zero */
		v.f += denorm_magic.f;
		o = v.u - denorm_magic.u;
	} else {
		uint32_t odd = (v.u >> 20) & 1;

		v.u += ((uint32_t)(7 - 127) << 23) + 0x7ffff + odd;
		o = v.u >> 20;
	}
	return (uint8_t)(sign | o);
}

/* The value of an E4M3 code (exact in a float); NaN for the NaN code. */
KVMEM_WORD_FN float kvmem_e4m3_to_float(unsigned int c)
{
	uint32_t sign = (uint32_t)(c & 0x80) << 24;
	uint32_t exp = c >> 3 & 0xf, mant = c & 7;
	union kvmem_f32 v;

	if ((c & 0x7f) == KVMEM_E4M3_NAN) {
		v.u = sign | 0x7fc00000u;
	} else if (exp == 0) {
		v.f = (float)mant * 0x1p-9f;
		v.u |= sign;
	} else {
		v.u = sign | (exp + 120) << 23 | mant << 20;
	}
	return v.f;
}

/* @x, or 0 when it is NaN or +-inf: non-finite inputs are stored as 0. */
KVMEM_WORD_FN float kvmem_finite_or_zero(float x)
{
	union kvmem_f32 v = { .f = x };

	return (v.u & 0x7f800000u) == 0x7f800000u ? 0.0f : x;
}

/*
 * The scale of a group whose largest |x| is @amax: the smallest FP16 >=
 * amax / qmax, so no value is clipped.
 */
KVMEM_WORD_FN uint16_t kvmem_scale_of(float amax, int qmax)
{
	return kvmem_f2h_up(amax / (float)qmax);
}

/* q = round(x / s) (ties to even), clamped to +-qmax, as stored bits. */
KVMEM_WORD_FN unsigned int kvmem_quant_one(float x, float s, int qmax)
{
	float r;

	if (s == 0.0f)
		return 0;
	r = rintf(kvmem_finite_or_zero(x) / s);
	if (r > (float)qmax)
		r = (float)qmax;
	if (r < (float)-qmax)
		r = (float)-qmax;
	return (unsigned int)(int)r;
}

/* x / s as E4M3, 0 for a zero scale: the stored bits (quant.h). */
KVMEM_WORD_FN unsigned int kvmem_quant_fp8(float x, float s)
{
	if (s == 0.0f)
		return 0;
	return kvmem_f2e4m3(kvmem_finite_or_zero(x) / s);
}

/* Sign-extend the low @bits bits of @v. */
KVMEM_WORD_FN int kvmem_sext(unsigned int v, unsigned int bits)
{
	unsigned int m = 1u << (bits - 1);

	v &= (1u << bits) - 1;
	return (int)(v ^ m) - (int)m;
}

#endif /* KVMEM_QUANT_WORD_H */
