/* SPDX-License-Identifier: MIT */
/*
 * bitstream.h - bit access to a buffer seen as one bitstream
 *
 * Stream bit p is bit p % 8 of byte p / 8, as in kvmem/ecc.h; a field of
 * k <= 64 bits is read and written LSB first.
 *
 * Included by kvmem-ecc.c, bench-ber.c and bench-codec.c.
 */
#ifndef KVMEM_TOOLS_BITSTREAM_H
#define KVMEM_TOOLS_BITSTREAM_H

#include <stdint.h>

/* Stream bits [pos, pos + k) as a value, k <= 64. */
static inline uint64_t get_bits(const uint8_t *s, uint64_t pos, unsigned int k)
{
	uint64_t v = 0;
	unsigned int i;

	for (i = 0; i < k; i++, pos++)
		v |= (uint64_t)(s[pos / 8] >> (pos % 8) & 1) << i;
	return v;
}

/*
 * OR the low @k bits of @v into stream bits [pos, pos + k), k <= 64: the
 * stream bits must be clear beforehand (a zeroed buffer filled in order).
 */
static inline void put_bits(uint8_t *s, uint64_t pos, uint64_t v,
			    unsigned int k)
{
	unsigned int i;

	for (i = 0; i < k; i++, pos++)
		if (v >> i & 1)
			s[pos / 8] |= (uint8_t)(1u << (pos % 8));
}

#endif /* KVMEM_TOOLS_BITSTREAM_H */
