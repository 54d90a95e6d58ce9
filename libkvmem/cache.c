/* SPDX-License-Identifier: MIT */
/*
 * cache.c - sequences of protected pages over a slot store
 *
 * The page tables (which pages a sequence's layer has, with reference counts
 * for sharing) live here; where a page's bytes live is the store's business,
 * behind struct kvmem__store_ops. Embedded mode stores pages in one arena of
 * this process; over kvmemd (client.c) they are slots of a shared arena and
 * the hooks tell the daemon through the ring.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kvmem/crc32c.h"
#include "kvmem/cuda.h"
#include "cache.h"
#include "internal.h"

/* ---- the embedded store: one arena, a few slot sizes ------------------- */

/*
 * Slots are carved from the top of the arena and recycled through a free
 * list kept in the free slots themselves, one list per slot size: kinds of
 * page of the same size share one. Hot (FP16) slots are recycled as fast as
 * tails fill and seal, so separate lists do not strand much memory;
 * archived pages are smaller or the size of sealed ones.
 */
#define ARENA_SIZES (2 + KVMEM_FMT_NR * KVMEM_CODEC_NR)

struct arena {
	uint8_t *base;
	size_t size;
	size_t top;
	struct {
		size_t size; /* 0: not used yet */
		uint8_t *head;
	} free[ARENA_SIZES]; /* by free_list() */
};

/* The free list of slots of @size: there is room for every layout's. */
static uint8_t **free_list(struct arena *a, size_t size)
{
	size_t i;

	for (i = 0; a->free[i].size && a->free[i].size != size; i++)
		;
	a->free[i].size = size;
	return &a->free[i].head;
}

static int arena_alloc(struct kvmem_cache *c, struct kvmem__page *pg)
{
	struct arena *a = c->store_priv;
	size_t size = pg->layout->size;
	uint8_t **list = free_list(a, size);
	uint8_t *p = *list;

	if (p) {
		memcpy(list, p, sizeof(*list));
	} else {
		if (a->size - a->top < size)
			return -ENOMEM;
		p = a->base + a->top;
		a->top += size;
	}
	pg->data = p;
	pg->slot = (uint32_t)((size_t)(p - a->base) / KVMEM_PAGE_ALIGN);
	return 0;
}

static void arena_release(struct kvmem_cache *c, struct kvmem__page *pg)
{
	struct arena *a = c->store_priv;
	uint8_t **list = free_list(a, pg->layout->size);

	memcpy(pg->data, list, sizeof(*list));
	*list = pg->data;
}

static void arena_close(struct kvmem_cache *c)
{
	struct arena *a = c->store_priv;

	if (!a)
		return;
	munmap(a->base, a->size);
	free(a);
}

static void arena_drop(struct kvmem_cache *c, struct kvmem_seq *s,
		       struct kvmem__page *p)
{
	(void)c;
	(void)s;
	(void)p;
}

static int arena_seal(struct kvmem_cache *c, struct kvmem_seq *s,
		      uint32_t layer, struct kvmem__page *p)
{
	(void)c;
	(void)s;
	(void)layer;
	(void)p;
	return 0;
}

static int arena_seq_new(struct kvmem_cache *c, struct kvmem_seq *parent,
			 uint64_t *id)
{
	(void)parent;
	*id = ++c->next_id;
	return 0;
}

static void arena_seq_free(struct kvmem_cache *c, struct kvmem_seq *s)
{
	(void)c;
	(void)s;
}

/* In-process memory is always resident. */
static int arena_pin(struct kvmem_cache *c, struct kvmem_seq *s)
{
	(void)c;
	(void)s;
	return 0;
}

static int arena_acquire(struct kvmem_cache *c, struct kvmem_seq *s, int gpu)
{
	(void)gpu;
	return arena_pin(c, s);
}

static const struct kvmem__store_ops arena_ops = {
	.alloc = arena_alloc,
	.drop = arena_drop,
	.release = arena_release,
	.seal = arena_seal,
	.seq_new = arena_seq_new,
	.seq_free = arena_seq_free,
	.acquire = arena_acquire,
	.unpin = arena_pin,
	.close = arena_close,
};

/* Huge pages when the system has some reserved, else ask for THP. */
static int arena_open(struct kvmem_cache *c, size_t size)
{
	struct arena *a = calloc(1, sizeof(*a));
	void *p;

	if (!a)
		return -ENOMEM;
	size = (size + KVMEM_PAGE_ALIGN - 1) / KVMEM_PAGE_ALIGN *
	       KVMEM_PAGE_ALIGN;
	/* Not MAP_NORESERVE here: that maps huge pages the system does not
	 * have and the first touch dies of SIGBUS. Without it the mapping
	 * fails up front when the reserve is short. */
	p = mmap(NULL, size, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (p == MAP_FAILED) {
		p = mmap(NULL, size, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p == MAP_FAILED) {
			free(a);
			return -ENOMEM;
		}
		madvise(p, size, MADV_HUGEPAGE);
	}
	a->base = p;
	a->size = size;
	c->store_priv = a;
	c->store = &arena_ops;
	c->arena = p;
	c->arena_bytes = size;
	return 0;
}

/* ---- pages ------------------------------------------------------------ */

static int page_new(struct kvmem_cache *c, int hot, struct kvmem__page **out)
{
	struct kvmem__page *p = calloc(1, sizeof(*p));
	int ret;

	if (!p)
		return -ENOMEM;
	p->hot = (uint8_t)hot;
	p->layout = &c->layout[hot];
	ret = c->store->alloc(c, p);
	if (ret) {
		free(p);
		return ret;
	}
	p->refs = 1;
	c->npages[hot]++;
	c->used += c->layout[hot].size;
	*out = p;
	return 0;
}

/* @s lets go of @p; NULL when the whole sequence goes (see drop). */
static void page_put(struct kvmem_cache *c, struct kvmem_seq *s,
		     struct kvmem__page *p)
{
	if (!p)
		return;
	c->store->drop(c, s, p);
	if (--p->refs)
		return;
	c->store->release(c, p);
	c->npages[p->hot]--;
	c->used -= p->layout->size;
	kvmem__vq_put(p->vq);
	free(p);
}

/* @p's bytes and @q's change places: where they are and their layout. */
static void swap_storage(struct kvmem__page *p, struct kvmem__page *q)
{
	struct kvmem__page t = *p;

	p->data = q->data;
	p->slot = q->slot;
	p->layout = q->layout;
	q->data = t.data;
	q->slot = t.slot;
	q->layout = t.layout;
}

/* Write @p's header from its fields. */
static void page_header(struct kvmem_cache *c, struct kvmem_seq *s,
			struct kvmem__page *p, uint32_t layer)
{
	struct kvmem_page_hdr h = {
		.magic = KVMEM_PAGE_MAGIC,
		.version = KVMEM_PAGE_VERSION,
		.format = p->layout->format,
		.codec = p->layout->codec,
		.geometry = c->digest,
		.seq = s->id,
		.layer = layer,
		.token_start = p->token_start,
		.ntokens = p->ntokens,
		.flags = (p->hot ? KVMEM_HDR_HOT : 0) |
			 (p->sealed ? KVMEM_HDR_SEALED : 0),
		.generation = ++c->generation,
	};

	/* The CRC covers what follows the header, so it comes first. */
	if (p->sealed)
		h.crc = kvmem_crc32c(0, p->data + KVMEM_PAGE_HDR_BYTES,
				     p->layout->size - KVMEM_PAGE_HDR_BYTES);
	kvmem__hdr_encode(p->data, &h);
}

/*
 * Codebooks @vq decoded into @c's buffers @slot; a view of no entries
 * when @vq is NULL. Return: 0 or -ENOMEM.
 */
static int vq_view(struct kvmem_cache *c, const struct kvmem__vq *vq, int slot,
		   struct kvmem__vq_view *v)
{
	const size_t ne = (size_t)2 * c->g.kv_heads * KVMEM__VQ_ENTRIES;
	long lost;

	v->entries = NULL;
	v->lost = NULL;
	if (!vq)
		return 0;
	if (!c->vq_entries[slot])
		c->vq_entries[slot] =
			malloc(ne * KVMEM__VQ_DIM * sizeof(float));
	if (!c->vq_lost[slot])
		c->vq_lost[slot] = malloc(ne);
	if (!c->vq_entries[slot] || !c->vq_lost[slot])
		return -ENOMEM;
	lost = kvmem__vq_read(vq, c->vq_entries[slot], c->vq_lost[slot], NULL);
	if (lost < 0)
		return (int)lost;
	v->entries = c->vq_entries[slot];
	v->lost = lost ? c->vq_lost[slot] : NULL;
	return 0;
}

/*
 * Whether a value of the first @ntokens of the @n tokens whose flags
 * kvmem__page_decode_stored() left in @erased is flagged.
 */
static int kept_lost(const struct kvmem_geometry *g, const uint8_t *erased,
		     uint32_t n, uint32_t ntokens)
{
	const size_t tok = (size_t)g->kv_heads * g->head_dim;

	return memchr(erased, 1, ntokens * tok) ||
	       memchr(erased + n * tok, 1, ntokens * tok);
}

/*
 * Re-encode the first @ntokens tokens of @src as a new page of kind @hot
 * (sealed when @seal). Used to seal a full tail and to cut a sealed page
 * back to a tail; with @strict, -EBADMSG when a value kept is flagged
 * lost, which a new page would hold as good.
 */
static int page_recode(struct kvmem_cache *c, struct kvmem_seq *s,
		       uint32_t layer, const struct kvmem__page *src,
		       uint32_t ntokens, int hot, int seal, int strict,
		       struct kvmem__page **out)
{
	struct kvmem_page_hdr h = { 0 };
	struct kvmem__vq_view view;
	struct kvmem__page *p;
	uint8_t *erased = NULL;
	int ret;

	ret = vq_view(c, src->vq, 1, &view);
	if (ret)
		return ret;
	if (strict) {
		erased = malloc(2 * (size_t)c->g.tokens_per_page *
				c->g.kv_heads * c->g.head_dim);
		if (!erased)
			return -ENOMEM;
	}
	ret = kvmem__page_decode_stored(src->data, &c->g, &view, c->kbuf,
					c->vbuf, erased, NULL);
	if (ret >= 0 && erased &&
	    kept_lost(&c->g, erased, (uint32_t)ret, ntokens))
		ret = -EBADMSG;
	free(erased);
	if (ret < 0)
		return ret;
	ret = page_new(c, hot, &p);
	if (ret)
		return ret;
	p->token_start = src->token_start;
	p->ntokens = ntokens;
	p->sealed = (uint8_t)seal;
	p->importance = src->importance;
	h.seq = s->id;
	h.layer = layer;
	h.token_start = p->token_start;
	h.ntokens = ntokens;
	h.flags = seal ? KVMEM_HDR_SEALED : 0;
	h.generation = ++c->generation;
	ret = kvmem__page_encode_stored(p->data, &c->g, &h, hot, c->kbuf,
					c->vbuf);
	if (!ret && seal)
		ret = c->store->seal(c, s, layer, p);
	if (ret) {
		p->sealed = 0;
		page_put(c, NULL, p);
		return ret;
	}
	*out = p;
	return 0;
}

/* ---- the cache -------------------------------------------------------- */

/*
 * The layouts a page of @c may have: its two kinds, and the archive
 * layouts of its geometry. Sets c->max_scales; returns the largest scratch
 * any of them needs.
 */
static size_t cache_layouts(struct kvmem_cache *c)
{
	struct kvmem_page_layout *arch = &c->archive[0][0];
	size_t scratch = 0, i;

	kvmem_page_layout(&c->g, 0, &c->layout[0]);
	kvmem_page_layout(&c->g, 1, &c->layout[1]);
	for (i = 0; i < KVMEM_FMT_NR * KVMEM_CODEC_NR; i++)
		if (kvmem_page_layout_as(
			    &c->g, (unsigned int)i / KVMEM_CODEC_NR,
			    (unsigned int)i % KVMEM_CODEC_NR, &arch[i]))
			memset(&arch[i], 0, sizeof(arch[i]));
	for (i = 0; i < 2 + KVMEM_FMT_NR * KVMEM_CODEC_NR; i++) {
		const struct kvmem_page_layout *l =
			i < 2 ? &c->layout[i] : &arch[i - 2];

		if (!l->size)
			continue;
		if (kvmem__page_scratch_size(&c->g, l) > scratch)
			scratch = kvmem__page_scratch_size(&c->g, l);
		if (l->nscales_k + l->nscales_v > c->max_scales)
			c->max_scales = l->nscales_k + l->nscales_v;
	}
	return scratch;
}

int kvmem__cache_new(const struct kvmem_geometry *g, struct kvmem_cache **out)
{
	struct kvmem_cache *c;
	size_t tok, scratch;

	if (!out || kvmem_geometry_check(g))
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->g = *g;
	c->gpu_fd = -1;
	c->digest = kvmem_geometry_digest(g);
	tok = (size_t)g->tokens_per_page * g->kv_heads * g->head_dim;
	scratch = cache_layouts(c);
	c->kbuf = malloc(tok * sizeof(float));
	c->vbuf = malloc(tok * sizeof(float));
	c->row = malloc((size_t)c->layout[1].row_data + 64);
	c->scratch = malloc(scratch);
	c->scratch_bytes = scratch;
	if (!c->kbuf || !c->vbuf || !c->row || !c->scratch) {
		kvmem__cache_free(c);
		return -ENOMEM;
	}
	*out = c;
	return 0;
}

void kvmem__cache_free(struct kvmem_cache *c)
{
	kvmem__pool_free(c->pool);
	free(c->attn_state);
	free(c->kbuf);
	free(c->vbuf);
	free(c->row);
	free(c->scratch);
	free(c->vq_entries[0]);
	free(c->vq_entries[1]);
	free(c->vq_lost[0]);
	free(c->vq_lost[1]);
	free(c);
}

int kvmem_open_embedded(const struct kvmem_geometry *g, size_t arena_bytes,
			struct kvmem_cache **out)
{
	struct kvmem_cache *c;
	int ret;

	ret = kvmem__cache_new(g, &c);
	if (ret)
		return ret;
	ret = -EINVAL;
	if (arena_bytes < c->layout[0].size + c->layout[1].size)
		goto err_cache;
	ret = arena_open(c, arena_bytes);
	if (ret)
		goto err_cache;
	*out = c;
	return 0;

err_cache:
	kvmem__cache_free(c);
	return ret;
}

void kvmem_close(struct kvmem_cache *c)
{
	if (!c)
		return;
	c->closing = 1;
	while (c->seqs)
		kvmem_seq_free(c->seqs);
	/* The driver lets go of the pages before they are unmapped. */
	kvmem_cuda_unregister(c);
	c->store->close(c);
	kvmem__cache_free(c);
}

const struct kvmem_geometry *kvmem_cache_geometry(const struct kvmem_cache *c)
{
	return &c->g;
}

void kvmem_cache_stats(const struct kvmem_cache *c,
		       struct kvmem_cache_stats *st)
{
	st->arena_bytes = c->arena_bytes;
	st->used_bytes = c->used;
	st->hot_pages = c->npages[1];
	st->sealed_pages = c->npages[0];
	st->seqs = c->nseqs;
	st->ring_errors = c->ring_errors;
}

/* ---- sequences -------------------------------------------------------- */

static int seq_alloc(struct kvmem_cache *c, struct kvmem_seq *parent,
		     struct kvmem_seq **out)
{
	struct kvmem_seq *s;
	int ret;

	s = calloc(1, sizeof(*s) + c->g.layers * sizeof(s->layer[0]));
	if (!s)
		return -ENOMEM;
	ret = c->store->seq_new(c, parent, &s->id);
	if (ret) {
		free(s);
		return ret;
	}
	s->c = c;
	s->acquired = 1;
	s->next = c->seqs;
	if (c->seqs)
		c->seqs->prev = s;
	c->seqs = s;
	c->nseqs++;
	*out = s;
	return 0;
}

int kvmem_seq_create(struct kvmem_cache *c, struct kvmem_seq **out)
{
	if (!c || !out)
		return -EINVAL;
	return seq_alloc(c, NULL, out);
}

void kvmem_seq_free(struct kvmem_seq *s)
{
	struct kvmem_cache *c;
	uint32_t l, i;

	if (!s)
		return;
	c = s->c;
	for (l = 0; l < c->g.layers; l++) {
		for (i = 0; i < s->layer[l].npages; i++)
			page_put(c, NULL, s->layer[l].pages[i]);
		free(s->layer[l].pages);
		kvmem__vq_put(s->layer[l].vq);
	}
	c->store->seq_free(c, s);
	if (s->prev)
		s->prev->next = s->next;
	else
		c->seqs = s->next;
	if (s->next)
		s->next->prev = s->prev;
	c->nseqs--;
	free(s);
}

/* Acquired for the GPU, the pages may be there: the CPU's readers have
 * them brought back to host memory first. An acquire for the GPU is asked
 * for every time: it places the pages sealed since the last. */
static int seq_acquire(struct kvmem_seq *s, int gpu)
{
	int ret;

	if (s->acquired && !s->on_gpu && !gpu)
		return 0;
	ret = s->c->store->acquire(s->c, s, gpu);
	if (!ret) {
		s->acquired = 1;
		s->on_gpu = gpu;
	}
	return ret;
}

int kvmem__seq_acquire(struct kvmem_seq *s)
{
	return seq_acquire(s, 0);
}

int kvmem__seq_acquire_gpu(struct kvmem_seq *s)
{
	return seq_acquire(s, !!s->c->gpu_slot0);
}

int kvmem__seq_pin(struct kvmem_seq *s)
{
	return s->acquired ? 0 : seq_acquire(s, 0);
}

int kvmem_seq_acquire(struct kvmem_seq *s)
{
	if (!s)
		return -EINVAL;
	return kvmem__seq_acquire(s);
}

int kvmem_seq_prefetch(struct kvmem_seq *s)
{
	if (!s)
		return -EINVAL;
	if (s->acquired || !s->c->store->prefetch)
		return 0;
	return s->c->store->prefetch(s->c, s);
}

int kvmem_seq_release(struct kvmem_seq *s)
{
	int ret;

	if (!s)
		return -EINVAL;
	if (!s->acquired)
		return 0;
	ret = s->c->store->unpin(s->c, s);
	if (!ret)
		s->acquired = s->on_gpu = 0;
	return ret;
}

uint32_t kvmem_seq_len(const struct kvmem_seq *s, uint32_t layer)
{
	if (!s || layer >= s->c->g.layers)
		return 0;
	return s->layer[layer].len;
}

static int table_push(struct kvmem__layer *lt, struct kvmem__page *p)
{
	if (lt->npages == lt->cap) {
		uint32_t cap = lt->cap ? lt->cap * 2 : 8;
		struct kvmem__page **n = realloc(lt->pages, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		lt->pages = n;
		lt->cap = cap;
	}
	lt->pages[lt->npages++] = p;
	return 0;
}

/* Start a new hot page at token @pos; it becomes the layer's last page. */
static int tail_new(struct kvmem_seq *s, uint32_t layer, uint32_t pos,
		    struct kvmem__page **out)
{
	struct kvmem_cache *c = s->c;
	struct kvmem__page *p;
	int ret;

	ret = page_new(c, 1, &p);
	if (ret)
		return ret;
	ret = table_push(&s->layer[layer], p);
	if (ret) {
		page_put(c, s, p);
		return ret;
	}
	p->token_start = pos;
	/* Zeros are valid codewords of every codec: the unwritten rows of a
	 * fresh page decode clean. */
	memset(p->data, 0, c->layout[1].size);
	*out = p;
	return 0;
}

/* Seal the full tail at the end of @layer: -ENOMEM without a free slot. */
static int tail_seal(struct kvmem_seq *s, uint32_t layer)
{
	struct kvmem_cache *c = s->c;
	struct kvmem__layer *lt = &s->layer[layer];
	struct kvmem__page *tail = lt->pages[lt->npages - 1];
	struct kvmem__page *p;
	int ret;

	ret = page_recode(c, s, layer, tail, tail->ntokens, 0, 1, 0, &p);
	if (ret)
		return ret;
	lt->pages[lt->npages - 1] = p;
	page_put(c, s, tail);
	return 0;
}

static int append_one(struct kvmem_seq *s, uint32_t layer, const float *k,
		      const float *v)
{
	struct kvmem_cache *c = s->c;
	struct kvmem__layer *lt = &s->layer[layer];
	const uint32_t S = c->g.sink_tokens, T = c->g.tokens_per_page;
	uint32_t pos = lt->len, cap;
	struct kvmem__page *p;
	int ret = 0;

	if (pos == UINT32_MAX)
		return -EOVERFLOW;
	if (pos < S) {
		cap = S;
		if (pos)
			p = lt->pages[0];
		else
			ret = tail_new(s, layer, 0, &p);
	} else {
		cap = T;
		if ((pos - S) % T)
			p = lt->pages[lt->npages - 1];
		else
			ret = tail_new(s, layer, pos, &p);
	}
	if (ret)
		return ret;
	kvmem__page_put_token(&c->g, &c->layout[1], p->data,
			      pos - p->token_start, k, v, c->row);
	p->ntokens++;
	/* A full sink page stays FP16, frozen where it is; a full tail is
	 * sealed from what its header says, so the header comes first. */
	if (pos < S && p->ntokens == cap)
		p->sealed = 1;
	page_header(c, s, p, layer);
	if (p->ntokens == cap)
		ret = pos < S ? c->store->seal(c, s, layer, p)
			      : tail_seal(s, layer);
	if (ret) {
		/* No room for the sealed copy, or no daemon to tell: the
		 * token is not kept, so a full page is always a sealed one. */
		p->sealed = 0;
		if (--p->ntokens) {
			page_header(c, s, p, layer);
		} else {
			lt->npages--;
			page_put(c, s, p);
		}
		return ret;
	}
	lt->len++;
	return 0;
}

int kvmem_seq_append(struct kvmem_seq *s, uint32_t layer, const float *k,
		     const float *v, uint32_t ntokens)
{
	const size_t tok = s ? (size_t)s->c->g.kv_heads * s->c->g.head_dim : 0;
	uint32_t i;
	int ret;

	if (!s || layer >= s->c->g.layers || (ntokens && (!k || !v)))
		return -EINVAL;
	ret = kvmem__seq_pin(s);
	if (ret)
		return ret;
	for (i = 0; i < ntokens; i++) {
		ret = append_one(s, layer, k + i * tok, v + i * tok);
		if (ret)
			return ret;
	}
	return 0;
}

int kvmem_seq_append_all(struct kvmem_seq *s, const float *k, const float *v,
			 uint32_t ntokens)
{
	size_t tok, stride;
	uint32_t i, l;
	int ret;

	if (!s || (ntokens && (!k || !v)))
		return -EINVAL;
	ret = kvmem__seq_pin(s);
	if (ret)
		return ret;
	tok = (size_t)s->c->g.kv_heads * s->c->g.head_dim;
	stride = tok * s->c->g.layers;
	for (i = 0; i < ntokens; i++)
		for (l = 0; l < s->c->g.layers; l++) {
			ret = append_one(s, l, k + i * stride + l * tok,
					 v + i * stride + l * tok);
			if (ret)
				return ret;
		}
	return 0;
}

int kvmem_seq_fork(struct kvmem_seq *s, struct kvmem_seq **out)
{
	struct kvmem_cache *c;
	struct kvmem_seq *f;
	uint32_t l, i;
	int ret;

	if (!s || !out)
		return -EINVAL;
	c = s->c;
	ret = kvmem__seq_pin(s);
	if (!ret)
		ret = seq_alloc(c, s, &f);
	if (ret)
		return ret;
	for (l = 0; l < c->g.layers; l++) {
		struct kvmem__layer *src = &s->layer[l], *dst = &f->layer[l];

		ret = -ENOMEM;
		dst->pages = malloc((src->npages + 1) * sizeof(*dst->pages));
		if (!dst->pages)
			goto err;
		dst->cap = src->npages + 1;
		dst->vq = src->vq;
		if (dst->vq)
			dst->vq->refs++;
		for (i = 0; i < src->npages; i++) {
			struct kvmem__page *p = src->pages[i], *q;

			if (p->sealed) {
				p->refs++;
				dst->pages[dst->npages++] = p;
				continue;
			}
			/* A page still being written is copied. */
			ret = page_new(c, p->hot, &q);
			if (ret)
				goto err;
			memcpy(q->data, p->data, p->layout->size);
			q->token_start = p->token_start;
			q->ntokens = p->ntokens;
			q->importance = p->importance;
			dst->pages[dst->npages++] = q;
		}
		dst->len = src->len;
	}
	*out = f;
	return 0;
err:
	kvmem_seq_free(f);
	return ret;
}

int kvmem_seq_truncate(struct kvmem_seq *s, uint32_t ntokens)
{
	struct kvmem_cache *c;
	struct kvmem__page **cut;
	uint32_t l, i;
	int ret;

	if (!s)
		return -EINVAL;
	c = s->c;
	ret = kvmem__seq_acquire(s);
	if (ret)
		return ret;
	cut = calloc(c->g.layers, sizeof(*cut));
	if (!cut)
		return -ENOMEM;
	/* First make every page the cut needs, so failure changes nothing. */
	for (l = 0; l < c->g.layers; l++) {
		struct kvmem__layer *lt = &s->layer[l];
		struct kvmem__page *p;

		if (lt->len <= ntokens || !ntokens)
			continue;
		p = lt->pages[kvmem__page_index(&c->g, ntokens - 1)];
		if (p->token_start + p->ntokens == ntokens || !p->sealed)
			continue;
		ret = page_recode(c, s, l, p, ntokens - p->token_start, 1, 0, 1,
				  &cut[l]);
		if (ret)
			goto err;
	}
	for (l = 0; l < c->g.layers; l++) {
		struct kvmem__layer *lt = &s->layer[l];
		uint32_t keep;

		if (lt->len <= ntokens)
			continue;
		keep = ntokens ? kvmem__page_index(&c->g, ntokens - 1) + 1 : 0;
		for (i = keep; i < lt->npages; i++)
			page_put(c, s, lt->pages[i]);
		lt->npages = keep;
		lt->len = ntokens;
		if (cut[l]) {
			page_put(c, s, lt->pages[keep - 1]);
			lt->pages[keep - 1] = cut[l];
		} else if (keep) {
			struct kvmem__page *p = lt->pages[keep - 1];

			if (p->ntokens != ntokens - p->token_start) {
				p->ntokens = ntokens - p->token_start;
				page_header(c, s, p, l);
			}
		}
	}
	free(cut);
	return 0;
err:
	for (l = 0; l < c->g.layers; l++)
		page_put(c, NULL, cut[l]);
	free(cut);
	return ret;
}

/*
 * Archive @p, a sealed page, in layout @l: 1, 0 when it is not archived
 * (kvmem_page_archive() refuses its bytes), or a negative error. A page
 * whose bytes changed since its seal without a word reporting it is found
 * here and nowhere else: which of its values are wrong is unknown, so all
 * of them are made to read as lost (see kvmem_seq_archive()). A page that
 * goes to vq2 is encoded with codebooks @to (decoded: @to_view) and keeps
 * a reference to them; one that leaves vq2 is decoded with its own.
 */
static int page_archive(struct kvmem_cache *c, struct kvmem__page *p,
			const struct kvmem_page_layout *l, struct kvmem__vq *to,
			const struct kvmem__vq_view *to_view)
{
	const int from_vq = p->layout->format == KVMEM_FMT_VQ2,
		  to_vq = l->format == KVMEM_FMT_VQ2;
	const struct kvmem__vq_view *vq = to_view;
	struct kvmem__page q = { .layout = l };
	struct kvmem__vq_view own;
	struct kvmem_page_counts pc;
	int ret;

	if (to_vq && !from_vq && !to)
		return 0;
	if (from_vq && !to_vq) {
		ret = vq_view(c, p->vq, 1, &own);
		if (ret)
			return ret;
		vq = &own;
	}
	ret = c->store->alloc(c, &q);
	if (ret)
		return ret;
	ret = kvmem__page_archive(q.data, p->data, &c->g, l->format, l->codec,
				  vq, &pc);
	if (ret) {
		c->store->release(c, &q);
		if (ret != -EBADMSG)
			return ret;
		if (!pc.header.uncorrectable && !pc.scales.uncorrectable &&
		    !pc.payload.uncorrectable)
			kvmem__page_poison(p->data, &c->g, p->layout,
					   p->ntokens);
		return 0;
	}
	/* The old bytes go back to the store, the page's holders keep it. */
	swap_storage(p, &q);
	c->store->release(c, &q);
	c->used = c->used - q.layout->size + l->size;
	if (to_vq && !from_vq) {
		p->vq = to;
		to->refs++;
	}
	if (from_vq && !to_vq) {
		kvmem__vq_put(p->vq);
		p->vq = NULL;
	}
	return 1;
}

/* Whether sealed page @p of a layer is one vq_learn() learns from. */
static int vq_source(const struct kvmem__page *p, uint32_t before)
{
	return p->sealed && !p->hot && p->layout->format != KVMEM_FMT_VQ2 &&
	       p->token_start + p->ntokens <= before;
}

/*
 * Learn the codebooks of layer @ly of @s by k-means (vq.c) from its sealed
 * pages that end at or before @before and are not vq2: each K or V row of
 * a head that decodes with no value erased, cut into fours, every @step-th
 * row when there are more than KVMEM__VQ_TRAIN_MAX fours. A layer with no
 * such row is left without codebooks. Return: 0 or -ENOMEM.
 */
static int vq_learn(struct kvmem_cache *c, struct kvmem_seq *s, uint32_t ly,
		    uint32_t before)
{
	const struct kvmem_geometry *g = &c->g;
	struct kvmem__layer *lt = &s->layer[ly];
	const size_t D = g->head_dim, H = g->kv_heads, per = D / KVMEM__VQ_DIM;
	size_t rows = 0, step, cap, have = 0, b, i, *n = NULL;
	float *pts = NULL, *entries = NULL;
	uint8_t *erased = NULL;
	uint32_t t, h;
	int ret = -ENOMEM, is_v;

	for (i = 0; i < lt->npages; i++)
		if (vq_source(lt->pages[i], before))
			rows += lt->pages[i]->ntokens;
	step = (rows * per + KVMEM__VQ_TRAIN_MAX - 1) / KVMEM__VQ_TRAIN_MAX;
	step = step ? step : 1;
	cap = (rows + step - 1) / step * per;
	pts = malloc((2 * H * cap + 1) * KVMEM__VQ_DIM * sizeof(*pts));
	n = calloc(2 * H, sizeof(*n));
	erased = malloc(2 * g->tokens_per_page * H * D);
	entries = malloc(2 * H * KVMEM__VQ_ENTRIES * KVMEM__VQ_DIM *
			 sizeof(*entries));
	if (!pts || !n || !erased || !entries)
		goto out;
	for (i = 0; i < lt->npages; i++) {
		const struct kvmem__page *p = lt->pages[i];
		int nt;

		if (!vq_source(p, before))
			continue;
		/* A page whose header is lost teaches nothing. */
		nt = kvmem__page_decode_stored(p->data, g, NULL, c->kbuf,
					       c->vbuf, erased, NULL);
		if (nt == -ENOMEM)
			goto out;
		if (nt < 0)
			continue;
		/* The page table is the authority on its tokens. */
		if ((uint32_t)nt > p->ntokens)
			nt = (int)p->ntokens;
		for (t = 0; t < (uint32_t)nt; t++, have++) {
			if (have % step)
				continue;
			for (is_v = 0; is_v < 2; is_v++)
				for (h = 0; h < H; h++) {
					const size_t at = (t * H + h) * D;
					const float *x =
						(is_v ? c->vbuf : c->kbuf) + at;

					b = (size_t)is_v * H + h;
					if (memchr(erased +
							   (size_t)is_v * nt *
								   H * D +
							   at,
						   1, D))
						continue;
					memcpy(pts + (b * cap + n[b] * per) *
							       KVMEM__VQ_DIM,
					       x, D * sizeof(*x));
					n[b]++;
				}
		}
	}
	ret = 0;
	for (b = 0; b < 2 * H; b++)
		if (n[b])
			break;
	if (b == 2 * H)
		goto out;
	for (b = 0; b < 2 * H && !ret; b++)
		ret = kvmem__vq_train(pts + b * cap * KVMEM__VQ_DIM, n[b] * per,
				      entries + b * KVMEM__VQ_ENTRIES *
							KVMEM__VQ_DIM);
	if (!ret)
		ret = kvmem__vq_new((uint32_t)H, entries, &lt->vq);
	c->vq_used |= !ret;
out:
	free(pts);
	free(n);
	free(erased);
	free(entries);
	return ret;
}

/*
 * Layer @ly of @s ready to archive into @l: when @l is vq2, its codebooks
 * learned if it has none (from pages ending at or before @before) and
 * decoded into @view; else @view is empty (a page leaving vq2 is decoded
 * by its own, page_archive()).
 */
static int archive_layer(struct kvmem_cache *c, struct kvmem_seq *s,
			 uint32_t ly, const struct kvmem_page_layout *l,
			 uint32_t before, struct kvmem__vq_view *view)
{
	int ret = 0;

	view->entries = NULL;
	view->lost = NULL;
	if (l->format != KVMEM_FMT_VQ2)
		return 0;
	if (!s->layer[ly].vq)
		ret = vq_learn(c, s, ly, before);
	return ret ? ret : vq_view(c, s->layer[ly].vq, 0, view);
}

int kvmem_seq_archive(struct kvmem_seq *s, uint32_t before, unsigned int format,
		      unsigned int codec)
{
	struct kvmem_page_layout want;
	const struct kvmem_page_layout *l;
	struct kvmem_cache *c;
	uint32_t ly, i;
	int ret, n = 0;

	if (!s)
		return -EINVAL;
	c = s->c;
	ret = kvmem_page_layout_as(&c->g, format, codec, &want);
	if (ret)
		return ret;
	if (c->store != &arena_ops)
		return -EOPNOTSUPP;
	/* Back to the geometry's own is its own layout, not a copy. */
	l = format == c->g.format && codec == c->g.codec
		    ? &c->layout[0]
		    : &c->archive[format][codec];
	for (ly = 0; ly < c->g.layers; ly++) {
		const struct kvmem__layer *lt = &s->layer[ly];
		struct kvmem__vq_view view;

		ret = archive_layer(c, s, ly, l, before, &view);
		if (ret)
			return ret;
		for (i = 0; i < lt->npages; i++) {
			struct kvmem__page *p = lt->pages[i];

			if (!p->sealed || p->hot ||
			    (p->layout->format == l->format &&
			     p->layout->codec == l->codec) ||
			    p->token_start + p->ntokens > before)
				continue;
			ret = page_archive(c, p, l, lt->vq, &view);
			if (ret < 0)
				return ret;
			n += ret;
		}
	}
	return n;
}

/* Payload bits of page @p: its format's bits times its values. */
static double page_bits(const struct kvmem_cache *c,
			const struct kvmem__page *p)
{
	return (double)kvmem_format_get(p->layout->format)->bits * p->ntokens *
	       c->g.kv_heads * c->g.head_dim;
}

/* Whether page @a goes down before page @b: less attended, or older. */
static int colder(const struct kvmem__page *a, const struct kvmem__page *b)
{
	return a->importance < b->importance ||
	       (a->importance == b->importance &&
		a->token_start < b->token_start);
}

int kvmem_seq_archive_budget(struct kvmem_seq *s, float bits,
			     unsigned int format, unsigned int codec)
{
	struct kvmem_page_layout want;
	const struct kvmem_page_layout *l;
	struct kvmem_cache *c;
	uint8_t *tried = NULL;
	unsigned int low;
	uint32_t ly, i;
	int ret, n = 0;

	if (!s || !(bits >= 0.0f))
		return -EINVAL;
	c = s->c;
	ret = kvmem_page_layout_as(&c->g, format, codec, &want);
	if (ret)
		return ret;
	low = kvmem_format_get((int)format)->bits;
	if (low >= kvmem_format_get(c->g.format)->bits)
		return -EINVAL;
	if (c->store != &arena_ops)
		return -EOPNOTSUPP;
	l = &c->archive[format][codec];
	for (ly = 0; ly < c->g.layers && n >= 0; ly++) {
		const struct kvmem__layer *lt = &s->layer[ly];
		struct kvmem__vq_view view;
		double total = 0, values = 0;

		for (i = 0; i < lt->npages; i++) {
			const struct kvmem__page *p = lt->pages[i];

			if (!p->sealed || p->hot)
				continue;
			total += page_bits(c, p);
			values += (double)p->ntokens * c->g.kv_heads *
				  c->g.head_dim;
		}
		if (total <= bits * values)
			continue;
		ret = archive_layer(c, s, ly, l, UINT32_MAX, &view);
		if (ret) {
			n = ret;
			break;
		}
		/* Pages tried and left as they were (lost values). */
		free(tried);
		tried = calloc(lt->npages, 1);
		if (!tried)
			return -ENOMEM;
		while (total > bits * values) {
			uint32_t pick = UINT32_MAX;

			for (i = 0; i < lt->npages; i++) {
				const struct kvmem__page *p = lt->pages[i];

				if (p->sealed && !p->hot && !tried[i] &&
				    kvmem_format_get(p->layout->format)->bits >
					    low &&
				    (pick == UINT32_MAX ||
				     colder(p, lt->pages[pick])))
					pick = i;
			}
			if (pick == UINT32_MAX)
				break;
			tried[pick] = 1;
			total -= page_bits(c, lt->pages[pick]);
			ret = page_archive(c, lt->pages[pick], l, lt->vq,
					   &view);
			total += page_bits(c, lt->pages[pick]);
			if (ret < 0) {
				n = ret;
				break;
			}
			n += ret;
		}
	}
	free(tried);
	return n;
}

static int codebook_of(const struct kvmem_seq *s, uint32_t layer,
		       const struct kvmem__vq **vq)
{
	if (!s || layer >= s->c->g.layers)
		return -EINVAL;
	*vq = s->layer[layer].vq;
	return *vq ? 0 : -ENOENT;
}

int kvmem_seq_codebook(const struct kvmem_seq *s, uint32_t layer,
		       struct kvmem_codebook_desc *d)
{
	const struct kvmem__vq *vq;
	int ret = codebook_of(s, layer, &vq);

	if (ret || !d)
		return ret ? ret : -EINVAL;
	d->data = (void *)vq->data;
	d->size = vq->bytes;
	d->words = (uint32_t)kvmem__vq_words(vq);
	d->entries = vq->books * KVMEM__VQ_ENTRIES;
	d->refs = vq->refs;
	return 0;
}

long kvmem_seq_codebook_read(const struct kvmem_seq *s, uint32_t layer,
			     float *entries, uint8_t *lost,
			     struct kvmem_ecc_counts *counts)
{
	const struct kvmem__vq *vq;
	int ret = codebook_of(s, layer, &vq);

	if (ret || !entries || !lost)
		return ret ? ret : -EINVAL;
	if (counts)
		memset(counts, 0, sizeof(*counts));
	return kvmem__vq_read(vq, entries, lost, counts);
}

int kvmem_seq_codebook_set(struct kvmem_seq *s, uint32_t layer,
			   const float *entries)
{
	const struct kvmem__vq *vq;
	size_t i, n;
	int ret = codebook_of(s, layer, &vq);

	if (ret != -ENOENT)
		return ret ? ret : -EEXIST;
	if (!entries)
		return -EINVAL;
	if (s->c->store != &arena_ops)
		return -EOPNOTSUPP;
	n = (size_t)2 * s->c->g.kv_heads * KVMEM__VQ_ENTRIES * KVMEM__VQ_DIM;
	for (i = 0; i < n; i++)
		if (!isfinite(entries[i]) || fabsf(entries[i]) > 65504.0f)
			return -EINVAL;
	ret = kvmem__vq_new(s->c->g.kv_heads, entries, &s->layer[layer].vq);
	s->c->vq_used |= !ret;
	return ret;
}

int kvmem_seq_pages(const struct kvmem_seq *s, uint32_t layer,
		    struct kvmem_page_desc *out, size_t cap)
{
	const struct kvmem__layer *lt;
	uint32_t i;

	if (!s || layer >= s->c->g.layers || (cap && !out))
		return -EINVAL;
	lt = &s->layer[layer];
	for (i = 0; i < lt->npages && i < cap; i++) {
		const struct kvmem__page *p = lt->pages[i];

		memset(&out[i], 0, sizeof(out[i]));
		out[i].data = p->data;
		out[i].size = p->layout->size;
		out[i].token_start = p->token_start;
		out[i].ntokens = p->ntokens;
		out[i].refs = p->refs;
		out[i].sealed = p->sealed;
		out[i].hot = p->hot;
		out[i].format = p->layout->format;
		out[i].codec = p->layout->codec;
		out[i].importance = p->importance;
	}
	return (int)lt->npages;
}

int kvmem_seq_attended(struct kvmem_seq *s, uint32_t layer, const float *mass,
		       size_t npages, uint32_t n_heads, uint32_t nq,
		       float alpha)
{
	const struct kvmem__layer *lt;
	size_t i;

	if (!s || layer >= s->c->g.layers || (npages && !mass) || !n_heads ||
	    n_heads % s->c->g.kv_heads || !nq || !(alpha <= 1.0f))
		return -EINVAL;
	lt = &s->layer[layer];
	if (npages > lt->npages)
		return -EINVAL;
	for (i = 0; i < npages; i++)
		if (!(mass[i] >= 0.0f && mass[i] <= FLT_MAX))
			return -EINVAL;
	if (alpha == 0.0f)
		alpha = 0.1f;
	for (i = 0; alpha > 0.0f && i < npages; i++)
		kvmem__page_attended(s->c, lt->pages[i], mass[i], n_heads, nq,
				     alpha, s->acquired);
	return 0;
}

/* ---- prefix sharing --------------------------------------------------- */

int kvmem__seq_adopt(struct kvmem_seq *s, uint32_t layer, uint32_t slot,
		     uint8_t *data, int hot, uint32_t token_start,
		     uint32_t ntokens)
{
	struct kvmem_cache *c = s->c;
	struct kvmem__layer *lt = &s->layer[layer];
	struct kvmem__page *p;

	if (lt->len != token_start ||
	    kvmem__page_index(&c->g, token_start) != lt->npages ||
	    (uint64_t)token_start + ntokens > UINT32_MAX)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	if (table_push(lt, p)) {
		free(p);
		return -ENOMEM;
	}
	p->data = data;
	p->slot = slot;
	p->refs = 1;
	p->token_start = token_start;
	p->ntokens = ntokens;
	p->hot = (uint8_t)hot;
	p->sealed = 1;
	p->layout = &c->layout[hot];
	c->npages[hot]++;
	c->used += p->layout->size;
	lt->len = token_start + ntokens;
	return 0;
}

int kvmem__prefix_block_range(const struct kvmem_geometry *g, uint32_t i,
			      uint32_t *start, uint32_t *n)
{
	const uint64_t S = g->sink_tokens, T = g->tokens_per_page;
	uint64_t first;

	if (S && !i) {
		*start = 0;
		*n = (uint32_t)S;
		return 0;
	}
	first = S ? S + (i - 1) * T : i * T;
	if (first + T > UINT32_MAX)
		return -EOVERFLOW;
	*start = (uint32_t)first;
	*n = (uint32_t)T;
	return 0;
}

uint32_t kvmem_prefix_block_end(const struct kvmem_cache *c, uint32_t block)
{
	uint32_t start, n;

	if (!c || kvmem__prefix_block_range(&c->g, block, &start, &n))
		return 0;
	return start + n;
}

/* Is the block of @n from @start a sealed page in every layer of @s? */
static int block_sealed(const struct kvmem_seq *s, uint32_t start, uint32_t n)
{
	const struct kvmem_geometry *g = &s->c->g;
	const struct kvmem__page *p;
	uint32_t l, idx = kvmem__page_index(g, start);

	for (l = 0; l < g->layers; l++) {
		if (idx >= s->layer[l].npages)
			return 0;
		p = s->layer[l].pages[idx];
		if (!p->sealed || p->token_start != start || p->ntokens != n)
			return 0;
	}
	return 1;
}

int kvmem_prefix_publish(struct kvmem_seq *s,
			 const struct kvmem_prefix_key *keys, uint32_t nkeys)
{
	struct kvmem_cache *c;
	uint32_t i, start, n;
	int ret;

	if (!s || (nkeys && !keys))
		return -EINVAL;
	c = s->c;
	if (!c->store->prefix_publish)
		return -EOPNOTSUPP;
	ret = kvmem__seq_acquire(s);
	if (ret)
		return ret;
	for (i = 0; i < nkeys; i++) {
		if (kvmem__prefix_block_range(&c->g, i, &start, &n) ||
		    !block_sealed(s, start, n))
			break;
		ret = c->store->prefix_publish(c, s, &keys[i], start, n);
		if (ret)
			break;
	}
	return i ? (int)i : ret;
}

/*
 * Blocks @first, @first + 1, ... of @keys[@nkeys], as far as the store can
 * bring them from a tier it shares with other machines: how many it has
 * now, or a negative errno (-EOPNOTSUPP: it shares none).
 */
static int prefix_fetch(struct kvmem_cache *c,
			const struct kvmem_prefix_key *keys, uint32_t nkeys,
			uint32_t first)
{
	static const struct kvmem_prefix_key none;
	uint32_t i = first, start, n, asked;
	int ret = -EOPNOTSUPP;

	while (c->store->prefix_fetch && i < nkeys &&
	       !kvmem__prefix_block_range(&c->g, i, &start, &n)) {
		ret = c->store->prefix_fetch(c, i ? &keys[i - 1] : &none,
					     &keys[i], nkeys - i, start,
					     &asked);
		if (ret <= 0)
			break;
		i += (uint32_t)ret;
		/* A request's worth came: the next one may too. */
		if ((uint32_t)ret < asked)
			break;
	}
	return i > first ? (int)(i - first) : ret;
}

int kvmem_prefix_attach(struct kvmem_cache *c,
			const struct kvmem_prefix_key *keys, uint32_t nkeys,
			struct kvmem_seq **out)
{
	uint32_t i, start, n, end = 0;
	struct kvmem_seq *s;
	int ret = 0, fetched = 0;

	if (!c || !out || (nkeys && !keys))
		return -EINVAL;
	if (!c->store->prefix_attach)
		return -EOPNOTSUPP;
	ret = seq_alloc(c, NULL, &s);
	if (ret)
		return ret;
	for (i = 0; i < nkeys; i++) {
		/* The result is an int. */
		if (kvmem__prefix_block_range(&c->g, i, &start, &n) ||
		    (uint64_t)start + n > INT32_MAX)
			break;
		ret = c->store->prefix_attach(c, s, &keys[i], start, n);
		/* Not here: from the shared tier, once, then here. */
		if (ret == -ENOENT && !fetched) {
			fetched = 1;
			if (prefix_fetch(c, keys, nkeys, i) > 0)
				ret = c->store->prefix_attach(c, s, &keys[i],
							      start, n);
		}
		if (ret)
			break;
		end = start + n;
	}
	/* A block that came in part is given back; a later block that did
	 * not come is where the match ends, whatever the reason, unless the
	 * daemon's answer made no sense: then it may hold pages this
	 * sequence does not know of, and the whole sequence goes. */
	if (ret && ((ret != -ENOENT && !i) || ret == -EPROTO)) {
		kvmem_seq_free(s);
		return ret;
	}
	if (ret) {
		ret = kvmem_seq_truncate(s, end);
		if (ret) {
			kvmem_seq_free(s);
			return ret;
		}
	}
	*out = s;
	return (int)end;
}
