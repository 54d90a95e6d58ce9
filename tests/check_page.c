/* SPDX-License-Identifier: MIT */
/*
 * check_page.c - the protected KV page against a reference reading of
 * kvmem/page.h
 *
 * Every page written by the library is taken apart here without it: each
 * codeword is checked against the reference encoders of ecc_ref.c (built
 * from the paper's matrices), the header, scale and payload bitstreams are
 * read one bit at a time in the order the diagram in page.h gives, scales
 * and quantized values are compared with the reference quantizer of
 * quant_ref.c, written from quant.h (bit-level FP16, "smallest FP16 >=
 * amax / qmax" by search, round() in double), every byte outside the
 * regions must be zero and the CRC is recomputed bit by bit (ecc_ref.c).
 * Decoded values must be exactly q * s of what the page holds and within
 * s / 2 of the input.
 *
 * Errors are put in with the fault injector in EXACT mode word by word, so
 * which words got how many flips is known, and the expected counts and
 * erasure maps follow from the layout alone.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ecc_ref.h"
#include "internal.h"
#include "kvmem/crc32c.h"
#include "kvmem/ecc.h"
#include "kvmem/inject.h"
#include "kvmem/kvmem.h"
#include "kvmem/page.h"
#include "kvmem/quant.h"
#include "kvmem_check.h"
#include "quant_ref.h"
#include "rng.h"

/* ---- The contracts, written down ----------------------------------------- */

_Static_assert(sizeof(struct kvmem_page_hdr) == 64, "header is 64 bytes");

/* Header, scales and hot pages: golay24 (12 data bits in 3 bytes). */
#define META KVMEM_CODEC_GOLAY24
#define HDR_WORDS 43
#define HDR_BYTES (HDR_WORDS * 3)
#define SW_BYTES 3

/* ---- Words --------------------------------------------------------------- */

/*
 * The data of the stored word @w, which must be a valid codeword: the codes
 * are systematic, data in the low k bits.
 */
static uint64_t word_data(int codec, const uint8_t *w, const char *what,
			  size_t idx, const char *name)
{
	const struct ref_codec *c = &ref_codecs[codec];
	uint64_t d = ref_get_le(w, c->k == 64 ? 8 : c->wb);
	uint8_t exp[9];

	if (c->k < 64)
		d &= (1ull << c->k) - 1;
	ref_word(codec, d, exp);
	EXPECT_MEM(w, exp, c->wb,
		   "%s: %s word %zu is not the %s codeword of "
		   "its data",
		   name, what, idx, c->name);
	return d;
}

/* ---- Reference layout ---------------------------------------------------- */

struct rlay {
	unsigned int fmt, codec, bits, k, wb;
	uint32_t G; /* groups per row */
	uint32_t nk, nv, sw; /* scales, scale words */
	uint32_t nc; /* checks: per 24 scales, or per row of an fp16 page */
	uint32_t rw, rb, rd; /* row words, bytes, data bytes */
	size_t rows; /* rows per block */
	size_t blk; /* bytes per block */
};

static void ref_layout(const struct kvmem_geometry *g, int hot, struct rlay *r)
{
	memset(r, 0, sizeof(*r));
	r->fmt = hot ? KVMEM_FMT_FP16 : g->format;
	r->codec = hot ? META : g->codec;
	r->bits = ref_fmts[r->fmt].bits;
	r->k = ref_codecs[r->codec].k;
	r->wb = ref_codecs[r->codec].wb;
	r->G = g->head_dim / g->group_size;
	/* Whole codewords, and whole bytes of data. */
	r->rw = (g->head_dim * r->bits + r->k - 1) / r->k;
	while (r->rw * r->k % 8)
		r->rw++;
	r->rb = r->rw * r->wb;
	r->rd = r->rw * r->k / 8;
	if (r->fmt != KVMEM_FMT_FP16) {
		r->nv = g->kv_heads * g->tokens_per_page * r->G;
		r->nk = g->key_scales == KVMEM_SCALES_CHANNEL
				? g->kv_heads * g->head_dim
				: r->nv;
	}
	/* 12 bits a word, words in pairs (whole bytes). */
	r->sw = ((r->nk + r->nv) * 16 + 23) / 24 * 2;
	r->rows = (size_t)g->kv_heads * g->tokens_per_page;
	r->nc = r->fmt != KVMEM_FMT_FP16 ? (r->nk + r->nv + 23) / 24
					 : 2 * (uint32_t)r->rows;
	r->blk = r->rows * r->rb;
}

static void check_layout(const struct kvmem_geometry *g, int hot,
			 struct kvmem_page_layout *l, const char *name)
{
	struct rlay r;
	size_t kend, vend;

	ref_layout(g, hot, &r);
	memset(l, 0xa5, sizeof(*l));
	ck_assert_int_eq(kvmem_page_layout(g, hot, l), 0);
	EXPECT_EQ(l->hot, !!hot, "%s", name);
	EXPECT_EQ(l->format, r.fmt, "%s", name);
	EXPECT_EQ(l->codec, r.codec, "%s", name);
	if (!hot)
		EXPECT_EQ(l->key_scales, g->key_scales, "%s", name);
	EXPECT_EQ(l->nscales_k, r.nk, "%s", name);
	EXPECT_EQ(l->nscales_v, r.nv, "%s", name);
	EXPECT_EQ(l->scale_words, r.sw, "%s", name);
	EXPECT_EQ(l->row_words, r.rw, "%s", name);
	EXPECT_EQ(l->row_bytes, r.rb, "%s", name);
	EXPECT_EQ(l->row_data, r.rd, "%s", name);
	EXPECT_EQ((uint64_t)l->row_words * r.wb, l->row_bytes, "%s", name);
	EXPECT((uint64_t)l->row_words * r.k >= (uint64_t)g->head_dim * r.bits,
	       "%s", name);
	EXPECT_EQ((uint64_t)l->row_words * r.k % 8, 0, "%s", name);
	EXPECT_EQ(l->size % KVMEM_PAGE_ALIGN, 0, "%s", name);
	EXPECT_EQ(l->scales_off % 64, 0, "%s", name);
	EXPECT_EQ(l->k_off % 64, 0, "%s", name);
	EXPECT_EQ(l->v_off % 64, 0, "%s", name);
	EXPECT(l->scales_off >= HDR_BYTES, "%s: scales_off %zu", name,
	       l->scales_off);
	/* The checks follow the scales, two words each. */
	EXPECT_EQ(l->nchecks, r.nc, "%s", name);
	EXPECT_EQ(l->checks_off, l->scales_off + (size_t)r.sw * SW_BYTES, "%s",
		  name);
	EXPECT(l->checks_off + (size_t)r.nc * 2 * SW_BYTES <= l->k_off,
	       "%s: checks_off %zu + %u checks > k_off %zu", name,
	       l->checks_off, r.nc, l->k_off);
	kend = l->k_off + r.blk;
	vend = l->v_off + r.blk;
	EXPECT(kend <= l->v_off, "%s: K ends at %zu > v_off %zu", name, kend,
	       l->v_off);
	EXPECT(vend <= l->size, "%s: V ends at %zu > size %zu", name, vend,
	       l->size);
	/* "zero padding to a multiple of 4 KiB": no more than that. */
	EXPECT(l->size - vend < KVMEM_PAGE_ALIGN, "%s: size %zu, V ends at %zu",
	       name, l->size, vend);
	EXPECT(l->size >= HDR_BYTES + (size_t)(r.sw + 2 * r.nc) * SW_BYTES +
				  2 * r.blk,
	       "%s: size %zu", name, l->size);
}

/* ---- Geometries and cases ------------------------------------------------ */

struct gdef {
	uint32_t layers, kv_heads, head_dim, tpp, group, sink;
};

static const struct gdef geoms[] = {
	{ 2, 2, 32, 4, 16, 1 },	  { 2, 3, 64, 16, 32, 4 },
	{ 1, 2, 20, 5, 5, 5 }, /* odd sizes: golay rows need padding */
	{ 3, 1, 3, 7, 3, 0 }, /* rows shorter than a word */
	{ 1, 1, 32, 1, 32, 1 }, /* one token, one head */
	{ 4, 8, 128, 32, 32, 4 }, /* realistic */
	{ 2, 3, 16, 6, 1, 2 }, /* a scale per value */
};

#define REALISTIC 5

#define NGEOM ((int)(sizeof(geoms) / sizeof(geoms[0])))

static void mkgeom(struct kvmem_geometry *g, const struct gdef *d,
		   unsigned int fmt, unsigned int codec, unsigned int ks)
{
	memset(g, 0, sizeof(*g));
	g->layers = d->layers;
	g->kv_heads = d->kv_heads;
	g->head_dim = d->head_dim;
	g->tokens_per_page = d->tpp;
	g->group_size = d->group;
	g->sink_tokens = d->sink;
	g->format = (uint8_t)fmt;
	g->codec = (uint8_t)codec;
	g->key_scales = (uint8_t)ks;
}

/* One page: its geometry, input, image and what was read out of it. */
struct pcase {
	char name[160];
	struct kvmem_geometry g;
	int hot;
	uint32_t ntok, flags;
	struct kvmem_rng rng;
	struct kvmem_page_layout l;
	struct rlay r;
	size_t nvals; /* ntok * kv_heads * head_dim */
	size_t pvals; /* tokens_per_page * kv_heads * head_dim */
	struct kvmem_page_hdr hin; /* as given to encode */
	struct kvmem_page_hdr hexp; /* as it must read back */
	float *k, *v; /* input, ntok rows */
	uint8_t *page;
	uint16_t *scales; /* nk + nv, as stored */
	uint32_t *raw[2]; /* K, V values as stored, [t][h][c], pvals each */
};

/* Rows of [kv_heads][head_dim]; keys get outlier channels. */
static void fill_rows(struct kvmem_rng *r, float *x, uint32_t ntok,
		      const struct kvmem_geometry *g, int keys)
{
	uint32_t t, h, c;

	for (t = 0; t < ntok; t++)
		for (h = 0; h < g->kv_heads; h++) {
			double mag = ldexp(1.0 + kvmem_rng_unit(r),
					   (int)kvmem_rng_below(r, 16) - 10);

			for (c = 0; c < g->head_dim; c++) {
				float *p = &x[((size_t)t * g->kv_heads + h) *
						      g->head_dim +
					      c];

				*p = kvmem_check_rnd_value(r, mag);
				if (keys && c % 13 == 5)
					*p *= 25;
			}
		}
}

static size_t vidx(const struct pcase *pc, uint32_t t, uint32_t h, uint32_t c)
{
	return ((size_t)t * pc->g.kv_heads + h) * pc->g.head_dim + c;
}

/* Index into the scales of value (t, h, c) of block @isv. */
static size_t scale_idx(const struct pcase *pc, int isv, uint32_t t, uint32_t h,
			uint32_t c)
{
	const struct kvmem_geometry *g = &pc->g;
	size_t grp = ((size_t)h * g->tokens_per_page + t) * pc->r.G +
		     c / g->group_size;

	if (isv)
		return pc->r.nk + grp;
	if (g->key_scales == KVMEM_SCALES_CHANNEL)
		return (size_t)h * g->head_dim + c;
	return grp;
}

static void case_free(struct pcase *pc)
{
	free(pc->k);
	free(pc->v);
	free(pc->page);
	free(pc->scales);
	free(pc->raw[0]);
	free(pc->raw[1]);
	memset(pc, 0, sizeof(*pc));
}

/* Geometry @g, kind @hot, @ntok tokens: fill in input and encode. */
static void case_setup(struct pcase *pc, const struct kvmem_geometry *g,
		       int hot, uint32_t ntok, uint32_t flags, uint64_t seed)
{
	struct kvmem_page_hdr *h = &pc->hin;

	memset(pc, 0, sizeof(*pc));
	pc->g = *g;
	pc->hot = hot;
	pc->ntok = ntok;
	pc->flags = flags;
	snprintf(pc->name, sizeof(pc->name),
		 "%s+%s%s kvh %u hd %u tpp %u group %u, %s page, %u tokens, "
		 "flags %#x, seed %#" PRIx64,
		 ref_fmts[g->format].name, ref_codecs[g->codec].name,
		 g->key_scales ? " channel-keys" : "", g->kv_heads, g->head_dim,
		 g->tokens_per_page, g->group_size, hot ? "hot" : "sealed-kind",
		 ntok, flags, seed);
	kvmem_rng_seed(&pc->rng, seed);
	check_layout(g, hot, &pc->l, pc->name);
	ref_layout(g, hot, &pc->r);
	pc->nvals = (size_t)ntok * g->kv_heads * g->head_dim;
	pc->pvals = (size_t)g->tokens_per_page * g->kv_heads * g->head_dim;
	pc->k = kvmem_check_xmalloc(pc->nvals * sizeof(float));
	pc->v = kvmem_check_xmalloc(pc->nvals * sizeof(float));
	fill_rows(&pc->rng, pc->k, ntok, g, 1);
	fill_rows(&pc->rng, pc->v, ntok, g, 0);
	pc->page = aligned_alloc(KVMEM_PAGE_ALIGN, pc->l.size);
	ck_assert_ptr_nonnull(pc->page);
	memset(pc->page, 0xa5, pc->l.size);

	memset(h, 0, sizeof(*h));
	h->magic = 0xdeadbeef; /* all of these are the library's to fill */
	h->version = 0x77;
	h->format = 0xee;
	h->codec = 0xee;
	h->geometry = 0x1234;
	h->crc = 0x5555aaaa;
	h->seq = kvmem_rng_next(&pc->rng);
	h->layer = (uint32_t)kvmem_rng_below(&pc->rng, g->layers);
	h->token_start = (uint32_t)kvmem_rng_below(&pc->rng, 1u << 20);
	h->ntokens = ntok;
	h->flags = flags;
	h->generation = kvmem_rng_next(&pc->rng);
	ck_assert_int_eq(kvmem_page_encode(pc->page, g, h, hot, pc->k, pc->v),
			 0);

	pc->hexp = *h;
	pc->hexp.magic = KVMEM_PAGE_MAGIC;
	pc->hexp.version = KVMEM_PAGE_VERSION;
	pc->hexp.format = (uint8_t)pc->r.fmt;
	pc->hexp.codec = (uint8_t)pc->r.codec;
	pc->hexp.geometry = kvmem_geometry_digest(g);
	pc->hexp.flags = flags | (hot ? KVMEM_HDR_HOT : 0);
	pc->hexp.crc =
		ref_crc32c(0, pc->page + HDR_BYTES, pc->l.size - HDR_BYTES);
	pc->scales = kvmem_check_xmalloc((pc->r.nk + pc->r.nv + 1) *
					 sizeof(uint16_t));
	pc->raw[0] = kvmem_check_xmalloc(pc->pvals * sizeof(uint32_t));
	pc->raw[1] = kvmem_check_xmalloc(pc->pvals * sizeof(uint32_t));
}

/* All bytes of [from, to) are zero. */
static void check_zero(const struct pcase *pc, size_t from, size_t to,
		       const char *what)
{
	size_t i;

	for (i = from; i < to; i++)
		EXPECT_EQ(pc->page[i], 0, "%s: byte %zu of %s [%zu, %zu)",
			  pc->name, i, what, from, to);
}

static void check_header_image(struct pcase *pc)
{
	uint8_t data[HDR_WORDS * 12 / 8 + 1] = { 0 }, exp[64];
	struct kvmem_page_hdr got;
	uint32_t hcrc;
	unsigned int w;

	for (w = 0; w < HDR_WORDS; w++)
		ref_put_bits(data, 12 * w, 12,
			     word_data(META, pc->page + SW_BYTES * w, "header",
				       w, pc->name));
	EXPECT_EQ(ref_get_bits(data, 512, 4), 0, "%s: the header's spare bits",
		  pc->name);
	memcpy(&got, data, sizeof(got));
	if (!(pc->flags & KVMEM_HDR_SEALED))
		pc->hexp.crc = got.crc; /* only set at seal */
	EXPECT_EQ(got.magic, pc->hexp.magic, "%s", pc->name);
	EXPECT_EQ(got.version, pc->hexp.version, "%s", pc->name);
	EXPECT_EQ(got.format, pc->hexp.format, "%s", pc->name);
	EXPECT_EQ(got.codec, pc->hexp.codec, "%s", pc->name);
	EXPECT_EQ(got.geometry, pc->hexp.geometry, "%s", pc->name);
	EXPECT_EQ(got.seq, pc->hexp.seq, "%s", pc->name);
	EXPECT_EQ(got.layer, pc->hexp.layer, "%s", pc->name);
	EXPECT_EQ(got.token_start, pc->hexp.token_start, "%s", pc->name);
	EXPECT_EQ(got.ntokens, pc->hexp.ntokens, "%s", pc->name);
	EXPECT_EQ(got.flags, pc->hexp.flags, "%s", pc->name);
	EXPECT_EQ(got.generation, pc->hexp.generation, "%s", pc->name);
	EXPECT_EQ(got.crc, pc->hexp.crc, "%s: CRC-32C of bytes [%d, %zu)",
		  pc->name, HDR_BYTES, pc->l.size);
	/* hcrc: the CRC-32C of the 64 bytes with hcrc 0. */
	memcpy(exp, &pc->hexp, sizeof(exp));
	memset(exp + 52, 0, 4);
	hcrc = ref_crc32c(0, exp, sizeof(exp));
	EXPECT_EQ(got.hcrc, hcrc, "%s: the header's own CRC", pc->name);
	memcpy(exp + 52, &hcrc, 4);
	EXPECT_MEM(data, exp, sizeof(exp), "%s: header bytes", pc->name);
}

/* The data bits of check @i (two words at checks_off + 6 i). */
static uint32_t check_word(const struct pcase *pc, size_t i)
{
	const uint8_t *w = pc->page + pc->l.checks_off + 2 * SW_BYTES * i;

	return (uint32_t)(word_data(META, w, "check", 2 * i, pc->name) |
			  word_data(META, w + SW_BYTES, "check", 2 * i + 1,
				    pc->name)
				  << 12);
}

/*
 * The checks, recomputed: the low 24 bits of the CRC-32C of each 48 bytes
 * of the scale stream (as check_scales_image() read it), or of each row's
 * data bytes in an fp16 page (its FP16 values, then zeros); checks of
 * rows never written are zero.
 */
static void check_checks_image(struct pcase *pc)
{
	const struct rlay *r = &pc->r;
	const size_t nsc = r->nk + r->nv;
	uint8_t *b = kvmem_check_xmalloc(nsc * 2 + r->rd + 1);
	size_t i, j, len;

	if (r->fmt != KVMEM_FMT_FP16) {
		for (i = 0; i < nsc; i++) {
			b[2 * i] = (uint8_t)pc->scales[i];
			b[2 * i + 1] = (uint8_t)(pc->scales[i] >> 8);
		}
		for (i = 0; i < r->nc; i++) {
			len = nsc * 2 - 48 * i < 48 ? nsc * 2 - 48 * i : 48;
			EXPECT_EQ(check_word(pc, i),
				  ref_crc32c(0, b + 48 * i, len) & 0xffffff,
				  "%s: check of scales [%zu, %zu)", pc->name,
				  24 * i, 24 * i + len / 2);
		}
		free(b);
		return;
	}
	for (i = 0; i < r->nc; i++) {
		/* [K, V][kv_head][token], as pc->raw[is_v] holds them. */
		const int isv = i >= r->rows;
		const uint32_t h =
			(uint32_t)(i % r->rows / pc->g.tokens_per_page);
		const uint32_t t = (uint32_t)(i % pc->g.tokens_per_page);

		if (t >= pc->ntok) {
			EXPECT_EQ(check_word(pc, i), 0,
				  "%s: check of row %zu, past ntokens",
				  pc->name, i);
			continue;
		}
		memset(b, 0, r->rd);
		for (j = 0; j < pc->g.head_dim; j++) {
			uint32_t raw =
				pc->raw[isv][vidx(pc, t, h, (uint32_t)j)];

			b[2 * j] = (uint8_t)raw;
			b[2 * j + 1] = (uint8_t)(raw >> 8);
		}
		EXPECT_EQ(check_word(pc, i), ref_crc32c(0, b, r->rd) & 0xffffff,
			  "%s: check of %s head %u token %u", pc->name,
			  isv ? "V" : "K", h, t);
	}
	free(b);
}

/* Read the scales out of the page and check them against the input. */
static void check_scales_image(struct pcase *pc)
{
	const struct kvmem_geometry *g = &pc->g;
	const struct rlay *r = &pc->r;
	const int fmt = r->fmt;
	size_t nsc = r->nk + r->nv, i;
	uint8_t *data = kvmem_check_xmalloc((size_t)r->sw * 2 + 1);
	uint32_t t, h, c;

	for (i = 0; i < r->sw; i++)
		ref_put_bits(
			data, 12 * i, 12,
			word_data(META,
				  pc->page + pc->l.scales_off + SW_BYTES * i,
				  "scale", i, pc->name));
	for (i = 0; i < nsc; i++)
		pc->scales[i] = (uint16_t)ref_get_bits(data, 16 * i, 16);
	for (i = nsc * 16; i < (size_t)r->sw * 12; i++)
		EXPECT_EQ(ref_get_bits(data, i, 1), 0,
			  "%s: spare bit %zu of the scales", pc->name, i);
	free(data);
	if (!nsc)
		return;

	for (h = 0; h < g->kv_heads; h++)
		for (t = 0; t < g->tokens_per_page; t++)
			for (c = 0; c < g->head_dim; c += g->group_size) {
				uint16_t ek = 0, ev = 0;

				if (t < pc->ntok) {
					ek = ref_scale(
						fmt, &pc->k[vidx(pc, t, h, c)],
						g->group_size, 1);
					ev = ref_scale(
						fmt, &pc->v[vidx(pc, t, h, c)],
						g->group_size, 1);
				}
				if (g->key_scales == KVMEM_SCALES_GROUP)
					EXPECT_EQ(pc->scales[scale_idx(pc, 0, t,
								       h, c)],
						  ek,
						  "%s: K scale of head %u "
						  "token %u channel %u",
						  pc->name, h, t, c);
				EXPECT_EQ(pc->scales[scale_idx(pc, 1, t, h, c)],
					  ev,
					  "%s: V scale of head %u token %u "
					  "channel %u",
					  pc->name, h, t, c);
			}
	if (g->key_scales == KVMEM_SCALES_CHANNEL)
		for (h = 0; h < g->kv_heads; h++)
			for (c = 0; c < g->head_dim; c++)
				EXPECT_EQ(pc->scales[scale_idx(pc, 0, 0, h, c)],
					  ref_scale(fmt,
						    &pc->k[vidx(pc, 0, h, c)],
						    pc->ntok,
						    (size_t)g->kv_heads *
							    g->head_dim),
					  "%s: K scale of head %u channel %u",
					  pc->name, h, c);
}

/* Read the payload out of the page and check it against the input. */
static void check_payload_image(struct pcase *pc, int isv)
{
	const struct kvmem_geometry *g = &pc->g;
	const struct rlay *r = &pc->r;
	const float *x = isv ? pc->v : pc->k;
	size_t off = isv ? pc->l.v_off : pc->l.k_off;
	uint8_t *row = kvmem_check_xmalloc(r->rd + 8);
	uint32_t t, h, c, j;
	size_t b;

	for (h = 0; h < g->kv_heads; h++)
		for (t = 0; t < g->tokens_per_page; t++) {
			size_t ri = (size_t)h * g->tokens_per_page + t;
			const uint8_t *rp = pc->page + off + ri * r->rb;

			memset(row, 0, r->rd + 8);
			for (j = 0; j < r->rw; j++)
				ref_put_bits(row, (size_t)j * r->k, r->k,
					     word_data((int)r->codec,
						       rp + (size_t)j * r->wb,
						       isv ? "V" : "K",
						       ri * r->rw + j,
						       pc->name));
			for (b = (size_t)g->head_dim * r->bits;
			     b < (size_t)r->rw * r->k; b++)
				EXPECT_EQ(ref_get_bits(row, b, 1), 0,
					  "%s: %s head %u token %u spare bit "
					  "%zu",
					  pc->name, isv ? "V" : "K", h, t, b);
			for (c = 0; c < g->head_dim; c++) {
				uint32_t raw = (uint32_t)ref_get_bits(
					row, (size_t)c * r->bits, r->bits);
				uint32_t rq, alt;

				pc->raw[isv][vidx(pc, t, h, c)] = raw;
				if (t >= pc->ntok) {
					EXPECT_EQ(raw, 0,
						  "%s: %s head %u token %u "
						  "(past ntokens) channel %u",
						  pc->name, isv ? "V" : "K", h,
						  t, c);
					continue;
				}
				if (r->fmt == KVMEM_FMT_FP16) {
					EXPECT_EQ(raw,
						  ref_f2h(x[vidx(pc, t, h, c)]),
						  "%s: %s head %u token %u "
						  "channel %u = %a",
						  pc->name, isv ? "V" : "K", h,
						  t, c, x[vidx(pc, t, h, c)]);
					continue;
				}
				ref_code(
					(int)r->fmt, x[vidx(pc, t, h, c)],
					pc->scales[scale_idx(pc, isv, t, h, c)],
					&rq, &alt);
				if (raw != alt)
					EXPECT_EQ(raw, rq,
						  "%s: %s head %u token %u "
						  "channel %u = %a",
						  pc->name, isv ? "V" : "K", h,
						  t, c, x[vidx(pc, t, h, c)]);
			}
		}
	free(row);
}

/* The page image, taken apart: everything as page.h draws it. */
static void check_image(struct pcase *pc)
{
	const struct kvmem_page_layout *l = &pc->l;

	check_header_image(pc);
	check_scales_image(pc);
	check_payload_image(pc, 0);
	check_payload_image(pc, 1);
	check_checks_image(pc);
	check_zero(pc, HDR_BYTES, l->scales_off, "header-scales gap");
	check_zero(pc, l->checks_off + (size_t)pc->r.nc * 2 * SW_BYTES,
		   l->k_off, "checks-K gap");
	check_zero(pc, l->k_off + pc->r.blk, l->v_off, "K-V gap");
	check_zero(pc, l->v_off + pc->r.blk, l->size, "padding");
}

/* What value (t, h, c) of block @isv must decode to, from the image. */
static float expected_value(const struct pcase *pc, int isv, uint32_t t,
			    uint32_t h, uint32_t c)
{
	uint32_t raw = pc->raw[isv][vidx(pc, t, h, c)];

	if (pc->r.fmt == KVMEM_FMT_FP16)
		return ref_h2f((uint16_t)raw);
	return ref_read((int)pc->r.fmt, raw,
			pc->scales[scale_idx(pc, isv, t, h, c)]);
}

#define SENTINEL 0x7fc0beefu

struct decoded {
	float *k, *v;
	uint8_t *erased;
	struct kvmem_page_counts counts;
	int rc;
};

static void decode(const struct pcase *pc, struct decoded *d)
{
	size_t i;

	d->k = kvmem_check_xmalloc(pc->pvals * sizeof(float));
	d->v = kvmem_check_xmalloc(pc->pvals * sizeof(float));
	d->erased = kvmem_check_xmalloc(2 * pc->pvals);
	for (i = 0; i < pc->pvals; i++) {
		uint32_t s = SENTINEL;

		memcpy(&d->k[i], &s, sizeof(s));
		memcpy(&d->v[i], &s, sizeof(s));
	}
	memset(d->erased, 0, 2 * pc->pvals);
	memset(&d->counts, 0xa5, sizeof(d->counts));
	d->rc = kvmem_page_decode(pc->page, &pc->g, d->k, d->v, d->erased,
				  &d->counts);
}

static void decoded_free(struct decoded *d)
{
	free(d->k);
	free(d->v);
	free(d->erased);
}

static void expect_ecc_counts(const struct kvmem_ecc_counts *c, uint64_t total,
			      uint64_t corrected, uint64_t uncorrectable,
			      const char *region, const char *what,
			      const char *name)
{
	EXPECT_EQ(c->corrected, corrected, "%s: %s %s", name, what, region);
	EXPECT_EQ(c->bits_corrected, corrected, "%s: %s %s", name, what,
		  region);
	EXPECT_EQ(c->uncorrectable, uncorrectable, "%s: %s %s", name, what,
		  region);
	if (total != (uint64_t)-1)
		EXPECT_EQ(c->clean + c->corrected + c->uncorrectable, total,
			  "%s: %s %s: words in all", name, what, region);
}

/* Counts of a full page's decode, verify or scrub, region by region. */
static void expect_counts(const struct pcase *pc,
			  const struct kvmem_page_counts *c,
			  const uint64_t *corr, const uint64_t *ue,
			  uint64_t erased, const char *what)
{
	int full = pc->ntok == pc->g.tokens_per_page;
	/* Check words count with what they check. */
	uint64_t sc = pc->r.fmt != KVMEM_FMT_FP16 ? 2 * pc->r.nc : 0;
	uint64_t rc = pc->r.fmt == KVMEM_FMT_FP16 ? 2 * pc->r.nc : 0;

	expect_ecc_counts(&c->header, HDR_WORDS, corr[0], ue[0], "header", what,
			  pc->name);
	expect_ecc_counts(&c->scales, full ? pc->r.sw + sc : (uint64_t)-1,
			  corr[1], ue[1], "scales", what, pc->name);
	expect_ecc_counts(&c->payload,
			  full ? 2 * pc->r.rows * pc->r.rw + rc : (uint64_t)-1,
			  corr[2], ue[2], "payload", what, pc->name);
	EXPECT_EQ(c->values_erased, erased, "%s: %s", pc->name, what);
}

/* A clean decode: every value as the image says, within s / 2. */
static void check_decode(const struct pcase *pc)
{
	static const uint64_t zero[3];
	const struct kvmem_geometry *g = &pc->g;
	struct decoded d;
	uint32_t t, h, c;
	size_t i;
	int isv;

	decode(pc, &d);
	EXPECT_EQ(d.rc, pc->ntok, "%s: decode", pc->name);
	expect_counts(pc, &d.counts, zero, zero, 0, "decode");
	for (i = 0; i < 2 * pc->pvals; i++)
		EXPECT_EQ(d.erased[i], 0, "%s: erased[%zu]", pc->name, i);
	for (isv = 0; isv < 2; isv++) {
		const float *x = isv ? pc->v : pc->k;
		const float *y = isv ? d.v : d.k;

		for (t = 0; t < g->tokens_per_page; t++)
			for (h = 0; h < g->kv_heads; h++)
				for (c = 0; c < g->head_dim; c++) {
					size_t j = vidx(pc, t, h, c);
					float e, s;
					double err, bound;

					if (t >= pc->ntok) {
						EXPECT_EQ(ref_f2u(y[j]),
							  SENTINEL,
							  "%s: %s row %u past "
							  "ntokens written",
							  pc->name,
							  isv ? "V" : "K", t);
						continue;
					}
					e = expected_value(pc, isv, t, h, c);
					EXPECT_EQ(ref_f2u(y[j]), ref_f2u(e),
						  "%s: %s token %u head %u "
						  "channel %u: %a, expected %a",
						  pc->name, isv ? "V" : "K", t,
						  h, c, y[j], e);
					if (pc->r.fmt == KVMEM_FMT_FP16)
						continue;
					s = ref_h2f(pc->scales[scale_idx(
						pc, isv, t, h, c)]);
					err = fabs((double)x[j] - (double)y[j]);
					/* Half a step: an E4M3 one of x / s
					 * for fp8 (quant.h). */
					bound = pc->r.fmt == KVMEM_FMT_FP8
							? fmax(fabs(x[j]) / 16,
							       s * 0x1p-10) *
									  (1 +
									   0x1p-12) +
								  fabs(y[j]) *
									  0x1p-24
						: ref_is_lm(pc->r.fmt)
							? ref_lm_bound(
								  pc->r.fmt,
								  x[j],
								  s) * (1 +
									0x1p-12) +
								  fabs(y[j]) *
									  0x1p-24
							: s * (0.5 + 0x1p-12);
					EXPECT(err <= bound,
					       "%s: %s token %u head %u channel "
					       "%u = %a read back as %a, scale "
					       "%a",
					       pc->name, isv ? "V" : "K", t, h,
					       c, x[j], y[j], s);
				}
	}
	decoded_free(&d);
}

static void check_read_header(const struct pcase *pc)
{
	struct kvmem_page_hdr got;
	struct kvmem_ecc_counts c;

	memset(&got, 0xa5, sizeof(got));
	memset(&c, 0xa5, sizeof(c));
	ck_assert_int_eq(kvmem_page_read_header(pc->page, &pc->g, &got, &c), 0);
	EXPECT_MEM(&got, &pc->hexp, sizeof(got), "%s: header read back",
		   pc->name);
	EXPECT_EQ(c.clean, HDR_WORDS, "%s", pc->name);
	EXPECT_EQ(c.corrected, 0, "%s", pc->name);
	EXPECT_EQ(c.uncorrectable, 0, "%s", pc->name);
	ck_assert_int_eq(kvmem_page_read_header(pc->page, &pc->g, &got, NULL),
			 0);
}

static void check_clean_verify_scrub(const struct pcase *pc)
{
	static const uint64_t zero[3];
	struct kvmem_page_counts c;
	uint8_t *copy = kvmem_check_xmalloc(pc->l.size);

	memcpy(copy, pc->page, pc->l.size);
	memset(&c, 0xa5, sizeof(c));
	EXPECT_EQ(kvmem_page_verify(pc->page, &pc->g, &c), 0, "%s", pc->name);
	expect_counts(pc, &c, zero, zero, 0, "verify");
	memset(&c, 0xa5, sizeof(c));
	EXPECT_EQ(kvmem_page_scrub(pc->page, &pc->g, &c), 0, "%s", pc->name);
	expect_counts(pc, &c, zero, zero, 0, "scrub");
	EXPECT_MEM(pc->page, copy, pc->l.size, "%s: clean page after scrub",
		   pc->name);
	EXPECT_EQ(kvmem_page_verify(pc->page, &pc->g, NULL), 0, "%s", pc->name);
	EXPECT_EQ(kvmem_page_scrub(pc->page, &pc->g, NULL), 0, "%s", pc->name);
	free(copy);
}

/* Every combination of format, codec and key scales for geometry @gi
 * (vq2 is an archive format only: check_vq.c). */
#define FOR_EACH_KIND(g, gi, fmt, codec, ks)                                   \
	for (fmt = 0; fmt < KVMEM_FMT_VQ2; fmt++)                              \
		for (codec = 0; codec < KVMEM_CODEC_NR; codec++)               \
			for (ks = 0; ks < 2; ks++)                             \
				if (!(fmt == KVMEM_FMT_FP16 &&                 \
				      ks == KVMEM_SCALES_CHANNEL) &&           \
				    (mkgeom(&(g), &geoms[gi], fmt, codec, ks), \
				     1))

/* ---- Geometry ------------------------------------------------------------ */

START_TEST(test_geometry_default)
{
	struct kvmem_geometry g;

	memset(&g, 0x5a, sizeof(g));
	g.layers = 3;
	g.kv_heads = 8;
	g.head_dim = 128;
	kvmem_geometry_default(&g);
	ck_assert_uint_eq(g.layers, 3);
	ck_assert_uint_eq(g.kv_heads, 8);
	ck_assert_uint_eq(g.head_dim, 128);
	ck_assert_uint_eq(g.tokens_per_page, 32);
	ck_assert_uint_eq(g.group_size, 32);
	ck_assert_uint_eq(g.sink_tokens, 4);
	ck_assert_uint_eq(g.format, KVMEM_FMT_INT4);
	ck_assert_uint_eq(g.codec, KVMEM_CODEC_H84);
	ck_assert_uint_eq(g.key_scales, KVMEM_SCALES_GROUP);
	memset(g.resv, 0, sizeof(g.resv));
	ck_assert_int_eq(kvmem_geometry_check(&g), 0);
}
END_TEST

START_TEST(test_geometry_check)
{
	struct kvmem_geometry g, b;
	unsigned int fmt, codec, ks, i;
	int gi;

	/* Every valid kind of every test geometry. */
	for (gi = 0; gi < NGEOM; gi++)
		FOR_EACH_KIND(g, gi, fmt, codec, ks)
		{
			ck_assert_int_eq(kvmem_geometry_check(&g), 0);
		}
	mkgeom(&g, &geoms[1], KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0);
	b = g;
	b.sink_tokens = b.tokens_per_page;
	ck_assert_int_eq(kvmem_geometry_check(&b), 0);
	b = g;
	b.group_size = b.head_dim;
	ck_assert_int_eq(kvmem_geometry_check(&b), 0);
	b = g;
	b.group_size = 1;
	ck_assert_int_eq(kvmem_geometry_check(&b), 0);
	b = g;
	b.tokens_per_page = 1;
	b.sink_tokens = 1;
	ck_assert_int_eq(kvmem_geometry_check(&b), 0);
	/* A rotation is part of what a page means: its digest differs,
	 * and a geometry without one keeps the digest of a geometry from
	 * before there were rotations (FNV-1a over the same fields). */
	b = g;
	b.rotation = KVMEM_ROTATE_HADAMARD;
	ck_assert_int_eq(kvmem_geometry_check(&b), 0);
	ck_assert_uint_ne(kvmem_geometry_digest(&b), kvmem_geometry_digest(&g));

	/* Each bad field on its own, and the sentence that names it. */
#define BAD(stmt, why)                                                         \
	do {                                                                   \
		char msg[160];                                                 \
		b = g;                                                         \
		stmt;                                                          \
		ck_assert_msg(kvmem_geometry_check(&b) == -EINVAL,             \
			      "accepted: %s", #stmt);                          \
		ck_assert_int_eq(kvmem_geometry_explain(&b, msg, sizeof(msg)), \
				 -EINVAL);                                     \
		ck_assert_msg(!strcmp(msg, why), "%s: \"%s\", not \"%s\"",     \
			      #stmt, msg, why);                                \
	} while (0)
	BAD(b.layers = 0, "layers 0 is not in 1..4096");
	BAD(b.kv_heads = 0, "kv_heads 0 is not in 1..1024");
	BAD(b.head_dim = 0, "head_dim 0 is not in 1..1024");
	BAD(b.tokens_per_page = 0, "tokens_per_page 0 is not in 1..4096");
	BAD(b.group_size = 0, "head_dim 64 is not a multiple of group_size 0");
	BAD(b.group_size = 24,
	    "head_dim 64 is not a multiple of group_size 24");
	BAD(b.group_size = 128,
	    "head_dim 64 is not a multiple of group_size 128");
	BAD(b.head_dim = 65, "head_dim 65 is not a multiple of group_size 32");
	BAD(b.sink_tokens = b.tokens_per_page + 1,
	    "sink_tokens 17 is more than tokens_per_page 16");
	BAD(b.format = KVMEM_FMT_NR,
	    "format 9 is not one of 0..8 (fp16, int8, int4, int2, fp8, lm2, lm3, "
	    "lm4, vq2)");
	BAD(b.format = 0xff,
	    "format 255 is not one of 0..8 (fp16, int8, int4, int2, fp8, lm2, "
	    "lm3, lm4, vq2)");
	BAD(b.format = KVMEM_FMT_VQ2,
	    "format vq2 needs a sequence's codebook: it is an archive format "
	    "(kvmem_seq_archive()), not a geometry's");
	BAD(b.rotation = 2, "rotation 2 is not 0 (none) or 1 (hadamard)");
	BAD((b.rotation = KVMEM_ROTATE_HADAMARD, b.head_dim = 96),
	    "the hadamard rotation needs a head_dim that is a power of two, "
	    "not 96");
	BAD(b.codec = KVMEM_CODEC_NR,
	    "codec 4 is not one of 0..3 (h74, h84, golay24, secded72)");
	BAD(b.codec = 0xff,
	    "codec 255 is not one of 0..3 (h74, h84, golay24, secded72)");
	BAD(b.key_scales = 2, "key_scales 2 is not 0 (group) or 1 (channel)");
	BAD((b.format = KVMEM_FMT_FP16, b.key_scales = KVMEM_SCALES_CHANNEL),
	    "channel key scales need a quantized format, not fp16");
	BAD(b.kv_heads = 0xffffffffu, "kv_heads 4294967295 is not in 1..1024");
	BAD((b.head_dim = 0x80000000u, b.group_size = 0x80000000u),
	    "head_dim 2147483648 is not in 1..1024");
	BAD(b.tokens_per_page = 0xffffffffu,
	    "tokens_per_page 4294967295 is not in 1..4096");
	BAD((b.kv_heads = 1024, b.head_dim = 1024, b.tokens_per_page = 4096,
	     b.sink_tokens = 0),
	    "a sealed page would be over 1073741824 bytes");
	for (i = 0; i < sizeof(b.resv); i++) {
		char want[32];

		snprintf(want, sizeof(want), "resv[%u] is not 0", i);
		BAD(b.resv[i] = 1, want);
	}
	{
		char msg[16] = "x";

		ck_assert_int_eq(kvmem_geometry_explain(&g, msg, sizeof(msg)),
				 0);
		ck_assert_str_eq(msg, "");
	}
#undef BAD
}
END_TEST

START_TEST(test_geometry_digest)
{
	struct kvmem_geometry g, c, v[16];
	uint64_t d[16];
	unsigned int i, j, n = 0;

	mkgeom(&g, &geoms[1], KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0);
	c = g;
	ck_assert_uint_eq(kvmem_geometry_digest(&g), kvmem_geometry_digest(&c));
	ck_assert_uint_eq(kvmem_geometry_digest(&g), kvmem_geometry_digest(&g));

#define VARY(stmt)        \
	do {              \
		v[n] = g; \
		stmt;     \
		n++;      \
	} while (0)
	v[n++] = g;
	VARY(v[n].layers++);
	VARY(v[n].kv_heads++);
	VARY(v[n].head_dim *= 2);
	VARY(v[n].tokens_per_page = 32);
	VARY(v[n].group_size = 16);
	VARY(v[n].sink_tokens = 0);
	VARY(v[n].format = KVMEM_FMT_INT8);
	VARY(v[n].format = KVMEM_FMT_INT2);
	VARY(v[n].format = KVMEM_FMT_FP16);
	VARY(v[n].format = KVMEM_FMT_FP8);
	VARY(v[n].codec = KVMEM_CODEC_H74);
	VARY(v[n].codec = KVMEM_CODEC_GOLAY24);
	VARY(v[n].codec = KVMEM_CODEC_SECDED72);
	VARY(v[n].key_scales = KVMEM_SCALES_CHANNEL);
#undef VARY
	for (i = 0; i < n; i++) {
		ck_assert_int_eq(kvmem_geometry_check(&v[i]), 0);
		d[i] = kvmem_geometry_digest(&v[i]);
	}
	for (i = 0; i < n; i++)
		for (j = i + 1; j < n; j++)
			ck_assert_msg(
				d[i] != d[j],
				"variants %u and %u share digest %#" PRIx64, i,
				j, d[i]);
}
END_TEST

START_TEST(test_layout)
{
	struct kvmem_geometry g;
	struct kvmem_page_layout l;
	unsigned int fmt, codec, ks;
	char name[96];
	int gi, hot;

	for (gi = 0; gi < NGEOM; gi++)
		FOR_EACH_KIND(g, gi, fmt, codec, ks)
		{
			for (hot = 0; hot < 2; hot++) {
				snprintf(name, sizeof(name),
					 "geometry %d %s+%s ks %u hot %d", gi,
					 ref_fmts[fmt].name,
					 ref_codecs[codec].name, ks, hot);
				check_layout(&g, hot, &l, name);
			}
		}
}
END_TEST

START_TEST(test_layout_examples)
{
	/* Worked out by hand from page.h for kv_heads 8, head_dim 128,
	 * tokens_per_page 32, group 32. */
	static const struct {
		uint8_t fmt, codec, ks, hot;
		uint32_t nk, nv, sw, rw, rb, rd;
	} ex[] = {
		/* int4 + h84: one value a word; 2048 scales, 32768 bits, in
		 * 24-bit pairs of golay24 words: 1366 pairs, 2732 words. */
		{ KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 0, 1024, 1024, 2732, 128,
		  128, 64 },
		/* 512 bits / 12 = 42.7 -> 43 words = 516 bits, not whole
		 * bytes -> 44 words, 132 bytes, 66 data bytes. */
		{ KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24, 0, 0, 1024, 1024, 2732,
		  44, 132, 66 },
		{ KVMEM_FMT_INT2, KVMEM_CODEC_GOLAY24, 0, 0, 1024, 1024, 2732,
		  22, 66, 33 },
		/* channel keys: 8 * 128 K scales; 1024 + 1024 in 2732. */
		{ KVMEM_FMT_INT8, KVMEM_CODEC_SECDED72, 1, 0, 1024, 1024, 2732,
		  16, 144, 128 },
		{ KVMEM_FMT_INT2, KVMEM_CODEC_H74, 1, 0, 1024, 1024, 2732, 64,
		  64, 32 },
		{ KVMEM_FMT_FP16, KVMEM_CODEC_H84, 0, 0, 0, 0, 0, 512, 512,
		  256 },
		/* hot: fp16 + golay24, 2048 bits -> 171 words, not whole
		 * bytes -> 172 words, 516 bytes, 258 data bytes; no scales. */
		{ KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 1, 0, 0, 0, 172, 516,
		  258 },
	};
	struct kvmem_geometry g;
	struct kvmem_page_layout l;
	unsigned int i;

	for (i = 0; i < sizeof(ex) / sizeof(ex[0]); i++) {
		mkgeom(&g, &geoms[REALISTIC], ex[i].fmt, ex[i].codec, ex[i].ks);
		ck_assert_int_eq(kvmem_page_layout(&g, ex[i].hot, &l), 0);
		ck_assert_uint_eq(l.nscales_k, ex[i].nk);
		ck_assert_uint_eq(l.nscales_v, ex[i].nv);
		ck_assert_uint_eq(l.scale_words, ex[i].sw);
		ck_assert_uint_eq(l.row_words, ex[i].rw);
		ck_assert_uint_eq(l.row_bytes, ex[i].rb);
		ck_assert_uint_eq(l.row_data, ex[i].rd);
		ck_assert_uint_eq(l.size % 4096, 0);
	}
	/* head_dim 3, int4 + h84: 12 bits -> 3 words, not whole bytes -> 4. */
	mkgeom(&g, &geoms[3], KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0);
	ck_assert_int_eq(kvmem_page_layout(&g, 0, &l), 0);
	ck_assert_uint_eq(l.row_words, 4);
	ck_assert_uint_eq(l.row_data, 2);
	/* 1 head * 7 tokens * 1 group, K and V: 14 scales, 224 bits, 10
	 * pairs of golay24 words. */
	ck_assert_uint_eq(l.nscales_k, 7);
	ck_assert_uint_eq(l.scale_words, 20);
}
END_TEST

/*
 * The size of a page as page.h draws it, in 64 bits from the fields, apart
 * from the library's arithmetic: the header, the scales in 3-byte words and
 * their checks (or an fp16 page's row checks) in pairs of them, K and V,
 * each start 64-aligned, the whole 4 KiB-aligned.
 */
static uint64_t ref_page_size(const struct kvmem_geometry *g, int hot)
{
	unsigned int fmt = hot ? KVMEM_FMT_FP16 : g->format;
	unsigned int codec = hot ? META : g->codec;
	uint64_t k = ref_codecs[codec].k, bits = ref_fmts[fmt].bits;
	uint64_t rw = ((uint64_t)g->head_dim * bits + k - 1) / k;
	uint64_t ns = 0, nc, off, blk;

	while (rw * k % 8)
		rw++;
	blk = (uint64_t)g->kv_heads * g->tokens_per_page * rw *
	      ref_codecs[codec].wb;
	if (fmt != KVMEM_FMT_FP16)
		ns = (uint64_t)g->kv_heads * g->tokens_per_page *
			     (g->head_dim / g->group_size) +
		     (!hot && g->key_scales == KVMEM_SCALES_CHANNEL
			      ? (uint64_t)g->kv_heads * g->head_dim
			      : (uint64_t)g->kv_heads * g->tokens_per_page *
					(g->head_dim / g->group_size));
	nc = fmt != KVMEM_FMT_FP16
		     ? (ns + 23) / 24
		     : 2 * (uint64_t)g->kv_heads * g->tokens_per_page;
	off = (HDR_BYTES + 63) / 64 * 64;
	off = (off + (ns * 16 + 23) / 24 * 2 * SW_BYTES + nc * 2 * SW_BYTES +
	       63) /
	      64 * 64;
	off = (off + blk + 63) / 64 * 64;
	return (off + blk + 4095) / 4096 * 4096;
}

/*
 * Regression: kv_heads 1024 x tokens_per_page 4096 x head_dim 1024 with a
 * group of one wrapped the 32-bit scale count to 0, so the scale words came
 * out 0 and kvmem_page_encode() wrote past its buffer. Every field is in
 * range; the page (GiBs) is not: refused everywhere, before any arithmetic
 * can wrap.
 */
START_TEST(test_layout_overflow_refused)
{
	struct kvmem_geometry g;
	struct kvmem_page_layout l;
	struct kvmem_page_hdr h = { .ntokens = 1 };
	struct kvmem_cache *c = NULL;
	float x[1] = { 0 };
	uint8_t page[KVMEM_PAGE_ALIGN];

	memset(&g, 0, sizeof(g));
	g.layers = 1;
	g.kv_heads = 1024;
	g.head_dim = 1024;
	g.tokens_per_page = 4096;
	g.group_size = 1;
	g.format = KVMEM_FMT_INT4;
	g.codec = KVMEM_CODEC_H84;
	ck_assert_uint_gt(ref_page_size(&g, 0), (uint64_t)KVMEM_PAGE_MAX);
	ck_assert_int_eq(kvmem_geometry_check(&g), -EINVAL);
	ck_assert_int_eq(kvmem_page_layout(&g, 0, &l), -EINVAL);
	ck_assert_int_eq(kvmem_page_layout(&g, 1, &l), -EINVAL);
	ck_assert_int_eq(kvmem_page_encode(page, &g, &h, 0, x, x), -EINVAL);
	ck_assert_int_eq(kvmem_open_embedded(&g, 1u << 20, &c), -EINVAL);
	ck_assert_ptr_null(c);
}
END_TEST

/*
 * Random geometries over the whole range of each field: a geometry is
 * accepted exactly when both kinds of page are at most KVMEM_PAGE_MAX
 * bytes, and then the layout is the reference's, with every region inside
 * the page.
 */
START_TEST(test_layout_random_geometries)
{
	static const uint32_t dims[] = { 1, 2, 3, 8, 64, 96, 128, 256, 1024 };
	struct kvmem_geometry g;
	struct kvmem_page_layout l;
	struct kvmem_rng r;
	unsigned int i, accepted = 0, refused = 0;
	char name[200];

	kvmem_rng_seed(&r, 0x1a7001);
	for (i = 0; i < 20000; i++) {
		uint32_t ng;
		uint64_t s0, s1;
		int ok, hot;

		memset(&g, 0, sizeof(g));
		g.layers = 1 + (uint32_t)kvmem_rng_below(&r, 4096);
		g.kv_heads = kvmem_rng_below(&r, 4)
				     ? 1 + (uint32_t)kvmem_rng_below(&r, 64)
				     : 1 + (uint32_t)kvmem_rng_below(&r, 1024);
		g.head_dim = dims[kvmem_rng_below(&r, 9)];
		g.tokens_per_page =
			kvmem_rng_below(&r, 4)
				? 1 + (uint32_t)kvmem_rng_below(&r, 128)
				: 1 + (uint32_t)kvmem_rng_below(&r, 4096);
		/* A divisor of head_dim: a power of two that divides it. */
		ng = (uint32_t)kvmem_rng_below(&r, 11);
		while (g.head_dim % (1u << ng))
			ng--;
		g.group_size = 1u << ng;
		g.sink_tokens =
			(uint32_t)kvmem_rng_below(&r, g.tokens_per_page + 1);
		/* Every geometry format: vq2 is an archive format only. */
		g.format = (uint8_t)kvmem_rng_below(&r, KVMEM_FMT_VQ2);
		g.codec = (uint8_t)kvmem_rng_below(&r, KVMEM_CODEC_NR);
		g.key_scales =
			g.format != KVMEM_FMT_FP16 && kvmem_rng_below(&r, 2);
		s0 = ref_page_size(&g, 0);
		s1 = ref_page_size(&g, 1);
		ok = s0 <= KVMEM_PAGE_MAX && s1 <= KVMEM_PAGE_MAX;
		snprintf(name, sizeof(name),
			 "kvh %u hd %u tpp %u group %u fmt %u codec %u ks %u "
			 "(%llu / %llu bytes)",
			 g.kv_heads, g.head_dim, g.tokens_per_page,
			 g.group_size, g.format, g.codec, g.key_scales,
			 (unsigned long long)s0, (unsigned long long)s1);
		EXPECT_EQ(kvmem_geometry_check(&g), ok ? 0 : -EINVAL, "%s",
			  name);
		accepted += ok;
		refused += !ok;
		for (hot = 0; hot < 2; hot++) {
			uint64_t want = hot ? s1 : s0;

			if (want > KVMEM_PAGE_MAX) {
				EXPECT_EQ(kvmem_page_layout(&g, hot, &l),
					  -EINVAL, "%s", name);
				continue;
			}
			if (ok)
				check_layout(&g, hot, &l, name);
			else
				ck_assert_int_eq(kvmem_page_layout(&g, hot, &l),
						 0);
			EXPECT_EQ(l.size, want, "%s, hot %d", name, hot);
		}
	}
	/* The draw reaches both sides of the limit. */
	ck_assert_uint_gt(accepted, 1000);
	ck_assert_uint_gt(refused, 100);
}
END_TEST

/* ---- Round trips --------------------------------------------------------- */

static void roundtrip_case(const struct kvmem_geometry *g, int hot,
			   uint32_t ntok, uint32_t flags, uint64_t seed)
{
	struct pcase pc;

	case_setup(&pc, g, hot, ntok, flags, seed);
	check_image(&pc);
	check_read_header(&pc);
	check_decode(&pc);
	check_clean_verify_scrub(&pc);
	case_free(&pc);
}

START_TEST(test_page_roundtrip)
{
	const struct gdef *d = &geoms[_i];
	struct kvmem_geometry g;
	unsigned int fmt, codec, ks;
	struct kvmem_rng r;
	uint64_t seed = 0x9a6e0000u + (uint64_t)_i * 1000;

	kvmem_rng_seed(&r, seed);
	FOR_EACH_KIND(g, _i, fmt, codec, ks)
	{
		uint32_t part =
			d->tpp > 1
				? 1 + (uint32_t)kvmem_rng_below(&r, d->tpp - 1)
				: 1;

		roundtrip_case(&g, 0, d->tpp, KVMEM_HDR_SEALED, seed++);
		roundtrip_case(&g, 0, part, KVMEM_HDR_SEALED, seed++);
		/* Hot pages for a few of the geometry's kinds (the kind
		 * changes the digest, not the hot layout). */
		if (codec == (fmt + ks) % KVMEM_CODEC_NR) {
			roundtrip_case(&g, 1, d->tpp, KVMEM_HDR_SEALED, seed++);
			roundtrip_case(&g, 1, part, 0, seed++);
			roundtrip_case(&g, 1, 1, 0, seed++);
		}
	}
}
END_TEST

START_TEST(test_page_encode_overwrites)
{
	/* Encoding over an old page of the same geometry leaves nothing of
	 * it: a shorter page's rows past ntokens are zero again. */
	struct kvmem_geometry g;
	struct pcase pc;
	mkgeom(&g, &geoms[1], KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24, 0);
	case_setup(&pc, &g, 0, 3, KVMEM_HDR_SEALED, 77);
	check_image(&pc);
	memset(pc.page, 0xff, pc.l.size);
	ck_assert_int_eq(kvmem_page_encode(pc.page, &g, &pc.hin, 0, pc.k, pc.v),
			 0);
	check_image(&pc);
	case_free(&pc);
}
END_TEST

/* ---- Headers ------------------------------------------------------------- */

/* Re-encode the header of @page with the reference after @edit changed it. */
/*
 * Encode @h as the page's header, with its own CRC (hcrc) when @hcrc: as
 * page.h says, the CRC-32C of the 64 bytes with hcrc 0. Without, the
 * header is what a miscorrection leaves: valid words, hcrc unchanged.
 */
static void encode_header(uint8_t *page, const struct kvmem_page_hdr *h,
			  int hcrc)
{
	uint8_t data[HDR_WORDS * 12 / 8 + 1] = { 0 };
	struct kvmem_page_hdr x = *h;
	unsigned int w;

	if (hcrc) {
		x.hcrc = 0;
		x.hcrc = ref_crc32c(0, (const uint8_t *)&x, sizeof(x));
	}
	memcpy(data, &x, sizeof(x));
	for (w = 0; w < HDR_WORDS; w++)
		ref_word(META, ref_get_bits(data, 12 * w, 12),
			 page + SW_BYTES * w);
}

static void rewrite_header(uint8_t *page, const struct kvmem_page_hdr *h)
{
	encode_header(page, h, 1);
}

START_TEST(test_header_single_flips)
{
	struct kvmem_geometry g;
	struct kvmem_page_hdr got;
	struct kvmem_ecc_counts c;
	struct pcase pc;
	unsigned int b;

	mkgeom(&g, &geoms[_i], KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0);
	case_setup(&pc, &g, _i & 1, geoms[_i].tpp, KVMEM_HDR_SEALED,
		   0x4ead + (uint64_t)_i);
	check_image(&pc);
	/* Every bit of the header's codewords, one at a time. */
	for (b = 0; b < HDR_BYTES * 8; b++) {
		pc.page[b / 8] ^= (uint8_t)(1u << (b % 8));
		memset(&got, 0xa5, sizeof(got));
		EXPECT_EQ(kvmem_page_read_header(pc.page, &g, &got, &c), 0,
			  "%s: flipped header bit %u", pc.name, b);
		EXPECT_MEM(&got, &pc.hexp, sizeof(got), "bit %u", b);
		EXPECT_EQ(c.corrected, 1, "bit %u", b);
		EXPECT_EQ(c.clean, HDR_WORDS - 1, "bit %u", b);
		EXPECT_EQ(c.uncorrectable, 0, "bit %u", b);
		pc.page[b / 8] ^= (uint8_t)(1u << (b % 8));
	}
	case_free(&pc);
}
END_TEST

/* Flip the bits of @mask (24 bits) in header word @w. */
static void flip_word(uint8_t *page, unsigned int w, uint32_t mask)
{
	unsigned int i;

	for (i = 0; i < 3; i++)
		page[SW_BYTES * w + i] ^= (uint8_t)(mask >> (8 * i));
}

/* Two and three flips in a header word are corrected, in every word. */
START_TEST(test_header_triple_flips)
{
	struct kvmem_geometry g;
	struct kvmem_page_hdr got;
	struct kvmem_ecc_counts c;
	struct pcase pc;
	unsigned int w, i, j, l;

	mkgeom(&g, &geoms[0], KVMEM_FMT_INT2, KVMEM_CODEC_SECDED72, 0);
	case_setup(&pc, &g, 0, geoms[0].tpp, KVMEM_HDR_SEALED, 0x7b1e);
	for (w = 0; w < HDR_WORDS; w++)
		for (i = 0; i < 24; i++)
			for (j = i + 1; j < 24; j++)
				for (l = j; l < 24; l++) {
					/* l == j: the pair alone. */
					uint32_t m =
						1u << i | 1u << j | 1u << l;

					flip_word(pc.page, w, m);
					memset(&got, 0xa5, sizeof(got));
					EXPECT_EQ(
						kvmem_page_read_header(
							pc.page, &g, &got, &c),
						0, "word %u mask %#x", w, m);
					EXPECT_MEM(&got, &pc.hexp, sizeof(got),
						   "word %u mask %#x", w, m);
					EXPECT_EQ(c.corrected, 1,
						  "word %u mask %#x", w, m);
					EXPECT_EQ(c.bits_corrected,
						  l == j ? 2 : 3,
						  "word %u mask %#x", w, m);
					flip_word(pc.page, w, m);
				}
	case_free(&pc);
}
END_TEST

/*
 * Four flips in a header word, past golay24's reach: always detected,
 * every pattern in the first, a middle and the last word, and the page is
 * refused by every reader without a byte of it changed.
 */
START_TEST(test_header_quad_flips)
{
	static const unsigned int words[] = { 0, HDR_WORDS / 2, HDR_WORDS - 1 };
	struct kvmem_geometry g;
	struct kvmem_page_hdr got;
	struct kvmem_ecc_counts c;
	struct kvmem_page_counts pcnt;
	struct pcase pc;
	unsigned int wi, w, n = 0;
	uint32_t m;
	float *k, *v;
	uint8_t *copy;

	mkgeom(&g, &geoms[0], KVMEM_FMT_INT2, KVMEM_CODEC_SECDED72, 0);
	case_setup(&pc, &g, 0, geoms[0].tpp, KVMEM_HDR_SEALED, 0xd0b1e);
	k = kvmem_check_xmalloc(pc.pvals * sizeof(float));
	v = kvmem_check_xmalloc(pc.pvals * sizeof(float));
	copy = kvmem_check_xmalloc(pc.l.size);
	for (wi = 0; wi < 3; wi++)
		for (m = 0; m < 1u << 24; m++) {
			if (__builtin_popcount(m) != 4)
				continue;
			w = words[wi];
			flip_word(pc.page, w, m);
			EXPECT_EQ(kvmem_page_read_header(pc.page, &g, &got, &c),
				  -EBADMSG, "word %u mask %#x", w, m);
			EXPECT_EQ(c.uncorrectable, 1, "word %u mask %#x", w, m);
			if (n++ % 997 == 0) {
				EXPECT_EQ(kvmem_page_decode(pc.page, &g, k, v,
							    NULL, NULL),
					  -EBADMSG, "word %u mask %#x", w, m);
				EXPECT_EQ(kvmem_page_verify(pc.page, &g, &pcnt),
					  -EBADMSG, "word %u mask %#x", w, m);
				memcpy(copy, pc.page, pc.l.size);
				EXPECT_EQ(kvmem_page_scrub(pc.page, &g, &pcnt),
					  -EBADMSG, "word %u mask %#x", w, m);
				EXPECT_MEM(pc.page, copy, pc.l.size,
					   "scrub of an uncorrectable header, "
					   "word %u",
					   w);
			}
			flip_word(pc.page, w, m);
		}
	ck_assert_uint_eq(n, 3 * 10626);
	free(k);
	free(v);
	free(copy);
	case_free(&pc);
}
END_TEST

START_TEST(test_header_mismatch)
{
	struct kvmem_geometry g, o;
	struct kvmem_page_hdr got, h;
	struct kvmem_page_counts cnt;
	struct kvmem_ecc_counts hc;
	struct pcase pc;
	struct kvmem_rng r;
	uint8_t *copy, *zero;
	char bad[512] = "";
	float *k, *v;
	unsigned int i;
	int rc;

	mkgeom(&g, &geoms[1], KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0);
	case_setup(&pc, &g, 0, geoms[1].tpp, KVMEM_HDR_SEALED, 0x3155);
	check_image(&pc);
	copy = kvmem_check_xmalloc(pc.l.size);
	memcpy(copy, pc.page, pc.l.size);
	k = kvmem_check_xmalloc(pc.pvals * 4 * sizeof(float));
	v = kvmem_check_xmalloc(pc.pvals * 4 * sizeof(float));

	/* Read with another geometry (digest mismatch): -EINVAL from all
	 * four, and scrub writes nothing. */
	for (i = 0; i < 8; i++) {
		o = g;
		switch (i) {
		case 0:
			o.layers++;
			break;
		case 1:
			o.kv_heads--;
			break;
		case 2:
			o.tokens_per_page = 32;
			break;
		case 3:
			o.group_size = 16;
			break;
		case 4:
			o.sink_tokens = 0;
			break;
		case 5:
			o.format = KVMEM_FMT_INT8;
			break;
		case 6:
			o.codec = KVMEM_CODEC_GOLAY24;
			break;
		default:
			o.key_scales = KVMEM_SCALES_CHANNEL;
			break;
		}
		ck_assert_int_eq(kvmem_geometry_check(&o), 0);
		EXPECT_EQ(kvmem_page_read_header(pc.page, &o, &got, NULL),
			  -EINVAL, "variant %u", i);
		EXPECT_EQ(kvmem_page_decode(pc.page, &o, k, v, NULL, NULL),
			  -EINVAL, "variant %u", i);
		EXPECT_EQ(kvmem_page_verify(pc.page, &o, &cnt), -EINVAL,
			  "variant %u", i);
		EXPECT_EQ(kvmem_page_scrub(pc.page, &o, &cnt), -EINVAL,
			  "variant %u", i);
		EXPECT_MEM(pc.page, copy, pc.l.size, "variant %u", i);
	}

	/* A zero page decodes clean, but not to a header: its own CRC
	 * does not match. */
	zero = aligned_alloc(KVMEM_PAGE_ALIGN, pc.l.size);
	ck_assert_ptr_nonnull(zero);
	memset(zero, 0, pc.l.size);
	ck_assert_int_eq(kvmem_page_read_header(zero, &g, &got, NULL),
			 -EBADMSG);
	ck_assert_int_eq(kvmem_page_decode(zero, &g, k, v, NULL, NULL),
			 -EBADMSG);

	/* Valid codewords of garbage, as a garbled line leaves them: lost,
	 * one uncorrectable word more than the code saw. Garbage bytes: an
	 * error. */
	kvmem_rng_seed(&r, 0x6a7ba6e);
	for (i = 0; i < 64; i++) {
		unsigned int w;

		for (w = 0; w < HDR_WORDS; w++)
			ref_word(META, kvmem_rng_next(&r) & 0xfff,
				 zero + SW_BYTES * w);
		memset(&hc, 0xa5, sizeof(hc));
		EXPECT_EQ(kvmem_page_read_header(zero, &g, &got, &hc), -EBADMSG,
			  "garbage header %u", i);
		EXPECT_EQ(hc.clean, HDR_WORDS, "garbage header %u", i);
		EXPECT_EQ(hc.uncorrectable, 1, "garbage header %u", i);
		for (w = 0; w < HDR_BYTES; w++)
			zero[w] = (uint8_t)kvmem_rng_next(&r);
		rc = kvmem_page_read_header(zero, &g, &got, NULL);
		EXPECT(rc == -EINVAL || rc == -EBADMSG, "random bytes %u: %d",
		       i, rc);
	}

	/* One field off at a time, re-encoded so the codes see nothing;
	 * every field is tried before failing, naming all that passed. */
	for (i = 0; i < 7; i++) {
		static const char *const field[] = {
			"magic ^ 1",
			"version + 1",
			"geometry digest ^ 1 << 40",
			"ntokens = 0",
			"ntokens = tokens_per_page + 1",
			"version = 0",
			"magic = 0",
		};
		int rd, rdec;

		h = pc.hexp;
		switch (i) {
		case 0:
			h.magic ^= 1;
			break;
		case 1:
			h.version = KVMEM_PAGE_VERSION + 1;
			break;
		case 2:
			h.geometry ^= 1ull << 40;
			break;
		case 3:
			h.ntokens = 0;
			break;
		case 4:
			h.ntokens = g.tokens_per_page + 1;
			break;
		case 5:
			h.version = 0;
			break;
		default:
			h.magic = 0;
			break;
		}
		memcpy(zero, pc.page, pc.l.size);
		rewrite_header(zero, &h);
		rd = kvmem_page_read_header(zero, &g, &got, NULL);
		rdec = kvmem_page_decode(zero, &g, k, v, NULL, NULL);
		if (rd != -EINVAL || rdec != -EINVAL)
			snprintf(bad + strlen(bad), sizeof(bad) - strlen(bad),
				 " [%s: read_header %d, decode %d]", field[i],
				 rd, rdec);
		/* The same field changed by a miscorrection (the header's
		 * own CRC left as it was): lost, not a mismatch. */
		encode_header(zero, &h, 0);
		rd = kvmem_page_read_header(zero, &g, &got, NULL);
		rdec = kvmem_page_verify(zero, &g, NULL);
		if (rd != -EBADMSG || rdec != -EBADMSG)
			snprintf(bad + strlen(bad), sizeof(bad) - strlen(bad),
				 " [%s, hcrc stale: read_header %d, verify %d]",
				 field[i], rd, rdec);
	}
	/* Fields no mismatch test can see: they too are covered. */
	for (i = 0; i < 4; i++) {
		h = pc.hexp;
		if (i == 0)
			h.seq ^= 1ull << 33;
		if (i == 1)
			h.token_start += 32;
		if (i == 2)
			h.generation ^= 1;
		if (i == 3)
			h.crc ^= 1u << 7;
		memcpy(zero, pc.page, pc.l.size);
		encode_header(zero, &h, 0);
		EXPECT_EQ(kvmem_page_read_header(zero, &g, &got, NULL),
			  -EBADMSG, "field %u changed, hcrc stale", i);
		encode_header(zero, &h, 1);
		EXPECT_EQ(kvmem_page_read_header(zero, &g, &got, NULL), 0,
			  "field %u changed, hcrc right", i);
		EXPECT_EQ(got.hcrc, 0, "field %u: hcrc reads back as 0", i);
	}
	ck_assert_msg(!bad[0], "accepted with a header field off:%s", bad);
	/* The re-encoding itself is faithful. */
	memcpy(zero, pc.page, pc.l.size);
	rewrite_header(zero, &pc.hexp);
	EXPECT_MEM(zero, pc.page, pc.l.size, "%s", "header rewritten as is");

	free(zero);
	free(copy);
	free(k);
	free(v);
	case_free(&pc);
}
END_TEST

/* ---- Errors -------------------------------------------------------------- */

/* @m distinct random words of @n into @out (sorted not needed). */
static unsigned int pick_words(struct kvmem_rng *r, size_t n, unsigned int m,
			       size_t *out)
{
	unsigned int i, j, got = 0;

	if (m > n)
		m = (unsigned int)n;
	while (got < m) {
		size_t w = (size_t)kvmem_rng_below(r, n);

		for (j = 0; j < got && out[j] != w; j++)
			;
		if (j == got)
			out[got++] = w;
	}
	for (i = 0; i < got; i++)
		ck_assert_uint_lt(out[i], n);
	return got;
}

/* Exactly @k flips in word @w of a region of @n-bit, @wb-byte words. */
static void inject_word(struct pcase *pc, size_t off, size_t w, unsigned int n,
			unsigned int wb, unsigned int k)
{
	struct kvmem_inject_params p;
	struct kvmem_inject_report rep;
	uint8_t before[9], *at = pc->page + off + w * wb;
	unsigned int b, flips = 0;

	memset(&p, 0, sizeof(p));
	p.mode = KVMEM_INJECT_EXACT;
	p.k = k;
	p.seed = kvmem_rng_next(&pc->rng);
	p.word_bits = n;
	p.word_bytes = wb;
	memset(&rep, 0, sizeof(rep));
	memcpy(before, at, wb);
	ck_assert_int_eq(kvmem_inject(at, 1, &p, &rep), 0);
	ck_assert_uint_eq(rep.bits, k);
	for (b = 0; b < wb * 8; b++)
		flips += (before[b / 8] ^ at[b / 8]) >> (b % 8) & 1;
	ck_assert_uint_eq(flips, k);
}

enum { R_HDR, R_SCALES, R_K, R_V, R_NR };

/* Offset, word count and word shape of region @reg of @pc's page. */
static void region(const struct pcase *pc, int reg, size_t *off, size_t *nw,
		   unsigned int *n, unsigned int *wb)
{
	const struct ref_codec *c = &ref_codecs[pc->r.codec];

	*n = 24;
	*wb = SW_BYTES;
	switch (reg) {
	case R_HDR:
		*off = 0;
		*nw = HDR_WORDS;
		break;
	case R_SCALES:
		*off = pc->l.scales_off;
		*nw = pc->r.sw;
		break;
	default:
		*off = reg == R_K ? pc->l.k_off : pc->l.v_off;
		*nw = pc->r.rows * pc->r.rw;
		*n = c->n;
		*wb = c->wb;
		break;
	}
}

/*
 * Single errors in chosen regions of a full page: decode is unchanged and
 * counts them, verify reports them, scrub puts the page back exactly.
 */
static void single_errors(struct pcase *pc, const struct decoded *clean,
			  const uint8_t *clean_page, unsigned int mask)
{
	uint64_t corr[3] = { 0, 0, 0 };
	static const uint64_t zero[3];
	struct kvmem_page_counts c;
	struct kvmem_page_hdr got;
	struct kvmem_ecc_counts hc;
	struct decoded d;
	uint8_t *hit = kvmem_check_xmalloc(pc->l.size);
	size_t words[8], off, nw;
	unsigned int n, wb, i, m;
	int reg;

	memcpy(pc->page, clean_page, pc->l.size);
	for (reg = 0; reg < R_NR; reg++) {
		if (!(mask >> reg & 1))
			continue;
		region(pc, reg, &off, &nw, &n, &wb);
		if (!nw)
			continue;
		m = pick_words(&pc->rng, nw,
			       1 + (unsigned int)kvmem_rng_below(&pc->rng, 4),
			       words);
		for (i = 0; i < m; i++)
			inject_word(pc, off, words[i], n, wb, 1);
		corr[reg < R_K ? reg : 2] += m;
	}
	if (!(corr[0] + corr[1] + corr[2])) {
		free(hit); /* e.g. scales only, on a page without */
		return;
	}
	memcpy(hit, pc->page, pc->l.size);

	memset(&got, 0xa5, sizeof(got));
	EXPECT_EQ(kvmem_page_read_header(pc->page, &pc->g, &got, &hc), 0,
		  "%s: mask %#x", pc->name, mask);
	EXPECT_MEM(&got, &pc->hexp, sizeof(got), "%s: mask %#x", pc->name,
		   mask);
	EXPECT_EQ(hc.corrected, corr[0], "%s: mask %#x", pc->name, mask);

	decode(pc, &d);
	EXPECT_EQ(d.rc, pc->ntok, "%s: mask %#x", pc->name, mask);
	expect_counts(pc, &d.counts, corr, zero, 0, "decode");
	EXPECT_MEM(d.k, clean->k, pc->pvals * sizeof(float),
		   "%s: K decoded with single errors, mask %#x", pc->name,
		   mask);
	EXPECT_MEM(d.v, clean->v, pc->pvals * sizeof(float),
		   "%s: V decoded with single errors, mask %#x", pc->name,
		   mask);
	EXPECT_MEM(d.erased, clean->erased, 2 * pc->pvals,
		   "%s: erasures with single errors, mask %#x", pc->name, mask);
	decoded_free(&d);

	memset(&c, 0xa5, sizeof(c));
	EXPECT_EQ(kvmem_page_verify(pc->page, &pc->g, &c), -EBADMSG,
		  "%s: mask %#x", pc->name, mask);
	expect_counts(pc, &c, corr, zero, 0, "verify");
	EXPECT_MEM(pc->page, hit, pc->l.size, "%s: verify wrote to the page",
		   pc->name);

	memset(&c, 0xa5, sizeof(c));
	EXPECT_EQ(kvmem_page_scrub(pc->page, &pc->g, &c), 0, "%s: mask %#x",
		  pc->name, mask);
	expect_counts(pc, &c, corr, zero, 0, "scrub");
	EXPECT_MEM(pc->page, clean_page, pc->l.size,
		   "%s: page after scrub, mask %#x", pc->name, mask);
	memset(&c, 0xa5, sizeof(c));
	EXPECT_EQ(kvmem_page_scrub(pc->page, &pc->g, &c), 0, "%s", pc->name);
	expect_counts(pc, &c, zero, zero, 0, "second scrub");
	EXPECT_EQ(kvmem_page_verify(pc->page, &pc->g, NULL), 0, "%s", pc->name);
	free(hit);
}

/* Mark the values that payload word @w of block @isv holds. */
static void erase_payload_word(const struct pcase *pc, int isv, size_t w,
			       uint8_t *exp)
{
	const struct kvmem_geometry *g = &pc->g;
	size_t row = w / pc->r.rw, lo = (w % pc->r.rw) * pc->r.k;
	size_t hi = lo + pc->r.k;
	uint32_t h = (uint32_t)(row / g->tokens_per_page);
	uint32_t t = (uint32_t)(row % g->tokens_per_page), c;

	if (t >= pc->ntok)
		return;
	for (c = 0; c < g->head_dim; c++) {
		size_t b0 = (size_t)c * pc->r.bits;

		if (b0 < hi && b0 + pc->r.bits > lo)
			exp[isv * pc->nvals + vidx(pc, t, h, c)] = 1;
	}
}

/*
 * Mark the values governed by the scales with a bit in scale word @w: the
 * 12 bits [12w, 12w + 12) of the stream meet scales 12w / 16 to
 * (12w + 11) / 16.
 */
static void erase_scale_word(const struct pcase *pc, size_t w, uint8_t *exp)
{
	const struct kvmem_geometry *g = &pc->g;
	size_t i, G = pc->r.G;
	uint32_t t, c;

	for (i = 12 * w / 16; i <= (12 * w + 11) / 16; i++) {
		int isv = i >= pc->r.nk;
		size_t j = isv ? i - pc->r.nk : i;
		uint32_t h;

		if (i >= (size_t)pc->r.nk + pc->r.nv)
			break;
		if (!isv && g->key_scales == KVMEM_SCALES_CHANNEL) {
			h = (uint32_t)(j / g->head_dim);
			c = (uint32_t)(j % g->head_dim);
			for (t = 0; t < pc->ntok; t++)
				exp[vidx(pc, t, h, c)] = 1;
			continue;
		}
		h = (uint32_t)(j / (g->tokens_per_page * G));
		t = (uint32_t)(j / G % g->tokens_per_page);
		if (t >= pc->ntok)
			continue;
		for (c = (uint32_t)(j % G) * g->group_size;
		     c < (uint32_t)(j % G + 1) * g->group_size; c++)
			exp[isv * pc->nvals + vidx(pc, t, h, c)] = 1;
	}
}

/*
 * An uncorrectable error in one word of region @reg: exactly the values it
 * held (or its scales governed) are erased, the rest decode as before.
 */
static void one_uncorrectable(struct pcase *pc, const struct decoded *clean,
			      const uint8_t *clean_page, int reg)
{
	uint64_t ue[3] = { 0, 0, 0 };
	static const uint64_t zero[3];
	struct kvmem_page_counts c;
	struct decoded d;
	uint8_t *exp = kvmem_check_xmalloc(2 * pc->pvals),
		*hit = kvmem_check_xmalloc(pc->l.size);
	size_t off, nw, w, i, nerased = 0;
	unsigned int n, wb, k;

	region(pc, reg, &off, &nw, &n, &wb);
	k = ref_codecs[reg == R_SCALES ? META : pc->r.codec].ue;
	memcpy(pc->page, clean_page, pc->l.size);
	w = (size_t)kvmem_rng_below(&pc->rng, nw);
	inject_word(pc, off, w, n, wb, k);
	memcpy(hit, pc->page, pc->l.size);
	memset(exp, 0, 2 * pc->pvals);
	if (reg == R_SCALES)
		erase_scale_word(pc, w, exp);
	else
		erase_payload_word(pc, reg == R_V, w, exp);
	for (i = 0; i < 2 * pc->pvals; i++)
		nerased += exp[i];
	ue[reg == R_SCALES ? 1 : 2] = 1;

	decode(pc, &d);
	EXPECT_EQ(d.rc, pc->ntok, "%s", pc->name);
	expect_counts(pc, &d.counts, zero, ue, nerased, "decode");
	for (i = 0; i < 2 * pc->pvals; i++) {
		const float *y = i < pc->pvals ? d.k : d.v;
		const float *y0 = i < pc->pvals ? clean->k : clean->v;
		size_t j = i % pc->pvals;

		EXPECT_EQ(d.erased[i], exp[i],
			  "%s: erased[%zu] after %u flips in %s word %zu",
			  pc->name, i, k,
			  reg == R_SCALES ? "scale"
			  : reg == R_K	  ? "K"
					  : "V",
			  w);
		if (!exp[i])
			EXPECT_EQ(ref_f2u(y[j]), ref_f2u(y0[j]),
				  "%s: value %zu not erased but changed",
				  pc->name, i);
	}
	decoded_free(&d);

	memset(&c, 0xa5, sizeof(c));
	EXPECT_EQ(kvmem_page_verify(pc->page, &pc->g, &c), -EBADMSG, "%s",
		  pc->name);
	expect_counts(pc, &c, zero, ue, c.values_erased, "verify");
	memset(&c, 0xa5, sizeof(c));
	EXPECT_EQ(kvmem_page_scrub(pc->page, &pc->g, &c), -EBADMSG, "%s",
		  pc->name);
	expect_counts(pc, &c, zero, ue, c.values_erased, "scrub");
	/* An uncorrectable word stays as it is, unless it holds only padding
	 * (at the end of a row, or past the last scale bit) in a sealed page:
	 * that is put back. */
	if (pc->flags & KVMEM_HDR_SEALED &&
	    (reg == R_SCALES
		     ? w >= ((size_t)(pc->r.nk + pc->r.nv) * 16 + 11) / 12
		     : w % pc->r.rw >=
			       ((size_t)pc->g.head_dim * pc->r.bits + pc->r.k -
				1) / pc->r.k))
		memcpy(hit + off + w * wb, clean_page + off + w * wb, wb);
	EXPECT_MEM(pc->page, hit, pc->l.size,
		   "%s: scrub changed an uncorrectable page", pc->name);
	free(exp);
	free(hit);
}

static void error_case(const struct kvmem_geometry *g, int hot, uint32_t flags,
		       uint64_t seed)
{
	struct pcase pc;
	struct decoded clean;
	uint8_t *clean_page;
	unsigned int i;

	case_setup(&pc, g, hot, g->tokens_per_page, flags, seed);
	check_image(&pc);
	clean_page = kvmem_check_xmalloc(pc.l.size);
	memcpy(clean_page, pc.page, pc.l.size);
	decode(&pc, &clean);
	ck_assert_int_eq(clean.rc, pc.ntok);

	for (i = 0; i < R_NR; i++)
		single_errors(&pc, &clean, clean_page, 1u << i);
	single_errors(&pc, &clean, clean_page, (1u << R_NR) - 1);
	single_errors(&pc, &clean, clean_page, (1u << R_NR) - 1);

	if (ref_codecs[pc.r.codec].ue)
		for (i = 0; i < 4; i++)
			one_uncorrectable(&pc, &clean, clean_page,
					  i & 1 ? R_V : R_K);
	if (pc.r.sw)
		for (i = 0; i < 3; i++)
			one_uncorrectable(&pc, &clean, clean_page, R_SCALES);
	decoded_free(&clean);
	free(clean_page);
	case_free(&pc);
}

/*
 * The metadata at golay24's radius: three flips in every header word, every
 * scale word and, in a hot page, every word of its FP16 rows. All of them
 * are corrected: the page decodes to the bits of the clean page with
 * nothing erased, and a scrub puts back every byte.
 */
START_TEST(test_meta_at_radius)
{
	struct kvmem_geometry g;
	struct decoded clean, d;
	struct kvmem_page_counts c;
	struct pcase pc;
	uint8_t *clean_page;
	size_t w, nrow = 0;
	int hot;

	for (hot = 0; hot < 2; hot++) {
		mkgeom(&g, &geoms[_i], KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0);
		case_setup(&pc, &g, hot, g.tokens_per_page, KVMEM_HDR_SEALED,
			   0x3e7a + (uint64_t)_i);
		clean_page = kvmem_check_xmalloc(pc.l.size);
		memcpy(clean_page, pc.page, pc.l.size);
		decode(&pc, &clean);
		ck_assert_int_eq(clean.rc, pc.ntok);

		for (w = 0; w < HDR_WORDS; w++)
			inject_word(&pc, 0, w, 24, SW_BYTES, 3);
		for (w = 0; w < pc.r.sw; w++)
			inject_word(&pc, pc.l.scales_off, w, 24, SW_BYTES, 3);
		if (hot) {
			nrow = pc.r.rows * pc.r.rw;
			ck_assert_uint_eq(pc.r.codec, META);
			for (w = 0; w < nrow; w++) {
				inject_word(&pc, pc.l.k_off, w, 24, SW_BYTES,
					    3);
				inject_word(&pc, pc.l.v_off, w, 24, SW_BYTES,
					    3);
			}
		}

		decode(&pc, &d);
		EXPECT_EQ(d.rc, pc.ntok, "%s", pc.name);
		EXPECT_EQ(d.counts.header.corrected, HDR_WORDS, "%s", pc.name);
		EXPECT_EQ(d.counts.header.bits_corrected, 3 * HDR_WORDS, "%s",
			  pc.name);
		EXPECT_EQ(d.counts.scales.corrected, pc.r.sw, "%s", pc.name);
		EXPECT_EQ(d.counts.scales.bits_corrected, 3 * (uint64_t)pc.r.sw,
			  "%s", pc.name);
		EXPECT_EQ(d.counts.payload.corrected, 2 * nrow, "%s", pc.name);
		EXPECT_EQ(d.counts.payload.bits_corrected, 6 * nrow, "%s",
			  pc.name);
		EXPECT_EQ(d.counts.header.uncorrectable +
				  d.counts.scales.uncorrectable +
				  d.counts.payload.uncorrectable,
			  0, "%s", pc.name);
		EXPECT_EQ(d.counts.values_erased, 0, "%s", pc.name);
		EXPECT_MEM(d.k, clean.k, pc.pvals * sizeof(float), "%s K",
			   pc.name);
		EXPECT_MEM(d.v, clean.v, pc.pvals * sizeof(float), "%s V",
			   pc.name);
		EXPECT_EQ(kvmem_page_verify(pc.page, &g, &c), -EBADMSG, "%s",
			  pc.name);
		EXPECT_EQ(kvmem_page_scrub(pc.page, &g, &c), 0, "%s", pc.name);
		EXPECT_MEM(pc.page, clean_page, pc.l.size, "%s: scrubbed",
			   pc.name);
		EXPECT_EQ(kvmem_page_verify(pc.page, &g, &c), 0, "%s", pc.name);
		decoded_free(&d);
		decoded_free(&clean);
		free(clean_page);
		case_free(&pc);
	}
}
END_TEST

START_TEST(test_page_errors)
{
	struct kvmem_geometry g;
	unsigned int fmt, codec, ks;
	uint64_t seed = 0xe4404000u + (uint64_t)_i * 1000;

	FOR_EACH_KIND(g, _i, fmt, codec, ks)
	{
		error_case(&g, 0, KVMEM_HDR_SEALED, seed++);
		if (codec == (fmt + ks) % KVMEM_CODEC_NR)
			error_case(&g, 1, fmt & 1 ? KVMEM_HDR_SEALED : 0,
				   seed++);
	}
}
END_TEST

START_TEST(test_h84_double_erases_one_int4)
{
	/* The example of the brief, spelled out: int4 + h84, two flips in
	 * a payload word take away exactly the one value it holds. */
	struct kvmem_geometry g;
	struct pcase pc;
	struct decoded d;
	size_t i, w, nerased = 0, at;
	uint32_t t, h, c;

	mkgeom(&g, &geoms[REALISTIC], KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0);
	case_setup(&pc, &g, 0, g.tokens_per_page, KVMEM_HDR_SEALED, 0x84);
	h = 5;
	t = 17;
	c = 99;
	w = ((size_t)h * g.tokens_per_page + t) * pc.r.rw + c;
	pc.page[pc.l.k_off + w] ^= 0x21; /* bits 0 and 5 */
	decode(&pc, &d);
	ck_assert_int_eq(d.rc, (int)g.tokens_per_page);
	at = vidx(&pc, t, h, c);
	for (i = 0; i < 2 * pc.pvals; i++) {
		nerased += d.erased[i];
		if (i != at)
			EXPECT_EQ(d.erased[i], 0, "erased[%zu]", i);
	}
	ck_assert_uint_eq(d.erased[at], 1);
	ck_assert_uint_eq(nerased, 1);
	ck_assert_uint_eq(d.counts.payload.uncorrectable, 1);
	ck_assert_uint_eq(d.counts.payload.corrected, 0);
	ck_assert_uint_eq(d.counts.values_erased, 1);
	decoded_free(&d);
	case_free(&pc);
}
END_TEST

/* ---- CRC ----------------------------------------------------------------- */

/*
 * Change one payload codeword into another valid codeword (its data with
 * one bit flipped): no code can see it, only the CRC of a sealed page.
 */
/* A value bit of the first K row changes, through a valid codeword. */
static void swap_codeword(struct pcase *pc)
{
	size_t b = (size_t)kvmem_rng_below(&pc->rng, (uint64_t)pc->g.head_dim *
							     pc->r.bits);
	size_t w = b / pc->r.k;
	uint8_t *at = pc->page + pc->l.k_off + w * pc->r.wb;
	uint64_t d = word_data((int)pc->r.codec, at, "K", w, pc->name);

	d ^= 1ull << (b % pc->r.k);
	ref_word((int)pc->r.codec, d, at);
}

START_TEST(test_page_crc)
{
	static const uint64_t zero[3];
	struct kvmem_geometry g;
	struct kvmem_page_counts c;
	unsigned int fmt, codec, ks;
	uint64_t seed = 0xc5c0000;
	struct pcase pc;
	size_t pad;
	int hot;

	ck_assert_uint_eq(ref_crc32c(0, (const uint8_t *)"123456789", 9),
			  0xe3069283u);
	FOR_EACH_KIND(g, 1, fmt, codec, ks)
	{
		for (hot = 0; hot < 2; hot++) {
			if (hot && codec != fmt)
				continue;
			/* Sealed: CRC over [72, size) set and checked. */
			case_setup(&pc, &g, hot, g.tokens_per_page,
				   KVMEM_HDR_SEALED, seed++);
			check_image(&pc);
			ck_assert_uint_eq(pc.hexp.crc,
					  kvmem_crc32c(0, pc.page + HDR_BYTES,
						       pc.l.size - HDR_BYTES));
			swap_codeword(&pc);
			memset(&c, 0xa5, sizeof(c));
			EXPECT_EQ(kvmem_page_verify(pc.page, &g, &c), -EBADMSG,
				  "%s: a valid codeword changed", pc.name);
			if (pc.r.fmt != KVMEM_FMT_FP16) {
				expect_counts(&pc, &c, zero, zero, 0, "verify");
			} else {
				/* An FP16 row's check sees it too: one
				 * uncorrectable more than the words. */
				expect_ecc_counts(&c.header, HDR_WORDS, 0, 0,
						  "header", "verify", pc.name);
				expect_ecc_counts(&c.scales, 0, 0, 0, "scales",
						  "verify", pc.name);
				expect_ecc_counts(&c.payload,
						  2 * pc.r.rows * pc.r.rw +
							  2 * pc.r.nc + 1,
						  0, 1, "payload", "verify",
						  pc.name);
			}
			case_free(&pc);

			/* A byte of the zero padding changed: no value did,
			 * and a scrub puts it back. */
			case_setup(&pc, &g, hot, g.tokens_per_page,
				   KVMEM_HDR_SEALED, seed++);
			/* The last byte, or where V ends the page, the
			 * header's gap. */
			pad = pc.l.v_off + pc.r.blk < pc.l.size ? pc.l.size - 1
								: HDR_BYTES;
			pc.page[pad] ^= 0x10;
			EXPECT_EQ(kvmem_page_verify(pc.page, &g, NULL), 0,
				  "%s: padding changed", pc.name);
			EXPECT_EQ(kvmem_page_scrub(pc.page, &g, NULL), 0,
				  "%s: padding changed", pc.name);
			EXPECT_EQ(pc.page[pad], 0, "%s: scrubbed", pc.name);
			case_free(&pc);

			/* Not sealed: no CRC to check. */
			case_setup(&pc, &g, hot, g.tokens_per_page - 1, 0,
				   seed++);
			check_image(&pc);
			swap_codeword(&pc);
			EXPECT_EQ(kvmem_page_verify(pc.page, &g, NULL),
				  pc.r.fmt == KVMEM_FMT_FP16 ? -EBADMSG : 0,
				  "%s: unsealed page", pc.name);
			case_free(&pc);
		}
	}
}
END_TEST

/* ---- Garbled lines -------------------------------------------------------- */

/*
 * One garbled 64-byte line (a failed transfer, a dead chip in a burst:
 * each bit flips with odds 1/2, the injector's line channel) in what is
 * worth more than its own range: the header, the scales and their checks,
 * and anywhere in a page of FP16 values. About half the words it hits
 * decode to other codewords without a report; the checks must catch every
 * one. Every value reads back bit for bit as from the clean page, or is
 * erased, or the page is refused. A quantized value in a garbled payload
 * line may come back wrong within its group's range, as without ECC: not
 * tried here.
 */
static void line_case(const struct kvmem_geometry *g, int hot, uint64_t seed,
		      unsigned int trials, unsigned int *caught)
{
	struct pcase pc;
	struct decoded clean, d;
	uint8_t *orig;
	unsigned int n;
	size_t i, lines, line;

	case_setup(&pc, g, hot, g->tokens_per_page, KVMEM_HDR_SEALED, seed);
	decode(&pc, &clean);
	orig = kvmem_check_xmalloc(pc.l.size);
	memcpy(orig, pc.page, pc.l.size);
	lines = (pc.r.fmt == KVMEM_FMT_FP16 ? pc.l.v_off + pc.r.blk
					    : pc.l.k_off) /
		64;
	for (n = 0; n < trials; n++) {
		memcpy(pc.page, orig, pc.l.size);
		line = kvmem_rng_below(&pc.rng, lines);
		for (i = 0; i < 64; i++)
			pc.page[64 * line + i] ^=
				(uint8_t)kvmem_rng_next(&pc.rng);
		decode(&pc, &d);
		if (d.rc < 0) {
			EXPECT_EQ(d.rc, -EBADMSG, "%s: line %zu", pc.name,
				  line);
			(*caught)++;
			decoded_free(&d);
			continue;
		}
		*caught += d.counts.values_erased > 0;
		for (i = 0; i < 2 * pc.nvals; i++) {
			const float *x = i < pc.nvals ? d.k : d.v;
			const float *y = i < pc.nvals ? clean.k : clean.v;
			size_t j = i % pc.nvals;

			if (!d.erased[i])
				EXPECT_EQ(ref_f2u(x[j]), ref_f2u(y[j]),
					  "%s: line %zu garbled, %s value %zu "
					  "wrong and not erased",
					  pc.name, line,
					  i < pc.nvals ? "K" : "V", j);
		}
		decoded_free(&d);
	}
	decoded_free(&clean);
	free(orig);
	case_free(&pc);
}

START_TEST(test_line_fault_right_or_flagged)
{
	static const struct {
		unsigned int fmt, codec;
	} kinds[] = {
		{ KVMEM_FMT_INT4, KVMEM_CODEC_H84 },
		{ KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24 },
		{ KVMEM_FMT_INT8, KVMEM_CODEC_SECDED72 },
		{ KVMEM_FMT_INT2, KVMEM_CODEC_H74 },
		{ KVMEM_FMT_FP16, KVMEM_CODEC_H84 },
	};
	struct kvmem_geometry g;
	unsigned int i, caught = 0;
	int hot;

	for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		for (hot = 0; hot < 2; hot++) {
			mkgeom(&g, &geoms[_i], kinds[i].fmt, kinds[i].codec, 0);
			line_case(&g, hot, 0x11e0000u + 16 * i + (unsigned)hot,
				  40, &caught);
		}
	/* The lines did hit something. */
	ck_assert_uint_gt(caught, 100);
}
END_TEST

/* ---- Padding and lost pages --------------------------------------------- */

/* Flip random bits of [off, off + len) of the page; the count flipped. */
static unsigned int spoil(struct pcase *pc, size_t off, size_t len,
			  unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n && len; i++)
		pc->page[off + kvmem_rng_below(&pc->rng, len)] ^=
			(uint8_t)(1u << kvmem_rng_below(&pc->rng, 8));
	return len ? n : 0;
}

/*
 * Flip bits that carry no value, many at a time: in the gaps between the
 * regions and after V, in rows past ntokens and in the words at the end
 * of a row that hold only padding (uncorrectable ones too). Return: how
 * many.
 */
static unsigned int spoil_padding(struct pcase *pc)
{
	const struct rlay *r = &pc->r;
	const size_t vw = ((size_t)pc->g.head_dim * r->bits + r->k - 1) / r->k;
	const size_t rows = (size_t)pc->g.kv_heads * pc->g.tokens_per_page;
	const size_t ce = pc->l.checks_off + (size_t)r->nc * 2 * SW_BYTES;
	const size_t ke = pc->l.k_off + r->blk, ve = pc->l.v_off + r->blk;
	unsigned int n;
	size_t i, row;

	n = spoil(pc, HDR_BYTES, pc->l.scales_off - HDR_BYTES, 3);
	n += spoil(pc, ce, pc->l.k_off - ce, 3);
	/* The checks of rows past ntokens in an fp16 page. */
	for (i = 0; r->fmt == KVMEM_FMT_FP16 && i < r->nc; i++)
		if (i % pc->g.tokens_per_page >= pc->ntok)
			n += spoil(pc, pc->l.checks_off + 2 * SW_BYTES * i,
				   2 * SW_BYTES, 2);
	n += spoil(pc, ke, pc->l.v_off - ke, 3);
	n += spoil(pc, ve, pc->l.size - ve, 3);
	for (i = 0; i < 2 * rows; i++) {
		row = (i < rows ? pc->l.k_off : pc->l.v_off) + i % rows * r->rb;
		if (i % pc->g.tokens_per_page >= pc->ntok)
			n += spoil(pc, row, r->rb, 4);
		else
			n += spoil(pc, row + vw * r->wb, (r->rw - vw) * r->wb,
				   4);
	}
	return n;
}

static void padding_case(const struct kvmem_geometry *g, int hot, uint32_t ntok,
			 uint64_t seed)
{
	struct pcase pc;
	struct decoded clean, d;
	uint8_t *clean_page, *spoiled;
	unsigned int flips;
	size_t i, from, to, tidied = 0;

	case_setup(&pc, g, hot, ntok, KVMEM_HDR_SEALED, seed);
	clean_page = kvmem_check_xmalloc(pc.l.size);
	memcpy(clean_page, pc.page, pc.l.size);
	decode(&pc, &clean);
	flips = spoil_padding(&pc);
	ck_assert_uint_gt(flips, 0);
	EXPECT_EQ(kvmem__page_crc(pc.page, g, &pc.l, pc.ntok), pc.hexp.crc,
		  "%s: %u padding flips", pc.name, flips);
	decode(&pc, &d);
	EXPECT_EQ(d.rc, pc.ntok, "%s", pc.name);
	EXPECT_EQ(d.counts.values_erased, 0, "%s", pc.name);
	for (i = 0; i < pc.nvals; i++) {
		EXPECT_EQ(ref_f2u(d.k[i]), ref_f2u(clean.k[i]),
			  "%s: K value %zu", pc.name, i);
		EXPECT_EQ(ref_f2u(d.v[i]), ref_f2u(clean.v[i]),
			  "%s: V value %zu", pc.name, i);
	}
	decoded_free(&d);
	/* Put back in windows of any size, as kvmemd does a step at a
	 * time: the same as a scrub of the whole page. */
	spoiled = kvmem_check_xmalloc(pc.l.size);
	memcpy(spoiled, pc.page, pc.l.size);
	for (from = 0; from < pc.l.size; from = to) {
		to = from + 1 + kvmem_rng_below(&pc.rng, 3000);
		if (to > pc.l.size)
			to = pc.l.size;
		tidied +=
			kvmem__page_tidy(spoiled, g, &pc.l, pc.ntok, from, to);
	}
	EXPECT_MEM(spoiled, clean_page, pc.l.size,
		   "%s: tidied in windows after %u padding flips", pc.name,
		   flips);
	EXPECT(tidied > 0 && tidied <= flips, "%s: %zu bytes tidied", pc.name,
	       tidied);
	free(spoiled);
	kvmem_page_scrub(pc.page, g, NULL);
	EXPECT_MEM(pc.page, clean_page, pc.l.size,
		   "%s: scrubbed after %u padding flips", pc.name, flips);
	EXPECT_EQ(kvmem_page_verify(pc.page, g, NULL), 0, "%s", pc.name);
	swap_codeword(&pc);
	EXPECT(kvmem__page_crc(pc.page, g, &pc.l, pc.ntok) != pc.hexp.crc,
	       "%s: a value bit changed", pc.name);
	decoded_free(&clean);
	free(clean_page);
	case_free(&pc);
}

/*
 * Bits that carry no value change: every value decodes as before, the CRC
 * of what the values depend on still matches the header's, and a scrub
 * puts every byte back; a value bit that changes through a valid codeword
 * does change that CRC.
 */
START_TEST(test_page_padding_is_not_a_value)
{
	struct kvmem_geometry g;
	unsigned int fmt, codec, ks;
	uint64_t seed = 0xbadd0000u;
	int hot;

	FOR_EACH_KIND(g, _i ? 2 : 1, fmt, codec, ks)
	for (hot = 0; hot < 2; hot++) {
		if (hot && codec != fmt)
			continue;
		padding_case(&g, hot, 1, seed++);
		padding_case(&g, hot, 3, seed++);
	}
}
END_TEST

/*
 * A poisoned page: every value of every row it holds reads as lost, for
 * every format and codec and both kinds, so that a reader rebuilds or
 * refuses them; the header still reads as it was.
 */
START_TEST(test_page_poison_erases_every_value)
{
	struct kvmem_geometry g;
	unsigned int fmt, codec, ks;
	uint64_t seed = 0x9015000u;
	int hot;

	FOR_EACH_KIND(g, _i, fmt, codec, ks)
	for (hot = 0; hot < 2; hot++) {
		struct pcase pc;
		struct decoded d;
		struct kvmem_page_hdr got;
		uint8_t *before;
		size_t i;

		if (hot && codec != fmt)
			continue;
		/* A partial page too: its rows past ntokens stay padding. */
		case_setup(&pc, &g, hot,
			   hot ? (g.tokens_per_page + 1) / 2
			       : g.tokens_per_page,
			   KVMEM_HDR_SEALED, seed++);
		before = kvmem_check_xmalloc(pc.l.size);
		memcpy(before, pc.page, pc.l.size);
		kvmem__page_poison(pc.page, &g, &pc.l, pc.ntok);
		/* Only value words changed: header and padding did not. */
		ck_assert_int_eq(memcmp(pc.page, before, HDR_BYTES), 0);
		ck_assert_uint_eq(kvmem__page_tidy(pc.page, &g, &pc.l, pc.ntok,
						   0, pc.l.size),
				  0);
		ck_assert_int_eq(
			kvmem_page_read_header(pc.page, &g, &got, NULL), 0);
		EXPECT_MEM(&got, &pc.hexp, sizeof(got), "%s: header", pc.name);
		decode(&pc, &d);
		EXPECT_EQ(d.rc, pc.ntok, "%s", pc.name);
		EXPECT_EQ(d.counts.values_erased, 2 * pc.nvals, "%s", pc.name);
		for (i = 0; i < 2 * pc.nvals; i++)
			EXPECT_EQ(d.erased[i], 1, "%s: value %zu", pc.name, i);
		EXPECT_EQ(kvmem_page_verify(pc.page, &g, NULL), -EBADMSG, "%s",
			  pc.name);
		decoded_free(&d);
		free(before);
		case_free(&pc);
	}
}
END_TEST

/* ---- Bad arguments ------------------------------------------------------- */

START_TEST(test_page_bad_args)
{
	struct kvmem_geometry g, bad;
	struct kvmem_page_layout l;
	struct kvmem_page_hdr h, got;
	struct pcase pc;
	float *k, *v;
	int hot;

	mkgeom(&g, &geoms[0], KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0);
	case_setup(&pc, &g, 0, 2, KVMEM_HDR_SEALED, 0xbad);
	k = kvmem_check_xmalloc(pc.pvals * 2 * sizeof(float));
	v = kvmem_check_xmalloc(pc.pvals * 2 * sizeof(float));
	memset(k, 0, pc.pvals * 2 * sizeof(float));
	memset(v, 0, pc.pvals * 2 * sizeof(float));
	for (hot = 0; hot < 2; hot++) {
		h = pc.hin;
		h.ntokens = 0;
		ck_assert_int_eq(kvmem_page_encode(pc.page, &g, &h, hot, k, v),
				 -EINVAL);
		h.ntokens = g.tokens_per_page + 1;
		ck_assert_int_eq(kvmem_page_encode(pc.page, &g, &h, hot, k, v),
				 -EINVAL);
		h.ntokens = 0xffffffffu;
		ck_assert_int_eq(kvmem_page_encode(pc.page, &g, &h, hot, k, v),
				 -EINVAL);
	}
	bad = g;
	bad.group_size = 0;
	h = pc.hin;
	ck_assert_int_eq(kvmem_page_layout(&bad, 0, &l), -EINVAL);
	ck_assert_int_eq(kvmem_page_layout(&bad, 1, &l), -EINVAL);
	ck_assert_int_eq(kvmem_page_encode(pc.page, &bad, &h, 0, k, v),
			 -EINVAL);
	ck_assert_int_eq(kvmem_page_read_header(pc.page, &bad, &got, NULL),
			 -EINVAL);
	ck_assert_int_eq(kvmem_page_decode(pc.page, &bad, k, v, NULL, NULL),
			 -EINVAL);
	ck_assert_int_eq(kvmem_page_verify(pc.page, &bad, NULL), -EINVAL);
	ck_assert_int_eq(kvmem_page_scrub(pc.page, &bad, NULL), -EINVAL);
	bad = g;
	bad.format = KVMEM_FMT_NR;
	ck_assert_int_eq(kvmem_page_layout(&bad, 0, &l), -EINVAL);
	ck_assert_int_eq(kvmem_page_encode(pc.page, &bad, &h, 0, k, v),
			 -EINVAL);
	bad = g;
	bad.resv[2] = 1;
	ck_assert_int_eq(kvmem_page_layout(&bad, 0, &l), -EINVAL);
	/* The failed calls left the page as it was. */
	check_image(&pc);
	free(k);
	free(v);
	case_free(&pc);
}
END_TEST

KVMEM_SUITE(page)
{
	Suite *s = suite_create("page");
	TCase *tg = tcase_create("geometry");
	TCase *tr = tcase_create("roundtrip");
	TCase *th = tcase_create("header");
	TCase *te = tcase_create("errors");

	tcase_add_test(tg, test_geometry_default);
	tcase_add_test(tg, test_geometry_check);
	tcase_add_test(tg, test_geometry_digest);
	tcase_add_test(tg, test_layout);
	tcase_add_test(tg, test_layout_examples);
	tcase_add_test(tg, test_layout_overflow_refused);
	tcase_add_test(tg, test_layout_random_geometries);
	suite_add_tcase(s, tg);

	tcase_add_loop_test(tr, test_page_roundtrip, 0, NGEOM);
	tcase_add_test(tr, test_page_encode_overwrites);
	tcase_add_test(tr, test_page_bad_args);
	tcase_set_timeout(tr, 60);
	suite_add_tcase(s, tr);

	tcase_add_loop_test(th, test_header_single_flips, 0, NGEOM);
	tcase_add_test(th, test_header_triple_flips);
	tcase_add_test(th, test_header_quad_flips);
	tcase_add_test(th, test_header_mismatch);
	tcase_set_timeout(th, 60);
	suite_add_tcase(s, th);

	tcase_add_loop_test(te, test_page_errors, 0, NGEOM);
	tcase_add_loop_test(te, test_meta_at_radius, 0, NGEOM);
	tcase_add_test(te, test_h84_double_erases_one_int4);
	tcase_add_test(te, test_page_crc);
	tcase_add_loop_test(te, test_line_fault_right_or_flagged, 0, NGEOM);
	tcase_add_loop_test(te, test_page_padding_is_not_a_value, 0, 2);
	tcase_add_loop_test(te, test_page_poison_erases_every_value, 0, NGEOM);
	tcase_set_timeout(te, 60);
	suite_add_tcase(s, te);
	return s;
}
