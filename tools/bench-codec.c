/* SPDX-License-Identifier: MIT */
/*
 * bench-codec.c - codec throughput against memory bandwidth
 *
 * For each codec: encode, decode, scrub of clean codewords and scrub of
 * codewords carrying errors at BER 1e-3, in GB/s of codeword bytes, next to a
 * read baseline (a vectorised sum over the same codeword buffer) and memcpy.
 * Buffers are far larger than the caches; each figure is the best of --reps
 * runs (the least disturbed by other tenants). Single-threaded.
 *
 * --interleave D (8 or 512) prices a bit-interleaved layout for the
 * one-byte codecs (h74, h84), the one kvmem-bench ber measures against
 * correlated faults: groups of D codewords stored with bit b of word w at
 * group bit b * D + w, so that a byte (D 8) or a 64-byte line (D 512)
 * holds one bit of each of its words. It times undoing that (an 8 x 8 bit
 * transpose of every 8 bytes, gathered from 8 lines for D 512) alone and
 * before a decode, after checking it against bit-by-bit interleaving.
 */
#include <errno.h>
#include <getopt.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmem/ecc.h"
#include "kvmem/inject.h"
#include "bench.h"
#include "bitstream.h"
#include "kvmem-private.h"

#define DIRTY_BER 1e-3

struct codec_result {
	const char *name;
	double encode, decode, scrub_clean, scrub_dirty;
	double deint, deint_decode; /* --interleave: 0 when not timed */
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

/*
 * The 8 x 8 bit matrix of @x transposed, byte i being row i (Hacker's
 * Delight 7-3): bit w of byte b trades places with bit b of byte w.
 */
static inline uint64_t transpose8(uint64_t x)
{
	uint64_t t;

	t = (x ^ (x >> 7)) & 0x00aa00aa00aa00aaull;
	x ^= t ^ (t << 7);
	t = (x ^ (x >> 14)) & 0x0000cccc0000ccccull;
	x ^= t ^ (t << 14);
	t = (x ^ (x >> 28)) & 0x00000000f0f0f0f0ull;
	return x ^ t ^ (t << 28);
}

/*
 * One-byte codewords from @n bytes stored interleaved by @depth (@undo),
 * or the other way. By 8 the transpose is its own inverse; by 512 line b
 * of a group holds bit b of its 512 words, words 8j..8j+7 being byte j of
 * the 8 lines.
 */
static void interleave(const uint8_t *in, uint8_t *out, size_t n,
		       unsigned int depth, int undo)
{
	size_t g, j, b;
	uint64_t x;

	if (depth == 8) {
		for (g = 0; g + 8 <= n; g += 8) {
			memcpy(&x, in + g, 8);
			x = transpose8(x);
			memcpy(out + g, &x, 8);
		}
		return;
	}
	for (g = 0; g + 512 <= n; g += 512)
		for (j = 0; j < 64; j++) {
			if (undo) {
				for (x = 0, b = 0; b < 8; b++)
					x |= (uint64_t)in[g + 64 * b + j]
					     << (8 * b);
				x = transpose8(x);
				memcpy(out + g + 8 * j, &x, 8);
				continue;
			}
			memcpy(&x, in + g + 8 * j, 8);
			x = transpose8(x);
			for (b = 0; b < 8; b++)
				out[g + 64 * b + j] = (uint8_t)(x >> (8 * b));
		}
}

#define AVX512_GFNI __attribute__((target("avx512f,avx512bw,avx512vbmi,gfni")))

/*
 * Eight bit matrices transposed at once: each qword's bytes reversed, then
 * the affine transform by it of the unit bytes 1 << i, whose bit b is bit
 * i of the reversed qword's byte 7 - b, that is of byte b.
 */
AVX512_GFNI static __m512i transpose8x8(__m512i a)
{
	const __m512i rev =
		_mm512_set_epi64(0x38393a3b3c3d3e3fll, 0x3031323334353637ll,
				 0x28292a2b2c2d2e2fll, 0x2021222324252627ll,
				 0x18191a1b1c1d1e1fll, 0x1011121314151617ll,
				 0x08090a0b0c0d0e0fll, 0x0001020304050607ll);

	return _mm512_gf2p8affine_epi64_epi8(
		_mm512_set1_epi64((long long)0x8040201008040201ull),
		_mm512_permutexvar_epi8(rev, a), 0);
}

/*
 * What interleave(..., 1) does, with AVX-512 VBMI and GFNI: by 8 a
 * transpose a qword; by 512 the 8 lines of a group gathered a byte of each
 * per qword by three rounds of two-register byte permutes (pairs of lines,
 * then fours, then eights), then transposed.
 */
AVX512_GFNI static void undo_avx512(const uint8_t *in, uint8_t *out, size_t n,
				    unsigned int depth)
{
	static uint8_t idx[3][2][64];
	static int ready;
	__m512i l[8], a[8], b[8];
	unsigned int r, k, t;
	size_t g;

	if (depth == 8) {
		for (g = 0; g + 64 <= n; g += 64)
			_mm512_storeu_si512(
				out + g,
				transpose8x8(_mm512_loadu_si512(in + g)));
		interleave(in + g, out + g, n - g, 8, 1);
		return;
	}
	/* Round r merges runs of 2^r lines' bytes of a column from two
	 * registers into runs of 2^(r+1); output k of a pair takes its
	 * k-th half of the columns. */
	if (!ready) {
		for (r = 0; r < 3; r++)
			for (k = 0; k < 2; k++)
				for (t = 0; t < 64; t++) {
					unsigned int run = 1u << r,
						     col = t / (2 * run) +
							   k * (32 >> r),
						     s = t % (2 * run);

					idx[r][k][t] =
						(uint8_t)((s < run ? 0 : 64) +
							  col * run + s % run);
				}
		ready = 1;
	}
	for (g = 0; g + 512 <= n; g += 512) {
		for (k = 0; k < 8; k++)
			l[k] = _mm512_loadu_si512(in + g + 64 * k);
		for (k = 0; k < 8; k++)
			a[k] = _mm512_permutex2var_epi8(
				l[k & ~1u], _mm512_loadu_si512(idx[0][k & 1]),
				l[k | 1]);
		for (k = 0; k < 8; k++)
			b[k] = _mm512_permutex2var_epi8(
				a[(k / 4) * 4 + k % 2],
				_mm512_loadu_si512(idx[1][k / 2 % 2]),
				a[(k / 4) * 4 + k % 2 + 2]);
		for (k = 0; k < 8; k++)
			_mm512_storeu_si512(
				out + g + 64 * k,
				transpose8x8(_mm512_permutex2var_epi8(
					b[2 * (k / 2 % 2) + k / 4],
					_mm512_loadu_si512(idx[2][k % 2]),
					b[2 * (k / 2 % 2) + k / 4 + 4])));
	}
}

#define AVX2 __attribute__((target("avx2")))

/* transpose8() of the four qwords of @x. */
AVX2 static __m256i transpose8x4(__m256i x)
{
	static const uint64_t m[3] = { 0x00aa00aa00aa00aaull,
				       0x0000cccc0000ccccull,
				       0x00000000f0f0f0f0ull };
	static const int sh[3] = { 7, 14, 28 };
	__m256i t;
	int i;

	for (i = 0; i < 3; i++) {
		t = _mm256_and_si256(
			_mm256_xor_si256(x, _mm256_srli_epi64(x, sh[i])),
			_mm256_set1_epi64x((long long)m[i]));
		x = _mm256_xor_si256(
			x, _mm256_xor_si256(t, _mm256_slli_epi64(t, sh[i])));
	}
	return x;
}

/*
 * The same with AVX2: by 8 four qwords a transpose; by 512, 32 columns of
 * the 8 lines at a time, their bytes gathered into qwords by unpacks (of
 * bytes, words, then dwords: pairs, fours, eights of lines), which leave
 * columns c and c + 16 in the two halves of a register, put back in order
 * by swapping halves.
 */
AVX2 static void undo_avx2(const uint8_t *in, uint8_t *out, size_t n,
			   unsigned int depth)
{
	__m256i r[8], p[8], q[8], o[8];
	size_t g, j;
	int k;

	if (depth == 8) {
		for (g = 0; g + 32 <= n; g += 32)
			_mm256_storeu_si256((__m256i *)(out + g),
					    transpose8x4(_mm256_loadu_si256((
						    const __m256i *)(in + g))));
		interleave(in + g, out + g, n - g, 8, 1);
		return;
	}
	for (g = 0; g + 512 <= n; g += 512)
		for (j = 0; j < 64; j += 32) {
			for (k = 0; k < 8; k++)
				r[k] = _mm256_loadu_si256(
					(const __m256i *)(in + g + 64 * k + j));
			/* p[2i], p[2i+1]: lines 2i and 2i+1, columns 0-7
			 * and 8-15 of each half */
			for (k = 0; k < 4; k++) {
				p[2 * k] = _mm256_unpacklo_epi8(r[2 * k],
								r[2 * k + 1]);
				p[2 * k + 1] = _mm256_unpackhi_epi8(
					r[2 * k], r[2 * k + 1]);
			}
			/* q[4h + i]: lines 4h..4h+3, columns 4i..4i+3 */
			for (k = 0; k < 2; k++) {
				q[4 * k] = _mm256_unpacklo_epi16(p[4 * k],
								 p[4 * k + 2]);
				q[4 * k + 1] = _mm256_unpackhi_epi16(
					p[4 * k], p[4 * k + 2]);
				q[4 * k + 2] = _mm256_unpacklo_epi16(
					p[4 * k + 1], p[4 * k + 3]);
				q[4 * k + 3] = _mm256_unpackhi_epi16(
					p[4 * k + 1], p[4 * k + 3]);
			}
			/* o[2i], o[2i+1]: all lines, columns 4i, 4i+1 and
			 * 4i+2, 4i+3 of each half */
			for (k = 0; k < 4; k++) {
				o[2 * k] =
					_mm256_unpacklo_epi32(q[k], q[k + 4]);
				o[2 * k + 1] =
					_mm256_unpackhi_epi32(q[k], q[k + 4]);
			}
			for (k = 0; k < 4; k++) {
				__m256i lo = _mm256_permute2x128_si256(
						o[2 * k], o[2 * k + 1], 0x20),
					hi = _mm256_permute2x128_si256(
						o[2 * k], o[2 * k + 1], 0x31);

				_mm256_storeu_si256(
					(__m256i *)(out + g + 8 * (j + 4 * k)),
					transpose8x4(lo));
				_mm256_storeu_si256(
					(__m256i *)(out + g +
						    8 * (j + 16 + 4 * k)),
					transpose8x4(hi));
			}
		}
}

/* The undo the bench times: the library's SIMD level's where it has one. */
static void undo(const uint8_t *in, uint8_t *out, size_t n, unsigned int depth)
{
	if (kvmem__simd_active() == KVMEM__SIMD_AVX512)
		undo_avx512(in, out, n, depth);
	else if (kvmem__simd_active() == KVMEM__SIMD_AVX2)
		undo_avx2(in, out, n, depth);
	else
		interleave(in, out, n, depth, 1);
}

/*
 * Interleave @n bytes of @code into @il, and check that against the
 * definition (bit b of word w to group bit b * depth + w, one by one) over
 * the first groups, and that undoing it gives @code back, using @tmp.
 * Return: 0, or 1 when something differs.
 */
static int interleave_check(const uint8_t *code, uint8_t *il, uint8_t *tmp,
			    size_t n, unsigned int depth)
{
	const size_t m = n < 65536 ? n : 65536;
	size_t g, w, b;

	interleave(code, il, n, depth, 0);
	memset(tmp, 0, m);
	for (g = 0; g + depth <= m; g += depth)
		for (w = 0; w < depth; w++)
			for (b = 0; b < 8; b++)
				put_bits(tmp + g, b * depth + w,
					 get_bits(code + g + w, b, 1), 1);
	if (memcmp(tmp, il, m))
		return 1;
	undo(il, tmp, n, depth);
	return memcmp(tmp, code, n) != 0;
}

static void codec_usage(FILE *f)
{
	fprintf(f, "usage: kvmem-bench codec [--size MIB] [--reps N] "
		   "[--codec NAME]... [--portable] [--interleave D] "
		   "[--json]\n\n"
		   "  --size MIB    codeword buffer per codec (default 128)\n"
		   "  --reps N      runs per figure, best kept (default 5)\n"
		   "  --codec NAME  only this codec (repeatable): h74 h84 "
		   "golay24 secded72\n"
		   "  --portable    force the portable (non-SIMD) code path\n"
		   "  --interleave D  also undo a bit-interleaved layout of "
		   "h74/h84\n"
		   "                words by D (8: a bit per byte, 512: per "
		   "64-byte line)\n"
		   "  --json        one JSON object on stdout\n");
}

static int run_codec(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "size", required_argument, NULL, 's' },
		{ "reps", required_argument, NULL, 'r' },
		{ "codec", required_argument, NULL, 'c' },
		{ "portable", no_argument, NULL, 'p' },
		{ "interleave", required_argument, NULL, 'I' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct codec_result res[KVMEM_CODEC_NR];
	int want[KVMEM_CODEC_NR] = { 0 }, any = 0, json = 0, c, o, nres = 0;
	uint64_t size_mib = 128, reps = 5, depth = 0;
	uint8_t *code, *dirty, *data, *copy, *out = NULL;
	int ret = 0;
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
		case 'I':
			if (bench_parse_u64("interleave", optarg, 8, 512,
					    &depth))
				return 2;
			if (depth != 8 && depth != 512) {
				fprintf(stderr, "kvmem-bench: --interleave "
						"takes 8 or 512\n");
				return 2;
			}
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
	if (depth)
		out = bench_alloc(size);
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
		r->deint = r->deint_decode = 0;
		if (!depth || ci->word_bytes != 1)
			continue;
		bytes -= bytes % depth;
		if (interleave_check(code, dirty, copy, bytes,
				     (unsigned int)depth)) {
			fprintf(stderr,
				"kvmem-bench: %s: interleaving by %llu does "
				"not match the bit-by-bit reference\n",
				ci->name, (unsigned long long)depth);
			ret = 1;
			break;
		}
		r->deint = BEST(reps, bytes, ,
				undo(dirty, copy, bytes, (unsigned int)depth));
		r->deint_decode =
			BEST(reps, bytes, ,
			     undo(dirty, copy, bytes, (unsigned int)depth);
			     kvmem_ecc_decode(c, copy, out, bytes, &cnt, NULL,
					      NULL));
	}
	if (ret)
		goto out;

	if (json) {
		printf("{\"impl\": \"%s\", \"size_mib\": %llu, "
		       "\"baseline\": {\"read_gbps\": %.3f, "
		       "\"memcpy_gbps\": %.3f}, \"interleave\": %llu, "
		       "\"codecs\": [",
		       kvmem_ecc_impl(), (unsigned long long)size_mib,
		       read_gbps, memcpy_gbps, (unsigned long long)depth);
		for (i = 0; i < (size_t)nres; i++) {
			printf("%s{\"codec\": \"%s\", \"encode_gbps\": %.3f, "
			       "\"decode_gbps\": %.3f, "
			       "\"scrub_clean_gbps\": %.3f, "
			       "\"scrub_dirty_gbps\": %.3f, "
			       "\"scrub_clean_vs_read\": %.3f",
			       i ? ", " : "", res[i].name, res[i].encode,
			       res[i].decode, res[i].scrub_clean,
			       res[i].scrub_dirty,
			       res[i].scrub_clean / read_gbps);
			if (res[i].deint)
				printf(", \"deinterleave_gbps\": %.3f, "
				       "\"deinterleave_decode_gbps\": %.3f",
				       res[i].deint, res[i].deint_decode);
			printf("}");
		}
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
		for (i = 0; depth && i < (size_t)nres; i++)
			if (res[i].deint)
				printf("%s interleaved by %llu: undone %.2f "
				       "GB/s, undone and decoded %.2f GB/s "
				       "(decoded alone %.2f)\n",
				       res[i].name, (unsigned long long)depth,
				       res[i].deint, res[i].deint_decode,
				       res[i].decode);
	}
out:
	free(code);
	free(dirty);
	free(copy);
	free(data);
	free(out);
	return ret;
}

const struct bench_cmd bench_codec = {
	.name = "codec",
	.summary = "codec throughput next to read and memcpy bandwidth",
	.run = run_codec,
};
