/* SPDX-License-Identifier: MIT */
/*
 * record.c - the record of kept sessions, and each session's live record
 *
 * A record is a struct keep_hdr (magic, version, the sizes of the table
 * entries, the store's uuid, a generation, the body's length and CRC-32C,
 * its own CRC-32C) and, per session, a struct keep_rec, its top slots, its
 * top_page pages, per sequence a struct keep_seq and its page indices, and
 * the SQEs of the ops waiting (a live record's). resume.c writes one for
 * all sessions at a stop (sessions.kept) and reads both kinds at start;
 * see its header for what each is for.
 *
 * A live record is one session's, written after each loop iteration that
 * changed its tables or ring, on a worker, in turn to session-ID.0.rec
 * and .1.rec in the state directory: each over the last but one, in place
 * (not renamed over, so that the kernel writes back only what stays, and
 * a write cut short leaves the other whole), not fsynced (it guards
 * against a crash of kvmemd, whose writes the kernel keeps; the memfds it
 * describes do not outlive the machine either). The session's client sees
 * the SQ head and CQ tail a record has only once it is written. Slots and
 * store units freed since the copy for a record was taken wait for it
 * (arena.h: ->limbo; tier.c: held units), so that the daemon's own moves
 * write nothing a record a restart may take still names.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvmem/crc32c.h"
#include "kvmemd.h"
#include "record.h"

/* A session's live record: the one being written, and what it has. */
struct kvmemd_live {
	struct kvmemd_work work;
	struct kvmemd_session *s; /* NULL once the session is freed */
	/* Written in turn, each over its last-but-one record: a write cut
	 * short leaves the other whole. Overwritten in place, not renamed
	 * over, so that the kernel writes back only what stays. */
	char path[2][LIVE_PATH_MAX];
	uint64_t generation; /* of the record being written, or last */
	uint8_t *buf; /* the record being written */
	size_t len;
	int ret;
	uint8_t busy, dirty;
	uint8_t gone; /* the session ended for good: no record of it */
	uint32_t sq_head, cq_tail; /* the ring as the record has it */
	uint64_t changes; /* the arena's, as the record has them */
};

/* ---- the format --------------------------------------------------------- */

void *record_buf_add(struct record_buf *b, size_t n)
{
	size_t cap = b->cap;
	uint8_t *p;

	if (n > b->cap - b->len) {
		cap = 2 * cap > b->len + n ? 2 * cap : b->len + n;
		p = realloc(b->p, cap);
		if (!p)
			return NULL;
		b->p = p;
		b->cap = cap;
	}
	p = b->p + b->len;
	b->len += n;
	return p;
}

/* The bytes of @s's sequences in a record. */
static size_t seqs_bytes(const struct kvmemd_session *s)
{
	size_t n = 0;
	uint32_t i;

	for (i = 0; i < s->max_seqs; i++)
		if (s->seqs[i])
			n += sizeof(struct keep_seq) +
			     record_idx_bytes(s->seqs[i]->n);
	return n;
}

/* @s's sequences at @p: where they end. */
static uint8_t *seqs_put(uint8_t *p, const struct kvmemd_session *s, int live)
{
	const struct seq *q;
	struct keep_seq ks;
	uint32_t i;

	for (i = 0; i < s->max_seqs; i++) {
		q = s->seqs[i];
		if (!q)
			continue;
		/* An acquire still waiting is issued again. */
		ks = (struct keep_seq){ .id = q->id,
					.acquired = live && q->wait
							    ? 0
							    : q->acquired,
					.tokens = q->tokens,
					.n = q->n };
		memcpy(p, &ks, sizeof(ks));
		p += sizeof(ks);
		memset(p, 0, record_idx_bytes(q->n));
		if (q->n)
			memcpy(p, q->pages, q->n * sizeof(uint32_t));
		p += record_idx_bytes(q->n);
	}
	return p;
}

/*
 * @s's tables as they would be had no move started and no waiting
 * acquire been issued, in @sl and @pg (copies of its slots and pages);
 * its first free page to *@free_page.
 */
static void tables_settle(const struct kvmemd_session *s,
			  struct arena_saved_slot *sl, uint32_t nslots,
			  struct page *pg, uint32_t *free_page)
{
	const struct seq *q;
	struct page *p;
	uint32_t i, n;

	for (i = 0; i < nslots; i++)
		if (sl[i].slot.state == SLOT_LOADING ||
		    sl[i].slot.state == SLOT_ARCHIVING)
			sl[i].slot.state = SLOT_FREE;
	for (i = 0; i < s->arena.top_page; i++) {
		p = &pg[i];
		if (p->state == PAGE_UNUSED)
			continue;
		if (p->dead) {
			/* No sequence holds it: gone. */
			memset(p, 0, sizeof(*p));
			p->unit = NO_UNIT;
			p->next_free = *free_page;
			*free_page = i;
		} else if (p->state == PAGE_WRITING) {
			p->state = PAGE_RESIDENT;
		} else if (p->state == PAGE_READING &&
			   s->arena.slots[p->unit].state == SLOT_SEALED) {
			/* Back in its slot, its check under way: resident (a
			 * restart checks every sealed page again); its store
			 * units may be freed from now on. */
			p->state = PAGE_RESIDENT;
		} else if (p->state == PAGE_READING) {
			p->state = PAGE_COLD;
			p->unit = NO_UNIT;
		}
	}
	for (i = 0; i < s->max_seqs; i++) {
		q = s->seqs[i];
		for (n = 0; q && q->wait && n < q->n; n++)
			pg[q->pages[n]].pins--;
	}
}

int record_put(struct record_buf *b, const struct kvmemd_session *s,
	       uint64_t now, int live)
{
	const struct kvmemd_arena *a = &s->arena;
	const uint32_t nslots = arena_slot_count(a);
	const size_t slots = nslots * sizeof(struct arena_saved_slot);
	const size_t pages = (size_t)a->top_page * sizeof(struct page);
	struct arena_saved_slot *sl;
	const struct tier_wait *w;
	struct keep_rec *rec;
	uint8_t *p, *end;
	uint32_t u;
	size_t n;

	/* One size, reserved at once: a session's tables are copied once. */
	n = sizeof(*rec) + slots + pages + seqs_bytes(s) +
	    (live ? (s->nwaits + s->nredo) * sizeof(w->e) : 0);
	p = record_buf_add(b, n);
	if (!p)
		return -ENOMEM;
	end = p + n;
	rec = (struct keep_rec *)p;
	memset(rec, 0, sizeof(*rec));
	p += sizeof(*rec);
	/* Only the units that start a slot: the others say nothing. */
	sl = (struct arena_saved_slot *)p;
	for (u = 0, n = 0; n < nslots; u++) {
		if (a->slots[u].state == SLOT_NONE)
			continue;
		sl[n].unit = u;
		sl[n].resv = 0;
		sl[n++].slot = a->slots[u];
		u += a->slot_units[a->slots[u].kind] - 1;
	}
	if (pages)
		memcpy(p + slots, a->pages, pages);
	rec->free_page = a->free_page;
	if (live) {
		tables_settle(s, sl, nslots, (struct page *)(p + slots),
			      &rec->free_page);
		rec->nwaits = s->nwaits + s->nredo;
	}
	p = seqs_put(p + slots + pages, s, live);
	for (w = live ? s->waits : NULL; w; w = w->next) {
		memcpy(p, &w->e, sizeof(w->e));
		p += sizeof(w->e);
	}
	/* Those a crash left waiting, not issued again yet: still owed. */
	if (live && s->nredo) {
		memcpy(p, s->redo, s->nredo * sizeof(*s->redo));
		p += s->nredo * sizeof(*s->redo);
	}
	rec->id = s->id;
	rec->uid = (uint32_t)s->uid;
	rec->token = s->resume_token;
	rec->features = s->features;
	rec->g = s->g;
	rec->arch = s->arch;
	rec->arena_bytes = s->arena_bytes;
	rec->map_bytes = s->map_bytes;
	rec->sq_entries = s->sq_entries;
	rec->cq_entries = s->cq_entries;
	rec->top = a->top;
	rec->nslots = nslots;
	rec->top_page = a->top_page;
	rec->nseqs = s->nseqs;
	rec->seals = a->seals;
	rec->sq_head = s->sq_head;
	rec->cq_tail = s->cq_tail;
	rec->ops = s->ops;
	rec->op_errors = s->op_errors;
	rec->ce = s->ce;
	rec->ue = s->ue;
	rec->crc = s->crc;
	rec->offloads = s->offloads;
	rec->reloads = s->reloads;
	rec->offload_bytes = s->offload_bytes;
	rec->reload_bytes = s->reload_bytes;
	if (s->kept_until)
		rec->wait_ns = s->kept_until > now ? s->kept_until - now : 1;
	return p == end ? 0 : -EINVAL;
}

/* The header of a record of @size bytes at @buf: 0, or why not. */
int record_hdr_check(const uint8_t *buf, size_t size, struct keep_hdr *h,
		     char *why, size_t len)
{
	if (size < sizeof(*h)) {
		snprintf(why, len, "%zu bytes, shorter than its header", size);
		return -EINVAL;
	}
	memcpy(h, buf, sizeof(*h));
	if (memcmp(h->magic, KEEP_MAGIC, sizeof(KEEP_MAGIC)) ||
	    h->crc != kvmem_crc32c(0, buf, offsetof(struct keep_hdr, crc))) {
		snprintf(why, len, "not a record of kept sessions, or damaged");
		return -EINVAL;
	}
	if (h->version != KEEP_VERSION ||
	    h->rec_size != sizeof(struct keep_rec) ||
	    h->slot_size != sizeof(struct slot) ||
	    h->page_size != sizeof(struct page) ||
	    h->seq_size != sizeof(struct keep_seq)) {
		snprintf(why, len,
			 "written by another version of kvmemd (record %u, "
			 "this one reads %u)",
			 h->version, KEEP_VERSION);
		return -EPROTO;
	}
	if (h->body_bytes != size - sizeof(*h) ||
	    h->body_crc != kvmem_crc32c(0, buf + sizeof(*h), h->body_bytes)) {
		snprintf(why, len, "its sessions are cut short or damaged");
		return -EINVAL;
	}
	return 0;
}

/* ---- live records ------------------------------------------------------- */

/* The path of session @id's live record @n (0 or 1) to @buf. */
static int live_path(const struct kvmemd *d, uint32_t id, int n, char *buf)
{
	int len = snprintf(buf, LIVE_PATH_MAX,
			   "%s/" FD_PREFIX "%u.%d" LIVE_SUFFIX,
			   d->cfg.state_dir, id, n);

	return len > 0 && len < LIVE_PATH_MAX ? 0 : -ENAMETOOLONG;
}

static void live_unlink(struct kvmemd_live *l)
{
	unlink(l->path[0]);
	unlink(l->path[1]);
}

/* @s has a record kept current from now on, if the configuration says so:
 * its first is written at the next loop iteration, after @generation. */
void record_live_start(struct kvmemd_session *s, uint64_t generation)
{
	struct kvmemd_live *l;

	if (s->live || s->d->cfg.keep_on_crash != KVMEMD_YES)
		return;
	l = calloc(1, sizeof(*l));
	if (!l || live_path(s->d, s->id, 0, l->path[0]) ||
	    live_path(s->d, s->id, 1, l->path[1])) {
		kvmemd_log(LOG_WARNING,
			   "session %u: no record of it is kept while it runs "
			   "(%s): a crash of kvmemd would lose it",
			   s->id,
			   l ? "state directory path too long"
			     : "out of memory");
		free(l);
		return;
	}
	if (arena_limbo_on(&s->arena)) {
		kvmemd_log(LOG_WARNING,
			   "session %u: no record of it is kept while it runs "
			   "(its share of daemon memory is spent): a crash of "
			   "kvmemd would lose it",
			   s->id);
		free(l);
		return;
	}
	l->s = s;
	l->dirty = 1;
	l->generation = generation;
	s->pub_sq_head = s->sq_head;
	s->pub_cq_tail = s->cq_tail;
	s->live = l;
}

/* On a worker: the record, checksummed, over the older of the two. */
static void live_work(struct kvmemd_work *w)
{
	struct kvmemd_live *l = (struct kvmemd_live *)w;
	struct keep_hdr *h = (struct keep_hdr *)l->buf;

	h->body_crc = kvmem_crc32c(0, l->buf + sizeof(*h), h->body_bytes);
	h->crc = kvmem_crc32c(0, h, offsetof(struct keep_hdr, crc));
	l->ret = kvmemd_file_replace(l->path[l->generation & 1], l->buf, l->len,
				     0);
}

/* One line each for a few sessions: a state directory that takes no
 * record refuses every session's. */
static struct kvmemd_ratelimit live_log;

/* A session whose record cannot be written runs without one: its client
 * sees all at once, as without daemon.keep_on_crash. */
static void live_stop(struct kvmemd_session *s, int err)
{
	struct kvmemd_live *l = s->live;

	kvmemd_log_rl(&live_log, "records that could not be written", LOG_ERR,
		      "session %u: writing its record %s: %s; it runs without "
		      "one, and a crash of kvmemd would lose it",
		      s->id, l->path[l->generation & 1], strerror(-err));
	live_unlink(l);
	s->live = NULL;
	free(l);
	arena_limbo_off(&s->arena);
	tier_held_drop(s);
	/* Without a record, the client sees all there is. */
	s->pub_sq_head = s->sq_head;
	s->pub_cq_tail = s->cq_tail;
	if (s->nwaits)
		tier_retry(s);
	session_publish(s);
}

/* On the loop, once the record is written: the client sees what it has. */
static void live_done(struct kvmemd_work *w)
{
	struct kvmemd_live *l = (struct kvmemd_live *)w;
	struct kvmemd_session *s = l->s;

	free(l->buf);
	l->buf = NULL;
	l->busy = 0;
	if (l->gone)
		live_unlink(l);
	if (!s) {
		free(l);
		return;
	}
	if (l->gone)
		return;
	if (l->ret) {
		live_stop(s, l->ret);
		return;
	}
	s->pub_sq_head = l->sq_head;
	s->pub_cq_tail = l->cq_tail;
	arena_limbo_clear(&s->arena);
	tier_held_clear(s);
	if (s->nwaits)
		tier_retry(s);
	session_publish(s);
}

/* The whole record of @s to l->buf: its checksums are the worker's. */
static int live_image(struct kvmemd_session *s, struct kvmemd_live *l)
{
	struct record_buf b = { 0 };
	struct keep_hdr *h;
	int ret;

	/* The header's room first: filled in once the body is there. */
	if (!record_buf_add(&b, sizeof(*h)))
		return -ENOMEM;
	ret = record_put(&b, s, kvmemd_now_ns(), 1);
	if (ret) {
		free(b.p);
		return ret;
	}
	h = (struct keep_hdr *)b.p;
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, KEEP_MAGIC, sizeof(KEEP_MAGIC));
	h->version = KEEP_VERSION;
	h->nsessions = 1;
	h->rec_size = sizeof(struct keep_rec);
	h->slot_size = sizeof(struct slot);
	h->page_size = sizeof(struct page);
	h->seq_size = sizeof(struct keep_seq);
	kvmemd_tier_store_uuid(s->d, h->store_uuid);
	h->generation = l->generation + 1;
	h->body_bytes = b.len - sizeof(*h);
	l->buf = b.p;
	l->len = b.len;
	return 0;
}

/*
 * The copy of @s for its next record, to l->buf: what it has noted, and
 * the slots and store units freed until now held for it. 0, or the
 * session runs without a record (live_stop()).
 */
static int live_take(struct kvmemd_session *s, struct kvmemd_live *l)
{
	int ret = live_image(s, l);

	if (ret) {
		live_stop(s, ret);
		return ret;
	}
	arena_limbo_mark(&s->arena);
	tier_held_mark(s);
	l->sq_head = s->sq_head;
	l->cq_tail = s->cq_tail;
	l->changes = s->arena.changes;
	l->generation++;
	l->dirty = 0;
	l->ret = 0;
	l->busy = 1;
	return 0;
}

void record_live_write(struct kvmemd_session *s)
{
	struct kvmemd_live *l = s->live;

	/* A seal being checked is in the next one. */
	if (l->busy || l->gone || s->checking ||
	    (!l->dirty && s->sq_head == l->sq_head &&
	     s->cq_tail == l->cq_tail && s->arena.changes == l->changes))
		return;
	if (live_take(s, l))
		return;
	l->work.fn = live_work;
	l->work.done = live_done;
	if (kvmemd_workers_push(s->d->workers, &l->work)) {
		l->busy = 0;
		free(l->buf);
		l->buf = NULL;
		l->generation--;
		l->dirty = 1;
	}
}

/*
 * @s's first live record, written now: until there is one, a crash would
 * lose it (the record of a stop it came from is removed once it serves).
 * A new session's tables are empty, a kept one's are read at start.
 */
void record_live_first(struct kvmemd_session *s)
{
	struct kvmemd_live *l = s->live;

	if (!l || live_take(s, l))
		return;
	live_work(&l->work);
	live_done(&l->work);
}

void kvmemd_record_forget(struct kvmemd_session *s)
{
	struct kvmemd_live *l = s->live;

	if (!l)
		return;
	s->live = NULL;
	arena_limbo_off(&s->arena);
	tier_held_drop(s);
	if (l->busy) {
		l->s = NULL;
		return;
	}
	free(l);
}

void record_live_end(struct kvmemd_session *s)
{
	struct kvmemd_live *l = s->live;

	if (!l)
		return;
	/* A write in flight would put it back: gone after it. */
	l->gone = 1;
	if (!l->busy)
		live_unlink(l);
}

/* ---- reading live records ----------------------------------------------- */

/* Is @name a live record's ("session-ID.N.rec")? Its session's ID, or 0. */
uint32_t record_live_name(const char *name)
{
	unsigned long id;
	char *end;

	if (strncmp(name, FD_PREFIX, strlen(FD_PREFIX)))
		return 0;
	errno = 0;
	id = strtoul(name + strlen(FD_PREFIX), &end, 10);
	if (errno || !id || id > UINT32_MAX ||
	    (strcmp(end, ".0" LIVE_SUFFIX) && strcmp(end, ".1" LIVE_SUFFIX)))
		return 0;
	return (uint32_t)id;
}

/* The SQ head and CQ tail the record @b (whole: record_hdr_check()) of one
 * session has; and that session's ID. */
static void rec_heads(const uint8_t *b, uint32_t heads[2])
{
	struct keep_rec rec;

	memcpy(&rec, b + sizeof(struct keep_hdr), sizeof(rec));
	heads[0] = rec.sq_head;
	heads[1] = rec.cq_tail;
}

static uint32_t rec_id(const uint8_t *b)
{
	struct keep_rec rec;

	memcpy(&rec, b + sizeof(struct keep_hdr), sizeof(rec));
	return rec.id;
}

/* What a live record must be to be taken back. */
struct live_want {
	uint32_t id;
	const uint32_t *ring; /* the SQ head and CQ tail its client saw */
};

/* kvmemd_file_pair_read()'s check of a live record: whole, of session
 * w->id alone, at the ring position its client saw. */
static int live_check(const uint8_t *buf, size_t size, void *ctx,
		      uint64_t *generation, char *why, size_t len)
{
	const struct live_want *w = ctx;
	struct keep_hdr h;
	uint32_t heads[2];

	if (record_hdr_check(buf, size, &h, why, len))
		return -EINVAL;
	if (h.nsessions != 1 || h.body_bytes < sizeof(struct keep_rec) ||
	    rec_id(buf) != w->id) {
		snprintf(why, len, "not the record of session %u alone", w->id);
		return -EINVAL;
	}
	rec_heads(buf, heads);
	if (heads[0] != w->ring[0] || heads[1] != w->ring[1]) {
		snprintf(why, len,
			 "SQ head %u and CQ tail %u, where its client saw %u "
			 "and %u",
			 heads[0], heads[1], w->ring[0], w->ring[1]);
		return -ESTALE;
	}
	*generation = h.generation;
	return 0;
}

/*
 * Session @id's live record that its client saw last, read into *@buf
 * (*@size bytes), its path to @path: of its two records (each written over
 * the last but one), the newer whole one whose SQ head and CQ tail are
 * those its ring shows, @ring (a record written but not yet shown to the
 * client when kvmemd died is not the one to take: the client may have
 * given its ops up). 0, or -ENOENT (said in the log when a record is
 * there).
 */
int record_live_read(struct kvmemd *d, uint32_t id, const uint32_t ring[2],
		     char *path, uint8_t **buf, size_t *size)
{
	char p[2][LIVE_PATH_MAX];
	const char *const paths[2] = { p[0], p[1] };
	struct live_want w = { .id = id, .ring = ring };
	struct kvmemd_file_pair r;
	int i;

	for (i = 0; i < 2; i++)
		if (live_path(d, id, i, p[i]))
			return -ENOENT;
	if (kvmemd_file_pair_read(paths, live_check, &w, &r)) {
		if (r.present[0] || r.present[1])
			kvmemd_log(LOG_ERR,
				   "session %u: neither of its records is one "
				   "to take back (%s: %s; %s: %s)",
				   id, p[0], r.why[0], p[1], r.why[1]);
		return -ENOENT;
	}
	*buf = r.buf;
	*size = r.size;
	memcpy(path, p[r.which], LIVE_PATH_MAX);
	return 0;
}
