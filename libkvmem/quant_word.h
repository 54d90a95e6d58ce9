/*
 * quant_word.h - per-value FP16 conversion, shared by C and CUDA
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

/* Sign-extend the low @bits bits of @v. */
KVMEM_WORD_FN int kvmem_sext(unsigned int v, unsigned int bits)
{
	unsigned int m = 1u << (bits - 1);

	v &= (1u << bits) - 1;
	return (int)(v ^ m) - (int)m;
}

#endif /* KVMEM_QUANT_WORD_H */
