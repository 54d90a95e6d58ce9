/*
 * prefix.h - published prefixes, shared by prefix.c, which keeps them,
 * session.c, which publishes and attaches them for a session, and admin.c,
 * which lists and drops them. All run on the event loop thread only.
 */
#ifndef KVMEMD_PREFIX_H
#define KVMEMD_PREFIX_H

#include <stdint.h>
#include <sys/types.h>

#include "kvmem/uapi.h"
#include "kvmemd.h"

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
	 * layout layout */
	uint32_t layers, page_bytes;
	uint8_t kind;
	struct kvmem_page_layout layout;
	struct kvmemd_prefix_page *pages; /* [layers] */
	uint8_t *data; /* layers * page_bytes */
	/* prefix.c's */
	uid_t uid;
	uint64_t bytes; /* charged to the tenant */
	uint64_t hits, published, used; /* used: last attach, ns */
	struct kvmemd_prefix_block *hnext, *prev, *next;
};

/*
 * kvmemd_prefix_find() - @uid's block of that name, or NULL
 * @digest: kvmem_geometry_digest(@g)
 *
 * Looks in @uid's table only, so another tenant's blocks cost nothing and
 * tell nothing. With @count, a find is a hit or a miss in the statistics
 * and a hit makes the block the tenant's most recently used.
 */
struct kvmemd_prefix_block *
kvmemd_prefix_find(struct kvmemd *d, uid_t uid, const uint8_t *key,
		   const struct kvmem_geometry *g, uint64_t digest,
		   uint32_t token_start, uint32_t ntokens, int count);

/*
 * kvmemd_prefix_new() - room for a block of @uid named as @name says, with
 * @name->layers pages of @name->page_bytes each
 *
 * Evicts @uid's least recently used blocks while the new one would put the
 * tenant over prefix.uid_bytes or kvmemd over prefix.bytes; never another
 * tenant's. The block is not findable until kvmemd_prefix_add().
 *
 * Return: 0 with *@out to fill; -EEXIST when @uid has that block already
 * (it becomes the most recently used); -EDQUOT when the block alone is
 * over prefix.uid_bytes; -ENOSPC when kvmemd's prefix memory is full of
 * other tenants' blocks, or sharing is off; -ENOMEM.
 */
int kvmemd_prefix_new(struct kvmemd *d, uid_t uid,
		      const struct kvmemd_prefix_block *name,
		      struct kvmemd_prefix_block **out);
/* A block from kvmemd_prefix_new(), filled: findable from now on. */
void kvmemd_prefix_add(struct kvmemd *d, struct kvmemd_prefix_block *b);
/* A block from kvmemd_prefix_new() that will not be added. */
void kvmemd_prefix_discard(struct kvmemd *d, struct kvmemd_prefix_block *b);
/* A block whose copy no longer verifies: dropped, logged and counted. */
void kvmemd_prefix_damaged(struct kvmemd *d, struct kvmemd_prefix_block *b);

#endif /* KVMEMD_PREFIX_H */
