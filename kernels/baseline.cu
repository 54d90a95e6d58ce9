/* SPDX-License-Identifier: MIT */
/*
 * baseline.cu - attention over unprotected FP16 pages
 *
 * What decode-on-load attention is measured against (kvmem-bench attend
 * --gpu): the same split-K flash decoding over the same block table, the
 * same query rows per CTA and the same combine, over plain FP16 pages (K
 * then V, each [kv_heads][tokens_per_page][head_dim], no header, codes or
 * scales).
 *
 * Where the fast kernel's shape allows (head_dim 64 or 128, up to 32
 * tokens a page, up to 8 query rows, finite query rows) it is the fast
 * kernel's loop with nothing to check or decode (kvmem_k_f16_tc()): a
 * warp a page, K and V on the tensor cores (kvmem_k_q4_kmma(),
 * kvmem_k_q4_vmma() on FP16 values, read where they are), the softmax
 * and the merge of kvmem_k_attend_q4, so that the two differ in what
 * the pages hold and nothing else. Otherwise each warp takes every
 * fourth token of the CTA's pages and keeps an online softmax of its
 * own; a lane holds head_dim / 32 consecutive values of a row, read in
 * one aligned vector load. Either way the warps are merged into the
 * split's partial result as kvmem_k_attend writes it, so kvmem_k_combine
 * finishes both.
 */
#include "page_dev.cuh"

/* @W 32-bit words in one aligned load: 2 * W FP16 values. */
template <int W> struct alignas(4 * W) kvmem_k_vec {
	uint32_t w[W];
};

KVMEM_DFN float kvmem_k_h2f(uint32_t h)
{
#ifdef __CUDACC__
	float f;

	asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
	return f;
#else
	return kvmem_h2f((uint16_t)h);
#endif
}

/* The 2 * W values of a row at @src, as floats. */
template <int W> KVMEM_DFN void kvmem_k_f16_row(const uint8_t *src, float *x)
{
	const kvmem_k_vec<W> u = *(const kvmem_k_vec<W> *)src;
	int i;

	for (i = 0; i < W; i++) {
		x[2 * i] = kvmem_k_h2f(u.w[i] & 0xffff);
		x[2 * i + 1] = kvmem_k_h2f(u.w[i] >> 16);
	}
}

KVMEM_DFN float kvmem_k_warp_sum(float x)
{
	int o;

	for (o = 16; o; o /= 2)
		x += __shfl_xor_sync(0xffffffffu, x, o);
	return x;
}

template <int W>
KVMEM_DFN void kvmem_k_f16_attend(const struct kvmem_k_attend &p, uint8_t *smem)
{
	constexpr unsigned int E = 2 * W; /* values a lane holds */
	const struct kvmem_k_geom *g = &p.g;
	const struct kvmem_k_page *pg = (const struct kvmem_k_page *)p.pages;
	const uint32_t *sp = (const uint32_t *)p.seq_pages;
	const unsigned int h = blockIdx.x, b = blockIdx.y, split = blockIdx.z;
	const unsigned int D = 32 * E, G = p.n_heads / g->kv_heads;
	const unsigned int QR = G * p.nq, tpp = g->tokens_per_page;
	const unsigned int p0 = sp[b], p1 = sp[b + 1];
	const unsigned int per = (p1 - p0 + p.splits - 1) / p.splits;
	const unsigned int first = p0 + split * per;
	const unsigned int last = first + per < p1 ? first + per : p1;
	const unsigned int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
	float *q = (float *)smem;
	float *acc_all = q + QR * D;
	float *ml_all = acc_all + KVMEM_K_WARPS * QR * D;
	float *acc = acc_all + warp * QR * D;
	float *ml = ml_all + warp * QR * 2;
	float *w = (float *)p.ws +
		   (((size_t)b * g->kv_heads + h) * p.parts + split) * QR *
			   (D + 2);
	unsigned int len = 0, i, pi, t, r, e;

	if (p1 > p0)
		len = pg[p1 - 1].token_start + pg[p1 - 1].ntokens;
	kvmem_k_query_rows(&p, h, b, p.scale, q);
	for (i = lane; i < QR * D; i += 32)
		acc[i] = 0.0f;
	for (i = lane; i < QR; i += 32) {
		ml[2 * i] = -INFINITY;
		ml[2 * i + 1] = 0.0f;
	}
	__syncthreads();

	for (pi = first; pi < last; pi++) {
		const uint8_t *kp = (const uint8_t *)pg[pi].addr +
				    ((size_t)h * tpp * D + lane * E) * 2;
		const uint8_t *vp = kp + (size_t)g->kv_heads * tpp * D * 2;

		for (t = warp; t < pg[pi].ntokens; t += KVMEM_K_WARPS) {
			const unsigned int pos = pg[pi].token_start + t;
			float k[E], v[E];

			kvmem_k_f16_row<W>(kp + (size_t)t * D * 2, k);
			kvmem_k_f16_row<W>(vp + (size_t)t * D * 2, v);
			for (r = 0; r < QR; r++) {
				const kvmem_k_fvec<E> qv =
					*(const kvmem_k_fvec<E> *)(q + r * D +
								   lane * E);
				kvmem_k_fvec<E> *ap =
					(kvmem_k_fvec<E> *)(acc + r * D +
							    lane * E);
				kvmem_k_fvec<E> av;
				float s = 0.0f, m, mn, c, pw;

				for (e = 0; e < E; e++)
					s += qv.x[e] * k[e];
				s = kvmem_k_warp_sum(s);
				if (pos > len - p.nq + r / G)
					continue;
				m = ml[2 * r];
				mn = fmaxf(m, s);
				c = expf(m - mn);
				pw = expf(s - mn);
				av = *ap;
				for (e = 0; e < E; e++)
					av.x[e] = av.x[e] * c + pw * v[e];
				*ap = av;
				__syncwarp();
				if (!lane) {
					ml[2 * r] = mn;
					ml[2 * r + 1] = ml[2 * r + 1] * c + pw;
				}
				__syncwarp();
			}
		}
	}
	__syncthreads();

	/* The warps' softmaxes, merged into the split's (max, sum, acc). */
	for (i = threadIdx.x; i < QR * D + QR; i += blockDim.x) {
		const unsigned int row = i < QR * D ? i / D : i - QR * D;
		float mx = -INFINITY, a = 0.0f;
		unsigned int wi;

		for (wi = 0; wi < KVMEM_K_WARPS; wi++)
			mx = fmaxf(mx, ml_all[(wi * QR + row) * 2]);
		for (wi = 0; wi < KVMEM_K_WARPS; wi++) {
			const float m = ml_all[(wi * QR + row) * 2];

			if (m == -INFINITY)
				continue;
			a += expf(m - mx) *
			     (i < QR * D ? acc_all[wi * QR * D + i]
					 : ml_all[(wi * QR + row) * 2 + 1]);
		}
		if (i < QR * D) {
			w[2 * QR + i] = a;
		} else {
			w[2 * row] = mx;
			w[2 * row + 1] = a;
		}
	}
}

/*
 * The FP16 pages of the CTA's share on the tensor cores, for up to QRM
 * query rows (kvmem_k_f16_tc_ok()); shared memory as kvmem_k_f16_smem()
 * sizes it: the query rows (then their fragments, then the merge's
 * sums), their scaling, the warps' running (max, sum) and their pages'
 * weights. Query rows that are not all finite go to the per-token loop.
 */
template <unsigned int D, unsigned int QRM>
KVMEM_DFN void kvmem_k_f16_tc(const struct kvmem_k_attend &p, uint8_t *smem)
{
	const struct kvmem_k_geom *g = &p.g;
	const struct kvmem_k_page *pg = (const struct kvmem_k_page *)p.pages;
	const uint32_t *sp = (const uint32_t *)p.seq_pages;
	const unsigned int h = blockIdx.x, b = blockIdx.y, split = blockIdx.z;
	const unsigned int G = p.n_heads / g->kv_heads, QR = G * p.nq;
	const unsigned int tpp = g->tokens_per_page;
	const unsigned int p0 = sp[b], p1 = sp[b + 1];
	const unsigned int per = (p1 - p0 + p.splits - 1) / p.splits;
	const unsigned int first = p0 + split * per;
	const unsigned int last = first + per < p1 ? first + per : p1;
	const unsigned int wi = threadIdx.x / 32, lane = threadIdx.x % 32;
	float *q = (float *)smem;
	float *qm = q + KVMEM_K_ALIGN16(QR * D * 4) / 4;
	float *ml = qm + KVMEM_K_Q4_QM;
	float *wt = ml + KVMEM_K_ALIGN16(KVMEM_K_WARPS * QR * 2 * 4) / 4;
	float *w = (float *)p.ws +
		   (((size_t)b * g->kv_heads + h) * p.parts + split) * QR *
			   (D + 2);
	float acc[QRM][4] = { { 0.0f } }, dot[QRM], xr[QRM];
	const kvmem_k_uvec4 *qb;
	unsigned int len = 0, i, pi;

	if (p1 > p0)
		len = pg[p1 - 1].token_start + pg[p1 - 1].ntokens;
	kvmem_k_query_rows(&p, h, b, 1.0f, q);
	for (i = lane; i < QR; i += 32) {
		ml[(wi * QR + i) * 2] = -INFINITY;
		ml[(wi * QR + i) * 2 + 1] = 0.0f;
	}
	__syncthreads();
	if (!wi)
		kvmem_k_q4_qprep<D>(q, QR, qm);
	__syncthreads();
	qb = kvmem_k_q4_qstage<D>(q, QR, qm);
	if (!qb) {
		__syncthreads();
		kvmem_k_f16_attend<D / 64>(p, smem);
		return;
	}
	for (pi = first + wi; pi < last; pi += KVMEM_K_WARPS) {
		const uint8_t *kp =
			(const uint8_t *)pg[pi].addr + (size_t)h * tpp * D * 2;
		const uint8_t *vp = kp + (size_t)g->kv_heads * tpp * D * 2;
		const unsigned int n = pg[pi].ntokens;

		kvmem_k_q4_kmma<16, D, QRM, 2 * D>(kp, n, qb, QR, qm, NULL, D,
						   wt + wi * 32 * QRM, dot);
		kvmem_k_q4_softmax<QRM>(&p, pi, h, len, n, dot, NULL,
					ml + wi * QR * 2, wt + wi * 32 * QRM,
					xr);
		kvmem_k_q4_vmma<16, D, QRM, 2 * D>(vp, n, NULL, 32,
						   wt + wi * 32 * QRM, xr, acc);
		__syncwarp();
	}
	kvmem_k_q4_merge<D, QRM>(&p, q, ml, ml + wi * QR * 2, acc, 1, w);
}

extern "C" __global__ void KVMEM_K_BOUNDS
kvmem_k_attend_f16(const struct kvmem_k_attend p)
{
	KVMEM_DYN_SMEM(smem);
	const unsigned int qr = p.n_heads / p.g.kv_heads * p.nq;

	if (kvmem_k_f16_tc_ok(&p.g, qr)) {
		if (p.g.head_dim == 64 && qr <= 4)
			kvmem_k_f16_tc<64, 4>(p, smem);
		else if (p.g.head_dim == 64)
			kvmem_k_f16_tc<64, KVMEM_K_Q4_QR>(p, smem);
		else if (qr <= 4)
			kvmem_k_f16_tc<128, 4>(p, smem);
		else
			kvmem_k_f16_tc<128, KVMEM_K_Q4_QR>(p, smem);
		return;
	}
	switch (p.g.head_dim) {
	case 64:
		kvmem_k_f16_attend<1>(p, smem);
		break;
	case 128:
		kvmem_k_f16_attend<2>(p, smem);
		break;
	case 256:
		kvmem_k_f16_attend<4>(p, smem);
		break;
	}
}
