/*
 * internal.h - libkvmem internals shared between its source files
 *
 * Never installed. Symbols declared here are kvmem__*: visible in the static
 * library (the tests and tools use some), not exported from libkvmem.so.
 */
#ifndef KVMEM_INTERNAL_H
#define KVMEM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kvmem/ecc.h"

#define KVMEM_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* For the SIMD kernels' helpers, which must melt into their loops. */
#define ALWAYS_INLINE static inline __attribute__((always_inline))

/*
 * SIMD code paths, each a superset of the one before. The active one is the
 * best the CPU runs, picked on first use; KVMEM_SIMD=portable, avx2 or
 * avx512 in the environment caps it; tests and benchmarks switch it with
 * kvmem__simd_force(). A kernel a level does not have comes from the level
 * below.
 *
 * avx512 wants AVX-512 F, BW, VL and VBMI, GFNI and AVX512-VNNI together,
 * as every CPU with AVX-512 since Ice Lake and Zen 4 has them; a CPU with
 * less runs avx2.
 */
enum kvmem__simd {
	KVMEM__SIMD_PORTABLE = 0,
	KVMEM__SIMD_AVX2 = 1,
	KVMEM__SIMD_AVX512 = 2,
	KVMEM__SIMD_NR,
};

int kvmem__simd_active(void);
int kvmem__simd_supported(int level);
int kvmem__simd_force(int level);
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

/* a += b, for summing what several decodes found. */
static inline void kvmem__counts_add(struct kvmem_ecc_counts *a,
				     const struct kvmem_ecc_counts *b)
{
	a->clean += b->clean;
	a->corrected += b->corrected;
	a->uncorrectable += b->uncorrectable;
	a->bits_corrected += b->bits_corrected;
}

/* ecc.c: the active scan kernel (first word with a non-zero syndrome). */
size_t kvmem__ecc_scan(int codec, const uint8_t *code, size_t nwords);

/* quant.c */
uint16_t kvmem__scale(int fmt, const float *x, size_t n, size_t stride);
void kvmem__quantize_row(int fmt, const float *x, size_t n, unsigned int group,
			 const uint16_t *scales, uint8_t *out);
void kvmem__dequant_row(int fmt, const uint8_t *data, unsigned int dim,
			unsigned int group, const float *scales, float *out);

struct kvmem_geometry;
struct kvmem_page_layout;
struct kvmem_page_hdr;
struct kvmem_ecc_counts;

void kvmem__hdr_encode(uint8_t *page, const struct kvmem_page_hdr *hdr);
/* Scale words that hold scale bits; a last word past them is padding. */
size_t kvmem__page_scale_words(const struct kvmem_page_layout *l);
/* Decode a header's words only (kvmem_page_read_header() checks it). */
int kvmem__hdr_decode(const uint8_t *page, struct kvmem_page_hdr *hdr,
		      struct kvmem_ecc_counts *c);
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
 * erased. Returns the number of erased values; only when it is non-zero is
 * @erased[n][head_dim] written (0, or KVMEM__LOST_*). Word counts are added
 * to @c.
 */
long kvmem__page_rows(const struct kvmem_geometry *g,
		      const struct kvmem_page_layout *l, const uint8_t *page,
		      int is_v, uint32_t h, uint32_t t0, uint32_t n,
		      const float *scales, const uint8_t *scale_erased,
		      float *out, uint8_t *erased, struct kvmem_ecc_counts *c,
		      void *scratch);
/*
 * Rows [t0, t0 + n) of head @h as int4 values one per byte, when the page
 * is int4 in h74/h84 (its codewords are that already) or golay24 (expanded
 * into @scratch), for kernels that read them directly: returns the first
 * row, rows *@rstride bytes apart (a corrected copy in @scratch when some
 * word needed correcting), and sets *@sc,
 * *@sstride and *@group to their scales as the *_cw4 kernels take them,
 * counting the words; or NULL, counting nothing, when some word is
 * uncorrectable or a scale is erased (decode with kvmem__page_rows()).
 */
const uint8_t *kvmem__page_rows_cw4(
	const struct kvmem_geometry *g, const struct kvmem_page_layout *l,
	const uint8_t *page, int is_v, uint32_t h, uint32_t t0, uint32_t n,
	const float *scales, const uint8_t *scale_erased, const float **sc,
	size_t *sstride, unsigned int *group, size_t *rstride,
	struct kvmem_ecc_counts *c, void *scratch);
/*
 * kvmem__page_rows_cw4() for int8 pages of any codec: rows [t0, t0 + n)
 * of head @h decoded (corrected where a word needs it) into @scratch, one
 * int8 value per byte, rows *@rstride bytes apart; or NULL, counting
 * nothing, when some word is uncorrectable or a scale is erased.
 */
const int8_t *kvmem__page_rows_i8(const struct kvmem_geometry *g,
				  const struct kvmem_page_layout *l,
				  const uint8_t *page, int is_v, uint32_t h,
				  uint32_t t0, uint32_t n, const float *scales,
				  const uint8_t *scale_erased, const float **sc,
				  size_t *sstride, unsigned int *group,
				  size_t *rstride, struct kvmem_ecc_counts *c,
				  void *scratch);
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
 * A page's padding (page.c: page_runs()): kvmem__page_tidy() puts back the
 * zeros the encoder wrote there, in the bytes [@from, @to) of the page
 * (returns how many bytes it changed), and kvmem__page_crc() is the
 * CRC-32C of the page after its header as if it had: what the values
 * depend on, the same as the header's CRC for a page as it was sealed.
 */
size_t kvmem__page_tidy(uint8_t *page, const struct kvmem_geometry *g,
			const struct kvmem_page_layout *l, uint32_t ntokens,
			size_t from, size_t to);
uint32_t kvmem__page_crc(const uint8_t *page, const struct kvmem_geometry *g,
			 const struct kvmem_page_layout *l, uint32_t ntokens);
/*
 * Make every value of a page of @ntokens tokens read as lost: the scales
 * and the words of the payload that hold values become words their
 * decoders report uncorrectable (see poison_word()). The header and the
 * padding are left as they are.
 */
void kvmem__page_poison(uint8_t *page, const struct kvmem_geometry *g,
			const struct kvmem_page_layout *l, uint32_t ntokens);
/* Write token @t of a hot page; @row holds one row's data bytes. */
void kvmem__page_put_token(const struct kvmem_geometry *g,
			   const struct kvmem_page_layout *l, uint8_t *page,
			   uint32_t t, const float *k, const float *v,
			   uint8_t *row);

/*
 * Attention kernels, portable, AVX2 and AVX-512 (attend_portable.c,
 * attend_avx2.c, attend_avx512.c).
 *
 * dequant:     one row of @dim values of format @fmt from its data bytes,
 *              scale i / @group (no scales for fp16)
 * dequant_cw4: one int4 row from h74/h84 codewords, one value per byte
 * scores:      s[g][t] = scale * q[g] . k[t] for @ng query heads, @n rows
 * accum:       acc[g] += sum_t p[g][t] * v[t]
 * softmax:     m = max(@m, max x[i]); x[i] = e^(x[i] - m); returns the sum
 *              of the new x[i] and leaves m in *@m
 * rescale:     x[i] *= f for the @n values (a state whose max grew)
 * golay_nibbles: the @nvals int4 values of golay24 codewords (@code_bytes
 *              of them readable), one value per byte (low nibble), as
 *              h74/h84 codewords hold them; @out has room for nvals + 16
 * scales_ok:   1 if every one of the @n values is in [0, 65504], the
 *              range of the scales an encoder writes, else 0
 * scores_cw4, accum_cw4: scores and accum straight from int4 h74/h84
 *              codewords, one value per byte: row t at code + t * stride,
 *              its scales at scales + t * sstride, one per @group values
 *              (group 1 and sstride 0 for channel scales); row g of the
 *              scores or weights at s + g * ld, p + g * ld
 * scores_i8, accum_i8: the same from int8 values, one per byte (rows of
 *              kvmem__page_rows_i8()); NULL where a level has none (its
 *              int8 rows go through dequant and the float kernels)
 */
struct kvmem__attn_kernels {
	void (*dequant)(int fmt, const uint8_t *data, unsigned int dim,
			unsigned int group, const float *scales, float *out);
	void (*dequant_cw4)(const uint8_t *code, unsigned int dim,
			    unsigned int group, const float *scales,
			    float *out);
	void (*scores)(const float *q, unsigned int ng, const float *k,
		       unsigned int n, unsigned int dim, float scale, float *s);
	void (*accum)(const float *p, unsigned int ng, const float *v,
		      unsigned int n, unsigned int dim, float *acc);
	float (*softmax)(float *x, unsigned int n, float *m);
	void (*rescale)(float *x, unsigned int n, float f);
	int (*scales_ok)(const float *x, unsigned int n);
	void (*golay_nibbles)(const uint8_t *code, size_t code_bytes,
			      unsigned int nvals, uint8_t *out);
	void (*scores_cw4)(const float *q, unsigned int ng, const uint8_t *code,
			   size_t stride, unsigned int n, unsigned int dim,
			   unsigned int group, const float *scales,
			   size_t sstride, float scale, float *s,
			   unsigned int ld);
	void (*accum_cw4)(const float *p, unsigned int ng, const uint8_t *code,
			  size_t stride, unsigned int n, unsigned int dim,
			  unsigned int group, const float *scales,
			  size_t sstride, float *acc, unsigned int ld);
	void (*scores_i8)(const float *q, unsigned int ng, const int8_t *code,
			  size_t stride, unsigned int n, unsigned int dim,
			  unsigned int group, const float *scales,
			  size_t sstride, float scale, float *s,
			  unsigned int ld);
	void (*accum_i8)(const float *p, unsigned int ng, const int8_t *code,
			 size_t stride, unsigned int n, unsigned int dim,
			 unsigned int group, const float *scales,
			 size_t sstride, float *acc, unsigned int ld);
	/*
	 * KVMEM_ATTEND_INT8_SCORES: scores of @ng int8 query rows (@q8
	 * [ng][dim], row g's scale @qs[g], @qsum [ng][dim / 32] the sums of
	 * each 32 of its values where dim % 32 == 0, else NULL) over rows
	 * of int4 codewords (or int8 values, @i8) with group scales (@group
	 * > 1). Per group the exact integer dot product, then acc =
	 * fmaf(dot, group scale, acc) over the groups in order from 0.0f,
	 * and s = acc * (scale * qs[g]): the same float operations on every
	 * path, so the same bits.
	 */
	void (*scores_q8)(const int8_t *q8, const float *qs,
			  const int32_t *qsum, unsigned int ng,
			  const uint8_t *code, size_t stride, unsigned int n,
			  unsigned int dim, unsigned int group,
			  const float *scales, size_t sstride, float scale,
			  float *s, unsigned int ld, int i8);
};

extern const struct kvmem__attn_kernels kvmem__attn_portable;
float kvmem__expf(float x);
extern const struct kvmem__attn_kernels kvmem__attn_avx2;
extern const struct kvmem__attn_kernels kvmem__attn_avx512;
const struct kvmem__attn_kernels *kvmem__attn(void);

/*
 * attend.c: the online softmax over tiles of rows, shared by kvmem_attend()
 * and the benchmarks' unprotected baselines so both do the same arithmetic.
 *
 * attn_tile:   fold a tile of @n rows of K and V of KV head @h into the
 *              state of its rows h*G .. h*G+G-1; @mass, if not NULL,
 *              keeps per row of the group a (max, sum) pair of the
 *              softmax weights this tile and earlier ones under the same
 *              @mass contributed. A row whose query may not see the
 *              tile's later tokens (tpos, pos0) gives them no weight.
 * attn_finish: out[i] = acc[i] / l[i]
 */
#define KVMEM__ATTN_TILE 64 /* rows: a tile of K and of V stay in L1/L2 */

struct kvmem__attn {
	const struct kvmem__attn_kernels *kn;
	uint32_t G, D; /* rows of state per KV head (query heads of a group,
			* times queries), head_dim */
	uint32_t qg; /* query heads per KV head: row r is query r / qg's */
	uint32_t pos0; /* query i sees tokens up to pos0 + i (init: all) */
	uint32_t tpos; /* the first token of the tile being folded in */
	float scale;
	/* KVMEM_ATTEND_INT8_SCORES: the query rows as int8 and their
	 * scales, in the order of acc's rows; NULL: float scores only */
	const int8_t *q8;
	const float *qs;
	const int32_t *qsum; /* [rows][D / 32], where D % 32 == 0 */
	float *acc; /* [n_heads][D] */
	float *m, *l; /* [n_heads]: running max, sum of exp(score - m) */
	float *sc; /* [G][KVMEM__ATTN_TILE] scores, then weights */
};

/*
 * @bytes at a cache line boundary (free() them): rows the vector kernels
 * load 64 bytes at a time then never straddle two lines.
 */
void *kvmem__alloc_lines(size_t bytes);

int kvmem__attn_init(struct kvmem__attn *a, uint32_t n_heads, uint32_t G,
		     uint32_t D, float scale);
void kvmem__attn_tile(struct kvmem__attn *a, const float *q, uint32_t h,
		      const float *k, const float *v, uint32_t n, float *mass);
/* The middle of attn_tile: a->sc holds the scores; leaves the weights. */
void kvmem__attn_softmax(struct kvmem__attn *a, uint32_t h, uint32_t n,
			 float *mass);
/*
 * Several queries as rows of one state: query i's head x of @from
 * ([nq][nh][D]) to row (x / G * nq + i) * G + x % G of @to, so that the
 * rows of a KV head (G query heads each) stay together; @to_rows 0 moves
 * them back.
 */
void kvmem__attn_rows_move(const float *from, float *to, uint32_t nq,
			   uint32_t nh, uint32_t G, uint32_t D, int to_rows);
void kvmem__attn_finish(const struct kvmem__attn *a, uint32_t n_heads,
			float *out);
void kvmem__attn_free(struct kvmem__attn *a);

/*
 * pool.c: a persistent thread pool. kvmem__pool_run() runs @fn(@arg, i) for
 * i = 0 on the calling thread and i = 1 .. on up to @n - 1 pool threads
 * (created in *@pp on first need) and returns how many ran, 1 .. @n, once
 * all have returned. kvmem__cpus() is how many CPUs the process may run on.
 */
struct kvmem__pool;

unsigned int kvmem__pool_run(struct kvmem__pool **pp, unsigned int n,
			     void (*fn)(void *arg, unsigned int worker),
			     void *arg);
void kvmem__pool_free(struct kvmem__pool *p);
unsigned int kvmem__cpus(void);

uint32_t kvmem__crc32c_sw(uint32_t crc, const void *buf, size_t len);
uint32_t kvmem__crc32c_sse42(uint32_t crc, const void *buf, size_t len);

/*
 * kvmem__socket_path() - where kvmemd listens by default: @file in
 * /run/kvmem as root, else in $XDG_RUNTIME_DIR/kvmem (an absolute path, as
 * the XDG spec asks), else in ./run; kvmemd and its clients both ask here.
 *
 * Return: 0, 1 when $XDG_RUNTIME_DIR made a path too long for @len and
 * ./run was taken instead, -ENAMETOOLONG when even that does not fit.
 */
int kvmem__socket_path(char *buf, size_t len, const char *file);

#endif /* KVMEM_INTERNAL_H */
