/* SPDX-License-Identifier: MIT */
/*
 * store.c - the backing store: header, allocator, buffers and I/O engines
 *
 * Open reads unit 0 and decides: a kvmem store of the configured geometry
 * is kept, an all-zero unit is formatted, anything else is refused unless
 * store.reformat is set. The engine is set up next, and only then is the
 * header written back (generation + 1, fdatasync), so an open that fails
 * leaves the header as it was (and removes a file it created).
 *
 * The data units are tracked by a bitmap in memory, allocated next-fit
 * from a rover so that consecutive pages land in consecutive units.
 *
 * I/O goes through one of two engines behind an ops table:
 *
 *   io_uring  fixed file and fixed buffers, so the kernel neither looks up
 *             the fd nor pins the pages per I/O; completions signal an
 *             eventfd registered with the ring
 *   threads   pread/pwrite on a small pool, for kernels or sandboxes
 *             without io_uring; workers post completions to a list and
 *             signal the same eventfd
 *
 * Either way the event loop sees one eventfd, kvmemd_store_io_fd(), and
 * only kvmemd_store_io_reap() runs done() callbacks, on the loop's thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <linux/fs.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kvmem/crc32c.h"
#include "kvmemd.h"
#include "store.h"

/*
 * The header is written as the host lays out the struct, which is the
 * little-endian layout store.h promises only because kvmemd is built for
 * x86-64 alone.
 */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "the store header is written in host byte order");
_Static_assert(offsetof(struct kvmemd_store_hdr, uuid) == 32 &&
		       offsetof(struct kvmemd_store_hdr, formatted) == 64 &&
		       offsetof(struct kvmemd_store_hdr, crc) == 124,
	       "the store header's layout");

/* The most one read(2) or write(2) moves (MAX_RW_COUNT); res is an int. */
#define IO_BYTES_MAX 0x7ffff000u
#define QUEUE_DEPTH_MAX 1024u
#define THREADS_MAX 8u
#define NO_RUN UINT64_MAX

struct kvmemd_store;

/*
 * An I/O engine. Every hook runs on the event loop's thread.
 *
 * init:   set up; on failure undo what it did, say why in @why
 * submit: take every io on st->queued (or leave some there and see to it
 *         that reap comes back for them); never blocks
 * reap:   store_complete() each finished io; never blocks
 * exit:   tear down; nothing is in flight any more
 */
struct store_engine {
	const char *name;
	int (*init)(struct kvmemd_store *st, char *why, size_t whylen);
	void (*submit)(struct kvmemd_store *st);
	unsigned int (*reap)(struct kvmemd_store *st);
	void (*exit)(struct kvmemd_store *st);
};

struct uring_engine {
	struct io_uring ring;
	int resubmit; /* SQEs or ios the kernel did not take yet */
};

struct thread_engine {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct kvmemd_io *todo, **todo_tail; /* under lock */
	struct kvmemd_io *done, **done_tail; /* under lock */
	int stopping; /* under lock */
	unsigned int nthreads;
	pthread_t threads[THREADS_MAX];
};

struct kvmemd_store {
	char *path;
	int fd;
	/* Another open of the path, flock()ed: the lock goes with the
	 * process, while io_uring's hold on fd outlives it for a while. */
	int lock_fd;
	int efd; /* completions wait: both engines signal it */
	int is_file; /* a regular file, not a block device */
	uint64_t size, nunits;
	struct kvmemd_store_hdr hdr; /* as on disk after the open */
	uint32_t queue_depth, io_bytes;

	/* the allocator: a set bit is a used unit */
	uint64_t *map;
	uint64_t rover, used;
	int full; /* an allocation failed, nothing was freed since */

	/* the ios, one per buffer of io_bytes in one mapping */
	uint8_t *bufs;
	size_t bufs_len;
	struct kvmemd_io *ios;
	int *res; /* by buffer index: the threads engine's results */
	struct kvmemd_io *idle;
	struct kvmemd_io *queued, **queued_tail;
	/* refused by kvmemd_store_io_queue(); done(-EINVAL) at the next reap */
	struct kvmemd_io *refused, **refused_tail;
	uint32_t inflight; /* handed to the engine, done() not run yet */
	int closing; /* kvmemd_store_io_get() hands out nothing */

	const struct store_engine *eng;
	union {
		struct uring_engine uring;
		struct thread_engine thr;
	} e;

	uint64_t reads, writes, read_bytes, write_bytes;
	uint64_t read_errors, write_errors, enospc, short_ios;
};

static off_t unit_offset(uint64_t unit)
{
	return (off_t)((1 + unit) * KVMEMD_STORE_UNIT);
}

/* ---- completions ------------------------------------------------------ */

/*
 * Count @io's result, run its done() and put it back. Only I/Os that moved
 * all of @len count as reads or writes, and their bytes as bytes.
 */
static void store_complete(struct kvmemd_store *st, struct kvmemd_io *io,
			   int res)
{
	const int ok = res >= 0 && (uint32_t)res == io->len;

	if (io->op == KVMEMD_IO_READ) {
		st->reads += ok;
		st->read_bytes += ok ? io->len : 0;
		st->read_errors += !ok;
	} else {
		st->writes += ok;
		st->write_bytes += ok ? io->len : 0;
		st->write_errors += !ok;
	}
	st->enospc += res == -ENOSPC;
	st->short_ios += res >= 0 && !ok;
	io->done(io, res);
	io->next = st->idle;
	st->idle = io;
}

/* Wake the loop: reap has work that no engine will signal. */
static void store_kick(struct kvmemd_store *st)
{
	if (eventfd_write(st->efd, 1))
		kvmemd_log_err(LOG_ERR, -errno, "store %s: eventfd write",
			       st->path);
}

/* ---- io_uring ----------------------------------------------------------- */

static int uring_init(struct kvmemd_store *st, char *why, size_t whylen)
{
	struct io_uring *ring = &st->e.uring.ring;
	struct iovec *iov;
	uint32_t i;
	int ret;

	ret = io_uring_queue_init(st->queue_depth, ring, 0);
	if (ret) {
		snprintf(why, whylen, "io_uring_queue_init(%u): %s",
			 st->queue_depth, strerror(-ret));
		return ret;
	}
	ret = io_uring_register_files(ring, &st->fd, 1);
	if (ret) {
		snprintf(why, whylen, "io_uring_register_files: %s",
			 strerror(-ret));
		goto err_ring;
	}
	iov = calloc(st->queue_depth, sizeof(*iov));
	if (!iov) {
		ret = -ENOMEM;
		snprintf(why, whylen, "io_uring buffer table: %s",
			 strerror(-ret));
		goto err_ring;
	}
	for (i = 0; i < st->queue_depth; i++) {
		iov[i].iov_base = st->ios[i].buf;
		iov[i].iov_len = st->io_bytes;
	}
	ret = io_uring_register_buffers(ring, iov, st->queue_depth);
	free(iov);
	if (ret) {
		/* The pinned pages count against RLIMIT_MEMLOCK. */
		snprintf(why, whylen,
			 "io_uring_register_buffers(%u x %u bytes): %s%s",
			 st->queue_depth, st->io_bytes, strerror(-ret),
			 ret == -ENOMEM ? " (is RLIMIT_MEMLOCK too low?)" : "");
		goto err_ring;
	}
	ret = io_uring_register_eventfd(ring, st->efd);
	if (ret) {
		snprintf(why, whylen, "io_uring_register_eventfd: %s",
			 strerror(-ret));
		goto err_ring;
	}
	return 0;

err_ring:
	/* Drops whatever was registered as well. */
	io_uring_queue_exit(ring);
	return ret;
}

static void uring_submit(struct kvmemd_store *st)
{
	struct uring_engine *u = &st->e.uring;
	struct io_uring_sqe *sqe;
	struct kvmemd_io *io;
	int ret;

	while ((io = st->queued)) {
		sqe = io_uring_get_sqe(&u->ring);
		if (!sqe) {
			/* The SQ ring has queue_depth entries or more, so it
			 * is full only of SQEs an earlier submit left behind:
			 * push them, and see below if that failed. */
			io_uring_submit(&u->ring);
			sqe = io_uring_get_sqe(&u->ring);
			if (!sqe)
				break;
		}
		if (io->op == KVMEMD_IO_READ)
			io_uring_prep_read_fixed(sqe, 0, io->buf, io->len,
						 (__u64)unit_offset(io->unit),
						 (int)io->index);
		else
			io_uring_prep_write_fixed(sqe, 0, io->buf, io->len,
						  (__u64)unit_offset(io->unit),
						  (int)io->index);
		io_uring_sqe_set_flags(sqe, IOSQE_FIXED_FILE);
		io_uring_sqe_set_data(sqe, io);
		st->queued = io->next;
		st->inflight++;
	}
	if (!st->queued)
		st->queued_tail = &st->queued;

	ret = io_uring_submit(&u->ring);
	if (ret >= 0 && !io_uring_sq_ready(&u->ring) && !st->queued)
		return;
	/*
	 * The kernel took fewer than were ready: it had no memory for the
	 * requests (-EAGAIN). What it did not take stays in the SQ ring or
	 * on the queue; the loop comes back through reap, which tries again.
	 */
	if (!u->resubmit)
		kvmemd_log_err(LOG_WARNING, ret < 0 ? ret : -EAGAIN,
			       "store %s: io_uring did not take every I/O; "
			       "retrying",
			       st->path);
	u->resubmit = 1;
	store_kick(st);
}

static unsigned int uring_reap(struct kvmemd_store *st)
{
	struct uring_engine *u = &st->e.uring;
	struct io_uring_cqe *cqe;
	struct kvmemd_io *io;
	unsigned int n = 0;
	int res;

	if (u->resubmit) {
		u->resubmit = 0;
		uring_submit(st);
	}
	while (!io_uring_peek_cqe(&u->ring, &cqe)) {
		io = io_uring_cqe_get_data(cqe);
		res = cqe->res;
		/* The CQE is given back before done() can queue more. */
		io_uring_cq_advance(&u->ring, 1);
		st->inflight--;
		store_complete(st, io, res);
		n++;
	}
	return n;
}

static void uring_exit(struct kvmemd_store *st)
{
	/* Unregisters the file, the buffers and the eventfd too. */
	io_uring_queue_exit(&st->e.uring.ring);
}

static const struct store_engine uring_engine_ops = {
	.name = "io_uring",
	.init = uring_init,
	.submit = uring_submit,
	.reap = uring_reap,
	.exit = uring_exit,
};

/* ---- threads ------------------------------------------------------------ */

/* All of @io, looping over partial transfers. Return: bytes, or -errno. */
static int thr_rw(int fd, const struct kvmemd_io *io)
{
	const off_t off = unit_offset(io->unit);
	uint32_t done = 0;
	ssize_t n;

	while (done < io->len) {
		if (io->op == KVMEMD_IO_READ)
			n = pread(fd, io->buf + done, io->len - done,
				  off + done);
		else
			n = pwrite(fd, io->buf + done, io->len - done,
				   off + done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (!n)
			break; /* end of file: a short read */
		done += (uint32_t)n;
	}
	return (int)done;
}

static void *thr_main(void *arg)
{
	struct kvmemd_store *st = arg;
	struct thread_engine *t = &st->e.thr;
	struct kvmemd_io *io;

	pthread_mutex_lock(&t->lock);
	for (;;) {
		while (!t->todo && !t->stopping)
			pthread_cond_wait(&t->cond, &t->lock);
		if (!t->todo)
			break;
		io = t->todo;
		t->todo = io->next;
		if (!t->todo)
			t->todo_tail = &t->todo;
		pthread_mutex_unlock(&t->lock);

		/* The loop reads it after taking the done list, under lock */
		st->res[io->index] = thr_rw(st->fd, io);

		pthread_mutex_lock(&t->lock);
		io->next = NULL;
		*t->done_tail = io;
		t->done_tail = &io->next;
		store_kick(st);
	}
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

static void thr_stop(struct thread_engine *t)
{
	unsigned int i;

	pthread_mutex_lock(&t->lock);
	t->stopping = 1;
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
	for (i = 0; i < t->nthreads; i++)
		pthread_join(t->threads[i], NULL);
	pthread_mutex_destroy(&t->lock);
	pthread_cond_destroy(&t->cond);
}

static int thr_init(struct kvmemd_store *st, char *why, size_t whylen)
{
	struct thread_engine *t = &st->e.thr;
	unsigned int i, n = st->queue_depth < THREADS_MAX ? st->queue_depth
							  : THREADS_MAX;
	sigset_t all, old;
	int ret = 0;

	memset(t, 0, sizeof(*t));
	pthread_mutex_init(&t->lock, NULL);
	pthread_cond_init(&t->cond, NULL);
	t->todo_tail = &t->todo;
	t->done_tail = &t->done;
	/* Signals are the event loop's: a handler run on an I/O thread
	 * would not interrupt the loop's epoll_pwait(). */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (i = 0; i < n && !ret; i++) {
		ret = -pthread_create(&t->threads[i], NULL, thr_main, st);
		if (!ret)
			t->nthreads++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret) {
		snprintf(why, whylen, "I/O thread %u of %u: %s", i, n,
			 strerror(-ret));
		thr_stop(t);
	}
	return ret;
}

static void thr_submit(struct kvmemd_store *st)
{
	struct thread_engine *t = &st->e.thr;
	struct kvmemd_io *io;

	if (!st->queued)
		return;
	for (io = st->queued; io; io = io->next)
		st->inflight++;
	pthread_mutex_lock(&t->lock);
	*t->todo_tail = st->queued;
	t->todo_tail = st->queued_tail;
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
	st->queued = NULL;
	st->queued_tail = &st->queued;
}

static unsigned int thr_reap(struct kvmemd_store *st)
{
	struct thread_engine *t = &st->e.thr;
	struct kvmemd_io *io, *next;
	unsigned int n = 0;

	pthread_mutex_lock(&t->lock);
	io = t->done;
	t->done = NULL;
	t->done_tail = &t->done;
	pthread_mutex_unlock(&t->lock);
	for (; io; io = next) {
		next = io->next;
		st->inflight--;
		store_complete(st, io, st->res[io->index]);
		n++;
	}
	return n;
}

static void thr_exit(struct kvmemd_store *st)
{
	thr_stop(&st->e.thr);
}

static const struct store_engine thread_engine_ops = {
	.name = "threads",
	.init = thr_init,
	.submit = thr_submit,
	.reap = thr_reap,
	.exit = thr_exit,
};

static int engine_init(struct kvmemd_store *st, int engine, char *err,
		       size_t errlen)
{
	char why[256];
	int ret;

	if (engine != KVMEMD_ENGINE_THREADS) {
		ret = uring_init(st, why, sizeof(why));
		if (!ret) {
			st->eng = &uring_engine_ops;
			return 0;
		}
		if (engine == KVMEMD_ENGINE_URING) {
			snprintf(err, errlen,
				 "%s: store.engine is io_uring: %s", st->path,
				 why);
			return ret;
		}
		kvmemd_log(LOG_WARNING,
			   "store %s: no io_uring (%s); falling back to a "
			   "pread/pwrite thread pool",
			   st->path, why);
	}
	ret = thr_init(st, why, sizeof(why));
	if (ret) {
		snprintf(err, errlen, "%s: %s", st->path, why);
		return ret;
	}
	st->eng = &thread_engine_ops;
	return 0;
}

/* ---- the header --------------------------------------------------------- */

/*
 * The geometry digest: 64-bit FNV-1a over the 24 bytes of version, unit,
 * size and nunits as they lie in the header (little-endian, in that
 * order). The CRC says the header is intact; the digest lets a reader
 * that trusts only the geometry compare two stores with one number.
 */
static uint64_t hdr_digest(const struct kvmemd_store_hdr *h)
{
	const uint8_t *parts[] = { (const uint8_t *)&h->version,
				   (const uint8_t *)&h->unit,
				   (const uint8_t *)&h->size,
				   (const uint8_t *)&h->nunits };
	const size_t lens[] = { sizeof(h->version), sizeof(h->unit),
				sizeof(h->size), sizeof(h->nunits) };
	uint64_t x = 0xcbf29ce484222325ull;
	size_t i, j;

	for (i = 0; i < ARRAY_SIZE(parts); i++)
		for (j = 0; j < lens[i]; j++) {
			x ^= parts[i][j];
			x *= 0x100000001b3ull;
		}
	return x;
}

static uint32_t hdr_crc(const struct kvmemd_store_hdr *h)
{
	return kvmem_crc32c(0, h, offsetof(struct kvmemd_store_hdr, crc));
}

/*
 * Why the header in @h is not the one for @size bytes, into @what; or 0
 * when it is. @what ends where the caller adds the advice.
 */
static int hdr_mismatch(const struct kvmemd_store_hdr *h, uint64_t size,
			char *what, size_t len)
{
	const uint64_t nunits = size / KVMEMD_STORE_UNIT - 1;

	if (memcmp(h->magic, KVMEMD_STORE_MAGIC, sizeof(h->magic)))
		snprintf(what, len,
			 "holds something that is not a kvmem store: no %s "
			 "magic at offset 0",
			 KVMEMD_STORE_MAGIC);
	else if (h->version != KVMEMD_STORE_VERSION)
		snprintf(what, len,
			 "holds a store of version %" PRIu32
			 ", this kvmemd knows version %d",
			 h->version, KVMEMD_STORE_VERSION);
	else if (hdr_crc(h) != h->crc)
		snprintf(what, len,
			 "holds a store whose header is corrupt (CRC-32C "
			 "0x%08" PRIx32 ", computed 0x%08" PRIx32 ")",
			 h->crc, hdr_crc(h));
	else if (h->unit != KVMEMD_STORE_UNIT)
		snprintf(what, len,
			 "holds a store of %" PRIu32 "-byte units, this kvmemd "
			 "uses %u",
			 h->unit, KVMEMD_STORE_UNIT);
	else if (hdr_digest(h) != h->digest)
		snprintf(what, len,
			 "holds a store whose geometry digest is wrong "
			 "(0x%016" PRIx64 ", computed 0x%016" PRIx64 ")",
			 h->digest, hdr_digest(h));
	else if (h->size != size)
		snprintf(what, len,
			 "holds a store of %" PRIu64 " bytes, the config says "
			 "%" PRIu64,
			 h->size, size);
	else if (h->nunits != nunits)
		snprintf(what, len,
			 "holds a store of %" PRIu64 " data units, %" PRIu64
			 " bytes make %" PRIu64,
			 h->nunits, size, nunits);

	else
		return 0;
	return 1;
}

static int store_format(struct kvmemd_store *st, char *err, size_t errlen)
{
	struct kvmemd_store_hdr *h = &st->hdr;
	ssize_t n;
	int ret;

	memset(h, 0, sizeof(*h));
	memcpy(h->magic, KVMEMD_STORE_MAGIC, sizeof(h->magic));
	h->version = KVMEMD_STORE_VERSION;
	h->unit = KVMEMD_STORE_UNIT;
	h->size = st->size;
	h->nunits = st->nunits;
	do
		n = getrandom(h->uuid, sizeof(h->uuid), 0);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(h->uuid)) {
		ret = n < 0 ? -errno : -EIO;
		snprintf(err, errlen, "%s: getrandom for the store's uuid: %s",
			 st->path, strerror(-ret));
		return ret;
	}
	/* An RFC 9562 version 4 (random) UUID. */
	h->uuid[6] = (uint8_t)((h->uuid[6] & 0x0f) | 0x40);
	h->uuid[8] = (uint8_t)((h->uuid[8] & 0x3f) | 0x80);
	h->digest = hdr_digest(h);
	h->formatted = (uint64_t)time(NULL);
	return 0;
}

int kvmemd_store_judge(const uint8_t *unit0, uint64_t size, int is_file,
		       int reformat, struct kvmemd_store_hdr *hdr, char *why,
		       size_t len)
{
	char what[256];
	size_t i;

	*why = 0;
	for (i = 0; i < KVMEMD_STORE_UNIT && !unit0[i]; i++)
		;
	if (i == KVMEMD_STORE_UNIT) {
		/* Zeroes at the start of a device do not make it unused
		 * (btrfs, ZFS, md keep theirs further in): only a file is
		 * taken as it is. */
		if (is_file || reformat)
			return KVMEMD_STORE_FORMAT;
		snprintf(why, len,
			 "holds no kvmem store (set store.reformat = yes to "
			 "format the device, losing what it holds)");
		return -EEXIST;
	}
	memcpy(hdr, unit0, sizeof(*hdr));
	if (!hdr_mismatch(hdr, size, what, sizeof(what)))
		return KVMEMD_STORE_KEEP;
	if (reformat) {
		snprintf(why, len, "%s", what);
		return KVMEMD_STORE_FORMAT;
	}
	snprintf(why, len,
		 "%s (set store.reformat = yes to format it, losing what it "
		 "holds; kvmemd keeps nothing there across restarts)",
		 what);
	return -EEXIST;
}

/*
 * Read unit 0 and keep, format or refuse, into st->hdr (not written yet).
 * @fmt: set when the store is to be formatted; @dry: only say so (kvmemd
 * -n), formatting nothing.
 */
static int store_read_hdr(struct kvmemd_store *st, int reformat, int dry,
			  int *fmt, char *err, size_t errlen)
{
	char why[384];
	uint8_t *buf;
	ssize_t n;
	int ret;

	ret = -posix_memalign((void **)&buf, KVMEMD_STORE_UNIT,
			      KVMEMD_STORE_UNIT);
	if (ret) {
		snprintf(err, errlen, "%s: header buffer: %s", st->path,
			 strerror(-ret));
		return ret;
	}
	memset(buf, 0, KVMEMD_STORE_UNIT);
	/* A file shorter than a unit reads short: the rest stays zero. */
	do
		n = pread(st->fd, buf, KVMEMD_STORE_UNIT, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		ret = -errno;
		snprintf(err, errlen, "%s: reading the header: %s", st->path,
			 strerror(errno));
		free(buf);
		return ret;
	}
	ret = kvmemd_store_judge(buf, st->size, st->is_file, reformat, &st->hdr,
				 why, sizeof(why));
	free(buf);
	if (ret < 0) {
		snprintf(err, errlen, "%s: %s", st->path, why);
		return ret;
	}
	*fmt = ret == KVMEMD_STORE_FORMAT;
	if (!*fmt || dry)
		return 0;
	if (*why)
		kvmemd_log(LOG_NOTICE,
			   "store %s: %s; formatting (store.reformat)",
			   st->path, why);
	return store_format(st, err, errlen);
}

/* st->hdr with generation + 1 to unit 0, on stable storage. */
static int store_write_hdr(struct kvmemd_store *st, char *err, size_t errlen)
{
	uint8_t *buf;
	ssize_t n;
	int ret;

	ret = -posix_memalign((void **)&buf, KVMEMD_STORE_UNIT,
			      KVMEMD_STORE_UNIT);
	if (ret) {
		snprintf(err, errlen, "%s: header buffer: %s", st->path,
			 strerror(-ret));
		return ret;
	}
	st->hdr.generation++;
	st->hdr.crc = hdr_crc(&st->hdr);
	memset(buf, 0, KVMEMD_STORE_UNIT);
	memcpy(buf, &st->hdr, sizeof(st->hdr));
	do
		n = pwrite(st->fd, buf, KVMEMD_STORE_UNIT, 0);
	while (n < 0 && errno == EINTR);
	free(buf);
	if (n != KVMEMD_STORE_UNIT) {
		ret = n < 0 ? -errno : -EIO;
		snprintf(err, errlen, "%s: writing the header: %s", st->path,
			 n < 0 ? strerror(errno) : "short write");
		return ret;
	}
	if (fdatasync(st->fd)) {
		ret = -errno;
		snprintf(err, errlen, "%s: fdatasync after the header: %s",
			 st->path, strerror(errno));
		return ret;
	}
	return 0;
}

/* ---- opening ------------------------------------------------------------ */

static int check_cfg(const struct kvmemd_store_cfg *cfg, char *err,
		     size_t errlen)
{
	if (!cfg->path || !cfg->path[0])
		snprintf(err, errlen, "store: no path");
	else if (!cfg->queue_depth || cfg->queue_depth > QUEUE_DEPTH_MAX)
		snprintf(err, errlen,
			 "%s: queue depth %" PRIu32 " is not in 1..%u",
			 cfg->path, cfg->queue_depth, QUEUE_DEPTH_MAX);
	else if (!cfg->io_bytes || cfg->io_bytes % KVMEMD_STORE_UNIT ||
		 cfg->io_bytes > IO_BYTES_MAX)
		snprintf(err, errlen,
			 "%s: I/O size %" PRIu32 " is not a multiple of %u "
			 "bytes between %u and %u",
			 cfg->path, cfg->io_bytes, KVMEMD_STORE_UNIT,
			 KVMEMD_STORE_UNIT, IO_BYTES_MAX);
	else if (cfg->engine != KVMEMD_ENGINE_AUTO &&
		 cfg->engine != KVMEMD_ENGINE_URING &&
		 cfg->engine != KVMEMD_ENGINE_THREADS)
		snprintf(err, errlen, "%s: unknown I/O engine %d", cfg->path,
			 cfg->engine);
	else
		return 0;
	return -EINVAL;
}

/* Remove the file a failed open made. */
static void store_unlink(const struct kvmemd_store *st)
{
	if (unlink(st->path))
		kvmemd_log_err(LOG_WARNING, -errno,
			       "store %s: removing the file made for it",
			       st->path);
}

/*
 * Open st->path for direct I/O, take it for this daemon alone, and find
 * st->size. @created: set when the file did not exist, so that a failed
 * open removes it again. @dry (kvmemd -n): open it to read, and a file
 * that does not exist yet is checked as the one that would be made.
 */
static int store_open_fd(struct kvmemd_store *st,
			 const struct kvmemd_store_cfg *cfg, int *created,
			 int dry, char *err, size_t errlen)
{
	const int flags =
		dry ? O_RDONLY | O_CLOEXEC : O_RDWR | O_DIRECT | O_CLOEXEC;
	uint64_t devsize;
	struct stat sb = { .st_mode = S_IFREG };
	int ret;

	st->fd = open(st->path, flags);
	ret = st->fd < 0 ? -errno : 0;
	if (ret == -ENOENT && dry) {
		ret = 0;
	} else if (ret == -ENOENT) {
		/* O_EXCL: a failure later removes only what this made. */
		st->fd = open(st->path, flags | O_CREAT | O_EXCL, 0600);
		ret = st->fd < 0 ? -errno : 0;
		*created = !ret;
		/* O_DIRECT is refused after the file was made. */
		if (ret == -EINVAL)
			store_unlink(st);
	}
	if (ret) {
		if (ret == -EINVAL)
			snprintf(err, errlen,
				 "%s: the file system does not support "
				 "O_DIRECT, which the store needs (pages must "
				 "not go through the page cache)",
				 st->path);
		else
			snprintf(err, errlen, "%s: %s", st->path,
				 strerror(-ret));
		return ret;
	}
	/* Another daemon's store, which it would format or write over. */
	if (!dry)
		st->lock_fd = open(st->path, O_RDONLY | O_CLOEXEC);
	if (!dry &&
	    (st->lock_fd < 0 || flock(st->lock_fd, LOCK_EX | LOCK_NB))) {
		ret = errno == EWOULDBLOCK ? -EBUSY : -errno;
		snprintf(err, errlen, "%s: %s", st->path,
			 ret == -EBUSY ? "in use by another kvmemd (it holds "
					 "the lock on the store)"
				       : strerror(-ret));
		return ret;
	}
	if (st->fd >= 0 && fstat(st->fd, &sb)) {
		ret = -errno;
		snprintf(err, errlen, "%s: fstat: %s", st->path,
			 strerror(errno));
		return ret;
	}
	if (S_ISREG(sb.st_mode)) {
		st->is_file = 1;
		st->size = cfg->size;
		if (!st->size) {
			snprintf(err, errlen,
				 "%s: a regular file needs a store size "
				 "(store.size)",
				 st->path);
			return -EINVAL;
		}
	} else if (S_ISBLK(sb.st_mode)) {
		if (ioctl(st->fd, BLKGETSIZE64, &devsize)) {
			ret = -errno;
			snprintf(err, errlen, "%s: BLKGETSIZE64: %s", st->path,
				 strerror(errno));
			return ret;
		}
		if (cfg->size > devsize) {
			snprintf(err, errlen,
				 "%s: the device has %" PRIu64 " bytes, the "
				 "config says %" PRIu64,
				 st->path, devsize, cfg->size);
			return -EINVAL;
		}
		st->size = cfg->size ? cfg->size : devsize;
	} else {
		snprintf(err, errlen,
			 "%s: neither a regular file nor a block device",
			 st->path);
		return -EINVAL;
	}
	if (st->size < 2 * KVMEMD_STORE_UNIT) {
		snprintf(err, errlen,
			 "%s: %" PRIu64 " bytes are too few for a store: it "
			 "needs %u, a header unit and a data unit",
			 st->path, st->size, 2 * KVMEMD_STORE_UNIT);
		return -EINVAL;
	}
	st->nunits = st->size / KVMEMD_STORE_UNIT - 1;
	return 0;
}

/* Give a regular file its size; a no-op where it has the blocks already. */
static int store_allocate(struct kvmemd_store *st, char *err, size_t errlen)
{
	struct stat sb;
	int ret;

	if (!fallocate(st->fd, 0, 0, (off_t)st->size))
		return 0;
	if (errno != EOPNOTSUPP) {
		ret = -errno;
		snprintf(err, errlen, "%s: fallocate of %" PRIu64 " bytes: %s",
			 st->path, st->size, strerror(errno));
		return ret;
	}
	/* Sparse then: the blocks are found when first written. */
	if (fstat(st->fd, &sb) || ((uint64_t)sb.st_size < st->size &&
				   ftruncate(st->fd, (off_t)st->size))) {
		ret = -errno;
		snprintf(err, errlen, "%s: growing to %" PRIu64 " bytes: %s",
			 st->path, st->size, strerror(errno));
		return ret;
	}
	return 0;
}

/* The bitmap, the buffers and the ios, all idle. */
static int store_io_init(struct kvmemd_store *st, char *err, size_t errlen)
{
	const uint64_t words = (st->nunits + 63) / 64;
	uint32_t i;
	void *p;
	int ret;

	st->map = calloc(words, sizeof(*st->map));
	st->ios = calloc(st->queue_depth, sizeof(*st->ios));
	st->res = calloc(st->queue_depth, sizeof(*st->res));
	if (!st->map || !st->ios || !st->res) {
		snprintf(err, errlen,
			 "%s: no memory for the allocator of %" PRIu64 " units",
			 st->path, st->nunits);
		return -ENOMEM;
	}
	/* Anonymous pages: aligned to the page, so to the unit. */
	st->bufs_len = (size_t)st->queue_depth * st->io_bytes;
	p = mmap(NULL, st->bufs_len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		ret = -errno;
		snprintf(err, errlen,
			 "%s: %" PRIu32 " I/O buffers of %" PRIu32 " bytes: %s",
			 st->path, st->queue_depth, st->io_bytes,
			 strerror(-ret));
		return ret;
	}
	st->bufs = p;
	for (i = st->queue_depth; i-- > 0;) {
		st->ios[i].buf = st->bufs + (size_t)i * st->io_bytes;
		st->ios[i].index = i;
		st->ios[i].next = st->idle;
		st->idle = &st->ios[i];
	}
	st->queued_tail = &st->queued;
	st->refused_tail = &st->refused;
	st->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (st->efd < 0) {
		ret = -errno;
		snprintf(err, errlen, "%s: eventfd: %s", st->path,
			 strerror(-ret));
		return ret;
	}
	return 0;
}

/* Free what store_open_fd() and store_io_init() got; the engine is gone. */
static void store_free(struct kvmemd_store *st)
{
	if (st->efd >= 0)
		close(st->efd);
	if (st->bufs)
		munmap(st->bufs, st->bufs_len);
	free(st->res);
	free(st->ios);
	free(st->map);
	if (st->fd >= 0)
		close(st->fd);
	if (st->lock_fd >= 0)
		close(st->lock_fd);
	free(st->path);
	free(st);
}

static void uuid_str(const uint8_t *u, char *s)
{
	sprintf(s,
		"%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
		"%02x%02x%02x%02x%02x%02x",
		u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9],
		u[10], u[11], u[12], u[13], u[14], u[15]);
}

int kvmemd_store_open(const struct kvmemd_store_cfg *cfg,
		      struct kvmemd_store **out, char *err, size_t errlen)
{
	struct kvmemd_store *st;
	int ret, created = 0, fmt = 0;
	char uuid[37];

	ret = check_cfg(cfg, err, errlen);
	if (ret)
		return ret;
	st = calloc(1, sizeof(*st));
	if (st)
		st->path = strdup(cfg->path);
	if (!st || !st->path) {
		free(st);
		snprintf(err, errlen, "%s: no memory", cfg->path);
		return -ENOMEM;
	}
	st->fd = -1;
	st->lock_fd = -1;
	st->efd = -1;
	st->queue_depth = cfg->queue_depth;
	st->io_bytes = cfg->io_bytes;

	ret = store_open_fd(st, cfg, &created, 0, err, errlen);
	if (!ret)
		ret = store_read_hdr(st, cfg->reformat, 0, &fmt, err, errlen);
	if (!ret && st->is_file)
		ret = store_allocate(st, err, errlen);
	if (!ret)
		ret = store_io_init(st, err, errlen);
	if (!ret)
		ret = engine_init(st, cfg->engine, err, errlen);
	if (ret)
		goto err_free;
	/* Last, so that a start that failed above wrote nothing. */
	ret = store_write_hdr(st, err, errlen);
	if (ret)
		goto err_engine;

	uuid_str(st->hdr.uuid, uuid);
	kvmemd_log(LOG_INFO,
		   "store %s: %s%" PRIu64 " units of %u bytes, uuid %s, "
		   "generation %" PRIu64 ", engine %s, %" PRIu32
		   " I/Os of %" PRIu32 " bytes",
		   st->path, fmt ? "formatted, " : "", st->nunits,
		   KVMEMD_STORE_UNIT, uuid, st->hdr.generation, st->eng->name,
		   st->queue_depth, st->io_bytes);
	*out = st;
	return 0;

err_engine:
	st->eng->exit(st);
err_free:
	if (created)
		store_unlink(st);
	store_free(st);
	return ret;
}

int kvmemd_store_check(const struct kvmemd_store_cfg *cfg, char *err,
		       size_t errlen)
{
	struct kvmemd_store st = { .fd = -1, .lock_fd = -1, .efd = -1 };
	int ret, created = 0, fmt = 0;

	ret = check_cfg(cfg, err, errlen);
	if (ret)
		return ret;
	st.path = (char *)cfg->path;
	ret = store_open_fd(&st, cfg, &created, 1, err, errlen);
	if (!ret && st.fd >= 0)
		ret = store_read_hdr(&st, cfg->reformat, 1, &fmt, err, errlen);
	if (st.fd >= 0)
		close(st.fd);
	return ret;
}

void kvmemd_store_close(struct kvmemd_store *st)
{
	struct pollfd pfd;

	if (!st)
		return;
	/* done() may queue what it held, but starts nothing new. */
	st->closing = 1;
	kvmemd_store_io_submit(st);
	while (st->inflight || st->queued || st->refused) {
		pfd.fd = st->efd;
		pfd.events = POLLIN;
		if (poll(&pfd, 1, -1) < 0 && errno != EINTR) {
			/* The engine's exit still waits for the I/O (the
			 * threads are joined, the ring drains). */
			kvmemd_log_err(LOG_ERR, -errno,
				       "store %s: waiting for %" PRIu32 " I/Os",
				       st->path, st->inflight);
			break;
		}
		kvmemd_store_io_reap(st);
		kvmemd_store_io_submit(st);
	}
	st->eng->exit(st);
	store_free(st);
}

/* ---- the allocator ------------------------------------------------------ */

/* The first bit in [@i, @end) that is @set, or @end. */
static uint64_t find_bit(const uint64_t *map, uint64_t i, uint64_t end, int set)
{
	uint64_t w, at;

	while (i < end) {
		w = set ? map[i / 64] : ~map[i / 64];
		w &= ~0ull << (i % 64);
		if (w) {
			at = (i & ~63ull) + (uint64_t)__builtin_ctzll(w);
			return at < end ? at : end;
		}
		i = (i | 63) + 1;
	}
	return end;
}

/* The first start in [@from, @to) of @units free units, or NO_RUN. The
 * caller keeps @to <= nunits - units + 1. */
static uint64_t find_run(const struct kvmemd_store *st, uint64_t from,
			 uint64_t to, uint32_t units)
{
	uint64_t s = from, used;

	for (;;) {
		s = find_bit(st->map, s, to, 0);
		if (s == to)
			return NO_RUN;
		used = find_bit(st->map, s, s + units, 1);
		if (used == s + units)
			return s;
		s = used + 1;
	}
}

int kvmemd_store_alloc(struct kvmemd_store *st, uint32_t units, uint64_t *unit)
{
	uint64_t s, last, i;

	if (!units)
		return -EINVAL;
	if (units > st->nunits - st->used) {
		st->full = 1;
		return -ENOSPC;
	}
	/* Next fit: from the rover to the end, then from the start. */
	last = st->nunits - units;
	s = st->rover <= last ? find_run(st, st->rover, last + 1, units)
			      : NO_RUN;
	if (s == NO_RUN)
		s = find_run(st, 0, st->rover <= last ? st->rover : last + 1,
			     units);
	if (s == NO_RUN) {
		st->full = 1;
		return -ENOSPC;
	}
	for (i = s; i < s + units; i++)
		st->map[i / 64] |= 1ull << (i % 64);
	st->used += units;
	st->rover = s + units < st->nunits ? s + units : 0;
	*unit = s;
	return 0;
}

int kvmemd_store_claim(struct kvmemd_store *st, uint64_t unit, uint32_t units)
{
	uint64_t i;

	if (!units || unit >= st->nunits || units > st->nunits - unit ||
	    find_bit(st->map, unit, unit + units, 1) != unit + units)
		return -EINVAL;
	for (i = unit; i < unit + units; i++)
		st->map[i / 64] |= 1ull << (i % 64);
	st->used += units;
	return 0;
}

void kvmemd_store_free(struct kvmemd_store *st, uint64_t unit, uint32_t units)
{
	uint64_t i;

	/* A caller's bug: freeing nothing or what is not in use would make
	 * the counts lie and hand a live unit out twice. */
	if (!units || unit >= st->nunits || units > st->nunits - unit ||
	    find_bit(st->map, unit, unit + units, 0) != unit + units) {
		kvmemd_log(LOG_ERR,
			   "store %s: freeing units %" PRIu64 "+%" PRIu32
			   " that are not all in use; ignored",
			   st->path, unit, units);
		return;
	}
	for (i = unit; i < unit + units; i++)
		st->map[i / 64] &= ~(1ull << (i % 64));
	st->used -= units;
	st->full = 0;
}

int kvmemd_store_full(const struct kvmemd_store *st)
{
	return st->full;
}

/* ---- I/O ---------------------------------------------------------------- */

int kvmemd_store_pio(struct kvmemd_store *st, int op, uint64_t unit, void *buf,
		     size_t len)
{
	const off_t off = unit_offset(unit);
	uint8_t *p = buf;
	size_t done = 0;
	ssize_t n;

	if (!len || len % KVMEMD_STORE_UNIT ||
	    (uintptr_t)buf % KVMEMD_STORE_UNIT || unit >= st->nunits ||
	    len / KVMEMD_STORE_UNIT > st->nunits - unit)
		return -EINVAL;
	while (done < len) {
		if (op == KVMEMD_IO_READ)
			n = pread(st->fd, p + done, len - done,
				  off + (off_t)done);
		else
			n = pwrite(st->fd, p + done, len - done,
				   off + (off_t)done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (!n)
			return -EIO;
		done += (size_t)n;
	}
	return 0;
}

int kvmemd_store_sync(struct kvmemd_store *st)
{
	return fdatasync(st->fd) ? -errno : 0;
}

struct kvmemd_io *kvmemd_store_io_get(struct kvmemd_store *st)
{
	struct kvmemd_io *io = st->idle;

	if (!io || st->closing)
		return NULL;
	st->idle = io->next;
	io->op = KVMEMD_IO_READ;
	io->unit = 0;
	io->len = 0;
	io->done = NULL;
	io->priv = NULL;
	io->next = NULL;
	return io;
}

void kvmemd_store_io_put(struct kvmemd_store *st, struct kvmemd_io *io)
{
	io->next = st->idle;
	st->idle = io;
}

void kvmemd_store_io_queue(struct kvmemd_store *st, struct kvmemd_io *io)
{
	io->next = NULL;
	/* An I/O outside the data units could hit the header, or what
	 * follows the store on a device: refused, as the caller's bug. */
	if ((io->op != KVMEMD_IO_READ && io->op != KVMEMD_IO_WRITE) ||
	    !io->len || io->len % KVMEMD_STORE_UNIT || io->len > st->io_bytes ||
	    io->unit >= st->nunits ||
	    io->len / KVMEMD_STORE_UNIT > st->nunits - io->unit) {
		kvmemd_log(LOG_ERR,
			   "store %s: I/O op %d of %" PRIu32 " bytes at unit "
			   "%" PRIu64 " is out of bounds; failed",
			   st->path, (int)io->op, io->len, io->unit);
		*st->refused_tail = io;
		st->refused_tail = &io->next;
		store_kick(st);
		return;
	}
	*st->queued_tail = io;
	st->queued_tail = &io->next;
}

void kvmemd_store_io_submit(struct kvmemd_store *st)
{
	if (st->queued)
		st->eng->submit(st);
}

int kvmemd_store_io_fd(const struct kvmemd_store *st)
{
	return st->efd;
}

unsigned int kvmemd_store_io_reap(struct kvmemd_store *st)
{
	struct kvmemd_io *io, *next;
	unsigned int n = 0;
	eventfd_t v;

	/* Drained first: what completes after this signals it anew. */
	if (eventfd_read(st->efd, &v) && errno != EAGAIN)
		kvmemd_log_err(LOG_ERR, -errno, "store %s: eventfd read",
			       st->path);
	io = st->refused;
	st->refused = NULL;
	st->refused_tail = &st->refused;
	for (; io; io = next) {
		next = io->next;
		store_complete(st, io, -EINVAL);
		n++;
	}
	return n + st->eng->reap(st);
}

void kvmemd_store_stats(const struct kvmemd_store *st,
			struct kvmemd_store_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->path = st->path;
	out->engine = st->eng->name;
	memcpy(out->uuid, st->hdr.uuid, sizeof(out->uuid));
	out->generation = st->hdr.generation;
	out->size = st->size;
	out->nunits = st->nunits;
	out->used_units = st->used;
	out->unit = st->hdr.unit;
	out->queue_depth = st->queue_depth;
	out->io_bytes = st->io_bytes;
	out->inflight = st->inflight;
	out->reads = st->reads;
	out->writes = st->writes;
	out->read_bytes = st->read_bytes;
	out->write_bytes = st->write_bytes;
	out->read_errors = st->read_errors;
	out->write_errors = st->write_errors;
	out->enospc = st->enospc;
	out->short_ios = st->short_ios;
}
