/* SPDX-License-Identifier: MIT */
/*
 * tier.c - where a session's pages live: the tiering policy, and the moves
 * to and from the backing store (the cold tier)
 *
 * Tiers: hot (FP16 slots: a sequence's unsealed tail and its sinks), warm
 * (sealed slots in the session's format and codec), both in the session's
 * arena, and cold (on the store, out of the arena). A page moves only while
 * no acquired sequence holds it (its pins are 0), and only as a whole: it
 * is written to the store as it is in memory, ECC and CRC-32C included, and
 * its slot is given back only once the write completed in full. A write
 * that fails (EIO, ENOSPC, short) leaves the page where it was; the error
 * is counted and the policy backs off for a while.
 *
 * The policy runs on the event loop, like kswapd: when a session's arena
 * has less than tier.low_watermark percent free, released pages leave until
 * tier.high_watermark percent is free or on its way to be. An allocation or
 * an acquire that finds the arena full waits for pages to leave (direct
 * reclaim) instead of failing, as long as some can. Pages leave in this
 * order: those tier.stale_tokens or more behind the end of their sequence
 * first (the three-tier design's archive candidates), then by the heat the
 * client's attention gave them (the shared heat array, lowest first), then
 * the longest released.
 *
 * SEQ_ACQUIRE pins the sequence's pages at once and completes when all are
 * resident: cold ones are read back into fresh slots, checked (CRC-32C,
 * then the codes: see kvmemd_ras_reload()) and reported to the client as
 * (old slot, new slot) pairs in the acquire's buffer. Each move is
 * reported once, to the first acquire that sees it.
 *
 * The I/O never blocks the loop: the store's engine (io_uring, or a thread
 * pool) completes into an eventfd the loop watches.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmem/crc32c.h"
#include "kvmem/quant.h"
#include "json.h"
#include "kvmemd.h"
#include "session.h"
#include "store.h"

/* How often ops that wait with no I/O in flight are looked at again. */
#define WAIT_POLL_NS 100000000ull
/* A session's order of pages to move is rebuilt at least this often. */
#define VICTIMS_TTL_NS 1000000000ull
/* After a failed write, offloads pause this long (doubling to the max). */
#define BACKOFF_MIN_NS 100000000ull
#define BACKOFF_MAX_NS (10ull * 1000000000ull)
/* Work checking pages read back does in one pass of the loop. */
#define RELOAD_STEP_BYTES (256u << 10)
/* The journal hears of I/O errors at most this often. */
#define ERROR_LOG_NS (10ull * 1000000000ull)

/* What one store I/O is for; [io->index], so none is allocated per I/O. */
struct ticket {
	struct kvmemd_session *s; /* NULL once the session is gone */
	uint32_t pg;
	uint64_t store_unit;
	uint32_t units;
	uint32_t cmd; /* the "offload" command that asked for it, or 0 */
};

/* An admin "offload TARGET": released pages of the target go now. */
struct offload_cmd {
	int active;
	uint32_t gen; /* tickets carry it: an old command's writes do not
		       * count in a new one */
	struct kvmemd_waiter *waiter;
	struct kvmemd_target t;
	uint64_t started, pages, bytes, errors;
	uint64_t inflight;
};

/* A page read back, being checked before anyone may use it. */
struct reload {
	struct kvmemd_session *s; /* NULL once the session is gone */
	uint32_t pg;
	struct kvmemd_check c;
};

struct kvmemd_tier {
	struct kvmemd_store *st;
	struct ticket *tickets; /* [queue_depth] */
	uint32_t io_bytes, queue_depth;
	/* Reads in flight and pages read back but not checked yet: together
	 * at most queue_depth, so checks[] never overflows. */
	uint32_t reading, nchecks;
	struct reload *checks; /* [queue_depth] */
	uint64_t backoff_until, backoff;
	uint64_t last_log;
	/* since start, all sessions */
	uint64_t offloads, reloads, offload_bytes, reload_bytes;
	uint64_t write_errors, read_errors, nospace, reload_bad;
	uint64_t reload_lost; /* came back as something else: erased */
	uint64_t waits; /* ops that had to wait for pages to move */
	struct offload_cmd cmd;
};

/* Pages are counted in arena slot units on the store too. */
_Static_assert(KVMEM_SLOT_UNIT == KVMEMD_STORE_UNIT,
	       "an arena unit is a store unit");

static uint32_t page_units(const struct kvmemd_session *s, const struct page *p)
{
	return s->arena.slot_units[p->kind];
}

static void kick(struct kvmemd_session *s);

struct tier_held {
	uint64_t unit;
	uint32_t units;
};

/*
 * The store units of a page of @s read back: free, unless a live record
 * of @s may still say the page is there (then held until a record that
 * does not is written); freed at once when there is no room to hold them.
 */
static void units_give_back(struct kvmemd_session *s, uint64_t unit,
			    uint32_t units)
{
	struct tier_held *h;
	uint32_t cap;

	if (s->live && s->nheld == s->held_cap) {
		cap = s->held_cap ? 2 * s->held_cap : 16;
		h = realloc(s->held, cap * sizeof(*h));
		if (h) {
			s->held = h;
			s->held_cap = cap;
		}
	}
	if (!s->live || s->nheld == s->held_cap) {
		kvmemd_store_free(s->d->tier->st, unit, units);
		return;
	}
	s->held[s->nheld++] = (struct tier_held){ unit, units };
}

/*
 * A unit freed before the copy for record N was taken is not in N, but may
 * be in N - 1, the other record on disk: a client that rewrote its ring's
 * heads to N - 1's makes a restart take that one. It is free once N + 1 is
 * written over N - 1, never while another session may be given it and a
 * restart could hand it back to this one.
 */
void tier_held_mark(struct kvmemd_session *s)
{
	s->nheld_free = s->nheld_old;
	s->nheld_old = s->nheld;
}

void tier_held_clear(struct kvmemd_session *s)
{
	const uint32_t n = s->nheld_free;
	uint32_t i;

	/* Nothing to free: s->held may still be NULL, which memmove() may
	 * not be given even for no bytes (UBSan stops kvmemd there). */
	if (!n)
		return;
	for (i = 0; i < n; i++)
		kvmemd_store_free(s->d->tier->st, s->held[i].unit, s->held[i].units);
	memmove(s->held, s->held + n, (s->nheld - n) * sizeof(*s->held));
	s->nheld -= n;
	s->nheld_old -= n;
	s->nheld_free = 0;
}

void tier_retry(struct kvmemd_session *s)
{
	kick(s);
}

void tier_held_drop(struct kvmemd_session *s)
{
	s->nheld_free = s->nheld_old = s->nheld;
	tier_held_clear(s);
	free(s->held);
	s->held = NULL;
	s->held_cap = 0;
}

/* Store units not in use. */
static uint64_t store_room(const struct kvmemd_tier *t)
{
	struct kvmemd_store_stats st;

	kvmemd_store_stats(t->st, &st);
	return st.nunits - st.used_units;
}

int kvmemd_tier_has_store(const struct kvmemd *d)
{
	return d->tier && d->tier->st;
}

static struct kvmemd_store_cfg store_cfg(const struct kvmemd_config *c)
{
	return (struct kvmemd_store_cfg){
		.path = c->store_path,
		.size = c->store_size,
		.reformat = c->store_reformat,
		.queue_depth = c->store_queue_depth,
		.io_bytes = (uint32_t)c->store_io_bytes,
		.engine = c->store_engine,
	};
}

int kvmemd_tier_check(const struct kvmemd_config *c, char *err, size_t len)
{
	struct kvmemd_store_cfg sc = store_cfg(c);
	char why[512];
	int ret;

	if (!c->store_path[0])
		return 0;
	ret = kvmemd_store_check(&sc, why, sizeof(why));
	if (ret)
		snprintf(err, len, "store: %s", why);
	return ret;
}

int kvmemd_tier_init(struct kvmemd *d)
{
	const struct kvmemd_config *c = &d->cfg;
	struct kvmemd_store_cfg sc = store_cfg(c);
	struct kvmemd_tier *t;
	char err[512];
	int ret;

	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	d->tier = t;
	ret = kvmemd_archive_init(d);
	if (ret || !c->store_path[0])
		return ret;
	t->tickets = calloc(c->store_queue_depth, sizeof(*t->tickets));
	t->checks = calloc(c->store_queue_depth, sizeof(*t->checks));
	if (!t->tickets || !t->checks)
		return -ENOMEM;
	ret = kvmemd_store_open(&sc, &t->st, err, sizeof(err));
	if (ret) {
		kvmemd_log(LOG_ERR, "store: %s", err);
		return ret;
	}
	t->io_bytes = sc.io_bytes;
	t->queue_depth = sc.queue_depth;
	return 0;
}

void kvmemd_tier_exit(struct kvmemd *d)
{
	struct kvmemd_tier *t = d->tier;

	kvmemd_archive_exit(d);
	if (!t)
		return;
	/* Sessions are gone by now: the completions find no owner. */
	if (t->st)
		kvmemd_store_close(t->st);
	free(t->tickets);
	free(t->checks);
	free(t);
	d->tier = NULL;
}

int kvmemd_tier_fd(const struct kvmemd *d)
{
	return kvmemd_tier_has_store(d) ? kvmemd_store_io_fd(d->tier->st) : -1;
}

/* ---- errors ----------------------------------------------------------- */

static void io_error(struct kvmemd_tier *t, const struct kvmemd_session *s,
		     const char *what, int res, uint32_t len)
{
	uint64_t now = kvmemd_now_ns();
	char why[64];

	if (now - t->last_log < ERROR_LOG_NS && t->last_log)
		return;
	t->last_log = now;
	if (res >= 0)
		snprintf(why, sizeof(why), "short: %d of %u bytes", res, len);
	else
		snprintf(why, sizeof(why), "%s", strerror(-res));
	kvmemd_log(LOG_WARNING,
		   "store: %s for session %u failed (%s); the page stays "
		   "where it was (errors: %llu writes, %llu reads, %llu out "
		   "of space)",
		   what, s ? s->id : 0, why,
		   (unsigned long long)t->write_errors,
		   (unsigned long long)t->read_errors,
		   (unsigned long long)t->nospace);
}

static void backoff(struct kvmemd_tier *t)
{
	t->backoff = t->backoff ? t->backoff * 2 : BACKOFF_MIN_NS;
	if (t->backoff > BACKOFF_MAX_NS)
		t->backoff = BACKOFF_MAX_NS;
	t->backoff_until = kvmemd_now_ns() + t->backoff;
}

/* ---- waiting ops ------------------------------------------------------ */

/* A fetch's job answers no one once its op is gone. */
static void wait_free(struct tier_wait *w)
{
	if (w->job)
		w->forget(w->job);
	free(w);
}

static void wait_remove(struct kvmemd_session *s, struct tier_wait *w)
{
	struct tier_wait **pp;

	for (pp = &s->waits; *pp != w; pp = &(*pp)->next)
		;
	*pp = w->next;
	if (s->waits_tail == &w->next)
		s->waits_tail = pp;
	s->nwaits--;
	wait_free(w);
}

static void wait_done(struct kvmemd_session *s, struct tier_wait *w, int res)
{
	uint64_t user_data = w->e.user_data;

	wait_remove(s, w);
	session_post(s, user_data, res, 0);
}

static int wait_add(struct kvmemd_session *s, const struct kvmem_sqe *e,
		    struct tier_wait **out)
{
	struct tier_wait *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	w->e = *e;
	*s->waits_tail = w;
	s->waits_tail = &w->next;
	s->nwaits++;
	*out = w;
	return 0;
}

/* An op that waits for pages to move: counted in the tier's "waits". */
static int page_wait_add(struct kvmemd_session *s, const struct kvmem_sqe *e,
			 struct tier_wait **out)
{
	int ret = wait_add(s, e, out);

	if (!ret && s->d->tier)
		s->d->tier->waits++;
	return ret;
}

/* The units of the larger of a session's two slot sizes: what an op that
 * waits for either kind asks to be freed. */
static uint32_t largest_slot(const struct kvmemd_session *s)
{
	const uint32_t *u = s->arena.slot_units;

	return u[0] > u[1] ? u[0] : u[1];
}

/* Can @p leave for the store: released, resident in host memory? */
static int to_store(const struct kvmemd_session *s, const struct page *p)
{
	return p->state == PAGE_RESIDENT && !p->pins && p->refs &&
	       !arena_unit_gpu(&s->arena, p->unit);
}

/* Can pages of @s leave at all? (Some are released, a store is there.) */
static int can_reclaim(const struct kvmemd_session *s)
{
	const struct kvmemd_tier *t = s->d->tier;
	uint64_t room;
	uint32_t i;

	if (!t || !t->st || !s->d->cfg.offload)
		return 0;
	if (s->inflight)
		return 1;
	/* A full store takes nothing more, a failing one nothing now, one
	 * with less room than each page that could go none of them:
	 * waiting would be for ever. */
	if (kvmemd_store_full(t->st) || s->write_failed)
		return 0;
	room = store_room(t);
	for (i = 0; i < s->arena.top_page; i++) {
		const struct page *p = &s->arena.pages[i];

		if (to_store(s, p) && slot_bytes(s, p->kind) <= t->io_bytes &&
		    page_units(s, p) <= room)
			return 1;
	}
	return 0;
}

int tier_alloc_wait(struct kvmemd_session *s, const struct kvmem_sqe *e)
{
	struct tier_wait *w;

	if (!can_reclaim(s) || page_wait_add(s, e, &w))
		return -ENOMEM;
	return OP_WAIT;
}

int tier_remote_wait(struct kvmemd_session *s, const struct kvmem_sqe *e,
		     struct tier_wait **out)
{
	int ret = wait_add(s, e, out);

	if (!ret)
		(*out)->owner = s;
	return ret;
}

void tier_remote_done(struct kvmemd_session *s, struct tier_wait *w, int res)
{
	wait_done(s, w, res);
}

void tier_remote_drop(struct kvmemd_session *s, struct tier_wait *w)
{
	w->job = NULL;
	wait_remove(s, w);
}

int tier_attach_wait(struct kvmemd_session *s, const struct kvmem_sqe *e,
		     const uint8_t *key)
{
	struct tier_wait *w;

	if (!can_reclaim(s) || page_wait_add(s, e, &w))
		return -ENOMEM;
	memcpy(w->key, key, sizeof(w->key));
	return OP_WAIT;
}

/*
 * Write up to the buffer's worth of @q's moved pages. Return: how many; a
 * full buffer means the client asks again.
 */
static int map_report(struct kvmemd_session *s, struct seq *q,
		      const struct kvmem_sqe *e)
{
	const size_t size = s->features & KVMEM_FEAT_ARCHIVE
				    ? sizeof(struct kvmem_page_move_ex)
				    : sizeof(struct kvmem_page_move);
	uint32_t room = (uint32_t)(e->len / size), n = 0, i;
	uint8_t *out = s->buf + e->addr;
	struct kvmem_page_move_ex m;

	for (i = 0; i < q->n && n < room; i++) {
		struct page *p = &s->arena.pages[q->pages[i]];
		const struct kvmem_page_layout *l;

		if (!p->moved)
			continue;
		l = slot_layout(s, &s->arena.slots[p->unit]);
		memset(&m, 0, sizeof(m));
		m.layer = p->layer;
		m.token_start = p->token_start;
		m.old_slot = p->client_slot;
		m.new_slot = p->unit;
		m.format = l->format;
		m.codec = l->codec;
		memcpy(out + (size_t)n * size, &m, size);
		p->client_slot = p->unit;
		p->moved = 0;
		n++;
	}
	/* A client that gave no room cannot learn where its pages are. */
	if (!room)
		for (; i < q->n; i++)
			if (s->arena.pages[q->pages[i]].moved)
				return -EMSGSIZE;
	return (int)n;
}

static int read_page(struct kvmemd_session *s, uint32_t pg);

static int resident(const struct page *p)
{
	return p->state == PAGE_RESIDENT || p->state == PAGE_WRITING;
}

/*
 * Move an acquire on: start reads of its cold pages while slots and I/Os
 * allow, and complete it once all are resident.
 */
static void acquire_step(struct kvmemd_session *s, struct tier_wait *w)
{
	struct seq *q = session_seq(s, w->e.seq);
	uint32_t i;
	int ret;

	for (i = w->issue; i < q->n && !w->error; i++) {
		struct page *p = &s->arena.pages[q->pages[i]];

		if (arena_read_error(&s->arena, q->pages[i])) {
			w->error = -EIO;
			break;
		}
		if (p->state != PAGE_COLD)
			continue;
		ret = read_page(s, q->pages[i]);
		if (ret == -ENOMEM) {
			/* Direct reclaim: other pages must leave first. */
			s->want_units += page_units(s, p);
			if (!can_reclaim(s))
				w->error = -ENOMEM;
		}
		if (ret)
			break;
	}
	w->issue = i;
	while (w->scan < q->n) {
		struct page *p = &s->arena.pages[q->pages[w->scan]];

		if (resident(p)) {
			w->scan++;
			continue;
		}
		/* A read started earlier failed: the page is on the store. */
		if (arena_read_error(&s->arena, q->pages[w->scan]))
			w->error = -EIO;
		break;
	}
	if (w->error) {
		/* What came back stays; the sequence is not acquired. */
		ret = w->error;
		q->wait = NULL;
		session_seq_pin(s, q, 0);
		wait_done(s, w, ret);
		return;
	}
	if (w->scan < q->n)
		return;
	ret = tier_gpu_place(s, q, w->e.flags & KVMEM_SQE_GPU, &w->place);
	if (!ret) {
		s->gpu_more = 1;
		return;
	}
	if (ret == -ENOMEM && can_reclaim(s)) {
		/* Back to host memory, once pages leave it for the store. */
		s->want_units += largest_slot(s);
		return;
	}
	if (ret < 0) {
		q->wait = NULL;
		session_seq_pin(s, q, 0);
		wait_done(s, w, ret);
		return;
	}
	q->wait = NULL;
	ret = map_report(s, q, &w->e);
	if (ret < 0)
		session_seq_pin(s, q, 0);
	wait_done(s, w, ret);
}

int tier_acquire(struct kvmemd_session *s, struct seq *q,
		 const struct kvmem_sqe *e)
{
	struct tier_wait *w;
	uint32_t i, place = 0;
	int ret;

	/* The pages it looks through count in the ring's pass: a ring of
	 * acquires of a long sequence takes its turn. */
	s->pass_bytes += (uint64_t)q->n * sizeof(*s->arena.pages);
	for (i = 0; i < q->n && resident(&s->arena.pages[q->pages[i]]); i++)
		;
	if (i == q->n) {
		ret = tier_gpu_place(s, q, e->flags & KVMEM_SQE_GPU, &place);
		if (ret == 1)
			ret = map_report(s, q, e);
		if (ret == -ENOMEM && can_reclaim(s))
			ret = 0;
		if (ret < 0) {
			session_seq_pin(s, q, 0);
			return ret;
		}
		if (ret || place == q->n)
			return ret;
	}
	if (page_wait_add(s, e, &w)) {
		session_seq_pin(s, q, 0);
		return -ENOMEM;
	}
	w->scan = w->issue = i;
	w->place = place;
	q->wait = w;
	acquire_step(s, w);
	return OP_WAIT;
}

void tier_cancel(struct kvmemd_session *s, struct seq *q)
{
	struct tier_wait *w = q->wait, *next;

	if (w) {
		q->wait = NULL;
		wait_done(s, w, -ECANCELED);
	}
	/* An attach into it would land in whatever gets its id next. */
	for (w = s->waits; w; w = next) {
		next = w->next;
		if (w->e.opcode == KVMEM_OP_PREFIX_ATTACH && w->e.seq == q->id)
			wait_done(s, w, -ECANCELED);
	}
}

/* An allocation that waited: slots now, or still waiting, or -ENOMEM. */
static int alloc_step(struct kvmemd_session *s, struct tier_wait *w)
{
	uint32_t i, u;
	uint8_t *out = s->buf + w->e.addr;

	for (i = 0; i < w->e.len; i++) {
		if (arena_slot_alloc(&s->arena, w->e.kind, &u))
			break;
		memcpy(out + i * sizeof(u), &u, sizeof(u));
	}
	if (i) {
		wait_done(s, w, (int)i);
		return 1;
	}
	if (!can_reclaim(s)) {
		wait_done(s, w, -ENOMEM);
		return 1;
	}
	s->want_units += s->arena.slot_units[w->e.kind];
	return 0;
}

/* A PREFIX_ATTACH that waited for a slot: attached now, or still waiting
 * (for the larger of the two slot sizes), or failed. */
static void attach_step(struct kvmemd_session *s, struct tier_wait *w)
{
	int no_slot, ret = session_prefix_attach(s, &w->e, w->key, &no_slot);

	if (ret == -ENOMEM && no_slot && can_reclaim(s)) {
		s->want_units += largest_slot(s);
		return;
	}
	wait_done(s, w, ret);
}

/* Move every waiting op of @s on, in order. */
static void kick(struct kvmemd_session *s)
{
	struct tier_wait *w, *next;

	s->want_units = 0;
	s->gpu_more = 0;
	for (w = s->waits; w; w = next) {
		next = w->next;
		if (w->e.opcode == KVMEM_OP_PAGE_ALLOC)
			alloc_step(s, w);
		else if (w->e.opcode == KVMEM_OP_PREFIX_ATTACH)
			attach_step(s, w);
		else if (w->e.opcode == KVMEM_OP_SEQ_ACQUIRE)
			acquire_step(s, w);
	}
}

/* ---- I/O -------------------------------------------------------------- */

static struct ticket *ticket_of(struct kvmemd_tier *t, struct kvmemd_io *io)
{
	return &t->tickets[io->index];
}

static void read_done(struct kvmemd_io *io, int res);
static void write_done(struct kvmemd_io *io, int res);

/* Start reading cold page @pg back: 0, -ENOMEM (no slot), -EBUSY (no I/O,
 * or no slot until the live record is written: tier_retry()). */
static int read_page(struct kvmemd_session *s, uint32_t pg)
{
	struct kvmemd_tier *t = s->d->tier;
	struct page *p = &s->arena.pages[pg];
	struct kvmemd_io *io;
	struct ticket *tk;
	uint32_t u;
	int ret;

	if (t->reading + t->nchecks >= t->queue_depth)
		return -EBUSY;
	io = kvmemd_store_io_get(t->st);
	if (!io)
		return -EBUSY;
	ret = arena_read_start(&s->arena, pg, &u);
	if (ret) {
		kvmemd_store_io_put(t->st, io);
		return ret;
	}
	tk = ticket_of(t, io);
	*tk = (struct ticket){ s, pg, p->store_unit, page_units(s, p), 0 };
	io->op = KVMEMD_IO_READ;
	io->unit = p->store_unit;
	io->len = (uint32_t)slot_bytes(s, p->kind);
	io->done = read_done;
	io->priv = t;
	s->inflight++;
	t->reading++;
	kvmemd_store_io_queue(t->st, io);
	return 0;
}

static void read_done(struct kvmemd_io *io, int res)
{
	struct kvmemd_tier *t = io->priv;
	struct ticket *tk = ticket_of(t, io);
	struct kvmemd_session *s = tk->s;
	uint32_t u, pg = tk->pg;
	struct reload *rl;
	struct page *p;

	t->reading--;
	if (!s) {
		kvmemd_store_free(t->st, tk->store_unit, tk->units);
		return;
	}
	s->inflight--;
	p = &s->arena.pages[tk->pg];
	u = p->unit;
	if (res != (int)io->len) {
		t->read_errors++;
		io_error(t, s, "a read", res, io->len);
		if (p->dead)
			tier_page_drop(s, tk->pg);
		else
			arena_read_fail(&s->arena, tk->pg);
		kick(s);
		return;
	}
	units_give_back(s, tk->store_unit, tk->units);
	if (p->dead) {
		arena_page_free(&s->arena, tk->pg);
		kick(s);
		return;
	}
	memcpy(session_page(s, u), io->buf, io->len);
	arena_slot_enter(&s->arena, u, &pg, &p->cold);
	s->reloads++;
	s->reload_bytes += io->len;
	t->reloads++;
	t->reload_bytes += io->len;
	/* Still PAGE_READING: checked before any acquire can use it (CRC of
	 * what was written, then the codes and the seal's CRC: what came
	 * back as something else is never passed off as good). */
	rl = &t->checks[t->nchecks++];
	rl->s = s;
	rl->pg = tk->pg;
	kvmemd_ras_reload(s, u, p->store_crc, &rl->c);
}

/* The check of a page read back is over: it is resident from now on. */
static void reload_checked(struct kvmemd_tier *t, struct reload *rl)
{
	struct kvmemd_session *s = rl->s;
	struct page *p = &s->arena.pages[rl->pg];
	const struct slot *sl = &s->arena.slots[p->unit];

	if (rl->c.lost)
		t->reload_lost++;
	if (sl->flags & SLOT_DEGRADED)
		t->reload_bad++;
	if (p->dead) {
		arena_page_free(&s->arena, rl->pg);
		return;
	}
	arena_read_checked(&s->arena, rl->pg);
	/* A move the client was not told of yet stays to be told, even
	 * back into the slot it knows: an archived page has another codec
	 * there. */
	p->moved |= p->unit != p->client_slot;
	/* Just wanted: the last to leave again, if nobody pins it. */
	p->released = kvmemd_now_ns();
}

/*
 * Check pages read back, STEP_BYTES of work a pass at most: the rings
 * wait meanwhile. Return: 1 when some are left.
 */
static int reloads_step(struct kvmemd_tier *t)
{
	uint64_t budget = RELOAD_STEP_BYTES;
	struct kvmemd_session *s;
	struct reload *rl;
	uint32_t i = 0;

	while (i < t->nchecks && budget) {
		rl = &t->checks[i];
		s = rl->s;
		if (s && !kvmemd_ras_check_step(s, &rl->c, &budget)) {
			i++;
			continue;
		}
		if (s) {
			reload_checked(t, rl);
			kick(s);
		}
		*rl = t->checks[--t->nchecks];
	}
	return t->nchecks > 0;
}

/* Start writing resident page @pg out: 0, or -ENOSPC / -EBUSY. */
static int write_page(struct kvmemd_session *s, uint32_t pg, int forced)
{
	struct kvmemd_tier *t = s->d->tier;
	struct page *p = &s->arena.pages[pg];
	struct kvmemd_io *io;
	struct ticket *tk;
	uint64_t unit;
	uint32_t units = page_units(s, p);
	int ret;

	io = kvmemd_store_io_get(t->st);
	if (!io)
		return -EBUSY;
	ret = kvmemd_store_alloc(t->st, units, &unit);
	if (ret) {
		kvmemd_store_io_put(t->st, io);
		/* Full until something is freed (kvmemd_store_full()):
		 * waiting ops stop waiting, the command stops with an
		 * error. */
		t->cmd.errors += forced;
		t->nospace++;
		s->nospace++;
		io_error(t, s, "an offload", ret, 0);
		backoff(t);
		return ret;
	}
	/* The copy is taken now: the slot may be reused once it is on disk.
	 * Its CRC tells, when it comes back, whether anything changed. */
	memcpy(io->buf, session_page(s, p->unit), slot_bytes(s, p->kind));
	p->store_crc = kvmem_crc32c(0, io->buf, slot_bytes(s, p->kind));
	arena_write_start(&s->arena, pg);
	p->store_unit = unit;
	tk = ticket_of(t, io);
	*tk = (struct ticket){ s, pg, unit, units, forced ? t->cmd.gen : 0 };
	io->op = KVMEMD_IO_WRITE;
	io->unit = unit;
	io->len = (uint32_t)slot_bytes(s, p->kind);
	io->done = write_done;
	io->priv = t;
	s->inflight++;
	if (forced)
		t->cmd.inflight++;
	kvmemd_store_io_queue(t->st, io);
	return 0;
}

static void write_done(struct kvmemd_io *io, int res)
{
	struct kvmemd_tier *t = io->priv;
	struct ticket *tk = ticket_of(t, io);
	struct kvmemd_session *s = tk->s;
	struct page *p;
	int ok = res == (int)io->len;

	if (tk->cmd && tk->cmd == t->cmd.gen && t->cmd.active) {
		t->cmd.inflight--;
		if (ok) {
			t->cmd.pages++;
			t->cmd.bytes += io->len;
		} else {
			t->cmd.errors++;
		}
	}
	if (!ok) {
		t->write_errors++;
		t->nospace += res == -ENOSPC;
		if (s) {
			s->io_errors++;
			s->write_failed = 1;
		}
		io_error(t, s, "an offload", res, io->len);
		backoff(t);
	} else {
		t->backoff = 0;
	}
	if (!s) {
		kvmemd_store_free(t->st, tk->store_unit, tk->units);
		return;
	}
	s->inflight--;
	p = &s->arena.pages[tk->pg];
	if (ok)
		s->write_failed = 0;
	if (p->dead || !ok || p->pins) {
		/* Gone, failed, or wanted again meanwhile: it stays (or
		 * goes) from memory, and the copy is not needed. */
		kvmemd_store_free(t->st, tk->store_unit, tk->units);
		if (p->dead)
			arena_page_free(&s->arena, tk->pg);
		else
			arena_write_end(&s->arena, tk->pg, 0);
		kick(s);
		return;
	}
	arena_write_end(&s->arena, tk->pg, 1);
	s->offloads++;
	s->offload_bytes += io->len;
	t->offloads++;
	t->offload_bytes += io->len;
	kick(s);
}

void tier_page_drop(struct kvmemd_session *s, uint32_t pg)
{
	struct page *p = &s->arena.pages[pg];

	/* A live record may still say it is there. */
	units_give_back(s, p->store_unit, page_units(s, p));
	arena_page_free(&s->arena, pg);
}

void tier_session_free(struct kvmemd_session *s)
{
	struct kvmemd_tier *t = s->d->tier;
	struct tier_wait *w, *next;
	uint32_t i;

	for (w = s->waits; w; w = next) {
		next = w->next;
		wait_free(w);
	}
	s->waits = NULL;
	free(s->victims);
	if (!t || !t->st)
		return;
	/* I/O in flight frees its store units when it completes. */
	for (i = 0; i < t->queue_depth; i++)
		if (t->tickets[i].s == s)
			t->tickets[i].s = NULL;
	for (i = 0; i < t->nchecks; i++)
		if (t->checks[i].s == s)
			t->checks[i].s = NULL;
	for (i = 0; i < s->arena.top_page; i++)
		if (s->arena.pages[i].state == PAGE_COLD)
			kvmemd_store_free(t->st, s->arena.pages[i].store_unit,
				   page_units(s, &s->arena.pages[i]));
}

int tier_quiesce(struct kvmemd_session *s, int timeout_ms)
{
	const uint64_t end = kvmemd_now_ns() + (uint64_t)timeout_ms * 1000000u;
	struct kvmemd_tier *t = s->d->tier;
	struct tier_wait *w;
	struct pollfd pfd;
	struct seq *q;
	uint32_t i;

	s->nprefetch = 0;
	while ((w = s->waits)) {
		q = session_seq(s, w->e.seq);
		if (w->e.opcode == KVMEM_OP_SEQ_ACQUIRE && q && q->wait == w) {
			/* Cancelled, it leaves the sequence released. */
			q->wait = NULL;
			session_seq_pin(s, q, 0);
		}
		wait_done(s, w, -ECANCELED);
	}
	s->want_units = 0;
	if (!t || !t->st)
		return 0;
	for (;;) {
		for (i = 0; i < t->nchecks && t->checks[i].s != s; i++)
			;
		if (!s->inflight && i == t->nchecks)
			return 0;
		if (kvmemd_now_ns() >= end)
			return -ETIMEDOUT;
		pfd = (struct pollfd){ .fd = kvmemd_store_io_fd(t->st),
				       .events = POLLIN };
		poll(&pfd, 1, 10);
		kvmemd_store_io_reap(t->st);
		reloads_step(t);
	}
}

int tier_claim(struct kvmemd_session *s, uint32_t pg)
{
	struct kvmemd_tier *t = s->d->tier;
	struct page *p = &s->arena.pages[pg];

	if (!t || !t->st)
		return -ENODEV;
	return kvmemd_store_claim(t->st, p->store_unit, page_units(s, p));
}

struct kvmemd_store *kvmemd_tier_store(const struct kvmemd *d)
{
	return kvmemd_tier_has_store(d) ? d->tier->st : NULL;
}

int kvmemd_tier_store_uuid(const struct kvmemd *d, uint8_t uuid[16])
{
	struct kvmemd_store_stats st;

	if (!kvmemd_tier_has_store(d))
		return -ENODEV;
	kvmemd_store_stats(d->tier->st, &st);
	memcpy(uuid, st.uuid, 16);
	return 0;
}

void kvmemd_tier_reap(struct kvmemd *d)
{
	if (kvmemd_tier_has_store(d))
		kvmemd_store_io_reap(d->tier->st);
}

/* ---- prefetch --------------------------------------------------------- */

/*
 * Read back what @s's prefetched sequences still have on the store, as
 * I/Os and free slots allow. A prefetch never makes room: in a full arena
 * it is dropped, and the acquire does the rest.
 */
static void prefetch_step(struct kvmemd_session *s)
{
	uint32_t i = 0, *pf;
	struct seq *q;
	int ret = 0;

	while (i < s->nprefetch) {
		pf = s->prefetch[i];
		q = session_seq(s, pf[0]);
		for (; q && pf[1] < q->n; pf[1]++) {
			struct page *p = &s->arena.pages[q->pages[pf[1]]];

			if (p->state != PAGE_COLD ||
			    p->cold.flags & SLOT_READ_FAILED)
				continue;
			ret = read_page(s, q->pages[pf[1]]);
			if (ret)
				break;
		}
		if (ret == -EBUSY)
			return;
		/* Done, gone, or no room: drop it. */
		s->prefetch[i][0] = s->prefetch[s->nprefetch - 1][0];
		s->prefetch[i][1] = s->prefetch[s->nprefetch - 1][1];
		s->nprefetch--;
		ret = 0;
	}
}

void tier_prefetch(struct kvmemd_session *s, struct seq *q)
{
	if (!kvmemd_tier_has_store(s->d))
		return;
	tier_prefetch_add(s->prefetch, &s->nprefetch, q->id);
	prefetch_step(s);
}

/* ---- the policy ------------------------------------------------------- */

struct victim {
	uint64_t key; /* lower leaves first */
	uint32_t pg;
};

static int victim_cmp(const void *a, const void *b)
{
	const struct victim *x = a, *y = b;

	return x->key < y->key ? -1 : x->key > y->key;
}

static int in_target(const struct kvmemd_session *s, const struct page *p,
		     const struct kvmemd_target *t)
{
	const struct seq *q;

	if (t->type == KVMEMD_TARGET_POOL)
		return 1;
	if (s->id != t->session)
		return 0;
	if (t->type == KVMEMD_TARGET_SESSION)
		return 1;
	q = session_seq(s, t->seq);
	return q && session_seq_holds(s, q, (uint32_t)(p - s->arena.pages));
}

/*
 * How many slot units of @s should start leaving now: what waiting ops
 * need, and down to the watermarks (kswapd's hysteresis: below the low
 * one, reclaim to the high one).
 */
static uint64_t reclaim_goal(struct kvmemd_session *s)
{
	const struct kvmemd_config *c = &s->d->cfg;
	uint64_t free_units =
		s->arena.nunits - s->arena.used_bytes / KVMEM_SLOT_UNIT;
	uint64_t coming = free_units + s->arena.writing_units, goal = 0;
	uint64_t low = (uint64_t)s->arena.nunits * c->low_watermark / 100;
	uint64_t high = (uint64_t)s->arena.nunits * c->high_watermark / 100;

	if (free_units < low)
		s->reclaiming = 1;
	if (s->reclaiming && coming >= high)
		s->reclaiming = 0;
	if (s->reclaiming)
		goal = high - coming;
	if (s->want_units > s->arena.writing_units &&
	    s->want_units - s->arena.writing_units > goal)
		goal = s->want_units - s->arena.writing_units;
	return goal;
}

/* Start writes of @s's released pages: @goal units, or all of the
 * command's target when @forced. */
/* Order @s's movable pages (the command's target only, when @forced)
 * into s->victims. Return: how many. */
static uint32_t victims_build(struct kvmemd_session *s, int forced)
{
	struct kvmemd_tier *t = s->d->tier;
	struct victim *v;
	uint32_t i, n = 0, *order;

	s->nvictims = s->vpos = 0;
	v = malloc((size_t)s->arena.top_page * sizeof(*v) + 1);
	order = realloc(s->victims,
			(size_t)s->arena.top_page * sizeof(*order) + 1);
	if (!v || !order) {
		free(v);
		if (order)
			s->victims = order;
		return 0;
	}
	s->victims = order;
	for (i = 0; i < s->arena.top_page; i++) {
		const struct page *p = &s->arena.pages[i];

		if (!to_store(s, p) || slot_bytes(s, p->kind) > t->io_bytes)
			continue;
		if (forced && !in_target(s, p, &t->cmd.t))
			continue;
		v[n].key = session_victim_key(s, p);
		v[n].pg = i;
		n++;
	}
	qsort(v, n, sizeof(*v), victim_cmp);
	for (i = 0; i < n; i++)
		order[i] = v[i].pg;
	free(v);
	s->nvictims = n;
	s->victims_forced = (uint8_t)forced;
	s->victims_built = kvmemd_now_ns();
	return n;
}

/*
 * Start writes of @s's released pages: @goal units, or all of the
 * command's target when @forced. The order is built once and used until
 * it runs out or ages, not rebuilt for every I/O that completes; a page is
 * checked again before it goes.
 */
static void reclaim(struct kvmemd_session *s, uint64_t goal, int forced)
{
	struct kvmemd_tier *t = s->d->tier;
	uint32_t units, started = 0;
	struct kvmemd_io *io;
	int fresh = 0;

	/* Nothing can start while every I/O is in flight. */
	io = kvmemd_store_io_get(t->st);
	if (!io)
		return;
	kvmemd_store_io_put(t->st, io);
	if (s->vpos == s->nvictims || s->victims_forced != forced ||
	    kvmemd_now_ns() - s->victims_built > VICTIMS_TTL_NS) {
		if (!victims_build(s, forced)) {
			s->cmd_done = (uint8_t)forced;
			return;
		}
		fresh = 1;
	}
	for (;;) {
		for (; s->vpos < s->nvictims && (forced || goal); s->vpos++) {
			uint32_t pg = s->victims[s->vpos];
			const struct page *p = &s->arena.pages[pg];

			if (!to_store(s, p) ||
			    (forced && !in_target(s, p, &t->cmd.t)))
				continue;
			units = page_units(s, p);
			/* An FP16 page takes the room of several sealed ones:
			 * one that does not fit leaves the store open to the
			 * smaller pages after it. */
			if (!forced && units > store_room(t))
				continue;
			if (write_page(s, pg, forced))
				return;
			goal = goal > units ? goal - units : 0;
			started++;
		}
		/* An old order whose pages were all pinned since: once more
		 * from a fresh one. */
		if (started || fresh || s->vpos < s->nvictims)
			return;
		if (!victims_build(s, forced)) {
			s->cmd_done = (uint8_t)forced;
			return;
		}
		fresh = 1;
	}
}

/* The "offload" command is over: nothing left to start, nothing in
 * flight (or an error stopped it). */
static void cmd_finish(struct kvmemd *d)
{
	struct offload_cmd *c = &d->tier->cmd;
	double secs = (double)(kvmemd_now_ns() - c->started) / 1e9;
	struct jw w = { 0 };

	jw_open(&w, NULL, '{');
	jw_u64(&w, "pages", c->pages);
	jw_u64(&w, "bytes", c->bytes);
	jw_u64(&w, "errors", c->errors);
	jw_f64(&w, "seconds", secs);
	jw_f64(&w, "gbps", secs > 0 ? (double)c->bytes / secs / 1e9 : 0);
	jw_close(&w, '}');
	jw_end(&w);
	c->active = 0;
	c->waiter->reply(c->waiter, &w);
	jw_free(&w);
}

uint64_t kvmemd_tier_run(struct kvmemd *d, uint64_t now)
{
	struct kvmemd_tier *t = d->tier;
	struct kvmemd_session *s;
	uint64_t goal, next = kvmemd_archive_run(d, now);
	int cmd_busy = 0;

	if (!t)
		return next;
	/* While the loop polls rings it looks at the eventfd less often. */
	if (t->st) {
		kvmemd_store_io_reap(t->st);
		if (reloads_step(t))
			next = now;
	}
	for (s = d->sessions; s; s = s->next) {
		tier_gpu_pass(s);
		if (s->waits)
			kick(s);
		if (s->nprefetch)
			prefetch_step(s);
		/* Pages left to move, in this pass or the next. */
		if (tier_gpu_balance(s, now) || s->gpu_more)
			next = now;
		/* Ops wait with nothing in flight to wake them: look again
		 * soon rather than rely on the client ringing. */
		if ((s->waits || s->gpu_reclaiming) && !s->inflight)
			next = next < now + WAIT_POLL_NS ? next
							 : now + WAIT_POLL_NS;
	}
	if (!t->st)
		return next;
	for (s = d->sessions; s; s = s->next) {
		if (t->cmd.active && !t->cmd.errors && !s->cmd_done &&
		    (t->cmd.t.type == KVMEMD_TARGET_POOL ||
		     t->cmd.t.session == s->id)) {
			reclaim(s, 0, 1);
			cmd_busy |= !s->cmd_done;
			continue;
		}
		if (!d->cfg.offload || now < t->backoff_until)
			continue;
		goal = reclaim_goal(s);
		if (goal)
			reclaim(s, goal, 0);
	}
	if (t->cmd.active && !cmd_busy && !t->cmd.inflight)
		cmd_finish(d);
	kvmemd_store_io_submit(t->st);
	if (now < t->backoff_until && t->backoff_until < next)
		next = t->backoff_until;
	return next;
}

int kvmemd_tier_offload(struct kvmemd *d, const struct kvmemd_target *tg,
			struct kvmemd_waiter *waiter)
{
	struct kvmemd_tier *t = d->tier;
	struct kvmemd_session *s;
	uint32_t gen;

	if (t->cmd.active)
		return -EBUSY;
	gen = t->cmd.gen + 1 ? t->cmd.gen + 1 : 1;
	memset(&t->cmd, 0, sizeof(t->cmd));
	t->cmd.gen = gen;
	t->cmd.active = 1;
	t->cmd.waiter = waiter;
	t->cmd.t = *tg;
	t->cmd.started = kvmemd_now_ns();
	for (s = d->sessions; s; s = s->next) {
		s->cmd_done = 0;
		s->vpos = s->nvictims; /* a fresh order for the target */
	}
	return 0;
}

void kvmemd_tier_forget(struct kvmemd *d, struct kvmemd_waiter *waiter)
{
	struct kvmemd_tier *t = d->tier;

	/* The pages already on their way go on; no more are started. */
	if (t && t->cmd.active && t->cmd.waiter == waiter)
		t->cmd.active = 0;
}

/* ---- the operator's view ---------------------------------------------- */

/* Pages and bytes of slots: hot, warm, archive (warm, archived), cold. */
/* Pages and bytes by tier: hot, warm, archive (in host memory), cold (on
 * the store), gpu (in the GPU tier, whatever their kind). */
static void occupancy(const struct kvmemd *d, uint64_t pages[5],
		      uint64_t bytes[5])
{
	const struct kvmemd_session *s;
	uint32_t i;

	for (s = d->sessions; s; s = s->next) {
		for (i = 0; i < s->arena.top_page; i++) {
			const struct page *p = &s->arena.pages[i];
			int k;

			if (!resident(p) || p->dead)
				continue;
			k = arena_unit_gpu(&s->arena, p->unit)		    ? 4
			    : p->kind == KVMEM_SLOT_HOT			    ? 0
			    : s->arena.slots[p->unit].flags & SLOT_ARCHIVED ? 2
									    : 1;
			pages[k]++;
			bytes[k] += slot_bytes(s, p->kind);
		}
		pages[3] += s->arena.ncold;
		bytes[3] += s->arena.cold_bytes;
	}
}

void kvmemd_tier_stats_json(const struct kvmemd *d, struct jw *w)
{
	static const char *const names[5] = { "hot", "warm", "archive",
					      "cold", "gpu" };
	const struct kvmemd_tier *t = d->tier;
	const struct kvmemd_config *c = &d->cfg;
	uint64_t pages[5] = { 0 }, bytes[5] = { 0 };
	struct kvmemd_store_stats st;
	char uuid[40];
	int i;

	occupancy(d, pages, bytes);
	jw_open(w, "policy", '{');
	jw_bool(w, "offload", c->offload);
	jw_u64(w, "low_watermark", c->low_watermark);
	jw_u64(w, "high_watermark", c->high_watermark);
	jw_u64(w, "stale_tokens", c->stale_tokens);
	jw_u64(w, "archive_tokens", c->archive_tokens);
	jw_f64(w, "archive_heat", c->archive_heat);
	jw_f64(w, "bits_budget", c->bits_budget);
	jw_str(w, "archive_format",
	       c->archive_format == KVMEMD_ARCHIVE_SAME
		       ? "same"
		       : kvmem_format_get(c->archive_format)->name);
	jw_str(w, "archive_codec", kvmem_codec_get(c->archive_codec)->name);
	jw_u64(w, "archive_rate", c->archive_rate);
	jw_close(w, '}');
	jw_open(w, "tiers", '{');
	/* The GPU tier where there is a GPU pool. */
	for (i = 0; i < 4 + !!d->gpu.ops; i++) {
		jw_open(w, names[i], '{');
		jw_u64(w, "pages", pages[i]);
		jw_u64(w, "bytes", bytes[i]);
		jw_close(w, '}');
	}
	jw_close(w, '}');
	jw_u64(w, "offloads", t->offloads);
	jw_u64(w, "offload_bytes", t->offload_bytes);
	jw_u64(w, "reloads", t->reloads);
	jw_u64(w, "reload_bytes", t->reload_bytes);
	jw_u64(w, "reload_degraded", t->reload_bad);
	jw_u64(w, "reload_lost", t->reload_lost);
	jw_u64(w, "write_errors", t->write_errors);
	jw_u64(w, "read_errors", t->read_errors);
	jw_u64(w, "nospace", t->nospace);
	jw_u64(w, "waits", t->waits);
	kvmemd_archive_stats_json(d, w);
	if (!t->st) {
		jw_null(w, "store");
		return;
	}
	kvmemd_store_stats(t->st, &st);
	for (i = 0; i < 16; i++)
		snprintf(uuid + 2 * i + (i >= 4) + (i >= 6) + (i >= 8) +
				 (i >= 10),
			 3, "%02x", st.uuid[i]);
	for (i = 8; i <= 23; i += 5)
		uuid[i] = '-';
	jw_open(w, "store", '{');
	jw_str(w, "path", st.path);
	jw_str(w, "engine", st.engine);
	jw_str(w, "uuid", uuid);
	jw_u64(w, "generation", st.generation);
	jw_u64(w, "size", st.size);
	jw_u64(w, "unit_bytes", st.unit);
	jw_u64(w, "units", st.nunits);
	jw_u64(w, "used_units", st.used_units);
	jw_u64(w, "queue_depth", st.queue_depth);
	jw_u64(w, "io_bytes", st.io_bytes);
	jw_u64(w, "inflight", st.inflight);
	jw_u64(w, "reads", st.reads);
	jw_u64(w, "writes", st.writes);
	jw_u64(w, "read_bytes", st.read_bytes);
	jw_u64(w, "write_bytes", st.write_bytes);
	jw_u64(w, "read_errors", st.read_errors);
	jw_u64(w, "write_errors", st.write_errors);
	jw_u64(w, "enospc", st.enospc);
	jw_u64(w, "short", st.short_ios);
	jw_close(w, '}');
}
