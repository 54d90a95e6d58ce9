/*
 * pool.c - the memory backends, one ops table each
 *
 * host: a shmem memfd per session, asking for transparent huge pages
 * (pool.hugepages), locked in RAM when the limits allow (pool.mlock). The
 * cuda and nvme backends come later; until then they are stubs.
 *
 * Not hugetlbfs: a client can punch a hole in its shared mapping
 * (MADV_REMOVE, FALLOC_FL_PUNCH_HOLE), which on hugetlbfs gives the
 * reservation back, and the daemon's next touch of that page dies of SIGBUS
 * when no huge page is free. shmem refaults a zero page instead.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvmemd.h"

static int host_map(struct kvmemd_region *r, size_t size, int huge)
{
	void *p;
	int fd, ret;

	fd = memfd_create("kvmem-session", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size))
		goto err_fd;
	/* The client can no longer shrink the file under the daemon's
	 * mapping (a SIGBUS here) nor grow it past its quota. */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
		goto err_fd;
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		goto err_fd;
	if (huge && madvise(p, size, MADV_HUGEPAGE)) {
		ret = -errno;
		munmap(p, size);
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
	close(fd);
	return ret;
}

static int host_create(const struct kvmemd_region_req *req,
		       struct kvmemd_region *r, char *why, size_t whylen)
{
	const size_t size = req->size;
	int ret = -EOPNOTSUPP;

	memset(r, 0, sizeof(*r));
	r->fd = -1;
	if (req->hugepages != KVMEMD_NO)
		ret = host_map(r, size, 1);
	if (ret && req->hugepages == KVMEMD_YES) {
		snprintf(why, whylen,
			 "no transparent huge pages for %zu bytes: %s", size,
			 strerror(-ret));
		return ret;
	}
	if (ret)
		ret = host_map(r, size, 0);
	if (ret) {
		snprintf(why, whylen, "memfd of %zu bytes: %s", size,
			 strerror(-ret));
		return ret;
	}
	if (req->mlock == KVMEMD_NO)
		return 0;
	if (!mlock(r->base, r->size)) {
		r->locked = 1;
		return 0;
	}
	ret = -errno;
	if (req->mlock == KVMEMD_YES) {
		snprintf(why, whylen, "mlock %zu bytes: %s", r->size,
			 strerror(-ret));
		munmap(r->base, r->size);
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
	if (r->base)
		munmap(r->base, r->size);
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
		.destroy = host_destroy,
	},
	[KVMEMD_POOL_CUDA] = {
		.name = "cuda",
		.create = stub_create,
		.destroy = stub_destroy,
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
