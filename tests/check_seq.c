/* SPDX-License-Identifier: MIT */
/*
 * check_seq.c - sequences of pages: append, read back, fork, truncate, and
 * an arena that runs out
 *
 * Expected values come from the public headers, computed here and never by
 * the code under test: FP16 by the reference round-to-nearest-even of
 * quant_ref.c, sealed values within quant.h's bound (|x^ - x| <= s / 2,
 * s the smallest FP16 >= amax / qmax), the page table from kvmem.h's
 * picture of a sequence (sink page, sealed pages of tokens_per_page, FP16
 * tail).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmem/kvmem.h"
#include "kvmem_check.h"
#include "quant_ref.h"
#include "rng.h"

#define MAXL 4 /* layers in these tests */
#define MAXP 256 /* pages per layer */

/* ---- Fixtures ------------------------------------------------------------ */

struct fix {
	struct kvmem_geometry g;
	struct kvmem_cache *c;
	struct kvmem_page_layout hot, sealed;
	size_t slot; /* the larger of the two page sizes */
};

static void fix_layouts(struct fix *f, const struct kvmem_geometry *g)
{
	f->g = *g;
	ck_assert_int_eq(kvmem_geometry_check(g), 0);
	ck_assert_int_eq(kvmem_page_layout(g, 1, &f->hot), 0);
	ck_assert_int_eq(kvmem_page_layout(g, 0, &f->sealed), 0);
	f->slot = f->hot.size > f->sealed.size ? f->hot.size : f->sealed.size;
}

/* A cache with room for @pages pages of either kind. */
static void fix_open(struct fix *f, const struct kvmem_geometry *g,
		     size_t pages)
{
	fix_layouts(f, g);
	f->c = NULL;
	ck_assert_int_eq(kvmem_open_embedded(g, pages * f->slot, &f->c), 0);
	ck_assert_ptr_nonnull(f->c);
}

static struct kvmem_seq *seq_new(struct fix *f)
{
	struct kvmem_seq *s = NULL;

	ck_assert_int_eq(kvmem_seq_create(f->c, &s), 0);
	ck_assert_ptr_nonnull(s);
	return s;
}

/* Uniform in [-amp, amp]; every 7th channel of a row 6 times larger (an
 * outlier channel, what channel scales are for). */
static void fill(struct kvmem_rng *r, float *x, size_t n, uint32_t head_dim,
		 double amp)
{
	size_t i;

	for (i = 0; i < n; i++) {
		double a = amp * (i % head_dim % 7 == 3 ? 6 : 1);

		x[i] = (float)(a * (2 * kvmem_rng_unit(r) - 1));
	}
}

/* ---- A model of what a sequence holds ------------------------------------ */

/*
 * Per layer, the values that went into the cache for each token: the floats
 * appended, or for tokens a truncation moved back into a tail, the FP16 of
 * their dequantized values. The tokens' places follow from the length.
 */
struct model {
	const struct kvmem_geometry *g;
	uint32_t cap;
	uint32_t n[MAXL];
	/* the last page is full but still FP16: the arena had no room to
	 * seal it (model_sync()) */
	int full_tail[MAXL];
	float *k[MAXL], *v[MAXL];
};

static void model_init(struct model *m, const struct kvmem_geometry *g,
		       uint32_t cap)
{
	size_t row = (size_t)g->kv_heads * g->head_dim;
	uint32_t l;

	ck_assert_uint_le(g->layers, MAXL);
	memset(m, 0, sizeof(*m));
	m->g = g;
	m->cap = cap;
	for (l = 0; l < g->layers; l++) {
		m->k[l] = kvmem_check_xmalloc(cap * row * sizeof(float));
		m->v[l] = kvmem_check_xmalloc(cap * row * sizeof(float));
	}
}

static void model_copy(struct model *dst, const struct model *src)
{
	size_t row = (size_t)src->g->kv_heads * src->g->head_dim;
	uint32_t l;

	model_init(dst, src->g, src->cap);
	for (l = 0; l < src->g->layers; l++) {
		dst->n[l] = src->n[l];
		dst->full_tail[l] = src->full_tail[l];
		memcpy(dst->k[l], src->k[l], src->cap * row * sizeof(float));
		memcpy(dst->v[l], src->v[l], src->cap * row * sizeof(float));
	}
}

static void model_free(struct model *m)
{
	uint32_t l;

	for (l = 0; l < MAXL; l++) {
		free(m->k[l]);
		free(m->v[l]);
	}
}

static void model_append(struct model *m, uint32_t layer, const float *k,
			 const float *v, uint32_t nt)
{
	size_t row = (size_t)m->g->kv_heads * m->g->head_dim;

	ck_assert_uint_le(m->n[layer] + nt, m->cap);
	memcpy(m->k[layer] + m->n[layer] * row, k, nt * row * sizeof(float));
	memcpy(m->v[layer] + m->n[layer] * row, v, nt * row * sizeof(float));
	m->n[layer] += nt;
	/* once it grows, a full page before the tail is sealed */
	if (nt)
		m->full_tail[layer] = 0;
}

static void read_layer(struct kvmem_seq *s, const struct kvmem_geometry *g,
		       uint32_t layer, uint32_t start, uint32_t n, float *k,
		       float *v)
{
	struct kvmem_page_counts pc;

	memset(&pc, 0xee, sizeof(pc));
	ck_assert_int_eq(kvmem_seq_read(s, layer, start, n,
					KVMEM_ERASE_INTERPOLATE, k, v, &pc),
			 0);
	(void)g;
	ck_assert_uint_eq(pc.header.uncorrectable, 0);
	ck_assert_uint_eq(pc.scales.uncorrectable, 0);
	ck_assert_uint_eq(pc.payload.uncorrectable, 0);
	ck_assert_uint_eq(pc.payload.corrected, 0);
	ck_assert_uint_eq(pc.values_erased, 0);
}

/*
 * Cut the model to @nt tokens, as kvmem_seq_truncate() will cut @s; call it
 * before: the kept tokens of a cut sealed page become the FP16 of their
 * dequantized values, read from @s here.
 */
static void model_truncate(struct model *m, struct kvmem_seq *s, uint32_t nt)
{
	const struct kvmem_geometry *g = m->g;
	size_t row = (size_t)g->kv_heads * g->head_dim, i;
	uint32_t l, S = g->sink_tokens, P = g->tokens_per_page;

	for (l = 0; l < g->layers; l++) {
		uint32_t n = m->n[l], first;
		float *k, *v;

		int ft = m->full_tail[l];

		if (n <= nt)
			continue;
		m->n[l] = nt;
		m->full_tail[l] = 0;
		if (nt <= S || (nt - S) % P == 0 ||
		    !ref_tok_sealed(g, n, ft, nt - 1))
			continue;
		first = nt - (nt - S) % P;
		k = kvmem_check_xmalloc((nt - first) * row * sizeof(float));
		v = kvmem_check_xmalloc((nt - first) * row * sizeof(float));
		read_layer(s, g, l, first, nt - first, k, v);
		for (i = 0; i < (nt - first) * row; i++) {
			m->k[l][first * row + i] = ref_half(k[i]);
			m->v[l][first * row + i] = ref_half(v[i]);
		}
		free(k);
		free(v);
	}
}

/*
 * What reading a layer of @n tokens whose inputs were @src must give: @want
 * exactly where @eps < 0 (FP16 pages: the FP16 of the input), else within
 * @eps of @src. A sealed page may be quantized from the floats or from the
 * tail's FP16 copies, so the bound (ref_sealed_bound()) allows both: s from
 * the larger amax of the two, plus the FP16 rounding, plus 2^-20 relative
 * for the quantizer's own float division.
 */
static void layer_expect(const struct kvmem_geometry *g, const float *src,
			 uint32_t n, int full_tail, int is_k, float *want,
			 float *eps)
{
	uint32_t H = g->kv_heads, D = g->head_dim, t, h, d;
	int qmax = ref_fmts[g->format].qmax;

	for (t = 0; t < n; t++) {
		for (h = 0; h < H; h++) {
			for (d = 0; d < D; d++) {
				size_t i = ((size_t)t * H + h) * D + d;

				if (!ref_tok_sealed(g, n, full_tail, t) ||
				    !qmax) {
					want[i] = ref_half(src[i]);
					eps[i] = -1;
					continue;
				}
				want[i] = src[i];
				eps[i] = (float)ref_sealed_bound(g, src, is_k,
								 t, h, d);
			}
		}
	}
}

enum { PG_SINK, PG_SEALED, PG_TAIL };

/* The page table of a layer of @n tokens (kvmem.h); returns the count. */
static uint32_t page_plan(const struct kvmem_geometry *g, uint32_t n,
			  int full_tail, uint32_t *start, uint32_t *cnt,
			  int *kind)
{
	uint32_t S = g->sink_tokens, P = g->tokens_per_page, np = 0, t;

	if (!n)
		return 0;
	if (S) {
		start[np] = 0;
		cnt[np] = n < S ? n : S;
		kind[np++] = PG_SINK;
	}
	for (t = S; t < n; t += P) {
		ck_assert_uint_lt(np, MAXP);
		start[np] = t;
		cnt[np] = n - t < P ? n - t : P;
		kind[np++] = n - t < P ? PG_TAIL : PG_SEALED;
	}
	if (full_tail) {
		ck_assert_uint_eq(kind[np - 1], PG_SEALED);
		kind[np - 1] = PG_TAIL;
	}
	return np;
}

static const char *kind_name(int kind)
{
	return kind == PG_SINK ? "sink" : kind == PG_SEALED ? "sealed" : "tail";
}

/* The page table of @layer against the plan, each page's header too. */
static int check_pages(struct kvmem_seq *s, const struct fix *f, uint32_t layer,
		       uint32_t n, int full_tail, struct kvmem_page_desc *pd)
{
	static uint32_t start[MAXP], cnt[MAXP];
	static int kind[MAXP];
	uint32_t np = page_plan(&f->g, n, full_tail, start, cnt, kind), p;
	int ret = kvmem_seq_pages(s, layer, pd, MAXP);

	EXPECT_EQ(ret, np, "layer %u of %u tokens: pages", layer, n);
	for (p = 0; p < np; p++) {
		struct kvmem_page_hdr hdr;
		int hot = kind[p] != PG_SEALED;

		EXPECT_EQ(pd[p].token_start, start[p], "layer %u page %u (%s)",
			  layer, p, kind_name(kind[p]));
		EXPECT_EQ(pd[p].ntokens, cnt[p], "layer %u page %u (%s)", layer,
			  p, kind_name(kind[p]));
		EXPECT_EQ(pd[p].hot, hot, "layer %u page %u (%s)", layer, p,
			  kind_name(kind[p]));
		if (kind[p] != PG_SINK)
			EXPECT_EQ(pd[p].sealed, kind[p] == PG_SEALED,
				  "layer %u page %u (%s)", layer, p,
				  kind_name(kind[p]));
		EXPECT_EQ(pd[p].size, hot ? f->hot.size : f->sealed.size,
			  "layer %u page %u (%s)", layer, p,
			  kind_name(kind[p]));
		ck_assert_ptr_nonnull(pd[p].data);
		ck_assert_uint_ge(pd[p].refs, 1);
		ck_assert(isfinite(pd[p].importance));
		EXPECT_EQ(kvmem_page_read_header(pd[p].data, &f->g, &hdr, NULL),
			  0, "layer %u page %u (%s)", layer, p,
			  kind_name(kind[p]));
		EXPECT_EQ(hdr.layer, layer, "page %u", p);
		EXPECT_EQ(hdr.token_start, start[p], "layer %u page %u", layer,
			  p);
		EXPECT_EQ(!!(hdr.flags & KVMEM_HDR_HOT), hot,
			  "layer %u page %u (%s)", layer, p,
			  kind_name(kind[p]));
		if (kind[p] == PG_SEALED) {
			EXPECT_EQ(hdr.ntokens, cnt[p], "layer %u page %u",
				  layer, p);
			EXPECT_EQ(!!(hdr.flags & KVMEM_HDR_SEALED), 1,
				  "layer %u page %u", layer, p);
			EXPECT_EQ(kvmem_page_verify(pd[p].data, &f->g, NULL), 0,
				  "layer %u sealed page %u", layer, p);
		}
		if (kind[p] == PG_TAIL)
			EXPECT_EQ(!!(hdr.flags & KVMEM_HDR_SEALED), 0,
				  "layer %u page %u", layer, p);
	}
	return (int)np;
}

static void check_values(const struct kvmem_geometry *g, uint32_t layer,
			 int is_k, const float *got, const float *src,
			 uint32_t n, int full_tail)
{
	size_t row = (size_t)g->kv_heads * g->head_dim, i;
	float *want = kvmem_check_xmalloc(n * row * sizeof(float));
	float *eps = kvmem_check_xmalloc(n * row * sizeof(float));

	layer_expect(g, src, n, full_tail, is_k, want, eps);
	for (i = 0; i < n * row; i++) {
		uint32_t t = (uint32_t)(i / row);
		uint32_t h = (uint32_t)(i % row / g->head_dim);
		uint32_t d = (uint32_t)(i % g->head_dim);

		if (eps[i] < 0)
			EXPECT_FEQ(got[i], want[i],
				   "layer %u %c token %u head %u ch %u (FP16 "
				   "page, input %.9g)",
				   layer, is_k ? 'K' : 'V', t, h, d, src[i]);
		else
			EXPECT_NEAR(
				got[i], want[i], eps[i],
				"layer %u %c token %u head %u ch %u (sealed)",
				layer, is_k ? 'K' : 'V', t, h, d);
	}
	free(want);
	free(eps);
}

/*
 * Everything about one layer of @s against the model: length, page table,
 * values of a whole read and of a read of a middle slice.
 */
static void check_layer(struct kvmem_seq *s, const struct fix *f,
			const struct model *m, uint32_t layer)
{
	static struct kvmem_page_desc pd[MAXP];
	const struct kvmem_geometry *g = &f->g;
	size_t row = (size_t)g->kv_heads * g->head_dim;
	uint32_t n = m->n[layer], a, b;
	float *k, *v, *k2, *v2;

	EXPECT_EQ(kvmem_seq_len(s, layer), n, "layer %u", layer);
	check_pages(s, f, layer, n, m->full_tail[layer], pd);
	if (!n)
		return;
	k = kvmem_check_xmalloc(n * row * sizeof(float));
	v = kvmem_check_xmalloc(n * row * sizeof(float));
	read_layer(s, g, layer, 0, n, k, v);
	check_values(g, layer, 1, k, m->k[layer], n, m->full_tail[layer]);
	check_values(g, layer, 0, v, m->v[layer], n, m->full_tail[layer]);
	a = n / 3;
	b = n - a - n / 4;
	if (b) {
		k2 = kvmem_check_xmalloc(b * row * sizeof(float));
		v2 = kvmem_check_xmalloc(b * row * sizeof(float));
		read_layer(s, g, layer, a, b, k2, v2);
		ck_assert_mem_eq(k2, k + a * row, b * row * sizeof(float));
		ck_assert_mem_eq(v2, v + a * row, b * row * sizeof(float));
		free(k2);
		free(v2);
	}
	free(k);
	free(v);
}

static void check_model(struct kvmem_seq *s, const struct fix *f,
			const struct model *m)
{
	uint32_t l;

	for (l = 0; l < f->g.layers; l++)
		check_layer(s, f, m, l);
}

/* A whole layer as read now, for before/after comparisons. */
struct snap {
	uint32_t n[MAXL];
	float *k[MAXL], *v[MAXL];
	int np[MAXL];
	struct kvmem_page_desc pd[MAXL][MAXP];
};

static struct snap *snap_take(struct kvmem_seq *s,
			      const struct kvmem_geometry *g)
{
	struct snap *sn = calloc(1, sizeof(*sn));
	size_t row = (size_t)g->kv_heads * g->head_dim;
	uint32_t l;

	ck_assert_ptr_nonnull(sn);
	for (l = 0; l < g->layers; l++) {
		sn->n[l] = kvmem_seq_len(s, l);
		sn->k[l] = kvmem_check_xmalloc(sn->n[l] * row * sizeof(float));
		sn->v[l] = kvmem_check_xmalloc(sn->n[l] * row * sizeof(float));
		if (sn->n[l])
			read_layer(s, g, l, 0, sn->n[l], sn->k[l], sn->v[l]);
		sn->np[l] = kvmem_seq_pages(s, l, sn->pd[l], MAXP);
		ck_assert_int_ge(sn->np[l], 0);
		ck_assert_int_le(sn->np[l], MAXP);
	}
	return sn;
}

static void snap_free(struct snap *sn)
{
	uint32_t l;

	for (l = 0; l < MAXL; l++) {
		free(sn->k[l]);
		free(sn->v[l]);
	}
	free(sn);
}

/* @s reads back bit for bit as @sn; with @pages, the same pages too. */
static void snap_expect(struct kvmem_seq *s, const struct kvmem_geometry *g,
			const struct snap *sn, int pages, const char *what)
{
	struct snap *now = snap_take(s, g);
	size_t row = (size_t)g->kv_heads * g->head_dim;
	uint32_t l;
	int p;

	for (l = 0; l < g->layers; l++) {
		EXPECT_EQ(now->n[l], sn->n[l], "%s: layer %u", what, l);
		ck_assert_msg(!memcmp(now->k[l], sn->k[l],
				      sn->n[l] * row * sizeof(float)) &&
				      !memcmp(now->v[l], sn->v[l],
					      sn->n[l] * row * sizeof(float)),
			      "%s: layer %u reads back differently", what, l);
		if (!pages)
			continue;
		EXPECT_EQ(now->np[l], sn->np[l], "%s: layer %u", what, l);
		for (p = 0; p < sn->np[l]; p++) {
			ck_assert_msg(now->pd[l][p].data == sn->pd[l][p].data,
				      "%s: layer %u page %d moved", what, l, p);
			EXPECT_EQ(now->pd[l][p].token_start,
				  sn->pd[l][p].token_start, "%s: layer %u",
				  what, l);
			EXPECT_EQ(now->pd[l][p].ntokens, sn->pd[l][p].ntokens,
				  "%s: layer %u page %d", what, l, p);
		}
	}
	snap_free(now);
}

/*
 * The cache's counters against the pages the live sequences hold: every
 * distinct page once, FP16 ones as hot.
 */
static void check_stats(const struct fix *f, struct kvmem_seq **seqs,
			unsigned int nseqs)
{
	static struct kvmem_page_desc pd[MAXP];
	static const void *seen[MAXL * MAXP * 8];
	struct kvmem_cache_stats st;
	uint64_t hot = 0, sealed = 0, bytes = 0;
	unsigned int nseen = 0, i, j;
	uint32_t l;

	for (i = 0; i < nseqs; i++) {
		for (l = 0; l < f->g.layers; l++) {
			int np = kvmem_seq_pages(seqs[i], l, pd, MAXP), p;

			ck_assert_int_le(np, MAXP);
			for (p = 0; p < np; p++) {
				for (j = 0; j < nseen; j++)
					if (seen[j] == pd[p].data)
						break;
				if (j < nseen)
					continue;
				ck_assert_uint_lt(
					nseen, sizeof(seen) / sizeof(seen[0]));
				seen[nseen++] = pd[p].data;
				if (pd[p].hot)
					hot++;
				else
					sealed++;
				bytes += pd[p].size;
			}
		}
	}
	memset(&st, 0xee, sizeof(st));
	kvmem_cache_stats(f->c, &st);
	ck_assert_uint_eq(st.seqs, nseqs);
	ck_assert_uint_eq(st.hot_pages, hot);
	ck_assert_uint_eq(st.sealed_pages, sealed);
	if (f->hot.size == f->sealed.size)
		ck_assert_uint_eq(st.used_bytes, bytes);
	else
		ck_assert_uint_ge(st.used_bytes, bytes);
	ck_assert_uint_le(st.used_bytes, st.arena_bytes);
}

/* ---- Geometries ---------------------------------------------------------- */

struct gcase {
	const char *name;
	uint32_t kv_heads, head_dim, tpp, group, sink;
	int fmt, codec, key_scales;
};

static const struct gcase gcases[] = {
	{ "int4+h84 group16", 2, 32, 8, 16, 2, KVMEM_FMT_INT4, KVMEM_CODEC_H84,
	  KVMEM_SCALES_GROUP },
	{ "int4+h84 channel", 2, 32, 8, 32, 2, KVMEM_FMT_INT4, KVMEM_CODEC_H84,
	  KVMEM_SCALES_CHANNEL },
	{ "int8+secded72", 2, 64, 4, 32, 1, KVMEM_FMT_INT8,
	  KVMEM_CODEC_SECDED72, KVMEM_SCALES_GROUP },
	{ "int2+h84 nosink", 2, 32, 8, 16, 0, KVMEM_FMT_INT2, KVMEM_CODEC_H84,
	  KVMEM_SCALES_GROUP },
	{ "int4+golay24", 2, 32, 8, 32, 2, KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24,
	  KVMEM_SCALES_GROUP },
	{ "fp16+secded72", 2, 32, 8, 32, 2, KVMEM_FMT_FP16,
	  KVMEM_CODEC_SECDED72, KVMEM_SCALES_GROUP },
	{ "int4+h84 sink=tpp", 2, 32, 4, 16, 4, KVMEM_FMT_INT4, KVMEM_CODEC_H84,
	  KVMEM_SCALES_GROUP },
	{ "int8+h84 head_dim 64", 1, 64, 6, 32, 2, KVMEM_FMT_INT8,
	  KVMEM_CODEC_H84, KVMEM_SCALES_CHANNEL },
	{ "int4+h74", 2, 32, 8, 16, 2, KVMEM_FMT_INT4, KVMEM_CODEC_H74,
	  KVMEM_SCALES_GROUP },
	{ "int8+golay24 (values across words)", 2, 32, 8, 32, 1, KVMEM_FMT_INT8,
	  KVMEM_CODEC_GOLAY24, KVMEM_SCALES_GROUP },
	{ "int2+secded72 channel", 3, 64, 16, 64, 3, KVMEM_FMT_INT2,
	  KVMEM_CODEC_SECDED72, KVMEM_SCALES_CHANNEL },
	{ "lm3+h84 (values across bytes)", 2, 32, 8, 16, 2, KVMEM_FMT_LM3,
	  KVMEM_CODEC_H84, KVMEM_SCALES_GROUP },
	{ "lm4+h74 channel", 2, 32, 8, 32, 2, KVMEM_FMT_LM4, KVMEM_CODEC_H74,
	  KVMEM_SCALES_CHANNEL },
};

static struct kvmem_geometry gcase_geo(const struct gcase *gc, uint32_t layers)
{
	return kvmem_check_geo(layers, gc->kv_heads, gc->head_dim, gc->tpp,
			       gc->group, gc->sink, gc->fmt, gc->codec,
			       gc->key_scales);
}

/* The small geometry most tests use: pages of 8, 2 sink tokens, int4+h84. */
static struct kvmem_geometry small_geo(uint32_t layers)
{
	return gcase_geo(&gcases[0], layers);
}

/* Append @nt fresh random tokens to every layer, through append_all. */
static void append_all_rand(struct kvmem_seq *s, struct model *m,
			    struct kvmem_rng *r, uint32_t nt)
{
	const struct kvmem_geometry *g = m->g;
	size_t row = (size_t)g->kv_heads * g->head_dim;
	size_t all = row * g->layers;
	float *k = kvmem_check_xmalloc(nt * all * sizeof(float));
	float *v = kvmem_check_xmalloc(nt * all * sizeof(float));
	uint32_t t, l;

	fill(r, k, nt * all, g->head_dim, 1.0);
	fill(r, v, nt * all, g->head_dim, 0.5);
	ck_assert_int_eq(kvmem_seq_append_all(s, k, v, nt), 0);
	for (t = 0; t < nt; t++)
		for (l = 0; l < g->layers; l++)
			model_append(m, l, k + (t * g->layers + l) * row,
				     v + (t * g->layers + l) * row, 1);
	free(k);
	free(v);
}

/* Append @nt fresh random tokens to one layer; returns what append said. */
static int append_rand(struct kvmem_seq *s, struct model *m,
		       struct kvmem_rng *r, uint32_t layer, uint32_t nt,
		       float **kout, float **vout)
{
	const struct kvmem_geometry *g = m->g;
	size_t row = (size_t)g->kv_heads * g->head_dim;
	float *k = kvmem_check_xmalloc(nt * row * sizeof(float));
	float *v = kvmem_check_xmalloc(nt * row * sizeof(float));
	int ret;

	fill(r, k, nt * row, g->head_dim, 2.0);
	fill(r, v, nt * row, g->head_dim, 1.0);
	ret = kvmem_seq_append(s, layer, k, v, nt);
	if (!ret)
		model_append(m, layer, k, v, nt);
	if (kout) {
		*kout = k;
		*vout = v;
	} else {
		free(k);
		free(v);
	}
	return ret;
}

/* ---- Open and close ------------------------------------------------------ */

START_TEST(test_open_close)
{
	struct kvmem_geometry g = small_geo(2);
	struct kvmem_cache_stats st;
	struct fix f;

	fix_open(&f, &g, 16);
	ck_assert_ptr_nonnull(kvmem_cache_geometry(f.c));
	ck_assert_mem_eq(kvmem_cache_geometry(f.c), &g, sizeof(g));
	memset(&st, 0xee, sizeof(st));
	kvmem_cache_stats(f.c, &st);
	/* The arena may be rounded, never past what was asked for by more
	 * than one page, never below one page of each kind. */
	ck_assert_uint_ge(st.arena_bytes, f.hot.size + f.sealed.size);
	ck_assert_uint_le(st.arena_bytes, 16 * f.slot + f.slot);
	ck_assert_uint_eq(st.used_bytes, 0);
	ck_assert_uint_eq(st.hot_pages, 0);
	ck_assert_uint_eq(st.sealed_pages, 0);
	ck_assert_uint_eq(st.seqs, 0);
	kvmem_close(f.c);
	kvmem_close(NULL);
	kvmem_seq_free(NULL);
}
END_TEST

START_TEST(test_open_bad_geometry)
{
	struct kvmem_geometry ok = small_geo(2), g[14];
	struct kvmem_cache *c;
	unsigned int i, n = 0;

	for (i = 0; i < 14; i++)
		g[i] = ok;
	g[n++].layers = 0;
	g[n++].kv_heads = 0;
	g[n++].head_dim = 0;
	g[n++].tokens_per_page = 0;
	g[n++].group_size = 0;
	g[n++].group_size = 12; /* does not divide 32 */
	g[n++].sink_tokens = 9; /* > tokens_per_page */
	g[n++].format = KVMEM_FMT_NR;
	g[n++].codec = KVMEM_CODEC_NR;
	g[n++].key_scales = 2;
	g[n++].resv[3] = 1;
	g[n].format = KVMEM_FMT_FP16;
	g[n].codec = KVMEM_CODEC_SECDED72;
	g[n++].key_scales = KVMEM_SCALES_CHANNEL;
	g[n++].head_dim = 1u << 30; /* absurd */
	for (i = 0; i < n; i++) {
		c = NULL;
		ck_assert_msg(kvmem_open_embedded(&g[i], 1u << 24, &c) ==
				      -EINVAL,
			      "bad geometry %u opened", i);
		ck_assert_ptr_null(c);
	}
}
END_TEST

START_TEST(test_open_tiny_arena)
{
	struct kvmem_geometry g = small_geo(2);
	struct kvmem_cache *c;
	struct fix f;
	size_t sizes[3], i;

	fix_layouts(&f, &g);
	/* kvmem.h: -EINVAL for an arena too small for one page of each
	 * kind; these are too small for even the larger kind. */
	sizes[0] = 0;
	sizes[1] = 1;
	sizes[2] = f.slot - 1;
	for (i = 0; i < 3; i++) {
		c = NULL;
		ck_assert_msg(kvmem_open_embedded(&g, sizes[i], &c) == -EINVAL,
			      "arena of %zu bytes opened", sizes[i]);
	}
}
END_TEST

/* ---- Append and read ----------------------------------------------------- */

/*
 * Each geometry: layer 0 grown in chunks of 1, 3, 9, 1, 31 tokens, layer 1
 * in one call, the page table and every value checked after every chunk.
 */
START_TEST(test_append_read)
{
	static const uint32_t chunks[] = { 1, 3, 9, 1, 31 };
	const struct gcase *gc = &gcases[_i];
	struct kvmem_geometry g = gcase_geo(gc, 2);
	struct kvmem_seq *s;
	struct kvmem_rng r;
	struct model m;
	struct fix f;
	unsigned int i;

	kvmem_rng_seed(&r, 0x5e9u + (unsigned int)_i);
	fix_open(&f, &g, 64);
	s = seq_new(&f);
	model_init(&m, &f.g, 64);
	check_model(s, &f, &m);
	for (i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
		ck_assert_int_eq(
			append_rand(s, &m, &r, 0, chunks[i], NULL, NULL), 0);
		check_layer(s, &f, &m, 0);
		EXPECT_EQ(kvmem_seq_len(s, 1), 0, "%s", gc->name);
	}
	ck_assert_int_eq(append_rand(s, &m, &r, 1, 23, NULL, NULL), 0);
	check_model(s, &f, &m);
	check_stats(&f, &s, 1);
	kvmem_seq_free(s);
	check_stats(&f, NULL, 0);
	model_free(&m);
	kvmem_close(f.c);
}
END_TEST

/* append_all, token by token or in one go, equals append per layer. */
START_TEST(test_append_all)
{
	struct kvmem_geometry g = small_geo(3);
	struct kvmem_seq *a, *b, *c;
	size_t row = (size_t)g.kv_heads * g.head_dim, all = row * 3;
	uint32_t nt = 29, t, l;
	float *k, *v, *kl, *vl;
	struct kvmem_rng r;
	struct model m;
	struct fix f;
	struct snap *sa, *sb, *sc;

	kvmem_rng_seed(&r, 0xa11);
	fix_open(&f, &g, 96);
	model_init(&m, &f.g, nt);
	a = seq_new(&f);
	b = seq_new(&f);
	c = seq_new(&f);
	k = kvmem_check_xmalloc(nt * all * sizeof(float));
	v = kvmem_check_xmalloc(nt * all * sizeof(float));
	kl = kvmem_check_xmalloc(nt * row * sizeof(float));
	vl = kvmem_check_xmalloc(nt * row * sizeof(float));
	fill(&r, k, nt * all, g.head_dim, 1.5);
	fill(&r, v, nt * all, g.head_dim, 0.7);
	ck_assert_int_eq(kvmem_seq_append_all(a, k, v, nt), 0);
	for (t = 0; t < nt; t++)
		ck_assert_int_eq(
			kvmem_seq_append_all(b, k + t * all, v + t * all, 1),
			0);
	for (l = 0; l < 3; l++) {
		for (t = 0; t < nt; t++) {
			memcpy(kl + t * row, k + t * all + l * row,
			       row * sizeof(float));
			memcpy(vl + t * row, v + t * all + l * row,
			       row * sizeof(float));
		}
		ck_assert_int_eq(kvmem_seq_append(c, l, kl, vl, nt), 0);
		model_append(&m, l, kl, vl, nt);
	}
	check_model(a, &f, &m);
	sa = snap_take(a, &g);
	sb = snap_take(b, &g);
	sc = snap_take(c, &g);
	snap_expect(b, &g, sa, 0, "append_all token by token");
	snap_expect(c, &g, sa, 0, "append per layer");
	check_stats(&f, (struct kvmem_seq *[]){ a, b, c }, 3);
	snap_free(sa);
	snap_free(sb);
	snap_free(sc);
	free(k);
	free(v);
	free(kl);
	free(vl);
	model_free(&m);
	kvmem_close(f.c); /* with the three sequences live */
}
END_TEST

/* Layers keep their own lengths. */
START_TEST(test_layer_lengths)
{
	struct kvmem_geometry g = small_geo(3);
	struct kvmem_seq *s;
	struct kvmem_rng r;
	struct model m;
	struct fix f;

	kvmem_rng_seed(&r, 0x1e9);
	fix_open(&f, &g, 64);
	model_init(&m, &f.g, 64);
	s = seq_new(&f);
	ck_assert_int_eq(append_rand(s, &m, &r, 0, 20, NULL, NULL), 0);
	ck_assert_int_eq(append_rand(s, &m, &r, 2, 11, NULL, NULL), 0);
	ck_assert_uint_eq(kvmem_seq_len(s, 0), 20);
	ck_assert_uint_eq(kvmem_seq_len(s, 1), 0);
	ck_assert_uint_eq(kvmem_seq_len(s, 2), 11);
	append_all_rand(s, &m, &r, 5);
	ck_assert_uint_eq(kvmem_seq_len(s, 0), 25);
	ck_assert_uint_eq(kvmem_seq_len(s, 1), 5);
	ck_assert_uint_eq(kvmem_seq_len(s, 2), 16);
	check_model(s, &f, &m);
	check_stats(&f, &s, 1);
	kvmem_seq_free(s);
	model_free(&m);
	kvmem_close(f.c);
}
END_TEST

START_TEST(test_seq_bad_args)
{
	struct kvmem_geometry g = small_geo(2);
	size_t row = (size_t)g.kv_heads * g.head_dim;
	struct kvmem_page_desc pd[8];
	struct kvmem_seq *s;
	struct kvmem_rng r;
	struct model m;
	struct fix f;
	float *k = kvmem_check_xmalloc(16 * row * sizeof(float));
	float *v = kvmem_check_xmalloc(16 * row * sizeof(float));

	kvmem_rng_seed(&r, 0xbad);
	fix_open(&f, &g, 16);
	model_init(&m, &f.g, 16);
	s = seq_new(&f);
	fill(&r, k, 16 * row, g.head_dim, 1);
	fill(&r, v, 16 * row, g.head_dim, 1);
	ck_assert_int_eq(kvmem_seq_append(s, 2, k, v, 1), -EINVAL);
	ck_assert_int_eq(kvmem_seq_append(s, UINT32_MAX, k, v, 1), -EINVAL);
	ck_assert_int_eq(kvmem_seq_pages(s, 2, pd, 8), -EINVAL);
	ck_assert_int_eq(append_rand(s, &m, &r, 0, 12, NULL, NULL), 0);
	ck_assert_int_eq(
		kvmem_seq_read(s, 0, 0, 13, KVMEM_ERASE_ZERO, k, v, NULL),
		-EINVAL);
	ck_assert_int_eq(
		kvmem_seq_read(s, 0, 12, 1, KVMEM_ERASE_ZERO, k, v, NULL),
		-EINVAL);
	ck_assert_int_eq(kvmem_seq_read(s, 0, UINT32_MAX, 2, KVMEM_ERASE_ZERO,
					k, v, NULL),
			 -EINVAL);
	ck_assert_int_eq(
		kvmem_seq_read(s, 1, 0, 1, KVMEM_ERASE_ZERO, k, v, NULL),
		-EINVAL);
	ck_assert_int_eq(
		kvmem_seq_read(s, 2, 0, 1, KVMEM_ERASE_ZERO, k, v, NULL),
		-EINVAL);
	ck_assert_int_eq(kvmem_seq_read(s, 0, 0, 1, 3, k, v, NULL), -EINVAL);
	ck_assert_int_eq(
		kvmem_seq_read(s, 0, 0, 12, KVMEM_ERASE_KEEP, k, v, NULL), 0);
	/* The failed calls changed nothing. */
	check_model(s, &f, &m);
	/* A short @cap still says how many pages there are. */
	ck_assert_int_eq(kvmem_seq_pages(s, 0, pd, 1), 3);
	ck_assert_int_eq(kvmem_seq_pages(s, 0, NULL, 0), 3);
	kvmem_seq_free(s);
	model_free(&m);
	free(k);
	free(v);
	kvmem_close(f.c);
}
END_TEST

/* Layer 0's pages of @s have importance @want[0..n), to float rounding. */
static void importance_is(struct kvmem_seq *s, const double *want, int n,
			  const char *what)
{
	struct kvmem_page_desc pd[8];
	int i;

	ck_assert_int_eq(kvmem_seq_pages(s, 0, pd, 8), n);
	for (i = 0; i < n; i++)
		ck_assert_msg(fabs(pd[i].importance - want[i]) <=
				      1e-6 * (1.0 + fabs(want[i])),
			      "%s: page %d importance %.9g, want %.9g", what, i,
			      (double)pd[i].importance, want[i]);
}

/*
 * kvmem_seq_attended(): masses a kernel computed into the pages'
 * importance, the moving average worked out here in double; a table
 * shorter than the layer covers its first pages; every bad argument is
 * refused with nothing changed.
 */
START_TEST(test_seq_attended)
{
	struct kvmem_geometry g = small_geo(2);
	const uint32_t nh = 2 * g.kv_heads, nq = 3;
	double want[8] = { 0 };
	float mass[8], bad[8];
	struct kvmem_seq *s;
	struct kvmem_rng r;
	struct model m;
	struct fix f;
	int np, i;

	kvmem_rng_seed(&r, 0xa77e);
	fix_open(&f, &g, 16);
	model_init(&m, &f.g, 40);
	s = seq_new(&f);
	ck_assert_int_eq(append_rand(s, &m, &r, 0, 30, NULL, NULL), 0);
	np = kvmem_seq_pages(s, 0, NULL, 0);
	ck_assert_int_ge(np, 3);
	ck_assert_int_le(np, 8);
	importance_is(s, want, np, "before");
	for (i = 0; i < np; i++)
		mass[i] = 0.75f * (float)(i + 1);

	ck_assert_int_eq(kvmem_seq_attended(s, 0, mass, np, nh, nq, 0.5f), 0);
	for (i = 0; i < np; i++)
		want[i] = 0.5 * want[i] + 0.5 * mass[i] / nq;
	importance_is(s, want, np, "alpha 0.5");
	/* 0 means 0.1, over the first two pages only */
	ck_assert_int_eq(kvmem_seq_attended(s, 0, mass, 2, nh, nq, 0.0f), 0);
	for (i = 0; i < 2; i++)
		want[i] = 0.9 * want[i] + 0.1 * mass[i] / nq;
	importance_is(s, want, np, "alpha 0, two pages");
	ck_assert_int_eq(kvmem_seq_attended(s, 0, mass, np, nh, nq, -1.0f), 0);
	ck_assert_int_eq(kvmem_seq_attended(s, 1, NULL, 0, nh, nq, 1.0f), 0);
	importance_is(s, want, np, "alpha < 0, an empty layer");

	ck_assert_int_eq(kvmem_seq_attended(NULL, 0, mass, np, nh, nq, 1.0f),
			 -EINVAL);
	ck_assert_int_eq(kvmem_seq_attended(s, 2, mass, np, nh, nq, 1.0f),
			 -EINVAL);
	ck_assert_int_eq(kvmem_seq_attended(s, 0, NULL, np, nh, nq, 1.0f),
			 -EINVAL);
	ck_assert_int_eq(kvmem_seq_attended(s, 0, mass, np + 1, nh, nq, 1.0f),
			 -EINVAL);
	ck_assert_int_eq(kvmem_seq_attended(s, 0, mass, np, 0, nq, 1.0f),
			 -EINVAL);
	ck_assert_int_eq(
		kvmem_seq_attended(s, 0, mass, np, g.kv_heads + 1, nq, 1.0f),
		-EINVAL);
	ck_assert_int_eq(kvmem_seq_attended(s, 0, mass, np, nh, 0, 1.0f),
			 -EINVAL);
	ck_assert_int_eq(kvmem_seq_attended(s, 0, mass, np, nh, nq, 1.5f),
			 -EINVAL);
	ck_assert_int_eq(kvmem_seq_attended(s, 0, mass, np, nh, nq, NAN),
			 -EINVAL);
	/* One bad mass, the last, and the pages before it keep theirs. */
	for (i = 0; i < 3; i++) {
		const float worst[3] = { -0.5f, NAN, INFINITY };

		memcpy(bad, mass, sizeof(bad));
		bad[np - 1] = worst[i];
		ck_assert_int_eq(
			kvmem_seq_attended(s, 0, bad, np, nh, nq, 1.0f),
			-EINVAL);
	}
	importance_is(s, want, np, "refused calls");
	kvmem_seq_free(s);
	model_free(&m);
	kvmem_close(f.c);
}
END_TEST

/* ---- Fork ---------------------------------------------------------------- */

/* Sealed pages and a full sink page are the parent's, tails are copies. */
static void expect_shared(struct kvmem_seq *a, struct kvmem_seq *b,
			  uint32_t layers, uint32_t refs)
{
	static struct kvmem_page_desc pa[MAXP], pb[MAXP];
	uint32_t l;
	int na, nb, p;

	for (l = 0; l < layers; l++) {
		na = kvmem_seq_pages(a, l, pa, MAXP);
		nb = kvmem_seq_pages(b, l, pb, MAXP);
		ck_assert_int_eq(na, nb);
		for (p = 0; p < na; p++) {
			int shared = pa[p].sealed ||
				     (pa[p].hot && !pa[p].token_start &&
				      p + 1 < na); /* a full sink page */

			if (shared) {
				ck_assert_msg(pa[p].data == pb[p].data,
					      "layer %u page %d not shared", l,
					      p);
				EXPECT_EQ(pa[p].refs, refs, "layer %u page %d",
					  l, p);
				EXPECT_EQ(pb[p].refs, refs, "layer %u page %d",
					  l, p);
			} else {
				ck_assert_msg(pa[p].data != pb[p].data,
					      "layer %u tail %d shared", l, p);
				EXPECT_EQ(pa[p].refs, 1, "layer %u tail %d", l,
					  p);
				EXPECT_EQ(pb[p].refs, 1, "layer %u tail %d", l,
					  p);
			}
		}
	}
}

START_TEST(test_fork)
{
	struct kvmem_geometry g = small_geo(2);
	struct kvmem_cache_stats st0, st1;
	struct kvmem_seq *p, *c, *gc;
	struct snap *sp, *sc;
	struct model mp, mc;
	struct kvmem_rng r;
	struct fix f;

	kvmem_rng_seed(&r, 0xf0);
	fix_open(&f, &g, 96);
	model_init(&mp, &f.g, 80);
	p = seq_new(&f);
	append_all_rand(p, &mp, &r, 2 + 3 * 8 + 5); /* sink, 3 sealed, tail */
	kvmem_cache_stats(f.c, &st0);
	c = NULL;
	ck_assert_int_eq(kvmem_seq_fork(p, &c), 0);
	ck_assert_ptr_nonnull(c);
	kvmem_cache_stats(f.c, &st1);
	/* Only the tails were copied. */
	ck_assert_uint_eq(st1.sealed_pages, st0.sealed_pages);
	ck_assert_uint_eq(st1.hot_pages, st0.hot_pages + g.layers);
	ck_assert_uint_eq(st1.seqs, 2);
	sp = snap_take(p, &g);
	snap_expect(c, &g, sp, 0, "fork");
	expect_shared(p, c, g.layers, 2);
	check_stats(&f, (struct kvmem_seq *[]){ p, c }, 2);

	/* The child grows past its tail; the parent does not move. */
	model_copy(&mc, &mp);
	append_all_rand(c, &mc, &r, 7);
	ck_assert_int_eq(append_rand(c, &mc, &r, 1, 3, NULL, NULL), 0);
	snap_expect(p, &g, sp, 1, "parent after the child appended");
	check_model(p, &f, &mp);
	check_model(c, &f, &mc);
	/* ... and the other way round. */
	sc = snap_take(c, &g);
	append_all_rand(p, &mp, &r, 4);
	snap_expect(c, &g, sc, 1, "child after the parent appended");
	check_model(p, &f, &mp);
	check_stats(&f, (struct kvmem_seq *[]){ p, c }, 2);

	/* Fork of the fork: the pages sealed before both forks have 3. */
	gc = NULL;
	ck_assert_int_eq(kvmem_seq_fork(c, &gc), 0);
	snap_expect(gc, &g, sc, 0, "fork of fork");
	{
		static struct kvmem_page_desc pd[MAXP];
		uint32_t l;
		int i, np;

		for (l = 0; l < g.layers; l++) {
			np = kvmem_seq_pages(gc, l, pd, MAXP);
			for (i = 0; i < np; i++) {
				/* sink and the 3 pages sealed in the parent */
				if (i < 4)
					EXPECT_EQ(pd[i].refs, 3,
						  "layer %u page %d", l, i);
				else if (pd[i].sealed)
					EXPECT_EQ(pd[i].refs, 2,
						  "layer %u page %d", l, i);
				else
					EXPECT_EQ(pd[i].refs, 1,
						  "layer %u tail %d", l, i);
			}
		}
	}
	check_stats(&f, (struct kvmem_seq *[]){ p, c, gc }, 3);

	/* Freeing the parent leaves the child's data alone. */
	kvmem_seq_free(p);
	snap_expect(c, &g, sc, 1, "child after the parent was freed");
	check_model(c, &f, &mc);
	expect_shared(c, gc, g.layers, 2);
	kvmem_seq_free(gc);
	{
		static struct kvmem_page_desc pd[MAXP];
		uint32_t l;
		int i, np;

		for (l = 0; l < g.layers; l++) {
			np = kvmem_seq_pages(c, l, pd, MAXP);
			for (i = 0; i < np; i++)
				EXPECT_EQ(pd[i].refs, 1, "layer %u page %d", l,
					  i);
		}
	}
	check_stats(&f, &c, 1);
	kvmem_seq_free(c);
	check_stats(&f, NULL, 0);
	snap_free(sp);
	snap_free(sc);
	model_free(&mp);
	model_free(&mc);
	kvmem_close(f.c);
}
END_TEST

/* A fork of an empty sequence, and of one that is only a sink page. */
START_TEST(test_fork_short)
{
	struct kvmem_geometry g = small_geo(2);
	struct kvmem_seq *a, *b, *c;
	struct kvmem_rng r;
	struct model m, mb;
	struct fix f;

	kvmem_rng_seed(&r, 0xf1);
	fix_open(&f, &g, 32);
	model_init(&m, &f.g, 32);
	a = seq_new(&f);
	b = NULL;
	ck_assert_int_eq(kvmem_seq_fork(a, &b), 0);
	check_model(b, &f, &m);
	append_all_rand(a, &m, &r, 1);
	ck_assert_uint_eq(kvmem_seq_len(b, 0), 0);
	c = NULL;
	ck_assert_int_eq(kvmem_seq_fork(a, &c), 0);
	model_copy(&mb, &m);
	append_all_rand(c, &mb, &r, 1);
	check_model(a, &f, &m);
	check_model(c, &f, &mb);
	check_stats(&f, (struct kvmem_seq *[]){ a, b, c }, 3);
	kvmem_seq_free(a);
	kvmem_seq_free(b);
	kvmem_seq_free(c);
	model_free(&m);
	model_free(&mb);
	kvmem_close(f.c);
}
END_TEST

/* ---- Truncate ------------------------------------------------------------ */

/* sink 2, sealed [2,10) [10,18) [18,26), tail [26,31) in both layers */
#define TR_N (2 + 3 * 8 + 5)

static void truncate_case(uint32_t cut, uint64_t seed)
{
	struct kvmem_geometry g = small_geo(2);
	struct kvmem_seq *s;
	struct kvmem_rng r;
	struct snap *before;
	struct model m;
	struct fix f;
	uint32_t l;
	int p;

	kvmem_rng_seed(&r, seed);
	fix_open(&f, &g, 64);
	model_init(&m, &f.g, 80);
	s = seq_new(&f);
	append_all_rand(s, &m, &r, TR_N);
	before = snap_take(s, &g);
	model_truncate(&m, s, cut);
	ck_assert_int_eq(kvmem_seq_truncate(s, cut), 0);
	check_model(s, &f, &m);
	/* Tokens before the cut page read as before, bit for bit, and the
	 * sealed pages before it are the same pages. */
	for (l = 0; l < g.layers; l++) {
		static struct kvmem_page_desc pd[MAXP];
		size_t row = (size_t)g.kv_heads * g.head_dim;
		uint32_t whole = cut < TR_N ? cut : TR_N;
		uint32_t n = kvmem_seq_len(s, l);
		float *k, *v;
		int np = kvmem_seq_pages(s, l, pd, MAXP);

		if (whole && ref_tok_sealed(&g, TR_N, 0, whole - 1))
			whole -= (whole - g.sink_tokens) % g.tokens_per_page;
		ck_assert_uint_eq(n, cut < TR_N ? cut : TR_N);
		k = kvmem_check_xmalloc((n + 1) * row * sizeof(float));
		v = kvmem_check_xmalloc((n + 1) * row * sizeof(float));
		if (n)
			read_layer(s, &g, l, 0, n, k, v);
		ck_assert_msg(
			!memcmp(k, before->k[l], whole * row * sizeof(float)) &&
				!memcmp(v, before->v[l],
					whole * row * sizeof(float)),
			"layer %u: the %u tokens before the cut page "
			"changed",
			l, whole);
		for (p = 0; p < np; p++)
			if (pd[p].sealed)
				ck_assert_msg(
					pd[p].data == before->pd[l][p].data,
					"layer %u sealed page %d moved", l, p);
		free(k);
		free(v);
	}
	/* Appending after the cut continues from it. */
	append_all_rand(s, &m, &r, 13);
	check_model(s, &f, &m);
	check_stats(&f, &s, 1);
	snap_free(before);
	kvmem_seq_free(s);
	check_stats(&f, NULL, 0);
	model_free(&m);
	kvmem_close(f.c);
}

START_TEST(test_truncate_tail)
{
	truncate_case(TR_N - 2, 0x7a1);
}
END_TEST

START_TEST(test_truncate_boundary)
{
	truncate_case(2 + 2 * 8, 0x7a2);
}
END_TEST

START_TEST(test_truncate_sealed)
{
	truncate_case(2 + 8 + 3, 0x7a3);
}
END_TEST

START_TEST(test_truncate_sink)
{
	truncate_case(1, 0x7a4);
}
END_TEST

START_TEST(test_truncate_zero)
{
	truncate_case(0, 0x7a5);
}
END_TEST

START_TEST(test_truncate_longer)
{
	struct kvmem_geometry g = small_geo(2);
	struct kvmem_seq *s;
	struct kvmem_rng r;
	struct snap *before;
	struct model m;
	struct fix f;

	kvmem_rng_seed(&r, 0x7a6);
	fix_open(&f, &g, 64);
	model_init(&m, &f.g, 80);
	s = seq_new(&f);
	append_all_rand(s, &m, &r, TR_N);
	before = snap_take(s, &g);
	ck_assert_int_eq(kvmem_seq_truncate(s, TR_N), 0);
	snap_expect(s, &g, before, 1, "truncate to the length");
	ck_assert_int_eq(kvmem_seq_truncate(s, TR_N + 100), 0);
	snap_expect(s, &g, before, 1, "truncate past the length");
	ck_assert_int_eq(kvmem_seq_truncate(s, UINT32_MAX), 0);
	snap_expect(s, &g, before, 1, "truncate to UINT32_MAX");
	check_model(s, &f, &m);
	snap_free(before);
	kvmem_seq_free(s);
	model_free(&m);
	kvmem_close(f.c);
}
END_TEST

/* Layers already shorter than the cut are left alone. */
START_TEST(test_truncate_layers)
{
	struct kvmem_geometry g = small_geo(3);
	struct kvmem_seq *s;
	struct kvmem_rng r;
	struct model m;
	struct fix f;

	kvmem_rng_seed(&r, 0x7a7);
	fix_open(&f, &g, 64);
	model_init(&m, &f.g, 80);
	s = seq_new(&f);
	ck_assert_int_eq(append_rand(s, &m, &r, 0, 30, NULL, NULL), 0);
	ck_assert_int_eq(append_rand(s, &m, &r, 1, 12, NULL, NULL), 0);
	ck_assert_int_eq(append_rand(s, &m, &r, 2, 21, NULL, NULL), 0);
	model_truncate(&m, s, 14);
	ck_assert_int_eq(kvmem_seq_truncate(s, 14), 0);
	ck_assert_uint_eq(kvmem_seq_len(s, 0), 14);
	ck_assert_uint_eq(kvmem_seq_len(s, 1), 12);
	ck_assert_uint_eq(kvmem_seq_len(s, 2), 14);
	check_model(s, &f, &m);
	append_all_rand(s, &m, &r, 9);
	check_model(s, &f, &m);
	kvmem_seq_free(s);
	model_free(&m);
	kvmem_close(f.c);
}
END_TEST

/* Cutting a fork inside a shared sealed page leaves the other alone. */
START_TEST(test_truncate_fork)
{
	static struct kvmem_page_desc pd[MAXP];
	struct kvmem_geometry g = small_geo(2);
	struct kvmem_seq *p, *c;
	struct snap *sp;
	struct model mp, mc;
	struct kvmem_rng r;
	struct fix f;
	uint32_t l;
	int i, np;

	kvmem_rng_seed(&r, 0x7a8);
	fix_open(&f, &g, 64);
	model_init(&mp, &f.g, 80);
	p = seq_new(&f);
	append_all_rand(p, &mp, &r, TR_N);
	c = NULL;
	ck_assert_int_eq(kvmem_seq_fork(p, &c), 0);
	sp = snap_take(p, &g);
	model_copy(&mc, &mp);
	model_truncate(&mc, c, 2 + 8 + 3);
	ck_assert_int_eq(kvmem_seq_truncate(c, 2 + 8 + 3), 0);
	snap_expect(p, &g, sp, 1, "parent after the fork was cut");
	check_model(p, &f, &mp);
	check_model(c, &f, &mc);
	/* The parent's sink and first sealed page are still shared, the
	 * two after it are the parent's alone now. */
	for (l = 0; l < g.layers; l++) {
		np = kvmem_seq_pages(p, l, pd, MAXP);
		ck_assert_int_eq(np, 5);
		for (i = 0; i < np; i++)
			EXPECT_EQ(pd[i].refs, i < 2 ? 2 : 1, "layer %u page %d",
				  l, i);
	}
	append_all_rand(c, &mc, &r, 20);
	snap_expect(p, &g, sp, 1, "parent after the cut fork grew");
	check_model(c, &f, &mc);
	check_stats(&f, (struct kvmem_seq *[]){ p, c }, 2);
	kvmem_seq_free(c);
	snap_expect(p, &g, sp, 1, "parent after the cut fork was freed");
	snap_free(sp);
	kvmem_seq_free(p);
	model_free(&mp);
	model_free(&mc);
	kvmem_close(f.c);
}
END_TEST

/* ---- Exhaustion ---------------------------------------------------------- */

/*
 * After an append that ran out of room, the last page may be full and
 * still FP16: its tokens fitted, sealing it needed a page there was no room
 * for. Accept that there, and only there.
 */
static void model_sync(struct model *m, struct kvmem_seq *s, uint32_t layer)
{
	static struct kvmem_page_desc pd[MAXP];
	uint32_t S = m->g->sink_tokens, P = m->g->tokens_per_page;
	uint32_t n = m->n[layer];
	int np;

	m->full_tail[layer] = 0;
	if (n <= S || (n - S) % P)
		return;
	np = kvmem_seq_pages(s, layer, pd, MAXP);
	ck_assert_int_gt(np, 0);
	m->full_tail[layer] = pd[np - 1].hot && !pd[np - 1].sealed;
}

/*
 * An arena of 6 pages (both kinds are the same size here, so a failed
 * allocation means no room for either): A takes 3 (sink, sealed, tail), B
 * grows until the arena is full.
 */
START_TEST(test_exhaustion)
{
	struct kvmem_geometry g = small_geo(1);
	struct kvmem_cache_stats st0, st1;
	struct kvmem_seq *a, *b, *forks[8];
	struct snap *sa, *sb;
	struct model ma, mb;
	struct kvmem_rng r;
	float *k, *v;
	uint32_t nb, na, nf = 0, i;
	struct fix f;
	int ret;

	/* head_dim 16: a hot page (FP16 in golay24 words) fits 4 KiB too. */
	g.head_dim = 16;
	kvmem_rng_seed(&r, 0xe0);
	fix_layouts(&f, &g);
	ck_assert_uint_eq(f.hot.size, f.sealed.size);
	fix_open(&f, &g, 6);
	model_init(&ma, &f.g, 64);
	model_init(&mb, &f.g, 200);
	a = seq_new(&f);
	ck_assert_int_eq(append_rand(a, &ma, &r, 0, 13, NULL, NULL), 0);
	sa = snap_take(a, &g);

	b = seq_new(&f);
	ret = append_rand(b, &mb, &r, 0, 200, &k, &v);
	ck_assert_int_eq(ret, -ENOMEM);
	nb = kvmem_seq_len(b, 0);
	ck_assert_uint_gt(nb, 0);
	ck_assert_uint_lt(nb, 200);
	/* At most 3 pages left for B: sink, sealed pages and a tail. */
	ck_assert_uint_le(nb, 2 + 2 * 8);
	model_append(&mb, 0, k, v, nb);
	model_sync(&mb, b, 0);
	check_model(b, &f, &mb);
	snap_expect(a, &g, sa, 1, "A after B ran out");
	check_model(a, &f, &ma);
	check_stats(&f, (struct kvmem_seq *[]){ a, b }, 2);
	free(k);
	free(v);

	/* Full stays full, and a failed append touches nothing. */
	sb = snap_take(b, &g);
	ck_assert_int_eq(append_rand(b, &mb, &r, 0, 9, NULL, NULL), -ENOMEM);
	snap_expect(b, &g, sb, 1, "B after another failed append");

	/* A fork needs a copy of A's tail; fork until that fails, once it
	 * does the cache must be as before the call. */
	for (;;) {
		struct kvmem_seq *x = NULL;

		ck_assert_uint_lt(nf, 8);
		kvmem_cache_stats(f.c, &st0);
		ret = kvmem_seq_fork(a, &x);
		if (ret == -ENOMEM) {
			kvmem_cache_stats(f.c, &st1);
			ck_assert_mem_eq(&st0, &st1, sizeof(st0));
			break;
		}
		ck_assert_int_eq(ret, 0);
		forks[nf++] = x;
	}
	snap_expect(a, &g, sa, 1, "A after the failed fork");
	snap_expect(b, &g, sb, 1, "B after the failed fork");

	/* Cutting B inside its sealed page needs a fresh tail: it works, or
	 * fails leaving B as it was. */
	{
		struct model mt;

		model_copy(&mt, &mb);
		model_truncate(&mt, b, 5);
		ret = kvmem_seq_truncate(b, 5);
		if (ret == 0) {
			check_model(b, &f, &mt);
		} else {
			ck_assert_int_eq(ret, -ENOMEM);
			snap_expect(b, &g, sb, 1, "B after a failed truncate");
		}
		model_free(&mt);
	}

	/* A's tail fills up with the arena still full: the token that fills
	 * it may be kept unsealed or refused, either way nothing else moves. */
	for (i = 0; i < nf; i++)
		kvmem_seq_free(forks[i]);
	ret = append_rand(a, &ma, &r, 0, 5, &k, &v);
	na = kvmem_seq_len(a, 0);
	if (ret) {
		ck_assert_int_eq(ret, -ENOMEM);
		ck_assert_uint_ge(na, 13);
		model_append(&ma, 0, k, v, na - 13);
	}
	ck_assert_uint_le(na, 18);
	free(k);
	free(v);
	model_sync(&ma, a, 0);
	check_model(a, &f, &ma);

	/* Room again once B is gone; A's full page is sealed as it grows. */
	kvmem_seq_free(b);
	check_stats(&f, &a, 1);
	ck_assert_int_eq(append_rand(a, &ma, &r, 0, 20, NULL, NULL), 0);
	check_model(a, &f, &ma);
	check_stats(&f, &a, 1);
	snap_free(sa);
	snap_free(sb);
	model_free(&ma);
	model_free(&mb);
	kvmem_seq_free(a);
	kvmem_close(f.c);
}
END_TEST

/* append_all that runs out keeps, per layer, what fitted. */
START_TEST(test_exhaustion_all)
{
	struct kvmem_geometry g = small_geo(2);
	size_t row = (size_t)g.kv_heads * g.head_dim, all = 2 * row;
	struct kvmem_seq *s;
	struct kvmem_rng r;
	struct model m;
	struct fix f;
	uint32_t nt = 100, t, l, n0, n1;
	float *k, *v;

	kvmem_rng_seed(&r, 0xe1);
	fix_open(&f, &g, 7);
	model_init(&m, &f.g, nt);
	s = seq_new(&f);
	k = kvmem_check_xmalloc(nt * all * sizeof(float));
	v = kvmem_check_xmalloc(nt * all * sizeof(float));
	fill(&r, k, nt * all, g.head_dim, 1);
	fill(&r, v, nt * all, g.head_dim, 1);
	ck_assert_int_eq(kvmem_seq_append_all(s, k, v, nt), -ENOMEM);
	n0 = kvmem_seq_len(s, 0);
	n1 = kvmem_seq_len(s, 1);
	ck_assert_uint_lt(n0, nt);
	ck_assert_uint_lt(n1, nt);
	ck_assert_uint_gt(n0 + n1, 0);
	for (l = 0; l < 2; l++)
		for (t = 0; t < (l ? n1 : n0); t++)
			model_append(&m, l, k + (t * 2 + l) * row,
				     v + (t * 2 + l) * row, 1);
	model_sync(&m, s, 0);
	model_sync(&m, s, 1);
	check_model(s, &f, &m);
	check_stats(&f, &s, 1);
	free(k);
	free(v);
	kvmem_seq_free(s);
	model_free(&m);
	kvmem_close(f.c);
}
END_TEST

/* ---- Teardown ------------------------------------------------------------ */

/* Close with sequences, forks and shared pages still live: ASan's leak
 * check says whether everything went. */
START_TEST(test_close_live)
{
	struct kvmem_geometry g = small_geo(2);
	struct kvmem_seq *a, *b, *c;
	struct kvmem_rng r;
	struct model m;
	struct fix f;

	kvmem_rng_seed(&r, 0xc1);
	fix_open(&f, &g, 64);
	model_init(&m, &f.g, 64);
	a = seq_new(&f);
	append_all_rand(a, &m, &r, 27);
	ck_assert_int_eq(kvmem_seq_fork(a, &b), 0);
	ck_assert_int_eq(kvmem_seq_fork(b, &c), 0);
	ck_assert_int_eq(kvmem_seq_truncate(c, 11), 0);
	(void)seq_new(&f);
	model_free(&m);
	kvmem_close(f.c);
}
END_TEST

KVMEM_SUITE(seq)
{
	Suite *s = suite_create("seq");
	TCase *tc = tcase_create("seq");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_open_close);
	tcase_add_test(tc, test_open_bad_geometry);
	tcase_add_test(tc, test_open_tiny_arena);
	tcase_add_loop_test(tc, test_append_read, 0,
			    (int)(sizeof(gcases) / sizeof(gcases[0])));
	tcase_add_test(tc, test_append_all);
	tcase_add_test(tc, test_layer_lengths);
	tcase_add_test(tc, test_seq_bad_args);
	tcase_add_test(tc, test_seq_attended);
	tcase_add_test(tc, test_fork);
	tcase_add_test(tc, test_fork_short);
	tcase_add_test(tc, test_truncate_tail);
	tcase_add_test(tc, test_truncate_boundary);
	tcase_add_test(tc, test_truncate_sealed);
	tcase_add_test(tc, test_truncate_sink);
	tcase_add_test(tc, test_truncate_zero);
	tcase_add_test(tc, test_truncate_longer);
	tcase_add_test(tc, test_truncate_layers);
	tcase_add_test(tc, test_truncate_fork);
	tcase_add_test(tc, test_exhaustion);
	tcase_add_test(tc, test_exhaustion_all);
	tcase_add_test(tc, test_close_live);
	suite_add_tcase(s, tc);
	return s;
}
