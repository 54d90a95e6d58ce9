/* SPDX-License-Identifier: MIT */
/*
 * crc32c_sse42.c - CRC-32C with the SSE4.2 CRC32 instruction (built with
 * -msse4.2, reached only after a runtime check)
 */
#include <nmmintrin.h>
#include <string.h>

#include "internal.h"

uint32_t kvmem__crc32c_sse42(uint32_t crc, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint64_t c = ~crc;

	for (; len >= 8; len -= 8, p += 8) {
		uint64_t v;

		memcpy(&v, p, sizeof(v));
		c = _mm_crc32_u64(c, v);
	}
	while (len--)
		c = _mm_crc32_u8((uint32_t)c, *p++);
	return ~(uint32_t)c;
}
