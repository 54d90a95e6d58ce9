/* SPDX-License-Identifier: MIT */
/*
 * bench-remote.c - kvmem-bench remote: the shared tier on a Redis Cluster
 *
 * Two kvmemd of the run's own, A and B, share a cluster (--seeds, or one
 * the run starts from redis-server on free 127.0.0.1 ports). A session on
 * A publishes a prompt of many blocks, timed until A's admin socket says
 * every push is in the cluster; a session on B, which never saw the
 * prompt, attaches it: a fetch of every block, each record checked, kept,
 * and copied into the session. Each is timed next to its baseline in the
 * same run on the same cluster: a pipelined SET (then GET) of as many
 * values of the same size through kvmemd's own cluster client (rcluster),
 * with nothing checked. Then the attach latency of a --latency-tokens
 * prefix: fetched from the cluster (B's copies dropped before each rep)
 * and kept here (on A), the median of --reps each. A cluster of its own
 * is run twice, with 3 masters and with 1, for the scaling; with --seeds
 * that part is left out, and the output says so.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../daemon/rcluster.h"
#include "bench.h"
#include "json.h"
#include "kvmem/kvmem.h"
#include "kvmem-private.h"
#include "own-kvmemd.h"
#include "redis-cluster.h"

/* How long the pushes of a publish may take to reach the cluster. */
#define PUSH_WAIT_MS 120000
#define REPLY_MAX (64u << 10)

struct remote_cfg {
	uint64_t tokens, latency_tokens, reps, layers;
	const char *seeds, *kvmemd, *format, *codec;
	int json;
};

/* What one cluster gave. */
struct remote_run {
	uint64_t masters, blocks, value_bytes;
	double publish_gbps, set_gbps, attach_gbps, get_gbps;
	double remote_us, local_us; /* p50 of the latency reps */
};

static void remote_usage(FILE *f)
{
	fprintf(f,
		"usage: kvmem-bench remote [--seeds HOST:PORT,...] "
		"[--tokens N] [--latency-tokens N]\n"
		"                          [--reps N] [--layers N] [--format F] "
		"[--codec C]\n"
		"                          [--kvmemd PATH] [--json]\n\n"
		"  --seeds LIST         a Redis Cluster to use (default: start "
		"one of 3 masters,\n"
		"                       then one of 1, from redis-server on "
		"127.0.0.1)\n"
		"  --tokens N           tokens of the prompt published and "
		"attached (default\n"
		"                       16384)\n"
		"  --latency-tokens N   tokens of the prefix whose attach is "
		"timed (default 4096)\n"
		"  --reps N             attaches timed of each kind (default "
		"9)\n"
		"  --layers N           layers of the geometry (default 4; 8 KV "
		"heads of 128,\n"
		"                       pages of 32 tokens)\n"
		"  --format F, --codec C  of the sealed pages (default int4, "
		"h84)\n"
		"  --kvmemd PATH        the kvmemd binary to run (default: "
		"$KVMEMD, else the\n"
		"                       build tree's)\n"
		"  --json               one JSON object on stdout\n");
}

static int parse_cfg(int argc, char **argv, struct remote_cfg *cfg)
{
	static const struct option opts[] = {
		{ "seeds", required_argument, NULL, 's' },
		{ "tokens", required_argument, NULL, 't' },
		{ "latency-tokens", required_argument, NULL, 'L' },
		{ "reps", required_argument, NULL, 'r' },
		{ "layers", required_argument, NULL, 'l' },
		{ "format", required_argument, NULL, 'f' },
		{ "codec", required_argument, NULL, 'c' },
		{ "kvmemd", required_argument, NULL, 'k' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int o, ret = 0;

	cfg->tokens = 16384;
	cfg->latency_tokens = 4096;
	cfg->reps = 9;
	cfg->layers = 4;
	cfg->format = "int4";
	cfg->codec = "h84";
	optind = 1;
	while (!ret && (o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 's':
			cfg->seeds = optarg;
			break;
		case 't':
			ret = bench_parse_u64("tokens", optarg, 64, 1u << 20,
					      &cfg->tokens);
			break;
		case 'L':
			ret = bench_parse_u64("latency-tokens", optarg, 64,
					      1u << 20, &cfg->latency_tokens);
			break;
		case 'r':
			ret = bench_parse_u64("reps", optarg, 1, 1000,
					      &cfg->reps);
			break;
		case 'l':
			ret = bench_parse_u64("layers", optarg, 1, 128,
					      &cfg->layers);
			break;
		case 'f':
			cfg->format = optarg;
			break;
		case 'c':
			cfg->codec = optarg;
			break;
		case 'k':
			cfg->kvmemd = optarg;
			break;
		case 'j':
			cfg->json = 1;
			break;
		case 'h':
			remote_usage(stdout);
			return -1;
		default:
			remote_usage(stderr);
			return 2;
		}
	}
	if (ret || optind != argc) {
		if (!ret)
			remote_usage(stderr);
		return 2;
	}
	if (cfg->latency_tokens > cfg->tokens) {
		fprintf(stderr, "kvmem-bench: --latency-tokens is more than "
				"--tokens\n");
		return 2;
	}
	return 0;
}

/* The keys of a prompt, chained: @salt makes them this run's own, so
 * that blocks an earlier run pushed are not found there. */
static void prompt_keys(struct kvmem_prefix_key *k, uint32_t n, uint64_t salt)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ salt;
	uint32_t i, j;

	for (i = 0; i < n; i++)
		for (j = 0; j < KVMEM_PREFIX_KEY_BYTES; j += 8) {
			h = (h ^ (i * 64 + j)) * 0xff51afd7ed558ccdull;
			h ^= h >> 29;
			memcpy(k[i].bytes + j, &h, 8);
		}
}

/*
 * @obj.@key (@obj NULL: the remote object itself) of @d's "remote"
 * reply, for each key of @keys (NULL-ended) into @out. Return: 0, or -1
 * said on stderr.
 */
static int remote_counters(const struct own_kvmemd *d, const char *obj,
			   const char *const *keys, uint64_t *out)
{
	char *buf = malloc(REPLY_MAX);
	const struct json *o;
	struct json *v = NULL;
	int ret = -1, i;

	if (!buf)
		return -1;
	if (bench_admin(d->admin, "remote", buf, REPLY_MAX, 10000) ||
	    json_parse(buf, strlen(buf), NULL, &v, NULL)) {
		fprintf(stderr, "kvmem-bench: remote: %s\n", buf);
		goto out;
	}
	o = json_get(v, "remote");
	if (obj)
		o = json_get(o, obj);
	for (i = 0; keys[i]; i++)
		if (json_u64(json_get(o, keys[i]), &out[i])) {
			fprintf(stderr, "kvmem-bench: remote: no %s.%s in %s\n",
				obj ? obj : "remote", keys[i], buf);
			goto out;
		}
	ret = 0;
out:
	json_free(v);
	free(buf);
	return ret;
}

static const char *const push_keys[] = { "pushed", "present", "dropped",
					 "errors", "bytes",   "unchained",
					 NULL };

/*
 * Publish @n blocks of @tokens of @kv on a fresh session of @a and wait
 * until they are in the cluster. Return: the seconds it took and the
 * bytes of records pushed in *@bytes, or a negative number.
 */
static double publish(struct own_kvmemd *a, const struct kvmem_geometry *g,
		      const struct kvmem_connect_opts *o, const float *kv,
		      uint32_t tokens, const struct kvmem_prefix_key *keys,
		      uint32_t n, uint64_t *bytes)
{
	uint64_t before[6], now[6], t0, t1 = 0;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	double secs = -1;
	int ret, i;

	if (own_kvmemd_connect(a->sock, a, g, o, &c))
		return -1;
	if (remote_counters(a, "push", push_keys, before))
		goto out;
	ret = kvmem_seq_create(c, &s);
	if (ret) {
		fprintf(stderr, "kvmem-bench: a sequence: %s\n",
			kvmem_strerror(ret));
		goto out;
	}
	ret = kvmem_seq_append_all(s, kv, kv, tokens);
	if (ret) {
		fprintf(stderr, "kvmem-bench: a prompt: %s\n",
			kvmem_strerror(ret));
		goto out_seq;
	}
	t0 = bench_now_ns();
	ret = kvmem_prefix_publish(s, keys, n);
	if (ret != (int)n) {
		fprintf(stderr, "kvmem-bench: publish: %d of %u blocks: %s\n",
			ret, n, ret < 0 ? kvmem_strerror(ret) : "");
		goto out_seq;
	}
	for (i = 0; (bench_now_ns() - t0) / 1000000 < PUSH_WAIT_MS; i++) {
		if (remote_counters(a, "push", push_keys, now))
			goto out_seq;
		t1 = bench_now_ns();
		if (now[0] + now[1] - before[0] - before[1] >= n)
			break;
		if (now[2] + now[3] + now[5] >
		    before[2] + before[3] + before[5]) {
			fprintf(stderr,
				"kvmem-bench: pushes dropped, unchained or "
				"failed (kvmemd's log says why)\n");
			goto out_seq;
		}
		bench_sleep_ms(1);
	}
	if (now[0] + now[1] - before[0] - before[1] < n) {
		fprintf(stderr, "kvmem-bench: %u pushes not done in %d s\n", n,
			PUSH_WAIT_MS / 1000);
		goto out_seq;
	}
	*bytes = now[4] - before[4];
	secs = (double)(t1 - t0) / 1e9;
out_seq:
	kvmem_seq_free(s);
out:
	kvmem_close(c);
	return secs;
}

/* Attach @keys on @c: the nanoseconds it took, or 0 when it did not get
 * all @tokens. */
static uint64_t attach(struct kvmem_cache *c,
		       const struct kvmem_prefix_key *keys, uint32_t n,
		       uint32_t tokens)
{
	struct kvmem_seq *s;
	uint64_t t0 = bench_now_ns(), dt;
	int got = kvmem_prefix_attach(c, keys, n, &s);

	dt = bench_now_ns() - t0;
	if (got != (int)tokens) {
		fprintf(stderr, "kvmem-bench: attach: %d of %u tokens%s%s\n",
			got, tokens, got < 0 ? ": " : "",
			got < 0 ? kvmem_strerror(got) : "");
		if (got >= 0)
			kvmem_seq_free(s);
		return 0;
	}
	kvmem_seq_free(s);
	return dt ? dt : 1;
}

/*
 * The baseline: @n values of @vlen bytes SET in one pipelined batch, then
 * GET, on the cluster at @seeds; their GB/s. Return: 0, or -1 said on
 * stderr.
 */
static int baseline(const char *seeds, uint64_t n, uint64_t vlen,
		    double *set_gbps, double *get_gbps)
{
	struct rcluster_opts o = { .seeds = seeds,
				   .timeout_ms = 10000,
				   .retries = 5 };
	struct rcluster_req *q = calloc(n, sizeof(*q));
	char(*key)[48] = calloc(n, sizeof(*key));
	uint8_t *val = malloc(vlen);
	struct rcluster *c = NULL;
	uint64_t t0, salt = bench_now_ns(), i, pass;
	char why[256];
	int ret = -1;

	if (!q || !key || !val) {
		fprintf(stderr, "kvmem-bench: out of memory\n");
		goto out;
	}
	if (rcluster_open(&o, &c, why, sizeof(why))) {
		fprintf(stderr, "kvmem-bench: %s: %s\n", seeds, why);
		goto out;
	}
	for (i = 0; i < vlen; i++)
		val[i] = (uint8_t)(i * 131 + 7);
	/* SET, GET, then DEL to leave nothing behind. */
	for (pass = 0; pass < 3; pass++) {
		for (i = 0; i < n; i++) {
			snprintf(key[i], sizeof(key[i]),
				 "kvmem-bench:{%" PRIx64 "-%" PRIu64 "}", salt,
				 i);
			q[i] = (struct rcluster_req){
				.op = pass == 0	  ? RC_SET
				      : pass == 1 ? RC_GET
						  : RC_DEL,
				.key = key[i],
				.keylen = strlen(key[i]),
				.val = pass ? NULL : val,
				.vlen = pass ? 0 : vlen,
				.ttl_s = 3600,
			};
		}
		t0 = bench_now_ns();
		rcluster_exec(c, q, n);
		t0 = bench_now_ns() - t0;
		for (i = 0; i < n; i++) {
			if (q[i].status || (pass == 1 && q[i].dlen != vlen)) {
				fprintf(stderr, "kvmem-bench: %s %s: %s\n",
					pass == 0   ? "SET"
					: pass == 1 ? "GET"
						    : "DEL",
					key[i], strerror(-q[i].status));
				for (; i < n; i++)
					free(q[i].data);
				goto out;
			}
			free(q[i].data);
		}
		if (pass < 2)
			*(pass ? get_gbps : set_gbps) =
				(double)(n * vlen) / (double)t0;
	}
	ret = 0;
out:
	rcluster_close(c);
	free(val);
	free(key);
	free(q);
	return ret;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Everything on the cluster at @seeds: throughput and its baselines, and
 * the latency when @latency. Return: 0, or -1 said on stderr.
 */
static int run_cluster(const struct remote_cfg *cfg, const char *seeds,
		       const struct kvmem_geometry *g, const float *kv,
		       int latency, struct remote_run *out)
{
	char seeds_set[700], drop[64], reply[4096];
	const char *set[] = {
		seeds_set,
		"remote.queue_bytes=4G",
		"remote.ttl_seconds=3600",
		"remote.timeout_ms=10000",
		"prefix.bytes=2G",
		"prefix.uid_bytes=0",
		"pool.host_bytes=4G",
		"pool.session_max_bytes=2G",
		NULL,
	};
	const char *const masters_key[] = { "masters", NULL };
	const size_t tok = (size_t)g->layers * g->kv_heads * g->head_dim;
	struct kvmem_connect_opts o = { 0 };
	struct own_kvmemd a = { 0 }, b = { 0 };
	struct kvmem_prefix_key *keys = NULL;
	struct kvmem_cache *cb = NULL, *ca = NULL;
	uint64_t *t = NULL, bytes = 0, fetched[1], before[1];
	const char *const fetch_bytes[] = { "bytes", NULL };
	uint32_t n, nl, end, lend, r;
	double secs;
	int ret = -1;

	snprintf(seeds_set, sizeof(seeds_set), "remote.seeds=%s", seeds);
	/* Room for the prompt's pages and the tails as they are built. */
	o.quota_bytes = 4 * (cfg->tokens + 64) * tok + (64u << 20);
	if (own_kvmemd_start(&a, cfg->kvmemd, 0, set) ||
	    own_kvmemd_start(&b, cfg->kvmemd, 0, set))
		goto out;
	if (own_kvmemd_connect(b.sock, &b, g, &o, &cb))
		goto out;
	for (n = 0; kvmem_prefix_block_end(cb, n) &&
		    kvmem_prefix_block_end(cb, n) <= cfg->tokens;
	     n++)
		;
	for (nl = 0; kvmem_prefix_block_end(cb, nl) &&
		     kvmem_prefix_block_end(cb, nl) <= cfg->latency_tokens;
	     nl++)
		;
	keys = calloc(n, sizeof(*keys));
	t = calloc(cfg->reps, sizeof(*t));
	if (!keys || !t || !n || !nl) {
		fprintf(stderr, "kvmem-bench: out of memory, or no whole "
				"block\n");
		goto out;
	}
	end = kvmem_prefix_block_end(cb, n - 1);
	lend = kvmem_prefix_block_end(cb, nl - 1);

	/* (a) publish on A until it is all in the cluster, attach on B. */
	prompt_keys(keys, n, bench_now_ns());
	secs = publish(&a, g, &o, kv, end, keys, n, &bytes);
	if (secs <= 0)
		goto out;
	out->blocks = n;
	out->value_bytes = bytes / n;
	out->publish_gbps = (double)bytes / secs / 1e9;
	if (remote_counters(&b, "fetch", fetch_bytes, before))
		goto out;
	t[0] = attach(cb, keys, n, end);
	if (!t[0] || remote_counters(&b, "fetch", fetch_bytes, fetched))
		goto out;
	out->attach_gbps = (double)(fetched[0] - before[0]) / (double)t[0];
	if (remote_counters(&a, "client", masters_key, &out->masters))
		goto out;
	if (baseline(seeds, n, out->value_bytes, &out->set_gbps,
		     &out->get_gbps))
		goto out;

	/* (b) a prefix fetched on B, each rep after B dropped its copies;
	 * kept on A, where it was published. */
	if (latency) {
		prompt_keys(keys, nl, bench_now_ns() + 1);
		if (publish(&a, g, &o, kv, lend, keys, nl, &bytes) <= 0)
			goto out;
		snprintf(drop, sizeof(drop), "prefix-drop %u",
			 (unsigned int)geteuid());
		for (r = 0; r < cfg->reps; r++) {
			if (bench_admin(b.admin, drop, reply, sizeof(reply),
					10000)) {
				fprintf(stderr, "kvmem-bench: %s: %s\n", drop,
					reply);
				goto out;
			}
			t[r] = attach(cb, keys, nl, lend);
			if (!t[r])
				goto out;
		}
		qsort(t, cfg->reps, sizeof(*t), cmp_u64);
		out->remote_us = (double)t[cfg->reps / 2] / 1e3;
		if (own_kvmemd_connect(a.sock, &a, g, &o, &ca))
			goto out;
		for (r = 0; r < cfg->reps; r++) {
			t[r] = attach(ca, keys, nl, lend);
			if (!t[r])
				goto out;
		}
		qsort(t, cfg->reps, sizeof(*t), cmp_u64);
		out->local_us = (double)t[cfg->reps / 2] / 1e3;
	}
	ret = 0;
out:
	kvmem_close(ca);
	kvmem_close(cb);
	free(keys);
	free(t);
	if (own_kvmemd_stop(&a, ret) | own_kvmemd_stop(&b, ret))
		ret = -1;
	return ret;
}

/* A cluster of @masters started here, and run_cluster() on it. */
static int run_own(const struct remote_cfg *cfg, int masters,
		   const struct kvmem_geometry *g, const float *kv, int latency,
		   struct remote_run *out)
{
	struct redis_cluster rc = { 0 };
	const char *why;
	int ret = redis_cluster_start(&rc, masters, 0, &why);

	if (ret) {
		fprintf(stderr,
			"kvmem-bench: cannot start a Redis Cluster "
			"of %d masters: %s\n",
			masters, why);
		return -1;
	}
	ret = run_cluster(cfg, rc.seeds, g, kv, latency, out);
	redis_cluster_stop(&rc);
	return ret;
}

static void print_json(const struct remote_cfg *cfg,
		       const struct kvmem_geometry *g,
		       const struct remote_run *m, const struct remote_run *one)
{
	printf("{\"layers\": %u, \"kv_heads\": %u, \"head_dim\": %u, "
	       "\"tokens_per_page\": %u, \"format\": \"%s\", \"codec\": "
	       "\"%s\", \"tokens\": %llu, \"blocks\": %llu, \"value_bytes\": "
	       "%llu, \"masters\": %llu, \"own_cluster\": %s, "
	       "\"publish_gbps\": %.4f, \"set_gbps\": %.4f, "
	       "\"publish_over_set\": %.3f, \"attach_gbps\": %.4f, "
	       "\"get_gbps\": %.4f, \"attach_over_get\": %.3f, "
	       "\"latency_tokens\": %llu, \"reps\": %llu, "
	       "\"attach_remote_us_p50\": %.1f, \"attach_local_us_p50\": "
	       "%.1f, \"remote_over_local\": %.3f, ",
	       g->layers, g->kv_heads, g->head_dim, g->tokens_per_page,
	       cfg->format, cfg->codec, (unsigned long long)cfg->tokens,
	       (unsigned long long)m->blocks,
	       (unsigned long long)m->value_bytes,
	       (unsigned long long)m->masters, cfg->seeds ? "false" : "true",
	       m->publish_gbps, m->set_gbps, m->publish_gbps / m->set_gbps,
	       m->attach_gbps, m->get_gbps, m->attach_gbps / m->get_gbps,
	       (unsigned long long)cfg->latency_tokens,
	       (unsigned long long)cfg->reps, m->remote_us, m->local_us,
	       m->remote_us / m->local_us);
	if (!one) {
		printf("\"scaling\": null, \"scaling_skipped\": \"--seeds: "
		       "the cluster is not the run's own\"}\n");
		return;
	}
	printf("\"scaling\": {\"masters\": [%llu, %llu], \"publish_gbps\": "
	       "[%.4f, %.4f], \"attach_gbps\": [%.4f, %.4f], \"set_gbps\": "
	       "[%.4f, %.4f], \"get_gbps\": [%.4f, %.4f], "
	       "\"publish_3_over_1\": %.3f, \"attach_3_over_1\": %.3f}}\n",
	       (unsigned long long)one->masters, (unsigned long long)m->masters,
	       one->publish_gbps, m->publish_gbps, one->attach_gbps,
	       m->attach_gbps, one->set_gbps, m->set_gbps, one->get_gbps,
	       m->get_gbps, m->publish_gbps / one->publish_gbps,
	       m->attach_gbps / one->attach_gbps);
}

static void print_text(const struct remote_cfg *cfg,
		       const struct kvmem_geometry *g,
		       const struct remote_run *m, const struct remote_run *one)
{
	printf("geometry  %u layers of %u KV heads of %u, %s + %s, pages of "
	       "%u tokens\n",
	       g->layers, g->kv_heads, g->head_dim, cfg->format, cfg->codec,
	       g->tokens_per_page);
	printf("prompt    %llu tokens: %llu blocks, records of %llu bytes, "
	       "on %llu masters%s\n",
	       (unsigned long long)cfg->tokens, (unsigned long long)m->blocks,
	       (unsigned long long)m->value_bytes,
	       (unsigned long long)m->masters,
	       cfg->seeds ? "" : " (the run's own, no replicas)");
	printf("publish   %8.3f GB/s   pipelined SET %8.3f GB/s   %.2fx\n",
	       m->publish_gbps, m->set_gbps, m->publish_gbps / m->set_gbps);
	printf("attach    %8.3f GB/s   pipelined GET %8.3f GB/s   %.2fx\n",
	       m->attach_gbps, m->get_gbps, m->attach_gbps / m->get_gbps);
	printf("latency   attach of %llu tokens, p50 of %llu: %.1f us from "
	       "the cluster, %.1f us kept here (%.2fx)\n",
	       (unsigned long long)cfg->latency_tokens,
	       (unsigned long long)cfg->reps, m->remote_us, m->local_us,
	       m->remote_us / m->local_us);
	if (!one) {
		printf("scaling   skipped: --seeds names a cluster that is not "
		       "the run's own\n");
		return;
	}
	printf("scaling   %llu -> %llu masters: publish %.3f -> %.3f GB/s "
	       "(%.2fx), attach %.3f -> %.3f GB/s (%.2fx)\n",
	       (unsigned long long)one->masters, (unsigned long long)m->masters,
	       one->publish_gbps, m->publish_gbps,
	       m->publish_gbps / one->publish_gbps, one->attach_gbps,
	       m->attach_gbps, m->attach_gbps / one->attach_gbps);
	printf("          SET %.3f -> %.3f GB/s, GET %.3f -> %.3f GB/s\n",
	       one->set_gbps, m->set_gbps, one->get_gbps, m->get_gbps);
}

static int run_remote(int argc, char **argv)
{
	struct remote_cfg cfg = { 0 };
	struct kvmem_geometry g = { .kv_heads = 8, .head_dim = 128 };
	struct remote_run main_run = { 0 }, one = { 0 };
	struct kvmem_rng rng;
	int fmt, codec, ret;
	size_t n, i;
	float *kv;

	ret = parse_cfg(argc, argv, &cfg);
	if (ret)
		return ret < 0 ? 0 : ret;
	if (bench_parse_format(cfg.format, &fmt) ||
	    bench_parse_codec(cfg.codec, &codec))
		return 2;
	kvmem_geometry_default(&g);
	g.layers = (uint32_t)cfg.layers;
	g.format = (uint8_t)fmt;
	g.codec = (uint8_t)codec;
	n = (size_t)cfg.tokens * g.layers * g.kv_heads * g.head_dim;
	kv = bench_alloc(n * sizeof(float));
	kvmem_rng_seed(&rng, 11);
	for (i = 0; i < n; i++)
		kv[i] = bench_rnd_unit(&rng);
	if (cfg.seeds)
		ret = run_cluster(&cfg, cfg.seeds, &g, kv, 1, &main_run);
	else
		ret = run_own(&cfg, 3, &g, kv, 1, &main_run) ||
		      run_own(&cfg, 1, &g, kv, 0, &one);
	free(kv);
	if (ret)
		return 1;
	if (cfg.json)
		print_json(&cfg, &g, &main_run, cfg.seeds ? NULL : &one);
	else
		print_text(&cfg, &g, &main_run, cfg.seeds ? NULL : &one);
	return 0;
}

const struct bench_cmd bench_remote = {
	.name = "remote",
	.summary = "the shared tier on a Redis Cluster, next to plain SET/GET",
	.run = run_remote,
};
