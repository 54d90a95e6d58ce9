/* SPDX-License-Identifier: MIT */
/*
 * bench-attend.c - decode-on-load attention against unprotected attention
 *
 * Three ways to attend one query token over the same context, timed in the
 * same run:
 *   kvmem  kvmem_attend() over the protected pages of an embedded cache, on
 *          one thread and on --threads
 *   fp32   float K and V, [kv_head][token][dim], no decoding at all
 *   noecc  the same format and scales as kvmem, without codewords
 * With --queries N, also kvmem_attend_causal() for the last N tokens as
 * one prefill chunk, on one thread, reported per query, against the fp32
 * loop blocked the same way (each tile of K and V read once for every
 * query and head of its group). kvmem's one-thread calls are timed twice,
 * the second time with KVMEM_ATTEND_INT8_SCORES.
 * All three run the same online-softmax core (kvmem__attn_tile()) with the
 * same kernels, so the differences are what decoding costs and what reading
 * fewer bytes saves. Before every call --flush-mib of other memory is read,
 * so each starts with its data out of the caches, as a long context's is;
 * each figure is the median of --reps calls after one warm-up call.
 *
 * The memory floor: the bytes a call reads (kvmem: its pages, whole) over
 * the read bandwidth of one core, and of --threads cores, measured on the
 * flush buffer in the same run.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmem/kvmem.h"
#include "bench.h"
#include "kvmem-private.h"

/* The same context without codewords: rows quantized, scales as floats. */
struct flat {
	int format;
	uint32_t ctx, kv_heads, dim, group, row_bytes;
	float *k, *v; /* fp32 baseline, [kv_head][token][dim] */
	uint8_t *qk, *qv; /* noecc rows, [kv_head][token][row_bytes] */
	float *sk, *sv; /* noecc scales, [kv_head][token][groups] */
};

static void attend_usage(FILE *f)
{
	fprintf(f, "usage: kvmem-bench attend [--ctx N] [--heads H] "
		   "[--kv-heads K] [--dim D]\n"
		   "                          [--format F] [--codec C] "
		   "[--page-tokens T] [--reps N] [--json]\n"
		   "                          [--threads N] [--flush-mib M] "
		   "[--queries N] [--rotate]\n"
		   "                          [--gpu [--batch B] [--host] "
		   "[--sealed]]\n\n"
		   "  --ctx N          context tokens (default 4096)\n"
		   "  --heads H        query heads (default 32)\n"
		   "  --kv-heads K     KV heads, dividing H (default 8)\n"
		   "  --dim D          head dimension (default 128)\n"
		   "  --format F       fp16 int8 int4 int2 fp8 lm2 lm3 lm4 "
		   "vq2 (default int4;\n"
		   "                   vq2: the pages sealed in int4 and then "
		   "archived to vq2,\n"
		   "                   codebooks learned from them, timed)\n"
		   "  --codec C        h74 h84 golay24 secded72 (default h84)\n"
		   "  --page-tokens T  tokens per page (default 32)\n"
		   "  --reps N         timed calls, median kept (default 20)\n"
		   "  --threads N      threads of the second kvmem run "
		   "(default: one per CPU)\n"
		   "  --flush-mib M    memory read before each call to empty "
		   "the caches\n"
		   "                   (default 128; 0 keeps them warm)\n"
		   "  --rotate         kvmem's pages rotated (the geometry's "
		   "Hadamard rotation;\n"
		   "                   the baselines are not)\n"
		   "  --queries N      also one kvmem_attend_causal() call "
		   "for the last N\n"
		   "                   tokens, a prefill chunk, against the "
		   "FP32 loop blocked\n"
		   "                   the same way (default 1: none)\n"
		   "  --json           one JSON object on stdout\n"
		   "  --gpu            on GPU 0: kvmem_cuda_attend() against "
		   "the FP16\n"
		   "                   kernel and a device copy (try --ctx "
		   "32768)\n"
		   "  --batch B        with --gpu: sequences of ctx tokens "
		   "each (default 1)\n"
		   "  --host           with --gpu: also attention from the "
		   "pages of a cache in\n"
		   "                   host memory (kvmem_cuda_register()), "
		   "against the same\n"
		   "                   pages on the device and a copy of them "
		   "to it\n"
		   "  --sealed         with --gpu: sealed pages only; by "
		   "default the first page\n"
		   "                   holds the sink tokens in FP16 and the "
		   "last is an FP16 tail\n"
		   "                   half full, as in decoding (--ctx "
		   "rounded down to that)\n\n"
		   "kvmem's one-thread calls (and the prefill chunk) are timed "
		   "with float\nscores and with KVMEM_ATTEND_INT8_SCORES.\n");
}

static int flat_build(struct flat *f, const struct attend_cfg *cfg,
		      const float *K, const float *V, uint32_t group)
{
	const size_t rows = (size_t)cfg->kv_heads * cfg->ctx;
	const unsigned int bits = kvmem_format_get(cfg->format)->bits;
	const uint32_t ng = cfg->dim / group;
	uint16_t *sc = malloc(ng * sizeof(*sc));
	uint32_t h, t, i;

	memset(f, 0, sizeof(*f));
	f->format = cfg->format;
	f->ctx = cfg->ctx;
	f->kv_heads = cfg->kv_heads;
	f->dim = cfg->dim;
	f->group = group;
	f->row_bytes = (cfg->dim * bits + 7) / 8;
	f->k = malloc(rows * cfg->dim * sizeof(float));
	f->v = malloc(rows * cfg->dim * sizeof(float));
	f->qk = malloc(rows * f->row_bytes);
	f->qv = malloc(rows * f->row_bytes);
	f->sk = malloc(rows * ng * sizeof(float));
	f->sv = malloc(rows * ng * sizeof(float));
	if (!sc || !f->k || !f->v || !f->qk || !f->qv || !f->sk || !f->sv) {
		free(sc);
		return -1;
	}
	for (h = 0; h < cfg->kv_heads; h++)
		for (t = 0; t < cfg->ctx; t++) {
			size_t src = ((size_t)t * cfg->kv_heads + h) * cfg->dim;
			size_t row = (size_t)h * cfg->ctx + t;

			memcpy(f->k + row * cfg->dim, K + src,
			       cfg->dim * sizeof(float));
			memcpy(f->v + row * cfg->dim, V + src,
			       cfg->dim * sizeof(float));
			kvmem_quantize(cfg->format, K + src, cfg->dim, group,
				       sc, f->qk + row * f->row_bytes);
			for (i = 0; i < ng && bits < 16; i++)
				f->sk[row * ng + i] =
					kvmem_half_to_float(sc[i]);
			kvmem_quantize(cfg->format, V + src, cfg->dim, group,
				       sc, f->qv + row * f->row_bytes);
			for (i = 0; i < ng && bits < 16; i++)
				f->sv[row * ng + i] =
					kvmem_half_to_float(sc[i]);
		}
	free(sc);
	return 0;
}

static void flat_free(struct flat *f)
{
	free(f->k);
	free(f->v);
	free(f->qk);
	free(f->qv);
	free(f->sk);
	free(f->sv);
}

/* fp32 (@quant = 0) or noecc (@quant = 1) attention over @f, @heads rows
 * of state. */
static void flat_attend(const struct flat *f, struct kvmem__attn *a,
			uint32_t heads, const float *q, float *out, int quant,
			float *kt, float *vt)
{
	const uint32_t D = f->dim, ng = D / f->group;
	uint32_t h, t0, t;
	uint32_t i;

	for (i = 0; i < heads; i++) {
		a->m[i] = -INFINITY;
		a->l[i] = 0.0f;
	}
	memset(a->acc, 0, (size_t)heads * D * sizeof(float));
	for (h = 0; h < f->kv_heads; h++)
		for (t0 = 0; t0 < f->ctx; t0 += KVMEM__ATTN_TILE) {
			uint32_t n = f->ctx - t0 < KVMEM__ATTN_TILE
					     ? f->ctx - t0
					     : KVMEM__ATTN_TILE;
			size_t row = (size_t)h * f->ctx + t0;

			a->tpos = t0; /* for a causal @a's mask */
			if (!quant) {
				kvmem__attn_tile(a, q, h, f->k + row * D,
						 f->v + row * D, n, NULL);
				continue;
			}
			for (t = 0; t < n; t++) {
				a->kn->dequant(f->format,
					       f->qk + (row + t) * f->row_bytes,
					       D, f->group,
					       f->sk + (row + t) * ng,
					       kt + (size_t)t * D);
				a->kn->dequant(f->format,
					       f->qv + (row + t) * f->row_bytes,
					       D, f->group,
					       f->sv + (row + t) * ng,
					       vt + (size_t)t * D);
			}
			kvmem__attn_tile(a, q, h, kt, vt, n, NULL);
		}
	kvmem__attn_finish(a, heads, out);
}

/*
 * The fp32 loop for a prefill chunk: the last @nq tokens' queries, @rows
 * [kv_head][nq][heads / kv_heads][dim] as attend.c orders them, in one
 * state whose rows of a KV head meet each tile of K and V at once, causal
 * (@a made for heads * nq rows, heads / kv_heads * nq of them a KV head).
 * @out is in the same order.
 */
static void flat_causal(const struct flat *f, struct kvmem__attn *a,
			uint32_t heads, uint32_t nq, const float *rows,
			float *out)
{
	a->qg = heads / f->kv_heads;
	a->pos0 = f->ctx - nq;
	flat_attend(f, a, heads * nq, rows, out, 0, NULL, NULL);
}

static int parse_u32(const char *opt, const char *arg, uint32_t min,
		     uint32_t max, uint32_t *out)
{
	uint64_t v;

	if (bench_parse_u64(opt, arg, min, max, &v))
		return -1;
	*out = (uint32_t)v;
	return 0;
}

static int parse_cfg(int argc, char **argv, struct attend_cfg *cfg)
{
	static const struct option opts[] = {
		{ "ctx", required_argument, NULL, 'n' },
		{ "heads", required_argument, NULL, 'H' },
		{ "kv-heads", required_argument, NULL, 'K' },
		{ "dim", required_argument, NULL, 'D' },
		{ "format", required_argument, NULL, 'f' },
		{ "codec", required_argument, NULL, 'c' },
		{ "page-tokens", required_argument, NULL, 'T' },
		{ "reps", required_argument, NULL, 'r' },
		{ "json", no_argument, NULL, 'j' },
		{ "gpu", no_argument, NULL, 'g' },
		{ "batch", required_argument, NULL, 'B' },
		{ "host", no_argument, NULL, 'o' },
		{ "sealed", no_argument, NULL, 'S' },
		{ "threads", required_argument, NULL, 't' },
		{ "flush-mib", required_argument, NULL, 'F' },
		{ "queries", required_argument, NULL, 'Q' },
		{ "rotate", no_argument, NULL, 'R' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int o;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'n':
			if (parse_u32("ctx", optarg, 1, 1u << 20, &cfg->ctx))
				return 2;
			break;
		case 'H':
			if (parse_u32("heads", optarg, 1, 1024, &cfg->heads))
				return 2;
			break;
		case 'K':
			if (parse_u32("kv-heads", optarg, 1, 1024,
				      &cfg->kv_heads))
				return 2;
			break;
		case 'D':
			if (parse_u32("dim", optarg, 1, 1024, &cfg->dim))
				return 2;
			break;
		case 'T':
			if (parse_u32("page-tokens", optarg, 1, 4096,
				      &cfg->page_tokens))
				return 2;
			break;
		case 'r':
			if (parse_u32("reps", optarg, 1, 10000, &cfg->reps))
				return 2;
			break;
		case 'f':
			cfg->format = kvmem_format_by_name(optarg);
			if (cfg->format < 0) {
				fprintf(stderr,
					"kvmem-bench: unknown format '%s'\n",
					optarg);
				return 2;
			}
			break;
		case 'c':
			cfg->codec = kvmem_codec_by_name(optarg);
			if (cfg->codec < 0) {
				fprintf(stderr,
					"kvmem-bench: unknown codec '%s'\n",
					optarg);
				return 2;
			}
			break;
		case 'j':
			cfg->json = 1;
			break;
		case 'g':
			cfg->gpu = 1;
			break;
		case 'B':
			if (parse_u32("batch", optarg, 1, 256, &cfg->batch))
				return 2;
			break;
		case 'o':
			cfg->host = 1;
			break;
		case 'S':
			cfg->sealed = 1;
			break;
		case 't':
			if (parse_u32("threads", optarg, 1, BENCH_MAX_THREADS,
				      &cfg->threads))
				return 2;
			break;
		case 'F':
			if (parse_u32("flush-mib", optarg, 0, 16384,
				      &cfg->flush_mib))
				return 2;
			break;
		case 'Q':
			if (parse_u32("queries", optarg, 1, 4096,
				      &cfg->queries))
				return 2;
			break;
		case 'R':
			cfg->rotate = 1;
			break;
		case 'h':
			attend_usage(stdout);
			return 1;
		default:
			attend_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		attend_usage(stderr);
		return 2;
	}
	if (cfg->queries > cfg->ctx) {
		fprintf(stderr,
			"kvmem-bench: --queries must be at most --ctx\n");
		return 2;
	}
	if (cfg->heads % cfg->kv_heads) {
		fprintf(stderr, "kvmem-bench: --heads must be a multiple of "
				"--kv-heads\n");
		return 2;
	}
	return 0;
}

/* Median microseconds of @n times. */
static double median_us(uint64_t *t, uint32_t n)
{
	return (double)bench_median(t, n) / 1e3;
}

/* What a call of kvmem_attend() reads: every page of the layer, whole. */
static size_t pages_bytes(struct kvmem_seq *seq)
{
	int np = kvmem_seq_pages(seq, 0, NULL, 0), i;
	struct kvmem_page_desc *pd;
	size_t bytes = 0;

	if (np <= 0)
		return 0;
	pd = bench_alloc((size_t)np * sizeof(*pd));
	if (kvmem_seq_pages(seq, 0, pd, (size_t)np) == np)
		for (i = 0; i < np; i++)
			bytes += pd[i].size;
	free(pd);
	return bytes;
}

/* The vq2 codebooks of layer 0, which attention decodes too. */
static size_t codebook_bytes(struct kvmem_seq *seq)
{
	struct kvmem_codebook_desc d;

	return kvmem_seq_codebook(seq, 0, &d) ? 0 : d.size;
}

/* Read the flush buffer, so the next call finds none of its data cached. */
static void flush(const void *buf, size_t len)
{
	static volatile uint64_t sink;

	if (len)
		sink += bench_read_sum(buf, len);
}

static int run_attend(int argc, char **argv)
{
	struct attend_cfg cfg = {
		.ctx = 4096,
		.heads = 32,
		.kv_heads = 8,
		.dim = 128,
		.page_tokens = 32,
		.reps = 20,
		.flush_mib = 128,
		.batch = 1,
		.queries = 1,
		.format = KVMEM_FMT_INT4,
		.codec = KVMEM_CODEC_H84,
	};
	struct kvmem_geometry g = { 0 };
	char why[160];
	struct kvmem_attend_opts opts = { 0 }, opts_mt, opts_q8;
	struct kvmem_cache *cache = NULL;
	struct kvmem_seq *seq = NULL;
	struct kvmem__attn a = { 0 }, ac = { 0 };
	struct kvmem_rng rng;
	struct flat f = { 0 };
	float *K, *V, *q, *out_kv, *out_mt, *out_fp, *out_nq, *kt, *vt;
	float *qc = NULL, *out_c = NULL, *rows_c = NULL, *out_fc = NULL;
	float *out_q8, *out_cq8 = NULL;
	uint64_t *tk, *tm, *tf, *tn, *tq, *tc = NULL, *tfc = NULL, *tcq = NULL;
	uint64_t t0;
	double kvmem_us, mt_us, fp32_us, noecc_us, diff = 0.0, diff_nq = 0.0;
	double q8_us, diff_q8 = 0.0, causal_q8_us = 0.0, diff_cq8 = 0.0;
	double vq_s = 0.0;
	char noecc_j[3][32];
	struct attend_cfg flat_cfg;
	int vq;
	double causal_us = 0.0, fp32_causal_us = 0.0, diff_c = 0.0;
	uint32_t G;
	double bw1, bwn, floor1_us, floorn_us;
	size_t nvals, i, flush_len, probe_len, kv_bytes, fp_bytes;
	uint8_t *fbuf;
	uint32_t r;
	int ret, same_mt = 1;

	cfg.threads = kvmem__cpus();
	ret = parse_cfg(argc, argv, &cfg);
	if (ret)
		return ret == 1 ? 0 : ret;

	g.layers = 1;
	g.kv_heads = cfg.kv_heads;
	g.head_dim = cfg.dim;
	kvmem_geometry_default(&g);
	g.tokens_per_page = cfg.page_tokens;
	if (g.sink_tokens > g.tokens_per_page)
		g.sink_tokens = g.tokens_per_page;
	if (cfg.dim % g.group_size)
		g.group_size = cfg.dim;
	/* vq2 is an archive format: the pages are sealed in int4 first. */
	vq = cfg.format == KVMEM_FMT_VQ2;
	g.format = (uint8_t)(vq ? KVMEM_FMT_INT4 : cfg.format);
	g.codec = (uint8_t)cfg.codec;
	g.rotation = cfg.rotate ? KVMEM_ROTATE_HADAMARD : KVMEM_ROTATE_NONE;
	if (kvmem_geometry_explain(&g, why, sizeof(why))) {
		fprintf(stderr, "kvmem-bench: that geometry is not valid: %s\n",
			why);
		return 2;
	}
	if (cfg.gpu && vq) {
		fprintf(stderr, "kvmem-bench: the CUDA kernels do not read "
				"vq2 pages\n");
		return 2;
	}
	if (cfg.gpu)
		return bench_attend_gpu(&cfg, &g);
	if (cfg.batch != 1 || cfg.host || cfg.sealed) {
		fprintf(stderr, "kvmem-bench: --%s needs --gpu\n",
			cfg.host     ? "host"
			: cfg.sealed ? "sealed"
				     : "batch");
		return 2;
	}

	nvals = (size_t)cfg.ctx * cfg.kv_heads * cfg.dim;
	K = bench_alloc(nvals * sizeof(float));
	V = bench_alloc(nvals * sizeof(float));
	q = bench_alloc((size_t)cfg.heads * cfg.dim * sizeof(float));
	out_kv = bench_alloc((size_t)cfg.heads * cfg.dim * sizeof(float));
	out_mt = bench_alloc((size_t)cfg.heads * cfg.dim * sizeof(float));
	out_fp = bench_alloc((size_t)cfg.heads * cfg.dim * sizeof(float));
	out_nq = bench_alloc((size_t)cfg.heads * cfg.dim * sizeof(float));
	out_q8 = bench_alloc((size_t)cfg.heads * cfg.dim * sizeof(float));
	kt = bench_alloc((size_t)KVMEM__ATTN_TILE * cfg.dim * sizeof(float));
	vt = bench_alloc((size_t)KVMEM__ATTN_TILE * cfg.dim * sizeof(float));
	tk = bench_alloc(cfg.reps * sizeof(*tk));
	tm = bench_alloc(cfg.reps * sizeof(*tm));
	tf = bench_alloc(cfg.reps * sizeof(*tf));
	tn = bench_alloc(cfg.reps * sizeof(*tn));
	tq = bench_alloc(cfg.reps * sizeof(*tq));
	if (cfg.queries > 1) {
		qc = bench_alloc((size_t)cfg.queries * cfg.heads * cfg.dim *
				 sizeof(float));
		out_c = bench_alloc((size_t)cfg.queries * cfg.heads * cfg.dim *
				    sizeof(float));
		rows_c = bench_alloc((size_t)cfg.queries * cfg.heads * cfg.dim *
				     sizeof(float));
		out_fc = bench_alloc((size_t)cfg.queries * cfg.heads * cfg.dim *
				     sizeof(float));
		out_cq8 = bench_alloc((size_t)cfg.queries * cfg.heads *
				      cfg.dim * sizeof(float));
		tc = bench_alloc(cfg.reps * sizeof(*tc));
		tfc = bench_alloc(cfg.reps * sizeof(*tfc));
		tcq = bench_alloc(cfg.reps * sizeof(*tcq));
	}
	/* The flush buffer doubles as the bandwidth probe: 32 MiB at least. */
	flush_len = (size_t)cfg.flush_mib << 20;
	probe_len = flush_len > (32u << 20) ? flush_len : 32u << 20;
	fbuf = bench_alloc(probe_len);
	kvmem_rng_seed(&rng, 1);
	for (i = 0; i < nvals; i++) {
		K[i] = bench_rnd_unit(&rng);
		V[i] = bench_rnd_unit(&rng);
	}
	for (i = 0; i < (size_t)cfg.heads * cfg.dim; i++)
		q[i] = bench_rnd_unit(&rng);
	for (i = 0; qc && i < (size_t)cfg.queries * cfg.heads * cfg.dim; i++)
		qc[i] = bench_rnd_unit(&rng);
	G = cfg.heads / cfg.kv_heads;
	if (qc)
		kvmem__attn_rows_move(qc, rows_c, cfg.queries, cfg.heads, G,
				      cfg.dim, 1);

	ret = 1;
	/* The baselines of vq2: fp32, and no flat vq2 (no "no ECC"). */
	flat_cfg = cfg;
	if (vq)
		flat_cfg.format = KVMEM_FMT_INT4;
	if (kvmem_open_embedded(&g, 2 * nvals * 2 * sizeof(float) + (64u << 20),
				&cache) ||
	    kvmem_seq_create(cache, &seq) ||
	    kvmem_seq_append(seq, 0, K, V, cfg.ctx) ||
	    flat_build(&f, &flat_cfg, K, V, g.group_size) ||
	    kvmem__attn_init(&a, cfg.heads, cfg.heads / cfg.kv_heads, cfg.dim,
			     1.0f / sqrtf((float)cfg.dim)) ||
	    (qc &&
	     kvmem__attn_init(&ac, cfg.heads * cfg.queries, G * cfg.queries,
			      cfg.dim, 1.0f / sqrtf((float)cfg.dim)))) {
		fprintf(stderr, "kvmem-bench: out of memory building the "
				"context\n");
		goto out;
	}
	if (vq) {
		t0 = bench_now_ns();
		i = (size_t)kvmem_seq_archive(seq, cfg.ctx, KVMEM_FMT_VQ2,
					      (unsigned int)cfg.codec);
		vq_s = (double)(bench_now_ns() - t0) / 1e9;
		if ((int)i < 0) {
			fprintf(stderr, "kvmem-bench: the pages to vq2: %s\n",
				kvmem_strerror((int)i));
			goto out;
		}
	}
	opts.n_heads = cfg.heads;
	opts.threads = 1;
	opts_mt = opts;
	opts_mt.threads = cfg.threads;
	opts_q8 = opts;
	opts_q8.flags = KVMEM_ATTEND_INT8_SCORES;

	/* Interleaved, so that drift in the machine's load hits every one;
	 * each call after a flush, the warm-up round not kept. */
#define TIMED(times, call)                   \
	do {                                 \
		flush(fbuf, flush_len);      \
		t0 = bench_now_ns();         \
		call;                        \
		t0 = bench_now_ns() - t0;    \
		if (r)                       \
			(times)[r - 1] = t0; \
	} while (0)
	for (r = 0; r <= cfg.reps; r++) {
		TIMED(tk, kvmem_attend(seq, 0, q, out_kv, &opts, NULL));
		TIMED(tm, kvmem_attend(seq, 0, q, out_mt, &opts_mt, NULL));
		TIMED(tf, flat_attend(&f, &a, cfg.heads, q, out_fp, 0, kt, vt));
		if (!vq)
			TIMED(tn, flat_attend(&f, &a, cfg.heads, q, out_nq, 1,
					      kt, vt));
		TIMED(tq, kvmem_attend(seq, 0, q, out_q8, &opts_q8, NULL));
		if (!qc)
			continue;
		TIMED(tc, kvmem_attend_causal(seq, 0, qc, cfg.queries,
					      cfg.ctx - cfg.queries, out_c,
					      &opts, NULL));
		TIMED(tfc, flat_causal(&f, &ac, cfg.heads, cfg.queries, rows_c,
				       out_fc));
		TIMED(tcq, kvmem_attend_causal(seq, 0, qc, cfg.queries,
					       cfg.ctx - cfg.queries, out_cq8,
					       &opts_q8, NULL));
	}
#undef TIMED
	/* The blocked loop's output in the caller's order, where its
	 * queries were. */
	if (qc)
		kvmem__attn_rows_move(out_fc, rows_c, cfg.queries, cfg.heads, G,
				      cfg.dim, 0);
	for (i = 0; qc && i < (size_t)cfg.queries * cfg.heads * cfg.dim; i++) {
		double d = fabs((double)out_c[i] - rows_c[i]);

		diff_c = d > diff_c ? d : diff_c;
		d = fabs((double)out_cq8[i] - out_c[i]);
		diff_cq8 = d > diff_cq8 ? d : diff_cq8;
	}
	for (i = 0; i < (size_t)cfg.heads * cfg.dim; i++) {
		double d = fabs((double)out_kv[i] - out_fp[i]);
		double dn = fabs((double)out_kv[i] - out_nq[i]);

		diff = d > diff ? d : diff;
		diff_nq = !vq && dn > diff_nq ? dn : diff_nq;
		d = fabs((double)out_q8[i] - out_kv[i]);
		diff_q8 = d > diff_q8 ? d : diff_q8;
	}
	/* Threads change who computes, never the bits (kvmem.h). */
	same_mt = !memcmp(out_kv, out_mt,
			  (size_t)cfg.heads * cfg.dim * sizeof(float));
	kvmem_us = median_us(tk, cfg.reps);
	mt_us = median_us(tm, cfg.reps);
	fp32_us = median_us(tf, cfg.reps);
	noecc_us = vq ? 0.0 : median_us(tn, cfg.reps);
	q8_us = median_us(tq, cfg.reps);
	if (tc) {
		causal_us = median_us(tc, cfg.reps);
		fp32_causal_us = median_us(tfc, cfg.reps);
		causal_q8_us = median_us(tcq, cfg.reps);
	}
	kv_bytes = pages_bytes(seq) + codebook_bytes(seq);
	if (vq) {
		strcpy(noecc_j[0], "null");
		strcpy(noecc_j[1], "null");
		strcpy(noecc_j[2], "null");
	} else {
		snprintf(noecc_j[0], sizeof(noecc_j[0]), "%.1f", noecc_us);
		snprintf(noecc_j[1], sizeof(noecc_j[1]), "%.3f",
			 noecc_us / kvmem_us);
		snprintf(noecc_j[2], sizeof(noecc_j[2]), "%.3g", diff_nq);
	}
	fp_bytes = 2 * nvals * sizeof(float);
	bw1 = bench_read_gbps(fbuf, probe_len, 1, 3);
	bwn = bench_read_gbps(fbuf, probe_len, cfg.threads, 3);
	floor1_us = (double)kv_bytes / bw1 / 1e3;
	floorn_us = (double)kv_bytes / bwn / 1e3;

	if (cfg.json) {
		printf("{\"ctx\": %u, \"heads\": %u, \"kv_heads\": %u, "
		       "\"dim\": %u, \"format\": \"%s\", \"codec\": \"%s\", "
		       "\"rotation\": \"%s\", "
		       "\"impl\": \"%s\", \"threads\": %u, "
		       "\"flush_mib\": %u, \"kvmem_us\": %.1f, "
		       "\"kvmem_mt_us\": %.1f, \"fp32_us\": %.1f, "
		       "\"noecc_us\": %s, \"fp32_over_kvmem\": %.3f, "
		       "\"fp32_over_kvmem_mt\": %.3f, "
		       "\"noecc_over_kvmem\": %s, \"kvmem_bytes\": %zu, "
		       "\"fp32_bytes\": %zu, \"read_gbps\": %.2f, "
		       "\"read_gbps_mt\": %.2f, \"floor_us\": %.1f, "
		       "\"floor_mt_us\": %.1f, \"kvmem_of_floor\": %.3f, "
		       "\"kvmem_mt_of_floor\": %.3f, \"max_diff_fp32\": %.3g, "
		       "\"max_diff_noecc\": %s, \"mt_same_bits\": %s, "
		       "\"queries\": %u, \"causal_us\": %.1f, "
		       "\"causal_query_us\": %.1f, "
		       "\"fp32_over_causal_query\": %.3f, "
		       "\"fp32_causal_us\": %.1f, "
		       "\"fp32_causal_over_causal\": %.3f, "
		       "\"max_diff_causal_fp32\": %.3g, \"kvmem_q8_us\": %.1f, "
		       "\"fp32_over_kvmem_q8\": %.3f, "
		       "\"max_diff_q8_kvmem\": %.3g, \"causal_q8_us\": %.1f, "
		       "\"fp32_causal_over_causal_q8\": %.3f, "
		       "\"max_diff_causal_q8_kvmem\": %.3g, "
		       "\"vq_encode_s\": %.3f}\n",
		       cfg.ctx, cfg.heads, cfg.kv_heads, cfg.dim,
		       kvmem_format_get(cfg.format)->name,
		       kvmem_codec_get(cfg.codec)->name,
		       cfg.rotate ? "hadamard" : "none", kvmem_ecc_impl(),
		       cfg.threads, cfg.flush_mib, kvmem_us, mt_us, fp32_us,
		       noecc_j[0], fp32_us / kvmem_us, fp32_us / mt_us,
		       noecc_j[1], kv_bytes, fp_bytes, bw1, bwn, floor1_us,
		       floorn_us, floor1_us / kvmem_us, floorn_us / mt_us, diff,
		       noecc_j[2], same_mt ? "true" : "false", cfg.queries,
		       causal_us, causal_us / cfg.queries,
		       causal_us > 0 ? fp32_us * cfg.queries / causal_us : 0,
		       fp32_causal_us,
		       causal_us > 0 ? fp32_causal_us / causal_us : 0, diff_c,
		       q8_us, fp32_us / q8_us, diff_q8, causal_q8_us,
		       causal_q8_us > 0 ? fp32_causal_us / causal_q8_us : 0,
		       diff_cq8, vq_s);
	} else {
		printf("kvmem-bench attend: ctx %u, %u heads, %u KV heads, "
		       "dim %u, %s + %s%s, %u tokens/page, path %s,\n"
		       "median of %u calls, %u MiB read before each\n\n",
		       cfg.ctx, cfg.heads, cfg.kv_heads, cfg.dim,
		       kvmem_format_get(cfg.format)->name,
		       kvmem_codec_get(cfg.codec)->name,
		       cfg.rotate ? ", rotated" : "", cfg.page_tokens,
		       kvmem_ecc_impl(), cfg.reps, cfg.flush_mib);
		printf("%-34s %10s %10s %10s %9s\n", "", "us/call", "speed",
		       "MB read", "of floor");
		printf("%-34s %10.1f %9.2fx %10.2f\n",
		       "fp32, float K/V (baseline)", fp32_us, 1.0,
		       (double)fp_bytes / 1e6);
		if (vq)
			printf("%-34s %10s\n", "same format, no ECC", "n/a");
		else
			printf("%-34s %10.1f %9.2fx\n", "same format, no ECC",
			       noecc_us, fp32_us / noecc_us);
		printf("%-34s %10.1f %9.2fx %10.2f %8.0f%%\n",
		       "kvmem, decode-on-load, 1 thread", kvmem_us,
		       fp32_us / kvmem_us, (double)kv_bytes / 1e6,
		       100.0 * floor1_us / kvmem_us);
		printf("kvmem, %3u threads%16s %10.1f %9.2fx %10.2f %8.0f%%\n",
		       cfg.threads, "", mt_us, fp32_us / mt_us,
		       (double)kv_bytes / 1e6, 100.0 * floorn_us / mt_us);
		printf("%-34s %10.1f %9.2fx %10.2f %8.0f%%\n",
		       "kvmem, int8 scores, 1 thread", q8_us, fp32_us / q8_us,
		       (double)kv_bytes / 1e6, 100.0 * floor1_us / q8_us);
		if (qc) {
			printf("kvmem, %4u queries, per query%5s %10.1f "
			       "%9.2fx\n",
			       cfg.queries, "", causal_us / cfg.queries,
			       fp32_us * cfg.queries / causal_us);
			printf("\nprefill of %u queries, one thread: fp32 "
			       "blocked %.1f us, kvmem %.1f us (%.2fx), "
			       "int8 scores %.1f us (%.2fx)\n",
			       cfg.queries, fp32_causal_us, causal_us,
			       fp32_causal_us / causal_us, causal_q8_us,
			       fp32_causal_us / causal_q8_us);
		}
		if (vq)
			printf("\nvq2: codebooks learned and the pages "
			       "encoded in %.2f s (one thread)\n",
			       vq_s);
		printf("\nread bandwidth: %.1f GB/s on one core, %.1f GB/s on "
		       "%u; memory floor of kvmem: %.1f us, %.1f us\n",
		       bw1, bwn, cfg.threads, floor1_us, floorn_us);
		printf("max |kvmem - fp32| = %.3g (quantization), "
		       "max |kvmem - no ECC| = %.3g, "
		       "max |int8 scores - kvmem| = %.3g\n",
		       diff, diff_nq, diff_q8);
		if (qc)
			printf("prefill: max |kvmem - fp32| = %.3g, "
			       "max |int8 scores - kvmem| = %.3g\n",
			       diff_c, diff_cq8);
	}
	if (!same_mt)
		fprintf(stderr,
			"kvmem-bench: %u threads gave other bits than "
			"one\n",
			cfg.threads);
	ret = same_mt ? 0 : 1;
out:
	kvmem__attn_free(&a);
	kvmem__attn_free(&ac);
	flat_free(&f);
	kvmem_close(cache);
	free(K);
	free(V);
	free(q);
	free(out_kv);
	free(out_mt);
	free(out_fp);
	free(out_nq);
	free(out_q8);
	free(out_cq8);
	free(kt);
	free(vt);
	free(tk);
	free(tm);
	free(tf);
	free(tn);
	free(tq);
	free(tcq);
	free(tc);
	free(qc);
	free(out_c);
	free(rows_c);
	free(out_fc);
	free(tfc);
	free(fbuf);
	return ret;
}

const struct bench_cmd bench_attend = {
	.name = "attend",
	.summary = "decode-on-load attention next to FP32 and no-ECC loops",
	.run = run_attend,
};
