/* SPDX-License-Identifier: MIT */
/*
 * pool.c - the memory backends, one ops table each, and the GPU pool
 *
 * host: a shmem memfd per session, asking for transparent huge pages
 * (pool.hugepages), locked in RAM when the limits allow (pool.mlock).
 * cuda: device memory of the driver's virtual memory API, one allocation
 * per session, zeroed, mapped here and shared as a POSIX file descriptor;
 * pages move into and out of it by the driver's copies (the GPU tier),
 * on a stream of the daemon's, and are checked there by the kernels (the
 * scrub kernel, and the CRC kernel for the CRC of a seal or a move), with
 * a few KiB of device memory as their workspace.
 * standin: host memory playing the GPU (pool.gpu_device = standin), a
 * memfd per session, for machines without one: the GPU tier's moves,
 * policy and checks run as they do on a GPU, the copies are memcpy(), and
 * the patrol can read the pages there.
 * nvme: a stub; the backing store is the tier's (store.c).
 *
 * Not hugetlbfs: a client can punch a hole in its shared mapping
 * (MADV_REMOVE, FALLOC_FL_PUNCH_HOLE), which on hugetlbfs gives the
 * reservation back, and the daemon's next touch of that page dies of SIGBUS
 * when no huge page is free. shmem refaults a zero page instead.
 *
 * Arenas are gigabytes, and mlock() and munmap() hold the process's
 * memory-map lock while they fault in or zap a range: a whole arena at a
 * time held it for seconds, and the event loop, whose page faults and
 * malloc()s take the same lock, waited behind every worker setting up or
 * tearing down an arena. Both go in steps of MAP_STEP bytes, so the lock is
 * let go between steps, and an arena is torn down on a worker
 * (kvmemd_host_release()), never on the loop.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kvmem/cuda.h"
#include "kvmem-private.h"
#include "kvmemd.h"

/* What one mlock() or munmap() of an arena covers: a few milliseconds. */
#define MAP_STEP (8ul << 20)

/* munlock() or munmap() @len bytes at @p, a step at a time. */
static void map_steps(int (*fn)(void *, size_t), uint8_t *p, size_t len)
{
	size_t n;

	for (; len; p += n, len -= n) {
		n = len < MAP_STEP ? len : MAP_STEP;
		fn(p, n);
	}
}

static int do_munlock(void *p, size_t len)
{
	return munlock(p, len);
}

/* The memfd @fd, or a new one when it is -1, mapped into @r; a failure
 * leaves @fd open. */
static int host_map(struct kvmemd_region *r, size_t size, int huge, int fd)
{
	const int given = fd;
	void *p;
	int ret;

	if (fd < 0) {
		fd = memfd_create("kvmem-session",
				  MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (fd < 0)
			return -errno;
		if (ftruncate(fd, (off_t)size))
			goto err_fd;
		/* The client can no longer shrink the file under the
		 * daemon's mapping (a SIGBUS here) nor grow it past its
		 * quota. */
		if (fcntl(fd, F_ADD_SEALS,
			  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
			goto err_fd;
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		goto err_fd;
	if (huge && madvise(p, size, MADV_HUGEPAGE)) {
		ret = -errno;
		munmap(p, size);
		if (given < 0)
			close(fd);
		return ret;
	}
	r->fd = fd;
	r->base = p;
	r->size = size;
	r->huge = (uint8_t)huge;
	return 0;
err_fd:
	ret = -errno;
	if (given < 0)
		close(fd);
	return ret;
}

static int host_lock(const struct kvmemd_region_req *req,
		     struct kvmemd_region *r, char *why, size_t whylen);

/* @fd: a memfd to map, taken whatever the outcome, or -1 for a new one. */
static int host_open(const struct kvmemd_region_req *req, int fd,
		     struct kvmemd_region *r, char *why, size_t whylen)
{
	const size_t size = req->size;
	int ret = -EOPNOTSUPP;

	memset(r, 0, sizeof(*r));
	r->fd = -1;
	if (req->hugepages != KVMEMD_NO)
		ret = host_map(r, size, 1, fd);
	if (ret && req->hugepages == KVMEMD_YES) {
		snprintf(why, whylen,
			 "no transparent huge pages for %zu bytes: %s", size,
			 strerror(-ret));
		if (fd >= 0)
			close(fd);
		return ret;
	}
	if (ret)
		ret = host_map(r, size, 0, fd);
	if (ret) {
		snprintf(why, whylen, "memfd of %zu bytes: %s", size,
			 strerror(-ret));
		if (fd >= 0)
			close(fd);
		return ret;
	}
	return host_lock(req, r, why, whylen);
}

static int host_create(const struct kvmemd_region_req *req,
		       struct kvmemd_region *r, char *why, size_t whylen)
{
	return host_open(req, -1, r, why, whylen);
}

/*
 * A memfd a daemon before this one made (kept across a restart): the
 * size it had and the seals it put on, or it is refused. The region takes
 * @fd whatever the outcome.
 */
static int host_adopt(const struct kvmemd_region_req *req, int fd,
		      struct kvmemd_region *r, char *why, size_t whylen)
{
	const int want = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
	struct stat st;
	int seals;

	memset(r, 0, sizeof(*r));
	r->fd = -1;
	seals = fcntl(fd, F_GET_SEALS);
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size != req->size || seals < 0 ||
	    (seals & want) != want) {
		snprintf(why, whylen,
			 "kept descriptor is not a sealed memfd of %zu bytes",
			 req->size);
		close(fd);
		return -EINVAL;
	}
	return host_open(req, fd, r, why, whylen);
}

static int host_lock(const struct kvmemd_region_req *req,
		     struct kvmemd_region *r, char *why, size_t whylen)
{
	int ret;

	size_t done, n;

	if (req->mlock == KVMEMD_NO)
		return 0;
	for (done = 0; done < r->size; done += n) {
		n = r->size - done < MAP_STEP ? r->size - done : MAP_STEP;
		if (mlock(r->base + done, n))
			break;
	}
	if (done == r->size) {
		r->locked = 1;
		return 0;
	}
	ret = -errno;
	map_steps(do_munlock, r->base, done);
	if (req->mlock == KVMEMD_YES) {
		snprintf(why, whylen, "mlock %zu bytes: %s", r->size,
			 strerror(-ret));
		map_steps(munmap, r->base, r->size);
		close(r->fd);
		/* The caller destroys a failed region too. */
		r->base = NULL;
		r->fd = -1;
		return ret;
	}
	/* auto: run unlocked, and say so once. */
	{
		static int warned;

		if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
			kvmemd_log_err(LOG_WARNING, ret,
				       "mlock of a session arena failed, pages "
				       "may be swapped (raise LimitMEMLOCK or "
				       "set pool.mlock = no)");
	}
	return 0;
}

/*
 * The client may keep its descriptor and mapping of the memfd after it hung
 * up, and with them the pages: with r->discard, free them, so that the
 * pool the daemon accounts is the memory there is. What the client touches
 * after this is new zero pages it allocates itself, charged to it.
 * Unmapped first: punching pages still mapped here costs twice as long.
 */
static void host_destroy(struct kvmemd_region *r)
{
	if (r->pinned)
		kvmem__cuda_host_unregister(r->cu, r->base);
	r->pinned = 0;
	if (r->base)
		map_steps(munmap, r->base, r->size);
	if (r->fd >= 0 && r->discard &&
	    fallocate(r->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
		      (off_t)r->size))
		kvmemd_log_err(LOG_WARNING, -errno,
			       "cannot free an ended session's memory; it "
			       "stays allocated while its client holds it");
	if (r->fd >= 0)
		close(r->fd);
	r->base = NULL;
	r->fd = -1;
}

/* ---- arenas torn down on a worker ------------------------------------- */

struct host_release {
	struct kvmemd_work work; /* first: the workers hand it back */
	struct kvmemd *d;
	struct kvmemd_region r;
	uint64_t bytes;
};

static void release_work(struct kvmemd_work *w)
{
	host_destroy(&((struct host_release *)w)->r);
}

/* On the loop: the memory is gone, the pool may promise it again. */
static void release_done(struct kvmemd_work *w)
{
	struct host_release *rel = (struct host_release *)w;

	rel->d->n.pool_used -= rel->bytes;
	rel->d->n.pool_releasing -= rel->bytes;
	free(rel);
}

void kvmemd_host_release(struct kvmemd *d, struct kvmemd_region *r,
			 uint64_t bytes)
{
	struct host_release *rel = d->workers ? malloc(sizeof(*rel)) : NULL;

	if (rel) {
		rel->work.fn = release_work;
		rel->work.done = release_done;
		rel->d = d;
		rel->r = *r;
		rel->bytes = bytes;
		if (!kvmemd_workers_push(d->workers, &rel->work)) {
			d->n.pool_releasing += bytes;
			r->base = NULL;
			r->fd = -1;
			return;
		}
		free(rel);
	}
	/* No worker to take it (starting, stopping, out of memory): here,
	 * where nothing else waits. */
	host_destroy(r);
	d->n.pool_used -= bytes;
}

static int cuda_create(const struct kvmemd_region_req *req,
		       struct kvmemd_region *r, char *why, size_t whylen)
{
	struct kvmem__vmm m;
	int ret;

	memset(r, 0, sizeof(*r));
	r->fd = -1;
	ret = kvmem__cuda_vmm_create(req->cu, req->size, &m, &r->fd);
	if (ret) {
		snprintf(why, whylen, "%s", kvmem_cuda_error());
		return ret;
	}
	r->dev = m.addr;
	r->size = m.bytes;
	r->handle = m.handle;
	r->cu = req->cu;
	r->stream = req->stream;
	r->ws = req->ws;
	return 0;
}

/* Copies on the pool's stream, in order; cuda_wait() waits for them. */
static int cuda_copy(struct kvmemd_region *r, uint64_t off, uint8_t *host,
		     size_t len, int in)
{
	const uint64_t h = (uintptr_t)host, dev = r->dev + off;

	if (off > r->size || len > r->size - off)
		return -EINVAL;
	return kvmem_cuda_copy(r->cu, in ? dev : h, in ? h : dev, len,
			       r->stream)
		       ? -EIO
		       : 0;
}

static int cuda_wait(struct kvmemd_region *r)
{
	return kvmem_cuda_sync(r->cu, r->stream) ? -EIO : 0;
}

/*
 * The workspace of the checks on the device (kvmemd_gpu.ws): the ranges
 * of a CRC launch and their CRCs; or one page's scrub, what goes there
 * (struct ws_in) and what comes back (struct ws_out), each in one copy.
 * Only the loop launches them, one at a time. A copy from device memory
 * into memory of this process's that the driver has not pinned does not
 * return before it is done: each check has one.
 */
struct ws_in {
	struct kvmem_cuda_page pg;
	uint64_t rg[2]; /* the CRC's range, from the region's start */
};

struct ws_out {
	struct kvmem_page_counts pc;
	int32_t verdict;
	uint32_t crc;
	uint8_t hdr[KVMEM_PAGE_HDR_BYTES];
};

#define WS_RANGES 0
#define WS_CRCS (WS_RANGES + 2 * sizeof(uint64_t) * KVMEMD_CHECK_MAX)
#define WS_IN (WS_CRCS + sizeof(uint32_t) * KVMEMD_CHECK_MAX)
#define WS_OUT (WS_IN + 64)
#define KVMEMD_GPU_WS (WS_OUT + sizeof(struct ws_out))
_Static_assert(sizeof(struct ws_in) <= 64 && WS_OUT % 8 == 0,
	       "the workspace's parts do not overlap");

/* Copy @len bytes from @src to @dst on the pool's stream: 0, or 1. */
static int ws_copy(struct kvmemd_region *r, uint64_t dst, uint64_t src,
		   size_t len)
{
	return kvmem_cuda_copy(r->cu, dst, src, len, r->stream) != 0;
}

static int cuda_check(struct kvmemd_region *r, const uint64_t *rg, uint32_t n,
		      uint32_t *crc)
{
	uint32_t i;

	if (!r->ws)
		return -EOPNOTSUPP;
	if (n > KVMEMD_CHECK_MAX)
		return -EINVAL;
	for (i = 0; i < n; i++)
		if (rg[2 * i] > r->size || rg[2 * i + 1] > r->size - rg[2 * i])
			return -EINVAL;
	if (ws_copy(r, r->ws + WS_RANGES, (uintptr_t)rg, 2 * sizeof(*rg) * n) ||
	    kvmem__cuda_crc32c(r->cu, r->dev, r->ws + WS_RANGES, n,
			       r->ws + WS_CRCS, r->stream) ||
	    ws_copy(r, (uintptr_t)crc, r->ws + WS_CRCS, sizeof(*crc) * n) ||
	    kvmem_cuda_sync(r->cu, r->stream))
		return -EIO;
	return 0;
}

static int cuda_scrub(struct kvmemd_region *r, uint64_t off, size_t len,
		      int hot, uint32_t ntokens, const struct kvmem_geometry *g,
		      struct kvmem_page_counts *pc, uint32_t *crc, uint8_t *hdr)
{
	const struct ws_in in = {
		.pg = { .addr = r->dev + off,
			.ntokens = ntokens,
			.flags = hot ? KVMEM_HDR_HOT : 0 },
		.rg = { off + KVMEM_PAGE_HDR_BYTES,
			len - KVMEM_PAGE_HDR_BYTES },
	};
	const uint64_t out = r->ws + WS_OUT;
	struct ws_out got;

	if (!r->ws)
		return -EOPNOTSUPP;
	if (len < KVMEM_PAGE_HDR_BYTES || off > r->size || len > r->size - off)
		return -EINVAL;
	if (ws_copy(r, r->ws + WS_IN, (uintptr_t)&in, sizeof(in)) ||
	    kvmem__cuda_scrub(
		    r->cu, g, r->ws + WS_IN + offsetof(struct ws_in, pg), 1,
		    out + offsetof(struct ws_out, pc),
		    out + offsetof(struct ws_out, verdict), 1, r->stream) ||
	    kvmem__cuda_crc32c(r->cu, r->dev,
			       r->ws + WS_IN + offsetof(struct ws_in, rg), 1,
			       out + offsetof(struct ws_out, crc), r->stream) ||
	    ws_copy(r, out + offsetof(struct ws_out, hdr), r->dev + off,
		    KVMEM_PAGE_HDR_BYTES) ||
	    ws_copy(r, (uintptr_t)&got, out, sizeof(got)) ||
	    kvmem_cuda_sync(r->cu, r->stream))
		return -EIO;
	*pc = got.pc;
	*crc = got.crc;
	memcpy(hdr, got.hdr, sizeof(got.hdr));
	return got.verdict;
}

/* The daemon lets go; the memory lives on while its client maps it. */
static void cuda_destroy(struct kvmemd_region *r)
{
	struct kvmem__vmm m = { .addr = r->dev,
				.bytes = r->size,
				.handle = r->handle };

	if (r->size)
		kvmem__cuda_vmm_free(r->cu, &m);
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	r->size = 0;
}

/* A memfd of host memory, zeroed as the driver zeroes device memory,
 * neither huge nor locked: it plays a GPU, not the host pool. */
static int standin_create(const struct kvmemd_region_req *req,
			  struct kvmemd_region *r, char *why, size_t whylen)
{
	const struct kvmemd_region_req host = { .size = req->size,
						.hugepages = KVMEMD_NO,
						.mlock = KVMEMD_NO };
	int ret = host_create(&host, r, why, whylen);

	r->discard = !ret;
	return ret;
}

static int standin_copy(struct kvmemd_region *r, uint64_t off, uint8_t *host,
			size_t len, int in)
{
	if (off > r->size || len > r->size - off)
		return -EINVAL;
	memcpy(in ? r->base + off : host, in ? host : r->base + off, len);
	return 0;
}

static uint8_t *standin_view(const struct kvmemd_region *r)
{
	return r->base;
}

static int stub_create(const struct kvmemd_region_req *req,
		       struct kvmemd_region *r, char *why, size_t whylen)
{
	(void)req;
	memset(r, 0, sizeof(*r));
	r->fd = -1;
	snprintf(why, whylen, "backend not built in this version");
	return -EOPNOTSUPP;
}

static void stub_destroy(struct kvmemd_region *r)
{
	(void)r;
}

static const struct kvmemd_pool_ops pool_ops[] = {
	[KVMEMD_POOL_HOST] = {
		.name = "host",
		.create = host_create,
		.adopt = host_adopt,
		.destroy = host_destroy,
	},
	[KVMEMD_POOL_CUDA] = {
		.name = "cuda",
		.create = cuda_create,
		.destroy = cuda_destroy,
		.copy = cuda_copy,
		.wait = cuda_wait,
		.check = cuda_check,
		.scrub = cuda_scrub,
	},
	[KVMEMD_POOL_NVME] = {
		.name = "nvme",
		.create = stub_create,
		.destroy = stub_destroy,
	},
};

_Static_assert(ARRAY_SIZE(pool_ops) == KVMEMD_POOL_NR,
	       "every pool kind has an ops table");

const struct kvmemd_pool_ops *kvmemd_pool(enum kvmemd_pool_kind kind)
{
	return &pool_ops[kind];
}

int kvmemd_pool_copy_wait(const struct kvmemd_pool_ops *ops,
			  struct kvmemd_region *r, uint64_t off, uint8_t *host,
			  size_t len, int in)
{
	int ret = ops->copy(r, off, host, len, in);

	if (!ret && ops->wait)
		ret = ops->wait(r);
	return ret;
}

/* Not a kind of its own: where it serves, it is the GPU pool. */
static const struct kvmemd_pool_ops standin_ops = {
	.name = "standin",
	.create = standin_create,
	.destroy = host_destroy,
	.copy = standin_copy,
	.view = standin_view,
};

/* ---- the GPU pool ------------------------------------------------------ */

/* What an ended session's process holds, until it exits. */
struct kvmemd_gpu_hold {
	struct kvmemd_gpu_hold *next;
	pid_t pid;
	uid_t uid; /* charged */
	int pidfd;
	uint64_t bytes;
};

/* The device named by pool.gpu_device: ordinals are tried in turn. */
static struct kvmem_cuda *gpu_find(const char *want, char *why, size_t len)
{
	struct kvmem_cuda *cu;
	char uuid[41];
	int i, ret;

	for (i = 0;; i++) {
		ret = kvmem_cuda_open(i, &cu);
		if (ret == -ENODEV && i && strcmp(want, "auto")) {
			snprintf(why, len, "no GPU %s among the %d here", want,
				 i);
			return NULL;
		}
		if (ret) {
			snprintf(why, len, "%s", kvmem_cuda_error());
			return NULL;
		}
		kvmem__cuda_uuid_str(kvmem__cuda_uuid(cu), uuid);
		if (!strcmp(want, "auto") || !strcasecmp(want, uuid))
			return cu;
		kvmem_cuda_close(cu);
	}
}

/*
 * pool.gpu_bytes as a percentage: of the memory the GPU has, in whole
 * allocations. The pool is a limit, not memory taken at start: sessions
 * allocate theirs when they come, and the driver may refuse one then if
 * other processes use the GPU.
 */
static void gpu_share(struct kvmemd *d, struct kvmem_cuda *cu,
		      struct kvmemd_gpu *g)
{
	uint64_t total = kvmem__cuda_total_mem(cu);

	g->bytes = total / 100 * d->cfg.gpu_percent +
		   total % 100 * d->cfg.gpu_percent / 100;
	g->bytes -= g->bytes % g->granularity;
	if (total && !g->bytes)
		snprintf(g->why, sizeof(g->why),
			 "pool.gpu_bytes = %u%% of the GPU's %llu bytes is "
			 "less than one allocation (%zu bytes)",
			 d->cfg.gpu_percent, (unsigned long long)total,
			 g->granularity);
	else if (total)
		kvmemd_log(LOG_INFO,
			   "GPU pool: %u%% of the GPU's %llu MiB, in %zu MiB "
			   "allocations",
			   d->cfg.gpu_percent,
			   (unsigned long long)(total >> 20),
			   g->granularity >> 20);
}

/* The stand-in's UUID: "kvmem stand-in" and two zeros. */
static const uint8_t standin_uuid[16] = "kvmem stand-in";

/* pool.gpu_device = standin: pool.gpu_bytes of host memory plays a GPU. */
static void gpu_standin(struct kvmemd *d, struct kvmemd_gpu *g)
{
	if (d->cfg.gpu_percent) {
		snprintf(g->why, sizeof(g->why),
			 "the GPU stand-in takes pool.gpu_bytes in bytes, not "
			 "a percentage of a GPU");
		kvmemd_log(LOG_WARNING,
			   "no GPU pool, serving host sessions only: %s",
			   g->why);
		return;
	}
	g->ops = &standin_ops;
	g->granularity = 2u << 20;
	g->bytes = d->cfg.gpu_bytes - d->cfg.gpu_bytes % g->granularity;
	snprintf(g->name, sizeof(g->name), "host memory standing in for a GPU");
	memcpy(g->uuid_bytes, standin_uuid, sizeof(g->uuid_bytes));
	kvmem__cuda_uuid_str(g->uuid_bytes, g->uuid);
	kvmemd_log(LOG_WARNING,
		   "GPU pool: %llu MiB of host memory standing in for a GPU "
		   "(pool.gpu_device = standin), not a GPU",
		   (unsigned long long)(g->bytes >> 20));
}

void kvmemd_gpu_open(struct kvmemd *d)
{
	struct kvmemd_gpu *g = &d->gpu;
	struct kvmem_cuda *cu;

	memset(g, 0, sizeof(*g));
	if (!d->cfg.gpu_bytes && !d->cfg.gpu_percent) {
		snprintf(g->why, sizeof(g->why), "pool.gpu_bytes is 0");
		return;
	}
	if (!strcmp(d->cfg.gpu_device, "standin")) {
		gpu_standin(d, g);
		return;
	}
	cu = gpu_find(d->cfg.gpu_device, g->why, sizeof(g->why));
	if (cu) {
		g->granularity = kvmem__cuda_vmm_granularity(cu);
		if (g->granularity && d->cfg.gpu_percent)
			gpu_share(d, cu, g);
		else
			g->bytes = d->cfg.gpu_bytes;
		if (!g->granularity || !g->bytes) {
			if (!g->granularity || !g->why[0])
				snprintf(g->why, sizeof(g->why), "%s",
					 kvmem_cuda_error());
			kvmem_cuda_close(cu);
			cu = NULL;
		}
	}
	if (!cu) {
		kvmemd_log(LOG_WARNING,
			   "no GPU pool, serving host sessions only: %s",
			   g->why);
		return;
	}
	g->cu = cu;
	g->ops = &pool_ops[KVMEMD_POOL_CUDA];
	if (kvmem__cuda_stream_create(cu, &g->stream))
		kvmemd_log(LOG_WARNING,
			   "GPU pool: %s; its copies run on the default stream",
			   kvmem_cuda_error());
	if (kvmem_cuda_alloc(cu, KVMEMD_GPU_WS, &g->ws)) {
		g->ws = 0;
		kvmemd_log(LOG_WARNING,
			   "GPU pool: %s; pages there are scrubbed in copies "
			   "here, not where they are, and copies to it are "
			   "not checked as they arrive",
			   kvmem_cuda_error());
	}
	snprintf(g->name, sizeof(g->name), "%s", kvmem_cuda_name(cu));
	memcpy(g->uuid_bytes, kvmem__cuda_uuid(cu), sizeof(g->uuid_bytes));
	kvmem__cuda_uuid_str(g->uuid_bytes, g->uuid);
	kvmemd_log(LOG_INFO, "GPU pool: %llu MiB of %s (%s)",
		   (unsigned long long)(g->bytes >> 20), g->name, g->uuid);
	if (d->cfg.gpu_session_max_bytes > g->bytes)
		kvmemd_log(LOG_NOTICE,
			   "pool.gpu_session_max_bytes (%llu MiB) is more than "
			   "the GPU pool: a session gets at most the pool",
			   (unsigned long long)(d->cfg.gpu_session_max_bytes >>
						20));
}

void kvmemd_gpu_close(struct kvmemd *d)
{
	struct kvmemd_gpu *g = &d->gpu;
	struct kvmemd_gpu_hold *h;

	while ((h = g->holds)) {
		g->holds = h->next;
		close(h->pidfd);
		free(h);
	}
	if (g->cu) {
		kvmem_cuda_free(g->cu, g->ws);
		kvmem__cuda_stream_destroy(g->cu, g->stream);
	}
	kvmem_cuda_close(g->cu);
	g->cu = NULL;
	g->ops = NULL;
	g->stream = NULL;
	g->ws = 0;
}

/* The user's record is there: it was made when the session was. */
void kvmemd_gpu_release(struct kvmemd *d, uid_t uid, uint64_t bytes)
{
	d->gpu.used -= bytes;
	kvmemd_user(d, uid)->gpu_bytes -= bytes;
}

/*
 * One record a process, however many of its sessions ended: the pidfds
 * are bounded by the processes that hold memory, not by their sessions.
 * Without a pidfd (the process is gone, or none can be had) nothing can
 * say when it exits, and the memory is given back at once.
 */
void kvmemd_gpu_hold(struct kvmemd *d, pid_t pid, uid_t uid, uint64_t bytes)
{
	struct kvmemd_gpu *g = &d->gpu;
	struct kvmemd_gpu_hold *h;
	int fd = -1, err = -EINVAL;

	for (h = g->holds; h; h = h->next) {
		if (h->pid == pid && h->uid == uid) {
			h->bytes += bytes;
			g->held += bytes;
			return;
		}
	}
	if (pid > 0) {
		fd = (int)syscall(SYS_pidfd_open, pid, 0);
		err = fd < 0 ? -errno : -ENOMEM;
	}
	h = fd >= 0 ? malloc(sizeof(*h)) : NULL;
	if (!h) {
		if (err != -ESRCH)
			kvmemd_log_err(LOG_WARNING, err,
				       "cannot watch pid %d, which may still "
				       "map %llu bytes of the GPU pool; they "
				       "are counted free",
				       (int)pid, (unsigned long long)bytes);
		if (fd >= 0)
			close(fd);
		kvmemd_gpu_release(d, uid, bytes);
		return;
	}
	h->pid = pid;
	h->uid = uid;
	h->pidfd = fd;
	h->bytes = bytes;
	h->next = g->holds;
	g->holds = h;
	g->held += bytes;
}

void kvmemd_gpu_reap(struct kvmemd *d)
{
	struct kvmemd_gpu *g = &d->gpu;
	struct kvmemd_gpu_hold **pp = &g->holds, *h;

	while ((h = *pp)) {
		struct pollfd p = { .fd = h->pidfd, .events = POLLIN };

		if (poll(&p, 1, 0) != 1) {
			pp = &h->next;
			continue;
		}
		*pp = h->next;
		g->held -= h->bytes;
		kvmemd_gpu_release(d, h->uid, h->bytes);
		close(h->pidfd);
		free(h);
	}
}
