/* SPDX-License-Identifier: MIT */
/*
 * inject.c - error injection into sealed pages (scrub.allow_inject):
 * kvmemctl inject's channel over every page a target covers, each region
 * of a page (header, scales and checks, K, V) with its codec's layout and
 * a seed of its own from the caller's, so that a run is repeated exactly.
 * A page on a GPU the daemon cannot read takes its flips in a copy, copied
 * back, and in the copy a scrub pass may hold of it; a pass checking the
 * page walks it again (ras_page_written()).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvmem/inject.h"
#include "json.h"
#include "kvmemd.h"
#include "session.h"

#include "ras.h"

struct inject_sum {
	uint64_t pages;
	struct kvmem_inject_report c[KVMEM_CODEC_NR];
};

/* One seed per region of a page, all from the caller's. */
static uint64_t mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/*
 * @chan: the channel's mode and k (kvmem_inject_parse()); each region
 * gets its codec's layout and its own seed.
 */
static int inject_slot(struct kvmemd_session *s, uint32_t u, double ber,
		       uint64_t seed, int all,
		       const struct kvmem_inject_params *chan,
		       struct inject_sum *sum)
{
	const int dry = !sum; /* only check the parameters */
	const size_t size = slot_bytes(s, s->arena.slots[u].kind);
	const struct kvmemd_pool_ops *gpu = s->d->gpu.ops;
	struct region_def rg[4];
	struct kvmem_inject_params ip;
	struct kvmem_inject_report rep;
	uint8_t *copy = NULL, *page = NULL;
	size_t i, b;
	int ret = 0;

	/* On a GPU the daemon cannot read: flipped in a copy, copied back;
	 * the bytes as they were kept after it, for a pass's copy. */
	if (!dry && !session_page_readable(s, u)) {
		copy = malloc(2 * size);
		if (!copy)
			return -ENOMEM;
		if (kvmemd_pool_copy_wait(gpu, &s->gpu, session_gpu_off(s, u),
					  copy, size, 0)) {
			free(copy);
			return -EIO;
		}
		memcpy(copy + size, copy, size);
	}
	if (!dry)
		page = copy ? copy : session_page(s, u);
	ras_slot_regions(s, &s->arena.slots[u], rg);
	for (i = all ? 0 : 2; !ret && i < ARRAY_SIZE(rg); i++) {
		uint64_t rs = mix(seed ^ mix(((uint64_t)s->id << 40) ^
					     ((uint64_t)u << 2) ^ i));

		ret = kvmem_inject_params_for_codec(&ip, rg[i].codec, ber, rs);
		if (ret)
			break;
		ip.mode = chan->mode;
		ip.k = chan->k;
		if (dry) {
			ret = kvmem_inject(NULL, 0, &ip, NULL);
			continue;
		}
		memset(&rep, 0, sizeof(rep));
		ret = kvmem_inject(page + rg[i].off, rg[i].nwords, &ip, &rep);
		if (ret)
			break;
		sum->c[rg[i].codec].bits += rep.bits;
		sum->c[rg[i].codec].words += rep.words;
		for (b = 0; b < KVMEM_INJECT_HIST; b++)
			sum->c[rg[i].codec].by_flips[b] += rep.by_flips[b];
	}
	if (copy && !ret &&
	    kvmemd_pool_copy_wait(gpu, &s->gpu, session_gpu_off(s, u), copy,
				  size, 1))
		ret = -EIO;
	/* In place, flips made before a failure stay: the check sees them. */
	if (!dry && (!copy || !ret))
		ras_page_written(s->d, s, u, copy ? copy + size : NULL, copy,
				 size);
	free(copy);
	if (!dry && !ret)
		sum->pages++;
	return ret;
}

static void flips_json(struct jw *w, const struct kvmem_inject_report *rep)
{
	size_t b;

	jw_u64(w, "words", rep->words);
	jw_u64(w, "bits", rep->bits);
	jw_open(w, "by_flips", '[');
	for (b = 0; b < KVMEM_INJECT_HIST; b++)
		jw_u64(w, NULL, b ? rep->by_flips[b] : 0);
	jw_close(w, ']');
}

/* inject_slot() on every page of @t; @sum NULL: a dry run. */
static int inject_walk(struct kvmemd *d, const struct kvmemd_target *t,
		       const struct kvmemd_inject *in, struct inject_sum *sum)
{
	const double ber = in->ber;
	const uint64_t seed = in->seed;
	const int all = in->all;
	const struct kvmem_inject_params *chan = &in->chan;
	struct kvmemd_session *s;
	uint32_t u;
	int ret;

	for (s = d->sessions; s; s = s->next) {
		struct seq *q;

		if (t->type != KVMEMD_TARGET_POOL && s->id != t->session)
			continue;
		if (t->type == KVMEMD_TARGET_SEQ) {
			q = session_seq(s, t->seq);
			for (u = 0; q && u < q->n; u++) {
				const struct page *pg =
					&s->arena.pages[q->pages[u]];

				if (pg->state != PAGE_RESIDENT &&
				    pg->state != PAGE_WRITING)
					continue;
				ret = inject_slot(s, pg->unit, ber, seed, all,
						  chan, sum);
				if (ret)
					return ret;
			}
			continue;
		}
		for (u = session_walk_next(s, 0); u < session_walk_end(s);
		     u = session_walk_next(s, u)) {
			struct slot *sl = &s->arena.slots[u];

			if (sl->state == SLOT_SEALED) {
				ret = inject_slot(s, u, ber, seed, all, chan,
						  sum);
				if (ret)
					return ret;
			}
			u += sl->state == SLOT_NONE
				     ? 1
				     : s->arena.slot_units[sl->kind];
		}
	}
	return 0;
}

int kvmemd_ras_inject(struct kvmemd *d, const struct kvmemd_target *t,
		      const struct kvmemd_inject *in, struct jw *w)
{
	struct inject_sum sum = { 0 };
	struct kvmem_inject_report total = { 0 };
	int i, n, ret;

	/* Every page the target covers takes the channel, or none does:
	 * a K too large for one of their codecs is refused up front. */
	ret = inject_walk(d, t, in, NULL);
	if (!ret)
		ret = inject_walk(d, t, in, &sum);
	if (ret)
		return ret;
	jw_open(w, NULL, '{');
	jw_u64(w, "pages", sum.pages);
	for (i = 0; i < KVMEM_CODEC_NR; i++) {
		total.words += sum.c[i].words;
		total.bits += sum.c[i].bits;
		for (n = 0; n < KVMEM_INJECT_HIST; n++)
			total.by_flips[n] += sum.c[i].by_flips[n];
	}
	flips_json(w, &total);
	jw_open(w, "codecs", '[');
	for (i = 0; i < KVMEM_CODEC_NR; i++) {
		if (!sum.c[i].words)
			continue;
		jw_open(w, NULL, '{');
		jw_str(w, "codec", ras_codec_name(i));
		flips_json(w, &sum.c[i]);
		jw_close(w, '}');
	}
	jw_close(w, ']');
	jw_close(w, '}');
	jw_end(w);
	kvmemd_log(LOG_WARNING,
		   "injected %llu bit errors into %llu pages (channel %s, ber "
		   "%g, seed %llu)",
		   (unsigned long long)total.bits,
		   (unsigned long long)sum.pages, in->spec, in->ber,
		   (unsigned long long)in->seed);
	return 0;
}
