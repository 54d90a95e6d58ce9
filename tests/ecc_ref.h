/* SPDX-License-Identifier: MIT */
/*
 * ecc_ref.h - reference codecs for the tests, from the paper, not the library
 *
 * The matrices of Roy, "Stabilizing Quantized KV Caches via Subspace
 * Embeddings and Manifold Interpolation" (eq. 16, 17, 22, 23, 31) are
 * transcribed here as 0/1 tables, and the secded72 columns are rebuilt from
 * the Hsiao construction of DESIGN.md section 3. Encoders are plain
 * matrix-vector products over GF(2).
 *
 * This is deliberately independent of libkvmem: it includes no library
 * header but kvmem/ecc.h, for the codec numbers alone (ecc_word.h least of
 * all), and calls no library function, so that the library is only ever the
 * thing being compared against it.
 *
 * Bit i of a vector or word is the bit of value 2^i.
 */
#ifndef KVMEM_ECC_REF_H
#define KVMEM_ECC_REF_H

#include <stddef.h>
#include <stdint.h>

#include "kvmem/ecc.h"

/* A codec's word layout (DESIGN.md section 3), written down. */
struct ref_codec {
	const char *name;
	unsigned int k; /* data bits */
	unsigned int n; /* live code bits */
	unsigned int wb; /* stored bytes per word */
	unsigned int t; /* corrects */
	unsigned int ue; /* a weight always reported uncorrectable, or 0 */
};

extern const struct ref_codec ref_codecs[KVMEM_CODEC_NR];

/* Eq. 17: G = [I4 | P] of Hamming(7,4). */
extern const uint8_t ref_h74_G[4][7];
/* Eq. 16: H of Hamming(7,4). */
extern const uint8_t ref_h74_H[3][7];
/* Eq. 22: the extended generator of Hamming(8,4). */
extern const uint8_t ref_h84_G[4][8];
/* Eq. 23: the extended parity check; row 3 is the overall parity. */
extern const uint8_t ref_h84_H[4][8];
/* Eq. 31: B of the extended Golay code, G24 = [I | B], H24 = [B^T | I]. */
extern const uint8_t ref_golay_B[12][12];

/* Row vector @v times the @rows x @cols matrix @m (row-major), cols <= 32. */
uint32_t ref_gf2_vec_mat(uint32_t v, const uint8_t *m, unsigned int rows,
			 unsigned int cols);
/* @m times the column vector @v: bit r is row r's parity against @v. */
uint32_t ref_gf2_mat_vec(const uint8_t *m, unsigned int rows, unsigned int cols,
			 uint32_t v);

/* Codewords d.G of the low 4 or 12 bits of @d. */
uint8_t ref_h74(unsigned int d);
uint8_t ref_h84(unsigned int d);
uint32_t ref_golay(uint32_t d);

/* H74 applied to the low 7 bits of @r: syndrome bit i is row i. */
unsigned int ref_h74_syndrome(unsigned int r);
/* The position whose column of H74 is @z, or -1 (z == 0 or z > 7). */
int ref_h74_position(unsigned int z);

/*
 * secded72's columns: data bit j < 56 gets the j-th 8-bit value of weight 3
 * in increasing order, data bit 56 + r the weight-5 value 0x1f rotated left
 * by r (check bit k has column 1 << k).
 */
void ref_secded_columns(uint8_t col[64]);
/* The 8 check bits of data word @d: the XOR of the columns of its 1 bits. */
uint8_t ref_secded_check(uint64_t d);

/* The stored codeword of data @d (@codec's wb bytes at @w). */
void ref_word(int codec, uint64_t d, uint8_t *w);

/* Bits [pos, pos + k) of the LSB-first stream @p, one bit at a time. */
uint64_t ref_get_bits(const uint8_t *p, size_t pos, unsigned int k);
/* Set bits [pos, pos + k) of @p to the low @k bits of @v. */
void ref_put_bits(uint8_t *p, size_t pos, unsigned int k, uint64_t v);
/* The @nbytes little-endian bytes at @w as a number (nbytes <= 8). */
uint64_t ref_get_le(const uint8_t *w, unsigned int nbytes);
/* @v as @nbytes little-endian bytes at @w. */
void ref_put_le(uint8_t *w, unsigned int nbytes, uint64_t v);

/*
 * CRC-32C of @len bytes at @buf continuing @crc (0 to start), the textbook
 * bit-at-a-time loop over the reflected polynomial 0x82f63b78, no tables.
 */
uint32_t ref_crc32c(uint32_t crc, const void *buf, size_t len);

/* Deterministic test data: splitmix64, state in @s. */
uint64_t ref_rnd(uint64_t *s);

#endif /* KVMEM_ECC_REF_H */
