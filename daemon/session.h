/*
 * session.h - a session's slot table and sequences, shared by session.c,
 * which serves the ring, and ras.c, which scrubs and injects into the pages
 * the table describes. Both run on the event loop thread only.
 */
#ifndef KVMEMD_SESSION_H
#define KVMEMD_SESSION_H

#include <stdint.h>
#include <sys/types.h>

#include "kvmemd.h"

struct kvmemd_prefix_block;

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
	uint32_t page; /* SLOT_SEALED, SLOT_LOADING: s->pages[] index */
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

/*
 * A check of one sealed page (ras.c), run a bounded step at a time on the
 * event loop so that no page, however large, holds the loop: the padding
 * put back, every codeword scrubbed, the header compared with the seal
 * record and written back, the CRC compared with the seal's. A page read
 * back from the store is first compared with the CRC of what was written;
 * one that came back as something else is poisoned (its values read as
 * lost, see kvmemd(8)) and ->lost set.
 */
struct kvmemd_check {
	uint32_t unit;
	uint32_t seal; /* the slot's when the check began */
	uint8_t src; /* ras.c: enum source */
	uint8_t phase; /* ras.c: enum check_phase */
	uint8_t lost;
	size_t pos; /* into the phase: bytes, or words */
	uint32_t crc; /* of the bytes so far */
	uint32_t store_crc; /* reload: of the page as it was written */
	uint64_t ce[3], ue[3]; /* words, by region: header, scales, payload */
	uint64_t tidied; /* padding bytes put back */
	size_t counted; /* bytes of the page a pass was told of */
};

#define NO_UNIT UINT32_MAX
/* Sequences a session may have waiting for a prefetch at once. */
#define TIER_PREFETCH 16

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

/*
 * A sequence: the pages it holds, in no order, and two indexes to their
 * positions, by page and by (layer, token_start) (session.c), so that
 * dropping one page costs O(1) however long the sequence is and no two of
 * its pages share a name.
 */
struct seq {
	uint32_t id;
	uint8_t acquired; /* its pages are pinned, and resident once the
			   * acquire completed */
	uint32_t n, cap;
	uint32_t *pages; /* s->pages[] indices */
	uint32_t *index; /* 2 * cap entries, by page */
	uint32_t *by_tokens; /* 2 * cap entries, by (layer, token_start) */
	uint32_t tokens; /* end of its last sealed page, for token age */
	struct tier_wait *wait; /* an acquire waiting for its pages */
};

struct kvmemd_session {
	struct kvmemd *d;
	char broken[96]; /* how the client broke the ring protocol */
	uint32_t id;
	uid_t uid;
	pid_t pid;
	uint64_t tenant; /* whose published prefixes it shares (prefix.h) */
	struct kvmem_geometry g;
	struct kvmem_page_layout layout[2]; /* [kind] */
	/* Sealed slots with SLOT_ARCHIVED: tier.archive_format and
	 * archive_codec as at admission; size 0: the session's pages are
	 * not archived (no KVMEM_FEAT_ARCHIVE, or no such page of its
	 * geometry) */
	struct kvmem_page_layout arch;
	uint64_t digest;
	uint64_t features;
	uint32_t slot_units[2]; /* [kind] */
	uint32_t sq_entries, cq_entries;
	uint64_t arena_bytes, map_bytes; /* map_bytes is reserved in the pool */
	uint32_t max_seqs;
	struct kvmemd_region_req req; /* the config as it was at admission */

	struct kvmemd_region r;
	struct kvmemd_region gpu; /* its GPU memory, gpu_bytes of it */
	uint64_t gpu_bytes; /* charged to the GPU pool */
	int sq_efd, cq_efd;
	struct kvmem_ring *ring;
	struct kvmem_sqe *sqes;
	struct kvmem_cqe *cqes;
	uint8_t *buf, *arena;
	uint16_t *heat; /* [unit], written by the client */
	uint64_t sqes_off, cqes_off, buf_off, heat_off, arena_off;
	uint32_t sq_head, cq_tail; /* the daemon's own, authoritative */

	struct slot *slots; /* [unit] */
	uint32_t nunits, top; /* units carved so far */
	uint32_t *free[2], nfree[2]; /* [free_list(kind)] */
	uint64_t used_bytes, nopen, nsealed;
	uint64_t sealed_bytes, ndegraded;

	struct page *pages;
	uint32_t npages, top_page, free_page; /* free_page: NO_UNIT for none */

	/* tier.c */
	struct tier_wait *waits, **waits_tail; /* ops waiting, in order */
	uint32_t nwaits; /* CQEs they will post: reserved in the CQ */
	uint64_t want_units; /* what waiting ops need freed */
	uint64_t ncold, cold_bytes; /* pages only on the store */
	uint64_t inflight; /* store I/Os of its pages */
	uint64_t writing_units; /* slots that writes in flight will free */
	uint64_t offloads, reloads, offload_bytes, reload_bytes;
	/* archive.c: the next page it looks at; pages archived, refused */
	uint32_t arch_pos;
	uint64_t archived, archive_refused;
	uint64_t io_errors, nospace;
	uint8_t write_failed; /* its last write failed: waiting ops fail */
	uint8_t reclaiming; /* fell below the low watermark, not yet high */
	uint8_t cmd_done; /* nothing left for the "offload" command */
	uint8_t victims_forced; /* the order is the command's */
	uint32_t *victims, nvictims, vpos; /* pages in the order they go */
	uint64_t victims_built;
	/* sequences to read back (SEQ_PREFETCH), and how far each got */
	uint32_t prefetch[TIER_PREFETCH][2], nprefetch;

	struct seq **seqs; /* [id - 1] */
	uint32_t nseqs, nacquired, seq_hint;
	/* daemon memory it holds (its tables, sequences, page records),
	 * charged to the host pool, and the most it may */
	uint64_t heap, heap_max;
	uint64_t ops, op_errors;
	/* bytes of pages the prefix ops copied and checked in this pass of
	 * the ring: past SESSION_PASS_BYTES the pass ends */
	uint64_t pass_bytes;
	uint64_t ce, ue, crc; /* words corrected, uncorrectable; CRC misses */
	uint32_t seals; /* slots sealed: numbers slot.seal */
	/* verify-on-seal of the page just sealed: while it runs, no more
	 * SQEs are taken, so the session pays for its own checks */
	struct kvmemd_check seal_check;
	/* PREFIX_PUBLISH: the block being copied, a few layers an op, from
	 * the sequence stage_seq; its memory is charged to the host pool */
	struct kvmemd_prefix_block *stage;
	uint32_t stage_seq;
	/* PREFIX_ATTACH: the block the last attach op left partway, into
	 * the sequence attach_seq, pinned until that attach ends */
	struct kvmemd_prefix_block *attach;
	uint32_t attach_seq;
	uint8_t checking;

	struct kvmemd_session *prev, *next; /* on d->sessions once active */
	int active;
	/* KVMEM_FEAT_RESUME: what its client says to take it back after a
	 * restart; resume.c keeps it meanwhile on a list of its own */
	uint64_t resume_token;
	struct kvmemd_session *kept_next;
	uint64_t kept_until; /* CLOCK_MONOTONIC ns */
};

/* An op that completes later: an acquire waiting for its pages to come
 * back, or an allocation waiting for pages to leave. */
struct tier_wait {
	struct kvmem_sqe e; /* the SQE, as it came */
	uint8_t key[KVMEM_PREFIX_KEY_BYTES]; /* PREFIX_ATTACH: as it came */
	uint32_t scan; /* ACQUIRE: its pages before this one are resident */
	uint32_t issue; /* ACQUIRE: reads were started before this one */
	int error; /* ACQUIRE: a page could not be read back, or no room */
	struct tier_wait *next;
};

static inline struct seq *session_seq(const struct kvmemd_session *s,
				      uint64_t id)
{
	if (!id || id > s->max_seqs)
		return NULL;
	return s->seqs[id - 1];
}

/* The layout of the page in slot @sl. */
static inline const struct kvmem_page_layout *
slot_layout(const struct kvmemd_session *s, const struct slot *sl)
{
	return sl->flags & SLOT_ARCHIVED ? &s->arch : &s->layout[sl->kind];
}

/* The page of the slot that starts at unit @u. */
static inline uint8_t *session_page(const struct kvmemd_session *s, uint32_t u)
{
	return s->arena + (size_t)u * KVMEM_SLOT_UNIT;
}

static inline uint64_t slot_bytes(const struct kvmemd_session *s, int kind)
{
	return (uint64_t)s->slot_units[kind] * KVMEM_SLOT_UNIT;
}

/* session.c, for tier.c and ras.c */
int session_slot_alloc(struct kvmemd_session *s, int kind, uint32_t *out);
void session_slot_free(struct kvmemd_session *s, uint32_t u);
/* The header the sealed slot @sl was sealed with. */
void session_slot_header(const struct kvmemd_session *s, const struct slot *sl,
			 struct kvmem_page_hdr *h);
void session_page_free(struct kvmemd_session *s, uint32_t pg);
int session_seq_holds(const struct kvmemd_session *s, const struct seq *q,
		      uint32_t pg);
/* Take @bytes more of daemon memory for @s: 0, or -ENOMEM past its share
 * or the pool's. session_heap_put() gives them back. */
int session_heap_get(struct kvmemd_session *s, size_t bytes);
void session_heap_put(struct kvmemd_session *s, size_t bytes);
/* Pin (@on) or unpin the pages of @q: acquire and release. */
void session_seq_pin(struct kvmemd_session *s, struct seq *q, int on);
/* Post a completion outside kvmemd_session_run() (an op that waited). */
void session_post(struct kvmemd_session *s, uint64_t user_data, int res,
		  uint32_t flags);

/*
 * PREFIX_ATTACH @e of the block named @key as far as it can go now: the
 * pages attached, or a negative errno; *@no_slot set when that is -ENOMEM
 * for want of a slot for the first (tier.c tries again while pages can
 * leave).
 */
int session_prefix_attach(struct kvmemd_session *s, const struct kvmem_sqe *e,
			  const uint8_t *key, int *no_slot);

/* Restoring a session kept across a restart (resume.c): sequence @id,
 * holding @n pages of @s->pages already in place (their refs and pins
 * too); then the free lists and counts, from the slot table. 0, -EINVAL
 * when the record does not hold together, or -ENOMEM. */
int session_seq_restore(struct kvmemd_session *s, uint32_t id, int acquired,
			uint32_t tokens, const uint32_t *pages, uint32_t n);
int session_slots_restore(struct kvmemd_session *s);
/*
 * Before @s is kept across a restart: what the client submitted run until
 * @run_deadline (CLOCK_MONOTONIC ns; while the CQ has room, a ring's worth
 * at most; the rest is the next daemon's), with the checks of seals,
 * waiting ops cancelled and store I/O ended (tier_quiesce(), within
 * @timeout_ms), the publish stage dropped. 0, or why not in @why: -EPROTO
 * (the ring is broken), -ETIMEDOUT, -EBUSY (a page still moves).
 */
int session_keep_ready(struct kvmemd_session *s, uint64_t run_deadline,
		       int timeout_ms, char *why, size_t len);

/* tier.c, for session.c */
/* The op was queued to complete later. */
#define OP_WAIT INT32_MIN
int tier_acquire(struct kvmemd_session *s, struct seq *q,
		 const struct kvmem_sqe *e);
int tier_alloc_wait(struct kvmemd_session *s, const struct kvmem_sqe *e);
/* The same for PREFIX_ATTACH @e, of the block named @key. */
int tier_attach_wait(struct kvmemd_session *s, const struct kvmem_sqe *e,
		     const uint8_t *key);
/* Start reading @q's cold pages back, as I/Os and free slots allow. */
void tier_prefetch(struct kvmemd_session *s, struct seq *q);
/* @q is released or freed: an acquire of it, or an attach into it, still
 * waiting is cancelled. */
void tier_cancel(struct kvmemd_session *s, struct seq *q);
/* Cold page @pg lost its last holder: its store units go back. */
void tier_page_drop(struct kvmemd_session *s, uint32_t pg);
/* The session goes: its pages on the store and its I/O in flight. */
void tier_session_free(struct kvmemd_session *s);
/* Before it is kept across a restart: its waiting ops complete with
 * -ECANCELED (an acquire leaves its sequence released), its I/O and the
 * checks of its pages read back end. 0, or -ETIMEDOUT. */
int tier_quiesce(struct kvmemd_session *s, int timeout_ms);
/* Cold page @pg of a kept session: its store units are its again. */
int tier_claim(struct kvmemd_session *s, uint32_t pg);

#endif /* KVMEMD_SESSION_H */
