/*
 * inject.c - deterministic bit-error injection (see kvmem/inject.h)
 *
 * BSC and burst starts use geometric skips: the number of untouched bits
 * before the next event is floor(log U / log(1 - p)) for U uniform in (0, 1],
 * so the cost follows the number of flips, not the size of the buffer.
 * Flips are made in increasing channel order, which lets the report group
 * them by word as they happen.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "kvmem/inject.h"
#include "internal.h"
#include "rng.h"

#define MAX_WORD_BYTES 64

struct injector {
	uint8_t *buf;
	const struct kvmem_inject_params *p;
	struct kvmem_inject_report *rep;
	uint64_t cur_word; /* word the pending flips belong to */
	uint32_t cur_flips;
};

static void flush_word(struct injector *in)
{
	struct kvmem_inject_report *rep = in->rep;

	if (!in->cur_flips || !rep)
		return;
	rep->words++;
	rep->by_flips[in->cur_flips < KVMEM_INJECT_HIST
			      ? in->cur_flips
			      : KVMEM_INJECT_HIST - 1]++;
	if (rep->hits && rep->hits_len < rep->hits_cap) {
		struct kvmem_inject_hit *h = &rep->hits[rep->hits_len++];

		h->word = in->cur_word;
		h->flips = in->cur_flips;
		h->resv = 0;
	}
	in->cur_flips = 0;
}

/* Flip channel bit @pos; calls must come in increasing word order. */
static void flip(struct injector *in, uint64_t pos)
{
	uint64_t w = pos / in->p->word_bits;
	uint32_t b = (uint32_t)(pos % in->p->word_bits);

	if (w != in->cur_word)
		flush_word(in);
	in->cur_word = w;
	in->cur_flips++;
	in->buf[w * in->p->word_bytes + b / 8] ^= (uint8_t)(1u << (b % 8));
	if (in->rep)
		in->rep->bits++;
}

/* Bits to skip before the next event of probability @p per bit. */
static uint64_t skip(struct kvmem_rng *r, double log1mp, uint64_t limit)
{
	double g;

	if (log1mp == -INFINITY)
		return 0;
	g = floor(log(kvmem_rng_unit(r)) / log1mp);
	return g >= (double)limit ? limit : (uint64_t)g;
}

static void inject_stream(struct injector *in, struct kvmem_rng *r,
			  uint64_t total, uint32_t len)
{
	const double p = in->p->ber;
	double log1mp = p >= 1.0 ? -INFINITY : log1p(-p);
	uint64_t pos = 0, i;

	if (p <= 0.0)
		return;
	for (;;) {
		pos += skip(r, log1mp, total);
		if (pos >= total)
			break;
		for (i = 0; i < len && pos < total; i++)
			flip(in, pos++);
	}
}

static void inject_exact(struct injector *in, struct kvmem_rng *r,
			 uint64_t nwords)
{
	const uint32_t bits = in->p->word_bits, k = in->p->k;
	uint16_t perm[MAX_WORD_BYTES * 8], chosen[MAX_WORD_BYTES * 8];
	uint64_t w;
	uint32_t i;

	for (w = 0; w < nwords; w++) {
		for (i = 0; i < bits; i++)
			perm[i] = (uint16_t)i;
		/* Partial Fisher-Yates: the first k entries are a uniform
		 * k-subset; flip them in increasing order. */
		for (i = 0; i < k; i++) {
			uint32_t j = i + (uint32_t)kvmem_rng_below(r, bits - i);
			uint16_t t = perm[i];

			perm[i] = perm[j];
			perm[j] = t;
		}
		memset(chosen, 0, bits * sizeof(chosen[0]));
		for (i = 0; i < k; i++)
			chosen[perm[i]] = 1;
		for (i = 0; i < bits; i++)
			if (chosen[i])
				flip(in, w * bits + i);
	}
}

int kvmem_inject_params_for_codec(struct kvmem_inject_params *params, int codec,
				  double ber, uint64_t seed)
{
	const struct kvmem_codec_info *ci = kvmem_codec_get(codec);

	if (!ci || !params)
		return -EINVAL;
	memset(params, 0, sizeof(*params));
	params->mode = KVMEM_INJECT_BSC;
	params->ber = ber;
	params->seed = seed;
	params->word_bits = ci->code_bits;
	params->word_bytes = ci->word_bytes;
	return 0;
}

static int params_valid(const struct kvmem_inject_params *p)
{
	if (p->word_bytes < 1 || p->word_bytes > MAX_WORD_BYTES ||
	    p->word_bits < 1 || p->word_bits > p->word_bytes * 8)
		return 0;
	switch (p->mode) {
	case KVMEM_INJECT_BSC:
		return p->ber >= 0.0 && p->ber <= 1.0;
	case KVMEM_INJECT_EXACT:
		return p->k >= 1 && p->k <= p->word_bits;
	case KVMEM_INJECT_BURST:
		return p->ber >= 0.0 && p->ber <= 1.0 && p->k >= 1;
	default:
		return 0;
	}
}

int kvmem_inject(void *buf, size_t nwords,
		 const struct kvmem_inject_params *params,
		 struct kvmem_inject_report *report)
{
	struct injector in = { .buf = buf, .p = params, .rep = report };
	struct kvmem_rng r;
	uint64_t total;

	if (!params || !params_valid(params) || (!buf && nwords))
		return -EINVAL;
	if (report) {
		report->bits = 0;
		report->words = 0;
		memset(report->by_flips, 0, sizeof(report->by_flips));
		report->hits_len = 0;
	}
	kvmem_rng_seed(&r, params->seed);
	total = (uint64_t)nwords * params->word_bits;
	switch (params->mode) {
	case KVMEM_INJECT_BSC:
		inject_stream(&in, &r, total, 1);
		break;
	case KVMEM_INJECT_BURST:
		inject_stream(&in, &r, total, params->k);
		break;
	default:
		inject_exact(&in, &r, nwords);
		break;
	}
	flush_word(&in);
	return 0;
}
