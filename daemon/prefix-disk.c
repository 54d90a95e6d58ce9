/* SPDX-License-Identifier: MIT */
/*
 * prefix-disk.c - published prefixes on the backing store, where they
 * outlive any restart of kvmemd, a reboot included
 *
 * With prefix.keep, a store and store.retain_bytes, each block kept in
 * memory is also written to the store, on a worker, as the shared tier's
 * record of it (remote-record.c: header, seals, pages, each with its code
 * words and CRC), in consecutive units of its own. A block that leaves
 * memory by eviction or expiry stays on the store (cold); one an operator
 * drops, or whose copy was damaged, leaves the store too. Cold blocks go
 * when store.retain_seconds pass without an attach, and the least
 * recently used first when their bytes would pass store.retain_bytes.
 * PREFIX_FETCH reads a tenant's cold blocks back before it asks the shared
 * tier.
 *
 * Which units hold which block is in the index, STATE_DIR/store-
 * prefixes.0.idx and .1.idx, written in turn on a worker once the set of
 * blocks on the store changed, at most once a second (each over its
 * last-but-one: a write cut short leaves the other whole, and a retry
 * after a failure goes over the one it spoilt), after an fdatasync of the
 * store and fsynced itself, so an index never names a record the medium
 * may not have:
 *
 *   struct disk_hdr     magic, version, entry size, the store's uuid, a
 *                       generation, the body's length and CRC-32C, its
 *                       own CRC-32C
 *   per block           struct disk_rec
 *
 * A block is on the store before an index names it, and its units are
 * written again only once an index that no longer names it is written
 * (->held), so every entry of the newest index names units that hold its
 * record, or a record that is refused: at start each record read back is
 * checked end to end (header, tenant, key, shape, every page's words,
 * corrected in place where they can be, its CRC, its header against its
 * seal) before its block is served, and one that fails is dropped with a
 * sentence. The blocks of the newest index that verifies are taken back
 * into memory as prefix.* limits allow; the others stay on the store,
 * cold. An index of another store (uuid), another version or that does
 * not verify is refused with a sentence: the store's units are then all
 * free, and nothing in them is read.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvmem/crc32c.h"
#include "prefix.h"
#include "remote.h"
#include "store.h"

#define DISK_MAGIC "KVMPDSK"
#define DISK_VERSION 1
#define DISK_PATH_MAX 320
#define DISK_INDEX "%s/store-prefixes.%d.idx" /* STATE_DIR, 0 or 1 */
/* Records on their way to the store, at most: past it a block is not
 * written (counted). */
#define DISK_INFLIGHT_BYTES (64ull << 20)

struct disk_hdr {
	char magic[8]; /* DISK_MAGIC */
	uint32_t version; /* DISK_VERSION */
	uint32_t ent_size;
	uint8_t store_uuid[16]; /* the store whose units the entries name */
	uint64_t generation; /* the newer of the two files wins */
	uint64_t body_bytes;
	uint32_t nblocks;
	uint32_t body_crc; /* CRC-32C of the body */
	uint32_t resv;
	uint32_t crc; /* CRC-32C of the header before it */
};

/* A block on the store, as the index has it. */
struct disk_rec {
	uint64_t tenant;
	uint64_t unit; /* its record's first data unit */
	uint64_t published, used; /* Unix time: written, last attached */
	uint8_t key[KVMEM_PREFIX_KEY_BYTES];
	struct kvmem_geometry g;
	struct kvmem_page_layout layout;
	uint32_t token_start, ntokens;
	uint32_t layers, page_bytes;
	uint32_t units; /* of its record */
	uint8_t kind;
	uint8_t pad[3];
};

_Static_assert(sizeof(struct disk_hdr) % 8 == 0, "header padded");
_Static_assert(sizeof(struct disk_rec) % 8 == 0, "entry padded");

enum ent_state {
	ENT_WRITING, /* its record is on its way: in no index */
	ENT_STORED,
};

struct kvmemd_prefix_disk_ent {
	struct disk_rec r;
	uint64_t hash;
	uint8_t state; /* enum ent_state */
	uint8_t forget; /* dropped while written: its units go at the end */
	struct kvmemd_prefix_block *b; /* in memory too, or NULL */
	struct kvmemd_prefix_disk_ent *hnext;
	/* least recently used first */
	struct kvmemd_prefix_disk_ent *prev, *next;
};

/* Units an index on the medium may still name. */
struct held {
	uint64_t unit;
	uint32_t units;
	uint64_t generation; /* free once an index newer than this is written */
};

struct write_job {
	struct kvmemd_work work;
	struct kvmemd *d;
	struct kvmemd_prefix_disk_ent *e;
	struct kvmemd_store *st;
	uint8_t *buf;
	size_t rec_len, len;
	uint64_t unit;
	int ret;
};

struct fetch_job;

struct kvmemd_prefix_disk {
	struct kvmemd *d;
	struct kvmemd_store *st;
	char path[2][DISK_PATH_MAX];
	uint8_t uuid[16];
	struct kvmemd_prefix_disk_ent **table;
	uint32_t nbuckets, n;
	struct kvmemd_prefix_disk_ent *head, *tail;
	uint64_t bytes; /* units of the entries, in bytes */
	uint64_t stored, stored_bytes; /* of them, ENT_STORED */
	uint64_t inflight; /* record bytes on their way */
	struct held *held;
	uint32_t nheld, held_cap;
	/* the index */
	struct kvmemd_work iwork;
	uint8_t *ibuf;
	size_t ilen;
	uint64_t built, written; /* generations: last image, last on disk */
	int iret;
	uint8_t dirty, busy, failed;
	uint8_t missing; /* a block in memory was not written: try again */
	/* the next index is written no sooner; the wait after a failure */
	uint64_t retry_ns, backoff_ns;
	struct fetch_job *fetches; /* PREFIX_FETCH reads under way */
	uint64_t next_look; /* CLOCK_MONOTONIC ns of the next look */
	/* store.retain_* at the last look */
	uint64_t retain_b;
	uint32_t retain_s, retain_pct;
	uint32_t nbuilt; /* blocks the index on its way names */
	struct kvmemd_ratelimit log_write;
	struct kvmemd_prefix_disk_stats n_;
};

static struct kvmemd_prefix_disk *disk(const struct kvmemd *d)
{
	return d->prefix_disk;
}

/* ---- the entries ------------------------------------------------------- */

static uint64_t ent_hash(uint64_t tenant, const uint8_t *key, uint64_t digest,
			 uint32_t token_start)
{
	uint64_t h = 0xcbf29ce484222325ull ^ tenant;
	size_t i;

	for (i = 0; i < KVMEM_PREFIX_KEY_BYTES; i++)
		h = (h ^ key[i]) * 0x100000001b3ull;
	h = (h ^ digest) * 0x100000001b3ull;
	return (h ^ token_start) * 0x100000001b3ull;
}

static struct kvmemd_prefix_disk_ent *
ent_find(struct kvmemd_prefix_disk *v, uint64_t tenant, const uint8_t *key,
	 const struct kvmem_geometry *g, uint64_t digest, uint32_t token_start,
	 uint32_t ntokens)
{
	const uint64_t h = ent_hash(tenant, key, digest, token_start);
	struct kvmemd_prefix_disk_ent *e;

	if (!v->nbuckets)
		return NULL;
	for (e = v->table[h & (v->nbuckets - 1)]; e; e = e->hnext)
		if (e->hash == h && !e->forget && e->r.tenant == tenant &&
		    e->r.token_start == token_start &&
		    e->r.ntokens == ntokens &&
		    !memcmp(e->r.key, key, sizeof(e->r.key)) &&
		    !memcmp(&e->r.g, g, sizeof(*g)))
			return e;
	return NULL;
}

static int table_grow(struct kvmemd_prefix_disk *v)
{
	struct kvmemd_prefix_disk_ent **t, *e, *next;
	uint32_t n = v->nbuckets ? 2 * v->nbuckets : 64, i;

	if (v->n < v->nbuckets)
		return 0;
	t = calloc(n, sizeof(*t));
	if (!t)
		return -ENOMEM;
	for (i = 0; i < v->nbuckets; i++)
		for (e = v->table[i]; e; e = next) {
			next = e->hnext;
			e->hnext = t[e->hash & (n - 1)];
			t[e->hash & (n - 1)] = e;
		}
	free(v->table);
	v->table = t;
	v->nbuckets = n;
	return 0;
}

static void lru_unlink(struct kvmemd_prefix_disk *v,
		       struct kvmemd_prefix_disk_ent *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		v->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		v->tail = e->prev;
	e->prev = e->next = NULL;
}

static void lru_back(struct kvmemd_prefix_disk *v,
		     struct kvmemd_prefix_disk_ent *e)
{
	e->prev = v->tail;
	e->next = NULL;
	if (v->tail)
		v->tail->next = e;
	else
		v->head = e;
	v->tail = e;
}

/* A new entry for @r, in the table and the most recently used: NULL when
 * out of memory. */
static struct kvmemd_prefix_disk_ent *
ent_add(struct kvmemd_prefix_disk *v, const struct disk_rec *r, int state)
{
	struct kvmemd_prefix_disk_ent *e;
	uint32_t i;

	if (table_grow(v))
		return NULL;
	e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->r = *r;
	e->state = (uint8_t)state;
	e->hash = ent_hash(r->tenant, r->key, kvmem_geometry_digest(&r->g),
			   r->token_start);
	i = (uint32_t)(e->hash & (v->nbuckets - 1));
	e->hnext = v->table[i];
	v->table[i] = e;
	lru_back(v, e);
	v->n++;
	v->bytes += (uint64_t)r->units * KVMEMD_STORE_UNIT;
	if (state == ENT_STORED) {
		v->stored++;
		v->stored_bytes += (uint64_t)r->units * KVMEMD_STORE_UNIT;
	}
	return e;
}

/* Units no index names are free at once; the others wait for an index
 * that does not name them. */
static void units_release(struct kvmemd_prefix_disk *v, uint64_t unit,
			  uint32_t units, int named)
{
	struct held *h;
	uint32_t cap;

	if (named && v->nheld == v->held_cap) {
		cap = v->held_cap ? 2 * v->held_cap : 16;
		h = realloc(v->held, cap * sizeof(*h));
		if (h) {
			v->held = h;
			v->held_cap = cap;
		}
	}
	if (!named) {
		kvmemd_store_free(v->st, unit, units);
		return;
	}
	/* Out of memory to hold them: they stay in use until the next
	 * start, rather than be written while an index may name them. */
	if (v->nheld == v->held_cap)
		return;
	v->held[v->nheld++] = (struct held){ unit, units, v->built };
	v->dirty = 1;
}

/* @e goes from the table; its units as units_release() says. */
static void ent_remove(struct kvmemd_prefix_disk *v,
		       struct kvmemd_prefix_disk_ent *e)
{
	struct kvmemd_prefix_disk_ent **pp;

	pp = &v->table[e->hash & (v->nbuckets - 1)];
	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	lru_unlink(v, e);
	v->n--;
	v->bytes -= (uint64_t)e->r.units * KVMEMD_STORE_UNIT;
	if (e->state == ENT_STORED) {
		v->stored--;
		v->stored_bytes -= (uint64_t)e->r.units * KVMEMD_STORE_UNIT;
	}
	if (e->b)
		e->b->disk = NULL;
	units_release(v, e->r.unit, e->r.units, e->state == ENT_STORED);
	if (e->state == ENT_STORED)
		v->dirty = 1;
	free(e);
}

/* ---- on, off ----------------------------------------------------------- */

/* Bytes the blocks on the store may take: store.retain_bytes, or its
 * percentage of the store. */
static uint64_t retain_bytes(const struct kvmemd_prefix_disk *v)
{
	const struct kvmemd_config *c = &v->d->cfg;
	struct kvmemd_store_stats s;

	if (!c->store_retain_percent)
		return c->store_retain_bytes;
	kvmemd_store_stats(v->st, &s);
	return s.nunits * KVMEMD_STORE_UNIT / 100 * c->store_retain_percent;
}

/* Are blocks kept on a store, when there is one? */
static int disk_on(const struct kvmemd *d)
{
	return d->cfg.prefix_keep == KVMEMD_YES &&
	       (d->cfg.store_retain_percent || d->cfg.store_retain_bytes);
}

/* The state of blocks on @st. */
static struct kvmemd_prefix_disk *disk_new(struct kvmemd *d,
					   struct kvmemd_store *st)
{
	struct kvmemd_prefix_disk *v = calloc(1, sizeof(*v));
	struct kvmemd_store_stats s;
	int i;

	if (!v)
		return NULL;
	for (i = 0; i < 2; i++)
		if (snprintf(v->path[i], DISK_PATH_MAX, DISK_INDEX,
			     d->cfg.state_dir, i) >= DISK_PATH_MAX) {
			free(v);
			return NULL;
		}
	v->d = d;
	v->st = st;
	kvmemd_store_stats(st, &s);
	memcpy(v->uuid, s.uuid, sizeof(v->uuid));
	d->prefix_disk = v;
	return v;
}

/* ---- writing a block --------------------------------------------------- */

static void write_work(struct kvmemd_work *w)
{
	struct write_job *j = (struct write_job *)w;

	kvmemd_remote_record_seal(j->buf, j->rec_len);
	j->ret = kvmemd_store_pio(j->st, KVMEMD_IO_WRITE, j->unit, j->buf,
				  j->len);
}

static void write_done(struct kvmemd_work *w)
{
	struct write_job *j = (struct write_job *)w;
	struct kvmemd_prefix_disk *v = disk(j->d);
	struct kvmemd_prefix_disk_ent *e = j->e;

	free(j->buf);
	v->inflight -= j->len;
	if (!j->ret && !e->forget) {
		e->state = ENT_STORED;
		v->stored++;
		v->stored_bytes += j->len;
		v->n_.written++;
		v->n_.written_bytes += j->len;
		v->dirty = 1;
	} else {
		if (j->ret) {
			v->n_.write_errors++;
			kvmemd_log_rl(&v->log_write,
				      "prefix store writes failed", LOG_WARNING,
				      "prefix: writing a block to the store "
				      "failed (%s); it stays in memory only",
				      strerror(-j->ret));
		}
		ent_remove(v, e);
	}
	free(j);
}

/* Room for @bytes more under @limit (store.retain_bytes), the least
 * recently used blocks on the store going first: 0, or -ENOSPC, having
 * removed nothing, when even all of them would not make it (records on
 * their way count). */
static int make_room(struct kvmemd_prefix_disk *v, uint64_t bytes,
		     uint64_t limit)
{
	struct kvmemd_prefix_disk_ent *e, *next;

	if (bytes > limit || v->bytes - v->stored_bytes + bytes > limit)
		return -ENOSPC;
	for (e = v->head; e && v->bytes + bytes > limit; e = next) {
		next = e->next;
		if (e->state != ENT_STORED)
			continue;
		v->n_.reclaimed++;
		ent_remove(v, e);
	}
	return 0;
}

/* Units for a record of @units: 0 with *@unit, or -ENOSPC (then the
 * least recently used block on the store goes, its units free for the
 * blocks after this one once the next index is written). */
static int units_get(struct kvmemd_prefix_disk *v, uint32_t units,
		     uint64_t *unit)
{
	struct kvmemd_prefix_disk_ent *e;

	if (!kvmemd_store_alloc(v->st, units, unit))
		return 0;
	for (e = v->head; e; e = e->next)
		if (e->state == ENT_STORED)
			break;
	if (e) {
		v->n_.reclaimed++;
		ent_remove(v, e);
	}
	return -ENOSPC;
}

/*
 * @b to the store: 0 when it is there or on its way, -ENOSPC when it does
 * not fit (store.retain_bytes, or the store is full), -EAGAIN when it may
 * later (writes under way, the workers busy, out of memory).
 */
static int block_add(struct kvmemd *d, struct kvmemd_prefix_disk *v,
		     struct kvmemd_prefix_block *b)
{
	const size_t rec = kvmemd_remote_record_len(b->layers, b->page_bytes);
	const uint32_t units =
		(uint32_t)((rec + KVMEMD_STORE_UNIT - 1) / KVMEMD_STORE_UNIT);
	const size_t len = (size_t)units * KVMEMD_STORE_UNIT;
	const uint64_t now = (uint64_t)time(NULL);
	struct kvmemd_prefix_disk_ent *e;
	struct write_job *j;
	struct disk_rec r;

	e = ent_find(v, b->tenant, b->key, &b->g, b->digest, b->token_start,
		     b->ntokens);
	if (e) {
		/* On the store already (taken back, or fetched). */
		if (e->b)
			e->b->disk = NULL;
		e->b = b;
		b->disk = e;
		e->r.used = now;
		lru_unlink(v, e);
		lru_back(v, e);
		return 0;
	}
	if (v->inflight + len > DISK_INFLIGHT_BYTES || !d->workers)
		return -EAGAIN;
	if (make_room(v, len, retain_bytes(v)))
		return -ENOSPC;
	memset(&r, 0, sizeof(r));
	r.tenant = b->tenant;
	memcpy(r.key, b->key, sizeof(r.key));
	r.g = b->g;
	r.layout = b->layout;
	r.token_start = b->token_start;
	r.ntokens = b->ntokens;
	r.layers = b->layers;
	r.page_bytes = b->page_bytes;
	r.kind = b->kind;
	r.units = units;
	r.published = r.used = now;
	if (units_get(v, units, &r.unit)) {
		v->n_.nospace++;
		return -ENOSPC;
	}
	j = calloc(1, sizeof(*j));
	if (j && posix_memalign((void **)&j->buf, KVMEMD_STORE_UNIT, len))
		j->buf = NULL;
	e = j && j->buf ? ent_add(v, &r, ENT_WRITING) : NULL;
	if (!e) {
		if (j)
			free(j->buf);
		free(j);
		kvmemd_store_free(v->st, r.unit, units);
		return -EAGAIN;
	}
	kvmemd_remote_record_fill(b, NULL, j->buf);
	memset(j->buf + rec, 0, len - rec);
	j->d = d;
	j->e = e;
	j->st = v->st;
	j->rec_len = rec;
	j->len = len;
	j->unit = r.unit;
	j->work.fn = write_work;
	j->work.done = write_done;
	if (kvmemd_workers_queue(d->workers, &j->work)) {
		free(j->buf);
		free(j);
		ent_remove(v, e);
		return -EAGAIN;
	}
	v->inflight += len;
	e->b = b;
	b->disk = e;
	return 0;
}

void kvmemd_prefix_disk_add(struct kvmemd *d, struct kvmemd_prefix_block *b)
{
	struct kvmemd_prefix_disk *v = disk(d);
	int ret;

	if (!v || !disk_on(d) || b->disk)
		return;
	ret = block_add(d, v, b);
	v->n_.skipped += ret != 0;
	/* Tried again later; one that does not fit, not. */
	v->missing |= ret == -EAGAIN;
}

void kvmemd_prefix_disk_used(struct kvmemd *d, struct kvmemd_prefix_block *b)
{
	struct kvmemd_prefix_disk *v = disk(d);
	struct kvmemd_prefix_disk_ent *e = b->disk;

	if (!v || !e)
		return;
	e->r.used = (uint64_t)time(NULL);
	lru_unlink(v, e);
	lru_back(v, e);
}

void kvmemd_prefix_disk_leave(struct kvmemd *d, struct kvmemd_prefix_block *b,
			      int forget)
{
	struct kvmemd_prefix_disk *v = disk(d);
	struct kvmemd_prefix_disk_ent *e = b->disk;

	if (!e)
		return;
	b->disk = NULL;
	e->b = NULL;
	if (!forget || !v)
		return;
	v->n_.dropped++;
	if (e->state == ENT_WRITING)
		e->forget = 1;
	else
		ent_remove(v, e);
}

static void fetches_drop(struct kvmemd_prefix_disk *v, uint64_t tenant,
			 const uint8_t *key);

uint64_t kvmemd_prefix_disk_drop(struct kvmemd *d, uint64_t tenant,
				 const uint8_t *key)
{
	struct kvmemd_prefix_disk *v = disk(d);
	struct kvmemd_prefix_disk_ent *e, *next;
	uint64_t n = 0;

	if (!v)
		return 0;
	for (e = v->head; e; e = next) {
		next = e->next;
		if (e->b || e->forget || e->r.tenant != tenant ||
		    (key && memcmp(e->r.key, key, sizeof(e->r.key))))
			continue;
		v->n_.dropped++;
		n++;
		if (e->state == ENT_WRITING)
			e->forget = 1;
		else
			ent_remove(v, e);
	}
	/* Reads under way do not bring them back. */
	fetches_drop(v, tenant, key);
	return n;
}

/* ---- the index --------------------------------------------------------- */

/* An index is all the entries, fsynced: one is written at most every
 * INDEX_GAP_NS (a reboot loses at most the blocks written in the last
 * one). After a failed write, the next waits RETRY_NS, doubled each time
 * up to RETRY_MAX_NS. */
#define INDEX_GAP_NS (1000000000ull)
#define RETRY_NS (1000000000ull)
#define RETRY_MAX_NS (60ull * 1000000000ull)

/* The state whose index work @w is. */
static struct kvmemd_prefix_disk *of_iwork(struct kvmemd_work *w)
{
	return (struct kvmemd_prefix_disk *)((uint8_t *)w -
					     offsetof(struct kvmemd_prefix_disk,
						      iwork));
}

static void index_work(struct kvmemd_work *w)
{
	struct kvmemd_prefix_disk *v = of_iwork(w);
	struct disk_hdr *h = (struct disk_hdr *)v->ibuf;

	h->body_crc = kvmem_crc32c(0, v->ibuf + sizeof(*h), h->body_bytes);
	h->crc = kvmem_crc32c(0, h, offsetof(struct disk_hdr, crc));
	/* Every record the index names is on the medium before it is. */
	v->iret = kvmemd_store_sync(v->st);
	if (!v->iret)
		v->iret = kvmemd_file_replace(v->path[h->generation & 1],
					      v->ibuf, v->ilen, 1);
}

static void index_done(struct kvmemd_work *w)
{
	struct kvmemd_prefix_disk *v = of_iwork(w);
	const struct disk_hdr *h = (const struct disk_hdr *)v->ibuf;
	uint64_t gen = h->generation;
	uint32_t i, n;

	free(v->ibuf);
	v->ibuf = NULL;
	v->busy = 0;
	if (v->iret) {
		if (!v->failed)
			kvmemd_log_err(LOG_ERR, v->iret,
				       "prefix: writing the index of the "
				       "blocks on the store, %s; a restart "
				       "would not find those published since "
				       "the last",
				       v->path[gen & 1]);
		v->failed = 1;
		v->n_.index_errors++;
		v->dirty = 1;
		/* Again over the file this one spoilt, never over the last
		 * good one; later and later. */
		v->built--;
		v->backoff_ns = v->backoff_ns ? 2 * v->backoff_ns : RETRY_NS;
		if (v->backoff_ns > RETRY_MAX_NS)
			v->backoff_ns = RETRY_MAX_NS;
		v->retry_ns = kvmemd_now_ns() + v->backoff_ns;
		return;
	}
	v->failed = 0;
	v->backoff_ns = 0;
	v->retry_ns = kvmemd_now_ns() + INDEX_GAP_NS;
	v->written = gen;
	v->n_.indexes++;
	v->n_.indexed = v->nbuilt;
	/* What this index no longer names is free. */
	for (i = n = 0; i < v->nheld; i++) {
		if (v->held[i].generation < gen)
			kvmemd_store_free(v->st, v->held[i].unit,
					  v->held[i].units);
		else
			v->held[n++] = v->held[i];
	}
	v->nheld = n;
}

/* The index of the blocks on the store to v->ibuf; its checksums are
 * index_work()'s. */
static int index_image(struct kvmemd_prefix_disk *v)
{
	const struct kvmemd_prefix_disk_ent *e;
	struct disk_hdr *h;
	uint32_t n = 0;
	size_t len = sizeof(*h) + (size_t)v->n * sizeof(struct disk_rec);
	uint8_t *buf = malloc(len), *p;

	if (!buf)
		return -ENOMEM;
	p = buf + sizeof(*h);
	for (e = v->head; e; e = e->next) {
		if (e->state != ENT_STORED)
			continue;
		memcpy(p, &e->r, sizeof(e->r));
		p += sizeof(e->r);
		n++;
	}
	h = (struct disk_hdr *)buf;
	memset(h, 0, sizeof(*h));
	memcpy(h->magic, DISK_MAGIC, sizeof(DISK_MAGIC));
	h->version = DISK_VERSION;
	h->ent_size = sizeof(struct disk_rec);
	memcpy(h->store_uuid, v->uuid, sizeof(h->store_uuid));
	h->generation = ++v->built;
	h->nblocks = n;
	v->nbuilt = n;
	h->body_bytes = (uint64_t)n * sizeof(struct disk_rec);
	v->ibuf = buf;
	v->ilen = sizeof(*h) + h->body_bytes;
	return 0;
}

/* The index as the blocks are now, to a worker (@now: written here). */
static void index_write(struct kvmemd_prefix_disk *v, int now)
{
	if (!v->dirty || v->busy || (!now && kvmemd_now_ns() < v->retry_ns))
		return;
	if (index_image(v)) {
		v->n_.index_errors++;
		return;
	}
	v->dirty = 0;
	v->busy = 1;
	v->iwork.fn = index_work;
	v->iwork.done = index_done;
	if (!now && v->d->workers &&
	    !kvmemd_workers_queue(v->d->workers, &v->iwork))
		return;
	if (!now) {
		/* The queue is full: at the next iteration. */
		free(v->ibuf);
		v->ibuf = NULL;
		v->built--;
		v->busy = 0;
		v->dirty = 1;
		return;
	}
	index_work(&v->iwork);
	index_done(&v->iwork);
}

/*
 * Cold blocks unattached for store.retain_seconds go, from the least
 * recently used on (the list is in the order of ->r.used). Return: in how
 * many seconds the next would, or 0 for none.
 */
static uint64_t expire(struct kvmemd_prefix_disk *v)
{
	const uint64_t keep = v->d->cfg.store_retain_s;
	const uint64_t now = (uint64_t)time(NULL);
	struct kvmemd_prefix_disk_ent *e, *next;

	if (!keep)
		return 0;
	for (e = v->head; e; e = next) {
		next = e->next;
		if (e->r.used + keep > now)
			return e->r.used + keep - now;
		if (e->state != ENT_STORED || e->b)
			continue;
		v->n_.expired++;
		ent_remove(v, e);
	}
	return 0;
}

/* Blocks in memory that are not on the store (writes were put off) go,
 * until one is put off again. */
static void blocks_write(struct kvmemd *d, struct kvmemd_prefix_disk *v)
{
	struct kvmemd_prefix_block *b;

	v->missing = 0;
	for (b = kvmemd_prefix_oldest(d); b; b = b->anext)
		if (!b->disk && block_add(d, v, b) == -EAGAIN) {
			v->missing = 1;
			break;
		}
}

/* The most time between two looks at the blocks on the store: for what
 * was not written, and store.retain_* that a reload changed. */
#define LOOK_NS (10ull * 1000000000ull)

uint64_t kvmemd_prefix_disk_run(struct kvmemd *d, uint64_t now)
{
	struct kvmemd_prefix_disk *v = disk(d);
	const struct kvmemd_config *c = &d->cfg;
	uint64_t in;

	if (!v)
		return UINT64_MAX;
	if (now >= v->next_look || c->store_retain_s != v->retain_s ||
	    c->store_retain_bytes != v->retain_b ||
	    c->store_retain_percent != v->retain_pct) {
		v->retain_s = c->store_retain_s;
		v->retain_b = c->store_retain_bytes;
		v->retain_pct = c->store_retain_percent;
		in = expire(v);
		make_room(v, 0, retain_bytes(v));
		if (v->missing)
			blocks_write(d, v);
		v->next_look = now + LOOK_NS;
		if (in && in * 1000000000ull < LOOK_NS)
			v->next_look = now + in * 1000000000ull;
	}
	index_write(v, 0);
	if (v->dirty && !v->busy && v->retry_ns < v->next_look)
		return v->retry_ns;
	return v->next_look;
}

void kvmemd_prefix_disk_flush(struct kvmemd *d)
{
	struct kvmemd_prefix_disk *v = disk(d);

	if (v)
		index_write(v, 1);
}

/* ---- at start ---------------------------------------------------------- */

/* kvmemd_file_pair_read()'s check of an index of @size bytes at @buf, for
 * the store of @ctx: 0 with its generation, or why not. */
static int index_check(const uint8_t *buf, size_t size, void *ctx,
		       uint64_t *generation, char *why, size_t len)
{
	const struct kvmemd_prefix_disk *v = ctx;
	struct disk_hdr h;

	if (size < sizeof(h)) {
		snprintf(why, len, "%zu bytes, shorter than its header", size);
		return -EINVAL;
	}
	memcpy(&h, buf, sizeof(h));
	if (memcmp(h.magic, DISK_MAGIC, sizeof(DISK_MAGIC)) ||
	    h.crc != kvmem_crc32c(0, buf, offsetof(struct disk_hdr, crc))) {
		snprintf(why, len,
			 "not an index of blocks on a store, or damaged");
		return -EINVAL;
	}
	if (h.version != DISK_VERSION ||
	    h.ent_size != sizeof(struct disk_rec)) {
		snprintf(why, len,
			 "written by another version of kvmemd (index %u, "
			 "this one reads %u)",
			 h.version, DISK_VERSION);
		return -EPROTO;
	}
	if (memcmp(h.store_uuid, v->uuid, sizeof(v->uuid))) {
		snprintf(why, len,
			 "it names the units of another store (formatted "
			 "anew, or another file)");
		return -ESTALE;
	}
	if (h.body_bytes != size - sizeof(h) ||
	    h.body_bytes != (uint64_t)h.nblocks * sizeof(struct disk_rec) ||
	    h.body_crc != kvmem_crc32c(0, buf + sizeof(h), h.body_bytes)) {
		snprintf(why, len, "its entries are cut short or damaged");
		return -EINVAL;
	}
	*generation = h.generation;
	return 0;
}

/* The newer index of the two that verifies, or -ENOENT (each refused said
 * in the log). */
static int index_read(struct kvmemd_prefix_disk *v, uint8_t **buf)
{
	const char *const paths[2] = { v->path[0], v->path[1] };
	struct kvmemd_file_pair r;
	int i, ret;

	ret = kvmemd_file_pair_read(paths, index_check, v, &r);
	for (i = 0; i < 2; i++)
		if (r.present[i] && !r.ok[i])
			kvmemd_log(LOG_ERR,
				   "%s: %s; no block on the store is taken "
				   "back from it",
				   paths[i], r.why[i]);
	if (ret)
		return ret;
	*buf = r.buf;
	v->built = v->written = r.generation;
	v->n_.indexed = ((const struct disk_hdr *)r.buf)->nblocks;
	return 0;
}

/* The block of @r as prefix.c names a block, without its pages. */
static void rec_name(const struct disk_rec *r, struct kvmemd_prefix_block *n)
{
	memset(n, 0, sizeof(*n));
	memcpy(n->key, r->key, sizeof(n->key));
	n->g = r->g;
	n->digest = kvmem_geometry_digest(&r->g);
	n->token_start = r->token_start;
	n->ntokens = r->ntokens;
	n->layers = r->layers;
	n->page_bytes = r->page_bytes;
	n->kind = r->kind;
	n->layout = r->layout;
	n->tenant = r->tenant;
	n->fd = -1;
}

/*
 * Read the record of @r into @buf (@r->units units, aligned) and check it
 * end to end. Any thread. Return: the verdict, KVMEMD_REMOTE_VERDICTS when
 * the read failed (its errno in *@err).
 */
static enum kvmemd_remote_verdict rec_read(struct kvmemd_store *st,
					   const struct disk_rec *r,
					   uint8_t *buf, int *err)
{
	struct kvmemd_remote_want w;
	struct kvmem_ecc_counts c;

	*err = kvmemd_store_pio(st, KVMEMD_IO_READ, r->unit, buf,
				(size_t)r->units * KVMEMD_STORE_UNIT);
	if (*err)
		return KVMEMD_REMOTE_VERDICTS;
	memset(&w, 0, sizeof(w));
	w.g = &r->g;
	w.tenant = r->tenant;
	w.fingerprint =
		kvmemd_remote_fingerprint(&r->g, r->kind, r->page_bytes);
	w.hash = r->key;
	w.token_start = r->token_start;
	w.ntokens = r->ntokens;
	w.page_bytes = r->page_bytes;
	w.kind = r->kind;
	memset(&c, 0, sizeof(c));
	return kvmemd_remote_record_check(
		buf, kvmemd_remote_record_len(r->layers, r->page_bytes), &w,
		&c);
}

static int verdict_good(enum kvmemd_remote_verdict v)
{
	return v == KVMEMD_REMOTE_GOOD || v == KVMEMD_REMOTE_REPAIRED;
}

/* Why a record was not taken, for the log. */
static void verdict_why(enum kvmemd_remote_verdict v, int err, char *why,
			size_t len)
{
	if (v == KVMEMD_REMOTE_VERDICTS)
		snprintf(why, len, "reading it: %s", strerror(-err));
	else
		snprintf(why, len, "its record is refused (%s)",
			 kvmemd_remote_verdict_names[v]);
}

/* The block of @r, its record checked at @buf, kept in memory as prefix.*
 * limits allow: 0, or why not (it stays on the store). */
static int rec_keep(struct kvmemd *d, const struct disk_rec *r,
		    const uint8_t *buf)
{
	struct kvmemd_prefix_block name, *b;
	int ret;

	rec_name(r, &name);
	ret = kvmemd_prefix_stage(d, r->tenant, &name, &b);
	if (ret)
		return ret;
	kvmemd_remote_record_unpack(buf, b);
	/* kvmemd_prefix_disk_add() finds the entry of @r and links the
	 * two. */
	return kvmemd_prefix_keep(d, b);
}

/* The entries of the index @buf, their units claimed; each whose block
 * this kvmemd has in memory linked to it. */
static void index_take(struct kvmemd_prefix_disk *v, const uint8_t *buf)
{
	const struct disk_hdr *h = (const void *)buf;
	const struct disk_rec *r = (const void *)(buf + sizeof(*h));
	char name[KVMEMD_TENANT_NAME_LEN];
	struct kvmemd_prefix_block n, *b;
	struct kvmemd_prefix_disk_ent *e;
	const char *why;
	uint32_t i;

	for (i = 0; i < h->nblocks; i++, r++) {
		rec_name(r, &n);
		why = NULL;
		if (!kvmemd_prefix_shape_ok(&n) ||
		    r->units != (kvmemd_remote_record_len(r->layers,
							  r->page_bytes) +
				 KVMEMD_STORE_UNIT - 1) /
					KVMEMD_STORE_UNIT)
			why = "its entry names no block this kvmemd keeps";
		else if (ent_find(v, r->tenant, r->key, &r->g, n.digest,
				  r->token_start, r->ntokens))
			why = "the index names it twice";
		else if (kvmemd_store_claim(v->st, r->unit, r->units))
			why = "its units are not free (another's, or "
			      "outside the store)";
		if (why) {
			v->n_.refused++;
			kvmemd_log(LOG_WARNING,
				   "prefix: a block of %s on the store (tokens "
				   "%u-%u) is not taken back: %s",
				   kvmemd_prefix_tenant_name(r->tenant, name),
				   r->token_start,
				   r->token_start + r->ntokens - 1, why);
			continue;
		}
		e = ent_add(v, r, ENT_STORED);
		if (!e) {
			kvmemd_store_free(v->st, r->unit, r->units);
			v->n_.refused++;
			continue;
		}
		b = kvmemd_prefix_find(v->d, r->tenant, r->key, &r->g, n.digest,
				       r->token_start, r->ntokens, 0);
		if (b) {
			e->b = b;
			b->disk = e;
		}
	}
}

/* At start, records are read and checked on threads of their own, a batch
 * at a time, while the loop's thread keeps the batch before in memory. */
#define BATCH_BYTES (64ull << 20)
#define BATCH_MAX 1024u
#define READERS_MAX 16u

struct batch {
	struct kvmemd_store *st;
	struct kvmemd_prefix_disk_ent *e[BATCH_MAX];
	uint8_t *buf[BATCH_MAX];
	enum kvmemd_remote_verdict verdict[BATCH_MAX];
	int err[BATCH_MAX];
	uint32_t n, next; /* next: the first not taken by a reader */
	pthread_t th[READERS_MAX];
	uint32_t nth;
};

static void *batch_reader(void *arg)
{
	struct batch *t = arg;
	uint32_t i;

	while ((i = __atomic_fetch_add(&t->next, 1, __ATOMIC_RELAXED)) < t->n) {
		t->verdict[i] = KVMEMD_REMOTE_VERDICTS;
		t->err[i] = -ENOMEM;
		if (posix_memalign((void **)&t->buf[i], KVMEMD_STORE_UNIT,
				   (size_t)t->e[i]->r.units *
					   KVMEMD_STORE_UNIT)) {
			t->buf[i] = NULL;
			continue;
		}
		t->verdict[i] =
			rec_read(t->st, &t->e[i]->r, t->buf[i], &t->err[i]);
	}
	return NULL;
}

/* The entries from @e back (to the most recently used) that have no block
 * in memory, into @t, up to a batch's worth: the entry to go on from. */
static struct kvmemd_prefix_disk_ent *
batch_fill(struct batch *t, struct kvmemd_prefix_disk_ent *e)
{
	uint64_t bytes = 0;

	for (t->n = 0; e && t->n < BATCH_MAX && bytes < BATCH_BYTES;
	     e = e->prev) {
		if (e->b)
			continue;
		t->e[t->n++] = e;
		bytes += (uint64_t)e->r.units * KVMEMD_STORE_UNIT;
	}
	return e;
}

/* @t's records read and checked by up to @readers threads. */
static void batch_start(struct batch *t, uint32_t readers)
{
	t->next = 0;
	for (t->nth = 0; t->nth < readers && t->nth < t->n; t->nth++)
		if (pthread_create(&t->th[t->nth], NULL, batch_reader, t))
			break;
}

/* Once they are: those a thread could not take, here. */
static void batch_wait(struct batch *t)
{
	uint32_t i;

	for (i = 0; i < t->nth; i++)
		pthread_join(t->th[i], NULL);
	batch_reader(t);
}

/* @t's blocks kept in memory, in order, as long as prefix.* limits take
 * them; those that failed their checks go. Return: 1 once the limits are
 * reached. */
static int batch_keep(struct kvmemd_prefix_disk *v, struct batch *t, int full)
{
	char why[KVMEM_MESSAGE_LEN], name[KVMEMD_TENANT_NAME_LEN];
	struct kvmemd_prefix_disk_ent *x;
	uint32_t i;

	for (i = 0; i < t->n; i++) {
		x = t->e[i];
		v->n_.repaired += t->verdict[i] == KVMEMD_REMOTE_REPAIRED;
		if (!verdict_good(t->verdict[i])) {
			verdict_why(t->verdict[i], t->err[i], why, sizeof(why));
			v->n_.refused++;
			kvmemd_log(LOG_WARNING,
				   "prefix: a block of %s on the store (tokens "
				   "%u-%u) is not taken back: %s; dropped",
				   kvmemd_prefix_tenant_name(x->r.tenant, name),
				   x->r.token_start,
				   x->r.token_start + x->r.ntokens - 1, why);
			ent_remove(v, x);
		} else if (!full) {
			/* Past prefix.* limits, the rest stay cold until
			 * fetched. */
			full = !!rec_keep(v->d, &x->r, t->buf[i]);
			v->n_.taken += !full;
		}
		free(t->buf[i]);
		t->buf[i] = NULL;
	}
	return full;
}

/* Each entry with no block in memory read back, most recently used first,
 * as long as prefix.* limits take them, the rest left cold; one that fails
 * its checks goes. */
static void blocks_read(struct kvmemd_prefix_disk *v)
{
	const uint32_t readers = v->d->cfg.threads < READERS_MAX
					 ? v->d->cfg.threads
					 : READERS_MAX;
	struct batch *t[2] = { calloc(1, sizeof(struct batch)),
			       calloc(1, sizeof(struct batch)) };
	struct kvmemd_prefix_disk_ent *e = v->tail;
	int cur = 0, full = 0;

	if (t[0] && t[1]) {
		t[0]->st = t[1]->st = v->st;
		e = batch_fill(t[0], e);
		batch_start(t[0], readers);
		while (t[cur]->n) {
			batch_wait(t[cur]);
			/* The next batch is read while this one is kept. */
			t[!cur]->n = 0;
			if (!full)
				e = batch_fill(t[!cur], e);
			batch_start(t[!cur], readers);
			full = batch_keep(v, t[cur], full);
			cur = !cur;
		}
	}
	free(t[0]);
	free(t[1]);
}

/* ---- PREFIX_FETCH ------------------------------------------------------ */

struct fetch_job {
	struct kvmemd_work work;
	struct kvmemd *d;
	struct kvmemd_store *st;
	uint32_t n;
	struct disk_rec r[KVMEM_PREFIX_FETCH_MAX];
	uint8_t *buf[KVMEM_PREFIX_FETCH_MAX];
	enum kvmemd_remote_verdict verdict[KVMEM_PREFIX_FETCH_MAX];
	int err[KVMEM_PREFIX_FETCH_MAX];
	void (*done)(void *ctx, int res);
	void *ctx; /* NULL once forgotten */
	/* blocks an operator dropped meanwhile: not kept */
	uint8_t dropped[KVMEM_PREFIX_FETCH_MAX];
	struct fetch_job *next; /* the reads under way */
};

/* The blocks of @tenant (@key: that one) that reads under way bring are
 * not kept. */
static void fetches_drop(struct kvmemd_prefix_disk *v, uint64_t tenant,
			 const uint8_t *key)
{
	struct fetch_job *j;
	uint32_t i;

	for (j = v->fetches; j; j = j->next)
		for (i = 0; i < j->n; i++)
			if (j->r[i].tenant == tenant &&
			    (!key ||
			     !memcmp(j->r[i].key, key, sizeof(j->r[i].key))))
				j->dropped[i] = 1;
}

/* On a worker: the records, each checked, up to the first that fails. */
static void fetch_work(struct kvmemd_work *w)
{
	struct fetch_job *j = (struct fetch_job *)w;
	uint32_t i;

	for (i = 0; i < j->n; i++) {
		j->verdict[i] = KVMEMD_REMOTE_VERDICTS;
		j->err[i] = -ENOMEM;
		if (posix_memalign((void **)&j->buf[i], KVMEMD_STORE_UNIT,
				   (size_t)j->r[i].units * KVMEMD_STORE_UNIT)) {
			j->buf[i] = NULL;
			break;
		}
		j->verdict[i] =
			rec_read(j->st, &j->r[i], j->buf[i], &j->err[i]);
		if (!verdict_good(j->verdict[i]))
			break;
	}
}

/* @r's entry, if it is still on the store, goes: its record failed. */
static void fetch_refused(struct kvmemd_prefix_disk *v,
			  const struct disk_rec *r,
			  enum kvmemd_remote_verdict verdict, int err)
{
	char why[KVMEM_MESSAGE_LEN], name[KVMEMD_TENANT_NAME_LEN];
	struct kvmemd_prefix_disk_ent *e;

	e = ent_find(v, r->tenant, r->key, &r->g, kvmem_geometry_digest(&r->g),
		     r->token_start, r->ntokens);
	if (!e || e->state != ENT_STORED || e->r.unit != r->unit || e->b)
		return;
	verdict_why(verdict, err, why, sizeof(why));
	kvmemd_log_rl(&v->log_write, "prefix store reads refused", LOG_WARNING,
		      "prefix: a block of %s on the store (tokens %u-%u) is "
		      "not fetched: %s; dropped",
		      kvmemd_prefix_tenant_name(r->tenant, name),
		      r->token_start, r->token_start + r->ntokens - 1, why);
	v->n_.refused++;
	ent_remove(v, e);
}

/* On the loop: the leading good blocks kept, then the op told. */
static void fetch_done(struct kvmemd_work *w)
{
	struct fetch_job *j = (struct fetch_job *)w, **pp;
	struct kvmemd_prefix_disk *v = disk(j->d);
	uint32_t i, kept = 0;
	int ret = 0;

	for (pp = v ? &v->fetches : NULL; pp && *pp; pp = &(*pp)->next)
		if (*pp == j) {
			*pp = j->next;
			break;
		}
	for (i = 0; i < j->n && !ret; i++) {
		if (j->dropped[i]) {
			ret = -ENOENT;
			break;
		}
		if (!verdict_good(j->verdict[i])) {
			/* A record that fails its checks goes; a read that
			 * failed may not next time. */
			if (v && j->verdict[i] != KVMEMD_REMOTE_VERDICTS)
				fetch_refused(v, &j->r[i], j->verdict[i],
					      j->err[i]);
			ret = -ENOENT;
			break;
		}
		if (v)
			v->n_.repaired +=
				j->verdict[i] == KVMEMD_REMOTE_REPAIRED;
		ret = rec_keep(j->d, &j->r[i], j->buf[i]);
		if (ret == -EEXIST)
			ret = 0;
		if (!ret) {
			kept++;
			if (v)
				v->n_.fetched++;
		}
	}
	for (i = 0; i < j->n; i++)
		free(j->buf[i]);
	if (j->ctx)
		j->done(j->ctx, kept || ret == -ENOENT ? (int)kept : ret);
	free(j);
}

int kvmemd_prefix_disk_fetch(struct kvmemd *d,
			     const struct kvmemd_remote_fetch *f, void **out)
{
	struct kvmemd_prefix_disk *v = disk(d);
	struct kvmemd_prefix_disk_ent *e;
	struct fetch_job *j;
	uint32_t i;

	if (!v || !d->workers)
		return -ENOENT;
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	for (i = 0; i < f->n && i < KVMEM_PREFIX_FETCH_MAX; i++) {
		e = ent_find(v, f->tenant, f->hash[i + 1], &f->g, f->digest,
			     f->start[i], f->ntokens[i]);
		if (!e || e->state != ENT_STORED)
			break;
		j->r[i] = e->r;
	}
	if (!i) {
		free(j);
		return -ENOENT;
	}
	j->n = i;
	j->d = d;
	j->st = v->st;
	j->done = f->done;
	j->ctx = f->ctx;
	j->work.fn = fetch_work;
	j->work.done = fetch_done;
	if (kvmemd_workers_queue(d->workers, &j->work)) {
		free(j);
		return -EAGAIN;
	}
	j->next = v->fetches;
	v->fetches = j;
	*out = j;
	return 0;
}

void kvmemd_prefix_disk_forget(void *job)
{
	((struct fetch_job *)job)->ctx = NULL;
}

/* Blocks are not kept on the store: an index a former kvmemd wrote goes,
 * since the units it names are anyone's from now on. */
static void index_remove(const struct kvmemd *d)
{
	char path[DISK_PATH_MAX];
	int i, n = 0;

	for (i = 0; i < 2; i++)
		if (snprintf(path, sizeof(path), DISK_INDEX, d->cfg.state_dir,
			     i) < (int)sizeof(path))
			n += !unlink(path);
	if (n)
		kvmemd_log(LOG_NOTICE,
			   "prefix: blocks are not kept on the store "
			   "(prefix.keep, store.path, store.retain_bytes): "
			   "those a former kvmemd kept there are forgotten");
}

void kvmemd_prefix_disk_load(struct kvmemd *d, struct kvmemd_store *st)
{
	struct kvmemd_prefix_disk *v;
	uint8_t *buf = NULL;

	if (!st || !disk_on(d)) {
		index_remove(d);
		return;
	}
	v = disk_new(d, st);
	if (!v) {
		kvmemd_log(LOG_ERR, "prefix: out of memory; no block on the "
				    "store is taken back");
		return;
	}
	if (!index_read(v, &buf)) {
		index_take(v, buf);
		free(buf);
		blocks_read(v);
	}
	/* Blocks only in memory (from the descriptor store, or a kvmemd
	 * that wrote none) go to the store too. */
	blocks_write(d, v);
	v->n_.start_refused = v->n_.refused;
	if (v->n_.taken || v->n_.refused)
		kvmemd_log(LOG_NOTICE,
			   "prefix: %" PRIu64 " blocks taken back from the "
			   "store (%" PRIu64 " refused), %" PRIu64 " on it",
			   v->n_.taken, v->n_.refused, v->stored);
}

void kvmemd_prefix_disk_exit(struct kvmemd *d)
{
	struct kvmemd_prefix_disk *v = d->prefix_disk;
	struct kvmemd_prefix_disk_ent *e, *next;

	if (!v)
		return;
	for (e = v->head; e; e = next) {
		next = e->next;
		if (e->b)
			e->b->disk = NULL;
		free(e);
	}
	free(v->table);
	free(v->held);
	free(v->ibuf);
	free(v);
	d->prefix_disk = NULL;
}

void kvmemd_prefix_disk_stats(const struct kvmemd *d,
			      struct kvmemd_prefix_disk_stats *out)
{
	const struct kvmemd_prefix_disk *v = d->prefix_disk;

	memset(out, 0, sizeof(*out));
	if (!v)
		return;
	*out = v->n_;
	out->on = 1;
	out->blocks = v->stored;
	out->bytes = v->stored_bytes;
	out->limit = retain_bytes(v);
	out->held = v->nheld;
	out->generation = v->written;
}
