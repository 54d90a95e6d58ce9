/* SPDX-License-Identifier: MIT */
/*
 * share.c - a session's prefix ops: PREFIX_PUBLISH copies full pages of a
 * sequence into blocks of its tenant's table (prefix.c), staged over as
 * many ops as their size takes and checked against their seals;
 * PREFIX_ATTACH copies blocks into sealed slots of a sequence, checked
 * again, or waits for room (tier.c); PREFIX_FETCH asks the shared tier
 * (remote.c) for the blocks the tenant lacks, and waits for its answer
 *
 * Everything a client wrote is validated here before use, as in
 * session.c, whose op table calls these.
 */
#include <errno.h>
#include <string.h>

#include "kvmem-private.h"
#include "kvmemd.h"
#include "prefix.h"
#include "remote.h"
#include "session.h"

/* The tokens of the block at @token_start of @s's geometry, or 0 when no
 * block starts there. */
static uint32_t block_tokens(const struct kvmemd_session *s,
			     uint32_t token_start)
{
	const uint32_t S = s->g.sink_tokens, T = s->g.tokens_per_page;

	if (S && !token_start)
		return S;
	if (token_start < S || (token_start - S) % T)
		return 0;
	return T;
}

/* The slot kind of the block of @ntokens from @token_start, or -EINVAL
 * when no block is that (see PREFIX_PUBLISH in kvmem/uapi.h). */
static int block_kind(const struct kvmemd_session *s, uint32_t token_start,
		      uint32_t ntokens)
{
	const uint32_t n = block_tokens(s, token_start);

	if (!n || ntokens != n)
		return -EINVAL;
	return s->g.sink_tokens && !token_start ? KVMEM_SLOT_HOT
						: KVMEM_SLOT_SEALED;
}

/*
 * Is @page, a copy, the page it was sealed as? Its header is first written
 * from @h; its words are corrected in place where they need it. 0, or -EIO
 * when some word or check is uncorrectable or the CRC does not match.
 */
static int copy_good(const struct kvmemd_session *s, uint8_t *page,
		     const struct kvmem_page_hdr *h)
{
	if (h)
		kvmem__hdr_encode(page, h);
	if (!kvmem_page_verify(page, &s->g, NULL))
		return 0;
	if (kvmem_page_scrub(page, &s->g, NULL) ||
	    kvmem_page_verify(page, &s->g, NULL))
		return -EIO;
	return 0;
}

/* Drop the block being published. */
void session_stage_drop(struct kvmemd_session *s)
{
	if (!s->stage)
		return;
	kvmemd_prefix_unstage(s->d, s->stage);
	s->stage = NULL;
}

/* @b (NULL: none), partway attached into @seq, is the block the session
 * holds pinned from now on, and no other. */
void session_attach_pin(struct kvmemd_session *s, struct kvmemd_prefix_block *b,
			uint32_t seq)
{
	if (b)
		kvmemd_prefix_pin(s->d, b);
	if (s->attach)
		kvmemd_prefix_unpin(s->d, s->attach);
	s->attach = b;
	s->attach_seq = seq;
}

/* The session's prefix ops end with it. */
void session_prefix_drop(struct kvmemd_session *s)
{
	session_stage_drop(s);
	session_attach_pin(s, NULL, 0);
}

/*
 * The sealed page of @q named (@layer, @token_start) if it can be
 * published as part of a block of @ntokens of slot kind @kind: 0 with its
 * page index, or -ENOENT (missing, not whole), -EOPNOTSUPP (archived),
 * -EIO (damaged).
 */
static int publish_page(const struct kvmemd_session *s, const struct seq *q,
			uint32_t layer, uint32_t token_start, uint32_t ntokens,
			int kind, uint32_t *out)
{
	uint32_t pg = session_seq_page(s, q, layer, token_start);
	const struct slot *sl;

	if (pg == NO_UNIT)
		return -ENOENT;
	sl = &s->arena.slots[s->arena.pages[pg].unit];
	if (sl->kind != kind || sl->ntokens != ntokens)
		return -ENOENT;
	/* Archived, or on a GPU whose memory only the driver's copies
	 * reach. */
	if (sl->flags & SLOT_ARCHIVED ||
	    !session_page_readable(s, s->arena.pages[pg].unit))
		return -EOPNOTSUPP;
	if (sl->flags & (SLOT_DEGRADED | SLOT_CRC_BAD))
		return -EIO;
	*out = pg;
	return 0;
}

/* Start publishing the block that PREFIX_PUBLISH @e names at layer 0. */
static int stage_start(struct kvmemd_session *s, const struct seq *q,
		       const struct kvmem_sqe *e, const uint8_t *key, int kind)
{
	struct kvmemd_prefix_block name;
	uint32_t l, pg;
	int ret;

	session_stage_drop(s);
	for (l = 0; l < s->g.layers; l++) {
		ret = publish_page(s, q, l, e->token_start, e->ntokens, kind,
				   &pg);
		if (ret)
			return ret;
	}
	memset(&name, 0, sizeof(name));
	memcpy(name.key, key, sizeof(name.key));
	name.g = s->g;
	name.digest = s->digest;
	name.token_start = e->token_start;
	name.ntokens = e->ntokens;
	name.layers = s->g.layers;
	name.page_bytes = s->layout[kind].size;
	name.kind = (uint8_t)kind;
	name.layout = s->layout[kind];
	/* Counted in the tenant's share, not the host pool: what another
	 * tenant can see of the pool says nothing of this one's keys. */
	ret = kvmemd_prefix_stage(s->d, s->tenant, &name, &s->stage);
	if (ret)
		return ret;
	s->stage_seq = q->id;
	return 0;
}

/*
 * The key of the block before the one PREFIX_PUBLISH @e of @q names, as
 * the shared tier chains them: zeros for block 0, NULL when the session
 * did not publish that block of @q just before (its chain is unknown).
 */
static const uint8_t *chain_parent(const struct kvmemd_session *s,
				   const struct seq *q,
				   const struct kvmem_sqe *e)
{
	static const uint8_t none[KVMEM_PREFIX_KEY_BYTES];

	if (!e->token_start)
		return none;
	if (s->chain_seq != q->id || s->chain_end != e->token_start)
		return NULL;
	return s->chain_key;
}

/* The block PREFIX_PUBLISH @e names, @key, is published: the parent of the
 * next. */
static void chain_next(struct kvmemd_session *s, const struct seq *q,
		       const struct kvmem_sqe *e, const uint8_t *key)
{
	memcpy(s->chain_key, key, sizeof(s->chain_key));
	s->chain_seq = q->id;
	s->chain_end = e->token_start + e->ntokens;
}

/*
 * PREFIX_PUBLISH: a block's pages are copied and checked a few layers an
 * op (as many as a pass's work allows, one at least), into a block staged
 * for the session; the op of the last layer hands it to prefix.c. An op
 * that fails, a page that fails its checks or an op that does not
 * continue what is staged among them, drops it, as do a release and a
 * free of its sequence.
 */
static int prefix_publish(struct kvmemd_session *s, const struct kvmem_sqe *e)
{
	struct seq *q = session_seq(s, e->seq);
	uint8_t key[KVMEM_PREFIX_KEY_BYTES];
	struct kvmemd_prefix_block *b;
	struct kvmem_page_hdr h;
	const uint8_t *buf, *parent;
	uint32_t l, last, pg;
	int kind, ret;

	if (!(s->features & KVMEM_FEAT_PREFIX))
		return -EOPNOTSUPP;
	/* Before anything is looked at: a refusal says nothing of the
	 * tenant's blocks. */
	ret = kvmemd_prefix_may_publish(s->d, s->tenant, s->uid);
	if (ret)
		return ret;
	kind = block_kind(s, e->token_start, e->ntokens);
	if (!q || kind < 0 || e->len != KVMEM_PREFIX_KEY_BYTES ||
	    e->layer >= s->g.layers)
		return -EINVAL;
	buf = session_op_buf(s, e->addr, e->len, 1);
	if (!buf)
		return -EFAULT;
	/* Acquired and complete: every page is resident, none moves. */
	if (!q->acquired || q->wait)
		return -EBUSY;
	/* Copied once: the client may change it meanwhile. */
	memcpy(key, buf, sizeof(key));
	if (!e->layer) {
		ret = stage_start(s, q, e, key, kind);
		/* Published before: there is nothing more to copy. */
		if (ret == -EEXIST) {
			chain_next(s, q, e, key);
			return (int)s->g.layers;
		}
		if (ret)
			return ret;
	} else if (!s->stage || s->stage_seq != q->id ||
		   s->stage->staged != e->layer ||
		   s->stage->token_start != e->token_start ||
		   s->stage->ntokens != e->ntokens ||
		   memcmp(s->stage->key, key, sizeof(key))) {
		return -EINVAL;
	}
	b = s->stage;
	for (l = e->layer; l < s->g.layers; l++) {
		if (l > e->layer &&
		    s->pass_bytes + b->page_bytes > SESSION_PASS_BYTES)
			break;
		ret = publish_page(s, q, l, e->token_start, e->ntokens, kind,
				   &pg);
		if (ret)
			return ret;
		/* The client may write to its sealed pages: the copy is
		 * checked against the seal, not the page. */
		s->pass_bytes += b->page_bytes;
		memcpy(b->data + (size_t)l * b->page_bytes,
		       session_page(s, s->arena.pages[pg].unit), b->page_bytes);
		session_slot_header(s, &s->arena.slots[s->arena.pages[pg].unit],
				    &h);
		if (copy_good(s, b->data + (size_t)l * b->page_bytes, &h))
			return -EIO;
		b->pages[l].crc = h.crc;
		b->pages[l].hdr_flags = h.flags;
		b->pages[l].generation = h.generation;
	}
	last = l;
	b->staged = last;
	if (last < s->g.layers)
		return (int)(last - e->layer);
	/* Whole: kvmemd keeps it now, or it was kept meanwhile. */
	s->stage = NULL;
	parent = chain_parent(s, q, e);
	ret = kvmemd_prefix_keep(s->d, b);
	if (ret && ret != -EEXIST)
		return ret;
	/* Kept here, it goes to the shared tier too. */
	if (!ret)
		kvmemd_remote_push(s->d, b, parent);
	chain_next(s, q, e, key);
	return (int)(last - e->layer);
}

int session_op_prefix_publish(struct kvmemd_session *s,
			      const struct kvmem_sqe *e)
{
	int ret = prefix_publish(s, e);

	/* An op that fails, whatever the reason, ends the block. */
	if (ret < 0)
		session_stage_drop(s);
	return ret;
}

/* Page @l of @b into slot @u, open, of @q: 0, or -ENOMEM (the slot is
 * the caller's to free then). */
static int attach_page(struct kvmemd_session *s, struct seq *q,
		       const struct kvmemd_prefix_block *b, uint32_t l,
		       uint32_t u)
{
	struct kvmem_page_hdr h = {
		.layer = l,
		.token_start = b->token_start,
		.ntokens = b->ntokens,
		.flags = b->pages[l].hdr_flags,
		.generation = b->pages[l].generation,
		.crc = b->pages[l].crc,
	};
	int ret;

	ret = session_slot_seal(s, q, u, &h);
	if (ret)
		return ret;
	/* The session's own page from here: its header names its sequence. */
	memcpy(session_page(s, u), b->data + (size_t)l * b->page_bytes,
	       b->page_bytes);
	session_slot_header(s, &s->arena.slots[u], &h);
	kvmem__hdr_encode(session_page(s, u), &h);
	return 0;
}

int session_prefix_attach(struct kvmemd_session *s, const struct kvmem_sqe *e,
			  const uint8_t *key, int *no_slot)
{
	const size_t move = s->features & KVMEM_FEAT_ARCHIVE
				    ? sizeof(struct kvmem_page_move_ex)
				    : sizeof(struct kvmem_page_move);
	struct seq *q = session_seq(s, e->seq);
	struct kvmemd_prefix_block *b;
	struct kvmem_page_move_ex m;
	uint32_t room, cap, last, l, u, n = 0;
	uint8_t *buf;
	int kind, ret = 0;

	*no_slot = 0;
	if (!(s->features & KVMEM_FEAT_PREFIX))
		return -EOPNOTSUPP;
	kind = block_kind(s, e->token_start, e->ntokens);
	if (!q || kind < 0 || e->layer >= s->g.layers ||
	    e->len < KVMEM_PREFIX_KEY_BYTES)
		return -EINVAL;
	buf = session_op_buf(s, e->addr, e->len, sizeof(uint32_t));
	if (!buf)
		return -EFAULT;
	if (!q->acquired || q->wait)
		return -EBUSY;
	/* A miss counts once per block, as its first layer is asked for. */
	b = kvmemd_prefix_find(s->d, s->tenant, key, &s->g, s->digest,
			       e->token_start, e->ntokens, !e->layer);
	if (!b)
		return -ENOENT;
	room = (uint32_t)((e->len - KVMEM_PREFIX_KEY_BYTES) / move);
	if (!room)
		return -EMSGSIZE;
	/* As many pages as the buffer holds and a MiB of work allows. */
	cap = SESSION_PASS_BYTES / (uint32_t)s->layout[kind].size;
	if (room > cap)
		room = cap ? cap : 1;
	last = s->g.layers - e->layer < room ? s->g.layers : e->layer + room;
	for (l = e->layer; l < last; l++) {
		if (session_seq_page(s, q, l, b->token_start) != NO_UNIT) {
			ret = -EEXIST;
			break;
		}
		/* The slot first: an op that waits for room checks nothing
		 * each time it is tried again. */
		if (arena_slot_alloc(&s->arena, kind, &u)) {
			*no_slot = !n;
			ret = -ENOMEM;
			break;
		}
		/* A copy that no longer verifies is never handed out. */
		s->pass_bytes += b->page_bytes;
		if (copy_good(s, b->data + (size_t)l * b->page_bytes, NULL)) {
			arena_slot_free(&s->arena, u);
			kvmemd_prefix_damaged(s->d, b);
			b = NULL;
			ret = -EIO;
			break;
		}
		ret = attach_page(s, q, b, l, u);
		if (ret) {
			arena_slot_free(&s->arena, u);
			break;
		}
		memset(&m, 0, sizeof(m));
		m.layer = l;
		m.token_start = e->token_start;
		m.old_slot = KVMEM_SLOT_NONE;
		m.new_slot = u;
		m.format = s->layout[kind].format;
		m.codec = s->layout[kind].codec;
		memcpy(buf + KVMEM_PREFIX_KEY_BYTES + (size_t)n * move, &m,
		       move);
		n++;
	}
	s->pass_bytes += (uint64_t)n * s->layout[kind].size;
	if (b && n && !e->layer)
		kvmemd_prefix_used(s->d, b);
	/* Partway, the block is in use until the next op; an attach that
	 * waits for room holds what it held. */
	if (b && n && e->layer + n < s->g.layers)
		session_attach_pin(s, b, q->id);
	else if (ret != -ENOMEM || !*no_slot)
		session_attach_pin(s, NULL, 0);
	return n ? (int)n : ret;
}

/* A full arena waits for released pages to leave, when any can. */
int session_op_prefix_attach(struct kvmemd_session *s,
			     const struct kvmem_sqe *e)
{
	uint8_t key[KVMEM_PREFIX_KEY_BYTES] = { 0 };
	const uint8_t *buf = NULL;
	int no_slot, ret;

	/* Copied once, here: a wait goes on with this copy. */
	if (e->len >= KVMEM_PREFIX_KEY_BYTES)
		buf = session_op_buf(s, e->addr, e->len, sizeof(uint32_t));
	if (buf)
		memcpy(key, buf, sizeof(key));
	ret = session_prefix_attach(s, e, key, &no_slot);
	return ret == -ENOMEM && no_slot ? tier_attach_wait(s, e, key) : ret;
}

/* The shared tier's answer to a PREFIX_FETCH that waited as @ctx: the
 * blocks it kept after those the tenant had. */
static void fetch_done(void *ctx, int res)
{
	struct tier_wait *w = ctx;

	w->job = NULL;
	if (res >= 0)
		res += (int)w->base;
	else if (w->base)
		res = (int)w->base;
	tier_remote_done(w->owner, w, res);
}

static int fetch_start(struct kvmemd_session *s, const struct kvmem_sqe *e,
		       struct tier_wait *w);

/* The store's answer: with a shared tier, the blocks after those it
 * brought are asked of it (the op starts again from what the tenant has
 * now); else, or when it brought none, as fetch_done(). */
static void store_done(void *ctx, int res)
{
	struct tier_wait *w = ctx;
	int ret;

	w->job = NULL;
	if (res <= 0 || !w->owner->d->remote) {
		fetch_done(ctx, res);
		return;
	}
	ret = fetch_start(w->owner, &w->e, w);
	if (ret != OP_WAIT)
		tier_remote_done(w->owner, w, ret);
}

/*
 * The PREFIX_FETCH @e: the blocks from token_start on that the tenant has
 * already are not asked for again; from the first it lacks, the store
 * (the leading blocks it has, prefix-disk.c) or else the shared tier is
 * asked, and the op waits for it as @w (NULL: a wait is made here; tier.c
 * keeps its CQE). Return: OP_WAIT, or the op's result.
 */
static int fetch_start(struct kvmemd_session *s, const struct kvmem_sqe *e,
		       struct tier_wait *w)
{
	uint32_t start[KVMEM_PREFIX_FETCH_MAX], ntok[KVMEM_PREFIX_FETCH_MAX];
	uint8_t(*hash)[KVMEM_PREFIX_KEY_BYTES];
	struct kvmemd_remote_fetch f;
	const int made = !w;
	uint32_t i, n, m;
	uint64_t at;
	int ret;

	if (e->ntokens || e->len < 2 * KVMEM_PREFIX_KEY_BYTES ||
	    e->len % KVMEM_PREFIX_KEY_BYTES ||
	    e->len / KVMEM_PREFIX_KEY_BYTES - 1 > KVMEM_PREFIX_FETCH_MAX ||
	    !block_tokens(s, e->token_start))
		return -EINVAL;
	hash = session_op_buf(s, e->addr, e->len, 1);
	if (!hash)
		return -EFAULT;
	n = e->len / KVMEM_PREFIX_KEY_BYTES - 1;
	for (i = 0, at = e->token_start; i < n; i++) {
		start[i] = (uint32_t)at;
		ntok[i] = block_tokens(s, start[i]);
		if (at + ntok[i] > UINT32_MAX)
			break;
		at += ntok[i];
	}
	n = i;
	/* What the tenant has is not asked for again. */
	for (m = 0; m < n; m++)
		if (!kvmemd_prefix_find(s->d, s->tenant, hash[m + 1], &s->g,
					s->digest, start[m], ntok[m], 0))
			break;
	if (m == n)
		return (int)n;
	if (made) {
		ret = tier_remote_wait(s, e, &w);
		if (ret)
			return m ? (int)m : ret;
	}
	/* The job copies the keys: the client may change them meanwhile. */
	f = (struct kvmemd_remote_fetch){
		.tenant = s->tenant,
		.g = s->g,
		.digest = s->digest,
		.n = n - m,
		.hash = (const uint8_t(*)[KVMEM_PREFIX_KEY_BYTES])hash + m,
		.start = start + m,
		.ntokens = ntok + m,
		.done = store_done,
		.ctx = w,
	};
	memcpy(f.layout, s->layout, sizeof(f.layout));
	w->base = m;
	/* The store first, then the shared tier. */
	ret = kvmemd_prefix_disk_fetch(s->d, &f, &w->job);
	w->forget = kvmemd_prefix_disk_forget;
	if (ret == -ENOENT && s->d->remote) {
		f.done = fetch_done;
		ret = kvmemd_remote_fetch(s->d, &f,
					  (struct remote_job **)&w->job);
		w->forget = kvmemd_remote_forget;
	}
	if (!ret)
		return OP_WAIT;
	if (made)
		tier_remote_drop(s, w);
	return m || ret == -ENOENT ? (int)m : ret;
}

/* PREFIX_FETCH, as fetch_start() says. */
int session_op_prefix_fetch(struct kvmemd_session *s, const struct kvmem_sqe *e)
{
	if (!(s->features & KVMEM_FEAT_REMOTE))
		return -EOPNOTSUPP;
	return fetch_start(s, e, NULL);
}
