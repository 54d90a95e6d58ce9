/* SPDX-License-Identifier: MIT */
/*
 * check_archive.c - pages re-encoded in another format and codec: the
 * layouts a geometry allows, kvmem_page_archive() on clean, damaged and
 * refused pages, and kvmem_seq_archive() under reads, attention, forks and
 * truncation
 *
 * Expected values are computed another way than the code under test: an
 * archived page is compared with a page the encoder writes from the same
 * values under a geometry whose own format and codec are the archive's
 * (their bytes after the header must be the same), archive layouts with
 * the sealed layout of that geometry, and attention with a softmax over
 * the values read back, in doubles.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmem/cuda.h"
#include "kvmem/kvmem.h"
#include "internal.h"
#include "kvmem_check.h"
#include "quant_ref.h"
#include "rng.h"

/* ---- Helpers -------------------------------------------------------------- */

struct gcase {
	const char *name;
	uint32_t kv_heads, head_dim, tpp, group;
	int fmt, codec, key_scales;
};

static const struct gcase gcases[] = {
	{ "int4+h84 group", 2, 64, 8, 32, KVMEM_FMT_INT4, KVMEM_CODEC_H84,
	  KVMEM_SCALES_GROUP },
	{ "int4+h84 channel", 2, 32, 16, 32, KVMEM_FMT_INT4, KVMEM_CODEC_H84,
	  KVMEM_SCALES_CHANNEL },
	{ "int4+h74", 1, 32, 8, 16, KVMEM_FMT_INT4, KVMEM_CODEC_H74,
	  KVMEM_SCALES_GROUP },
	{ "int8+secded72", 2, 64, 4, 32, KVMEM_FMT_INT8, KVMEM_CODEC_SECDED72,
	  KVMEM_SCALES_GROUP },
	{ "int2+h84", 3, 32, 8, 16, KVMEM_FMT_INT2, KVMEM_CODEC_H84,
	  KVMEM_SCALES_GROUP },
	{ "fp16+golay24", 2, 32, 8, 32, KVMEM_FMT_FP16, KVMEM_CODEC_GOLAY24,
	  KVMEM_SCALES_GROUP },
};

#define NGCASE ((int)(sizeof(gcases) / sizeof(gcases[0])))

static struct kvmem_geometry gcase_geo(const struct gcase *gc, uint32_t layers)
{
	return kvmem_check_geo(layers, gc->kv_heads, gc->head_dim, gc->tpp,
			       gc->group, 2, gc->fmt, gc->codec,
			       gc->key_scales);
}

/* @g with another format and codec for its sealed pages. */
static struct kvmem_geometry geo_as(const struct kvmem_geometry *g, int fmt,
				    int codec)
{
	struct kvmem_geometry a = *g;

	a.format = (uint8_t)fmt;
	a.codec = (uint8_t)codec;
	return a;
}

static size_t page_values(const struct kvmem_geometry *g)
{
	return (size_t)g->tokens_per_page * g->kv_heads * g->head_dim;
}

static void fill(struct kvmem_rng *r, float *x, size_t n, double mag)
{
	size_t i;

	for (i = 0; i < n; i++)
		x[i] = kvmem_check_rnd_value(r, mag);
}

/* The header of the pages these tests archive: expect_archived() knows it. */
static struct kvmem_page_hdr page_hdr(const struct kvmem_geometry *g)
{
	return (struct kvmem_page_hdr){
		.seq = 7,
		.layer = 1,
		.token_start = 3 * g->tokens_per_page,
		.ntokens = g->tokens_per_page,
		.flags = KVMEM_HDR_SEALED,
		.generation = 42,
	};
}

/* A full sealed page of @g from random K and V, also returned in @k, @v. */
static uint8_t *sealed_page(const struct kvmem_geometry *g, uint64_t seed,
			    float *k, float *v)
{
	struct kvmem_page_layout l;
	const struct kvmem_page_hdr h = page_hdr(g);
	struct kvmem_rng r;
	uint8_t *page;

	ck_assert_int_eq(kvmem_page_layout(g, 0, &l), 0);
	page = kvmem_check_xmalloc(l.size);
	kvmem_rng_seed(&r, seed);
	fill(&r, k, page_values(g), 2.0);
	fill(&r, v, page_values(g), 1.0);
	ck_assert_int_eq(kvmem_page_encode(page, g, &h, 0, k, v), 0);
	return page;
}

static void expect_layout_eq(const struct kvmem_page_layout *a,
			     const struct kvmem_page_layout *b,
			     const char *what)
{
	EXPECT_EQ(a->size, b->size, "%s: size", what);
	EXPECT_EQ(a->scales_off, b->scales_off, "%s: scales_off", what);
	EXPECT_EQ(a->checks_off, b->checks_off, "%s: checks_off", what);
	EXPECT_EQ(a->k_off, b->k_off, "%s: k_off", what);
	EXPECT_EQ(a->v_off, b->v_off, "%s: v_off", what);
	EXPECT_EQ(a->nscales_k, b->nscales_k, "%s: nscales_k", what);
	EXPECT_EQ(a->nscales_v, b->nscales_v, "%s: nscales_v", what);
	EXPECT_EQ(a->scale_words, b->scale_words, "%s: scale_words", what);
	EXPECT_EQ(a->nchecks, b->nchecks, "%s: nchecks", what);
	EXPECT_EQ(a->row_words, b->row_words, "%s: row_words", what);
	EXPECT_EQ(a->row_bytes, b->row_bytes, "%s: row_bytes", what);
	EXPECT_EQ(a->row_data, b->row_data, "%s: row_data", what);
	EXPECT_EQ(a->format, b->format, "%s: format", what);
	EXPECT_EQ(a->codec, b->codec, "%s: codec", what);
	EXPECT_EQ(a->key_scales, b->key_scales, "%s: key_scales", what);
	EXPECT_EQ(a->hot, b->hot, "%s: hot", what);
}

/* Decode @page of @g: K then V, page_values() floats each. */
static float *decoded(const uint8_t *page, const struct kvmem_geometry *g,
		      struct kvmem_page_counts *pc)
{
	float *kv = kvmem_check_xmalloc(2 * page_values(g) * sizeof(float));

	EXPECT_EQ(kvmem_page_decode(page, g, kv, kv + page_values(g), NULL, pc),
		  (int)g->tokens_per_page, "%s", "decode");
	return kv;
}

/*
 * What kvmem_page_archive() of a page holding @k, @v must give: the page
 * the encoder writes from those values under a geometry whose own format
 * and codec are the archive's, after its header.
 */
static uint8_t *expected_page(const struct kvmem_geometry *g, int fmt,
			      int codec, const float *k, const float *v,
			      struct kvmem_page_hdr *hdr)
{
	const struct kvmem_geometry a = geo_as(g, fmt, codec);
	struct kvmem_page_layout l;
	const struct kvmem_page_hdr h = page_hdr(g);
	uint8_t *page;

	ck_assert_int_eq(kvmem_page_layout(&a, 0, &l), 0);
	page = kvmem_check_xmalloc(l.size);
	ck_assert_int_eq(kvmem_page_encode(page, &a, &h, 0, k, v), 0);
	ck_assert_int_eq(kvmem_page_read_header(page, &a, hdr, NULL), 0);
	return page;
}

/* @arch, archived from a page of @g, is @exp after the header. */
static void expect_archived(const uint8_t *arch, const uint8_t *exp,
			    const struct kvmem_geometry *g, int fmt, int codec,
			    const struct kvmem_page_hdr *exp_hdr,
			    const char *what)
{
	struct kvmem_page_layout l;
	struct kvmem_page_hdr h;

	ck_assert_int_eq(kvmem_page_layout_as(g, (unsigned int)fmt,
					      (unsigned int)codec, &l),
			 0);
	EXPECT_MEM(arch + KVMEM_PAGE_HDR_BYTES, exp + KVMEM_PAGE_HDR_BYTES,
		   l.size - KVMEM_PAGE_HDR_BYTES,
		   "%s: the page after its header", what);
	ck_assert_int_eq(kvmem_page_read_header(arch, g, &h, NULL), 0);
	EXPECT_EQ(h.format, fmt, "%s: header format", what);
	EXPECT_EQ(h.codec, codec, "%s: header codec", what);
	EXPECT_EQ(h.geometry, kvmem_geometry_digest(g), "%s: digest", what);
	EXPECT_EQ(h.seq, 7, "%s: seq", what);
	EXPECT_EQ(h.layer, 1, "%s: layer", what);
	EXPECT_EQ(h.token_start, 3 * g->tokens_per_page, "%s: token_start",
		  what);
	EXPECT_EQ(h.ntokens, g->tokens_per_page, "%s: ntokens", what);
	EXPECT_EQ(h.flags, KVMEM_HDR_SEALED, "%s: flags", what);
	EXPECT_EQ(h.generation, 42, "%s: generation", what);
	EXPECT_EQ(h.crc, exp_hdr->crc, "%s: CRC", what);
	EXPECT_EQ(kvmem_page_verify(arch, g, NULL), 0, "%s: verify", what);
}

/* ---- Layouts -------------------------------------------------------------- */

/*
 * What kvmem_page_layout_as() must give for vq2 in codec @c: no scales, a
 * check a row, rows of head_dim / 4 index bytes in whole codewords and
 * bytes; -EINVAL for a head_dim that is not a multiple of four, -E2BIG
 * for a page larger than the geometry's own.
 */
static void expect_vq_layout(const struct kvmem_geometry *g, int c, int ret,
			     const struct kvmem_page_layout *l,
			     const struct kvmem_page_layout *own,
			     const char *what)
{
	const unsigned int k = kvmem_codec_get(c)->data_bits;
	const unsigned int m = k % 8 == 0 ? 1 : k % 4 == 0 ? 2 : 8;
	const uint32_t words = (g->head_dim * 2 + k * m - 1) / (k * m) * m;

	if (g->head_dim % 4) {
		EXPECT_EQ(ret, -EINVAL, "%s", what);
		return;
	}
	if (ret == -E2BIG)
		return;
	EXPECT_EQ(ret, 0, "%s", what);
	if (ret)
		return;
	EXPECT_EQ(l->format, KVMEM_FMT_VQ2, "%s", what);
	EXPECT_EQ(l->nscales_k + l->nscales_v, 0, "%s", what);
	EXPECT_EQ(l->scale_words, 0, "%s", what);
	EXPECT_EQ(l->nchecks, 2 * g->kv_heads * g->tokens_per_page, "%s", what);
	EXPECT_EQ(l->row_words, words, "%s", what);
	EXPECT_EQ(l->row_data, words * k / 8, "%s", what);
	ck_assert_uint_le(l->size, own->size);
}

START_TEST(test_layout_as)
{
	const struct kvmem_geometry g = gcase_geo(&gcases[_i], 1);
	struct kvmem_page_layout own, l, exp;
	int f, c, ret;
	char what[96];

	ck_assert_int_eq(kvmem_page_layout(&g, 0, &own), 0);
	for (f = 0; f < KVMEM_FMT_NR; f++)
		for (c = 0; c < KVMEM_CODEC_NR; c++) {
			const struct kvmem_geometry a = geo_as(&g, f, c);

			snprintf(what, sizeof(what), "%s as %d/%d",
				 gcases[_i].name, f, c);
			ret = kvmem_page_layout_as(&g, (unsigned int)f,
						   (unsigned int)c, &l);
			if (f == KVMEM_FMT_FP16) {
				EXPECT_EQ(ret, -EINVAL, "%s", what);
				continue;
			}
			if (f == KVMEM_FMT_VQ2) {
				expect_vq_layout(&g, c, ret, &l, &own, what);
				continue;
			}
			ck_assert_int_eq(kvmem_page_layout(&a, 0, &exp), 0);
			if (exp.size > own.size) {
				EXPECT_EQ(ret, -E2BIG, "%s", what);
				continue;
			}
			EXPECT_EQ(ret, 0, "%s", what);
			if (!ret)
				expect_layout_eq(&l, &exp, what);
		}
	EXPECT_EQ(kvmem_page_layout_as(&g, KVMEM_FMT_NR, 0, &l), -EINVAL, "%s",
		  "format past the last");
	EXPECT_EQ(kvmem_page_layout_as(&g, KVMEM_FMT_INT4, KVMEM_CODEC_NR, &l),
		  -EINVAL, "%s", "codec past the last");
	EXPECT_EQ(kvmem_page_layout_as(NULL, KVMEM_FMT_INT4, 0, &l), -EINVAL,
		  "%s", "no geometry");
	EXPECT_EQ(kvmem_page_layout_as(&g, KVMEM_FMT_INT4, 0, NULL), -EINVAL,
		  "%s", "no layout");
}
END_TEST

/* Golay24 rows pad to a pair of words: 32 KV heads of 64 values in pages
 * of 32 tokens take a 4 KiB more than h84's (layout arithmetic of
 * kvmem/page.h: 44 words of 3 bytes a row against 64 of 1). */
START_TEST(test_layout_as_too_big)
{
	const struct kvmem_geometry g =
		kvmem_check_geo(1, 32, 64, 32, 32, 4, KVMEM_FMT_INT4,
				KVMEM_CODEC_H84, KVMEM_SCALES_GROUP);
	struct kvmem_page_layout own, l;

	ck_assert_int_eq(kvmem_page_layout(&g, 0, &own), 0);
	EXPECT_EQ(kvmem_page_layout_as(&g, KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24,
				       &l),
		  -E2BIG, "%s", "int4 + golay24 over int4 + h84");
	EXPECT_EQ(kvmem_page_layout_as(&g, KVMEM_FMT_INT2, KVMEM_CODEC_GOLAY24,
				       &l),
		  0, "%s", "int2 + golay24");
	EXPECT(l.size < own.size, "int2 + golay24 %zu, int4 + h84 %zu", l.size,
	       own.size);
}
END_TEST

/* ---- kvmem_page_archive() ------------------------------------------------- */

/* A sealed page of gcases[@gi], the values it was made of, and room. */
struct pcase {
	struct kvmem_geometry g;
	struct kvmem_page_layout own; /* its sealed layout */
	size_t n; /* values of K, and of V */
	float *k, *v;
	uint8_t *src, *dst;
};

static void pcase_open(struct pcase *pc, int gi, uint64_t seed)
{
	pc->g = gcase_geo(&gcases[gi], 1);
	pc->n = page_values(&pc->g);
	ck_assert_int_eq(kvmem_page_layout(&pc->g, 0, &pc->own), 0);
	pc->k = kvmem_check_xmalloc(pc->n * sizeof(float));
	pc->v = kvmem_check_xmalloc(pc->n * sizeof(float));
	pc->src = sealed_page(&pc->g, seed, pc->k, pc->v);
	pc->dst = kvmem_check_xmalloc(pc->own.size);
}

static void pcase_close(struct pcase *pc)
{
	free(pc->k);
	free(pc->v);
	free(pc->src);
	free(pc->dst);
}

/* Every codec the page's own format may be archived in: bit for bit. */
START_TEST(test_archive_same_format)
{
	struct kvmem_page_layout l;
	struct pcase pc;
	uint8_t *copy;
	float *want;
	int c, done = 0;
	char what[96];

	if (gcases[_i].fmt == KVMEM_FMT_FP16)
		return; /* fp16 is never an archive format */
	pcase_open(&pc, _i, 100 + (uint64_t)_i);
	copy = kvmem_check_xmalloc(pc.own.size);
	memcpy(copy, pc.src, pc.own.size);
	want = decoded(pc.src, &pc.g, NULL);
	for (c = 0; c < KVMEM_CODEC_NR; c++) {
		struct kvmem_page_hdr eh;
		struct kvmem_page_counts cnt;
		uint8_t *exp;
		float *got;

		if (kvmem_page_layout_as(&pc.g, pc.g.format, (unsigned int)c,
					 &l))
			continue;
		snprintf(what, sizeof(what), "%s to codec %d", gcases[_i].name,
			 c);
		memset(pc.dst, 0xa5, pc.own.size);
		EXPECT_EQ(kvmem_page_archive(pc.dst, pc.src, &pc.g, pc.g.format,
					     (unsigned int)c, &cnt),
			  0, "%s", what);
		EXPECT_EQ(cnt.header.corrected + cnt.scales.corrected +
				  cnt.payload.corrected,
			  0, "%s: a clean page corrects nothing", what);
		exp = expected_page(&pc.g, pc.g.format, c, pc.k, pc.v, &eh);
		expect_archived(pc.dst, exp, &pc.g, pc.g.format, c, &eh, what);
		got = decoded(pc.dst, &pc.g, NULL);
		EXPECT_MEM(got, want, 2 * pc.n * sizeof(float),
			   "%s: values bit for bit", what);
		free(got);
		free(exp);
		done++;
	}
	EXPECT(done >= 3, "%s: %d codecs", gcases[_i].name, done);
	EXPECT_MEM(pc.src, copy, pc.own.size, "%s",
		   "the source is not written");
	free(want);
	free(copy);
	pcase_close(&pc);
}
END_TEST

/* Another format: the values as decoded, quantized again. */
START_TEST(test_archive_requantize)
{
	static const struct {
		int from, to, codec;
	} cases[] = {
		{ 0, KVMEM_FMT_INT2, KVMEM_CODEC_GOLAY24 },
		{ 1, KVMEM_FMT_INT2, KVMEM_CODEC_GOLAY24 },
		{ 3, KVMEM_FMT_INT4, KVMEM_CODEC_H84 },
		{ 3, KVMEM_FMT_INT2, KVMEM_CODEC_SECDED72 },
		{ 5, KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24 },
		{ 5, KVMEM_FMT_INT8, KVMEM_CODEC_H84 },
	};
	const int fmt = cases[_i].to, codec = cases[_i].codec;
	struct kvmem_geometry a;
	struct kvmem_page_hdr eh;
	struct pcase pc;
	uint8_t *exp;
	float *was, *got, *want;
	char what[96];

	snprintf(what, sizeof(what), "%s to %d/%d", gcases[cases[_i].from].name,
		 fmt, codec);
	pcase_open(&pc, cases[_i].from, 200 + (uint64_t)_i);
	a = geo_as(&pc.g, fmt, codec);
	EXPECT_EQ(kvmem_page_archive(pc.dst, pc.src, &pc.g, (unsigned int)fmt,
				     (unsigned int)codec, NULL),
		  0, "%s", what);
	/* What it held, as a page of the new format would hold it. */
	was = decoded(pc.src, &pc.g, NULL);
	exp = expected_page(&pc.g, fmt, codec, was, was + pc.n, &eh);
	expect_archived(pc.dst, exp, &pc.g, fmt, codec, &eh, what);
	got = decoded(pc.dst, &pc.g, NULL);
	want = decoded(exp, &a, NULL);
	EXPECT_MEM(got, want, 2 * pc.n * sizeof(float), "%s: values", what);
	free(want);
	free(got);
	free(exp);
	free(was);
	pcase_close(&pc);
}
END_TEST

static void flip(uint8_t *p, size_t byte, unsigned int bit)
{
	p[byte] ^= (uint8_t)(1u << bit);
}

/* Correctable damage is corrected in what is archived, not in the source. */
START_TEST(test_archive_corrects_source)
{
	struct kvmem_page_layout l;
	struct kvmem_page_counts cnt;
	struct pcase pc;
	uint8_t *clean, *damaged;

	pcase_open(&pc, 0, 300);
	ck_assert_int_eq(kvmem_page_layout_as(&pc.g, KVMEM_FMT_INT4,
					      KVMEM_CODEC_GOLAY24, &l),
			 0);
	clean = kvmem_check_xmalloc(pc.own.size);
	damaged = kvmem_check_xmalloc(pc.own.size);
	ck_assert_int_eq(kvmem_page_archive(clean, pc.src, &pc.g,
					    KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24,
					    NULL),
			 0);
	flip(pc.src, 10, 3); /* a header word */
	flip(pc.src, pc.own.scales_off + 7, 0); /* a scale word */
	flip(pc.src, pc.own.k_off + 100, 5); /* an h84 payload word */
	flip(pc.src, pc.own.v_off + 3, 6); /* and one of V */
	memcpy(damaged, pc.src, pc.own.size);
	EXPECT_EQ(kvmem_page_archive(pc.dst, pc.src, &pc.g, KVMEM_FMT_INT4,
				     KVMEM_CODEC_GOLAY24, &cnt),
		  0, "%s", "correctable damage");
	EXPECT_EQ(cnt.header.corrected, 1, "%s", "header words corrected");
	EXPECT_EQ(cnt.scales.corrected, 1, "%s", "scale words corrected");
	EXPECT_EQ(cnt.payload.corrected, 2, "%s", "payload words corrected");
	EXPECT_MEM(pc.dst, clean, l.size, "%s",
		   "the archive of the clean page");
	EXPECT_MEM(pc.src, damaged, pc.own.size, "%s",
		   "the source is not written");
	free(damaged);
	free(clean);
	pcase_close(&pc);
}
END_TEST

static int archive_int2(uint8_t *dst, const uint8_t *src,
			const struct kvmem_geometry *g,
			struct kvmem_page_counts *cnt)
{
	return kvmem_page_archive(dst, src, g, KVMEM_FMT_INT2,
				  KVMEM_CODEC_GOLAY24, cnt);
}

/* What is lost, changed without a report, or not a sealed page is refused. */
START_TEST(test_archive_refused)
{
	struct kvmem_page_layout hot;
	struct kvmem_page_counts cnt;
	struct kvmem_page_hdr h = { .ntokens = 0 };
	struct kvmem_geometry other;
	struct pcase pc;
	uint8_t *page, *two;
	size_t w, k_off;

	pcase_open(&pc, 0, 400);
	k_off = pc.own.k_off;
	/* Two flips in one h84 word: detected, not corrected. */
	flip(pc.src, k_off + 40, 0);
	flip(pc.src, k_off + 40, 1);
	EXPECT_EQ(archive_int2(pc.dst, pc.src, &pc.g, &cnt), -EBADMSG, "%s",
		  "an uncorrectable payload word");
	EXPECT_EQ(cnt.payload.uncorrectable, 1, "%s", "counted");
	flip(pc.src, k_off + 40, 0);
	flip(pc.src, k_off + 40, 1);
	EXPECT_EQ(archive_int2(pc.dst, pc.src, &pc.g, NULL), 0, "%s",
		  "put back");

	/* A payload word that is another good codeword: no code sees it,
	 * the seal's CRC does. */
	for (w = k_off; pc.src[w] == pc.src[w + 1]; w++)
		;
	ck_assert_uint_lt(w, k_off + pc.own.row_bytes - 1);
	pc.src[w] = pc.src[w + 1];
	EXPECT_EQ(archive_int2(pc.dst, pc.src, &pc.g, &cnt), -EBADMSG, "%s",
		  "a silently changed word");
	EXPECT_EQ(cnt.payload.uncorrectable + cnt.payload.corrected, 0, "%s",
		  "no word reported it");

	/* Pages that are not sealed, or hot, or nothing. */
	ck_assert_int_eq(kvmem_page_layout(&pc.g, 1, &hot), 0);
	page = kvmem_check_xmalloc(hot.size > pc.own.size ? hot.size
							  : pc.own.size);
	h.ntokens = pc.g.tokens_per_page;
	ck_assert_int_eq(kvmem_page_encode(page, &pc.g, &h, 0, pc.k, pc.v), 0);
	EXPECT_EQ(archive_int2(pc.dst, page, &pc.g, NULL), -EINVAL, "%s",
		  "a page not sealed");
	h.flags = KVMEM_HDR_SEALED;
	ck_assert_int_eq(kvmem_page_encode(page, &pc.g, &h, 1, pc.k, pc.v), 0);
	EXPECT_EQ(archive_int2(pc.dst, page, &pc.g, NULL), -EINVAL, "%s",
		  "a hot page");
	memset(page, 0, pc.own.size);
	EXPECT_EQ(archive_int2(pc.dst, page, &pc.g, NULL), -EBADMSG, "%s",
		  "no header");

	/* Arguments. */
	ck_assert_int_eq(kvmem_page_encode(page, &pc.g, &h, 0, pc.k, pc.v), 0);
	EXPECT_EQ(archive_int2(page, page, &pc.g, NULL), -EINVAL, "%s",
		  "in place");
	two = kvmem_check_xmalloc(2 * pc.own.size);
	memcpy(two, page, pc.own.size);
	EXPECT_EQ(archive_int2(two + 64, two, &pc.g, NULL), -EINVAL, "%s",
		  "overlapping after");
	memcpy(two + 64, page, pc.own.size);
	EXPECT_EQ(archive_int2(two, two + 64, &pc.g, NULL), -EINVAL, "%s",
		  "overlapping before");
	memcpy(two, page, pc.own.size);
	EXPECT_EQ(archive_int2(two + pc.own.size, two, &pc.g, NULL), 0, "%s",
		  "adjacent");
	EXPECT_EQ(kvmem_page_archive(pc.dst, page, &pc.g, KVMEM_FMT_FP16,
				     KVMEM_CODEC_GOLAY24, NULL),
		  -EINVAL, "%s", "fp16");
	EXPECT_EQ(kvmem_page_archive(pc.dst, page, &pc.g, KVMEM_FMT_INT4, 9,
				     NULL),
		  -EINVAL, "%s", "no such codec");
	EXPECT_EQ(archive_int2(NULL, page, &pc.g, NULL), -EINVAL, "%s",
		  "no destination");
	EXPECT_EQ(archive_int2(pc.dst, NULL, &pc.g, NULL), -EINVAL, "%s",
		  "no source");
	EXPECT_EQ(archive_int2(pc.dst, page, NULL, NULL), -EINVAL, "%s",
		  "no geometry");
	other = geo_as(&pc.g, KVMEM_FMT_INT8, KVMEM_CODEC_H84);
	EXPECT_EQ(archive_int2(pc.dst, page, &other, NULL), -EINVAL, "%s",
		  "a page of another geometry");
	free(two);
	free(page);
	pcase_close(&pc);
}
END_TEST

/* An archived int4 + golay24 page corrects three flips a word, detects four. */
START_TEST(test_archived_page_radius)
{
	struct kvmem_page_layout l;
	struct kvmem_page_counts cnt;
	struct pcase pc;
	uint8_t *clean, *erased;
	float *want, *got;
	size_t w, i, lost = 0;

	pcase_open(&pc, 0, 500);
	ck_assert_int_eq(kvmem_page_layout_as(&pc.g, KVMEM_FMT_INT4,
					      KVMEM_CODEC_GOLAY24, &l),
			 0);
	ck_assert_int_eq(kvmem_page_archive(pc.dst, pc.src, &pc.g,
					    KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24,
					    NULL),
			 0);
	clean = kvmem_check_xmalloc(l.size);
	erased = kvmem_check_xmalloc(2 * pc.n);
	memcpy(clean, pc.dst, l.size);
	want = decoded(pc.dst, &pc.g, NULL);

	/* Three flips in each of 10 payload words, K and V. */
	for (w = 0; w < 10; w++) {
		size_t off = (w % 2 ? l.v_off : l.k_off) + 3 * (7 * w + 1);

		flip(pc.dst, off, 1);
		flip(pc.dst, off + 1, 4);
		flip(pc.dst, off + 2, 7);
	}
	got = decoded(pc.dst, &pc.g, &cnt);
	EXPECT_MEM(got, want, 2 * pc.n * sizeof(float), "%s",
		   "three flips a word");
	EXPECT_EQ(cnt.payload.corrected, 10, "%s", "words corrected");
	EXPECT_EQ(cnt.payload.uncorrectable, 0, "%s", "none lost");
	EXPECT_EQ(kvmem_page_scrub(pc.dst, &pc.g, &cnt), 0, "%s", "scrub");
	EXPECT_EQ(cnt.payload.corrected, 10, "%s", "scrub corrected");
	EXPECT_MEM(pc.dst, clean, l.size, "%s", "scrubbed back to the archive");

	/* Four flips in one word: detected, its values flagged. */
	flip(pc.dst, l.k_off + 30, 0);
	flip(pc.dst, l.k_off + 30, 2);
	flip(pc.dst, l.k_off + 31, 3);
	flip(pc.dst, l.k_off + 32, 5);
	EXPECT_EQ(
		kvmem_page_decode(pc.dst, &pc.g, got, got + pc.n, erased, &cnt),
		(int)pc.g.tokens_per_page, "%s", "decode");
	EXPECT_EQ(cnt.payload.uncorrectable, 1, "%s", "four flips detected");
	for (i = 0; i < 2 * pc.n; i++)
		lost += erased[i] != 0;
	EXPECT_EQ(lost, 3, "%s", "the three int4 values of its 12 bits");
	EXPECT_EQ(kvmem_page_verify(pc.dst, &pc.g, NULL), -EBADMSG, "%s",
		  "verify");
	free(want);
	free(got);
	free(clean);
	free(erased);
	pcase_close(&pc);
}
END_TEST

/* ---- kvmem_seq_archive() -------------------------------------------------- */

/*
 * The sequences: 8 KV heads of 128 values in pages of 32 tokens (int4 +
 * golay24 pages are as large as int4 + h84 ones there, int2 + golay24
 * ones smaller), 4 sink tokens: 110 tokens are the sink page, three sealed
 * pages from tokens 4, 36 and 68, and a tail of 10. Archiving before
 * token 70 takes the first two sealed pages of each layer.
 */
#define LAYERS 2
#define TOKENS 110
#define BEFORE 70
#define MAXP 16

struct fix {
	struct kvmem_geometry g;
	struct kvmem_page_layout sealed, hot;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	float *k[LAYERS], *v[LAYERS]; /* what reads gave before archiving */
};

static void read_all(struct kvmem_seq *s, uint32_t layer, uint32_t ntok,
		     float *k, float *v, struct kvmem_page_counts *pc)
{
	ck_assert_int_eq(kvmem_seq_read(s, layer, 0, ntok,
					KVMEM_ERASE_INTERPOLATE, k, v, pc),
			 0);
}

static void fix_open(struct fix *f, uint64_t seed)
{
	const size_t row = 8 * 128;
	float *k = kvmem_check_xmalloc(TOKENS * row * LAYERS * sizeof(float));
	float *v = kvmem_check_xmalloc(TOKENS * row * LAYERS * sizeof(float));
	struct kvmem_rng r;
	uint32_t l;

	f->g = kvmem_check_geo(LAYERS, 8, 128, 32, 32, 4, KVMEM_FMT_INT4,
			       KVMEM_CODEC_H84, KVMEM_SCALES_GROUP);
	ck_assert_int_eq(kvmem_page_layout(&f->g, 0, &f->sealed), 0);
	ck_assert_int_eq(kvmem_page_layout(&f->g, 1, &f->hot), 0);
	ck_assert_int_eq(kvmem_open_embedded(&f->g, 32 * f->hot.size, &f->c),
			 0);
	ck_assert_int_eq(kvmem_seq_create(f->c, &f->s), 0);
	kvmem_rng_seed(&r, seed);
	fill(&r, k, TOKENS * row * LAYERS, 2.0);
	fill(&r, v, TOKENS * row * LAYERS, 1.0);
	ck_assert_int_eq(kvmem_seq_append_all(f->s, k, v, TOKENS), 0);
	free(k);
	free(v);
	for (l = 0; l < LAYERS; l++) {
		f->k[l] = kvmem_check_xmalloc(TOKENS * row * sizeof(float));
		f->v[l] = kvmem_check_xmalloc(TOKENS * row * sizeof(float));
		read_all(f->s, l, TOKENS, f->k[l], f->v[l], NULL);
	}
}

static void fix_close(struct fix *f)
{
	uint32_t l;

	for (l = 0; l < LAYERS; l++) {
		free(f->k[l]);
		free(f->v[l]);
	}
	kvmem_close(f->c);
}

/* Pages of @s that kvmem_seq_archive(s, before, ...) must re-encode. */
static int archivable(struct kvmem_seq *s, const struct kvmem_geometry *g,
		      uint32_t before)
{
	struct kvmem_page_desc d[MAXP];
	int n = 0, np, i;
	uint32_t l;

	for (l = 0; l < g->layers; l++) {
		np = kvmem_seq_pages(s, l, d, MAXP);
		ck_assert_int_le(np, MAXP);
		for (i = 0; i < np; i++)
			n += d[i].sealed && !d[i].hot &&
			     d[i].token_start + d[i].ntokens <= before;
	}
	return n;
}

/* Every page of @s ending before @before is in @fmt + @codec, the rest in
 * the geometry's own (or FP16 when hot), each with its layout's size. */
static void expect_pages(struct kvmem_seq *s, const struct fix *f,
			 uint32_t before, int fmt, int codec)
{
	struct kvmem_page_layout al;
	struct kvmem_page_desc d[MAXP];
	uint32_t l;
	int np, i;

	ck_assert_int_eq(kvmem_page_layout_as(&f->g, (unsigned int)fmt,
					      (unsigned int)codec, &al),
			 0);
	for (l = 0; l < f->g.layers; l++) {
		np = kvmem_seq_pages(s, l, d, MAXP);
		for (i = 0; i < np; i++) {
			int arch = d[i].sealed && !d[i].hot &&
				   d[i].token_start + d[i].ntokens <= before;
			const struct kvmem_page_layout *x = d[i].hot ? &f->hot
							    : arch   ? &al
								   : &f->sealed;

			EXPECT_EQ(d[i].format, x->format,
				  "layer %u page %d format", l, i);
			EXPECT_EQ(d[i].codec, x->codec,
				  "layer %u page %d codec", l, i);
			EXPECT_EQ(d[i].size, x->size, "layer %u page %d size",
				  l, i);
		}
	}
}

/*
 * Attention of @nh query heads over @ntok tokens of @k, @v in doubles:
 * the reference the cache's attention is held to.
 */
static void ref_attend(const struct kvmem_geometry *g, uint32_t nh,
		       uint32_t ntok, const float *k, const float *v,
		       const float *q, float *out)
{
	const uint32_t D = g->head_dim, grp = nh / g->kv_heads;
	const size_t row = (size_t)g->kv_heads * D;
	double *w = kvmem_check_xmalloc(ntok * sizeof(double));
	uint32_t h, t, d;

	for (h = 0; h < nh; h++) {
		const uint32_t kh = h / grp;
		double m = -INFINITY, sum = 0.0;

		for (t = 0; t < ntok; t++) {
			double dot = 0.0;

			for (d = 0; d < D; d++)
				dot += (double)q[h * D + d] *
				       k[t * row + kh * D + d];
			w[t] = dot / sqrt((double)D);
			if (w[t] > m)
				m = w[t];
		}
		for (t = 0; t < ntok; t++)
			sum += w[t] = exp(w[t] - m);
		for (d = 0; d < D; d++) {
			double acc = 0.0;

			for (t = 0; t < ntok; t++)
				acc += w[t] * v[t * row + kh * D + d];
			out[h * D + d] = (float)(acc / sum);
		}
	}
	free(w);
}

static void expect_near_ref(const float *out, const float *ref, size_t n,
			    const char *what, const char *how, uint32_t layer)
{
	size_t i;

	for (i = 0; i < n; i++)
		EXPECT_NEAR(out[i], ref[i], 1e-4 + 1e-4 * fabsf(ref[i]),
			    "%s, %s: layer %u output %zu", what, how, layer, i);
}

/*
 * Attention over a layer holding @k, @v, against ref_attend(): on every
 * SIMD path the CPU runs, on one thread and on two, for a causal chunk of
 * the last 3 tokens and for a batch of the sequence twice (its last
 * token's query for each).
 */
static void expect_attention(struct kvmem_seq *s, const struct fix *f,
			     uint32_t layer, const float *k, const float *v,
			     const char *what)
{
	const uint32_t nh = 2 * f->g.kv_heads, D = f->g.head_dim, nq = 3;
	const size_t one = (size_t)nh * D;
	struct kvmem_seq *const two[2] = { s, s };
	float *q = kvmem_check_xmalloc(nq * one * sizeof(float));
	float *out = kvmem_check_xmalloc(nq * one * sizeof(float));
	float *ref = kvmem_check_xmalloc(nq * one * sizeof(float));
	float *qb = kvmem_check_xmalloc(2 * one * sizeof(float));
	int lv, active = kvmem__simd_active();
	struct kvmem_rng r;
	uint32_t i, th;

	kvmem_rng_seed(&r, 77 + layer);
	fill(&r, q, nq * one, 0.5);
	/* The batch: the last query for each of the two. */
	memcpy(qb, q + (nq - 1) * one, one * sizeof(float));
	memcpy(qb + one, q + (nq - 1) * one, one * sizeof(float));
	for (i = 0; i < nq; i++)
		ref_attend(&f->g, nh, TOKENS - nq + 1 + i, k, v, q + i * one,
			   ref + i * one);
	for (lv = 0; lv < KVMEM__SIMD_NR; lv++) {
		if (!kvmem__simd_supported(lv))
			continue;
		ck_assert_int_eq(kvmem__simd_force(lv), 0);
		for (th = 1; th <= 2; th++) {
			struct kvmem_attend_opts o = { .n_heads = nh,
						       .threads = th };

			ck_assert_int_eq(kvmem_attend(s, layer,
						      q + (nq - 1) * one, out,
						      &o, NULL),
					 0);
			expect_near_ref(out, ref + (nq - 1) * one, one, what,
					kvmem__simd_name(lv), layer);
			ck_assert_int_eq(kvmem_attend_causal(s, layer, q, nq,
							     TOKENS - nq, out,
							     &o, NULL),
					 0);
			expect_near_ref(out, ref, nq * one, what, "causal",
					layer);
			ck_assert_int_eq(kvmem_attend_batch(two, 2, layer, qb,
							    out, &o, NULL),
					 0);
			expect_near_ref(out, ref + (nq - 1) * one, one, what,
					"batch 0", layer);
			expect_near_ref(out + one, ref + (nq - 1) * one, one,
					what, "batch 1", layer);
		}
	}
	ck_assert_int_eq(kvmem__simd_force(active), 0);
	free(q);
	free(qb);
	free(out);
	free(ref);
}

START_TEST(test_seq_archive_same_format)
{
	const uint32_t before = BEFORE;
	struct kvmem_cache_stats st0, st1;
	struct fix f;
	float *k, *v;
	size_t row;
	uint32_t l;
	int want;

	fix_open(&f, 600);
	row = (size_t)f.g.kv_heads * f.g.head_dim;
	k = kvmem_check_xmalloc(TOKENS * row * sizeof(float));
	v = kvmem_check_xmalloc(TOKENS * row * sizeof(float));
	want = archivable(f.s, &f.g, before);
	ck_assert_int_eq(want, 2 * LAYERS);
	kvmem_cache_stats(f.c, &st0);
	EXPECT_EQ(kvmem_seq_archive(f.s, before, KVMEM_FMT_INT4,
				    KVMEM_CODEC_GOLAY24),
		  want, "%s", "pages archived");
	expect_pages(f.s, &f, before, KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24);
	kvmem_cache_stats(f.c, &st1);
	EXPECT_EQ(st1.used_bytes, st0.used_bytes, "%s",
		  "int4 + golay24 pages of this geometry are as large");
	for (l = 0; l < LAYERS; l++) {
		read_all(f.s, l, TOKENS, k, v, NULL);
		EXPECT_MEM(k, f.k[l], TOKENS * row * sizeof(float),
			   "layer %u K bit for bit", l);
		EXPECT_MEM(v, f.v[l], TOKENS * row * sizeof(float),
			   "layer %u V bit for bit", l);
		expect_attention(f.s, &f, l, f.k[l], f.v[l], "archived");
	}
	/* Already archived: nothing more to do. */
	EXPECT_EQ(kvmem_seq_archive(f.s, before, KVMEM_FMT_INT4,
				    KVMEM_CODEC_GOLAY24),
		  0, "%s", "a second time");
	EXPECT_EQ(kvmem_seq_archive(f.s, 0, KVMEM_FMT_INT4, KVMEM_CODEC_H74), 0,
		  "%s", "before 0");
	free(k);
	free(v);
	fix_close(&f);
}
END_TEST

/*
 * Every value of page @d of a layer that held @was_k, @was_v and reads
 * @k, @v (whole layers): within the bound of @g2's format of what it held
 * when @arch, the same bits if not.
 */
static void expect_page(const struct kvmem_geometry *g2, int arch,
			const struct kvmem_page_desc *d, const float *was_k,
			const float *was_v, const float *k, const float *v)
{
	const size_t row = (size_t)g2->kv_heads * g2->head_dim;
	const size_t at = d->token_start * row;
	const char *fmt = kvmem_format_get(g2->format)->name;
	uint32_t t, h, x;

	for (t = 0; t < d->ntokens; t++)
		for (h = 0; h < g2->kv_heads; h++)
			for (x = 0; x < g2->head_dim; x++) {
				const size_t i = at +
						 ((size_t)t * g2->kv_heads +
						  h) * g2->head_dim +
						 x;

				if (!arch) {
					EXPECT_FEQ(k[i], was_k[i],
						   "K (%u %u %u) kept", t, h,
						   x);
					EXPECT_FEQ(v[i], was_v[i],
						   "V (%u %u %u) kept", t, h,
						   x);
					continue;
				}
				EXPECT_NEAR(k[i], was_k[i],
					    ref_sealed_bound(g2, was_k + at, 1,
							     t, h, x),
					    "K (%u %u %u) in %s", t, h, x, fmt);
				EXPECT_NEAR(v[i], was_v[i],
					    ref_sealed_bound(g2, was_v + at, 0,
							     t, h, x),
					    "V (%u %u %u) in %s", t, h, x, fmt);
			}
}

START_TEST(test_seq_archive_int2)
{
	const uint32_t before = BEFORE;
	struct kvmem_page_layout al;
	struct kvmem_cache_stats st0, st1;
	struct kvmem_page_desc d[MAXP];
	struct kvmem_geometry g2;
	struct fix f;
	float *k, *v;
	size_t row;
	uint32_t l;
	int want;

	fix_open(&f, 700);
	row = (size_t)f.g.kv_heads * f.g.head_dim;
	k = kvmem_check_xmalloc(TOKENS * row * sizeof(float));
	v = kvmem_check_xmalloc(TOKENS * row * sizeof(float));
	ck_assert_int_eq(kvmem_page_layout_as(&f.g, KVMEM_FMT_INT2,
					      KVMEM_CODEC_GOLAY24, &al),
			 0);
	want = archivable(f.s, &f.g, before);
	kvmem_cache_stats(f.c, &st0);
	EXPECT_EQ(kvmem_seq_archive(f.s, before, KVMEM_FMT_INT2,
				    KVMEM_CODEC_GOLAY24),
		  want, "%s", "pages archived");
	expect_pages(f.s, &f, before, KVMEM_FMT_INT2, KVMEM_CODEC_GOLAY24);
	kvmem_cache_stats(f.c, &st1);
	EXPECT_EQ(st0.used_bytes - st1.used_bytes,
		  (uint64_t)want * (f.sealed.size - al.size), "%s",
		  "memory given back");
	/* The archived values are int2 of the int4 values they were. */
	g2 = geo_as(&f.g, KVMEM_FMT_INT2, KVMEM_CODEC_GOLAY24);
	for (l = 0; l < LAYERS; l++) {
		int np = kvmem_seq_pages(f.s, l, d, MAXP), j;

		read_all(f.s, l, TOKENS, k, v, NULL);
		for (j = 0; j < np; j++)
			expect_page(&g2,
				    !d[j].hot &&
					    d[j].codec == KVMEM_CODEC_GOLAY24,
				    &d[j], f.k[l], f.v[l], k, v);
		expect_attention(f.s, &f, l, k, v, "int2");
	}
	free(k);
	free(v);
	fix_close(&f);
}
END_TEST

/* Pages are shared: a fork sees the archive, and truncates through it. */
START_TEST(test_seq_archive_fork_truncate)
{
	const uint32_t before = BEFORE, cut = 50;
	struct kvmem_page_desc d[MAXP];
	struct kvmem_seq *fork;
	struct fix f;
	float *k, *v;
	size_t row, i;
	uint32_t l;
	int np, j;

	fix_open(&f, 800);
	row = (size_t)f.g.kv_heads * f.g.head_dim;
	k = kvmem_check_xmalloc(TOKENS * row * sizeof(float));
	v = kvmem_check_xmalloc(TOKENS * row * sizeof(float));
	ck_assert_int_eq(kvmem_seq_fork(f.s, &fork), 0);
	ck_assert_int_gt(kvmem_seq_archive(f.s, before, KVMEM_FMT_INT4,
					   KVMEM_CODEC_GOLAY24),
			 0);
	expect_pages(fork, &f, before, KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24);
	np = kvmem_seq_pages(fork, 0, d, MAXP);
	for (j = 0; j < np; j++)
		if (d[j].sealed)
			EXPECT_EQ(d[j].refs, 2, "page %d shared", j);
	/* Cut inside an archived page: its kept tokens become an FP16
	 * tail of their values. */
	ck_assert_int_eq(kvmem_seq_truncate(fork, cut), 0);
	for (l = 0; l < LAYERS; l++) {
		read_all(fork, l, cut, k, v, NULL);
		for (i = 0; i < cut * row; i++) {
			float ek =
				i < 36 * row ? f.k[l][i] : ref_half(f.k[l][i]);
			float ev =
				i < 36 * row ? f.v[l][i] : ref_half(f.v[l][i]);

			EXPECT_FEQ(k[i], ek, "fork layer %u K value %zu", l, i);
			EXPECT_FEQ(v[i], ev, "fork layer %u V value %zu", l, i);
		}
		read_all(f.s, l, TOKENS, k, v, NULL);
		EXPECT_MEM(k, f.k[l], TOKENS * row * sizeof(float),
			   "parent layer %u K", l);
		EXPECT_MEM(v, f.v[l], TOKENS * row * sizeof(float),
			   "parent layer %u V", l);
	}
	kvmem_seq_free(fork);
	/* Freeing the parent gives every page back, archived or not. */
	kvmem_seq_free(f.s);
	{
		struct kvmem_cache_stats st;

		kvmem_cache_stats(f.c, &st);
		EXPECT_EQ(st.used_bytes, 0, "%s", "all given back");
	}
	free(k);
	free(v);
	for (l = 0; l < LAYERS; l++) {
		free(f.k[l]);
		free(f.v[l]);
	}
	kvmem_close(f.c);
}
END_TEST

/* Lost values stay flagged: their page is not archived. An archived page's
 * own losses are flagged and rebuilt like any page's. */
START_TEST(test_seq_archive_lost_values)
{
	const uint32_t before = BEFORE;
	struct kvmem_page_layout al;
	struct kvmem_page_desc d[MAXP];
	struct kvmem_page_counts pc0, pc1;
	struct fix f;
	float *k, *v, *k2, *v2;
	uint8_t *p;
	size_t row;
	int want, np, bad = -1, j;

	fix_open(&f, 900);
	row = (size_t)f.g.kv_heads * f.g.head_dim;
	k = kvmem_check_xmalloc(TOKENS * row * sizeof(float));
	v = kvmem_check_xmalloc(TOKENS * row * sizeof(float));
	k2 = kvmem_check_xmalloc(TOKENS * row * sizeof(float));
	v2 = kvmem_check_xmalloc(TOKENS * row * sizeof(float));
	want = archivable(f.s, &f.g, before);
	np = kvmem_seq_pages(f.s, 0, d, MAXP);
	for (j = 0; j < np && bad < 0; j++)
		if (d[j].sealed && !d[j].hot)
			bad = j;
	ck_assert_int_ge(bad, 0);
	p = d[bad].data;
	flip(p, f.sealed.k_off + 9, 2);
	flip(p, f.sealed.k_off + 9, 6);
	read_all(f.s, 0, TOKENS, k, v, &pc0);
	ck_assert_uint_eq(pc0.payload.uncorrectable, 1);
	EXPECT_EQ(kvmem_seq_archive(f.s, before, KVMEM_FMT_INT4,
				    KVMEM_CODEC_GOLAY24),
		  want - 1, "%s", "all but the page with a lost word");
	np = kvmem_seq_pages(f.s, 0, d, MAXP);
	EXPECT_EQ(d[bad].codec, KVMEM_CODEC_H84, "%s", "left as it was");
	EXPECT(d[bad].data == p, "%s", "in its slot");
	read_all(f.s, 0, TOKENS, k2, v2, &pc1);
	EXPECT_EQ(pc1.payload.uncorrectable, 1, "%s", "still flagged");
	EXPECT_EQ(pc1.values_erased, pc0.values_erased, "%s",
		  "the same values erased");
	EXPECT_MEM(k2, k, TOKENS * row * sizeof(float), "%s",
		   "and rebuilt the same way");
	EXPECT_MEM(v2, v, TOKENS * row * sizeof(float), "%s", "V too");

	/* Four flips in a golay24 word of an archived page. */
	ck_assert_int_eq(kvmem_page_layout_as(&f.g, KVMEM_FMT_INT4,
					      KVMEM_CODEC_GOLAY24, &al),
			 0);
	for (j = 0; j < np; j++)
		if (d[j].codec == KVMEM_CODEC_GOLAY24 && !d[j].hot)
			break;
	ck_assert_int_lt(j, np);
	p = d[j].data;
	flip(p, al.v_off + 12, 0);
	flip(p, al.v_off + 12, 1);
	flip(p, al.v_off + 13, 2);
	flip(p, al.v_off + 14, 3);
	read_all(f.s, 0, TOKENS, k2, v2, &pc1);
	EXPECT_EQ(pc1.payload.uncorrectable, 2, "%s",
		  "the golay24 word is detected");
	EXPECT(pc1.values_erased > pc0.values_erased, "%llu values erased",
	       (unsigned long long)pc1.values_erased);
	free(k);
	free(v);
	free(k2);
	free(v2);
	fix_close(&f);
}
END_TEST

/*
 * A payload word that became another codeword: no read flags it, so its
 * values are wrong and unflagged until the archive finds the page's CRC
 * no longer matches. Then every value of the page reads as lost (rebuilt),
 * and the page is not archived.
 */
START_TEST(test_seq_archive_silent_change)
{
	struct kvmem_page_desc d[MAXP];
	struct kvmem_page_counts pc0, pc1;
	struct fix f;
	float *k, *v;
	uint8_t *p;
	size_t row, w, i, t0, t1;
	int want, np, bad = -1, j;

	fix_open(&f, 950);
	row = (size_t)f.g.kv_heads * f.g.head_dim;
	k = kvmem_check_xmalloc(TOKENS * row * sizeof(float));
	v = kvmem_check_xmalloc(TOKENS * row * sizeof(float));
	want = archivable(f.s, &f.g, BEFORE);
	np = kvmem_seq_pages(f.s, 1, d, MAXP);
	for (j = 0; j < np && bad < 0; j++)
		if (d[j].sealed && !d[j].hot)
			bad = j;
	ck_assert_int_ge(bad, 0);
	p = d[bad].data;
	for (w = f.sealed.k_off; p[w] == p[w + 1]; w++)
		;
	p[w] = p[w + 1];
	read_all(f.s, 1, TOKENS, k, v, &pc0);
	EXPECT_EQ(pc0.payload.uncorrectable + pc0.payload.corrected, 0, "%s",
		  "no word reports the change");
	EXPECT(memcmp(k, f.k[1], TOKENS * row * sizeof(float)) != 0, "%s",
	       "and a value reads wrong");
	EXPECT_EQ(kvmem_seq_archive(f.s, BEFORE, KVMEM_FMT_INT4,
				    KVMEM_CODEC_GOLAY24),
		  want - 1, "%s", "all but the changed page");
	np = kvmem_seq_pages(f.s, 1, d, MAXP);
	EXPECT_EQ(d[bad].codec, KVMEM_CODEC_H84, "%s", "left in place");
	read_all(f.s, 1, TOKENS, k, v, &pc1);
	EXPECT(pc1.values_erased >= 2 * d[bad].ntokens * row,
	       "%llu values erased for a page of %llu",
	       (unsigned long long)pc1.values_erased,
	       (unsigned long long)(2 * d[bad].ntokens * row));
	/* Outside it, every value as it was. */
	t0 = d[bad].token_start;
	t1 = t0 + d[bad].ntokens;
	for (i = 0; i < TOKENS * row; i++)
		if (i < t0 * row || i >= t1 * row) {
			EXPECT_FEQ(k[i], f.k[1][i], "K value %zu", i);
			EXPECT_FEQ(v[i], f.v[1][i], "V value %zu", i);
		}
	free(k);
	free(v);
	fix_close(&f);
}
END_TEST

START_TEST(test_seq_archive_bad_args)
{
	const struct kvmem_geometry big =
		kvmem_check_geo(1, 32, 64, 32, 32, 4, KVMEM_FMT_INT4,
				KVMEM_CODEC_H84, KVMEM_SCALES_GROUP);
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	struct fix f;

	fix_open(&f, 1000);
	EXPECT_EQ(kvmem_seq_archive(NULL, BEFORE, KVMEM_FMT_INT4,
				    KVMEM_CODEC_GOLAY24),
		  -EINVAL, "%s", "no sequence");
	EXPECT_EQ(kvmem_seq_archive(f.s, BEFORE, KVMEM_FMT_FP16,
				    KVMEM_CODEC_GOLAY24),
		  -EINVAL, "%s", "fp16");
	EXPECT_EQ(kvmem_seq_archive(f.s, BEFORE, KVMEM_FMT_NR, 0), -EINVAL,
		  "%s", "no such format");
	EXPECT_EQ(
		kvmem_seq_archive(f.s, BEFORE, KVMEM_FMT_INT4, KVMEM_CODEC_NR),
		-EINVAL, "%s", "no such codec");
	EXPECT_EQ(
		kvmem_seq_archive(f.s, BEFORE, KVMEM_FMT_INT8, KVMEM_CODEC_H84),
		-E2BIG, "%s", "int8 pages are larger than int4 ones");
	EXPECT_EQ(
		kvmem_seq_archive(f.s, BEFORE, KVMEM_FMT_INT4, KVMEM_CODEC_H84),
		0, "%s", "the geometry's own: nothing to do");
	expect_pages(f.s, &f, 0, KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24);
	fix_close(&f);

	ck_assert_int_eq(kvmem_open_embedded(&big, 16 << 20, &c), 0);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	EXPECT_EQ(kvmem_seq_archive(s, BEFORE, KVMEM_FMT_INT4,
				    KVMEM_CODEC_GOLAY24),
		  -E2BIG, "%s", "int4 + golay24 over int4 + h84");
	kvmem_close(c);
}
END_TEST

/*
 * A budget of 3 bits a value over int4 pages: in each layer the two least
 * attended of its three sealed pages go down to lm2 ((2 + 2 + 4) / 3 <=
 * 3 < (2 + 4 + 4) / 3), whatever their age; their values are lm2 of what
 * they were, the others unchanged; a budget already met changes nothing;
 * a budget of 0 takes every sealed page down, never sinks or the tail.
 */
START_TEST(test_seq_archive_budget)
{
	struct kvmem_page_desc d[MAXP], was[LAYERS][MAXP];
	struct kvmem_attend_opts o;
	struct kvmem_geometry g2;
	struct kvmem_rng r;
	struct fix f;
	float *k, *v, q[32 * 128], out[32 * 128];
	size_t row;
	uint32_t l;
	int np, i, j, rank, it;

	fix_open(&f, 1300);
	row = (size_t)f.g.kv_heads * f.g.head_dim;
	k = kvmem_check_xmalloc(TOKENS * row * sizeof(float));
	v = kvmem_check_xmalloc(TOKENS * row * sizeof(float));
	/* Attention makes the pages' importance differ. */
	kvmem_rng_seed(&r, 1301);
	memset(&o, 0, sizeof(o));
	o.n_heads = 32;
	o.importance_alpha = 0.5f;
	for (l = 0; l < LAYERS; l++)
		for (it = 0; it < 3; it++) {
			for (i = 0; i < 32 * 128; i++)
				q[i] = (float)(kvmem_rng_unit(&r) - 0.5);
			ck_assert_int_eq(kvmem_attend(f.s, l, q, out, &o, NULL),
					 0);
		}
	for (l = 0; l < LAYERS; l++)
		ck_assert_int_eq(kvmem_seq_pages(f.s, l, was[l], MAXP), 5);

	EXPECT_EQ(kvmem_seq_archive_budget(f.s, 4.0f, KVMEM_FMT_LM2,
					   KVMEM_CODEC_H84),
		  0, "%s", "a budget already met");
	EXPECT_EQ(kvmem_seq_archive_budget(f.s, 3.0f, KVMEM_FMT_LM2,
					   KVMEM_CODEC_H84),
		  2 * LAYERS, "%s", "two pages a layer");
	g2 = geo_as(&f.g, KVMEM_FMT_LM2, KVMEM_CODEC_H84);
	for (l = 0; l < LAYERS; l++) {
		np = kvmem_seq_pages(f.s, l, d, MAXP);
		ck_assert_int_eq(np, 5);
		read_all(f.s, l, TOKENS, k, v, NULL);
		for (i = 0; i < np; i++) {
			int arch = d[i].format == KVMEM_FMT_LM2;

			if (!d[i].sealed || d[i].hot) {
				EXPECT(!arch, "layer %u page %d: not sealed", l,
				       i);
				continue;
			}
			/* Its rank among the sealed pages, coldest first. */
			rank = 0;
			for (j = 0; j < np; j++)
				rank += j != i && was[l][j].sealed &&
					!was[l][j].hot &&
					(was[l][j].importance <
						 was[l][i].importance ||
					 (was[l][j].importance ==
						  was[l][i].importance &&
					  j < i));
			EXPECT_EQ(arch, rank < 2,
				  "layer %u page %d (importance %g, rank %d)",
				  l, i, was[l][i].importance, rank);
			expect_page(&g2, arch, &d[i], f.k[l], f.v[l], k, v);
		}
	}
	EXPECT_EQ(kvmem_seq_archive_budget(f.s, 0.0f, KVMEM_FMT_LM2,
					   KVMEM_CODEC_H84),
		  LAYERS, "%s", "the last int4 page of each layer");
	for (l = 0; l < LAYERS; l++) {
		np = kvmem_seq_pages(f.s, l, d, MAXP);
		for (i = 0; i < np; i++)
			EXPECT_EQ(d[i].format,
				  d[i].sealed && !d[i].hot ? KVMEM_FMT_LM2
							   : KVMEM_FMT_FP16,
				  "layer %u page %d", l, i);
	}
	/* Arguments. */
	EXPECT_EQ(kvmem_seq_archive_budget(NULL, 3.0f, KVMEM_FMT_LM2,
					   KVMEM_CODEC_H84),
		  -EINVAL, "%s", "no sequence");
	EXPECT_EQ(kvmem_seq_archive_budget(f.s, -1.0f, KVMEM_FMT_LM2,
					   KVMEM_CODEC_H84),
		  -EINVAL, "%s", "negative");
	EXPECT_EQ(kvmem_seq_archive_budget(f.s, NAN, KVMEM_FMT_LM2,
					   KVMEM_CODEC_H84),
		  -EINVAL, "%s", "NaN");
	EXPECT_EQ(kvmem_seq_archive_budget(f.s, 3.0f, KVMEM_FMT_LM4,
					   KVMEM_CODEC_H84),
		  -EINVAL, "%s", "as many bits as int4");
	EXPECT_EQ(kvmem_seq_archive_budget(f.s, 3.0f, KVMEM_FMT_FP16,
					   KVMEM_CODEC_H84),
		  -EINVAL, "%s", "fp16");
	EXPECT_EQ(kvmem_seq_archive_budget(f.s, 3.0f, KVMEM_FMT_NR,
					   KVMEM_CODEC_H84),
		  -EINVAL, "%s", "no such format");
	free(k);
	free(v);
	fix_close(&f);
}
END_TEST

/*
 * An arena with no room for the next archived page: those before it stay
 * archived, the rest as they were, and every page reads as before.
 */
START_TEST(test_seq_archive_arena_full)
{
	const struct kvmem_geometry *g;
	struct kvmem_geometry g2;
	struct kvmem_page_desc d[MAXP];
	struct kvmem_seq *two, *big;
	struct kvmem_rng r;
	struct fix f;
	float *k, *v, *rk, *rv;
	size_t row;
	uint32_t l;
	int ret, np, j;

	fix_open(&f, 1100);
	g = &f.g;
	g2 = geo_as(g, KVMEM_FMT_INT2, KVMEM_CODEC_GOLAY24);
	row = (size_t)g->kv_heads * g->head_dim;
	k = kvmem_check_xmalloc(TOKENS * row * LAYERS * sizeof(float));
	v = kvmem_check_xmalloc(TOKENS * row * LAYERS * sizeof(float));
	kvmem_rng_seed(&r, 1101);
	/* Two int2 pages: the sealed pages of a layer of 69 tokens. */
	ck_assert_int_eq(kvmem_seq_create(f.c, &two), 0);
	fill(&r, k, 69 * row, 1.0);
	fill(&r, v, 69 * row, 1.0);
	ck_assert_int_eq(kvmem_seq_append(two, 0, k, v, 69), 0);
	ck_assert_int_eq(kvmem_seq_archive(two, UINT32_MAX, KVMEM_FMT_INT2,
					   KVMEM_CODEC_GOLAY24),
			 2);
	/* Another sequence takes what is left of the arena, and then, in
	 * int2 pages, what its own pages leave. */
	ck_assert_int_eq(kvmem_seq_create(f.c, &big), 0);
	do {
		fill(&r, k, row * LAYERS, 1.0);
		fill(&r, v, row * LAYERS, 1.0);
		ret = kvmem_seq_append_all(big, k, v, 1);
	} while (!ret);
	ck_assert_int_eq(ret, -ENOMEM);
	ck_assert_uint_gt(kvmem_seq_len(big, 0), 100);
	EXPECT_EQ(kvmem_seq_archive(big, UINT32_MAX, KVMEM_FMT_INT2,
				    KVMEM_CODEC_GOLAY24),
		  -ENOMEM, "%s", "the arena runs out");
	/* Room for two int2 pages of the four to archive. */
	kvmem_seq_free(two);
	EXPECT_EQ(kvmem_seq_archive(f.s, BEFORE, KVMEM_FMT_INT2,
				    KVMEM_CODEC_GOLAY24),
		  -ENOMEM, "%s", "room for two pages");
	for (l = 0; l < LAYERS; l++) {
		np = kvmem_seq_pages(f.s, l, d, MAXP);
		rk = k;
		rv = v;
		read_all(f.s, l, TOKENS, rk, rv, NULL);
		for (j = 0; j < np; j++) {
			const int arch = l == 0 && (j == 1 || j == 2);

			EXPECT_EQ(d[j].codec,
				  arch	     ? KVMEM_CODEC_GOLAY24
				  : d[j].hot ? KVMEM_CODEC_GOLAY24
					     : KVMEM_CODEC_H84,
				  "layer %u page %d", l, j);
			EXPECT_EQ(d[j].format,
				  arch	     ? KVMEM_FMT_INT2
				  : d[j].hot ? KVMEM_FMT_FP16
					     : KVMEM_FMT_INT4,
				  "layer %u page %d", l, j);
			expect_page(&g2, arch, &d[j], f.k[l], f.v[l], rk, rv);
		}
	}
	free(k);
	free(v);
	kvmem_seq_free(big);
	fix_close(&f);
}
END_TEST

KVMEM_SUITE(archive)
{
	Suite *s = suite_create("archive");
	TCase *tp = tcase_create("page");
	TCase *ts = tcase_create("seq");

	tcase_add_loop_test(tp, test_layout_as, 0, NGCASE);
	tcase_add_test(tp, test_layout_as_too_big);
	tcase_add_loop_test(tp, test_archive_same_format, 0, NGCASE);
	tcase_add_loop_test(tp, test_archive_requantize, 0, 6);
	tcase_add_test(tp, test_archive_corrects_source);
	tcase_add_test(tp, test_archive_refused);
	tcase_add_test(tp, test_archived_page_radius);
	suite_add_tcase(s, tp);
	tcase_set_timeout(ts, 60);
	tcase_add_test(ts, test_seq_archive_same_format);
	tcase_add_test(ts, test_seq_archive_int2);
	tcase_add_test(ts, test_seq_archive_fork_truncate);
	tcase_add_test(ts, test_seq_archive_lost_values);
	tcase_add_test(ts, test_seq_archive_silent_change);
	tcase_add_test(ts, test_seq_archive_bad_args);
	tcase_add_test(ts, test_seq_archive_arena_full);
	tcase_add_test(ts, test_seq_archive_budget);
	suite_add_tcase(s, ts);
	return s;
}
