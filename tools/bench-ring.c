/* SPDX-License-Identifier: MIT */
/*
 * bench-ring.c - kvmemd's control plane: ring ops next to a socket round trip
 *
 * Everything runs over one session of kvmemd, through the raw ring API
 * (kvmem_ring_sqe(), kvmem_ring_submit(), kvmem_ring_wait()):
 *   NOP batched       --batch SQEs per submit, then all of them reaped
 *   NOP unbatched     one SQE submitted and waited for at a time; each round
 *                     trip is timed, for p50 and p99
 *   PAGE_ALLOC        of one slot, followed by a PAGE_FREE of that slot in
 *                     the next round, so the arena never fills: batched
 *                     (--batch allocs, then --batch frees) and unbatched.
 *                     Allocs and frees both count as ops.
 * The baseline is what a daemon answering over its socket would cost at
 * best: a 64-byte request and a 64-byte answer over an AF_UNIX
 * SOCK_SEQPACKET socketpair with a forked child, blocking send and recv.
 *
 * Every completion is checked (its user_data names an SQE of the round that
 * has not completed yet, its result is what the op returns on success);
 * anything else ends the run with an error, never in a number.
 *
 * Unless told where a daemon runs (--connect, $KVMEM_SOCKET), the benchmark
 * starts its own kvmemd with an empty configuration in a temporary
 * directory, and stops it and removes the directory at the end.
 *
 * Both ends of the ring spin (the daemon polls the SQ, the client the CQ),
 * and the scheduler, waking the daemon from its doorbell onto the client's
 * CPU, may keep the two on one CPU while others idle: each then waits for
 * the other's spin to run out, and a run measures the scheduler, at 10 to
 * 100 times the cost. So, with the daemon started here and two CPUs to
 * use, the benchmark runs on the first of them and kvmemd on the second,
 * as a polling thread is pinned in production (io_uring's SQ_AFF);
 * --no-pin leaves placement to the scheduler. The echo child is not
 * pinned: a blocking ping-pong is at its best where the scheduler puts it
 * (mostly on one CPU, with no cross-CPU wake-ups, which cost tens of
 * microseconds on a virtual machine whose idle CPUs halt).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvmem/kvmem.h"
#include "bench.h"
#include "own-kvmemd.h"

#define DEFAULT_OPS 1500000u
#define MAX_OPS 100000000u
#define MIN_OPS 100u
#define DEFAULT_BATCH 32u
#define MAX_BATCH 256u
#define QUOTA_BYTES (16u << 20)
#define ECHO_BYTES 64
/* No completion for this long means the daemon is stuck. */
#define WAIT_MS 10000

struct ring_cfg {
	uint64_t ops;
	uint32_t batch;
	int json;
	const char *connect; /* --connect */
	const char *kvmemd; /* --kvmemd */
	int no_pin; /* --no-pin */
};

struct ring {
	struct kvmem_cache *c;
	uint32_t *slots; /* PAGE_ALLOC results, one per SQE of a round */
	uint64_t slots_addr; /* their offset, for kvmem_sqe.addr */
	uint8_t seen[MAX_BATCH]; /* completions of the round so far */
};

/* One measurement: ops per second, and round-trip percentiles. */
struct rate {
	double ops_s;
	double p50_us, p99_us;
};

static void ring_usage(FILE *f)
{
	fprintf(f,
		"usage: kvmem-bench ring [--ops N] [--batch B] [--json] "
		"[--connect PATH] [--kvmemd PATH]\n"
		"                        [--no-pin]\n\n"
		"  --ops N          ops per batched run (default %u); the "
		"unbatched runs and\n"
		"                   the socket baseline do N/4\n"
		"  --batch B        SQEs per submit, 1..%u (default %u)\n"
		"  --json           one JSON object on stdout\n"
		"  --connect PATH   use the kvmemd listening at PATH "
		"(default: $KVMEM_SOCKET,\n"
		"                   else start one here)\n"
		"  --kvmemd PATH    the kvmemd to start (default: $KVMEMD, "
		"else ../daemon/kvmemd\n"
		"                   next to this program's directory)\n"
		"  --no-pin         do not pin this program and the kvmemd it "
		"starts to two\n"
		"                   CPUs of their own\n",
		DEFAULT_OPS, MAX_BATCH, DEFAULT_BATCH);
}

static int parse_cfg(int argc, char **argv, struct ring_cfg *cfg)
{
	static const struct option opts[] = {
		{ "ops", required_argument, NULL, 'n' },
		{ "batch", required_argument, NULL, 'b' },
		{ "json", no_argument, NULL, 'j' },
		{ "connect", required_argument, NULL, 'c' },
		{ "kvmemd", required_argument, NULL, 'k' },
		{ "no-pin", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	uint64_t v;
	int o;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'n':
			if (bench_parse_u64("ops", optarg, MIN_OPS, MAX_OPS,
					    &cfg->ops))
				return 2;
			break;
		case 'b':
			if (bench_parse_u64("batch", optarg, 1, MAX_BATCH, &v))
				return 2;
			cfg->batch = (uint32_t)v;
			break;
		case 'j':
			cfg->json = 1;
			break;
		case 'c':
			cfg->connect = optarg;
			break;
		case 'k':
			cfg->kvmemd = optarg;
			break;
		case 'p':
			cfg->no_pin = 1;
			break;
		case 'h':
			ring_usage(stdout);
			return 1;
		default:
			ring_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		ring_usage(stderr);
		return 2;
	}
	return 0;
}

/* ---- the daemon ------------------------------------------------------- */

/* Attach, with a ring that holds a round. */
static int ring_attach(const char *sock, struct own_kvmemd *d,
		       struct kvmem_cache **c, uint32_t batch)
{
	struct kvmem_geometry g = { .layers = 1,
				    .kv_heads = 1,
				    .head_dim = 64 };
	struct kvmem_connect_opts o = { .quota_bytes = QUOTA_BYTES };

	kvmem_geometry_default(&g);
	/* Room for a round; the CQ (twice the SQ) never fills. */
	for (o.sq_entries = 1; o.sq_entries < batch; o.sq_entries <<= 1)
		;
	return own_kvmemd_connect(sock, d, &g, &o, c);
}

/* ---- the ring --------------------------------------------------------- */

static int ring_fail(uint8_t opcode, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int ring_fail(uint8_t opcode, const char *fmt, ...)
{
	static const char *const names[] = {
		[KVMEM_OP_NOP] = "NOP",
		[KVMEM_OP_PAGE_ALLOC] = "PAGE_ALLOC",
		[KVMEM_OP_PAGE_FREE] = "PAGE_FREE",
	};
	va_list ap;

	fprintf(stderr, "kvmem-bench: %s: ", names[opcode]);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return -EIO;
}

/*
 * One round: @k SQEs of @opcode (PAGE_FREE frees the slots the last
 * PAGE_ALLOC round got), one submit, and the @k completions checked.
 */
static int ring_round(struct ring *r, uint8_t opcode, uint32_t k)
{
	/* What each op returns on success: PAGE_ALLOC, the one slot. */
	const int want = opcode == KVMEM_OP_PAGE_ALLOC;
	struct kvmem_sqe *e;
	struct kvmem_cqe cqe;
	uint32_t i;
	int ret;

	for (i = 0; i < k; i++) {
		e = kvmem_ring_sqe(r->c);
		if (!e)
			return ring_fail(opcode, "no free SQE after %u", i);
		e->opcode = opcode;
		e->user_data = i;
		if (opcode == KVMEM_OP_PAGE_ALLOC) {
			e->kind = KVMEM_SLOT_SEALED;
			e->len = 1;
			e->addr = r->slots_addr + i * sizeof(*r->slots);
		} else if (opcode == KVMEM_OP_PAGE_FREE) {
			e->slot = r->slots[i];
		}
	}
	ret = kvmem_ring_submit(r->c);
	if (ret != (int)k)
		return ring_fail(opcode, "submitted %d of %u", ret, k);
	memset(r->seen, 0, k);
	for (i = 0; i < k; i++) {
		ret = kvmem_ring_wait(r->c, &cqe, WAIT_MS);
		if (ret < 0)
			return ring_fail(opcode, "waiting: %s",
					 kvmem_strerror(ret));
		if (!ret)
			return ring_fail(opcode, "no completion within %d s",
					 WAIT_MS / 1000);
		if (cqe.user_data >= k || r->seen[cqe.user_data])
			return ring_fail(opcode,
					 "completion for user_data %llu, not "
					 "an SQE of this round",
					 (unsigned long long)cqe.user_data);
		r->seen[cqe.user_data] = 1;
		if (cqe.res < 0)
			return ring_fail(opcode, "failed: %s",
					 kvmem_strerror(cqe.res));
		if (cqe.res != want)
			return ring_fail(opcode,
					 "completed with %d, expected %d",
					 cqe.res, want);
	}
	return 0;
}

/*
 * @n ops of NOP, or of PAGE_ALLOC each followed by its PAGE_FREE (@alloc),
 * in rounds of @batch. With @lat, every round (alloc and free rounds
 * together) is timed, in ns, one entry of @lat[] each.
 */
static int ring_run(struct ring *r, int alloc, uint64_t n, uint32_t batch,
		    uint32_t *lat, struct rate *out)
{
	const uint32_t per = alloc ? 2 : 1;
	uint64_t done = 0, t0, t, nlat = 0;
	uint32_t k;
	int ret = 0;

	t0 = bench_now_ns();
	while (n - done >= per) {
		k = (n - done) / per < batch ? (uint32_t)((n - done) / per)
					     : batch;
		t = lat ? bench_now_ns() : 0;
		if (alloc) {
			ret = ring_round(r, KVMEM_OP_PAGE_ALLOC, k);
			if (!ret)
				ret = ring_round(r, KVMEM_OP_PAGE_FREE, k);
		} else {
			ret = ring_round(r, KVMEM_OP_NOP, k);
		}
		if (ret)
			return ret;
		if (lat) {
			t = bench_now_ns() - t;
			lat[nlat++] = t > UINT32_MAX ? UINT32_MAX : (uint32_t)t;
		}
		done += (uint64_t)k * per;
	}
	out->ops_s = (double)done * 1e9 / (double)(bench_now_ns() - t0);
	return 0;
}

/* ---- the baseline ----------------------------------------------------- */

static void echo_child(int fd) __attribute__((noreturn));

static void echo_child(int fd)
{
	char msg[ECHO_BYTES];
	ssize_t n;

	while ((n = recv(fd, msg, sizeof(msg), 0)) > 0)
		if (send(fd, msg, (size_t)n, MSG_NOSIGNAL) != n)
			break;
	_exit(n ? 1 : 0);
}

/* Round trip @i: send, and read the same 64 bytes back. */
static int echo_once(int fd, char *msg, uint64_t i)
{
	msg[0] = (char)i;
	if (send(fd, msg, ECHO_BYTES, MSG_NOSIGNAL) != ECHO_BYTES ||
	    recv(fd, msg, ECHO_BYTES, 0) != ECHO_BYTES || msg[0] != (char)i) {
		fprintf(stderr, "kvmem-bench: socket echo %llu failed: %s\n",
			(unsigned long long)i, strerror(errno));
		return -EIO;
	}
	return 0;
}

/* @warm untimed round trips, then @n timed ones, each to @lat in ns. */
static int socket_run(uint64_t warm, uint64_t n, uint32_t *lat,
		      struct rate *out)
{
	char msg[ECHO_BYTES] = { 0 };
	uint64_t i, t0, t;
	int fd, status, ret;
	pid_t pid;

	ret = bench_fork_pair(&pid, &fd);
	if (ret)
		return ret;
	if (!pid)
		echo_child(fd);
	for (i = 0; i < warm && !ret; i++)
		ret = echo_once(fd, msg, i);
	t0 = bench_now_ns();
	for (i = 0; i < n && !ret; i++) {
		t = bench_now_ns();
		ret = echo_once(fd, msg, i);
		t = bench_now_ns() - t;
		lat[i] = t > UINT32_MAX ? UINT32_MAX : (uint32_t)t;
	}
	if (!ret)
		out->ops_s = (double)n * 1e9 / (double)(bench_now_ns() - t0);
	close(fd);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status)) {
		fprintf(stderr, "kvmem-bench: the echo child failed\n");
		ret = -EIO;
	}
	return ret;
}

/* ---- results ---------------------------------------------------------- */

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* p50 and p99 (nearest rank) of @n samples in ns, sorting them. */
static void percentiles(uint32_t *lat, uint64_t n, struct rate *out)
{
	qsort(lat, n, sizeof(*lat), cmp_u32);
	out->p50_us = lat[(n * 50 + 99) / 100 - 1] / 1e3;
	out->p99_us = lat[(n * 99 + 99) / 100 - 1] / 1e3;
}

struct results {
	struct rate sock, nop_b, nop_u, alloc_b, alloc_u;
};

static void print_json(const struct ring_cfg *cfg, const struct own_kvmemd *own,
		       uint64_t unbatched, const struct results *x)
{
	const double s = x->sock.ops_s;

	printf("{\"batch\": %u, \"ops\": %llu, \"unbatched_ops\": %llu, "
	       "\"pinned\": %s, "
	       "\"ring_batched_ops\": %.0f, \"ring_unbatched_ops\": %.0f, "
	       "\"ring_p50_us\": %.3f, \"ring_p99_us\": %.3f, "
	       "\"alloc_batched_ops\": %.0f, \"alloc_unbatched_ops\": %.0f, "
	       "\"socket_ops\": %.0f, \"socket_p50_us\": %.3f, "
	       "\"socket_p99_us\": %.3f, \"batched_vs_socket\": %.3f, "
	       "\"unbatched_vs_socket\": %.3f, "
	       "\"alloc_batched_vs_socket\": %.3f, "
	       "\"alloc_unbatched_vs_socket\": %.3f, "
	       "\"p50_vs_socket\": %.3f}\n",
	       cfg->batch, (unsigned long long)cfg->ops,
	       (unsigned long long)unbatched, own->cpu >= 0 ? "true" : "false",
	       x->nop_b.ops_s, x->nop_u.ops_s, x->nop_u.p50_us, x->nop_u.p99_us,
	       x->alloc_b.ops_s, x->alloc_u.ops_s, s, x->sock.p50_us,
	       x->sock.p99_us, x->nop_b.ops_s / s, x->nop_u.ops_s / s,
	       x->alloc_b.ops_s / s, x->alloc_u.ops_s / s,
	       x->sock.p50_us / x->nop_u.p50_us);
}

static void print_table(const struct ring_cfg *cfg,
			const struct own_kvmemd *own, const char *where,
			uint64_t unbatched, const struct results *x)
{
	const double s = x->sock.ops_s;
	char b[64];

	printf("kvmem-bench ring: %s\n", where);
	if (own->cpu >= 0)
		printf("this program on CPU %d, kvmemd on CPU %d, the echo "
		       "child not pinned\n",
		       own->cpu, own->peer_cpu);
	else
		printf("not pinned: the scheduler places both ends\n");
	printf("batch %u, %llu ops batched, %llu unbatched; PAGE_ALLOC rows "
	       "count allocs and frees\n\n",
	       cfg->batch, (unsigned long long)cfg->ops,
	       (unsigned long long)unbatched);
	printf("%-36s %12s %10s\n", "", "ops/s", "vs socket");
	printf("%-36s %12.0f %9.2fx\n", "socket echo, 64 B (baseline)", s, 1.0);
	snprintf(b, sizeof(b), "NOP, %u per submit", cfg->batch);
	printf("%-36s %12.0f %9.2fx\n", b, x->nop_b.ops_s, x->nop_b.ops_s / s);
	printf("%-36s %12.0f %9.2fx\n", "NOP, one at a time", x->nop_u.ops_s,
	       x->nop_u.ops_s / s);
	snprintf(b, sizeof(b), "PAGE_ALLOC + FREE, %u per submit", cfg->batch);
	printf("%-36s %12.0f %9.2fx\n", b, x->alloc_b.ops_s,
	       x->alloc_b.ops_s / s);
	printf("%-36s %12.0f %9.2fx\n", "PAGE_ALLOC + FREE, one at a time",
	       x->alloc_u.ops_s, x->alloc_u.ops_s / s);
	printf("\n%-36s %12s %10s %10s\n", "round trip", "p50 us", "p99 us",
	       "vs socket");
	printf("%-36s %12.2f %10.2f %9.2fx\n", "socket echo (baseline)",
	       x->sock.p50_us, x->sock.p99_us, 1.0);
	printf("%-36s %12.2f %10.2f %9.2fx\n", "NOP, one at a time",
	       x->nop_u.p50_us, x->nop_u.p99_us,
	       x->sock.p50_us / x->nop_u.p50_us);
}

/*
 * The socket baseline (with its own warm-up), then the ring: warm up (first
 * touches, the daemon's polling, the caches) and measure. The unbatched
 * runs are timed per round even where only their rate is reported, so that
 * every unbatched figure carries the same clock reads.
 */
static int measure(struct ring *r, const struct ring_cfg *cfg, uint64_t nu,
		   uint32_t *lat, struct results *x)
{
	struct kvmem_cqe cqe;
	struct rate warm;
	int ret;

	ret = socket_run(nu / 10, nu, lat, &x->sock);
	if (ret)
		return ret;
	percentiles(lat, nu, &x->sock);
	ret = ring_run(r, 0, cfg->ops / 10, cfg->batch, NULL, &warm);
	if (!ret)
		ret = ring_run(r, 0, nu / 10, 1, lat, &warm);
	if (!ret)
		ret = ring_run(r, 1, cfg->ops / 10, cfg->batch, NULL, &warm);
	if (!ret)
		ret = ring_run(r, 0, cfg->ops, cfg->batch, NULL, &x->nop_b);
	if (!ret)
		ret = ring_run(r, 0, nu, 1, lat, &x->nop_u);
	if (ret)
		return ret;
	percentiles(lat, nu, &x->nop_u);
	ret = ring_run(r, 1, cfg->ops, cfg->batch, NULL, &x->alloc_b);
	if (!ret)
		ret = ring_run(r, 1, nu, 1, lat, &x->alloc_u);
	if (ret)
		return ret;
	/* Every completion was one of an SQE; there is none left over. */
	ret = kvmem_ring_wait(r->c, &cqe, 0);
	if (ret) {
		fprintf(stderr, "kvmem-bench: %s after the last round\n",
			ret < 0 ? kvmem_strerror(ret)
				: "a completion nobody submitted");
		return ret < 0 ? ret : -EIO;
	}
	return 0;
}

static int run_ring(int argc, char **argv)
{
	struct ring_cfg cfg = {
		.ops = DEFAULT_OPS,
		.batch = DEFAULT_BATCH,
	};
	struct own_kvmemd own = { .cpu = -1, .peer_cpu = -1 };
	struct results x = { 0 };
	struct ring r = { 0 };
	const char *env = getenv("KVMEM_SOCKET");
	const char *sock = NULL;
	char where[PATH_MAX + 64];
	uint32_t *lat = NULL;
	uint64_t nu;
	size_t len;
	int ret, started = 0;

	ret = parse_cfg(argc, argv, &cfg);
	if (ret)
		return ret == 1 ? 0 : ret;
	nu = cfg.ops / 4;
	lat = bench_alloc(nu * sizeof(*lat));

	if (cfg.connect) {
		sock = cfg.connect;
	} else if (env && *env) {
		sock = env;
	} else {
		started = 1;
		ret = own_kvmemd_start(&own, cfg.kvmemd, !cfg.no_pin, NULL);
		if (ret)
			goto out;
		sock = own.sock;
	}
	snprintf(where, sizeof(where), "%s %s",
		 started ? "kvmemd started here at" : "kvmemd at", sock);

	ret = ring_attach(sock, started ? &own : NULL, &r.c, cfg.batch);
	if (ret)
		goto out;
	r.slots = kvmem_ring_buffer(r.c, &r.slots_addr, &len);
	if (!r.slots || len < cfg.batch * sizeof(*r.slots)) {
		fprintf(stderr, "kvmem-bench: the ring buffer is too small "
				"for a batch\n");
		ret = -ENOSPC;
		goto out;
	}
	ret = measure(&r, &cfg, nu, lat, &x);
out:
	kvmem_close(r.c);
	if (started && own_kvmemd_stop(&own, ret))
		ret = -EIO;
	free(lat);
	if (ret)
		return 1;
	if (cfg.json)
		print_json(&cfg, &own, nu, &x);
	else
		print_table(&cfg, &own, where, nu, &x);
	return 0;
}

const struct bench_cmd bench_ring = {
	.name = "ring",
	.summary = "kvmemd ring ops (NOP, PAGE_ALLOC) next to a socket echo",
	.run = run_ring,
};
