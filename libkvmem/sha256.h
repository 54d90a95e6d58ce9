/* SPDX-License-Identifier: MIT */
/*
 * sha256.h - SHA-256 (FIPS 180-4), for the keys of prefix blocks
 *
 * Private to libkvmem and never installed; its symbols stay local to the
 * shared library (libkvmem.map).
 */
#ifndef KVMEM_SHA256_H
#define KVMEM_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define KVMEM_SHA256_BYTES 32
#define KVMEM_SHA256_BLOCK 64

/* A hash in progress: the chaining value and the message's unhashed tail. */
struct kvmem__sha256 {
	uint32_t h[8];
	uint64_t len; /* bytes fed so far; len % 64 of them wait in buf */
	uint8_t buf[KVMEM_SHA256_BLOCK];
};

void kvmem__sha256_init(struct kvmem__sha256 *ctx);
/* Feed @len bytes; any split of a message gives the same digest. */
void kvmem__sha256_update(struct kvmem__sha256 *ctx, const void *data,
			  size_t len);
/* Pad and write the digest to @out; @ctx must be initialised again to reuse. */
void kvmem__sha256_final(struct kvmem__sha256 *ctx,
			 uint8_t out[KVMEM_SHA256_BYTES]);
/* The digest of @len bytes at @data. */
void kvmem__sha256(const void *data, size_t len,
		   uint8_t out[KVMEM_SHA256_BYTES]);

#endif /* KVMEM_SHA256_H */
