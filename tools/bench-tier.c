/* SPDX-License-Identifier: MIT */
/*
 * bench-tier.c - how fast kvmemd's GPU tier moves pages, next to the
 * driver's own copy of the same bytes in the same run
 *
 * The run opens GPU 0, starts a kvmemd of its own with a GPU pool on it,
 * attaches one session with the GPU tier (KVMEM_CONNECT_GPU_TIER) and
 * writes --bytes of sealed pages in sequences of 8 layers x 8 KV heads x
 * 128 dims, int4 + h84. Then, each sequence in turn:
 *   to GPU    kvmem_cuda_seq_pages(): kvmemd moves its pages into the
 *             session's GPU memory before the call returns
 *   to host   kvmem_seq_acquire(): it moves them back
 * The bytes are the daemon's count (stats: moved_bytes). The baseline
 * copies the same bytes from pinned host memory to device memory and back
 * with the driver (kvmem_cuda_copy(), waited for), in one copy each way
 * and in copies of one page each, so that a page at a time is measured as
 * well as the bus. Last, kvmemd's scrubber checks every page of the
 * session at once (scrub now), with the pages on the GPU (by its kernels,
 * where they are) and again in host memory, at the GB/s its reply says.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmem/cuda.h"
#include "kvmem/kvmem.h"
#include "bench.h"
#include "kvmem-private.h"
#include "own-kvmemd.h"
#include "rng.h"

#define LAYERS 8
#define KV_HEADS 8
#define HEAD_DIM 128
#define PAGE_TOKENS 32
#define SEQ_PAGES 8 /* sealed pages per layer of one sequence */

struct tier_cfg {
	const char *kvmemd;
	uint64_t bytes;
	int json;
};

struct tier_result {
	uint64_t bytes, pages, page_bytes;
	uint64_t expect; /* what the pages add up to, both ways */
	uint32_t seqs;
	double to_gpu_s, to_host_s;
	double reacquire_ms; /* median, one sequence back on the GPU */
	double copy_h2d_gbps, copy_d2h_gbps; /* one copy each way */
	double page_h2d_gbps, page_d2h_gbps; /* a page a copy */
	double scrub_gpu_gbps, scrub_host_gbps; /* pages checked */
	uint64_t in_place, in_copies; /* GPU pages checked each way */
};

static void tier_usage(FILE *f)
{
	fprintf(f,
		"usage: kvmem-bench tier [--bytes N] [--kvmemd PATH] [--json]\n"
		"\n"
		"kvmemd's GPU tier: pages moved to the GPU and back through a "
		"kvmemd started\n"
		"for the run, next to the driver's copies of the same bytes "
		"(one copy, and a\n"
		"page a copy) from pinned host memory. Needs a GPU.\n"
		"\n"
		"  --bytes N      bytes of sealed pages (default 256M)\n"
		"  --kvmemd PATH  the daemon (default: next to this tool, then "
		"PATH)\n"
		"  --json         one JSON object: to_gpu_gbps, to_host_gbps, "
		"copy_h2d_gbps,\n"
		"                 ... and their ratios, scrub_gpu_gbps, "
		"scrub_host_gbps\n");
}

static int parse_cfg(int argc, char **argv, struct tier_cfg *cfg)
{
	static const struct option opts[] = {
		{ "bytes", required_argument, NULL, 'b' },
		{ "kvmemd", required_argument, NULL, 'k' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'b':
			if (bench_parse_size("bytes", optarg, 1u << 20,
					     1ull << 40, &cfg->bytes))
				return -EINVAL;
			break;
		case 'k':
			cfg->kvmemd = optarg;
			break;
		case 'j':
			cfg->json = 1;
			break;
		case 'h':
			tier_usage(stdout);
			return 1;
		default:
			tier_usage(stderr);
			return -EINVAL;
		}
	}
	if (optind != argc) {
		tier_usage(stderr);
		return -EINVAL;
	}
	return 0;
}

/* The number after "@key": in @reply, after @anchor; 0 where none is. */
static double reply_num(const char *reply, const char *anchor, const char *key)
{
	const char *p = strstr(reply, anchor);
	char pat[64];

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = p ? strstr(p, pat) : NULL;
	return p ? strtod(p + strlen(pat), NULL) : 0;
}

/* @key of the GPU pool in the daemon's @cmd (stats, status); 0 on
 * failure. */
static uint64_t gpu_stat(const struct own_kvmemd *d, const char *cmd,
			 const char *key)
{
	char reply[16384];

	if (bench_admin(d->admin, cmd, reply, sizeof(reply), 10000))
		return 0;
	return (uint64_t)reply_num(reply,
				   strcmp(cmd, "stats") ? "\"gpu_pool\""
							: "\"pool\":\"gpu\"",
				   key);
}

static uint64_t moved_bytes(const struct own_kvmemd *d)
{
	return gpu_stat(d, "stats", "moved_bytes");
}

/* kvmemd's scrub of every page of session @sid, at once: GB/s of pages
 * checked, by its reply's bytes and duration; 0 on failure. */
static double scrub_now(const struct own_kvmemd *d, uint32_t sid)
{
	char req[64], reply[8192];
	double s;

	snprintf(req, sizeof(req), "scrub now session %u", sid);
	if (bench_admin(d->admin, req, reply, sizeof(reply), 600000))
		return 0;
	s = reply_num(reply, "{", "duration_s");
	return s > 0 ? reply_num(reply, "{", "bytes") / s / 1e9 : 0;
}

/*
 * The pages on the GPU (moves() left them there) scrubbed there, then
 * each sequence back in host memory and scrubbed again. 0, or a negative
 * errno said on stderr.
 */
static int scrubs(const struct own_kvmemd *d, struct kvmem_seq **s, uint32_t n,
		  uint32_t sid, struct tier_result *res)
{
	const uint64_t p0 = gpu_stat(d, "status", "checked_in_place");
	const uint64_t c0 = gpu_stat(d, "status", "checked_in_copies");
	uint32_t i;
	int ret = 0;

	res->scrub_gpu_gbps = scrub_now(d, sid);
	res->in_place = gpu_stat(d, "status", "checked_in_place") - p0;
	res->in_copies = gpu_stat(d, "status", "checked_in_copies") - c0;
	for (i = 0; !ret && i < n; i++)
		ret = kvmem_seq_acquire(s[i]);
	if (!ret)
		res->scrub_host_gbps = scrub_now(d, sid);
	if (!ret && (!res->scrub_gpu_gbps || !res->scrub_host_gbps))
		ret = -EIO;
	if (ret)
		fprintf(stderr, "kvmem-bench: tier: scrubbing: %s\n",
			kvmem_strerror(ret));
	return ret;
}

/*
 * The driver's copies of @bytes between pinned host memory and device
 * memory: one copy each way, then copies of @page bytes. 0, or a negative
 * errno said on stderr.
 */
static int baseline(struct kvmem_cuda *cu, uint64_t bytes, size_t page,
		    struct tier_result *res)
{
	uint8_t *host = bench_alloc(bytes);
	uint64_t dev = 0, t0, off;
	int ret, dir;

	ret = kvmem__cuda_host_register(cu, host, bytes);
	if (!ret)
		ret = kvmem_cuda_alloc(cu, bytes, &dev);
	for (dir = 0; !ret && dir < 2; dir++) {
		const uint64_t dst = dir ? (uintptr_t)host : dev;
		const uint64_t src = dir ? dev : (uintptr_t)host;
		double one, paged;

		/* Once unmeasured: no side pays for first touches. */
		ret = kvmem_cuda_copy(cu, dst, src, bytes, NULL);
		if (!ret)
			ret = kvmem_cuda_sync(cu, NULL);
		t0 = bench_now_ns();
		ret = kvmem_cuda_copy(cu, dst, src, bytes, NULL);
		if (!ret)
			ret = kvmem_cuda_sync(cu, NULL);
		one = (double)bytes / (double)(bench_now_ns() - t0);
		t0 = bench_now_ns();
		for (off = 0; !ret && off + page <= bytes; off += page) {
			ret = kvmem_cuda_copy(cu, dst + off, src + off, page,
					      NULL);
			if (!ret)
				ret = kvmem_cuda_sync(cu, NULL);
		}
		paged = (double)(off) / (double)(bench_now_ns() - t0);
		*(dir ? &res->copy_d2h_gbps : &res->copy_h2d_gbps) = one;
		*(dir ? &res->page_d2h_gbps : &res->page_h2d_gbps) = paged;
	}
	if (ret)
		fprintf(stderr, "kvmem-bench: tier: baseline copies: %s\n",
			kvmem_cuda_error());
	if (dev)
		kvmem_cuda_free(cu, dev);
	kvmem__cuda_host_unregister(cu, host);
	free(host);
	return ret;
}

/* Sequences of sealed pages, @n of them, released. */
static int fill(struct kvmem_cache *c, struct kvmem_seq **s, uint32_t n)
{
	const uint32_t tokens = PAGE_TOKENS * SEQ_PAGES + 4;
	const size_t vals = (size_t)tokens * LAYERS * KV_HEADS * HEAD_DIM;
	float *k = bench_alloc(vals * sizeof(float));
	float *v = bench_alloc(vals * sizeof(float));
	struct kvmem_rng r;
	uint32_t i;
	size_t j;
	int ret = 0;

	kvmem_rng_seed(&r, 1);
	for (j = 0; j < vals; j++) {
		k[j] = bench_rnd_unit(&r);
		v[j] = bench_rnd_unit(&r);
	}
	for (i = 0; !ret && i < n; i++) {
		ret = kvmem_seq_create(c, &s[i]);
		if (!ret)
			ret = kvmem_seq_append_all(s[i], k, v, tokens);
	}
	free(k);
	free(v);
	if (ret)
		fprintf(stderr, "kvmem-bench: tier: writing sequences: %s\n",
			kvmem_strerror(ret));
	return ret;
}

/* Each sequence to the GPU, then back; and each to the GPU once more,
 * timed alone, for the wait of a sequence attended again. */
static int moves(struct kvmem_cuda *cu, const struct own_kvmemd *d,
		 struct kvmem_seq **s, uint32_t n, struct tier_result *res)
{
	struct kvmem_cuda_page table[SEQ_PAGES + 2];
	uint64_t *t = calloc(n, sizeof(*t)), t0, m0;
	uint32_t i;
	int ret = 0;

	if (!t)
		return -ENOMEM;
	m0 = moved_bytes(d);
	t0 = bench_now_ns();
	for (i = 0; ret >= 0 && i < n; i++)
		ret = kvmem_cuda_seq_pages(cu, s[i], 0, table, SEQ_PAGES + 2);
	res->to_gpu_s = (double)(bench_now_ns() - t0) / 1e9;
	t0 = bench_now_ns();
	for (i = 0; ret >= 0 && i < n; i++)
		ret = kvmem_seq_acquire(s[i]);
	res->to_host_s = (double)(bench_now_ns() - t0) / 1e9;
	res->bytes = moved_bytes(d) - m0;
	for (i = 0; ret >= 0 && i < n; i++) {
		t[i] = bench_now_ns();
		ret = kvmem_cuda_seq_pages(cu, s[i], 0, table, SEQ_PAGES + 2);
		t[i] = bench_now_ns() - t[i];
	}
	if (ret < 0)
		fprintf(stderr, "kvmem-bench: tier: moving pages: %s\n",
			kvmem_cuda_error());
	else
		res->reacquire_ms = (double)bench_median(t, n) / 1e6;
	free(t);
	return ret < 0 ? ret : 0;
}

static int run(const struct tier_cfg *cfg, struct kvmem_cuda *cu,
	       struct tier_result *res)
{
	struct kvmem_geometry g = { .layers = LAYERS,
				    .kv_heads = KV_HEADS,
				    .head_dim = HEAD_DIM };
	char gpu_set[64], host_set[64], max_set[64];
	const char *set[] = { "scrub.rate=0", gpu_set,	       host_set,
			      max_set,	      "pool.mlock=no", NULL };
	struct kvmem_connect_opts o = { .flags = KVMEM_CONNECT_GPU_TIER };
	struct own_kvmemd d = { 0 };
	struct kvmem_cache *c = NULL;
	struct kvmem_seq **s = NULL;
	struct kvmem_page_layout l, lh;
	uint64_t per_seq;
	int ret;

	kvmem_geometry_default(&g);
	g.tokens_per_page = PAGE_TOKENS;
	kvmem_page_layout(&g, 0, &l);
	kvmem_page_layout(&g, 1, &lh);
	per_seq = (uint64_t)LAYERS * SEQ_PAGES * l.size;
	res->seqs = (uint32_t)((cfg->bytes + per_seq - 1) / per_seq);
	res->page_bytes = l.size;
	/* The sealed pages, and each layer's sink page, FP16. */
	res->pages = (uint64_t)res->seqs * LAYERS * (SEQ_PAGES + 1);
	res->expect = 2 * (uint64_t)res->seqs * LAYERS *
		      (SEQ_PAGES * l.size + lh.size);
	/* The GPU holds every sealed page and the sink pages, with room. */
	o.gpu_mib =
		(uint32_t)(((uint64_t)res->seqs * per_seq * 3 / 2 >> 20) + 16);
	o.quota_bytes = (uint64_t)res->seqs * per_seq * 3 / 2 + (64u << 20);
	snprintf(gpu_set, sizeof(gpu_set), "pool.gpu_bytes=%lluM",
		 (unsigned long long)o.gpu_mib + 64);
	snprintf(host_set, sizeof(host_set), "pool.host_bytes=%llu",
		 (unsigned long long)(o.quota_bytes + (256u << 20)));
	snprintf(max_set, sizeof(max_set), "pool.session_max_bytes=%llu",
		 (unsigned long long)o.quota_bytes);
	ret = own_kvmemd_start(&d, cfg->kvmemd, 0, set);
	if (!ret)
		ret = own_kvmemd_connect(d.sock, &d, &g, &o, &c);
	if (!ret && kvmem_cuda_register(cu, c)) {
		fprintf(stderr, "kvmem-bench: tier: %s\n", kvmem_cuda_error());
		ret = -EIO;
	}
	s = ret ? NULL : calloc(res->seqs, sizeof(*s));
	if (!ret && !s)
		ret = -ENOMEM;
	if (!ret)
		ret = fill(c, s, res->seqs);
	if (!ret)
		ret = moves(cu, &d, s, res->seqs, res);
	if (!ret && res->bytes != res->expect) {
		fprintf(stderr,
			"kvmem-bench: tier: kvmemd moved %llu bytes, not the "
			"%llu of the pages to the GPU and back\n",
			(unsigned long long)res->bytes,
			(unsigned long long)res->expect);
		ret = -EIO;
	}
	if (!ret)
		ret = scrubs(&d, s, res->seqs, kvmem_session_id(c), res);
	if (!ret)
		ret = baseline(cu, res->bytes / 2, l.size, res);
	kvmem_close(c);
	free(s);
	if (own_kvmemd_stop(&d, ret != 0) && !ret)
		ret = -EIO;
	return ret;
}

static void print(const struct tier_cfg *cfg, const struct tier_result *r)
{
	/* Each way moves half of what the daemon counts. */
	const double way = (double)r->bytes / 2;
	const double to_gpu = way / r->to_gpu_s / 1e9;
	const double to_host = way / r->to_host_s / 1e9;

	if (cfg->json) {
		printf("{\"bytes\": %llu, \"pages\": %llu, \"page_bytes\": "
		       "%llu, \"sequences\": %u, \"to_gpu_gbps\": %.3f, "
		       "\"to_host_gbps\": %.3f, \"copy_h2d_gbps\": %.3f, "
		       "\"copy_d2h_gbps\": %.3f, \"page_h2d_gbps\": %.3f, "
		       "\"page_d2h_gbps\": %.3f, \"to_gpu_vs_copy\": %.3f, "
		       "\"to_host_vs_copy\": %.3f, \"reacquire_ms\": %.3f, "
		       "\"scrub_gpu_gbps\": %.3f, \"scrub_host_gbps\": %.3f, "
		       "\"scrub_gpu_vs_host\": %.3f, \"checked_in_place\": "
		       "%llu, \"checked_in_copies\": %llu}\n",
		       (unsigned long long)r->bytes,
		       (unsigned long long)r->pages,
		       (unsigned long long)r->page_bytes, r->seqs, to_gpu,
		       to_host, r->copy_h2d_gbps, r->copy_d2h_gbps,
		       r->page_h2d_gbps, r->page_d2h_gbps,
		       to_gpu / r->copy_h2d_gbps, to_host / r->copy_d2h_gbps,
		       r->reacquire_ms, r->scrub_gpu_gbps, r->scrub_host_gbps,
		       r->scrub_gpu_gbps / r->scrub_host_gbps,
		       (unsigned long long)r->in_place,
		       (unsigned long long)r->in_copies);
		return;
	}
	printf("%llu pages (sealed ones of %llu bytes, and sinks) in %u "
	       "sequences, moved %.1f MiB each way\n",
	       (unsigned long long)r->pages, (unsigned long long)r->page_bytes,
	       r->seqs, way / (1 << 20));
	printf("%-22s %10s %10s %10s\n", "", "GB/s", "copy GB/s", "ratio");
	printf("%-22s %10.2f %10.2f %10.2f\n", "to the GPU", to_gpu,
	       r->copy_h2d_gbps, to_gpu / r->copy_h2d_gbps);
	printf("%-22s %10.2f %10.2f %10.2f\n", "back to host memory", to_host,
	       r->copy_d2h_gbps, to_host / r->copy_d2h_gbps);
	printf("a page a copy: %.2f GB/s to the GPU, %.2f back; a sequence "
	       "back on the GPU in %.3f ms (median)\n",
	       r->page_h2d_gbps, r->page_d2h_gbps, r->reacquire_ms);
	printf("scrubbed by kvmemd: %.2f GB/s on the GPU (%llu pages in "
	       "place, %llu in copies), %.2f GB/s in host memory\n",
	       r->scrub_gpu_gbps, (unsigned long long)r->in_place,
	       (unsigned long long)r->in_copies, r->scrub_host_gbps);
}

static int run_tier(int argc, char **argv)
{
	struct tier_cfg cfg = { .bytes = 256ull << 20 };
	struct tier_result res = { 0 };
	struct kvmem_cuda *cu;
	int ret = parse_cfg(argc, argv, &cfg);

	if (ret)
		return ret > 0 ? 0 : 2;
	if (kvmem_cuda_open(0, &cu)) {
		fprintf(stderr, "kvmem-bench: tier: %s\n", kvmem_cuda_error());
		return 2;
	}
	ret = run(&cfg, cu, &res);
	kvmem_cuda_close(cu);
	if (ret)
		return 1;
	print(&cfg, &res);
	return 0;
}

const struct bench_cmd bench_tier = {
	.name = "tier",
	.summary = "kvmemd's GPU tier: pages to the GPU and back, next to "
		   "the driver's copies",
	.run = run_tier,
};
