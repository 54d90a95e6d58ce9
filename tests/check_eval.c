/* SPDX-License-Identifier: MIT */
/*
 * check_eval.c - kvmem-eval, run as a process
 *
 * A tiny random-weight checkpoint written here exercises the loader and the
 * whole protocol; bad checkpoints must be refused with a reason. With the
 * real stories260K checkpoint (../shared/models, or $KVMEM_MODEL) the
 * paper's claim is checked as an ordering, not as numbers: at BER 0 the
 * protected int4 modes decode the same values, and under injection golay24
 * and h84 with interpolation stay close to the error-free run while
 * unprotected int4 does not.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvmem/page.h"
#include "kvmem_check.h"
#include "kvmemd_harness.h"
#include "rng.h"

struct rec {
	char mode[32];
	double ber, ppl, kl, top1, top5, payload_bits, bits_per_value;
	unsigned long long seed, corrected, detected, flips, archived;
};

/* The records of kvmem-eval --json, one a line as it prints them. */
static int parse_records(const char *out, struct rec *r, int cap)
{
	const char *p = out;
	int n = 0;

	while ((p = strstr(p, "{\"mode\": \"")) != NULL) {
		ck_assert_int_lt(n, cap);
		ck_assert_int_eq(
			sscanf(p,
			       "{\"mode\": \"%31[^\"]\", \"ber\": %lf, "
			       "\"seed\": %llu, \"ppl\": %lf, \"kl\": %lf, "
			       "\"top1\": %lf, \"top5\": %lf, \"corrected\": "
			       "%llu, \"detected\": %llu, \"bits_flipped\": "
			       "%llu",
			       r[n].mode, &r[n].ber, &r[n].seed, &r[n].ppl,
			       &r[n].kl, &r[n].top1, &r[n].top5,
			       &r[n].corrected, &r[n].detected, &r[n].flips),
			10);
		ck_assert_int_eq(
			sscanf(strstr(p, "\"payload_bits\": "),
			       "\"payload_bits\": %lf, \"bits_per_value\": "
			       "%lf, \"archived_pages\": %llu}",
			       &r[n].payload_bits, &r[n].bits_per_value,
			       &r[n].archived),
			3);
		n++;
		p++;
	}
	return n;
}

static const struct rec *find(const struct rec *r, int n, const char *mode,
			      double ber, unsigned long long seed)
{
	int i;

	for (i = 0; i < n; i++)
		if (!strcmp(r[i].mode, mode) && r[i].ber == ber &&
		    r[i].seed == seed)
			return &r[i];
	ck_abort_msg("no record for %s at %g seed %llu", mode, ber, seed);
	return NULL;
}

/* header of 7 int32, then the llama2.c weights with a shared classifier */
struct tiny {
	int32_t dim, hidden, layers, heads, kv_heads, vocab, seq_len;
};

static size_t tiny_floats(const struct tiny *t)
{
	size_t d = t->dim, hd = d / t->heads, kv = hd * t->kv_heads;
	size_t L = t->layers;

	/* tok, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final,
	 * and the two legacy freq_cis tables */
	return t->vocab * d + L * d + L * d * d + 2 * L * d * kv + L * d * d +
	       L * d + 3 * L * d * t->hidden + d + t->seq_len * hd;
}

static void write_file(const char *path, const void *hdr, size_t hdr_len,
		       size_t nfloats, uint64_t seed, long cut)
{
	FILE *f = fopen(path, "wb");
	struct kvmem_rng r;
	size_t i;

	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	kvmem_rng_seed(&r, seed);
	ck_assert_uint_eq(fwrite(hdr, 1, hdr_len, f), hdr_len);
	for (i = 0; i < nfloats; i++) {
		/* Weights around +-0.3; norms near 1 keep activations sane. */
		float w = (float)((kvmem_rng_next(&r) >> 40) * 0x1p-24 - 0.5) *
			  0.6f;

		ck_assert_uint_eq(fwrite(&w, sizeof(w), 1, f), 1);
	}
	ck_assert_int_eq(fclose(f), 0);
	if (cut)
		ck_assert_int_eq(truncate(path, cut), 0);
}

static char tmpl[64];

/*
 * A checkpoint in a temporary file: header and weights, cut to @cut bytes
 * when @cut > 0, or the header alone when @cut < 0 (for headers whose
 * weights would not fit anywhere).
 */
static const char *tiny_model(const struct tiny *t, long cut)
{
	int fd;

	snprintf(tmpl, sizeof(tmpl), "/tmp/kvmem-eval-XXXXXX");
	fd = mkstemp(tmpl);
	ck_assert_int_ge(fd, 0);
	close(fd);
	write_file(tmpl, t, sizeof(*t), cut < 0 ? 0 : tiny_floats(t), 7,
		   cut > 0 ? cut : 0);
	return tmpl;
}

static const struct tiny tiny_ok = { 32, 48, 2, 4, 2, 64, 64 };

START_TEST(test_protocol_tiny)
{
	static const char *const kv_modes[] = { "int4-h74", "int4-h84",
						"int4-h84-interp",
						"int4-golay24" };
	const char *path = tiny_model(&tiny_ok, 0);
	struct kvmem_run r, r2;
	struct rec rec[64];
	int n, i, s;

	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "40",
		  "--modes",
		  "fp32,int4,int4-h74,int4-h84,int4-h84-interp,int4-golay24",
		  "--ber", "0,0.01", "--seeds", "1,2", "--page-tokens", "8",
		  "--sink", "2", "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	n = parse_records(r.out, rec, 64);
	ck_assert_int_eq(n, 6 * 2 * 2);
	for (s = 1; s <= 2; s++) {
		const struct rec *h84 = find(rec, n, "int4-h84", 0, s);

		/* The oracle replays the reference exactly. */
		for (i = 0; i < 2; i++) {
			const struct rec *f = find(rec, n, "fp32", i * 0.01, s);

			ck_assert_double_eq(f->kl, 0.0);
			ck_assert_double_eq(f->top1, 1.0);
		}
		/* Without errors every code decodes the same values. */
		for (i = 0; i < 4; i++) {
			const struct rec *m = find(rec, n, kv_modes[i], 0, s);

			ck_assert_double_eq(m->ppl, h84->ppl);
			ck_assert_double_eq(m->kl, h84->kl);
			ck_assert_double_eq(m->top5, h84->top5);
			ck_assert_uint_eq(m->corrected, 0);
			ck_assert_uint_eq(m->detected, 0);
			ck_assert_uint_eq(m->flips, 0);
		}
		ck_assert(isfinite(h84->ppl) && h84->ppl > 1.0);
		ck_assert_double_gt(h84->kl, 0.0); /* int4 is lossy */
		/* Under the channel the codes work, and plain int4 has no
		 * code to count anything with. */
		ck_assert_uint_gt(find(rec, n, "int4-h84", 0.01, s)->corrected,
				  0);
		ck_assert_uint_gt(
			find(rec, n, "int4-golay24", 0.01, s)->corrected, 0);
		ck_assert_uint_eq(find(rec, n, "int4", 0.01, s)->corrected, 0);
		ck_assert_uint_gt(find(rec, n, "int4", 0.01, s)->flips, 0);
	}
	/* Deterministic for the same arguments. */
	KVMEM_RUN(&r2, "kvmem-eval", "", "--model", path, "--tokens", "40",
		  "--modes",
		  "fp32,int4,int4-h74,int4-h84,int4-h84-interp,int4-golay24",
		  "--ber", "0,0.01", "--seeds", "1,2", "--page-tokens", "8",
		  "--sink", "2", "--json");
	ck_assert_str_eq(r.out, r2.out);
	kvmem_check_run_free(&r);
	kvmem_check_run_free(&r2);

	/* On its payload alone, h74 corrects but never detects (its
	 * headers and scales are secded72, which does). */
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "40",
		  "--modes", "int4-h74", "--ber", "0.01", "--seeds", "1",
		  "--page-tokens", "8", "--sink", "2", "--payload-only",
		  "--json");
	ck_assert_int_eq(parse_records(r.out, rec, 64), 1);
	ck_assert_uint_gt(rec[0].corrected, 0);
	ck_assert_uint_eq(rec[0].detected, 0);
	kvmem_check_run_free(&r);

	/* Two flips in one byte: every h84 payload word it hits has two,
	 * which h84 detects and never corrects. */
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "40",
		  "--modes", "int4-h84", "--ber", "0.01", "--seeds", "1",
		  "--page-tokens", "8", "--sink", "2", "--payload-only",
		  "--channel", "byte:2", "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_int_eq(parse_records(r.out, rec, 64), 1);
	ck_assert_uint_eq(rec[0].corrected, 0);
	ck_assert_uint_gt(rec[0].detected, 0);
	ck_assert_uint_eq(rec[0].flips, 2 * rec[0].detected);
	ck_assert_ptr_nonnull(strstr(r.out, "\"channel\": \"byte:2\""));
	kvmem_check_run_free(&r);

	/* The human table names the channel and the geometry. */
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "20",
		  "--modes", "int4-h84", "--ber", "0.001", "--seeds", "3");
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(
		strstr(r.out, "header, scales, checks and payload"));
	ck_assert_ptr_nonnull(strstr(r.out, "tokens a page"));
	ck_assert_ptr_nonnull(strstr(r.out, "int4-h84"));
	kvmem_check_run_free(&r);
	unlink(path);
}
END_TEST

/*
 * --int8-scores: the kvmem modes attend with KVMEM_ATTEND_INT8_SCORES,
 * which moves their results a little (too little to print on this
 * model's near-uniform outputs; test_stories260k sees it); FP32's cache
 * is not kvmem's, so its results stay the same bits.
 */
START_TEST(test_int8_scores_tiny)
{
	const char *path = tiny_model(&tiny_ok, 0);
	struct kvmem_run r, r8;
	struct rec a[4], b[4];
	int i;

	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "40",
		  "--modes", "fp32,int4-h84,int8-secded72", "--ber", "0",
		  "--seeds", "1", "--page-tokens", "8", "--sink", "2",
		  "--json");
	KVMEM_RUN(&r8, "kvmem-eval", "", "--model", path, "--tokens", "40",
		  "--modes", "fp32,int4-h84,int8-secded72", "--ber", "0",
		  "--seeds", "1", "--page-tokens", "8", "--sink", "2",
		  "--int8-scores", "--json");
	ck_assert_msg(r8.status == 0, "exit %d: %s", r8.status, r8.err);
	ck_assert_int_eq(parse_records(r.out, a, 4), 3);
	ck_assert_int_eq(parse_records(r8.out, b, 4), 3);
	ck_assert_ptr_nonnull(strstr(r.out, "\"int8_scores\": false"));
	ck_assert_ptr_nonnull(strstr(r8.out, "\"int8_scores\": true"));
	ck_assert_double_eq(a[0].ppl, b[0].ppl);
	ck_assert_double_eq(a[0].kl, b[0].kl);
	for (i = 1; i < 3; i++)
		ck_assert_msg(fabs(b[i].ppl - a[i].ppl) <= 0.05 * a[i].ppl,
			      "%s: ppl %g with int8 scores, %g without",
			      a[i].mode, b[i].ppl, a[i].ppl);
	kvmem_check_run_free(&r);
	kvmem_check_run_free(&r8);
	unlink(path);
}
END_TEST

/*
 * Every mode, the default: one record each, a finite stream, and each
 * kvmem mode's sealed pages in the bits its name says (the rotated ones
 * too: the rotation changes what is stored, not its size).
 */
START_TEST(test_every_mode_tiny)
{
	static const struct {
		const char *prefix;
		double bits;
	} formats[] = { { "int4-", 4 }, { "int8-", 8 }, { "fp16-", 16 },
			{ "fp8-", 8 },	{ "int2-", 2 }, { "lm4-", 4 },
			{ "lm3-", 3 },	{ "lm2-", 2 } };
	const char *path = tiny_model(&tiny_ok, 0);
	struct kvmem_run r;
	struct rec rec[32];
	int n, i, seen = 0;
	size_t f;

	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "20",
		  "--ber", "0", "--seeds", "1", "--page-tokens", "8", "--sink",
		  "2", "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	n = parse_records(r.out, rec, 32);
	ck_assert_int_eq(n, 18);
	for (i = 0; i < n; i++) {
		ck_assert_msg(isfinite(rec[i].ppl) && rec[i].ppl > 1.0,
			      "%s: ppl %g", rec[i].mode, rec[i].ppl);
		for (f = 0; f < sizeof(formats) / sizeof(formats[0]); f++)
			if (!strncmp(rec[i].mode, formats[f].prefix,
				     strlen(formats[f].prefix))) {
				ck_assert_msg(rec[i].payload_bits ==
						      formats[f].bits,
					      "%s: %g payload bits",
					      rec[i].mode, rec[i].payload_bits);
				seen++;
			}
	}
	ck_assert_int_eq(seen, 16); /* all but fp32 and the flat int4 */
	kvmem_check_run_free(&r);
	unlink(path);
}
END_TEST

/* --archive: pages older than an age re-encoded as the stream goes. */
START_TEST(test_archive_tiny)
{
	const char *path = tiny_model(&tiny_ok, 0);
	struct kvmem_run r;
	struct rec base[4], never[4], int2[4], g24[4];
	int i;

#define ARCHIVE_RUN(recs, ...)                                                \
	do {                                                                  \
		KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens",  \
			  "40", "--modes", "int4-h84,int4-h84-interp",        \
			  "--ber", "0,0.01", "--seeds", "1", "--page-tokens", \
			  "8", "--sink", "2", "--json", ##__VA_ARGS__);       \
		ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err); \
		ck_assert_int_eq(parse_records(r.out, recs, 4), 4);           \
		kvmem_check_run_free(&r);                                     \
	} while (0)

	ARCHIVE_RUN(base);
	ARCHIVE_RUN(never, "--archive", "64");
	ARCHIVE_RUN(int2, "--archive", "8");
	ARCHIVE_RUN(g24, "--archive", "8:int4+golay24");
#undef ARCHIVE_RUN
	for (i = 0; i < 4; i++) {
		/* Nothing old enough: the same run. */
		ck_assert_uint_eq(base[i].archived, 0);
		ck_assert_uint_eq(never[i].archived, 0);
		ck_assert_double_eq(never[i].ppl, base[i].ppl);
		ck_assert_double_eq(never[i].bits_per_value,
				    base[i].bits_per_value);
		/* 39 tokens go in (the last is only predicted), pages of 8
		 * after a sink of 2: those from 2, 10, 18 and 26 are
		 * sealed, and all but the last end 8 tokens before the end;
		 * in each of 2 layers. Under the channel, a page with a word
		 * lost stays as it is, flagged. */
		if (base[i].ber == 0) {
			ck_assert_uint_eq(int2[i].archived, 2 * 3);
			ck_assert_uint_eq(g24[i].archived, 2 * 3);
		} else {
			ck_assert_uint_gt(int2[i].archived, 0);
			ck_assert_uint_le(int2[i].archived, 2 * 3);
			ck_assert_uint_gt(g24[i].archived, 0);
			ck_assert_uint_le(g24[i].archived, 2 * 3);
		}
		/* int2 takes less memory and loses precision. */
		ck_assert_double_lt(int2[i].bits_per_value,
				    base[i].bits_per_value);
		ck_assert_double_ne(int2[i].ppl, base[i].ppl);
		/* golay24 holds the same values in more bits. */
		ck_assert_double_gt(g24[i].bits_per_value,
				    base[i].bits_per_value);
	}
	/* golay24 keeps the values bit for bit, and the archive takes
	 * pages after the channel hit them, so every run is the same
	 * stream as the all-warm one, with and without errors. */
	for (i = 0; i < 4; i++) {
		ck_assert_double_eq(g24[i].ppl, base[i].ppl);
		ck_assert_double_eq(g24[i].kl, base[i].kl);
		ck_assert_double_eq(g24[i].top1, base[i].top1);
	}

	/* bits/value from the layout of the mode's own sealed pages: FP16
	 * pages have no scales, a check a row. */
	{
		const struct kvmem_geometry g = kvmem_check_geo(
			2, 2, 8, 8, 8, 2, KVMEM_FMT_FP16, KVMEM_CODEC_SECDED72,
			KVMEM_SCALES_GROUP);
		struct kvmem_page_layout l;
		struct rec fp16[1];
		double bits;

		ck_assert_int_eq(kvmem_page_layout(&g, 0, &l), 0);
		bits = 8.0 *
		       (KVMEM_PAGE_HDR_BYTES + 3.0 * l.scale_words +
			6.0 * l.nchecks + 2.0 * 2 * 8 * l.row_bytes) /
		       (2.0 * 8 * 2 * 8);
		KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens",
			  "40", "--modes", "fp16-secded72", "--ber", "0",
			  "--seeds", "1", "--page-tokens", "8", "--sink", "2",
			  "--json");
		ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
		ck_assert_int_eq(parse_records(r.out, fp16, 1), 1);
		ck_assert_double_eq_tol(fp16[0].bits_per_value, bits, 1e-3);
		kvmem_check_run_free(&r);
	}

	/* A format whose pages would be larger than the sealed ones: in
	 * pages of 64 tokens, int8 + golay24 rows of 18 bytes against h84's
	 * 8 make 8 KiB of what fits 4. */
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "20",
		  "--modes", "int4-h84", "--ber", "0", "--seeds", "1",
		  "--page-tokens", "64", "--archive", "8:int8+golay24");
	ck_assert_int_eq(r.status, 1);
	ck_assert_ptr_nonnull(strstr(r.err, "larger than sealed ones"));
	kvmem_check_run_free(&r);
	unlink(path);
}
END_TEST

/*
 * --budget 3: after each token, the least attended int4 pages of a layer
 * go to lm2 until its sealed pages average 3 bits. Pages of 8 after a
 * sink of 2, 39 tokens in: sealed in turn from 2, 10, 18 and 26, so
 * 4 > 3 takes the first down, (2 + 4) / 2 holds, (2 + 4 + 4) / 3 takes
 * a second, (2 + 2 + 4 + 4) / 4 holds: two a layer, 3.0 bits at the end.
 */
START_TEST(test_budget_tiny)
{
	const char *path = tiny_model(&tiny_ok, 0);
	struct kvmem_run r;
	struct rec base[1], met[1], three[1];

#define BUDGET_RUN(recs, ...)                                                  \
	do {                                                                   \
		KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens",   \
			  "40", "--modes", "int4-h84", "--ber", "0",           \
			  "--seeds", "1", "--page-tokens", "8", "--sink", "2", \
			  "--json", ##__VA_ARGS__);                            \
		ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);  \
		ck_assert_int_eq(parse_records(r.out, recs, 1), 1);            \
		kvmem_check_run_free(&r);                                      \
	} while (0)

	BUDGET_RUN(base);
	BUDGET_RUN(met, "--budget", "4");
	BUDGET_RUN(three, "--budget", "3:lm2+h84");
#undef BUDGET_RUN
	ck_assert_uint_eq(met[0].archived, 0);
	ck_assert_double_eq(met[0].ppl, base[0].ppl);
	ck_assert_double_eq(base[0].payload_bits, 4.0);
	ck_assert_uint_eq(three[0].archived, 2 * 2);
	ck_assert_double_eq_tol(three[0].payload_bits, 3.0, 1e-9);
	ck_assert_double_lt(three[0].bits_per_value, base[0].bits_per_value);

	/* lm2 has no fewer bits than lm2: said, not run. */
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "20",
		  "--modes", "lm2-h84", "--ber", "0", "--seeds", "1",
		  "--page-tokens", "8", "--budget", "1");
	ck_assert_int_eq(r.status, 1);
	ck_assert_ptr_nonnull(strstr(r.err, "no fewer bits"));
	kvmem_check_run_free(&r);
	unlink(path);
}
END_TEST

/* Golay24 words, in pairs, and checks of the scales of a page. */
static double scale_bytes(unsigned long scales)
{
	return 3.0 * (double)((scales * 16 + 23) / 24 * 2) +
	       6.0 * (double)((scales + KVMEM_PAGE_CHECK_SCALES - 1) /
			      KVMEM_PAGE_CHECK_SCALES);
}

/*
 * --key-scales channel: the kvmem modes' sealed keys with one scale per
 * channel over the page. Pages of 16 tokens, 2 KV heads of 8 channels in
 * one group: 32 V scales a page, and 32 K scales by group or 16 by
 * channel, which is all that changes in what a value takes. The flat
 * int4 and fp32 modes do not change; fp16 has no scales to put so.
 */
START_TEST(test_key_scales_tiny)
{
	const char *path = tiny_model(&tiny_ok, 0);
	const double values = 2.0 * 16 * 2 * 8;
	struct rec grp[3], chan[3];
	struct kvmem_run r;
	const char *p;
	int i;

#define SCALES_RUN(recs, ...)                                                  \
	do {                                                                   \
		KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens",   \
			  "40", "--modes", "fp32,int4,int4-h84", "--ber", "0", \
			  "--seeds", "1", "--page-tokens", "16", "--sink",     \
			  "2", "--json", ##__VA_ARGS__);                       \
		ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);  \
		ck_assert_int_eq(parse_records(r.out, recs, 3), 3);            \
	} while (0)

	SCALES_RUN(grp);
	ck_assert_ptr_nonnull(strstr(r.out, "\"key_scales\": \"group\""));
	kvmem_check_run_free(&r);
	SCALES_RUN(chan, "--key-scales", "channel");
	ck_assert_ptr_nonnull(strstr(r.out, "\"key_scales\": \"channel\""));
	ck_assert_ptr_null(strstr(r.out, "\"key_scales\": \"group\""));
	kvmem_check_run_free(&r);
#undef SCALES_RUN
	for (i = 0; i < 2; i++) {
		ck_assert_str_eq(chan[i].mode, grp[i].mode);
		ck_assert_double_eq(chan[i].ppl, grp[i].ppl);
		ck_assert_double_eq(chan[i].kl, grp[i].kl);
	}
	ck_assert_str_eq(chan[2].mode, "int4-h84");
	ck_assert(isfinite(chan[2].kl) && chan[2].kl > 0);
	ck_assert_double_ne(chan[2].kl, grp[2].kl);
	ck_assert_double_eq(chan[2].payload_bits, 4.0);
	ck_assert_double_eq_tol(
		grp[2].bits_per_value - chan[2].bits_per_value,
		8.0 * (scale_bytes(64) - scale_bytes(48)) / values, 1e-9);

	/* Every mode by default but the one without scales. */
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "12",
		  "--ber", "0", "--seeds", "1", "--page-tokens", "8", "--sink",
		  "2", "--key-scales", "channel", "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	for (i = 0, p = r.out; (p = strstr(p, "{\"mode\": ")) != NULL; p++)
		i++;
	ck_assert_int_eq(i, 17);
	ck_assert_ptr_null(strstr(r.out, "fp16-secded72"));
	kvmem_check_run_free(&r);
	unlink(path);
}
END_TEST

/*
 * --prompt: the stream after the prompt is scored, and the *-vq modes put
 * the prompt's sealed pages in vq2. With 40 tokens, sink 2 and pages of
 * 8, a prompt of 26 has pages [2, 10), [10, 18), [18, 26) of both layers
 * sealed: six pages to vq2, and [26, 34) stays int4 (payload (3 * 2 + 4)
 * / 4 = 2.5 bits a value); the codebooks are stored beside them.
 */
START_TEST(test_prompt_vq_tiny)
{
	const char *path = tiny_model(&tiny_ok, 0);
	struct kvmem_run r;
	struct rec rec[4];
	const struct rec *plain, *vq, *hit;

	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "40",
		  "--modes", "int4-h84,int4-h84-vq", "--ber", "0,0.01",
		  "--seeds", "1", "--page-tokens", "8", "--sink", "2",
		  "--prompt", "26", "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_int_eq(parse_records(r.out, rec, 4), 4);
	plain = find(rec, 4, "int4-h84", 0, 1);
	vq = find(rec, 4, "int4-h84-vq", 0, 1);
	hit = find(rec, 4, "int4-h84-vq", 0.01, 1);
	ck_assert_ptr_nonnull(plain);
	ck_assert_ptr_nonnull(vq);
	ck_assert_ptr_nonnull(hit);
	ck_assert_uint_eq(plain->archived, 0);
	ck_assert_double_eq(plain->payload_bits, 4.0);
	ck_assert_uint_eq(vq->archived, 6);
	ck_assert_double_eq_tol(vq->payload_bits, 2.5, 1e-9);
	ck_assert_double_gt(vq->bits_per_value, plain->bits_per_value);
	ck_assert(isfinite(vq->ppl) && vq->ppl > 1.0);
	ck_assert(isfinite(hit->ppl) && hit->ppl > 1.0);
	ck_assert_uint_gt(hit->corrected, 0);
	kvmem_check_run_free(&r);

	/* Said, not run: a vq mode with no prompt, a prompt past the
	 * stream. */
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "40",
		  "--modes", "int4-h84-vq");
	ck_assert_int_eq(r.status, 2);
	ck_assert_ptr_nonnull(strstr(r.err, "give --prompt"));
	kvmem_check_run_free(&r);
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "40",
		  "--prompt", "39");
	ck_assert_int_eq(r.status, 2);
	ck_assert_ptr_nonnull(strstr(r.err, "leaves no token"));
	kvmem_check_run_free(&r);
	unlink(path);
}
END_TEST

START_TEST(test_bad_checkpoints)
{
	static const struct {
		struct tiny t;
		long cut;
		const char *why;
	} bad[] = {
		{ { 32, 48, 2, 4, 2, 64, 64 }, 10, "too short" },
		{ { 32, 48, 2, 4, 2, 64, 64 }, 1000, "bytes, but" },
		{ { 32, 48, 2, 0, 2, 64, 64 }, -1, "not a llama2.c" },
		{ { 30, 48, 2, 4, 2, 64, 64 }, -1, "not a llama2.c" },
		{ { 32, 48, 2, 4, 3, 64, 64 }, -1, "not a llama2.c" },
		{ { -32, 48, 2, 4, 2, 64, 64 }, -1, "not a llama2.c" },
		{ { 32, 48, 2, 4, 2, 1 << 30, 64 }, -1, "not a llama2.c" },
		{ { 32, 48, 5000, 4, 2, 64, 64 }, -1, "not a llama2.c" },
		{ { 32, 48, 2, 4, 2, 64, 64 }, -1, "bytes, but" },
	};
	struct kvmem_run r;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *path = tiny_model(&bad[i].t, bad[i].cut);

		KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens",
			  "8", "--modes", "fp32", "--ber", "0", "--seeds", "1");
		ck_assert_msg(r.status == 2, "case %zu: exit %d", i, r.status);
		ck_assert_msg(strstr(r.err, bad[i].why) != NULL,
			      "case %zu: '%s' not in: %s", i, bad[i].why,
			      r.err);
		ck_assert_str_eq(r.out, "");
		kvmem_check_run_free(&r);
		unlink(path);
	}
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", "/nonexistent/model.bin");
	ck_assert_int_eq(r.status, 2);
	ck_assert_ptr_nonnull(strstr(r.err, "No such file"));
	kvmem_check_run_free(&r);
}
END_TEST

START_TEST(test_usage)
{
	const char *path = tiny_model(&tiny_ok, 0);
	const char *const *const bad[] = {
		(const char *const[]){ NULL },
		(const char *const[]){ "--model", path, "--modes", "int5",
				       NULL },
		(const char *const[]){ "--model", path, "--ber", "2", NULL },
		(const char *const[]){ "--model", path, "--ber", "", NULL },
		(const char *const[]){ "--model", path, "--seeds", "-1", NULL },
		(const char *const[]){ "--model", path, "--tokens", "65",
				       NULL },
		(const char *const[]){ "--model", path, "--tokens", "1", NULL },
		(const char *const[]){ "--model", path, "--sink", "9",
				       "--page-tokens", "8", NULL },
		(const char *const[]){ "--model", path, "extra", NULL },
		(const char *const[]){ "--model", path, "--channel", "byte:0",
				       NULL },
		(const char *const[]){ "--model", path, "--channel", "exact:1",
				       NULL },
		(const char *const[]){ "--model", path, "--archive", "0",
				       NULL },
		(const char *const[]){ "--model", path, "--archive", "x",
				       NULL },
		(const char *const[]){ "--model", path, "--archive", "-8",
				       NULL },
		(const char *const[]){ "--model", path, "--archive", "8:int4",
				       NULL },
		(const char *const[]){ "--model", path, "--archive",
				       "8:fp16+golay24", NULL },
		(const char *const[]){ "--model", path, "--archive",
				       "8:int4+nope", NULL },
		(const char *const[]){ "--model", path, "--archive", "8",
				       "--connect", "/nonexistent", NULL },
		(const char *const[]){ "--model", path, "--budget", "x", NULL },
		(const char *const[]){ "--model", path, "--budget", "-1",
				       NULL },
		(const char *const[]){ "--model", path, "--budget", "17",
				       NULL },
		(const char *const[]){ "--model", path, "--budget",
				       "3:fp16+h84", NULL },
		(const char *const[]){ "--model", path, "--budget",
				       "3:lm2+nope", NULL },
		(const char *const[]){ "--model", path, "--budget", "3",
				       "--daemon", NULL },
		(const char *const[]){ "--model", path, "--key-scales", "token",
				       NULL },
		(const char *const[]){ "--model", path, "--key-scales",
				       "channel", "--modes", "fp16-secded72",
				       NULL },
	};
	struct kvmem_run r;
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		kvmem_check_run(&r, "kvmem-eval", "", NULL, bad[i]);
		ck_assert_msg(r.status == 2, "case %zu: exit %d: %s", i,
			      r.status, r.err);
		ck_assert_msg(strlen(r.err) > 0, "case %zu: silent", i);
		kvmem_check_run_free(&r);
	}
	/* A bad item says what a good one is; no daemon, said once. */
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--modes", "int5");
	ck_assert_str_eq(r.err,
			 "kvmem-eval: bad --modes item 'int5': one of fp32, "
			 "int4, int4-h74, int4-h84, int4-h84-interp, "
			 "int4-golay24, int8-secded72, fp16-secded72, fp8-h84, "
			 "fp8-secded72, int2-h84, int4-h84-rot, "
			 "int4-h84-rot-interp, lm4-h84-rot, "
			 "lm3-h84-rot, lm2-h84, lm2-h84-rot, lm2-golay24-rot, "
			 "int4-h84-vq, int4-h84-rot-vq, int4-golay24-vq\n");
	kvmem_check_run_free(&r);
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--ber", "2");
	ck_assert_str_eq(r.err, "kvmem-eval: bad --ber item '2': a "
				"probability from 0 to 1, like 1e-3\n");
	kvmem_check_run_free(&r);
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--modes", "int4-h84",
		  "--tokens", "4", "--ber", "0", "--connect",
		  "/nonexistent/kvmemd.sock");
	ck_assert_int_eq(r.status, 1);
	ck_assert_str_eq(r.err, "kvmem-eval: cannot reach kvmemd at "
				"/nonexistent/kvmemd.sock: No such file or "
				"directory \u2014 is kvmemd running?\n");
	kvmem_check_run_free(&r);
	KVMEM_RUN(&r, "kvmem-eval", "", "--help");
	ck_assert_int_eq(r.status, 0);
	ck_assert_ptr_nonnull(strstr(r.out, "int4-h84-interp"));
	ck_assert_ptr_nonnull(strstr(r.out, "--payload-only"));
	ck_assert_ptr_nonnull(strstr(r.out, "--int8-scores"));
	ck_assert_ptr_nonnull(strstr(r.out, "--channel"));
	kvmem_check_run_free(&r);
	unlink(path);
}
END_TEST

/* The same runs, with the KV cache kept in kvmemd: the same numbers. */
START_TEST(test_over_daemon)
{
	const char *path = tiny_model(&tiny_ok, 0);
	struct kvmemd_proc p;
	struct kvmem_run r, r2;

	/* Without errors: --connect injects none into a running daemon. */
	kvmemd_start(&p, NULL, NULL);
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "40",
		  "--modes", "int4-h84-interp,int4-golay24,int8-secded72",
		  "--ber", "0", "--seeds", "1", "--page-tokens", "8", "--sink",
		  "2", "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	KVMEM_RUN(&r2, "kvmem-eval", "", "--model", path, "--tokens", "40",
		  "--modes", "int4-h84-interp,int4-golay24,int8-secded72",
		  "--ber", "0", "--seeds", "1", "--page-tokens", "8", "--sink",
		  "2", "--connect", p.sock, "--json");
	ck_assert_msg(r2.status == 0, "exit %d: %s", r2.status, r2.err);
	ck_assert_str_eq(r2.out, r.out);
	kvmem_check_run_free(&r2);
	KVMEM_RUN(&r2, "kvmem-eval", "", "--model", path, "--daemon",
		  "--connect", p.sock);
	ck_assert_int_eq(r2.status, 2);
	ck_assert_ptr_nonnull(strstr(r2.err, "pick one"));
	kvmem_check_run_free(&r2);

	/* No daemon there: a clear error, exit 1. */
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	KVMEM_RUN(&r2, "kvmem-eval", "", "--model", path, "--tokens", "40",
		  "--modes", "int4-h84", "--ber", "0", "--seeds", "1",
		  "--connect", p.sock);
	ck_assert_int_eq(r2.status, 1);
	ck_assert_ptr_nonnull(strstr(r2.err, p.sock));
	kvmem_check_run_free(&r2);
	kvmem_check_run_free(&r);
	kvmemd_cleanup(&p);
	unlink(path);
}
END_TEST

/*
 * What a kvmemd counts of memory errors and sessions: no errors, and
 * @attached sessions.
 */
static void untouched(const struct kvmemd_proc *p, unsigned long long attached)
{
	char out[8192];

	kvmemd_admin_ok(p, out, sizeof(out), "errors");
	ck_assert_msg(strstr(out, "\"counters\":[]") != NULL,
		      "kvmemd counted errors: %s", out);
	kvmemd_admin_ok(p, out, sizeof(out), "stats");
	ck_assert_uint_eq(kvmemd_json_u64(out, "attached"), attached);
	ck_assert_uint_eq(kvmemd_json_after(out, "\"scrub\"", "ce"), 0);
	ck_assert_uint_eq(kvmemd_json_after(out, "\"scrub\"", "ue"), 0);
}

/*
 * Issue 44, finding 8: --daemon put its bit flips in a session of the
 * kvmemd at the default socket, which counted them as real memory errors
 * (kept across restarts, alerted on). It runs a kvmemd of its own now, in
 * a temporary directory it removes; the one $KVMEM_SOCKET names sees
 * nothing.
 */
START_TEST(test_daemon_of_its_own)
{
	const char *path = tiny_model(&tiny_ok, 0);
	char tmp[] = "/tmp/kvmem-eval-tmpdir-XXXXXX";
	struct rec emb[2], own[2];
	struct kvmemd_proc p;
	struct kvmem_run r;
	int i;

	kvmemd_start(&p, NULL, NULL);
	ck_assert_ptr_nonnull(mkdtemp(tmp));
	setenv("TMPDIR", tmp, 1);
	setenv("KVMEM_SOCKET", p.sock, 1);
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "40",
		  "--modes", "int4-h84", "--ber", "0,1e-3", "--seeds", "1",
		  "--page-tokens", "8", "--sink", "2", "--json");
	ck_assert_int_eq(parse_records(r.out, emb, 2), 2);
	kvmem_check_run_free(&r);
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "40",
		  "--modes", "int4-h84", "--ber", "0,1e-3", "--seeds", "1",
		  "--page-tokens", "8", "--sink", "2", "--daemon", "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_int_eq(parse_records(r.out, own, 2), 2);
	kvmem_check_run_free(&r);
	/* The same run: its daemon, on built-in defaults, corrects some of
	 * the flips at seal, so only the flips are compared under errors. */
	ck_assert_double_eq(own[0].ppl, emb[0].ppl);
	ck_assert_double_eq(own[0].kl, emb[0].kl);
	for (i = 0; i < 2; i++)
		ck_assert_uint_eq(own[i].flips, emb[i].flips);
	ck_assert_uint_gt(own[1].flips, 0);
	untouched(&p, 0);
	/* The table says which daemon. */
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "20",
		  "--modes", "int4-h84", "--ber", "1e-3", "--seeds", "1",
		  "--daemon");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_ptr_nonnull(
		strstr(r.out, "kvmemd: one of its own for this run, "));
	ck_assert_ptr_nonnull(strstr(r.out, "/daemon/kvmemd -c /dev/null"));
	kvmem_check_run_free(&r);
	untouched(&p, 0);
	/* --kvmemd picks the binary. */
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "20",
		  "--modes", "int4-h84", "--ber", "0", "--seeds", "1",
		  "--daemon", "--kvmemd", "/nonexistent/kvmemd");
	ck_assert_int_eq(r.status, 1);
	ck_assert_ptr_nonnull(strstr(r.err, "kvmem-eval: no kvmemd to start "
					    "at /nonexistent/kvmemd"));
	ck_assert_str_eq(r.out, "");
	kvmem_check_run_free(&r);
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--kvmemd",
		  "/nonexistent/kvmemd");
	ck_assert_int_eq(r.status, 2);
	ck_assert_ptr_nonnull(strstr(r.err, "--kvmemd goes with --daemon"));
	kvmem_check_run_free(&r);
	unsetenv("KVMEM_SOCKET");
	unsetenv("TMPDIR");
	/* Nothing of its daemons is left behind. */
	ck_assert_msg(rmdir(tmp) == 0, "%s: %s", tmp, strerror(errno));
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
	unlink(path);
}
END_TEST

/*
 * Issue 44, finding 8: the bit flips the channel puts in the pages of a
 * session of a running kvmemd are, to that daemon, real memory errors
 * (counted, persisted, alerted on). --connect with a BER above 0 is
 * refused before it connects; at BER 0 it still runs there.
 */
START_TEST(test_connect_refuses_injection)
{
	const char *path = tiny_model(&tiny_ok, 0);
	struct kvmemd_proc p;
	struct kvmem_run r;
	struct rec rec[1];
	char want[256];

	kvmemd_start(&p, NULL, NULL);
	snprintf(want, sizeof(want),
		 "kvmem-eval: --connect with --ber 0.001: the bit flips would "
		 "land in pages of the kvmemd at %s, which counts them as "
		 "real memory errors",
		 p.sock);
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "20",
		  "--modes", "int4-h84", "--ber", "0,1e-3", "--seeds", "1",
		  "--page-tokens", "8", "--sink", "2", "--connect", p.sock);
	ck_assert_msg(r.status == 2, "exit %d: %s", r.status, r.err);
	ck_assert_str_eq(r.out, "");
	ck_assert_msg(strstr(r.err, want) != NULL, "'%s' not in: %s", want,
		      r.err);
	ck_assert_ptr_nonnull(strstr(r.err, "kvmem_ue_total"));
	ck_assert_ptr_nonnull(
		strstr(r.err, "--daemon runs a kvmemd of its own"));
	kvmem_check_run_free(&r);
	/* The default rates inject too. */
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "20",
		  "--modes", "int4-h84", "--connect", p.sock);
	ck_assert_msg(r.status == 2, "exit %d: %s", r.status, r.err);
	ck_assert_ptr_nonnull(strstr(r.err, "would land in pages"));
	kvmem_check_run_free(&r);
	untouched(&p, 0);

	/* Without errors to inject, the daemon serves the run. */
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "20",
		  "--modes", "int4-h84", "--ber", "0", "--seeds", "1",
		  "--page-tokens", "8", "--sink", "2", "--connect", p.sock,
		  "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_int_eq(parse_records(r.out, rec, 1), 1);
	ck_assert_uint_eq(rec[0].flips, 0);
	kvmem_check_run_free(&r);
	untouched(&p, 1);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
	unlink(path);
}
END_TEST

static double mean_kl(const struct rec *r, int n, const char *mode, double ber)
{
	double s = 0.0;
	int i, k = 0;

	for (i = 0; i < n; i++)
		if (!strcmp(r[i].mode, mode) && r[i].ber == ber) {
			s += r[i].kl;
			k++;
		}
	ck_assert_int_gt(k, 0);
	return s / k;
}

START_TEST(test_stories260k)
{
	const char *path = getenv("KVMEM_MODEL");
	struct kvmem_run r;
	struct rec rec[64];
	double clean, plain, golay, interp;
	int n, s;

	if (!path)
		path = "../shared/models/stories260K.bin";
	if (access(path, R_OK)) {
		printf("SKIP: stories260k: %s not found (set KVMEM_MODEL); the "
		       "real-model check did not run\n",
		       path);
		return;
	}
	/* The paper's setting: the channel on the quantized payload. */
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "128",
		  "--modes", "int4,int4-h84,int4-h84-interp,int4-golay24",
		  "--ber", "0,0.01", "--seeds", "1,2", "--payload-only",
		  "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	n = parse_records(r.out, rec, 64);
	ck_assert_int_eq(n, 4 * 2 * 2);
	for (s = 1; s <= 2; s++) {
		const struct rec *a = find(rec, n, "int4-h84", 0, s);
		const struct rec *b = find(rec, n, "int4-golay24", 0, s);
		const struct rec *c = find(rec, n, "int4-h84-interp", 0, s);

		ck_assert_double_eq(a->kl, b->kl);
		ck_assert_double_eq(a->kl, c->kl);
		ck_assert_double_eq(a->ppl, b->ppl);
	}
	clean = mean_kl(rec, n, "int4-h84", 0);
	plain = mean_kl(rec, n, "int4", 0.01);
	golay = mean_kl(rec, n, "int4-golay24", 0.01);
	interp = mean_kl(rec, n, "int4-h84-interp", 0.01);
	/* Unprotected int4 derails; the protected modes stay close to the
	 * error-free run: within a quarter (golay24) and a half (h84 with
	 * interpolation) of what the unprotected run lost. */
	ck_assert_double_gt(plain - clean, 0.5);
	ck_assert_double_lt(fabs(golay - clean), (plain - clean) / 4);
	ck_assert_double_lt(fabs(interp - clean), (plain - clean) / 2);
	ck_assert_double_lt(golay, plain);
	ck_assert_double_lt(interp, plain);
	kvmem_check_run_free(&r);

	/* Int8 scores move the error-free KL a little (0.515 to 0.543 over
	 * 256 tokens when measured), never like an error does. */
	KVMEM_RUN(&r, "kvmem-eval", "", "--model", path, "--tokens", "128",
		  "--modes", "int4-h84", "--ber", "0", "--seeds", "1",
		  "--int8-scores", "--json");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	ck_assert_int_eq(parse_records(r.out, rec, 64), 1);
	ck_assert_double_ne(rec[0].kl, clean);
	ck_assert_double_lt(fabs(rec[0].kl - clean), 0.1);
	kvmem_check_run_free(&r);
}
END_TEST

KVMEM_SUITE(eval)
{
	Suite *s = suite_create("eval");
	TCase *tc = tcase_create("kvmem-eval");

	tcase_add_test(tc, test_protocol_tiny);
	tcase_add_test(tc, test_every_mode_tiny);
	tcase_add_test(tc, test_archive_tiny);
	tcase_add_test(tc, test_budget_tiny);
	tcase_add_test(tc, test_key_scales_tiny);
	tcase_add_test(tc, test_prompt_vq_tiny);
	tcase_add_test(tc, test_int8_scores_tiny);
	tcase_add_test(tc, test_bad_checkpoints);
	tcase_add_test(tc, test_usage);
	tcase_add_test(tc, test_stories260k);
	tcase_add_test(tc, test_over_daemon);
	tcase_add_test(tc, test_daemon_of_its_own);
	tcase_add_test(tc, test_connect_refuses_injection);
	tcase_set_timeout(tc, 120);
	suite_add_tcase(s, tc);
	return s;
}
