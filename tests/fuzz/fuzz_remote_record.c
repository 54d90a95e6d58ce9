/* SPDX-License-Identifier: MIT */
/*
 * fuzz_remote_record.c - what kvmemd makes of a record the shared tier
 * hands back: served only if it is the block asked for
 *
 * A good record of a block is made once (two layers of pages encoded from
 * random K/V, as a publish keeps them). Input: a byte of flags (bit 0:
 * cut the record short by the next byte's worth), then (offset: 3 bytes
 * little-endian, xor: 1 byte) pairs flipped into it. A record the check
 * takes (good, or good once repaired) must be the block as it was made:
 * its header and seals, and pages that read back as the same headers and
 * K/V, bit for bit. (Not the same bytes: a word of the page header that
 * a fault turned into another codeword of the same data stays so.)
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../daemon/prefix.h"
#include "../../daemon/remote.h"
#include "fuzz_daemon.h"

#define LAYERS 2

static struct kvmem_geometry g;
static struct kvmemd_remote_want want;
static uint8_t hash[KVMEM_PREFIX_KEY_BYTES], parent[KVMEM_PREFIX_KEY_BYTES];
static uint8_t *good, *rec;
static size_t good_len, page_bytes;
static float *kv[4]; /* K and V of the good page and of the one read */

static void make_good(void)
{
	struct kvmemd_prefix_page seals[LAYERS];
	struct kvmemd_prefix_block b;
	struct kvmem_page_layout l;
	struct kvmem_page_hdr h;
	float *k, *v;
	size_t i, n;
	uint32_t layer;

	g = (struct kvmem_geometry){ .layers = LAYERS, .kv_heads = 2,
				     .head_dim = 64 };
	kvmem_geometry_default(&g);
	if (kvmem_page_layout(&g, 0, &l))
		abort();
	n = (size_t)g.tokens_per_page * g.kv_heads * g.head_dim;
	k = malloc(n * sizeof(*k));
	v = malloc(n * sizeof(*v));
	memset(&b, 0, sizeof(b));
	b.data = calloc(LAYERS, l.size);
	if (!k || !v || !b.data)
		abort();
	srand(4242);
	for (i = 0; i < n; i++) {
		k[i] = (float)(rand() % 2001 - 1000) / 250.0f;
		v[i] = (float)(rand() % 2001 - 1000) / 250.0f;
	}
	for (i = 0; i < sizeof(hash); i++) {
		hash[i] = (uint8_t)(0x30 + i);
		parent[i] = (uint8_t)(0xc0 ^ i);
	}
	for (layer = 0; layer < LAYERS; layer++) {
		memset(&h, 0, sizeof(h));
		h.seq = 1;
		h.layer = layer;
		h.token_start = g.sink_tokens;
		h.ntokens = g.tokens_per_page;
		h.flags = KVMEM_HDR_SEALED;
		h.generation = 7 + layer;
		if (kvmem_page_encode(b.data + layer * l.size, &g, &h, 0, k,
				      v) ||
		    kvmem_page_read_header(b.data + layer * l.size, &g, &h,
					   NULL))
			abort();
		seals[layer].crc = h.crc;
		seals[layer].hdr_flags = h.flags;
		seals[layer].generation = h.generation;
	}
	memcpy(b.key, hash, sizeof(b.key));
	b.g = g;
	b.digest = kvmem_geometry_digest(&g);
	b.token_start = g.sink_tokens;
	b.ntokens = g.tokens_per_page;
	b.layers = LAYERS;
	b.page_bytes = (uint32_t)l.size;
	b.kind = KVMEM_SLOT_SEALED;
	b.layout = l;
	b.pages = seals;
	b.tenant = 1000;
	page_bytes = l.size;
	for (i = 0; i < 4; i++) {
		kv[i] = malloc(n * sizeof(float));
		if (!kv[i])
			abort();
	}
	good = kvmemd_remote_record(&b, parent, &good_len);
	rec = malloc(good_len);
	if (!good || !rec)
		abort();
	kvmemd_remote_record_seal(good, good_len);
	want = (struct kvmemd_remote_want){
		.g = &g,
		.tenant = 1000,
		.fingerprint = kvmemd_remote_fingerprint(&g, KVMEM_SLOT_SEALED,
							 (uint32_t)l.size),
		.hash = hash,
		.parent = parent,
		.token_start = g.sink_tokens,
		.ntokens = g.tokens_per_page,
		.page_bytes = (uint32_t)l.size,
		.kind = KVMEM_SLOT_SEALED,
	};
	free(k);
	free(v);
	free(b.data);
}

static void fail(enum kvmemd_remote_verdict verdict, const char *what)
{
	fprintf(stderr, "remote record: %s, but %s\n",
		kvmemd_remote_verdict_names[verdict], what);
	abort();
}

/* Page @l of @a and of @b: the same header and K/V? */
static int same_page(const uint8_t *a, const uint8_t *b, uint32_t l)
{
	const size_t at = sizeof(struct kvmemd_remote_hdr) +
			  LAYERS * sizeof(struct kvmemd_remote_seal) +
			  l * page_bytes;
	const size_t n = (size_t)g.tokens_per_page * g.kv_heads * g.head_dim;
	struct kvmem_page_hdr ha, hb;

	if (kvmem_page_read_header(a + at, &g, &ha, NULL) ||
	    kvmem_page_read_header(b + at, &g, &hb, NULL) ||
	    memcmp(&ha, &hb, sizeof(ha)) ||
	    kvmem_page_decode(a + at, &g, kv[0], kv[1], NULL, NULL) !=
		    (int)g.tokens_per_page ||
	    kvmem_page_decode(b + at, &g, kv[2], kv[3], NULL, NULL) !=
		    (int)g.tokens_per_page)
		return 0;
	return !memcmp(kv[0], kv[2], n * sizeof(float)) &&
	       !memcmp(kv[1], kv[3], n * sizeof(float));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvmem_ecc_counts counts = { 0 };
	enum kvmemd_remote_verdict verdict;
	size_t len, i, off;

	if (!good)
		make_good();
	memcpy(rec, good, good_len);
	len = good_len;
	if (size >= 2 && (data[0] & 1))
		len -= data[1] + 1;
	for (i = 2; i + 4 <= size; i += 4) {
		off = data[i] | (size_t)data[i + 1] << 8 |
		      (size_t)data[i + 2] << 16;
		rec[off % len] ^= data[i + 3];
	}
	verdict = kvmemd_remote_record_check(rec, len, &want, &counts);
	if (verdict >= KVMEMD_REMOTE_VERDICTS)
		abort();
	if (verdict != KVMEMD_REMOTE_GOOD && verdict != KVMEMD_REMOTE_REPAIRED)
		return 0;
	if (len != good_len)
		fail(verdict, "cut short");
	/* The header but its CRCs, and the seals. */
	if (memcmp(rec, good, offsetof(struct kvmemd_remote_hdr, payload_crc)) ||
	    memcmp(rec + sizeof(struct kvmemd_remote_hdr),
		   good + sizeof(struct kvmemd_remote_hdr),
		   LAYERS * sizeof(struct kvmemd_remote_seal)))
		fail(verdict, "not the block's header and seals");
	for (i = 0; i < LAYERS; i++)
		if (!same_page(rec, good, (uint32_t)i))
			fail(verdict, "a page is not the block's");
	return 0;
}
