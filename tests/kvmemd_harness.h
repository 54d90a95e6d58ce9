/* SPDX-License-Identifier: MIT */
/*
 * kvmemd_harness.h - real kvmemd processes for the integration suites
 *
 * Each daemon runs in a directory of its own under $TMPDIR (or /tmp), with
 * its sockets, state directory, log and config file there, a NOTIFY_SOCKET
 * the test reads, and PR_SET_PDEATHSIG so it dies with the test that
 * started it even when the test fails half-way.
 */
#ifndef KVMEMD_HARNESS_H
#define KVMEMD_HARNESS_H

#include <stddef.h>
#include <sys/types.h>

#include "kvmem/kvmem.h"

/* Descriptors kvmemd put in its store ("FDSTORE=1"), as systemd keeps
 * them for the next start. */
#define KVMEMD_FDSTORE_MAX 64

/* Notifications other than the store's, waiting for kvmemd_notify_wait(). */
#define KVMEMD_NOTES_MAX 64

struct kvmemd_notes;

struct kvmemd_proc {
	pid_t pid;
	char dir[80]; /* short: socket paths must fit sun_path */
	char sock[108];
	char admin[108];
	char conf[300];
	char log[300];
	int notify; /* the datagram socket NOTIFY_SOCKET names */
	/*
	 * systemd's part, played by a thread that reads the notifications
	 * as they come: the descriptor store ("FDSTORE=1" adds a descriptor
	 * under its FDNAME, unless the store has that file already;
	 * "FDSTOREREMOVE=1" removes those of the name), which outlives the
	 * daemon until kvmemd_stop() or kvmemd_cleanup(), and the other
	 * notifications for kvmemd_notify_wait(). Under the thread's lock.
	 */
	struct kvmemd_notes *notes;
	int nstored;
	int stored[KVMEMD_FDSTORE_MAX];
	char stored_name[KVMEMD_FDSTORE_MAX][64];
};

/*
 * Start kvmemd with @conf as its configuration file (NULL: an empty one),
 * @env (NULL-terminated "NAME=value" strings, or NULL) added to its
 * environment, and wait for READY=1. Fails the test when it does not come.
 * An @env entry KVMEMD_DENY_SYSCALL "NR" is not passed on: in the daemon,
 * system call NR fails with ENOSYS, as on a kernel without it.
 */
#define KVMEMD_DENY_SYSCALL "KVMEMD_HARNESS_DENY_SYSCALL="

void kvmemd_start(struct kvmemd_proc *p, const char *conf,
		  const char *const *env);

/* Start the daemon again after it stopped: same directory, state and
 * configuration file; with what its descriptor store holds, passed as
 * systemd passes it (LISTEN_FDS, LISTEN_FDNAMES) and kept in the store. */
void kvmemd_restart(struct kvmemd_proc *p, const char *const *env);
/* Start it again expecting it to fail: its exit status. */
int kvmemd_try_restart(struct kvmemd_proc *p);
/* SIGTERM, wait, and empty the descriptor store, as "systemctl stop"
 * does; returns the exit status (128 + signal when killed). */
int kvmemd_stop(struct kvmemd_proc *p);
/* The same, but the store is kept for kvmemd_restart(), as across
 * "systemctl restart". */
int kvmemd_stop_keep(struct kvmemd_proc *p);
/* SIGKILL, wait, the store kept: a crash that Restart= restarts from. */
void kvmemd_kill(struct kvmemd_proc *p);
/* The descriptors the store holds under names that start with @prefix
 * ("": all) are lost, as a reboot loses them all. */
void kvmemd_store_lose(struct kvmemd_proc *p, const char *prefix);
/* How many descriptors the store holds under names that start with
 * @prefix. */
int kvmemd_stored(struct kvmemd_proc *p, const char *prefix);

/* Remove the daemon's directory. */
void kvmemd_cleanup(struct kvmemd_proc *p);

/*
 * The next notification that has a line starting with @prefix; its whole
 * text to @out. Return: 1, or 0 after @timeout_ms.
 */
int kvmemd_notify_wait(struct kvmemd_proc *p, const char *prefix,
		       int timeout_ms, char *out, size_t len);

/* Lines of the daemon's log that have @needle. */
int kvmemd_log_lines(const struct kvmemd_proc *p, const char *needle);

/* The daemon's open descriptors, from /proc. */
int kvmemd_fd_count(const struct kvmemd_proc *p);

/* Send @req on a new admin connection; its descriptor, for the reply. */
int kvmemd_admin_send(const struct kvmemd_proc *p, const char *req);
/* The admin socket's answer to @req, a JSON line, to @out. */
void kvmemd_admin(const struct kvmemd_proc *p, const char *req, char *out,
		  size_t len);

/*
 * kvmemd_admin() of a printf-formatted request; fails the test when the
 * reply is an error. Return: @out.
 */
const char *kvmemd_admin_ok(const struct kvmemd_proc *p, char *out, size_t len,
			    const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* A number from that JSON: the value of "key". Fails the test if absent. */
unsigned long long kvmemd_json_u64(const char *json, const char *key);

/* The value of "key" after the first @anchor in @json. */
unsigned long long kvmemd_json_after(const char *json, const char *anchor,
				     const char *key);
/* by_flips[0..7] of @codec in the admin socket's reply to "inject". */
void kvmemd_inject_flips(const char *json, const char *codec,
			 unsigned long long f[8]);
/* Rewrite the config file (for SIGHUP); "@DIR@" in it becomes the
 * daemon's directory. */
void kvmemd_write_conf(struct kvmemd_proc *p, const char *conf);

/* A small geometry: 2 layers, 2 KV heads, head_dim 64, defaults else. */
struct kvmem_geometry kvmemd_test_geo(void);

/* kvmem_connect() to @p with @quota (0: default); fails the test on error. */
struct kvmem_cache *kvmemd_connect(const struct kvmemd_proc *p, uint64_t quota);

/* Release @s and wait until kvmemd has taken the release in (a release
 * is only queued, and an admin request may overtake it). */
void kvmemd_release(struct kvmem_cache *c, struct kvmem_seq *s);

/* Wait (5 s at most) until kvmemd serves no session and its pool is all
 * free again (ended sessions' memory is freed on a worker); fail the test
 * if it does not. */
void kvmemd_wait_no_sessions(const struct kvmemd_proc *p);

/*
 * A session attached by hand, below libkvmem: the ABI as a hostile or
 * foreign client sees it.
 */
struct kvmemd_raw {
	int sock, memfd, sq_efd, cq_efd;
	int gpu_fd; /* the session's GPU memory, with gpu_bytes; else -1 */
	uint8_t *gpu; /* mapped where the descriptor is a memfd (the
		       * stand-in's, the fake driver's) */
	struct kvmem_welcome w;
	uint8_t *map;
	struct kvmem_ring *ring;
	struct kvmem_sqe *sqes;
	struct kvmem_cqe *cqes;
	uint8_t *buf, *arena;
	uint32_t sq_tail, cq_head;
};

/* The size of the welcome that answers @len bytes of @msg: the whole of it
 * to a hello of ABI 4 or later, the welcome of ABI 3 to anything else. */
size_t kvmemd_welcome_size(const void *msg, size_t len);

/* A hello for kvmemd_test_geo() and @quota, ready to send or spoil. */
struct kvmem_hello kvmemd_hello(uint64_t quota);

/*
 * Send @len bytes of @msg as the hello and read the answer into r->w.
 * Return: r->w.error (0: attached, mapped, descriptors in @r).
 */
int kvmemd_raw_attach(struct kvmemd_raw *r, const struct kvmemd_proc *p,
		      const void *msg, size_t len);
void kvmemd_raw_detach(struct kvmemd_raw *r);

/* Submit one SQE (user_data set by the caller) and wait for its CQE. */
struct kvmem_cqe kvmemd_raw_op(struct kvmemd_raw *r, const struct kvmem_sqe *e);
/* The same in parts: queue SQEs, ring once, wait for each CQE. */
void kvmemd_raw_queue(struct kvmemd_raw *r, const struct kvmem_sqe *e);
void kvmemd_raw_doorbell(struct kvmemd_raw *r);
struct kvmem_cqe kvmemd_raw_reap(struct kvmemd_raw *r);
/* kvmemd_raw_op() of @e as user_data @ud; its CQE must answer it (same
 * user_data, flags 0). */
struct kvmem_cqe kvmemd_raw_call(struct kvmemd_raw *r, struct kvmem_sqe e,
				 uint64_t ud);
/* The result of the op of those fields, e.g. KVMEMD_OP(r, 1, .opcode =
 * KVMEM_OP_SEQ_CREATE). */
#define KVMEMD_OP(r, ud, ...) \
	kvmemd_raw_call((r), (struct kvmem_sqe){ __VA_ARGS__ }, (ud)).res

/* Wait up to @timeout_ms for the daemon to hang up on @r: 1, or 0. */
int kvmemd_raw_hung_up(struct kvmemd_raw *r, int timeout_ms);

/*
 * A flood of seals, whose checks cost the daemon: the hello of a session
 * of 5 MiB pages (int8 + secded72, 32 KV heads of 128, 512 tokens) and
 * @sq SQEs; once it is attached, kvmemd_raw_big_page() makes sequence 1
 * and an open slot holding a whole page of random tokens of the hello's
 * geometry @g, and returns the slot; kvmemd_raw_seal_round() queues round
 * @i on it, unpublished:
 * PAGE_SEAL, PAGE_FREE and PAGE_ALLOC as user_data 3i, 3i + 1, 3i + 2
 * (results 0, 0, 1).
 */
#define KVMEMD_BIG_TOKENS 512
struct kvmem_hello kvmemd_big_hello(uint32_t sq);
uint32_t kvmemd_raw_big_page(struct kvmemd_raw *r,
			     const struct kvmem_geometry *g, uint64_t seed);
void kvmemd_raw_seal_round(struct kvmemd_raw *r, uint32_t slot, uint32_t i);
/* Publish what was queued and ring the doorbell. */
void kvmemd_raw_publish(struct kvmemd_raw *r);

struct kvmem_rng;
/* @ntok random tokens of every layer of kvmemd_test_geo(), as one array
 * each for K and V (kvmem_check_xmalloc()ed). */
void kvmemd_tokens(struct kvmem_rng *r, uint32_t ntok, float **k, float **v);
/* A sequence of @c holding @ntok tokens of @k, @v. */
struct kvmem_seq *kvmemd_seq_with(struct kvmem_cache *c, const float *k,
				  const float *v, uint32_t ntok);
/* A new embedded cache's sequence of the first @ntok tokens: a reference
 * to compare with (kvmemd_expect_same()). */
struct kvmem_seq *kvmemd_reference(struct kvmem_cache **e, const float *k,
				   const float *v, uint32_t ntok);
/*
 * @a and @b, sequences of kvmemd_test_geo(), decode every layer to the
 * same bits and attend to the same bits for random queries drawn from @r
 * (the test fails otherwise): a session's sequence against an embedded
 * reference, say.
 */
void kvmemd_expect_same(struct kvmem_seq *a, struct kvmem_seq *b,
			struct kvmem_rng *r);

#endif /* KVMEMD_HARNESS_H */
