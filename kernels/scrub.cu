/* SPDX-License-Identifier: MIT */
/*
 * scrub.cu - patrol scrub and error injection on device pages
 *
 * kvmem_k_scrub is kvmem_page_scrub() for a batch of pages, one CTA each:
 * header, scales, checks and both payload blocks checked, corrections
 * stored with byte stores that only remove errors (so concurrent attention
 * is safe), then the checks held to the data they cover, and in a sealed
 * page the padding put back to zeros. kvmem_k_inject flips bits of a
 * buffer of codewords as a binary symmetric channel, one thread per word,
 * from a counter-based generator: the same seed gives the same flips
 * whatever the launch shape. kvmem_k_crc takes the CRC-32C of byte
 * ranges, one CTA a range: each thread a chunk of it, the chunks' CRC
 * registers then joined in order (the register of A then B is A's carried
 * over |B| zero bytes, a product by x^(8|B|) modulo the polynomial, plus
 * B's from zero), so kvmemd checks pages where they are.
 */
#include "page_dev.cuh"

/* Scrub words [0, nwords) of a region; returns the counts in @c. */
static __device__ __forceinline__ void
kvmem_k_scrub_words(uint8_t *base, unsigned int codec, unsigned int wbytes,
		    unsigned int nwords, struct kvmem_k_counts *c)
{
	unsigned int i;

	for (i = threadIdx.x; i < nwords; i += blockDim.x) {
		uint64_t lo, old_lo;
		unsigned int hi, old_hi;
		int st, nbits;

		kvmem_k_word_load(base + i * wbytes, codec, &lo, &hi);
		old_lo = lo;
		old_hi = hi;
		st = kvmem_k_word_correct(codec, &lo, &hi, &nbits);
		kvmem_k_count(c, st, nbits);
		if (st == KVMEM_K_FIXED)
			kvmem_k_word_patch(base + i * wbytes, codec, lo, hi,
					   old_lo, old_hi);
	}
}

/* Is byte @off of a page of @ntokens tokens padding (page.c: page_runs)? */
static __device__ __forceinline__ int
kvmem_k_is_pad(const struct kvmem_k_geom *g, const struct kvmem_k_layout *l,
	       unsigned int ntokens, unsigned int off)
{
	const unsigned int block =
		g->kv_heads * g->tokens_per_page * l->row_bytes;
	const unsigned int vbytes =
		(g->head_dim * l->bits + l->k - 1) / l->k * l->wbytes;
	/* A word past the last scale bit holds only padding. */
	const unsigned int svalue =
		((l->nscales_k + l->nscales_v) * 16 + 11) / 12 * 3;
	unsigned int rel;

	if (off < KVMEM_K_HDR_BYTES)
		return 0;
	if (off >= l->scales_off && off < l->scales_off + svalue)
		return 0;
	if (off >= l->checks_off && off < l->checks_off + l->nchecks * 6)
		/* The checks of rows past ntokens are padding too. */
		return !l->scale_words &&
		       (off - l->checks_off) / 6 % g->tokens_per_page >=
			       ntokens;
	if (off >= l->k_off && off < l->k_off + block)
		rel = off - l->k_off;
	else if (off >= l->v_off && off < l->v_off + block)
		rel = off - l->v_off;
	else
		return 1;
	return rel / l->row_bytes % g->tokens_per_page >= ntokens ||
	       rel % l->row_bytes >= vbytes;
}

/*
 * The checks of a page whose words are scrubbed (page.c: page_checks()):
 * each scale segment, or each row [0, ntokens) of a page without scales,
 * against its check; one that fails with its words good counts one
 * uncorrectable word more, in @cs for a segment, @cp for a row.
 */
static __device__ __forceinline__ void
kvmem_k_scrub_checks(const struct kvmem_k_geom *g,
		     const struct kvmem_k_layout *l, const uint8_t *page,
		     unsigned int ntokens, const uint32_t *tab,
		     struct kvmem_k_counts *cs, struct kvmem_k_counts *cp)
{
	unsigned int i;

	if (l->scale_words) {
		for (i = threadIdx.x; i < l->nchecks; i += blockDim.x)
			if (kvmem_k_segment(page, l, i, tab, NULL) ==
			    KVMEM_K_RUN_LOST)
				cs->ue++;
		return;
	}
	for (i = threadIdx.x; i < 2 * g->kv_heads * ntokens; i += blockDim.x) {
		const unsigned int hr = i % (g->kv_heads * ntokens);

		if (kvmem_k_row_run(g, l, page, i >= g->kv_heads * ntokens,
				    hr / ntokens, hr % ntokens,
				    tab) == KVMEM_K_RUN_LOST)
			cp->ue++;
	}
}

/* Sum a thread's counts into the CTA's (shared) ones. */
static __device__ __forceinline__ void
kvmem_k_counts_add(struct kvmem_ecc_counts *to, const struct kvmem_k_counts *c)
{
	if (c->clean)
		atomicAdd((unsigned long long *)&to->clean, c->clean);
	if (c->corrected)
		atomicAdd((unsigned long long *)&to->corrected, c->corrected);
	if (c->ue)
		atomicAdd((unsigned long long *)&to->uncorrectable, c->ue);
	if (c->bits)
		atomicAdd((unsigned long long *)&to->bits_corrected, c->bits);
}

extern "C" __global__ void KVMEM_K_BOUNDS
kvmem_k_scrub(const struct kvmem_k_scrub p)
{
	__shared__ struct kvmem_page_counts pc;
	__shared__ uint32_t crc_table[256];
	__shared__ int verdict; /* 0, -EBADMSG, -EINVAL; 1: walk */
	__shared__ unsigned int hot, ntokens, sealed;
	__shared__ union {
		struct kvmem_page_hdr h;
		uint8_t b[sizeof(struct kvmem_page_hdr)];
	} hd;
	const struct kvmem_k_geom *g = &p.g;
	const struct kvmem_k_page *pg =
		(const struct kvmem_k_page *)p.pages + blockIdx.x;
	uint8_t *page = (uint8_t *)pg->addr;
	struct kvmem_k_counts ch = {}, cs = {}, cp = {}, cc = {};
	const struct kvmem_k_layout *l;
	unsigned int i, block;

	kvmem_k_crc_table(crc_table);
	__syncthreads();
	if (threadIdx.x == 0) {
		struct kvmem_k_counts hc = { 0, 0, 0, 0 };
		int ue;

		for (i = 0; i < sizeof(pc) / 8; i++)
			((uint64_t *)&pc)[i] = 0;
		ue = kvmem_k_hdr_decode(page, hd.b, crc_table, &hc);
		hot = hd.h.flags & KVMEM_HDR_HOT ? 1 : 0;
		ntokens = hd.h.ntokens;
		sealed = hd.h.flags & KVMEM_HDR_SEALED ? 1 : 0;
		verdict = 1;
		if (ue) {
			/* Its kind, and so its layout, is unknown. */
			pc.header.clean = hc.clean;
			pc.header.corrected = hc.corrected;
			pc.header.uncorrectable = hc.ue;
			pc.header.bits_corrected = hc.bits;
			verdict = -EBADMSG;
		} else if ((p.kinds &&
			    (hot != (pg->flags & KVMEM_HDR_HOT ? 1u : 0u) ||
			     !sealed || ntokens != pg->ntokens)) ||
			   hd.h.magic != KVMEM_PAGE_MAGIC ||
			   hd.h.version != KVMEM_PAGE_VERSION ||
			   hd.h.geometry != g->digest || !hd.h.ntokens ||
			   hd.h.ntokens > g->tokens_per_page ||
			   hd.h.format != g->l[hot].format ||
			   hd.h.codec != g->l[hot].codec) {
			verdict = -EINVAL;
		}
	}
	__syncthreads();
	if (verdict != 1)
		goto out;

	l = &g->l[hot];
	block = g->kv_heads * g->tokens_per_page * l->row_words;
	kvmem_k_scrub_words(page, KVMEM_CODEC_GOLAY24, 3, KVMEM_K_HDR_WORDS,
			    &ch);
	kvmem_k_scrub_words(page + l->scales_off, KVMEM_CODEC_GOLAY24, 3,
			    l->scale_words, &cs);
	/* Check words count with what they check: the scales, or rows. */
	kvmem_k_scrub_words(page + l->checks_off, KVMEM_CODEC_GOLAY24, 3,
			    2 * l->nchecks, &cc);
	if (l->scale_words)
		kvmem_k_counts_sum(&cs, &cc);
	else
		kvmem_k_counts_sum(&cp, &cc);
	kvmem_k_scrub_words(page + l->k_off, l->codec, l->wbytes, block, &cp);
	kvmem_k_scrub_words(page + l->v_off, l->codec, l->wbytes, block, &cp);
	/* Every scrub store is done before the checks read the words, and
	 * they are read before padding is put back. */
	__syncthreads();
	kvmem_k_scrub_checks(g, l, page, ntokens, crc_table, &cs, &cp);
	kvmem_k_counts_add(&pc.header, &ch);
	kvmem_k_counts_add(&pc.scales, &cs);
	kvmem_k_counts_add(&pc.payload, &cp);
	__syncthreads();
	if (sealed)
		for (i = KVMEM_K_HDR_BYTES + threadIdx.x; i < l->size;
		     i += blockDim.x)
			if (page[i] && kvmem_k_is_pad(g, l, ntokens, i))
				page[i] = 0;
	__syncthreads();
	if (threadIdx.x == 0)
		verdict = pc.header.uncorrectable || pc.scales.uncorrectable ||
					  pc.payload.uncorrectable
				  ? -EBADMSG
				  : 0;
out:
	if (threadIdx.x == 0) {
		((struct kvmem_page_counts *)p.counts)[blockIdx.x] = pc;
		((int32_t *)p.status)[blockIdx.x] = verdict;
	}
}

extern "C" __global__ void KVMEM_K_BOUNDS
kvmem_k_crc(const struct kvmem_k_crc p)
{
	__shared__ uint32_t tab[256];
	__shared__ uint32_t part[KVMEM_K_THREADS];
	const uint64_t *rg = (const uint64_t *)p.ranges + 2 * blockIdx.x;
	const uint8_t *buf = (const uint8_t *)(p.base + rg[0]);
	const uint64_t len = rg[1];
	const uint64_t chunk = (len + blockDim.x - 1) / blockDim.x;
	uint64_t i = threadIdx.x * chunk, end = i + chunk, n;
	/* The first chunk starts from the CRC's initial register. */
	uint32_t reg = threadIdx.x ? 0 : 0xffffffffu, step;
	unsigned int t;

	kvmem_k_crc_table(tab);
	__syncthreads();
	for (end = end < len ? end : len; i < end; i++)
		reg = kvmem_k_crc_byte(tab, reg, buf[i]);
	part[threadIdx.x] = reg;
	__syncthreads();
	if (threadIdx.x)
		return;
	step = kvmem_k_crc_shift(chunk);
	for (t = 1; t < blockDim.x && t * chunk < len; t++) {
		n = len - t * chunk < chunk ? len - t * chunk : chunk;
		reg = kvmem_k_crc_mul(n == chunk ? step : kvmem_k_crc_shift(n),
				      reg) ^
		      part[t];
	}
	((uint32_t *)p.out)[blockIdx.x] = ~reg;
}

/* splitmix64's finaliser: a 64-bit draw from a counter. */
static __device__ __forceinline__ uint64_t kvmem_k_mix(uint64_t z)
{
	z = (z ^ z >> 30) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ z >> 27) * 0x94d049bb133111ebull;
	return z ^ z >> 31;
}

extern "C" __global__ void KVMEM_K_BOUNDS
kvmem_k_inject(const struct kvmem_k_inject p)
{
	const uint64_t w = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
	unsigned long long *rep = (unsigned long long *)p.report;
	uint8_t *word = (uint8_t *)p.buf + w * p.word_bytes;
	unsigned int b, flips = 0;

	if (w >= p.nwords)
		return;
	for (b = 0; b < p.word_bits; b++) {
		uint64_t ch = w * p.word_bits + b;

		if (kvmem_k_mix(p.seed + ch * 0x9e3779b97f4a7c15ull) <
		    p.threshold) {
			word[b / 8] ^= (uint8_t)(1u << (b % 8));
			flips++;
		}
	}
	if (p.flips)
		((uint8_t *)p.flips)[w] = (uint8_t)(flips < 255 ? flips : 255);
	if (!flips)
		return;
	atomicAdd(&rep[KVMEM_K_INJ_BITS], (unsigned long long)flips);
	atomicAdd(&rep[KVMEM_K_INJ_WORDS], 1ull);
	atomicAdd(&rep[KVMEM_K_INJ_HIST + (flips < KVMEM_INJECT_HIST
						   ? flips
						   : KVMEM_INJECT_HIST - 1)],
		  1ull);
}
