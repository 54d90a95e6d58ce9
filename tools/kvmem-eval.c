/* SPDX-License-Identifier: MIT */
/*
 * kvmem-eval - the ECC paper's experiment on a real checkpoint, on kvmem's
 * own data path
 *
 * A small llama2.c-format runner (RMSNorm, RoPE, grouped-query attention,
 * SwiGLU) whose attention goes through kvmem_attend() over an embedded cache
 * of protected pages. Protocol (Roy, section 6):
 *   1. the clean FP32 model generates a reference stream of N tokens from
 *      BOS (seeded sampling), keeping its logits;
 *   2. for every cache mode, bit error rate and seed, the stream is
 *      teacher-forced with a binary symmetric channel applied once to every
 *      stored bit of each page (header, scales, checks and payload; or
 *      payload only) when the page is sealed, and perplexity, KL divergence
 *      from the clean logits, top-1 agreement and top-5 accuracy are
 *      measured, with the words the codes corrected and detected.
 * The FP16 tail being written is not injected: it is not yet stored.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmem/inject.h"
#include "kvmem/kvmem.h"
#include "kvmem-private.h"
#include "own-kvmemd.h"

#define PROG "kvmem-eval"
#define BOS 1
#define MAX_LIST 16

/* ---- the checkpoint --------------------------------------------------- */

struct config {
	int dim, hidden, layers, heads, kv_heads, vocab, seq_len;
};

struct weights {
	float *tok, *rms_att, *wq, *wk, *wv, *wo, *rms_ffn, *w1, *w2, *w3;
	float *rms_final, *wcls;
};

struct model {
	struct config c;
	struct weights w;
	float *mem;
	int head_dim, kv_dim;
};

/* Floats the weights take, or 0 when a product overflows. */
static size_t weight_floats(const struct config *c, int shared)
{
	size_t d = (size_t)c->dim, hd = d / (size_t)c->heads;
	size_t kv = hd * (size_t)c->kv_heads, L = (size_t)c->layers;

	return (size_t)c->vocab * d + L * d + L * d * d + 2 * L * d * kv +
	       L * d * d + L * d + 3 * L * d * (size_t)c->hidden + d +
	       (size_t)c->seq_len * hd + (shared ? 0 : (size_t)c->vocab * d);
}

static int model_load(const char *path, struct model *m)
{
	FILE *f = fopen(path, "rb");
	int32_t h[7];
	long size;
	size_t n;
	float *p;
	int shared;

	memset(m, 0, sizeof(*m));
	if (!f) {
		fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (fread(h, sizeof(h), 1, f) != 1 || fseek(f, 0, SEEK_END) ||
	    (size = ftell(f)) < 0) {
		fprintf(stderr, PROG ": %s: too short for a llama2.c header\n",
			path);
		fclose(f);
		return -1;
	}
	m->c = (struct config){ h[0], h[1], h[2], h[3], h[4], abs(h[5]), h[6] };
	shared = h[5] > 0;
	/* Absurd values first, so the size arithmetic cannot overflow. */
	if (h[0] <= 0 || h[0] > 65536 || h[1] <= 0 || h[1] > 262144 ||
	    h[2] <= 0 || h[2] > 1024 || h[3] <= 0 || h[3] > h[0] ||
	    h[0] % h[3] || h[4] <= 0 || h[4] > h[3] || h[3] % h[4] || !h[5] ||
	    h[5] == INT32_MIN || m->c.vocab > 1 << 20 || h[6] <= 0 ||
	    h[6] > 1 << 20 || (h[0] / h[3]) % 2) {
		fprintf(stderr,
			PROG ": %s: header is not a llama2.c model (dim %d, "
			     "hidden %d, layers %d, heads %d, kv_heads %d, "
			     "vocab %d, seq_len %d)\n",
			path, h[0], h[1], h[2], h[3], h[4], h[5], h[6]);
		fclose(f);
		return -1;
	}
	n = weight_floats(&m->c, shared);
	if ((size_t)size != sizeof(h) + n * sizeof(float)) {
		fprintf(stderr,
			PROG ": %s: %ld bytes, but that header needs %zu\n",
			path, size, sizeof(h) + n * sizeof(float));
		fclose(f);
		return -1;
	}
	m->mem = malloc(n * sizeof(float));
	if (!m->mem || fseek(f, sizeof(h), SEEK_SET) ||
	    fread(m->mem, sizeof(float), n, f) != n) {
		fprintf(stderr, PROG ": %s: cannot read the weights\n", path);
		free(m->mem);
		fclose(f);
		return -1;
	}
	fclose(f);
	m->head_dim = m->c.dim / m->c.heads;
	m->kv_dim = m->head_dim * m->c.kv_heads;
	p = m->mem;
#define TAKE(field, count)      \
	do {                    \
		m->w.field = p; \
		p += (count);   \
	} while (0)
	TAKE(tok, (size_t)m->c.vocab * m->c.dim);
	TAKE(rms_att, (size_t)m->c.layers * m->c.dim);
	TAKE(wq, (size_t)m->c.layers * m->c.dim * m->c.dim);
	TAKE(wk, (size_t)m->c.layers * m->c.dim * m->kv_dim);
	TAKE(wv, (size_t)m->c.layers * m->c.dim * m->kv_dim);
	TAKE(wo, (size_t)m->c.layers * m->c.dim * m->c.dim);
	TAKE(rms_ffn, (size_t)m->c.layers * m->c.dim);
	TAKE(w1, (size_t)m->c.layers * m->c.dim * m->c.hidden);
	TAKE(w2, (size_t)m->c.layers * m->c.hidden * m->c.dim);
	TAKE(w3, (size_t)m->c.layers * m->c.dim * m->c.hidden);
	TAKE(rms_final, (size_t)m->c.dim);
	/* What used to be freq_cis_real and _imag: RoPE is computed. */
	p += (size_t)m->c.seq_len * m->head_dim;
	m->w.wcls = shared ? m->w.tok : p;
#undef TAKE
	return 0;
}

/* ---- the caches the attention reads from ------------------------------ */

enum cache_kind {
	CACHE_FP32, /* the oracle: float K/V */
	CACHE_FLAT, /* int4 without ECC: bits in plain memory */
	CACHE_KVMEM /* protected pages through kvmem_attend() */
};

struct mode {
	const char *name;
	int kind, format, codec, erasure;
	int rotation; /* enum kvmem_rotation of the geometry */
	/* once the prompt (--prompt) is in, its pages go to vq2 in the
	 * mode's codec, by codebooks learned from them */
	int prompt_vq;
};

static const struct mode modes[] = {
	{ "fp32", CACHE_FP32, 0, 0, 0, 0, 0 },
	{ "int4", CACHE_FLAT, KVMEM_FMT_INT4, 0, 0, 0, 0 },
	{ "int4-h74", CACHE_KVMEM, KVMEM_FMT_INT4, KVMEM_CODEC_H74,
	  KVMEM_ERASE_KEEP, 0, 0 },
	{ "int4-h84", CACHE_KVMEM, KVMEM_FMT_INT4, KVMEM_CODEC_H84,
	  KVMEM_ERASE_KEEP, 0, 0 },
	{ "int4-h84-interp", CACHE_KVMEM, KVMEM_FMT_INT4, KVMEM_CODEC_H84,
	  KVMEM_ERASE_INTERPOLATE, 0, 0 },
	{ "int4-golay24", CACHE_KVMEM, KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24,
	  KVMEM_ERASE_KEEP, 0, 0 },
	{ "int8-secded72", CACHE_KVMEM, KVMEM_FMT_INT8, KVMEM_CODEC_SECDED72,
	  KVMEM_ERASE_KEEP, 0, 0 },
	{ "fp16-secded72", CACHE_KVMEM, KVMEM_FMT_FP16, KVMEM_CODEC_SECDED72,
	  KVMEM_ERASE_KEEP, 0, 0 },
	{ "fp8-h84", CACHE_KVMEM, KVMEM_FMT_FP8, KVMEM_CODEC_H84,
	  KVMEM_ERASE_KEEP, 0, 0 },
	{ "fp8-secded72", CACHE_KVMEM, KVMEM_FMT_FP8, KVMEM_CODEC_SECDED72,
	  KVMEM_ERASE_KEEP, 0, 0 },
	{ "int2-h84", CACHE_KVMEM, KVMEM_FMT_INT2, KVMEM_CODEC_H84,
	  KVMEM_ERASE_KEEP, 0, 0 },
	{ "int4-h84-rot", CACHE_KVMEM, KVMEM_FMT_INT4, KVMEM_CODEC_H84,
	  KVMEM_ERASE_KEEP, KVMEM_ROTATE_HADAMARD, 0 },
	{ "int4-h84-rot-interp", CACHE_KVMEM, KVMEM_FMT_INT4, KVMEM_CODEC_H84,
	  KVMEM_ERASE_INTERPOLATE, KVMEM_ROTATE_HADAMARD, 0 },
	{ "lm4-h84-rot", CACHE_KVMEM, KVMEM_FMT_LM4, KVMEM_CODEC_H84,
	  KVMEM_ERASE_KEEP, KVMEM_ROTATE_HADAMARD, 0 },
	{ "lm3-h84-rot", CACHE_KVMEM, KVMEM_FMT_LM3, KVMEM_CODEC_H84,
	  KVMEM_ERASE_KEEP, KVMEM_ROTATE_HADAMARD, 0 },
	{ "lm2-h84", CACHE_KVMEM, KVMEM_FMT_LM2, KVMEM_CODEC_H84,
	  KVMEM_ERASE_KEEP, 0, 0 },
	{ "lm2-h84-rot", CACHE_KVMEM, KVMEM_FMT_LM2, KVMEM_CODEC_H84,
	  KVMEM_ERASE_KEEP, KVMEM_ROTATE_HADAMARD, 0 },
	{ "lm2-golay24-rot", CACHE_KVMEM, KVMEM_FMT_LM2, KVMEM_CODEC_GOLAY24,
	  KVMEM_ERASE_KEEP, KVMEM_ROTATE_HADAMARD, 0 },
	{ "int4-h84-vq", CACHE_KVMEM, KVMEM_FMT_INT4, KVMEM_CODEC_H84,
	  KVMEM_ERASE_KEEP, 0, 1 },
	{ "int4-h84-rot-vq", CACHE_KVMEM, KVMEM_FMT_INT4, KVMEM_CODEC_H84,
	  KVMEM_ERASE_KEEP, KVMEM_ROTATE_HADAMARD, 1 },
	{ "int4-golay24-vq", CACHE_KVMEM, KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24,
	  KVMEM_ERASE_KEEP, 0, 1 },
};
#define NMODES ((int)(sizeof(modes) / sizeof(modes[0])))

struct run_opts {
	double ber;
	uint32_t chan_mode, chan_k; /* kvmem_inject_parse() of --channel */
	uint64_t seed;
	int payload_only;
	uint32_t page_tokens, sink_tokens;
	uint8_t key_scales; /* enum kvmem_key_scales of the kvmem modes */
	uint32_t attend_flags; /* kvmem_attend_opts.flags of kvmem modes */
	const char *connect; /* kvmemd's socket, or NULL: embedded */
	struct own_kvmemd *own; /* the kvmemd at connect, if started here */
	/* --archive: pages older than this many tokens are re-encoded in
	 * archive_fmt + archive_codec (kvmem_seq_archive()); 0: never */
	uint32_t archive_age, archive_fmt, archive_codec;
	/* --budget: the least attended pages go down to budget_fmt +
	 * budget_codec until the sealed ones average budget bits a value
	 * (kvmem_seq_archive_budget()); negative: never */
	float budget;
	uint32_t budget_fmt, budget_codec;
	/* --prompt: tokens [0, prompt) are the prompt, scored no more */
	uint32_t prompt;
};

struct cache {
	const struct mode *mode;
	const struct model *m;
	const struct run_opts *o;
	struct kvmem_geometry g;
	/* fp32 and flat: per layer [seq_len][kv_dim] */
	float *k, *v;
	/* flat: stored bits, per layer; a token is int4 once sealed */
	uint16_t *hk, *hv; /* FP16 rows */
	uint8_t *qk, *qv; /* int4 rows, kv_dim / 2 bytes */
	uint16_t *sk, *sv; /* FP16 scales, kv_heads * groups a row */
	uint8_t *sealed; /* per layer and token */
	/* kvmem */
	struct kvmem_cache *kc;
	struct kvmem_seq *seq;
	uint32_t *injected; /* pages injected, per layer */
	uint64_t pages_injected, bits_flipped, archived;
	int said; /* why it failed is on stderr already */
};

static uint64_t mix(uint64_t seed, uint64_t a, uint64_t b)
{
	uint64_t x =
		seed ^ a * 0x9e3779b97f4a7c15ull ^ b * 0xc2b2ae3d27d4eb4full;

	return kvmem_splitmix64(&x);
}

/*
 * Flip bits of @len bytes with the run's channel; @a, @b pick the seed.
 * The physical channels count lines and rows from @buf: each region of a
 * page starts on a 64-byte line.
 */
static void channel(struct cache *c, void *buf, size_t len, uint64_t a,
		    uint64_t b)
{
	struct kvmem_inject_params p = {
		.mode = c->o->chan_mode,
		.k = c->o->chan_k,
		.ber = c->o->ber,
		.seed = mix(c->o->seed, a, b),
		.word_bits = 8,
		.word_bytes = 1,
	};
	struct kvmem_inject_report rep = { 0 };

	if (c->o->ber <= 0 || !len)
		return;
	kvmem_inject(buf, len, &p, &rep);
	c->bits_flipped += rep.bits;
}

static unsigned int groups_of(const struct cache *c)
{
	return (unsigned int)c->m->head_dim / c->g.group_size;
}

static int cache_open(struct cache *c, const struct model *m,
		      const struct mode *mode, const struct run_opts *o)
{
	const size_t rows = (size_t)m->c.layers * m->c.seq_len;
	int ret;

	memset(c, 0, sizeof(*c));
	c->mode = mode;
	c->m = m;
	c->o = o;
	c->g.layers = (uint32_t)m->c.layers;
	c->g.kv_heads = (uint32_t)m->c.kv_heads;
	c->g.head_dim = (uint32_t)m->head_dim;
	kvmem_geometry_default(&c->g);
	c->g.tokens_per_page = o->page_tokens;
	c->g.sink_tokens = o->sink_tokens;
	if (m->head_dim % c->g.group_size)
		c->g.group_size = (uint32_t)m->head_dim;
	c->g.format = (uint8_t)(mode->kind == CACHE_KVMEM ? mode->format
							  : KVMEM_FMT_INT4);
	c->g.codec = (uint8_t)(mode->kind == CACHE_KVMEM ? mode->codec
							 : KVMEM_CODEC_H84);
	c->g.rotation = (uint8_t)mode->rotation;
	if (mode->kind == CACHE_KVMEM)
		c->g.key_scales = o->key_scales;
	if (kvmem_geometry_check(&c->g))
		return -EINVAL;
	if (mode->kind == CACHE_KVMEM) {
		struct kvmem_page_layout l;
		size_t pages;

		kvmem_page_layout(&c->g, 1, &l);
		/* Every page of every layer, plus the tails, as if hot. */
		pages = ((size_t)m->c.seq_len / o->page_tokens + 3) *
			(size_t)m->c.layers * 2;
		if (o->connect) {
			struct kvmem_connect_opts co = {
				.quota_bytes = pages * l.size,
			};

			ret = own_kvmemd_connect(o->connect, o->own, &c->g, &co,
						 &c->kc);
			c->said = !!ret;
		} else {
			ret = kvmem_open_embedded(&c->g, pages * l.size,
						  &c->kc);
		}
		if (!ret && o->budget >= 0 &&
		    kvmem_format_get((int)o->budget_fmt)->bits >=
			    kvmem_format_get(c->g.format)->bits) {
			fprintf(stderr,
				PROG ": %s: a budget in %s, which has no "
				     "fewer bits than the mode's %s\n",
				mode->name,
				kvmem_format_get((int)o->budget_fmt)->name,
				kvmem_format_get(c->g.format)->name);
			c->said = 1;
			ret = -EINVAL;
		}
		if (!ret && o->archive_age) {
			ret = kvmem_page_layout_as(&c->g, o->archive_fmt,
						   o->archive_codec, &l);
			if (ret) {
				fprintf(stderr,
					PROG ": %s: cannot archive in "
					     "%s+%s: %s\n",
					mode->name,
					kvmem_format_get((int)o->archive_fmt)
						->name,
					kvmem_codec_get((int)o->archive_codec)
						->name,
					ret == -E2BIG ? "its pages would be "
							"larger than sealed "
							"ones"
						      : kvmem_strerror(ret));
				c->said = 1;
			}
		}
		if (!ret)
			ret = kvmem_seq_create(c->kc, &c->seq);
		c->injected = calloc((size_t)m->c.layers, sizeof(uint32_t));
		return ret ? ret : c->injected ? 0 : -ENOMEM;
	}
	c->k = calloc(rows * m->kv_dim, sizeof(float));
	c->v = calloc(rows * m->kv_dim, sizeof(float));
	if (!c->k || !c->v)
		return -ENOMEM;
	if (mode->kind == CACHE_FLAT) {
		c->hk = calloc(rows * m->kv_dim, sizeof(uint16_t));
		c->hv = calloc(rows * m->kv_dim, sizeof(uint16_t));
		c->qk = calloc(rows * m->kv_dim / 2, 1);
		c->qv = calloc(rows * m->kv_dim / 2, 1);
		c->sk = calloc(rows * m->c.kv_heads * groups_of(c),
			       sizeof(uint16_t));
		c->sv = calloc(rows * m->c.kv_heads * groups_of(c),
			       sizeof(uint16_t));
		c->sealed = calloc(rows, 1);
		if (!c->hk || !c->hv || !c->qk || !c->qv || !c->sk || !c->sv ||
		    !c->sealed)
			return -ENOMEM;
	}
	return 0;
}

static void cache_close(struct cache *c)
{
	kvmem_close(c->kc);
	free(c->injected);
	free(c->k);
	free(c->v);
	free(c->hk);
	free(c->hv);
	free(c->qk);
	free(c->qv);
	free(c->sk);
	free(c->sv);
	free(c->sealed);
}

/*
 * The layout of page @d: hot, the geometry's, or archived. Every page the
 * cache describes has one, so failing here is a bug: say so and stop.
 */
static void page_layout(const struct cache *c, const struct kvmem_page_desc *d,
			struct kvmem_page_layout *l)
{
	int ret;

	if (d->hot || (d->format == c->g.format && d->codec == c->g.codec))
		ret = kvmem_page_layout(&c->g, d->hot, l);
	else
		ret = kvmem_page_layout_as(&c->g, d->format, d->codec, l);
	if (ret) {
		fprintf(stderr, PROG ": a page in format %u, codec %u: %s\n",
			d->format, d->codec, kvmem_strerror(ret));
		abort();
	}
}

/*
 * Inject the pages of @layer sealed since the last call: the header, the
 * scales and the checks, and the rows that hold tokens; with payload_only, the K/V rows of
 * quantized pages alone (the paper's setting: it has no FP16 sinks).
 */
static void inject_page(struct cache *c, uint32_t layer,
			const struct kvmem_page_desc *d, uint64_t at)
{
	struct kvmem_page_layout l;
	uint8_t *p = d->data;
	size_t rows;
	uint32_t h;

	c->pages_injected++;
	if (c->o->payload_only && d->hot)
		return;
	page_layout(c, d, &l);
	if (!c->o->payload_only) {
		channel(c, p, KVMEM_PAGE_HDR_BYTES, layer, at);
		/* The scales and their checks (or the rows'). */
		channel(c, p + l.scales_off,
			kvmem_ecc_code_bytes(KVMEM_PAGE_META_CODEC,
					     l.scale_words + 2 * l.nchecks),
			layer, at + 1);
	}
	rows = (size_t)d->ntokens * l.row_bytes;
	for (h = 0; h < c->g.kv_heads; h++) {
		size_t off = (size_t)h * c->g.tokens_per_page * l.row_bytes;

		channel(c, p + l.k_off + off, rows, layer, at + 2 + 2 * h);
		channel(c, p + l.v_off + off, rows, layer, at + 3 + 2 * h);
	}
}

static void kvmem_inject_new(struct cache *c, uint32_t layer)
{
	struct kvmem_page_desc d[1024];
	int n = kvmem_seq_pages(c->seq, layer, d, 1024), i;

	for (i = (int)c->injected[layer]; i < n && i < 1024; i++) {
		if (!d[i].sealed)
			break;
		c->injected[layer]++;
		inject_page(c, layer, &d[i], (uint64_t)i << 16);
	}
}

/*
 * The prompt is in: its sealed pages go to vq2, by codebooks learned from
 * them, and what that stored anew takes the channel once, as a page does
 * when it is sealed: every vq2 page and (unless --payload-only, which
 * flips payload bits alone) the codebooks.
 */
static int prompt_to_vq(struct cache *c)
{
	struct kvmem_page_desc d[1024];
	struct kvmem_codebook_desc cb;
	uint32_t l;
	int n, i, ret;

	ret = kvmem_seq_archive(c->seq, c->o->prompt, KVMEM_FMT_VQ2,
				(unsigned int)c->mode->codec);
	if (ret < 0)
		return ret;
	c->archived += (uint64_t)ret;
	for (l = 0; l < c->g.layers; l++) {
		n = kvmem_seq_pages(c->seq, l, d, 1024);
		for (i = 0; i < n && i < 1024; i++)
			if (d[i].format == KVMEM_FMT_VQ2)
				inject_page(c, l, &d[i],
					    (uint64_t)i << 16 | 0x8000);
		if (!c->o->payload_only && !kvmem_seq_codebook(c->seq, l, &cb))
			channel(c, cb.data, cb.size, l, UINT32_MAX - 2u);
	}
	return 0;
}

/* Flat int4: quantize tokens [t0, t1) of @layer from their FP16 rows. */
static void flat_seal(struct cache *c, int layer, int t0, int t1)
{
	const int kvd = c->m->kv_dim, hd = c->m->head_dim;
	const unsigned int ng = groups_of(c);
	const size_t base = (size_t)layer * c->m->c.seq_len;
	float row[1024];
	int t, h, i, side;

	for (t = t0; t < t1; t++)
		for (side = 0; side < 2; side++)
			for (h = 0; h < c->m->c.kv_heads; h++) {
				const uint16_t *src = (side ? c->hv : c->hk) +
						      (base + t) * kvd +
						      (size_t)h * hd;

				for (i = 0; i < hd; i++)
					row[i] = kvmem_half_to_float(src[i]);
				kvmem_quantize(
					KVMEM_FMT_INT4, row, (size_t)hd,
					c->g.group_size,
					(side ? c->sv : c->sk) +
						((base + t) * c->m->c.kv_heads +
						 h) * ng,
					(side ? c->qv : c->qk) +
						((base + t) * kvd +
						 (size_t)h * hd) /
							2);
			}
	for (t = t0; t < t1; t++)
		c->sealed[base + t] = 1;
	if (c->o->payload_only) {
		channel(c, c->qk + (base + t0) * kvd / 2,
			(size_t)(t1 - t0) * kvd / 2, layer, 4 * (uint64_t)t0);
		channel(c, c->qv + (base + t0) * kvd / 2,
			(size_t)(t1 - t0) * kvd / 2, layer,
			4 * (uint64_t)t0 + 1);
		return;
	}
	channel(c, c->qk + (base + t0) * kvd / 2, (size_t)(t1 - t0) * kvd / 2,
		layer, 4 * (uint64_t)t0);
	channel(c, c->qv + (base + t0) * kvd / 2, (size_t)(t1 - t0) * kvd / 2,
		layer, 4 * (uint64_t)t0 + 1);
	channel(c, c->sk + (base + t0) * c->m->c.kv_heads * ng,
		(size_t)(t1 - t0) * c->m->c.kv_heads * ng * 2, layer,
		4 * (uint64_t)t0 + 2);
	channel(c, c->sv + (base + t0) * c->m->c.kv_heads * ng,
		(size_t)(t1 - t0) * c->m->c.kv_heads * ng * 2, layer,
		4 * (uint64_t)t0 + 3);
}

/*
 * Store token @pos's K and V of @layer. The flat cache follows kvmem's
 * page structure: FP16 sink tokens (injected when the sink is full), pages
 * quantized when full, an FP16 tail.
 */
static int cache_put(struct cache *c, int layer, int pos, const float *k,
		     const float *v)
{
	const int kvd = c->m->kv_dim;
	const size_t at = ((size_t)layer * c->m->c.seq_len + pos) * kvd;
	const int S = (int)c->g.sink_tokens, T = (int)c->g.tokens_per_page;
	int i, ret;

	switch (c->mode->kind) {
	case CACHE_KVMEM:
		ret = kvmem_seq_append(c->seq, (uint32_t)layer, k, v, 1);
		if (ret)
			return ret;
		kvmem_inject_new(c, (uint32_t)layer);
		if (c->mode->prompt_vq && layer == c->m->c.layers - 1 &&
		    (uint32_t)pos + 1 == c->o->prompt) {
			ret = prompt_to_vq(c);
			if (ret)
				return ret;
		}
		/* Once a token is in every layer, what has aged goes to the
		 * archive tier. */
		if (c->o->archive_age && layer == c->m->c.layers - 1 &&
		    (uint32_t)pos + 1 > c->o->archive_age) {
			ret = kvmem_seq_archive(
				c->seq, (uint32_t)pos + 1 - c->o->archive_age,
				c->o->archive_fmt, c->o->archive_codec);
			if (ret < 0)
				return ret;
			c->archived += (uint64_t)ret;
		}
		if (c->o->budget >= 0 && layer == c->m->c.layers - 1) {
			ret = kvmem_seq_archive_budget(c->seq, c->o->budget,
						       c->o->budget_fmt,
						       c->o->budget_codec);
			if (ret < 0)
				return ret;
			c->archived += (uint64_t)ret;
		}
		return 0;
	case CACHE_FLAT:
		for (i = 0; i < kvd; i++) {
			c->hk[at + i] = kvmem_half_from_float(k[i]);
			c->hv[at + i] = kvmem_half_from_float(v[i]);
		}
		if (pos == S - 1 && !c->o->payload_only) {
			channel(c, c->hk + at - (size_t)(S - 1) * kvd,
				(size_t)S * kvd * 2, layer, UINT32_MAX);
			channel(c, c->hv + at - (size_t)(S - 1) * kvd,
				(size_t)S * kvd * 2, layer, UINT32_MAX - 1u);
		}
		if (pos >= S && (pos - S + 1) % T == 0)
			flat_seal(c, layer, pos - T + 1, pos + 1);
		return 0;
	default:
		memcpy(c->k + at, k, kvd * sizeof(float));
		memcpy(c->v + at, v, kvd * sizeof(float));
		return 0;
	}
}

/* Float attention over tokens [0, n) of @layer's float rows. */
static void attend_float(const struct model *m, const float *K, const float *V,
			 int n, const float *q, float *out, float *att)
{
	const int hd = m->head_dim, kvd = m->kv_dim;
	const int kv_mul = m->c.heads / m->c.kv_heads;
	int h, t, i;

	for (h = 0; h < m->c.heads; h++) {
		const float *qh = q + h * hd;
		const int kh = h / kv_mul;
		float mx = -INFINITY, sum = 0.0f;

		for (t = 0; t < n; t++) {
			const float *kt = K + (size_t)t * kvd + kh * hd;
			float s = 0.0f;

			for (i = 0; i < hd; i++)
				s += qh[i] * kt[i];
			att[t] = s / sqrtf((float)hd);
			mx = att[t] > mx ? att[t] : mx;
		}
		for (t = 0; t < n; t++) {
			att[t] = expf(att[t] - mx);
			sum += att[t];
		}
		for (i = 0; i < hd; i++) {
			float o = 0.0f;

			for (t = 0; t < n; t++)
				o += att[t] * V[(size_t)t * kvd + kh * hd + i];
			out[h * hd + i] = o / sum;
		}
	}
}

/*
 * What kvmem does with values no encoder writes (a non-finite FP16 value,
 * or one scaled by a negative or non-finite scale): read them as 0. The
 * flat cache gets the same sanity, so the comparison is about the codes.
 */
static void sanitize(float *x, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (!isfinite(x[i]))
			x[i] = 0.0f;
}

/* Flat: the float rows of tokens [0, n) as the stored bits read back. */
static void flat_rows(struct cache *c, int layer, int n)
{
	const int kvd = c->m->kv_dim, hd = c->m->head_dim;
	const unsigned int ng = groups_of(c);
	const size_t base = (size_t)layer * c->m->c.seq_len;
	int t, h, i, side;

	for (t = 0; t < n; t++)
		for (side = 0; side < 2; side++) {
			float *dst = (side ? c->v : c->k) + (base + t) * kvd;

			if (!c->sealed[base + t]) {
				const uint16_t *src = (side ? c->hv : c->hk) +
						      (base + t) * kvd;

				for (i = 0; i < kvd; i++)
					dst[i] = kvmem_half_to_float(src[i]);
				sanitize(dst, kvd);
				continue;
			}
			for (h = 0; h < c->m->c.kv_heads; h++)
				kvmem_dequantize(
					KVMEM_FMT_INT4,
					(side ? c->qv : c->qk) +
						((base + t) * kvd +
						 (size_t)h * hd) /
							2,
					(side ? c->sv : c->sk) +
						((base + t) * c->m->c.kv_heads +
						 h) * ng,
					(size_t)hd, c->g.group_size,
					dst + (size_t)h * hd);
			sanitize(dst, kvd);
		}
}

static int cache_attend(struct cache *c, int layer, int n, const float *q,
			float *out, float *att)
{
	const size_t base = (size_t)layer * c->m->c.seq_len * c->m->kv_dim;
	struct kvmem_attend_opts o = {
		.n_heads = (uint32_t)c->m->c.heads,
		.erasure = (uint32_t)c->mode->erasure,
		.importance_alpha = -1.0f,
		.flags = c->o->attend_flags,
	};

	switch (c->mode->kind) {
	case CACHE_KVMEM:
		return kvmem_attend(c->seq, (uint32_t)layer, q, out, &o, NULL);
	case CACHE_FLAT:
		flat_rows(c, layer, n);
		/* fall through */
	default:
		attend_float(c->m, c->k + base, c->v + base, n, q, out, att);
		return 0;
	}
}

/* ---- the forward pass ------------------------------------------------- */

struct state {
	float *x, *xb, *xb2, *hb, *hb2, *q, *k, *v, *att, *logits;
};

static int state_alloc(struct state *s, const struct model *m)
{
	s->x = calloc((size_t)m->c.dim, sizeof(float));
	s->xb = calloc((size_t)m->c.dim, sizeof(float));
	s->xb2 = calloc((size_t)m->c.dim, sizeof(float));
	s->hb = calloc((size_t)m->c.hidden, sizeof(float));
	s->hb2 = calloc((size_t)m->c.hidden, sizeof(float));
	s->q = calloc((size_t)m->c.dim, sizeof(float));
	s->k = calloc((size_t)m->kv_dim, sizeof(float));
	s->v = calloc((size_t)m->kv_dim, sizeof(float));
	s->att = calloc((size_t)m->c.seq_len, sizeof(float));
	s->logits = calloc((size_t)m->c.vocab, sizeof(float));
	return s->x && s->xb && s->xb2 && s->hb && s->hb2 && s->q && s->k &&
			       s->v && s->att && s->logits
		       ? 0
		       : -ENOMEM;
}

static void state_free(struct state *s)
{
	free(s->x);
	free(s->xb);
	free(s->xb2);
	free(s->hb);
	free(s->hb2);
	free(s->q);
	free(s->k);
	free(s->v);
	free(s->att);
	free(s->logits);
}

static void rmsnorm(float *o, const float *x, const float *w, int n)
{
	float ss = 0.0f;
	int i;

	for (i = 0; i < n; i++)
		ss += x[i] * x[i];
	ss = 1.0f / sqrtf(ss / (float)n + 1e-5f);
	for (i = 0; i < n; i++)
		o[i] = w[i] * (ss * x[i]);
}

/* out[d] = W[d][n] x[n] */
static void matmul(float *out, const float *x, const float *w, int n, int d)
{
	int i, j;

	for (i = 0; i < d; i++) {
		float s = 0.0f;

		for (j = 0; j < n; j++)
			s += w[(size_t)i * n + j] * x[j];
		out[i] = s;
	}
}

static void rope(const struct model *m, float *vec, int len, int pos)
{
	int i;

	for (i = 0; i < len; i += 2) {
		float freq = 1.0f / powf(10000.0f, (float)(i % m->head_dim) /
							   (float)m->head_dim);
		float a = (float)pos * freq, c = cosf(a), s = sinf(a);
		float v0 = vec[i], v1 = vec[i + 1];

		vec[i] = v0 * c - v1 * s;
		vec[i + 1] = v0 * s + v1 * c;
	}
}

static int forward(const struct model *m, struct state *s, struct cache *c,
		   int token, int pos)
{
	const struct weights *w = &m->w;
	const int dim = m->c.dim, kvd = m->kv_dim, hid = m->c.hidden;
	int l, i, ret;

	memcpy(s->x, w->tok + (size_t)token * dim, dim * sizeof(float));
	for (l = 0; l < m->c.layers; l++) {
		rmsnorm(s->xb, s->x, w->rms_att + (size_t)l * dim, dim);
		matmul(s->q, s->xb, w->wq + (size_t)l * dim * dim, dim, dim);
		matmul(s->k, s->xb, w->wk + (size_t)l * dim * kvd, dim, kvd);
		matmul(s->v, s->xb, w->wv + (size_t)l * dim * kvd, dim, kvd);
		rope(m, s->q, dim, pos);
		rope(m, s->k, kvd, pos);
		ret = cache_put(c, l, pos, s->k, s->v);
		if (!ret)
			ret = cache_attend(c, l, pos + 1, s->q, s->xb, s->att);
		if (ret)
			return ret;
		matmul(s->xb2, s->xb, w->wo + (size_t)l * dim * dim, dim, dim);
		for (i = 0; i < dim; i++)
			s->x[i] += s->xb2[i];
		rmsnorm(s->xb, s->x, w->rms_ffn + (size_t)l * dim, dim);
		matmul(s->hb, s->xb, w->w1 + (size_t)l * dim * hid, dim, hid);
		matmul(s->hb2, s->xb, w->w3 + (size_t)l * dim * hid, dim, hid);
		for (i = 0; i < hid; i++)
			s->hb[i] =
				s->hb[i] / (1.0f + expf(-s->hb[i])) * s->hb2[i];
		matmul(s->xb, s->hb, w->w2 + (size_t)l * dim * hid, hid, dim);
		for (i = 0; i < dim; i++)
			s->x[i] += s->xb[i];
	}
	rmsnorm(s->x, s->x, w->rms_final, dim);
	matmul(s->logits, s->x, w->wcls, dim, m->c.vocab);
	return 0;
}

/* ---- the protocol ----------------------------------------------------- */

struct result {
	double ppl, kl, top1, top5;
	double bits_per_value; /* of the sealed pages, at the end */
	double payload_bits; /* a value in their formats, without codes */
	uint64_t corrected, detected, bits_flipped, pages_injected;
	uint64_t archived; /* pages re-encoded by --archive */
	int said; /* a failure was explained on stderr */
};

/* log-softmax of @n logits into @out, in double. */
static void log_softmax(const float *x, int n, double *out)
{
	double mx = x[0], sum = 0.0;
	int i;

	for (i = 1; i < n; i++)
		mx = x[i] > mx ? x[i] : mx;
	for (i = 0; i < n; i++)
		sum += exp((double)x[i] - mx);
	for (i = 0; i < n; i++)
		out[i] = (double)x[i] - mx - log(sum);
}

static int argmax(const float *x, int n)
{
	int i, best = 0;

	for (i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return best;
}

/* Is @tok among the 5 largest of @x (ties count against it)? */
static int in_top5(const float *x, int n, int tok)
{
	int i, above = 0;

	for (i = 0; i < n; i++)
		if (x[i] > x[tok] || (x[i] == x[tok] && i < tok))
			above++;
	return above < 5;
}

static int sample(const float *logits, int n, struct kvmem_rng *r)
{
	double mx = logits[argmax(logits, n)], sum = 0.0, u, acc = 0.0;
	int i;

	for (i = 0; i < n; i++)
		sum += exp((double)logits[i] - mx);
	u = kvmem_rng_unit(r) * sum;
	for (i = 0; i < n; i++) {
		acc += exp((double)logits[i] - mx);
		if (u <= acc)
			return i;
	}
	return n - 1;
}

/* The reference: N tokens from BOS, and the logits after each. */
static int reference(const struct model *m, struct state *s, int ntok,
		     uint64_t seed, int *tok, float *ref)
{
	const struct run_opts o = { .page_tokens = 32, .sink_tokens = 4 };
	struct kvmem_rng r;
	struct cache c;
	int pos, ret;

	kvmem_rng_seed(&r, seed);
	ret = cache_open(&c, m, &modes[0], &o);
	tok[0] = BOS;
	for (pos = 0; !ret && pos + 1 < ntok; pos++) {
		ret = forward(m, s, &c, tok[pos], pos);
		memcpy(ref + (size_t)pos * m->c.vocab, s->logits,
		       (size_t)m->c.vocab * sizeof(float));
		tok[pos + 1] = sample(s->logits, m->c.vocab, &r);
	}
	cache_close(&c);
	return ret;
}

static void count_region(int codec, const void *code, size_t nwords,
			 struct result *res)
{
	struct kvmem_ecc_counts n;
	void *data = malloc(kvmem_ecc_data_bytes(codec, nwords) + 8);

	if (!data)
		return;
	kvmem_ecc_decode(codec, code, data, nwords, &n, NULL, NULL);
	res->corrected += n.corrected;
	res->detected += n.uncorrectable;
	free(data);
}

/*
 * Codewords that a scrub would correct, and could not, in what holds
 * data: region by region, so a lost header does not hide the rest.
 */
static void count_words(struct cache *c, struct result *res)
{
	struct kvmem_page_desc d[1024];
	struct kvmem_codebook_desc cb;
	uint32_t l, h;
	int i, n;

	for (l = 0; l < c->g.layers; l++) {
		if (!kvmem_seq_codebook(c->seq, l, &cb))
			count_region(KVMEM_CODEC_GOLAY24, cb.data, cb.words,
				     res);
		n = kvmem_seq_pages(c->seq, l, d, 1024);
		for (i = 0; i < n && i < 1024; i++) {
			struct kvmem_page_layout lay;
			const uint8_t *p = d[i].data;

			page_layout(c, &d[i], &lay);
			count_region(KVMEM_PAGE_META_CODEC, p,
				     KVMEM_PAGE_HDR_WORDS, res);
			count_region(KVMEM_PAGE_META_CODEC, p + lay.scales_off,
				     lay.scale_words + 2 * lay.nchecks, res);
			for (h = 0; h < c->g.kv_heads; h++) {
				size_t off = (size_t)h * c->g.tokens_per_page *
					     lay.row_bytes;

				count_region(lay.codec, p + lay.k_off + off,
					     (size_t)d[i].ntokens *
						     lay.row_words,
					     res);
				count_region(lay.codec, p + lay.v_off + off,
					     (size_t)d[i].ntokens *
						     lay.row_words,
					     res);
			}
		}
	}
}

/*
 * Bits a value of the sealed pages takes: the header's, scales', checks'
 * and payload's codewords over the page's 2 * tokens * kv_heads * head_dim
 * values, without the alignment of regions and pages (which small
 * geometries pay more of), and any vq2 codebooks'. *@payload: the bits of
 * their formats alone.
 */
static double bits_per_value(const struct cache *c, double *payload)
{
	struct kvmem_page_desc d[1024];
	struct kvmem_codebook_desc cb;
	double bits = 0.0, values = 0.0, pbits = 0.0;
	uint32_t l;
	int i, n;

	for (l = 0; l < c->g.layers; l++) {
		if (!kvmem_seq_codebook(c->seq, l, &cb))
			bits += 8.0 * (double)cb.size;
		n = kvmem_seq_pages(c->seq, l, d, 1024);
		for (i = 0; i < n && i < 1024; i++) {
			struct kvmem_page_layout lay;

			if (d[i].hot)
				continue;
			page_layout(c, &d[i], &lay);
			bits += 8.0 *
				(KVMEM_PAGE_HDR_BYTES + 3.0 * lay.scale_words +
				 6.0 * lay.nchecks +
				 2.0 * c->g.kv_heads * c->g.tokens_per_page *
					 lay.row_bytes);
			values += 2.0 * c->g.tokens_per_page * c->g.kv_heads *
				  c->g.head_dim;
			pbits += 2.0 * c->g.tokens_per_page * c->g.kv_heads *
				 c->g.head_dim *
				 kvmem_format_get(d[i].format)->bits;
		}
	}
	*payload = values ? pbits / values : 0.0;
	return values ? bits / values : 0.0;
}

static int run(const struct model *m, struct state *s, const struct mode *md,
	       const struct run_opts *o, int ntok, const int *tok,
	       const float *ref, double *lsm, double *lsr, struct result *res)
{
	const int V = m->c.vocab;
	double nll = 0.0, kl = 0.0;
	int pos, top1 = 0, top5 = 0, i, ret;
	struct cache c;

	memset(res, 0, sizeof(*res));
	ret = cache_open(&c, m, md, o);
	for (pos = 0; !ret && pos + 1 < ntok; pos++) {
		const float *rl = ref + (size_t)pos * V;

		ret = forward(m, s, &c, tok[pos], pos);
		if (ret || (uint32_t)pos < o->prompt)
			continue;
		log_softmax(s->logits, V, lsm);
		log_softmax(rl, V, lsr);
		nll -= lsm[tok[pos + 1]];
		for (i = 0; i < V; i++)
			kl += exp(lsr[i]) * (lsr[i] - lsm[i]);
		top1 += argmax(s->logits, V) == argmax(rl, V);
		top5 += in_top5(s->logits, V, tok[pos + 1]);
	}
	if (!ret) {
		const int scored = ntok - 1 - (int)o->prompt;

		res->ppl = exp(nll / scored);
		res->kl = kl / scored;
		res->top1 = (double)top1 / scored;
		res->top5 = (double)top5 / scored;
		res->bits_flipped = c.bits_flipped;
		if (md->kind == CACHE_KVMEM) {
			count_words(&c, res);
			res->bits_per_value =
				bits_per_value(&c, &res->payload_bits);
			res->archived = c.archived;
		}
	}
	res->said = c.said;
	cache_close(&c);
	return ret;
}

/* Student's t at 97.5% for n - 1 degrees of freedom: a 95% interval. */
static double t975(int n)
{
	static const double t[] = { 0,	   12.706, 4.303, 3.182, 2.776, 2.571,
				    2.447, 2.365,  2.306, 2.262, 2.228, 2.201,
				    2.179, 2.160,  2.145, 2.131 };

	return n - 1 < (int)(sizeof(t) / sizeof(t[0])) ? t[n - 1] : 1.96;
}

/* Mean of @n values and the half-width of its 95% interval. */
static void mean_ci(const double *x, int n, double *mean, double *ci)
{
	double s = 0.0, ss = 0.0;
	int i;

	for (i = 0; i < n; i++)
		s += x[i];
	*mean = s / n;
	for (i = 0; i < n; i++)
		ss += (x[i] - *mean) * (x[i] - *mean);
	*ci = n > 1 ? t975(n) * sqrt(ss / (n - 1)) / sqrt((double)n) : 0.0;
}

/* ---- the command line ------------------------------------------------- */

static void usage(FILE *f)
{
	int i;

	fprintf(f, "usage: " PROG " --model PATH [--tokens N] [--modes LIST] "
		   "[--ber LIST]\n"
		   "                  [--seeds LIST] [--channel SPEC] "
		   "[--payload-only]\n"
		   "                  "
		   "[--page-tokens T] [--sink S] [--key-scales group|channel]\n"
		   "                  [--archive AGE[:FMT+CODEC]] "
		   "[--budget BITS[:FMT+CODEC]]\n"
		   "                  [--prompt P] [--sample-seed S] "
		   "[--int8-scores] [--json]\n"
		   "                  [--connect PATH | --daemon "
		   "[--kvmemd PATH]]\n\n"
		   "  --model PATH      llama2.c checkpoint\n"
		   "  --tokens N        reference stream length (default 256)\n"
		   "  --modes LIST      comma-separated (default: all, the "
		   "*-vq ones with\n"
		   "                    --prompt):");
	for (i = 0; i < NMODES; i++)
		fprintf(f, " %s", modes[i].name);
	fprintf(f,
		"\n"
		"  --ber LIST        bit error rates (default 0,1e-4,1e-3,1e-2)\n"
		"  --seeds LIST      channel seeds (default 1,2,3)\n"
		"  --channel SPEC    bsc (default), byte:K, adjacent:K, "
		"line[:BYTES],\n"
		"                    column:ROW or burst:K (kvmem-ecc(1)); "
		"--ber is then\n"
		"                    per byte, line or column as the "
		"channel counts\n"
		"  --payload-only    flip K/V payload bits only (the paper's "
		"setting);\n"
		"                    default: every stored bit of each page\n"
		"  --page-tokens T   tokens per page (default 32)\n"
		"  --sink S          FP16 sink tokens (default 4)\n"
		"  --key-scales group|channel\n"
		"                    the kvmem modes' sealed keys with a scale "
		"per token and\n"
		"                    group of channels (default) or per "
		"channel over the\n"
		"                    page (KIVI's; the default modes then "
		"leave out\n"
		"                    fp16-secded72, which has no scales)\n"
		"  --archive AGE[:FMT+CODEC]\n"
		"                    re-encode the sealed pages older than AGE "
		"tokens in\n"
		"                    FMT+CODEC (default int2+golay24) as the "
		"stream goes,\n"
		"                    the archive tier (embedded caches only)\n"
		"  --budget BITS[:FMT+CODEC]\n"
		"                    precision by attention: as the stream "
		"goes, the least\n"
		"                    attended sealed pages go down to FMT+CODEC "
		"(default\n"
		"                    lm2+h84) until each layer's average BITS "
		"a value\n"
		"                    (embedded caches only)\n"
		"  --prompt P        the first P tokens are the prompt: "
		"ppl, KL, top-1 and\n"
		"                    top-5 are of the tokens after it "
		"(default 0); the\n"
		"                    *-vq modes then put the prompt's "
		"sealed pages in\n"
		"                    vq2, by codebooks learned from them "
		"(embedded\n"
		"                    caches only)\n"
		"  --sample-seed S   seed of the reference sampling (default "
		"1)\n"
		"  --int8-scores     the kvmem modes attend with int8 "
		"scores\n"
		"                    (KVMEM_ATTEND_INT8_SCORES)\n"
		"  --connect PATH    keep the protected KV cache in kvmemd at "
		"PATH\n"
		"                    (default: in this process); with --ber 0 "
		"only: it would\n"
		"                    count the bit flips as its memory's "
		"errors\n"
		"  --daemon          the same, in a kvmemd started for the "
		"run (built-in\n"
		"                    defaults, its state in a temporary "
		"directory), so the\n"
		"                    bit flips never reach another daemon's "
		"error counters\n"
		"  --kvmemd PATH     the kvmemd --daemon starts (default: "
		"$KVMEMD, else\n"
		"                    ../daemon/kvmemd next to this program's "
		"directory)\n"
		"  --json            one JSON array, a record per mode, rate "
		"and seed\n\n"
		"Exit status: 0 done, 1 a run failed, 2 usage or bad "
		"checkpoint.\n");
}

/* Split "a,b,c"; each item through @parse. Returns the count or -1. */
/* @valid says what an item may be, for the message when one is not. */
static int parse_list(const char *opt, char *arg, int max,
		      int (*parse)(const char *, void *, int), void *out,
		      const char *valid)
{
	char *save = NULL, *item;
	int n = 0;

	for (item = strtok_r(arg, ",", &save); item;
	     item = strtok_r(NULL, ",", &save)) {
		if (n == max) {
			fprintf(stderr, PROG ": --%s takes at most %d items\n",
				opt, max);
			return -1;
		}
		if (parse(item, out, n)) {
			fprintf(stderr, PROG ": bad --%s item '%s': %s\n", opt,
				item, valid);
			return -1;
		}
		n++;
	}
	if (!n)
		fprintf(stderr, PROG ": --%s is empty\n", opt);
	return n ? n : -1;
}

#define BER_VALID "a probability from 0 to 1, like 1e-3"
#define SEED_VALID "an unsigned 64-bit integer"

/* The modes' names, for a message: "one of fp32, int4, ...". */
static const char *mode_names(void)
{
	static char buf[512];
	size_t n;
	int m;

	n = (size_t)snprintf(buf, sizeof(buf), "one of");
	for (m = 0; m < NMODES && n < sizeof(buf); m++)
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s %s",
				      m ? "," : "", modes[m].name);
	return buf;
}

static int parse_mode(const char *s, void *out, int i)
{
	int m;

	for (m = 0; m < NMODES; m++)
		if (!strcmp(s, modes[m].name)) {
			((int *)out)[i] = m;
			return 0;
		}
	return -1;
}

static int parse_ber(const char *s, void *out, int i)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || *end || !(v >= 0.0 && v <= 1.0))
		return -1;
	((double *)out)[i] = v;
	return 0;
}

static int parse_u64(const char *s, void *out, int i)
{
	char *end;
	unsigned long long v;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (*end || errno)
		return -1;
	((uint64_t *)out)[i] = v;
	return 0;
}

static int parse_int(const char *opt, const char *s, long lo, long hi, int *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (end == s || *end || errno || v < lo || v > hi) {
		fprintf(stderr, PROG ": --%s must be %ld..%ld\n", opt, lo, hi);
		return -1;
	}
	*out = (int)v;
	return 0;
}

struct args {
	const char *model;
	int ntok, nmodes, nber, nseeds, json, page_tokens, sink;
	int modes[NMODES]; /* every mode once, at most */
	double ber[MAX_LIST];
	uint64_t seeds[MAX_LIST], sample_seed;
	int payload_only, int8_scores;
	int key_scales; /* --key-scales: enum kvmem_key_scales */
	const char *connect;
	int daemon; /* --daemon: connect to a kvmemd started here */
	const char *kvmemd; /* --kvmemd: the one to start */
	const char *channel; /* as given; its mode and k in chan */
	struct kvmem_inject_params chan;
	uint32_t archive_age, archive_fmt, archive_codec; /* --archive */
	float budget; /* --budget, or negative */
	uint32_t budget_fmt, budget_codec;
	int prompt; /* --prompt */
};

/* --budget BITS[:FMT+CODEC], as lm2+h84 by default. */
static int parse_budget(const char *arg, struct args *a)
{
	char fmt[16] = "lm2", codec[16] = "h84", *end;
	const char *spec = strchr(arg, ':');
	double bits = strtod(arg, &end);
	int f, c;

	if (end == arg || (spec ? end != spec : *end) || !(bits >= 0) ||
	    bits > 16 ||
	    (spec && sscanf(spec + 1, "%15[^+]+%15s", fmt, codec) != 2) ||
	    (f = kvmem_format_by_name(fmt)) <= KVMEM_FMT_FP16 ||
	    (c = kvmem_codec_by_name(codec)) < 0) {
		fprintf(stderr,
			PROG ": bad --budget '%s': bits a value from 0 to "
			     "16, then :FORMAT+CODEC if not lm2+h84\n",
			arg);
		return -1;
	}
	a->budget = (float)bits;
	a->budget_fmt = (uint32_t)f;
	a->budget_codec = (uint32_t)c;
	return 0;
}

/* --archive AGE[:FMT+CODEC], as int2+golay24 by default. */
static int parse_archive(const char *arg, struct args *a)
{
	char fmt[16] = "int2", codec[16] = "golay24", *end;
	const char *spec = strchr(arg, ':');
	unsigned long age;
	int f, c;

	age = strtoul(arg, &end, 10);
	if (end == arg || *arg == '-' || (spec ? end != spec : *end) || !age ||
	    age > 1u << 20) {
		fprintf(stderr,
			PROG ": bad --archive '%s': an age of 1..%u tokens, "
			     "then :FORMAT+CODEC if not int2+golay24\n",
			arg, 1u << 20);
		return -1;
	}
	if (spec && sscanf(spec + 1, "%15[^+]+%15s", fmt, codec) != 2) {
		fprintf(stderr,
			PROG ": bad --archive '%s': FORMAT+CODEC like "
			     "int2+golay24 after the ':'\n",
			arg);
		return -1;
	}
	f = kvmem_format_by_name(fmt);
	c = kvmem_codec_by_name(codec);
	if (f <= KVMEM_FMT_FP16 || c < 0) {
		fprintf(stderr,
			PROG ": bad --archive '%s': %s is not int8, int4, "
			     "int2, fp8, lm4, lm3 or lm2, or %s not h74, h84, "
			     "golay24 or secded72\n",
			arg, fmt, codec);
		return -1;
	}
	a->archive_age = (uint32_t)age;
	a->archive_fmt = (uint32_t)f;
	a->archive_codec = (uint32_t)c;
	return 0;
}

static int parse_args(int argc, char **argv, struct args *a)
{
	static const struct option opts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "tokens", required_argument, NULL, 'n' },
		{ "modes", required_argument, NULL, 'M' },
		{ "ber", required_argument, NULL, 'b' },
		{ "seeds", required_argument, NULL, 's' },
		{ "payload-only", no_argument, NULL, 'p' },
		{ "int8-scores", no_argument, NULL, 'I' },
		{ "channel", required_argument, NULL, 'C' },
		{ "page-tokens", required_argument, NULL, 'T' },
		{ "sink", required_argument, NULL, 'S' },
		{ "key-scales", required_argument, NULL, 'K' },
		{ "archive", required_argument, NULL, 'A' },
		{ "budget", required_argument, NULL, 'B' },
		{ "prompt", required_argument, NULL, 'P' },
		{ "sample-seed", required_argument, NULL, 'r' },
		{ "connect", required_argument, NULL, 'c' },
		{ "daemon", no_argument, NULL, 'd' },
		{ "kvmemd", required_argument, NULL, 'k' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	char def_ber[] = "0,1e-4,1e-3,1e-2", def_seeds[] = "1,2,3";
	int o, i;

	memset(a, 0, sizeof(*a));
	a->ntok = 256;
	a->page_tokens = 32;
	a->sink = 4;
	a->budget = -1.0f;
	a->sample_seed = 1;
	a->channel = "bsc";
	a->chan.mode = KVMEM_INJECT_BSC;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'm':
			a->model = optarg;
			break;
		case 'n':
			if (parse_int("tokens", optarg, 2, 1 << 20, &a->ntok))
				return 2;
			break;
		case 'M':
			a->nmodes =
				parse_list("modes", optarg, NMODES, parse_mode,
					   a->modes, mode_names());
			if (a->nmodes < 0)
				return 2;
			break;
		case 'b':
			a->nber = parse_list("ber", optarg, MAX_LIST, parse_ber,
					     a->ber, BER_VALID);
			if (a->nber < 0)
				return 2;
			break;
		case 's':
			a->nseeds = parse_list("seeds", optarg, MAX_LIST,
					       parse_u64, a->seeds, SEED_VALID);
			if (a->nseeds < 0)
				return 2;
			break;
		case 'p':
			a->payload_only = 1;
			break;
		case 'I':
			a->int8_scores = 1;
			break;
		case 'C':
			if (kvmem_inject_parse(&a->chan, optarg) ||
			    a->chan.mode == KVMEM_INJECT_EXACT) {
				fprintf(stderr,
					PROG ": bad --channel '%s': not bsc, "
					     "burst:K, byte:K (K 1..8), "
					     "adjacent:K, line[:BYTES] or "
					     "column:ROW\n",
					optarg);
				return 2;
			}
			a->channel = optarg;
			break;
		case 'T':
			if (parse_int("page-tokens", optarg, 1, 4096,
				      &a->page_tokens))
				return 2;
			break;
		case 'S':
			if (parse_int("sink", optarg, 0, 4096, &a->sink))
				return 2;
			break;
		case 'K':
			if (!strcmp(optarg, "group")) {
				a->key_scales = KVMEM_SCALES_GROUP;
			} else if (!strcmp(optarg, "channel")) {
				a->key_scales = KVMEM_SCALES_CHANNEL;
			} else {
				fprintf(stderr,
					PROG ": bad --key-scales '%s': group "
					     "or channel\n",
					optarg);
				return 2;
			}
			break;
		case 'A':
			if (parse_archive(optarg, a))
				return 2;
			break;
		case 'B':
			if (parse_budget(optarg, a))
				return 2;
			break;
		case 'P':
			if (parse_int("prompt", optarg, 0, 1 << 20, &a->prompt))
				return 2;
			break;
		case 'r':
			if (parse_u64(optarg, &a->sample_seed, 0)) {
				fprintf(stderr, PROG ": bad --sample-seed\n");
				return 2;
			}
			break;
		case 'c':
			if (a->daemon) {
				fprintf(stderr,
					PROG ": --connect and --daemon: "
					     "pick one\n");
				return 2;
			}
			a->connect = optarg;
			break;
		case 'd':
			if (a->connect) {
				fprintf(stderr,
					PROG ": --connect and --daemon: "
					     "pick one\n");
				return 2;
			}
			a->daemon = 1;
			break;
		case 'k':
			a->kvmemd = optarg;
			break;
		case 'j':
			a->json = 1;
			break;
		case 'h':
			usage(stdout);
			return 1;
		case 'V':
			printf(PROG " %s\n", kvmem_version());
			return 1;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || !a->model) {
		if (!a->model)
			fprintf(stderr, PROG ": --model is required\n");
		usage(stderr);
		return 2;
	}
	if (a->kvmemd && !a->daemon) {
		fprintf(stderr, PROG ": --kvmemd goes with --daemon: it names "
				     "the kvmemd to start\n");
		return 2;
	}
	if ((a->archive_age || a->budget >= 0) && (a->connect || a->daemon)) {
		fprintf(stderr,
			PROG ": --%s: kvmemd does not re-encode "
			     "pages yet; archive in an embedded "
			     "cache\n",
			a->archive_age ? "archive" : "budget");
		return 2;
	}
	if (a->sink > a->page_tokens) {
		fprintf(stderr,
			PROG ": --sink must not exceed --page-tokens\n");
		return 2;
	}
	if (!a->nmodes)
		for (i = 0; i < NMODES; i++)
			if ((a->prompt || !modes[i].prompt_vq) &&
			    !(a->key_scales == KVMEM_SCALES_CHANNEL &&
			      modes[i].kind == CACHE_KVMEM &&
			      modes[i].format == KVMEM_FMT_FP16))
				a->modes[a->nmodes++] = i;
	if (a->prompt >= a->ntok - 1) {
		fprintf(stderr,
			PROG ": --prompt %d leaves no token of the %d to "
			     "score\n",
			a->prompt, a->ntok);
		return 2;
	}
	for (i = 0; i < a->nmodes; i++) {
		const struct mode *md = &modes[a->modes[i]];

		if (a->key_scales == KVMEM_SCALES_CHANNEL &&
		    md->kind == CACHE_KVMEM && md->format == KVMEM_FMT_FP16) {
			fprintf(stderr,
				PROG ": %s keeps no scales: --key-scales "
				     "channel needs a quantized format\n",
				md->name);
			return 2;
		}
		if (md->prompt_vq && !a->prompt) {
			fprintf(stderr,
				PROG ": %s learns its codebooks from the "
				     "prompt: give --prompt\n",
				md->name);
			return 2;
		}
		if (md->prompt_vq && (a->connect || a->daemon)) {
			fprintf(stderr,
				PROG ": %s: kvmemd does not keep vq2 "
				     "codebooks; run it in an embedded "
				     "cache\n",
				md->name);
			return 2;
		}
	}
	if (!a->nber)
		a->nber = parse_list("ber", def_ber, MAX_LIST, parse_ber,
				     a->ber, BER_VALID);
	if (!a->nseeds)
		a->nseeds = parse_list("seeds", def_seeds, MAX_LIST, parse_u64,
				       a->seeds, SEED_VALID);
	for (i = 0; a->connect && i < a->nber; i++)
		if (a->ber[i] > 0) {
			fprintf(stderr,
				PROG ": --connect with --ber %g: the bit flips "
				     "would land in pages of the kvmemd at %s, "
				     "which counts them as real memory errors "
				     "(kvmem_ce_total, kvmem_ue_total, its "
				     "events and alerts, counters kept across "
				     "restarts); --daemon runs a kvmemd of its "
				     "own for that\n",
				a->ber[i], a->connect);
			return 2;
		}
	return 0;
}

/* Whether pages change format in a run: its tables say the bits. */
static int re_encodes(const struct args *a)
{
	return a->archive_age || a->budget >= 0 || a->prompt;
}

static void print_header(const struct args *a, const struct model *m,
			 const struct own_kvmemd *own, const struct cache *geo)
{
	int i;

	printf("kvmem-eval: %s: dim %d, %d layers, %d heads (%d KV), "
	       "vocab %d, seq_len %d\n",
	       a->model, m->c.dim, m->c.layers, m->c.heads, m->c.kv_heads,
	       m->c.vocab, m->c.seq_len);
	printf("reference: %d tokens from BOS, FP32 model, sampled at "
	       "temperature 1 (seed %llu)\n",
	       a->ntok, (unsigned long long)a->sample_seed);
	printf("cache: %u tokens a page, %u FP16 sink tokens, head_dim %u, "
	       "scale group %u%s\n",
	       geo->g.tokens_per_page, geo->g.sink_tokens, geo->g.head_dim,
	       geo->g.group_size,
	       geo->g.key_scales == KVMEM_SCALES_CHANNEL
		       ? ";\n       sealed keys with a scale per channel over "
			 "the page"
		       : "");
	if (own)
		printf("kvmemd: one of its own for this run, %s -c /dev/null "
		       "(built-in defaults)\n",
		       own->bin);
	else if (a->connect)
		printf("kvmemd: the one at %s\n", a->connect);
	printf("channel: %s once on every stored bit of each page when it "
	       "is sealed (%s);\n         the FP16 tail being written is not "
	       "injected\n",
	       a->channel,
	       a->payload_only ? "K/V payload only"
			       : "header, scales, checks and payload");
	if (a->int8_scores)
		printf("scores: int8 (KVMEM_ATTEND_INT8_SCORES) in the kvmem "
		       "modes\n");
	if (a->archive_age)
		printf("archive: sealed pages older than %u tokens are "
		       "re-encoded in %s+%s\n",
		       a->archive_age,
		       kvmem_format_get((int)a->archive_fmt)->name,
		       kvmem_codec_get((int)a->archive_codec)->name);
	if (a->prompt)
		printf("prompt: the first %d tokens, not scored; the *-vq "
		       "modes then put its\n        sealed pages in vq2\n",
		       a->prompt);
	if (a->budget >= 0)
		printf("budget: %g bits a value in the sealed pages of each "
		       "layer, the least\n        attended re-encoded in "
		       "%s+%s\n",
		       a->budget, kvmem_format_get((int)a->budget_fmt)->name,
		       kvmem_codec_get((int)a->budget_codec)->name);
	printf("seeds:");
	for (i = 0; i < a->nseeds; i++)
		printf(" %llu", (unsigned long long)a->seeds[i]);
	printf(" (mean, +- 95%% CI)\n\n%-19s %7s %16s %18s %14s %14s %10s "
	       "%9s%s\n",
	       "mode", "BER", "ppl", "KL", "top-1", "top-5", "corrected",
	       "detected", re_encodes(a) ? "   bits/v  archived" : "");
}

/* The results, as a table or as JSON; @own: the kvmemd started here. */
static void print_results(const struct args *a, const struct model *m,
			  const struct own_kvmemd *own,
			  const struct result *res)
{
	struct cache geo;
	int mi, bi, si, first = 1;

	if (a->json) {
		printf("[");
		for (mi = 0; mi < a->nmodes; mi++)
			for (bi = 0; bi < a->nber; bi++)
				for (si = 0; si < a->nseeds; si++) {
					const struct result *r =
						&res[((size_t)mi * a->nber +
						      bi) * a->nseeds +
						     si];

					printf("%s\n{\"mode\": \"%s\", \"ber\": "
					       "%g, \"seed\": %llu, \"ppl\": "
					       "%.6f, \"kl\": %.8f, \"top1\": "
					       "%.6f, \"top5\": %.6f, "
					       "\"corrected\": %llu, "
					       "\"detected\": %llu, "
					       "\"bits_flipped\": %llu, "
					       "\"channel\": \"%s\", "
					       "\"payload_only\": %s, "
					       "\"int8_scores\": %s, "
					       "\"key_scales\": \"%s\", "
					       "\"payload_bits\": %.4f, "
					       "\"bits_per_value\": %.4f, "
					       "\"archived_pages\": %llu, "
					       "\"prompt\": %d}",
					       first ? "" : ",",
					       modes[a->modes[mi]].name,
					       a->ber[bi],
					       (unsigned long long)a->seeds[si],
					       r->ppl, r->kl, r->top1, r->top5,
					       (unsigned long long)r->corrected,
					       (unsigned long long)r->detected,
					       (unsigned long long)
						       r->bits_flipped,
					       a->channel,
					       a->payload_only ? "true"
							       : "false",
					       a->int8_scores ? "true"
							      : "false",
					       a->key_scales ==
							       KVMEM_SCALES_CHANNEL
						       ? "channel"
						       : "group",
					       r->payload_bits,
					       r->bits_per_value,
					       (unsigned long long)r->archived,
					       a->prompt);
					first = 0;
				}
		printf("\n]\n");
	} else {
		/* The geometry only: no budget, no archive. */
		struct run_opts o = { .page_tokens = (uint32_t)a->page_tokens,
				      .sink_tokens = (uint32_t)a->sink,
				      .key_scales = (uint8_t)a->key_scales,
				      .budget = -1.0f };

		cache_open(&geo, m, &modes[3], &o);
		print_header(a, m, own, &geo);
		cache_close(&geo);
		for (mi = 0; mi < a->nmodes; mi++)
			for (bi = 0; bi < a->nber; bi++) {
				const struct result *r =
					&res[((size_t)mi * a->nber + bi) *
					     a->nseeds];
				double v[4][2], x[4][MAX_LIST], corr = 0;
				double det = 0, bits = 0, arch = 0;
				int k;

				for (si = 0; si < a->nseeds; si++) {
					x[0][si] = r[si].ppl;
					x[1][si] = r[si].kl;
					x[2][si] = r[si].top1;
					x[3][si] = r[si].top5;
					corr += (double)r[si].corrected;
					det += (double)r[si].detected;
					bits += r[si].bits_per_value;
					arch += (double)r[si].archived;
				}
				for (k = 0; k < 4; k++)
					mean_ci(x[k], a->nseeds, &v[k][0],
						&v[k][1]);
				printf("%-19s %7g %8.3f +-%5.3f %9.5f +-%6.5f "
				       "%6.3f +-%5.3f %6.3f +-%5.3f %10.0f "
				       "%9.0f",
				       modes[a->modes[mi]].name, a->ber[bi],
				       v[0][0], v[0][1], v[1][0], v[1][1],
				       v[2][0], v[2][1], v[3][0], v[3][1],
				       corr / a->nseeds, det / a->nseeds);
				if (re_encodes(a))
					printf(" %9.3f %9.1f", bits / a->nseeds,
					       arch / a->nseeds);
				printf("\n");
			}
		printf("\ncorrected, detected: codewords per run that a scrub "
		       "would correct, and could\nnot (mean over seeds); ppl "
		       "and KL are of the teacher-forced reference stream.\n");
		if (re_encodes(a))
			printf("bits/v: bits a value of the sealed pages takes "
			       "at the end, scales,\nheaders and vq2 codebooks included; "
			       "archived: pages re-encoded in a run (means "
			       "over seeds).\n");
	}
}

int main(int argc, char **argv)
{
	struct args a;
	struct model m;
	struct state s = { 0 };
	struct result *res = NULL;
	struct own_kvmemd own = { .cpu = -1, .peer_cpu = -1 };
	double *lsm = NULL, *lsr = NULL;
	float *ref = NULL;
	int *tok = NULL, ret, mi, bi, si;

	ret = parse_args(argc, argv, &a);
	if (ret)
		return ret == 1 ? 0 : ret;
	if (model_load(a.model, &m))
		return 2;
	if (a.ntok > m.c.seq_len) {
		fprintf(stderr,
			PROG ": --tokens %d exceeds the model's "
			     "seq_len %d\n",
			a.ntok, m.c.seq_len);
		free(m.mem);
		return 2;
	}
	ret = 1;
	tok = malloc((size_t)a.ntok * sizeof(int));
	ref = malloc((size_t)a.ntok * m.c.vocab * sizeof(float));
	lsm = malloc((size_t)m.c.vocab * sizeof(double));
	lsr = malloc((size_t)m.c.vocab * sizeof(double));
	res = calloc((size_t)a.nmodes * a.nber * a.nseeds, sizeof(*res));
	if (!tok || !ref || !lsm || !lsr || !res || state_alloc(&s, &m)) {
		fprintf(stderr, PROG ": out of memory\n");
		goto out;
	}
	/* Its own, so that the bit flips in its pages never reach the
	 * error counters of a daemon that serves others. It starts while
	 * the reference runs. */
	if (a.daemon) {
		if (own_kvmemd_start(&own, a.kvmemd, 0, NULL))
			goto out;
		a.connect = own.sock;
	}
	if (reference(&m, &s, a.ntok, a.sample_seed, tok, ref)) {
		fprintf(stderr, PROG ": the reference run failed\n");
		goto out;
	}
	for (mi = 0; mi < a.nmodes; mi++)
		for (bi = 0; bi < a.nber; bi++)
			for (si = 0; si < a.nseeds; si++) {
				struct run_opts o = {
					.ber = a.ber[bi],
					.chan_mode = a.chan.mode,
					.chan_k = a.chan.k,
					.seed = a.seeds[si],
					.payload_only = a.payload_only,
					.attend_flags =
						a.int8_scores
							? KVMEM_ATTEND_INT8_SCORES
							: 0,
					.page_tokens = (uint32_t)a.page_tokens,
					.sink_tokens = (uint32_t)a.sink,
					.key_scales = (uint8_t)a.key_scales,
					.connect = a.connect,
					.own = a.daemon ? &own : NULL,
					.archive_age = a.archive_age,
					.archive_fmt = a.archive_fmt,
					.archive_codec = a.archive_codec,
					.budget = a.budget,
					.budget_fmt = a.budget_fmt,
					.budget_codec = a.budget_codec,
					.prompt = (uint32_t)a.prompt,
				};
				struct result *r = &res[((size_t)mi * a.nber +
							 bi) * a.nseeds +
							si];
				int err = run(&m, &s, &modes[a.modes[mi]], &o,
					      a.ntok, tok, ref, lsm, lsr, r);

				if (err) {
					if (!r->said)
						fprintf(stderr,
							PROG
							": %s at BER %g: %s\n",
							modes[a.modes[mi]].name,
							a.ber[bi],
							kvmem_strerror(err));
					goto out;
				}
			}

	ret = 0;
out:
	if (a.daemon && own_kvmemd_stop(&own, ret))
		ret = 1;
	if (!ret)
		print_results(&a, &m, a.daemon ? &own : NULL, res);
	state_free(&s);
	free(tok);
	free(ref);
	free(lsm);
	free(lsr);
	free(res);
	free(m.mem);
	return ret;
}
