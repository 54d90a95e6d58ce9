/* SPDX-License-Identifier: MIT */
/*
 * attend_ref.c - attention in double for the tests (see attend_ref.h)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attend_ref.h"
#include "internal.h"
#include "kvmem/kvmem.h"
#include "kvmem_check.h"
#include "rng.h"

double ref_softmax_v(double *p, uint32_t n, const float *v, uint32_t H,
		     uint32_t kh, uint32_t D, double *out)
{
	double m = -INFINITY, z = 0;
	uint32_t t, d;

	for (t = 0; t < n; t++)
		m = fmax(m, p[t]);
	for (t = 0; t < n; t++) {
		p[t] = exp(p[t] - m);
		z += p[t];
	}
	for (d = 0; d < D; d++) {
		double o = 0;

		for (t = 0; t < n; t++)
			o += p[t] * v[((size_t)t * H + kh) * D + d];
		out[d] = o / z;
	}
	return z;
}

void ref_attend(const struct kvmem_geometry *g, uint32_t nh, double scale,
		const float *q, const float *k, const float *v, uint32_t n,
		double *out, double *share)
{
	uint32_t H = g->kv_heads, D = g->head_dim, grp = nh / H, h, t, d;
	double *p = kvmem_check_xmalloc(n * sizeof(double));

	if (share)
		memset(share, 0, n * sizeof(double));
	for (h = 0; h < nh; h++) {
		uint32_t kh = h / grp;
		double z;

		for (t = 0; t < n; t++) {
			double s = 0;

			for (d = 0; d < D; d++)
				s += (double)q[h * D + d] *
				     k[((size_t)t * H + kh) * D + d];
			p[t] = scale * s;
		}
		z = ref_softmax_v(p, n, v, H, kh, D, out + h * D);
		if (share)
			for (t = 0; t < n; t++)
				share[t] += p[t] / z;
	}
	free(p);
}

uint64_t ref_check_attend(struct kvmem_seq *s, const struct kvmem_geometry *g,
			  uint32_t n, uint32_t nh, struct kvmem_rng *r,
			  const char *what)
{
	const uint32_t D = g->head_dim;
	const size_t row = (size_t)g->kv_heads * D, no = (size_t)nh * D;
	float *dk = kvmem_check_xmalloc(n * row * sizeof(float));
	float *dv = kvmem_check_xmalloc(n * row * sizeof(float));
	float *lk = kvmem_check_xmalloc(n * row * sizeof(float));
	float *lvv = kvmem_check_xmalloc(n * row * sizeof(float));
	float *q = kvmem_check_xmalloc(no * sizeof(float));
	float *out = kvmem_check_xmalloc(no * sizeof(float));
	double *ro = kvmem_check_xmalloc(no * sizeof(double)), vmax = 0;
	struct kvmem_attend_opts o;
	struct kvmem_attend_stats st;
	int lv, active = kvmem__simd_active();
	uint64_t erased = 0;
	size_t i;

	ck_assert_int_eq(kvmem__simd_force(KVMEM__SIMD_PORTABLE), 0);
	ck_assert_int_eq(kvmem_seq_read(s, 0, 0, n, KVMEM_ERASE_INTERPOLATE, dk,
					dv, NULL),
			 0);
	for (i = 0; i < no; i++)
		q[i] = (float)(3 * (2 * kvmem_rng_unit(r) - 1) / sqrt(D));
	ref_attend(g, nh, 1 / sqrt(D), q, dk, dv, n, ro, NULL);
	for (i = 0; i < n * row; i++)
		vmax = fmax(vmax, fabs(dv[i]));
	memset(&o, 0, sizeof(o));
	o.n_heads = nh;
	o.erasure = KVMEM_ERASE_INTERPOLATE;
	for (lv = 0; lv < KVMEM__SIMD_NR; lv++) {
		if (!kvmem__simd_supported(lv))
			continue;
		ck_assert_int_eq(kvmem__simd_force(lv), 0);
		ck_assert_int_eq(kvmem_seq_read(s, 0, 0, n,
						KVMEM_ERASE_INTERPOLATE, lk,
						lvv, NULL),
				 0);
		EXPECT(!memcmp(lk, dk, n * row * sizeof(float)) &&
			       !memcmp(lvv, dv, n * row * sizeof(float)),
		       "%s: %s reads other bits than the portable level", what,
		       kvmem__simd_name(lv));
		ck_assert_int_eq(kvmem_attend(s, 0, q, out, &o, &st), 0);
		erased = st.values_erased;
		for (i = 0; i < no; i++)
			EXPECT_NEAR(out[i], ro[i], 1e-5 * vmax + 1e-7,
				    "%s, %s: output %zu", what,
				    kvmem__simd_name(lv), i);
	}
	ck_assert_int_eq(kvmem__simd_force(active), 0);
	free(dk);
	free(dv);
	free(lk);
	free(lvv);
	free(q);
	free(out);
	free(ro);
	return erased;
}
