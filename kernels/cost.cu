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
 * values a step takes, named in the probe (..._vN); a warp-wide mma counts
 * once for each lane's share of it. The probes read and
 * write through their arguments so that nothing is optimised away; what
 * the kernel does around its loops (copies, scales, softmax) is not in
 * them.
 */
#include "kvmem.cu"

#define KVMEM_COST_D 128
#define KVMEM_COST_QRM 4

/* K on the lane-a-token path (INT8, key scales per channel, groups
 * narrower than 16): a 32-bit word of four values (int4 in their bytes'
 * low nibbles, or int8), scaled and dotted with the query rows. */
template <unsigned int BITS>
static __device__ __forceinline__ void
kvmem_cost_k(const uint32_t *w, unsigned int n, const float *q, const float *ks,
	     float *out)
{
	struct kvmem_k_q4_kscale ksc = { ks, ks[0], 0 };
	float dot[KVMEM_COST_QRM] = { 0 };
	unsigned int j, r;

#pragma unroll 1
	for (j = 0; j < n; j++)
		kvmem_k_q4_kdot<BITS, KVMEM_COST_D, KVMEM_COST_QRM>(
			w[j], j % (KVMEM_COST_D / 4), q, 0, 32, &ksc, dot);
	for (r = 0; r < KVMEM_COST_QRM; r++)
		out[r] = dot[r];
}

extern "C" __global__ void kvmem_cost_k_int4_v4(const uint32_t *w,
						unsigned int n, const float *q,
						const float *ks, float *out)
{
	kvmem_cost_k<4>(w, n, q, ks, out);
}

extern "C" __global__ void kvmem_cost_k_i8_v4(const uint32_t *w, unsigned int n,
					      const float *q, const float *ks,
					      float *out)
{
	kvmem_cost_k<8>(w, n, q, ks, out);
}

/* K on the tensor cores, as kvmem_k_q4_kmma() does it: a group of 32
 * dims (two 16-dim steps) of a tile of 16 tokens, the lane's A fragment
 * a step (kvmem_k_q4_kwords(): one-byte values made signed FP16, or
 * FP16 pairs of the baseline, kvmem_k_f16_tc()) multiplied with the
 * query rows' two halves, the group's sum scaled by its two tokens'
 * scales (none in FP16); 16 values a lane. */
template <unsigned int BITS>
static __device__ __forceinline__ void
kvmem_cost_kmma(const uint8_t *k, unsigned int n, const kvmem_k_uvec4 *qb,
		const float *ks, float *out)
{
	constexpr unsigned int KS =
		BITS == 16 ? 2 * KVMEM_COST_D : KVMEM_K_Q4_STRIDE(KVMEM_COST_D);
	float sc[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
	unsigned int t, i;

#pragma unroll 1
	for (t = 0; t < n; t++) {
		float c[4] = { 0.0f, 0.0f, 0.0f, 0.0f };

		for (i = 0; i < 2; i++) {
			const kvmem_k_uvec4 b = qb[i];
			uint32_t a[4];

			kvmem_k_q4_kwords<BITS, KS>(k + t * 64, 16, 0,
						    4 * i + threadIdx.x % 4, a);
			kvmem_k_mma(c, a, b.x);
			kvmem_k_mma(c, a, b.x + 2);
		}
		for (i = 0; i < 4; i++)
			sc[i] += BITS == 16 ? c[i] : ks[2 * t + i / 2] * c[i];
	}
	for (i = 0; i < 4; i++)
		out[i] = sc[i];
}

extern "C" __global__ void kvmem_cost_kmma_v16(const uint8_t *k, unsigned int n,
					       const kvmem_k_uvec4 *qb,
					       const float *ks, float *out)
{
	kvmem_cost_kmma<4>(k, n, qb, ks, out);
}

extern "C" __global__ void kvmem_cost_kmma_i8_v16(const uint8_t *k,
						  unsigned int n,
						  const kvmem_k_uvec4 *qb,
						  const float *ks, float *out)
{
	kvmem_cost_kmma<8>(k, n, qb, ks, out);
}

extern "C" __global__ void kvmem_cost_kmma_f16_v16(const uint8_t *k,
						   unsigned int n,
						   const kvmem_k_uvec4 *qb,
						   float *out)
{
	kvmem_cost_kmma<16>(k, n, qb, NULL, out);
}

/* K of int4 in h84 words: sixteen bytes of the copy, four words, tested
 * before the scores (kvmem_k_h8x4_dirty()). */
extern "C" __global__ void kvmem_cost_kcheck_h84_v16(const kvmem_k_uvec4 *w,
						     unsigned int n, float *out)
{
	uint32_t bad = 0;
	unsigned int t, k;

#pragma unroll 1
	for (t = 0; t < n; t++) {
		const kvmem_k_uvec4 u = w[t];

		for (k = 0; k < 4; k++)
			bad |= kvmem_k_h8x4_dirty<1>(u.x[k]);
	}
	out[0] = (float)bad;
}

/* V on the tensor cores, kvmem_k_q4_vmma() itself for four query rows
 * (one set): an iteration of its loop over 32 dims, with their group's
 * largest scale, four steps of eight tokens and the accumulators'
 * update; 32 values a lane. */
template <unsigned int BITS>
static __device__ __forceinline__ void
kvmem_cost_vmma(const uint8_t *vr, unsigned int n, const float *vs,
		const float *wt, const float *xr, float *out)
{
	float acc[KVMEM_COST_QRM][4] = { { 0.0f } };
	unsigned int t, i;

#pragma unroll 1
	for (t = 0; t < n; t++)
		kvmem_k_q4_vmma<BITS, 32, KVMEM_COST_QRM>(
			vr + t * KVMEM_K_Q4_STRIDE(32), 32, vs, 32, wt, xr,
			acc);
	for (i = 0; i < 4; i++)
		out[i] = acc[0][i];
}

extern "C" __global__ void kvmem_cost_vmma_v32(const uint8_t *vr,
					       unsigned int n, const float *vs,
					       const float *wt, const float *xr,
					       float *out)
{
	kvmem_cost_vmma<4>(vr, n, vs, wt, xr, out);
}

extern "C" __global__ void
kvmem_cost_vmma_i8_v32(const uint8_t *vr, unsigned int n, const float *vs,
		       const float *wt, const float *xr, float *out)
{
	kvmem_cost_vmma<8>(vr, n, vs, wt, xr, out);
}

/* The FP16 baseline's V on the tensor cores: kvmem_k_q4_vmma() over FP16
 * rows read where they are, no scales; 32 values a lane. */
extern "C" __global__ void kvmem_cost_vmma_f16_v32(const uint8_t *vr,
						   unsigned int n,
						   const float *wt,
						   const float *xr, float *out)
{
	float acc[KVMEM_COST_QRM][4] = { { 0.0f } };
	unsigned int t, i;

#pragma unroll 1
	for (t = 0; t < n; t++)
		kvmem_k_q4_vmma<16, 32, KVMEM_COST_QRM, 2 * KVMEM_COST_D>(
			vr + t * 64, 32, NULL, 32, wt, xr, acc);
	for (i = 0; i < 4; i++)
		out[i] = acc[0][i];
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

/* V of int4 in h84 words: the test of a lane's columns before they are
 * read, as the kernel's loop unrolled by eight runs it: eight tokens'
 * words, a row apart in the copy; 32 values. */
extern "C" __global__ void kvmem_cost_vcheck_h84_v32(const uint8_t *vr,
						     unsigned int n, float *out)
{
	constexpr unsigned int KS = KVMEM_K_Q4_STRIDE(KVMEM_COST_D);
	uint32_t bad = 0;
	unsigned int t, k;

#pragma unroll 1
	for (t = 0; t < n; t++)
		for (k = 0; k < 8; k++)
			bad |= kvmem_k_h8x4_dirty<1>(
				*(const uint32_t *)(vr + (8 * t + k) * KS));
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
