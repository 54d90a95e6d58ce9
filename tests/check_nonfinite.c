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
 * rewritten to match (the value guard alone must still catch it).
 */
#include <math.h>
#include <string.h>

#include "kvmem/crc32c.h"
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

KVMEM_SUITE(nonfinite)
{
	Suite *s = suite_create("nonfinite");
	TCase *tc = tcase_create("miscorrected");

	tcase_add_test(tc, test_nan_scale_is_erased);
	tcase_add_test(tc, test_inf_fp16_value_is_rebuilt);
	suite_add_tcase(s, tc);
	return s;
}
