/* SPDX-License-Identifier: MIT */
/*
 * check_vq.c - vq2 pages and their codebooks (kvmem/quant.h, vq.c)
 *
 * The k-means against a plain one written here from vq.c's description;
 * a sequence's codebooks learned from exactly the rows that description
 * names; pages whose values are the entry nearest each four (found here in
 * double) of the rows they replace; attention over them against a float64
 * reference, the same bits on every SIMD level; and the codebooks under
 * attack: a flipped bit corrected, an entry damaged past its code or its
 * check lost, and every value that indexes it erased and rebuilt, never
 * read as the damaged entry. Then the life of such a sequence: forks
 * share codebooks, a cut inside a vq2 page, archiving back to int4 and
 * across codecs, the budget, and what refuses vq2.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvmem/kvmem.h"
#include "attend_ref.h"
#include "kvmem_check.h"
#include "rng.h"

#define E KVMEM__VQ_ENTRIES
#define NH 8 /* query heads: GQA over the KV heads */

/* ---- k-means ------------------------------------------------------------ */

/* vq.c's k-means as its comment says it, written plainly. */
static void plain_kmeans(const float *x, size_t n, float *c)
{
	const size_t cap = KVMEM__VQ_TRAIN_MAX;
	float *pts = kvmem_check_xmalloc((n ? n : 1) * 4 * sizeof(float));
	int *own = kvmem_check_xmalloc((n ? n : 1) * sizeof(int));
	size_t i, m = n;
	int round, j, k;

	if (n > cap) {
		for (i = 0; i < cap; i++)
			memcpy(pts + 4 * i, x + 4 * (i * n / cap),
			       4 * sizeof(float));
		m = cap;
	} else {
		memcpy(pts, x, n * 4 * sizeof(float));
	}
	for (j = 0; j < E; j++)
		for (k = 0; k < 4; k++)
			c[4 * j + k] = m ? pts[4 * ((size_t)j * m / E) + k] : 0;
	for (i = 0; i < m; i++)
		own[i] = -1;
	for (round = 0; round < KVMEM__VQ_ROUNDS; round++) {
		int moved = 0;

		for (i = 0; i < m; i++) {
			float best = INFINITY;
			int a = 0;

			for (j = 0; j < E; j++) {
				float d = 0;

				for (k = 0; k < 4; k++) {
					float t = pts[4 * i + k] - c[4 * j + k];

					d += t * t;
				}
				if (d < best) {
					best = d;
					a = j;
				}
			}
			moved |= a != own[i];
			own[i] = a;
		}
		if (!moved)
			break;
		for (j = 0; j < E; j++) {
			double s[4] = { 0 };
			size_t cnt = 0;

			for (i = 0; i < m; i++)
				if (own[i] == j) {
					cnt++;
					for (k = 0; k < 4; k++)
						s[k] += pts[4 * i + k];
				}
			for (k = 0; cnt && k < 4; k++)
				c[4 * j + k] = (float)(s[k] / (double)cnt);
		}
	}
	free(pts);
	free(own);
}

START_TEST(test_vq_kmeans_plain)
{
	static const size_t ns[] = { 0, 1, 100, 256, 1000, 3 * 16384 + 7 };
	const size_t n = ns[_i];
	float *x = kvmem_check_xmalloc((n ? n : 1) * 4 * sizeof(float));
	float got[E * 4], want[E * 4];
	struct kvmem_rng r;
	size_t i;

	kvmem_rng_seed(&r, 0x7e3 + n);
	/* clusters around a few centres, and noise */
	for (i = 0; i < 4 * n; i++)
		x[i] = (float)((double)(i / 4 % 7) - 3 +
			       0.4 * (2 * kvmem_rng_unit(&r) - 1));
	ck_assert_int_eq(kvmem__vq_train(x, n, got), 0);
	plain_kmeans(x, n, want);
	for (i = 0; i < E * 4; i++)
		EXPECT_FEQ(got[i], want[i], "%zu points: entry %zu value %zu",
			   n, i / 4, i % 4);
	free(x);
}
END_TEST

/* ---- a sequence of vq2 pages -------------------------------------------- */

struct fx {
	struct kvmem_geometry g;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	uint32_t n; /* tokens */
	float *k, *v; /* what was appended, [n][layers][H][D] */
};

/* Smooth in t, so that a neighbour rebuilds a value well; the two layers
 * differ. */
/* The fixture with keys in @key_scales (enum kvmem_key_scales), heads of
 * @head_dim values. */
static void fx_open_as(struct fx *f, int rotation, int key_scales,
		       uint32_t head_dim, uint32_t n, int codec)
{
	const size_t row = 2 * 2 * head_dim; /* layers, KV heads, head_dim */
	struct kvmem_page_layout l;
	size_t i;

	memset(f, 0, sizeof(*f));
	f->g.layers = 2;
	f->g.kv_heads = 2;
	f->g.head_dim = head_dim;
	kvmem_geometry_default(&f->g);
	f->g.tokens_per_page = 8;
	f->g.group_size = 8;
	f->g.sink_tokens = 2;
	f->g.codec = (uint8_t)codec;
	f->g.rotation = (uint8_t)rotation;
	f->g.key_scales = (uint8_t)key_scales;
	f->n = n;
	f->k = kvmem_check_xmalloc(n * row * sizeof(float));
	f->v = kvmem_check_xmalloc(n * row * sizeof(float));
	for (i = 0; i < n * row; i++) {
		double t = (double)(i / row), ch = (double)(i % row);

		f->k[i] = (float)(sin(t / (9 + ch / 7) + ch) * 1.5);
		f->v[i] = (float)cos(t / (11 + ch / 5) + 2 * ch);
	}
	ck_assert_int_eq(kvmem_page_layout(&f->g, 1, &l), 0);
	ck_assert_int_eq(kvmem_open_embedded(&f->g, 256 * l.size, &f->c), 0);
	ck_assert_int_eq(kvmem_seq_create(f->c, &f->s), 0);
	ck_assert_int_eq(kvmem_seq_append_all(f->s, f->k, f->v, n), 0);
}

static void fx_open(struct fx *f, int rotation, uint32_t n, int codec)
{
	fx_open_as(f, rotation, KVMEM_SCALES_GROUP, 16, n, codec);
}

static void fx_close(struct fx *f)
{
	kvmem_seq_free(f->s);
	kvmem_close(f->c);
	free(f->k);
	free(f->v);
}

static size_t fx_row(const struct fx *f)
{
	return (size_t)f->g.kv_heads * f->g.head_dim;
}

/* Layer @ly's tokens [0, n) as read back, K then V, [n][H][D] each. */
static float *fx_read(const struct fx *f, uint32_t ly, uint32_t policy,
		      struct kvmem_page_counts *pc)
{
	float *kv = kvmem_check_xmalloc(2 * f->n * fx_row(f) * sizeof(float));

	ck_assert_int_eq(kvmem_seq_read(f->s, ly, 0, f->n, policy, kv,
					kv + f->n * fx_row(f), pc),
			 0);
	return kv;
}

/* Random entries of two KV heads' K and V books, of the rows' size. */
static float *random_books(const struct kvmem_geometry *g, uint64_t seed)
{
	const size_t ne = (size_t)2 * g->kv_heads * E * 4;
	float *e = kvmem_check_xmalloc(ne * sizeof(float));
	struct kvmem_rng r;
	size_t i;

	kvmem_rng_seed(&r, seed);
	for (i = 0; i < ne; i++)
		e[i] = kvmem_half_to_float(kvmem_half_from_float(
			(float)(1.8 * (2 * kvmem_rng_unit(&r) - 1))));
	return e;
}

/* The entry of book @b nearest @x, in double; the lowest on a tie. */
static int nearest(const float *books, size_t b, const float *x)
{
	double best = INFINITY;
	int j, k, a = 0;

	for (j = 0; j < E; j++) {
		double d = 0;

		for (k = 0; k < 4; k++) {
			double t = (double)x[k] - books[(b * E + j) * 4 + k];

			d += t * t;
		}
		if (d < best) {
			best = d;
			a = j;
		}
	}
	return a;
}

/* Pages of layer @ly: which tokens are in a vq2 page. */
static uint8_t *vq_tokens(const struct fx *f, uint32_t ly)
{
	struct kvmem_page_desc d[64];
	uint8_t *in = calloc(f->n, 1);
	int np = kvmem_seq_pages(f->s, ly, d, 64), i;
	uint32_t t;

	ck_assert_ptr_nonnull(in);
	ck_assert_int_le(np, 64);
	for (i = 0; i < np; i++)
		for (t = 0; d[i].format == KVMEM_FMT_VQ2 && t < d[i].ntokens;
		     t++)
			in[d[i].token_start + t] = 1;
	return in;
}

/*
 * Given codebooks: every value of a vq2 page reads back as the entry
 * nearest its four as they read before, bit for bit, in every codec; the
 * sinks and the tail and the pages not archived are untouched.
 */
START_TEST(test_vq_given_books)
{
	static const int codecs[] = { KVMEM_CODEC_H74, KVMEM_CODEC_H84,
				      KVMEM_CODEC_GOLAY24,
				      KVMEM_CODEC_SECDED72 };
	const int codec = codecs[_i % 4], key_scales = _i / 4;
	struct kvmem_page_desc d[64];
	struct kvmem_page_layout lg, lc;
	struct fx f;
	float *books, *before, *after;
	uint8_t *in;
	size_t i, row;
	uint32_t ly;
	int np, j, archived;

	/* Keys in channel scales too: a vq2 page keeps no scales, so its
	 * layout is the same either way (it once wrote the int4 pages'
	 * channel scales past the end of a buffer sized for none). */
	fx_open_as(&f, 0, key_scales, 16, 45, KVMEM_CODEC_H84);
	ck_assert_int_eq(kvmem_page_layout_as(&f.g, KVMEM_FMT_VQ2,
					      (unsigned int)codec, &lc),
			 0);
	f.g.key_scales = KVMEM_SCALES_GROUP;
	ck_assert_int_eq(kvmem_page_layout_as(&f.g, KVMEM_FMT_VQ2,
					      (unsigned int)codec, &lg),
			 0);
	f.g.key_scales = (uint8_t)key_scales;
	ck_assert_uint_eq(lc.size, lg.size);
	ck_assert_uint_eq(lc.key_scales, KVMEM_SCALES_GROUP);
	ck_assert_uint_eq(lc.nscales_k + lc.nscales_v, 0);
	row = fx_row(&f);
	books = random_books(&f.g, 0xb00c + (uint64_t)_i);
	for (ly = 0; ly < f.g.layers; ly++)
		ck_assert_int_eq(kvmem_seq_codebook_set(f.s, ly, books), 0);
	before = fx_read(&f, 1, KVMEM_ERASE_KEEP, NULL);
	archived =
		kvmem_seq_archive(f.s, 34, KVMEM_FMT_VQ2, (unsigned int)codec);
	/* pages [2, 10), [10, 18), [18, 26), [26, 34) of each layer */
	ck_assert_int_eq(archived, 8);
	np = kvmem_seq_pages(f.s, 1, d, 64);
	for (j = 0; j < np; j++) {
		int vq = d[j].token_start >= 2 && d[j].token_start < 34;

		EXPECT_EQ(d[j].format,
			  vq	     ? KVMEM_FMT_VQ2
			  : d[j].hot ? KVMEM_FMT_FP16
				     : f.g.format,
			  "page %d", j);
		if (vq)
			EXPECT_EQ(d[j].codec, codec, "page %d", j);
	}
	after = fx_read(&f, 1, KVMEM_ERASE_KEEP, NULL);
	in = vq_tokens(&f, 1);
	for (i = 0; i < 2 * f.n * row; i += 4) {
		const size_t t = i % (f.n * row) / row;
		const size_t b = (i >= f.n * row) * f.g.kv_heads +
				 i % row / f.g.head_dim;
		int k;

		if (!in[t]) {
			EXPECT_MEM(after + i, before + i, 4 * sizeof(float),
				   "token %zu", t);
			continue;
		}
		j = nearest(books, b, before + i);
		for (k = 0; k < 4; k++)
			EXPECT_FEQ(after[i + k], books[(b * E + j) * 4 + k],
				   "token %zu value %zu", t, i % row + k);
	}
	free(in);
	free(books);
	free(before);
	free(after);
	fx_close(&f);
}
END_TEST

/*
 * Learned codebooks: the k-means of exactly the fours vq_learn() says
 * (every row of the pages archived, in token order, of each book), and
 * the pages then read as the entry nearest each four.
 */
START_TEST(test_vq_learned_books)
{
	const uint32_t D = 16, H = 2, before_tok = 34;
	struct kvmem_ecc_counts ec;
	struct fx f;
	float *rows, *before, *after, *books, *got;
	uint8_t lost[2 * 2 * E];
	size_t i, b, n, row;
	uint32_t t, ly = 0;

	fx_open(&f, 0, 45, KVMEM_CODEC_H84);
	row = fx_row(&f);
	before = fx_read(&f, ly, KVMEM_ERASE_KEEP, NULL);
	ck_assert_int_eq(kvmem_seq_codebook(f.s, ly, NULL), -ENOENT);
	ck_assert_int_eq(kvmem_seq_archive(f.s, before_tok, KVMEM_FMT_VQ2,
					   KVMEM_CODEC_H84),
			 8);
	books = kvmem_check_xmalloc(2 * H * E * 4 * sizeof(float));
	rows = kvmem_check_xmalloc(f.n * D * sizeof(float));
	for (b = 0; b < 2 * H; b++) {
		n = 0;
		/* tokens [2, 34): the sealed pages that end by then */
		for (t = 2; t < before_tok; t++, n += D / 4)
			memcpy(rows + n * 4,
			       before + (b >= H) * f.n * row + t * row +
				       (b % H) * D,
			       D * sizeof(float));
		plain_kmeans(rows, n, books + b * E * 4);
	}
	for (i = 0; i < 2 * H * E * 4; i++)
		books[i] = kvmem_half_to_float(kvmem_half_from_float(books[i]));
	got = kvmem_check_xmalloc(2 * H * E * 4 * sizeof(float));
	ck_assert_int_eq(kvmem_seq_codebook_read(f.s, ly, got, lost, &ec), 0);
	ck_assert_uint_eq(ec.corrected + ec.uncorrectable, 0);
	for (i = 0; i < 2 * H * E * 4; i++)
		EXPECT_FEQ(got[i], books[i], "entry %zu value %zu", i / 4,
			   i % 4);
	after = fx_read(&f, ly, KVMEM_ERASE_KEEP, NULL);
	for (i = 0; i < 2 * f.n * row; i += 4) {
		const size_t tt = i % (f.n * row) / row;
		const size_t bb = (i >= f.n * row) * H + i % row / D;
		int j, k;

		if (tt < 2 || tt >= before_tok)
			continue;
		j = nearest(books, bb, before + i);
		for (k = 0; k < 4; k++)
			EXPECT_FEQ(after[i + k], books[(bb * E + j) * 4 + k],
				   "token %zu value %zu", tt, i % row + k);
	}
	/* Later archives to vq2 use the same books. */
	ck_assert_int_eq(
		kvmem_seq_archive(f.s, 42, KVMEM_FMT_VQ2, KVMEM_CODEC_H84), 2);
	ck_assert_int_eq(kvmem_seq_codebook_read(f.s, ly, got, lost, NULL), 0);
	for (i = 0; i < 2 * H * E * 4; i++)
		EXPECT_FEQ(got[i], books[i], "entry %zu", i / 4);
	free(rows);
	free(books);
	free(got);
	free(before);
	free(after);
	fx_close(&f);
}
END_TEST

/* The K entry of KV head 0 that token 2's first four index in layer 0:
 * page 1's first row, its first index byte as its h84 words decode. */
static size_t entry_of_token2(const struct fx *f)
{
	struct kvmem_page_desc d[8];
	struct kvmem_page_layout l;
	uint8_t ix[4];

	ck_assert_int_ge(kvmem_seq_pages(f->s, 0, d, 8), 2);
	ck_assert_uint_eq(d[1].format, KVMEM_FMT_VQ2);
	ck_assert_int_eq(
		kvmem_page_layout_as(&f->g, KVMEM_FMT_VQ2, KVMEM_CODEC_H84, &l),
		0);
	ck_assert_int_eq(kvmem_ecc_decode(KVMEM_CODEC_H84,
					  (uint8_t *)d[1].data + l.k_off, ix, 2,
					  NULL, NULL, NULL),
			 0);
	return ix[0];
}

START_TEST(test_vq_attend)
{
	/* heads of 16 values; of 64, the rows the widest kernels take */
	const int rot = _i % 2;
	struct fx f;
	struct kvmem_rng r;
	struct kvmem_codebook_desc cd;
	size_t e;

	kvmem_rng_seed(&r, 0xa77 + (uint64_t)_i);
	fx_open_as(&f, rot ? KVMEM_ROTATE_HADAMARD : KVMEM_ROTATE_NONE,
		   KVMEM_SCALES_GROUP, _i < 2 ? 16 : 64, 45, KVMEM_CODEC_H84);
	ck_assert_int_eq(
		kvmem_seq_archive(f.s, 34, KVMEM_FMT_VQ2, KVMEM_CODEC_H84), 8);
	ck_assert_uint_eq(ref_check_attend(f.s, &f.g, f.n, NH, &r,
					   rot ? "rotated" : "plain"),
			  0);
	/* In the first vq2 page, head 0: a flipped bit in a K index word
	 * of row 0 (read corrected) and two in a V index word of row 0
	 * (lost: its index's four values rebuilt). In the next, three in a
	 * V index word of row 1, which the code takes for one and
	 * miscorrects: only the row's check sees it, and all of the row is
	 * rebuilt, never read as decoded. */
	{
		struct kvmem_page_desc d[8];
		struct kvmem_page_layout l;
		int i, n = kvmem_seq_pages(f.s, 0, d, 8);
		uint8_t *p0, *p1;

		for (i = 0; i < n && d[i].format != KVMEM_FMT_VQ2; i++)
			;
		ck_assert_int_lt(i + 1, n);
		ck_assert_int_eq(d[i + 1].format, KVMEM_FMT_VQ2);
		ck_assert_int_eq(kvmem_page_layout_as(&f.g, KVMEM_FMT_VQ2,
						      KVMEM_CODEC_H84, &l),
				 0);
		p0 = d[i].data;
		p1 = d[i + 1].data;
		p0[l.k_off] ^= 0x04;
		p0[l.v_off + 1] ^= 0x21;
		p1[l.v_off + l.row_bytes] ^= 0x07;
		ck_assert_uint_eq(
			ref_check_attend(f.s, &f.g, f.n, NH, &r,
					 rot ? "rotated, flips" : "flips"),
			4 + f.g.head_dim);
		p0[l.k_off] ^= 0x04;
		p0[l.v_off + 1] ^= 0x21;
		p1[l.v_off + l.row_bytes] ^= 0x07;
	}
	/* A K entry token 2 uses lost past its code (four flips in its
	 * first golay24 word): the values indexing it are erased and
	 * rebuilt, by attention as by the read. */
	e = entry_of_token2(&f);
	ck_assert_int_eq(kvmem_seq_codebook(f.s, 0, &cd), 0);
	((uint8_t *)cd.data)[3 * (e * 64 / 12)] ^= 0x0f;
	ck_assert_uint_gt(ref_check_attend(f.s, &f.g, f.n, NH, &r,
					   rot ? "rotated, a lost entry"
					       : "a lost entry"),
			  0);
	fx_close(&f);
}
END_TEST

/* ---- the codebooks under attack ------------------------------------------ */

/*
 * For every value of layer 0's vq2 pages: read as the entry its index
 * names when that entry is good, and counted erased when it is lost
 * (@lost from kvmem_seq_codebook_read()); the number erased is exactly
 * the values of lost entries.
 */
static void check_lost_values(const struct fx *f, const float *clean,
			      const float *books, const uint8_t *lost)
{
	const size_t row = fx_row(f), nv = f->n * row;
	const uint32_t D = f->g.head_dim, H = f->g.kv_heads;
	struct kvmem_page_counts pc;
	float *got = fx_read(f, 0, KVMEM_ERASE_KEEP, &pc);
	uint8_t *in = vq_tokens(f, 0);
	uint64_t want = 0;
	size_t i;

	for (i = 0; i < 2 * nv; i += 4) {
		const size_t t = i % nv / row;
		const size_t b = (i >= nv) * H + i % row / D;
		int j, k;

		if (!in[t])
			continue;
		j = nearest(books, b, clean + i);
		if (lost[b * E + j]) {
			want += 4;
			/* rebuilt from neighbours: never the damaged
			 * entry's bits taken as they are */
			continue;
		}
		for (k = 0; k < 4; k++)
			EXPECT_FEQ(got[i + k], books[(b * E + j) * 4 + k],
				   "token %zu value %zu", t, i % row + k);
	}
	EXPECT_EQ(pc.values_erased, want, "%s", "values of lost entries");
	free(in);
	free(got);
}

START_TEST(test_vq_codebook_faults)
{
	const size_t ne = 2 * 2 * E;
	struct kvmem_codebook_desc cd;
	struct kvmem_ecc_counts ec;
	struct fx f;
	float *books, *clean, *got;
	uint8_t *lost, *orig, *in, keep[4];
	size_t i, w, e;
	long nl;

	fx_open(&f, 0, 45, KVMEM_CODEC_H84);
	books = random_books(&f.g, 0xfa17);
	ck_assert_int_eq(kvmem_seq_codebook_set(f.s, 0, books), 0);
	clean = fx_read(&f, 0, KVMEM_ERASE_KEEP, NULL);
	ck_assert_int_eq(
		kvmem_seq_archive(f.s, 34, KVMEM_FMT_VQ2, KVMEM_CODEC_H84), 8);
	ck_assert_int_eq(kvmem_seq_codebook(f.s, 0, &cd), 0);
	ck_assert_uint_eq(cd.entries, ne);
	ck_assert_uint_eq(cd.size, (size_t)cd.words * 3);
	orig = kvmem_check_xmalloc(cd.size);
	memcpy(orig, cd.data, cd.size);
	got = kvmem_check_xmalloc(ne * 4 * sizeof(float));
	lost = kvmem_check_xmalloc(ne);

	/* One flipped bit in every word: all corrected, nothing lost. */
	for (w = 0; w < cd.words; w++)
		((uint8_t *)cd.data)[3 * w + w % 3] ^= (uint8_t)(1u << (w % 8));
	nl = kvmem_seq_codebook_read(f.s, 0, got, lost, &ec);
	ck_assert_int_eq(nl, 0);
	ck_assert_uint_eq(ec.corrected, cd.words);
	for (i = 0; i < ne * 4; i++)
		EXPECT_FEQ(got[i], books[i], "entry %zu", i / 4);
	check_lost_values(&f, clean, books, lost);
	/* A read leaves them as they are; a scrub puts them right. */
	ck_assert_int_eq(kvmem_ecc_scrub(KVMEM_CODEC_GOLAY24, cd.data, cd.words,
					 &ec, NULL, 0),
			 0);
	ck_assert_uint_eq(ec.corrected, cd.words);
	EXPECT_MEM(cd.data, orig, cd.size, "%s", "scrubbed");

	/* Four bits of an entry word (golay24 detects four): the entries
	 * of that word are lost, and only they. */
	((uint8_t *)cd.data)[3 * 40] ^= 0x0f;
	nl = kvmem_seq_codebook_read(f.s, 0, got, lost, &ec);
	ck_assert_int_ge(nl, 1);
	ck_assert_uint_ge(ec.uncorrectable, 1);
	for (i = 0; i < ne; i++)
		EXPECT_EQ(lost[i],
			  i * 64 / 12 <= 40 && (i * 64 + 63) / 12 >= 40,
			  "entry %zu", i);
	check_lost_values(&f, clean, books, lost);
	memcpy(cd.data, orig, cd.size);

	/* Seven bits of one word: decoded as another codeword or not at
	 * all; the entry's check sees it either way. */
	((uint8_t *)cd.data)[3 * 61] ^= 0x7f;
	nl = kvmem_seq_codebook_read(f.s, 0, got, lost, &ec);
	ck_assert_int_ge(nl, 1);
	for (i = 0; i < ne; i++)
		if (i * 64 / 12 <= 61 && (i * 64 + 63) / 12 >= 61)
			EXPECT_EQ(lost[i], 1, "entry %zu", i);
	check_lost_values(&f, clean, books, lost);
	memcpy(cd.data, orig, cd.size);

	/* The check of the entry token 2's first K four uses, made
	 * uncorrectable: that entry is lost. */
	e = (size_t)nearest(books, 0, clean + 2 * fx_row(&f));
	w = (size_t)(cd.words - 2 * ne) + 2 * e;
	((uint8_t *)cd.data)[3 * w] ^= 0x0f;
	nl = kvmem_seq_codebook_read(f.s, 0, got, lost, &ec);
	ck_assert_int_eq(nl, 1);
	ck_assert_uint_eq(lost[e], 1);
	check_lost_values(&f, clean, books, lost);
	/* A cut inside the page that reads it would keep its values as
	 * good: refused, and nothing changes. */
	ck_assert_int_eq(kvmem_seq_truncate(f.s, 5), -EBADMSG);
	ck_assert_uint_eq(kvmem_seq_len(f.s, 0), f.n);
	check_lost_values(&f, clean, books, lost);

	/* The pages reading it are not archived again, the others (and
	 * layer 1's four) are: their losses stay flagged. */
	memset(keep, 0, sizeof(keep));
	for (i = 2 * fx_row(&f); i < 34 * fx_row(&f); i += 4)
		if (i % fx_row(&f) < f.g.head_dim &&
		    (size_t)nearest(books, 0, clean + i) == e)
			keep[(i / fx_row(&f) - 2) / 8] = 1;
	ck_assert_uint_eq(keep[0], 1);
	ck_assert_int_eq(
		kvmem_seq_archive(f.s, 34, KVMEM_FMT_INT4, KVMEM_CODEC_H84),
		8 - keep[0] - keep[1] - keep[2] - keep[3]);
	in = vq_tokens(&f, 0);
	for (i = 2; i < f.n; i++)
		EXPECT_EQ(in[i], i < 34 && keep[(i - 2) / 8], "token %zu", i);
	free(in);
	check_lost_values(&f, clean, books, lost);
	free(orig);
	free(got);
	free(lost);
	free(books);
	free(clean);
	fx_close(&f);
}
END_TEST

/* ---- the life of a sequence with vq2 pages ------------------------------ */

START_TEST(test_vq_lifecycle)
{
	const size_t ne = 2 * 2 * E;
	struct kvmem_codebook_desc cd;
	struct kvmem_page_desc d[64];
	struct kvmem_seq *fork = NULL, *other = NULL;
	struct fx f;
	float *vqv, *got, *bad, *kv, *books;
	uint8_t *lost;
	size_t i, row, nv;
	int np, j;

	fx_open(&f, 0, 45, KVMEM_CODEC_H84);
	row = fx_row(&f);
	nv = f.n * row;
	ck_assert_int_eq(
		kvmem_seq_archive(f.s, 34, KVMEM_FMT_VQ2, KVMEM_CODEC_H84), 8);
	vqv = fx_read(&f, 0, KVMEM_ERASE_KEEP, NULL);

	/* Forks share the codebooks and read the same. */
	ck_assert_int_eq(kvmem_seq_fork(f.s, &fork), 0);
	ck_assert_int_eq(kvmem_seq_codebook(fork, 0, &cd), 0);
	/* two layers (the sequence's, the fork's) and four vq2 pages */
	ck_assert_uint_eq(cd.refs, 6);
	kvmem_seq_free(f.s);
	f.s = fork;
	got = fx_read(&f, 0, KVMEM_ERASE_KEEP, NULL);
	EXPECT_MEM(got, vqv, 2 * nv * sizeof(float), "%s", "fork");
	free(got);
	books = kvmem_check_xmalloc(ne * 4 * sizeof(float));
	lost = kvmem_check_xmalloc(ne);
	ck_assert_int_eq(kvmem_seq_codebook_set(f.s, 0, books), -EEXIST);

	/* Across codecs the values stay bit for bit. */
	ck_assert_int_eq(
		kvmem_seq_archive(f.s, 34, KVMEM_FMT_VQ2, KVMEM_CODEC_GOLAY24),
		8);
	got = fx_read(&f, 0, KVMEM_ERASE_KEEP, NULL);
	EXPECT_MEM(got, vqv, 2 * nv * sizeof(float), "%s", "golay24");
	free(got);

	/* Back to int4: the vq2 values quantized again, within int4's
	 * bound of a group of eight. */
	ck_assert_int_eq(
		kvmem_seq_archive(f.s, 18, KVMEM_FMT_INT4, KVMEM_CODEC_H84), 4);
	got = fx_read(&f, 0, KVMEM_ERASE_KEEP, NULL);
	for (i = 0; i < 2 * nv; i += 8) {
		const size_t t = i % nv / row;
		double amax = 0;
		int k;

		for (k = 0; k < 8; k++)
			amax = fmax(amax, fabs(vqv[i + k]));
		for (k = 0; t >= 2 && t < 18 && k < 8; k++)
			EXPECT_NEAR(got[i + k], vqv[i + k],
				    amax / 7 / 2 * 1.002 + 1e-6,
				    "token %zu value %zu", t, i % row + k);
	}
	free(got);

	/* A cut inside a vq2 page: its kept tokens become the FP16 tail,
	 * the vq2 values as FP16 keeps them. */
	ck_assert_int_eq(kvmem_seq_truncate(f.s, 30), 0);
	np = kvmem_seq_pages(f.s, 0, d, 64);
	ck_assert_uint_eq(d[np - 1].hot, 1);
	ck_assert_uint_eq(d[np - 1].token_start, 26);
	f.n = 30;
	got = fx_read(&f, 0, KVMEM_ERASE_KEEP, NULL);
	for (i = 26 * row; i < 30 * row; i++) {
		EXPECT_FEQ(got[i],
			   kvmem_half_to_float(kvmem_half_from_float(vqv[i])),
			   "K %zu", i);
		EXPECT_FEQ(
			got[30 * row + i],
			kvmem_half_to_float(kvmem_half_from_float(vqv[nv + i])),
			"V %zu", i);
	}
	free(got);

	/* What refuses vq2, and why. */
	for (j = 0; j < np && d[j].format != KVMEM_FMT_VQ2; j++)
		;
	ck_assert_int_lt(j, np);
	kv = kvmem_check_xmalloc(2 * 8 * row * sizeof(float));
	ck_assert_int_eq(kvmem_page_decode(d[j].data, &f.g, kv, kv + 8 * row,
					   NULL, NULL),
			 -EOPNOTSUPP);
	bad = kvmem_check_xmalloc(d[j].size);
	ck_assert_int_eq(kvmem_page_archive(bad, d[j].data, &f.g,
					    KVMEM_FMT_INT4, KVMEM_CODEC_H84,
					    NULL),
			 -EOPNOTSUPP);
	ck_assert_int_eq(kvmem_page_verify(d[j].data, &f.g, NULL), 0);
	free(bad);
	free(kv);
	ck_assert_int_eq(kvmem_seq_codebook(f.s, 9, &cd), -EINVAL);
	ck_assert_int_eq(kvmem_seq_create(f.c, &other), 0);
	ck_assert_int_eq(kvmem_seq_codebook_read(other, 1, books, lost, NULL),
			 -ENOENT);
	for (i = 0; i < ne * 4; i++)
		books[i] = 0.5f;
	books[77] = NAN;
	ck_assert_int_eq(kvmem_seq_codebook_set(other, 1, books), -EINVAL);
	books[77] = 1e6f;
	ck_assert_int_eq(kvmem_seq_codebook_set(other, 1, books), -EINVAL);
	books[77] = 0.25f;
	ck_assert_int_eq(kvmem_seq_codebook_set(other, 1, books), 0);
	ck_assert_int_eq(kvmem_seq_codebook_read(other, 1, books, lost, NULL),
			 0);
	EXPECT_FEQ(books[77], 0.25f, "%s", "a given entry");
	kvmem_seq_free(other);
	free(books);
	free(lost);
	free(vqv);
	fx_close(&f);
}
END_TEST

/*
 * Forks share pages, and a vq2 page keeps the codebooks it was encoded
 * with: a fork that learns codebooks of its own later reads the shared
 * pages as their encoder meant, and so does every holder after the
 * learner is gone.
 */
START_TEST(test_vq_forks)
{
	const size_t ne = 2 * 2 * E;
	struct kvmem_seq *a, *b = NULL;
	struct kvmem_codebook_desc cd;
	struct fx f;
	float *ra, *rb, *books;
	uint8_t *lost;
	size_t i, row, nv;

	fx_open(&f, 0, 45, KVMEM_CODEC_H84);
	a = f.s;
	row = fx_row(&f);
	nv = f.n * row;
	ck_assert_int_eq(kvmem_seq_fork(a, &b), 0);
	ck_assert_int_eq(
		kvmem_seq_archive(a, 34, KVMEM_FMT_VQ2, KVMEM_CODEC_H84), 8);
	ck_assert_int_eq(kvmem_seq_codebook(b, 0, &cd), -ENOENT);
	ra = fx_read(&f, 0, KVMEM_ERASE_KEEP, NULL);
	f.s = b;
	rb = fx_read(&f, 0, KVMEM_ERASE_KEEP, NULL);
	EXPECT_MEM(rb, ra, 2 * nv * sizeof(float), "%s", "b reads a's pages");
	free(rb);

	/* b learns its own from [34, 42) and archives that shared page:
	 * a sees it too, by b's codebooks. */
	ck_assert_int_eq(
		kvmem_seq_archive(b, 42, KVMEM_FMT_VQ2, KVMEM_CODEC_H84), 2);
	books = kvmem_check_xmalloc(ne * 4 * sizeof(float));
	lost = kvmem_check_xmalloc(ne);
	ck_assert_int_eq(kvmem_seq_codebook_read(b, 0, books, lost, NULL), 0);
	rb = fx_read(&f, 0, KVMEM_ERASE_KEEP, NULL);
	EXPECT_MEM(rb, ra, 34 * row * sizeof(float), "%s", "K before 34");
	EXPECT_MEM(rb + nv, ra + nv, 34 * row * sizeof(float), "%s",
		   "V before 34");
	for (i = 34 * row; i < 42 * row; i += 4) {
		const size_t b0 = i % row / f.g.head_dim;
		int j, hit = 0;

		for (j = 0; j < E && !hit; j++)
			hit = !memcmp(rb + i, books + (b0 * E + j) * 4,
				      4 * sizeof(float));
		EXPECT(hit, "K value %zu is no entry of b's book %zu", i, b0);
	}
	f.s = a;
	free(ra);
	ra = fx_read(&f, 0, KVMEM_ERASE_KEEP, NULL);
	EXPECT_MEM(ra, rb, 2 * nv * sizeof(float), "%s", "a reads b's page");

	/* An uncorrectable word in b's page at token 34 (K, head 0, the
	 * first index): its four values are rebuilt from tokens 33 and 35,
	 * pages of two codebooks; every other value reads as before. */
	{
		struct kvmem_page_desc d[8];
		struct kvmem_page_layout l;
		float *rr;

		ck_assert_int_ge(kvmem_seq_pages(a, 0, d, 8), 6);
		ck_assert_uint_eq(d[5].token_start, 34);
		ck_assert_int_eq(kvmem_page_layout_as(&f.g, KVMEM_FMT_VQ2,
						      KVMEM_CODEC_H84, &l),
				 0);
		((uint8_t *)d[5].data)[l.k_off] ^= 0x03;
		rr = fx_read(&f, 0, KVMEM_ERASE_INTERPOLATE, NULL);
		for (i = 0; i < 2 * nv; i++)
			if (i < 34 * row || i >= 34 * row + 4)
				EXPECT_FEQ(rr[i], rb[i], "value %zu", i);
		free(rr);
		((uint8_t *)d[5].data)[l.k_off] ^= 0x03;
	}

	/* a gone: b still reads the pages a encoded, and takes them back
	 * to int4 from their own codebooks. */
	kvmem_seq_free(a);
	f.s = b;
	free(ra);
	ra = fx_read(&f, 0, KVMEM_ERASE_KEEP, NULL);
	EXPECT_MEM(ra, rb, 2 * nv * sizeof(float), "%s", "after a is gone");
	ck_assert_int_eq(
		kvmem_seq_archive(b, 18, KVMEM_FMT_INT4, KVMEM_CODEC_H84), 4);
	free(ra);
	ra = fx_read(&f, 0, KVMEM_ERASE_KEEP, NULL);
	for (i = 2 * row; i < 18 * row; i += 8) {
		double amax = 0;
		int k;

		for (k = 0; k < 8; k++)
			amax = fmax(amax, fabs(rb[i + k]));
		for (k = 0; k < 8; k++)
			EXPECT_NEAR(ra[i + k], rb[i + k],
				    amax / 7 / 2 * 1.002 + 1e-6, "K value %zu",
				    i + k);
	}
	free(ra);
	free(rb);
	free(books);
	free(lost);
	fx_close(&f);
}
END_TEST

/*
 * kvmem_attend_batch() over a plain sequence and one with vq2 pages, of
 * one cache: the same bits as a kvmem_attend() of each.
 */
START_TEST(test_vq_batch)
{
	const uint32_t D = 16;
	struct kvmem_attend_opts o = { .n_heads = NH };
	struct kvmem_seq *seqs[2];
	struct kvmem_rng r;
	struct fx f;
	float q[2 * NH * 16], out[2 * NH * 16], one[NH * 16];
	size_t i;
	int k;

	/* The plain one first, sharing no page with the other: the batch's
	 * readers open on it. */
	fx_open(&f, 0, 45, KVMEM_CODEC_H84);
	seqs[1] = f.s;
	ck_assert_int_eq(
		kvmem_seq_archive(seqs[1], 34, KVMEM_FMT_VQ2, KVMEM_CODEC_H84),
		8);
	ck_assert_int_eq(kvmem_seq_create(f.c, &seqs[0]), 0);
	ck_assert_int_eq(kvmem_seq_append_all(seqs[0], f.k, f.v, f.n), 0);
	kvmem_rng_seed(&r, 0xba7c);
	for (i = 0; i < 2 * NH * D; i++)
		q[i] = (float)(2 * kvmem_rng_unit(&r) - 1);
	ck_assert_int_eq(kvmem_attend_batch(seqs, 2, 0, q, out, &o, NULL), 0);
	for (k = 0; k < 2; k++) {
		ck_assert_int_eq(
			kvmem_attend(seqs[k], 0, q + k * NH * D, one, &o, NULL),
			0);
		EXPECT_MEM(out + k * NH * D, one, NH * D * sizeof(float),
			   "sequence %d", k);
	}
	kvmem_seq_free(seqs[0]);
	fx_close(&f);
}
END_TEST

/*
 * More fours than k-means looks at: vq_learn() takes every step-th token
 * (4200 tokens of one head of 16: 16800 fours a book, every second token),
 * and the books are the plain k-means of exactly those.
 */
START_TEST(test_vq_learn_thins)
{
	const uint32_t n = 4200, D = 16;
	struct kvmem_geometry g = { .layers = 1, .kv_heads = 1, .head_dim = D };
	float *k, *v, *kv, *pts, *books, *want;
	struct kvmem_page_layout l;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	uint8_t lost[2 * E];
	uint32_t t, last, m;
	size_t i;
	int side;

	kvmem_geometry_default(&g);
	g.group_size = 16;
	g.tokens_per_page = 8;
	g.sink_tokens = 0;
	k = kvmem_check_xmalloc((size_t)n * D * sizeof(float));
	v = kvmem_check_xmalloc((size_t)n * D * sizeof(float));
	for (i = 0; i < (size_t)n * D; i++) {
		k[i] = (float)sin((double)i * 0.37);
		v[i] = (float)cos((double)i * 0.11);
	}
	ck_assert_int_eq(kvmem_page_layout(&g, 1, &l), 0);
	ck_assert_int_eq(kvmem_open_embedded(&g, 2 * (n / 8 + 4) * l.size, &c),
			 0);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append(s, 0, k, v, n), 0);
	kv = kvmem_check_xmalloc(2 * (size_t)n * D * sizeof(float));
	ck_assert_int_eq(kvmem_seq_read(s, 0, 0, n, KVMEM_ERASE_KEEP, kv,
					kv + (size_t)n * D, NULL),
			 0);
	/* The sealed pages: every whole page of 8 (a full one is sealed). */
	last = n - n % 8;
	ck_assert_int_eq(
		kvmem_seq_archive(s, n, KVMEM_FMT_VQ2, KVMEM_CODEC_H84),
		(int)(last / 8));
	books = kvmem_check_xmalloc(2 * E * 4 * sizeof(float));
	ck_assert_int_eq(kvmem_seq_codebook_read(s, 0, books, lost, NULL), 0);
	pts = kvmem_check_xmalloc((size_t)last * D * sizeof(float));
	want = kvmem_check_xmalloc(E * 4 * sizeof(float));
	for (side = 0; side < 2; side++) {
		/* last * 4 fours over 16384: every second token */
		ck_assert_uint_eq((last * 4 + KVMEM__VQ_TRAIN_MAX - 1) /
					  KVMEM__VQ_TRAIN_MAX,
				  2);
		for (t = 0, m = 0; t < last; t += 2, m++)
			memcpy(pts + (size_t)m * D,
			       kv + (size_t)side * n * D + (size_t)t * D,
			       D * sizeof(float));
		plain_kmeans(pts, (size_t)m * 4, want);
		for (i = 0; i < E * 4; i++)
			EXPECT_FEQ(books[side * E * 4 + i],
				   kvmem_half_to_float(
					   kvmem_half_from_float(want[i])),
				   "book %d entry %zu", side, i / 4);
	}
	free(k);
	free(v);
	free(kv);
	free(pts);
	free(books);
	free(want);
	kvmem_seq_free(s);
	kvmem_close(c);
}
END_TEST

/* A head_dim that is no multiple of four has no vq2; nor a geometry. */
START_TEST(test_vq_refused)
{
	struct kvmem_geometry g = { .layers = 1, .kv_heads = 1, .head_dim = 6 };
	struct kvmem_page_layout l;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	float k[6 * 12] = { 0 };

	kvmem_geometry_default(&g);
	g.group_size = 6;
	g.tokens_per_page = 4;
	g.sink_tokens = 0;
	ck_assert_int_eq(
		kvmem_page_layout_as(&g, KVMEM_FMT_VQ2, KVMEM_CODEC_H84, &l),
		-EINVAL);
	ck_assert_int_eq(kvmem_open_embedded(&g, 1 << 20, &c), 0);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append(s, 0, k, k, 12), 0);
	ck_assert_int_eq(
		kvmem_seq_archive(s, 12, KVMEM_FMT_VQ2, KVMEM_CODEC_H84),
		-EINVAL);
	kvmem_seq_free(s);
	kvmem_close(c);
	g.head_dim = 8;
	g.group_size = 8;
	g.format = KVMEM_FMT_VQ2;
	ck_assert_int_eq(kvmem_geometry_check(&g), -EINVAL);
	ck_assert_int_eq(kvmem_format_by_name("vq2"), KVMEM_FMT_VQ2);
}
END_TEST

/*
 * The budget down to vq2: a layer over it learns its codebooks from all
 * its sealed pages, and its least attended pages go to vq2 until it
 * averages the bits.
 */
START_TEST(test_vq_budget)
{
	struct kvmem_page_desc d[64];
	struct kvmem_codebook_desc cd;
	struct fx f;
	double bits = 0, values = 0;
	int np, i, n;

	fx_open(&f, 0, 45, KVMEM_CODEC_H84);
	n = kvmem_seq_archive_budget(f.s, 3.0f, KVMEM_FMT_VQ2, KVMEM_CODEC_H84);
	ck_assert_int_ge(n, 2);
	ck_assert_int_eq(kvmem_seq_codebook(f.s, 0, &cd), 0);
	np = kvmem_seq_pages(f.s, 0, d, 64);
	for (i = 0; i < np; i++)
		if (d[i].sealed && !d[i].hot) {
			bits += kvmem_format_get(d[i].format)->bits *
				(double)d[i].ntokens;
			values += d[i].ntokens;
		}
	ck_assert(bits <= 3.0 * values);
	fx_close(&f);
}
END_TEST

KVMEM_SUITE(vq)
{
	Suite *s = suite_create("vq");
	TCase *tc = tcase_create("vq2");

	tcase_add_loop_test(tc, test_vq_kmeans_plain, 0, 6);
	tcase_add_loop_test(tc, test_vq_given_books, 0, 8);
	tcase_add_test(tc, test_vq_learned_books);
	tcase_add_loop_test(tc, test_vq_attend, 0, 4);
	tcase_add_test(tc, test_vq_codebook_faults);
	tcase_add_test(tc, test_vq_lifecycle);
	tcase_add_test(tc, test_vq_forks);
	tcase_add_test(tc, test_vq_batch);
	tcase_add_test(tc, test_vq_learn_thins);
	tcase_add_test(tc, test_vq_refused);
	tcase_add_test(tc, test_vq_budget);
	suite_add_tcase(s, tc);
	return s;
}
