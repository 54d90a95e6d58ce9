/* SPDX-License-Identifier: MIT */
/*
 * embedded-attention.c - a KV cache inside the process, and attention that
 * decodes it on the fly
 *
 * No daemon: kvmem_open_embedded() puts the pages in an arena of this
 * process. The program appends K and V for 90 tokens of a small model
 * (synthetic values, the same on every run), flips one bit of a sealed page
 * as a memory fault would, and runs kvmem_attend() for one query token. It
 * then computes the same attention the plain way, in floats, twice:
 *
 *   - over the values kvmem_seq_read() decodes: kvmem_attend() must agree
 *     to float rounding, since it decodes exactly those values;
 *   - over the original values: the difference is what 4-bit quantization
 *     costs, and it must stay under the bound that kvmem/quant.h's rule
 *     (every value read back within half its group's scale) gives.
 *
 * Build (examples/README.md): cc -o embedded-attention embedded-attention.c
 * $(pkg-config --cflags --libs kvmem) -lm
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvmem/kvmem.h>

#define LAYERS 2
#define KV_HEADS 2
#define HEAD_DIM 64
#define N_HEADS 8 /* query heads: 4 share each KV head */
#define NTOK 90 /* the sink, two sealed pages, a tail of 22 */
#define ROW (KV_HEADS * HEAD_DIM) /* floats of one token of one layer */

/* How far float attention may drift from kvmem's in summation order. */
#define ROUNDING 1e-5

/*
 * A deterministic stand-in for a model's K, V and query values: uniform in
 * [-1, 1) from a xorshift generator, so every run appends the same cache.
 */
static float synth(uint32_t *state)
{
	uint32_t x = *state;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	*state = x;
	return (float)(x >> 8) / (float)(1u << 23) - 1.0f;
}

/*
 * Attention of one query token over @ntok tokens of one layer, as a model
 * written without kvmem computes it: scores, softmax, weighted sum of V.
 * Query head h reads KV head h / (N_HEADS / KV_HEADS).
 */
static void float_attention(const float *q, const float *k, const float *v,
			    unsigned int ntok, float *out)
{
	const float scale = 1.0f / sqrtf(HEAD_DIM);
	float score[NTOK];
	unsigned int h, t, d;

	for (h = 0; h < N_HEADS; h++) {
		unsigned int kvh = h / (N_HEADS / KV_HEADS);
		const float *qh = q + h * HEAD_DIM;
		float max = -INFINITY, sum = 0;

		for (t = 0; t < ntok; t++) {
			const float *kt = k + t * ROW + kvh * HEAD_DIM;
			float dot = 0;

			for (d = 0; d < HEAD_DIM; d++)
				dot += qh[d] * kt[d];
			score[t] = dot * scale;
			max = fmaxf(max, score[t]);
		}
		for (t = 0; t < ntok; t++) {
			score[t] = expf(score[t] - max);
			sum += score[t];
		}
		for (d = 0; d < HEAD_DIM; d++) {
			float acc = 0;

			for (t = 0; t < ntok; t++)
				acc += score[t] *
				       v[t * ROW + kvh * HEAD_DIM + d];
			out[h * HEAD_DIM + d] = acc / sum;
		}
	}
}

static float max_diff(const float *a, const float *b, size_t n)
{
	float m = 0;
	size_t i;

	for (i = 0; i < n; i++)
		m = fmaxf(m, fabsf(a[i] - b[i]));
	return m;
}

/*
 * The most a value of @x (one row of a head) can move through int4
 * quantization, group by group: kvmem/quant.h stores a group with the
 * smallest FP16 scale s >= amax / qmax and reads every value back within
 * s / 2. FP16 rounds up by less than one part in 2^10, hence the factor.
 * @err receives one bound per group.
 */
static void quant_error(const float *x, unsigned int group, int qmax,
			float *err)
{
	unsigned int g, d;

	for (g = 0; g < HEAD_DIM / group; g++) {
		float amax = 0;

		for (d = 0; d < group; d++)
			amax = fmaxf(amax, fabsf(x[g * group + d]));
		err[g] = amax / (float)qmax * (1.0f + 1.0f / 1024) / 2;
	}
}

/*
 * An upper bound on |attention over the cache - attention over @k, @v|
 * when every cached value is within quant_error() of its original. A score
 * moves by at most delta = scale * sum_d |q_d| * err(k_d), which moves each
 * softmax weight by a factor within e^(+-2 delta); so the output moves by
 * at most (e^(2 delta) - 1) * max |v| plus the largest error of a V value.
 */
static float attention_bound(const struct kvmem_geometry *g, const float *q,
			     const float *k, const float *v, unsigned int ntok)
{
	const struct kvmem_format_info *f = kvmem_format_get(g->format);
	const float scale = 1.0f / sqrtf(HEAD_DIM);
	float err[HEAD_DIM], bound = 0;
	unsigned int h, t, d;

	for (h = 0; h < N_HEADS; h++) {
		unsigned int kvh = h / (N_HEADS / KV_HEADS);
		float delta = 0, vmax = 0, verr = 0;

		for (t = 0; t < ntok; t++) {
			const float *kt = k + t * ROW + kvh * HEAD_DIM;
			const float *vt = v + t * ROW + kvh * HEAD_DIM;
			float move = 0;

			quant_error(kt, g->group_size, f->qmax, err);
			for (d = 0; d < HEAD_DIM; d++)
				move += fabsf(q[h * HEAD_DIM + d]) *
					err[d / g->group_size];
			delta = fmaxf(delta, scale * move);
			quant_error(vt, g->group_size, f->qmax, err);
			for (d = 0; d < HEAD_DIM; d++) {
				vmax = fmaxf(vmax,
					     fabsf(vt[d]) +
						     err[d / g->group_size]);
				verr = fmaxf(verr, err[d / g->group_size]);
			}
		}
		bound = fmaxf(bound, expm1f(2 * delta) * vmax + verr);
	}
	return bound;
}

/*
 * Print what layer 0's pages are: the sink and the tail hold FP16 values,
 * the pages between were quantized and encoded when they filled up.
 */
static void show_pages(struct kvmem_seq *s)
{
	struct kvmem_page_desc pd[8];
	int i, n = kvmem_seq_pages(s, 0, pd, 8);

	printf("layer 0 holds %d pages:", n);
	for (i = 0; i < n && i < 8; i++) {
		printf(" [%u..%u %s", pd[i].token_start,
		       pd[i].token_start + pd[i].ntokens - 1,
		       kvmem_format_get(pd[i].format)->name);
		if (!pd[i].hot)
			printf("+%s]", kvmem_codec_get(pd[i].codec)->name);
		else
			printf(" %s]", pd[i].token_start ? "tail" : "sink");
	}
	printf("\n");
}

/*
 * Flip one bit in the K payload of layer 0's first sealed page, where a
 * failing DIMM or a cosmic ray would. kvmem_seq_pages() hands out the
 * pages' bytes for exactly this kind of test; real code never writes them.
 * Return: 0, or -1 when the layer has no sealed page.
 */
static int flip_a_bit(struct kvmem_seq *s, const struct kvmem_geometry *g)
{
	struct kvmem_page_layout l;
	struct kvmem_page_desc pd[8];
	int i, n = kvmem_seq_pages(s, 0, pd, 8);

	if (kvmem_page_layout(g, 0, &l))
		return -1;
	for (i = 0; i < n && i < 8; i++) {
		if (!pd[i].sealed || pd[i].hot)
			continue;
		((unsigned char *)pd[i].data)[l.k_off + 5] ^= 1u << 3;
		printf("flipped bit 3 of byte 5 of the K payload of the page "
		       "of tokens %u..%u\n",
		       pd[i].token_start,
		       pd[i].token_start + pd[i].ntokens - 1);
		return 0;
	}
	return -1;
}

int main(void)
{
	static float k[NTOK * LAYERS * ROW], v[NTOK * LAYERS * ROW];
	static float dk[NTOK * ROW], dv[NTOK * ROW], k0[NTOK * ROW],
		v0[NTOK * ROW];
	float q[N_HEADS * HEAD_DIM], out[N_HEADS * HEAD_DIM];
	float ref[N_HEADS * HEAD_DIM];
	struct kvmem_geometry g = { 0 };
	struct kvmem_attend_opts opts = { 0 };
	struct kvmem_attend_stats st;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	float diff_dec, diff_orig, bound;
	uint32_t rng = 2463534242u;
	const char *what;
	unsigned int i, t;
	int ret, status = 1;

	/* Sizes of the model; the rest (int4 values, h84 code, pages of 32
	 * tokens, 4 sink tokens) from kvmem_geometry_default(). */
	g.layers = LAYERS;
	g.kv_heads = KV_HEADS;
	g.head_dim = HEAD_DIM;
	kvmem_geometry_default(&g);
	printf("geometry: %u layers, %u KV heads of %u, %s + %s, %u tokens a "
	       "page, %u sink tokens\n",
	       g.layers, g.kv_heads, g.head_dim,
	       kvmem_format_get(g.format)->name, kvmem_codec_get(g.codec)->name,
	       g.tokens_per_page, g.sink_tokens);

	ret = kvmem_open_embedded(&g, 16 << 20, &c);
	if (ret) {
		fprintf(stderr, "kvmem_open_embedded: %s\n",
			kvmem_strerror(ret));
		return 1;
	}
	what = "kvmem_seq_create";
	ret = kvmem_seq_create(c, &s);
	if (ret)
		goto err_cache;

	/* All layers of all tokens in one call; a model would rather append
	 * each layer as its forward pass reaches it (kvmem_seq_append()). */
	for (i = 0; i < NTOK * LAYERS * ROW; i++) {
		k[i] = synth(&rng);
		v[i] = synth(&rng);
	}
	for (i = 0; i < N_HEADS * HEAD_DIM; i++)
		q[i] = synth(&rng);
	what = "kvmem_seq_append_all";
	ret = kvmem_seq_append_all(s, k, v, NTOK);
	if (ret)
		goto err_seq;
	printf("appended %u tokens\n", kvmem_seq_len(s, 0));
	show_pages(s);

	if (flip_a_bit(s, &g)) {
		fprintf(stderr, "no sealed page to flip a bit in\n");
		goto err_seq;
	}

	opts.n_heads = N_HEADS;
	opts.erasure = KVMEM_ERASE_INTERPOLATE;
	opts.threads = 1;
	what = "kvmem_attend";
	ret = kvmem_attend(s, 0, q, out, &opts, &st);
	if (ret)
		goto err_seq;
	printf("codes found: %llu words clean, %llu corrected, "
	       "%llu uncorrectable, %llu values erased\n",
	       (unsigned long long)st.words_clean,
	       (unsigned long long)st.words_corrected,
	       (unsigned long long)st.words_uncorrectable,
	       (unsigned long long)st.values_erased);

	/* The values kvmem_attend() saw, decoded the same way. */
	what = "kvmem_seq_read";
	ret = kvmem_seq_read(s, 0, 0, NTOK, KVMEM_ERASE_INTERPOLATE, dk, dv,
			     NULL);
	if (ret)
		goto err_seq;
	float_attention(q, dk, dv, NTOK, ref);
	diff_dec = max_diff(out, ref, N_HEADS * HEAD_DIM);
	printf("max difference vs float attention over decoded values: "
	       "%.3g (bound %.3g: float rounding)\n",
	       diff_dec, ROUNDING);

	/* Layer 0 of the original values: the first ROW floats of each
	 * token's [layer][kv_head][head_dim] block. */
	for (t = 0; t < NTOK; t++) {
		memcpy(k0 + t * ROW, k + t * LAYERS * ROW, sizeof(float) * ROW);
		memcpy(v0 + t * ROW, v + t * LAYERS * ROW, sizeof(float) * ROW);
	}
	float_attention(q, k0, v0, NTOK, ref);
	diff_orig = max_diff(out, ref, N_HEADS * HEAD_DIM);
	bound = attention_bound(&g, q, k0, v0, NTOK) + ROUNDING;
	printf("max difference vs float attention over original values: "
	       "%.3g (bound %.3g: %s quantization)\n",
	       diff_orig, bound, kvmem_format_get(g.format)->name);

	if (diff_dec <= ROUNDING && diff_orig <= bound)
		status = 0;
	else
		fprintf(stderr, "attention is further off than it may be\n");
err_seq:
	kvmem_seq_free(s);
err_cache:
	if (ret)
		fprintf(stderr, "%s: %s\n", what, kvmem_strerror(ret));
	kvmem_close(c);
	return status;
}
