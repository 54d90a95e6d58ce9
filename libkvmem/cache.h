/*
 * cache.h - the cache's internals, shared by cache.c and attend.c
 */
#ifndef KVMEM_CACHE_H
#define KVMEM_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "kvmem/kvmem.h"

/* A page and who holds it. Sealed pages are shared between forks. */
struct kvmem__page {
	uint8_t *data;
	uint32_t refs;
	uint32_t token_start;
	uint32_t ntokens;
	uint8_t hot; /* FP16 + secded72 layout */
	uint8_t sealed; /* full and immutable */
	float importance;
};

/* One layer of a sequence: its pages in token order. */
struct kvmem__layer {
	struct kvmem__page **pages;
	uint32_t npages, cap;
	uint32_t len; /* tokens */
};

/*
 * Where page bytes live. Embedded mode: an arena of this process.
 *
 * alloc: a slot of the cache's page size for the kind (@hot), or -ENOMEM
 * free:  give a slot back
 * close: release the store
 */
struct kvmem__store_ops {
	int (*alloc)(struct kvmem_cache *c, int hot, uint8_t **out);
	void (*free)(struct kvmem_cache *c, int hot, uint8_t *p);
	void (*close)(struct kvmem_cache *c);
};

struct kvmem_cache {
	struct kvmem_geometry g;
	uint64_t digest;
	struct kvmem_page_layout layout[2]; /* [hot] */
	const struct kvmem__store_ops *store;
	void *store_priv;
	struct kvmem_seq *seqs;
	uint64_t nseqs, next_id, generation;
	uint64_t npages[2]; /* [hot] */
	size_t used;
	/* Work buffers; a cache is used by one thread at a time. */
	float *kbuf, *vbuf; /* a page of K and V, token-major */
	uint8_t *row; /* one hot row's data */
	void *scratch; /* kvmem__page_scratch_size() */
};

struct kvmem_seq {
	struct kvmem_cache *c;
	uint64_t id;
	struct kvmem_seq *prev, *next;
	struct kvmem__layer layer[];
};

/* The index of the page holding token @pos of a layer. */
static inline uint32_t kvmem__page_index(const struct kvmem_geometry *g,
					 uint32_t pos)
{
	if (pos < g->sink_tokens)
		return 0;
	return (g->sink_tokens ? 1 : 0) +
	       (pos - g->sink_tokens) / g->tokens_per_page;
}

#endif /* KVMEM_CACHE_H */
