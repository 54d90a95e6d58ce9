/* SPDX-License-Identifier: MIT */
/*
 * kvmem/uapi.h - the ABI between kvmemd and its clients
 *
 * A client attaches over an AF_UNIX SOCK_SEQPACKET socket:
 *
 *   client                                   kvmemd
 *   struct kvmem_hello          ───────▶     checks credentials (SO_PEERCRED),
 *                                            ABI version, geometry, quota
 *                               ◀───────     struct kvmem_welcome, and with it
 *                                            (SCM_RIGHTS) the session memfd,
 *                                            the SQ doorbell eventfd and the
 *                                            CQ doorbell eventfd, in that
 *                                            order, then with gpu_bytes the
 *                                            session's GPU memory
 *
 * GPU memory (ABI 4): a hello with gpu_mib asks for that much device
 * memory on the daemon's GPU pool device (gpu_uuid, or all zero for the
 * daemon's choice). The welcome gives gpu_bytes (gpu_mib rounded up to the
 * driver's granularity) and gpu_uuid, and a fourth descriptor that shares
 * it (cuMemExportToShareableHandle, POSIX file descriptor), zeroed: the
 * client imports and maps it on that GPU. It is the session's alone, and
 * charged to the pool until the attaching process has exited, whether or
 * not it still maps it. A daemon without a GPU pool refuses such a hello
 * with -EOPNOTSUPP, one without that GPU with -ENODEV.
 *
 * A client of ABI 3 sends the hello with those fields 0 and gets the
 * welcome of ABI 3: the first KVMEM_WELCOME_V3_SIZE bytes, size saying so.
 *
 * The GPU tier (KVMEM_FEAT_GPU_TIER, granted with GPU memory): that memory
 * is then the daemon's to lay out, a second part of the arena. Slots are
 * numbered on past the host's: slot n, for n >= arena_bytes /
 * KVMEM_SLOT_UNIT, is the page at (n - arena_bytes / KVMEM_SLOT_UNIT) *
 * KVMEM_SLOT_UNIT of the GPU memory. Only the daemon puts pages there: a
 * SEQ_ACQUIRE with KVMEM_SQE_GPU moves the sequence's pages to the GPU as
 * far as its slots allow (those that do not fit, or whose copy failed,
 * stay in host memory, which kernels read over the bus), a SEQ_ACQUIRE
 * without it brings them all to host memory (-EIO when a copy back fails:
 * that page stays on the GPU), a SEQ_PREFETCH with it moves them there
 * ahead of the acquire (in the background, into free slots down to
 * tier.low_watermark only), and released pages leave the GPU for host
 * memory below tier.low_watermark percent of its slots free, as host
 * pages leave for the backing store. Each move is reported as moves are
 * (old slot, new slot) and checked: the page's CRC-32C as it left,
 * compared where it lands in host memory, and a page that changed on the
 * way scrubbed by its code, or poisoned when the code cannot undo it. A
 * page another acquired sequence holds does not move: an acquire without
 * KVMEM_SQE_GPU that needs one of those in host memory fails with -EBUSY.
 * The heat array covers the GPU tier's slots too, welcome.heat_units
 * entries in all: released pages there with less heat leave the GPU first
 * (after those tier.stale_tokens behind the end of their sequence), and a
 * page's heat moves with it. kvmemd with pool.gpu_device = standin offers
 * the tier on host memory that plays the GPU (its UUID: "kvmem stand-in").
 *
 * Restarts (KVMEM_FEAT_RESUME): a daemon that can keep sessions across its
 * own restart grants the feature and gives a resume_token in the welcome.
 * When it stops it runs the SQEs published before it sent its notice,
 * while its CQ has room, completes each op still waiting with -ECANCELED
 * (an acquire cancelled so leaves its sequence released), and keeps the
 * session: memfd, slot table, sequences, pages on the store. The client,
 * having seen the notice or
 * the hang-up, says hello to the new daemon with resume_session and
 * resume_token set (the rest as in its first hello) and gets a welcome of
 * the same layout, the same memfd and new doorbells, from the same uid
 * only. The new daemon takes SQEs from ring.sq_head on, where the old one
 * stopped: whatever the client published after that, it runs now, so a
 * client rewrites the SQEs it no longer wants run into NOPs before the
 * hello. A session not taken back within daemon.resume_seconds is freed;
 * a hello for a session the daemon did not keep is refused with -ESTALE.
 * Both resume fields are 0 in a hello for a new session.
 *
 * A refusal is a welcome with a negative errno in ->error, a message in
 * ->message, and no descriptors. After the welcome the socket carries only
 * struct kvmem_notice from the daemon (shutdown); its hang-up tells either
 * side that the other is gone.
 *
 * The memfd (sealed against shrinking and growing) holds, at the offsets the
 * welcome gives:
 *
 *   ring_off    struct kvmem_ring: head/tail indices and flags
 *   sqes_off    sq_entries x struct kvmem_sqe (written by the client)
 *   cqes_off    cq_entries x struct kvmem_cqe (written by the daemon)
 *   buf_off     buf_bytes of operation buffers (PAGE_ALLOC, SEQ_ACQUIRE
 *               and STATS results), laid out by the client
 *   heat_off    one uint16_t per slot unit (heat_units of them; 0 there:
 *               the host arena's units), written by the client: how much
 *               attention the page in that slot gets (0 = none, 65535 =
 *               all); released pages with less heat leave memory first. The
 *               daemon zeroes a slot's heat when it hands the slot out; a
 *               page it archives or moves between the host and the GPU
 *               keeps its heat in its new slot.
 *   arena_off   arena_bytes of pages: slot n is the page at
 *               arena_off + n * KVMEM_SLOT_UNIT
 *
 * Ring protocol (single producer, single consumer each way, indices free
 * running modulo 2^32, entry i at index i & (entries - 1)):
 *
 *   client: fill sqes[sq_tail & mask], store-release sq_tail; full barrier,
 *           then if flags & KVMEM_RING_NEED_WAKEUP, write 1 to the SQ eventfd
 *   daemon: load-acquire sq_tail, consume up to it, store-release sq_head;
 *           fill cqes[cq_tail & mask], store-release cq_tail; if the client
 *           set KVMEM_RING_CQ_WAIT, write 1 to the CQ eventfd
 *   client: load-acquire cq_tail, read, store-release cq_head
 *
 * The daemon never waits for a full CQ to drain by queueing: it stops taking
 * SQEs until the client makes room. So a client that empties the CQ while
 * SQEs wait (sq_head != sq_tail) must ring the SQ doorbell if
 * NEED_WAKEUP is set (after a full barrier): the daemon may have gone to
 * sleep on the CQ it saw full. A client that moves sq_tail more than
 * sq_entries past sq_head, or cq_head past cq_tail, is disconnected.
 *
 * Every field marked "must be 0" is checked; an SQE with an unknown opcode,
 * flag or non-zero reserved field completes with -EINVAL.
 *
 * Completions come in the order of the SQEs except for three ops that may
 * wait: PAGE_ALLOC and PREFIX_ATTACH when the arena is full and released
 * pages can leave for the backing store, and SEQ_ACQUIRE while the
 * sequence's pages come back from it. Each op that waits keeps one CQ
 * entry reserved, so the CQ never overflows.
 *
 * Pages move only while no acquired sequence holds them. A page read back
 * lands in a new slot: the SEQ_ACQUIRE that made it resident reports the
 * move once, as a struct kvmem_page_move in its buffer (addr, len: a
 * multiple of its size); its result is the number of moves. A result that
 * fills the buffer means more may follow: acquire again (an acquired
 * sequence completes at once) until fewer come. A move names the page by
 * its layer and first token, which no other page of the sequence shares (a
 * slot number may since have gone to another page); a page shared with
 * forks is reported to whichever of them is acquired first. Without a
 * buffer, an acquire that has moves to report fails with -EMSGSIZE and
 * stays released. PAGE_SEAL and PAGE_FREE name pages by slot, so they need
 * an acquired sequence (-EBUSY otherwise), as does SEQ_FORK.
 *
 * With KVMEM_FEAT_ARCHIVE the daemon may also re-encode released sealed
 * pages in its archive format and codec (tier.archive_* of kvmemd.conf,
 * kvmem_page_archive()); such a page moves to another slot too, and moves
 * are reported as struct kvmem_page_move_ex, which says the format and
 * codec the page has now. The pages of a client without it are never
 * archived.
 */
#ifndef KVMEM_UAPI_H
#define KVMEM_UAPI_H

#include <stddef.h>
#include <stdint.h>

#include "kvmem/page.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2: sequences hold pages that move (SEQ_ACQUIRE reports moves, the heat
 * array, SEQ_PREFETCH). 3: the pages in the arena are page format 3
 * (KVMEM_PAGE_VERSION: checks over the scales, FP16 rows and header).
 * 4: GPU memory; kvmemd serves clients of 3 as well. */
#define KVMEM_ABI_VERSION 4
#define KVMEM_ABI_VERSION_MIN 3

#define KVMEM_HELLO_MAGIC 0x484d564bu /* "KVMH" */
#define KVMEM_WELCOME_MAGIC 0x574d564bu /* "KVMW" */
#define KVMEM_NOTICE_MAGIC 0x4e4d564bu /* "KVMN" */

/* Arena slots are counted in these units; every page size is a multiple. */
#define KVMEM_SLOT_UNIT 4096u

/* Feature bits, exchanged at the handshake. */
#define KVMEM_FEAT_NEED_WAKEUP (1ULL << 0) /* the daemon polls the SQ */
#define KVMEM_FEAT_CQ_WAIT (1ULL << 1) /* CQ doorbell only on request */
#define KVMEM_FEAT_ARCHIVE (1ULL << 2) /* archived pages, moves _ex */
#define KVMEM_FEAT_PREFIX (1ULL << 3) /* PREFIX_PUBLISH, PREFIX_ATTACH */
#define KVMEM_FEAT_RESUME (1ULL << 4) /* sessions outlive daemon restarts */
#define KVMEM_FEAT_REMOTE (1ULL << 5) /* PREFIX_FETCH: the shared tier */
#define KVMEM_FEAT_GPU_TIER (1ULL << 6) /* pages in the GPU memory */
#define KVMEM_FEAT_ALL                                                      \
	(KVMEM_FEAT_NEED_WAKEUP | KVMEM_FEAT_CQ_WAIT | KVMEM_FEAT_ARCHIVE | \
	 KVMEM_FEAT_PREFIX | KVMEM_FEAT_RESUME | KVMEM_FEAT_REMOTE |        \
	 KVMEM_FEAT_GPU_TIER)

/* client -> daemon: the first and only message before the welcome. */
struct kvmem_hello {
	uint32_t magic; /* KVMEM_HELLO_MAGIC */
	uint16_t abi_version; /* KVMEM_ABI_VERSION */
	uint16_t size; /* sizeof(struct kvmem_hello) */
	uint64_t features; /* what the client understands */
	struct kvmem_geometry geometry; /* of every page of the session */
	uint64_t quota_bytes; /* arena wanted; 0: the daemon's default */
	uint32_t sq_entries; /* power of two; 0: the daemon's default */
	uint32_t cq_entries; /* power of two >= sq_entries; 0: 2 x SQ, or SQ
			     * when that is over the largest ring */
	uint32_t gpu_mib; /* GPU memory wanted, MiB; 0: none (ABI 4) */
	uint32_t resume_session; /* 0, or the session to take back */
	uint8_t gpu_uuid[16]; /* its GPU; all zero: the daemon's (ABI 4) */
	uint64_t resume_token; /* with resume_session: its welcome's */
};

#define KVMEM_MESSAGE_LEN 160

/* daemon -> client: the answer to the hello. */
struct kvmem_welcome {
	uint32_t magic; /* KVMEM_WELCOME_MAGIC */
	uint16_t abi_version; /* the daemon's */
	uint16_t size; /* sizeof(struct kvmem_welcome) */
	int32_t error; /* 0, or a negative errno: refused */
	uint32_t session; /* the daemon's id for this session */
	uint64_t features; /* the daemon's, masked by the client's */
	uint64_t max_quota_bytes; /* the largest quota a session gets */
	uint64_t pool_free_bytes; /* host pool not promised to sessions */
	uint64_t map_bytes; /* size of the memfd */
	uint64_t ring_off; /* offsets into the memfd, see above */
	uint64_t sqes_off;
	uint64_t cqes_off;
	uint64_t buf_off;
	uint64_t buf_bytes;
	uint64_t arena_off;
	uint64_t arena_bytes; /* the session's quota */
	uint32_t sq_entries;
	uint32_t cq_entries;
	uint32_t slot_bytes[2]; /* page size of sealed [0] and hot [1] slots */
	uint64_t heat_off; /* offset of the heat array in the memfd */
	uint64_t resv[1]; /* 0 */
	char message[KVMEM_MESSAGE_LEN]; /* NUL-terminated: why, on error */
	/* ABI 4 */
	uint64_t gpu_bytes; /* GPU memory: the fourth descriptor; 0: none */
	uint8_t gpu_uuid[16]; /* the GPU it is on */
	/* KVMEM_FEAT_RESUME: what a hello that takes the session back after
	 * a restart of the daemon gives; else 0 */
	uint64_t resume_token;
	/* entries of the heat array: with the GPU tier, the host arena's units
	 * and its own; 0 (an older daemon): the host arena's only */
	uint64_t heat_units;
};

/* The welcome a client of ABI 3 gets, and a refusal sent before a hello
 * said the client's version: struct kvmem_welcome up to gpu_bytes. */
#define KVMEM_WELCOME_V3_SIZE 296

enum kvmem_notice_type {
	KVMEM_NOTICE_SHUTDOWN = 1, /* the daemon is stopping */
};

/* daemon -> client, any time after the welcome. */
struct kvmem_notice {
	uint32_t magic; /* KVMEM_NOTICE_MAGIC */
	uint32_t type; /* enum kvmem_notice_type */
	uint64_t resv[3]; /* 0 */
};

/* struct kvmem_ring.flags, written by the daemon */
#define KVMEM_RING_NEED_WAKEUP \
	(1U << 0) /* the daemon sleeps: ring the SQ
					  * doorbell after publishing */
#define KVMEM_RING_SHUTDOWN (1U << 1) /* the daemon takes no more SQEs */

/* struct kvmem_ring.cq_flags, written by the client */
#define KVMEM_RING_CQ_WAIT (1U << 0) /* the client sleeps on the CQ doorbell */

/*
 * The shared indices. Each field has one writer; the fields each side
 * writes are on cache lines of their own so polling does not bounce them.
 */
struct kvmem_ring {
	uint32_t sq_head; /* daemon: SQEs consumed */
	uint32_t flags; /* daemon: KVMEM_RING_* */
	uint32_t cq_tail; /* daemon: CQEs posted */
	uint32_t resv0[13];
	uint32_t sq_tail; /* client: SQEs published */
	uint32_t cq_head; /* client: CQEs consumed */
	uint32_t cq_flags; /* client: KVMEM_RING_CQ_* */
	uint32_t resv1[13];
};

enum kvmem_op {
	KVMEM_OP_NOP = 0, /* completes with 0 */
	KVMEM_OP_SEQ_CREATE = 1, /* -> a new sequence id (> 0) */
	KVMEM_OP_PAGE_ALLOC = 2, /* kind, len slots to the u32 array at addr
				  * -> how many were allocated (>= 1) */
	KVMEM_OP_PAGE_SEAL = 3, /* slot, seq, layer, token_start, ntokens:
				 * the page is full and immutable; its header
				 * must say the same, no other page of seq may
				 * have that layer and token_start, and
				 * token_start + ntokens must not pass 2^32
				 * -> 0 */
	KVMEM_OP_PAGE_FREE = 4, /* slot, seq: an unsealed slot (seq 0) goes
				 * back, or seq drops a sealed page -> 0 */
	KVMEM_OP_SEQ_FORK = 5, /* seq -> a new sequence id sharing its
				* sealed pages */
	KVMEM_OP_SEQ_ACQUIRE = 6, /* seq, addr, len: make its pages resident
				   * -> kvmem_page_moves, when they are;
				   * -EIO when one cannot be read back,
				   * -ENOMEM when they do not fit */
	KVMEM_OP_SEQ_RELEASE = 7, /* seq: its pages may move -> 0 */
	KVMEM_OP_SEQ_FREE = 8, /* seq: drop the sequence and its references
				* to sealed pages -> 0 */
	KVMEM_OP_STATS = 9, /* struct kvmem_stats to addr, len bytes
			     * -> bytes written */
	KVMEM_OP_SEQ_PREFETCH = 10, /* seq: start reading its pages back from
				     * the store, as the queue allows -> 0 */
	KVMEM_OP_PREFIX_PUBLISH = 11, /* seq, addr, len, layer,
				       * token_start, ntokens: copy the
				       * block's pages from layer on, under
				       * the key at addr -> layers copied
				       * (see below) */
	KVMEM_OP_PREFIX_ATTACH = 12, /* seq, addr, len, layer, token_start,
				      * ntokens: the published block's pages
				      * from layer on into new slots of seq
				      * -> pages attached (see below) */
	KVMEM_OP_PREFIX_FETCH = 13, /* addr, len, token_start: blocks from
				     * the shared tier into the tenant's
				     * published ones -> blocks there now
				     * (see below) */
	KVMEM_OP_LAST,
};

/*
 * Prefix sharing (KVMEM_FEAT_PREFIX). A sequence's tokens fall into
 * blocks, one page of every layer each: with sink tokens, block 0 is the
 * sink page (tokens 0 to sink_tokens - 1), then a block a tokens_per_page
 * page. The engine names block i by a key it computes over everything
 * that made the block's K/V (the model, and the tokens from 0 to the
 * block's end: a chained hash); kvmemd keeps the keys of each uid (the
 * tenant) apart, with the geometry, so a session never reaches another
 * tenant's, and neither the answer to an op nor its work depends on them.
 * Both ops copy pages a few layers an op (as many as a MiB of work
 * allows, one at least): the client asks again from the next layer.
 *
 * PREFIX_PUBLISH: addr points to the key (len = KVMEM_PREFIX_KEY_BYTES);
 * token_start and ntokens name the block, layer is 0 for the op that
 * starts it and, for the ops that continue it, the first layer not yet
 * copied (any other layer, key, block or sequence: -EINVAL). An op that
 * fails drops what was copied, as do a release and a free of seq, and
 * the block counts in the tenant's share while on its way. seq must be
 * acquired and hold the block's sealed, full page of every layer, none
 * damaged or archived. The result is how
 * many layers this op copied, each checked against its seal; the op of
 * the last one hands the block to the tenant, whatever becomes of seq.
 * A block published before completes at layer 0 with every layer counted.
 * Errors: -EPERM, before anything else is looked at, when the tenant is a
 * group that lists its publishers (prefix.publishers) and the session's uid
 * is not one; -ENOENT when a page is missing or not whole, -EIO when one no
 * longer matches its seal (CRC, or a word no code corrects), -EOPNOTSUPP
 * for an archived one, -EDQUOT when the block, with those on their way to
 * the tenant from other sessions, is over its cap (prefix.uid_bytes), or
 * its blocks being attached fill the cap, -ENOSPC when sharing is off or
 * prefix.bytes is full and the tenants over their fair share cannot make
 * the room (checked at layer 0 and again at the last: the same error
 * whatever the number of tenants), -ENOMEM.
 *
 * PREFIX_ATTACH: addr points to the key, and the buffer after it (len
 * bytes in all) receives a struct kvmem_page_move (_ex with
 * KVMEM_FEAT_ARCHIVE) for each page attached, old_slot
 * KVMEM_SLOT_NONE: the block's page of layer, layer + 1, ... as far as
 * the buffer allows, copied into new sealed slots of seq (acquired; it
 * must not hold a page of those names: -EEXIST). The result is how
 * many; -ENOENT when the tenant has no such block (key, geometry and
 * token_start alike), -EIO when its copy no longer verifies (kvmemd drops
 * it), -ENOMEM when no slot is free and no page can leave, -EMSGSIZE when
 * the buffer holds no move, -EBUSY when seq is not acquired. The pages
 * are then the session's own, as if it had sealed them. Between an op
 * that leaves the block partway and the session's next attach op (or
 * seq's release or free), the block is in use: another tenant's publish
 * passes it over while the tenant's blocks in use are within its fair
 * share. One that goes all the same makes the next op -ENOENT.
 *
 * PREFIX_FETCH (KVMEM_FEAT_REMOTE, offered when kvmemd has a shared tier,
 * remote.* in kvmemd.conf(5), or keeps published blocks on its backing
 * store, store.retain_bytes): addr points to the key of the parent of
 * the block at token_start (zeros for block 0), then the keys of that
 * block and the blocks after it, len = 32 * (1 + blocks), blocks at most
 * KVMEM_PREFIX_FETCH_MAX; ntokens is 0.
 * kvmemd reads the blocks the tenant does not have from its backing store
 * (the leading ones that are there), then from the shared tier (the rest),
 * checks each (the record's own CRCs, tenant, geometry, key and parent
 * key, then every page's code words and CRC: in the shared tier a page the
 * code corrects is written back corrected, one it cannot is deleted there;
 * one from the store that fails leaves it), and keeps the
 * leading ones that pass as published blocks of the tenant, to be
 * attached with PREFIX_ATTACH. The op completes when they are kept
 * (out of order, like the ops that wait for pages) with how many blocks
 * from token_start the tenant has now, 0 when not even the first;
 * -EAGAIN when the tier's queue is full, -EHOSTUNREACH when no node of
 * the tier answered, -EACCES when the tier refused the tenant's user,
 * -ECANCELED when kvmemd stopped first, errors of a publish's admission
 * (-EDQUOT, -ENOSPC) for the first block.
 */
#define KVMEM_PREFIX_KEY_BYTES 32
#define KVMEM_PREFIX_FETCH_MAX 64 /* blocks a PREFIX_FETCH asks for */
#define KVMEM_SLOT_NONE UINT32_MAX

/* struct kvmem_sqe.kind of PAGE_ALLOC */
enum kvmem_slot_kind {
	KVMEM_SLOT_SEALED = 0, /* the geometry's format and codec */
	KVMEM_SLOT_HOT = 1, /* FP16 + secded72 */
};

/* struct kvmem_sqe.flags of SEQ_ACQUIRE and SEQ_PREFETCH
 * (KVMEM_FEAT_GPU_TIER): the sequence's pages on the GPU where its slots
 * allow; a prefetch moves them in the background into free slots only,
 * down to tier.low_watermark */
#define KVMEM_SQE_GPU (1u << 0)

/* A submission: 64 bytes. Fields an opcode does not use must be 0. */
struct kvmem_sqe {
	uint8_t opcode; /* enum kvmem_op */
	uint8_t flags; /* KVMEM_SQE_GPU; else must be 0 */
	uint8_t kind; /* enum kvmem_slot_kind: PAGE_ALLOC */
	uint8_t resv0; /* must be 0 */
	uint32_t slot; /* PAGE_SEAL, PAGE_FREE */
	uint64_t user_data; /* returned in the CQE */
	uint64_t seq; /* sequence id */
	uint64_t addr; /* PAGE_ALLOC, STATS, PREFIX_*: offset of the
			* result (the key) in the buffer region, from
			* buf_off */
	uint32_t len; /* PAGE_ALLOC: slots; STATS, PREFIX_*: bytes */
	uint32_t layer; /* PAGE_SEAL, PREFIX_ATTACH */
	uint32_t token_start; /* PAGE_SEAL, PREFIX_* */
	uint32_t ntokens; /* PAGE_SEAL, PREFIX_* */
	uint64_t resv1[2]; /* must be 0 */
};

/* A completion: 16 bytes. */
struct kvmem_cqe {
	uint64_t user_data; /* from the SQE */
	int32_t res; /* >= 0, or a negative errno */
	uint32_t flags; /* 0 */
};

/*
 * What SEQ_ACQUIRE reports of a page that came back in another slot, or
 * in another format and codec (struct kvmem_page_move_ex); old_slot may
 * equal new_slot.
 */
struct kvmem_page_move {
	uint32_t layer;
	uint32_t token_start; /* the page's first token */
	uint32_t old_slot; /* where the client last saw it */
	uint32_t new_slot;
};

/* A move with KVMEM_FEAT_ARCHIVE: the same, and what the page is now. */
struct kvmem_page_move_ex {
	uint32_t layer;
	uint32_t token_start;
	uint32_t old_slot;
	uint32_t new_slot;
	uint8_t format; /* enum kvmem_format: the geometry's, or archived */
	uint8_t codec; /* enum kvmem_codec */
	uint8_t resv[6]; /* 0 */
};

/* Most slots one PAGE_ALLOC hands out. */
#define KVMEM_ALLOC_MAX 256

/* What STATS writes: the session, then the daemon. */
struct kvmem_stats {
	uint64_t arena_bytes; /* the session's quota */
	uint64_t used_bytes; /* in allocated slots */
	uint64_t slots_open; /* allocated, not sealed */
	uint64_t slots_sealed;
	uint64_t seqs;
	uint64_t seqs_acquired;
	uint64_t ops; /* SQEs completed for the session */
	uint64_t op_errors; /* of which with res < 0 */
	uint64_t sessions; /* daemon-wide from here */
	uint64_t pool_bytes; /* the host pool limit */
	uint64_t pool_used_bytes; /* promised to sessions */
	/* the session's pages, as the scrubber found them: words corrected,
	 * words no code could correct, pages holding such words */
	uint64_t ce_words;
	uint64_t ue_words;
	uint64_t degraded_pages;
	/* the session's pages on the backing store */
	uint64_t cold_pages;
	uint64_t cold_bytes;
};

/*
 * The layout is the ABI: these hold for every compiler that builds either
 * side, C or C++.
 */
#ifdef __cplusplus
#define KVMEM_UAPI_STATIC_ASSERT static_assert
#else
#define KVMEM_UAPI_STATIC_ASSERT _Static_assert
#endif
#define KVMEM_UAPI_ASSERT(type, field, off)                             \
	KVMEM_UAPI_STATIC_ASSERT(offsetof(struct type, field) == (off), \
				 #type "." #field " is at " #off)

KVMEM_UAPI_STATIC_ASSERT(sizeof(struct kvmem_geometry) == 32,
			 "kvmem_geometry size");
KVMEM_UAPI_ASSERT(kvmem_geometry, layers, 0);
KVMEM_UAPI_ASSERT(kvmem_geometry, kv_heads, 4);
KVMEM_UAPI_ASSERT(kvmem_geometry, head_dim, 8);
KVMEM_UAPI_ASSERT(kvmem_geometry, tokens_per_page, 12);
KVMEM_UAPI_ASSERT(kvmem_geometry, group_size, 16);
KVMEM_UAPI_ASSERT(kvmem_geometry, sink_tokens, 20);
KVMEM_UAPI_ASSERT(kvmem_geometry, format, 24);
KVMEM_UAPI_ASSERT(kvmem_geometry, codec, 25);
KVMEM_UAPI_ASSERT(kvmem_geometry, key_scales, 26);
KVMEM_UAPI_ASSERT(kvmem_geometry, rotation, 27);
KVMEM_UAPI_ASSERT(kvmem_geometry, resv, 28);

KVMEM_UAPI_STATIC_ASSERT(sizeof(struct kvmem_hello) == 96, "kvmem_hello size");
KVMEM_UAPI_ASSERT(kvmem_hello, magic, 0);
KVMEM_UAPI_ASSERT(kvmem_hello, abi_version, 4);
KVMEM_UAPI_ASSERT(kvmem_hello, size, 6);
KVMEM_UAPI_ASSERT(kvmem_hello, features, 8);
KVMEM_UAPI_ASSERT(kvmem_hello, geometry, 16);
KVMEM_UAPI_ASSERT(kvmem_hello, quota_bytes, 48);
KVMEM_UAPI_ASSERT(kvmem_hello, sq_entries, 56);
KVMEM_UAPI_ASSERT(kvmem_hello, cq_entries, 60);
KVMEM_UAPI_ASSERT(kvmem_hello, gpu_mib, 64);
KVMEM_UAPI_ASSERT(kvmem_hello, resume_session, 68);
KVMEM_UAPI_ASSERT(kvmem_hello, gpu_uuid, 72);
KVMEM_UAPI_ASSERT(kvmem_hello, resume_token, 88);

KVMEM_UAPI_STATIC_ASSERT(sizeof(struct kvmem_welcome) == 336,
			 "kvmem_welcome size");
KVMEM_UAPI_ASSERT(kvmem_welcome, magic, 0);
KVMEM_UAPI_ASSERT(kvmem_welcome, abi_version, 4);
KVMEM_UAPI_ASSERT(kvmem_welcome, size, 6);
KVMEM_UAPI_ASSERT(kvmem_welcome, error, 8);
KVMEM_UAPI_ASSERT(kvmem_welcome, session, 12);
KVMEM_UAPI_ASSERT(kvmem_welcome, features, 16);
KVMEM_UAPI_ASSERT(kvmem_welcome, max_quota_bytes, 24);
KVMEM_UAPI_ASSERT(kvmem_welcome, pool_free_bytes, 32);
KVMEM_UAPI_ASSERT(kvmem_welcome, map_bytes, 40);
KVMEM_UAPI_ASSERT(kvmem_welcome, ring_off, 48);
KVMEM_UAPI_ASSERT(kvmem_welcome, sqes_off, 56);
KVMEM_UAPI_ASSERT(kvmem_welcome, cqes_off, 64);
KVMEM_UAPI_ASSERT(kvmem_welcome, buf_off, 72);
KVMEM_UAPI_ASSERT(kvmem_welcome, buf_bytes, 80);
KVMEM_UAPI_ASSERT(kvmem_welcome, arena_off, 88);
KVMEM_UAPI_ASSERT(kvmem_welcome, arena_bytes, 96);
KVMEM_UAPI_ASSERT(kvmem_welcome, sq_entries, 104);
KVMEM_UAPI_ASSERT(kvmem_welcome, cq_entries, 108);
KVMEM_UAPI_ASSERT(kvmem_welcome, slot_bytes, 112);
KVMEM_UAPI_ASSERT(kvmem_welcome, heat_off, 120);
KVMEM_UAPI_ASSERT(kvmem_welcome, resv, 128);
KVMEM_UAPI_ASSERT(kvmem_welcome, message, 136);
KVMEM_UAPI_ASSERT(kvmem_welcome, gpu_bytes, KVMEM_WELCOME_V3_SIZE);
KVMEM_UAPI_ASSERT(kvmem_welcome, gpu_uuid, 304);
KVMEM_UAPI_ASSERT(kvmem_welcome, resume_token, 320);
KVMEM_UAPI_ASSERT(kvmem_welcome, heat_units, 328);

KVMEM_UAPI_STATIC_ASSERT(sizeof(struct kvmem_notice) == 32,
			 "kvmem_notice size");
KVMEM_UAPI_ASSERT(kvmem_notice, magic, 0);
KVMEM_UAPI_ASSERT(kvmem_notice, type, 4);
KVMEM_UAPI_ASSERT(kvmem_notice, resv, 8);

KVMEM_UAPI_STATIC_ASSERT(sizeof(struct kvmem_ring) == 128, "kvmem_ring size");
KVMEM_UAPI_ASSERT(kvmem_ring, sq_head, 0);
KVMEM_UAPI_ASSERT(kvmem_ring, flags, 4);
KVMEM_UAPI_ASSERT(kvmem_ring, cq_tail, 8);
KVMEM_UAPI_ASSERT(kvmem_ring, resv0, 12);
KVMEM_UAPI_ASSERT(kvmem_ring, sq_tail, 64);
KVMEM_UAPI_ASSERT(kvmem_ring, cq_head, 68);
KVMEM_UAPI_ASSERT(kvmem_ring, cq_flags, 72);
KVMEM_UAPI_ASSERT(kvmem_ring, resv1, 76);

KVMEM_UAPI_STATIC_ASSERT(sizeof(struct kvmem_sqe) == 64, "kvmem_sqe size");
KVMEM_UAPI_ASSERT(kvmem_sqe, opcode, 0);
KVMEM_UAPI_ASSERT(kvmem_sqe, flags, 1);
KVMEM_UAPI_ASSERT(kvmem_sqe, kind, 2);
KVMEM_UAPI_ASSERT(kvmem_sqe, resv0, 3);
KVMEM_UAPI_ASSERT(kvmem_sqe, slot, 4);
KVMEM_UAPI_ASSERT(kvmem_sqe, user_data, 8);
KVMEM_UAPI_ASSERT(kvmem_sqe, seq, 16);
KVMEM_UAPI_ASSERT(kvmem_sqe, addr, 24);
KVMEM_UAPI_ASSERT(kvmem_sqe, len, 32);
KVMEM_UAPI_ASSERT(kvmem_sqe, layer, 36);
KVMEM_UAPI_ASSERT(kvmem_sqe, token_start, 40);
KVMEM_UAPI_ASSERT(kvmem_sqe, ntokens, 44);
KVMEM_UAPI_ASSERT(kvmem_sqe, resv1, 48);

KVMEM_UAPI_STATIC_ASSERT(sizeof(struct kvmem_page_move) == 16,
			 "kvmem_page_move size");
KVMEM_UAPI_ASSERT(kvmem_page_move, layer, 0);
KVMEM_UAPI_ASSERT(kvmem_page_move, token_start, 4);
KVMEM_UAPI_ASSERT(kvmem_page_move, old_slot, 8);
KVMEM_UAPI_ASSERT(kvmem_page_move, new_slot, 12);

KVMEM_UAPI_STATIC_ASSERT(sizeof(struct kvmem_page_move_ex) == 24,
			 "kvmem_page_move_ex size");
KVMEM_UAPI_ASSERT(kvmem_page_move_ex, layer, 0);
KVMEM_UAPI_ASSERT(kvmem_page_move_ex, token_start, 4);
KVMEM_UAPI_ASSERT(kvmem_page_move_ex, old_slot, 8);
KVMEM_UAPI_ASSERT(kvmem_page_move_ex, new_slot, 12);
KVMEM_UAPI_ASSERT(kvmem_page_move_ex, format, 16);
KVMEM_UAPI_ASSERT(kvmem_page_move_ex, codec, 17);
KVMEM_UAPI_ASSERT(kvmem_page_move_ex, resv, 18);

KVMEM_UAPI_STATIC_ASSERT(sizeof(struct kvmem_cqe) == 16, "kvmem_cqe size");
KVMEM_UAPI_ASSERT(kvmem_cqe, user_data, 0);
KVMEM_UAPI_ASSERT(kvmem_cqe, res, 8);
KVMEM_UAPI_ASSERT(kvmem_cqe, flags, 12);

KVMEM_UAPI_STATIC_ASSERT(sizeof(struct kvmem_stats) == 128, "kvmem_stats size");
KVMEM_UAPI_ASSERT(kvmem_stats, arena_bytes, 0);
KVMEM_UAPI_ASSERT(kvmem_stats, used_bytes, 8);
KVMEM_UAPI_ASSERT(kvmem_stats, slots_open, 16);
KVMEM_UAPI_ASSERT(kvmem_stats, slots_sealed, 24);
KVMEM_UAPI_ASSERT(kvmem_stats, seqs, 32);
KVMEM_UAPI_ASSERT(kvmem_stats, seqs_acquired, 40);
KVMEM_UAPI_ASSERT(kvmem_stats, ops, 48);
KVMEM_UAPI_ASSERT(kvmem_stats, op_errors, 56);
KVMEM_UAPI_ASSERT(kvmem_stats, sessions, 64);
KVMEM_UAPI_ASSERT(kvmem_stats, pool_bytes, 72);
KVMEM_UAPI_ASSERT(kvmem_stats, pool_used_bytes, 80);
KVMEM_UAPI_ASSERT(kvmem_stats, ce_words, 88);
KVMEM_UAPI_ASSERT(kvmem_stats, ue_words, 96);
KVMEM_UAPI_ASSERT(kvmem_stats, degraded_pages, 104);
KVMEM_UAPI_ASSERT(kvmem_stats, cold_pages, 112);
KVMEM_UAPI_ASSERT(kvmem_stats, cold_bytes, 120);

#undef KVMEM_UAPI_ASSERT

#ifdef __cplusplus
}
#endif

#endif /* KVMEM_UAPI_H */
