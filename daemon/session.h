/* SPDX-License-Identifier: MIT */
/*
 * session.h - a session: its sequences and its arena (arena.h), shared by
 * session.c, which serves the ring, and the modules that act on its pages:
 * tier.c, archive.c, resume.c, ras.c and patrol.c, which scrub them, and
 * inject.c, which injects errors into them. All run on the event loop
 * thread only.
 *
 * Included by those, ras.h, and admin.c, which reads the tables.
 */
#ifndef KVMEMD_SESSION_H
#define KVMEMD_SESSION_H

#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "arena.h"
#include "kvmemd.h"

struct kvmemd_prefix_block;

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
	/* a page whose CRC misses may be another's: it is lost, as one read
	 * back from the store (ras.c: check_lose()) */
	uint8_t lose;
	uint8_t dirty; /* written to: a copy (->bounce) goes back */
	/* a page on a GPU the daemon cannot read: the pass's copy of it,
	 * checked and corrected there, then copied back (ras.c) */
	uint8_t *bounce;
	size_t pos; /* into the phase: bytes, or words */
	uint32_t crc; /* of the bytes so far */
	uint32_t store_crc; /* reload: of the page as it was written */
	uint64_t ce[3], ue[3]; /* words, by region: header, scales, payload */
	uint64_t tidied; /* padding bytes put back */
	size_t counted; /* bytes of the page a pass was told of */
};

/* Sequences a session may have waiting for a prefetch at once. */
#define TIER_PREFETCH 16

/* Sequence @id at the end of a prefetch queue (@q, *@n: a sequence and
 * how far it got, each), unless it is there; a full queue's oldest gives
 * way. */
static inline void tier_prefetch_add(uint32_t (*q)[2], uint32_t *n, uint32_t id)
{
	uint32_t i;

	for (i = 0; i < *n; i++)
		if (q[i][0] == id)
			return;
	if (*n == TIER_PREFETCH) {
		memmove(q[0], q[1], (TIER_PREFETCH - 1) * sizeof(q[0]));
		--*n;
	}
	q[*n][0] = id;
	q[*n][1] = 0;
	++*n;
}

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
	uint32_t *pages; /* s->arena.pages[] indices */
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
	/* archive.c: the payload bits and tokens of its sealed pages as
	 * over_budget() last counted them, when arena.changes was
	 * budget_changes (budget_counted: it has counted them) */
	double budget_bits, budget_tokens;
	uint64_t budget_changes;
	int budget_counted;
	uint64_t digest;
	uint64_t features;
	uint32_t sq_entries, cq_entries;
	uint64_t arena_bytes, map_bytes; /* map_bytes is reserved in the pool */
	uint32_t max_seqs;
	struct kvmemd_region_req req; /* the config as it was at admission */

	struct kvmemd_region r;
	struct kvmemd_region gpu; /* its GPU memory, gpu_bytes of it */
	uint64_t gpu_bytes; /* charged to the GPU pool */
	uint64_t pin_bytes; /* of ->r, counted in d->gpu.pinned */
	/* the GPU memory as the daemon may read it (the stand-in's), or
	 * NULL (a GPU's: only the pool's copies reach it) */
	uint8_t *gpu_view;
	int sq_efd, cq_efd;
	struct kvmem_ring *ring;
	struct kvmem_sqe *sqes;
	struct kvmem_cqe *cqes;
	uint8_t *buf, *arena_base;
	uint64_t sqes_off, cqes_off, buf_off, heat_off, arena_off;
	uint32_t sq_head, cq_tail; /* the daemon's own, authoritative */

	struct kvmemd_arena arena; /* its slots and pages (arena.c) */

	/* tier.c */
	struct tier_wait *waits, **waits_tail; /* ops waiting, in order */
	uint32_t nwaits; /* CQEs they will post: reserved in the CQ */
	uint64_t want_units; /* what waiting ops need freed */
	uint64_t inflight; /* store I/Os of its pages */
	uint64_t offloads, reloads, offload_bytes, reload_bytes;
	/* archive.c: the next page it looks at; pages archived, refused */
	uint32_t arch_pos;
	uint64_t archived, archive_refused;
	uint64_t io_errors, nospace;
	uint8_t write_failed; /* its last write failed: waiting ops fail */
	uint8_t reclaiming; /* fell below the low watermark, not yet high */
	/* tier-gpu.c: the GPU tier's watermarks, as ->reclaiming; pages of
	 * an acquire left to move next pass; moves since it started */
	uint8_t gpu_reclaiming, gpu_more;
	uint64_t gpu_step; /* bytes its acquires may still move this pass */
	/* sequences to move into the GPU tier (SEQ_PREFETCH with
	 * KVMEM_SQE_GPU), and how far each got */
	uint32_t gpu_prefetch[TIER_PREFETCH][2], ngpu_prefetch;
	uint64_t gpu_rescan; /* no looking for pages to leave before then */
	uint64_t gpu_promoted, gpu_demoted, gpu_moved_bytes;
	uint64_t gpu_errors; /* copies that failed or arrived changed */
	uint64_t gpu_changed; /* pages back from it that had changed */
	uint8_t cmd_done; /* nothing left for the "offload" command */
	uint8_t victims_forced; /* the order is the command's */
	uint32_t *victims, nvictims, vpos; /* pages in the order they go */
	uint64_t victims_built;
	/* sequences to read back (SEQ_PREFETCH), and how far each got */
	uint32_t prefetch[TIER_PREFETCH][2], nprefetch;
	/* store units pages read back gave up while a live record may still
	 * name them (as arena.h's slot limbo). Either of the two records on
	 * disk may be the one a restart takes (the ring heads that choose
	 * are in the client's memory), so a unit waits for two: the first
	 * nheld_free are named by neither the last record written nor the
	 * one being written and go once it is, the first nheld_old (those
	 * and more) by none but the last written, the others may be named
	 * by both */
	struct tier_held *held;
	uint32_t nheld, nheld_old, nheld_free, held_cap;

	struct seq **seqs; /* [id - 1] */
	uint32_t nseqs, nacquired, seq_hint;
	uint64_t ops, op_errors;
	/* bytes of pages the prefix ops copied and checked in this pass of
	 * the ring: past SESSION_PASS_BYTES the pass ends */
	uint64_t pass_bytes;
	uint64_t ce, ue, crc; /* words corrected, uncorrectable; CRC misses */
	/* verify-on-seal of the page just sealed: while it runs, no more
	 * SQEs are taken, so the session pays for its own checks */
	struct kvmemd_check seal_check;
	/* PREFIX_PUBLISH: the block being copied, a few layers an op, from
	 * the sequence stage_seq; its memory is charged to the host pool */
	struct kvmemd_prefix_block *stage;
	uint32_t stage_seq;
	/* the key of the block it published last, of the sequence
	 * chain_seq, which ends at token chain_end: the parent of the next
	 * block of the chain, as the shared tier records it (remote.c) */
	uint8_t chain_key[KVMEM_PREFIX_KEY_BYTES];
	uint32_t chain_seq, chain_end;
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
	uint8_t stored; /* its memfd is in systemd's descriptor store */
	/*
	 * A record of it kept current while it runs (NULL: none). While
	 * there is one, the client sees the SQ head and CQ tail of the last
	 * record written, pub_sq_head and pub_cq_tail: what it learns of is
	 * in the record, and what is not stays in its ring to be run again.
	 */
	struct kvmemd_live *live;
	uint32_t pub_sq_head, pub_cq_tail;
	/* the generation of the live record it was taken back from; 0:
	 * from the record of a stop, or a new session */
	uint64_t kept_generation;
	/* ops the record said were waiting when kvmemd died: issued again
	 * before the ring's */
	struct kvmem_sqe *redo;
	uint32_t nredo;
	struct kvmemd_session *kept_next;
	uint64_t kept_until; /* CLOCK_MONOTONIC ns */
};

/* An op that completes later: an acquire waiting for its pages to come
 * back, an allocation or attach waiting for pages to leave, a fetch
 * waiting for the shared tier (remote.c). */
struct tier_wait {
	struct kvmem_sqe e; /* the SQE, as it came */
	uint8_t key[KVMEM_PREFIX_KEY_BYTES]; /* PREFIX_ATTACH: as it came */
	/* PREFIX_FETCH: its session, the blocks the tenant had from its
	 * token_start, and the shared tier's job it waits for, to be told
	 * by forget(job) when the op goes first */
	struct kvmemd_session *owner;
	uint32_t base;
	void *job;
	void (*forget)(void *job);
	uint32_t scan; /* ACQUIRE: its pages before this one are resident */
	uint32_t issue; /* ACQUIRE: reads were started before this one */
	uint32_t place; /* ACQUIRE: its pages before this one are in the tier
			 * it asked for */
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

/* The page of the slot that starts at unit @u; one in the GPU tier only
 * where the daemon can read it (session_page_readable()). */
static inline uint8_t *session_page(const struct kvmemd_session *s, uint32_t u)
{
	if (arena_unit_gpu(&s->arena, u))
		return s->gpu_view +
		       (size_t)(u - s->arena.nunits) * KVMEM_SLOT_UNIT;
	return s->arena_base + (size_t)u * KVMEM_SLOT_UNIT;
}

/* Where the page at GPU-tier unit @u is in the session's GPU memory. */
static inline uint64_t session_gpu_off(const struct kvmemd_session *s,
				       uint32_t u)
{
	return (uint64_t)(u - s->arena.nunits) * KVMEM_SLOT_UNIT;
}

/* Can the daemon read the page at unit @u where it is? */
static inline int session_page_readable(const struct kvmemd_session *s,
					uint32_t u)
{
	return !arena_unit_gpu(&s->arena, u) || s->gpu_view;
}

/*
 * A walk over the slots of @s (a pass of the scrubber, an injection):
 * units from 0 to session_walk_end(), each next one through
 * session_walk_next(), which steps from the host's top into the GPU tier.
 */
static inline uint32_t session_walk_next(const struct kvmemd_session *s,
					 uint32_t u)
{
	if (u >= s->arena.top && u < s->arena.nunits)
		return s->arena.nunits;
	return u;
}

static inline uint32_t session_walk_end(const struct kvmemd_session *s)
{
	return s->arena.gpu_top;
}

static inline uint64_t slot_bytes(const struct kvmemd_session *s, int kind)
{
	return arena_slot_bytes(&s->arena, kind);
}

/*
 * The order resident page @p leaves its tier in (for the store, or the
 * GPU's for host memory), lowest first: pages tier.stale_tokens or more
 * behind the end of their sequence, then the least heat, then the longest
 * released.
 */
static inline uint64_t session_victim_key(const struct kvmemd_session *s,
					  const struct page *p)
{
	const struct slot *sl = &s->arena.slots[p->unit];
	const struct seq *q = session_seq(s, sl->seq);
	uint32_t stale_tokens = s->d->cfg.stale_tokens;
	uint16_t heat =
		__atomic_load_n(&s->arena.heat[p->unit], __ATOMIC_RELAXED);
	int stale = stale_tokens && q &&
		    q->tokens - sl->token_start - sl->ntokens >= stale_tokens;

	return (uint64_t)!stale << 63 | (uint64_t)heat << 47 |
	       ((p->released >> 20) & ((1ull << 47) - 1));
}

/* session.c, for tier.c and ras.c */
/* The header the sealed slot @sl was sealed with. */
void session_slot_header(const struct kvmemd_session *s, const struct slot *sl,
			 struct kvmem_page_hdr *h);
int session_seq_holds(const struct kvmemd_session *s, const struct seq *q,
		      uint32_t pg);
/* Pin (@on) or unpin the pages of @q: acquire and release. */
void session_seq_pin(struct kvmemd_session *s, struct seq *q, int on);
/* Post a completion outside kvmemd_session_run() (an op that waited). */
void session_post(struct kvmemd_session *s, uint64_t user_data, int res,
		  uint32_t flags);
/* Show the client the SQ head and CQ tail a record just made safe. */
void session_publish(struct kvmemd_session *s);

/*
 * PREFIX_ATTACH @e of the block named @key as far as it can go now: the
 * pages attached, or a negative errno; *@no_slot set when that is -ENOMEM
 * for want of a slot for the first (tier.c tries again while pages can
 * leave).
 */
int session_prefix_attach(struct kvmemd_session *s, const struct kvmem_sqe *e,
			  const uint8_t *key, int *no_slot);

/* Restoring a session kept across a restart (resume.c): sequence @id,
 * holding @n pages of @s->arena.pages already in place (their refs and pins
 * too). 0, -EINVAL when the record does not hold together, or -ENOMEM. */
int session_seq_restore(struct kvmemd_session *s, uint32_t id, int acquired,
			uint32_t tokens, const uint32_t *pages, uint32_t n);
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

/* Page bytes a pass of one session's ring may copy for prefix ops (one op
 * more, however large, when it starts under it): a client that publishes
 * and attaches without pause holds the loop no longer than a few others. */
#define SESSION_PASS_BYTES (1u << 20)

/* session.c, for share.c */
/* A result buffer of @len bytes at @addr, aligned to @align, inside the
 * session's buffer region; NULL when it is not. */
void *session_op_buf(struct kvmemd_session *s, uint64_t addr, uint64_t len,
		     uint64_t align);
/* The page of @q named (@layer, @token_start), or NO_UNIT. */
uint32_t session_seq_page(const struct kvmemd_session *s, const struct seq *q,
			  uint32_t layer, uint32_t token_start);
/*
 * Open slot @u becomes the sealed page of @q that @h names, held and
 * pinned by @q, with @h's CRC, generation and flags as its seal record:
 * 0, or -ENOMEM.
 */
int session_slot_seal(struct kvmemd_session *s, struct seq *q, uint32_t u,
		      const struct kvmem_page_hdr *h);

/* share.c: the prefix ops, for session.c's op table */
int session_op_prefix_publish(struct kvmemd_session *s,
			      const struct kvmem_sqe *e);
int session_op_prefix_attach(struct kvmemd_session *s,
			     const struct kvmem_sqe *e);
int session_op_prefix_fetch(struct kvmemd_session *s,
			    const struct kvmem_sqe *e);
/* Drop the block being published. */
void session_stage_drop(struct kvmemd_session *s);
/* @b (NULL: none), partway attached into @seq, is the block the session
 * holds pinned from now on, and no other. */
void session_attach_pin(struct kvmemd_session *s, struct kvmemd_prefix_block *b,
			uint32_t seq);
/* The session's prefix ops end with it. */
void session_prefix_drop(struct kvmemd_session *s);

/* tier-gpu.c, for tier.c */
/*
 * tier_gpu_place() - put the resident pages of acquired @q, from *@pos on,
 * in the GPU tier (@gpu: as far as its slots and copies allow; once no
 * released page there can make room, the rest stay in host memory) or in
 * host memory
 * Return: 1 when all are; 0 when this pass's work is spent (*@pos says
 * how far); -ENOMEM when host memory has no free slot; -EBUSY when another
 * acquired sequence holds a page on the GPU; -EIO when a copy back to
 * host memory failed.
 */
int tier_gpu_place(struct kvmemd_session *s, struct seq *q, int gpu,
		   uint32_t *pos);
/* SEQ_PREFETCH with KVMEM_SQE_GPU: move @q's pages in host memory into
 * the GPU tier's free slots in the background, pass by pass. */
void tier_gpu_prefetch(struct kvmemd_session *s, struct seq *q);
/* A new pass of the loop: the session's acquires may move
 * GPU_STEP_BYTES of pages in it, all of them together. */
void tier_gpu_pass(struct kvmemd_session *s);
/* Move released pages out of the GPU tier below tier.low_watermark
 * percent free, up to tier.high_watermark; @now: CLOCK_MONOTONIC ns.
 * Return: 1 when more are left for the next pass. */
int tier_gpu_balance(struct kvmemd_session *s, uint64_t now);

/* tier.c, for session.c */
/* The op was queued to complete later. */
#define OP_WAIT INT32_MIN
int tier_acquire(struct kvmemd_session *s, struct seq *q,
		 const struct kvmem_sqe *e);
int tier_alloc_wait(struct kvmemd_session *s, const struct kvmem_sqe *e);
/* The same for PREFIX_ATTACH @e, of the block named @key. */
int tier_attach_wait(struct kvmemd_session *s, const struct kvmem_sqe *e,
		     const uint8_t *key);
/* PREFIX_FETCH @e waits for the shared tier (share.c): 0 with *@out, or
 * -ENOMEM. */
int tier_remote_wait(struct kvmemd_session *s, const struct kvmem_sqe *e,
		     struct tier_wait **out);
/* It is over: its CQE says @res. */
void tier_remote_done(struct kvmemd_session *s, struct tier_wait *w, int res);
/* It never started: gone without a CQE (the op's result says why). */
void tier_remote_drop(struct kvmemd_session *s, struct tier_wait *w);
/* Start reading @q's cold pages back, as I/Os and free slots allow. */
void tier_prefetch(struct kvmemd_session *s, struct seq *q);
/* @q is released or freed: an acquire of it, or an attach into it, still
 * waiting is cancelled. */
void tier_cancel(struct kvmemd_session *s, struct seq *q);
/* Cold page @pg lost its last holder: its store units go back. */
void tier_page_drop(struct kvmemd_session *s, uint32_t pg);
/* The session goes: its pages on the store and its I/O in flight. */
void tier_session_free(struct kvmemd_session *s);
/* Store units held for the live records (->held): the copy for a record
 * was taken (mark), that record is written (clear: those neither it nor
 * the one before it names are free), there is no live record any more
 * (drop: all are). */
void tier_held_mark(struct kvmemd_session *s);
void tier_held_clear(struct kvmemd_session *s);
void tier_held_drop(struct kvmemd_session *s);
/* Slots and store units came free: the ops waiting try again. */
void tier_retry(struct kvmemd_session *s);
/* Before it is kept across a restart: its waiting ops complete with
 * -ECANCELED (an acquire leaves its sequence released), its I/O and the
 * checks of its pages read back end. 0, or -ETIMEDOUT. */
int tier_quiesce(struct kvmemd_session *s, int timeout_ms);
/* Cold page @pg of a kept session: its store units are its again. */
int tier_claim(struct kvmemd_session *s, uint32_t pg);

#endif /* KVMEMD_SESSION_H */
