/* SPDX-License-Identifier: MIT */
/*
 * sha256.c - SHA-256 as FIPS 180-4 defines it, in portable C
 *
 * The message is padded with a 1 bit, zeros and its length in bits as a
 * big-endian 64-bit word to a multiple of 512 bits; each 512-bit block
 * extends the chaining value by 64 rounds of the compression function
 * (section 6.2.2), over a schedule of 64 words expanded from the block's
 * 16. The constants are the first 32 bits of the fractional parts of the
 * square roots (initial value) and cube roots (round constants) of the
 * first primes (sections 4.2.2, 5.3.3). Words are big-endian throughout,
 * whatever the host's order.
 *
 * The keys of prefix blocks hash a few KiB per block, next to the
 * megabytes of K/V a block holds, so this plain loop is no bottleneck.
 */
#include <string.h>

#include "sha256.h"

static const uint32_t sha256_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
	0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
	0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
	0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
	0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
	0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
	0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t ror32(uint32_t x, unsigned int n)
{
	return x >> n | x << (32 - n);
}

static inline uint32_t load_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static inline void store_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* Section 6.2.2: one 64-byte block into the chaining value @h. */
static void sha256_block(uint32_t h[8], const uint8_t *p)
{
	uint32_t w[64], a, b, c, d, e, f, g, hh, t1, t2;
	unsigned int i;

	for (i = 0; i < 16; i++)
		w[i] = load_be32(p + 4 * i);
	for (; i < 64; i++) {
		uint32_t s0 = ror32(w[i - 15], 7) ^ ror32(w[i - 15], 18) ^
			      w[i - 15] >> 3;
		uint32_t s1 = ror32(w[i - 2], 17) ^ ror32(w[i - 2], 19) ^
			      w[i - 2] >> 10;

		w[i] = s1 + w[i - 7] + s0 + w[i - 16];
	}
	a = h[0];
	b = h[1];
	c = h[2];
	d = h[3];
	e = h[4];
	f = h[5];
	g = h[6];
	hh = h[7];
	for (i = 0; i < 64; i++) {
		t1 = hh + (ror32(e, 6) ^ ror32(e, 11) ^ ror32(e, 25)) +
		     ((e & f) ^ (~e & g)) + sha256_k[i] + w[i];
		t2 = (ror32(a, 2) ^ ror32(a, 13) ^ ror32(a, 22)) +
		     ((a & b) ^ (a & c) ^ (b & c));
		hh = g;
		g = f;
		f = e;
		e = d + t1;
		d = c;
		c = b;
		b = a;
		a = t1 + t2;
	}
	h[0] += a;
	h[1] += b;
	h[2] += c;
	h[3] += d;
	h[4] += e;
	h[5] += f;
	h[6] += g;
	h[7] += hh;
}

void kvmem__sha256_init(struct kvmem__sha256 *ctx)
{
	static const uint32_t iv[8] = {
		0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
		0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
	};

	memcpy(ctx->h, iv, sizeof(iv));
	ctx->len = 0;
}

void kvmem__sha256_update(struct kvmem__sha256 *ctx, const void *data,
			  size_t len)
{
	const uint8_t *p = data;
	size_t fill = ctx->len % KVMEM_SHA256_BLOCK, take;

	/* memcpy() from NULL is undefined even for 0 bytes. */
	if (!len)
		return;
	ctx->len += len;
	if (fill) {
		take = KVMEM_SHA256_BLOCK - fill;
		if (take > len)
			take = len;
		memcpy(ctx->buf + fill, p, take);
		p += take;
		len -= take;
		if (fill + take < KVMEM_SHA256_BLOCK)
			return;
		sha256_block(ctx->h, ctx->buf);
	}
	for (; len >= KVMEM_SHA256_BLOCK;
	     len -= KVMEM_SHA256_BLOCK, p += KVMEM_SHA256_BLOCK)
		sha256_block(ctx->h, p);
	memcpy(ctx->buf, p, len);
}

void kvmem__sha256_final(struct kvmem__sha256 *ctx,
			 uint8_t out[KVMEM_SHA256_BYTES])
{
	uint64_t bits = ctx->len * 8;
	size_t fill = ctx->len % KVMEM_SHA256_BLOCK;
	unsigned int i;

	/* Section 5.1.1: the 1 bit, then zeros to 56 bytes mod 64, a whole
	 * block of them when the length no longer fits in this one. */
	ctx->buf[fill++] = 0x80;
	if (fill > KVMEM_SHA256_BLOCK - 8) {
		memset(ctx->buf + fill, 0, KVMEM_SHA256_BLOCK - fill);
		sha256_block(ctx->h, ctx->buf);
		fill = 0;
	}
	memset(ctx->buf + fill, 0, KVMEM_SHA256_BLOCK - 8 - fill);
	store_be32(ctx->buf + 56, (uint32_t)(bits >> 32));
	store_be32(ctx->buf + 60, (uint32_t)bits);
	sha256_block(ctx->h, ctx->buf);
	for (i = 0; i < 8; i++)
		store_be32(out + 4 * i, ctx->h[i]);
}

void kvmem__sha256(const void *data, size_t len,
		   uint8_t out[KVMEM_SHA256_BYTES])
{
	struct kvmem__sha256 ctx;

	kvmem__sha256_init(&ctx);
	kvmem__sha256_update(&ctx, data, len);
	kvmem__sha256_final(&ctx, out);
}
