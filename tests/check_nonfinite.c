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
 */
#include <math.h>
#include <string.h>

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
 * words.
 */
static void plant_half(uint8_t *code, size_t nwords, size_t idx, uint16_t half)
{
	uint8_t data[4096];
	struct kvmem_ecc_counts c;

	ck_assert_uint_le(kvmem_ecc_data_bytes(KVMEM_PAGE_META_CODEC, nwords),
			  sizeof(data));
	ck_assert_int_eq(kvmem_ecc_decode(KVMEM_PAGE_META_CODEC, code, data,
					  nwords, &c, NULL, NULL),
			 0);
	data[2 * idx] = (uint8_t)half;
	data[2 * idx + 1] = (uint8_t)(half >> 8);
	ck_assert_int_eq(
		kvmem_ecc_encode(KVMEM_PAGE_META_CODEC, data, code, nwords), 0);
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
	size_t i, b;

	ck_assert_int_eq(kvmem_page_layout(&g, 0, &l), 0);
	ck_assert_uint_le(l.size, sizeof(page));
	fill(k, T);
	fill(v, T);
	for (b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
		ck_assert_int_eq(kvmem_page_encode(page, &g, &hdr, 0, k, v), 0);
		/* K scale 0: token 0, head 0, channels 0..31 (group 32). */
		plant_half(page + l.scales_off, l.scale_words, 0, bad[b]);
		ck_assert_int_eq(
			kvmem_page_decode(page, &g, k2, v2, erased, &pc), T);
		ck_assert_uint_eq(pc.scales.uncorrectable, 0);
		ck_assert_uint_eq(pc.values_erased, D);
		for (i = 0; i < (size_t)T * H * D; i++) {
			ck_assert_msg(isfinite(k2[i]) && isfinite(v2[i]),
				      "value %zu not finite", i);
			ck_assert_uint_eq(erased[i], i < D);
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
	uint32_t pol;
	size_t i;

	fill(k, 3);
	fill(v, 3);
	ck_assert_int_eq(kvmem_open_embedded(&g, 1 << 20, &c), 0);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	/* Three tokens: all in the FP16 tail. */
	ck_assert_int_eq(kvmem_seq_append(s, 0, k, v, 3), 0);
	ck_assert_int_eq(kvmem_seq_pages(s, 0, pd, 4), 1);
	ck_assert_uint_eq(pd[0].hot, 1);
	ck_assert_int_eq(kvmem_page_layout(&g, 1, &l), 0);
	/* Token 1, head 0, channel 5 of K becomes +inf: word 1 of row 1. */
	plant_half((uint8_t *)pd[0].data + l.k_off + l.row_bytes, l.row_words,
		   5, 0x7c00);
	/* Rebuilt from its neighbours, exactly as interpolation defines;
	 * under keep too: an FP16 value is not bounded by anything. */
	for (pol = KVMEM_ERASE_INTERPOLATE; pol <= KVMEM_ERASE_KEEP;
	     pol += KVMEM_ERASE_KEEP) {
		ck_assert_int_eq(kvmem_seq_read(s, 0, 0, 3, pol, k2, v2, NULL),
				 0);
		ck_assert_float_eq(k2[1 * H * D + 5],
				   (k2[5] + k2[2 * H * D + 5]) * 0.5f);
		for (i = 0; i < 3 * H * D; i++)
			if (i != (size_t)H * D + 5)
				ck_assert_float_eq(
					k2[i],
					kvmem_half_to_float(
						kvmem_half_from_float(k[i])));
	}
	for (i = 0; i < H * D; i++)
		q[i] = 1.0f;
	ck_assert_int_eq(kvmem_attend(s, 0, q, out, &opts, NULL), 0);
	for (i = 0; i < H * D; i++)
		ck_assert_msg(isfinite(out[i]), "out %zu not finite", i);
	kvmem_close(c);
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
