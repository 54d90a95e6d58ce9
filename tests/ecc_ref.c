/* SPDX-License-Identifier: MIT */
/*
 * ecc_ref.c - reference codecs for the tests, from the paper, not the library
 *
 * Transcribed from Roy's paper and the Hsiao construction in DESIGN.md, and
 * deliberately independent of libkvmem: see ecc_ref.h.
 */
#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "ecc_ref.h"
#include "kvmem/ecc.h"

/* DESIGN.md section 3, written down independently of ecc.c's table. */
const struct ref_codec ref_codecs[KVMEM_CODEC_NR] = {
	[KVMEM_CODEC_H74] = { "h74", 4, 7, 1, 1, 0 },
	[KVMEM_CODEC_H84] = { "h84", 4, 8, 1, 1, 2 },
	[KVMEM_CODEC_GOLAY24] = { "golay24", 12, 24, 3, 3, 4 },
	[KVMEM_CODEC_SECDED72] = { "secded72", 64, 72, 9, 1, 2 },
};

const uint8_t ref_h74_G[4][7] = {
	{ 1, 0, 0, 0, 1, 1, 0 },
	{ 0, 1, 0, 0, 1, 0, 1 },
	{ 0, 0, 1, 0, 0, 1, 1 },
	{ 0, 0, 0, 1, 1, 1, 1 },
};

const uint8_t ref_h74_H[3][7] = {
	{ 1, 1, 0, 1, 1, 0, 0 },
	{ 1, 0, 1, 1, 0, 1, 0 },
	{ 0, 1, 1, 1, 0, 0, 1 },
};

const uint8_t ref_h84_G[4][8] = {
	{ 1, 0, 0, 0, 1, 1, 0, 1 },
	{ 0, 1, 0, 0, 1, 0, 1, 1 },
	{ 0, 0, 1, 0, 0, 1, 1, 1 },
	{ 0, 0, 0, 1, 1, 1, 1, 0 },
};

const uint8_t ref_h84_H[4][8] = {
	{ 1, 1, 0, 1, 1, 0, 0, 0 },
	{ 1, 0, 1, 1, 0, 1, 0, 0 },
	{ 0, 1, 1, 1, 0, 0, 1, 0 },
	{ 1, 1, 1, 1, 1, 1, 1, 1 },
};

const uint8_t ref_golay_B[12][12] = {
	{ 1, 1, 0, 1, 1, 1, 0, 0, 0, 1, 0, 1 },
	{ 1, 0, 1, 1, 1, 0, 0, 0, 1, 0, 1, 1 },
	{ 0, 1, 1, 1, 0, 0, 0, 1, 0, 1, 1, 1 },
	{ 1, 1, 1, 0, 0, 0, 1, 0, 1, 1, 0, 1 },
	{ 1, 1, 0, 0, 0, 1, 0, 1, 1, 0, 1, 1 },
	{ 1, 0, 0, 0, 1, 0, 1, 1, 0, 1, 1, 1 },
	{ 0, 0, 0, 1, 0, 1, 1, 0, 1, 1, 1, 1 },
	{ 0, 0, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1 },
	{ 0, 1, 0, 1, 1, 0, 1, 1, 1, 0, 0, 1 },
	{ 1, 0, 1, 1, 0, 1, 1, 1, 0, 0, 0, 1 },
	{ 0, 1, 1, 0, 1, 1, 1, 0, 0, 0, 1, 1 },
	{ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0 },
};

uint32_t ref_gf2_vec_mat(uint32_t v, const uint8_t *m, unsigned int rows,
			 unsigned int cols)
{
	uint32_t out = 0;
	unsigned int i, j, bit;

	for (j = 0; j < cols; j++) {
		bit = 0;
		for (i = 0; i < rows; i++)
			bit ^= (v >> i & 1) & m[i * cols + j];
		out |= (uint32_t)bit << j;
	}
	return out;
}

uint32_t ref_gf2_mat_vec(const uint8_t *m, unsigned int rows, unsigned int cols,
			 uint32_t v)
{
	uint32_t out = 0;
	unsigned int i, j, bit;

	for (i = 0; i < rows; i++) {
		bit = 0;
		for (j = 0; j < cols; j++)
			bit ^= m[i * cols + j] & (v >> j & 1);
		out |= (uint32_t)bit << i;
	}
	return out;
}

uint8_t ref_h74(unsigned int d)
{
	return (uint8_t)ref_gf2_vec_mat(d, &ref_h74_G[0][0], 4, 7);
}

uint8_t ref_h84(unsigned int d)
{
	return (uint8_t)ref_gf2_vec_mat(d, &ref_h84_G[0][0], 4, 8);
}

/* d.G24 with G24 = [I | B]: the data, then d.B above it. */
uint32_t ref_golay(uint32_t d)
{
	return (d & 0xfff) | ref_gf2_vec_mat(d, &ref_golay_B[0][0], 12, 12)
				     << 12;
}

unsigned int ref_h74_syndrome(unsigned int r)
{
	return ref_gf2_mat_vec(&ref_h74_H[0][0], 3, 7, r);
}

int ref_h74_position(unsigned int z)
{
	unsigned int j;

	for (j = 0; j < 7; j++)
		if (ref_gf2_mat_vec(&ref_h74_H[0][0], 3, 7, 1u << j) == z)
			return (int)j;
	return -1;
}

void ref_secded_columns(uint8_t col[64])
{
	unsigned int v, j = 0, r;

	for (v = 0; v < 256; v++)
		if (__builtin_popcount(v) == 3)
			col[j++] = (uint8_t)v;
	ck_assert_uint_eq(j, 56);
	for (r = 0; r < 8; r++)
		col[56 + r] = (uint8_t)(0x1fu << r | 0x1fu >> (8 - r));
}

uint8_t ref_secded_check(uint64_t d)
{
	static uint8_t col[64];
	static int built;
	uint8_t c = 0;
	unsigned int j;

	if (!built) {
		ref_secded_columns(col);
		built = 1;
	}
	for (j = 0; j < 64; j++)
		if (d >> j & 1)
			c ^= col[j];
	return c;
}

void ref_word(int codec, uint64_t d, uint8_t *w)
{
	switch (codec) {
	case KVMEM_CODEC_H74:
		w[0] = ref_h74((unsigned int)d);
		break;
	case KVMEM_CODEC_H84:
		w[0] = ref_h84((unsigned int)d);
		break;
	case KVMEM_CODEC_GOLAY24:
		ref_put_le(w, 3, ref_golay((uint32_t)d));
		break;
	default:
		ref_put_le(w, 8, d);
		w[8] = ref_secded_check(d);
		break;
	}
}

uint64_t ref_get_bits(const uint8_t *p, size_t pos, unsigned int k)
{
	uint64_t v = 0;
	unsigned int i;

	for (i = 0; i < k; i++, pos++)
		v |= (uint64_t)(p[pos / 8] >> (pos % 8) & 1) << i;
	return v;
}

void ref_put_bits(uint8_t *p, size_t pos, unsigned int k, uint64_t v)
{
	unsigned int i;

	for (i = 0; i < k; i++, pos++) {
		p[pos / 8] &= (uint8_t) ~(1u << (pos % 8));
		p[pos / 8] |= (uint8_t)((v >> i & 1) << (pos % 8));
	}
}

uint64_t ref_get_le(const uint8_t *w, unsigned int nbytes)
{
	uint64_t v = 0;
	unsigned int i;

	for (i = 0; i < nbytes; i++)
		v |= (uint64_t)w[i] << (8 * i);
	return v;
}

void ref_put_le(uint8_t *w, unsigned int nbytes, uint64_t v)
{
	unsigned int i;

	for (i = 0; i < nbytes; i++)
		w[i] = (uint8_t)(v >> (8 * i));
}

uint32_t ref_crc32c(uint32_t crc, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	unsigned int k;

	crc = ~crc;
	while (len--) {
		crc ^= *p++;
		for (k = 0; k < 8; k++)
			crc = crc & 1 ? crc >> 1 ^ 0x82f63b78u : crc >> 1;
	}
	return ~crc;
}

uint64_t ref_rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ z >> 30) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ z >> 27) * 0x94d049bb133111ebull;
	return z ^ z >> 31;
}
