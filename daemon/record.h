/* SPDX-License-Identifier: MIT */
/*
 * record.h - the record of kept sessions: its format, written and read, and
 * each session's live record, kept current while it runs (record.c)
 *
 * Included by resume.c, which keeps and takes sessions back, and record.c.
 * Event loop thread only, but for what record_live_write() hands a worker.
 */
#ifndef KVMEMD_RECORD_H
#define KVMEMD_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "session.h"

#define KEEP_MAGIC "KVMKEEP"
#define KEEP_VERSION 3
/* A session's name in the descriptor store, and of its live records:
 * "session-ID", "session-ID.0.rec" and "session-ID.1.rec". */
#define FD_PREFIX "session-"
#define LIVE_SUFFIX ".rec"
#define LIVE_PATH_MAX 320

struct keep_hdr {
	char magic[8]; /* KEEP_MAGIC */
	uint32_t version; /* KEEP_VERSION */
	uint32_t nsessions;
	uint32_t rec_size, slot_size, page_size, seq_size;
	uint8_t store_uuid[16]; /* all zero: no store */
	uint64_t generation; /* a live record's: the newer of its two wins */
	uint64_t body_bytes;
	uint32_t body_crc; /* CRC-32C of the body */
	uint32_t crc; /* CRC-32C of the header before it */
};

struct keep_rec {
	uint32_t id, uid;
	uint64_t token, features;
	struct kvmem_geometry g;
	struct kvmem_page_layout arch;
	uint64_t arena_bytes, map_bytes;
	uint32_t sq_entries, cq_entries;
	uint32_t top, top_page, free_page, nseqs;
	uint32_t seals, sq_head, cq_tail;
	uint32_t nwaits; /* ops waiting: their SQEs follow the sequences */
	uint32_t nslots, resv; /* slots in the record: those that start one */
	uint64_t wait_ns; /* left of its wait for its client; 0: all of it */
	uint64_t ops, op_errors, ce, ue, crc;
	uint64_t offloads, reloads, offload_bytes, reload_bytes;
};

struct keep_seq {
	uint32_t id, acquired, tokens, n;
};

/* Every part of the record is a multiple of 8 bytes, so each lies
 * aligned in the buffer it is read into. */
_Static_assert(sizeof(struct keep_hdr) % 8 == 0, "header padded");
_Static_assert(sizeof(struct keep_rec) % 8 == 0, "session padded");
_Static_assert(sizeof(struct keep_seq) % 8 == 0, "sequence padded");
_Static_assert(sizeof(struct arena_saved_slot) % 8 == 0, "slot padded");
_Static_assert(sizeof(struct page) % 8 == 0, "page padded");

/* A record being made, in memory. */
struct record_buf {
	uint8_t *p;
	size_t len, cap;
};

/* @n bytes more at the end of @b: where, or NULL (out of memory). */
void *record_buf_add(struct record_buf *b, size_t n);

/* A sequence's page indices are padded to 8 bytes, so that what follows
 * is aligned. */
static inline size_t record_idx_bytes(uint32_t n)
{
	return ((size_t)n * sizeof(uint32_t) + 7) & ~(size_t)7;
}

/*
 * record_put() - @s as a record has it, at the end of @b
 * @live: while it runs: each move under way shown as not started, each
 *        acquire still waiting as not issued, and the SQEs of the ops
 *        waiting after its sequences; else at a stop, where no move is
 *        under way and no op waits (session_keep_ready())
 *
 * Return: 0, or -ENOMEM.
 */
int record_put(struct record_buf *b, const struct kvmemd_session *s,
	       uint64_t now, int live);
/* The header of a record of @size bytes at @buf, to @h: 0, or why not in
 * @why (-EINVAL: damaged or cut short; -EPROTO: another version's). */
int record_hdr_check(const uint8_t *buf, size_t size, struct keep_hdr *h,
		     char *why, size_t len);

/*
 * Live records, with daemon.keep_on_crash. record_live_start() gives @s
 * one from now on (its first is written after @generation);
 * record_live_first() writes it at once, on the loop; record_live_write()
 * has the next written on a worker when its tables or ring moved (the
 * client sees what moved once it is); record_live_end(): the session
 * ended for good, its files go.
 */
void record_live_start(struct kvmemd_session *s, uint64_t generation);
void record_live_first(struct kvmemd_session *s);
void record_live_write(struct kvmemd_session *s);
void record_live_end(struct kvmemd_session *s);
/* Is @name a live record's file name? Its session's ID, or 0. */
uint32_t record_live_name(const char *name);
/*
 * Session @id's live record that its client saw last, read into *@buf
 * (*@size bytes), its path to @path: of its two records, the newer whole
 * one whose SQ head and CQ tail are those its ring shows, @ring. 0, or
 * -ENOENT (said in the log when a record is there).
 */
int record_live_read(struct kvmemd *d, uint32_t id, const uint32_t ring[2],
		     char *path, uint8_t **buf, size_t *size);

#endif /* KVMEMD_RECORD_H */
