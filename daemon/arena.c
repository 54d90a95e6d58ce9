/* SPDX-License-Identifier: MIT */
/*
 * arena.c - a session's slots and pages, and the counters that follow them
 *
 * The arena of a session is carved into slots of two sizes (one per kind
 * of page) from the bottom up, ->top marking how far; a freed slot goes on
 * the free list of its size and is handed out again before more is carved.
 * Its tables are the daemon's own: the client writes the bytes of its
 * slots, never their state.
 *
 * A page and the slot it is in name each other (page->unit, slot->page).
 * Every change of either goes through a function here that leaves both
 * tables whole and every counter the sum arena_check() finds when it
 * counts them again; a page enters a sealed slot in arena_slot_enter()
 * alone, whether the client sealed it, it was read back from the store or
 * it is its own archived copy. Built with -DKVMEMD_DEBUG, each of those
 * functions ends with that check (tests/check_arena.c drives them all at
 * random against a model); otherwise nothing is counted twice.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "kvmemd.h"

static void arena_debug(const struct kvmemd_arena *a);

/* After every change: counted, for the session's record, and checked
 * under KVMEMD_DEBUG. */
static void changed(struct kvmemd_arena *a)
{
	a->changes++;
	arena_debug(a);
}

/* When both kinds of page have one size they share one free list. */
static int free_list(const struct kvmemd_arena *a, int kind)
{
	return kind && a->slot_units[1] != a->slot_units[0];
}

/* Where the slot after the one at @u starts (a unit that starts none is
 * stepped over). */
static uint32_t slot_next(const struct kvmemd_arena *a, uint32_t u)
{
	const struct slot *sl = &a->slots[u];

	return u + (sl->state == SLOT_NONE ? 1 : a->slot_units[sl->kind]);
}

/* Entries a free list of slots of @slot_units needs in @units. */
static size_t free_cap(uint32_t units, uint32_t slot_units)
{
	return units ? units / slot_units + 1 : 0;
}

uint64_t arena_table_bytes(uint32_t nunits, uint32_t gpu_units,
			   const uint32_t slot_units[2])
{
	uint64_t n = ((uint64_t)nunits + gpu_units) * sizeof(struct slot);
	int k;

	for (k = 0; k < 2; k++)
		n += (free_cap(nunits, slot_units[k]) +
		      free_cap(gpu_units, slot_units[k])) *
		     sizeof(uint32_t);
	return n;
}

void arena_init(struct kvmemd_arena *a, struct kvmemd *d, uint32_t nunits,
		uint32_t gpu_units, const uint32_t slot_units[2], uint64_t heap,
		uint64_t heap_max)
{
	a->d = d;
	a->nunits = nunits;
	a->gpu_units = gpu_units;
	a->gpu_top = nunits;
	a->slot_units[0] = slot_units[0];
	a->slot_units[1] = slot_units[1];
	a->free_page = NO_UNIT;
	a->heap = heap;
	a->heap_max = heap_max;
}

int arena_tables(struct kvmemd_arena *a)
{
	int k;

	a->slots = calloc((size_t)a->nunits + a->gpu_units, sizeof(*a->slots));
	for (k = 0; k < 2; k++) {
		a->free[k] = malloc(free_cap(a->nunits, a->slot_units[k]) *
				    sizeof(uint32_t));
		if (!a->free[k])
			return -ENOMEM;
		if (!a->gpu_units)
			continue;
		a->gpu_free[k] =
			malloc(free_cap(a->gpu_units, a->slot_units[k]) *
			       sizeof(uint32_t));
		if (!a->gpu_free[k])
			return -ENOMEM;
	}
	return a->slots ? 0 : -ENOMEM;
}

void arena_exit(struct kvmemd_arena *a)
{
	arena_limbo_off(a);
	free(a->pages);
	free(a->slots);
	free(a->free[0]);
	free(a->free[1]);
	free(a->gpu_free[0]);
	free(a->gpu_free[1]);
}

int arena_heap_get(struct kvmemd_arena *a, size_t bytes)
{
	struct kvmemd *d = a->d;

	if (bytes > a->heap_max - a->heap ||
	    bytes > d->cfg.host_bytes - d->n.pool_used)
		return -ENOMEM;
	a->heap += bytes;
	d->n.pool_used += bytes;
	return 0;
}

void arena_heap_put(struct kvmemd_arena *a, size_t bytes)
{
	a->heap -= bytes;
	a->d->n.pool_used -= bytes;
}

/* ---- the slot limbo of a live record ---------------------------------- */

int arena_limbo_on(struct kvmemd_arena *a)
{
	size_t n = (a->nunits + 7) / 8;

	if (a->limbo)
		return 0;
	if (arena_heap_get(a, 2 * n))
		return -ENOMEM;
	a->limbo = calloc(2, n);
	if (!a->limbo) {
		arena_heap_put(a, 2 * n);
		return -ENOMEM;
	}
	a->limbo_bytes = n;
	return 0;
}

void arena_limbo_off(struct kvmemd_arena *a)
{
	if (!a->limbo)
		return;
	free(a->limbo);
	arena_heap_put(a, 2 * a->limbo_bytes);
	a->limbo = NULL;
	a->limbo_bytes = 0;
}

void arena_limbo_mark(struct kvmemd_arena *a)
{
	size_t i;

	for (i = 0; a->limbo && i < a->limbo_bytes; i++) {
		a->limbo[a->limbo_bytes + i] |= a->limbo[i];
		a->limbo[i] = 0;
	}
}

void arena_limbo_clear(struct kvmemd_arena *a)
{
	if (a->limbo)
		memset(a->limbo + a->limbo_bytes, 0, a->limbo_bytes);
}

static int in_limbo(const struct kvmemd_arena *a, uint32_t u)
{
	const uint8_t bit = (uint8_t)(1u << u % 8);

	return (a->limbo[u / 8] | a->limbo[a->limbo_bytes + u / 8]) & bit;
}

/* ---- slots ------------------------------------------------------------ */

/*
 * Where on free list @fl a slot for the daemon's own write is: the last
 * that no record may still name (all of them without a live record), or
 * -1 for none.
 */
static long free_pick(const struct kvmemd_arena *a, int fl,
		      enum slot_state state)
{
	uint32_t i = a->nfree[fl];

	if (state == SLOT_OPEN || !a->limbo)
		return (long)i - 1;
	while (i-- > 0)
		if (!in_limbo(a, a->free[fl][i]))
			return (long)i;
	return -1;
}

/* A slot of @kind in @state in the GPU tier, from its free list or
 * carved above ->gpu_top; no record names those. */
static int gpu_take(struct kvmemd_arena *a, int kind, uint32_t *out)
{
	int fl = free_list(a, kind);

	if (a->gpu_nfree[fl]) {
		*out = a->gpu_free[fl][--a->gpu_nfree[fl]];
		return 0;
	}
	if (a->nunits + a->gpu_units - a->gpu_top < a->slot_units[kind])
		return -ENOMEM;
	*out = a->gpu_top;
	a->gpu_top += a->slot_units[kind];
	return 0;
}

/* A slot of @kind in @state, from its free list or carved above ->top;
 * in the GPU tier with @gpu. */
static int slot_take(struct kvmemd_arena *a, int kind, int gpu,
		     enum slot_state state, uint32_t *out)
{
	int fl = free_list(a, kind);
	long i;
	uint32_t u;

	if (gpu) {
		if (gpu_take(a, kind, &u))
			return -ENOMEM;
		a->gpu_used_bytes += arena_slot_bytes(a, kind);
	} else if ((i = free_pick(a, fl, state)) >= 0) {
		u = a->free[fl][i];
		a->free[fl][i] = a->free[fl][--a->nfree[fl]];
	} else {
		/* Free ones there are, once the record is written. */
		if (a->nunits - a->top < a->slot_units[kind])
			return a->nfree[fl] ? -EBUSY : -ENOMEM;
		u = a->top;
		a->top += a->slot_units[kind];
	}
	memset(&a->slots[u], 0, sizeof(a->slots[u]));
	/* What the client said of the last page here is not about this
	 * one. */
	__atomic_store_n(&a->heat[u], 0, __ATOMIC_RELAXED);
	if (!gpu)
		a->used_bytes += arena_slot_bytes(a, kind);
	a->slots[u].state = (uint8_t)state;
	a->slots[u].kind = (uint8_t)kind;
	a->nopen += state == SLOT_OPEN;
	*out = u;
	return 0;
}

/* Slot @u, in whatever state, back on its free list. */
static void slot_release(struct kvmemd_arena *a, uint32_t u)
{
	struct slot *sl = &a->slots[u];
	int fl = free_list(a, sl->kind);
	const int gpu = arena_unit_gpu(a, u);

	if (sl->state == SLOT_OPEN) {
		a->nopen--;
	} else if (sl->state == SLOT_SEALED) {
		a->nsealed--;
		if (!gpu)
			a->sealed_bytes -= arena_slot_bytes(a, sl->kind);
		a->ndegraded -= !!(sl->flags & SLOT_DEGRADED);
		if (gpu)
			a->gpu_ndegraded -= !!(sl->flags & SLOT_DEGRADED);
	}
	sl->state = SLOT_FREE;
	if (gpu) {
		a->gpu_used_bytes -= arena_slot_bytes(a, sl->kind);
		a->gpu_free[fl][a->gpu_nfree[fl]++] = u;
		return;
	}
	a->used_bytes -= arena_slot_bytes(a, sl->kind);
	a->free[fl][a->nfree[fl]++] = u;
	if (a->limbo)
		a->limbo[u / 8] |= (uint8_t)(1u << u % 8);
}

int arena_slot_alloc(struct kvmemd_arena *a, int kind, uint32_t *out)
{
	int ret = slot_take(a, kind, 0, SLOT_OPEN, out);

	changed(a);
	return ret;
}

int arena_slot_reserve(struct kvmemd_arena *a, int kind, int gpu, uint32_t *out)
{
	int ret = gpu && !a->gpu_units
			  ? -ENOMEM
			  : slot_take(a, kind, gpu, SLOT_ARCHIVING, out);

	changed(a);
	return ret;
}

void arena_slot_free(struct kvmemd_arena *a, uint32_t u)
{
	slot_release(a, u);
	changed(a);
}

unsigned int arena_slot_mark(struct kvmemd_arena *a, uint32_t u,
			     unsigned int flags)
{
	struct slot *sl = &a->slots[u];
	unsigned int fresh = flags & ~(unsigned int)sl->flags;

	sl->flags |= (uint8_t)fresh;
	a->ndegraded += !!(fresh & SLOT_DEGRADED);
	if (arena_unit_gpu(a, u))
		a->gpu_ndegraded += !!(fresh & SLOT_DEGRADED);
	changed(a);
	return fresh;
}

/* ---- pages ------------------------------------------------------------ */

/* A new page for the open slot at @u, about to be sealed: @layer's from
 * @token_start. 0, or -ENOMEM. */
static int page_new(struct kvmemd_arena *a, uint32_t u, uint32_t layer,
		    uint32_t token_start, uint32_t *out)
{
	struct page *p;
	uint32_t pg, n;

	if (a->free_page != NO_UNIT) {
		pg = a->free_page;
		a->free_page = a->pages[pg].next_free;
	} else {
		if (a->top_page == a->npages) {
			n = a->npages ? a->npages * 2 : 64;
			if (n <= a->npages || n >= NO_UNIT ||
			    arena_heap_get(a, (size_t)(n - a->npages) *
						      sizeof(*p)))
				return -ENOMEM;
			p = realloc(a->pages, (size_t)n * sizeof(*p));
			if (!p) {
				arena_heap_put(a, (size_t)(n - a->npages) *
							  sizeof(*p));
				return -ENOMEM;
			}
			a->pages = p;
			a->npages = n;
		}
		pg = a->top_page++;
	}
	p = &a->pages[pg];
	memset(p, 0, sizeof(*p));
	p->state = PAGE_RESIDENT;
	p->kind = a->slots[u].kind;
	p->unit = u;
	p->client_slot = u;
	p->layer = layer;
	p->token_start = token_start;
	*out = pg;
	return 0;
}

int arena_slot_enter(struct kvmemd_arena *a, uint32_t u, uint32_t *pg,
		     const struct slot *rec)
{
	struct slot *sl = &a->slots[u];
	const uint8_t kind = sl->kind;
	struct page *p;
	int ret;

	if (*pg == NO_UNIT) {
		ret = page_new(a, u, rec->layer, rec->token_start, pg);
		if (ret)
			return ret;
	}
	p = &a->pages[*pg];
	if (sl->state == SLOT_OPEN) {
		a->nopen--;
	} else if (sl->state == SLOT_LOADING) {
		/* Its bytes are back: no longer only on the store. */
		a->ncold--;
		a->cold_bytes -= arena_slot_bytes(a, kind);
	}
	/* An archived copy, or a move to the other tier: the page leaves
	 * the slot it was in, and what the client's attention said of it
	 * still holds. */
	if (p->unit != u) {
		__atomic_store_n(
			&a->heat[u],
			__atomic_load_n(&a->heat[p->unit], __ATOMIC_RELAXED),
			__ATOMIC_RELAXED);
		slot_release(a, p->unit);
	}
	*sl = *rec;
	sl->state = SLOT_SEALED;
	sl->kind = kind;
	sl->page = *pg;
	sl->seal = ++a->seals;
	p->unit = u;
	a->nsealed++;
	if (!arena_unit_gpu(a, u))
		a->sealed_bytes += arena_slot_bytes(a, kind);
	a->ndegraded += !!(sl->flags & SLOT_DEGRADED);
	if (arena_unit_gpu(a, u))
		a->gpu_ndegraded += !!(sl->flags & SLOT_DEGRADED);
	changed(a);
	return 0;
}

/* Is @p only on the store: cold, or being read into a slot not yet
 * sealed? */
static int cold(const struct kvmemd_arena *a, const struct page *p)
{
	return p->state == PAGE_COLD ||
	       (p->state == PAGE_READING &&
		a->slots[p->unit].state == SLOT_LOADING);
}

void arena_page_free(struct kvmemd_arena *a, uint32_t pg)
{
	struct page *p = &a->pages[pg];

	if (cold(a, p)) {
		a->ncold--;
		a->cold_bytes -= arena_slot_bytes(a, p->kind);
	}
	if (p->state == PAGE_WRITING)
		a->writing_units -= a->slot_units[p->kind];
	if (p->unit != NO_UNIT)
		slot_release(a, p->unit);
	p->state = PAGE_UNUSED;
	p->unit = NO_UNIT;
	p->next_free = a->free_page;
	a->free_page = pg;
	changed(a);
}

void arena_page_orphan(struct kvmemd_arena *a, uint32_t pg)
{
	struct page *p = &a->pages[pg];

	p->dead = 1;
	/* The copy on its way out is the write's: the slot is not needed. */
	if (p->state == PAGE_WRITING) {
		slot_release(a, p->unit);
		p->unit = NO_UNIT;
	}
	changed(a);
}

void arena_write_start(struct kvmemd_arena *a, uint32_t pg)
{
	struct page *p = &a->pages[pg];

	p->state = PAGE_WRITING;
	a->writing_units += a->slot_units[p->kind];
	changed(a);
}

void arena_write_end(struct kvmemd_arena *a, uint32_t pg, int to_store)
{
	struct page *p = &a->pages[pg];

	a->writing_units -= a->slot_units[p->kind];
	if (to_store) {
		p->cold = a->slots[p->unit];
		slot_release(a, p->unit);
		p->unit = NO_UNIT;
		p->state = PAGE_COLD;
		a->ncold++;
		a->cold_bytes += arena_slot_bytes(a, p->kind);
	} else {
		p->state = PAGE_RESIDENT;
	}
	changed(a);
}

int arena_read_start(struct kvmemd_arena *a, uint32_t pg, uint32_t *out)
{
	struct page *p = &a->pages[pg];
	int ret;

	ret = slot_take(a, p->kind, 0, SLOT_LOADING, out);
	if (!ret) {
		a->slots[*out].page = pg;
		p->unit = *out;
		p->state = PAGE_READING;
	}
	changed(a);
	return ret;
}

void arena_read_fail(struct kvmemd_arena *a, uint32_t pg)
{
	struct page *p = &a->pages[pg];

	slot_release(a, p->unit);
	p->unit = NO_UNIT;
	p->state = PAGE_COLD;
	p->cold.flags |= SLOT_READ_FAILED;
	changed(a);
}

int arena_read_error(struct kvmemd_arena *a, uint32_t pg)
{
	struct page *p = &a->pages[pg];

	if (p->state != PAGE_COLD || !(p->cold.flags & SLOT_READ_FAILED))
		return 0;
	p->cold.flags &= (uint8_t)~SLOT_READ_FAILED;
	return 1;
}

void arena_read_checked(struct kvmemd_arena *a, uint32_t pg)
{
	a->pages[pg].state = PAGE_RESIDENT;
	changed(a);
}

/* ---- what the tables add up to --------------------------------------- */

/* What the tables add up to, counted afresh from them. */
struct tally {
	uint64_t used_bytes, gpu_used_bytes, nopen, nsealed, sealed_bytes;
	uint64_t ndegraded, gpu_ndegraded, ncold, cold_bytes, writing_units;
	uint32_t nfree[2][2]; /* free slots, [gpu][free_list(kind)] */
	uint32_t unused; /* pages */
	uint32_t holding, held; /* slots that hold a page, pages in one */
};

/* The arena's counters, each a sum over its tables: 64-bit fields of
 * both (a compile error otherwise). */
#define COUNTER(x)                                                \
	.name = #x,                                               \
	.off = offsetof(struct kvmemd_arena, x) +                 \
	       0 * sizeof(_Generic(((struct kvmemd_arena *)0)->x, \
				   uint64_t : 1)),                \
	.tally_off =                                              \
		offsetof(struct tally, x) +                       \
		0 * sizeof(_Generic(((struct tally *)0)->x, uint64_t : 1))

static const struct {
	const char *name;
	size_t off, tally_off;
} counters[] = {
	{ COUNTER(used_bytes) },    { COUNTER(gpu_used_bytes) },
	{ COUNTER(nopen) },	    { COUNTER(nsealed) },
	{ COUNTER(sealed_bytes) },  { COUNTER(ndegraded) },
	{ COUNTER(gpu_ndegraded) }, { COUNTER(ncold) },
	{ COUNTER(cold_bytes) },    { COUNTER(writing_units) },
};

/* The counter at @off of an arena or a tally. */
static uint64_t counter(const void *base, size_t off)
{
	uint64_t n;

	memcpy(&n, (const char *)base + off, sizeof(n));
	return n;
}

static int bad(char *why, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int bad(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* Sealed slot @sl at @u, or one being loaded: the page it holds holds it. */
static int slot_holds(const struct kvmemd_arena *a, const struct slot *sl,
		      uint32_t u)
{
	const struct page *p;

	if (sl->page >= a->top_page)
		return 0;
	p = &a->pages[sl->page];
	if (p->unit != u)
		return 0;
	if (sl->state == SLOT_LOADING)
		return p->state == PAGE_READING;
	return p->state == PAGE_RESIDENT || p->state == PAGE_WRITING ||
	       p->state == PAGE_READING;
}

/* Is @u below the top of its tier? */
static int unit_carved(const struct kvmemd_arena *a, uint32_t u)
{
	return u < a->top || (u >= a->nunits && u < a->gpu_top);
}

/* The slots of the host (@gpu 0) or the GPU tier: each where the one
 * before it ends, each in a state, those that hold a page held by it; a
 * slot in the GPU tier only for a page the daemon moved there. */
static int tally_slots(const struct kvmemd_arena *a, int gpu, int kept,
		       int archived, struct tally *t, char *why, size_t len)
{
	const uint32_t top = gpu ? a->gpu_top : a->top;
	const struct slot *sl;
	uint32_t u;

	for (u = gpu ? a->nunits : 0; u < top; u = slot_next(a, u)) {
		sl = &a->slots[u];
		if (sl->state == SLOT_NONE)
			continue;
		if (sl->kind > 1 ||
		    sl->state > (kept ? SLOT_SEALED : SLOT_ARCHIVING) ||
		    top - u < a->slot_units[sl->kind] ||
		    (gpu &&
		     (sl->state == SLOT_OPEN || sl->state == SLOT_LOADING)))
			return bad(why, len, "slot %u does not hold together",
				   u);
		if (sl->state == SLOT_FREE) {
			/* Each takes its size below its top: the list has
			 * room for all. */
			t->nfree[gpu][free_list(a, sl->kind)]++;
			continue;
		}
		if (gpu)
			t->gpu_used_bytes += arena_slot_bytes(a, sl->kind);
		else
			t->used_bytes += arena_slot_bytes(a, sl->kind);
		t->nopen += sl->state == SLOT_OPEN;
		if (sl->state != SLOT_SEALED && sl->state != SLOT_LOADING)
			continue;
		if (!slot_holds(a, sl, u) ||
		    ((sl->flags & SLOT_ARCHIVED) && !archived))
			return bad(why, len,
				   "slot %u and its page %u do not hold "
				   "together",
				   u, sl->page);
		t->holding++;
		if (sl->state == SLOT_LOADING)
			continue;
		t->nsealed++;
		if (!gpu)
			t->sealed_bytes += arena_slot_bytes(a, sl->kind);
		t->ndegraded += !!(sl->flags & SLOT_DEGRADED);
		if (gpu)
			t->gpu_ndegraded += !!(sl->flags & SLOT_DEGRADED);
	}
	if (u != top)
		return bad(why, len, "its last slot runs past its top");
	return 0;
}

/* Page @p in a slot: one that holds it back. */
static int page_held(const struct kvmemd_arena *a, const struct page *p,
		     uint32_t pg)
{
	const struct slot *sl;

	if (!unit_carved(a, p->unit))
		return 0;
	sl = &a->slots[p->unit];
	return sl->page == pg && sl->kind == p->kind &&
	       (sl->state == SLOT_SEALED ||
		(sl->state == SLOT_LOADING && p->state == PAGE_READING));
}

/* The pages: each in a slot that holds it, or cold and the slot it left
 * recorded; dead only while its I/O is in flight. */
static int tally_pages(const struct kvmemd_arena *a, int kept, int archived,
		       struct tally *t, char *why, size_t len)
{
	const struct page *p;
	uint32_t pg, n;

	for (pg = 0; pg < a->top_page; pg++) {
		p = &a->pages[pg];
		if (p->state == PAGE_UNUSED) {
			t->unused++;
			continue;
		}
		if (p->kind > 1 || p->state > PAGE_READING ||
		    (kept && p->state != PAGE_RESIDENT &&
		     p->state != PAGE_COLD) ||
		    (p->dead && p->state != PAGE_WRITING &&
		     p->state != PAGE_READING))
			return bad(why, len, "page %u does not hold together",
				   pg);
		if (p->state == PAGE_WRITING)
			t->writing_units += a->slot_units[p->kind];
		if (p->state == PAGE_COLD) {
			if (p->unit != NO_UNIT || p->cold.kind != p->kind ||
			    p->cold.state != SLOT_SEALED ||
			    ((p->cold.flags & SLOT_ARCHIVED) && !archived))
				return bad(why, len,
					   "cold page %u does not hold "
					   "together",
					   pg);
		} else if (p->state == PAGE_WRITING && p->dead) {
			/* Its slot went when its last holder let go. */
			if (p->unit != NO_UNIT)
				return bad(why, len,
					   "page %u, gone, is in slot %u", pg,
					   p->unit);
			continue;
		} else if (!page_held(a, p, pg)) {
			return bad(why, len,
				   "page %u and its slot %u do not hold "
				   "together",
				   pg, p->unit);
		} else {
			t->held++;
		}
		if (cold(a, p)) {
			t->ncold++;
			t->cold_bytes += arena_slot_bytes(a, p->kind);
		}
	}
	/* Every page that holds a slot is one a slot holds, and back. */
	if (t->held != t->holding)
		return bad(why, len, "%u pages are in slots, %u slots hold one",
			   t->held, t->holding);
	for (pg = a->free_page, n = 0; pg != NO_UNIT;
	     pg = a->pages[pg].next_free, n++)
		if (n == t->unused || pg >= a->top_page ||
		    a->pages[pg].state != PAGE_UNUSED)
			break;
	if (pg != NO_UNIT || n != t->unused)
		return bad(why, len, "its free pages do not hold together");
	return 0;
}

/* Count what the tables add up to: 0, or -EINVAL and what does not hold
 * together in @why. @kept: no move may be under way. */
static int tally(const struct kvmemd_arena *a, int kept, int archived,
		 struct tally *t, char *why, size_t len)
{
	memset(t, 0, sizeof(*t));
	if (a->top > a->nunits || a->gpu_top < a->nunits ||
	    a->gpu_top - a->nunits > a->gpu_units || a->top_page > a->npages)
		return bad(why, len, "its tables do not fit its arena");
	if (tally_slots(a, 0, kept, archived, t, why, len) ||
	    tally_slots(a, 1, kept, archived, t, why, len))
		return -EINVAL;
	return tally_pages(a, kept, archived, t, why, len);
}

/*
 * Each free list holds the free slots of its size, each once: the slots
 * the walk found free are marked in @seen, and each entry takes its mark
 * away.
 */
static int free_lists_check(const struct kvmemd_arena *a, const struct tally *t,
			    uint8_t *seen, char *why, size_t len)
{
	uint32_t u, i, n;
	const uint32_t *list;
	int fl, gpu;

	for (gpu = 0; gpu < 2; gpu++)
		for (u = gpu ? a->nunits : 0; u < (gpu ? a->gpu_top : a->top);
		     u = slot_next(a, u))
			if (a->slots[u].state == SLOT_FREE)
				seen[u / 8] |= (uint8_t)(1u << u % 8);
	for (gpu = 0; gpu < 2; gpu++) {
		for (fl = 0; fl < 2; fl++) {
			n = gpu ? a->gpu_nfree[fl] : a->nfree[fl];
			list = gpu ? a->gpu_free[fl] : a->free[fl];
			if (n != t->nfree[gpu][fl])
				return bad(why, len,
					   "free list %d%s has %u slots, %u "
					   "are free",
					   fl, gpu ? " of the GPU" : "", n,
					   t->nfree[gpu][fl]);
			for (i = 0; i < n; i++) {
				u = list[i];
				if (!unit_carved(a, u) ||
				    arena_unit_gpu(a, u) != gpu ||
				    !(seen[u / 8] & 1u << u % 8) ||
				    free_list(a, a->slots[u].kind) != fl)
					return bad(why, len,
						   "free list %d: slot %u is "
						   "not a free slot of it, or "
						   "is there twice",
						   fl, u);
				seen[u / 8] &= (uint8_t) ~(1u << u % 8);
			}
		}
	}
	return 0;
}

int arena_check(const struct kvmemd_arena *a, char *why, size_t len)
{
	struct tally t;
	uint8_t *seen;
	uint64_t n, m;
	size_t i;
	int ret;

	ret = tally(a, 0, 1, &t, why, len);
	if (ret)
		return ret;
	for (i = 0; i < ARRAY_SIZE(counters); i++) {
		n = counter(a, counters[i].off);
		m = counter(&t, counters[i].tally_off);
		if (n != m)
			return bad(why, len, "%s is %llu, the tables say %llu",
				   counters[i].name, (unsigned long long)n,
				   (unsigned long long)m);
	}
	seen = calloc(a->gpu_top / 8 + 1, 1);
	if (!seen) {
		snprintf(why, len, "out of memory");
		return -ENOMEM;
	}
	ret = free_lists_check(a, &t, seen, why, len);
	free(seen);
	return ret;
}

#ifdef KVMEMD_DEBUG
/* A debug build checks the tables after every change: the first change
 * that breaks them is the one that aborts. */
static void arena_debug(const struct kvmemd_arena *a)
{
	char why[160];

	if (arena_check(a, why, sizeof(why)) == -EINVAL) {
		fprintf(stderr, "kvmemd: arena: %s\n", why);
		abort();
	}
}
#else
static void arena_debug(const struct kvmemd_arena *a)
{
	(void)a;
}
#endif

/* ---- tables a restart brought back ------------------------------------ */

uint32_t arena_slot_count(const struct kvmemd_arena *a)
{
	uint32_t u, n = 0;

	for (u = 0; u < a->top; u = slot_next(a, u))
		n += a->slots[u].state != SLOT_NONE;
	return n;
}

int arena_restore(struct kvmemd_arena *a, const struct arena_saved *k,
		  int archived, char *why, size_t len)
{
	struct tally t;
	uint32_t n, u;
	size_t i;
	int fl;

	if (k->top > a->nunits || k->top_page >= NO_UNIT)
		return bad(why, len, "its tables do not fit its arena");
	/* Each slot below ->top, in order, past the end of the one before. */
	for (i = 0; i < k->nslots; i++)
		if (k->slots[i].unit >= k->top || k->slots[i].slot.kind > 1 ||
		    (i &&
		     k->slots[i].unit <
			     k->slots[i - 1].unit +
				     a->slot_units[k->slots[i - 1].slot.kind]))
			return bad(why, len, "its slots do not fit its arena");
	n = k->top_page > 64 ? k->top_page : 64;
	if (arena_heap_get(a, (size_t)n * sizeof(struct page)))
		goto nomem;
	a->pages = calloc(n, sizeof(struct page));
	if (!a->pages) {
		arena_heap_put(a, (size_t)n * sizeof(struct page));
		goto nomem;
	}
	a->npages = n;
	memset(a->slots, 0, (size_t)k->top * sizeof(struct slot));
	for (i = 0; i < k->nslots; i++)
		a->slots[k->slots[i].unit] = k->slots[i].slot;
	memcpy(a->pages, k->pages, (size_t)k->top_page * sizeof(struct page));
	a->top = k->top;
	a->top_page = k->top_page;
	a->free_page = k->free_page;
	a->seals = k->seals;
	if (tally(a, 1, archived, &t, why, len)) {
		/* None of it is kept: no page of it names store units. */
		free(a->pages);
		a->pages = NULL;
		arena_heap_put(a, (size_t)n * sizeof(struct page));
		a->npages = a->top = a->top_page = a->seals = 0;
		a->free_page = NO_UNIT;
		return -EINVAL;
	}
	for (u = 0; u < a->top; u = slot_next(a, u)) {
		fl = free_list(a, a->slots[u].kind);
		if (a->slots[u].state == SLOT_FREE)
			a->free[fl][a->nfree[fl]++] = u;
	}
	for (i = 0; i < ARRAY_SIZE(counters); i++)
		memcpy((char *)a + counters[i].off,
		       (const char *)&t + counters[i].tally_off,
		       sizeof(uint64_t));
	changed(a);
	return 0;
nomem:
	snprintf(why, len, "no memory for its page table");
	return -ENOMEM;
}
