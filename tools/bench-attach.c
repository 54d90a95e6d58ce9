/* SPDX-License-Identifier: MIT */
/*
 * bench-attach.c - kvmem-bench attach: attach/detach cycles against a
 * running kvmemd, and what they leave behind in it
 *
 * Each cycle is kvmem_connect() (hello, welcome, the memfd mapped) and
 * kvmem_close(). The baseline, measured in the same run, is a bare
 * connect() and close() of the same socket: the part of a cycle that is
 * the kernel's. kvmemd's resident memory (VmRSS of the peer's pid, from
 * SO_PEERCRED) is read before and after, each time while one session of
 * ours is attached (its arena is resident: reading between sessions would
 * race with the daemon's handling of the last hang-up), so a leak per
 * session shows as growth over many cycles.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "bench.h"
#include "kvmem/kvmem.h"

struct attach_cfg {
	uint64_t cycles;
	const char *connect;
	int json;
};

static void attach_usage(FILE *f)
{
	fprintf(f, "usage: kvmem-bench attach [--cycles N] [--connect PATH] "
		   "[--json]\n\n"
		   "  --cycles N       attach/detach cycles (default 10000)\n"
		   "  --connect PATH   the kvmemd listening at PATH (default: "
		   "$KVMEM_SOCKET, else\n"
		   "                   kvmemd's default socket)\n"
		   "  --json           one JSON object on stdout\n");
}

static int parse_cfg(int argc, char **argv, struct attach_cfg *cfg)
{
	static const struct option opts[] = {
		{ "cycles", required_argument, NULL, 'n' },
		{ "connect", required_argument, NULL, 'c' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int o;

	cfg->cycles = 10000;
	optind = 1;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'n':
			if (bench_parse_u64("cycles", optarg, 1, 100000000,
					    &cfg->cycles))
				return 2;
			break;
		case 'c':
			cfg->connect = optarg;
			break;
		case 'j':
			cfg->json = 1;
			break;
		case 'h':
			attach_usage(stdout);
			return -1;
		default:
			attach_usage(stderr);
			return 2;
		}
	}
	if (optind != argc) {
		attach_usage(stderr);
		return 2;
	}
	return 0;
}

/* A bare connection to @path: the socket, or -errno. */
static int dial(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, ret;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		ret = -errno;
		close(fd);
		return ret;
	}
	return fd;
}

/* kvmemd's VmRSS in KiB, through the socket's peer; -1 when unknown. */
static long daemon_rss_kib(const char *path)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	char file[64], line[128];
	long kib = -1;
	FILE *f;
	int fd = dial(path);

	if (fd < 0)
		return -1;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len)) {
		close(fd);
		return -1;
	}
	close(fd);
	snprintf(file, sizeof(file), "/proc/%d/status", (int)cr.pid);
	f = fopen(file, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static int run_attach(int argc, char **argv)
{
	struct kvmem_geometry g = { .layers = 2,
				    .kv_heads = 2,
				    .head_dim = 64 };
	struct kvmem_connect_opts o = { .quota_bytes = 4u << 20 };
	struct attach_cfg cfg = { 0 };
	char def[108];
	const char *path;
	uint64_t i, t0, t_bare, t_cycle;
	long rss0, rss1;
	struct kvmem_cache *c;
	int ret, fd;

	ret = parse_cfg(argc, argv, &cfg);
	if (ret)
		return ret < 0 ? 0 : ret;
	path = cfg.connect ? cfg.connect : kvmem_socket_path(def, sizeof(def));
	if (!path) {
		fprintf(stderr, "kvmem-bench: no kvmemd socket path\n");
		return 1;
	}
	kvmem_geometry_default(&g);

	/* One attach first: the daemon's first session sets up what it
	 * keeps for all of them (worker stacks, tables). */
	ret = kvmem_connect(path, &g, &o, &c);
	if (ret) {
		fprintf(stderr, "kvmem-bench: %s\n", kvmem_connect_error());
		return 1;
	}
	rss0 = daemon_rss_kib(path);
	kvmem_close(c);

	t0 = bench_now_ns();
	for (i = 0; i < cfg.cycles; i++) {
		fd = dial(path);
		if (fd < 0) {
			fprintf(stderr, "kvmem-bench: connect %s: %s\n", path,
				strerror(-fd));
			return 1;
		}
		close(fd);
	}
	t_bare = bench_now_ns() - t0;

	t0 = bench_now_ns();
	for (i = 0; i < cfg.cycles; i++) {
		ret = kvmem_connect(path, &g, &o, &c);
		if (ret) {
			fprintf(stderr, "kvmem-bench: cycle %llu: %s\n",
				(unsigned long long)i, kvmem_connect_error());
			return 1;
		}
		kvmem_close(c);
	}
	t_cycle = bench_now_ns() - t0;
	ret = kvmem_connect(path, &g, &o, &c);
	if (ret) {
		fprintf(stderr, "kvmem-bench: after the cycles: %s\n",
			kvmem_connect_error());
		return 1;
	}
	rss1 = daemon_rss_kib(path);
	kvmem_close(c);

	if (cfg.json) {
		printf("{\"cycles\": %llu, \"connect_close_per_s\": %.1f, "
		       "\"attach_detach_per_s\": %.1f, \"ratio\": %.4f, "
		       "\"daemon_rss_kib_before\": %ld, "
		       "\"daemon_rss_kib_after\": %ld}\n",
		       (unsigned long long)cfg.cycles,
		       1e9 * (double)cfg.cycles / (double)t_bare,
		       1e9 * (double)cfg.cycles / (double)t_cycle,
		       (double)t_bare / (double)t_cycle, rss0, rss1);
		return 0;
	}
	printf("baseline   connect+close   %10.0f /s\n",
	       1e9 * (double)cfg.cycles / (double)t_bare);
	printf("kvmemd     attach+detach   %10.0f /s   (%.3fx the baseline)\n",
	       1e9 * (double)cfg.cycles / (double)t_cycle,
	       (double)t_bare / (double)t_cycle);
	if (rss0 >= 0 && rss1 >= 0)
		printf("kvmemd RSS %ld KiB before, %ld KiB after %llu cycles "
		       "(%+ld KiB)\n",
		       rss0, rss1, (unsigned long long)cfg.cycles, rss1 - rss0);
	else
		printf("kvmemd RSS unknown (its /proc entry is not readable)\n");
	return 0;
}

const struct bench_cmd bench_attach = {
	.name = "attach",
	.summary = "kvmemd attach/detach cycles next to a bare connect",
	.run = run_attach,
};
