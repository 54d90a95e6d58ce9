/*
 * arena.c - a session's slots and pages, and the counters that follow them
 *
 * The arena of a session is carved into slots of two sizes (one per kind
 * of page) from the bottom up, ->top marking how far; a freed slot goes on
 * the free list of its size and is handed out again before more is carved.
 * Its tables are the daemon's own: the client writes the bytes of its
 * slots, never their state.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "kvmemd.h"

/* When both kinds of page have one size they share one free list. */
static int free_list(const struct kvmemd_arena *a, int kind)
{
	return kind && a->slot_units[1] != a->slot_units[0];
}

uint64_t arena_table_bytes(uint32_t nunits, const uint32_t slot_units[2])
{
	uint64_t n = (uint64_t)nunits * sizeof(struct slot);
	int k;

	for (k = 0; k < 2; k++)
		n += (nunits / slot_units[k] + 1) * sizeof(uint32_t);
	return n;
}

void arena_init(struct kvmemd_arena *a, struct kvmemd *d, uint32_t nunits,
		const uint32_t slot_units[2], uint64_t heap, uint64_t heap_max)
{
	a->d = d;
	a->nunits = nunits;
	a->slot_units[0] = slot_units[0];
	a->slot_units[1] = slot_units[1];
	a->free_page = NO_UNIT;
	a->heap = heap;
	a->heap_max = heap_max;
}

int arena_tables(struct kvmemd_arena *a)
{
	int k;

	a->slots = calloc(a->nunits, sizeof(*a->slots));
	for (k = 0; k < 2; k++)
		a->free[k] = malloc((a->nunits / a->slot_units[k] + 1) *
				    sizeof(uint32_t));
	return a->slots && a->free[0] && a->free[1] ? 0 : -ENOMEM;
}

void arena_exit(struct kvmemd_arena *a)
{
	free(a->pages);
	free(a->slots);
	free(a->free[0]);
	free(a->free[1]);
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

/* ---- slots ------------------------------------------------------------ */

int arena_slot_alloc(struct kvmemd_arena *a, int kind, uint32_t *out)
{
	int fl = free_list(a, kind);
	uint32_t u;

	if (a->nfree[fl]) {
		u = a->free[fl][--a->nfree[fl]];
	} else {
		if (a->nunits - a->top < a->slot_units[kind])
			return -ENOMEM;
		u = a->top;
		a->top += a->slot_units[kind];
	}
	memset(&a->slots[u], 0, sizeof(a->slots[u]));
	/* What the client said of the last page here is not about this one. */
	__atomic_store_n(&a->heat[u], 0, __ATOMIC_RELAXED);
	a->slots[u].state = SLOT_OPEN;
	a->slots[u].kind = (uint8_t)kind;
	a->used_bytes += arena_slot_bytes(a, kind);
	a->nopen++;
	*out = u;
	return 0;
}

void arena_slot_free(struct kvmemd_arena *a, uint32_t u)
{
	struct slot *sl = &a->slots[u];
	int fl = free_list(a, sl->kind);

	if (sl->state == SLOT_OPEN) {
		a->nopen--;
	} else if (sl->state == SLOT_SEALED) {
		a->nsealed--;
		a->sealed_bytes -= arena_slot_bytes(a, sl->kind);
		a->ndegraded -= !!(sl->flags & SLOT_DEGRADED);
	}
	a->used_bytes -= arena_slot_bytes(a, sl->kind);
	sl->state = SLOT_FREE;
	a->free[fl][a->nfree[fl]++] = u;
}

/* ---- pages ------------------------------------------------------------ */

int arena_page_new(struct kvmemd_arena *a, uint32_t u, uint32_t layer,
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

void arena_page_free(struct kvmemd_arena *a, uint32_t pg)
{
	struct page *p = &a->pages[pg];

	p->state = PAGE_UNUSED;
	p->next_free = a->free_page;
	a->free_page = pg;
}

/* ---- restore ---------------------------------------------------------- */

int arena_restore(struct kvmemd_arena *a, int archived)
{
	const struct slot *sl;
	uint32_t u, fl;

	for (u = 0; u < a->top;
	     u += sl->state == SLOT_NONE ? 1 : a->slot_units[sl->kind]) {
		sl = &a->slots[u];
		if (sl->state == SLOT_NONE)
			continue;
		if (sl->kind > 1 || sl->state > SLOT_SEALED ||
		    a->top - u < a->slot_units[sl->kind])
			return -EINVAL;
		if (sl->state == SLOT_FREE) {
			fl = (uint32_t)free_list(a, sl->kind);
			if (a->nfree[fl] > a->nunits / a->slot_units[sl->kind])
				return -EINVAL;
			a->free[fl][a->nfree[fl]++] = u;
			continue;
		}
		a->used_bytes += arena_slot_bytes(a, sl->kind);
		if (sl->state == SLOT_OPEN) {
			a->nopen++;
			continue;
		}
		if (sl->page >= a->top_page ||
		    a->pages[sl->page].state != PAGE_RESIDENT ||
		    a->pages[sl->page].unit != u ||
		    ((sl->flags & SLOT_ARCHIVED) && !archived))
			return -EINVAL;
		a->nsealed++;
		a->sealed_bytes += arena_slot_bytes(a, sl->kind);
		a->ndegraded += !!(sl->flags & SLOT_DEGRADED);
	}
	return u == a->top ? 0 : -EINVAL;
}
