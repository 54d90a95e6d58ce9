/* SPDX-License-Identifier: MIT */
/*
 * check_nonfinite.c - values no encoder writes are erased, not returned
 *
 * Regression for kvmem-eval at BER 1e-2: a word past its code's reach (a
 * secded72 word with three flips, a golay24 word with five) is miscorrected
 * into a clean-looking word, and an FP16 scale or value can come out inf
 * or NaN, which turned attention into NaN. kvmem never
 * writes a negative or non-finite scale, nor a non-finite FP16 value, so
 * one that reads so is damaged and is treated as erased. The tests plant
 * such words with valid codewords, as a miscorrection leaves them.
 *
 * Since page format 3 the scales and FP16 rows also carry checks (a CRC
 * over the decoded data), which catch a planted word first and lose its
 * whole segment or row. Each test plants the word twice: as a
 * miscorrection leaves it (the check catches it), and with its check
 * rewritten to match (the value guard alone must still catch it). FP8
 * pages have no row checks: the NaN code is the value guard's alone.
 */
#include <math.h>
#include <string.h>

#include "internal.h"
#include "kvmem/crc32c.h"
#include "kvmem/ecc.h"
#include "kvmem/kvmem.h"
#include "kvmem/page.h"
#include "kvmem_check.h"

#define D 32
#define H 2
#define T 8

static struct kvmem_geometry geo(int fmt, int codec)
{
	struct kvmem_geometry g = { .layers = 1, .kv_heads = H, .head_dim = D };

	kvmem_geometry_default(&g);
	g.tokens_per_page = T;
	g.sink_tokens = 0;
	g.format = (uint8_t)fmt;
	g.codec = (uint8_t)codec;
	return g;
}

/* Token-major rows that vary smoothly: t * 0.01 + channel * 0.001 + 0.5. */
static void fill(float *x, int ntok)
{
	int t, i;

	for (t = 0; t < ntok; t++)
		for (i = 0; i < H * D; i++)
			x[t * H * D + i] = 0.5f + 0.01f * t + 0.001f * i;
}

/*
 * Replace FP16 value @idx of a region in the metadata code (scales, hot
 * pages) with @half and encode the region again, so the code sees clean
 * words. @data receives the region's data as it now decodes.
 */
static void plant_half(uint8_t *code, size_t nwords, size_t idx, uint16_t half,
		       uint8_t data[4096])
{
	struct kvmem_ecc_counts c;

	ck_assert_uint_le(kvmem_ecc_data_bytes(KVMEM_PAGE_META_CODEC, nwords),
			  4096);
	ck_assert_int_eq(kvmem_ecc_decode(KVMEM_PAGE_META_CODEC, code, data,
					  nwords, &c, NULL, NULL),
			 0);
	data[2 * idx] = (uint8_t)half;
	data[2 * idx + 1] = (uint8_t)(half >> 8);
	ck_assert_int_eq(
		kvmem_ecc_encode(KVMEM_PAGE_META_CODEC, data, code, nwords), 0);
}

/* Make check @idx of @page match @len bytes of @data, as page.h says:
 * the low 24 bits of their CRC-32C, in two golay24 words. */
static void match_check(uint8_t *page, const struct kvmem_page_layout *l,
			size_t idx, const uint8_t *data, size_t len)
{
	uint32_t crc = kvmem_crc32c(0, data, len);
	uint8_t c[3] = { (uint8_t)crc, (uint8_t)(crc >> 8),
			 (uint8_t)(crc >> 16) };

	ck_assert_uint_lt(idx, l->nchecks);
	ck_assert_int_eq(kvmem_ecc_encode(KVMEM_PAGE_META_CODEC, c,
					  page + l->checks_off + 6 * idx, 2),
			 0);
}

START_TEST(test_nan_scale_is_erased)
{
	struct kvmem_geometry g = geo(KVMEM_FMT_INT4, KVMEM_CODEC_H84);
	struct kvmem_page_hdr hdr = { .ntokens = T, .flags = KVMEM_HDR_SEALED };
	static uint8_t page[1 << 16], erased[2 * T * H * D];
	static float k[T * H * D], v[T * H * D], k2[T * H * D], v2[T * H * D];
	struct kvmem_page_counts pc;
	struct kvmem_page_layout l;
	const uint16_t bad[] = { 0x7e00, 0x7c00, 0xbc00 }; /* NaN, inf, -1 */
	uint8_t data[4096];
	size_t i, b, lost;

	ck_assert_int_eq(kvmem_page_layout(&g, 0, &l), 0);
	ck_assert_uint_le(l.size, sizeof(page));
	fill(k, T);
	fill(v, T);
	for (b = 0; b < 2 * sizeof(bad) / sizeof(bad[0]); b++) {
		int matched = b % 2;

		ck_assert_int_eq(kvmem_page_encode(page, &g, &hdr, 0, k, v), 0);
		/* K scale 0: token 0, head 0, channels 0..31 (group 32). */
		plant_half(page + l.scales_off, l.scale_words, 0, bad[b / 2],
			   data);
		/* Segment 0: scales 0..23, the 16 K scales (2 heads x 8
		 * tokens) and V's of head 0. */
		if (matched)
			match_check(page, &l, 0, data,
				    2 * KVMEM_PAGE_CHECK_SCALES);
		ck_assert_int_eq(
			kvmem_page_decode(page, &g, k2, v2, erased, &pc), T);
		ck_assert_uint_eq(pc.scales.uncorrectable, !matched);
		lost = matched ? D : KVMEM_PAGE_CHECK_SCALES * D;
		ck_assert_uint_eq(pc.values_erased, lost);
		for (i = 0; i < (size_t)T * H * D; i++) {
			ck_assert_msg(isfinite(k2[i]) && isfinite(v2[i]),
				      "value %zu not finite", i);
			/* K is [t][h][d]; V head 0 is lost with the
			 * segment. */
			ck_assert_uint_eq(erased[i], matched ? i < D : 1);
			ck_assert_uint_eq(erased[T * H * D + i],
					  !matched && i % (H * D) < D);
		}
		/* Read as 0 by the page decoder (the bits are worthless). */
		for (i = 0; i < D; i++)
			ck_assert_float_eq(k2[i], 0.0f);
	}
}
END_TEST

START_TEST(test_inf_fp16_value_is_rebuilt)
{
	struct kvmem_geometry g = geo(KVMEM_FMT_INT4, KVMEM_CODEC_H84);
	static float k[3 * H * D], v[3 * H * D], k2[3 * H * D], v2[3 * H * D];
	struct kvmem_attend_opts opts = { .n_heads = H };
	struct kvmem_page_desc pd[4];
	struct kvmem_page_layout l;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	float q[H * D], out[H * D];
	uint8_t data[4096];
	uint32_t pol;
	size_t i;
	int matched;

	fill(k, 3);
	fill(v, 3);
	ck_assert_int_eq(kvmem_page_layout(&g, 1, &l), 0);
	for (matched = 0; matched < 2; matched++) {
		ck_assert_int_eq(kvmem_open_embedded(&g, 1 << 20, &c), 0);
		ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
		/* Three tokens: all in the FP16 tail. */
		ck_assert_int_eq(kvmem_seq_append(s, 0, k, v, 3), 0);
		ck_assert_int_eq(kvmem_seq_pages(s, 0, pd, 4), 1);
		ck_assert_uint_eq(pd[0].hot, 1);
		/* Token 1, head 0, channel 5 of K becomes +inf: word 1 of
		 * row 1, whose check is check 1 (K, head 0, token 1). */
		plant_half((uint8_t *)pd[0].data + l.k_off + l.row_bytes,
			   l.row_words, 5, 0x7c00, data);
		if (matched)
			match_check(pd[0].data, &l, 1, data, l.row_data);
		/* Rebuilt from its neighbours, exactly as interpolation
		 * defines; under keep too: an FP16 value is not bounded by
		 * anything. With its check failing, the whole row is. */
		for (pol = KVMEM_ERASE_INTERPOLATE; pol <= KVMEM_ERASE_KEEP;
		     pol += KVMEM_ERASE_KEEP) {
			ck_assert_int_eq(
				kvmem_seq_read(s, 0, 0, 3, pol, k2, v2, NULL),
				0);
			for (i = 0; i < 3 * H * D; i++) {
				int lost = matched ? i == (size_t)H * D + 5
						   : i / D == H;

				if (lost)
					ck_assert_float_eq(k2[i],
							   (k2[i - H * D] +
							    k2[i + H * D]) *
								   0.5f);
				else
					ck_assert_float_eq(
						k2[i],
						kvmem_half_to_float(
							kvmem_half_from_float(
								k[i])));
			}
		}
		for (i = 0; i < H * D; i++)
			q[i] = 1.0f;
		ck_assert_int_eq(kvmem_attend(s, 0, q, out, &opts, NULL), 0);
		for (i = 0; i < H * D; i++)
			ck_assert_msg(isfinite(out[i]), "out %zu not finite",
				      i);
		kvmem_close(c);
	}
}
END_TEST

/*
 * The FP8 NaN code (S.1111.111), which the encoder never writes, planted
 * in value 5 of K row (head 1, token 11) of a sealed FP8 page: as clean
 * codewords, which neither the code nor any check sees (pages with scales
 * check their scales, not their rows), and in a word the code finds
 * uncorrectable, whose other values the keep policy may read as received
 * but this one not. Either way the value is erased and rebuilt by every
 * policy, never read as NaN, and attention on every SIMD level stays
 * finite and equal to attention over what kvmem_seq_read() gives.
 */
#define NTOK (3 * T + 1)

static void attend_ref(const float *q, const float *k, const float *v,
		       double *out)
{
	uint32_t h, t, d;
	double p[NTOK];

	for (h = 0; h < H; h++) {
		double m = -INFINITY, z = 0;

		for (t = 0; t < NTOK; t++) {
			double sc = 0;

			for (d = 0; d < D; d++)
				sc += (double)q[h * D + d] *
				      k[(t * H + h) * D + d];
			p[t] = sc / sqrt(D);
			m = fmax(m, p[t]);
		}
		for (t = 0; t < NTOK; t++)
			z += p[t] = exp(p[t] - m);
		for (d = 0; d < D; d++) {
			double o = 0;

			for (t = 0; t < NTOK; t++)
				o += p[t] * v[(t * H + h) * D + d];
			out[h * D + d] = o / z;
		}
	}
}

/* Check bits of a word of @codec to flip for a detected double (four for
 * golay24) error that leaves its data bits as they are: the byte past
 * the data and the mask. */
static void ue_bits(int codec, size_t *byte, uint8_t *mask)
{
	switch (codec) {
	case KVMEM_CODEC_H84: /* c4..c7: p0 p1 p2 and the parity */
		*byte = 0;
		*mask = 0x30;
		break;
	case KVMEM_CODEC_GOLAY24: /* c16..c19 */
		*byte = 2;
		*mask = 0x0f;
		break;
	default: /* secded72: check bits 0 and 1 */
		*byte = 8;
		*mask = 0x03;
		break;
	}
}

START_TEST(test_fp8_nan_code_is_erased)
{
	static const int codecs[] = { KVMEM_CODEC_H74, KVMEM_CODEC_H84,
				      KVMEM_CODEC_GOLAY24,
				      KVMEM_CODEC_SECDED72 };
	const uint32_t pos = T + 3, h = 1, ch = 5;
	const size_t i0 = ((size_t)pos * H + h) * D + ch;
	static float k[NTOK * H * D], v[NTOK * H * D], k0[NTOK * H * D],
		v0[NTOK * H * D], k2[NTOK * H * D], v2[NTOK * H * D];
	float q[H * D], out[H * D];
	double ro[H * D];
	struct kvmem_attend_opts opts = { .n_heads = H };
	struct kvmem_attend_stats st;
	struct kvmem_page_counts pc;
	struct kvmem_page_desc pd[4];
	struct kvmem_page_layout l;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	uint8_t data[4096];
	unsigned int ci, ue;
	uint32_t pol;
	int lv, active = kvmem__simd_active();
	size_t i;

	fill(k, NTOK);
	fill(v, NTOK);
	for (i = 0; i < H * D; i++)
		q[i] = (float)((int)(i % 7) - 3);
	for (ci = 0; ci < 4; ci++)
		for (ue = 0; ue < 2; ue++) {
			const int codec = codecs[ci];
			struct kvmem_geometry g = geo(KVMEM_FMT_FP8, codec);
			uint8_t *row;
			const unsigned int kb =
				kvmem_codec_get(codec)->data_bits;
			const unsigned int wb =
				kvmem_codec_get(codec)->word_bytes;
			size_t byte;
			uint8_t mask;

			/* h74 cannot tell a double error from a single */
			if (ue && codec == KVMEM_CODEC_H74)
				continue;
			ck_assert_int_eq(kvmem_page_layout(&g, 0, &l), 0);
			ck_assert_int_eq(kvmem_open_embedded(&g, 1 << 20, &c),
					 0);
			ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
			ck_assert_int_eq(kvmem_seq_append(s, 0, k, v, NTOK), 0);
			ck_assert_int_eq(kvmem_seq_read(s, 0, 0, NTOK,
							KVMEM_ERASE_ZERO, k0,
							v0, &pc),
					 0);
			ck_assert_uint_eq(pc.values_erased, 0);
			ck_assert_int_eq(kvmem_seq_pages(s, 0, pd, 4), 4);
			ck_assert_uint_eq(pd[1].sealed, 1);
			ck_assert_uint_eq(pd[1].format, KVMEM_FMT_FP8);
			row = (uint8_t *)pd[1].data + l.k_off +
			      ((size_t)h * T + pos - T) * l.row_bytes;
			ck_assert_int_eq(kvmem_ecc_decode(codec, row, data,
							  l.row_words, NULL,
							  NULL, NULL),
					 0);
			/* Both NaN codes, one a codec. */
			data[ch] = ci % 2 ? 0xff : 0x7f;
			ck_assert_int_eq(
				kvmem_ecc_encode(codec, data, row, l.row_words),
				0);
			if (ue) {
				/* The word with the value's top bit. */
				ue_bits(codec, &byte, &mask);
				row[(8 * ch + 7) / kb * wb + byte] ^= mask;
			}

			for (pol = 0; pol <= KVMEM_ERASE_KEEP; pol++) {
				ck_assert_int_eq(kvmem_seq_read(s, 0, 0, NTOK,
								pol, k2, v2,
								&pc),
						 0);
				ck_assert_uint_eq(pc.payload.uncorrectable, ue);
				if (!ue)
					ck_assert_uint_eq(pc.values_erased, 1);
				ck_assert_uint_ge(pc.values_erased, 1);
				for (i = 0; i < NTOK * H * D; i++) {
					ck_assert_msg(isfinite(k2[i]),
						      "codec %d ue %u policy "
						      "%u: value %zu",
						      codec, ue, pol, i);
					if (i == i0)
						ck_assert_float_eq(
							k2[i],
							pol == KVMEM_ERASE_ZERO
								? 0.0f
								: (k0[i -
								      H * D] +
								   k0[i +
								      H * D]) *
									  0.5f);
					else if (!ue || pol == KVMEM_ERASE_KEEP)
						ck_assert_float_eq(k2[i],
								   k0[i]);
				}
				ck_assert_mem_eq(v2, v0, sizeof(v0));
				attend_ref(q, k2, v2, ro);
				for (lv = 0; lv < KVMEM__SIMD_NR; lv++) {
					if (!kvmem__simd_supported(lv))
						continue;
					ck_assert_int_eq(kvmem__simd_force(lv),
							 0);
					opts.erasure = pol;
					ck_assert_int_eq(
						kvmem_attend(s, 0, q, out,
							     &opts, &st),
						0);
					ck_assert_uint_eq(st.values_erased,
							  pc.values_erased);
					for (i = 0; i < H * D; i++)
						ck_assert_msg(
							fabs(out[i] - ro[i]) <=
								1e-5 * fabs(ro[i]) +
									1e-6,
							"codec %d ue %u "
							"policy %u %s: out "
							"%zu = %a, not %a",
							codec, ue, pol,
							kvmem__simd_name(lv), i,
							out[i], ro[i]);
				}
				ck_assert_int_eq(kvmem__simd_force(active), 0);
			}
			kvmem_close(c);
		}
}
END_TEST

KVMEM_SUITE(nonfinite)
{
	Suite *s = suite_create("nonfinite");
	TCase *tc = tcase_create("miscorrected");

	tcase_add_test(tc, test_nan_scale_is_erased);
	tcase_add_test(tc, test_inf_fp16_value_is_rebuilt);
	tcase_add_test(tc, test_fp8_nan_code_is_erased);
	suite_add_tcase(s, tc);
	return s;
}
