/* SPDX-License-Identifier: MIT */
/*
 * check_ras.c - the patrol scrubber, error accounting, events and error
 * injection of kvmemd, through its admin socket
 *
 * Expected counts come from the injector's own report (which words got how
 * many flips) and from what each code can do, never from the scrubber.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "kvmem/inject.h"
#include "kvmem/kvmem.h"
#include "kvmem/uapi.h"
#include "kvmem_check.h"
#include "kvmemd_harness.h"
#include "rng.h"

static char reply[1 << 20];

/* An admin request that must succeed; its reply in reply[]. */
#define admin(p, ...) kvmemd_admin_ok(p, reply, sizeof(reply), __VA_ARGS__)

static struct kvmem_geometry geo(int codec)
{
	struct kvmem_geometry g = kvmemd_test_geo();

	g.codec = (uint8_t)codec;
	g.sink_tokens = 0; /* every full page sealed: one codec per session */
	return g;
}

static struct kvmem_cache *attach(const struct kvmemd_proc *p,
				  const struct kvmem_geometry *g,
				  uint64_t quota)
{
	struct kvmem_connect_opts o = { .quota_bytes = quota };
	struct kvmem_cache *c = NULL;
	int ret = kvmem_connect(p->sock, g, &o, &c);

	ck_assert_msg(!ret, "kvmem_connect: %s (%s)", kvmem_strerror(ret),
		      kvmem_connect_error());
	return c;
}

/* @n sequences of @tokens seeded tokens, released. */
static void fill(const struct kvmem_geometry *g, struct kvmem_cache *c,
		 struct kvmem_seq **s, int n, uint32_t tokens, uint64_t seed)
{
	size_t row = (size_t)g->layers * g->kv_heads * g->head_dim;
	float *k = malloc(tokens * row * sizeof(float));
	float *v = malloc(tokens * row * sizeof(float));
	struct kvmem_rng r;
	size_t i;
	int j;

	ck_assert_ptr_nonnull(k);
	ck_assert_ptr_nonnull(v);
	kvmem_rng_seed(&r, seed);
	for (j = 0; j < n; j++) {
		for (i = 0; i < tokens * row; i++) {
			k[i] = kvmem_check_rnd_value(&r, 1.0);
			v[i] = kvmem_check_rnd_value(&r, 1.0);
		}
		ck_assert_int_eq(kvmem_seq_create(c, &s[j]), 0);
		ck_assert_int_eq(kvmem_seq_append_all(s[j], k, v, tokens), 0);
		kvmemd_release(c, s[j]);
	}
	free(k);
	free(v);
}

/* Every value of every layer of @s, K then V, into @out. */
static void read_all(const struct kvmem_geometry *g, struct kvmem_seq *s,
		     uint32_t tokens, float *out, uint64_t *erased)
{
	size_t n = (size_t)tokens * g->kv_heads * g->head_dim;
	struct kvmem_page_counts pc;
	uint32_t l;

	*erased = 0;
	for (l = 0; l < g->layers; l++) {
		ck_assert_int_eq(kvmem_seq_read(s, l, 0, tokens,
						KVMEM_ERASE_INTERPOLATE,
						out + 2 * l * n,
						out + (2 * l + 1) * n, &pc),
				 0);
		*erased += pc.values_erased;
	}
}

#define NSEQ 4
#define TOKENS 256

/*
 * Channels other than independent bits, through the admin socket: exact:1
 * puts one flip in every payload word of a sequence, which the scrub
 * corrects word for word; exact:2 two, which h84 detects in every word, so
 * every value of that sequence is lost and flagged. A K past the codec's
 * word (exact:9 on h84's 8 bits) or a channel the injector does not know
 * is refused before a bit is flipped.
 */
START_TEST(test_inject_channels)
{
	struct kvmem_geometry g = geo(KVMEM_CODEC_H84);
	const size_t nvals = 2 * (size_t)2 * TOKENS * 2 * 64;
	float *before = malloc(nvals * sizeof(float));
	float *now = malloc(nvals * sizeof(float));
	struct kvmem_page_layout l;
	struct kvmem_seq *s[2];
	struct kvmem_cache *c;
	struct kvmemd_proc p;
	unsigned long long f[8], words;
	uint64_t erased;
	size_t i;

	ck_assert_ptr_nonnull(before);
	ck_assert_ptr_nonnull(now);
	kvmem_page_layout(&g, 0, &l);
	/* Payload words of a sequence: 2 layers of 8 sealed pages, K and V
	 * of each KV head, a row of row_words a token. */
	words = 2ull * (TOKENS / g.tokens_per_page) * 2 * g.kv_heads *
		g.tokens_per_page * l.row_words;
	kvmemd_start(&p, "[scrub]\nrate = 0\nallow_inject = yes\n", NULL);
	c = attach(&p, &g, 16u << 20);
	fill(&g, c, s, 2, TOKENS, 300);
	read_all(&g, s[0], TOKENS, before, &erased);
	ck_assert_uint_eq(erased, 0);

	kvmemd_admin(&p, "inject seq 1 1 ber 0 seed 1 channel exact:9", reply,
		     sizeof(reply));
	ck_assert_msg(strstr(reply, "\"error\""), "%s", reply);
	kvmemd_admin(&p, "inject pool ber 0 seed 1 channel wobble", reply,
		     sizeof(reply));
	ck_assert_msg(strstr(reply, "channel wobble: want bsc, exact:K"), "%s",
		      reply);
	admin(&p, "scrub now");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ce"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ue"), 0);

	admin(&p, "inject seq 1 1 ber 0 seed 5 channel exact:1");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "words"), words);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "bits"), words);
	kvmemd_inject_flips(reply, "h84", f);
	ck_assert_uint_eq(f[1], words);
	admin(&p, "scrub now");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ce"), words);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ue"), 0);
	read_all(&g, s[0], TOKENS, now, &erased);
	ck_assert_uint_eq(erased, 0);
	for (i = 0; i < nvals; i++)
		ck_assert_msg(now[i] == before[i], "value %zu", i);

	admin(&p, "inject seq 1 2 ber 0 seed 6 channel exact:2");
	kvmemd_inject_flips(reply, "h84", f);
	ck_assert_uint_eq(f[2], words);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "bits"), 2 * words);
	admin(&p, "scrub now");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ce"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ue"), words);
	read_all(&g, s[1], TOKENS, now, &erased);
	ck_assert_uint_eq(erased, nvals);

	kvmem_close(c);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
	free(before);
	free(now);
}
END_TEST

/*
 * The exact count reaches every region of a page: exact:1 with "all" puts
 * one flip in every word, header and scales (golay24) as well as the
 * payload (h84). The scrub corrects each and counts it under its codec;
 * the words are those the layout has, as the injector reports them.
 */
START_TEST(test_scrub_counts_every_region)
{
	struct kvmem_geometry g = geo(KVMEM_CODEC_H84);
	const size_t nvals = 2 * (size_t)2 * TOKENS * 2 * 64;
	float *before = kvmem_check_xmalloc(nvals * sizeof(float));
	float *now = kvmem_check_xmalloc(nvals * sizeof(float));
	unsigned long long f[8], pages, meta, payload;
	struct kvmem_page_layout l;
	struct kvmem_seq *s[1];
	struct kvmem_cache *c;
	struct kvmemd_proc p;
	uint64_t erased;
	size_t i;

	kvmem_page_layout(&g, 0, &l);
	/* 2 layers of 8 sealed pages; golay24: the header, the scales and
	 * the checks after them; h84: K and V, a row of row_words a token. */
	pages = 2ull * (TOKENS / g.tokens_per_page);
	meta = pages *
	       (KVMEM_PAGE_HDR_WORDS + l.scale_words + 2ull * l.nchecks);
	payload = pages * 2 * g.kv_heads * g.tokens_per_page * l.row_words;
	kvmemd_start(&p, "[scrub]\nrate = 0\nallow_inject = yes\n", NULL);
	c = attach(&p, &g, 16u << 20);
	fill(&g, c, s, 1, TOKENS, 310);
	read_all(&g, s[0], TOKENS, before, &erased);
	ck_assert_uint_eq(erased, 0);

	admin(&p, "inject pool ber 0 seed 3 all channel exact:1");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "pages"), pages);
	kvmemd_inject_flips(reply, "golay24", f);
	ck_assert_uint_eq(f[1], meta);
	kvmemd_inject_flips(reply, "h84", f);
	ck_assert_uint_eq(f[1], payload);
	admin(&p, "scrub now");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ce"), meta + payload);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ue"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "restored_pages"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "crc"), 0);
	admin(&p, "errors");
	ck_assert_uint_eq(kvmemd_json_after(reply,
					    "\"tier\":\"warm\",\"codec\":"
					    "\"golay24\"",
					    "ce"),
			  meta);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"tier\":\"warm\",\"codec\":\"h84\"",
				  "ce"),
		payload);
	read_all(&g, s[0], TOKENS, now, &erased);
	ck_assert_uint_eq(erased, 0);
	for (i = 0; i < nvals; i++)
		EXPECT_FEQ(now[i], before[i], "value %zu", i);
	admin(&p, "scrub now");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ce"), 0);

	kvmem_close(c);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
	free(before);
	free(now);
}
END_TEST

/*
 * Inject at BER 1e-3 into an h84 and a golay24 session, scrub once: the
 * corrected words are those the injector gave at most t flips, the
 * uncorrectable ones those it gave more (the seed is one where no h84 word
 * got 3 flips, which SECDED would miscorrect), the data reads back as it
 * was written wherever nothing was lost, and a second pass finds nothing.
 */
START_TEST(test_scrub_counts_injected)
{
	static const int codecs[2] = { KVMEM_CODEC_H84, KVMEM_CODEC_GOLAY24 };
	size_t nvals = 2 * (size_t)2 * TOKENS * 2 * 64;
	struct kvmem_geometry g[2] = { geo(codecs[0]), geo(codecs[1]) };
	struct kvmem_cache *c[2];
	struct kvmem_seq *s[2][NSEQ];
	struct kvmemd_proc p;
	float *before = malloc(2 * NSEQ * nvals * sizeof(float));
	float *now = malloc(nvals * sizeof(float));
	unsigned long long f[2][8];
	uint64_t ce[2], ue[2], erased, ue_seen = 0;
	char inj[8192], anchor[64];
	int i, j, b;

	ck_assert_ptr_nonnull(before);
	ck_assert_ptr_nonnull(now);
	kvmemd_start(&p, "[scrub]\nrate = 0\nallow_inject = yes\n", NULL);
	for (i = 0; i < 2; i++) {
		c[i] = attach(&p, &g[i], 16u << 20);
		fill(&g[i], c[i], s[i], NSEQ, TOKENS, 100 + i);
		for (j = 0; j < NSEQ; j++)
			read_all(&g[i], s[i][j], TOKENS,
				 before + (i * NSEQ + j) * nvals, &erased);
	}
	admin(&p, "reset-counters");
	snprintf(inj, sizeof(inj), "%s",
		 admin(&p, "inject pool ber 0.001 seed 11"));
	kvmemd_inject_flips(inj, "h84", f[0]);
	kvmemd_inject_flips(inj, "golay24", f[1]);
	/* h84 corrects 1 and flags 2; golay24 corrects 3 and flags 4. */
	for (b = 3; b < 8; b++)
		ck_assert_msg(!f[0][b], "seed gives h84 words %d flips", b);
	for (b = 5; b < 8; b++)
		ck_assert_msg(!f[1][b], "seed gives golay24 words %d flips", b);
	ce[0] = f[0][1];
	ue[0] = f[0][2];
	ce[1] = f[1][1] + f[1][2] + f[1][3];
	ue[1] = f[1][4];
	ck_assert_uint_gt(ce[0], 1000);
	ck_assert_uint_gt(ue[0], 0);
	ck_assert_uint_gt(f[1][2], 0);

	admin(&p, "scrub now");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ce"), ce[0] + ce[1]);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ue"), ue[0] + ue[1]);
	/* Payload only: the header and scale words, golay24 in both
	 * sessions and counted with the golay24 payload, were not touched. */
	admin(&p, "errors");
	for (i = 0; i < 2; i++) {
		snprintf(anchor, sizeof(anchor),
			 "\"tier\":\"warm\",\"codec\":\"%s\"",
			 kvmem_codec_get(codecs[i])->name);
		ck_assert_uint_eq(kvmemd_json_after(reply, anchor, "ce"),
				  ce[i]);
		ck_assert_uint_eq(kvmemd_json_after(reply, anchor, "ue"),
				  ue[i]);
		ck_assert_uint_eq(kvmemd_json_after(reply, anchor, "ce_total"),
				  ce[i]);
	}

	/* Corrected data reads back bit for bit; a degraded page loses only
	 * the values its uncorrectable words held. */
	for (i = 0; i < 2; i++) {
		for (j = 0; j < NSEQ; j++) {
			const float *want = before + (i * NSEQ + j) * nvals;
			size_t n, diff = 0;

			read_all(&g[i], s[i][j], TOKENS, now, &erased);
			for (n = 0; n < nvals; n++) {
				ck_assert(isfinite(now[n]));
				diff += now[n] != want[n];
			}
			ck_assert_uint_le(diff, erased);
			ue_seen += erased > 0;
		}
	}
	ck_assert_uint_gt(ue_seen, 0);
	admin(&p, "seqs");
	ck_assert_msg(strstr(reply, "\"degraded_pages\":1") ||
			      strstr(reply, "\"degraded_pages\":2"),
		      "%s", reply);

	/* Written back: nothing new on the next pass. */
	admin(&p, "scrub now");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ce"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ue"), 0);
	ck_assert_uint_gt(kvmemd_json_u64(reply, "pages"),
			  2 * NSEQ * 2 * (TOKENS / 32) - 1);

	for (i = 0; i < 2; i++)
		kvmem_close(c[i]);
	free(before);
	free(now);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * Many uncorrectable words in one sequence: its pages are degraded in the
 * daemon's table and in the session's STATS, each page is one event, and
 * attention over the sequence still gives finite output.
 */
START_TEST(test_degraded_attend)
{
	struct kvmem_geometry g = geo(KVMEM_CODEC_H84);
	struct kvmem_attend_opts o = { .n_heads = 4 };
	struct kvmem_attend_stats as;
	struct kvmem_seq *s[2];
	struct kvmem_cache *c;
	struct kvmem_stats st;
	struct kvmemd_proc p;
	float q[4 * 64], out[4 * 64];
	uint64_t degraded, events = 0;
	const char *e;
	uint32_t l;
	int i;

	kvmemd_start(&p, "[scrub]\nrate = 0\nallow_inject = yes\n", NULL);
	c = attach(&p, &g, 16u << 20);
	fill(&g, c, s, 2, TOKENS, 5);
	admin(&p, "inject seq 1 1 ber 0.03 seed 3");
	admin(&p, "scrub now seq 1 1");
	ck_assert(strstr(reply, "\"target\":\"seq 1 1\""));
	degraded = kvmemd_json_u64(reply, "degraded_pages");
	/* 2 layers x 8 pages, each with about 2000 words of 2+ flips */
	ck_assert_uint_eq(degraded, 2 * TOKENS / 32);
	admin(&p, "seqs 1");
	ck_assert(strstr(reply, "\"seq\":1,\"acquired\":false,\"pages\":16,"
				"\"tokens\":256,\"degraded_pages\":16"));
	ck_assert(strstr(reply, "\"seq\":2,\"acquired\":false,\"pages\":16,"
				"\"tokens\":256,\"degraded_pages\":0"));
	admin(&p, "stats");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "degraded_pages"), degraded);
	ck_assert_int_eq(kvmem_daemon_stats(c, &st), 0);
	ck_assert_uint_eq(st.degraded_pages, degraded);
	ck_assert_uint_gt(st.ue_words, 0);
	ck_assert_uint_gt(st.ce_words, 0);

	admin(&p, "events");
	for (e = strstr(reply, "\"kind\":\"uncorrectable\""); e;
	     e = strstr(e + 1, "\"kind\":\"uncorrectable\""))
		events++;
	ck_assert_uint_eq(events, degraded);
	ck_assert(strstr(reply, "\"session\":1,\"seq\":1,\"layer\":1,"
				"\"token_start\":224,\"token_end\":255"));
	ck_assert(strstr(reply, "\"source\":\"ondemand\""));

	for (i = 0; i < 4 * 64; i++)
		q[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
	for (l = 0; l < g.layers; l++) {
		ck_assert_int_eq(kvmem_attend(s[0], l, q, out, &o, &as), 0);
		ck_assert_uint_gt(as.words_uncorrectable, 0);
		for (i = 0; i < 4 * 64; i++)
			ck_assert(isfinite(out[i]));
	}
	kvmem_close(c);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * The patrol keeps to its rate: over a second it scrubs no more than
 * twice the rate allows (a bound for a noisy machine; its burst is a tenth
 * of a second's bytes, or 256 KiB) and not nothing; in cycle mode the rate
 * follows from the sealed bytes.
 */
START_TEST(test_scrub_rate)
{
	struct kvmem_geometry g = geo(KVMEM_CODEC_H84);
	const double rate = 2 << 20;
	struct kvmem_seq *s[8];
	struct kvmem_cache *c;
	struct kvmemd_proc p;
	unsigned long long b0, b1, sealed;
	double t0, t1, got;

	g.kv_heads = 8;
	g.head_dim = 128;
	/* 1 byte/s: the first page puts the bucket deep in debt, which a
	 * new rate must not inherit. */
	kvmemd_start(&p, "[scrub]\nrate = 1\n", NULL);
	c = attach(&p, &g, 64u << 20);
	fill(&g, c, s, 4, 512, 9);
	admin(&p, "stats");
	sealed = kvmemd_json_after(reply, "\"pools\"", "sealed_bytes");
	ck_assert_uint_gt(sealed, 4 * rate);

	admin(&p, "scrub rate 2M");
	ck_assert(strstr(reply, "\"rate_bytes_per_s\":2097152"));
	t0 = mono_s();
	b0 = kvmemd_json_after(admin(&p, "stats"), "\"scrub\"", "bytes_total");
	sleep(1);
	b1 = kvmemd_json_after(admin(&p, "stats"), "\"scrub\"", "bytes_total");
	t1 = mono_s();
	got = (double)(b1 - b0) / (t1 - t0);
	ck_assert_msg(got <= 2 * rate && got >= rate / 4,
		      "scrubbed %.0f B/s at a rate of %.0f", got, rate);

	admin(&p, "scrub cycle 4");
	ck_assert_msg(fabs(strtod(strstr(reply, "\"current_cycle_duration\":") +
					  strlen("\"current_cycle_duration\":"),
				  NULL) -
			   4.0) < 0.01,
		      "%s", reply);
	admin(&p, "scrub stop");
	ck_assert(strstr(reply, "\"enabled\":false"));
	ck_assert(strstr(reply, "\"state\":\"idle\""));
	kvmem_close(c);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * Totals and events outlive the daemon; a counters file it cannot read is
 * kept aside and the daemon starts from zero.
 */
/* The value of "@key=" in a journal datagram, or NULL. */
static const char *jfield(const char *dgram, const char *key, char *out,
			  size_t len)
{
	char pat[64];
	const char *at, *end;

	snprintf(pat, sizeof(pat), "%s=", key);
	for (at = dgram; (at = strstr(at, pat)); at++)
		if (at == dgram || at[-1] == '\n')
			break;
	if (!at)
		return NULL;
	at += strlen(pat);
	end = strchr(at, '\n');
	if (!end || (size_t)(end - at) >= len)
		return NULL;
	memcpy(out, at, (size_t)(end - at));
	out[end - at] = 0;
	return out;
}

/*
 * The journal's side: a thread that takes every datagram on @fd as it
 * comes (a unix datagram queue holds 10, and kvmemd does not wait for a
 * full one), each stored with its terminating 0, until @stop.
 */
struct journal {
	int fd, stop;
	pthread_t thr;
	size_t len, count;
	char buf[1 << 20];
};

static void *journal_run(void *arg)
{
	struct journal *j = arg;

	while (!__atomic_load_n(&j->stop, __ATOMIC_ACQUIRE)) {
		struct pollfd pfd = { .fd = j->fd, .events = POLLIN };
		ssize_t n;

		if (poll(&pfd, 1, 20) != 1)
			continue;
		n = recv(j->fd, j->buf + j->len, sizeof(j->buf) - j->len - 1,
			 MSG_DONTWAIT);
		if (n <= 0)
			continue;
		j->len += (size_t)n;
		j->buf[j->len++] = 0;
		j->count++;
	}
	return NULL;
}

/*
 * Under systemd, with stderr the journal's stream ($JOURNAL_STREAM is its
 * device and inode), kvmemd sends each message to the journal's socket
 * (here a socket of the test's, $KVMEMD_JOURNAL_SOCKET) with fields; an
 * uncorrectable error event carries its MESSAGE_ID and the session, the
 * sequence, codec and pool, the same as `kvmemctl events` lists. Nothing
 * goes to stderr as well. With a stream that is not stderr, lines go to
 * stderr as before.
 */
START_TEST(test_journal_fields)
{
	struct kvmem_geometry g = geo(KVMEM_CODEC_H84);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char stream[96], sockenv[160], line[4096], v[64], want[160], f4[4][16];
	const char *env[3] = { stream, sockenv, NULL };
	struct journal *j = calloc(1, sizeof(*j));
	struct kvmem_seq *s[1];
	struct kvmem_cache *c;
	struct kvmemd_proc p;
	int serving = 0, ue = 0;
	const char *buf;
	struct stat st;

	kvmemd_start(&p, "[scrub]\nrate = 0\nallow_inject = yes\n", NULL);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	/* The log file keeps its inode when the harness truncates it. */
	ck_assert_int_eq(stat(p.log, &st), 0);
	snprintf(stream, sizeof(stream), "JOURNAL_STREAM=%llu:%llu",
		 (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/journal", p.dir);
	snprintf(sockenv, sizeof(sockenv), "KVMEMD_JOURNAL_SOCKET=%s",
		 sa.sun_path);
	ck_assert_ptr_nonnull(j);
	j->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(j->fd, 0);
	ck_assert_int_eq(bind(j->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(pthread_create(&j->thr, NULL, journal_run, j), 0);
	kvmemd_restart(&p, env);

	c = attach(&p, &g, 8u << 20);
	fill(&g, c, s, 1, TOKENS, 31);
	admin(&p, "inject pool ber 0.01 seed 2");
	admin(&p, "scrub now");
	ck_assert_uint_gt(kvmemd_json_u64(reply, "ue"), 0);
	admin(&p, "events");
	kvmem_close(c);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	__atomic_store_n(&j->stop, 1, __ATOMIC_RELEASE);
	ck_assert_int_eq(pthread_join(j->thr, NULL), 0);
	for (buf = j->buf; buf < j->buf + j->len; buf += strlen(buf) + 1) {
		ck_assert_msg(!strncmp(buf, "MESSAGE=", 8), "%s", buf);
		ck_assert_msg(jfield(buf, "SYSLOG_IDENTIFIER", v, sizeof(v)) &&
				      !strcmp(v, "kvmemd"),
			      "%s", buf);
		if (strstr(buf, "MESSAGE=serving on ")) {
			serving++;
			EXPECT(jfield(buf, "PRIORITY", v, sizeof(v)) &&
				       !strcmp(v, "6"),
			       "%s", buf);
		}
		if (!strstr(buf, "\nKVMEM_EVENT=uncorrectable\n"))
			continue;
		ue++;
		EXPECT(jfield(buf, "MESSAGE_ID", v, sizeof(v)) &&
			       !strcmp(v, "757da92a137844b4b70f2b3b2a8d6e64"),
		       "%s", buf);
		EXPECT(jfield(buf, "PRIORITY", v, sizeof(v)) && !strcmp(v, "3"),
		       "%s", buf);
		EXPECT(jfield(buf, "CODEC", v, sizeof(v)) && !strcmp(v, "h84"),
		       "%s", buf);
		EXPECT(jfield(buf, "POOL", v, sizeof(v)) && !strcmp(v, "host"),
		       "%s", buf);
		/* The same event as kvmemctl events lists it. */
		ck_assert_ptr_nonnull(jfield(buf, "SESSION", f4[0], 16));
		ck_assert_ptr_nonnull(jfield(buf, "SEQ", f4[1], 16));
		ck_assert_ptr_nonnull(jfield(buf, "LAYER", f4[2], 16));
		ck_assert_ptr_nonnull(jfield(buf, "TOKEN_START", f4[3], 16));
		snprintf(want, sizeof(want),
			 "\"session\":%s,\"seq\":%s,\"layer\":%s,"
			 "\"token_start\":%s,",
			 f4[0], f4[1], f4[2], f4[3]);
		EXPECT(strstr(reply, want), "%s not in the events: %.600s",
		       want, reply);
	}
	EXPECT_EQ(serving, 1, "%s", "the start, in the journal");
	EXPECT(ue > 0, "%s", "no uncorrectable event in the journal");
	EXPECT_EQ(kvmemd_log_lines(&p, "serving on"), 0, "%s",
		  "the start on stderr too");

	/* A stream that is not stderr: plain lines. */
	snprintf(stream, sizeof(stream), "JOURNAL_STREAM=%llu:%llu",
		 (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino + 1);
	kvmemd_restart(&p, env);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	EXPECT(recv(j->fd, line, sizeof(line), MSG_DONTWAIT) < 0, "%s",
	       "a datagram without the journal's stream");
	EXPECT_EQ(kvmemd_log_lines(&p, "serving on"), 1, "%s",
		  "the start on stderr");
	close(j->fd);
	free(j);
	kvmemd_cleanup(&p);
}
END_TEST

/* ---- the adaptive patrol ------------------------------------------------ */

/* The number after "@key": at or after @from in a reply. */
static double jnum(const char *from, const char *key)
{
	char pat[64];
	const char *at;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	at = strstr(from, pat);
	ck_assert_msg(at, "no %s in %s", key, from);
	return strtod(at + strlen(pat), NULL);
}

/*
 * kvmemd(8)'s prediction for a scrub status reply: uncorrectable words a
 * day with every word of the last patrol pass checked every @cycle
 * seconds, from the words and corrected words of each codec and the pass's
 * exposure T, as sum words min(1, (x cycle / T)^(t+1) / (t+1)!) * 86400 /
 * cycle.
 */
static double predict(const char *st, double cycle)
{
	double T = jnum(st, "estimate_exposure_s"), u = 0, x, t, f;
	const char *e = strstr(st, "\"estimate\":["), *end;

	ck_assert_ptr_nonnull(e);
	end = strstr(e, "]");
	for (e = strstr(e, "{\"codec\""); e && e < end;
	     e = strstr(e + 1, "{\"codec\"")) {
		t = jnum(e, "t");
		x = jnum(e, "ce") / jnum(e, "words") * cycle / T;
		for (f = 1; t > 0; t--)
			f *= t + 1;
		x = pow(x, jnum(e, "t") + 1) / f;
		u += jnum(e, "words") * (x < 1 ? x : 1);
	}
	return u * 86400 / cycle;
}

/*
 * One patrol decision, seen in a scrub status reply: the level must be the
 * one kvmemd(8) gives for the level it started from. Return: the level.
 */
static unsigned int check_decision(const char *st, double target)
{
	const char *a = strstr(st, "\"adapt\":");
	unsigned int from, max, level, k;
	double c0;

	ck_assert_ptr_nonnull(a);
	from = (unsigned int)jnum(a, "from");
	max = (unsigned int)jnum(a, "max_level");
	level = (unsigned int)jnum(a, "level");
	c0 = jnum(a, "base_cycle_s");
	if (jnum(st, "estimate_exposure_s") <= 0)
		return level;
	k = from < max ? from : max;
	if (predict(st, c0 / (1u << k)) > target) {
		while (k < max && predict(st, c0 / (1u << k)) > target)
			k++;
	} else if (k && predict(st, c0 / (1u << (k - 1))) <= target / 2) {
		k--;
	}
	ck_assert_msg(level == k, "level %u, want %u: %s", level, k, st);
	EXPECT(k == max || fabs(jnum(a, "ue_per_day") -
				predict(st, c0 / (1u << k))) <=
				   1e-9 * predict(st, c0 / (1u << k)),
	       "%s", st);
	/* The patrol runs at that level's rate: the cycle halves each. */
	EXPECT(fabs(jnum(st, "current_cycle_duration") - c0 / (1u << level)) <
		       1e-6 * c0,
	       "level %u: %s", level, st);
	return level;
}

/*
 * Snapshots of the scrub status until @done says stop (each patrol pass's
 * decision checked), or @secs go by; the last one in @st. Return: the
 * highest level seen.
 */
static unsigned int watch(const struct kvmemd_proc *p, double target,
			  double secs, int (*done)(unsigned int level, int n),
			  char *st, size_t len)
{
	unsigned long long seen = 0, passes;
	unsigned int level, top = 0;
	double t0 = mono_s();
	int n = 0;

	while (mono_s() - t0 < secs) {
		kvmemd_admin_ok(p, st, len, "scrub status");
		passes = kvmemd_json_u64(st, "passes");
		if (passes != seen) {
			seen = passes;
			level = check_decision(st, target);
			top = level > top ? level : top;
			if (done(level, ++n))
				return top;
		}
		usleep(10000);
	}
	ck_abort_msg("no end after %.0f s: %s", secs, st);
	return top;
}

static int two_passes(unsigned int level, int n)
{
	(void)level;
	return n >= 2;
}

static int raised(unsigned int level, int n)
{
	(void)n;
	return level > 0;
}

static int back_to_0(unsigned int level, int n)
{
	(void)n;
	return level == 0;
}

/*
 * scrub.target_ue_per_day on a live session whose bit error rate rises:
 * a small rate changes nothing, a large one makes the patrol scrub faster
 * at once (doublings of its rate, as many as the prediction needs), and
 * once the errors stop it slows again one doubling a pass. With
 * scrub.rate_max too low for the target the patrol runs at that rate and
 * says the target is out of reach. Every decision is recomputed here from
 * what the pass reported, by the rule kvmemd(8) gives; each step is a
 * log line.
 */
START_TEST(test_scrub_adapt)
{
	struct kvmem_geometry g = geo(KVMEM_CODEC_H84);
	const double target = 500;
	static char st[1 << 16];
	struct kvmem_seq *s[NSEQ];
	struct kvmem_cache *c;
	struct kvmemd_proc p;
	unsigned long long down;
	unsigned int top;
	double base;
	int i;

	/* The shortest cycle there is (scrub.cycle is in whole seconds):
	 * the test waits for a dozen passes. */
	kvmemd_start(&p,
		     "[scrub]\ncycle = 1\nrate_max = 64M\nallow_inject = yes\n",
		     NULL);
	/* kvmemctl scrub target's request, checked as the file would be */
	kvmemd_admin(&p, "scrub target -5", reply, sizeof(reply));
	ck_assert_msg(strstr(reply, "\"errno\":-22") &&
			      strstr(reply, "is not a number in 0..1000000000"),
		      "%s", reply);
	admin(&p, "scrub target 500");
	ck_assert(strstr(reply, "\"target_ue_per_day\":500"));
	c = attach(&p, &g, 16u << 20);
	fill(&g, c, s, NSEQ, TOKENS, 41);
	/* Two passes without errors: an exposure, nothing predicted. */
	top = watch(&p, target, 30, two_passes, st, sizeof(st));
	ck_assert_uint_eq(top, 0);
	ck_assert(jnum(st, "estimate_exposure_s") > 0);
	EXPECT(fabs(jnum(strstr(st, "\"adapt\":"), "base_cycle_s") - 1) < 1e-6,
	       "%s", st);
	base = jnum(st, "effective_rate_bytes_per_s");

	/* 1e-6 a bit: about 1.3 UE a day predicted, under the target. */
	admin(&p, "inject pool ber 0.000001 seed 5");
	top = watch(&p, target, 30, two_passes, st, sizeof(st));
	ck_assert_uint_eq(top, 0);
	ck_assert_uint_eq(kvmemd_json_after(st, "\"adapt\"", "steps_up"), 0);

	/* 1e-4: thousands; the patrol steps up, then back down. */
	admin(&p, "inject pool ber 0.0001 seed 6");
	top = watch(&p, target, 30, raised, st, sizeof(st));
	ck_assert_uint_gt(top, 1);
	ck_assert(strstr(st, "\"short_of_target\":false"));
	top = watch(&p, target, 30, back_to_0, st, sizeof(st));
	ck_assert_uint_eq(kvmemd_json_after(st, "\"adapt\"", "steps_down"),
			  top);
	ck_assert_uint_ge(kvmemd_json_after(st, "\"adapt\"", "steps_up"), 1);
	EXPECT_EQ(kvmemd_log_lines(&p, "it now runs at"),
		  (int)(kvmemd_json_after(st, "\"adapt\"", "steps_up") +
			kvmemd_json_after(st, "\"adapt\"", "steps_down")),
		  "%s", "a log line a step");

	/* Room for one doubling only: the patrol takes it and says the
	 * target is out of reach. */
	admin(&p, "policy set scrub.rate_max=%llu",
	      (unsigned long long)(2.5 * base));
	admin(&p, "inject pool ber 0.0001 seed 7");
	top = watch(&p, target, 30, raised, st, sizeof(st));
	ck_assert_uint_eq(top, 1);
	ck_assert_uint_eq(kvmemd_json_after(st, "\"adapt\"", "max_level"), 1);
	ck_assert_msg(strstr(st, "\"short_of_target\":true"), "%s", st);
	EXPECT_EQ(kvmemd_log_lines(&p, "even at scrub.rate_max"), 1, "%s",
		  "the target out of reach, said once");

	/* No target: the configured rate at once, as a step down. */
	down = kvmemd_json_after(st, "\"adapt\"", "steps_down");
	admin(&p, "policy set scrub.target_ue_per_day=0");
	admin(&p, "scrub status");
	ck_assert_uint_eq(kvmemd_json_after(reply, "\"adapt\"", "level"), 0);
	EXPECT(fabs(jnum(reply, "effective_rate_bytes_per_s") - base) <
		       1e-6 * base,
	       "%s", reply);
	ck_assert(strstr(reply, "\"short_of_target\":false"));
	for (i = 0;
	     i < 100 && kvmemd_json_after(admin(&p, "scrub status"),
					  "\"adapt\"", "steps_down") == down;
	     i++)
		usleep(10000);
	EXPECT_EQ(kvmemd_json_after(reply, "\"adapt\"", "steps_down"), down + 1,
		  "%s", reply);
	EXPECT_EQ(kvmemd_log_lines(&p, "scrub.target_ue_per_day or "
				       "scrub.rate_max changed"),
		  1, "%s", "the step, logged");
	kvmem_close(c);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * The second step of the adaptive patrol: when even scrub.rate_max leaves
 * the prediction over the target, released pages go to the archive tier's
 * codec at any age (tier.archive_tokens is 0 here: the tier is off until
 * then), said in the log; once the prediction is within the target again
 * the tier waits for tier.archive_tokens again, said too.
 */
START_TEST(test_scrub_adapt_archives)
{
	struct kvmem_geometry g = geo(KVMEM_CODEC_H84);
	const double target = 1;
	static char st[1 << 16];
	struct kvmem_seq *s[NSEQ];
	struct kvmem_cache *c;
	struct kvmemd_proc p;
	uint64_t archived;
	int i;

	kvmemd_start(&p,
		     "[scrub]\ncycle = 1\nrate_max = 4K\nallow_inject = yes\n"
		     "target_ue_per_day = 1\n",
		     NULL);
	c = attach(&p, &g, 16u << 20);
	fill(&g, c, s, NSEQ, TOKENS, 43);
	/* Two passes without errors: nothing predicted, nothing archived. */
	watch(&p, target, 30, two_passes, st, sizeof(st));
	ck_assert_msg(strstr(st, "\"short_of_target\":false"), "%s", st);
	admin(&p, "tier");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "archived"), 0);

	/* Errors, and no doubling to spare: short of the target. */
	admin(&p, "inject pool ber 0.0001 seed 9");
	for (i = 0; i < 3000; i++) {
		kvmemd_admin_ok(&p, st, sizeof(st), "scrub status");
		if (strstr(st, "\"short_of_target\":true"))
			break;
		usleep(10000);
	}
	ck_assert_msg(strstr(st, "\"short_of_target\":true"), "%s", st);
	ck_assert_uint_eq(
		kvmemd_json_after(st, "\"adapt\"", "archive_escalations"), 1);
	EXPECT_EQ(kvmemd_log_lines(&p, "go to the archive tier's codec at "
				       "any age"),
		  1, "%s", "the step, logged");
	for (i = 0; i < 1000; i++) {
		admin(&p, "tier");
		if (kvmemd_json_u64(reply, "archived"))
			break;
		usleep(10000);
	}
	archived = kvmemd_json_u64(reply, "archived");
	ck_assert_msg(archived > 0, "%s", reply);

	/* No new flips: within the target again, and said so. */
	for (i = 0; i < 3000; i++) {
		kvmemd_admin_ok(&p, st, sizeof(st), "scrub status");
		if (strstr(st, "\"short_of_target\":false"))
			break;
		usleep(10000);
	}
	ck_assert_msg(strstr(st, "\"short_of_target\":false"), "%s", st);
	EXPECT_EQ(kvmemd_log_lines(&p, "within the target of"), 1, "%s",
		  "the step back, logged");
	kvmem_close(c);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

START_TEST(test_persist)
{
	struct kvmem_geometry g = geo(KVMEM_CODEC_H84);
	unsigned long long ce, ue;
	struct kvmem_seq *s[1];
	struct kvmem_cache *c;
	struct kvmemd_proc p;
	char path[400];
	struct stat st;
	FILE *f;

	kvmemd_start(&p, "[scrub]\nrate = 0\nallow_inject = yes\n", NULL);
	c = attach(&p, &g, 8u << 20);
	fill(&g, c, s, 1, TOKENS, 21);
	admin(&p, "inject pool ber 0.01 seed 2");
	admin(&p, "scrub now");
	ce = kvmemd_json_u64(reply, "ce");
	ue = kvmemd_json_u64(reply, "ue");
	ck_assert_uint_gt(ue, 0);
	kvmem_close(c);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	/* Both files say the same about the pages: both 0640. */
	snprintf(path, sizeof(path), "%s/state/counters", p.dir);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0640);
	snprintf(path, sizeof(path), "%s/state/events", p.dir);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0640);

	kvmemd_restart(&p, NULL);
	admin(&p, "errors");
	ck_assert_uint_eq(kvmemd_json_after(reply, "\"codec\":\"h84\"", "ce"),
			  0);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"codec\":\"h84\"", "ce_total"), ce);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"codec\":\"h84\"", "ue_total"), ue);
	admin(&p, "events");
	ck_assert(strstr(reply, "\"session\":1,\"seq\":1,\"layer\":"));
	ck_assert_int_eq(kvmemd_stop(&p), 0);

	snprintf(path, sizeof(path), "%s/state/counters", p.dir);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("kvmem-counters 1\nhost warm h99 1 2\n", f);
	fclose(f);
	kvmemd_restart(&p, NULL);
	admin(&p, "errors");
	ck_assert(!strstr(reply, "\"codec\":\"h84\""));
	snprintf(path, sizeof(path), "%s/state/counters.bad", p.dir);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* A raw session of sequence 1 and the pages the test writes itself into
 * it (raw_seal()); raw_page()'s first page at unit 0, as written. */
struct raw_page {
	struct kvmemd_raw r;
	struct kvmem_geometry g;
	size_t size;
	uint8_t *clean;
};

static void raw_open(struct raw_page *rp, const struct kvmemd_proc *p,
		     const struct kvmem_geometry *g)
{
	struct kvmem_hello h = kvmemd_hello(1u << 20);

	h.geometry = *g;
	rp->g = *g;
	ck_assert_int_eq(kvmemd_raw_attach(&rp->r, p, &h, sizeof(h)), 0);
	ck_assert_int_eq(KVMEMD_OP(&rp->r, 1, .opcode = KVMEM_OP_SEQ_CREATE),
			 1);
}

/*
 * Page @layer of sequence 1, tokens [0, @ntokens), of kind @hot, written
 * into a new slot (one bit of K flipped if @flip) and sealed: its unit,
 * and its bytes as encoded in *@clean (malloc'ed).
 */
static uint32_t raw_seal(struct raw_page *rp, uint32_t layer, int flip, int hot,
			 uint32_t ntokens, uint8_t **clean)
{
	struct kvmem_page_hdr hdr = { .seq = 1,
				      .layer = layer,
				      .ntokens = ntokens,
				      .flags = KVMEM_HDR_SEALED };
	struct kvmem_page_layout l;
	struct kvmem_rng r;
	uint8_t *page;
	float *k, *v;
	uint32_t unit;
	size_t i, n;

	kvmem_page_layout(&rp->g, hot, &l);
	ck_assert_int_eq(
		KVMEMD_OP(&rp->r, 2, .opcode = KVMEM_OP_PAGE_ALLOC,
			  .kind = hot ? KVMEM_SLOT_HOT : KVMEM_SLOT_SEALED,
			  .len = 1),
		1);
	memcpy(&unit, rp->r.buf, sizeof(unit));
	page = rp->r.arena + (size_t)unit * KVMEM_SLOT_UNIT;

	n = (size_t)ntokens * rp->g.kv_heads * rp->g.head_dim;
	k = kvmem_check_xmalloc(n * sizeof(float));
	v = kvmem_check_xmalloc(n * sizeof(float));
	*clean = kvmem_check_xmalloc(l.size);
	kvmem_rng_seed(&r, 77);
	for (i = 0; i < n; i++) {
		k[i] = kvmem_check_rnd_value(&r, 1.0);
		v[i] = kvmem_check_rnd_value(&r, 1.0);
	}
	ck_assert_int_eq(kvmem_page_encode(*clean, &rp->g, &hdr, hot, k, v), 0);
	memcpy(page, *clean, l.size);
	if (flip)
		page[l.k_off + 5] ^= 0x10;
	free(k);
	free(v);

	ck_assert_int_eq(KVMEMD_OP(&rp->r, 3, .opcode = KVMEM_OP_PAGE_SEAL,
				   .slot = unit, .seq = 1, .layer = layer,
				   .ntokens = ntokens),
			 0);
	/* The seal completes at once and its check runs after; the daemon
	 * takes no later op before the check is done, so the NOP's completion
	 * says the page is as the check left it. */
	ck_assert_int_eq(KVMEMD_OP(&rp->r, 4, .opcode = KVMEM_OP_NOP), 0);
	return unit;
}

/* raw_open() of kvmemd_test_geo() with @kv_heads, and a first page. */
static void raw_page(struct raw_page *rp, const struct kvmemd_proc *p,
		     uint32_t kv_heads, int flip, int hot, uint32_t ntokens)
{
	struct kvmem_geometry g = kvmemd_test_geo();
	struct kvmem_page_layout l;

	g.kv_heads = kv_heads;
	raw_open(rp, p, &g);
	ck_assert_uint_eq(raw_seal(rp, 0, flip, hot, ntokens, &rp->clean), 0);
	kvmem_page_layout(&g, hot, &l);
	rp->size = l.size;
}

/*
 * Verify-on-seal corrects a page that was damaged before it was sealed; a
 * header no code can correct is written back from what the daemon recorded
 * at seal time.
 */
START_TEST(test_seal_verify_and_header_restore)
{
	struct kvmem_page_layout l;
	struct kvmemd_proc p;
	struct raw_page rp;

	kvmemd_start(&p, "[scrub]\nrate = 0\n", NULL);
	raw_page(&rp, &p, kvmemd_test_geo().kv_heads, 1, 0, 32);
	ck_assert_int_eq(memcmp(rp.r.arena, rp.clean, rp.size), 0);
	admin(&p, "errors");
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"tier\":\"warm\",\"codec\":\"h84\"",
				  "ce"),
		1);

	/* Four flips in header word 1 (bytes 3 to 5), two of its data bits
	 * and two of its parity bits: golay24 detects, cannot correct. */
	rp.r.arena[3] ^= 0x03;
	rp.r.arena[5] ^= 0x30;
	admin(&p, "scrub now session 1");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "restored_pages"), 1);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ue"), 1);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "degraded_pages"), 0);
	ck_assert_int_eq(memcmp(rp.r.arena, rp.clean, rp.size), 0);
	admin(&p, "events");
	ck_assert(strstr(reply,
			 "\"region\":\"header\",\"words\":1,"
			 "\"kind\":\"uncorrectable\",\"restored\":true"));

	/* Bytes that carry no value (the padding after V, the gap after
	 * the header): put back, and no reason to distrust the page. */
	rp.r.arena[rp.size - 1] ^= 0x01;
	rp.r.arena[KVMEM_PAGE_HDR_BYTES + 3] ^= 0x40;
	admin(&p, "scrub now");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "crc"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "degraded_pages"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "padding"), 2);
	ck_assert_int_eq(memcmp(rp.r.arena, rp.clean, rp.size), 0);

	/* A value turned into another codeword (h84 of data 1 is 0xb1): the
	 * codes cannot see it, the CRC does, once. */
	kvmem_page_layout(&rp.g, 0, &l);
	rp.r.arena[l.k_off + 7] ^= 0xb1;
	admin(&p, "scrub now");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "crc"), 1);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "degraded_pages"), 1);
	admin(&p, "scrub now");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "crc"), 0);

	kvmemd_raw_detach(&rp.r);
	free(rp.clean);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * A header that decodes cleanly but is another page's: layer 1's over
 * layer 0's. No code sees it, nor the CRC (it covers what follows the
 * header, the same in both pages here); the seal record does. The header
 * is written back and reported as a mismatch, the other page left alone.
 */
START_TEST(test_header_of_another_page)
{
	struct kvmem_page_hdr h;
	struct kvmemd_proc p;
	struct raw_page rp;
	uint8_t *other, *page1;
	uint32_t u;

	kvmemd_start(&p, "[scrub]\nrate = 0\n", NULL);
	raw_page(&rp, &p, kvmemd_test_geo().kv_heads, 0, 0, 32);
	u = raw_seal(&rp, 1, 0, 0, 32, &other);
	page1 = rp.r.arena + (size_t)u * KVMEM_SLOT_UNIT;
	memcpy(rp.r.arena, page1, KVMEM_PAGE_HDR_BYTES);
	ck_assert_int_eq(kvmem_page_read_header(rp.r.arena, &rp.g, &h, NULL),
			 0);
	ck_assert_uint_eq(h.layer, 1);

	admin(&p, "scrub now session 1");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "restored_pages"), 1);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ce"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ue"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "crc"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "degraded_pages"), 0);
	EXPECT_MEM(rp.r.arena, rp.clean, rp.size, "%s", "layer 0 as sealed");
	EXPECT_MEM(page1, other, rp.size, "%s", "layer 1 as sealed");
	admin(&p, "events");
	ck_assert_msg(strstr(reply, "\"seq\":1,\"layer\":0,\"token_start\":0,"
				    "\"token_end\":31,\"pool\":\"host\","
				    "\"tier\":\"warm\",\"codec\":\"golay24\","
				    "\"region\":\"header\",\"words\":0,"
				    "\"kind\":\"mismatch\",\"restored\":true"),
		      "%s", reply);
	ck_assert_ptr_null(strstr(reply, "\"layer\":1"));

	kvmemd_raw_detach(&rp.r);
	free(rp.clean);
	free(other);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * The scales are one FP16 bitstream in golay24 words, an even number of
 * them: 128 scales (one KV head: K and V, 32 tokens, 2 groups) take 2048
 * bits, 171 words of 12 bits, and a 172nd that holds padding only. The
 * last word with scale bits damaged past correction is an uncorrectable
 * word of the scales; the padding word damaged so loses no scale, is
 * not counted, and is put back.
 */
START_TEST(test_scale_padding_word)
{
	struct kvmem_page_layout l;
	struct kvmemd_proc p;
	struct raw_page rp;
	const char *e;
	int n = 0;

	kvmemd_start(&p, "[scrub]\nrate = 0\n", NULL);
	raw_page(&rp, &p, 1, 0, 0, 32);
	kvmem_page_layout(&rp.g, 0, &l);
	ck_assert_uint_eq(l.nscales_k + l.nscales_v, 128);
	ck_assert_uint_eq(l.scale_words, 172);

	/* Four flips in word 170, beyond golay24's three: it holds the last
	 * 8 bits of scale 127. */
	rp.r.arena[l.scales_off + 170 * 3] ^= 0x0f;
	admin(&p, "scrub now session 1");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ue"), 1);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "degraded_pages"), 1);

	rp.r.arena[l.scales_off + 171 * 3] ^= 0x0f;
	admin(&p, "scrub now session 1");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ue"), 0);
	/* Padding of a sealed page: put back, and no CRC event. */
	ck_assert_uint_eq(kvmemd_json_u64(reply, "padding"), 1);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "crc"), 0);
	ck_assert_uint_eq(rp.r.arena[l.scales_off + 171 * 3], 0);
	admin(&p, "events");
	for (e = strstr(reply, "\"region\":\"scales\""); e;
	     e = strstr(e + 1, "\"region\":\"scales\""))
		n++;
	ck_assert_int_eq(n, 1);
	ck_assert(strstr(reply, "\"codec\":\"golay24\",\"region\":\"scales\","
				"\"words\":1,\"kind\":\"uncorrectable\""));

	kvmemd_raw_detach(&rp.r);
	free(rp.clean);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * An FP16 page (the sink tokens' kind) has a check a row, two golay24
 * words each, [K, V][kv_head][token], for every row of the page: those of
 * rows past ntokens check nothing. Four flips in a check word of a row
 * with values is an uncorrectable word of the scales region and degrades
 * the page; in one of a row past the end it loses nothing, is not
 * counted, and is put back.
 */
START_TEST(test_row_check_padding_word)
{
	struct kvmem_page_layout l;
	struct kvmemd_proc p;
	struct raw_page rp;
	size_t tok2, tok10;

	kvmemd_start(&p, "[scrub]\nrate = 0\n", NULL);
	raw_page(&rp, &p, 1, 0, 1, 4);
	kvmem_page_layout(&rp.g, 1, &l);
	ck_assert_uint_eq(l.scale_words, 0);
	ck_assert_uint_eq(l.nchecks, 2 * 32);
	/* K's check of token 2, and of token 10: words 4 and 20. */
	tok2 = l.checks_off + 2 * 2 * 3;
	tok10 = l.checks_off + 2 * 10 * 3;
	ck_assert_uint_eq(rp.r.arena[tok10], 0);

	rp.r.arena[tok10] ^= 0x0f;
	admin(&p, "scrub now session 1");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ue"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "degraded_pages"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "padding"), 1);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "crc"), 0);
	ck_assert_uint_eq(rp.r.arena[tok10], 0);
	EXPECT_MEM(rp.r.arena, rp.clean, rp.size, "%s", "the page as sealed");

	rp.r.arena[tok2] ^= 0x0f;
	admin(&p, "scrub now session 1");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ue"), 1);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "degraded_pages"), 1);
	admin(&p, "events");
	ck_assert_msg(strstr(reply, "\"tier\":\"hot\",\"codec\":\"golay24\","
				    "\"region\":\"scales\",\"words\":1,"
				    "\"kind\":\"uncorrectable\""),
		      "%s", reply);

	kvmemd_raw_detach(&rp.r);
	free(rp.clean);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * int2 + golay24 rows: 64 values take 128 bits, 11 words of 12 bits, and
 * rows are whole pairs of words: a 12th that holds padding only. Four
 * flips in it lose no value: not counted, the page not degraded, the word
 * put back. In the 11th, which holds the row's last values, they are an
 * uncorrectable word of the payload.
 */
START_TEST(test_row_padding_word)
{
	struct kvmem_geometry g = kvmemd_test_geo();
	struct kvmem_page_layout l;
	struct kvmemd_proc p;
	struct raw_page rp;
	uint8_t *row;

	g.kv_heads = 1;
	g.format = KVMEM_FMT_INT2;
	g.codec = KVMEM_CODEC_GOLAY24;
	kvmemd_start(&p, "[scrub]\nrate = 0\n", NULL);
	raw_open(&rp, &p, &g);
	ck_assert_uint_eq(raw_seal(&rp, 0, 0, 0, 32, &rp.clean), 0);
	kvmem_page_layout(&g, 0, &l);
	rp.size = l.size;
	ck_assert_uint_eq(l.row_words, 12);
	/* K of token 5: words 10 (values) and 11 (padding). */
	row = rp.r.arena + l.k_off + 5 * l.row_bytes;

	row[11 * 3] ^= 0x0f;
	admin(&p, "scrub now session 1");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ue"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "degraded_pages"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "padding"), 1);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "crc"), 0);
	EXPECT_MEM(rp.r.arena, rp.clean, rp.size, "%s", "the page as sealed");
	admin(&p, "events");
	ck_assert_ptr_null(strstr(reply, "\"kind\""));

	row[10 * 3] ^= 0x0f;
	admin(&p, "scrub now session 1");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ue"), 1);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "degraded_pages"), 1);
	admin(&p, "events");
	ck_assert_msg(strstr(reply, "\"codec\":\"golay24\",\"region\":"
				    "\"payload\",\"words\":1,"
				    "\"kind\":\"uncorrectable\""),
		      "%s", reply);

	kvmemd_raw_detach(&rp.r);
	free(rp.clean);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* Send @req on a connected admin socket and read the reply. */
static void ask(int fd, const void *req, size_t len, char *out, size_t cap)
{
	size_t got = 0;
	ssize_t n;

	ck_assert_int_eq(send(fd, req, len, MSG_NOSIGNAL), (ssize_t)len);
	do {
		n = recv(fd, out + got, cap - 1 - got, 0);
		ck_assert_int_gt(n, 0);
		got += (size_t)n;
	} while (out[got - 1] != '\n');
	out[got] = 0;
}

static int admin_connect(const struct kvmemd_proc *p)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	strcpy(sa.sun_path, p->admin);
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/*
 * Bad requests get an error and the connection goes on; injection is off
 * by default; a user who is not root, kvmemd's or in the admin group is
 * refused by the daemon itself.
 */
START_TEST(test_admin_errors)
{
	char big[2048], out[4096];
	struct kvmemd_proc p;
	pid_t pid;
	int fd, status;

	kvmemd_start(&p, NULL, NULL);
	fd = admin_connect(&p);
	ask(fd, "bogus", 5, out, sizeof(out));
	ck_assert(strstr(out, "\"errno\":-22"));
	ask(fd, "status\0x", 8, out, sizeof(out));
	ck_assert(strstr(out, "\"errno\":-22"));
	memset(big, 'a', sizeof(big));
	ask(fd, big, sizeof(big), out, sizeof(out));
	ck_assert(strstr(out, "\"errno\":-90"));
	ask(fd, "inject pool ber 0.1", 19, out, sizeof(out));
	ck_assert_msg(strstr(out, "\"errno\":-1}"), "%s", out);
	ask(fd, "scrub now session 9", 19, out, sizeof(out));
	ck_assert(strstr(out, "\"errno\":-2}"));
	ask(fd, "policy set pool.host_bytes=2G", 29, out, sizeof(out));
	ck_assert(strstr(out, "restart"));
	ask(fd, "policy set scrub.rate=-1", 24, out, sizeof(out));
	ck_assert(strstr(out, "\"errno\":-22"));
	ask(fd, "version", 7, out, sizeof(out));
	ck_assert_uint_eq(kvmemd_json_u64(out, "admin"), 1);
	close(fd);

	if (geteuid() != 0) {
		kvmemd_stop(&p);
		kvmemd_cleanup(&p);
		fprintf(stderr, "SKIP: test_admin_errors: the access check "
				"needs root to switch users\n");
		return;
	}
	ck_assert_int_eq(chmod(p.dir, 0711), 0);
	ck_assert_int_eq(chmod(p.admin, 0666), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid) {
		if (setgid(65534) || setuid(65534))
			_exit(2);
		fd = admin_connect(&p);
		ask(fd, "status", 6, out, sizeof(out));
		_exit(strstr(out, "\"errno\":-13") ? 0 : 1);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* The event log is bounded; a long reply comes in several datagrams. */
START_TEST(test_events_bounded)
{
	struct kvmem_geometry g = geo(KVMEM_CODEC_H84);
	struct kvmem_seq *s[4], *more[500];
	struct kvmem_cache *c;
	struct kvmemd_proc p;
	const char *e;
	unsigned int n = 0, i;

	kvmemd_start(&p, "[scrub]\nrate = 0\nallow_inject = yes\nevents = 16\n",
		     NULL);
	c = attach(&p, &g, 16u << 20);
	fill(&g, c, s, 4, TOKENS, 1);
	admin(&p, "inject pool ber 0.03 seed 1");
	admin(&p, "scrub now");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "degraded_pages"),
			  4 * 2 * TOKENS / 32);
	admin(&p, "events");
	for (e = strstr(reply, "\"time\""); e; e = strstr(e + 1, "\"time\""))
		n++;
	ck_assert_uint_eq(n, 16);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "lost"), 4 * 2 * 8 - 16);
	admin(&p, "events limit 3");
	n = 0;
	for (e = strstr(reply, "\"time\""); e; e = strstr(e + 1, "\"time\""))
		n++;
	ck_assert_uint_eq(n, 3);
	for (i = 0; i < 500; i++)
		ck_assert_int_eq(kvmem_seq_create(c, &more[i]), 0);
	admin(&p, "seqs");
	ck_assert_uint_gt(strlen(reply), 32u << 10);
	n = 0;
	for (e = strstr(reply, "\"session\""); e;
	     e = strstr(e + 1, "\"session\""))
		n++;
	ck_assert_uint_eq(n, 504);
	kvmem_close(c);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * One session makes at most 64 events a minute, however many of its pages
 * go bad: a client rewriting its own pages cannot push everyone else's
 * events out. Its pages are all still counted as degraded.
 */
START_TEST(test_events_per_session_limit)
{
	struct kvmem_geometry g = geo(KVMEM_CODEC_H84);
	struct kvmem_seq *s[5];
	struct kvmem_cache *c;
	struct kvmemd_proc p;
	const char *e;
	unsigned int n = 0;

	kvmemd_start(&p, "[scrub]\nrate = 0\nallow_inject = yes\n", NULL);
	c = attach(&p, &g, 16u << 20);
	fill(&g, c, s, 5, TOKENS, 2);
	admin(&p, "inject pool ber 0.03 seed 1");
	admin(&p, "scrub now");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "degraded_pages"),
			  5 * 2 * TOKENS / 32);
	admin(&p, "events");
	for (e = strstr(reply, "\"time\""); e; e = strstr(e + 1, "\"time\""))
		n++;
	ck_assert_uint_eq(n, 64);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "lost"), 0);
	kvmem_close(c);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

KVMEM_SUITE(ras)
{
	Suite *s = suite_create("ras");
	TCase *tc = tcase_create("scrub");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_scrub_counts_injected);
	tcase_add_test(tc, test_inject_channels);
	tcase_add_test(tc, test_scrub_counts_every_region);
	tcase_add_test(tc, test_degraded_attend);
	tcase_add_test(tc, test_scrub_rate);
	tcase_add_test(tc, test_scrub_adapt);
	tcase_add_test(tc, test_scrub_adapt_archives);
	tcase_add_test(tc, test_persist);
	tcase_add_test(tc, test_journal_fields);
	tcase_add_test(tc, test_seal_verify_and_header_restore);
	tcase_add_test(tc, test_header_of_another_page);
	tcase_add_test(tc, test_scale_padding_word);
	tcase_add_test(tc, test_row_check_padding_word);
	tcase_add_test(tc, test_row_padding_word);
	tcase_add_test(tc, test_admin_errors);
	tcase_add_test(tc, test_events_bounded);
	tcase_add_test(tc, test_events_per_session_limit);
	suite_add_tcase(s, tc);
	return s;
}
