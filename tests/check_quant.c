/* SPDX-License-Identifier: MIT */
/*
 * check_quant.c - value formats and group-wise quantization against a
 * reference written from the contract in kvmem/quant.h
 *
 * Nothing here derives an expected value from the code under test: in the
 * reference (quant_ref.c) the FP16 conversion is bit-level integer
 * arithmetic (round to nearest, ties to even), "the smallest FP16 >= x" is
 * a binary search over the FP16 values decoded by that reference,
 * q = round(x / s) is computed in double, and the FP8 code of x / s is a
 * search over the E4M3 values decoded from their bit formula. The
 * bitstream is read back one bit at a time (ecc_ref.c).
 *
 * Rounding ties may go either way (the contract says round(), not which
 * one): where x / s is within a few float ulps of k + 1/2 either neighbour
 * is accepted, everywhere else q must be exactly the nearest integer.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ecc_ref.h"
#include "kvmem/quant.h"
#include "kvmem_check.h"
#include "quant_ref.h"
#include "quant_word.h"
#include "rng.h"

/* ---- Bitstreams ---------------------------------------------------------- */

/* Value @i of a @b-bit two's complement stream. */
static int get_q(const uint8_t *p, size_t i, unsigned int b)
{
	uint64_t v = ref_get_bits(p, i * b, b);

	return v >> (b - 1) ? (int)v - (1 << b) : (int)v;
}

/* ---- Test data and buffers ----------------------------------------------- */

#define GUARD 16
#define GUARD_BYTE 0xa7

/* @len bytes followed by GUARD guard bytes, all GUARD_BYTE. */
static void *guarded(size_t len)
{
	uint8_t *p = kvmem_check_xmalloc(len + GUARD);

	memset(p, GUARD_BYTE, len + GUARD);
	return p;
}

static void check_guard(const void *buf, size_t len, const char *what)
{
	const uint8_t *p = buf;
	unsigned int i;

	for (i = 0; i < GUARD; i++)
		EXPECT_EQ(p[len + i], GUARD_BYTE,
			  "%s: written past its %zu bytes (guard byte %u)",
			  what, len, i);
}

/* Magnitudes from 2^-20 to 2^12, so scales from subnormal to large. */
static double rnd_mag(struct kvmem_rng *r)
{
	return ldexp(1.0 + kvmem_rng_unit(r), (int)kvmem_rng_below(r, 33) - 20);
}

static void fill_values(struct kvmem_rng *r, float *x, size_t n,
			unsigned int group)
{
	double mag = 1;
	size_t i;

	for (i = 0; i < n; i++) {
		if (i % group == 0)
			mag = rnd_mag(r);
		x[i] = kvmem_check_rnd_value(r, mag);
	}
}

/* ---- Checking a quantized buffer ----------------------------------------- */

/*
 * Value @i = @x, stored as @raw with scale @sh and read back as @y: raw is
 * the reference's code (or its neighbour at a tie), y is exactly what that
 * code reads as, and within s / 2 of x (int formats) or half an E4M3 step
 * of x (fp8: |x| / 16, or s * 2^-10 for the subnormals) unless x is beyond
 * the range.
 */
static void check_value(int fmt, float x, uint32_t raw, float y, uint16_t sh,
			const char *what, size_t i)
{
	const struct ref_fmt *f = &ref_fmts[fmt];
	float s = ref_h2f(sh);
	uint32_t rc, alt;

	ref_code(fmt, x, sh, &rc, &alt);
	if (raw != alt)
		EXPECT_EQ(raw, rc, "%s %s: code of value %zu = %a, scale %a",
			  what, f->name, i, x, s);
	EXPECT(y == ref_read(fmt, raw, sh),
	       "%s %s: value %zu read back as %a, code 0x%x * s %a = %a", what,
	       f->name, i, y, raw, s, ref_read(fmt, raw, sh));
	if (isfinite(x) && ref_is_lm(fmt)) {
		double err = fabs((double)x - (double)y);
		double bound = ref_lm_bound(fmt, x, s) * (1 + 0x1p-12) +
			       fabs(y) * 0x1p-24;

		EXPECT(err <= bound,
		       "%s %s: value %zu = %a read back as %a, error %a > %a",
		       what, f->name, i, x, y, err, bound);
	} else if (isfinite(x) && fabs((double)x) <= 65504.0 * f->qmax) {
		double err = fabs((double)x - (double)y);
		double tie = raw == alt && rc != alt ? 1 + 0x1p-12 : 1;
		double bound = fmt == KVMEM_FMT_FP8
				       ? fmax(fabs(x) / 16, s * 0x1p-10) * tie +
						 fabs(y) * 0x1p-24
				       : s * 0.5 * tie;

		EXPECT(err <= bound,
		       "%s %s: value %zu = %a read back as %a, error %a > %a",
		       what, f->name, i, x, y, err, bound);
	}
}

/*
 * Quantize @x[0..n) with @group, check scales and bitstream against the
 * reference and the dequantized values against both.
 */
static void check_quant(int fmt, const float *x, size_t n, unsigned int group,
			const char *what)
{
	const struct ref_fmt *f = &ref_fmts[fmt];
	size_t nbytes = (n * f->bits + 7) / 8;
	size_t ngroups = (n + group - 1) / group;
	uint16_t *scales = guarded(ngroups * 2);
	uint8_t *bits = guarded(nbytes);
	float *y = guarded(n * sizeof(float));
	size_t i, g;

	ck_assert_int_eq(kvmem_quantize(fmt, x, n, group, scales, bits), 0);
	check_guard(bits, nbytes, "bits");
	check_guard(scales, ngroups * 2, "scales");
	if ((n * f->bits) % 8)
		EXPECT_EQ(bits[nbytes - 1] >> ((n * f->bits) % 8), 0,
			  "%s %s n %zu: spare bits of the last byte", what,
			  f->name, n);
	ck_assert_int_eq(kvmem_dequantize(fmt, bits, scales, n, group, y), 0);
	check_guard(y, n * sizeof(float), "dequantized values");

	if (fmt == KVMEM_FMT_FP16) {
		for (i = 0; i < ngroups * 2; i++)
			EXPECT_EQ(((uint8_t *)scales)[i], GUARD_BYTE,
				  "%s: fp16 wrote scale byte %zu", what, i);
		for (i = 0; i < n; i++) {
			uint16_t h = (uint16_t)ref_get_bits(bits, i * 16, 16);

			if (isinf(x[i]))
				/* quant.h: non-finite inputs are stored as 0;
				 * kvmem_half_from_float(): inf is 65504. */
				EXPECT(h == 0 || h == ref_f2h(x[i]),
				       "%s: value %zu = %a stored as 0x%04x",
				       what, i, x[i], h);
			else
				EXPECT_EQ(h, ref_f2h(x[i]),
					  "%s: value %zu = %a", what, i, x[i]);
			EXPECT_EQ(ref_f2u(y[i]), ref_f2u(ref_h2f(h)),
				  "%s: value %zu read back from 0x%04x", what,
				  i, h);
		}
		goto out;
	}

	for (g = 0; g < ngroups; g++) {
		size_t g0 = g * group, glen = n - g0 < group ? n - g0 : group;
		uint16_t sh = ref_scale(fmt, x + g0, glen, 1);
		float s = ref_h2f(sh);

		EXPECT_EQ(scales[g], sh,
			  "%s %s n %zu group %u: scale of group %zu (got %a, "
			  "expected %a)",
			  what, f->name, n, group, g, ref_h2f(scales[g]), s);
		for (i = g0; i < g0 + glen; i++)
			check_value(fmt, x[i],
				    (uint32_t)ref_get_bits(bits, i * f->bits,
							   f->bits),
				    y[i], sh, what, i);
	}
out:
	free(scales);
	free(bits);
	free(y);
}

/* ---- Formats ------------------------------------------------------------- */

START_TEST(test_format_table)
{
	static const int bad[] = { -1, KVMEM_FMT_NR, KVMEM_FMT_NR + 1, 255,
				   1 << 20 };
	static const char *const bad_names[] = {
		"", "int", "int3", "INT4", "fp32", "int4 ", "fp16\n", "bf16",
	};
	unsigned int i;

	for (i = 0; i < KVMEM_FMT_NR; i++) {
		const struct kvmem_format_info *fi = kvmem_format_get((int)i);

		ck_assert_ptr_nonnull(fi);
		ck_assert_str_eq(fi->name, ref_fmts[i].name);
		ck_assert_uint_eq(fi->bits, ref_fmts[i].bits);
		ck_assert_int_eq(fi->qmax, ref_fmts[i].qmax);
		ck_assert_int_eq(kvmem_format_by_name(ref_fmts[i].name),
				 (int)i);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_ptr_null(kvmem_format_get(bad[i]));
	for (i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++)
		ck_assert_int_eq(kvmem_format_by_name(bad_names[i]), -EINVAL);
}
END_TEST

/* ---- FP16 conversion ----------------------------------------------------- */

START_TEST(test_half_reference_selfcheck)
{
	/* The reference itself, against values worked out by hand. */
	ck_assert_uint_eq(ref_f2h(1.0f), 0x3c00);
	ck_assert_uint_eq(ref_f2h(0.1f), 0x2e66);
	ck_assert_uint_eq(ref_f2h(-2.0f), 0xc000);
	ck_assert_uint_eq(ref_f2h(0x1p-24f), 0x0001);
	ck_assert_uint_eq(ref_f2h(0x1p-14f), 0x0400);
	ck_assert_uint_eq(ref_f2h(65504.0f), 0x7bff);
	ck_assert_uint_eq(ref_half_ceil(0.5 / 7), 0x2c93);
	ck_assert_uint_eq(ref_half_ceil(1.0), 0x3c00);
	ck_assert_uint_eq(ref_half_ceil(1.0 + 0x1p-30), 0x3c01);
	ck_assert_uint_eq(ref_half_ceil(1e-30), 0x0001);
	ck_assert_uint_eq(ref_half_ceil(70000), 0x7bff);
	ck_assert(ref_h2f(0x3555) == 0x1.554p-2f);
	ck_assert(ref_h2f(0x8001) == -0x1p-24f);
	ck_assert(isinf(ref_h2f(0xfc00)) && ref_h2f(0xfc00) < 0);
	ck_assert(isnan(ref_h2f(0x7e00)));
}
END_TEST

START_TEST(test_half_to_float_all)
{
	unsigned int h;

	for (h = 0; h < 0x10000; h++) {
		float got = kvmem_half_to_float((uint16_t)h);
		float exp = ref_h2f((uint16_t)h);

		if (isnan(exp))
			EXPECT(isnan(got), "half 0x%04x gave %a", h, got);
		else
			EXPECT_EQ(ref_f2u(got), ref_f2u(exp),
				  "half 0x%04x: %a vs %a", h, got, exp);
	}
}
END_TEST

START_TEST(test_half_roundtrip_all)
{
	unsigned int h;

	for (h = 0; h < 0x10000; h++) {
		uint16_t back = kvmem_half_from_float(ref_h2f((uint16_t)h));
		unsigned int e = h >> 10 & 31;

		if (e != 31)
			EXPECT_EQ(back, h, "half 0x%04x round trip", h);
		else if (h & 0x3ff) /* NaN gives 0 */
			EXPECT_EQ(back, 0, "NaN 0x%04x", h);
		else /* +-inf saturate */
			EXPECT_EQ(back, (h & 0x8000) | 0x7bff, "inf 0x%04x", h);
	}
}
END_TEST

static void check_f2h(float f, const char *what)
{
	EXPECT_EQ(kvmem_half_from_float(f), ref_f2h(f), "%s: float %a (0x%08x)",
		  what, f, ref_f2u(f));
}

START_TEST(test_half_from_float_sweep)
{
	uint64_t u;
	unsigned int h;

	/* A stride through every float bit pattern, signs and NaNs too. */
	for (u = 0; u < 1ull << 32; u += 4093)
		check_f2h(ref_u2f((uint32_t)u), "sweep");
	/* Every FP16 value, the midpoints to its neighbour (exact ties) and
	 * one float ulp either side of those. */
	for (h = 0; h < 0x7c00; h++) {
		double a = ref_h2f((uint16_t)h);
		double b = h < 0x7bff ? ref_h2f((uint16_t)(h + 1)) : 65536.0;
		float mid = (float)((a + b) / 2);
		int sgn;

		ck_assert((double)mid == (a + b) / 2);
		for (sgn = 0; sgn < 2; sgn++) {
			uint32_t s = sgn ? 0x80000000u : 0;

			check_f2h(ref_u2f(ref_f2u((float)a) | s), "value");
			check_f2h(ref_u2f(ref_f2u(mid) | s), "tie");
			check_f2h(ref_u2f((ref_f2u(mid) + 1) | s), "tie + ulp");
			if (ref_f2u(mid) & 0x7fffffff)
				check_f2h(ref_u2f((ref_f2u(mid) - 1) | s),
					  "tie - ulp");
		}
	}
	/* Every float below the smallest FP16 subnormal's midpoint region
	 * and the whole subnormal FP16 range at a finer stride. */
	for (u = 0x33000000u - 0x100000u; u < 0x38800000u + 0x100000u; u += 61)
		check_f2h(ref_u2f((uint32_t)u), "subnormal");
	/* Around the top of the range. */
	for (u = 0x477fe000u - 0x2000u; u < 0x47801000u; u++)
		check_f2h(ref_u2f((uint32_t)u), "top");
}
END_TEST

START_TEST(test_half_from_float_specials)
{
	static const struct {
		float f;
		uint16_t h;
	} tab[] = {
		{ 0.0f, 0x0000 },
		{ -0.0f, 0x8000 },
		{ 1.0f, 0x3c00 },
		{ -1.0f, 0xbc00 },
		{ 0.1f, 0x2e66 },
		{ 1.0f + 0x1p-11f, 0x3c00 }, /* tie, to even */
		{ 1.0f + 0x3p-11f, 0x3c02 }, /* tie, to even */
		{ 1.0f + 0x1p-11f + 0x1p-23f, 0x3c01 },
		{ 0x1p-24f, 0x0001 },
		{ 0x1p-25f, 0x0000 }, /* tie between 0 and 2^-24 */
		{ -0x1p-25f, 0x8000 },
		{ 0x1.000002p-25f, 0x0001 },
		{ 0x3p-25f, 0x0002 }, /* tie, to even */
		{ 0x1p-30f, 0x0000 },
		{ 0x1p-149f, 0x0000 }, /* float subnormal */
		{ 0x1.ff8p-15f, 0x03ff }, /* largest subnormal */
		{ 0x1.ffcp-15f, 0x0400 }, /* tie, rounds up into the normals */
		{ 0x1p-14f, 0x0400 },
		{ 65504.0f, 0x7bff },
		{ -65504.0f, 0xfbff },
		{ 65512.0f,
		  0x7bff }, /* tie with 65536: even is inf, saturate */
		{ 65519.99f, 0x7bff },
		{ 65520.0f, 0x7bff },
		{ 1e10f, 0x7bff },
		{ -3e38f, 0xfbff },
		{ INFINITY, 0x7bff },
		{ -INFINITY, 0xfbff },
		{ NAN, 0x0000 },
		{ -NAN, 0x0000 },
	};
	unsigned int i;

	for (i = 0; i < sizeof(tab) / sizeof(tab[0]); i++) {
		EXPECT_EQ(ref_f2h(tab[i].f), tab[i].h, "reference, entry %u",
			  i);
		EXPECT_EQ(kvmem_half_from_float(tab[i].f), tab[i].h,
			  "entry %u: %a", i, tab[i].f);
	}
	/* NaNs with payloads. */
	EXPECT_EQ(kvmem_half_from_float(ref_u2f(0x7f800001u)), 0, "%s", "sNaN");
	EXPECT_EQ(kvmem_half_from_float(ref_u2f(0xffffffffu)), 0, "%s", "-NaN");
}
END_TEST

/* ---- Quantization -------------------------------------------------------- */

START_TEST(test_quant_hand_examples)
{
	static const float x4[] = { 1, -1, 7, -7 };
	static const float x4b[] = { 0.5f, -0.25f, 0.1f };
	static const float x8[] = { 127, -127, 1, -1, 0 };
	static const float x2[] = { 1, -1, 0, 1, -1 };
	static const float xh[] = { 1.0f, -2.0f, 65504.0f, 0.5f };
	uint8_t bits[16];
	uint16_t sc[4];
	float y[8];

	/* int4 [1, -1, 7, -7]: scale 1, nibbles 1 f 7 9. */
	memset(bits, 0xee, sizeof(bits));
	ck_assert_int_eq(kvmem_quantize(KVMEM_FMT_INT4, x4, 4, 4, sc, bits), 0);
	ck_assert_uint_eq(sc[0], 0x3c00);
	ck_assert_uint_eq(bits[0], 0xf1);
	ck_assert_uint_eq(bits[1], 0x97);
	ck_assert_uint_eq(bits[2], 0xee);
	ck_assert_int_eq(kvmem_dequantize(KVMEM_FMT_INT4, bits, sc, 4, 4, y),
			 0);
	ck_assert_float_eq(y[0], 1);
	ck_assert_float_eq(y[1], -1);
	ck_assert_float_eq(y[2], 7);
	ck_assert_float_eq(y[3], -7);

	/* int4 [0.5, -0.25, 0.1]: scale = smallest FP16 >= 0.5 / 7 =
	 * 0x2c93 (0.07147216796875); q = 7, -3, 1 -> nibbles 7 d 1. */
	memset(bits, 0xee, sizeof(bits));
	ck_assert_int_eq(kvmem_quantize(KVMEM_FMT_INT4, x4b, 3, 32, sc, bits),
			 0);
	ck_assert_uint_eq(sc[0], 0x2c93);
	ck_assert_uint_eq(bits[0], 0xd7);
	ck_assert_uint_eq(bits[1], 0x01);
	ck_assert_int_eq(kvmem_dequantize(KVMEM_FMT_INT4, bits, sc, 3, 32, y),
			 0);
	ck_assert_float_eq(y[0], 7 * 0.07147216796875f);
	ck_assert_float_eq(y[1], -3 * 0.07147216796875f);
	ck_assert_float_eq(y[2], 0.07147216796875f);

	/* int8 [127, -127, 1, -1, 0]: scale 1. */
	memset(bits, 0xee, sizeof(bits));
	ck_assert_int_eq(kvmem_quantize(KVMEM_FMT_INT8, x8, 5, 8, sc, bits), 0);
	ck_assert_uint_eq(sc[0], 0x3c00);
	ck_assert_uint_eq(bits[0], 0x7f);
	ck_assert_uint_eq(bits[1], 0x81);
	ck_assert_uint_eq(bits[2], 0x01);
	ck_assert_uint_eq(bits[3], 0xff);
	ck_assert_uint_eq(bits[4], 0x00);
	ck_assert_uint_eq(bits[5], 0xee);

	/* int2 [1, -1, 0, 1, -1]: 01 11 00 01 | 11 -> 0x4d 0x03. */
	memset(bits, 0xee, sizeof(bits));
	ck_assert_int_eq(kvmem_quantize(KVMEM_FMT_INT2, x2, 5, 5, sc, bits), 0);
	ck_assert_uint_eq(sc[0], 0x3c00);
	ck_assert_uint_eq(bits[0], 0x4d);
	ck_assert_uint_eq(bits[1], 0x03);
	ck_assert_uint_eq(bits[2], 0xee);

	/* int2, two groups of 2: [3, -3 | 0.5, 0] -> scales 3 (0x4200) and
	 * 0.5 (0x3800), q 1 -1 1 0 -> 01 11 01 00 = 0x1d. */
	{
		static const float x2b[] = { 3, -3, 0.5f, 0 };

		ck_assert_int_eq(
			kvmem_quantize(KVMEM_FMT_INT2, x2b, 4, 2, sc, bits), 0);
		ck_assert_uint_eq(sc[0], 0x4200);
		ck_assert_uint_eq(sc[1], 0x3800);
		ck_assert_uint_eq(bits[0], 0x1d);
	}

	/* fp16: the halves, little-endian. */
	memset(bits, 0xee, sizeof(bits));
	ck_assert_int_eq(kvmem_quantize(KVMEM_FMT_FP16, xh, 4, 32, sc, bits),
			 0);
	ck_assert_uint_eq(bits[0], 0x00);
	ck_assert_uint_eq(bits[1], 0x3c);
	ck_assert_uint_eq(bits[2], 0x00);
	ck_assert_uint_eq(bits[3], 0xc0);
	ck_assert_uint_eq(bits[4], 0xff);
	ck_assert_uint_eq(bits[5], 0x7b);
	ck_assert_uint_eq(bits[6], 0x00);
	ck_assert_uint_eq(bits[7], 0x38);
	ck_assert_uint_eq(bits[8], 0xee);
	ck_assert_int_eq(kvmem_dequantize(KVMEM_FMT_FP16, bits, NULL, 4, 32, y),
			 0);
	ck_assert_float_eq(y[0], 1.0f);
	ck_assert_float_eq(y[1], -2.0f);
	ck_assert_float_eq(y[2], 65504.0f);
	ck_assert_float_eq(y[3], 0.5f);
}
END_TEST

START_TEST(test_quant_roundtrip_int)
{
	static const size_t ns[] = {
		1, 2, 3, 5, 31, 32, 33, 64, 100, 1000, 4097
	};
	static const unsigned int groups[] = { 1, 3, 7, 16, 32, 64, 128, 5000 };
	struct kvmem_rng r;
	char what[96];
	unsigned int fmt, gi, ni;

	kvmem_rng_seed(&r, 0x9a117);
	for (fmt = KVMEM_FMT_INT8; fmt < KVMEM_FMT_VQ2; fmt++)
		for (gi = 0; gi < sizeof(groups) / sizeof(groups[0]); gi++)
			for (ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
				size_t n = ns[ni];
				float *x =
					kvmem_check_xmalloc(n * sizeof(float));

				fill_values(&r, x, n, groups[gi]);
				snprintf(what, sizeof(what),
					 "random n %zu group %u", n,
					 groups[gi]);
				check_quant((int)fmt, x, n, groups[gi], what);
				free(x);
			}
}
END_TEST

START_TEST(test_quant_exact_scales)
{
	/* amax a multiple of qmax by an FP16: the scale is exactly that, and
	 * values at +-amax come back exactly. */
	struct kvmem_rng r;
	unsigned int fmt, i, t;
	float x[64];

	kvmem_rng_seed(&r, 0xe4ac7);
	for (fmt = KVMEM_FMT_INT8; fmt <= KVMEM_FMT_FP8; fmt++)
		for (t = 0; t < 200; t++) {
			uint16_t sh =
				(uint16_t)(1 + kvmem_rng_below(&r, 0x7bff));
			float s = ref_h2f(sh);
			float amax = s * (float)ref_fmts[fmt].qmax;
			uint16_t got;
			uint8_t bits[64];

			for (i = 0; i < 64; i++)
				x[i] = (float)((kvmem_rng_unit(&r) * 2 - 1) *
					       amax);
			x[kvmem_rng_below(&r, 64)] =
				kvmem_rng_below(&r, 2) ? amax : -amax;
			ck_assert_int_eq(
				kvmem_quantize((int)fmt, x, 64, 64, &got, bits),
				0);
			EXPECT_EQ(got, sh, "%s: amax %a = %d * %a",
				  ref_fmts[fmt].name, amax, ref_fmts[fmt].qmax,
				  s);
			check_quant((int)fmt, x, 64, 64, "exact scale");
		}
}
END_TEST

START_TEST(test_quant_fp16_format)
{
	struct kvmem_rng r;
	size_t n = 3001, i;
	float *x = kvmem_check_xmalloc(n * sizeof(float));

	kvmem_rng_seed(&r, 0xf16);
	/* Representable values (exact), then arbitrary ones (rounded). */
	for (i = 0; i < n; i++) {
		uint16_t h = (uint16_t)kvmem_rng_below(&r, 0x10000);

		if ((h >> 10 & 31) == 31)
			h &= 0xfbff;
		x[i] = ref_h2f(h);
	}
	check_quant(KVMEM_FMT_FP16, x, n, 32, "representable");
	fill_values(&r, x, n, 7);
	check_quant(KVMEM_FMT_FP16, x, n, 7, "random");
	/* group is ignored for fp16. */
	check_quant(KVMEM_FMT_FP16, x, 3, 1, "group 1");
	/* Out of range and NaN. */
	x[0] = 1e9f;
	x[1] = -70000.0f;
	x[2] = NAN;
	x[3] = 65519.0f;
	check_quant(KVMEM_FMT_FP16, x, 4, 32, "out of range");
	free(x);
}
END_TEST

START_TEST(test_quant_zero_group)
{
	float x[96];
	uint16_t sc[3];
	uint8_t bits[96];
	unsigned int fmt, i;

	for (fmt = KVMEM_FMT_INT8; fmt <= KVMEM_FMT_FP8; fmt++) {
		for (i = 0; i < 96; i++)
			x[i] = 0.25f * (float)((int)i % 9 - 4);
		for (i = 32; i < 64; i++)
			x[i] = i & 1 ? -0.0f : 0.0f;
		memset(bits, 0xee, sizeof(bits));
		ck_assert_int_eq(kvmem_quantize((int)fmt, x, 96, 32, sc, bits),
				 0);
		EXPECT_EQ(sc[1], 0, "%s: scale of a zero group",
			  ref_fmts[fmt].name);
		for (i = 32; i < 64; i++)
			EXPECT_EQ(get_q(bits, i, ref_fmts[fmt].bits), 0,
				  "%s: q of zero %u", ref_fmts[fmt].name, i);
		check_quant((int)fmt, x, 96, 32, "zero group");
		/* All zeros: scale 0 everywhere, an all-zero stream. */
		memset(x, 0, sizeof(x));
		ck_assert_int_eq(kvmem_quantize((int)fmt, x, 96, 32, sc, bits),
				 0);
		for (i = 0; i < 3; i++)
			ck_assert_uint_eq(sc[i], 0);
		for (i = 0; i < 96 * ref_fmts[fmt].bits / 8; i++)
			ck_assert_uint_eq(bits[i], 0);
	}
}
END_TEST

START_TEST(test_quant_nonfinite)
{
	float x[40];
	uint16_t sc[5];
	uint8_t bits[40];
	unsigned int fmt, i;

	for (fmt = KVMEM_FMT_INT8; fmt <= KVMEM_FMT_FP8; fmt++) {
		for (i = 0; i < 40; i++)
			x[i] = 0.01f * (float)i - 0.1f;
		x[3] = NAN;
		x[5] = INFINITY;
		x[6] = -INFINITY;
		x[7] = -NAN;
		for (i = 8; i < 16; i++) /* a group of nothing but these */
			x[i] = i % 3 ? INFINITY : NAN;
		x[20] = -INFINITY; /* alone with small values */
		ck_assert_int_eq(kvmem_quantize((int)fmt, x, 40, 8, sc, bits),
				 0);
		/* Group 0's amax is |x[0]| = 0.1; group 1 has none. */
		EXPECT_EQ(sc[0],
			  ref_half_ceil((double)0.1f / ref_fmts[fmt].qmax),
			  "%s", ref_fmts[fmt].name);
		EXPECT_EQ(sc[1], 0, "%s", ref_fmts[fmt].name);
		for (i = 3; i < 16; i++)
			if (i != 4)
				EXPECT_EQ(get_q(bits, i, ref_fmts[fmt].bits), 0,
					  "%s: non-finite value %u",
					  ref_fmts[fmt].name, i);
		EXPECT_EQ(get_q(bits, 20, ref_fmts[fmt].bits), 0, "%s",
			  ref_fmts[fmt].name);
		check_quant((int)fmt, x, 40, 8, "non-finite");
	}
}
END_TEST

START_TEST(test_quant_saturate)
{
	unsigned int fmt, i;

	for (fmt = KVMEM_FMT_INT8; fmt <= KVMEM_FMT_FP8; fmt++) {
		int qmax = ref_fmts[fmt].qmax;
		float x[8] = { 1e9f,
			       -3e38f,
			       5.0f,
			       0.0f,
			       65504.0f * (float)qmax * 2,
			       -1e30f,
			       1e-3f,
			       -65504.0f * (float)qmax };
		float y[8];
		uint16_t sc[2];
		uint8_t bits[8];

		ck_assert_int_eq(kvmem_quantize((int)fmt, x, 8, 4, sc, bits),
				 0);
		ck_assert_uint_eq(sc[0], 0x7bff);
		ck_assert_uint_eq(sc[1], 0x7bff);
		ck_assert_int_eq(kvmem_dequantize((int)fmt, bits, sc, 8, 4, y),
				 0);
		ck_assert_float_eq(y[0], 65504.0f * (float)qmax);
		ck_assert_float_eq(y[1], -65504.0f * (float)qmax);
		ck_assert_float_eq(y[4], 65504.0f * (float)qmax);
		ck_assert_float_eq(y[5], -65504.0f * (float)qmax);
		ck_assert_float_eq(y[7], -65504.0f * (float)qmax);
		for (i = 0; i < 8; i++)
			ck_assert_int_le(
				abs(get_q(bits, i, ref_fmts[fmt].bits)), qmax);
		check_quant((int)fmt, x, 8, 4, "saturate");
	}
}
END_TEST

START_TEST(test_quant_tiny)
{
	/* amax / qmax below the smallest FP16: scale 2^-24 (0x0001). */
	static const float x[] = { 1e-10f, -3e-9f, 0.0f, 2e-12f };
	static const float xs[] = { 3e-7f, -1e-7f, 0x1p-24f, 0x3p-25f };
	unsigned int fmt;
	uint16_t sc[1];
	uint8_t bits[8];

	for (fmt = KVMEM_FMT_INT8; fmt <= KVMEM_FMT_FP8; fmt++) {
		ck_assert_int_eq(kvmem_quantize((int)fmt, x, 4, 4, sc, bits),
				 0);
		ck_assert_uint_eq(sc[0], 0x0001);
		check_quant((int)fmt, x, 4, 4, "tiny");
		check_quant((int)fmt, xs, 4, 4, "subnormal scale");
		check_quant((int)fmt, xs, 4, 1, "subnormal scale group 1");
	}
}
END_TEST

START_TEST(test_dequant_twos_complement)
{
	/* The most negative code of each width is read back as two's
	 * complement, as a corrupted stream may carry it. */
	uint8_t b8[2] = { 0x80, 0x7f }, b4[1] = { 0x78 }, b2[1] = { 0x1e };
	uint16_t sc[1] = { 0x4000 }; /* 2.0 */
	float y[4];

	ck_assert_int_eq(kvmem_dequantize(KVMEM_FMT_INT8, b8, sc, 2, 2, y), 0);
	ck_assert_float_eq(y[0], -256.0f);
	ck_assert_float_eq(y[1], 254.0f);
	ck_assert_int_eq(kvmem_dequantize(KVMEM_FMT_INT4, b4, sc, 2, 2, y), 0);
	ck_assert_float_eq(y[0], -16.0f);
	ck_assert_float_eq(y[1], 14.0f);
	/* 0x1e = 00 01 11 10: -2, -1, 1, 0. */
	ck_assert_int_eq(kvmem_dequantize(KVMEM_FMT_INT2, b2, sc, 4, 4, y), 0);
	ck_assert_float_eq(y[0], -4.0f);
	ck_assert_float_eq(y[1], -2.0f);
	ck_assert_float_eq(y[2], 2.0f);
	ck_assert_float_eq(y[3], 0.0f);
}
END_TEST

/* ---- FP8 (E4M3) ---------------------------------------------------------- */

START_TEST(test_fp8_reference_selfcheck)
{
	/* The OCP FP8 specification's E4M3 table, by hand. */
	static const struct {
		unsigned int code;
		double v;
	} known[] = {
		{ 0x00, 0 },	  { 0x01, 0x1p-9 },  { 0x07, 7 * 0x1p-9 },
		{ 0x08, 0x1p-6 }, { 0x38, 1 },	     { 0x39, 1.125 },
		{ 0x40, 2 },	  { 0x77, 240 },     { 0x78, 256 },
		{ 0x7e, 448 },	  { 0x80, -0.0 },    { 0xb8, -1 },
		{ 0xfe, -448 },	  { 0x81, -0x1p-9 },
	};
	unsigned int i, c;

	for (i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		EXPECT(ref_e4m3(known[i].code) == known[i].v,
		       "code 0x%02x: %a, not %a", known[i].code,
		       ref_e4m3(known[i].code), known[i].v);
	ck_assert(isnan(ref_e4m3(0x7f)) && isnan(ref_e4m3(0xff)));
	/* Strictly increasing over the positive codes: one value each. */
	for (c = 1; c < 0x7f; c++)
		EXPECT(ref_e4m3(c) > ref_e4m3(c - 1), "code 0x%02x", c);
}
END_TEST

/*
 * Every code read back, at scales from subnormal to the largest: the code's
 * value times s, rounded once. The NaN codes, which no encoder writes and
 * which a damaged stream may carry, read back as NaN here: it is the page
 * decoder that erases them (check_nonfinite.c).
 */
START_TEST(test_fp8_dequant_all_codes)
{
	static const uint16_t sc[] = { 0x3c00, 0x0001, 0x0155, 0x2e66,
				       0x5b21, 0x7bff, 0 };
	uint8_t codes[256];
	uint16_t scales[256];
	float y[256];
	unsigned int c, i;

	for (c = 0; c < 256; c++)
		codes[c] = (uint8_t)c;
	for (i = 0; i < sizeof(sc) / sizeof(sc[0]); i++) {
		for (c = 0; c < 256; c++)
			scales[c] = sc[i];
		ck_assert_int_eq(kvmem_dequantize(KVMEM_FMT_FP8, codes, scales,
						  256, 1, y),
				 0);
		for (c = 0; c < 256; c++) {
			if ((c & 0x7f) == 0x7f) {
				EXPECT(isnan(y[c]),
				       "NaN code 0x%02x, scale "
				       "0x%04x: %a",
				       c, sc[i], y[c]);
				continue;
			}
			EXPECT_EQ(
				ref_f2u(y[c]),
				ref_f2u((float)(ref_e4m3(c) * ref_h2f(sc[i]))),
				"code 0x%02x, scale 0x%04x: %a", c, sc[i],
				y[c]);
		}
	}
}
END_TEST

/*
 * The encoder at each boundary between two neighbouring codes, with scale 1
 * exactly (a group whose amax is 448) and at powers of two, where x / s is
 * exact and the nearest code is unique but for true ties: the midpoint
 * itself (ties to the even code), the floats either side of it, the codes'
 * own values; both signs; and a sweep of 64 floats a binade from 2^-12 to
 * 2^10. Values past 448 * s only come of a saturated scale
 * (test_quant_saturate) or of the float division: test_fp8_word.
 */
START_TEST(test_fp8_boundaries)
{
	enum { G = 64 };
	float *x = kvmem_check_xmalloc(4096 * sizeof(float));
	uint8_t bits[G];
	uint16_t sh;
	size_t n = 0, i;
	unsigned int c, k, e, m;
	int p;

	for (c = 0; c < 0x7e; c++) {
		float lo = (float)ref_e4m3(c), hi = (float)ref_e4m3(c + 1);
		float mid = (float)((ref_e4m3(c) + ref_e4m3(c + 1)) / 2);

		x[n++] = lo;
		x[n++] = mid;
		x[n++] = nextafterf(mid, 0);
		x[n++] = nextafterf(mid, 1000);
		x[n++] = hi;
	}
	x[n++] = nextafterf(0x1p-10f, 0); /* below half the least subnormal */
	x[n++] = 0x1p-10f; /* its tie with 0 */
	x[n++] = nextafterf(0x1p-10f, 1);
	x[n++] = 0x1p-149f;
	for (e = 0; e < 20; e++)
		for (m = 0; m < 64; m++)
			x[n++] = ldexpf(1.0f + (float)m / 64 + 0x1p-23f * m,
					(int)e - 12);
	for (i = 0, k = (unsigned int)n; i < k; i++)
		x[n++] = -x[i];
	ck_assert_uint_le(n, 4096);

	for (p = -8; p <= 8; p += 4) {
		float *grp = kvmem_check_xmalloc(G * sizeof(float));

		for (i = 0; i < n; i += G - 1) {
			size_t len = n - i < G - 1 ? n - i : G - 1, j;
			uint32_t code, rc, alt;

			/* amax 448 * 2^p: the scale is 2^p exactly. */
			grp[0] = ldexpf(448, p);
			for (j = 0; j < len; j++)
				grp[1 + j] = ldexpf(x[i + j], p);
			ck_assert_int_eq(kvmem_quantize(KVMEM_FMT_FP8, grp,
							len + 1, G, &sh, bits),
					 0);
			ck_assert_uint_eq(sh, ref_f2h(ldexpf(1, p)));
			for (j = 0; j <= len; j++) {
				code = bits[j];
				ref_code(KVMEM_FMT_FP8, grp[j], sh, &rc, &alt);
				EXPECT_EQ(code, rc, "x = %a (scale 2^%d)",
					  grp[j], p);
				EXPECT(code != 0x7f && code != 0xff,
				       "NaN code for %a", grp[j]);
			}
			check_quant(KVMEM_FMT_FP8, grp, len + 1, G,
				    "boundaries");
		}
		free(grp);
	}
	free(x);
}
END_TEST

/*
 * kvmem_f2e4m3(), the conversion the CUDA kernels share, where the API
 * cannot reach: past 448 (saturating: 464 would round to the NaN code's
 * magnitude), inf and NaN, every float from 2^-11 to 448 in steps of 2^-7 of
 * its binade against the reference, and 0x1p-149.
 */
START_TEST(test_fp8_word)
{
	static const float sat[] = { 448, 449,	464,   479.9f,
				     480, 1e6f, 3e38f, INFINITY };
	uint32_t u, rc, alt;
	unsigned int i;

	for (i = 0; i < sizeof(sat) / sizeof(sat[0]); i++) {
		EXPECT_EQ(kvmem_f2e4m3(sat[i]), 0x7e, "%a", sat[i]);
		EXPECT_EQ(kvmem_f2e4m3(-sat[i]), 0xfe, "%a", -sat[i]);
	}
	ck_assert_uint_eq(kvmem_f2e4m3(NAN), 0);
	ck_assert_uint_eq(kvmem_f2e4m3(-NAN), 0);
	ck_assert_uint_eq(kvmem_f2e4m3(0x1p-149f), 0);
	ck_assert_uint_eq(kvmem_f2e4m3(-0.0f), 0x80);
	for (u = ref_f2u(0x1p-11f); u <= ref_f2u(448.0f); u += 1u << 16) {
		float f = ref_u2f(u);

		ref_code(KVMEM_FMT_FP8, f, 0x3c00, &rc, &alt);
		EXPECT_EQ(kvmem_f2e4m3(f), rc, "%a", f);
		ref_code(KVMEM_FMT_FP8, -f, 0x3c00, &rc, &alt);
		EXPECT_EQ(kvmem_f2e4m3(-f), rc, "%a", -f);
	}
}
END_TEST

/* ---- Lloyd-Max formats ---------------------------------------------------- */

/*
 * The library's levels are the fixed point the reference finds on its own,
 * rounded to float; symmetric; and their mean square error on a unit
 * Gaussian is what quant.h says: for levels that are the means of their
 * cells, E[(X - Q(X))^2] = 1 - sum_i P_i c_i^2.
 */
START_TEST(test_lm_levels)
{
	static const double mse[] = { 0.1175, 0.03454, 0.009497 };
	int fmt, i;

	for (fmt = 0; fmt < KVMEM_FMT_NR; fmt++)
		if (!ref_is_lm(fmt))
			ck_assert_ptr_null(kvmem_format_levels(fmt));
	ck_assert_ptr_null(kvmem_format_levels(-1));
	ck_assert_ptr_null(kvmem_format_levels(KVMEM_FMT_NR));
	for (fmt = KVMEM_FMT_LM2; fmt <= KVMEM_FMT_LM4; fmt++) {
		const float *lv = kvmem_format_levels(fmt);
		const double *rv = ref_lm_levels(fmt);
		const int n = 1 << ref_fmts[fmt].bits;
		double e = 1;

		ck_assert_ptr_nonnull(lv);
		ck_assert_int_eq(n, 2 * ref_fmts[fmt].qmax);
		for (i = 0; i < n; i++) {
			double a = i ? (rv[i - 1] + rv[i]) / 2 : -INFINITY;
			double b =
				i + 1 < n ? (rv[i] + rv[i + 1]) / 2 : INFINITY;
			double p =
				0.5 * (erfc(-b / sqrt(2)) - erfc(-a / sqrt(2)));

			EXPECT_EQ(ref_f2u(lv[i]), ref_f2u((float)rv[i]),
				  "%s level %d: %.9g, fixed point %.12g",
				  ref_fmts[fmt].name, i, lv[i], rv[i]);
			EXPECT_EQ(ref_f2u(lv[i]), ref_f2u(-lv[n - 1 - i]),
				  "%s level %d: not symmetric",
				  ref_fmts[fmt].name, i);
			e -= p * rv[i] * rv[i];
		}
		EXPECT_NEAR(e, mse[fmt - KVMEM_FMT_LM2], 5e-5,
			    "%s: mean square error", ref_fmts[fmt].name);
	}
}
END_TEST

/* Worked by hand from quant.h: scale, codes, read back, zero, non-finite. */
START_TEST(test_lm_hand_examples)
{
	const float *lv = kvmem_format_levels(KVMEM_FMT_LM2);
	const float x[4] = { 1.0f, -1.0f, 0.2f, -3.0f };
	const float z[4] = { 0 };
	const float nf[4] = { NAN, 2.0f, INFINITY, -2.0f };
	uint16_t sc[1];
	uint8_t bits[2];
	float y[4];

	/* RMS of 1, 1, 0.04, 9: sqrt(11.04 / 4) = 1.6613...; nearest FP16
	 * 1.661 (0x3ea5). x / s: 0.602 -> code 3? no: midpoint of 0.4528
	 * and 1.5104 is 0.9816, so 0.602 is code 2; -0.602 code 1; 0.120
	 * code 2; -1.806 code 0. */
	ck_assert_int_eq(kvmem_quantize(KVMEM_FMT_LM2, x, 4, 4, sc, bits), 0);
	ck_assert_uint_eq(sc[0], ref_f2h((float)sqrt(11.04 / 4)));
	ck_assert_uint_eq(sc[0], 0x3ea5);
	ck_assert_uint_eq(bits[0], 2 | 1 << 2 | 2 << 4 | 0 << 6);
	ck_assert_int_eq(kvmem_dequantize(KVMEM_FMT_LM2, bits, sc, 4, 4, y), 0);
	ck_assert_float_eq(y[0], lv[2] * ref_h2f(0x3ea5));
	ck_assert_float_eq(y[3], lv[0] * ref_h2f(0x3ea5));
	/* A group of zeros: scale 0, every value reads 0. */
	ck_assert_int_eq(kvmem_quantize(KVMEM_FMT_LM3, z, 4, 4, sc, bits), 0);
	ck_assert_uint_eq(sc[0], 0);
	ck_assert_int_eq(kvmem_dequantize(KVMEM_FMT_LM3, bits, sc, 4, 4, y), 0);
	ck_assert_float_eq(fabsf(y[0]) + fabsf(y[1]) + fabsf(y[2]), 0.0f);
	/* Non-finite values count as 0 in the RMS (sqrt(8 / 4)) and are
	 * stored as 0: the code of the smallest positive level. */
	ck_assert_int_eq(kvmem_quantize(KVMEM_FMT_LM4, nf, 4, 4, sc, bits), 0);
	ck_assert_uint_eq(sc[0], ref_f2h((float)sqrt(2.0)));
	ck_assert_uint_eq(bits[0] & 0xf, 8);
	ck_assert_uint_eq(bits[1] & 0xf, 8);
	ck_assert_int_eq(kvmem_dequantize(KVMEM_FMT_LM4, bits, sc, 4, 4, y), 0);
	ck_assert(isfinite(y[0]) && isfinite(y[2]));
}
END_TEST

/*
 * Three bits a value cross byte boundaries: codes at every bit offset of a
 * byte, each the reference's for the value and scale, read back by hand
 * from the stream; every code appears.
 */
START_TEST(test_lm3_bitstream)
{
	const float *lv = kvmem_format_levels(KVMEM_FMT_LM3);
	float x[64], y[64];
	uint16_t sc[8];
	uint8_t bits[24];
	unsigned int i, seen = 0;

	for (i = 0; i < 48; i++)
		x[i] = (float)((int)((i * 5 + 3) % 8) - 3.5) *
		       (i % 16 < 8 ? 0.4f : 0.9f);
	/* An outlier in each of the last two groups: past the outer
	 * levels. */
	for (; i < 64; i++)
		x[i] = i % 8	? 0.1f * (float)((int)(i % 3) - 1)
		       : i < 56 ? 3.0f
				: -3.0f;
	ck_assert_int_eq(kvmem_quantize(KVMEM_FMT_LM3, x, 64, 8, sc, bits), 0);
	ck_assert_int_eq(kvmem_dequantize(KVMEM_FMT_LM3, bits, sc, 64, 8, y),
			 0);
	for (i = 0; i < 64; i++) {
		uint32_t got = (uint32_t)ref_get_bits(bits, i * 3, 3), rc, alt;

		EXPECT_EQ(sc[i / 8],
			  ref_scale(KVMEM_FMT_LM3, x + i / 8 * 8, 8, 1),
			  "scale %u", i / 8);
		ref_code(KVMEM_FMT_LM3, x[i], sc[i / 8], &rc, &alt);
		if (got != alt)
			EXPECT_EQ(got, rc, "code %u (bit %u)", i, i * 3);
		EXPECT_EQ(ref_f2u(y[i]), ref_f2u(lv[got] * ref_h2f(sc[i / 8])),
			  "value %u", i);
		seen |= 1u << got;
	}
	ck_assert_uint_eq(seen, 0xff);
}
END_TEST

/* ---- One scale per channel ----------------------------------------------- */

static void check_channels(int fmt, const float *x, size_t ntok,
			   unsigned int dim, const char *what)
{
	const struct ref_fmt *f = &ref_fmts[fmt];
	size_t n = ntok * dim, nbytes = (n * f->bits + 7) / 8, i;
	uint16_t *sc = guarded(dim * 2);
	uint8_t *bits = guarded(nbytes);
	unsigned int c;

	ck_assert_int_eq(kvmem_quantize_channels(fmt, x, ntok, dim, sc, bits),
			 0);
	check_guard(sc, dim * 2, "channel scales");
	check_guard(bits, nbytes, "channel bits");
	if ((n * f->bits) % 8)
		EXPECT_EQ(bits[nbytes - 1] >> ((n * f->bits) % 8), 0,
			  "%s: spare bits", what);
	for (c = 0; c < dim; c++) {
		uint16_t sh = ref_scale(fmt, x + c, ntok, dim);

		EXPECT_EQ(sc[c], sh, "%s %s %zux%u: scale of channel %u", what,
			  f->name, ntok, dim, c);
		for (i = 0; i < ntok; i++) {
			size_t j = i * dim + c;
			uint32_t q = (uint32_t)ref_get_bits(bits, j * f->bits,
							    f->bits),
				 rq, alt;

			ref_code(fmt, x[j], sh, &rq, &alt);
			if (q != alt)
				EXPECT_EQ(q, rq,
					  "%s %s: row %zu channel %u = %a, "
					  "scale %a",
					  what, f->name, i, c, x[j],
					  ref_h2f(sh));
		}
	}
	free(sc);
	free(bits);
}

START_TEST(test_quant_channels)
{
	static const struct {
		size_t ntok;
		unsigned int dim;
	} sz[] = { { 1, 1 }, { 1, 64 },	 { 32, 128 },
		   { 5, 3 }, { 16, 33 }, { 7, 20 } };
	struct kvmem_rng r;
	unsigned int fmt, i, c;

	kvmem_rng_seed(&r, 0xc4a77e1);
	for (fmt = KVMEM_FMT_INT8; fmt < KVMEM_FMT_VQ2; fmt++)
		for (i = 0; i < sizeof(sz) / sizeof(sz[0]); i++) {
			size_t n = sz[i].ntok * sz[i].dim, j;
			float *x = kvmem_check_xmalloc(n * sizeof(float));

			/* Columns of their own magnitudes: outlier channels. */
			for (c = 0; c < sz[i].dim; c++) {
				double mag = rnd_mag(&r);

				for (j = 0; j < sz[i].ntok; j++)
					x[j * sz[i].dim + c] =
						kvmem_check_rnd_value(&r, mag);
			}
			if (n > 4) {
				x[1] = NAN;
				x[n - 2] = -INFINITY;
			}
			check_channels((int)fmt, x, sz[i].ntok, sz[i].dim,
				       "random");
			free(x);
		}
}
END_TEST

START_TEST(test_quant_channels_example)
{
	/* 2 rows x 3 channels, int4: channel amax 7, 0.5, 0 -> scales 1,
	 * 0x2c93, 0; rows [7 0.5 0] [-1 -0.25 0] -> q 7 7 0 -1 -3 0. */
	static const float x[] = { 7, 0.5f, 0, -1, -0.25f, 0 };
	uint16_t sc[3];
	uint8_t bits[3];

	ck_assert_int_eq(
		kvmem_quantize_channels(KVMEM_FMT_INT4, x, 2, 3, sc, bits), 0);
	ck_assert_uint_eq(sc[0], 0x3c00);
	ck_assert_uint_eq(sc[1], 0x2c93);
	ck_assert_uint_eq(sc[2], 0);
	ck_assert_uint_eq(bits[0], 0x77);
	ck_assert_uint_eq(bits[1], 0xf0);
	ck_assert_uint_eq(bits[2], 0x0d);
}
END_TEST

/* ---- Bad arguments ------------------------------------------------------- */

START_TEST(test_quant_bad_args)
{
	static const int bad_fmt[] = { -1, KVMEM_FMT_NR, KVMEM_FMT_NR + 1,
				       1000 };
	float x[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	uint16_t sc[8];
	uint8_t bits[16];
	float y[8];
	unsigned int i, fmt;

	for (i = 0; i < sizeof(bad_fmt) / sizeof(bad_fmt[0]); i++) {
		ck_assert_int_eq(kvmem_quantize(bad_fmt[i], x, 8, 4, sc, bits),
				 -EINVAL);
		ck_assert_int_eq(
			kvmem_dequantize(bad_fmt[i], bits, sc, 8, 4, y),
			-EINVAL);
		ck_assert_int_eq(
			kvmem_quantize_channels(bad_fmt[i], x, 2, 4, sc, bits),
			-EINVAL);
	}
	for (fmt = KVMEM_FMT_INT8; fmt < KVMEM_FMT_VQ2; fmt++) {
		ck_assert_int_eq(kvmem_quantize((int)fmt, x, 8, 0, sc, bits),
				 -EINVAL);
		ck_assert_int_eq(kvmem_dequantize((int)fmt, bits, sc, 8, 0, y),
				 -EINVAL);
		ck_assert_int_eq(kvmem_quantize((int)fmt, NULL, 8, 4, sc, bits),
				 -EINVAL);
		ck_assert_int_eq(kvmem_quantize((int)fmt, x, 8, 4, NULL, bits),
				 -EINVAL);
		ck_assert_int_eq(kvmem_quantize((int)fmt, x, 8, 4, sc, NULL),
				 -EINVAL);
		ck_assert_int_eq(kvmem_dequantize((int)fmt, NULL, sc, 8, 4, y),
				 -EINVAL);
		ck_assert_int_eq(
			kvmem_dequantize((int)fmt, bits, NULL, 8, 4, y),
			-EINVAL);
		ck_assert_int_eq(
			kvmem_dequantize((int)fmt, bits, sc, 8, 4, NULL),
			-EINVAL);
		ck_assert_int_eq(
			kvmem_quantize_channels((int)fmt, NULL, 2, 4, sc, bits),
			-EINVAL);
		ck_assert_int_eq(
			kvmem_quantize_channels((int)fmt, x, 2, 4, NULL, bits),
			-EINVAL);
		ck_assert_int_eq(
			kvmem_quantize_channels((int)fmt, x, 2, 4, sc, NULL),
			-EINVAL);
		/* Nothing to do is not an error. */
		ck_assert_int_eq(
			kvmem_quantize((int)fmt, NULL, 0, 4, NULL, NULL), 0);
		ck_assert_int_eq(
			kvmem_dequantize((int)fmt, NULL, NULL, 0, 4, NULL), 0);
	}
	/* vq2 needs a codebook, which these do not know. */
	ck_assert_int_eq(kvmem_quantize(KVMEM_FMT_VQ2, x, 8, 4, sc, bits),
			 -EINVAL);
	ck_assert_int_eq(kvmem_dequantize(KVMEM_FMT_VQ2, bits, sc, 8, 4, y),
			 -EINVAL);
	ck_assert_int_eq(
		kvmem_quantize_channels(KVMEM_FMT_VQ2, x, 2, 4, sc, bits),
		-EINVAL);
	ck_assert_int_eq(kvmem_quantize(KVMEM_FMT_FP16, NULL, 8, 4, sc, bits),
			 -EINVAL);
	ck_assert_int_eq(kvmem_quantize(KVMEM_FMT_FP16, x, 8, 4, sc, NULL),
			 -EINVAL);
	ck_assert_int_eq(
		kvmem_quantize_channels(KVMEM_FMT_FP16, x, 2, 4, sc, bits),
		-EINVAL);
}
END_TEST

KVMEM_SUITE(quant)
{
	Suite *s = suite_create("quant");
	TCase *tc = tcase_create("formats");
	TCase *tq = tcase_create("quantize");

	tcase_add_test(tc, test_format_table);
	tcase_add_test(tc, test_half_reference_selfcheck);
	tcase_add_test(tc, test_half_to_float_all);
	tcase_add_test(tc, test_half_roundtrip_all);
	tcase_add_test(tc, test_half_from_float_sweep);
	tcase_add_test(tc, test_half_from_float_specials);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);

	tcase_add_test(tq, test_quant_hand_examples);
	tcase_add_test(tq, test_quant_roundtrip_int);
	tcase_add_test(tq, test_quant_exact_scales);
	tcase_add_test(tq, test_quant_fp16_format);
	tcase_add_test(tq, test_quant_zero_group);
	tcase_add_test(tq, test_quant_nonfinite);
	tcase_add_test(tq, test_quant_saturate);
	tcase_add_test(tq, test_quant_tiny);
	tcase_add_test(tq, test_dequant_twos_complement);
	tcase_add_test(tq, test_fp8_reference_selfcheck);
	tcase_add_test(tq, test_fp8_dequant_all_codes);
	tcase_add_test(tq, test_fp8_boundaries);
	tcase_add_test(tq, test_fp8_word);
	tcase_add_test(tq, test_lm_levels);
	tcase_add_test(tq, test_lm_hand_examples);
	tcase_add_test(tq, test_lm3_bitstream);
	tcase_add_test(tq, test_quant_channels);
	tcase_add_test(tq, test_quant_channels_example);
	tcase_add_test(tq, test_quant_bad_args);
	tcase_set_timeout(tq, 60);
	suite_add_tcase(s, tq);
	return s;
}
