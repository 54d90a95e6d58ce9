/* SPDX-License-Identifier: MIT */
/*
 * internal.h - libkvmem internals shared between its source files
 *
 * Included by libkvmem's own files and the tests, never by kvmemd or the
 * tools: what they use is in kvmem-private.h, which this includes. Never
 * installed. Symbols declared here are kvmem__*: visible in the static
 * library, not exported from libkvmem.so.
 */
#ifndef KVMEM_INTERNAL_H
#define KVMEM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kvmem/ecc.h"
#include "kvmem-private.h"

#define KVMEM_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* For the SIMD kernels' helpers, which must melt into their loops. */
#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* @level: one of enum kvmem__simd (kvmem-private.h). */
int kvmem__simd_supported(int level);
const char *kvmem__simd_name(int level);
int kvmem__cpu_has_sse42(void);

/*
 * Bulk kernels of one codec. @data always starts on a word boundary that is
 * also a byte boundary of the bitstream (an even word for h74/h84/golay24).
 *
 * scan:    index of the first word in [0, nwords) with a non-zero syndrome,
 *          or nwords
 * encode:  nwords codewords from the bitstream
 * extract: the data bits of nwords codewords as received, unchecked; spare
 *          bits of the last byte are zero
 */
struct kvmem__ecc_kernels {
	size_t (*scan)(const uint8_t *code, size_t nwords);
	void (*encode)(const uint8_t *data, uint8_t *code, size_t nwords);
	void (*extract)(const uint8_t *code, uint8_t *data, size_t nwords);
};

extern const struct kvmem__ecc_kernels kvmem__ecc_portable[KVMEM_CODEC_NR];
extern const struct kvmem__ecc_kernels kvmem__ecc_avx2[KVMEM_CODEC_NR];
extern const struct kvmem__ecc_kernels kvmem__ecc_avx512[KVMEM_CODEC_NR];

/* Tables derived once from the per-word functions of ecc_word.h. */
struct kvmem__ecc_tables {
	uint16_t golay_parity[4096]; /* d.B for every 12-bit d */
	uint32_t golay_error[4096]; /* syndrome -> error, ~0 = beyond */
	uint8_t secded_check[8][256]; /* check bits fed by byte k of data */
	uint8_t secded_hi[8][16]; /* secded_check[k][n << 4], for pshufb */
	/* Nibble tables for pshufb, linear pieces of the maps above. */
	uint8_t h74_syn[2][16]; /* [lo/hi nibble]: syndrome | bit7 << 3 */
	uint8_t h84_syn[2][16]; /* [lo/hi nibble]: kvmem_h84_syndrome */
	/* The same two maps as GF2P8AFFINEQB matrices: byte 7 - i of each
	 * is the mask of code bits that feed syndrome bit i. */
	uint64_t h74_gf, h84_gf;
	/* The golay24 syndrome's share from code byte k, as matrices of
	 * the same form: [k][0] its bits 0-7, [k][1] its bits 8-11. */
	uint64_t golay_gf[3][2];
	uint8_t h74_enc[16];
	uint8_t h84_enc[16];
	uint8_t golay_par[3][2][16]; /* [nibble k][low/high byte][n] */
};

const struct kvmem__ecc_tables *kvmem__ecc_tables(void);

/* ecc.c: the active scan kernel (first word with a non-zero syndrome). */
size_t kvmem__ecc_scan(int codec, const uint8_t *code, size_t nwords);

/* quant.c */
uint16_t kvmem__scale(int fmt, const float *x, size_t n, size_t stride);
void kvmem__quantize_row(int fmt, const float *x, size_t n, unsigned int group,
			 const uint16_t *scales, uint8_t *out);
void kvmem__dequant_row(int fmt, const uint8_t *data, unsigned int dim,
			unsigned int group, const float *scales, float *out);
/*
 * What each code of @fmt reads as before its scale, where a table says it
 * (int2, lm2, lm3, lm4; sixteen floats, zeros past the codes), or NULL.
 */
const float *kvmem__code_values(int fmt);

struct kvmem_geometry;
struct kvmem_page_layout;
struct kvmem_page_hdr;
struct kvmem_ecc_counts;
struct kvmem_page_counts;

/* rotate.c: the Hadamard rotation of one row of @dim (a power of two)
 * values in place, or its inverse; and of @rows rows of @g's head_dim,
 * nothing when @g has no rotation. */
void kvmem__rotate(float *x, uint32_t dim, int inverse);
void kvmem__rotate_rows(const struct kvmem_geometry *g, float *x, size_t rows,
			int inverse);
/* kvmem__rotate_rows() of rows on their way into a page: each value first
 * made what FP16 keeps of it (NaN and infinities 0, beyond +-65504 that),
 * so that no input spreads over its row. */
void kvmem__rotate_stored(const struct kvmem_geometry *g, float *x,
			  size_t rows);

/* vq.c: the codebooks of a layer's vq2 pages (kvmem/quant.h). */
#define KVMEM__VQ_ENTRIES 256
#define KVMEM__VQ_DIM 4 /* values an entry, an index */
#define KVMEM__VQ_ROUNDS 25 /* the most rounds of k-means */
#define KVMEM__VQ_TRAIN_MAX 16384 /* the most points k-means looks at */

/*
 * A layer's codebooks, K's and V's of each KV head, each of
 * KVMEM__VQ_ENTRIES entries: book b = is_v * kv_heads + h, entry e of it
 * at [b * KVMEM__VQ_ENTRIES + e]. @data holds the entries as FP16 in one
 * golay24 bitstream (entry_words words), then one check an entry in two
 * golay24 words each. Held by the layers of a sequence and its forks,
 * and by every vq2 page encoded with it (struct kvmem__page.vq).
 */
struct kvmem__vq {
	uint32_t refs;
	uint32_t books;
	uint32_t entry_words;
	size_t bytes; /* of @data */
	uint8_t data[];
};

/*
 * What the pages of a layer in vq2 read their values from: its codebooks
 * decoded, [books][KVMEM__VQ_ENTRIES][KVMEM__VQ_DIM] floats, and which
 * entries are lost ([books][KVMEM__VQ_ENTRIES], or NULL when none is).
 */
struct kvmem__vq_view {
	const float *entries;
	const uint8_t *lost;
};

/* k-means of @n points of KVMEM__VQ_DIM floats into @entries (see vq.c). */
int kvmem__vq_train(const float *x, size_t n, float *entries);
/* The entry of one book nearest each of @n points @x, lost entries left
 * out; the first on a tie. */
void kvmem__vq_nearest(const float *entries, const uint8_t *lost,
		       const float *x, size_t n, uint8_t *out);
/* Encode @entries ([2 * kv_heads][256][4], made FP16) as a new codebook. */
int kvmem__vq_new(uint32_t kv_heads, const float *entries,
		  struct kvmem__vq **out);
void kvmem__vq_put(struct kvmem__vq *vq);
/* Golay24 codewords in @vq->data. */
size_t kvmem__vq_words(const struct kvmem__vq *vq);
/*
 * Decode @vq into @entries and @lost (see struct kvmem__vq_view; a lost
 * entry reads as zeros), adding its words to @counts (may be NULL).
 * Return: the number of lost entries, or -ENOMEM.
 */
long kvmem__vq_read(const struct kvmem__vq *vq, float *entries, uint8_t *lost,
		    struct kvmem_ecc_counts *counts);

/* page.c: kvmem_page_encode() and kvmem_page_decode() of rows as stored,
 * rotated when @g rotates. A vq2 page needs its layer's codebooks: @vq
 * (NULL: such a page is refused with -EOPNOTSUPP). */
int kvmem__page_encode_stored(void *page, const struct kvmem_geometry *g,
			      const struct kvmem_page_hdr *hdr, int hot,
			      const float *k, const float *v);
int kvmem__page_decode_stored(const void *page, const struct kvmem_geometry *g,
			      const struct kvmem__vq_view *vq, float *k,
			      float *v, uint8_t *erased,
			      struct kvmem_page_counts *counts);
/* kvmem_page_archive() with the codebooks @vq of the page's layer, which
 * vq2 needs on either side. */
int kvmem__page_archive(void *dst, const void *src,
			const struct kvmem_geometry *g, unsigned int format,
			unsigned int codec, const struct kvmem__vq_view *vq,
			struct kvmem_page_counts *counts);

/* Bytes of scratch kvmem__page_scales() and kvmem__page_rows() need. */
size_t kvmem__page_scratch_size(const struct kvmem_geometry *g,
				const struct kvmem_page_layout *l);
/* Decode a page's scales to floats; returns how many were erased. */
int kvmem__page_scales(const struct kvmem_geometry *g,
		       const struct kvmem_page_layout *l, const uint8_t *page,
		       float *scales, uint8_t *erased,
		       struct kvmem_ecc_counts *c, void *scratch);
/*
 * Why kvmem__page_rows() erased a value. A quantized value whose own word
 * was uncorrectable is still bounded by its scale, so the keep policy may
 * read it as received. An FP16 value, or one whose scale is lost, could be
 * anything: it is rebuilt under keep as under interpolate.
 */
#define KVMEM__LOST_BOUNDED 1
#define KVMEM__LOST 2

/*
 * Decode rows [t0, t0 + n) of KV head @h of K or V (@is_v) to floats,
 * @out[n][head_dim]. @scale_erased may be NULL when no scale of the page is
 * erased. A vq2 page's scales are its codebooks: @scales and
 * @scale_erased are a struct kvmem__vq_view's entries and lost. Returns
 * the number of erased values; only when it is non-zero is
 * @erased[n][head_dim] written (0, or KVMEM__LOST_*). Word counts are
 * added to @c.
 */
long kvmem__page_rows(const struct kvmem_geometry *g,
		      const struct kvmem_page_layout *l, const uint8_t *page,
		      int is_v, uint32_t h, uint32_t t0, uint32_t n,
		      const float *scales, const uint8_t *scale_erased,
		      float *out, uint8_t *erased, struct kvmem_ecc_counts *c,
		      void *scratch);
/*
 * Rows [t0, t0 + n) of head @h as codes one per byte (in its low
 * nibble), when the page is int4 or lm4 in h74/h84 words (their codewords
 * are that already) or golay24 words (expanded into @scratch), or lm2 or int2
 * in h74/h84 words (two codes a word, spread into @scratch), or lm3 in
 * h74/h84 words (eight codes in six, spread likewise); which values
 * the codes are, kvmem__code_values() of the format says (NULL: int4's
 * two's complement). For kernels that read them directly: returns the
 * first row, rows *@rstride bytes apart (from a corrected copy in
 * @scratch when some word needed correcting), and sets *@sc, *@sstride
 * and *@group to their scales as the *_cw4 kernels take them, counting
 * the words; or NULL, counting nothing, when some word is uncorrectable
 * or a scale is erased (decode with kvmem__page_rows()).
 */
const uint8_t *kvmem__page_rows_cw4(
	const struct kvmem_geometry *g, const struct kvmem_page_layout *l,
	const uint8_t *page, int is_v, uint32_t h, uint32_t t0, uint32_t n,
	const float *scales, const uint8_t *scale_erased, const float **sc,
	size_t *sstride, unsigned int *group, size_t *rstride,
	struct kvmem_ecc_counts *c, void *scratch);
/*
 * kvmem__page_rows_cw4() for int8 and fp8 pages of any codec: rows [t0,
 * t0 + n) of head @h decoded (corrected where a word needs it) into
 * @scratch, one int8 value or E4M3 code per byte, rows *@rstride bytes
 * apart; or NULL, counting nothing, when some word is uncorrectable, a
 * scale is erased or an fp8 value reads as the NaN code.
 */
const uint8_t *kvmem__page_rows_b8(const struct kvmem_geometry *g,
				   const struct kvmem_page_layout *l,
				   const uint8_t *page, int is_v, uint32_t h,
				   uint32_t t0, uint32_t n, const float *scales,
				   const uint8_t *scale_erased,
				   const float **sc, size_t *sstride,
				   unsigned int *group, size_t *rstride,
				   struct kvmem_ecc_counts *c, void *scratch);
/*
 * kvmem__page_rows_cw4() for vq2 pages of any codec: rows [t0, t0 + n) of
 * head @h decoded (corrected where a word needs it) into @scratch, one
 * index a byte (row i's byte j: values 4j .. 4j + 3), rows *@rstride bytes
 * apart, and in *@book the entries they index (of @books, the decoded
 * books as kvmem__page_rows() takes them); or NULL, counting nothing, when
 * some word is uncorrectable, a row does not match its check or some
 * entry of the book is lost.
 */
const uint8_t *kvmem__page_rows_vq(const struct kvmem_geometry *g,
				   const struct kvmem_page_layout *l,
				   const uint8_t *page, int is_v, uint32_t h,
				   uint32_t t0, uint32_t n, const float *books,
				   const uint8_t *entry_erased,
				   const float **book, size_t *rstride,
				   struct kvmem_ecc_counts *c, void *scratch);
/*
 * The bytes of @page that attention reads for rows [t0, t0 + n) of KV
 * head @h, as three ranges: the header and scales (with @h == 0, where a
 * walk starts on the page; else empty), the K rows and the V rows.
 */
void kvmem__page_tile_bytes(const struct kvmem_geometry *g,
			    const struct kvmem_page_layout *l,
			    const uint8_t *page, uint32_t h, uint32_t t0,
			    uint32_t n, const uint8_t *p[3], size_t len[3]);
/*
 * The CRC-32C of a page after its header as if its padding were tidy
 * (kvmem__page_tidy()): what the values depend on, the same as the
 * header's CRC for a page as it was sealed.
 */
uint32_t kvmem__page_crc(const uint8_t *page, const struct kvmem_geometry *g,
			 const struct kvmem_page_layout *l, uint32_t ntokens);
/* Write token @t of a hot page; @row holds one row's data bytes. */
void kvmem__page_put_token(const struct kvmem_geometry *g,
			   const struct kvmem_page_layout *l, uint8_t *page,
			   uint32_t t, const float *k, const float *v,
			   uint8_t *row);

/* The attention kernels of each level (struct kvmem__attn_kernels,
 * kvmem-private.h) and the active level's. */
extern const struct kvmem__attn_kernels kvmem__attn_portable;
float kvmem__expf(float x);
extern const struct kvmem__attn_kernels kvmem__attn_avx2;
extern const struct kvmem__attn_kernels kvmem__attn_avx512;
const struct kvmem__attn_kernels *kvmem__attn(void);

/*
 * @bytes at a cache line boundary (free() them): rows the vector kernels
 * load 64 bytes at a time then never straddle two lines.
 */
void *kvmem__alloc_lines(size_t bytes);

/*
 * The middle of kvmem__attn_tile(): a->sc holds the scores; leaves the
 * weights.
 */
void kvmem__attn_softmax(struct kvmem__attn *a, uint32_t h, uint32_t n,
			 float *mass);

/*
 * pool.c: a persistent thread pool. kvmem__pool_run() runs @fn(@arg, i) for
 * i = 0 on the calling thread and i = 1 .. on up to @n - 1 pool threads
 * (created in *@pp on first need) and returns how many ran, 1 .. @n, once
 * all have returned.
 */
struct kvmem__pool;

unsigned int kvmem__pool_run(struct kvmem__pool **pp, unsigned int n,
			     void (*fn)(void *arg, unsigned int worker),
			     void *arg);
void kvmem__pool_free(struct kvmem__pool *p);

uint32_t kvmem__crc32c_sw(uint32_t crc, const void *buf, size_t len);
uint32_t kvmem__crc32c_sse42(uint32_t crc, const void *buf, size_t len);

/*
 * The CRC-32C (from 0) of each of @n runs of @buf, run j the @len bytes
 * from j * len, or as many of them as come before @total (which may lie
 * past the @n runs), into @out[0 .. n): the checks of a page's rows and
 * scale segments. The SSE4.2 version takes four whole runs at a time,
 * their CRC32 steps interleaved.
 */
void kvmem__crc32c_runs(const void *buf, size_t len, size_t total, size_t n,
			uint32_t *out);
void kvmem__crc32c_runs_sw(const void *buf, size_t len, size_t total, size_t n,
			   uint32_t *out);
void kvmem__crc32c_runs_sse42(const void *buf, size_t len, size_t total,
			      size_t n, uint32_t *out);

#endif /* KVMEM_INTERNAL_H */
