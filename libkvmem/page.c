/* SPDX-License-Identifier: MIT */
/*
 * page.c - the protected KV page (see kvmem/page.h for the layout)
 *
 * Everything in a page is a codeword. The header, the scales, the checks
 * and hot pages are in the metadata code (golay24); the payload uses the
 * page's codec. The checks (CRC-32C over decoded data) catch what a code
 * turned into another codeword without a report.
 * Rows are decoded through kvmem__page_rows(), which attention,
 * kvmem_seq_read() and kvmem_page_decode() share, so there is one
 * definition of what a page reads back as, erasures included.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "kvmem/crc32c.h"
#include "kvmem/page.h"
#include "kvmem/quant.h"
#include "ecc_word.h"
#include "internal.h"
#include "quant_word.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the page header is encoded from its in-memory bytes: little-endian only"
#endif

_Static_assert(sizeof(struct kvmem_page_hdr) == 64, "page header is 64 bytes");
_Static_assert(KVMEM_PAGE_HDR_WORDS * 12 >= 8 * sizeof(struct kvmem_page_hdr) &&
		       (KVMEM_PAGE_HDR_WORDS - 1) * 12 <
			       8 * sizeof(struct kvmem_page_hdr),
	       "header words");
/* The header's data: 64 bytes and the 4 zero bits of its last word. */
#define HDR_DATA ((KVMEM_PAGE_HDR_WORDS * 12 + 7) / 8)

#define MAX_LAYERS 4096
#define MAX_HEADS 1024
#define MAX_DIM 1024
#define MAX_TOKENS 4096

static size_t align_up(size_t x, size_t a)
{
	return (x + a - 1) / a * a;
}

void kvmem_geometry_default(struct kvmem_geometry *g)
{
	g->tokens_per_page = 32;
	g->group_size = 32;
	g->sink_tokens = 4;
	g->format = KVMEM_FMT_INT4;
	g->codec = KVMEM_CODEC_H84;
	g->key_scales = KVMEM_SCALES_GROUP;
	g->rotation = KVMEM_ROTATE_NONE;
	memset(g->resv, 0, sizeof(g->resv));
}

/* Each field on its own, and the fields against each other. */
/* The sentence in @buf (NULL: none): -EINVAL. */
static int geometry_fail(char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int geometry_fail(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (buf && len) {
		va_start(ap, fmt);
		vsnprintf(buf, len, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* What is wrong with @g's fields, as a sentence in @buf; 0 or -EINVAL. */
static int geometry_fields(const struct kvmem_geometry *g, char *buf,
			   size_t len)
{
	static const struct {
		const char *name;
		size_t off;
		uint32_t max;
	} sizes[] = {
		{ "layers", offsetof(struct kvmem_geometry, layers),
		  MAX_LAYERS },
		{ "kv_heads", offsetof(struct kvmem_geometry, kv_heads),
		  MAX_HEADS },
		{ "head_dim", offsetof(struct kvmem_geometry, head_dim),
		  MAX_DIM },
		{ "tokens_per_page",
		  offsetof(struct kvmem_geometry, tokens_per_page),
		  MAX_TOKENS },
	};
	size_t i;

	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint32_t v;

		memcpy(&v, (const char *)g + sizes[i].off, sizeof(v));
		if (!v || v > sizes[i].max)
			return geometry_fail(buf, len, "%s %u is not in 1..%u",
					     sizes[i].name, v, sizes[i].max);
	}
	if (!g->group_size || g->head_dim % g->group_size)
		return geometry_fail(buf, len,
				     "head_dim %u is not a multiple of "
				     "group_size %u",
				     g->head_dim, g->group_size);
	if (g->sink_tokens > g->tokens_per_page)
		return geometry_fail(buf, len,
				     "sink_tokens %u is more than "
				     "tokens_per_page %u",
				     g->sink_tokens, g->tokens_per_page);
	if (!kvmem_format_get(g->format))
		return geometry_fail(buf, len,
				     "format %u is not one of 0..%u (fp16, "
				     "int8, int4, int2, fp8, lm2, lm3, lm4, "
				     "vq2)",
				     g->format, KVMEM_FMT_NR - 1);
	if (g->format == KVMEM_FMT_VQ2)
		return geometry_fail(buf, len,
				     "format vq2 needs a sequence's codebook: "
				     "it is an archive format "
				     "(kvmem_seq_archive()), not a geometry's");
	if (!kvmem_codec_get(g->codec))
		return geometry_fail(buf, len,
				     "codec %u is not one of 0..%u (h74, h84, "
				     "golay24, secded72)",
				     g->codec, KVMEM_CODEC_NR - 1);
	if (g->key_scales > KVMEM_SCALES_CHANNEL)
		return geometry_fail(buf, len,
				     "key_scales %u is not 0 (group) or 1 "
				     "(channel)",
				     g->key_scales);
	if (g->key_scales == KVMEM_SCALES_CHANNEL &&
	    g->format == KVMEM_FMT_FP16)
		return geometry_fail(buf, len,
				     "channel key scales need a quantized "
				     "format, not fp16");
	if (g->rotation > KVMEM_ROTATE_HADAMARD)
		return geometry_fail(buf, len,
				     "rotation %u is not 0 (none) or 1 "
				     "(hadamard)",
				     g->rotation);
	if (g->rotation && g->head_dim & (g->head_dim - 1))
		return geometry_fail(buf, len,
				     "the hadamard rotation needs a head_dim "
				     "that is a power of two, not %u",
				     g->head_dim);
	for (i = 0; i < sizeof(g->resv); i++)
		if (g->resv[i])
			return geometry_fail(buf, len, "resv[%zu] is not 0", i);
	return 0;
}

static int layout(const struct kvmem_geometry *g, int hot,
		  struct kvmem_page_layout *l);

int kvmem_geometry_explain(const struct kvmem_geometry *g, char *buf,
			   size_t len)
{
	struct kvmem_page_layout l;
	int hot;

	if (buf && len)
		buf[0] = 0;
	if (!g)
		return geometry_fail(buf, len, "no geometry");
	if (geometry_fields(g, buf, len))
		return -EINVAL;
	for (hot = 0; hot < 2; hot++)
		if (layout(g, hot, &l))
			return geometry_fail(buf, len,
					     "a%s page would be over %u bytes",
					     hot ? " hot (FP16)" : " sealed",
					     KVMEM_PAGE_MAX);
	return 0;
}

int kvmem_geometry_check(const struct kvmem_geometry *g)
{
	return kvmem_geometry_explain(g, NULL, 0);
}

/* FNV-1a over the fields, one at a time (no padding bytes). */
static uint64_t fnv(uint64_t h, uint32_t v)
{
	int i;

	for (i = 0; i < 4; i++) {
		h ^= v >> (8 * i) & 0xff;
		h *= 0x100000001b3ull;
	}
	return h;
}

uint64_t kvmem_geometry_digest(const struct kvmem_geometry *g)
{
	uint64_t h = 0xcbf29ce484222325ull;

	h = fnv(h, KVMEM_PAGE_VERSION);
	h = fnv(h, g->layers);
	h = fnv(h, g->kv_heads);
	h = fnv(h, g->head_dim);
	h = fnv(h, g->tokens_per_page);
	h = fnv(h, g->group_size);
	h = fnv(h, g->sink_tokens);
	h = fnv(h, g->format);
	h = fnv(h, g->codec);
	h = fnv(h, g->key_scales);
	/* Only a rotation: a geometry without one keeps the digest it had
	 * before there were rotations, and its stored pages stay its own. */
	return g->rotation ? fnv(h, 0x100u | g->rotation) : h;
}

/*
 * Every count in 64 bits from fields of at most 13 bits each, so nothing
 * wraps; a page over KVMEM_PAGE_MAX is refused before anything is narrowed
 * to the layout's 32-bit fields (which it then always fits).
 */
static int layout_of(const struct kvmem_geometry *g, int hot,
		     unsigned int format, unsigned int codec,
		     struct kvmem_page_layout *l)
{
	const struct kvmem_codec_info *ci;
	const struct kvmem_format_info *fi;
	uint64_t k, m, row_words, nk = 0, nv = 0, scale_words, nchecks, block;
	uint64_t off;

	memset(l, 0, sizeof(*l));
	l->hot = !!hot;
	l->format = (uint8_t)format;
	l->codec = (uint8_t)codec;
	ci = kvmem_codec_get(l->codec);
	fi = kvmem_format_get(l->format);
	/* Channel scales are a quantized format's: a page that keeps none
	 * (FP16, vq2) has no key scales to lay out. */
	l->key_scales = hot || !fi->qmax ? KVMEM_SCALES_GROUP : g->key_scales;
	k = ci->data_bits;

	/* Whole codewords, and whole bytes of data: m words make bytes. */
	m = k % 8 == 0 ? 1 : k % 4 == 0 ? 2 : 8;
	row_words = ((uint64_t)g->head_dim * fi->bits + k - 1) / k;
	row_words = (row_words + m - 1) / m * m;

	if (fi->qmax) {
		nv = (uint64_t)g->kv_heads * g->tokens_per_page *
		     (g->head_dim / g->group_size);
		nk = l->key_scales == KVMEM_SCALES_CHANNEL
			     ? (uint64_t)g->kv_heads * g->head_dim
			     : nv;
	}
	/* Whole bytes: golay24 words in pairs. */
	scale_words = ((nk + nv) * 16 + 23) / 24 * 2;
	/* A page without scales holds FP16 values: one check a row. */
	nchecks = fi->qmax ? (nk + nv + KVMEM_PAGE_CHECK_SCALES - 1) /
				     KVMEM_PAGE_CHECK_SCALES
			   : 2 * (uint64_t)g->kv_heads * g->tokens_per_page;

	block = (uint64_t)g->kv_heads * g->tokens_per_page * row_words *
		ci->word_bytes;
	off = align_up(KVMEM_PAGE_HDR_BYTES, 64);
	l->scales_off = off;
	off += scale_words * 3;
	l->checks_off = off;
	off = align_up(off + nchecks * 6, 64);
	l->k_off = off;
	off = align_up(off + block, 64);
	l->v_off = off;
	off = align_up(off + block, KVMEM_PAGE_ALIGN);
	if (off > KVMEM_PAGE_MAX)
		return -EINVAL;
	l->size = off;
	l->nscales_k = (uint32_t)nk;
	l->nscales_v = (uint32_t)nv;
	l->scale_words = (uint32_t)scale_words;
	l->nchecks = (uint32_t)nchecks;
	l->row_words = (uint32_t)row_words;
	l->row_bytes = (uint32_t)(row_words * ci->word_bytes);
	l->row_data = (uint32_t)(row_words * k / 8);
	return 0;
}

static int layout(const struct kvmem_geometry *g, int hot,
		  struct kvmem_page_layout *l)
{
	return layout_of(g, hot, hot ? KVMEM_FMT_FP16 : g->format,
			 hot ? KVMEM_PAGE_META_CODEC : g->codec, l);
}

/* A sealed page of @g archived in @format and @codec; see page.h. */
static int layout_as(const struct kvmem_geometry *g, unsigned int format,
		     unsigned int codec, struct kvmem_page_layout *l)
{
	struct kvmem_page_layout own;

	if (format == KVMEM_FMT_FP16 || !kvmem_format_get((int)format) ||
	    (format == KVMEM_FMT_VQ2 && g->head_dim % KVMEM__VQ_DIM) ||
	    !kvmem_codec_get((int)codec) || layout(g, 0, &own) ||
	    layout_of(g, 0, format, codec, l))
		return -EINVAL;
	return l->size > own.size ? -E2BIG : 0;
}

int kvmem_page_layout_as(const struct kvmem_geometry *g, unsigned int format,
			 unsigned int codec, struct kvmem_page_layout *l)
{
	if (!g || geometry_fields(g, NULL, 0) || !l)
		return -EINVAL;
	return layout_as(g, format, codec, l);
}

int kvmem_page_layout(const struct kvmem_geometry *g, int hot,
		      struct kvmem_page_layout *l)
{
	if (!g || geometry_fields(g, NULL, 0) || !l || layout(g, hot, l))
		return -EINVAL;
	return 0;
}

size_t kvmem__page_scale_words(const struct kvmem_page_layout *l)
{
	return ((size_t)(l->nscales_k + l->nscales_v) * 16 + 11) / 12;
}

/* The header's own check: its 64 bytes with hcrc 0. */
static uint32_t hdr_crc(const struct kvmem_page_hdr *hdr)
{
	struct kvmem_page_hdr h = *hdr;

	h.hcrc = 0;
	return kvmem_crc32c(0, &h, sizeof(h));
}

void kvmem__hdr_encode(uint8_t *page, const struct kvmem_page_hdr *hdr)
{
	uint8_t data[HDR_DATA] = { 0 };
	struct kvmem_page_hdr h = *hdr;

	h.hcrc = hdr_crc(&h);
	memcpy(data, &h, sizeof(h));
	kvmem_ecc_encode(KVMEM_PAGE_META_CODEC, data, page,
			 KVMEM_PAGE_HDR_WORDS);
}

int kvmem__hdr_decode(const uint8_t *page, struct kvmem_page_hdr *hdr,
		      struct kvmem_ecc_counts *c)
{
	uint8_t data[HDR_DATA];
	struct kvmem_ecc_counts wc;
	int ret;

	ret = kvmem_ecc_decode(KVMEM_PAGE_META_CODEC, page, data,
			       KVMEM_PAGE_HDR_WORDS, &wc, NULL, NULL);
	memcpy(hdr, data, sizeof(*hdr));
	/* Words that decoded to other codewords: the header as a whole is
	 * lost, one uncorrectable word more. */
	if (!ret && hdr->hcrc != hdr_crc(hdr)) {
		wc.uncorrectable++;
		ret = -EBADMSG;
	}
	hdr->hcrc = 0;
	if (c)
		*c = wc;
	return ret;
}

int kvmem_page_read_header(const void *page, const struct kvmem_geometry *g,
			   struct kvmem_page_hdr *hdr,
			   struct kvmem_ecc_counts *counts)
{
	struct kvmem_page_layout l;
	int ret;

	if (!page || !g || !hdr)
		return -EINVAL;
	ret = kvmem__hdr_decode(page, hdr, counts);
	if (ret)
		return ret;
	if (hdr->magic != KVMEM_PAGE_MAGIC ||
	    hdr->version != KVMEM_PAGE_VERSION ||
	    hdr->geometry != kvmem_geometry_digest(g) || !hdr->ntokens ||
	    hdr->ntokens > g->tokens_per_page)
		return -EINVAL;
	if (hdr->flags & KVMEM_HDR_HOT
		    ? hdr->format != KVMEM_FMT_FP16 ||
			      hdr->codec != KVMEM_PAGE_META_CODEC
		    : (hdr->format != g->format || hdr->codec != g->codec) &&
			      kvmem_page_layout_as(g, hdr->format, hdr->codec,
						   &l))
		return -EINVAL;
	return 0;
}

/* Bitstream index of the first scale of row (@h, @t) of K or V. */
static size_t row_scale(const struct kvmem_geometry *g,
			const struct kvmem_page_layout *l, int is_v, uint32_t h,
			uint32_t t)
{
	size_t groups = g->head_dim / g->group_size;

	if (!is_v && l->key_scales == KVMEM_SCALES_CHANNEL)
		return (size_t)h * g->head_dim;
	return (is_v ? l->nscales_k : 0) +
	       ((size_t)h * g->tokens_per_page + t) * groups;
}

/*
 * Channel scales: K's values share one scale per channel over the whole
 * page. Said by the layout, never by a group of 1: group_size 1 gives
 * every value a scale of its own, row by row.
 */
static int row_chan(const struct kvmem_page_layout *l, int is_v)
{
	return !is_v && l->key_scales == KVMEM_SCALES_CHANNEL;
}

/* Values per scale along a row. */
static unsigned int row_group(const struct kvmem_geometry *g,
			      const struct kvmem_page_layout *l, int is_v)
{
	return row_chan(l, is_v) ? 1 : g->group_size;
}

/* Scales from one row to the next (0: every row has the same). */
static size_t row_sstride(const struct kvmem_geometry *g,
			  const struct kvmem_page_layout *l, int is_v)
{
	return row_chan(l, is_v) ? 0 : g->head_dim / g->group_size;
}

/* The check of row (@h, @t) of K or V in a page without scales. */
static size_t row_check(const struct kvmem_geometry *g, int is_v, uint32_t h,
			uint32_t t)
{
	return ((size_t)is_v * g->kv_heads + h) * g->tokens_per_page + t;
}

static uint8_t *row_ptr(const struct kvmem_geometry *g,
			const struct kvmem_page_layout *l, uint8_t *page,
			int is_v, uint32_t h, uint32_t t)
{
	return page + (is_v ? l->v_off : l->k_off) +
	       ((size_t)h * g->tokens_per_page + t) * l->row_bytes;
}

/*
 * Write the checks of @n runs of @data, each @len bytes but the last
 * (@total bytes in all), as checks [@first, @first + n) of the page: a
 * check is the low 24 bits of the CRC-32C of the data it covers.
 */
static void put_checks(uint8_t *page, const struct kvmem_page_layout *l,
		       size_t first, const uint8_t *data, size_t len,
		       size_t total, size_t n)
{
	uint32_t crc[64];
	uint8_t c[3 * 64];
	size_t i, j, m;

	for (i = 0; i < n; i += m) {
		m = n - i < 64 ? n - i : 64;
		kvmem__crc32c_runs(data + i * len, len, total - i * len, m,
				   crc);
		for (j = 0; j < m; j++) {
			uint32_t v = crc[j];

			c[3 * j] = (uint8_t)v;
			c[3 * j + 1] = (uint8_t)(v >> 8);
			c[3 * j + 2] = (uint8_t)(v >> 16);
		}
		kvmem_ecc_encode(KVMEM_PAGE_META_CODEC, c,
				 page + l->checks_off + (first + i) * 6, 2 * m);
	}
}

/*
 * Quantize and encode rows [0, n) of K or V, given token-major as a model
 * produces them; their scales go to @scales (the page's FP16 stream).
 */
/* Row @x of book @b as vq2 indices: the nearest entry to each four. */
static void vq_row(const struct kvmem_geometry *g,
		   const struct kvmem__vq_view *vq, size_t b, const float *x,
		   uint8_t *out)
{
	const float *e = vq->entries + b * KVMEM__VQ_ENTRIES * KVMEM__VQ_DIM;
	const uint8_t *lost =
		vq->lost ? vq->lost + b * KVMEM__VQ_ENTRIES : NULL;
	float p[MAX_DIM];
	uint32_t i;

	for (i = 0; i < g->head_dim; i++)
		p[i] = kvmem_finite_or_zero(x[i]);
	kvmem__vq_nearest(e, lost, p, g->head_dim / KVMEM__VQ_DIM, out);
}

static void encode_block(const struct kvmem_geometry *g,
			 const struct kvmem_page_layout *l, uint8_t *page,
			 int is_v, const float *x, uint32_t n, uint16_t *scales,
			 uint8_t *data, const struct kvmem__vq_view *vq)
{
	const size_t stride = (size_t)g->kv_heads * g->head_dim;
	const unsigned int group = row_group(g, l, is_v);
	const int chan = row_chan(l, is_v);
	uint32_t h, t, c;

	for (h = 0; h < g->kv_heads; h++) {
		const float *xh = x + (size_t)h * g->head_dim;

		if (chan)
			for (c = 0; c < g->head_dim; c++)
				scales[row_scale(g, l, is_v, h, 0) + c] =
					kvmem__scale(l->format, xh + c, n,
						     stride);
		for (t = 0; t < n; t++) {
			uint16_t *sc =
				l->nscales_k
					? scales + row_scale(g, l, is_v, h, t)
					: NULL;
			uint8_t *rd = data + (size_t)t * l->row_data;

			memset(rd, 0, l->row_data);
			if (l->format == KVMEM_FMT_VQ2) {
				vq_row(g, vq, (size_t)is_v * g->kv_heads + h,
				       xh + t * stride, rd);
				continue;
			}
			if (!chan && l->nscales_k)
				for (c = 0; c < g->head_dim; c += group)
					sc[c / group] = kvmem__scale(
						l->format, xh + t * stride + c,
						group, 1);
			kvmem__quantize_row(l->format, xh + t * stride,
					    g->head_dim, group, sc, rd);
		}
		kvmem_ecc_encode(l->codec, data,
				 row_ptr(g, l, page, is_v, h, 0),
				 (size_t)n * l->row_words);
		if (!l->scale_words)
			put_checks(page, l, row_check(g, is_v, h, 0), data,
				   l->row_data, (size_t)n * l->row_data, n);
	}
}

/*
 * The scratch of kvmem__page_scales() and kvmem__page_rows(): decoded row
 * data, its erasure bitmap, decoded scales and theirs. One function lays it
 * out for both the size and the split, so the two cannot disagree.
 */
struct scratch {
	uint8_t *data;
	uint64_t *rows_bm;
	uint8_t *halves;
	uint64_t *scales_bm;
	uint8_t *copy[2]; /* [is_v]: a block of codewords, corrected */
	uint8_t *values[2]; /* [is_v]: int4 values, one per byte */
	uint8_t *checks; /* decoded checks, 3 bytes each */
	uint64_t *checks_bm; /* their erasure bitmap */
	uint8_t *bad; /* RUN_* for each scale segment or row */
	uint8_t *status; /* enum kvmem_ecc_status of scale or row words */
};

/*
 * The int4 values of a row of golay24 words, its padding included: rows
 * are unpacked a tile at a time, in one stream, each at this stride.
 */
static size_t golay_row_values(const struct kvmem_geometry *g,
			       const struct kvmem_page_layout *l)
{
	return l->codec == KVMEM_CODEC_GOLAY24 ? (size_t)l->row_words * 3
					       : g->head_dim;
}

/* @off bytes into @base; NULL when @base is (a layout only sized). */
static inline uint8_t *at(void *base, size_t off)
{
	return base ? (uint8_t *)base + off : NULL;
}

static size_t scratch_layout(const struct kvmem_geometry *g,
			     const struct kvmem_page_layout *l, void *base,
			     struct scratch *sp)
{
	const size_t rows_words = (size_t)g->tokens_per_page * l->row_words;
	size_t off = 0;

	sp->data = at(base, off);
	off += align_up((size_t)g->tokens_per_page * l->row_data, 8);
	sp->rows_bm = (uint64_t *)(void *)at(base, off);
	off += (rows_words + 63) / 64 * 8;
	sp->halves = at(base, off);
	off += align_up(
		kvmem_ecc_data_bytes(KVMEM_PAGE_META_CODEC, l->scale_words), 8);
	sp->scales_bm = (uint64_t *)(void *)at(base, off);
	off += ((size_t)l->scale_words + 63) / 64 * 8;
	sp->copy[0] = at(base, off);
	off += (size_t)g->tokens_per_page * l->row_bytes;
	sp->copy[1] = at(base, off);
	off += (size_t)g->tokens_per_page * l->row_bytes;
	/* golay_nibbles() may write 16 bytes past the last value. */
	sp->values[0] = at(base, off);
	off += (size_t)g->tokens_per_page * golay_row_values(g, l) + 16;
	sp->values[1] = at(base, off);
	off += (size_t)g->tokens_per_page * golay_row_values(g, l) + 16;
	off = align_up(off, 8);
	sp->checks_bm = (uint64_t *)(void *)at(base, off);
	off += ((size_t)l->nchecks * 2 + 63) / 64 * 8;
	sp->checks = at(base, off);
	off += (size_t)l->nchecks * 3;
	sp->bad = at(base, off);
	off += l->nchecks;
	sp->status = at(base, off);
	off += (size_t)l->scale_words > rows_words ? l->scale_words
						   : rows_words;
	return off;
}

/* What a check says of the run of data it covers. */
enum {
	RUN_OK, /* as written */
	RUN_LOST, /* its words decoded, and do not match: all of it lost */
	RUN_UNVERIFIED, /* a word of it or of its check is uncorrectable:
			 * every word the decoder changed is lost */
};

/* Is a bit of [@from, @to) set in bitmap @bm (NULL: none is)? */
static int bm_any(const uint64_t *bm, size_t from, size_t to)
{
	if (!bm)
		return 0;
	for (; from < to && from % 64; from++)
		if (bm[from / 64] >> (from % 64) & 1)
			return 1;
	for (; from + 64 <= to; from += 64)
		if (bm[from / 64])
			return 1;
	for (; from < to; from++)
		if (bm[from / 64] >> (from % 64) & 1)
			return 1;
	return 0;
}

/*
 * Compare checks [@first, @first + n) with @n runs of @data as
 * put_checks() cut them, each of @wpr decoded words whose uncorrectable
 * ones are set in @ue (NULL when none is). Sets @sp->bad[i] to RUN_* for
 * each run; adds the check words to @c (unless @words is 0: the caller
 * counted them), and one uncorrectable word more for each RUN_LOST.
 * Return: the number of runs not RUN_OK.
 */
static size_t test_checks(const struct kvmem_page_layout *l,
			  const uint8_t *page, size_t first,
			  const uint8_t *data, size_t len, size_t total,
			  size_t n, const uint64_t *ue, size_t wpr,
			  struct scratch *sp, struct kvmem_ecc_counts *c,
			  int words)
{
	struct kvmem_ecc_counts wc;
	size_t i, nbad = 0, extra = 0;
	uint32_t crc[64];

	kvmem_ecc_decode(KVMEM_PAGE_META_CODEC,
			 page + l->checks_off + first * 6, sp->checks, 2 * n,
			 &wc, NULL, sp->checks_bm);
	for (i = 0; i < n; i++) {
		const uint8_t *cb = sp->checks + 3 * i;
		uint32_t want =
			cb[0] | (uint32_t)cb[1] << 8 | (uint32_t)cb[2] << 16;
		uint8_t bad;

		/* The runs' CRCs 64 at a time, as put_checks() takes them. */
		if (i % 64 == 0)
			kvmem__crc32c_runs(data + i * len, len, total - i * len,
					   n - i < 64 ? n - i : 64, crc);
		if (sp->checks_bm[2 * i / 64] >> (2 * i % 64) & 3 ||
		    bm_any(ue, i * wpr, (i + 1) * wpr))
			bad = RUN_UNVERIFIED;
		else if ((crc[i % 64] & 0xffffff) != want)
			bad = RUN_LOST;
		else
			bad = RUN_OK;
		/* Counted from the register: the store through a uint8_t
		 * pointer may alias anything, so the counts read it (and
		 * sp->bad) back from memory when they took it from there. */
		sp->bad[i] = bad;
		extra += bad == RUN_LOST;
		nbad += bad != RUN_OK;
	}
	if (words)
		kvmem__counts_add(c, &wc);
	c->uncorrectable += extra;
	return nbad;
}

size_t kvmem__page_scratch_size(const struct kvmem_geometry *g,
				const struct kvmem_page_layout *l)
{
	struct scratch sp;

	return scratch_layout(g, l, NULL, &sp);
}

int kvmem__page_scales(const struct kvmem_geometry *g,
		       const struct kvmem_page_layout *l, const uint8_t *page,
		       float *scales, uint8_t *erased,
		       struct kvmem_ecc_counts *c, void *scratch)
{
	struct kvmem_ecc_counts wc;
	struct scratch sp;
	uint32_t i, n = l->nscales_k + l->nscales_v;
	size_t nbad;
	int nerased = 0;

	if (!l->scale_words)
		return 0;
	scratch_layout(g, l, scratch, &sp);
	kvmem_ecc_decode(KVMEM_PAGE_META_CODEC, page + l->scales_off, sp.halves,
			 l->scale_words, &wc, NULL, sp.scales_bm);
	kvmem__counts_add(c, &wc);
	nbad = test_checks(l, page, 0, sp.halves, 2 * KVMEM_PAGE_CHECK_SCALES,
			   (size_t)n * 2, l->nchecks,
			   wc.uncorrectable ? sp.scales_bm : NULL,
			   KVMEM_PAGE_CHECK_SCALES * 16 / 12, &sp, c, 1);
	/* FP16 to float: the fp16 "dequantization" of one long row. */
	kvmem__attn()->dequant(KVMEM_FMT_FP16, sp.halves, n, 1, NULL, scales);
	if (!nbad && kvmem__attn()->scales_ok(scales, n)) {
		memset(erased, 0, n);
		return 0;
	}
	/* Which words the decoder changed, where that matters. */
	if (nbad)
		kvmem_ecc_decode(KVMEM_PAGE_META_CODEC, page + l->scales_off,
				 sp.halves, l->scale_words, NULL, sp.status,
				 NULL);
	for (i = 0; i < n; i++) {
		/* Scale i is stream bits [16i, 16i + 16), in two golay24
		 * words of segment i / KVMEM_PAGE_CHECK_SCALES. A scale is
		 * never negative or non-finite when written: one that reads
		 * so was damaged past what the code saw (a miscorrection),
		 * and is lost. */
		size_t w0 = (size_t)i * 16 / 12,
		       w1 = ((size_t)i * 16 + 15) / 12;
		int run = sp.bad[i / KVMEM_PAGE_CHECK_SCALES];
		int bad = !(scales[i] >= 0.0f && scales[i] <= 65504.0f);

		erased[i] = bad || run == RUN_LOST ||
			    (run == RUN_UNVERIFIED &&
			     (sp.status[w0] || sp.status[w1]));
		/* A lost scale makes its values lost under every policy
		 * (kvmem__page_rows()); impossible ones read as 0. */
		if (bad)
			scales[i] = 0.0f;
		nerased += erased[i];
	}
	return nerased;
}

/* Mark the values of row @r that erased word @w of a block carried. */
static void mark_word(const struct kvmem_geometry *g,
		      const struct kvmem_page_layout *l, size_t w,
		      uint8_t *erased)
{
	const unsigned int k = kvmem_codec_get(l->codec)->data_bits;
	const struct kvmem_format_info *fi = kvmem_format_get(l->format);
	const unsigned int bits = fi->bits;
	size_t r = w / l->row_words, wi = w % l->row_words;
	size_t first = wi * k / bits, last = ((wi + 1) * k - 1) / bits;
	size_t i;

	/* A vq2 index is a byte for KVMEM__VQ_DIM values. */
	if (l->format == KVMEM_FMT_VQ2) {
		first = wi * k / 8 * KVMEM__VQ_DIM;
		last = ((wi + 1) * k - 1) / 8 * KVMEM__VQ_DIM + KVMEM__VQ_DIM -
		       1;
	}

	for (i = first; i <= last && i < g->head_dim; i++)
		erased[r * g->head_dim + i] =
			fi->qmax || l->format == KVMEM_FMT_VQ2
				? KVMEM__LOST_BOUNDED
				: KVMEM__LOST;
}

/* Whether one of @n rows of @d E4M3 codes, @stride bytes apart from @c,
 * holds the NaN code: one call where the rows are back to back. */
static int fp8_rows_nan(const uint8_t *c, size_t stride, uint32_t n, uint32_t d)
{
	const struct kvmem__attn_kernels *kn = kvmem__attn();
	uint32_t r;

	if (stride == d)
		return kn->fp8_nan(c, (size_t)n * d);
	for (r = 0; r < n; r++)
		if (kn->fp8_nan(c + r * stride, d))
			return 1;
	return 0;
}

/* Whether a scale of @n rows from scale @sbase is erased (@erased NULL:
 * none is). */
static int rows_scale_lost(const struct kvmem_geometry *g, unsigned int grp,
			   const uint8_t *erased, size_t sbase, size_t stride,
			   uint32_t n)
{
	size_t r, i;

	for (r = 0; erased && r < n; r++)
		for (i = 0; i < g->head_dim / grp; i++)
			if (erased[sbase + r * stride + i])
				return 1;
	return 0;
}

/* The four bytes of @x, each in the low byte of a 16-bit lane. */
static uint64_t spread16(uint32_t x)
{
	uint64_t t = x;

	t = (t | t << 16) & 0x0000ffff0000ffffull;
	return (t | t << 8) & 0x00ff00ff00ff00ffull;
}

/*
 * The @n 2-bit codes (lm2, int2) of a row of h74/h84 words at @w, two a
 * word (bits 0-1 and 2-3 of its data nibble), one a byte at @o: four
 * words at a time, their even codes and their odd ones interleaved
 * (little-endian).
 */
static void lm2_codes(const uint8_t *w, unsigned int n, uint8_t *o)
{
	const uint32_t m = 0x03030303u;
	unsigned int i = 0;
	uint64_t y;
	uint32_t x;

#ifdef __SSE2__
	/* Sixteen words at a time: the even codes and the odd ones of each
	 * byte, interleaved byte by byte (SSE2 is x86-64's baseline). */
	const __m128i m2 = _mm_set1_epi8(3);

	for (; i + 32 <= n; i += 32) {
		__m128i x16 = _mm_loadu_si128((const __m128i *)(w + i / 2));
		__m128i lo = _mm_and_si128(x16, m2);
		__m128i hi = _mm_and_si128(_mm_srli_epi16(x16, 2), m2);

		_mm_storeu_si128((__m128i *)(o + i), _mm_unpacklo_epi8(lo, hi));
		_mm_storeu_si128((__m128i *)(o + i + 16),
				 _mm_unpackhi_epi8(lo, hi));
	}
#endif
	for (; i + 8 <= n; i += 8) {
		memcpy(&x, w + i / 2, 4);
		y = spread16(x & m) | spread16(x >> 2 & m) << 8;
		memcpy(o + i, &y, 8);
	}
	for (; i < n; i++)
		o[i] = w[i / 2] >> (2 * (i % 2)) & 3;
}

const uint8_t *
kvmem__page_rows_cw4(const struct kvmem_geometry *g,
		     const struct kvmem_page_layout *l, const uint8_t *page,
		     int is_v, uint32_t h, uint32_t t0, uint32_t n,
		     const float *scales, const uint8_t *scale_erased,
		     const float **sc, size_t *sstride, unsigned int *group,
		     size_t *rstride, struct kvmem_ecc_counts *c, void *scratch)
{
	const uint8_t *code = row_ptr(g, l, (uint8_t *)page, is_v, h, t0);
	const unsigned int grp = row_group(g, l, is_v);
	const size_t nw = (size_t)n * l->row_words;
	const size_t sbase = row_scale(g, l, is_v, h, t0);
	const size_t stride = row_sstride(g, l, is_v);
	/* Two codes a word in h74/h84 words; lm3's eight in six. */
	const int lm2 =
		l->format == KVMEM_FMT_LM2 || l->format == KVMEM_FMT_INT2;
	const int lm3 = l->format == KVMEM_FMT_LM3;
	struct kvmem_ecc_counts wc;
	struct scratch sp;

	if ((l->format != KVMEM_FMT_INT4 && l->format != KVMEM_FMT_LM4 &&
	     !lm2 && !lm3) ||
	    (l->codec != KVMEM_CODEC_H84 && l->codec != KVMEM_CODEC_H74 &&
	     (l->codec != KVMEM_CODEC_GOLAY24 || lm2 || lm3)))
		return NULL;
	if (rows_scale_lost(g, grp, scale_erased, sbase, stride, n))
		return NULL;
	scratch_layout(g, l, scratch, &sp);
	if (kvmem__ecc_scan(l->codec, code, nw) == nw) {
		c->clean += nw;
	} else {
		/* Correct a copy: the kernels then read the same values as
		 * for a clean page, so a corrected read is bit-identical to
		 * a clean one. The page itself is the scrubber's. */
		memcpy(sp.copy[is_v], code, (size_t)n * l->row_bytes);
		if (kvmem_ecc_scrub(l->codec, sp.copy[is_v], nw, &wc, NULL, 0))
			return NULL;
		kvmem__counts_add(c, &wc);
		code = sp.copy[is_v];
	}
	*sc = scales + sbase;
	*sstride = stride;
	*group = grp;
	*rstride = l->row_bytes;
	if (l->codec == KVMEM_CODEC_GOLAY24) {
		/* Rows are whole words, one after the other: one stream. */
		kvmem__attn()->golay_nibbles(
			code, (size_t)n * l->row_bytes,
			(unsigned int)(n * golay_row_values(g, l)),
			sp.values[is_v]);
		*rstride = golay_row_values(g, l);
		return sp.values[is_v];
	}
	if (lm2) {
		uint8_t *o = sp.values[is_v];
		size_t r;

		for (r = 0; r < n; r++, o += g->head_dim)
			lm2_codes(code + r * l->row_bytes, g->head_dim, o);
		*rstride = g->head_dim;
		return sp.values[is_v];
	}
	if (lm3) {
		uint8_t *o = sp.values[is_v];
		size_t r;

		/* Rows that fill their words end to end are one stream. */
		if ((size_t)l->row_words * 4 == (size_t)g->head_dim * 3)
			kvmem__attn()->lm3_codes(code, (size_t)n * l->row_bytes,
						 n * g->head_dim, o);
		else
			for (r = 0; r < n; r++, o += g->head_dim)
				kvmem__attn()->lm3_codes(
					code + r * l->row_bytes, l->row_bytes,
					g->head_dim, o);
		*rstride = g->head_dim;
		return sp.values[is_v];
	}
	return code;
}

const uint8_t *kvmem__page_rows_b8(const struct kvmem_geometry *g,
				   const struct kvmem_page_layout *l,
				   const uint8_t *page, int is_v, uint32_t h,
				   uint32_t t0, uint32_t n, const float *scales,
				   const uint8_t *scale_erased,
				   const float **sc, size_t *sstride,
				   unsigned int *group, size_t *rstride,
				   struct kvmem_ecc_counts *c, void *scratch)
{
	const uint8_t *code = row_ptr(g, l, (uint8_t *)page, is_v, h, t0);
	const unsigned int grp = row_group(g, l, is_v);
	const size_t nw = (size_t)n * l->row_words;
	const size_t sbase = row_scale(g, l, is_v, h, t0);
	const size_t stride = row_sstride(g, l, is_v);
	struct kvmem_ecc_counts wc;
	struct scratch sp;

	if (l->format != KVMEM_FMT_INT8 && l->format != KVMEM_FMT_FP8)
		return NULL;
	if (rows_scale_lost(g, grp, scale_erased, sbase, stride, n))
		return NULL;
	scratch_layout(g, l, scratch, &sp);
	/* Data fits where the codewords would: row_data <= row_bytes. */
	kvmem_ecc_decode(l->codec, code, sp.copy[is_v], nw, &wc, NULL, NULL);
	if (wc.uncorrectable)
		return NULL;
	/* The NaN code is one no encoder writes: a value that reads so is
	 * lost, and kvmem__page_rows() rebuilds it. */
	if (l->format == KVMEM_FMT_FP8 &&
	    fp8_rows_nan(sp.copy[is_v], l->row_data, n, g->head_dim))
		return NULL;
	kvmem__counts_add(c, &wc);
	*sc = scales + sbase;
	*sstride = stride;
	*group = grp;
	*rstride = l->row_data;
	return sp.copy[is_v];
}

const uint8_t *kvmem__page_rows_vq(const struct kvmem_geometry *g,
				   const struct kvmem_page_layout *l,
				   const uint8_t *page, int is_v, uint32_t h,
				   uint32_t t0, uint32_t n, const float *books,
				   const uint8_t *entry_erased,
				   const float **book, size_t *rstride,
				   struct kvmem_ecc_counts *c, void *scratch)
{
	const uint8_t *code = row_ptr(g, l, (uint8_t *)page, is_v, h, t0);
	const size_t b = ((size_t)is_v * g->kv_heads + h) * KVMEM__VQ_ENTRIES;
	const size_t nw = (size_t)n * l->row_words;
	struct kvmem_ecc_counts wc, cc = { 0 };
	struct scratch sp;
	size_t e;

	if (l->format != KVMEM_FMT_VQ2)
		return NULL;
	for (e = 0; entry_erased && e < KVMEM__VQ_ENTRIES; e++)
		if (entry_erased[b + e])
			return NULL;
	scratch_layout(g, l, scratch, &sp);
	kvmem_ecc_decode(l->codec, code, sp.copy[is_v], nw, &wc, NULL, NULL);
	if (wc.uncorrectable)
		return NULL;
	/* A row's check sees what its words' code miscorrected (three
	 * flips in an h84 word read as one): such a row is lost. */
	if (test_checks(l, page, row_check(g, is_v, h, t0), sp.copy[is_v],
			l->row_data, (size_t)n * l->row_data, n, NULL,
			l->row_words, &sp, &cc, 1))
		return NULL;
	kvmem__counts_add(c, &wc);
	kvmem__counts_add(c, &cc);
	*book = books + b * KVMEM__VQ_DIM;
	*rstride = l->row_data;
	return sp.copy[is_v];
}

void kvmem__page_tile_bytes(const struct kvmem_geometry *g,
			    const struct kvmem_page_layout *l,
			    const uint8_t *page, uint32_t h, uint32_t t0,
			    uint32_t n, const uint8_t *p[3], size_t len[3])
{
	uint8_t *pg = (uint8_t *)page;

	p[0] = page;
	len[0] = h ? 0 : l->k_off;
	p[1] = row_ptr(g, l, pg, 0, h, t0);
	p[2] = row_ptr(g, l, pg, 1, h, t0);
	len[1] = len[2] = (size_t)n * l->row_bytes;
}

long kvmem__page_rows(const struct kvmem_geometry *g,
		      const struct kvmem_page_layout *l, const uint8_t *page,
		      int is_v, uint32_t h, uint32_t t0, uint32_t n,
		      const float *scales, const uint8_t *scale_erased,
		      float *out, uint8_t *erased, struct kvmem_ecc_counts *c,
		      void *scratch)
{
	const struct kvmem__attn_kernels *kn = kvmem__attn();
	const uint8_t *code = row_ptr(g, l, (uint8_t *)page, is_v, h, t0);
	const uint8_t *cw;
	const float *csc;
	size_t css, crs;
	unsigned int cgroup;
	const unsigned int group = row_group(g, l, is_v);
	const unsigned int D = g->head_dim;
	const size_t nw = (size_t)n * l->row_words;
	/* Row r's scales start at sbase + r * sstride (channel scales are
	 * the same for every row). */
	const size_t sbase = l->nscales_k ? row_scale(g, l, is_v, h, t0) : 0;
	const size_t sstride = row_sstride(g, l, is_v);
	/* vq2: the book of this head's K or V, and whether an entry the
	 * rows use is lost. */
	const int vq = l->format == KVMEM_FMT_VQ2;
	const size_t book =
		((size_t)is_v * g->kv_heads + h) * KVMEM__VQ_ENTRIES;
	struct scratch sp;
	struct kvmem_ecc_counts wc;
	int scales_lost = 0, nonfinite = 0, entries_lost = 0;
	size_t r, i, rows_lost = 0;
	long nerased = 0;

	/* 4-bit codes in clean (or corrected) nibble codewords: straight
	 * from the words, the same values as the general path. */
	cw = kvmem__page_rows_cw4(g, l, page, is_v, h, t0, n, scales,
				  scale_erased, &csc, &css, &cgroup, &crs, c,
				  scratch);
	if (cw) {
		for (r = 0; r < n; r++)
			kn->dequant_cw4(cw + r * crs, D, cgroup, csc + r * css,
					kvmem__code_values(l->format),
					out + r * D);
		return 0;
	}
	if (scale_erased && !vq)
		for (r = 0; r < n && !scales_lost; r++)
			for (i = 0; i < D / group; i++)
				scales_lost |=
					scale_erased[sbase + r * sstride + i];

	scratch_layout(g, l, scratch, &sp);
	kvmem_ecc_decode(l->codec, code, sp.data, nw, &wc, NULL, sp.rows_bm);
	kvmem__counts_add(c, &wc);
	if (!l->scale_words)
		rows_lost =
			test_checks(l, page, row_check(g, is_v, h, t0), sp.data,
				    l->row_data, (size_t)n * l->row_data, n,
				    wc.uncorrectable ? sp.rows_bm : NULL,
				    l->row_words, &sp, c, 1);
	for (r = 0; r < n && vq; r++)
		for (i = 0; i < D / KVMEM__VQ_DIM; i++) {
			const size_t e = book + sp.data[r * l->row_data + i];

			memcpy(out + r * D + i * KVMEM__VQ_DIM,
			       scales + e * KVMEM__VQ_DIM,
			       KVMEM__VQ_DIM * sizeof(*out));
			entries_lost |= scale_erased && scale_erased[e];
		}
	for (r = 0; r < n && !vq; r++)
		kn->dequant(l->format, sp.data + r * l->row_data, D, group,
			    l->nscales_k ? scales + sbase + r * sstride : NULL,
			    out + r * D);
	/* The encoder never writes a non-finite FP16 value nor the FP8 NaN
	 * code: one that reads so was damaged past what the code saw, and
	 * is lost too. FP8 looks at the codes (fp8_rows_nan()): this runs
	 * on every clean tile. */
	if (l->format == KVMEM_FMT_FP16)
		for (i = 0; i < (size_t)n * D && !nonfinite; i++)
			nonfinite = !isfinite(out[i]);
	if (l->format == KVMEM_FMT_FP8)
		nonfinite = fp8_rows_nan(sp.data, l->row_data, n, D);
	if (!wc.uncorrectable && !scales_lost && !nonfinite && !rows_lost &&
	    !entries_lost)
		return 0;

	memset(erased, 0, (size_t)n * D);
	for (i = 0; i < (nw + 63) / 64; i++) {
		uint64_t m = sp.rows_bm[i];

		while (m) {
			mark_word(g, l, i * 64 + (size_t)__builtin_ctzll(m),
				  erased);
			m &= m - 1;
		}
	}
	if (scales_lost)
		for (r = 0; r < n; r++)
			for (i = 0; i < D; i++)
				if (scale_erased[sbase + r * sstride +
						 i / group])
					erased[r * D + i] = KVMEM__LOST;
	/* A lost entry could have been anything: rebuilt under every
	 * policy, as an FP16 value is. */
	for (r = 0; r < n && entries_lost; r++)
		for (i = 0; i < D / KVMEM__VQ_DIM; i++)
			if (scale_erased[book + sp.data[r * l->row_data + i]])
				memset(erased + r * D + i * KVMEM__VQ_DIM,
				       KVMEM__LOST, KVMEM__VQ_DIM);
	if (rows_lost) {
		kvmem_ecc_decode(l->codec, code, sp.data, nw, NULL, sp.status,
				 NULL);
		for (r = 0; r < n; r++) {
			if (sp.bad[r] == RUN_LOST)
				memset(erased + r * D, KVMEM__LOST, D);
			if (sp.bad[r] != RUN_UNVERIFIED)
				continue;
			for (i = r * l->row_words; i < (r + 1) * l->row_words;
			     i++)
				if (sp.status[i])
					mark_word(g, l, i, erased);
		}
	}
	if (nonfinite)
		for (i = 0; i < (size_t)n * D; i++)
			if (!isfinite(out[i])) {
				erased[i] = KVMEM__LOST;
				out[i] = 0.0f;
			}
	for (i = 0; i < (size_t)n * D; i++)
		nerased += !!erased[i];
	return nerased;
}

void kvmem__page_put_token(const struct kvmem_geometry *g,
			   const struct kvmem_page_layout *l, uint8_t *page,
			   uint32_t t, const float *k, const float *v,
			   uint8_t *row)
{
	float rot[MAX_DIM];
	uint32_t h;
	int is_v;

	for (is_v = 0; is_v < 2; is_v++)
		for (h = 0; h < g->kv_heads; h++) {
			const float *x =
				(is_v ? v : k) + (size_t)h * g->head_dim;

			if (g->rotation) {
				memcpy(rot, x, g->head_dim * sizeof(*x));
				kvmem__rotate_stored(g, rot, 1);
				x = rot;
			}
			kvmem__quantize_row(KVMEM_FMT_FP16, x, g->head_dim, 1,
					    NULL, row);
			memset(row + (size_t)g->head_dim * 2, 0,
			       l->row_data - (size_t)g->head_dim * 2);
			kvmem_ecc_encode(l->codec, row,
					 row_ptr(g, l, page, is_v, h, t),
					 l->row_words);
			put_checks(page, l, row_check(g, is_v, h, t), row,
				   l->row_data, l->row_data, 1);
		}
}

/* Encode a whole page in layout @l; the caller checked the arguments. */
static int encode_as(void *page, const struct kvmem_geometry *g,
		     const struct kvmem_page_layout *l,
		     const struct kvmem_page_hdr *hdr, const float *k,
		     const float *v, const struct kvmem__vq_view *vq)
{
	struct kvmem_page_hdr h;
	uint16_t *scales;
	uint8_t *data;

	if (l->format == KVMEM_FMT_VQ2 && (!vq || !vq->entries))
		return -EOPNOTSUPP;

	scales = calloc(
		kvmem_ecc_data_bytes(KVMEM_PAGE_META_CODEC, l->scale_words) /
				2 +
			1,
		sizeof(*scales));
	data = malloc((size_t)g->tokens_per_page * l->row_data);
	if (!scales || !data) {
		free(scales);
		free(data);
		return -ENOMEM;
	}
	memset(page, 0, l->size);
	encode_block(g, l, page, 0, k, hdr->ntokens, scales, data, vq);
	encode_block(g, l, page, 1, v, hdr->ntokens, scales, data, vq);
	kvmem_ecc_encode(KVMEM_PAGE_META_CODEC, scales,
			 (uint8_t *)page + l->scales_off, l->scale_words);
	if (l->scale_words)
		put_checks(page, l, 0, (const uint8_t *)scales,
			   2 * KVMEM_PAGE_CHECK_SCALES,
			   ((size_t)l->nscales_k + l->nscales_v) * 2,
			   l->nchecks);
	free(scales);
	free(data);

	h = *hdr;
	h.magic = KVMEM_PAGE_MAGIC;
	h.version = KVMEM_PAGE_VERSION;
	h.format = l->format;
	h.codec = l->codec;
	h.geometry = kvmem_geometry_digest(g);
	h.flags = (h.flags & ~KVMEM_HDR_HOT) | (l->hot ? KVMEM_HDR_HOT : 0);
	h.crc = h.flags & KVMEM_HDR_SEALED
			? kvmem_crc32c(0,
				       (uint8_t *)page + KVMEM_PAGE_HDR_BYTES,
				       l->size - KVMEM_PAGE_HDR_BYTES)
			: 0;
	kvmem__hdr_encode(page, &h);
	return 0;
}

int kvmem__page_encode_stored(void *page, const struct kvmem_geometry *g,
			      const struct kvmem_page_hdr *hdr, int hot,
			      const float *k, const float *v)
{
	struct kvmem_page_layout l;

	if (!page || !hdr || !k || !v || kvmem_page_layout(g, hot, &l) ||
	    !hdr->ntokens || hdr->ntokens > g->tokens_per_page)
		return -EINVAL;
	return encode_as(page, g, &l, hdr, k, v, NULL);
}

int kvmem_page_encode(void *page, const struct kvmem_geometry *g,
		      const struct kvmem_page_hdr *hdr, int hot, const float *k,
		      const float *v)
{
	size_t n;
	float *rk, *rv;
	int ret;

	if (!g || !hdr || !g->rotation || kvmem_geometry_check(g) ||
	    !hdr->ntokens || hdr->ntokens > g->tokens_per_page)
		return kvmem__page_encode_stored(page, g, hdr, hot, k, v);
	if (!k || !v)
		return -EINVAL;
	n = (size_t)hdr->ntokens * g->kv_heads;
	rk = malloc(n * g->head_dim * sizeof(*rk));
	rv = malloc(n * g->head_dim * sizeof(*rv));
	ret = -ENOMEM;
	if (rk && rv) {
		memcpy(rk, k, n * g->head_dim * sizeof(*rk));
		memcpy(rv, v, n * g->head_dim * sizeof(*rv));
		kvmem__rotate_stored(g, rk, n);
		kvmem__rotate_stored(g, rv, n);
		ret = kvmem__page_encode_stored(page, g, hdr, hot, rk, rv);
	}
	free(rk);
	free(rv);
	return ret;
}

/* Read the header and pick the layout it names. */
static int page_open(const void *page, const struct kvmem_geometry *g,
		     struct kvmem_page_hdr *hdr, struct kvmem_page_layout *l,
		     struct kvmem_ecc_counts *c)
{
	int ret = kvmem_page_read_header(page, g, hdr, c);

	if (ret)
		return ret;
	return layout_of(g, !!(hdr->flags & KVMEM_HDR_HOT), hdr->format,
			 hdr->codec, l);
}

int kvmem__page_decode_stored(const void *page, const struct kvmem_geometry *g,
			      const struct kvmem__vq_view *vq, float *k,
			      float *v, uint8_t *erased,
			      struct kvmem_page_counts *counts)
{
	struct kvmem_page_counts pc = { 0 };
	struct kvmem_page_layout l;
	struct kvmem_page_hdr hdr;
	float *scales = NULL, *tile = NULL;
	uint8_t *serased = NULL, *terased = NULL;
	void *scratch = NULL;
	const size_t tok = g ? (size_t)g->kv_heads * g->head_dim : 0;
	uint32_t h, t, i;
	int ret, is_v, is_vq;

	if (!k || !v)
		return -EINVAL;
	ret = page_open(page, g, &hdr, &l, &pc.header);
	if (ret)
		goto out;
	/* A vq2 page's scales are its codebooks. */
	is_vq = l.format == KVMEM_FMT_VQ2;
	ret = -EOPNOTSUPP;
	if (is_vq && (!vq || !vq->entries))
		goto out;
	ret = -ENOMEM;
	scales = malloc(((size_t)l.nscales_k + l.nscales_v + 1) *
			sizeof(*scales));
	serased = malloc((size_t)l.nscales_k + l.nscales_v + 1);
	tile = malloc((size_t)g->tokens_per_page * g->head_dim * sizeof(*tile));
	terased = malloc((size_t)g->tokens_per_page * g->head_dim);
	scratch = malloc(kvmem__page_scratch_size(g, &l));
	if (!scales || !serased || !tile || !terased || !scratch)
		goto out;
	if (!kvmem__page_scales(g, &l, page, scales, serased, &pc.scales,
				scratch)) {
		free(serased);
		serased = NULL;
	}
	if (erased)
		memset(erased, 0, 2 * hdr.ntokens * tok);
	for (is_v = 0; is_v < 2; is_v++)
		for (h = 0; h < g->kv_heads; h++) {
			long ne = kvmem__page_rows(
				g, &l, page, is_v, h, 0, hdr.ntokens,
				is_vq ? vq->entries : scales,
				is_vq ? vq->lost : serased, tile, terased,
				&pc.payload, scratch);

			pc.values_erased += (uint64_t)ne;
			for (t = 0; t < hdr.ntokens; t++) {
				size_t at = t * tok + (size_t)h * g->head_dim;

				memcpy((is_v ? v : k) + at,
				       tile + (size_t)t * g->head_dim,
				       g->head_dim * sizeof(*tile));
				if (erased && ne)
					for (i = 0; i < g->head_dim; i++)
						erased[is_v * hdr.ntokens *
							       tok +
						       at + i] =
							!!terased[(size_t)t *
									  g->head_dim +
								  i];
			}
		}
	ret = (int)hdr.ntokens;
out:
	if (counts)
		*counts = pc;
	free(scales);
	free(serased);
	free(tile);
	free(terased);
	free(scratch);
	return ret;
}

/* A rotated row with an erased value is erased whole once rotated back. */
static void erase_rows(const struct kvmem_geometry *g, uint8_t *erased,
		       size_t rows)
{
	size_t r;

	for (r = 0; r < rows; r++) {
		uint8_t *e = erased + r * g->head_dim;

		if (memchr(e, 1, g->head_dim))
			memset(e, 1, g->head_dim);
	}
}

int kvmem_page_decode(const void *page, const struct kvmem_geometry *g,
		      float *k, float *v, uint8_t *erased,
		      struct kvmem_page_counts *counts)
{
	int ret =
		kvmem__page_decode_stored(page, g, NULL, k, v, erased, counts);
	size_t rows;

	if (ret <= 0 || !g->rotation)
		return ret;
	rows = (size_t)ret * g->kv_heads;
	kvmem__rotate_rows(g, k, rows, 1);
	kvmem__rotate_rows(g, v, rows, 1);
	if (erased)
		erase_rows(g, erased, 2 * rows);
	return ret;
}

/* ---- padding ---------------------------------------------------------- */

/*
 * Runs of a page's bytes after the header, in page order, each all value
 * (the scales, and the codewords of rows [0, ntokens) that hold a value
 * bit) or all padding (the gaps, the rows past ntokens, the codewords at
 * the end of a row that hold only padding bits). The encoder writes
 * padding as zeros, and a zero word is a codeword of every codec. Only the
 * parts inside the window [from, to) are passed on, and only the rows
 * that meet it are looked at, so a walk in windows costs the page once.
 */
struct runs {
	void (*fn)(void *ctx, size_t off, size_t len, int pad);
	void *ctx;
	size_t from, to;
	size_t off, len;
	int pad;
};

static void run_flush(struct runs *r)
{
	size_t a = r->off > r->from ? r->off : r->from;
	size_t b = r->off + r->len < r->to ? r->off + r->len : r->to;

	if (a < b)
		r->fn(r->ctx, a, b - a, r->pad);
	r->len = 0;
}

static void run_add(struct runs *r, size_t off, size_t len, int pad)
{
	if (!len)
		return;
	if (r->len && r->pad == pad && r->off + r->len == off) {
		r->len += len;
		return;
	}
	if (r->len)
		run_flush(r);
	r->off = off;
	r->len = len;
	r->pad = pad;
}

/* Rows [0, nrows) of a block at @off that meet the window, in order. */
static void block_runs(struct runs *r, size_t off, size_t nrows, size_t rb,
		       size_t tpp, uint32_t ntokens, size_t vbytes)
{
	size_t i = r->from > off ? (r->from - off) / rb : 0;
	size_t end = r->to > off ? (r->to - off + rb - 1) / rb : 0;

	for (end = end < nrows ? end : nrows; i < end; i++) {
		if (i % tpp >= ntokens) {
			run_add(r, off + i * rb, rb, 1);
			continue;
		}
		run_add(r, off + i * rb, vbytes, 0);
		run_add(r, off + i * rb + vbytes, rb - vbytes, 1);
	}
}

static void page_runs(const struct kvmem_geometry *g,
		      const struct kvmem_page_layout *l, uint32_t ntokens,
		      size_t from, size_t to,
		      void (*fn)(void *ctx, size_t off, size_t len, int pad),
		      void *ctx)
{
	const struct kvmem_codec_info *ci = kvmem_codec_get(l->codec);
	const unsigned int bits = kvmem_format_get(l->format)->bits;
	const size_t vbytes = ((size_t)g->head_dim * bits + ci->data_bits - 1) /
			      ci->data_bits * ci->word_bytes;
	const size_t rows = (size_t)g->kv_heads * g->tokens_per_page;
	const size_t blk = rows * l->row_bytes;
	/* A word past the last scale bit (words come in pairs) holds only
	 * padding. */
	const size_t scales_end =
		l->scales_off + kvmem__page_scale_words(l) * 3;
	const size_t checks_end = l->checks_off + (size_t)l->nchecks * 6;
	struct runs r = { .fn = fn, .ctx = ctx, .from = from, .to = to };

	run_add(&r, KVMEM_PAGE_HDR_BYTES, l->scales_off - KVMEM_PAGE_HDR_BYTES,
		1);
	run_add(&r, l->scales_off, scales_end - l->scales_off, 0);
	run_add(&r, scales_end, l->checks_off - scales_end, 1);
	/* The checks of rows past ntokens are padding too. */
	if (l->scale_words)
		run_add(&r, l->checks_off, checks_end - l->checks_off, 0);
	else
		block_runs(&r, l->checks_off, 2 * rows, 6, g->tokens_per_page,
			   ntokens, 6);
	run_add(&r, checks_end, l->k_off - checks_end, 1);
	block_runs(&r, l->k_off, rows, l->row_bytes, g->tokens_per_page,
		   ntokens, vbytes);
	run_add(&r, l->k_off + blk, l->v_off - l->k_off - blk, 1);
	block_runs(&r, l->v_off, rows, l->row_bytes, g->tokens_per_page,
		   ntokens, vbytes);
	run_add(&r, l->v_off + blk, l->size - l->v_off - blk, 1);
	if (r.len)
		run_flush(&r);
}

struct tidy {
	uint8_t *page;
	size_t changed;
};

static void tidy_run(void *ctx, size_t off, size_t len, int pad)
{
	struct tidy *t = ctx;
	size_t i = off, end = off + len;
	uint64_t w;

	if (!pad)
		return;
	while (i < end) {
		/* Padding is almost always zero already: look 8 at a time. */
		if (!(i % 8) && end - i >= 8) {
			memcpy(&w, t->page + i, 8);
			if (!w) {
				i += 8;
				continue;
			}
		}
		if (t->page[i]) {
			/* A reader never decodes padding; one store each
			 * all the same, as the scrubber's corrections. */
			__atomic_store_n(&t->page[i], 0, __ATOMIC_RELAXED);
			t->changed++;
		}
		i++;
	}
}

size_t kvmem__page_tidy(uint8_t *page, const struct kvmem_geometry *g,
			const struct kvmem_page_layout *l, uint32_t ntokens,
			size_t from, size_t to)
{
	struct tidy t = { .page = page };

	page_runs(g, l, ntokens, from, to, tidy_run, &t);
	return t.changed;
}

struct crc {
	const uint8_t *page;
	uint32_t crc;
};

static void crc_run(void *ctx, size_t off, size_t len, int pad)
{
	static const uint8_t zeros[4096];
	struct crc *c = ctx;
	size_t n;

	if (!pad) {
		c->crc = kvmem_crc32c(c->crc, c->page + off, len);
		return;
	}
	for (; len; len -= n) {
		n = len < sizeof(zeros) ? len : sizeof(zeros);
		c->crc = kvmem_crc32c(c->crc, zeros, n);
	}
}

uint32_t kvmem__page_crc(const uint8_t *page, const struct kvmem_geometry *g,
			 const struct kvmem_page_layout *l, uint32_t ntokens)
{
	struct crc c = { .page = page };

	page_runs(g, l, ntokens, 0, l->size, crc_run, &c);
	return c.crc;
}

/*
 * A word of each codec that its decoder reports uncorrectable: two bits
 * off the zero codeword (four for golay24). h74 detects nothing; its word
 * holds data 0xf instead, which reads as a NaN in an fp16 page (lost, see
 * kvmem__page_rows()), and in a quantized page the scales are lost anyway.
 */
static void poison_word(int codec, uint8_t *w)
{
	const unsigned int wb = kvmem_codec_get(codec)->word_bytes;

	memset(w, 0, wb);
	switch (codec) {
	case KVMEM_CODEC_H74:
		w[0] = kvmem_h74_encode(0xf);
		break;
	case KVMEM_CODEC_GOLAY24:
		w[0] = 0x0f;
		break;
	default:
		w[0] = 0x03;
		break;
	}
}

struct poison {
	uint8_t *page;
	const struct kvmem_page_layout *l;
};

/* A value run lies in one region and holds whole words of its codec. */
static void poison_run(void *ctx, size_t off, size_t len, int pad)
{
	const struct poison *ps = ctx;
	const int codec =
		off < ps->l->k_off ? KVMEM_PAGE_META_CODEC : ps->l->codec;
	const unsigned int wb = kvmem_codec_get(codec)->word_bytes;
	uint8_t w[16];
	size_t i;

	if (pad)
		return;
	poison_word(codec, w);
	for (i = 0; i + wb <= len; i += wb)
		memcpy(ps->page + off + i, w, wb);
}

void kvmem__page_poison(uint8_t *page, const struct kvmem_geometry *g,
			const struct kvmem_page_layout *l, uint32_t ntokens)
{
	struct poison ps = { .page = page, .l = l };

	page_runs(g, l, ntokens, 0, l->size, poison_run, &ps);
}

/*
 * The checks of a page whose words are scrubbed or checked already: one
 * uncorrectable word more in @pc for each check that fails with its words
 * good. Return: 1 when a check fails, 0 when none does, -ENOMEM.
 */
static int page_checks(const void *page, const struct kvmem_geometry *g,
		       const struct kvmem_page_layout *l, uint32_t ntokens,
		       struct kvmem_page_counts *pc)
{
	const size_t n = (size_t)l->nscales_k + l->nscales_v;
	void *scratch = malloc(kvmem__page_scratch_size(g, l));
	struct scratch sp;
	size_t bad = 0;
	uint32_t h;
	int is_v;

	if (!scratch)
		return -ENOMEM;
	scratch_layout(g, l, scratch, &sp);
	if (l->scale_words) {
		kvmem_ecc_decode(KVMEM_PAGE_META_CODEC,
				 (const uint8_t *)page + l->scales_off,
				 sp.halves, l->scale_words, NULL, NULL,
				 sp.scales_bm);
		bad = test_checks(
			l, page, 0, sp.halves, 2 * KVMEM_PAGE_CHECK_SCALES,
			2 * n, l->nchecks, sp.scales_bm,
			KVMEM_PAGE_CHECK_SCALES * 16 / 12, &sp, &pc->scales, 0);
	} else {
		for (is_v = 0; is_v < 2; is_v++)
			for (h = 0; h < g->kv_heads; h++) {
				kvmem_ecc_decode(l->codec,
						 row_ptr(g, l, (uint8_t *)page,
							 is_v, h, 0),
						 sp.data,
						 (size_t)ntokens * l->row_words,
						 NULL, NULL, sp.rows_bm);
				bad += test_checks(
					l, page, row_check(g, is_v, h, 0),
					sp.data, l->row_data,
					(size_t)ntokens * l->row_data, ntokens,
					sp.rows_bm, l->row_words, &sp,
					&pc->payload, 0);
			}
	}
	free(scratch);
	return !!bad;
}

/*
 * Scrub (@write) or check every region of a page, then its checks. A page
 * whose header is uncorrectable is not walked: its kind, and so its
 * layout, is unknown.
 */
static int page_walk(void *page, const struct kvmem_geometry *g,
		     struct kvmem_page_counts *counts, int write)
{
	struct kvmem_page_counts pc = { 0 };
	struct kvmem_ecc_counts wc;
	struct kvmem_page_layout l;
	struct kvmem_page_hdr hdr;
	struct region {
		size_t off, nwords;
		int codec;
		struct kvmem_ecc_counts *c;
	} rg[5];
	size_t i, block;
	void *buf = NULL;
	int ret;

	ret = page_open(page, g, &hdr, &l, &wc);
	if (ret) {
		if (ret == -EBADMSG)
			pc.header = wc;
		goto out;
	}
	block = (size_t)g->kv_heads * g->tokens_per_page * l.row_words;
	rg[0] = (struct region){ 0, KVMEM_PAGE_HDR_WORDS, KVMEM_PAGE_META_CODEC,
				 &pc.header };
	rg[1] = (struct region){ l.scales_off, l.scale_words,
				 KVMEM_PAGE_META_CODEC, &pc.scales };
	/* Check words count with what they check. */
	rg[2] = (struct region){ l.checks_off, 2 * (size_t)l.nchecks,
				 KVMEM_PAGE_META_CODEC,
				 l.scale_words ? &pc.scales : &pc.payload };
	rg[3] = (struct region){ l.k_off, block, l.codec, &pc.payload };
	rg[4] = (struct region){ l.v_off, block, l.codec, &pc.payload };
	if (!write) {
		buf = malloc(
			kvmem_ecc_data_bytes(l.codec, block) +
			kvmem_ecc_data_bytes(KVMEM_PAGE_META_CODEC,
					     l.scale_words + 2 * l.nchecks +
						     KVMEM_PAGE_HDR_WORDS));
		if (!buf) {
			ret = -ENOMEM;
			goto out;
		}
	}
	for (i = 0; i < KVMEM_ARRAY_SIZE(rg); i++) {
		uint8_t *p = (uint8_t *)page + rg[i].off;

		if (write)
			kvmem_ecc_scrub(rg[i].codec, p, rg[i].nwords, &wc, NULL,
					0);
		else
			kvmem_ecc_decode(rg[i].codec, p, buf, rg[i].nwords, &wc,
					 NULL, NULL);
		kvmem__counts_add(rg[i].c, &wc);
	}
	ret = page_checks(page, g, &l, hdr.ntokens, &pc);
	if (ret < 0)
		goto out;
	if (ret || pc.header.uncorrectable || pc.scales.uncorrectable ||
	    pc.payload.uncorrectable)
		ret = -EBADMSG;
	/* Verify reports what a scrub would have to do, and a CRC mismatch
	 * that the codes did not see. */
	if (!write && (pc.header.corrected || pc.scales.corrected ||
		       pc.payload.corrected))
		ret = -EBADMSG;
	if (!write && !ret && hdr.flags & KVMEM_HDR_SEALED &&
	    kvmem__page_crc(page, g, &l, hdr.ntokens) != hdr.crc)
		ret = -EBADMSG;
	/* A sealed page is immutable: its padding can be put back. */
	if (write && hdr.flags & KVMEM_HDR_SEALED)
		kvmem__page_tidy(page, g, &l, hdr.ntokens, 0, l.size);
out:
	free(buf);
	if (counts)
		*counts = pc;
	return ret;
}

int kvmem_page_scrub(void *page, const struct kvmem_geometry *g,
		     struct kvmem_page_counts *counts)
{
	if (!page || kvmem_geometry_check(g))
		return -EINVAL;
	return page_walk(page, g, counts, 1);
}

int kvmem_page_verify(const void *page, const struct kvmem_geometry *g,
		      struct kvmem_page_counts *counts)
{
	if (!page || kvmem_geometry_check(g))
		return -EINVAL;
	return page_walk((void *)page, g, counts, 0);
}

/* ---- archive ---------------------------------------------------------- */

/*
 * Same format, another codec: the scale and check words are the metadata
 * code's at the same places in both layouts and are copied; each row's
 * data bits go from one codec's words into the other's, and where a check
 * is a row's, it is made again over the row as the new codec pads it.
 */
static int transcode(uint8_t *dst, const uint8_t *src,
		     const struct kvmem_geometry *g,
		     const struct kvmem_page_layout *ls,
		     const struct kvmem_page_layout *ld, uint32_t ntokens)
{
	const size_t bytes =
		((size_t)g->head_dim * kvmem_format_get(ls->format)->bits + 7) /
		8;
	uint8_t *in = malloc(ls->row_data), *out = calloc(1, ld->row_data);
	uint32_t h, t;
	int is_v;

	if (!in || !out) {
		free(in);
		free(out);
		return -ENOMEM;
	}
	memcpy(dst + ls->scales_off, src + ls->scales_off,
	       ls->k_off - ls->scales_off);
	for (is_v = 0; is_v < 2; is_v++)
		for (h = 0; h < g->kv_heads; h++)
			for (t = 0; t < ntokens; t++) {
				kvmem_ecc_decode(ls->codec,
						 row_ptr(g, ls, (uint8_t *)src,
							 is_v, h, t),
						 in, ls->row_words, NULL, NULL,
						 NULL);
				memcpy(out, in, bytes);
				kvmem_ecc_encode(
					ld->codec, out,
					row_ptr(g, ld, dst, is_v, h, t),
					ld->row_words);
				/* A check a row (vq2) covers the row's
				 * padding, which differs by codec. */
				if (!ld->scale_words)
					put_checks(dst, ld,
						   row_check(g, is_v, h, t),
						   out, ld->row_data,
						   ld->row_data, 1);
			}
	free(in);
	free(out);
	return 0;
}

/* Another format: the values as decoded, quantized again. */
/*
 * Another format: the values as decoded, quantized again. A vq2 page
 * whose codebook lost an entry it uses has lost values, which are not
 * quantized again: -EBADMSG, counted as an uncorrectable scale word.
 */
static int
requantize(uint8_t *dst, const uint8_t *src, const struct kvmem_geometry *g,
	   const struct kvmem_page_layout *ld, const struct kvmem_page_hdr *hdr,
	   const struct kvmem__vq_view *vq, struct kvmem_page_counts *pc)
{
	const size_t n = (size_t)hdr->ntokens * g->kv_heads * g->head_dim;
	float *k = malloc(n * sizeof(*k)), *v = malloc(n * sizeof(*v));
	uint8_t *erased = malloc(2 * n);
	int ret = -ENOMEM;

	if (k && v && erased) {
		ret = kvmem__page_decode_stored(src, g, vq, k, v, erased, NULL);
		if (ret >= 0 && memchr(erased, 1, 2 * n)) {
			pc->scales.uncorrectable++;
			ret = -EBADMSG;
		}
		if (ret >= 0)
			ret = encode_as(dst, g, ld, hdr, k, v, vq);
	}
	free(k);
	free(v);
	free(erased);
	return ret;
}

int kvmem_page_archive(void *dst, const void *src,
		       const struct kvmem_geometry *g, unsigned int format,
		       unsigned int codec, struct kvmem_page_counts *counts)
{
	return kvmem__page_archive(dst, src, g, format, codec, NULL, counts);
}

int kvmem__page_archive(void *dst, const void *src,
			const struct kvmem_geometry *g, unsigned int format,
			unsigned int codec, const struct kvmem__vq_view *vq,
			struct kvmem_page_counts *counts)
{
	struct kvmem_page_counts pc = { 0 };
	struct kvmem_page_layout ls, ld;
	struct kvmem_page_hdr hdr;
	uint8_t *tmp = NULL;
	int ret;

	if (!dst || !src || kvmem_geometry_check(g))
		return -EINVAL;
	ret = kvmem_page_layout_as(g, format, codec, &ld);
	if (ret)
		goto out;
	ret = page_open(src, g, &hdr, &ls, &pc.header);
	if (ret)
		goto out;
	ret = -EINVAL;
	if (!(hdr.flags & KVMEM_HDR_SEALED) || hdr.flags & KVMEM_HDR_HOT ||
	    ((uintptr_t)dst < (uintptr_t)src
		     ? (uintptr_t)dst + ld.size > (uintptr_t)src
		     : (uintptr_t)src + ls.size > (uintptr_t)dst))
		goto out;
	/* What is archived is the page as sealed: corrected, and then the
	 * same bytes as the seal's CRC, or nothing. */
	ret = -ENOMEM;
	tmp = malloc(ls.size);
	if (!tmp)
		goto out;
	memcpy(tmp, src, ls.size);
	ret = page_walk(tmp, g, &pc, 1);
	if (ret)
		goto out;
	if (kvmem__page_crc(tmp, g, &ls, hdr.ntokens) != hdr.crc) {
		ret = -EBADMSG;
		goto out;
	}
	memset(dst, 0, ld.size);
	if (ls.format == ld.format) {
		ret = transcode(dst, tmp, g, &ls, &ld, hdr.ntokens);
		if (ret)
			goto out;
		hdr.format = ld.format;
		hdr.codec = ld.codec;
		hdr.crc = kvmem_crc32c(0, (uint8_t *)dst + KVMEM_PAGE_HDR_BYTES,
				       ld.size - KVMEM_PAGE_HDR_BYTES);
		kvmem__hdr_encode(dst, &hdr);
	} else {
		ret = requantize(dst, tmp, g, &ld, &hdr, vq, &pc);
	}
out:
	free(tmp);
	if (counts)
		*counts = pc;
	return ret;
}
