/* SPDX-License-Identifier: MIT */
/*
 * bench-archive.c - kvmem-bench archive: how fast sealed pages are
 * re-encoded for the archive tier
 *
 * A layer of --ctx tokens in an embedded cache; every sealed page is
 * re-encoded with kvmem_page_archive() into a buffer, --reps times for
 * each archive format and codec asked for. The baseline, measured in the
 * same run over the same pages, is memcpy() of their bytes: a re-encode
 * reads a page and writes its archived copy, as a copy does. Each archived
 * page is verified once (kvmem_page_verify()). The rate is what a budget
 * such as kvmemd's patrol rate would be set against.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "kvmem/kvmem.h"
#include "kvmem-private.h"

#define MAX_TO 8

struct archive_cfg {
	uint64_t ctx, kv_heads, dim, page_tokens, reps;
	int format, codec;
	int to_fmt[MAX_TO], to_codec[MAX_TO], nto;
	int json;
};

static void archive_usage(FILE *f)
{
	fprintf(f,
		"usage: kvmem-bench archive [--ctx N] [--kv-heads H] [--dim D]\n"
		"                           [--page-tokens T] [--format F] "
		"[--codec C]\n"
		"                           [--to FMT+CODEC,...] [--reps R] "
		"[--json]\n\n"
		"  --ctx N          tokens in the layer (default 4096)\n"
		"  --kv-heads H     KV heads (default 8)\n"
		"  --dim D          head dimension (default 128)\n"
		"  --page-tokens T  tokens a page (default 32)\n"
		"  --format F       the pages' format (default int4)\n"
		"  --codec C        their codec (default h84)\n"
		"  --to LIST        archive formats and codecs (default "
		"int4+golay24,int2+golay24)\n"
		"  --reps R         passes over the pages (default 5; the "
		"median is reported)\n"
		"  --json           one JSON object on stdout\n");
}

/* "int2+golay24" into a format and codec; -1 when it is not one. */
static int parse_to(char *item, int *fmt, int *codec)
{
	char *plus = strchr(item, '+');

	if (!plus)
		return -1;
	*plus = 0;
	*fmt = kvmem_format_by_name(item);
	*codec = kvmem_codec_by_name(plus + 1);
	*plus = '+';
	return *fmt <= KVMEM_FMT_FP16 || *codec < 0 ? -1 : 0;
}

static int parse_list(char *arg, struct archive_cfg *cfg)
{
	char *save = NULL, *item;

	cfg->nto = 0;
	for (item = strtok_r(arg, ",", &save); item;
	     item = strtok_r(NULL, ",", &save)) {
		if (cfg->nto == MAX_TO || parse_to(item, &cfg->to_fmt[cfg->nto],
						   &cfg->to_codec[cfg->nto])) {
			fprintf(stderr,
				"kvmem-bench: bad --to item '%s': FORMAT+CODEC "
				"like int2+golay24 (int8, int4, int2, fp8 or lm*), at "
				"most %d\n",
				item, MAX_TO);
			return -1;
		}
		cfg->nto++;
	}
	return cfg->nto ? 0 : -1;
}

static int parse_cfg(int argc, char **argv, struct archive_cfg *cfg)
{
	static const struct option opts[] = {
		{ "ctx", required_argument, NULL, 'n' },
		{ "kv-heads", required_argument, NULL, 'k' },
		{ "dim", required_argument, NULL, 'd' },
		{ "page-tokens", required_argument, NULL, 't' },
		{ "format", required_argument, NULL, 'f' },
		{ "codec", required_argument, NULL, 'c' },
		{ "to", required_argument, NULL, 'T' },
		{ "reps", required_argument, NULL, 'r' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char def[] = "int4+golay24,int2+golay24";
	int o;

	*cfg = (struct archive_cfg){ .ctx = 4096,
				     .kv_heads = 8,
				     .dim = 128,
				     .page_tokens = 32,
				     .reps = 5,
				     .format = KVMEM_FMT_INT4,
				     .codec = KVMEM_CODEC_H84 };
	parse_list(def, cfg);
	optind = 1;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'n':
			if (bench_parse_u64("ctx", optarg, 1, 1u << 20,
					    &cfg->ctx))
				return 2;
			break;
		case 'k':
			if (bench_parse_u64("kv-heads", optarg, 1, 256,
					    &cfg->kv_heads))
				return 2;
			break;
		case 'd':
			if (bench_parse_u64("dim", optarg, 1, 1024, &cfg->dim))
				return 2;
			break;
		case 't':
			if (bench_parse_u64("page-tokens", optarg, 1, 1024,
					    &cfg->page_tokens))
				return 2;
			break;
		case 'f':
			if (bench_parse_format(optarg, &cfg->format))
				return 2;
			break;
		case 'c':
			if (bench_parse_codec(optarg, &cfg->codec))
				return 2;
			break;
		case 'T':
			if (parse_list(optarg, cfg))
				return 2;
			break;
		case 'r':
			if (bench_parse_u64("reps", optarg, 1, 10000,
					    &cfg->reps))
				return 2;
			break;
		case 'j':
			cfg->json = 1;
			break;
		case 'h':
			archive_usage(stdout);
			return -1;
		default:
			archive_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		archive_usage(stderr);
		return 2;
	}
	return 0;
}

/* The layer's sealed pages that are not hot: what an archive takes. */
static int sealed_pages(struct kvmem_seq *s, struct kvmem_page_desc **out)
{
	struct kvmem_page_desc *d;
	int n = kvmem_seq_pages(s, 0, NULL, 0), i, m = 0;

	d = calloc((size_t)n + 1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	kvmem_seq_pages(s, 0, d, (size_t)n);
	for (i = 0; i < n; i++)
		if (d[i].sealed && !d[i].hot)
			d[m++] = d[i];
	*out = d;
	return m;
}

/* Fill a layer of @ctx tokens; its cache and sequence in @c and @s. */
static int fill_layer(const struct kvmem_geometry *g, uint64_t ctx,
		      struct kvmem_cache **c, struct kvmem_seq **s)
{
	const size_t row = (size_t)g->kv_heads * g->head_dim;
	struct kvmem_page_layout hot, sealed;
	struct kvmem_rng r;
	float *k, *v;
	size_t i;
	int ret;

	kvmem_page_layout(g, 1, &hot);
	kvmem_page_layout(g, 0, &sealed);
	ret = kvmem_open_embedded(
		g, (ctx / g->tokens_per_page + 2) * (hot.size + sealed.size),
		c);
	if (ret)
		return ret;
	ret = kvmem_seq_create(*c, s);
	if (ret)
		return ret;
	k = bench_alloc(ctx * row * sizeof(float));
	v = bench_alloc(ctx * row * sizeof(float));
	kvmem_rng_seed(&r, 2611);
	for (i = 0; i < ctx * row; i++) {
		k[i] = 4.0f * bench_rnd_unit(&r) - 2.0f;
		v[i] = 2.0f * bench_rnd_unit(&r) - 1.0f;
	}
	ret = kvmem_seq_append(*s, 0, k, v, (uint32_t)ctx);
	free(k);
	free(v);
	return ret;
}

/* The median of @reps passes of @pass over @n pages, in ns. */
static uint64_t timed(const struct kvmem_page_desc *d, int n, uint8_t *dst,
		      size_t stride, uint64_t reps,
		      int (*pass)(const struct kvmem_page_desc *, uint8_t *,
				  const void *),
		      const void *arg, int *err)
{
	uint64_t *t = calloc(reps, sizeof(*t)), med, r, t0;
	int i;

	if (!t) {
		*err = -ENOMEM;
		return 0;
	}
	for (r = 0; r < reps && !*err; r++) {
		t0 = bench_now_ns();
		for (i = 0; i < n && !*err; i++)
			*err = pass(&d[i], dst + (size_t)i * stride, arg);
		t[r] = bench_now_ns() - t0;
	}
	med = bench_median(t, (uint32_t)reps);
	free(t);
	return med;
}

static int copy_pass(const struct kvmem_page_desc *d, uint8_t *dst,
		     const void *arg)
{
	(void)arg;
	memcpy(dst, d->data, d->size);
	return 0;
}

struct to {
	const struct kvmem_geometry *g;
	int fmt, codec;
};

static int archive_pass(const struct kvmem_page_desc *d, uint8_t *dst,
			const void *arg)
{
	const struct to *to = arg;

	return kvmem_page_archive(dst, d->data, to->g, (unsigned int)to->fmt,
				  (unsigned int)to->codec, NULL);
}

static int run_archive(int argc, char **argv)
{
	struct archive_cfg cfg;
	struct kvmem_geometry g = { .layers = 1 };
	struct kvmem_page_desc *d = NULL;
	struct kvmem_cache *c = NULL;
	struct kvmem_seq *s = NULL;
	struct kvmem_page_layout own;
	uint8_t *dst;
	uint64_t t_copy, bytes = 0;
	char why[160], name[40];
	int ret, n, i, j, err = 0, unverified = 0;

	ret = parse_cfg(argc, argv, &cfg);
	if (ret)
		return ret < 0 ? 0 : ret;
	g.kv_heads = (uint32_t)cfg.kv_heads;
	g.head_dim = (uint32_t)cfg.dim;
	kvmem_geometry_default(&g);
	g.tokens_per_page = (uint32_t)cfg.page_tokens;
	g.format = (uint8_t)cfg.format;
	g.codec = (uint8_t)cfg.codec;
	if (g.head_dim % g.group_size)
		g.group_size = g.head_dim;
	if (g.sink_tokens > g.tokens_per_page)
		g.sink_tokens = g.tokens_per_page;
	if (kvmem_geometry_explain(&g, why, sizeof(why))) {
		fprintf(stderr, "kvmem-bench: bad geometry: %s\n", why);
		return 2;
	}
	ret = fill_layer(&g, cfg.ctx, &c, &s);
	n = ret ? ret : sealed_pages(s, &d);
	if (n <= 0) {
		fprintf(stderr, "kvmem-bench: %s\n",
			n ? kvmem_strerror(n)
			  : "no sealed page: --ctx is too short");
		kvmem_close(c);
		free(d);
		return 1;
	}
	kvmem_page_layout(&g, 0, &own);
	dst = bench_alloc((size_t)n * own.size);
	for (i = 0; i < n; i++)
		bytes += d[i].size;
	t_copy = timed(d, n, dst, own.size, cfg.reps, copy_pass, NULL, &err);

	if (cfg.json)
		printf("{\"ctx\": %llu, \"pages\": %d, \"page_bytes\": %zu, "
		       "\"copy_gbps\": %.3f, \"to\": [",
		       (unsigned long long)cfg.ctx, n, own.size,
		       (double)bytes / (double)t_copy);
	else
		printf("%d sealed %s+%s pages of %zu bytes (%llu tokens)\n"
		       "baseline memcpy          %8.3f GB/s\n",
		       n, kvmem_format_get(cfg.format)->name,
		       kvmem_codec_get(cfg.codec)->name, own.size,
		       (unsigned long long)cfg.ctx,
		       (double)bytes / (double)t_copy);
	for (j = 0; j < cfg.nto && !err; j++) {
		const struct to to = { &g, cfg.to_fmt[j], cfg.to_codec[j] };
		struct kvmem_page_layout l;
		uint64_t t = 0;
		int bad = 0;

		ret = kvmem_page_layout_as(&g, (unsigned int)to.fmt,
					   (unsigned int)to.codec, &l);
		if (!ret) {
			t = timed(d, n, dst, own.size, cfg.reps, archive_pass,
				  &to, &err);
			for (i = 0; i < n && !err; i++)
				bad += kvmem_page_verify(
					       dst + (size_t)i * own.size, &g,
					       NULL) != 0;
			unverified += bad;
		}
		snprintf(name, sizeof(name), "%s+%s",
			 kvmem_format_get(to.fmt)->name,
			 kvmem_codec_get(to.codec)->name);
		if (cfg.json)
			printf("%s{\"format\": \"%s\", \"codec\": \"%s\", "
			       "\"error\": %d, \"page_bytes\": %zu, "
			       "\"pages_per_s\": %.1f, \"gbps\": %.3f, "
			       "\"over_copy\": %.4f, \"verified\": %s}",
			       j ? ", " : "", kvmem_format_get(to.fmt)->name,
			       kvmem_codec_get(to.codec)->name, ret,
			       ret ? 0 : l.size,
			       ret ? 0.0 : 1e9 * n / (double)t,
			       ret ? 0.0 : (double)bytes / (double)t,
			       ret ? 0.0 : (double)t_copy / (double)t,
			       !ret && !bad ? "true" : "false");
		else if (ret)
			printf("to %s: %s\n", name,
			       ret == -E2BIG ? "its pages would be larger than "
					       "sealed ones"
					     : kvmem_strerror(ret));
		else
			printf("to %-12s %8.3f GB/s  %9.0f pages/s  (%.3fx "
			       "the baseline; pages of %zu bytes, %s)\n",
			       name, (double)bytes / (double)t,
			       1e9 * n / (double)t, (double)t_copy / (double)t,
			       l.size, bad ? "NOT VERIFIED" : "verified");
	}
	if (cfg.json)
		printf("]}\n");
	free(dst);
	free(d);
	kvmem_close(c);
	if (err) {
		fprintf(stderr, "kvmem-bench: archive: %s\n",
			kvmem_strerror(err));
		return 1;
	}
	if (unverified) {
		fprintf(stderr,
			"kvmem-bench: archive: %d archived pages do not "
			"verify\n",
			unverified);
		return 1;
	}
	return 0;
}

const struct bench_cmd bench_archive = {
	.name = "archive",
	.summary =
		"re-encode sealed pages for the archive tier, next to memcpy",
	.run = run_archive,
};
