/* SPDX-License-Identifier: MIT */
/*
 * check_daemon_hostile.c - kvmemd against clients that lie in the
 * handshake, send garbage SQEs, break the ring protocol, stop reading, die
 * half-way through a batch, or just push hard
 *
 * Each test starts its own daemon (kvmemd_harness.h) and ends by showing it
 * still serves a normal client and stops cleanly (under SAN=1 that exit
 * status also carries LeakSanitizer's verdict).
 *
 * Expected values come from the ABI (kvmem/uapi.h), from the configuration
 * the test gives the daemon, from what the test itself submitted, and for
 * data from an embedded cache fed the same appends; never from what the
 * daemon reports about itself. No timing is asserted: the waits below only
 * bound a hang, and scale with CK_TIMEOUT_MULTIPLIER.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvmem/kvmem.h"
#include "kvmem_check.h"
#include "kvmemd_harness.h"
#include "rng.h"

#define MIB (1ull << 20)
#define QUOTA (4 * MIB) /* of every normal client here */

/*
 * The daemon's configuration in every test; the expectations below are
 * computed from these numbers. The stress test's 32 clients hold two
 * sessions each, all of one uid.
 */
#define CONF_POOL_BYTES (1024 * MIB)
#define CONF_DEFAULT_BYTES (8 * MIB)
#define CONF_MAX_BYTES (64 * MIB)
#define CONF_SQ 64u
#define CONF_MAX_ENTRIES 1024u
#define CONF_MAX_SEQS 4096u

static const char conf[] = "[daemon]\n"
			   "max_sessions_per_uid = 64\n"
			   "[pool]\n"
			   "host_bytes = 1G\n"
			   "session_default_bytes = 8M\n"
			   "session_max_bytes = 64M\n"
			   "[ring]\n"
			   "sq_entries = 64\n"
			   "max_entries = 1024\n"
			   "max_seqs = 4096\n";

/* Some negative errno: a refusal whose code the ABI does not pin down. */
#define ANY_NEG 1

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* ---- Helpers ------------------------------------------------------------- */

static int slow(void)
{
	const char *m = getenv("CK_TIMEOUT_MULTIPLIER");
	int x = m ? atoi(m) : 1;

	return x > 1 ? x : 1;
}

/* How long a wait for something that should come at once may take. */
static int wait_ms(void)
{
	return 5000 * slow();
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static unsigned long long status_u64(const struct kvmemd_proc *p,
				     const char *key)
{
	char buf[1024];

	kvmemd_admin(p, "status", buf, sizeof(buf));
	return kvmemd_json_u64(buf, key);
}

/* Poll the admin status until @key reads @want; the last value read. */
static unsigned long long wait_status(const struct kvmemd_proc *p,
				      const char *key, unsigned long long want)
{
	uint64_t end = now_ms() + (uint64_t)wait_ms();
	unsigned long long v;

	while ((v = status_u64(p, key)) != want && now_ms() < end)
		usleep(10000);
	return v;
}

/* The same for the daemon's open descriptors. */
static int wait_fds(const struct kvmemd_proc *p, int want)
{
	uint64_t end = now_ms() + (uint64_t)wait_ms();
	int n;

	while ((n = kvmemd_fd_count(p)) != want && now_ms() < end)
		usleep(10000);
	return n;
}

/*
 * The daemon's descriptors at rest: after it answered the admin socket (so
 * it is past start-up) and closed that connection.
 */
static int rest_fds(const struct kvmemd_proc *p)
{
	int a, b = -1, i;

	status_u64(p, "sessions");
	for (i = 0; i < 500; i++) {
		a = kvmemd_fd_count(p);
		usleep(20000);
		b = kvmemd_fd_count(p);
		if (a == b)
			break;
	}
	return b;
}

/* Does the daemon's log have a line holding both @a and @b? */
static int log_has(const struct kvmemd_proc *p, const char *a, const char *b)
{
	uint64_t end = now_ms() + (uint64_t)wait_ms();
	char line[1024];
	FILE *f;

	do {
		f = fopen(p->log, "r");
		ck_assert_msg(f, "%s: %s", p->log, strerror(errno));
		while (fgets(line, sizeof(line), f)) {
			if (strstr(line, a) && strstr(line, b)) {
				fclose(f);
				return 1;
			}
		}
		fclose(f);
		usleep(10000);
	} while (now_ms() < end);
	return 0;
}

/* Token values that FP16 holds exactly: multiples of 1/16 in [-2, 2]. */
static void fill_tokens(float *x, size_t n, uint64_t seed)
{
	uint64_t st = seed * 0x9e3779b97f4a7c15ull;
	size_t i;

	for (i = 0; i < n; i++)
		x[i] = (float)((int)(kvmem_splitmix64(&st) % 65) - 32) / 16.0f;
}

/* Tokens of a @len-token layer below this are in sealed pages (or the sink
 * page); from it on they are in the FP16 tail. */
static uint32_t sealed_end(const struct kvmem_geometry *g, uint32_t len)
{
	if (len <= g->sink_tokens)
		return len;
	return g->sink_tokens +
	       (len - g->sink_tokens) / g->tokens_per_page * g->tokens_per_page;
}

/* ---- A client with an embedded twin -------------------------------------- */

#define TWIN_MAX 128 /* tokens per layer */

/*
 * A connected cache and an embedded one fed the same appends: the daemon
 * client must read back bit for bit what the embedded cache does, and the
 * FP16 tokens (sink and tail) exactly what was appended.
 */
struct twin {
	struct kvmem_geometry g;
	struct kvmem_cache *c, *e;
	struct kvmem_seq *rs, *es;
	size_t row; /* floats per token */
	uint32_t len;
	float *in_k, *in_v; /* [layer][TWIN_MAX][row] appended */
	float *rk, *rv, *ek, *ev; /* [TWIN_MAX][row] read back */
};

static void twin_open(struct twin *t, const struct kvmemd_proc *p)
{
	size_t n;

	memset(t, 0, sizeof(*t));
	t->g = kvmemd_test_geo();
	t->row = (size_t)t->g.kv_heads * t->g.head_dim;
	n = (size_t)TWIN_MAX * t->row;
	t->in_k = kvmem_check_xmalloc(2 * t->g.layers * n * sizeof(float));
	t->in_v = t->in_k + t->g.layers * n;
	t->rk = kvmem_check_xmalloc(4 * n * sizeof(float));
	t->rv = t->rk + n;
	t->ek = t->rv + n;
	t->ev = t->ek + n;
	t->c = kvmemd_connect(p, QUOTA);
	ck_assert_int_eq(kvmem_open_embedded(&t->g, QUOTA, &t->e), 0);
	ck_assert_int_eq(kvmem_seq_create(t->c, &t->rs), 0);
	ck_assert_int_eq(kvmem_seq_create(t->e, &t->es), 0);
}

static void twin_append(struct twin *t, uint32_t n, uint64_t seed)
{
	size_t lay = (size_t)TWIN_MAX * t->row, at = t->len * t->row;
	uint32_t l;

	ck_assert_uint_le(t->len + n, TWIN_MAX);
	for (l = 0; l < t->g.layers; l++) {
		float *k = t->in_k + l * lay + at, *v = t->in_v + l * lay + at;

		fill_tokens(k, n * t->row, seed * 4 + 2 * l);
		fill_tokens(v, n * t->row, seed * 4 + 2 * l + 1);
		ck_assert_int_eq(kvmem_seq_append(t->rs, l, k, v, n), 0);
		ck_assert_int_eq(kvmem_seq_append(t->es, l, k, v, n), 0);
	}
	t->len += n;
}

static void twin_verify(struct twin *t)
{
	size_t lay = (size_t)TWIN_MAX * t->row, bytes = t->row * sizeof(float);
	uint32_t l, i, tail = sealed_end(&t->g, t->len);

	for (l = 0; l < t->g.layers; l++) {
		ck_assert_uint_eq(kvmem_seq_len(t->rs, l), t->len);
		ck_assert_int_eq(kvmem_seq_read(t->rs, l, 0, t->len,
						KVMEM_ERASE_KEEP, t->rk, t->rv,
						NULL),
				 0);
		ck_assert_int_eq(kvmem_seq_read(t->es, l, 0, t->len,
						KVMEM_ERASE_KEEP, t->ek, t->ev,
						NULL),
				 0);
		EXPECT_MEM(t->rk, t->ek, t->len * bytes, "layer %u K", l);
		EXPECT_MEM(t->rv, t->ev, t->len * bytes, "layer %u V", l);
		for (i = 0; i < t->len; i++) {
			if (i >= t->g.sink_tokens && i < tail)
				continue;
			EXPECT_MEM(t->rk + i * t->row,
				   t->in_k + l * lay + i * t->row, bytes,
				   "layer %u FP16 token %u K", l, i);
			EXPECT_MEM(t->rv + i * t->row,
				   t->in_v + l * lay + i * t->row, bytes,
				   "layer %u FP16 token %u V", l, i);
		}
	}
}

static void twin_close(struct twin *t)
{
	struct kvmem_cache_stats cs;
	struct kvmem_stats st;

	ck_assert_int_eq(kvmem_daemon_stats(t->c, &st), 0);
	ck_assert_uint_eq(st.arena_bytes, QUOTA);
	ck_assert_uint_eq(st.pool_bytes, CONF_POOL_BYTES);
	ck_assert_uint_eq(st.seqs, 1);
	ck_assert_uint_le(st.used_bytes, QUOTA);
	kvmem_cache_stats(t->c, &cs);
	ck_assert_uint_eq(cs.ring_errors, 0);
	kvmem_seq_free(t->rs);
	kvmem_seq_free(t->es);
	kvmem_close(t->c);
	kvmem_close(t->e);
	free(t->in_k);
	free(t->rk);
}

/* A normal client attaches, writes, reads back and detaches. */
static void serving_check(const struct kvmemd_proc *p)
{
	struct twin t;

	twin_open(&t, p);
	/* The sink, one sealed page, part of a tail. */
	twin_append(&t, 45, 1);
	twin_verify(&t);
	twin_close(&t);
}

static void start_daemon(struct kvmemd_proc *p)
{
	kvmemd_start(p, conf, NULL);
}

static void stop_daemon(struct kvmemd_proc *p)
{
	serving_check(p);
	ck_assert_int_eq(kvmemd_stop(p), 0);
	kvmemd_cleanup(p);
}

/* ---- Handshakes by hand -------------------------------------------------- */

struct answer {
	int sock;
	struct kvmem_welcome w;
	int fds[8], nfds;
	int trunc; /* MSG_TRUNC or MSG_CTRUNC */
};

/* Send @len bytes of @msg with @nfds descriptors of @fds attached. */
static ssize_t send_fds(int sock, const void *msg, size_t len, const int *fds,
			int nfds)
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *cm;

	if (nfds > 0 && nfds <= 4) {
		memset(&u, 0, sizeof(u));
		m.msg_control = u.buf;
		m.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		cm = CMSG_FIRSTHDR(&m);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
	}
	return sendmsg(sock, &m, MSG_NOSIGNAL);
}

/*
 * Connect, send @len bytes of @msg as one message (with @nfds of @fds), read
 * the answer. Return: its size, 0 when the daemon closed without one, or a
 * negative errno (-ETIMEDOUT: neither came). Never fails the test, so
 * children may use it; a->sock is the caller's to close when >= 0.
 */
static ssize_t exchange_fds(const char *path, const void *msg, size_t len,
			    const int *fds, int nfds, struct answer *a)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	union {
		char buf[CMSG_SPACE(8 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = &a->w, .iov_len = sizeof(a->w) };
	struct msghdr m = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = u.buf,
		.msg_controllen = sizeof(u.buf),
	};
	struct pollfd pfd;
	struct cmsghdr *cm;
	ssize_t n;
	int i, cnt;

	memset(a, 0, sizeof(*a));
	a->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (a->sock < 0)
		return -errno;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(a->sock, (struct sockaddr *)&sa, sizeof(sa)))
		return -errno;
	if (send_fds(a->sock, msg, len, fds, nfds) < 0)
		return -errno;
	pfd = (struct pollfd){ .fd = a->sock, .events = POLLIN };
	if (poll(&pfd, 1, 2 * wait_ms()) <= 0)
		return -ETIMEDOUT;
	n = recvmsg(a->sock, &m, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return -errno;
	a->trunc = !!(m.msg_flags & (MSG_TRUNC | MSG_CTRUNC));
	for (cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		cnt = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (i = 0; i < cnt && a->nfds < 8; i++)
			memcpy(&a->fds[a->nfds++],
			       CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
	}
	return n;
}

static ssize_t exchange(const char *path, const void *msg, size_t len,
			struct answer *a)
{
	return exchange_fds(path, msg, len, NULL, 0, a);
}

static void answer_close(struct answer *a)
{
	int i;

	for (i = 0; i < a->nfds; i++)
		close(a->fds[i]);
	if (a->sock >= 0)
		close(a->sock);
	a->nfds = 0;
	a->sock = -1;
}

/*
 * kvmemd_raw_attach() for children: never fails the test. Return: 0, the
 * daemon's refusal, or a negative errno.
 */
static int raw_open(const char *path, const struct kvmem_hello *h,
		    struct kvmemd_raw *r)
{
	struct answer a;
	ssize_t n = exchange(path, h, sizeof(*h), &a);
	void *map;

	memset(r, 0, sizeof(*r));
	r->memfd = r->sq_efd = r->cq_efd = r->gpu_fd = -1;
	r->sock = a.sock;
	if (n != sizeof(a.w))
		return n < 0 ? (int)n : -EPROTO;
	r->w = a.w;
	if (a.w.error)
		return a.w.error;
	if (a.nfds != 3)
		return -EPROTO;
	r->memfd = a.fds[0];
	r->sq_efd = a.fds[1];
	r->cq_efd = a.fds[2];
	map = mmap(NULL, r->w.map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		   r->memfd, 0);
	if (map == MAP_FAILED)
		return -errno;
	r->map = map;
	r->ring = (struct kvmem_ring *)(r->map + r->w.ring_off);
	r->sqes = (struct kvmem_sqe *)(r->map + r->w.sqes_off);
	r->cqes = (struct kvmem_cqe *)(r->map + r->w.cqes_off);
	r->buf = r->map + r->w.buf_off;
	r->arena = r->map + r->w.arena_off;
	return 0;
}

/* Publish the raw session's SQEs up to r->sq_tail and ring the doorbell. */
static void raw_publish(struct kvmemd_raw *r)
{
	__atomic_store_n(&r->ring->sq_tail, r->sq_tail, __ATOMIC_RELEASE);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	eventfd_write(r->sq_efd, 1);
}

/* ---- 1: random handshake bytes -------------------------------------------- */

static int is_pow2(uint64_t x)
{
	return x && !(x & (x - 1));
}

/*
 * What the daemon must answer to a hello, from kvmem/uapi.h and kvmem.h
 * and this file's configuration: 0, a negative errno, or ANY_NEG. With
 * faults of different kinds the order of the checks would decide, and the
 * ABI does not fix it: ANY_NEG then.
 */
static int hello_expect(const struct kvmem_hello *h, uint32_t *sq_out,
			uint32_t *cq_out, uint64_t *quota_out)
{
	struct kvmem_page_layout l[2];
	int err = 0, nerr = 0, anyneg = 0, geo_ok, i;
	uint64_t quota;
	uint32_t sq, cq;

#define FAULT(e)                          \
	do {                              \
		if (nerr++ && err != (e)) \
			anyneg = 1;       \
		err = (e);                \
	} while (0)

	if (h->magic != KVMEM_HELLO_MAGIC || h->size != sizeof(*h))
		return ANY_NEG; /* not a hello at all */
	if (h->abi_version < KVMEM_ABI_VERSION_MIN ||
	    h->abi_version > KVMEM_ABI_VERSION)
		FAULT(-EPROTONOSUPPORT);
	for (i = 0; i < 16; i++)
		if (h->gpu_uuid[i])
			break;
	/* Taking a session back: this daemon kept none. */
	if (h->resume_session || h->resume_token)
		FAULT(h->resume_session && h->resume_token &&
				      h->abi_version >= 4
			      ? -ESTALE
			      : -EINVAL);
	if ((h->abi_version < 4 && (h->gpu_mib || i < 16)) ||
	    (!h->gpu_mib && i < 16))
		FAULT(-EINVAL);
	else if (h->gpu_mib) /* this daemon has no GPU pool */
		FAULT(-EOPNOTSUPP);
	geo_ok = !kvmem_geometry_check(&h->geometry);
	if (!geo_ok)
		FAULT(-EINVAL);
	sq = h->sq_entries ? h->sq_entries : CONF_SQ;
	cq = h->cq_entries ? h->cq_entries : (uint32_t)(2ull * sq);
	if (!h->cq_entries && 2ull * sq > UINT32_MAX)
		cq = 0; /* no power of two either way */
	if (!is_pow2(sq) || !is_pow2(cq) || cq < sq || sq > CONF_MAX_ENTRIES ||
	    cq > CONF_MAX_ENTRIES)
		FAULT(-EINVAL);
	quota = h->quota_bytes ? h->quota_bytes : CONF_DEFAULT_BYTES;
	if (quota > CONF_MAX_BYTES) {
		FAULT(-EDQUOT);
	} else if (geo_ok) {
		kvmem_page_layout(&h->geometry, 0, &l[0]);
		kvmem_page_layout(&h->geometry, 1, &l[1]);
		if (quota / KVMEM_SLOT_UNIT * KVMEM_SLOT_UNIT <
		    l[0].size + l[1].size)
			FAULT(-EINVAL);
	}
#undef FAULT
	*sq_out = sq;
	*cq_out = cq;
	*quota_out = quota / KVMEM_SLOT_UNIT * KVMEM_SLOT_UNIT;
	return anyneg ? ANY_NEG : err;
}

/* A field of struct kvmem_hello, to spoil. */
struct hello_field {
	const char *name;
	size_t off, width;
};

#define HF(name, field)                                          \
	{                                                        \
		name, offsetof(struct kvmem_hello, field),       \
			sizeof(((struct kvmem_hello *)0)->field) \
	}

static const struct hello_field hello_fields[] = {
	HF("magic", magic),
	HF("abi_version", abi_version),
	HF("size", size),
	HF("features", features),
	HF("layers", geometry.layers),
	HF("kv_heads", geometry.kv_heads),
	HF("head_dim", geometry.head_dim),
	HF("tokens_per_page", geometry.tokens_per_page),
	HF("group_size", geometry.group_size),
	HF("sink_tokens", geometry.sink_tokens),
	HF("format", geometry.format),
	HF("codec", geometry.codec),
	HF("key_scales", geometry.key_scales),
	HF("geometry.resv[0]", geometry.resv[0]),
	HF("rotation", geometry.rotation),
	HF("geometry.resv[3]", geometry.resv[3]),
	HF("quota_bytes", quota_bytes),
	HF("sq_entries", sq_entries),
	HF("cq_entries", cq_entries),
	HF("gpu_mib", gpu_mib),
	HF("resume_session", resume_session),
	HF("gpu_uuid[0]", gpu_uuid[0]),
	HF("gpu_uuid[15]", gpu_uuid[15]),
	HF("resume_token", resume_token),
};

/* A value worth trying in a field of @width bytes. */
static uint64_t spoil_value(struct kvmem_rng *r, size_t width)
{
	uint64_t v;

	switch (kvmem_rng_below(r, 6)) {
	case 0:
		v = 0;
		break;
	case 1:
		v = kvmem_rng_below(r, 17);
		break;
	case 2:
		v = 1ull << kvmem_rng_below(r, 8 * width);
		break;
	case 3:
		v = ~0ull;
		break;
	case 4: /* a quota the configuration allows */
		v = kvmem_rng_below(r, CONF_MAX_BYTES + 1);
		break;
	default:
		v = kvmem_rng_next(r);
		break;
	}
	return width == 8 ? v : v & ((1ull << (8 * width)) - 1);
}

START_TEST(test_hostile_handshake_bytes)
{
	struct kvmemd_proc p;
	struct kvmem_rng rng;
	int i, fds0, accepted = 0, refused = 0, silent = 0, empty = 0;
	int junk_fds[4], nfds;

	start_daemon(&p);
	fds0 = rest_fds(&p);
	kvmem_rng_seed(&rng, 0x68656c6c6fu);
	junk_fds[0] = eventfd(0, EFD_CLOEXEC);
	junk_fds[1] = memfd_create("junk", MFD_CLOEXEC);
	ck_assert_int_ge(pipe2(junk_fds + 2, O_CLOEXEC), 0);
	ck_assert_int_ge(junk_fds[0], 0);
	ck_assert_int_ge(junk_fds[1], 0);
	for (i = 0; i < 300; i++) {
		uint8_t msg[400];
		struct kvmem_hello h;
		const char *what = "random bytes";
		uint32_t sq = 0, cq = 0;
		uint64_t quota = 0, v = 0;
		struct answer a;
		size_t len;
		ssize_t n;
		int expect = ANY_NEG;

		switch (i % 4) {
		case 0: /* random bytes, random length */
			len = i == 0   ? 0
			      : i == 4 ? sizeof(h) - 1
			      : i == 8 ? sizeof(h) + 1
				       : kvmem_rng_below(&rng, sizeof(msg) + 1);
			kvmem_check_fill_random(&rng, msg, sizeof(msg));
			break;
		case 1: /* random bytes, the size of a hello */
			len = sizeof(h);
			kvmem_check_fill_random(&rng, msg, sizeof(msg));
			break;
		case 2: /* a hello's first words, random after */
			len = sizeof(h);
			kvmem_check_fill_random(&rng, msg, sizeof(msg));
			h = kvmemd_hello(QUOTA);
			memcpy(msg, &h, offsetof(struct kvmem_hello, features));
			what = "hello header, random body";
			break;
		default: { /* a valid hello, one field spoiled */
			const struct hello_field *f =
				&hello_fields[kvmem_rng_below(
					&rng, ARRAY_LEN(hello_fields))];

			len = sizeof(h);
			h = kvmemd_hello(QUOTA);
			h.features = KVMEM_FEAT_ALL;
			v = spoil_value(&rng, f->width);
			memcpy((uint8_t *)&h + f->off, &v, f->width);
			memcpy(msg, &h, sizeof(h));
			what = f->name;
			break;
		}
		}
		if (len == sizeof(h)) {
			memcpy(&h, msg, sizeof(h));
			expect = hello_expect(&h, &sq, &cq, &quota);
		}

		/* Descriptors riding along must be closed, not kept. */
		nfds = (int)kvmem_rng_below(&rng, 4);
		empty += !len;
		n = exchange_fds(p.sock, msg, len, junk_fds, nfds, &a);
		if (!len && !n) {
			/* An empty message reads as an end of file. */
			silent++;
			answer_close(&a);
			continue;
		}
		EXPECT_EQ(n, kvmemd_welcome_size(msg, len),
			  "connection %d: %zu bytes (%s = 0x%llx) sent", i, len,
			  what, (unsigned long long)v);
		EXPECT(!a.trunc, "connection %d: answer truncated", i);
		EXPECT_EQ(a.w.magic, KVMEM_WELCOME_MAGIC, "connection %d", i);
		EXPECT_EQ(a.w.size, n, "connection %d", i);
		EXPECT_EQ(a.w.abi_version, KVMEM_ABI_VERSION, "connection %d",
			  i);
		EXPECT(memchr(a.w.message, 0, sizeof(a.w.message)),
		       "connection %d: message not terminated", i);
		if (!expect) {
			EXPECT_EQ(a.w.error, 0,
				  "connection %d: %s = 0x%llx left a valid "
				  "hello, refused: %s",
				  i, what, (unsigned long long)v, a.w.message);
			EXPECT_EQ(a.nfds, 3, "connection %d", i);
			EXPECT_EQ(a.w.sq_entries, sq, "connection %d: %s", i,
				  what);
			EXPECT_EQ(a.w.cq_entries, cq, "connection %d: %s", i,
				  what);
			EXPECT_EQ(a.w.arena_bytes, quota, "connection %d: %s",
				  i, what);
			EXPECT_EQ(a.w.features & ~h.features, 0,
				  "connection %d: features not asked for", i);
			accepted++;
		} else {
			EXPECT(a.w.error < 0 && a.w.error >= -4095,
			       "connection %d: %zu bytes (%s = 0x%llx): error "
			       "%d, expected %d",
			       i, len, what, (unsigned long long)v, a.w.error,
			       expect);
			if (expect != ANY_NEG)
				EXPECT_EQ(a.w.error, expect,
					  "connection %d: %s = 0x%llx: %s", i,
					  what, (unsigned long long)v,
					  a.w.message);
			EXPECT(a.w.message[0], "connection %d: no reason", i);
			EXPECT_EQ(a.nfds, 0,
				  "connection %d: a refusal with "
				  "descriptors",
				  i);
			refused++;
		}
		answer_close(&a);
	}
	ck_assert_int_gt(accepted, 0); /* the seed gives some */
	ck_assert_int_gt(refused, 200);
	ck_assert_int_le(silent, empty);
	ck_assert_int_eq(accepted + refused + silent, 300);
	for (i = 0; i < 4; i++)
		close(junk_fds[i]);

	/* Nothing of the 300 is left behind. */
	ck_assert_uint_eq(wait_status(&p, "sessions", 0), 0);
	ck_assert_uint_eq(wait_status(&p, "pool_used_bytes", 0), 0);
	ck_assert_int_eq(wait_fds(&p, fds0), fds0);
	stop_daemon(&p);
}
END_TEST

/* ---- 2: random SQEs -------------------------------------------------------- */

#define NFUZZ 20000

/* The SQE fields each opcode reads (kvmem/uapi.h); the others must be 0. */
#define U_KIND (1u << 0)
#define U_SLOT (1u << 1)
#define U_SEQ (1u << 2)
#define U_ADDR (1u << 3)
#define U_LEN (1u << 4)
#define U_LAYER (1u << 5)
#define U_TOKENS (1u << 6)

static const uint32_t op_reads[KVMEM_OP_LAST] = {
	[KVMEM_OP_NOP] = 0,
	[KVMEM_OP_SEQ_CREATE] = 0,
	[KVMEM_OP_PAGE_ALLOC] = U_KIND | U_ADDR | U_LEN,
	[KVMEM_OP_PAGE_SEAL] = U_SLOT | U_SEQ | U_LAYER | U_TOKENS,
	[KVMEM_OP_PAGE_FREE] = U_SLOT | U_SEQ,
	[KVMEM_OP_SEQ_FORK] = U_SEQ,
	[KVMEM_OP_SEQ_ACQUIRE] = U_SEQ | U_ADDR | U_LEN,
	[KVMEM_OP_SEQ_RELEASE] = U_SEQ,
	[KVMEM_OP_SEQ_FREE] = U_SEQ,
	[KVMEM_OP_STATS] = U_ADDR | U_LEN,
	[KVMEM_OP_SEQ_PREFETCH] = U_SEQ,
	[KVMEM_OP_PREFIX_PUBLISH] = U_SEQ | U_ADDR | U_LEN | U_LAYER | U_TOKENS,
	[KVMEM_OP_PREFIX_ATTACH] = U_SEQ | U_ADDR | U_LEN | U_LAYER | U_TOKENS,
	[KVMEM_OP_PREFIX_FETCH] = U_ADDR | U_LEN | U_TOKENS,
};

/* Mostly zero, else small, else anything. */
static uint64_t sparse(struct kvmem_rng *r)
{
	switch (kvmem_rng_below(r, 8)) {
	case 0:
		return kvmem_rng_below(r, 17);
	case 1:
		return kvmem_rng_next(r);
	default:
		return 0;
	}
}

#define FUZZ_SLOTS 256

struct fuzz {
	struct kvmem_rng rng;
	uint64_t baddr, bend; /* the caller's part of the buffer region */
	const uint8_t *buf; /* at baddr */
	uint32_t hi_seq; /* highest sequence id seen so far */
	uint32_t slots[FUZZ_SLOTS]; /* slots PAGE_ALLOC returned lately */
	uint32_t nslots;
};

/* A slot to name: mostly one the daemon handed out, else anything. */
static uint32_t fuzz_slot(struct fuzz *f)
{
	struct kvmem_rng *r = &f->rng;

	if (f->nslots && kvmem_rng_below(r, 4))
		return f->slots[kvmem_rng_below(
			r, f->nslots < FUZZ_SLOTS ? f->nslots : FUZZ_SLOTS)];
	return (uint32_t)kvmem_rng_below(r, QUOTA / KVMEM_SLOT_UNIT + 64);
}

/*
 * Remember the slots a PAGE_ALLOC wrote. A later SQE may have written over
 * them already: they are only hints for fuzz_slot().
 */
static void fuzz_alloc_done(struct fuzz *f, const struct kvmem_sqe *e,
			    int32_t res)
{
	uint32_t u;
	int32_t i;

	if (res <= 0 || e->opcode != KVMEM_OP_PAGE_ALLOC ||
	    e->addr < f->baddr || e->addr > f->bend ||
	    (uint64_t)res * sizeof(u) > f->bend - e->addr)
		return;
	for (i = 0; i < res; i++) {
		memcpy(&u, f->buf + (e->addr - f->baddr) + i * sizeof(u),
		       sizeof(u));
		f->slots[f->nslots++ % FUZZ_SLOTS] = u;
	}
}

static void fuzz_sqe(struct fuzz *f, struct kvmem_sqe *e)
{
	struct kvmem_rng *r = &f->rng;
	uint64_t style = kvmem_rng_below(r, 4);
	uint64_t nwords = (f->bend - f->baddr) / 4;
	uint32_t use;

	if (style == 0) {
		kvmem_check_fill_random(r, e, sizeof(*e));
		return;
	}
	memset(e, 0, sizeof(*e));
	e->opcode =
		(uint8_t)(style == 1 ? kvmem_rng_next(r)
				     : kvmem_rng_below(r, KVMEM_OP_LAST + 1));
	if (style == 1) {
		/* Any field may be set. */
		e->flags = (uint8_t)sparse(r);
		e->kind = (uint8_t)sparse(r);
		e->resv0 = (uint8_t)sparse(r);
		e->slot = (uint32_t)sparse(r);
		e->seq = sparse(r);
		e->addr = sparse(r);
		e->len = (uint32_t)sparse(r);
		e->layer = (uint32_t)sparse(r);
		e->token_start = (uint32_t)sparse(r);
		e->ntokens = (uint32_t)sparse(r);
		e->resv1[0] = kvmem_rng_below(r, 16) ? 0 : sparse(r);
		e->resv1[1] = kvmem_rng_below(r, 16) ? 0 : sparse(r);
		return;
	}
	use = e->opcode < KVMEM_OP_LAST ? op_reads[e->opcode] : 0;
	if (style == 2) {
		/* What the op reads, plausible values. */
		if (use & U_KIND)
			e->kind = (uint8_t)kvmem_rng_below(r, 3);
		if (use & U_SLOT)
			e->slot = fuzz_slot(f);
		if (use & U_SEQ)
			e->seq = kvmem_rng_below(r, 2)
					 ? kvmem_rng_below(r, f->hi_seq + 4)
					 : 0;
		if ((use & U_ADDR) && kvmem_rng_below(r, 8))
			e->addr =
				f->baddr + 4 * kvmem_rng_below(r, nwords + 64);
		else if (use & U_ADDR)
			e->addr = kvmem_rng_next(r);
		if (use & U_LEN)
			e->len = (uint32_t)kvmem_rng_below(
				r, e->opcode == KVMEM_OP_STATS
					   ? sizeof(struct kvmem_stats) + 16
					   : KVMEM_ALLOC_MAX + 16);
		if (use & U_LAYER)
			e->layer = (uint32_t)kvmem_rng_below(r, 3);
		if (use & U_TOKENS) {
			e->token_start = (uint32_t)kvmem_rng_below(r, 100);
			e->ntokens = (uint32_t)kvmem_rng_below(r, 40);
		}
		return;
	}
	/* What the op reads, anything. */
	if (use & U_KIND)
		e->kind = (uint8_t)kvmem_rng_next(r);
	if (use & U_SLOT)
		e->slot = (uint32_t)kvmem_rng_next(r);
	if (use & U_SEQ)
		e->seq = kvmem_rng_next(r);
	if (use & U_ADDR)
		e->addr = kvmem_rng_next(r);
	if (use & U_LEN)
		e->len = (uint32_t)kvmem_rng_next(r);
	if (use & U_LAYER)
		e->layer = (uint32_t)kvmem_rng_next(r);
	if (use & U_TOKENS) {
		e->token_start = (uint32_t)kvmem_rng_next(r);
		e->ntokens = (uint32_t)kvmem_rng_next(r);
	}
}

/* Does @e set a field its opcode does not read, a flag or a reserved word? */
static int sqe_malformed(const struct kvmem_sqe *e)
{
	uint32_t use;

	if (e->opcode >= KVMEM_OP_LAST || e->flags || e->resv0 || e->resv1[0] ||
	    e->resv1[1])
		return 1;
	use = op_reads[e->opcode];
	return (!(use & U_KIND) && e->kind) || (!(use & U_SLOT) && e->slot) ||
	       (!(use & U_SEQ) && e->seq) || (!(use & U_ADDR) && e->addr) ||
	       (!(use & U_LEN) && e->len) || (!(use & U_LAYER) && e->layer) ||
	       (!(use & U_TOKENS) && (e->token_start || e->ntokens));
}

/* Is [addr, addr + len) inside the buffer region (the library's part
 * included: the daemon cannot tell them apart)? */
static int in_buf(const struct fuzz *f, uint64_t addr, uint64_t len)
{
	return addr <= f->bend && len <= f->bend - addr;
}

/*
 * Judge one completion, in submission order (the SQ is consumed in
 * order), against the ABI and the sequences the earlier ones created.
 */
static void fuzz_judge(const struct fuzz *f, const struct kvmem_sqe *e,
		       int32_t res, uint8_t *live, uint32_t i)
{
	uint64_t seq = e->seq;

	EXPECT(res >= -4095, "SQE %u (opcode %u): res %d", i, e->opcode, res);
	if (sqe_malformed(e)) {
		EXPECT_EQ(res, -EINVAL,
			  "SQE %u: opcode %u flags %u kind %u "
			  "slot %u seq %llu len %u",
			  i, e->opcode, e->flags, e->kind, e->slot,
			  (unsigned long long)e->seq, e->len);
		return;
	}
	switch (e->opcode) {
	case KVMEM_OP_NOP:
		EXPECT_EQ(res, 0, "SQE %u: NOP", i);
		break;
	case KVMEM_OP_SEQ_CREATE:
	case KVMEM_OP_SEQ_FORK:
		if (e->opcode == KVMEM_OP_SEQ_FORK &&
		    (seq > CONF_MAX_SEQS || !live[seq])) {
			EXPECT(res < 0, "SQE %u: fork of no sequence %llu: %d",
			       i, (unsigned long long)seq, res);
			break;
		}
		EXPECT(res != 0, "SQE %u: opcode %u made sequence 0", i,
		       e->opcode);
		if (res < 0) {
			/* A fork of a released sequence is -EBUSY. */
			EXPECT(res == -ENOSPC || res == -ENOMEM ||
				       (res == -EBUSY &&
					e->opcode == KVMEM_OP_SEQ_FORK),
			       "SQE %u: opcode %u: %d", i, e->opcode, res);
			break;
		}
		EXPECT(res <= (int32_t)CONF_MAX_SEQS, "SQE %u: sequence %d", i,
		       res);
		EXPECT(!live[res], "SQE %u: sequence %d handed out twice", i,
		       res);
		live[res] = 1;
		break;
	case KVMEM_OP_SEQ_ACQUIRE:
		if (seq > CONF_MAX_SEQS || !live[seq] ||
		    e->len % sizeof(struct kvmem_page_move_ex) ||
		    (e->len && (!in_buf(f, e->addr, e->len) || e->addr % 4))) {
			EXPECT(res < 0,
			       "SQE %u: SEQ_ACQUIRE of %llu, %u to %llu", i,
			       (unsigned long long)seq, e->len,
			       (unsigned long long)e->addr);
			break;
		}
		/* No store: nothing ever moved, nothing to report. */
		EXPECT_EQ(res, 0, "SQE %u: SEQ_ACQUIRE of %llu", i,
			  (unsigned long long)seq);
		break;
	case KVMEM_OP_SEQ_RELEASE:
	case KVMEM_OP_SEQ_FREE:
		if (seq > CONF_MAX_SEQS || !live[seq]) {
			EXPECT(res < 0, "SQE %u: opcode %u on no sequence %llu",
			       i, e->opcode, (unsigned long long)seq);
			break;
		}
		EXPECT_EQ(res, 0, "SQE %u: opcode %u on sequence %llu", i,
			  e->opcode, (unsigned long long)seq);
		if (e->opcode == KVMEM_OP_SEQ_FREE)
			live[seq] = 0;
		break;
	case KVMEM_OP_PAGE_ALLOC:
		if (e->kind > KVMEM_SLOT_HOT || !e->len ||
		    !in_buf(f, e->addr, (uint64_t)e->len * sizeof(uint32_t))) {
			EXPECT(res < 0,
			       "SQE %u: PAGE_ALLOC kind %u len %u addr "
			       "%llu: %d",
			       i, e->kind, e->len, (unsigned long long)e->addr,
			       res);
			break;
		}
		EXPECT(res != 0 && res <= (int32_t)e->len &&
			       res <= KVMEM_ALLOC_MAX,
		       "SQE %u: PAGE_ALLOC of %u: %d", i, e->len, res);
		if (res < 0 && e->len <= KVMEM_ALLOC_MAX &&
		    e->addr % sizeof(uint32_t) == 0)
			EXPECT_EQ(res, -ENOMEM, "SQE %u: PAGE_ALLOC of %u", i,
				  e->len);
		break;
	case KVMEM_OP_STATS:
		if (!in_buf(f, e->addr, e->len)) {
			EXPECT(res < 0, "SQE %u: STATS of %u to %llu: %d", i,
			       e->len, (unsigned long long)e->addr, res);
			break;
		}
		if (e->len && e->len <= sizeof(struct kvmem_stats) &&
		    e->addr % 8 == 0)
			EXPECT_EQ(res, e->len, "SQE %u: STATS to %llu", i,
				  (unsigned long long)e->addr);
		else
			EXPECT(res < 0 || (uint32_t)res <= e->len,
			       "SQE %u: STATS of %u: %d", i, e->len, res);
		break;
	default: /* PAGE_SEAL (no page this client wrote), PAGE_FREE, and
		  * the prefix ops: nothing sealed to publish, no block
		  * published to attach, no shared tier to fetch from */
		EXPECT(res <= 0, "SQE %u: opcode %u: %d", i, e->opcode, res);
		break;
	}
}

START_TEST(test_hostile_random_sqes)
{
	struct kvmemd_proc p;
	struct kvmem_cache *c;
	struct kvmem_sqe *sqes, *e;
	struct kvmem_stats st;
	struct kvmem_cqe cqe;
	struct fuzz f = { 0 };
	int32_t *res;
	uint8_t *seen, *live;
	uint32_t sent = 0, done = 0, inflight = 0, i, batch, reap;
	uint64_t errors = 0, nlive = 0;
	size_t blen;
	int ret;

	start_daemon(&p);
	c = kvmemd_connect(&p, QUOTA);
	f.buf = kvmem_ring_buffer(c, &f.baddr, &blen);
	ck_assert_ptr_nonnull(f.buf);
	f.bend = f.baddr + blen;
	kvmem_rng_seed(&f.rng, 0x73716573u);
	sqes = kvmem_check_xmalloc(NFUZZ * sizeof(*sqes));
	res = kvmem_check_xmalloc(NFUZZ * sizeof(*res));
	seen = calloc(NFUZZ, 1);
	live = calloc(CONF_MAX_SEQS + 1, 1);
	ck_assert_ptr_nonnull(seen);
	ck_assert_ptr_nonnull(live);

	while (done < NFUZZ) {
		batch = 1 + (uint32_t)kvmem_rng_below(&f.rng, 2 * CONF_SQ);
		for (i = 0; i < batch && sent < NFUZZ; i++) {
			e = kvmem_ring_sqe(c);
			if (!e)
				break; /* full: reap first */
			fuzz_sqe(&f, e);
			/* Bit 63 is the library's; the low 16 bits count. */
			e->user_data = (kvmem_rng_next(&f.rng) &
					~KVMEM_USER_DATA_LIB & ~0xffffull) |
				       sent;
			sqes[sent++] = *e;
			inflight++;
		}
		ret = kvmem_ring_submit(c);
		ck_assert_int_eq(ret, (int)i);
		ck_assert_uint_gt(inflight, 0);
		reap = 1 + (uint32_t)kvmem_rng_below(&f.rng, inflight);
		while (reap--) {
			ret = kvmem_ring_wait(c, &cqe, 2 * wait_ms());
			ck_assert_msg(ret == 1,
				      "kvmem_ring_wait: %d with %u in flight, "
				      "%u of %u done",
				      ret, inflight, done, sent);
			i = (uint32_t)(cqe.user_data & 0xffff);
			EXPECT(i < sent, "completion for SQE %u, %u sent", i,
			       sent);
			EXPECT_EQ(cqe.user_data, sqes[i].user_data,
				  "SQE %u: user_data", i);
			EXPECT(!seen[i], "SQE %u completed twice", i);
			EXPECT_EQ(cqe.flags, 0, "SQE %u: CQE flags", i);
			seen[i] = 1;
			res[i] = cqe.res;
			if (!sqe_malformed(&sqes[i]))
				fuzz_alloc_done(&f, &sqes[i], cqe.res);
			if (cqe.res > 0 &&
			    (sqes[i].opcode == KVMEM_OP_SEQ_CREATE ||
			     sqes[i].opcode == KVMEM_OP_SEQ_FORK) &&
			    !sqe_malformed(&sqes[i]) &&
			    (uint32_t)cqe.res > f.hi_seq)
				f.hi_seq = (uint32_t)cqe.res;
			done++;
			inflight--;
		}
	}
	ck_assert_uint_eq(sent, NFUZZ);
	ck_assert_uint_eq(inflight, 0);
	ck_assert_int_eq(kvmem_ring_wait(c, &cqe, 0), 0);
	for (i = 0; i < NFUZZ; i++) {
		EXPECT(seen[i], "SQE %u never completed", i);
		fuzz_judge(&f, &sqes[i], res[i], live, i);
		errors += res[i] < 0;
	}
	for (i = 1; i <= CONF_MAX_SEQS; i++)
		nlive += live[i];

	/* The session's counters agree with what came back. */
	ck_assert_int_eq(kvmem_daemon_stats(c, &st), 0);
	ck_assert_uint_eq(st.ops, NFUZZ);
	ck_assert_uint_eq(st.op_errors, errors);
	ck_assert_uint_eq(st.seqs, nlive);
	ck_assert_uint_eq(st.arena_bytes, QUOTA);
	ck_assert_uint_le(st.used_bytes, QUOTA);
	kvmem_close(c);
	free(sqes);
	free(res);
	free(seen);
	free(live);

	ck_assert_uint_eq(wait_status(&p, "sessions", 0), 0);
	ck_assert_uint_eq(wait_status(&p, "pool_used_bytes", 0), 0);
	/* A fresh connection reads back what it wrote. */
	stop_daemon(&p);
}
END_TEST

/* ---- 3, 4, 5: ring protocol violations ------------------------------------ */

/* @r broke the protocol: it is hung up on, logged, and counted once. */
static void expect_dropped(const struct kvmemd_proc *p, struct kvmemd_raw *r,
			   unsigned long long dropped0)
{
	char who[64];

	ck_assert_msg(kvmemd_raw_hung_up(r, wait_ms()),
		      "session %u not hung up on", r->w.session);
	snprintf(who, sizeof(who), "session %u ", r->w.session);
	ck_assert_msg(log_has(p, who, "dropped"), "no \"%s... dropped\" in %s",
		      who, p->log);
	ck_assert_uint_eq(status_u64(p, "dropped"), dropped0 + 1);
}

START_TEST(test_hostile_sq_tail_overrun)
{
	struct kvmemd_proc p;
	struct kvmem_hello h = kvmemd_hello(QUOTA);
	struct kvmem_sqe nop = { .opcode = KVMEM_OP_NOP, .user_data = 7 };
	struct kvmemd_raw r;
	struct kvmem_cqe cqe;
	struct twin t;
	unsigned long long pool1, dropped0;
	uint32_t head;

	start_daemon(&p);
	ck_assert_uint_eq(status_u64(&p, "pool_used_bytes"), 0);

	/* The bystander works before... */
	twin_open(&t, &p);
	twin_append(&t, 45, 3);
	twin_verify(&t);
	ck_assert_uint_eq(status_u64(&p, "sessions"), 1);
	pool1 = status_u64(&p, "pool_used_bytes");
	ck_assert_uint_gt(pool1, QUOTA - 1);

	ck_assert_int_eq(kvmemd_raw_attach(&r, &p, &h, sizeof(h)), 0);
	cqe = kvmemd_raw_op(&r, &nop);
	ck_assert_uint_eq(cqe.user_data, 7);
	ck_assert_int_eq(cqe.res, 0);
	ck_assert_uint_eq(status_u64(&p, "sessions"), 2);
	ck_assert_uint_gt(status_u64(&p, "pool_used_bytes"), pool1);
	dropped0 = status_u64(&p, "dropped");

	/* sq_entries + 7 SQEs published past what the daemon consumed. */
	head = __atomic_load_n(&r.ring->sq_head, __ATOMIC_ACQUIRE);
	ck_assert_uint_eq(head, 1);
	r.sq_tail = head + r.w.sq_entries + 7;
	raw_publish(&r);
	expect_dropped(&p, &r, dropped0);
	kvmemd_raw_detach(&r);

	/* ... and after, with the pages it wrote before untouched. */
	twin_verify(&t);
	twin_append(&t, 30, 4);
	twin_verify(&t);
	ck_assert_uint_eq(wait_status(&p, "sessions", 1), 1);
	ck_assert_uint_eq(wait_status(&p, "pool_used_bytes", pool1), pool1);
	twin_close(&t);
	ck_assert_uint_eq(wait_status(&p, "sessions", 0), 0);
	ck_assert_uint_eq(wait_status(&p, "pool_used_bytes", 0), 0);
	stop_daemon(&p);
}
END_TEST

/*
 * The bound exactly: a tail sq_entries past the head is a full ring, served
 * SQE by SQE in order; one past that is a broken ring.
 */
START_TEST(test_hostile_sq_tail_full_ring)
{
	struct kvmemd_proc p;
	struct kvmem_hello h = kvmemd_hello(QUOTA);
	struct kvmemd_raw r;
	struct kvmem_cqe cqe;
	unsigned long long dropped0;
	uint32_t i, n;

	start_daemon(&p);
	dropped0 = status_u64(&p, "dropped");
	ck_assert_int_eq(kvmemd_raw_attach(&r, &p, &h, sizeof(h)), 0);
	n = r.w.sq_entries;
	ck_assert_uint_eq(n, CONF_SQ);
	for (i = 0; i < n; i++)
		r.sqes[r.sq_tail++ & (n - 1)] =
			(struct kvmem_sqe){ .opcode = KVMEM_OP_NOP,
					    .user_data = 1000 + i };
	ck_assert_uint_eq(r.sq_tail, n);
	raw_publish(&r);
	for (i = 0; i < n; i++) {
		cqe = kvmemd_raw_reap(&r);
		ck_assert_uint_eq(cqe.user_data, 1000 + i);
		ck_assert_int_eq(cqe.res, 0);
	}
	ck_assert_uint_eq(__atomic_load_n(&r.ring->sq_head, __ATOMIC_ACQUIRE),
			  n);
	ck_assert_int_eq(kvmemd_raw_hung_up(&r, 0), 0);

	/* One SQE more than the ring holds, past the head. */
	r.sq_tail += n + 1;
	raw_publish(&r);
	expect_dropped(&p, &r, dropped0);
	kvmemd_raw_detach(&r);
	ck_assert_uint_eq(wait_status(&p, "sessions", 0), 0);
	ck_assert_uint_eq(wait_status(&p, "pool_used_bytes", 0), 0);
	stop_daemon(&p);
}
END_TEST

START_TEST(test_hostile_cq_head_past_tail)
{
	struct kvmemd_proc p;
	struct kvmem_hello h = kvmemd_hello(QUOTA);
	struct kvmemd_raw r;
	unsigned long long dropped0;

	start_daemon(&p);
	dropped0 = status_u64(&p, "dropped");
	ck_assert_int_eq(kvmemd_raw_attach(&r, &p, &h, sizeof(h)), 0);
	ck_assert_uint_eq(status_u64(&p, "sessions"), 1);
	ck_assert_uint_eq(__atomic_load_n(&r.ring->cq_tail, __ATOMIC_ACQUIRE),
			  0);
	__atomic_store_n(&r.ring->cq_head, 1000, __ATOMIC_RELEASE);
	r.sqes[0] = (struct kvmem_sqe){ .opcode = KVMEM_OP_NOP };
	r.sq_tail = 1;
	raw_publish(&r);
	expect_dropped(&p, &r, dropped0);
	kvmemd_raw_detach(&r);
	ck_assert_uint_eq(wait_status(&p, "sessions", 0), 0);
	ck_assert_uint_eq(wait_status(&p, "pool_used_bytes", 0), 0);
	stop_daemon(&p);
}
END_TEST

START_TEST(test_hostile_control_socket_data)
{
	static const char junk[] = "hello again";
	struct kvmemd_proc p;
	struct kvmem_hello h = kvmemd_hello(QUOTA);
	struct kvmem_sqe nop = { .opcode = KVMEM_OP_NOP, .user_data = 1 };
	struct kvmemd_raw r;
	unsigned long long dropped0;

	start_daemon(&p);
	dropped0 = status_u64(&p, "dropped");
	ck_assert_int_eq(kvmemd_raw_attach(&r, &p, &h, sizeof(h)), 0);
	ck_assert_int_eq(kvmemd_raw_op(&r, &nop).res, 0);
	ck_assert_int_eq(send(r.sock, junk, sizeof(junk), MSG_NOSIGNAL),
			 (ssize_t)sizeof(junk));
	expect_dropped(&p, &r, dropped0);
	kvmemd_raw_detach(&r);
	ck_assert_uint_eq(wait_status(&p, "sessions", 0), 0);
	ck_assert_uint_eq(wait_status(&p, "pool_used_bytes", 0), 0);
	stop_daemon(&p);
}
END_TEST

/*
 * The eventfds are shared with the client, which may push their counters
 * to the top: the daemon's doorbell read and its CQ wake-up must neither
 * block nor fail the session.
 */
START_TEST(test_hostile_eventfd_saturated)
{
	struct kvmemd_proc p;
	struct kvmem_hello h = kvmemd_hello(QUOTA);
	struct kvmemd_raw r;
	struct kvmem_cqe cqe;
	struct twin t;
	uint64_t end;
	uint32_t i;

	start_daemon(&p);
	twin_open(&t, &p);
	ck_assert_int_eq(kvmemd_raw_attach(&r, &p, &h, sizeof(h)), 0);
	ck_assert_int_eq(eventfd_write(r.cq_efd, 0xfffffffffffffffeull), 0);
	ck_assert_int_eq(eventfd_write(r.sq_efd, 0xfffffffffffffffeull), 0);
	/* Ask for a CQ wake-up the daemon cannot deliver. */
	__atomic_store_n(&r.ring->cq_flags, KVMEM_RING_CQ_WAIT,
			 __ATOMIC_RELAXED);
	for (i = 0; i < 16; i++)
		r.sqes[r.sq_tail++ & (r.w.sq_entries - 1)] =
			(struct kvmem_sqe){ .opcode = KVMEM_OP_NOP,
					    .user_data = i };
	raw_publish(&r);
	end = now_ms() + (uint64_t)wait_ms();
	while (__atomic_load_n(&r.ring->cq_tail, __ATOMIC_ACQUIRE) != 16 &&
	       now_ms() < end)
		usleep(1000);
	ck_assert_uint_eq(__atomic_load_n(&r.ring->cq_tail, __ATOMIC_ACQUIRE),
			  16);
	for (i = 0; i < 16; i++) {
		cqe = r.cqes[i & (r.w.cq_entries - 1)];
		ck_assert_uint_eq(cqe.user_data, i);
		ck_assert_int_eq(cqe.res, 0);
	}
	r.cq_head = 16;
	__atomic_store_n(&r.ring->cq_head, r.cq_head, __ATOMIC_RELEASE);
	ck_assert_int_eq(kvmemd_raw_hung_up(&r, 0), 0);
	twin_append(&t, 45, 5);
	twin_verify(&t);
	twin_close(&t);
	kvmemd_raw_detach(&r);
	ck_assert_uint_eq(wait_status(&p, "sessions", 0), 0);
	stop_daemon(&p);
}
END_TEST

/* ---- Normal clients in children ------------------------------------------ */

/*
 * Why each child failed, in memory the parent shares: a failure in CI
 * must say what went wrong in the test's own message, since the tail of
 * the log the CI keeps may not hold the child's stderr.
 */
#define WHY_SLOTS 64
#define WHY_LEN 256
static char (*child_why)[WHY_LEN];

static void why_map(void)
{
	void *m = mmap(NULL, WHY_SLOTS * WHY_LEN, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	ck_assert_ptr_ne(m, MAP_FAILED);
	child_why = m;
}

static void why_unmap(void)
{
	munmap(child_why, WHY_SLOTS * WHY_LEN);
	child_why = NULL;
}

/* Print why a child failed, keep it for the parent, and end the child. */
static void __attribute__((noreturn, format(printf, 3, 4)))
child_fail(unsigned int id, unsigned int op, const char *fmt, ...)
{
	char why[WHY_LEN];
	va_list ap;
	int n;

	n = snprintf(why, sizeof(why), "op %u: ", op);
	va_start(ap, fmt);
	vsnprintf(why + n, sizeof(why) - (size_t)n, fmt, ap);
	va_end(ap);
	fprintf(stderr, "client %u, %s\n", id, why);
	if (child_why && id < WHY_SLOTS)
		memcpy(child_why[id], why, sizeof(why));
	_exit(1);
}

#define ST_LIVE 6 /* sequences at once */
#define ST_MAXTOK 160 /* tokens per layer */
#define ST_MAXAPP 12 /* tokens per append */
#define ST_INFLIGHT 16 /* raw SQEs */
#define ST_STATS_SLOTS 64

enum { RAW_NOP = 1, RAW_STATS = 2 };

struct client {
	unsigned int id, op;
	struct kvmem_geometry g;
	struct kvmem_cache *c, *e;
	struct kvmem_seq *rs[ST_LIVE], *es[ST_LIVE];
	unsigned int nlive;
	size_t row;
	float *k, *v, *rk, *rv, *ek, *ev;
	uint64_t baddr;
	uint8_t *buf;
	uint8_t *raw; /* per raw SQE: RAW_*, 0 once completed */
	unsigned int nraw, inflight;
	struct kvmem_rng rng;
};

static void client_reap(struct client *cl)
{
	struct kvmem_stats st;
	struct kvmem_cqe cqe;
	uint64_t i;
	int ret = kvmem_ring_wait(cl->c, &cqe, 6 * wait_ms());

	if (ret != 1)
		child_fail(cl->id, cl->op, "kvmem_ring_wait: %d, %u in flight",
			   ret, cl->inflight);
	i = cqe.user_data;
	if (i >= cl->nraw || !cl->raw[i])
		child_fail(cl->id, cl->op,
			   "completion for user_data %llu: unknown or twice",
			   (unsigned long long)i);
	if (cqe.flags)
		child_fail(cl->id, cl->op, "CQE flags 0x%x", cqe.flags);
	if (cl->raw[i] == RAW_NOP && cqe.res != 0)
		child_fail(cl->id, cl->op, "NOP %llu: %d",
			   (unsigned long long)i, cqe.res);
	if (cl->raw[i] == RAW_STATS) {
		if (cqe.res != (int32_t)sizeof(st))
			child_fail(cl->id, cl->op, "STATS %llu: %d",
				   (unsigned long long)i, cqe.res);
		memcpy(&st, cl->buf + i % ST_STATS_SLOTS * sizeof(st),
		       sizeof(st));
		if (st.arena_bytes != QUOTA ||
		    st.pool_bytes != CONF_POOL_BYTES || st.used_bytes > QUOTA)
			child_fail(cl->id, cl->op,
				   "STATS %llu: arena %llu pool %llu used %llu",
				   (unsigned long long)i,
				   (unsigned long long)st.arena_bytes,
				   (unsigned long long)st.pool_bytes,
				   (unsigned long long)st.used_bytes);
	}
	cl->raw[i] = 0;
	cl->inflight--;
}

static void client_raw(struct client *cl, int type)
{
	struct kvmem_sqe *e = kvmem_ring_sqe(cl->c);
	int ret;

	if (!e && cl->inflight) {
		client_reap(cl);
		e = kvmem_ring_sqe(cl->c);
	}
	if (!e)
		child_fail(cl->id, cl->op, "no SQE, %u in flight",
			   cl->inflight);
	e->user_data = cl->nraw;
	if (type == RAW_STATS) {
		e->opcode = KVMEM_OP_STATS;
		e->addr = cl->baddr + cl->nraw % ST_STATS_SLOTS *
					      sizeof(struct kvmem_stats);
		e->len = sizeof(struct kvmem_stats);
	}
	cl->raw[cl->nraw++] = (uint8_t)type;
	cl->inflight++;
	ret = kvmem_ring_submit(cl->c);
	if (ret != 1)
		child_fail(cl->id, cl->op, "kvmem_ring_submit: %d", ret);
}

/* Read a random range of sequence @i from both caches and compare. */
static void client_read(struct client *cl, unsigned int i, uint32_t l,
			uint32_t len)
{
	uint32_t start = (uint32_t)kvmem_rng_below(&cl->rng, len);
	uint32_t n = 1 + (uint32_t)kvmem_rng_below(&cl->rng, len - start);
	uint32_t er = (uint32_t)kvmem_rng_below(&cl->rng, 3);
	size_t bytes = (size_t)n * cl->row * sizeof(float);
	int a, b;

	a = kvmem_seq_read(cl->rs[i], l, start, n, er, cl->rk, cl->rv, NULL);
	b = kvmem_seq_read(cl->es[i], l, start, n, er, cl->ek, cl->ev, NULL);
	if (a || b)
		child_fail(cl->id, cl->op, "read %u+%u of layer %u: %d / %d",
			   start, n, l, a, b);
	if (memcmp(cl->rk, cl->ek, bytes) || memcmp(cl->rv, cl->ev, bytes))
		child_fail(cl->id, cl->op,
			   "read %u+%u of layer %u differs from the embedded "
			   "cache",
			   start, n, l);
}

static void client_drop(struct client *cl, unsigned int i)
{
	kvmem_seq_free(cl->rs[i]);
	kvmem_seq_free(cl->es[i]);
	cl->nlive--;
	cl->rs[i] = cl->rs[cl->nlive];
	cl->es[i] = cl->es[cl->nlive];
}

/*
 * A normal client: @nops ops mixing raw NOPs and STATS (each completion
 * exactly once) with cache work checked against an embedded twin. Exits
 * the process: 0 on success, 1 with the reason on stderr.
 */
static void __attribute__((noreturn))
client_run(const char *path, unsigned int id, unsigned int nops)
{
	struct kvmem_connect_opts o = { .quota_bytes = QUOTA };
	struct kvmem_cache_stats cs;
	struct kvmem_stats st;
	struct client cl = { .id = id };
	size_t n, blen;
	unsigned int i;
	uint32_t l, len, cnt;
	int a, b;

	cl.g = kvmemd_test_geo();
	cl.row = (size_t)cl.g.kv_heads * cl.g.head_dim;
	n = (size_t)ST_MAXTOK * cl.row;
	cl.k = malloc(6 * n * sizeof(float));
	cl.raw = calloc(nops, 1);
	if (!cl.k || !cl.raw)
		child_fail(id, 0, "out of memory");
	cl.v = cl.k + n;
	cl.rk = cl.v + n;
	cl.rv = cl.rk + n;
	cl.ek = cl.rv + n;
	cl.ev = cl.ek + n;
	kvmem_rng_seed(&cl.rng, 0x636c69656e74ull + id);
	a = kvmem_connect(path, &cl.g, &o, &cl.c);
	if (a)
		child_fail(id, 0, "kvmem_connect: %s (%s)", kvmem_strerror(a),
			   kvmem_connect_error());
	a = kvmem_open_embedded(&cl.g, QUOTA, &cl.e);
	if (a)
		child_fail(id, 0, "kvmem_open_embedded: %d", a);
	cl.buf = kvmem_ring_buffer(cl.c, &cl.baddr, &blen);
	if (!cl.buf || blen < ST_STATS_SLOTS * sizeof(st))
		child_fail(id, 0, "kvmem_ring_buffer: %zu bytes", blen);

	for (cl.op = 0; cl.op < nops; cl.op++) {
		uint64_t pick = kvmem_rng_below(&cl.rng, 100);

		i = cl.nlive ? (unsigned int)kvmem_rng_below(&cl.rng, cl.nlive)
			     : 0;
		l = (uint32_t)kvmem_rng_below(&cl.rng, cl.g.layers);
		len = cl.nlive ? kvmem_seq_len(cl.es[i], l) : 0;
		if (cl.nlive && kvmem_seq_len(cl.rs[i], l) != len)
			child_fail(id, cl.op,
				   "layer %u: %u tokens, embedded %u", l,
				   kvmem_seq_len(cl.rs[i], l), len);
		if (pick < 30) {
			client_raw(&cl, RAW_NOP);
		} else if (pick < 40) {
			client_raw(&cl, RAW_STATS);
		} else if (!cl.nlive || (pick < 48 && cl.nlive < ST_LIVE)) {
			a = kvmem_seq_create(cl.c, &cl.rs[cl.nlive]);
			b = kvmem_seq_create(cl.e, &cl.es[cl.nlive]);
			if (a || b)
				child_fail(id, cl.op, "create: %d / %d", a, b);
			cl.nlive++;
		} else if (pick < 53 && cl.nlive < ST_LIVE) {
			a = kvmem_seq_fork(cl.rs[i], &cl.rs[cl.nlive]);
			b = kvmem_seq_fork(cl.es[i], &cl.es[cl.nlive]);
			if (a || b)
				child_fail(id, cl.op, "fork: %d / %d", a, b);
			cl.nlive++;
		} else if (pick < 60 || (pick < 85 && len == ST_MAXTOK)) {
			client_drop(&cl, i);
		} else if (pick < 85 || !len) {
			cnt = 1 + (uint32_t)kvmem_rng_below(&cl.rng, ST_MAXAPP);
			if (cnt > ST_MAXTOK - len)
				cnt = ST_MAXTOK - len;
			fill_tokens(cl.k, cnt * cl.row,
				    (uint64_t)id << 40 | cl.op << 1);
			fill_tokens(cl.v, cnt * cl.row,
				    (uint64_t)id << 40 | cl.op << 1 | 1);
			a = kvmem_seq_append(cl.rs[i], l, cl.k, cl.v, cnt);
			b = kvmem_seq_append(cl.es[i], l, cl.k, cl.v, cnt);
			if (a || b)
				child_fail(id, cl.op,
					   "append of %u to %u tokens: %d / %d",
					   cnt, len, a, b);
		} else {
			client_read(&cl, i, l, len);
		}
		while (cl.inflight > ST_INFLIGHT ||
		       (cl.inflight && !kvmem_rng_below(&cl.rng, 4)))
			client_reap(&cl);
	}
	while (cl.inflight)
		client_reap(&cl);
	for (i = 0; i < cl.nraw; i++)
		if (cl.raw[i])
			child_fail(id, cl.op, "raw SQE %u never completed", i);
	kvmem_cache_stats(cl.c, &cs);
	if (cs.ring_errors)
		child_fail(id, cl.op, "%llu ring errors",
			   (unsigned long long)cs.ring_errors);
	a = kvmem_daemon_stats(cl.c, &st);
	if (a || st.seqs != cl.nlive || st.arena_bytes != QUOTA)
		child_fail(id, cl.op, "stats: %d, %llu sequences, %u live", a,
			   (unsigned long long)st.seqs, cl.nlive);
	while (cl.nlive)
		client_drop(&cl, 0);
	kvmem_close(cl.c);
	kvmem_close(cl.e);
	free(cl.k);
	free(cl.raw);
	_exit(0);
}

static void expect_exit0(pid_t pid, unsigned int id)
{
	int status;

	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && !WEXITSTATUS(status),
		      "client %u: status 0x%x: %s", id, status,
		      child_why && id < WHY_SLOTS && child_why[id][0]
			      ? child_why[id]
			      : "(see its stderr)");
}

/* ---- 6: a client that never reads its completions ------------------------ */

START_TEST(test_hostile_cq_never_read)
{
	struct kvmemd_proc p;
	struct kvmem_hello h = kvmemd_hello(QUOTA);
	struct kvmem_sqe nop = { .opcode = KVMEM_OP_NOP, .user_data = 99 };
	struct kvmemd_raw r;
	struct kvmem_cqe cqe;
	uint64_t start, end;
	uint32_t head, i;
	int status = 0, child_done = 0;
	pid_t pid;

	why_map();
	start_daemon(&p);
	h.sq_entries = 8;
	h.cq_entries = 8;
	ck_assert_int_eq(kvmemd_raw_attach(&r, &p, &h, sizeof(h)), 0);
	ck_assert_uint_eq(r.w.sq_entries, 8);
	ck_assert_uint_eq(r.w.cq_entries, 8);

	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid)
		client_run(p.sock, 1, 1000);

	/* Keep the SQ full of NOPs and never move cq_head, for a second at
	 * least and as long as the other client runs. */
	start = now_ms();
	for (;;) {
		head = __atomic_load_n(&r.ring->sq_head, __ATOMIC_ACQUIRE);
		EXPECT(r.sq_tail - head <= 8, "sq_head %u, sq_tail %u", head,
		       r.sq_tail);
		while (r.sq_tail - head < 8) {
			r.sqes[r.sq_tail & 7] = (struct kvmem_sqe){
				.opcode = KVMEM_OP_NOP,
				.user_data = r.sq_tail,
			};
			r.sq_tail++;
		}
		raw_publish(&r);
		if (!child_done && waitpid(pid, &status, WNOHANG) == pid)
			child_done = 1;
		if (child_done && now_ms() - start >= 1000)
			break;
		usleep(1000);
	}
	ck_assert_msg(WIFEXITED(status) && !WEXITSTATUS(status),
		      "the other client: status 0x%x: %s", status,
		      child_why[1][0] ? child_why[1] : "(see its stderr)");
	why_unmap();
	ck_assert_int_eq(kvmemd_raw_hung_up(&r, 0), 0);

	/* 8 completions fill the CQ; then the daemon takes no more SQEs,
	 * and the client has refilled the SQ behind them. */
	end = now_ms() + (uint64_t)wait_ms();
	while (__atomic_load_n(&r.ring->sq_head, __ATOMIC_ACQUIRE) != 8 &&
	       now_ms() < end)
		usleep(1000);
	ck_assert_uint_eq(__atomic_load_n(&r.ring->sq_head, __ATOMIC_ACQUIRE),
			  8);
	ck_assert_uint_eq(__atomic_load_n(&r.ring->cq_tail, __ATOMIC_ACQUIRE),
			  8);
	ck_assert_uint_eq(r.sq_tail, 16);

	/* Reading them lets it go on with the next 8. */
	for (i = 0; i < 8; i++) {
		cqe = r.cqes[i & 7];
		ck_assert_uint_eq(cqe.user_data, i);
		ck_assert_int_eq(cqe.res, 0);
	}
	r.cq_head = 8;
	__atomic_store_n(&r.ring->cq_head, r.cq_head, __ATOMIC_RELEASE);
	raw_publish(&r);
	end = now_ms() + (uint64_t)wait_ms();
	while (__atomic_load_n(&r.ring->cq_tail, __ATOMIC_ACQUIRE) != 16 &&
	       now_ms() < end)
		usleep(1000);
	ck_assert_uint_eq(__atomic_load_n(&r.ring->cq_tail, __ATOMIC_ACQUIRE),
			  16);
	ck_assert_uint_eq(__atomic_load_n(&r.ring->sq_head, __ATOMIC_ACQUIRE),
			  16);
	for (i = 8; i < 16; i++) {
		cqe = r.cqes[i & 7];
		ck_assert_uint_eq(cqe.user_data, i);
		ck_assert_int_eq(cqe.res, 0);
	}
	r.cq_head = 16;
	__atomic_store_n(&r.ring->cq_head, r.cq_head, __ATOMIC_RELEASE);
	cqe = kvmemd_raw_op(&r, &nop);
	ck_assert_uint_eq(cqe.user_data, 99);
	ck_assert_int_eq(cqe.res, 0);
	kvmemd_raw_detach(&r);
	ck_assert_uint_eq(wait_status(&p, "sessions", 0), 0);
	ck_assert_uint_eq(wait_status(&p, "pool_used_bytes", 0), 0);
	stop_daemon(&p);
}
END_TEST

/* ---- 7: clients that die mid-batch ----------------------------------------- */

enum churn_mode {
	CHURN_EXIT, /* _exit() with the batch in flight */
	CHURN_KILL, /* SIGKILL itself with the batch in flight */
	CHURN_CLOSE, /* raw: close the socket, ring once more, exit */
	CHURN_HELLO, /* send the hello and leave during the set-up */
	CHURN_NR,
};

/* The i-th op of a batch: NOP, SEQ_CREATE, PAGE_ALLOC or STATS. */
static void churn_sqe(struct kvmem_sqe *e, unsigned int i, uint64_t baddr)
{
	memset(e, 0, sizeof(*e));
	e->user_data = i;
	switch (i % 4) {
	case 0:
		e->opcode = KVMEM_OP_NOP;
		break;
	case 1:
		e->opcode = KVMEM_OP_SEQ_CREATE;
		break;
	case 2:
		e->opcode = KVMEM_OP_PAGE_ALLOC;
		e->kind = (uint8_t)(i / 4 % 2);
		e->len = 1 + i % 32;
		e->addr = baddr + i * 128;
		break;
	default:
		e->opcode = KVMEM_OP_STATS;
		e->addr = baddr + i * 128;
		e->len = sizeof(struct kvmem_stats);
		break;
	}
}

static void __attribute__((noreturn))
churn_child(const char *path, unsigned int id, enum churn_mode mode)
{
	struct kvmem_geometry g = kvmemd_test_geo();
	struct kvmem_connect_opts o = { .quota_bytes = QUOTA };
	struct kvmem_hello h = kvmemd_hello(QUOTA);
	struct kvmem_cache *c = NULL;
	struct kvmem_seq *s = NULL;
	struct kvmem_sqe *e;
	struct kvmem_cqe cqe;
	struct kvmemd_raw r;
	uint64_t baddr;
	size_t blen, n;
	float *k;
	unsigned int i;
	int ret;

	if (mode == CHURN_HELLO) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);

		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
		if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
		    send(fd, &h, sizeof(h), MSG_NOSIGNAL) != sizeof(h))
			child_fail(id, 0, "hello: %s", strerror(errno));
		_exit(0);
	}
	if (mode == CHURN_CLOSE) {
		ret = raw_open(path, &h, &r);
		if (ret)
			child_fail(id, 0, "attach: %d", ret);
		for (i = 0; i < 64; i++)
			churn_sqe(&r.sqes[r.sq_tail++ & (r.w.sq_entries - 1)],
				  i, 0);
		raw_publish(&r);
		close(r.sock);
		raw_publish(&r);
		_exit(0);
	}

	ret = kvmem_connect(path, &g, &o, &c);
	if (ret)
		child_fail(id, 0, "kvmem_connect: %s (%s)", kvmem_strerror(ret),
			   kvmem_connect_error());
	/* Something to free: a sequence with sealed pages. */
	n = (size_t)45 * g.layers * g.kv_heads * g.head_dim; /* floats of K */
	k = malloc(2 * n * sizeof(float));
	if (!k)
		child_fail(id, 0, "out of memory");
	fill_tokens(k, 2 * n, id);
	ret = kvmem_seq_create(c, &s);
	if (!ret)
		ret = kvmem_seq_append_all(s, k, k + n, 45);
	if (ret)
		child_fail(id, 0, "cache: %d", ret);
	if (!kvmem_ring_buffer(c, &baddr, &blen) || blen < 64 * 128)
		child_fail(id, 0, "kvmem_ring_buffer");
	for (i = 0; i < 64; i++) {
		e = kvmem_ring_sqe(c);
		if (!e) {
			kvmem_ring_submit(c);
			if (kvmem_ring_wait(c, &cqe, 6 * wait_ms()) != 1)
				child_fail(id, i, "no completion");
			e = kvmem_ring_sqe(c);
		}
		if (!e)
			child_fail(id, i, "no SQE");
		churn_sqe(e, i, baddr);
	}
	kvmem_ring_submit(c);
	/* Take some, leave the rest in flight. */
	for (i = 0; i < id % 8; i++)
		kvmem_ring_wait(c, &cqe, 0);
	if (mode == CHURN_KILL)
		kill(getpid(), SIGKILL);
	_exit(0);
}

START_TEST(test_hostile_churn)
{
	struct kvmemd_proc p;
	unsigned int i;
	int fds0, status;
	pid_t pid;

	why_map();
	start_daemon(&p);
	fds0 = rest_fds(&p);
	ck_assert_uint_eq(status_u64(&p, "sessions"), 0);
	ck_assert_uint_eq(status_u64(&p, "pool_used_bytes"), 0);
	for (i = 0; i < 50; i++) {
		enum churn_mode mode = (enum churn_mode)(i % CHURN_NR);

		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (!pid)
			churn_child(p.sock, i, mode);
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		if (mode == CHURN_KILL)
			ck_assert_msg(WIFSIGNALED(status) &&
					      WTERMSIG(status) == SIGKILL,
				      "client %u: status 0x%x", i, status);
		else
			ck_assert_msg(WIFEXITED(status) && !WEXITSTATUS(status),
				      "client %u: status 0x%x: %s", i, status,
				      child_why[i][0] ? child_why[i]
						      : "(see its stderr)");
	}
	why_unmap();
	ck_assert_uint_eq(wait_status(&p, "sessions", 0), 0);
	ck_assert_uint_eq(wait_status(&p, "pool_used_bytes", 0), 0);
	ck_assert_int_eq(wait_fds(&p, fds0), fds0);
	stop_daemon(&p);
}
END_TEST

/* ---- 8: many clients at once ----------------------------------------------- */

#define STRESS_CLIENTS 32
#define STRESS_OPS 10000

START_TEST(test_hostile_stress)
{
	struct kvmemd_proc p;
	pid_t pid[STRESS_CLIENTS];
	unsigned int i;

	why_map();
	start_daemon(&p);
	for (i = 0; i < STRESS_CLIENTS; i++) {
		pid[i] = fork();
		ck_assert_int_ge(pid[i], 0);
		if (!pid[i])
			client_run(p.sock, i, STRESS_OPS);
	}
	for (i = 0; i < STRESS_CLIENTS; i++)
		expect_exit0(pid[i], i);
	why_unmap();
	ck_assert_uint_eq(wait_status(&p, "sessions", 0), 0);
	ck_assert_uint_eq(wait_status(&p, "pool_used_bytes", 0), 0);
	stop_daemon(&p);
}
END_TEST

/* ---- Regression: an unread NOTIFY_SOCKET -------------------------------- */

/*
 * kvmemd blocked in sd_notify() for good once max_dgram_qlen STATUS= lines
 * sat unread in NOTIFY_SOCKET, and from then on answered no one: not the
 * clients, not the admin socket, not SIGTERM. Nothing reads the harness's
 * socket here; the daemon must not care.
 */
START_TEST(test_hostile_notify_unread)
{
	struct kvmemd_proc p;
	struct kvmem_hello h = kvmemd_hello(QUOTA);
	struct kvmemd_raw r;
	int i, ret = 0;

	kvmemd_start(&p, conf, NULL);
	for (i = 0; i < 300 && !ret; i++) {
		ret = raw_open(p.sock, &h, &r);
		kvmemd_raw_detach(&r);
	}
	if (ret) {
		/* Leave nothing behind before failing. */
		kill(p.pid, SIGKILL);
		waitpid(p.pid, NULL, 0);
		kvmemd_cleanup(&p);
		ck_abort_msg("attach %d, NOTIFY_SOCKET unread: %s (kvmemd "
			     "blocked in sd_notify?)",
			     i - 1, strerror(ret < 0 ? -ret : ret));
	}
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

KVMEM_SUITE(daemon_hostile)
{
	Suite *s = suite_create("daemon_hostile");
	TCase *tc = tcase_create("hostile");
	TCase *st = tcase_create("stress");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_hostile_handshake_bytes);
	tcase_add_test(tc, test_hostile_random_sqes);
	tcase_add_test(tc, test_hostile_sq_tail_overrun);
	tcase_add_test(tc, test_hostile_sq_tail_full_ring);
	tcase_add_test(tc, test_hostile_cq_head_past_tail);
	tcase_add_test(tc, test_hostile_control_socket_data);
	tcase_add_test(tc, test_hostile_eventfd_saturated);
	tcase_add_test(tc, test_hostile_cq_never_read);
	tcase_add_test(tc, test_hostile_churn);
	tcase_add_test(tc, test_hostile_notify_unread);
	suite_add_tcase(s, tc);
	tcase_set_timeout(st, 120);
	tcase_add_test(st, test_hostile_stress);
	suite_add_tcase(s, st);
	return s;
}
