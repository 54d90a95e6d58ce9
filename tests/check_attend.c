/* SPDX-License-Identifier: MIT */
/*
 * check_attend.c - decode-on-load attention against a float64 reference
 *
 * The reference is written here from kvmem.h's contract: query head h uses
 * KV head h / (n_heads / kv_heads), s_t = scale * q_h . k_t, softmax over
 * t, out = sum_t p_t v_t, all in double. It runs twice: on the floats that
 * were appended, within a tolerance derived from the quantization step
 * (quant_tol()), and on what kvmem_seq_read() gives back, where only float
 * arithmetic separates the two (1e-5 relative).
 *
 * Errors are put into the stored pages through kvmem_seq_pages()'s data
 * pointers at places computed from kvmem_page_layout() and page.h's
 * picture; erased values are rebuilt here as the ECC paper's section 5.3
 * does (v^_t = (v_{t-1} + v_{t+1}) / 2, one neighbour at the ends).
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "kvmem/inject.h"
#include "kvmem/kvmem.h"
#include "attend_ref.h"
#include "ecc_ref.h"
#include "kvmem_check.h"
#include "quant_ref.h"
#include "rng.h"

#define MAXP 64 /* pages per layer */
#define TIGHT 1e-5 /* attention over the same decoded values */

/* ---- Fixtures ------------------------------------------------------------ */

/* A cache with room for a few times the pages @ntok tokens need. */
static struct kvmem_cache *open_for(const struct kvmem_geometry *g,
				    uint32_t ntok)
{
	struct kvmem_page_layout hot, sealed;
	struct kvmem_cache *c = NULL;
	size_t pages, slot;

	ck_assert_int_eq(kvmem_page_layout(g, 1, &hot), 0);
	ck_assert_int_eq(kvmem_page_layout(g, 0, &sealed), 0);
	slot = hot.size > sealed.size ? hot.size : sealed.size;
	pages = ((size_t)ntok / g->tokens_per_page + 3) * g->layers * 2;
	ck_assert_int_eq(kvmem_open_embedded(g, pages * slot, &c), 0);
	ck_assert_ptr_nonnull(c);
	return c;
}

static double urand(struct kvmem_rng *r, double lo, double hi)
{
	return lo + (hi - lo) * kvmem_rng_unit(r);
}

/*
 * @ntok rows of [layers][kv_heads][head_dim]: uniform in [-1, 1], or
 * smooth: every channel a sinusoid of amplitude 0.5..1.5 and period 40 to
 * 300 tokens, so neighbouring tokens are close (the paper's assumption).
 */
static void gen_kv(struct kvmem_rng *r, const struct kvmem_geometry *g,
		   uint32_t ntok, int smooth, float *x)
{
	size_t row = (size_t)g->layers * g->kv_heads * g->head_dim, c, t;
	double *amp = kvmem_check_xmalloc(row * sizeof(double));
	double *om = kvmem_check_xmalloc(row * sizeof(double));
	double *ph = kvmem_check_xmalloc(row * sizeof(double));

	for (c = 0; c < row; c++) {
		amp[c] = urand(r, 0.5, 1.5);
		om[c] = 2 * M_PI / urand(r, 40, 300);
		ph[c] = urand(r, 0, 2 * M_PI);
	}
	for (t = 0; t < ntok; t++)
		for (c = 0; c < row; c++)
			x[t * row + c] =
				(float)(smooth ? amp[c] *
							 sin(om[c] * (double)t +
							     ph[c])
					       : urand(r, -1, 1));
	free(amp);
	free(om);
	free(ph);
}

/* One layer's rows out of [ntok][layers][row]. */
static void layer_of(const struct kvmem_geometry *g, const float *all,
		     uint32_t ntok, uint32_t layer, float *out)
{
	size_t row = (size_t)g->kv_heads * g->head_dim;
	uint32_t t;

	for (t = 0; t < ntok; t++)
		memcpy(out + t * row,
		       all + ((size_t)t * g->layers + layer) * row,
		       row * sizeof(float));
}

/* A query whose scores have a spread of about 1 under @scale. */
static void gen_q(struct kvmem_rng *r, const struct kvmem_geometry *g,
		  uint32_t nh, double scale, float *q)
{
	double a = 3 / (scale * sqrt(g->head_dim));
	size_t i;

	for (i = 0; i < (size_t)nh * g->head_dim; i++)
		q[i] = (float)urand(r, -a, a);
}

/*
 * Per value of a layer of @n tokens from inputs @x, a bound on |cache - x|:
 * FP16 pages |half(x) - x|; sealed pages ref_sealed_bound(): s / 2 with s
 * the smallest FP16 >= amax / qmax (quant.h; amax over the group, or the
 * page's channel, of the inputs and of their FP16 copies since a tail may
 * be sealed from either), plus |half(x) - x|, plus 2^-20 relative for the
 * quantizer's division.
 */
static void layer_dev(const struct kvmem_geometry *g, const float *x,
		      uint32_t n, int is_k, double *dev)
{
	uint32_t H = g->kv_heads, D = g->head_dim, t, h, d;
	int qmax = ref_fmts[g->format].qmax;

	for (t = 0; t < n; t++)
		for (h = 0; h < H; h++)
			for (d = 0; d < D; d++) {
				size_t i = ((size_t)t * H + h) * D + d;

				if (!ref_tok_sealed(g, n, 0, t) || !qmax)
					dev[i] = fabs((double)ref_half(x[i]) -
						      x[i]);
				else
					dev[i] = ref_sealed_bound(g, x, is_k, t,
								  h, d);
			}
}

/*
 * How far attention over the cache may be from attention over the inputs
 * @k, @v, per output value, given |cache - input| <= @ek, @ev per value.
 *
 * Scores: |ds_t| <= scale * sum_d |q_d| ek_td in the worst case; the
 * rounding errors being independent and within [-ek, ek] (variance at most
 * ek^2 / 3), also within 6 sigma = scale * 6 sqrt(sum_d q_d^2 ek_td^2 / 3)
 * (fixed seeds: the test is deterministic, the bound is not luck).
 * delta = max_t of the smaller. Softmax: p^_t / p_t lies in
 * [e^-2delta, e^2delta], so sum_t |p^_t - p_t| <= e^2delta - 1, and as
 * sum_t (p^_t - p_t) = 0,
 *   |o^ - o| <= max_t ev_t + (e^2delta - 1) * (max_t v_t - min_t v_t) / 2
 * plus float arithmetic, 1e-5 of max_t |v_t| (as TIGHT).
 */
static void quant_tol(const struct kvmem_geometry *g, uint32_t nh, double scale,
		      const float *q, const float *v, const double *ek,
		      const double *ev, uint32_t n, double *tol)
{
	uint32_t H = g->kv_heads, D = g->head_dim, grp = nh / H, h, t, d;

	for (h = 0; h < nh; h++) {
		uint32_t kh = h / grp;
		double delta = 0;

		for (t = 0; t < n; t++) {
			double w = 0, s2 = 0;

			for (d = 0; d < D; d++) {
				double e = ek[((size_t)t * H + kh) * D + d];
				double qd = q[h * D + d];

				w += fabs(qd) * e;
				s2 += qd * qd * e * e / 3;
			}
			delta = fmax(delta, scale * fmin(w, 6 * sqrt(s2)));
		}
		for (d = 0; d < D; d++) {
			double lo = INFINITY, hi = -INFINITY, emax = 0,
			       amax = 0;

			for (t = 0; t < n; t++) {
				size_t i = ((size_t)t * H + kh) * D + d;

				lo = fmin(lo, v[i]);
				hi = fmax(hi, v[i]);
				amax = fmax(amax, fabs(v[i]));
				emax = fmax(emax, ev[i]);
			}
			tol[h * D + d] = emax +
					 expm1(2 * delta) * (hi - lo) / 2 +
					 TIGHT * amax + 1e-7;
		}
	}
}

/* 1e-5 of the largest |v| of the channel: only float arithmetic differs. */
static void tight_tol(const struct kvmem_geometry *g, uint32_t nh,
		      const float *v, uint32_t n, double *tol)
{
	uint32_t H = g->kv_heads, D = g->head_dim, grp = nh / H, h, t, d;

	for (h = 0; h < nh; h++)
		for (d = 0; d < D; d++) {
			double amax = 0;

			for (t = 0; t < n; t++)
				amax = fmax(
					amax,
					fabs(v[((size_t)t * H + h / grp) * D +
					       d]));
			tol[h * D + d] = TIGHT * amax + 1e-7;
		}
}

static void expect_close(const float *got, const double *exp, const double *tol,
			 size_t n, const char *what, const char *name)
{
	size_t i;

	for (i = 0; i < n; i++)
		EXPECT_NEAR(got[i], exp[i], tol[i], "%s: %s, output %zu", name,
			    what, i);
}

static int attend(struct kvmem_seq *s, uint32_t layer, const float *q,
		  float *out, uint32_t nh, uint32_t erasure, float scale,
		  float alpha, struct kvmem_attend_stats *st)
{
	struct kvmem_attend_opts o;

	memset(&o, 0, sizeof(o));
	o.n_heads = nh;
	o.erasure = erasure;
	o.scale = scale;
	o.importance_alpha = alpha;
	if (st)
		memset(st, 0xee, sizeof(*st));
	return kvmem_attend(s, layer, q, out, &o, st);
}

static void read_all(struct kvmem_seq *s, uint32_t layer, uint32_t n,
		     uint32_t erasure, float *k, float *v,
		     struct kvmem_page_counts *pc)
{
	memset(pc, 0xee, sizeof(*pc));
	ck_assert_int_eq(kvmem_seq_read(s, layer, 0, n, erasure, k, v, pc), 0);
}

/* ---- Against the reference ----------------------------------------------- */

struct acase {
	const char *name;
	int fmt, codec, key_scales;
	uint32_t kv_heads, head_dim, tpp, group, sink;
	uint32_t mult; /* n_heads / kv_heads */
	uint32_t ntok;
	float scale; /* 0: 1 / sqrt(head_dim) */
	int smooth;
};

#define I4 KVMEM_FMT_INT4
#define GRP KVMEM_SCALES_GROUP

static const struct acase acases[] = {
	/* 9 tokens: the sink page and a tail, nothing sealed */
	{ "fp16 only, GQA 4", I4, KVMEM_CODEC_H84, GRP, 2, 32, 8, 16, 2, 4, 9,
	  0, 0 },
	{ "fp16 only, smooth, MHA", I4, KVMEM_CODEC_H84, GRP, 2, 64, 8, 32, 2,
	  1, 9, 0.3f, 1 },
	{ "int8+secded72, GQA 4", KVMEM_FMT_INT8, KVMEM_CODEC_SECDED72, GRP, 2,
	  64, 8, 32, 2, 4, 45, 0, 0 },
	{ "int8+secded72, smooth, MHA, scale", KVMEM_FMT_INT8,
	  KVMEM_CODEC_SECDED72, GRP, 2, 32, 4, 16, 1, 1, 45, 0.05f, 1 },
	{ "int4+h84, GQA 4", I4, KVMEM_CODEC_H84, GRP, 2, 32, 8, 16, 2, 4, 45,
	  0, 0 },
	{ "int4+h84, smooth, MHA, scale", I4, KVMEM_CODEC_H84, GRP, 2, 64, 8,
	  32, 2, 1, 45, 0.5f, 1 },
	{ "int4+h84, smooth, GQA 4", I4, KVMEM_CODEC_H84, GRP, 2, 32, 8, 16, 0,
	  4, 40, 0, 1 },
	{ "int4+h84 channel scales, GQA 2", I4, KVMEM_CODEC_H84,
	  KVMEM_SCALES_CHANNEL, 2, 32, 8, 32, 2, 2, 45, 0, 0 },
	{ "int8+secded72 channel scales, GQA 8", KVMEM_FMT_INT8,
	  KVMEM_CODEC_SECDED72, KVMEM_SCALES_CHANNEL, 1, 64, 8, 32, 2, 8, 45, 0,
	  0 },
	{ "int4+golay24, GQA 4", I4, KVMEM_CODEC_GOLAY24, GRP, 2, 32, 8, 32, 2,
	  4, 45, 0, 0 },
	{ "int4+golay24, smooth, MHA, scale", I4, KVMEM_CODEC_GOLAY24, GRP, 2,
	  32, 6, 16, 2, 1, 45, 0.1f, 1 },
	{ "int2+h84, GQA 4", KVMEM_FMT_INT2, KVMEM_CODEC_H84, GRP, 2, 32, 8, 16,
	  2, 4, 45, 0, 0 },
	{ "int2+h84, smooth, MHA", KVMEM_FMT_INT2, KVMEM_CODEC_H84, GRP, 2, 32,
	  8, 16, 0, 1, 45, 0, 1 },
	{ "lm4+h84, GQA 4", KVMEM_FMT_LM4, KVMEM_CODEC_H84, GRP, 2, 32, 8, 16,
	  2, 4, 45, 0, 0 },
	{ "lm2+h84, smooth, GQA 4", KVMEM_FMT_LM2, KVMEM_CODEC_H84, GRP, 2, 64,
	  8, 32, 2, 4, 45, 0, 1 },
	{ "lm2+h74 channel scales, GQA 8", KVMEM_FMT_LM2, KVMEM_CODEC_H74,
	  KVMEM_SCALES_CHANNEL, 1, 30, 8, 1, 2, 8, 45, 0, 0 },
	{ "lm3+golay24, smooth, MHA", KVMEM_FMT_LM3, KVMEM_CODEC_GOLAY24, GRP,
	  2, 32, 8, 32, 0, 1, 45, 0, 1 },
	/* lm3 in h84 rows of whole words, one stream of codes; in h74 rows
	 * of 90 bits in 96, row by row */
	{ "lm3+h84, smooth, GQA 4", KVMEM_FMT_LM3, KVMEM_CODEC_H84, GRP, 2, 64,
	  8, 32, 2, 4, 45, 0, 1 },
	{ "lm3+h74 channel scales, GQA 8", KVMEM_FMT_LM3, KVMEM_CODEC_H74,
	  KVMEM_SCALES_CHANNEL, 1, 30, 8, 1, 2, 8, 45, 0, 0 },
	{ "lm2+secded72 channel scales, GQA 2", KVMEM_FMT_LM2,
	  KVMEM_CODEC_SECDED72, KVMEM_SCALES_CHANNEL, 2, 64, 8, 32, 2, 2, 45, 0,
	  0 },
	{ "fp16+secded72 sealed, GQA 4", KVMEM_FMT_FP16, KVMEM_CODEC_SECDED72,
	  GRP, 2, 32, 8, 32, 2, 4, 45, 0, 0 },
	{ "int4+h74, GQA 4", I4, KVMEM_CODEC_H74, GRP, 2, 32, 8, 16, 2, 4, 45,
	  0, 0 },
	/* the int8 scores' vector kernel's shapes: dim 128, groups of 64 */
	{ "int4+h84 dim 128 group 64, GQA 4", I4, KVMEM_CODEC_H84, GRP, 2, 128,
	  16, 64, 2, 4, 70, 0, 0 },
	/* pages longer than a decode tile, a tail across tiles too */
	{ "int4+h84 pages of 96, GQA 2", I4, KVMEM_CODEC_H84, GRP, 2, 64, 96,
	  32, 2, 2, 2 + 2 * 96 + 80, 0, 1 },
	{ "int8+golay24 pages of 80, MHA", KVMEM_FMT_INT8, KVMEM_CODEC_GOLAY24,
	  GRP, 1, 64, 80, 64, 0, 1, 200, 0.2f, 0 },
	/* group_size 1: a scale per value, row by row, not channel scales */
	{ "int4+h84 group 1, GQA 4", I4, KVMEM_CODEC_H84, GRP, 2, 32, 8, 1, 2,
	  4, 45, 0, 0 },
	{ "int8+secded72 group 1, MHA", KVMEM_FMT_INT8, KVMEM_CODEC_SECDED72,
	  GRP, 2, 32, 8, 1, 2, 1, 45, 0, 1 },
	{ "int2+golay24 group 1, GQA 2", KVMEM_FMT_INT2, KVMEM_CODEC_GOLAY24,
	  GRP, 2, 32, 8, 1, 2, 2, 45, 0, 0 },
	{ "int4+h84 group 1, channel keys", I4, KVMEM_CODEC_H84,
	  KVMEM_SCALES_CHANNEL, 2, 32, 8, 1, 2, 2, 45, 0, 0 },
	/* fp8: a byte a value, in h84 nibbles or secded72 words */
	{ "fp8+h84, GQA 4", KVMEM_FMT_FP8, KVMEM_CODEC_H84, GRP, 2, 64, 8, 32,
	  2, 4, 45, 0, 0 },
	{ "fp8+secded72, smooth, MHA, scale", KVMEM_FMT_FP8,
	  KVMEM_CODEC_SECDED72, GRP, 2, 32, 4, 16, 1, 1, 45, 0.05f, 1 },
	{ "fp8+secded72 channel scales, GQA 8", KVMEM_FMT_FP8,
	  KVMEM_CODEC_SECDED72, KVMEM_SCALES_CHANNEL, 1, 64, 8, 32, 2, 8, 45, 0,
	  0 },
	{ "fp8+golay24 dim 128, GQA 2", KVMEM_FMT_FP8, KVMEM_CODEC_GOLAY24, GRP,
	  2, 128, 16, 64, 2, 2, 70, 0, 1 },
	{ "fp8+h74 group 1, MHA", KVMEM_FMT_FP8, KVMEM_CODEC_H74, GRP, 2, 32, 8,
	  1, 2, 1, 45, 0, 0 },
	/* dim 24, groups of 8: AVX2's dequant, AVX-512's falls back */
	{ "fp8+h84 dim 24 group 8, GQA 2", KVMEM_FMT_FP8, KVMEM_CODEC_H84, GRP,
	  2, 24, 8, 8, 2, 2, 45, 0, 1 },
};

/*
 * Attend every layer of @s with @nq random queries; check against the
 * reference on the inputs (quant_tol) and on the decoded values (TIGHT).
 */
static void check_attend_ref(struct kvmem_seq *s,
			     const struct kvmem_geometry *g, const float *kall,
			     const float *vall, uint32_t n, uint32_t nh,
			     float scale, struct kvmem_rng *r, unsigned int nq,
			     const char *name)
{
	size_t row = (size_t)g->kv_heads * g->head_dim;
	size_t no = (size_t)nh * g->head_dim;
	double sc = scale ? scale : 1 / sqrt(g->head_dim);
	float *xk = kvmem_check_xmalloc(n * row * sizeof(float));
	float *xv = kvmem_check_xmalloc(n * row * sizeof(float));
	float *dk = kvmem_check_xmalloc(n * row * sizeof(float));
	float *dv = kvmem_check_xmalloc(n * row * sizeof(float));
	double *ek = kvmem_check_xmalloc(n * row * sizeof(double));
	double *ev = kvmem_check_xmalloc(n * row * sizeof(double));
	float *q = kvmem_check_xmalloc(no * sizeof(float)),
	      *out = kvmem_check_xmalloc(no * sizeof(float));
	double *ro = kvmem_check_xmalloc(no * sizeof(double)),
	       *tol = kvmem_check_xmalloc(no * sizeof(double));
	struct kvmem_attend_stats st;
	struct kvmem_page_counts pc;
	int lv, active = kvmem__simd_active();
	uint32_t l;
	unsigned int i;
	size_t j;

	for (l = 0; l < g->layers; l++) {
		layer_of(g, kall, n, l, xk);
		layer_of(g, vall, n, l, xv);
		layer_dev(g, xk, n, 1, ek);
		layer_dev(g, xv, n, 0, ev);
		read_all(s, l, n, KVMEM_ERASE_INTERPOLATE, dk, dv, &pc);
		/* what the tight comparison builds on: the decoded values are
		 * the inputs within the quantization bound */
		for (j = 0; j < n * row; j++) {
			EXPECT_NEAR(dk[j], xk[j], ek[j],
				    "%s: layer %u K value %zu", name, l, j);
			EXPECT_NEAR(dv[j], xv[j], ev[j],
				    "%s: layer %u V value %zu", name, l, j);
		}
		for (i = 0; i < nq; i++) {
			gen_q(r, g, nh, sc, q);
			for (lv = 0; lv < KVMEM__SIMD_NR; lv++) {
				if (!kvmem__simd_supported(lv))
					continue;
				ck_assert_int_eq(kvmem__simd_force(lv), 0);
				memset(out, 0xff, no * sizeof(float));
				ck_assert_int_eq(attend(s, l, q, out, nh,
							KVMEM_ERASE_INTERPOLATE,
							scale, -1, &st),
						 0);
				ck_assert_uint_eq(st.words_uncorrectable, 0);
				ck_assert_uint_eq(st.words_corrected, 0);
				ck_assert_uint_eq(st.values_erased, 0);
				ck_assert_uint_eq(st.headers_uncorrectable, 0);
				ck_assert_uint_gt(st.words_clean, 0);

				ref_attend(g, nh, sc, q, xk, xv, n, ro, NULL);
				quant_tol(g, nh, sc, q, xv, ek, ev, n, tol);
				expect_close(out, ro, tol, no, "vs the inputs",
					     name);

				ref_attend(g, nh, sc, q, dk, dv, n, ro, NULL);
				tight_tol(g, nh, dv, n, tol);
				expect_close(out, ro, tol, no,
					     kvmem__simd_name(lv), name);
			}
			ck_assert_int_eq(kvmem__simd_force(active), 0);
		}
	}
	free(xk);
	free(xv);
	free(dk);
	free(dv);
	free(ek);
	free(ev);
	free(q);
	free(out);
	free(ro);
	free(tol);
}

START_TEST(test_attend_ref)
{
	const struct acase *ac = &acases[_i];
	struct kvmem_geometry g = kvmem_check_geo(
		2, ac->kv_heads, ac->head_dim, ac->tpp, ac->group, ac->sink,
		ac->fmt, ac->codec, ac->key_scales);
	size_t all = (size_t)ac->ntok * 2 * ac->kv_heads * ac->head_dim;
	float *k = kvmem_check_xmalloc(all * sizeof(float)),
	      *v = kvmem_check_xmalloc(all * sizeof(float));
	struct kvmem_cache *c = open_for(&g, ac->ntok);
	struct kvmem_seq *s = NULL;
	struct kvmem_rng r;

	kvmem_rng_seed(&r, 0xa77e0du + (unsigned int)_i);
	gen_kv(&r, &g, ac->ntok, ac->smooth, k);
	gen_kv(&r, &g, ac->ntok, ac->smooth, v);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append_all(s, k, v, ac->ntok), 0);
	check_attend_ref(s, &g, k, v, ac->ntok, ac->kv_heads * ac->mult,
			 ac->scale, &r, 3, ac->name);
	kvmem_seq_free(s);
	kvmem_close(c);
	free(k);
	free(v);
}
END_TEST

/* Llama-like: 8 KV heads of 128, 32 query heads, 500 tokens, defaults. */
START_TEST(test_attend_realistic)
{
	struct kvmem_geometry g = kvmem_check_geo(1, 8, 128, 0, 0, 0, 0, 0, 0);
	uint32_t n = 500;
	size_t all;
	float *k, *v;
	struct kvmem_cache *c;
	struct kvmem_seq *s = NULL;
	struct kvmem_rng r;
	int smooth = _i;

	kvmem_geometry_default(&g);
	ck_assert_uint_eq(g.tokens_per_page, 32);
	ck_assert_uint_eq(g.format, KVMEM_FMT_INT4);
	ck_assert_uint_eq(g.codec, KVMEM_CODEC_H84);
	all = (size_t)n * g.kv_heads * g.head_dim;
	k = kvmem_check_xmalloc(all * sizeof(float));
	v = kvmem_check_xmalloc(all * sizeof(float));
	c = open_for(&g, n);
	kvmem_rng_seed(&r, 0x11a3a + (unsigned int)smooth);
	gen_kv(&r, &g, n, smooth, k);
	gen_kv(&r, &g, n, smooth, v);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append_all(s, k, v, n), 0);
	check_attend_ref(s, &g, k, v, n, 32, 0, &r, 2,
			 smooth ? "realistic, smooth" : "realistic, random");
	kvmem_seq_free(s);
	kvmem_close(c);
	free(k);
	free(v);
}
END_TEST

/* Attend @layer of @s with a random query, against what it reads back. */
static void check_tight(struct kvmem_seq *s, const struct kvmem_geometry *g,
			uint32_t layer, uint32_t nh, struct kvmem_rng *r,
			const char *name)
{
	uint32_t n = kvmem_seq_len(s, layer);
	size_t row = (size_t)g->kv_heads * g->head_dim;
	size_t no = (size_t)nh * g->head_dim;
	double sc = 1 / sqrt(g->head_dim);
	float *dk = kvmem_check_xmalloc(n * row * sizeof(float));
	float *dv = kvmem_check_xmalloc(n * row * sizeof(float));
	float *q = kvmem_check_xmalloc(no * sizeof(float)),
	      *out = kvmem_check_xmalloc(no * sizeof(float));
	double *ro = kvmem_check_xmalloc(no * sizeof(double)),
	       *tol = kvmem_check_xmalloc(no * sizeof(double));
	struct kvmem_page_counts pc;

	ck_assert_uint_gt(n, 0);
	read_all(s, layer, n, KVMEM_ERASE_INTERPOLATE, dk, dv, &pc);
	gen_q(r, g, nh, sc, q);
	ck_assert_int_eq(attend(s, layer, q, out, nh, KVMEM_ERASE_INTERPOLATE,
				0, 0, NULL),
			 0);
	ref_attend(g, nh, sc, q, dk, dv, n, ro, NULL);
	tight_tol(g, nh, dv, n, tol);
	expect_close(out, ro, tol, no, "vs the decoded values", name);
	free(dk);
	free(dv);
	free(q);
	free(out);
	free(ro);
	free(tol);
}

/* Forks share pages, a truncated fork has a tail re-made from a sealed
 * page: attention over each is attention over what each reads back. */
START_TEST(test_attend_fork_truncate)
{
	struct kvmem_geometry g =
		kvmem_check_geo(2, 2, 32, 8, 16, 2, KVMEM_FMT_INT4,
				KVMEM_CODEC_H84, KVMEM_SCALES_GROUP);
	uint32_t n = 2 + 3 * 8 + 5;
	size_t all = (size_t)(n + 9) * 2 * 2 * 32;
	float *k = kvmem_check_xmalloc(all * sizeof(float)),
	      *v = kvmem_check_xmalloc(all * sizeof(float));
	struct kvmem_cache *c = open_for(&g, 3 * n);
	struct kvmem_seq *p = NULL, *f = NULL;
	struct kvmem_rng r;
	uint32_t l;

	kvmem_rng_seed(&r, 0xf04c);
	gen_kv(&r, &g, n + 9, 0, k);
	gen_kv(&r, &g, n + 9, 0, v);
	ck_assert_int_eq(kvmem_seq_create(c, &p), 0);
	ck_assert_int_eq(kvmem_seq_append_all(p, k, v, n), 0);
	ck_assert_int_eq(kvmem_seq_fork(p, &f), 0);
	ck_assert_int_eq(kvmem_seq_truncate(f, 2 + 8 + 3), 0);
	for (l = 0; l < 2; l++)
		check_tight(f, &g, l, 8, &r, "fork cut in a sealed page");
	ck_assert_int_eq(kvmem_seq_append_all(f, k + all / 2, v + all / 2, 9),
			 0);
	for (l = 0; l < 2; l++) {
		check_tight(p, &g, l, 4, &r, "parent");
		check_tight(f, &g, l, 4, &r, "fork cut and grown");
	}
	kvmem_seq_free(p);
	for (l = 0; l < 2; l++)
		check_tight(f, &g, l, 2, &r, "fork, parent freed");
	kvmem_seq_free(f);
	kvmem_close(c);
	free(k);
	free(v);
}
END_TEST

/* ---- Page bytes ---------------------------------------------------------- */

/* How values sit in the codewords of one kind of page. */
struct wl {
	unsigned int b; /* bits per value */
	unsigned int k; /* data bits per codeword */
	unsigned int wb; /* bytes per codeword */
	int codec, fp16;
};

/* The codeword shape of @codec, DESIGN.md section 3. */
static void word_shape(int codec, struct wl *w)
{
	w->codec = codec;
	switch (codec) {
	case KVMEM_CODEC_GOLAY24:
		w->k = 12;
		w->wb = 3;
		break;
	case KVMEM_CODEC_SECDED72:
		w->k = 64;
		w->wb = 9;
		break;
	default:
		w->k = 4;
		w->wb = 1;
		break;
	}
}

/* Hot pages, the header and the scales are golay24 (page.h). */
static void word_layout(const struct kvmem_geometry *g, int hot, struct wl *w)
{
	int fmt = hot ? KVMEM_FMT_FP16 : g->format;

	word_shape(hot ? KVMEM_CODEC_GOLAY24 : g->codec, w);
	w->fp16 = fmt == KVMEM_FMT_FP16;
	w->b = ref_fmts[fmt].bits;
}

/*
 * Bits [pos, pos + n) of the data stream of the words at @p, read one at a
 * time from each word's data bits (the codes are systematic: data in the
 * low k bits), without checking the words.
 */
static uint64_t data_bits(const uint8_t *p, const struct wl *w, size_t pos,
			  unsigned int n)
{
	uint64_t v = 0;
	unsigned int i;

	for (i = 0; i < n; i++) {
		size_t b = pos + i, bi = b % w->k;

		v |= (uint64_t)(p[b / w->k * w->wb + bi / 8] >> (bi % 8) & 1)
		     << i;
	}
	return v;
}

struct pages {
	const struct kvmem_geometry *g;
	struct kvmem_page_layout hot, sealed;
	struct kvmem_page_desc pd[MAXP];
	int np;
};

static void pages_get(struct pages *ps, struct kvmem_seq *s,
		      const struct kvmem_geometry *g, uint32_t layer)
{
	ps->g = g;
	ck_assert_int_eq(kvmem_page_layout(g, 1, &ps->hot), 0);
	ck_assert_int_eq(kvmem_page_layout(g, 0, &ps->sealed), 0);
	ps->np = kvmem_seq_pages(s, layer, ps->pd, MAXP);
	ck_assert_int_gt(ps->np, 0);
	ck_assert_int_le(ps->np, MAXP);
}

static int page_of(const struct pages *ps, uint32_t t)
{
	int p;

	for (p = 0; p < ps->np; p++)
		if (t >= ps->pd[p].token_start &&
		    t < ps->pd[p].token_start + ps->pd[p].ntokens)
			return p;
	ck_abort_msg("token %u in no page", t);
	return -1;
}

/* The row of token @t, head @h of K or V (page.h: [kv_head][token] rows). */
static uint8_t *row_at(const struct pages *ps, int is_k, uint32_t t, uint32_t h,
		       const struct kvmem_page_layout **lo)
{
	const struct kvmem_page_desc *pd = &ps->pd[page_of(ps, t)];
	const struct kvmem_page_layout *l = pd->hot ? &ps->hot : &ps->sealed;

	*lo = l;
	return (uint8_t *)pd->data + (is_k ? l->k_off : l->v_off) +
	       ((size_t)h * ps->g->tokens_per_page + (t - pd->token_start)) *
		       l->row_bytes;
}

/* FP16 scale number @i of a sealed page, from its golay24 words' data. */
static float scale_at(const uint8_t *page, const struct kvmem_page_layout *l,
		      uint32_t i)
{
	struct wl w;

	ck_assert_uint_lt(i, l->nscales_k + l->nscales_v);
	word_shape(KVMEM_CODEC_GOLAY24, &w);
	return ref_h2f((uint16_t)data_bits(page + l->scales_off, &w,
					   16 * (size_t)i, 16));
}

/*
 * Value (@t, @h, @d) of K or V decoded from the page's data bits as they
 * are now, without checking them: what KVMEM_ERASE_KEEP reads.
 */
static float value_at(const struct pages *ps, int is_k, uint32_t t, uint32_t h,
		      uint32_t d)
{
	const struct kvmem_geometry *g = ps->g;
	const struct kvmem_page_desc *pd = &ps->pd[page_of(ps, t)];
	const struct kvmem_page_layout *l;
	const uint8_t *row = row_at(ps, is_k, t, h, &l);
	uint32_t tin = t - pd->token_start, G = g->head_dim / g->group_size, si;
	struct wl w;
	uint64_t bits;
	int q;

	word_layout(g, pd->hot, &w);
	bits = data_bits(row, &w, (size_t)d * w.b, w.b);
	if (w.fp16)
		return ref_h2f((uint16_t)bits);
	q = (int)bits - (bits >> (w.b - 1) ? 1 << w.b : 0);
	if (is_k && g->key_scales == KVMEM_SCALES_CHANNEL)
		si = h * g->head_dim + d;
	else
		si = (is_k ? 0 : l->nscales_k) +
		     (h * g->tokens_per_page + tin) * G + d / g->group_size;
	if (g->format == KVMEM_FMT_FP8)
		return (float)(ref_e4m3((unsigned int)bits) *
			       scale_at(pd->data, l, si));
	return (float)q * scale_at(pd->data, l, si);
}

/*
 * Where the tests below put errors, page.h's picture must hold: every value
 * decoded by hand from the page's bytes equals what kvmem_seq_read() gives.
 */
static void check_layout(const struct pages *ps, const float *k, const float *v,
			 uint32_t n)
{
	const struct kvmem_geometry *g = ps->g;
	uint32_t H = g->kv_heads, D = g->head_dim, t, h, d,
		 G = D / g->group_size;

	ck_assert_uint_eq(ps->sealed.nscales_k,
			  g->key_scales == KVMEM_SCALES_CHANNEL
				  ? H * D
				  : H * g->tokens_per_page * G);
	ck_assert_uint_eq(ps->sealed.nscales_v, H * g->tokens_per_page * G);
	for (t = 0; t < n; t++)
		for (h = 0; h < H; h++)
			for (d = 0; d < D; d++) {
				size_t i = ((size_t)t * H + h) * D + d;

				EXPECT_FEQ(value_at(ps, 1, t, h, d), k[i],
					   "K token %u head %u ch %u "
					   "from the page's bytes",
					   t, h, d);
				EXPECT_FEQ(value_at(ps, 0, t, h, d), v[i],
					   "V token %u head %u ch %u "
					   "from the page's bytes",
					   t, h, d);
			}
}

/* Exactly @k flips in each of @nwords words of @codec at @buf. */
static void inject_words(void *buf, int codec, size_t nwords, unsigned int k,
			 uint64_t seed)
{
	static const unsigned int wbits[KVMEM_CODEC_NR] = { 7, 8, 24, 72 };
	struct kvmem_inject_params ip;
	struct kvmem_inject_report rep;

	ck_assert_int_eq(kvmem_inject_params_for_codec(&ip, codec, 0, seed), 0);
	ck_assert_uint_eq(ip.word_bits, wbits[codec]);
	ip.mode = KVMEM_INJECT_EXACT;
	ip.k = k;
	memset(&rep, 0, sizeof(rep));
	ck_assert_int_eq(kvmem_inject(buf, nwords, &ip, &rep), 0);
	ck_assert_uint_eq(rep.words, nwords);
	ck_assert_uint_eq(rep.by_flips[k], nwords);
}

/*
 * Every codeword of a page gets as many flips as its code corrects: the
 * header and scales (secded72, 1), and the K and V rows (1, or 3 for
 * golay24).
 */
static void inject_page(const struct pages *ps, int p, uint64_t seed)
{
	const struct kvmem_page_desc *pd = &ps->pd[p];
	const struct kvmem_page_layout *l = pd->hot ? &ps->hot : &ps->sealed;
	size_t rows = (size_t)ps->g->kv_heads * ps->g->tokens_per_page;
	uint8_t *page = pd->data;
	struct wl w;
	unsigned int t;

	word_layout(ps->g, pd->hot, &w);
	t = w.codec == KVMEM_CODEC_GOLAY24 ? 3 : 1;
	ck_assert_uint_eq(l->row_bytes, l->row_words * w.wb);
	ck_assert_uint_le(l->k_off + rows * l->row_bytes, l->v_off);
	ck_assert_uint_le(l->v_off + rows * l->row_bytes, pd->size);
	inject_words(page, KVMEM_CODEC_GOLAY24, KVMEM_PAGE_HDR_WORDS, 3, seed);
	if (l->scale_words)
		inject_words(page + l->scales_off, KVMEM_CODEC_GOLAY24,
			     l->scale_words, 3, seed + 1);
	inject_words(page + l->k_off, w.codec, rows * l->row_words, t,
		     seed + 2);
	inject_words(page + l->v_off, w.codec, rows * l->row_words, t,
		     seed + 3);
}

/* ---- Correctable errors change nothing ----------------------------------- */

struct icase {
	const char *name;
	int fmt, codec;
};

static const struct icase icases[] = {
	{ "int8+secded72", KVMEM_FMT_INT8, KVMEM_CODEC_SECDED72 },
	{ "int4+h84", KVMEM_FMT_INT4, KVMEM_CODEC_H84 },
	{ "int4+golay24 (3 per word)", KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24 },
	{ "int2+h84", KVMEM_FMT_INT2, KVMEM_CODEC_H84 },
	{ "int4+h74", KVMEM_FMT_INT4, KVMEM_CODEC_H74 },
	{ "fp8+h84", KVMEM_FMT_FP8, KVMEM_CODEC_H84 },
	{ "fp8+secded72", KVMEM_FMT_FP8, KVMEM_CODEC_SECDED72 },
};

START_TEST(test_attend_correctable)
{
	const struct icase *ic = &icases[_i];
	struct kvmem_geometry g = kvmem_check_geo(
		1, 2, 32, 8, 16, 2, ic->fmt, ic->codec, KVMEM_SCALES_GROUP);
	uint32_t n = 2 + 3 * 8 + 5, nh = 4, D = 32; /* sink, 3 sealed, tail */
	size_t row = 2 * 32, all = n * row;
	float *k = kvmem_check_xmalloc(all * sizeof(float)),
	      *v = kvmem_check_xmalloc(all * sizeof(float));
	float *k0 = kvmem_check_xmalloc(all * sizeof(float)),
	      *v0 = kvmem_check_xmalloc(all * sizeof(float));
	float *k1 = kvmem_check_xmalloc(all * sizeof(float)),
	      *v1 = kvmem_check_xmalloc(all * sizeof(float));
	float q[4 * 32], o0[4 * 32], o1[4 * 32];
	struct kvmem_cache *c = open_for(&g, n);
	struct kvmem_attend_stats st0, st1;
	struct kvmem_page_counts pc;
	struct kvmem_seq *s = NULL;
	struct kvmem_rng r;
	struct pages ps;
	int p;

	kvmem_rng_seed(&r, 0xc044 + (unsigned int)_i);
	gen_kv(&r, &g, n, 0, k);
	gen_kv(&r, &g, n, 0, v);
	gen_q(&r, &g, nh, 1 / sqrt(D), q);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append_all(s, k, v, n), 0);
	read_all(s, 0, n, KVMEM_ERASE_INTERPOLATE, k0, v0, &pc);
	ck_assert_int_eq(
		attend(s, 0, q, o0, nh, KVMEM_ERASE_INTERPOLATE, 0, -1, &st0),
		0);
	ck_assert_uint_eq(st0.words_corrected, 0);
	pages_get(&ps, s, &g, 0);
	ck_assert_int_eq(ps.np, 5);
	check_layout(&ps, k0, v0, n);
	for (p = 0; p < ps.np; p++)
		inject_page(&ps, p,
			    0x1000u * (unsigned int)p + (unsigned int)_i);

	ck_assert_int_eq(
		attend(s, 0, q, o1, nh, KVMEM_ERASE_INTERPOLATE, 0, -1, &st1),
		0);
	ck_assert_mem_eq(o1, o0, sizeof(o0));
	ck_assert_uint_gt(st1.words_corrected, 0);
	ck_assert_uint_eq(st1.words_uncorrectable, 0);
	ck_assert_uint_eq(st1.values_erased, 0);
	ck_assert_uint_eq(st1.headers_uncorrectable, 0);
	/* the same words were read, now all corrected */
	ck_assert_uint_eq(st1.words_clean + st1.words_corrected,
			  st0.words_clean);

	read_all(s, 0, n, KVMEM_ERASE_ZERO, k1, v1, &pc);
	ck_assert_mem_eq(k1, k0, all * sizeof(float));
	ck_assert_mem_eq(v1, v0, all * sizeof(float));
	ck_assert_uint_gt(pc.payload.corrected, 0);
	ck_assert_uint_gt(pc.header.corrected, 0);
	ck_assert_uint_gt(pc.scales.corrected, 0);
	ck_assert_uint_eq(pc.header.uncorrectable, 0);
	ck_assert_uint_eq(pc.scales.uncorrectable, 0);
	ck_assert_uint_eq(pc.payload.uncorrectable, 0);
	ck_assert_uint_eq(pc.values_erased, 0);

	kvmem_seq_free(s);
	kvmem_close(c);
	free(k);
	free(v);
	free(k0);
	free(v0);
	free(k1);
	free(v1);
}
END_TEST

/*
 * FP8 rows decode to the same bits on every SIMD level (the AVX2 and
 * AVX-512 kernels convert E4M3 through F16C, the portable one bit by bit),
 * each the value of its code in the page's bytes times its scale: over
 * magnitudes from 2^-30 to 2^10 a token, so scales from FP16 subnormals up
 * and E4M3 subnormals in every group, for shapes each level vectorises or
 * hands down.
 */
static const struct {
	uint32_t dim, group;
	int codec, key_scales;
} fp8_shapes[] = {
	{ 128, 32, KVMEM_CODEC_H84, KVMEM_SCALES_GROUP },
	{ 64, 16, KVMEM_CODEC_SECDED72, KVMEM_SCALES_CHANNEL },
	{ 24, 8, KVMEM_CODEC_GOLAY24, KVMEM_SCALES_GROUP },
	{ 32, 1, KVMEM_CODEC_H74, KVMEM_SCALES_GROUP },
	{ 20, 5, KVMEM_CODEC_H84, KVMEM_SCALES_GROUP },
};

START_TEST(test_attend_fp8_same_bits)
{
	struct kvmem_geometry g = kvmem_check_geo(
		1, 2, fp8_shapes[_i].dim, 8, fp8_shapes[_i].group, 2,
		KVMEM_FMT_FP8, fp8_shapes[_i].codec, fp8_shapes[_i].key_scales);
	const uint32_t n = 2 + 5 * 8 + 3;
	const size_t all = (size_t)n * 2 * g.head_dim;
	float *k = kvmem_check_xmalloc(all * sizeof(float)),
	      *v = kvmem_check_xmalloc(all * sizeof(float));
	float *k0 = kvmem_check_xmalloc(all * sizeof(float)),
	      *v0 = kvmem_check_xmalloc(all * sizeof(float));
	float *k1 = kvmem_check_xmalloc(all * sizeof(float)),
	      *v1 = kvmem_check_xmalloc(all * sizeof(float));
	struct kvmem_cache *c = open_for(&g, n);
	int lv, active = kvmem__simd_active();
	struct kvmem_page_counts pc;
	struct kvmem_seq *s = NULL;
	struct kvmem_rng r;
	struct pages ps;
	size_t i;

	kvmem_rng_seed(&r, 0xf8e4a3 + (unsigned int)_i);
	gen_kv(&r, &g, n, 0, k);
	gen_kv(&r, &g, n, 0, v);
	for (i = 0; i < all; i++) {
		int e = (int)(i / (2 * g.head_dim) % 41) - 30;

		/* Every seventh value E4M3-subnormal in its group. */
		k[i] = ldexpf(k[i], e - (i % 7 == 3 ? 16 : 0));
		v[i] = ldexpf(v[i], -e - 20 - (i % 7 == 5 ? 16 : 0));
	}
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append_all(s, k, v, n), 0);
	ck_assert_int_eq(kvmem__simd_force(KVMEM__SIMD_PORTABLE), 0);
	read_all(s, 0, n, KVMEM_ERASE_INTERPOLATE, k0, v0, &pc);
	pages_get(&ps, s, &g, 0);
	check_layout(&ps, k0, v0, n);
	for (lv = 0; lv < KVMEM__SIMD_NR; lv++) {
		if (!kvmem__simd_supported(lv)) {
			fprintf(stderr,
				"SKIP: test_attend_fp8_same_bits: this CPU "
				"does not run the %s kernels\n",
				kvmem__simd_name(lv));
			continue;
		}
		ck_assert_int_eq(kvmem__simd_force(lv), 0);
		read_all(s, 0, n, KVMEM_ERASE_INTERPOLATE, k1, v1, &pc);
		ck_assert_uint_eq(pc.values_erased, 0);
		EXPECT_MEM(k1, k0, all * sizeof(float),
			   "K, dim %u group %u, %s", g.head_dim, g.group_size,
			   kvmem__simd_name(lv));
		EXPECT_MEM(v1, v0, all * sizeof(float),
			   "V, dim %u group %u, %s", g.head_dim, g.group_size,
			   kvmem__simd_name(lv));
	}
	ck_assert_int_eq(kvmem__simd_force(active), 0);
	kvmem_seq_free(s);
	kvmem_close(c);
	free(k);
	free(v);
	free(k0);
	free(v0);
	free(k1);
	free(v1);
}
END_TEST

/* ---- Uncorrectable words and erasure policies ---------------------------- */

struct ent {
	int is_k;
	uint32_t t, h, d; /* a value of the word to break */
	int data; /* flip data bits (else check bits only) */
	int scale; /* break scale word @d of the page of token @t instead */
};

struct ecase {
	const char *name;
	int fmt, codec;
	uint32_t sink, n;
	int hot; /* errors in FP16 pages too */
	int scales; /* errors in scale words */
};

/* tokens_per_page 4: pages [S, S+4) [S+4, S+8) ... */
static const struct ecase ecases[] = {
	{ "int4+h84, no sink", KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 16, 0, 0 },
	{ "int4+h84, sink 2", KVMEM_FMT_INT4, KVMEM_CODEC_H84, 2, 18, 0, 0 },
	{ "int4+golay24, 4 flips", KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24, 2, 18,
	  0, 0 },
	{ "int2+h84", KVMEM_FMT_INT2, KVMEM_CODEC_H84, 0, 16, 0, 0 },
	{ "int8+secded72", KVMEM_FMT_INT8, KVMEM_CODEC_SECDED72, 2, 18, 0, 0 },
	{ "fp8+h84", KVMEM_FMT_FP8, KVMEM_CODEC_H84, 2, 18, 0, 0 },
	{ "fp8+secded72", KVMEM_FMT_FP8, KVMEM_CODEC_SECDED72, 2, 18, 0, 0 },
	{ "int4+h84, FP16 sink and tail", KVMEM_FMT_INT4, KVMEM_CODEC_H84, 2,
	  13, 1, 0 },
	{ "int4+h84, scale words", KVMEM_FMT_INT4, KVMEM_CODEC_H84, 2, 18, 0,
	  1 },
};

static unsigned int build_ents(const struct ecase *ec, struct ent *e)
{
	uint32_t S = ec->sink, n = ec->n;
	unsigned int m = 0;

#define ENT(k_, t_, h_, d_, x_) \
	(e[m++] = (struct ent){ \
		 .is_k = k_, .t = t_, .h = h_, .d = d_, .data = x_ })
#define SCALE(t_, w_, x_) \
	(e[m++] = (struct ent){ .t = t_, .d = w_, .data = x_, .scale = 1 })
	if (ec->scales) {
		/* golay24 word w holds stream bits [12w, 12w + 12) of the
		 * FP16 scales; K's are [kv_head][token][group], 2 groups,
		 * then V's (16 in all) likewise */
		SCALE(6, 1, 1); /* scales 0, 1: K head 0 token 6 (first of a
				   page) */
		SCALE(6, 21, 0); /* scales 15, 16: K head 1 token 9 group 1,
				    V head 0 token 6 group 0 */
		SCALE(10, 38, 0); /* scales 28, 29: V head 1 token 12 */
		return m;
	}
#undef SCALE
	if (ec->hot) {
		/* sink [0,2), sealed [2,6) [6,10), tail [10,13) */
		ENT(1, 0, 1, 9, 1); /* first token, FP16: v[1] */
		ENT(1, 1, 0, 30, 1); /* sink, neighbours sink and sealed */
		ENT(0, 9, 1, 5, 1); /* last of a sealed page, next in tail */
		ENT(0, 10, 0, 0, 1); /* first of the tail, previous sealed */
		ENT(1, 12, 1, 20, 0); /* last token, in the tail: v[11] */
		return m;
	}
	if (!S)
		ENT(1, 0, 0, 3, 1); /* first token: v[1] */
	else
		ENT(0, S, 1, 2, 1); /* first sealed, previous in the sink */
	ENT(1, S + 1, 1, 28, 1); /* middle of a page */
	ENT(1, S + 4, 1, 7, 1); /* first of a page: previous page */
	ENT(0, S + 7, 0, 0, 1); /* last of a page: next page */
	/* three in a row: the middle one has no neighbour left (0), the
	 * outer ones one each; the last is the last of its page */
	ENT(1, S + 9, 0, 10, 0);
	ENT(1, S + 10, 0, 10, 1);
	ENT(1, S + 11, 0, 10, 1);
	ENT(0, n - 1, 1, 5, 0); /* last token: v[n-2] */
#undef ENT
	return m;
}

/* Break one codeword: 2 flips (h84, secded72), 4 (golay24). */
static void break_word(uint8_t *word, int codec, int data)
{
	static const unsigned int h84[2][2] = { { 4, 7 }, { 0, 1 } };
	static const unsigned int gol[2][4] = { { 12, 15, 18, 23 },
						{ 0, 5, 13, 20 } };
	static const unsigned int sec[2][2] = { { 64, 70 }, { 3, 17 } };
	const unsigned int *b;
	unsigned int nb, i;

	if (codec == KVMEM_CODEC_GOLAY24) {
		b = gol[data];
		nb = 4;
	} else if (codec == KVMEM_CODEC_SECDED72) {
		b = sec[data];
		nb = 2;
	} else {
		b = h84[data];
		nb = 2;
	}
	for (i = 0; i < nb; i++)
		word[b[i] / 8] ^= (uint8_t)(1u << (b[i] % 8));
}

/*
 * Break scale word @e->d of the page holding token @e->t, mark the values
 * of the groups its four scales cover; returns their number.
 */
static unsigned int break_scale(const struct pages *ps, const struct ent *e,
				uint8_t *erk, uint8_t *erv)
{
	const struct kvmem_geometry *g = ps->g;
	const struct kvmem_page_desc *pd = &ps->pd[page_of(ps, e->t)];
	const struct kvmem_page_layout *l = &ps->sealed;
	uint32_t G = g->head_dim / g->group_size, P = g->tokens_per_page;
	uint32_t si, d, nv = 0;

	ck_assert_uint_eq(pd->sealed, 1);
	ck_assert_uint_eq(g->key_scales, KVMEM_SCALES_GROUP);
	ck_assert_uint_lt(e->d, l->scale_words);
	break_word((uint8_t *)pd->data + l->scales_off + e->d * 3,
		   KVMEM_CODEC_GOLAY24, e->data);
	/* Stream bits [12d, 12d + 12) meet scales 12d / 16 .. (12d + 11) / 16,
	 * and a lost scale's values are rebuilt under every policy but zero. */
	for (si = 12 * e->d / 16; si <= (12 * e->d + 11) / 16; si++) {
		int is_k = si < l->nscales_k;
		uint32_t x = is_k ? si : si - l->nscales_k;
		uint32_t h = x / (P * G), t = pd->token_start + x / G % P;
		uint8_t *er = is_k ? erk : erv;

		if (si >= l->nscales_k + l->nscales_v)
			break;
		for (d = x % G * g->group_size; d < (x % G + 1) * g->group_size;
		     d++) {
			er[((size_t)t * g->kv_heads + h) * g->head_dim + d] = 2;
			nv++;
		}
	}
	return nv;
}

static const char *const pol_name[] = { "interpolate", "zero", "keep" };

START_TEST(test_attend_erasure)
{
	const struct ecase *ec = &ecases[_i];
	struct kvmem_geometry g =
		kvmem_check_geo(1, 2, 32, 4, 16, ec->sink, ec->fmt, ec->codec,
				KVMEM_SCALES_GROUP);
	uint32_t n = ec->n, H = 2, D = 32, nh = 4, pol, i, t, h, d;
	size_t row = (size_t)H * D, all = n * row;
	float *k = kvmem_check_xmalloc(all * sizeof(float)),
	      *v = kvmem_check_xmalloc(all * sizeof(float));
	float *ck = kvmem_check_xmalloc(all * sizeof(float)),
	      *cv = kvmem_check_xmalloc(all * sizeof(float));
	float *kk = kvmem_check_xmalloc(all * sizeof(float)),
	      *kv = kvmem_check_xmalloc(all * sizeof(float));
	float *xk = kvmem_check_xmalloc(all * sizeof(float)),
	      *xv = kvmem_check_xmalloc(all * sizeof(float));
	float *gk = kvmem_check_xmalloc(all * sizeof(float)),
	      *gv = kvmem_check_xmalloc(all * sizeof(float));
	uint8_t *erk = calloc(all, 1), *erv = calloc(all, 1);
	float q[4 * 32], out[4 * 32], rk[64], rv[64];
	double ro[4 * 32], tol[4 * 32];
	struct kvmem_cache *c = open_for(&g, n);
	struct kvmem_attend_stats st;
	struct kvmem_page_counts pc;
	struct kvmem_seq *s = NULL;
	struct ent e[16];
	unsigned int ne = build_ents(ec, e), nvals = 0, npw = 0, nsw = 0;
	struct kvmem_rng r;
	struct pages ps;

	ck_assert_ptr_nonnull(erk);
	ck_assert_ptr_nonnull(erv);
	kvmem_rng_seed(&r, 0xe4a5e + (unsigned int)_i);
	gen_kv(&r, &g, n, 1, k);
	gen_kv(&r, &g, n, 1, v);
	gen_q(&r, &g, nh, 1 / sqrt(D), q);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append_all(s, k, v, n), 0);
	read_all(s, 0, n, KVMEM_ERASE_INTERPOLATE, ck, cv, &pc);
	pages_get(&ps, s, &g, 0);
	/* the pages the entries expect: sealed ones are sealed when full */
	if (ec->hot) {
		ck_assert_int_eq(ps.np, 4);
		ck_assert_uint_eq(ps.pd[3].hot, 1);
	} else {
		ck_assert_int_eq(ps.np, (ec->sink ? 1 : 0) + 4);
		ck_assert_msg(ps.pd[ps.np - 1].sealed && !ps.pd[ps.np - 1].hot,
			      "a full last page is sealed (kvmem.h: pages that "
			      "fill up are sealed on the way)");
	}
	check_layout(&ps, ck, cv, n);

	/* Break the words, note the values they hold. */
	for (i = 0; i < ne; i++) {
		const struct kvmem_page_layout *l;
		uint8_t *rw;
		struct wl w;
		uint32_t w0;

		if (e[i].scale) {
			nvals += break_scale(&ps, &e[i], erk, erv);
			nsw++;
			continue;
		}
		rw = row_at(&ps, e[i].is_k, e[i].t, e[i].h, &l);
		npw++;

		word_layout(&g, ps.pd[page_of(&ps, e[i].t)].hot, &w);
		/* The word of value d's first bit, and every value with a
		 * bit in it: bounded if quantized, not if FP16. */
		w0 = e[i].d * w.b / w.k;
		break_word(rw + w0 * w.wb, w.codec, e[i].data);
		for (d = 0; d < D; d++) {
			uint8_t *er = e[i].is_k ? erk : erv;

			if (d * w.b >= (w0 + 1) * w.k ||
			    (d + 1) * w.b <= w0 * w.k)
				continue;
			ck_assert_uint_eq(
				er[((size_t)e[i].t * H + e[i].h) * D + d], 0);
			er[((size_t)e[i].t * H + e[i].h) * D + d] =
				w.fp16 ? 2 : 1;
			nvals++;
		}
	}
	/* KEEP: the values as the bits now say, unchecked */
	for (t = 0; t < n; t++)
		for (h = 0; h < H; h++)
			for (d = 0; d < D; d++) {
				size_t x = ((size_t)t * H + h) * D + d;

				kk[x] = erk[x] == 1 ? value_at(&ps, 1, t, h, d)
						    : ck[x];
				kv[x] = erv[x] == 1 ? value_at(&ps, 0, t, h, d)
						    : cv[x];
			}

	for (pol = 0; pol < 3; pol++) {
		/* What each policy must rebuild, from the clean read. */
		for (t = 0; t < n; t++)
			for (h = 0; h < H; h++)
				for (d = 0; d < D; d++) {
					size_t x = ((size_t)t * H + h) * D + d;
					size_t lx = x - row, rx = x + row;
					int j;

					for (j = 0; j < 2; j++) {
						const float *cl = j ? cv : ck;
						const uint8_t *er =
							j ? erv : erk;
						float *xo = j ? xv : xk;
						int hl = t > 0 && !er[lx];
						int hr = t + 1 < n && !er[rx];

						if (!er[x])
							xo[x] = cl[x];
						else if (pol ==
							 KVMEM_ERASE_ZERO)
							xo[x] = 0;
						else if (
							pol == KVMEM_ERASE_KEEP &&
							er[x] == 1)
							xo[x] = j ? kv[x]
								  : kk[x];
						else if (hl && hr)
							xo[x] = (cl[lx] +
								 cl[rx]) /
								2;
						else if (hl)
							xo[x] = cl[lx];
						else if (hr)
							xo[x] = cl[rx];
						else
							xo[x] = 0;
					}
				}

		read_all(s, 0, n, pol, gk, gv, &pc);
		EXPECT_EQ(pc.payload.uncorrectable, npw, "%s", pol_name[pol]);
		EXPECT_EQ(pc.values_erased, nvals, "%s", pol_name[pol]);
		EXPECT_EQ(pc.header.uncorrectable, 0, "%s", pol_name[pol]);
		EXPECT_EQ(pc.scales.uncorrectable, nsw, "%s", pol_name[pol]);
		for (i = 0; i < all; i++) {
			t = (uint32_t)(i / row);
			h = (uint32_t)(i % row / D);
			d = (uint32_t)(i % D);
			EXPECT_FEQ(gk[i], xk[i],
				   "%s: K token %u head %u ch %u%s",
				   pol_name[pol], t, h, d,
				   erk[i] ? " (erased)" : "");
			EXPECT_FEQ(gv[i], xv[i],
				   "%s: V token %u head %u ch %u%s",
				   pol_name[pol], t, h, d,
				   erv[i] ? " (erased)" : "");
		}
		/* One token alone rebuilds from the same neighbours. */
		for (i = 0; i < ne; i++) {
			t = e[i].t;
			ck_assert_int_eq(
				kvmem_seq_read(s, 0, t, 1, pol, rk, rv, NULL),
				0);
			for (d = 0; d < row; d++) {
				EXPECT_FEQ(
					rk[d], xk[t * row + d],
					"%s: K token %u read alone, value %u",
					pol_name[pol], t, d);
				EXPECT_FEQ(
					rv[d], xv[t * row + d],
					"%s: V token %u read alone, value %u",
					pol_name[pol], t, d);
			}
		}

		ck_assert_int_eq(attend(s, 0, q, out, nh, pol, 0, -1, &st), 0);
		EXPECT_EQ(st.words_uncorrectable, ne, "%s (scales and payload)",
			  pol_name[pol]);
		EXPECT_EQ(st.values_erased, nvals, "%s", pol_name[pol]);
		EXPECT_EQ(st.headers_uncorrectable, 0, "%s", pol_name[pol]);
		ref_attend(&g, nh, 1 / sqrt(D), q, xk, xv, n, ro, NULL);
		tight_tol(&g, nh, xv, n, tol);
		expect_close(out, ro, tol, (size_t)nh * D, pol_name[pol],
			     ec->name);
	}

	kvmem_seq_free(s);
	kvmem_close(c);
	free(k);
	free(v);
	free(ck);
	free(cv);
	free(kk);
	free(kv);
	free(xk);
	free(xv);
	free(gk);
	free(gv);
	free(erk);
	free(erv);
}
END_TEST

/*
 * int8 rows are read a value a byte (kvmem__page_rows_b8(), then the
 * scores_b8 and accum_b8 kernels of the SIMD level) only while every word
 * of them decodes and their scales are whole; rows that lost a word or a
 * scale are decoded and rebuilt as kvmem_seq_read() does. Under every
 * policy and at every SIMD level this CPU runs, attention over pages with
 * such words equals the reference over what kvmem_seq_read() gives back,
 * and the portable level's output, within float arithmetic.
 */
START_TEST(test_attend_i8_erasure)
{
	/* dim 64, groups of 32: shapes the vector kernels take; sink
	 * [0, 2), sealed pages of 8 from 2, a tail [42, 45) */
	struct kvmem_geometry g =
		kvmem_check_geo(1, 2, 64, 8, 32, 2, KVMEM_FMT_INT8,
				KVMEM_CODEC_SECDED72, KVMEM_SCALES_GROUP);
	static const struct {
		int is_k;
		uint32_t t, h, w; /* word w of the row of token t, head h */
		int data; /* data bits, else check bits only */
	} bad[] = {
		{ 1, 5, 0, 1, 1 },
		{ 0, 12, 1, 3, 1 },
		{ 1, 20, 1, 7, 0 },
		{ 0, 33, 0, 0, 1 }, /* last of a page: next in the next */
	};
	const uint32_t n = 45, nh = 8, D = 64, scale_tok = 38, scale_word = 5;
	const size_t all = (size_t)n * g.kv_heads * D, no = (size_t)nh * D;
	float *k = kvmem_check_xmalloc(all * sizeof(float)),
	      *v = kvmem_check_xmalloc(all * sizeof(float));
	float *dk = kvmem_check_xmalloc(all * sizeof(float)),
	      *dv = kvmem_check_xmalloc(all * sizeof(float));
	float q[8 * 64], out[8 * 64], port[8 * 64];
	double ro[8 * 64], tol[8 * 64];
	struct kvmem_cache *c = open_for(&g, n);
	int lv, active = kvmem__simd_active();
	const struct kvmem_page_layout *l;
	struct kvmem_attend_stats st;
	struct kvmem_page_counts pc;
	struct kvmem_seq *s = NULL;
	struct kvmem_rng r;
	struct pages ps;
	uint32_t pol;
	size_t i;

	for (lv = 0; lv < KVMEM__SIMD_NR; lv++)
		if (!kvmem__simd_supported(lv))
			fprintf(stderr,
				"SKIP: test_attend_i8_erasure: this CPU does "
				"not run the %s kernels\n",
				kvmem__simd_name(lv));
	kvmem_rng_seed(&r, 0x18e4a5);
	gen_kv(&r, &g, n, 1, k);
	gen_kv(&r, &g, n, 1, v);
	gen_q(&r, &g, nh, 1 / sqrt(D), q);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append_all(s, k, v, n), 0);
	pages_get(&ps, s, &g, 0);
	ck_assert_int_eq(ps.np, 7);
	for (i = 0; i < KVMEM_ARRAY_SIZE(bad); i++) {
		uint8_t *row = row_at(&ps, bad[i].is_k, bad[i].t, bad[i].h, &l);

		ck_assert_ptr_eq(l, &ps.sealed);
		break_word(row + bad[i].w * 9, KVMEM_CODEC_SECDED72,
			   bad[i].data);
	}
	l = &ps.sealed;
	ck_assert_uint_lt(scale_word, l->scale_words);
	break_word((uint8_t *)ps.pd[page_of(&ps, scale_tok)].data +
			   l->scales_off + scale_word * 3,
		   KVMEM_CODEC_GOLAY24, 1);

	for (pol = 0; pol < 3; pol++) {
		read_all(s, 0, n, pol, dk, dv, &pc);
		ck_assert_uint_eq(pc.payload.uncorrectable,
				  KVMEM_ARRAY_SIZE(bad));
		ck_assert_uint_eq(pc.scales.uncorrectable, 1);
		ck_assert_uint_gt(pc.values_erased, 0);
		ref_attend(&g, nh, 1 / sqrt(D), q, dk, dv, n, ro, NULL);
		tight_tol(&g, nh, dv, n, tol);
		for (lv = 0; lv < KVMEM__SIMD_NR; lv++) {
			if (!kvmem__simd_supported(lv))
				continue;
			ck_assert_int_eq(kvmem__simd_force(lv), 0);
			memset(out, 0xff, sizeof(out));
			ck_assert_int_eq(
				attend(s, 0, q, out, nh, pol, 0, -1, &st), 0);
			if (lv == KVMEM__SIMD_PORTABLE)
				memcpy(port, out, sizeof(port));
			for (i = 0; i < no; i++) {
				EXPECT_NEAR(out[i], ro[i], tol[i],
					    "%s, %s: output %zu", pol_name[pol],
					    kvmem__simd_name(lv), i);
				EXPECT_NEAR(out[i], port[i], tol[i],
					    "%s, %s: output %zu against "
					    "portable",
					    pol_name[pol], kvmem__simd_name(lv),
					    i);
			}
			EXPECT_EQ(st.values_erased, pc.values_erased, "%s, %s",
				  pol_name[pol], kvmem__simd_name(lv));
			EXPECT_EQ(st.words_uncorrectable,
				  KVMEM_ARRAY_SIZE(bad) + 1, "%s, %s",
				  pol_name[pol], kvmem__simd_name(lv));
		}
	}
	ck_assert_int_eq(kvmem__simd_force(active), 0);

	kvmem_seq_free(s);
	kvmem_close(c);
	free(k);
	free(v);
	free(dk);
	free(dv);
}
END_TEST

/* ---- Importance ---------------------------------------------------------- */

/* ---- int8 scores (KVMEM_ATTEND_INT8_SCORES) ----------------------------- */

/* Query row @x of @D values as kvmem.h says: q8 and its scale. */
static float quantize_row(const float *x, uint32_t D, int8_t *q8)
{
	float m = 0.0f, inv;
	uint32_t d;

	for (d = 0; d < D; d++)
		m = fmaxf(m, fabsf(x[d]));
	inv = m > 0.0f ? 127.0f / m : 0.0f;
	for (d = 0; d < D; d++) {
		long v = lrintf(x[d] * inv);

		q8[d] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
	}
	return m / 127.0f;
}

/* Whether token @t of a layer of @n has its scores from int8 (no value of
 * the layer erased): a sealed int4 page of a code the int4 reader takes,
 * or int8, and K with group scales of more than one value. */
static int q8_token(const struct kvmem_geometry *g, uint32_t n, uint32_t t)
{
	int fmt =
		g->format == KVMEM_FMT_INT8 ||
		(g->format == KVMEM_FMT_INT4 &&
		 (g->codec == KVMEM_CODEC_H84 || g->codec == KVMEM_CODEC_H74 ||
		  g->codec == KVMEM_CODEC_GOLAY24));

	return fmt && g->key_scales == KVMEM_SCALES_GROUP &&
	       g->group_size > 1 && ref_tok_sealed(g, n, 0, t);
}

/*
 * ref_attend() over the decoded values @k, @v of a layer of @ntok tokens,
 * the first @n seen, with query @q scored as int8 (@q8, @qs per head) on
 * the tokens q8_token() names and as floats on the others.
 */
static void ref_attend_q8(const struct kvmem_geometry *g, uint32_t nh,
			  double scale, const float *q, const int8_t *q8,
			  const float *qs, const float *k, const float *v,
			  uint32_t ntok, uint32_t n, double *out)
{
	uint32_t H = g->kv_heads, D = g->head_dim, grp = nh / H, h, t, d;
	double *p = kvmem_check_xmalloc(n * sizeof(double));

	for (h = 0; h < nh; h++) {
		uint32_t kh = h / grp;

		for (t = 0; t < n; t++) {
			int i8 = q8_token(g, ntok, t);
			double sum = 0;

			for (d = 0; d < D; d++)
				sum += (i8 ? (double)qs[h] * q8[h * D + d]
					   : (double)q[h * D + d]) *
				       k[((size_t)t * H + kh) * D + d];
			p[t] = scale * sum;
		}
		ref_softmax_v(p, n, v, H, kh, D, out + h * D);
	}
	free(p);
}

/*
 * kvmem.h's bound on |int8 scores - float scores| of each output of query
 * @q over the first @n tokens of @k, @v: delta = scale * (m / 254) *
 * max_t sum_d |k_td| per head (m its largest |q_d|), then (e^(2 delta) -
 * 1) * max_t |v_td|, with 2e-4 of delta for the rounding of m / 127 and
 * the float arithmetic of both calls (TIGHT each).
 */
static void q8_tol(const struct kvmem_geometry *g, uint32_t nh, double scale,
		   const float *q, const float *k, const float *v, uint32_t n,
		   double *tol)
{
	uint32_t H = g->kv_heads, D = g->head_dim, grp = nh / H, h, t, d;

	for (h = 0; h < nh; h++) {
		uint32_t kh = h / grp;
		double m = 0, ksum = 0, delta;

		for (d = 0; d < D; d++)
			m = fmax(m, fabs(q[h * D + d]));
		for (t = 0; t < n; t++) {
			double a = 0;

			for (d = 0; d < D; d++)
				a += fabs(k[((size_t)t * H + kh) * D + d]);
			ksum = fmax(ksum, a);
		}
		delta = scale * (m / 254) * ksum * (1 + 2e-4);
		for (d = 0; d < D; d++) {
			double amax = 0;

			for (t = 0; t < n; t++)
				amax = fmax(
					amax,
					fabs(v[((size_t)t * H + kh) * D + d]));
			tol[h * D + d] = expm1(2 * delta) * amax +
					 2 * TIGHT * amax + 1e-7;
		}
	}
}

/*
 * check_causal() with KVMEM_ATTEND_INT8_SCORES, at the SIMD level in force:
 * the same bits for 1, 2 and 3 threads; with nothing erased, against
 * ref_attend_q8() (TIGHT); and always within q8_tol() of @fout, the same
 * call with float scores. Where some token takes int8 scores, the bits
 * differ from @fout's: the int8 path ran.
 */
static void check_causal_q8(struct kvmem_seq *s, const struct kvmem_geometry *g,
			    uint32_t nh, float scale, uint32_t pos0,
			    uint32_t nq, const float *q, const float *dk,
			    const float *dv, const float *fout, uint64_t erased,
			    const char *name)
{
	uint32_t n = kvmem_seq_len(s, 0), D = g->head_dim, i, h, t;
	size_t no = (size_t)nh * D;
	double sc = scale ? scale : 1 / sqrt(D);
	float *out = kvmem_check_xmalloc(nq * no * sizeof(float));
	float *first = kvmem_check_xmalloc(nq * no * sizeof(float));
	int8_t *q8 = kvmem_check_xmalloc(no);
	float *qs = kvmem_check_xmalloc(nh * sizeof(float));
	double *ro = kvmem_check_xmalloc(no * sizeof(double));
	double *tol = kvmem_check_xmalloc(no * sizeof(double));
	struct kvmem_attend_opts o = { .n_heads = nh,
				       .scale = scale,
				       .importance_alpha = -1,
				       .flags = KVMEM_ATTEND_INT8_SCORES };
	const char *lv = kvmem__simd_name(kvmem__simd_active());
	struct kvmem_attend_stats st;
	unsigned int th;
	char what[96];
	int some = 0;

	for (th = 1; th <= 3; th++) {
		o.threads = th;
		memset(out, 0xff, nq * no * sizeof(float));
		ck_assert_int_eq(
			kvmem_attend_causal(s, 0, q, nq, pos0, out, &o, &st),
			0);
		ck_assert_uint_eq(st.values_erased, erased);
		if (th == 1)
			memcpy(first, out, nq * no * sizeof(float));
		else
			EXPECT(!memcmp(first, out, nq * no * sizeof(float)),
			       "%s: int8 scores, %u threads gave other bits "
			       "than one (%s)",
			       name, th, lv);
	}
	for (t = 0; t <= pos0 + nq - 1; t++)
		some |= q8_token(g, n, t);
	for (i = 0; i < nq; i++) {
		snprintf(what, sizeof(what),
			 "%s, int8 scores, query %u of %u from %u", lv, i, nq,
			 pos0);
		for (h = 0; h < nh; h++)
			qs[h] = quantize_row(q + i * no + h * D, D, q8 + h * D);
		if (!erased) {
			ref_attend_q8(g, nh, sc, q + i * no, q8, qs, dk, dv, n,
				      pos0 + i + 1, ro);
			tight_tol(g, nh, dv, pos0 + i + 1, tol);
			expect_close(first + i * no, ro, tol, no, what, name);
		}
		q8_tol(g, nh, sc, q + i * no, dk, dv, pos0 + i + 1, tol);
		for (t = 0; t < no; t++)
			ro[t] = fout[i * no + t];
		expect_close(first + i * no, ro, tol, no, what, name);
	}
	if (some)
		EXPECT(memcmp(first, fout, nq * no * sizeof(float)),
		       "%s: int8 scores gave the float scores' bits (%s)", name,
		       lv);
	free(out);
	free(first);
	free(q8);
	free(qs);
	free(ro);
	free(tol);
}

/* ---- Several queries, causal ------------------------------------------- */

/*
 * kvmem_attend_causal() on @nq queries from @pos0, against the reference
 * of each query over tokens 0 .. pos0 + i of what kvmem_seq_read() gives,
 * at every SIMD level and for 1, 2 and 3 threads (the same bits); and
 * with int8 scores at each level (check_causal_q8()).
 */
static void check_causal(struct kvmem_seq *s, const struct kvmem_geometry *g,
			 uint32_t nh, float scale, uint32_t pos0, uint32_t nq,
			 struct kvmem_rng *r, uint64_t erased, const char *name)
{
	uint32_t n = kvmem_seq_len(s, 0), D = g->head_dim, i;
	size_t row = (size_t)g->kv_heads * D, no = (size_t)nh * D;
	double sc = scale ? scale : 1 / sqrt(D);
	float *dk = kvmem_check_xmalloc(n * row * sizeof(float));
	float *dv = kvmem_check_xmalloc(n * row * sizeof(float));
	float *q = kvmem_check_xmalloc(nq * no * sizeof(float));
	float *out = kvmem_check_xmalloc(nq * no * sizeof(float));
	float *first = kvmem_check_xmalloc(nq * no * sizeof(float));
	double *ro = kvmem_check_xmalloc(no * sizeof(double));
	double *tol = kvmem_check_xmalloc(no * sizeof(double));
	struct kvmem_attend_opts o = { .n_heads = nh, .scale = scale };
	struct kvmem_attend_stats st;
	struct kvmem_page_counts pc;
	int lv, active = kvmem__simd_active();
	unsigned int th;
	char what[96];

	read_all(s, 0, n, KVMEM_ERASE_INTERPOLATE, dk, dv, &pc);
	for (i = 0; i < nq; i++)
		gen_q(r, g, nh, sc, q + i * no);
	o.importance_alpha = -1;
	for (lv = 0; lv < KVMEM__SIMD_NR; lv++) {
		if (!kvmem__simd_supported(lv))
			continue;
		ck_assert_int_eq(kvmem__simd_force(lv), 0);
		for (th = 1; th <= 3; th++) {
			o.threads = th;
			memset(out, 0xff, nq * no * sizeof(float));
			ck_assert_int_eq(kvmem_attend_causal(s, 0, q, nq, pos0,
							     out, &o, &st),
					 0);
			ck_assert_uint_eq(st.values_erased, erased);
			if (th == 1) {
				memcpy(first, out, nq * no * sizeof(float));
				continue;
			}
			EXPECT(!memcmp(first, out, nq * no * sizeof(float)),
			       "%s: %u threads gave other bits than one (%s)",
			       name, th, kvmem__simd_name(lv));
		}
		for (i = 0; i < nq; i++) {
			ref_attend(g, nh, sc, q + i * no, dk, dv, pos0 + i + 1,
				   ro, NULL);
			tight_tol(g, nh, dv, pos0 + i + 1, tol);
			snprintf(what, sizeof(what),
				 "%s, query %u of %u from %u",
				 kvmem__simd_name(lv), i, nq, pos0);
			expect_close(first + i * no, ro, tol, no, what, name);
		}
		check_causal_q8(s, g, nh, scale, pos0, nq, q, dk, dv, first,
				erased, name);
	}
	ck_assert_int_eq(kvmem__simd_force(active), 0);
	free(dk);
	free(dv);
	free(q);
	free(out);
	free(first);
	free(ro);
	free(tol);
}

/*
 * What a call counts does not depend on how it walks the layer: one query
 * goes page by page, a chunk of every token's query (rows enough for
 * attend.c's HEAD_MAJOR_STATE in the 520-token case) a KV head at a time,
 * each page's header and scales counted once either way.
 */
static void check_walk_counts(struct kvmem_seq *s,
			      const struct kvmem_geometry *g, uint32_t nh,
			      struct kvmem_rng *r, const char *name)
{
	const uint32_t n = kvmem_seq_len(s, 0);
	const size_t no = (size_t)nh * g->head_dim;
	float *q = kvmem_check_xmalloc(n * no * sizeof(float));
	float *out = kvmem_check_xmalloc(n * no * sizeof(float));
	struct kvmem_attend_opts o = { .n_heads = nh,
				       .threads = 1,
				       .importance_alpha = -1 };
	struct kvmem_attend_stats one, all;
	uint32_t i;

	for (i = 0; i < n; i++)
		gen_q(r, g, nh, 1 / sqrt(g->head_dim), q + i * no);
	ck_assert_int_eq(kvmem_attend_causal(s, 0, q + (n - 1) * no, 1, n - 1,
					     out, &o, &one),
			 0);
	ck_assert_int_eq(kvmem_attend_causal(s, 0, q, n, 0, out, &o, &all), 0);
	EXPECT_EQ(all.words_clean, one.words_clean, "%s", name);
	EXPECT_EQ(all.words_corrected, one.words_corrected, "%s", name);
	EXPECT_EQ(all.words_uncorrectable, one.words_uncorrectable, "%s", name);
	EXPECT_EQ(all.values_erased, one.values_erased, "%s", name);
	EXPECT_EQ(all.headers_uncorrectable, one.headers_uncorrectable, "%s",
		  name);
	free(q);
	free(out);
}

/*
 * Every geometry of acases, then a layer of three chunks: 520 tokens, a
 * sink page and pages of 16, are 34 pages, chunks of 16, 16 and 2; a query
 * of each token is 520 rows of 8 heads of 32, more state than
 * HEAD_MAJOR_STATE. Every call costs the square of the tokens: no more.
 */
START_TEST(test_attend_causal)
{
	const int nac = (int)(sizeof(acases) / sizeof(acases[0]));
	const struct acase longc = { "int4+h84, 520 tokens, GQA 4",
				     I4,
				     KVMEM_CODEC_H84,
				     GRP,
				     2,
				     32,
				     16,
				     16,
				     2,
				     4,
				     520,
				     0,
				     1 };
	const struct acase *ac = _i < nac ? &acases[_i] : &longc;
	struct kvmem_geometry g = kvmem_check_geo(
		1, ac->kv_heads, ac->head_dim, ac->tpp, ac->group, ac->sink,
		ac->fmt, ac->codec, ac->key_scales);
	const uint32_t n = ac->ntok, nh = ac->kv_heads * ac->mult;
	size_t all = (size_t)n * ac->kv_heads * ac->head_dim;
	float *k = kvmem_check_xmalloc(all * sizeof(float)),
	      *v = kvmem_check_xmalloc(all * sizeof(float));
	struct kvmem_cache *c = open_for(&g, n);
	struct kvmem_seq *s = NULL;
	struct kvmem_rng r;
	struct pages ps;
	uint64_t erased = 0;
	uint32_t t;

	kvmem_rng_seed(&r, 0xca05a1u + (unsigned int)_i);
	gen_kv(&r, &g, n, ac->smooth, k);
	gen_kv(&r, &g, n, ac->smooth, v);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append(s, 0, k, v, n), 0);
	/* the whole layer; to its end; the middle; the last token alone */
	check_causal(s, &g, nh, ac->scale, 0, n, &r, 0, ac->name);
	check_causal(s, &g, nh, ac->scale, n / 3, n - n / 3, &r, 0, ac->name);
	check_causal(s, &g, nh, ac->scale, 1, n / 2, &r, 0, ac->name);
	check_causal(s, &g, nh, ac->scale, n - 1, 1, &r, 0, ac->name);
	check_walk_counts(s, &g, nh, &r, ac->name);
	/* A double flip in the first K codeword of every 5th sealed token,
	 * and in a V codeword of head 1 two tokens later: rebuilt from both
	 * neighbours, the later one past some queries. */
	if (ac->codec == KVMEM_CODEC_H84 && ac->fmt == I4) {
		pages_get(&ps, s, &g, 0);
		for (t = 0; t < n; t++) {
			const struct kvmem_page_layout *lo;
			uint8_t *w = t % 5 == 0 ? row_at(&ps, 1, t, 0, &lo)
				     : t % 5 == 2 && ac->kv_heads > 1
					     ? row_at(&ps, 0, t, 1, &lo)
					     : NULL;

			if (!w || ps.pd[page_of(&ps, t)].hot)
				continue;
			w[0] ^= 0x03;
			erased++;
		}
		/* fewer tokens than a page and a tail: nothing sealed */
		if (!erased && n < ac->sink + 2 * ac->tpp)
			goto out;
		ck_assert_uint_gt(erased, 0);
		/* Four flips in the first header word of the second page
		 * (uncorrectable: golay24 detects them) and one in the first
		 * scale word of the third (corrected): counted once a page
		 * whichever way a call walks the layer. */
		if (ps.np > 2) {
			((uint8_t *)ps.pd[1].data)[0] ^= 0x0f;
			((uint8_t *)ps.pd[2]
				 .data)[(ps.pd[2].hot ? &ps.hot : &ps.sealed)
						->scales_off] ^= 0x01;
		}
		check_causal(s, &g, nh, ac->scale, 0, n, &r, erased, ac->name);
		check_causal(s, &g, nh, ac->scale, n / 2, n - n / 2, &r, erased,
			     ac->name);
		check_walk_counts(s, &g, nh, &r, ac->name);
	}
out:
	kvmem_seq_free(s);
	kvmem_close(c);
	free(k);
	free(v);
}
END_TEST

START_TEST(test_attend_causal_bad_args)
{
	struct kvmem_geometry g =
		kvmem_check_geo(1, 2, 32, 8, 16, 2, KVMEM_FMT_INT4,
				KVMEM_CODEC_H84, KVMEM_SCALES_GROUP);
	float k[5 * 64], v[5 * 64], q[3 * 8 * 32], out[3 * 8 * 32];
	struct kvmem_attend_opts o = { .n_heads = 8 };
	struct kvmem_cache *c = open_for(&g, 8);
	struct kvmem_seq *s = NULL;
	struct kvmem_rng r;
	unsigned int i;

	kvmem_rng_seed(&r, 0xbad2);
	for (i = 0; i < 5 * 64; i++) {
		k[i] = (float)urand(&r, -1, 1);
		v[i] = (float)urand(&r, -1, 1);
	}
	for (i = 0; i < 3; i++)
		gen_q(&r, &g, 8, 1 / sqrt(32), q + i * 8 * 32);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_attend_causal(s, 0, q, 1, 0, out, &o, NULL),
			 -EINVAL);
	ck_assert_int_eq(kvmem_seq_append(s, 0, k, v, 5), 0);
	ck_assert_int_eq(kvmem_attend_causal(s, 0, q, 0, 0, out, &o, NULL),
			 -EINVAL);
	ck_assert_int_eq(kvmem_attend_causal(s, 0, q, 1, 5, out, &o, NULL),
			 -EINVAL);
	ck_assert_int_eq(kvmem_attend_causal(s, 0, q, 3, 3, out, &o, NULL),
			 -EINVAL);
	ck_assert_int_eq(
		kvmem_attend_causal(s, 0, q, 2, UINT32_MAX, out, &o, NULL),
		-EINVAL);
	ck_assert_int_eq(
		kvmem_attend_causal(s, 0, q, UINT32_MAX, 1, out, &o, NULL),
		-EINVAL);
	ck_assert_int_eq(kvmem_attend_causal(s, 1, q, 1, 0, out, &o, NULL),
			 -EINVAL);
	ck_assert_int_eq(kvmem_attend_causal(NULL, 0, q, 1, 0, out, &o, NULL),
			 -EINVAL);
	o.n_heads = 3;
	ck_assert_int_eq(kvmem_attend_causal(s, 0, q, 1, 0, out, &o, NULL),
			 -EINVAL);
	o.n_heads = 8;
	o.resv[1] = 1;
	ck_assert_int_eq(kvmem_attend_causal(s, 0, q, 1, 0, out, &o, NULL),
			 -EINVAL);
	o.resv[1] = 0;
	/* query 0 at token 0 sees token 0 alone: its output is that V */
	ck_assert_int_eq(kvmem_attend_causal(s, 0, q, 3, 0, out, &o, NULL), 0);
	{
		float dk[5 * 64], dv[5 * 64];
		struct kvmem_page_counts pc;
		uint32_t h, d;

		read_all(s, 0, 5, KVMEM_ERASE_INTERPOLATE, dk, dv, &pc);
		for (h = 0; h < 8; h++)
			for (d = 0; d < 32; d++)
				EXPECT_NEAR(
					out[h * 32 + d], dv[(h / 4) * 32 + d],
					1e-6 * (1 + fabs(dv[(h / 4) * 32 + d])),
					"head %u value %u", h, d);
	}
	kvmem_seq_free(s);
	kvmem_close(c);
}
END_TEST

static void importance(struct kvmem_seq *s, uint32_t layer, float *imp, int np,
		       uint32_t nh)
{
	struct kvmem_page_desc pd[MAXP];
	int p;

	ck_assert_int_eq(kvmem_seq_pages(s, layer, pd, MAXP), np);
	for (p = 0; p < np; p++) {
		imp[p] = pd[p].importance;
		ck_assert_msg(isfinite(imp[p]) && imp[p] >= 0 && imp[p] <= nh,
			      "page %d importance %g outside [0, %u]", p,
			      (double)imp[p], nh);
	}
}

/*
 * A query aligned with the keys of one page puts (nearly) all its weight
 * there; that page's importance grows most.
 */
START_TEST(test_importance_aligned)
{
	struct kvmem_geometry g =
		kvmem_check_geo(1, 2, 32, 4, 16, 2, KVMEM_FMT_INT4,
				KVMEM_CODEC_H84, KVMEM_SCALES_GROUP);
	uint32_t n = 2 + 4 * 4 + 2, H = 2, D = 32, nh = 8, t, h, d;
	size_t row = (size_t)H * D;
	float *k = kvmem_check_xmalloc(n * row * sizeof(float)),
	      *v = kvmem_check_xmalloc(n * row * sizeof(float));
	float u[2][32], q[8 * 32], out[8 * 32], i0[MAXP], i1[MAXP];
	struct kvmem_cache *c = open_for(&g, n);
	struct kvmem_seq *s = NULL;
	struct kvmem_rng r;
	int np, p, hotp = 3; /* sink, [2,6), [6,10), [10,14): page 3 */

	kvmem_rng_seed(&r, 0x1a1);
	for (h = 0; h < H; h++) {
		double nn = 0;

		for (d = 0; d < D; d++) {
			u[h][d] = (float)urand(&r, -1, 1);
			nn += (double)u[h][d] * u[h][d];
		}
		for (d = 0; d < D; d++)
			u[h][d] = (float)(u[h][d] / sqrt(nn));
	}
	for (t = 0; t < n; t++)
		for (h = 0; h < H; h++)
			for (d = 0; d < D; d++) {
				size_t x = ((size_t)t * H + h) * D + d;

				k[x] = t >= 10 && t < 14
					       ? u[h][d] + (float)urand(&r,
									-0.02,
									0.02)
					       : (float)urand(&r, -0.1, 0.1);
				v[x] = (float)urand(&r, -1, 1);
			}
	/* score 30 on page 3, about 0 elsewhere */
	for (h = 0; h < nh; h++)
		for (d = 0; d < D; d++)
			q[h * D + d] = (float)(30 * sqrt(D) * u[h / 4][d]);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append(s, 0, k, v, n), 0);
	np = kvmem_seq_pages(s, 0, NULL, 0);
	ck_assert_int_eq(np, 6);
	importance(s, 0, i0, np, nh);
	ck_assert_int_eq(attend(s, 0, q, out, nh, 0, 0, 0, NULL), 0);
	importance(s, 0, i1, np, nh);
	for (p = 0; p < np; p++)
		if (p != hotp)
			ck_assert_msg(i1[hotp] - i0[hotp] > i1[p] - i0[p],
				      "page %d importance grew by %g, page %d "
				      "(the aligned one) by %g",
				      p, (double)(i1[p] - i0[p]), hotp,
				      (double)(i1[hotp] - i0[hotp]));
	ck_assert_float_gt(i1[hotp], i0[hotp]);
	kvmem_seq_free(s);
	kvmem_close(c);
	free(k);
	free(v);
}
END_TEST

/*
 * The moving average: new = (1 - alpha) old + alpha share, share the page's
 * softmax weight summed over the query heads (reference on the decoded
 * values); alpha 0 means 0.1, alpha < 0 changes nothing.
 */
START_TEST(test_importance_average)
{
	static const float alphas[] = { 1, 0.5f, 0, 0.25f, -1, -0.5f };
	struct kvmem_geometry g =
		kvmem_check_geo(1, 2, 32, 8, 16, 2, KVMEM_FMT_INT4,
				KVMEM_CODEC_H84, KVMEM_SCALES_GROUP);
	uint32_t n = 2 + 3 * 8 + 5, nh = 4, D = 32, t;
	size_t all = (size_t)n * 2 * D;
	float *k = kvmem_check_xmalloc(all * sizeof(float)),
	      *v = kvmem_check_xmalloc(all * sizeof(float));
	float *dk = kvmem_check_xmalloc(all * sizeof(float)),
	      *dv = kvmem_check_xmalloc(all * sizeof(float));
	double *share = kvmem_check_xmalloc(n * sizeof(double)), ro[4 * 32],
	       ps_[MAXP];
	float q[4 * 32], out[4 * 32], i0[MAXP], i1[MAXP];
	struct kvmem_page_desc pd[MAXP];
	struct kvmem_cache *c = open_for(&g, n);
	struct kvmem_page_counts pc;
	struct kvmem_seq *s = NULL;
	struct kvmem_rng r;
	unsigned int a;
	int np, p;

	kvmem_rng_seed(&r, 0x1a2);
	gen_kv(&r, &g, n, 0, k);
	gen_kv(&r, &g, n, 0, v);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append_all(s, k, v, n), 0);
	read_all(s, 0, n, KVMEM_ERASE_INTERPOLATE, dk, dv, &pc);
	np = kvmem_seq_pages(s, 0, pd, MAXP);
	ck_assert_int_eq(np, 5);
	for (a = 0; a < sizeof(alphas) / sizeof(alphas[0]); a++) {
		double al = alphas[a] ? alphas[a] : 0.1, sum = 0;

		gen_q(&r, &g, nh, 1 / sqrt(D), q);
		ref_attend(&g, nh, 1 / sqrt(D), q, dk, dv, n, ro, share);
		for (p = 0; p < np; p++) {
			ps_[p] = 0;
			for (t = pd[p].token_start;
			     t < pd[p].token_start + pd[p].ntokens; t++)
				ps_[p] += share[t];
			sum += ps_[p];
		}
		ck_assert_double_eq_tol(sum, nh, 1e-9);
		importance(s, 0, i0, np, nh);
		ck_assert_int_eq(
			attend(s, 0, q, out, nh, 0, 0, alphas[a], NULL), 0);
		importance(s, 0, i1, np, nh);
		for (p = 0; p < np; p++) {
			if (alphas[a] < 0)
				EXPECT_FEQ(i1[p], i0[p], "alpha %g page %d",
					   (double)alphas[a], p);
			else
				EXPECT_NEAR(i1[p],
					    (1 - al) * i0[p] + al * ps_[p],
					    1e-5 * nh, "alpha %g page %d",
					    (double)alphas[a], p);
		}
	}
	kvmem_seq_free(s);
	kvmem_close(c);
	free(k);
	free(v);
	free(dk);
	free(dv);
	free(share);
}
END_TEST

/*
 * Causal queries 8 .. 17 of 31 tokens, alpha 0.5: a page's new importance
 * takes half of its share averaged over the ten queries; pages past token
 * 17 are not read and keep theirs.
 */
START_TEST(test_importance_causal)
{
	struct kvmem_geometry g =
		kvmem_check_geo(1, 2, 32, 8, 16, 2, KVMEM_FMT_INT4,
				KVMEM_CODEC_H84, KVMEM_SCALES_GROUP);
	const uint32_t n = 2 + 3 * 8 + 5, nh = 4, D = 32, pos0 = 8, nq = 10;
	size_t all = (size_t)n * 2 * D;
	float *k = kvmem_check_xmalloc(all * sizeof(float)),
	      *v = kvmem_check_xmalloc(all * sizeof(float));
	float *dk = kvmem_check_xmalloc(all * sizeof(float)),
	      *dv = kvmem_check_xmalloc(all * sizeof(float));
	float *q = kvmem_check_xmalloc(nq * nh * D * sizeof(float)),
	      *out = kvmem_check_xmalloc(nq * nh * D * sizeof(float));
	double *share = kvmem_check_xmalloc(n * sizeof(double)), ro[4 * 32],
	       want[MAXP] = { 0 };
	float i0[MAXP], i1[MAXP];
	struct kvmem_attend_opts o = { .n_heads = nh,
				       .importance_alpha = 0.5f };
	struct kvmem_page_desc pd[MAXP];
	struct kvmem_cache *c = open_for(&g, n);
	struct kvmem_page_counts pc;
	struct kvmem_seq *s = NULL;
	struct kvmem_rng r;
	uint32_t i, t;
	int np, p;

	kvmem_rng_seed(&r, 0x1a3);
	gen_kv(&r, &g, n, 0, k);
	gen_kv(&r, &g, n, 0, v);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append_all(s, k, v, n), 0);
	read_all(s, 0, n, KVMEM_ERASE_INTERPOLATE, dk, dv, &pc);
	np = kvmem_seq_pages(s, 0, pd, MAXP);
	ck_assert_int_eq(np, 5);
	/* some importance to start from, by a plain call */
	gen_q(&r, &g, nh, 1 / sqrt(D), q);
	ck_assert_int_eq(attend(s, 0, q, out, nh, 0, 0, 1, NULL), 0);
	for (i = 0; i < nq; i++) {
		gen_q(&r, &g, nh, 1 / sqrt(D), q + i * nh * D);
		ref_attend(&g, nh, 1 / sqrt(D), q + i * nh * D, dk, dv,
			   pos0 + i + 1, ro, share);
		for (p = 0; p < np; p++)
			for (t = pd[p].token_start;
			     t < pd[p].token_start + pd[p].ntokens &&
			     t <= pos0 + i;
			     t++)
				want[p] += share[t] / nq;
	}
	importance(s, 0, i0, np, nh);
	ck_assert_int_eq(kvmem_attend_causal(s, 0, q, nq, pos0, out, &o, NULL),
			 0);
	importance(s, 0, i1, np, nh);
	for (p = 0; p < np; p++)
		if (pd[p].token_start > pos0 + nq - 1)
			EXPECT_FEQ(i1[p], i0[p], "page %d, not read", p);
		else
			EXPECT_NEAR(i1[p], 0.5 * i0[p] + 0.5 * want[p],
				    1e-5 * nh, "page %d", p);
	kvmem_seq_free(s);
	kvmem_close(c);
	free(k);
	free(v);
	free(dk);
	free(dv);
	free(q);
	free(out);
	free(share);
}
END_TEST

/* ---- Kernels ------------------------------------------------------------- */

/*
 * golay_nibbles at every SIMD level, for 1 .. 200 values: value 3w + k is
 * bits 4k .. 4k + 3 of word w's data, d0..d7 in its first byte and
 * d8..d11 in the low nibble of its second. The words end at a page that
 * cannot be read, so a kernel that reads past @code_bytes faults.
 */
START_TEST(test_kernel_golay_nibbles)
{
	struct kvmem_check_guarded g;
	uint8_t *end = kvmem_check_guard_alloc(&g, 201) + 201;
	uint8_t out[256], want[256];
	int lv, active = kvmem__simd_active();
	unsigned int nvals, i;
	struct kvmem_rng r;

	kvmem_rng_seed(&r, 0x601a);
	for (nvals = 1; nvals <= 200; nvals++) {
		size_t bytes = (nvals + 2) / 3 * 3;
		uint8_t *code = end - bytes;

		for (i = 0; i < bytes; i++)
			code[i] = (uint8_t)kvmem_rng_next(&r);
		for (i = 0; i < nvals; i++) {
			const uint8_t *w = code + i / 3 * 3;
			unsigned int d = w[0] | (w[1] & 0xfu) << 8;

			want[i] = (uint8_t)(d >> (4 * (i % 3)) & 0xf);
		}
		for (lv = 0; lv < KVMEM__SIMD_NR; lv++) {
			if (!kvmem__simd_supported(lv))
				continue;
			ck_assert_int_eq(kvmem__simd_force(lv), 0);
			memset(out, 0xee, sizeof(out));
			kvmem__attn()->golay_nibbles(code, bytes, nvals, out);
			EXPECT_MEM(out, want, nvals, "%u values, %s", nvals,
				   kvmem__simd_name(lv));
		}
	}
	ck_assert_int_eq(kvmem__simd_force(active), 0);
	kvmem_check_guard_free(&g);
}
END_TEST

/*
 * lm3_codes at every SIMD level, for 1 .. 300 codes: code i is bits 3i ..
 * 3i + 2 of the stream of the words' low nibbles, read here bit by bit
 * (the high nibbles are parity, random here, and must not show). The words
 * end at a page that cannot be read, so a kernel that reads past
 * @code_bytes faults.
 */
START_TEST(test_kernel_lm3_codes)
{
	struct kvmem_check_guarded g;
	uint8_t *end = kvmem_check_guard_alloc(&g, 225) + 225;
	uint8_t out[320], want[320];
	int lv, active = kvmem__simd_active();
	unsigned int nvals, i, b;
	struct kvmem_rng r;

	kvmem_rng_seed(&r, 0x1a3c);
	for (nvals = 1; nvals <= 300; nvals++) {
		size_t bytes = (3 * nvals + 3) / 4;
		uint8_t *code = end - bytes;

		for (i = 0; i < bytes; i++)
			code[i] = (uint8_t)kvmem_rng_next(&r);
		for (i = 0; i < nvals; i++)
			for (want[i] = 0, b = 0; b < 3; b++)
				want[i] |=
					(uint8_t)((code[(3 * i + b) / 4] >>
							   ((3 * i + b) % 4) &
						   1)
						  << b);
		for (lv = 0; lv < KVMEM__SIMD_NR; lv++) {
			if (!kvmem__simd_supported(lv))
				continue;
			ck_assert_int_eq(kvmem__simd_force(lv), 0);
			memset(out, 0xee, sizeof(out));
			kvmem__attn()->lm3_codes(code, bytes, nvals, out);
			EXPECT_MEM(out, want, nvals, "%u codes, %s", nvals,
				   kvmem__simd_name(lv));
			ck_assert_msg(out[nvals] == 0xee,
				      "%u codes, %s: wrote past the last",
				      nvals, kvmem__simd_name(lv));
		}
	}
	ck_assert_int_eq(kvmem__simd_force(active), 0);
	kvmem_check_guard_free(&g);
}
END_TEST

/*
 * fp8_nan at every SIMD level, for 0 .. 300 codes: none found among codes
 * that are not NaN (every other code, those one bit from it included),
 * and either NaN code (0x7f, 0xff) found wherever it is, the first, the
 * last, one past the vector steps. The codes end at a page that cannot be
 * read, so a kernel that reads past @n faults; a NaN code just past @n
 * must not count.
 */
START_TEST(test_kernel_fp8_nan)
{
	struct kvmem_check_guarded g;
	uint8_t *end = kvmem_check_guard_alloc(&g, 300) + 300;
	int lv, active = kvmem__simd_active();
	unsigned int n, i, at;
	struct kvmem_rng r;

	kvmem_rng_seed(&r, 0xf8a);
	for (n = 0; n <= 300; n++) {
		uint8_t *c = end - n;

		/* Any code but the two NaN ones, near misses often. */
		for (i = 0; i < n; i++) {
			uint8_t x = (uint8_t)kvmem_rng_next(&r);

			if (i % 3 == 0)
				x = (uint8_t)((x & 0x80) |
					      (0x7f ^ (1u << (x % 7))));
			c[i] = (x & 0x7f) == 0x7f ? x ^ 1 : x;
		}
		for (at = 0; at <= n; at++) {
			const uint8_t keep = at < n ? c[at] : 0;

			if (at < n)
				c[at] = at % 2 ? 0xff : 0x7f;
			for (lv = 0; lv < KVMEM__SIMD_NR; lv++) {
				if (!kvmem__simd_supported(lv))
					continue;
				ck_assert_int_eq(kvmem__simd_force(lv), 0);
				ck_assert_msg(kvmem__attn()->fp8_nan(c, n) ==
						      (at < n),
					      "%u codes, NaN at %u, %s", n, at,
					      kvmem__simd_name(lv));
				if (n)
					ck_assert_msg(
						!kvmem__attn()->fp8_nan(c, at),
						"%u codes: code %u counted, %s",
						at, at, kvmem__simd_name(lv));
			}
			if (at < n)
				c[at] = keep;
		}
	}
	ck_assert_int_eq(kvmem__simd_force(active), 0);
	kvmem_check_guard_free(&g);
}
END_TEST

/* ---- Bad arguments ------------------------------------------------------- */

START_TEST(test_attend_bad_args)
{
	struct kvmem_geometry g =
		kvmem_check_geo(2, 2, 32, 8, 16, 2, KVMEM_FMT_INT4,
				KVMEM_CODEC_H84, KVMEM_SCALES_GROUP);
	float k[5 * 64], v[5 * 64], q[8 * 32], out[8 * 32];
	struct kvmem_cache *c = open_for(&g, 8);
	struct kvmem_seq *s = NULL;
	struct kvmem_rng r;
	unsigned int i;

	kvmem_rng_seed(&r, 0xbad);
	for (i = 0; i < 5 * 64; i++) {
		k[i] = (float)urand(&r, -1, 1);
		v[i] = (float)urand(&r, -1, 1);
	}
	gen_q(&r, &g, 8, 1 / sqrt(32), q);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	/* both layers empty */
	ck_assert_int_eq(attend(s, 0, q, out, 4, 0, 0, -1, NULL), -EINVAL);
	ck_assert_int_eq(kvmem_seq_append(s, 0, k, v, 5), 0);
	ck_assert_int_eq(attend(s, 0, q, out, 4, 0, 0, -1, NULL), 0);
	/* layer 1 empty, layer 2 none */
	ck_assert_int_eq(attend(s, 1, q, out, 4, 0, 0, -1, NULL), -EINVAL);
	ck_assert_int_eq(attend(s, 2, q, out, 4, 0, 0, -1, NULL), -EINVAL);
	ck_assert_int_eq(attend(s, UINT32_MAX, q, out, 4, 0, 0, -1, NULL),
			 -EINVAL);
	/* n_heads not a multiple of kv_heads */
	ck_assert_int_eq(attend(s, 0, q, out, 3, 0, 0, -1, NULL), -EINVAL);
	ck_assert_int_eq(attend(s, 0, q, out, 1, 0, 0, -1, NULL), -EINVAL);
	ck_assert_int_eq(attend(s, 0, q, out, 5, 0, 0, -1, NULL), -EINVAL);
	/* one token: attention is that token's V */
	ck_assert_int_eq(kvmem_seq_append(s, 1, k, v, 0), 0);
	ck_assert_uint_eq(kvmem_seq_len(s, 1), 0);
	ck_assert_int_eq(kvmem_seq_append(s, 1, k, v, 1), 0);
	check_tight(s, &g, 1, 4, &r, "one token");
	/* the valid ones still work */
	ck_assert_int_eq(attend(s, 0, q, out, 2, 0, 0, -1, NULL), 0);
	ck_assert_int_eq(
		attend(s, 0, q, out, 8, KVMEM_ERASE_KEEP, 0.5f, -1, NULL), 0);
	kvmem_seq_free(s);
	kvmem_close(c);
}
END_TEST

/* Scratch of test_kernel_scores_q8(): up to 9 rows, 512 values, 64
 * tokens. */
struct q8k {
	struct kvmem_check_guarded g;
	uint8_t *end; /* rows end here, at a guard page */
	int8_t q8[9 * 512];
	int32_t qsum[9 * 16];
	float qs[9], sc[64 * 64], want[9 * 80], got[9 * 80];
};

/* The scratch, its rows' room ending at a guard page. */
static struct q8k *q8k_new(void)
{
	const size_t span = 16 * (size_t)sysconf(_SC_PAGESIZE);
	struct q8k *x = kvmem_check_xmalloc(sizeof(*x));

	x->end = kvmem_check_guard_alloc(&x->g, span) + span;
	return x;
}

static void q8k_free(struct q8k *x)
{
	kvmem_check_guard_free(&x->g);
	free(x);
}

/*
 * One shape of test_kernel_scores_q8(); with @edge, every value at its
 * largest (int4 7, u = 15, with any high bits; int8 -128) against q of
 * +-127: the largest sums the 16-bit steps of the vector kernel meet.
 */
static void check_scores_q8(struct q8k *x, struct kvmem_rng *r, unsigned int D,
			    unsigned int grp, unsigned int ng, unsigned int n,
			    int i8, int edge)
{
	const size_t stride = D + 3;
	const unsigned int ld = n + 5;
	const float scale = 0.125f;
	uint8_t *code = x->end - (n - 1) * stride - D;
	const int32_t *qsum = D % 32 ? NULL : x->qsum;
	unsigned int j, t, d;
	int lv;

	for (d = 0; d < (n - 1) * stride + D; d++)
		code[d] = (uint8_t)kvmem_rng_next(r);
	for (d = 0; edge && d < (n - 1) * stride + D; d++)
		code[d] = i8 ? 0x80 : (code[d] & 0xf0) | 0x07;
	memset(x->qsum, 0, sizeof(x->qsum));
	for (j = 0; j < ng; j++) {
		x->qs[j] = (float)urand(r, 1e-3, 1);
		for (d = 0; d < D; d++) {
			x->q8[j * D + d] =
				edge ? (j % 2 ? -127 : 127)
				     : (int8_t)(kvmem_rng_next(r) % 255 - 127);
			if (qsum)
				x->qsum[j * (D / 32) + d / 32] +=
					x->q8[j * D + d];
		}
	}
	for (t = 0; t < n * (D / grp); t++)
		x->sc[t] = (float)urand(r, 0.01, 2);
	memset(x->want, 0xee, sizeof(x->want));
	kvmem__attn_portable.scores_q8(x->q8, x->qs, qsum, ng, code, stride, n,
				       D, grp, x->sc, D / grp, scale, x->want,
				       ld, i8);
	for (j = 0; j < ng; j++)
		for (t = 0; t < n; t++) {
			double e = 0, mag = 0;

			for (d = 0; d < D; d++) {
				uint8_t c = code[t * stride + d];
				int v = i8 ? (int8_t)c : ((c & 0xf) ^ 8) - 8;
				double w = x->sc[t * (D / grp) + d / grp];

				e += w * x->q8[j * D + d] * v;
				mag += w * abs(x->q8[j * D + d] * v);
			}
			e *= (double)scale * x->qs[j];
			mag *= (double)scale * x->qs[j];
			EXPECT_NEAR(x->want[j * ld + t], e, 1e-6 * mag,
				    "dim %u group %u, %s, row %u of %u, token "
				    "%u of %u",
				    D, grp, i8 ? "int8" : "int4", j, ng, t, n);
		}
	for (lv = 0; lv < KVMEM__SIMD_NR; lv++) {
		if (!kvmem__simd_supported(lv))
			continue;
		ck_assert_int_eq(kvmem__simd_force(lv), 0);
		memset(x->got, 0xee, sizeof(x->got));
		kvmem__attn()->scores_q8(x->q8, x->qs, qsum, ng, code, stride,
					 n, D, grp, x->sc, D / grp, scale,
					 x->got, ld, i8);
		EXPECT_MEM(x->got, x->want, sizeof(x->got),
			   "dim %u group %u, %s, %u rows, %u tokens, %s", D,
			   grp, i8 ? "int8" : "int4", ng, n,
			   kvmem__simd_name(lv));
	}
}

/*
 * scores_q8 at every SIMD level against the portable kernel (the same
 * bits, as internal.h says) and the portable kernel against a sum in
 * double, for head dims, groups, query rows and tokens on both sides of
 * the vector kernel's blocks (eight tokens, pairs of rows, 32 values, at
 * most 256 of them); any byte in a row (the int4 reader hands over whole
 * codewords; int8 -128 included), and the largest sums; the last row ends
 * at a guard page.
 */
START_TEST(test_kernel_scores_q8)
{
	static const unsigned int shapes[][2] = {
		{ 32, 32 },   { 64, 32 },  { 64, 16 }, { 128, 32 }, { 128, 64 },
		{ 128, 128 }, { 256, 32 }, { 96, 32 }, { 512, 32 }, { 40, 8 },
	};
	static const unsigned int ngs[] = { 1, 2, 3, 4, 5, 8, 9 };
	static const unsigned int ns[] = { 1, 7, 8, 9, 16, 31, 33, 64 };
	struct q8k *x = q8k_new();
	int active = kvmem__simd_active();
	unsigned int si, i8, a, b;
	struct kvmem_rng r;

	kvmem_rng_seed(&r, 0x5c08);
	for (si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
		for (i8 = 0; i8 < 2; i8++)
			for (a = 0; a < sizeof(ngs) / sizeof(ngs[0]); a++)
				for (b = 0; b < sizeof(ns) / sizeof(ns[0]); b++)
					check_scores_q8(x, &r, shapes[si][0],
							shapes[si][1], ngs[a],
							ns[b], (int)i8, 0);
	for (si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
		for (i8 = 0; i8 < 2; i8++)
			check_scores_q8(x, &r, shapes[si][0], shapes[si][1], 4,
					16, (int)i8, 1);
	ck_assert_int_eq(kvmem__simd_force(active), 0);
	q8k_free(x);
}
END_TEST

/* Value @c of a row of bytes of @fmt, as kvmem.h says it: an int8 value,
 * or the E4M3 number of the code. */
static double b8_value(int fmt, uint8_t c)
{
	if (fmt == KVMEM_FMT_INT8)
		return (int8_t)c;
	return ldexp((c & 0x78) ? 8 + (c & 7) : (c & 7),
		     ((c & 0x78) ? (c >> 3 & 15) : 1) - 10) *
	       (c & 0x80 ? -1 : 1);
}

/*
 * One shape of test_kernel_b8(): @n rows of @D bytes of @fmt, scales per
 * @grp values (0: one a channel, the same for every row), the last row
 * ending at a guard page.
 */
static void check_b8(struct q8k *x, struct kvmem_rng *r, int fmt,
		     unsigned int D, unsigned int grp, unsigned int ng,
		     unsigned int n)
{
	const size_t stride = D + 5;
	const unsigned int ld = n + 3, per = grp ? D / grp : D;
	const size_t sstride = grp ? per : 0;
	const float scale = 0.25f;
	uint8_t *code = x->end - (n - 1) * stride - D;
	float q[9 * 512], p[9 * 80], acc0[9 * 512], acc[9 * 512];
	unsigned int j, t, d;
	int lv;

	for (d = 0; d < (n - 1) * stride + D; d++) {
		code[d] = (uint8_t)kvmem_rng_next(r);
		/* No encoder writes the NaN code; the reader hands no row
		 * that has one to these kernels. */
		if (fmt == KVMEM_FMT_FP8 && (code[d] & 0x7f) == 0x7f)
			code[d] ^= 1;
	}
	for (j = 0; j < ng * D; j++)
		q[j] = (float)urand(r, -1, 1);
	for (j = 0; j < ng * ld; j++)
		p[j] = (float)urand(r, 0, 1);
	for (j = 0; j < ng * D; j++)
		acc0[j] = (float)urand(r, -1, 1);
	for (t = 0; t < (grp ? n : 1) * per; t++)
		x->sc[t] = (float)urand(r, 0.01, 2);
	for (lv = 0; lv < KVMEM__SIMD_NR; lv++) {
		if (!kvmem__simd_supported(lv))
			continue;
		ck_assert_int_eq(kvmem__simd_force(lv), 0);
		memset(x->got, 0xee, sizeof(x->got));
		kvmem__attn()->scores_b8(q, ng, code, stride, n, D,
					 grp ? grp : 1, x->sc, sstride, scale,
					 x->got, ld, fmt);
		memcpy(acc, acc0, sizeof(acc));
		kvmem__attn()->accum_b8(p, ng, code, stride, n, D,
					grp ? grp : 1, x->sc, sstride, acc, ld,
					fmt);
		for (j = 0; j < ng; j++) {
			for (t = 0; t < n; t++) {
				double e = 0, mag = 0;

				for (d = 0; d < D; d++) {
					double v =
						b8_value(fmt,
							 code[t * stride + d]) *
						x->sc[t * sstride +
						      d / (grp ? grp : 1)];

					e += q[j * D + d] * v;
					mag += fabs(q[j * D + d] * v);
				}
				EXPECT_NEAR(x->got[j * ld + t], scale * e,
					    1e-5 * scale * mag + 1e-30,
					    "%s dim %u group %u, %s: score of "
					    "row %u of %u, token %u of %u",
					    fmt == KVMEM_FMT_FP8 ? "fp8"
								 : "int8",
					    D, grp, kvmem__simd_name(lv), j, ng,
					    t, n);
			}
			for (d = 0; d < D; d++) {
				double e = acc0[j * D + d], mag = fabs(e);

				for (t = 0; t < n; t++) {
					double v =
						p[j * ld + t] *
						b8_value(fmt,
							 code[t * stride + d]) *
						x->sc[t * sstride +
						      d / (grp ? grp : 1)];

					e += v;
					mag += fabs(v);
				}
				EXPECT_NEAR(
					acc[j * D + d], e, 1e-5 * mag,
					"%s dim %u group %u, %s: sum of "
					"row %u of %u, value %u",
					fmt == KVMEM_FMT_FP8 ? "fp8" : "int8",
					D, grp, kvmem__simd_name(lv), j, ng, d);
			}
		}
	}
}

/*
 * scores_b8 and accum_b8, the kernels of rows a value a byte, at every
 * SIMD level against sums in double of the values kvmem.h defines (int8;
 * E4M3 worked out here from its bits, subnormals and both signs of zero
 * included, every code but NaN): head dims and groups that the vector
 * kernels take and that they leave to the portable one, channel scales,
 * query rows and tokens on both sides of their blocks; the last row ends
 * at a guard page.
 */
START_TEST(test_kernel_b8)
{
	static const unsigned int shapes[][2] = {
		{ 32, 32 }, { 64, 32 }, { 128, 32 }, { 128, 64 }, { 256, 128 },
		{ 64, 0 },  { 128, 0 }, { 96, 32 },  { 40, 8 },	  { 24, 0 },
	};
	static const unsigned int ngs[] = { 1, 4, 5, 8, 9 };
	static const unsigned int ns[] = { 1, 7, 16, 33, 64 };
	static const int fmts[] = { KVMEM_FMT_INT8, KVMEM_FMT_FP8 };
	struct q8k *x = q8k_new();
	int active = kvmem__simd_active();
	unsigned int si, f, a, b;
	struct kvmem_rng r;

	kvmem_rng_seed(&r, 0xb8b8);
	/* The reference's E4M3 against the library's, every code. */
	for (a = 0; a < 256; a++)
		if ((a & 0x7f) != 0x7f)
			ck_assert_double_eq(b8_value(KVMEM_FMT_FP8, (uint8_t)a),
					    kvmem_e4m3_to_float(a));
	ck_assert_double_eq(b8_value(KVMEM_FMT_FP8, 0x7e), 448.0);
	ck_assert_double_eq(b8_value(KVMEM_FMT_FP8, 0x01), ldexp(1, -9));
	for (f = 0; f < 2; f++)
		for (si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
			for (a = 0; a < sizeof(ngs) / sizeof(ngs[0]); a++)
				for (b = 0; b < sizeof(ns) / sizeof(ns[0]); b++)
					check_b8(x, &r, fmts[f], shapes[si][0],
						 shapes[si][1], ngs[a], ns[b]);
	ck_assert_int_eq(kvmem__simd_force(active), 0);
	q8k_free(x);
}
END_TEST

/*
 * A batch with int8 scores, one of its sequences' queries not finite (its
 * job keeps the float scores, the others do not): the same bits as a call
 * for each sequence.
 */
static void check_batch_q8(struct kvmem_cache *c, struct kvmem_seq *s,
			   const struct kvmem_geometry *g, struct kvmem_rng *r)
{
	const uint32_t nh = 8, D = g->head_dim, no = nh * D;
	float *kv = kvmem_check_xmalloc(30 * 2 * D * sizeof(float));
	float *q = kvmem_check_xmalloc(3 * no * sizeof(float));
	float *out = kvmem_check_xmalloc(3 * no * sizeof(float));
	float *one = kvmem_check_xmalloc(no * sizeof(float));
	struct kvmem_attend_opts o = { .n_heads = nh,
				       .importance_alpha = -1,
				       .threads = 2,
				       .flags = KVMEM_ATTEND_INT8_SCORES };
	struct kvmem_seq *seqs[3] = { s, NULL, NULL };
	uint32_t i;

	gen_kv(r, g, 30, 0, kv);
	ck_assert_int_eq(kvmem_seq_fork(s, &seqs[1]), 0);
	ck_assert_int_eq(kvmem_seq_append(seqs[1], 0, kv, kv, 30), 0);
	ck_assert_int_eq(kvmem_seq_create(c, &seqs[2]), 0);
	ck_assert_int_eq(kvmem_seq_append(seqs[2], 0, kv, kv, 30), 0);
	for (i = 0; i < 3; i++)
		gen_q(r, g, nh, 1 / sqrt(D), q + i * no);
	q[no + 3 * D + 1] = NAN;
	ck_assert_int_eq(kvmem_attend_batch(seqs, 3, 0, q, out, &o, NULL), 0);
	o.threads = 1;
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(
			kvmem_attend(seqs[i], 0, q + i * no, one, &o, NULL), 0);
		ck_assert_msg(!memcmp(one, out + i * no, no * sizeof(float)),
			      "sequence %u of the batch", i);
	}
	kvmem_seq_free(seqs[1]);
	kvmem_seq_free(seqs[2]);
	free(kv);
	free(q);
	free(out);
	free(one);
}

/*
 * Int8 scores at the edges: a query row of zeros scores 0 on every token
 * either way, so its outputs are the float call's bits; a row that is not
 * finite, or whose largest |q| m makes m / 127 subnormal, leaves the whole
 * call to the float scores (the same bits); unknown flags are refused.
 */
START_TEST(test_attend_q8_edges)
{
	struct kvmem_geometry g =
		kvmem_check_geo(1, 2, 64, 8, 32, 2, KVMEM_FMT_INT4,
				KVMEM_CODEC_H84, KVMEM_SCALES_GROUP);
	const uint32_t nh = 8, D = 64, n = 45;
	float *k = kvmem_check_xmalloc(n * 2 * D * sizeof(float));
	float *v = kvmem_check_xmalloc(n * 2 * D * sizeof(float));
	float q[8 * 64], f[8 * 64], i8[8 * 64];
	struct kvmem_attend_opts o = { .n_heads = 8, .importance_alpha = -1 };
	struct kvmem_cache *c = open_for(&g, n);
	struct kvmem_seq *s = NULL;
	struct kvmem_rng r;
	const float bad[] = { NAN, INFINITY, -INFINITY };
	unsigned int i, b;

	kvmem_rng_seed(&r, 0x98);
	gen_kv(&r, &g, n, 0, k);
	gen_kv(&r, &g, n, 0, v);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append(s, 0, k, v, n), 0);
	gen_q(&r, &g, nh, 1 / sqrt(D), q);
	memset(q + 2 * D, 0, D * sizeof(float));
	ck_assert_int_eq(kvmem_attend(s, 0, q, f, &o, NULL), 0);
	o.flags = KVMEM_ATTEND_INT8_SCORES;
	ck_assert_int_eq(kvmem_attend(s, 0, q, i8, &o, NULL), 0);
	ck_assert(!memcmp(f + 2 * D, i8 + 2 * D, D * sizeof(float)));
	ck_assert(memcmp(f, i8, D * sizeof(float)));
	for (b = 0; b < 3; b++) {
		q[5 * D + 7] = bad[b];
		o.flags = 0;
		ck_assert_int_eq(kvmem_attend(s, 0, q, f, &o, NULL), 0);
		o.flags = KVMEM_ATTEND_INT8_SCORES;
		ck_assert_int_eq(kvmem_attend(s, 0, q, i8, &o, NULL), 0);
		ck_assert_msg(!memcmp(f, i8, sizeof(f)), "q holds %g", bad[b]);
	}
	gen_q(&r, &g, nh, 1 / sqrt(D), q);
	for (i = 0; i < D; i++)
		q[3 * D + i] = FLT_MIN * (float)i / 2.0f;
	o.flags = 0;
	ck_assert_int_eq(kvmem_attend(s, 0, q, f, &o, NULL), 0);
	o.flags = KVMEM_ATTEND_INT8_SCORES;
	ck_assert_int_eq(kvmem_attend(s, 0, q, i8, &o, NULL), 0);
	ck_assert(!memcmp(f, i8, sizeof(f)));
	for (b = 1; b < 32; b++) {
		o.flags = KVMEM_ATTEND_INT8_SCORES | 1u << b;
		ck_assert_int_eq(kvmem_attend(s, 0, q, i8, &o, NULL), -EINVAL);
		ck_assert_int_eq(
			kvmem_attend_causal(s, 0, q, 1, n - 1, i8, &o, NULL),
			-EINVAL);
	}
	check_batch_q8(c, s, &g, &r);
	kvmem_seq_free(s);
	kvmem_close(c);
	free(k);
	free(v);
}
END_TEST

KVMEM_SUITE(attend)
{
	Suite *s = suite_create("attend");
	TCase *tc = tcase_create("reference");
	TCase *te = tcase_create("errors");
	TCase *ti = tcase_create("importance");
	TCase *tq = tcase_create("causal");

	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_attend_ref, 0,
			    (int)(sizeof(acases) / sizeof(acases[0])));
	tcase_add_loop_test(tc, test_attend_realistic, 0, 2);
	tcase_add_loop_test(tc, test_attend_fp8_same_bits, 0,
			    (int)(sizeof(fp8_shapes) / sizeof(fp8_shapes[0])));
	tcase_add_test(tc, test_attend_fork_truncate);
	suite_add_tcase(s, tc);

	tcase_set_timeout(te, 60);
	tcase_add_loop_test(te, test_attend_correctable, 0,
			    (int)(sizeof(icases) / sizeof(icases[0])));
	tcase_add_loop_test(te, test_attend_erasure, 0,
			    (int)(sizeof(ecases) / sizeof(ecases[0])));
	tcase_add_test(te, test_attend_i8_erasure);
	suite_add_tcase(s, te);

	tcase_set_timeout(tq, 120);
	tcase_add_loop_test(tq, test_attend_causal, 0,
			    (int)(sizeof(acases) / sizeof(acases[0])) + 1);
	tcase_add_test(tq, test_attend_causal_bad_args);
	suite_add_tcase(s, tq);

	tcase_add_test(ti, test_importance_aligned);
	tcase_add_test(ti, test_importance_average);
	tcase_add_test(ti, test_importance_causal);
	tcase_add_test(ti, test_attend_bad_args);
	tcase_add_test(ti, test_kernel_golay_nibbles);
	tcase_add_test(ti, test_kernel_lm3_codes);
	tcase_add_test(ti, test_kernel_fp8_nan);
	tcase_add_test(ti, test_attend_q8_edges);
	tcase_add_test(ti, test_kernel_scores_q8);
	tcase_add_test(ti, test_kernel_b8);
	suite_add_tcase(s, ti);
	return s;
}
