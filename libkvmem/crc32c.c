/* SPDX-License-Identifier: MIT */
/*
 * crc32c.c - CRC-32C (Castagnoli), table-driven with an SSE4.2 fast path
 *
 * The portable path is slicing-by-8: eight 256-entry tables let one step
 * consume eight bytes, table k holding the CRC of a byte followed by k zero
 * bytes. Both paths keep the CRC register inverted internally and take and
 * return the finished (non-inverted) value, so calls chain.
 */
#include <pthread.h>

#include "kvmem/crc32c.h"
#include "internal.h"

#define CRC32C_POLY 0x82f63b78u /* reflected 0x1edc6f41 */

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_table_init(void)
{
	uint32_t c;
	unsigned int i, k;

	for (i = 0; i < 256; i++) {
		c = i;
		for (k = 0; k < 8; k++)
			c = c >> 1 ^ (CRC32C_POLY & (0u - (c & 1)));
		crc_table[0][i] = c;
	}
	for (i = 0; i < 256; i++)
		for (k = 1; k < 8; k++)
			crc_table[k][i] =
				crc_table[k - 1][i] >> 8 ^
				crc_table[0][crc_table[k - 1][i] & 0xff];
}

uint32_t kvmem__crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint32_t c = ~crc;

	pthread_once(&crc_once, crc_table_init);
	for (; len >= 8; len -= 8, p += 8) {
		uint32_t lo = c ^ (p[0] | (uint32_t)p[1] << 8 |
				   (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);

		c = crc_table[7][lo & 0xff] ^ crc_table[6][lo >> 8 & 0xff] ^
		    crc_table[5][lo >> 16 & 0xff] ^ crc_table[4][lo >> 24] ^
		    crc_table[3][p[4]] ^ crc_table[2][p[5]] ^
		    crc_table[1][p[6]] ^ crc_table[0][p[7]];
	}
	while (len--)
		c = c >> 8 ^ crc_table[0][(c ^ *p++) & 0xff];
	return ~c;
}

/* Whether the CPU has the CRC32 instruction, asked once. */
static int crc_hw(void)
{
	static int hw = -1;
	int use = __atomic_load_n(&hw, __ATOMIC_RELAXED);

	if (use < 0) {
		use = kvmem__cpu_has_sse42();
		__atomic_store_n(&hw, use, __ATOMIC_RELAXED);
	}
	return use;
}

uint32_t kvmem_crc32c(uint32_t crc, const void *buf, size_t len)
{
	if (crc_hw())
		return kvmem__crc32c_sse42(crc, buf, len);
	return kvmem__crc32c_sw(crc, buf, len);
}

void kvmem__crc32c_runs_sw(const void *buf, size_t len, size_t total, size_t n,
			   uint32_t *out)
{
	const uint8_t *p = buf;
	size_t j;

	for (j = 0; j < n; j++)
		out[j] = kvmem__crc32c_sw(
			0, p + j * len,
			total - j * len < len ? total - j * len : len);
}

void kvmem__crc32c_runs(const void *buf, size_t len, size_t total, size_t n,
			uint32_t *out)
{
	if (crc_hw())
		kvmem__crc32c_runs_sse42(buf, len, total, n, out);
	else
		kvmem__crc32c_runs_sw(buf, len, total, n, out);
}
