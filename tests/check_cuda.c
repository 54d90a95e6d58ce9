/*
 * check_cuda.c - the GPU kernels, run on the CPU, against the CPU library
 *
 * kvmem__cuda_simt() runs the unchanged kernels of kernels/ on host threads
 * (tests/simt) behind the same front end as the driver, so the launch
 * shapes, parameter blocks and kernel logic are all tested here: encode
 * must write the bytes kvmem_page_encode() writes, attention must give
 * kvmem_attend()'s result and counts, scrub kvmem_page_scrub()'s. The
 * loader's failures are tested with the libraries a machine without a GPU
 * has. What needs a real GPU is the last test, which skips without one.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvmem/cuda.h"
#include "kvmem/kvmem.h"
#include "kvmem_check.h"
#include "quant_word.h"
#include "rng.h"

struct kvmem_cuda *kvmem__cuda_simt(unsigned int sms, unsigned int smem);

#define SIMT_SMEM (227 * 1024)

static const char *const codecs[] = { "h74", "h84", "golay24", "secded72" };

static void geometry(struct kvmem_geometry *g, int fmt, int codec, int chan,
		     uint32_t kvh, uint32_t dim)
{
	memset(g, 0, sizeof(*g));
	kvmem_geometry_default(g);
	g->layers = 1;
	g->kv_heads = kvh;
	g->head_dim = dim;
	g->tokens_per_page = 16;
	g->group_size = 32 < dim ? 32 : dim;
	g->sink_tokens = 4;
	g->format = (uint8_t)fmt;
	g->codec = (uint8_t)codec;
	g->key_scales = (uint8_t)chan;
}

static void fill(struct kvmem_rng *r, float *x, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		x[i] = kvmem_check_rnd_value(r, 2.0);
}

/* ---- loading ---------------------------------------------------------- */

static int open_with(const char *lib, struct kvmem_cuda **cu)
{
	int ret;

	setenv("KVMEM_LIBCUDA", lib, 1);
	ret = kvmem_cuda_open(0, cu);
	unsetenv("KVMEM_LIBCUDA");
	return ret;
}

START_TEST(test_cuda_open_without_driver)
{
	struct kvmem_cuda *cu = (struct kvmem_cuda *)1;
	int ret = open_with("/nonexistent/libcuda.so.1", &cu);

	/* Built without nvcc there are no kernels to load: said first. */
	if (ret == -EOPNOTSUPP) {
		EXPECT(strstr(kvmem_cuda_error(), "without nvcc"), "%s",
		       kvmem_cuda_error());
		return;
	}
	EXPECT_EQ(ret, -ENODEV, "%s", kvmem_cuda_error());
	EXPECT(cu == NULL, "%p", (void *)cu);
	EXPECT(strstr(kvmem_cuda_error(), "no NVIDIA driver"), "%s",
	       kvmem_cuda_error());
	EXPECT(strstr(kvmem_cuda_error(), "/nonexistent/libcuda.so.1"), "%s",
	       kvmem_cuda_error());
	/* Not a driver at all: a library without cuGetProcAddress. */
	ret = open_with("libm.so.6", &cu);
	EXPECT_EQ(ret, -ENODEV, "%s", kvmem_cuda_error());
	EXPECT(strstr(kvmem_cuda_error(), "not an NVIDIA driver"), "%s",
	       kvmem_cuda_error());
	EXPECT_EQ(kvmem_cuda_open(0, NULL), -EINVAL, "%s", "NULL out");
}
END_TEST

START_TEST(test_cuda_open_stub_library)
{
	static const char *const stubs[] = {
		"/usr/local/cuda/lib64/stubs/libcuda.so",
		"/usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so",
	};
	struct kvmem_cuda *cu = NULL;
	const char *stub = NULL;
	size_t i;
	int ret;

	for (i = 0; i < sizeof(stubs) / sizeof(stubs[0]) && !stub; i++)
		if (!access(stubs[i], R_OK))
			stub = stubs[i];
	if (!stub) {
		fprintf(stderr, "SKIP: cuda stub: no CUDA toolkit stub "
				"library here\n");
		return;
	}
	ret = open_with(stub, &cu);
	if (ret == -EOPNOTSUPP && strstr(kvmem_cuda_error(), "without nvcc")) {
		fprintf(stderr, "SKIP: cuda stub: built without nvcc\n");
		return;
	}
	EXPECT_EQ(ret, -ENODEV, "%s", kvmem_cuda_error());
	EXPECT(cu == NULL, "%p", (void *)cu);
	EXPECT(strstr(kvmem_cuda_error(), "stub library"), "%s",
	       kvmem_cuda_error());
}
END_TEST

/* ---- encode ----------------------------------------------------------- */

/* One page through both encoders, compared byte for byte. */
static void encode_case(struct kvmem_cuda *cu, const struct kvmem_geometry *g,
			int hot, uint32_t flags, uint32_t ntok, uint32_t dtype,
			struct kvmem_rng *r)
{
	const size_t tok = (size_t)g->kv_heads * g->head_dim;
	struct kvmem_cuda_encode_job job;
	struct kvmem_page_layout l;
	struct kvmem_page_hdr hdr;
	float *k = kvmem_check_xmalloc(ntok * tok * 4);
	float *v = kvmem_check_xmalloc(ntok * tok * 4);
	uint16_t *k16 = kvmem_check_xmalloc(ntok * tok * 2);
	uint16_t *v16 = kvmem_check_xmalloc(ntok * tok * 2);
	uint8_t *exp, *got;
	size_t i;

	ck_assert_int_eq(kvmem_page_layout(g, hot, &l), 0);
	exp = kvmem_check_xmalloc(l.size);
	got = kvmem_check_xmalloc(l.size);
	fill(r, k, ntok * tok);
	fill(r, v, ntok * tok);
	/* Values the quantizer must handle: a non-finite, a zero group. */
	k[1] = INFINITY;
	v[2] = NAN;
	for (i = 0; i < g->group_size && i < tok; i++)
		v[tok * (ntok - 1) + i] = 0.0f;
	for (i = 0; i < ntok * tok; i++) {
		k16[i] = kvmem_f2h(k[i]);
		v16[i] = kvmem_f2h(v[i]);
		if (dtype == KVMEM_CUDA_F16) {
			k[i] = kvmem_h2f(k16[i]);
			v[i] = kvmem_h2f(v16[i]);
		}
	}
	memset(&hdr, 0, sizeof(hdr));
	hdr.seq = 77;
	hdr.layer = 0;
	hdr.token_start = 4;
	hdr.ntokens = ntok;
	hdr.flags = flags;
	hdr.generation = 9;
	ck_assert_int_eq(kvmem_page_encode(exp, g, &hdr, hot, k, v), 0);

	memset(got, 0xa5, l.size);
	memset(&job, 0, sizeof(job));
	job.page = (uintptr_t)got;
	job.k = (uintptr_t)(dtype == KVMEM_CUDA_F16 ? (void *)k16 : (void *)k);
	job.v = (uintptr_t)(dtype == KVMEM_CUDA_F16 ? (void *)v16 : (void *)v);
	job.seq = 77;
	job.generation = 9;
	job.token_start = 4;
	job.n = ntok;
	job.flags = flags | (hot ? KVMEM_HDR_HOT : 0);
	EXPECT_EQ(kvmem_cuda_encode(cu, g, dtype, (uintptr_t)&job, 1, NULL), 0,
		  "%s", kvmem_cuda_error());
	EXPECT_MEM(got + 72, exp + 72, l.size - 72,
		   "fmt %u codec %s chan %u hot %d ntok %u dtype %u", g->format,
		   codecs[g->codec], g->key_scales, hot, ntok, dtype);
	EXPECT_MEM(got, exp, 72, "header: fmt %u codec %s hot %d flags %u",
		   g->format, codecs[g->codec], hot, flags);

	/* Appending to an FP16 page row by row gives the same page. */
	if (hot && ntok > 1) {
		memset(got, 0xa5, l.size);
		job.n = 1;
		job.flags = KVMEM_HDR_HOT;
		EXPECT_EQ(kvmem_cuda_encode(cu, g, dtype, (uintptr_t)&job, 1,
					    NULL),
			  0, "%s", kvmem_cuda_error());
		for (i = 1; i < ntok; i++) {
			job.t0 = (uint32_t)i;
			job.k = (uintptr_t)(dtype == KVMEM_CUDA_F16
						    ? (void *)(k16 + i * tok)
						    : (void *)(k + i * tok));
			job.v = (uintptr_t)(dtype == KVMEM_CUDA_F16
						    ? (void *)(v16 + i * tok)
						    : (void *)(v + i * tok));
			EXPECT_EQ(kvmem_cuda_encode(cu, g, dtype,
						    (uintptr_t)&job, 1, NULL),
				  0, "%s", kvmem_cuda_error());
		}
		hdr.flags = 0;
		ck_assert_int_eq(kvmem_page_encode(exp, g, &hdr, 1, k, v), 0);
		EXPECT_MEM(got, exp, l.size, "appended page ntok %u dtype %u",
			   ntok, dtype);
	}
	free(k);
	free(v);
	free(k16);
	free(v16);
	free(exp);
	free(got);
}

START_TEST(test_cuda_encode_matches_cpu)
{
	struct kvmem_cuda *cu = kvmem__cuda_simt(1, SIMT_SMEM);
	struct kvmem_geometry g;
	struct kvmem_rng r;
	int fmt, codec, chan;

	ck_assert_ptr_nonnull(cu);
	kvmem_rng_seed(&r, 14);
	for (fmt = 0; fmt < KVMEM_FMT_NR; fmt++)
		for (codec = 0; codec < KVMEM_CODEC_NR; codec++)
			for (chan = 0; chan < (fmt ? 2 : 1); chan++) {
				geometry(&g, fmt, codec, chan, 2, 64);
				encode_case(cu, &g, 0, KVMEM_HDR_SEALED, 16,
					    KVMEM_CUDA_F32, &r);
				encode_case(cu, &g, 0, KVMEM_HDR_SEALED, 16,
					    KVMEM_CUDA_F16, &r);
			}
	geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 3, 96);
	encode_case(cu, &g, 1, 0, 5, KVMEM_CUDA_F32, &r);
	encode_case(cu, &g, 1, 0, 3, KVMEM_CUDA_F16, &r);
	encode_case(cu, &g, 1, KVMEM_HDR_SEALED, 16, KVMEM_CUDA_F32, &r);
	kvmem_cuda_close(cu);
}
END_TEST

/* Jobs that do not fit their page must leave it alone, not overrun it. */
START_TEST(test_cuda_encode_refuses_misfit_jobs)
{
	struct kvmem_cuda *cu = kvmem__cuda_simt(1, SIMT_SMEM);
	struct kvmem_cuda_encode_job job[4];
	struct kvmem_page_layout l;
	struct kvmem_geometry g;
	struct kvmem_rng r;
	uint8_t *pages, *exp;
	float *k;
	size_t tok, i;

	ck_assert_ptr_nonnull(cu);
	kvmem_rng_seed(&r, 3);
	geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 2, 64);
	ck_assert_int_eq(kvmem_page_layout(&g, 0, &l), 0);
	tok = (size_t)g.kv_heads * g.head_dim;
	k = kvmem_check_xmalloc((g.tokens_per_page + 1) * tok * 4);
	fill(&r, k, (g.tokens_per_page + 1) * tok);
	/* Each page sits in a buffer of two, so an overrun stays in it. */
	pages = kvmem_check_xmalloc(4 * 2 * l.size);
	exp = kvmem_check_xmalloc(4 * 2 * l.size);
	memset(pages, 0x5a, 4 * 2 * l.size);
	memcpy(exp, pages, 4 * 2 * l.size);
	memset(job, 0, sizeof(job));
	for (i = 0; i < 4; i++) {
		job[i].page = (uintptr_t)(pages + i * 2 * l.size);
		job[i].k = job[i].v = (uintptr_t)k;
		job[i].n = g.tokens_per_page;
		job[i].flags = KVMEM_HDR_SEALED;
	}
	job[0].n = g.tokens_per_page + 1; /* more rows than the page has */
	job[1].n = 0;
	job[2].t0 = 1; /* a sealed page is written whole */
	job[2].n = 1;
	job[3].flags = KVMEM_HDR_HOT; /* t0 + n wraps past the page */
	job[3].t0 = UINT32_MAX;
	job[3].n = 2;
	EXPECT_EQ(kvmem_cuda_encode(cu, &g, KVMEM_CUDA_F32, (uintptr_t)job, 4,
				    NULL),
		  0, "%s", kvmem_cuda_error());
	EXPECT_MEM(pages, exp, 4 * 2 * l.size, "%s", "misfit jobs wrote");
	free(k);
	free(pages);
	free(exp);
	kvmem_cuda_close(cu);
}
END_TEST

/* ---- attention -------------------------------------------------------- */

struct table {
	struct kvmem_cuda_page *pages;
	uint32_t seq_pages[2];
	uint32_t npages;
};

static void table_of(struct kvmem_seq *s, struct table *t)
{
	struct kvmem_page_desc d[256];
	int i, n = kvmem_seq_pages(s, 0, d, 256);

	ck_assert_int_gt(n, 0);
	ck_assert_int_le(n, 256);
	t->pages = kvmem_check_xmalloc((size_t)n * sizeof(*t->pages));
	for (i = 0; i < n; i++) {
		t->pages[i].addr = (uintptr_t)d[i].data;
		t->pages[i].token_start = d[i].token_start;
		t->pages[i].ntokens = d[i].ntokens;
		t->pages[i].flags = d[i].hot ? KVMEM_HDR_HOT : 0;
		t->pages[i].resv = 0;
	}
	t->npages = (uint32_t)n;
	t->seq_pages[0] = 0;
	t->seq_pages[1] = (uint32_t)n;
}

/*
 * Flip bits in the sealed pages of @s: single errors everywhere the codes
 * correct, and double errors in h84/secded72 (and 4 bits in golay24 words)
 * that they only detect, so values are lost and rebuilt.
 */
static void damage(struct kvmem_seq *s, const struct kvmem_geometry *g)
{
	struct kvmem_page_desc d[256];
	struct kvmem_page_layout l;
	int i, n = kvmem_seq_pages(s, 0, d, 256);
	unsigned int wb;

	kvmem_page_layout(g, 0, &l);
	wb = kvmem_codec_get(g->codec)->word_bytes;
	for (i = 0; i < n; i++) {
		uint8_t *p = d[i].data;

		if (d[i].hot)
			continue;
		p[l.k_off + 3 * wb] ^= 0x01; /* corrected */
		p[l.v_off + 5 * l.row_bytes] ^= 0x02;
		p[l.scales_off + 9] ^= 0x10; /* a scale word: corrected */
		if (g->codec == KVMEM_CODEC_H74)
			continue;
		/* Lost: word 1 of row 0 of K, the last row of V, row 2's
		 * first word of K of the last head. */
		p[l.k_off + wb] ^= 0x03;
		p[l.v_off + (g->tokens_per_page - 1) * l.row_bytes] ^= 0x06;
		p[l.k_off +
		  ((g->kv_heads - 1) * g->tokens_per_page + 2) * l.row_bytes] ^=
			g->codec == KVMEM_CODEC_GOLAY24 ? 0x0f : 0x03;
	}
}

/* kvmem_attend() and the kernels on one sequence of @len tokens. */
static void attend_case(struct kvmem_cuda *cu, const struct kvmem_geometry *g,
			uint32_t G, uint32_t len, int hurt, uint32_t policy,
			uint32_t splits, struct kvmem_rng *r)
{
	const uint32_t D = g->head_dim, nh = g->kv_heads * G;
	const size_t tok = (size_t)g->kv_heads * D;
	struct kvmem_attend_opts o = { .n_heads = nh,
				       .erasure = policy,
				       .importance_alpha = 1.0f };
	struct kvmem_cuda_attend_args a;
	struct kvmem_attend_stats st, gst;
	struct kvmem_page_desc d[256];
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	struct table t;
	float *k = kvmem_check_xmalloc(len * tok * 4);
	float *v = kvmem_check_xmalloc(len * tok * 4);
	float *q = kvmem_check_xmalloc((size_t)nh * D * 4);
	float *exp = kvmem_check_xmalloc((size_t)nh * D * 4);
	float *got = kvmem_check_xmalloc((size_t)nh * D * 4);
	float *mass;
	void *ws;
	size_t wsb, i;
	int np;

	ck_assert_int_eq(kvmem_open_embedded(g, 64 << 20, &c), 0);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	fill(r, k, len * tok);
	fill(r, v, len * tok);
	fill(r, q, (size_t)nh * D);
	ck_assert_int_eq(kvmem_seq_append(s, 0, k, v, len), 0);
	if (hurt)
		damage(s, g);
	table_of(s, &t);

	memset(&a, 0, sizeof(a));
	a.pages = (uintptr_t)t.pages;
	a.seq_pages = (uintptr_t)t.seq_pages;
	a.q = (uintptr_t)q;
	a.out = (uintptr_t)got;
	mass = kvmem_check_xmalloc(t.npages * sizeof(float));
	a.mass = (uintptr_t)mass;
	memset(&gst, 0, sizeof(gst));
	a.stats = (uintptr_t)&gst;
	a.batch = 1;
	a.n_heads = nh;
	a.nq = 1;
	a.erasure = policy;
	a.total_pages = t.npages;
	a.max_pages = t.npages;
	a.splits = splits;
	EXPECT_EQ(kvmem_cuda_attend_workspace(cu, g, &a, &wsb), 0, "%s",
		  kvmem_cuda_error());
	ws = kvmem_check_xmalloc(wsb);
	a.workspace = (uintptr_t)ws;
	EXPECT_EQ(kvmem_cuda_attend(cu, g, &a, NULL), 0, "%s",
		  kvmem_cuda_error());

	ck_assert_int_eq(kvmem_attend(s, 0, q, exp, &o, &st), 0);
	for (i = 0; i < (size_t)nh * D; i++)
		EXPECT_NEAR(got[i], exp[i], 1e-4 + 1e-4 * fabsf(exp[i]),
			    "out[%zu] fmt %u codec %s G %u D %u len %u hurt %d "
			    "policy %u splits %u",
			    i, g->format, codecs[g->codec], G, D, len, hurt,
			    policy, splits);
	EXPECT_EQ(gst.words_clean, st.words_clean, "codec %s hurt %d",
		  codecs[g->codec], hurt);
	EXPECT_EQ(gst.words_corrected, st.words_corrected, "codec %s hurt %d",
		  codecs[g->codec], hurt);
	EXPECT_EQ(gst.words_uncorrectable, st.words_uncorrectable,
		  "codec %s hurt %d", codecs[g->codec], hurt);
	EXPECT_EQ(gst.values_erased, st.values_erased, "codec %s hurt %d",
		  codecs[g->codec], hurt);
	EXPECT_EQ(gst.headers_uncorrectable, st.headers_uncorrectable,
		  "codec %s", codecs[g->codec]);
	if (hurt && g->codec != KVMEM_CODEC_H74)
		EXPECT(st.values_erased > 0, "codec %s: nothing lost",
		       codecs[g->codec]);
	/* alpha 1: each page's importance is this call's share. */
	np = kvmem_seq_pages(s, 0, d, 256);
	for (i = 0; i < (size_t)np; i++)
		EXPECT_NEAR(mass[i], d[i].importance, 1e-4,
			    "page %zu codec %s G %u", i, codecs[g->codec], G);

	kvmem_seq_free(s);
	kvmem_close(c);
	free(t.pages);
	free(k);
	free(v);
	free(q);
	free(exp);
	free(got);
	free(mass);
	free(ws);
}

START_TEST(test_cuda_attend_matches_cpu)
{
	struct kvmem_cuda *cu = kvmem__cuda_simt(4, SIMT_SMEM);
	struct kvmem_geometry g;
	struct kvmem_rng r;
	int fmt, codec;

	ck_assert_ptr_nonnull(cu);
	kvmem_rng_seed(&r, 1414);
	for (fmt = 0; fmt < KVMEM_FMT_NR; fmt++)
		for (codec = 0; codec < KVMEM_CODEC_NR; codec++) {
			geometry(&g, fmt, codec, 0, 2, 64);
			attend_case(cu, &g, 4, 37, 0, KVMEM_ERASE_INTERPOLATE,
				    0, &r);
			attend_case(cu, &g, 1, 53, 1, KVMEM_ERASE_INTERPOLATE,
				    2, &r);
		}
	kvmem_cuda_close(cu);
}
END_TEST

START_TEST(test_cuda_attend_shapes)
{
	struct kvmem_cuda *cu = kvmem__cuda_simt(4, SIMT_SMEM);
	static const uint32_t gqa[] = { 1, 4, 8 };
	struct kvmem_geometry g;
	struct kvmem_rng r;
	uint32_t policy;
	size_t i;

	ck_assert_ptr_nonnull(cu);
	kvmem_rng_seed(&r, 2828);
	for (i = 0; i < 3; i++) {
		geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 2, 128);
		attend_case(cu, &g, gqa[i], 41, 1, KVMEM_ERASE_INTERPOLATE, 3,
			    &r);
		geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24, 1, 1, 64);
		attend_case(cu, &g, gqa[i], 21, 1, KVMEM_ERASE_INTERPOLATE, 1,
			    &r);
	}
	for (policy = 0; policy <= KVMEM_ERASE_KEEP; policy++) {
		geometry(&g, KVMEM_FMT_INT2, KVMEM_CODEC_SECDED72, 0, 2, 64);
		attend_case(cu, &g, 2, 70, 1, policy, 0, &r);
	}
	/* A sequence shorter than its sink: one FP16 page. */
	geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 2, 64);
	attend_case(cu, &g, 2, 3, 0, KVMEM_ERASE_INTERPOLATE, 0, &r);
	kvmem_cuda_close(cu);
}
END_TEST

/*
 * Several query tokens per sequence and a batch of two: each query token
 * against softmax over the decoded sequence up to its position, computed
 * here in double from kvmem_seq_read().
 */
START_TEST(test_cuda_attend_batch_causal)
{
	struct kvmem_cuda *cu = kvmem__cuda_simt(2, SIMT_SMEM);
	const uint32_t nq = 3, G = 2, lens[2] = { 29, 45 };
	struct kvmem_cuda_attend_args a;
	struct kvmem_cuda_page *all;
	struct kvmem_geometry g;
	struct kvmem_cache *c;
	struct kvmem_seq *s[2];
	struct table t[2];
	struct kvmem_rng r;
	uint32_t sp[3], b, j, h, tt, d, nh, D;
	float *q, *out, *kk, *vv;
	size_t tok, wsb;
	void *ws;

	ck_assert_ptr_nonnull(cu);
	kvmem_rng_seed(&r, 99);
	geometry(&g, KVMEM_FMT_INT8, KVMEM_CODEC_GOLAY24, 0, 2, 64);
	D = g.head_dim;
	nh = g.kv_heads * G;
	tok = (size_t)g.kv_heads * D;
	ck_assert_int_eq(kvmem_open_embedded(&g, 64 << 20, &c), 0);
	for (b = 0; b < 2; b++) {
		float *k = kvmem_check_xmalloc(lens[b] * tok * 4);
		float *v = kvmem_check_xmalloc(lens[b] * tok * 4);

		fill(&r, k, lens[b] * tok);
		fill(&r, v, lens[b] * tok);
		ck_assert_int_eq(kvmem_seq_create(c, &s[b]), 0);
		ck_assert_int_eq(kvmem_seq_append(s[b], 0, k, v, lens[b]), 0);
		damage(s[b], &g);
		table_of(s[b], &t[b]);
		free(k);
		free(v);
	}
	all = kvmem_check_xmalloc((t[0].npages + t[1].npages) * sizeof(*all));
	memcpy(all, t[0].pages, t[0].npages * sizeof(*all));
	memcpy(all + t[0].npages, t[1].pages, t[1].npages * sizeof(*all));
	sp[0] = 0;
	sp[1] = t[0].npages;
	sp[2] = t[0].npages + t[1].npages;
	q = kvmem_check_xmalloc(2 * nq * nh * D * 4);
	out = kvmem_check_xmalloc(2 * nq * nh * D * 4);
	fill(&r, q, 2 * nq * nh * D);
	memset(&a, 0, sizeof(a));
	a.pages = (uintptr_t)all;
	a.seq_pages = (uintptr_t)sp;
	a.q = (uintptr_t)q;
	a.out = (uintptr_t)out;
	a.batch = 2;
	a.n_heads = nh;
	a.nq = nq;
	a.total_pages = sp[2];
	a.max_pages = t[1].npages;
	a.splits = 2;
	ck_assert_int_eq(kvmem_cuda_attend_workspace(cu, &g, &a, &wsb), 0);
	ws = kvmem_check_xmalloc(wsb);
	a.workspace = (uintptr_t)ws;
	EXPECT_EQ(kvmem_cuda_attend(cu, &g, &a, NULL), 0, "%s",
		  kvmem_cuda_error());

	kk = kvmem_check_xmalloc(lens[1] * tok * 4);
	vv = kvmem_check_xmalloc(lens[1] * tok * 4);
	for (b = 0; b < 2; b++) {
		ck_assert_int_eq(kvmem_seq_read(s[b], 0, 0, lens[b],
						KVMEM_ERASE_INTERPOLATE, kk, vv,
						NULL),
				 0);
		for (j = 0; j < nq; j++)
			for (h = 0; h < nh; h++) {
				const float *qh =
					q + ((b * nq + j) * nh + h) * D;
				uint32_t kvh = h / G, last = lens[b] - nq + j;
				double mx = -INFINITY, sum = 0,
				       acc[128] = { 0 };

				for (tt = 0; tt <= last; tt++) {
					double dot = 0;

					for (d = 0; d < D; d++)
						dot += (double)qh[d] *
						       kk[tt * tok + kvh * D +
							  d];
					dot /= sqrt((double)D);
					mx = dot > mx ? dot : mx;
				}
				for (tt = 0; tt <= last; tt++) {
					double dot = 0, w;

					for (d = 0; d < D; d++)
						dot += (double)qh[d] *
						       kk[tt * tok + kvh * D +
							  d];
					w = exp(dot / sqrt((double)D) - mx);
					sum += w;
					for (d = 0; d < D; d++)
						acc[d] += w * vv[tt * tok +
								 kvh * D + d];
				}
				for (d = 0; d < D; d++)
					EXPECT_NEAR(out[((b * nq + j) * nh +
							 h) * D +
							d],
						    acc[d] / sum, 2e-4,
						    "seq %u query %u head %u "
						    "dim %u",
						    b, j, h, d);
			}
	}
	for (b = 0; b < 2; b++) {
		kvmem_seq_free(s[b]);
		free(t[b].pages);
	}
	kvmem_close(c);
	kvmem_cuda_close(cu);
	free(all);
	free(q);
	free(out);
	free(kk);
	free(vv);
	free(ws);
}
END_TEST

START_TEST(test_cuda_attend_bad_args)
{
	struct kvmem_cuda *cu = kvmem__cuda_simt(1, 16 * 1024);
	struct kvmem_cuda_attend_args a;
	struct kvmem_geometry g;
	size_t wsb;

	ck_assert_ptr_nonnull(cu);
	geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 2, 64);
	memset(&a, 0, sizeof(a));
	a.batch = 1;
	a.n_heads = 3; /* not a multiple of kv_heads */
	a.nq = 1;
	a.total_pages = a.max_pages = 1;
	EXPECT_EQ(kvmem_cuda_attend_workspace(cu, &g, &a, &wsb), -EINVAL, "%s",
		  kvmem_cuda_error());
	a.n_heads = 4;
	a.erasure = 7;
	EXPECT_EQ(kvmem_cuda_attend_workspace(cu, &g, &a, &wsb), -EINVAL, "%s",
		  "bad policy");
	a.erasure = 0;
	EXPECT_EQ(kvmem_cuda_attend(cu, &g, &a, NULL), -EINVAL, "%s",
		  "NULL addresses");
	/* 16 KiB of shared memory cannot hold 512 query rows of 64. */
	a.nq = 256;
	EXPECT_EQ(kvmem_cuda_attend_workspace(cu, &g, &a, &wsb), -EOPNOTSUPP,
		  "%s", kvmem_cuda_error());
	EXPECT(strstr(kvmem_cuda_error(), "shared memory"), "%s",
	       kvmem_cuda_error());
	kvmem_cuda_close(cu);
}
END_TEST

/* ---- scrub and inject ------------------------------------------------- */

START_TEST(test_cuda_scrub_matches_cpu)
{
	struct kvmem_cuda *cu = kvmem__cuda_simt(1, SIMT_SMEM);
	struct kvmem_inject_params ip;
	struct kvmem_geometry g;
	struct kvmem_rng r;
	int codec;

	ck_assert_ptr_nonnull(cu);
	kvmem_rng_seed(&r, 5);
	for (codec = 0; codec < KVMEM_CODEC_NR; codec++) {
		const uint32_t ntok = 16;
		struct kvmem_page_counts pc[2], exp;
		struct kvmem_cuda_page pg[2];
		struct kvmem_page_layout l;
		struct kvmem_page_hdr hdr;
		uint64_t rep[2 + KVMEM_INJECT_HIST] = { 0 };
		uint64_t bits = 0, words = 0;
		int32_t status[2];
		float *k, *v;
		uint8_t *page, *ref, *flips;
		size_t tok, nw, i;
		int want;

		geometry(&g, KVMEM_FMT_INT4, codec, 0, 2, 64);
		kvmem_page_layout(&g, 0, &l);
		tok = (size_t)g.kv_heads * g.head_dim;
		k = kvmem_check_xmalloc(ntok * tok * 4);
		v = kvmem_check_xmalloc(ntok * tok * 4);
		fill(&r, k, ntok * tok);
		fill(&r, v, ntok * tok);
		page = kvmem_check_xmalloc(l.size);
		ref = kvmem_check_xmalloc(l.size);
		memset(&hdr, 0, sizeof(hdr));
		hdr.ntokens = ntok;
		hdr.flags = KVMEM_HDR_SEALED;
		ck_assert_int_eq(kvmem_page_encode(page, &g, &hdr, 0, k, v), 0);

		/* Flip bits in the K block on the device. */
		nw = (size_t)g.kv_heads * g.tokens_per_page * l.row_words;
		flips = kvmem_check_xmalloc(nw);
		ck_assert_int_eq(kvmem_inject_params_for_codec(&ip, codec, 0.02,
							       42 + codec),
				 0);
		EXPECT_EQ(kvmem_cuda_inject(cu, (uintptr_t)(page + l.k_off), nw,
					    &ip, (uintptr_t)flips,
					    (uintptr_t)rep, NULL),
			  0, "%s", kvmem_cuda_error());
		for (i = 0; i < nw; i++) {
			bits += flips[i];
			words += flips[i] > 0;
		}
		EXPECT_EQ(rep[0], bits, "codec %s", codecs[codec]);
		EXPECT_EQ(rep[1], words, "codec %s", codecs[codec]);
		EXPECT(bits > 0, "codec %s: no flips", codecs[codec]);
		/* A flip in the padding gap too: put back by the scrub. */
		page[l.size - 1] ^= 0x80;

		memcpy(ref, page, l.size);
		want = kvmem_page_scrub(ref, &g, &exp);
		memset(pg, 0, sizeof(pg));
		pg[0].addr = (uintptr_t)page;
		EXPECT_EQ(kvmem_cuda_scrub(cu, &g, (uintptr_t)pg, 1,
					   (uintptr_t)pc, (uintptr_t)status,
					   NULL),
			  0, "%s", kvmem_cuda_error());
		EXPECT_EQ(status[0], want, "codec %s", codecs[codec]);
		EXPECT_MEM(&pc[0], &exp, sizeof(exp), "counts, codec %s",
			   codecs[codec]);
		EXPECT_MEM(page, ref, l.size, "scrubbed page, codec %s",
			   codecs[codec]);
		/* Every word with one flip was corrected. */
		for (i = 0; i < nw; i++)
			if (flips[i] == 1)
				break;
		EXPECT(exp.payload.corrected > 0 || i == nw, "codec %s",
		       codecs[codec]);

		/* A header beyond repair: nothing else is touched. */
		page[0] ^= 0x03;
		memcpy(ref, page, l.size);
		want = kvmem_page_scrub(ref, &g, &exp);
		EXPECT_EQ(kvmem_cuda_scrub(cu, &g, (uintptr_t)pg, 1,
					   (uintptr_t)pc, (uintptr_t)status,
					   NULL),
			  0, "%s", kvmem_cuda_error());
		EXPECT_EQ(status[0], -EBADMSG, "codec %s", codecs[codec]);
		EXPECT_EQ(want, -EBADMSG, "codec %s", codecs[codec]);
		EXPECT_MEM(&pc[0], &exp, sizeof(exp), "bad header, codec %s",
			   codecs[codec]);
		EXPECT_MEM(page, ref, l.size, "bad header page, codec %s",
			   codecs[codec]);
		free(k);
		free(v);
		free(page);
		free(ref);
		free(flips);
	}
	kvmem_cuda_close(cu);
}
END_TEST

/* ---- on a GPU --------------------------------------------------------- */

START_TEST(test_cuda_device)
{
	struct kvmem_cuda *cu = NULL;
	int ret = kvmem_cuda_open(0, &cu);

	if (ret) {
		fprintf(stderr, "SKIP: cuda device: %s\n", kvmem_cuda_error());
		EXPECT(ret == -ENODEV || ret == -EOPNOTSUPP, "%d: %s", ret,
		       kvmem_cuda_error());
		EXPECT(*kvmem_cuda_error(), "%s", "no reason given");
		return;
	}
	EXPECT(*kvmem_cuda_name(cu), "%s", "no device name");
	kvmem_cuda_close(cu);
}
END_TEST

KVMEM_SUITE(cuda)
{
	Suite *s = suite_create("cuda");
	TCase *tc = tcase_create("cuda");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_cuda_open_without_driver);
	tcase_add_test(tc, test_cuda_open_stub_library);
	tcase_add_test(tc, test_cuda_encode_matches_cpu);
	tcase_add_test(tc, test_cuda_encode_refuses_misfit_jobs);
	tcase_add_test(tc, test_cuda_attend_matches_cpu);
	tcase_add_test(tc, test_cuda_attend_shapes);
	tcase_add_test(tc, test_cuda_attend_batch_causal);
	tcase_add_test(tc, test_cuda_attend_bad_args);
	tcase_add_test(tc, test_cuda_scrub_matches_cpu);
	tcase_add_test(tc, test_cuda_device);
	suite_add_tcase(s, tc);
	return s;
}
