/* SPDX-License-Identifier: MIT */
/*
 * bench-fill.c - the integrity load: write seeded K/V, let it sit, read it
 * back the way attention does and compare (kvmem's memtester)
 *
 * One session of kvmemd (or, with --embedded, an in-process cache) gets
 * --seqs sequences of --tokens tokens of seeded K and V in every layer.
 * They are released, so the daemon sees them idle, and held for --hold
 * seconds while an operator injects errors, scrubs or offloads them. Then
 * every value is read back through kvmem_seq_read(), the decode-on-load
 * that attention runs (codewords corrected, erased values rebuilt by
 * interpolation), and compared bit for bit with the same K and V written
 * into a fresh embedded cache that nobody touched: the clean quantized
 * values. Each value is then
 *   exact      equal to the reference, every codeword it depends on (its
 *              payload words, its scale's words) as the reference has them
 *   corrected  equal to the reference, but one of those codewords differs
 *              from the reference's: the decode corrected it
 *   rebuilt    taken away by an uncorrectable word (or scale) and rebuilt
 *              by interpolation; reported, not an error
 *   wrong      different from the reference and not flagged: silent
 *              corruption, which fails the run
 * Which values a decode erased comes from kvmem_page_decode() of a copy of
 * each page that differs from the reference, taken before the read: the
 * same row decoder attention uses, on the same bits (a scrub in between
 * only removes correctable errors, which changes no value and no erasure).
 *
 * --inject-ber and --inject-flips flip bits in the payload of the sealed
 * pages the run wrote, after writing and before the hold (kvmem_inject(),
 * which reports every flip), for demonstrations without an operator.
 *
 * With --hold, SIGUSR1 ends the hold early; it is blocked from the start,
 * so one sent before the hold begins ends it at once.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvmem/inject.h"
#include "kvmem/kvmem.h"
#include "bench.h"
#include "kvmem-private.h"

#define MAX_SEQS 1048576u
#define MAX_TOKENS 65536u
#define MAX_HOLD_S 31536000.0
/* Slots the library keeps in reserve, and one page being sealed. */
#define SPARE_PAGES 72u
/* Wrong values described on stderr before the rest are only counted. */
#define SHOW_WRONG 8u

/* Exit statuses besides 0 and 2 (usage). */
#define EXIT_WRONG 1
#define EXIT_FAILED 3

enum inject_kind { INJECT_NONE, INJECT_BER, INJECT_FLIPS };

struct fill_cfg {
	uint32_t seqs, tokens, layers, kv_heads, dim, page_tokens;
	int format, codec;
	double hold;
	uint64_t seed, inject_seed;
	int inject_seed_set;
	int inject;
	double ber;
	uint32_t flips;
	const char *channel; /* --inject-channel, or NULL: independent bits */
	struct kvmem_inject_params chan; /* its mode and k */
	int json, embedded;
	const char *connect;
};

/* Per value of one layer, K rows then V rows: what its page showed. */
enum { V_CLEAN = 0, V_DAMAGED = 1, V_ERASED = 2 };

struct fill {
	const struct fill_cfg *cfg;
	struct kvmem_geometry g;
	struct kvmem_page_layout lay[2]; /* [hot] */
	size_t tok; /* values per token and layer: kv_heads * dim */
	uint32_t max_pages; /* per layer */
	struct kvmem_cache *c, *ref;
	struct kvmem_seq **seqs;
	char where[320];
	/* buffers */
	float *k, *v; /* one sequence, [token][layer][kv_head][dim] */
	float *rk, *rv, *ek, *ev; /* one layer read back, and expected */
	uint8_t *flags; /* one layer: enum above */
	uint8_t *copy; /* one page */
	float *pk, *pv; /* its decode */
	uint8_t *perased;
	struct kvmem_page_desc *pd, *rd;
	/* results */
	uint64_t values, exact, corrected, rebuilt, wrong;
	uint64_t words_corrected, words_uncorrectable;
	uint64_t write_ns, read_ns, hold_ns, ref_write_ns, ref_read_ns;
	uint64_t inject_words; /* words the injector went over */
	struct kvmem_inject_report rep;
};

static void fill_usage(FILE *f)
{
	fprintf(f,
		"usage: kvmem-bench fill --seqs N --tokens T [--connect PATH | "
		"--embedded]\n"
		"                        [--hold SEC] [--seed S] [--layers L] "
		"[--kv-heads K]\n"
		"                        [--dim D] [--format F] [--codec C] "
		"[--page-tokens T]\n"
		"                        [--inject-ber P [--inject-channel SPEC] | "
		"--inject-flips K]\n"
		"                        [--inject-seed S]\n"
		"                        [--json]\n\n"
		"  --seqs N          sequences, held all at once (1..%u)\n"
		"  --tokens T        tokens per sequence, every layer "
		"(1..%u)\n"
		"  --connect PATH    kvmemd's socket (default: $KVMEM_SOCKET, "
		"else kvmemd's\n"
		"                    default path)\n"
		"  --embedded        an in-process cache instead of kvmemd\n"
		"  --hold SEC        keep the released sequences this long "
		"before reading;\n"
		"                    SIGUSR1 ends the hold early (default 0)\n"
		"  --seed S          seed of the K/V values (default 1)\n"
		"  --layers L        layers (default 2)\n"
		"  --kv-heads K      KV heads (default 8)\n"
		"  --dim D           head dimension (default 128)\n"
		"  --format F        fp16 int8 int4 int2 fp8 lm2 lm3 lm4 "
		"(default int4)\n"
		"  --codec C         h74 h84 golay24 secded72 (default h84)\n"
		"  --page-tokens T   tokens per page (default 32)\n"
		"  --inject-ber P    flip each payload bit of the sealed pages "
		"with\n"
		"                    probability P after writing\n"
		"  --inject-flips K  flip exactly K bits of every payload word "
		"of the sealed\n"
		"                    pages after writing\n"
		"  --inject-channel SPEC  with --inject-ber: P is the rate of "
		"the fault\n"
		"                    model SPEC (kvmem-ecc(1): byte:K, "
		"adjacent:K, line,\n"
		"                    column:ROW, burst:K; exact:K alone is "
		"--inject-flips K)\n"
		"  --inject-seed S   seed of the flips (default: --seed)\n"
		"  --json            one JSON object on stdout\n\n"
		"Exit status: 0 every value read back right, 1 some value "
		"wrong, 2 usage,\n"
		"3 the run could not finish (no kvmemd, refused, lost, out of "
		"memory).\n",
		MAX_SEQS, MAX_TOKENS);
}

static int parse_cfg(int argc, char **argv, struct fill_cfg *cfg)
{
	static const struct option opts[] = {
		{ "seqs", required_argument, NULL, 'n' },
		{ "tokens", required_argument, NULL, 't' },
		{ "connect", required_argument, NULL, 'c' },
		{ "embedded", no_argument, NULL, 'e' },
		{ "hold", required_argument, NULL, 'H' },
		{ "seed", required_argument, NULL, 's' },
		{ "layers", required_argument, NULL, 'l' },
		{ "kv-heads", required_argument, NULL, 'k' },
		{ "dim", required_argument, NULL, 'd' },
		{ "format", required_argument, NULL, 'f' },
		{ "codec", required_argument, NULL, 'C' },
		{ "page-tokens", required_argument, NULL, 'p' },
		{ "inject-ber", required_argument, NULL, 'b' },
		{ "inject-flips", required_argument, NULL, 'F' },
		{ "inject-seed", required_argument, NULL, 'S' },
		{ "inject-channel", required_argument, NULL, 'X' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	uint64_t v;
	int o;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'n':
			if (bench_parse_u64("seqs", optarg, 1, MAX_SEQS, &v))
				return 2;
			cfg->seqs = (uint32_t)v;
			break;
		case 't':
			if (bench_parse_u64("tokens", optarg, 1, MAX_TOKENS,
					    &v))
				return 2;
			cfg->tokens = (uint32_t)v;
			break;
		case 'c':
			cfg->connect = optarg;
			break;
		case 'e':
			cfg->embedded = 1;
			break;
		case 'H':
			if (bench_parse_double("hold", optarg, &cfg->hold))
				return 2;
			if (!(cfg->hold >= 0 && cfg->hold <= MAX_HOLD_S)) {
				fprintf(stderr,
					"kvmem-bench: bad --hold '%s': must be "
					"0..%.0f seconds\n",
					optarg, MAX_HOLD_S);
				return 2;
			}
			break;
		case 's':
			if (bench_parse_u64("seed", optarg, 0, UINT64_MAX,
					    &cfg->seed))
				return 2;
			break;
		case 'l':
			if (bench_parse_u64("layers", optarg, 1, 4096, &v))
				return 2;
			cfg->layers = (uint32_t)v;
			break;
		case 'k':
			if (bench_parse_u64("kv-heads", optarg, 1, 1024, &v))
				return 2;
			cfg->kv_heads = (uint32_t)v;
			break;
		case 'd':
			if (bench_parse_u64("dim", optarg, 1, 1024, &v))
				return 2;
			cfg->dim = (uint32_t)v;
			break;
		case 'f':
			if (bench_parse_format(optarg, &cfg->format))
				return 2;
			break;
		case 'C':
			if (bench_parse_codec(optarg, &cfg->codec))
				return 2;
			break;
		case 'p':
			if (bench_parse_u64("page-tokens", optarg, 1, 4096, &v))
				return 2;
			cfg->page_tokens = (uint32_t)v;
			break;
		case 'b':
			if (bench_parse_double("inject-ber", optarg, &cfg->ber))
				return 2;
			if (!(cfg->ber >= 0 && cfg->ber <= 1)) {
				fprintf(stderr,
					"kvmem-bench: bad --inject-ber '%s': "
					"must be 0..1\n",
					optarg);
				return 2;
			}
			if (cfg->inject == INJECT_FLIPS)
				goto both;
			cfg->inject = INJECT_BER;
			break;
		case 'F':
			if (bench_parse_u64("inject-flips", optarg, 1, 72, &v))
				return 2;
			cfg->flips = (uint32_t)v;
			if (cfg->inject == INJECT_BER)
				goto both;
			cfg->inject = INJECT_FLIPS;
			break;
		case 'X':
			if (kvmem_inject_parse(&cfg->chan, optarg)) {
				fprintf(stderr,
					"kvmem-bench: bad --inject-channel "
					"'%s': kvmem-ecc(1) lists the fault "
					"models\n",
					optarg);
				return 2;
			}
			cfg->channel = optarg;
			break;
		case 'S':
			if (bench_parse_u64("inject-seed", optarg, 0,
					    UINT64_MAX, &cfg->inject_seed))
				return 2;
			cfg->inject_seed_set = 1;
			break;
		case 'j':
			cfg->json = 1;
			break;
		case 'h':
			fill_usage(stdout);
			return 1;
		default:
			fill_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		fill_usage(stderr);
		return 2;
	}
	if (!cfg->seqs || !cfg->tokens) {
		fprintf(stderr,
			"kvmem-bench: fill needs --seqs and --tokens\n");
		return 2;
	}
	if (cfg->embedded && cfg->connect) {
		fprintf(stderr,
			"kvmem-bench: --embedded and --connect: pick one\n");
		return 2;
	}
	if (cfg->channel && cfg->inject == INJECT_FLIPS) {
		fprintf(stderr, "kvmem-bench: --inject-channel and "
				"--inject-flips: pick one\n");
		return 2;
	}
	if (cfg->channel && cfg->chan.mode == KVMEM_INJECT_EXACT) {
		if (cfg->inject == INJECT_BER)
			goto exact;
		cfg->inject = INJECT_FLIPS;
		cfg->flips = cfg->chan.k;
	} else if (cfg->channel && cfg->inject != INJECT_BER) {
		fprintf(stderr,
			"kvmem-bench: --inject-channel %s needs "
			"--inject-ber, its rate\n",
			cfg->channel);
		return 2;
	}
	if (cfg->flips > kvmem_codec_get(cfg->codec)->code_bits) {
		fprintf(stderr,
			"kvmem-bench: bad flips per word %u: %s words have %u "
			"bits\n",
			cfg->flips, kvmem_codec_get(cfg->codec)->name,
			kvmem_codec_get(cfg->codec)->code_bits);
		return 2;
	}
	if (!cfg->inject_seed_set)
		cfg->inject_seed = cfg->seed;
	return 0;
exact:
	fprintf(stderr, "kvmem-bench: bad --inject-channel exact:K with "
			"--inject-ber: K is a count of flips, not a rate\n");
	return 2;
both:
	fprintf(stderr,
		"kvmem-bench: --inject-ber and --inject-flips: pick one\n");
	return 2;
}

static uint64_t mix(uint64_t seed, uint64_t a, uint64_t b)
{
	uint64_t x =
		seed ^ a * 0x9e3779b97f4a7c15ull ^ b * 0xc2b2ae3d27d4eb4full;

	return kvmem_splitmix64(&x);
}

/* Sequence @i's K and V, every token and layer, uniform in [-1, 1). */
static void gen(struct fill *f, uint32_t i)
{
	const size_t n = (size_t)f->cfg->tokens * f->g.layers * f->tok;
	struct kvmem_rng r;
	size_t j;

	kvmem_rng_seed(&r, mix(f->cfg->seed, i, 0));
	for (j = 0; j < n; j++) {
		f->k[j] = (float)(kvmem_rng_next(&r) >> 40) * 0x1p-23f - 1.0f;
		f->v[j] = (float)(kvmem_rng_next(&r) >> 40) * 0x1p-23f - 1.0f;
	}
}

/*
 * Bytes of pages one sequence takes in one layer, at most: its sink and
 * tail pages (hot) and its sealed pages.
 */
static uint64_t layer_bytes(const struct fill *f)
{
	const uint32_t T = f->cfg->tokens, S = f->g.sink_tokens;
	const uint32_t P = f->g.tokens_per_page;
	uint64_t sealed = T > S ? (T - S + P - 1) / P : 0;

	return 2 * (uint64_t)f->lay[1].size + sealed * f->lay[0].size;
}

static uint64_t arena_bytes(const struct fill *f, uint32_t seqs)
{
	uint64_t b = (uint64_t)seqs * f->g.layers * layer_bytes(f) +
		     SPARE_PAGES * ((uint64_t)f->lay[0].size + f->lay[1].size);

	return (b + KVMEM_SLOT_UNIT - 1) / KVMEM_SLOT_UNIT * KVMEM_SLOT_UNIT;
}

static int fill_init(struct fill *f, const struct fill_cfg *cfg)
{
	const size_t T = cfg->tokens;
	char why[160] = "";

	memset(f, 0, sizeof(*f));
	f->cfg = cfg;
	f->g.layers = cfg->layers;
	f->g.kv_heads = cfg->kv_heads;
	f->g.head_dim = cfg->dim;
	kvmem_geometry_default(&f->g);
	f->g.tokens_per_page = cfg->page_tokens;
	if (f->g.sink_tokens > f->g.tokens_per_page)
		f->g.sink_tokens = f->g.tokens_per_page;
	if (cfg->dim % f->g.group_size)
		f->g.group_size = cfg->dim;
	f->g.format = (uint8_t)cfg->format;
	f->g.codec = (uint8_t)cfg->codec;
	if (kvmem_geometry_explain(&f->g, why, sizeof(why)) ||
	    kvmem_page_layout(&f->g, 0, &f->lay[0]) ||
	    kvmem_page_layout(&f->g, 1, &f->lay[1])) {
		fprintf(stderr, "kvmem-bench: that geometry is not valid: %s\n",
			why);
		return -EINVAL;
	}
	f->tok = (size_t)cfg->kv_heads * cfg->dim;
	f->max_pages = 2 + (cfg->tokens + f->g.tokens_per_page - 1) /
				   f->g.tokens_per_page;
	f->seqs = calloc(cfg->seqs, sizeof(*f->seqs));
	f->k = malloc(T * cfg->layers * f->tok * sizeof(float));
	f->v = malloc(T * cfg->layers * f->tok * sizeof(float));
	f->rk = malloc(T * f->tok * sizeof(float));
	f->rv = malloc(T * f->tok * sizeof(float));
	f->ek = malloc(T * f->tok * sizeof(float));
	f->ev = malloc(T * f->tok * sizeof(float));
	f->flags = malloc(2 * T * f->tok);
	f->copy = malloc(f->lay[0].size > f->lay[1].size ? f->lay[0].size
							 : f->lay[1].size);
	f->pk = malloc((size_t)f->g.tokens_per_page * f->tok * sizeof(float));
	f->pv = malloc((size_t)f->g.tokens_per_page * f->tok * sizeof(float));
	f->perased = malloc(2 * (size_t)f->g.tokens_per_page * f->tok);
	f->pd = calloc(f->max_pages, sizeof(*f->pd));
	f->rd = calloc(f->max_pages, sizeof(*f->rd));
	if (!f->seqs || !f->k || !f->v || !f->rk || !f->rv || !f->ek ||
	    !f->ev || !f->flags || !f->copy || !f->pk || !f->pv ||
	    !f->perased || !f->pd || !f->rd) {
		fprintf(stderr, "kvmem-bench: out of memory for %u tokens\n",
			cfg->tokens);
		return -ENOMEM;
	}
	f->values = (uint64_t)cfg->seqs * T * cfg->layers * f->tok * 2;
	return 0;
}

static void fill_free(struct fill *f)
{
	kvmem_close(f->c);
	kvmem_close(f->ref);
	free(f->seqs);
	free(f->k);
	free(f->v);
	free(f->rk);
	free(f->rv);
	free(f->ek);
	free(f->ev);
	free(f->flags);
	free(f->copy);
	free(f->pk);
	free(f->pv);
	free(f->perased);
	free(f->pd);
	free(f->rd);
}

static int fill_open(struct fill *f)
{
	const struct fill_cfg *cfg = f->cfg;
	struct kvmem_connect_opts o = {
		.quota_bytes = arena_bytes(f, cfg->seqs),
	};
	char path[108];
	const char *sock = cfg->connect;
	int ret;

	if (cfg->embedded) {
		snprintf(f->where, sizeof(f->where), "embedded cache");
		ret = kvmem_open_embedded(&f->g, o.quota_bytes, &f->c);
		if (ret)
			fprintf(stderr,
				"kvmem-bench: an embedded cache of %llu MiB: "
				"%s\n",
				(unsigned long long)(o.quota_bytes >> 20),
				kvmem_strerror(ret));
		return ret;
	}
	if (!sock)
		sock = kvmem_socket_path(path, sizeof(path));
	if (!sock) {
		fprintf(stderr, "kvmem-bench: the default socket path is too "
				"long; use --connect\n");
		return -ENAMETOOLONG;
	}
	ret = kvmem_connect(sock, &f->g, &o, &f->c);
	if (ret) {
		fprintf(stderr, "kvmem-bench: %s",
			*kvmem_connect_error() ? kvmem_connect_error()
					       : kvmem_strerror(ret));
		if (ret == -ENOENT || ret == -ECONNREFUSED)
			fprintf(stderr, " (--embedded runs without it)");
		else if (ret == -EDQUOT || ret == -ENOSPC)
			fprintf(stderr,
				" (the run needs %llu MiB: fewer "
				"--seqs or --tokens)",
				(unsigned long long)(o.quota_bytes >> 20));
		fputc('\n', stderr);
		return ret;
	}
	snprintf(f->where, sizeof(f->where), "kvmemd at %s, session %u", sock,
		 kvmem_session_id(f->c));
	return 0;
}

static int seq_fail(const char *what, uint32_t i, int err)
{
	fprintf(stderr, "kvmem-bench: %s sequence %u: %s\n", what, i,
		err == -ENOMEM ? "the arena is full or memory ran out"
			       : kvmem_strerror(err));
	return err;
}

/* Flip the payload bits of @s's sealed pages as --inject-* say. */
static int inject_seq(struct fill *f, struct kvmem_seq *s, uint32_t i)
{
	const struct kvmem_page_layout *l = &f->lay[0];
	const size_t nwords =
		(size_t)f->g.kv_heads * f->g.tokens_per_page * l->row_words;
	struct kvmem_inject_params p;
	uint32_t layer;
	int n, j, side, b;

	kvmem_inject_params_for_codec(&p, f->g.codec, f->cfg->ber, 0);
	if (f->cfg->inject == INJECT_FLIPS) {
		p.mode = KVMEM_INJECT_EXACT;
		p.k = f->cfg->flips;
	} else if (f->cfg->channel) {
		p.mode = f->cfg->chan.mode;
		p.k = f->cfg->chan.k;
	}
	for (layer = 0; layer < f->g.layers; layer++) {
		n = kvmem_seq_pages(s, layer, f->pd, f->max_pages);
		if (n < 0 || (uint32_t)n > f->max_pages)
			return -EPROTO;
		for (j = 0; j < n; j++) {
			if (!f->pd[j].sealed || f->pd[j].hot)
				continue;
			for (side = 0; side < 2; side++) {
				struct kvmem_inject_report rep = { 0 };
				uint8_t *at = (uint8_t *)f->pd[j].data +
					      (side ? l->v_off : l->k_off);

				p.seed = mix(f->cfg->inject_seed,
					     (uint64_t)i << 32 | layer,
					     (uint64_t)j << 1 | (uint64_t)side);
				if (kvmem_inject(at, nwords, &p, &rep))
					return -EINVAL;
				f->inject_words += nwords;
				f->rep.bits += rep.bits;
				f->rep.words += rep.words;
				for (b = 0; b < KVMEM_INJECT_HIST; b++)
					f->rep.by_flips[b] += rep.by_flips[b];
			}
		}
	}
	return 0;
}

/* Write, inject and release every sequence. */
static int fill_write(struct fill *f)
{
	const struct fill_cfg *cfg = f->cfg;
	struct kvmem_cache_stats st;
	uint64_t t0;
	uint32_t i;
	int ret;

	for (i = 0; i < cfg->seqs; i++) {
		gen(f, i);
		t0 = bench_now_ns();
		ret = kvmem_seq_create(f->c, &f->seqs[i]);
		if (ret)
			return seq_fail("creating", i, ret);
		ret = kvmem_seq_append_all(f->seqs[i], f->k, f->v, cfg->tokens);
		f->write_ns += bench_now_ns() - t0;
		if (ret)
			return seq_fail("writing", i, ret);
	}
	for (i = 0; i < cfg->seqs && cfg->inject; i++) {
		ret = inject_seq(f, f->seqs[i], i);
		if (ret)
			return seq_fail("injecting into", i, ret);
	}
	t0 = bench_now_ns();
	for (i = 0; i < cfg->seqs; i++) {
		ret = kvmem_seq_release(f->seqs[i]);
		if (ret)
			return seq_fail("releasing", i, ret);
	}
	f->write_ns += bench_now_ns() - t0;
	/* Releases are only queued: the stats op, which waits, takes them
	 * to the daemon, so they are in effect before the hold begins. */
	if (!cfg->embedded) {
		struct kvmem_stats ds;

		ret = kvmem_daemon_stats(f->c, &ds);
		if (ret) {
			fprintf(stderr, "kvmem-bench: kvmemd: %s\n",
				kvmem_strerror(ret));
			return ret;
		}
	}
	kvmem_cache_stats(f->c, &st);
	if (st.ring_errors) {
		fprintf(stderr,
			"kvmem-bench: kvmemd failed %llu of the ops "
			"that wrote and released the sequences\n",
			(unsigned long long)st.ring_errors);
		return -EIO;
	}
	return 0;
}

/* Wait @sec seconds, or until SIGUSR1 (blocked by the caller). */
static void fill_hold(struct fill *f)
{
	const uint64_t t0 = bench_now_ns();
	const uint64_t end = t0 + (uint64_t)(f->cfg->hold * 1e9);
	struct timespec ts;
	sigset_t set;
	uint64_t now;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	if (f->cfg->embedded)
		fprintf(stderr,
			"kvmem-bench: holding %u seqs for %g s (embedded, pid "
			"%d); SIGUSR1 ends the hold\n",
			f->cfg->seqs, f->cfg->hold, (int)getpid());
	else
		fprintf(stderr,
			"kvmem-bench: holding %u seqs for %g s (session %u, "
			"pid %d); SIGUSR1 ends the hold\n",
			f->cfg->seqs, f->cfg->hold, kvmem_session_id(f->c),
			(int)getpid());
	while ((now = bench_now_ns()) < end) {
		ts.tv_sec = (time_t)((end - now) / 1000000000u);
		ts.tv_nsec = (long)((end - now) % 1000000000u);
		if (sigtimedwait(&set, NULL, &ts) == SIGUSR1)
			break;
	}
	f->hold_ns = bench_now_ns() - t0;
}

/*
 * Does value @c ([kv_head][dim]) of token @t of K or V (@is_v) depend on a
 * codeword that differs between page @p and its reference @r: its payload
 * words, or the metadata words of its scale (kvmem/page.h: scale i is bits
 * [16 i, 16 i + 16) of one FP16 bitstream in golay24 words, so in words
 * 16 i / 12 to (16 i + 15) / 12)?
 */
static int damaged(const struct fill *f, const struct kvmem_page_layout *l,
		   const uint8_t *p, const uint8_t *r, int is_v, size_t t,
		   size_t c)
{
	const struct kvmem_codec_info *ci = kvmem_codec_get(l->codec);
	const struct kvmem_codec_info *mi =
		kvmem_codec_get(KVMEM_PAGE_META_CODEC);
	const size_t bits = kvmem_format_get(l->format)->bits;
	const size_t sbits = kvmem_format_get(KVMEM_FMT_FP16)->bits;
	const size_t D = f->g.head_dim, P = f->g.tokens_per_page;
	const size_t h = c / D, d = c % D, G = f->g.group_size;
	size_t w0 = d * bits / ci->data_bits;
	size_t w1 = (d * bits + bits - 1) / ci->data_bits;
	size_t at = (is_v ? l->v_off : l->k_off) + (h * P + t) * l->row_bytes +
		    w0 * ci->word_bytes;

	if (memcmp(p + at, r + at, (w1 - w0 + 1) * ci->word_bytes))
		return 1;
	if (!l->nscales_k)
		return 0;
	if (!is_v && l->key_scales == KVMEM_SCALES_CHANNEL)
		at = h * D + d;
	else
		at = (is_v ? l->nscales_k : 0) + (h * P + t) * (D / G) + d / G;
	w0 = at * sbits / mi->data_bits;
	w1 = (at * sbits + sbits - 1) / mi->data_bits;
	at = l->scales_off + w0 * mi->word_bytes;
	return memcmp(p + at, r + at, (w1 - w0 + 1) * mi->word_bytes) != 0;
}

/* Flag the values of page @rd's tokens from its decoded copy. */
static void flag_page(struct fill *f, const struct kvmem_page_layout *l,
		      const struct kvmem_page_desc *rd)
{
	const size_t n = rd->ntokens * f->tok;
	size_t j;
	int is_v;

	for (is_v = 0; is_v < 2; is_v++) {
		uint8_t *fl = f->flags + ((size_t)is_v * f->cfg->tokens +
					  rd->token_start) *
						 f->tok;
		const uint8_t *erased = f->perased + is_v * n;

		for (j = 0; j < n; j++)
			if (erased[j])
				fl[j] = V_ERASED;
			else if (damaged(f, l, f->copy, rd->data, is_v,
					 j / f->tok, j % f->tok))
				fl[j] = V_DAMAGED;
	}
}

/*
 * Flag the values of one layer whose pages differ from the reference's.
 * Return: 1 when some did (f->flags filled in), 0 when none, < 0 when the
 * two page tables do not match.
 */
static int flag_layer(struct fill *f, struct kvmem_seq *s,
		      struct kvmem_seq *ref, uint32_t layer)
{
	int n, m, j, any = 0;

	n = kvmem_seq_pages(s, layer, f->pd, f->max_pages);
	m = kvmem_seq_pages(ref, layer, f->rd, f->max_pages);
	if (n < 0 || n != m || (uint32_t)n > f->max_pages)
		return -EPROTO;
	for (j = 0; j < n; j++) {
		const struct kvmem_page_desc *pd = &f->pd[j], *rd = &f->rd[j];
		const struct kvmem_page_layout *l = &f->lay[rd->hot];

		if (pd->hot != rd->hot || pd->ntokens != rd->ntokens ||
		    pd->token_start != rd->token_start ||
		    rd->token_start + rd->ntokens > f->cfg->tokens)
			return -EPROTO;
		if (!memcmp((uint8_t *)pd->data + l->scales_off,
			    (uint8_t *)rd->data + l->scales_off,
			    l->size - l->scales_off))
			continue;
		if (!any) {
			memset(f->flags, V_CLEAN,
			       2 * (size_t)f->cfg->tokens * f->tok);
			any = 1;
		}
		/* With the reference's header: the page table, not the
		 * header, says what a page is, as attention reads it. */
		memcpy(f->copy, pd->data, l->size);
		memcpy(f->copy, rd->data, l->scales_off);
		if (kvmem_page_decode(f->copy, &f->g, f->pk, f->pv, f->perased,
				      NULL) != (int)rd->ntokens)
			return -EPROTO;
		flag_page(f, l, rd);
	}
	return any;
}

static void show_wrong(const struct fill *f, uint32_t i, uint32_t layer,
		       int is_v, size_t at, float got, float want)
{
	const size_t D = f->g.head_dim;

	if (f->wrong > SHOW_WRONG)
		return;
	if (f->wrong == SHOW_WRONG) {
		fprintf(stderr, "kvmem-bench: more wrong values, counted "
				"only\n");
		return;
	}
	fprintf(stderr,
		"kvmem-bench: wrong: seq %u layer %u token %zu %c head %zu "
		"dim %zu: read %.9g, expected %.9g\n",
		i, layer, at / f->tok, is_v ? 'V' : 'K', at % f->tok / D,
		at % D, (double)got, (double)want);
}

/* Count the values of one layer: f->rk/rv read, f->ek/ev expected. */
static void classify(struct fill *f, uint32_t i, uint32_t layer, int flagged)
{
	const size_t n = (size_t)f->cfg->tokens * f->tok;
	size_t j;
	int is_v;

	for (is_v = 0; is_v < 2; is_v++) {
		const float *got = is_v ? f->rv : f->rk;
		const float *want = is_v ? f->ev : f->ek;
		const uint8_t *fl = f->flags + is_v * n;

		if (!flagged && !memcmp(got, want, n * sizeof(float))) {
			f->exact += n;
			continue;
		}
		for (j = 0; j < n; j++) {
			uint8_t x = flagged ? fl[j] : V_CLEAN;

			if (x == V_ERASED) {
				f->rebuilt++;
			} else if (memcmp(&got[j], &want[j], sizeof(float))) {
				show_wrong(f, i, layer, is_v, j, got[j],
					   want[j]);
				f->wrong++;
			} else if (x == V_DAMAGED) {
				f->corrected++;
			} else {
				f->exact++;
			}
		}
	}
}

/* Read sequence @i back and compare it with the reference. */
static int read_seq(struct fill *f, uint32_t i)
{
	const uint32_t T = f->cfg->tokens;
	struct kvmem_seq *s = f->seqs[i], *ref = NULL;
	struct kvmem_page_counts pc;
	uint64_t t0;
	uint32_t layer;
	int ret, flagged;

	gen(f, i);
	t0 = bench_now_ns();
	ret = kvmem_seq_create(f->ref, &ref);
	if (!ret)
		ret = kvmem_seq_append_all(ref, f->k, f->v, T);
	f->ref_write_ns += bench_now_ns() - t0;
	if (ret) {
		fprintf(stderr,
			"kvmem-bench: the reference of sequence %u: "
			"%s\n",
			i, kvmem_strerror(ret));
		goto out;
	}
	t0 = bench_now_ns();
	ret = kvmem_seq_acquire(s);
	f->read_ns += bench_now_ns() - t0;
	if (ret) {
		seq_fail("acquiring", i, ret);
		goto out;
	}
	for (layer = 0; layer < f->g.layers; layer++) {
		/* Before the read: see the header comment. */
		flagged = flag_layer(f, s, ref, layer);
		if (flagged < 0) {
			fprintf(stderr,
				"kvmem-bench: sequence %u layer %u: its pages "
				"do not match the reference's\n",
				i, layer);
			ret = flagged;
			goto out;
		}
		t0 = bench_now_ns();
		ret = kvmem_seq_read(s, layer, 0, T, KVMEM_ERASE_INTERPOLATE,
				     f->rk, f->rv, &pc);
		f->read_ns += bench_now_ns() - t0;
		if (ret) {
			seq_fail("reading", i, ret);
			goto out;
		}
		f->words_corrected += pc.header.corrected +
				      pc.scales.corrected +
				      pc.payload.corrected;
		f->words_uncorrectable += pc.header.uncorrectable +
					  pc.scales.uncorrectable +
					  pc.payload.uncorrectable;
		t0 = bench_now_ns();
		ret = kvmem_seq_read(ref, layer, 0, T, KVMEM_ERASE_INTERPOLATE,
				     f->ek, f->ev, NULL);
		f->ref_read_ns += bench_now_ns() - t0;
		if (ret) {
			fprintf(stderr,
				"kvmem-bench: the reference of "
				"sequence %u: %s\n",
				i, kvmem_strerror(ret));
			goto out;
		}
		classify(f, i, layer, flagged);
	}
out:
	kvmem_seq_free(ref);
	return ret;
}

static int fill_read(struct fill *f)
{
	uint32_t i;
	int ret;

	ret = kvmem_open_embedded(&f->g, arena_bytes(f, 1), &f->ref);
	if (ret) {
		fprintf(stderr, "kvmem-bench: the reference cache: %s\n",
			kvmem_strerror(ret));
		return ret;
	}
	for (i = 0; i < f->cfg->seqs; i++) {
		ret = read_seq(f, i);
		if (ret)
			return ret;
		kvmem_seq_free(f->seqs[i]);
		f->seqs[i] = NULL;
	}
	return 0;
}

static double secs(uint64_t ns)
{
	return (double)ns / 1e9;
}

static double mvals(const struct fill *f, uint64_t ns)
{
	return ns ? (double)f->values / 1e6 / secs(ns) : 0;
}

static void print_json(const struct fill *f)
{
	const struct fill_cfg *cfg = f->cfg;
	int b;

	printf("{\"mode\": \"%s\", \"session\": %u, \"seqs\": %u, "
	       "\"tokens\": %u, \"layers\": %u, \"kv_heads\": %u, "
	       "\"dim\": %u, \"format\": \"%s\", \"codec\": \"%s\", "
	       "\"page_tokens\": %u, \"seed\": %llu, "
	       "\"values\": %llu, \"exact\": %llu, \"corrected\": %llu, "
	       "\"rebuilt\": %llu, \"wrong\": %llu, "
	       "\"words_corrected\": %llu, \"words_uncorrectable\": %llu, "
	       "\"write_s\": %.6f, \"read_s\": %.6f, \"hold_s\": %.6f, "
	       "\"ref_write_s\": %.6f, \"ref_read_s\": %.6f, ",
	       cfg->embedded ? "embedded" : "kvmemd", kvmem_session_id(f->c),
	       cfg->seqs, cfg->tokens, cfg->layers, cfg->kv_heads, cfg->dim,
	       kvmem_format_get(cfg->format)->name,
	       kvmem_codec_get(cfg->codec)->name, cfg->page_tokens,
	       (unsigned long long)cfg->seed, (unsigned long long)f->values,
	       (unsigned long long)f->exact, (unsigned long long)f->corrected,
	       (unsigned long long)f->rebuilt, (unsigned long long)f->wrong,
	       (unsigned long long)f->words_corrected,
	       (unsigned long long)f->words_uncorrectable, secs(f->write_ns),
	       secs(f->read_ns), secs(f->hold_ns), secs(f->ref_write_ns),
	       secs(f->ref_read_ns));
	printf("\"injected\": {\"mode\": \"%s\", \"ber\": %g, \"flips\": %u, "
	       "\"seed\": %llu, \"words\": %llu, \"bits\": %llu, "
	       "\"by_flips\": [%llu",
	       cfg->channel && cfg->inject == INJECT_BER ? cfg->channel
	       : cfg->inject == INJECT_BER		 ? "ber"
	       : cfg->inject == INJECT_FLIPS		 ? "flips"
							 : "none",
	       cfg->ber, cfg->flips, (unsigned long long)cfg->inject_seed,
	       (unsigned long long)f->inject_words,
	       (unsigned long long)f->rep.bits,
	       (unsigned long long)(f->inject_words - f->rep.words));
	for (b = 1; b < KVMEM_INJECT_HIST; b++)
		printf(", %llu", (unsigned long long)f->rep.by_flips[b]);
	printf("]}}\n");
}

static void print_table(const struct fill *f)
{
	const struct fill_cfg *cfg = f->cfg;
	int b;

	printf("kvmem-bench fill: %u seqs x %u tokens, %u layers, %u KV "
	       "heads, dim %u, %s + %s,\n"
	       "%u tokens/page; %s\n\n",
	       cfg->seqs, cfg->tokens, cfg->layers, cfg->kv_heads, cfg->dim,
	       kvmem_format_get(cfg->format)->name,
	       kvmem_codec_get(cfg->codec)->name, cfg->page_tokens, f->where);
	printf("%-36s %10s %12s\n", "", "seconds", "Mvalues/s");
	printf("%-36s %10.3f %12.1f\n", "write, embedded reference (baseline)",
	       secs(f->ref_write_ns), mvals(f, f->ref_write_ns));
	printf("%-36s %10.3f %12.1f\n",
	       cfg->embedded ? "write + release, embedded"
			     : "write + release, kvmemd",
	       secs(f->write_ns), mvals(f, f->write_ns));
	printf("%-36s %10.3f %12.1f\n", "read, embedded reference (baseline)",
	       secs(f->ref_read_ns), mvals(f, f->ref_read_ns));
	printf("%-36s %10.3f %12.1f\n",
	       cfg->embedded ? "acquire + read, embedded"
			     : "acquire + read, kvmemd",
	       secs(f->read_ns), mvals(f, f->read_ns));
	printf("%-36s %10.3f\n\n", "held", secs(f->hold_ns));
	if (cfg->inject) {
		printf("injected: %llu bits into %llu of %llu payload words "
		       "(by flips:",
		       (unsigned long long)f->rep.bits,
		       (unsigned long long)f->rep.words,
		       (unsigned long long)f->inject_words);
		for (b = 1; b < KVMEM_INJECT_HIST; b++)
			printf(" %llu", (unsigned long long)f->rep.by_flips[b]);
		printf(")\n");
	}
	printf("decode: %llu words corrected, %llu uncorrectable\n\n",
	       (unsigned long long)f->words_corrected,
	       (unsigned long long)f->words_uncorrectable);
	printf("%-10s %14llu\n", "values", (unsigned long long)f->values);
	printf("%-10s %14llu\n", "exact", (unsigned long long)f->exact);
	printf("%-10s %14llu\n", "corrected", (unsigned long long)f->corrected);
	printf("%-10s %14llu\n", "rebuilt", (unsigned long long)f->rebuilt);
	printf("%-10s %14llu%s\n", "wrong", (unsigned long long)f->wrong,
	       f->wrong ? "   FAILED" : "");
}

static int run_fill(int argc, char **argv)
{
	struct fill_cfg cfg = {
		.layers = 2,
		.kv_heads = 8,
		.dim = 128,
		.page_tokens = 32,
		.format = KVMEM_FMT_INT4,
		.codec = KVMEM_CODEC_H84,
		.seed = 1,
	};
	struct fill f;
	sigset_t set;
	int ret;

	ret = parse_cfg(argc, argv, &cfg);
	if (ret)
		return ret == 1 ? 0 : ret;
	if (cfg.hold > 0) {
		sigemptyset(&set);
		sigaddset(&set, SIGUSR1);
		sigprocmask(SIG_BLOCK, &set, NULL);
	}
	ret = fill_init(&f, &cfg);
	if (ret) {
		fill_free(&f);
		return ret == -EINVAL ? 2 : EXIT_FAILED;
	}
	ret = fill_open(&f);
	if (!ret)
		ret = fill_write(&f);
	if (!ret && cfg.hold > 0)
		fill_hold(&f);
	if (!ret)
		ret = fill_read(&f);
	if (!ret) {
		if (cfg.json)
			print_json(&f);
		else
			print_table(&f);
	}
	fill_free(&f);
	if (ret)
		return EXIT_FAILED;
	return f.wrong ? EXIT_WRONG : 0;
}

const struct bench_cmd bench_fill = {
	.name = "fill",
	.summary = "write, hold and read back K/V; fail on a wrong value",
	.run = run_fill,
};
