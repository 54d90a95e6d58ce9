/* SPDX-License-Identifier: MIT */
/*
 * bench.c - what the kvmem-bench subcommands share (bench.h)
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "kvmem/ecc.h"
#include "kvmem/kvmem.h"
#include "kvmem/quant.h"
#include "kvmem-private.h"

/* How long bench_nop() waits for its completion. */
#define NOP_WAIT_MS 60000

float bench_rnd_unit(struct kvmem_rng *r)
{
	return (float)(kvmem_rng_next(r) >> 40) * 0x1p-24f * 2.0f - 1.0f;
}

uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

uint64_t bench_median(uint64_t *t, uint32_t n)
{
	qsort(t, n, sizeof(*t), cmp_u64);
	return t[n / 2];
}

void *bench_alloc(size_t size)
{
	void *p = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);

	if (!p) {
		fprintf(stderr, "kvmem-bench: cannot allocate %zu bytes\n",
			size);
		exit(1);
	}
	memset(p, 0, size);
	return p;
}

int bench_parse_u64(const char *opt, const char *arg, uint64_t min,
		    uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(arg, &end, 0);
	if (errno || end == arg || *end || arg[0] == '-') {
		fprintf(stderr, "kvmem-bench: bad --%s '%s'\n", opt, arg);
		return -EINVAL;
	}
	if (v < min || v > max) {
		fprintf(stderr,
			"kvmem-bench: bad --%s '%s': must be %llu..%llu\n", opt,
			arg, (unsigned long long)min, (unsigned long long)max);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

/* @v as bench_parse_size() takes it: 1G, 64M, 4K, or bytes. */
static const char *size_text(uint64_t v, char *buf, size_t len)
{
	static const char suffix[] = "KMG";
	int i;

	for (i = 2; i >= 0; i--) {
		if (v && !(v & ((1ull << (10 * (i + 1))) - 1))) {
			snprintf(buf, len, "%llu%c",
				 (unsigned long long)(v >> (10 * (i + 1))),
				 suffix[i]);
			return buf;
		}
	}
	snprintf(buf, len, "%llu", (unsigned long long)v);
	return buf;
}

int bench_parse_size(const char *opt, const char *arg, uint64_t min,
		     uint64_t max, uint64_t *out)
{
	static const char suffix[] = "KMG";
	const char *unit = NULL;
	char *end, lo[24], hi[24];
	unsigned long long v;
	int shift = 0;

	errno = 0;
	v = strtoull(arg, &end, 10);
	if (*end && !end[1])
		unit = strchr(suffix, *end);
	if (errno || end == arg || arg[0] == '-' || (*end && !unit)) {
		fprintf(stderr, "kvmem-bench: bad --%s '%s'\n", opt, arg);
		return -EINVAL;
	}
	if (unit)
		shift = 10 * (int)(unit - suffix + 1);
	if (v > max >> shift || v << shift < min) {
		fprintf(stderr, "kvmem-bench: bad --%s '%s': must be %s..%s\n",
			opt, arg, size_text(min, lo, sizeof(lo)),
			size_text(max, hi, sizeof(hi)));
		return -EINVAL;
	}
	*out = v << shift;
	return 0;
}

int bench_parse_double(const char *opt, const char *arg, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(arg, &end);
	if (errno || end == arg || *end || v != v) {
		fprintf(stderr, "kvmem-bench: bad --%s '%s'\n", opt, arg);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

typedef uint64_t v2u64 __attribute__((vector_size(16)));

uint64_t bench_read_sum(const void *buf, size_t len)
{
	const v2u64 *p = buf;
	v2u64 a = { 0 }, b = { 0 }, c = { 0 }, d = { 0 };
	size_t i, n = len / sizeof(v2u64);

	/* Four short chains over 128 bytes a step keep enough loads in
	 * flight that memory, not the adds, sets the pace. */
	for (i = 0; i + 8 <= n; i += 8) {
		a += p[i] ^ p[i + 4];
		b += p[i + 1] ^ p[i + 5];
		c += p[i + 2] ^ p[i + 6];
		d += p[i + 3] ^ p[i + 7];
	}
	a += b + c + d;
	return a[0] + a[1];
}

struct read_part {
	const uint8_t *p;
	size_t len;
	uint64_t sum;
};

static void *read_part(void *v)
{
	struct read_part *rp = v;

	rp->sum = bench_read_sum(rp->p, rp->len);
	return NULL;
}

static volatile uint64_t read_sink;

double bench_read_gbps(const void *buf, size_t len, unsigned int threads,
		       unsigned int reps)
{
	struct read_part part[BENCH_MAX_THREADS];
	pthread_t tid[BENCH_MAX_THREADS];
	int ok[BENCH_MAX_THREADS];
	uint64_t best = UINT64_MAX;
	unsigned int r, i;
	size_t slice;

	if (threads < 1)
		threads = 1;
	if (threads > BENCH_MAX_THREADS)
		threads = BENCH_MAX_THREADS;
	/* Slices of whole 128-byte steps, each as aligned as @buf. */
	slice = len / threads & ~(size_t)127;
	for (r = 0; r < reps; r++) {
		uint64_t t0 = bench_now_ns();

		for (i = 0; i < threads; i++) {
			part[i].p = (const uint8_t *)buf + slice * i;
			part[i].len = slice;
			ok[i] = i && !pthread_create(&tid[i], NULL, read_part,
						     &part[i]);
		}
		/* A slice whose thread did not start is read here, which
		 * only lowers the figure. */
		for (i = 0; i < threads; i++)
			if (!ok[i])
				read_part(&part[i]);
		for (i = 0; i < threads; i++)
			if (ok[i])
				pthread_join(tid[i], NULL);
		t0 = bench_now_ns() - t0;
		for (i = 0; i < threads; i++)
			read_sink += part[i].sum;
		if (t0 < best)
			best = t0;
	}
	return best ? (double)(slice * threads) / (double)best : 0.0;
}

int bench_parse_format(const char *arg, int *out)
{
	int v = kvmem_format_by_name(arg);

	if (v < 0) {
		fprintf(stderr, "kvmem-bench: bad --format '%s'\n", arg);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

int bench_parse_codec(const char *arg, int *out)
{
	int v = kvmem_codec_by_name(arg);

	if (v < 0) {
		fprintf(stderr, "kvmem-bench: bad --codec '%s'\n", arg);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

/* ---- processes and kvmemd's admin socket ----------------------------- */

void bench_sleep_ms(long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000,
			       .tv_nsec = ms % 1000 * 1000000 };

	nanosleep(&ts, NULL);
}

int bench_fork_pair(pid_t *pid, int *fd)
{
	int sv[2], ret;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv)) {
		ret = -errno;
		fprintf(stderr, "kvmem-bench: socketpair: %s\n",
			strerror(-ret));
		return ret;
	}
	fflush(NULL);
	*pid = fork();
	if (*pid < 0) {
		ret = -errno;
		fprintf(stderr, "kvmem-bench: fork: %s\n", strerror(-ret));
		close(sv[0]);
		close(sv[1]);
		return ret;
	}
	close(sv[*pid ? 1 : 0]);
	*fd = sv[*pid ? 0 : 1];
	return 0;
}

int bench_admin(const char *path, const char *req, char *out, size_t len,
		int timeout_ms)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = timeout_ms / 1000,
			      .tv_usec = timeout_ms % 1000 * 1000 };
	size_t got = 0;
	ssize_t n;
	int fd, ret = 0;

	out[0] = 0;
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path));
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* On AF_UNIX the send timeout bounds a connect() that waits for
	 * room in the listener's backlog. */
	if ((timeout_ms &&
	     (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) ||
	      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)))) ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    send(fd, req, strlen(req), MSG_NOSIGNAL) < 0) {
		ret = -errno;
		goto out;
	}
	do {
		n = recv(fd, out + got, len - 1 - got, 0);
		if (n <= 0) {
			ret = n ? -errno : -ECONNRESET;
			goto out;
		}
		got += (size_t)n;
	} while (out[got - 1] != '\n' && got + 1 < len);
	if (out[got - 1] != '\n')
		ret = -EMSGSIZE;
	else if (strstr(out, "\"error\""))
		ret = -EIO;
out:
	out[got] = 0;
	close(fd);
	return ret == -EAGAIN ? -ETIMEDOUT : ret;
}

uint64_t bench_mem_available(void)
{
	unsigned long long kib = 0;
	char line[128];
	FILE *f = fopen("/proc/meminfo", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
			break;
	fclose(f);
	return (uint64_t)kib << 10;
}

int bench_nop(struct kvmem_cache *c, uint64_t seq)
{
	struct kvmem_sqe *e = kvmem_ring_sqe(c);
	struct kvmem_cqe cqe;
	int ret;

	if (!e) {
		fprintf(stderr, "kvmem-bench: NOP: no free SQE\n");
		return -EIO;
	}
	e->opcode = KVMEM_OP_NOP;
	e->user_data = seq;
	ret = kvmem_ring_submit(c);
	if (ret != 1) {
		fprintf(stderr, "kvmem-bench: NOP: submitted %d of 1\n", ret);
		return -EIO;
	}
	ret = kvmem_ring_wait(c, &cqe, NOP_WAIT_MS);
	if (ret < 0) {
		fprintf(stderr, "kvmem-bench: NOP: %s\n", kvmem_strerror(ret));
		return -EIO;
	}
	if (!ret) {
		fprintf(stderr, "kvmem-bench: NOP: no completion within %d s\n",
			NOP_WAIT_MS / 1000);
		return -EIO;
	}
	if (cqe.user_data != seq || cqe.res) {
		fprintf(stderr,
			"kvmem-bench: NOP %llu: completion for %llu with %d\n",
			(unsigned long long)seq,
			(unsigned long long)cqe.user_data, cqe.res);
		return -EIO;
	}
	return 0;
}
