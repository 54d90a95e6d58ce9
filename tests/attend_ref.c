/* SPDX-License-Identifier: MIT */
/*
 * attend_ref.c - attention in double for the tests (see attend_ref.h)
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attend_ref.h"
#include "kvmem/page.h"
#include "kvmem_check.h"

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
		double m = -INFINITY, z = 0;

		for (t = 0; t < n; t++) {
			double s = 0;

			for (d = 0; d < D; d++)
				s += (double)q[h * D + d] *
				     k[((size_t)t * H + kh) * D + d];
			p[t] = scale * s;
			m = fmax(m, p[t]);
		}
		for (t = 0; t < n; t++) {
			p[t] = exp(p[t] - m);
			z += p[t];
		}
		for (d = 0; d < D; d++) {
			double o = 0;

			for (t = 0; t < n; t++)
				o += p[t] * v[((size_t)t * H + kh) * D + d];
			out[h * D + d] = o / z;
		}
		if (share)
			for (t = 0; t < n; t++)
				share[t] += p[t] / z;
	}
	free(p);
}
