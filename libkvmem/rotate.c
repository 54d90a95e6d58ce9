/* SPDX-License-Identifier: MIT */
/*
 * rotate.c - the geometry's Hadamard rotation (see kvmem/page.h)
 *
 * y = H S x / sqrt(D) by the fast Walsh-Hadamard transform, D log2 D
 * additions; its inverse x = S H y / sqrt(D), as H is symmetric and
 * H H = D I. One plain loop in one order serves every SIMD level, so a
 * rotated query or output is the same bits on each.
 */
#include <math.h>

#include "kvmem/page.h"
#include "internal.h"
#include "quant_word.h"

/* s_j of kvmem/page.h: -1 where bit 16 of j * 2654435761 (mod 2^32) is. */
static float sign_of(uint32_t j)
{
	return (j * 2654435761u) >> 16 & 1 ? -1.0f : 1.0f;
}

static void fwht(float *x, uint32_t n)
{
	uint32_t len, i, j;

	for (len = 1; len < n; len *= 2)
		for (i = 0; i < n; i += 2 * len)
			for (j = i; j < i + len; j++) {
				float a = x[j], b = x[j + len];

				x[j] = a + b;
				x[j + len] = a - b;
			}
}

void kvmem__rotate(float *x, uint32_t dim, int inverse)
{
	const float norm = 1.0f / sqrtf((float)dim);
	uint32_t j;

	if (!inverse)
		for (j = 0; j < dim; j++)
			x[j] *= sign_of(j);
	fwht(x, dim);
	for (j = 0; j < dim; j++)
		x[j] *= inverse ? norm * sign_of(j) : norm;
}

void kvmem__rotate_rows(const struct kvmem_geometry *g, float *x, size_t rows,
			int inverse)
{
	size_t r;

	if (g->rotation != KVMEM_ROTATE_HADAMARD)
		return;
	for (r = 0; r < rows; r++)
		kvmem__rotate(x + r * g->head_dim, g->head_dim, inverse);
}

void kvmem__rotate_stored(const struct kvmem_geometry *g, float *x, size_t rows)
{
	size_t i;

	if (g->rotation != KVMEM_ROTATE_HADAMARD)
		return;
	/* What FP16 would keep of each value: a NaN or an infinity would
	 * take its whole row with it once rotated. */
	for (i = 0; i < rows * g->head_dim; i++) {
		float v = kvmem_finite_or_zero(x[i]);

		x[i] = v > 65504.0f ? 65504.0f : v < -65504.0f ? -65504.0f : v;
	}
	kvmem__rotate_rows(g, x, rows, 0);
}
