/* SPDX-License-Identifier: MIT */
/*
 * check_resume.c - sessions kept across a restart of kvmemd: the harness
 * plays systemd's descriptor store (kvmemd_stop_keep(), kvmemd_restart()),
 * clients take their sessions back with kvmem_reconnect() and read what
 * they wrote, bit for bit, cold pages included; what was not kept, or
 * does not verify, or is asked for by the wrong client, is refused.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvmem/crc32c.h"
#include "kvmem/kvmem.h"
#include "kvmem_check.h"
#include "kvmemd_harness.h"
#include "rng.h"

#define STORE_CONF "[store]\npath = @DIR@/store\nsize = 64M\n"
#define NO_CRASH_CONF "[daemon]\nkeep_on_crash = no\n"

/* Is the connection lost, as a call finds out? */
static int lost(struct kvmem_cache *c)
{
	struct kvmem_stats st;

	return kvmem_daemon_stats(c, &st) == -ENOTCONN;
}

/* Wait (5 s at most) until @p's store holds @n session memfds. */
static int stored_sessions(struct kvmemd_proc *p, int n)
{
	int i, got = kvmemd_stored(p, "session-");

	for (i = 0; i < 500 && got != n; i++) {
		usleep(10000);
		got = kvmemd_stored(p, "session-");
	}
	return got;
}

static struct kvmem_stats stats(struct kvmem_cache *c)
{
	struct kvmem_stats st;

	ck_assert_int_eq(kvmem_daemon_stats(c, &st), 0);
	return st;
}

/* What the session holds, as kvmemd counts it, is what it held. */
static void same_holdings(const struct kvmem_stats *a,
			  const struct kvmem_stats *b)
{
	ck_assert_uint_eq(a->arena_bytes, b->arena_bytes);
	ck_assert_uint_eq(a->used_bytes, b->used_bytes);
	ck_assert_uint_eq(a->slots_open, b->slots_open);
	ck_assert_uint_eq(a->slots_sealed, b->slots_sealed);
	ck_assert_uint_eq(a->seqs, b->seqs);
	ck_assert_uint_eq(a->seqs_acquired, b->seqs_acquired);
	ck_assert_uint_eq(a->cold_pages, b->cold_pages);
	ck_assert_uint_eq(a->cold_bytes, b->cold_bytes);
	ck_assert_uint_eq(a->sessions, b->sessions);
}

/* One client's sequence of @ntok tokens under a kvmemd of @conf, and an
 * embedded reference of the same tokens. */
struct one {
	struct kvmemd_proc p;
	struct kvmem_rng r;
	struct kvmem_cache *a, *e;
	struct kvmem_seq *s, *ref;
	float *k, *v;
};

static void one_start(struct one *x, const char *conf, uint64_t seed,
		      uint32_t ntok)
{
	kvmem_rng_seed(&x->r, seed);
	kvmemd_tokens(&x->r, ntok, &x->k, &x->v);
	kvmemd_start(&x->p, conf, NULL);
	x->a = kvmemd_connect(&x->p, 4u << 20);
	x->s = kvmemd_seq_with(x->a, x->k, x->v, ntok);
	x->ref = kvmemd_reference(&x->e, x->k, x->v, ntok);
}

static void one_stop(struct one *x)
{
	kvmem_seq_free(x->s);
	kvmem_seq_free(x->ref);
	kvmem_close(x->e);
	kvmem_close(x->a);
	free(x->k);
	free(x->v);
	ck_assert_int_eq(kvmemd_stop(&x->p), 0);
	kvmemd_cleanup(&x->p);
}

/*
 * Two clients, three sequences, one released and half on the backing
 * store: after a restart each client takes its session back, every
 * sequence attends as before (the cold pages come back from the store
 * the new daemon found them on), and the sessions go on: more tokens, a
 * new sequence, another restart.
 */
START_TEST(test_resume_after_restart)
{
	struct kvmem_cache *a, *b, *e;
	struct kvmem_seq *s1, *s2, *s3, *r1, *r2, *r3, *s4;
	struct kvmem_rng r;
	struct kvmem_stats before[2], after;
	struct kvmemd_proc p;
	char out[8192];
	float *k, *v;
	int round;

	kvmem_rng_seed(&r, 2001);
	kvmemd_tokens(&r, 200, &k, &v);
	kvmemd_start(&p, STORE_CONF, NULL);
	a = kvmemd_connect(&p, 4u << 20);
	b = kvmemd_connect(&p, 4u << 20);
	s1 = kvmemd_seq_with(a, k, v, 200);
	s2 = kvmemd_seq_with(a, k + 64, v + 64, 70);
	s3 = kvmemd_seq_with(b, v, k, 130);
	r1 = kvmemd_reference(&e, k, v, 200);
	r2 = kvmemd_seq_with(e, k + 64, v + 64, 70);
	r3 = kvmemd_seq_with(e, v, k, 130);
	ck_assert_int_eq(kvmem_seq_release(s1), 0);
	kvmemd_admin_ok(&p, out, sizeof(out), "offload pool");
	ck_assert_uint_gt(stats(a).cold_pages, 0);

	for (round = 0; round < 2; round++) {
		before[0] = stats(a);
		before[1] = stats(b);
		ck_assert_int_eq(kvmemd_stop_keep(&p), 0);
		ck_assert_int_eq(p.nstored, 2);
		ck_assert(lost(a));
		ck_assert(lost(b));
		kvmemd_restart(&p, NULL);
		ck_assert_int_eq(
			kvmemd_log_lines(&p, "2 kept sessions wait for their "
					     "clients"),
			1);
		ck_assert_int_eq(kvmem_reconnect(a), 0);
		ck_assert_int_eq(kvmem_reconnect(b), 0);
		ck_assert(!lost(a));
		after = stats(a);
		same_holdings(&after, &before[0]);
		after = stats(b);
		same_holdings(&after, &before[1]);
		ck_assert_int_eq(kvmem_seq_acquire(s1), 0);
		kvmemd_expect_same(s1, r1, &r);
		kvmemd_expect_same(s2, r2, &r);
		kvmemd_expect_same(s3, r3, &r);
		/* Going on: the session is the client's again. */
		ck_assert_int_eq(kvmem_seq_append_all(s2, k, v, 40), 0);
		ck_assert_int_eq(kvmem_seq_append_all(r2, k, v, 40), 0);
		kvmemd_expect_same(s2, r2, &r);
		ck_assert_int_eq(kvmem_seq_release(s1), 0);
	}
	s4 = kvmemd_seq_with(b, k, v, 50);
	kvmem_seq_free(s4);
	kvmemd_admin_ok(&p, out, sizeof(out), "status");
	ck_assert_uint_eq(kvmemd_json_u64(out, "sessions"), 2);

	kvmem_seq_free(s1);
	kvmem_seq_free(s2);
	kvmem_seq_free(s3);
	kvmem_seq_free(r1);
	kvmem_seq_free(r2);
	kvmem_seq_free(r3);
	kvmem_close(e);
	kvmem_close(a);
	kvmem_close(b);
	free(k);
	free(v);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * The same two clients, with kill -9 where the stop was: the sessions come
 * back from their records, every sequence attends as before (cold pages
 * included), and go on; twice, and then an orderly restart.
 */
START_TEST(test_resume_after_kill)
{
	struct kvmem_cache *a, *b, *e;
	struct kvmem_seq *s1, *s2, *s3, *r1, *r2, *r3;
	struct kvmem_rng r;
	struct kvmem_stats before[2], after;
	struct kvmemd_proc p;
	char out[8192];
	float *k, *v;
	int round;

	kvmem_rng_seed(&r, 2011);
	kvmemd_tokens(&r, 200, &k, &v);
	kvmemd_start(&p, STORE_CONF, NULL);
	a = kvmemd_connect(&p, 4u << 20);
	b = kvmemd_connect(&p, 4u << 20);
	s1 = kvmemd_seq_with(a, k, v, 200);
	s2 = kvmemd_seq_with(a, k + 64, v + 64, 70);
	s3 = kvmemd_seq_with(b, v, k, 130);
	r1 = kvmemd_reference(&e, k, v, 200);
	r2 = kvmemd_seq_with(e, k + 64, v + 64, 70);
	r3 = kvmemd_seq_with(e, v, k, 130);
	ck_assert_int_eq(kvmem_seq_release(s1), 0);
	kvmemd_admin_ok(&p, out, sizeof(out), "offload pool");
	ck_assert_uint_gt(stats(a).cold_pages, 0);

	for (round = 0; round < 3; round++) {
		before[0] = stats(a);
		before[1] = stats(b);
		if (round < 2)
			kvmemd_kill(&p);
		else
			ck_assert_int_eq(kvmemd_stop_keep(&p), 0);
		ck_assert_int_eq(kvmemd_stored(&p, "session-"), 2);
		ck_assert(lost(a));
		ck_assert(lost(b));
		kvmemd_restart(&p, NULL);
		ck_assert_int_eq(kvmemd_log_lines(&p, "kept sessions wait for "
						      "their clients"),
				 1);
		ck_assert_int_eq(kvmemd_log_lines(&p, "(a crash?)"),
				 round < 2 ? 2 : 0);
		ck_assert_int_eq(kvmem_reconnect(a), 0);
		ck_assert_int_eq(kvmem_reconnect(b), 0);
		after = stats(a);
		same_holdings(&after, &before[0]);
		after = stats(b);
		same_holdings(&after, &before[1]);
		ck_assert_int_eq(kvmem_seq_acquire(s1), 0);
		kvmemd_expect_same(s1, r1, &r);
		kvmemd_expect_same(s2, r2, &r);
		kvmemd_expect_same(s3, r3, &r);
		ck_assert_int_eq(kvmem_seq_append_all(s2, k, v, 40), 0);
		ck_assert_int_eq(kvmem_seq_append_all(r2, k, v, 40), 0);
		kvmemd_expect_same(s2, r2, &r);
		ck_assert_int_eq(kvmem_seq_release(s1), 0);
	}

	kvmem_seq_free(s1);
	kvmem_seq_free(s2);
	kvmem_seq_free(s3);
	kvmem_seq_free(r1);
	kvmem_seq_free(r2);
	kvmem_seq_free(r3);
	kvmem_close(e);
	kvmem_close(a);
	kvmem_close(b);
	free(k);
	free(v);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* ---- live records refused ------------------------------------------ */

/* The layout of a record's header, as kvmemd writes it (daemon/resume.c). */
#define REC_VERSION_OFF 8
#define REC_CRC_OFF 68

/* Session @id's live record @n's path; 0 when it is not there. */
static int live_rec(const struct kvmemd_proc *p, uint32_t id, int n, char *path,
		    size_t len)
{
	struct stat st;

	snprintf(path, len, "%s/state/session-%u.%d.rec", p->dir, id, n);
	return !stat(path, &st);
}

/* Each live record of session @id: a byte of its body flipped. */
static void live_damage(const struct kvmemd_proc *p, uint32_t id)
{
	char path[300];
	uint8_t byte;
	int n, fd;

	for (n = 0; n < 2; n++) {
		if (!live_rec(p, id, n, path, sizeof(path)))
			continue;
		fd = open(path, O_RDWR);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(pread(fd, &byte, 1, 200), 1);
		byte ^= 0x10;
		ck_assert_int_eq(pwrite(fd, &byte, 1, 200), 1);
		close(fd);
	}
}

/* Each live record of session @id says another version wrote it, its
 * header's checksum made right again. */
static void live_version(const struct kvmemd_proc *p, uint32_t id)
{
	uint8_t h[REC_CRC_OFF];
	uint32_t v = 1, crc;
	char path[300];
	int n, fd;

	for (n = 0; n < 2; n++) {
		if (!live_rec(p, id, n, path, sizeof(path)))
			continue;
		fd = open(path, O_RDWR);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(pread(fd, h, sizeof(h), 0), sizeof(h));
		memcpy(h + REC_VERSION_OFF, &v, sizeof(v));
		crc = kvmem_crc32c(0, h, sizeof(h));
		ck_assert_int_eq(pwrite(fd, h, sizeof(h), 0), sizeof(h));
		ck_assert_int_eq(pwrite(fd, &crc, sizeof(crc), REC_CRC_OFF),
				 sizeof(crc));
		close(fd);
	}
}

/* Session @to's live records become copies of session @from's. */
static void live_copy(const struct kvmemd_proc *p, uint32_t from, uint32_t to)
{
	char src[300], dst[300];
	size_t len;
	char *text;
	int n, fd;

	for (n = 0; n < 2; n++) {
		live_rec(p, to, n, dst, sizeof(dst));
		unlink(dst);
		if (!live_rec(p, from, n, src, sizeof(src)))
			continue;
		text = kvmem_check_read_file(src, &len);
		fd = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		ck_assert_int_ge(fd, 0);
		ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
		close(fd);
		free(text);
	}
}

static void live_remove(const struct kvmemd_proc *p, uint32_t id)
{
	char path[300];
	int n;

	for (n = 0; n < 2; n++)
		if (live_rec(p, id, n, path, sizeof(path)))
			ck_assert_int_eq(unlink(path), 0);
}

/*
 * After kill -9, records that do not verify, that another version wrote,
 * that are another session's or that are gone: each such session is
 * refused with a sentence, its memfd closed and out of the store; the
 * session whose records are whole comes back bit-exact.
 */
START_TEST(test_resume_live_records_refused)
{
	struct kvmem_cache *c[5], *e;
	struct kvmem_seq *s[5], *ref;
	struct kvmemd_proc p;
	char out[4096];
	struct kvmem_rng r;
	float *k, *v;
	int i;

	kvmem_rng_seed(&r, 2014);
	kvmemd_tokens(&r, 70, &k, &v);
	kvmemd_start(&p, NULL, NULL);
	for (i = 0; i < 5; i++) {
		c[i] = kvmemd_connect(&p, 4u << 20);
		s[i] = kvmemd_seq_with(c[i], k, v, 70);
	}
	ref = kvmemd_reference(&e, k, v, 70);
	ck_assert_int_eq(stored_sessions(&p, 5), 5);
	kvmemd_kill(&p);
	live_copy(&p, 1, 2);
	live_damage(&p, 1);
	live_version(&p, 3);
	live_remove(&p, 4);
	kvmemd_restart(&p, NULL);

	ck_assert_int_eq(kvmemd_log_lines(&p, "session 1: neither of its "
					      "records is one to take back"),
			 1);
	ck_assert_int_eq(kvmemd_log_lines(&p, "not the record of session 2 "
					      "alone"),
			 1);
	ck_assert_int_eq(kvmemd_log_lines(&p, "written by another version"), 1);
	ck_assert_int_eq(kvmemd_log_lines(&p, "4 kept session memfds passed "
					      "back with no record"),
			 1);
	kvmemd_admin_ok(&p, out, sizeof(out), "status");
	ck_assert_uint_eq(kvmemd_json_after(out, "\"restart\"", "taken_back"),
			  1);
	ck_assert_uint_eq(kvmemd_json_after(out, "\"restart\"", "after_crash"),
			  1);
	ck_assert_uint_eq(kvmemd_json_after(out, "\"restart\"", "refused"), 4);
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(kvmem_reconnect(c[i]), -ESTALE);
	ck_assert_int_eq(kvmem_reconnect(c[4]), 0);
	kvmemd_expect_same(s[4], ref, &r);
	ck_assert_int_eq(stored_sessions(&p, 1), 1);
	ck_assert_int_eq(kvmemd_stored(&p, "session-5"), 1);
	/* Nothing is left of those refused. */
	for (i = 1; i <= 4; i++) {
		char path[300];

		ck_assert(!live_rec(&p, (uint32_t)i, 0, path, sizeof(path)));
		ck_assert(!live_rec(&p, (uint32_t)i, 1, path, sizeof(path)));
	}

	for (i = 0; i < 5; i++) {
		kvmem_seq_free(s[i]);
		kvmem_close(c[i]);
	}
	kvmem_seq_free(ref);
	kvmem_close(e);
	free(k);
	free(v);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * A state directory that takes no record (here: directories where session
 * 1's records go; a full disk does the same): the session runs without
 * one, said once in the log, its completions not held back; killed, it is
 * not taken back, and session 2, whose records are written, is.
 */
START_TEST(test_resume_record_unwritable)
{
	struct kvmem_cache *a, *b, *e;
	struct kvmem_seq *s1, *s2, *ref;
	struct kvmemd_proc p;
	struct kvmem_rng r;
	char path[300];
	float *k, *v;
	int n;

	kvmem_rng_seed(&r, 2015);
	kvmemd_tokens(&r, 70, &k, &v);
	kvmemd_start(&p, NULL, NULL);
	for (n = 0; n < 2; n++) {
		live_rec(&p, 1, n, path, sizeof(path));
		ck_assert_int_eq(mkdir(path, 0700), 0);
	}
	a = kvmemd_connect(&p, 4u << 20);
	s1 = kvmemd_seq_with(a, k, v, 70);
	b = kvmemd_connect(&p, 4u << 20);
	s2 = kvmemd_seq_with(b, k, v, 70);
	ref = kvmemd_reference(&e, k, v, 70);
	kvmemd_expect_same(s1, ref, &r);
	ck_assert_int_eq(kvmemd_log_lines(&p, "session 1: writing its record"),
			 1);
	ck_assert_int_eq(kvmemd_log_lines(&p, "session 2: writing its record"),
			 0);
	kvmemd_kill(&p);
	kvmemd_restart(&p, NULL);
	ck_assert_int_eq(kvmem_reconnect(a), -ESTALE);
	ck_assert_int_eq(kvmem_reconnect(b), 0);
	kvmemd_expect_same(s2, ref, &r);

	kvmem_seq_free(s1);
	kvmem_seq_free(s2);
	kvmem_seq_free(ref);
	kvmem_close(a);
	kvmem_close(b);
	kvmem_close(e);
	free(k);
	free(v);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* ---- kill -9 at random moments ------------------------------------- */

#define KILL_SEQS 3
#define KILL_SEQ_MAX 400 /* tokens a layer: then the sequence starts anew */

/* A sequence of the kill loop, and every token tried on each layer. */
struct kill_seq {
	struct kvmem_seq *s;
	float *k[2], *v[2]; /* [layer]: rows of [kv_heads][head_dim] */
	uint32_t n[2]; /* tokens in k, v: the sequence has a prefix of them */
	uint32_t gen; /* its blocks are published under keys of this */
};

/* Blocks a sequence of KILL_SEQ_MAX tokens holds at most, and more. */
#define KILL_BLOCKS (KILL_SEQ_MAX / 32 + 2)

/* The keys of sequence @i's blocks in its generation @gen. */
static void kill_keys(struct kvmem_prefix_key *keys, unsigned int i,
		      uint32_t gen)
{
	unsigned int b;

	memset(keys, 0, KILL_BLOCKS * sizeof(*keys));
	for (b = 0; b < KILL_BLOCKS; b++) {
		keys[b].bytes[0] = (uint8_t)i;
		memcpy(&keys[b].bytes[1], &gen, sizeof(gen));
		keys[b].bytes[5] = (uint8_t)b;
		keys[b].bytes[31] = 0x77;
	}
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Send @req to the admin socket, which may be gone: its descriptor, or
 * -1. */
static int admin_try(const struct kvmemd_proc *p, const char *req)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", p->admin);
	if (fd >= 0 && (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
			send(fd, req, strlen(req), MSG_NOSIGNAL) < 0)) {
		close(fd);
		fd = -1;
	}
	return fd;
}

struct killer {
	pid_t pid;
	unsigned int delay_us;
};

static void *killer_run(void *arg)
{
	const struct killer *k = arg;

	usleep(k->delay_us);
	kill(k->pid, SIGKILL);
	return NULL;
}

/* @ntok tokens of @t (rows of [layers][heads][dim]) tried on @q's layers. */
static void kill_seq_try(struct kill_seq *q, const float *k, const float *v,
			 uint32_t ntok)
{
	const struct kvmem_geometry g = kvmemd_test_geo();
	const size_t row = (size_t)g.kv_heads * g.head_dim;
	uint32_t l, t;

	for (l = 0; l < g.layers; l++)
		for (t = 0; t < ntok; t++, q->n[l]++) {
			memcpy(q->k[l] + q->n[l] * row,
			       k + ((size_t)t * g.layers + l) * row,
			       row * sizeof(float));
			memcpy(q->v[l] + q->n[l] * row,
			       v + ((size_t)t * g.layers + l) * row,
			       row * sizeof(float));
		}
}

/*
 * Tokens 0 to @len[l] of each layer l of @s, page by page, against what
 * was tried on @q: the values of an embedded cache given the same tokens,
 * or flagged as erased. Return: pages flagged.
 */
static unsigned int kill_seq_compare(struct kvmem_seq *s,
				     const struct kill_seq *q,
				     const uint32_t len[2])
{
	const struct kvmem_geometry g = kvmemd_test_geo();
	const size_t row = (size_t)g.kv_heads * g.head_dim;
	const uint32_t tpp = g.tokens_per_page;
	struct kvmem_page_counts c;
	struct kvmem_cache *e;
	struct kvmem_seq *ref;
	float *ka, *va, *kb, *vb;
	uint32_t l, t, n;
	unsigned int flagged = 0;

	ck_assert_int_eq(kvmem_open_embedded(&g, 8u << 20, &e), 0);
	ck_assert_int_eq(kvmem_seq_create(e, &ref), 0);
	ka = kvmem_check_xmalloc(tpp * row * sizeof(float));
	va = kvmem_check_xmalloc(tpp * row * sizeof(float));
	kb = kvmem_check_xmalloc(tpp * row * sizeof(float));
	vb = kvmem_check_xmalloc(tpp * row * sizeof(float));
	for (l = 0; l < g.layers; l++) {
		if (len[l])
			ck_assert_int_eq(kvmem_seq_append(ref, l, q->k[l],
							  q->v[l], len[l]),
					 0);
		for (t = 0; t < len[l]; t += n) {
			n = len[l] - t < tpp ? len[l] - t : tpp;
			memset(&c, 0, sizeof(c));
			ck_assert_int_eq(
				kvmem_seq_read(s, l, t, n, 0, ka, va, &c), 0);
			ck_assert_int_eq(
				kvmem_seq_read(ref, l, t, n, 0, kb, vb, NULL),
				0);
			if (c.values_erased) {
				flagged++;
				continue;
			}
			EXPECT_MEM(ka, kb, n * row * sizeof(float),
				   "K of layer %u, tokens %u..", l, t);
			EXPECT_MEM(va, vb, n * row * sizeof(float),
				   "V of layer %u, tokens %u..", l, t);
		}
	}
	free(ka);
	free(va);
	free(kb);
	free(vb);
	kvmem_seq_free(ref);
	kvmem_close(e);
	return flagged;
}

/*
 * After a restart: each layer of @q holds a prefix of what was tried on it,
 * no shorter than @held, and reads as kill_seq_compare() says. Return:
 * pages flagged.
 */
static unsigned int kill_seq_check(struct kill_seq *q, const uint32_t held[2])
{
	const struct kvmem_geometry g = kvmemd_test_geo();
	uint32_t l, len[2] = { 0, 0 };

	for (l = 0; l < g.layers; l++) {
		len[l] = kvmem_seq_len(q->s, l);
		ck_assert_uint_le(len[l], q->n[l]);
		ck_assert_uint_ge(len[l], held[l]);
		q->n[l] = len[l];
	}
	return kill_seq_compare(q->s, q, len);
}

/*
 * What @a attaches of the blocks sequence @i of @q published in its
 * generation: a prefix of what was tried on it, read as
 * kill_seq_compare() says. Return: 0 with the pages flagged added to
 * *@flagged, or the attach's error.
 */
static int kill_attach_check(struct kvmem_cache *a, const struct kill_seq *q,
			     unsigned int i, unsigned int *flagged)
{
	struct kvmem_prefix_key keys[KILL_BLOCKS];
	uint32_t len[2];
	struct kvmem_seq *t;
	int m;

	kill_keys(keys, i, q->gen);
	m = kvmem_prefix_attach(a, keys, KILL_BLOCKS, &t);
	if (m < 0)
		return m;
	len[0] = len[1] = (uint32_t)m;
	ck_assert_uint_le(len[0], q->n[0]);
	ck_assert_uint_le(len[1], q->n[1]);
	*flagged += kill_seq_compare(t, q, len);
	kvmem_seq_free(t);
	return 0;
}

/*
 * kill -9 at a random moment of appends (seals), releases and acquires,
 * offloads to the store and reads back, publishes and attaches of
 * prefixes, over and over, with a restart after each: the client takes
 * its session back every time, nothing it was told is kept is missing,
 * and every page, of the session's sequences and of the prefixes kept
 * across the crash alike (in memfds, or every other round only on the
 * backing store), reads as an embedded cache given the same tokens does,
 * or flagged as erased: never different unflagged.
 * KVMEM_KILL_ROUNDS sets the rounds (default 25).
 */
START_TEST(test_resume_kill_loop)
{
	const struct kvmem_geometry g = kvmemd_test_geo();
	const size_t row = (size_t)g.kv_heads * g.head_dim;
	const char *env = getenv("KVMEM_KILL_ROUNDS");
	const unsigned int rounds = env ? (unsigned int)atoi(env) : 25;
	struct kill_seq q[KILL_SEQS];
	uint32_t held[KILL_SEQS][2];
	unsigned int round, i, flagged = 0;
	unsigned long long tokens = 0, offloads = 0, from_store = 0;
	unsigned int published = 0, attached = 0;
	char out[8192];
	struct kvmem_cache *a;
	struct kvmemd_proc p;
	struct kvmem_rng r;
	struct killer kl;
	pthread_t th;
	uint64_t start;
	float *k, *v;
	int ret, fd;

	kvmem_rng_seed(&r, 2013);
	kvmemd_start(&p, STORE_CONF, NULL);
	a = kvmemd_connect(&p, 4u << 20);
	memset(q, 0, sizeof(q));
	for (i = 0; i < KILL_SEQS; i++) {
		ck_assert_int_eq(kvmem_seq_create(a, &q[i].s), 0);
		for (int l = 0; l < 2; l++) {
			q[i].k[l] = kvmem_check_xmalloc((KILL_SEQ_MAX + 64) *
							row * sizeof(float));
			q[i].v[l] = kvmem_check_xmalloc((KILL_SEQ_MAX + 64) *
							row * sizeof(float));
		}
	}
	for (round = 0; round < rounds; round++) {
		for (i = 0; i < KILL_SEQS; i++) {
			held[i][0] = kvmem_seq_len(q[i].s, 0);
			held[i][1] = kvmem_seq_len(q[i].s, 1);
		}
		kl.pid = p.pid;
		kl.delay_us = (unsigned int)kvmem_rng_below(&r, 40000);
		ck_assert_int_eq(pthread_create(&th, NULL, killer_run, &kl), 0);
		fd = -1;
		for (start = mono_ns(), ret = 0;
		     !ret && mono_ns() - start < 2000000000ull;) {
			struct kill_seq *x = &q[kvmem_rng_below(&r, KILL_SEQS)];
			uint32_t ntok = 1 + (uint32_t)kvmem_rng_below(&r, 40);

			switch (kvmem_rng_below(&r, 10)) {
			case 0:
				ret = kvmem_seq_release(x->s);
				if (!ret)
					ret = kvmem_seq_acquire(x->s);
				break;
			case 2: {
				struct kvmem_prefix_key keys[KILL_BLOCKS];

				kill_keys(keys, (unsigned int)(x - q), x->gen);
				ret = kvmem_prefix_publish(x->s, keys,
							   KILL_BLOCKS);
				published += ret > 0 ? (unsigned int)ret : 0;
				/* Full, or nothing whole yet: no crash. */
				if (ret >= 0 || ret == -ENOSPC ||
				    ret == -EDQUOT || ret == -ENOMEM)
					ret = 0;
				break;
			}
			case 3:
				ret = kill_attach_check(
					a, x, (unsigned int)(x - q), &flagged);
				attached += !ret;
				if (ret == -ENOMEM)
					ret = 0;
				break;
			case 1:
				if (fd < 0) {
					fd = admin_try(&p, "offload pool");
					offloads += fd >= 0;
				}
				break;
			default:
				if (x->n[0] + ntok > KILL_SEQ_MAX ||
				    x->n[1] + ntok > KILL_SEQ_MAX)
					break;
				kvmemd_tokens(&r, ntok, &k, &v);
				kill_seq_try(x, k, v, ntok);
				ret = kvmem_seq_append_all(x->s, k, v, ntok);
				tokens += ret ? 0 : ntok;
				free(k);
				free(v);
				/* A full arena is no crash: start anew. */
				if (ret == -ENOMEM)
					ret = 0;
			}
			if (!ret)
				for (i = 0; i < KILL_SEQS; i++) {
					held[i][0] = kvmem_seq_len(q[i].s, 0);
					held[i][1] = kvmem_seq_len(q[i].s, 1);
				}
		}
		pthread_join(th, NULL);
		if (fd >= 0)
			close(fd);
		kvmemd_kill(&p);
		/* Every other round the prefixes' memfds are lost: they come
		 * back from the backing store. */
		if (round % 2)
			kvmemd_store_lose(&p, "prefix-");
		kvmemd_restart(&p, NULL);
		kvmemd_admin_ok(&p, out, sizeof(out), "tier");
		from_store +=
			kvmemd_json_after(out, "\"store_prefixes\"", "taken");
		ck_assert_msg(kvmem_reconnect(a) == 0, "round %u: %s", round,
			      kvmem_connect_error());
		for (i = 0; i < KILL_SEQS; i++) {
			flagged += kill_seq_check(&q[i], held[i]);
			/* What was published before the crash, kept. */
			ret = kill_attach_check(a, &q[i], i, &flagged);
			ck_assert_msg(!ret || ret == -ENOMEM,
				      "round %u: attach: %s", round,
				      strerror(-ret));
			if (q[i].n[0] + 64 < KILL_SEQ_MAX &&
			    q[i].n[1] + 64 < KILL_SEQ_MAX)
				continue;
			kvmem_seq_free(q[i].s);
			ck_assert_int_eq(kvmem_seq_create(a, &q[i].s), 0);
			q[i].n[0] = q[i].n[1] = 0;
			q[i].gen++;
		}
		/* A released sequence is acquired again for the next round. */
		for (i = 0; i < KILL_SEQS; i++)
			kvmem_seq_acquire(q[i].s);
	}
	fprintf(stderr,
		"kill loop: %u rounds, %llu tokens appended, %llu offloads "
		"asked, %u blocks published, %llu read back from the store, "
		"%u attaches checked, %u pages flagged as erased\n",
		rounds, tokens, offloads, published, from_store, attached,
		flagged);
	/* The rounds that lost the memfds took blocks from the store. */
	if (rounds >= 4 && published)
		ck_assert_uint_gt(from_store, 0);
	for (i = 0; i < KILL_SEQS; i++) {
		kvmem_seq_free(q[i].s);
		for (int l = 0; l < 2; l++) {
			free(q[i].k[l]);
			free(q[i].v[l]);
		}
	}
	kvmem_close(a);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* A client that comes back before the new kvmemd listens waits for it. */
START_TEST(test_resume_waits_for_the_daemon)
{
	struct one x;
	int status;
	pid_t pid;

	one_start(&x, NULL, 2004, 40);
	ck_assert_int_eq(kvmemd_stop_keep(&x.p), 0);
	ck_assert(lost(x.a));
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid)
		_exit(kvmem_reconnect(x.a) || lost(x.a) ||
				      kvmem_seq_len(x.s, 1) != 40
			      ? 1
			      : 0);
	usleep(300000);
	kvmemd_restart(&x.p, NULL);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && !WEXITSTATUS(status),
		      "reconnect before the daemon was up: status 0x%x",
		      status);
	ck_assert_int_eq(kvmemd_log_lines(&x.p, "taken back by pid"), 1);
	one_stop(&x);
}
END_TEST

/*
 * A session whose client did not come back between two restarts is kept
 * again by the second, and the record and the store's memfds are gone
 * once a kvmemd serves.
 */
START_TEST(test_resume_two_restarts)
{
	char path[300], out[4096];
	struct one x;

	one_start(&x, NULL, 2006, 70);
	ck_assert_int_eq(kvmemd_stop_keep(&x.p), 0);
	kvmemd_restart(&x.p, NULL);
	snprintf(path, sizeof(path), "%s/state/sessions.kept", x.p.dir);
	ck_assert_int_ne(access(path, F_OK), 0);
	ck_assert_int_eq(kvmemd_stop_keep(&x.p), 0);
	ck_assert_int_eq(x.p.nstored, 1);
	ck_assert_int_eq(access(path, F_OK), 0);
	kvmemd_restart(&x.p, NULL);
	kvmemd_admin_ok(&x.p, out, sizeof(out), "status");
	ck_assert_uint_eq(kvmemd_json_u64(out, "kept_sessions"), 1);
	ck_assert_uint_eq(kvmemd_json_u64(out, "sessions"), 1);
	ck_assert_int_eq(kvmem_reconnect(x.a), 0);
	kvmemd_admin_ok(&x.p, out, sizeof(out), "status");
	ck_assert_uint_eq(kvmemd_json_u64(out, "kept_sessions"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(out, "sessions"), 1);
	kvmemd_expect_same(x.s, x.ref, &x.r);
	one_stop(&x);
}
END_TEST

/*
 * An append the restart cut short goes on after kvmem_reconnect() from
 * where kvmem_seq_len() says it stopped, as docs/kvmemd.md shows, and the
 * sequence ends up the one an uncut append makes.
 */
START_TEST(test_resume_append_goes_on)
{
	const struct kvmem_geometry g = kvmemd_test_geo();
	const size_t row = (size_t)g.kv_heads * g.head_dim;
	struct kvmem_cache *a, *e;
	struct kvmem_seq *s, *ref;
	struct kvmem_rng r;
	struct kvmemd_proc p;
	uint32_t l, len, done;
	float *k, *v;
	int ret, cut = 0;

	kvmem_rng_seed(&r, 2007);
	kvmemd_tokens(&r, 100, &k, &v);
	kvmemd_start(&p, NULL, NULL);
	a = kvmemd_connect(&p, 4u << 20);
	ck_assert_int_eq(kvmem_seq_create(a, &s), 0);
	ck_assert_int_eq(kvmem_open_embedded(&g, 8u << 20, &e), 0);
	ck_assert_int_eq(kvmem_seq_create(e, &ref), 0);
	for (l = 0; l < g.layers; l++) {
		ck_assert_int_eq(kvmem_seq_append(s, l, k + l * 100 * row,
						  v + l * 100 * row, 30),
				 0);
		ck_assert_int_eq(kvmem_seq_append(ref, l, k + l * 100 * row,
						  v + l * 100 * row, 100),
				 0);
	}
	ck_assert_int_eq(kvmemd_stop_keep(&p), 0);
	kvmemd_restart(&p, NULL);
	for (l = 0; l < g.layers; l++) {
		const float *kl = k + l * 100 * row, *vl = v + l * 100 * row;

		len = kvmem_seq_len(s, l);
		/* Past a page's end: the seal needs the daemon. */
		ret = kvmem_seq_append(s, l, kl + len * row, vl + len * row,
				       100 - len);
		cut += ret == -ENOTCONN;
		if (ret == -ENOTCONN && kvmem_reconnect(a) == 0) {
			done = kvmem_seq_len(s, l) - len;
			ret = kvmem_seq_append(s, l, kl + (len + done) * row,
					       vl + (len + done) * row,
					       100 - len - done);
		}
		ck_assert_int_eq(ret, 0);
		ck_assert_uint_eq(kvmem_seq_len(s, l), 100);
	}
	ck_assert_int_eq(cut, 1);
	kvmemd_expect_same(s, ref, &r);

	kvmem_seq_free(s);
	kvmem_seq_free(ref);
	kvmem_close(e);
	kvmem_close(a);
	free(k);
	free(v);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * The pages a session gets back are checked before it does: bits flipped
 * while no kvmemd ran (the patrol is off here) are corrected, or the page
 * is marked degraded, by the time the client takes the session back.
 */
START_TEST(test_resume_pages_checked)
{
	const struct kvmem_geometry g = kvmemd_test_geo();
	struct kvmem_page_desc d[8];
	struct kvmem_page_layout l;
	struct kvmem_stats st;
	uint8_t *page, orig;
	struct one x;
	int n;

	one_start(&x, "[scrub]\nrate = 0\n", 2005, 100);
	st = stats(x.a);
	ck_assert_uint_eq(st.ce_words + st.ue_words + st.degraded_pages, 0);
	ck_assert_int_eq(kvmemd_stop_keep(&x.p), 0);

	/* Layer 0: the first page of 32 tokens, two flips in one h84 word
	 * of its K; the second, one flip. */
	kvmem_page_layout(&g, 0, &l);
	n = kvmem_seq_pages(x.s, 0, d, 8);
	ck_assert_int_ge(n, 3);
	ck_assert(d[1].sealed && d[2].sealed && !d[1].hot && !d[2].hot);
	page = d[1].data;
	page[l.k_off + 3] ^= 0x11;
	page = d[2].data;
	orig = page[l.k_off + 9];
	page[l.k_off + 9] ^= 0x04;

	kvmemd_restart(&x.p, NULL);
	ck_assert_int_eq(kvmem_reconnect(x.a), 0);
	st = stats(x.a);
	ck_assert_uint_eq(st.ce_words, 1);
	ck_assert_uint_ge(st.ue_words, 1);
	ck_assert_uint_eq(st.degraded_pages, 1);
	/* Corrected where it lies, not only as it is read. */
	ck_assert_uint_eq(page[l.k_off + 9], orig);

	one_stop(&x);
}
END_TEST

/*
 * A kvmemd restarted on another store: the same file formatted anew
 * (store.reformat, another size), where the bytes of the old pages still
 * lie, under another uuid. A session whose cold pages went to the old
 * store is not taken back, never served from units nothing vouches for;
 * a session whose pages are all in memory is taken back as it was.
 */
START_TEST(test_resume_on_another_store)
{
	struct kvmem_cache *b;
	struct kvmem_seq *sb;
	char out[4096];
	struct one x;

	one_start(&x, STORE_CONF, 2008, 200);
	b = kvmemd_connect(&x.p, 4u << 20);
	sb = kvmemd_seq_with(b, x.k, x.v, 200);
	ck_assert_int_eq(kvmem_seq_release(x.s), 0);
	kvmemd_admin_ok(&x.p, out, sizeof(out), "offload pool");
	ck_assert_uint_gt(stats(x.a).cold_pages, 0);
	ck_assert_uint_eq(stats(b).cold_pages, 0);
	ck_assert_int_eq(kvmemd_stop_keep(&x.p), 0);
	ck_assert_int_eq(x.p.nstored, 2);

	kvmemd_write_conf(&x.p, "[store]\npath = @DIR@/store\nsize = 128M\n"
				"reformat = yes\n");
	kvmemd_restart(&x.p, NULL);
	ck_assert_int_eq(kvmemd_log_lines(&x.p, "formatting (store.reformat)"),
			 1);
	ck_assert_int_eq(kvmem_reconnect(x.a), -ESTALE);
	ck_assert_int_eq(kvmemd_log_lines(&x.p, "or the store is not the one "
						"it left for"),
			 1);
	ck_assert_int_eq(kvmemd_log_lines(&x.p, "1 kept sessions wait for "
						"their clients"),
			 1);
	ck_assert_int_eq(kvmem_reconnect(b), 0);
	kvmemd_expect_same(sb, x.ref, &x.r);
	kvmemd_admin_ok(&x.p, out, sizeof(out), "status");
	ck_assert_uint_eq(kvmemd_json_u64(out, "sessions"), 1);

	kvmem_seq_free(sb);
	kvmem_close(b);
	one_stop(&x);
}
END_TEST

/* The store units in use, as kvmemctl tier says. */
static unsigned long long store_units_used(const struct kvmemd_proc *p)
{
	char out[16384];

	kvmemd_admin_ok(p, out, sizeof(out), "tier");
	return kvmemd_json_after(out, "\"store\"", "used_units");
}

/*
 * Regression: the store units of pages read back were freed as soon as
 * the session's next live record was written, though the record before
 * it, the other one on disk, still named them. The ring heads that pick
 * one of the two after a crash are in the client's memory: a client that
 * rewound them had a restart take the older record and claim units that
 * another session's pages were written to since (its pages lost, or that
 * session refused). A unit now waits until neither record names it: still
 * in use when the acquire that read it back completes (its record is the
 * newer; pages read in an earlier pass may be in neither record by then),
 * free once one more record is written.
 */
START_TEST(test_resume_units_wait_for_both_records)
{
	unsigned long long cold, held;
	char out[4096];
	struct one x;

	one_start(&x, STORE_CONF, 2012, 200);
	ck_assert_int_eq(kvmem_seq_release(x.s), 0);
	kvmemd_admin_ok(&x.p, out, sizeof(out), "offload pool");
	ck_assert_uint_gt(stats(x.a).cold_pages, 0);
	cold = store_units_used(&x.p);
	ck_assert_uint_gt(cold, 0);
	ck_assert_int_eq(kvmem_seq_acquire(x.s), 0);
	/* The pages read back in the acquire's last pass are in the record
	 * before its own (earlier ones may be in neither by then). */
	held = store_units_used(&x.p);
	ck_assert_uint_gt(held, 0);
	ck_assert_uint_le(held, cold);
	/* One more record, the stats op's: in neither now. */
	ck_assert_uint_eq(stats(x.a).cold_pages, 0);
	ck_assert_uint_eq(store_units_used(&x.p), 0);
	kvmemd_expect_same(x.s, x.ref, &x.r);
	one_stop(&x);
}
END_TEST

/*
 * An op of the raw ring published after the old kvmemd stopped, whose
 * caller the library then told the connection was lost: the new kvmemd
 * does not run it, and no completion comes for it.
 */
START_TEST(test_resume_unsent_ops_dropped)
{
	struct kvmem_cache *a;
	struct kvmem_sqe *e;
	struct kvmem_cqe cqe;
	struct kvmemd_proc p;
	uint64_t seqs;

	kvmemd_start(&p, NULL, NULL);
	a = kvmemd_connect(&p, 4u << 20);
	seqs = stats(a).seqs;
	ck_assert_int_eq(kvmemd_stop_keep(&p), 0);
	/* Not noticed yet: published into the ring of a daemon that is
	 * gone. */
	e = kvmem_ring_sqe(a);
	ck_assert_ptr_nonnull(e);
	e->opcode = KVMEM_OP_SEQ_CREATE;
	e->user_data = 77;
	ck_assert_int_eq(kvmem_ring_submit(a), 1);
	ck_assert_int_eq(kvmem_ring_wait(a, &cqe, 100), -ENOTCONN);
	kvmemd_restart(&p, NULL);
	ck_assert_int_eq(kvmem_reconnect(a), 0);
	ck_assert_uint_eq(stats(a).seqs, seqs);
	ck_assert_int_eq(kvmem_ring_wait(a, &cqe, 200), 0);
	/* The ring goes on. */
	e = kvmem_ring_sqe(a);
	ck_assert_ptr_nonnull(e);
	e->opcode = KVMEM_OP_NOP;
	e->user_data = 78;
	ck_assert_int_eq(kvmem_ring_submit(a), 1);
	ck_assert_int_eq(kvmem_ring_wait(a, &cqe, 10000), 1);
	ck_assert_uint_eq(cqe.user_data, 78);
	ck_assert_int_eq(cqe.res, 0);
	kvmem_close(a);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* A resume hello with @token for session @id: the welcome's error. */
static int resume_as(const struct kvmemd_proc *p, uint32_t id, uint64_t token)
{
	struct kvmem_hello h = kvmemd_hello(4u << 20);
	struct kvmemd_raw raw;
	int ret;

	h.resume_session = id;
	h.resume_token = token;
	ret = kvmemd_raw_attach(&raw, p, &h, sizeof(h));
	if (!ret)
		kvmemd_raw_detach(&raw);
	return ret;
}

/*
 * Only the session's own client gets it back: a wrong token, a wrong id,
 * one field without the other and another uid are refused alike, and the
 * session still waits for the right one.
 */
START_TEST(test_resume_refused_to_others)
{
	char conf[64];
	struct one x;
	uint32_t id;
	int status;
	pid_t pid;

	/* This uid (root, or an ordinary user) and the other one. */
	snprintf(conf, sizeof(conf), "[daemon]\nallow_uids = %u 4242\n",
		 (unsigned int)geteuid());
	one_start(&x, conf, 2002, 70);
	id = kvmem_session_id(x.a);
	ck_assert_int_eq(kvmemd_stop_keep(&x.p), 0);
	kvmemd_restart(&x.p, NULL);
	chmod(x.p.dir, 0755);
	chmod(x.p.sock, 0666);

	ck_assert_int_eq(resume_as(&x.p, id, 1), -ESTALE);
	ck_assert_int_eq(resume_as(&x.p, id + 1, 1), -ESTALE);
	ck_assert_int_eq(resume_as(&x.p, id, 0), -EINVAL);
	ck_assert_int_eq(resume_as(&x.p, 0, 1), -EINVAL);
	if (geteuid()) {
		fprintf(stderr, "SKIP: test_resume_refused_to_others: another "
				"uid needs root; that another uid cannot take "
				"the session back went untested\n");
	} else {
		/* The right id and token, from another uid. */
		ck_assert(lost(x.a));
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (!pid) {
			if (setgid(4242) || setuid(4242))
				_exit(3);
			_exit(kvmem_reconnect(x.a) == -ESTALE ? 0 : 4);
		}
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		ck_assert_msg(WIFEXITED(status) && !WEXITSTATUS(status),
			      "another uid's reconnect: status 0x%x", status);
		ck_assert_int_eq(kvmemd_log_lines(&x.p, "uid 4242: kvmemd kept "
							"no such session"),
				 1);
	}
	ck_assert_int_eq(kvmem_reconnect(x.a), 0);
	kvmemd_expect_same(x.s, x.ref, &x.r);
	/* Connected: nothing to do. */
	ck_assert_int_eq(kvmem_reconnect(x.a), 0);
	ck_assert(!lost(x.a));

	one_stop(&x);
}
END_TEST

/* Flip one byte of the state record, at @off from its end. */
static void record_flip(const struct kvmemd_proc *p, off_t off)
{
	char path[300];
	struct stat st;
	uint8_t byte;
	int fd;

	snprintf(path, sizeof(path), "%s/state/sessions.kept", p->dir);
	fd = open(path, O_RDWR);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	ck_assert_int_eq(pread(fd, &byte, 1, st.st_size - off), 1);
	byte ^= 0x40;
	ck_assert_int_eq(pwrite(fd, &byte, 1, st.st_size - off), 1);
	close(fd);
}

/*
 * What did not survive, or does not verify, is never served: a killed
 * kvmemd kept nothing, a damaged record is refused whole, a client that
 * comes back too late finds its session freed, and a kvmemd told not to
 * keep sessions never offers to.
 */
START_TEST(test_resume_nothing_half_trusted)
{
	struct kvmem_cache *a;
	struct kvmem_seq *s;
	struct kvmem_rng r;
	struct kvmemd_proc p;
	char out[4096];
	float *k, *v;
	int i;

	kvmem_rng_seed(&r, 2003);
	kvmemd_tokens(&r, 70, &k, &v);
	kvmemd_start(&p, NO_CRASH_CONF "resume_seconds = 1\n", NULL);

	/* Killed without daemon.keep_on_crash: no record of its session,
	 * whose memfd it stored. */
	a = kvmemd_connect(&p, 4u << 20);
	s = kvmemd_seq_with(a, k, v, 70);
	kvmemd_kill(&p);
	kvmemd_restart(&p, NULL);
	ck_assert(lost(a));
	ck_assert_int_eq(kvmem_reconnect(a), -ESTALE);
	ck_assert_ptr_nonnull(strstr(kvmem_connect_error(), "kept no such"));
	kvmem_seq_free(s);
	kvmem_close(a);

	/* A record damaged in its last session's tables. */
	a = kvmemd_connect(&p, 4u << 20);
	s = kvmemd_seq_with(a, k, v, 70);
	ck_assert_int_eq(kvmemd_stop_keep(&p), 0);
	record_flip(&p, 5);
	kvmemd_restart(&p, NULL);
	ck_assert_int_eq(kvmemd_log_lines(&p, "cut short or damaged"), 1);
	ck_assert_int_eq(kvmemd_log_lines(&p, "kept session memfds passed "
					      "back with no record that "
					      "takes them back"),
			 1);
	ck_assert_int_eq(kvmem_reconnect(a), -ESTALE);
	kvmem_seq_free(s);
	kvmem_close(a);

	/* Too late. */
	a = kvmemd_connect(&p, 4u << 20);
	s = kvmemd_seq_with(a, k, v, 70);
	ck_assert_int_eq(kvmemd_stop_keep(&p), 0);
	kvmemd_restart(&p, NULL);
	for (i = 0; i < 600 && !kvmemd_log_lines(&p, "did not come back"); i++)
		usleep(50000);
	ck_assert_int_eq(kvmemd_log_lines(&p, "did not come back within 1 s"),
			 1);
	ck_assert_int_eq(kvmem_reconnect(a), -ESTALE);
	kvmemd_admin_ok(&p, out, sizeof(out), "status");
	ck_assert_uint_eq(kvmemd_json_u64(out, "sessions"), 0);
	kvmem_seq_free(s);
	kvmem_close(a);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);

	/* Not offered. */
	kvmemd_start(&p, "[daemon]\nkeep_sessions = no\n", NULL);
	a = kvmemd_connect(&p, 4u << 20);
	ck_assert_int_eq(kvmemd_stop_keep(&p), 0);
	ck_assert_int_eq(p.nstored, 0);
	kvmemd_restart(&p, NULL);
	ck_assert_int_eq(kvmem_reconnect(a), -EOPNOTSUPP);
	kvmem_close(a);
	free(k);
	free(v);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * Below the library: SQEs published while no kvmemd ran are the new one's
 * to run, from where the old one stopped, and their completions follow
 * those the old one posted.
 */
START_TEST(test_resume_ring_goes_on)
{
	struct kvmem_hello h = kvmemd_hello(4u << 20);
	struct kvmem_sqe e = { .opcode = KVMEM_OP_SEQ_CREATE };
	struct kvmemd_raw r, r2;
	struct kvmemd_proc p;
	struct kvmem_cqe c;
	uint64_t token;
	uint32_t id;
	int seq;

	kvmemd_start(&p, NULL, NULL);
	ck_assert_int_eq(kvmemd_raw_attach(&r, &p, &h, sizeof(h)), 0);
	ck_assert(r.w.features & KVMEM_FEAT_RESUME);
	token = r.w.resume_token;
	ck_assert_uint_ne(token, 0);
	id = r.w.session;
	seq = KVMEMD_OP(&r, 1, .opcode = KVMEM_OP_SEQ_CREATE);
	ck_assert_int_gt(seq, 0);
	ck_assert_int_eq(kvmemd_stop_keep(&p), 0);
	ck_assert(kvmemd_raw_hung_up(&r, 1000));
	/* Published with no daemon to take it. */
	e.user_data = 2;
	kvmemd_raw_queue(&r, &e);
	kvmemd_restart(&p, NULL);

	h.resume_session = id;
	h.resume_token = token;
	ck_assert_int_eq(kvmemd_raw_attach(&r2, &p, &h, sizeof(h)), 0);
	ck_assert_uint_eq(r2.w.session, id);
	ck_assert_uint_eq(r2.w.resume_token, token);
	/* The same memory, where this client already has it mapped. */
	r2.sq_tail = r.sq_tail;
	r2.cq_head = r.cq_head;
	ck_assert_int_eq(memcmp(r2.map, r.map, 4096), 0);
	kvmemd_raw_doorbell(&r2);
	c = kvmemd_raw_reap(&r2);
	ck_assert_uint_eq(c.user_data, 2);
	ck_assert_int_gt(c.res, 0);
	ck_assert_int_ne(c.res, seq);
	/* The first sequence is there still: it can be freed once. */
	ck_assert_int_eq(KVMEMD_OP(&r2, 3, .opcode = KVMEM_OP_SEQ_FREE,
				   .seq = (uint64_t)seq),
			 0);
	ck_assert_int_eq(KVMEMD_OP(&r2, 4, .opcode = KVMEM_OP_SEQ_FREE,
				   .seq = (uint64_t)seq),
			 -EINVAL);
	kvmemd_raw_detach(&r2);
	kvmemd_raw_detach(&r);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * A client that never stops submitting while kvmemd stops: the daemon runs
 * a ring's worth of its SQEs, keeps the session all the same and exits in
 * time, instead of running them for as long as they come.
 */
START_TEST(test_resume_flood_does_not_hold_the_stop)
{
	struct kvmem_hello h = kvmemd_hello(4u << 20);
	const struct kvmem_sqe nop = { .opcode = KVMEM_OP_NOP, .user_data = 1 };
	struct kvmemd_raw r;
	struct kvmemd_proc p;
	int status;
	pid_t pid;

	kvmemd_start(&p, NULL, NULL);
	ck_assert_int_eq(kvmemd_raw_attach(&r, &p, &h, sizeof(h)), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid) {
		/* NOPs as fast as there is room, completions thrown away,
		 * until killed. */
		for (;;) {
			if (r.sq_tail - __atomic_load_n(&r.ring->sq_head,
							__ATOMIC_ACQUIRE) <
			    r.w.sq_entries)
				kvmemd_raw_queue(&r, &nop);
			while (__atomic_load_n(&r.ring->cq_tail,
					       __ATOMIC_ACQUIRE) != r.cq_head)
				__atomic_store_n(&r.ring->cq_head, ++r.cq_head,
						 __ATOMIC_RELEASE);
		}
	}
	/* The flood is on: the daemon takes it. */
	while (__atomic_load_n(&r.ring->sq_head, __ATOMIC_ACQUIRE) <
	       4 * r.w.sq_entries)
		kvmemd_raw_doorbell(&r);
	ck_assert_int_eq(kvmemd_stop_keep(&p), 0);
	ck_assert_int_eq(p.nstored, 1);
	kill(pid, SIGKILL);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	kvmemd_raw_detach(&r);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * Regression: two sessions each with a ring full of seals of 5 MiB pages
 * held a stop that keeps sessions for 96 s, checking every seal, past
 * systemd's stop timeout, whose SIGKILL loses every session. The stop
 * runs what was submitted for a bounded time now and leaves the rest in
 * the ring: it exits with both rings far from run, keeps both sessions,
 * and the next kvmemd takes up the rings where they stopped, every
 * completion in order and right.
 */
#define STOP_FLOOD_SQ 32768

START_TEST(test_resume_seal_flood_does_not_hold_the_stop)
{
	struct kvmem_hello h = kvmemd_big_hello(STOP_FLOOD_SQ), back;
	struct kvmemd_raw r[2], r2;
	struct kvmemd_proc p;
	struct kvmem_cqe c;
	uint32_t slot[2], rounds = STOP_FLOOD_SQ / 3, i, head, posted;
	int j;

	kvmemd_start(&p, "[ring]\nmax_entries = 65536\n[scrub]\nrate = 0\n",
		     NULL);
	for (j = 0; j < 2; j++) {
		ck_assert_int_eq(kvmemd_raw_attach(&r[j], &p, &h, sizeof(h)),
				 0);
		slot[j] = kvmemd_raw_big_page(&r[j], &h.geometry, 7 + j);
		for (i = 0; i < rounds; i++)
			kvmemd_raw_seal_round(&r[j], slot[j], i);
	}
	for (j = 0; j < 2; j++)
		kvmemd_raw_publish(&r[j]);
	ck_assert_int_eq(kvmemd_stop_keep(&p), 0);
	ck_assert_int_eq(p.nstored, 2);
	/* Stopped with most of both floods not run. */
	for (j = 0; j < 2; j++) {
		head = __atomic_load_n(&r[j].ring->sq_head, __ATOMIC_ACQUIRE);
		ck_assert_msg(head < r[j].sq_tail / 2,
			      "session %d: the stop ran %u of %u SQEs", j, head,
			      r[j].sq_tail);
		ck_assert(kvmemd_raw_hung_up(&r[j], 1000));
	}

	/* The first session goes on with the next kvmemd. */
	kvmemd_restart(&p, NULL);
	back = h;
	back.resume_session = r[0].w.session;
	back.resume_token = r[0].w.resume_token;
	ck_assert_int_eq(kvmemd_raw_attach(&r2, &p, &back, sizeof(back)), 0);
	r2.sq_tail = r[0].sq_tail;
	r2.cq_head = r[0].cq_head;
	posted = __atomic_load_n(&r2.ring->cq_tail, __ATOMIC_ACQUIRE) -
		 r2.cq_head;
	kvmemd_raw_doorbell(&r2);
	for (i = 0; i < posted + 30; i++) {
		c = kvmemd_raw_reap(&r2);
		ck_assert_uint_eq(c.user_data, i);
		ck_assert_int_eq(c.res, i % 3 == 2 ? 1 : 0);
	}
	kvmemd_raw_detach(&r2);
	kvmemd_raw_detach(&r[0]);
	kvmemd_raw_detach(&r[1]);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * What a client sees of a kvmemd that was killed, the promise of
 * libkvmem(3), WHEN K/V IS SAFE: an append that fills its tail page (and
 * so needs the daemon to seal it) and every call that asks the daemon
 * return -ENOTCONN, kvmem_reconnect() -ESTALE, and nothing after it
 * succeeds as if the session were there.
 */
START_TEST(test_resume_killed_daemon_reported)
{
	const struct kvmem_geometry g = kvmemd_test_geo();
	struct kvmem_cache *a;
	struct kvmem_seq *s, *t;
	struct kvmem_stats st;
	struct kvmem_rng r;
	struct kvmemd_proc p;
	float *k, *v;

	kvmem_rng_seed(&r, 2004);
	kvmemd_tokens(&r, 70, &k, &v);
	kvmemd_start(&p, NO_CRASH_CONF, NULL);
	a = kvmemd_connect(&p, 4u << 20);
	s = kvmemd_seq_with(a, k, v, 30);
	kvmemd_kill(&p);
	kvmemd_restart(&p, NULL);

	ck_assert_int_eq(kvmem_seq_append_all(s, k, v, g.tokens_per_page),
			 -ENOTCONN);
	ck_assert_int_eq(kvmem_daemon_stats(a, &st), -ENOTCONN);
	ck_assert_int_eq(kvmem_seq_create(a, &t), -ENOTCONN);
	ck_assert_int_eq(kvmem_reconnect(a), -ESTALE);
	ck_assert_int_eq(kvmem_seq_append_all(s, k, v, g.tokens_per_page),
			 -ENOTCONN);
	ck_assert_int_eq(kvmem_daemon_stats(a, &st), -ENOTCONN);
	kvmem_seq_free(s);
	kvmem_close(a);
	free(k);
	free(v);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * A session's memfd is in systemd's descriptor store from its welcome on,
 * not only from an orderly stop: a crash does not take it. It leaves when
 * the session ends, when a stop does not keep it, and when the next
 * kvmemd has nothing that takes it back.
 */
START_TEST(test_resume_memfd_stored_while_running)
{
	struct kvmem_cache *a, *b;
	struct kvmemd_proc p;

	kvmemd_start(&p, NULL, NULL);
	a = kvmemd_connect(&p, 4u << 20);
	ck_assert_int_eq(stored_sessions(&p, 1), 1);
	b = kvmemd_connect(&p, 4u << 20);
	ck_assert_int_eq(stored_sessions(&p, 2), 2);
	kvmem_close(b);
	ck_assert_int_eq(stored_sessions(&p, 1), 1);

	/* An orderly stop stores it once, not twice. */
	ck_assert_int_eq(kvmemd_stop_keep(&p), 0);
	ck_assert_int_eq(stored_sessions(&p, 1), 1);
	kvmemd_restart(&p, NULL);
	ck_assert_int_eq(kvmem_reconnect(a), 0);
	ck_assert_int_eq(stored_sessions(&p, 1), 1);

	/* Killed, it stays, and the next kvmemd takes it back. */
	kvmemd_kill(&p);
	ck_assert_int_eq(stored_sessions(&p, 1), 1);
	kvmemd_restart(&p, NULL);
	ck_assert_int_eq(kvmem_reconnect(a), 0);
	ck_assert_int_eq(stored_sessions(&p, 1), 1);
	kvmem_close(a);
	ck_assert_int_eq(stored_sessions(&p, 0), 0);

	/* Killed without a record of it: closed, and out of the store. */
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_write_conf(&p, NO_CRASH_CONF);
	kvmemd_restart(&p, NULL);
	a = kvmemd_connect(&p, 4u << 20);
	ck_assert_int_eq(stored_sessions(&p, 1), 1);
	kvmemd_kill(&p);
	kvmemd_restart(&p, NULL);
	ck_assert_int_eq(stored_sessions(&p, 0), 0);
	ck_assert_int_eq(kvmem_reconnect(a), -ESTALE);
	kvmem_close(a);

	/* Not offered a restart: not stored. */
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_write_conf(&p, "[daemon]\nkeep_sessions = no\n");
	kvmemd_restart(&p, NULL);
	a = kvmemd_connect(&p, 4u << 20);
	usleep(100000);
	ck_assert_int_eq(kvmemd_stored(&p, "session-"), 0);
	kvmem_close(a);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * Regression: a kvmem_reconnect() whose hello sat in the backlog of a
 * kvmemd that was then killed returned "connection reset" where the
 * documents promise -ESTALE. A reset is the restart still under way: it
 * tries again, and the new kvmemd, which kept nothing, answers -ESTALE.
 */
START_TEST(test_resume_reconnect_through_a_reset)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kvmem_cache *a;
	struct kvmemd_proc p;
	int fd, status;
	pid_t pid;

	kvmemd_start(&p, NO_CRASH_CONF, NULL);
	a = kvmemd_connect(&p, 4u << 20);
	kvmemd_kill(&p);
	/* A daemon that listens and never answers, in the old one's place. */
	unlink(p.sock);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", p.sock);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(fd, 8), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid) {
		close(fd);
		_exit(kvmem_reconnect(a) == -ESTALE ? 0 : 1);
	}
	/* Its hello is in the backlog: killed, the listener resets it. */
	while (poll(&(struct pollfd){ .fd = fd, .events = POLLIN }, 1, 10000) <
	       1)
		;
	close(fd);
	kvmemd_restart(&p, NULL);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && !WEXITSTATUS(status),
		      "kvmem_reconnect() did not say -ESTALE: status 0x%x",
		      status);
	kvmem_close(a);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* ---- under systemd ---------------------------------------------------- */

/* The output of the shell command @cmd (its first line), or "" when it
 * failed. */
static void sh_line(const char *cmd, char *out, size_t len)
{
	FILE *f = popen(cmd, "r");

	out[0] = 0;
	if (!f)
		return;
	if (!fgets(out, (int)len, f))
		out[0] = 0;
	out[strcspn(out, "\n")] = 0;
	pclose(f);
}

/* Wait (30 s at most) until unit @unit is active with a main PID other
 * than @old: the new one, or 0. */
static long unit_restarted(const char *unit, long old)
{
	char cmd[256], state[64], pid[64];
	int i;

	for (i = 0; i < 300; i++) {
		snprintf(cmd, sizeof(cmd),
			 "systemctl show -p ActiveState --value %s", unit);
		sh_line(cmd, state, sizeof(state));
		snprintf(cmd, sizeof(cmd),
			 "systemctl show -p MainPID --value %s", unit);
		sh_line(cmd, pid, sizeof(pid));
		if (!strcmp(state, "active") && atol(pid) > 0 &&
		    atol(pid) != old)
			return atol(pid);
		usleep(100000);
	}
	return 0;
}

/*
 * Where PID 1 is systemd: kvmemd as a transient unit with a descriptor
 * store and Restart=on-failure, a session that asked to be kept and a
 * published prefix; "systemctl kill -s KILL" and systemd's own restart;
 * the client takes its session back and reads every value as an embedded
 * cache given the same tokens does, and a new session attaches the
 * prefix. Skipped, saying so, without systemd as PID 1, root, or
 * systemd-run.
 */
START_TEST(test_resume_under_systemd)
{
	static const struct kvmem_prefix_key keys[2] = { { { 7 } }, { { 8 } } };
	char dir[] = "/tmp/kvmem-ck-systemd-XXXXXX", unit[64], cmd[1024],
	     sock[200], conf[200];
	struct kvmem_connect_opts o = { .quota_bytes = 8u << 20 };
	const struct kvmem_geometry g = kvmemd_test_geo();
	struct kvmem_cache *a, *b, *e;
	struct kvmem_seq *s, *ref, *t = NULL;
	struct kvmem_rng r;
	long first, second;
	float *k, *v;
	FILE *f;
	int i;

	if (access("/run/systemd/system", F_OK)) {
		fprintf(stderr, "SKIP: test_resume_under_systemd: PID 1 is "
				"not systemd\n");
		return;
	}
	if (geteuid() || !kvmem_check_have("systemd-run") ||
	    !kvmem_check_have("systemctl")) {
		fprintf(stderr, "SKIP: test_resume_under_systemd: needs root, "
				"systemd-run and systemctl\n");
		return;
	}
	ck_assert_ptr_nonnull(mkdtemp(dir));
	chmod(dir, 0755);
	snprintf(unit, sizeof(unit), "kvmemd-check-%ld", (long)getpid());
	snprintf(sock, sizeof(sock), "%s/k.sock", dir);
	snprintf(conf, sizeof(conf), "%s/kvmemd.conf", dir);
	f = fopen(conf, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f,
		"[daemon]\nsocket = %s\nadmin_socket = %s/a.sock\n"
		"state_dir = %s/state\n[store]\npath = %s/store\nsize = 64M\n",
		sock, dir, dir, dir);
	ck_assert_int_eq(fclose(f), 0);
	snprintf(cmd, sizeof(cmd),
		 "systemd-run --quiet --unit=%s -p Type=notify "
		 "-p FileDescriptorStoreMax=64 -p Restart=on-failure "
		 "-p RestartSec=100ms %s/daemon/kvmemd -f -c %s",
		 unit, kvmem_check_builddir(), conf);
	ck_assert_int_eq(system(cmd), 0);
	first = unit_restarted(unit, 0);
	ck_assert_int_gt(first, 0);

	kvmem_rng_seed(&r, 2041);
	kvmemd_tokens(&r, 70, &k, &v);
	for (i = 0; i < 100 && kvmem_connect(sock, &g, &o, &a); i++)
		usleep(100000);
	ck_assert_int_lt(i, 100);
	s = kvmemd_seq_with(a, k, v, 70);
	ck_assert_int_eq(kvmem_prefix_publish(s, keys, 2), 2);
	ref = kvmemd_reference(&e, k, v, 70);

	snprintf(cmd, sizeof(cmd), "systemctl kill -s KILL %s", unit);
	ck_assert_int_eq(system(cmd), 0);
	second = unit_restarted(unit, first);
	ck_assert_msg(second > 0, "systemd did not restart %s", unit);
	ck_assert_int_eq(kvmem_reconnect(a), 0);
	kvmemd_expect_same(s, ref, &r);
	ck_assert_int_eq(kvmem_connect(sock, &g, &o, &b), 0);
	ck_assert_int_eq(kvmem_prefix_attach(b, keys, 2, &t), 36);
	kvmem_seq_free(t);
	kvmem_close(b);

	kvmem_seq_free(s);
	kvmem_seq_free(ref);
	kvmem_close(e);
	kvmem_close(a);
	free(k);
	free(v);
	snprintf(cmd, sizeof(cmd),
		 "systemctl stop %s; systemctl reset-failed %s 2>/dev/null; "
		 "rm -rf %s",
		 unit, unit, dir);
	ck_assert_int_ne(system(cmd), -1);
}
END_TEST

KVMEM_SUITE(resume)
{
	Suite *s = suite_create("resume");
	TCase *tc = tcase_create("resume");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_resume_after_restart);
	tcase_add_test(tc, test_resume_waits_for_the_daemon);
	tcase_add_test(tc, test_resume_pages_checked);
	tcase_add_test(tc, test_resume_on_another_store);
	tcase_add_test(tc, test_resume_units_wait_for_both_records);
	tcase_add_test(tc, test_resume_two_restarts);
	tcase_add_test(tc, test_resume_append_goes_on);
	tcase_add_test(tc, test_resume_flood_does_not_hold_the_stop);
	tcase_add_test(tc, test_resume_seal_flood_does_not_hold_the_stop);
	tcase_add_test(tc, test_resume_unsent_ops_dropped);
	tcase_add_test(tc, test_resume_refused_to_others);
	tcase_add_test(tc, test_resume_nothing_half_trusted);
	tcase_add_test(tc, test_resume_killed_daemon_reported);
	tcase_add_test(tc, test_resume_after_kill);
	tcase_add_test(tc, test_resume_kill_loop);
	tcase_add_test(tc, test_resume_under_systemd);
	tcase_add_test(tc, test_resume_live_records_refused);
	tcase_add_test(tc, test_resume_record_unwritable);
	tcase_add_test(tc, test_resume_memfd_stored_while_running);
	tcase_add_test(tc, test_resume_reconnect_through_a_reset);
	tcase_add_test(tc, test_resume_ring_goes_on);
	suite_add_tcase(s, tc);
	return s;
}
