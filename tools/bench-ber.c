/* SPDX-License-Identifier: MIT */
/*
 * bench-ber.c - Monte Carlo of the binary symmetric channel through a codec
 *
 * Encodes N random data words, flips every stored code bit with probability
 * p, decodes, and sorts each word by what the decoder did against what it
 * should have: corrected (data right again), detected (reported
 * uncorrectable) or silently wrong (data wrong, not reported: miscorrected or
 * undetected). Next to each count is its binomial expectation from the
 * number of flips per codeword, b(w) = C(n,w) p^w (1-p)^(n-w):
 *   corrected  N * sum of b(w) for 1 <= w <= t        (guaranteed)
 *   detected   N * sum of b(w) for t < w <= detect    (guaranteed)
 *   beyond     N * sum of b(w) for w > detect         (code-dependent:
 *              these words end up detected or silently wrong)
 * This is the structure of the ECC paper's Tables 7 and 8.
 *
 * --channel swaps the channel for one of the injector's physical ones
 * (a multi-bit upset in a byte, adjacent bytes, a garbled line, a stuck
 * column), which the binomial does not describe; --interleave D stores
 * each group of D codewords bit-interleaved (bit b of word w of the group
 * at bit b * D + w of its span), so that the bits of one byte, one line
 * or one burst belong to different codewords.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmem/ecc.h"
#include "kvmem/inject.h"
#include "bench.h"
#include "bitstream.h"
#include "kvmem-private.h"

#define HIST 6 /* flip-count rows shown: 0..4 and "5+" */

static void ber_usage(FILE *f)
{
	fprintf(f, "usage: kvmem-bench ber --codec NAME [--ber P] "
		   "[--channel SPEC] [--interleave D]\n"
		   "                       [--words N] [--seed S] [--json]\n\n"
		   "  --codec NAME  h74 h84 golay24 secded72\n"
		   "  --ber P       bit error rate, 0..1 (default 1e-3); per "
		   "byte, line or column\n"
		   "                for the channels that count those\n"
		   "  --channel SPEC  bsc (default), byte:K, adjacent:K, "
		   "line[:BYTES], column:ROW,\n"
		   "                burst:K (kvmem-ecc(1) says what each "
		   "does)\n"
		   "  --interleave D  store groups of D codewords bit-"
		   "interleaved (default 1:\n"
		   "                the codec's own layout); D divides N\n"
		   "  --words N     codewords (default 1000000)\n"
		   "  --seed S      seed of data and channel (default 1)\n"
		   "  --json        one JSON object on stdout\n");
}

static double binom(unsigned int n, unsigned int w, double p)
{
	return exp(lgamma(n + 1.0) - lgamma(w + 1.0) - lgamma(n - w + 1.0) +
		   w * log(p) + (n - w) * log1p(-p));
}

struct ber_result {
	uint64_t flips[HIST];
	uint64_t corrected, detected, silent;
	double e_flips[HIST];
	double e_corrected, e_detected, e_beyond;
};

static void expect(struct ber_result *r, const struct kvmem_codec_info *ci,
		   double p, uint64_t n)
{
	unsigned int w;

	for (w = 0; w <= ci->code_bits; w++) {
		double e = p <= 0   ? (w == 0)
			   : p >= 1 ? (w == ci->code_bits)
				    : binom(ci->code_bits, w, p);

		e *= (double)n;
		r->e_flips[w < HIST - 1 ? w : HIST - 1] += e;
		if (w == 0)
			continue;
		if (w <= ci->corrects)
			r->e_corrected += e;
		else if (w <= ci->detects)
			r->e_detected += e;
		else
			r->e_beyond += e;
	}
}

static void print_json(const struct ber_result *r,
		       const struct kvmem_codec_info *ci, double ber,
		       const char *chan, int bsc, uint64_t depth,
		       uint64_t nwords, uint64_t seed)
{
	int i;

	printf("{\"codec\": \"%s\", \"ber\": %g, \"channel\": \"%s\", "
	       "\"interleave\": %llu, \"words\": %llu, \"seed\": %llu, "
	       "\"corrected\": %llu, \"detected\": %llu, \"silent\": %llu, ",
	       ci->name, ber, chan, (unsigned long long)depth,
	       (unsigned long long)nwords, (unsigned long long)seed,
	       (unsigned long long)r->corrected,
	       (unsigned long long)r->detected, (unsigned long long)r->silent);
	/* The binomial describes the BSC alone. */
	if (bsc)
		printf("\"expected\": {\"corrected\": %.3f, "
		       "\"detected\": %.3f, \"beyond\": %.3f}, ",
		       r->e_corrected, r->e_detected, r->e_beyond);
	else
		printf("\"expected\": null, ");
	printf("\"flips\": [");
	for (i = 0; i < HIST; i++)
		printf("%s%llu", i ? ", " : "",
		       (unsigned long long)r->flips[i]);
	if (bsc) {
		printf("], \"flips_expected\": [");
		for (i = 0; i < HIST; i++)
			printf("%s%.3f", i ? ", " : "", r->e_flips[i]);
		printf("]}\n");
	} else {
		printf("], \"flips_expected\": null}\n");
	}
}

/* @v with one decimal, or "-" where the binomial does not apply. */
static const char *expected(char *buf, size_t len, double v, int bsc)
{
	if (!bsc)
		return "-";
	snprintf(buf, len, "%.1f", v);
	return buf;
}

static void print_text(const struct ber_result *r,
		       const struct kvmem_codec_info *ci, double ber,
		       const char *chan, int bsc, uint64_t depth,
		       uint64_t nwords, uint64_t seed)
{
	static const char *const rows[HIST] = { "0", "1", "2",
						"3", "4", "5 or more" };
	char e[32];
	int i;

	printf("kvmem-bench ber: %s (n=%u, k=%u, corrects %u, detects %u), "
	       "channel %s, P %g, interleave %llu, %llu words, seed %llu\n\n",
	       ci->name, ci->code_bits, ci->data_bits, ci->corrects,
	       ci->detects, chan, ber, (unsigned long long)depth,
	       (unsigned long long)nwords, (unsigned long long)seed);
	printf("%-14s %12s %14s %12s\n", "flips/word", "observed", "binomial",
	       "per word");
	for (i = 0; i < HIST; i++)
		printf("%-14s %12llu %14s %12.3g\n", rows[i],
		       (unsigned long long)r->flips[i],
		       expected(e, sizeof(e), r->e_flips[i], bsc),
		       (double)r->flips[i] / (double)nwords);
	printf("\n%-14s %12s %14s %12s\n", "outcome", "observed", "expected",
	       "per word");
	printf("%-14s %12llu %14s %12.3g\n", "corrected",
	       (unsigned long long)r->corrected,
	       expected(e, sizeof(e), r->e_corrected, bsc),
	       (double)r->corrected / (double)nwords);
	printf("%-14s %12llu %14s %12.3g\n", "detected",
	       (unsigned long long)r->detected,
	       expected(e, sizeof(e), r->e_detected, bsc),
	       (double)r->detected / (double)nwords);
	printf("%-14s %12llu %14s %12.3g\n", "silent wrong",
	       (unsigned long long)r->silent, "-",
	       (double)r->silent / (double)nwords);
	if (!bsc) {
		printf("\nthe binomial describes the BSC alone; this channel's "
		       "flips per word are\nthe observed column.\n");
		return;
	}
	printf("%-14s %12s %14.1f %12.3g\n", "beyond detect", "-", r->e_beyond,
	       r->e_beyond / (double)nwords);
	printf("\nexpected: corrected = words with 1..%u flips, "
	       "detected = %u..%u flips;\nwords beyond %u flips end "
	       "up detected or silently wrong, by the code's "
	       "structure.\n",
	       ci->corrects, ci->corrects + 1, ci->detects, ci->detects);
}

/*
 * Put @nwords codewords through the channel @ip, stored bit-interleaved in
 * groups of @depth (depth 1: as they are). Return: kvmem_inject()'s.
 */
static int channel(uint8_t *code, uint64_t nwords,
		   const struct kvmem_codec_info *ci,
		   const struct kvmem_inject_params *ip, uint64_t depth)
{
	const unsigned int n = ci->code_bits, stride = ci->word_bytes * 8;
	const uint64_t bits = nwords * n, bytes = (bits + 7) / 8;
	struct kvmem_inject_params dense = *ip;
	uint64_t g, w, at;
	uint8_t *store;
	unsigned int b;
	int ret;

	if (depth == 1)
		return kvmem_inject(code, nwords, ip, NULL);
	store = bench_alloc(bytes);
	memset(store, 0, bytes);
	for (g = 0; g < nwords; g += depth)
		for (w = 0; w < depth; w++)
			for (b = 0; b < n; b++) {
				at = g * n + b * depth + w;
				put_bits(
					store, at,
					get_bits(code, (g + w) * stride + b, 1),
					1);
			}
	/* Every stored bit is live once the dead ones are packed out. */
	dense.word_bits = 8;
	dense.word_bytes = 1;
	ret = kvmem_inject(store, bytes, &dense, NULL);
	for (g = 0; !ret && g < nwords; g += depth)
		for (w = 0; w < depth; w++)
			for (b = 0; b < n; b++) {
				at = (g + w) * stride + b;
				code[at / 8] &= (uint8_t) ~(1u << at % 8);
				put_bits(code, at,
					 get_bits(store, g * n + b * depth + w,
						  1),
					 1);
			}
	free(store);
	return ret;
}

static int run_ber(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "codec", required_argument, NULL, 'c' },
		{ "ber", required_argument, NULL, 'b' },
		{ "words", required_argument, NULL, 'n' },
		{ "seed", required_argument, NULL, 's' },
		{ "channel", required_argument, NULL, 'C' },
		{ "interleave", required_argument, NULL, 'I' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	uint64_t nwords = 1000000, seed = 1, depth = 1, w;
	struct kvmem_inject_params ip, chan = { .mode = KVMEM_INJECT_BSC };
	const struct kvmem_codec_info *ci;
	const char *chan_name = "bsc";
	struct ber_result r = { 0 };
	uint8_t *data, *code, *clean, *out, *status;
	struct kvmem_ecc_counts cnt;
	struct kvmem_rng rng;
	int codec = -1, json = 0, bsc, o;
	double ber = 1e-3;
	size_t dbytes;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'c':
			codec = kvmem_codec_by_name(optarg);
			if (codec < 0) {
				fprintf(stderr,
					"kvmem-bench: unknown codec '%s'\n",
					optarg);
				return 2;
			}
			break;
		case 'b':
			if (bench_parse_double("ber", optarg, &ber))
				return 2;
			if (ber < 0 || ber > 1) {
				fprintf(stderr, "kvmem-bench: --ber must be "
						"in [0, 1]\n");
				return 2;
			}
			break;
		case 'n':
			if (bench_parse_u64("words", optarg, 1, 1ull << 32,
					    &nwords))
				return 2;
			break;
		case 's':
			if (bench_parse_u64("seed", optarg, 0, UINT64_MAX,
					    &seed))
				return 2;
			break;
		case 'C':
			if (kvmem_inject_parse(&chan, optarg)) {
				fprintf(stderr,
					"kvmem-bench: bad --channel '%s'\n",
					optarg);
				return 2;
			}
			chan_name = optarg;
			break;
		case 'I':
			if (bench_parse_u64("interleave", optarg, 1, 1u << 16,
					    &depth))
				return 2;
			break;
		case 'j':
			json = 1;
			break;
		case 'h':
			ber_usage(stdout);
			return 0;
		default:
			ber_usage(stderr);
			return 2;
		}
	}
	if (optind != argc || codec < 0) {
		if (codec < 0)
			fprintf(stderr, "kvmem-bench: ber needs --codec\n");
		ber_usage(stderr);
		return 2;
	}
	if (nwords % depth) {
		fprintf(stderr,
			"kvmem-bench: --interleave %llu must divide "
			"--words %llu\n",
			(unsigned long long)depth, (unsigned long long)nwords);
		return 2;
	}
	ci = kvmem_codec_get(codec);
	dbytes = kvmem_ecc_data_bytes(codec, nwords);
	data = bench_alloc(dbytes + 8);
	out = bench_alloc(dbytes + 8);
	code = bench_alloc(kvmem_ecc_code_bytes(codec, nwords));
	clean = bench_alloc(kvmem_ecc_code_bytes(codec, nwords));
	status = bench_alloc(nwords);

	kvmem_rng_seed(&rng, seed);
	for (w = 0; w < dbytes; w++)
		data[w] = (uint8_t)kvmem_rng_next(&rng);
	kvmem_ecc_encode(codec, data, code, nwords);
	memcpy(clean, code, kvmem_ecc_code_bytes(codec, nwords));
	/* A seed of its own for the channel, unrelated to the data's. */
	kvmem_inject_params_for_codec(&ip, codec, ber, seed ^ 0x6b766d656dull);
	ip.mode = chan.mode;
	ip.k = chan.k;
	if (channel(code, nwords, ci, &ip, depth)) {
		fprintf(stderr, "kvmem-bench: bad --channel %s for %s words\n",
			chan_name, ci->name);
		o = 2;
		goto out;
	}
	kvmem_ecc_decode(codec, code, out, nwords, &cnt, status, NULL);

	for (w = 0; w < nwords; w++) {
		uint64_t bit = w * ci->data_bits;
		unsigned int flips = 0, b;
		int right = get_bits(data, bit, ci->data_bits) ==
			    get_bits(out, bit, ci->data_bits);

		for (b = 0; b < ci->word_bytes; b++)
			flips += (unsigned int)__builtin_popcount(
				code[w * ci->word_bytes + b] ^
				clean[w * ci->word_bytes + b]);
		r.flips[flips < HIST - 1 ? flips : HIST - 1]++;
		if (status[w] == KVMEM_ECC_UNCORRECTABLE)
			r.detected++;
		else if (!right)
			r.silent++;
		else if (flips)
			r.corrected++;
	}
	bsc = chan.mode == KVMEM_INJECT_BSC;
	if (bsc)
		expect(&r, ci, ber, nwords);

	if (json)
		print_json(&r, ci, ber, chan_name, bsc, depth, nwords, seed);
	else
		print_text(&r, ci, ber, chan_name, bsc, depth, nwords, seed);
	o = 0;
out:
	free(data);
	free(out);
	free(code);
	free(clean);
	free(status);
	return o;
}

const struct bench_cmd bench_ber = {
	.name = "ber",
	.summary = "Monte Carlo of the bit-error channel through a codec",
	.run = run_ber,
};
