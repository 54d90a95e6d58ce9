/* SPDX-License-Identifier: MIT */
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
#include "record.h"
#include "session.h"

#define KEEP_FILE "sessions.kept"
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

struct kvmemd_keep {
	struct kvmemd *d;
	struct record_buf body;
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

/* ---- while sessions run ----------------------------------------------- */

void kvmemd_resume_record(struct kvmemd *d)
{
	struct kvmemd_session *s;

	for (s = d->sessions; s; s = s->next)
		if (s->live)
			record_live_write(s);
	for (s = d->resume ? d->resume->kept : NULL; s; s = s->kept_next)
		if (s->live)
			record_live_write(s);
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
		record_live_start(s, 0);
		record_live_first(s);
	}
}

void kvmemd_resume_untrack(struct kvmemd_session *s)
{
	char msg[64];

	record_live_end(s);
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
	const struct arena_saved_slot *slots; /* [rec->nslots] */
	const struct page *pages;
	struct cursor seqs; /* nseqs of struct keep_seq, each with its pages */
	const struct kvmem_sqe *waits; /* [rec->nwaits] */
};

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
	k->slots = take(c, (uint64_t)k->rec->nslots *
				   sizeof(struct arena_saved_slot));
	k->pages = take(c, (uint64_t)k->rec->top_page * sizeof(struct page));
	if (!k->slots || !k->pages)
		return -EINVAL;
	start = c->p;
	for (i = 0; i < k->rec->nseqs; i++) {
		ks = take(c, sizeof(*ks));
		if (!ks || !take(c, record_idx_bytes(ks->n)))
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
		.nslots = rec->nslots,
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
		idx = take(&c, record_idx_bytes(ks->n));
		ret = ks->acquired > 1
			      ? -EINVAL
			      : session_seq_restore(s, ks->id,
						    (int)ks->acquired,
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

	ret = record_hdr_check(buf, size, &h, why, sizeof(why));
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
		if (record_live_read(d, ids[i], heads[i], path, &buf, &size))
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
	ret = kvmemd_file_read(path, &buf, &size);
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
		id = record_live_name(e->d_name);
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
		record_live_start(s, s->kept_generation);
		if (!s->kept_generation)
			record_live_first(s);
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

	if (!kvmemd_notify_keeping(d))
		return NULL;
	k = calloc(1, sizeof(*k));
	if (!k) {
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
	if (record_put(&k->body, s, now, 0)) {
		kvmemd_log(LOG_ERR,
			   "session %u (uid %u) not kept: out of memory", s->id,
			   (unsigned int)s->uid);
		kvmemd_resume_untrack(s);
		return 0;
	}
	k->n++;
	/* The record of the stop has all that ran: the client sees it. */
	kvmemd_record_forget(s);
	s->pub_sq_head = s->sq_head;
	s->pub_cq_tail = s->cq_tail;
	session_publish(s);
	kvmemd_log(LOG_INFO, "session %u (uid %u) kept for the next kvmemd",
		   s->id, (unsigned int)s->uid);
	return 1;
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
	h.body_bytes = k->body.len;
	h.body_crc = kvmem_crc32c(0, k->body.p, k->body.len);
	h.crc = kvmem_crc32c(0, &h, offsetof(struct keep_hdr, crc));
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	ret = kvmemd_file_write_all(fd, &h, sizeof(h));
	if (!ret)
		ret = kvmemd_file_write_all(fd, k->body.p, k->body.len);
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
	ret = k->n ? record_write(k) : 0;
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
	free(k->body.p);
	free(k);
}
