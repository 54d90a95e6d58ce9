/*
 * resume.c - sessions kept across a restart of kvmemd
 *
 * A kvmemd that stops (SIGTERM, SIGINT) under systemd, with a descriptor
 * store (FileDescriptorStoreMax= in the unit) and daemon.keep_sessions,
 * keeps every session that asked for KVMEM_FEAT_RESUME and holds no GPU
 * memory: it runs what the client submitted, cancels what still waits,
 * lets the session's store I/O end, hands its memfd to the store
 * ("FDSTORE=1", FDNAME=session-ID) and writes its tables to the record,
 * STATE_DIR/sessions.kept (a new file, fsynced, renamed over the old):
 *
 *   struct keep_hdr     magic, version, the sizes of the table entries, the
 *                       store's uuid, the body's length and CRC-32C, and
 *                       its own CRC-32C
 *   per session         struct keep_rec, its top slots (struct slot), its
 *                       top_page pages (struct page), then per sequence a
 *                       struct keep_seq and the indices of its pages
 *
 * The next kvmemd gets the memfds back from systemd (LISTEN_FDNAMES), reads
 * the record once and removes it. A record that does not verify (CRC,
 * version, entry sizes, length) is refused whole; a session whose tables
 * do not hold together (an index out of range, a page held more or less
 * often than it says, store units not free, a store that is not the one
 * its pages went to) or that no longer fits the configuration is refused
 * alone. Either way a sentence goes to the log and nothing of it is
 * served. A descriptor with no record (kvmemd was killed, or the record
 * was lost) is closed. Every sealed page of a session taken back is then
 * checked as at its seal: header from the record, every word, the CRC.
 *
 * With daemon.keep_on_crash, each such session also has a record of its
 * own in the same format, kept current while it runs: once a loop
 * iteration, a session whose tables or ring moved has its tables copied
 * and written on a worker, in turn to STATE_DIR/session-ID.0.rec and
 * .1.rec (each over its last-but-one record, in place: a write cut short
 * leaves the other whole; not fsynced: it guards against a crash of
 * kvmemd, whose writes the kernel keeps, and the memfds it describes do
 * not outlive the machine either), and its client sees the SQ head and
 * CQ tail of that record only once it is written. So whatever the client
 * learnt of is in the record, and what it did not stays in its ring: after
 * a kill -9 the next kvmemd takes the memfd back with the newer whole
 * record whose SQ head and CQ tail the ring shows (one written but not
 * yet shown may hold ops whose callers were told they failed), as after
 * a stop, runs again the ops the record did not have, and issues again
 * those it says were waiting. A copy shows each move under way as if it had not
 * started (a page on its way to the store resident, one on its way back
 * cold, an archived copy not made) and each acquire still waiting as not
 * issued. Slots and store extents freed since the copy are not written by
 * the daemon's own moves until a record that no longer names them is
 * written (arena.h: ->limbo; tier.c: held units), so a page moved after
 * the record is still where it says. A page that does not match it all
 * the same is lost (kvmemd_ras_verify()): erased and reported, never
 * served as good.
 *
 * A kept session waits, counted in the pool, for a hello that names it
 * with its token and comes from its uid, for daemon.resume_seconds; then
 * it is freed. The tables are the daemon's own structures as they are in
 * memory, so a kvmemd whose structures differ (another version) refuses
 * the record.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvmem/crc32c.h"
#include "kvmemd.h"
#include "session.h"

#define KEEP_FILE "sessions.kept"
#define KEEP_MAGIC "KVMKEEP"
#define KEEP_VERSION 2
#define FD_PREFIX "session-"
#define LIVE_SUFFIX ".rec"
#define LIVE_PATH_MAX 320
/*
 * How long a stopping kvmemd runs what its sessions submitted, all of them
 * together (what is left is the next kvmemd's), and how long it waits for
 * their store I/O: with the record written, well within the unit's
 * TimeoutStopSec= (30 s), past which systemd kills it and every session
 * is lost.
 */
#define KEEP_RUN_NS (2ull * 1000000000ull)
#define QUIESCE_NS (10ull * 1000000000ull)
/* Descriptors systemd may pass back: one a session, and some over. */
#define MAX_PASSED 65600

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
_Static_assert(sizeof(struct slot) % 8 == 0, "slot padded");
_Static_assert(sizeof(struct page) % 8 == 0, "page padded");

struct passed {
	uint32_t id;
	int fd;
};

struct kvmemd_resume {
	struct kvmemd_session *kept; /* waiting for their clients */
	struct passed *fds; /* from systemd, not yet claimed by a record */
	uint32_t nfds, cap;
	/* what kvmemd_resume_commit() takes out of systemd's store */
	char (*names)[24];
	uint32_t nnames, names_cap;
	int record_read; /* and removes */
	struct kvmemd_resume_counts n; /* at start */
};

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

struct kvmemd_keep {
	struct kvmemd *d;
	FILE *body;
	char *buf;
	size_t len;
	uint32_t n;
	uint8_t store_uuid[16];
	int store_err; /* the descriptor store refused one: no more tries */
	uint64_t run_until; /* for the sessions' submitted ops to run */
	uint64_t deadline; /* for the sessions' store I/O to end */
};

static struct kvmemd_resume *state(struct kvmemd *d)
{
	if (!d->resume)
		d->resume = calloc(1, sizeof(*d->resume));
	return d->resume;
}

static int record_path(const struct kvmemd *d, const char *suffix, char *buf,
		       size_t len)
{
	int n = snprintf(buf, len, "%s/%s%s", d->cfg.state_dir, KEEP_FILE,
			 suffix);

	return n > 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

int kvmemd_resume_on(const struct kvmemd *d)
{
	const char *n = getenv("NOTIFY_SOCKET");

	return d->cfg.keep_sessions == KVMEMD_YES && n && *n;
}

/* ---- the live record ------------------------------------------------- */

static int write_all(int fd, const void *buf, size_t len);
static int session_put(FILE *f, const struct kvmemd_session *s, uint64_t now,
		       int live);

/* The path of session @id's live record @n (0 or 1) to @buf. */
static int live_path(const struct kvmemd *d, uint32_t id, int n, char *buf)
{
	int len = snprintf(buf, LIVE_PATH_MAX, "%s/" FD_PREFIX "%u.%d" LIVE_SUFFIX,
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
static void live_start(struct kvmemd_session *s, uint64_t generation)
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
			   s->id, l ? "state directory path too long"
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
	struct stat st;
	int fd;

	h->body_crc = kvmem_crc32c(0, l->buf + sizeof(*h), h->body_bytes);
	h->crc = kvmem_crc32c(0, h, offsetof(struct keep_hdr, crc));
	fd = open(l->path[l->generation & 1], O_WRONLY | O_CREAT | O_CLOEXEC,
		  0600);
	if (fd < 0) {
		l->ret = -errno;
		return;
	}
	l->ret = write_all(fd, l->buf, l->len);
	if (!l->ret && !fstat(fd, &st) && (uint64_t)st.st_size > l->len &&
	    ftruncate(fd, (off_t)l->len))
		l->ret = -errno;
	if (close(fd) && !l->ret)
		l->ret = -errno;
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
	struct keep_hdr h;
	size_t len = 0;
	char *buf = NULL;
	FILE *f = open_memstream(&buf, &len);
	int ret;

	if (!f)
		return -ENOMEM;
	memset(&h, 0, sizeof(h));
	fwrite(&h, sizeof(h), 1, f);
	ret = session_put(f, s, kvmemd_now_ns(), 1);
	if (fclose(f) || ret) {
		free(buf);
		return -ENOMEM;
	}
	memcpy(h.magic, KEEP_MAGIC, sizeof(KEEP_MAGIC));
	h.version = KEEP_VERSION;
	h.nsessions = 1;
	h.rec_size = sizeof(struct keep_rec);
	h.slot_size = sizeof(struct slot);
	h.page_size = sizeof(struct page);
	h.seq_size = sizeof(struct keep_seq);
	kvmemd_tier_store_uuid(s->d, h.store_uuid);
	h.generation = l->generation + 1;
	h.body_bytes = len - sizeof(h);
	memcpy(buf, &h, sizeof(h));
	l->buf = (uint8_t *)buf;
	l->len = len;
	return 0;
}

static void live_write(struct kvmemd_session *s)
{
	struct kvmemd_live *l = s->live;
	int ret;

	/* A seal being checked, or an op waiting for its CQE, is in the
	 * next one. */
	if (l->busy || l->gone || s->checking ||
	    (!l->dirty && s->sq_head == l->sq_head &&
	     s->cq_tail == l->cq_tail && s->arena.changes == l->changes))
		return;
	ret = live_image(s, l);
	if (ret) {
		live_stop(s, ret);
		return;
	}
	arena_limbo_mark(&s->arena);
	tier_held_mark(s);
	l->sq_head = s->sq_head;
	l->cq_tail = s->cq_tail;
	l->changes = s->arena.changes;
	l->generation++;
	l->dirty = 0;
	l->ret = 0;
	l->work.fn = live_work;
	l->work.done = live_done;
	l->busy = 1;
	ret = kvmemd_workers_push(s->d->workers, &l->work);
	if (ret) {
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
static void live_first(struct kvmemd_session *s)
{
	struct kvmemd_live *l = s->live;
	int ret;

	if (!l)
		return;
	ret = live_image(s, l);
	if (ret) {
		live_stop(s, ret);
		return;
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
	live_work(&l->work);
	live_done(&l->work);
}

void kvmemd_resume_record(struct kvmemd *d)
{
	struct kvmemd_session *s;

	for (s = d->sessions; s; s = s->next)
		if (s->live)
			live_write(s);
	for (s = d->resume ? d->resume->kept : NULL; s; s = s->kept_next)
		if (s->live)
			live_write(s);
}

void kvmemd_resume_forget(struct kvmemd_session *s)
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

void kvmemd_resume_track(struct kvmemd_session *s)
{
	char msg[64];
	int ret;

	if (s->stored || !(s->features & KVMEM_FEAT_RESUME))
		return;
	snprintf(msg, sizeof(msg), "FDSTORE=1\nFDNAME=" FD_PREFIX "%u", s->id);
	ret = kvmemd_notify_fd(msg, s->r.fd);
	if (ret)
		kvmemd_log_err(LOG_WARNING, ret,
			       "session %u: its memfd is not in the descriptor "
			       "store (is FileDescriptorStoreMax= set?); a "
			       "crash of kvmemd would lose it",
			       s->id);
	s->stored = !ret;
	if (s->stored) {
		live_start(s, 0);
		live_first(s);
	}
}

void kvmemd_resume_untrack(struct kvmemd_session *s)
{
	struct kvmemd_live *l = s->live;
	char msg[64];

	if (l) {
		/* A write in flight would put it back: gone after it. */
		l->gone = 1;
		if (!l->busy)
			live_unlink(l);
	}
	if (!s->stored)
		return;
	snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=" FD_PREFIX "%u",
		 s->id);
	kvmemd_notify_fd(msg, -1);
	s->stored = 0;
}

/* ---- at start --------------------------------------------------------- */

int kvmemd_resume_fd(struct kvmemd *d, const char *name, int fd)
{
	struct kvmemd_resume *r;
	unsigned long id;
	struct passed *p;
	char *end;

	if (strncmp(name, FD_PREFIX, strlen(FD_PREFIX)))
		return 0;
	errno = 0;
	id = strtoul(name + strlen(FD_PREFIX), &end, 10);
	r = state(d);
	/* Out of systemd's store once this daemon serves (it would pass
	 * them again at every start), but for the sessions taken back. */
	if (r && r->nnames == r->names_cap && r->nnames < MAX_PASSED) {
		uint32_t cap = r->names_cap ? 2 * r->names_cap : 16;
		char(*names)[24] = realloc(r->names, cap * sizeof(*names));

		if (names) {
			r->names = names;
			r->names_cap = cap;
		}
	}
	if (r && r->nnames < r->names_cap && strlen(name) < sizeof(r->names[0]))
		strcpy(r->names[r->nnames++], name);
	if (*end || errno || !id || id > UINT32_MAX || !r ||
	    r->nfds >= MAX_PASSED) {
		kvmemd_log(LOG_WARNING,
			   "passed descriptor %s: not kept, closed", name);
		close(fd);
		return 1;
	}
	if (r->nfds == r->cap) {
		uint32_t cap = r->cap ? 2 * r->cap : 16;

		p = realloc(r->fds, cap * sizeof(*p));
		if (!p) {
			close(fd);
			return 1;
		}
		r->fds = p;
		r->cap = cap;
	}
	r->fds[r->nfds++] = (struct passed){ .id = (uint32_t)id, .fd = fd };
	return 1;
}

/* The kept memfd of session @id, taken from the list, or -1. */
static int fd_take(struct kvmemd_resume *r, uint32_t id)
{
	uint32_t i;
	int fd;

	for (i = 0; i < r->nfds; i++)
		if (r->fds[i].id == id) {
			fd = r->fds[i].fd;
			r->fds[i] = r->fds[--r->nfds];
			return fd;
		}
	return -1;
}

static void fds_close(struct kvmemd_resume *r, const char *why)
{
	r->n.refused += r->nfds;
	if (r->nfds)
		kvmemd_log(LOG_WARNING,
			   "%u kept session memfds passed back %s: closed",
			   r->nfds, why);
	while (r->nfds)
		close(r->fds[--r->nfds].fd);
}

/* Bounds-checked reads of the record's body. */
struct cursor {
	const uint8_t *p;
	size_t left;
};

static const void *take(struct cursor *c, uint64_t n)
{
	const void *p = c->p;

	if (n > c->left)
		return NULL;
	c->p += n;
	c->left -= n;
	return p;
}

/*
 * @s is not taken back: the store units its cold pages before @end
 * claimed go back, and the other cold pages go without theirs, so that
 * kvmemd_session_free() frees no units they never claimed.
 */
static void unclaim(struct kvmemd_session *s, uint32_t end)
{
	uint32_t pg;

	for (pg = 0; pg < s->arena.top_page; pg++) {
		if (s->arena.pages[pg].state != PAGE_COLD)
			continue;
		if (pg < end)
			tier_page_drop(s, pg);
		else
			arena_page_free(&s->arena, pg);
	}
}

/* Is page @pg of @s, resident or cold (arena_restore()), what @refs and
 * @pins (counted from its sequences) say? Cold, it claims its store
 * units. */
static int page_ok(struct kvmemd_session *s, uint32_t pg, uint32_t refs,
		   uint32_t pins, int store_ok)
{
	const struct page *p = &s->arena.pages[pg];

	if (p->state == PAGE_UNUSED)
		return !refs;
	if (p->refs != refs || p->pins != pins || !refs)
		return 0;
	/* Pinned pages are resident (acquires still waiting were
	 * cancelled before the record was written). */
	if (pins && p->state != PAGE_RESIDENT)
		return 0;
	return p->state == PAGE_RESIDENT || (store_ok && !tier_claim(s, pg));
}

/* @s->arena.pages as the record has them, the sequences restored: each
 * held as often as they say. */
static int pages_check(struct kvmemd_session *s, int store_ok, char *why,
		       size_t len)
{
	uint32_t pg, i, n, *refs, *pins;
	const struct seq *q;
	int ret = -EINVAL;

	refs = calloc(s->arena.top_page + 1, sizeof(*refs));
	pins = calloc(s->arena.top_page + 1, sizeof(*pins));
	if (!refs || !pins) {
		free(refs);
		free(pins);
		unclaim(s, 0);
		snprintf(why, len, "out of memory");
		return -ENOMEM;
	}
	for (i = 0; i < s->max_seqs; i++) {
		q = s->seqs[i];
		for (n = 0; q && n < q->n; n++) {
			refs[q->pages[n]]++;
			pins[q->pages[n]] += q->acquired;
		}
	}
	for (pg = 0; pg < s->arena.top_page; pg++)
		if (!page_ok(s, pg, refs[pg], pins[pg], store_ok))
			break;
	if (pg < s->arena.top_page) {
		snprintf(why, len, "page %u does not hold together%s", pg,
			 store_ok ? ""
				  : " (or the store is not the one it left "
				    "for)");
		unclaim(s, pg);
		goto out;
	}
	ret = 0;
out:
	free(refs);
	free(pins);
	return ret;
}

/* One session of the record: where its parts are. */
struct kept {
	const struct keep_rec *rec;
	const struct slot *slots;
	const struct page *pages;
	struct cursor seqs; /* nseqs of struct keep_seq, each with its pages */
	const struct kvmem_sqe *waits; /* [rec->nwaits] */
};

/* Index arrays are padded to 8 bytes, so that what follows is aligned. */
static uint64_t idx_bytes(uint32_t n)
{
	return ((uint64_t)n * sizeof(uint32_t) + 7) & ~(uint64_t)7;
}

/* The next session of the record from @c: 0, or -EINVAL when the record
 * is cut short. */
static int kept_parse(struct cursor *c, struct kept *k)
{
	const struct keep_seq *ks;
	const uint8_t *start;
	uint32_t i;

	k->rec = take(c, sizeof(*k->rec));
	if (!k->rec)
		return -EINVAL;
	k->slots = take(c, (uint64_t)k->rec->top * sizeof(struct slot));
	k->pages = take(c, (uint64_t)k->rec->top_page * sizeof(struct page));
	if (!k->slots || !k->pages)
		return -EINVAL;
	start = c->p;
	for (i = 0; i < k->rec->nseqs; i++) {
		ks = take(c, sizeof(*ks));
		if (!ks || !take(c, idx_bytes(ks->n)))
			return -EINVAL;
	}
	k->seqs = (struct cursor){ .p = start, .left = (size_t)(c->p - start) };
	k->waits = take(c, (uint64_t)k->rec->nwaits * sizeof(*k->waits));
	return k->waits ? 0 : -EINVAL;
}

/* The tables of @k into @s, set up on its memfd: 0, or why not. */
static int tables_load(struct kvmemd_session *s, const struct kept *k,
		       int store_ok, char *why, size_t len)
{
	const struct keep_rec *rec = k->rec;
	const struct arena_saved saved = {
		.slots = k->slots,
		.pages = k->pages,
		.top = rec->top,
		.top_page = rec->top_page,
		.free_page = rec->free_page,
		.seals = rec->seals,
	};
	struct cursor c = k->seqs;
	const struct keep_seq *ks;
	const uint32_t *idx;
	uint32_t i;
	int ret;

	ret = arena_restore(&s->arena, &saved, s->arch.size != 0, why, len);
	if (ret)
		return ret;
	for (i = 0; i < rec->nseqs; i++) {
		ks = take(&c, sizeof(*ks));
		idx = take(&c, idx_bytes(ks->n));
		ret = session_seq_restore(s, ks->id, (int)ks->acquired,
					  ks->tokens, idx, ks->n);
		if (ret) {
			snprintf(why, len, "sequence %u does not hold together",
				 ks->id);
			unclaim(s, 0);
			return ret;
		}
	}
	return pages_check(s, store_ok, why, len);
}

static int layout_same(const struct kvmem_page_layout *a,
		       const struct kvmem_page_layout *b)
{
	return a->size == b->size && a->scales_off == b->scales_off &&
	       a->k_off == b->k_off && a->v_off == b->v_off &&
	       a->checks_off == b->checks_off && a->nchecks == b->nchecks &&
	       a->row_words == b->row_words && a->row_bytes == b->row_bytes &&
	       a->scale_words == b->scale_words && a->format == b->format &&
	       a->codec == b->codec;
}

/*
 * The session @k: on d->resume->kept, checked, or freed and why not in
 * @why.
 */
static int session_load(struct kvmemd *d, const struct kept *k, int store_ok,
			uint64_t generation, char *why, size_t len)
{
	const struct keep_rec *rec = k->rec;
	struct kvmemd_resume *r = d->resume;
	struct kvmem_hello h = {
		.magic = KVMEM_HELLO_MAGIC,
		.abi_version = KVMEM_ABI_VERSION,
		.size = sizeof(h),
		.features = rec->features,
		.geometry = rec->g,
		.quota_bytes = rec->arena_bytes,
		.sq_entries = rec->sq_entries,
		.cq_entries = rec->cq_entries,
	};
	struct kvmem_welcome w = { 0 };
	struct kvmemd_session *s;
	int fd = fd_take(r, rec->id), ret;
	uint64_t wait;

	if (fd < 0) {
		snprintf(why, len, "its memfd did not come back");
		return -ENOENT;
	}
	/* Its tenant is its client's, once the client takes it back. */
	ret = kvmemd_session_new(d, &h, rec->uid, rec->uid, 0, &w, &s);
	if (ret) {
		close(fd);
		snprintf(why, len, "%s", w.message);
		return ret;
	}
	if (s->map_bytes != rec->map_bytes) {
		close(fd);
		kvmemd_session_free(s);
		snprintf(why, len,
			 "this kvmemd would lay its memory out "
			 "otherwise");
		return -EINVAL;
	}
	s->id = rec->id;
	s->resume_token = rec->token;
	/* Its memfd came from the store, and stays there. */
	s->stored = 1;
	s->kept_generation = generation;
	/* Archived pages are in the layout they were archived in: the
	 * record's format and codec, laid out as the geometry says. */
	memset(&s->arch, 0, sizeof(s->arch));
	if (rec->arch.size &&
	    (kvmem_page_layout_as(&s->g, rec->arch.format, rec->arch.codec,
				  &s->arch) ||
	     !layout_same(&s->arch, &rec->arch))) {
		close(fd);
		kvmemd_session_free(s);
		snprintf(why, len,
			 "its archive layout is not one of its "
			 "geometry");
		return -EINVAL;
	}
	ret = kvmemd_session_adopt(s, fd, why, len);
	if (!ret)
		ret = tables_load(s, k, store_ok, why, len);
	if (ret) {
		kvmemd_session_free(s);
		return ret;
	}
	s->sq_head = rec->sq_head;
	s->cq_tail = rec->cq_tail;
	s->ops = rec->ops;
	s->op_errors = rec->op_errors;
	s->ce = rec->ce;
	s->ue = rec->ue;
	s->crc = rec->crc;
	s->offloads = rec->offloads;
	s->reloads = rec->reloads;
	s->offload_bytes = rec->offload_bytes;
	s->reload_bytes = rec->reload_bytes;
	if (rec->nwaits) {
		/* Room for their CQEs was reserved: no more than the CQ. */
		s->redo = rec->nwaits <= s->cq_entries
				  ? malloc(rec->nwaits * sizeof(*s->redo))
				  : NULL;
		if (!s->redo) {
			kvmemd_session_free(s);
			snprintf(why, len, "its %u waiting ops do not fit",
				 rec->nwaits);
			return -ENOMEM;
		}
		memcpy(s->redo, k->waits, rec->nwaits * sizeof(*s->redo));
		s->nredo = rec->nwaits;
	}
	/* What the record has is what the client may see (a record
	 * written before a crash may be ahead of what it saw). */
	s->pub_sq_head = s->sq_head;
	s->pub_cq_tail = s->cq_tail;
	session_publish(s);
	kvmemd_ras_verify(s, generation != 0);
	if (s->id > d->next_session)
		d->next_session = s->id;
	/* A session kept again before its client came back waits no
	 * longer in all than it would have without the restart. */
	wait = (uint64_t)d->cfg.resume_seconds * 1000000000ull;
	if (rec->wait_ns && rec->wait_ns < wait)
		wait = rec->wait_ns;
	s->kept_until = kvmemd_now_ns() + wait;
	s->kept_next = r->kept;
	r->kept = s;
	return 0;
}

/* The header of a record of @size bytes at @buf: 0, or why not. */
static int hdr_check(const uint8_t *buf, size_t size, struct keep_hdr *h,
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

/* The whole of @path: 0 with *@buf (malloc'ed) and *@size, or -errno. */
static int slurp(const char *path, uint8_t **buf, size_t *size)
{
	struct stat st;
	ssize_t n;
	size_t got = 0;
	int fd, ret = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) || st.st_size < 0 ||
	    (uint64_t)st.st_size > SIZE_MAX / 2) {
		close(fd);
		return -EINVAL;
	}
	*buf = malloc((size_t)st.st_size + 1);
	if (!*buf) {
		close(fd);
		return -ENOMEM;
	}
	while (got < (size_t)st.st_size) {
		n = read(fd, *buf + got, (size_t)st.st_size - got);
		if (n <= 0) {
			ret = n < 0 ? -errno : -EIO;
			break;
		}
		got += (size_t)n;
	}
	close(fd);
	if (ret) {
		free(*buf);
		*buf = NULL;
		return ret;
	}
	*size = got;
	return 0;
}

/* The sessions of the record at @path, @buf of @size bytes, taken back
 * where their memfds are: how many, or -EINVAL when it is refused whole
 * (said in the log). */
static int record_load(struct kvmemd *d, const char *path, const uint8_t *buf,
		       size_t size, int live)
{
	char why[KVMEM_MESSAGE_LEN];
	uint8_t uuid[16] = { 0 };
	struct keep_hdr h;
	struct cursor c;
	struct kept k;
	uint32_t i;
	int ret, kept = 0;

	ret = hdr_check(buf, size, &h, why, sizeof(why));
	if (ret || (live && h.nsessions != 1)) {
		kvmemd_log(LOG_ERR, "%s: %s; no session is taken back from it",
			   path, ret ? why : "not the record of one session");
		return -EINVAL;
	}
	kvmemd_tier_store_uuid(d, uuid);
	/* The whole body parses first, or nothing of it is taken. */
	c = (struct cursor){ .p = buf + sizeof(h), .left = h.body_bytes };
	for (i = 0; i < h.nsessions && !kept_parse(&c, &k); i++)
		;
	if (i < h.nsessions || c.left) {
		kvmemd_log(LOG_ERR,
			   "%s: its %u sessions do not fill it; no session is "
			   "taken back from it",
			   path, h.nsessions);
		return -EINVAL;
	}
	c = (struct cursor){ .p = buf + sizeof(h), .left = h.body_bytes };
	for (i = 0; i < h.nsessions; i++) {
		kept_parse(&c, &k);
		if (!session_load(d, &k, !memcmp(uuid, h.store_uuid, 16),
				  live ? h.generation : 0, why, sizeof(why))) {
			kept++;
			d->resume->n.taken++;
			d->resume->n.after_crash += live;
			if (live)
				kvmemd_log(LOG_NOTICE,
					   "session %u (uid %u) taken back "
					   "from the record it had when "
					   "kvmemd stopped without keeping "
					   "it (a crash?)",
					   k.rec->id, k.rec->uid);
			continue;
		}
		kvmemd_log(LOG_WARNING,
			   "kept session %u (uid %u) not taken back: %s",
			   k.rec->id, k.rec->uid, why);
		d->resume->n.refused++;
	}
	return kept;
}

/* Is @name a live record's ("session-ID.N.rec")? Its session's ID, or 0. */
static uint32_t live_name(const char *name)
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

/* The SQ head and CQ tail the record @b (whole: hdr_check()) of one
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

/*
 * Session @id's live record that its client saw last, read into *@buf
 * (*@size bytes), its path to @path: of its two records (each written over
 * the last but one), the newer whole one whose SQ head and CQ tail are
 * those its ring shows, @ring (a record written but not yet shown to the
 * client when kvmemd died is not the one to take: the client may have
 * given its ops up). 0, or -ENOENT (said in the log when a record is
 * there).
 */
static int live_read(struct kvmemd *d, uint32_t id, const uint32_t ring[2],
		     char *path, uint8_t **buf, size_t *size)
{
	char p[2][LIVE_PATH_MAX], why[2][KVMEM_MESSAGE_LEN];
	uint8_t *b[2] = { NULL, NULL };
	size_t n[2] = { 0, 0 };
	struct keep_hdr h[2];
	uint32_t heads[2];
	int ok[2], i, ret;

	for (i = 0; i < 2; i++) {
		ok[i] = 0;
		snprintf(why[i], sizeof(why[i]), "not there");
		if (live_path(d, id, i, p[i]))
			continue;
		ret = slurp(p[i], &b[i], &n[i]);
		if (ret) {
			snprintf(why[i], sizeof(why[i]), "%s", strerror(-ret));
			continue;
		}
		if (hdr_check(b[i], n[i], &h[i], why[i], sizeof(why[i])))
			continue;
		if (h[i].nsessions != 1 ||
		    h[i].body_bytes < sizeof(struct keep_rec) ||
		    rec_id(b[i]) != id) {
			snprintf(why[i], sizeof(why[i]),
				 "not the record of session %u alone", id);
			continue;
		}
		rec_heads(b[i], heads);
		ok[i] = heads[0] == ring[0] && heads[1] == ring[1];
		if (!ok[i])
			snprintf(why[i], sizeof(why[i]),
				 "SQ head %u and CQ tail %u, where its client "
				 "saw %u and %u",
				 heads[0], heads[1], ring[0], ring[1]);
	}
	i = ok[1] && (!ok[0] || h[1].generation > h[0].generation);
	if (!ok[i]) {
		if (b[0] || b[1])
			kvmemd_log(LOG_ERR,
				   "session %u: neither of its records is one "
				   "to take back (%s: %s; %s: %s)",
				   id, p[0], why[0], p[1], why[1]);
		free(b[0]);
		free(b[1]);
		return -ENOENT;
	}
	free(b[!i]);
	*buf = b[i];
	*size = n[i];
	memcpy(path, p[i], LIVE_PATH_MAX);
	return 0;
}

/* The live records of the sessions whose memfds came back and that the
 * record of a stop did not take: how many were taken back. */
static int live_load(struct kvmemd *d)
{
	struct kvmemd_resume *r = d->resume;
	char path[LIVE_PATH_MAX];
	uint32_t i, n, *ids, (*heads)[2];
	struct kvmem_ring ring;
	uint8_t *buf;
	size_t size;
	int kept = 0, ret;

	/* Each load takes its memfd off the list: the IDs, and what the
	 * rings show, first. The ring is at the start of the memfd. */
	n = r->nfds;
	ids = malloc((n + 1) * sizeof(*ids));
	heads = malloc((n + 1) * sizeof(*heads));
	if (!ids || !heads) {
		free(ids);
		free(heads);
		return 0;
	}
	for (i = 0; i < n; i++) {
		ids[i] = r->fds[i].id;
		if (pread(r->fds[i].fd, &ring, sizeof(ring), 0) !=
		    (ssize_t)sizeof(ring))
			memset(&ring, 0xff, sizeof(ring));
		heads[i][0] = ring.sq_head;
		heads[i][1] = ring.cq_tail;
	}
	for (i = 0; i < n; i++) {
		if (live_read(d, ids[i], heads[i], path, &buf, &size))
			continue;
		ret = record_load(d, path, buf, size, 1);
		kept += ret > 0 ? ret : 0;
		free(buf);
	}
	free(ids);
	free(heads);
	return kept;
}

void kvmemd_resume_load(struct kvmemd *d)
{
	struct kvmemd_resume *r = state(d);
	uint8_t *buf = NULL;
	char path[300];
	size_t size = 0;
	int ret, kept = 0;

	if (!r)
		return;
	if (record_path(d, "", path, sizeof(path))) {
		fds_close(r, "with no room for the record's path");
		return;
	}
	ret = slurp(path, &buf, &size);
	if (ret && ret != -ENOENT)
		kvmemd_log_err(LOG_ERR, ret, "%s", path);
	if (!ret) {
		/* Read once: removed when this daemon serves. */
		r->record_read = 1;
		ret = record_load(d, path, buf, size, 0);
		kept += ret > 0 ? ret : 0;
		free(buf);
	}
	kept += live_load(d);
	fds_close(r, "with no record that takes them back (kvmemd was "
		     "killed without daemon.keep_on_crash, or the record was "
		     "refused)");
	if (kept)
		kvmemd_log(LOG_NOTICE,
			   "%d kept sessions wait for their clients (%u s)",
			   kept, d->cfg.resume_seconds);
}

/* Live records of sessions this daemon did not take back, or took back
 * from the record of a stop: gone. */
static void live_prune(struct kvmemd *d)
{
	const struct kvmemd_session *s;
	char path[600];
	struct dirent *e;
	uint32_t id;
	DIR *dir = opendir(d->cfg.state_dir);

	if (!dir)
		return;
	while ((e = readdir(dir))) {
		id = live_name(e->d_name);
		for (s = d->resume ? d->resume->kept : NULL; id && s;
		     s = s->kept_next)
			if (s->id == id)
				break;
		/* A session the record of a stop took starts its own anew. */
		if (!id || (s && s->kept_generation))
			continue;
		snprintf(path, sizeof(path), "%s/%s", d->cfg.state_dir,
			 e->d_name);
		unlink(path);
	}
	closedir(dir);
}

void kvmemd_resume_commit(struct kvmemd *d)
{
	struct kvmemd_resume *r = d->resume;
	char path[300], msg[96], name[24];
	struct kvmemd_session *s;
	uint32_t i;

	if (!r)
		return;
	for (i = 0; i < r->nnames; i++) {
		for (s = r->kept; s; s = s->kept_next) {
			snprintf(name, sizeof(name), FD_PREFIX "%u", s->id);
			if (s->stored && !strcmp(name, r->names[i]))
				break;
		}
		if (s)
			continue;
		snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=%s",
			 r->names[i]);
		kvmemd_notify_fd(msg, -1);
	}
	r->nnames = 0;
	/* The record of a stop goes once each session it kept has a live
	 * record of its own. */
	live_prune(d);
	for (s = r->kept; s; s = s->kept_next) {
		live_start(s, s->kept_generation);
		if (!s->kept_generation)
			live_first(s);
	}
	if (r->record_read && !record_path(d, "", path, sizeof(path)) &&
	    unlink(path) && errno != ENOENT)
		kvmemd_log_err(LOG_WARNING, -errno, "removing %s", path);
	r->record_read = 0;
}

/* ---- a client comes back ---------------------------------------------- */

static int refuse(struct kvmem_welcome *w, int err, const char *msg)
{
	w->error = err;
	snprintf(w->message, sizeof(w->message), "%s", msg);
	return err;
}

int kvmemd_resume_take(struct kvmemd *d, const struct kvmem_hello *h, uid_t uid,
		       uint64_t tenant, pid_t pid, struct kvmem_welcome *w,
		       struct kvmemd_session **out)
{
	struct kvmemd_resume *r = d->resume;
	struct kvmemd_session **pp, *s = NULL;

	w->max_quota_bytes = d->cfg.session_max_bytes;
	w->pool_free_bytes = d->cfg.host_bytes - d->n.pool_used;
	if (h->magic != KVMEM_HELLO_MAGIC || h->size != sizeof(*h))
		return refuse(w, -EPROTO, "not a kvmem hello");
	if (h->abi_version < KVMEM_ABI_VERSION_MIN ||
	    h->abi_version > KVMEM_ABI_VERSION)
		return refuse(w, -EPROTONOSUPPORT,
			      "client speaks another ABI version");
	if (!h->resume_session || !h->resume_token || h->abi_version < 4)
		return refuse(w, -EINVAL,
			      "a hello that takes a session back names it "
			      "and gives its token");
	for (pp = r ? &r->kept : NULL; pp && (s = *pp); pp = &s->kept_next)
		if (s->id == h->resume_session)
			break;
	/* One answer for all three: a session is not there for another
	 * uid to find. */
	if (!s || s->uid != uid || s->resume_token != h->resume_token)
		return refuse(w, -ESTALE,
			      "kvmemd kept no such session for this uid "
			      "(it restarted without keeping it, or its "
			      "time ran out)");
	if (memcmp(&h->geometry, &s->g, sizeof(s->g)))
		return refuse(w, -EINVAL,
			      "the hello's geometry is not the session's");
	*pp = s->kept_next;
	s->kept_next = NULL;
	s->kept_until = 0;
	s->pid = pid;
	s->tenant = tenant;
	/* What the old daemon left: the client rings until the loop polls,
	 * and the shutdown is over. */
	__atomic_store_n(&s->ring->flags, KVMEM_RING_NEED_WAKEUP,
			 __ATOMIC_RELEASE);
	kvmemd_log(LOG_INFO, "session %u (uid %u) taken back by pid %d", s->id,
		   (unsigned int)uid, (int)pid);
	*out = s;
	return 0;
}

uint64_t kvmemd_resume_run(struct kvmemd *d, uint64_t now)
{
	struct kvmemd_resume *r = d->resume;
	struct kvmemd_session **pp, *s;
	uint64_t next = UINT64_MAX;

	for (pp = r ? &r->kept : NULL; pp && (s = *pp);) {
		if (s->kept_until > now) {
			if (s->kept_until < next)
				next = s->kept_until;
			pp = &s->kept_next;
			continue;
		}
		*pp = s->kept_next;
		kvmemd_log(LOG_NOTICE,
			   "kept session %u (uid %u): its client did not come "
			   "back within %u s; freed",
			   s->id, (unsigned int)s->uid, d->cfg.resume_seconds);
		kvmemd_session_discard(s);
		kvmemd_session_free(s);
	}
	return next;
}

uint64_t kvmemd_resume_waiting(const struct kvmemd *d)
{
	const struct kvmemd_session *s;
	uint64_t n = 0;

	for (s = d->resume ? d->resume->kept : NULL; s; s = s->kept_next)
		n++;
	return n;
}

void kvmemd_resume_counts(const struct kvmemd *d,
			  struct kvmemd_resume_counts *c)
{
	if (d->resume)
		*c = d->resume->n;
	else
		memset(c, 0, sizeof(*c));
}

void kvmemd_resume_exit(struct kvmemd *d)
{
	struct kvmemd_resume *r = d->resume;
	struct kvmemd_session *s;

	if (!r)
		return;
	while ((s = r->kept)) {
		r->kept = s->kept_next;
		kvmemd_session_free(s);
	}
	fds_close(r, "at exit");
	free(r->fds);
	free(r->names);
	free(r);
	d->resume = NULL;
}

/* ---- at stop ---------------------------------------------------------- */

struct kvmemd_keep *kvmemd_resume_begin(struct kvmemd *d)
{
	struct kvmemd_keep *k;
	uint64_t now;

	if (!kvmemd_resume_on(d))
		return NULL;
	k = calloc(1, sizeof(*k));
	if (k)
		k->body = open_memstream(&k->buf, &k->len);
	if (!k || !k->body) {
		kvmemd_log(LOG_ERR, "out of memory: no session is kept");
		free(k);
		return NULL;
	}
	k->d = d;
	now = kvmemd_now_ns();
	k->run_until = now + KEEP_RUN_NS;
	k->deadline = now + QUIESCE_NS;
	kvmemd_tier_store_uuid(d, k->store_uuid);
	return k;
}

static void seqs_write(FILE *f, const struct kvmemd_session *s, int live)
{
	const uint32_t pad = 0;
	struct keep_seq ks;
	const struct seq *q;
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
		fwrite(&ks, sizeof(ks), 1, f);
		if (ks.n)
			fwrite(q->pages, sizeof(uint32_t), ks.n, f);
		if (ks.n % 2)
			fwrite(&pad, sizeof(pad), 1, f);
	}
}

/*
 * @s's tables as they would be had no move started and no waiting
 * acquire been issued, in @sl and @pg (copies of its slots and pages);
 * its first free page to *@free_page.
 */
static void tables_settle(const struct kvmemd_session *s, struct slot *sl,
			  struct page *pg, uint32_t *free_page)
{
	const struct seq *q;
	struct page *p;
	uint32_t i, n;

	for (i = 0; i < s->arena.top; i++)
		if (sl[i].state == SLOT_LOADING || sl[i].state == SLOT_ARCHIVING)
			sl[i].state = SLOT_FREE;
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

/*
 * @s as a record has it, to @f. @live: while it runs (tables_settle(),
 * and the SQEs of the ops waiting follow); else at a stop, with no move
 * under way and no op waiting (session_keep_ready()). Return: 0, or
 * -ENOMEM.
 */
static int session_put(FILE *f, const struct kvmemd_session *s, uint64_t now,
		       int live)
{
	const struct kvmemd_arena *a = &s->arena;
	struct slot *sl = a->slots;
	struct page *pg = a->pages;
	const struct tier_wait *w;
	struct keep_rec rec;

	memset(&rec, 0, sizeof(rec));
	rec.free_page = a->free_page;
	if (live) {
		sl = malloc((a->top + 1) * sizeof(*sl));
		pg = malloc((a->top_page + 1) * sizeof(*pg));
		if (!sl || !pg) {
			free(sl);
			free(pg);
			return -ENOMEM;
		}
		memcpy(sl, a->slots, a->top * sizeof(*sl));
		if (a->top_page)
			memcpy(pg, a->pages, a->top_page * sizeof(*pg));
		tables_settle(s, sl, pg, &rec.free_page);
		rec.nwaits = s->nwaits;
	}
	rec.id = s->id;
	rec.uid = (uint32_t)s->uid;
	rec.token = s->resume_token;
	rec.features = s->features;
	rec.g = s->g;
	rec.arch = s->arch;
	rec.arena_bytes = s->arena_bytes;
	rec.map_bytes = s->map_bytes;
	rec.sq_entries = s->sq_entries;
	rec.cq_entries = s->cq_entries;
	rec.top = a->top;
	rec.top_page = a->top_page;
	rec.nseqs = s->nseqs;
	rec.seals = a->seals;
	rec.sq_head = s->sq_head;
	rec.cq_tail = s->cq_tail;
	rec.ops = s->ops;
	rec.op_errors = s->op_errors;
	rec.ce = s->ce;
	rec.ue = s->ue;
	rec.crc = s->crc;
	rec.offloads = s->offloads;
	rec.reloads = s->reloads;
	rec.offload_bytes = s->offload_bytes;
	rec.reload_bytes = s->reload_bytes;
	if (s->kept_until)
		rec.wait_ns = s->kept_until > now ? s->kept_until - now : 1;
	fwrite(&rec, sizeof(rec), 1, f);
	fwrite(sl, sizeof(*sl), a->top, f);
	if (a->top_page)
		fwrite(pg, sizeof(*pg), a->top_page, f);
	seqs_write(f, s, live);
	for (w = live ? s->waits : NULL; w; w = w->next)
		fwrite(&w->e, sizeof(w->e), 1, f);
	if (live) {
		free(sl);
		free(pg);
	}
	return 0;
}

int kvmemd_resume_keep(struct kvmemd_keep *k, struct kvmemd_session *s)
{
	char why[KVMEM_MESSAGE_LEN], msg[64];
	uint64_t now, left;
	uint32_t pg;
	int ret;

	if (!k || !(s->features & KVMEM_FEAT_RESUME))
		return 0;
	now = kvmemd_now_ns();
	left = now < k->deadline ? (k->deadline - now) / 1000000u : 0;
	ret = session_keep_ready(s, k->run_until, (int)left, why, sizeof(why));
	for (pg = 0; !ret && pg < s->arena.top_page; pg++)
		if (s->arena.pages[pg].state != PAGE_UNUSED &&
		    s->arena.pages[pg].state != PAGE_RESIDENT &&
		    s->arena.pages[pg].state != PAGE_COLD) {
			snprintf(why, sizeof(why), "a page is still moving");
			ret = -EBUSY;
		}
	if (!ret && !s->stored) {
		/* One refusal (its reader behind, no store) stops the rest:
		 * each would wait for room again. */
		if (!k->store_err) {
			snprintf(msg, sizeof(msg),
				 "FDSTORE=1\nFDNAME=" FD_PREFIX "%u", s->id);
			k->store_err = kvmemd_notify_fd(msg, s->r.fd);
		}
		ret = k->store_err;
		if (ret)
			snprintf(why, sizeof(why),
				 "the descriptor store did not take its "
				 "memfd: %s",
				 strerror(-ret));
	}
	if (ret) {
		kvmemd_log(LOG_NOTICE, "session %u (uid %u) not kept: %s",
			   s->id, (unsigned int)s->uid, why);
		kvmemd_resume_untrack(s);
		return 0;
	}
	session_put(k->body, s, now, 0);
	k->n++;
	/* The record of the stop has all that ran: the client sees it. */
	kvmemd_resume_forget(s);
	s->pub_sq_head = s->sq_head;
	s->pub_cq_tail = s->cq_tail;
	session_publish(s);
	kvmemd_log(LOG_INFO, "session %u (uid %u) kept for the next kvmemd",
		   s->id, (unsigned int)s->uid);
	return 1;
}

/* @len bytes of @buf to @fd, all of them: 0, or -errno. */
static int write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	ssize_t n;

	while (len) {
		n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int record_write(struct kvmemd_keep *k)
{
	char path[300], tmp[300];
	struct keep_hdr h;
	int fd, ret;

	if (record_path(k->d, "", path, sizeof(path)) ||
	    record_path(k->d, ".new", tmp, sizeof(tmp)))
		return -ENAMETOOLONG;
	memset(&h, 0, sizeof(h));
	memcpy(h.magic, KEEP_MAGIC, sizeof(KEEP_MAGIC));
	h.version = KEEP_VERSION;
	h.nsessions = k->n;
	h.rec_size = sizeof(struct keep_rec);
	h.slot_size = sizeof(struct slot);
	h.page_size = sizeof(struct page);
	h.seq_size = sizeof(struct keep_seq);
	memcpy(h.store_uuid, k->store_uuid, sizeof(h.store_uuid));
	h.body_bytes = k->len;
	h.body_crc = kvmem_crc32c(0, k->buf, k->len);
	h.crc = kvmem_crc32c(0, &h, offsetof(struct keep_hdr, crc));
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	ret = write_all(fd, &h, sizeof(h));
	if (!ret)
		ret = write_all(fd, k->buf, k->len);
	if (!ret && fsync(fd))
		ret = -errno;
	close(fd);
	if (!ret && rename(tmp, path))
		ret = -errno;
	if (ret)
		unlink(tmp);
	return ret;
}

void kvmemd_resume_end(struct kvmemd_keep *k)
{
	struct kvmemd_resume *r;
	struct kvmemd_session *s;
	int ret;

	if (!k)
		return;
	/* Those a restart kept and no client took back yet: once more. */
	r = k->d->resume;
	while (r && (s = r->kept)) {
		r->kept = s->kept_next;
		kvmemd_resume_keep(k, s);
		kvmemd_session_free(s);
	}
	ret = fclose(k->body) ? -ENOMEM : 0;
	if (!ret && k->n)
		ret = record_write(k);
	if (ret)
		kvmemd_log_err(LOG_ERR, ret,
			       "writing the record of %u kept sessions; they "
			       "are lost",
			       k->n);
	else if (k->n)
		kvmemd_log(LOG_NOTICE,
			   "%u sessions kept for the next kvmemd (each waits "
			   "%u s for its client)",
			   k->n, k->d->cfg.resume_seconds);
	free(k->buf);
	free(k);
}
