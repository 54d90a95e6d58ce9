/* SPDX-License-Identifier: MIT */
/*
 * bench-prefix.c - kvmem-bench prefix: sessions that share a few system
 * prompts through a running kvmemd
 *
 * --sessions sessions of one process take turns; each serves --requests
 * requests, a request being one of --prompts prompts of --tokens tokens
 * (chosen by a seeded generator) and a tail of its own. A request attaches
 * what is published of its prompt (kvmem_prefix_attach()), appends what is
 * missing of it and publishes the prompt when some was, then appends its
 * tail. The baseline, timed in the same run on the same session, is
 * the append of a whole prompt: what a request costs kvmem without
 * sharing, short of computing the K/V (out of scope here). The report is
 * the median and 99th percentile of each, their ratio, and the hit rate in
 * blocks and requests.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "kvmem/kvmem.h"
#include "kvmem-private.h"

struct prefix_cfg {
	uint64_t tokens, prompts, sessions, requests, tail, layers;
	const char *connect;
	int json;
};

static void prefix_usage(FILE *f)
{
	fprintf(f, "usage: kvmem-bench prefix [--tokens N] [--prompts N] "
		   "[--sessions N]\n"
		   "                          [--requests N] [--tail N] "
		   "[--layers N] [--connect PATH]\n"
		   "                          [--json]\n\n"
		   "  --tokens N     tokens of a system prompt (default 1024)\n"
		   "  --prompts N    distinct prompts (default 4)\n"
		   "  --sessions N   sessions, taking turns (default 8)\n"
		   "  --requests N   requests of each session (default 16)\n"
		   "  --tail N       tokens of a request after its prompt "
		   "(default 32)\n"
		   "  --layers N     layers of the geometry (default 4; 8 KV "
		   "heads of 128,\n"
		   "                 int4 + h84, pages of 32 tokens)\n"
		   "  --connect PATH the kvmemd listening at PATH (default: "
		   "$KVMEM_SOCKET, else\n"
		   "                 kvmemd's default socket)\n"
		   "  --json         one JSON object on stdout\n");
}

static int parse_cfg(int argc, char **argv, struct prefix_cfg *cfg)
{
	static const struct option opts[] = {
		{ "tokens", required_argument, NULL, 't' },
		{ "prompts", required_argument, NULL, 'p' },
		{ "sessions", required_argument, NULL, 's' },
		{ "requests", required_argument, NULL, 'r' },
		{ "tail", required_argument, NULL, 'T' },
		{ "layers", required_argument, NULL, 'l' },
		{ "connect", required_argument, NULL, 'c' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int o, ret = 0;

	cfg->tokens = 1024;
	cfg->prompts = 4;
	cfg->sessions = 8;
	cfg->requests = 16;
	cfg->tail = 32;
	cfg->layers = 4;
	optind = 1;
	while (!ret && (o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 't':
			ret = bench_parse_u64("tokens", optarg, 36, 1u << 20,
					      &cfg->tokens);
			break;
		case 'p':
			ret = bench_parse_u64("prompts", optarg, 1, 1024,
					      &cfg->prompts);
			break;
		case 's':
			ret = bench_parse_u64("sessions", optarg, 1, 64,
					      &cfg->sessions);
			break;
		case 'r':
			ret = bench_parse_u64("requests", optarg, 1, 1u << 20,
					      &cfg->requests);
			break;
		case 'T':
			ret = bench_parse_u64("tail", optarg, 0, 1u << 16,
					      &cfg->tail);
			break;
		case 'l':
			ret = bench_parse_u64("layers", optarg, 1, 128,
					      &cfg->layers);
			break;
		case 'c':
			cfg->connect = optarg;
			break;
		case 'j':
			cfg->json = 1;
			break;
		case 'h':
			prefix_usage(stdout);
			return -1;
		default:
			prefix_usage(stderr);
			return 2;
		}
	}
	if (ret || optind != argc) {
		if (!ret)
			prefix_usage(stderr);
		return 2;
	}
	return 0;
}

/* What a run found. */
struct prefix_run {
	uint64_t *attach_ns, *append_ns; /* [requests], [sessions] */
	uint64_t nattach, nappend;
	uint64_t blocks_hit, blocks_asked, requests_hit;
};

/* The keys of prompt @p: chained, so block i's names all before it. */
static void prompt_keys(struct kvmem_prefix_key *k, uint32_t n, uint64_t p)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ p;
	uint32_t i, j;

	for (i = 0; i < n; i++)
		for (j = 0; j < KVMEM_PREFIX_KEY_BYTES; j += 8) {
			h = (h ^ (i * 64 + j)) * 0xff51afd7ed558ccdull;
			h ^= h >> 29;
			memcpy(k[i].bytes + j, &h, 8);
		}
}

/* One request of session @c for prompt @p: 0, or why not in stderr. */
static int request(struct kvmem_cache *c, const struct prefix_cfg *cfg,
		   const struct kvmem_prefix_key *keys, uint32_t nkeys,
		   const float *kv, size_t tok_floats, struct prefix_run *run)
{
	const uint32_t prompt = (uint32_t)cfg->tokens;
	struct kvmem_seq *s;
	uint64_t t0 = bench_now_ns();
	int got, ret;

	got = kvmem_prefix_attach(c, keys, nkeys, &s);
	run->attach_ns[run->nattach++] = bench_now_ns() - t0;
	if (got < 0) {
		fprintf(stderr, "kvmem-bench: attach: %s\n",
			kvmem_strerror(got));
		return -1;
	}
	run->blocks_asked += nkeys;
	run->requests_hit += got > 0;
	for (ret = 0; (uint32_t)ret < nkeys &&
		      (uint32_t)got >= kvmem_prefix_block_end(c, (uint32_t)ret);
	     ret++)
		;
	run->blocks_hit += (uint64_t)ret;
	ret = kvmem_seq_append_all(s, kv + (size_t)got * tok_floats,
				   kv + (size_t)got * tok_floats,
				   prompt - (uint32_t)got);
	/* What was not there is now: published for the next requests. */
	if (!ret && (uint32_t)got < kvmem_prefix_block_end(c, nkeys - 1))
		ret = kvmem_prefix_publish(s, keys, nkeys) < 0 ? -1 : 0;
	if (!ret)
		ret = kvmem_seq_append_all(s, kv + (size_t)prompt * tok_floats,
					   kv + (size_t)prompt * tok_floats,
					   (uint32_t)cfg->tail);
	kvmem_seq_free(s);
	if (ret)
		fprintf(stderr, "kvmem-bench: a request: %s\n",
			kvmem_strerror(ret));
	return ret ? -1 : 0;
}

static int run_prefix(int argc, char **argv)
{
	struct prefix_cfg cfg = { 0 };
	struct kvmem_geometry g = { .kv_heads = 8, .head_dim = 128 };
	struct kvmem_connect_opts o = { 0 };
	struct kvmem_prefix_key *keys;
	struct kvmem_cache **c;
	struct prefix_run run = { 0 };
	struct kvmem_rng rng;
	const char *path;
	char def[108];
	size_t tok, n, i;
	uint64_t r, sess, t0, a50, a99, b50, b99;
	uint32_t nkeys;
	float *kv;
	int ret = 1;

	ret = parse_cfg(argc, argv, &cfg);
	if (ret)
		return ret < 0 ? 0 : ret;
	ret = 1;
	kvmem_geometry_default(&g);
	g.layers = (uint32_t)cfg.layers;
	path = cfg.connect ? cfg.connect : kvmem_socket_path(def, sizeof(def));
	if (!path) {
		fprintf(stderr, "kvmem-bench: no kvmemd socket path\n");
		return 1;
	}
	tok = (size_t)g.layers * g.kv_heads * g.head_dim;
	n = (size_t)(cfg.tokens + cfg.tail) * tok;
	kv = bench_alloc(n * sizeof(float));
	kvmem_rng_seed(&rng, 7);
	for (i = 0; i < n; i++)
		kv[i] = bench_rnd_unit(&rng);
	c = calloc(cfg.sessions, sizeof(*c));
	run.attach_ns = calloc(cfg.sessions * cfg.requests, sizeof(uint64_t));
	run.append_ns = calloc(cfg.sessions, sizeof(uint64_t));
	if (!c || !run.attach_ns || !run.append_ns) {
		fprintf(stderr, "kvmem-bench: out of memory\n");
		goto out;
	}
	/* Room for a request and the baseline's whole prompt at once. */
	o.quota_bytes = 2 * (cfg.tokens + cfg.tail + 64) * tok + (16u << 20);
	for (sess = 0; sess < cfg.sessions; sess++)
		if (kvmem_connect(path, &g, &o, &c[sess])) {
			fprintf(stderr, "kvmem-bench: %s\n",
				kvmem_connect_error());
			goto out;
		}
	for (nkeys = 0; kvmem_prefix_block_end(c[0], nkeys) &&
			kvmem_prefix_block_end(c[0], nkeys) <= cfg.tokens;
	     nkeys++)
		;
	keys = calloc(nkeys, sizeof(*keys));
	if (!keys)
		goto out;

	/* The baseline: a whole prompt appended, on each session once. */
	for (sess = 0; sess < cfg.sessions; sess++) {
		struct kvmem_seq *s;

		t0 = bench_now_ns();
		if (kvmem_seq_create(c[sess], &s) ||
		    kvmem_seq_append_all(s, kv, kv, (uint32_t)cfg.tokens)) {
			fprintf(stderr, "kvmem-bench: the baseline failed\n");
			free(keys);
			goto out;
		}
		run.append_ns[run.nappend++] = bench_now_ns() - t0;
		kvmem_seq_free(s);
	}
	/* Each prompt's keys differ by a number per run, so blocks published
	 * by an earlier run are not hits of this one. */
	t0 = bench_now_ns();
	for (r = 0; r < cfg.requests; r++)
		for (sess = 0; sess < cfg.sessions; sess++) {
			prompt_keys(keys, nkeys,
				    t0 + kvmem_rng_below(&rng, cfg.prompts));
			if (request(c[sess], &cfg, keys, nkeys, kv, tok,
				    &run)) {
				free(keys);
				goto out;
			}
		}
	free(keys);
	a50 = bench_median(run.attach_ns, (uint32_t)run.nattach);
	a99 = run.attach_ns[run.nattach - 1 - run.nattach / 100];
	b50 = bench_median(run.append_ns, (uint32_t)run.nappend);
	b99 = run.append_ns[run.nappend - 1 - run.nappend / 100];
	if (cfg.json) {
		printf("{\"tokens\": %llu, \"prompts\": %llu, \"sessions\": "
		       "%llu, \"requests\": %llu, \"layers\": %u, "
		       "\"attach_us_p50\": %.1f, \"attach_us_p99\": %.1f, "
		       "\"append_us_p50\": %.1f, \"append_us_p99\": %.1f, "
		       "\"append_over_attach\": %.3f, \"block_hit_rate\": "
		       "%.4f, \"request_hit_rate\": %.4f}\n",
		       (unsigned long long)cfg.tokens,
		       (unsigned long long)cfg.prompts,
		       (unsigned long long)cfg.sessions,
		       (unsigned long long)cfg.requests, g.layers, a50 / 1e3,
		       a99 / 1e3, b50 / 1e3, b99 / 1e3,
		       (double)b50 / (double)a50,
		       (double)run.blocks_hit / (double)run.blocks_asked,
		       (double)run.requests_hit / (double)run.nattach);
	} else {
		printf("%llu requests: %llu sessions x %llu, %llu prompts of "
		       "%llu tokens (%u blocks, %u layers)\n",
		       (unsigned long long)run.nattach,
		       (unsigned long long)cfg.sessions,
		       (unsigned long long)cfg.requests,
		       (unsigned long long)cfg.prompts,
		       (unsigned long long)cfg.tokens, nkeys, g.layers);
		printf("baseline  append a prompt   %10.1f us p50 %10.1f us "
		       "p99\n",
		       b50 / 1e3, b99 / 1e3);
		printf("attach    its published part %9.1f us p50 %10.1f us "
		       "p99   (%.2fx faster)\n",
		       a50 / 1e3, a99 / 1e3, (double)b50 / (double)a50);
		printf("hits      %.1f%% of blocks, %.1f%% of requests\n",
		       100.0 * (double)run.blocks_hit /
			       (double)run.blocks_asked,
		       100.0 * (double)run.requests_hit / (double)run.nattach);
	}
	ret = 0;
out:
	for (sess = 0; c && sess < cfg.sessions; sess++)
		kvmem_close(c[sess]);
	free(c);
	free(run.attach_ns);
	free(run.append_ns);
	free(kv);
	return ret;
}

const struct bench_cmd bench_prefix = {
	.name = "prefix",
	.summary = "sessions sharing system prompts through kvmemd",
	.run = run_prefix,
};
