/* SPDX-License-Identifier: MIT */
/*
 * cache.h - the cache's internals, shared by cache.c and attend.c
 */
#ifndef KVMEM_CACHE_H
#define KVMEM_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "kvmem/kvmem.h"

struct kvmem__vq;

/* A page and who holds it. Sealed pages are shared between forks. */
struct kvmem__page {
	uint8_t *data;
	uint32_t slot; /* the daemon's name for it */
	uint32_t refs;
	uint32_t token_start;
	uint32_t ntokens;
	uint8_t hot; /* FP16 + golay24 layout */
	uint8_t sealed; /* full and immutable */
	float importance;
	/* c->layout[hot], or an archive layout of c->archive */
	const struct kvmem_page_layout *layout;
	/* a vq2 page: the codebooks its indices name, a reference (a page a
	 * fork archived keeps them, whatever its other holders learn) */
	struct kvmem__vq *vq;
};

/* One layer of a sequence: its pages in token order, and the codebooks
 * its pages are encoded with when they go to vq2 (NULL until it has
 * some). */
struct kvmem__layer {
	struct kvmem__page **pages;
	uint32_t npages, cap;
	uint32_t len; /* tokens */
	struct kvmem__vq *vq;
};

/*
 * Where page bytes live, and who else must hear of what happens to them.
 * Embedded mode: an arena of this process, and nobody. Over kvmemd: slots of
 * the session's shared arena, and the daemon, through the ring.
 *
 * alloc:    a slot for a page of kind @p->hot: sets ->data and ->slot;
 *           -ENOMEM when the arena is full
 * drop:     @s no longer holds @p (NULL: @s goes away as a whole, and
 *           seq_free will say so)
 * release:  the last reference to @p is gone
 * seal:     @p, page @layer of @s, is full and immutable
 * seq_new:  an id for a new sequence, empty or a fork of @parent
 * seq_free: @s is gone
 * acquire:  @s is about to be used: its pages must be resident, in host
 *           memory, or with @gpu in the GPU tier where they fit
 * unpin:    @s may be moved until the next acquire
 * prefetch: @s is wanted soon (NULL: nothing to do)
 * prefix_publish: publish the block of @ntokens from @token_start of @s,
 *           a sealed page of every layer, under @key (NULL: -EOPNOTSUPP)
 * prefix_attach: add the pages of the published block of @ntokens from
 *           @token_start to @s, every layer's, by kvmem__seq_adopt(); 0,
 *           -ENOENT when none is published under @key, or another error
 *           (some layers' pages may have been added then; -EPROTO: the
 *           store's answer made no sense, and @s must go)
 * prefix_fetch: bring published blocks from a tier the store shares with
 *           other machines, as far as one request goes: @keys[0..@nkeys)
 *           name the blocks from the one at @token_start, @parent the
 *           block before (zeros for block 0); *@asked receives how many it
 *           asked for. Return: how many of those, from the first, can be
 *           attached now, or a negative errno (NULL: no such tier)
 * stats:    store-specific fields of struct kvmem_cache_stats
 * close:    release the store
 */
struct kvmem__store_ops {
	int (*alloc)(struct kvmem_cache *c, struct kvmem__page *p);
	void (*drop)(struct kvmem_cache *c, struct kvmem_seq *s,
		     struct kvmem__page *p);
	void (*release)(struct kvmem_cache *c, struct kvmem__page *p);
	int (*seal)(struct kvmem_cache *c, struct kvmem_seq *s, uint32_t layer,
		    struct kvmem__page *p);
	int (*seq_new)(struct kvmem_cache *c, struct kvmem_seq *parent,
		       uint64_t *id);
	void (*seq_free)(struct kvmem_cache *c, struct kvmem_seq *s);
	int (*acquire)(struct kvmem_cache *c, struct kvmem_seq *s, int gpu);
	int (*unpin)(struct kvmem_cache *c, struct kvmem_seq *s);
	int (*prefetch)(struct kvmem_cache *c, struct kvmem_seq *s);
	int (*prefix_publish)(struct kvmem_cache *c, struct kvmem_seq *s,
			      const struct kvmem_prefix_key *key,
			      uint32_t token_start, uint32_t ntokens);
	int (*prefix_attach)(struct kvmem_cache *c, struct kvmem_seq *s,
			     const struct kvmem_prefix_key *key,
			     uint32_t token_start, uint32_t ntokens);
	int (*prefix_fetch)(struct kvmem_cache *c,
			    const struct kvmem_prefix_key *parent,
			    const struct kvmem_prefix_key *keys, uint32_t nkeys,
			    uint32_t token_start, uint32_t *asked);
	void (*close)(struct kvmem_cache *c);
};

struct kvmem_cache {
	struct kvmem_geometry g;
	uint64_t digest;
	struct kvmem_page_layout layout[2]; /* [hot] */
	/* [format][codec]: the layouts kvmem_seq_archive() may give a
	 * sealed page; size 0 where kvmem_page_layout_as() refuses one */
	struct kvmem_page_layout archive[KVMEM_FMT_NR][KVMEM_CODEC_NR];
	uint32_t max_scales; /* the most scales a page of any layout has */
	const struct kvmem__store_ops *store;
	void *store_priv;
	uint8_t *arena; /* where pages live: arena_bytes from here */
	size_t arena_bytes;
	/* kvmem_cuda_register(): the GPU that maps the arena, the device
	 * address of its start, and the next cache that GPU maps. */
	struct kvmem_cuda *cuda;
	uint64_t cuda_base;
	struct kvmem_cache *cuda_next;
	/* Over kvmemd, the session's GPU memory: the descriptor that shares
	 * it (-1: none), its size and GPU, and where kvmem_cuda_register()
	 * mapped it (gpu_handle 0: not mapped). */
	int gpu_fd;
	uint64_t gpu_bytes;
	uint8_t gpu_uuid[16];
	uint64_t gpu_addr;
	unsigned long long gpu_handle;
	/* KVMEM_CONNECT_GPU_TIER granted: the first slot in the GPU memory
	 * (the host arena's slots come before it); 0: no GPU tier */
	uint32_t gpu_slot0;
	uint64_t ring_errors; /* see struct kvmem_cache_stats */
	uint16_t *heat; /* over kvmemd: the session's heat array, by slot */
	uint32_t heat_units; /* its entries */
	int closing; /* kvmem_close() runs: the store need tell nobody */
	struct kvmem_seq *seqs;
	uint64_t nseqs, next_id, generation;
	uint64_t npages[2]; /* [hot] */
	size_t used;
	/* Work buffers; a cache is used by one thread at a time. */
	float *kbuf, *vbuf; /* a page of K and V, token-major */
	uint8_t *row; /* one hot row's data */
	void *scratch; /* kvmem__page_scratch_size() */
	size_t scratch_bytes;
	/* Codebooks decoded (struct kvmem__vq_view), allocated when first
	 * used: [0] those pages go to, [1] those a vq2 page comes from;
	 * vq_used once this cache has had codebooks (readers then make
	 * room for them). */
	int vq_used;
	float *vq_entries[2];
	uint8_t *vq_lost[2];
	struct kvmem__pool *pool; /* attention's threads, NULL until used */
	void *attn_state; /* attend.c: calls' state, kept between them */
	size_t attn_state_bytes;
};

struct kvmem_seq {
	struct kvmem_cache *c;
	uint64_t id;
	int acquired; /* pages resident until kvmem_seq_release() */
	int on_gpu; /* acquired for the GPU: pages in its tier where they fit */
	struct kvmem_seq *prev, *next;
	struct kvmem__layer layer[];
};

/*
 * Over kvmemd: tell the daemon how much of the attention of @nh heads page
 * @p gets, as the share of all of it in 16 bits. Released pages with less
 * leave memory first.
 */
static inline void kvmem__heat_set(struct kvmem_cache *c,
				   const struct kvmem__page *p, uint32_t nh)
{
	float h = p->importance / (float)nh * 65535.0f;
	uint16_t v = h >= 65535.0f ? 65535 : h > 0.0f ? (uint16_t)h : 0;

	/* An older daemon's covers host slots only. */
	if (p->slot < c->heat_units)
		__atomic_store_n(&c->heat[p->slot], v, __ATOMIC_RELAXED);
}

/*
 * One call's attention into page @p's importance, a moving average of
 * weight @alpha: @share of the softmax weights of @nh query heads and @nq
 * queries, summed over both. Over kvmemd the daemon hears of it too where
 * @slot_known: the page's sequence is acquired, so ->slot is where the
 * page is (a released one's may have moved since).
 */
static inline void kvmem__page_attended(struct kvmem_cache *c,
					struct kvmem__page *p, float share,
					uint32_t nh, uint32_t nq, float alpha,
					int slot_known)
{
	p->importance =
		(1.0f - alpha) * p->importance + alpha * share / (float)nq;
	if (c->heat && slot_known)
		kvmem__heat_set(c, p, nh);
}

/* The index of the page holding token @pos of a layer. */
static inline uint32_t kvmem__page_index(const struct kvmem_geometry *g,
					 uint32_t pos)
{
	if (pos < g->sink_tokens)
		return 0;
	return (g->sink_tokens ? 1 : 0) +
	       (pos - g->sink_tokens) / g->tokens_per_page;
}

/*
 * kvmem__prefix_block_range() - the tokens of prefix block @i
 * @g: the geometry: with sink tokens, block 0 is the sink page, and every
 *     other block one page of tokens_per_page tokens
 * @i: the block's index
 * @start: receives the block's first token
 * @n: receives its number of tokens
 *
 * Return: 0, -EOVERFLOW when the block ends past 2^32 - 1.
 */
int kvmem__prefix_block_range(const struct kvmem_geometry *g, uint32_t i,
			      uint32_t *start, uint32_t *n);

/*
 * kvmem__cache_new() - a cache of geometry @g with no store yet
 *
 * Return: 0, -EINVAL for a bad geometry, -ENOMEM.
 */
int kvmem__cache_new(const struct kvmem_geometry *g, struct kvmem_cache **out);
/* Free what kvmem__cache_new() allocated. */
void kvmem__cache_free(struct kvmem_cache *c);

/* Make @s resident, in host memory, before its pages are touched. */
int kvmem__seq_acquire(struct kvmem_seq *s);
/* The same for the GPU's kernels: with the GPU tier, its pages there as
 * far as they fit (->data NULL, ->slot from gpu_slot0 on). */
int kvmem__seq_acquire_gpu(struct kvmem_seq *s);
/* Pinned where its pages are, for work that reads none of its sealed
 * pages (appending, forking): acquired for the GPU stays so. */
int kvmem__seq_pin(struct kvmem_seq *s);

/*
 * kvmem__seq_adopt() - a sealed page the store made appends to @layer of @s
 * @slot: the store's name for it; @data: its bytes
 * @hot: its kind; @token_start, @ntokens: the tokens it holds, which must
 *       start where the layer ends
 *
 * Return: 0, -EINVAL when the page does not continue the layer, -ENOMEM.
 */
int kvmem__seq_adopt(struct kvmem_seq *s, uint32_t layer, uint32_t slot,
		     uint8_t *data, int hot, uint32_t token_start,
		     uint32_t ntokens);

#endif /* KVMEM_CACHE_H */
