/* SPDX-License-Identifier: MIT */
/*
 * arena.h - a session's arena: its slots, the pages in them, and what they
 * add up to
 *
 * The arena is the only writer of a slot's and a page's state, of the free
 * lists and of the counters that follow from them; session.c, tier.c,
 * archive.c, resume.c and ras.c move slots and pages through the functions
 * here. It knows slots and pages, not sequences, the ring or the store.
 * Event loop thread only, but for arena_tables().
 */
#ifndef KVMEMD_ARENA_H
#define KVMEMD_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "kvmem/uapi.h"

struct kvmemd;

#define NO_UNIT UINT32_MAX

enum slot_state {
	SLOT_NONE = 0, /* not the start of a slot, or never handed out */
	SLOT_FREE, /* on a free list */
	SLOT_OPEN, /* the client's, being written */
	SLOT_SEALED, /* full, immutable, a page's bytes */
	SLOT_LOADING, /* a page being read back from the store into it */
	SLOT_ARCHIVING, /* the daemon's, for a page being archived */
};

#define SLOT_DEGRADED (1u << 0) /* holds values no code could correct */
#define SLOT_CRC_BAD (1u << 1) /* its CRC no longer matches, reported */
#define SLOT_READ_FAILED (1u << 2) /* cold: the last read of it failed */
#define SLOT_ARCHIVED (1u << 3) /* in the session's archive layout */
#define SLOT_NO_ARCHIVE (1u << 4) /* its archiving was refused: not again */

/*
 * A slot of the arena. A sealed one keeps what its header said when it was
 * sealed, so the scrubber can tell a damaged header from a good one and
 * write it back, and the page it holds.
 */
struct slot {
	uint8_t state; /* enum slot_state */
	uint8_t kind; /* enum kvmem_slot_kind */
	uint8_t flags; /* SLOT_* */
	uint8_t hdr_flags; /* KVMEM_HDR_* */
	uint32_t page; /* SLOT_SEALED, SLOT_LOADING: pages[] index */
	uint32_t seq;
	uint32_t layer;
	uint32_t token_start;
	uint32_t ntokens;
	uint32_t crc;
	/* uncorrectable words the scrubber already reported */
	uint32_t ue_scales, ue_payload;
	uint32_t seal; /* which sealing of the slot: a check of an earlier
			* one is over */
	uint64_t generation;
};

enum page_state {
	PAGE_UNUSED = 0, /* on the free list */
	PAGE_RESIDENT, /* in the arena at ->unit */
	PAGE_WRITING, /* resident, a copy on its way to the store */
	PAGE_COLD, /* only on the store, at ->store_unit */
	PAGE_READING, /* on its way back into the slot at ->unit */
};

/*
 * A sealed page, wherever its bytes are. Sequences hold pages, not slots:
 * a page that goes to the store and comes back lands in another slot, and
 * every sequence holding it follows. The client knows a page by the slot
 * it last saw it in (->client_slot); SEQ_ACQUIRE tells it the new one.
 */
struct page {
	uint8_t state; /* enum page_state */
	uint8_t moved; /* in a slot or codec the client was not told of */
	uint8_t dead; /* no sequence holds it; freed when its I/O ends */
	uint8_t kind; /* enum kvmem_slot_kind */
	uint32_t unit; /* arena slot, NO_UNIT while cold */
	uint32_t refs; /* sequences holding it */
	uint32_t pins; /* acquired sequences holding it: it may not move */
	uint32_t client_slot;
	uint32_t next_free;
	uint32_t layer, token_start; /* its name in the ABI */
	uint64_t store_unit; /* PAGE_WRITING, PAGE_COLD, PAGE_READING */
	uint32_t store_crc; /* CRC-32C of the whole page as it was written */
	uint64_t released; /* CLOCK_MONOTONIC ns when it was last unpinned */
	struct slot cold; /* PAGE_COLD, PAGE_READING: its slot as it was */
};

struct kvmemd_arena {
	struct kvmemd *d; /* whose host pool ->heap is charged to */
	struct slot *slots; /* [unit] */
	uint32_t nunits, top; /* units carved so far */
	uint32_t slot_units[2]; /* [kind] */
	uint32_t *free[2], nfree[2]; /* [free_list(kind)] */
	/*
	 * The GPU tier (KVMEM_FEAT_GPU_TIER): units [nunits, nunits +
	 * gpu_units) are slots in the session's GPU memory, carved from
	 * nunits up to gpu_top, freed ones on gpu_free[]. Only the daemon
	 * puts a page there (a move, tier.c); the client reads it there.
	 * 0 units: no such tier. Host slots count in ->used_bytes and
	 * ->sealed_bytes, these in ->gpu_used_bytes (all sealed, or being
	 * moved into). The heat array covers both.
	 */
	uint32_t gpu_units, gpu_top;
	uint32_t *gpu_free[2], gpu_nfree[2];
	uint16_t *heat; /* [unit], the client's: a new slot's starts at 0 */
	struct page *pages;
	uint32_t npages, top_page, free_page; /* free_page: NO_UNIT for none */
	uint32_t seals; /* slots sealed: numbers slot.seal */
	uint64_t changes; /* to its tables, so far */
	/*
	 * With a live record (resume.c): bitmaps of the slots freed since
	 * the copy for the record being written was taken ([0]) and before
	 * it, until that record is written ([1]). The record a restart after
	 * a crash would take may still name what was in them: the daemon's
	 * own moves (a page read back, an archived copy) write none of them.
	 * A client's slot is safe: the client learns of it only once a
	 * record that has it is written. NULL: no live record.
	 */
	uint8_t *limbo;
	size_t limbo_bytes; /* of each bitmap */
	/* what the tables add up to */
	uint64_t used_bytes, gpu_used_bytes, nopen, nsealed;
	uint64_t sealed_bytes, ndegraded;
	uint64_t gpu_ndegraded; /* of ->ndegraded, in the GPU tier */
	uint64_t ncold, cold_bytes; /* pages only on the store */
	uint64_t writing_units; /* slots that writes in flight will free */
	/* daemon memory the session holds (these tables, its sequences and
	 * page records), charged to the host pool, and the most it may */
	uint64_t heap, heap_max;
};

static inline uint64_t arena_slot_bytes(const struct kvmemd_arena *a, int kind)
{
	return (uint64_t)a->slot_units[kind] * KVMEM_SLOT_UNIT;
}

/* Is the slot at unit @u in the GPU tier? */
static inline int arena_unit_gpu(const struct kvmemd_arena *a, uint32_t u)
{
	return u >= a->nunits;
}

/* The daemon memory of an arena's slot table and free lists: @nunits of
 * host memory, @gpu_units of the GPU's. */
uint64_t arena_table_bytes(uint32_t nunits, uint32_t gpu_units,
			   const uint32_t slot_units[2]);
/* An arena of @nunits units and @gpu_units in the GPU tier, slots of
 * @slot_units, its tables not yet made; @heap bytes charged to @d's host
 * pool already, @heap_max at most. */
void arena_init(struct kvmemd_arena *a, struct kvmemd *d, uint32_t nunits,
		uint32_t gpu_units, const uint32_t slot_units[2], uint64_t heap,
		uint64_t heap_max);
/* Its tables: 0 or -ENOMEM. Touches @a only (a worker may run it). */
int arena_tables(struct kvmemd_arena *a);
/* Free the tables; what ->heap says stays for the caller to give back. */
void arena_exit(struct kvmemd_arena *a);

/* The slot limbo of a live record (->limbo): on, 0 or -ENOMEM; off. */
int arena_limbo_on(struct kvmemd_arena *a);
void arena_limbo_off(struct kvmemd_arena *a);
/* The copy for a record was taken: the slots freed until now wait for it
 * to be written. */
void arena_limbo_mark(struct kvmemd_arena *a);
/* That record is written: they are free for anything again. */
void arena_limbo_clear(struct kvmemd_arena *a);

/* Take @bytes more of daemon memory: 0, or -ENOMEM past the session's
 * share or the pool's. arena_heap_put() gives them back. */
int arena_heap_get(struct kvmemd_arena *a, size_t bytes);
void arena_heap_put(struct kvmemd_arena *a, size_t bytes);

/*
 * Slots. A client's slot is open until it is sealed or freed; the daemon
 * reserves one for a page it makes (an archived copy), and a page read
 * back from the store gets one with arena_read_start().
 */
/* An open slot of @kind, the client's: 0, or -ENOMEM when none is free. */
int arena_slot_alloc(struct kvmemd_arena *a, int kind, uint32_t *out);
/* A slot of @kind for a page the daemon makes or moves (SLOT_ARCHIVING),
 * in the GPU tier with @gpu: no op of the client's reaches it. 0,
 * -ENOMEM, or -EBUSY when the free ones wait for a live record
 * (->limbo). */
int arena_slot_reserve(struct kvmemd_arena *a, int kind, int gpu,
		       uint32_t *out);
/* An open or reserved slot, back on its free list. */
void arena_slot_free(struct kvmemd_arena *a, uint32_t u);
/*
 * arena_slot_enter() - a page enters the sealed slot @u, with its seal
 * record: the client's open slot being sealed (a new page, *@pg NO_UNIT,
 * named by @rec's layer and first token), the slot a page read back from
 * the store landed in (still PAGE_READING, until arena_read_checked()), or
 * the one reserved for its archived copy or its copy in the other tier
 * (the slot it leaves is freed, its heat taken along)
 * @pg: the page, or NO_UNIT for a new one, whose index it receives
 * @rec: what the slot keeps of its seal, all but its state, kind, page and
 *       seal number (a new one)
 *
 * Return: 0, or -ENOMEM when no new page could be made (a page that is
 * there always enters).
 */
int arena_slot_enter(struct kvmemd_arena *a, uint32_t u, uint32_t *pg,
		     const struct slot *rec);
/* Set @flags (SLOT_*) on the sealed slot @u. Return: those it did not
 * have yet; SLOT_DEGRADED counts in ->ndegraded. */
unsigned int arena_slot_mark(struct kvmemd_arena *a, uint32_t u,
			     unsigned int flags);

/*
 * Pages. A page is resident in the slot it was sealed in; it goes to the
 * store (WRITING, then COLD, its slot given back) and comes back into a
 * new one (READING, then RESIDENT once checked) as tier.c says. The store
 * units are tier.c's.
 */
/* Page @pg goes, with the slot it is in; a cold one's store units were
 * given back. */
void arena_page_free(struct kvmemd_arena *a, uint32_t pg);
/* No sequence holds @pg, whose I/O is in flight: tier.c frees it when the
 * I/O ends. A page being written gives its slot back now. */
void arena_page_orphan(struct kvmemd_arena *a, uint32_t pg);
/* Resident @pg is being written to the store. */
void arena_write_start(struct kvmemd_arena *a, uint32_t pg);
/* The write of @pg (not orphaned) ended: the page is cold now, its slot
 * given back and recorded in ->cold (@to_store), or resident again. */
void arena_write_end(struct kvmemd_arena *a, uint32_t pg, int to_store);
/* Cold @pg is being read back into a new slot of its kind (SLOT_LOADING,
 * in *@out): 0, -ENOMEM when none is free, or -EBUSY when the free ones
 * wait for a live record (->limbo). */
int arena_read_start(struct kvmemd_arena *a, uint32_t pg, uint32_t *out);
/* The read of @pg (not orphaned) failed: it is cold again, its slot given
 * back, SLOT_READ_FAILED in ->cold. */
void arena_read_fail(struct kvmemd_arena *a, uint32_t pg);
/* Did the last read of cold @pg fail? Said once: the flag goes. */
int arena_read_error(struct kvmemd_arena *a, uint32_t pg);
/* @pg, read back into a slot now sealed, was checked: resident. */
void arena_read_checked(struct kvmemd_arena *a, uint32_t pg);

/*
 * arena_check() - do the tables hold together? Every slot where the one
 * before it ends, every sealed or loading slot's page in it and every
 * page in a slot held by it, each free list the free slots of its size
 * once, the free pages all on their chain, and each counter what the
 * tables add up to. Built with -DKVMEMD_DEBUG, the arena checks itself
 * after every change and aborts on the first that breaks them.
 *
 * Return: 0, -EINVAL with what does not hold together in @why, or -ENOMEM.
 */
int arena_check(const struct kvmemd_arena *a, char *why, size_t len);

/* A slot as a record has it: only the units a slot starts at are in it. */
struct arena_saved_slot {
	uint32_t unit, resv;
	struct slot slot;
};

/* The tables of a session kept across a restart, as its record has them
 * (record.c, resume.c). */
struct arena_saved {
	const struct arena_saved_slot *slots; /* [nslots], by unit */
	const struct page *pages; /* [top_page] */
	uint32_t top, nslots, top_page, free_page, seals;
};

/* The slots of @a below ->top that start a slot: how many. */
uint32_t arena_slot_count(const struct kvmemd_arena *a);

/*
 * arena_restore() - take @k's tables into @a, fresh, with @archived,
 * whether its slots may be in an archive layout, and count them
 *
 * No move may be under way in them: every page resident in a slot that
 * holds it, or cold. Return: 0, or -EINVAL (its tables do not hold
 * together: @a keeps none of them) or -ENOMEM, with why in @why.
 */
int arena_restore(struct kvmemd_arena *a, const struct arena_saved *k,
		  int archived, char *why, size_t len);

#endif /* KVMEMD_ARENA_H */
