/* SPDX-License-Identifier: MIT */
/*
 * prefix-key.c - the keys of a sequence's prefix blocks, from its tokens
 *
 * Construction: a SHA-256 chain over the blocks, each token written as 4
 * bytes little-endian:
 *
 *   h_0 = SHA-256(tokens of block 0)
 *   h_i = SHA-256(h_{i-1} || tokens of block i)
 *
 * which is how SGLang's HiCache names its pages (get_hash_str(), the
 * prior page's digest fed as its 32 raw bytes), so that a remote tier
 * shared with HiCache connectors holds pages under the same names and
 * nobody translates keys. Chaining makes block i's key depend on every
 * token from 0 to the block's end, as kvmem_prefix_publish() requires.
 *
 * A model string seeds the chain, h_{-1} = SHA-256(model) and h_0 =
 * SHA-256(h_{-1} || tokens of block 0), so that two models' keys for the
 * same tokens differ; without one the chain is HiCache's exactly. Where
 * blocks end is the geometry's (kvmem__prefix_block_range()): with sink
 * tokens, block 0 is the sink page, shorter than the others.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "cache.h"
#include "sha256.h"

_Static_assert(KVMEM_PREFIX_KEY_BYTES == KVMEM_SHA256_BYTES,
	       "a prefix key is a SHA-256 digest");

/* Feed @n tokens as 4-byte little-endian words, whatever the host's order. */
static void hash_tokens(struct kvmem__sha256 *ctx, const uint32_t *tokens,
			uint32_t n)
{
	uint8_t buf[256];
	uint32_t i, chunk;

	while (n) {
		chunk = n < sizeof(buf) / 4 ? n : sizeof(buf) / 4;
		for (i = 0; i < chunk; i++) {
			buf[4 * i] = (uint8_t)tokens[i];
			buf[4 * i + 1] = (uint8_t)(tokens[i] >> 8);
			buf[4 * i + 2] = (uint8_t)(tokens[i] >> 16);
			buf[4 * i + 3] = (uint8_t)(tokens[i] >> 24);
		}
		kvmem__sha256_update(ctx, buf, 4 * (size_t)chunk);
		tokens += chunk;
		n -= chunk;
	}
}

int kvmem_prefix_keys(const struct kvmem_cache *c, const char *model,
		      const uint32_t *tokens, uint32_t ntokens,
		      struct kvmem_prefix_key *keys, uint32_t nkeys)
{
	uint8_t seed[KVMEM_SHA256_BYTES];
	const uint8_t *prev = NULL;
	struct kvmem__sha256 ctx;
	uint32_t i, start, n;

	if (!c || (ntokens && !tokens) || (nkeys && !keys))
		return -EINVAL;
	if (model && *model) {
		kvmem__sha256(model, strlen(model), seed);
		prev = seed;
	}
	/* The count is returned as an int: no more than INT_MAX keys. */
	for (i = 0; i < nkeys && i < INT_MAX; i++) {
		if (kvmem__prefix_block_range(&c->g, i, &start, &n) ||
		    (uint64_t)start + n > ntokens)
			break;
		kvmem__sha256_init(&ctx);
		if (prev)
			kvmem__sha256_update(&ctx, prev, KVMEM_SHA256_BYTES);
		hash_tokens(&ctx, tokens + start, n);
		kvmem__sha256_final(&ctx, keys[i].bytes);
		prev = keys[i].bytes;
	}
	return (int)i;
}
