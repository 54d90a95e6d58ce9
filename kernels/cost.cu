/* SPDX-License-Identifier: MIT */
/*
 * cost.cu - probes of the fast attention kernel's inner loops, for the
 * PTX cost report (scripts/ptx-cost.py, kernels/README.md)
 *
 * Not part of the fatbin: `make` compiles this file to PTX alone. Each
 * probe is one loop, not unrolled, whose body is one step of an inner
 * loop of kvmem_k_attend_q4 made of the same device functions with the
 * same template arguments (D 128, four query rows, groups of 32): the
 * report counts the PTX instructions of that body and divides them by the
 * values a step takes, named in the probe (..._vN). The probes read and
 * write through their arguments so that nothing is optimised away; what
 * the kernel does around its loops (copies, scales, softmax) is not in
 * them.
 */
#include "kvmem.cu"

#define KVMEM_COST_D 128
#define KVMEM_COST_QRM 4

/* K: a 32-bit word of four values (int4 in their bytes' low nibbles, or
 * int8), tested as the clean path tests h84 words where @CHECK, scaled
 * and dotted with the query rows. */
template <unsigned int BITS, bool CHECK>
static __device__ __forceinline__ void
kvmem_cost_k(const uint32_t *w, unsigned int n, const float *q, const float *ks,
	     float *out)
{
	struct kvmem_k_q4_kscale ksc = { ks, ks[0], 0 };
	float dot[KVMEM_COST_QRM] = { 0 };
	uint32_t bad = 0;
	unsigned int j, r;

#pragma unroll 1
	for (j = 0; j < n; j++) {
		const uint32_t x = w[j];

		if (CHECK)
			bad |= kvmem_h8x4_encode(x, 1) ^ x;
		kvmem_k_q4_kdot<BITS, KVMEM_COST_D, KVMEM_COST_QRM>(
			x, j % (KVMEM_COST_D / 4), q, 0, 32, &ksc, dot);
	}
	for (r = 0; r < KVMEM_COST_QRM; r++)
		out[r] = dot[r];
	out[KVMEM_COST_QRM] = (float)bad;
}

extern "C" __global__ void kvmem_cost_k_h84_v4(const uint32_t *w,
					       unsigned int n, const float *q,
					       const float *ks, float *out)
{
	kvmem_cost_k<4, true>(w, n, q, ks, out);
}

extern "C" __global__ void kvmem_cost_k_int4_v4(const uint32_t *w,
						unsigned int n, const float *q,
						const float *ks, float *out)
{
	kvmem_cost_k<4, false>(w, n, q, ks, out);
}

extern "C" __global__ void kvmem_cost_k_i8_v4(const uint32_t *w, unsigned int n,
					      const float *q, const float *ks,
					      float *out)
{
	kvmem_cost_k<8, false>(w, n, q, ks, out);
}

/* V: a token's four values of the lane's columns (int4 in their bytes'
 * low nibbles, or int8), scaled and added into the query rows'
 * accumulators with their weights. */
template <unsigned int BITS>
static __device__ __forceinline__ void
kvmem_cost_v(const uint32_t *w, unsigned int n, const float *wt,
	     const float *vs, float *out)
{
	float acc[KVMEM_COST_QRM][4] = { { 0 } };
	unsigned int t, r, i, j;

#pragma unroll 1
	for (t = 0; t < n; t++) {
		const float sv = vs[t];
		float v[4];

		kvmem_k_qx4<BITS>(w[t], v);
		for (i = 0; i < 4; i++)
			v[i] *= sv;
		for (r = 0; r < KVMEM_COST_QRM; r += 4) {
			const kvmem_k_fvec<4> pr =
				*(const kvmem_k_fvec<4> *)(wt +
							   t * KVMEM_COST_QRM +
							   r);

			for (j = 0; j < 4; j++)
				for (i = 0; i < 4; i++)
					acc[r + j][i] += pr.x[j] * v[i];
		}
	}
	for (r = 0; r < KVMEM_COST_QRM; r++)
		for (i = 0; i < 4; i++)
			out[r * 4 + i] = acc[r][i];
}

extern "C" __global__ void kvmem_cost_v_int4_v4(const uint32_t *w,
						unsigned int n, const float *wt,
						const float *vs, float *out)
{
	kvmem_cost_v<4>(w, n, wt, vs, out);
}

extern "C" __global__ void kvmem_cost_v_i8_v4(const uint32_t *w, unsigned int n,
					      const float *wt, const float *vs,
					      float *out)
{
	kvmem_cost_v<8>(w, n, wt, vs, out);
}

/* V of int4 in h84 words: a word of four values tested, as the clean
 * path tests a lane's columns before it reads them. */
extern "C" __global__ void kvmem_cost_vcheck_h84_v4(const uint32_t *w,
						    unsigned int n, float *out)
{
	uint32_t bad = 0;
	unsigned int t;

#pragma unroll 1
	for (t = 0; t < n; t++)
		bad |= kvmem_h8x4_encode(w[t], 1) ^ w[t];
	out[0] = (float)bad;
}

/* golay24 rows decoded into a byte a value: a lane's quad of words,
 * twelve values. */
extern "C" __global__ void
kvmem_cost_dec_golay24_v12(const uint8_t *src, uint8_t *dst, unsigned int n,
			   const uint16_t *lut, float *out)
{
	struct kvmem_k_counts c = { 0, 0, 0, 0 };
	int ue = 0;

	kvmem_k_q4_golay(src, dst, n, lut, &c, &ue);
	out[0] = (float)(c.corrected + c.ue + (unsigned int)ue);
}

/* secded72 rows of int8 decoded into a byte a value: a lane's word,
 * eight values. */
extern "C" __global__ void kvmem_cost_dec_secded72_v8(const uint8_t *src,
						      uint8_t *dst,
						      unsigned int n,
						      float *out)
{
	struct kvmem_k_counts c = { 0, 0, 0, 0 };
	int ue = 0;

	kvmem_k_q4_secded<KVMEM_COST_D>(src, dst, n, &c, &ue);
	out[0] = (float)(c.corrected + c.ue + (unsigned int)ue);
}
