/* SPDX-License-Identifier: MIT */
/*
 * quant_ref.c - reference FP16 and quantizer for the tests, from the
 * contract in kvmem/quant.h, not the library
 *
 * Deliberately independent of libkvmem: see quant_ref.h.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kvmem/page.h"
#include "kvmem/quant.h"
#include "quant_ref.h"

uint32_t ref_f2u(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

float ref_u2f(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

uint16_t ref_f2h(float f)
{
	uint32_t u = ref_f2u(f), sign = u >> 16 & 0x8000, exp = u >> 23 & 0xff;
	uint64_t m = u & 0x7fffff, q, rem, half;
	int e2, ulp, shift;
	uint32_t h;

	if (exp == 0xff)
		return m ? 0 : (uint16_t)(sign | 0x7bff);
	if (exp >= 127 + 16) /* >= 65536 */
		return (uint16_t)(sign | 0x7bff);
	if (exp == 0) {
		if (!m)
			return (uint16_t)sign;
		e2 = -149;
	} else {
		m |= 0x800000;
		e2 = (int)exp - 150;
	}
	/* |f| = m * 2^e2; the FP16 grid of its binade has spacing 2^ulp. */
	ulp = exp < 127 - 14 ? -24 : (int)exp - 127 - 10;
	shift = ulp - e2; /* > 0 for every float below 65536 */
	if (shift >= 64) {
		q = 0;
	} else {
		q = m >> shift;
		rem = m & ((1ull << shift) - 1);
		half = 1ull << (shift - 1);
		if (rem > half || (rem == half && (q & 1)))
			q++;
	}
	if (exp < 127 - 14)
		h = (uint32_t)q; /* subnormal, or 0x400 if it rounded up */
	else
		h = ((exp - 127 + 15) << 10) + (uint32_t)q - 1024;
	if (h >= 0x7c00)
		h = 0x7bff;
	return (uint16_t)(sign | h);
}

float ref_h2f(uint16_t h)
{
	unsigned int e = h >> 10 & 31, m = h & 0x3ff;
	double v;

	if (e == 31)
		return m ? NAN : (h & 0x8000 ? -INFINITY : INFINITY);
	v = e ? ldexp(1024 + m, (int)e - 25) : ldexp(m, -24);
	return (float)(h & 0x8000 ? -v : v);
}

float ref_half(float x)
{
	return ref_h2f(ref_f2h(x));
}

uint16_t ref_half_ceil(double x)
{
	unsigned int lo = 0, hi = 0x7bff;

	if (x > 65504.0)
		return 0x7bff;
	while (lo < hi) {
		unsigned int mid = (lo + hi) / 2;

		if (ref_h2f((uint16_t)mid) >= x)
			hi = mid;
		else
			lo = mid + 1;
	}
	return (uint16_t)lo;
}

const struct ref_fmt ref_fmts[KVMEM_FMT_NR] = {
	[KVMEM_FMT_FP16] = { "fp16", 16, 0 },
	[KVMEM_FMT_INT8] = { "int8", 8, 127 },
	[KVMEM_FMT_INT4] = { "int4", 4, 7 },
	[KVMEM_FMT_INT2] = { "int2", 2, 1 },
	[KVMEM_FMT_FP8] = { "fp8", 8, 448 },
	[KVMEM_FMT_LM2] = { "lm2", 2, 2 },
	[KVMEM_FMT_LM3] = { "lm3", 3, 4 },
	[KVMEM_FMT_LM4] = { "lm4", 4, 8 },
	[KVMEM_FMT_VQ2] = { "vq2", 2, 0 },
};

int ref_is_lm(int fmt)
{
	return fmt == KVMEM_FMT_LM2 || fmt == KVMEM_FMT_LM3 ||
	       fmt == KVMEM_FMT_LM4;
}

/* The standard normal density and its distribution function. */
static double npdf(double x)
{
	return isinf(x) ? 0 : exp(-x * x / 2) / sqrt(2 * M_PI);
}

static double ncdf(double x)
{
	return 0.5 * erfc(-x / sqrt(2));
}

const double *ref_lm_levels(int fmt)
{
	static double lv[3][16];
	static int done[3];
	const int k = fmt - KVMEM_FMT_LM2, n = 2 * ref_fmts[fmt].qmax;
	int it, i;

	if (done[k])
		return lv[k];
	/* Lloyd's iteration from evenly spread levels: each level becomes
	 * the mean of the density between the midpoints to its neighbours,
	 * E[X | a < X < b] = (pdf(a) - pdf(b)) / (cdf(b) - cdf(a)). */
	for (i = 0; i < n; i++)
		lv[k][i] = -3 + 6 * (i + 0.5) / n;
	for (it = 0; it < 5000; it++) {
		double next[16];

		for (i = 0; i < n; i++) {
			double a =
				i ? (lv[k][i - 1] + lv[k][i]) / 2 : -INFINITY;
			double b = i + 1 < n ? (lv[k][i] + lv[k][i + 1]) / 2
					     : INFINITY;

			next[i] = (npdf(a) - npdf(b)) / (ncdf(b) - ncdf(a));
		}
		memcpy(lv[k], next, n * sizeof(double));
	}
	done[k] = 1;
	return lv[k];
}

double ref_lm_bound(int fmt, double x, double s)
{
	const double *lv = ref_lm_levels(fmt);
	const int n = 2 * ref_fmts[fmt].qmax;
	double half = lv[n / 2];
	int i;

	for (i = 0; i + 1 < n; i++)
		half = fmax(half, (lv[i + 1] - lv[i]) / 2);
	return fmax(half * s, fabs(x) - lv[n - 1] * s);
}

uint16_t ref_scale(int fmt, const float *x, size_t n, size_t stride)
{
	double amax = 0, sum = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		double a = fabs((double)x[i * stride]);

		if (!isfinite(a))
			continue;
		sum += a * a;
		if (a > amax)
			amax = a;
	}
	if (ref_is_lm(fmt))
		return n ? ref_f2h((float)sqrt(sum / (double)n)) : 0;
	return amax == 0 ? 0 : ref_half_ceil(amax / ref_fmts[fmt].qmax);
}

/* The lm code nearest @r (ties to the smaller magnitude), levels from
 * ref_lm_levels() rounded to float as the library keeps them. */
static uint32_t lm_nearest(int fmt, double r)
{
	const double *lv = ref_lm_levels(fmt);
	const int n = 2 * ref_fmts[fmt].qmax;
	int i, best = n / 2;

	for (i = 0; i < n; i++) {
		double d = fabs((double)(float)lv[i] - r);
		double db = fabs((double)(float)lv[best] - r);

		if (d < db || (d == db && fabs(lv[i]) < fabs(lv[best])))
			best = i;
	}
	return (uint32_t)best;
}

void ref_q(float x, uint16_t sh, int qmax, int *q, int *alt)
{
	double s = ref_h2f(sh), r, fl, frac;

	*q = *alt = 0;
	if (!isfinite(x) || s == 0)
		return;
	r = (double)x / s;
	fl = floor(r);
	frac = r - fl;
	*q = (int)(frac >= 0.5 ? fl + 1 : fl);
	*alt = *q;
	if (fabs(frac - 0.5) <= 0x1p-20 * fmax(1.0, fabs(r)))
		*alt = *q == (int)fl ? (int)fl + 1 : (int)fl;
	if (*q > qmax)
		*q = qmax;
	if (*q < -qmax)
		*q = -qmax;
	if (*alt > qmax)
		*alt = qmax;
	if (*alt < -qmax)
		*alt = -qmax;
}

double ref_e4m3(unsigned int code)
{
	unsigned int e = code >> 3 & 15, m = code & 7;
	double v;

	if ((code & 0x7f) == 0x7f)
		return NAN;
	v = e ? ldexp(8 + m, (int)e - 10) : ldexp(m, -9);
	return code & 0x80 ? -v : v;
}

/* The finite E4M3 magnitude code nearest @a >= 0; ties to the even one. */
static uint32_t e4m3_nearest(double a)
{
	uint32_t c, best = 0;

	for (c = 1; c < 0x7f; c++) {
		double d = fabs(ref_e4m3(c) - a), db = fabs(ref_e4m3(best) - a);

		if (d < db || (d == db && !(c & 1)))
			best = c;
	}
	return best;
}

void ref_code(int fmt, float x, uint16_t sh, uint32_t *code, uint32_t *alt)
{
	const unsigned int bits = ref_fmts[fmt].bits;
	double s = ref_h2f(sh), a;
	uint32_t sign;
	int q, qa;

	if (ref_is_lm(fmt)) {
		double r = isfinite(x) && s != 0 ? (double)x / s : 0;

		/* The library divides in float: a few ulps either way. */
		*code = lm_nearest(fmt, r);
		*alt = lm_nearest(fmt, r * (1 + 0x1p-20));
		if (*alt == *code)
			*alt = lm_nearest(fmt, r * (1 - 0x1p-20));
		return;
	}
	if (fmt != KVMEM_FMT_FP8) {
		ref_q(x, sh, ref_fmts[fmt].qmax, &q, &qa);
		*code = (uint32_t)q & ((1u << bits) - 1);
		*alt = (uint32_t)qa & ((1u << bits) - 1);
		return;
	}
	*code = *alt = 0;
	if (!isfinite(x) || s == 0)
		return;
	a = fabs((double)x) / s;
	sign = signbit(x) ? 0x80 : 0;
	*code = sign | e4m3_nearest(a);
	/* The library divides in float: a few ulps either way. */
	*alt = sign | e4m3_nearest(a * (1 + 0x1p-20));
	if (*alt == *code)
		*alt = sign | e4m3_nearest(a * (1 - 0x1p-20));
}

float ref_read(int fmt, uint32_t raw, uint16_t sh)
{
	const unsigned int b = ref_fmts[fmt].bits;

	if (fmt == KVMEM_FMT_FP8)
		return (float)(ref_e4m3(raw) * ref_h2f(sh));
	if (ref_is_lm(fmt))
		return (float)ref_lm_levels(fmt)[raw] * ref_h2f(sh);
	return (float)(raw >> (b - 1) ? (int)raw - (1 << b) : (int)raw) *
	       ref_h2f(sh);
}

int ref_tok_sealed(const struct kvmem_geometry *g, uint32_t n, int full_tail,
		   uint32_t t)
{
	uint32_t S = g->sink_tokens, P = g->tokens_per_page;

	return n > S && t >= S && t < S + (n - S) / P * P - (full_tail ? P : 0);
}

double ref_sealed_bound(const struct kvmem_geometry *g, const float *x,
			int is_k, uint32_t t, uint32_t h, uint32_t d)
{
	uint32_t H = g->kv_heads, D = g->head_dim, G = g->group_size;
	uint32_t S = g->sink_tokens, P = g->tokens_per_page, t0 = t, t1 = t + 1;
	int qmax = ref_fmts[g->format].qmax;
	int chan = is_k && g->key_scales == KVMEM_SCALES_CHANNEL;
	size_t i = ((size_t)t * H + h) * D + d;
	double amax = 0, s;
	uint32_t j;

	if (chan) {
		t0 = t - (t - S) % P;
		t1 = t0 + P;
	}
	for (; t0 < t1; t0++)
		for (j = 0; j < D; j++) {
			size_t o = ((size_t)t0 * H + h) * D + j;

			if (chan ? j != d : j / G != d / G)
				continue;
			amax = fmax(amax, fabs(x[o]));
			amax = fmax(amax, fabs(ref_half(x[o])));
		}
	if (ref_is_lm(g->format)) {
		/* The scale of the inputs or of their FP16 copies. */
		double sx = 0, sh = 0, cnt = 0, hx = ref_half(x[i]);

		t0 = chan ? t - (t - S) % P : t;
		for (; t0 < t1; t0++)
			for (j = 0; j < D; j++) {
				size_t o = ((size_t)t0 * H + h) * D + j;

				if (chan ? j != d : j / G != d / G)
					continue;
				sx += (double)x[o] * x[o];
				sh += (double)ref_half(x[o]) * ref_half(x[o]);
				cnt++;
			}
		sx = ref_h2f(ref_f2h((float)sqrt(sx / cnt)));
		sh = ref_h2f(ref_f2h((float)sqrt(sh / cnt)));
		return fmax(ref_lm_bound(g->format, x[i], sx),
			    ref_lm_bound(g->format, hx, sh) +
				    fabs(hx - (double)x[i])) *
			       (1 + 0x1p-12) +
		       fabs(x[i]) * 0x1p-20;
	}
	s = ref_h2f(ref_half_ceil(amax / qmax));
	if (g->format == KVMEM_FMT_FP8) {
		double a = fmax(fabs(x[i]), fabs(ref_half(x[i])));

		return fmax(a / 16, s * 0x1p-10) * (1 + 0x1p-20) + a * 0x1p-23 +
		       fabs((double)ref_half(x[i]) - x[i]);
	}
	return s / 2 * (1 + 0x1p-20) + fabs((double)ref_half(x[i]) - x[i]);
}
