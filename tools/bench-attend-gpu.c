/* SPDX-License-Identifier: MIT */
/*
 * bench-attend-gpu.c - kvmem-bench attend --gpu: decode-on-load attention
 * on GPU 0 against plain FP16 attention and a device-to-device copy
 *
 * The context is encoded on the device (kvmem_cuda_encode() from FP16 K/V,
 * timed as well) into pages as decoding has them: the first holds the
 * sink tokens and stays FP16 (a hot page, sealed), the last is the FP16
 * tail, half full (--ctx less half a page), sealed pages between; or, with
 * --sealed, sealed pages only. They are laid out again as plain FP16 pages
 * for kvmem_cuda_attend_f16(): the same split-K attention with nothing to
 * decode, the baseline. A call attends one query token of every head of
 * each of --batch sequences over its whole context (the sequences hold the
 * same K/V in pages of their own). To keep the GPU's L2 cache out of the
 * figures the batch is stored as many times (layers, at most 16) as it
 * takes to pass 256 MiB of FP16 pages, and a timed round makes one call
 * per layer, as a decode step does; the round's time over its layers is
 * one call. Each figure is the median of --reps rounds after a warm-up
 * round. Bandwidth is bytes of pages read per call over its time; a
 * copy's is bytes read plus written.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmem/cuda.h"
#include "kvmem/kvmem.h"
#include "bench.h"
#include "kvmem-private.h"

#define COLD_BYTES (256ull << 20)
#define MAX_LAYERS 16
#define NBUFS 24

struct gpu_run {
	struct kvmem_cuda *cu;
	uint64_t buf[NBUFS];
	int nbufs;
};

/* Device memory, freed at the end; a sentence and 0 when there is none. */
static uint64_t dalloc(struct gpu_run *run, size_t bytes)
{
	uint64_t a;

	if (run->nbufs == NBUFS) {
		fprintf(stderr,
			"kvmem-bench: attend --gpu: more than %d device "
			"buffers\n",
			NBUFS);
		return 0;
	}
	if (kvmem_cuda_alloc(run->cu, bytes, &a)) {
		fprintf(stderr, "kvmem-bench: attend --gpu: %s\n",
			kvmem_cuda_error());
		return 0;
	}
	run->buf[run->nbufs++] = a;
	return a;
}

static int dput(struct gpu_run *run, uint64_t dst, const void *src,
		size_t bytes)
{
	if (kvmem_cuda_copy(run->cu, dst, (uintptr_t)src, bytes, NULL) ||
	    kvmem_cuda_sync(run->cu, NULL)) {
		fprintf(stderr, "kvmem-bench: attend --gpu: %s\n",
			kvmem_cuda_error());
		return -1;
	}
	return 0;
}

static int failed(int ret)
{
	if (ret)
		fprintf(stderr, "kvmem-bench: attend --gpu: %s\n",
			kvmem_cuda_error());
	return ret;
}

/* What one layer of the context is on the device. */
struct layout {
	uint32_t npages, tpp;
	uint32_t sink; /* tokens of the first page, when it holds sinks */
	size_t tok; /* values of a token: kv_heads * head_dim */
	size_t pstride; /* bytes between protected pages */
	size_t fstride; /* bytes of an FP16 page: K then V */
};

/* The page that holds token @t, its first token in *@t0; as the cache
 * lays them out: the sink page first (lo->sink tokens), then pages of
 * lo->tpp. */
static uint32_t page_of(const struct layout *lo, uint32_t t, uint32_t *t0)
{
	const uint32_t S = lo->sink;
	const uint32_t pg = t < S ? 0 : (t - S) / lo->tpp + !!S;

	*t0 = pg && S ? S + (pg - 1) * lo->tpp : pg * lo->tpp;
	return pg;
}

/* Plain FP16 pages of the context, [kv_head][token][dim] each of K, V. */
static void f16_pages(const struct layout *lo, uint32_t ctx, uint32_t dim,
		      const uint16_t *k, const uint16_t *v, uint16_t *out)
{
	const size_t half = lo->tok * lo->tpp;
	uint32_t t, h, pg, t0;

	for (t = 0; t < ctx; t++)
		for (h = 0; h < lo->tok / dim; h++) {
			uint16_t *pk;

			pg = page_of(lo, t, &t0);
			pk = out + (size_t)pg * (lo->fstride / 2) +
			     ((size_t)h * lo->tpp + t - t0) * dim;

			memcpy(pk, k + t * lo->tok + h * dim, dim * 2);
			memcpy(pk + half, v + t * lo->tok + h * dim, dim * 2);
		}
}

/* Time @layers calls of @fn (0: kvmem, 1: FP16, 2: copy) as one round. */
struct round {
	struct kvmem_cuda *cu;
	const struct kvmem_geometry *g;
	struct kvmem_cuda_attend_args a;
	uint64_t ptab, ftab, fpages, scratch, out[2];
	size_t tab_bytes, fbytes;
	uint32_t layers;
};

static int run_round(struct round *rd, int fn, uint64_t *ns)
{
	uint64_t t0 = bench_now_ns();
	uint32_t L;
	int ret = 0;

	for (L = 0; L < rd->layers && !ret; L++) {
		struct kvmem_cuda_attend_args a = rd->a;

		a.out = rd->out[fn == 1];
		if (fn == 0) {
			a.pages = rd->ptab + L * rd->tab_bytes;
			ret = kvmem_cuda_attend(rd->cu, rd->g, &a, NULL);
		} else if (fn == 1) {
			a.pages = rd->ftab + L * rd->tab_bytes;
			ret = kvmem_cuda_attend_f16(rd->cu, rd->g, &a, NULL);
		} else {
			ret = kvmem_cuda_copy(rd->cu, rd->scratch,
					      rd->fpages + L * rd->fbytes,
					      rd->fbytes, NULL);
		}
	}
	if (!ret)
		ret = kvmem_cuda_sync(rd->cu, NULL);
	*ns = (bench_now_ns() - t0) / rd->layers;
	return failed(ret);
}

/* --host: attention from pages in host memory, and a copy of them. */
struct host_res {
	double us, copy_us, diff;
	size_t span; /* bytes the pages take in the arena */
};

/*
 * The batch's sequences of one layer in an embedded cache registered with
 * the GPU, encoded on the CPU from the same FP16 K/V: kvmem_cuda_attend()
 * reads them where they are (kvmem_cuda_seq_pages()), timed as the device
 * rounds are; the pages' span copied to the device is the baseline.
 * @outk is the device pages' output: the difference to it goes in @res.
 */
static int host_pages(struct gpu_run *run, const struct attend_cfg *cfg,
		      const struct kvmem_geometry *g, const struct layout *lo,
		      const uint16_t *k, const uint16_t *v,
		      const struct round *rd, const float *outk,
		      struct host_res *res)
{
	const uint32_t B = cfg->batch;
	const size_t nvals = (size_t)cfg->ctx * lo->tok;
	const size_t nq = (size_t)B * cfg->heads * g->head_dim;
	struct kvmem_page_layout l[2];
	struct kvmem_cuda_attend_args a = rd->a;
	struct kvmem_cuda_page *tab = NULL;
	struct kvmem_cache *c = NULL;
	struct kvmem_seq **s = NULL;
	float *kf = NULL, *vf = NULL, *out = NULL;
	uint64_t *t[2] = { NULL, NULL }, dtab, dcopy, lo_addr = UINT64_MAX;
	uint64_t hi = 0;
	uint32_t b, r, i;
	size_t j;
	int ret = -1;

	kvmem_page_layout(g, 0, &l[0]);
	kvmem_page_layout(g, 1, &l[1]);
	if (kvmem_open_embedded(g,
				(size_t)B * (lo->npages + 2) *
						(l[0].size > l[1].size
							 ? l[0].size
							 : l[1].size) +
					(1u << 20),
				&c)) {
		fprintf(stderr, "kvmem-bench: attend --gpu --host: no cache\n");
		return -1;
	}
	s = calloc(B, sizeof(*s));
	tab = calloc((size_t)B * lo->npages, sizeof(*tab));
	kf = malloc(nvals * sizeof(float));
	vf = malloc(nvals * sizeof(float));
	out = malloc(nq * sizeof(float));
	t[0] = calloc(cfg->reps, sizeof(*t[0]));
	t[1] = calloc(cfg->reps, sizeof(*t[1]));
	if (!s || !tab || !kf || !vf || !out || !t[0] || !t[1])
		goto out;
	for (j = 0; j < nvals; j++) {
		kf[j] = kvmem_h2f(k[j]);
		vf[j] = kvmem_h2f(v[j]);
	}
	if (failed(kvmem_cuda_register(run->cu, c)))
		goto out;
	for (b = 0; b < B; b++) {
		int n;

		if (kvmem_seq_create(c, &s[b]) ||
		    kvmem_seq_append(s[b], 0, kf, vf, cfg->ctx))
			goto out;
		n = kvmem_cuda_seq_pages(run->cu, s[b], 0,
					 tab + (size_t)b * lo->npages,
					 lo->npages);
		if (n != (int)lo->npages) {
			failed(n < 0 ? n : -EINVAL);
			goto out;
		}
	}
	/* The pages' extent in the arena, for the copy. */
	for (j = 0; j < (size_t)B * lo->npages; j++) {
		const size_t size = l[tab[j].flags ? 1 : 0].size;

		lo_addr = tab[j].addr < lo_addr ? tab[j].addr : lo_addr;
		hi = tab[j].addr + size > hi ? tab[j].addr + size : hi;
	}
	res->span = hi - lo_addr;
	if (!(dtab = dalloc(run, (size_t)B * lo->npages * sizeof(*tab))) ||
	    !(a.out = dalloc(run, nq * 4)) ||
	    !(dcopy = dalloc(run, res->span)) ||
	    dput(run, dtab, tab, (size_t)B * lo->npages * sizeof(*tab)))
		goto out;
	a.pages = dtab;
	/* Interleaved, as the device rounds are; round 0 warms up. */
	for (r = 0; r <= cfg->reps; r++) {
		for (i = 0; i < 2; i++) {
			uint64_t t0 = bench_now_ns();
			int err = i ? kvmem_cuda_copy(run->cu, dcopy, lo_addr,
						      res->span, NULL)
				    : kvmem_cuda_attend(run->cu, g, &a, NULL);

			if (failed(err) ||
			    failed(kvmem_cuda_sync(run->cu, NULL)))
				goto out;
			if (r)
				t[i][r - 1] = bench_now_ns() - t0;
		}
	}
	res->us = (double)bench_median(t[0], cfg->reps) / 1e3;
	res->copy_us = (double)bench_median(t[1], cfg->reps) / 1e3;
	if (failed(kvmem_cuda_copy(run->cu, (uintptr_t)out, a.out, nq * 4,
				   NULL)) ||
	    failed(kvmem_cuda_sync(run->cu, NULL)))
		goto out;
	res->diff = 0.0;
	for (j = 0; j < nq; j++) {
		double dd = fabs((double)out[j] - outk[j]);

		res->diff = !(dd <= res->diff) ? dd : res->diff;
	}
	ret = 0;
out:
	kvmem_close(c);
	free(s);
	free(tab);
	free(kf);
	free(vf);
	free(out);
	free(t[0]);
	free(t[1]);
	return ret;
}

int bench_attend_gpu(const struct attend_cfg *cfg,
		     const struct kvmem_geometry *g0)
{
	struct kvmem_geometry g = *g0;
	struct attend_cfg cf = *cfg;
	struct gpu_run run = { 0 };
	struct kvmem_page_layout l, lh;
	struct layout lo;
	struct round rd = { 0 };
	struct kvmem_cuda_encode_job *jobs = NULL;
	struct kvmem_cuda_page *ptab = NULL, *ftab = NULL;
	struct kvmem_rng rng;
	uint16_t *k = NULL, *v = NULL, *fimg = NULL;
	float *q = NULL, *outk = NULL, *outf = NULL;
	uint64_t *t[3] = { NULL, NULL, NULL }, dk, dv, dprot, dq, djobs, dsp;
	uint64_t dhot = 0;
	size_t hstride;
	uint64_t enc_ns = 0;
	const uint32_t B = cfg->batch;
	uint32_t *sp = NULL, i, b, r, nslots;
	double us[3], diff = 0.0, kbytes, fbytes, copy_gbps;
	struct host_res host = { 0 };
	size_t nvals, nq, wsb, j;
	int ret = 1;

	/* The real shape (not with --sealed): the geometry's sink tokens in
	 * a hot first page, then sealed pages, then a hot tail half full:
	 * --ctx rounded down to that. */
	if (cfg->sealed || !g.sink_tokens) {
		g.sink_tokens = 0;
		cf.sealed = 1;
	} else {
		const uint32_t T = g.tokens_per_page, H = T / 2 ? T / 2 : 1;
		const uint32_t S = g.sink_tokens < T ? g.sink_tokens : T;

		if (cf.ctx < S + H) {
			fprintf(stderr,
				"kvmem-bench: attend --gpu: --ctx %u must hold "
				"a tail after %u sink tokens (or give "
				"--sealed)\n",
				cfg->ctx, S);
			return 2;
		}
		cf.ctx = S + (cf.ctx - S - H) / T * T + H;
		g.sink_tokens = S;
	}
	cfg = &cf;
	if (kvmem_cuda_open(0, &run.cu)) {
		fprintf(stderr, "kvmem-bench: attend --gpu: %s\n",
			kvmem_cuda_error());
		return 2;
	}
	kvmem_page_layout(&g, 0, &l);
	kvmem_page_layout(&g, 1, &lh);
	hstride = (lh.size + 255) & ~(size_t)255;
	lo.tpp = g.tokens_per_page;
	lo.sink = g.sink_tokens;
	lo.npages = page_of(&lo, cfg->ctx - 1, &i) + 1;
	lo.tok = (size_t)g.kv_heads * g.head_dim;
	lo.pstride = (l.size + 255) & ~(size_t)255;
	lo.fstride = 2 * lo.tok * lo.tpp * 2;
	rd.fbytes = (size_t)B * lo.npages * lo.fstride;
	rd.layers = (uint32_t)((COLD_BYTES + rd.fbytes - 1) / rd.fbytes);
	if (rd.layers > MAX_LAYERS)
		rd.layers = MAX_LAYERS;
	/* A slot is one sequence of one layer: npages pages. */
	nslots = rd.layers * B;
	nvals = (size_t)cfg->ctx * lo.tok;
	nq = (size_t)B * cfg->heads * g.head_dim;

	k = bench_alloc(nvals * 2);
	v = bench_alloc(nvals * 2);
	q = bench_alloc(nq * 4);
	outk = bench_alloc(nq * 4);
	outf = bench_alloc(nq * 4);
	fimg = bench_alloc(lo.npages * lo.fstride);
	sp = bench_alloc((B + 1) * sizeof(*sp));
	jobs = bench_alloc((size_t)nslots * lo.npages * sizeof(*jobs));
	ptab = bench_alloc((size_t)nslots * lo.npages * sizeof(*ptab));
	ftab = bench_alloc((size_t)nslots * lo.npages * sizeof(*ftab));
	for (i = 0; i < 3; i++)
		t[i] = bench_alloc(cfg->reps * sizeof(uint64_t));
	kvmem_rng_seed(&rng, 1);
	for (j = 0; j < nvals; j++) {
		k[j] = kvmem_f2h(bench_rnd_unit(&rng));
		v[j] = kvmem_f2h(bench_rnd_unit(&rng));
	}
	for (j = 0; j < nq; j++)
		q[j] = bench_rnd_unit(&rng);
	f16_pages(&lo, cfg->ctx, g.head_dim, k, v, fimg);

	rd.tab_bytes = (size_t)B * lo.npages * sizeof(*ptab);
	if (!(dk = dalloc(&run, nvals * 2)) ||
	    !(dv = dalloc(&run, nvals * 2)) ||
	    !(dprot = dalloc(&run, (size_t)nslots * lo.npages * lo.pstride)) ||
	    (!cfg->sealed &&
	     !(dhot = dalloc(&run, (size_t)nslots * 2 * hstride))) ||
	    !(rd.fpages = dalloc(&run, rd.layers * rd.fbytes)) ||
	    !(rd.scratch = dalloc(&run, rd.fbytes)) ||
	    !(djobs = dalloc(&run,
			     (size_t)nslots * lo.npages * sizeof(*jobs))) ||
	    !(rd.ptab = dalloc(&run, rd.layers * rd.tab_bytes)) ||
	    !(rd.ftab = dalloc(&run, rd.layers * rd.tab_bytes)) ||
	    !(dsp = dalloc(&run, (B + 1) * sizeof(*sp))) ||
	    !(dq = dalloc(&run, nq * 4)) ||
	    !(rd.out[0] = dalloc(&run, nq * 4)) ||
	    !(rd.out[1] = dalloc(&run, nq * 4)))
		goto out;

	/* Slot L * B + b holds sequence b of layer L: page j is page
	 * j % npages of slot j / npages, in both layouts. */
	for (j = 0; j < (size_t)nslots * lo.npages; j++) {
		const uint32_t slot = (uint32_t)(j / lo.npages);
		const uint32_t pj = (uint32_t)(j % lo.npages);
		const uint32_t cap = !pj && lo.sink ? lo.sink : lo.tpp;
		const uint32_t t0 =
			pj ? lo.sink + (pj - !!lo.sink) * lo.tpp : 0;

		memset(&jobs[j], 0, sizeof(jobs[j]));
		jobs[j].page = dprot + j * lo.pstride;
		jobs[j].k = dk + (size_t)t0 * lo.tok * 2;
		jobs[j].v = dv + (size_t)t0 * lo.tok * 2;
		jobs[j].seq = slot % B + 1;
		jobs[j].layer = slot / B;
		jobs[j].token_start = t0;
		jobs[j].n = cfg->ctx - t0 < cap ? cfg->ctx - t0 : cap;
		jobs[j].flags = KVMEM_HDR_SEALED;
		/* The sink page (hot, sealed) and the tail (hot). */
		if (!cfg->sealed && (!pj || pj == lo.npages - 1)) {
			jobs[j].page =
				dhot + ((size_t)slot * 2 + !!pj) * hstride;
			jobs[j].flags =
				KVMEM_HDR_HOT | (pj ? 0 : KVMEM_HDR_SEALED);
		}
		ptab[j].addr = jobs[j].page;
		ptab[j].flags = jobs[j].flags & KVMEM_HDR_HOT;
		ptab[j].token_start = t0;
		ptab[j].ntokens = jobs[j].n;
		ftab[j] = ptab[j];
		ftab[j].addr = rd.fpages + j * lo.fstride;
	}
	for (b = 0; b <= B; b++)
		sp[b] = b * lo.npages;
	if (dput(&run, dk, k, nvals * 2) || dput(&run, dv, v, nvals * 2) ||
	    dput(&run, djobs, jobs,
		 (size_t)nslots * lo.npages * sizeof(*jobs)) ||
	    dput(&run, rd.ptab, ptab, rd.layers * rd.tab_bytes) ||
	    dput(&run, rd.ftab, ftab, rd.layers * rd.tab_bytes) ||
	    dput(&run, dsp, sp, (B + 1) * sizeof(*sp)) ||
	    dput(&run, dq, q, nq * 4))
		goto out;
	for (j = 0; j < nslots; j++)
		if (dput(&run, rd.fpages + j * lo.npages * lo.fstride, fimg,
			 lo.npages * lo.fstride))
			goto out;

	/* Encode every layer's pages, twice: the second is timed. */
	for (r = 0; r < 2; r++) {
		uint64_t t0 = bench_now_ns();

		if (failed(kvmem_cuda_encode(run.cu, &g, KVMEM_CUDA_F16, djobs,
					     nslots * lo.npages, NULL)) ||
		    failed(kvmem_cuda_sync(run.cu, NULL)))
			goto out;
		enc_ns = (bench_now_ns() - t0) / rd.layers;
	}

	rd.cu = run.cu;
	rd.g = &g;
	rd.a.seq_pages = dsp;
	rd.a.q = dq;
	rd.a.batch = B;
	rd.a.n_heads = cfg->heads;
	rd.a.nq = 1;
	rd.a.total_pages = B * lo.npages;
	rd.a.max_pages = lo.npages;
	if (failed(kvmem_cuda_attend_workspace(run.cu, &g, &rd.a, &wsb)) ||
	    !(rd.a.workspace = dalloc(&run, wsb)))
		goto out;
	/* Interleaved, so that drift in the machine's load hits all three. */
	for (r = 0; r <= cfg->reps; r++)
		for (i = 0; i < 3; i++) {
			uint64_t ns;

			if (run_round(&rd, (int)i, &ns))
				goto out;
			if (r)
				t[i][r - 1] = ns;
		}
	if (failed(kvmem_cuda_copy(run.cu, (uintptr_t)outk, rd.out[0], nq * 4,
				   NULL)) ||
	    failed(kvmem_cuda_copy(run.cu, (uintptr_t)outf, rd.out[1], nq * 4,
				   NULL)) ||
	    failed(kvmem_cuda_sync(run.cu, NULL)))
		goto out;
	for (j = 0; j < nq; j++) {
		double d = fabs((double)outk[j] - outf[j]);

		/* NaN compares false: count it as a mismatch too */
		diff = !(d <= diff) ? d : diff;
	}
	/* Outputs are means of values in [-1, 1]: a gap of 1 is a bug. */
	if (!(diff < 1.0)) {
		fprintf(stderr,
			"kvmem-bench: attend --gpu: kvmem and FP16 attention "
			"disagree by %g\n",
			diff);
		goto out;
	}
	if (cfg->host && host_pages(&run, cfg, &g, &lo, k, v, &rd, outk, &host))
		goto out;
	for (i = 0; i < 3; i++)
		us[i] = (double)bench_median(t[i], cfg->reps) / 1e3;
	kbytes = cfg->sealed
			 ? (double)B * lo.npages * l.size
			 : (double)B * ((lo.npages - 2) * l.size + 2 * lh.size);
	fbytes = 2.0 * B * nvals * 2;
	copy_gbps = 2.0 * rd.fbytes / us[2] / 1e3;

	if (cfg->json) {
		printf("{\"device\": \"%s\", \"ctx\": %u, \"batch\": %u, "
		       "\"heads\": %u, "
		       "\"kv_heads\": %u, \"dim\": %u, \"format\": \"%s\", "
		       "\"codec\": \"%s\", \"layers\": %u, "
		       "\"kvmem_us\": %.2f, \"fp16_us\": %.2f, "
		       "\"fp16_over_kvmem\": %.3f, \"kvmem_bytes\": %.0f, "
		       "\"fp16_bytes\": %.0f, \"kvmem_gbps\": %.1f, "
		       "\"fp16_gbps\": %.1f, \"copy_gbps\": %.1f, "
		       "\"kvmem_of_copy\": %.3f, \"fp16_of_copy\": %.3f, "
		       "\"encode_us\": %.2f, \"max_diff_fp16\": %.3g, "
		       "\"shape\": \"%s\"",
		       kvmem_cuda_name(run.cu), cfg->ctx, B, cfg->heads,
		       cfg->kv_heads, cfg->dim,
		       kvmem_format_get(cfg->format)->name,
		       kvmem_codec_get(cfg->codec)->name, rd.layers, us[0],
		       us[1], us[1] / us[0], kbytes, fbytes,
		       kbytes / us[0] / 1e3, fbytes / us[1] / 1e3, copy_gbps,
		       kbytes / us[0] / 1e3 / copy_gbps,
		       fbytes / us[1] / 1e3 / copy_gbps, enc_ns / 1e3, diff,
		       cfg->sealed ? "sealed" : "real");
		if (cfg->host)
			printf(", \"host_us\": %.2f, \"host_gbps\": %.2f, "
			       "\"h2d_gbps\": %.2f, \"host_of_h2d\": %.3f, "
			       "\"kvmem_over_host\": %.3f, "
			       "\"max_diff_host\": %.3g",
			       host.us, kbytes / host.us / 1e3,
			       host.span / host.copy_us / 1e3,
			       kbytes / host.us / (host.span / host.copy_us),
			       host.us / us[0], host.diff);
		printf("}\n");
	} else {
		printf("kvmem-bench attend --gpu: %s\nbatch %u of ctx %u, %u "
		       "heads, %u KV "
		       "heads, dim %u, %s + %s, %u tokens/page, %s,\n%u "
		       "layers a round, median of %u rounds\n\n",
		       kvmem_cuda_name(run.cu), B, cfg->ctx, cfg->heads,
		       cfg->kv_heads, cfg->dim,
		       kvmem_format_get(cfg->format)->name,
		       kvmem_codec_get(cfg->codec)->name, cfg->page_tokens,
		       cfg->sealed ? "sealed pages only"
				   : "FP16 sink page and tail",
		       rd.layers, cfg->reps);
		printf("%-30s %10s %10s %10s %9s\n", "", "us/call", "speed",
		       "MB/call", "GB/s");
		printf("%-30s %10.2f %9.2fx %10.2f %9.1f\n",
		       "FP16 pages (baseline)", us[1], 1.0, fbytes / 1e6,
		       fbytes / us[1] / 1e3);
		printf("%-30s %10.2f %9.2fx %10.2f %9.1f\n",
		       "kvmem, decode-on-load", us[0], us[1] / us[0],
		       kbytes / 1e6, kbytes / us[0] / 1e3);
		printf("\ndevice copy: %.1f GB/s (read + write); kvmem reads at "
		       "%.0f%% of it, FP16 at %.0f%%\n",
		       copy_gbps, 100.0 * kbytes / us[0] / 1e3 / copy_gbps,
		       100.0 * fbytes / us[1] / 1e3 / copy_gbps);
		printf("encode of one layer: %.2f us; max |kvmem - fp16| = "
		       "%.3g (quantization)\n",
		       enc_ns / 1e3, diff);
		if (cfg->host)
			printf("\npages in host memory: %.2f us/call, %.2f GB/s, "
			       "%.0f%% of a copy of them to the device\n"
			       "(%.2f GB/s), %.2fx the time from device pages; "
			       "max |host - device| = %.3g\n",
			       host.us, kbytes / host.us / 1e3,
			       100.0 * kbytes / host.us /
				       (host.span / host.copy_us),
			       host.span / host.copy_us / 1e3, host.us / us[0],
			       host.diff);
	}
	ret = 0;
out:
	while (run.nbufs)
		kvmem_cuda_free(run.cu, run.buf[--run.nbufs]);
	kvmem_cuda_close(run.cu);
	free(k);
	free(v);
	free(q);
	free(outk);
	free(outf);
	free(fimg);
	free(sp);
	free(jobs);
	free(ptab);
	free(ftab);
	for (i = 0; i < 3; i++)
		free(t[i]);
	return ret;
}
