/* SPDX-License-Identifier: MIT */
/*
 * kvmem/ecc.h - error-correcting codes over buffers of codewords
 *
 * A buffer of data is one bitstream (bit i of byte b is stream bit 8b + i)
 * cut into the codec's data words, word w taking stream bits [k*w, k*w + k).
 * Codewords are stored back to back, word_bytes each, little-endian. So INT4
 * values packed two per byte map one per h84 word and three per golay24
 * word, and eight bytes map to one secded72 word.
 *
 * The bit layouts are normative: see DESIGN.md section 3 and the theory
 * comments in ecc_word.h.
 */
#ifndef KVMEM_ECC_H
#define KVMEM_ECC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum kvmem_codec {
	KVMEM_CODEC_H74 = 0,
	KVMEM_CODEC_H84 = 1,
	KVMEM_CODEC_GOLAY24 = 2,
	KVMEM_CODEC_SECDED72 = 3,
	KVMEM_CODEC_NR,
};

struct kvmem_codec_info {
	const char *name; /* "h74", "h84", "golay24", "secded72" */
	unsigned int data_bits; /* k */
	unsigned int code_bits; /* n */
	unsigned int word_bytes; /* bytes one codeword occupies in memory */
	unsigned int corrects; /* every error of this weight or less */
	unsigned int detects; /* every error of this weight or less is
				  * corrected or reported, never silent */
};

/* Per-word outcome, as written to the optional status array. */
enum kvmem_ecc_status {
	KVMEM_ECC_CLEAN = 0,
	KVMEM_ECC_CORRECTED = 1,
	KVMEM_ECC_UNCORRECTABLE = 2,
};

struct kvmem_ecc_counts {
	uint64_t clean; /* words with a zero syndrome */
	uint64_t corrected; /* words corrected */
	uint64_t uncorrectable; /* words beyond the code's reach */
	uint64_t bits_corrected; /* bits flipped back in corrected words */
};

/**
 * kvmem_codec_get() - describe a codec
 * @codec: one of enum kvmem_codec
 *
 * Return: the codec's constant description, or NULL for an unknown codec.
 */
const struct kvmem_codec_info *kvmem_codec_get(int codec);

/**
 * kvmem_codec_by_name() - look a codec up by its name
 * @name: "h74", "h84", "golay24" or "secded72"
 *
 * Return: the enum kvmem_codec value, or -EINVAL.
 */
int kvmem_codec_by_name(const char *name);

/**
 * kvmem_ecc_data_bytes() - bytes of bitstream that @nwords words carry
 * @codec: the codec
 * @nwords: number of codewords
 *
 * Return: ceil(nwords * k / 8), or 0 for an unknown codec.
 */
size_t kvmem_ecc_data_bytes(int codec, size_t nwords);

/**
 * kvmem_ecc_code_bytes() - bytes that @nwords codewords occupy
 * @codec: the codec
 * @nwords: number of codewords
 *
 * Return: nwords * word_bytes, or 0 for an unknown codec.
 */
size_t kvmem_ecc_code_bytes(int codec, size_t nwords);

/**
 * kvmem_ecc_encode() - encode a bitstream into codewords
 * @codec: the codec
 * @data: kvmem_ecc_data_bytes(codec, nwords) bytes; bits past the last
 *        word's are ignored
 * @code: receives kvmem_ecc_code_bytes(codec, nwords) bytes
 * @nwords: number of codewords to produce
 *
 * Context: any thread; does not block. @data and @code must not overlap.
 * Return: 0, or -EINVAL for an unknown codec or a NULL buffer with @nwords
 * > 0.
 */
int kvmem_ecc_encode(int codec, const void *data, void *code, size_t nwords);

/**
 * kvmem_ecc_decode() - check, correct and extract the data of codewords
 * @codec: the codec
 * @code: kvmem_ecc_code_bytes(codec, nwords) bytes, not modified
 * @data: receives kvmem_ecc_data_bytes(codec, nwords) bytes; an
 *        uncorrectable word's data bits are written as received, and spare
 *        bits of the last byte are zero
 * @nwords: number of codewords
 * @counts: if not NULL, receives the outcome counts (overwritten)
 * @status: if not NULL, receives one enum kvmem_ecc_status per word
 * @erasures: if not NULL, a bitmap of (nwords + 63) / 64 words that receives
 *            a 1 for every uncorrectable word (bit w % 64 of word w / 64)
 *
 * Context: any thread; does not block.
 * Return: 0 when every word was clean or corrected, -EBADMSG when at least
 * one word was uncorrectable (all outputs are still filled in), -EINVAL for
 * an unknown codec or a NULL buffer with @nwords > 0.
 */
int kvmem_ecc_decode(int codec, const void *code, void *data, size_t nwords,
		     struct kvmem_ecc_counts *counts, uint8_t *status,
		     uint64_t *erasures);

/**
 * kvmem_ecc_scrub() - check codewords and correct them in place
 * @codec: the codec
 * @code: kvmem_ecc_code_bytes(codec, nwords) bytes
 * @nwords: number of codewords
 * @counts: if not NULL, receives the outcome counts (overwritten)
 * @ue_pos: if not NULL, receives the indices of the first @ue_cap
 *          uncorrectable words, in increasing order
 * @ue_cap: capacity of @ue_pos
 *
 * Only bytes that change are stored, each with one byte store, and a byte
 * store only ever removes errors: a concurrent reader sees the word either as
 * it was or with fewer errors, and decodes it the same way. Uncorrectable
 * words are left as they are.
 *
 * Context: any thread; does not block.
 * Return: 0 when no uncorrectable word was found, -EBADMSG when at least one
 * was (counts->uncorrectable says how many), -EINVAL for an unknown codec or
 * a NULL buffer with @nwords > 0.
 */
int kvmem_ecc_scrub(int codec, void *code, size_t nwords,
		    struct kvmem_ecc_counts *counts, size_t *ue_pos,
		    size_t ue_cap);

/**
 * kvmem_ecc_impl() - the name of the code path the bulk functions use
 *
 * "avx512", "avx2" or "portable", the best the CPU runs, chosen once; the
 * environment variable KVMEM_SIMD (one of those names) caps it. avx512 wants
 * AVX-512 F/BW/VL/VBMI, GFNI and AVX512-VNNI (Ice Lake, Zen 4 and later).
 *
 * Return: a constant string.
 */
const char *kvmem_ecc_impl(void);

#ifdef __cplusplus
}
#endif

#endif /* KVMEM_ECC_H */
