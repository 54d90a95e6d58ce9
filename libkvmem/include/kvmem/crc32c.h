/* SPDX-License-Identifier: MIT */
/*
 * kvmem/crc32c.h - CRC-32C (Castagnoli), as used on the backing store
 *
 * Reflected polynomial 0x82f63b78, initial value and final XOR 0xffffffff:
 * the iSCSI / ext4 / NVMe CRC. The check value of "123456789" is 0xe3069283.
 */
#ifndef KVMEM_CRC32C_H
#define KVMEM_CRC32C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * kvmem_crc32c() - CRC-32C of a buffer, resumable
 * @crc: 0 to start, or the value returned for the preceding bytes
 * @buf: the bytes
 * @len: their number
 *
 * kvmem_crc32c(kvmem_crc32c(0, a, n), b, m) equals the CRC of a followed by
 * b. Uses the SSE4.2 CRC32 instruction when the CPU has it.
 *
 * Context: any thread; does not block.
 * Return: the CRC.
 */
uint32_t kvmem_crc32c(uint32_t crc, const void *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* KVMEM_CRC32C_H */
