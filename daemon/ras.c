/* SPDX-License-Identifier: MIT */
/*
 * ras.c - reliability: error accounting, error events and the check of
 * one page (the passes that check every page are patrol.c's, error
 * injection inject.c's)
 *
 * A page check reads each codeword of the page (header, scales, K and V)
 * and writes corrections back with byte stores that only ever remove
 * errors, so a client reading the page meanwhile decodes it the same way.
 * It runs on the event loop thread in bounded steps: the slot table cannot
 * change under it and a freed slot is never written to.
 *
 * The daemon trusts nothing in the page but the codewords' own checks: the
 * layout comes from the slot's kind (or, for a page kvmemd archived, the
 * session's archive layout) and the header is compared with what
 * the daemon recorded at seal time. A damaged header is written back from
 * that record (the page is "restored"); words no code can correct mark the
 * page degraded (clients rebuild those values from neighbouring tokens when
 * they decode) and make an event.
 *
 * Counters are kept per pool, tier and codec, in words: volatile ones since
 * start or the last reset, and totals kept in STATE_DIR/counters across
 * restarts. Events go to a bounded ring, the journal (rate-limited) and
 * STATE_DIR/events, from which the ring is refilled at start.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kvmem/crc32c.h"
#include "kvmem/inject.h"
#include "kvmem-private.h"
#include "json.h"
#include "kvmemd.h"
#include "prefix.h"
#include "session.h"

#include "ras.h"

const char *const ras_tier_names[TIER_NR] = { "hot", "warm", "cold" };
const char *const ras_pool_names[KVMEMD_POOL_NR] = { "host", "gpu", "nvme" };
const char *const ras_region_names[REGION_NR] = { "header", "scales",
						  "payload" };
const char *const ras_kind_names[EV_NR] = { "uncorrectable", "crc", "mismatch",
					    "lost" };
const char *const ras_kind_ids[EV_NR] = {
	"757da92a137844b4b70f2b3b2a8d6e64",
	"ee295074b34440c7be1635c04cbd1711",
	"c3772798eac1471bac4545bb959a445b",
	"aefb202d098c489390f10a2bd9656c32",
};
const char *const ras_source_names[SRC_NR] = { "patrol", "ondemand", "seal",
					       "reload", "move" };

/* Did the page come back from elsewhere, its CRC as it left known? */
static int came_back(enum source src)
{
	return src == SRC_RELOAD || src == SRC_MOVE;
}

uint64_t ras_clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double ras_secs(uint64_t ns)
{
	return (double)ns / 1e9;
}

const char *ras_codec_name(int codec)
{
	return kvmem_codec_get(codec)->name;
}

static int name_index(const char *const *names, int n, const char *name)
{
	int i;

	for (i = 0; i < n; i++)
		if (!strcmp(names[i], name))
			return i;
	return -1;
}

/* ---- state files ------------------------------------------------------ */

static int state_path(const struct kvmemd *d, const char *name, char *buf,
		      size_t len)
{
	int n = snprintf(buf, len, "%s/%s", d->cfg.state_dir, name);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* A file that cannot be read back is kept aside for a human, not lost. */
static void keep_aside(const struct kvmemd *d, const char *name,
		       const char *why)
{
	char path[300], bad[310];

	if (state_path(d, name, path, sizeof(path)))
		return;
	snprintf(bad, sizeof(bad), "%s.bad", path);
	rename(path, bad);
	kvmemd_log(LOG_WARNING, "%s: %s; moved to %s, starting from zero", path,
		   why, bad);
}

static void load_counters(struct kvmemd *d)
{
	struct kvmemd_ras *r = d->ras;
	char path[300], line[256], pool[16], tier[16], codec[16];
	unsigned long long ce, ue;
	int p, t, c, n = 0;
	FILE *f;

	if (state_path(d, "counters", path, sizeof(path)))
		return;
	f = fopen(path, "re");
	if (!f) {
		if (errno != ENOENT)
			kvmemd_log_err(LOG_WARNING, -errno, "%s", path);
		return;
	}
	if (!fgets(line, sizeof(line), f) ||
	    strcmp(line, "kvmem-counters 1\n")) {
		fclose(f);
		keep_aside(d, "counters", "not a kvmem counters file");
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		n++;
		if (strchr(line, '-') ||
		    sscanf(line, "%15s %15s %15s %llu %llu", pool, tier, codec,
			   &ce, &ue) != 5 ||
		    (p = name_index(ras_pool_names, KVMEMD_POOL_NR, pool)) <
			    0 ||
		    (t = name_index(ras_tier_names, TIER_NR, tier)) < 0 ||
		    (c = kvmem_codec_by_name(codec)) < 0) {
			fclose(f);
			memset(r->agg, 0, sizeof(r->agg));
			snprintf(line, sizeof(line), "line %d is malformed",
				 n + 1);
			keep_aside(d, "counters", line);
			return;
		}
		r->agg[p][t][c].ce = ce;
		r->agg[p][t][c].ue = ue;
	}
	fclose(f);
}

/* A new state file to write, as private as the events file. */
static FILE *state_create(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;

	if (!f && fd >= 0)
		close(fd);
	return f;
}

/* Write the totals to a new file and rename it over the old one. */
void ras_save_counters(struct kvmemd *d)
{
	struct kvmemd_ras *r = d->ras;
	char path[300], tmp[310];
	int p, t, c, ok;
	FILE *f;

	if (!r->agg_dirty || state_path(d, "counters", path, sizeof(path)))
		return;
	r->saved_mono = kvmemd_now_ns();
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = state_create(tmp);
	if (!f) {
		kvmemd_log_err(LOG_WARNING, -errno, "%s", tmp);
		return;
	}
	fprintf(f, "kvmem-counters 1\n");
	for (p = 0; p < KVMEMD_POOL_NR; p++) {
		for (t = 0; t < TIER_NR; t++) {
			for (c = 0; c < KVMEM_CODEC_NR; c++) {
				const struct ras_count *a = &r->agg[p][t][c];

				if (a->ce || a->ue)
					fprintf(f, "%s %s %s %llu %llu\n",
						ras_pool_names[p],
						ras_tier_names[t],
						ras_codec_name(c),
						(unsigned long long)a->ce,
						(unsigned long long)a->ue);
			}
		}
	}
	ok = !fflush(f) && !fsync(fileno(f));
	ok &= !fclose(f);
	if (!ok || rename(tmp, path)) {
		kvmemd_log_err(LOG_WARNING, -errno,
			       "cannot save the error totals to %s", path);
		unlink(tmp);
		return;
	}
	r->agg_dirty = 0;
}

static void event_line(const struct ras_event *e, char *buf, size_t len)
{
	snprintf(buf, len,
		 "%llu.%09llu %u %u %u %u %u %s %s %s %s %u %s %u %s %u\n",
		 (unsigned long long)(e->time_ns / 1000000000ull),
		 (unsigned long long)(e->time_ns % 1000000000ull), e->session,
		 e->seq, e->layer, e->token_start, e->token_end,
		 ras_pool_names[e->pool], ras_tier_names[e->tier],
		 ras_codec_name(e->codec), ras_region_names[e->region],
		 e->words, ras_kind_names[e->kind], e->restored,
		 ras_source_names[e->source], (unsigned int)e->uid);
}

/* A line of event_line(); one without the last field (the uid) is from
 * an earlier version. */
static int event_parse(const char *line, struct ras_event *e)
{
	char pool[16], tier[16], codec[16], region[16], kind[16], src[16];
	unsigned long long s, ns;
	unsigned int restored, uid;
	int p, t, c, g, k, o, n;

	n = sscanf(line,
		   "%llu.%9llu %u %u %u %u %u %15s %15s %15s %15s %u %15s "
		   "%u %15s %u",
		   &s, &ns, &e->session, &e->seq, &e->layer, &e->token_start,
		   &e->token_end, pool, tier, codec, region, &e->words, kind,
		   &restored, src, &uid);
	if (n != 15 && n != 16)
		return -EINVAL;
	e->uid = n == 16 ? (uid_t)uid : UID_UNKNOWN;
	p = name_index(ras_pool_names, KVMEMD_POOL_NR, pool);
	t = name_index(ras_tier_names, TIER_NR, tier);
	c = kvmem_codec_by_name(codec);
	g = name_index(ras_region_names, REGION_NR, region);
	k = name_index(ras_kind_names, EV_NR, kind);
	o = name_index(ras_source_names, SRC_NR, src);
	if (p < 0 || t < 0 || c < 0 || g < 0 || k < 0 || o < 0 ||
	    restored > 1 || ns >= 1000000000ull ||
	    s > UINT64_MAX / 2000000000ull)
		return -EINVAL;
	e->time_ns = s * 1000000000ull + ns;
	e->pool = (uint8_t)p;
	e->tier = (uint8_t)t;
	e->codec = (uint8_t)c;
	e->region = (uint8_t)g;
	e->kind = (uint8_t)k;
	e->restored = (uint8_t)restored;
	e->source = (uint8_t)o;
	return 0;
}

/*
 * The event a full ring gives up for a new one: of the user with the most
 * events in it, the oldest that says nothing was lost (a header put
 * back), else its oldest. A user who floods the ring only ever pushes out
 * its own events.
 */
static uint32_t ring_victim(const struct kvmemd *d)
{
	const struct kvmemd_ras *r = d->ras;
	uint32_t i, most = 0, at = UINT32_MAX;
	uid_t heavy = 0;

	for (i = 0; i < d->nusers; i++)
		if (d->users[i].ring_events > most) {
			most = d->users[i].ring_events;
			heavy = d->users[i].uid;
		}
	for (i = 0; i < r->ev_n; i++) {
		if (r->ev[i].uid != heavy)
			continue;
		if (r->ev[i].kind == EV_MISMATCH)
			return i;
		if (at == UINT32_MAX)
			at = i;
	}
	return at == UINT32_MAX ? 0 : at;
}

static void ring_add(struct kvmemd *d, const struct ras_event *e)
{
	struct kvmemd_ras *r = d->ras;
	struct kvmemd_user *u;
	uint32_t v;

	if (r->ev_n == r->ev_cap) {
		v = ring_victim(d);
		u = kvmemd_user(d, r->ev[v].uid);
		if (u)
			u->ring_events--;
		memmove(&r->ev[v], &r->ev[v + 1],
			(r->ev_n - v - 1) * sizeof(*r->ev));
		r->ev_n--;
		r->ev_lost++;
	}
	r->ev[r->ev_n++] = *e;
	u = kvmemd_user(d, e->uid);
	if (u)
		u->ring_events++;
}

/* Refill the ring from a file: its good lines, kept as ring_add() keeps
 * them. */
static void load_events(struct kvmemd *d, const char *name)
{
	char path[300], line[512];
	struct ras_event e;
	unsigned int bad = 0;
	FILE *f;

	if (state_path(d, name, path, sizeof(path)))
		return;
	f = fopen(path, "re");
	if (!f) {
		if (errno != ENOENT)
			kvmemd_log_err(LOG_WARNING, -errno, "%s", path);
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		memset(&e, 0, sizeof(e));
		if (event_parse(line, &e))
			bad++;
		else
			ring_add(d, &e);
	}
	fclose(f);
	if (bad)
		kvmemd_log(LOG_WARNING, "%s: %u malformed lines skipped", path,
			   bad);
}

/*
 * The events in memory to events.1 (a new file renamed over the old one):
 * they were kept fairly between users, so what a full events file would
 * lose by starting again is what the ring already gave up.
 */
static int save_events(struct kvmemd *d)
{
	struct kvmemd_ras *r = d->ras;
	char path[300], tmp[310], line[512];
	uint32_t i;
	FILE *f;
	int ok = 1;

	if (state_path(d, "events.1", path, sizeof(path)))
		return -ENAMETOOLONG;
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = state_create(tmp);
	if (!f)
		return -errno;
	for (i = 0; i < r->ev_n; i++) {
		event_line(&r->ev[i], line, sizeof(line));
		ok &= fputs(line, f) >= 0;
	}
	ok &= !fflush(f) && !fsync(fileno(f));
	ok &= !fclose(f);
	if (!ok || rename(tmp, path)) {
		unlink(tmp);
		return -EIO;
	}
	return 0;
}

static void open_events(struct kvmemd *d)
{
	struct kvmemd_ras *r = d->ras;
	char path[300], last;
	struct stat st;
	int flags = O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC;

	r->ev_open_mono = kvmemd_now_ns();
	if (state_path(d, "events", path, sizeof(path)))
		return;
	r->ev_bytes = stat(path, &st) ? 0 : (uint64_t)st.st_size;
	if (r->ev_bytes >= EVENTS_FILE_MAX) {
		if (save_events(d)) {
			kvmemd_log_err(LOG_WARNING, -errno,
				       "cannot save the events to events.1; "
				       "%s goes on growing",
				       path);
		} else {
			flags |= O_TRUNC;
			r->ev_bytes = 0;
		}
	}
	r->ev_fd = open(path, flags, 0640);
	if (r->ev_fd < 0) {
		kvmemd_log_err(LOG_WARNING, -errno,
			       "%s: events are not kept until it opens", path);
		return;
	}
	/* A line cut short by a crash ends here, not in the next one. */
	if (r->ev_bytes &&
	    pread(r->ev_fd, &last, 1, (off_t)r->ev_bytes - 1) == 1 &&
	    last != '\n' && write(r->ev_fd, "\n", 1) == 1)
		r->ev_bytes++;
}

/* The kind of message kvmemd_rl() limits for @uid's events. */
static void user_what(char *buf, size_t len, uid_t uid)
{
	snprintf(buf, len,
		 "error events of uid %u (kvmemctl events lists them)",
		 (unsigned int)uid);
}

static void events_missed(uid_t uid, uint64_t missed)
{
	kvmemd_log(LOG_WARNING,
		   "uid %u: %llu error events were counted but not recorded "
		   "(more than %u a minute)",
		   (unsigned int)uid, (unsigned long long)missed, USER_EVENTS);
}

/* Say what each user's limits held back, once their windows are over. */
void ras_users_flush(struct kvmemd *d)
{
	uint64_t now = kvmemd_now_ns();
	char what[80];
	uint32_t i;

	for (i = 0; i < d->nusers; i++) {
		struct kvmemd_user *u = &d->users[i];

		if (u->log.missed) {
			user_what(what, sizeof(what), u->uid);
			kvmemd_rl_flush(&u->log, KVMEMD_RL_WINDOW_NS, what);
		}
		if (u->events.missed && now - u->events.start >= MINUTE_NS) {
			events_missed(u->uid, u->events.missed);
			u->events.missed = 0;
			u->events.n = 0;
		}
	}
}

static void record_event(struct kvmemd *d, const struct ras_event *e)
{
	struct kvmemd_ras *r = d->ras;
	uint64_t now = kvmemd_now_ns();
	struct kvmemd_user *u;
	char line[512], what[80], fields[512];
	size_t len;

	ring_add(d, e);
	event_line(e, line, sizeof(line));
	len = strlen(line);
	if (r->ev_fd < 0 && now - r->ev_open_mono >= MINUTE_NS)
		open_events(d);
	if (r->ev_fd >= 0) {
		if (write(r->ev_fd, line, len) != (ssize_t)len) {
			kvmemd_log_err(LOG_WARNING, -errno,
				       "cannot append to the events file");
			close(r->ev_fd);
			r->ev_fd = -1;
		} else if ((r->ev_bytes += len) >= EVENTS_FILE_MAX) {
			close(r->ev_fd);
			open_events(d);
		}
	}
	/* The journal hears KVMEMD_RL_BURST events of a user per window. */
	u = kvmemd_user(d, e->uid);
	if (u) {
		user_what(what, sizeof(what), e->uid);
		if (!kvmemd_rl(&u->log, KVMEMD_RL_WINDOW_NS, KVMEMD_RL_BURST,
			       what))
			return;
	}
	snprintf(fields, sizeof(fields),
		 "MESSAGE_ID=%s\nKVMEM_EVENT=%s\nCLIENT_UID=%u\nSESSION=%u\n"
		 "SEQ=%u\nLAYER=%u\nTOKEN_START=%u\nTOKEN_END=%u\n"
		 "POOL=%s\nTIER=%s\nCODEC=%s\nREGION=%s\nWORDS=%u\n"
		 "SOURCE=%s\nRESTORED=%d\n",
		 ras_kind_ids[e->kind], ras_kind_names[e->kind],
		 (unsigned int)e->uid, e->session, e->seq, e->layer,
		 e->token_start, e->token_end, ras_pool_names[e->pool],
		 ras_tier_names[e->tier], ras_codec_name(e->codec),
		 ras_region_names[e->region], e->words,
		 ras_source_names[e->source], e->restored);
	kvmemd_log_fields(
		e->restored ? LOG_WARNING : LOG_ERR, fields,
		"%s error: uid %u session %u seq %u layer %u tokens %u-%u, "
		"%s %s %s %s, %u words; %s (%s)",
		ras_kind_names[e->kind], (unsigned int)e->uid, e->session,
		e->seq, e->layer, e->token_start, e->token_end,
		ras_pool_names[e->pool], ras_tier_names[e->tier],
		ras_codec_name(e->codec), ras_region_names[e->region], e->words,
		e->restored	   ? "restored"
		: e->kind == EV_UE ? "values rebuilt from neighbours on read"
		: e->kind == EV_LOST
			? "the page came back as something else: all its "
			  "values erased"
			: "page marked degraded",
		ras_source_names[e->source]);
}

int kvmemd_ras_init(struct kvmemd *d)
{
	struct kvmemd_ras *r = calloc(1, sizeof(*r));

	if (!r)
		return -ENOMEM;
	r->ev_cap = d->cfg.events;
	r->ev = calloc(r->ev_cap, sizeof(*r->ev));
	if (!r->ev) {
		free(r);
		return -ENOMEM;
	}
	r->ev_fd = -1;
	r->enabled = 1;
	r->reset_mono = kvmemd_now_ns();
	r->reset_ns = ras_clock_ns(CLOCK_REALTIME);
	r->refill_mono = r->reset_mono;
	d->ras = r;
	load_counters(d);
	load_events(d, "events.1");
	load_events(d, "events");
	r->ev_lost = 0;
	open_events(d);
	return 0;
}

void kvmemd_ras_exit(struct kvmemd *d)
{
	struct kvmemd_ras *r = d->ras;

	if (!r)
		return;
	ras_save_counters(d);
	if (r->ev_fd >= 0)
		close(r->ev_fd);
	free(r->ev);
	free(r->bounce[0]);
	free(r->bounce[1]);
	free(r);
	d->ras = NULL;
}

/* ---- one page --------------------------------------------------------- */

void ras_slot_regions(const struct kvmemd_session *s, const struct slot *sl,
		      struct region_def rg[4])
{
	const struct kvmem_page_layout *l = slot_layout(s, sl);
	size_t block =
		(size_t)s->g.kv_heads * s->g.tokens_per_page * l->row_words;

	rg[0] = (struct region_def){ 0, KVMEM_PAGE_HDR_WORDS,
				     KVMEM_PAGE_META_CODEC, REGION_HEADER };
	/* The scales and, after them, the checks: metadata words. */
	rg[1] = (struct region_def){ l->scales_off,
				     l->scale_words + 2 * (size_t)l->nchecks,
				     KVMEM_PAGE_META_CODEC, REGION_SCALES };
	rg[2] = (struct region_def){ l->k_off, block, l->codec,
				     REGION_PAYLOAD };
	rg[3] = (struct region_def){ l->v_off, block, l->codec,
				     REGION_PAYLOAD };
}

/* Errors found in a page read back were made on the store. */
static enum tier slot_tier(const struct slot *sl, enum source src)
{
	if (src == SRC_RELOAD)
		return TIER_COLD;
	return sl->kind == KVMEM_SLOT_HOT ? TIER_HOT : TIER_WARM;
}

/* Where the errors @c finds were made: on the GPU for a page there or
 * back from there, on the store for one read back from it. */
static enum kvmemd_pool_kind check_pool(const struct kvmemd_session *s,
					const struct kvmemd_check *c)
{
	if (c->src == SRC_MOVE || arena_unit_gpu(&s->arena, c->unit))
		return KVMEMD_POOL_CUDA;
	return c->src == SRC_RELOAD ? KVMEMD_POOL_NVME : KVMEMD_POOL_HOST;
}

/*
 * Compare the header in the page with the one recorded at seal and write
 * back the bytes that differ: each store turns wrong bits into right ones,
 * so a reader sees the header as it was or closer to right. 1 when it
 * wrote.
 */
static int restore_header(const struct kvmemd_session *s, const struct slot *sl,
			  uint8_t *page)
{
	uint8_t raw[KVMEM_PAGE_HDR_BYTES], want[KVMEM_PAGE_HDR_BYTES];
	struct kvmem_page_hdr h, good;
	size_t i;

	session_slot_header(s, sl, &good);
	memcpy(raw, page, sizeof(raw));
	if (!kvmem__hdr_decode(raw, &h, NULL) && !memcmp(&h, &good, sizeof(h)))
		return 0;
	kvmem__hdr_encode(want, &good);
	for (i = 0; i < sizeof(want); i++)
		if (raw[i] != want[i])
			__atomic_store_n(&page[i], want[i], __ATOMIC_RELAXED);
	return 1;
}

/* The bytes a check reads and corrects: the page where it is, or its copy
 * when it is on a GPU the daemon cannot read. */
static uint8_t *check_page(const struct kvmemd_session *s,
			   const struct kvmemd_check *c)
{
	return c->bounce ? c->bounce : session_page(s, c->unit);
}

static void page_event(struct kvmemd *d, struct kvmemd_session *s,
		       const struct slot *sl, struct ras_event *e,
		       const struct kvmemd_check *c)
{
	const enum source src = (enum source)c->src;
	struct kvmemd_user *u = kvmemd_user(d, s->uid);
	uint64_t missed = 0;
	int ok = 1;

	/* Without a record (no memory) the event is kept: it may be real. */
	if (u)
		ok = kvmemd_ratelimit(&u->events, kvmemd_now_ns(), MINUTE_NS,
				      USER_EVENTS, &missed);
	if (missed)
		events_missed(s->uid, missed);
	if (!ok && u->events.missed == 1)
		kvmemd_log(LOG_WARNING,
			   "uid %u: more than %u error events in a minute; "
			   "the rest of the minute's are counted, not recorded",
			   (unsigned int)s->uid, USER_EVENTS);
	if (!ok)
		return;
	e->time_ns = ras_clock_ns(CLOCK_REALTIME);
	e->uid = s->uid;
	e->session = s->id;
	e->seq = sl->seq;
	e->layer = sl->layer;
	e->token_start = sl->token_start;
	e->token_end = sl->token_start + sl->ntokens - 1;
	e->pool = (uint8_t)check_pool(s, c);
	e->tier = (uint8_t)slot_tier(sl, src);
	e->source = (uint8_t)src;
	record_event(d, e);
}

enum check_phase {
	PH_STORE, /* reload: the page as it was written? */
	PH_SCALES, /* codewords scrubbed, region by region */
	PH_K,
	PH_V,
	PH_TIDY, /* padding put back */
	PH_HEADER, /* header restored, new uncorrectable words reported */
	PH_CRC, /* the CRC of the seal */
	PH_DONE,
};

/* Work one step does at most: the rings wait meanwhile. */
#define CHECK_CHUNK (64u << 10)

void ras_check_start(const struct kvmemd_session *s, struct kvmemd_check *c,
		     uint32_t unit, enum source src)
{
	memset(c, 0, sizeof(*c));
	c->unit = unit;
	c->seal = s->arena.slots[unit].seal;
	c->src = (uint8_t)src;
	c->phase = came_back(src) ? PH_STORE : PH_SCALES;
}

static void mark_degraded(struct kvmemd_session *s, uint32_t unit,
			  struct pass *p)
{
	if (arena_slot_mark(&s->arena, unit, SLOT_DEGRADED))
		p->degraded++;
}

/* The words @c corrected (and the padding it put back), counted. */
static void count_corrected(struct kvmemd *d, struct kvmemd_session *s,
			    const struct kvmemd_check *c, struct pass *p)
{
	struct kvmemd_ras *r = d->ras;
	const struct slot *sl = &s->arena.slots[c->unit];
	const enum tier tier = slot_tier(sl, c->src);
	const enum kvmemd_pool_kind pool = check_pool(s, c);
	struct region_def rg[4];
	size_t i;

	ras_slot_regions(s, sl, rg);
	for (i = 0; i < ARRAY_SIZE(rg); i++)
		p->words[rg[i].codec] += rg[i].nwords;
	p->ce_words[KVMEM_PAGE_META_CODEC] +=
		c->ce[REGION_HEADER] + c->ce[REGION_SCALES];
	p->ce_words[rg[2].codec] += c->ce[REGION_PAYLOAD];
	for (i = 0; i < REGION_NR; i++) {
		int codec = i == REGION_PAYLOAD ? rg[2].codec
						: KVMEM_PAGE_META_CODEC;

		r->vol[pool][tier][codec].ce += c->ce[i];
		r->agg[pool][tier][codec].ce += c->ce[i];
		r->agg_dirty |= c->ce[i] > 0;
		s->ce += c->ce[i];
		p->ce += c->ce[i];
	}
	p->padding += c->tidied;
}

/*
 * The codewords are scrubbed: write the header back from the seal record
 * if it differs, and count and report the uncorrectable words the
 * scrubber did not know of. Only new ones are counted: a word stays
 * uncorrectable, and the next pass sees it again.
 */
static void check_report(struct kvmemd *d, struct kvmemd_session *s,
			 struct kvmemd_check *c, struct pass *p)
{
	struct kvmemd_ras *r = d->ras;
	struct slot *sl = &s->arena.slots[c->unit];
	enum tier tier = slot_tier(sl, c->src);
	enum kvmemd_pool_kind pool = check_pool(s, c);
	struct ras_count *cnt;
	struct ras_event e;
	size_t i;

	count_corrected(d, s, c, p);

	if (restore_header(s, sl, check_page(s, c))) {
		c->dirty = 1;
		memset(&e, 0, sizeof(e));
		e.codec = KVMEM_PAGE_META_CODEC;
		e.region = REGION_HEADER;
		e.words = (uint32_t)c->ue[REGION_HEADER];
		e.kind = c->ue[REGION_HEADER] ? EV_UE : EV_MISMATCH;
		e.restored = 1;
		p->restored++;
		p->ue += c->ue[REGION_HEADER];
		s->ue += c->ue[REGION_HEADER];
		cnt = &r->vol[pool][tier][KVMEM_PAGE_META_CODEC];
		cnt->ue += c->ue[REGION_HEADER];
		r->agg[pool][tier][KVMEM_PAGE_META_CODEC].ue +=
			c->ue[REGION_HEADER];
		r->agg_dirty = 1;
		page_event(d, s, sl, &e, c);
	}

	for (i = REGION_SCALES; i <= REGION_PAYLOAD; i++) {
		uint32_t *known =
			i == REGION_SCALES ? &sl->ue_scales : &sl->ue_payload;
		int codec = i == REGION_SCALES ? KVMEM_PAGE_META_CODEC
					       : slot_layout(s, sl)->codec;
		uint64_t fresh;

		if (c->ue[i] <= *known)
			continue;
		fresh = c->ue[i] - *known;
		*known = (uint32_t)c->ue[i];
		r->vol[pool][tier][codec].ue += fresh;
		r->agg[pool][tier][codec].ue += fresh;
		r->agg_dirty = 1;
		s->ue += fresh;
		p->ue += fresh;
		mark_degraded(s, c->unit, p);
		memset(&e, 0, sizeof(e));
		e.codec = (uint8_t)codec;
		e.region = (uint8_t)i;
		e.words = (uint32_t)fresh;
		e.kind = EV_UE;
		page_event(d, s, sl, &e, c);
	}
}

/* The page checked by @c does not match its seal's CRC: degraded, counted,
 * and an event of @kind. */
static void crc_missed(struct kvmemd *d, struct kvmemd_session *s,
		       struct kvmemd_check *c, struct pass *p, int kind)
{
	struct slot *sl = &s->arena.slots[c->unit];
	struct ras_event e;

	arena_slot_mark(&s->arena, c->unit, SLOT_CRC_BAD);
	mark_degraded(s, c->unit, p);
	s->crc++;
	d->ras->crc++;
	p->crc++;
	memset(&e, 0, sizeof(e));
	e.codec = (uint8_t)slot_layout(s, sl)->codec;
	e.region = REGION_PAYLOAD;
	e.kind = (uint8_t)kind;
	page_event(d, s, sl, &e, c);
}

/*
 * A page read back from the store that is not the page that was written
 * (its CRC differs after every correction the codes could make: a zeroed
 * or stale extent, another page, a burst of garbage). Its values cannot be
 * told from right ones, so every one of them is made to read as lost:
 * clients rebuild them from neighbouring tokens or refuse them, and the
 * header, still right, keeps the page in its sequence.
 */
static void check_lose(struct kvmemd *d, struct kvmemd_session *s,
		       struct kvmemd_check *c, struct pass *p)
{
	struct slot *sl = &s->arena.slots[c->unit];
	const struct kvmem_page_layout *l = slot_layout(s, sl);

	kvmem__page_poison(check_page(s, c), &s->g, l, sl->ntokens);
	c->lost = 1;
	c->dirty = 1;
	/* Every word now reads uncorrectable: none is news to the patrol. */
	sl->ue_scales = l->scale_words + 2 * l->nchecks;
	sl->ue_payload =
		2 * s->g.kv_heads * s->g.tokens_per_page * l->row_words;
	crc_missed(d, s, c, p, EV_LOST);
}

/* The CRC over the page after its header is in: compare it with the seal. */
static void check_crc(struct kvmemd *d, struct kvmemd_session *s,
		      struct kvmemd_check *c, struct pass *p)
{
	const struct slot *sl = &s->arena.slots[c->unit];

	if (c->crc == sl->crc)
		return;
	if (came_back(c->src) || c->lose) {
		check_lose(d, s, c, p);
		return;
	}
	/* A word miscorrected, or changed into another codeword: values may
	 * be wrong, and the codes cannot say which. Reported once. */
	crc_missed(d, s, c, p, EV_CRC);
}

/*
 * Scrub rows [r0, r1) of a K or V block at @blk. Every word is corrected,
 * but a word no code can correct counts only where it holds a value: not
 * in rows past ntokens, nor in the words at the end of a row that hold
 * only padding (PH_TIDY puts those back).
 */
static void scrub_rows(const struct kvmemd_session *s, const struct slot *sl,
		       uint8_t *blk, size_t r0, size_t r1,
		       struct kvmem_ecc_counts *sum)
{
	const struct kvmem_page_layout *l = slot_layout(s, sl);
	const struct kvmem_codec_info *ci = kvmem_codec_get(l->codec);
	const size_t vw =
		((size_t)s->g.head_dim * kvmem_format_get(l->format)->bits +
		 ci->data_bits - 1) /
		ci->data_bits;
	const size_t tpp = s->g.tokens_per_page, rw = l->row_words;
	struct kvmem_ecc_counts c;
	size_t r = r0, t, end;

	while (r < r1) {
		t = r % tpp;
		if (t >= sl->ntokens || vw == rw) {
			/* A run of rows all of one kind. */
			end = r - t + (t >= sl->ntokens ? tpp : sl->ntokens);
			end = end < r1 ? end : r1;
			kvmem_ecc_scrub(l->codec, blk + r * l->row_bytes,
					(end - r) * rw, &c, NULL, 0);
			if (t >= sl->ntokens)
				c.uncorrectable = 0;
			kvmem__counts_add(sum, &c);
			r = end;
			continue;
		}
		kvmem_ecc_scrub(l->codec, blk + r * l->row_bytes, vw, &c, NULL,
				0);
		kvmem__counts_add(sum, &c);
		kvmem_ecc_scrub(l->codec,
				blk + r * l->row_bytes + vw * ci->word_bytes,
				rw - vw, &c, NULL, 0);
		c.uncorrectable = 0;
		kvmem__counts_add(sum, &c);
		r++;
	}
}

/*
 * Of metadata word @w (scales, then checks) and those after it, the first
 * that is not of the same kind: value or padding (scale words past the last
 * scale bit, checks of rows past ntokens). *@value says which @w is.
 */
static size_t meta_run(const struct kvmemd_session *s, const struct slot *sl,
		       size_t w, int *value)
{
	const struct kvmem_page_layout *l = slot_layout(s, sl);
	const size_t vw = kvmem__page_scale_words(l);
	const size_t tpp = s->g.tokens_per_page;
	size_t c, t;

	if (w < l->scale_words) {
		*value = w < vw;
		return w < vw ? vw : l->scale_words;
	}
	*value = 1;
	if (l->scale_words)
		return l->scale_words + 2 * (size_t)l->nchecks;
	/* Row checks, two words each, [K, V][kv_head][token]. */
	c = (w - l->scale_words) / 2;
	t = c % tpp;
	*value = t < sl->ntokens;
	return l->scale_words + 2 * (c - t + (*value ? sl->ntokens : tpp));
}

/* Scrub metadata words [w0, w0 + n) of @page: a word no code can correct
 * counts only where it holds a value. */
static void scrub_meta(const struct kvmemd_session *s, const struct slot *sl,
		       uint8_t *page, size_t w0, size_t n,
		       struct kvmem_ecc_counts *sum)
{
	const struct kvmem_page_layout *l = slot_layout(s, sl);
	const size_t wb = kvmem_codec_get(KVMEM_PAGE_META_CODEC)->word_bytes;
	struct kvmem_ecc_counts c;
	size_t w = w0, end;
	int value;

	memset(sum, 0, sizeof(*sum));
	while (w < w0 + n) {
		end = meta_run(s, sl, w, &value);
		end = end < w0 + n ? end : w0 + n;
		kvmem_ecc_scrub(KVMEM_PAGE_META_CODEC,
				page + l->scales_off + w * wb, end - w, &c,
				NULL, 0);
		if (!value)
			c.uncorrectable = 0;
		kvmem__counts_add(sum, &c);
		w = end;
	}
}

/* How much of @left fits in *@budget, at least one unit of @unit bytes. */
static size_t take(uint64_t *budget, size_t left, size_t unit)
{
	size_t n = *budget / unit;

	if (!n)
		n = 1;
	if (n > left)
		n = left;
	*budget = *budget > n * unit ? *budget - n * unit : 0;
	return n;
}

/* Go on with the CRC of @page (@size bytes) in c->crc from c->pos, as far
 * as @budget allows. Return: 1 once it covers the whole page. */
static int crc_step(struct kvmemd_check *c, const uint8_t *page, size_t size,
		    uint64_t *budget)
{
	size_t n = take(budget, size - c->pos, 1);

	c->crc = kvmem_crc32c(c->crc, page + c->pos, n);
	c->pos += n;
	return c->pos == size;
}

/* The other of the two passes that hold copies, or NULL. */
static struct pass *other_pass(struct kvmemd_ras *r, const struct pass *p)
{
	return p == &r->patrol	   ? &r->ondemand
	       : p == &r->ondemand ? &r->patrol
				   : NULL;
}

/*
 * The copy the other pass holds of @c's page under check, taken up by @c:
 * one copy of a page at a time, so that neither's going back undoes the
 * other's corrections, nor is a word corrected in both counted twice.
 * Return: 1 when @c took it.
 */
static int bounce_share(struct kvmemd *d, const struct kvmemd_session *s,
			struct kvmemd_check *c, struct pass *p)
{
	struct pass *o = other_pass(d->ras, p);
	struct kvmemd_check *oc = o ? &o->job : NULL;
	size_t i;

	if (!o || !o->active || !o->in_job || o->session != s->id ||
	    oc->unit != c->unit || oc->seal != c->seal || !oc->bounce ||
	    oc->phase == PH_DONE)
		return 0;
	c->bounce = oc->bounce;
	/* The copy, going back with @c, carries what the other corrected in
	 * it so far: @c counts that, the other does not (it may be stopped
	 * before its check reports). */
	if (oc->phase != PH_CRC) {
		for (i = 0; i < ARRAY_SIZE(c->ce); i++) {
			c->ce[i] += oc->ce[i];
			oc->ce[i] = 0;
		}
		c->tidied += oc->tidied;
		oc->tidied = 0;
	}
	c->dirty |= oc->dirty;
	return 1;
}

/*
 * A page on a GPU the daemon cannot read is checked there when the pool
 * can (device_check()); else, or when that finds what the codes cannot
 * undo, in a copy, the pass's bounce buffer (or the other pass's, when
 * that one is checking the page: bounce_share()): copied in when its check
 * starts, and back when the check wrote to it (corrections, the header,
 * padding, poison). A sealed page does not change meanwhile but by the
 * check: a copy back puts back the same bytes but for those. Return: 0,
 * or -ENOMEM or -EIO (not checked).
 */
static int bounce_in(struct kvmemd *d, struct kvmemd_session *s,
		     struct kvmemd_check *c, struct pass *p, size_t size)
{
	struct kvmemd_ras *r = d->ras;
	const int i = p == &r->ondemand;
	uint8_t *b;

	if (p != &r->patrol && p != &r->ondemand)
		return -EINVAL;
	if (r->bounce_cap[i] < size) {
		b = realloc(r->bounce[i], size);
		if (!b)
			return -ENOMEM;
		r->bounce[i] = b;
		r->bounce_cap[i] = size;
	}
	if (kvmemd_pool_copy_wait(d->gpu.ops, &s->gpu,
				  session_gpu_off(s, c->unit), r->bounce[i],
				  size, 0))
		return -EIO;
	c->bounce = r->bounce[i];
	d->gpu.scrub_copied++;
	return 0;
}

static void bounce_out(struct kvmemd *d, struct kvmemd_session *s,
		       struct kvmemd_check *c, struct pass *p, size_t size)
{
	struct kvmemd_ras *r = d->ras;
	const int dirty = c->dirty || c->tidied || c->ce[REGION_HEADER] ||
			  c->ce[REGION_SCALES] || c->ce[REGION_PAYLOAD];
	const struct pass *o = other_pass(r, p);
	const int i = p == &r->ondemand;
	uint8_t *t;
	size_t cap;

	if (dirty && kvmemd_pool_copy_wait(d->gpu.ops, &s->gpu,
					   session_gpu_off(s, c->unit),
					   c->bounce, size, 1))
		kvmemd_log_rl(&d->gpu.log, "GPU tier copy", LOG_ERR,
			      "session %u: a checked page's copy back to the "
			      "GPU failed; its corrections are lost",
			      s->id);
	/* The other pass goes on in this copy: it becomes that pass's. */
	if (o && o->in_job && o->job.bounce == c->bounce &&
	    c->bounce == r->bounce[i]) {
		t = r->bounce[i];
		r->bounce[i] = r->bounce[!i];
		r->bounce[!i] = t;
		cap = r->bounce_cap[i];
		r->bounce_cap[i] = r->bounce_cap[!i];
		r->bounce_cap[!i] = cap;
	}
	c->bounce = NULL;
}

/*
 * A sealed page on a GPU, checked where it is, in one wait for the GPU:
 * the scrub kernel corrects its words in place (stores that only remove
 * errors, as attention may be reading it) and counts them, the CRC kernel
 * takes the CRC of its seal, and only its header comes here, to be held to
 * the seal record and written back if it differs. The padding the kernel
 * puts back is not counted. Return: 1 when that is the whole check; 0
 * when the page is to be checked in a copy (the kernel found a word it
 * cannot correct or a check that fails, which only the walk here counts
 * as it counts them, or it could not run), with what the kernel corrected
 * counted in @c.
 */
static int device_check(struct kvmemd *d, struct kvmemd_session *s,
			struct kvmemd_check *c, struct pass *p)
{
	const struct kvmemd_pool_ops *ops = d->gpu.ops;
	struct slot *sl = &s->arena.slots[c->unit];
	const struct kvmem_page_layout *l = slot_layout(s, sl);
	const uint64_t off = session_gpu_off(s, c->unit);
	uint8_t hdr[KVMEM_PAGE_HDR_BYTES];
	struct kvmem_page_counts pc;
	uint32_t crc;
	int ret;

	/* The kernel knows the geometry's layouts, not an archive's. */
	if (!ops->scrub || c->phase != PH_SCALES || c->pos || c->lose ||
	    came_back(c->src) || sl->flags & SLOT_ARCHIVED)
		return 0;
	ret = ops->scrub(&s->gpu, off, l->size, sl->kind == KVMEM_SLOT_HOT,
			 sl->ntokens, &s->g, &pc, &crc, hdr);
	/* It did not run, the header is not the slot's, or it is past its
	 * code: the kernel stopped before it stored a correction. */
	if ((ret && ret != -EBADMSG) || pc.header.uncorrectable)
		return 0;
	c->ce[REGION_HEADER] = pc.header.corrected;
	c->ce[REGION_SCALES] = pc.scales.corrected;
	c->ce[REGION_PAYLOAD] = pc.payload.corrected;
	if (ret || pc.scales.uncorrectable || pc.payload.uncorrectable)
		return 0;
	c->bounce = hdr;
	check_report(d, s, c, p);
	c->bounce = NULL;
	if (c->dirty &&
	    kvmemd_pool_copy_wait(ops, &s->gpu, off, hdr, sizeof(hdr), 1))
		kvmemd_log_rl(&d->gpu.log, "GPU tier copy", LOG_ERR,
			      "session %u: a checked page's header could not "
			      "be written back to the GPU",
			      s->id);
	c->crc = crc;
	if (!(sl->flags & SLOT_CRC_BAD))
		check_crc(d, s, c, p);
	c->phase = PH_DONE;
	d->gpu.scrub_device++;
	return 1;
}

int ras_check_step(struct kvmemd *d, struct kvmemd_session *s,
		   struct kvmemd_check *c, struct pass *p, uint64_t *budget)
{
	struct slot *sl = &s->arena.slots[c->unit];
	const struct kvmem_page_layout *l = slot_layout(s, sl);
	/* The slot, as the store holds it; an archived page can be less. */
	const size_t size = slot_bytes(s, sl->kind);
	const size_t rows = (size_t)s->g.kv_heads * s->g.tokens_per_page;
	const size_t mwb = kvmem_ecc_code_bytes(KVMEM_PAGE_META_CODEC, 1);
	struct kvmem_ecc_counts wc;
	uint8_t *page;
	size_t n;

	if (sl->state != SLOT_SEALED || sl->seal != c->seal)
		return 1;
	if (!c->bounce && !session_page_readable(s, c->unit) &&
	    !bounce_share(d, s, c, p)) {
		if (device_check(d, s, c, p)) {
			take(budget, 1, size);
		} else if (bounce_in(d, s, c, p, size)) {
			/* Not checked; what the kernel corrected there is
			 * counted. */
			if (c->ce[REGION_HEADER] || c->ce[REGION_SCALES] ||
			    c->ce[REGION_PAYLOAD])
				count_corrected(d, s, c, p);
			take(budget, 1, size);
			return 1;
		}
	}
	page = c->phase == PH_DONE ? NULL : check_page(s, c);
	while (c->phase != PH_DONE && *budget) {
		switch (c->phase) {
		case PH_STORE:
			if (!crc_step(c, page, size, budget))
				break;
			/* As it left: nothing happened to it out there. */
			c->phase = c->crc == c->store_crc ? PH_DONE : PH_SCALES;
			c->pos = 0;
			c->crc = 0;
			break;
		case PH_SCALES:
			n = take(budget,
				 l->scale_words + 2 * (size_t)l->nchecks -
					 c->pos,
				 mwb);
			scrub_meta(s, sl, page, c->pos, n, &wc);
			c->ce[REGION_SCALES] += wc.corrected;
			c->ue[REGION_SCALES] += wc.uncorrectable;
			c->pos += n;
			/* A patrol's rate counts a large page as it goes. */
			p->bytes += n * mwb;
			c->counted += n * mwb;
			if (c->pos == l->scale_words + 2 * (size_t)l->nchecks) {
				c->phase = PH_K;
				c->pos = 0;
			}
			break;
		case PH_K:
		case PH_V:
			n = take(budget, rows - c->pos, l->row_bytes);
			memset(&wc, 0, sizeof(wc));
			scrub_rows(
				s, sl,
				page + (c->phase == PH_K ? l->k_off : l->v_off),
				c->pos, c->pos + n, &wc);
			c->ce[REGION_PAYLOAD] += wc.corrected;
			c->ue[REGION_PAYLOAD] += wc.uncorrectable;
			c->pos += n;
			p->bytes += n * l->row_bytes;
			c->counted += n * l->row_bytes;
			if (c->pos == rows) {
				c->phase++;
				c->pos = 0;
			}
			break;
		case PH_TIDY:
			n = take(budget, l->size - c->pos, 1);
			c->tidied +=
				kvmem__page_tidy(page, &s->g, l, sl->ntokens,
						 c->pos, c->pos + n);
			c->pos += n;
			if (c->pos == l->size) {
				c->phase = PH_HEADER;
				c->pos = 0;
			}
			break;
		case PH_HEADER:
			kvmem_ecc_scrub(KVMEM_PAGE_META_CODEC, page,
					KVMEM_PAGE_HDR_WORDS, &wc, NULL, 0);
			/* Added to what the scrub kernel corrected first. */
			c->ce[REGION_HEADER] += wc.corrected;
			c->ue[REGION_HEADER] = wc.uncorrectable;
			check_report(d, s, c, p);
			c->phase = PH_CRC;
			c->pos = KVMEM_PAGE_HDR_BYTES;
			if ((came_back(c->src) || c->lose) &&
			    (c->ue[REGION_SCALES] || c->ue[REGION_PAYLOAD])) {
				/* It changed out there, and not only by
				 * flips the codes could undo. */
				check_lose(d, s, c, p);
				c->phase = PH_DONE;
			} else if (!came_back(c->src) && !c->lose &&
				   (c->ue[REGION_SCALES] ||
				    c->ue[REGION_PAYLOAD] ||
				    sl->flags & SLOT_CRC_BAD)) {
				/* Degraded and reported already. */
				c->phase = PH_DONE;
			}
			break;
		case PH_CRC:
			if (!crc_step(c, page, l->size, budget))
				break;
			check_crc(d, s, c, p);
			c->phase = PH_DONE;
			break;
		}
	}
	if (c->phase != PH_DONE)
		return 0;
	if (c->bounce)
		bounce_out(d, s, c, p, size);
	p->bytes += size - c->counted;
	p->pages++;
	return 1;
}

void ras_page_written(struct kvmemd *d, const struct kvmemd_session *s,
		      uint32_t unit, const uint8_t *was, const uint8_t *now,
		      size_t size)
{
	struct pass *const held[] = { &d->ras->patrol, &d->ras->ondemand };
	uint8_t *done = NULL;
	size_t i, b;

	for (i = 0; i < ARRAY_SIZE(held); i++) {
		struct kvmemd_check *c = &held[i]->job;

		if (!held[i]->active || !held[i]->in_job ||
		    held[i]->session != s->id || c->unit != unit ||
		    c->seal != s->arena.slots[unit].seal ||
		    c->phase == PH_DONE || came_back(c->src))
			continue;
		/* Two passes may share one copy: changed once. */
		if (was && c->bounce && c->bounce != done) {
			for (b = 0; b < size; b++)
				c->bounce[b] ^= was[b] ^ now[b];
			done = c->bounce;
		}
		/* What the header's report counted is not counted again,
		 * nor a word past its code that the walk will see again. */
		if (c->phase == PH_CRC) {
			memset(c->ce, 0, sizeof(c->ce));
			c->tidied = 0;
		}
		memset(c->ue, 0, sizeof(c->ue));
		c->phase = PH_SCALES;
		c->pos = 0;
		c->crc = 0;
		c->counted = 0;
	}
}

void kvmemd_ras_seal(struct kvmemd_session *s, uint32_t unit)
{
	ras_check_start(s, &s->seal_check, unit, SRC_SEAL);
	s->checking = 1;
}

void kvmemd_ras_reload(struct kvmemd_session *s, uint32_t unit,
		       uint32_t store_crc, struct kvmemd_check *c)
{
	ras_check_start(s, c, unit, SRC_RELOAD);
	c->store_crc = store_crc;
}

void kvmemd_ras_moved(struct kvmemd_session *s, uint32_t unit, uint32_t crc,
		      struct kvmemd_check *c)
{
	ras_check_start(s, c, unit, SRC_MOVE);
	c->store_crc = crc;
}

void kvmemd_ras_verify(struct kvmemd_session *s, int lose)
{
	struct kvmemd_check c;
	uint64_t budget;
	uint32_t u;

	for (u = 0; u < s->arena.top;
	     u += s->arena.slots[u].state == SLOT_NONE
			  ? 1
			  : s->arena.slot_units[s->arena.slots[u].kind]) {
		if (s->arena.slots[u].state != SLOT_SEALED)
			continue;
		ras_check_start(s, &c, u, SRC_SEAL);
		c.lose = (uint8_t)lose;
		budget = UINT64_MAX;
		kvmemd_ras_check_step(s, &c, &budget);
	}
}

int kvmemd_ras_check_step(struct kvmemd_session *s, struct kvmemd_check *c,
			  uint64_t *budget)
{
	/* Checks at seal and reload count in the totals, not in a pass. */
	struct pass p = { .kind = (enum source)c->src };

	return ras_check_step(s->d, s, c, &p, budget);
}

/* ---- admin requests --------------------------------------------------- */

void kvmemd_ras_events(const struct kvmemd *d, double since,
		       unsigned long limit, struct jw *w)
{
	const struct kvmemd_ras *r = d->ras;
	const struct ras_event *e;
	unsigned long skip;
	uint32_t i, n = 0;

	for (i = 0; i < r->ev_n; i++)
		n += ras_secs(r->ev[i].time_ns) >= since;
	skip = n > limit ? n - limit : 0;
	jw_open(w, NULL, '{');
	jw_open(w, "events", '[');
	for (i = 0; i < r->ev_n; i++) {
		e = &r->ev[i];
		if (ras_secs(e->time_ns) < since)
			continue;
		if (skip) {
			skip--;
			continue;
		}
		jw_open(w, NULL, '{');
		jw_f64(w, "time", ras_secs(e->time_ns));
		if (e->uid != UID_UNKNOWN)
			jw_u64(w, "uid", e->uid);
		jw_u64(w, "session", e->session);
		jw_u64(w, "seq", e->seq);
		jw_u64(w, "layer", e->layer);
		jw_u64(w, "token_start", e->token_start);
		jw_u64(w, "token_end", e->token_end);
		jw_str(w, "pool", ras_pool_names[e->pool]);
		jw_str(w, "tier", ras_tier_names[e->tier]);
		jw_str(w, "codec", ras_codec_name(e->codec));
		jw_str(w, "region", ras_region_names[e->region]);
		jw_u64(w, "words", e->words);
		jw_str(w, "kind", ras_kind_names[e->kind]);
		jw_bool(w, "restored", e->restored);
		jw_str(w, "source", ras_source_names[e->source]);
		jw_close(w, '}');
	}
	jw_close(w, ']');
	jw_u64(w, "lost", r->ev_lost);
	jw_close(w, '}');
	jw_end(w);
}

/* Which (pool, tier, codec) a live session can produce errors in. */
static void live_codecs(const struct kvmemd *d,
			uint8_t seen[KVMEMD_POOL_NR][TIER_NR][KVMEM_CODEC_NR])
{
	const struct kvmemd_session *s;

	for (s = d->sessions; s; s = s->next) {
		seen[KVMEMD_POOL_HOST][TIER_WARM][s->layout[0].codec] = 1;
		seen[KVMEMD_POOL_HOST][TIER_WARM][KVMEM_PAGE_META_CODEC] = 1;
		seen[KVMEMD_POOL_HOST][TIER_HOT][KVMEM_PAGE_META_CODEC] = 1;
		/* Archived pages are warm too, in their own codec. */
		if (s->arch.size)
			seen[KVMEMD_POOL_HOST][TIER_WARM][s->arch.codec] = 1;
		if (s->arena.gpu_units) {
			seen[KVMEMD_POOL_CUDA][TIER_WARM][s->layout[0].codec] =
				1;
			seen[KVMEMD_POOL_CUDA][TIER_WARM]
			    [KVMEM_PAGE_META_CODEC] = 1;
			seen[KVMEMD_POOL_CUDA][TIER_HOT]
			    [KVMEM_PAGE_META_CODEC] = 1;
		}
		if (kvmemd_tier_has_store(d)) {
			if (s->arch.size)
				seen[KVMEMD_POOL_NVME][TIER_COLD]
				    [s->arch.codec] = 1;
			seen[KVMEMD_POOL_NVME][TIER_COLD][s->layout[0].codec] =
				1;
			seen[KVMEMD_POOL_NVME][TIER_COLD]
			    [KVMEM_PAGE_META_CODEC] = 1;
		}
	}
}

int kvmemd_ras_errors(struct kvmemd *d, struct jw *w)
{
	const struct kvmemd_ras *r = d->ras;
	uint8_t seen[KVMEMD_POOL_NR][TIER_NR][KVMEM_CODEC_NR] = { { { 0 } } };
	int p, t, c;

	live_codecs(d, seen);
	jw_open(w, NULL, '{');
	jw_f64(w, "since", ras_secs(r->reset_ns));
	jw_f64(w, "seconds_since_reset",
	       ras_secs(kvmemd_now_ns() - r->reset_mono));
	jw_open(w, "counters", '[');
	for (p = 0; p < KVMEMD_POOL_NR; p++) {
		for (t = 0; t < TIER_NR; t++) {
			for (c = 0; c < KVMEM_CODEC_NR; c++) {
				const struct ras_count *v = &r->vol[p][t][c];
				const struct ras_count *a = &r->agg[p][t][c];

				if (!seen[p][t][c] && !v->ce && !v->ue &&
				    !a->ce && !a->ue)
					continue;
				jw_open(w, NULL, '{');
				jw_str(w, "pool", ras_pool_names[p]);
				jw_str(w, "tier", ras_tier_names[t]);
				jw_str(w, "codec", ras_codec_name(c));
				jw_u64(w, "ce", v->ce);
				jw_u64(w, "ue", v->ue);
				jw_u64(w, "ce_total", a->ce);
				jw_u64(w, "ue_total", a->ue);
				jw_close(w, '}');
			}
		}
	}
	jw_close(w, ']');
	jw_close(w, '}');
	jw_end(w);
	return 0;
}

void kvmemd_ras_reset(struct kvmemd *d)
{
	struct kvmemd_ras *r = d->ras;

	memset(r->vol, 0, sizeof(r->vol));
	r->crc = 0;
	r->reset_ns = ras_clock_ns(CLOCK_REALTIME);
	r->reset_mono = kvmemd_now_ns();
}

void kvmemd_ras_stats_json(const struct kvmemd *d, struct jw *w)
{
	const struct kvmemd_ras *r = d->ras;
	uint64_t ce = 0, ue = 0;
	int p, t, c;

	for (p = 0; p < KVMEMD_POOL_NR; p++)
		for (t = 0; t < TIER_NR; t++)
			for (c = 0; c < KVMEM_CODEC_NR; c++) {
				ce += r->vol[p][t][c].ce;
				ue += r->vol[p][t][c].ue;
			}
	jw_open(w, "scrub", '{');
	jw_u64(w, "passes", r->passes);
	jw_u64(w, "bytes_total", ras_scrubbed(r, 0));
	jw_u64(w, "pages_total", ras_scrubbed(r, 1));
	jw_u64(w, "ce", ce);
	jw_u64(w, "ue", ue);
	jw_u64(w, "crc", r->crc);
	jw_close(w, '}');
	jw_f64(w, "seconds_since_reset",
	       ras_secs(kvmemd_now_ns() - r->reset_mono));
}
