/* SPDX-License-Identifier: MIT */
/*
 * attend.c - decode-on-load attention and reading a sequence back
 *
 * Both walk a layer's pages through a reader, which decodes a tile of rows
 * of one KV head at a time (kvmem__page_rows(): codewords checked and
 * corrected, values dequantized) and rebuilds the values that uncorrectable
 * words took away. Attention keeps an online softmax per query head, so no
 * more than a tile of K and V is ever decoded at once; kvmem_attend(),
 * kvmem_attend_causal() (a chunk of queries) and kvmem_attend_batch()
 * (several sequences) are one walk over chunks of pages (Threads, below).
 *
 * Rebuilding by interpolation (Roy, section 5.3): an erased value becomes
 * the mean of the same channel at t-1 and t+1 as they decode, across page
 * boundaries; a neighbour that is itself erased, or past either end of the
 * sequence, is left out; with neither it reads 0.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "internal.h"

#define TILE KVMEM__ATTN_TILE

struct reader {
	struct kvmem_cache *c;
	const struct kvmem__layer *lt;
	uint32_t policy;
	uint32_t cur; /* page whose scales are in scales[] */
	float *scales, *nscales; /* current page's, a neighbour's */
	uint8_t *serased, *nserased; /* NULL'd in use when none is */
	/* the current page's scales and which are erased (NULL: none) */
	const float *sc;
	const uint8_t *se;
	/* codebooks decoded once for the vq2 pages that share them: [0]
	 * the current page's, [1] a neighbour's (load_codebooks()) */
	struct {
		const struct kvmem__vq *of;
		float *entries;
		uint8_t *lost;
		long nlost; /* entries lost; -1: none decoded */
	} vq[2];
	float *nrow; /* a neighbour row */
	uint8_t *nrow_erased;
	void *scratch; /* kvmem__page_scratch_size() */
	struct kvmem_page_counts pc;
	uint64_t headers_ue;
};

static int reader_open(struct reader *r, struct kvmem_seq *s, uint32_t layer,
		       uint32_t policy, void *scratch)
{
	struct kvmem_cache *c = s->c;
	const size_t ns = (size_t)c->max_scales + 1,
		     ne = (size_t)2 * c->g.kv_heads * KVMEM__VQ_ENTRIES;
	uint32_t i;

	memset(r, 0, sizeof(*r));
	r->c = c;
	r->lt = &s->layer[layer];
	r->policy = policy;
	r->scratch = scratch;
	r->cur = UINT32_MAX;
	r->scales = malloc(ns * sizeof(float));
	r->nscales = malloc(ns * sizeof(float));
	r->serased = malloc(ns);
	r->nserased = malloc(ns);
	r->nrow = malloc(c->g.head_dim * sizeof(float));
	r->nrow_erased = malloc(c->g.head_dim);
	/* Room for codebooks in a cache that has had some: the reader
	 * may meet a vq2 page in any sequence of it (a batch's too). */
	for (i = 0; i < 2; i++) {
		r->vq[i].nlost = -1;
		if (!c->vq_used)
			continue;
		r->vq[i].entries = malloc(ne * KVMEM__VQ_DIM * sizeof(float));
		r->vq[i].lost = malloc(ne);
		if (!r->vq[i].entries || !r->vq[i].lost)
			return -ENOMEM;
	}
	if (!r->scales || !r->nscales || !r->serased || !r->nserased ||
	    !r->nrow || !r->nrow_erased)
		return -ENOMEM;
	return 0;
}

static void reader_close(struct reader *r)
{
	free(r->scales);
	free(r->nscales);
	free(r->serased);
	free(r->nserased);
	free(r->nrow);
	free(r->nrow_erased);
	free(r->vq[0].entries);
	free(r->vq[0].lost);
	free(r->vq[1].entries);
	free(r->vq[1].lost);
}

/*
 * The codebooks of vq2 page @p in slot @i of the reader (0: the current
 * page's, 1: a neighbour's, so that rebuilding a value from a page with
 * other codebooks leaves the current page's alone), decoded once for the
 * pages that share them; their words are not counted here
 * (kvmem_seq_codebook_read() says what they hold). Codebooks that cannot
 * be decoded (out of memory) read as all lost.
 */
static void load_codebooks(struct reader *r, const struct kvmem__page *p,
			   int i)
{
	const size_t ne = (size_t)2 * r->c->g.kv_heads * KVMEM__VQ_ENTRIES;
	long lost = -ENOMEM;

	if (r->vq[i].of == p->vq && r->vq[i].nlost >= 0)
		return;
	r->vq[i].of = p->vq;
	if (p->vq)
		lost = kvmem__vq_read(p->vq, r->vq[i].entries, r->vq[i].lost,
				      NULL);
	if (lost < 0) {
		memset(r->vq[i].entries, 0,
		       ne * KVMEM__VQ_DIM * sizeof(float));
		memset(r->vq[i].lost, 1, ne);
		lost = (long)ne;
	}
	r->vq[i].nlost = lost;
}

/*
 * Check page @pi's header and decode its scales into @scales, @erased;
 * point @sc and @se at them (@se NULL when none is erased), or for a vq2
 * page at its codebooks, in codebook slot @slot.
 */
static void load_scales(struct reader *r, uint32_t pi, float *scales,
			uint8_t *erased, int slot, const float **sc,
			const uint8_t **se)
{
	const struct kvmem__page *p = r->lt->pages[pi];
	struct kvmem_ecc_counts hc;
	struct kvmem_page_hdr hdr;

	/* The page table is the authority on what a page is; the header
	 * is checked so that damage to it is seen and counted. */
	if (kvmem_page_read_header(p->data, &r->c->g, &hdr, &hc) == -EBADMSG)
		r->headers_ue++;
	kvmem__counts_add(&r->pc.header, &hc);
	if (p->layout->format == KVMEM_FMT_VQ2) {
		load_codebooks(r, p, slot);
		*sc = r->vq[slot].entries;
		*se = r->vq[slot].nlost ? r->vq[slot].lost : NULL;
		return;
	}
	*sc = scales;
	*se = kvmem__page_scales(&r->c->g, p->layout, p->data, scales, erased,
				 &r->pc.scales, r->scratch)
		      ? erased
		      : NULL;
}

static void reader_page(struct reader *r, uint32_t pi)
{
	if (r->cur == pi)
		return;
	load_scales(r, pi, r->scales, r->serased, 0, &r->sc, &r->se);
	r->cur = pi;
}

/*
 * Decode token @pos's row of head @h into r->nrow / r->nrow_erased: a
 * neighbour of an erased value, possibly in another page.
 */
static void neighbour_row(struct reader *r, uint32_t pos, int is_v, uint32_t h)
{
	const struct kvmem_geometry *g = &r->c->g;
	uint32_t pi = kvmem__page_index(g, pos);
	const struct kvmem__page *p = r->lt->pages[pi];
	struct kvmem_ecc_counts scratch_counts = { 0 };
	const float *sc = r->sc;
	const uint8_t *se = r->se;

	if (pi != r->cur) {
		struct kvmem_page_counts keep = r->pc;
		uint64_t keep_ue = r->headers_ue;

		load_scales(r, pi, r->nscales, r->nserased, 1, &sc, &se);
		/* Counted once, when the walk reaches that page itself. */
		r->pc = keep;
		r->headers_ue = keep_ue;
	}
	if (!kvmem__page_rows(g, p->layout, p->data, is_v, h,
			      pos - p->token_start, 1, sc, se, r->nrow,
			      r->nrow_erased, &scratch_counts, r->scratch))
		memset(r->nrow_erased, 0, g->head_dim);
}

/*
 * Rebuild the erased values of rows [pos0, pos0 + n) in @out; under the
 * keep policy, only those it may not keep (KVMEM__LOST).
 */
static void rebuild(struct reader *r, uint32_t pos0, uint32_t n, int is_v,
		    uint32_t h, float *out, const uint8_t *erased)
{
	const uint32_t D = r->c->g.head_dim, len = r->lt->len;
	float *before = NULL, *after = NULL;
	uint8_t *before_e = NULL, *after_e = NULL;
	uint32_t t, d;

	for (t = 0; t < n; t++) {
		for (d = 0; d < D; d++) {
			size_t i = (size_t)t * D + d;
			float sum = 0.0f;
			int have = 0;

			if (!erased[i] || (r->policy == KVMEM_ERASE_KEEP &&
					   erased[i] == KVMEM__LOST_BOUNDED))
				continue;
			if (r->policy == KVMEM_ERASE_ZERO) {
				out[i] = 0.0f;
				continue;
			}
			if (t > 0) {
				if (!erased[i - D]) {
					sum += out[i - D];
					have++;
				}
			} else if (pos0 > 0) {
				if (!before) {
					before = malloc(D * sizeof(float));
					before_e = malloc(D);
					if (!before || !before_e)
						goto out;
					neighbour_row(r, pos0 - 1, is_v, h);
					memcpy(before, r->nrow,
					       D * sizeof(float));
					memcpy(before_e, r->nrow_erased, D);
				}
				if (!before_e[d]) {
					sum += before[d];
					have++;
				}
			}
			if (t + 1 < n) {
				if (!erased[i + D]) {
					sum += out[i + D];
					have++;
				}
			} else if (pos0 + t + 1 < len) {
				if (!after) {
					after = malloc(D * sizeof(float));
					after_e = malloc(D);
					if (!after || !after_e)
						goto out;
					neighbour_row(r, pos0 + t + 1, is_v, h);
					memcpy(after, r->nrow,
					       D * sizeof(float));
					memcpy(after_e, r->nrow_erased, D);
				}
				if (!after_e[d]) {
					sum += after[d];
					have++;
				}
			}
			out[i] = have == 2 ? sum * 0.5f : have ? sum : 0.0f;
		}
	}
out:
	free(before);
	free(before_e);
	free(after);
	free(after_e);
}

/*
 * Decode rows [t0, t0 + n) of page @pi, head @h, K or V, into @out with
 * erased values rebuilt. @erased is room for n rows of flags.
 */
static void reader_rows(struct reader *r, uint32_t pi, int is_v, uint32_t h,
			uint32_t t0, uint32_t n, float *out, uint8_t *erased)
{
	const struct kvmem__page *p = r->lt->pages[pi];
	long ne;

	reader_page(r, pi);
	ne = kvmem__page_rows(&r->c->g, p->layout, p->data, is_v, h, t0, n,
			      r->sc, r->se, out, erased, &r->pc.payload,
			      r->scratch);
	if (ne <= 0)
		return;
	r->pc.values_erased += (uint64_t)ne;
	rebuild(r, p->token_start + t0, n, is_v, h, out, erased);
}

/* Rows of page @pi as clean int4, lm4 or lm2 codes a byte, or NULL: see
 * page.c. */
static const uint8_t *reader_cw4(struct reader *r, uint32_t pi, int is_v,
				 uint32_t h, uint32_t t0, uint32_t n,
				 const float **sc, size_t *sstride,
				 unsigned int *group, size_t *rstride)
{
	const struct kvmem__page *p = r->lt->pages[pi];

	reader_page(r, pi);
	return kvmem__page_rows_cw4(&r->c->g, p->layout, p->data, is_v, h, t0,
				    n, r->sc, r->se, sc, sstride, group,
				    rstride, &r->pc.payload, r->scratch);
}

/* Rows of vq2 page @pi as indices into *@book, or NULL: see page.c. */
static const uint8_t *reader_vq(struct reader *r, uint32_t pi, int is_v,
				uint32_t h, uint32_t t0, uint32_t n,
				const float **book, size_t *rstride)
{
	const struct kvmem__page *p = r->lt->pages[pi];

	reader_page(r, pi);
	return kvmem__page_rows_vq(&r->c->g, p->layout, p->data, is_v, h, t0,
				   n, r->sc, r->se, book, rstride,
				   &r->pc.payload, r->scratch);
}

/* Rows of page @pi as int8 values or E4M3 codes, or NULL: see page.c. */
static const uint8_t *reader_b8(struct reader *r, uint32_t pi, int is_v,
				uint32_t h, uint32_t t0, uint32_t n,
				const float **sc, size_t *sstride,
				unsigned int *group, size_t *rstride)
{
	const struct kvmem__page *p = r->lt->pages[pi];

	reader_page(r, pi);
	return kvmem__page_rows_b8(&r->c->g, p->layout, p->data, is_v, h, t0,
				   n, r->sc, r->se, sc, sstride, group, rstride,
				   &r->pc.payload, r->scratch);
}

int kvmem_seq_read(struct kvmem_seq *s, uint32_t layer, uint32_t start,
		   uint32_t ntokens, uint32_t erasure, float *k, float *v,
		   struct kvmem_page_counts *counts)
{
	const struct kvmem_geometry *g;
	struct reader r;
	float *tile = NULL;
	uint8_t *erased = NULL;
	uint32_t pos, end, h;
	size_t tok;
	int ret, is_v;

	if (!s || layer >= s->c->g.layers || erasure > KVMEM_ERASE_KEEP ||
	    start > s->layer[layer].len ||
	    ntokens > s->layer[layer].len - start || (ntokens && (!k || !v)))
		return -EINVAL;
	ret = kvmem__seq_acquire(s);
	if (ret)
		return ret;
	g = &s->c->g;
	tok = (size_t)g->kv_heads * g->head_dim;
	ret = reader_open(&r, s, layer, erasure, s->c->scratch);
	tile = malloc((size_t)TILE * g->head_dim * sizeof(float));
	erased = malloc((size_t)TILE * g->head_dim);
	if (ret || !tile || !erased) {
		ret = -ENOMEM;
		goto out;
	}
	end = start + ntokens;
	for (pos = start; pos < end;) {
		uint32_t pi = kvmem__page_index(g, pos);
		const struct kvmem__page *p = r.lt->pages[pi];
		uint32_t t0 = pos - p->token_start;
		uint32_t n = p->ntokens - t0, t;

		if (n > end - pos)
			n = end - pos;
		if (n > TILE)
			n = TILE;
		for (is_v = 0; is_v < 2; is_v++)
			for (h = 0; h < g->kv_heads; h++) {
				reader_rows(&r, pi, is_v, h, t0, n, tile,
					    erased);
				kvmem__rotate_rows(g, tile, n, 1);
				for (t = 0; t < n; t++)
					memcpy((is_v ? v : k) +
						       (pos - start + t) * tok +
						       (size_t)h * g->head_dim,
					       tile + (size_t)t * g->head_dim,
					       g->head_dim * sizeof(float));
			}
		pos += n;
	}
	ret = 0;
	if (counts)
		*counts = r.pc;
out:
	reader_close(&r);
	free(tile);
	free(erased);
	return ret;
}

void *kvmem__alloc_lines(size_t bytes)
{
	return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

int kvmem__attn_init(struct kvmem__attn *a, uint32_t n_heads, uint32_t G,
		     uint32_t D, float scale)
{
	uint32_t i;

	memset(a, 0, sizeof(*a));
	a->kn = kvmem__attn();
	a->G = G;
	a->D = D;
	a->qg = G;
	a->pos0 = UINT32_MAX;
	a->scale = scale;
	a->acc = kvmem__alloc_lines((size_t)n_heads * D * sizeof(float));
	a->m = malloc(n_heads * sizeof(float));
	a->l = calloc(n_heads, sizeof(float));
	a->sc = kvmem__alloc_lines((size_t)G * KVMEM__ATTN_TILE *
				   sizeof(float));
	if (a->acc)
		memset(a->acc, 0, (size_t)n_heads * D * sizeof(float));
	if (!a->acc || !a->m || !a->l || !a->sc) {
		kvmem__attn_free(a);
		return -ENOMEM;
	}
	for (i = 0; i < n_heads; i++)
		a->m[i] = -INFINITY;
	return 0;
}

void kvmem__attn_free(struct kvmem__attn *a)
{
	free(a->acc);
	free(a->m);
	free(a->l);
	free(a->sc);
}

void kvmem__attn_softmax(struct kvmem__attn *a, uint32_t h, uint32_t n,
			 float *mass)
{
	const uint32_t G = a->G, D = a->D, first = h * G;
	uint32_t g;

	for (g = 0; g < G; g++) {
		float *acc = a->acc + (size_t)(first + g) * D;
		float old = a->m[first + g], m = old, sum;
		float *sc = a->sc + (size_t)g * n;
		/* The last token row g's query sees, and so how many of
		 * the tile's: the rest weigh 0, a whole tile of them
		 * leaves the row's state alone. */
		uint64_t last = (uint64_t)a->pos0 + g / a->qg;
		uint32_t nv = n;

		if ((uint64_t)a->tpos + n - 1 > last) {
			nv = a->tpos > last ? 0
					    : (uint32_t)(last - a->tpos + 1);
			memset(sc + nv, 0, (n - nv) * sizeof(float));
			if (!nv)
				continue;
		}
		sum = a->kn->softmax(sc, nv, &m);

		if (m != old) {
			float corr = kvmem__expf(old - m);

			a->l[first + g] *= corr;
			a->kn->rescale(acc, D, corr);
			/* The max only grows: rescaling a running sum to the
			 * new one keeps it exact. */
			if (mass)
				mass[2 * g + 1] *= kvmem__expf(mass[2 * g] - m);
		}
		a->l[first + g] += sum;
		a->m[first + g] = m;
		if (mass) {
			mass[2 * g] = m;
			mass[2 * g + 1] += sum;
		}
	}
}

void kvmem__attn_tile(struct kvmem__attn *a, const float *q, uint32_t h,
		      const float *k, const float *v, uint32_t n, float *mass)
{
	const uint32_t G = a->G, D = a->D;

	a->kn->scores(q + (size_t)h * G * D, G, k, n, D, a->scale, a->sc);
	kvmem__attn_softmax(a, h, n, mass);
	a->kn->accum(a->sc, G, v, n, D, a->acc + (size_t)h * G * D);
}

void kvmem__attn_finish(const struct kvmem__attn *a, uint32_t n_heads,
			float *out)
{
	uint32_t i, d;

	for (i = 0; i < n_heads; i++)
		for (d = 0; d < a->D; d++)
			out[(size_t)i * a->D + d] =
				a->acc[(size_t)i * a->D + d] / a->l[i];
}

/*
 * The bytes the next tile reads, started a slice at a time between pieces
 * of this tile's work: they arrive while it computes, without the burst
 * of loads that would fill every line fill buffer at once and stall.
 */
struct ahead {
	const uint8_t *p[3];
	size_t len[3];
	size_t slice; /* bytes a step starts */
};

#define PIECE 8 /* rows of a tile between two steps ahead */

static void ahead_step(struct ahead *pf)
{
	size_t left = pf->slice, i, n, o;

	for (i = 0; i < 3 && left; i++) {
		n = pf->len[i] < left ? pf->len[i] : left;
		for (o = 0; o < n; o += 64)
			__builtin_prefetch(pf->p[i] + o);
		pf->p[i] += n;
		pf->len[i] -= n;
		left -= n;
	}
}

/* A tile's K or V rows as one value a byte, and their scales. */
struct rows {
	const void *v;
	const float *sc;
	size_t sstride, rstride;
	unsigned int group;
	const float *lv; /* the levels lm codes index; NULL: int4, int8 */
	int b8; /* a value a byte: KVMEM_FMT_INT8 or _FP8; 0: codewords */
	const float *book; /* vq2: an index a byte, the entries; no scales */
};

/* Whether K rows @k take int8 scores: asked for, group scales, and
 * integer values (an lm level or an E4M3 number is not). */
static int q8_ok(const struct kvmem__attn *a, const struct rows *k)
{
	return a->q8 && k->group > 1 && !k->lv && k->b8 != KVMEM_FMT_FP8;
}

/* The 32-value sums of KV head @h's int8 query rows, or NULL. */
static const int32_t *q8_sums(const struct kvmem__attn *a, uint32_t h)
{
	return a->qsum ? a->qsum + (size_t)h * a->G * (a->D / 32) : NULL;
}

/*
 * Scores, softmax and weighted sum of a tile straight from rows of one
 * value a byte (int4 in the low nibble, or as ->b8 says), PIECE rows at a
 * time with a step ahead after each.
 */
static void tile_bytes(struct kvmem__attn *a, const float *qh, uint32_t h,
		       uint32_t n, const struct rows *k, const struct rows *v,
		       float *mass, struct ahead *pf)
{
	const struct kvmem__attn_kernels *kn = a->kn;
	const uint32_t G = a->G, D = a->D;
	float *acc = a->acc + (size_t)h * G * D;
	uint32_t i, m;

	pf->slice = (pf->len[0] + pf->len[1] + pf->len[2]) /
			    (2 * ((n + PIECE - 1) / PIECE)) +
		    64;
	for (i = 0; i < n; i += PIECE) {
		const uint8_t *kc = (const uint8_t *)k->v + i * k->rstride;
		/* vq2 rows have no scales */
		const float *ks = k->sc ? k->sc + i * k->sstride : NULL;

		m = n - i < PIECE ? n - i : PIECE;
		if (k->book)
			kn->scores_vq(qh, G, kc, k->rstride, m, D, k->book,
				      a->scale, a->sc + i, n);
		else if (q8_ok(a, k))
			kn->scores_q8(a->q8 + (size_t)h * G * D,
				      a->qs + (size_t)h * G, q8_sums(a, h), G,
				      kc, k->rstride, m, D, k->group, ks,
				      k->sstride, a->scale, a->sc + i, n,
				      k->b8 == KVMEM_FMT_INT8);
		else if (k->b8)
			kn->scores_b8(qh, G, kc, k->rstride, m, D, k->group, ks,
				      k->sstride, a->scale, a->sc + i, n,
				      k->b8);
		else
			kn->scores_cw4(qh, G, kc, k->rstride, m, D, k->group,
				       ks, k->sstride, a->scale, a->sc + i, n,
				       k->lv);
		ahead_step(pf);
	}
	kvmem__attn_softmax(a, h, n, mass);
	for (i = 0; i < n; i += PIECE) {
		const uint8_t *vc = (const uint8_t *)v->v + i * v->rstride;
		const float *vs = v->sc ? v->sc + i * v->sstride : NULL;

		m = n - i < PIECE ? n - i : PIECE;
		if (v->book)
			kn->accum_vq(a->sc + i, G, vc, v->rstride, m, D,
				     v->book, acc, n);
		else if (v->b8)
			kn->accum_b8(a->sc + i, G, vc, v->rstride, m, D,
				     v->group, vs, v->sstride, acc, n, v->b8);
		else
			kn->accum_cw4(a->sc + i, G, vc, v->rstride, m, D,
				      v->group, vs, v->sstride, acc, n, v->lv);
		ahead_step(pf);
	}
}

/*
 * Rows of state a KV head up to which tile_bytes() reads a tile: its
 * kernels decode a row once for every pass of up to eight rows, so a
 * prefill chunk's many queries would decode each row many times. Past
 * this, the tile is decoded once into float tiles, as the FP32 loop reads.
 */
#define BYTES_MAX_ROWS 32

/* @n rows of one value a byte (as ->b8 says, else int4) or of vq2
 * indices to floats at @out. */
static void rows_float(const struct kvmem__attn *a, const struct rows *x,
		       uint32_t n, float *out)
{
	uint32_t t, d;

	for (t = 0; t < n; t++) {
		const uint8_t *row = (const uint8_t *)x->v + t * x->rstride;

		if (x->book)
			for (d = 0; d < a->D; d++)
				out[(size_t)t * a->D + d] =
					x->book[KVMEM__VQ_DIM *
							row[d / KVMEM__VQ_DIM] +
						d % KVMEM__VQ_DIM];
		else if (x->b8)
			a->kn->dequant(x->b8, row, a->D, x->group,
				       x->sc + t * x->sstride,
				       out + (size_t)t * a->D);
		else
			a->kn->dequant_cw4(row, a->D, x->group,
					   x->sc + t * x->sstride, x->lv,
					   out + (size_t)t * a->D);
	}
}

/*
 * One tile of page @pi, KV head @h. Rows that decode clean or corrected
 * to codes a byte (int4, lm and int2 in h74/h84 words, int4 in golay24),
 * to int8 or fp8 values, or to vq2 indices into books with no entry lost
 * are read a byte a value (a vq2 index) by tile_bytes(), or for more than
 * BYTES_MAX_ROWS rows of state decoded once into the float tiles @kt and
 * @vt (vq2: not read so); anything else is decoded into those (rebuilding
 * erasures), after starting all of the next tile at once.
 */
static void attend_tile(struct reader *r, struct kvmem__attn *a, const float *q,
			uint32_t pi, uint32_t h, uint32_t t0, uint32_t n,
			float *kt, float *vt, uint8_t *erased, float *mass,
			struct ahead *pf)
{
	const float *qh = q + (size_t)h * a->G * a->D;
	const int fmt = r->lt->pages[pi]->layout->format;
	struct rows k = { 0 }, v = { 0 };
	int scored = 0;

	/* int4, int2 and lm codes come a byte each alike; all but int4's
	 * index a table. */
	k.lv = v.lv = kvmem__code_values(fmt);
	if (fmt == KVMEM_FMT_VQ2) {
		/* Indices a byte into the books; many rows of state take
		 * the float tiles, as a book with a lost entry does. */
		if (a->G <= BYTES_MAX_ROWS)
			k.v = reader_vq(r, pi, 0, h, t0, n, &k.book,
					&k.rstride);
		if (k.v)
			v.v = reader_vq(r, pi, 1, h, t0, n, &v.book,
					&v.rstride);
	} else {
		k.v = reader_cw4(r, pi, 0, h, t0, n, &k.sc, &k.sstride,
				 &k.group, &k.rstride);
		if (!k.v && a->kn->scores_b8) {
			k.v = reader_b8(r, pi, 0, h, t0, n, &k.sc, &k.sstride,
					&k.group, &k.rstride);
			k.b8 = v.b8 = fmt;
		}
		if (k.v)
			v.v = v.b8 ? (const void *)reader_b8(
					     r, pi, 1, h, t0, n, &v.sc,
					     &v.sstride, &v.group, &v.rstride)
				   : (const void *)reader_cw4(
					     r, pi, 1, h, t0, n, &v.sc,
					     &v.sstride, &v.group, &v.rstride);
	}
	if (k.v) {
		if (v.v && a->G <= BYTES_MAX_ROWS) {
			tile_bytes(a, qh, h, n, &k, &v, mass, pf);
			return;
		}
		/* Many rows, int8 scores: from K's bytes, each row of K
		 * read once for all of them (an int8 row is as cheap to
		 * read as a float one). */
		scored = q8_ok(a, &k);
		if (scored)
			a->kn->scores_q8(a->q8 + (size_t)h * a->G * a->D,
					 a->qs + (size_t)h * a->G,
					 q8_sums(a, h), a->G, k.v, k.rstride, n,
					 a->D, k.group, k.sc, k.sstride,
					 a->scale, a->sc, n,
					 k.b8 == KVMEM_FMT_INT8);
		else
			rows_float(a, &k, n, kt);
		if (v.v)
			rows_float(a, &v, n, vt);
	}
	pf->slice = SIZE_MAX;
	ahead_step(pf);
	if (!k.v)
		reader_rows(r, pi, 0, h, t0, n, kt, erased);
	if (!v.v)
		reader_rows(r, pi, 1, h, t0, n, vt, erased);
	if (!scored) {
		kvmem__attn_tile(a, q, h, kt, vt, n, mass);
		return;
	}
	kvmem__attn_softmax(a, h, n, mass);
	a->kn->accum(a->sc, a->G, vt, n, a->D,
		     a->acc + (size_t)h * a->G * a->D);
}

/*
 * In @pf, the bytes of the tile after the one that ends at token @end of
 * head @h of page @pi (none after the layer's last): in the page's next
 * head, or with @by_head in the next page of pages [@first, @last), then
 * the next head's first.
 */
static void ahead_next(const struct reader *r, uint32_t pi, uint32_t h,
		       uint32_t end, int by_head, uint32_t first, uint32_t last,
		       struct ahead *pf)
{
	const struct kvmem__page *p = r->lt->pages[pi];

	memset(pf, 0, sizeof(*pf));
	if (end >= p->ntokens && by_head) {
		end = 0;
		if (++pi == last) {
			pi = first;
			if (++h == r->c->g.kv_heads)
				return;
		}
		p = r->lt->pages[pi];
	} else if (end >= p->ntokens) {
		end = 0;
		if (++h == r->c->g.kv_heads) {
			h = 0;
			if (++pi == r->lt->npages)
				return;
			p = r->lt->pages[pi];
		}
	}
	kvmem__page_tile_bytes(&r->c->g, p->layout, p->data, h, end,
			       p->ntokens - end < TILE ? p->ntokens - end
						       : TILE,
			       pf->p, pf->len);
}

/*
 * Threads. The pages a call reads are cut into chunks of about
 * CHUNK_TOKENS tokens (at most MAX_CHUNKS of them, and no more than
 * CHUNK_STATE bytes of softmax state in all), the same whatever the number
 * of threads; each chunk keeps its own online-softmax state, workers claim
 * chunks in turn, and the states are combined in chunk order at the end.
 * So the result is the same bits for any opts->threads: only who computes
 * a chunk changes, never the order of any sum.
 *
 * Several queries (kvmem_attend_causal()) are more rows of the same
 * state: row (h * nq + i) * G + g is query i's head h * G + g, so that the
 * rows of one KV head stay together for the kernels, and the softmax gives
 * a row no weight on tokens past its query's position.
 */
#define CHUNK_TOKENS 256
/* Longer layers get longer chunks: the states stay small (and so does the
 * most threads one call can use). */
#define MAX_CHUNKS 128
#define CHUNK_STATE (64u << 20)
/*
 * A chunk whose state is larger than this (a long prefill chunk's many
 * rows) is walked a KV head at a time, all its pages for one head before
 * the next, so that the head's state stays in the cache from tile to
 * tile; a smaller one page by page, each page's scales decoded once.
 * Either way each row's tiles come in token order: the same bits.
 */
#define HEAD_MAJOR_STATE (512u << 10)

struct worker {
	struct reader r;
	struct kvmem__attn a; /* ->sc its own; acc, m, l the chunk's */
	float *kt, *vt;
	uint8_t *erased;
	void *scratch; /* NULL: worker 0 uses the cache's */
};

/* One sequence's part of a call. */
struct job {
	struct kvmem_seq *s;
	const struct kvmem__layer *lt;
	const float *q; /* [nh][D], rows as above */
	float *out; /* [nh][D], in the caller's order */
	float *rows; /* q and out in row order when nq > 1, else NULL */
	int8_t *q8; /* KVMEM_ATTEND_INT8_SCORES: q as int8, [nh][D] */
	float *qs; /* and each row's scale, [nh] */
	int32_t *qsum; /* and its 32-value sums, [nh][D / 32], or NULL */
	uint32_t nq, nh, G, D, ppc, nchunks; /* nh: rows, query heads * nq */
	uint32_t pos0; /* the first query's token */
	uint32_t npages; /* pages the queries see */
	uint32_t last; /* the last token any query sees */
	uint32_t flags; /* opts->flags */
	float *acc, *m, *l; /* per chunk: [nh][D], [nh], [nh] */
	float *mass; /* per page and row: (max, sum) */
	struct kvmem_page_counts *pc; /* per chunk: what it decoded */
	uint64_t *hue; /* per chunk: uncorrectable headers */
};

/* The jobs of a call and the workers that share out their chunks. */
struct run {
	struct job *j;
	uint32_t nj;
	uint32_t *first; /* [nj + 1]: the jobs' chunks in one numbering */
	uint32_t next; /* the next chunk to claim */
	struct worker *w;
};

/*
 * The tiles of page @pi for KV head @h. With @quiet the page's header and
 * scales are not counted again: another head's visit counted them.
 */
static void attend_page_head(struct job *j, struct worker *w, uint32_t pi,
			     uint32_t h, int by_head, uint32_t first,
			     uint32_t last, int quiet)
{
	const struct kvmem__page *p = j->lt->pages[pi];
	const uint32_t G = j->G * j->nq;
	float *pm = j->mass + ((size_t)pi * j->nh + (size_t)h * G) * 2;
	struct kvmem_ecc_counts hk = w->r.pc.header, sk = w->r.pc.scales;
	uint64_t hue = w->r.headers_ue;
	uint32_t ntok = p->ntokens, t0;
	struct ahead pf;

	/* Tokens past the last query's are not read. */
	if (p->token_start + ntok - 1 > j->last)
		ntok = j->last - p->token_start + 1;
	for (t0 = 0; t0 < ntok; t0 += TILE) {
		uint32_t n = ntok - t0 < TILE ? ntok - t0 : TILE;

		ahead_next(&w->r, pi, h, t0 + n, by_head, first, last, &pf);
		w->a.tpos = p->token_start + t0;
		attend_tile(&w->r, &w->a, j->q, pi, h, t0, n, w->kt, w->vt,
			    w->erased, pm, &pf);
	}
	if (quiet) {
		w->r.pc.header = hk;
		w->r.pc.scales = sk;
		w->r.headers_ue = hue;
	}
}

static void attend_chunk(struct job *j, struct worker *w, uint32_t c)
{
	const uint32_t nh = j->nh, G = j->G * j->nq, kvh = j->s->c->g.kv_heads;
	const uint32_t first = c * j->ppc;
	const uint32_t end =
		(c + 1) * j->ppc < j->npages ? (c + 1) * j->ppc : j->npages;
	const int by_head =
		(size_t)nh * j->D * sizeof(float) > HEAD_MAJOR_STATE;
	uint32_t pi, h, i;

	/* The reader follows the chunk's sequence; counts are the chunk's,
	 * so its first page is loaded (and counted) even where the worker's
	 * last chunk, of another job over the same sequence, ended on it. */
	w->r.lt = j->lt;
	w->r.cur = UINT32_MAX;
	memset(&w->r.pc, 0, sizeof(w->r.pc));
	w->r.headers_ue = 0;
	w->a.G = G;
	w->a.qg = j->G;
	w->a.pos0 = j->pos0;
	w->a.q8 = j->q8;
	w->a.qs = j->qs;
	w->a.qsum = j->qsum;
	w->a.acc = j->acc + (size_t)c * nh * j->D;
	w->a.m = j->m + (size_t)c * nh;
	w->a.l = j->l + (size_t)c * nh;
	memset(w->a.acc, 0, (size_t)nh * j->D * sizeof(float));
	for (i = 0; i < nh; i++) {
		w->a.m[i] = -INFINITY;
		w->a.l[i] = 0.0f;
	}
	for (pi = first; pi < end; pi++)
		for (i = 0; i < nh; i++) {
			j->mass[((size_t)pi * nh + i) * 2] = -INFINITY;
			j->mass[((size_t)pi * nh + i) * 2 + 1] = 0.0f;
		}
	if (by_head)
		for (h = 0; h < kvh; h++)
			for (pi = first; pi < end; pi++)
				attend_page_head(j, w, pi, h, 1, first, end,
						 h > 0);
	else
		for (pi = first; pi < end; pi++)
			for (h = 0; h < kvh; h++)
				attend_page_head(j, w, pi, h, 0, first, end, 0);
	j->pc[c] = w->r.pc;
	j->hue[c] = w->r.headers_ue;
}

static void attend_worker(void *arg, unsigned int id)
{
	struct run *r = arg;
	uint32_t c, k = 0;

	while ((c = __atomic_fetch_add(&r->next, 1, __ATOMIC_RELAXED)) <
	       r->first[r->nj]) {
		while (c >= r->first[k + 1])
			k++;
		attend_chunk(&r->j[k], &r->w[id], c - r->first[k]);
	}
}

/* Chunk states to the result; leaves the layer's max and sum in m, l. */
static void combine(const struct job *j, float *m, float *l, float *out)
{
	const struct kvmem__attn_kernels *kn = kvmem__attn();
	const uint32_t nh = j->nh, D = j->D;
	uint32_t c, i, d;

	for (i = 0; i < nh; i++) {
		float *o = out + (size_t)i * D;

		m[i] = -INFINITY;
		l[i] = 0.0f;
		for (c = 0; c < j->nchunks; c++)
			if (j->m[(size_t)c * nh + i] > m[i])
				m[i] = j->m[(size_t)c * nh + i];
		memset(o, 0, D * sizeof(float));
		for (c = 0; c < j->nchunks; c++) {
			const float *acc = j->acc + ((size_t)c * nh + i) * D;
			float f = kvmem__expf(j->m[(size_t)c * nh + i] - m[i]);

			l[i] += j->l[(size_t)c * nh + i] * f;
			/* o += f * acc: one row of weight f */
			kn->accum(&f, 1, acc, 1, D, o);
		}
		for (d = 0; d < D; d++)
			o[d] /= l[i];
	}
}

static void workers_free(struct worker *w, unsigned int n)
{
	unsigned int i;

	for (i = 0; w && i < n; i++) {
		reader_close(&w[i].r);
		free(w[i].a.sc);
		free(w[i].kt);
		free(w[i].vt);
		free(w[i].erased);
		free(w[i].scratch);
	}
	free(w);
}

/* @n workers for jobs of up to @rows rows a KV head; bound to @s. */
static struct worker *workers_new(struct kvmem_seq *s, uint32_t layer,
				  const struct kvmem_attend_opts *opts,
				  uint32_t rows, float scale, unsigned int n)
{
	const uint32_t D = s->c->g.head_dim;
	struct worker *w = calloc(n, sizeof(*w));
	unsigned int i;

	for (i = 0; w && i < n; i++) {
		struct worker *x = &w[i];

		if (i)
			x->scratch = malloc(s->c->scratch_bytes);
		x->a.kn = kvmem__attn();
		x->a.D = D;
		x->a.scale = scale;
		x->a.sc =
			kvmem__alloc_lines((size_t)rows * TILE * sizeof(float));
		x->kt = kvmem__alloc_lines((size_t)TILE * D * sizeof(float));
		x->vt = kvmem__alloc_lines((size_t)TILE * D * sizeof(float));
		x->erased = malloc((size_t)TILE * D);
		if (reader_open(&x->r, s, layer, opts->erasure,
				i ? x->scratch : s->c->scratch) ||
		    (i && !x->scratch) || !x->a.sc || !x->kt || !x->vt ||
		    !x->erased) {
			workers_free(w, i + 1);
			return NULL;
		}
	}
	return w;
}

void kvmem__attn_rows_move(const float *from, float *to, uint32_t nq,
			   uint32_t nh, uint32_t G, uint32_t D, int to_rows)
{
	uint32_t i, x;

	for (i = 0; i < nq; i++)
		for (x = 0; x < nh; x++) {
			size_t q = ((size_t)i * nh + x) * D;
			size_t r = (((size_t)(x / G) * nq + i) * G + x % G) * D;

			memcpy(to + (to_rows ? r : q), from + (to_rows ? q : r),
			       D * sizeof(float));
		}
}

/* What kvmem_attend_causal() checks of its arguments, before any work. */
static int job_check(struct kvmem_seq *s, uint32_t layer, const float *q,
		     uint32_t nq, uint32_t pos0, const float *out,
		     const struct kvmem_attend_opts *opts)
{
	const struct kvmem__layer *lt;
	uint32_t nh;

	if (!s || !q || !out || !opts || layer >= s->c->g.layers)
		return -EINVAL;
	lt = &s->layer[layer];
	nh = opts->n_heads;
	if (!nh || nh % s->c->g.kv_heads || !nq || pos0 >= lt->len ||
	    nq > lt->len - pos0 || (uint64_t)nq * nh > UINT32_MAX / 2 ||
	    opts->erasure > KVMEM_ERASE_KEEP ||
	    opts->flags & ~KVMEM_ATTEND_INT8_SCORES || opts->resv[0] ||
	    opts->resv[1])
		return -EINVAL;
	return 0;
}

/* A checked, acquired sequence's job: its chunks; jobs_state() gives it
 * room for their state. */
static void job_init(struct job *j, struct kvmem_seq *s, uint32_t layer,
		     const float *q, uint32_t nq, uint32_t pos0, float *out,
		     const struct kvmem_attend_opts *opts)
{
	const struct kvmem_geometry *g = &s->c->g;
	size_t state, max_chunks;

	memset(j, 0, sizeof(*j));
	j->s = s;
	j->lt = &s->layer[layer];
	j->q = q;
	j->out = out;
	j->nq = nq;
	j->G = opts->n_heads / g->kv_heads;
	j->nh = opts->n_heads * nq;
	j->D = g->head_dim;
	j->pos0 = pos0;
	j->flags = opts->flags;
	j->last = pos0 + nq - 1;
	j->npages = kvmem__page_index(g, j->last) + 1;
	state = ((size_t)j->D + 2) * j->nh * sizeof(float);
	max_chunks = CHUNK_STATE / state;
	if (max_chunks > MAX_CHUNKS)
		max_chunks = MAX_CHUNKS;
	if (!max_chunks)
		max_chunks = 1;
	j->ppc = (CHUNK_TOKENS + g->tokens_per_page - 1) / g->tokens_per_page;
	if (j->npages > j->ppc * max_chunks)
		j->ppc = (j->npages + max_chunks - 1) / max_chunks;
	j->nchunks = (j->npages + j->ppc - 1) / j->ppc;
}

#define LINES(bytes) (((bytes) + 63) & ~(size_t)63)

/*
 * Lay the state of @nj jobs out from @base, each part on a cache line;
 * with @base NULL, only count. Return: the bytes it takes.
 */
static size_t carve(struct job *jobs, uint32_t nj, uint8_t *base)
{
	size_t off = 0;
	uint32_t k;

#define PART(field, bytes)                               \
	do {                                             \
		if (base)                                \
			j->field = (void *)(base + off); \
		off += LINES(bytes);                     \
	} while (0)
	for (k = 0; k < nj; k++) {
		struct job *j = &jobs[k];
		const size_t rows = (size_t)j->nchunks * j->nh;

		PART(acc, rows * j->D * sizeof(float));
		PART(m, rows * sizeof(float));
		PART(l, rows * sizeof(float));
		PART(mass, (size_t)j->npages * j->nh * 2 * sizeof(float));
		PART(pc, j->nchunks * sizeof(*j->pc));
		PART(hue, j->nchunks * sizeof(*j->hue));
		if (j->nq > 1 || j->s->c->g.rotation)
			PART(rows, (size_t)j->nh * j->D * sizeof(float));
		if (j->flags & KVMEM_ATTEND_INT8_SCORES) {
			PART(q8, (size_t)j->nh * j->D);
			PART(qs, j->nh * sizeof(float));
			if (j->D % 32 == 0)
				PART(qsum, (size_t)j->nh * (j->D / 32) *
						   sizeof(int32_t));
		}
	}
#undef PART
	return off;
}

/*
 * KVMEM_ATTEND_INT8_SCORES: @rows rows of @q ([rows][D]) as int8, each
 * with its scale m / 127 for its largest |q_d| m, or 0 for a row of zeros
 * (whose scores are then 0, as in float), and with @qsum the sum of each
 * 32 of a row's int8 values. Return: -1 where a row is not finite, or
 * its m / 127 would be subnormal (and lose bits): the float scores then do
 * the call.
 */
static int quantize_q(const float *q, uint32_t rows, uint32_t D, int8_t *q8,
		      float *qs, int32_t *qsum)
{
	uint32_t i, d;

	for (i = 0; i < rows; i++) {
		const float *x = q + (size_t)i * D;
		float m = 0.0f, inv;

		for (d = 0; d < D; d++) {
			if (!isfinite(x[d]))
				return -1;
			m = fabsf(x[d]) > m ? fabsf(x[d]) : m;
		}
		if (m > 0.0f && m < 127.0f * FLT_MIN)
			return -1;
		inv = m > 0.0f ? 127.0f / m : 0.0f;
		qs[i] = m / 127.0f;
		for (d = 0; d < D; d++) {
			long v = lrintf(x[d] * inv);

			q8[(size_t)i * D + d] = (int8_t)(v > 127    ? 127
							 : v < -127 ? -127
								    : v);
		}
		for (d = 0; qsum && d < D; d++) {
			if (d % 32 == 0)
				qsum[(size_t)i * (D / 32) + d / 32] = 0;
			qsum[(size_t)i * (D / 32) + d / 32] +=
				q8[(size_t)i * D + d];
		}
	}
	return 0;
}

/*
 * The state of a call's @nj jobs, carved from one block. The cache keeps
 * the block between calls, grown to the largest call's up to
 * KEEP_STATE, so that a long prefill chunk's tens of MiB are not mapped,
 * faulted in and unmapped again on every call; a larger call's is its
 * own, in *@own, for the caller to free. kvmem_close() frees the cache's.
 * Queries of a chunk go to their rows (kvmem__attn_rows_move()).
 */
#define KEEP_STATE (256u << 20)

static int jobs_state(struct kvmem_cache *c, struct job *jobs, uint32_t nj,
		      void **own)
{
	const size_t need = carve(jobs, nj, NULL);
	uint8_t *base;
	uint32_t k;

	*own = NULL;
	if (need > KEEP_STATE) {
		base = *own = aligned_alloc(64, need);
		if (!base)
			return -ENOMEM;
	} else {
		if (need > c->attn_state_bytes) {
			void *m = aligned_alloc(64, need);

			if (!m)
				return -ENOMEM;
			free(c->attn_state);
			c->attn_state = m;
			c->attn_state_bytes = need;
		}
		base = c->attn_state;
	}
	carve(jobs, nj, base);
	for (k = 0; k < nj; k++) {
		struct job *j = &jobs[k];

		if (j->rows) {
			kvmem__attn_rows_move(j->q, j->rows, j->nq,
					      j->nh / j->nq, j->G, j->D, 1);
			/* q.k is the same in the rotated space. */
			kvmem__rotate_rows(&c->g, j->rows, j->nh, 0);
			j->q = j->rows;
		}
		if (j->q8 &&
		    quantize_q(j->q, j->nh, j->D, j->q8, j->qs, j->qsum))
			j->q8 = NULL;
	}
	return 0;
}

/*
 * The job's result to its caller's @out and @stats, and its pages' share
 * of the softmax weights (summed over the query heads, averaged over the
 * queries) into their importance. @m, @l, @ex: room for nh floats each.
 */
static void job_finish(struct job *j, const struct kvmem_attend_opts *opts,
		       float *m, float *l, float *ex,
		       struct kvmem_attend_stats *stats)
{
	const float alpha =
		opts->importance_alpha != 0.0f ? opts->importance_alpha : 0.1f;
	struct kvmem_page_counts c = { 0 };
	struct kvmem_cache *cache = j->s->c;
	uint64_t hue = 0;
	uint32_t pi, i;

	combine(j, m, l, j->rows ? j->rows : j->out);
	if (j->rows) {
		/* The weighted sum of rotated V rows, rotated back once. */
		kvmem__rotate_rows(&cache->g, j->rows, j->nh, 1);
		kvmem__attn_rows_move(j->rows, j->out, j->nq, opts->n_heads,
				      j->G, j->D, 0);
	}

	/*
	 * The page's (max, sum) of each row against the row's: e^(max - m)
	 * by the softmax kernel, whose running max stays at 0 as no max
	 * passes m.
	 */
	if (alpha > 0.0f)
		for (pi = 0; pi < j->npages; pi++) {
			const float *pm = j->mass + (size_t)pi * j->nh * 2;
			struct kvmem__page *p = j->lt->pages[pi];
			float share = 0.0f, zero = 0.0f;

			for (i = 0; i < j->nh; i++)
				ex[i] = pm[2 * i] - m[i];
			kvmem__attn()->softmax(ex, j->nh, &zero);
			for (i = 0; i < j->nh; i++)
				share += pm[2 * i + 1] * ex[i] / l[i];
			kvmem__page_attended(cache, p, share, opts->n_heads,
					     j->nq, alpha, 1);
		}
	if (!stats)
		return;
	for (i = 0; i < j->nchunks; i++) {
		kvmem__counts_add(&c.header, &j->pc[i].header);
		kvmem__counts_add(&c.scales, &j->pc[i].scales);
		kvmem__counts_add(&c.payload, &j->pc[i].payload);
		c.values_erased += j->pc[i].values_erased;
		hue += j->hue[i];
	}
	stats->words_clean = c.header.clean + c.scales.clean + c.payload.clean;
	stats->words_corrected =
		c.header.corrected + c.scales.corrected + c.payload.corrected;
	stats->words_uncorrectable =
		c.scales.uncorrectable + c.payload.uncorrectable;
	stats->values_erased = c.values_erased;
	stats->headers_uncorrectable = hue;
}

/*
 * Run @nj checked, acquired jobs of the sequences' one cache: their chunks
 * shared out among up to opts->threads workers in one pool run, then each
 * finished in order, as @nj calls one after the other would.
 */
static int run_jobs(struct job *jobs, uint32_t nj,
		    const struct kvmem_attend_opts *opts, uint32_t layer,
		    struct kvmem_attend_stats *stats)
{
	struct kvmem_cache *c = jobs[0].s->c;
	const uint32_t D = c->g.head_dim;
	const float scale =
		opts->scale != 0.0f ? opts->scale : 1.0f / sqrtf((float)D);
	struct run r = { .j = jobs, .nj = nj };
	uint32_t k, rows = 0, nh = 0;
	float *m = NULL, *l = NULL, *ex = NULL;
	unsigned int nw;
	void *own;
	int ret = jobs_state(c, jobs, nj, &own);

	if (ret)
		return ret;
	ret = -ENOMEM;
	r.first = malloc(((size_t)nj + 1) * sizeof(*r.first));
	if (!r.first) {
		free(own);
		return -ENOMEM;
	}
	r.first[0] = 0;
	for (k = 0; k < nj; k++) {
		r.first[k + 1] = r.first[k] + jobs[k].nchunks;
		if (jobs[k].G * jobs[k].nq > rows)
			rows = jobs[k].G * jobs[k].nq;
		if (jobs[k].nh > nh)
			nh = jobs[k].nh;
	}
	nw = opts->threads ? opts->threads : kvmem__cpus();
	if (nw > r.first[nj])
		nw = r.first[nj];
	m = malloc(nh * sizeof(float));
	l = malloc(nh * sizeof(float));
	ex = malloc(nh * sizeof(float));
	r.w = m && l && ex
		      ? workers_new(jobs[0].s, layer, opts, rows, scale, nw)
		      : NULL;
	if (r.w) {
		kvmem__pool_run(&c->pool, nw, attend_worker, &r);
		for (k = 0; k < nj; k++)
			job_finish(&jobs[k], opts, m, l, ex,
				   stats ? &stats[k] : NULL);
		ret = 0;
	}
	workers_free(r.w, nw);
	free(r.first);
	free(m);
	free(l);
	free(ex);
	free(own);
	return ret;
}

int kvmem_attend_causal(struct kvmem_seq *s, uint32_t layer, const float *q,
			uint32_t nq, uint32_t pos0, float *out,
			const struct kvmem_attend_opts *opts,
			struct kvmem_attend_stats *stats)
{
	struct job j;
	int ret = job_check(s, layer, q, nq, pos0, out, opts);

	if (!ret)
		ret = kvmem__seq_acquire(s);
	if (ret)
		return ret;
	job_init(&j, s, layer, q, nq, pos0, out, opts);
	return run_jobs(&j, 1, opts, layer, stats);
}

int kvmem_attend(struct kvmem_seq *s, uint32_t layer, const float *q,
		 float *out, const struct kvmem_attend_opts *opts,
		 struct kvmem_attend_stats *stats)
{
	if (!s || layer >= s->c->g.layers || !s->layer[layer].len)
		return -EINVAL;
	return kvmem_attend_causal(s, layer, q, 1, s->layer[layer].len - 1, out,
				   opts, stats);
}

int kvmem_attend_batch(struct kvmem_seq *const *seqs, uint32_t n,
		       uint32_t layer, const float *q, float *out,
		       const struct kvmem_attend_opts *opts,
		       struct kvmem_attend_stats *stats)
{
	struct job *jobs;
	size_t stride;
	uint32_t i, k;
	int ret = 0;

	if (!seqs || !n || !opts || !q || !out)
		return -EINVAL;
	for (i = 0; i < n && !ret; i++) {
		if (!seqs[i] || seqs[i]->c != seqs[0]->c ||
		    layer >= seqs[i]->c->g.layers || !seqs[i]->layer[layer].len)
			return -EINVAL;
		ret = job_check(seqs[i], layer, q, 1,
				seqs[i]->layer[layer].len - 1, out, opts);
	}
	if (ret)
		return ret;
	stride = (size_t)opts->n_heads * seqs[0]->c->g.head_dim;
	if (stride && n > SIZE_MAX / sizeof(float) / stride)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		ret = kvmem__seq_acquire(seqs[i]);
		if (ret)
			return ret;
	}
	jobs = calloc(n, sizeof(*jobs));
	if (!jobs)
		return -ENOMEM;
	for (k = 0; k < n; k++)
		job_init(&jobs[k], seqs[k], layer, q + k * stride, 1,
			 seqs[k]->layer[layer].len - 1, out + k * stride, opts);
	ret = run_jobs(jobs, n, opts, layer, stats);
	free(jobs);
	return ret;
}
