/* SPDX-License-Identifier: MIT */
/*
 * kvmemd.h - the daemon's internals
 *
 * One thread runs the event loop (server.c): the sockets, the doorbells,
 * every session's ring and every op. Worker threads (worker.c) do the work
 * that may block for long (setting up and freeing a session's memory,
 * re-encoding pages for the archive) and hand the result back to the
 * loop; they never touch a session the loop uses.
 *
 * Included by every file of the daemon (by some through session.h or
 * prefix.h) and by the daemon's tests.
 */
#ifndef KVMEMD_H
#define KVMEMD_H

#include <stdint.h>
#include <sys/types.h>
#include <syslog.h>
#include <time.h>

#include "kvmem/inject.h"
#include "kvmem/kvmem.h"
#include "kvmem/uapi.h"
#include "config.h"

struct jw;

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static inline uint64_t kvmemd_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- log.c ------------------------------------------------------------ */

void kvmemd_log_init(int level);
void kvmemd_log(int prio, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* kvmemd_log() with ": strerror(-err)" appended */
void kvmemd_log_err(int prio, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/*
 * kvmemd_log() with journal fields: @fields is "KEY=value\n" lines
 * (uppercase keys, values without newlines), sent with the message where
 * it goes to the journal and left out of a line on stderr.
 */
void kvmemd_log_fields(int prio, const char *fields, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* At most a burst per window; what is over is counted. */
struct kvmemd_ratelimit {
	uint64_t start, n, missed;
};

/*
 * kvmemd_ratelimit() - may one more go in this window
 * @missed: receives, when a new window opens, how many the last one
 *          refused (for the caller to report), else 0
 *
 * Return: 1 or 0.
 */
int kvmemd_ratelimit(struct kvmemd_ratelimit *rl, uint64_t now, uint64_t window,
		     uint64_t burst, uint64_t *missed);

/*
 * kvmemd_rl() - may one more of a kind of message (@what, plural: "session
 * drops") be logged: at most @burst per @window ns through @rl. The first
 * one held back in a window says so; how many were is said when the window
 * is over, with the next message of the kind or by kvmemd_rl_flush(),
 * which the event loop calls for the kinds it keeps.
 */
int kvmemd_rl(struct kvmemd_ratelimit *rl, uint64_t window, uint64_t burst,
	      const char *what);
void kvmemd_rl_flush(struct kvmemd_ratelimit *rl, uint64_t window,
		     const char *what);

/* Messages a client can make at will: 10 per 5 s of each kind. */
#define KVMEMD_RL_BURST 10
#define KVMEMD_RL_WINDOW_NS (5ull * 1000000000ull)

/* kvmemd_log() through kvmemd_rl(@rl, 5 s, 10, @what). */
void kvmemd_log_rl(struct kvmemd_ratelimit *rl, const char *what, int prio,
		   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* ---- pool.c: where a session's memory comes from --------------------- */

enum kvmemd_pool_kind {
	KVMEMD_POOL_HOST,
	KVMEMD_POOL_CUDA,
	KVMEMD_POOL_NVME,
	KVMEMD_POOL_NR,
};

struct kvmem_cuda;
struct kvmemd;

/* A mapping shared with one client. */
struct kvmemd_region {
	int fd; /* host: memfd, sealed against shrinking and growing; cuda:
		 * the descriptor that shares the device memory */
	uint8_t *base; /* host: the daemon's mapping */
	size_t size;
	uint8_t huge; /* transparent huge pages asked for */
	uint8_t locked; /* mlock()ed */
	uint8_t discard; /* destroy frees the pages, mapped or not */
	uint8_t pinned; /* host: registered with the driver of ->cu */
	uint64_t dev; /* cuda: the daemon's mapping, a device address */
	unsigned long long handle; /* cuda: the driver's */
	struct kvmem_cuda *cu; /* cuda: its GPU; host: the GPU pinned for */
	void *stream; /* cuda: what its copies and checks run on */
	uint64_t ws; /* cuda: the checks' device workspace, or 0 */
};

/*
 * A backend. Every hook but adopt, copy and view is mandatory; a backend
 * this build or machine lacks has stubs returning -EOPNOTSUPP.
 *
 * create:  a region of at least @req->size bytes; may block (it runs on a
 *          worker thread)
 * destroy: unmap and close it
 * copy:    a tier of pages (the GPU's): start copying @len bytes between
 *          host memory at @host and @off of the region, into the region
 *          with @in; 0, else -EIO
 * wait:    wait for the copies started so far: 0, or -EIO when one
 *          failed; NULL where copies are done when copy() returns
 * view:    the region's bytes as this process may read and write them, or
 *          NULL where it cannot (device memory)
 * check:   where view is NULL: the CRC-32C of @n ranges of the region
 *          (@rg: an offset and a length each; @n at most
 *          KVMEMD_CHECK_MAX), taken where the bytes are, into @crc; 0,
 *          -EIO, -EINVAL (a range outside the region), -EOPNOTSUPP (it
 *          has no device workspace)
 * scrub:   where view is NULL: the sealed page at @off, of @len bytes,
 *          geometry @g, the kind @hot says and @ntokens tokens (a header
 *          that says otherwise is -EINVAL), checked and corrected where
 *          it is as
 *          kvmem_page_scrub() does, its counts into @pc; then, of the page
 *          as that left it, the CRC-32C of its bytes after the header into
 *          @crc and its header (KVMEM_PAGE_HDR_BYTES) into @hdr, all in
 *          one wait; that verdict (0, -EBADMSG, -EINVAL), or -EIO or
 *          -EOPNOTSUPP (as for check) when it could not run
 */
#define KVMEMD_CHECK_MAX 256u
/* What a region is asked for, fixed when the session is admitted. */
struct kvmemd_region_req {
	size_t size;
	int hugepages; /* enum kvmemd_tristate */
	int mlock; /* enum kvmemd_tristate */
	struct kvmem_cuda *cu; /* cuda: the GPU pool's device */
	void *stream; /* cuda: the GPU pool's */
	uint64_t ws;
};

struct kvmemd_pool_ops {
	const char *name;
	int (*create)(const struct kvmemd_region_req *req,
		      struct kvmemd_region *r, char *why, size_t whylen);
	/* A descriptor of such memory kept across a restart, mapped as
	 * create() maps new memory; NULL where none can be kept. */
	int (*adopt)(const struct kvmemd_region_req *req, int fd,
		     struct kvmemd_region *r, char *why, size_t whylen);
	void (*destroy)(struct kvmemd_region *r);
	int (*copy)(struct kvmemd_region *r, uint64_t off, uint8_t *host,
		    size_t len, int in);
	int (*wait)(struct kvmemd_region *r);
	uint8_t *(*view)(const struct kvmemd_region *r);
	int (*check)(struct kvmemd_region *r, const uint64_t *rg, uint32_t n,
		     uint32_t *crc);
	int (*scrub)(struct kvmemd_region *r, uint64_t off, size_t len, int hot,
		     uint32_t ntokens, const struct kvmem_geometry *g,
		     struct kvmem_page_counts *pc, uint32_t *crc, uint8_t *hdr);
};

const struct kvmemd_pool_ops *kvmemd_pool(enum kvmemd_pool_kind kind);
/* @ops' copy() of those arguments, and its wait(): done when it returns
 * 0, else -EIO. */
int kvmemd_pool_copy_wait(const struct kvmemd_pool_ops *ops,
			  struct kvmemd_region *r, uint64_t off, uint8_t *host,
			  size_t len, int in);

/*
 * kvmemd_host_release() - destroy the host region @r of an ended session,
 * on a worker while the workers run: its @bytes stay in d->n.pool_used
 * (and d->n.pool_releasing) until the worker is done and the loop reaps
 * it, so the pool never promises memory that is not free yet. @r is the
 * caller's no more. Event loop only.
 */
void kvmemd_host_release(struct kvmemd *d, struct kvmemd_region *r,
			 uint64_t bytes);

/*
 * The GPU pool: pool.gpu_bytes of one GPU's memory (or that percentage of
 * what the GPU has), a whole allocation per session. A client maps what it was given, and the driver frees it only
 * when no process maps it any more, which the daemon cannot force: what an
 * ended session had stays charged until its process has exited (a pidfd
 * says when), so the count is the memory there is.
 */
struct kvmemd_gpu_hold;

struct kvmemd_gpu {
	/* the sessions' GPU memory: cuda, or the stand-in's host memory
	 * (pool.gpu_device = standin); NULL: no GPU pool, for the reason in
	 * why */
	const struct kvmemd_pool_ops *ops;
	struct kvmem_cuda *cu; /* cuda: the device */
	void *stream; /* cuda: the daemon's, for copies and checks; NULL: the
		       * default stream, when the driver made none */
	uint64_t ws; /* cuda: KVMEMD_GPU_WS bytes for the checks; 0: none,
		      * and pages there are checked in copies */
	/* pages the scrubber checked where they are (kernels), and in copies
	 * here (where the kernels found what they could not undo, or could
	 * not run) */
	uint64_t scrub_device, scrub_copied;
	char why[160];
	char name[128]; /* the device's */
	char uuid[41]; /* as nvidia-smi -L shows it */
	uint8_t uuid_bytes[16];
	size_t granularity; /* of allocations */
	uint64_t bytes; /* the pool: pool.gpu_bytes, or its percentage */
	uint64_t used; /* charged: sessions' and held */
	uint64_t held; /* of that, ended sessions' whose process lives */
	struct kvmemd_ratelimit log; /* the GPU tier's failed copies */
	/* host memory of GPU-tier sessions pinned (pool.gpu_pinned_bytes),
	 * and sessions that went unpinned: over it, or the driver refused */
	uint64_t pinned, unpinned;
	struct kvmemd_gpu_hold *holds;
};

/* Open the pool's GPU as configured; without one, log why once. */
void kvmemd_gpu_open(struct kvmemd *d);
void kvmemd_gpu_close(struct kvmemd *d);
/* Keep @bytes, charged to @uid, until process @pid has exited. */
void kvmemd_gpu_hold(struct kvmemd *d, pid_t pid, uid_t uid, uint64_t bytes);
/* Give back @bytes of a session of @uid that its client never got. */
void kvmemd_gpu_release(struct kvmemd *d, uid_t uid, uint64_t bytes);
/* Give back what processes that have exited held. */
void kvmemd_gpu_reap(struct kvmemd *d);

/* ---- policy.c: the configuration in layers --------------------------- */

/*
 * kvmemd_config_build() - defaults, then the file, then the command line,
 * then the run-time changes, then the checks across keys, into @c; @err
 * says what failed
 */
int kvmemd_config_build(const struct kvmemd *d, struct kvmemd_config *c,
			char *err, size_t errlen);
/* Run on @c from now on: d->cfg, the log level, prefix.* limits. */
void kvmemd_config_apply(struct kvmemd *d, const struct kvmemd_config *c);
/*
 * kvmemd_policy_set() - change a run-time key now and across reloads
 * Return: 0, or -EINVAL with the reason in @err.
 */
int kvmemd_policy_set(struct kvmemd *d, const char *key, const char *val,
		      char *err, size_t errlen);
void kvmemd_policy_free(struct kvmemd *d);

/* ---- notify.c: systemd's notification socket --------------------------- */

/* How long the messages systemd waits for may wait for room. */
#define KVMEMD_NOTIFY_WAIT_MS 1000

/* Connect to $NOTIFY_SOCKET, when there is one. */
void kvmemd_notify_open(void);
/* Send @msg ("READY=1", "STATUS=..."), waiting up to @wait_ms for room;
 * dropped (with a debug line) when the reader is behind. */
void kvmemd_notify(const char *msg, int wait_ms);
/* Send @msg with the descriptor @fd (none when -1) to NOTIFY_SOCKET
 * ("FDSTORE=1..."): 0, or a negative errno (no such socket, or its reader
 * is behind). */
int kvmemd_notify_fd(const char *msg, int fd);
/* Does kvmemd keep what it can across a restart: daemon.keep_sessions,
 * under a service manager (NOTIFY_SOCKET) with a descriptor store? Then
 * sessions that attach are offered KVMEM_FEAT_RESUME, and published
 * prefixes are kept (prefix.keep). */
int kvmemd_notify_keeping(const struct kvmemd *d);

/* ---- worker.c: a fixed pool of threads and a bounded queue ------------ */

struct kvmemd_work {
	void (*fn)(struct kvmemd_work *w); /* runs on a worker */
	/* runs on the loop once reaped; NULL: a connection's set-up */
	void (*done)(struct kvmemd_work *w);
	struct kvmemd_work *next; /* queue link, the pool's */
};

struct kvmemd_workers;

/*
 * kvmemd_workers_start() - @threads threads; finished work is queued for
 * kvmemd_workers_reap() and the eventfd returned by kvmemd_workers_fd()
 * becomes readable. Return: 0 or a negative errno.
 */
int kvmemd_workers_start(unsigned int threads, unsigned int depth,
			 struct kvmemd_workers **out);
/* Queue @w: 0, or -EAGAIN when @depth items are queued or running. */
int kvmemd_workers_queue(struct kvmemd_workers *wp, struct kvmemd_work *w);
/*
 * Queue @w past the depth, for work that must not be refused and whose
 * number something else bounds (one teardown per session): 0, or
 * -ESHUTDOWN once the workers are stopping.
 */
int kvmemd_workers_push(struct kvmemd_workers *wp, struct kvmemd_work *w);
int kvmemd_workers_fd(const struct kvmemd_workers *wp);
/* The next finished item, or NULL. Event loop only. */
struct kvmemd_work *kvmemd_workers_reap(struct kvmemd_workers *wp);
/* Let queued work finish and join the threads; what finished is left for
 * kvmemd_workers_reap(). */
void kvmemd_workers_stop(struct kvmemd_workers *wp);
/* Stop, then free; finished work not reaped is the caller's loss. */
void kvmemd_workers_free(struct kvmemd_workers *wp);

/* ---- session.c: one attached client ---------------------------------- */

struct kvmemd;
struct kvmemd_session;

/*
 * kvmemd_session_new() - check a hello and reserve what it asks for
 * @d: the daemon
 * @h: the hello, exactly sizeof(*h) bytes received
 * @uid, @pid: the peer, for logs
 * @tenant: whose published prefixes the session shares (prefix.h)
 * @w: receives the refusal (error and message) or the session's limits
 * @out: receives the session, whose memory is not set up yet
 *
 * Return: 0, or the negative errno also put in @w->error.
 */
int kvmemd_session_new(struct kvmemd *d, const struct kvmem_hello *h, uid_t uid,
		       uint64_t tenant, pid_t pid, struct kvmem_welcome *w,
		       struct kvmemd_session **out);
/* Create the region and lay out the ring; may block (a worker runs it). */
int kvmemd_session_setup(struct kvmemd_session *s, char *why, size_t whylen);
/* Instead of kvmemd_session_setup(), for a session kept across a restart:
 * the memfd @fd (taken whatever the outcome) is its region. */
int kvmemd_session_adopt(struct kvmemd_session *s, int fd, char *why,
			 size_t whylen);
/* Fill in the layout part of @w once kvmemd_session_setup() succeeded. */
void kvmemd_session_welcome(const struct kvmemd_session *s,
			    struct kvmem_welcome *w);
/* The memfd, the SQ doorbell, the CQ doorbell and the GPU memory, as they
 * go to the client; returns how many there are (3 without GPU memory). */
int kvmemd_session_fds(const struct kvmemd_session *s, int fds[4]);
int kvmemd_session_sq_efd(const struct kvmemd_session *s);
uint32_t kvmemd_session_id(const struct kvmemd_session *s);
/* Put a set-up session on d->sessions: the scrubber and the admin socket
 * see it from now on. kvmemd_session_free() takes it off. */
void kvmemd_session_activate(struct kvmemd_session *s);
/*
 * kvmemd_session_run() - take up to @budget SQEs and complete them, and
 * ring the CQ doorbell when the client sleeps on it
 *
 * A pass also ends once prefix ops copied a MiB of pages, and while a page
 * just sealed is checked; @budget UINT32_MAX (the shutdown) takes all that
 * was submitted, whatever it copies.
 *
 * Return: the number taken, or -EPROTO when the client broke the ring
 * protocol (it must be disconnected; kvmemd_session_broken() says how).
 */
int kvmemd_session_run(struct kvmemd_session *s, unsigned int budget);
const char *kvmemd_session_broken(const struct kvmemd_session *s);
/* Has the client published SQEs the daemon has not taken? */
int kvmemd_session_pending(const struct kvmemd_session *s);
/* Set or clear NEED_WAKEUP in the shared ring. */
void kvmemd_session_need_wakeup(struct kvmemd_session *s, int on);
/* Mark the ring shut down and wake the client. */
void kvmemd_session_shutdown(struct kvmemd_session *s);
/*
 * The client is gone (it hung up or was dropped): kvmemd_session_free()
 * frees the arena's pages too, however long the client's descriptor or
 * mapping outlives the session. Not at shutdown, when clients keep reading
 * what they hold.
 */
void kvmemd_session_discard(struct kvmemd_session *s);
/* Free the session and everything in it; returns its pool reservation. */
void kvmemd_session_free(struct kvmemd_session *s);

/* ---- statefile.c: whole files of the state directory ------------------ */

/* @len bytes of @buf to @fd, all of them: 0, or -errno. */
int kvmemd_file_write_all(int fd, const void *buf, size_t len);
/* @path holds @len bytes of @buf and nothing else (made 0600 when it is
 * not there), written in place, and with @sync on the medium when this
 * returns: 0, or -errno. */
int kvmemd_file_replace(const char *path, const void *buf, size_t len,
			int sync);
/* The whole of @path: 0 with *@buf (malloc'ed) and *@size, or -errno. */
int kvmemd_file_read(const char *path, uint8_t **buf, size_t *size);

/* What kvmemd_file_pair_read() found. */
struct kvmemd_file_pair {
	uint8_t *buf; /* the newer that verifies, malloc'ed */
	size_t size;
	int which; /* 0 or 1 */
	uint64_t generation;
	/* of each: there (read, or failed to be), it verified, why not */
	int present[2], ok[2];
	char why[2][KVMEM_MESSAGE_LEN];
};

/*
 * kvmemd_file_pair_read() - of two files written in turn (each over the
 * last but one), the newer whole one
 * @path: the two paths
 * @check: does @buf, @size bytes read from one, verify? 0 with its
 *         generation in *@generation, or why not in @why
 * @ctx: for @check
 * @out: receives what was found of both
 *
 * Return: 0 with the newer that verifies in @out; -ENOENT when neither
 * does (each one's why in @out).
 */
int kvmemd_file_pair_read(const char *const path[2],
			  int (*check)(const uint8_t *buf, size_t size,
				       void *ctx, uint64_t *generation,
				       char *why, size_t len),
			  void *ctx, struct kvmemd_file_pair *out);

/* ---- resume.c: sessions kept across a restart ------------------------ */

/*
 * Under systemd (NOTIFY_SOCKET, FileDescriptorStoreMax= in the unit) and
 * with daemon.keep_sessions, a stopping kvmemd keeps its sessions: their
 * memfds go to the service's descriptor store, their tables to
 * STATE_DIR/sessions.kept, and the next kvmemd takes both back, checks
 * them, and waits daemon.resume_seconds for each client to say hello
 * again (see kvmem/uapi.h, Restarts).
 */
struct kvmemd_keep;

/* A session of KVMEM_FEAT_RESUME, welcomed: its memfd goes to the
 * descriptor store now, where it outlives a crash of kvmemd. */
void kvmemd_resume_track(struct kvmemd_session *s);
/* A session that ends for good: its memfd leaves the store, its record
 * the state directory. */
void kvmemd_resume_untrack(struct kvmemd_session *s);
/* A session being freed (record.c): a write of its live record in
 * flight is its own. */
void kvmemd_record_forget(struct kvmemd_session *s);
/* Once a loop iteration: each session whose tables or ring moved, and
 * whose record is not being written, has it written on a worker; the
 * client sees what moved once it is. */
void kvmemd_resume_record(struct kvmemd *d);
/* At start, for a descriptor systemd passed back: 1 when @name is a kept
 * session's (the descriptor is taken), else 0. */
int kvmemd_resume_fd(struct kvmemd *d, const char *name, int fd);
/* At start, once the store is open: the kept sessions, from the record
 * and the descriptors, checked; a record that does not verify is refused
 * with a line in the log, and nothing of it is served. */
void kvmemd_resume_load(struct kvmemd *d);
/* Once kvmemd serves: the record is removed and the memfds of sessions
 * not taken back leave systemd's store. A start that fails before leaves
 * both to the next. */
void kvmemd_resume_commit(struct kvmemd *d);
/* A hello with resume_session: 0 and the session, to be welcomed and
 * activated as a new one is, or the refusal in @w. The session shares
 * @tenant's prefixes from then on, as a new one would. */
int kvmemd_resume_take(struct kvmemd *d, const struct kvmem_hello *h, uid_t uid,
		       uint64_t tenant, pid_t pid, struct kvmem_welcome *w,
		       struct kvmemd_session **out);
/* Kept sessions nobody took back in time are freed. Return: when the next
 * one would be, or UINT64_MAX. */
uint64_t kvmemd_resume_run(struct kvmemd *d, uint64_t now);
/* At stop: NULL when nothing can be kept. Each session offered to
 * kvmemd_resume_keep() is kept if it can be (1) or not (0, said in the
 * log); kvmemd_resume_end() writes the record. */
struct kvmemd_keep *kvmemd_resume_begin(struct kvmemd *d);
int kvmemd_resume_keep(struct kvmemd_keep *k, struct kvmemd_session *s);
void kvmemd_resume_end(struct kvmemd_keep *k);
/* Kept sessions waiting for their clients (counted in "sessions"). */
uint64_t kvmemd_resume_waiting(const struct kvmemd *d);
/* What this kvmemd's start took back of the sessions the last one kept:
 * all, those from the live records a crash left, and those refused (each
 * said in the log). */
struct kvmemd_resume_counts {
	uint64_t taken, after_crash, refused;
};
void kvmemd_resume_counts(const struct kvmemd *d,
			  struct kvmemd_resume_counts *c);
/* Free what was kept and not taken back. */
void kvmemd_resume_exit(struct kvmemd *d);

/* ---- prefix-save.c: published prefixes kept across a restart ---------- */

/* The names of the blocks' memfds in systemd's descriptor store. */
#define KVMEMD_PREFIX_FD_NAME "prefix-"

/* At start, before kvmemd_prefix_save_load(), for a descriptor systemd
 * passed back: 1 when @name is a kept block's (KVMEMD_PREFIX_FD_NAME...;
 * the descriptor is taken), else 0. */
int kvmemd_prefix_save_fd(struct kvmemd *d, const char *name, int fd);
/*
 * kvmemd_prefix_save_load() - after kvmemd_prefix_init(): the blocks of the
 * newest index that verifies whose memfds came back, each page checked, in
 * their tenants' tables again. What does not verify is dropped and said in
 * the log; the other memfds are closed.
 */
void kvmemd_prefix_save_load(struct kvmemd *d);
/* Serving: the memfds not taken back leave systemd's store. */
void kvmemd_prefix_save_commit(struct kvmemd *d);
/* At an orderly stop, the workers stopped: the index, if the set of blocks
 * changed since the last was written. */
void kvmemd_prefix_save_flush(struct kvmemd *d);

/* ---- prefix-disk.c: published prefixes on the backing store ----------- */

struct kvmemd_store;

/*
 * kvmemd_prefix_disk_load() - after kvmemd_prefix_save_load(), with the
 * store @st open (NULL: none) and the kept sessions' units claimed: from
 * now on blocks are kept on @st as prefix.keep and store.retain_* say; the
 * newest index of
 * blocks on the store that verifies, each entry's units claimed, its
 * record read back and checked, its block kept again as prefix.* limits
 * allow (the rest stay on the store until fetched). What does not verify
 * is dropped and said in the log. Blocks in memory that are not on the
 * store go there.
 */
void kvmemd_prefix_disk_load(struct kvmemd *d, struct kvmemd_store *st);
/* At an orderly stop, the workers stopped and reaped: the index, here. */
void kvmemd_prefix_disk_flush(struct kvmemd *d);
void kvmemd_prefix_disk_exit(struct kvmemd *d);

struct kvmemd_prefix_disk_stats {
	int on;
	/* on the store now (not those on their way); retain_bytes */
	uint64_t blocks, bytes, limit;
	uint64_t held; /* extents waiting for an index that drops them */
	uint64_t generation; /* of the index last written */
	uint64_t indexed; /* blocks it names: what a crash now keeps */
	uint64_t written, written_bytes, write_errors;
	uint64_t skipped; /* not written: writes in flight, no room */
	uint64_t nospace; /* not written: the store was full */
	uint64_t reclaimed, expired, dropped; /* left the store */
	uint64_t taken, refused, repaired; /* read back: at start, fetches */
	uint64_t start_refused; /* of those refused, at start */
	uint64_t fetched; /* kept again by PREFIX_FETCH */
	uint64_t indexes, index_errors;
};

void kvmemd_prefix_disk_stats(const struct kvmemd *d,
			      struct kvmemd_prefix_disk_stats *out);

/* ---- server.c: the daemon --------------------------------------------- */

struct kvmemd_counters {
	uint64_t sessions; /* attached now */
	uint64_t pool_used; /* bytes promised to sessions */
	uint64_t pool_releasing; /* of pool_used: ended arenas a worker frees */
	/* since start: sessions set up, refused, ended by the client, and
	 * ended by the daemon for breaking the protocol */
	uint64_t attached, refused, detached, dropped;
	uint64_t ops;
	/* connections closed for others of their user, or the pool of
	 * them, and refused because descriptors ran out */
	uint64_t evicted, accept_errors;
};

#define KVMEMD_MAX_SETS 64

/* What one user has of the daemon (user.c). */
struct kvmemd_user {
	uid_t uid;
	uint32_t sessions; /* attached, or being set up */
	uint64_t gpu_bytes; /* GPU memory: its sessions' and held by its
			     * processes after their sessions ended */
	uint32_t pending[2]; /* connections before the welcome: [0]
			      * clients, [1] admin */
	struct kvmemd_ratelimit events; /* error events a minute (ras.c) */
	struct kvmemd_ratelimit log; /* of which the journal hears */
	uint32_t ring_events; /* its events in ras.c's ring */
};

struct kvmemd_ras;
struct kvmemd_tier;
struct kvmemd_check;

struct kvmemd {
	struct kvmemd_config cfg;
	const char *config_path; /* re-read on SIGHUP */
	int config_must_exist;
	/* Command-line settings, applied over the file at start and reload */
	const char *set_keys[KVMEMD_MAX_SETS], *set_vals[KVMEMD_MAX_SETS];
	int nset;
	/* Set through the admin socket, applied after those: a reload
	 * keeps them */
	char *policy_keys[KVMEMD_MAX_SETS], *policy_vals[KVMEMD_MAX_SETS];
	int npolicy;
	struct kvmemd_counters n;
	uint32_t next_session;
	struct kvmemd_session *sessions, *sessions_tail; /* by id */
	struct kvmemd_ras *ras;
	struct kvmemd_tier *tier;
	struct kvmemd_archive *archive;
	struct kvmemd_prefixes *prefix;
	struct kvmemd_resume *resume;
	struct kvmemd_prefix_save *prefix_save; /* prefix-save.c */
	struct kvmemd_prefix_disk *prefix_disk; /* prefix-disk.c: NULL, none */
	struct kvmemd_remote *remote; /* remote.c: NULL, no shared tier */
	struct kvmemd_workers *workers; /* the server's, while it runs */
	struct kvmemd_gpu gpu;
	uint64_t start_mono; /* CLOCK_MONOTONIC ns */
	struct kvmemd_user *users; /* user.c */
	uint32_t nusers, users_cap;
};

/* ---- user.c: per-uid accounting --------------------------------------- */

/*
 * kvmemd_user() - @uid's record, made when it has none
 *
 * Return: the record, good until the next call; NULL when out of memory.
 */
struct kvmemd_user *kvmemd_user(struct kvmemd *d, uid_t uid);
/* @uid's record, or NULL when it has none. */
const struct kvmemd_user *kvmemd_user_find(const struct kvmemd *d, uid_t uid);
void kvmemd_users_free(struct kvmemd *d);

/*
 * kvmemd_run() - serve until SIGTERM or SIGINT
 *
 * Return: 0 after a clean shutdown, or a negative errno when start-up
 * failed (logged).
 */
int kvmemd_run(struct kvmemd *d);

/*
 * kvmemd_fd_check() - do daemon.max_sessions sessions, and the connections
 * waiting for their handshake, fit RLIMIT_NOFILE; with @raise, lift the
 * soft limit to what they need when the hard one allows
 * Return: 0, or a negative errno with why in @err.
 */
int kvmemd_fd_check(const struct kvmemd_config *c, int raise, char *err,
		    size_t errlen);

/* ---- admin.c: the admin socket's requests ---------------------------- */

enum kvmemd_target_type {
	KVMEMD_TARGET_POOL,
	KVMEMD_TARGET_SESSION,
	KVMEMD_TARGET_SEQ,
};

/*
 * Who waits for a reply that comes after its request (an on-demand scrub,
 * an offload): the connection registers @reply, and the subsystem that
 * answers calls it once, or never after being told to forget it.
 */
struct kvmemd_waiter {
	void (*reply)(struct kvmemd_waiter *wt, struct jw *reply);
};

/* What a scrub or an injection covers: "pool", "session N", "seq N S". */
struct kvmemd_target {
	enum kvmemd_target_type type;
	uint32_t session;
	uint32_t seq;
};

/*
 * kvmemd_admin() - answer one request
 * @d: the daemon
 * @req: the request, NUL-terminated; modified
 * @waiter: what a reply that comes later goes to
 * @w: receives the reply, a JSON object and a newline
 *
 * Return: 0 when @w holds the reply, 1 when it comes later, through
 * @waiter (the connection must wait).
 */
int kvmemd_admin(struct kvmemd *d, char *req, struct kvmemd_waiter *waiter,
		 struct jw *w);
/* An error reply: {"error": message, "errno": @err}. */
void kvmemd_admin_error(struct jw *w, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- ras.c, patrol.c, inject.c: scrubber, errors, events, injection -- */

/* Load the persisted counters and events. Return: 0 or -ENOMEM. */
int kvmemd_ras_init(struct kvmemd *d);
/* Save the counters and free everything. */
void kvmemd_ras_exit(struct kvmemd *d);
/* Verify-on-seal: check the slot at @unit just sealed (s->seal_check);
 * kvmemd_ras_run() runs it, and the session takes no SQE until it is over. */
void kvmemd_ras_seal(struct kvmemd_session *s, uint32_t unit);
/* Set up @c to check a page just read back from the store into @unit,
 * whose bytes had CRC-32C @store_crc when they were written. */
void kvmemd_ras_reload(struct kvmemd_session *s, uint32_t unit,
		       uint32_t store_crc, struct kvmemd_check *c);
/* The same for a page back in host memory from the GPU tier at @unit,
 * whose bytes had CRC-32C @crc when they left: errors count in the GPU
 * pool. */
void kvmemd_ras_moved(struct kvmemd_session *s, uint32_t unit, uint32_t crc,
		      struct kvmemd_check *c);
/* Check every sealed page of @s now, as at its seal (a session taken back
 * after a restart); with @lose, a page that does not match its seal's CRC
 * may hold another's values (its record is older than its contents): it
 * is lost, every value made to read as erased. */
void kvmemd_ras_verify(struct kvmemd_session *s, int lose);
/* Run @c for about *@budget bytes of work, taken from it. Return: 1 when
 * the check is over (or its slot was freed), 0 when the budget ran out. */
int kvmemd_ras_check_step(struct kvmemd_session *s, struct kvmemd_check *c,
			  uint64_t *budget);
/*
 * kvmemd_ras_run() - scrub for a bounded while if the rate allows
 * Return: CLOCK_MONOTONIC ns when it wants to run next (@now: at once), or
 * UINT64_MAX when nothing is to be done.
 */
uint64_t kvmemd_ras_run(struct kvmemd *d, uint64_t now);
/* The connection @waiter waits on is gone: its reply is dropped. */
void kvmemd_ras_forget(struct kvmemd *d, struct kvmemd_waiter *waiter);
void kvmemd_ras_reset(struct kvmemd *d);
/* "off", "idle", "patrol" or "ondemand" */
const char *kvmemd_ras_state(const struct kvmemd *d);
void kvmemd_ras_status_json(const struct kvmemd *d, struct jw *w);
void kvmemd_ras_stats_json(const struct kvmemd *d, struct jw *w);
/* The patrol on: 0, or -EINVAL with why (no rate and no cycle). */
int kvmemd_ras_scrub_start(struct kvmemd *d, char *why, size_t len);
void kvmemd_ras_scrub_stop(struct kvmemd *d);
/* An on-demand pass over @t, its answer through @waiter: 0, or -EBUSY
 * while another runs. */
int kvmemd_ras_scrub_now(struct kvmemd *d, const struct kvmemd_target *t,
			 struct kvmemd_waiter *waiter);
/* The patrol's settings, state and passes, as a JSON object. */
void kvmemd_ras_scrub_status(const struct kvmemd *d, struct jw *w);
/* The events since @since (Unix time), the last @limit of them. */
void kvmemd_ras_events(const struct kvmemd *d, double since,
		       unsigned long limit, struct jw *w);
int kvmemd_ras_errors(struct kvmemd *d, struct jw *w);
/* What an injection does to every page it covers. */
struct kvmemd_inject {
	double ber; /* of the channel */
	uint64_t seed;
	int all; /* every bit of a page, not only the values' words */
	struct kvmem_inject_params chan;
	const char *spec; /* the channel as the admin named it */
};
/*
 * kvmemd_ras_inject() - flip bits of every sealed page @t covers, through
 * @in's channel; what was flipped, by codec, as a JSON object in @w
 * Return: 0, or a negative errno (a channel no page's codec takes), with
 * nothing flipped.
 */
int kvmemd_ras_inject(struct kvmemd *d, const struct kvmemd_target *t,
		      const struct kvmemd_inject *in, struct jw *w);
/* The adaptive patrol is short of scrub.target_ue_per_day at its fastest:
 * the archive tier takes released pages of any age (archive.c). */
int kvmemd_ras_short_of(const struct kvmemd *d);

/* ---- tier.c: the tiering policy and the backing store ----------------- */

/* Open the store when one is configured. Return: 0 or a negative errno. */
int kvmemd_tier_init(struct kvmemd *d);
/* Would kvmemd_tier_init() open it (kvmemd -n)? 0, or why not in @err. */
int kvmemd_tier_check(const struct kvmemd_config *c, char *err, size_t len);
/* Wait for the I/O in flight and close the store. */
void kvmemd_tier_exit(struct kvmemd *d);
int kvmemd_tier_has_store(const struct kvmemd *d);
/* The store's completion eventfd for the loop's epoll set, or -1. */
int kvmemd_tier_fd(const struct kvmemd *d);
/* The open store's uuid: 0, or -ENODEV without a store. */
int kvmemd_tier_store_uuid(const struct kvmemd *d, uint8_t uuid[16]);
/* The open store (store.h), or NULL: server.c hands it to prefix-disk.c,
 * which keeps published blocks in units of it. */
struct kvmemd_store *kvmemd_tier_store(const struct kvmemd *d);
/* Completions that arrived. */
void kvmemd_tier_reap(struct kvmemd *d);
/*
 * kvmemd_tier_run() - move pages as the policy says and submit the I/O
 * Return: CLOCK_MONOTONIC ns when it wants to run again, UINT64_MAX for
 * when something happens.
 */
uint64_t kvmemd_tier_run(struct kvmemd *d, uint64_t now);
/* The connection @waiter waits on is gone: its reply is dropped. */
void kvmemd_tier_forget(struct kvmemd *d, struct kvmemd_waiter *waiter);
void kvmemd_tier_stats_json(const struct kvmemd *d, struct jw *w);

/* ---- archive.c: the archive tier --------------------------------------- */

int kvmemd_archive_init(struct kvmemd *d);
/* After the workers stopped and their work was reaped. */
void kvmemd_archive_exit(struct kvmemd *d);
/*
 * kvmemd_archive_run() - start re-encoding a page that has aged, as the
 * rate allows. Return: as kvmemd_tier_run().
 */
uint64_t kvmemd_archive_run(struct kvmemd *d, uint64_t now);
void kvmemd_archive_stats_json(const struct kvmemd *d, struct jw *w);
/*
 * kvmemd_tier_offload() - move the released pages of @t to the store
 * (kvmemd_tier_has_store() must say there is one), answered through
 * @waiter when they are. Return: 0, or -EBUSY while another runs.
 */
int kvmemd_tier_offload(struct kvmemd *d, const struct kvmemd_target *t,
			struct kvmemd_waiter *waiter);

/* ---- prefix.c: published prefixes (prefix.h has the blocks) ---------- */

int kvmemd_prefix_init(struct kvmemd *d);
void kvmemd_prefix_exit(struct kvmemd *d);
/* After a reload: least recently used blocks go until both limits hold. */
void kvmemd_prefix_trim(struct kvmemd *d);
/* Blocks unused for prefix.idle_seconds go. Return: when the next one
 * would, CLOCK_MONOTONIC ns, or UINT64_MAX. */
uint64_t kvmemd_prefix_run(struct kvmemd *d, uint64_t now);
void kvmemd_prefix_stats_json(const struct kvmemd *d, struct jw *w);
/* The counters and each tenant, and with @tenant its blocks, as a JSON
 * object ("prefixes [TENANT]"). */
void kvmemd_prefix_list(struct kvmemd *d, const uint64_t *tenant, struct jw *w);
/* @tenant's blocks, or with @key that one, go. Return: how many. */
uint64_t kvmemd_prefix_drop(struct kvmemd *d, uint64_t tenant,
			    const uint8_t *key);
/*
 * kvmemd_prefix_inject() - @flips flips in the first payload word of every
 * page of @tenant's blocks, seeded by @seed
 * Return: 0 with the pages and the bits flipped, or a negative errno.
 */
int kvmemd_prefix_inject(struct kvmemd *d, uint64_t tenant, uint32_t flips,
			 uint64_t seed, uint64_t *pages, uint64_t *bits);

#endif /* KVMEMD_H */
