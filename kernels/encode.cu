/* SPDX-License-Identifier: MIT */
/*
 * encode.cu - quantize and encode K/V into page slots on the device
 *
 * One CTA per job. A job writes rows [t0, t0 + n) of one page from
 * token-major K and V (the layout a forward pass produces), with their
 * checks in a page without scales, then the page's header and its hcrc; a
 * sealed page, written whole (t0 = 0), also gets its scales, their
 * segments' checks and the CRC-32C its header carries. What it writes is
 * bit-identical to kvmem_page_encode() (and, row by row, to appending to
 * a hot page): the arithmetic is quant_word.h and ecc_word.h, and the
 * values are visited in the same order.
 */
#include "page_dev.cuh"

/* Value @d of token row @r of head @h of the job's K or V, as a float. */
static __device__ __forceinline__ float
kvmem_k_src(const struct kvmem_k_encode *p, const struct kvmem_k_encode_job *j,
	    int is_v, unsigned int r, unsigned int h, unsigned int d)
{
	const unsigned int D = p->g.head_dim;
	const size_t stride = j->stride ? j->stride : p->g.kv_heads * D;
	const size_t i = r * stride + (size_t)h * D + d;
	const uint64_t base = is_v ? j->v : j->k;
	union kvmem_f32 v;

	switch (p->dtype) {
	case KVMEM_K_DTYPE_F16:
		return kvmem_h2f(((const uint16_t *)base)[i]);
	case KVMEM_K_DTYPE_BF16:
		v.u = (uint32_t)((const uint16_t *)base)[i] << 16;
		return v.f;
	default:
		return ((const float *)base)[i];
	}
}

/* Scale @idx of a sealed page being written: quant.c's group_scale(). */
static __device__ __forceinline__ uint16_t kvmem_k_make_scale(
	const struct kvmem_k_encode *p, const struct kvmem_k_encode_job *j,
	const struct kvmem_k_layout *l, unsigned int idx)
{
	const struct kvmem_k_geom *g = &p->g;
	const unsigned int groups = g->head_dim / g->group_size;
	const unsigned int per_head = g->tokens_per_page * groups;
	float amax = 0.0f;
	unsigned int i, h, t, c;
	int is_v = idx >= l->nscales_k;

	if (!is_v && l->chan) {
		h = idx / g->head_dim;
		c = idx % g->head_dim;
		for (t = 0; t < j->n; t++)
			amax = fmaxf(amax,
				     fabsf(kvmem_finite_or_zero(
					     kvmem_k_src(p, j, 0, t, h, c))));
		return kvmem_scale_of(amax, l->qmax);
	}
	if (is_v)
		idx -= l->nscales_k;
	h = idx / per_head;
	t = idx % per_head / groups;
	c = idx % groups * g->group_size;
	if (t >= j->n)
		return 0;
	for (i = 0; i < g->group_size; i++)
		amax = fmaxf(amax, fabsf(kvmem_finite_or_zero(kvmem_k_src(
					   p, j, is_v, t, h, c + i))));
	return kvmem_scale_of(amax, l->qmax);
}

/* Data byte @byte of token row @r's quantized row (the padding is 0). */
static __device__ __forceinline__ unsigned int
kvmem_k_row_byte(const struct kvmem_k_encode *p,
		 const struct kvmem_k_encode_job *j,
		 const struct kvmem_k_layout *l, const uint16_t *sc, int is_v,
		 unsigned int r, unsigned int h, unsigned int byte)
{
	const struct kvmem_k_geom *g = &p->g;
	const unsigned int D = g->head_dim;
	unsigned int out = 0, i, first, last;

	if (l->bits == 16) {
		i = byte / 2;
		if (i >= D)
			return 0;
		return kvmem_f2h(kvmem_finite_or_zero(
			       kvmem_k_src(p, j, is_v, r, h, i))) >>
			       (8 * (byte % 2)) &
		       0xff;
	}
	first = byte * 8 / l->bits;
	last = (byte * 8 + 7) / l->bits;
	for (i = first; i <= last && i < D; i++) {
		unsigned int si = kvmem_k_scale_of(
			g, l, is_v, kvmem_k_row_scale(g, l, is_v, h, j->t0 + r),
			i);
		const float x = kvmem_k_src(p, j, is_v, r, h, i);
		unsigned int q = l->format == KVMEM_FMT_FP8
					 ? kvmem_quant_fp8(x, kvmem_h2f(sc[si]))
					 : kvmem_quant_one(x, kvmem_h2f(sc[si]),
							   l->qmax);

		out |= (q & ((1u << l->bits) - 1)) << (i * l->bits - byte * 8);
	}
	return out & 0xff;
}

extern "C" __global__ void KVMEM_K_BOUNDS
kvmem_k_encode(const struct kvmem_k_encode p)
{
	KVMEM_DYN_SMEM(smem);
	__shared__ uint32_t crc_table[256];
	__shared__ uint32_t crc_part[KVMEM_K_THREADS];
	__shared__ union {
		struct kvmem_page_hdr h;
		uint16_t s[sizeof(struct kvmem_page_hdr) / 2];
	} hd;
	const struct kvmem_k_encode_job *j =
		(const struct kvmem_k_encode_job *)p.jobs + blockIdx.x;
	const struct kvmem_k_geom *g = &p.g;
	const struct kvmem_k_layout *l =
		&g->l[j->flags & KVMEM_HDR_HOT ? 1 : 0];
	uint8_t *page = (uint8_t *)j->page;
	uint16_t *sc = (uint16_t *)smem;
	const unsigned int upr = l->row_words / l->unit;
	const unsigned int nb = kvmem_k_unit_bytes(l);
	const unsigned int nrows = 2 * g->kv_heads * j->n;
	unsigned int i;

	/* A job that does not fit its page writes nothing; every thread of
	 * the CTA returns here, before any barrier. */
	if (!j->n || j->n > g->tokens_per_page ||
	    j->t0 > g->tokens_per_page - j->n ||
	    (!(j->flags & KVMEM_HDR_HOT) && j->t0))
		return;
	kvmem_k_crc_table(crc_table);
	/* A page written from its first row is written whole. */
	if (j->t0 == 0)
		for (i = KVMEM_K_HDR_BYTES + threadIdx.x; i < l->size;
		     i += blockDim.x)
			page[i] = 0;
	for (i = threadIdx.x; i < l->nscales_k + l->nscales_v; i += blockDim.x)
		sc[i] = kvmem_k_make_scale(&p, j, l, i);
	__syncthreads();

	for (i = threadIdx.x; i < l->scale_words; i += blockDim.x) {
		uint64_t lo;
		unsigned int hi;

		kvmem_k_word_encode(
			KVMEM_CODEC_GOLAY24,
			kvmem_k_bits12(sc, l->nscales_k + l->nscales_v, 12 * i),
			&lo, &hi);
		kvmem_k_word_store(page + l->scales_off + 3 * i,
				   KVMEM_CODEC_GOLAY24, lo, hi);
	}
	/* The checks: of each segment of the scales, or of each row written
	 * in a page without (its row_data bytes, the padding 0). */
	for (i = threadIdx.x; i < (l->scale_words ? l->nchecks : nrows);
	     i += blockDim.x) {
		uint32_t crc = 0xffffffffu;
		unsigned int b;

		if (l->scale_words) {
			const unsigned int nbytes =
				2 * (l->nscales_k + l->nscales_v);

			for (b = 2 * KVMEM_K_CHECK_SCALES * i;
			     b < 2 * KVMEM_K_CHECK_SCALES * (i + 1) &&
			     b < nbytes;
			     b++)
				crc = kvmem_k_crc_byte(
					crc_table, crc,
					sc[b / 2] >> (8 * (b % 2)) & 0xff);
			kvmem_k_check_store(page, l, i, ~crc);
		} else {
			int is_v = i >= g->kv_heads * j->n;
			unsigned int hr = i % (g->kv_heads * j->n);
			unsigned int h = hr / j->n, r = hr % j->n;

			for (b = 0; b < l->row_data; b++)
				crc = kvmem_k_crc_byte(
					crc_table, crc,
					kvmem_k_row_byte(&p, j, l, sc, is_v, r,
							 h, b));
			kvmem_k_check_store(
				page, l,
				kvmem_k_row_check(g, is_v, h, j->t0 + r), ~crc);
		}
	}
	for (i = threadIdx.x; i < nrows * upr; i += blockDim.x) {
		unsigned int row = i / upr, u = i % upr;
		int is_v = row >= g->kv_heads * j->n;
		unsigned int hr = row % (g->kv_heads * j->n);
		unsigned int h = hr / j->n, r = hr % j->n;
		uint8_t *code =
			page + (is_v ? l->v_off : l->k_off) +
			(h * g->tokens_per_page + j->t0 + r) * l->row_bytes;
		uint64_t bits = 0, lo;
		unsigned int k, hi;

		for (k = 0; k < nb; k++)
			bits |= (uint64_t)kvmem_k_row_byte(&p, j, l, sc, is_v,
							   r, h, u * nb + k)
				<< (8 * k);
		for (k = 0; k < l->unit; k++) {
			uint64_t d = l->k == 64 ? bits
						: bits >> (k * l->k) &
							  ((1ull << l->k) - 1);

			kvmem_k_word_encode(l->codec, d, &lo, &hi);
			kvmem_k_word_store(code + (u * l->unit + k) * l->wbytes,
					   l->codec, lo, hi);
		}
	}
	__syncthreads();

	/* CRC-32C of the page after its header: a slice per thread, the
	 * slices then joined in order (crc(AB) = crc(A) x^8|B| + crc(B)). */
	if (j->flags & KVMEM_HDR_SEALED) {
		const uint32_t len = l->size - KVMEM_K_HDR_BYTES;
		const uint32_t slice = (len + blockDim.x - 1) / blockDim.x;
		uint32_t from = threadIdx.x * slice, to = from + slice, crc;

		if (from > len)
			from = len;
		if (to > len)
			to = len;
		crc = 0xffffffffu;
		for (i = from; i < to; i++)
			crc = kvmem_k_crc_byte(crc_table, crc,
					       page[KVMEM_K_HDR_BYTES + i]);
		crc_part[threadIdx.x] = ~crc;
		__syncthreads();
		if (threadIdx.x == 0) {
			crc = crc_part[0];
			for (i = 1; i < blockDim.x; i++) {
				uint32_t a = i * slice < len ? i * slice : len;
				uint32_t b = a + slice < len ? a + slice : len;

				crc = kvmem_k_crc_mul(kvmem_k_crc_shift(b - a),
						      crc) ^
				      crc_part[i];
			}
			crc_part[0] = crc;
		}
	}
	if (threadIdx.x == 0) {
		unsigned int k;
		uint32_t crc;

		for (k = 0; k < sizeof(hd.s) / 2; k++)
			hd.s[k] = 0;
		hd.h.magic = KVMEM_PAGE_MAGIC;
		hd.h.version = KVMEM_PAGE_VERSION;
		hd.h.format = l->format;
		hd.h.codec = l->codec;
		hd.h.geometry = g->digest;
		hd.h.seq = j->seq;
		hd.h.layer = j->layer;
		hd.h.token_start = j->token_start;
		hd.h.ntokens = j->t0 + j->n;
		hd.h.flags = j->flags;
		hd.h.generation = j->generation;
		hd.h.crc = j->flags & KVMEM_HDR_SEALED ? crc_part[0] : 0;
		/* Its own check, over its 64 bytes with hcrc 0. */
		crc = 0xffffffffu;
		for (k = 0; k < sizeof(hd.h); k++)
			crc = kvmem_k_crc_byte(crc_table, crc,
					       hd.s[k / 2] >> (8 * (k % 2)) &
						       0xff);
		hd.h.hcrc = ~crc;
	}
	__syncthreads();
	/* The header's 64 bytes and 4 zero bits. */
	for (i = threadIdx.x; i < KVMEM_K_HDR_WORDS; i += blockDim.x) {
		uint64_t lo;
		unsigned int hi;

		kvmem_k_word_encode(
			KVMEM_CODEC_GOLAY24,
			kvmem_k_bits12(hd.s, sizeof(hd.s) / 2, 12 * i), &lo,
			&hi);
		kvmem_k_word_store(page + 3 * i, KVMEM_CODEC_GOLAY24, lo, hi);
	}
}
