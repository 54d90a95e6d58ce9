/* SPDX-License-Identifier: MIT */
/*
 * page_dev.cuh - the protected page, read and written by device code
 *
 * Codewords of any codec as (lo, hi) pairs: the low 64 bits and, for
 * secded72 only, the check byte. The word arithmetic itself is ecc_word.h;
 * this file loads and stores words, cuts rows into units of whole data
 * bytes, and finds values, scales and the header (golay24 bitstreams) in a
 * page.
 */
#ifndef KVMEM_PAGE_DEV_CUH
#define KVMEM_PAGE_DEV_CUH

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ecc_word.h"
#include "kern.h"
#include "kvmem/ecc.h"
#include "kvmem/inject.h"
#include "kvmem/kvmem.h"
#include "kvmem/page.h"
#include "kvmem/quant.h"
#include "quant_word.h"

#define KVMEM_DFN static __device__ __forceinline__

#ifdef __CUDACC__
#define KVMEM_DYN_SMEM(name) extern __shared__ __align__(16) uint8_t name[]
#else
#define KVMEM_DYN_SMEM(name) uint8_t *name = (uint8_t *)simt_dyn_smem()
#endif

/* @N floats of shared memory in as few aligned loads as the GPU has. */
template <int N> struct alignas(N * 4 > 16 ? 16 : N * 4) kvmem_k_fvec {
	float x[N];
};

/* Unroll the loop that follows, so that the arrays it indexes stay in
 * registers (nvcc; the CPU executor does without); @n times; or keep it
 * rolled, a cold path kept short. */
#ifdef __CUDACC__
#define KVMEM_K_PRAGMA(x) _Pragma(#x)
#define KVMEM_K_UNROLL _Pragma("unroll")
#define KVMEM_K_UNROLL_BY(n) KVMEM_K_PRAGMA(unroll n)
#define KVMEM_K_NO_UNROLL _Pragma("unroll 1")
#else
#define KVMEM_K_UNROLL
#define KVMEM_K_UNROLL_BY(n)
#define KVMEM_K_NO_UNROLL
#endif

/* Ask for the L2 line at @p ahead of its use: a hint, nothing on the CPU. */
#ifdef __CUDA_ARCH__
#define kvmem_k_prefetch(p) asm volatile("prefetch.global.L2 [%0];" : : "l"(p))
#else
#define kvmem_k_prefetch(p) ((void)(p))
#endif

/*
 * Sixteen bytes from device memory @src to shared memory @dst, on their
 * way without a register (cp.async, sm_80), in the thread's group of
 * copies that kvmem_k_cp_commit() closes. kvmem_k_cp_wait<N>() waits
 * until at most the N groups committed last are still on their way: the
 * others are there for this thread, and for the others of its warp after
 * a __syncwarp() that follows. A plain copy on the CPU.
 */
#ifdef __CUDA_ARCH__
KVMEM_DFN void kvmem_k_cp16(void *dst, const void *src)
{
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
		     :
		     : "r"((unsigned int)__cvta_generic_to_shared(dst)),
		       "l"(src)
		     : "memory");
}

KVMEM_DFN void kvmem_k_cp_commit(void)
{
	asm volatile("cp.async.commit_group;" : : : "memory");
}

template <int N> KVMEM_DFN void kvmem_k_cp_wait(void)
{
	asm volatile("cp.async.wait_group %0;" : : "n"(N) : "memory");
}
#else
KVMEM_DFN void kvmem_k_cp16(void *dst, const void *src)
{
	memcpy(dst, src, 16);
}

KVMEM_DFN void kvmem_k_cp_commit(void)
{
}

template <int N> KVMEM_DFN void kvmem_k_cp_wait(void)
{
}
#endif

/*
 * D = A.B + C on the tensor cores, by the whole warp (mma.sync m16n8k16,
 * sm_80): A 16x16 and B 16x8 in FP16, C and D 16x8 in FP32; @a, @b and
 * @c are the lane's fragments in the PTX ISA's layout (tests/simt/simt.h
 * writes it down), @c turned into D in place.
 */
#ifdef __CUDA_ARCH__
KVMEM_DFN void kvmem_k_mma(float *c, const uint32_t *a, const uint32_t *b)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
		     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
		     "{%0, %1, %2, %3};"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
		       "r"(b[1]));
}
#else
#define kvmem_k_mma(c, a, b) simt_mma_f16(c, a, b)
#endif

/*
 * FP16 pairs for the tensor cores: two floats rounded to nearest even
 * into one, @lo in the low half (for values in FP16's range kvmem_f2h()
 * of each, a NaN a NaN); one half of @h (@hi 0: the low one) as a float;
 * pair @h less pair @c (sub.f16x2).
 */
#ifdef __CUDA_ARCH__
KVMEM_DFN uint32_t kvmem_k_f2h2(float lo, float hi)
{
	uint32_t r;

	asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
	return r;
}

KVMEM_DFN float kvmem_k_h2f(uint32_t h, int hi)
{
	float f;

	asm("cvt.f32.f16 %0, %1;"
	    : "=f"(f)
	    : "h"((unsigned short)(hi ? h >> 16 : h)));
	return f;
}

KVMEM_DFN uint32_t kvmem_k_hsub(uint32_t h, uint32_t c)
{
	uint32_t r;

	asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(h), "r"(c));
	return r;
}
#else
KVMEM_DFN uint32_t kvmem_k_f2h2(float lo, float hi)
{
	/* A NaN stays one, as cvt.rn keeps it (kvmem_f2h() gives 0). */
	return (lo != lo ? 0x7e00u : kvmem_f2h(lo)) |
	       (hi != hi ? 0x7e00u : kvmem_f2h(hi)) << 16;
}

KVMEM_DFN float kvmem_k_h2f(uint32_t h, int hi)
{
	return kvmem_h2f((uint16_t)(hi ? h >> 16 : h));
}

KVMEM_DFN uint32_t kvmem_k_hsub(uint32_t h, uint32_t c)
{
	return kvmem_k_f2h2(kvmem_k_h2f(h, 0) - kvmem_k_h2f(c, 0),
			    kvmem_k_h2f(h, 1) - kvmem_k_h2f(c, 1));
}
#endif

/*
 * The CTA's query rows into @q ([QR][D]) times @scale, a value a thread:
 * row r of KV head @h of sequence @b is query token r / G, query head
 * h G + r % G (G query heads a KV head).
 */
KVMEM_DFN void kvmem_k_query_rows(const struct kvmem_k_attend *p,
				  unsigned int h, unsigned int b, float scale,
				  float *q)
{
	const unsigned int D = p->g.head_dim, G = p->n_heads / p->g.kv_heads;
	unsigned int i;

	for (i = threadIdx.x; i < G * p->nq * D; i += blockDim.x) {
		const unsigned int r = i / D, j = r / G, gq = r % G, d = i % D;

		q[i] = scale *
		       ((const float *)
				p->q)[(((size_t)b * p->nq + j) * p->n_heads +
				       h * G + gq) *
					      D +
				      d];
	}
}

/* Sixteen bytes of device memory in one load. */
struct alignas(16) kvmem_k_uvec4 {
	uint32_t x[4];
};

/* Eight bytes in one load. */
struct alignas(8) kvmem_k_uvec2 {
	uint32_t x[2];
};

/* Outcome of one word, as kvmem_ecc_status. */
#define KVMEM_K_CLEAN 0
#define KVMEM_K_FIXED 1
#define KVMEM_K_UE 2

/*
 * Why a value was lost, as page.c's KVMEM__LOST_*: a quantized value whose
 * own word was uncorrectable is bounded by its scale, and the keep policy
 * reads it as received; an FP16 value, or one whose scale is lost, is
 * rebuilt under keep as under interpolate.
 */
#define KVMEM_K_LOST_BOUNDED 1
#define KVMEM_K_LOST 2

/*
 * What a check says of the run of data it covers (a scale segment or an
 * FP16 row), as page.c's RUN_*: as written; lost, its words decoded and
 * not matching, so all of it is lost; unverified, a word of it or of its
 * check uncorrectable, so every word of it the decoder changed is lost.
 */
#define KVMEM_K_RUN_OK 0
#define KVMEM_K_RUN_LOST 1
#define KVMEM_K_RUN_UNVERIFIED 2

#define KVMEM_K_CRC_POLY 0x82f63b78u /* CRC-32C, reflected */

/* Per-thread word counts, summed into the caller's at the end. */
struct kvmem_k_counts {
	unsigned long long clean, corrected, ue, bits;
};

/* Count a word's outcome in @c, unless @c is NULL. */
KVMEM_DFN void kvmem_k_count(struct kvmem_k_counts *c, int st, int nbits)
{
	if (!c)
		return;
	if (st == KVMEM_K_CLEAN) {
		c->clean++;
	} else if (st == KVMEM_K_FIXED) {
		c->corrected++;
		c->bits += (unsigned long long)nbits;
	} else {
		c->ue++;
	}
}

/* Add @from to @to. */
KVMEM_DFN void kvmem_k_counts_sum(struct kvmem_k_counts *to,
				  const struct kvmem_k_counts *from)
{
	to->clean += from->clean;
	to->corrected += from->corrected;
	to->ue += from->ue;
	to->bits += from->bits;
}

KVMEM_DFN void kvmem_k_word_load(const uint8_t *p, unsigned int codec,
				 uint64_t *lo, unsigned int *hi)
{
	uint64_t v = 0;
	unsigned int i;

	*hi = 0;
	switch (codec) {
	case KVMEM_CODEC_H74:
	case KVMEM_CODEC_H84:
		*lo = p[0];
		return;
	case KVMEM_CODEC_GOLAY24:
		*lo = p[0] | (unsigned int)p[1] << 8 | (unsigned int)p[2] << 16;
		return;
	default:
		for (i = 0; i < 8; i++)
			v |= (uint64_t)p[i] << (8 * i);
		*lo = v;
		*hi = p[8];
	}
}

/* Store the bytes of a word that differ from @old: corrections only. */
KVMEM_DFN void kvmem_k_word_patch(uint8_t *p, unsigned int codec, uint64_t lo,
				  unsigned int hi, uint64_t old_lo,
				  unsigned int old_hi)
{
	const unsigned int n = codec == KVMEM_CODEC_SECDED72  ? 8
			       : codec == KVMEM_CODEC_GOLAY24 ? 3
							      : 1;
	unsigned int i;

	for (i = 0; i < n; i++)
		if ((lo >> (8 * i) & 0xff) != (old_lo >> (8 * i) & 0xff))
			p[i] = (uint8_t)(lo >> (8 * i));
	if (codec == KVMEM_CODEC_SECDED72 && hi != old_hi)
		p[8] = (uint8_t)hi;
}

KVMEM_DFN void kvmem_k_word_store(uint8_t *p, unsigned int codec, uint64_t lo,
				  unsigned int hi)
{
	kvmem_k_word_patch(p, codec, lo, hi, ~lo, ~hi);
}

/* Correct a word in place; returns KVMEM_K_*, *@nbits the bits flipped. */
KVMEM_DFN int kvmem_k_word_correct(unsigned int codec, uint64_t *lo,
				   unsigned int *hi, int *nbits)
{
	uint8_t b = (uint8_t)*lo, chk = (uint8_t)*hi;
	uint32_t w = (uint32_t)*lo;
	int f;

	switch (codec) {
	case KVMEM_CODEC_H74:
		f = kvmem_h74_correct(&b);
		*lo = b;
		break;
	case KVMEM_CODEC_H84:
		f = kvmem_h84_correct(&b);
		*lo = b;
		break;
	case KVMEM_CODEC_GOLAY24:
		f = kvmem_golay24_correct(&w);
		*lo = w;
		break;
	default:
		f = kvmem_secded72_correct(lo, &chk);
		*hi = chk;
		break;
	}
	*nbits = f > 0 ? f : 0;
	return f == KVMEM_WORD_UE ? KVMEM_K_UE
	       : f		  ? KVMEM_K_FIXED
				  : KVMEM_K_CLEAN;
}

KVMEM_DFN uint64_t kvmem_k_word_data(unsigned int codec, uint64_t lo)
{
	switch (codec) {
	case KVMEM_CODEC_H74:
	case KVMEM_CODEC_H84:
		return lo & 0xf;
	case KVMEM_CODEC_GOLAY24:
		return lo & 0xfff;
	default:
		return lo;
	}
}

KVMEM_DFN void kvmem_k_word_encode(unsigned int codec, uint64_t data,
				   uint64_t *lo, unsigned int *hi)
{
	*hi = 0;
	switch (codec) {
	case KVMEM_CODEC_H74:
		*lo = kvmem_h74_encode((unsigned int)data);
		break;
	case KVMEM_CODEC_H84:
		*lo = kvmem_h84_encode((unsigned int)data);
		break;
	case KVMEM_CODEC_GOLAY24:
		*lo = kvmem_golay24_encode((uint32_t)data);
		break;
	default:
		*lo = data;
		*hi = kvmem_secded72_encode(data);
		break;
	}
}

/*
 * The 12 data bits of the golay24 word of metadata (header, scales,
 * checks) at @p, corrected in a register; *@st its KVMEM_K_*, counted in
 * @c unless that is NULL.
 */
KVMEM_DFN uint32_t kvmem_k_meta_word(const uint8_t *p, int *st,
				     struct kvmem_k_counts *c)
{
	uint64_t lo;
	unsigned int hi;
	int nbits;

	kvmem_k_word_load(p, KVMEM_CODEC_GOLAY24, &lo, &hi);
	*st = kvmem_k_word_correct(KVMEM_CODEC_GOLAY24, &lo, &hi, &nbits);
	kvmem_k_count(c, *st, nbits);
	return (uint32_t)(lo & 0xfff);
}

/*
 * Bits [@b, @b + 12) of a bitstream of @n 16-bit pieces (FP16 scales, or
 * the header), zeros past its end: the data of the golay24 word @b / 12.
 */
KVMEM_DFN unsigned int kvmem_k_bits12(const uint16_t *s, unsigned int n,
				      unsigned int b)
{
	const unsigned int i = b / 16;
	unsigned int v = 0;

	if (i < n)
		v = s[i];
	if (i + 1 < n)
		v |= (unsigned int)s[i + 1] << 16;
	return v >> (b % 16) & 0xfff;
}

/*
 * The CRC-32C table, byte at a time, filled by the threads of a CTA (the
 * caller syncs before use). A CRC runs in a register that starts at ~0;
 * the CRC is its complement (kvmem_crc32c(0, ...)).
 */
KVMEM_DFN void kvmem_k_crc_table(uint32_t *tab)
{
	unsigned int i, k;

	for (i = threadIdx.x; i < 256; i += blockDim.x) {
		uint32_t c = i;

		for (k = 0; k < 8; k++)
			c = c & 1 ? c >> 1 ^ KVMEM_K_CRC_POLY : c >> 1;
		tab[i] = c;
	}
}

KVMEM_DFN uint32_t kvmem_k_crc_byte(const uint32_t *tab, uint32_t crc,
				    unsigned int b)
{
	return tab[(crc ^ b) & 0xff] ^ crc >> 8;
}

/* a * b modulo the CRC polynomial, bit-reflected (x^0 is bit 31). */
KVMEM_DFN uint32_t kvmem_k_crc_mul(uint32_t a, uint32_t b)
{
	uint32_t m = 1u << 31, prod = 0;

	while (m) {
		if (a & m)
			prod ^= b;
		b = b & 1 ? b >> 1 ^ KVMEM_K_CRC_POLY : b >> 1;
		m >>= 1;
	}
	return prod;
}

/* x^(8 n) modulo the polynomial: appending n zero bytes. */
KVMEM_DFN uint32_t kvmem_k_crc_shift(uint64_t n)
{
	uint32_t p = 1u << 31, sq = 1u << 23; /* x^0; x^8 */

	while (n) {
		if (n & 1)
			p = kvmem_k_crc_mul(sq, p);
		sq = kvmem_k_crc_mul(sq, sq);
		n >>= 1;
	}
	return p;
}

/*
 * Header byte @nb, @b, into the register @crc of the header's CRC: hcrc's
 * own bytes go to *@hcrc and count as 0. Returns the byte as counted.
 */
KVMEM_DFN unsigned int kvmem_k_hdr_crc_byte(const uint32_t *tab, uint32_t *crc,
					    uint32_t *hcrc, unsigned int nb,
					    unsigned int b)
{
	if (nb >= KVMEM_K_HDR_HCRC && nb < KVMEM_K_HDR_HCRC + 4) {
		*hcrc |= b << (8 * (nb - KVMEM_K_HDR_HCRC));
		b = 0;
	}
	*crc = kvmem_k_crc_byte(tab, *crc, b);
	return b;
}

/*
 * Decode the golay24 words of a page's header, each counted in @c; its 64
 * bytes go to @h unless that is NULL (43 words of 12 bits: 64 bytes and
 * the 4 zero bits), hcrc read back as 0. Returns whether the header is
 * uncorrectable: a word is, or (as kvmem__hdr_decode()) the words decode
 * but the bytes do not match their hcrc, which counts as one uncorrectable
 * word more.
 */
KVMEM_DFN int kvmem_k_hdr_decode(const uint8_t *page, uint8_t *h,
				 const uint32_t *tab, struct kvmem_k_counts *c)
{
	uint64_t acc = 0;
	uint32_t crc = 0xffffffffu, hcrc = 0;
	unsigned int i, b, nacc = 0, nb = 0;
	int st, ue = 0;

	for (i = 0; i < KVMEM_K_HDR_WORDS; i++) {
		acc |= (uint64_t)kvmem_k_meta_word(page + 3 * i, &st, c)
		       << nacc;
		ue |= st == KVMEM_K_UE;
		for (nacc += 12; nacc >= 8 && nb < 64;
		     nacc -= 8, acc >>= 8, nb++) {
			b = kvmem_k_hdr_crc_byte(tab, &crc, &hcrc, nb,
						 (unsigned int)acc & 0xff);
			if (h)
				h[nb] = (uint8_t)b;
		}
	}
	if (!ue && ~crc != hcrc) {
		if (c)
			c->ue++;
		ue = 1;
	}
	return ue;
}

/*
 * Header word @w decoded by this lane (none past the last), joined with
 * the next lane's: the three header bytes of a pair when @w is even.
 */
KVMEM_DFN uint32_t kvmem_k_hdr_pair(const uint8_t *page, unsigned int w,
				    struct kvmem_k_counts *c, int *ue)
{
	uint32_t d = 0;
	int st;

	if (w < KVMEM_K_HDR_WORDS) {
		d = kvmem_k_meta_word(page + 3 * w, &st, c);
		*ue |= st == KVMEM_K_UE;
	}
	return d | __shfl_down_sync(0xffffffffu, d, 1) << 12;
}

/*
 * kvmem_k_hdr_decode() by a whole warp, every lane calling it converged,
 * the bytes not kept: lane i decodes words i and 32 + i, and every lane
 * runs the CRC over the pairs it gathers, so all of them return the
 * verdict. Each word is counted in @c by the lane that decoded it, a
 * header that does not match its hcrc as one uncorrectable word more by
 * lane 0.
 */
KVMEM_DFN int kvmem_k_hdr_decode_warp(const uint8_t *page, const uint32_t *tab,
				      struct kvmem_k_counts *c)
{
	const unsigned int lane = threadIdx.x % 32;
	uint32_t crc = 0xffffffffu, hcrc = 0, pr0, pr1;
	unsigned int k, b, nb;
	int ue = 0;

	pr0 = kvmem_k_hdr_pair(page, lane, c, &ue);
	pr1 = kvmem_k_hdr_pair(page, 32 + lane, c, &ue);
	ue = __any_sync(0xffffffffu, ue);
	/* Pair k, words 2 k and 2 k + 1, is header bytes 3 k .. 3 k + 2. */
	for (k = 0; 3 * k < 64; k++) {
		const uint32_t v = __shfl_sync(0xffffffffu, k < 16 ? pr0 : pr1,
					       2 * k % 32);

		for (b = 0, nb = 3 * k; b < 3 && nb < 64; b++, nb++)
			kvmem_k_hdr_crc_byte(tab, &crc, &hcrc, nb,
					     v >> (8 * b) & 0xff);
	}
	if (!ue && ~crc != hcrc) {
		if (c && !lane)
			c->ue++;
		ue = 1;
	}
	return ue;
}

/*
 * Check @i of a page: its 24 bits, from its two golay24 words; *@ue set
 * when either is uncorrectable. The words are counted in @c.
 */
KVMEM_DFN uint32_t kvmem_k_check(const uint8_t *page,
				 const struct kvmem_k_layout *l, unsigned int i,
				 int *ue, struct kvmem_k_counts *c)
{
	uint32_t v = 0;
	unsigned int j;
	int st;

	*ue = 0;
	for (j = 0; j < 2; j++) {
		v |= kvmem_k_meta_word(page + l->checks_off + 6 * i + 3 * j,
				       &st, c)
		     << (12 * j);
		*ue |= st == KVMEM_K_UE;
	}
	return v;
}

/* Write check @i of a page: the low 24 bits of the CRC-32C @crc. */
KVMEM_DFN void kvmem_k_check_store(uint8_t *page,
				   const struct kvmem_k_layout *l,
				   unsigned int i, uint32_t crc)
{
	uint64_t lo;
	unsigned int hi, j;

	for (j = 0; j < 2; j++) {
		kvmem_k_word_encode(KVMEM_CODEC_GOLAY24,
				    crc >> (12 * j) & 0xfff, &lo, &hi);
		kvmem_k_word_store(page + l->checks_off + 6 * i + 3 * j,
				   KVMEM_CODEC_GOLAY24, lo, hi);
	}
}

/*
 * The verdict on a run of data (page.c's test_checks()): @ue, a word of it
 * or of its check uncorrectable; @crc, the CRC register over its decoded
 * bytes; @want, its check. A lost run counts one uncorrectable word more
 * in @c.
 */
KVMEM_DFN int kvmem_k_run(int ue, uint32_t crc, uint32_t want,
			  struct kvmem_k_counts *c)
{
	if (ue)
		return KVMEM_K_RUN_UNVERIFIED;
	if ((~crc & 0xffffff) == want)
		return KVMEM_K_RUN_OK;
	if (c)
		c->ue++;
	return KVMEM_K_RUN_LOST;
}

/*
 * Scale segment @s of a page against its check: the scale words [32 s,
 * 32 s + 32) (fewer in the last segment, the pad word included), the 48
 * bytes of the FP16 stream they carry (fewer in the last). Returns
 * KVMEM_K_RUN_*; with @c, the check's words are counted in it, and a lost
 * segment as one uncorrectable word more (the scale words are not).
 */
KVMEM_DFN int kvmem_k_segment(const uint8_t *page,
			      const struct kvmem_k_layout *l, unsigned int s,
			      const uint32_t *tab, struct kvmem_k_counts *c)
{
	const unsigned int w0 = s * KVMEM_K_CHECK_WORDS;
	const unsigned int w1 = w0 + KVMEM_K_CHECK_WORDS < l->scale_words
					? w0 + KVMEM_K_CHECK_WORDS
					: l->scale_words;
	const unsigned int nbytes = 2 * (l->nscales_k + l->nscales_v);
	uint32_t crc = 0xffffffffu, acc = 0, want;
	unsigned int w, b;
	int st, ue = 0, cue;

	/* Words come in pairs from an even one: 3 stream bytes a pair. */
	for (w = w0; w < w1; w++) {
		acc |= kvmem_k_meta_word(page + l->scales_off + 3 * w, &st,
					 NULL)
		       << (12 * (w % 2));
		ue |= st == KVMEM_K_UE;
		if (!(w % 2))
			continue;
		for (b = 0; b < 3 && 3 * (w / 2) + b < nbytes; b++)
			crc = kvmem_k_crc_byte(tab, crc, acc >> (8 * b) & 0xff);
		acc = 0;
	}
	want = kvmem_k_check(page, l, s, &cue, c);
	return kvmem_k_run(ue || cue, crc, want, c);
}

/*
 * kvmem_k_segment() by a whole warp, every lane calling it converged: lane
 * i decodes word i of the segment (a segment is a warp's worth of words),
 * lanes 0 and 1 the check's two words, and every lane runs the CRC over
 * the pairs it gathers, so all of them return the verdict. Each check word
 * is counted in @c by the lane that decoded it, a lost segment's one
 * uncorrectable word more by lane 0; the scale words are not counted.
 */
KVMEM_DFN int kvmem_k_segment_warp(const uint8_t *page,
				   const struct kvmem_k_layout *l,
				   unsigned int s, const uint32_t *tab,
				   struct kvmem_k_counts *c)
{
	const unsigned int lane = threadIdx.x % 32;
	const unsigned int w0 = s * KVMEM_K_CHECK_WORDS;
	const unsigned int nw = w0 + KVMEM_K_CHECK_WORDS < l->scale_words
					? KVMEM_K_CHECK_WORDS
					: l->scale_words - w0;
	const unsigned int nbytes = 2 * (l->nscales_k + l->nscales_v);
	uint32_t crc = 0xffffffffu, d = 0, pair, want;
	unsigned int k, b;
	int st = KVMEM_K_CLEAN, bad;

	if (lane < nw)
		d = kvmem_k_meta_word(page + l->scales_off + 3 * (w0 + lane),
				      &st, NULL);
	bad = __any_sync(0xffffffffu, st == KVMEM_K_UE);
	pair = d | __shfl_down_sync(0xffffffffu, d, 1) << 12;
	/* Words come in pairs from an even one: 3 stream bytes a pair. */
	for (k = 0; 2 * k + 1 < nw; k++) {
		const uint32_t v = __shfl_sync(0xffffffffu, pair, 2 * k);

		for (b = 0; b < 3 && 3 * (w0 / 2 + k) + b < nbytes; b++)
			crc = kvmem_k_crc_byte(tab, crc, v >> (8 * b) & 0xff);
	}
	d = 0;
	st = KVMEM_K_CLEAN;
	if (lane < 2)
		d = kvmem_k_meta_word(page + l->checks_off + 6 * s + 3 * lane,
				      &st, c);
	bad |= __any_sync(0xffffffffu, st == KVMEM_K_UE);
	want = __shfl_sync(0xffffffffu, d, 0) | __shfl_sync(0xffffffffu, d, 1)
							<< 12;
	st = kvmem_k_run(bad, crc, want, NULL);
	if (st == KVMEM_K_RUN_LOST && c && !lane)
		c->ue++;
	return st;
}

/* The check of row (@h, @t) of K or V in a page without scales. */
KVMEM_DFN unsigned int kvmem_k_row_check(const struct kvmem_k_geom *g, int is_v,
					 unsigned int h, unsigned int t)
{
	return ((unsigned int)is_v * g->kv_heads + h) * g->tokens_per_page + t;
}

/* Data bytes a unit of l->unit words carries: 1, 3 or 8. */
KVMEM_DFN unsigned int kvmem_k_unit_bytes(const struct kvmem_k_layout *l)
{
	return l->unit * l->k / 8u;
}

/*
 * Decode unit @u of a row at @code (corrections kept local): its data
 * bits; *@st gets each word's KVMEM_K_* (word i in bits 2 i, 2 i + 1).
 */
KVMEM_DFN uint64_t kvmem_k_unit_bits(const struct kvmem_k_layout *l,
				     const uint8_t *code, unsigned int u,
				     unsigned int *st, struct kvmem_k_counts *c)
{
	uint64_t bits = 0, lo;
	unsigned int hi, i;
	int nbits, ws;

	*st = 0;
	for (i = 0; i < l->unit; i++) {
		kvmem_k_word_load(code + (u * l->unit + i) * l->wbytes,
				  l->codec, &lo, &hi);
		ws = kvmem_k_word_correct(l->codec, &lo, &hi, &nbits);
		kvmem_k_count(c, ws, nbits);
		*st |= (unsigned int)ws << (2 * i);
		bits |= kvmem_k_word_data(l->codec, lo) << (i * l->k);
	}
	return bits;
}

/* The same into @data (the row's data bytes). */
KVMEM_DFN void kvmem_k_unit_decode(const struct kvmem_k_layout *l,
				   const uint8_t *code, unsigned int u,
				   uint8_t *data, unsigned int *st,
				   struct kvmem_k_counts *c)
{
	const unsigned int nb = kvmem_k_unit_bytes(l);
	uint64_t bits = kvmem_k_unit_bits(l, code, u, st, c);
	unsigned int i;

	for (i = 0; i < nb; i++)
		data[u * nb + i] = (uint8_t)(bits >> (8 * i));
}

/*
 * Row (@h, @t) of K or V of a page without scales against its check, the
 * row decoded on its own: KVMEM_K_RUN_*. Counts nothing.
 */
KVMEM_DFN int kvmem_k_row_run(const struct kvmem_k_geom *g,
			      const struct kvmem_k_layout *l,
			      const uint8_t *page, int is_v, unsigned int h,
			      unsigned int t, const uint32_t *tab)
{
	const uint8_t *code = page + (is_v ? l->v_off : l->k_off) +
			      (h * g->tokens_per_page + t) * l->row_bytes;
	const unsigned int upr = l->row_words / l->unit;
	const unsigned int nb = kvmem_k_unit_bytes(l);
	uint32_t crc = 0xffffffffu, want;
	unsigned int u, i, st;
	int ue = 0, cue;

	for (u = 0; u < upr; u++) {
		uint64_t bits = kvmem_k_unit_bits(l, code, u, &st, NULL);

		ue |= (st & (KVMEM_K_UE | KVMEM_K_UE << 2)) != 0;
		for (i = 0; i < nb; i++)
			crc = kvmem_k_crc_byte(tab, crc,
					       (unsigned int)(bits >> (8 * i)) &
						       0xff);
	}
	want = kvmem_k_check(page, l, kvmem_k_row_check(g, is_v, h, t), &cue,
			     NULL);
	return kvmem_k_run(ue || cue, crc, want, NULL);
}

/* Raw bits of value @i of a row's data bytes. */
KVMEM_DFN unsigned int kvmem_k_raw(const uint8_t *data, unsigned int bits,
				   unsigned int i)
{
	unsigned int b = i * bits;

	if (bits == 16)
		return data[b / 8] | (unsigned int)data[b / 8 + 1] << 8;
	return data[b / 8] >> (b % 8) & ((1u << bits) - 1);
}

/*
 * Is a value lost to the check of its run @run (KVMEM_K_RUN_*), its words
 * being @st (their KVMEM_K_*, or'd)? All of a lost run is; of an unverified
 * one, what the decoder changed.
 */
KVMEM_DFN int kvmem_k_run_lost(int run, int st)
{
	return run == KVMEM_K_RUN_LOST ||
	       (run == KVMEM_K_RUN_UNVERIFIED && st != KVMEM_K_CLEAN);
}

/*
 * A value from its raw bits and scale; *@lost set when it cannot be trusted
 * (an FP16 value that reads non-finite, or the FP8 NaN code, was damaged
 * past what the code saw: it reads 0, as on the CPU).
 */
KVMEM_DFN float kvmem_k_dequant(const struct kvmem_k_layout *l,
				unsigned int raw, float scale, int *lost)
{
	float x;

	if (l->format == KVMEM_FMT_FP8)
		x = kvmem_e4m3_to_float(raw) * scale;
	else if (l->qmax)
		return (float)kvmem_sext(raw, l->bits) * scale;
	else
		x = kvmem_h2f((uint16_t)raw);
	if (!isfinite(x)) {
		*lost = 1;
		return 0.0f;
	}
	return x;
}

/* Index in the page's scale stream of row (@h, @t)'s first scale. */
KVMEM_DFN unsigned int kvmem_k_row_scale(const struct kvmem_k_geom *g,
					 const struct kvmem_k_layout *l,
					 int is_v, unsigned int h,
					 unsigned int t)
{
	unsigned int groups = g->head_dim / g->group_size;

	if (!is_v && l->chan)
		return h * g->head_dim;
	return (is_v ? l->nscales_k : 0) +
	       (h * g->tokens_per_page + t) * groups;
}

/* Scale @idx of the scale stream value @i of the row uses. */
KVMEM_DFN unsigned int kvmem_k_scale_of(const struct kvmem_k_geom *g,
					const struct kvmem_k_layout *l,
					int is_v, unsigned int first,
					unsigned int i)
{
	return first + (!is_v && l->chan ? i : i / g->group_size);
}

/*
 * Decode scale @idx of a page straight from its two golay24 words, 16 idx
 * / 12 and the next, @seg being the KVMEM_K_RUN_* of its segment
 * (kvmem_k_segment()); *@lost when the check loses it (a word of it is
 * uncorrectable only in an unverified segment) or the scale is impossible
 * (negative or not finite: read as 0). With @c, the words are counted
 * once over all the scales, each by the first scale with bits in it: idx
 * counts its second word always, its first only when it starts there
 * (idx % 3 == 0, 16 idx a multiple of 12).
 */
KVMEM_DFN float kvmem_k_scale(const uint8_t *page,
			      const struct kvmem_k_layout *l, unsigned int idx,
			      int seg, int *lost, struct kvmem_k_counts *c)
{
	const unsigned int b = 16 * idx;
	const uint8_t *w = page + l->scales_off + 3 * (b / 12);
	unsigned int hi, i, bits = 0;
	uint64_t lo;
	int st, nbits, changed = 0;
	float s;

	for (i = 0; i < 2; i++) {
		kvmem_k_word_load(w + 3 * i, KVMEM_CODEC_GOLAY24, &lo, &hi);
		st = kvmem_k_word_correct(KVMEM_CODEC_GOLAY24, &lo, &hi,
					  &nbits);
		changed |= st;
		bits |= (unsigned int)(lo & 0xfff) << (12 * i);
		if (c && (i || idx % 3 == 0))
			kvmem_k_count(c, st, nbits);
	}
	*lost = kvmem_k_run_lost(seg, changed);
	s = kvmem_h2f((uint16_t)(bits >> (b % 12)));
	if (!(s >= 0.0f && s <= 65504.0f)) {
		*lost = 1;
		s = 0.0f;
	}
	return s;
}

/*
 * The first scale of row (@h, @t) of K or V and how many it has: the
 * scales its values use, [*@first, *@first + return).
 */
KVMEM_DFN unsigned int kvmem_k_row_scales(const struct kvmem_k_geom *g,
					  const struct kvmem_k_layout *l,
					  int is_v, unsigned int h,
					  unsigned int t, unsigned int *first)
{
	*first = kvmem_k_row_scale(g, l, is_v, h, t);
	return !is_v && l->chan ? g->head_dim : g->head_dim / g->group_size;
}

/*
 * One value of a page, decoded on its own: value @i of row (@h, @t) of K or
 * V. For rebuilding a neighbour outside the tile at hand; counts nothing.
 * @runs are the checks' verdicts on the row (KVMEM_K_RUN_*): in a page
 * with scales, one per segment its scales meet from the segment of its
 * first scale on; in a page without, the row's own.
 */
KVMEM_DFN float kvmem_k_value(const struct kvmem_k_geom *g,
			      const struct kvmem_k_layout *l,
			      const uint8_t *page, int is_v, unsigned int h,
			      unsigned int t, unsigned int i,
			      const uint8_t *runs, int *lost)
{
	const uint8_t *row = page + (is_v ? l->v_off : l->k_off) +
			     (h * g->tokens_per_page + t) * l->row_bytes;
	unsigned int b0 = i * l->bits, b1 = b0 + l->bits - 1;
	unsigned int w, hi, raw = 0;
	float scale = 0.0f;
	uint64_t lo;
	int nbits, st, wst = 0, slost = 0;

	for (w = b0 / l->k; w <= b1 / l->k; w++) {
		uint64_t d;
		unsigned int lo_bit = w * l->k;

		kvmem_k_word_load(row + w * l->wbytes, l->codec, &lo, &hi);
		st = kvmem_k_word_correct(l->codec, &lo, &hi, &nbits);
		wst |= st;
		d = kvmem_k_word_data(l->codec, lo);
		/* The value's bits that this word carries. */
		if (lo_bit <= b0)
			raw |= (unsigned int)(d >> (b0 - lo_bit));
		else
			raw |= (unsigned int)(d << (lo_bit - b0));
	}
	raw &= (1u << l->bits) - 1;
	if (l->qmax) {
		unsigned int first, si;

		kvmem_k_row_scales(g, l, is_v, h, t, &first);
		si = kvmem_k_scale_of(g, l, is_v, first, i);
		scale = kvmem_k_scale(page, l, si,
				      runs[si / KVMEM_K_CHECK_SCALES -
					   first / KVMEM_K_CHECK_SCALES],
				      &slost, NULL);
	} else {
		slost = kvmem_k_run_lost(runs[0], wst);
	}
	*lost = (wst & KVMEM_K_UE) != 0 || slost;
	return kvmem_k_dequant(l, raw, scale, lost);
}

#endif /* KVMEM_PAGE_DEV_CUH */
