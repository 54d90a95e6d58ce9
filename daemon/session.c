/* SPDX-License-Identifier: MIT */
/*
 * session.c - one attached client: its shared region, its sequences, and
 * the op table its ring is served from (its slots and pages: arena.c)
 *
 * Everything in the shared region is the client's to scribble on. The daemon
 * keeps its own copy of every index it acts on (ring heads and tails, the
 * slot table, the sequences) and reads from shared memory only values it
 * then checks: an SQE is copied out before it is looked at, ring positions
 * are checked against what the daemon last saw, a header is copied and
 * decoded before it is compared. A bad SQE completes with an error; a broken
 * ring protocol ends the session. Nothing a client writes reaches another
 * session or the daemon's own memory.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include "kvmem-private.h"
#include "kvmemd.h"
#include "prefix.h"
#include "session.h"

#define BUF_BYTES (64u << 10)
#define ALIGN_UP(x, a) (((x) + (a)-1) / (a) * (a))

/* A valid geometry's pages fit the welcome's 32-bit slot sizes. */
_Static_assert(KVMEM_PAGE_MAX <= UINT32_MAX, "page sizes fit 32 bits");

/*
 * The daemon's own memory a session may hold for its sequences and pages,
 * besides its fixed tables: an eighth of its arena, and 64 KiB however
 * small the arena. Charged to the host pool as it is taken (see
 * arena_heap_get()), so forks and page tables count like arenas do.
 */
#define HEAP_SHARE 8
#define HEAP_MIN (64u << 10)

static int refuse(struct kvmem_welcome *w, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int refuse(struct kvmem_welcome *w, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(w->message, sizeof(w->message), fmt, ap);
	va_end(ap);
	w->error = err;
	return err;
}

/* A 16-bit heat per unit of the arena and the GPU tier, rounded up to
 * whole units. */
static uint64_t heat_bytes(uint64_t units)
{
	return ALIGN_UP(units * sizeof(uint16_t), KVMEM_SLOT_UNIT);
}

static int is_pow2(uint32_t x)
{
	return x && !(x & (x - 1));
}

static int all_zero(const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n--)
		if (*b++)
			return 0;
	return 1;
}

/* The daemon memory of a session of @quota that does not grow: the slot
 * table, the free lists and the sequence table (kvmemd_session_setup()). */
static uint64_t fixed_heap(const struct kvmemd_config *cfg, uint64_t quota,
			   const struct kvmem_page_layout l[2])
{
	const uint32_t units[2] = { (uint32_t)(l[0].size / KVMEM_SLOT_UNIT),
				    (uint32_t)(l[1].size / KVMEM_SLOT_UNIT) };

	return sizeof(struct kvmemd_session) +
	       arena_table_bytes((uint32_t)(quota / KVMEM_SLOT_UNIT), 0,
				 units) +
	       (uint64_t)cfg->max_seqs * sizeof(struct seq *);
}

/*
 * The host memory a GPU's copies of the GPU tier read and write is pinned
 * (the worker registers it with the driver), as far as
 * pool.gpu_pinned_bytes allows: the driver does not charge RLIMIT_MEMLOCK
 * for it, kvmemd keeps its own count. A session over it runs unpinned, its
 * copies staged by the driver.
 */
static void pin_admit(struct kvmemd_session *s)
{
	static struct kvmemd_ratelimit over;
	const struct kvmemd_config *cfg = &s->d->cfg;
	struct kvmemd_gpu *g = &s->d->gpu;
	const uint64_t limit =
		cfg->gpu_pinned_bytes ? cfg->gpu_pinned_bytes : cfg->host_bytes;

	if (s->map_bytes <= limit && g->pinned <= limit - s->map_bytes) {
		s->pin_bytes = s->map_bytes;
		g->pinned += s->pin_bytes;
		return;
	}
	g->unpinned++;
	kvmemd_log_rl(&over, "sessions left unpinned", LOG_WARNING,
		      "session %u: %llu bytes more of pinned host memory would "
		      "pass pool.gpu_pinned_bytes; its GPU copies go unpinned",
		      s->id, (unsigned long long)s->map_bytes);
}

/* The GPU memory a hello asks for, rounded up to whole allocation units;
 * 0, or a refusal. */
static int gpu_admit(struct kvmemd *d, const struct kvmem_hello *h,
		     const struct kvmemd_user *u, struct kvmem_welcome *w,
		     uint64_t *out)
{
	const struct kvmemd_config *cfg = &d->cfg;
	struct kvmemd_gpu *g = &d->gpu;
	uint64_t bytes, max;

	*out = 0;
	if (!h->gpu_mib)
		return 0;
	if (!g->ops)
		return refuse(w, -EOPNOTSUPP, "kvmemd has no GPU pool: %s",
			      g->why);
	if (!all_zero(h->gpu_uuid, sizeof(h->gpu_uuid)) &&
	    memcmp(h->gpu_uuid, g->uuid_bytes, sizeof(g->uuid_bytes)))
		return refuse(w, -ENODEV,
			      "kvmemd's GPU pool is on %s, not the GPU "
			      "asked for",
			      g->uuid);
	bytes = ALIGN_UP((uint64_t)h->gpu_mib << 20, g->granularity);
	max = cfg->gpu_session_max_bytes &&
			      cfg->gpu_session_max_bytes < g->bytes
		      ? cfg->gpu_session_max_bytes
		      : g->bytes;
	if (bytes > max)
		return refuse(w, -EDQUOT,
			      "%llu bytes of GPU memory is over the %llu a "
			      "session may have (pool.gpu_session_max_bytes)",
			      (unsigned long long)bytes,
			      (unsigned long long)max);
	kvmemd_gpu_reap(d);
	/* Ended sessions do not count in u->sessions, but what their
	 * processes hold does here: attaching and hanging up again and
	 * again gets a user no more than its sessions could have. */
	if (u->gpu_bytes + bytes > (uint64_t)cfg->max_sessions_per_uid * max)
		return refuse(
			w, -EDQUOT,
			"uid %u has %llu bytes of GPU memory, with what "
			"its processes hold of ended sessions; %u "
			"sessions of %llu is the most a user may have",
			(unsigned int)u->uid, (unsigned long long)u->gpu_bytes,
			cfg->max_sessions_per_uid, (unsigned long long)max);
	if (bytes > g->bytes - g->used)
		return refuse(w, -ENOSPC,
			      "GPU pool has %llu of %llu bytes free (%llu "
			      "held by processes of ended sessions), the "
			      "session wants %llu",
			      (unsigned long long)(g->bytes - g->used),
			      (unsigned long long)g->bytes,
			      (unsigned long long)g->held,
			      (unsigned long long)bytes);
	*out = bytes;
	return 0;
}

int kvmemd_session_new(struct kvmemd *d, const struct kvmem_hello *h, uid_t uid,
		       uint64_t tenant, pid_t pid, struct kvmem_welcome *w,
		       struct kvmemd_session **out)
{
	const struct kvmemd_config *cfg = &d->cfg;
	struct kvmem_page_layout l[2];
	struct kvmemd_session *s;
	struct kvmemd_user *u;
	uint64_t quota, ring_bytes, map, fixed, gpu;
	char why[KVMEM_MESSAGE_LEN - 24];
	uint32_t sq, cq, units[2], gpu_units;
	int k;

	w->max_quota_bytes = cfg->session_max_bytes;
	w->pool_free_bytes = cfg->host_bytes - d->n.pool_used;
	if (h->magic != KVMEM_HELLO_MAGIC || h->size != sizeof(*h))
		return refuse(w, -EPROTO, "not a kvmem hello");
	if (h->abi_version < KVMEM_ABI_VERSION_MIN ||
	    h->abi_version > KVMEM_ABI_VERSION)
		return refuse(w, -EPROTONOSUPPORT,
			      "client speaks ABI version %u, kvmemd speaks "
			      "%u to %u",
			      h->abi_version, KVMEM_ABI_VERSION_MIN,
			      KVMEM_ABI_VERSION);
	if (h->resume_session || h->resume_token ||
	    (h->abi_version < 4 &&
	     (h->gpu_mib || !all_zero(h->gpu_uuid, sizeof(h->gpu_uuid)))))
		return refuse(w, -EINVAL, "reserved hello fields are set");
	if (!h->gpu_mib && !all_zero(h->gpu_uuid, sizeof(h->gpu_uuid)))
		return refuse(w, -EINVAL, "a GPU named, but no memory on it");
	if (kvmem_geometry_explain(&h->geometry, why, sizeof(why)))
		return refuse(w, -EINVAL, "invalid page geometry: %s", why);
	sq = h->sq_entries ? h->sq_entries : cfg->sq_entries;
	cq = h->cq_entries		  ? h->cq_entries
	     : 2 * sq <= cfg->max_entries ? 2 * sq
					  : sq;
	if (!is_pow2(sq) || !is_pow2(cq) || cq < sq || sq > cfg->max_entries ||
	    cq > cfg->max_entries)
		return refuse(w, -EINVAL,
			      "ring of %u SQ / %u CQ entries: want powers of "
			      "two, CQ >= SQ, at most %u (ring.max_entries)",
			      sq, cq, cfg->max_entries);

	kvmem_page_layout(&h->geometry, 0, &l[0]);
	kvmem_page_layout(&h->geometry, 1, &l[1]);
	quota = h->quota_bytes ? h->quota_bytes : cfg->session_default_bytes;
	if (quota > cfg->session_max_bytes)
		return refuse(w, -EDQUOT,
			      "quota of %llu bytes is over the %llu a session "
			      "may have (pool.session_max_bytes)",
			      (unsigned long long)quota,
			      (unsigned long long)cfg->session_max_bytes);
	quota = quota / KVMEM_SLOT_UNIT * KVMEM_SLOT_UNIT;
	if (quota < l[0].size + l[1].size)
		return refuse(w, -EINVAL,
			      "quota of %llu bytes holds no page of each kind "
			      "(%zu + %zu bytes)",
			      (unsigned long long)h->quota_bytes, l[0].size,
			      l[1].size);
	fixed = fixed_heap(cfg, quota, l);
	if (d->n.sessions >= cfg->max_sessions)
		return refuse(w, -EUSERS,
			      "%llu sessions attached, the limit "
			      "(daemon.max_sessions)",
			      (unsigned long long)d->n.sessions);
	u = kvmemd_user(d, uid);
	if (!u)
		return refuse(w, -ENOMEM, "out of memory");
	if (u->sessions >= cfg->max_sessions_per_uid)
		return refuse(w, -EUSERS,
			      "uid %u has %u sessions, the limit "
			      "(daemon.max_sessions_per_uid)",
			      (unsigned int)uid, u->sessions);
	k = gpu_admit(d, h, u, w, &gpu);
	if (k)
		return k;
	/* The GPU tier's slots are the daemon's tables too. */
	gpu_units = h->features & KVMEM_FEAT_GPU_TIER
			    ? (uint32_t)(gpu / KVMEM_SLOT_UNIT)
			    : 0;
	units[0] = (uint32_t)(l[0].size / KVMEM_SLOT_UNIT);
	units[1] = (uint32_t)(l[1].size / KVMEM_SLOT_UNIT);
	fixed += arena_table_bytes(0, gpu_units, units);
	ring_bytes = KVMEM_SLOT_UNIT +
		     ALIGN_UP((uint64_t)sq * sizeof(struct kvmem_sqe),
			      KVMEM_SLOT_UNIT) +
		     ALIGN_UP((uint64_t)cq * sizeof(struct kvmem_cqe),
			      KVMEM_SLOT_UNIT) +
		     BUF_BYTES +
		     heat_bytes(quota / KVMEM_SLOT_UNIT + gpu_units);
	map = ring_bytes + quota;
	/* Memory of ended sessions comes back when a worker has freed it:
	 * a client that fits then is told to try again, and kvmem_connect()
	 * does. */
	if (map + fixed > cfg->host_bytes - d->n.pool_used &&
	    map + fixed <=
		    cfg->host_bytes - d->n.pool_used + d->n.pool_releasing)
		return refuse(
			w, -EAGAIN,
			"host pool has %llu bytes free and %llu of ended "
			"sessions being freed, the session needs %llu; "
			"try again",
			(unsigned long long)(cfg->host_bytes - d->n.pool_used),
			(unsigned long long)d->n.pool_releasing,
			(unsigned long long)(map + fixed));
	if (map + fixed > cfg->host_bytes - d->n.pool_used)
		return refuse(
			w, -ENOSPC,
			"host pool has %llu of %llu bytes free, the "
			"session needs %llu",
			(unsigned long long)(cfg->host_bytes - d->n.pool_used),
			(unsigned long long)cfg->host_bytes,
			(unsigned long long)(map + fixed));

	s = calloc(1, sizeof(*s));
	if (!s)
		return refuse(w, -ENOMEM, "out of memory");
	s->d = d;
	s->id = ++d->next_session;
	s->uid = uid;
	s->tenant = tenant;
	s->pid = pid;
	s->g = h->geometry;
	s->digest = kvmem_geometry_digest(&s->g);
	s->features = h->features & KVMEM_FEAT_ALL;
	if (!cfg->prefix_bytes)
		s->features &= ~KVMEM_FEAT_PREFIX;
	/* Fetched blocks are published ones: no sharing, nothing to fetch;
	 * they come from the shared tier or the store. */
	if ((!d->remote && !d->prefix_disk) ||
	    !(s->features & KVMEM_FEAT_PREFIX))
		s->features &= ~KVMEM_FEAT_REMOTE;
	if (!gpu_units)
		s->features &= ~KVMEM_FEAT_GPU_TIER;
	/* Kept across a restart only where the memory is the host's. */
	if (gpu || !kvmemd_notify_keeping(d) ||
	    getrandom(&s->resume_token, sizeof(s->resume_token),
		      GRND_NONBLOCK) != sizeof(s->resume_token) ||
	    !s->resume_token) {
		s->features &= ~KVMEM_FEAT_RESUME;
		s->resume_token = 0;
	}
	for (k = 0; k < 2; k++) {
		s->layout[k] = l[k];
		units[k] = (uint32_t)(l[k].size / KVMEM_SLOT_UNIT);
	}
	/* Archived in the format and codec of the day, where the client
	 * reads them and such a page fits a sealed slot. */
	k = cfg->archive_format == KVMEMD_ARCHIVE_SAME ? s->g.format
						       : cfg->archive_format;
	if (!(s->features & KVMEM_FEAT_ARCHIVE) ||
	    ((unsigned int)k == s->g.format &&
	     (unsigned int)cfg->archive_codec == s->g.codec) ||
	    kvmem_page_layout_as(&s->g, (unsigned int)k,
				 (unsigned int)cfg->archive_codec, &s->arch))
		memset(&s->arch, 0, sizeof(s->arch));
	s->sq_entries = sq;
	s->cq_entries = cq;
	s->arena_bytes = quota;
	s->map_bytes = map;
	s->max_seqs = cfg->max_seqs;
	s->req.size = map;
	s->req.hugepages = cfg->hugepages;
	s->req.mlock = cfg->mlock;
	arena_init(&s->arena, d, (uint32_t)(quota / KVMEM_SLOT_UNIT), gpu_units,
		   units, fixed, fixed + quota / HEAP_SHARE + HEAP_MIN);
	s->sq_efd = s->cq_efd = -1;
	s->r.fd = -1;
	s->waits_tail = &s->waits;
	s->gpu.fd = -1;
	s->gpu_bytes = gpu;
	s->req.cu = d->gpu.cu;
	s->req.stream = d->gpu.stream;
	s->req.ws = d->gpu.ws;
	d->gpu.used += gpu;
	u->gpu_bytes += gpu;
	if (gpu_units && d->gpu.cu)
		pin_admit(s);
	d->n.pool_used += map + fixed;
	d->n.sessions++;
	u->sessions++;
	*out = s;
	return 0;
}

/* The tables and doorbells of @s, before its memory. */
static int session_tables(struct kvmemd_session *s, char *why, size_t whylen)
{
	int ret = -ENOMEM;

	s->seqs = calloc(s->max_seqs, sizeof(*s->seqs));
	if (arena_tables(&s->arena) || !s->seqs) {
		snprintf(why, whylen, "out of memory");
		return ret;
	}
	s->sq_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->cq_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->sq_efd < 0 || s->cq_efd < 0) {
		ret = -errno;
		snprintf(why, whylen, "eventfd: %s", strerror(errno));
		return ret;
	}
	return 0;
}

/* Where the ring, buffers, heat and arena are in s->r. */
static void session_map(struct kvmemd_session *s)
{
	s->sqes_off = KVMEM_SLOT_UNIT;
	s->cqes_off = s->sqes_off + ALIGN_UP((uint64_t)s->sq_entries *
						     sizeof(struct kvmem_sqe),
					     KVMEM_SLOT_UNIT);
	s->buf_off = s->cqes_off + ALIGN_UP((uint64_t)s->cq_entries *
						    sizeof(struct kvmem_cqe),
					    KVMEM_SLOT_UNIT);
	s->heat_off = s->buf_off + BUF_BYTES;
	s->arena_off = s->heat_off + heat_bytes((uint64_t)s->arena.nunits +
						s->arena.gpu_units);
	s->ring = (struct kvmem_ring *)s->r.base;
	s->sqes = (struct kvmem_sqe *)(s->r.base + s->sqes_off);
	s->cqes = (struct kvmem_cqe *)(s->r.base + s->cqes_off);
	s->buf = s->r.base + s->buf_off;
	s->arena.heat = (uint16_t *)(s->r.base + s->heat_off);
	s->arena_base = s->r.base + s->arena_off;
}

/* Runs on a worker: touches only @s, never the daemon or its config. */
int kvmemd_session_setup(struct kvmemd_session *s, char *why, size_t whylen)
{
	const struct kvmemd_pool_ops *pool = kvmemd_pool(KVMEMD_POOL_HOST);
	int ret;

	ret = session_tables(s, why, whylen);
	if (ret)
		return ret;
	ret = pool->create(&s->req, &s->r, why, whylen);
	if (ret)
		return ret;
	/* Refused, it runs unpinned: kvmemd_session_activate() says so. */
	if (s->pin_bytes &&
	    !kvmem__cuda_host_register(s->req.cu, s->r.base, s->r.size)) {
		s->r.pinned = 1;
		s->r.cu = s->req.cu;
	}
	if (s->gpu_bytes) {
		struct kvmemd_region_req req = s->req;

		req.size = s->gpu_bytes;
		ret = s->d->gpu.ops->create(&req, &s->gpu, why, whylen);
		if (ret)
			return ret;
		if (s->d->gpu.ops->view)
			s->gpu_view = s->d->gpu.ops->view(&s->gpu);
	}
	session_map(s);
	/* Until the loop polls it, the client must ring. */
	s->ring->flags = KVMEM_RING_NEED_WAKEUP;
	return 0;
}

int kvmemd_session_adopt(struct kvmemd_session *s, int fd, char *why,
			 size_t whylen)
{
	const struct kvmemd_pool_ops *pool = kvmemd_pool(KVMEMD_POOL_HOST);
	int ret;

	ret = session_tables(s, why, whylen);
	if (ret) {
		close(fd);
		return ret;
	}
	ret = pool->adopt(&s->req, fd, &s->r, why, whylen);
	if (ret)
		return ret;
	session_map(s);
	return 0;
}

void kvmemd_session_welcome(const struct kvmemd_session *s,
			    struct kvmem_welcome *w)
{
	w->session = s->id;
	w->features = s->features;
	w->map_bytes = s->r.size;
	w->ring_off = 0;
	w->sqes_off = s->sqes_off;
	w->cqes_off = s->cqes_off;
	w->buf_off = s->buf_off;
	w->buf_bytes = BUF_BYTES;
	w->heat_off = s->heat_off;
	w->heat_units = (uint64_t)s->arena.nunits + s->arena.gpu_units;
	w->arena_off = s->arena_off;
	w->arena_bytes = s->arena_bytes;
	w->sq_entries = s->sq_entries;
	w->cq_entries = s->cq_entries;
	w->slot_bytes[0] = s->arena.slot_units[0] * KVMEM_SLOT_UNIT;
	w->slot_bytes[1] = s->arena.slot_units[1] * KVMEM_SLOT_UNIT;
	if (s->gpu_bytes) {
		w->gpu_bytes = s->gpu_bytes;
		memcpy(w->gpu_uuid, s->d->gpu.uuid_bytes, sizeof(w->gpu_uuid));
	}
	if (s->features & KVMEM_FEAT_RESUME)
		w->resume_token = s->resume_token;
}

int kvmemd_session_fds(const struct kvmemd_session *s, int fds[4])
{
	fds[0] = s->r.fd;
	fds[1] = s->sq_efd;
	fds[2] = s->cq_efd;
	fds[3] = s->gpu.fd;
	return s->gpu_bytes ? 4 : 3;
}

uint32_t kvmemd_session_id(const struct kvmemd_session *s)
{
	return s->id;
}

/* d->sessions in the order of ids: new ones go last, a session taken
 * back after a restart where its id says. */
void kvmemd_session_activate(struct kvmemd_session *s)
{
	struct kvmemd *d = s->d;
	struct kvmemd_session *after = d->sessions_tail;

	if (s->pin_bytes && !s->r.pinned) {
		d->gpu.pinned -= s->pin_bytes;
		d->gpu.unpinned++;
		s->pin_bytes = 0;
		kvmemd_log(LOG_WARNING,
			   "session %u: the driver would not pin its host "
			   "memory; its GPU copies go unpinned",
			   s->id);
	}
	while (after && after->id > s->id)
		after = after->prev;
	s->prev = after;
	s->next = after ? after->next : d->sessions;
	if (s->next)
		s->next->prev = s;
	else
		d->sessions_tail = s;
	if (after)
		after->next = s;
	else
		d->sessions = s;
	s->active = 1;
}

void kvmemd_session_free(struct kvmemd_session *s)
{
	uint32_t i;

	if (!s)
		return;
	if (s->active) {
		if (s->prev)
			s->prev->next = s->next;
		else
			s->d->sessions = s->next;
		if (s->next)
			s->next->prev = s->prev;
		else
			s->d->sessions_tail = s->prev;
	}
	kvmemd_record_forget(s);
	free(s->redo);
	tier_session_free(s);
	session_prefix_drop(s);
	if (s->seqs) {
		for (i = 0; i < s->max_seqs; i++) {
			if (!s->seqs[i])
				continue;
			free(s->seqs[i]->pages);
			free(s->seqs[i]->index);
			free(s->seqs[i]->by_tokens);
			free(s->seqs[i]);
		}
	}
	free(s->seqs);
	arena_exit(&s->arena);
	s->d->gpu.pinned -= s->pin_bytes;
	kvmemd_host_release(s->d, &s->r, s->map_bytes);
	if (s->gpu.fd >= 0) {
		/* Its client may map it still: charged until it exits. */
		s->d->gpu.ops->destroy(&s->gpu);
		kvmemd_gpu_hold(s->d, s->pid, s->uid, s->gpu_bytes);
	} else if (s->gpu_bytes) {
		kvmemd_gpu_release(s->d, s->uid, s->gpu_bytes);
	}
	if (s->sq_efd >= 0)
		close(s->sq_efd);
	if (s->cq_efd >= 0)
		close(s->cq_efd);
	s->d->n.pool_used -= s->arena.heap;
	s->d->n.sessions--;
	/* Counted in a record that cannot have gone meanwhile. */
	kvmemd_user(s->d, s->uid)->sessions--;
	free(s);
}

/* ---- slots ------------------------------------------------------------ */

void session_slot_header(const struct kvmemd_session *s, const struct slot *sl,
			 struct kvmem_page_hdr *h)
{
	const struct kvmem_page_layout *l = slot_layout(s, sl);

	memset(h, 0, sizeof(*h));
	h->magic = KVMEM_PAGE_MAGIC;
	h->version = KVMEM_PAGE_VERSION;
	h->format = l->format;
	h->codec = l->codec;
	h->geometry = s->digest;
	h->seq = sl->seq;
	h->layer = sl->layer;
	h->token_start = sl->token_start;
	h->ntokens = sl->ntokens;
	h->flags = sl->hdr_flags;
	h->generation = sl->generation;
	h->crc = sl->crc;
}

/* A slot index from the client: the start of a live slot, or NULL. */
static struct slot *slot_get(struct kvmemd_session *s, uint32_t u)
{
	if (u >= s->arena.nunits + s->arena.gpu_units ||
	    (s->arena.slots[u].state != SLOT_OPEN &&
	     s->arena.slots[u].state != SLOT_SEALED))
		return NULL;
	return &s->arena.slots[u];
}

/* ---- pages ------------------------------------------------------------ */

/* The last holder of page @pg let go: its slot (or store units) go back,
 * now or when its I/O ends. */
static void page_put(struct kvmemd_session *s, uint32_t pg)
{
	struct page *p = &s->arena.pages[pg];

	if (--p->refs)
		return;
	if (p->state == PAGE_RESIDENT)
		arena_page_free(&s->arena, pg);
	else if (p->state == PAGE_COLD)
		tier_page_drop(s, pg);
	else /* tier.c frees it when its I/O ends */
		arena_page_orphan(&s->arena, pg);
}

/* ---- sequences -------------------------------------------------------- */

/*
 * A sequence's two indexes (open addressing, linear probing, 2 x cap
 * entries of position + 1, 0 = empty): by page, so that dropping one costs
 * O(1), and by (layer, first token), the name a page has in the ABI, which
 * no two pages of a sequence may share.
 */
enum { BY_PAGE, BY_TOKENS };

static uint64_t key_of(const struct kvmemd_session *s, const struct seq *q,
		       int by, uint32_t pos)
{
	const struct page *p = &s->arena.pages[q->pages[pos]];

	return by == BY_PAGE ? q->pages[pos]
			     : (uint64_t)p->layer << 32 | p->token_start;
}

static uint32_t *index_of(const struct seq *q, int by)
{
	return by == BY_PAGE ? q->index : q->by_tokens;
}

/* Keys are small consecutive numbers: mix all their bits in. */
static uint32_t index_home(const struct seq *q, uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ull;
	k ^= k >> 33;
	return (uint32_t)k & (2 * q->cap - 1);
}

/* The entry of @k, or of the empty place where it would go. */
static uint32_t index_find(const struct kvmemd_session *s, const struct seq *q,
			   int by, uint64_t k)
{
	const uint32_t *t = index_of(q, by);
	uint32_t i = index_home(q, k);

	while (t[i] && key_of(s, q, by, t[i] - 1) != k)
		i = (i + 1) & (2 * q->cap - 1);
	return i;
}

/* Empty entry @i, moving back what probed past it (no tombstones). */
static void index_delete(const struct kvmemd_session *s, struct seq *q, int by,
			 uint32_t i)
{
	const uint32_t mask = 2 * q->cap - 1;
	uint32_t *t = index_of(q, by);
	uint32_t j = i, k;

	for (;;) {
		j = (j + 1) & mask;
		if (!t[j])
			break;
		k = index_home(q, key_of(s, q, by, t[j] - 1));
		/* Leave it if its home lies cyclically in (i, j]. */
		if (i <= j ? i < k && k <= j : i < k || k <= j)
			continue;
		t[i] = t[j];
		i = j;
	}
	t[i] = 0;
}

/* Bytes a sequence's tables take per entry of its capacity. */
#define SEQ_ENTRY_BYTES (sizeof(uint32_t) * 5)

/* Room for @cap pages, the indexes rebuilt for it. */
static int seq_reserve(struct kvmemd_session *s, struct seq *q, uint32_t cap)
{
	uint32_t *pages, *index, *by_tokens, i;

	if (cap <= q->cap)
		return 0;
	if (cap > UINT32_MAX / 4 ||
	    arena_heap_get(&s->arena, (size_t)(cap - q->cap) * SEQ_ENTRY_BYTES))
		return -ENOMEM;
	pages = realloc(q->pages, cap * sizeof(*pages));
	if (pages)
		q->pages = pages;
	index = calloc(2 * (size_t)cap, sizeof(*index));
	by_tokens = calloc(2 * (size_t)cap, sizeof(*by_tokens));
	if (!pages || !index || !by_tokens) {
		free(index);
		free(by_tokens);
		arena_heap_put(&s->arena,
			       (size_t)(cap - q->cap) * SEQ_ENTRY_BYTES);
		return -ENOMEM;
	}
	free(q->index);
	free(q->by_tokens);
	q->index = index;
	q->by_tokens = by_tokens;
	q->cap = cap;
	for (i = 0; i < q->n; i++) {
		q->index[index_find(s, q, BY_PAGE, q->pages[i])] = i + 1;
		q->by_tokens[index_find(s, q, BY_TOKENS,
					key_of(s, q, BY_TOKENS, i))] = i + 1;
	}
	return 0;
}

/* The page of @q named (@layer, @token_start), or NO_UNIT. */
uint32_t session_seq_page(const struct kvmemd_session *s, const struct seq *q,
			  uint32_t layer, uint32_t token_start)
{
	uint32_t i;

	if (!q->n)
		return NO_UNIT;
	i = q->by_tokens[index_find(s, q, BY_TOKENS,
				    (uint64_t)layer << 32 | token_start)];
	return i ? q->pages[i - 1] : NO_UNIT;
}

/* Room in @q for a page more: 0, or -ENOMEM. */
static int seq_room(struct kvmemd_session *s, struct seq *q)
{
	uint32_t cap = q->cap;

	while (cap < q->n + 1)
		cap = cap ? cap * 2 : 16;
	return seq_reserve(s, q, cap);
}

/* Page @pg into @q, which has room for it. */
static void seq_add(struct kvmemd_session *s, struct seq *q, uint32_t pg)
{
	q->pages[q->n] = pg;
	q->index[index_find(s, q, BY_PAGE, pg)] = q->n + 1;
	q->by_tokens[index_find(s, q, BY_TOKENS,
				key_of(s, q, BY_TOKENS, q->n))] = q->n + 1;
	q->n++;
}

int session_seq_holds(const struct kvmemd_session *s, const struct seq *q,
		      uint32_t pg)
{
	return q->n && q->index[index_find(s, q, BY_PAGE, pg)];
}

/* Drop @u from @q: 0, or -ENOENT when @q does not hold it. */
static int seq_unhold(struct kvmemd_session *s, struct seq *q, uint32_t u)
{
	uint32_t i, pos, last;

	if (!q->n)
		return -ENOENT;
	i = index_find(s, q, BY_PAGE, u);
	if (!q->index[i])
		return -ENOENT;
	pos = q->index[i] - 1;
	index_delete(s, q, BY_PAGE, i);
	index_delete(s, q, BY_TOKENS,
		     index_find(s, q, BY_TOKENS, key_of(s, q, BY_TOKENS, pos)));
	last = --q->n;
	if (pos != last) {
		/* The last moves into the hole: both indexes follow. */
		q->index[index_find(s, q, BY_PAGE, q->pages[last])] = pos + 1;
		q->by_tokens[index_find(s, q, BY_TOKENS,
					key_of(s, q, BY_TOKENS, last))] =
			pos + 1;
		q->pages[pos] = q->pages[last];
	}
	return 0;
}

/* Sequence @id, empty, in its place in s->seqs; NULL without memory. */
static struct seq *seq_alloc(struct kvmemd_session *s, uint32_t id,
			     int acquired)
{
	struct seq *q;

	if (arena_heap_get(&s->arena, sizeof(*q)))
		return NULL;
	q = calloc(1, sizeof(*q));
	if (!q) {
		arena_heap_put(&s->arena, sizeof(*q));
		return NULL;
	}
	q->id = id;
	q->acquired = (uint8_t)acquired;
	s->seqs[id - 1] = q;
	s->nseqs++;
	s->nacquired += q->acquired;
	return q;
}

/* A new, acquired sequence: 0, -ENOSPC at ring.max_seqs, or -ENOMEM. */
static int seq_new(struct kvmemd_session *s, struct seq **out)
{
	uint32_t i, id = 0;
	struct seq *q;

	if (s->nseqs == s->max_seqs)
		return -ENOSPC;
	for (i = 0; i < s->max_seqs; i++) {
		id = (s->seq_hint + i) % s->max_seqs;
		if (!s->seqs[id])
			break;
	}
	q = seq_alloc(s, id + 1, 1);
	if (!q)
		return -ENOMEM;
	s->seq_hint = id + 1;
	*out = q;
	return 0;
}

/* Pin or unpin the pages of @q; unpinned ones may move from now on. */
void session_seq_pin(struct kvmemd_session *s, struct seq *q, int on)
{
	uint64_t now = on ? 0 : kvmemd_now_ns();
	uint32_t i;

	if (q->acquired == on)
		return;
	for (i = 0; i < q->n; i++) {
		struct page *p = &s->arena.pages[q->pages[i]];

		if (on) {
			p->pins++;
		} else {
			p->pins--;
			p->released = now;
		}
	}
	q->acquired = (uint8_t)on;
	if (on)
		s->nacquired++;
	else
		s->nacquired--;
}

int session_seq_restore(struct kvmemd_session *s, uint32_t id, int acquired,
			uint32_t tokens, const uint32_t *pages, uint32_t n)
{
	const struct page *p;
	struct seq *q;
	uint32_t i;

	if (!id || id > s->max_seqs || s->seqs[id - 1] || acquired > 1)
		return -EINVAL;
	q = seq_alloc(s, id, acquired);
	if (!q)
		return -ENOMEM;
	q->tokens = tokens;
	for (i = 0; i < n; i++) {
		if (pages[i] >= s->arena.top_page)
			return -EINVAL;
		p = &s->arena.pages[pages[i]];
		if (p->state == PAGE_UNUSED ||
		    session_seq_holds(s, q, pages[i]) ||
		    session_seq_page(s, q, p->layer, p->token_start) != NO_UNIT)
			return -EINVAL;
		if (seq_room(s, q))
			return -ENOMEM;
		seq_add(s, q, pages[i]);
	}
	return 0;
}

/* A step of a seal's check at stop: the clock is read between steps. */
#define KEEP_CHECK_STEP (1u << 20)
/* What one run takes at stop: its pass stays bounded (SESSION_PASS_BYTES). */
#define KEEP_RUN_OPS 64

/* The check of the page just sealed, on until @deadline: 1 when done. */
static int seal_check_until(struct kvmemd_session *s, uint64_t deadline)
{
	uint64_t budget;

	while (s->checking) {
		if (kvmemd_now_ns() >= deadline)
			return 0;
		budget = KEEP_CHECK_STEP;
		if (kvmemd_ras_check_step(s, &s->seal_check, &budget))
			s->checking = 0;
	}
	return 1;
}

int session_keep_ready(struct kvmemd_session *s, uint64_t run_deadline,
		       int timeout_ms, char *why, size_t len)
{
	uint32_t u, taken;
	int ret, n = 0;

	/* What was submitted, as far as the CQ has room, a ring's worth and
	 * @run_deadline allow: a client that goes on submitting, or seals
	 * page after page to be checked, cannot hold the stop. What is left
	 * stays in the ring for the next daemon, from the sq_head kept; a
	 * page sealed but not checked yet is checked by it before the
	 * client gets the session back, as every sealed page is. */
	for (taken = 0; taken < s->sq_entries; taken += (uint32_t)n) {
		if (!seal_check_until(s, run_deadline) ||
		    kvmemd_now_ns() >= run_deadline)
			break;
		n = kvmemd_session_run(s, KEEP_RUN_OPS);
		if (n <= 0)
			break;
	}
	seal_check_until(s, run_deadline);
	if (n < 0) {
		snprintf(why, len, "its ring is broken: %s", s->broken);
		return n;
	}
	ret = tier_quiesce(s, timeout_ms);
	if (ret) {
		snprintf(why, len, "its store I/O did not end");
		return ret;
	}
	session_prefix_drop(s);
	for (u = 0; u < s->arena.top; u++)
		if (s->arena.slots[u].state == SLOT_LOADING ||
		    s->arena.slots[u].state == SLOT_ARCHIVING) {
			snprintf(why, len, "a page is still moving");
			return -EBUSY;
		}
	return 0;
}

/* A block being published from @q, or attached into it, ends with its
 * pins: another sequence may have @q's id next. */
static void seq_unstage(struct kvmemd_session *s, const struct seq *q)
{
	if (s->stage && s->stage_seq == q->id)
		session_stage_drop(s);
	if (s->attach && s->attach_seq == q->id)
		session_attach_pin(s, NULL, 0);
}

static void seq_free(struct kvmemd_session *s, struct seq *q)
{
	uint32_t i;

	seq_unstage(s, q);
	tier_cancel(s, q);
	session_seq_pin(s, q, 0);
	for (i = 0; i < q->n; i++)
		page_put(s, q->pages[i]);
	s->seqs[q->id - 1] = NULL;
	s->nseqs--;
	arena_heap_put(&s->arena,
		       sizeof(*q) + (size_t)q->cap * SEQ_ENTRY_BYTES);
	free(q->pages);
	free(q->index);
	free(q->by_tokens);
	free(q);
}

/* ---- ops -------------------------------------------------------------- */

/* The SQE fields an op reads; the others must be 0. */
#define F_KIND (1u << 0)
#define F_SLOT (1u << 1)
#define F_SEQ (1u << 2)
#define F_ADDR (1u << 3)
#define F_LEN (1u << 4)
#define F_LAYER (1u << 5)
#define F_TOKENS (1u << 6)
#define F_GPU (1u << 7) /* flags: KVMEM_SQE_GPU */

/* A result buffer of @len bytes at @addr: inside the buffer region. */
void *session_op_buf(struct kvmemd_session *s, uint64_t addr, uint64_t len,
		     uint64_t align)
{
	if (addr % align || addr > BUF_BYTES || len > BUF_BYTES - addr)
		return NULL;
	return s->buf + addr;
}

static int op_nop(struct kvmemd_session *s, const struct kvmem_sqe *e)
{
	(void)s;
	(void)e;
	return 0;
}

static int op_seq_create(struct kvmemd_session *s, const struct kvmem_sqe *e)
{
	struct seq *q;
	int ret;

	(void)e;
	ret = seq_new(s, &q);
	return ret ? ret : (int)q->id;
}

static int op_page_alloc(struct kvmemd_session *s, const struct kvmem_sqe *e)
{
	uint32_t i, u;
	uint8_t *out;

	if (e->kind > KVMEM_SLOT_HOT || !e->len || e->len > KVMEM_ALLOC_MAX)
		return -EINVAL;
	out = session_op_buf(s, e->addr, (uint64_t)e->len * sizeof(u),
			     sizeof(u));
	if (!out)
		return -EFAULT;
	for (i = 0; i < e->len; i++) {
		if (arena_slot_alloc(&s->arena, e->kind, &u))
			break;
		memcpy(out + i * sizeof(u), &u, sizeof(u));
	}
	/* A full arena waits for released pages to leave, when any can. */
	return i ? (int)i : tier_alloc_wait(s, e);
}

/*
 * Open slot @u becomes the sealed page of @q that @h names, held and
 * pinned by @q, with @h's CRC, generation and flags as its seal record:
 * 0, or -ENOMEM.
 */
int session_slot_seal(struct kvmemd_session *s, struct seq *q, uint32_t u,
		      const struct kvmem_page_hdr *h)
{
	const struct slot rec = {
		.hdr_flags = (uint8_t)h->flags,
		.seq = q->id,
		.layer = h->layer,
		.token_start = h->token_start,
		.ntokens = h->ntokens,
		.crc = h->crc,
		.generation = h->generation,
	};
	uint32_t pg = NO_UNIT;
	int ret;

	/* @q's room first: a page, once made, is in it. */
	ret = seq_room(s, q);
	if (ret)
		return ret;
	ret = arena_slot_enter(&s->arena, u, &pg, &rec);
	if (ret)
		return ret;
	seq_add(s, q, pg);
	s->arena.pages[pg].refs = 1;
	s->arena.pages[pg].pins = 1;
	if (q->tokens < h->token_start + h->ntokens)
		q->tokens = h->token_start + h->ntokens;
	return 0;
}

static int op_page_seal(struct kvmemd_session *s, const struct kvmem_sqe *e)
{
	uint8_t raw[KVMEM_PAGE_HDR_BYTES];
	struct kvmem_page_hdr h;
	struct slot *sl = slot_get(s, e->slot);
	struct seq *q = session_seq(s, e->seq);
	int ret;

	if (!sl || !q || sl->state != SLOT_OPEN || e->layer >= s->g.layers ||
	    (uint64_t)e->token_start + e->ntokens > UINT32_MAX)
		return -EINVAL;
	/* The client's slot numbers for a released sequence may be stale. */
	if (!q->acquired || q->wait)
		return -EBUSY;
	/* Copied before it is decoded: the client may change it meanwhile. */
	memcpy(raw, session_page(s, e->slot), sizeof(raw));
	ret = kvmem_page_read_header(raw, &s->g, &h, NULL);
	if (ret)
		return ret;
	if (h.seq != e->seq || h.layer != e->layer ||
	    h.token_start != e->token_start || h.ntokens != e->ntokens ||
	    !(h.flags & KVMEM_HDR_SEALED) ||
	    !(h.flags & KVMEM_HDR_HOT) != (sl->kind == KVMEM_SLOT_SEALED) ||
	    h.flags & ~(KVMEM_HDR_SEALED | KVMEM_HDR_HOT) || h.resv[0] ||
	    h.resv[1])
		return -EINVAL;
	/* An archived page is the daemon's to make, never a client's. */
	if (!(h.flags & KVMEM_HDR_HOT) &&
	    (h.format != s->g.format || h.codec != s->g.codec))
		return -EINVAL;
	/* Moves name a page by these: two would be one name for two. */
	if (session_seq_page(s, q, e->layer, e->token_start) != NO_UNIT)
		return -EINVAL;
	ret = session_slot_seal(s, q, e->slot, &h);
	if (ret)
		return ret;
	if (s->d->cfg.verify_on_seal)
		kvmemd_ras_seal(s, e->slot);
	return 0;
}

static int op_page_free(struct kvmemd_session *s, const struct kvmem_sqe *e)
{
	struct slot *sl = slot_get(s, e->slot);
	struct seq *q;

	if (!sl)
		return -EINVAL;
	if (sl->state == SLOT_OPEN) {
		if (e->seq)
			return -EINVAL;
		arena_slot_free(&s->arena, e->slot);
		return 0;
	}
	q = session_seq(s, e->seq);
	if (!q)
		return -EINVAL;
	if (!q->acquired || q->wait)
		return -EBUSY;
	if (seq_unhold(s, q, sl->page))
		return -ENOENT;
	s->arena.pages[sl->page].pins--;
	page_put(s, sl->page);
	return 0;
}

static int op_seq_fork(struct kvmemd_session *s, const struct kvmem_sqe *e)
{
	struct seq *p = session_seq(s, e->seq), *q;
	uint32_t i;
	int ret;

	if (!p)
		return -EINVAL;
	/* The fork is acquired: its pages must be resident already. */
	if (!p->acquired || p->wait)
		return -EBUSY;
	ret = seq_new(s, &q);
	if (ret)
		return ret;
	/* A fork costs the daemon its tables: within the session's share. */
	if (seq_reserve(s, q, p->cap)) {
		seq_free(s, q);
		return -ENOMEM;
	}
	if (p->cap) {
		memcpy(q->pages, p->pages, p->n * sizeof(*q->pages));
		memcpy(q->index, p->index,
		       2 * (size_t)p->cap * sizeof(*q->index));
		memcpy(q->by_tokens, p->by_tokens,
		       2 * (size_t)p->cap * sizeof(*q->by_tokens));
	}
	q->n = p->n;
	q->tokens = p->tokens;
	for (i = 0; i < q->n; i++) {
		s->arena.pages[q->pages[i]].refs++;
		s->arena.pages[q->pages[i]].pins++;
	}
	return (int)q->id;
}

/* Pinned at once; complete when every page is resident (tier.c). */
static int op_seq_acquire(struct kvmemd_session *s, const struct kvmem_sqe *e)
{
	struct seq *q = session_seq(s, e->seq);
	const size_t move = s->features & KVMEM_FEAT_ARCHIVE
				    ? sizeof(struct kvmem_page_move_ex)
				    : sizeof(struct kvmem_page_move);

	if (!q || e->len % move ||
	    (e->len && !session_op_buf(s, e->addr, e->len, sizeof(uint32_t))))
		return -EINVAL;
	if (q->wait)
		return -EBUSY;
	session_seq_pin(s, q, 1);
	return tier_acquire(s, q, e);
}

static int op_seq_release(struct kvmemd_session *s, const struct kvmem_sqe *e)
{
	struct seq *q = session_seq(s, e->seq);

	if (!q)
		return -EINVAL;
	seq_unstage(s, q);
	tier_cancel(s, q);
	session_seq_pin(s, q, 0);
	return 0;
}

static int op_seq_prefetch(struct kvmemd_session *s, const struct kvmem_sqe *e)
{
	struct seq *q = session_seq(s, e->seq);

	if (!q)
		return -EINVAL;
	if (e->flags & KVMEM_SQE_GPU)
		tier_gpu_prefetch(s, q);
	else
		tier_prefetch(s, q);
	return 0;
}

static int op_seq_free(struct kvmemd_session *s, const struct kvmem_sqe *e)
{
	struct seq *q = session_seq(s, e->seq);

	if (!q)
		return -EINVAL;
	seq_free(s, q);
	return 0;
}

static int op_stats(struct kvmemd_session *s, const struct kvmem_sqe *e)
{
	struct kvmem_stats st = {
		.arena_bytes = s->arena_bytes,
		.used_bytes = s->arena.used_bytes,
		.slots_open = s->arena.nopen,
		.slots_sealed = s->arena.nsealed,
		.seqs = s->nseqs,
		.seqs_acquired = s->nacquired,
		.ops = s->ops,
		.op_errors = s->op_errors,
		.sessions = s->d->n.sessions,
		.pool_bytes = s->d->cfg.host_bytes,
		.pool_used_bytes = s->d->n.pool_used,
		.ce_words = s->ce,
		.ue_words = s->ue,
		.degraded_pages = s->arena.ndegraded,
		.cold_pages = s->arena.ncold,
		.cold_bytes = s->arena.cold_bytes,
	};
	void *out;

	if (!e->len || e->len > sizeof(st))
		return -EINVAL;
	out = session_op_buf(s, e->addr, e->len, 8);
	if (!out)
		return -EFAULT;
	memcpy(out, &st, e->len);
	return (int)e->len;
}

struct opdef {
	const char *name;
	int (*issue)(struct kvmemd_session *s, const struct kvmem_sqe *e);
	uint32_t fields; /* F_*: what it reads */
};

static const struct opdef opdefs[] = {
	[KVMEM_OP_NOP] = { "nop", op_nop, 0 },
	[KVMEM_OP_SEQ_CREATE] = { "seq_create", op_seq_create, 0 },
	[KVMEM_OP_PAGE_ALLOC] = { "page_alloc", op_page_alloc,
				  F_KIND | F_ADDR | F_LEN },
	[KVMEM_OP_PAGE_SEAL] = { "page_seal", op_page_seal,
				 F_SLOT | F_SEQ | F_LAYER | F_TOKENS },
	[KVMEM_OP_PAGE_FREE] = { "page_free", op_page_free, F_SLOT | F_SEQ },
	[KVMEM_OP_SEQ_FORK] = { "seq_fork", op_seq_fork, F_SEQ },
	[KVMEM_OP_SEQ_ACQUIRE] = { "seq_acquire", op_seq_acquire,
				   F_SEQ | F_ADDR | F_LEN | F_GPU },
	[KVMEM_OP_SEQ_RELEASE] = { "seq_release", op_seq_release, F_SEQ },
	[KVMEM_OP_SEQ_FREE] = { "seq_free", op_seq_free, F_SEQ },
	[KVMEM_OP_STATS] = { "stats", op_stats, F_ADDR | F_LEN },
	[KVMEM_OP_SEQ_PREFETCH] = { "seq_prefetch", op_seq_prefetch,
				    F_SEQ | F_GPU },
	[KVMEM_OP_PREFIX_PUBLISH] = { "prefix_publish",
				      session_op_prefix_publish,
				      F_SEQ | F_ADDR | F_LEN | F_LAYER |
					      F_TOKENS },
	[KVMEM_OP_PREFIX_ATTACH] = { "prefix_attach", session_op_prefix_attach,
				     F_SEQ | F_ADDR | F_LEN | F_LAYER |
					     F_TOKENS },
	[KVMEM_OP_PREFIX_FETCH] = { "prefix_fetch", session_op_prefix_fetch,
				    F_ADDR | F_LEN | F_TOKENS },
};

_Static_assert(ARRAY_SIZE(opdefs) == KVMEM_OP_LAST,
	       "every opcode has an entry");

/* Fields the op does not read, flags it does not take and reserved words
 * must be 0. */
static int sqe_check(const struct kvmemd_session *s, const struct kvmem_sqe *e,
		     uint32_t f)
{
	const unsigned int flags =
		f & F_GPU && s->features & KVMEM_FEAT_GPU_TIER ? KVMEM_SQE_GPU
							       : 0;

	if ((e->flags & ~flags) || e->resv0 || e->resv1[0] || e->resv1[1])
		return -EINVAL;
	if ((!(f & F_KIND) && e->kind) || (!(f & F_SLOT) && e->slot) ||
	    (!(f & F_SEQ) && e->seq) || (!(f & F_ADDR) && e->addr) ||
	    (!(f & F_LEN) && e->len) || (!(f & F_LAYER) && e->layer) ||
	    (!(f & F_TOKENS) && (e->token_start || e->ntokens)))
		return -EINVAL;
	return 0;
}

/* Clients fail their own operations at will: the debug log is limited. */
static struct kvmemd_ratelimit op_errors_log;

static int dispatch(struct kvmemd_session *s, const struct kvmem_sqe *e)
{
	const struct opdef *op;
	int ret;

	if (e->opcode >= KVMEM_OP_LAST)
		return -EINVAL;
	op = &opdefs[e->opcode];
	ret = sqe_check(s, e, op->fields);
	if (!ret)
		ret = op->issue(s, e);
	if (ret < 0 && ret != OP_WAIT)
		kvmemd_log_rl(&op_errors_log, "failed operations", LOG_DEBUG,
			      "session %u: %s: %s", s->id, op->name,
			      strerror(-ret));
	return ret;
}

/* ---- the ring --------------------------------------------------------- */

int kvmemd_session_pending(const struct kvmemd_session *s)
{
	/* A hint only: kvmemd_session_run() checks what it acts on. */
	uint32_t tail = kvmem__load_relaxed(&s->ring->sq_tail);
	uint32_t cq_head = kvmem__load_relaxed(&s->ring->cq_head);

	return tail != s->sq_head &&
	       s->cq_tail - cq_head + s->nwaits < s->cq_entries;
}

/* Wake a client that sleeps on the CQ, after the tail moved. */
static void cq_kick(struct kvmemd_session *s)
{
	/* Release: the CQEs are written before the client sees them. */
	kvmem__store_release(&s->ring->cq_tail,
			     s->live ? s->pub_cq_tail : s->cq_tail);
	/* Full barrier: the tail is visible before CQ_WAIT is looked at,
	 * pairing with the client's barrier between setting CQ_WAIT and
	 * checking the tail one last time before it sleeps. */
	kvmem__smp_mb();
	if (kvmem__load_relaxed(&s->ring->cq_flags) & KVMEM_RING_CQ_WAIT)
		eventfd_write(s->cq_efd, 1);
}

static void cqe_put(struct kvmemd_session *s, uint64_t user_data, int res,
		    uint32_t flags)
{
	struct kvmem_cqe *c = &s->cqes[s->cq_tail & (s->cq_entries - 1)];

	c->user_data = user_data;
	c->res = res;
	c->flags = flags;
	s->cq_tail++;
}

void session_publish(struct kvmemd_session *s)
{
	/* Release: the SQEs were read before the client may reuse them. */
	kvmem__store_release(&s->ring->sq_head, s->pub_sq_head);
	cq_kick(s);
}

/* Ops that waited when kvmemd died, issued again: each had its CQE
 * reserved, and takes it now or waits again. */
static void redo(struct kvmemd_session *s)
{
	uint32_t i;
	int res;

	for (i = 0; i < s->nredo; i++) {
		res = dispatch(s, &s->redo[i]);
		if (res != OP_WAIT) {
			s->op_errors += res < 0;
			cqe_put(s, s->redo[i].user_data, res, 0);
		}
	}
	free(s->redo);
	s->redo = NULL;
	s->nredo = 0;
	cq_kick(s);
}

/* Room was reserved when the op started waiting (s->nwaits). */
void session_post(struct kvmemd_session *s, uint64_t user_data, int res,
		  uint32_t flags)
{
	cqe_put(s, user_data, res, flags);
	s->op_errors += res < 0;
	cq_kick(s);
}

int kvmemd_session_run(struct kvmemd_session *s, unsigned int budget)
{
	/* Acquire: the SQEs up to the tail were written before it moved. */
	uint32_t tail = kvmem__load_acquire(&s->ring->sq_tail);
	/* Acquire: the client is done reading the CQEs it gave back. */
	uint32_t cq_head = kvmem__load_acquire(&s->ring->cq_head);
	unsigned int n = 0;
	struct kvmem_sqe e;
	int res;

	if (s->redo)
		redo(s);
	/* Said by whoever drops the session, through its rate limit. */
	if (tail - s->sq_head > s->sq_entries) {
		snprintf(s->broken, sizeof(s->broken),
			 "SQ tail %u is %u past head %u of a %u-entry ring",
			 tail, tail - s->sq_head, s->sq_head, s->sq_entries);
		return -EPROTO;
	}
	if (s->cq_tail - cq_head > s->cq_entries) {
		snprintf(s->broken, sizeof(s->broken),
			 "CQ head %u is past tail %u", cq_head, s->cq_tail);
		return -EPROTO;
	}
	/* Ops that wait hold a CQE each: a client cannot make the daemon
	 * owe more completions than its CQ holds. A page just sealed is
	 * checked before anything after it is taken (kvmemd_ras_seal()). */
	s->pass_bytes = 0;
	while (s->sq_head != tail && n < budget && !s->checking &&
	       (s->pass_bytes < SESSION_PASS_BYTES || budget == UINT32_MAX) &&
	       s->cq_tail - cq_head + s->nwaits < s->cq_entries) {
		memcpy(&e, &s->sqes[s->sq_head & (s->sq_entries - 1)],
		       sizeof(e));
		res = dispatch(s, &e);
		s->ops++;
		if (res != OP_WAIT) {
			s->op_errors += res < 0;
			cqe_put(s, e.user_data, res, 0);
		}
		s->sq_head++;
		n++;
	}
	if (!n)
		return 0;
	s->d->n.ops += n;
	/* Release: the SQEs were read before the client may reuse them. */
	kvmem__store_release(&s->ring->sq_head,
			     s->live ? s->pub_sq_head : s->sq_head);
	cq_kick(s);
	return (int)n;
}

const char *kvmemd_session_broken(const struct kvmemd_session *s)
{
	return s->broken;
}

int kvmemd_session_sq_efd(const struct kvmemd_session *s)
{
	return s->sq_efd;
}

void kvmemd_session_need_wakeup(struct kvmemd_session *s, int on)
{
	uint32_t f = kvmem__load_relaxed(&s->ring->flags);

	f = on ? f | KVMEM_RING_NEED_WAKEUP : f & ~KVMEM_RING_NEED_WAKEUP;
	__atomic_store_n(&s->ring->flags, f, __ATOMIC_RELAXED);
	/* Full barrier: the flag is visible before the caller looks at the
	 * SQ tail once more, pairing with the client's barrier between
	 * publishing its tail and looking at the flag. */
	kvmem__smp_mb();
}

void kvmemd_session_discard(struct kvmemd_session *s)
{
	s->r.discard = 1;
	kvmemd_resume_untrack(s);
}

void kvmemd_session_shutdown(struct kvmemd_session *s)
{
	uint32_t f = kvmem__load_relaxed(&s->ring->flags);

	__atomic_store_n(&s->ring->flags, f | KVMEM_RING_SHUTDOWN,
			 __ATOMIC_RELEASE);
	eventfd_write(s->cq_efd, 1);
}
