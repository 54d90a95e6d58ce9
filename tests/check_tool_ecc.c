/* SPDX-License-Identifier: MIT */
/*
 * check_tool_ecc.c - the kvmem-ecc command-line tool, run as a process
 *
 * Every test runs the built binary (kvmem_check_run()) with its stdin from
 * a file and its stdout and stderr captured, and checks the output against
 * values derived independently of libkvmem: the reference codecs of
 * ecc_ref.h, built from the paper's generator and parity-check matrices
 * typed in as 0/1 tables (Roy, eq. 16, 17, 22, 23, 31) and the secded72
 * column construction. The library's own masks and tables are never used.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ecc_ref.h"
#include "kvmem_check.h"

/* ---- checking a run ------------------------------------------------ */

#define assert_status(r, want)                                            \
	ck_assert_msg((r)->status == (want),                              \
		      "exit status %d, want %d; stderr: %s", (r)->status, \
		      (want), (r)->err)

#define assert_err_has(r, needle)                       \
	ck_assert_msg(strstr((r)->err, needle) != NULL, \
		      "stderr lacks \"%s\": %s", needle, (r)->err)

/* Compare line by line so a mismatch names its line, not 100 kB of text. */
static void assert_lines_eq(const char *got, const char *want)
{
	unsigned long line = 1;
	size_t g, w;

	for (;;) {
		g = strcspn(got, "\n");
		w = strcspn(want, "\n");
		ck_assert_msg(g == w && !memcmp(got, want, g) &&
				      got[g] == want[w],
			      "output line %lu: got '%.*s', want '%.*s'", line,
			      (int)(g > 80 ? 80 : g), got,
			      (int)(w > 80 ? 80 : w), want);
		if (!got[g])
			return;
		got += g + 1;
		want += w + 1;
		line++;
	}
}

/* ---- a growing string ---------------------------------------------- */

struct sbuf {
	char *p;
	size_t len, cap;
};

__attribute__((format(printf, 2, 3))) static void
sb_printf(struct sbuf *sb, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(sb->p ? sb->p + sb->len : NULL,
			      sb->p ? sb->cap - sb->len : 0, fmt, ap);
		va_end(ap);
		ck_assert_int_ge(n, 0);
		if (sb->p && (size_t)n < sb->cap - sb->len) {
			sb->len += (size_t)n;
			return;
		}
		sb->cap = (sb->cap + (size_t)n + 1) * 2;
		sb->p = realloc(sb->p, sb->cap);
		ck_assert_ptr_nonnull(sb->p);
		sb->p[sb->len] = '\0';
	}
}

static const char *sb_str(struct sbuf *sb)
{
	if (!sb->p)
		sb_printf(sb, "%s", "");
	return sb->p;
}

static void sb_free(struct sbuf *sb)
{
	free(sb->p);
	sb->p = NULL;
	sb->len = sb->cap = 0;
}

/* ---- reference decoders, on ecc_ref.h's codes ---------------------- */

/* The position whose column of H74 is @z, which must name one. */
static unsigned int h74_position(unsigned int z)
{
	int j = ref_h74_position(z);

	ck_assert_msg(j >= 0, "syndrome %u names no column", z);
	return (unsigned int)j;
}

enum { OK, CORR, UE };
static const char *const status_word[] = { "ok", "corrected", "uncorrectable" };

/*
 * h74 per DESIGN.md: bit 7 is outside the code, cleared and counted as a
 * correction; a non-zero syndrome flips the position it names.
 */
static void ref_h74_decode(unsigned int r, unsigned int *data, int *st)
{
	unsigned int z = ref_h74_syndrome(r & 0x7f);
	unsigned int c = r & 0x7f;

	*st = (r & 0x80) || z ? CORR : OK;
	if (z)
		c ^= 1u << h74_position(z);
	*data = c & 0xf;
}

/* h84 per the table after eq. 25 (syndrome z of eq. 24, parity p of 25). */
static void ref_h84_decode(unsigned int r, unsigned int *data, int *st)
{
	unsigned int z = ref_h74_syndrome(r & 0x7f);
	unsigned int p = (unsigned int)__builtin_parity(r & 0xff);

	*data = r & 0xf;
	if (!z && !p) {
		*st = OK;
	} else if (z && p) {
		*data = (r ^ 1u << h74_position(z)) & 0xf;
		*st = CORR;
	} else if (z) {
		*st = UE; /* double error: data as received */
	} else {
		*st = CORR; /* c7 itself flipped: data valid */
	}
}

/* ---- encode -------------------------------------------------------- */

static void check_encode_nibbles(const char *codec,
				 uint8_t (*ref)(unsigned int))
{
	struct sbuf in = { 0 }, want = { 0 };
	struct kvmem_run r;
	unsigned int d;

	for (d = 0; d < 16; d++) {
		sb_printf(&in, "%x\n", d);
		sb_printf(&want, "%02x\n", ref(d));
	}
	/* An odd count too: the last word fills half a data byte. */
	sb_printf(&in, "%x\n", 9u);
	sb_printf(&want, "%02x\n", ref(9));
	KVMEM_RUN(&r, "kvmem-ecc", sb_str(&in), "encode", "-c", codec);
	assert_status(&r, 0);
	assert_lines_eq(r.out, sb_str(&want));
	ck_assert_str_eq(r.err, "");
	kvmem_check_run_free(&r);
	sb_free(&in);
	sb_free(&want);
}

START_TEST(encode_h74_all16)
{
	check_encode_nibbles("h74", ref_h74);
}
END_TEST

START_TEST(encode_h84_all16)
{
	check_encode_nibbles("h84", ref_h84);
}
END_TEST

/* Roy Example 2: d = [0,1,0,0] = 0x2 -> c = [0,1,0,0,1,0,1] = 0x52. */
START_TEST(encode_h74_paper_example2)
{
	struct kvmem_run r;

	KVMEM_RUN(&r, "kvmem-ecc", "2\n", "encode", "-c", "h74");
	assert_status(&r, 0);
	ck_assert_str_eq(r.out, "52\n");
	kvmem_check_run_free(&r);
}
END_TEST

START_TEST(encode_golay24)
{
	static const uint32_t fixed[] = { 0x000, 0x001, 0x800, 0xfff, 0x123,
					  0xabc, 0x555, 0xaaa, 0x00f };
	struct sbuf in = { 0 }, want = { 0 };
	uint64_t seed = 24;
	struct kvmem_run r;
	unsigned int i;
	uint32_t d;

	/* Unit vectors: the codeword of e_i is row i of [I | B]. */
	for (i = 0; i < 12; i++) {
		sb_printf(&in, "%03x\n", 1u << i);
		sb_printf(&want, "%06" PRIx32 "\n", ref_golay(1u << i));
	}
	for (i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
		sb_printf(&in, "%03" PRIx32 " ", fixed[i]);
		sb_printf(&want, "%06" PRIx32 "\n", ref_golay(fixed[i]));
	}
	/* 12 + 9 + 40 = 61 words: odd, so the last ends mid data byte. */
	for (i = 0; i < 40; i++) {
		d = (uint32_t)ref_rnd(&seed) & 0xfff;
		sb_printf(&in, "%03" PRIX32 "%s", d, i % 5 == 4 ? "\n" : "\t");
		sb_printf(&want, "%06" PRIx32 "\n", ref_golay(d));
	}
	KVMEM_RUN(&r, "kvmem-ecc", sb_str(&in), "encode", "-c", "golay24");
	assert_status(&r, 0);
	assert_lines_eq(r.out, sb_str(&want));
	kvmem_check_run_free(&r);
	sb_free(&in);
	sb_free(&want);
}
END_TEST

START_TEST(encode_golay24_by_hand)
{
	struct kvmem_run r;

	/* Row 0 of eq. 31, p0..p11 = 1 1 0 1 1 1 0 0 0 1 0 1, is the
	 * parity of d = 0x001: p = 0b101000111011 = 0xa3b, c = 0xa3b001. */
	KVMEM_RUN(&r, "kvmem-ecc", "001 000\n", "encode", "-c", "golay24");
	assert_status(&r, 0);
	ck_assert_str_eq(r.out, "a3b001\n000000\n");
	kvmem_check_run_free(&r);
}
END_TEST

START_TEST(encode_secded72)
{
	static const uint64_t fixed[] = { 0,
					  1,
					  1ull << 63,
					  ~0ull,
					  0x0123456789abcdefull,
					  0xdeadbeefcafef00dull };
	struct sbuf in = { 0 }, want = { 0 };
	uint64_t seed = 72, d;
	struct kvmem_run r;
	unsigned int i;

	for (i = 0; i < 64 + 6 + 30; i++) {
		if (i < 64)
			d = 1ull << i;
		else if (i < 70)
			d = fixed[i - 64];
		else
			d = ref_rnd(&seed);
		sb_printf(&in, "%016" PRIx64 "\n", d);
		sb_printf(&want, "%02x%016" PRIx64 "\n", ref_secded_check(d),
			  d);
	}
	KVMEM_RUN(&r, "kvmem-ecc", sb_str(&in), "encode", "-c", "secded72");
	assert_status(&r, 0);
	assert_lines_eq(r.out, sb_str(&want));
	kvmem_check_run_free(&r);
	sb_free(&in);
	sb_free(&want);
}
END_TEST

/* Data bit 0's column is the first weight-3 byte, 0x07; bit 56's is 0x1f. */
START_TEST(encode_secded72_by_hand)
{
	struct kvmem_run r;

	KVMEM_RUN(&r, "kvmem-ecc",
		  "0000000000000001 0100000000000000 0000000000000000\n",
		  "encode", "-c", "secded72");
	assert_status(&r, 0);
	ck_assert_str_eq(r.out, "070000000000000001\n"
				"1f0100000000000000\n"
				"000000000000000000\n");
	kvmem_check_run_free(&r);
}
END_TEST

/* ---- decode -------------------------------------------------------- */

/* Every byte value through the decoder, expected from the reference. */
static void check_decode_all_bytes(const char *codec,
				   void (*ref)(unsigned int, unsigned int *,
					       int *))
{
	struct sbuf in = { 0 }, want = { 0 };
	unsigned long n[3] = { 0 };
	unsigned int v, d;
	char summary[128];
	struct kvmem_run r;
	int st;

	for (v = 0; v < 256; v++) {
		ref(v, &d, &st);
		n[st]++;
		sb_printf(&in, "%02x%c", v, v % 16 == 15 ? '\n' : ' ');
		sb_printf(&want, "%x %s\n", d, status_word[st]);
	}
	KVMEM_RUN(&r, "kvmem-ecc", sb_str(&in), "decode", "-c", codec);
	assert_status(&r, n[UE] ? 1 : 0);
	assert_lines_eq(r.out, sb_str(&want));
	snprintf(
		summary, sizeof(summary),
		"kvmem-ecc: 256 words: %lu ok, %lu corrected, %lu uncorrectable\n",
		n[OK], n[CORR], n[UE]);
	ck_assert_str_eq(r.err, summary);
	kvmem_check_run_free(&r);
	sb_free(&in);
	sb_free(&want);
}

START_TEST(decode_h74_all_bytes)
{
	check_decode_all_bytes("h74", ref_h74_decode);
}
END_TEST

START_TEST(decode_h84_all_bytes)
{
	check_decode_all_bytes("h84", ref_h84_decode);
}
END_TEST

/*
 * Roy Example 2: 0x52 with bit 3 flipped is 0x5a, syndrome [1 1 1] = column
 * 3, corrected back to data 2. Example 3: bits 0 and 1 flipped (0x51) give
 * the syndrome of column 2, which h74 flips: 0x55, data 5, a miscorrection
 * reported as "corrected". Bit 7 set on a clean word: cleared, corrected.
 */
START_TEST(decode_h74_paper_examples)
{
	struct kvmem_run r;

	KVMEM_RUN(&r, "kvmem-ecc", "52\n5a\n51\nd2\n", "decode", "-c", "h74");
	assert_status(&r, 0);
	ck_assert_str_eq(r.out,
			 "2 ok\n2 corrected\n5 corrected\n2 corrected\n");
	ck_assert_str_eq(
		r.err,
		"kvmem-ecc: 4 words: 1 ok, 3 corrected, 0 uncorrectable\n");
	kvmem_check_run_free(&r);
}
END_TEST

/*
 * h84: 0x52 | c7 (d0^d1^d2 = 1) = 0xd2. Bits 1 and 3 flipped: 0xd2 ^ 0x0a =
 * 0xd8, z != 0 and p = 0: uncorrectable, data as received = 8.
 */
START_TEST(decode_h84_double_uncorrectable)
{
	struct kvmem_run r;

	KVMEM_RUN(&r, "kvmem-ecc", "d2 d8 da\n", "decode", "-c", "h84");
	assert_status(&r, 1);
	ck_assert_str_eq(r.out, "2 ok\n8 uncorrectable\n2 corrected\n");
	ck_assert_str_eq(
		r.err,
		"kvmem-ecc: 3 words: 1 ok, 1 corrected, 1 uncorrectable\n");
	kvmem_check_run_free(&r);
}
END_TEST

static uint32_t random_error(uint64_t *seed, unsigned int n, unsigned int w)
{
	uint64_t e = 0;

	while ((unsigned int)__builtin_popcountll(e) < w)
		e |= 1ull << (ref_rnd(seed) % n);
	return (uint32_t)e;
}

START_TEST(decode_golay24)
{
	struct sbuf in = { 0 }, want = { 0 };
	unsigned long n[3] = { 0 };
	uint64_t seed = 2412;
	uint32_t d, c, e;
	unsigned int i, w;
	char summary[128];
	struct kvmem_run r;

	for (i = 0; i < 24 + 5 * 60; i++) {
		d = (uint32_t)ref_rnd(&seed) & 0xfff;
		c = ref_golay(d);
		if (i < 24) {
			w = 1;
			e = 1u << i; /* every single-bit position */
		} else {
			w = (i - 24) % 5; /* weight 0..4 */
			e = random_error(&seed, 24, w);
		}
		sb_printf(&in, "%06" PRIx32 "\n", c ^ e);
		if (w == 4) {
			/* d_min = 8: nothing within 3, so reported, and the
			 * data bits are printed as received. */
			sb_printf(&want, "%03" PRIx32 " uncorrectable\n",
				  (c ^ e) & 0xfff);
			n[UE]++;
		} else {
			sb_printf(&want, "%03" PRIx32 " %s\n", d,
				  w ? "corrected" : "ok");
			n[w ? CORR : OK]++;
		}
	}
	KVMEM_RUN(&r, "kvmem-ecc", sb_str(&in), "decode", "-c", "golay24");
	assert_status(&r, 1);
	assert_lines_eq(r.out, sb_str(&want));
	snprintf(
		summary, sizeof(summary),
		"kvmem-ecc: %u words: %lu ok, %lu corrected, %lu uncorrectable\n",
		i, n[OK], n[CORR], n[UE]);
	ck_assert_str_eq(r.err, summary);
	kvmem_check_run_free(&r);
	sb_free(&in);
	sb_free(&want);
}
END_TEST

/* Hand-derived from encode_golay24_by_hand: 0xa3b001 and error patterns. */
START_TEST(decode_golay24_by_hand)
{
	struct kvmem_run r;

	KVMEM_RUN(&r, "kvmem-ecc",
		  "a3b001\n" /* clean */
		  "a3b007\n" /* d1, d2 flipped */
		  "a3b00f\n" /* d1, d2, d3 flipped */
		  "a3e401\n" /* p0 (bit 12), p2 (bit 14), d10 flipped */
		  "23b00f\n" /* d1, d2, d3 and p11 flipped: weight 4 */
		  "a3b00e\n", /* d0..d3 flipped: weight 4 */
		  "decode", "-c", "golay24");
	assert_status(&r, 1);
	ck_assert_str_eq(r.out, "001 ok\n001 corrected\n001 corrected\n"
				"001 corrected\n00f uncorrectable\n"
				"00e uncorrectable\n");
	ck_assert_str_eq(r.err, "kvmem-ecc: 6 words: 1 ok, 3 corrected, "
				"2 uncorrectable\n");
	kvmem_check_run_free(&r);
}
END_TEST

START_TEST(decode_secded72)
{
	struct sbuf in = { 0 }, want = { 0 };
	uint64_t seed = 7272, d, e;
	unsigned int i, a, b;
	uint8_t chk, ce;
	struct kvmem_run r;

	for (i = 0; i < 72 + 72 + 60; i++) {
		d = ref_rnd(&seed);
		chk = ref_secded_check(d);
		e = 0;
		ce = 0;
		if (i < 72) {
			a = i; /* every single position, then clean words */
			if (a < 64)
				e = 1ull << a;
			else
				ce = (uint8_t)(1u << (a - 64));
		} else if (i >= 144) {
			a = (unsigned int)(ref_rnd(&seed) % 72);
			do
				b = (unsigned int)(ref_rnd(&seed) % 72);
			while (b == a);
			if (a < 64)
				e ^= 1ull << a;
			else
				ce ^= (uint8_t)(1u << (a - 64));
			if (b < 64)
				e ^= 1ull << b;
			else
				ce ^= (uint8_t)(1u << (b - 64));
		}
		sb_printf(&in, "%02x%016" PRIx64 "\n", chk ^ ce, d ^ e);
		if (i < 72)
			sb_printf(&want, "%016" PRIx64 " corrected\n", d);
		else if (i < 144)
			sb_printf(&want, "%016" PRIx64 " ok\n", d);
		else
			sb_printf(&want, "%016" PRIx64 " uncorrectable\n",
				  d ^ e);
	}
	KVMEM_RUN(&r, "kvmem-ecc", sb_str(&in), "decode", "-c", "secded72");
	assert_status(&r, 1);
	assert_lines_eq(r.out, sb_str(&want));
	assert_err_has(&r, "204 words: 72 ok, 72 corrected, 60 uncorrectable");
	kvmem_check_run_free(&r);
	sb_free(&in);
	sb_free(&want);
}
END_TEST

/*
 * Long inputs cross the library's internal chunks; every word's status
 * must still land on its own line.
 */
START_TEST(decode_long_input_status_per_word)
{
	struct sbuf in = { 0 }, want = { 0 };
	uint64_t seed = 5000;
	unsigned int i, v, d;
	struct kvmem_run r;
	int st;

	for (i = 0; i < 5001; i++) {
		v = (unsigned int)ref_rnd(&seed) & 0xff;
		/* Mostly clean words, as in real use. */
		if (ref_rnd(&seed) % 4)
			v = ref_h84(v & 0xf);
		ref_h84_decode(v, &d, &st);
		sb_printf(&in, "%02x\n", v);
		sb_printf(&want, "%x %s\n", d, status_word[st]);
	}
	KVMEM_RUN(&r, "kvmem-ecc", sb_str(&in), "decode", "-c", "h84");
	assert_status(&r, 1);
	assert_lines_eq(r.out, sb_str(&want));
	kvmem_check_run_free(&r);
	sb_free(&in);
	sb_free(&want);

	seed = 5001;
	for (i = 0; i < 4097; i++) {
		uint32_t gd = (uint32_t)ref_rnd(&seed) & 0xfff, e = 0, c;

		if (i % 97 == 3)
			e = random_error(&seed, 24, 4);
		else if (i % 13 == 1)
			e = random_error(&seed, 24, 2);
		c = ref_golay(gd) ^ e;
		sb_printf(&in, "%06" PRIx32 "\n", c);
		if (__builtin_popcount(e) == 4)
			sb_printf(&want, "%03" PRIx32 " uncorrectable\n",
				  c & 0xfff);
		else
			sb_printf(&want, "%03" PRIx32 " %s\n", gd,
				  e ? "corrected" : "ok");
	}
	KVMEM_RUN(&r, "kvmem-ecc", sb_str(&in), "decode", "-c", "golay24");
	assert_status(&r, 1);
	assert_lines_eq(r.out, sb_str(&want));
	kvmem_check_run_free(&r);
	sb_free(&in);
	sb_free(&want);
}
END_TEST

/*
 * 00, ff and b1 (= G84 row 0, data 1) are codewords; 80 is 00 with c7
 * flipped; 03 is 00 with two bits flipped.
 */
START_TEST(decode_summary_and_exit_status)
{
	struct kvmem_run r;

	KVMEM_RUN(&r, "kvmem-ecc", "00 ff b1 80 03\n", "decode", "-c", "h84");
	assert_status(&r, 1);
	ck_assert_str_eq(r.out,
			 "0 ok\nf ok\n1 ok\n0 corrected\n3 uncorrectable\n");
	ck_assert_str_eq(
		r.err,
		"kvmem-ecc: 5 words: 3 ok, 1 corrected, 1 uncorrectable\n");
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-ecc", "00 ff b1 80\n", "decode", "-c", "h84");
	assert_status(&r, 0);
	ck_assert_str_eq(
		r.err,
		"kvmem-ecc: 4 words: 3 ok, 1 corrected, 0 uncorrectable\n");
	kvmem_check_run_free(&r);
}
END_TEST

START_TEST(roundtrip_all_codecs)
{
	static const char *const codecs[] = { "h74", "h84", "golay24",
					      "secded72" };
	static const unsigned int digits[] = { 1, 1, 3, 16 };
	struct sbuf in = { 0 }, want = { 0 };
	uint64_t seed = 99, v;
	unsigned int c, i;
	struct kvmem_run enc, dec;

	for (c = 0; c < 4; c++) {
		for (i = 0; i < 101; i++) {
			v = ref_rnd(&seed);
			if (digits[c] < 16)
				v &= (1ull << (4 * digits[c])) - 1;
			sb_printf(&in, "%0*" PRIx64 "\n", (int)digits[c], v);
			sb_printf(&want, "%0*" PRIx64 " ok\n", (int)digits[c],
				  v);
		}
		KVMEM_RUN(&enc, "kvmem-ecc", sb_str(&in), "encode", "-c",
			  codecs[c]);
		assert_status(&enc, 0);
		KVMEM_RUN(&dec, "kvmem-ecc", enc.out, "decode", "-c",
			  codecs[c]);
		assert_status(&dec, 0);
		assert_lines_eq(dec.out, sb_str(&want));
		kvmem_check_run_free(&enc);
		kvmem_check_run_free(&dec);
		sb_free(&in);
		sb_free(&want);
	}
}
END_TEST

/* ---- input format and errors -------------------------------------- */

START_TEST(input_whitespace_comments_case)
{
	struct kvmem_run r;

	KVMEM_RUN(&r, "kvmem-ecc",
		  "  52\t5a\r\n"
		  "\n"
		  "# a comment line, 'zz' here is ignored\n"
		  "00 # trailing comment\n"
		  "7F#no space before the comment\n"
		  "\v\f  D2", /* no final newline */
		  "decode", "-c", "h74");
	assert_status(&r, 0);
	ck_assert_str_eq(r.out, "2 ok\n2 corrected\n0 ok\nf ok\n2 corrected\n");
	kvmem_check_run_free(&r);
}
END_TEST

START_TEST(error_bad_hex_names_line)
{
	struct kvmem_run r;

	KVMEM_RUN(&r, "kvmem-ecc", "52 5a\n00\nxz\n52\n", "decode", "-c",
		  "h74");
	assert_status(&r, 2);
	ck_assert_str_eq(r.out, "");
	ck_assert_str_eq(r.err, "kvmem-ecc: line 3: 'xz' is not hex\n");
	kvmem_check_run_free(&r);

	/* Comment-only lines still count. */
	KVMEM_RUN(&r, "kvmem-ecc", "# header\n1\n# more\n\n1 2 g\n", "encode",
		  "-c", "h84");
	assert_status(&r, 2);
	ck_assert_str_eq(r.out, "");
	assert_err_has(&r, "line 5: 'g' is not hex");
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-ecc", "0x52\n", "decode", "-c", "h84");
	assert_status(&r, 2);
	assert_err_has(&r, "line 1: '0x52' is not hex");
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-ecc", "-1\n", "encode", "-c", "h84");
	assert_status(&r, 2);
	assert_err_has(&r, "line 1: '-1' is not hex");
	kvmem_check_run_free(&r);

	/* Control bytes from the input are not echoed to the terminal. */
	KVMEM_RUN(&r, "kvmem-ecc", "5\033[31m\n", "encode", "-c", "h84");
	assert_status(&r, 2);
	assert_err_has(&r, "line 1: '5?[31m' is not hex");
	kvmem_check_run_free(&r);
}
END_TEST

START_TEST(error_wrong_width_names_line)
{
	struct kvmem_run r;

	KVMEM_RUN(&r, "kvmem-ecc", "52\n\n5\n", "decode", "-c", "h84");
	assert_status(&r, 2);
	ck_assert_str_eq(r.out, "");
	assert_err_has(&r, "kvmem-ecc: line 3: '5'");
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-ecc", "52\n", "encode", "-c", "h74");
	assert_status(&r, 2);
	assert_err_has(&r, "line 1: '52'");
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-ecc", "123 1234\n", "encode", "-c", "golay24");
	assert_status(&r, 2);
	assert_err_has(&r, "line 1: '1234'");
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-ecc", "a3b001\n0a3b001\n", "decode", "-c",
		  "golay24");
	assert_status(&r, 2);
	assert_err_has(&r, "line 2: '0a3b001'");
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-ecc", "000000000000000\n", "encode", "-c",
		  "secded72");
	assert_status(&r, 2);
	assert_err_has(&r, "line 1:");
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-ecc", "00000000000000000\n", "inject", "-c",
		  "secded72", "--ber", "0");
	assert_status(&r, 2);
	assert_err_has(&r, "line 1:");
	kvmem_check_run_free(&r);
}
END_TEST

START_TEST(error_long_token_is_elided)
{
	char tok[301];
	struct kvmem_run r;

	memset(tok, '7', 300);
	tok[300] = '\0';
	KVMEM_RUN(&r, "kvmem-ecc", tok, "decode", "-c", "h84");
	assert_status(&r, 2);
	assert_err_has(&r, "line 1: '777");
	assert_err_has(&r, "...'");
	ck_assert_uint_lt(strlen(r.err), 200);
	kvmem_check_run_free(&r);
}
END_TEST

START_TEST(error_unknown_codec)
{
	struct kvmem_run r;

	KVMEM_RUN(&r, "kvmem-ecc", "1\n", "encode", "-c", "h75");
	assert_status(&r, 2);
	ck_assert_str_eq(r.out, "");
	assert_err_has(&r, "unknown codec 'h75'");
	kvmem_check_run_free(&r);
}
END_TEST

START_TEST(error_missing_codec)
{
	static const char *const cmds[] = { "encode", "decode", "inject" };
	struct kvmem_run r;
	unsigned int i;

	for (i = 0; i < 3; i++) {
		KVMEM_RUN(&r, "kvmem-ecc", "00\n", cmds[i], "--ber", "0");
		assert_status(&r, 2);
		ck_assert_str_eq(r.out, "");
		assert_err_has(&r, "needs -c CODEC");
		kvmem_check_run_free(&r);
	}
}
END_TEST

START_TEST(empty_input)
{
	static const char *const inputs[] = { "", "\n\n", " \t\n# nothing\n" };
	struct kvmem_run r;
	unsigned int i;

	for (i = 0; i < 3; i++) {
		KVMEM_RUN(&r, "kvmem-ecc", inputs[i], "encode", "-c",
			  "golay24");
		assert_status(&r, 0);
		ck_assert_str_eq(r.out, "");
		kvmem_check_run_free(&r);

		KVMEM_RUN(&r, "kvmem-ecc", inputs[i], "decode", "-c",
			  "secded72");
		assert_status(&r, 0);
		ck_assert_str_eq(r.out, "");
		assert_err_has(&r,
			       "0 words: 0 ok, 0 corrected, 0 uncorrectable");
		kvmem_check_run_free(&r);

		KVMEM_RUN(&r, "kvmem-ecc", inputs[i], "inject", "-c", "h84",
			  "--ber", "0.5");
		assert_status(&r, 0);
		ck_assert_str_eq(r.out, "");
		kvmem_check_run_free(&r);
	}
}
END_TEST

/* ---- inject -------------------------------------------------------- */

static char *random_codewords(unsigned int n, uint64_t seed)
{
	struct sbuf in = { 0 };
	unsigned int i;

	for (i = 0; i < n; i++)
		sb_printf(&in, "%06" PRIx32 "\n",
			  ref_golay((uint32_t)ref_rnd(&seed) & 0xfff));
	return in.p;
}

/* Bits that differ between two outputs of 6-digit words, or -1. */
static long hamming_lines(const char *a, const char *b, unsigned long *words)
{
	unsigned long x, y;
	long bits = 0;
	int na, nb;

	*words = 0;
	for (;;) {
		if (!*a || !*b)
			return *a == *b ? bits : -1;
		if (sscanf(a, "%6lx%n", &x, &na) != 1 ||
		    sscanf(b, "%6lx%n", &y, &nb) != 1 || na != 6 || nb != 6 ||
		    a[6] != '\n' || b[6] != '\n')
			return -1;
		bits += __builtin_popcountl(x ^ y);
		*words += x != y;
		a += 7;
		b += 7;
	}
}

START_TEST(inject_deterministic)
{
	char *in = random_codewords(400, 7);
	unsigned long words, want_words, want_bits;
	struct kvmem_run r1, r2, r3;
	long bits;

	KVMEM_RUN(&r1, "kvmem-ecc", in, "inject", "-c", "golay24", "--ber",
		  "0.05", "--seed", "7");
	KVMEM_RUN(&r2, "kvmem-ecc", in, "inject", "-c", "golay24", "--seed",
		  "7", "--ber", "0.05");
	KVMEM_RUN(&r3, "kvmem-ecc", in, "inject", "-c", "golay24", "--ber",
		  "0.05", "--seed", "8");
	assert_status(&r1, 0);
	assert_status(&r2, 0);
	assert_status(&r3, 0);
	ck_assert_str_eq(r1.out, r2.out);
	ck_assert_str_eq(r1.err, r2.err);
	ck_assert_str_ne(r1.out, r3.out);

	/* The summary tells the truth about what changed. 9600 bits at
	 * 0.05: 480 expected, far from 0. */
	bits = hamming_lines(in, r1.out, &words);
	ck_assert_int_gt(bits, 300);
	ck_assert_int_lt(bits, 700);
	ck_assert_msg(
		sscanf(r1.err,
		       "kvmem-ecc: 400 words: %lu bits flipped, %lu words hit",
		       &want_bits, &want_words) == 2,
		"summary: %s", r1.err);
	ck_assert_uint_eq((unsigned long)bits, want_bits);
	ck_assert_uint_eq(words, want_words);
	kvmem_check_run_free(&r1);
	kvmem_check_run_free(&r2);
	kvmem_check_run_free(&r3);
	free(in);
}
END_TEST

/* The seed is applied to the input as one buffer, not line by line. */
START_TEST(inject_layout_independent)
{
	char *in = random_codewords(50, 3), *flat;
	struct kvmem_run r1, r2;
	size_t i;

	flat = strdup(in);
	ck_assert_ptr_nonnull(flat);
	for (i = 0; flat[i]; i++)
		if (flat[i] == '\n' && i % 3)
			flat[i] = ' ';
	KVMEM_RUN(&r1, "kvmem-ecc", in, "inject", "-c", "golay24", "--ber",
		  "0.2", "--seed", "11");
	KVMEM_RUN(&r2, "kvmem-ecc", flat, "inject", "-c", "golay24", "--ber",
		  "0.2", "--seed", "11");
	assert_status(&r1, 0);
	assert_status(&r2, 0);
	ck_assert_str_eq(r1.out, r2.out);
	kvmem_check_run_free(&r1);
	kvmem_check_run_free(&r2);
	free(flat);
	free(in);
}
END_TEST

START_TEST(inject_ber0_identity)
{
	char *in = random_codewords(64, 5);
	struct kvmem_run r;

	KVMEM_RUN(&r, "kvmem-ecc", in, "inject", "-c", "golay24", "--ber", "0",
		  "--seed", "1");
	assert_status(&r, 0);
	ck_assert_str_eq(r.out, in);
	ck_assert_str_eq(r.err,
			 "kvmem-ecc: 64 words: 0 bits flipped, 0 words hit\n");
	kvmem_check_run_free(&r);
	free(in);

	/* Input is echoed canonical: lowercase, one word a line. */
	KVMEM_RUN(&r, "kvmem-ecc", "00 FF 80\n7f", "inject", "-c", "h74",
		  "--ber", "0");
	assert_status(&r, 0);
	ck_assert_str_eq(r.out, "00\nff\n80\n7f\n");
	kvmem_check_run_free(&r);
}
END_TEST

/* At P = 1 every live bit flips: all 7 of h74 (bit 7 is not live). */
START_TEST(inject_ber1_flips_every_live_bit)
{
	struct kvmem_run r;

	KVMEM_RUN(&r, "kvmem-ecc", "00 ff 80 52\n", "inject", "-c", "h74",
		  "--ber", "1");
	assert_status(&r, 0);
	ck_assert_str_eq(r.out, "7f\n80\nff\n2d\n");
	ck_assert_str_eq(r.err, "kvmem-ecc: 4 words: 28 bits flipped, "
				"4 words hit (7+ flips: 4)\n");
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-ecc", "00 ff d2\n", "inject", "-c", "h84", "--ber",
		  "1");
	assert_status(&r, 0);
	ck_assert_str_eq(r.out, "ff\n00\n2d\n");
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-ecc", "000000 a3b001\n", "inject", "-c", "golay24",
		  "--ber", "1", "--seed", "123");
	assert_status(&r, 0);
	ck_assert_str_eq(r.out, "ffffff\n5c4ffe\n");
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-ecc", "070000000000000001\n", "inject", "-c",
		  "secded72", "--ber", "1.0");
	assert_status(&r, 0);
	ck_assert_str_eq(r.out, "f8fffffffffffffffe\n");
	ck_assert_str_eq(r.err, "kvmem-ecc: 1 word: 72 bits flipped, "
				"1 word hit (7+ flips: 1)\n");
	kvmem_check_run_free(&r);
}
END_TEST

START_TEST(inject_bad_ber)
{
	static const char *const bad[] = { "2",	  "-1",	 "abc",	 "",
					   "nan", "inf", "0.5x", "1.0000001" };
	struct kvmem_run r;
	unsigned int i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		KVMEM_RUN(&r, "kvmem-ecc", "00\n", "inject", "-c", "h84",
			  "--ber", bad[i]);
		assert_status(&r, 2);
		ck_assert_str_eq(r.out, "");
		assert_err_has(&r, "--ber");
		kvmem_check_run_free(&r);
	}
	KVMEM_RUN(&r, "kvmem-ecc", "00\n", "inject", "-c", "h84");
	assert_status(&r, 2);
	assert_err_has(&r, "--ber");
	kvmem_check_run_free(&r);

	/* The edges and exponent notation are fine. */
	KVMEM_RUN(&r, "kvmem-ecc", "00\n", "inject", "-c", "h84", "--ber",
		  "1e-3");
	assert_status(&r, 0);
	kvmem_check_run_free(&r);
}
END_TEST

START_TEST(inject_bad_seed)
{
	static const char *const bad[] = { "-1", "abc", "1x", "",
					   "18446744073709551616" };
	struct kvmem_run r;
	unsigned int i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		KVMEM_RUN(&r, "kvmem-ecc", "00\n", "inject", "-c", "h84",
			  "--ber", "0.1", "--seed", bad[i]);
		assert_status(&r, 2);
		assert_err_has(&r, "--seed");
		kvmem_check_run_free(&r);
	}
	KVMEM_RUN(&r, "kvmem-ecc", "00\n", "inject", "-c", "h84", "--ber",
		  "0.1", "--seed", "18446744073709551615");
	assert_status(&r, 0);
	kvmem_check_run_free(&r);
}
END_TEST

/* Omitting --seed means seed 1. */
START_TEST(inject_default_seed)
{
	char *in = random_codewords(100, 9);
	struct kvmem_run r1, r2;

	KVMEM_RUN(&r1, "kvmem-ecc", in, "inject", "-c", "golay24", "--ber",
		  "0.1");
	KVMEM_RUN(&r2, "kvmem-ecc", in, "inject", "-c", "golay24", "--ber",
		  "0.1", "--seed", "1");
	assert_status(&r1, 0);
	ck_assert_str_eq(r1.out, r2.out);
	kvmem_check_run_free(&r1);
	kvmem_check_run_free(&r2);
	free(in);
}
END_TEST

/*
 * The physical channels at P = 1, where what they do depends on no draw
 * but the bits they pick: a byte hit takes exactly K flips, a garbled or
 * stuck pattern is the same everywhere it applies.
 */
START_TEST(inject_channels)
{
	static const char *const bad[] = { "byte:9", "byte",  "line:0", "lines",
					   "column", "bsc:1", "" };
	struct kvmem_run r;
	unsigned int i;
	char *line, *save = NULL;

	KVMEM_RUN(&r, "kvmem-ecc", "00 00 ff 5a\n", "inject", "-c", "h84",
		  "--ber", "1", "--channel", "byte:2");
	assert_status(&r, 0);
	for (line = strtok_r(r.out, "\n", &save), i = 0; line;
	     line = strtok_r(NULL, "\n", &save), i++) {
		static const unsigned int in[] = { 0x00, 0x00, 0xff, 0x5a };

		ck_assert_uint_lt(i, 4);
		ck_assert_int_eq(
			__builtin_popcount(
				(unsigned int)strtoul(line, NULL, 16) ^ in[i]),
			2);
	}
	ck_assert_uint_eq(i, 4);
	ck_assert_str_eq(r.err, "kvmem-ecc: 4 words: 8 bits flipped, "
				"4 words hit (2 flips: 4)\n");
	kvmem_check_run_free(&r);

	/* h74: a byte has 7 live bits, so byte:8 flips those 7. */
	KVMEM_RUN(&r, "kvmem-ecc", "00 ff\n", "inject", "-c", "h74", "--ber",
		  "1", "--channel", "byte:8");
	assert_status(&r, 0);
	ck_assert_str_eq(r.out, "7f\n80\n");
	kvmem_check_run_free(&r);

	/* Rows of one byte, every column stuck: one value in every word. */
	KVMEM_RUN(&r, "kvmem-ecc", "00 ff 0f f0 3c\n", "inject", "-c", "h84",
		  "--ber", "1", "--channel", "column:1", "--seed", "5");
	assert_status(&r, 0);
	ck_assert_uint_eq(strlen(r.out), 15);
	for (i = 3; i < 15; i += 3)
		ck_assert_int_eq(memcmp(r.out, r.out + i, 3), 0);
	kvmem_check_run_free(&r);

	/* A golay24 word is 3 bytes: adjacent:3 puts one flip in each. */
	KVMEM_RUN(&r, "kvmem-ecc", "000000 000000\n", "inject", "-c", "golay24",
		  "--ber", "1", "--channel", "adjacent:3");
	assert_status(&r, 0);
	ck_assert_str_eq(r.err, "kvmem-ecc: 2 words: 6 bits flipped, "
				"2 words hit (3 flips: 2)\n");
	kvmem_check_run_free(&r);

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		KVMEM_RUN(&r, "kvmem-ecc", "00\n", "inject", "-c", "h84",
			  "--ber", "0.1", "--channel", bad[i]);
		assert_status(&r, 2);
		ck_assert_str_eq(r.out, "");
		assert_err_has(&r, "--channel");
		kvmem_check_run_free(&r);
	}
	KVMEM_RUN(&r, "kvmem-ecc", "0\n", "encode", "-c", "h84", "--channel",
		  "line");
	assert_status(&r, 2);
	assert_err_has(&r, "--channel only applies to inject");
	kvmem_check_run_free(&r);
}
END_TEST

/* ---- command line -------------------------------------------------- */

START_TEST(cli_help_and_version)
{
	static const char *const want[] = { "encode", "decode",	 "inject",
					    "--ber",  "--seed",	 "h74",
					    "h84",    "golay24", "secded72" };
	struct kvmem_run r;
	unsigned int i;
	const char *line;

	KVMEM_RUN(&r, "kvmem-ecc", "", "--help");
	assert_status(&r, 0);
	ck_assert_str_eq(r.err, "");
	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		ck_assert_msg(strstr(r.out, want[i]) != NULL, "--help lacks %s",
			      want[i]);
	line = strstr(r.out, "secded72");
	ck_assert_ptr_nonnull(line);
	ck_assert_msg(strstr(line, "16") && strstr(line, "18") &&
			      strstr(line, "16") < strchr(line, '\n'),
		      "--help lacks the secded72 widths");
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-ecc", "", "decode", "-h");
	assert_status(&r, 0);
	ck_assert_ptr_nonnull(strstr(r.out, "Usage"));
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-ecc", "", "--version");
	assert_status(&r, 0);
	ck_assert_str_eq(r.out, "kvmem-ecc 0.1.0\n");
	kvmem_check_run_free(&r);
}
END_TEST

START_TEST(cli_usage_errors)
{
	struct kvmem_run r;

	KVMEM_RUN(&r, "kvmem-ecc", "", "frobnicate", "-c", "h84");
	assert_status(&r, 2);
	ck_assert_str_eq(r.out, "");
	assert_err_has(&r, "unknown command 'frobnicate'");
	assert_err_has(&r, "Usage");
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-ecc", "", "encode", "-c", "h84", "--frob");
	assert_status(&r, 2);
	assert_err_has(&r, "--frob");
	assert_err_has(&r, "Usage");
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-ecc", "", "encode", "-c", "h84", "-z");
	assert_status(&r, 2);
	assert_err_has(&r, "-z");
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-ecc", "", "-c", "h84");
	assert_status(&r, 2);
	assert_err_has(&r, "no command");
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-ecc", "", "encode", "decode", "-c", "h84");
	assert_status(&r, 2);
	assert_err_has(&r, "'decode'");
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-ecc", "", "encode", "-c");
	assert_status(&r, 2);
	kvmem_check_run_free(&r);

	KVMEM_RUN(&r, "kvmem-ecc", "", "decode", "-c", "h84", "--seed", "3");
	assert_status(&r, 2);
	assert_err_has(&r, "only applies to inject");
	kvmem_check_run_free(&r);

	/* Options may come before the command, and "--codec=" works. */
	KVMEM_RUN(&r, "kvmem-ecc", "2\n", "--codec=h74", "encode");
	assert_status(&r, 0);
	ck_assert_str_eq(r.out, "52\n");
	kvmem_check_run_free(&r);
}
END_TEST

START_TEST(cli_write_error)
{
	struct kvmem_run r;

	if (access("/dev/full", W_OK)) {
		fprintf(stderr,
			"SKIP: cli_write_error: no writable /dev/full\n");
		return;
	}
	kvmem_check_run(&r, "kvmem-ecc", "0 1 2\n", "/dev/full",
			(const char *const[]){ "encode", "-c", "h84", NULL });
	assert_status(&r, 2);
	assert_err_has(&r, "kvmem-ecc: writing standard output");
	kvmem_check_run_free(&r);
}
END_TEST

KVMEM_SUITE(tool_ecc)
{
	Suite *s = suite_create("tool_ecc");
	TCase *tc;

	tc = tcase_create("encode");
	tcase_add_test(tc, encode_h74_all16);
	tcase_add_test(tc, encode_h84_all16);
	tcase_add_test(tc, encode_h74_paper_example2);
	tcase_add_test(tc, encode_golay24);
	tcase_add_test(tc, encode_golay24_by_hand);
	tcase_add_test(tc, encode_secded72);
	tcase_add_test(tc, encode_secded72_by_hand);
	suite_add_tcase(s, tc);

	tc = tcase_create("decode");
	tcase_add_test(tc, decode_h74_all_bytes);
	tcase_add_test(tc, decode_h84_all_bytes);
	tcase_add_test(tc, decode_h74_paper_examples);
	tcase_add_test(tc, decode_h84_double_uncorrectable);
	tcase_add_test(tc, decode_golay24);
	tcase_add_test(tc, decode_golay24_by_hand);
	tcase_add_test(tc, decode_secded72);
	tcase_add_test(tc, decode_long_input_status_per_word);
	tcase_add_test(tc, decode_summary_and_exit_status);
	tcase_add_test(tc, roundtrip_all_codecs);
	suite_add_tcase(s, tc);

	tc = tcase_create("input");
	tcase_add_test(tc, input_whitespace_comments_case);
	tcase_add_test(tc, error_bad_hex_names_line);
	tcase_add_test(tc, error_wrong_width_names_line);
	tcase_add_test(tc, error_long_token_is_elided);
	tcase_add_test(tc, error_unknown_codec);
	tcase_add_test(tc, error_missing_codec);
	tcase_add_test(tc, empty_input);
	suite_add_tcase(s, tc);

	tc = tcase_create("inject");
	tcase_add_test(tc, inject_deterministic);
	tcase_add_test(tc, inject_layout_independent);
	tcase_add_test(tc, inject_ber0_identity);
	tcase_add_test(tc, inject_ber1_flips_every_live_bit);
	tcase_add_test(tc, inject_bad_ber);
	tcase_add_test(tc, inject_bad_seed);
	tcase_add_test(tc, inject_default_seed);
	tcase_add_test(tc, inject_channels);
	suite_add_tcase(s, tc);

	tc = tcase_create("cli");
	tcase_add_test(tc, cli_help_and_version);
	tcase_add_test(tc, cli_usage_errors);
	tcase_add_test(tc, cli_write_error);
	suite_add_tcase(s, tc);

	return s;
}
