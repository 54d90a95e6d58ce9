/* SPDX-License-Identifier: MIT */
/*
 * kvmem/page.h - the protected KV page
 *
 * A page holds the K and V of tokens_per_page consecutive tokens of one
 * sequence, one layer, all KV heads. Everything in it is ECC-protected:
 *
 *   offset 0          +--------------------------------------------------+
 *                     | header: struct kvmem_page_hdr, 64 bytes, as 43   |
 *                     | golay24 words (129 bytes)                        |
 *   scales_off        +--------------------------------------------------+
 *   (64-aligned)      | scales, FP16, one bitstream in golay24 words:    |
 *                     |   K: [kv_head][token][group]  (group scales)     |
 *                     |   or [kv_head][channel]      (channel scales)    |
 *                     |   V: [kv_head][token][group]                     |
 *   checks_off        +--------------------------------------------------+
 *                     | checks, 24 bits each in two golay24 words:       |
 *                     |   one per 24 scales of the bitstream, or, in a   |
 *                     |   page without scales (FP16), one per row:       |
 *                     |   [K, V][kv_head][token]                         |
 *   k_off             +--------------------------------------------------+
 *   (64-aligned)      | K payload: [kv_head][token] rows, each row the   |
 *                     | head_dim values of one token and head, encoded   |
 *                     | on its own in row_words codewords                |
 *   v_off             +--------------------------------------------------+
 *   (64-aligned)      | V payload: same layout                           |
 *                     +--------------------------------------------------+
 *                     | zero padding to a multiple of 4 KiB              |
 *   page_size         +--------------------------------------------------+
 *
 * A row is padded to whole codewords, and to a byte boundary of its data,
 * so any row can be decoded alone and a head's rows for the whole page are
 * one contiguous run of codewords: attention decodes [kv_head] blocks tile
 * by tile. Pages are multiples of 4 KiB so they go to NVMe with O_DIRECT as
 * they are.
 *
 * The header, the scales and the FP16 values of hot pages are metadata:
 * one flipped bit in them is worth a whole group of values, a token that
 * attention leans on, or the page. They are in the metadata code, golay24
 * (three errors corrected in every 24 bits, four detected), whatever the
 * payload's codec.
 *
 * A code only knows its own word. A fault that garbles many bits of
 * neighbouring words (a bad 64-byte line, a burst) turns about half of them
 * into other codewords without a report. So what can be worth more than
 * its own range is also checked, over the data as decoded: the header by a
 * CRC-32C of itself, every 24 scales (48 bytes of the bitstream) and every
 * FP16 row by the low 24 bits of a CRC-32C of their data. A scale segment
 * or row whose check fails is lost as if its words were uncorrectable. A
 * quantized value past its scale stays within its group's range, as in a
 * page without ECC.
 *
 * Two kinds of page share the layout. A *hot* page is FP16 + golay24 and
 * has no scales: the unsealed tail of a sequence, and its first sink_tokens
 * tokens (attention sinks), which stay exact. A *sealed* page uses the
 * geometry's format and codec, or, once archived (kvmem_page_archive()),
 * the quantized format and codec its header names, in a page no larger
 * than the geometry's sealed one: whatever holds a sealed page of a
 * geometry holds its archived pages. Both kinds are immutable once sealed.
 */
#ifndef KVMEM_PAGE_H
#define KVMEM_PAGE_H

#include <stddef.h>
#include <stdint.h>

#include "kvmem/ecc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVMEM_PAGE_MAGIC 0x4750564bu /* "KVPG" */
#define KVMEM_PAGE_VERSION 3
#define KVMEM_PAGE_ALIGN 4096u
/* The code of the header, the scales and hot pages. */
#define KVMEM_PAGE_META_CODEC KVMEM_CODEC_GOLAY24
/* The 64-byte header as golay24 words: 516 bits, the last 4 zero. */
#define KVMEM_PAGE_HDR_WORDS 43
#define KVMEM_PAGE_HDR_BYTES (KVMEM_PAGE_HDR_WORDS * 3)
/* Scales per check: 48 bytes of the scale bitstream, 32 golay24 words. */
#define KVMEM_PAGE_CHECK_SCALES 24
/* The largest page of either kind a geometry may make: 1 GiB. */
#define KVMEM_PAGE_MAX (1u << 30)

/*
 * The rotation of a geometry. With KVMEM_ROTATE_HADAMARD every K and V row
 * of every head, in every page of either kind, is stored rotated: for a
 * row x of head_dim D (a power of two), y = H S x / sqrt(D), where H is
 * the Sylvester Hadamard matrix (H[i][j] = (-1)^popcount(i & j)) and S the
 * diagonal of signs s_j = -1 where bit 16 of (j * 2654435761) mod 2^32 is
 * set, +1 elsewhere. The map is orthonormal, so a dot product is the same
 * in either space, and it spreads a channel with outliers over all the
 * others: a rotated row is close to Gaussian, what the lm formats expect
 * (kvmem/quant.h). kvmem_page_encode() and appends rotate, after making
 * each value what FP16 keeps of it (a NaN or an infinity 0, a finite value
 * beyond +-65504 that) so that no input spreads over its row;
 * kvmem_page_decode() and kvmem_seq_read() rotate back; attention rotates
 * the query once and its output once, never a stored row. Scales, erasures and their rebuilding
 * from neighbouring tokens are those of the rotated values; a value erased
 * there touches every value of its row once rotated back, so
 * kvmem_page_decode() flags the whole row.
 */
enum kvmem_rotation {
	KVMEM_ROTATE_NONE = 0,
	KVMEM_ROTATE_HADAMARD = 1,
};

enum kvmem_key_scales {
	KVMEM_SCALES_GROUP = 0, /* per token, per group of channels */
	KVMEM_SCALES_CHANNEL = 1, /* keys only: per channel over the page */
};

/* Everything that fixes the size and meaning of a page. */
struct kvmem_geometry {
	uint32_t layers;
	uint32_t kv_heads;
	uint32_t head_dim;
	uint32_t tokens_per_page;
	uint32_t group_size; /* divides head_dim; default 32 */
	uint32_t sink_tokens; /* first tokens kept FP16, <= tokens_per_page */
	uint8_t format; /* enum kvmem_format of sealed pages */
	uint8_t codec; /* enum kvmem_codec of sealed pages */
	uint8_t key_scales; /* enum kvmem_key_scales */
	uint8_t rotation; /* enum kvmem_rotation; default none */
	uint8_t resv[4]; /* must be zero */
};

#define KVMEM_HDR_SEALED (1u << 0) /* full and immutable */
#define KVMEM_HDR_HOT (1u << 1) /* FP16 + golay24 layout */

/* The page header, as it is before encoding. */
struct kvmem_page_hdr {
	uint32_t magic; /* KVMEM_PAGE_MAGIC */
	uint16_t version;
	uint8_t format;
	uint8_t codec;
	uint64_t geometry; /* kvmem_geometry_digest() */
	uint64_t seq; /* sequence id */
	uint32_t layer;
	uint32_t token_start; /* position of the page's first token */
	uint32_t ntokens; /* tokens written, <= tokens_per_page */
	uint32_t flags; /* KVMEM_HDR_* */
	uint64_t generation;
	/* CRC-32C of the page's bytes after the header's 129, set at seal */
	uint32_t crc;
	/* CRC-32C of these 64 bytes with hcrc 0: written by the encoder,
	 * checked by the decoder (a header it does not match is
	 * uncorrectable), read back as 0 */
	uint32_t hcrc;
	uint32_t resv[2];
};

/* Where things are in a page of one kind (hot or sealed). */
struct kvmem_page_layout {
	size_t size; /* bytes, a multiple of KVMEM_PAGE_ALIGN */
	size_t scales_off; /* scale codewords */
	size_t k_off, v_off; /* payload blocks */
	uint32_t nscales_k; /* K scales in the page */
	uint32_t nscales_v; /* V scales */
	uint32_t scale_words; /* golay24 words of all scales */
	uint32_t row_words; /* codewords per row */
	uint32_t row_bytes; /* bytes per row (row_words codewords) */
	uint32_t row_data; /* data bytes per row after decoding */
	uint8_t format, codec; /* of this kind */
	uint8_t key_scales; /* the geometry's; group in pages without scales */
	uint8_t hot;
	size_t checks_off; /* check codewords, two a check */
	uint32_t nchecks; /* per KVMEM_PAGE_CHECK_SCALES scales, or per row */
};

/*
 * What a decode, verify or scrub found, by region. Check words count with
 * what they check (scale checks with the scales, row checks with the
 * payload), and a check whose words are good but do not match its data as
 * one uncorrectable word more.
 */
struct kvmem_page_counts {
	struct kvmem_ecc_counts header;
	struct kvmem_ecc_counts scales;
	struct kvmem_ecc_counts payload;
	uint64_t values_erased; /* values an uncorrectable word took away */
};

/**
 * kvmem_geometry_default() - fill in the defaults
 * @g: receives tokens_per_page 32, group_size 32, sink_tokens 4, int4,
 *     h84, group scales, no rotation; layers, kv_heads and head_dim are
 *     left as they are
 */
void kvmem_geometry_default(struct kvmem_geometry *g);

/**
 * kvmem_geometry_check() - is this geometry usable
 * @g: the geometry
 *
 * Return: 0, or -EINVAL (zero or absurd sizes, group_size not dividing
 * head_dim, sink_tokens > tokens_per_page, unknown format, codec,
 * key_scales or rotation, channel scales with fp16, a rotation with a
 * head_dim that is not a power of two, reserved bytes set, or a page of
 * either kind larger than KVMEM_PAGE_MAX).
 */
int kvmem_geometry_check(const struct kvmem_geometry *g);

/**
 * kvmem_geometry_explain() - kvmem_geometry_check(), and why in words
 * @g: the geometry
 * @buf: receives a sentence naming the first field that is wrong and its
 *       limit ("head_dim 30 is not a multiple of group_size 32"), or ""
 * @len: size of @buf
 *
 * Return: what kvmem_geometry_check() returns.
 */
int kvmem_geometry_explain(const struct kvmem_geometry *g, char *buf,
			   size_t len);

/**
 * kvmem_geometry_digest() - a 64-bit digest of a geometry
 * @g: the geometry
 *
 * Pages carry it, so a page is never read with a geometry it was not
 * written with.
 */
uint64_t kvmem_geometry_digest(const struct kvmem_geometry *g);

/**
 * kvmem_page_layout() - the layout of one kind of page
 * @g: a valid geometry
 * @hot: non-zero for the FP16 hot kind
 * @l: receives the layout
 *
 * Return: 0, or -EINVAL for an invalid geometry or a page of this kind
 * larger than KVMEM_PAGE_MAX.
 */
int kvmem_page_layout(const struct kvmem_geometry *g, int hot,
		      struct kvmem_page_layout *l);

/**
 * kvmem_page_layout_as() - the layout of a sealed page archived in another
 *                          format and codec
 * @g: a valid geometry
 * @format: enum kvmem_format: int8, int4, int2, fp8, lm2, lm3, lm4 or vq2
 * @codec: enum kvmem_codec
 * @l: receives the layout
 *
 * The geometry's own format and codec give kvmem_page_layout(g, 0). A vq2
 * page has no scales and a check a row, as a hot page has.
 *
 * Return: 0; -EINVAL for an invalid geometry, fp16, vq2 with a head_dim
 * that is not a multiple of four, or an unknown format or codec; -E2BIG
 * when such a page would be larger than the geometry's own sealed page
 * (golay24 rows pad to a pair of words, so an int4 + golay24 page can be
 * a few KiB larger than an int4 + h84 one).
 */
int kvmem_page_layout_as(const struct kvmem_geometry *g, unsigned int format,
			 unsigned int codec, struct kvmem_page_layout *l);

/**
 * kvmem_page_encode() - write a whole page from float K and V
 * @page: layout.size bytes
 * @g: the geometry
 * @hdr: header fields; magic, version, format, codec, geometry, flags
 *       (hot) and crc are filled in, ntokens must be 1..tokens_per_page
 * @hot: the kind of page
 * @k: hdr->ntokens rows of [kv_heads][head_dim] floats, token-major as a
 *     model produces them
 * @v: the same for V
 *
 * Writes every byte of the page; rows past ntokens are zero. Rows are
 * rotated first when @g has a rotation. With
 * KVMEM_HDR_SEALED in hdr->flags the CRC is computed.
 *
 * Return: 0, or -EINVAL.
 */
int kvmem_page_encode(void *page, const struct kvmem_geometry *g,
		      const struct kvmem_page_hdr *hdr, int hot, const float *k,
		      const float *v);

/**
 * kvmem_page_read_header() - decode and check a page's header
 * @page: the page
 * @g: the geometry the page is expected to have
 * @hdr: receives the header
 * @counts: if not NULL, receives what the header's decode found
 *
 * Return: 0; -EBADMSG when the header is uncorrectable or its words decode
 * but not to its own CRC (hcrc; counted as one uncorrectable word more);
 * -EINVAL when its magic, version, geometry digest or sizes do not match,
 * or it names a format and codec that no page of @g may have (see
 * kvmem_page_layout_as()).
 */
int kvmem_page_read_header(const void *page, const struct kvmem_geometry *g,
			   struct kvmem_page_hdr *hdr,
			   struct kvmem_ecc_counts *counts);

/**
 * kvmem_page_decode() - read a whole page back as float K and V
 * @page: the page
 * @g: the geometry
 * @k: receives ntokens rows of [kv_heads][head_dim] floats
 * @v: the same for V
 * @erased: if not NULL, receives one byte per value: the ntokens rows of K
 *          (layout as @k), then the ntokens rows of V; 1 where an
 *          uncorrectable word, a lost scale or a failed check took the
 *          value away. Such values are decoded from the bits as received.
 *          With a rotation, rows are rotated back, and a row with an
 *          erased value is erased whole.
 * @counts: if not NULL, receives what was found
 *
 * Return: the number of tokens decoded, or -EBADMSG (header uncorrectable)
 * or -EINVAL (header does not match @g), or -EOPNOTSUPP for a vq2 page,
 * whose values are in its sequence's codebooks (kvmem_seq_read() reads
 * it). Uncorrectable scales or payload are not an error here: they show
 * in @erased and @counts.
 */
int kvmem_page_decode(const void *page, const struct kvmem_geometry *g,
		      float *k, float *v, uint8_t *erased,
		      struct kvmem_page_counts *counts);

/**
 * kvmem_page_scrub() - check a page and correct it in place
 * @page: the page
 * @g: the geometry
 * @counts: if not NULL, receives what was found and corrected
 *
 * Corrections are stored with byte stores that only remove errors (see
 * kvmem_ecc_scrub()), so concurrent readers are safe. In a sealed page the
 * bytes that carry no value (the gaps between regions, rows past ntokens,
 * words that hold only the padding at the end of a row) are then put back
 * to the zeros the encoder wrote.
 *
 * Return: 0 when everything is clean or was corrected, -EBADMSG when some
 * word is uncorrectable or a check fails (the rest is still corrected; a
 * word a fault turned into another codeword stays as it is, and its check
 * keeps failing), -EINVAL when the header does not match @g.
 */
int kvmem_page_scrub(void *page, const struct kvmem_geometry *g,
		     struct kvmem_page_counts *counts);

/**
 * kvmem_page_verify() - check a page without writing to it
 * @page: the page
 * @g: the geometry
 * @counts: if not NULL, receives what was found; corrected counts say what
 *          a scrub would correct
 *
 * Also checks the CRC of a sealed page when every word is clean, over the
 * page as its values depend on it: bytes that carry no value (see
 * kvmem_page_scrub()) count as the zeros the encoder wrote, so a changed
 * padding byte is not an error.
 *
 * Return: 0 when every word is clean (and the checks and the CRC match),
 * -EBADMSG when some word would need correcting or is uncorrectable, a
 * check fails or the CRC does not match, -EINVAL when the header does not
 * match @g.
 */
int kvmem_page_verify(const void *page, const struct kvmem_geometry *g,
		      struct kvmem_page_counts *counts);

/**
 * kvmem_page_archive() - re-encode a sealed page in another format and codec
 * @dst: room for a sealed page of @g, not overlapping @src
 * @src: a sealed, quantized or FP16, page of @g; not written to
 * @g: the geometry
 * @format: enum kvmem_format of the archived page: int8, int4, int2, fp8,
 *          lm2, lm3, lm4, or vq2 from a vq2 page (another codec)
 * @codec: enum kvmem_codec of the archived page
 * @counts: if not NULL, receives what the check of @src found
 *
 * @src is corrected in a copy first and must then be the page it was
 * sealed as: every word correctable, every check and the CRC matching. So
 * a value that is flagged, or changed since the seal without a word
 * reporting it, is never archived as if it were good. In the same format
 * the quantized values and scales are kept bit for bit and only the
 * payload's codec changes; in another format the values as decoded are
 * quantized again, with new scales. The header keeps the sequence, layer,
 * tokens, flags and generation, and names the new format and codec; the
 * CRC is the new page's. The page reads, attends, scrubs and verifies with
 * the same geometry and calls as before.
 *
 * Return: 0; -EINVAL for bad arguments or a page that is hot, not sealed
 * or not of @g; -E2BIG as kvmem_page_layout_as(); -EBADMSG when @src has a
 * word or check that is uncorrectable or its CRC does not match once
 * corrected (@dst is undefined then); -EOPNOTSUPP to vq2 from another
 * format or from vq2 to another (the codebooks are the sequence's:
 * kvmem_seq_archive()); -ENOMEM.
 */
int kvmem_page_archive(void *dst, const void *src,
		       const struct kvmem_geometry *g, unsigned int format,
		       unsigned int codec, struct kvmem_page_counts *counts);

#ifdef __cplusplus
}
#endif

#endif /* KVMEM_PAGE_H */
