/*
 * internal.h - libkvmem internals shared between its source files
 *
 * Never installed. Symbols declared here are kvmem__*: visible in the static
 * library (the tests and tools use some), not exported from libkvmem.so.
 */
#ifndef KVMEM_INTERNAL_H
#define KVMEM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kvmem/ecc.h"

#define KVMEM_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/*
 * SIMD code paths. The active one is picked on first use from the CPU's
 * features, or forced to portable with KVMEM_SIMD=portable in the
 * environment; tests and benchmarks switch it with kvmem__simd_force().
 */
enum kvmem__simd {
	KVMEM__SIMD_PORTABLE = 0,
	KVMEM__SIMD_AVX2 = 1,
	KVMEM__SIMD_NR,
};

int kvmem__simd_active(void);
int kvmem__simd_supported(int level);
int kvmem__simd_force(int level);
const char *kvmem__simd_name(int level);
int kvmem__cpu_has_sse42(void);

/*
 * Bulk kernels of one codec. @data always starts on a word boundary that is
 * also a byte boundary of the bitstream (an even word for h74/h84/golay24).
 *
 * scan:    index of the first word in [0, nwords) with a non-zero syndrome,
 *          or nwords
 * encode:  nwords codewords from the bitstream
 * extract: the data bits of nwords codewords as received, unchecked; spare
 *          bits of the last byte are zero
 */
struct kvmem__ecc_kernels {
	size_t (*scan)(const uint8_t *code, size_t nwords);
	void (*encode)(const uint8_t *data, uint8_t *code, size_t nwords);
	void (*extract)(const uint8_t *code, uint8_t *data, size_t nwords);
};

extern const struct kvmem__ecc_kernels kvmem__ecc_portable[KVMEM_CODEC_NR];
extern const struct kvmem__ecc_kernels kvmem__ecc_avx2[KVMEM_CODEC_NR];

/* Tables derived once from the per-word functions of ecc_word.h. */
struct kvmem__ecc_tables {
	uint16_t golay_parity[4096]; /* d.B for every 12-bit d */
	uint32_t golay_error[4096]; /* syndrome -> error, ~0 = beyond */
	uint8_t secded_check[8][256]; /* check bits fed by byte k of data */
	/* Nibble tables for pshufb, linear pieces of the maps above. */
	uint8_t h74_syn[2][16]; /* [lo/hi nibble]: syndrome | bit7 << 3 */
	uint8_t h84_syn[2][16]; /* [lo/hi nibble]: kvmem_h84_syndrome */
	uint8_t h74_enc[16];
	uint8_t h84_enc[16];
	uint8_t golay_par[3][2][16]; /* [nibble k][low/high byte][n] */
};

const struct kvmem__ecc_tables *kvmem__ecc_tables(void);

uint32_t kvmem__crc32c_sw(uint32_t crc, const void *buf, size_t len);
uint32_t kvmem__crc32c_sse42(uint32_t crc, const void *buf, size_t len);

#endif /* KVMEM_INTERNAL_H */
