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

enum slot_state {
	SLOT_NONE = 0, /* not the start of a slot, or never handed out */
	SLOT_FREE, /* on a free list */
	SLOT_OPEN, /* the client's, being written */
	SLOT_SEALED, /* full, immutable, held by sequences */
};

#define SLOT_DEGRADED (1u << 0) /* holds values no code could correct */
#define SLOT_CRC_BAD (1u << 1) /* its CRC no longer matches, reported */

/*
 * A sealed slot keeps what its header said when it was sealed, so the
 * scrubber can tell a damaged header from a good one and write it back.
 */
struct slot {
	uint8_t state; /* enum slot_state */
	uint8_t kind; /* enum kvmem_slot_kind */
	uint8_t flags; /* SLOT_* */
	uint8_t hdr_flags; /* KVMEM_HDR_* */
	uint32_t refs; /* sequences holding a sealed slot */
	uint32_t seq;
	uint32_t layer;
	uint32_t token_start;
	uint32_t ntokens;
	uint32_t crc;
	/* uncorrectable words the scrubber already reported */
	uint32_t ue_scales, ue_payload;
	uint64_t generation;
};

/*
 * A sequence: the sealed slots it holds, in no order, and an index from
 * slot to position (open addressing, linear probing, 2 x cap entries of
 * position + 1, 0 = empty), so that dropping one page costs O(1) however
 * long the sequence is.
 */
struct seq {
	uint32_t id;
	uint8_t acquired;
	uint32_t n, cap;
	uint32_t *slots;
	uint32_t *index; /* 2 * cap entries */
};

struct kvmemd_session {
	struct kvmemd *d;
	uint32_t id;
	uid_t uid;
	pid_t pid;
	struct kvmem_geometry g;
	struct kvmem_page_layout layout[2]; /* [kind] */
	uint64_t digest;
	uint64_t features;
	uint32_t slot_units[2]; /* [kind] */
	uint32_t sq_entries, cq_entries;
	uint64_t arena_bytes, map_bytes; /* map_bytes is reserved in the pool */
	uint32_t max_seqs;
	struct kvmemd_region_req req; /* the config as it was at admission */

	struct kvmemd_region r;
	int sq_efd, cq_efd;
	struct kvmem_ring *ring;
	struct kvmem_sqe *sqes;
	struct kvmem_cqe *cqes;
	uint8_t *buf, *arena;
	uint64_t sqes_off, cqes_off, buf_off, arena_off;
	uint32_t sq_head, cq_tail; /* the daemon's own, authoritative */

	struct slot *slots; /* [unit] */
	uint32_t nunits, top; /* units carved so far */
	uint32_t *free[2], nfree[2]; /* [free_list(kind)] */
	uint64_t used_bytes, nopen, nsealed;
	uint64_t sealed_bytes, ndegraded;

	struct seq **seqs; /* [id - 1] */
	uint32_t nseqs, nacquired, seq_hint;
	uint64_t nrefs, max_refs;
	uint64_t ops, op_errors;
	uint64_t ce, ue, crc; /* words corrected, uncorrectable; CRC misses */
	struct kvmemd_ratelimit events; /* per minute, ras.c */

	struct kvmemd_session *prev, *next; /* on d->sessions once active */
	int active;
};

static inline struct seq *session_seq(const struct kvmemd_session *s,
				      uint64_t id)
{
	if (!id || id > s->max_seqs)
		return NULL;
	return s->seqs[id - 1];
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

#endif /* KVMEMD_SESSION_H */
