/* SPDX-License-Identifier: MIT */
/*
 * bench-record.c - what keeping sessions across a crash costs, and how soon
 * kvmemd serves again after one
 *
 * With daemon.keep_on_crash (kvmemd(8), RESTARTS), kvmemd rewrites a
 * session's record after every loop iteration that moved its tables or its
 * ring, and shows the client the completions of that iteration only once
 * the record is written. Two kvmemds of one binary run side by side, each
 * with a descriptor store played here (own_kvmemd_start_stored()), so that
 * both keep sessions and send their memfds to the store: the only
 * difference is daemon.keep_on_crash, yes on one and no on the other.
 *
 *   append  --rounds rounds on each daemon, in turns (one, other, other,
 *           one, ...: a drift of the machine weighs on both alike), each
 *           a new session that appends sequences holding --append-bytes
 *           of sealed pages with kvmem_seq_append_all(), a page of every
 *           layer a call, so that each call seals one page per layer;
 *           creates and appends are timed. Tokens/s and MB/s (K and V as
 *           given, float32) are the median round's.
 *   NOP     after its appends, each round's session, holding what it
 *           appended, makes --nops/--rounds NOP round trips, one at a
 *           time, each timed; p50 and p99 over every round of a daemon.
 *           A NOP moves the ring: with the record, its completion waits
 *           for the record of the session's tables to be written.
 * The ratios are the daemon with the record over the one without.
 *
 *   crash   on the daemon with the record: --sessions sessions hold
 *           --kept-bytes of sealed pages between them (full sequences of
 *           SEQ_PAGES pages a layer); once the store holds their memfds,
 *           kill -9, and kvmemd started again in the same directory with
 *           the store passed back as systemd passes it. Timed from the
 *           fork: to its READY=1 (it has read the records and checked
 *           every sealed page by then), and to kvmem_reconnect() having
 *           returned 0 for every session, one after the other. Then the
 *           first and the last sequence of every session are read with
 *           kvmem_seq_read() and compared bit for bit with an embedded
 *           cache given the same tokens: any difference fails the run.
 *
 * The geometry is kvmem-bench offload's: 8 layers x 8 KV heads x 128
 * dims, int4 + h84, 32 tokens a page. Sequence j's tokens are those of
 * one random buffer from token j on, so that no two sequences hold the
 * same K/V at the same place and a page served to the wrong one shows.
 * As in kvmem-bench ring, this program runs on the first of two CPUs and
 * both daemons (their workers, which write the records, too) on the
 * second; --no-pin leaves it to the scheduler.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmem/kvmem.h"
#include "bench.h"
#include "kvmem-private.h"
#include "own-kvmemd.h"

#define LAYERS 8
#define KV_HEADS 8
#define HEAD_DIM 128
#define SEQ_PAGES 16 /* sealed pages per layer of a sequence */
#define DEFAULT_ROUNDS 5u
#define MAX_ROUNDS 1000u
#define DEFAULT_APPEND (64ull << 20)
#define DEFAULT_NOPS 5000u
#define MAX_NOPS 10000000u
#define DEFAULT_KEPT (256ull << 20)
#define MAX_KEPT (16ull << 30)
#define DEFAULT_SESSIONS 4u
/* kvmemd's default daemon.max_sessions_per_uid */
#define MAX_SESSIONS 32u
#define WARM_NOPS 100
/* For READY=1 after the crash: the start, and the check of every page. */
#define READY_MS 60000
#define READY_MS_PER_GIB 60000
/* For the store to hold exactly the sessions' memfds before the kill. */
#define STORED_WAIT_MS 10000
#define STORED_POLL_MS 10

struct record_cfg {
	uint64_t rounds, append, nops, kept, sessions;
	int json, no_pin;
	const char *kvmemd;
};

/* What the run works with. */
struct rec {
	const struct record_cfg *cfg;
	struct kvmem_geometry g;
	size_t row; /* floats per token: layers x kv_heads x dim */
	uint32_t seq_tokens;
	uint64_t seq_bytes; /* sealed and sink pages of a sequence */
	uint32_t round_seqs, kept_seqs; /* a round's; a kept session's */
	uint64_t round_quota, kept_quota;
	float *k, *v; /* seq_tokens + enough shifts, of K and of V */
};

/* One daemon's side of the comparison. */
struct side {
	struct own_kvmemd d;
	double *tokens_s; /* a round each */
	uint64_t *nop, nnop; /* ns */
	double tokens_per_s, mb_per_s, nop_p50_us, nop_p99_us;
	/* the slowest and fastest round's: how noisy the machine was */
	double tokens_min, tokens_max;
};

struct crash {
	uint64_t kept_bytes, kept_seqs, kept_tokens;
	double ready_s, serving_s;
	uint64_t reconnected, verified_seqs, verified_bytes;
};

static void record_usage(FILE *f)
{
	fprintf(f,
		"usage: kvmem-bench record [--rounds N] [--append-bytes SIZE] "
		"[--nops N]\n"
		"                          [--kept-bytes SIZE] [--sessions N] "
		"[--kvmemd PATH]\n"
		"                          [--no-pin] [--json]\n\n"
		"  --rounds N          append rounds on each daemon, 1..%u "
		"(default %u)\n"
		"  --append-bytes SIZE sealed K/V a round appends (default "
		"64M)\n"
		"  --nops N            NOP round trips on each daemon, over "
		"its rounds\n"
		"                      (default %u)\n"
		"  --kept-bytes SIZE   sealed K/V the sessions hold when "
		"kvmemd is killed\n"
		"                      (default 256M, at most 16G)\n"
		"  --sessions N        sessions that hold it, 1..%u (default "
		"%u)\n"
		"  --kvmemd PATH       the kvmemd to start (default: $KVMEMD, "
		"else\n"
		"                      ../daemon/kvmemd next to this program's "
		"directory)\n"
		"  --no-pin            do not pin this program and the kvmemds "
		"it starts to two\n"
		"                      CPUs of their own\n"
		"  --json              one JSON object on stdout\n",
		MAX_ROUNDS, DEFAULT_ROUNDS, DEFAULT_NOPS, MAX_SESSIONS,
		DEFAULT_SESSIONS);
}

static int parse_cfg(int argc, char **argv, struct record_cfg *cfg)
{
	static const struct option opts[] = {
		{ "rounds", required_argument, NULL, 'r' },
		{ "append-bytes", required_argument, NULL, 'a' },
		{ "nops", required_argument, NULL, 'n' },
		{ "kept-bytes", required_argument, NULL, 'K' },
		{ "sessions", required_argument, NULL, 's' },
		{ "kvmemd", required_argument, NULL, 'k' },
		{ "no-pin", no_argument, NULL, 'P' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int o;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'r':
			if (bench_parse_u64("rounds", optarg, 1, MAX_ROUNDS,
					    &cfg->rounds))
				return 2;
			break;
		case 'a':
			if (bench_parse_size("append-bytes", optarg, 1,
					     MAX_KEPT, &cfg->append))
				return 2;
			break;
		case 'n':
			if (bench_parse_u64("nops", optarg, 1, MAX_NOPS,
					    &cfg->nops))
				return 2;
			break;
		case 'K':
			if (bench_parse_size("kept-bytes", optarg, 1, MAX_KEPT,
					     &cfg->kept))
				return 2;
			break;
		case 's':
			if (bench_parse_u64("sessions", optarg, 1, MAX_SESSIONS,
					    &cfg->sessions))
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
			record_usage(stdout);
			return 1;
		default:
			record_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		record_usage(stderr);
		return 2;
	}
	if (cfg->nops < cfg->rounds) {
		fprintf(stderr,
			"kvmem-bench: --nops must be at least --rounds (%llu): "
			"a NOP a round\n",
			(unsigned long long)cfg->rounds);
		return 2;
	}
	return 0;
}

/* A session's quota for @seqs sequences: their pages, a tail page per
 * layer on its way to its seal, and room for the arena's own. */
static uint64_t quota_for(const struct rec *x, uint32_t seqs, size_t hot)
{
	uint64_t q = seqs * x->seq_bytes + 2 * LAYERS * hot;

	q += q / 8 + (8ull << 20);
	return (q + (1ull << 20) - 1) & ~((1ull << 20) - 1);
}

/* The geometry, the sizes that follow from it, and the tokens. */
static int rec_init(struct rec *x, const struct record_cfg *cfg)
{
	struct kvmem_page_layout sealed, hot;
	uint64_t shifts, per, need, avail;
	size_t n, i;
	struct kvmem_rng r;

	x->cfg = cfg;
	x->g = (struct kvmem_geometry){ .layers = LAYERS,
					.kv_heads = KV_HEADS,
					.head_dim = HEAD_DIM };
	kvmem_geometry_default(&x->g);
	if (kvmem_page_layout(&x->g, 0, &sealed) ||
	    kvmem_page_layout(&x->g, 1, &hot)) {
		fprintf(stderr, "kvmem-bench: no page layout\n");
		return -EINVAL;
	}
	x->row = (size_t)LAYERS * KV_HEADS * HEAD_DIM;
	x->seq_tokens = x->g.sink_tokens + SEQ_PAGES * x->g.tokens_per_page;
	x->seq_bytes = (uint64_t)LAYERS * (hot.size + SEQ_PAGES * sealed.size);
	x->round_seqs =
		(uint32_t)((cfg->append + x->seq_bytes - 1) / x->seq_bytes);
	per = (cfg->kept + cfg->sessions - 1) / cfg->sessions;
	x->kept_seqs = (uint32_t)((per + x->seq_bytes - 1) / x->seq_bytes);
	x->round_quota = quota_for(x, x->round_seqs, hot.size);
	x->kept_quota = quota_for(x, x->kept_seqs, hot.size);

	/* The arenas are locked in memory: the kept ones, a round's and the
	 * reference's must fit in half of what is available. */
	need = cfg->sessions * x->kept_quota + x->round_quota +
	       2 * x->seq_bytes;
	avail = bench_mem_available();
	if (avail && need > avail / 2) {
		fprintf(stderr,
			"kvmem-bench: %llu MiB of sessions is more than half "
			"the %llu MiB of memory available\n",
			(unsigned long long)(need >> 20),
			(unsigned long long)(avail >> 20));
		return -ENOMEM;
	}
	shifts = cfg->sessions * x->kept_seqs;
	if (shifts < x->round_seqs)
		shifts = x->round_seqs;
	n = (x->seq_tokens + shifts) * x->row;
	x->k = bench_alloc(n * sizeof(float));
	x->v = bench_alloc(n * sizeof(float));
	kvmem_rng_seed(&r, 48);
	for (i = 0; i < n; i++) {
		x->k[i] = bench_rnd_unit(&r);
		x->v[i] = bench_rnd_unit(&r);
	}
	return 0;
}

/* ---- sequences -------------------------------------------------------- */

/*
 * Sequence @j in @c: seq_tokens tokens from token @j of the buffer, the
 * sink and a page of every layer in the first call, a page in each after.
 */
static int seq_fill(const struct rec *x, struct kvmem_cache *c, uint32_t j,
		    struct kvmem_seq **out)
{
	const float *k = x->k + (size_t)j * x->row;
	const float *v = x->v + (size_t)j * x->row;
	uint32_t done = 0, n = x->g.sink_tokens + x->g.tokens_per_page;
	struct kvmem_seq *s;
	int ret;

	ret = kvmem_seq_create(c, &s);
	if (ret) {
		fprintf(stderr, "kvmem-bench: creating sequence %u: %s\n", j,
			kvmem_strerror(ret));
		return ret;
	}
	for (; done < x->seq_tokens && !ret; n = x->g.tokens_per_page) {
		ret = kvmem_seq_append_all(s, k + done * x->row,
					   v + done * x->row, n);
		done += n;
	}
	if (ret) {
		fprintf(stderr, "kvmem-bench: appending to sequence %u: %s\n",
			j, kvmem_strerror(ret));
		kvmem_seq_free(s);
		return ret;
	}
	*out = s;
	return 0;
}


/* ---- the cost of the record ------------------------------------------ */

/* One round on @s's daemon: a session, its appends timed, its NOPs. */
static int round_run(const struct rec *x, struct side *s, uint64_t r)
{
	const uint64_t nops = x->cfg->nops / x->cfg->rounds;
	struct kvmem_connect_opts o = { .quota_bytes = x->round_quota };
	struct kvmem_seq **seqs = calloc(x->round_seqs, sizeof(*seqs));
	struct kvmem_cache *c = NULL;
	uint64_t t, i;
	uint32_t j;
	int ret;

	if (!seqs)
		return -ENOMEM;
	ret = own_kvmemd_connect(s->d.sock, &s->d, &x->g, &o, &c);
	for (i = 0; i < WARM_NOPS && !ret; i++)
		ret = bench_nop(c, i);
	t = bench_now_ns();
	for (j = 0; j < x->round_seqs && !ret; j++)
		ret = seq_fill(x, c, j, &seqs[j]);
	t = bench_now_ns() - t;
	if (!ret)
		s->tokens_s[r] =
			(double)x->round_seqs * x->seq_tokens * 1e9 / (double)t;
	for (i = 0; i < nops && !ret; i++) {
		t = bench_now_ns();
		ret = bench_nop(c, WARM_NOPS + i);
		s->nop[s->nnop++] = bench_now_ns() - t;
	}
	for (j = 0; j < x->round_seqs; j++)
		kvmem_seq_free(seqs[j]);
	free(seqs);
	kvmem_close(c);
	return ret;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The median round's rates, and the NOPs' percentiles. */
static void side_sum(const struct rec *x, struct side *s)
{
	const uint64_t n = x->cfg->rounds;

	qsort(s->tokens_s, n, sizeof(*s->tokens_s), cmp_double);
	s->tokens_min = s->tokens_s[0];
	s->tokens_max = s->tokens_s[n - 1];
	s->tokens_per_s =
		n % 2 ? s->tokens_s[n / 2]
		      : (s->tokens_s[n / 2 - 1] + s->tokens_s[n / 2]) / 2;
	s->mb_per_s =
		s->tokens_per_s * (double)x->row * 2 * sizeof(float) / 1e6;
	s->nop_p50_us = (double)bench_median(s->nop, (uint32_t)s->nnop) / 1e3;
	s->nop_p99_us = (double)s->nop[s->nnop - 1 - s->nnop / 100] / 1e3;
}

/* The rounds in turns: @on (the record) first in even rounds. */
static int compare(const struct rec *x, struct side *on, struct side *off)
{
	uint64_t r;
	int ret = 0;

	for (r = 0; r < x->cfg->rounds && !ret; r++) {
		ret = round_run(x, r % 2 ? off : on, r);
		if (!ret)
			ret = round_run(x, r % 2 ? on : off, r);
	}
	if (ret)
		return ret;
	side_sum(x, on);
	side_sum(x, off);
	return 0;
}

/* ---- the crash -------------------------------------------------------- */

/* Wait until the store holds the memfds of exactly @n sessions. */
static int stored_wait(struct own_kvmemd *d, int n)
{
	int waited, got = own_kvmemd_stored(d, "session-");

	for (waited = 0; got != n && waited < STORED_WAIT_MS;
	     waited += STORED_POLL_MS) {
		bench_sleep_ms(STORED_POLL_MS);
		got = own_kvmemd_stored(d, "session-");
	}
	if (got != n) {
		fprintf(stderr,
			"kvmem-bench: the descriptor store holds %d session "
			"memfds, not the %d of the sessions\n",
			got, n);
		return -EIO;
	}
	return 0;
}

/* Sequence @j as read from @s, and from @ref, bit for bit. Adds the
 * bytes compared to *@bytes. */
static int seq_same(const struct rec *x, struct kvmem_seq *s,
		    struct kvmem_seq *ref, uint32_t j, uint64_t *bytes)
{
	const size_t n = (size_t)x->seq_tokens * KV_HEADS * HEAD_DIM;
	float *buf = malloc(4 * n * sizeof(float));
	uint32_t l;
	int ret = 0;

	if (!buf)
		return -ENOMEM;
	for (l = 0; l < LAYERS && !ret; l++) {
		if (kvmem_seq_len(s, l) != x->seq_tokens) {
			fprintf(stderr,
				"kvmem-bench: sequence %u has %u tokens in "
				"layer %u after the crash, not %u\n",
				j, kvmem_seq_len(s, l), l, x->seq_tokens);
			ret = -EIO;
			break;
		}
		ret = kvmem_seq_read(s, l, 0, x->seq_tokens, 0, buf, buf + n,
				     NULL);
		if (!ret)
			ret = kvmem_seq_read(ref, l, 0, x->seq_tokens, 0,
					     buf + 2 * n, buf + 3 * n, NULL);
		if (ret) {
			fprintf(stderr,
				"kvmem-bench: reading sequence %u, layer %u: "
				"%s\n",
				j, l, kvmem_strerror(ret));
		} else if (memcmp(buf, buf + 2 * n, 2 * n * sizeof(float))) {
			fprintf(stderr,
				"kvmem-bench: sequence %u, layer %u: what "
				"reads back after the crash is not what was "
				"appended\n",
				j, l);
			ret = -EIO;
		} else {
			*bytes += 2 * n * sizeof(float);
		}
	}
	free(buf);
	return ret;
}

/* The first and last sequence of every session against the reference. */
static int verify(const struct rec *x, struct kvmem_seq **seqs,
		  struct crash *out)
{
	const uint32_t per = x->kept_seqs;
	struct kvmem_cache *e = NULL;
	struct kvmem_seq *ref;
	uint32_t i, j, last;
	int ret;

	ret = kvmem_open_embedded(&x->g, 2 * x->seq_bytes + (8u << 20), &e);
	if (ret) {
		fprintf(stderr, "kvmem-bench: the reference cache: %s\n",
			kvmem_strerror(ret));
		return ret;
	}
	for (i = 0; i < x->cfg->sessions && !ret; i++) {
		last = per > 1 ? 2 : 1;
		for (j = 0; j < last && !ret; j++) {
			const uint32_t q = i * per + (j ? per - 1 : 0);

			ret = seq_fill(x, e, q, &ref);
			if (ret)
				break;
			ret = seq_same(x, seqs[q], ref, q,
				       &out->verified_bytes);
			out->verified_seqs += !ret;
			kvmem_seq_free(ref);
		}
	}
	kvmem_close(e);
	return ret;
}

/*
 * The sessions, filled; kill -9; the restart and every session taken
 * back, timed; the sample verified. The caches and sequences are freed
 * here.
 */
static int crash_run(const struct rec *x, struct own_kvmemd *d,
		     struct crash *out)
{
	const uint32_t ns = (uint32_t)x->cfg->sessions, per = x->kept_seqs;
	struct kvmem_connect_opts o = { .quota_bytes = x->kept_quota };
	struct kvmem_cache **c = calloc(ns, sizeof(*c));
	struct kvmem_seq **seqs = calloc((size_t)ns * per, sizeof(*seqs));
	struct kvmem_cache_stats st;
	uint64_t gib_ms;
	uint32_t i, j;
	int ret = c && seqs ? 0 : -ENOMEM;

	for (i = 0; i < ns && !ret; i++)
		ret = own_kvmemd_connect(d->sock, d, &x->g, &o, &c[i]);
	for (i = 0; i < ns && !ret; i++)
		for (j = 0; j < per && !ret; j++)
			ret = seq_fill(x, c[i], i * per + j,
				       &seqs[i * per + j]);
	for (i = 0; i < ns && !ret; i++) {
		kvmem_cache_stats(c[i], &st);
		out->kept_bytes += st.used_bytes;
	}
	out->kept_seqs = (uint64_t)ns * per;
	out->kept_tokens = out->kept_seqs * x->seq_tokens;
	/* Sessions of the rounds leave the store as they end. */
	if (!ret)
		ret = stored_wait(d, (int)ns);
	if (!ret)
		ret = own_kvmemd_kill(d);
	if (!ret)
		ret = own_kvmemd_restart(d);
	gib_ms = READY_MS_PER_GIB * ((out->kept_bytes >> 30) + 1);
	if (!ret)
		ret = own_kvmemd_ready(d, (int)(READY_MS + gib_ms));
	if (!ret)
		out->ready_s = (double)(d->ready_ns - d->started_ns) / 1e9;
	for (i = 0; i < ns && !ret; i++) {
		ret = kvmem_reconnect(c[i]);
		if (ret)
			fprintf(stderr,
				"kvmem-bench: session %u was not taken back: "
				"%s\n",
				kvmem_session_id(c[i]), kvmem_strerror(ret));
		else
			out->reconnected++;
	}
	if (!ret) {
		out->serving_s = (double)(bench_now_ns() - d->started_ns) / 1e9;
		ret = verify(x, seqs, out);
	}
	for (i = 0; seqs && i < ns * per; i++)
		kvmem_seq_free(seqs[i]);
	for (i = 0; c && i < ns; i++)
		kvmem_close(c[i]);
	free(seqs);
	free(c);
	return ret;
}

/* ---- results ---------------------------------------------------------- */

static void print_json(const struct rec *x, const struct side *on,
		       const struct side *off, const struct crash *k)
{
	const struct record_cfg *cfg = x->cfg;
	const double gib = (double)k->kept_bytes / (double)(1ull << 30);

	printf("{\"layers\": %d, \"kv_heads\": %d, \"head_dim\": %d, "
	       "\"tokens_per_page\": %u, \"format\": \"%s\", "
	       "\"codec\": \"%s\", \"pinned\": %s, \"rounds\": %llu, "
	       "\"round_seqs\": %u, \"round_tokens\": %llu, "
	       "\"record_tokens_per_s\": %.1f, "
	       "\"no_record_tokens_per_s\": %.1f, "
	       "\"record_tokens_per_s_min\": %.1f, "
	       "\"record_tokens_per_s_max\": %.1f, "
	       "\"no_record_tokens_per_s_min\": %.1f, "
	       "\"no_record_tokens_per_s_max\": %.1f, "
	       "\"record_mb_per_s\": %.2f, \"no_record_mb_per_s\": %.2f, "
	       "\"append_vs_no_record\": %.4f, "
	       "\"nops\": %llu, \"record_nop_p50_us\": %.2f, "
	       "\"record_nop_p99_us\": %.2f, \"no_record_nop_p50_us\": %.2f, "
	       "\"no_record_nop_p99_us\": %.2f, "
	       "\"nop_p50_vs_no_record\": %.4f, "
	       "\"nop_p99_vs_no_record\": %.4f, "
	       "\"sessions\": %llu, \"kept_bytes\": %llu, \"kept_seqs\": %llu, "
	       "\"kept_tokens\": %llu, \"ready_s\": %.4f, "
	       "\"serving_s\": %.4f, \"reconnected\": %llu, "
	       "\"ready_s_per_gib\": %.4f, \"serving_s_per_gib\": %.4f, "
	       "\"verified_seqs\": %llu, \"verified_bytes\": %llu}\n",
	       LAYERS, KV_HEADS, HEAD_DIM, x->g.tokens_per_page,
	       kvmem_format_get(x->g.format)->name,
	       kvmem_codec_get(x->g.codec)->name,
	       on->d.cpu >= 0 ? "true" : "false",
	       (unsigned long long)cfg->rounds, x->round_seqs,
	       (unsigned long long)x->round_seqs * x->seq_tokens,
	       on->tokens_per_s, off->tokens_per_s, on->tokens_min,
	       on->tokens_max, off->tokens_min, off->tokens_max, on->mb_per_s,
	       off->mb_per_s, on->tokens_per_s / off->tokens_per_s,
	       (unsigned long long)on->nnop, on->nop_p50_us, on->nop_p99_us,
	       off->nop_p50_us, off->nop_p99_us,
	       on->nop_p50_us / off->nop_p50_us,
	       on->nop_p99_us / off->nop_p99_us,
	       (unsigned long long)cfg->sessions,
	       (unsigned long long)k->kept_bytes,
	       (unsigned long long)k->kept_seqs,
	       (unsigned long long)k->kept_tokens, k->ready_s, k->serving_s,
	       (unsigned long long)k->reconnected, k->ready_s / gib,
	       k->serving_s / gib, (unsigned long long)k->verified_seqs,
	       (unsigned long long)k->verified_bytes);
}

static void print_table(const struct rec *x, const struct side *on,
			const struct side *off, const struct crash *k)
{
	const struct record_cfg *cfg = x->cfg;
	const double gib = (double)k->kept_bytes / (double)(1ull << 30);

	printf("kvmem-bench record: two kvmemds of %s, each with a "
	       "descriptor store played here\n",
	       on->d.bin);
	if (on->d.cpu >= 0)
		printf("this program on CPU %d, both kvmemds on CPU %d\n",
		       on->d.cpu, on->d.peer_cpu);
	else
		printf("not pinned: the scheduler places them\n");
	printf("%d layers x %d KV heads x %d dims, %s + %s, %u tokens a "
	       "page; rounds on each: %llu, in turns,\n"
	       "each %u sequences of %u tokens (%llu MiB of pages), then %llu "
	       "NOPs\n\n",
	       LAYERS, KV_HEADS, HEAD_DIM, kvmem_format_get(x->g.format)->name,
	       kvmem_codec_get(x->g.codec)->name, x->g.tokens_per_page,
	       (unsigned long long)cfg->rounds, x->round_seqs, x->seq_tokens,
	       (unsigned long long)(x->round_seqs * x->seq_bytes >> 20),
	       (unsigned long long)(cfg->nops / cfg->rounds));
	printf("%-26s %14s %14s %12s\n", "daemon.keep_on_crash", "no", "yes",
	       "yes / no");
	printf("%-26s %14.0f %14.0f %12.4f\n", "append, tokens/s",
	       off->tokens_per_s, on->tokens_per_s,
	       on->tokens_per_s / off->tokens_per_s);
	printf("%-26s %14.0f %14.0f\n", "  slowest round", off->tokens_min,
	       on->tokens_min);
	printf("%-26s %14.0f %14.0f\n", "  fastest round", off->tokens_max,
	       on->tokens_max);
	printf("%-26s %14.1f %14.1f %12.4f\n", "append, MB/s of K/V",
	       off->mb_per_s, on->mb_per_s, on->mb_per_s / off->mb_per_s);
	printf("%-26s %14.2f %14.2f %12.4f\n", "NOP round trip p50, us",
	       off->nop_p50_us, on->nop_p50_us,
	       on->nop_p50_us / off->nop_p50_us);
	printf("%-26s %14.2f %14.2f %12.4f\n", "NOP round trip p99, us",
	       off->nop_p99_us, on->nop_p99_us,
	       on->nop_p99_us / off->nop_p99_us);
	printf("\nkill -9 with %llu MiB kept (%llu sequences, sessions: "
	       "%llu), restarted with the store:\n",
	       (unsigned long long)(k->kept_bytes >> 20),
	       (unsigned long long)k->kept_seqs,
	       (unsigned long long)cfg->sessions);
	printf("  READY=1 after          %8.3f s  (%.3f s per GiB kept)\n",
	       k->ready_s, k->ready_s / gib);
	printf("  all %llu taken back after %6.3f s  (%.3f s per GiB kept)\n",
	       (unsigned long long)k->reconnected, k->serving_s,
	       k->serving_s / gib);
	printf("  %llu sequences read back bit for bit (%llu MiB of K/V)\n",
	       (unsigned long long)k->verified_seqs,
	       (unsigned long long)(k->verified_bytes >> 20));
}

/* ---- the run ---------------------------------------------------------- */

/* Both daemons, the same but for daemon.keep_on_crash. */
static int start_both(const struct rec *x, struct side *on, struct side *off)
{
	const struct record_cfg *cfg = x->cfg;
	uint64_t max =
		x->kept_quota > x->round_quota ? x->kept_quota : x->round_quota;
	char set[4][64];
	const char *const settings[] = { set[0], set[1], set[2], set[3], NULL };
	int ret;

	/* session_default_bytes (64M) may not be over the largest. */
	if (max < (64ull << 20))
		max = 64ull << 20;
	snprintf(set[0], sizeof(set[0]), "pool.host_bytes=%llu",
		 (unsigned long long)(cfg->sessions * x->kept_quota +
				      2 * x->round_quota));
	snprintf(set[1], sizeof(set[1]), "pool.session_max_bytes=%llu",
		 (unsigned long long)max);
	snprintf(set[2], sizeof(set[2]), "daemon.max_sessions_per_uid=%u",
		 MAX_SESSIONS + 2);
	snprintf(set[3], sizeof(set[3]), "daemon.keep_on_crash=yes");
	ret = own_kvmemd_start_stored(&on->d, cfg->kvmemd, !cfg->no_pin,
				      settings);
	if (!ret)
		ret = own_kvmemd_ready(&on->d, READY_MS);
	if (ret)
		return ret;
	snprintf(set[3], sizeof(set[3]), "daemon.keep_on_crash=no");
	ret = own_kvmemd_start_stored(&off->d, cfg->kvmemd, !cfg->no_pin,
				      settings);
	return ret ? ret : own_kvmemd_ready(&off->d, READY_MS);
}

static int run_record(int argc, char **argv)
{
	struct record_cfg cfg = {
		.rounds = DEFAULT_ROUNDS,
		.append = DEFAULT_APPEND,
		.nops = DEFAULT_NOPS,
		.kept = DEFAULT_KEPT,
		.sessions = DEFAULT_SESSIONS,
	};
	struct side on = { .d = { .cpu = -1, .peer_cpu = -1 } };
	struct side off = { .d = { .cpu = -1, .peer_cpu = -1 } };
	struct rec x = { 0 };
	struct crash k = { 0 };
	int ret, i;

	ret = parse_cfg(argc, argv, &cfg);
	if (ret)
		return ret == 1 ? 0 : ret;
	if (rec_init(&x, &cfg))
		return 1;
	for (i = 0; i < 2; i++) {
		struct side *s = i ? &off : &on;

		s->tokens_s = bench_alloc(cfg.rounds * sizeof(*s->tokens_s));
		s->nop = bench_alloc(cfg.nops * sizeof(*s->nop));
	}
	ret = start_both(&x, &on, &off);
	if (!ret)
		ret = compare(&x, &on, &off);
	if (!ret)
		ret = crash_run(&x, &on.d, &k);
	if (own_kvmemd_stop(&on.d, ret))
		ret = -EIO;
	if (own_kvmemd_stop(&off.d, ret))
		ret = -EIO;
	if (!ret && cfg.json)
		print_json(&x, &on, &off, &k);
	else if (!ret)
		print_table(&x, &on, &off, &k);
	for (i = 0; i < 2; i++) {
		free(i ? off.tokens_s : on.tokens_s);
		free(i ? off.nop : on.nop);
	}
	free(x.k);
	free(x.v);
	return ret ? 1 : 0;
}

const struct bench_cmd bench_record = {
	.name = "record",
	.summary = "keep_on_crash's cost to appends; kill -9 to serving again",
	.run = run_record,
};
