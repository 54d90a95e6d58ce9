/* SPDX-License-Identifier: MIT */
/*
 * ecc.c - bulk encode, decode and scrub over buffers of codewords
 *
 * The work is split between fast kernels (ecc_portable.c, ecc_avx2.c,
 * ecc_avx512.c) and the per-word functions of ecc_word.h. Clean data is the
 * common case: the kernels find the next word with a non-zero syndrome and
 * move data in bulk, and only those rare words go through the per-word
 * decoder here.
 */
#include <errno.h>
#include <string.h>

#include "ecc_word.h"
#include "internal.h"

static const struct kvmem_codec_info codecs[] = {
	[KVMEM_CODEC_H74] = {
		.name = "h74", .data_bits = 4, .code_bits = 7,
		.word_bytes = 1, .corrects = 1, .detects = 1,
	},
	[KVMEM_CODEC_H84] = {
		.name = "h84", .data_bits = 4, .code_bits = 8,
		.word_bytes = 1, .corrects = 1, .detects = 2,
	},
	[KVMEM_CODEC_GOLAY24] = {
		.name = "golay24", .data_bits = 12, .code_bits = 24,
		.word_bytes = 3, .corrects = 3, .detects = 4,
	},
	[KVMEM_CODEC_SECDED72] = {
		.name = "secded72", .data_bits = 64, .code_bits = 72,
		.word_bytes = 9, .corrects = 1, .detects = 2,
	},
};
_Static_assert(KVMEM_ARRAY_SIZE(codecs) == KVMEM_CODEC_NR,
	       "codec table must cover enum kvmem_codec");

static const struct kvmem__ecc_kernels *const impls[KVMEM__SIMD_NR] = {
	[KVMEM__SIMD_PORTABLE] = kvmem__ecc_portable,
	[KVMEM__SIMD_AVX2] = kvmem__ecc_avx2,
	[KVMEM__SIMD_AVX512] = kvmem__ecc_avx512,
};

/*
 * Words per chunk of decode: extract, then fix the dirty words, while the
 * chunk is still in L1. Even, so every chunk starts on a data byte.
 */
#define CHUNK_WORDS 2048

/* Largest word_bytes of any codec. */
#define MAX_WORD_BYTES 9

const struct kvmem_codec_info *kvmem_codec_get(int codec)
{
	if (codec < 0 || codec >= KVMEM_CODEC_NR)
		return NULL;
	return &codecs[codec];
}

int kvmem_codec_by_name(const char *name)
{
	int c;

	if (!name)
		return -EINVAL;
	for (c = 0; c < KVMEM_CODEC_NR; c++)
		if (!strcmp(name, codecs[c].name))
			return c;
	return -EINVAL;
}

size_t kvmem_ecc_data_bytes(int codec, size_t nwords)
{
	const struct kvmem_codec_info *ci = kvmem_codec_get(codec);

	if (!ci)
		return 0;
	return (nwords * ci->data_bits + 7) / 8;
}

size_t kvmem_ecc_code_bytes(int codec, size_t nwords)
{
	const struct kvmem_codec_info *ci = kvmem_codec_get(codec);

	return ci ? nwords * ci->word_bytes : 0;
}

const char *kvmem_ecc_impl(void)
{
	return kvmem__simd_name(kvmem__simd_active());
}

static int below(int level)
{
	return level ? level - 1 : 0;
}

/* The kernel @op of @codec on the active path, else the level below. */
#define KERNEL(codec, op) \
	(impls[kvmem__simd_active()][codec].op                   \
		 ?: impls[below(kvmem__simd_active())][codec].op \
		 ?: kvmem__ecc_portable[codec].op)

_Static_assert(KVMEM__SIMD_NR == 3, "KERNEL() looks two levels down");

size_t kvmem__ecc_scan(int codec, const uint8_t *code, size_t nwords)
{
	return KERNEL(codec, scan)(code, nwords);
}

/* Correct one codeword in a private buffer; bits fixed or KVMEM_WORD_UE. */
static int word_correct(int codec, uint8_t *w)
{
	uint32_t v, e;
	uint64_t d;
	int ret;

	switch (codec) {
	case KVMEM_CODEC_H74:
		return kvmem_h74_correct(w);
	case KVMEM_CODEC_H84:
		return kvmem_h84_correct(w);
	case KVMEM_CODEC_GOLAY24:
		v = w[0] | (uint32_t)w[1] << 8 | (uint32_t)w[2] << 16;
		e = kvmem__ecc_tables()->golay_error[kvmem_golay24_syndrome(v)];
		if (e == 0xffffffffu)
			return KVMEM_WORD_UE;
		v ^= e;
		w[0] = (uint8_t)v;
		w[1] = (uint8_t)(v >> 8);
		w[2] = (uint8_t)(v >> 16);
		return __builtin_popcount(e);
	default:
		memcpy(&d, w, 8);
		ret = kvmem_secded72_correct(&d, &w[8]);
		memcpy(w, &d, 8);
		return ret;
	}
}

/* Write the data bits of codeword @w (word @idx) into the bitstream. */
static void word_put_data(int codec, uint8_t *data, size_t idx,
			  const uint8_t *w)
{
	uint8_t *p;

	switch (codec) {
	case KVMEM_CODEC_H74:
	case KVMEM_CODEC_H84:
		p = data + idx / 2;
		if (idx & 1)
			*p = (uint8_t)((*p & 0x0f) | w[0] << 4);
		else
			*p = (uint8_t)((*p & 0xf0) | (w[0] & 0x0f));
		break;
	case KVMEM_CODEC_GOLAY24:
		p = data + idx / 2 * 3;
		if (idx & 1) {
			p[1] = (uint8_t)((p[1] & 0x0f) | w[0] << 4);
			p[2] = (uint8_t)(w[0] >> 4 | w[1] << 4);
		} else {
			p[0] = w[0];
			p[1] = (uint8_t)((p[1] & 0xf0) | (w[1] & 0x0f));
		}
		break;
	default:
		memcpy(data + idx * 8, w, 8);
		break;
	}
}

struct walk {
	struct kvmem_ecc_counts c;
	uint8_t *status;
	uint64_t *erasures;
	size_t *ue_pos;
	size_t ue_cap;
};

static void walk_init(struct walk *wk, size_t nwords, uint8_t *status,
		      uint64_t *erasures)
{
	memset(wk, 0, sizeof(*wk));
	wk->status = status;
	wk->erasures = erasures;
	if (status)
		memset(status, KVMEM_ECC_CLEAN, nwords);
	if (erasures)
		memset(erasures, 0, (nwords + 63) / 64 * sizeof(*erasures));
}

static void walk_note(struct walk *wk, size_t idx, int ret)
{
	if (ret == KVMEM_WORD_UE) {
		if (wk->ue_pos && wk->c.uncorrectable < wk->ue_cap)
			wk->ue_pos[wk->c.uncorrectable] = idx;
		wk->c.uncorrectable++;
		if (wk->status)
			wk->status[idx] = KVMEM_ECC_UNCORRECTABLE;
		if (wk->erasures)
			wk->erasures[idx / 64] |= 1ull << (idx % 64);
	} else if (ret > 0) {
		wk->c.corrected++;
		wk->c.bits_corrected += (uint64_t)ret;
		if (wk->status)
			wk->status[idx] = KVMEM_ECC_CORRECTED;
	}
}

static int walk_done(struct walk *wk, size_t nwords,
		     struct kvmem_ecc_counts *counts)
{
	wk->c.clean = nwords - wk->c.corrected - wk->c.uncorrectable;
	if (counts)
		*counts = wk->c;
	return wk->c.uncorrectable ? -EBADMSG : 0;
}

int kvmem_ecc_encode(int codec, const void *data, void *code, size_t nwords)
{
	if (!kvmem_codec_get(codec) || ((!data || !code) && nwords))
		return -EINVAL;
	if (nwords)
		KERNEL(codec, encode)(data, code, nwords);
	return 0;
}

int kvmem_ecc_decode(int codec, const void *code, void *data, size_t nwords,
		     struct kvmem_ecc_counts *counts, uint8_t *status,
		     uint64_t *erasures)
{
	const struct kvmem_codec_info *ci = kvmem_codec_get(codec);
	size_t (*scan)(const uint8_t *, size_t);
	void (*extract)(const uint8_t *, uint8_t *, size_t);
	const uint8_t *cp = code;
	uint8_t *dp = data;
	uint8_t w[MAX_WORD_BYTES];
	struct walk wk;
	size_t base, m, j;

	if (!ci || ((!code || !data) && nwords))
		return -EINVAL;
	scan = KERNEL(codec, scan);
	extract = KERNEL(codec, extract);
	walk_init(&wk, nwords, status, erasures);
	for (base = 0; base < nwords; base += m) {
		const uint8_t *chunk = cp + base * ci->word_bytes;

		m = nwords - base < CHUNK_WORDS ? nwords - base : CHUNK_WORDS;
		extract(chunk, dp + base * ci->data_bits / 8, m);
		for (j = scan(chunk, m); j < m;) {
			int ret;

			memcpy(w, chunk + j * ci->word_bytes, ci->word_bytes);
			ret = word_correct(codec, w);
			/* Uncorrectable: the data bits as received, already
			 * extracted. */
			if (ret > 0)
				word_put_data(codec, dp, base + j, w);
			walk_note(&wk, base + j, ret);
			j++;
			j += scan(chunk + j * ci->word_bytes, m - j);
		}
	}
	return walk_done(&wk, nwords, counts);
}

int kvmem_ecc_scrub(int codec, void *code, size_t nwords,
		    struct kvmem_ecc_counts *counts, size_t *ue_pos,
		    size_t ue_cap)
{
	const struct kvmem_codec_info *ci = kvmem_codec_get(codec);
	size_t (*scan)(const uint8_t *, size_t);
	uint8_t *cp = code;
	uint8_t w[MAX_WORD_BYTES];
	struct walk wk;
	size_t j;

	if (!ci || (!code && nwords))
		return -EINVAL;
	scan = KERNEL(codec, scan);
	walk_init(&wk, nwords, NULL, NULL);
	wk.ue_pos = ue_pos;
	wk.ue_cap = ue_cap;
	for (j = scan(cp, nwords); j < nwords;) {
		volatile uint8_t *dst = cp + j * ci->word_bytes;
		unsigned int b;
		int ret;

		memcpy(w, cp + j * ci->word_bytes, ci->word_bytes);
		ret = word_correct(codec, w);
		if (ret > 0)
			for (b = 0; b < ci->word_bytes; b++)
				if (dst[b] != w[b])
					dst[b] = w[b];
		walk_note(&wk, j, ret);
		j++;
		j += scan(cp + j * ci->word_bytes, nwords - j);
	}
	return walk_done(&wk, nwords, counts);
}
