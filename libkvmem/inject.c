/* SPDX-License-Identifier: MIT */
/*
 * inject.c - deterministic bit-error injection (see kvmem/inject.h)
 *
 * BSC and burst starts use geometric skips: the number of untouched bits
 * before the next event is floor(log U / log(1 - p)) for U uniform in (0, 1],
 * so the cost follows the number of flips, not the size of the buffer.
 * Flips are made in increasing channel order, which lets the report group
 * them by word as they happen. The physical channels walk stored bytes
 * (or lines, or columns) the same way; a stuck column is drawn once per
 * buffer and replayed for every row from a copy of the generator, so it
 * needs no memory however wide the rows are.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
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

/* log(1 - @p), what skip() takes: -inf when every unit has an event. */
static double log_clean(double p)
{
	return p >= 1.0 ? -INFINITY : log1p(-p);
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
	double log1mp = log_clean(p);
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

/* Live bits of stored byte @j of a word (0 for a byte of padding). */
static uint32_t live_bits(const struct kvmem_inject_params *p, uint64_t j)
{
	uint64_t first = j * 8;

	if (first >= p->word_bits)
		return 0;
	return p->word_bits - first >= 8 ? 8 : p->word_bits - (uint32_t)first;
}

/* Flip the bits of @mask (live ones only) in stored byte @at. */
static void flip_byte(struct injector *in, uint64_t at, uint32_t mask)
{
	const struct kvmem_inject_params *p = in->p;
	uint64_t w = at / p->word_bytes, j = at % p->word_bytes;
	uint32_t i;

	mask &= (1u << live_bits(p, j)) - 1;
	for (i = 0; i < 8; i++)
		if (mask & 1u << i)
			flip(in, w * p->word_bits + j * 8 + i);
}

/* A mask of @k distinct random bits among the low @n. */
static uint32_t random_bits(struct kvmem_rng *r, uint32_t n, uint32_t k)
{
	uint8_t perm[8];
	uint32_t i, mask = 0;

	for (i = 0; i < n; i++)
		perm[i] = (uint8_t)i;
	for (i = 0; i < k && i < n; i++) {
		uint32_t j = i + (uint32_t)kvmem_rng_below(r, n - i);
		uint8_t t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
		mask |= 1u << perm[i];
	}
	return mask;
}

/* BYTE and ADJACENT: events at stored bytes, @span bytes each. */
static void inject_bytes(struct injector *in, struct kvmem_rng *r,
			 uint64_t total, uint32_t span, uint32_t per_byte)
{
	const double p = in->p->ber;
	double log1mp = log_clean(p);
	uint64_t at = 0, i;

	if (p <= 0.0)
		return;
	for (;;) {
		at += skip(r, log1mp, total);
		if (at >= total)
			break;
		for (i = 0; i < span && at < total; i++, at++) {
			uint32_t n = live_bits(in->p, at % in->p->word_bytes);

			flip_byte(in, at, random_bits(r, n, per_byte));
		}
	}
}

/* LINE: garble whole lines of @line bytes. */
static void inject_lines(struct injector *in, struct kvmem_rng *r,
			 uint64_t total, uint32_t line)
{
	const double p = in->p->ber;
	double log1mp = log_clean(p);
	uint64_t lines = (total + line - 1) / line, l = 0, at, end;

	if (p <= 0.0)
		return;
	for (;;) {
		l += skip(r, log1mp, lines);
		if (l >= lines)
			break;
		end = (l + 1) * line < total ? (l + 1) * line : total;
		for (at = l * line; at < end; at++)
			flip_byte(in, at, (uint32_t)(kvmem_rng_next(r) >> 56));
		l++;
	}
}

/* COLUMN: bit columns of rows of @row bytes stuck at 0 or 1. */
static void inject_columns(struct injector *in, struct kvmem_rng *r,
			   uint64_t total, uint32_t row)
{
	const double p = in->p->ber;
	double log1mp = log_clean(p);
	const uint64_t cols = (uint64_t)row * 8;
	uint64_t base, c, at;
	struct kvmem_rng replay;
	uint32_t bit, stuck;

	if (p <= 0.0)
		return;
	for (base = 0; base < total; base += row) {
		replay = *r;
		for (c = 0;; c++) {
			c += skip(&replay, log1mp, cols);
			if (c >= cols)
				break;
			stuck = (uint32_t)(kvmem_rng_next(&replay) >> 63);
			at = base + c / 8;
			if (at >= total)
				break;
			bit = (uint32_t)(c % 8);
			if ((in->buf[at] >> bit & 1u) != stuck)
				flip_byte(in, at, 1u << bit);
		}
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

int kvmem_inject_parse(struct kvmem_inject_params *params, const char *spec)
{
	static const struct {
		const char *name;
		uint32_t mode, k; /* k: 0 when the spec must give it */
	} names[] = {
		{ "bsc", KVMEM_INJECT_BSC, 1 },
		{ "exact", KVMEM_INJECT_EXACT, 0 },
		{ "burst", KVMEM_INJECT_BURST, 0 },
		{ "byte", KVMEM_INJECT_BYTE, 0 },
		{ "adjacent", KVMEM_INJECT_ADJACENT, 0 },
		{ "line", KVMEM_INJECT_LINE, 64 },
		{ "column", KVMEM_INJECT_COLUMN, 0 },
	};
	const char *colon;
	unsigned long long k;
	size_t i, n;
	char *end;

	if (!params || !spec)
		return -EINVAL;
	colon = strchr(spec, ':');
	n = colon ? (size_t)(colon - spec) : strlen(spec);
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strlen(names[i].name) == n &&
		    !memcmp(names[i].name, spec, n))
			break;
	if (i == sizeof(names) / sizeof(names[0]))
		return -EINVAL;
	k = names[i].k;
	if (colon) {
		if (names[i].mode == KVMEM_INJECT_BSC || colon[1] < '0' ||
		    colon[1] > '9')
			return -EINVAL;
		errno = 0;
		k = strtoull(colon + 1, &end, 10);
		if (errno || *end || k > UINT32_MAX)
			return -EINVAL;
	}
	if (!k || (names[i].mode == KVMEM_INJECT_BYTE && k > 8))
		return -EINVAL;
	params->mode = names[i].mode;
	params->k = (uint32_t)k;
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
	case KVMEM_INJECT_ADJACENT:
	case KVMEM_INJECT_LINE:
	case KVMEM_INJECT_COLUMN:
		return p->ber >= 0.0 && p->ber <= 1.0 && p->k >= 1;
	case KVMEM_INJECT_BYTE:
		return p->ber >= 0.0 && p->ber <= 1.0 && p->k >= 1 && p->k <= 8;
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
	uint64_t total, bytes;

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
	bytes = (uint64_t)nwords * params->word_bytes;
	switch (params->mode) {
	case KVMEM_INJECT_BSC:
		inject_stream(&in, &r, total, 1);
		break;
	case KVMEM_INJECT_BURST:
		inject_stream(&in, &r, total, params->k);
		break;
	case KVMEM_INJECT_EXACT:
		inject_exact(&in, &r, nwords);
		break;
	case KVMEM_INJECT_BYTE:
		inject_bytes(&in, &r, bytes, 1, params->k);
		break;
	case KVMEM_INJECT_ADJACENT:
		inject_bytes(&in, &r, bytes, params->k, 1);
		break;
	case KVMEM_INJECT_LINE:
		inject_lines(&in, &r, bytes, params->k);
		break;
	default:
		inject_columns(&in, &r, bytes, params->k);
		break;
	}
	flush_word(&in);
	return 0;
}
