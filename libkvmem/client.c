/* SPDX-License-Identifier: MIT */
/*
 * client.c - libkvmem over kvmemd: the handshake, the client side of the
 * ring, and the store that keeps pages in the session's shared arena
 *
 * The data plane stays here: pages are written and read in the shared
 * arena as in embedded mode. What the daemon must know goes through the
 * ring. Calls that need an answer (a new sequence, slots) submit and wait;
 * the rest (seal, free, release) are only queued, so they travel in the
 * same batch as the next op that waits. Slots come in batches of up to
 * SLOT_BATCH and unsealed ones are recycled here without telling the
 * daemon.
 *
 * The library's SQEs carry KVMEM_USER_DATA_LIB; a caller's completions met
 * while the library waits for its own are kept (at most cq_entries: that
 * many of the caller's SQEs may be in flight) for kvmem_ring_wait().
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "internal.h"
#include "ring.h"
#include "rng.h"

#define SLOT_BATCH 32
#define CONNECT_TIMEOUT_MS 30000
#define RETRY_MAX_US 100000 /* between attaches kvmemd refused as busy */
#define DEFAULT_SPIN_US 50

/* The library's part of the buffer region; the caller's starts after. */
#define BUF_ALLOC 0u
#define BUF_STATS 1024u
#define BUF_MAP 2048u /* SEQ_ACQUIRE's moved pages, to BUF_USER */
#define BUF_USER 4096u

/* user_data of the library's SQEs: bit 62 set when someone waits on it. */
#define LIB_SYNC (1ULL << 62)

static __thread char connect_error[KVMEM_MESSAGE_LEN];

struct remote {
	int sock, sq_efd, cq_efd;
	uint8_t *map;
	size_t map_bytes;
	struct kvmem_ring *ring;
	struct kvmem_sqe *sqes;
	struct kvmem_cqe *cqes;
	uint8_t *buf, *arena;
	uint16_t *heat;
	uint32_t heat_units; /* its entries: nslots, with the GPU tier's */
	uint64_t buf_bytes, arena_bytes;
	uint32_t nslots; /* arena units */
	uint32_t gpu_slots; /* the GPU tier's units, after them; 0: none */
	uint32_t slot_units[2];
	uint64_t features; /* KVMEM_FEAT_*, as the welcome said */
	uint32_t sq_entries, cq_entries;
	uint32_t sq_tail; /* SQEs taken */
	uint32_t sq_pub; /* SQEs published */
	uint32_t cq_head;
	int dead; /* -ENOTCONN once the daemon is gone */
	/* to take the session back after a restart of the daemon */
	struct sockaddr_un sa;
	struct kvmem_hello hello;
	uint64_t token; /* the welcome's resume_token; 0: never kept */
	dev_t dev; /* the memfd's */
	ino_t ino;
	int spin_us;
	uint32_t session; /* the daemon's id for it */
	uint64_t next_tag;
	uint32_t pool[2][SLOT_BATCH], npool[2]; /* open slots in reserve */
	struct kvmem_cqe *stash; /* the caller's, cq_entries of them */
	uint32_t stash_head, nstash;
	uint32_t user_inflight; /* the caller's SQEs not yet returned */
};

/* ---- the ring --------------------------------------------------------- */

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void mark_dead(struct remote *r)
{
	r->dead = -ENOTCONN;
}

static struct kvmem_sqe *sqe_get(struct remote *r)
{
	struct kvmem_sqe *e;

	/* Acquire: the daemon is done reading the entries it consumed. */
	if (r->sq_tail - kvmem__load_acquire(&r->ring->sq_head) >=
	    r->sq_entries)
		return NULL;
	e = &r->sqes[r->sq_tail & (r->sq_entries - 1)];
	memset(e, 0, sizeof(*e));
	r->sq_tail++;
	return e;
}

static int submit(struct remote *r)
{
	uint32_t n = r->sq_tail - r->sq_pub;

	if (r->dead)
		return r->dead;
	if (!n)
		return 0;
	/* Release: the SQEs are written before the daemon sees the tail. */
	kvmem__store_release(&r->ring->sq_tail, r->sq_tail);
	r->sq_pub = r->sq_tail;
	/* Full barrier: the tail is visible before NEED_WAKEUP is read,
	 * pairing with the daemon's barrier between setting the flag and
	 * looking at the tail once more before it sleeps. */
	kvmem__smp_mb();
	if (kvmem__load_relaxed(&r->ring->flags) & KVMEM_RING_NEED_WAKEUP)
		eventfd_write(r->sq_efd, 1);
	return (int)n;
}

/* One completion off the ring: 1, or 0 when there is none. */
static int cqe_pop(struct remote *r, struct kvmem_cqe *out)
{
	/* Acquire: the daemon wrote the CQEs before it moved the tail. */
	uint32_t tail = kvmem__load_acquire(&r->ring->cq_tail);
	int was_full = tail - r->cq_head >= r->cq_entries;

	if (tail == r->cq_head)
		return 0;
	*out = r->cqes[r->cq_head & (r->cq_entries - 1)];
	/* Release: the entry is read before the daemon may reuse it. */
	kvmem__store_release(&r->ring->cq_head, ++r->cq_head);
	/* A daemon that stopped at a CQ it saw full (by a cq_head it reads
	 * once a pass, so perhaps before this client's last pops) sleeps
	 * with SQEs left: ring when the CQ was full or is drained now and
	 * SQEs wait. The last pop before the client waits is a draining one. */
	if (was_full || tail == r->cq_head) {
		kvmem__smp_mb();
		if ((kvmem__load_relaxed(&r->ring->flags) &
		     KVMEM_RING_NEED_WAKEUP) &&
		    kvmem__load_relaxed(&r->ring->sq_head) != r->sq_pub)
			eventfd_write(r->sq_efd, 1);
	}
	return 1;
}

/* Is the daemon still there? Reads its notice or its hang-up. */
static void check_socket(struct remote *r, short revents)
{
	struct kvmem_notice n;

	if (kvmem__load_relaxed(&r->ring->flags) & KVMEM_RING_SHUTDOWN)
		mark_dead(r);
	if (revents & (POLLHUP | POLLERR | POLLRDHUP)) {
		mark_dead(r);
		return;
	}
	if (revents & POLLIN) {
		/* The one thing the daemon sends: a shutdown notice. */
		if (recv(r->sock, &n, sizeof(n), MSG_DONTWAIT) != -1 ||
		    errno != EAGAIN)
			mark_dead(r);
	}
}

/*
 * Wait for any completion: 1 with @out filled, 0 after @timeout_ms, or
 * -ENOTCONN. Spins for spin_us first, then sleeps on the CQ doorbell and
 * the socket.
 */
static int cqe_wait(struct remote *r, struct kvmem_cqe *out, int timeout_ms)
{
	uint64_t start, spin_end;
	struct pollfd pfd[2];
	unsigned int spins = 0;
	int ret;

	/* The common case, a completion already there, reads no clock. */
	if (cqe_pop(r, out))
		return 1;
	start = spin_end = now_us();
	if (r->spin_us > 0)
		spin_end += (uint64_t)r->spin_us;
	for (;;) {
		if (cqe_pop(r, out))
			return 1;
		if (r->dead)
			return r->dead;
		if (!timeout_ms)
			return 0;
		/* The clock costs more than a look at the ring: read it
		 * every 64 spins. */
		if (++spins % 64 || now_us() < spin_end) {
			if (kvmem__load_relaxed(&r->ring->flags) &
			    KVMEM_RING_SHUTDOWN)
				mark_dead(r);
			cpu_relax();
			continue;
		}
		__atomic_store_n(&r->ring->cq_flags, KVMEM_RING_CQ_WAIT,
				 __ATOMIC_RELAXED);
		/* Full barrier: CQ_WAIT is visible before the tail is read
		 * once more, pairing with the daemon's barrier between
		 * moving the tail and reading CQ_WAIT. */
		kvmem__smp_mb();
		if (cqe_pop(r, out)) {
			__atomic_store_n(&r->ring->cq_flags, 0,
					 __ATOMIC_RELAXED);
			return 1;
		}
		pfd[0] = (struct pollfd){ .fd = r->cq_efd, .events = POLLIN };
		pfd[1] = (struct pollfd){ .fd = r->sock,
					  .events = POLLIN | POLLRDHUP };
		ret = poll(pfd, 2, timeout_ms);
		__atomic_store_n(&r->ring->cq_flags, 0, __ATOMIC_RELAXED);
		if (ret < 0 && errno != EINTR)
			return -errno;
		if (ret > 0 && (pfd[0].revents & POLLIN)) {
			eventfd_t v;

			eventfd_read(r->cq_efd, &v);
		}
		if (ret > 0)
			check_socket(r, pfd[1].revents);
		if (!ret && timeout_ms > 0)
			return 0;
		if (timeout_ms > 0) {
			uint64_t spent = (now_us() - start) / 1000u;

			if (spent >= (uint64_t)timeout_ms)
				timeout_ms = 0;
		}
	}
}

static void stash(struct remote *r, const struct kvmem_cqe *e)
{
	/* Cannot overflow: at most cq_entries of the caller's SQEs are in
	 * flight (kvmem_ring_sqe()). */
	r->stash[(r->stash_head + r->nstash++) % r->cq_entries] = *e;
}

/*
 * Wait for the completion tagged @tag, handling the library's queued ops
 * and keeping the caller's. Return: its result, or -ENOTCONN.
 */
static int lib_wait(struct kvmem_cache *c, uint64_t tag)
{
	struct remote *r = c->store_priv;
	struct kvmem_cqe e;
	int ret;

	for (;;) {
		ret = cqe_wait(r, &e, -1);
		if (ret < 0)
			return ret;
		if (!(e.user_data & KVMEM_USER_DATA_LIB))
			stash(r, &e);
		else if (e.user_data == tag)
			return e.res;
		else if (e.res < 0)
			c->ring_errors++;
	}
}

/* An SQE for the library, waiting for room in the SQ if need be. */
static struct kvmem_sqe *lib_sqe(struct kvmem_cache *c)
{
	struct remote *r = c->store_priv;
	struct kvmem_sqe *e;
	struct kvmem_cqe cqe;

	while (!(e = sqe_get(r))) {
		if (submit(r) < 0)
			return NULL;
		/* The daemon frees SQ entries as it completes them. */
		if (cqe_wait(r, &cqe, -1) < 0)
			return NULL;
		if (!(cqe.user_data & KVMEM_USER_DATA_LIB))
			stash(r, &cqe);
		else if (cqe.res < 0)
			c->ring_errors++;
	}
	return e;
}

/* Queue @t with @tag as its user_data and publish it. */
static int lib_submit(struct kvmem_cache *c, const struct kvmem_sqe *t,
		      uint64_t tag)
{
	struct remote *r = c->store_priv;
	struct kvmem_sqe *e;
	int ret;

	if (r->dead)
		return r->dead;
	e = lib_sqe(c);
	if (!e)
		return r->dead ? r->dead : -EIO;
	*e = *t;
	e->user_data = tag;
	ret = submit(r);
	return ret < 0 ? ret : 0;
}

/* Queue @t; its result only counts in ring_errors. */
static int lib_async(struct kvmem_cache *c, const struct kvmem_sqe *t)
{
	return lib_submit(c, t, KVMEM_USER_DATA_LIB);
}

/* Submit @t and wait for its result. */
static int lib_sync(struct kvmem_cache *c, const struct kvmem_sqe *t)
{
	struct remote *r = c->store_priv;
	uint64_t tag;
	int ret;

	tag = KVMEM_USER_DATA_LIB | LIB_SYNC | (++r->next_tag & (LIB_SYNC - 1));
	ret = lib_submit(c, t, tag);
	return ret ? ret : lib_wait(c, tag);
}

/* ---- the store -------------------------------------------------------- */

/* Give the daemon back the open slots held in reserve for @kind. */
static void reserve_return(struct kvmem_cache *c, int kind)
{
	struct remote *r = c->store_priv;
	struct kvmem_sqe t = { .opcode = KVMEM_OP_PAGE_FREE };

	while (r->npool[kind]) {
		t.slot = r->pool[kind][--r->npool[kind]];
		if (lib_async(c, &t))
			c->ring_errors++;
	}
}

/*
 * Take slots for pages of @kind: SLOT_BATCH, but never more than a 32nd of
 * the arena, and when the arena is full, give back the other kind's
 * reserve and try once more, so reserves do not make it full early.
 */
static int remote_refill(struct kvmem_cache *c, int kind)
{
	struct remote *r = c->store_priv;
	uint32_t want = r->nslots / r->slot_units[kind] / 32;
	struct kvmem_sqe t = {
		.opcode = KVMEM_OP_PAGE_ALLOC,
		.kind = (uint8_t)kind,
		.addr = BUF_ALLOC,
		.len = want < 1		   ? 1
		       : want < SLOT_BATCH ? want
					   : SLOT_BATCH,
	};
	uint32_t i, u;
	int n;

	n = lib_sync(c, &t);
	if (n == -ENOMEM && r->npool[!kind]) {
		reserve_return(c, !kind);
		n = lib_sync(c, &t);
	}
	if (n < 0)
		return n;
	if ((uint32_t)n > t.len)
		return -EIO;
	for (i = 0; i < (uint32_t)n; i++) {
		memcpy(&u, r->buf + BUF_ALLOC + i * sizeof(u), sizeof(u));
		/* The daemon is trusted, but not to the point of writing
		 * outside the arena. */
		if (u >= r->nslots || r->nslots - u < r->slot_units[kind])
			return -EIO;
		r->pool[kind][r->npool[kind]++] = u;
	}
	return 0;
}

static int remote_alloc(struct kvmem_cache *c, struct kvmem__page *p)
{
	struct remote *r = c->store_priv;
	int ret;

	if (!r->npool[p->hot]) {
		ret = remote_refill(c, p->hot);
		if (ret)
			return ret;
	}
	p->slot = r->pool[p->hot][--r->npool[p->hot]];
	p->data = r->arena + (size_t)p->slot * KVMEM_SLOT_UNIT;
	return 0;
}

static void remote_drop(struct kvmem_cache *c, struct kvmem_seq *s,
			struct kvmem__page *p)
{
	struct remote *r = c->store_priv;
	struct kvmem_sqe t = {
		.opcode = KVMEM_OP_PAGE_FREE,
		.slot = p->slot,
	};

	if (c->closing)
		return;
	if (!p->sealed) {
		/* Still open at the daemon: keep it for the next page. */
		if (r->npool[p->hot] < SLOT_BATCH) {
			r->pool[p->hot][r->npool[p->hot]++] = p->slot;
			return;
		}
	} else if (s) {
		t.seq = s->id;
	} else {
		return; /* SEQ_FREE drops the sequence's references */
	}
	if (lib_async(c, &t))
		c->ring_errors++;
}

static void remote_release(struct kvmem_cache *c, struct kvmem__page *p)
{
	(void)c;
	(void)p;
}

static int remote_seal(struct kvmem_cache *c, struct kvmem_seq *s,
		       uint32_t layer, struct kvmem__page *p)
{
	struct kvmem_sqe t = {
		.opcode = KVMEM_OP_PAGE_SEAL,
		.slot = p->slot,
		.seq = s->id,
		.layer = layer,
		.token_start = p->token_start,
		.ntokens = p->ntokens,
	};

	return lib_async(c, &t);
}

static int remote_seq_new(struct kvmem_cache *c, struct kvmem_seq *parent,
			  uint64_t *id)
{
	struct kvmem_sqe t = { .opcode = KVMEM_OP_SEQ_CREATE };
	int ret;

	if (parent) {
		t.opcode = KVMEM_OP_SEQ_FORK;
		t.seq = parent->id;
	}
	ret = lib_sync(c, &t);
	if (ret < 0)
		return ret;
	if (!ret)
		return -EIO;
	*id = (uint64_t)ret;
	return 0;
}

static void remote_seq_free(struct kvmem_cache *c, struct kvmem_seq *s)
{
	struct kvmem_sqe t = { .opcode = KVMEM_OP_SEQ_FREE, .seq = s->id };

	if (!c->closing && lib_async(c, &t))
		c->ring_errors++;
}

/*
 * The layout of a page the daemon says is now in @format and @codec: the
 * geometry's, or one kvmem_seq_archive() could have made; NULL for
 * anything else, a hot page included (hot pages are never archived).
 */
static const struct kvmem_page_layout *moved_layout(const struct kvmem_cache *c,
						    const struct kvmem__page *p,
						    unsigned int format,
						    unsigned int codec)
{
	const struct kvmem_page_layout *own = &c->layout[p->hot];

	if (format == own->format && codec == own->codec)
		return own;
	/* vq2 needs codebooks, which only an embedded sequence has. */
	if (p->hot || format >= KVMEM_FMT_NR || format == KVMEM_FMT_VQ2 ||
	    codec >= KVMEM_CODEC_NR || !c->archive[format][codec].size)
		return NULL;
	return &c->archive[format][codec];
}

/* Does a page of @size fit at @slot: in the arena, or in the GPU tier's
 * slots after it? */
static int slot_fits(const struct remote *r, uint32_t slot, size_t size)
{
	const uint64_t end = (uint64_t)r->nslots + r->gpu_slots;

	if (slot < r->nslots)
		return (uint64_t)(r->nslots - slot) * KVMEM_SLOT_UNIT >= size;
	return slot < end && (end - slot) * KVMEM_SLOT_UNIT >= size;
}

/*
 * Give the pages of @s the slots the daemon moved them to, and with
 * KVMEM_FEAT_ARCHIVE the format and codec they have there. A move names
 * its page by layer and first token, never ambiguous within a sequence;
 * a page shared with a fork is one object, so it moves for all holders.
 */
static int remote_remap(struct kvmem_cache *c, struct kvmem_seq *s,
			const uint8_t *moves, uint32_t n)
{
	struct remote *r = c->store_priv;
	const int ex = !!(r->features & KVMEM_FEAT_ARCHIVE);
	const size_t size = ex ? sizeof(struct kvmem_page_move_ex)
			       : sizeof(struct kvmem_page_move);
	const struct kvmem_page_layout *l;
	struct kvmem_page_move_ex m;
	struct kvmem__page *p;
	uint32_t i, idx;

	for (i = 0; i < n; i++) {
		memset(&m, 0, sizeof(m));
		memcpy(&m, moves + (size_t)i * size, size);
		if (m.layer >= c->g.layers)
			return -EIO;
		idx = kvmem__page_index(&c->g, m.token_start);
		if (idx >= s->layer[m.layer].npages)
			return -EIO;
		p = s->layer[m.layer].pages[idx];
		l = ex ? moved_layout(c, p, m.format, m.codec) : p->layout;
		/* The daemon is trusted, but not to the point of pointing
		 * outside the arena, or its GPU tier. */
		if (!l || !p->sealed || p->token_start != m.token_start ||
		    !slot_fits(r, m.new_slot, l->size))
			return -EIO;
		p->slot = m.new_slot;
		/* A page on the GPU is for the GPU's kernels alone. */
		p->data = m.new_slot < r->nslots
				  ? r->arena + (size_t)p->slot * KVMEM_SLOT_UNIT
				  : NULL;
		c->used = c->used - p->layout->size + l->size;
		p->layout = l;
	}
	return 0;
}

/*
 * Pages of a released sequence may have gone to the backing store and come
 * back in other slots, or been archived: the daemon says which, a buffer
 * at a time.
 */
static int remote_acquire(struct kvmem_cache *c, struct kvmem_seq *s, int gpu)
{
	struct remote *r = c->store_priv;
	const size_t size = r->features & KVMEM_FEAT_ARCHIVE
				    ? sizeof(struct kvmem_page_move_ex)
				    : sizeof(struct kvmem_page_move);
	const uint32_t room = (uint32_t)((BUF_USER - BUF_MAP) / size);
	struct kvmem_sqe t = {
		.opcode = KVMEM_OP_SEQ_ACQUIRE,
		.flags = gpu ? KVMEM_SQE_GPU : 0,
		.seq = s->id,
		.addr = BUF_MAP,
		.len = (uint32_t)(room * size),
	};
	uint8_t m[BUF_USER - BUF_MAP];
	int n, ret;

	do {
		n = lib_sync(c, &t);
		if (n < 0)
			return n;
		if ((uint32_t)n > room)
			return -EIO;
		memcpy(m, r->buf + BUF_MAP, (size_t)n * size);
		ret = remote_remap(c, s, m, (uint32_t)n);
		if (ret)
			return ret;
	} while ((uint32_t)n == room);
	return 0;
}

static int remote_unpin(struct kvmem_cache *c, struct kvmem_seq *s)
{
	struct kvmem_sqe t = { .opcode = KVMEM_OP_SEQ_RELEASE, .seq = s->id };

	return lib_async(c, &t);
}

static int remote_prefetch(struct kvmem_cache *c, struct kvmem_seq *s)
{
	struct kvmem_sqe t = { .opcode = KVMEM_OP_SEQ_PREFETCH, .seq = s->id };

	return lib_async(c, &t);
}

static int remote_prefix_publish(struct kvmem_cache *c, struct kvmem_seq *s,
				 const struct kvmem_prefix_key *key,
				 uint32_t token_start, uint32_t ntokens)
{
	struct remote *r = c->store_priv;
	struct kvmem_sqe t = {
		.opcode = KVMEM_OP_PREFIX_PUBLISH,
		.seq = s->id,
		.addr = BUF_MAP,
		.len = KVMEM_PREFIX_KEY_BYTES,
		.token_start = token_start,
		.ntokens = ntokens,
	};
	int n;

	if (!(r->features & KVMEM_FEAT_PREFIX))
		return -EOPNOTSUPP;
	/* The daemon copies a few layers an op. */
	while (t.layer < c->g.layers) {
		memcpy(r->buf + BUF_MAP, key->bytes, KVMEM_PREFIX_KEY_BYTES);
		n = lib_sync(c, &t);
		if (n < 0)
			return n;
		if (!n || (uint32_t)n > c->g.layers - t.layer)
			return -EPROTO;
		t.layer += (uint32_t)n;
	}
	return 0;
}

/*
 * Take the pages the daemon attached, @n moves at @moves, layers from
 * @layer on. A page the library cannot hold is given back to the daemon.
 */
static int remote_adopt(struct kvmem_cache *c, struct kvmem_seq *s,
			const uint8_t *moves, uint32_t n, uint32_t layer,
			uint32_t token_start, uint32_t ntokens)
{
	struct remote *r = c->store_priv;
	const int ex = !!(r->features & KVMEM_FEAT_ARCHIVE);
	const size_t size = ex ? sizeof(struct kvmem_page_move_ex)
			       : sizeof(struct kvmem_page_move);
	const int hot = c->g.sink_tokens && !token_start;
	const struct kvmem_page_layout *l = &c->layout[hot];
	struct kvmem_page_move_ex m;
	uint32_t i;
	int ret = 0;

	for (i = 0; i < n; i++) {
		memset(&m, 0, sizeof(m));
		memcpy(&m, moves + (size_t)i * size, size);
		if (!ret &&
		    (m.layer != layer + i || m.token_start != token_start ||
		     m.old_slot != KVMEM_SLOT_NONE ||
		     (ex && (m.format != l->format || m.codec != l->codec)) ||
		     m.new_slot >= r->nslots ||
		     (uint64_t)(r->nslots - m.new_slot) * KVMEM_SLOT_UNIT <
			     l->size))
			ret = -EPROTO;
		if (!ret)
			ret = kvmem__seq_adopt(
				s, m.layer, m.new_slot,
				r->arena + (size_t)m.new_slot * KVMEM_SLOT_UNIT,
				hot, token_start, ntokens);
		if (ret) {
			struct kvmem_sqe t = {
				.opcode = KVMEM_OP_PAGE_FREE,
				.slot = m.new_slot,
				.seq = s->id,
			};

			if (lib_async(c, &t))
				c->ring_errors++;
		}
	}
	return ret;
}

static int remote_prefix_attach(struct kvmem_cache *c, struct kvmem_seq *s,
				const struct kvmem_prefix_key *key,
				uint32_t token_start, uint32_t ntokens)
{
	struct remote *r = c->store_priv;
	const size_t size = r->features & KVMEM_FEAT_ARCHIVE
				    ? sizeof(struct kvmem_page_move_ex)
				    : sizeof(struct kvmem_page_move);
	const uint32_t room =
		(uint32_t)((BUF_USER - BUF_MAP - KVMEM_PREFIX_KEY_BYTES) /
			   size);
	struct kvmem_sqe t = {
		.opcode = KVMEM_OP_PREFIX_ATTACH,
		.seq = s->id,
		.addr = BUF_MAP,
		.len = (uint32_t)(KVMEM_PREFIX_KEY_BYTES + room * size),
		.token_start = token_start,
		.ntokens = ntokens,
	};
	uint8_t m[BUF_USER - BUF_MAP];
	int n, ret;

	if (!(r->features & KVMEM_FEAT_PREFIX))
		return -EOPNOTSUPP;
	while (t.layer < c->g.layers) {
		memcpy(r->buf + BUF_MAP, key->bytes, KVMEM_PREFIX_KEY_BYTES);
		n = lib_sync(c, &t);
		if (n < 0)
			return n;
		if (!n || (uint32_t)n > room ||
		    (uint32_t)n > c->g.layers - t.layer)
			return -EPROTO;
		memcpy(m, r->buf + BUF_MAP + KVMEM_PREFIX_KEY_BYTES,
		       (size_t)n * size);
		ret = remote_adopt(c, s, m, (uint32_t)n, t.layer, token_start,
				   ntokens);
		if (ret)
			return ret;
		t.layer += (uint32_t)n;
	}
	return 0;
}

static int remote_prefix_fetch(struct kvmem_cache *c,
			       const struct kvmem_prefix_key *parent,
			       const struct kvmem_prefix_key *keys,
			       uint32_t nkeys, uint32_t token_start,
			       uint32_t *asked)
{
	struct remote *r = c->store_priv;
	const uint32_t room =
		(BUF_USER - BUF_MAP) / KVMEM_PREFIX_KEY_BYTES - 1 <
				KVMEM_PREFIX_FETCH_MAX
			? (BUF_USER - BUF_MAP) / KVMEM_PREFIX_KEY_BYTES - 1
			: KVMEM_PREFIX_FETCH_MAX;
	const uint32_t n = nkeys < room ? nkeys : room;
	struct kvmem_sqe t = {
		.opcode = KVMEM_OP_PREFIX_FETCH,
		.addr = BUF_MAP,
		.len = (n + 1) * KVMEM_PREFIX_KEY_BYTES,
		.token_start = token_start,
	};
	int ret;

	*asked = n;
	if (!(r->features & KVMEM_FEAT_REMOTE))
		return -EOPNOTSUPP;
	memcpy(r->buf + BUF_MAP, parent->bytes, KVMEM_PREFIX_KEY_BYTES);
	memcpy(r->buf + BUF_MAP + KVMEM_PREFIX_KEY_BYTES, keys,
	       (size_t)n * KVMEM_PREFIX_KEY_BYTES);
	ret = lib_sync(c, &t);
	if (ret > (int)n)
		return -EPROTO;
	return ret;
}

static void remote_close(struct kvmem_cache *c)
{
	struct remote *r = c->store_priv;

	if (!r)
		return;
	munmap(r->map, r->map_bytes);
	close(r->sock);
	close(r->sq_efd);
	close(r->cq_efd);
	if (c->gpu_fd >= 0)
		close(c->gpu_fd);
	free(r->stash);
	free(r);
}

static const struct kvmem__store_ops remote_ops = {
	.alloc = remote_alloc,
	.drop = remote_drop,
	.release = remote_release,
	.seal = remote_seal,
	.seq_new = remote_seq_new,
	.seq_free = remote_seq_free,
	.acquire = remote_acquire,
	.unpin = remote_unpin,
	.prefetch = remote_prefetch,
	.prefix_publish = remote_prefix_publish,
	.prefix_attach = remote_prefix_attach,
	.prefix_fetch = remote_prefix_fetch,
	.close = remote_close,
};

/* ---- attaching -------------------------------------------------------- */

int kvmem__socket_path(char *buf, size_t len, const char *file)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	int n;

	if (!geteuid())
		n = snprintf(buf, len, "/run/kvmem/%s", file);
	else if (xdg && xdg[0] == '/')
		n = snprintf(buf, len, "%s/kvmem/%s", xdg, file);
	else
		return snprintf(buf, len, "./run/%s", file) < (int)len
			       ? 0
			       : -ENAMETOOLONG;
	if (n >= 0 && (size_t)n < len)
		return 0;
	n = snprintf(buf, len, "./run/%s", file);
	return n >= 0 && (size_t)n < len ? 1 : -ENAMETOOLONG;
}

char *kvmem_socket_path(char *buf, size_t len)
{
	const char *env = getenv("KVMEM_SOCKET");
	int n;

	if (!env || !*env)
		return kvmem__socket_path(buf, len, "kvmemd.sock") < 0 ? NULL
								       : buf;
	n = snprintf(buf, len, "%s", env);
	return n < 0 || (size_t)n >= len ? NULL : buf;
}

static int fail(int err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(connect_error, sizeof(connect_error), fmt, ap);
	va_end(ap);
	return err;
}

const char *kvmem_connect_error(void)
{
	return connect_error;
}

/*
 * The welcome and its descriptors (the GPU memory's fourth when the
 * session has some). A daemon of ABI 3, or one refusing before it read
 * the hello, sends the welcome of ABI 3: the rest reads as zero.
 */
static int recv_welcome(int sock, struct kvmem_welcome *w, int fds[4],
			int timeout_ms)
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = w, .iov_len = sizeof(*w) };
	struct msghdr m = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = u.buf,
		.msg_controllen = sizeof(u.buf),
	};
	struct pollfd pfd = { .fd = sock, .events = POLLIN };
	struct cmsghdr *cm;
	ssize_t n;
	int ret;

	ret = poll(&pfd, 1, timeout_ms);
	if (ret < 0)
		return fail(-errno, "poll: %s", strerror(errno));
	if (!ret)
		return fail(-ETIMEDOUT, "kvmemd did not answer in %d s",
			    CONNECT_TIMEOUT_MS / 1000);
	memset(w, 0, sizeof(*w));
	n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
	/* Closed with no answer, or with the hello unread: it went away. */
	if (!n || (n < 0 && errno == ECONNRESET))
		return fail(-ECONNRESET, "kvmemd closed the connection without "
					 "answering (it stopped or restarted)");
	if (n < 0)
		return fail(-errno, "recvmsg: %s", strerror(errno));
	for (cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
		size_t k, nfds;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		nfds = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (k = 0; k < nfds; k++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + k * sizeof(int),
			       sizeof(fd));
			if (k < 4 && fds[k] < 0)
				fds[k] = fd;
			else
				close(fd);
		}
	}
	if ((n != sizeof(*w) && n != KVMEM_WELCOME_V3_SIZE) ||
	    w->magic != KVMEM_WELCOME_MAGIC || w->size != n)
		return fail(-EPROTO,
			    "kvmemd answered with %zd bytes that "
			    "are not a welcome",
			    n);
	w->message[sizeof(w->message) - 1] = 0;
	if (w->error < 0)
		return fail(w->error, "kvmemd refused: %s", w->message);
	/* The kernel installs what fits and drops the rest. */
	if (m.msg_flags & MSG_CTRUNC)
		return fail(-EMFILE,
			    "the session's descriptors did not all arrive: "
			    "this process is out of file descriptors "
			    "(RLIMIT_NOFILE)%s",
			    w->gpu_bytes ? "; kvmemd counts its GPU memory "
					   "held until this process exits"
					 : "");
	if (fds[0] < 0 || fds[1] < 0 || fds[2] < 0 ||
	    (w->gpu_bytes != 0) != (fds[3] >= 0))
		return fail(-EPROTO, "kvmemd sent no session descriptors");
	return 0;
}

static int inside(uint64_t off, uint64_t len, uint64_t size)
{
	return off <= size && len <= size - off;
}

static int map_session(struct remote *r, const struct kvmem_welcome *w,
		       const struct kvmem_geometry *g, int memfd)
{
	const uint64_t nslots = w->arena_bytes / KVMEM_SLOT_UNIT;
	/* 0: a daemon whose heat array covers the host arena's slots only */
	const uint64_t heat_units = w->heat_units ? w->heat_units : nslots;
	struct kvmem_page_layout l[2];
	struct stat st;
	void *p;
	int k;

	kvmem_page_layout(g, 0, &l[0]);
	kvmem_page_layout(g, 1, &l[1]);
	if (fstat(memfd, &st) || (uint64_t)st.st_size < w->map_bytes ||
	    w->sq_entries & (w->sq_entries - 1) || !w->sq_entries ||
	    w->cq_entries & (w->cq_entries - 1) || !w->cq_entries ||
	    w->slot_bytes[0] != l[0].size || w->slot_bytes[1] != l[1].size ||
	    w->arena_off % KVMEM_SLOT_UNIT || w->buf_bytes < BUF_USER ||
	    !inside(w->ring_off, sizeof(struct kvmem_ring), w->map_bytes) ||
	    !inside(w->sqes_off,
		    (uint64_t)w->sq_entries * sizeof(struct kvmem_sqe),
		    w->map_bytes) ||
	    !inside(w->cqes_off,
		    (uint64_t)w->cq_entries * sizeof(struct kvmem_cqe),
		    w->map_bytes) ||
	    !inside(w->buf_off, w->buf_bytes, w->map_bytes) ||
	    w->heat_off % sizeof(uint16_t) || heat_units < nslots ||
	    heat_units - nslots > w->gpu_bytes / KVMEM_SLOT_UNIT ||
	    heat_units > w->map_bytes / sizeof(uint16_t) ||
	    !inside(w->heat_off, heat_units * sizeof(uint16_t), w->map_bytes) ||
	    !inside(w->arena_off, w->arena_bytes, w->map_bytes))
		return fail(-EPROTO, "kvmemd described a session layout "
				     "this library cannot use");
	p = mmap(NULL, w->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd,
		 0);
	if (p == MAP_FAILED)
		return fail(-errno, "mmap: %s", strerror(errno));
	r->map = p;
	r->map_bytes = w->map_bytes;
	r->ring = (struct kvmem_ring *)(r->map + w->ring_off);
	r->sqes = (struct kvmem_sqe *)(r->map + w->sqes_off);
	r->cqes = (struct kvmem_cqe *)(r->map + w->cqes_off);
	r->buf = r->map + w->buf_off;
	r->buf_bytes = w->buf_bytes;
	r->arena = r->map + w->arena_off;
	r->heat = (uint16_t *)(r->map + w->heat_off);
	r->heat_units = (uint32_t)heat_units;
	r->arena_bytes = w->arena_bytes;
	r->nslots = (uint32_t)(w->arena_bytes / KVMEM_SLOT_UNIT);
	for (k = 0; k < 2; k++)
		r->slot_units[k] = w->slot_bytes[k] / KVMEM_SLOT_UNIT;
	r->sq_entries = w->sq_entries;
	r->cq_entries = w->cq_entries;
	r->dev = st.st_dev;
	r->ino = st.st_ino;
	/* Pick up where the ring is: fresh, so all zero. */
	r->sq_tail = r->sq_pub = r->ring->sq_tail;
	r->cq_head = r->ring->cq_head;
	return 0;
}

/*
 * One attempt: connect to @sa, say @h and read the welcome within
 * @timeout_ms. Return: 0 with the socket in *@sock and the session's
 * descriptors in @fds, or a negative errno with nothing left open.
 */
static int hello_once(const struct sockaddr_un *sa, const struct kvmem_hello *h,
		      int timeout_ms, struct kvmem_welcome *w, int fds[4],
		      int *sock)
{
	int fd, ret, i;

	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return fail(-errno, "socket: %s", strerror(errno));
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa))) {
		ret = -errno;
		close(fd);
		return fail(ret, "cannot reach kvmemd at %s: %s%s",
			    sa->sun_path, strerror(-ret),
			    ret == -ENOENT || ret == -ECONNREFUSED
				    ? " — is kvmemd running?"
				    : "");
	}
	/* A daemon that refuses at once may have closed already; its
	 * answer is still there to read. */
	send(fd, h, sizeof(*h), MSG_NOSIGNAL);
	ret = recv_welcome(fd, w, fds, timeout_ms);
	if (ret) {
		for (i = 0; i < 4; i++)
			if (fds[i] >= 0)
				close(fds[i]);
		close(fd);
		return ret;
	}
	*sock = fd;
	return 0;
}

/* Microseconds left of CONNECT_TIMEOUT_MS from @start; negative past it. */
static int64_t connect_left_us(uint64_t start)
{
	return CONNECT_TIMEOUT_MS * 1000ll - (int64_t)(now_us() - start);
}

/*
 * Attach, trying again while kvmemd says it is busy (-EAGAIN: its queue
 * of sessions being set up is full, or this connection made way for
 * others of the same user that spoke first; a burst of clients starting
 * at once sees that). The pause doubles from 1 ms to 100 ms, each drawn
 * between half and all of it so that clients refused together come back
 * apart; all tries together take at most CONNECT_TIMEOUT_MS.
 */
static int handshake(const struct sockaddr_un *sa, const struct kvmem_hello *h,
		     struct kvmem_welcome *w, int fds[4], int *sock)
{
	uint64_t start = now_us(), step, pause;
	struct kvmem_rng rng;
	int64_t left;
	int ret = 0, i;

	kvmem_rng_seed(&rng, start ^ (uint64_t)getpid() << 32);
	for (step = 1000;;
	     step = step < RETRY_MAX_US / 2 ? 2 * step : RETRY_MAX_US) {
		left = connect_left_us(start);
		/* Not a millisecond left after a refusal: that is the answer. */
		if (ret && left < 1000)
			return ret;
		for (i = 0; i < 4; i++)
			fds[i] = -1;
		ret = hello_once(sa, h, (int)(left / 1000), w, fds, sock);
		if (ret != -EAGAIN)
			return ret;
		pause = step - kvmem_rng_below(&rng, step / 2);
		left = connect_left_us(start);
		if (left < (int64_t)pause)
			pause = left > 0 ? (uint64_t)left : 0;
		usleep((useconds_t)pause);
	}
}

int kvmem_connect(const char *path, const struct kvmem_geometry *g,
		  const struct kvmem_connect_opts *opts,
		  struct kvmem_cache **out)
{
	static const struct kvmem_connect_opts defaults;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kvmem_hello h = {
		.magic = KVMEM_HELLO_MAGIC,
		.abi_version = KVMEM_ABI_VERSION,
		.size = sizeof(h),
		/* The GPU tier only when asked for: without it the session's
		 * GPU memory is its caller's (kvmem_cuda_session_memory()). */
		.features = KVMEM_FEAT_ALL & ~KVMEM_FEAT_GPU_TIER,
	};
	struct kvmem_welcome w;
	int fds[4] = { -1, -1, -1, -1 };
	struct kvmem_cache *c = NULL;
	char why[KVMEM_MESSAGE_LEN - 20];
	struct remote *r;
	int ret, i;

	connect_error[0] = 0;
	if (!opts)
		opts = &defaults;
	if (!out || !g ||
	    opts->flags &
		    ~(KVMEM_CONNECT_NO_ARCHIVE | KVMEM_CONNECT_GPU_TIER) ||
	    opts->resv)
		return fail(-EINVAL, "bad arguments");
	if ((opts->flags & KVMEM_CONNECT_GPU_TIER) && !opts->gpu_mib)
		return fail(-EINVAL, "the GPU tier needs GPU memory (gpu_mib)");
	if (opts->flags & KVMEM_CONNECT_NO_ARCHIVE)
		h.features &= ~KVMEM_FEAT_ARCHIVE;
	if (opts->flags & KVMEM_CONNECT_GPU_TIER)
		h.features |= KVMEM_FEAT_GPU_TIER;
	if (!path)
		path = kvmem_socket_path(sa.sun_path, sizeof(sa.sun_path));
	if (!path || strlen(path) >= sizeof(sa.sun_path))
		return fail(-ENAMETOOLONG, "socket path too long");
	memmove(sa.sun_path, path, strlen(path) + 1);
	if (kvmem_geometry_explain(g, why, sizeof(why)))
		return fail(-EINVAL, "invalid geometry: %s", why);
	ret = kvmem__cache_new(g, &c);
	if (ret)
		return fail(ret, "out of memory");
	r = calloc(1, sizeof(*r));
	if (!r) {
		ret = fail(-ENOMEM, "out of memory");
		goto err_cache;
	}
	r->sq_efd = r->cq_efd = -1;
	r->spin_us = opts->spin_us ? opts->spin_us : DEFAULT_SPIN_US;
	h.geometry = *g;
	h.quota_bytes = opts->quota_bytes;
	h.sq_entries = opts->sq_entries;
	h.cq_entries = opts->cq_entries;
	h.gpu_mib = opts->gpu_mib;
	ret = handshake(&sa, &h, &w, fds, &r->sock);
	if (ret)
		goto err_remote;
	if (opts->gpu_mib ? w.gpu_bytes < (uint64_t)opts->gpu_mib << 20
			  : w.gpu_bytes != 0) {
		ret = fail(-EPROTO,
			   "kvmemd gave %llu bytes of GPU memory for %u MiB",
			   (unsigned long long)w.gpu_bytes, opts->gpu_mib);
		goto err_fds;
	}
	if ((opts->flags & KVMEM_CONNECT_GPU_TIER) &&
	    !(w.features & KVMEM_FEAT_GPU_TIER)) {
		ret = fail(-EOPNOTSUPP, "kvmemd does not offer the GPU tier");
		goto err_fds;
	}
	ret = map_session(r, &w, g, fds[0]);
	if (ret)
		goto err_fds;
	close(fds[0]);
	c->gpu_fd = fds[3];
	c->gpu_bytes = w.gpu_bytes;
	if (w.features & KVMEM_FEAT_GPU_TIER) {
		r->gpu_slots = (uint32_t)(w.gpu_bytes / KVMEM_SLOT_UNIT);
		c->gpu_slot0 = r->nslots;
	}
	memcpy(c->gpu_uuid, w.gpu_uuid, sizeof(c->gpu_uuid));
	r->session = w.session;
	r->features = w.features;
	r->token = w.resume_token;
	r->sa = sa;
	r->hello = h;
	r->sq_efd = fds[1];
	r->cq_efd = fds[2];
	r->stash = calloc(r->cq_entries, sizeof(*r->stash));
	if (!r->stash) {
		ret = fail(-ENOMEM, "out of memory");
		goto err_map;
	}
	c->store = &remote_ops;
	c->store_priv = r;
	c->heat = r->heat;
	c->heat_units = r->heat_units;
	c->arena = r->arena;
	c->arena_bytes = r->arena_bytes;
	*out = c;
	return 0;

err_map:
	munmap(r->map, r->map_bytes);
	close(r->sq_efd);
	close(r->cq_efd);
	if (c->gpu_fd >= 0)
		close(c->gpu_fd);
	goto err_sock;
err_fds:
	for (i = 0; i < 4; i++)
		if (fds[i] >= 0)
			close(fds[i]);
err_sock:
	close(r->sock);
err_remote:
	free(r);
err_cache:
	kvmem__cache_free(c);
	return ret;
}

/* ---- the raw ring ----------------------------------------------------- */

static struct remote *connected(struct kvmem_cache *c)
{
	return c && c->store == &remote_ops ? c->store_priv : NULL;
}

/* ---- after a restart of the daemon ------------------------------------ */

static void make_nop(struct kvmem_sqe *e, uint64_t user_data)
{
	memset(e, 0, sizeof(*e));
	e->opcode = KVMEM_OP_NOP;
	e->user_data = user_data;
}

/*
 * The SQEs the old daemon did not take (from the ring's sq_head, where it
 * stopped) run in the new one, unless they are rewritten here: those whose
 * callers were told they failed become NOPs the library ignores. The
 * library's asynchronous ops that were published stay, to run now. Done
 * again after a failed try, it changes nothing more.
 */
static void unsent_drop(struct remote *r)
{
	const uint32_t head = kvmem__load_acquire(&r->ring->sq_head);
	const uint32_t published = r->sq_pub - head;
	struct kvmem_sqe *e;
	uint32_t i;

	for (i = 0; i != r->sq_tail - head; i++) {
		e = &r->sqes[(head + i) & (r->sq_entries - 1)];
		if (e->user_data & KVMEM_USER_DATA_LIB) {
			if (i >= published || e->user_data & LIB_SYNC)
				make_nop(e, e->user_data);
		} else if (i < published) {
			/* The caller's: it waits for no completion now. */
			make_nop(e, KVMEM_USER_DATA_LIB);
			r->user_inflight--;
		}
	}
}

int kvmem_reconnect(struct kvmem_cache *c)
{
	struct remote *r = connected(c);
	int fds[4] = { -1, -1, -1, -1 };
	struct kvmem_hello h;
	struct kvmem_welcome w;
	struct stat st;
	uint64_t start;
	int sock, ret, i;

	connect_error[0] = 0;
	if (!r)
		return fail(-EINVAL, "not a cache attached to kvmemd");
	if (!r->dead) {
		struct pollfd pfd = { .fd = r->sock,
				      .events = POLLIN | POLLRDHUP };

		/* No call noticed yet: does the socket say so? */
		if (poll(&pfd, 1, 0) > 0)
			check_socket(r, pfd.revents);
		else if (kvmem__load_relaxed(&r->ring->flags) &
			 KVMEM_RING_SHUTDOWN)
			mark_dead(r);
		if (!r->dead)
			return 0;
	}
	if (!r->token)
		return fail(-EOPNOTSUPP, "kvmemd did not offer to keep this "
					 "session across its restart");
	if (r->sq_tail - kvmem__load_acquire(&r->ring->sq_head) > r->sq_entries)
		return fail(-EPROTO, "the ring's submission queue is corrupt");
	/* Before the hello: the new daemon may take SQEs at once. */
	unsent_drop(r);
	h = r->hello;
	h.resume_session = r->session;
	h.resume_token = r->token;
	/* The new daemon may not listen yet (no socket activation), or the
	 * old one may die with the hello in its backlog (a reset): both are
	 * the restart still under way. */
	for (start = now_us();;) {
		ret = handshake(&r->sa, &h, &w, fds, &sock);
		if ((ret != -ENOENT && ret != -ECONNREFUSED &&
		     ret != -ECONNRESET) ||
		    connect_left_us(start) < 50000)
			break;
		usleep(50000);
	}
	if (ret)
		return ret;
	if (fstat(fds[0], &st) || st.st_dev != r->dev || st.st_ino != r->ino ||
	    w.session != r->session || w.map_bytes != r->map_bytes ||
	    w.sq_entries != r->sq_entries || w.cq_entries != r->cq_entries ||
	    w.arena_bytes != r->arena_bytes || fds[1] < 0 || fds[2] < 0) {
		for (i = 0; i < 4; i++)
			if (fds[i] >= 0)
				close(fds[i]);
		close(sock);
		return fail(-EPROTO, "kvmemd gave back memory that is not the "
				     "session's");
	}
	/* The mapping stays: it is the same memory. */
	close(fds[0]);
	if (fds[3] >= 0)
		close(fds[3]);
	close(r->sock);
	close(r->sq_efd);
	close(r->cq_efd);
	r->sock = sock;
	r->sq_efd = fds[1];
	r->cq_efd = fds[2];
	r->features = w.features;
	r->token = w.resume_token;
	r->dead = 0;
	/* Whatever waits in the SQ is the new daemon's to take. */
	eventfd_write(r->sq_efd, 1);
	return 0;
}

struct kvmem_sqe *kvmem_ring_sqe(struct kvmem_cache *c)
{
	struct remote *r = connected(c);
	struct kvmem_sqe *e;

	if (!r || r->dead || r->user_inflight >= r->cq_entries)
		return NULL;
	e = sqe_get(r);
	if (e)
		r->user_inflight++;
	return e;
}

int kvmem_ring_submit(struct kvmem_cache *c)
{
	struct remote *r = connected(c);

	return r ? submit(r) : -EOPNOTSUPP;
}

int kvmem_ring_wait(struct kvmem_cache *c, struct kvmem_cqe *cqe,
		    int timeout_ms)
{
	struct remote *r = connected(c);
	int ret;

	if (!r || !cqe)
		return -EINVAL;
	for (;;) {
		if (r->nstash) {
			*cqe = r->stash[r->stash_head];
			r->stash_head = (r->stash_head + 1) % r->cq_entries;
			r->nstash--;
			r->user_inflight--;
			return 1;
		}
		ret = cqe_wait(r, cqe, timeout_ms);
		if (ret <= 0)
			return ret;
		if (!(cqe->user_data & KVMEM_USER_DATA_LIB)) {
			r->user_inflight--;
			return 1;
		}
		if (cqe->res < 0)
			c->ring_errors++;
	}
}

void *kvmem_ring_buffer(struct kvmem_cache *c, uint64_t *addr, size_t *len)
{
	struct remote *r = connected(c);

	if (!r)
		return NULL;
	*addr = BUF_USER;
	*len = r->buf_bytes - BUF_USER;
	return r->buf + BUF_USER;
}

int kvmem_daemon_stats(struct kvmem_cache *c, struct kvmem_stats *st)
{
	struct remote *r = connected(c);
	struct kvmem_sqe t = {
		.opcode = KVMEM_OP_STATS,
		.addr = BUF_STATS,
		.len = sizeof(*st),
	};
	int ret;

	if (!r)
		return -EOPNOTSUPP;
	ret = lib_sync(c, &t);
	if (ret < 0)
		return ret;
	if (ret != sizeof(*st))
		return -EIO;
	memcpy(st, r->buf + BUF_STATS, sizeof(*st));
	return 0;
}

uint32_t kvmem_session_id(const struct kvmem_cache *c)
{
	const struct remote *r =
		c && c->store == &remote_ops ? c->store_priv : NULL;

	return r ? r->session : 0;
}

const char *kvmem_strerror(int err)
{
	switch (err) {
	case -ENOTCONN:
		return "kvmemd connection lost";
	case -EACCES:
		return "kvmemd does not admit this user";
	case -EDQUOT:
		return "quota over kvmemd's per-session limit";
	case -ENOSPC:
		return "kvmemd's pool or sequence limit reached";
	case -EPROTONOSUPPORT:
		return "kvmemd speaks another ABI version";
	case -EBADMSG:
		return "uncorrectable error in protected data";
	case -ESTALE:
		return "kvmemd did not keep the session across its restart";
	default:
		return strerror(err < 0 ? -err : err);
	}
}
