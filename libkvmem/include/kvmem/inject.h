/* SPDX-License-Identifier: MIT */
/*
 * kvmem/inject.h - deterministic bit-error injection
 *
 * Flips bits in a buffer of codewords the way the tests, the benchmarks and
 * the evaluation need: a binary symmetric channel, exactly k flips per word,
 * or bursts of adjacent bits. The same seed gives the same flips on every run
 * on the same build. Every flip is reported: how many bits, which words, how
 * many flips each word got.
 *
 * The buffer is seen as nwords words of word_bytes bytes of which the low
 * word_bits bits (little-endian) are live; only live bits are flipped. Bit b
 * of word w has channel index w * word_bits + b; bursts run along that index
 * and may cross from one word into the next.
 *
 * The physical channels (BYTE, ADJACENT, LINE, COLUMN) model faults of the
 * memory that holds the words rather than of the words: they act on the
 * stored bytes, by address relative to the start of the buffer (which they
 * take as the start of a line and of a row), whatever words those bytes
 * belong to; dead bits of a byte stay as they are. A word can thus take
 * several flips from one event, and the report counts them per word as for
 * the other channels.
 */
#ifndef KVMEM_INJECT_H
#define KVMEM_INJECT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum kvmem_inject_mode {
	/* Every live bit flips independently with probability ber. Cost is
	 * proportional to the number of flips (geometric skips). */
	KVMEM_INJECT_BSC = 0,
	/* Every word gets exactly k flips at distinct random positions. */
	KVMEM_INJECT_EXACT = 1,
	/* Bursts start at every live bit with probability ber; each flips k
	 * adjacent bits (a multi-bit upset); bursts do not overlap and are
	 * clipped at the buffer end. */
	KVMEM_INJECT_BURST = 2,
	/* Every stored byte is hit with probability ber; a hit flips k
	 * distinct random live bits of it (all of them when it has fewer): a
	 * multi-bit upset in one byte. k is 1..8. */
	KVMEM_INJECT_BYTE = 3,
	/* Hits start at every stored byte with probability ber; each flips
	 * one random live bit in each of k adjacent bytes (an upset across
	 * neighbouring cells); hits do not overlap and are clipped at the
	 * buffer end. */
	KVMEM_INJECT_ADJACENT = 4,
	/* The buffer is lines of k bytes (64: a cache line); every line is hit
	 * with probability ber, and a hit line is garbled: each of its live
	 * bits flips with probability 1/2 (a failed transfer or a dead chip in
	 * a burst). */
	KVMEM_INJECT_LINE = 5,
	/* The buffer is rows of k bytes; each of the k * 8 bit columns is
	 * stuck with probability ber, at 0 or 1 (even odds), in every row: a
	 * stored bit flips where it differs from the stuck value. */
	KVMEM_INJECT_COLUMN = 6,
};

struct kvmem_inject_params {
	uint32_t mode; /* enum kvmem_inject_mode */
	/* EXACT: flips per word; BURST: burst length in bits; BYTE: flips
	 * per hit byte; ADJACENT: bytes per hit; LINE: line bytes; COLUMN:
	 * row bytes */
	uint32_t k;
	/* Probability of an event per unit: per live bit (BSC, BURST), per
	 * stored byte (BYTE, ADJACENT), per line (LINE), per column (COLUMN).
	 * Unused by EXACT. The report says how many bits it came to. */
	double ber;
	uint64_t seed; /* same seed, same flips */
	uint32_t word_bits; /* live bits per word, 1..word_bytes * 8 */
	uint32_t word_bytes; /* stride, 1..64 */
};

/* by_flips[] has this many buckets; the last one counts "this many or more" */
#define KVMEM_INJECT_HIST 8

struct kvmem_inject_hit {
	uint64_t word; /* word index */
	uint32_t flips; /* bits flipped in it */
	uint32_t resv;
};

struct kvmem_inject_report {
	uint64_t bits; /* bits flipped in all */
	uint64_t words; /* words with at least one flip */
	/* by_flips[i]: words with exactly i flips (i >= 1; [0] is unused) */
	uint64_t by_flips[KVMEM_INJECT_HIST];
	/* Optional, caller-owned: the first hits_cap hit words in increasing
	 * order. hits_len receives their number, at most hits_cap. */
	struct kvmem_inject_hit *hits;
	size_t hits_cap;
	size_t hits_len;
};

/**
 * kvmem_inject_params_for_codec() - BSC parameters for a codec's layout
 * @params: receives the layout of @codec's stored words and mode BSC
 * @codec: enum kvmem_codec
 * @ber: bit error rate
 * @seed: the seed
 *
 * Return: 0, or -EINVAL for an unknown codec.
 */
int kvmem_inject_params_for_codec(struct kvmem_inject_params *params, int codec,
				  double ber, uint64_t seed);

/**
 * kvmem_inject_parse() - a channel as the tools name it
 * @params: its mode and k are set; nothing else is touched
 * @spec: "bsc", "exact:K", "burst:K", "byte:K", "adjacent:K", "line" (64-byte
 *        lines), "line:BYTES" or "column:ROW_BYTES"
 *
 * Return: 0, or -EINVAL for a name it does not know, a missing, zero or
 * malformed K, or a K the mode does not take (byte:9; exact:K above the
 * word is found only by kvmem_inject()).
 */
int kvmem_inject_parse(struct kvmem_inject_params *params, const char *spec);

/**
 * kvmem_inject() - flip bits in a buffer
 * @buf: nwords * params->word_bytes bytes
 * @nwords: number of words
 * @params: mode, rate, seed and layout
 * @report: if not NULL, receives what was flipped; its hits, hits_cap fields
 *          are read first and kept
 *
 * Context: any thread; does not block.
 * Return: 0, or -EINVAL for parameters out of range (an unknown mode, ber
 * outside [0, 1], k of 0, above word_bits for EXACT or above 8 for BYTE, a
 * layout that does not fit, a NULL @buf with @nwords > 0).
 */
int kvmem_inject(void *buf, size_t nwords,
		 const struct kvmem_inject_params *params,
		 struct kvmem_inject_report *report);

#ifdef __cplusplus
}
#endif

#endif /* KVMEM_INJECT_H */
