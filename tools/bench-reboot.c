/* SPDX-License-Identifier: MIT */
/*
 * bench-reboot.c - published prefixes kept on the backing store: what
 * writing them there costs a publish, and how soon a kvmemd whose
 * descriptor store is empty (a reboot) serves them again
 *
 * Two kvmemds of one binary run side by side, each with a backing store of
 * its own and a descriptor store played here (own_kvmemd_start_stored());
 * the only difference is store.retain_bytes: room for every block on one
 * (its blocks are written to the store), 0 on the other (they are not).
 *
 *   publish  prompts of --tokens tokens, one at a time on each daemon in
 *            turns (one, other, other, one, ...), until the first holds
 *            --kept-bytes of published blocks: each prompt appended to a
 *            new sequence (not timed), then kvmem_prefix_publish() of all
 *            its blocks (timed). MB/s of blocks published is each
 *            daemon's bytes over the sum of its publish times; the ratio
 *            is the one with the store over the one without. Then the
 *            time until the index on the store names every block.
 *   attach   every prompt attached by a new session of the daemon with
 *            the store, timed: the baseline of the same attaches after
 *            the reboot.
 *   reboot   both kill -9, their descriptor stores emptied (what a reboot
 *            leaves), started again. Timed from the fork to READY=1: the
 *            one with the store has read back and checked every block by
 *            then, the other starts empty (the baseline). Then every
 *            prompt is attached on the first again, timed, and from the
 *            fork until the last is; the first and the last prompt's K/V
 *            are read and compared bit for bit with an embedded cache
 *            given the same tokens: any difference fails the run.
 *
 * The geometry is kvmem-bench record's: 8 layers x 8 KV heads x 128 dims,
 * int4 + h84, 32 tokens a page. Prompt p's tokens are those of one random
 * buffer from token p on, its keys a chain of its own. This program runs
 * on the first of two CPUs and both daemons on the second; --no-pin
 * leaves it to the scheduler.
 */
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvmem/kvmem.h"
#include "bench.h"
#include "json.h"
#include "kvmem-private.h"
#include "own-kvmemd.h"

#define LAYERS 8
#define KV_HEADS 8
#define HEAD_DIM 128
#define DEFAULT_KEPT (256ull << 20)
#define MAX_KEPT (8ull << 30)
#define DEFAULT_TOKENS 1024
#define MAX_PROMPTS 4096
#define READY_MS 60000
#define INDEX_WAIT_MS 120000

struct reboot_cfg {
	uint64_t kept, tokens;
	const char *kvmemd;
	int no_pin, json;
};

/* One daemon's side. */
struct side {
	struct own_kvmemd d;
	char store[PATH_MAX];
	uint64_t bytes, ns; /* published, and its publish calls' time */
	uint64_t prompts;
	double ready_s;
};

struct run {
	const struct reboot_cfg *cfg;
	struct kvmem_geometry g;
	size_t row; /* floats of a token of all layers' K (or V) */
	float *k, *v; /* MAX_PROMPTS + tokens tokens */
	uint32_t nkeys; /* blocks of a prompt */
	uint32_t tokens; /* of a prompt: where its last block ends */
	double index_s, serving_s;
	double attach_s[2]; /* every prompt attached: before, after */
	uint64_t attached, verified_bytes;
};

static void reboot_usage(FILE *f)
{
	fprintf(f,
		"usage: kvmem-bench reboot [--kept-bytes SIZE] [--tokens N] "
		"[--kvmemd PATH]\n"
		"                          [--no-pin] [--json]\n\n"
		"  --kept-bytes SIZE   published blocks the daemon with the "
		"store holds when\n"
		"                      it is killed (default 256M, at most "
		"8G)\n"
		"  --tokens N          tokens of a prompt, 64..65536, to the "
		"end of its last\n"
		"                      whole block (default %u)\n"
		"  --kvmemd PATH       the kvmemd to start (default: $KVMEMD, "
		"else\n"
		"                      ../daemon/kvmemd next to this program's "
		"directory)\n"
		"  --no-pin            do not pin this program and the kvmemds "
		"it starts to two\n"
		"                      CPUs of their own\n"
		"  --json              one JSON object on stdout\n",
		DEFAULT_TOKENS);
}

static int parse_cfg(int argc, char **argv, struct reboot_cfg *cfg)
{
	static const struct option opts[] = {
		{ "kept-bytes", required_argument, NULL, 'K' },
		{ "tokens", required_argument, NULL, 't' },
		{ "kvmemd", required_argument, NULL, 'k' },
		{ "no-pin", no_argument, NULL, 'P' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int o;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'K':
			if (bench_parse_size("kept-bytes", optarg, 1, MAX_KEPT,
					     &cfg->kept))
				return 2;
			break;
		case 't':
			if (bench_parse_u64("tokens", optarg, 64, 65536,
					    &cfg->tokens))
				return 2;
			break;
		case 'k':
			cfg->kvmemd = optarg;
			break;
		case 'P':
			cfg->no_pin = 1;
			break;
		case 'j':
			cfg->json = 1;
			break;
		case 'h':
			reboot_usage(stdout);
			return 1;
		default:
			reboot_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		reboot_usage(stderr);
		return 2;
	}
	return 0;
}

/* The keys of prompt @p: chained, so block i's names all before it. */
static void prompt_keys(struct kvmem_prefix_key *k, uint32_t n, uint64_t p)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ (p + 1);
	uint32_t i, j;

	for (i = 0; i < n; i++)
		for (j = 0; j < KVMEM_PREFIX_KEY_BYTES; j += 8) {
			h = (h ^ (i * 64 + j)) * 0xff51afd7ed558ccdull;
			h ^= h >> 29;
			memcpy(k[i].bytes + j, &h, 8);
		}
}

/* Prompt @p appended to a new sequence of @c. */
static int prompt_seq(const struct run *x, struct kvmem_cache *c, uint64_t p,
		      struct kvmem_seq **out)
{
	const uint32_t n = x->tokens;
	struct kvmem_seq *s;
	int ret;

	ret = kvmem_seq_create(c, &s);
	if (!ret) {
		ret = kvmem_seq_append_all(s, x->k + p * x->row,
					   x->v + p * x->row, n);
		if (ret)
			kvmem_seq_free(s);
	}
	if (ret)
		fprintf(stderr, "kvmem-bench: prompt %llu: %s\n",
			(unsigned long long)p, kvmem_strerror(ret));
	else
		*out = s;
	return ret;
}

/* A number of @obj of the reply to @req on @d's admin socket, or -1. */
static double admin_num(const struct own_kvmemd *d, const char *req,
			const char *obj, const char *key)
{
	char reply[32768];
	struct json *v = NULL;
	const struct json *o, *n;
	double x = -1;

	if (bench_admin(d->admin, req, reply, sizeof(reply), 10000) ||
	    json_parse(reply, strlen(reply), NULL, &v, NULL))
		return -1;
	o = json_get(v, obj);
	n = o ? json_get(o, key) : NULL;
	if (n && n->type == JSON_NUMBER)
		x = n->u.num.d;
	json_free(v);
	return x;
}

/* One prompt published on @s: its publish timed, its bytes counted. */
static int publish_one(const struct run *x, struct side *s,
		       struct kvmem_cache *c)
{
	struct kvmem_prefix_key keys[65536 / 16];
	struct kvmem_seq *q;
	double before, after;
	uint64_t t0;
	int ret;

	prompt_keys(keys, x->nkeys, s->prompts);
	ret = prompt_seq(x, c, s->prompts, &q);
	if (ret)
		return ret;
	before = admin_num(&s->d, "prefixes", "prefix", "bytes");
	t0 = bench_now_ns();
	ret = kvmem_prefix_publish(q, keys, x->nkeys);
	s->ns += bench_now_ns() - t0;
	kvmem_seq_free(q);
	if (ret != (int)x->nkeys) {
		fprintf(stderr,
			"kvmem-bench: publishing prompt %llu: %d of %u "
			"blocks (%s)\n",
			(unsigned long long)s->prompts, ret, x->nkeys,
			ret < 0 ? kvmem_strerror(ret) : "short");
		return -EIO;
	}
	after = admin_num(&s->d, "prefixes", "prefix", "bytes");
	if (before < 0 || after < before) {
		fprintf(stderr, "kvmem-bench: kvmemd's prefix bytes did not "
				"add up\n");
		return -EIO;
	}
	s->bytes += (uint64_t)(after - before);
	s->prompts++;
	return 0;
}

/* Publish on both in turns until @on holds --kept-bytes; then wait for the
 * index on its store to name every block. */
static int publish_phase(struct run *x, struct side *on, struct side *off)
{
	struct kvmem_connect_opts o = {
		.quota_bytes = 4 * x->cfg->tokens * x->row + (64ull << 20),
	};
	struct kvmem_cache *c[2] = { NULL, NULL };
	struct side *s;
	uint64_t i, t0, blocks;
	int ret, waited;

	ret = own_kvmemd_connect(on->d.sock, &on->d, &x->g, &o, &c[0]);
	if (!ret)
		ret = own_kvmemd_connect(off->d.sock, &off->d, &x->g, &o,
					 &c[1]);
	for (i = 0; !ret && on->bytes < x->cfg->kept; i++) {
		if (on->prompts == MAX_PROMPTS) {
			fprintf(stderr,
				"kvmem-bench: %u prompts hold less than "
				"--kept-bytes: use more --tokens\n",
				MAX_PROMPTS);
			ret = -E2BIG;
			break;
		}
		/* one, other, other, one: a drift weighs on both alike */
		s = (i & 1) == ((i >> 1) & 1) ? on : off;
		ret = publish_one(x, s, c[s == off]);
		if (!ret) {
			s = s == on ? off : on;
			ret = publish_one(x, s, c[s == off]);
		}
	}
	for (i = 0; i < 2; i++)
		if (c[i])
			kvmem_close(c[i]);
	if (ret)
		return ret;
	blocks = on->prompts * x->nkeys;
	t0 = bench_now_ns();
	for (waited = 0; waited < INDEX_WAIT_MS; waited += 10) {
		if (admin_num(&on->d, "tier", "store_prefixes", "indexed") ==
		    (double)blocks)
			break;
		bench_sleep_ms(10);
	}
	x->index_s = (double)(bench_now_ns() - t0) / 1e9;
	if (waited >= INDEX_WAIT_MS) {
		fprintf(stderr,
			"kvmem-bench: the store's index did not name the %llu "
			"blocks within %d s\n",
			(unsigned long long)blocks, INDEX_WAIT_MS / 1000);
		return -ETIMEDOUT;
	}
	return 0;
}

/* kill -9, the descriptor store emptied, a start timed to READY=1. */
static int reboot(struct side *s)
{
	int ret = own_kvmemd_kill(&s->d);

	if (!ret) {
		own_kvmemd_forget(&s->d, "");
		ret = own_kvmemd_restart(&s->d);
	}
	if (!ret)
		ret = own_kvmemd_ready(&s->d, READY_MS);
	if (!ret)
		s->ready_s = (double)(s->d.ready_ns - s->d.started_ns) / 1e9;
	return ret;
}

/* @t, attached, against prompt @p appended to an embedded cache. */
static int prompt_same(struct run *x, struct kvmem_seq *t, uint64_t p)
{
	const uint32_t n = x->tokens;
	const size_t floats = (size_t)n * KV_HEADS * HEAD_DIM;
	struct kvmem_cache *e = NULL;
	struct kvmem_seq *ref = NULL;
	float *buf = malloc(4 * floats * sizeof(float));
	uint32_t l;
	int ret;

	ret = buf ? kvmem_open_embedded(&x->g, 4 * n * x->row + (16u << 20), &e)
		  : -ENOMEM;
	if (!ret)
		ret = prompt_seq(x, e, p, &ref);
	for (l = 0; l < LAYERS && !ret; l++) {
		ret = kvmem_seq_read(t, l, 0, n, 0, buf, buf + floats, NULL);
		if (!ret)
			ret = kvmem_seq_read(ref, l, 0, n, 0, buf + 2 * floats,
					     buf + 3 * floats, NULL);
		if (!ret &&
		    memcmp(buf, buf + 2 * floats, 2 * floats * sizeof(float))) {
			fprintf(stderr,
				"kvmem-bench: prompt %llu, layer %u: what was "
				"attached after the reboot is not what was "
				"published\n",
				(unsigned long long)p, l);
			ret = -EIO;
		}
		if (!ret)
			x->verified_bytes += 2 * floats * sizeof(float);
	}
	if (ref)
		kvmem_seq_free(ref);
	if (e)
		kvmem_close(e);
	free(buf);
	return ret;
}

/* Every prompt attached on @s whole, timed (into x->attach_s[@after]);
 * after the reboot, also from the start, and the first and the last
 * compared. */
static int serve_phase(struct run *x, struct side *s, int after)
{
	struct kvmem_connect_opts o = {
		.quota_bytes = 2 * x->cfg->kept + (64ull << 20),
	};
	struct kvmem_prefix_key keys[65536 / 16];
	struct kvmem_seq **t = calloc(s->prompts, sizeof(*t));
	struct kvmem_cache *c = NULL;
	uint64_t p, t0;
	int ret = t ? 0 : -ENOMEM, got;

	if (!ret)
		ret = own_kvmemd_connect(s->d.sock, &s->d, &x->g, &o, &c);
	t0 = bench_now_ns();
	for (p = 0; p < s->prompts && !ret; p++) {
		prompt_keys(keys, x->nkeys, p);
		got = kvmem_prefix_attach(c, keys, x->nkeys, &t[p]);
		if (got == (int)x->tokens) {
			x->attached++;
			continue;
		}
		fprintf(stderr,
			"kvmem-bench: prompt %llu: %d tokens attached %s the "
			"reboot, not %u\n",
			(unsigned long long)p, got, after ? "after" : "before",
			x->tokens);
		ret = -EIO;
	}
	x->attach_s[after] = (double)(bench_now_ns() - t0) / 1e9;
	if (!ret && after) {
		x->serving_s = (double)(bench_now_ns() - s->d.started_ns) / 1e9;
		ret = prompt_same(x, t[0], 0);
	}
	if (!ret && after && s->prompts > 1)
		ret = prompt_same(x, t[s->prompts - 1], s->prompts - 1);
	for (p = 0; t && p < s->prompts; p++)
		if (t[p])
			kvmem_seq_free(t[p]);
	free(t);
	if (c)
		kvmem_close(c);
	return ret;
}

/* ---- set-up and results ----------------------------------------------- */

/* The blocks of a prompt: those that end within --tokens tokens. 0, or 2
 * with why on stderr. */
static int blocks_of(struct run *x)
{
	struct kvmem_cache *e;
	int ret = kvmem_open_embedded(&x->g, 1u << 20, &e);

	if (ret) {
		fprintf(stderr, "kvmem-bench: an embedded cache: %s\n",
			kvmem_strerror(ret));
		return 2;
	}
	for (x->nkeys = 0;
	     kvmem_prefix_block_end(e, x->nkeys) &&
	     kvmem_prefix_block_end(e, x->nkeys) <= x->cfg->tokens;
	     x->nkeys++)
		x->tokens = kvmem_prefix_block_end(e, x->nkeys);
	kvmem_close(e);
	return 0;
}

static int start_side(const struct run *x, struct side *s, const char *dir,
		      const char *name, int retain)
{
	char set[7][PATH_MAX + 32];
	const char *settings[8];
	const uint64_t room = 2 * x->cfg->kept + (64ull << 20);
	int i, ret;

	snprintf(s->store, sizeof(s->store), "%s/%s", dir, name);
	snprintf(set[0], sizeof(set[0]), "store.path=%s", s->store);
	snprintf(set[1], sizeof(set[1]), "store.size=%llu",
		 (unsigned long long)room);
	snprintf(set[2], sizeof(set[2]), "store.retain_bytes=%llu",
		 retain ? (unsigned long long)room : 0ull);
	snprintf(set[3], sizeof(set[3]), "prefix.bytes=%llu",
		 (unsigned long long)room);
	snprintf(set[4], sizeof(set[4]), "prefix.uid_bytes=%llu",
		 (unsigned long long)room);
	/* The blocks, and a session that attaches them all. */
	snprintf(set[5], sizeof(set[5]), "pool.host_bytes=%llu",
		 (unsigned long long)(2 * room));
	snprintf(set[6], sizeof(set[6]), "pool.session_max_bytes=%llu",
		 (unsigned long long)(2 * room));
	for (i = 0; i < 7; i++)
		settings[i] = set[i];
	settings[7] = NULL;
	ret = own_kvmemd_start_stored(&s->d, x->cfg->kvmemd, !x->cfg->no_pin,
				      settings);
	return ret ? ret : own_kvmemd_ready(&s->d, READY_MS);
}

static void print_json(const struct run *x, const struct side *on,
		       const struct side *off)
{
	const double on_mb = (double)on->bytes / ((double)on->ns / 1e3);
	const double off_mb = (double)off->bytes / ((double)off->ns / 1e3);
	const double gib = (double)on->bytes / (double)(1ull << 30);

	printf("{\"tokens\": %llu, \"prompts\": %llu, \"blocks\": %llu, "
	       "\"kept_bytes\": %llu, \"publish_mb_s_store\": %.1f, "
	       "\"publish_mb_s_memory\": %.1f, \"publish_ratio\": %.3f, "
	       "\"index_s\": %.4f, \"ready_s_store\": %.4f, "
	       "\"ready_s_empty\": %.4f, \"ready_extra_s_per_gib\": %.4f, "
	       "\"attach_s_before\": %.4f, \"attach_s_after\": %.4f, "
	       "\"serving_s\": %.4f, \"serving_s_per_gib\": %.4f, "
	       "\"attached\": %llu, \"verified_bytes\": %llu}\n",
	       (unsigned long long)x->tokens, (unsigned long long)on->prompts,
	       (unsigned long long)on->prompts * x->nkeys,
	       (unsigned long long)on->bytes, on_mb, off_mb, on_mb / off_mb,
	       x->index_s, on->ready_s, off->ready_s,
	       (on->ready_s - off->ready_s) / gib, x->attach_s[0],
	       x->attach_s[1], x->serving_s, x->serving_s / gib,
	       (unsigned long long)x->attached,
	       (unsigned long long)x->verified_bytes);
}

static void print_table(const struct run *x, const struct side *on,
			const struct side *off)
{
	const double on_mb = (double)on->bytes / ((double)on->ns / 1e3);
	const double off_mb = (double)off->bytes / ((double)off->ns / 1e3);
	const double gib = (double)on->bytes / (double)(1ull << 30);

	printf("%llu prompts of %llu tokens (%u blocks each), %.1f MiB of "
	       "published blocks\n",
	       (unsigned long long)on->prompts, (unsigned long long)x->tokens,
	       x->nkeys, (double)on->bytes / (1 << 20));
	printf("publish   in memory only   %10.1f MB/s   (baseline)\n", off_mb);
	printf("publish   and to the store %10.1f MB/s   (%.3fx)\n", on_mb,
	       on_mb / off_mb);
	printf("index     names them all  %10.3f s after the last publish\n",
	       x->index_s);
	printf("reboot    empty start      %10.3f s to READY=1 (baseline)\n",
	       off->ready_s);
	printf("reboot    blocks read back %10.3f s to READY=1 (%.3f s more "
	       "a GiB)\n",
	       on->ready_s, (on->ready_s - off->ready_s) / gib);
	printf("attach    every prompt     %10.3f s before the reboot "
	       "(baseline)\n",
	       x->attach_s[0]);
	printf("attach    every prompt     %10.3f s after it (%.3fx)\n",
	       x->attach_s[1], x->attach_s[1] / x->attach_s[0]);
	printf("serving   every prompt     %10.3f s after the fork (%.3f s "
	       "a GiB); %llu attaches, %.1f MiB compared bit for bit\n",
	       x->serving_s, x->serving_s / gib,
	       (unsigned long long)x->attached,
	       (double)x->verified_bytes / (1 << 20));
}

static int rm_entry(const char *path, const struct stat *st, int type,
		    struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	return remove(path);
}

static int run_reboot(int argc, char **argv)
{
	struct reboot_cfg cfg = { .kept = DEFAULT_KEPT,
				  .tokens = DEFAULT_TOKENS };
	struct side on = { .d = { .cpu = -1, .peer_cpu = -1 } };
	struct side off = { .d = { .cpu = -1, .peer_cpu = -1 } };
	struct run x = { .cfg = &cfg };
	struct kvmem_rng rng;
	const char *tmp = getenv("TMPDIR");
	char dir[PATH_MAX];
	size_t i, n;
	int ret;

	ret = parse_cfg(argc, argv, &cfg);
	if (ret)
		return ret == 1 ? 0 : ret;
	kvmem_geometry_default(&x.g);
	x.g.layers = LAYERS;
	x.g.kv_heads = KV_HEADS;
	x.g.head_dim = HEAD_DIM;
	x.row = (size_t)LAYERS * KV_HEADS * HEAD_DIM;
	ret = blocks_of(&x);
	if (ret)
		return ret;
	n = (MAX_PROMPTS + cfg.tokens) * x.row;
	x.k = bench_alloc(n * sizeof(float));
	x.v = bench_alloc(n * sizeof(float));
	kvmem_rng_seed(&rng, 11);
	for (i = 0; i < n; i++) {
		x.k[i] = bench_rnd_unit(&rng);
		x.v[i] = bench_rnd_unit(&rng);
	}
	snprintf(dir, sizeof(dir), "%s/kvmem-bench-reboot-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror("kvmem-bench: mkdtemp");
		free(x.k);
		free(x.v);
		return 1;
	}
	ret = start_side(&x, &on, dir, "store-on", 1);
	if (!ret)
		ret = start_side(&x, &off, dir, "store-off", 0);
	if (!ret)
		ret = publish_phase(&x, &on, &off);
	if (!ret)
		ret = serve_phase(&x, &on, 0);
	if (!ret)
		ret = reboot(&off);
	if (!ret)
		ret = reboot(&on);
	if (!ret)
		ret = serve_phase(&x, &on, 1);
	if (own_kvmemd_stop(&on.d, ret))
		ret = -EIO;
	if (own_kvmemd_stop(&off.d, ret))
		ret = -EIO;
	nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
	if (!ret && cfg.json)
		print_json(&x, &on, &off);
	else if (!ret)
		print_table(&x, &on, &off);
	free(x.k);
	free(x.v);
	return ret ? 1 : 0;
}

const struct bench_cmd bench_reboot = {
	.name = "reboot",
	.summary = "published prefixes on the store: a publish's cost, a "
		   "reboot to serving them",
	.run = run_reboot,
};
