/* SPDX-License-Identifier: MIT */
/*
 * prefix.h - published prefixes, shared by prefix.c, which keeps them,
 * session.c, which publishes and attaches them for a session, and admin.c,
 * which lists and drops them. All run on the event loop thread only.
 *
 * Included by prefix.c, session.c, admin.c, ras.c (the scrubber's walk
 * over the copies), server.c, prefix-save.c (blocks kept across
 * restarts) and prefix-disk.c (blocks on the backing store).
 */
#ifndef KVMEMD_PREFIX_H
#define KVMEMD_PREFIX_H

#include <stdint.h>
#include <sys/types.h>

#include "kvmem/ecc.h"
#include "kvmem/uapi.h"
#include "kvmemd.h"

/*
 * Whose published prefixes a session shares: those of a group of
 * daemon.tenants, KVMEMD_TENANT_GROUP | gid, when its client is in one (the
 * first listed), else its uid's own. A uid and a gid of the same number are
 * two tenants.
 */
#define KVMEMD_TENANT_GROUP (1ull << 32)

/* The tenant of a client of @uid whose primary group is @gid and whose
 * supplementary groups are @groups[@ngroups], as @cfg says. */
uint64_t kvmemd_prefix_tenant(const struct kvmemd_config *cfg, uid_t uid,
			      gid_t gid, const gid_t *groups, int ngroups);

/* How logs name @tenant: "uid N", "gid N". */
#define KVMEMD_TENANT_NAME_LEN 16
char *kvmemd_prefix_tenant_name(uint64_t tenant,
				char buf[KVMEMD_TENANT_NAME_LEN]);

/* What a published page's header said at its seal, as the slot kept it. */
struct kvmemd_prefix_page {
	uint32_t crc;
	uint32_t hdr_flags;
	uint64_t generation;
};

/*
 * A published block: a copy of one sealed page of every layer, taken from
 * one sequence at one token range, under the key its tenant gave it. The
 * copies are checked when they are made and each time they are attached.
 */
struct kvmemd_prefix_block {
	/* its name: no two blocks of a tenant share all four */
	uint8_t key[KVMEM_PREFIX_KEY_BYTES];
	struct kvmem_geometry g; /* the publisher's, whole: a digest that
				  * matches by chance is not the geometry */
	uint64_t digest; /* of g, for the hash */
	uint32_t token_start, ntokens;
	/* what it holds: layers pages of page_bytes, of slot kind kind and
	 * layout layout; while it is staged, the first staged of them */
	uint32_t layers, page_bytes;
	uint8_t kind;
	struct kvmem_page_layout layout;
	uint32_t staged;
	struct kvmemd_prefix_page *pages; /* [layers] */
	uint8_t *data; /* layers * page_bytes */
	/* prefix.c's */
	uint64_t tenant;
	uint64_t bytes; /* charged to the tenant once it is kept */
	uint64_t hits, published, used; /* used: last attach, ns */
	uint32_t users; /* sessions partway through attaching it */
	uint8_t gone; /* dropped while in use: the last unpin frees it */
	struct kvmemd_prefix_block *hnext, *prev, *next;
	/* every kept block, oldest first: the order the scrubber walks */
	struct kvmemd_prefix_block *aprev, *anext;
	/* prefix-save.c's: its memfd until the block is kept (-1: its data
	 * is anonymous memory), and its name in the descriptor store once
	 * it is there (0: it is not) */
	int fd;
	uint64_t id;
	/* prefix-disk.c's: its copy on the backing store, or NULL */
	struct kvmemd_prefix_disk_ent *disk;
};

/*
 * kvmemd_prefix_find() - @tenant's block of that name, or NULL
 * @digest: kvmem_geometry_digest(@g)
 *
 * Looks in @tenant's table only, so another tenant's blocks cost nothing
 * and tell nothing. With @count a miss counts as one in the statistics; a hit
 * counts once kvmemd_prefix_used() says the block was attached.
 */
struct kvmemd_prefix_block *
kvmemd_prefix_find(struct kvmemd *d, uint64_t tenant, const uint8_t *key,
		   const struct kvmem_geometry *g, uint64_t digest,
		   uint32_t token_start, uint32_t ntokens, int count);
/* @b was attached: a hit, and its tenant's most recently used block. */
void kvmemd_prefix_used(struct kvmemd *d, struct kvmemd_prefix_block *b);
/*
 * kvmemd_prefix_pin() - a session is partway through attaching @b, a block
 * kvmemd_prefix_find() returned: evictions pass it over while its
 * tenant's blocks in use are within its fair share, until
 * kvmemd_prefix_unpin(). Dropped meanwhile (by an operator, expiry,
 * damage, or an eviction past the fair share), it leaves its table and
 * its memory goes at once; the last unpin frees what is left.
 */
void kvmemd_prefix_pin(struct kvmemd *d, struct kvmemd_prefix_block *b);
void kvmemd_prefix_unpin(struct kvmemd *d, struct kvmemd_prefix_block *b);

/*
 * kvmemd_prefix_may_publish() - may a session of @uid publish for @tenant?
 *
 * Members of a tenant trust each other's publishes: what a block holds is
 * not checked against its key. prefix.publishers narrows that trust for a
 * group of daemon.tenants to the users it lists there; a group it does
 * not list, and a uid's own tenant, let every session publish. Read at
 * each op, so a reload counts from the next one.
 *
 * Return: 0, or -EPERM (counted as refused, and logged) when @tenant is a
 * group that lists publishers and @uid is not one of them.
 */
int kvmemd_prefix_may_publish(struct kvmemd *d, uint64_t tenant, uid_t uid);

/*
 * kvmemd_prefix_admit() - may @tenant keep a block named as @name says,
 * of @name->layers pages of @name->page_bytes each?
 *
 * As prefix.c's head comment says: within @tenant's cap, its own least
 * recently used blocks making room, and within prefix.bytes, blocks of
 * tenants over their fair share making room. Nothing is evicted here.
 *
 * Return: 0; -EEXIST when @tenant has that block (it becomes the most
 * recently used); -EDQUOT when the block alone is over the cap, or
 * @tenant's blocks in use leave it no room under its cap; -ENOSPC when
 * sharing is off, or no tenant over its fair share can give the room
 * prefix.bytes lacks (the same whatever the number of tenants).
 */
int kvmemd_prefix_admit(struct kvmemd *d, uint64_t tenant,
			const struct kvmemd_prefix_block *name);
/*
 * kvmemd_prefix_stage() - a block named as @name says, on its way to
 * @tenant: admitted as kvmemd_prefix_admit() says, its memory (layers pages
 * of page_bytes) allocated for the caller to fill and counted in @tenant's
 * share until kvmemd_prefix_keep() or kvmemd_prefix_unstage() ends it
 *
 * Return: 0 with *@out; as kvmemd_prefix_admit(); -EDQUOT also when the
 * blocks on their way to @tenant would pass its share; -ENOMEM.
 */
int kvmemd_prefix_stage(struct kvmemd *d, uint64_t tenant,
			const struct kvmemd_prefix_block *name,
			struct kvmemd_prefix_block **out);
void kvmemd_prefix_unstage(struct kvmemd *d, struct kvmemd_prefix_block *b);
/*
 * kvmemd_prefix_keep() - @b, staged and filled and checked, is kept from
 * now on, once the blocks that kvmemd_prefix_admit() counted on went (its
 * tenant's own least recently used over its cap, then those of tenants
 * over their fair share). Takes @b whatever the outcome. Return: 0, or as
 * kvmemd_prefix_admit() (-EEXIST: the block was kept already), having
 * evicted nothing.
 */
int kvmemd_prefix_keep(struct kvmemd *d, struct kvmemd_prefix_block *b);
/* A block whose copy no longer verifies: dropped, logged and counted. */
void kvmemd_prefix_damaged(struct kvmemd *d, struct kvmemd_prefix_block *b);

/* ---- for ras.c: the scrubber checks the copies too --------------------- */

/* The passes that walk the copies, each with a cursor of its own. */
enum kvmemd_prefix_walk {
	KVMEMD_PREFIX_PATROL,
	KVMEMD_PREFIX_ONDEMAND,
	KVMEMD_PREFIX_WALKS,
};

/* What a walk found, in words of each codec (headers and scales are
 * KVMEM_PAGE_META_CODEC words). */
struct kvmemd_prefix_scrub {
	uint64_t pages, bytes;
	uint64_t words[KVMEM_CODEC_NR], ce[KVMEM_CODEC_NR], ue[KVMEM_CODEC_NR];
	uint64_t crc; /* pages whose CRC no longer matched */
	uint64_t dropped; /* blocks dropped for either */
};

/* Bytes of the blocks kept: about what a walk over them reads. */
uint64_t kvmemd_prefix_bytes(const struct kvmemd *d);
/* The next kvmemd_prefix_scrub() of @w starts at the oldest block. */
void kvmemd_prefix_rewind(struct kvmemd *d, enum kvmemd_prefix_walk w);
/*
 * kvmemd_prefix_scrub() - check and correct the kept copies, a page at a
 * time, from @w's cursor on, until about *@budget bytes were checked
 *
 * A page that verifies is left alone; one that does not is scrubbed in
 * place, and a block with a page that still does not verify (a word past
 * correcting, or a CRC that no longer matches) is dropped as
 * kvmemd_prefix_damaged() drops it. Blocks kept meanwhile are walked too.
 *
 * Return: 1 when the walk reached the newest block's end, 0 when the
 * budget ran out first. What was found is added to @out.
 */
int kvmemd_prefix_scrub(struct kvmemd *d, enum kvmemd_prefix_walk w,
			uint64_t *budget, struct kvmemd_prefix_scrub *out);

/* ---- for prefix-save.c: blocks kept across a restart ------------------- */

/* The oldest kept block, the others after it on ->anext; NULL: none. */
struct kvmemd_prefix_block *kvmemd_prefix_oldest(struct kvmemd *d);
/*
 * kvmemd_prefix_restore() - @b, a block a former kvmemd kept, its pages
 * checked, is kept again under its tenant, as recently used as it was
 * (->used), counted in its tenant's bytes; prefix.* limits are not
 * applied (kvmemd_prefix_trim() does that). Return: 0; -EEXIST when its
 * tenant has that block; -ENOMEM. On error @b is still the caller's.
 */
int kvmemd_prefix_restore(struct kvmemd *d, struct kvmemd_prefix_block *b);

/* Are blocks published from now on kept across restarts (prefix.keep, a
 * descriptor store, daemon.keep_sessions)? */
int kvmemd_prefix_save_on(const struct kvmemd *d);
/* @b's data (layers * page_bytes) in a memfd of its own, mapped shared,
 * its descriptor in @b->fd: NULL when it cannot be. */
uint8_t *kvmemd_prefix_save_map(struct kvmemd_prefix_block *b);
/* @b was kept: its memfd goes to the descriptor store, and into the next
 * index. Nothing when it has none. */
void kvmemd_prefix_save_add(struct kvmemd *d, struct kvmemd_prefix_block *b);
/* @b goes (evicted, dropped, expired, damaged): out of the store and of the
 * next index. */
void kvmemd_prefix_save_drop(struct kvmemd *d, struct kvmemd_prefix_block *b);
/* Once a loop iteration: the index to a worker, when it changed. */
void kvmemd_prefix_save_write(struct kvmemd *d);
/* What this kvmemd's start took back of the blocks the last one kept, and
 * refused (each said in the log). */
void kvmemd_prefix_save_counts(const struct kvmemd *d, uint64_t *taken,
			       uint64_t *refused);
/* Blocks the index last written names; a crash now keeps those. */
uint64_t kvmemd_prefix_save_written(const struct kvmemd *d);
/* The state, the memfds passed back and not taken included, goes. */
void kvmemd_prefix_save_exit(struct kvmemd *d);

/*
 * kvmemd_prefix_shape_ok() - does @name (its geometry, layout, kind, token
 * range, layers and page size) name a block this kvmemd would keep: its
 * pages laid out as a session of its geometry lays out pages of its kind
 * (an attach copies them into such slots)? Read from a file, it is
 * untrusted until this says so.
 */
int kvmemd_prefix_shape_ok(const struct kvmemd_prefix_block *name);

/* ---- for prefix-disk.c: blocks on the backing store -------------------- */

struct kvmemd_prefix_disk_ent;
struct kvmemd_remote_fetch;

/* @b was kept: written to the store too, when blocks are kept there. */
void kvmemd_prefix_disk_add(struct kvmemd *d, struct kvmemd_prefix_block *b);
/* @b was attached. */
void kvmemd_prefix_disk_used(struct kvmemd *d, struct kvmemd_prefix_block *b);
/* @b leaves memory: evicted or expired, it stays on the store; with
 * @forget (dropped by an operator, damaged) it leaves the store too. */
void kvmemd_prefix_disk_leave(struct kvmemd *d, struct kvmemd_prefix_block *b,
			      int forget);
/*
 * kvmemd_prefix_disk_fetch() - the leading blocks @f asks for that are on
 * the store and not in memory: read back on a worker, each checked end to
 * end, the leading good ones kept as published blocks of the tenant, then
 * @f->done with how many (0 when the first failed its checks: it leaves
 * the store). Return: 0 with the job in *@out (kvmemd_prefix_disk_forget()
 * takes it back), -ENOENT when the first block is not on the store,
 * -EAGAIN when the workers are busy, -ENOMEM.
 */
int kvmemd_prefix_disk_fetch(struct kvmemd *d,
			     const struct kvmemd_remote_fetch *f, void **out);
/* Whoever waits for @job is gone: what it reads is kept all the same. */
void kvmemd_prefix_disk_forget(void *job);
/* @tenant's blocks only on the store, or with @key that one, go. Return:
 * how many. */
uint64_t kvmemd_prefix_disk_drop(struct kvmemd *d, uint64_t tenant,
				 const uint8_t *key);
/* Once a loop iteration: the index when the blocks on the store changed,
 * and blocks past store.retain_*. Return: when it wants to run again. */
uint64_t kvmemd_prefix_disk_run(struct kvmemd *d, uint64_t now);

#endif /* KVMEMD_PREFIX_H */
