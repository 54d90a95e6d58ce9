/* SPDX-License-Identifier: MIT */
/*
 * ras.h - what ras.c (error accounting, events, the check of one page),
 * patrol.c (the scrubber's passes) and inject.c (error injection) share;
 * included by those three alone
 */
#ifndef KVMEMD_RAS_H
#define KVMEMD_RAS_H

#include <stdint.h>
#include <time.h>

#include "kvmemd.h"
#include "session.h"

/* Bytes one call of kvmemd_ras_run() scrubs at most, and slot-table units
 * it looks at: the rings wait meanwhile. */
#define STEP_BYTES (256u << 10)
#define STEP_UNITS (1u << 16)
/* A patrol pass that found nothing sealed waits this long for the next. */
#define IDLE_NS 1000000000ull
/* Past this size the events file starts again, after the events in
 * memory are saved to events.1. */
#define EVENTS_FILE_MAX (1u << 20)
/* Events one user may make per minute, however many sessions it opens: a
 * client rewriting its own pages cannot push everyone else's events out.
 * The counts still grow. */
#define USER_EVENTS 64
#define MINUTE_NS (60ull * 1000000000ull)
/* An event read from a file of a version that did not record the user. */
#define UID_UNKNOWN ((uid_t)-1)

enum tier { TIER_HOT, TIER_WARM, TIER_COLD, TIER_NR };
extern const char *const ras_tier_names[TIER_NR];
extern const char *const ras_pool_names[KVMEMD_POOL_NR];

enum region { REGION_HEADER, REGION_SCALES, REGION_PAYLOAD, REGION_NR };
extern const char *const ras_region_names[REGION_NR];

/* A run of a page's codewords of one codec: the header, the scales and
 * their checks, K, V. */
struct region_def {
	size_t off, nwords;
	int codec;
	enum region region;
};

/* The four regions of the page in @sl, by its layout (ras.c). */
void ras_slot_regions(const struct kvmemd_session *s, const struct slot *sl,
		      struct region_def rg[4]);

enum ev_kind { EV_UE, EV_CRC, EV_MISMATCH, EV_LOST, EV_NR };
extern const char *const ras_kind_names[EV_NR];
/* The journal's MESSAGE_ID of each kind (kvmemd(8), JOURNAL). */
extern const char *const ras_kind_ids[EV_NR];

/* SRC_RELOAD: a page read back from the store; SRC_MOVE: one that came
 * back from the GPU tier. Both are checked against the CRC of what left. */
enum source {
	SRC_PATROL,
	SRC_ONDEMAND,
	SRC_SEAL,
	SRC_RELOAD,
	SRC_MOVE,
	SRC_NR
};
extern const char *const ras_source_names[SRC_NR];

struct ras_count {
	uint64_t ce, ue; /* words */
};

struct ras_event {
	uint64_t time_ns; /* CLOCK_REALTIME */
	uid_t uid; /* of the session */
	uint32_t session, seq, layer, token_start, token_end, words;
	uint8_t pool, tier, codec, region, kind, restored, source;
};

struct pass {
	int active;
	enum source kind;
	struct kvmemd_target t;
	uint32_t session, pos; /* cursor: session id; unit, or seq index */
	uint64_t started_ns, started_mono;
	double duration;
	uint64_t bytes, pages, ce, ue, crc, degraded, restored;
	uint64_t padding; /* bytes that carry no value, put back */
	uint64_t words[KVMEM_CODEC_NR], ce_words[KVMEM_CODEC_NR];
	/* a patrol's: the seconds its words had to collect flips since the
	 * pass before checked them, on average (see pass_exposure()); 0 for
	 * the first */
	double exposure;
	struct kvmemd_check job; /* the page under the cursor */
	int in_job;
	/* of pages, those of published prefixes; and their blocks dropped */
	uint64_t prefix_pages, prefix_dropped;
};

/* Steps of the adaptive patrol `kvmemctl scrub` lists. */
#define ADAPT_STEPS 16
/* Doublings of the patrol rate at most, whatever scrub.rate_max allows. */
#define ADAPT_LEVEL_MAX 20

struct adapt_step {
	uint64_t time_ns; /* CLOCK_REALTIME */
	unsigned int from, to;
	double ue_day; /* predicted at from's cycle */
	double cycle; /* seconds, at to's rate */
};

/*
 * The patrol's answer to scrub.target_ue_per_day: it runs at 2^level times
 * the configured rate. Decided at the end of each patrol pass.
 */
struct adapt {
	unsigned int level, from; /* from: the level the decision started at */
	double base_cycle; /* seconds at the configured rate, when decided */
	double ue_day; /* predicted at the level's cycle, when decided */
	int short_of; /* at scrub.rate_max, and the prediction still over:
		       * the archive tier takes released pages of any age */
	uint64_t up, down; /* steps taken */
	uint64_t escalations; /* times short_of was set */
	struct kvmemd_ratelimit log; /* a client's errors can make steps */
	struct adapt_step step[ADAPT_STEPS]; /* a ring: step nstep goes next */
	uint64_t nstep;
};

struct kvmemd_ras {
	struct ras_count vol[KVMEMD_POOL_NR][TIER_NR][KVMEM_CODEC_NR];
	struct ras_count agg[KVMEMD_POOL_NR][TIER_NR][KVMEM_CODEC_NR];
	uint64_t reset_ns, reset_mono;
	uint64_t crc; /* pages whose CRC stopped matching, volatile */
	int agg_dirty;
	uint64_t saved_mono; /* totals written at most once a minute */
	uint64_t summary_mono; /* pass summaries logged at most once */

	struct ras_event *ev; /* ev_n of them, oldest first */
	uint32_t ev_cap, ev_n;
	uint64_t ev_lost;
	int ev_fd;
	uint64_t ev_bytes, ev_open_mono;

	int enabled; /* scrub start / stop */
	double tokens, rate;
	uint64_t refill_mono, idle_until;
	struct pass patrol, ondemand, last_patrol, last;
	struct adapt adapt;
	uint64_t passes, bytes_total, pages_total;
	struct kvmemd_waiter *waiter; /* an on-demand pass answers it */
	uint32_t check_next; /* the session whose seal check goes first */
	/* copies of pages on a GPU the daemon cannot read, under check:
	 * [0] the patrol's, [1] the on-demand pass's */
	uint8_t *bounce[2];
	size_t bounce_cap[2];
};

/* ras.c */
uint64_t ras_clock_ns(clockid_t id);
double ras_secs(uint64_t ns);
const char *ras_codec_name(int codec);
/* Write the totals to a new file and rename it over the old one. */
void ras_save_counters(struct kvmemd *d);
/* Say what each user's limits held back, once their windows are over. */
void ras_users_flush(struct kvmemd *d);
/* Set up @c to check the page at @unit, for @src. */
void ras_check_start(const struct kvmemd_session *s, struct kvmemd_check *c,
		     uint32_t unit, enum source src);
/* Run @c for about *@budget bytes of work, what it finds counted in @p as
 * well. Return: 1 when the check is over, 0 when the budget ran out. */
int ras_check_step(struct kvmemd *d, struct kvmemd_session *s,
		   struct kvmemd_check *c, struct pass *p, uint64_t *budget);

/*
 * @s's sealed page at @unit was written other than by its check (by the
 * injector): in place, or on a GPU the daemon cannot read from a copy,
 * @was as it was and @now as it is (@size bytes; NULL for a page written
 * in place). A pass holding a copy of that page under check (a bounce
 * buffer) takes the same changes, or its copy going back would undo them;
 * a pass part way through checking it walks it again from its scales, or
 * its CRC would be taken of a page its codes had not looked at.
 */
void ras_page_written(struct kvmemd *d, const struct kvmemd_session *s,
		      uint32_t unit, const uint8_t *was, const uint8_t *now,
		      size_t size);

/* patrol.c */
/* Bytes (@pages 0) or pages scrubbed so far, passes under way included. */
uint64_t ras_scrubbed(const struct kvmemd_ras *r, int pages);

#endif /* KVMEMD_RAS_H */
