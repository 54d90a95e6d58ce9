/* SPDX-License-Identifier: MIT */
/*
 * prefix-save.c - published prefixes kept across restarts and crashes of
 * kvmemd
 *
 * With prefix.keep, daemon.keep_sessions and a descriptor store
 * (kvmemd_notify_keeping()), a block's copies live in a memfd of its own,
 * mapped shared, where others live in anonymous memory (the same bytes to
 * prefix.c's accounting). Once the block is kept, the memfd goes to
 * systemd's store as "prefix-ID" (FDSTORE=1) and kvmemd closes its own
 * descriptor: the mapping holds the memory, the store holds it for the
 * next kvmemd. A block that goes (evicted, dropped, expired, damaged)
 * leaves the store (FDSTOREREMOVE=1); an orderly stop leaves them all
 * there.
 *
 * What a memfd does not say (the tenant, the key, the geometry, the token
 * range, the layout, each page's seal: CRC, header flags, generation) is in
 * the index, STATE_DIR/prefixes.0.idx and .1.idx:
 *
 *   struct save_hdr     magic, version, entry sizes, generation, the
 *                       body's length and CRC-32C, its own CRC-32C
 *   per block           struct save_ent, then layers struct
 *                       kvmemd_prefix_page
 *
 * Once a loop iteration in which the set of blocks changed, the index is
 * built on the loop and written on a worker, in turn to .0 and .1 (each
 * over its last-but-one, in place: a write cut short leaves the other
 * whole; not fsynced, as the sessions' live records: the memfds it names
 * do not outlive the machine either), and at an orderly stop. A block
 * is in the store before any index names it, and out of it before the
 * index that no longer names it; so after a kill -9 every entry of the
 * newest index names a memfd with the block's copies, or none.
 *
 * At start, server.c hands the "prefix-" descriptors here. The
 * newest index that verifies (magic, version, sizes, both CRCs) is read;
 * one that does not is refused with a sentence, and without one no block
 * is taken back. Each entry whose memfd came back is mapped, and every
 * page checked as an attach checks it (each word, corrected in place
 * where it can be; the CRC; its header against the seal the entry has):
 * a block with a page that fails is dropped with a sentence, never
 * served. The others are their tenants' again, under the same key, and
 * counted in their bytes; prefix.* limits then apply as after a reload.
 * Memfds no entry takes are closed and, once the daemon serves, removed
 * from the store. The entries are the daemon's own structures, so
 * another version's index is refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvmem/crc32c.h"
#include "kvmem/page.h"
#include "prefix.h"

#define SAVE_MAGIC "KVMPFX1"
#define SAVE_VERSION 1
#define SAVE_PATH_MAX 320
/* The most "prefix-" descriptors taken from systemd at a start. */
#define MAX_PASSED 65536

struct save_hdr {
	char magic[8]; /* SAVE_MAGIC */
	uint32_t version; /* SAVE_VERSION */
	uint32_t ent_size, page_size;
	uint32_t nblocks;
	uint64_t generation; /* the newer of the two files wins */
	uint64_t body_bytes;
	uint32_t body_crc; /* CRC-32C of the body */
	uint32_t crc; /* CRC-32C of the header before it */
};

struct save_ent {
	uint64_t id; /* its memfd is "prefix-ID" in the store */
	uint64_t tenant;
	uint64_t published, used, hits;
	uint8_t key[KVMEM_PREFIX_KEY_BYTES];
	struct kvmem_geometry g;
	struct kvmem_page_layout layout;
	uint32_t token_start, ntokens;
	uint32_t layers, page_bytes;
	uint8_t kind;
	uint8_t pad[7];
};

/* Each part lies aligned in the buffer it is read into. */
_Static_assert(sizeof(struct save_hdr) % 8 == 0, "header padded");
_Static_assert(sizeof(struct save_ent) % 8 == 0, "entry padded");
_Static_assert(sizeof(struct kvmemd_prefix_page) % 8 == 0, "page padded");

/* A memfd systemd passed back. */
struct passed {
	char name[32];
	uint64_t id; /* 0: a name that is no block's */
	int fd; /* -1 once looked at or closed */
	uint8_t taken; /* by a block: it stays in the store */
};

struct kvmemd_prefix_save {
	struct kvmemd_work work;
	char path[2][SAVE_PATH_MAX];
	uint64_t next_id;
	uint64_t generation; /* of the index being written, or last */
	uint8_t *buf; /* the index being written */
	size_t len;
	int ret;
	uint8_t busy, dirty, failed;
	uint32_t nblocks; /* in the index being written */
	uint64_t written; /* blocks the last index written names */
	struct passed *fds;
	uint32_t nfds, cap;
	struct kvmemd_ratelimit log_store;
	/* at start: blocks taken back, and those that were not (dropped,
	 * or with no index entry that takes them) */
	uint32_t taken, refused;
};

static struct kvmemd_prefix_save *state(struct kvmemd *d)
{
	struct kvmemd_prefix_save *v = d->prefix_save;
	int i;

	if (v)
		return v;
	v = calloc(1, sizeof(*v));
	if (!v)
		return NULL;
	for (i = 0; i < 2; i++)
		if (snprintf(v->path[i], SAVE_PATH_MAX, "%s/prefixes.%d.idx",
			     d->cfg.state_dir, i) >= SAVE_PATH_MAX) {
			free(v);
			return NULL;
		}
	v->next_id = 1;
	d->prefix_save = v;
	return v;
}

int kvmemd_prefix_save_on(const struct kvmemd *d)
{
	return d->cfg.prefix_keep == KVMEMD_YES && kvmemd_notify_keeping(d);
}

uint8_t *kvmemd_prefix_save_map(struct kvmemd_prefix_block *b)
{
	const size_t len = (size_t)b->layers * b->page_bytes;
	void *p;
	int fd = memfd_create("kvmemd-prefix", MFD_CLOEXEC);

	if (fd < 0)
		return NULL;
	if (ftruncate(fd, (off_t)len)) {
		close(fd);
		return NULL;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		close(fd);
		return NULL;
	}
	b->fd = fd;
	return p;
}

void kvmemd_prefix_save_add(struct kvmemd *d, struct kvmemd_prefix_block *b)
{
	struct kvmemd_prefix_save *v;
	char msg[64];
	uint64_t id;
	int ret;

	if (b->fd < 0)
		return;
	v = state(d);
	if (v) {
		id = v->next_id++;
		snprintf(msg, sizeof(msg),
			 "FDSTORE=1\nFDNAME=" KVMEMD_PREFIX_FD_NAME "%" PRIu64,
			 id);
		ret = kvmemd_notify_fd(msg, b->fd);
		/* A line a publish at worst: clients publish at will. */
		if (ret)
			kvmemd_log_rl(&v->log_store, "prefix stores refused",
				      LOG_WARNING,
				      "prefix: a block's memfd is not in the "
				      "descriptor store (%s); a restart of "
				      "kvmemd would lose it",
				      strerror(-ret));
		else
			b->id = id;
		v->dirty |= !ret;
	}
	/* The mapping holds the memory, the store the memfd. */
	close(b->fd);
	b->fd = -1;
}

void kvmemd_prefix_save_drop(struct kvmemd *d, struct kvmemd_prefix_block *b)
{
	char msg[64];

	if (!b->id)
		return;
	snprintf(msg, sizeof(msg),
		 "FDSTOREREMOVE=1\nFDNAME=" KVMEMD_PREFIX_FD_NAME "%" PRIu64,
		 b->id);
	kvmemd_notify_fd(msg, -1);
	b->id = 0;
	if (d->prefix_save)
		d->prefix_save->dirty = 1;
}

void kvmemd_prefix_save_counts(const struct kvmemd *d, uint64_t *taken,
			       uint64_t *refused)
{
	const struct kvmemd_prefix_save *v = d->prefix_save;

	*taken = v ? v->taken : 0;
	*refused = v ? v->refused : 0;
}

uint64_t kvmemd_prefix_save_written(const struct kvmemd *d)
{
	return d->prefix_save ? d->prefix_save->written : 0;
}

/* ---- the index -------------------------------------------------------- */

/* On a worker (or the loop at a stop): the index, checksummed, over the
 * older of the two. */
static void index_work(struct kvmemd_work *w)
{
	struct kvmemd_prefix_save *v = (struct kvmemd_prefix_save *)w;
	struct save_hdr *h = (struct save_hdr *)v->buf;

	h->body_crc = kvmem_crc32c(0, v->buf + sizeof(*h), h->body_bytes);
	h->crc = kvmem_crc32c(0, h, offsetof(struct save_hdr, crc));
	v->ret = kvmemd_file_replace(v->path[v->generation & 1], v->buf, v->len,
				     0);
}

/* On the loop, once it is written. */
static void index_done(struct kvmemd_work *w)
{
	struct kvmemd_prefix_save *v = (struct kvmemd_prefix_save *)w;

	free(v->buf);
	v->buf = NULL;
	v->busy = 0;
	if (!v->ret) {
		v->written = v->nblocks;
		v->failed = 0;
		return;
	}
	/* Tried again at the next change; said once until one succeeds. */
	if (!v->failed)
		kvmemd_log_err(LOG_ERR, v->ret,
			       "prefix: writing the index of the blocks kept "
			       "across restarts, %s; a crash of kvmemd would "
			       "lose the blocks published since the last",
			       v->path[v->generation & 1]);
	v->failed = 1;
}

/* The index of the blocks in the store to v->buf; its checksums are
 * index_work()'s. */
static int index_image(struct kvmemd *d, struct kvmemd_prefix_save *v)
{
	const struct kvmemd_prefix_block *b;
	struct save_hdr h;
	struct save_ent e;
	char *buf = NULL;
	size_t len = 0;
	uint32_t n = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return -ENOMEM;
	memset(&h, 0, sizeof(h));
	fwrite(&h, sizeof(h), 1, f);
	for (b = kvmemd_prefix_oldest(d); b; b = b->anext) {
		if (!b->id)
			continue;
		memset(&e, 0, sizeof(e));
		e.id = b->id;
		e.tenant = b->tenant;
		e.published = b->published;
		e.used = b->used;
		e.hits = b->hits;
		memcpy(e.key, b->key, sizeof(e.key));
		e.g = b->g;
		e.layout = b->layout;
		e.token_start = b->token_start;
		e.ntokens = b->ntokens;
		e.layers = b->layers;
		e.page_bytes = b->page_bytes;
		e.kind = b->kind;
		fwrite(&e, sizeof(e), 1, f);
		fwrite(b->pages, sizeof(*b->pages), b->layers, f);
		n++;
	}
	if (fclose(f)) {
		free(buf);
		return -ENOMEM;
	}
	memcpy(h.magic, SAVE_MAGIC, sizeof(SAVE_MAGIC));
	h.version = SAVE_VERSION;
	h.ent_size = sizeof(struct save_ent);
	h.page_size = sizeof(struct kvmemd_prefix_page);
	h.nblocks = n;
	h.generation = v->generation + 1;
	h.body_bytes = len - sizeof(h);
	memcpy(buf, &h, sizeof(h));
	v->buf = (uint8_t *)buf;
	v->len = len;
	v->nblocks = n;
	return 0;
}

/* The index as the blocks are now, to a worker (@now: written here). */
static void index_write(struct kvmemd *d, int now)
{
	struct kvmemd_prefix_save *v = d->prefix_save;
	int ret;

	if (!v || !v->dirty || v->busy)
		return;
	ret = index_image(d, v);
	if (ret) {
		v->ret = ret;
		index_done(&v->work);
		return;
	}
	v->generation++;
	v->dirty = 0;
	v->ret = 0;
	v->busy = 1;
	v->work.fn = index_work;
	v->work.done = index_done;
	if (!now && d->workers && !kvmemd_workers_push(d->workers, &v->work))
		return;
	if (!now) {
		/* The queue is full: at the next iteration. */
		free(v->buf);
		v->buf = NULL;
		v->busy = 0;
		v->generation--;
		v->dirty = 1;
		return;
	}
	index_work(&v->work);
	index_done(&v->work);
}

void kvmemd_prefix_save_write(struct kvmemd *d)
{
	index_write(d, 0);
}

void kvmemd_prefix_save_flush(struct kvmemd *d)
{
	index_write(d, 1);
}

/* ---- at start --------------------------------------------------------- */

int kvmemd_prefix_save_fd(struct kvmemd *d, const char *name, int fd)
{
	struct kvmemd_prefix_save *v = state(d);
	unsigned long long id;
	struct passed *p;
	char *end;

	if (strncmp(name, KVMEMD_PREFIX_FD_NAME, strlen(KVMEMD_PREFIX_FD_NAME)))
		return 0;
	if (!v || v->nfds >= MAX_PASSED || strlen(name) >= sizeof(p->name)) {
		kvmemd_log(LOG_WARNING,
			   "passed descriptor %s: not taken, closed", name);
		close(fd);
		return 1;
	}
	if (v->nfds == v->cap) {
		uint32_t cap = v->cap ? 2 * v->cap : 16;

		p = realloc(v->fds, cap * sizeof(*p));
		if (!p) {
			close(fd);
			return 1;
		}
		v->fds = p;
		v->cap = cap;
	}
	p = &v->fds[v->nfds++];
	memset(p, 0, sizeof(*p));
	strcpy(p->name, name);
	errno = 0;
	id = strtoull(name + strlen(KVMEMD_PREFIX_FD_NAME), &end, 10);
	p->fd = fd;
	if (!*end && !errno && id)
		p->id = id;
	/* New blocks take names none of these has. */
	if (id >= v->next_id && id < UINT64_MAX)
		v->next_id = id + 1;
	return 1;
}

/* The memfd named prefix-@id, still to be taken, or NULL. */
static struct passed *fd_find(struct kvmemd_prefix_save *v, uint64_t id)
{
	uint32_t i;

	for (i = 0; i < v->nfds; i++)
		if (v->fds[i].id == id && v->fds[i].fd >= 0)
			return &v->fds[i];
	return NULL;
}

/* The memfds not taken are closed: how many. */
static uint32_t fds_close(struct kvmemd_prefix_save *v)
{
	uint32_t i, n = 0;

	for (i = 0; i < v->nfds; i++)
		if (v->fds[i].fd >= 0) {
			close(v->fds[i].fd);
			v->fds[i].fd = -1;
			n++;
		}
	return n;
}

/* kvmemd_file_pair_read()'s check of an index of @size bytes at @buf: 0
 * with its generation, or why not. */
static int index_check(const uint8_t *buf, size_t size, void *ctx,
		       uint64_t *generation, char *why, size_t len)
{
	struct save_hdr hdr, *h = &hdr;

	(void)ctx;
	if (size < sizeof(*h)) {
		snprintf(why, len, "%zu bytes, shorter than its header", size);
		return -EINVAL;
	}
	memcpy(h, buf, sizeof(*h));
	if (memcmp(h->magic, SAVE_MAGIC, sizeof(SAVE_MAGIC)) ||
	    h->crc != kvmem_crc32c(0, buf, offsetof(struct save_hdr, crc))) {
		snprintf(why, len, "not an index of kept prefixes, or damaged");
		return -EINVAL;
	}
	if (h->version != SAVE_VERSION ||
	    h->ent_size != sizeof(struct save_ent) ||
	    h->page_size != sizeof(struct kvmemd_prefix_page)) {
		snprintf(why, len,
			 "written by another version of kvmemd (index %u, "
			 "this one reads %u)",
			 h->version, SAVE_VERSION);
		return -EPROTO;
	}
	if (h->body_bytes != size - sizeof(*h) ||
	    h->body_crc != kvmem_crc32c(0, buf + sizeof(*h), h->body_bytes)) {
		snprintf(why, len, "its entries are cut short or damaged");
		return -EINVAL;
	}
	*generation = h->generation;
	return 0;
}

/*
 * The newer of the two indexes that verifies: 0 with it in *@buf (its
 * header first) and its size, or -ENOENT when there is none (each refused
 * said in the log).
 */
static int index_read(struct kvmemd_prefix_save *v, uint8_t **buf, size_t *size)
{
	const char *const paths[2] = { v->path[0], v->path[1] };
	struct kvmemd_file_pair r;
	int i, ret;

	ret = kvmemd_file_pair_read(paths, index_check, NULL, &r);
	for (i = 0; i < 2; i++)
		if (r.present[i] && !r.ok[i])
			kvmemd_log(LOG_ERR,
				   "%s: %s; no published prefix is taken back "
				   "from it",
				   paths[i], r.why[i]);
	if (ret)
		return ret;
	*buf = r.buf;
	*size = r.size;
	v->generation = r.generation;
	return 0;
}

/* Does @e name a block this kvmemd would have kept? */
static int ent_sane(const struct save_ent *e)
{
	struct kvmemd_prefix_block n;

	memset(&n, 0, sizeof(n));
	n.g = e->g;
	n.layout = e->layout;
	n.token_start = e->token_start;
	n.ntokens = e->ntokens;
	n.layers = e->layers;
	n.page_bytes = e->page_bytes;
	n.kind = e->kind;
	return kvmemd_prefix_shape_ok(&n);
}

/*
 * Page @l of @b as an attach checks it, and its header as the seal the
 * index has: 0, or -EIO.
 */
static int page_good(struct kvmemd_prefix_block *b, uint32_t l)
{
	uint8_t *page = b->data + (size_t)l * b->page_bytes;
	const struct kvmemd_prefix_page *s = &b->pages[l];
	struct kvmem_page_hdr h;

	if (kvmem_page_verify(page, &b->g, NULL) &&
	    (kvmem_page_scrub(page, &b->g, NULL) ||
	     kvmem_page_verify(page, &b->g, NULL)))
		return -EIO;
	if (kvmem_page_read_header(page, &b->g, &h, NULL) || h.layer != l ||
	    h.token_start != b->token_start || h.ntokens != b->ntokens ||
	    h.flags != s->hdr_flags || h.generation != s->generation ||
	    h.crc != s->crc)
		return -EIO;
	return 0;
}

/*
 * The block of @e, its pages at @pages, from its memfd @fd (closed here):
 * restored, or why not in @why.
 */
static int block_load(struct kvmemd *d, const struct save_ent *e,
		      const struct kvmemd_prefix_page *pages, int fd, char *why,
		      size_t len)
{
	const size_t bytes = (size_t)e->layers * e->page_bytes;
	struct kvmemd_prefix_block *b;
	struct stat st;
	uint32_t l;
	void *map;
	int ret;

	if (fstat(fd, &st) || (uint64_t)st.st_size != bytes) {
		close(fd);
		snprintf(why, len, "its memfd is not the size of its pages");
		return -EINVAL;
	}
	map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	b = calloc(1, sizeof(*b));
	if (b)
		b->pages = malloc(e->layers * sizeof(*b->pages));
	if (map == MAP_FAILED || !b || !b->pages) {
		if (map != MAP_FAILED)
			munmap(map, bytes);
		if (b)
			free(b->pages);
		free(b);
		snprintf(why, len, "out of memory");
		return -ENOMEM;
	}
	memcpy(b->key, e->key, sizeof(b->key));
	b->g = e->g;
	b->digest = kvmem_geometry_digest(&e->g);
	b->token_start = e->token_start;
	b->ntokens = e->ntokens;
	b->layers = e->layers;
	b->page_bytes = e->page_bytes;
	b->kind = e->kind;
	b->layout = e->layout;
	b->staged = e->layers;
	memcpy(b->pages, pages, e->layers * sizeof(*b->pages));
	b->data = map;
	b->tenant = e->tenant;
	b->published = e->published;
	b->used = e->used;
	b->hits = e->hits;
	b->fd = -1;
	b->id = e->id;
	ret = 0;
	for (l = 0; l < b->layers && !ret; l++)
		ret = page_good(b, l);
	if (ret)
		snprintf(why, len, "page %u does not verify", l - 1);
	else
		ret = kvmemd_prefix_restore(d, b);
	if (ret == -EEXIST)
		snprintf(why, len, "its tenant has that block already");
	else if (ret == -ENOMEM)
		snprintf(why, len, "out of memory");
	if (!ret)
		return 0;
	/* Not kvmemd_prefix_save_drop(): the store loses it at the commit. */
	munmap(map, bytes);
	free(b->pages);
	free(b);
	return ret;
}

/* The blocks of the index @buf, @size bytes, verified: how many were
 * taken back, *@dropped those that did not verify. */
static uint32_t index_load(struct kvmemd *d, struct kvmemd_prefix_save *v,
			   const uint8_t *buf, size_t size, uint32_t *dropped)
{
	const struct save_hdr *h = (const void *)buf;
	const uint8_t *p = buf + sizeof(*h), *end = buf + size;
	char why[KVMEM_MESSAGE_LEN], name[KVMEMD_TENANT_NAME_LEN];
	const struct save_ent *e;
	struct passed *pd;
	uint32_t i, n = 0;
	int fd;

	for (i = 0; i < h->nblocks; i++) {
		e = (const void *)p;
		if ((size_t)(end - p) < sizeof(*e) ||
		    e->layers > (size_t)(end - p - sizeof(*e)) /
					sizeof(struct kvmemd_prefix_page)) {
			kvmemd_log(LOG_ERR,
				   "%s: entry %u is cut short; the blocks "
				   "after it are not taken back",
				   v->path[v->generation & 1], i);
			break;
		}
		p += sizeof(*e) + e->layers * sizeof(struct kvmemd_prefix_page);
		if (e->id >= v->next_id && e->id < UINT64_MAX)
			v->next_id = e->id + 1;
		/* Dropped before the crash, with the index not yet
		 * rewritten: nothing to say. */
		pd = fd_find(v, e->id);
		if (!pd)
			continue;
		/* block_load() closes it; one that fails leaves the store
		 * at the commit. */
		fd = pd->fd;
		pd->fd = -1;
		if (!ent_sane(e)) {
			snprintf(why, sizeof(why),
				 "its entry names no block this kvmemd keeps");
			close(fd);
		} else if (!block_load(d, e, (const void *)(e + 1), fd, why,
				       sizeof(why))) {
			pd->taken = 1;
			n++;
			continue;
		}
		(*dropped)++;
		kvmemd_log(LOG_WARNING,
			   "prefix: a kept block of %s (tokens %u-%u, %u "
			   "layers) is not taken back: %s; dropped",
			   kvmemd_prefix_tenant_name(e->tenant, name),
			   e->token_start, e->token_start + e->ntokens - 1,
			   e->layers, why);
	}
	return n;
}

void kvmemd_prefix_save_load(struct kvmemd *d)
{
	struct kvmemd_prefix_save *v = state(d);
	uint32_t n = 0, dropped = 0, closed;
	uint8_t *buf = NULL;
	size_t size = 0;

	if (!v)
		return;
	if (!kvmemd_prefix_save_on(d)) {
		closed = fds_close(v);
		v->refused = closed;
		if (closed)
			kvmemd_log(LOG_NOTICE,
				   "%u kept prefix blocks passed back: "
				   "prefix.keep is off (or there is no "
				   "descriptor store), closed",
				   closed);
		return;
	}
	if (!index_read(v, &buf, &size)) {
		n = index_load(d, v, buf, size, &dropped);
		free(buf);
	}
	closed = fds_close(v);
	v->taken = n;
	v->refused = dropped + closed;
	if (closed)
		kvmemd_log(LOG_WARNING,
			   "%u kept prefix block memfds passed back with no "
			   "index entry that takes them: closed",
			   closed);
	if (n)
		kvmemd_log(LOG_NOTICE,
			   "prefix: %u published blocks taken back (%u "
			   "dropped)",
			   n, dropped);
	/* Smaller limits than the last kvmemd's evict at once. */
	kvmemd_prefix_trim(d);
	/* The index names what this kvmemd keeps, at the first
	 * iteration. */
	v->dirty = 1;
}

void kvmemd_prefix_save_commit(struct kvmemd *d)
{
	struct kvmemd_prefix_save *v = d->prefix_save;
	char msg[64];
	uint32_t i;

	if (!v)
		return;
	for (i = 0; i < v->nfds; i++) {
		if (v->fds[i].taken)
			continue;
		snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=%s",
			 v->fds[i].name);
		kvmemd_notify_fd(msg, -1);
	}
	free(v->fds);
	v->fds = NULL;
	v->nfds = v->cap = 0;
}

void kvmemd_prefix_save_exit(struct kvmemd *d)
{
	struct kvmemd_prefix_save *v = d->prefix_save;

	if (!v)
		return;
	fds_close(v);
	free(v->fds);
	free(v->buf);
	free(v);
	d->prefix_save = NULL;
}
