/* SPDX-License-Identifier: MIT */
/*
 * attend_ref.h - attention in double for the tests, written from the
 * contract in kvmem/kvmem.h (softmax of the scaled dot products, GQA:
 * query head h reads KV head h / (nh / kv_heads)), not from the library
 */
#ifndef KVMEM_ATTEND_REF_H
#define KVMEM_ATTEND_REF_H

#include <stdint.h>

struct kvmem_geometry;

/*
 * Attention of query @q ([nh][D]) over @n tokens of @k, @v ([n][H][D]) of
 * @g's shape, scores times @scale, into @out ([nh][D]). @share, if not
 * NULL, receives per token its softmax weight summed over the query heads.
 */
void ref_attend(const struct kvmem_geometry *g, uint32_t nh, double scale,
		const float *q, const float *k, const float *v, uint32_t n,
		double *out, double *share);

#endif /* KVMEM_ATTEND_REF_H */
