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

static uint64_t load64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/*
 * A CRC32 step waits for the one before it in its run (three cycles),
 * so four runs side by side keep the unit busy: a page's rows are short
 * (a vq2 row of head_dim 128 is four steps), and one at a time spent most
 * of its time waiting.
 */
void kvmem__crc32c_runs_sse42(const void *buf, size_t len, size_t total,
			      size_t n, uint32_t *out)
{
	const uint8_t *p = buf;
	size_t j = 0, k;

	for (; j + 4 <= n && (j + 4) * len <= total; j += 4) {
		const uint8_t *r = p + j * len;
		uint64_t c0 = 0xffffffffu, c1 = c0, c2 = c0, c3 = c0;

		for (k = 0; k + 8 <= len; k += 8) {
			c0 = _mm_crc32_u64(c0, load64(r + k));
			c1 = _mm_crc32_u64(c1, load64(r + len + k));
			c2 = _mm_crc32_u64(c2, load64(r + 2 * len + k));
			c3 = _mm_crc32_u64(c3, load64(r + 3 * len + k));
		}
		for (; k < len; k++) {
			c0 = _mm_crc32_u8((uint32_t)c0, r[k]);
			c1 = _mm_crc32_u8((uint32_t)c1, r[len + k]);
			c2 = _mm_crc32_u8((uint32_t)c2, r[2 * len + k]);
			c3 = _mm_crc32_u8((uint32_t)c3, r[3 * len + k]);
		}
		out[j] = ~(uint32_t)c0;
		out[j + 1] = ~(uint32_t)c1;
		out[j + 2] = ~(uint32_t)c2;
		out[j + 3] = ~(uint32_t)c3;
	}
	for (; j < n; j++)
		out[j] = kvmem__crc32c_sse42(
			0, p + j * len,
			total - j * len < len ? total - j * len : len);
}
