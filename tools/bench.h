/*
 * bench.h - what the kvmem-bench subcommands share
 */
#ifndef KVMEM_BENCH_H
#define KVMEM_BENCH_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>

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

/* kvmem-bench attend; --gpu runs bench_attend_gpu() (bench-attend-gpu.c). */
struct attend_cfg {
	uint32_t ctx, heads, kv_heads, dim, page_tokens, reps;
	uint32_t threads, flush_mib;
	uint32_t batch; /* sequences a call attends (--gpu) */
	uint32_t queries; /* query tokens of a causal call (1: none) */
	int format, codec, json, gpu;
	int host; /* --gpu --host: also from pages in host memory */
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

/* ---- a kvmemd of the benchmark's own ---------------------------------- */

/* A kvmemd a benchmark started. */
struct bench_kvmemd {
	pid_t pid; /* 0 once reaped */
	int status; /* its wait status, once reaped */
	char dir[PATH_MAX];
	char sock[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char admin[sizeof(((struct sockaddr_un *)0)->sun_path)];
	/* the CPUs of this program and of the daemon; -1: not pinned */
	int cpu, peer_cpu;
};

/* Settings bench_kvmemd_start() passes on, at the most. */
#define BENCH_KVMEMD_MAX_SET 8

void bench_sleep_ms(long ms);
/*
 * bench_kvmemd_start() - start kvmemd in a fresh temporary directory
 * @d: receives the process, the directory, the socket paths and the CPUs
 * @path: the kvmemd binary (--kvmemd), or NULL: $KVMEMD, else
 *        ../daemon/kvmemd next to this program's directory (the build
 *        tree's layout)
 * @pin_cpus: with two CPUs or more to run on, run this process on the
 *            first of them and the daemon on the second (a polling
 *            daemon and its client on one CPU wait for each other's spin
 *            to run out)
 * @set: NULL, or "SECTION.KEY=VALUE" settings (at most
 *       BENCH_KVMEMD_MAX_SET) ending in NULL, each passed as -o
 *
 * Foreground, an empty configuration otherwise, its sockets and state in
 * the directory (under $TMPDIR, else /tmp), its output in kvmemd.log
 * there. It gets SIGKILL when this process dies. Says what failed on
 * stderr. Return: 0 or a negative errno; bench_kvmemd_stop() cleans up
 * either way.
 */
int bench_kvmemd_start(struct bench_kvmemd *d, const char *path, int pin_cpus,
		       const char *const *set);
struct kvmem_connect_opts;
struct kvmem_cache;
/*
 * kvmem_connect() to @sock, retrying while @d, a kvmemd started here (NULL:
 * a running one), is not listening yet. Says what failed on stderr.
 */
int bench_kvmemd_connect(const char *sock, struct bench_kvmemd *d,
			 const struct kvmem_geometry *g,
			 const struct kvmem_connect_opts *o,
			 struct kvmem_cache **c);
/*
 * Fork a child joined to this process by a SOCK_SEQPACKET socket pair:
 * *@pid is 0 in the child, and *@fd is each side's end. Says what failed on
 * stderr. Return: 0 or a negative errno.
 */
int bench_fork_pair(pid_t *pid, int *fd);
/*
 * SIGTERM, wait (SIGKILL after 5 s), remove the directory; the daemon's
 * log goes to stderr first when the run @failed or the daemon did.
 * Return: 0 when the daemon exited with status 0, else -EIO.
 */
int bench_kvmemd_stop(struct bench_kvmemd *d, int failed);

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
