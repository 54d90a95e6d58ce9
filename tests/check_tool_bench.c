/* SPDX-License-Identifier: MIT */
/*
 * check_tool_bench.c - kvmem-bench, run as a process
 *
 * The ber Monte Carlo must sort codewords exactly as coding theory says,
 * whatever the random draw: a word with at most t flips decodes right, a
 * word within the detection radius is reported, and (for linear codes) a
 * word whose error the decoder did not undo always carries wrong data. Those
 * identities are asserted exactly against the flip histogram; the binomial
 * expectations are recomputed here. The codec benchmark is only checked for
 * the shape of its output: timings are never asserted.
 *
 * fill is checked the same way: its exact, corrected, rebuilt and wrong
 * counts against what was flipped, by its own injector (whose report is
 * independent of the decode) or by this test in kvmemd's session memory
 * while the tool holds, and against the geometry.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "kvmem/kvmem.h"
#include "kvmem_check.h"
#include "kvmemd_harness.h"

#define NFLIPS 6 /* flips[] buckets: 0..4 and "5 or more" */

/* The number after "KEY": in a flat JSON text. */
static double json_num(const char *json, const char *key)
{
	char pat[64];
	const char *p;
	char *end;
	double v;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = strstr(json, pat);
	ck_assert_msg(p != NULL, "no \"%s\" in %s", key, json);
	v = strtod(p + strlen(pat), &end);
	ck_assert_msg(end != p + strlen(pat), "\"%s\" is not a number", key);
	return v;
}

static void json_array(const char *json, const char *key, double *out, int n)
{
	char pat[64];
	const char *p;
	char *end;
	int i;

	snprintf(pat, sizeof(pat), "\"%s\": [", key);
	p = strstr(json, pat);
	ck_assert_msg(p != NULL, "no \"%s\" in %s", key, json);
	p += strlen(pat);
	for (i = 0; i < n; i++) {
		out[i] = strtod(p, &end);
		ck_assert_msg(end != p, "\"%s\"[%d] is not a number", key, i);
		p = end;
		ck_assert_int_eq(*p, i == n - 1 ? ']' : ',');
		p++;
	}
}

struct ber_run {
	double words, corrected, detected, silent;
	double flips[NFLIPS], flips_expected[NFLIPS];
	double e_corrected, e_detected, e_beyond;
};

static void run_ber(struct ber_run *b, const char *codec, const char *ber,
		    const char *words, const char *seed)
{
	struct kvmem_run r;

	KVMEM_RUN(&r, "kvmem-bench", "", "ber", "--codec", codec, "--ber", ber,
		  "--words", words, "--seed", seed, "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	b->words = json_num(r.out, "words");
	b->corrected = json_num(r.out, "corrected");
	b->detected = json_num(r.out, "detected");
	b->silent = json_num(r.out, "silent");
	b->e_beyond = json_num(r.out, "beyond");
	json_array(r.out, "flips", b->flips, NFLIPS);
	json_array(r.out, "flips_expected", b->flips_expected, NFLIPS);
	/* "expected": {"corrected": .., "detected": ..} follows the
	 * observed keys of the same name. */
	b->e_corrected = json_num(strstr(r.out, "\"expected\""), "corrected");
	b->e_detected = json_num(strstr(r.out, "\"expected\""), "detected");
	kvmem_check_run_free(&r);
}

/* N * P(w flips among n bits), computed directly. */
static double binom_count(double words, int n, int w, double p)
{
	double c = 1;
	int i;

	for (i = 1; i <= w; i++)
		c = c * (n - w + i) / i;
	return words * c * pow(p, w) * pow(1 - p, n - w);
}

static double sum_flips(const struct ber_run *b, int from, int to)
{
	double s = 0;
	int i;

	for (i = from; i <= to && i < NFLIPS; i++)
		s += b->flips[i];
	return s;
}

/* Every count adds up, and the binomial columns are the binomial. */
static void check_common(const struct ber_run *b, int n, int t, int det,
			 double p)
{
	double e = 0, e_corr = 0, e_det = 0, e_beyond = 0;
	int w;

	ck_assert_double_eq(sum_flips(b, 0, NFLIPS - 1), b->words);
	ck_assert_double_eq(b->corrected + b->detected + b->silent,
			    b->words - b->flips[0]);
	for (w = 0; w <= n; w++) {
		e = binom_count(b->words, n, w, p);
		if (w < NFLIPS - 1)
			ck_assert_double_eq_tol(b->flips_expected[w], e,
						1e-3 + 1e-6 * e);
		if (w >= 1 && w <= t)
			e_corr += e;
		else if (w > t && w <= det)
			e_det += e;
		else if (w > det)
			e_beyond += e;
	}
	ck_assert_double_eq_tol(b->e_corrected, e_corr, 1e-3 + 1e-6 * e_corr);
	ck_assert_double_eq_tol(b->e_detected, e_det, 1e-3 + 1e-6 * e_det);
	ck_assert_double_eq_tol(b->e_beyond, e_beyond, 1e-3 + 1e-6 * e_beyond);
	/* The channel itself: observed corrected-range words within 6 sigma
	 * of the binomial. */
	ck_assert_double_le(fabs(sum_flips(b, 1, t) - e_corr),
			    6 * sqrt(e_corr) + 1);
}

START_TEST(test_ber_h74)
{
	struct ber_run b;

	run_ber(&b, "h74", "0.02", "20000", "5");
	check_common(&b, 7, 1, 1, 0.02);
	/* Singles are corrected. A heavier error is never undone (the
	 * decoder adds one flip; error + flip is then a non-zero codeword,
	 * whose data part is non-zero) and never reported. */
	ck_assert_double_eq(b.corrected, b.flips[1]);
	ck_assert_double_eq(b.detected, 0);
	ck_assert_double_eq(b.silent, sum_flips(&b, 2, NFLIPS - 1));
	ck_assert_double_gt(b.silent, 0);
}
END_TEST

START_TEST(test_ber_h84)
{
	struct ber_run b;

	run_ber(&b, "h84", "0.02", "20000", "5");
	check_common(&b, 8, 1, 2, 0.02);
	ck_assert_double_eq(b.corrected, b.flips[1]);
	/* Every double is detected; a triple has odd parity, looks like a
	 * single and is miscorrected. */
	ck_assert_double_ge(b.detected, b.flips[2]);
	ck_assert_double_ge(b.silent, b.flips[3]);
	ck_assert_double_gt(b.flips[2], 0);
	ck_assert_double_gt(b.flips[3], 0);
}
END_TEST

START_TEST(test_ber_golay24)
{
	struct ber_run b;

	run_ber(&b, "golay24", "0.03", "20000", "5");
	check_common(&b, 24, 3, 4, 0.03);
	ck_assert_double_eq(b.corrected, sum_flips(&b, 1, 3));
	ck_assert_double_ge(b.detected, b.flips[4]);
	ck_assert_double_gt(b.flips[3], 0);
	ck_assert_double_gt(b.flips[4], 0);
}
END_TEST

START_TEST(test_ber_secded72)
{
	struct ber_run b;

	run_ber(&b, "secded72", "0.005", "20000", "5");
	check_common(&b, 72, 1, 2, 0.005);
	ck_assert_double_eq(b.corrected, b.flips[1]);
	ck_assert_double_ge(b.detected, b.flips[2]);
	ck_assert_double_gt(b.flips[2], 0);
}
END_TEST

START_TEST(test_ber_zero_rate)
{
	struct ber_run b;

	run_ber(&b, "h84", "0", "1000", "1");
	ck_assert_double_eq(b.flips[0], 1000);
	ck_assert_double_eq(b.corrected + b.detected + b.silent, 0);
	ck_assert_double_eq(b.flips_expected[0], 1000);
}
END_TEST

static void run_channel(struct ber_run *b, const char *codec, const char *chan,
			const char *depth, const char *ber)
{
	struct kvmem_run r;

	KVMEM_RUN(&r, "kvmem-bench", "", "ber", "--codec", codec, "--ber", ber,
		  "--channel", chan, "--interleave", depth, "--words", "40960",
		  "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_msg(strstr(r.out, "\"expected\": null") &&
			      strstr(r.out, "\"flips_expected\": null"),
		      "the binomial shown for %s: %s", chan, r.out);
	b->words = json_num(r.out, "words");
	b->corrected = json_num(r.out, "corrected");
	b->detected = json_num(r.out, "detected");
	b->silent = json_num(r.out, "silent");
	json_array(r.out, "flips", b->flips, NFLIPS);
	kvmem_check_run_free(&r);
}

/*
 * Two flips in one byte: an h84 word is one byte, so every hit word has
 * two flips and is detected, never corrected; interleaved by 8, the byte
 * holds one bit of each of 8 words, so a hit puts one flip in each of two
 * words, and they are corrected. golay24 corrects the two flips without
 * interleaving.
 */
START_TEST(test_ber_byte_interleave)
{
	struct ber_run b;

	run_channel(&b, "h84", "byte:2", "1", "0.01");
	ck_assert_double_eq(sum_flips(&b, 0, NFLIPS - 1), b.words);
	ck_assert_double_eq(b.flips[1], 0);
	ck_assert_double_gt(b.flips[2], 100);
	ck_assert_double_eq(sum_flips(&b, 3, NFLIPS - 1), 0);
	ck_assert_double_eq(b.detected, b.flips[2]);
	ck_assert_double_eq(b.corrected + b.silent, 0);

	/* Two hits in the 8 bytes of one group can still meet in a word,
	 * at odds of about 7 P per hit. */
	run_channel(&b, "h84", "byte:2", "8", "0.01");
	ck_assert_double_gt(b.flips[1], 200);
	ck_assert_double_le(sum_flips(&b, 2, NFLIPS - 1), b.flips[1] / 20);
	ck_assert_double_eq(b.corrected, b.flips[1]);
	ck_assert_double_eq(b.detected, b.flips[2]);

	/* golay24 words are 3 bytes: two hits in one make 4 flips. */
	run_channel(&b, "golay24", "byte:2", "1", "0.01");
	ck_assert_double_gt(b.flips[2], 100);
	ck_assert_double_eq(b.corrected, sum_flips(&b, 1, 3));
	ck_assert_double_eq(b.detected, b.flips[4]);
	ck_assert_double_eq(b.silent, 0);
}
END_TEST

/*
 * A garbled 64-byte line holds 64 h84 words: about half their bits flip,
 * beyond what the code can handle, and some come out silently wrong.
 * Interleaved by 512, a line holds one bit of each of 512 words.
 */
START_TEST(test_ber_line_interleave)
{
	struct ber_run b;

	run_channel(&b, "h84", "line", "1", "0.01");
	ck_assert_double_gt(sum_flips(&b, 3, NFLIPS - 1), 0);
	ck_assert_double_gt(b.silent, 0);

	/* A word's 8 bits span 8 lines: two hit lines among them (odds
	 * about 7 P) give it two flips, detected. */
	run_channel(&b, "h84", "line", "512", "0.01");
	ck_assert_double_gt(b.flips[1], 500);
	ck_assert_double_le(sum_flips(&b, 2, NFLIPS - 1), b.flips[1] / 10);
	ck_assert_double_eq(b.corrected, b.flips[1]);
	ck_assert_double_eq(b.detected, b.flips[2]);
	ck_assert_double_eq(b.silent, sum_flips(&b, 3, NFLIPS - 1));
}
END_TEST

START_TEST(test_ber_deterministic)
{
	struct kvmem_run a, b, c;

	KVMEM_RUN(&a, "kvmem-bench", "", "ber", "--codec", "golay24", "--ber",
		  "0.05", "--words", "5000", "--seed", "9", "--json");
	KVMEM_RUN(&b, "kvmem-bench", "", "ber", "--codec", "golay24", "--ber",
		  "0.05", "--words", "5000", "--seed", "9", "--json");
	KVMEM_RUN(&c, "kvmem-bench", "", "ber", "--codec", "golay24", "--ber",
		  "0.05", "--words", "5000", "--seed", "10", "--json");
	ck_assert_int_eq(a.status, 0);
	ck_assert_str_eq(a.out, b.out);
	ck_assert_str_ne(a.out, c.out);
	kvmem_check_run_free(&a);
	kvmem_check_run_free(&b);
	kvmem_check_run_free(&c);
}
END_TEST

START_TEST(test_codec_json)
{
	static const char *const names[] = { "h74", "h84", "golay24",
					     "secded72" };
	static const char *const keys[] = { "encode_gbps", "decode_gbps",
					    "scrub_clean_gbps",
					    "scrub_dirty_gbps" };
	struct kvmem_run r;
	const char *p;
	double read;
	size_t i, k;

	KVMEM_RUN(&r, "kvmem-bench", "", "codec", "--size", "2", "--reps", "1",
		  "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	read = json_num(r.out, "read_gbps");
	ck_assert_double_gt(read, 0);
	ck_assert_double_gt(json_num(r.out, "memcpy_gbps"), 0);
	p = r.out;
	for (i = 0; i < 4; i++) {
		char want[48];

		snprintf(want, sizeof(want), "{\"codec\": \"%s\"", names[i]);
		p = strstr(p, want);
		ck_assert_msg(p != NULL, "codec %s missing or out of order",
			      names[i]);
		for (k = 0; k < 4; k++)
			ck_assert_double_gt(json_num(p, keys[k]), 0);
		/* Both sides are printed to 3 decimals: relative slack. */
		ck_assert_double_eq_tol(
			json_num(p, "scrub_clean_vs_read"),
			json_num(p, "scrub_clean_gbps") / read,
			0.002 + 0.01 * json_num(p, "scrub_clean_vs_read"));
	}
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-bench", "", "codec", "--size", "1", "--reps", "1",
		  "--codec", "h84", "--portable", "--json");
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(strstr(r.out, "\"impl\": \"portable\""));
	ck_assert_ptr_nonnull(strstr(r.out, "\"codec\": \"h84\""));
	ck_assert_ptr_null(strstr(r.out, "\"codec\": \"h74\""));
	kvmem_check_run_free(&r);
}
END_TEST

/*
 * --interleave D: the bench checks its undo against interleaving bit by
 * bit and the round trip over the whole buffer, and exits 1 when either
 * differs; so a clean exit at every depth and SIMD level this machine has
 * (KVMEM_SIMD, which the child inherits) is the check. Only the one-byte
 * codecs get the figures.
 */
START_TEST(test_codec_interleave)
{
	static const char *const depths[] = { "8", "512" };
	struct kvmem_run r;
	const char *p;
	size_t i;
	int lv;

	for (lv = 0; lv < KVMEM__SIMD_NR; lv++) {
		if (!kvmem__simd_supported(lv))
			continue;
		setenv("KVMEM_SIMD", kvmem__simd_name(lv), 1);
		for (i = 0; i < 2; i++) {
			KVMEM_RUN(&r, "kvmem-bench", "", "codec", "--size", "1",
				  "--reps", "1", "--codec", "h84", "--codec",
				  "golay24", "--interleave", depths[i],
				  "--json");
			ck_assert_msg(r.status == 0, "%s, by %s: exit %d: %s",
				      kvmem__simd_name(lv), depths[i], r.status,
				      r.err);
			ck_assert_double_eq(json_num(r.out, "interleave"),
					    atof(depths[i]));
			p = strstr(r.out, "{\"codec\": \"h84\"");
			ck_assert_ptr_nonnull(p);
			ck_assert_double_gt(json_num(p, "deinterleave_gbps"),
					    0);
			ck_assert_double_gt(
				json_num(p, "deinterleave_decode_gbps"), 0);
			p = strstr(r.out, "{\"codec\": \"golay24\"");
			ck_assert_ptr_nonnull(p);
			ck_assert_ptr_null(strstr(p, "deinterleave"));
			kvmem_check_run_free(&r);
		}
	}
	unsetenv("KVMEM_SIMD");
	KVMEM_RUN(&r, "kvmem-bench", "", "codec", "--interleave", "16");
	ck_assert_int_eq(r.status, 2);
	ck_assert_ptr_nonnull(strstr(r.err, "8 or 512"));
	kvmem_check_run_free(&r);
}
END_TEST

/*
 * The attend benchmark's three paths compute the same attention (and its
 * threaded kvmem call the same bits as the single-threaded one): kvmem and
 * the fp32 loop differ by quantization only (int4 with group scales over
 * uniform [-1, 1] data moves each value by at most 1/14; averaged through
 * softmax that is far below 0.05), and fp16 + secded72 by FP16 rounding;
 * int8 scores differ from kvmem's own by less (kvmem.h's bound: about 0.03
 * here).
 */
START_TEST(test_attend_json)
{
	static const struct {
		const char *fmt, *codec;
		double tol;
		unsigned int bits;
	} cases[] = {
		{ "int4", "h84", 0.05, 4 },
		{ "int4", "golay24", 0.05, 4 },
		{ "fp16", "secded72", 1e-3, 16 },
	};
	struct kvmem_run r;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		KVMEM_RUN(&r, "kvmem-bench", "", "attend", "--ctx", "300",
			  "--heads", "8", "--kv-heads", "2", "--dim", "64",
			  "--format", cases[i].fmt, "--codec", cases[i].codec,
			  "--reps", "2", "--threads", "3", "--flush-mib", "1",
			  "--queries", "5", "--json");
		ck_assert_msg(r.status == 0, "%s: exit %d: %s", cases[i].fmt,
			      r.status, r.err);
		ck_assert_double_eq(json_num(r.out, "ctx"), 300);
		ck_assert_double_eq(json_num(r.out, "threads"), 3);
		ck_assert_double_eq(json_num(r.out, "flush_mib"), 1);
		ck_assert_ptr_nonnull(strstr(r.out, "\"mt_same_bits\": true"));
		ck_assert_double_gt(json_num(r.out, "kvmem_mt_us"), 0);
		/* K and V, 300 tokens of 2 heads of 64 floats */
		ck_assert_double_eq(json_num(r.out, "fp32_bytes"),
				    2 * 300 * 2 * 64 * 4);
		/* pages hold codewords, scales and headers besides */
		ck_assert_double_gt(json_num(r.out, "kvmem_bytes"),
				    2 * 300 * 2 * 64 * cases[i].bits / 8);
		ck_assert_double_gt(json_num(r.out, "read_gbps"), 0);
		ck_assert_double_gt(json_num(r.out, "floor_us"), 0);
		ck_assert_double_gt(json_num(r.out, "kvmem_us"), 0);
		ck_assert_double_gt(json_num(r.out, "fp32_us"), 0);
		ck_assert_double_gt(json_num(r.out, "noecc_us"), 0);
		ck_assert_double_eq(json_num(r.out, "queries"), 5);
		ck_assert_double_gt(json_num(r.out, "causal_us"), 0);
		ck_assert_double_eq_tol(json_num(r.out, "causal_query_us"),
					json_num(r.out, "causal_us") / 5, 0.1);
		/* the fp32 prefill, blocked, attends what kvmem's does */
		ck_assert_double_gt(json_num(r.out, "fp32_causal_us"), 0);
		ck_assert_double_le(json_num(r.out, "max_diff_causal_fp32"),
				    cases[i].tol);
		ck_assert_double_le(json_num(r.out, "max_diff_fp32"),
				    cases[i].tol);
		ck_assert_double_le(json_num(r.out, "max_diff_noecc"),
				    cases[i].tol);
		/* int8 scores: int4 pages take them (a difference, within
		 * the quantization's), FP16 pages keep the float scores */
		ck_assert_double_gt(json_num(r.out, "kvmem_q8_us"), 0);
		ck_assert_double_gt(json_num(r.out, "causal_q8_us"), 0);
		ck_assert_double_le(json_num(r.out, "max_diff_q8_kvmem"),
				    cases[i].tol);
		ck_assert_double_le(json_num(r.out, "max_diff_causal_q8_kvmem"),
				    cases[i].tol);
		if (cases[i].bits == 16)
			ck_assert_double_eq(
				json_num(r.out, "max_diff_q8_kvmem"), 0);
		else
			ck_assert_double_gt(
				json_num(r.out, "max_diff_q8_kvmem"), 0);
		kvmem_check_run_free(&r);
	}
}
END_TEST

/*
 * --rotate: kvmem's pages rotated, its output against the fp32 loop over
 * the same (unrotated) values within the quantization's difference, as
 * without the rotation (lm3 over uniform data: a group's RMS s, a value
 * off by at most about 0.3 s, far below 0.05 through softmax); the
 * threads give the same bits.
 */
START_TEST(test_attend_rotate_json)
{
	static const char *const fmts[] = { "int4", "lm3" };
	struct kvmem_run r;
	size_t i;

	for (i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++) {
		KVMEM_RUN(&r, "kvmem-bench", "", "attend", "--ctx", "300",
			  "--heads", "8", "--kv-heads", "2", "--dim", "64",
			  "--format", fmts[i], "--rotate", "--reps", "2",
			  "--threads", "2", "--flush-mib", "1", "--json");
		ck_assert_msg(r.status == 0, "%s: exit %d: %s", fmts[i],
			      r.status, r.err);
		ck_assert_ptr_nonnull(
			strstr(r.out, "\"rotation\": \"hadamard\""));
		ck_assert_ptr_nonnull(strstr(r.out, "\"mt_same_bits\": true"));
		ck_assert_double_gt(json_num(r.out, "kvmem_us"), 0);
		ck_assert_double_le(json_num(r.out, "max_diff_fp32"), 0.05);
		kvmem_check_run_free(&r);
	}
	/* A head_dim the rotation does not take: said, not run. */
	KVMEM_RUN(&r, "kvmem-bench", "", "attend", "--dim", "48", "--rotate",
		  "--reps", "1");
	ck_assert_int_eq(r.status, 2);
	ck_assert_ptr_nonnull(strstr(r.err, "power of two"));
	kvmem_check_run_free(&r);
}
END_TEST

/*
 * --format vq2: the pages sealed in int4, then archived to vq2 by
 * codebooks learned from them (timed), attended through the same
 * reports; there is no flat vq2 to compare (noecc null), the threads give
 * the same bits, int8 scores do not apply to vq2 rows (the float scores'
 * bits), and the output is within 0.05 of the fp32 loop's (0.025 here: a
 * value of uniform [-1, 1] data moves by about 0.15 in four dimensions
 * with 256 entries, and softmax averages it).
 */
START_TEST(test_attend_vq_json)
{
	struct kvmem_run r;

	KVMEM_RUN(&r, "kvmem-bench", "", "attend", "--ctx", "300", "--heads",
		  "8", "--kv-heads", "2", "--dim", "64", "--format", "vq2",
		  "--reps", "2", "--threads", "2", "--flush-mib", "1",
		  "--queries", "5", "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_ptr_nonnull(strstr(r.out, "\"format\": \"vq2\""));
	ck_assert_ptr_nonnull(strstr(r.out, "\"noecc_us\": null"));
	ck_assert_ptr_nonnull(strstr(r.out, "\"mt_same_bits\": true"));
	ck_assert_double_gt(json_num(r.out, "vq_encode_s"), 0);
	/* 2 bits a value, and the codebooks: 2 KV heads, K and V, 256
	 * entries of 8 bytes, twice that in golay24 words */
	ck_assert_double_gt(json_num(r.out, "kvmem_bytes"),
			    2 * 300 * 2 * 64 * 2 / 8 + 4 * 256 * 8 * 2);
	ck_assert_double_le(json_num(r.out, "max_diff_fp32"), 0.05);
	ck_assert_double_le(json_num(r.out, "max_diff_causal_fp32"), 0.05);
	ck_assert_double_eq(json_num(r.out, "max_diff_q8_kvmem"), 0);
	kvmem_check_run_free(&r);
	/* The kernels do not read vq2: said, not run. */
	KVMEM_RUN(&r, "kvmem-bench", "", "attend", "--format", "vq2", "--gpu",
		  "--reps", "1");
	ck_assert_int_eq(r.status, 2);
	ck_assert_ptr_nonnull(strstr(r.err, "do not read vq2"));
	kvmem_check_run_free(&r);
}
END_TEST

/*
 * The ring benchmark starts its own kvmemd (build/daemon/kvmemd, next to
 * build/tools/), checks every completion itself and fails on a wrong one;
 * here only the shape of its report is checked, never a timing.
 */
START_TEST(test_ring_json)
{
	static const char *const keys[] = {
		"ring_batched_ops",
		"ring_unbatched_ops",
		"ring_p50_us",
		"ring_p99_us",
		"socket_ops",
		"socket_p50_us",
		"alloc_batched_ops",
		"alloc_unbatched_ops",
		"batched_vs_socket",
		"batch",
		"ops",
	};
	struct kvmem_run r;
	double v;
	size_t i;

	/* Hermetic: the benchmark's own daemon, not one the caller runs. */
	unsetenv("KVMEM_SOCKET");
	KVMEM_RUN(&r, "kvmem-bench", "", "ring", "--ops", "2000", "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_msg(strchr(r.out, '{') == strrchr(r.out, '{'),
		      "more than one object: %s", r.out);
	for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		v = json_num(r.out, keys[i]);
		ck_assert_msg(isfinite(v) && v > 0, "\"%s\": %g in %s", keys[i],
			      v, r.out);
	}
	ck_assert_double_eq(json_num(r.out, "ops"), 2000);
	ck_assert_double_eq(json_num(r.out, "batch"), 32);
	ck_assert_double_ge(json_num(r.out, "ring_p99_us"),
			    json_num(r.out, "ring_p50_us"));
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-bench", "", "ring", "--batch", "0");
	ck_assert_int_eq(r.status, 2);
	ck_assert_msg(strstr(r.err, "--batch") != NULL,
		      "message does not name --batch: %s", r.err);
	kvmem_check_run_free(&r);
}
END_TEST

/*
 * hangup, small: its own kvmemd with a pool of four 64 MiB arenas, one
 * second of each window. The tool fails the run when a NOP or a status
 * goes unanswered or the pool does not come back; here the report's shape
 * and its counts are checked, never a timing.
 */
static void check_hangup(const char *json, int started)
{
	static const char *const times[] = {
		"base_nop_p50_us",	"base_nop_p99_us",
		"base_nop_max_us",	"base_status_p50_us",
		"base_status_max_us",	"attack_nop_p50_us",
		"attack_nop_p99_us",	"attack_nop_max_us",
		"attack_status_p50_us", "attack_status_max_us",
		"nop_p99_vs_base",	"status_max_vs_base",
	};
	double v, sent;
	size_t i;

	ck_assert_msg(strchr(json, '{') == strrchr(json, '{'),
		      "more than one object: %s", json);
	for (i = 0; i < sizeof(times) / sizeof(times[0]); i++) {
		v = json_num(json, times[i]);
		ck_assert_msg(isfinite(v) && v > 0, "\"%s\": %g in %s",
			      times[i], v, json);
	}
	ck_assert_double_ge(json_num(json, "base_nop_p99_us"),
			    json_num(json, "base_nop_p50_us"));
	ck_assert_double_ge(json_num(json, "attack_nop_max_us"),
			    json_num(json, "attack_nop_p99_us"));
	/* One NOP due a millisecond, one status every 10 ms (answered or
	 * counted as unanswered). */
	ck_assert_double_eq(json_num(json, "base_nops"), 1000);
	ck_assert_double_eq(json_num(json, "attack_nops"), 1000);
	ck_assert_double_eq(json_num(json, "base_statuses") +
				    json_num(json, "base_status_errors"),
			    100);
	ck_assert_double_eq(json_num(json, "attack_statuses") +
				    json_num(json, "attack_status_errors"),
			    100);
	/* A round every 100 ms, each sent or not connected. */
	ck_assert_double_eq(json_num(json, "hellos"), 4);
	ck_assert_double_eq(json_num(json, "rounds"), 10);
	sent = json_num(json, "hellos_sent");
	ck_assert_double_eq(sent + json_num(json, "hellos_unsent"), 40);
	ck_assert_double_gt(sent, 0);
	ck_assert_double_eq(json_num(json, "refused") +
				    json_num(json, "evicted") +
				    json_num(json, "set_up"),
			    sent);
	ck_assert_double_ge(json_num(json, "set_up"), 0);
	ck_assert_double_ge(json_num(json, "sessions_peak"), 1);
	ck_assert_double_eq(json_num(json, "quota_bytes"), 64 << 20);
	ck_assert_double_eq(json_num(json, "pool_bytes"), 256 << 20);
	ck_assert_ptr_nonnull(strstr(json, started ? "\"started\": true"
						   : "\"started\": false"));
	/* Back where it was: the polite session's bytes, nothing else. */
	v = json_num(json, "reserved_bytes");
	ck_assert_double_gt(v, 16 << 20);
	ck_assert_double_eq(json_num(json, "reserved_bytes_after"), v);
	ck_assert_double_eq(json_num(json, "releasing_bytes_after"), 0);
	ck_assert_double_ge(json_num(json, "settle_ms"), 0);
}

START_TEST(test_hangup_json)
{
	char reply[4096];
	struct kvmemd_proc p;
	struct kvmem_run r;

	KVMEM_RUN(&r, "kvmem-bench", "", "hangup", "--hellos", "4", "--quota",
		  "64M", "--pool", "256M", "--seconds", "1", "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	check_hangup(r.out, 1);
	kvmem_check_run_free(&r);

	/* A running daemon's sockets. */
	kvmemd_start(&p,
		     "[pool]\nhost_bytes = 256M\nsession_max_bytes = 64M\n"
		     "session_default_bytes = 16M\n",
		     NULL);
	KVMEM_RUN(&r, "kvmem-bench", "", "hangup", "--connect", p.sock,
		  "--admin", p.admin, "--hellos", "4", "--quota", "64M",
		  "--seconds", "1", "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	check_hangup(r.out, 0);
	/* Nothing but the attack was ever refused. */
	kvmemd_admin(&p, "status", reply, sizeof(reply));
	ck_assert_uint_eq(kvmemd_json_u64(reply, "refused"),
			  (uint64_t)json_num(r.out, "refused"));
	kvmem_check_run_free(&r);
	kvmemd_wait_no_sessions(&p);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);

	KVMEM_RUN(&r, "kvmem-bench", "", "hangup", "--quota", "64M", "--pool",
		  "64M");
	ck_assert_int_eq(r.status, 1);
	ck_assert_msg(strstr(r.err, "does not hold"), "message: %s", r.err);
	kvmem_check_run_free(&r);
}
END_TEST

/*
 * kvmem-bench offload with its own daemon and store: every page written
 * went out and came back (the tool checks the daemon's byte counts), both
 * rates are measured, and without fio its columns are null.
 */
START_TEST(test_offload_json)
{
	struct kvmem_run r;

	KVMEM_RUN(&r, "kvmem-bench", "", "offload", "--bytes", "8M", "--qd",
		  "4", "--engine", "threads", "--no-fio", "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_double_ge(json_num(r.out, "bytes"), 8u << 20);
	ck_assert_double_eq(json_num(r.out, "queue_depth"), 4);
	ck_assert_double_gt(json_num(r.out, "offload_gbps"), 0);
	ck_assert_double_gt(json_num(r.out, "reload_gbps"), 0);
	ck_assert_msg(strstr(r.out, "\"fio_write_gbps\": null") &&
			      strstr(r.out, "\"fio_read_gbps\": null"),
		      "fio columns: %s", r.out);
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-bench", "", "offload", "--bytes", "12");
	ck_assert_int_eq(r.status, 2);
	ck_assert_msg(strstr(r.err, "--bytes"), "message: %s", r.err);
	kvmem_check_run_free(&r);
	KVMEM_RUN(&r, "kvmem-bench", "", "offload", "--kvmemd",
		  "/nonexistent/kvmemd", "--bytes", "1M", "--no-fio");
	ck_assert_int_eq(r.status, 3);
	kvmem_check_run_free(&r);
}
END_TEST

START_TEST(test_usage_errors)
{
	const char *const *const bad[] = {
		(const char *const[]){ NULL },
		(const char *const[]){ "nosuch", NULL },
		(const char *const[]){ "ber", NULL },
		(const char *const[]){ "ber", "--codec", "h75", NULL },
		(const char *const[]){ "ber", "--codec", "h84", "--ber", "2",
				       NULL },
		(const char *const[]){ "ber", "--codec", "h84", "--ber", "x",
				       NULL },
		(const char *const[]){ "ber", "--codec", "h84", "--words", "0",
				       NULL },
		(const char *const[]){ "ber", "--codec", "h84", "--seed", "-1",
				       NULL },
		(const char *const[]){ "ber", "--codec", "h84", "--channel",
				       "byte:9", NULL },
		(const char *const[]){ "ber", "--codec", "h84", "--interleave",
				       "0", NULL },
		(const char *const[]){ "ber", "--codec", "h84", "--interleave",
				       "3", "--words", "1000", NULL },
		(const char *const[]){ "ber", "--codec", "h74", "--channel",
				       "exact:8", NULL },
		(const char *const[]){ "codec", "--size", "0", NULL },
		(const char *const[]){ "codec", "--reps", "many", NULL },
		(const char *const[]){ "codec", "extra", NULL },
		(const char *const[]){ "attend", "--heads", "6", "--kv-heads",
				       "4", NULL },
		(const char *const[]){ "attend", "--threads", "0", NULL },
		(const char *const[]){ "attend", "--flush-mib", "lots", NULL },
		(const char *const[]){ "attend", "--format", "int3", NULL },
		(const char *const[]){ "attend", "--ctx", "0", NULL },
		(const char *const[]){ "attend", "--queries", "0", NULL },
		(const char *const[]){ "attend", "--ctx", "300", "--queries",
				       "301", NULL },
		(const char *const[]){ "attend", "--sealed", NULL },
		/* decoding's shape: 4 sinks and a tail of half a page */
		(const char *const[]){ "attend", "--gpu", "--ctx", "3", NULL },
		(const char *const[]){ "ring", "--batch", "257", NULL },
		(const char *const[]){ "ring", "--ops", "many", NULL },
		(const char *const[]){ "ring", "extra", NULL },
		(const char *const[]){ "hangup", "--hellos", "0", NULL },
		(const char *const[]){ "hangup", "--quota", "1x", NULL },
		(const char *const[]){ "hangup", "--quota", "1M", NULL },
		(const char *const[]){ "hangup", "--seconds", "0", NULL },
		(const char *const[]){ "hangup", "--connect", "k.sock", NULL },
		(const char *const[]){ "hangup", "--connect", "k.sock",
				       "--admin", "a.sock", "--pool", "1G",
				       NULL },
		(const char *const[]){ "hangup", "extra", NULL },
		(const char *const[]){ "attach", "--cycles", "0", NULL },
		(const char *const[]){ "attach", "extra", NULL },
		(const char *const[]){ "prefix", "--tokens", "35", NULL },
		(const char *const[]){ "prefix", "--sessions", "0", NULL },
		(const char *const[]){ "prefix", "--layers", "129", NULL },
		(const char *const[]){ "prefix", "extra", NULL },
		(const char *const[]){ "archive", "--to", "int4", NULL },
		(const char *const[]){ "archive", "--to", "fp16+golay24",
				       NULL },
		(const char *const[]){ "archive", "--to", "int4+golay25",
				       NULL },
		(const char *const[]){ "archive", "--ctx", "0", NULL },
		(const char *const[]){ "archive", "--format", "int5", NULL },
		(const char *const[]){ "archive", "--kv-heads", "0", NULL },
		(const char *const[]){ "archive", "extra", NULL },
		(const char *const[]){ "record", "--rounds", "0", NULL },
		(const char *const[]){ "record", "--sessions", "33", NULL },
		(const char *const[]){ "record", "--kept-bytes", "1x", NULL },
		(const char *const[]){ "record", "--kept-bytes", "17G", NULL },
		(const char *const[]){ "record", "--rounds", "3", "--nops", "2",
				       NULL },
		(const char *const[]){ "record", "extra", NULL },
		(const char *const[]){ "reboot", "--kept-bytes", "9G", NULL },
		(const char *const[]){ "reboot", "--tokens", "63", NULL },
		(const char *const[]){ "reboot", "extra", NULL },
	};
	struct kvmem_run r;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		kvmem_check_run(&r, "kvmem-bench", "", NULL, bad[i]);
		ck_assert_msg(r.status == 2, "case %zu: exit %d", i, r.status);
		ck_assert_msg(strstr(r.err, "usage") || strstr(r.err, "bad") ||
				      strstr(r.err, "unknown") ||
				      strstr(r.err, "needs") ||
				      strstr(r.err, "must"),
			      "case %zu: unclear message: %s", i, r.err);
		kvmem_check_run_free(&r);
	}
	KVMEM_RUN(&r, "kvmem-bench", "", "--help");
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(strstr(r.out, "codec"));
	ck_assert_ptr_nonnull(strstr(r.out, "ber"));
	kvmem_check_run_free(&r);
}
END_TEST

/*
 * record, small: two rounds a daemon of one sequence each, 200 NOPs, and
 * two sessions of a sequence each killed with their daemon and taken
 * back. The tool fails the run on a session not taken back or a value
 * that reads back wrong; here the report's shape, its counts and the
 * ratios it computes from what it reports, never a timing.
 */
START_TEST(test_record_json)
{
	static const char *const positive[] = {
		"record_tokens_per_s",
		"no_record_tokens_per_s",
		"record_mb_per_s",
		"no_record_mb_per_s",
		"append_vs_no_record",
		"record_nop_p50_us",
		"record_nop_p99_us",
		"no_record_nop_p50_us",
		"no_record_nop_p99_us",
		"nop_p50_vs_no_record",
		"nop_p99_vs_no_record",
		"kept_bytes",
		"ready_s",
		"serving_s",
		"ready_s_per_gib",
		"serving_s_per_gib",
		"verified_bytes",
	};
	/* 8 layers x 8 KV heads x 128 dims; 4 sink tokens and 16 pages of
	 * 32 tokens a sequence */
	const double row = 8 * 8 * 128, tokens = 4 + 16 * 32;
	double v, on, off, gib;
	struct kvmem_run r;
	size_t i;

	KVMEM_RUN(&r, "kvmem-bench", "", "record", "--rounds", "2",
		  "--append-bytes", "1M", "--nops", "200", "--kept-bytes", "1M",
		  "--sessions", "2", "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_msg(strchr(r.out, '{') == strrchr(r.out, '{'),
		      "more than one object: %s", r.out);
	for (i = 0; i < sizeof(positive) / sizeof(positive[0]); i++) {
		v = json_num(r.out, positive[i]);
		ck_assert_msg(isfinite(v) && v > 0, "\"%s\": %g in %s",
			      positive[i], v, r.out);
	}
	ck_assert_double_eq(json_num(r.out, "rounds"), 2);
	ck_assert_double_eq(json_num(r.out, "round_seqs"), 1);
	ck_assert_double_eq(json_num(r.out, "round_tokens"), tokens);
	ck_assert_double_eq(json_num(r.out, "nops"), 200);
	ck_assert_double_le(json_num(r.out, "record_tokens_per_s_min"),
			    json_num(r.out, "record_tokens_per_s"));
	ck_assert_double_ge(json_num(r.out, "record_tokens_per_s_max"),
			    json_num(r.out, "record_tokens_per_s"));
	ck_assert_double_le(json_num(r.out, "no_record_tokens_per_s_min"),
			    json_num(r.out, "no_record_tokens_per_s"));
	ck_assert_double_ge(json_num(r.out, "no_record_tokens_per_s_max"),
			    json_num(r.out, "no_record_tokens_per_s"));
	/* The ratios are those of the rates and latencies reported. */
	on = json_num(r.out, "record_tokens_per_s");
	off = json_num(r.out, "no_record_tokens_per_s");
	ck_assert_double_eq_tol(json_num(r.out, "append_vs_no_record"),
				on / off, 1e-3 * on / off);
	ck_assert_double_eq_tol(json_num(r.out, "record_mb_per_s"),
				on * row * 2 * 4 / 1e6, 0.01);
	ck_assert_double_eq_tol(json_num(r.out, "no_record_mb_per_s"),
				off * row * 2 * 4 / 1e6, 0.01);
	on = json_num(r.out, "record_nop_p50_us");
	off = json_num(r.out, "no_record_nop_p50_us");
	ck_assert_double_eq_tol(json_num(r.out, "nop_p50_vs_no_record"),
				on / off, 0.01 * on / off);
	ck_assert_double_ge(json_num(r.out, "record_nop_p99_us"), on);
	ck_assert_double_ge(json_num(r.out, "no_record_nop_p99_us"), off);
	on = json_num(r.out, "record_nop_p99_us");
	off = json_num(r.out, "no_record_nop_p99_us");
	ck_assert_double_eq_tol(json_num(r.out, "nop_p99_vs_no_record"),
				on / off, 0.01 * on / off);
	/* Every session taken back, and one sequence of each read back. */
	ck_assert_double_eq(json_num(r.out, "sessions"), 2);
	ck_assert_double_eq(json_num(r.out, "reconnected"), 2);
	ck_assert_double_eq(json_num(r.out, "kept_seqs"), 2);
	ck_assert_double_eq(json_num(r.out, "kept_tokens"), 2 * tokens);
	ck_assert_double_eq(json_num(r.out, "verified_seqs"), 2);
	ck_assert_double_eq(json_num(r.out, "verified_bytes"),
			    2 * 8 * tokens * (row / 8) * 2 * 4);
	ck_assert_double_ge(json_num(r.out, "serving_s"),
			    json_num(r.out, "ready_s"));
	gib = json_num(r.out, "kept_bytes") / (1 << 30);
	v = json_num(r.out, "serving_s") / gib;
	ck_assert_double_eq_tol(json_num(r.out, "serving_s_per_gib"), v,
				1e-3 * v + 1e-4 / gib);
	kvmem_check_run_free(&r);
}
END_TEST

/*
 * reboot, small: prompts of 100 tokens (4 sink tokens and 3 pages: 4
 * blocks) until 1M is published, every one attached before the reboot and
 * after it, the first and the last compared. The tool fails the run on a
 * prompt not attached whole or a value that reads back wrong; here the
 * report's shape, its counts and the ratios it computes from what it
 * reports, never a timing.
 */
START_TEST(test_reboot_json)
{
	static const char *const positive[] = {
		"kept_bytes",	       "publish_mb_s_store",
		"publish_mb_s_memory", "publish_ratio",
		"ready_s_store",       "ready_s_empty",
		"attach_s_before",     "attach_s_after",
		"serving_s",	       "serving_s_per_gib",
		"verified_bytes",
	};
	/* 8 layers x 8 KV heads x 128 dims, K and V as floats */
	const double token = 8 * 8 * 128 * 2 * 4;
	double v, prompts, gib;
	struct kvmem_run r;
	size_t i;

	KVMEM_RUN(&r, "kvmem-bench", "", "reboot", "--kept-bytes", "1M",
		  "--tokens", "100", "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_msg(strchr(r.out, '{') == strrchr(r.out, '{'),
		      "more than one object: %s", r.out);
	for (i = 0; i < sizeof(positive) / sizeof(positive[0]); i++) {
		v = json_num(r.out, positive[i]);
		ck_assert_msg(isfinite(v) && v > 0, "\"%s\": %g in %s",
			      positive[i], v, r.out);
	}
	ck_assert_double_eq(json_num(r.out, "tokens"), 100);
	prompts = json_num(r.out, "prompts");
	ck_assert_double_ge(prompts, 1);
	ck_assert_double_ge(json_num(r.out, "kept_bytes"), 1 << 20);
	ck_assert_double_eq(json_num(r.out, "blocks"), 4 * prompts);
	ck_assert_double_eq(json_num(r.out, "attached"), 2 * prompts);
	ck_assert_double_eq(json_num(r.out, "verified_bytes"),
			    (prompts > 1 ? 2 : 1) * 100 * token);
	ck_assert_double_ge(json_num(r.out, "index_s"), 0);
	v = json_num(r.out, "publish_mb_s_store") /
	    json_num(r.out, "publish_mb_s_memory");
	/* Printed with three decimals, the rates with one. */
	ck_assert_double_eq_tol(json_num(r.out, "publish_ratio"), v,
				2e-3 * v + 5e-4);
	ck_assert_double_ge(json_num(r.out, "serving_s"),
			    json_num(r.out, "ready_s_store"));
	gib = json_num(r.out, "kept_bytes") / (1 << 30);
	v = json_num(r.out, "serving_s") / gib;
	ck_assert_double_eq_tol(json_num(r.out, "serving_s_per_gib"), v,
				1e-3 * v + 1e-4 / gib);
	v = (json_num(r.out, "ready_s_store") -
	     json_num(r.out, "ready_s_empty")) /
	    gib;
	/* Two times of four decimals apart, over a small fraction of a
	 * GiB. */
	ck_assert_double_eq_tol(json_num(r.out, "ready_extra_s_per_gib"), v,
				1e-3 * fabs(v) + 2e-4 / gib);
	kvmem_check_run_free(&r);
}
END_TEST

/* ---- archive ---------------------------------------------------------- */

/*
 * archive --json: 300 tokens of 2 KV heads of 64 after 4 sink tokens make
 * 9 sealed pages of 32; int8 + golay24 rows (44 words of 3 bytes against
 * h84's 64 of 1) would make larger pages and are reported as refused.
 */
START_TEST(test_archive_json)
{
	static const char *const want[] = {
		"\"format\": \"int4\", \"codec\": \"golay24\", \"error\": 0,",
		"\"format\": \"int2\", \"codec\": \"golay24\", \"error\": 0,",
		"\"format\": \"int8\", \"codec\": \"golay24\", \"error\": -7,",
	};
	struct kvmem_run r;
	const char *p;
	size_t i;

	KVMEM_RUN(&r, "kvmem-bench", "", "archive", "--ctx", "300",
		  "--kv-heads", "2", "--dim", "64", "--reps", "2", "--to",
		  "int4+golay24,int2+golay24,int8+golay24", "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_double_eq(json_num(r.out, "pages"), 9);
	ck_assert_double_gt(json_num(r.out, "copy_gbps"), 0);
	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		p = strstr(r.out, want[i]);
		ck_assert_msg(p != NULL, "no '%s' in %s", want[i], r.out);
		ck_assert_ptr_nonnull(strstr(p, i < 2 ? "\"verified\": true"
						      : "\"verified\": false"));
		if (i < 2)
			ck_assert_double_gt(json_num(p, "pages_per_s"), 0);
	}
	kvmem_check_run_free(&r);
}
END_TEST

/* ---- attach ----------------------------------------------------------- */

/*
 * attach --json: as many cycles as asked, each a session the daemon
 * counts as attached and then detached, and the daemon's RSS read (it is
 * this test's child, so its /proc entry is readable).
 */
START_TEST(test_attach_json)
{
	char reply[4096];
	struct kvmemd_proc p;
	struct kvmem_run r;

	kvmemd_start(&p, NULL, NULL);
	KVMEM_RUN(&r, "kvmem-bench", "", "attach", "--connect", p.sock,
		  "--cycles", "40", "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_double_eq(json_num(r.out, "cycles"), 40);
	ck_assert_double_gt(json_num(r.out, "connect_close_per_s"), 0);
	ck_assert_double_gt(json_num(r.out, "attach_detach_per_s"), 0);
	ck_assert_double_gt(json_num(r.out, "daemon_rss_kib_before"), 0);
	ck_assert_double_gt(json_num(r.out, "daemon_rss_kib_after"), 0);
	kvmem_check_run_free(&r);
	/* The last session's arena is freed on a worker after it ends. */
	kvmemd_wait_no_sessions(&p);
	kvmemd_admin(&p, "status", reply, sizeof(reply));
	/* The cycles, and an attach before and after them. */
	ck_assert_uint_eq(kvmemd_json_u64(reply, "attached"), 42);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "detached"), 42);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* ---- prefix ----------------------------------------------------------- */

/*
 * prefix --json with one prompt: the first request publishes it, every
 * other attaches all of it (100 tokens: blocks end at 4, 36 and 68, the
 * fourth at 100 is whole too), and kvmemd counts the same.
 */
START_TEST(test_prefix_json)
{
	char reply[4096];
	struct kvmemd_proc p;
	struct kvmem_run r;

	kvmemd_start(&p, NULL, NULL);
	KVMEM_RUN(&r, "kvmem-bench", "", "prefix", "--connect", p.sock,
		  "--tokens", "100", "--prompts", "1", "--sessions", "2",
		  "--requests", "3", "--layers", "2", "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_double_eq(json_num(r.out, "requests"), 3);
	ck_assert_double_eq_tol(json_num(r.out, "request_hit_rate"), 5.0 / 6,
				1e-4);
	ck_assert_double_eq_tol(json_num(r.out, "block_hit_rate"), 5.0 / 6,
				1e-4);
	ck_assert_double_gt(json_num(r.out, "attach_us_p50"), 0);
	ck_assert_double_gt(json_num(r.out, "append_over_attach"), 0);
	kvmem_check_run_free(&r);
	kvmemd_admin(&p, "prefixes", reply, sizeof(reply));
	ck_assert_uint_eq(kvmemd_json_after(reply, "\"prefix\"", "blocks"), 4);
	ck_assert_uint_eq(kvmemd_json_after(reply, "\"prefix\"", "hits"),
			  5 * 4);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* ---- fill ------------------------------------------------------------- */

/*
 * The fill tests' geometry: 2 layers, 2 KV heads, dim 64, 32 tokens per
 * page after 4 FP16 sink tokens (the defaults). With 150 tokens a layer
 * holds 4 sealed pages, tokens 4..131; injection touches only those.
 */
#define FILL_GEO "--layers", "2", "--kv-heads", "2", "--dim", "64"
#define FILL_TOKEN_VALUES (2.0 * 2 * 64 * 2) /* layers, heads, dim, K+V */
#define FILL_SEALED_TOKENS(tokens) (((tokens)-4) / 32 * 32)

struct fill_run {
	double values, exact, corrected, rebuilt, wrong;
	double words_corrected, words_uncorrectable, session, hold_s;
	double inj_words, by_flips[8];
};

static void fill_parse(const char *json, struct fill_run *f)
{
	const char *inj = strstr(json, "\"injected\"");

	ck_assert_msg(inj != NULL, "no \"injected\" in %s", json);
	f->values = json_num(json, "values");
	f->exact = json_num(json, "exact");
	f->corrected = json_num(json, "corrected");
	f->rebuilt = json_num(json, "rebuilt");
	f->wrong = json_num(json, "wrong");
	f->words_corrected = json_num(json, "words_corrected");
	f->words_uncorrectable = json_num(json, "words_uncorrectable");
	f->session = json_num(json, "session");
	f->hold_s = json_num(json, "hold_s");
	f->inj_words = json_num(inj, "words");
	json_array(inj, "by_flips", f->by_flips, 8);
	ck_assert_double_eq(f->exact + f->corrected + f->rebuilt + f->wrong,
			    f->values);
}

/* A fill against a live kvmemd reads back every value exactly. */
START_TEST(test_fill_daemon_clean)
{
	struct kvmemd_proc p;
	struct kvmem_run r;
	struct fill_run f;

	kvmemd_start(&p, NULL, NULL);
	KVMEM_RUN(&r, "kvmem-bench", "", "fill", "--connect", p.sock, "--seqs",
		  "3", "--tokens", "150", FILL_GEO, "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_ptr_nonnull(strstr(r.out, "\"mode\": \"kvmemd\""));
	fill_parse(r.out, &f);
	ck_assert_double_eq(f.values, 3 * 150 * FILL_TOKEN_VALUES);
	ck_assert_double_eq(f.exact, f.values);
	ck_assert_double_eq(f.wrong, 0);
	ck_assert_double_eq(f.words_corrected + f.words_uncorrectable, 0);
	ck_assert_double_ge(f.session, 1);
	kvmem_check_run_free(&r);

	/* The same in human form. */
	KVMEM_RUN(&r, "kvmem-bench", "", "fill", "--connect", p.sock, "--seqs",
		  "1", "--tokens", "40", FILL_GEO);
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_ptr_nonnull(strstr(r.out, "kvmemd at "));
	ck_assert_ptr_nonnull(strstr(r.out, "(baseline)"));
	ck_assert_ptr_nonnull(strstr(r.out, "wrong"));
	kvmem_check_run_free(&r);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

static size_t read_text(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	size_t n = 0;

	if (f) {
		n = fread(buf, 1, len - 1, f);
		fclose(f);
	}
	buf[n] = 0;
	return n;
}

/* The session memory kvmemd holds for its only session, mapped here. */
static uint8_t *map_session(const struct kvmemd_proc *p, size_t *len)
{
	char dir[64], path[600], target[256];
	struct dirent *d;
	struct stat st;
	uint8_t *map = NULL;
	ssize_t n;
	DIR *fds;
	int fd;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)p->pid);
	fds = opendir(dir);
	ck_assert_msg(fds != NULL, "%s: %s", dir, strerror(errno));
	while ((d = readdir(fds))) {
		snprintf(path, sizeof(path), "%s/%s", dir, d->d_name);
		n = readlink(path, target, sizeof(target) - 1);
		if (n < 0)
			continue;
		target[n] = 0;
		if (!strstr(target, "memfd:kvmem-session"))
			continue;
		ck_assert_ptr_null(map);
		fd = open(path, O_RDWR);
		ck_assert_msg(fd >= 0, "%s: %s", path, strerror(errno));
		ck_assert_int_eq(fstat(fd, &st), 0);
		*len = (size_t)st.st_size;
		map = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
			   0);
		ck_assert_ptr_ne(map, MAP_FAILED);
		close(fd);
	}
	closedir(fds);
	ck_assert_msg(map != NULL, "kvmemd holds no session memfd");
	return map;
}

/*
 * Start kvmem-bench fill holding 2 sequences of 150 tokens in @p for up to
 * 300 s, its output in @out and @err; return once it says it holds them,
 * with the session it named.
 */
static pid_t fill_hold(const struct kvmemd_proc *p, char *out, char *err,
		       size_t len, unsigned int *session)
{
	const char *tool = kvmem_check_tool("kvmem-bench");
	char text[8192];
	const char *at;
	int i, status;
	pid_t pid;

	snprintf(out, len, "%s/fill.out", p->dir);
	snprintf(err, len, "%s/fill.err", p->dir);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid) {
		int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		/* Not left holding when the test fails half-way. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0)
			_exit(126);
		execl(tool, tool, "fill", "--connect", p->sock, "--seqs", "2",
		      "--tokens", "150", FILL_GEO, "--hold", "300", "--json",
		      (char *)NULL);
		_exit(127);
	}
	for (i = 0; i < 6000; i++) {
		read_text(err, text, sizeof(text));
		if (strstr(text, "holding"))
			break;
		ck_assert_int_eq(waitpid(pid, &status, WNOHANG), 0);
		usleep(10000);
	}
	ck_assert_msg(strstr(text, "holding 2 seqs for 300 s (session "),
		      "no hold announced: %s", text);
	at = strstr(text, "(session ");
	ck_assert_int_eq(sscanf(at, "(session %u,", session), 1);
	return pid;
}

/* End the hold, expect exit 0 and parse what the tool found. */
static void fill_finish(pid_t pid, const char *out, const char *err,
			struct fill_run *f)
{
	char text[8192];
	int status;

	ck_assert_int_eq(kill(pid, SIGUSR1), 0);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	read_text(err, text, sizeof(text));
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "status 0x%x: %s", status, text);
	read_text(out, text, sizeof(text));
	fill_parse(text, f);
	ck_assert_double_lt(f->hold_s, 300);
}

/*
 * An operator's errors, made while the tool holds its sequences. In every
 * sealed page of the session: one flip in the second scale word, one in
 * the first K word and two in the second V word. The scales are one FP16
 * bitstream in golay24 words of 12 bits (kvmem/page.h: K scales
 * [kv_head][token][group], two groups of 32 to a row), so the second word
 * holds stream bits 12 to 23: the last 4 bits of the scale of head 0's
 * token 0 group 0 and the first 8 of its group 1. Both groups' 64 values,
 * the flipped K word's among them, are corrected. The V word is erased (a
 * double under h84) and its one value rebuilt. In every sealed FP16 page
 * (the sink tokens', golay24 too): four flips in the second word of the
 * first K row, stream bits 12 to 23 again, which hold parts of the row's
 * first two values: detected, not corrected, and both values rebuilt. The
 * pages are found the way any reader of the arena would, by their headers;
 * what the tool must report follows from that alone.
 */
START_TEST(test_fill_hold_operator_errors)
{
	struct kvmem_geometry g = { .layers = 2,
				    .kv_heads = 2,
				    .head_dim = 64 };
	struct kvmem_page_layout l, lh;
	struct kvmem_page_hdr hdr;
	struct kvmemd_proc p;
	struct fill_run f;
	char out[600], err[600];
	uint8_t *map;
	size_t len = 0, off, npages = 0, nhot = 0;
	unsigned int session;
	pid_t pid;

	kvmem_geometry_default(&g);
	ck_assert_int_eq(kvmem_page_layout(&g, 0, &l), 0);
	ck_assert_int_eq(kvmem_page_layout(&g, 1, &lh), 0);
	/* No patrol: it would correct the flips before the tool reads. */
	kvmemd_start(&p, "[scrub]\nrate = 0\n", NULL);
	pid = fill_hold(&p, out, err, sizeof(out), &session);

	map = map_session(&p, &len);
	for (off = 0; off + l.size <= len; off += KVMEM_SLOT_UNIT) {
		if (kvmem_page_read_header(map + off, &g, &hdr, NULL) ||
		    !(hdr.flags & KVMEM_HDR_SEALED))
			continue;
		if (hdr.flags & KVMEM_HDR_HOT) {
			ck_assert_uint_le(off + lh.size, len);
			map[off + lh.k_off + 3] ^= 0x03;
			map[off + lh.k_off + 4] ^= 0x03;
			nhot++;
			continue;
		}
		map[off + l.scales_off + 3] ^= 0x01;
		map[off + l.k_off] ^= 0x01;
		map[off + l.v_off + 1] ^= 0x03;
		npages++;
	}
	munmap(map, len);
	ck_assert_uint_eq(npages, 2 * 2 * FILL_SEALED_TOKENS(150) / 32);
	/* A sink page in each layer of each sequence. */
	ck_assert_uint_eq(nhot, 2 * 2);

	fill_finish(pid, out, err, &f);
	ck_assert_double_eq(f.session, session);
	ck_assert_double_eq(f.corrected, 64 * npages);
	ck_assert_double_eq(f.rebuilt, npages + 2 * nhot);
	ck_assert_double_eq(f.wrong, 0);
	ck_assert_double_eq(f.words_corrected, 2 * npages);
	ck_assert_double_eq(f.words_uncorrectable, npages + nhot);
	ck_assert_double_eq(f.inj_words, 0);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * The daemon's injector and scrubber while the tool holds. After a scrub
 * nothing is left to correct when the tool reads. The seed gives no h84
 * word three flips or more (which SECDED would miscorrect) and no golay24
 * word, the code of the FP16 sink and tail pages, four or more; it gives
 * some golay24 words two or three, which golay24 corrects. So what the
 * codes cannot correct are the h84 words the injector gave two flips, and
 * the tool rebuilds the one int4 value of each. Nothing is wrong.
 */
START_TEST(test_fill_hold_scrubbed)
{
	struct kvmemd_proc p;
	struct fill_run f;
	char out[600], err[600], req[128], reply[8192];
	unsigned long long h84[8], gol[8];
	unsigned int session;
	pid_t pid;
	int i;

	kvmemd_start(&p, "[scrub]\nrate = 0\nallow_inject = yes\n", NULL);
	pid = fill_hold(&p, out, err, sizeof(out), &session);
	snprintf(req, sizeof(req), "inject session %u ber 0.001 seed 4",
		 session);
	kvmemd_admin(&p, req, reply, sizeof(reply));
	kvmemd_inject_flips(reply, "h84", h84);
	kvmemd_inject_flips(reply, "golay24", gol);
	for (i = 3; i < 8; i++)
		ck_assert_msg(!h84[i], "seed gives h84 words %d flips", i);
	for (i = 4; i < 8; i++)
		ck_assert_msg(!gol[i], "seed gives golay24 words %d flips", i);
	ck_assert_uint_gt(h84[2], 0);
	ck_assert_uint_gt(gol[2] + gol[3], 0);
	snprintf(req, sizeof(req), "scrub now session %u", session);
	kvmemd_admin(&p, req, reply, sizeof(reply));
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ce"),
			  h84[1] + gol[1] + gol[2] + gol[3]);
	/* Every h84 page is full: each of its words holds a value. */
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ue"), h84[2]);

	fill_finish(pid, out, err, &f);
	ck_assert_double_eq(f.session, session);
	ck_assert_double_eq(f.words_corrected, 0);
	ck_assert_double_eq(f.words_uncorrectable, h84[2]);
	ck_assert_double_eq(f.rebuilt, h84[2]);
	ck_assert_double_eq(f.corrected, 0);
	ck_assert_double_eq(f.wrong, 0);
	ck_assert_double_eq(f.exact + f.rebuilt, f.values);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * The tool's own injector on an embedded cache: under int4 + h84 a value
 * is one word, so values must sort exactly as the injector's histogram
 * says: one flip corrected, two detected and rebuilt, three miscorrected
 * into a wrong value (which fails the run).
 */
START_TEST(test_fill_inject_ber)
{
	const double sealed = 2 * FILL_SEALED_TOKENS(150) * FILL_TOKEN_VALUES;
	struct kvmem_run r;
	struct fill_run f;
	int i;

	KVMEM_RUN(&r, "kvmem-bench", "", "fill", "--embedded", "--seqs", "2",
		  "--tokens", "150", FILL_GEO, "--inject-ber", "0.01",
		  "--inject-seed", "7", "--json");
	ck_assert_msg(r.status <= 1, "exit %d: %s", r.status, r.err);
	fill_parse(r.out, &f);
	ck_assert_ptr_nonnull(strstr(r.out, "\"mode\": \"embedded\""));
	ck_assert_double_eq(f.session, 0);
	ck_assert_double_eq(f.inj_words, sealed);
	for (i = 4; i < 8; i++)
		ck_assert_msg(f.by_flips[i] == 0,
			      "%g words with %d flips: pick another seed",
			      f.by_flips[i], i);
	ck_assert_double_gt(f.by_flips[1], 0);
	ck_assert_double_gt(f.by_flips[2], 0);
	ck_assert_double_gt(f.by_flips[3], 0);
	ck_assert_double_eq(f.corrected, f.by_flips[1]);
	ck_assert_double_eq(f.rebuilt, f.by_flips[2]);
	ck_assert_double_eq(f.wrong, f.by_flips[3]);
	ck_assert_int_eq(r.status, 1);
	ck_assert_ptr_nonnull(strstr(r.err, "wrong: seq "));
	kvmem_check_run_free(&r);
}
END_TEST

/*
 * Exactly k flips in every payload word of every sealed page: each codec
 * either corrects them all, detects them all, or (h84 with three)
 * miscorrects them all; what is outside the sealed payload stays exact.
 * int8 over golay24 has values straddling two words, fp16 four values to
 * a secded72 word.
 */
START_TEST(test_fill_inject_flips)
{
	enum { CORRECTED, REBUILT, WRONG };
	static const struct {
		const char *fmt, *codec, *flips;
		int k, outcome;
	} cases[] = {
		{ "int4", "h84", "1", 1, CORRECTED },
		{ "int4", "h84", "2", 2, REBUILT },
		{ "int4", "h84", "3", 3, WRONG },
		{ "int4", "golay24", "3", 3, CORRECTED },
		{ "int4", "golay24", "4", 4, REBUILT },
		{ "int8", "golay24", "2", 2, CORRECTED },
		{ "fp16", "secded72", "1", 1, CORRECTED },
		{ "fp16", "secded72", "2", 2, REBUILT },
	};
	const double sealed = 2 * FILL_SEALED_TOKENS(150) * FILL_TOKEN_VALUES;
	struct kvmem_run r;
	struct fill_run f;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		KVMEM_RUN(&r, "kvmem-bench", "", "fill", "--embedded", "--seqs",
			  "2", "--tokens", "150", FILL_GEO, "--format",
			  cases[i].fmt, "--codec", cases[i].codec,
			  "--inject-flips", cases[i].flips, "--json");
		ck_assert_msg(r.status == (cases[i].outcome == WRONG),
			      "case %zu: exit %d: %s", i, r.status, r.err);
		fill_parse(r.out, &f);
		ck_assert_double_gt(f.inj_words, 0);
		ck_assert_double_eq(f.by_flips[cases[i].k], f.inj_words);
		ck_assert_double_eq(f.exact, f.values - sealed);
		ck_assert_double_eq(f.corrected,
				    cases[i].outcome == CORRECTED ? sealed : 0);
		ck_assert_double_eq(f.rebuilt,
				    cases[i].outcome == REBUILT ? sealed : 0);
		ck_assert_double_eq(f.wrong,
				    cases[i].outcome == WRONG ? sealed : 0);
		kvmem_check_run_free(&r);
	}
}
END_TEST

/*
 * --inject-channel: byte:2 flips two bits of a byte, and under int4 + h84
 * a byte is one word and one value, so every hit word has exactly two
 * flips, every one is detected and its value rebuilt, none corrected,
 * none wrong. exact:1 is --inject-flips 1: every payload word corrected.
 */
START_TEST(test_fill_inject_channel)
{
	const double sealed = 2 * FILL_SEALED_TOKENS(150) * FILL_TOKEN_VALUES;
	struct kvmem_run r;
	struct fill_run f;
	int i;

	KVMEM_RUN(&r, "kvmem-bench", "", "fill", "--embedded", "--seqs", "2",
		  "--tokens", "150", FILL_GEO, "--inject-ber", "0.01",
		  "--inject-channel", "byte:2", "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	fill_parse(r.out, &f);
	ck_assert_ptr_nonnull(strstr(r.out, "\"mode\": \"byte:2\""));
	ck_assert_double_eq(f.inj_words, sealed);
	ck_assert_double_gt(f.by_flips[2], 0);
	for (i = 1; i < 8; i++)
		if (i != 2)
			ck_assert_msg(f.by_flips[i] == 0,
				      "%g words with %d flips", f.by_flips[i],
				      i);
	ck_assert_double_eq(f.rebuilt, f.by_flips[2]);
	ck_assert_double_eq(f.corrected, 0);
	ck_assert_double_eq(f.wrong, 0);
	ck_assert_double_eq(f.exact, f.values - f.by_flips[2]);
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-bench", "", "fill", "--embedded", "--seqs", "2",
		  "--tokens", "150", FILL_GEO, "--inject-channel", "exact:1",
		  "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	fill_parse(r.out, &f);
	ck_assert_double_eq(f.by_flips[1], sealed);
	ck_assert_double_eq(f.corrected, sealed);
	ck_assert_double_eq(f.exact, f.values - sealed);
	kvmem_check_run_free(&r);
}
END_TEST

START_TEST(test_fill_usage_and_no_daemon)
{
	const char *const *const bad[] = {
		(const char *const[]){ "fill", NULL },
		(const char *const[]){ "fill", "--seqs", "2", NULL },
		(const char *const[]){ "fill", "--seqs", "0", "--tokens", "8",
				       NULL },
		(const char *const[]){ "fill", "--seqs", "1", "--tokens", "x",
				       NULL },
		(const char *const[]){ "fill", "--seqs", "1", "--tokens", "8",
				       "--embedded", "--connect", "k.sock",
				       NULL },
		(const char *const[]){ "fill", "--seqs", "1", "--tokens", "8",
				       "--hold", "-1", NULL },
		(const char *const[]){ "fill", "--seqs", "1", "--tokens", "8",
				       "--inject-ber", "2", NULL },
		(const char *const[]){ "fill", "--seqs", "1", "--tokens", "8",
				       "--inject-ber", "0", "--inject-flips",
				       "1", NULL },
		(const char *const[]){ "fill", "--seqs", "1", "--tokens", "8",
				       "--inject-flips", "9", NULL },
		(const char *const[]){ "fill", "--seqs", "1", "--tokens", "8",
				       "--inject-channel", "wobble", NULL },
		(const char *const[]){ "fill", "--seqs", "1", "--tokens", "8",
				       "--inject-channel", "byte:2", NULL },
		(const char *const[]){ "fill", "--seqs", "1", "--tokens", "8",
				       "--inject-channel", "byte:2",
				       "--inject-flips", "1", NULL },
		(const char *const[]){ "fill", "--seqs", "1", "--tokens", "8",
				       "--inject-channel", "exact:1",
				       "--inject-ber", "0.1", NULL },
		(const char *const[]){ "fill", "--seqs", "1", "--tokens", "8",
				       "--inject-channel", "exact:9", NULL },
		(const char *const[]){ "fill", "--seqs", "1", "--tokens", "8",
				       "--format", "int3", NULL },
		(const char *const[]){ "fill", "--seqs", "1", "--tokens", "8",
				       "extra", NULL },
	};
	struct kvmem_run r;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		kvmem_check_run(&r, "kvmem-bench", "", NULL, bad[i]);
		ck_assert_msg(r.status == 2, "case %zu: exit %d", i, r.status);
		ck_assert_msg(strstr(r.err, "usage") || strstr(r.err, "bad") ||
				      strstr(r.err, "needs") ||
				      strstr(r.err, "pick one"),
			      "case %zu: unclear message: %s", i, r.err);
		kvmem_check_run_free(&r);
	}

	KVMEM_RUN(&r, "kvmem-bench", "", "fill", "--connect",
		  "/nonexistent/kvmemd.sock", "--seqs", "1", "--tokens", "8");
	ck_assert_int_eq(r.status, 3);
	/* Said once: the library's sentence, and the tool's hint. */
	ck_assert_str_eq(r.err,
			 "kvmem-bench: cannot reach kvmemd at "
			 "/nonexistent/kvmemd.sock: No such file or directory "
			 "\u2014 is kvmemd running? (--embedded runs without "
			 "it)\n");
	ck_assert_str_eq(r.out, "");
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-bench", "", "fill", "--help");
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(strstr(r.out, "--inject-flips"));
	kvmem_check_run_free(&r);
}
END_TEST

/*
 * kvmem-bench remote, tiny: both clusters of its own, every number in its
 * JSON, the blocks the prompt holds. No timing is judged here.
 */
START_TEST(test_remote_json)
{
	static const char *const positive[] = {
		"publish_gbps",
		"set_gbps",
		"publish_over_set",
		"attach_gbps",
		"get_gbps",
		"attach_over_get",
		"attach_remote_us_p50",
		"attach_local_us_p50",
		"remote_over_local",
		"publish_3_over_1",
		"attach_3_over_1",
		"value_bytes",
	};
	/* 4 sink tokens, then blocks of 32 tokens: those within 256 */
	const double blocks = 1 + (256 - 4) / 32;
	struct kvmem_run r;
	double v;
	size_t i;

	if (!kvmem_check_have("redis-server") ||
	    !kvmem_check_have("redis-cli")) {
		printf("SKIP: %s: no redis-server or redis-cli in PATH\n",
		       __func__);
		return;
	}
	KVMEM_RUN(&r, "kvmem-bench", "", "remote", "--tokens", "256",
		  "--latency-tokens", "128", "--reps", "2", "--layers", "1",
		  "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_msg(r.out[0] == '{' &&
			      strchr(r.out, '\n') == r.out + strlen(r.out) - 1,
		      "not one line of JSON: %s", r.out);
	for (i = 0; i < sizeof(positive) / sizeof(positive[0]); i++) {
		v = json_num(r.out, positive[i]);
		ck_assert_msg(isfinite(v) && v > 0, "\"%s\": %g in %s",
			      positive[i], v, r.out);
	}
	ck_assert_double_eq(json_num(r.out, "tokens"), 256);
	ck_assert_double_eq(json_num(r.out, "blocks"), blocks);
	ck_assert_double_eq(json_num(r.out, "layers"), 1);
	ck_assert_double_eq(json_num(r.out, "kv_heads"), 8);
	ck_assert_double_eq(json_num(r.out, "head_dim"), 128);
	ck_assert_double_eq(json_num(r.out, "tokens_per_page"), 32);
	ck_assert_double_eq(json_num(r.out, "masters"), 3);
	ck_assert_double_eq(json_num(r.out, "latency_tokens"), 128);
	ck_assert_double_eq(json_num(r.out, "reps"), 2);
	ck_assert_ptr_nonnull(strstr(r.out, "\"own_cluster\": true"));
	ck_assert_ptr_nonnull(strstr(r.out, "\"masters\": [1, 3]"));
	kvmem_check_run_free(&r);
}
END_TEST

KVMEM_SUITE(tool_bench)
{
	Suite *s = suite_create("tool_bench");
	TCase *ber = tcase_create("ber");
	TCase *codec = tcase_create("codec");
	TCase *ring = tcase_create("ring");
	TCase *fill = tcase_create("fill");
	TCase *remote = tcase_create("remote");

	tcase_add_test(ber, test_ber_h74);
	tcase_add_test(ber, test_ber_h84);
	tcase_add_test(ber, test_ber_golay24);
	tcase_add_test(ber, test_ber_secded72);
	tcase_add_test(ber, test_ber_zero_rate);
	tcase_add_test(ber, test_ber_deterministic);
	tcase_add_test(ber, test_ber_byte_interleave);
	tcase_add_test(ber, test_ber_line_interleave);
	tcase_add_test(codec, test_codec_json);
	tcase_add_test(codec, test_codec_interleave);
	tcase_add_test(codec, test_attend_json);
	tcase_add_test(codec, test_attend_rotate_json);
	tcase_add_test(codec, test_attend_vq_json);
	tcase_add_test(codec, test_usage_errors);
	tcase_add_test(codec, test_archive_json);
	tcase_set_timeout(codec, 60);
	tcase_add_test(ring, test_ring_json);
	tcase_add_test(ring, test_offload_json);
	tcase_add_test(ring, test_attach_json);
	tcase_add_test(ring, test_prefix_json);
	tcase_add_test(ring, test_hangup_json);
	tcase_add_test(ring, test_record_json);
	tcase_add_test(ring, test_reboot_json);
	tcase_set_timeout(ring, 60);
	suite_add_tcase(s, ber);
	suite_add_tcase(s, codec);
	tcase_add_test(fill, test_fill_daemon_clean);
	tcase_add_test(fill, test_fill_hold_operator_errors);
	tcase_add_test(fill, test_fill_hold_scrubbed);
	tcase_add_test(fill, test_fill_inject_ber);
	tcase_add_test(fill, test_fill_inject_flips);
	tcase_add_test(fill, test_fill_inject_channel);
	tcase_add_test(fill, test_fill_usage_and_no_daemon);
	tcase_set_timeout(fill, 90);
	tcase_add_test(remote, test_remote_json);
	tcase_set_timeout(remote, 120);
	suite_add_tcase(s, ring);
	suite_add_tcase(s, fill);
	suite_add_tcase(s, remote);
	return s;
}
