/* SPDX-License-Identifier: MIT */
/*
 * check_ecc.c - the ECC codecs against references built from the paper
 *
 * Every expected value here is computed without the code under test: the
 * matrices of the ECC paper (Roy, eq. 16, 17, 22, 23, 31) are transcribed
 * as 0/1 arrays and the Hsiao matrix of secded72 is rebuilt from its
 * definition in ecc_ref.c, reference encoders are plain matrix-vector
 * products over GF(2) and reference decoders are brute force or "flip the
 * pattern back". The library is only ever the thing being compared.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ecc_ref.h"
#include "ecc_word.h"
#include "internal.h"
#include "kvmem/ecc.h"
#include "kvmem_check.h"
#include "rng.h"

/* ---- The paper's matrices (ecc_ref.c), expanded -------------------------- */

/* G24 = [I | B] and H24 = [B^T | I] from eq. 31's B. */
static uint8_t golay_G[12][24], golay_H[12][24];

static void golay_build(void)
{
	unsigned int i, j;

	for (i = 0; i < 12; i++)
		for (j = 0; j < 12; j++) {
			golay_G[i][j] = i == j;
			golay_G[i][12 + j] = ref_golay_B[i][j];
			golay_H[i][j] = ref_golay_B[j][i];
			golay_H[i][12 + j] = i == j;
		}
}

/* secded72's H from its definition (ref_secded_columns()). */
static uint8_t secded_col[64];

/* ---- GF(2) linear algebra ------------------------------------------------ */

/* @a (r x n) times the transpose of @b (s x n), written to @out (r x s). */
static void gf2_mul_t(const uint8_t *a, const uint8_t *b, unsigned int r,
		      unsigned int s, unsigned int n, uint8_t *out)
{
	unsigned int i, j, l;

	for (i = 0; i < r; i++)
		for (j = 0; j < s; j++) {
			out[i * s + j] = 0;
			for (l = 0; l < n; l++)
				out[i * s + j] ^= a[i * n + l] & b[j * n + l];
		}
}

static unsigned int popcount64(uint64_t v)
{
	return (unsigned int)__builtin_popcountll(v);
}

/* ---- Reference codecs ---------------------------------------------------- */

#define MAX_WB 9

static void refs_init(void)
{
	golay_build();
	ref_secded_columns(secded_col);
}

static size_t ref_data_bytes(int codec, size_t n)
{
	return (n * ref_codecs[codec].k + 7) / 8;
}

static void ref_encode(int codec, const uint8_t *data, uint8_t *code, size_t n)
{
	const struct ref_codec *l = &ref_codecs[codec];
	size_t w;

	for (w = 0; w < n; w++)
		ref_word(codec, ref_get_bits(data, w * l->k, l->k),
			 code + w * l->wb);
}

/* @data with the spare bits of its last byte cleared, as decode writes it. */
static void clear_spare(int codec, uint8_t *data, size_t n)
{
	size_t bits = n * ref_codecs[codec].k;

	if (bits % 8)
		data[bits / 8] &= (uint8_t)((1u << (bits % 8)) - 1);
}

static void flip_bit(uint8_t *w, unsigned int b)
{
	w[b / 8] ^= (uint8_t)(1u << (b % 8));
}

/* XOR the @wb-byte pattern @e into each of the @n words of @buf. */
static void xor_all(uint8_t *buf, size_t n, unsigned int wb, const uint8_t *e)
{
	size_t w;
	unsigned int b;

	for (w = 0; w < n; w++)
		for (b = 0; b < wb; b++)
			buf[w * wb + b] ^= e[b];
}

/* The SIMD paths this CPU runs: portable always, and every level above it
 * that the CPU has. */
static unsigned int simd_levels(int *lv)
{
	unsigned int n = 0;
	int level;

	lv[n++] = KVMEM__SIMD_PORTABLE;
	for (level = KVMEM__SIMD_PORTABLE + 1; level < KVMEM__SIMD_NR; level++)
		if (kvmem__simd_supported(level))
			lv[n++] = level;
	return n;
}

static void force_level(int level)
{
	ck_assert_int_eq(kvmem__simd_force(level), 0);
	ck_assert_int_eq(kvmem__simd_active(), level);
}

/*
 * Decode @n words of @code and expect every word to come out as @st
 * says (one value for all words), data equal to @exp, the counts to match.
 */
static void expect_decode_all(int codec, const uint8_t *code, size_t n,
			      const uint8_t *exp, uint8_t st,
			      unsigned int bits_per_word, const char *what,
			      unsigned int pat)
{
	size_t db = ref_data_bytes(codec, n), w;
	uint8_t *out = kvmem_check_xmalloc(db),
		*status = kvmem_check_xmalloc(n);
	struct kvmem_ecc_counts c;
	int ret;

	memset(out, 0xa5, db);
	memset(status, 0xee, n);
	memset(&c, 0xee, sizeof(c));
	ret = kvmem_ecc_decode(codec, code, out, n, &c, status, NULL);
	EXPECT_EQ(ret, st == KVMEM_ECC_UNCORRECTABLE ? -EBADMSG : 0,
		  "%s pattern 0x%x", what, pat);
	EXPECT_MEM(out, exp, db, "%s pattern 0x%x", what, pat);
	for (w = 0; w < n; w++)
		EXPECT_EQ(status[w], st, "%s pattern 0x%x word %zu", what, pat,
			  w);
	EXPECT_EQ(c.clean, st == KVMEM_ECC_CLEAN ? n : 0, "%s pattern 0x%x",
		  what, pat);
	EXPECT_EQ(c.corrected, st == KVMEM_ECC_CORRECTED ? n : 0,
		  "%s pattern 0x%x", what, pat);
	EXPECT_EQ(c.uncorrectable, st == KVMEM_ECC_UNCORRECTABLE ? n : 0,
		  "%s pattern 0x%x", what, pat);
	EXPECT_EQ(c.bits_corrected,
		  st == KVMEM_ECC_CORRECTED ? (uint64_t)n * bits_per_word : 0,
		  "%s pattern 0x%x", what, pat);
	free(out);
	free(status);
}

/* Scrub @n words in place; expect @st for all of them and @exp after. */
static void expect_scrub_all(int codec, uint8_t *code, size_t n,
			     const uint8_t *exp, uint8_t st, const char *what,
			     unsigned int pat)
{
	struct kvmem_ecc_counts c;
	int ret;

	memset(&c, 0xee, sizeof(c));
	ret = kvmem_ecc_scrub(codec, code, n, &c, NULL, 0);
	EXPECT_EQ(ret, st == KVMEM_ECC_UNCORRECTABLE ? -EBADMSG : 0,
		  "%s scrub pattern 0x%x", what, pat);
	EXPECT_MEM(code, exp, n * ref_codecs[codec].wb, "%s scrub pattern 0x%x",
		   what, pat);
	EXPECT_EQ(c.corrected, st == KVMEM_ECC_CORRECTED ? n : 0,
		  "%s scrub pattern 0x%x", what, pat);
	EXPECT_EQ(c.uncorrectable, st == KVMEM_ECC_UNCORRECTABLE ? n : 0,
		  "%s scrub pattern 0x%x", what, pat);
}

/* ---- Hamming(7,4) -------------------------------------------------------- */

/* All 16 data values, one per word: the stream is 0x10, 0x32, ... */
static void nibble_stream(uint8_t *data)
{
	unsigned int d;

	for (d = 0; d < 16; d++)
		ref_put_bits(data, 4 * d, 4, d);
}

START_TEST(test_h74_paper_matrices)
{
	uint8_t gh[4][3], data[8], code[16];
	unsigned int d, i, j;

	refs_init();
	/* The transcription is consistent: G.H^T = 0 (eq. 17), and H holds
	 * every non-zero 3-bit column exactly once (a perfect code). */
	gf2_mul_t(&ref_h74_G[0][0], &ref_h74_H[0][0], 4, 3, 7, &gh[0][0]);
	for (i = 0; i < 4; i++)
		for (j = 0; j < 3; j++)
			ck_assert_uint_eq(gh[i][j], 0);
	for (i = 0; i < 7; i++)
		for (j = 0; j < i; j++)
			ck_assert_uint_ne(ref_h74_syndrome(1u << i),
					  ref_h74_syndrome(1u << j));
	/* Eq. 18-20 written out agree with d.G. */
	for (d = 0; d < 16; d++) {
		unsigned int b0 = d & 1, b1 = d >> 1 & 1, b2 = d >> 2 & 1,
			     b3 = d >> 3 & 1;

		ck_assert_uint_eq(ref_h74(d), d | (b0 ^ b1 ^ b3) << 4 |
						      (b0 ^ b2 ^ b3) << 5 |
						      (b1 ^ b2 ^ b3) << 6);
	}
	/* The library's codewords are d.G and lie in the kernel of H. */
	nibble_stream(data);
	ck_assert_int_eq(kvmem_ecc_encode(KVMEM_CODEC_H74, data, code, 16), 0);
	for (d = 0; d < 16; d++) {
		ck_assert_uint_eq(code[d], ref_h74(d));
		ck_assert_uint_eq(ref_h74_syndrome(code[d]), 0);
		ck_assert_uint_eq(kvmem_h74_encode(d), ref_h74(d));
		ck_assert_uint_eq(kvmem_h74_syndrome(code[d]), 0);
	}
}
END_TEST

START_TEST(test_h74_paper_example2)
{
	/* d = [0, 1, 0, 0] is the value 2; c = [0,1,0,0,1,0,1] sets bits
	 * 1, 4 and 6. */
	const uint8_t d = 0x2, c = 1u << 1 | 1u << 4 | 1u << 6;
	uint8_t code, out;
	struct kvmem_ecc_counts cnt;
	uint8_t status;

	refs_init();
	ck_assert_uint_eq(ref_h74(d), c);
	ck_assert_int_eq(kvmem_ecc_encode(KVMEM_CODEC_H74, &d, &code, 1), 0);
	ck_assert_uint_eq(code, c);
	/* r = [0,1,0,1,1,0,1]: syndrome (1,1,1), column 3 of H. */
	code ^= 1u << 3;
	ck_assert_uint_eq(ref_h74_syndrome(code), 0x7);
	ck_assert_uint_eq(kvmem_h74_syndrome(code), 0x7);
	ck_assert_int_eq(kvmem_ecc_decode(KVMEM_CODEC_H74, &code, &out, 1, &cnt,
					  &status, NULL),
			 0);
	ck_assert_uint_eq(out, d);
	ck_assert_uint_eq(status, KVMEM_ECC_CORRECTED);
	ck_assert_uint_eq(cnt.corrected, 1);
	ck_assert_uint_eq(cnt.bits_corrected, 1);
	ck_assert_int_eq(
		kvmem_ecc_scrub(KVMEM_CODEC_H74, &code, 1, &cnt, NULL, 0), 0);
	ck_assert_uint_eq(code, c);
}
END_TEST

START_TEST(test_h74_paper_example3)
{
	uint8_t data[8], code[16], exp[16], exp_data[8];
	unsigned int d;

	refs_init();
	/* h0 ^ h1 = (0,1,1) = h2: the decoder flips index 2. */
	ck_assert_int_eq(ref_h74_position(ref_h74_syndrome(0x3)), 2);
	nibble_stream(data);
	for (d = 0; d < 16; d++) {
		code[d] = (uint8_t)(ref_h74(d) ^ 0x3);
		exp[d] = (uint8_t)(ref_h74(d) ^ 0x7);
		ref_put_bits(exp_data, 4 * d, 4, exp[d] & 0xf);
		/* The miscorrected word differs from the sent one in 3 bits. */
		ck_assert_uint_eq(popcount64(exp[d] ^ ref_h74(d)), 3);
	}
	expect_decode_all(KVMEM_CODEC_H74, code, 16, exp_data,
			  KVMEM_ECC_CORRECTED, 1, "h74 example 3", 0x3);
	expect_scrub_all(KVMEM_CODEC_H74, code, 16, exp, KVMEM_ECC_CORRECTED,
			 "h74 example 3", 0x3);
}
END_TEST

/* Nearest of the 16 codewords @cw[] to @r: how many at the least distance. */
static unsigned int nearest(const uint8_t *cw, uint8_t r, unsigned int *dist,
			    unsigned int *which)
{
	unsigned int d, best = 99, count = 0, dd;

	for (d = 0; d < 16; d++) {
		dd = popcount64((uint8_t)(cw[d] ^ r));
		if (dd < best) {
			best = dd;
			count = 0;
			*which = d;
		}
		if (dd == best)
			count++;
	}
	*dist = best;
	return count;
}

START_TEST(test_h74_single_exhaustive)
{
	uint8_t data[8], code[16], clean[16];
	unsigned int e, d;

	refs_init();
	nibble_stream(data);
	for (d = 0; d < 16; d++)
		clean[d] = ref_h74(d);
	/* e = 0: clean; e = 1 << 0..6: one error in the code. */
	for (e = 0; e < 8; e++) {
		uint8_t pat = e ? (uint8_t)(1u << (e - 1)) : 0;

		memcpy(code, clean, 16);
		xor_all(code, 16, 1, &pat);
		expect_decode_all(KVMEM_CODEC_H74, code, 16, data,
				  pat ? KVMEM_ECC_CORRECTED : KVMEM_ECC_CLEAN,
				  1, "h74 single", pat);
		expect_scrub_all(KVMEM_CODEC_H74, code, 16, clean,
				 pat ? KVMEM_ECC_CORRECTED : KVMEM_ECC_CLEAN,
				 "h74 single", pat);
	}
}
END_TEST

START_TEST(test_h74_double_miscorrected)
{
	uint8_t data[8], code[16], cw[16], exp[16], exp_data[8];
	unsigned int i, j, d, dist, which;
	int k;

	refs_init();
	nibble_stream(data);
	for (d = 0; d < 16; d++)
		cw[d] = ref_h74(d);
	for (i = 0; i < 7; i++)
		for (j = i + 1; j < 7; j++) {
			uint8_t pat = (uint8_t)(1u << i | 1u << j);

			/* The syndrome h_i ^ h_j names a third column k. */
			k = ref_h74_position(ref_h74_syndrome(pat));
			ck_assert_int_ge(k, 0);
			ck_assert_int_ne(k, (int)i);
			ck_assert_int_ne(k, (int)j);
			for (d = 0; d < 16; d++) {
				code[d] = cw[d] ^ pat;
				exp[d] = (uint8_t)(code[d] ^ 1u << k);
				/* Brute force agrees: the received word is 1
				 * away from exactly one codeword, the wrong
				 * one. */
				ck_assert_uint_eq(
					nearest(cw, code[d], &dist, &which), 1);
				ck_assert_uint_eq(dist, 1);
				ck_assert_uint_eq(cw[which], exp[d]);
				ck_assert_uint_ne(which, d);
				ref_put_bits(exp_data, 4 * d, 4, which);
			}
			expect_decode_all(KVMEM_CODEC_H74, code, 16, exp_data,
					  KVMEM_ECC_CORRECTED, 1, "h74 double",
					  pat);
			expect_scrub_all(KVMEM_CODEC_H74, code, 16, exp,
					 KVMEM_ECC_CORRECTED, "h74 double",
					 pat);
		}
}
END_TEST

START_TEST(test_h74_bit7)
{
	uint8_t data[8], code[16], clean[16];
	unsigned int e, d;

	refs_init();
	nibble_stream(data);
	for (d = 0; d < 16; d++)
		clean[d] = ref_h74(d);
	/* Bit 7 alone, then bit 7 with each single error: each flipped bit
	 * is one bit corrected, and the stored byte comes back canonical. */
	for (e = 0; e < 8; e++) {
		uint8_t pat = (uint8_t)(0x80 | (e ? 1u << (e - 1) : 0));

		memcpy(code, clean, 16);
		xor_all(code, 16, 1, &pat);
		expect_decode_all(KVMEM_CODEC_H74, code, 16, data,
				  KVMEM_ECC_CORRECTED, e ? 2 : 1, "h74 bit 7",
				  pat);
		expect_scrub_all(KVMEM_CODEC_H74, code, 16, clean,
				 KVMEM_ECC_CORRECTED, "h74 bit 7", pat);
	}
}
END_TEST

/* Every stored byte through the per-word decoder of ecc_word.h. */
START_TEST(test_h74_word_all_bytes)
{
	uint8_t cw[16];
	unsigned int r, d, dist, which;

	refs_init();
	for (d = 0; d < 16; d++)
		cw[d] = ref_h74(d);
	for (r = 0; r < 256; r++) {
		uint8_t w = (uint8_t)r;
		int ret = kvmem_h74_correct(&w);

		/* Perfect code: the low 7 bits are within 1 of exactly one
		 * codeword; bit 7 counts as one more bit fixed. */
		ck_assert_uint_eq(nearest(cw, r & 0x7f, &dist, &which), 1);
		EXPECT_EQ(w, cw[which], "r 0x%02x", r);
		EXPECT_EQ(ret, dist + (r >> 7), "r 0x%02x", r);
		EXPECT_EQ(kvmem_h74_syndrome(r & 0x7f),
			  ref_h74_syndrome(r & 0x7f), "r 0x%02x", r);
	}
}
END_TEST

KVMEM_SUITE(ecc_h74)
{
	Suite *s = suite_create("ecc_h74");
	TCase *tc = tcase_create("h74");

	tcase_add_test(tc, test_h74_paper_matrices);
	tcase_add_test(tc, test_h74_paper_example2);
	tcase_add_test(tc, test_h74_paper_example3);
	tcase_add_test(tc, test_h74_single_exhaustive);
	tcase_add_test(tc, test_h74_double_miscorrected);
	tcase_add_test(tc, test_h74_bit7);
	tcase_add_test(tc, test_h74_word_all_bytes);
	suite_add_tcase(s, tc);
	return s;
}

/* ---- Extended Hamming(8,4) ----------------------------------------------- */

START_TEST(test_h84_paper_matrices)
{
	uint8_t gh[4][4], data[8], code[16];
	unsigned int d, e, i, j;

	refs_init();
	gf2_mul_t(&ref_h84_G[0][0], &ref_h84_H[0][0], 4, 4, 8, &gh[0][0]);
	for (i = 0; i < 4; i++)
		for (j = 0; j < 4; j++)
			ck_assert_uint_eq(gh[i][j], 0);
	nibble_stream(data);
	ck_assert_int_eq(kvmem_ecc_encode(KVMEM_CODEC_H84, data, code, 16), 0);
	for (d = 0; d < 16; d++) {
		unsigned int c7 = (d ^ d >> 1 ^ d >> 2) & 1;

		/* Eq. 22 is eq. 17 plus c7 = d0 ^ d1 ^ d2. */
		ck_assert_uint_eq(ref_h84(d), ref_h74(d) | c7 << 7);
		ck_assert_uint_eq(code[d], ref_h84(d));
		ck_assert_uint_eq(kvmem_h84_encode(d), ref_h84(d));
		ck_assert_uint_eq(
			ref_gf2_mat_vec(&ref_h84_H[0][0], 4, 8, code[d]), 0);
		ck_assert_uint_eq(popcount64(code[d]) % 2, 0);
		/* d_min = 4. */
		for (e = 0; e < d; e++)
			ck_assert_uint_ge(popcount64(code[d] ^ code[e]), 4);
	}
}
END_TEST

START_TEST(test_h84_single_exhaustive)
{
	uint8_t data[8], code[16], clean[16];
	unsigned int e, d;

	refs_init();
	nibble_stream(data);
	for (d = 0; d < 16; d++)
		clean[d] = ref_h84(d);
	for (e = 0; e < 9; e++) {
		uint8_t pat = e ? (uint8_t)(1u << (e - 1)) : 0;

		memcpy(code, clean, 16);
		xor_all(code, 16, 1, &pat);
		expect_decode_all(KVMEM_CODEC_H84, code, 16, data,
				  pat ? KVMEM_ECC_CORRECTED : KVMEM_ECC_CLEAN,
				  1, "h84 single", pat);
		expect_scrub_all(KVMEM_CODEC_H84, code, 16, clean,
				 pat ? KVMEM_ECC_CORRECTED : KVMEM_ECC_CLEAN,
				 "h84 single", pat);
	}
}
END_TEST

START_TEST(test_h84_c7_flipped)
{
	uint8_t d, code, out, status;
	struct kvmem_ecc_counts c;

	refs_init();
	for (d = 0; d < 16; d++) {
		code = ref_h84(d) ^ 0x80;
		/* Local syndrome (rows 0-2 of eq. 23) 0, overall parity 1. */
		ck_assert_uint_eq(ref_gf2_mat_vec(&ref_h84_H[0][0], 4, 8, code),
				  0x8);
		ck_assert_int_eq(kvmem_ecc_decode(KVMEM_CODEC_H84, &code, &out,
						  1, &c, &status, NULL),
				 0);
		ck_assert_uint_eq(out, d);
		ck_assert_uint_eq(status, KVMEM_ECC_CORRECTED);
		ck_assert_uint_eq(c.corrected, 1);
		ck_assert_uint_eq(c.bits_corrected, 1);
		ck_assert_uint_eq(c.clean, 0);
		ck_assert_int_eq(
			kvmem_ecc_scrub(KVMEM_CODEC_H84, &code, 1, &c, NULL, 0),
			0);
		ck_assert_uint_eq(code, ref_h84(d));
		ck_assert_uint_eq(c.corrected, 1);
	}
}
END_TEST

START_TEST(test_h84_double_detected)
{
	uint8_t data[8], code[16], recv[16], cw[16], exp_data[8];
	unsigned int i, j, d, dist, which;
	uint64_t eras;

	refs_init();
	nibble_stream(data);
	for (d = 0; d < 16; d++)
		cw[d] = ref_h84(d);
	for (i = 0; i < 8; i++)
		for (j = i + 1; j < 8; j++) {
			uint8_t pat = (uint8_t)(1u << i | 1u << j);
			struct kvmem_ecc_counts c;
			uint8_t out[8];

			for (d = 0; d < 16; d++) {
				code[d] = cw[d] ^ pat;
				/* Two codewords or more are 2 away: there is
				 * nothing to correct to. */
				ck_assert_uint_ge(
					nearest(cw, code[d], &dist, &which), 2);
				ck_assert_uint_eq(dist, 2);
				ref_put_bits(exp_data, 4 * d, 4, code[d] & 0xf);
			}
			memcpy(recv, code, 16);
			expect_decode_all(KVMEM_CODEC_H84, code, 16, exp_data,
					  KVMEM_ECC_UNCORRECTABLE, 0,
					  "h84 double", pat);
			eras = 0;
			ck_assert_int_eq(kvmem_ecc_decode(KVMEM_CODEC_H84, code,
							  out, 16, &c, NULL,
							  &eras),
					 -EBADMSG);
			ck_assert_uint_eq(eras, 0xffff);
			expect_scrub_all(KVMEM_CODEC_H84, code, 16, recv,
					 KVMEM_ECC_UNCORRECTABLE, "h84 double",
					 pat);
		}
}
END_TEST

START_TEST(test_h84_word_all_bytes)
{
	uint8_t cw[16];
	unsigned int r, d, dist, which, count;

	refs_init();
	for (d = 0; d < 16; d++)
		cw[d] = ref_h84(d);
	for (r = 0; r < 256; r++) {
		uint8_t w = (uint8_t)r;
		int ret = kvmem_h84_correct(&w);

		EXPECT_EQ(kvmem_h84_syndrome(r),
			  ref_gf2_mat_vec(&ref_h84_H[0][0], 4, 8, r),
			  "r 0x%02x", r);
		count = nearest(cw, (uint8_t)r, &dist, &which);
		if (dist <= 1) {
			EXPECT_EQ(count, 1, "r 0x%02x", r);
			EXPECT_EQ(w, cw[which], "r 0x%02x", r);
			EXPECT_EQ(ret, dist, "r 0x%02x", r);
		} else {
			/* Covering radius 2: the rest is 2 from several. */
			EXPECT_EQ(dist, 2, "r 0x%02x", r);
			EXPECT_EQ(ret, KVMEM_WORD_UE, "r 0x%02x", r);
			EXPECT_EQ(w, r, "r 0x%02x", r);
		}
	}
}
END_TEST

/* Four codewords a register: the encoding of each byte, and clean iff equal. */
START_TEST(test_h8x4_encode)
{
	unsigned int n, ext, i, b, pos;
	uint32_t x, want;

	refs_init();
	for (ext = 0; ext < 2; ext++)
		for (n = 0; n < 0x10000; n++) {
			x = (n & 0xf) | (n >> 4 & 0xf) << 8 |
			    (n >> 8 & 0xf) << 16 | (n >> 12 & 0xf) << 24;
			want = 0;
			for (i = 0; i < 4; i++)
				want |= (uint32_t)(ext ? ref_h84(n >> (4 * i) &
								 0xf)
						       : ref_h74(n >> (4 * i) &
								 0xf))
					<< (8 * i);
			EXPECT_EQ(kvmem_h8x4_encode(x, (int)ext), want,
				  "ext %u data 0x%04x", ext, n);
			/* Every byte value at each place, among codewords. */
			pos = n % 4;
			for (b = 0; b < 256; b += 1 + n % 7) {
				uint32_t r = (want & ~(0xffu << (8 * pos))) |
					     (uint32_t)b << (8 * pos);
				uint8_t w = (uint8_t)b;
				int clean = ext ? kvmem_h84_correct(&w) == 0
						: kvmem_h74_correct(&w) == 0;

				EXPECT_EQ(kvmem_h8x4_encode(r, (int)ext) == r,
					  clean, "ext %u 0x%08x", ext, r);
			}
		}
}
END_TEST

KVMEM_SUITE(ecc_h84)
{
	Suite *s = suite_create("ecc_h84");
	TCase *tc = tcase_create("h84");

	tcase_add_test(tc, test_h84_paper_matrices);
	tcase_add_test(tc, test_h84_single_exhaustive);
	tcase_add_test(tc, test_h84_c7_flipped);
	tcase_add_test(tc, test_h84_double_detected);
	tcase_add_test(tc, test_h84_word_all_bytes);
	tcase_add_test(tc, test_h8x4_encode);
	suite_add_tcase(s, tc);
	return s;
}

/* ---- Golay(24,12) -------------------------------------------------------- */

START_TEST(test_golay_matrix_b)
{
	uint8_t bbt[12][12], gh[12][12];
	unsigned int i, j;

	refs_init();
	/* DESIGN.md: rows 0..10 are cyclic shifts of row 0 over columns
	 * 0..10 with a 1 in column 11; row 11 is eleven ones and a zero.
	 * Checks the transcription as much as the paper. */
	for (i = 0; i < 11; i++) {
		for (j = 0; j < 11; j++)
			ck_assert_uint_eq(ref_golay_B[i][j],
					  ref_golay_B[0][(i + j) % 11]);
		ck_assert_uint_eq(ref_golay_B[i][11], 1);
		ck_assert_uint_eq(ref_golay_B[11][i], 1);
	}
	ck_assert_uint_eq(ref_golay_B[11][11], 0);
	/* Eq. 32: B.B^T = I, and B is symmetric. */
	gf2_mul_t(&ref_golay_B[0][0], &ref_golay_B[0][0], 12, 12, 12,
		  &bbt[0][0]);
	for (i = 0; i < 12; i++)
		for (j = 0; j < 12; j++) {
			ck_assert_uint_eq(bbt[i][j], i == j);
			ck_assert_uint_eq(ref_golay_B[i][j], ref_golay_B[j][i]);
		}
	/* Eq. 35: G24.H24^T = 0. */
	gf2_mul_t(&golay_G[0][0], &golay_H[0][0], 12, 12, 24, &gh[0][0]);
	for (i = 0; i < 12; i++)
		for (j = 0; j < 12; j++)
			ck_assert_uint_eq(gh[i][j], 0);
}
END_TEST

/* All 4096 data words in order, one per golay24 word. */
static void golay_all_words(uint8_t *data, uint8_t *code)
{
	unsigned int d;

	for (d = 0; d < 4096; d++)
		ref_put_bits(data, 12 * d, 12, d);
	ck_assert_int_eq(
		kvmem_ecc_encode(KVMEM_CODEC_GOLAY24, data, code, 4096), 0);
}

START_TEST(test_golay_codewords)
{
	static uint8_t data[6144], code[3 * 4096];
	unsigned int hist[25] = { 0 }, d;

	refs_init();
	golay_all_words(data, code);
	for (d = 0; d < 4096; d++) {
		uint32_t c = (uint32_t)ref_get_le(code + 3 * d, 3);

		EXPECT_EQ(c, ref_golay(d), "d 0x%03x", d);
		EXPECT_EQ(kvmem_golay24_encode(d), ref_golay(d), "d 0x%03x", d);
		/* In the kernel of H24 = [B^T | I]. */
		EXPECT_EQ(ref_gf2_mat_vec(&golay_H[0][0], 12, 24, c), 0,
			  "d 0x%03x", d);
		EXPECT_EQ(kvmem_golay24_syndrome(c), 0, "d 0x%03x", d);
		hist[popcount64(c)]++;
	}
	/* The weight enumerator of the extended Golay code. */
	for (d = 0; d <= 24; d++) {
		unsigned int exp = d == 0 || d == 24   ? 1
				   : d == 8 || d == 16 ? 759
				   : d == 12	       ? 2576
						       : 0;

		EXPECT_EQ(hist[d], exp, "weight %u", d);
	}
}
END_TEST

/* Every 24-bit error pattern of weight @wt, in increasing order (Gosper's
 * next-combination step); returns how many. */
static unsigned int golay_patterns(unsigned int wt, uint32_t *out)
{
	unsigned int n = 0;
	uint32_t e, t;

	if (!wt) {
		out[0] = 0;
		return 1;
	}
	for (e = (1u << wt) - 1; e < 1u << 24;) {
		out[n++] = e;
		t = e | (e - 1);
		e = (t + 1) |
		    (((~t & (0u - ~t)) - 1) >> (__builtin_ctz(e) + 1));
	}
	return n;
}

/*
 * The per-word error locator: every syndrome of a weight-<=3 pattern (there
 * are 2325, all distinct, eq. 37) maps back to that pattern, all others to
 * "beyond". The library's lookup table must agree.
 */
START_TEST(test_golay_error_locator)
{
	static uint32_t leader[4096];
	static uint32_t pats[2024];
	const struct kvmem__ecc_tables *t;
	unsigned int wt, i, distinct = 0, s, n;

	refs_init();
	for (s = 0; s < 4096; s++)
		leader[s] = 0xffffffffu;
	for (wt = 0; wt <= 3; wt++) {
		n = golay_patterns(wt, pats);
		for (i = 0; i < n; i++) {
			s = ref_gf2_mat_vec(&golay_H[0][0], 12, 24, pats[i]);
			EXPECT_EQ(leader[s], 0xffffffffu, "pattern 0x%06x",
				  pats[i]);
			leader[s] = pats[i];
			distinct++;
		}
	}
	ck_assert_uint_eq(distinct, 2325);
	t = kvmem__ecc_tables();
	for (s = 0; s < 4096; s++) {
		EXPECT_EQ(kvmem_golay24_error(s), leader[s], "syndrome 0x%03x",
			  s);
		EXPECT_EQ(t->golay_error[s], leader[s], "syndrome 0x%03x", s);
	}
}
END_TEST

/*
 * The per-word decoder of ecc_word.h (what the GPU runs, without the bulk
 * path's lookup table): patterns of weight <= 3 flipped back, weight 4
 * reported with the word left as received.
 */
START_TEST(test_golay_word_correct)
{
	static uint32_t pats[10626];
	struct kvmem_rng r;
	unsigned int wt, i, n, k;
	uint32_t c, w;
	int ret;

	refs_init();
	kvmem_rng_seed(&r, 0x90a7);
	for (k = 0; k < 8; k++) {
		c = ref_golay((uint32_t)kvmem_rng_below(&r, 4096));
		for (wt = 0; wt <= 4; wt++) {
			n = golay_patterns(wt, pats);
			for (i = 0; i < n; i++) {
				w = c ^ pats[i];
				ret = kvmem_golay24_correct(&w);
				EXPECT_EQ(ret, wt < 4 ? (int)wt : KVMEM_WORD_UE,
					  "c 0x%06x e 0x%06x", c, pats[i]);
				EXPECT_EQ(w, wt < 4 ? c : c ^ pats[i],
					  "c 0x%06x e 0x%06x", c, pats[i]);
			}
		}
	}
}
END_TEST

/*
 * Every data word with every error of weight <= 3: one buffer of all 4096
 * codewords, the same pattern XORed into each, one decode per pattern.
 */
START_TEST(test_golay_correct_exhaustive)
{
	static uint8_t data[6144], code[3 * 4096], recv[3 * 4096];
	static uint32_t pats[2024];
	unsigned int wt, i, n, total = 0;
	uint8_t e[3];

	refs_init();
	golay_all_words(data, code);
	for (wt = 0; wt <= 3; wt++) {
		n = golay_patterns(wt, pats);
		for (i = 0; i < n; i++) {
			ref_put_le(e, 3, pats[i]);
			memcpy(recv, code, sizeof(code));
			xor_all(recv, 4096, 3, e);
			expect_decode_all(KVMEM_CODEC_GOLAY24, recv, 4096, data,
					  wt ? KVMEM_ECC_CORRECTED
					     : KVMEM_ECC_CLEAN,
					  wt, "golay", pats[i]);
			expect_scrub_all(KVMEM_CODEC_GOLAY24, recv, 4096, code,
					 wt ? KVMEM_ECC_CORRECTED
					    : KVMEM_ECC_CLEAN,
					 "golay", pats[i]);
			total++;
		}
	}
	ck_assert_uint_eq(total, 2325);
}
END_TEST

/* Weight 4: reported, never miscorrected, on a sample of 64 words. */
START_TEST(test_golay_weight4_detected)
{
	enum { N = 64 };
	static uint32_t pats[10626];
	uint8_t data[N * 3 / 2], code[N * 3], recv[N * 3], keep[N * 3];
	uint8_t exp[N * 3 / 2];
	struct kvmem_rng r;
	unsigned int i, n, w;
	uint8_t e[3];

	refs_init();
	kvmem_rng_seed(&r, 0x601a4);
	kvmem_check_fill_random(&r, data, sizeof(data));
	ref_encode(KVMEM_CODEC_GOLAY24, data, code, N);
	n = golay_patterns(4, pats);
	ck_assert_uint_eq(n, 10626);
	for (i = 0; i < n; i++) {
		ref_put_le(e, 3, pats[i]);
		memcpy(recv, code, sizeof(code));
		xor_all(recv, N, 3, e);
		/* The data bits as received. */
		for (w = 0; w < N; w++)
			ref_put_bits(exp, 12 * w, 12,
				     ref_get_bits(data, 12 * w, 12) ^
					     (pats[i] & 0xfff));
		expect_decode_all(KVMEM_CODEC_GOLAY24, recv, N, exp,
				  KVMEM_ECC_UNCORRECTABLE, 0, "golay weight 4",
				  pats[i]);
		/* Left exactly as received. */
		memcpy(keep, recv, sizeof(keep));
		expect_scrub_all(KVMEM_CODEC_GOLAY24, recv, N, keep,
				 KVMEM_ECC_UNCORRECTABLE, "golay weight 4",
				 pats[i]);
	}
}
END_TEST

/* Three INT4 values per word: v0 = d0..d3, v1 = d4..d7, v2 = d8..d11. */
START_TEST(test_golay_int4_packing)
{
	const uint8_t v[6] = { 0x3, 0xc, 0x7, 0x0, 0xf, 0x9 };
	uint8_t data[3], code[6], out[3];
	uint32_t w0, w1;

	refs_init();
	/* INT4 values two per byte, low nibble first. */
	data[0] = (uint8_t)(v[0] | v[1] << 4);
	data[1] = (uint8_t)(v[2] | v[3] << 4);
	data[2] = (uint8_t)(v[4] | v[5] << 4);
	ck_assert_int_eq(kvmem_ecc_encode(KVMEM_CODEC_GOLAY24, data, code, 2),
			 0);
	w0 = (uint32_t)ref_get_le(code, 3);
	w1 = (uint32_t)ref_get_le(code + 3, 3);
	ck_assert_uint_eq(w0 & 0xfff, 0x7c3);
	ck_assert_uint_eq(w1 & 0xfff, 0x9f0);
	ck_assert_uint_eq(w0, ref_golay(0x7c3));
	ck_assert_uint_eq(w1, ref_golay(0x9f0));
	/* One word: the high nibble of the second byte is spare, ignored on
	 * encode and zero on decode. */
	data[1] = 0xa7;
	ck_assert_int_eq(kvmem_ecc_encode(KVMEM_CODEC_GOLAY24, data, code, 1),
			 0);
	ck_assert_uint_eq(ref_get_le(code, 3), ref_golay(0x7c3));
	memset(out, 0xff, sizeof(out));
	ck_assert_int_eq(kvmem_ecc_decode(KVMEM_CODEC_GOLAY24, code, out, 1,
					  NULL, NULL, NULL),
			 0);
	ck_assert_uint_eq(out[0], 0xc3);
	ck_assert_uint_eq(out[1], 0x07);
	ck_assert_uint_eq(out[2], 0xff); /* past the 2 data bytes: untouched */
}
END_TEST

KVMEM_SUITE(ecc_golay24)
{
	Suite *s = suite_create("ecc_golay24");
	TCase *tc = tcase_create("golay24");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_golay_matrix_b);
	tcase_add_test(tc, test_golay_codewords);
	tcase_add_test(tc, test_golay_error_locator);
	tcase_add_test(tc, test_golay_word_correct);
	tcase_add_test(tc, test_golay_correct_exhaustive);
	tcase_add_test(tc, test_golay_weight4_detected);
	tcase_add_test(tc, test_golay_int4_packing);
	suite_add_tcase(s, tc);
	return s;
}

/* ---- SECDED(72,64) ------------------------------------------------------- */

/* A buffer of @n random secded72 words and the data they hold. */
static void secded_words(uint64_t seed, uint8_t *data, uint8_t *code, size_t n)
{
	struct kvmem_rng r;

	kvmem_rng_seed(&r, seed);
	kvmem_check_fill_random(&r, data, 8 * n);
	ref_encode(KVMEM_CODEC_SECDED72, data, code, n);
}

START_TEST(test_secded_hsiao)
{
	enum { N = 256 };
	uint8_t data[8 * N], code[9 * N], lib[9 * N], w[9];
	uint32_t rowsum[8] = { 0 };
	unsigned int j, k, i;

	refs_init();
	/* The construction: distinct odd-weight columns, 26 data bits per
	 * check bit. */
	for (j = 0; j < 64; j++) {
		ck_assert_uint_eq(popcount64(secded_col[j]) % 2, 1);
		for (i = 0; i < j; i++)
			ck_assert_uint_ne(secded_col[i], secded_col[j]);
		for (k = 0; k < 8; k++)
			rowsum[k] += secded_col[j] >> k & 1;
	}
	for (k = 0; k < 8; k++)
		ck_assert_uint_eq(rowsum[k], 26);
	ck_assert_uint_eq(secded_col[0], 0x07);
	ck_assert_uint_eq(secded_col[1], 0x0b);
	ck_assert_uint_eq(secded_col[55], 0xe0);
	ck_assert_uint_eq(secded_col[57], 0x3e);
	ck_assert_uint_eq(secded_col[63], 0x8f);
	/* Unit data words give the columns themselves. */
	for (j = 0; j < 64; j++) {
		uint64_t d = 1ull << j;

		ref_put_le(data, 8, d);
		ck_assert_int_eq(
			kvmem_ecc_encode(KVMEM_CODEC_SECDED72, data, w, 1), 0);
		ck_assert_uint_eq(ref_get_le(w, 8), d);
		ck_assert_uint_eq(w[8], secded_col[j]);
		ck_assert_uint_eq(kvmem_secded72_encode(d), secded_col[j]);
	}
	/* Random words: value = data | check << 64, 9 bytes LE. */
	secded_words(0x5ec, data, code, N);
	ck_assert_int_eq(kvmem_ecc_encode(KVMEM_CODEC_SECDED72, data, lib, N),
			 0);
	EXPECT_MEM(lib, code, sizeof(lib), "%s", "random words");
}
END_TEST

START_TEST(test_secded_column_lookup)
{
	unsigned int s, j;
	int exp;

	refs_init();
	for (s = 0; s < 256; s++) {
		exp = -1;
		for (j = 0; j < 64; j++)
			if (secded_col[j] == s)
				exp = (int)j;
		EXPECT_EQ((intmax_t)kvmem_secded72_column(s), (intmax_t)exp,
			  "syndrome 0x%02x", s);
	}
}
END_TEST

/* The per-word decoder: every single error fixed, every double reported. */
START_TEST(test_secded_word_correct)
{
	struct kvmem_rng r;
	unsigned int i, j, k;
	uint64_t d0, d, rd;
	uint8_t c0, c, rc;
	int ret;

	refs_init();
	kvmem_rng_seed(&r, 0x3ec);
	for (k = 0; k < 8; k++) {
		d0 = kvmem_rng_next(&r);
		c0 = ref_secded_check(d0);
		for (i = 0; i < 72; i++)
			for (j = i; j < 72; j++) {
				/* j == i: one error; j > i: two. */
				d = d0;
				c = c0;
				if (i < 64)
					d ^= 1ull << i;
				else
					c ^= (uint8_t)(1u << (i - 64));
				if (j > i && j < 64)
					d ^= 1ull << j;
				else if (j > i)
					c ^= (uint8_t)(1u << (j - 64));
				rd = d;
				rc = c;
				ret = kvmem_secded72_correct(&d, &c);
				EXPECT_EQ(ret, j == i ? 1 : KVMEM_WORD_UE,
					  "bits %u %u", i, j);
				/* Fixed, or left exactly as received. */
				EXPECT_EQ(d, j == i ? d0 : rd, "bits %u %u", i,
					  j);
				EXPECT_EQ(c, j == i ? c0 : rc, "bits %u %u", i,
					  j);
			}
	}
}
END_TEST

START_TEST(test_secded_single_all)
{
	enum { N = 32 };
	uint8_t data[8 * N], code[9 * N], recv[9 * N];
	uint8_t e[9];
	unsigned int b;

	refs_init();
	secded_words(0x51, data, code, N);
	for (b = 0; b < 72; b++) {
		memset(e, 0, sizeof(e));
		flip_bit(e, b);
		memcpy(recv, code, sizeof(code));
		xor_all(recv, N, 9, e);
		expect_decode_all(KVMEM_CODEC_SECDED72, recv, N, data,
				  KVMEM_ECC_CORRECTED, 1, "secded single", b);
		expect_scrub_all(KVMEM_CODEC_SECDED72, recv, N, code,
				 KVMEM_ECC_CORRECTED, "secded single", b);
	}
}
END_TEST

START_TEST(test_secded_double_all)
{
	enum { N = 16 };
	uint8_t data[8 * N], code[9 * N], recv[9 * N], keep[9 * N];
	uint8_t exp[8 * N], e[9];
	unsigned int i, j, w, count = 0;

	refs_init();
	secded_words(0xd0b1e, data, code, N);
	for (i = 0; i < 72; i++)
		for (j = i + 1; j < 72; j++) {
			memset(e, 0, sizeof(e));
			flip_bit(e, i);
			flip_bit(e, j);
			memcpy(recv, code, sizeof(code));
			xor_all(recv, N, 9, e);
			for (w = 0; w < N; w++)
				memcpy(exp + 8 * w, recv + 9 * w, 8);
			expect_decode_all(KVMEM_CODEC_SECDED72, recv, N, exp,
					  KVMEM_ECC_UNCORRECTABLE, 0,
					  "secded double", i << 8 | j);
			memcpy(keep, recv, sizeof(keep));
			expect_scrub_all(KVMEM_CODEC_SECDED72, recv, N, keep,
					 KVMEM_ECC_UNCORRECTABLE,
					 "secded double", i << 8 | j);
			count++;
		}
	ck_assert_uint_eq(count, 2556);
}
END_TEST

KVMEM_SUITE(ecc_secded72)
{
	Suite *s = suite_create("ecc_secded72");
	TCase *tc = tcase_create("secded72");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_secded_hsiao);
	tcase_add_test(tc, test_secded_column_lookup);
	tcase_add_test(tc, test_secded_word_correct);
	tcase_add_test(tc, test_secded_single_all);
	tcase_add_test(tc, test_secded_double_all);
	suite_add_tcase(s, tc);
	return s;
}

/* ---- Bulk API ------------------------------------------------------------ */

START_TEST(test_bulk_codec_info)
{
	static const unsigned int corrects[] = { 1, 1, 3, 1 };
	static const unsigned int detects[] = { 1, 2, 4, 2 };
	const struct kvmem_codec_info *ci;
	int c;

	for (c = 0; c < KVMEM_CODEC_NR; c++) {
		ci = kvmem_codec_get(c);
		ck_assert_ptr_nonnull(ci);
		ck_assert_str_eq(ci->name, ref_codecs[c].name);
		ck_assert_uint_eq(ci->data_bits, ref_codecs[c].k);
		ck_assert_uint_eq(ci->code_bits, ref_codecs[c].n);
		ck_assert_uint_eq(ci->word_bytes, ref_codecs[c].wb);
		ck_assert_uint_eq(ci->corrects, corrects[c]);
		ck_assert_uint_eq(ci->detects, detects[c]);
		ck_assert_int_eq(kvmem_codec_by_name(ref_codecs[c].name), c);
		ck_assert_uint_eq(kvmem_ecc_data_bytes(c, 0), 0);
		ck_assert_uint_eq(kvmem_ecc_data_bytes(c, 1),
				  (ref_codecs[c].k + 7) / 8);
		ck_assert_uint_eq(kvmem_ecc_data_bytes(c, 100003),
				  (100003 * ref_codecs[c].k + 7) / 8);
		ck_assert_uint_eq(kvmem_ecc_code_bytes(c, 100003),
				  100003 * ref_codecs[c].wb);
	}
	ck_assert_uint_eq(kvmem_ecc_data_bytes(KVMEM_CODEC_H84, 3), 2);
	ck_assert_uint_eq(kvmem_ecc_data_bytes(KVMEM_CODEC_GOLAY24, 3), 5);
	ck_assert_uint_eq(kvmem_ecc_data_bytes(KVMEM_CODEC_GOLAY24, 4), 6);
	ck_assert_uint_eq(kvmem_ecc_code_bytes(KVMEM_CODEC_GOLAY24, 3), 9);
	ck_assert_uint_eq(kvmem_ecc_data_bytes(KVMEM_CODEC_SECDED72, 3), 24);
	ck_assert_uint_eq(kvmem_ecc_code_bytes(KVMEM_CODEC_SECDED72, 3), 27);
	ck_assert_ptr_null(kvmem_codec_get(-1));
	ck_assert_ptr_null(kvmem_codec_get(KVMEM_CODEC_NR));
	ck_assert_uint_eq(kvmem_ecc_data_bytes(-1, 10), 0);
	ck_assert_uint_eq(kvmem_ecc_data_bytes(KVMEM_CODEC_NR, 10), 0);
	ck_assert_uint_eq(kvmem_ecc_code_bytes(-1, 10), 0);
	ck_assert_uint_eq(kvmem_ecc_code_bytes(KVMEM_CODEC_NR, 10), 0);
	ck_assert_int_eq(kvmem_codec_by_name("H74"), -EINVAL);
	ck_assert_int_eq(kvmem_codec_by_name("golay"), -EINVAL);
	ck_assert_int_eq(kvmem_codec_by_name("h84 "), -EINVAL);
	ck_assert_int_eq(kvmem_codec_by_name(""), -EINVAL);
	ck_assert_int_eq(kvmem_codec_by_name(NULL), -EINVAL);
}
END_TEST

START_TEST(test_bulk_einval)
{
	static const int bad[] = { -1, KVMEM_CODEC_NR, 100 };
	uint8_t data[16] = { 0 }, code[32] = { 0 };
	struct kvmem_ecc_counts c;
	size_t pos;
	unsigned int i;
	int codec;

	for (i = 0; i < KVMEM_ARRAY_SIZE(bad); i++) {
		ck_assert_int_eq(kvmem_ecc_encode(bad[i], data, code, 1),
				 -EINVAL);
		ck_assert_int_eq(
			kvmem_ecc_decode(bad[i], code, data, 1, &c, NULL, NULL),
			-EINVAL);
		ck_assert_int_eq(kvmem_ecc_scrub(bad[i], code, 1, &c, NULL, 0),
				 -EINVAL);
	}
	for (codec = 0; codec < KVMEM_CODEC_NR; codec++) {
		ck_assert_int_eq(kvmem_ecc_encode(codec, NULL, code, 1),
				 -EINVAL);
		ck_assert_int_eq(kvmem_ecc_encode(codec, data, NULL, 1),
				 -EINVAL);
		ck_assert_int_eq(
			kvmem_ecc_decode(codec, NULL, data, 1, &c, NULL, NULL),
			-EINVAL);
		ck_assert_int_eq(
			kvmem_ecc_decode(codec, code, NULL, 1, &c, NULL, NULL),
			-EINVAL);
		ck_assert_int_eq(kvmem_ecc_scrub(codec, NULL, 1, &c, &pos, 1),
				 -EINVAL);
	}
}
END_TEST

static const size_t sizes[] = { 0, 1, 2, 3, 7, 63, 64, 65, 1000, 4097, 100003 };

#define CANARY 16

/* Encode, decode and scrub clean buffers of every size on every path. */
START_TEST(test_bulk_roundtrip)
{
	int lv[KVMEM__SIMD_NR], codec = _i;
	unsigned int nlv = simd_levels(lv), li, si;
	struct kvmem_rng r;

	refs_init();
	kvmem_rng_seed(&r, 0x7700 + (uint64_t)codec);
	for (si = 0; si < KVMEM_ARRAY_SIZE(sizes); si++) {
		size_t n = sizes[si], db = ref_data_bytes(codec, n),
		       cb = n * ref_codecs[codec].wb, w;
		uint8_t *data = kvmem_check_xmalloc(db),
			*exp = kvmem_check_xmalloc(db);
		uint8_t *ref = kvmem_check_xmalloc(cb),
			*code = kvmem_check_xmalloc(cb + CANARY);
		uint8_t *out = kvmem_check_xmalloc(db + CANARY),
			*status = kvmem_check_xmalloc(n);
		uint64_t *eras = kvmem_check_xmalloc((n + 63) / 64 * 8);
		uint8_t canary[CANARY];
		struct kvmem_ecc_counts c;

		memset(canary, 0xc5, sizeof(canary));
		ck_assert_uint_eq(kvmem_ecc_data_bytes(codec, n), db);
		ck_assert_uint_eq(kvmem_ecc_code_bytes(codec, n), cb);
		/* Random spare bits too: encode must ignore them. */
		kvmem_check_fill_random(&r, data, db);
		memcpy(exp, data, db);
		clear_spare(codec, exp, n);
		ref_encode(codec, data, ref, n);
		for (li = 0; li < nlv; li++) {
			force_level(lv[li]);
			memset(code, 0x3c, cb);
			memcpy(code + cb, canary, CANARY);
			ck_assert_int_eq(kvmem_ecc_encode(codec, data, code, n),
					 0);
			EXPECT_MEM(code, ref, cb, "%s n %zu path %s",
				   ref_codecs[codec].name, n, kvmem_ecc_impl());
			EXPECT_MEM(code + cb, canary, CANARY,
				   "%s n %zu path %s: encode overran",
				   ref_codecs[codec].name, n, kvmem_ecc_impl());

			memset(out, 0x5a, db);
			memcpy(out + db, canary, CANARY);
			memset(status, 0x77, n);
			memset(eras, 0xff, (n + 63) / 64 * 8);
			memset(&c, 0xff, sizeof(c));
			ck_assert_int_eq(kvmem_ecc_decode(codec, code, out, n,
							  &c, status, eras),
					 0);
			EXPECT_MEM(out, exp, db, "%s n %zu path %s",
				   ref_codecs[codec].name, n, kvmem_ecc_impl());
			EXPECT_MEM(out + db, canary, CANARY,
				   "%s n %zu path %s: decode overran",
				   ref_codecs[codec].name, n, kvmem_ecc_impl());
			ck_assert_uint_eq(c.clean, n);
			ck_assert_uint_eq(c.corrected, 0);
			ck_assert_uint_eq(c.uncorrectable, 0);
			ck_assert_uint_eq(c.bits_corrected, 0);
			for (w = 0; w < n; w++)
				EXPECT_EQ(status[w], KVMEM_ECC_CLEAN,
					  "%s n %zu word %zu",
					  ref_codecs[codec].name, n, w);
			for (w = 0; w < (n + 63) / 64; w++)
				EXPECT_EQ(eras[w], 0, "%s n %zu eras %zu",
					  ref_codecs[codec].name, n, w);

			memset(&c, 0xff, sizeof(c));
			ck_assert_int_eq(
				kvmem_ecc_scrub(codec, code, n, &c, NULL, 0),
				0);
			ck_assert_uint_eq(c.clean, n);
			ck_assert_uint_eq(c.corrected + c.uncorrectable, 0);
			EXPECT_MEM(code, ref, cb, "%s n %zu path %s scrub",
				   ref_codecs[codec].name, n, kvmem_ecc_impl());
		}
		free(data);
		free(exp);
		free(ref);
		free(code);
		free(out);
		free(status);
		free(eras);
	}
}
END_TEST

/* The bitstream layout of ecc.h, spelled out with literal values. */
START_TEST(test_bulk_stream_layout)
{
	const uint8_t v[7] = { 0x3, 0xc, 0x7, 0x0, 0xf, 0x9, 0x5 };
	uint8_t data[8], code[16], out[8];
	uint64_t d;
	unsigned int i;
	int codec;

	refs_init();
	/* INT4 values two per byte map one per word, low nibble first. */
	for (i = 0; i < 4; i++)
		data[i] = (uint8_t)(v[2 * i] |
				    (i < 3 ? v[2 * i + 1] << 4 : 0xb0));
	for (codec = KVMEM_CODEC_H74; codec <= KVMEM_CODEC_H84; codec++) {
		ck_assert_int_eq(kvmem_ecc_encode(codec, data, code, 7), 0);
		for (i = 0; i < 7; i++) {
			ck_assert_uint_eq(code[i] & 0xf, v[i]);
			/* h74 leaves bit 7 of the stored byte clear. */
			if (codec == KVMEM_CODEC_H74)
				ck_assert_uint_eq(code[i] >> 7, 0);
			ck_assert_uint_eq(code[i], codec == KVMEM_CODEC_H74
							   ? ref_h74(v[i])
							   : ref_h84(v[i]));
		}
		/* Seven words: the last byte's high nibble is spare. */
		memset(out, 0xff, sizeof(out));
		ck_assert_int_eq(
			kvmem_ecc_decode(codec, code, out, 7, NULL, NULL, NULL),
			0);
		ck_assert_uint_eq(out[0], 0xc3);
		ck_assert_uint_eq(out[1], 0x07);
		ck_assert_uint_eq(out[2], 0x9f);
		ck_assert_uint_eq(out[3], 0x05);
		ck_assert_uint_eq(out[4], 0xff);
	}
	/* secded72: eight bytes, little-endian, then the check byte. */
	d = 0x0123456789abcdefull;
	ref_put_le(data, 8, d);
	ck_assert_int_eq(kvmem_ecc_encode(KVMEM_CODEC_SECDED72, data, code, 1),
			 0);
	for (i = 0; i < 8; i++)
		ck_assert_uint_eq(code[i], data[i]);
	ck_assert_uint_eq(code[8], ref_secded_check(d));
}
END_TEST

/*
 * A buffer with known errors: clean words, corrected ones and (for codecs
 * that detect) uncorrectable ones, placed at chunk boundaries, at the tail
 * and at random. Everything expected is worked out here.
 */
struct mixed {
	int codec;
	size_t n, db, cb;
	uint8_t *data; /* the bitstream encoded */
	uint8_t *clean; /* its reference encoding */
	uint8_t *recv; /* clean with the errors */
	uint8_t *exp_data; /* what decode must write */
	uint8_t *exp_st; /* per-word status */
	size_t *ue; /* uncorrectable word indices, increasing */
	size_t nue, ncorr;
	uint64_t bits;
};

/* A pattern of weight 1..t (corrected) or of the codec's UE weight. */
static unsigned int make_pattern(int codec, struct kvmem_rng *r, int ue,
				 uint8_t *e)
{
	const struct ref_codec *l = &ref_codecs[codec];
	unsigned int wt, i, b;

	memset(e, 0, MAX_WB);
	if (codec == KVMEM_CODEC_H74) {
		/* One code bit, bit 7, or both. */
		switch (kvmem_rng_below(r, 3)) {
		case 0:
			flip_bit(e, (unsigned int)kvmem_rng_below(r, 7));
			return 1;
		case 1:
			flip_bit(e, 7);
			return 1;
		default:
			flip_bit(e, 7);
			flip_bit(e, (unsigned int)kvmem_rng_below(r, 7));
			return 2;
		}
	}
	wt = ue ? l->ue : 1 + (unsigned int)kvmem_rng_below(r, l->t);
	for (i = 0; i < wt;) {
		b = (unsigned int)kvmem_rng_below(r, l->n);
		if (e[b / 8] >> (b % 8) & 1)
			continue;
		flip_bit(e, b);
		i++;
	}
	return wt;
}

static void mixed_build(struct mixed *m, int codec, size_t n, uint64_t seed,
			size_t nrandom)
{
	const struct ref_codec *l = &ref_codecs[codec];
	/* Boundaries of the SIMD blocks (8, 32, 64 and 128 words) and of
	 * decode's 2048-word chunks: an error on each side of each. */
	const size_t bounds[] = { 0, 8, 32, 64, 128, 2048, 4096, 6144 };
	const size_t nedges = 3 * KVMEM_ARRAY_SIZE(bounds);
	struct kvmem_rng r;
	uint8_t e[MAX_WB];
	size_t i, w;
	unsigned int b, wt;
	int ue;

	memset(m, 0, sizeof(*m));
	m->codec = codec;
	m->n = n;
	m->db = ref_data_bytes(codec, n);
	m->cb = n * l->wb;
	m->data = kvmem_check_xmalloc(m->db);
	m->clean = kvmem_check_xmalloc(m->cb);
	m->recv = kvmem_check_xmalloc(m->cb);
	m->exp_data = kvmem_check_xmalloc(m->db);
	m->exp_st = kvmem_check_xmalloc(n);
	m->ue = kvmem_check_xmalloc(n * sizeof(*m->ue));
	kvmem_rng_seed(&r, seed);
	kvmem_check_fill_random(&r, m->data, m->db);
	ref_encode(codec, m->data, m->clean, n);
	memcpy(m->recv, m->clean, m->cb);
	memcpy(m->exp_data, m->data, m->db);
	clear_spare(codec, m->exp_data, n);
	memset(m->exp_st, KVMEM_ECC_CLEAN, n);
	/* Word indices past the end (or below 0, wrapped) are skipped. */
	for (i = 0; i < nedges + 6 + nrandom; i++) {
		if (i < nedges)
			w = bounds[i / 3] + i % 3 - 1;
		else if (i < nedges + 6)
			w = n - 1 - (i - nedges);
		else
			w = (size_t)kvmem_rng_below(&r, n ? n : 1);
		if (w >= n || m->exp_st[w] != KVMEM_ECC_CLEAN)
			continue;
		ue = l->ue && kvmem_rng_below(&r, 3) == 0;
		wt = make_pattern(codec, &r, ue, e);
		for (b = 0; b < l->wb; b++)
			m->recv[w * l->wb + b] ^= e[b];
		if (ue) {
			m->exp_st[w] = KVMEM_ECC_UNCORRECTABLE;
			/* Systematic codes: the data bits as received. */
			ref_put_bits(
				m->exp_data, w * l->k, l->k,
				ref_get_bits(m->recv + w * l->wb, 0, l->k));
		} else {
			m->exp_st[w] = KVMEM_ECC_CORRECTED;
			m->bits += wt;
		}
	}
	for (w = 0; w < n; w++) {
		if (m->exp_st[w] == KVMEM_ECC_UNCORRECTABLE)
			m->ue[m->nue++] = w;
		else if (m->exp_st[w] == KVMEM_ECC_CORRECTED)
			m->ncorr++;
	}
}

static void mixed_free(struct mixed *m)
{
	free(m->data);
	free(m->clean);
	free(m->recv);
	free(m->exp_data);
	free(m->exp_st);
	free(m->ue);
}

/* What a scrub must leave: corrected words clean, the rest as received. */
static void mixed_scrubbed(const struct mixed *m, uint8_t *out)
{
	unsigned int wb = ref_codecs[m->codec].wb;
	size_t w;

	for (w = 0; w < m->n; w++)
		memcpy(out + w * wb,
		       (m->exp_st[w] == KVMEM_ECC_UNCORRECTABLE ? m->recv
								: m->clean) +
			       w * wb,
		       wb);
}

static const size_t mixed_sizes[] = {
	1, 2, 3, 65, 2047, 2048, 2049, 6145, 10007
};

START_TEST(test_bulk_decode_outputs)
{
	int lv[KVMEM__SIMD_NR], codec = _i;
	unsigned int nlv = simd_levels(lv), li, si;

	refs_init();
	for (si = 0; si < KVMEM_ARRAY_SIZE(mixed_sizes); si++) {
		struct mixed m;
		size_t n = mixed_sizes[si], ne = (n + 63) / 64, w;
		uint8_t *out, *status;
		uint64_t *eras;

		mixed_build(&m, codec, n, 0xdec0de + n, n / 40);
		out = kvmem_check_xmalloc(m.db);
		status = kvmem_check_xmalloc(n);
		eras = kvmem_check_xmalloc(ne * 8);
		for (li = 0; li < nlv; li++) {
			struct kvmem_ecc_counts c;
			int ret;

			force_level(lv[li]);
			memset(out, 0x5a, m.db);
			memset(status, 0x77, n);
			memset(eras, 0xa5, ne * 8);
			memset(&c, 0xff, sizeof(c));
			ret = kvmem_ecc_decode(codec, m.recv, out, n, &c,
					       status, eras);
			EXPECT_EQ(ret, m.nue ? -EBADMSG : 0, "%s n %zu path %s",
				  ref_codecs[codec].name, n, kvmem_ecc_impl());
			EXPECT_MEM(out, m.exp_data, m.db, "%s n %zu path %s",
				   ref_codecs[codec].name, n, kvmem_ecc_impl());
			EXPECT_MEM(status, m.exp_st, n, "%s n %zu path %s",
				   ref_codecs[codec].name, n, kvmem_ecc_impl());
			/* Bit w % 64 of word w / 64; bits past n stay 0. */
			for (w = 0; w < ne * 64; w++) {
				int ue = w < n &&
					 m.exp_st[w] == KVMEM_ECC_UNCORRECTABLE;

				EXPECT_EQ(eras[w / 64] >> (w % 64) & 1, ue,
					  "%s n %zu path %s erasure bit %zu",
					  ref_codecs[codec].name, n,
					  kvmem_ecc_impl(), w);
			}
			EXPECT_EQ(c.uncorrectable, m.nue, "%s n %zu",
				  ref_codecs[codec].name, n);
			EXPECT_EQ(c.corrected, m.ncorr, "%s n %zu",
				  ref_codecs[codec].name, n);
			EXPECT_EQ(c.bits_corrected, m.bits, "%s n %zu",
				  ref_codecs[codec].name, n);
			EXPECT_EQ(c.clean + c.corrected + c.uncorrectable, n,
				  "%s n %zu", ref_codecs[codec].name, n);

			/* Every output is optional. */
			memset(out, 0x5a, m.db);
			ret = kvmem_ecc_decode(codec, m.recv, out, n, NULL,
					       NULL, NULL);
			EXPECT_EQ(ret, m.nue ? -EBADMSG : 0, "%s n %zu",
				  ref_codecs[codec].name, n);
			EXPECT_MEM(out, m.exp_data, m.db, "%s n %zu no outputs",
				   ref_codecs[codec].name, n);
		}
		mixed_free(&m);
		free(out);
		free(status);
		free(eras);
	}
}
END_TEST

START_TEST(test_bulk_scrub)
{
	int lv[KVMEM__SIMD_NR], codec = _i;
	unsigned int nlv = simd_levels(lv), li, si;

	refs_init();
	for (si = 0; si < KVMEM_ARRAY_SIZE(mixed_sizes); si++) {
		struct mixed m;
		size_t n = mixed_sizes[si], i, cap;
		uint8_t *buf, *exp;
		size_t *pos;

		mixed_build(&m, codec, n, 0x5c2b + n, n / 40);
		buf = kvmem_check_xmalloc(m.cb);
		exp = kvmem_check_xmalloc(m.cb);
		pos = kvmem_check_xmalloc((m.nue + 4) * sizeof(*pos));
		mixed_scrubbed(&m, exp);
		for (li = 0; li < nlv; li++) {
			struct kvmem_ecc_counts c;
			int ret;

			force_level(lv[li]);
			/* A cap below the number found: the first cap listed,
			 * all of them counted, nothing written past the cap. */
			cap = m.nue / 2;
			memcpy(buf, m.recv, m.cb);
			for (i = 0; i < m.nue + 4; i++)
				pos[i] = (size_t)-7;
			memset(&c, 0xff, sizeof(c));
			ret = kvmem_ecc_scrub(codec, buf, n, &c, pos, cap);
			EXPECT_EQ(ret, m.nue ? -EBADMSG : 0, "%s n %zu path %s",
				  ref_codecs[codec].name, n, kvmem_ecc_impl());
			EXPECT_MEM(buf, exp, m.cb, "%s n %zu path %s",
				   ref_codecs[codec].name, n, kvmem_ecc_impl());
			EXPECT_EQ(c.uncorrectable, m.nue, "%s n %zu",
				  ref_codecs[codec].name, n);
			EXPECT_EQ(c.corrected, m.ncorr, "%s n %zu",
				  ref_codecs[codec].name, n);
			EXPECT_EQ(c.bits_corrected, m.bits, "%s n %zu",
				  ref_codecs[codec].name, n);
			EXPECT_EQ(c.clean, n - m.nue - m.ncorr, "%s n %zu",
				  ref_codecs[codec].name, n);
			for (i = 0; i < m.nue + 4; i++)
				EXPECT_EQ(pos[i],
					  i < cap ? m.ue[i] : (size_t)-7,
					  "%s n %zu ue_pos[%zu] cap %zu",
					  ref_codecs[codec].name, n, i, cap);

			/* Again: nothing left to correct, the same words
			 * uncorrectable, all of them listed this time. */
			for (i = 0; i < m.nue + 4; i++)
				pos[i] = (size_t)-7;
			ret = kvmem_ecc_scrub(codec, buf, n, &c, pos,
					      m.nue + 4);
			EXPECT_EQ(ret, m.nue ? -EBADMSG : 0, "%s n %zu again",
				  ref_codecs[codec].name, n);
			EXPECT_MEM(buf, exp, m.cb, "%s n %zu again",
				   ref_codecs[codec].name, n);
			EXPECT_EQ(c.corrected, 0, "%s n %zu again",
				  ref_codecs[codec].name, n);
			EXPECT_EQ(c.bits_corrected, 0, "%s n %zu again",
				  ref_codecs[codec].name, n);
			EXPECT_EQ(c.uncorrectable, m.nue, "%s n %zu again",
				  ref_codecs[codec].name, n);
			EXPECT_EQ(c.clean, n - m.nue, "%s n %zu again",
				  ref_codecs[codec].name, n);
			for (i = 0; i < m.nue + 4; i++)
				EXPECT_EQ(pos[i],
					  i < m.nue ? m.ue[i] : (size_t)-7,
					  "%s n %zu again ue_pos[%zu]",
					  ref_codecs[codec].name, n, i);

			/* No position array, no counts: still scrubs. */
			memcpy(buf, m.recv, m.cb);
			ret = kvmem_ecc_scrub(codec, buf, n, NULL, NULL, 5);
			EXPECT_EQ(ret, m.nue ? -EBADMSG : 0, "%s n %zu bare",
				  ref_codecs[codec].name, n);
			EXPECT_MEM(buf, exp, m.cb, "%s n %zu bare",
				   ref_codecs[codec].name, n);
		}
		mixed_free(&m);
		free(buf);
		free(exp);
		free(pos);
	}
}
END_TEST

KVMEM_SUITE(ecc_bulk)
{
	Suite *s = suite_create("ecc_bulk");
	TCase *tc = tcase_create("bulk");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_bulk_codec_info);
	tcase_add_test(tc, test_bulk_einval);
	tcase_add_loop_test(tc, test_bulk_roundtrip, 0, KVMEM_CODEC_NR);
	tcase_add_test(tc, test_bulk_stream_layout);
	tcase_add_loop_test(tc, test_bulk_decode_outputs, 0, KVMEM_CODEC_NR);
	tcase_add_loop_test(tc, test_bulk_scrub, 0, KVMEM_CODEC_NR);
	suite_add_tcase(s, tc);
	return s;
}

/* ---- Every SIMD level against portable ----------------------------------- */

/* Results of one path over one mixed buffer. */
struct run {
	uint8_t *code, *out, *status, *scrubbed;
	uint64_t *eras;
	size_t *ue;
	struct kvmem_ecc_counts dc, sc;
	int dret, sret;
};

static void run_path(const struct mixed *m, int level, struct run *o)
{
	size_t n = m->n;

	force_level(level);
	o->code = kvmem_check_xmalloc(m->cb);
	o->out = kvmem_check_xmalloc(m->db);
	o->status = kvmem_check_xmalloc(n);
	o->scrubbed = kvmem_check_xmalloc(m->cb);
	o->eras = kvmem_check_xmalloc((n + 63) / 64 * 8);
	o->ue = kvmem_check_xmalloc((n + 1) * sizeof(*o->ue));
	ck_assert_int_eq(kvmem_ecc_encode(m->codec, m->data, o->code, n), 0);
	o->dret = kvmem_ecc_decode(m->codec, m->recv, o->out, n, &o->dc,
				   o->status, o->eras);
	memcpy(o->scrubbed, m->recv, m->cb);
	memset(o->ue, 0, (n + 1) * sizeof(*o->ue));
	o->sret =
		kvmem_ecc_scrub(m->codec, o->scrubbed, n, &o->sc, o->ue, n + 1);
}

static void run_free(struct run *o)
{
	free(o->code);
	free(o->out);
	free(o->status);
	free(o->scrubbed);
	free(o->eras);
	free(o->ue);
}

/* Every SIMD level the CPU has against portable, bit for bit. */
static void compare_paths(const struct mixed *m)
{
	const char *name = ref_codecs[m->codec].name;
	int lv[KVMEM__SIMD_NR];
	unsigned int nlv = simd_levels(lv), li;
	struct run p, a;
	size_t n = m->n;

	run_path(m, KVMEM__SIMD_PORTABLE, &p);
	for (li = 1; li < nlv; li++) {
		const char *path = kvmem__simd_name(lv[li]);

		run_path(m, lv[li], &a);
		EXPECT_MEM(a.code, p.code, m->cb, "%s n %zu %s encode", name, n,
			   path);
		EXPECT_EQ(a.dret, p.dret, "%s n %zu %s decode", name, n, path);
		EXPECT_MEM(a.out, p.out, m->db, "%s n %zu %s decode", name, n,
			   path);
		EXPECT_MEM(a.status, p.status, n, "%s n %zu %s decode", name, n,
			   path);
		EXPECT_MEM(a.eras, p.eras, (n + 63) / 64 * 8,
			   "%s n %zu %s decode", name, n, path);
		EXPECT_MEM(&a.dc, &p.dc, sizeof(a.dc), "%s n %zu %s decode",
			   name, n, path);
		EXPECT_EQ(a.sret, p.sret, "%s n %zu %s scrub", name, n, path);
		EXPECT_MEM(a.scrubbed, p.scrubbed, m->cb, "%s n %zu %s scrub",
			   name, n, path);
		EXPECT_MEM(&a.sc, &p.sc, sizeof(a.sc), "%s n %zu %s scrub",
			   name, n, path);
		EXPECT_MEM(a.ue, p.ue, (n + 1) * sizeof(*a.ue),
			   "%s n %zu %s scrub", name, n, path);
		run_free(&a);
	}
	/* And both are right, not merely equal. */
	EXPECT_MEM(p.code, m->clean, m->cb, "%s n %zu encode", name, n);
	EXPECT_MEM(p.out, m->exp_data, m->db, "%s n %zu decode", name, n);
	EXPECT_MEM(p.status, m->exp_st, n, "%s n %zu decode", name, n);
	EXPECT_EQ(p.dc.uncorrectable, m->nue, "%s n %zu", name, n);
	EXPECT_EQ(p.sc.corrected, m->ncorr, "%s n %zu", name, n);
	run_free(&p);
}

/*
 * Print a SKIP line for each SIMD level this CPU lacks, whose kernels @test
 * then does not compare with the portable ones; non-zero if it has any.
 */
static int simd_or_skip(const char *test)
{
	int level, any = 0;

	for (level = KVMEM__SIMD_PORTABLE + 1; level < KVMEM__SIMD_NR;
	     level++) {
		if (kvmem__simd_supported(level)) {
			any = 1;
			continue;
		}
		/* Check has no skip: say so loudly rather than pass in
		 * silence. */
		printf("SKIP: %s: this CPU has no %s; the %s kernels were not "
		       "compared with the portable ones\n",
		       test, kvmem__simd_name(level), kvmem__simd_name(level));
		fflush(stdout);
	}
	return any;
}

/*
 * Buffer sizes one below, at and one above: tiny, a secded72 group of 8
 * words and the AVX2 golay scan's 10-word minimum, the 64- and 128-word
 * blocks, a decode chunk, and two sizes that end in a ragged tail.
 */
static const size_t simd_bases[] = { 2, 9, 64, 128, 2048, 6211, 20011 };

START_TEST(test_simd_mixed)
{
	int codec = _i, saved = kvmem__simd_active();
	unsigned int si;

	if (!simd_or_skip("ecc_simd mixed"))
		return;
	refs_init();
	for (si = 0; si < 3 * KVMEM_ARRAY_SIZE(simd_bases); si++) {
		struct mixed m;
		size_t n = simd_bases[si / 3] + si % 3 - 1;

		/* Dense errors, then none at all. */
		mixed_build(&m, codec, n, 0x51d0 + n, n / 20);
		compare_paths(&m);
		memcpy(m.recv, m.clean, m.cb);
		memcpy(m.exp_data, m.data, m.db);
		clear_spare(codec, m.exp_data, n);
		memset(m.exp_st, KVMEM_ECC_CLEAN, n);
		m.nue = m.ncorr = 0;
		m.bits = 0;
		compare_paths(&m);
		mixed_free(&m);
	}
	force_level(saved);
}
END_TEST

/* One error, swept over every word of a buffer that spans several SIMD
 * blocks and ends in a ragged tail. */
START_TEST(test_simd_single_sweep)
{
	enum { N = 300 };
	int codec = _i, saved = kvmem__simd_active();
	struct kvmem_rng r;
	struct mixed m;
	uint8_t e[MAX_WB];
	unsigned int wb = ref_codecs[codec].wb, b, wt;
	size_t w;

	if (!simd_or_skip("ecc_simd single sweep"))
		return;
	refs_init();
	kvmem_rng_seed(&r, 0x5eed + (uint64_t)codec);
	mixed_build(&m, codec, N, 0x5eed, 0);
	for (w = 0; w < N; w++) {
		int ue = ref_codecs[codec].ue && (w & 1);

		memcpy(m.recv, m.clean, m.cb);
		memcpy(m.exp_data, m.data, m.db);
		clear_spare(codec, m.exp_data, N);
		memset(m.exp_st, KVMEM_ECC_CLEAN, N);
		wt = make_pattern(codec, &r, ue, e);
		for (b = 0; b < wb; b++)
			m.recv[w * wb + b] ^= e[b];
		m.nue = ue;
		m.ncorr = !ue;
		m.bits = ue ? 0 : wt;
		m.exp_st[w] =
			ue ? KVMEM_ECC_UNCORRECTABLE : KVMEM_ECC_CORRECTED;
		if (ue)
			ref_put_bits(m.exp_data, w * ref_codecs[codec].k,
				     ref_codecs[codec].k,
				     ref_get_bits(m.recv + w * wb, 0,
						  ref_codecs[codec].k));
		compare_paths(&m);
	}
	mixed_free(&m);
	force_level(saved);
}
END_TEST

/* The kernel @op of @codec at @level, with KERNEL()'s fallback (ecc.c). */
#define LEVEL_KERNEL(level, codec, op) \
	(simd_impls[level][codec].op                                 \
		 ?: simd_impls[(level) ? (level)-1 : 0][codec].op \
		 ?: kvmem__ecc_portable[codec].op)

static const struct kvmem__ecc_kernels *const simd_impls[KVMEM__SIMD_NR] = {
	[KVMEM__SIMD_PORTABLE] = kvmem__ecc_portable,
	[KVMEM__SIMD_AVX2] = kvmem__ecc_avx2,
	[KVMEM__SIMD_AVX512] = kvmem__ecc_avx512,
};

/*
 * The bulk kernels of each level called directly, against the portable
 * ones: every buffer size from 0 to past three 64-word blocks, then some
 * larger ones. The inputs end at a guard page, the outputs at a canary.
 * scan runs on random words, on clean ones and with one dirty word at every
 * position, and from every start word of the buffer, as decode restarts it
 * after a dirty word: unlike decode's results, which the per-word decoder
 * settles, it must flag exactly the words portable flags.
 */
START_TEST(test_simd_kernels)
{
	static const size_t big[] = { 255, 256, 257, 511, 512, 513, 1000 };
	const unsigned int wb = ref_codecs[_i].wb;
	int lv[KVMEM__SIMD_NR], codec = _i;
	unsigned int nlv = simd_levels(lv), li, si;
	struct kvmem_rng r;

	if (!simd_or_skip("ecc_simd kernels"))
		return;
	refs_init();
	kvmem_rng_seed(&r, 0x6e6e + (uint64_t)codec);
	for (si = 0; si < 200 + KVMEM_ARRAY_SIZE(big); si++) {
		size_t n = si < 200 ? si : big[si - 200], cb = n * wb;
		size_t db = ref_data_bytes(codec, n), w, s, e;
		struct kvmem_check_guarded gd, gc;
		uint8_t *data = kvmem_check_guard_alloc(&gd, db);
		uint8_t *code = kvmem_check_xmalloc(cb + 1);
		uint8_t *exp = kvmem_check_xmalloc(cb + CANARY);
		uint8_t *out = kvmem_check_xmalloc(cb + CANARY);
		uint8_t *pdata = kvmem_check_xmalloc(db + CANARY);
		uint8_t *odata = kvmem_check_xmalloc(db + CANARY);
		uint8_t *exact = kvmem_check_guard_alloc(&gc, cb);

		kvmem_check_fill_random(&r, data, db);
		kvmem__ecc_portable[codec].encode(data, code, n);
		memcpy(exact, code, cb);
		for (li = 1; li < nlv; li++) {
			int level = lv[li];
			const char *path = kvmem__simd_name(level);

			memset(exp, 0xc5, cb + CANARY);
			memset(out, 0xc5, cb + CANARY);
			kvmem__ecc_portable[codec].encode(data, exp, n);
			LEVEL_KERNEL(level, codec, encode)(data, out, n);
			EXPECT_MEM(out, exp, cb + CANARY, "%s n %zu %s encode",
				   ref_codecs[codec].name, n, path);

			/* Random words, mostly not codewords. */
			kvmem_check_fill_random(&r, exact, cb);
			memset(pdata, 0xa5, db + CANARY);
			memset(odata, 0xa5, db + CANARY);
			kvmem__ecc_portable[codec].extract(exact, pdata, n);
			LEVEL_KERNEL(level, codec, extract)(exact, odata, n);
			EXPECT_MEM(odata, pdata, db + CANARY,
				   "%s n %zu %s extract",
				   ref_codecs[codec].name, n, path);
			for (s = 0; s <= n; s++)
				EXPECT_EQ(LEVEL_KERNEL(level, codec, scan)(
						  exact + s * wb, n - s),
					  kvmem__ecc_portable[codec].scan(
						  exact + s * wb, n - s),
					  "%s n %zu %s scan random from %zu",
					  ref_codecs[codec].name, n, path, s);

			/* Clean, then one bit flipped in word w, at every
			 * w, scanned from the start and from every word up
			 * to it. */
			memcpy(exact, code, cb);
			EXPECT_EQ(LEVEL_KERNEL(level, codec, scan)(exact, n), n,
				  "%s n %zu %s scan clean",
				  ref_codecs[codec].name, n, path);
			for (w = 0; w < n; w++) {
				unsigned int bit =
					(unsigned int)kvmem_rng_below(
						&r, ref_codecs[codec].n);

				flip_bit(exact + w * wb, bit);
				for (s = 0; s <= w; s++) {
					e = LEVEL_KERNEL(level, codec, scan)(
						exact + s * wb, n - s);
					EXPECT_EQ(e, w - s,
						  "%s n %zu %s scan bit %u of "
						  "word %zu from %zu",
						  ref_codecs[codec].name, n,
						  path, bit, w, s);
				}
				flip_bit(exact + w * wb, bit);
			}
		}
		kvmem_check_guard_free(&gd);
		free(code);
		free(exp);
		free(out);
		free(pdata);
		free(odata);
		kvmem_check_guard_free(&gc);
	}
}
END_TEST

START_TEST(test_simd_impl_name)
{
	int saved = kvmem__simd_active(), level;

	ck_assert_int_eq(kvmem__simd_force(KVMEM__SIMD_PORTABLE), 0);
	ck_assert_str_eq(kvmem_ecc_impl(), "portable");
	ck_assert_int_ne(kvmem__simd_force(KVMEM__SIMD_NR), 0);
	ck_assert_int_ne(kvmem__simd_force(-1), 0);
	simd_or_skip("ecc_simd impl name");
	for (level = KVMEM__SIMD_AVX2; level < KVMEM__SIMD_NR; level++) {
		if (kvmem__simd_supported(level)) {
			ck_assert_int_eq(kvmem__simd_force(level), 0);
			ck_assert_str_eq(kvmem_ecc_impl(),
					 level == KVMEM__SIMD_AVX2 ? "avx2"
								   : "avx512");
		} else {
			ck_assert_int_eq(kvmem__simd_force(level), -EOPNOTSUPP);
		}
	}
	force_level(saved);
}
END_TEST

KVMEM_SUITE(ecc_simd)
{
	Suite *s = suite_create("ecc_simd");
	TCase *tc = tcase_create("simd_vs_portable");

	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_simd_mixed, 0, KVMEM_CODEC_NR);
	tcase_add_loop_test(tc, test_simd_single_sweep, 0, KVMEM_CODEC_NR);
	tcase_add_loop_test(tc, test_simd_kernels, 0, KVMEM_CODEC_NR);
	tcase_add_test(tc, test_simd_impl_name);
	suite_add_tcase(s, tc);
	return s;
}
