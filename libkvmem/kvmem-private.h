/* SPDX-License-Identifier: MIT */
/*
 * kvmem-private.h - libkvmem's interfaces for kvmemd and the tools of this
 * tree, and nobody else
 *
 * kvmemd (daemon/) and the programs of tools/ link libkvmem.a statically.
 * Besides the public headers (include/kvmem/) they include this one, and none
 * of the headers beside it: what they use of the library's insides is
 * declared, or included, here, each part with who uses it, so that this
 * file is the whole contract between them. It is not installed and not
 * part of the ABI: its kvmem__* symbols are not exported from libkvmem.so
 * (libkvmem.map), and any of it may change with any commit, its users in
 * the same commit.
 *
 * internal.h and cuda_impl.h, libkvmem's own headers, include it: every
 * declaration here is the one the library's definitions are compiled
 * against. The tests (tests/), which try the internals themselves, may
 * include those headers as well.
 */
#ifndef KVMEM_PRIVATE_H
#define KVMEM_PRIVATE_H

#include <stddef.h>
#include <stdint.h>

#include "kvmem/ecc.h"
#include "quant_word.h" /* kvmem_f2h(), kvmem_h2f(): bench-attend-gpu.c */
#include "ring.h" /* the rings' memory ordering: daemon/session.c */
#include "rng.h" /* seeded random numbers: the benchmarks, kvmem-eval */

/*
 * kvmem__socket_path() - where kvmemd listens by default: @file in
 * /run/kvmem as root, else in $XDG_RUNTIME_DIR/kvmem (an absolute path, as
 * the XDG spec asks), else in ./run; kvmemd and its clients both ask here
 * (daemon/config.c, kvmemctl for the admin socket).
 *
 * Return: 0, 1 when $XDG_RUNTIME_DIR made a path too long for @len and
 * ./run was taken instead, -ENAMETOOLONG when even that does not fit.
 */
int kvmem__socket_path(char *buf, size_t len, const char *file);

/* ---- pages: daemon/ras.c and daemon/session.c ------------------------ */

struct kvmem_geometry;
struct kvmem_page_layout;
struct kvmem_page_hdr;

/* a += b, for summing what several decodes found. */
static inline void kvmem__counts_add(struct kvmem_ecc_counts *a,
				     const struct kvmem_ecc_counts *b)
{
	a->clean += b->clean;
	a->corrected += b->corrected;
	a->uncorrectable += b->uncorrectable;
	a->bits_corrected += b->bits_corrected;
}

void kvmem__hdr_encode(uint8_t *page, const struct kvmem_page_hdr *hdr);
/* Scale words that hold scale bits; a last word past them is padding. */
size_t kvmem__page_scale_words(const struct kvmem_page_layout *l);
/* Decode a header's words only (kvmem_page_read_header() checks it). */
int kvmem__hdr_decode(const uint8_t *page, struct kvmem_page_hdr *hdr,
		      struct kvmem_ecc_counts *c);
/*
 * A page's padding (page.c: page_runs()): put back the zeros the encoder
 * wrote there, in the bytes [@from, @to) of the page. Returns how many
 * bytes it changed.
 */
size_t kvmem__page_tidy(uint8_t *page, const struct kvmem_geometry *g,
			const struct kvmem_page_layout *l, uint32_t ntokens,
			size_t from, size_t to);
/*
 * Make every value of a page of @ntokens tokens read as lost: the scales
 * and the words of the payload that hold values become words their
 * decoders report uncorrectable (see poison_word()). The header and the
 * padding are left as they are.
 */
void kvmem__page_poison(uint8_t *page, const struct kvmem_geometry *g,
			const struct kvmem_page_layout *l, uint32_t ntokens);

/* ---- GPU memory: daemon/pool.c's GPU pool ---------------------------- */

struct kvmem_cuda;

/*
 * Device memory another process can map: the driver's virtual memory
 * management, shared as a POSIX file descriptor. kvmemd's GPU pool makes
 * it; a client maps what its session was given (kvmem_cuda_register()).
 */
struct kvmem__vmm {
	uint64_t addr; /* mapped in this process, read-write for the device */
	size_t bytes; /* 0: nothing */
	unsigned long long handle;
};

/*
 * The size such memory comes in; 0, with the reason in kvmem_cuda_error(),
 * when the GPU or its driver cannot share memory by descriptor.
 */
size_t kvmem__cuda_vmm_granularity(struct kvmem_cuda *cu);

/* Bytes of memory the GPU has; 0, with the reason in kvmem_cuda_error(),
 * when the driver does not say. */
uint64_t kvmem__cuda_total_mem(struct kvmem_cuda *cu);

/* @bytes (a multiple of the granularity) of device memory, zeroed and
 * mapped here, and a descriptor that shares it in @fd: 0, -ENOMEM, -EIO. */
int kvmem__cuda_vmm_create(struct kvmem_cuda *cu, size_t bytes,
			   struct kvmem__vmm *m, int *fd);

/* Unmap and release; the memory is freed once no process maps it. */
void kvmem__cuda_vmm_free(struct kvmem_cuda *cu, struct kvmem__vmm *m);

/* Lock @bytes of host memory at @p and map them for the device (portable,
 * device-mapped): copies to and from them run at the bus's speed. 0,
 * -ENOMEM when the driver cannot lock them, -EBUSY when registered
 * already, -EIO; kvmem__cuda_host_unregister() before they are unmapped. */
int kvmem__cuda_host_register(struct kvmem_cuda *cu, void *p, size_t bytes);
void kvmem__cuda_host_unregister(struct kvmem_cuda *cu, void *p);

/* A stream of the caller's own, that neither waits for the legacy default
 * stream nor holds it up: 0, or -EIO. Destroyed before the handle is
 * closed; its work then goes on to its end. */
int kvmem__cuda_stream_create(struct kvmem_cuda *cu, void **stream);
void kvmem__cuda_stream_destroy(struct kvmem_cuda *cu, void *stream);

/*
 * kvmem_cuda_scrub(), where with @kinds each page is sealed, of the kind
 * its entry's flags say (KVMEM_HDR_HOT or not) and of its entry's
 * ntokens: a page whose header says otherwise is not walked (-EINVAL), so
 * a header its client rewrote never takes the kernel past the slot the
 * caller knows the page to have, nor makes it put back as padding the
 * rows of tokens the page holds.
 */
int kvmem__cuda_scrub(struct kvmem_cuda *cu, const struct kvmem_geometry *g,
		      uint64_t pages, uint32_t npages, uint64_t counts,
		      uint64_t status, int kinds, void *stream);

/*
 * kvmem__cuda_crc32c() - the CRC-32C of @n byte ranges of device memory
 * @ranges: device address of uint64_t[2 * @n]: each range's offset from
 *          @base, then its length
 * @out: device address of uint32_t[@n]: each kvmem_crc32c(0, range)
 *
 * Enqueued on @stream. Return: 0, -EINVAL, or -EIO when the launch fails.
 */
int kvmem__cuda_crc32c(struct kvmem_cuda *cu, uint64_t base, uint64_t ranges,
		       uint32_t n, uint64_t out, void *stream);

/* The device's UUID, as nvidia-smi shows it: 16 bytes. */
const uint8_t *kvmem__cuda_uuid(const struct kvmem_cuda *cu);

/* "GPU-" and the UUID in the form nvidia-smi prints; @out of 41 bytes. */
void kvmem__cuda_uuid_str(const uint8_t uuid[16], char out[41]);

/* ---- SIMD code paths: tools/bench-codec.c ---------------------------- */

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
int kvmem__simd_force(int level);

/* ---- attention: tools/bench-attend.c's unprotected baselines --------- */

/*
 * Attention kernels, portable, AVX2 and AVX-512 (attend_portable.c,
 * attend_avx2.c, attend_avx512.c).
 *
 * dequant:     one row of @dim values of format @fmt from its data bytes,
 *              scale i / @group (no scales for fp16)
 * dequant_cw4: one int4 row from h74/h84 codewords, one value per byte
 *              (its low nibble); with @levels, the row of a format whose
 *              codes a byte index them (lm4, lm2): levels[code] * scale
 * scores:      s[g][t] = scale * q[g] . k[t] for @ng query heads, @n rows
 * accum:       acc[g] += sum_t p[g][t] * v[t]
 * softmax:     m = max(@m, max x[i]); x[i] = e^(x[i] - m); returns the sum
 *              of the new x[i] and leaves m in *@m
 * rescale:     x[i] *= f for the @n values (a state whose max grew)
 * golay_nibbles: the @nvals int4 values of golay24 codewords (@code_bytes
 *              of them readable), one value per byte (low nibble), as
 *              h74/h84 codewords hold them; @out has room for nvals + 16
 * lm3_codes:   the @nvals 3-bit codes of lm3 h74/h84 codewords (@code_bytes
 *              of them readable), code i bits 3i..3i+2 of the stream of
 *              the words' data nibbles (low nibble of each byte, LSB
 *              first), one code per byte at @out
 * scales_ok:   1 if every one of the @n values is in [0, 65504], the
 *              range of the scales an encoder writes, else 0
 * fp8_nan:     1 if one of the @n E4M3 codes at @c is the NaN code
 *              (S.1111.111), which no encoder writes: a value that reads
 *              so is lost
 * scores_cw4, accum_cw4: scores and accum straight from int4 h74/h84
 *              codewords, one value per byte (with @levels, lm codes
 *              indexing them, as dequant_cw4): row t at code + t * stride,
 *              its scales at scales + t * sstride, one per @group values
 *              (group 1 and sstride 0 for channel scales); row g of the
 *              scores or weights at s + g * ld, p + g * ld
 * scores_b8, accum_b8: the same from values one a byte (rows of
 *              kvmem__page_rows_b8()): int8 values, or E4M3 codes with
 *              @fmt KVMEM_FMT_FP8 (never the NaN code, which those rows
 *              do not hold), each times its scale as dequant() makes it;
 *              NULL where a level has none (such rows go through dequant
 *              and the float kernels)
 * scores_vq, accum_vq: the same from vq2 rows (kvmem__page_rows_vq()):
 *              byte i of a row indexes @book, entry e values
 *              book[4e .. 4e + 3], those of values 4i .. 4i + 3 (no
 *              scales: the entries are the values)
 */
struct kvmem__attn_kernels {
	void (*dequant)(int fmt, const uint8_t *data, unsigned int dim,
			unsigned int group, const float *scales, float *out);
	void (*dequant_cw4)(const uint8_t *code, unsigned int dim,
			    unsigned int group, const float *scales,
			    const float *levels, float *out);
	void (*scores)(const float *q, unsigned int ng, const float *k,
		       unsigned int n, unsigned int dim, float scale, float *s);
	void (*accum)(const float *p, unsigned int ng, const float *v,
		      unsigned int n, unsigned int dim, float *acc);
	float (*softmax)(float *x, unsigned int n, float *m);
	void (*rescale)(float *x, unsigned int n, float f);
	int (*scales_ok)(const float *x, unsigned int n);
	int (*fp8_nan)(const uint8_t *c, size_t n);
	void (*golay_nibbles)(const uint8_t *code, size_t code_bytes,
			      unsigned int nvals, uint8_t *out);
	void (*lm3_codes)(const uint8_t *code, size_t code_bytes,
			  unsigned int nvals, uint8_t *out);
	void (*scores_cw4)(const float *q, unsigned int ng, const uint8_t *code,
			   size_t stride, unsigned int n, unsigned int dim,
			   unsigned int group, const float *scales,
			   size_t sstride, float scale, float *s,
			   unsigned int ld, const float *levels);
	void (*accum_cw4)(const float *p, unsigned int ng, const uint8_t *code,
			  size_t stride, unsigned int n, unsigned int dim,
			  unsigned int group, const float *scales,
			  size_t sstride, float *acc, unsigned int ld,
			  const float *levels);
	void (*scores_b8)(const float *q, unsigned int ng, const uint8_t *code,
			  size_t stride, unsigned int n, unsigned int dim,
			  unsigned int group, const float *scales,
			  size_t sstride, float scale, float *s,
			  unsigned int ld, int fmt);
	void (*accum_b8)(const float *p, unsigned int ng, const uint8_t *code,
			 size_t stride, unsigned int n, unsigned int dim,
			 unsigned int group, const float *scales,
			 size_t sstride, float *acc, unsigned int ld, int fmt);
	void (*scores_vq)(const float *q, unsigned int ng, const uint8_t *idx,
			  size_t stride, unsigned int n, unsigned int dim,
			  const float *book, float scale, float *s,
			  unsigned int ld);
	void (*accum_vq)(const float *p, unsigned int ng, const uint8_t *idx,
			 size_t stride, unsigned int n, unsigned int dim,
			 const float *book, float *acc, unsigned int ld);
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

int kvmem__attn_init(struct kvmem__attn *a, uint32_t n_heads, uint32_t G,
		     uint32_t D, float scale);
void kvmem__attn_tile(struct kvmem__attn *a, const float *q, uint32_t h,
		      const float *k, const float *v, uint32_t n, float *mass);
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

/* pool.c: how many CPUs the process may run on (bench-attend.c). */
unsigned int kvmem__cpus(void);

#endif /* KVMEM_PRIVATE_H */
