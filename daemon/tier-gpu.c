/* SPDX-License-Identifier: MIT */
/*
 * tier-gpu.c - the GPU tier: a session's pages moved between its host
 * slots and the slots of its GPU memory (KVMEM_FEAT_GPU_TIER)
 *
 * A page moves as the archive tier moves one (archive.c): a slot of the
 * other tier is reserved (SLOT_ARCHIVING, no op of the client's reaches
 * it), the page's bytes copied there by the GPU pool's backend, and the
 * page enters the new slot, the old one freed; the client hears of the
 * move at its next acquire. Only a page no other acquired sequence holds
 * moves, and only a whole one.
 *
 * Every move is checked. The CRC-32C of a page leaving host memory is
 * kept in the page (->store_crc: it is not on the store meanwhile), and
 * the copy is compared with it as it arrives: read here where the daemon
 * can read the GPU memory (the stand-in), taken on the GPU by the CRC
 * kernel where it cannot (the backend's check(), a batch in one launch).
 * A copy that does not match is a failed move: the page stays where it
 * was. A page coming back is compared with it where it lands; one that
 * changed out there is checked as a page read back from the store is
 * (kvmemd_ras_moved()): its words corrected, its errors counted in the GPU
 * pool, and poisoned when the code cannot undo them.
 *
 * Copies run from the loop through the backend, whole pages, as many as
 * GPU_STEP_BYTES a pass allows, started a batch at a time and waited for
 * once a batch: the stand-in's are memcpy(), a GPU's the driver's on the
 * GPU pool's stream. What a client's op makes the loop do here, the bytes
 * copied and the pages looked through for the coldest, counts in its ring
 * pass (s->pass_bytes): a ring of acquires moving pages back and forth
 * takes its turn as a ring of seals does.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvmem/crc32c.h"
#include "kvmemd.h"
#include "session.h"

/* Work one pass of the loop does moving pages, a session: its acquires
 * all together (->gpu_step), its prefetch hints, its watermarks. */
#define GPU_STEP_BYTES (4u << 20)
/* Below the low watermark with no released page there, the pages are not
 * looked through again sooner than this. */
#define GPU_RESCAN_NS 100000000ull

/* @n bytes of the pass's work are done. */
static void spend(uint64_t *budget, size_t n)
{
	*budget = *budget > n ? *budget - n : 0;
}

/* A page that changed out there: checked whole now, as a page read back
 * is, before anyone may use it. */
static void check_back(struct kvmemd_session *s, uint32_t u, uint32_t crc)
{
	struct kvmemd_check c;
	uint64_t budget;

	kvmemd_ras_moved(s, u, crc, &c);
	do
		budget = UINT64_MAX;
	while (!kvmemd_ras_check_step(s, &c, &budget));
	s->gpu_changed++;
}

/* Pages whose copies were started and not yet waited for. */
#define BATCH_PAGES 256
_Static_assert(BATCH_PAGES <= KVMEMD_CHECK_MAX,
	       "a batch's arrivals are checked in one launch");

struct move {
	uint32_t pg, from, to;
	uint32_t crc; /* to the GPU: of the page as it left */
	uint8_t to_gpu;
	struct slot rec; /* what the slot it leaves keeps of its seal */
};

struct batch {
	struct move *m; /* room for cap */
	uint32_t n, cap;
};

/* The batch of tier_gpu_place(): the event loop's alone. */
static struct move place_moves[BATCH_PAGES];

static void copy_failed(struct kvmemd_session *s, int to_gpu)
{
	s->gpu_errors++;
	kvmemd_log_rl(&s->d->gpu.log, "GPU tier copy", LOG_ERR,
		      "session %u: a page's copy %s the GPU failed", s->id,
		      to_gpu ? "to" : "from");
}

/*
 * Start moving resident page @pg into the GPU tier (@to_gpu) or out of
 * it: a slot of the other tier reserved, the copy started. Return: 0;
 * -ENOMEM when the other tier has no free slot; -EIO when the copy could
 * not start (the page stays where it was).
 */
static int move_start(struct kvmemd_session *s, uint32_t pg, int to_gpu,
		      struct batch *b)
{
	const struct kvmemd_pool_ops *ops = s->d->gpu.ops;
	struct kvmemd_arena *a = &s->arena;
	struct page *p = &a->pages[pg];
	struct move *m = &b->m[b->n];
	const size_t bytes = slot_bytes(s, p->kind);
	int ret;

	if (arena_slot_reserve(a, p->kind, to_gpu, &m->to))
		return -ENOMEM;
	m->pg = pg;
	m->from = p->unit;
	m->rec = a->slots[m->from];
	m->to_gpu = (uint8_t)to_gpu;
	if (to_gpu) {
		m->crc = kvmem_crc32c(0, session_page(s, m->from), bytes);
		ret = ops->copy(&s->gpu, session_gpu_off(s, m->to),
				session_page(s, m->from), bytes, 1);
	} else {
		ret = ops->copy(&s->gpu, session_gpu_off(s, m->from),
				session_page(s, m->to), bytes, 0);
	}
	if (ret) {
		arena_slot_free(a, m->to);
		copy_failed(s, to_gpu);
		return -EIO;
	}
	b->n++;
	s->pass_bytes += bytes;
	return 0;
}

/*
 * The CRC of each page of @b that went to the GPU, as it arrived, into
 * @crc[i] for move i: read here where the daemon can read the GPU's
 * memory, else taken there, all in one check(). Return: 0; -EOPNOTSUPP
 * where the backend cannot take them there (no workspace: the copies
 * are then taken as they are); -EIO when it could not.
 */
static int arrived(struct kvmemd_session *s, const struct batch *b,
		   uint32_t *crc)
{
	const struct kvmemd_pool_ops *ops = s->d->gpu.ops;
	uint64_t rg[2 * BATCH_PAGES];
	uint32_t got[BATCH_PAGES], i, n = 0;
	int ret;

	for (i = 0; i < b->n; i++) {
		const struct move *m = &b->m[i];
		const size_t bytes = slot_bytes(s, s->arena.pages[m->pg].kind);

		if (!m->to_gpu)
			continue;
		if (s->gpu_view) {
			crc[i] = kvmem_crc32c(0, session_page(s, m->to), bytes);
			continue;
		}
		rg[2 * n] = session_gpu_off(s, m->to);
		rg[2 * n + 1] = bytes;
		n++;
	}
	if (!n)
		return 0;
	ret = ops->check ? ops->check(&s->gpu, rg, n, got) : -EOPNOTSUPP;
	if (ret)
		return ret == -EOPNOTSUPP ? ret : -EIO;
	for (i = 0, n = 0; i < b->n; i++)
		if (b->m[i].to_gpu)
			crc[i] = got[n++];
	return 0;
}

/*
 * Wait for the copies of @b and move their pages: each enters its new
 * slot, the old one freed, once its bytes are checked (a page copied to
 * the GPU against its CRC as it left; one copied back against the CRC it
 * left host memory with, and checked whole when it changed). A page whose
 * copy failed, or arrived on the GPU other than it left, stays where it
 * was. Return: 0, or -EIO when a copy back to host memory failed.
 */
static int batch_finish(struct kvmemd_session *s, struct batch *b)
{
	const struct kvmemd_pool_ops *ops = s->d->gpu.ops;
	struct kvmemd_arena *a = &s->arena;
	const int failed = b->n && ops->wait && ops->wait(&s->gpu);
	uint32_t crc[BATCH_PAGES];
	const int checked = failed ? 0 : arrived(s, b, crc);
	int ret = 0;
	uint32_t i;

	for (i = 0; i < b->n; i++) {
		struct move *m = &b->m[i];
		struct page *p = &a->pages[m->pg];
		const size_t bytes = slot_bytes(s, p->kind);
		uint32_t pg = m->pg;

		if (failed || (m->to_gpu && (checked == -EIO ||
					     (!checked && crc[i] != m->crc)))) {
			arena_slot_free(a, m->to);
			copy_failed(s, m->to_gpu);
			ret = m->to_gpu ? ret : -EIO;
			continue;
		}
		arena_slot_enter(a, m->to, &pg, &m->rec);
		p->moved |= p->unit != p->client_slot;
		if (m->to_gpu) {
			p->store_crc = m->crc;
			s->gpu_promoted++;
		} else {
			s->gpu_demoted++;
			if (kvmem_crc32c(0, session_page(s, m->to), bytes) !=
			    p->store_crc)
				check_back(s, m->to, p->store_crc);
		}
		s->gpu_moved_bytes += bytes;
	}
	b->n = 0;
	return ret;
}

/* Can @p move now: resident, whole in a slot, no other acquired sequence
 * holding it (@pins: the acquiring one's, or none)? */
static int movable(const struct page *p, uint32_t pins)
{
	return p->state == PAGE_RESIDENT && p->pins <= pins;
}

/*
 * The released pages in the GPU tier, in the order they leave it
 * (session_victim_key(): stale ones, then the least heat, then the
 * longest released), at most @max <= BATCH_PAGES of them, into @out (kept
 * in that order as the pages are looked through once). Return: how many.
 */
static uint32_t coldest_n(struct kvmemd_session *s, uint32_t *out, uint32_t max)
{
	const struct kvmemd_arena *a = &s->arena;
	uint64_t key[BATCH_PAGES], k;
	uint32_t pg, n = 0, i;

	s->pass_bytes += (uint64_t)a->top_page * sizeof(*a->pages);
	for (pg = 0; pg < a->top_page; pg++) {
		const struct page *p = &a->pages[pg];

		if (!movable(p, 0) || !p->refs || !arena_unit_gpu(a, p->unit))
			continue;
		k = session_victim_key(s, p);
		if (n == max && k >= key[n - 1])
			continue;
		i = n < max ? n++ : n - 1;
		for (; i && key[i - 1] > k; i--) {
			out[i] = out[i - 1];
			key[i] = key[i - 1];
		}
		out[i] = pg;
		key[i] = k;
	}
	return n;
}

/* The pages that leave the GPU in one batch to make room (tier_gpu_place(),
 * tier_gpu_balance()), and their moves: the loop's alone. */
static uint32_t victims[BATCH_PAGES];
static struct move room_moves[BATCH_PAGES];

/*
 * Room on the GPU for the pages of @q from @pos on that are not there, as
 * many as @budget bytes of the pass and a batch allow: the coldest
 * released pages there leave (coldest_n()), as many as that takes, their
 * copies waited for once. Return: 0 when one left at least, -ENOMEM when
 * none could (nothing released there, host memory full, the copies
 * failed).
 */
static int make_room(struct kvmemd_session *s, const struct seq *q,
		     uint32_t pos, uint64_t budget)
{
	struct kvmemd_arena *a = &s->arena;
	struct batch b = { .m = room_moves, .cap = BATCH_PAGES };
	uint64_t need = 0,
		 room = a->gpu_units - a->gpu_used_bytes / KVMEM_SLOT_UNIT;
	uint32_t n, i, want = 0, freed = 0;

	for (i = pos; i < q->n && want < BATCH_PAGES && budget; i++) {
		const struct page *p = &a->pages[q->pages[i]];

		if (arena_unit_gpu(a, p->unit))
			continue;
		need += a->slot_units[p->kind];
		want++;
		spend(&budget, slot_bytes(s, p->kind));
	}
	n = coldest_n(s, victims, want ? want : 1);
	for (i = 0; i < n && (!i || room < need); i++) {
		if (move_start(s, victims[i], 0, &b))
			break;
		room += a->slot_units[a->pages[victims[i]].kind];
	}
	batch_finish(s, &b);
	for (i = 0; i < n; i++)
		freed += !arena_unit_gpu(a, a->pages[victims[i]].unit);
	return freed ? 0 : -ENOMEM;
}

/*
 * The pages' copies are started a batch at a time and waited for once:
 * on a GPU, one wait for the stream a batch, not one a page.
 */
int tier_gpu_place(struct kvmemd_session *s, struct seq *q, int gpu,
		   uint32_t *pos)
{
	struct kvmemd_arena *a = &s->arena;
	struct batch b = { .m = place_moves, .cap = BATCH_PAGES };
	uint64_t *budget = &s->gpu_step;
	int ret = 0, fin;

	if (!a->gpu_units)
		return 1;
	for (; *pos < q->n; ++*pos) {
		uint32_t pg = q->pages[*pos];
		struct page *p = &a->pages[pg];

		/* Where it is wanted already: no work, whatever is left. */
		if (arena_unit_gpu(a, p->unit) == gpu)
			continue;
		if (!*budget)
			break;
		if (!movable(p, 1)) {
			/* Another acquired sequence reads it where it is. */
			if (!gpu && p->state == PAGE_RESIDENT) {
				ret = -EBUSY;
				break;
			}
			continue;
		}
		ret = move_start(s, pg, gpu, &b);
		/* Room on the GPU: the coldest released pages there make
		 * it, as far as host memory can take them. Where none
		 * can, the rest of @q is read where it is, in host memory:
		 * looking for room again for each of its pages found none
		 * each time, and took the loop a scan of every page a page. */
		if (ret == -ENOMEM && gpu) {
			if (make_room(s, q, *pos, *budget)) {
				*pos = q->n;
				ret = 0;
				break;
			}
			ret = move_start(s, pg, gpu, &b);
		}
		/* A page that still does not fit on the GPU, or whose copy
		 * there failed, is read where it is; one that cannot come
		 * back to host memory ends the acquire. */
		if (ret && !gpu)
			break;
		ret = 0;
		spend(budget, slot_bytes(s, p->kind));
		if (b.n == b.cap && (ret = batch_finish(s, &b)))
			break;
	}
	fin = batch_finish(s, &b);
	if (ret || fin)
		return ret ? ret : fin;
	return *pos == q->n;
}

void tier_gpu_pass(struct kvmemd_session *s)
{
	s->gpu_step = GPU_STEP_BYTES;
}

/* Would the GPU tier still have tier.low_watermark percent free with
 * @units more used? */
static int above_low(const struct kvmemd_session *s, uint32_t units)
{
	const struct kvmemd_arena *a = &s->arena;
	const uint64_t used = a->gpu_used_bytes / KVMEM_SLOT_UNIT + units;

	return used <= a->gpu_units &&
	       a->gpu_units - used >=
		       (uint64_t)a->gpu_units * s->d->cfg.low_watermark / 100;
}

void tier_gpu_prefetch(struct kvmemd_session *s, struct seq *q)
{
	if (s->arena.gpu_units)
		tier_prefetch_add(s->gpu_prefetch, &s->ngpu_prefetch, q->id);
}

/*
 * Move the pages of the sequences asked for into free slots of the GPU
 * tier, GPU_STEP_BYTES a pass at most; a sequence is done when it is gone,
 * acquired (its acquire places its pages), through, or the tier is full
 * to its low watermark (a hint makes no room). A page moved counts as just released, so the
 * watermarks take it last. Return: 1 when more are left for the next
 * pass.
 */
static int prefetch_step(struct kvmemd_session *s, uint64_t now)
{
	struct kvmemd_arena *a = &s->arena;
	struct batch b = { .m = place_moves, .cap = BATCH_PAGES };
	uint64_t budget = GPU_STEP_BYTES;
	int ret = 0;

	while (s->ngpu_prefetch && budget) {
		uint32_t *pf = s->gpu_prefetch[0];
		struct seq *q = session_seq(s, pf[0]);

		for (; q && !q->acquired && pf[1] < q->n && budget && !ret;
		     pf[1]++) {
			struct page *p = &a->pages[q->pages[pf[1]]];

			if (arena_unit_gpu(a, p->unit) || !movable(p, 0))
				continue;
			/* A tier full to its low watermark ends the hint:
			 * it would only make released pages leave. */
			ret = above_low(s, a->slot_units[p->kind])
				      ? move_start(s, q->pages[pf[1]], 1, &b)
				      : -ENOMEM;
			if (ret == -ENOMEM)
				break;
			ret = 0;
			p->released = now;
			spend(&budget, slot_bytes(s, p->kind));
			if (b.n == b.cap)
				batch_finish(s, &b);
		}
		if (q && !q->acquired && pf[1] < q->n && ret != -ENOMEM)
			break;
		ret = 0;
		memmove(s->gpu_prefetch[0], s->gpu_prefetch[1],
			(s->ngpu_prefetch - 1) * sizeof(s->gpu_prefetch[0]));
		s->ngpu_prefetch--;
	}
	batch_finish(s, &b);
	return s->ngpu_prefetch > 0;
}

/*
 * Below the low watermark, the coldest released pages leave (coldest_n()),
 * a batch of copies at a time, until the high watermark is free again or
 * the pass's budget is spent.
 */
int tier_gpu_balance(struct kvmemd_session *s, uint64_t now)
{
	const struct kvmemd_config *c = &s->d->cfg;
	struct kvmemd_arena *a = &s->arena;
	const uint64_t high = (uint64_t)a->gpu_units * c->high_watermark / 100;
	struct batch b = { .m = place_moves, .cap = BATCH_PAGES };
	uint64_t budget = GPU_STEP_BYTES, free_units;
	uint32_t i, n;

	if (!a->gpu_units)
		return 0;
	if (s->ngpu_prefetch && prefetch_step(s, now))
		return 1;
	while (budget) {
		free_units = a->gpu_units - a->gpu_used_bytes / KVMEM_SLOT_UNIT;
		if (free_units <
		    (uint64_t)a->gpu_units * c->low_watermark / 100)
			s->gpu_reclaiming = 1;
		if (free_units >= high)
			s->gpu_reclaiming = 0;
		if (!s->gpu_reclaiming || now < s->gpu_rescan)
			return 0;
		n = coldest_n(s, victims, BATCH_PAGES);
		for (i = 0; i < n && budget && free_units < high; i++) {
			const struct page *p = &a->pages[victims[i]];

			if (move_start(s, victims[i], 0, &b))
				break;
			free_units += a->slot_units[p->kind];
			spend(&budget, slot_bytes(s, p->kind));
		}
		/* Nothing released there, host memory full (the store's
		 * reclaim makes room there first), or a copy failed. */
		if (!b.n || batch_finish(s, &b) ||
		    (i < n && free_units < high && budget)) {
			s->gpu_rescan = now + GPU_RESCAN_NS;
			return 0;
		}
	}
	return 1;
}
