/* SPDX-License-Identifier: MIT */
/*
 * attend_q4.cu - decode-on-load attention, the fast kernel: sealed INT4
 * pages in one-byte codewords (h74, h84) or in golay24 words, INT8 pages
 * in secded72 words, kvmem_k_q4_ok()
 *
 * The common page of kvmem_k_attend without its barriers. A CTA takes the
 * same share of a sequence's pages for one KV head as kvmem_k_attend
 * (blockIdx = (KV head, sequence, split)), and each of its warps takes
 * whole pages of the share and attends them on its own:
 *
 * - the words of the head's scale segments, their checks and its K
 *   rows are copied into the warp's shared memory (cp.async, no register
 *   held), the K rows on their way while the scales are judged, then the
 *   V rows (where the scale words were) while K is scored;
 * - the scale segments the head's K and V scales meet, a lane a word
 *   (golay24 tested clean by a table of v.B, kvmem_k_golay_lut()), then a
 *   lane a segment for its CRC, three bytes a step, and its check (its
 *   words by the same table), then the scales;
 * - K on the tensor cores (kvmem_k_q4_kmma(), mma.sync m16n8k16) where
 *   the K scales are groups of whole 16-dim steps:
 *   the one-byte codewords of the copy are tested first, four a word by
 *   a byte permute (kvmem_k_h8x4_dirty()), and all corrected in the copy
 *   if one is not clean; then 16 tokens by 16 dims a tile, the values
 *   made signed FP16 in three operations a pair (kvmem_k_hx()), against
 *   the query rows scaled per row by a power of two and cut into two
 *   FP16 halves (kvmem_k_q4_qfrag(), in the query rows' place in shared
 *   memory), a group's sum scaled once. Otherwise (key scales per
 *   channel, narrower groups, a query row not finite) a lane a token:
 *   the row's codewords read 16 bytes at a time, dotted with the query
 *   rows as they are and tested on the way; a row that fails is done
 *   again from the copy, its words corrected, in a rolled loop. golay24
 *   and secded72 rows are decoded first, in the copy, into a byte a
 *   value, a lane a quad of golay24 words (a word at head_dim 64) or a
 *   secded72 word (kvmem_k_q4_decode()): K's into the V rows' place,
 *   V's, copied where K's were, into the same place once K is scored;
 *   the loops then read them as bytes known to be clean;
 * - the softmax across the lanes, into the warp's running max and sum
 *   and the page's mass, the tokens' weights into shared memory;
 * - V's words in the copy tested the same way, all at once (corrected in
 *   the copy when one fails); then on the tensor cores
 *   (kvmem_k_q4_vmma()) where the V scales are groups of whole 32 dims
 *   (INT8 in q4 only): 32 dims by 8 tokens an mma, against the
 *   weights times the tokens' scales, block-diagonal so that no
 *   accumulator is wasted; otherwise a lane four columns, four query
 *   rows' weights of a token a load. The accumulators stay in registers
 *   from page to page.
 *
 * Meanwhile the warp's next page is prefetched to L2.
 *
 * A page it cannot take as it is (hot, misaligned, a scale of the head
 * lost, a word of its rows uncorrectable) it leaves to kvmem_k_attend,
 * which runs next on the flagged pages only (p.flags) and rebuilds what
 * was lost; nothing of such a page is counted here. At the end the warps'
 * states are merged into the CTA's partial result, which kvmem_k_combine
 * merges with kvmem_k_attend's.
 *
 * Counts are those of kvmem_attend(): a scale word by the scale that
 * starts in it (or, past the last scale, by the last), a check by the
 * head whose scales hold its segment's first scale, the header by KV
 * head 0.
 */
#include "page_dev.cuh"

/* v.B of golay24 (kvmem_golay24_mul_b()) for the low and high six bits. */
KVMEM_DFN void kvmem_k_golay_lut(uint16_t *lut)
{
	unsigned int i;

	for (i = threadIdx.x; i < 128; i += blockDim.x)
		lut[i] = (uint16_t)kvmem_golay24_mul_b(i < 64 ? i
							      : (i - 64) << 6);
}

/*
 * The golay24 word @w: its 12 data bits, corrected in a register when its
 * syndrome (by @lut) is not 0; *@st its KVMEM_K_*, *@nb the bits flipped.
 */
KVMEM_DFN uint32_t kvmem_k_golay_fast(uint32_t w, const uint16_t *lut, int *st,
				      int *nb)
{
	uint64_t lo = w;
	unsigned int hi = 0;

	*nb = 0;
	*st = KVMEM_K_CLEAN;
	if ((w >> 12 & 0xfff) !=
	    (uint32_t)(lut[w & 63] ^ lut[64 + (w >> 6 & 63)]))
		*st = kvmem_k_word_correct(KVMEM_CODEC_GOLAY24, &lo, &hi, nb);
	return (uint32_t)(lo & 0xfff);
}

/* The same of the word of metadata at @p. */
KVMEM_DFN uint32_t kvmem_k_meta_fast(const uint8_t *p, const uint16_t *lut,
				     int *st, int *nb)
{
	return kvmem_k_golay_fast(p[0] | (unsigned int)p[1] << 8 |
					  (unsigned int)p[2] << 16,
				  lut, st, nb);
}

/* The scale that counts scale word @w (kvmem_k_scale()), @last the last. */
KVMEM_DFN unsigned int kvmem_k_word_scale(unsigned int w, unsigned int last)
{
	const unsigned int s = w % 4 ? (3 * (w - 1) + 3) / 4 : 3 * w / 4;

	return s < last ? s : last;
}

/* A warp's share of shared memory (kvmem_k_q4_carve()). */
struct kvmem_k_q4_warp {
	float *sc; /* the head's K scales, then its V scales */
	uint16_t *wd; /* scale words decoded */
	uint8_t *wst; /* their KVMEM_K_* */
	uint8_t *seg; /* the segments' KVMEM_K_RUN_* */
	uint8_t *kv; /* the head's K rows, then its V rows */
};

/* The K (@is_v 0) or V scales of head @h: first, how many, segments. */
struct kvmem_k_q4_list {
	unsigned int base, cnt, s0, nseg, w0, nw, woff, soff;
};

KVMEM_DFN void kvmem_k_q4_list(const struct kvmem_k_geom *g,
			       const struct kvmem_k_layout *l, int is_v,
			       unsigned int h, unsigned int woff,
			       unsigned int soff, struct kvmem_k_q4_list *ls)
{
	unsigned int end;

	ls->base = kvmem_k_row_scale(g, l, is_v, h, 0);
	ls->cnt = kvmem_k_head_scales(g, l, is_v);
	ls->s0 = ls->base / KVMEM_K_CHECK_SCALES;
	ls->nseg = (ls->base + ls->cnt - 1) / KVMEM_K_CHECK_SCALES - ls->s0 + 1;
	ls->w0 = ls->s0 * KVMEM_K_CHECK_WORDS;
	end = ls->w0 + ls->nseg * KVMEM_K_CHECK_WORDS;
	ls->nw = (end < l->scale_words ? end : l->scale_words) - ls->w0;
	ls->woff = woff;
	ls->soff = soff;
}

/*
 * The byte table @tab (kvmem_k_crc_table()) advanced by one and by two
 * zero bytes, into @tab + 256 and @tab + 512, for a CRC three bytes a
 * step (kvmem_k_crc_bytes3()). @tab is complete when this runs.
 */
KVMEM_DFN void kvmem_k_crc_slices(uint32_t *tab)
{
	unsigned int i;

	for (i = threadIdx.x; i < 256; i += blockDim.x) {
		const uint32_t t1 = tab[i] >> 8 ^ tab[tab[i] & 0xff];

		tab[256 + i] = t1;
		tab[512 + i] = t1 >> 8 ^ tab[t1 & 0xff];
	}
}

/* The CRC register @crc after the three low bytes of @x, low byte first
 * (its high byte is not read); @tab with its slices. */
KVMEM_DFN uint32_t kvmem_k_crc_bytes3(const uint32_t *tab, uint32_t crc,
				      uint32_t x)
{
	x ^= crc;
	return tab[512 + (x & 0xff)] ^ tab[256 + (x >> 8 & 0xff)] ^
	       tab[x >> 16 & 0xff] ^ crc >> 24;
}

/*
 * The verdict on segment @sg of a page (kvmem_k_segment()) from the words
 * a warp decoded (@wd, @wst from the segment's first): its check's words
 * at @ck (golay24 tested clean by @lut), and one uncorrectable word more
 * if it is lost, counted in @c when @own. @tab: the CRC table with its
 * slices (768 entries, kvmem_k_crc_slices()).
 */
KVMEM_DFN int kvmem_k_q4_segment(const uint8_t *ck,
				 const struct kvmem_k_layout *l,
				 unsigned int sg, const uint16_t *wd,
				 const uint8_t *wst, const uint32_t *tab,
				 const uint16_t *lut, int own,
				 struct kvmem_k_counts *c)
{
	const unsigned int w0 = sg * KVMEM_K_CHECK_WORDS;
	const unsigned int nw = w0 + KVMEM_K_CHECK_WORDS < l->scale_words
					? KVMEM_K_CHECK_WORDS
					: l->scale_words - w0;
	const unsigned int nbytes = 2 * (l->nscales_k + l->nscales_v);
	struct kvmem_k_counts cc = { 0, 0, 0, 0 };
	uint32_t crc = 0xffffffffu, want = 0;
	unsigned int k, b;
	int ue = 0, cue = 0, st, nb, v;

	for (k = 0; k < nw; k++)
		ue |= wst[k] == KVMEM_K_UE;
	/* Words come in pairs from an even one: 3 stream bytes a pair,
	 * run through the CRC in one step where all three are the
	 * stream's. */
	for (k = 0; 2 * k + 1 < nw; k++) {
		const uint32_t pair = wd[2 * k] | (uint32_t)wd[2 * k + 1] << 12;
		const unsigned int at = 3 * (w0 / 2 + k);

		if (at + 3 <= nbytes)
			crc = kvmem_k_crc_bytes3(tab, crc, pair);
		else
			for (b = 0; b < 3 && at + b < nbytes; b++)
				crc = kvmem_k_crc_byte(tab, crc,
						       pair >> (8 * b) & 0xff);
	}
	/* The check (kvmem_k_check()), its two words by the table. */
	for (k = 0; k < 2; k++) {
		want |= kvmem_k_meta_fast(ck + 3 * k, lut, &st, &nb)
			<< (12 * k);
		kvmem_k_count(&cc, st, nb);
		cue |= st == KVMEM_K_UE;
	}
	v = kvmem_k_run(ue || cue, crc, want, &cc);
	if (own)
		kvmem_k_counts_sum(c, &cc);
	return v;
}

/* The words of a head's K and V scale lists (@ls) in a warp's copy: word
 * ls[i].w0 at w[i], the check of segment ls[i].s0 at ck[i]. */
struct kvmem_k_q4_words {
	const uint8_t *w[2], *ck[2];
};

/*
 * Copy the page's bytes [@off, @off + @len) at *@to, in the 16-byte
 * pieces that hold them, a piece a lane, and move *@to past them; returns
 * where byte @off is in the copy.
 */
KVMEM_DFN const uint8_t *kvmem_k_q4_stage(uint8_t **to, const uint8_t *page,
					  unsigned int off, unsigned int len)
{
	const unsigned int a = off & ~15u, n = (off + len - a + 15) / 16;
	unsigned int i;

	for (i = threadIdx.x % 32; i < n; i += 32)
		kvmem_k_cp16(*to + 16 * i, page + a + 16 * i);
	*to += 16 * n;
	return *to - 16 * n + (off - a);
}

/*
 * Judge the scale segments a head's K and V scales (@ls) meet, from the
 * copy of their words @sw, and decode its scales into @wp->sc, counting
 * in @c; returns 1, the same in every lane, when a scale is lost.
 */
KVMEM_DFN int kvmem_k_q4_scales(const struct kvmem_k_layout *l,
				const struct kvmem_k_q4_list *ls,
				const struct kvmem_k_q4_words *sw,
				const uint32_t *tab, const uint16_t *lut,
				const struct kvmem_k_q4_warp *wp,
				struct kvmem_k_counts *c)
{
	const unsigned int lane = threadIdx.x % 32;
	const unsigned int last = l->nscales_k + l->nscales_v - 1;
	unsigned int i, j, u;
	int lost = 0;

	for (i = 0; i < 2; i++)
		for (j = lane; j < ls[i].nw; j += 32) {
			const unsigned int w = ls[i].w0 + j;
			const unsigned int s = kvmem_k_word_scale(w, last);
			int st, nb;

			wp->wd[ls[i].woff + j] = (uint16_t)kvmem_k_meta_fast(
				sw->w[i] + 3 * j, lut, &st, &nb);
			wp->wst[ls[i].woff + j] = (uint8_t)st;
			if (s >= ls[i].base && s < ls[i].base + ls[i].cnt)
				kvmem_k_count(c, st, nb);
		}
	__syncwarp();
	for (u = lane; u < ls[0].nseg + ls[1].nseg; u += 32) {
		const int v = u >= ls[0].nseg;
		const struct kvmem_k_q4_list li = v ? ls[1] : ls[0];
		const unsigned int k = u - li.soff, sg = li.s0 + k;
		const unsigned int o = li.woff + k * KVMEM_K_CHECK_WORDS;

		wp->seg[u] = (uint8_t)kvmem_k_q4_segment(
			(v ? sw->ck[1] : sw->ck[0]) + 6 * k, l, sg, wp->wd + o,
			wp->wst + o, tab, lut,
			sg * KVMEM_K_CHECK_SCALES >= li.base, c);
	}
	__syncwarp();
	for (i = 0; i < 2; i++)
		for (j = lane; j < ls[i].cnt; j += 32) {
			const unsigned int idx = ls[i].base + j;
			const unsigned int w = 16 * idx / 12 - ls[i].w0;
			const uint32_t bits =
				wp->wd[ls[i].woff + w] |
				(uint32_t)wp->wd[ls[i].woff + w + 1] << 12;
			const int run =
				wp->seg[ls[i].soff +
					idx / KVMEM_K_CHECK_SCALES - ls[i].s0];
			const float s =
				kvmem_h2f((uint16_t)(bits >> (16 * idx % 12)));

			lost |= kvmem_k_run_lost(
				run, wp->wst[ls[i].woff + w] |
					     wp->wst[ls[i].woff + w + 1]);
			lost |= !(s >= 0.0f && s <= 65504.0f);
			wp->sc[i * ls[0].cnt + j] = s;
		}
	lost = __any_sync(0xffffffffu, lost);
	__syncwarp();
	return lost;
}

/*
 * Nonzero when one of the four one-byte codewords in @w (h84 where @EXT,
 * else h74) is not clean, as kvmem_h8x4_encode(@w, @EXT) != @w: each
 * byte's top nibble against the parity bits of its low one, those of the
 * low three data bits by a byte permute of a table of the eight nibbles,
 * the fourth bit's (0x70 in both codes) by a multiply.
 */
template <int EXT>
static __device__ __forceinline__ uint32_t kvmem_k_h8x4_dirty(uint32_t w)
{
	constexpr uint32_t t0 = EXT ? 0x60d0b000u : 0x60503000u;
	constexpr uint32_t t1 = EXT ? 0x803050e0u : 0x00305060u;
	const uint32_t d = w & 0x07070707u, sel = d | d >> 4;

	return (w ^ __byte_perm(t0, t1, __byte_perm(sel, 0, 0x20)) ^
		(w & 0x08080808u) * 14) &
	       0xf0f0f0f0u;
}

/*
 * The INT4 values in the low nibbles of bytes 0 and 2 of @w (@hi 0) or 1
 * and 3, as an FP16 pair for the tensor cores, each plus 24, exactly: the
 * nibble with its sign bit flipped is the top of the mantissa of a half
 * in [16, 32).
 */
static __device__ __forceinline__ uint32_t kvmem_k_h16(uint32_t w, int hi)
{
	return ((hi ? w >> 2 : w << 6) & 0x03c003c0u) ^ 0x4e004e00u;
}

/*
 * The values of @BITS (4: a byte's low nibble, 8: the byte, two's
 * complement) in bytes 0 and 2 of @w (@hi 0) or 1 and 3 as an FP16 pair,
 * exactly: INT4 by kvmem_k_h16() less 24, INT8 with its sign bit flipped
 * as the low mantissa byte of a half in [1024, 1280), less 1152.
 */
template <unsigned int BITS>
static __device__ __forceinline__ uint32_t kvmem_k_hx(uint32_t w, int hi)
{
	if constexpr (BITS == 4)
		return kvmem_k_hsub(kvmem_k_h16(w, hi), 0x4e004e00u);
	else
		return kvmem_k_hsub(((hi ? w >> 8 : w) & 0x00ff00ffu) ^
					    0x64806480u,
				    0x64806480u);
}

/*
 * Four one-byte codewords of @CODEC in @w, corrected where they are not
 * clean (counted in @c, the clean ones in @clean); *@ue set if one is
 * uncorrectable.
 */
template <unsigned int CODEC>
static __device__ __forceinline__ uint32_t
kvmem_k_fix4(uint32_t w, unsigned int *clean, struct kvmem_k_counts *c, int *ue)
{
	unsigned int i, hi;
	uint64_t lo;
	int st, nb;

	if (!kvmem_k_h8x4_dirty<CODEC == KVMEM_CODEC_H84>(w)) {
		*clean += 4;
		return w;
	}
	for (i = 0; i < 4; i++) {
		lo = w >> (8 * i) & 0xff;
		st = kvmem_k_word_correct(CODEC, &lo, &hi, &nb);
		kvmem_k_count(c, st, nb);
		*ue |= st == KVMEM_K_UE;
		w = (w & ~(0xffu << (8 * i))) | (uint32_t)lo << (8 * i);
	}
	return w;
}

/*
 * The four values of @BITS (4: a byte's low nibble, 8: the byte) in the
 * bytes of @w, as floats: each plus 2^(BITS - 1) put in the mantissa of
 * 2^23 by a byte permute, less 2^23 + 2^(BITS - 1).
 */
template <unsigned int BITS>
static __device__ __forceinline__ void kvmem_k_qx4(uint32_t w, float *v)
{
	constexpr uint32_t bias = BITS == 8 ? 0x80808080u : 0x08080808u;
	const uint32_t u = (BITS == 8 ? w : w & 0x0f0f0f0fu) ^ bias;
	unsigned int i;

	for (i = 0; i < 4; i++)
		v[i] = __uint_as_float(
			       __byte_perm(u, 0x4b000000u, 0x7440u + i)) -
		       (8388608.0f + (float)(bias & 0xff));
}

/* Whether golay24 word @w is clean: its parity half against v.B of its
 * data half by @lut (kvmem_k_golay_lut()). */
KVMEM_DFN int kvmem_k_golay_clean(uint32_t w, const uint16_t *lut)
{
	return (w >> 12 & 0xfff) ==
	       (uint32_t)(lut[w & 63] ^ lut[64 + (w >> 6 & 63)]);
}

/* The four golay24 words of the 12 bytes at @src, into @w. */
KVMEM_DFN void kvmem_k_golay_quad(const uint8_t *src, uint32_t *w)
{
	const uint32_t *s = (const uint32_t *)src;
	const uint32_t a = s[0], b = s[1], e = s[2];

	w[0] = a & 0xffffff;
	w[1] = a >> 24 | (b & 0xffff) << 8;
	w[2] = b >> 16 | (e & 0xff) << 16;
	w[3] = e >> 8;
}

/* The three INT4 values of golay24 word @w's data, a byte each. */
KVMEM_DFN uint32_t kvmem_k_golay_nibbles(uint32_t w)
{
	return (w & 0xf) | (w & 0xf0) << 4 | (w & 0xf00) << 8;
}

/* Twelve values, three a word of @x, into the 12 bytes at @dst. */
KVMEM_DFN void kvmem_k_golay_put(uint8_t *dst, const uint32_t *x)
{
	uint32_t *o = (uint32_t *)dst;

	o[0] = x[0] | x[1] << 24;
	o[1] = x[1] >> 8 | x[2] << 16;
	o[2] = x[2] >> 16 | x[3] << 8;
}

/*
 * @n golay24 rows of INT4 values at head_dim 128 (44 words, 132 bytes a
 * row), one after another at @src, decoded into a byte a value (its
 * nibble) at @dst, a row each KVMEM_K_Q4_STRIDE(128) bytes: a lane a quad
 * of words (12 bytes in, 12 values out) at a time, each word tested by
 * @lut, counted in @c; *@ue set if one is uncorrectable. The words past
 * the row's values (four bits of its 43rd word and its 44th) are tested
 * and counted too, as kvmem_attend() does; their nibbles land in the
 * row's stride. A quad with a word that is not clean is left to a second
 * pass, which corrects its words (kvmem_k_golay_fast()), so that the
 * first holds no correcting code.
 */
KVMEM_DFN void kvmem_k_q4_golay(const uint8_t *src, uint8_t *dst,
				unsigned int n, const uint16_t *lut,
				struct kvmem_k_counts *c, int *ue)
{
	constexpr unsigned int QR = 11; /* quads a row */
	unsigned int i, j, k, redo = 0; /* at most 11 quads a lane */
	uint32_t w[4], x[4];
	int ok, st, nb;

	for (i = threadIdx.x % 32, k = 0; i < n * QR; i += 32, k++) {
		kvmem_k_golay_quad(src + 12 * i, w);
		for (j = 0, ok = 1; j < 4; j++) {
			ok &= kvmem_k_golay_clean(w[j], lut);
			x[j] = kvmem_k_golay_nibbles(w[j]);
		}
		if (!ok) {
			redo |= 1u << k;
			continue;
		}
		c->clean += 4;
		kvmem_k_golay_put(dst + i / QR * KVMEM_K_Q4_STRIDE(128) +
					  12 * (i % QR),
				  x);
	}
	for (i = threadIdx.x % 32, k = 0; redo; i += 32, k++) {
		if (!(redo >> k & 1))
			continue;
		redo &= ~(1u << k);
		kvmem_k_golay_quad(src + 12 * i, w);
		for (j = 0; j < 4; j++) {
			x[j] = kvmem_k_golay_nibbles(
				kvmem_k_golay_fast(w[j], lut, &st, &nb));
			kvmem_k_count(c, st, nb);
			*ue |= st == KVMEM_K_UE;
		}
		kvmem_k_golay_put(dst + i / QR * KVMEM_K_Q4_STRIDE(128) +
					  12 * (i % QR),
				  x);
	}
}

/* Golay24 word @i of @src, where three bytes a word cut 4-byte pieces. */
KVMEM_DFN uint32_t kvmem_k_golay_word(const uint8_t *src, unsigned int i)
{
	const unsigned int sh = 3 * i % 4 * 8;
	const uint32_t *s = (const uint32_t *)(src + (3 * i & ~3u));

	return (sh > 8 ? __funnelshift_r(s[0], s[1], sh) : s[0] >> sh) &
	       0xffffff;
}

/* Its three values (data @d) into the three bytes at @o. */
KVMEM_DFN void kvmem_k_golay_put3(uint8_t *o, uint32_t d)
{
	o[0] = (uint8_t)(d & 0xf);
	o[1] = (uint8_t)(d >> 4 & 0xf);
	o[2] = (uint8_t)(d >> 8);
}

/*
 * The same at head_dim 64, whose rows of 22 words (66 bytes) cut quads:
 * a lane a word, from the one or two 4-byte pieces that hold it, its
 * three values into three bytes; a word that is not clean is corrected
 * in a second pass.
 */
KVMEM_DFN void kvmem_k_q4_golay64(const uint8_t *src, uint8_t *dst,
				  unsigned int n, const uint16_t *lut,
				  struct kvmem_k_counts *c, int *ue)
{
	constexpr unsigned int WR = 22; /* words a row */
	unsigned int i, k, redo = 0; /* at most 22 words a lane */
	uint32_t w;
	int st, nb;

	for (i = threadIdx.x % 32, k = 0; i < n * WR; i += 32, k++) {
		w = kvmem_k_golay_word(src, i);
		if (!kvmem_k_golay_clean(w, lut)) {
			redo |= 1u << k;
			continue;
		}
		c->clean++;
		kvmem_k_golay_put3(dst + i / WR * KVMEM_K_Q4_STRIDE(64) +
					   3 * (i % WR),
				   w & 0xfff);
	}
	for (i = threadIdx.x % 32, k = 0; redo; i += 32, k++) {
		if (!(redo >> k & 1))
			continue;
		redo &= ~(1u << k);
		w = kvmem_k_golay_fast(kvmem_k_golay_word(src, i), lut, &st,
				       &nb);
		kvmem_k_count(c, st, nb);
		*ue |= st == KVMEM_K_UE;
		kvmem_k_golay_put3(
			dst + i / WR * KVMEM_K_Q4_STRIDE(64) + 3 * (i % WR), w);
	}
}

/*
 * The same of @n secded72 rows of INT8 values (@D / 8 words, 9 bytes
 * each, a row): a lane a word, its 8 values into 8 bytes of @dst; a word
 * that is not clean is corrected in a second pass. A word is read as the
 * three 4-byte pieces that hold it; they lie within the rows, since
 * these end on a 4-byte boundary where kvmem_k_q4_ok() lets them in.
 */
template <unsigned int D>
static __device__ __forceinline__ void
kvmem_k_q4_secded(const uint8_t *src, uint8_t *dst, unsigned int n,
		  struct kvmem_k_counts *c, int *ue)
{
	constexpr unsigned int WR = D / 8; /* words a row */
	unsigned int i, k, redo = 0; /* at most 16 words a lane */

	for (i = threadIdx.x % 32, k = 0; i < n * WR; i += 32, k++) {
		const unsigned int sh = 9 * i % 4 * 8;
		const uint32_t *s = (const uint32_t *)(src + (9 * i & ~3u));
		const uint32_t a = s[0], b = s[1], e = s[2];
		const uint64_t lo = __funnelshift_r(a, b, sh) |
				    (uint64_t)__funnelshift_r(b, e, sh) << 32;
		uint32_t *o = (uint32_t *)(dst + i / WR * KVMEM_K_Q4_STRIDE(D) +
					   8 * (i % WR));

		if (kvmem_secded72_encode(lo) != (e >> sh & 0xff)) {
			redo |= 1u << k;
			continue;
		}
		c->clean++;
		o[0] = (uint32_t)lo;
		o[1] = (uint32_t)(lo >> 32);
	}
	for (i = threadIdx.x % 32, k = 0; redo; i += 32, k++) {
		const unsigned int sh = 9 * i % 4 * 8;
		const uint32_t *s = (const uint32_t *)(src + (9 * i & ~3u));
		const uint32_t a = s[0], b = s[1], e = s[2];
		uint64_t lo = __funnelshift_r(a, b, sh) |
			      (uint64_t)__funnelshift_r(b, e, sh) << 32;
		unsigned int hi = e >> sh & 0xff;
		uint32_t *o = (uint32_t *)(dst + i / WR * KVMEM_K_Q4_STRIDE(D) +
					   8 * (i % WR));
		int st, nb = 0;

		if (!(redo >> k & 1))
			continue;
		redo &= ~(1u << k);
		st = kvmem_k_word_correct(KVMEM_CODEC_SECDED72, &lo, &hi, &nb);
		kvmem_k_count(c, st, nb);
		*ue |= st == KVMEM_K_UE;
		o[0] = (uint32_t)lo;
		o[1] = (uint32_t)(lo >> 32);
	}
}

/* Where a lane is in its K row's scales: the next, the one in use, how
 * many values of its group are done. */
struct kvmem_k_q4_kscale {
	const float *next;
	float f;
	unsigned int rem;
};

/*
 * Values 4j..4j+3 of a K row, the bytes in @w as they are (one-byte
 * codewords, or values decoded, of @BITS), times their scales (the
 * channels', when @chan, else @ks's group scale, which moves on at the
 * end of a group of @gs), dotted with the query rows @q into @dot.
 */
template <unsigned int BITS, unsigned int D, unsigned int QRM>
static __device__ __forceinline__ void
kvmem_k_q4_kdot(uint32_t w, unsigned int j, const float *q, int chan,
		unsigned int gs, struct kvmem_k_q4_kscale *ks, float *dot)
{
	float v[4];
	unsigned int i, r;

	kvmem_k_qx4<BITS>(w, v);
	if (chan) {
		const kvmem_k_fvec<4> sv =
			*(const kvmem_k_fvec<4> *)(ks->next + 4 * j);

		for (i = 0; i < 4; i++)
			v[i] *= sv.x[i];
	} else {
		for (i = 0; i < 4; i++)
			v[i] *= ks->f;
		ks->rem += 4;
		if (ks->rem == gs && 4 * j + 4 < D) {
			ks->rem = 0;
			ks->f = *++ks->next;
		}
	}
	KVMEM_K_UNROLL
	for (r = 0; r < QRM; r++) {
		const kvmem_k_fvec<4> qv =
			*(const kvmem_k_fvec<4> *)(q + r * D + 4 * j);

		for (i = 0; i < 4; i++)
			dot[r] += qv.x[i] * v[i];
	}
}

/* The codecs whose rows the fast kernel decodes in its copy first. */
#define KVMEM_K_Q4_DECODES(codec) \
	((codec) == KVMEM_CODEC_GOLAY24 || (codec) == KVMEM_CODEC_SECDED72)

/*
 * Rows [0, @n) of a head's K or V in the page (@from, @row_bytes apart)
 * into a warp's copy at @to: rows of one-byte words KVMEM_K_Q4_STRIDE(D)
 * bytes apart, rows to decode one after another as they are in the page.
 */
template <unsigned int CODEC, unsigned int D>
static __device__ __forceinline__ void
kvmem_k_q4_copy(uint8_t *to, const uint8_t *from, unsigned int n,
		unsigned int row_bytes)
{
	constexpr unsigned int RC = D / 16, KS = KVMEM_K_Q4_STRIDE(D);
	unsigned int i;

	if constexpr (KVMEM_K_Q4_DECODES(CODEC)) {
		for (i = threadIdx.x % 32; i < (n * row_bytes + 15) / 16;
		     i += 32)
			kvmem_k_cp16(to + 16 * i, from + 16 * i);
	} else {
		for (i = threadIdx.x % 32; i < n * RC; i += 32)
			kvmem_k_cp16(to + i / RC * KS + 16 * (i % RC),
				     from + i / RC * row_bytes + 16 * (i % RC));
	}
}

/* Rows copied by kvmem_k_q4_copy() decoded from @src into @dst. */
template <unsigned int CODEC, unsigned int D>
static __device__ __forceinline__ void
kvmem_k_q4_decode(const uint8_t *src, uint8_t *dst, unsigned int n,
		  const uint16_t *lut, struct kvmem_k_counts *c, int *ue)
{
	if constexpr (CODEC == KVMEM_CODEC_GOLAY24 && D == 128)
		kvmem_k_q4_golay(src, dst, n, lut, c, ue);
	else if constexpr (CODEC == KVMEM_CODEC_GOLAY24)
		kvmem_k_q4_golay64(src, dst, n, lut, c, ue);
	else
		kvmem_k_q4_secded<D>(src, dst, n, c, ue);
}

/*
 * The B fragment of lane (4@r + @j) for k-step @i (dims 16i to 16i + 15)
 * from the query rows @q scaled by @qm: row @r's dims 16i + 4j + {0, 2}
 * and {1, 3}, in kvmem_k_h16()'s order, their high FP16 halves in
 * @b[0..1], the rest of each value in @b[2..3]; zeros past row @qr.
 */
template <unsigned int D>
static __device__ __forceinline__ void
kvmem_k_q4_qfrag(const float *q, unsigned int qr, const float *qm,
		 unsigned int i, unsigned int r, unsigned int j, uint32_t *b)
{
	uint32_t h[4], l[4];
	unsigned int k;

	for (k = 0; k < 4; k++) {
		const float x =
			r < qr ? q[r * D + 16 * i + 4 * j + k] * qm[r] : 0.0f;

		h[k] = kvmem_f2h(x);
		l[k] = kvmem_f2h(x - kvmem_h2f((uint16_t)h[k]));
	}
	b[0] = h[0] | h[2] << 16;
	b[1] = h[1] | h[3] << 16;
	b[2] = l[0] | l[2] << 16;
	b[3] = l[1] | l[3] << 16;
}

/*
 * The query rows for the tensor cores, in the CTA's @qm (KVMEM_K_Q4_QM
 * floats), by one warp: [0, 8) the power of two that puts each row's
 * largest value in [2^14, 2^15) (so that both FP16 halves of a value
 * below stay in range; at most 2^126, for a row of zeros or of values
 * too small to matter), [8, 16) its inverse, [16] 1 when the rows may
 * go to the tensor cores (every value finite).
 */
template <unsigned int D>
static __device__ __forceinline__ void
kvmem_k_q4_qprep(const float *q, unsigned int qr, float *qm)
{
	const unsigned int lane = threadIdx.x % 32, r = lane / 4, j = lane % 4;
	float m = 0.0f;
	unsigned int i, k;
	int bad = 0, ex = 0, e2;

	for (i = j; i < D && r < qr; i += 4) {
		const float x = fabsf(q[r * D + i]);

		bad |= !(x <= 3.0e38f);
		m = fmaxf(m, x);
	}
	for (k = 1; k < 4; k *= 2)
		m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, k));
	bad = __any_sync(0xffffffffu, bad);
	if (!j) {
		frexpf(m, &ex);
		e2 = m > 0.0f && 15 - ex < 126 ? 15 - ex : 126;
		qm[r] = ldexpf(1.0f, e2);
		qm[8 + r] = ldexpf(1.0f, -e2);
	}
	if (!lane)
		qm[16] = bad ? 0.0f : 1.0f;
	__syncwarp();
}

/*
 * The A fragment of K rows @t0 and @t0 + 8 (zeros past @n), for the lane
 * whose four dims of the step are 4@c to 4@c + 3, in the order of the
 * query rows' fragments (kvmem_k_q4_qfrag(): dims 4c and 4c + 2 in the
 * low k, 4c + 1 and 4c + 3 in the high): one-byte values of @BITS 4 or 8
 * from a word of the copy @kr (rows @KS bytes apart), or FP16 values
 * (@BITS 16) from two words, paired by byte permutes.
 */
template <unsigned int BITS, unsigned int KS>
static __device__ __forceinline__ void
kvmem_k_q4_kwords(const uint8_t *kr, unsigned int n, unsigned int t0,
		  unsigned int c, uint32_t *a)
{
	unsigned int r;

	for (r = 0; r < 2; r++) {
		const unsigned int t = t0 + 8 * r;

		if constexpr (BITS == 16) {
			const kvmem_k_uvec2 w =
				t < n ? *(const kvmem_k_uvec2 *)(kr + t * KS +
								 8 * c)
				      : kvmem_k_uvec2{};

			a[r] = __byte_perm(w.x[0], w.x[1], 0x5410);
			a[2 + r] = __byte_perm(w.x[0], w.x[1], 0x7632);
		} else {
			const uint32_t w =
				t < n ? *(const uint32_t *)(kr + t * KS + 4 * c)
				      : 0;

			a[r] = kvmem_k_hx<BITS>(w, 0);
			a[2 + r] = kvmem_k_hx<BITS>(w, 1);
		}
	}
}

/*
 * After kvmem_k_q4_qprep() (and a barrier), by the whole CTA: the query
 * rows' fragments for the tensor cores (kvmem_k_q4_qfrag()) written in
 * place of the rows @q, which take as many bytes; returns where they
 * are, or NULL (the rows stay as they were) when a row is not finite.
 */
template <unsigned int D>
static __device__ __forceinline__ const kvmem_k_uvec4 *
kvmem_k_q4_qstage(float *q, unsigned int qr, const float *qm)
{
	uint32_t fb[2][4];
	unsigned int i, k;

	static_assert(2 * KVMEM_K_THREADS >= 128 / 16 * 4 * KVMEM_K_Q4_QR,
		      "two fragments a thread at most");
	if (qm[16] == 0.0f)
		return NULL;
	for (i = 0; i < 2; i++) {
		k = threadIdx.x + i * blockDim.x;
		if (k < D / 16 * 4 * qr)
			kvmem_k_q4_qfrag<D>(q, qr, qm, k / (4 * qr),
					    k % (4 * qr) / 4, k % 4, fb[i]);
	}
	__syncthreads();
	for (i = 0; i < 2; i++) {
		k = threadIdx.x + i * blockDim.x;
		if (k < D / 16 * 4 * qr)
			((kvmem_k_uvec4 *)q)[k] = { { fb[i][0], fb[i][1],
						      fb[i][2], fb[i][3] } };
	}
	__syncthreads();
	return (const kvmem_k_uvec4 *)q;
}

/*
 * K by the tensor cores, for a page whose K scales are groups of a
 * multiple of 16 dims: the scores of the page's tokens (rows of A, two
 * tiles of 16) with the query rows (columns of B, eight), 16 dims a step,
 * the @BITS values of the copy @kr made signed FP16 as they come
 * (kvmem_k_hx(), exact: signed, so that the sums stay as small as the
 * values' own), each step twice (@qb: the fragments of the first 4 @qr lanes,
 * kvmem_k_q4_qfrag(), the query rows' high halves, then the rest); a
 * group's sum is scaled once by the token's scale of the group (@ks),
 * and the row's power of two (@qm) taken out at the end.
 * The scores, a lane a token, into @dot through the page's weights @wt
 * (shared memory).
 */
template <unsigned int BITS, unsigned int D, unsigned int QRM,
	  unsigned int KS = KVMEM_K_Q4_STRIDE(D)>
static __device__ __forceinline__ void
kvmem_k_q4_kmma(const uint8_t *kr, unsigned int n, const kvmem_k_uvec4 *qb,
		unsigned int qr, const float *qm, const float *ks,
		unsigned int gs, float *wt, float *dot)
{
	const unsigned int lane = threadIdx.x % 32, g = lane / 4, j = lane % 4;
	const unsigned int gk = gs / 16, groups = D / gs;
	const unsigned int tiles = n > 16 ? 2 : 1;
	float c[2][4] = { { 0.0f } }, sc[2][4] = { { 0.0f } };
	unsigned int m, i, r, t;

	KVMEM_K_UNROLL
	for (i = 0; i < D / 16; i++) {
		const kvmem_k_uvec4 b =
			lane < 4 * qr ? qb[i * 4 * qr + lane] : kvmem_k_uvec4{};

		KVMEM_K_UNROLL
		for (m = 0; m < 2; m++) {
			const unsigned int t0 = 16 * m + g, t1 = t0 + 8;
			uint32_t a[4];

			kvmem_k_q4_kwords<BITS, KS>(kr, n, t0, 4 * i + j, a);

			if (m >= tiles)
				break;
			if (i % gk == 0)
				c[m][0] = c[m][1] = c[m][2] = c[m][3] = 0.0f;
			kvmem_k_mma(c[m], a, b.x);
			kvmem_k_mma(c[m], a, b.x + 2);
			if (i % gk == gk - 1) {
				const float s0 =
					BITS == 16 ? 1.0f
					: t0 < n   ? ks[t0 * groups + i / gk]
						   : 0.0f;
				const float s1 =
					BITS == 16 ? 1.0f
					: t1 < n   ? ks[t1 * groups + i / gk]
						   : 0.0f;

				sc[m][0] += s0 * c[m][0];
				sc[m][1] += s0 * c[m][1];
				sc[m][2] += s1 * c[m][2];
				sc[m][3] += s1 * c[m][3];
			}
		}
	}
	KVMEM_K_UNROLL
	for (m = 0; m < 2; m++) {
		for (i = 0; i < 4 && m < tiles; i++) {
			r = 2 * j + i % 2;
			t = 16 * m + g + 8 * (i / 2);
			if (r < QRM)
				wt[t * QRM + r] = sc[m][i] * qm[8 + r];
		}
	}
	__syncwarp();
	KVMEM_K_UNROLL
	for (r = 0; r < QRM; r++)
		dot[r] = wt[lane * QRM + r];
}

/*
 * The A fragment of V for the lane's tokens @t0 and @t0 + 1 (zeros past
 * @n) and its four dims 4@c to 4@c + 3 (kvmem_k_q4_vmma()): each dim's
 * two values paired by a byte permute, from one word of each row of the
 * copy @vr (rows @KS bytes apart, one-byte values of @BITS 4 or 8, made
 * signed FP16), or from two (FP16, @BITS 16).
 */
template <unsigned int BITS, unsigned int KS>
static __device__ __forceinline__ void
kvmem_k_q4_vwords(const uint8_t *vr, unsigned int n, unsigned int t0,
		  unsigned int c, uint32_t *a)
{
	if constexpr (BITS == 16) {
		const kvmem_k_uvec2 w0 =
			t0 < n ? *(const kvmem_k_uvec2 *)(vr + t0 * KS + 8 * c)
			       : kvmem_k_uvec2{};
		const kvmem_k_uvec2 w1 =
			t0 + 1 < n
				? *(const kvmem_k_uvec2 *)(vr + (t0 + 1) * KS +
							   8 * c)
				: kvmem_k_uvec2{};

		a[0] = __byte_perm(w0.x[0], w1.x[0], 0x5410);
		a[1] = __byte_perm(w0.x[0], w1.x[0], 0x7632);
		a[2] = __byte_perm(w0.x[1], w1.x[1], 0x5410);
		a[3] = __byte_perm(w0.x[1], w1.x[1], 0x7632);
	} else {
		const uint32_t w0 =
			t0 < n ? *(const uint32_t *)(vr + t0 * KS + 4 * c) : 0;
		const uint32_t w1 =
			t0 + 1 < n ? *(const uint32_t *)(vr + (t0 + 1) * KS +
							 4 * c)
				   : 0;
		const uint32_t x01 = __byte_perm(w0, w1, 0x5410);
		const uint32_t x23 = __byte_perm(w0, w1, 0x7632);

		a[0] = kvmem_k_hx<BITS>(x01, 0);
		a[1] = kvmem_k_hx<BITS>(x01, 1);
		a[2] = kvmem_k_hx<BITS>(x23, 0);
		a[3] = kvmem_k_hx<BITS>(x23, 1);
	}
}

/*
 * V by the tensor cores, for pages whose V scales are groups of a
 * multiple of 32 dims, 8 tokens a step and 32 dims an mma: A is two
 * tiles of 16 dims by 8 tokens side by side (k < 8: dims 4c and 4c + 1,
 * k >= 8: dims 4c + 2 and 4c + 3 of the same tokens, c = g + 8s for the
 * s-th 32 dims), made from the lane's two tokens' words of the V rows of
 * the copy @vr (their bytes of a dim paired by a byte permute, signed
 * FP16 by kvmem_k_hx()); B is block-diagonal, four query rows (of
 * @QRM / 4 sets) against the first tile and the same four against the
 * second: the page's weights @wt, each times its token's scale of the
 * group and a power of two that puts the group's largest scale in
 * [2^14, 2^15), in two FP16 halves as K's query rows. No column of C is
 * wasted: @acc[set * D / 32 + s] holds, for lane (g, j), dims 4c + 2(j /
 * 2) (c[0..1]) and one more (c[2..3]) of query rows 4 set + 2(j % 2) and
 * one more; the page's sums, the power of two taken out, are added to it
 * after rescaling it by @xr (each query row's factor).
 */
template <unsigned int BITS, unsigned int D, unsigned int QRM,
	  unsigned int KS = KVMEM_K_Q4_STRIDE(D)>
static __device__ __forceinline__ void
kvmem_k_q4_vmma(const uint8_t *vr, unsigned int n, const float *vs,
		unsigned int gs, const float *wt, const float *xr,
		float (*acc)[4])
{
	constexpr unsigned int SETS = QRM / 4;
	const unsigned int lane = threadIdx.x % 32, g = lane / 4, j = lane % 4;
	const unsigned int groups = D / gs;
	float x0[SETS], x1[SETS];
	unsigned int s, k, i, h;

	KVMEM_K_UNROLL
	for (h = 0; h < SETS; h++) {
		x0[h] = 1.0f;
		x1[h] = 1.0f;
		KVMEM_K_UNROLL
		for (i = 0; i < 4; i++) {
			x0[h] = i == 2 * (j % 2) ? xr[4 * h + i] : x0[h];
			x1[h] = i == 2 * (j % 2) + 1 ? xr[4 * h + i] : x1[h];
		}
	}
	KVMEM_K_UNROLL
	for (s = 0; s < D / 32; s++) {
		const unsigned int grp = 32 * s / gs;
		float c[SETS][4], f = 1.0f, fi = 1.0f, mx;
		uint32_t e;

		/* FP16 pages (@BITS 16) have no scales. */
		if constexpr (BITS != 16) {
			mx = lane < n ? vs[lane * groups + grp] : 0.0f;
			for (k = 16; k; k /= 2)
				mx = fmaxf(mx,
					   __shfl_xor_sync(0xffffffffu, mx, k));
			e = __float_as_uint(mx) >> 23;
			f = e >= 15 ? __uint_as_float((268 - e) << 23) : 1.0f;
			fi = e >= 15 ? __uint_as_float((e - 14) << 23) : 1.0f;
		}
		KVMEM_K_UNROLL
		for (h = 0; h < SETS; h++)
			for (i = 0; i < 4; i++)
				c[h][i] = 0.0f;
		KVMEM_K_UNROLL
		for (k = 0; k < 32; k += 8) {
			const unsigned int t0 = k + 2 * j, t1 = t0 + 1;
			const float s0 = t0 >= n ? 0.0f
					 : BITS == 16
						 ? 1.0f
						 : vs[t0 * groups + grp] * f;
			const float s1 = t1 >= n ? 0.0f
					 : BITS == 16
						 ? 1.0f
						 : vs[t1 * groups + grp] * f;
			uint32_t a[4];

			kvmem_k_q4_vwords<BITS, KS>(vr, n, t0, g + 8 * s, a);

			if (k >= n)
				break;
			KVMEM_K_UNROLL
			for (h = 0; h < SETS; h++) {
				const unsigned int r = 4 * h + g % 4;
				const float v0 = wt[t0 * QRM + r] * s0;
				const float v1 = wt[t1 * QRM + r] * s1;
				const uint32_t hi = kvmem_k_f2h2(v0, v1);
				const uint32_t lo =
					kvmem_k_f2h2(v0 - kvmem_k_h2f(hi, 0),
						     v1 - kvmem_k_h2f(hi, 1));
				const uint32_t bh[2] = { g < 4 ? hi : 0,
							 g < 4 ? 0 : hi };
				const uint32_t bl[2] = { g < 4 ? lo : 0,
							 g < 4 ? 0 : lo };

				kvmem_k_mma(c[h], a, bh);
				kvmem_k_mma(c[h], a, bl);
			}
		}
		KVMEM_K_UNROLL
		for (h = 0; h < SETS; h++) {
			float *ac = acc[h * (D / 32) + s];

			ac[0] = ac[0] * x0[h] + c[h][0] * fi;
			ac[1] = ac[1] * x1[h] + c[h][1] * fi;
			ac[2] = ac[2] * x0[h] + c[h][2] * fi;
			ac[3] = ac[3] * x1[h] + c[h][3] * fi;
		}
	}
}

/*
 * The softmax of each query row over page @pi's @n tokens, from the
 * scores @dot of this lane's token (a lane a token): the page's (max,
 * sum) of each row into @mass (or not, NULL), the warp's running (max,
 * sum) in @ml brought up to date, the factor each row's accumulator is
 * to be rescaled by into @xr, and the tokens' weights, relative to the
 * running max, into @wt ([32][QRM], shared memory) for V.
 */
template <unsigned int QRM>
static __device__ __forceinline__ void
kvmem_k_q4_softmax(const struct kvmem_k_attend *p, unsigned int pi,
		   unsigned int h, unsigned int len, unsigned int n,
		   const float *dot, float *mass, float *ml, float *wt,
		   float *xr)
{
	const struct kvmem_k_page *pg = (const struct kvmem_k_page *)p->pages;
	const unsigned int G = p->n_heads / p->g.kv_heads, QR = G * p->nq;
	const unsigned int lane = threadIdx.x % 32;
	unsigned int r, k;

	KVMEM_K_UNROLL
	for (r = 0; r < QRM; r++) {
		const unsigned int qpos = len - p->nq + r / G;
		float x, mt, sum, mn, e, ef = 0.0f;

		xr[r] = 1.0f;
		if (r < QR) {
			x = lane < n && pg[pi].token_start + lane <= qpos
				    ? p->scale * dot[r]
				    : -INFINITY;
			mt = x;
			for (k = 16; k; k /= 2)
				mt = fmaxf(mt,
					   __shfl_xor_sync(0xffffffffu, mt, k));
			e = mt == -INFINITY ? 0.0f : expf(x - mt);
			sum = e;
			for (k = 16; k; k /= 2)
				sum += __shfl_xor_sync(0xffffffffu, sum, k);
			if (mass && !lane) {
				float *wm = mass +
					    ((size_t)pi * p->g.kv_heads + h) *
						    QR * 2;

				wm[2 * r] = mt;
				wm[2 * r + 1] = sum;
			}
			if (mt != -INFINITY) {
				mn = fmaxf(ml[2 * r], mt);
				x = expf(ml[2 * r] - mn);
				xr[r] = x;
				ef = expf(mt - mn);
				sum = ml[2 * r + 1] * x + sum * ef;
				__syncwarp();
				if (!lane) {
					ml[2 * r] = mn;
					ml[2 * r + 1] = sum;
				}
			}
			ef *= e;
		}
		wt[lane * QRM + r] = ef;
	}
	__syncwarp();
}

/* What a warp carries from page to page, for up to QRM query rows. */
template <unsigned int D, unsigned int QRM> struct kvmem_k_q4_state {
	float *ml; /* [QR][2]: running max and sum, in shared memory */
	float *wt; /* [32][QRM]: a page's weights, in shared memory */
	/* the lane's columns of each query row, or with V on the tensor
	 * cores its elements of C (kvmem_k_q4_vmma(): QRM D / 128 of them) */
	float acc[QRM][4];
	struct kvmem_k_counts c;
	unsigned long long headers_ue;
};

/*
 * Page @pi for KV head @h, by one warp, the CTA's pages ending at @last;
 * returns 0, the same in every lane, when the page is left to
 * kvmem_k_attend. @q: the query rows; @mass: the pages' (max, sum) of each
 * query row, or NULL.
 */
template <unsigned int CODEC, unsigned int D, unsigned int QRM>
static __device__ __forceinline__ int
kvmem_k_q4_page(const struct kvmem_k_attend *p, unsigned int pi,
		unsigned int last, unsigned int h, unsigned int len,
		const float *q, const kvmem_k_uvec4 *qb, const float *qm,
		int vmma, float *mass, const uint32_t *tab, const uint16_t *lut,
		const struct kvmem_k_q4_warp *wp,
		struct kvmem_k_q4_state<D, QRM> *s)
{
	/* V: lanes a token stream has (four columns each), streams. */
	constexpr unsigned int VL = D / 4, NH = 32 / VL, VT = 32 / NH;
	/* Bytes from a row to the next in the copy. */
	constexpr unsigned int KS = KVMEM_K_Q4_STRIDE(D);
	/* Rows decoded in the copy first; the values' bits. */
	constexpr int DEC = KVMEM_K_Q4_DECODES(CODEC);
	constexpr unsigned int BITS = CODEC == KVMEM_CODEC_SECDED72 ? 8 : 4;
	const struct kvmem_k_geom *g = &p->g;
	const struct kvmem_k_layout *l = &g->l[0];
	const struct kvmem_k_page *pg = (const struct kvmem_k_page *)p->pages;
	const unsigned int G = p->n_heads / g->kv_heads, QR = G * p->nq;
	const unsigned int lane = threadIdx.x % 32, n = pg[pi].ntokens;
	const unsigned int gs = g->group_size, groups = D / gs;
	const unsigned int col = 4 * (lane % VL), th = lane / VL;
	const uint8_t *page = (const uint8_t *)pg[pi].addr;
	const uint8_t *rows =
		page + (size_t)h * g->tokens_per_page * l->row_bytes;
	const float *ks = wp->sc, *vs = wp->sc + kvmem_k_head_scales(g, l, 0);
	const float *vsc = vs + col / gs; /* the lane's columns' scales */
	/* The V rows' place in the copy, the lane's columns in it. */
	uint8_t *const vrows = wp->kv + g->tokens_per_page * KS;
	uint8_t *vr = vrows + col, *to = vrows;
	struct kvmem_k_q4_list ls[2];
	struct kvmem_k_q4_words sw;
	constexpr int ext = CODEC == KVMEM_CODEC_H84;
	struct kvmem_k_counts c = { 0, 0, 0, 0 };
	float dot[QRM], xr[QRM];
	unsigned int r, j, i, k, clean = 0;
	int ue = 0;

	/* A block table is trusted (kvmem_cuda_attend()), but one that
	 * gives a page more tokens than it holds must not make the copy
	 * below run over into the other warps' shared memory. */
	if (pg[pi].flags & KVMEM_HDR_HOT || pg[pi].addr % 16 ||
	    n > g->tokens_per_page)
		return 0;
	/* The warp's next page on its way to L2 while this one is done:
	 * lane t's K and V rows, and the words of the head's scale
	 * segments, K's by lanes 0-15, V's by lanes 16-31. */
	if (pi + KVMEM_K_WARPS < last) {
		const uint8_t *np =
			(const uint8_t *)pg[pi + KVMEM_K_WARPS].addr;
		const uint8_t *nr = np + ((size_t)h * g->tokens_per_page +
					  lane) * l->row_bytes;
		const unsigned int at = 128 * (lane % 16);
		struct kvmem_k_q4_list ls;

		kvmem_k_q4_list(g, l, lane >= 16, h, 0, 0, &ls);
		if (lane < g->tokens_per_page) {
			kvmem_k_prefetch(nr + l->k_off);
			kvmem_k_prefetch(nr + l->v_off);
		}
		if (at < 3 * ls.nw)
			kvmem_k_prefetch(np + l->scales_off + 3 * ls.w0 + at);
	}
	/* Into the warp's copy: the words of the head's scale segments and
	 * their checks, where its V rows go later, then its K rows, on their
	 * way while the scales are judged; then the V rows, while K is. The
	 * last page may have left by a path where a lane wrote the copy
	 * (a V word corrected) with no barrier after it. */
	__syncwarp();
	kvmem_k_q4_list(g, l, 0, h, 0, 0, &ls[0]);
	kvmem_k_q4_list(g, l, 1, h, ls[0].nw, ls[0].nseg, &ls[1]);
	for (i = 0; i < 2; i++) {
		sw.w[i] = kvmem_k_q4_stage(
			&to, page, l->scales_off + 3 * ls[i].w0, 3 * ls[i].nw);
		sw.ck[i] = kvmem_k_q4_stage(&to, page,
					    l->checks_off + 6 * ls[i].s0,
					    6 * ls[i].nseg);
	}
	kvmem_k_cp_commit();
	kvmem_k_q4_copy<CODEC, D>(wp->kv, rows + l->k_off, n, l->row_bytes);
	kvmem_k_cp_commit();
	kvmem_k_cp_wait<1>();
	__syncwarp();
	if (kvmem_k_q4_scales(l, ls, &sw, tab, lut, wp, &c)) {
		kvmem_k_cp_wait<0>();
		return 0;
	}
	if (DEC) {
		/* golay24, secded72: the K rows decoded into the V rows'
		 * place, and the V rows copied where the K rows were. */
		kvmem_k_cp_wait<0>();
		__syncwarp();
		kvmem_k_q4_decode<CODEC, D>(wp->kv, vrows, n, lut, &c, &ue);
		if (__any_sync(0xffffffffu, ue))
			return 0;
		__syncwarp();
		kvmem_k_q4_copy<CODEC, D>(wp->kv, rows + l->v_off, n,
					  l->row_bytes);
	} else {
		kvmem_k_q4_copy<CODEC, D>(vrows, rows + l->v_off, n,
					  l->row_bytes);
	}
	kvmem_k_cp_commit();
	kvmem_k_cp_wait<1>();
	__syncwarp();

	/* K, a lane a token: each value times its scale, dotted with the
	 * query rows. The words are taken as they come, and tested on the
	 * way; a lane whose row holds one that is not clean does the row
	 * again from the copy, a word at a time, corrected (off the unrolled
	 * path, so that its code stays out of the way of the clean one's). */
	KVMEM_K_UNROLL
	for (r = 0; r < QRM; r++)
		dot[r] = 0.0f;
	if (qb) {
		/* K on the tensor cores (kvmem_k_q4_kmma()). */
		const uint8_t *kr = DEC ? vrows : wp->kv;

		/* One-byte codewords: all tested, a word a step, and if one
		 * is not clean all corrected in the copy. */
		if constexpr (!DEC) {
			uint32_t bad = 0;

			KVMEM_K_UNROLL_BY(8)
			for (i = lane; i < n * D / 16; i += 32) {
				const kvmem_k_uvec4 u =
					*(const kvmem_k_uvec4
						  *)(kr + i / (D / 16) * KS +
						     16 * (i % (D / 16)));

				for (k = 0; k < 4; k++)
					bad |= kvmem_k_h8x4_dirty<ext>(u.x[k]);
			}
			if (__any_sync(0xffffffffu, bad)) {
				KVMEM_K_NO_UNROLL
				for (i = lane; i < n * D / 4; i += 32) {
					uint32_t *w =
						(uint32_t *)(wp->kv +
							     i / (D / 4) * KS +
							     4 * (i % (D / 4)));

					*w = kvmem_k_fix4<CODEC>(*w, &clean, &c,
								 &ue);
				}
				__syncwarp();
			} else if (!lane) {
				clean += n * D;
			}
		}
		kvmem_k_q4_kmma<BITS, D, QRM>(kr, n, qb, QR, qm, ks, gs, s->wt,
					      dot);
	} else if (lane < n) {
		const kvmem_k_uvec4 *kr =
			(const kvmem_k_uvec4 *)((DEC ? vrows : wp->kv) +
						lane * KS);
		const float *sk0 = l->chan ? ks : ks + lane * groups;
		struct kvmem_k_q4_kscale ksc = { sk0, *sk0, 0 };
		uint32_t bad = 0;

		KVMEM_K_UNROLL_BY(2)
		for (k = 0; k < D / 16; k++) {
			const kvmem_k_uvec4 u = kr[k];

			KVMEM_K_UNROLL
			for (i = 0; i < 4; i++) {
				if (!DEC)
					bad |= kvmem_k_h8x4_dirty<ext>(u.x[i]);
				kvmem_k_q4_kdot<BITS, D, QRM>(u.x[i], 4 * k + i,
							      q, l->chan, gs,
							      &ksc, dot);
			}
		}
		/* Decoded rows were counted as they were decoded. */
		if constexpr (!DEC) {
			if (!bad) {
				clean += D;
			} else {
				const uint32_t *kw = (const uint32_t *)kr;

				ksc = { sk0, *sk0, 0 };
				KVMEM_K_UNROLL
				for (r = 0; r < QRM; r++)
					dot[r] = 0.0f;
				KVMEM_K_NO_UNROLL
				for (j = 0; j < D / 4; j++)
					kvmem_k_q4_kdot<BITS, D, QRM>(
						kvmem_k_fix4<CODEC>(
							kw[j], &clean, &c, &ue),
						j, q, l->chan, gs, &ksc, dot);
			}
		}
	}
	/* V: the words of the lane's columns in the copy, tested all at
	 * once, corrected there only if one is not clean; the lane alone
	 * reads them. golay24, secded72: the rows decoded into their
	 * place, over the K rows decoded, which every lane is done with. */
	kvmem_k_cp_wait<0>();
	__syncwarp();
	if constexpr (DEC) {
		kvmem_k_q4_decode<CODEC, D>(wp->kv, vrows, n, lut, &c, &ue);
	} else {
		uint32_t vbad = 0;
		unsigned int vn;

		KVMEM_K_UNROLL_BY(8)
		for (k = 0; k < VT; k++) {
			const unsigned int t = th + k * NH;
			const uint32_t w =
				t < n ? *(const uint32_t *)(vr + t * KS) : 0;

			vbad |= kvmem_k_h8x4_dirty<ext>(w);
		}
		if (!vbad) {
			/* The lane's tokens th, th + NH, ... below n. */
			vn = n > th ? (n - th + NH - 1) / NH : 0;
			clean += 4 * (vn < VT ? vn : VT);
		} else {
			KVMEM_K_NO_UNROLL
			for (k = 0; k < VT && th + k * NH < n; k++) {
				uint32_t *w =
					(uint32_t *)(vr + (th + k * NH) * KS);

				*w = kvmem_k_fix4<CODEC>(*w, &clean, &c, &ue);
			}
		}
	}
	if (__any_sync(0xffffffffu, ue))
		return 0;

	kvmem_k_q4_softmax<QRM>(p, pi, h, len, n, dot, mass, s->ml, s->wt, xr);

	if (vmma) {
		kvmem_k_q4_vmma<BITS, D, QRM>(vrows, n, vs, gs, s->wt, xr,
					      s->acc);
	} else {
		/* V: token t's weights from the page's, four rows a load. */
		KVMEM_K_UNROLL
		for (r = 0; r < QRM; r++)
			for (i = 0; i < 4; i++)
				s->acc[r][i] *= xr[r];
		KVMEM_K_UNROLL_BY(4)
		for (k = 0; k < VT; k++) {
			const unsigned int t = th + k * NH;
			const float sv = t < n ? vsc[t * groups] : 0.0f;
			float v[4];

			kvmem_k_qx4<BITS>(
				t < n ? *(const uint32_t *)(vr + t * KS) : 0,
				v);
			for (i = 0; i < 4; i++)
				v[i] *= sv;
			KVMEM_K_UNROLL
			for (r = 0; r < QRM; r += 4) {
				const kvmem_k_fvec<4> pr =
					*(const kvmem_k_fvec<4> *)(s->wt +
								   t * QRM + r);

				for (j = 0; j < 4; j++)
					for (i = 0; i < 4; i++)
						s->acc[r + j][i] +=
							pr.x[j] * v[i];
			}
		}
	}
	__syncwarp();

	if (h == 0)
		kvmem_k_header(page, tab, &c, &s->headers_ue);
	c.clean += clean;
	kvmem_k_counts_sum(&s->c, &c);
	return 1;
}

/*
 * The warps' states merged into the CTA's partial result @w, at the end
 * of the page loop: each warp's share (its running max and sum @wml, in
 * @ml with the others', its accumulator @acc, laid out for V on the
 * tensor cores where @vmma, kvmem_k_q4_vmma(), else a lane four
 * columns) rescaled to the CTA's max, the accumulators summed a warp at
 * a time in @q (the query rows' memory, done with).
 */
template <unsigned int D, unsigned int QRM>
static __device__ __forceinline__ void
kvmem_k_q4_merge(const struct kvmem_k_attend *p, float *q, const float *ml,
		 const float *wml, float (*acc)[4], int vmma, float *w)
{
	constexpr unsigned int VL = D / 4;
	const unsigned int QR = p->n_heads / p->g.kv_heads * p->nq;
	const unsigned int wi = threadIdx.x / 32, lane = threadIdx.x % 32;
	const unsigned int g = lane / 4, j = lane % 4;
	float f0[QRM / 4] = { 0.0f }, f1[QRM / 4] = { 0.0f };
	unsigned int r, i, k, m;

	__syncthreads();
	for (i = threadIdx.x; i < QR * D; i += blockDim.x)
		q[i] = 0.0f;
	KVMEM_K_UNROLL
	for (r = 0; r < QRM; r++) {
		float mx = -INFINITY, f;

		if (r >= QR)
			continue;
		for (k = 0; k < KVMEM_K_WARPS; k++)
			mx = fmaxf(mx, ml[(k * QR + r) * 2]);
		f = wml[2 * r] == -INFINITY ? 0.0f : expf(wml[2 * r] - mx);
		/* V on the tensor cores: the factors of the lane's rows. */
		if (r % 4 == 2 * (j % 2))
			f0[r / 4] = f;
		if (r % 4 == 2 * (j % 2) + 1)
			f1[r / 4] = f;
		if (!vmma) {
			for (i = 0; i < 4; i++) {
				float v = acc[r][i] * f;

				for (k = VL; k < 32; k *= 2)
					v += __shfl_xor_sync(0xffffffffu, v, k);
				acc[r][i] = v;
			}
		}
		if (!threadIdx.x) {
			float sum = 0.0f;

			for (k = 0; k < KVMEM_K_WARPS; k++)
				if (ml[(k * QR + r) * 2] != -INFINITY)
					sum += ml[(k * QR + r) * 2 + 1] *
					       expf(ml[(k * QR + r) * 2] - mx);
			w[2 * r] = mx;
			w[2 * r + 1] = sum;
		}
	}
	__syncthreads();
	for (k = 0; k < KVMEM_K_WARPS; k++) {
		if (wi == k && vmma) {
			KVMEM_K_UNROLL
			for (m = 0; m < QRM * D / 128; m++)
				KVMEM_K_UNROLL
			for (i = 0; i < 4; i++) {
				r = 4 * (m / (D / 32)) + 2 * (j % 2) + i % 2;
				if (r < QR)
					q[r * D + 4 * (g + 8 * (m % (D / 32))) +
					  2 * (j / 2) + i / 2] +=
						acc[m][i] *
						(i % 2 ? f1[m / (D / 32)]
						       : f0[m / (D / 32)]);
			}
		} else if (wi == k && lane < VL) {
			KVMEM_K_UNROLL
			for (r = 0; r < QRM; r++)
				for (i = 0; i < 4 && r < QR; i++)
					q[r * D + 4 * lane + i] += acc[r][i];
		}
		__syncthreads();
	}
	for (i = threadIdx.x; i < QR * D; i += blockDim.x)
		w[2 * QR + i] = q[i];
}

/*
 * The pages of the CTA's share, warp by warp, then the warps' states
 * merged into the CTA's partial result @w (kvmem_k_q4_merge(); their
 * running max and sum are in @ml).
 */
template <unsigned int CODEC, unsigned int D, unsigned int QRM>
static __device__ __forceinline__ void
kvmem_k_q4_run(const struct kvmem_k_attend *p, unsigned int first,
	       unsigned int last, unsigned int h, unsigned int len, float *q,
	       float *qm, float *mass, const uint32_t *tab, const uint16_t *lut,
	       const struct kvmem_k_q4_warp *wp, float *ml, float *wt, float *w)
{
	const unsigned int QR = p->n_heads / p->g.kv_heads * p->nq;
	const unsigned int wi = threadIdx.x / 32, lane = threadIdx.x % 32;
	uint8_t *fl = (uint8_t *)p->flags;
	/* V on the tensor cores (kvmem_k_q4_vmma()) where the V scales are
	 * groups of whole 32 dims; INT8 (decoded secded72 rows) with up to
	 * four query rows only: with eight, q4w's registers would spill. */
	const int vmma = (CODEC != KVMEM_CODEC_SECDED72 || QRM <= 4) &&
			 p->g.group_size % 32 == 0;
	struct kvmem_k_q4_state<D, QRM> s;
	const kvmem_k_uvec4 *qb = NULL;
	unsigned int pi;

	memset(&s, 0, sizeof(s));
	s.ml = ml + wi * QR * 2;
	s.wt = wt + wi * 32 * QRM;
	/* The query rows' fragments for K on the tensor cores, where the
	 * K scales are groups of whole k-steps (not one a channel) and the
	 * rows finite: in place of the rows, which take as
	 * many bytes (kvmem_k_q4_kmma() takes them from there). */
	if (!p->g.l[0].chan && p->g.group_size % 16 == 0) {
		if (!wi)
			kvmem_k_q4_qprep<D>(q, QR, qm);
		__syncthreads();
		qb = kvmem_k_q4_qstage<D>(q, QR, qm);
	}
	for (pi = first + wi; pi < last; pi += KVMEM_K_WARPS) {
		const int done = kvmem_k_q4_page<CODEC, D, QRM>(
			p, pi, last, h, len, q, qb, qm, vmma, mass, tab, lut,
			wp, &s);

		if (!lane)
			fl[(size_t)pi * p->g.kv_heads + h] = (uint8_t)!done;
	}

	kvmem_k_q4_merge<D, QRM>(p, q, ml, s.ml, s.acc, vmma, w);

	if (p->stats) {
		unsigned long long *st = (unsigned long long *)p->stats;

		if (s.c.clean)
			atomicAdd(&st[0], s.c.clean);
		if (s.c.corrected)
			atomicAdd(&st[1], s.c.corrected);
		if (s.c.ue)
			atomicAdd(&st[2], s.c.ue);
		if (s.headers_ue)
			atomicAdd(&st[4], s.headers_ue);
	}
}

/* The kernel, for up to QRM query rows; @smem its shared memory. */
template <unsigned int QRM>
static __device__ __forceinline__ void
kvmem_k_attend_q4_body(const struct kvmem_k_attend &p, uint8_t *smem)
{
	const struct kvmem_k_geom *g = &p.g;
	const struct kvmem_k_page *pg = (const struct kvmem_k_page *)p.pages;
	const uint32_t *sp = (const uint32_t *)p.seq_pages;
	const unsigned int h = blockIdx.x, b = blockIdx.y, split = blockIdx.z;
	const unsigned int D = g->head_dim, G = p.n_heads / g->kv_heads;
	const unsigned int QR = G * p.nq, wi = threadIdx.x / 32;
	const unsigned int lane = threadIdx.x % 32;
	const unsigned int p0 = sp[b], p1 = sp[b + 1];
	const unsigned int per = (p1 - p0 + p.splits - 1) / p.splits;
	const unsigned int first = p0 + split * per;
	const unsigned int last = first + per < p1 ? first + per : p1;
	float *w = (float *)p.ws +
		   (((size_t)b * g->kv_heads + h) * p.parts + split) * QR *
			   (D + 2);
	struct kvmem_k_q4_smem o;
	struct kvmem_k_q4_warp wp;
	uint64_t mass_off, flags_off;
	float *q, *qm, *ml, *wt, *mass = NULL;
	uint32_t *tab;
	uint16_t *lut;
	unsigned int len = 0, i;

	kvmem_k_q4_carve(g, QR, &o);
	q = (float *)(smem + o.q);
	tab = (uint32_t *)(smem + o.tab);
	lut = (uint16_t *)(smem + o.glut);
	qm = (float *)(smem + o.qm);
	ml = (float *)(smem + o.ml);
	wt = (float *)(smem + o.wt);
	wp.sc = (float *)(smem + o.sc + wi * o.warp);
	wp.wd = (uint16_t *)(smem + o.wd + wi * o.warp);
	wp.wst = smem + o.wst + wi * o.warp;
	wp.seg = smem + o.seg + wi * o.warp;
	wp.kv = smem + o.kv + wi * o.warp;
	for (i = lane; i < QR; i += 32) {
		ml[(wi * QR + i) * 2] = -INFINITY;
		ml[(wi * QR + i) * 2 + 1] = 0.0f;
	}
	if (p1 > p0)
		len = pg[p1 - 1].token_start + pg[p1 - 1].ntokens;
	kvmem_k_attend_ws(g, p.batch, p.parts, QR, p.total_pages, &mass_off,
			  &flags_off);
	if (p.mass)
		mass = (float *)(p.ws + mass_off);
	kvmem_k_crc_table(tab);
	kvmem_k_golay_lut(lut);
	kvmem_k_query_rows(&p, h, b, 1.0f, q);
	__syncthreads();
	kvmem_k_crc_slices(tab);
	__syncthreads();

#define KVMEM_K_Q4_RUN(codec, d)                                            \
	kvmem_k_q4_run<codec, d, QRM>(&p, first, last, h, len, q, qm, mass, \
				      tab, lut, &wp, ml, wt, w)
	if (g->l[0].codec == KVMEM_CODEC_H84) {
		if (D == 128)
			KVMEM_K_Q4_RUN(KVMEM_CODEC_H84, 128);
		else
			KVMEM_K_Q4_RUN(KVMEM_CODEC_H84, 64);
	} else if (g->l[0].codec == KVMEM_CODEC_GOLAY24) {
		if (D == 128)
			KVMEM_K_Q4_RUN(KVMEM_CODEC_GOLAY24, 128);
		else
			KVMEM_K_Q4_RUN(KVMEM_CODEC_GOLAY24, 64);
	} else if (g->l[0].codec == KVMEM_CODEC_SECDED72) {
		if (D == 128)
			KVMEM_K_Q4_RUN(KVMEM_CODEC_SECDED72, 128);
		else
			KVMEM_K_Q4_RUN(KVMEM_CODEC_SECDED72, 64);
	} else {
		if (D == 128)
			KVMEM_K_Q4_RUN(KVMEM_CODEC_H74, 128);
		else
			KVMEM_K_Q4_RUN(KVMEM_CODEC_H74, 64);
	}
#undef KVMEM_K_Q4_RUN
}

/*
 * Up to 4 query rows (decode with GQA up to 4) and up to 8: two kernels,
 * so that the narrow one keeps fewer registers live. Four CTAs of the
 * narrow one share a multiprocessor (128 registers, about 53 KiB of
 * shared memory each at head_dim 128), three of the wide one: the
 * registers of more would spill, and so would a K loop unrolled more
 * than twice.
 */
extern "C" __global__ void __launch_bounds__(KVMEM_K_THREADS, 4)
	kvmem_k_attend_q4(const struct kvmem_k_attend p)
{
	KVMEM_DYN_SMEM(smem);

	kvmem_k_attend_q4_body<4>(p, smem);
}

extern "C" __global__ void __launch_bounds__(KVMEM_K_THREADS, 3)
	kvmem_k_attend_q4w(const struct kvmem_k_attend p)
{
	KVMEM_DYN_SMEM(smem);

	kvmem_k_attend_q4_body<KVMEM_K_Q4_QR>(p, smem);
}
