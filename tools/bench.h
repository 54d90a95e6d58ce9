/* SPDX-License-Identifier: MIT */
/*
 * bench.h - what the kvmem-bench subcommands share
 *
 * Included by kvmem-bench.c, bench.c and every bench-*.c; tests/check_cuda.c
 * runs kvmem-bench attend through it.
 */
#ifndef KVMEM_BENCH_H
#define KVMEM_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct kvmem_cache;

struct bench_cmd {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv);
};

extern const struct bench_cmd bench_codec;
extern const struct bench_cmd bench_ber;
extern const struct bench_cmd bench_attend;
extern const struct bench_cmd bench_ring;
extern const struct bench_cmd bench_fill;
extern const struct bench_cmd bench_offload;
extern const struct bench_cmd bench_attach;
extern const struct bench_cmd bench_archive;
extern const struct bench_cmd bench_prefix;
extern const struct bench_cmd bench_hangup;
extern const struct bench_cmd bench_record;
extern const struct bench_cmd bench_reboot;
extern const struct bench_cmd bench_remote;
extern const struct bench_cmd bench_tier;

/* kvmem-bench attend; --gpu runs bench_attend_gpu() (bench-attend-gpu.c). */
struct attend_cfg {
	uint32_t ctx, heads, kv_heads, dim, page_tokens, reps;
	uint32_t threads, flush_mib;
	uint32_t batch; /* sequences a call attends (--gpu) */
	uint32_t queries; /* query tokens of a causal call (1: none) */
	int format, codec, json, gpu;
	int rotate; /* --rotate: the geometry's Hadamard rotation */
	int host; /* --gpu --host: also from pages in host memory */
	int sealed; /* --gpu --sealed: no sink page, no tail page */
};

struct kvmem_geometry;
int bench_attend_gpu(const struct attend_cfg *cfg,
		     const struct kvmem_geometry *g);

struct kvmem_rng;
/* A value uniform in [-1, 1). */
float bench_rnd_unit(struct kvmem_rng *r);

uint64_t bench_now_ns(void);
/* The median of @n times; sorts @t. */
uint64_t bench_median(uint64_t *t, uint32_t n);
/*
 * Read @buf (16-byte aligned; whole 128-byte steps) as fast as one core
 * can.
 */
uint64_t bench_read_sum(const void *buf, size_t len);
/*
 * How fast @threads threads (1..BENCH_MAX_THREADS) read @len bytes of @buf
 * between them, in GB/s: the best of @reps runs.
 */
#define BENCH_MAX_THREADS 256
double bench_read_gbps(const void *buf, size_t len, unsigned int threads,
		       unsigned int reps);
/* Allocate and touch @size bytes (so page faults stay out of timings). */
void *bench_alloc(size_t size);
/*
 * Parse helpers: print "kvmem-bench: bad --OPT 'ARG'" and return -EINVAL for
 * what is not a number, or a number outside [min, max].
 */
int bench_parse_u64(const char *opt, const char *arg, uint64_t min,
		    uint64_t max, uint64_t *out);
int bench_parse_double(const char *opt, const char *arg, double *out);
/* Bytes, with an optional K, M or G suffix (powers of 1024). */
int bench_parse_size(const char *opt, const char *arg, uint64_t min,
		     uint64_t max, uint64_t *out);
/* --format and --codec by name: "kvmem-bench: bad --format 'X'" if not. */
int bench_parse_format(const char *arg, int *out);
int bench_parse_codec(const char *arg, int *out);

/* ---- processes and kvmemd's admin socket ----------------------------- */

void bench_sleep_ms(long ms);
/*
 * Fork a child joined to this process by a SOCK_SEQPACKET socket pair:
 * *@pid is 0 in the child, and *@fd is each side's end. Says what failed on
 * stderr. Return: 0 or a negative errno.
 */
int bench_fork_pair(pid_t *pid, int *fd);

/* One NOP on @c's ring, @seq its user_data, waited for up to a minute:
 * 0, or -EIO with what went wrong said on stderr. */
int bench_nop(struct kvmem_cache *c, uint64_t seq);

/* MemAvailable of /proc/meminfo in bytes, or 0 when it cannot be read. */
uint64_t bench_mem_available(void);
/*
 * bench_admin() - one request on the admin socket at @path
 * @req: the request, "status" for one
 * @out, @len: receives the reply (a JSON line), NUL-terminated; empty when
 *             none came
 * @timeout_ms: how long to wait to connect and for the reply; 0: as long
 *              as it takes
 *
 * Return: 0; -EIO when the reply is an error (@out says which);
 * -EMSGSIZE when it does not fit @len; -ETIMEDOUT; or the negative errno
 * of the socket calls.
 */
int bench_admin(const char *path, const char *req, char *out, size_t len,
		int timeout_ms);

#endif /* KVMEM_BENCH_H */
