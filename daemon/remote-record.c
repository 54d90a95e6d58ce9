/* SPDX-License-Identifier: MIT */
/*
 * remote-record.c - a published block's record in the shared tier: its
 * key, laid out and checked
 *
 * A record holds what a block is (remote.h: the header, a seal per layer,
 * the pages with their code words), so that a kvmemd on another machine
 * can check it against nothing but the key it asked for and its own
 * geometry. What the store gives back is a stranger's bytes: every
 * length is checked before anything it covers is read.
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmem/crc32c.h"
#include "kvmem-private.h"
#include "prefix.h"
#include "remote.h"

_Static_assert(sizeof(struct kvmemd_remote_hdr) == 128,
	       "the record header is 128 bytes");
_Static_assert(sizeof(struct kvmemd_remote_seal) == 16, "a seal is 16 bytes");
_Static_assert(__BYTE_ORDER == __LITTLE_ENDIAN,
	       "records are little-endian, as kvmemd's memory");

const char *const kvmemd_remote_verdict_names[KVMEMD_REMOTE_VERDICTS] = {
	[KVMEMD_REMOTE_GOOD] = "good",
	[KVMEMD_REMOTE_REPAIRED] = "repaired",
	[KVMEMD_REMOTE_BAD_HEADER] = "header",
	[KVMEMD_REMOTE_BAD_TENANT] = "tenant",
	[KVMEMD_REMOTE_BAD_SHAPE] = "shape",
	[KVMEMD_REMOTE_BAD_CHAIN] = "chain",
	[KVMEMD_REMOTE_BAD_PAYLOAD] = "payload",
	[KVMEMD_REMOTE_BAD_PAGE] = "page",
};

static uint64_t fnv(uint64_t h, uint64_t v)
{
	int i;

	for (i = 0; i < 8; i++) {
		h ^= (v >> (8 * i)) & 0xff;
		h *= 0x100000001b3ull;
	}
	return h;
}

uint64_t kvmemd_remote_fingerprint(const struct kvmem_geometry *g, int kind,
				   uint32_t page_bytes)
{
	uint64_t h = kvmem_geometry_digest(g);

	h = fnv(h, KVMEMD_REMOTE_VERSION);
	h = fnv(h, (uint64_t)kind);
	return fnv(h, page_bytes);
}

int kvmemd_remote_key(char *buf, size_t len, uint64_t tenant,
		      uint64_t fingerprint, const uint8_t *hash)
{
	char hex[2 * KVMEM_PREFIX_KEY_BYTES + 1];
	int i;

	for (i = 0; i < KVMEM_PREFIX_KEY_BYTES; i++)
		snprintf(hex + 2 * i, 3, "%02x", hash[i]);
	return snprintf(
		buf, len, "kvmem:%d:%c%" PRIu64 ":%016" PRIx64 ":{%s}",
		KVMEMD_REMOTE_VERSION, tenant & KVMEMD_TENANT_GROUP ? 'g' : 'u',
		(uint64_t)(tenant & ~KVMEMD_TENANT_GROUP), fingerprint, hex);
}

size_t kvmemd_remote_record_len(uint32_t layers, uint32_t page_bytes)
{
	return sizeof(struct kvmemd_remote_hdr) +
	       (size_t)layers *
		       (sizeof(struct kvmemd_remote_seal) + page_bytes);
}

void kvmemd_remote_record_fill(const struct kvmemd_prefix_block *b,
			       const uint8_t *parent, uint8_t *rec)
{
	const size_t n = kvmemd_remote_record_len(b->layers, b->page_bytes);
	struct kvmemd_remote_hdr *h = (struct kvmemd_remote_hdr *)rec;
	struct kvmemd_remote_seal *seals;
	uint32_t l;

	memset(h, 0, sizeof(*h));
	h->magic = KVMEMD_REMOTE_MAGIC;
	h->version = KVMEMD_REMOTE_VERSION;
	h->kind = b->kind;
	h->format = b->layout.format;
	h->codec = b->layout.codec;
	h->tenant = b->tenant;
	h->fingerprint =
		kvmemd_remote_fingerprint(&b->g, b->kind, b->page_bytes);
	memcpy(h->hash, b->key, sizeof(h->hash));
	if (parent)
		memcpy(h->parent, parent, sizeof(h->parent));
	h->token_start = b->token_start;
	h->ntokens = b->ntokens;
	h->layers = b->layers;
	h->page_bytes = b->page_bytes;
	h->payload_len = n - sizeof(*h);
	seals = (struct kvmemd_remote_seal *)(h + 1);
	for (l = 0; l < b->layers; l++) {
		seals[l].crc = b->pages[l].crc;
		seals[l].hdr_flags = b->pages[l].hdr_flags;
		seals[l].generation = b->pages[l].generation;
	}
	memcpy(seals + b->layers, b->data, (size_t)b->layers * b->page_bytes);
}

uint8_t *kvmemd_remote_record(const struct kvmemd_prefix_block *b,
			      const uint8_t *parent, size_t *len)
{
	const size_t n = kvmemd_remote_record_len(b->layers, b->page_bytes);
	uint8_t *rec = malloc(n);

	if (!rec)
		return NULL;
	kvmemd_remote_record_fill(b, parent, rec);
	*len = n;
	return rec;
}

void kvmemd_remote_record_unpack(const uint8_t *rec,
				 struct kvmemd_prefix_block *b)
{
	const struct kvmemd_remote_seal *seals =
		(const void *)(rec + sizeof(struct kvmemd_remote_hdr));
	uint32_t l;

	for (l = 0; l < b->layers; l++) {
		b->pages[l].crc = seals[l].crc;
		b->pages[l].hdr_flags = seals[l].hdr_flags;
		b->pages[l].generation = seals[l].generation;
	}
	memcpy(b->data, seals + b->layers, (size_t)b->layers * b->page_bytes);
	b->staged = b->layers;
}

void kvmemd_remote_record_seal(uint8_t *rec, size_t len)
{
	struct kvmemd_remote_hdr *h = (struct kvmemd_remote_hdr *)rec;

	h->payload_crc = kvmem_crc32c(0, rec + sizeof(*h), len - sizeof(*h));
	h->hcrc = 0;
	h->hcrc = kvmem_crc32c(0, h, sizeof(*h));
}

static void counts_add(struct kvmem_ecc_counts *to,
		       const struct kvmem_page_counts *c)
{
	to->clean += c->header.clean + c->scales.clean + c->payload.clean;
	to->corrected += c->header.corrected + c->scales.corrected +
			 c->payload.corrected;
	to->uncorrectable += c->header.uncorrectable + c->scales.uncorrectable +
			     c->payload.uncorrectable;
	to->bits_corrected += c->header.bits_corrected +
			      c->scales.bits_corrected +
			      c->payload.bits_corrected;
}

/*
 * Page @l of a record, its seal @seal: good as it is (0), good once
 * corrected (1), or not (-EBADMSG). With @scrub (the payload CRC did not
 * match), scrubbed whatever its words say: a flipped byte that carries no
 * value goes back to the encoder's zero.
 */
static int page_check(uint8_t *page, const struct kvmemd_remote_want *w,
		      uint32_t l, const struct kvmemd_remote_seal *seal,
		      int scrub, struct kvmem_ecc_counts *counts)
{
	struct kvmem_page_counts c;
	struct kvmem_page_hdr h;
	int bad;

	memset(&c, 0, sizeof(c));
	bad = kvmem_page_verify(page, w->g, &c);
	counts_add(counts, &c);
	if (bad || scrub) {
		if (kvmem_page_scrub(page, w->g, NULL) ||
		    kvmem_page_verify(page, w->g, NULL))
			return -EBADMSG;
	}
	/* The page is the one the seal names, and the block's. */
	if (kvmem_page_read_header(page, w->g, &h, NULL) ||
	    !(h.flags & KVMEM_HDR_SEALED) || h.crc != seal->crc ||
	    h.flags != seal->hdr_flags || h.generation != seal->generation ||
	    h.layer != l || h.token_start != w->token_start ||
	    h.ntokens != w->ntokens ||
	    !!(h.flags & KVMEM_HDR_HOT) != (w->kind == KVMEM_SLOT_HOT))
		return -EBADMSG;
	return bad || scrub;
}

enum kvmemd_remote_verdict
kvmemd_remote_record_check(uint8_t *rec, size_t len,
			   const struct kvmemd_remote_want *w,
			   struct kvmem_ecc_counts *counts)
{
	static const uint8_t none[KVMEM_PREFIX_KEY_BYTES];
	struct kvmemd_remote_hdr h;
	const struct kvmemd_remote_seal *seals;
	uint8_t *pages;
	uint32_t l, hcrc;
	int fixed = 0, scrub, ret;

	if (len < sizeof(h))
		return KVMEMD_REMOTE_BAD_HEADER;
	memcpy(&h, rec, sizeof(h));
	hcrc = h.hcrc;
	h.hcrc = 0;
	if (h.magic != KVMEMD_REMOTE_MAGIC ||
	    h.version != KVMEMD_REMOTE_VERSION ||
	    hcrc != kvmem_crc32c(0, &h, sizeof(h)) ||
	    h.payload_len != len - sizeof(h))
		return KVMEMD_REMOTE_BAD_HEADER;
	if (h.tenant != w->tenant)
		return KVMEMD_REMOTE_BAD_TENANT;
	/* Another key's record, whatever else it is. */
	if (memcmp(h.hash, w->hash, sizeof(h.hash)) ||
	    memcmp(h.parent, w->parent ? w->parent : none, sizeof(h.parent)))
		return KVMEMD_REMOTE_BAD_CHAIN;
	if (h.fingerprint != w->fingerprint || h.kind != w->kind ||
	    h.layers != w->g->layers || h.page_bytes != w->page_bytes ||
	    h.token_start != w->token_start || h.ntokens != w->ntokens ||
	    h.payload_len != kvmemd_remote_record_len(h.layers, h.page_bytes) -
				     sizeof(h))
		return KVMEMD_REMOTE_BAD_SHAPE;
	/* A payload that is not what was written may still be the block:
	 * the pages carry their own code and CRC, and a seal that changed
	 * no longer matches its page's header, which the code protects. */
	scrub = h.payload_crc !=
		kvmem_crc32c(0, rec + sizeof(h), h.payload_len);
	seals = (const struct kvmemd_remote_seal *)(rec + sizeof(h));
	pages = rec + sizeof(h) + (size_t)h.layers * sizeof(*seals);
	for (l = 0; l < h.layers; l++) {
		ret = page_check(pages + (size_t)l * h.page_bytes, w, l,
				 &seals[l], scrub, counts);
		if (ret < 0)
			return scrub ? KVMEMD_REMOTE_BAD_PAYLOAD
				     : KVMEMD_REMOTE_BAD_PAGE;
		fixed |= ret;
	}
	if (!fixed)
		return KVMEMD_REMOTE_GOOD;
	kvmemd_remote_record_seal(rec, len);
	return KVMEMD_REMOTE_REPAIRED;
}
