/* SPDX-License-Identifier: MIT */
/*
 * archive.c - the archive tier: released sealed pages that have aged are
 * re-encoded in the archive format and codec, off the event loop
 *
 * A session whose client reads archived pages (KVMEM_FEAT_ARCHIVE) gets,
 * at admission, tier.archive_format and tier.archive_codec as its archive
 * layout, where a page in it fits a sealed slot (s->arch). A sealed page
 * of it becomes a candidate once no acquired sequence holds it, it is at
 * least tier.archive_tokens behind the end of the sequence that sealed it,
 * its attention heat is at most tier.archive_heat, and nothing about it
 * was ever found wrong (degraded, a CRC that no longer matches, an archive
 * refused before). tier.archive_rate bounds the bytes re-encoded a second,
 * all sessions together, one page at a time.
 *
 * With tier.bits_budget, precision by attention: a session whose sealed
 * pages (resident or cold, archived ones at the archive format's bits)
 * average more payload bits a value than the budget gives its coldest
 * candidate, the least heat first (then the lowest page), and a session
 * within it none; tier.archive_tokens, if set, still keeps recent pages.
 * Sessions whose archive format has no fewer bits than their own are left
 * to age and heat alone.
 *
 * The loop copies the page into a buffer of its own and reserves a free
 * sealed slot (SLOT_ARCHIVING: no op of the client's reaches it); a worker
 * runs kvmem_page_archive() between private buffers, so it never touches
 * an arena that may go away. Back on the loop, the new page goes into the
 * reserved slot only if the page is still where it was, still released,
 * sealed the same way, and its header is the one recorded at seal: then
 * the page moves to the new slot (reported by the next SEQ_ACQUIRE, with
 * its format and codec, as a page read back from the store is) and the
 * old slot is freed. Otherwise the new slot is freed and the page stays.
 * So a client that acquires meanwhile sees the old page, whole, and one
 * that acquires after sees the new one, whole. A page the archive refuses
 * (a word no code corrects, or bytes that do not match its seal: a client
 * wrote to its released page) keeps SLOT_NO_ARCHIVE and is not tried
 * again; the patrol reports what is wrong with it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "kvmemd.h"
#include "session.h"

/* Pages looked at in one pass of the loop, all sessions. */
#define SCAN_PAGES 4096u
/* With nothing to archive, look again this much later. */
#define IDLE_NS 100000000ull
/*
 * Pages larger than this are not archived: the loop copies a page in and
 * out, and a job holds two copies and, in another format, its values as
 * floats, memory not charged to the pool (one job at a time).
 */
#define PAGE_MAX (4u << 20)

struct archive_job {
	struct kvmemd_work work; /* first: the worker hands it back */
	struct kvmemd *d;
	uint32_t session, pg, unit, seal, dst_unit;
	struct kvmem_geometry g;
	unsigned int format, codec;
	size_t bytes; /* of a sealed slot */
	uint8_t *src, *dst;
	/* the worker's */
	int ret;
	struct kvmem_page_hdr src_hdr, dst_hdr;
};

struct kvmemd_archive {
	struct archive_job *job; /* in flight, or NULL */
	/* Bytes that may be re-encoded now, a second's worth at most; below
	 * 0 after a page larger than that (a debt, so the rate holds). */
	int64_t budget;
	uint64_t refilled; /* CLOCK_MONOTONIC ns */
	uint64_t next_scan; /* nothing to archive: not before then */
	uint32_t next_session; /* where the next pass starts */
	/* since start, all sessions */
	uint64_t pages, bytes, refused;
};

int kvmemd_archive_init(struct kvmemd *d)
{
	d->archive = calloc(1, sizeof(*d->archive));
	return d->archive ? 0 : -ENOMEM;
}

void kvmemd_archive_exit(struct kvmemd *d)
{
	/* A job in flight is the workers' until it is reaped. */
	free(d->archive);
	d->archive = NULL;
}

static void job_free(struct archive_job *job)
{
	free(job->src);
	free(job->dst);
	free(job);
}

/* On a worker: private buffers only. */
static void archive_work(struct kvmemd_work *w)
{
	struct archive_job *job = (struct archive_job *)w;

	job->ret = kvmem_page_archive(job->dst, job->src, &job->g, job->format,
				      job->codec, NULL);
	if (!job->ret)
		job->ret = kvmem_page_read_header(job->src, &job->g,
						  &job->src_hdr, NULL);
	if (!job->ret)
		job->ret = kvmem_page_read_header(job->dst, &job->g,
						  &job->dst_hdr, NULL);
}

/* Is @h the header slot @sl of @s recorded at seal? */
static int sealed_as(const struct kvmemd_session *s, const struct slot *sl,
		     const struct kvmem_page_hdr *h)
{
	return h->format == s->g.format && h->codec == s->g.codec &&
	       h->seq == sl->seq && h->layer == sl->layer &&
	       h->token_start == sl->token_start && h->ntokens == sl->ntokens &&
	       h->flags == sl->hdr_flags && h->generation == sl->generation &&
	       h->crc == sl->crc;
}

/* Back on the loop: the page moves to its archived copy, or stays. */
static void finish(struct kvmemd_session *s, struct kvmemd_archive *a,
		   const struct archive_job *job)
{
	struct page *p =
		job->pg < s->arena.top_page ? &s->arena.pages[job->pg] : NULL;
	const struct slot *old = &s->arena.slots[job->unit];
	/* Still the page the job copied, and nothing found wrong with it
	 * meanwhile (the patrol or an injection may have). */
	const int same = p && p->state == PAGE_RESIDENT &&
			 p->unit == job->unit && !p->pins && !p->dead &&
			 old->state == SLOT_SEALED && old->seal == job->seal &&
			 !(old->flags & (SLOT_DEGRADED | SLOT_CRC_BAD));
	uint32_t pg = job->pg;
	struct slot rec;

	if (same && !job->ret && sealed_as(s, old, &job->src_hdr)) {
		memcpy(session_page(s, job->dst_unit), job->dst, job->bytes);
		rec = *old;
		rec.flags |= SLOT_ARCHIVED;
		rec.ue_scales = rec.ue_payload = 0;
		rec.crc = job->dst_hdr.crc;
		arena_slot_enter(&s->arena, job->dst_unit, &pg, &rec);
		p->moved = 1;
		s->archived++;
		a->pages++;
		a->bytes += job->bytes;
		return;
	}
	if (same && (job->ret == -EBADMSG || job->ret == -EINVAL ||
		     (!job->ret && !sealed_as(s, old, &job->src_hdr)))) {
		arena_slot_mark(&s->arena, job->unit, SLOT_NO_ARCHIVE);
		s->archive_refused++;
		a->refused++;
	}
	arena_slot_free(&s->arena, job->dst_unit);
}

static void archive_done(struct kvmemd_work *w)
{
	struct archive_job *job = (struct archive_job *)w;
	struct kvmemd *d = job->d;
	struct kvmemd_session *s;

	for (s = d->sessions; s && s->id != job->session; s = s->next)
		;
	if (d->archive) {
		d->archive->job = NULL;
		d->archive->next_scan = 0;
		if (s)
			finish(s, d->archive, job);
	}
	job_free(job);
}

/* Is page @pg of @s, @age tokens old or more, one to archive now? */
static int candidate(const struct kvmemd_session *s, uint32_t pg, uint32_t age)
{
	const struct kvmemd_config *c = &s->d->cfg;
	const struct page *p = &s->arena.pages[pg];
	const struct slot *sl;
	const struct seq *q;
	uint16_t heat;

	/* The archive tier takes pages from host memory. */
	if (p->state != PAGE_RESIDENT || p->pins || p->dead ||
	    p->kind != KVMEM_SLOT_SEALED || arena_unit_gpu(&s->arena, p->unit))
		return 0;
	sl = &s->arena.slots[p->unit];
	if (sl->state != SLOT_SEALED ||
	    sl->flags & (SLOT_ARCHIVED | SLOT_NO_ARCHIVE | SLOT_DEGRADED |
			 SLOT_CRC_BAD))
		return 0;
	q = session_seq(s, sl->seq);
	if (!q || q->tokens < sl->token_start + sl->ntokens ||
	    q->tokens - sl->token_start - sl->ntokens < age)
		return 0;
	heat = __atomic_load_n(&s->arena.heat[p->unit], __ATOMIC_RELAXED);
	return heat <= c->archive_heat * 65535.0;
}

/* Payload bits a value of format @fmt. */
static unsigned int fbits(unsigned int fmt)
{
	return kvmem_format_get((int)fmt)->bits;
}

/*
 * Whether @s's sealed pages average more payload bits than the budget,
 * and the archive can bring them down. The count walks every page, so it
 * is kept until the arena changes (arena.changes: every seal, move, free
 * and archive of a page counts): an idle session is not walked again on
 * every pass of the loop.
 */
static int over_budget(struct kvmemd_session *s)
{
	const double budget = s->d->cfg.bits_budget;
	double bits = 0, tokens = 0;
	uint32_t pg;

	if (budget <= 0 || !s->arch.size ||
	    fbits(s->arch.format) >= fbits(s->g.format))
		return 0;
	if (s->budget_counted && s->budget_changes == s->arena.changes)
		return s->budget_bits > budget * s->budget_tokens;
	for (pg = 0; pg < s->arena.top_page; pg++) {
		const struct page *p = &s->arena.pages[pg];
		const struct slot *sl;

		if (p->state == PAGE_UNUSED || p->dead ||
		    p->kind != KVMEM_SLOT_SEALED)
			continue;
		sl = p->state == PAGE_COLD || p->state == PAGE_READING
			     ? &p->cold
			     : &s->arena.slots[p->unit];
		bits += (double)sl->ntokens * fbits(sl->flags & SLOT_ARCHIVED
							    ? s->arch.format
							    : s->g.format);
		tokens += sl->ntokens;
	}
	s->budget_bits = bits;
	s->budget_tokens = tokens;
	s->budget_changes = s->arena.changes;
	s->budget_counted = 1;
	return bits > budget * tokens;
}

/* The coldest candidate of @s, within *@scan pages, if @s is over its
 * budget. */
static uint32_t coldest_candidate(struct kvmemd_session *s, uint32_t *scan,
				  uint32_t age)
{
	uint32_t pg, best = NO_UNIT;
	uint16_t heat, best_heat = 0;

	if (!over_budget(s))
		return NO_UNIT;
	for (pg = 0; pg < s->arena.top_page && *scan; pg++, (*scan)--) {
		if (!candidate(s, pg, age))
			continue;
		heat = __atomic_load_n(&s->arena.heat[s->arena.pages[pg].unit],
				       __ATOMIC_RELAXED);
		if (best == NO_UNIT || heat < best_heat) {
			best = pg;
			best_heat = heat;
		}
	}
	return best;
}

/* Start archiving page @pg of @s: 0, or -ENOMEM / -EAGAIN (try later). */
static int start(struct kvmemd *d, struct kvmemd_session *s, uint32_t pg)
{
	const struct page *p = &s->arena.pages[pg];
	struct archive_job *job = calloc(1, sizeof(*job));
	int ret = -ENOMEM;

	if (!job)
		return ret;
	job->d = d;
	job->session = s->id;
	job->pg = pg;
	job->unit = p->unit;
	job->seal = s->arena.slots[p->unit].seal;
	job->g = s->g;
	job->format = s->arch.format;
	job->codec = s->arch.codec;
	job->bytes = slot_bytes(s, KVMEM_SLOT_SEALED);
	job->src = malloc(job->bytes);
	job->dst = calloc(1, job->bytes);
	if (!job->src || !job->dst ||
	    arena_slot_reserve(&s->arena, KVMEM_SLOT_SEALED, 0, &job->dst_unit))
		goto err;
	memcpy(job->src, session_page(s, job->unit), job->bytes);
	job->work.fn = archive_work;
	job->work.done = archive_done;
	ret = kvmemd_workers_queue(d->workers, &job->work);
	if (ret) {
		arena_slot_free(&s->arena, job->dst_unit);
		goto err;
	}
	d->archive->job = job;
	return 0;
err:
	job_free(job);
	return ret;
}

/* The next candidate of @s after its cursor, within *@scan pages. */
static uint32_t next_candidate(struct kvmemd_session *s, uint32_t *scan,
			       uint32_t age)
{
	uint32_t pg;

	for (; *scan && s->arch_pos < s->arena.top_page; (*scan)--) {
		pg = s->arch_pos++;
		if (candidate(s, pg, age))
			return pg;
	}
	if (s->arch_pos >= s->arena.top_page)
		s->arch_pos = 0;
	return NO_UNIT;
}

/* The token bucket: @rate bytes a second, a second's worth at most. */
static void refill(struct kvmemd_archive *a, uint64_t rate, uint64_t now)
{
	uint64_t dt = now > a->refilled ? now - a->refilled : 0;

	if (dt > 1000000000ull)
		dt = 1000000000ull;
	a->budget += (int64_t)((double)dt * (double)rate / 1e9);
	if (a->budget > (int64_t)rate)
		a->budget = (int64_t)rate;
	a->refilled = now;
}

uint64_t kvmemd_archive_run(struct kvmemd *d, uint64_t now)
{
	const struct kvmemd_config *c = &d->cfg;
	struct kvmemd_archive *a = d->archive;
	struct kvmemd_session *s, *first;
	/* Short of the error target at the patrol's fastest: any age. */
	const int short_of = kvmemd_ras_short_of(d);
	const uint32_t age = short_of ? 0 : c->archive_tokens;
	const int budget = c->bits_budget > 0 && !short_of;
	uint32_t scan = SCAN_PAGES, pg;
	uint64_t need, at;

	if (!a || (!age && !short_of && !budget) || !d->workers || a->job)
		return UINT64_MAX;
	refill(a, c->archive_rate, now);
	if (now < a->next_scan)
		return a->next_scan;
	for (first = d->sessions; first && first->id < a->next_session;
	     first = first->next)
		;
	if (!first)
		first = d->sessions;
	for (s = first; s && scan;) {
		need = slot_bytes(s, KVMEM_SLOT_SEALED);
		if (s->active && s->arch.size && need <= PAGE_MAX) {
			/* A page over a second's worth starts on a full
			 * bucket and leaves a debt. */
			at = need < c->archive_rate ? need : c->archive_rate;
			if (a->budget < (int64_t)at)
				return now +
				       (uint64_t)((double)((int64_t)at -
							   a->budget) *
						  1e9 /
						  (double)c->archive_rate);
			pg = budget ? coldest_candidate(s, &scan, age)
				    : next_candidate(s, &scan, age);
			if (pg != NO_UNIT && !start(d, s, pg)) {
				a->budget -= (int64_t)need;
				a->next_session = s->id + 1;
				return UINT64_MAX;
			}
			/* No slot or worker for it now: the others first. */
			if (!scan)
				break;
		}
		s = s->next ? s->next : d->sessions;
		if (s == first)
			s = NULL;
	}
	/* Where the scan stopped, or from the start once all were seen. */
	a->next_session = s ? s->id : 0;
	a->next_scan = now + IDLE_NS;
	return a->next_scan;
}

void kvmemd_archive_stats_json(const struct kvmemd *d, struct jw *w)
{
	const struct kvmemd_archive *a = d->archive;

	jw_u64(w, "archived", a ? a->pages : 0);
	jw_u64(w, "archived_bytes", a ? a->bytes : 0);
	jw_u64(w, "archive_refused", a ? a->refused : 0);
}
