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
 * where the daemon can read the GPU memory (the stand-in) the copy is
 * compared with it at once. A page coming back is compared with it where
 * it lands; one that changed out there is checked as a page read back
 * from the store is (kvmemd_ras_moved()): its words corrected, its errors
 * counted in the GPU pool, and poisoned when the code cannot undo them.
 *
 * Copies run on the loop through the backend, whole pages, as many as
 * GPU_STEP_BYTES a pass allows: the stand-in's are memcpy(), a GPU's are
 * the driver's, waited for. Asynchronous copies on a stream of the
 * daemon's are not built yet.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvmem/crc32c.h"
#include "kvmemd.h"
#include "session.h"

/* Work one pass of the loop does moving pages, a session. */
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

/*
 * Move resident page @pg into the GPU tier (@to_gpu) or out of it.
 * Return: 0; -ENOMEM when the other tier has no free slot; -EIO when the
 * copy failed or did not arrive as it left (the page stays where it was).
 */
static int move_page(struct kvmemd_session *s, uint32_t pg, int to_gpu)
{
	const struct kvmemd_pool_ops *ops = s->d->gpu.ops;
	struct kvmemd_arena *a = &s->arena;
	struct page *p = &a->pages[pg];
	const uint32_t from = p->unit;
	const struct slot rec = a->slots[from];
	const size_t bytes = slot_bytes(s, p->kind);
	uint32_t to, crc = 0;
	int ret;

	ret = arena_slot_reserve(a, p->kind, to_gpu, &to);
	if (ret)
		return -ENOMEM;
	if (to_gpu) {
		crc = kvmem_crc32c(0, session_page(s, from), bytes);
		ret = ops->copy(&s->gpu, session_gpu_off(s, to),
				session_page(s, from), bytes, 1);
		if (!ret && s->gpu_view &&
		    kvmem_crc32c(0, session_page(s, to), bytes) != crc)
			ret = -EIO;
	} else {
		ret = ops->copy(&s->gpu, session_gpu_off(s, from),
				session_page(s, to), bytes, 0);
	}
	if (ret) {
		arena_slot_free(a, to);
		s->gpu_errors++;
		kvmemd_log_rl(&s->d->gpu.log, "GPU tier copy", LOG_ERR,
			      "session %u: a page's copy %s the GPU failed",
			      s->id, to_gpu ? "to" : "from");
		return -EIO;
	}
	arena_slot_enter(a, to, &pg, &rec);
	p->moved |= p->unit != p->client_slot;
	if (to_gpu) {
		p->store_crc = crc;
		s->gpu_promoted++;
	} else {
		s->gpu_demoted++;
		if (kvmem_crc32c(0, session_page(s, to), bytes) != p->store_crc)
			check_back(s, to, p->store_crc);
	}
	s->gpu_moved_bytes += bytes;
	return 0;
}

/* Can @p move now: resident, whole in a slot, no other acquired sequence
 * holding it (@pins: the acquiring one's, or none)? */
static int movable(const struct page *p, uint32_t pins)
{
	return p->state == PAGE_RESIDENT && p->pins <= pins;
}

/* The released page in the GPU tier to leave first: the one released
 * longest ago (the heat array covers host slots only); NO_UNIT for none. */
static uint32_t coldest(const struct kvmemd_session *s)
{
	const struct kvmemd_arena *a = &s->arena;
	uint32_t pg, best = NO_UNIT;

	for (pg = 0; pg < a->top_page; pg++) {
		const struct page *p = &a->pages[pg];

		if (!movable(p, 0) || !p->refs || !arena_unit_gpu(a, p->unit))
			continue;
		if (best == NO_UNIT || p->released < a->pages[best].released)
			best = pg;
	}
	return best;
}

int tier_gpu_place(struct kvmemd_session *s, struct seq *q, int gpu,
		   uint32_t *pos)
{
	struct kvmemd_arena *a = &s->arena;
	uint64_t budget = GPU_STEP_BYTES;
	uint32_t victim;
	int ret;

	if (!a->gpu_units)
		return 1;
	for (; *pos < q->n; ++*pos) {
		uint32_t pg = q->pages[*pos];
		struct page *p = &a->pages[pg];

		if (arena_unit_gpu(a, p->unit) == gpu)
			continue;
		if (!budget)
			return 0;
		if (!movable(p, 1)) {
			/* Another acquired sequence reads it where it is. */
			if (!gpu && p->state == PAGE_RESIDENT)
				return -EBUSY;
			continue;
		}
		ret = move_page(s, pg, gpu);
		/* Room on the GPU: the released page there the longest
		 * makes it, if host memory can take that one. */
		if (ret == -ENOMEM && gpu && (victim = coldest(s)) != NO_UNIT &&
		    !move_page(s, victim, 0))
			ret = move_page(s, pg, gpu);
		/* A page that does not fit on the GPU, or whose copy there
		 * failed, is read where it is: in host memory. */
		if (ret && !gpu)
			return ret;
		spend(&budget, slot_bytes(s, p->kind));
	}
	return 1;
}

int tier_gpu_balance(struct kvmemd_session *s, uint64_t now)
{
	const struct kvmemd_config *c = &s->d->cfg;
	struct kvmemd_arena *a = &s->arena;
	uint64_t budget = GPU_STEP_BYTES, free_units;
	uint32_t pg;

	if (!a->gpu_units)
		return 0;
	while (budget) {
		free_units = a->gpu_units - a->gpu_used_bytes / KVMEM_SLOT_UNIT;
		if (free_units <
		    (uint64_t)a->gpu_units * c->low_watermark / 100)
			s->gpu_reclaiming = 1;
		if (free_units >=
		    (uint64_t)a->gpu_units * c->high_watermark / 100)
			s->gpu_reclaiming = 0;
		if (!s->gpu_reclaiming || now < s->gpu_rescan)
			return 0;
		pg = coldest(s);
		/* Nothing released there, or host memory full: the
		 * store's reclaim makes room there first. */
		if (pg == NO_UNIT || move_page(s, pg, 0)) {
			s->gpu_rescan = now + GPU_RESCAN_NS;
			return 0;
		}
		spend(&budget, slot_bytes(s, a->pages[pg].kind));
	}
	return 1;
}
