/*
 * bench-codec.c - codec throughput against memory bandwidth
 *
 * For each codec: encode, decode, scrub of clean codewords and scrub of
 * codewords carrying errors at BER 1e-3, in GB/s of codeword bytes, next to a
 * read baseline (a vectorised sum over the same codeword buffer) and memcpy.
 * Buffers are far larger than the caches; each figure is the best of --reps
 * runs (the least disturbed by other tenants). Single-threaded.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmem/ecc.h"
#include "kvmem/inject.h"
#include "bench.h"
#include "internal.h"
#include "rng.h"

#define DIRTY_BER 1e-3

struct codec_result {
	const char *name;
	double encode, decode, scrub_clean, scrub_dirty;
};

static volatile uint64_t sink;

static double gbps(size_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / (double)ns : 0.0;
}

/* Times are kept as the best of @reps. */
#define BEST(reps, bytes, setup, body)              \
	({                                          \
		uint64_t best_ = UINT64_MAX;        \
		unsigned int r_;                    \
		for (r_ = 0; r_ < (reps); r_++) {   \
			uint64_t t0_;               \
			setup;                      \
			t0_ = bench_now_ns();       \
			body;                       \
			t0_ = bench_now_ns() - t0_; \
			if (t0_ < best_)            \
				best_ = t0_;        \
		}                                   \
		gbps(bytes, best_);                 \
	})

static void codec_usage(FILE *f)
{
	fprintf(f, "usage: kvmem-bench codec [--size MIB] [--reps N] "
		   "[--codec NAME]... [--portable] [--json]\n\n"
		   "  --size MIB    codeword buffer per codec (default 128)\n"
		   "  --reps N      runs per figure, best kept (default 5)\n"
		   "  --codec NAME  only this codec (repeatable): h74 h84 "
		   "golay24 secded72\n"
		   "  --portable    force the portable (non-SIMD) code path\n"
		   "  --json        one JSON object on stdout\n");
}

static int run_codec(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "size", required_argument, NULL, 's' },
		{ "reps", required_argument, NULL, 'r' },
		{ "codec", required_argument, NULL, 'c' },
		{ "portable", no_argument, NULL, 'p' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct codec_result res[KVMEM_CODEC_NR];
	int want[KVMEM_CODEC_NR] = { 0 }, any = 0, json = 0, c, o, nres = 0;
	uint64_t size_mib = 128, reps = 5;
	uint8_t *code, *dirty, *data, *copy;
	double read_gbps, memcpy_gbps;
	struct kvmem_rng rng;
	size_t size, i;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 's':
			if (bench_parse_u64("size", optarg, 1, 65536,
					    &size_mib))
				return 2;
			break;
		case 'r':
			if (bench_parse_u64("reps", optarg, 1, 1000, &reps))
				return 2;
			break;
		case 'c':
			c = kvmem_codec_by_name(optarg);
			if (c < 0) {
				fprintf(stderr,
					"kvmem-bench: unknown codec '%s'\n",
					optarg);
				return 2;
			}
			want[c] = any = 1;
			break;
		case 'p':
			kvmem__simd_force(KVMEM__SIMD_PORTABLE);
			break;
		case 'j':
			json = 1;
			break;
		case 'h':
			codec_usage(stdout);
			return 0;
		default:
			codec_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		codec_usage(stderr);
		return 2;
	}

	size = (size_t)size_mib << 20;
	code = bench_alloc(size);
	dirty = bench_alloc(size);
	copy = bench_alloc(size);
	data = bench_alloc(size);
	kvmem_rng_seed(&rng, 1);
	for (i = 0; i + 8 <= size; i += 8) {
		uint64_t v = kvmem_rng_next(&rng);

		memcpy(data + i, &v, 8);
	}

	read_gbps = BEST(reps, size, , sink = bench_read_sum(data, size));
	memcpy_gbps = BEST(reps, size, , memcpy(copy, data, size));

	for (c = 0; c < KVMEM_CODEC_NR; c++) {
		const struct kvmem_codec_info *ci = kvmem_codec_get(c);
		size_t n = size / ci->word_bytes, bytes = n * ci->word_bytes;
		struct kvmem_inject_params ip;
		struct kvmem_ecc_counts cnt;
		struct codec_result *r;

		if (any && !want[c])
			continue;
		r = &res[nres++];
		r->name = ci->name;
		r->encode =
			BEST(reps, bytes, , kvmem_ecc_encode(c, data, code, n));
		r->decode = BEST(
			reps, bytes, ,
			kvmem_ecc_decode(c, code, copy, n, &cnt, NULL, NULL));
		r->scrub_clean =
			BEST(reps, bytes, ,
			     kvmem_ecc_scrub(c, code, n, &cnt, NULL, 0));
		memcpy(dirty, code, bytes);
		kvmem_inject_params_for_codec(&ip, c, DIRTY_BER, 7);
		kvmem_inject(dirty, n, &ip, NULL);
		r->scrub_dirty =
			BEST(reps, bytes, memcpy(copy, dirty, bytes),
			     kvmem_ecc_scrub(c, copy, n, &cnt, NULL, 0));
	}

	if (json) {
		printf("{\"impl\": \"%s\", \"size_mib\": %llu, "
		       "\"baseline\": {\"read_gbps\": %.3f, "
		       "\"memcpy_gbps\": %.3f}, \"codecs\": [",
		       kvmem_ecc_impl(), (unsigned long long)size_mib,
		       read_gbps, memcpy_gbps);
		for (i = 0; i < (size_t)nres; i++)
			printf("%s{\"codec\": \"%s\", \"encode_gbps\": %.3f, "
			       "\"decode_gbps\": %.3f, "
			       "\"scrub_clean_gbps\": %.3f, "
			       "\"scrub_dirty_gbps\": %.3f, "
			       "\"scrub_clean_vs_read\": %.3f}",
			       i ? ", " : "", res[i].name, res[i].encode,
			       res[i].decode, res[i].scrub_clean,
			       res[i].scrub_dirty,
			       res[i].scrub_clean / read_gbps);
		printf("]}\n");
	} else {
		printf("kvmem-bench codec: %llu MiB per buffer, best of %llu, "
		       "path %s\n\n",
		       (unsigned long long)size_mib, (unsigned long long)reps,
		       kvmem_ecc_impl());
		printf("baseline   read %6.2f GB/s   memcpy %6.2f GB/s\n\n",
		       read_gbps, memcpy_gbps);
		printf("%-9s %9s %9s %12s %12s %12s\n", "codec", "encode",
		       "decode", "scrub-clean", "scrub-dirty", "clean/read");
		for (i = 0; i < (size_t)nres; i++)
			printf("%-9s %9.2f %9.2f %12.2f %12.2f %11.2fx\n",
			       res[i].name, res[i].encode, res[i].decode,
			       res[i].scrub_clean, res[i].scrub_dirty,
			       res[i].scrub_clean / read_gbps);
		printf("\nGB/s of codeword bytes; scrub-dirty at BER %g.\n",
		       DIRTY_BER);
	}
	free(code);
	free(dirty);
	free(copy);
	free(data);
	return 0;
}

const struct bench_cmd bench_codec = {
	.name = "codec",
	.summary = "codec throughput next to read and memcpy bandwidth",
	.run = run_codec,
};
