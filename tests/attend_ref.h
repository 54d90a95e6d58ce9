/* SPDX-License-Identifier: MIT */
/*
 * attend_ref.h - attention in double for the tests, written from the
 * contract in kvmem/kvmem.h (softmax of the scaled dot products, GQA:
 * query head h reads KV head h / (nh / kv_heads)), not from the library;
 * and the check that holds the library's attention to it
 */
#ifndef KVMEM_ATTEND_REF_H
#define KVMEM_ATTEND_REF_H

#include <stdint.h>

struct kvmem_geometry;
struct kvmem_rng;
struct kvmem_seq;

/*
 * The softmax of the @n scores @p, which it turns into unnormalised
 * weights, and with them the mean of KV head @kh's rows of @v ([n][H][D])
 * into @out ([D]); returns the weights' sum.
 */
double ref_softmax_v(double *p, uint32_t n, const float *v, uint32_t H,
		     uint32_t kh, uint32_t D, double *out);

/*
 * Attention of query @q ([nh][D]) over @n tokens of @k, @v ([n][H][D]) of
 * @g's shape, scores times @scale, into @out ([nh][D]). @share, if not
 * NULL, receives per token its softmax weight summed over the query heads.
 */
void ref_attend(const struct kvmem_geometry *g, uint32_t nh, double scale,
		const float *q, const float *k, const float *v, uint32_t n,
		double *out, double *share);

/*
 * On every SIMD level: layer 0 of @s (@n tokens of @g) reads the same bits
 * as on the portable one (KVMEM_ERASE_INTERPOLATE), and kvmem_attend() of
 * @nh heads with a random query from @r is within float arithmetic of
 * ref_attend() over them (values rebuilt the same way in both). @what
 * names the case in a failure. Returns the values the last call erased.
 */
uint64_t ref_check_attend(struct kvmem_seq *s, const struct kvmem_geometry *g,
			  uint32_t n, uint32_t nh, struct kvmem_rng *r,
			  const char *what);

#endif /* KVMEM_ATTEND_REF_H */
