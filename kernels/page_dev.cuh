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

/* Per-thread word counts, summed into the caller's at the end. */
struct kvmem_k_counts {
	unsigned long long clean, corrected, ue, bits;
};

KVMEM_DFN void kvmem_k_count(struct kvmem_k_counts *c, int st, int nbits)
{
	if (st == KVMEM_K_CLEAN) {
		c->clean++;
	} else if (st == KVMEM_K_FIXED) {
		c->corrected++;
		c->bits += (unsigned long long)nbits;
	} else {
		c->ue++;
	}
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
 * Decode the golay24 words of a page's header, each counted in @c; its 64
 * bytes go to @h unless that is NULL (43 words of 12 bits: 64 bytes and
 * the 4 zero bits). Returns whether a word was uncorrectable.
 */
KVMEM_DFN int kvmem_k_hdr_decode(const uint8_t *page, uint8_t *h,
				 struct kvmem_k_counts *c)
{
	uint64_t lo, acc = 0;
	unsigned int hi, i, nacc = 0, nb = 0;
	int st, nbits, ue = 0;

	for (i = 0; i < KVMEM_K_HDR_WORDS; i++) {
		kvmem_k_word_load(page + 3 * i, KVMEM_CODEC_GOLAY24, &lo, &hi);
		st = kvmem_k_word_correct(KVMEM_CODEC_GOLAY24, &lo, &hi,
					  &nbits);
		kvmem_k_count(c, st, nbits);
		ue |= st == KVMEM_K_UE;
		if (!h)
			continue;
		acc |= (lo & 0xfff) << nacc;
		for (nacc += 12; nacc >= 8; nacc -= 8, acc >>= 8)
			h[nb++] = (uint8_t)acc;
	}
	return ue;
}

/* Data bytes a unit of l->unit words carries: 1, 3 or 8. */
KVMEM_DFN unsigned int kvmem_k_unit_bytes(const struct kvmem_k_layout *l)
{
	return l->unit * l->k / 8u;
}

/*
 * Decode unit @u of a row at @code (corrections kept local) into @data
 * (the row's data bytes); *@ue gets a bit per uncorrectable word of it.
 */
KVMEM_DFN void kvmem_k_unit_decode(const struct kvmem_k_layout *l,
				   const uint8_t *code, unsigned int u,
				   uint8_t *data, unsigned int *ue,
				   struct kvmem_k_counts *c)
{
	uint64_t bits = 0, lo;
	unsigned int hi, i, nb = kvmem_k_unit_bytes(l);
	int nbits, st;

	*ue = 0;
	for (i = 0; i < l->unit; i++) {
		kvmem_k_word_load(code + (u * l->unit + i) * l->wbytes,
				  l->codec, &lo, &hi);
		st = kvmem_k_word_correct(l->codec, &lo, &hi, &nbits);
		kvmem_k_count(c, st, nbits);
		if (st == KVMEM_K_UE)
			*ue |= 1u << i;
		bits |= kvmem_k_word_data(l->codec, lo) << (i * l->k);
	}
	for (i = 0; i < nb; i++)
		data[u * nb + i] = (uint8_t)(bits >> (8 * i));
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

/* Is value @i of a row in a word that @word_ue (per word) marks? */
KVMEM_DFN int kvmem_k_value_ue(const struct kvmem_k_layout *l,
			       const uint8_t *word_ue, unsigned int i)
{
	unsigned int w = i * l->bits / l->k;
	unsigned int last = (i * l->bits + l->bits - 1) / l->k;
	int ue = 0;

	for (; w <= last; w++)
		ue |= word_ue[w];
	return ue;
}

/*
 * A value from its raw bits and scale; *@lost set when it cannot be trusted
 * (an FP16 value that reads non-finite was damaged past what the code saw:
 * it reads 0, as on the CPU).
 */
KVMEM_DFN float kvmem_k_dequant(const struct kvmem_k_layout *l,
				unsigned int raw, float scale, int *lost)
{
	float x;

	if (l->qmax)
		return (float)kvmem_sext(raw, l->bits) * scale;
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
 * / 12 and the next; *@lost when either is uncorrectable or the scale is
 * impossible (negative or not finite: read as 0). With @c, the words are
 * counted once over all the scales, each by the first scale with bits in
 * it: idx counts its second word always, its first only when it starts
 * there (idx % 3 == 0, 16 idx a multiple of 12).
 */
KVMEM_DFN float kvmem_k_scale(const uint8_t *page,
			      const struct kvmem_k_layout *l, unsigned int idx,
			      int *lost, struct kvmem_k_counts *c)
{
	const unsigned int b = 16 * idx;
	const uint8_t *w = page + l->scales_off + 3 * (b / 12);
	unsigned int hi, i, bits = 0;
	uint64_t lo;
	int st, nbits;
	float s;

	*lost = 0;
	for (i = 0; i < 2; i++) {
		kvmem_k_word_load(w + 3 * i, KVMEM_CODEC_GOLAY24, &lo, &hi);
		st = kvmem_k_word_correct(KVMEM_CODEC_GOLAY24, &lo, &hi,
					  &nbits);
		*lost |= st == KVMEM_K_UE;
		bits |= (unsigned int)(lo & 0xfff) << (12 * i);
		if (c && (i || idx % 3 == 0))
			kvmem_k_count(c, st, nbits);
	}
	s = kvmem_h2f((uint16_t)(bits >> (b % 12)));
	if (!(s >= 0.0f && s <= 65504.0f)) {
		*lost = 1;
		s = 0.0f;
	}
	return s;
}

/*
 * One value of a page, decoded on its own: value @i of row (@h, @t) of K or
 * V. For rebuilding a neighbour outside the tile at hand; counts nothing.
 */
KVMEM_DFN float kvmem_k_value(const struct kvmem_k_geom *g,
			      const struct kvmem_k_layout *l,
			      const uint8_t *page, int is_v, unsigned int h,
			      unsigned int t, unsigned int i, int *lost)
{
	const uint8_t *row = page + (is_v ? l->v_off : l->k_off) +
			     (h * g->tokens_per_page + t) * l->row_bytes;
	unsigned int b0 = i * l->bits, b1 = b0 + l->bits - 1;
	unsigned int w, hi, raw = 0, st_ue = 0;
	float scale = 0.0f;
	uint64_t lo;
	int nbits, st, slost = 0;

	for (w = b0 / l->k; w <= b1 / l->k; w++) {
		uint64_t d;
		unsigned int lo_bit = w * l->k;

		kvmem_k_word_load(row + w * l->wbytes, l->codec, &lo, &hi);
		st = kvmem_k_word_correct(l->codec, &lo, &hi, &nbits);
		st_ue |= st == KVMEM_K_UE;
		d = kvmem_k_word_data(l->codec, lo);
		/* The value's bits that this word carries. */
		if (lo_bit <= b0)
			raw |= (unsigned int)(d >> (b0 - lo_bit));
		else
			raw |= (unsigned int)(d << (lo_bit - b0));
	}
	raw &= (1u << l->bits) - 1;
	if (l->qmax) {
		unsigned int first = kvmem_k_row_scale(g, l, is_v, h, t);

		scale = kvmem_k_scale(page, l,
				      kvmem_k_scale_of(g, l, is_v, first, i),
				      &slost, NULL);
	}
	*lost = (int)st_ue | slost;
	return kvmem_k_dequant(l, raw, scale, lost);
}

#endif /* KVMEM_PAGE_DEV_CUH */
