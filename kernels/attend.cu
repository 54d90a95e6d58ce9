/* SPDX-License-Identifier: MIT */
/*
 * attend.cu - decode-on-load attention over protected pages
 *
 * Flash-decoding with split-K. A CTA takes one sequence, one KV head and
 * one share of that sequence's pages (blockIdx = (KV head, sequence,
 * split)); all G query heads of the KV head and all nq query tokens are its
 * query rows, so every codeword is decoded once per call. Per tile of rows
 * the CTA decodes K and V (codewords corrected in registers, never written
 * back), rebuilds the values uncorrectable words took away exactly as
 * kvmem_attend() does, and folds the tile into an online softmax. It then
 * writes its partial (max, sum, accumulator) per query row, and per page the
 * softmax mass of each query row; kvmem_k_combine merges the splits and
 * turns the masses into each page's share of the attention.
 *
 * Query token j of a sequence of len tokens sits at len - nq + j and sees
 * the keys at or before it. Erasures are rebuilt from the stored sequence,
 * whatever a query sees.
 *
 * Where a fast kernel ran first (attend_q4.cu), p.flags names the pages it
 * left, and kvmem_k_attend takes only those, writing its partial results
 * after the fast kernel's (p.parts); a CTA with none of them only marks
 * its partial result empty.
 */
#include "page_dev.cuh"

struct kvmem_k_tile {
	float *x; /* [T][D] */
	uint8_t *xe; /* [T][D] */
	const float *sc; /* the head's scales of this page */
	const uint8_t *sce;
};

/*
 * How the threads of a CTA walk the cells of a tile @cols wide with the
 * divisions done once, not per cell: a thread takes columns from col0 by
 * cstep and, of each, rows from row0 by rstep. Narrower than the CTA,
 * each thread keeps one column (the threads past the last whole set of
 * columns idle); wider, each thread takes every row of its columns.
 */
struct kvmem_k_walk {
	unsigned int col0, cstep, row0, rstep;
};

static __device__ __forceinline__ struct kvmem_k_walk
kvmem_k_walk(unsigned int cols)
{
	struct kvmem_k_walk w = { threadIdx.x, blockDim.x, 0, 1 };

	if (cols < blockDim.x) {
		w.col0 = threadIdx.x % cols;
		w.cstep = cols;
		w.row0 = threadIdx.x / cols;
		w.rstep = blockDim.x / cols;
		if (w.row0 >= w.rstep)
			w.col0 = cols;
	}
	return w;
}

/* The page of positions [p0, p1) of the table that holds @pos. */
static __device__ __forceinline__ unsigned int
kvmem_k_find(const struct kvmem_k_page *pg, unsigned int p0, unsigned int p1,
	     unsigned int pos)
{
	unsigned int lo = p0, hi = p1 - 1;

	while (lo < hi) {
		unsigned int mid = (lo + hi + 1) / 2;

		if (pg[mid].token_start <= pos)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* Does @policy rebuild a value lost as @e (KVMEM_K_LOST_*, or 0)? */
static __device__ __forceinline__ int kvmem_k_rebuilds(unsigned int policy,
						       int e)
{
	return policy == KVMEM_ERASE_KEEP ? e == KVMEM_K_LOST : e != 0;
}

/*
 * The quantized rows of kvmem_k_rows() for one codec and width known when
 * compiling: each thread decodes a unit of a row (codewords that carry
 * whole values) and dequantizes its values straight into @tl, without
 * the row's bytes and word outcomes passing through shared memory, and
 * with every division done once a unit. The same values, outcomes and
 * counts as the general path.
 */
template <unsigned int CODEC, unsigned int BITS, bool FP8 = false>
static __device__ __forceinline__ int
kvmem_k_rows_q(const struct kvmem_k_geom *g, const struct kvmem_k_layout *l,
	       unsigned int policy, const uint8_t *code, int chan,
	       unsigned int t0, unsigned int n, const struct kvmem_k_tile *tl,
	       struct kvmem_k_counts *c, unsigned long long *nlost)
{
	constexpr unsigned int K = CODEC == KVMEM_CODEC_GOLAY24	   ? 12
				   : CODEC == KVMEM_CODEC_SECDED72 ? 64
								   : 4;
	constexpr unsigned int UNIT = K % 8 ? 2 : 1;
	constexpr unsigned int WB = CODEC == KVMEM_CODEC_GOLAY24    ? 3
				    : CODEC == KVMEM_CODEC_SECDED72 ? 9
								    : 1;
	constexpr unsigned int VPU = UNIT * K / BITS;
	const unsigned int D = g->head_dim, gs = g->group_size;
	const unsigned int groups = D / gs;
	const struct kvmem_k_walk wk = kvmem_k_walk(l->row_words / UNIT);
	unsigned int u, r, v, clean = 0, lostn = 0;
	int any = 0;

	for (u = wk.col0; u < l->row_words / UNIT; u += wk.cstep) {
		const unsigned int d0 = u * VPU, q0 = d0 / gs, rem0 = d0 % gs;

		for (r = wk.row0; r < n; r += wk.rstep) {
			const uint8_t *w =
				code + r * l->row_bytes + u * UNIT * WB;
			unsigned int st0, st1 = 0, gi = q0, rem = rem0, hi;
			uint64_t bits, lo;
			int nb;

			kvmem_k_word_load(w, CODEC, &lo, &hi);
			st0 = (unsigned int)kvmem_k_word_correct(CODEC, &lo,
								 &hi, &nb);
			/* Clean words, nearly all, counted in a register. */
			if (st0)
				kvmem_k_count(c, (int)st0, nb);
			clean += !st0;
			bits = kvmem_k_word_data(CODEC, lo);
			if constexpr (UNIT == 2) {
				kvmem_k_word_load(w + WB, CODEC, &lo, &hi);
				st1 = (unsigned int)kvmem_k_word_correct(
					CODEC, &lo, &hi, &nb);
				if (st1)
					kvmem_k_count(c, (int)st1, nb);
				clean += !st1;
				bits |= kvmem_k_word_data(CODEC, lo) << K;
			}
			/* Past the row's last value, a unit holds padding. */
			for (v = 0; v < VPU && d0 + v < D; v++) {
				const unsigned int x = r * D + d0 + v;
				const unsigned int si =
					chan ? d0 + v : (t0 + r) * groups + gi;
				/* The words value v takes bits from. */
				const unsigned int ws =
					(v * BITS < K ? st0 : 0) |
					((v + 1) * BITS > K ? st1 : 0);
				const unsigned int raw =
					(unsigned int)(bits >> (v * BITS));
				int lost = tl->sce[si];
				int e;

				if constexpr (FP8) {
					/* The NaN code is never written: one
					 * read back is lost and reads 0, as
					 * in kvmem__page_rows(). */
					tl->x[x] = kvmem_e4m3_to_float(raw &
								       0xff) *
						   tl->sc[si];
					if (!isfinite(tl->x[x])) {
						tl->x[x] = 0.0f;
						lost = 1;
					}
				} else {
					tl->x[x] =
						(float)kvmem_sext(raw, BITS) *
						tl->sc[si];
				}
				e = lost	      ? KVMEM_K_LOST
				    : ws & KVMEM_K_UE ? KVMEM_K_LOST_BOUNDED
						      : 0;
				tl->xe[x] = (uint8_t)e;
				if (e) {
					lostn++;
					any |= kvmem_k_rebuilds(policy, e);
				}
				if (++rem == gs) {
					rem = 0;
					gi++;
				}
			}
		}
	}
	c->clean += clean;
	*nlost += lostn;
	return __syncthreads_or(any);
}

/* kvmem_k_rows_q() for @l's width: 2, 4 or 8 bits (int8 or fp8), the
 * quantized formats. */
template <unsigned int CODEC>
static __device__ __forceinline__ int
kvmem_k_rows_qc(const struct kvmem_k_geom *g, const struct kvmem_k_layout *l,
		unsigned int policy, const uint8_t *code, int chan,
		unsigned int t0, unsigned int n, const struct kvmem_k_tile *tl,
		struct kvmem_k_counts *c, unsigned long long *nlost)
{
	switch (l->bits) {
	case 2:
		return kvmem_k_rows_q<CODEC, 2>(g, l, policy, code, chan, t0, n,
						tl, c, nlost);
	case 4:
		return kvmem_k_rows_q<CODEC, 4>(g, l, policy, code, chan, t0, n,
						tl, c, nlost);
	default:
		if (l->format == KVMEM_FMT_FP8)
			return kvmem_k_rows_q<CODEC, 8, true>(
				g, l, policy, code, chan, t0, n, tl, c, nlost);
		return kvmem_k_rows_q<CODEC, 8>(g, l, policy, code, chan, t0, n,
						tl, c, nlost);
	}
}

/*
 * Decode rows [t0, t0 + n) of head @h of K or V into @tl, each value's
 * KVMEM_K_LOST_* in tl->xe; returns, the same in every thread, whether
 * @policy rebuilds any. Quantized rows go to kvmem_k_rows_q(). FP16 rows,
 * in a page without scales, are held to their checks
 * (kvmem__page_rows()): a row's two check words counted with its words,
 * a lost row as one uncorrectable word more.
 */
static __device__ __forceinline__ int
kvmem_k_rows(const struct kvmem_k_geom *g, const struct kvmem_k_layout *l,
	     unsigned int policy, const uint8_t *page, int is_v, unsigned int h,
	     unsigned int t0, unsigned int n, uint8_t *data, uint8_t *wst,
	     uint8_t *rst, const uint32_t *tab, const struct kvmem_k_tile *tl,
	     struct kvmem_k_counts *c, unsigned long long *nlost)
{
	const unsigned int D = g->head_dim;
	const unsigned int upr = l->row_words / l->unit;
	const uint8_t *code = page + (is_v ? l->v_off : l->k_off) +
			      (h * g->tokens_per_page + t0) * l->row_bytes;
	const int chan = !is_v && l->chan;
	struct kvmem_k_walk wk = kvmem_k_walk(upr);
	unsigned int i, j, st, r, u, d;
	int any = 0;

	/* The same in every thread: a quantized page, of a checked codec. */
	if (l->qmax) {
		switch (l->codec) {
		case KVMEM_CODEC_H74:
			return kvmem_k_rows_qc<KVMEM_CODEC_H74>(
				g, l, policy, code, chan, t0, n, tl, c, nlost);
		case KVMEM_CODEC_H84:
			return kvmem_k_rows_qc<KVMEM_CODEC_H84>(
				g, l, policy, code, chan, t0, n, tl, c, nlost);
		case KVMEM_CODEC_GOLAY24:
			return kvmem_k_rows_qc<KVMEM_CODEC_GOLAY24>(
				g, l, policy, code, chan, t0, n, tl, c, nlost);
		default:
			return kvmem_k_rows_qc<KVMEM_CODEC_SECDED72>(
				g, l, policy, code, chan, t0, n, tl, c, nlost);
		}
	}
	for (u = wk.col0; u < upr; u += wk.cstep)
		for (r = wk.row0; r < n; r += wk.rstep) {
			kvmem_k_unit_decode(l, code + r * l->row_bytes, u,
					    data + r * l->row_data, &st, c);
			for (j = 0; j < l->unit; j++)
				wst[r * l->row_words + u * l->unit + j] =
					(uint8_t)(st >> (2 * j) & 3);
		}
	__syncthreads();
	for (i = threadIdx.x; i < n; i += blockDim.x) {
		const uint8_t *rd = data + i * l->row_data;
		uint32_t crc = 0xffffffffu, want;
		int ue = 0, cue;

		for (j = 0; j < l->row_words; j++)
			ue |= wst[i * l->row_words + j] == KVMEM_K_UE;
		for (j = 0; j < l->row_data; j++)
			crc = kvmem_k_crc_byte(tab, crc, rd[j]);
		want = kvmem_k_check(page, l,
				     kvmem_k_row_check(g, is_v, h, t0 + i),
				     &cue, c);
		rst[i] = (uint8_t)kvmem_k_run(ue || cue, crc, want, c);
	}
	__syncthreads();
	wk = kvmem_k_walk(D);
	for (d = wk.col0; d < D; d += wk.cstep) {
		/* The words value d takes bits from. */
		const unsigned int w0 = d * l->bits / l->k;
		const unsigned int w1 = (d * l->bits + l->bits - 1) / l->k;

		for (r = wk.row0; r < n; r += wk.rstep) {
			const unsigned int x = r * D + d;
			int ws = 0, lost, e;

			for (j = w0; j <= w1; j++)
				ws |= wst[r * l->row_words + j];
			lost = kvmem_k_run_lost(rst[r], ws);
			tl->x[x] = kvmem_k_dequant(
				l,
				kvmem_k_raw(data + r * l->row_data, l->bits, d),
				0.0f, &lost);
			/* An FP16 value is never bounded: one of its words
			 * uncorrectable loses it. */
			e = lost || (ws & KVMEM_K_UE) ? KVMEM_K_LOST : 0;
			tl->xe[x] = (uint8_t)e;
			*nlost += (unsigned long long)(e != 0);
			any |= kvmem_k_rebuilds(policy, e);
		}
	}
	return __syncthreads_or(any);
}

/*
 * The rows just outside a tile, at pos0 - 1 and pos0 + n, which may be in
 * other pages: @edge[0][D] and @edge[1][D], @ok saying which values were
 * decoded and kept. First the checks that judge them (@runs: per row
 * kvmem_k_edge_runs() bytes, as kvmem_k_value() takes them), then the
 * values, one at a time; only tiles with a lost value need them.
 */
static __device__ __forceinline__ void
kvmem_k_edges(const struct kvmem_k_attend *p, unsigned int p0, unsigned int p1,
	      unsigned int len, unsigned int pos0, unsigned int n, int is_v,
	      unsigned int h, float *edge, uint8_t *ok, uint8_t *runs,
	      const uint32_t *tab)
{
	const struct kvmem_k_page *pg = (const struct kvmem_k_page *)p->pages;
	const unsigned int D = p->g.head_dim;
	const unsigned int nr = kvmem_k_edge_runs(&p->g);
	unsigned int i;

	for (i = threadIdx.x; i < 2 * nr; i += blockDim.x) {
		unsigned int pos = i < nr ? pos0 - 1 : pos0 + n, pi, t, f, cnt,
			     sg;
		const struct kvmem_k_layout *l;
		const uint8_t *page;

		if (i < nr ? pos0 == 0 : pos >= len)
			continue;
		pi = kvmem_k_find(pg, p0, p1, pos);
		l = &p->g.l[pg[pi].flags & KVMEM_HDR_HOT ? 1 : 0];
		page = (const uint8_t *)pg[pi].addr;
		t = pos - pg[pi].token_start;
		if (!l->scale_words) {
			if (i % nr == 0)
				runs[i] = (uint8_t)kvmem_k_row_run(
					&p->g, l, page, is_v, h, t, tab);
			continue;
		}
		/* Segment i % nr of those the row's scales meet. */
		cnt = kvmem_k_row_scales(&p->g, l, is_v, h, t, &f);
		sg = f / KVMEM_K_CHECK_SCALES + i % nr;
		if (sg <= (f + cnt - 1) / KVMEM_K_CHECK_SCALES)
			runs[i] = (uint8_t)kvmem_k_segment(page, l, sg, tab,
							   NULL);
	}
	__syncthreads();
	for (i = threadIdx.x; i < 2 * D; i += blockDim.x) {
		unsigned int pos = i < D ? pos0 - 1 : pos0 + n, pi;
		const struct kvmem_k_layout *l;
		int lost = 0;

		ok[i] = 0;
		if (i < D ? pos0 == 0 : pos >= len)
			continue;
		pi = kvmem_k_find(pg, p0, p1, pos);
		l = &p->g.l[pg[pi].flags & KVMEM_HDR_HOT ? 1 : 0];
		edge[i] = kvmem_k_value(&p->g, l, (const uint8_t *)pg[pi].addr,
					is_v, h, pos - pg[pi].token_start,
					i % D, runs + (i < D ? 0 : nr), &lost);
		ok[i] = (uint8_t)!lost;
	}
}

/*
 * Rebuild the lost values of a tile of @n rows: the mean of the same
 * channel at t - 1 and t + 1 as they decode (across the tile's edges
 * through @edge and @ok), a lost or missing neighbour left out, 0 with
 * neither. Under keep, a bounded value stays as received, but is still no
 * neighbour. Only values rebuilt are written and only values never lost
 * read, so the threads need no ordering among themselves.
 */
static __device__ __forceinline__ void
kvmem_k_rebuild(unsigned int policy, unsigned int D, unsigned int n, float *x,
		const uint8_t *xe, const float *edge, const uint8_t *ok)
{
	unsigned int i;

	for (i = threadIdx.x; i < n * D; i += blockDim.x) {
		unsigned int r = i / D, d = i % D;
		float sum = 0.0f;
		int have = 0;

		if (!kvmem_k_rebuilds(policy, xe[i]))
			continue;
		if (policy == KVMEM_ERASE_ZERO) {
			x[i] = 0.0f;
			continue;
		}
		if (r > 0 ? !xe[i - D] : ok[d]) {
			sum += r > 0 ? x[i - D] : edge[d];
			have++;
		}
		if (r + 1 < n ? !xe[i + D] : ok[D + d]) {
			sum += r + 1 < n ? x[i + D] : edge[D + d];
			have++;
		}
		x[i] = have == 2 ? sum * 0.5f : have ? sum : 0.0f;
	}
}

/* Rebuild a decoded tile of K or V that lost values. */
static __device__ __forceinline__ void
kvmem_k_fix(const struct kvmem_k_attend *p, unsigned int p0, unsigned int p1,
	    unsigned int len, unsigned int pos0, unsigned int n, int is_v,
	    unsigned int h, float *x, const uint8_t *xe, float *edge,
	    uint8_t *ok, uint8_t *runs, const uint32_t *tab)
{
	kvmem_k_edges(p, p0, p1, len, pos0, n, is_v, h, edge, ok, runs, tab);
	__syncthreads();
	kvmem_k_rebuild(p->erasure, p->g.head_dim, n, x, xe, edge, ok);
	__syncthreads();
}

/*
 * Judge the scale segments this head's K and V scales meet, a warp a
 * segment (kvmem_k_segment_warp()): the verdicts go to @kseg and @vseg,
 * from the segment of the head's first scale on. A segment's check words, and
 * a lost segment's one uncorrectable word more, are counted by the head
 * whose K or V scales hold its first scale, so once over the CTAs of a
 * page. The caller syncs before the verdicts are read.
 */
/* Segments the K or V scales of head @h meet; the first is *@s0. */
static __device__ __forceinline__ unsigned int
kvmem_k_head_nsegs(const struct kvmem_k_geom *g, const struct kvmem_k_layout *l,
		   int is_v, unsigned int h, unsigned int *s0)
{
	const unsigned int base = kvmem_k_row_scale(g, l, is_v, h, 0);
	const unsigned int cnt = kvmem_k_head_scales(g, l, is_v);

	*s0 = base / KVMEM_K_CHECK_SCALES;
	return cnt ? (base + cnt - 1) / KVMEM_K_CHECK_SCALES - *s0 + 1 : 0;
}

static __device__ __forceinline__ void
kvmem_k_head_segments(const struct kvmem_k_geom *g,
		      const struct kvmem_k_layout *l, const uint8_t *page,
		      unsigned int h, uint8_t *kseg, uint8_t *vseg,
		      const uint32_t *tab, struct kvmem_k_counts *c)
{
	unsigned int ks0, vs0, u;
	const unsigned int nk = kvmem_k_head_nsegs(g, l, 0, h, &ks0);
	const unsigned int nv = kvmem_k_head_nsegs(g, l, 1, h, &vs0);

	for (u = threadIdx.x / 32; u < nk + nv; u += KVMEM_K_WARPS) {
		const int is_v = u >= nk;
		const unsigned int i = is_v ? u - nk : u;
		const unsigned int sg = (is_v ? vs0 : ks0) + i;
		struct kvmem_k_counts cc = { 0, 0, 0, 0 };
		int r = kvmem_k_segment_warp(page, l, sg, tab, &cc);

		if (threadIdx.x % 32 == 0)
			(is_v ? vseg : kseg)[i] = (uint8_t)r;
		if (sg * KVMEM_K_CHECK_SCALES >=
		    kvmem_k_row_scale(g, l, is_v, h, 0))
			kvmem_k_counts_sum(c, &cc);
	}
}

/*
 * Decode this head's K or V scales of a page, their segments judged
 * (kvmem_k_head_segments(), @seg). Each word is counted once over the
 * CTAs of a page: a scale word by the scale that starts in it
 * (kvmem_k_scale()), the words past the last scale, which carry none, by
 * the thread that reads it.
 */
static __device__ __forceinline__ void
kvmem_k_head_scales_load(const struct kvmem_k_geom *g,
			 const struct kvmem_k_layout *l, const uint8_t *page,
			 unsigned int h, int is_v, float *sc, uint8_t *sce,
			 const uint8_t *seg, struct kvmem_k_counts *c)
{
	const unsigned int base = kvmem_k_row_scale(g, l, is_v, h, 0);
	const unsigned int cnt = kvmem_k_head_scales(g, l, is_v);
	const unsigned int last = l->nscales_k + l->nscales_v - 1;
	const unsigned int s0 = base / KVMEM_K_CHECK_SCALES;
	unsigned int idx, w;

	for (idx = base + threadIdx.x; idx < base + cnt; idx += blockDim.x) {
		int lost;

		sc[idx - base] = kvmem_k_scale(
			page, l, idx, seg[idx / KVMEM_K_CHECK_SCALES - s0],
			&lost, c);
		sce[idx - base] = (uint8_t)lost;
		if (idx != last)
			continue;
		/* Words come in pairs: one may follow the last scale's. */
		for (w = (16 * idx + 15) / 12 + 1; w < l->scale_words; w++) {
			int st;

			kvmem_k_meta_word(page + l->scales_off + 3 * w, &st, c);
		}
	}
}

/*
 * The last warp of the KV-head-0 CTA checks a page's header. As
 * kvmem_attend(): an uncorrectable header word, or a header that does not
 * match its hcrc, counts as a bad header, not as a lost value's word.
 */
static __device__ __forceinline__ void
kvmem_k_header(const uint8_t *page, const uint32_t *tab,
	       struct kvmem_k_counts *c, unsigned long long *headers_ue)
{
	struct kvmem_k_counts hc = { 0, 0, 0, 0 };
	int bad = kvmem_k_hdr_decode_warp(page, tab, &hc);

	if (threadIdx.x % 32 == 0)
		*headers_ue += (unsigned long long)bad;
	c->clean += hc.clean;
	c->corrected += hc.corrected;
	c->bits += hc.bits;
}

/* The shared memory of an attention CTA (kvmem_k_attend_carve()). */
struct kvmem_k_cta {
	float *q, *acc, *s, *m, *lsum, *corr, *pmax, *psum, *edge;
	uint8_t *edge_ok, *eruns, *data, *wst, *rst;
	uint32_t *tab;
	struct kvmem_k_tile kt, vt;
};

/*
 * Fold the scores of a tile of @n tokens (@x->s, [QR][T]) into the online
 * softmax of each query row, a warp a row and a lane a token: the scores
 * become their weights, x->corr the factor that rescales what the
 * accumulator held, and the page's running max and sum take them too.
 */
static __device__ __forceinline__ void
kvmem_k_softmax(const struct kvmem_k_cta *x, unsigned int QR, unsigned int T,
		unsigned int n)
{
	unsigned int i, k;

	for (i = threadIdx.x / 32; i < QR; i += KVMEM_K_WARPS) {
		const unsigned int t = threadIdx.x % 32;
		float v = t < n ? x->s[i * T + t] : -INFINITY;
		float mt = v, mn, e, sum;

		for (k = 16; k; k /= 2)
			mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, k));
		if (mt == -INFINITY) {
			if (t < n)
				x->s[i * T + t] = 0.0f;
			if (!t)
				x->corr[i] = 1.0f;
			continue;
		}
		mn = fmaxf(x->m[i], mt);
		e = t < n ? expf(v - mn) : 0.0f;
		if (t < n)
			x->s[i * T + t] = e;
		sum = e;
		for (k = 16; k; k /= 2)
			sum += __shfl_xor_sync(0xffffffffu, sum, k);
		if (t)
			continue;
		x->corr[i] = expf(x->m[i] - mn);
		x->lsum[i] = x->lsum[i] * x->corr[i] + sum;
		x->m[i] = mn;
		if (x->pmax[i] != mn)
			x->psum[i] *= expf(x->pmax[i] - mn);
		x->pmax[i] = mn;
		x->psum[i] += sum;
	}
}

/*
 * One tile of any page: rows [t0, t0 + n) of head @h, at positions from
 * @pos0, decoded to shared memory, their lost values rebuilt, folded into
 * the softmax and the accumulator in shared memory.
 */
static __device__ __forceinline__ void
kvmem_k_tile_any(const struct kvmem_k_attend *p, const struct kvmem_k_cta *x,
		 const struct kvmem_k_layout *l, const uint8_t *page,
		 unsigned int p0, unsigned int p1, unsigned int len,
		 unsigned int h, unsigned int t0, unsigned int n,
		 unsigned int pos0, struct kvmem_k_counts *c,
		 unsigned long long *nlost)
{
	const struct kvmem_k_geom *g = &p->g;
	const unsigned int D = g->head_dim, G = p->n_heads / g->kv_heads;
	const unsigned int QR = G * p->nq, T = p->tile;
	unsigned int i;
	int klost, vlost, is_v;

	klost = kvmem_k_rows(g, l, p->erasure, page, 0, h, t0, n, x->data,
			     x->wst, x->rst, x->tab, &x->kt, c, nlost);
	vlost = kvmem_k_rows(g, l, p->erasure, page, 1, h, t0, n, x->data,
			     x->wst, x->rst, x->tab, &x->vt, c, nlost);
	for (is_v = 0; is_v < 2; is_v++)
		if (is_v ? vlost : klost)
			kvmem_k_fix(p, p0, p1, len, pos0, n, is_v, h,
				    is_v ? x->vt.x : x->kt.x,
				    is_v ? x->vt.xe : x->kt.xe, x->edge,
				    x->edge_ok, x->eruns, x->tab);

	/* The lanes of a warp take the tokens of a query row, each from its
	 * own column on (four floats at a time where the dimension
	 * allows): no bank conflicts. */
	for (i = threadIdx.x; i < QR * n; i += blockDim.x) {
		unsigned int r = i / n, t = i % n, d, dd;
		unsigned int qpos = len - p->nq + r / G;
		float dot = 0.0f;

		if (pos0 + t > qpos) {
			x->s[r * T + t] = -INFINITY;
			continue;
		}
		if (D % 4 == 0) {
			const kvmem_k_fvec<4> *qv =
				(const kvmem_k_fvec<4> *)(x->q + r * D);
			const kvmem_k_fvec<4> *kv =
				(const kvmem_k_fvec<4> *)(x->kt.x + t * D);

			for (d = 0, dd = t % (D / 4); d < D / 4; d++) {
				const kvmem_k_fvec<4> a = qv[dd];
				const kvmem_k_fvec<4> b = kv[dd];

				dot += a.x[0] * b.x[0] + a.x[1] * b.x[1] +
				       a.x[2] * b.x[2] + a.x[3] * b.x[3];
				dd = dd + 1 < D / 4 ? dd + 1 : 0;
			}
		} else {
			for (d = 0, dd = t % D; d < D; d++) {
				dot += x->q[r * D + dd] * x->kt.x[t * D + dd];
				dd = dd + 1 < D ? dd + 1 : 0;
			}
		}
		x->s[r * T + t] = p->scale * dot;
	}
	__syncthreads();
	kvmem_k_softmax(x, QR, T, n);
	__syncthreads();

	for (i = threadIdx.x; i < QR * D; i += blockDim.x) {
		unsigned int r = i / D, d = i % D, t;
		float a = x->acc[i] * x->corr[r];

		for (t = 0; t < n; t++)
			a += x->s[r * T + t] * x->vt.x[t * D + d];
		x->acc[i] = a;
	}
	__syncthreads();
}

extern "C" __global__ void KVMEM_K_BOUNDS
kvmem_k_attend(const struct kvmem_k_attend p)
{
	KVMEM_DYN_SMEM(smem);
	const struct kvmem_k_geom *g = &p.g;
	const struct kvmem_k_page *pg = (const struct kvmem_k_page *)p.pages;
	const uint32_t *sp = (const uint32_t *)p.seq_pages;
	const unsigned int h = blockIdx.x, b = blockIdx.y, split = blockIdx.z;
	const unsigned int D = g->head_dim, G = p.n_heads / g->kv_heads;
	const unsigned int QR = G * p.nq, T = p.tile;
	const unsigned int p0 = sp[b], p1 = sp[b + 1];
	const unsigned int per = (p1 - p0 + p.splits - 1) / p.splits;
	const unsigned int first = p0 + split * per;
	const unsigned int last = first + per < p1 ? first + per : p1;
	struct kvmem_k_attend_smem o;
	struct kvmem_k_counts c = { 0, 0, 0, 0 };
	struct kvmem_k_cta x;
	unsigned long long nlost = 0, headers_ue = 0;
	const uint8_t *fl = (const uint8_t *)p.flags;
	float *w = (float *)p.ws + (((size_t)b * g->kv_heads + h) * p.parts +
				    split + (fl ? p.splits : 0)) *
					   QR * (D + 2);
	uint64_t mass_off, flags_off;
	unsigned int len = 0, i, pi;
	int any = 0;

	/* After kvmem_k_attend_q4: only the pages it left, if any. */
	if (fl) {
		for (pi = first + threadIdx.x; pi < last; pi += blockDim.x)
			any |= fl[(size_t)pi * g->kv_heads + h];
		if (!__syncthreads_or(any)) {
			for (i = threadIdx.x; i < QR; i += blockDim.x) {
				w[2 * i] = -INFINITY;
				w[2 * i + 1] = 0.0f;
			}
			return;
		}
	}
	kvmem_k_attend_carve(g, QR, T, &o);
	x.q = (float *)(smem + o.q);
	x.acc = (float *)(smem + o.acc);
	x.s = (float *)(smem + o.s);
	x.m = (float *)(smem + o.m);
	x.lsum = (float *)(smem + o.l);
	x.corr = (float *)(smem + o.corr);
	x.pmax = (float *)(smem + o.pmax);
	x.psum = (float *)(smem + o.psum);
	x.edge = (float *)(smem + o.edge);
	x.edge_ok = smem + o.edge_ok;
	x.eruns = smem + o.eruns;
	x.data = smem + o.data;
	x.wst = smem + o.wst;
	x.rst = smem + o.rst;
	x.tab = (uint32_t *)(smem + o.crc);
	x.kt.x = (float *)(smem + o.kt);
	x.kt.xe = smem + o.ke;
	x.kt.sc = (const float *)(smem + o.sc[0]);
	x.kt.sce = smem + o.sce[0];
	x.vt.x = (float *)(smem + o.vt);
	x.vt.xe = smem + o.ve;
	x.vt.sc = (const float *)(smem + o.sc[1]);
	x.vt.sce = smem + o.sce[1];
	if (p1 > p0)
		len = pg[p1 - 1].token_start + pg[p1 - 1].ntokens;
	kvmem_k_attend_ws(g, p.batch, p.parts, QR, p.total_pages, &mass_off,
			  &flags_off);
	kvmem_k_crc_table(x.tab);

	kvmem_k_query_rows(&p, h, b, 1.0f, x.q);
	for (i = threadIdx.x; i < QR * D; i += blockDim.x)
		x.acc[i] = 0.0f;
	for (i = threadIdx.x; i < QR; i += blockDim.x) {
		x.m[i] = -INFINITY;
		x.lsum[i] = 0.0f;
	}
	__syncthreads();

	for (pi = first; pi < last; pi++) {
		const uint8_t *page = (const uint8_t *)pg[pi].addr;
		const int hot = pg[pi].flags & KVMEM_HDR_HOT ? 1 : 0;
		const struct kvmem_k_layout *l = &g->l[hot];
		unsigned int t0;

		if (fl && !fl[(size_t)pi * g->kv_heads + h])
			continue;
		if (h == 0 && threadIdx.x / 32 == KVMEM_K_WARPS - 1)
			kvmem_k_header(page, x.tab, &c, &headers_ue);
		kvmem_k_head_segments(g, l, page, h, smem + o.seg[0],
				      smem + o.seg[1], x.tab, &c);
		__syncthreads();
		kvmem_k_head_scales_load(g, l, page, h, 0,
					 (float *)(smem + o.sc[0]),
					 smem + o.sce[0], smem + o.seg[0], &c);
		kvmem_k_head_scales_load(g, l, page, h, 1,
					 (float *)(smem + o.sc[1]),
					 smem + o.sce[1], smem + o.seg[1], &c);
		for (i = threadIdx.x; i < QR; i += blockDim.x) {
			x.pmax[i] = -INFINITY;
			x.psum[i] = 0.0f;
		}
		__syncthreads();

		for (t0 = 0; t0 < pg[pi].ntokens; t0 += T) {
			const unsigned int n = pg[pi].ntokens - t0 < T
						       ? pg[pi].ntokens - t0
						       : T;
			const unsigned int pos0 = pg[pi].token_start + t0;

			kvmem_k_tile_any(&p, &x, l, page, p0, p1, len, h, t0, n,
					 pos0, &c, &nlost);
		}

		if (p.mass) {
			float *wm = (float *)(p.ws + mass_off) +
				    ((size_t)pi * g->kv_heads + h) * QR * 2;

			for (i = threadIdx.x; i < QR; i += blockDim.x) {
				wm[2 * i] = x.pmax[i];
				wm[2 * i + 1] = x.psum[i];
			}
		}
		__syncthreads();
	}

	for (i = threadIdx.x; i < QR * D; i += blockDim.x)
		w[2 * QR + i] = x.acc[i];
	for (i = threadIdx.x; i < QR; i += blockDim.x) {
		w[2 * i] = x.m[i];
		w[2 * i + 1] = x.lsum[i];
	}
	if (p.stats) {
		unsigned long long *st = (unsigned long long *)p.stats;

		if (c.clean)
			atomicAdd(&st[0], c.clean);
		if (c.corrected)
			atomicAdd(&st[1], c.corrected);
		if (c.ue)
			atomicAdd(&st[2], c.ue);
		if (nlost)
			atomicAdd(&st[3], nlost);
		if (headers_ue)
			atomicAdd(&st[4], headers_ue);
	}
}

/* Whether the @D values at @x are all finite. */
KVMEM_DFN int kvmem_k_row_finite(const float *x, unsigned int D)
{
	unsigned int d;

	for (d = 0; d < D; d++)
		if (!isfinite(x[d]))
			return 0;
	return 1;
}

/*
 * Merge the partial results of each (sequence, KV head, query row), the
 * splits of each kernel that ran (p.parts), one CTA per
 * (sequence, KV head), and turn the per-page masses into each page's
 * share of the softmax weights, summed over query rows: by the CTA of KV
 * head 0 of a sequence, so a page's share is summed in one order every
 * run.
 */
extern "C" __global__ void KVMEM_K_BOUNDS
kvmem_k_combine(const struct kvmem_k_attend p)
{
	KVMEM_DYN_SMEM(smem);
	const struct kvmem_k_geom *g = &p.g;
	const uint32_t *sp = (const uint32_t *)p.seq_pages;
	const unsigned int b = blockIdx.x, hc = blockIdx.y, D = g->head_dim;
	const unsigned int G = p.n_heads / g->kv_heads, QR = G * p.nq;
	const unsigned int rows = g->kv_heads * QR;
	/* This KV head's rows; every head's where the masses are summed. */
	const unsigned int r0 = p.mass && !hc ? 0 : hc * QR;
	const unsigned int r1 = p.mass && !hc ? rows : r0 + QR;
	float *ml = (float *)smem; /* [kv_heads][QR][2]: max, sum */
	const float *ws = (const float *)p.ws;
	unsigned int i, sx;

	for (i = r0 + threadIdx.x; i < r1; i += blockDim.x) {
		unsigned int h = i / QR, r = i % QR;
		const float *w = ws + ((size_t)b * g->kv_heads + h) * p.parts *
					      QR * (D + 2);
		float mx = -INFINITY, sum = 0.0f;

		for (sx = 0; sx < p.parts; sx++)
			mx = fmaxf(mx, w[sx * QR * (D + 2) + 2 * r]);
		for (sx = 0; sx < p.parts; sx++) {
			const float *ws_ = w + sx * QR * (D + 2);

			if (ws_[2 * r] != -INFINITY)
				sum += ws_[2 * r + 1] * expf(ws_[2 * r] - mx);
		}
		/* The splits' maxima drop a NaN score (fmaxf): a query row
		 * that is not finite is found here, and its sum made NaN. */
		if (!kvmem_k_row_finite(
			    (const float *)p.q +
				    (((size_t)b * p.nq + r / G) * p.n_heads +
				     h * G + r % G) *
					    D,
			    D))
			sum = NAN;
		ml[2 * i] = mx;
		ml[2 * i + 1] = sum;
	}
	__syncthreads();

	/* A row that saw no token reads 0; one whose sum is NaN (its query
	 * row was not finite) NaN, as the CPU library's. */
	for (i = threadIdx.x; i < QR * D; i += blockDim.x) {
		unsigned int r = i / D, row = hc * QR + r, d = i % D;
		const float *w = ws + ((size_t)b * g->kv_heads + hc) * p.parts *
					      QR * (D + 2);
		const float sum = ml[2 * row + 1];
		float a = 0.0f;

		for (sx = 0; sx < p.parts; sx++) {
			const float *ws_ = w + sx * QR * (D + 2);

			if (ws_[2 * r] != -INFINITY)
				a += ws_[2 * QR + r * D + d] *
				     expf(ws_[2 * r] - ml[2 * row]);
		}
		((float *)p.out)[(((size_t)b * p.nq + r / G) * p.n_heads +
				  hc * G + r % G) *
					 D +
				 d] = sum > 0.0f || sum != sum ? a / sum : 0.0f;
	}

	if (p.mass && !hc) {
		uint64_t mo, fo;
		const float *wm;

		kvmem_k_attend_ws(g, p.batch, p.parts, QR, p.total_pages, &mo,
				  &fo);
		wm = (const float *)(p.ws + mo);
		for (i = sp[b] + threadIdx.x; i < sp[b + 1]; i += blockDim.x) {
			const float *pm = wm + (size_t)i * rows * 2;
			float share = 0.0f;
			unsigned int r;

			for (r = 0; r < rows; r++)
				if (pm[2 * r + 1] > 0.0f &&
				    ml[2 * r + 1] > 0.0f)
					share += pm[2 * r + 1] *
						 expf(pm[2 * r] - ml[2 * r]) /
						 ml[2 * r + 1];
			((float *)p.mass)[i] = share;
		}
	}
}
