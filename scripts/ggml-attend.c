/* SPDX-License-Identifier: MIT */
/*
 * ggml-attend.c - llama.cpp's CPU attention over a quantized KV cache, on
 * kvmem-bench attend's shape, for the comparison in the README
 *
 * Built and run by scripts/ggml-compare.sh against a ggml source tree; not
 * part of the build. One decode step: a query of @heads heads over @ctx
 * tokens of K and V with @kv_heads heads of @dim channels, in ggml's q4_0,
 * q8_0 or f16 blocks, through ggml_flash_attn_ext() (the kernel llama.cpp
 * runs with -fa on the CPU) on @threads threads. Before each timed call it
 * reads --flush-mib MiB, as kvmem-bench attend does, so the cache is cold.
 * Prints one JSON object: the median time of the calls, the bytes of K
 * and V, and how far head 0's output is from a double-precision softmax
 * over the values ggml's blocks hold (so that the call measured is the
 * attention it should be).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml.h"
#include "ggml-cpu.h"

struct args {
	int ctx, heads, kv_heads, dim, threads, reps, flush_mib;
	enum ggml_type type;
	const char *type_name;
};

static void usage(void)
{
	fprintf(stderr,
		"usage: ggml-attend [--ctx N] [--heads H] [--kv-heads K] "
		"[--dim D]\n"
		"                   [--type q4_0|q8_0|f16] [--threads N] "
		"[--reps N] [--flush-mib M]\n");
	exit(2);
}

static int number(const char *s)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (*end || v < 0 || v > 1 << 24)
		usage();
	return (int)v;
}

static void parse(int argc, char **argv, struct args *a)
{
	int i;

	*a = (struct args){ .ctx = 4096,
			    .heads = 32,
			    .kv_heads = 8,
			    .dim = 128,
			    .threads = 1,
			    .reps = 20,
			    .flush_mib = 128,
			    .type = GGML_TYPE_Q4_0,
			    .type_name = "q4_0" };
	for (i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--ctx"))
			a->ctx = number(argv[i + 1]);
		else if (!strcmp(argv[i], "--heads"))
			a->heads = number(argv[i + 1]);
		else if (!strcmp(argv[i], "--kv-heads"))
			a->kv_heads = number(argv[i + 1]);
		else if (!strcmp(argv[i], "--dim"))
			a->dim = number(argv[i + 1]);
		else if (!strcmp(argv[i], "--threads"))
			a->threads = number(argv[i + 1]);
		else if (!strcmp(argv[i], "--reps"))
			a->reps = number(argv[i + 1]);
		else if (!strcmp(argv[i], "--flush-mib"))
			a->flush_mib = number(argv[i + 1]);
		else if (!strcmp(argv[i], "--type")) {
			a->type_name = argv[i + 1];
			if (!strcmp(argv[i + 1], "q4_0"))
				a->type = GGML_TYPE_Q4_0;
			else if (!strcmp(argv[i + 1], "q8_0"))
				a->type = GGML_TYPE_Q8_0;
			else if (!strcmp(argv[i + 1], "f16"))
				a->type = GGML_TYPE_F16;
			else
				usage();
		} else
			usage();
	}
	if (i != argc || !a->ctx || !a->kv_heads || !a->dim || !a->reps ||
	    !a->threads || a->heads % a->kv_heads || a->dim % 32)
		usage();
}

/* Uniform in [-1, 1): xorshift64*, fixed seed. */
static float unit(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return (float)((*s * 2685821657736338717ull) >> 11) * 0x1p-52f - 1.0f;
}

/* @t, [dim, ctx, kv_heads] of a->type, from random floats. */
static void fill(struct ggml_tensor *t, const struct args *a, uint64_t *s)
{
	const int64_t rows = (int64_t)a->ctx * a->kv_heads;
	float *x = malloc((size_t)rows * a->dim * sizeof(float));
	int64_t i;

	if (!x) {
		perror("ggml-attend");
		exit(1);
	}
	for (i = 0; i < rows * a->dim; i++)
		x[i] = unit(s);
	if (a->type == GGML_TYPE_F16)
		ggml_fp32_to_fp16_row(x, t->data, rows * a->dim);
	else
		ggml_quantize_chunk(a->type, x, t->data, 0, rows, a->dim, NULL);
	free(x);
}

/* Row @r of @t, [dim, rows], as floats. */
static void row(const struct ggml_tensor *t, int64_t r, float *x)
{
	ggml_get_type_traits(t->type)->to_float(
		(const char *)t->data + r * t->nb[1], x, t->ne[0]);
}

/* Head 0 of @out against attention over kv head 0, in double. */
static double head0_error(const struct ggml_tensor *q,
			  const struct ggml_tensor *k,
			  const struct ggml_tensor *v,
			  const struct ggml_tensor *out, const struct args *a)
{
	double *s = malloc(a->ctx * sizeof(*s)),
	       *o = calloc(a->dim, sizeof(*o));
	float *x = malloc(a->dim * sizeof(*x));
	const float *qh = q->data, *got = out->data;
	double m = -INFINITY, l = 0, err = 0;
	int t, d;

	if (!s || !o || !x) {
		perror("ggml-attend");
		exit(1);
	}
	for (t = 0; t < a->ctx; t++) {
		row(k, t, x);
		s[t] = 0;
		for (d = 0; d < a->dim; d++)
			s[t] += (double)qh[d] * x[d];
		s[t] /= sqrt(a->dim);
		m = s[t] > m ? s[t] : m;
	}
	for (t = 0; t < a->ctx; t++) {
		double w = exp(s[t] - m);

		row(v, t, x);
		l += w;
		for (d = 0; d < a->dim; d++)
			o[d] += w * x[d];
	}
	for (d = 0; d < a->dim; d++)
		err = fmax(err, fabs(o[d] / l - got[d]));
	free(s);
	free(o);
	free(x);
	return err;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return (a > b) - (a < b);
}

int main(int argc, char **argv)
{
	struct ggml_init_params ip = { 0 };
	struct ggml_tensor *q, *k, *v, *out;
	struct ggml_context *ctx;
	struct ggml_cgraph *gf;
	volatile uint64_t sink = 0;
	uint64_t seed = 0x9e3779b97f4a7c15ull, *flush = NULL;
	size_t nflush, j;
	double *t;
	struct args a;
	int i;

	parse(argc, argv, &a);
	ip.mem_size = 2 * ((size_t)a.ctx * a.kv_heads * a.dim * 4) +
		      ((size_t)a.heads * a.dim * 16) + (64u << 20);
	ctx = ggml_init(ip);
	t = calloc(a.reps, sizeof(*t));
	nflush = ((size_t)a.flush_mib << 20) / sizeof(*flush);
	if (nflush)
		flush = calloc(nflush, sizeof(*flush));
	if (!ctx || !t || (nflush && !flush)) {
		fprintf(stderr, "ggml-attend: out of memory\n");
		return 1;
	}
	q = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, a.dim, 1, a.heads, 1);
	k = ggml_new_tensor_4d(ctx, a.type, a.dim, a.ctx, a.kv_heads, 1);
	v = ggml_new_tensor_4d(ctx, a.type, a.dim, a.ctx, a.kv_heads, 1);
	for (i = 0; i < a.heads * a.dim; i++)
		((float *)q->data)[i] = unit(&seed);
	fill(k, &a, &seed);
	fill(v, &a, &seed);
	out = ggml_flash_attn_ext(ctx, q, k, v, NULL, 1.0f / sqrtf(a.dim), 0.0f,
				  0.0f);
	gf = ggml_new_graph(ctx);
	ggml_build_forward_expand(gf, out);
	/* One call first: ggml sets its tables up on the first. */
	if (ggml_graph_compute_with_ctx(ctx, gf, a.threads) !=
	    GGML_STATUS_SUCCESS) {
		fprintf(stderr, "ggml-attend: ggml_graph_compute failed\n");
		return 1;
	}
	for (i = 0; i < a.reps; i++) {
		double t0;

		for (j = 0; j < nflush; j++)
			sink += flush[j];
		t0 = now();
		ggml_graph_compute_with_ctx(ctx, gf, a.threads);
		t[i] = now() - t0;
	}
	qsort(t, a.reps, sizeof(*t), cmp);
	printf("{\"type\":\"%s\",\"ctx\":%d,\"heads\":%d,\"kv_heads\":%d,"
	       "\"dim\":%d,\"threads\":%d,\"reps\":%d,\"flush_mib\":%d,"
	       "\"us_per_call\":%.1f,\"kv_bytes\":%zu,"
	       "\"head0_max_error\":%.3g}\n",
	       a.type_name, a.ctx, a.heads, a.kv_heads, a.dim, a.threads,
	       a.reps, a.flush_mib, t[a.reps / 2] * 1e6,
	       ggml_nbytes(k) + ggml_nbytes(v), head0_error(q, k, v, out, &a));
	free(t);
	free(flush);
	ggml_free(ctx);
	return 0;
}
