/*
 * ras.c - reliability: the patrol scrubber, error accounting, error events
 * and error injection
 *
 * The scrubber walks every sealed slot of every session in a fixed order
 * (sessions by id, slots by unit) at a rate set by a token bucket, checks
 * each codeword of the page (header, scales, K and V) and writes
 * corrections back with byte stores that only ever remove errors, so a
 * client reading the page meanwhile decodes it the same way. It runs on the
 * event loop thread in bounded steps: the slot table cannot change under it
 * and a freed slot is never written to.
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
 *
 * With scrub.target_ue_per_day set, the end of each patrol pass also sets
 * the patrol's rate: the words it corrected predict how many would turn
 * uncorrectable a day at each cycle, and the patrol runs at the slowest
 * doubling of its configured rate that keeps that under the target, within
 * scrub.rate_max (adapt_pass()).
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

#include "internal.h"
#include "kvmem/crc32c.h"
#include "kvmem/inject.h"
#include "json.h"
#include "kvmemd.h"
#include "prefix.h"
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
static const char *const tier_names[TIER_NR] = { "hot", "warm", "cold" };
static const char *const pool_names[KVMEMD_POOL_NR] = { "host", "gpu", "nvme" };

enum region { REGION_HEADER, REGION_SCALES, REGION_PAYLOAD, REGION_NR };
static const char *const region_names[REGION_NR] = { "header", "scales",
						     "payload" };

enum ev_kind { EV_UE, EV_CRC, EV_MISMATCH, EV_LOST, EV_NR };
static const char *const kind_names[EV_NR] = { "uncorrectable", "crc",
					       "mismatch", "lost" };
/* The journal's MESSAGE_ID of each kind (kvmemd(8), JOURNAL). */
static const char *const kind_ids[EV_NR] = {
	"757da92a137844b4b70f2b3b2a8d6e64",
	"ee295074b34440c7be1635c04cbd1711",
	"c3772798eac1471bac4545bb959a445b",
	"aefb202d098c489390f10a2bd9656c32",
};

enum source { SRC_PATROL, SRC_ONDEMAND, SRC_SEAL, SRC_RELOAD, SRC_NR };
static const char *const source_names[SRC_NR] = { "patrol", "ondemand", "seal",
						  "reload" };

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
};

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double secs(uint64_t ns)
{
	return (double)ns / 1e9;
}

static const char *codec_name(int codec)
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
		    (p = name_index(pool_names, KVMEMD_POOL_NR, pool)) < 0 ||
		    (t = name_index(tier_names, TIER_NR, tier)) < 0 ||
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
static void save_counters(struct kvmemd *d)
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
						pool_names[p], tier_names[t],
						codec_name(c),
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
		 pool_names[e->pool], tier_names[e->tier], codec_name(e->codec),
		 region_names[e->region], e->words, kind_names[e->kind],
		 e->restored, source_names[e->source], (unsigned int)e->uid);
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
	p = name_index(pool_names, KVMEMD_POOL_NR, pool);
	t = name_index(tier_names, TIER_NR, tier);
	c = kvmem_codec_by_name(codec);
	g = name_index(region_names, REGION_NR, region);
	k = name_index(kind_names, EV_NR, kind);
	o = name_index(source_names, SRC_NR, src);
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
static void users_flush(struct kvmemd *d)
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
		 kind_ids[e->kind], kind_names[e->kind], (unsigned int)e->uid,
		 e->session, e->seq, e->layer, e->token_start, e->token_end,
		 pool_names[e->pool], tier_names[e->tier], codec_name(e->codec),
		 region_names[e->region], e->words, source_names[e->source],
		 e->restored);
	kvmemd_log_fields(
		e->restored ? LOG_WARNING : LOG_ERR, fields,
		"%s error: uid %u session %u seq %u layer %u tokens %u-%u, "
		"%s %s %s %s, %u words; %s (%s)",
		kind_names[e->kind], (unsigned int)e->uid, e->session, e->seq,
		e->layer, e->token_start, e->token_end, pool_names[e->pool],
		tier_names[e->tier], codec_name(e->codec),
		region_names[e->region], e->words,
		e->restored	   ? "restored"
		: e->kind == EV_UE ? "values rebuilt from neighbours on read"
		: e->kind == EV_LOST
			? "the page came back as something else: all its "
			  "values erased"
			: "page marked degraded",
		source_names[e->source]);
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
	r->reset_ns = clock_ns(CLOCK_REALTIME);
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
	save_counters(d);
	if (r->ev_fd >= 0)
		close(r->ev_fd);
	free(r->ev);
	free(r);
	d->ras = NULL;
}

/* ---- one page --------------------------------------------------------- */

struct region_def {
	size_t off, nwords;
	int codec;
	enum region region;
};

static void slot_regions(const struct kvmemd_session *s, const struct slot *sl,
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

static enum kvmemd_pool_kind src_pool(enum source src)
{
	return src == SRC_RELOAD ? KVMEMD_POOL_NVME : KVMEMD_POOL_HOST;
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

static void page_event(struct kvmemd *d, struct kvmemd_session *s,
		       const struct slot *sl, struct ras_event *e,
		       enum source src)
{
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
	e->time_ns = clock_ns(CLOCK_REALTIME);
	e->uid = s->uid;
	e->session = s->id;
	e->seq = sl->seq;
	e->layer = sl->layer;
	e->token_start = sl->token_start;
	e->token_end = sl->token_start + sl->ntokens - 1;
	e->pool = (uint8_t)src_pool(src);
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

static void check_start(const struct kvmemd_session *s, struct kvmemd_check *c,
			uint32_t unit, enum source src)
{
	memset(c, 0, sizeof(*c));
	c->unit = unit;
	c->seal = s->arena.slots[unit].seal;
	c->src = (uint8_t)src;
	c->phase = src == SRC_RELOAD ? PH_STORE : PH_SCALES;
}

static void mark_degraded(struct kvmemd_session *s, uint32_t unit,
			  struct pass *p)
{
	if (arena_slot_mark(&s->arena, unit, SLOT_DEGRADED))
		p->degraded++;
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
	enum kvmemd_pool_kind pool = src_pool(c->src);
	struct region_def rg[4];
	struct ras_count *cnt;
	struct ras_event e;
	size_t i;

	slot_regions(s, sl, rg);
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

	if (restore_header(s, sl, session_page(s, c->unit))) {
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
		page_event(d, s, sl, &e, c->src);
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
		page_event(d, s, sl, &e, c->src);
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
	page_event(d, s, sl, &e, c->src);
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

	kvmem__page_poison(session_page(s, c->unit), &s->g, l, sl->ntokens);
	c->lost = 1;
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
	if (c->src == SRC_RELOAD) {
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

static int check_step(struct kvmemd *d, struct kvmemd_session *s,
		      struct kvmemd_check *c, struct pass *p, uint64_t *budget)
{
	struct slot *sl = &s->arena.slots[c->unit];
	uint8_t *page = session_page(s, c->unit);
	const struct kvmem_page_layout *l = slot_layout(s, sl);
	/* The slot, as the store holds it; an archived page can be less. */
	const size_t size = slot_bytes(s, sl->kind);
	const size_t rows = (size_t)s->g.kv_heads * s->g.tokens_per_page;
	const size_t mwb = kvmem_ecc_code_bytes(KVMEM_PAGE_META_CODEC, 1);
	struct kvmem_ecc_counts wc;
	size_t n;

	if (sl->state != SLOT_SEALED || sl->seal != c->seal)
		return 1;
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
			c->ce[REGION_HEADER] = wc.corrected;
			c->ue[REGION_HEADER] = wc.uncorrectable;
			check_report(d, s, c, p);
			c->phase = PH_CRC;
			c->pos = KVMEM_PAGE_HDR_BYTES;
			if (c->src == SRC_RELOAD &&
			    (c->ue[REGION_SCALES] || c->ue[REGION_PAYLOAD])) {
				/* It changed out there, and not only by
				 * flips the codes could undo. */
				check_lose(d, s, c, p);
				c->phase = PH_DONE;
			} else if (c->src != SRC_RELOAD &&
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
	p->bytes += size - c->counted;
	p->pages++;
	return 1;
}

void kvmemd_ras_seal(struct kvmemd_session *s, uint32_t unit)
{
	check_start(s, &s->seal_check, unit, SRC_SEAL);
	s->checking = 1;
}

void kvmemd_ras_reload(struct kvmemd_session *s, uint32_t unit,
		       uint32_t store_crc, struct kvmemd_check *c)
{
	check_start(s, c, unit, SRC_RELOAD);
	c->store_crc = store_crc;
}

void kvmemd_ras_verify(struct kvmemd_session *s)
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
		check_start(s, &c, u, SRC_SEAL);
		budget = UINT64_MAX;
		kvmemd_ras_check_step(s, &c, &budget);
	}
}

int kvmemd_ras_check_step(struct kvmemd_session *s, struct kvmemd_check *c,
			  uint64_t *budget)
{
	/* Checks at seal and reload count in the totals, not in a pass. */
	struct pass p = { .kind = (enum source)c->src };

	return check_step(s->d, s, c, &p, budget);
}

/* ---- passes ----------------------------------------------------------- */

static struct kvmemd_session *session_from(const struct kvmemd *d, uint32_t id)
{
	struct kvmemd_session *s;

	for (s = d->sessions; s && s->id < id; s = s->next)
		;
	return s;
}

static enum kvmemd_prefix_walk pass_walk(const struct pass *p)
{
	return p->kind == SRC_PATROL ? KVMEMD_PREFIX_PATROL
				     : KVMEMD_PREFIX_ONDEMAND;
}

static void pass_start(struct kvmemd *d, struct pass *p, enum source kind,
		       const struct kvmemd_target *t)
{
	memset(p, 0, sizeof(*p));
	p->active = 1;
	p->kind = kind;
	p->t = *t;
	p->session = t->type == KVMEMD_TARGET_POOL ? 0 : t->session;
	p->started_ns = clock_ns(CLOCK_REALTIME);
	p->started_mono = kvmemd_now_ns();
	kvmemd_prefix_rewind(d, pass_walk(p));
}

/*
 * A pool pass ends with the copies of published prefixes (kept in
 * kvmemd's memory: pool host, tier warm), about @budget bytes of them a
 * call. Return: 1 when the pass is through.
 */
static int prefix_step(struct kvmemd *d, struct pass *p, uint64_t budget)
{
	struct kvmemd_ras *r = d->ras;
	struct kvmemd_prefix_scrub f = { 0 };
	struct ras_count *vol, *agg;
	int done, c;

	done = kvmemd_prefix_scrub(d, pass_walk(p), &budget, &f);
	p->pages += f.pages;
	p->bytes += f.bytes;
	p->crc += f.crc;
	p->prefix_pages += f.pages;
	p->prefix_dropped += f.dropped;
	r->crc += f.crc;
	for (c = 0; c < KVMEM_CODEC_NR; c++) {
		vol = &r->vol[KVMEMD_POOL_HOST][TIER_WARM][c];
		agg = &r->agg[KVMEMD_POOL_HOST][TIER_WARM][c];
		p->words[c] += f.words[c];
		p->ce_words[c] += f.ce[c];
		p->ce += f.ce[c];
		p->ue += f.ue[c];
		vol->ce += f.ce[c];
		vol->ue += f.ue[c];
		agg->ce += f.ce[c];
		agg->ue += f.ue[c];
		r->agg_dirty |= f.ce[c] || f.ue[c];
	}
	return done;
}

/*
 * Scrub about @budget bytes of work of @p from its cursor on, a page at a
 * time (a page may take several calls). Return: 1 when the pass is
 * complete, 0 when it stopped at the budget.
 */
static int pass_step(struct kvmemd *d, struct pass *p, uint64_t budget)
{
	unsigned int visits = 0;
	struct kvmemd_session *s;
	struct seq *q;
	struct slot *sl;

	for (;;) {
		s = session_from(d, p->session);
		if (!s)
			return p->t.type != KVMEMD_TARGET_POOL ||
			       prefix_step(d, p, budget);
		if (p->t.type != KVMEMD_TARGET_POOL && s->id != p->t.session)
			return 1;
		if (s->id != p->session) {
			/* The session under the cursor is gone. */
			p->session = s->id;
			p->pos = 0;
			p->in_job = 0;
		}
		if (p->t.type == KVMEMD_TARGET_SEQ) {
			q = session_seq(s, p->t.seq);
			if (!q)
				return 1;
			for (; p->pos < q->n; p->pos++) {
				const struct page *pg =
					&s->arena.pages[q->pages[p->pos]];

				/* Pages on the store are checked when they
				 * come back. */
				if (!p->in_job && (pg->state == PAGE_RESIDENT ||
						   pg->state == PAGE_WRITING)) {
					check_start(s, &p->job, pg->unit,
						    p->kind);
					p->in_job = 1;
				}
				if (p->in_job &&
				    !check_step(d, s, &p->job, p, &budget))
					return 0;
				p->in_job = 0;
			}
			return 1;
		}
		while (p->pos < s->arena.top) {
			sl = &s->arena.slots[p->pos];
			if (!p->in_job && sl->state == SLOT_SEALED) {
				check_start(s, &p->job, p->pos, p->kind);
				p->in_job = 1;
			}
			if (p->in_job && !check_step(d, s, &p->job, p, &budget))
				return 0;
			p->in_job = 0;
			p->pos += sl->state == SLOT_NONE
					  ? 1
					  : s->arena.slot_units[sl->kind];
			if (!budget || ++visits >= STEP_UNITS)
				return 0;
		}
		p->session = s->id + 1;
		p->pos = 0;
	}
}

static void pass_end(struct kvmemd *d, struct pass *p)
{
	struct kvmemd_ras *r = d->ras;
	uint64_t now;

	p->active = 0;
	/* A patrol with nothing to do is not a pass. */
	if (p->kind == SRC_PATROL && !p->pages)
		return;
	p->duration = secs(kvmemd_now_ns() - p->started_mono);
	r->passes++;
	r->bytes_total += p->bytes;
	r->pages_total += p->pages;
	r->last = *p;
	now = kvmemd_now_ns();
	if (now - r->saved_mono >= MINUTE_NS)
		save_counters(d);
	if ((p->ce || p->ue || p->crc) &&
	    (p->kind != SRC_PATROL || now - r->summary_mono >= MINUTE_NS)) {
		r->summary_mono = now;
		kvmemd_log(LOG_NOTICE,
			   "scrub %s pass: %llu pages, %llu KiB in %.3f s; "
			   "%llu corrected, %llu uncorrectable words, %llu "
			   "CRC mismatches",
			   source_names[p->kind], (unsigned long long)p->pages,
			   (unsigned long long)(p->bytes >> 10), p->duration,
			   (unsigned long long)p->ce, (unsigned long long)p->ue,
			   (unsigned long long)p->crc);
	}
}

/* What a pool pass reads: sealed pages, and the copies of published
 * prefixes. */
static uint64_t sealed_bytes(const struct kvmemd *d)
{
	const struct kvmemd_session *s;
	uint64_t n = kvmemd_prefix_bytes(d);

	for (s = d->sessions; s; s = s->next)
		n += s->arena.sealed_bytes;
	return n;
}

/* Bytes per second the configuration asks for: the rate, or the cycle's. */
static double base_rate(const struct kvmemd *d)
{
	double rate;

	if (!d->cfg.scrub_cycle)
		return (double)d->cfg.scrub_rate;
	rate = (double)sealed_bytes(d) / d->cfg.scrub_cycle;
	return rate < KVMEM_SLOT_UNIT ? KVMEM_SLOT_UNIT : rate;
}

/* Doublings of the base rate scrub.rate_max leaves room for. */
static unsigned int adapt_max(const struct kvmemd *d)
{
	double base = base_rate(d);
	unsigned int k = 0;

	if (!d->cfg.scrub_target_ue || base <= 0)
		return 0;
	while (k < ADAPT_LEVEL_MAX &&
	       base * (double)(2u << k) <= (double)d->cfg.scrub_rate_max)
		k++;
	return k;
}

/* The level the patrol runs at: the last decision's, within the budget
 * the configuration leaves now. */
static unsigned int adapt_level(const struct kvmemd *d)
{
	unsigned int max = adapt_max(d);

	return d->ras->adapt.level < max ? d->ras->adapt.level : max;
}

/* Bytes per second the patrol runs at. */
static double patrol_rate(const struct kvmemd *d)
{
	return base_rate(d) * (double)(1u << adapt_level(d));
}

/*
 * Uncorrectable words a day if every word of the patrol pass @p were
 * checked every @cycle seconds. The pass saw flips arrive at x / T per
 * word (x the share of its words it corrected, T its exposure), so a word
 * collects more than its code's t of them in a cycle with probability about
 * (x cycle / T)^(t+1) / (t+1)!, the first term of the Poisson tail (at
 * most 1).
 */
static double ue_per_day(const struct pass *p, double cycle)
{
	const struct kvmem_codec_info *ci;
	double x, n = 0;
	int c;

	if (p->exposure <= 0 || cycle <= 0)
		return 0;
	for (c = 0; c < KVMEM_CODEC_NR; c++) {
		if (!p->words[c])
			continue;
		ci = kvmem_codec_get(c);
		x = (double)p->ce_words[c] / (double)p->words[c] * cycle /
		    p->exposure;
		x = pow(x, ci->corrects + 1) / tgamma(ci->corrects + 2.0);
		/* A probability: where the first term passes 1, every word
		 * is lost. */
		n += (double)p->words[c] * (x < 1 ? x : 1);
	}
	return n * 86400.0 / cycle;
}

/* The journal's MESSAGE_ID of a step of the adaptive patrol. */
#define ADAPT_MESSAGE_ID "6bf28fe1adf0492cb9cea25ff4ef7a89"
#define ADAPT_WHAT "adaptive patrol messages"

/* To level @to: by a prediction of @ue_day at the old level's cycle, or
 * (@ue_day < 0) because the configuration no longer allows the old. */
static void adapt_step(struct kvmemd *d, unsigned int to, double ue_day,
		       double cycle)
{
	struct adapt *a = &d->ras->adapt;
	struct adapt_step *st = &a->step[a->nstep++ % ADAPT_STEPS];
	const unsigned int from = a->level;
	double target = d->cfg.scrub_target_ue;
	char fields[256];

	*st = (struct adapt_step){ clock_ns(CLOCK_REALTIME), from, to,
				   ue_day < 0 ? 0 : ue_day, cycle };
	if (to > from)
		a->up++;
	else
		a->down++;
	a->level = to;
	snprintf(fields, sizeof(fields),
		 "MESSAGE_ID=%s\nKVMEM_EVENT=scrub-adapt\nLEVEL_FROM=%u\n"
		 "LEVEL_TO=%u\nUE_PER_DAY=%.6g\nTARGET_UE_PER_DAY=%.6g\n"
		 "CYCLE_S=%.6g\n",
		 ADAPT_MESSAGE_ID, from, to, st->ue_day, target, cycle);
	if (!kvmemd_rl(&a->log, KVMEMD_RL_WINDOW_NS, KVMEMD_RL_BURST,
		       ADAPT_WHAT))
		return;
	if (ue_day < 0)
		kvmemd_log_fields(LOG_NOTICE, fields,
				  "scrub: scrub.target_ue_per_day or "
				  "scrub.rate_max changed: the patrol now runs "
				  "at %ux its rate, a %.3g s cycle",
				  1u << to, cycle);
	else
		kvmemd_log_fields(to > from ? LOG_WARNING : LOG_NOTICE, fields,
				  "scrub: %.3g uncorrectable words a day "
				  "predicted at the patrol's %ux rate (target "
				  "%.3g): it now runs at %ux, a %.3g s cycle",
				  ue_day, 1u << from, target, 1u << to, cycle);
}

/*
 * The target or scrub.rate_max changed at run time: a level the budget no
 * longer allows (all of them, without a target) is left at once, as a
 * step, not at the end of the next pass.
 */
static void adapt_clamp(struct kvmemd *d)
{
	struct adapt *a = &d->ras->adapt;
	const unsigned int max = a->level ? adapt_max(d) : 0;
	double base;

	if (a->level <= max)
		return;
	base = base_rate(d);
	adapt_step(d, max, -1,
		   base > 0 ? (double)sealed_bytes(d) / base / (1u << max) : 0);
	a->from = max;
	a->ue_day = 0;
	a->short_of = 0;
}

/*
 * After patrol pass @p: run the patrol at the slowest of the rates 2^k
 * times the configured one (k up to what scrub.rate_max allows) at which
 * the prediction is within scrub.target_ue_per_day, stepping up at once;
 * step down one doubling a pass, and only once the prediction at the
 * slower rate is within half the target, so that a rate near a threshold
 * does not make the patrol swing.
 */
static void adapt_pass(struct kvmemd *d, const struct pass *p)
{
	struct adapt *a = &d->ras->adapt;
	double target = d->cfg.scrub_target_ue, base = base_rate(d), T0, u0, u;
	unsigned int max = adapt_max(d), to;
	char fields[256];
	int short_of;

	adapt_clamp(d);
	a->from = a->level;
	to = a->level;
	T0 = base > 0 ? (double)sealed_bytes(d) / base : 0;
	a->base_cycle = T0;
	if (!target || p->exposure <= 0 || base <= 0) {
		a->ue_day = 0;
		a->short_of = 0;
		return;
	}
	u = u0 = ue_per_day(p, T0 / (1u << to));
	if (u > target) {
		while (to < max && u > target)
			u = ue_per_day(p, T0 / (1u << ++to));
	} else if (to && ue_per_day(p, T0 / (1u << (to - 1))) <= target / 2) {
		u = ue_per_day(p, T0 / (1u << --to));
	}
	if (to != a->level)
		adapt_step(d, to, u0, T0 / (1u << to));
	a->ue_day = u;
	short_of = a->ue_day > target;
	a->escalations += short_of && !a->short_of;
	if (short_of != a->short_of && kvmemd_rl(&a->log, KVMEMD_RL_WINDOW_NS,
						 KVMEMD_RL_BURST, ADAPT_WHAT)) {
		snprintf(fields, sizeof(fields),
			 "MESSAGE_ID=%s\nKVMEM_EVENT=%s\nUE_PER_DAY=%.6g\n"
			 "TARGET_UE_PER_DAY=%.6g\n",
			 ADAPT_MESSAGE_ID,
			 short_of ? "archive-escalate" : "archive-relax",
			 a->ue_day, target);
		if (short_of)
			kvmemd_log_fields(
				LOG_WARNING, fields,
				"scrub: %.3g uncorrectable words a day "
				"predicted even at scrub.rate_max (a %.3g s "
				"cycle), over the target of %.3g: released "
				"pages go to the archive tier's codec at any "
				"age; raise scrub.rate_max, or use a stronger "
				"codec",
				a->ue_day, T0 / (1u << to), target);
		else
			kvmemd_log_fields(
				LOG_NOTICE, fields,
				"scrub: %.3g uncorrectable words a day "
				"predicted, within the target of %.3g again: "
				"pages go to the archive tier at "
				"tier.archive_tokens again",
				a->ue_day, target);
	}
	a->short_of = short_of;
}

int kvmemd_ras_short_of(const struct kvmemd *d)
{
	return d->ras && d->cfg.scrub_target_ue && d->ras->adapt.short_of;
}

static int patrol_on(const struct kvmemd *d)
{
	return d->ras->enabled && (d->cfg.scrub_rate || d->cfg.scrub_cycle);
}

static void answer(struct kvmemd *d, const struct pass *p);

/*
 * The checks of pages just sealed, STEP_BYTES of work a pass, the sessions
 * in turn from where the last pass stopped. Return: 1 when some remain.
 */
static int seal_checks(struct kvmemd *d)
{
	struct kvmemd_ras *r = d->ras;
	uint64_t budget = STEP_BYTES;
	struct kvmemd_session *s;
	int round, later, left = 0;

	for (round = 0; round < 2; round++)
		for (s = d->sessions; s; s = s->next) {
			later = s->id >= r->check_next;
			if (!s->checking || later != !round)
				continue;
			if (budget &&
			    kvmemd_ras_check_step(s, &s->seal_check, &budget)) {
				s->checking = 0;
				continue;
			}
			if (!left)
				r->check_next = s->id;
			left = 1;
		}
	return left;
}

/*
 * The mean time the words of patrol pass @p, just ended, had to collect
 * flips since @prev checked them: a word at share f of the way through
 * was checked at prev's start + f * prev's duration and now at p's start +
 * f * p's duration. Passes that follow a change of rate take more or less
 * time than the one before, which the time between their starts alone
 * would miss (and the patrol would swing a level up and down).
 */
static void pass_exposure(struct pass *p, const struct pass *prev)
{
	if (!prev->started_mono) {
		p->exposure = 0;
		return;
	}
	p->exposure = secs(p->started_mono - prev->started_mono) +
		      (p->duration - prev->duration) / 2;
}

uint64_t kvmemd_ras_run(struct kvmemd *d, uint64_t now)
{
	static const struct kvmemd_target pool = { .type = KVMEMD_TARGET_POOL };
	struct kvmemd_ras *r = d->ras;
	uint64_t before, next = UINT64_MAX;
	double burst, spent;

	users_flush(d);
	if (seal_checks(d))
		next = now;
	if (r->ondemand.active) {
		if (pass_step(d, &r->ondemand, 4 * STEP_BYTES)) {
			pass_end(d, &r->ondemand);
			answer(d, &r->ondemand);
		}
		return now;
	}
	if (!patrol_on(d)) {
		r->patrol.active = 0;
		r->tokens = 0;
		r->refill_mono = now;
		return next;
	}
	if (!r->patrol.active) {
		if (now < r->idle_until)
			return next < r->idle_until ? next : r->idle_until;
		pass_start(d, &r->patrol, SRC_PATROL, &pool);
	}
	/* Every time: the rate, the cycle or the sealed bytes may change. */
	adapt_clamp(d);
	if (r->adapt.log.missed)
		kvmemd_rl_flush(&r->adapt.log, KVMEMD_RL_WINDOW_NS, ADAPT_WHAT);
	r->rate = patrol_rate(d);
	burst = r->rate / 10 > STEP_BYTES ? r->rate / 10 : STEP_BYTES;
	if (r->tokens < -burst)
		r->tokens = -burst;
	r->tokens += r->rate * secs(now - r->refill_mono);
	if (r->tokens > burst)
		r->tokens = burst;
	r->refill_mono = now;
	if (r->tokens > 0) {
		before = r->patrol.bytes;
		if (pass_step(d, &r->patrol,
			      r->tokens < STEP_BYTES ? (uint64_t)r->tokens + 1
						     : STEP_BYTES)) {
			pass_end(d, &r->patrol);
			if (r->patrol.pages) {
				pass_exposure(&r->patrol, &r->last_patrol);
				r->last_patrol = r->patrol;
				adapt_pass(d, &r->patrol);
			} else
				r->idle_until = now + IDLE_NS;
		}
		spent = (double)(r->patrol.bytes - before);
		r->tokens -= spent;
	}
	if (r->tokens > 0 || next == now)
		return now;
	return now + (uint64_t)(-r->tokens / r->rate * 1e9) + 1;
}

/* ---- admin requests --------------------------------------------------- */

static void pass_json(struct jw *w, const char *key, const struct pass *p,
		      int current)
{
	char target[48];

	if (!p) {
		jw_null(w, key);
		return;
	}
	if (p->t.type == KVMEMD_TARGET_POOL)
		snprintf(target, sizeof(target), "pool");
	else if (p->t.type == KVMEMD_TARGET_SESSION)
		snprintf(target, sizeof(target), "session %u", p->t.session);
	else
		snprintf(target, sizeof(target), "seq %u %u", p->t.session,
			 p->t.seq);
	jw_open(w, key, '{');
	jw_str(w, "kind", source_names[p->kind]);
	jw_str(w, "target", target);
	jw_f64(w, "started", secs(p->started_ns));
	jw_f64(w, "duration_s",
	       current ? secs(kvmemd_now_ns() - p->started_mono) : p->duration);
	jw_u64(w, "bytes", p->bytes);
	jw_u64(w, "pages", p->pages);
	jw_u64(w, "ce", p->ce);
	jw_u64(w, "ue", p->ue);
	jw_u64(w, "crc", p->crc);
	jw_u64(w, "degraded_pages", p->degraded);
	jw_u64(w, "restored_pages", p->restored);
	jw_u64(w, "padding", p->padding);
	jw_u64(w, "prefix_pages", p->prefix_pages);
	jw_u64(w, "prefix_dropped", p->prefix_dropped);
	jw_close(w, '}');
}

static void answer(struct kvmemd *d, const struct pass *p)
{
	struct kvmemd_ras *r = d->ras;
	struct jw w = { 0 };
	struct kvmemd_waiter *waiter = r->waiter;

	r->waiter = NULL;
	if (!waiter)
		return;
	pass_json(&w, NULL, p, 0);
	jw_end(&w);
	waiter->reply(waiter, &w);
	jw_free(&w);
}

void kvmemd_ras_forget(struct kvmemd *d, struct kvmemd_waiter *waiter)
{
	if (d->ras->waiter == waiter)
		d->ras->waiter = NULL;
}

/* Bytes and pages scrubbed so far, the passes under way included. */
static uint64_t scrubbed(const struct kvmemd_ras *r, int pages)
{
	uint64_t n = pages ? r->pages_total : r->bytes_total;
	const struct pass *p[2] = { &r->patrol, &r->ondemand };
	int i;

	for (i = 0; i < 2; i++)
		if (p[i]->active)
			n += pages ? p[i]->pages : p[i]->bytes;
	return n;
}

static const char *scrub_state(const struct kvmemd_ras *r)
{
	return r->ondemand.active ? "ondemand"
	       : r->patrol.active ? "patrol"
				  : "idle";
}

const char *kvmemd_ras_state(const struct kvmemd *d)
{
	if (!d->ras)
		return "off";
	if (!patrol_on(d) && !d->ras->ondemand.active)
		return "off";
	return scrub_state(d->ras);
}

void kvmemd_ras_status_json(const struct kvmemd *d, struct jw *w)
{
	jw_open(w, "scrub", '{');
	jw_bool(w, "enabled", patrol_on(d));
	jw_str(w, "state", scrub_state(d->ras));
	jw_close(w, '}');
}

/*
 * P(a word is uncorrectable after one cycle): flips arrive as a Poisson
 * process of n * lambda * T per word and cycle, estimated by the share of
 * words the last pass corrected; more than t of them is the first term,
 * (n lambda T)^(t+1) / (t+1)!.
 */
static void estimate_json(const struct kvmemd_ras *r, struct jw *w)
{
	const struct pass *p = &r->last_patrol;
	const struct kvmem_codec_info *ci;
	double x, pw, T;
	int c;

	jw_open(w, "estimate", '[');
	for (c = 0; c < KVMEM_CODEC_NR; c++) {
		if (!p->words[c])
			continue;
		ci = kvmem_codec_get(c);
		T = p->exposure > 0 ? p->exposure : p->duration;
		x = (double)p->ce_words[c] / (double)p->words[c];
		pw = pow(x, ci->corrects + 1) / tgamma(ci->corrects + 2.0);
		jw_open(w, NULL, '{');
		jw_str(w, "codec", ci->name);
		jw_u64(w, "t", ci->corrects);
		jw_u64(w, "n", ci->code_bits);
		jw_u64(w, "words", p->words[c]);
		jw_u64(w, "ce", p->ce_words[c]);
		jw_f64(w, "lambda_per_bit_hour",
		       T > 0 ? x / ci->code_bits / T * 3600 : 0);
		jw_f64(w, "p_ue_word", pw);
		jw_f64(w, "expected_ue_per_cycle", pw * (double)p->words[c]);
		jw_close(w, '}');
	}
	jw_close(w, ']');
}

static void adapt_json(const struct kvmemd *d, struct jw *w)
{
	const struct adapt *a = &d->ras->adapt;
	const struct adapt_step *st;
	uint64_t i;

	jw_open(w, "adapt", '{');
	jw_f64(w, "target_ue_per_day", d->cfg.scrub_target_ue);
	jw_u64(w, "rate_max_bytes_per_s", d->cfg.scrub_rate_max);
	jw_u64(w, "level", adapt_level(d));
	jw_u64(w, "max_level", adapt_max(d));
	jw_u64(w, "from", a->from);
	jw_f64(w, "base_cycle_s", a->base_cycle);
	jw_f64(w, "ue_per_day", d->cfg.scrub_target_ue ? a->ue_day : 0);
	jw_bool(w, "short_of_target", d->cfg.scrub_target_ue && a->short_of);
	jw_u64(w, "archive_escalations", a->escalations);
	jw_u64(w, "steps_up", a->up);
	jw_u64(w, "steps_down", a->down);
	jw_open(w, "steps", '[');
	i = a->nstep > ADAPT_STEPS ? a->nstep - ADAPT_STEPS : 0;
	for (; i < a->nstep; i++) {
		st = &a->step[i % ADAPT_STEPS];
		jw_open(w, NULL, '{');
		jw_f64(w, "time", secs(st->time_ns));
		jw_u64(w, "from", st->from);
		jw_u64(w, "to", st->to);
		jw_f64(w, "ue_per_day", st->ue_day);
		jw_f64(w, "cycle_s", st->cycle);
		jw_close(w, '}');
	}
	jw_close(w, ']');
	jw_close(w, '}');
}

void kvmemd_ras_scrub_status(const struct kvmemd *d, struct jw *w)
{
	const struct kvmemd_ras *r = d->ras;
	double rate = patrol_rate(d);
	const struct pass *cur = r->ondemand.active ? &r->ondemand
				 : r->patrol.active ? &r->patrol
						    : NULL;

	jw_open(w, NULL, '{');
	jw_bool(w, "enabled", patrol_on(d));
	jw_u64(w, "enable_background", (uint64_t)patrol_on(d));
	jw_u64(w, "rate_bytes_per_s", d->cfg.scrub_rate);
	jw_u64(w, "cycle_s", d->cfg.scrub_cycle);
	jw_f64(w, "current_cycle_duration",
	       rate > 0 ? (double)sealed_bytes(d) / rate : 0);
	jw_bool(w, "verify_on_seal", d->cfg.verify_on_seal);
	jw_str(w, "state", scrub_state(r));
	pass_json(w, "current", cur, 1);
	pass_json(w, "last_pass", r->passes ? &r->last : NULL, 0);
	jw_u64(w, "passes", r->passes);
	jw_u64(w, "bytes_total", scrubbed(r, 0));
	jw_f64(w, "effective_rate_bytes_per_s", rate);
	jw_f64(w, "estimate_exposure_s", r->last_patrol.exposure);
	estimate_json(r, w);
	adapt_json(d, w);
	jw_close(w, '}');
	jw_end(w);
}

int kvmemd_ras_scrub_start(struct kvmemd *d, char *why, size_t len)
{
	if (!d->cfg.scrub_rate && !d->cfg.scrub_cycle) {
		snprintf(why, len,
			 "scrub.rate and scrub.cycle are 0: set a rate or a "
			 "cycle first");
		return -EINVAL;
	}
	d->ras->enabled = 1;
	return 0;
}

void kvmemd_ras_scrub_stop(struct kvmemd *d)
{
	d->ras->enabled = 0;
	d->ras->patrol.active = 0;
}

int kvmemd_ras_scrub_now(struct kvmemd *d, const struct kvmemd_target *t,
			 struct kvmemd_waiter *waiter)
{
	struct kvmemd_ras *r = d->ras;

	if (r->ondemand.active)
		return -EBUSY;
	pass_start(d, &r->ondemand, SRC_ONDEMAND, t);
	r->waiter = waiter;
	return 0;
}

void kvmemd_ras_events(const struct kvmemd *d, double since,
		       unsigned long limit, struct jw *w)
{
	const struct kvmemd_ras *r = d->ras;
	const struct ras_event *e;
	unsigned long skip;
	uint32_t i, n = 0;

	for (i = 0; i < r->ev_n; i++)
		n += secs(r->ev[i].time_ns) >= since;
	skip = n > limit ? n - limit : 0;
	jw_open(w, NULL, '{');
	jw_open(w, "events", '[');
	for (i = 0; i < r->ev_n; i++) {
		e = &r->ev[i];
		if (secs(e->time_ns) < since)
			continue;
		if (skip) {
			skip--;
			continue;
		}
		jw_open(w, NULL, '{');
		jw_f64(w, "time", secs(e->time_ns));
		if (e->uid != UID_UNKNOWN)
			jw_u64(w, "uid", e->uid);
		jw_u64(w, "session", e->session);
		jw_u64(w, "seq", e->seq);
		jw_u64(w, "layer", e->layer);
		jw_u64(w, "token_start", e->token_start);
		jw_u64(w, "token_end", e->token_end);
		jw_str(w, "pool", pool_names[e->pool]);
		jw_str(w, "tier", tier_names[e->tier]);
		jw_str(w, "codec", codec_name(e->codec));
		jw_str(w, "region", region_names[e->region]);
		jw_u64(w, "words", e->words);
		jw_str(w, "kind", kind_names[e->kind]);
		jw_bool(w, "restored", e->restored);
		jw_str(w, "source", source_names[e->source]);
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
	jw_f64(w, "since", secs(r->reset_ns));
	jw_f64(w, "seconds_since_reset", secs(kvmemd_now_ns() - r->reset_mono));
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
				jw_str(w, "pool", pool_names[p]);
				jw_str(w, "tier", tier_names[t]);
				jw_str(w, "codec", codec_name(c));
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
	r->reset_ns = clock_ns(CLOCK_REALTIME);
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
	jw_u64(w, "bytes_total", scrubbed(r, 0));
	jw_u64(w, "pages_total", scrubbed(r, 1));
	jw_u64(w, "ce", ce);
	jw_u64(w, "ue", ue);
	jw_u64(w, "crc", r->crc);
	jw_close(w, '}');
	jw_f64(w, "seconds_since_reset", secs(kvmemd_now_ns() - r->reset_mono));
}

/* ---- injection -------------------------------------------------------- */

struct inject_sum {
	uint64_t pages;
	struct kvmem_inject_report c[KVMEM_CODEC_NR];
};

/* One seed per region of a page, all from the caller's. */
static uint64_t mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/*
 * @chan: the channel's mode and k (kvmem_inject_parse()); each region
 * gets its codec's layout and its own seed.
 */
static int inject_slot(struct kvmemd_session *s, uint32_t u, double ber,
		       uint64_t seed, int all,
		       const struct kvmem_inject_params *chan,
		       struct inject_sum *sum)
{
	const int dry = !sum; /* only check the parameters */
	struct region_def rg[4];
	struct kvmem_inject_params ip;
	struct kvmem_inject_report rep;
	size_t i, b;
	int ret;

	slot_regions(s, &s->arena.slots[u], rg);
	for (i = all ? 0 : 2; i < ARRAY_SIZE(rg); i++) {
		uint64_t rs = mix(seed ^ mix(((uint64_t)s->id << 40) ^
					     ((uint64_t)u << 2) ^ i));

		ret = kvmem_inject_params_for_codec(&ip, rg[i].codec, ber, rs);
		if (ret)
			return ret;
		ip.mode = chan->mode;
		ip.k = chan->k;
		if (dry) {
			ret = kvmem_inject(NULL, 0, &ip, NULL);
			if (ret)
				return ret;
			continue;
		}
		memset(&rep, 0, sizeof(rep));
		ret = kvmem_inject(session_page(s, u) + rg[i].off, rg[i].nwords,
				   &ip, &rep);
		if (ret)
			return ret;
		sum->c[rg[i].codec].bits += rep.bits;
		sum->c[rg[i].codec].words += rep.words;
		for (b = 0; b < KVMEM_INJECT_HIST; b++)
			sum->c[rg[i].codec].by_flips[b] += rep.by_flips[b];
	}
	if (!dry)
		sum->pages++;
	return 0;
}

static void flips_json(struct jw *w, const struct kvmem_inject_report *rep)
{
	size_t b;

	jw_u64(w, "words", rep->words);
	jw_u64(w, "bits", rep->bits);
	jw_open(w, "by_flips", '[');
	for (b = 0; b < KVMEM_INJECT_HIST; b++)
		jw_u64(w, NULL, b ? rep->by_flips[b] : 0);
	jw_close(w, ']');
}

/* inject_slot() on every page of @t; @sum NULL: a dry run. */
static int inject_walk(struct kvmemd *d, const struct kvmemd_target *t,
		       const struct kvmemd_inject *in, struct inject_sum *sum)
{
	const double ber = in->ber;
	const uint64_t seed = in->seed;
	const int all = in->all;
	const struct kvmem_inject_params *chan = &in->chan;
	struct kvmemd_session *s;
	uint32_t u;
	int ret;

	for (s = d->sessions; s; s = s->next) {
		struct seq *q;

		if (t->type != KVMEMD_TARGET_POOL && s->id != t->session)
			continue;
		if (t->type == KVMEMD_TARGET_SEQ) {
			q = session_seq(s, t->seq);
			for (u = 0; q && u < q->n; u++) {
				const struct page *pg =
					&s->arena.pages[q->pages[u]];

				if (pg->state != PAGE_RESIDENT &&
				    pg->state != PAGE_WRITING)
					continue;
				ret = inject_slot(s, pg->unit, ber, seed, all,
						  chan, sum);
				if (ret)
					return ret;
			}
			continue;
		}
		for (u = 0; u < s->arena.top;) {
			struct slot *sl = &s->arena.slots[u];

			if (sl->state == SLOT_SEALED) {
				ret = inject_slot(s, u, ber, seed, all, chan,
						  sum);
				if (ret)
					return ret;
			}
			u += sl->state == SLOT_NONE
				     ? 1
				     : s->arena.slot_units[sl->kind];
		}
	}
	return 0;
}

int kvmemd_ras_inject(struct kvmemd *d, const struct kvmemd_target *t,
		      const struct kvmemd_inject *in, struct jw *w)
{
	struct inject_sum sum = { 0 };
	struct kvmem_inject_report total = { 0 };
	int i, n, ret;

	/* Every page the target covers takes the channel, or none does:
	 * a K too large for one of their codecs is refused up front. */
	ret = inject_walk(d, t, in, NULL);
	if (!ret)
		ret = inject_walk(d, t, in, &sum);
	if (ret)
		return ret;
	jw_open(w, NULL, '{');
	jw_u64(w, "pages", sum.pages);
	for (i = 0; i < KVMEM_CODEC_NR; i++) {
		total.words += sum.c[i].words;
		total.bits += sum.c[i].bits;
		for (n = 0; n < KVMEM_INJECT_HIST; n++)
			total.by_flips[n] += sum.c[i].by_flips[n];
	}
	flips_json(w, &total);
	jw_open(w, "codecs", '[');
	for (i = 0; i < KVMEM_CODEC_NR; i++) {
		if (!sum.c[i].words)
			continue;
		jw_open(w, NULL, '{');
		jw_str(w, "codec", codec_name(i));
		flips_json(w, &sum.c[i]);
		jw_close(w, '}');
	}
	jw_close(w, ']');
	jw_close(w, '}');
	jw_end(w);
	kvmemd_log(LOG_WARNING,
		   "injected %llu bit errors into %llu pages (channel %s, ber "
		   "%g, seed %llu)",
		   (unsigned long long)total.bits,
		   (unsigned long long)sum.pages, in->spec, in->ber,
		   (unsigned long long)in->seed);
	return 0;
}
