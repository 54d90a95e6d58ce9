/* SPDX-License-Identifier: MIT */
/*
 * patrol.c - the scrubber's passes: the patrol over every sealed page at
 * its rate (a token bucket), the on-demand pass an admin asks for, the
 * checks of pages just sealed, and the patrol's rate adapting to
 * scrub.target_ue_per_day
 *
 * A pass walks every sealed slot of every session in a fixed order
 * (sessions by id, slots by unit), then the copies of published
 * prefixes, and checks each page with ras.c's page check, in bounded
 * steps on the event loop: the slot table cannot change under it and a
 * freed slot is never written to.
 *
 * With scrub.target_ue_per_day set, the end of each patrol pass also sets
 * the patrol's rate: the words it corrected predict how many would turn
 * uncorrectable a day at each cycle, and the patrol runs at the slowest
 * doubling of its configured rate that keeps that under the target, within
 * scrub.rate_max (adapt_pass()).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "json.h"
#include "kvmemd.h"
#include "prefix.h"
#include "ras.h"
#include "session.h"

static struct kvmemd_session *session_from(const struct kvmemd *d, uint32_t id)
{
	struct kvmemd_session *s;

	for (s = d->sessions; s && s->id < id; s = s->next)
		;
	return s;
}

static enum kvmemd_prefix_walk pass_walk(const struct pass *p)
{
	return p->kind == SRC_PATROL ? KVMEMD_PREFIX_PATROL
				     : KVMEMD_PREFIX_ONDEMAND;
}

static void pass_start(struct kvmemd *d, struct pass *p, enum source kind,
		       const struct kvmemd_target *t)
{
	memset(p, 0, sizeof(*p));
	p->active = 1;
	p->kind = kind;
	p->t = *t;
	p->session = t->type == KVMEMD_TARGET_POOL ? 0 : t->session;
	p->started_ns = ras_clock_ns(CLOCK_REALTIME);
	p->started_mono = kvmemd_now_ns();
	kvmemd_prefix_rewind(d, pass_walk(p));
}

/*
 * A pool pass ends with the copies of published prefixes (kept in
 * kvmemd's memory: pool host, tier warm), about @budget bytes of them a
 * call. Return: 1 when the pass is through.
 */
static int prefix_step(struct kvmemd *d, struct pass *p, uint64_t budget)
{
	struct kvmemd_ras *r = d->ras;
	struct kvmemd_prefix_scrub f = { 0 };
	struct ras_count *vol, *agg;
	int done, c;

	done = kvmemd_prefix_scrub(d, pass_walk(p), &budget, &f);
	p->pages += f.pages;
	p->bytes += f.bytes;
	p->crc += f.crc;
	p->prefix_pages += f.pages;
	p->prefix_dropped += f.dropped;
	r->crc += f.crc;
	for (c = 0; c < KVMEM_CODEC_NR; c++) {
		vol = &r->vol[KVMEMD_POOL_HOST][TIER_WARM][c];
		agg = &r->agg[KVMEMD_POOL_HOST][TIER_WARM][c];
		p->words[c] += f.words[c];
		p->ce_words[c] += f.ce[c];
		p->ce += f.ce[c];
		p->ue += f.ue[c];
		vol->ce += f.ce[c];
		vol->ue += f.ue[c];
		agg->ce += f.ce[c];
		agg->ue += f.ue[c];
		r->agg_dirty |= f.ce[c] || f.ue[c];
	}
	return done;
}

/*
 * Scrub about @budget bytes of work of @p from its cursor on, a page at a
 * time (a page may take several calls). Return: 1 when the pass is
 * complete, 0 when it stopped at the budget.
 */
static int pass_step(struct kvmemd *d, struct pass *p, uint64_t budget)
{
	unsigned int visits = 0;
	struct kvmemd_session *s;
	struct seq *q;
	struct slot *sl;

	for (;;) {
		s = session_from(d, p->session);
		if (!s)
			return p->t.type != KVMEMD_TARGET_POOL ||
			       prefix_step(d, p, budget);
		if (p->t.type != KVMEMD_TARGET_POOL && s->id != p->t.session)
			return 1;
		if (s->id != p->session) {
			/* The session under the cursor is gone. */
			p->session = s->id;
			p->pos = 0;
			p->in_job = 0;
		}
		if (p->t.type == KVMEMD_TARGET_SEQ) {
			q = session_seq(s, p->t.seq);
			if (!q)
				return 1;
			for (; p->pos < q->n; p->pos++) {
				const struct page *pg =
					&s->arena.pages[q->pages[p->pos]];

				/* Pages on the store are checked when they
				 * come back. */
				if (!p->in_job && (pg->state == PAGE_RESIDENT ||
						   pg->state == PAGE_WRITING)) {
					ras_check_start(s, &p->job, pg->unit,
							p->kind);
					p->in_job = 1;
				}
				if (p->in_job &&
				    !ras_check_step(d, s, &p->job, p, &budget))
					return 0;
				p->in_job = 0;
			}
			return 1;
		}
		for (p->pos = session_walk_next(s, p->pos);
		     p->pos < session_walk_end(s);
		     p->pos = session_walk_next(s, p->pos)) {
			sl = &s->arena.slots[p->pos];
			if (!p->in_job && sl->state == SLOT_SEALED) {
				ras_check_start(s, &p->job, p->pos, p->kind);
				p->in_job = 1;
			}
			if (p->in_job &&
			    !ras_check_step(d, s, &p->job, p, &budget))
				return 0;
			p->in_job = 0;
			p->pos += sl->state == SLOT_NONE
					  ? 1
					  : s->arena.slot_units[sl->kind];
			if (!budget || ++visits >= STEP_UNITS)
				return 0;
		}
		p->session = s->id + 1;
		p->pos = 0;
	}
}

static void pass_end(struct kvmemd *d, struct pass *p)
{
	struct kvmemd_ras *r = d->ras;
	uint64_t now;

	p->active = 0;
	/* A patrol with nothing to do is not a pass. */
	if (p->kind == SRC_PATROL && !p->pages)
		return;
	p->duration = ras_secs(kvmemd_now_ns() - p->started_mono);
	r->passes++;
	r->bytes_total += p->bytes;
	r->pages_total += p->pages;
	r->last = *p;
	now = kvmemd_now_ns();
	if (now - r->saved_mono >= MINUTE_NS)
		ras_save_counters(d);
	if ((p->ce || p->ue || p->crc) &&
	    (p->kind != SRC_PATROL || now - r->summary_mono >= MINUTE_NS)) {
		r->summary_mono = now;
		kvmemd_log(LOG_NOTICE,
			   "scrub %s pass: %llu pages, %llu KiB in %.3f s; "
			   "%llu corrected, %llu uncorrectable words, %llu "
			   "CRC mismatches",
			   ras_source_names[p->kind],
			   (unsigned long long)p->pages,
			   (unsigned long long)(p->bytes >> 10), p->duration,
			   (unsigned long long)p->ce, (unsigned long long)p->ue,
			   (unsigned long long)p->crc);
	}
}

/* What a pool pass reads: sealed pages, and the copies of published
 * prefixes. */
static uint64_t sealed_bytes(const struct kvmemd *d)
{
	const struct kvmemd_session *s;
	uint64_t n = kvmemd_prefix_bytes(d);

	for (s = d->sessions; s; s = s->next)
		n += s->arena.sealed_bytes + s->arena.gpu_used_bytes;
	return n;
}

/* Bytes per second the configuration asks for: the rate, or the cycle's. */
static double base_rate(const struct kvmemd *d)
{
	double rate;

	if (!d->cfg.scrub_cycle)
		return (double)d->cfg.scrub_rate;
	rate = (double)sealed_bytes(d) / d->cfg.scrub_cycle;
	return rate < KVMEM_SLOT_UNIT ? KVMEM_SLOT_UNIT : rate;
}

/* Doublings of the base rate scrub.rate_max leaves room for. */
static unsigned int adapt_max(const struct kvmemd *d)
{
	double base = base_rate(d);
	unsigned int k = 0;

	if (!d->cfg.scrub_target_ue || base <= 0)
		return 0;
	while (k < ADAPT_LEVEL_MAX &&
	       base * (double)(2u << k) <= (double)d->cfg.scrub_rate_max)
		k++;
	return k;
}

/* The level the patrol runs at: the last decision's, within the budget
 * the configuration leaves now. */
static unsigned int adapt_level(const struct kvmemd *d)
{
	unsigned int max = adapt_max(d);

	return d->ras->adapt.level < max ? d->ras->adapt.level : max;
}

/* Bytes per second the patrol runs at. */
static double patrol_rate(const struct kvmemd *d)
{
	return base_rate(d) * (double)(1u << adapt_level(d));
}

/*
 * Uncorrectable words a day if every word of the patrol pass @p were
 * checked every @cycle seconds. The pass saw flips arrive at x / T per
 * word (x the share of its words it corrected, T its exposure), so a word
 * collects more than its code's t of them in a cycle with probability about
 * (x cycle / T)^(t+1) / (t+1)!, the first term of the Poisson tail (at
 * most 1).
 */
static double ue_per_day(const struct pass *p, double cycle)
{
	const struct kvmem_codec_info *ci;
	double x, n = 0;
	int c;

	if (p->exposure <= 0 || cycle <= 0)
		return 0;
	for (c = 0; c < KVMEM_CODEC_NR; c++) {
		if (!p->words[c])
			continue;
		ci = kvmem_codec_get(c);
		x = (double)p->ce_words[c] / (double)p->words[c] * cycle /
		    p->exposure;
		x = pow(x, ci->corrects + 1) / tgamma(ci->corrects + 2.0);
		/* A probability: where the first term passes 1, every word
		 * is lost. */
		n += (double)p->words[c] * (x < 1 ? x : 1);
	}
	return n * 86400.0 / cycle;
}

/* The journal's MESSAGE_ID of a step of the adaptive patrol. */
#define ADAPT_MESSAGE_ID "6bf28fe1adf0492cb9cea25ff4ef7a89"
#define ADAPT_WHAT "adaptive patrol messages"

/* To level @to: by a prediction of @ue_day at the old level's cycle, or
 * (@ue_day < 0) because the configuration no longer allows the old. */
static void adapt_step(struct kvmemd *d, unsigned int to, double ue_day,
		       double cycle)
{
	struct adapt *a = &d->ras->adapt;
	struct adapt_step *st = &a->step[a->nstep++ % ADAPT_STEPS];
	const unsigned int from = a->level;
	double target = d->cfg.scrub_target_ue;
	char fields[256];

	*st = (struct adapt_step){ ras_clock_ns(CLOCK_REALTIME), from, to,
				   ue_day < 0 ? 0 : ue_day, cycle };
	if (to > from)
		a->up++;
	else
		a->down++;
	a->level = to;
	snprintf(fields, sizeof(fields),
		 "MESSAGE_ID=%s\nKVMEM_EVENT=scrub-adapt\nLEVEL_FROM=%u\n"
		 "LEVEL_TO=%u\nUE_PER_DAY=%.6g\nTARGET_UE_PER_DAY=%.6g\n"
		 "CYCLE_S=%.6g\n",
		 ADAPT_MESSAGE_ID, from, to, st->ue_day, target, cycle);
	if (!kvmemd_rl(&a->log, KVMEMD_RL_WINDOW_NS, KVMEMD_RL_BURST,
		       ADAPT_WHAT))
		return;
	if (ue_day < 0)
		kvmemd_log_fields(LOG_NOTICE, fields,
				  "scrub: scrub.target_ue_per_day or "
				  "scrub.rate_max changed: the patrol now runs "
				  "at %ux its rate, a %.3g s cycle",
				  1u << to, cycle);
	else
		kvmemd_log_fields(to > from ? LOG_WARNING : LOG_NOTICE, fields,
				  "scrub: %.3g uncorrectable words a day "
				  "predicted at the patrol's %ux rate (target "
				  "%.3g): it now runs at %ux, a %.3g s cycle",
				  ue_day, 1u << from, target, 1u << to, cycle);
}

/*
 * The target or scrub.rate_max changed at run time: a level the budget no
 * longer allows (all of them, without a target) is left at once, as a
 * step, not at the end of the next pass.
 */
static void adapt_clamp(struct kvmemd *d)
{
	struct adapt *a = &d->ras->adapt;
	const unsigned int max = a->level ? adapt_max(d) : 0;
	double base;

	if (a->level <= max)
		return;
	base = base_rate(d);
	adapt_step(d, max, -1,
		   base > 0 ? (double)sealed_bytes(d) / base / (1u << max) : 0);
	a->from = max;
	a->ue_day = 0;
	a->short_of = 0;
}

/*
 * After patrol pass @p: run the patrol at the slowest of the rates 2^k
 * times the configured one (k up to what scrub.rate_max allows) at which
 * the prediction is within scrub.target_ue_per_day, stepping up at once;
 * step down one doubling a pass, and only once the prediction at the
 * slower rate is within half the target, so that a rate near a threshold
 * does not make the patrol swing.
 */
static void adapt_pass(struct kvmemd *d, const struct pass *p)
{
	struct adapt *a = &d->ras->adapt;
	double target = d->cfg.scrub_target_ue, base = base_rate(d), T0, u0, u;
	unsigned int max = adapt_max(d), to;
	char fields[256];
	int short_of;

	adapt_clamp(d);
	a->from = a->level;
	to = a->level;
	T0 = base > 0 ? (double)sealed_bytes(d) / base : 0;
	a->base_cycle = T0;
	if (!target || p->exposure <= 0 || base <= 0) {
		a->ue_day = 0;
		a->short_of = 0;
		return;
	}
	u = u0 = ue_per_day(p, T0 / (1u << to));
	if (u > target) {
		while (to < max && u > target)
			u = ue_per_day(p, T0 / (1u << ++to));
	} else if (to && ue_per_day(p, T0 / (1u << (to - 1))) <= target / 2) {
		u = ue_per_day(p, T0 / (1u << --to));
	}
	if (to != a->level)
		adapt_step(d, to, u0, T0 / (1u << to));
	a->ue_day = u;
	short_of = a->ue_day > target;
	a->escalations += short_of && !a->short_of;
	if (short_of != a->short_of && kvmemd_rl(&a->log, KVMEMD_RL_WINDOW_NS,
						 KVMEMD_RL_BURST, ADAPT_WHAT)) {
		snprintf(fields, sizeof(fields),
			 "MESSAGE_ID=%s\nKVMEM_EVENT=%s\nUE_PER_DAY=%.6g\n"
			 "TARGET_UE_PER_DAY=%.6g\n",
			 ADAPT_MESSAGE_ID,
			 short_of ? "archive-escalate" : "archive-relax",
			 a->ue_day, target);
		if (short_of)
			kvmemd_log_fields(
				LOG_WARNING, fields,
				"scrub: %.3g uncorrectable words a day "
				"predicted even at scrub.rate_max (a %.3g s "
				"cycle), over the target of %.3g: released "
				"pages go to the archive tier's codec at any "
				"age; raise scrub.rate_max, or use a stronger "
				"codec",
				a->ue_day, T0 / (1u << to), target);
		else
			kvmemd_log_fields(
				LOG_NOTICE, fields,
				"scrub: %.3g uncorrectable words a day "
				"predicted, within the target of %.3g again: "
				"pages go to the archive tier at "
				"tier.archive_tokens again",
				a->ue_day, target);
	}
	a->short_of = short_of;
}

int kvmemd_ras_short_of(const struct kvmemd *d)
{
	return d->ras && d->cfg.scrub_target_ue && d->ras->adapt.short_of;
}

static int patrol_on(const struct kvmemd *d)
{
	return d->ras->enabled && (d->cfg.scrub_rate || d->cfg.scrub_cycle);
}

static void answer(struct kvmemd *d, const struct pass *p);

/*
 * The checks of pages just sealed, STEP_BYTES of work a pass, the sessions
 * in turn from where the last pass stopped. Return: 1 when some remain.
 */
static int seal_checks(struct kvmemd *d)
{
	struct kvmemd_ras *r = d->ras;
	uint64_t budget = STEP_BYTES;
	struct kvmemd_session *s;
	int round, later, left = 0;

	for (round = 0; round < 2; round++)
		for (s = d->sessions; s; s = s->next) {
			later = s->id >= r->check_next;
			if (!s->checking || later != !round)
				continue;
			if (budget &&
			    kvmemd_ras_check_step(s, &s->seal_check, &budget)) {
				s->checking = 0;
				continue;
			}
			if (!left)
				r->check_next = s->id;
			left = 1;
		}
	return left;
}

/*
 * The mean time the words of patrol pass @p, just ended, had to collect
 * flips since @prev checked them: a word at share f of the way through
 * was checked at prev's start + f * prev's duration and now at p's start +
 * f * p's duration. Passes that follow a change of rate take more or less
 * time than the one before, which the time between their starts alone
 * would miss (and the patrol would swing a level up and down).
 */
static void pass_exposure(struct pass *p, const struct pass *prev)
{
	if (!prev->started_mono) {
		p->exposure = 0;
		return;
	}
	p->exposure = ras_secs(p->started_mono - prev->started_mono) +
		      (p->duration - prev->duration) / 2;
}

uint64_t kvmemd_ras_run(struct kvmemd *d, uint64_t now)
{
	static const struct kvmemd_target pool = { .type = KVMEMD_TARGET_POOL };
	struct kvmemd_ras *r = d->ras;
	uint64_t before, next = UINT64_MAX;
	double burst, spent;

	ras_users_flush(d);
	if (seal_checks(d))
		next = now;
	if (r->ondemand.active) {
		if (pass_step(d, &r->ondemand, 4 * STEP_BYTES)) {
			pass_end(d, &r->ondemand);
			answer(d, &r->ondemand);
		}
		return now;
	}
	if (!patrol_on(d)) {
		r->patrol.active = 0;
		r->tokens = 0;
		r->refill_mono = now;
		return next;
	}
	if (!r->patrol.active) {
		if (now < r->idle_until)
			return next < r->idle_until ? next : r->idle_until;
		pass_start(d, &r->patrol, SRC_PATROL, &pool);
	}
	/* Every time: the rate, the cycle or the sealed bytes may change. */
	adapt_clamp(d);
	if (r->adapt.log.missed)
		kvmemd_rl_flush(&r->adapt.log, KVMEMD_RL_WINDOW_NS, ADAPT_WHAT);
	r->rate = patrol_rate(d);
	burst = r->rate / 10 > STEP_BYTES ? r->rate / 10 : STEP_BYTES;
	if (r->tokens < -burst)
		r->tokens = -burst;
	r->tokens += r->rate * ras_secs(now - r->refill_mono);
	if (r->tokens > burst)
		r->tokens = burst;
	r->refill_mono = now;
	if (r->tokens > 0) {
		before = r->patrol.bytes;
		if (pass_step(d, &r->patrol,
			      r->tokens < STEP_BYTES ? (uint64_t)r->tokens + 1
						     : STEP_BYTES)) {
			pass_end(d, &r->patrol);
			if (r->patrol.pages) {
				pass_exposure(&r->patrol, &r->last_patrol);
				r->last_patrol = r->patrol;
				adapt_pass(d, &r->patrol);
			} else
				r->idle_until = now + IDLE_NS;
		}
		spent = (double)(r->patrol.bytes - before);
		r->tokens -= spent;
	}
	if (r->tokens > 0 || next == now)
		return now;
	return now + (uint64_t)(-r->tokens / r->rate * 1e9) + 1;
}

static void pass_json(struct jw *w, const char *key, const struct pass *p,
		      int current)
{
	char target[48];

	if (!p) {
		jw_null(w, key);
		return;
	}
	if (p->t.type == KVMEMD_TARGET_POOL)
		snprintf(target, sizeof(target), "pool");
	else if (p->t.type == KVMEMD_TARGET_SESSION)
		snprintf(target, sizeof(target), "session %u", p->t.session);
	else
		snprintf(target, sizeof(target), "seq %u %u", p->t.session,
			 p->t.seq);
	jw_open(w, key, '{');
	jw_str(w, "kind", ras_source_names[p->kind]);
	jw_str(w, "target", target);
	jw_f64(w, "started", ras_secs(p->started_ns));
	jw_f64(w, "duration_s",
	       current ? ras_secs(kvmemd_now_ns() - p->started_mono)
		       : p->duration);
	jw_u64(w, "bytes", p->bytes);
	jw_u64(w, "pages", p->pages);
	jw_u64(w, "ce", p->ce);
	jw_u64(w, "ue", p->ue);
	jw_u64(w, "crc", p->crc);
	jw_u64(w, "degraded_pages", p->degraded);
	jw_u64(w, "restored_pages", p->restored);
	jw_u64(w, "padding", p->padding);
	jw_u64(w, "prefix_pages", p->prefix_pages);
	jw_u64(w, "prefix_dropped", p->prefix_dropped);
	jw_close(w, '}');
}

static void answer(struct kvmemd *d, const struct pass *p)
{
	struct kvmemd_ras *r = d->ras;
	struct jw w = { 0 };
	struct kvmemd_waiter *waiter = r->waiter;

	r->waiter = NULL;
	if (!waiter)
		return;
	pass_json(&w, NULL, p, 0);
	jw_end(&w);
	waiter->reply(waiter, &w);
	jw_free(&w);
}

void kvmemd_ras_forget(struct kvmemd *d, struct kvmemd_waiter *waiter)
{
	if (d->ras->waiter == waiter)
		d->ras->waiter = NULL;
}

/* Bytes and pages scrubbed so far, the passes under way included. */
uint64_t ras_scrubbed(const struct kvmemd_ras *r, int pages)
{
	uint64_t n = pages ? r->pages_total : r->bytes_total;
	const struct pass *p[2] = { &r->patrol, &r->ondemand };
	int i;

	for (i = 0; i < 2; i++)
		if (p[i]->active)
			n += pages ? p[i]->pages : p[i]->bytes;
	return n;
}

static const char *scrub_state(const struct kvmemd_ras *r)
{
	return r->ondemand.active ? "ondemand"
	       : r->patrol.active ? "patrol"
				  : "idle";
}

const char *kvmemd_ras_state(const struct kvmemd *d)
{
	if (!d->ras)
		return "off";
	if (!patrol_on(d) && !d->ras->ondemand.active)
		return "off";
	return scrub_state(d->ras);
}

void kvmemd_ras_status_json(const struct kvmemd *d, struct jw *w)
{
	jw_open(w, "scrub", '{');
	jw_bool(w, "enabled", patrol_on(d));
	jw_str(w, "state", scrub_state(d->ras));
	jw_close(w, '}');
}

/*
 * P(a word is uncorrectable after one cycle): flips arrive as a Poisson
 * process of n * lambda * T per word and cycle, estimated by the share of
 * words the last pass corrected; more than t of them is the first term,
 * (n lambda T)^(t+1) / (t+1)!.
 */
static void estimate_json(const struct kvmemd_ras *r, struct jw *w)
{
	const struct pass *p = &r->last_patrol;
	const struct kvmem_codec_info *ci;
	double x, pw, T;
	int c;

	jw_open(w, "estimate", '[');
	for (c = 0; c < KVMEM_CODEC_NR; c++) {
		if (!p->words[c])
			continue;
		ci = kvmem_codec_get(c);
		T = p->exposure > 0 ? p->exposure : p->duration;
		x = (double)p->ce_words[c] / (double)p->words[c];
		pw = pow(x, ci->corrects + 1) / tgamma(ci->corrects + 2.0);
		jw_open(w, NULL, '{');
		jw_str(w, "codec", ci->name);
		jw_u64(w, "t", ci->corrects);
		jw_u64(w, "n", ci->code_bits);
		jw_u64(w, "words", p->words[c]);
		jw_u64(w, "ce", p->ce_words[c]);
		jw_f64(w, "lambda_per_bit_hour",
		       T > 0 ? x / ci->code_bits / T * 3600 : 0);
		jw_f64(w, "p_ue_word", pw);
		jw_f64(w, "expected_ue_per_cycle", pw * (double)p->words[c]);
		jw_close(w, '}');
	}
	jw_close(w, ']');
}

static void adapt_json(const struct kvmemd *d, struct jw *w)
{
	const struct adapt *a = &d->ras->adapt;
	const struct adapt_step *st;
	uint64_t i;

	jw_open(w, "adapt", '{');
	jw_f64(w, "target_ue_per_day", d->cfg.scrub_target_ue);
	jw_u64(w, "rate_max_bytes_per_s", d->cfg.scrub_rate_max);
	jw_u64(w, "level", adapt_level(d));
	jw_u64(w, "max_level", adapt_max(d));
	jw_u64(w, "from", a->from);
	jw_f64(w, "base_cycle_s", a->base_cycle);
	jw_f64(w, "ue_per_day", d->cfg.scrub_target_ue ? a->ue_day : 0);
	jw_bool(w, "short_of_target", d->cfg.scrub_target_ue && a->short_of);
	jw_u64(w, "archive_escalations", a->escalations);
	jw_u64(w, "steps_up", a->up);
	jw_u64(w, "steps_down", a->down);
	jw_open(w, "steps", '[');
	i = a->nstep > ADAPT_STEPS ? a->nstep - ADAPT_STEPS : 0;
	for (; i < a->nstep; i++) {
		st = &a->step[i % ADAPT_STEPS];
		jw_open(w, NULL, '{');
		jw_f64(w, "time", ras_secs(st->time_ns));
		jw_u64(w, "from", st->from);
		jw_u64(w, "to", st->to);
		jw_f64(w, "ue_per_day", st->ue_day);
		jw_f64(w, "cycle_s", st->cycle);
		jw_close(w, '}');
	}
	jw_close(w, ']');
	jw_close(w, '}');
}

void kvmemd_ras_scrub_status(const struct kvmemd *d, struct jw *w)
{
	const struct kvmemd_ras *r = d->ras;
	double rate = patrol_rate(d);
	const struct pass *cur = r->ondemand.active ? &r->ondemand
				 : r->patrol.active ? &r->patrol
						    : NULL;

	jw_open(w, NULL, '{');
	jw_bool(w, "enabled", patrol_on(d));
	jw_u64(w, "enable_background", (uint64_t)patrol_on(d));
	jw_u64(w, "rate_bytes_per_s", d->cfg.scrub_rate);
	jw_u64(w, "cycle_s", d->cfg.scrub_cycle);
	jw_f64(w, "current_cycle_duration",
	       rate > 0 ? (double)sealed_bytes(d) / rate : 0);
	jw_bool(w, "verify_on_seal", d->cfg.verify_on_seal);
	jw_str(w, "state", scrub_state(r));
	pass_json(w, "current", cur, 1);
	pass_json(w, "last_pass", r->passes ? &r->last : NULL, 0);
	jw_u64(w, "passes", r->passes);
	jw_u64(w, "bytes_total", ras_scrubbed(r, 0));
	jw_f64(w, "effective_rate_bytes_per_s", rate);
	jw_f64(w, "estimate_exposure_s", r->last_patrol.exposure);
	estimate_json(r, w);
	adapt_json(d, w);
	jw_close(w, '}');
	jw_end(w);
}

int kvmemd_ras_scrub_start(struct kvmemd *d, char *why, size_t len)
{
	if (!d->cfg.scrub_rate && !d->cfg.scrub_cycle) {
		snprintf(why, len,
			 "scrub.rate and scrub.cycle are 0: set a rate or a "
			 "cycle first");
		return -EINVAL;
	}
	d->ras->enabled = 1;
	return 0;
}

void kvmemd_ras_scrub_stop(struct kvmemd *d)
{
	d->ras->enabled = 0;
	d->ras->patrol.active = 0;
}

int kvmemd_ras_scrub_now(struct kvmemd *d, const struct kvmemd_target *t,
			 struct kvmemd_waiter *waiter)
{
	struct kvmemd_ras *r = d->ras;

	if (r->ondemand.active)
		return -EBUSY;
	pass_start(d, &r->ondemand, SRC_ONDEMAND, t);
	r->waiter = waiter;
	return 0;
}
