/* SPDX-License-Identifier: MIT */
/*
 * check_rotate.c - the geometry's Hadamard rotation (kvmem/page.h)
 *
 * The rotation is written here as the dense matrix page.h defines, in
 * double: R[i][j] = (-1)^popcount(i & j) s_j / sqrt(D). Against it: the
 * library's fast transform and its inverse; pages of a rotating geometry
 * (what is stored is R x quantized, what kvmem_page_decode() gives back is
 * R^T of that, and an erased value erases its whole row); a sequence read
 * back within the quantizer's bound carried through R^T; and attention,
 * which rotates the query and its output instead of the rows, against a
 * float64 reference over what kvmem_seq_read() gives back, the same bits
 * on every SIMD level, with erased values rebuilt and pages archived to
 * another format.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvmem/kvmem.h"
#include "attend_ref.h"
#include "kvmem_check.h"
#include "quant_ref.h"
#include "rng.h"

/* s_j of page.h. */
static double sign_of(uint32_t j)
{
	return (uint32_t)(j * 2654435761u) >> 16 & 1 ? -1 : 1;
}

/* y = R x, or R^T x with @inverse, by the dense matrix. */
static void dense_rotate(const double *x, uint32_t D, int inverse, double *y)
{
	uint32_t i, j;

	for (i = 0; i < D; i++) {
		double sum = 0;

		for (j = 0; j < D; j++) {
			double h = __builtin_popcount(i & j) & 1 ? -1 : 1;

			sum += h * x[j] * (inverse ? 1 : sign_of(j));
		}
		y[i] = sum / sqrt(D) * (inverse ? sign_of(i) : 1);
	}
}

static double norm(const double *x, uint32_t D)
{
	double s = 0;
	uint32_t i;

	for (i = 0; i < D; i++)
		s += x[i] * x[i];
	return sqrt(s);
}

START_TEST(test_rotate_dense)
{
	double x[1024], want[1024], back[1024];
	float f[1024];
	struct kvmem_rng r;
	uint32_t D, i;
	int inverse;

	kvmem_rng_seed(&r, 0x40ad);
	for (D = 1; D <= 1024; D *= 2)
		for (inverse = 0; inverse < 2; inverse++) {
			double tol;

			for (i = 0; i < D; i++) {
				f[i] = kvmem_check_rnd_value(&r, 1.0);
				x[i] = f[i];
			}
			tol = 1e-6 * (1 + log2(D)) * norm(x, D);
			dense_rotate(x, D, inverse, want);
			kvmem__rotate(f, D, inverse);
			for (i = 0; i < D; i++)
				EXPECT_NEAR(f[i], want[i], tol,
					    "D %u %s: value %u", D,
					    inverse ? "inverse" : "forward", i);
			/* and back: an orthonormal map */
			EXPECT_NEAR(norm(want, D), norm(x, D),
				    1e-12 * norm(x, D), "D %u: norm", D);
			dense_rotate(want, D, !inverse, back);
			for (i = 0; i < D; i++)
				EXPECT_NEAR(back[i], x[i], 1e-12 * norm(x, D),
					    "D %u: round trip %u", D, i);
		}
}
END_TEST

/*
 * How far stored value c of a rotated row @rx ([D], in double) may be
 * from it: an FP16 step in a hot page; in a sealed page the format's bound
 * with the scale of its group (the lm formats: the FP16 of the RMS;
 * int4 and int2: the smallest FP16 >= amax / qmax), plus the float
 * transform's error.
 */
static double stored_bound(const struct kvmem_geometry *g, int hot,
			   const double *rx, uint32_t c)
{
	const uint32_t G = g->group_size, c0 = c / G * G;
	double ss = 0, amax = 0, s, slack = 1e-5 * norm(rx, g->head_dim);
	uint32_t j;

	if (hot)
		return fabs(rx[c]) * 0x1p-11 + 0x1p-25 + slack;
	for (j = c0; j < c0 + G; j++) {
		ss += rx[j] * rx[j];
		amax = fmax(amax, fabs(rx[j]));
	}
	if (!ref_is_lm(g->format)) {
		s = ref_h2f(ref_half_ceil(amax * (1 + 1e-5) /
					  ref_fmts[g->format].qmax));
		return s / 2 + 2 * slack;
	}
	s = sqrt(ss / G);
	/* The scale is the FP16 nearest s, and s moves with the slack: the
	 * bound is largest at one end (a wider step, or more clipped). */
	return fmax(ref_lm_bound(g->format, rx[c], (s + slack) * (1 + 0x1p-10)),
		    ref_lm_bound(g->format, rx[c],
				 fmax(s - slack, 0) * (1 - 0x1p-10))) +
	       2 * slack;
}

/*
 * How far a whole row may read back from the row whose rotation is @rx:
 * the L2 norm of stored_bound()'s bounds, which R^T carries over as it is.
 */
static double row_bound(const struct kvmem_geometry *g, int hot,
			const double *rx)
{
	double e2 = 0, b;
	uint32_t c;

	for (c = 0; c < g->head_dim; c++) {
		b = stored_bound(g, hot, rx, c);
		e2 += b * b;
	}
	return sqrt(e2);
}

/* The L2 distance of the @n values at @got from @want. */
static double row_error(const float *got, const double *want, uint32_t n)
{
	double err = 0;
	uint32_t c;

	for (c = 0; c < n; c++)
		err += (got[c] - want[c]) * (got[c] - want[c]);
	return sqrt(err);
}

struct pcase {
	const char *name;
	int fmt, codec;
};

static const struct pcase pcases[] = {
	{ "lm4+h84", KVMEM_FMT_LM4, KVMEM_CODEC_H84 },
	{ "lm3+golay24", KVMEM_FMT_LM3, KVMEM_CODEC_GOLAY24 },
	{ "lm2+secded72", KVMEM_FMT_LM2, KVMEM_CODEC_SECDED72 },
	{ "lm2+h84", KVMEM_FMT_LM2, KVMEM_CODEC_H84 },
	{ "int2+h84", KVMEM_FMT_INT2, KVMEM_CODEC_H84 },
	{ "int4+h74", KVMEM_FMT_INT4, KVMEM_CODEC_H74 },
};

static struct kvmem_geometry rot_geo(const struct pcase *pc, uint32_t layers)
{
	struct kvmem_geometry g =
		kvmem_check_geo(layers, 2, 64, 16, 32, 2, pc->fmt, pc->codec,
				KVMEM_SCALES_GROUP);

	g.rotation = KVMEM_ROTATE_HADAMARD;
	ck_assert_int_eq(kvmem_geometry_check(&g), 0);
	return g;
}

/*
 * A page of each kind: what is stored is R x within the format's bound;
 * what kvmem_page_decode() gives is R^T of what is stored, so within the
 * bound carried through R^T (the L2 norm of a row's bounds).
 */
START_TEST(test_rotate_page)
{
	const struct pcase *pc = &pcases[_i];
	struct kvmem_geometry g = rot_geo(pc, 1);
	const uint32_t D = g.head_dim, H = g.kv_heads, T = g.tokens_per_page;
	const size_t n = (size_t)T * H * D;
	float *k = kvmem_check_xmalloc(n * sizeof(float));
	float *v = kvmem_check_xmalloc(n * sizeof(float));
	float *sk = kvmem_check_xmalloc(n * sizeof(float));
	float *sv = kvmem_check_xmalloc(n * sizeof(float));
	float *dk = kvmem_check_xmalloc(n * sizeof(float));
	float *dv = kvmem_check_xmalloc(n * sizeof(float));
	struct kvmem_page_layout l;
	struct kvmem_page_hdr hdr;
	struct kvmem_rng r;
	uint8_t *page;
	int hot, isv;
	size_t i;

	kvmem_rng_seed(&r, 0x7a6e + (unsigned int)_i);
	for (i = 0; i < n; i++) {
		/* an outlier channel, as keys have */
		double mag = i % D == 5 ? 8.0 : 1.0;

		k[i] = kvmem_check_rnd_value(&r, mag);
		v[i] = kvmem_check_rnd_value(&r, 1.0);
	}
	for (hot = 0; hot < 2; hot++) {
		ck_assert_int_eq(kvmem_page_layout(&g, hot, &l), 0);
		page = kvmem_check_xmalloc(l.size);
		memset(&hdr, 0, sizeof(hdr));
		hdr.ntokens = T;
		hdr.flags = hot ? 0 : KVMEM_HDR_SEALED;
		ck_assert_int_eq(kvmem_page_encode(page, &g, &hdr, hot, k, v),
				 0);
		ck_assert_int_eq(kvmem__page_decode_stored(page, &g, NULL, sk,
							   sv, NULL, NULL),
				 (int)T);
		ck_assert_int_eq(
			kvmem_page_decode(page, &g, dk, dv, NULL, NULL),
			(int)T);
		for (isv = 0; isv < 2; isv++)
			for (i = 0; i < (size_t)T * H; i++) {
				const float *x = (isv ? v : k) + i * D;
				const float *st = (isv ? sv : sk) + i * D;
				const float *de = (isv ? dv : dk) + i * D;
				double xd[1024], rx[1024], sd[1024], back[1024];
				double err, bound;
				uint32_t c;

				for (c = 0; c < D; c++) {
					xd[c] = x[c];
					sd[c] = st[c];
				}
				dense_rotate(xd, D, 0, rx);
				dense_rotate(sd, D, 1, back);
				for (c = 0; c < D; c++) {
					double b = stored_bound(&g, hot, rx, c);

					EXPECT_NEAR(st[c], rx[c], b,
						    "%s %s %c row %zu: stored "
						    "value %u",
						    pc->name,
						    hot ? "hot" : "sealed",
						    isv ? 'V' : 'K', i, c);
					EXPECT_NEAR(de[c], back[c],
						    1e-5 * norm(sd, D) + 1e-30,
						    "%s %s %c row %zu: decoded "
						    "value %u",
						    pc->name,
						    hot ? "hot" : "sealed",
						    isv ? 'V' : 'K', i, c);
				}
				err = row_error(de, xd, D);
				bound = row_bound(&g, hot, rx);
				EXPECT(err <= bound,
				       "%s %s %c row %zu: |decoded - x| %g > %g",
				       pc->name, hot ? "hot" : "sealed",
				       isv ? 'V' : 'K', i, err, bound);
			}
		free(page);
	}
	free(k);
	free(v);
	free(sk);
	free(sv);
	free(dk);
	free(dv);
}
END_TEST

/*
 * A row with a NaN, infinities and a value beyond FP16 in it: rotated as
 * it is, the NaN would take the whole row (every rotated value of it) and
 * read back as zeros. Each value is first what FP16 keeps of it (NaN and
 * infinities 0, 1e30 65504), so the row reads back as that, within the
 * format's bound, and every other row as it would anyway.
 */
START_TEST(test_rotate_nonfinite)
{
	const struct pcase pc = { "lm4+h84", KVMEM_FMT_LM4, KVMEM_CODEC_H84 };
	struct kvmem_geometry g = rot_geo(&pc, 1);
	const uint32_t D = g.head_dim, H = g.kv_heads, T = g.tokens_per_page;
	const size_t n = (size_t)T * H * D, row = 5 * H; /* token 5, head 0 */
	float *k = kvmem_check_xmalloc(n * sizeof(float));
	float *v = kvmem_check_xmalloc(n * sizeof(float));
	float *dk = kvmem_check_xmalloc(n * sizeof(float));
	float *dv = kvmem_check_xmalloc(n * sizeof(float));
	double xs[1024], rx[1024];
	struct kvmem_page_layout l;
	struct kvmem_page_hdr hdr;
	struct kvmem_rng r;
	uint8_t *page;
	int hot;
	size_t i;

	kvmem_rng_seed(&r, 0x4a4);
	for (i = 0; i < n; i++) {
		k[i] = kvmem_check_rnd_value(&r, 1.0);
		v[i] = kvmem_check_rnd_value(&r, 1.0);
	}
	k[row * D + 1] = NAN;
	k[row * D + 2] = INFINITY;
	k[row * D + 3] = -INFINITY;
	k[row * D + 4] = 1e30f;
	for (i = 0; i < D; i++)
		xs[i] = i == 4 ? 65504 : i >= 1 && i <= 3 ? 0 : k[row * D + i];
	dense_rotate(xs, D, 0, rx);
	for (hot = 0; hot < 2; hot++) {
		double err, bound;

		ck_assert_int_eq(kvmem_page_layout(&g, hot, &l), 0);
		page = kvmem_check_xmalloc(l.size);
		memset(&hdr, 0, sizeof(hdr));
		hdr.ntokens = T;
		hdr.flags = hot ? 0 : KVMEM_HDR_SEALED;
		ck_assert_int_eq(kvmem_page_encode(page, &g, &hdr, hot, k, v),
				 0);
		ck_assert_int_eq(
			kvmem_page_decode(page, &g, dk, dv, NULL, NULL),
			(int)T);
		for (i = 0; i < n; i++)
			ck_assert_msg(isfinite(dk[i]) && isfinite(dv[i]),
				      "value %zu", i);
		err = row_error(dk + row * D, xs, D);
		bound = row_bound(&g, hot, rx);
		EXPECT(err <= bound,
		       "%s: the row read back %g from what FP16 keeps of it, "
		       "over %g",
		       hot ? "hot" : "sealed", err, bound);
		free(page);
	}
	free(k);
	free(v);
	free(dk);
	free(dv);
}
END_TEST

/*
 * One uncorrectable word in a sealed page: as stored, only the values it
 * carried are erased; rotated back, every value of its row is, and no
 * other row's.
 */
START_TEST(test_rotate_erasure_spreads)
{
	const struct pcase pc = { "lm4+h84", KVMEM_FMT_LM4, KVMEM_CODEC_H84 };
	struct kvmem_geometry g = rot_geo(&pc, 1);
	const uint32_t D = g.head_dim, H = g.kv_heads, T = g.tokens_per_page;
	const size_t n = (size_t)T * H * D, row = 3 * H + 1; /* token 3,
								  * head 1 */
	float *k = kvmem_check_xmalloc(n * sizeof(float));
	float *v = kvmem_check_xmalloc(n * sizeof(float));
	uint8_t *erased = kvmem_check_xmalloc(2 * n);
	struct kvmem_page_layout l;
	struct kvmem_page_counts pc_counts;
	struct kvmem_page_hdr hdr;
	struct kvmem_rng r;
	uint8_t *page;
	size_t i, ne = 0;

	kvmem_rng_seed(&r, 0xe4a5e);
	for (i = 0; i < n; i++) {
		k[i] = kvmem_check_rnd_value(&r, 1.0);
		v[i] = kvmem_check_rnd_value(&r, 1.0);
	}
	ck_assert_int_eq(kvmem_page_layout(&g, 0, &l), 0);
	page = kvmem_check_xmalloc(l.size);
	memset(&hdr, 0, sizeof(hdr));
	hdr.ntokens = T;
	hdr.flags = KVMEM_HDR_SEALED;
	ck_assert_int_eq(kvmem_page_encode(page, &g, &hdr, 0, k, v), 0);
	/* page.h: K rows [head][token], each row_bytes; an h84 word is a
	 * byte and carries one lm4 value. Two flipped bits: detected. */
	page[l.k_off + ((size_t)1 * T + 3) * l.row_bytes + 2] ^= 0x03;
	ck_assert_int_eq(kvmem__page_decode_stored(page, &g, NULL, k, v, erased,
						   &pc_counts),
			 (int)T);
	ck_assert_uint_eq(pc_counts.payload.uncorrectable, 1);
	for (i = 0; i < 2 * n; i++)
		ne += erased[i];
	ck_assert_uint_eq(ne, 1);
	ck_assert_uint_eq(erased[row * D + 2], 1);
	ck_assert_int_eq(kvmem_page_decode(page, &g, k, v, erased, NULL),
			 (int)T);
	for (i = 0; i < 2 * n; i++)
		EXPECT_EQ(erased[i], i / D == row, "value %zu (row %zu)", i,
			  i / D);
	free(page);
	free(k);
	free(v);
	free(erased);
}
END_TEST

#define NH 8 /* query heads: GQA 4 over 2 KV heads */

/*
 * A sequence of a rotating geometry: read back within the bound of
 * test_rotate_page(), attended as the reference over its decoded values;
 * then with an uncorrectable word (rebuilt from neighbouring tokens in the
 * rotated space, by attention and by the read alike) and with its oldest
 * sealed pages archived to lm2.
 */
START_TEST(test_rotate_seq_attend)
{
	const struct pcase *pc = &pcases[_i];
	struct kvmem_geometry g = rot_geo(pc, 1);
	const uint32_t D = g.head_dim, n = 77;
	const size_t row = (size_t)g.kv_heads * D;
	float *k = kvmem_check_xmalloc(n * row * sizeof(float));
	float *v = kvmem_check_xmalloc(n * row * sizeof(float));
	float *dk = kvmem_check_xmalloc(n * row * sizeof(float));
	float *dv = kvmem_check_xmalloc(n * row * sizeof(float));
	struct kvmem_page_desc pd[8];
	struct kvmem_page_layout l;
	struct kvmem_cache *c = NULL;
	struct kvmem_seq *s = NULL;
	struct kvmem_rng r;
	size_t i;
	int np, isv, to;

	kvmem_rng_seed(&r, 0x5eaa + (unsigned int)_i);
	/* smooth in t, so that a neighbour rebuilds a value well */
	for (i = 0; i < n * row; i++) {
		double t = (double)(i / row), ch = (double)(i % row);

		k[i] = (float)(sin(t / (20 + ch / 7) + ch) *
			       (1 + (i % D == 9)));
		v[i] = (float)cos(t / (30 + ch / 5) + 2 * ch);
	}
	ck_assert_int_eq(kvmem_page_layout(&g, 0, &l), 0);
	ck_assert_int_eq(kvmem_open_embedded(&g, 64 * l.size * 2, &c), 0);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append_all(s, k, v, n), 0);

	ck_assert_int_eq(kvmem_seq_read(s, 0, 0, n, KVMEM_ERASE_INTERPOLATE, dk,
					dv, NULL),
			 0);
	np = kvmem_seq_pages(s, 0, pd, 8);
	ck_assert_int_ge(np, 4);
	for (isv = 0; isv < 2; isv++)
		for (i = 0; i < (size_t)n * g.kv_heads; i++) {
			const uint32_t t = (uint32_t)(i / g.kv_heads);
			const int hot = t < g.sink_tokens ||
					t >= pd[np - 1].token_start;
			const float *x = (isv ? v : k) + i * D;
			const float *de = (isv ? dv : dk) + i * D;
			double xd[64], rx[64], err, bound;
			uint32_t ch;

			for (ch = 0; ch < D; ch++)
				xd[ch] = x[ch];
			dense_rotate(xd, D, 0, rx);
			err = row_error(de, xd, D);
			bound = row_bound(&g, hot, rx);
			EXPECT(err <= bound,
			       "%s: %c token %u head %zu: |read - x| %g > %g",
			       pc->name, isv ? 'V' : 'K', t, i % g.kv_heads,
			       err, bound);
		}
	ck_assert_uint_eq(ref_check_attend(s, &g, n, NH, &r, pc->name), 0);

	/* A V payload word of the second sealed page made uncorrectable:
	 * two bits of an h84 or secded72 word, four of a golay24 one (h74
	 * corrects one bit and sees no more). */
	ck_assert(pd[2].sealed && !pd[2].hot);
	if (pc->codec != KVMEM_CODEC_H74) {
		((uint8_t *)pd[2].data)[l.v_off + 5 * l.row_bytes] ^=
			pc->codec == KVMEM_CODEC_GOLAY24 ? 0x0f : 0x81;
		ck_assert_uint_gt(ref_check_attend(s, &g, n, NH, &r, pc->name),
				  0);
	}

	/* To lm2 in h84 words, or in h74 ones where the pages are that. */
	to = pc->fmt == KVMEM_FMT_LM2 && pc->codec == KVMEM_CODEC_H84
		     ? KVMEM_CODEC_H74
		     : KVMEM_CODEC_H84;
	ck_assert_int_ge(kvmem_seq_archive(s, 40, KVMEM_FMT_LM2, to), 1);
	np = kvmem_seq_pages(s, 0, pd, 8);
	ck_assert_uint_eq(pd[1].format, KVMEM_FMT_LM2);
	ck_assert_uint_eq(pd[1].codec, to);
	ref_check_attend(s, &g, n, NH, &r, pc->name);

	kvmem_seq_free(s);
	kvmem_close(c);
	free(k);
	free(v);
	free(dk);
	free(dv);
}
END_TEST

KVMEM_SUITE(rotate)
{
	Suite *s = suite_create("rotate");
	TCase *tc = tcase_create("hadamard");
	const int np = (int)(sizeof(pcases) / sizeof(pcases[0]));

	tcase_add_test(tc, test_rotate_dense);
	tcase_add_loop_test(tc, test_rotate_page, 0, np);
	tcase_add_test(tc, test_rotate_erasure_spreads);
	tcase_add_test(tc, test_rotate_nonfinite);
	tcase_add_loop_test(tc, test_rotate_seq_attend, 0, np);
	suite_add_tcase(s, tc);
	return s;
}
