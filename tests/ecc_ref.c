/*
 * ecc_ref.c - reference codecs for the tests, from the paper, not the library
 *
 * Transcribed from Roy's paper and the Hsiao construction in DESIGN.md, and
 * deliberately independent of libkvmem: see ecc_ref.h.
 */
#include <check.h>
#include <stdint.h>

#include "ecc_ref.h"

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

uint64_t ref_rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ z >> 30) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ z >> 27) * 0x94d049bb133111ebull;
	return z ^ z >> 31;
}
