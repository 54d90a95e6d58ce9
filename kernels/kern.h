/* SPDX-License-Identifier: MIT */
/*
 * kern.h - what the host hands the kernels, and the page arithmetic they
 * share
 *
 * Compiled three ways: as C by libkvmem/cuda.c (the parameter blocks only),
 * as CUDA by nvcc, and as C++ by the tests' CPU executor (tests/simt), which
 * runs the unchanged kernel sources on host threads. Every kernel takes one
 * parameter block by value, so a launch is the same few bytes on both.
 *
 * The per-codeword and dequantization arithmetic is ecc_word.h and
 * quant_word.h, the headers the CPU library uses.
 */
#ifndef KVMEM_KERN_H
#define KVMEM_KERN_H

#include <stdint.h>

#include "kvmem/page.h"
#include "kvmem/quant.h"

#ifdef __CUDACC__
#define KVMEM_K_HD static __host__ __device__ __forceinline__
#else
#define KVMEM_K_HD static inline
#endif

/* One kind of page (kvmem_page_layout()), in the kernels' terms. */
struct kvmem_k_layout {
	uint32_t size;
	uint32_t scales_off, k_off, v_off;
	uint32_t nscales_k, nscales_v, scale_words;
	uint32_t checks_off; /* check codewords, two a check */
	uint32_t nchecks; /* per KVMEM_K_CHECK_SCALES scales, or per row */
	uint32_t row_words, row_bytes, row_data;
	uint16_t qmax; /* 0 for fp16; 448 for fp8 */
	uint8_t format, codec;
	uint8_t chan; /* K has one scale per channel */
	uint8_t bits; /* per value */
	uint8_t k; /* data bits per codeword */
	uint8_t wbytes; /* bytes per codeword */
	uint8_t unit; /* codewords that make whole data bytes */
};

struct kvmem_k_geom {
	uint32_t kv_heads, head_dim, tokens_per_page, group_size;
	uint64_t digest; /* kvmem_geometry_digest() */
	struct kvmem_k_layout l[2]; /* [0]: sealed, [1]: hot */
};

/*
 * The metadata of a page is golay24, 12 data bits in 3 bytes a word
 * (kvmem/page.h): the header, its 64 bytes and 4 zero bits as one
 * bitstream of 43 words, and the FP16 scales as another, scale i taking
 * stream bits [16 i, 16 i + 16) in words 16 i / 12 and (16 i + 15) / 12.
 * cuda.c checks these against page.h.
 */
#define KVMEM_K_HDR_WORDS 43
#define KVMEM_K_HDR_BYTES (KVMEM_K_HDR_WORDS * 3)
/* Offset of hcrc in the 64 header bytes: the CRC-32C of those bytes with
 * it zero (page.h). */
#define KVMEM_K_HDR_HCRC 52

/*
 * The checks (page.h): the low 24 bits of a CRC-32C of decoded data, in two
 * golay24 words each (6 bytes at checks_off + 6 i). A page with scales has
 * one per KVMEM_K_CHECK_SCALES scales of the stream (48 of its bytes, 32
 * of its words, the last segment shorter); a page without has one per row,
 * [K, V][kv_head][token], over the row's row_data decoded bytes.
 */
#define KVMEM_K_CHECK_SCALES 24
#define KVMEM_K_CHECK_WORDS (KVMEM_K_CHECK_SCALES * 16 / 12)

/*
 * Threads per CTA of every kernel. Bounds of (threads, 1 CTA per SM) let
 * ptxas give a kernel the registers it needs rather than spill for an
 * occupancy the shared memory would not allow anyway.
 */
#define KVMEM_K_THREADS 128
#define KVMEM_K_BOUNDS __launch_bounds__(KVMEM_K_THREADS, 1)
#define KVMEM_K_WARPS (KVMEM_K_THREADS / 32)

/* A page as the kernels see it; the public struct kvmem_cuda_page. */
struct kvmem_k_page {
	uint64_t addr;
	uint32_t token_start;
	uint32_t ntokens;
	uint32_t flags; /* KVMEM_HDR_HOT */
	uint32_t resv;
};

struct kvmem_k_encode_job {
	uint64_t page;
	uint64_t k, v;
	uint64_t seq, generation;
	uint32_t stride;
	uint32_t layer, token_start;
	uint32_t t0, n;
	uint32_t flags;
};

/* Source types of an encode: enum kvmem_cuda_dtype. */
#define KVMEM_K_DTYPE_F32 0
#define KVMEM_K_DTYPE_F16 1
#define KVMEM_K_DTYPE_BF16 2

struct kvmem_k_encode {
	struct kvmem_k_geom g;
	uint64_t jobs; /* struct kvmem_k_encode_job[njobs] */
	uint32_t njobs;
	uint32_t dtype; /* enum kvmem_cuda_dtype */
	uint32_t smem; /* bytes of dynamic shared memory: the page's scales */
	uint32_t resv;
};

struct kvmem_k_attend {
	struct kvmem_k_geom g;
	uint64_t pages; /* struct kvmem_k_page[] of all sequences */
	uint64_t seq_pages; /* uint32_t[batch + 1] */
	uint64_t q, out; /* float [batch][nq][n_heads][head_dim] */
	uint64_t mass; /* float [pages], or 0 */
	uint64_t stats; /* uint64_t [5], or 0 */
	uint64_t ws; /* partial results (kvmem_k_attend_ws()) */
	/* 0: kvmem_k_attend takes every page; else the pages
	 * kvmem_k_attend_q4 left to it, uint8_t [pages][kv_heads] in ws */
	uint64_t flags;
	uint32_t batch, n_heads, nq, erasure;
	uint32_t splits; /* CTAs per (sequence, KV head) */
	/* partial results per (sequence, KV head): splits, or 2 splits when
	 * kvmem_k_attend_q4 runs first (its own, then kvmem_k_attend's) */
	uint32_t parts;
	uint32_t tile; /* rows decoded at once */
	uint32_t total_pages;
	float scale;
	uint32_t resv;
};

struct kvmem_k_scrub {
	struct kvmem_k_geom g;
	uint64_t pages; /* struct kvmem_k_page[npages] */
	uint64_t counts; /* struct kvmem_page_counts[npages] */
	uint64_t status; /* int32_t[npages] */
	uint32_t npages;
	/* 1: a page is sealed, of the kind (hot or not) its entry's flags say
	 * and of its entry's ntokens, and a header that says otherwise is
	 * -EINVAL; 0: it is what its header says */
	uint32_t kinds;
};

/* CRC-32C of byte ranges of device memory, one CTA a range. */
struct kvmem_k_crc {
	uint64_t base; /* the device address the ranges are offsets from */
	uint64_t ranges; /* uint64_t[2 * n]: offset from base, then length */
	uint64_t out; /* uint32_t[n]: kvmem_crc32c(0, range) */
	uint32_t n;
	uint32_t resv;
};

/* Report of an injection, as uint64_t words. */
#define KVMEM_K_INJ_BITS 0
#define KVMEM_K_INJ_WORDS 1
#define KVMEM_K_INJ_HIST 2 /* + KVMEM_INJECT_HIST buckets */

struct kvmem_k_inject {
	uint64_t buf;
	uint64_t nwords;
	uint64_t seed;
	uint64_t threshold; /* a bit flips when its 64-bit draw is below */
	uint64_t flips; /* uint8_t[nwords], or 0 */
	uint64_t report; /* uint64_t[KVMEM_K_INJ_HIST + KVMEM_INJECT_HIST] */
	uint32_t word_bits, word_bytes;
};

/*
 * Shared memory of the attention kernel, carved one way for the host (which
 * sizes the launch) and the kernel (which uses it). QR = query rows of a
 * CTA, T = tile rows.
 */
struct kvmem_k_attend_smem {
	uint32_t q, acc, s, m, l, corr, pmax, psum; /* float arrays */
	uint32_t kt, vt; /* float [T][D] */
	uint32_t ke, ve; /* uint8_t [T][D]: KVMEM_K_LOST_* or 0 */
	uint32_t data; /* uint8_t [T][row_data]: one block's data */
	uint32_t wst; /* uint8_t [T][row_words]: each word's KVMEM_K_* */
	uint32_t rst; /* uint8_t [T]: each FP16 row's check, KVMEM_K_RUN_* */
	uint32_t edge, edge_ok; /* float, uint8_t [2][D]: rows next to a tile */
	uint32_t eruns; /* uint8_t [2][kvmem_k_edge_runs()]: their checks */
	uint32_t sc[2], sce[2]; /* K/V scales of the head: float, erased */
	uint32_t seg[2]; /* uint8_t: the checks of the segments they meet */
	uint32_t crc; /* uint32_t [256]: the CRC-32C table */
	uint32_t size;
};

#define KVMEM_K_ALIGN16(x) (((x) + 15u) & ~15u)

/* Scales of one KV head in a page: K or V (@is_v). */
KVMEM_K_HD uint32_t kvmem_k_head_scales(const struct kvmem_k_geom *g,
					const struct kvmem_k_layout *l,
					int is_v)
{
	if (!l->qmax)
		return 0;
	if (!is_v && l->chan)
		return g->head_dim;
	return g->tokens_per_page * (g->head_dim / g->group_size);
}

/*
 * Checks of scale segments a run of @n consecutive scales meets, at most:
 * where a head's scales or a row's start in the stream is not fixed.
 */
KVMEM_K_HD uint32_t kvmem_k_segs(uint32_t n)
{
	return n ? (n - 1) / KVMEM_K_CHECK_SCALES + 2 : 0;
}

/* Checks of a row next to a tile: its own, or its scales' segments. */
KVMEM_K_HD uint32_t kvmem_k_edge_runs(const struct kvmem_k_geom *g)
{
	return kvmem_k_segs(g->head_dim);
}

KVMEM_K_HD void kvmem_k_attend_carve(const struct kvmem_k_geom *g, uint32_t qr,
				     uint32_t t, struct kvmem_k_attend_smem *s)
{
	const uint32_t D = g->head_dim;
	uint32_t off = 0, rd = 0, rw = 0, ns[2] = { 0, 0 }, i, kind;

	for (kind = 0; kind < 2; kind++) {
		const struct kvmem_k_layout *l = &g->l[kind];

		rd = l->row_data > rd ? l->row_data : rd;
		rw = l->row_words > rw ? l->row_words : rw;
		for (i = 0; i < 2; i++) {
			uint32_t n = kvmem_k_head_scales(g, l, (int)i);

			ns[i] = n > ns[i] ? n : ns[i];
		}
	}
#define KVMEM_K_TAKE(field, bytes)                    \
	do {                                          \
		s->field = off;                       \
		off = KVMEM_K_ALIGN16(off + (bytes)); \
	} while (0)
	KVMEM_K_TAKE(q, qr * D * 4);
	KVMEM_K_TAKE(acc, qr * D * 4);
	KVMEM_K_TAKE(s, qr * t * 4);
	KVMEM_K_TAKE(m, qr * 4);
	KVMEM_K_TAKE(l, qr * 4);
	KVMEM_K_TAKE(corr, qr * 4);
	KVMEM_K_TAKE(pmax, qr * 4);
	KVMEM_K_TAKE(psum, qr * 4);
	KVMEM_K_TAKE(kt, t * D * 4);
	KVMEM_K_TAKE(vt, t * D * 4);
	KVMEM_K_TAKE(ke, t * D);
	KVMEM_K_TAKE(ve, t * D);
	KVMEM_K_TAKE(data, t * rd);
	KVMEM_K_TAKE(wst, t * rw);
	KVMEM_K_TAKE(rst, t);
	KVMEM_K_TAKE(edge, 2 * D * 4);
	KVMEM_K_TAKE(edge_ok, 2 * D);
	KVMEM_K_TAKE(eruns, 2 * kvmem_k_edge_runs(g));
	KVMEM_K_TAKE(sc[0], ns[0] * 4);
	KVMEM_K_TAKE(sc[1], ns[1] * 4);
	KVMEM_K_TAKE(sce[0], ns[0]);
	KVMEM_K_TAKE(sce[1], ns[1]);
	KVMEM_K_TAKE(seg[0], kvmem_k_segs(ns[0]));
	KVMEM_K_TAKE(seg[1], kvmem_k_segs(ns[1]));
	KVMEM_K_TAKE(crc, 256 * 4);
#undef KVMEM_K_TAKE
	s->size = off;
}

/*
 * The attention workspace: per (sequence, KV head, part) the running max,
 * sum and accumulator of each query row, then per (page, KV head) a
 * (max, sum) pair of each query row's softmax weights on that page, then
 * per (page, KV head) the flag kvmem_k_attend_q4 leaves for
 * kvmem_k_attend.
 */
KVMEM_K_HD uint64_t kvmem_k_attend_ws(const struct kvmem_k_geom *g,
				      uint32_t batch, uint32_t parts,
				      uint32_t qr, uint32_t total_pages,
				      uint64_t *mass_off, uint64_t *flags_off)
{
	uint64_t part = (uint64_t)batch * g->kv_heads * parts * qr *
			(g->head_dim + 2) * 4;

	*mass_off = part;
	*flags_off = part + (uint64_t)total_pages * g->kv_heads * qr * 2 * 4;
	return *flags_off +
	       KVMEM_K_ALIGN16((uint64_t)total_pages * g->kv_heads);
}

/*
 * kvmem_k_attend_q4, the fast kernel (attend_q4.cu), takes the sealed
 * pages of INT4 in one-byte codewords (h74, h84) or in golay24 words and
 * INT8 in secded72 words, at head_dim 64 or 128, up to 32 tokens a page,
 * group scales a multiple of 4 wide, aligned rows (one-byte words) or
 * blocks of a head's rows (the others), and at most KVMEM_K_Q4_QR query
 * rows.
 */
#define KVMEM_K_Q4_QR 8
/* The query rows the kernel for @qr rows is built for: kvmem_k_attend_q4
 * up to 4, kvmem_k_attend_q4w up to KVMEM_K_Q4_QR. */
#define KVMEM_K_Q4_QRM(qr) ((qr) <= 4 ? 4u : KVMEM_K_Q4_QR)

KVMEM_K_HD int kvmem_k_q4_ok(const struct kvmem_k_geom *g, uint32_t qr)
{
	const struct kvmem_k_layout *l = &g->l[0];
	const int dims = g->head_dim == 64 || g->head_dim == 128;
	const int block = g->tokens_per_page * l->row_bytes % 16 == 0;

	if (!l->qmax || g->group_size % 4 || g->tokens_per_page > 32 || !qr ||
	    qr > KVMEM_K_Q4_QR || l->k_off % 16 || l->v_off % 16)
		return 0;
	switch (l->codec) {
	case KVMEM_CODEC_GOLAY24:
		return l->bits == 4 && dims && block;
	case KVMEM_CODEC_SECDED72:
		return l->format == KVMEM_FMT_INT8 && dims && block;
	default:
		return l->bits == 4 && dims && l->row_bytes % 16 == 0;
	}
}

/*
 * Shared memory of kvmem_k_attend_q4: the query rows, their scaling for
 * the tensor cores (KVMEM_K_Q4_QM), the CRC-32C table
 * and its two slices (kvmem_k_crc_slices()), v.B of golay24 by halves
 * (kvmem_k_golay_lut()), the warps' running (max, sum), the warps'
 * weights of a page's tokens (for the query rows their kernel is built
 * for, KVMEM_K_Q4_QRM()), and per warp the decoded words of the
 * scale segments of a page's head, their outcomes, the segments'
 * verdicts, the head's scales (K's, then V's) and a copy of the head's
 * K rows, then its V rows, each row KVMEM_K_Q4_STRIDE() bytes apart; the
 * V rows' place holds the words of the scale segments and their checks
 * first (kvmem_k_q4_stage_bytes()).
 */
struct kvmem_k_q4_smem {
	uint32_t q, qm, tab, glut, ml, wt;
	uint32_t wd, wst, seg, sc, kv; /* of warp 0; warp w's at + w * warp */
	uint32_t warp;
	uint32_t size;
};

/* Floats of the query rows' scaling for the tensor cores
 * (kvmem_k_q4_qprep()). */
#define KVMEM_K_Q4_QM 32

/*
 * The FP16 baseline (baseline.cu): whether it takes the tensor cores
 * (kvmem_k_f16_tc()), and its shared memory, enough for either loop.
 */
KVMEM_K_HD int kvmem_k_f16_tc_ok(const struct kvmem_k_geom *g, uint32_t qr)
{
	return (g->head_dim == 64 || g->head_dim == 128) &&
	       g->tokens_per_page <= 32 && qr && qr <= KVMEM_K_Q4_QR;
}

KVMEM_K_HD uint32_t kvmem_k_f16_smem(uint32_t qr, uint32_t d)
{
	/* The per-token loop's: query rows, and per warp an accumulator
	 * and (max, sum) per query row. */
	const uint32_t loop =
		(qr * d * (1 + KVMEM_K_WARPS) + KVMEM_K_WARPS * qr * 2) * 4;
	/* The tensor cores': query rows, their scaling, per warp (max,
	 * sum) per query row and a page's weights (for 4 or 8 rows). */
	const uint32_t tc =
		KVMEM_K_ALIGN16(qr * d * 4) + KVMEM_K_Q4_QM * 4 +
		KVMEM_K_ALIGN16(KVMEM_K_WARPS * qr * 2 * 4) +
		KVMEM_K_WARPS * 32 * (qr <= 4 ? 4 : KVMEM_K_Q4_QR) * 4;

	return (d == 64 || d == 128) && qr && qr <= KVMEM_K_Q4_QR && tc > loop
		       ? tc
		       : loop;
}

/* A row of @d one-byte words and 16 bytes more: the lanes of a quarter
 * warp, a row each, then load 16 bytes of their rows from other banks. */
#define KVMEM_K_Q4_STRIDE(d) ((d) + 16)

/*
 * The most bytes the words of the scale segments a head's K or V scales
 * meet and their checks take in a warp's copy: each run in the 16-byte
 * pieces that hold it.
 */
KVMEM_K_HD uint32_t kvmem_k_q4_stage_bytes(const struct kvmem_k_geom *g)
{
	uint32_t i, segs, n = 0;

	for (i = 0; i < 2; i++) {
		segs = kvmem_k_segs(kvmem_k_head_scales(g, &g->l[0], (int)i));
		n += KVMEM_K_ALIGN16(3 * KVMEM_K_CHECK_WORDS * segs + 30) +
		     KVMEM_K_ALIGN16(6 * segs + 30);
	}
	return n;
}

KVMEM_K_HD void kvmem_k_q4_carve(const struct kvmem_k_geom *g, uint32_t qr,
				 struct kvmem_k_q4_smem *s)
{
	const uint32_t rows =
		g->tokens_per_page * KVMEM_K_Q4_STRIDE(g->head_dim);
	const uint32_t stage = kvmem_k_q4_stage_bytes(g);
	const struct kvmem_k_layout *l = &g->l[0];
	const uint32_t ns =
		kvmem_k_head_scales(g, l, 0) + kvmem_k_head_scales(g, l, 1);
	const uint32_t segs = kvmem_k_segs(kvmem_k_head_scales(g, l, 0)) +
			      kvmem_k_segs(kvmem_k_head_scales(g, l, 1));
	const uint32_t nw = segs * KVMEM_K_CHECK_WORDS;
	uint32_t off = 0;

	s->q = off;
	off = KVMEM_K_ALIGN16(off + qr * g->head_dim * 4);
	s->qm = off;
	off = KVMEM_K_ALIGN16(off + KVMEM_K_Q4_QM * 4);
	s->tab = off;
	off = KVMEM_K_ALIGN16(off + 3 * 256 * 4);
	s->glut = off;
	off = KVMEM_K_ALIGN16(off + 128 * 2);
	s->ml = off;
	off = KVMEM_K_ALIGN16(off + KVMEM_K_WARPS * qr * 2 * 4);
	s->wt = off;
	off = KVMEM_K_ALIGN16(off +
			      KVMEM_K_WARPS * 32 * KVMEM_K_Q4_QRM(qr) * 4);
	s->sc = 0;
	s->wd = KVMEM_K_ALIGN16(s->sc + ns * 4);
	s->wst = KVMEM_K_ALIGN16(s->wd + nw * 2);
	s->seg = s->wst + nw;
	s->kv = KVMEM_K_ALIGN16(s->seg + segs);
	s->warp = s->kv + rows + (rows > stage ? rows : stage);
	s->sc += off;
	s->wd += off;
	s->wst += off;
	s->seg += off;
	s->kv += off;
	s->size = off + KVMEM_K_WARPS * s->warp;
}

#endif /* KVMEM_KERN_H */
