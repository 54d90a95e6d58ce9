/* SPDX-License-Identifier: MIT */
/*
 * prefix.c - published prefixes: blocks of sealed pages a session copied
 * out under a key, which later sessions of the same tenant attach
 *
 * The tenant is the uid, or a group of daemon.tenants that the client is
 * in (kvmemd_prefix_tenant()). Its sessions trust each other's publishes:
 * nothing checks K/V against their key; prefix.publishers narrows who
 * publishes for a group (kvmemd_prefix_may_publish()). Each tenant has a
 * table of its own (chained hash, keyed with a secret of this process so
 * that a client cannot choose which of its keys share a chain) and an LRU
 * list, most recently used first. A lookup reads that tenant's table
 * only: whether another tenant published a key, and how many keys it
 * has, changes neither the answer nor the work.
 *
 * Memory. A tenant keeps at most its cap, prefix.uid_bytes (prefix.bytes
 * when uid_bytes is 0 or larger): a publish past it evicts the tenant's
 * own least recently used blocks. All tenants together keep at most
 * prefix.bytes, in fair shares: prefix.bytes divided among the tenants
 * that keep blocks or have some on their way, the publisher among them,
 * at most the cap. A publish that prefix.bytes lacks room for evicts,
 * least recently used first across them, blocks of the tenants that keep
 * more than their fair share (the publisher counted with its new block),
 * and takes no more from a tenant once it is within its share: the last
 * block a tenant loses may leave it below by less than that block, never
 * more. A block attached lately is recent, not safe. A block a session is
 * partway through attaching (an attach of several ops) is passed over
 * while its tenant's blocks in use are within its fair share; past it
 * they protect nothing, or attaching would hold memory for ever. Blocks
 * on their way are in no table, never evicted, and count in their
 * tenant's cap. When what may go cannot make the room, nothing goes and
 * the publish fails with -ENOSPC, whatever the number of tenants.
 *
 * So a publish that leaves its tenant within its fair share always finds
 * room (the others keep more than prefix.bytes less that share, so some
 * are over theirs by as much). What a publish does depends on the
 * tenant's own blocks and counts, and, only while prefix.bytes is full,
 * on how many bytes the others keep and how lately they used them, never
 * on their keys or content; a tenant over its share learns from its own
 * evictions that others publish, not what. Making room costs a pass over
 * the tenants for each block evicted. A block nobody attached for
 * prefix.idle_seconds goes, and a tenant left with none stops counting:
 * that depends on the tenant's own use alone. Blocks live in kvmemd's
 * memory, beside the host pool (with prefix.keep, in memfds that the next
 * kvmemd takes back: prefix-save.c); the scrubber's passes check and
 * correct them as they check sessions' pages (kvmemd_prefix_scrub()).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "kvmem/inject.h"
#include "json.h"
#include "prefix.h"

/* The most blocks "prefixes UID" lists. */
#define LIST_MAX 4096

struct tenant {
	uint64_t id; /* a uid, or KVMEMD_TENANT_GROUP | gid */
	struct kvmemd_prefix_block **table; /* [nbuckets] */
	uint32_t nbuckets, nblocks;
	uint64_t bytes; /* of the blocks kept */
	uint64_t inuse; /* of those sessions are partway through attaching */
	uint64_t staged; /* of blocks on their way, one a session at most */
	struct kvmemd_prefix_block *head, *tail; /* LRU */
	uint64_t hits, misses, published, evicted, expired, damaged;
	uint64_t corrected; /* words the scrubber corrected in its blocks */
};

/* Where a scrubber's pass is: the page @layer of @b, NULL past the end. */
struct walk {
	struct kvmemd_prefix_block *b;
	uint32_t layer;
	int begun; /* @b was taken: a rewound walk starts at the oldest */
};

struct kvmemd_prefixes {
	struct kvmemd *d;
	uint64_t seed[2];
	struct tenant *tenants;
	uint32_t ntenants, cap;
	uint64_t bytes, blocks;
	/* since start, all tenants, the ones that are gone included */
	uint64_t hits, misses, published, evicted, expired, damaged, refused;
	uint64_t corrected;
	struct kvmemd_prefix_block *first, *last; /* kept, oldest first */
	struct kvmemd_ratelimit log_expired; /* a line a block at worst */
	struct kvmemd_ratelimit log_refused; /* a line a publish at worst */
	struct walk walk[KVMEMD_PREFIX_WALKS];
};

int kvmemd_prefix_init(struct kvmemd *d)
{
	struct kvmemd_prefixes *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	if (getrandom(p->seed, sizeof(p->seed), GRND_NONBLOCK) !=
	    sizeof(p->seed)) {
		p->seed[0] = kvmemd_now_ns() ^ 0x9e3779b97f4a7c15ull;
		p->seed[1] = (uint64_t)(uintptr_t)p * 0xff51afd7ed558ccdull;
	}
	p->d = d;
	d->prefix = p;
	return 0;
}

/*
 * A block's pages have a mapping of their own: blocks of tens of KiB come
 * and go by the thousand, and from malloc()'s heap the memory of those
 * that went stayed resident (27 MiB of 32 MiB after every block was
 * dropped), so kvmemd used more than prefix.bytes says. Unmapped, it is
 * the system's again at once. A block kept across restarts has a memfd
 * instead, the same memory to the accounting.
 */
static uint8_t *data_alloc(const struct kvmemd *d,
			   struct kvmemd_prefix_block *b)
{
	void *p;

	if (kvmemd_prefix_save_on(d))
		return kvmemd_prefix_save_map(b);
	p = mmap(NULL, (size_t)b->layers * b->page_bytes,
		 PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void data_free(struct kvmemd_prefix_block *b)
{
	if (b->data)
		munmap(b->data, (size_t)b->layers * b->page_bytes);
	b->data = NULL;
}

static void block_free(struct kvmemd_prefix_block *b)
{
	free(b->pages);
	data_free(b);
	if (b->fd >= 0)
		close(b->fd);
	free(b);
}

void kvmemd_prefix_exit(struct kvmemd *d)
{
	struct kvmemd_prefixes *p = d->prefix;
	struct kvmemd_prefix_block *b, *next;
	uint32_t i;

	/* The blocks in systemd's store stay there for the next kvmemd, as
	 * those on the backing store. */
	kvmemd_prefix_save_exit(d);
	kvmemd_prefix_disk_exit(d);
	if (!p)
		return;
	for (i = 0; i < p->ntenants; i++) {
		for (b = p->tenants[i].head; b; b = next) {
			next = b->next;
			block_free(b);
		}
		free(p->tenants[i].table);
	}
	free(p->tenants);
	free(p);
	d->prefix = NULL;
}

/* The most one tenant may keep: prefix.uid_bytes, at most prefix.bytes. */
static uint64_t cap(const struct kvmemd *d)
{
	const uint64_t u = d->cfg.prefix_uid_bytes;

	return u && u < d->cfg.prefix_bytes ? u : d->cfg.prefix_bytes;
}

/*
 * A tenant's fair share: prefix.bytes among the tenants that keep blocks
 * or have some on their way, and @more besides, at most cap(). Tenants
 * left with nothing count for nothing before they are pruned.
 */
static uint64_t fair(const struct kvmemd *d, uint32_t more)
{
	const struct kvmemd_prefixes *p = d->prefix;
	uint64_t n = more, f;
	uint32_t i;

	for (i = 0; i < p->ntenants; i++)
		n += p->tenants[i].nblocks || p->tenants[i].staged;
	f = n ? d->cfg.prefix_bytes / n : d->cfg.prefix_bytes;
	return f < cap(d) ? f : cap(d);
}

uint64_t kvmemd_prefix_tenant(const struct kvmemd_config *cfg, uid_t uid,
			      gid_t gid, const gid_t *groups, int ngroups)
{
	unsigned int i;
	int j;

	for (i = 0; i < cfg->n_tenant_gids; i++) {
		if (cfg->tenant_gids[i] == gid)
			return KVMEMD_TENANT_GROUP | gid;
		for (j = 0; j < ngroups; j++)
			if (cfg->tenant_gids[i] == groups[j])
				return KVMEMD_TENANT_GROUP | groups[j];
	}
	return uid;
}

char *kvmemd_prefix_tenant_name(uint64_t tenant,
				char buf[KVMEMD_TENANT_NAME_LEN])
{
	snprintf(buf, KVMEMD_TENANT_NAME_LEN, "%cid %u",
		 tenant & KVMEMD_TENANT_GROUP ? 'g' : 'u', (uint32_t)tenant);
	return buf;
}

int kvmemd_prefix_may_publish(struct kvmemd *d, uint64_t tenant, uid_t uid)
{
	const struct kvmemd_config *cfg = &d->cfg;
	struct kvmemd_prefixes *p = d->prefix;
	char name[KVMEMD_TENANT_NAME_LEN];
	unsigned int i;
	int listed = 0;

	if (!(tenant & KVMEMD_TENANT_GROUP))
		return 0;
	for (i = 0; i < cfg->n_publishers; i++) {
		if (cfg->publishers[i].gid != (gid_t)tenant)
			continue;
		if (cfg->publishers[i].uid == uid)
			return 0;
		listed = 1;
	}
	if (!listed)
		return 0;
	p->refused++;
	kvmemd_log_rl(&p->log_refused, "prefix publishes refused", LOG_NOTICE,
		      "prefix: uid %u may not publish for %s "
		      "(prefix.publishers)",
		      (unsigned int)uid,
		      kvmemd_prefix_tenant_name(tenant, name));
	return -EPERM;
}

/* ---- a tenant's table ------------------------------------------------- */

static uint64_t mix(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ull;
	k ^= k >> 33;
	return k;
}

static uint32_t bucket(const struct kvmemd_prefixes *p, const struct tenant *t,
		       const uint8_t *key, uint64_t digest,
		       uint32_t token_start)
{
	uint64_t h = p->seed[0] ^ digest, w;
	size_t i;

	for (i = 0; i < KVMEM_PREFIX_KEY_BYTES; i += sizeof(w)) {
		memcpy(&w, key + i, sizeof(w));
		h = mix(h ^ w ^ p->seed[1]);
	}
	h = mix(h ^ token_start);
	return (uint32_t)h & (t->nbuckets - 1);
}

static struct tenant *tenant_find(struct kvmemd_prefixes *p, uint64_t id)
{
	uint32_t i;

	for (i = 0; i < p->ntenants; i++)
		if (p->tenants[i].id == id)
			return &p->tenants[i];
	return NULL;
}

static struct tenant *tenant_get(struct kvmemd_prefixes *p, uint64_t id)
{
	struct tenant *t = tenant_find(p, id);

	if (t)
		return t;
	if (p->ntenants == p->cap) {
		uint32_t cap = p->cap ? 2 * p->cap : 8;

		t = realloc(p->tenants, cap * sizeof(*t));
		if (!t)
			return NULL;
		p->tenants = t;
		p->cap = cap;
	}
	t = &p->tenants[p->ntenants];
	memset(t, 0, sizeof(*t));
	t->table = calloc(16, sizeof(*t->table));
	if (!t->table)
		return NULL;
	t->nbuckets = 16;
	t->id = id;
	p->ntenants++;
	return t;
}

/* A tenant with nothing published or on its way goes; its counters went
 * into p's. */
static void tenant_put(struct kvmemd_prefixes *p, struct tenant *t)
{
	if (t->nblocks || t->staged)
		return;
	free(t->table);
	*t = p->tenants[--p->ntenants];
}

/* Tenants left with no block, and none on its way, go. */
static void prune(struct kvmemd_prefixes *p)
{
	uint32_t i = 0;

	while (i < p->ntenants)
		if (p->tenants[i].nblocks || p->tenants[i].staged)
			i++;
		else
			tenant_put(p, &p->tenants[i]);
}

static int same(const struct kvmemd_prefix_block *b, const uint8_t *key,
		const struct kvmem_geometry *g, uint32_t token_start,
		uint32_t ntokens)
{
	return b->token_start == token_start && b->ntokens == ntokens &&
	       !memcmp(b->key, key, KVMEM_PREFIX_KEY_BYTES) &&
	       !memcmp(&b->g, g, sizeof(*g));
}

/* Twice the buckets once the blocks outnumber them; not done without
 * memory, which only makes the chains longer. */
static void grow(struct kvmemd_prefixes *p, struct tenant *t)
{
	struct kvmemd_prefix_block **old = t->table, *b, *next;
	uint32_t n = t->nbuckets, i, h;

	if (t->nblocks <= n || n > UINT32_MAX / 4)
		return;
	t->table = calloc(2 * (size_t)n, sizeof(*t->table));
	if (!t->table) {
		t->table = old;
		return;
	}
	t->nbuckets = 2 * n;
	for (i = 0; i < n; i++)
		for (b = old[i]; b; b = next) {
			next = b->hnext;
			h = bucket(p, t, b->key, b->digest, b->token_start);
			b->hnext = t->table[h];
			t->table[h] = b;
		}
	free(old);
}

static void lru_unlink(struct tenant *t, struct kvmemd_prefix_block *b)
{
	if (b->prev)
		b->prev->next = b->next;
	else
		t->head = b->next;
	if (b->next)
		b->next->prev = b->prev;
	else
		t->tail = b->prev;
	b->prev = b->next = NULL;
}

static void lru_front(struct tenant *t, struct kvmemd_prefix_block *b)
{
	b->next = t->head;
	b->prev = NULL;
	if (t->head)
		t->head->prev = b;
	else
		t->tail = b;
	t->head = b;
}

/* Take @b out of @t and free it; with @forget its copy on the store goes
 * too (it was dropped or damaged, not evicted). */
static void block_remove(struct kvmemd_prefixes *p, struct tenant *t,
			 struct kvmemd_prefix_block *b, int forget)
{
	struct kvmemd_prefix_block **pp;
	int i;

	kvmemd_prefix_save_drop(p->d, b);
	kvmemd_prefix_disk_leave(p->d, b, forget);
	pp = &t->table[bucket(p, t, b->key, b->digest, b->token_start)];
	while (*pp != b)
		pp = &(*pp)->hnext;
	*pp = b->hnext;
	lru_unlink(t, b);
	for (i = 0; i < KVMEMD_PREFIX_WALKS; i++)
		if (p->walk[i].b == b) {
			p->walk[i].b = b->anext;
			p->walk[i].layer = 0;
		}
	if (b->aprev)
		b->aprev->anext = b->anext;
	else
		p->first = b->anext;
	if (b->anext)
		b->anext->aprev = b->aprev;
	else
		p->last = b->aprev;
	t->nblocks--;
	t->bytes -= b->bytes;
	p->blocks--;
	p->bytes -= b->bytes;
	if (!b->users) {
		block_free(b);
		return;
	}
	/* A session is partway through attaching it: its pages go now,
	 * the rest with that session's unpin; no lookup finds it. */
	t->inuse -= b->bytes;
	free(b->pages);
	data_free(b);
	b->pages = NULL;
	b->gone = 1;
}

static void evict(struct kvmemd_prefixes *p, struct tenant *t,
		  struct kvmemd_prefix_block *b)
{
	t->evicted++;
	p->evicted++;
	block_remove(p, t, b, 0);
}

/*
 * @t's least recently used block that may be evicted while it keeps more
 * than @fair: one no session is attaching, or any once the blocks in use
 * pass @fair (they protect no more than a fair share). NULL when none.
 */
static struct kvmemd_prefix_block *lru_free(const struct tenant *t,
					    uint64_t fair)
{
	struct kvmemd_prefix_block *b;

	for (b = t->tail; b; b = b->prev)
		if (!b->users || t->inuse > fair)
			return b;
	return NULL;
}

/*
 * What evicting lru_free(@t, @fair) again and again would free, as long
 * as @t, counted with @extra bytes more, keeps more than @goal: @want
 * bytes at most (the walk stops there).
 */
static uint64_t spare(const struct tenant *t, uint64_t extra, uint64_t goal,
		      uint64_t fair, uint64_t want)
{
	const struct kvmemd_prefix_block *b;
	uint64_t held = t->bytes + extra, inuse = t->inuse, n = 0;

	for (b = t->tail; b && held > goal && n < want; b = b->prev) {
		if (b->users && inuse <= fair)
			continue;
		if (b->users)
			inuse -= b->bytes;
		held -= b->bytes;
		n += b->bytes;
	}
	return n;
}

/*
 * The tenant whose lru_free() block is the least recently used among the
 * tenants that keep more than @fair (@t counted with @extra bytes more),
 * that block in *@out; NULL when no tenant over its share has one.
 */
static struct tenant *victim(struct kvmemd_prefixes *p, const struct tenant *t,
			     uint64_t extra, uint64_t fair,
			     struct kvmemd_prefix_block **out)
{
	struct kvmemd_prefix_block *b;
	struct tenant *u, *v = NULL;
	uint32_t i;

	for (i = 0; i < p->ntenants; i++) {
		u = &p->tenants[i];
		if (u->bytes + (u == t ? extra : 0) <= fair)
			continue;
		b = lru_free(u, fair);
		if (b && (!v || b->used < (*out)->used)) {
			v = u;
			*out = b;
		}
	}
	return v;
}

/*
 * Room for @bytes more of @t (NULL: a tenant that keeps nothing yet), as
 * prefix.c's head comment says: @t's own least recently used blocks while
 * it would pass its cap, then, while prefix.bytes would be passed, the
 * least recently used blocks of tenants over their fair share. With
 * @evict_them they go; without, this only says whether they could.
 * Either way nothing goes unless all the room can be made.
 *
 * Return: 0; -EDQUOT when @t's blocks in use leave it no room under its
 * cap; -ENOSPC when the tenants over their share cannot give enough.
 */
static int room(struct kvmemd *d, struct tenant *t, uint64_t bytes,
		int evict_them)
{
	struct kvmemd_prefixes *p = d->prefix;
	const uint64_t max = d->cfg.prefix_bytes,
		       f = fair(d, !t || (!t->nblocks && !t->staged));
	struct kvmemd_prefix_block *b;
	uint64_t own = 0, need = 0, can = 0;
	struct tenant *u;
	uint32_t i;

	if (t && t->bytes + bytes > cap(d)) {
		own = t->bytes + bytes - cap(d);
		if (spare(t, bytes, cap(d), f, own) < own)
			return -EDQUOT;
	}
	if (p->bytes + bytes > max) {
		need = p->bytes + bytes - max;
		for (i = 0; i < p->ntenants && can < need; i++) {
			u = &p->tenants[i];
			can += spare(u, u == t ? bytes : 0, f, f, need - can);
		}
		if (can < need)
			return -ENOSPC;
	}
	if (!evict_them)
		return 0;
	while (t && t->bytes + bytes > cap(d) && (b = lru_free(t, f)))
		evict(p, t, b);
	while (p->bytes + bytes > max && (u = victim(p, t, bytes, f, &b)))
		evict(p, u, b);
	return 0;
}

/* ---- for session.c ---------------------------------------------------- */

struct kvmemd_prefix_block *
kvmemd_prefix_find(struct kvmemd *d, uint64_t tenant, const uint8_t *key,
		   const struct kvmem_geometry *g, uint64_t digest,
		   uint32_t token_start, uint32_t ntokens, int count)
{
	struct kvmemd_prefixes *p = d->prefix;
	struct kvmemd_prefix_block *b = NULL;
	struct tenant *t = tenant_find(p, tenant);

	if (t)
		for (b = t->table[bucket(p, t, key, digest, token_start)]; b;
		     b = b->hnext)
			if (same(b, key, g, token_start, ntokens))
				break;
	if (count && !b) {
		p->misses++;
		if (t)
			t->misses++;
	}
	return b;
}

void kvmemd_prefix_used(struct kvmemd *d, struct kvmemd_prefix_block *b)
{
	struct kvmemd_prefixes *p = d->prefix;
	struct tenant *t = tenant_find(p, b->tenant);

	b->hits++;
	b->used = kvmemd_now_ns();
	t->hits++;
	p->hits++;
	lru_unlink(t, b);
	lru_front(t, b);
	kvmemd_prefix_disk_used(d, b);
}

void kvmemd_prefix_pin(struct kvmemd *d, struct kvmemd_prefix_block *b)
{
	if (!b->users++)
		tenant_find(d->prefix, b->tenant)->inuse += b->bytes;
}

void kvmemd_prefix_unpin(struct kvmemd *d, struct kvmemd_prefix_block *b)
{
	if (--b->users)
		return;
	if (b->gone)
		free(b);
	else
		tenant_find(d->prefix, b->tenant)->inuse -= b->bytes;
}

/* The bytes @name is charged when kept. */
static uint64_t block_bytes(const struct kvmemd_prefix_block *name)
{
	return sizeof(*name) + (uint64_t)name->layers * (sizeof(*name->pages) +
							 name->page_bytes);
}

int kvmemd_prefix_admit(struct kvmemd *d, uint64_t tenant,
			const struct kvmemd_prefix_block *name)
{
	struct kvmemd_prefixes *p = d->prefix;
	struct kvmemd_prefix_block *b;
	struct tenant *t;
	int ret;

	b = kvmemd_prefix_find(d, tenant, name->key, &name->g, name->digest,
			       name->token_start, name->ntokens, 0);
	if (b) {
		t = tenant_find(p, tenant);
		b->used = kvmemd_now_ns();
		lru_unlink(t, b);
		lru_front(t, b);
		return -EEXIST;
	}
	if (!d->cfg.prefix_bytes) {
		p->refused++;
		return -ENOSPC;
	}
	if (block_bytes(name) > cap(d)) {
		p->refused++;
		return -EDQUOT;
	}
	ret = room(d, tenant_find(p, tenant), block_bytes(name), 0);
	if (ret)
		p->refused++;
	return ret;
}

int kvmemd_prefix_stage(struct kvmemd *d, uint64_t tenant,
			const struct kvmemd_prefix_block *name,
			struct kvmemd_prefix_block **out)
{
	struct kvmemd_prefixes *p = d->prefix;
	struct kvmemd_prefix_block *b;
	struct tenant *t;
	int ret;

	ret = kvmemd_prefix_admit(d, tenant, name);
	if (ret)
		return ret;
	t = tenant_get(p, tenant);
	if (!t)
		return -ENOMEM;
	/* Blocks on their way count in the cap, kept ones do not: those
	 * make room when the block is kept. */
	if (t->staged + block_bytes(name) > cap(d)) {
		tenant_put(p, t);
		return -EDQUOT;
	}
	b = calloc(1, sizeof(*b));
	if (b) {
		*b = *name;
		b->fd = -1;
		b->id = 0;
		b->pages = calloc(name->layers, sizeof(*b->pages));
		b->data = data_alloc(d, b);
	}
	if (!b || !b->pages || !b->data) {
		if (b)
			block_free(b);
		tenant_put(p, t);
		return -ENOMEM;
	}
	b->tenant = tenant;
	b->bytes = block_bytes(name);
	b->staged = 0;
	b->hits = 0;
	b->users = 0;
	b->gone = 0;
	b->hnext = b->prev = b->next = b->aprev = b->anext = NULL;
	t->staged += b->bytes;
	*out = b;
	return 0;
}

/* @b, from kvmemd_prefix_stage(), is no longer on its way. */
static struct tenant *unstage(struct kvmemd_prefixes *p,
			      struct kvmemd_prefix_block *b)
{
	struct tenant *t = tenant_find(p, b->tenant);

	t->staged -= b->bytes;
	return t;
}

void kvmemd_prefix_unstage(struct kvmemd *d, struct kvmemd_prefix_block *b)
{
	struct kvmemd_prefixes *p = d->prefix;
	struct tenant *t = unstage(p, b);

	block_free(b);
	tenant_put(p, t);
}

/* @b, in no table, into @t's table, the counts and the scrubber's list,
 * newest; not into the LRU list. */
static void link_block(struct kvmemd_prefixes *p, struct tenant *t,
		       struct kvmemd_prefix_block *b)
{
	uint32_t h;

	t->bytes += b->bytes;
	p->bytes += b->bytes;
	t->nblocks++;
	p->blocks++;
	grow(p, t);
	h = bucket(p, t, b->key, b->digest, b->token_start);
	b->hnext = t->table[h];
	t->table[h] = b;
	b->aprev = p->last;
	b->anext = NULL;
	if (p->last)
		p->last->anext = b;
	else
		p->first = b;
	p->last = b;
}

int kvmemd_prefix_keep(struct kvmemd *d, struct kvmemd_prefix_block *b)
{
	struct kvmemd_prefixes *p = d->prefix;
	struct tenant *t = unstage(p, b);
	int ret;

	/* Things changed since the admission: another session of the tenant
	 * kept the same block, others published, or a reload lowered the
	 * limits. */
	ret = kvmemd_prefix_admit(d, b->tenant, b);
	if (ret) {
		block_free(b);
		tenant_put(p, t);
		return ret;
	}
	/* Cannot fail: the admission just said the room can be made. */
	room(d, t, b->bytes, 1);
	b->published = b->used = kvmemd_now_ns();
	t->published++;
	p->published++;
	link_block(p, t, b);
	lru_front(t, b);
	kvmemd_prefix_save_add(d, b);
	kvmemd_prefix_disk_add(d, b);
	/* Tenants it left with nothing give their tenancy back now. */
	prune(p);
	return 0;
}

struct kvmemd_prefix_block *kvmemd_prefix_oldest(struct kvmemd *d)
{
	return d->prefix->first;
}

int kvmemd_prefix_shape_ok(const struct kvmemd_prefix_block *n)
{
	const struct kvmem_page_layout *a = &n->layout;
	const uint32_t S = n->g.sink_tokens, T = n->g.tokens_per_page;
	struct kvmem_page_layout l;
	int kind;

	if (kvmem_geometry_check(&n->g) || n->layers != n->g.layers)
		return 0;
	/* The kind of block those tokens make, as share.c publishes it. */
	if (S && !n->token_start)
		kind = n->ntokens == S ? KVMEM_SLOT_HOT : -1;
	else
		kind = n->token_start >= S && !((n->token_start - S) % T) &&
				       n->ntokens == T
			       ? KVMEM_SLOT_SEALED
			       : -1;
	if (kind != n->kind || kvmem_page_layout(&n->g, kind, &l))
		return 0;
	return n->page_bytes == l.size && a->size == l.size &&
	       a->scales_off == l.scales_off && a->k_off == l.k_off &&
	       a->v_off == l.v_off && a->checks_off == l.checks_off &&
	       a->nchecks == l.nchecks && a->row_words == l.row_words &&
	       a->row_bytes == l.row_bytes && a->scale_words == l.scale_words &&
	       a->format == l.format && a->codec == l.codec;
}

int kvmemd_prefix_restore(struct kvmemd *d, struct kvmemd_prefix_block *b)
{
	struct kvmemd_prefixes *p = d->prefix;
	struct kvmemd_prefix_block *at;
	struct tenant *t;

	if (kvmemd_prefix_find(d, b->tenant, b->key, &b->g, b->digest,
			       b->token_start, b->ntokens, 0))
		return -EEXIST;
	t = tenant_get(p, b->tenant);
	if (!t)
		return -ENOMEM;
	b->bytes = block_bytes(b);
	b->users = 0;
	b->gone = 0;
	link_block(p, t, b);
	/* The index lists blocks oldest published first, which is mostly
	 * least recently used first too: the walk is short. */
	for (at = t->head; at && at->used > b->used; at = at->next)
		;
	if (!at) {
		b->prev = t->tail;
		b->next = NULL;
		if (t->tail)
			t->tail->next = b;
		else
			t->head = b;
		t->tail = b;
	} else if (!at->prev) {
		lru_front(t, b);
	} else {
		b->prev = at->prev;
		b->next = at;
		at->prev->next = b;
		at->prev = b;
	}
	return 0;
}

void kvmemd_prefix_damaged(struct kvmemd *d, struct kvmemd_prefix_block *b)
{
	struct kvmemd_prefixes *p = d->prefix;
	struct tenant *t = tenant_find(p, b->tenant);
	char name[KVMEMD_TENANT_NAME_LEN];

	kvmemd_log(LOG_WARNING,
		   "prefix: a block of %s (tokens %u-%u, %u layers) no "
		   "longer verifies: dropped",
		   kvmemd_prefix_tenant_name(b->tenant, name), b->token_start,
		   b->token_start + b->ntokens - 1, b->layers);
	t->damaged++;
	p->damaged++;
	block_remove(p, t, b, 1);
	tenant_put(p, t);
}

/* ---- for ras.c -------------------------------------------------------- */

uint64_t kvmemd_prefix_bytes(const struct kvmemd *d)
{
	return d->prefix ? d->prefix->bytes : 0;
}

void kvmemd_prefix_rewind(struct kvmemd *d, enum kvmemd_prefix_walk w)
{
	d->prefix->walk[w].begun = 0;
}

static void add_counts(struct kvmemd_prefix_scrub *out, int codec,
		       const struct kvmem_page_counts *c)
{
	const struct kvmem_ecc_counts *meta[] = { &c->header, &c->scales };
	size_t i;

	for (i = 0; i < ARRAY_SIZE(meta); i++) {
		out->words[KVMEM_PAGE_META_CODEC] += meta[i]->clean +
						     meta[i]->corrected +
						     meta[i]->uncorrectable;
		out->ce[KVMEM_PAGE_META_CODEC] += meta[i]->corrected;
		out->ue[KVMEM_PAGE_META_CODEC] += meta[i]->uncorrectable;
	}
	out->words[codec] += c->payload.clean + c->payload.corrected +
			     c->payload.uncorrectable;
	out->ce[codec] += c->payload.corrected;
	out->ue[codec] += c->payload.uncorrectable;
}

/* Page @l of @b, as the attach checks it: 0, or -EIO when it must go. */
static int page_check(struct kvmemd_prefixes *p, struct tenant *t,
		      struct kvmemd_prefix_block *b, uint32_t l,
		      struct kvmemd_prefix_scrub *out)
{
	uint8_t *page = b->data + (size_t)l * b->page_bytes;
	struct kvmem_page_counts c = { 0 };
	uint64_t fixed;
	int ret;

	out->pages++;
	out->bytes += b->page_bytes;
	if (!kvmem_page_verify(page, &b->g, &c)) {
		add_counts(out, b->layout.codec, &c);
		return 0;
	}
	memset(&c, 0, sizeof(c));
	ret = kvmem_page_scrub(page, &b->g, &c);
	add_counts(out, b->layout.codec, &c);
	fixed = c.header.corrected + c.scales.corrected + c.payload.corrected;
	t->corrected += fixed;
	p->corrected += fixed;
	if (!ret && !kvmem_page_verify(page, &b->g, NULL))
		return 0;
	if (!ret)
		out->crc++;
	return -EIO;
}

int kvmemd_prefix_scrub(struct kvmemd *d, enum kvmemd_prefix_walk which,
			uint64_t *budget, struct kvmemd_prefix_scrub *out)
{
	struct kvmemd_prefixes *p = d->prefix;
	struct walk *w = &p->walk[which];
	struct kvmemd_prefix_block *b;

	if (!w->begun) {
		w->b = p->first;
		w->layer = 0;
		w->begun = 1;
	}
	while ((b = w->b) && *budget) {
		*budget -= *budget < b->page_bytes ? *budget : b->page_bytes;
		if (page_check(p, tenant_find(p, b->tenant), b, w->layer, out)) {
			out->dropped++;
			/* Moves every walk on past it. */
			kvmemd_prefix_damaged(d, b);
			continue;
		}
		if (++w->layer == b->layers) {
			w->b = b->anext;
			w->layer = 0;
		}
	}
	return !w->b;
}

/* ---- for the server and admin.c --------------------------------------- */

void kvmemd_prefix_trim(struct kvmemd *d)
{
	struct kvmemd_prefixes *p = d->prefix;
	struct kvmemd_prefix_block *b;
	struct tenant *t;
	uint32_t i;

	/* As a publish makes room, with nothing to publish; what in use
	 * within a fair share holds stays until its attach ends. */
	for (i = 0; i < p->ntenants; i++) {
		t = &p->tenants[i];
		while (t->bytes > cap(d) && (b = lru_free(t, fair(d, 0))))
			evict(p, t, b);
	}
	prune(p);
	while (p->bytes > d->cfg.prefix_bytes &&
	       (t = victim(p, NULL, 0, fair(d, 0), &b)))
		evict(p, t, b);
	prune(p);
}

uint64_t kvmemd_prefix_run(struct kvmemd *d, uint64_t now)
{
	const uint64_t idle = (uint64_t)d->cfg.prefix_idle_s * 1000000000ull;
	struct kvmemd_prefixes *p = d->prefix;
	char name[KVMEMD_TENANT_NAME_LEN];
	uint64_t next, n;
	struct tenant *t;
	uint32_t i;

	kvmemd_prefix_save_write(d);
	next = kvmemd_prefix_disk_run(d, now);
	if (!idle)
		return next;
	for (i = 0; i < p->ntenants; i++) {
		t = &p->tenants[i];
		for (n = 0; t->tail && t->tail->used + idle <= now; n++) {
			t->expired++;
			p->expired++;
			block_remove(p, t, t->tail, 0);
		}
		if (n)
			kvmemd_log_rl(
				&p->log_expired, "prefix expiries", LOG_INFO,
				"prefix: %" PRIu64 " blocks of %s "
				"unused for %u s: dropped",
				n, kvmemd_prefix_tenant_name(t->id, name),
				d->cfg.prefix_idle_s);
		if (t->tail && t->tail->used + idle < next)
			next = t->tail->used + idle;
	}
	prune(p);
	return next;
}

static void key_hex(const uint8_t *key, char *buf)
{
	static const char hex[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < KVMEM_PREFIX_KEY_BYTES; i++) {
		buf[2 * i] = hex[key[i] >> 4];
		buf[2 * i + 1] = hex[key[i] & 15];
	}
	buf[2 * KVMEM_PREFIX_KEY_BYTES] = '\0';
}

static void counters_json(struct jw *w, uint64_t hits, uint64_t misses,
			  uint64_t published, uint64_t evicted,
			  uint64_t expired, uint64_t damaged,
			  uint64_t corrected)
{
	jw_u64(w, "hits", hits);
	jw_u64(w, "misses", misses);
	jw_u64(w, "published", published);
	jw_u64(w, "evicted", evicted);
	jw_u64(w, "expired", expired);
	jw_u64(w, "damaged", damaged);
	jw_u64(w, "corrected", corrected);
}

void kvmemd_prefix_stats_json(const struct kvmemd *d, struct jw *w)
{
	const struct kvmemd_prefixes *p = d->prefix;

	jw_open(w, "prefix", '{');
	jw_u64(w, "bytes_max", d->cfg.prefix_bytes);
	jw_u64(w, "uid_bytes_max", cap(d));
	jw_u64(w, "fair_share_bytes", fair(d, 0));
	jw_u64(w, "idle_seconds", d->cfg.prefix_idle_s);
	jw_u64(w, "bytes", p->bytes);
	jw_u64(w, "blocks", p->blocks);
	jw_u64(w, "tenants", p->ntenants);
	counters_json(w, p->hits, p->misses, p->published, p->evicted,
		      p->expired, p->damaged, p->corrected);
	jw_u64(w, "refused", p->refused);
	jw_u64(w, "saved_blocks", kvmemd_prefix_save_written(d));
	jw_close(w, '}');
}

/* The tenant's id as a member of a JSON object: "uid" or "gid". */
static void tenant_json(struct jw *w, uint64_t tenant)
{
	jw_u64(w, tenant & KVMEMD_TENANT_GROUP ? "gid" : "uid",
	       (uint32_t)tenant);
}

void kvmemd_prefix_list(struct kvmemd *d, const uint64_t *tenant,
			struct jw *w)
{
	struct kvmemd_prefixes *p = d->prefix;
	const uint64_t now = kvmemd_now_ns();
	const struct kvmemd_prefix_block *b;
	char hex[2 * KVMEM_PREFIX_KEY_BYTES + 1];
	const struct tenant *t;
	uint32_t i, n = 0;

	jw_open(w, NULL, '{');
	kvmemd_prefix_stats_json(d, w);
	jw_open(w, "tenants", '[');
	for (i = 0; i < p->ntenants; i++) {
		t = &p->tenants[i];
		jw_open(w, NULL, '{');
		tenant_json(w, t->id);
		jw_u64(w, "blocks", t->nblocks);
		jw_u64(w, "bytes", t->bytes);
		jw_u64(w, "staged", t->staged);
		counters_json(w, t->hits, t->misses, t->published, t->evicted,
			      t->expired, t->damaged, t->corrected);
		jw_close(w, '}');
	}
	jw_close(w, ']');
	if (tenant) {
		t = tenant_find(p, *tenant);
		jw_open(w, "blocks", '[');
		for (b = t ? t->head : NULL; b && n < LIST_MAX; b = b->next) {
			key_hex(b->key, hex);
			jw_open(w, NULL, '{');
			jw_str(w, "key", hex);
			jw_u64(w, "token_start", b->token_start);
			jw_u64(w, "ntokens", b->ntokens);
			jw_u64(w, "pages", b->layers);
			jw_u64(w, "bytes", b->bytes);
			jw_u64(w, "hits", b->hits);
			jw_u64(w, "age_s",
			       (now - b->published) / 1000000000ull);
			jw_u64(w, "idle_s", (now - b->used) / 1000000000ull);
			jw_close(w, '}');
			n++;
		}
		jw_close(w, ']');
		jw_u64(w, "more", t && t->nblocks > n ? t->nblocks - n : 0);
	}
	jw_close(w, '}');
	jw_end(w);
}

uint64_t kvmemd_prefix_drop(struct kvmemd *d, uint64_t tenant,
			   const uint8_t *key)
{
	struct kvmemd_prefixes *p = d->prefix;
	struct kvmemd_prefix_block *b, *next;
	struct tenant *t = tenant_find(p, tenant);
	char name[KVMEMD_TENANT_NAME_LEN];
	uint64_t n = 0;

	for (b = t ? t->head : NULL; b; b = next) {
		next = b->next;
		if (key && memcmp(b->key, key, KVMEM_PREFIX_KEY_BYTES))
			continue;
		block_remove(p, t, b, 1);
		n++;
	}
	if (t)
		tenant_put(p, t);
	/* And those only on the store. */
	n += kvmemd_prefix_disk_drop(d, tenant, key);
	if (n)
		kvmemd_log(LOG_INFO,
			   "prefix: %" PRIu64 " blocks of %s "
			   "dropped by an admin",
			   n, kvmemd_prefix_tenant_name(tenant, name));
	return n;
}

int kvmemd_prefix_inject(struct kvmemd *d, uint64_t tenant, uint32_t flips,
			 uint64_t seed, uint64_t *pages, uint64_t *bits)
{
	struct kvmemd_prefixes *p = d->prefix;
	struct kvmem_inject_report rep;
	struct kvmem_inject_params ip;
	struct kvmemd_prefix_block *b;
	struct tenant *t = tenant_find(p, tenant);
	char name[KVMEMD_TENANT_NAME_LEN];
	uint32_t l;
	int ret;

	*pages = *bits = 0;
	for (b = t ? t->head : NULL; b; b = b->next)
		for (l = 0; l < b->layers; l++) {
			ret = kvmem_inject_params_for_codec(
				&ip, b->layout.codec, 0, seed + *pages);
			if (ret)
				return ret;
			ip.mode = KVMEM_INJECT_EXACT;
			ip.k = flips;
			memset(&rep, 0, sizeof(rep));
			ret = kvmem_inject(b->data + (size_t)l * b->page_bytes +
						   b->layout.k_off,
					   1, &ip, &rep);
			if (ret)
				return ret;
			*bits += rep.bits;
			(*pages)++;
		}
	kvmemd_log(LOG_WARNING,
		   "prefix: injected %" PRIu64 " bit errors into %" PRIu64
		   " published pages of %s",
		   *bits, *pages, kvmemd_prefix_tenant_name(tenant, name));
	return 0;
}
