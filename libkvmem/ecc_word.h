/* SPDX-License-Identifier: MIT */
/*
 * ecc_word.h - per-codeword encode and decode, shared by C and CUDA
 *
 * Every function here works on one codeword and uses nothing but integer
 * arithmetic: no libc, no tables in memory. The same file compiles as C
 * (libkvmem's bulk paths and tests) and as CUDA (kernels/), so the CPU test
 * suite exercises exactly the arithmetic the GPU runs.
 *
 * Bit i of a word is the bit of value 2^i. The layouts are normative
 * (DESIGN.md section 3) and follow the matrices of Roy, "Stabilizing
 * Quantized KV Caches via Subspace Embeddings and Manifold Interpolation".
 *
 * Return convention of the *_correct() functions: the number of bits that
 * were flipped back (0 = clean), or KVMEM_WORD_UE when the error is beyond
 * what the code corrects; the word is then left exactly as received.
 */
#ifndef KVMEM_ECC_WORD_H
#define KVMEM_ECC_WORD_H

#include <stdint.h>

#ifdef __CUDACC__
#define KVMEM_WORD_FN static __host__ __device__ __forceinline__
#else
#define KVMEM_WORD_FN static inline
#endif

#define KVMEM_WORD_UE (-1)

KVMEM_WORD_FN unsigned int kvmem_parity32(uint32_t x)
{
#ifdef __CUDA_ARCH__
	return __popc(x) & 1;
#else
	return __builtin_parity(x);
#endif
}

KVMEM_WORD_FN unsigned int kvmem_parity64(uint64_t x)
{
#ifdef __CUDA_ARCH__
	return __popcll(x) & 1;
#else
	return __builtin_parityll(x);
#endif
}

/* Index of the lowest set bit of a non-zero @x. */
KVMEM_WORD_FN unsigned int kvmem_ctz32(uint32_t x)
{
#ifdef __CUDA_ARCH__
	return __ffs(x) - 1;
#else
	return __builtin_ctz(x);
#endif
}

KVMEM_WORD_FN unsigned int kvmem_popcount32(uint32_t x)
{
#ifdef __CUDA_ARCH__
	return __popc(x);
#else
	return __builtin_popcount(x);
#endif
}

/*
 * Hamming(7,4), paper eq. 16-20.
 *
 * c = [d0 d1 d2 d3 p0 p1 p2], p0 = d0^d1^d3, p1 = d0^d2^d3, p2 = d1^d2^d3.
 * The rows of H select bits {0,1,3,4}, {0,2,3,5} and {1,2,3,6}; syndrome
 * bit r is the parity of row r. H holds every non-zero 3-bit column once, so
 * a non-zero syndrome names exactly one position: the code is perfect and
 * corrects any single error, but a double error always looks like a single
 * one elsewhere and is miscorrected (paper Example 3). Stored one codeword
 * per byte; bit 7 is not part of the code and must be 0.
 */
#define KVMEM_H74_ROW0 0x1bu
#define KVMEM_H74_ROW1 0x2du
#define KVMEM_H74_ROW2 0x4eu

/*
 * Syndrome -> error position, one nibble per syndrome value: columns of H
 * are 3,5,6,7,1,2,4 for positions 0..6. Nibble 0 is unused.
 */
#define KVMEM_H74_SYN_POS 0x3216054fu

KVMEM_WORD_FN uint8_t kvmem_h74_encode(unsigned int data)
{
	unsigned int d = data & 0xf;
	unsigned int p0 = (d ^ d >> 1 ^ d >> 3) & 1;
	unsigned int p1 = (d ^ d >> 2 ^ d >> 3) & 1;
	unsigned int p2 = (d >> 1 ^ d >> 2 ^ d >> 3) & 1;

	return (uint8_t)(d | p0 << 4 | p1 << 5 | p2 << 6);
}

KVMEM_WORD_FN unsigned int kvmem_h74_syndrome(unsigned int cw)
{
	return kvmem_parity32(cw & KVMEM_H74_ROW0) |
	       kvmem_parity32(cw & KVMEM_H74_ROW1) << 1 |
	       kvmem_parity32(cw & KVMEM_H74_ROW2) << 2;
}

/*
 * A set bit 7 is a flipped storage bit outside the code: it is cleared and
 * counted, so a scrub leaves every stored byte canonical.
 */
KVMEM_WORD_FN int kvmem_h74_correct(uint8_t *cw)
{
	unsigned int r = *cw;
	unsigned int s = kvmem_h74_syndrome(r);
	int fixed = (int)(r >> 7);

	r &= 0x7f;
	if (s) {
		r ^= 1u << (KVMEM_H74_SYN_POS >> (4 * s) & 0xf);
		fixed++;
	}
	*cw = (uint8_t)r;
	return fixed;
}

/*
 * Extended Hamming(8,4) SECDED, paper eq. 22-25: the h74 word plus
 * c7 = XOR of c0..c6 (= d0^d1^d2), so every codeword has even weight and
 * d_min = 4. With z the h74 syndrome and p the parity of all eight bits:
 *   z = 0, p = 0  clean
 *   z != 0, p = 1 single error at the position z names: corrected
 *   z != 0, p = 0 double error: uncorrectable, reported, never miscorrected
 *   z = 0, p = 1  c7 itself flipped: data valid, counted as corrected
 */
KVMEM_WORD_FN uint8_t kvmem_h84_encode(unsigned int data)
{
	unsigned int c = kvmem_h74_encode(data);

	return (uint8_t)(c | kvmem_parity32(c) << 7);
}

/* Bits 0-2: the h74 syndrome; bit 3: overall parity. Zero iff clean. */
KVMEM_WORD_FN unsigned int kvmem_h84_syndrome(unsigned int cw)
{
	return kvmem_h74_syndrome(cw) | kvmem_parity32(cw & 0xff) << 3;
}

KVMEM_WORD_FN int kvmem_h84_correct(uint8_t *cw)
{
	unsigned int s = kvmem_h84_syndrome(*cw);

	if (!s)
		return 0;
	if (!(s & 8))
		return KVMEM_WORD_UE;
	s &= 7;
	*cw ^= (uint8_t)(s ? 1u << (KVMEM_H74_SYN_POS >> (4 * s) & 0xf) : 0x80);
	return 1;
}

/*
 * Four one-byte codewords at once, a byte of @x each: every byte encoded
 * again from its data nibble, as kvmem_h84_encode() (@ext) or
 * kvmem_h74_encode() would. The result equals @x exactly when all four
 * words are clean, which is how the GPU tests a register of codewords
 * before it reads their values.
 */
KVMEM_WORD_FN uint32_t kvmem_h8x4_encode(uint32_t x, int ext)
{
	const uint32_t d = x & 0x0f0f0f0fu, one = 0x01010101u;
	uint32_t c = d | ((d ^ d >> 1 ^ d >> 3) & one) << 4 |
		     ((d ^ d >> 2 ^ d >> 3) & one) << 5 |
		     ((d >> 1 ^ d >> 2 ^ d >> 3) & one) << 6;

	/* c7 = d0 ^ d1 ^ d2: the parity of the other seven bits. */
	if (ext)
		c |= ((d ^ d >> 1 ^ d >> 2) & one) << 7;
	return c;
}

/*
 * Extended binary Golay(24,12), paper eq. 31-36.
 *
 * c = [d0..d11 p0..p11] with p = d.B, B the paper's 12x12 matrix. Rows 0..10
 * of B are cyclic shifts of one quadratic-residue pattern (row i, column j <
 * 11 is row 0, column (i + j) mod 11) with a 1 in column 11; row 11 is eleven
 * ones and a zero. B is symmetric and B.B^T = I, so the code is self-dual:
 * H = [B^T | I] and the syndrome of r = (rd, rp) is rp ^ rd.B.
 *
 * d_min = 8: every error of weight <= 3 is corrected. The decoder below only
 * ever returns an error pattern of weight <= 3 whose syndrome matches, which
 * is the unique coset leader; a weight-4 error is 4 away from the sent word
 * and at least 4 from every other, so no such pattern exists and it is
 * reported uncorrectable, never miscorrected.
 *
 * Decoding (the standard algorithm for self-dual Golay, no tables): with
 * s = e_p ^ e_d.B, and s.B = e_p.B ^ e_d because B.B^T = I,
 *   wt(s) <= 3                  -> e = (0, s)
 *   wt(s ^ B_i) <= 2 for some i -> e = (u_i, s ^ B_i)
 *   wt(s.B) <= 3                -> e = (s.B, 0)
 *   wt(s.B ^ B_i) <= 2          -> e = (s.B ^ B_i, u_i)
 * and nothing else has weight <= 3.
 *
 * Stored as 3 bytes, little-endian; three INT4 values pack as v0 = d0..d3,
 * v1 = d4..d7, v2 = d8..d11.
 */
#define KVMEM_GOLAY_ROW0 0x23bu /* row 0 of B, columns 0..10 */

KVMEM_WORD_FN uint32_t kvmem_golay24_row(unsigned int i)
{
	if (i == 11)
		return 0x7ff;
	return ((KVMEM_GOLAY_ROW0 >> i | KVMEM_GOLAY_ROW0 << (11 - i)) &
		0x7ff) |
	       0x800;
}

/* v.B for a 12-bit row vector v: the parity of d, or half of a syndrome. */
KVMEM_WORD_FN uint32_t kvmem_golay24_mul_b(uint32_t v)
{
	uint32_t p = 0;
	unsigned int i;

	for (i = 0; i < 12; i++)
		p ^= kvmem_golay24_row(i) & (0u - (v >> i & 1));
	return p;
}

KVMEM_WORD_FN uint32_t kvmem_golay24_encode(uint32_t data)
{
	uint32_t d = data & 0xfff;

	return d | kvmem_golay24_mul_b(d) << 12;
}

KVMEM_WORD_FN uint32_t kvmem_golay24_syndrome(uint32_t cw)
{
	return (cw >> 12 & 0xfff) ^ kvmem_golay24_mul_b(cw & 0xfff);
}

/* The weight-<=3 error pattern with syndrome s, or 0xffffffff if none. */
KVMEM_WORD_FN uint32_t kvmem_golay24_error(uint32_t s)
{
	uint32_t q;
	unsigned int i;

	if (kvmem_popcount32(s) <= 3)
		return s << 12;
	for (i = 0; i < 12; i++)
		if (kvmem_popcount32(s ^ kvmem_golay24_row(i)) <= 2)
			return 1u << i | (s ^ kvmem_golay24_row(i)) << 12;
	q = kvmem_golay24_mul_b(s);
	if (kvmem_popcount32(q) <= 3)
		return q;
	for (i = 0; i < 12; i++)
		if (kvmem_popcount32(q ^ kvmem_golay24_row(i)) <= 2)
			return (q ^ kvmem_golay24_row(i)) | 1u << (12 + i);
	return 0xffffffffu;
}

KVMEM_WORD_FN int kvmem_golay24_correct(uint32_t *cw)
{
	uint32_t s = kvmem_golay24_syndrome(*cw);
	uint32_t e;

	if (!s)
		return 0;
	e = kvmem_golay24_error(s);
	if (e == 0xffffffffu)
		return KVMEM_WORD_UE;
	*cw ^= e;
	return (int)kvmem_popcount32(e);
}

/*
 * SECDED(72,64), a Hsiao code: 64 data bits, 8 check bits, every column of
 * H of odd weight, which makes the overall parity implicit and the row
 * weights balanced (26 data bits feed each check bit).
 *
 * Column of data bit j: for j < 56 the j-th 8-bit value of weight 3 in
 * increasing order (0x07, 0x0b, 0x0d, 0x0e, 0x13, ...); for j = 56..63 the
 * weight-5 value 0x1f rotated left by j - 56. Check bit k has column 1 << k.
 * Stored as 9 bytes, little-endian: value = data | check << 64.
 *
 * Syndrome s = check ^ check(data):
 *   0                    clean
 *   odd weight, a column single error there: corrected
 *   even weight, != 0    double error: uncorrectable, never miscorrected
 *   odd weight, no column three or more errors: uncorrectable
 */
#define KVMEM_SECDED72_M0 0xf104225844b12cb7ull
#define KVMEM_SECDED72_M1 0xe30844a88952555bull
#define KVMEM_SECDED72_M2 0xc710893112649a6dull
#define KVMEM_SECDED72_M3 0x8f2111c22388e38eull
#define KVMEM_SECDED72_M4 0x1f421e043c0f03f0ull
#define KVMEM_SECDED72_M5 0x3e83e007c00ffc00ull
#define KVMEM_SECDED72_M6 0x7cfc0007fff00000ull
#define KVMEM_SECDED72_M7 0xf8fffff800000000ull

/* Row k of H over the data bits: the data bits that feed check bit k. */
KVMEM_WORD_FN uint64_t kvmem_secded72_row(unsigned int k)
{
	switch (k) {
	case 0:
		return KVMEM_SECDED72_M0;
	case 1:
		return KVMEM_SECDED72_M1;
	case 2:
		return KVMEM_SECDED72_M2;
	case 3:
		return KVMEM_SECDED72_M3;
	case 4:
		return KVMEM_SECDED72_M4;
	case 5:
		return KVMEM_SECDED72_M5;
	case 6:
		return KVMEM_SECDED72_M6;
	default:
		return KVMEM_SECDED72_M7;
	}
}

KVMEM_WORD_FN uint8_t kvmem_secded72_encode(uint64_t data)
{
	unsigned int c = 0, k;

	for (k = 0; k < 8; k++)
		c |= kvmem_parity64(data & kvmem_secded72_row(k)) << k;
	return (uint8_t)c;
}

KVMEM_WORD_FN unsigned int kvmem_secded72_syndrome(uint64_t data,
						   unsigned int check)
{
	return (check ^ kvmem_secded72_encode(data)) & 0xff;
}

/*
 * The data bit whose column is s, or -1. Weight-3 columns are numbered in
 * increasing order, which is colex order, so the combinatorial number system
 * ranks them: bits a < b < c give C(c,3) + C(b,2) + C(a,1).
 */
KVMEM_WORD_FN int kvmem_secded72_column(unsigned int s)
{
	unsigned int a, b, c, i;

	if (kvmem_popcount32(s) == 5) {
		for (i = 0; i < 8; i++)
			if (s == ((0x1fu << i | 0x1fu >> (8 - i)) & 0xff))
				return (int)(56 + i);
		return -1;
	}
	if (kvmem_popcount32(s) != 3)
		return -1;
	/* Bits a < b < c, lowest first; no array, so device code keeps it
	 * in registers. */
	a = kvmem_ctz32(s);
	s &= s - 1;
	b = kvmem_ctz32(s);
	s &= s - 1;
	c = kvmem_ctz32(s);
	return (int)(c * (c - 1) * (c - 2) / 6 + b * (b - 1) / 2 + a);
}

KVMEM_WORD_FN int kvmem_secded72_correct(uint64_t *data, uint8_t *check)
{
	unsigned int s = kvmem_secded72_syndrome(*data, *check);
	int j;

	if (!s)
		return 0;
	if (!(kvmem_popcount32(s) & 1))
		return KVMEM_WORD_UE;
	if (kvmem_popcount32(s) == 1) {
		*check ^= (uint8_t)s;
		return 1;
	}
	j = kvmem_secded72_column(s);
	if (j < 0)
		return KVMEM_WORD_UE;
	*data ^= 1ull << j;
	return 1;
}

#endif /* KVMEM_ECC_WORD_H */
