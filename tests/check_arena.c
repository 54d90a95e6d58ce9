/* SPDX-License-Identifier: MIT */
/*
 * check_arena.c - kvmemd's arena (daemon/arena.c): slots, pages and what
 * they add up to, driven directly
 *
 * A seeded walk of random moves (a slot allocated, sealed, freed; a page
 * written to the store and back, orphaned with its I/O in flight, copied
 * to an archived slot, marked degraded; the tables saved and restored as
 * a restart does) runs against a model that knows only what each page is
 * doing. After every step the arena must pass arena_check(), its own
 * recount, and every counter must be what the model says, computed here
 * from the model alone; each move's effect on the slot and the page it
 * touched is checked too. arena_check() itself must find tables broken on
 * purpose, and arena_restore() must refuse them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../daemon/arena.h"
#include "../daemon/kvmemd.h"
#include "kvmem_check.h"
#include "rng.h"

#define UNITS 256u
#define MAX_PAGES 4096u
#define STEPS 20000u

/* What the model knows of a page. */
enum m_state {
	M_NONE, /* no page */
	M_RESIDENT,
	M_WRITING,
	M_COLD,
	M_LOADING, /* being read back, its slot loading */
	M_LOADED, /* read back into its slot, sealed, not checked yet */
};

struct m_page {
	uint8_t state; /* enum m_state */
	uint8_t dead, kind, degraded;
};

struct model {
	struct kvmemd d; /* its host pool: the arena's heap */
	struct kvmemd_arena a;
	uint16_t heat[UNITS];
	uint32_t units[2];
	uint64_t heap0, heap_max;
	struct m_page pg[MAX_PAGES];
	uint32_t open[UNITS], nopen; /* the client's open slots */
	uint32_t seals;
	/* an archive in flight: its page, the slot it copies, that slot's
	 * seal, the slot reserved for the copy */
	int job;
	uint32_t job_pg, job_src, job_seal, job_dst;
	struct kvmem_rng r;
};

/* The two geometries the walk runs on: slots of two sizes, each kind its
 * own free list, and a page table that may grow to 1024 pages; one size
 * for both (one free list) and at most 64 pages. */
static const struct {
	uint32_t units[2];
	uint32_t max_pages;
	uint64_t seed;
} configs[] = {
	{ { 2, 1 }, 1024, 0xa7e4a0 },
	{ { 1, 1 }, 64, 0xa7e4a1 },
};

static uint64_t below(struct model *m, uint64_t n)
{
	return kvmem_rng_below(&m->r, n);
}

static uint64_t bytes_of(const struct model *m, int kind)
{
	return (uint64_t)m->units[kind] * KVMEM_SLOT_UNIT;
}

static struct model *model_new(int config)
{
	struct model *m = calloc(1, sizeof(*m));

	ck_assert_ptr_nonnull(m);
	m->units[0] = configs[config].units[0];
	m->units[1] = configs[config].units[1];
	m->heap0 = arena_table_bytes(UNITS, 0, m->units);
	m->heap_max =
		m->heap0 + configs[config].max_pages * sizeof(struct page);
	m->d.cfg.host_bytes = 1ull << 30;
	m->d.n.pool_used = m->heap0;
	arena_init(&m->a, &m->d, UNITS, 0, m->units, m->heap0, m->heap_max);
	ck_assert_int_eq(arena_tables(&m->a), 0);
	/* What a client said of earlier pages: a new slot's must be 0. */
	memset(m->heat, 0xff, sizeof(m->heat));
	m->a.heat = m->heat;
	kvmem_rng_seed(&m->r, configs[config].seed);
	return m;
}

static void model_free(struct model *m)
{
	arena_exit(&m->a);
	free(m);
}

/* Page @pg goes. */
static void page_free(struct model *m, uint32_t pg)
{
	arena_page_free(&m->a, pg);
	m->pg[pg] = (struct m_page){ M_NONE, 0, 0, 0 };
}

/* A page in @state (and alive, with @alive), from a random place on; or
 * NO_UNIT. */
static uint32_t pick(struct model *m, enum m_state state, int alive)
{
	uint32_t n = m->a.top_page, start, i, pg;

	if (!n)
		return NO_UNIT;
	start = (uint32_t)below(m, n);
	for (i = 0; i < n; i++) {
		pg = (start + i) % n;
		if (m->pg[pg].state == state && (!alive || !m->pg[pg].dead))
			return pg;
	}
	return NO_UNIT;
}

/* Would a slot of @kind be had now? */
static int room(const struct model *m, int kind)
{
	const int fl = kind && m->units[1] != m->units[0];

	return m->a.nfree[fl] || m->a.nunits - m->a.top >= m->units[kind];
}

/* Would a new page be had now? Within the session's share of the heap
 * when the table must grow. */
static int page_room(const struct model *m)
{
	const struct kvmemd_arena *a = &m->a;
	uint32_t n = a->npages ? a->npages * 2 : 64;

	return a->free_page != NO_UNIT || a->top_page < a->npages ||
	       (n - a->npages) * sizeof(struct page) <= a->heap_max - a->heap;
}

static const char *op_alloc(struct model *m, uint32_t step)
{
	const int kind = (int)below(m, 2), want = room(m, kind) ? 0 : -ENOMEM;
	uint32_t u;
	int ret;

	ret = arena_slot_alloc(&m->a, kind, &u);
	EXPECT_EQ(ret, want, "step %u: alloc of kind %d", step, kind);
	if (ret)
		return "alloc (full)";
	EXPECT_EQ(m->a.slots[u].state, SLOT_OPEN, "step %u: slot %u", step, u);
	EXPECT_EQ(m->a.slots[u].kind, kind, "step %u: slot %u", step, u);
	EXPECT_EQ(m->heat[u], 0, "step %u: slot %u", step, u);
	m->open[m->nopen++] = u;
	return "alloc";
}

static const char *op_free_open(struct model *m, uint32_t step)
{
	uint32_t i;

	(void)step;
	if (!m->nopen)
		return NULL;
	i = (uint32_t)below(m, m->nopen);
	arena_slot_free(&m->a, m->open[i]);
	m->open[i] = m->open[--m->nopen];
	return "free open slot";
}

static const char *op_seal(struct model *m, uint32_t step)
{
	struct slot rec = { 0 };
	uint32_t i, u, pg = NO_UNIT;
	const int want = page_room(m) ? 0 : -ENOMEM;
	int ret;

	if (!m->nopen)
		return NULL;
	i = (uint32_t)below(m, m->nopen);
	u = m->open[i];
	rec.seq = (uint32_t)below(m, 100) + 1;
	rec.layer = (uint32_t)below(m, 8);
	rec.token_start = (uint32_t)below(m, 1u << 20);
	rec.ntokens = (uint32_t)below(m, 64) + 1;
	rec.crc = (uint32_t)kvmem_rng_next(&m->r);
	rec.generation = kvmem_rng_next(&m->r);
	ret = arena_slot_enter(&m->a, u, &pg, &rec);
	EXPECT_EQ(ret, want, "step %u: seal of slot %u", step, u);
	if (ret)
		return "seal (no page)";
	ck_assert_uint_lt(pg, MAX_PAGES);
	EXPECT_EQ(m->pg[pg].state, M_NONE, "step %u: page %u", step, pg);
	m->pg[pg] = (struct m_page){ M_RESIDENT, 0, m->a.slots[u].kind, 0 };
	m->open[i] = m->open[--m->nopen];
	EXPECT_EQ(m->a.slots[u].state, SLOT_SEALED, "step %u", step);
	EXPECT_EQ(m->a.slots[u].page, pg, "step %u", step);
	EXPECT_EQ(m->a.slots[u].seq, rec.seq, "step %u", step);
	EXPECT_EQ(m->a.slots[u].crc, rec.crc, "step %u", step);
	EXPECT_EQ(m->a.slots[u].seal, ++m->seals, "step %u", step);
	EXPECT_EQ(m->a.pages[pg].unit, u, "step %u", step);
	EXPECT_EQ(m->a.pages[pg].client_slot, u, "step %u", step);
	EXPECT_EQ(m->a.pages[pg].layer, rec.layer, "step %u", step);
	EXPECT_EQ(m->a.pages[pg].token_start, rec.token_start, "step %u", step);
	return "seal";
}

static const char *op_free_page(struct model *m, uint32_t step)
{
	uint32_t pg = pick(m, M_RESIDENT, 1), u;

	if (pg == NO_UNIT)
		return NULL;
	u = m->a.pages[pg].unit;
	page_free(m, pg);
	EXPECT_EQ(m->a.slots[u].state, SLOT_FREE, "step %u: slot %u", step, u);
	return "free page";
}

static const char *op_write_start(struct model *m, uint32_t step)
{
	uint32_t pg = pick(m, M_RESIDENT, 1);

	(void)step;
	if (pg == NO_UNIT)
		return NULL;
	arena_write_start(&m->a, pg);
	m->pg[pg].state = M_WRITING;
	return "write start";
}

static const char *op_write_end(struct model *m, uint32_t step)
{
	uint32_t pg = pick(m, M_WRITING, 0), u;

	if (pg == NO_UNIT)
		return NULL;
	if (m->pg[pg].dead) {
		page_free(m, pg);
		return "write end, orphaned";
	}
	if (below(m, 2)) {
		arena_write_end(&m->a, pg, 0);
		m->pg[pg].state = M_RESIDENT;
		return "write end, resident";
	}
	u = m->a.pages[pg].unit;
	arena_write_end(&m->a, pg, 1);
	EXPECT_EQ(m->a.pages[pg].unit, NO_UNIT, "step %u", step);
	EXPECT_EQ(m->a.pages[pg].cold.state, SLOT_SEALED, "step %u", step);
	EXPECT_EQ(m->a.slots[u].state, SLOT_FREE, "step %u: slot %u", step, u);
	m->pg[pg].state = M_COLD;
	return "write end, cold";
}

static const char *op_orphan(struct model *m, uint32_t step)
{
	static const enum m_state moving[] = { M_WRITING, M_LOADING, M_LOADED };
	uint32_t pg = pick(m, moving[below(m, 3)], 1);

	if (pg == NO_UNIT)
		return NULL;
	arena_page_orphan(&m->a, pg);
	if (m->pg[pg].state == M_WRITING)
		EXPECT_EQ(m->a.pages[pg].unit, NO_UNIT, "step %u", step);
	m->pg[pg].dead = 1;
	return "orphan";
}

static const char *op_read_start(struct model *m, uint32_t step)
{
	uint32_t pg = pick(m, M_COLD, 1), u;
	int ret, want;

	if (pg == NO_UNIT)
		return NULL;
	want = room(m, m->pg[pg].kind) ? 0 : -ENOMEM;
	ret = arena_read_start(&m->a, pg, &u);
	EXPECT_EQ(ret, want, "step %u: read of page %u", step, pg);
	if (ret)
		return "read start (full)";
	EXPECT_EQ(m->a.slots[u].state, SLOT_LOADING, "step %u", step);
	EXPECT_EQ(m->a.pages[pg].unit, u, "step %u", step);
	m->pg[pg].state = M_LOADING;
	return "read start";
}

static const char *op_read_end(struct model *m, uint32_t step)
{
	uint32_t pg = pick(m, M_LOADING, 0), u, in;
	const struct page *p;

	if (pg == NO_UNIT)
		return NULL;
	p = &m->a.pages[pg];
	if (m->pg[pg].dead) {
		page_free(m, pg);
		return "read end, orphaned";
	}
	if (!below(m, 3)) {
		arena_read_fail(&m->a, pg);
		EXPECT_EQ(arena_read_error(&m->a, pg), 1, "step %u", step);
		EXPECT_EQ(arena_read_error(&m->a, pg), 0, "step %u", step);
		m->pg[pg].state = M_COLD;
		return "read failed";
	}
	u = p->unit;
	in = pg;
	arena_slot_enter(&m->a, u, &in, &p->cold);
	EXPECT_EQ(in, pg, "step %u", step);
	EXPECT_EQ(m->a.slots[u].state, SLOT_SEALED, "step %u", step);
	EXPECT_EQ(m->a.slots[u].seal, ++m->seals, "step %u", step);
	EXPECT_EQ(!!(m->a.slots[u].flags & SLOT_DEGRADED), m->pg[pg].degraded,
		  "step %u", step);
	m->pg[pg].state = M_LOADED;
	return "read end";
}

static const char *op_read_checked(struct model *m, uint32_t step)
{
	uint32_t pg = pick(m, M_LOADED, 0);

	(void)step;
	if (pg == NO_UNIT)
		return NULL;
	if (m->pg[pg].dead) {
		page_free(m, pg);
		return "read checked, orphaned";
	}
	arena_read_checked(&m->a, pg);
	m->pg[pg].state = M_RESIDENT;
	return "read checked";
}

static const char *op_drop_cold(struct model *m, uint32_t step)
{
	uint32_t pg = pick(m, M_COLD, 1);

	(void)step;
	if (pg == NO_UNIT)
		return NULL;
	page_free(m, pg);
	return "drop cold page";
}

static const char *op_archive_start(struct model *m, uint32_t step)
{
	uint32_t pg = pick(m, M_RESIDENT, 1);
	int ret, want;

	if (m->job || pg == NO_UNIT)
		return NULL;
	want = room(m, m->pg[pg].kind) ? 0 : -ENOMEM;
	ret = arena_slot_reserve(&m->a, m->pg[pg].kind, 0, &m->job_dst);
	EXPECT_EQ(ret, want, "step %u: reserve for page %u", step, pg);
	if (ret)
		return "archive start (full)";
	EXPECT_EQ(m->a.slots[m->job_dst].state, SLOT_ARCHIVING, "step %u",
		  step);
	m->job = 1;
	m->job_pg = pg;
	m->job_src = m->a.pages[pg].unit;
	m->job_seal = m->a.slots[m->job_src].seal;
	return "archive start";
}

/* The job's copy goes in while its page is still in the slot it copied,
 * sealed the same way; otherwise (or now and then) it is dropped. */
static const char *op_archive_end(struct model *m, uint32_t step)
{
	const struct slot *src = &m->a.slots[m->job_src];
	uint32_t pg = m->job_pg;
	struct slot rec;

	if (!m->job)
		return NULL;
	m->job = 0;
	if (m->pg[pg].state != M_RESIDENT ||
	    m->a.pages[pg].unit != m->job_src || src->state != SLOT_SEALED ||
	    src->seal != m->job_seal || !below(m, 4)) {
		arena_slot_free(&m->a, m->job_dst);
		return "archive dropped";
	}
	rec = *src;
	rec.flags |= SLOT_ARCHIVED;
	rec.crc = (uint32_t)kvmem_rng_next(&m->r);
	arena_slot_enter(&m->a, m->job_dst, &pg, &rec);
	EXPECT_EQ(pg, m->job_pg, "step %u", step);
	EXPECT_EQ(m->a.pages[pg].unit, m->job_dst, "step %u", step);
	EXPECT_EQ(m->a.slots[m->job_src].state, SLOT_FREE, "step %u", step);
	EXPECT_EQ(m->a.slots[m->job_dst].crc, rec.crc, "step %u", step);
	EXPECT_EQ(m->a.slots[m->job_dst].seal, ++m->seals, "step %u", step);
	return "archive done";
}

static const char *op_mark(struct model *m, uint32_t step)
{
	static const enum m_state sealed[] = { M_RESIDENT, M_WRITING,
					       M_LOADED };
	const unsigned int flag = below(m, 2) ? SLOT_DEGRADED : SLOT_CRC_BAD;
	uint32_t pg = pick(m, sealed[below(m, 3)], 1), u;
	unsigned int had;

	if (pg == NO_UNIT)
		return NULL;
	u = m->a.pages[pg].unit;
	had = m->a.slots[u].flags & flag;
	EXPECT_EQ(arena_slot_mark(&m->a, u, flag), flag & ~had,
		  "step %u: slot %u", step, u);
	m->pg[pg].degraded |= flag == SLOT_DEGRADED;
	return "mark";
}

/* Every move under way ends, as at a stop that keeps the session: writes
 * leave their pages resident, reads land and are checked, the archive's
 * copy is dropped, orphaned pages go. */
static void settle(struct model *m)
{
	struct m_page *p;
	uint32_t pg, in;

	for (pg = 0; pg < m->a.top_page; pg++) {
		p = &m->pg[pg];
		if (p->dead) {
			page_free(m, pg);
			continue;
		}
		if (p->state == M_WRITING)
			arena_write_end(&m->a, pg, 0);
		if (p->state == M_LOADING) {
			in = pg;
			arena_slot_enter(&m->a, m->a.pages[pg].unit, &in,
					 &m->a.pages[pg].cold);
			m->seals++;
		}
		if (p->state == M_LOADING || p->state == M_LOADED)
			arena_read_checked(&m->a, pg);
		if (p->state != M_COLD && p->state != M_NONE)
			p->state = M_RESIDENT;
	}
	if (m->job)
		arena_slot_free(&m->a, m->job_dst);
	m->job = 0;
}

/* @a's slots as a record has them, each that starts one with its unit,
 * to @out: how many. */
static uint32_t save_slots(const struct kvmemd_arena *a,
			   struct arena_saved_slot *out)
{
	uint32_t u, n = 0;

	for (u = 0; u < a->top; u++) {
		if (a->slots[u].state == SLOT_NONE)
			continue;
		out[n++] = (struct arena_saved_slot){ .unit = u,
						      .slot = a->slots[u] };
		u += a->slot_units[a->slots[u].kind] - 1;
	}
	return n;
}

/* The moves under way ended, the tables saved and taken back by a fresh
 * arena, which goes on. */
static const char *op_restore(struct model *m, uint32_t step)
{
	struct kvmemd_arena b = { 0 };
	struct arena_saved_slot *slots;
	struct arena_saved k;
	struct page *pages;
	char why[160] = "";
	int ret;

	settle(m);
	ret = arena_check(&m->a, why, sizeof(why));
	ck_assert_msg(!ret, "step %u: settled: %s", step, why);
	slots = malloc((m->a.top + 1) * sizeof(*slots));
	pages = malloc((m->a.top_page + 1) * sizeof(*pages));
	ck_assert(slots && pages);
	memcpy(pages, m->a.pages, m->a.top_page * sizeof(*pages));
	k = (struct arena_saved){ .slots = slots,
				  .nslots = save_slots(&m->a, slots),
				  .pages = pages,
				  .top = m->a.top,
				  .top_page = m->a.top_page,
				  .free_page = m->a.free_page,
				  .seals = m->a.seals };
	arena_init(&b, &m->d, UNITS, 0, m->units, m->heap0, m->heap_max);
	m->d.n.pool_used += m->heap0;
	ck_assert_int_eq(arena_tables(&b), 0);
	b.heat = m->heat;
	ret = arena_restore(&b, &k, 1, why, sizeof(why));
	ck_assert_msg(!ret, "step %u: restore: %s", step, why);
	EXPECT_EQ(b.nopen, m->a.nopen, "step %u", step);
	EXPECT_EQ(b.nsealed, m->a.nsealed, "step %u", step);
	EXPECT_EQ(b.ncold, m->a.ncold, "step %u", step);
	EXPECT_EQ(b.used_bytes, m->a.used_bytes, "step %u", step);
	EXPECT_EQ(b.ndegraded, m->a.ndegraded, "step %u", step);
	EXPECT_EQ(b.nfree[0] + b.nfree[1], m->a.nfree[0] + m->a.nfree[1],
		  "step %u", step);
	EXPECT_EQ(b.seals, m->a.seals, "step %u", step);
	m->d.n.pool_used -= m->a.heap;
	arena_exit(&m->a);
	m->a = b;
	free(slots);
	free(pages);
	return "restore";
}

/* The counters as the model alone says they must be. */
static void expect_counts(const struct model *m, uint32_t step, const char *op)
{
	uint64_t used = 0, nsealed = 0, sealed_bytes = 0, ndegraded = 0,
		 ncold = 0, cold_bytes = 0, writing = 0;
	const struct m_page *p;
	uint32_t i, pg;

	for (i = 0; i < m->nopen; i++)
		used += bytes_of(m, m->a.slots[m->open[i]].kind);
	for (pg = 0; pg < m->a.top_page; pg++) {
		p = &m->pg[pg];
		if (p->state == M_WRITING)
			writing += m->units[p->kind];
		if (p->state == M_RESIDENT || p->state == M_LOADED ||
		    (p->state == M_WRITING && !p->dead)) {
			nsealed++;
			sealed_bytes += bytes_of(m, p->kind);
			ndegraded += p->degraded;
		}
		if (p->state == M_COLD || p->state == M_LOADING) {
			ncold++;
			cold_bytes += bytes_of(m, p->kind);
		}
		if (p->state == M_LOADING)
			used += bytes_of(m, p->kind);
	}
	used += sealed_bytes;
	if (m->job)
		used += bytes_of(m, m->a.slots[m->job_dst].kind);
	EXPECT_EQ(m->a.nopen, m->nopen, "step %u (%s)", step, op);
	EXPECT_EQ(m->a.nsealed, nsealed, "step %u (%s)", step, op);
	EXPECT_EQ(m->a.sealed_bytes, sealed_bytes, "step %u (%s)", step, op);
	EXPECT_EQ(m->a.ndegraded, ndegraded, "step %u (%s)", step, op);
	EXPECT_EQ(m->a.ncold, ncold, "step %u (%s)", step, op);
	EXPECT_EQ(m->a.cold_bytes, cold_bytes, "step %u (%s)", step, op);
	EXPECT_EQ(m->a.writing_units, writing, "step %u (%s)", step, op);
	EXPECT_EQ(m->a.used_bytes, used, "step %u (%s)", step, op);
	/* The page table is charged to the pool as it grows. */
	EXPECT_EQ(m->d.n.pool_used, m->a.heap, "step %u (%s)", step, op);
	EXPECT_EQ(m->a.heap,
		  m->heap0 + (uint64_t)m->a.npages * sizeof(struct page),
		  "step %u (%s)", step, op);
}

typedef const char *(*op_fn)(struct model *m, uint32_t step);

static const struct {
	op_fn fn;
	uint32_t weight;
} ops[] = {
	{ op_alloc, 14 },	{ op_free_open, 4 },   { op_seal, 14 },
	{ op_free_page, 5 },	{ op_write_start, 8 }, { op_write_end, 8 },
	{ op_orphan, 3 },	{ op_read_start, 8 },  { op_read_end, 8 },
	{ op_read_checked, 8 }, { op_drop_cold, 3 },   { op_archive_start, 3 },
	{ op_archive_end, 3 },	{ op_mark, 4 },	       { op_restore, 1 },
};

static op_fn op_pick(struct model *m)
{
	uint32_t total = 0, w;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(ops); i++)
		total += ops[i].weight;
	w = (uint32_t)below(m, total);
	for (i = 0; w >= ops[i].weight; i++)
		w -= ops[i].weight;
	return ops[i].fn;
}

/* Random moves, the tables checked and the counters compared with the
 * model after each; every kind of move must have happened. */
START_TEST(test_random_moves)
{
	struct model *m = model_new(_i);
	uint32_t step, restores = 0, archives = 0, cold = 0, full = 0;
	const char *op;
	char why[160];
	int ret;

	for (step = 0; step < STEPS; step++) {
		do
			op = op_pick(m)(m, step);
		while (!op);
		ret = arena_check(&m->a, why, sizeof(why));
		ck_assert_msg(!ret, "seed %#llx, step %u (%s): %s",
			      (unsigned long long)configs[_i].seed, step, op,
			      why);
		expect_counts(m, step, op);
		restores += !strcmp(op, "restore");
		archives += !strcmp(op, "archive done");
		cold += !strcmp(op, "write end, cold");
		full += !strcmp(op, "alloc (full)") ||
			!strcmp(op, "seal (no page)");
	}
	ck_assert_uint_gt(restores, 0);
	ck_assert_uint_gt(archives, 0);
	ck_assert_uint_gt(cold, 0);
	ck_assert_uint_gt(full, 0);
	model_free(m);
}
END_TEST

/* A few pages of every kind of state: two sealed, one cold, an open slot
 * and a free one. */
static struct model *small(void)
{
	struct model *m = model_new(0);
	struct slot rec = { 0 };
	uint32_t u, pg, i;

	for (i = 0; i < 4; i++) {
		ck_assert_int_eq(arena_slot_alloc(&m->a, 0, &u), 0);
		if (i == 3)
			continue;
		pg = NO_UNIT;
		ck_assert_int_eq(arena_slot_enter(&m->a, u, &pg, &rec), 0);
	}
	ck_assert_int_eq(arena_slot_alloc(&m->a, 1, &u), 0);
	arena_slot_free(&m->a, u);
	arena_write_start(&m->a, 2);
	arena_write_end(&m->a, 2, 1);
	return m;
}

static void expect_broken(const struct model *m, const char *what)
{
	char why[160] = "";

	ck_assert_int_eq(arena_check(&m->a, why, sizeof(why)), -EINVAL);
	ck_assert_msg(strstr(why, what), "\"%s\" does not say \"%s\"", why,
		      what);
}

/* Each break of the tables is found, and said; mended, they pass. */
START_TEST(test_check_finds)
{
	struct model *m = small();
	struct kvmemd_arena *a = &m->a;
	char why[160];
	uint32_t u;

	ck_assert_int_eq(arena_check(a, why, sizeof(why)), 0);
	a->nsealed++;
	expect_broken(m, "nsealed is 3, the tables say 2");
	a->nsealed--;
	a->cold_bytes += KVMEM_SLOT_UNIT;
	expect_broken(m, "cold_bytes");
	a->cold_bytes -= KVMEM_SLOT_UNIT;
	/* Sealed page 0 says it is in page 1's slot. */
	u = a->pages[0].unit;
	a->pages[0].unit = a->pages[1].unit;
	expect_broken(m, "do not hold together");
	a->pages[0].unit = u;
	/* A free slot twice on its list. */
	a->free[1][a->nfree[1]] = a->free[1][0];
	a->nfree[1]++;
	expect_broken(m, "free list 1 has 2 slots, 1 are free");
	a->nfree[1]--;
	/* A page in use on the free chain. */
	a->free_page = 0;
	expect_broken(m, "its free pages do not hold together");
	a->free_page = NO_UNIT;
	/* A page gone while no I/O of it is in flight. */
	a->pages[1].dead = 1;
	expect_broken(m, "page 1 does not hold together");
	a->pages[1].dead = 0;
	ck_assert_int_eq(arena_check(a, why, sizeof(why)), 0);
	model_free(m);
}
END_TEST

/* Tables that do not hold together, or do not fit, are not taken back:
 * the arena keeps none of them. */
START_TEST(test_restore_refuses)
{
	struct model *m = small();
	struct kvmemd_arena b = { 0 };
	struct arena_saved_slot slots[UNITS];
	struct page pages[8];
	struct arena_saved k = { .slots = slots,
				 .nslots = save_slots(&m->a, slots),
				 .pages = pages,
				 .top = m->a.top,
				 .top_page = m->a.top_page,
				 .free_page = m->a.free_page,
				 .seals = m->a.seals };
	char why[160] = "";

	memcpy(pages, m->a.pages, m->a.top_page * sizeof(*pages));
	arena_init(&b, &m->d, UNITS, 0, m->units, m->heap0, m->heap_max);
	ck_assert_int_eq(arena_tables(&b), 0);
	b.heat = m->heat;
	/* The cold page's record says it is in a slot. */
	pages[2].unit = 0;
	ck_assert_int_eq(arena_restore(&b, &k, 1, why, sizeof(why)), -EINVAL);
	ck_assert_msg(strstr(why, "cold page 2"), "%s", why);
	ck_assert_uint_eq(b.top, 0);
	ck_assert_uint_eq(b.top_page, 0);
	ck_assert_uint_eq(b.nsealed, 0);
	pages[2].unit = NO_UNIT;
	/* An archived slot where the session has no archive layout. */
	ck_assert_uint_eq(slots[0].unit, 0);
	slots[0].slot.flags |= SLOT_ARCHIVED;
	ck_assert_int_eq(arena_restore(&b, &k, 0, why, sizeof(why)), -EINVAL);
	ck_assert_uint_eq(b.top, 0);
	slots[0].slot.flags &= (uint8_t)~SLOT_ARCHIVED;
	/* A slot named twice, out of order, or past the top. */
	ck_assert_uint_ge(k.nslots, 2);
	slots[1].unit = slots[0].unit;
	ck_assert_int_eq(arena_restore(&b, &k, 1, why, sizeof(why)), -EINVAL);
	ck_assert_str_eq(why, "its slots do not fit its arena");
	slots[1].unit = k.top;
	ck_assert_int_eq(arena_restore(&b, &k, 1, why, sizeof(why)), -EINVAL);
	ck_assert_str_eq(why, "its slots do not fit its arena");
	ck_assert_uint_eq(b.top, 0);
	slots[1].unit = m->a.slot_units[slots[0].slot.kind];
	k.top = UNITS + 1;
	ck_assert_int_eq(arena_restore(&b, &k, 1, why, sizeof(why)), -EINVAL);
	ck_assert_str_eq(why, "its tables do not fit its arena");
	arena_exit(&b);
	model_free(m);
}
END_TEST

KVMEM_SUITE(arena)
{
	Suite *s = suite_create("arena");
	TCase *tc = tcase_create("arena");

	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_random_moves, 0, (int)ARRAY_SIZE(configs));
	tcase_add_test(tc, test_check_finds);
	tcase_add_test(tc, test_restore_refuses);
	suite_add_tcase(s, tc);
	return s;
}
