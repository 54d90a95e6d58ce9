/* SPDX-License-Identifier: MIT */
/*
 * bench-offload.c - how fast pages go to the backing store and come back
 * through kvmemd, next to fio on the same file with the same block size
 * and queue depth, in the same run
 *
 * The run starts a kvmemd of its own (in a temporary directory, with the
 * store at --file and pages moved only when asked: tier.offload = no),
 * attaches one session, writes --bytes of sealed pages in sequences of
 * 8 layers x 8 KV heads x 128 dims, int4 + h84, and releases them. Then:
 *   offload  "offload pool" on the admin socket: every page written to the
 *            store; the daemon times it from the request to the last
 *            completion
 *   reload   every sequence acquired in turn (each acquire reads its pages
 *            back, checks them and completes when all are resident),
 *            timed here
 * Before the daemon starts, fio --ioengine=io_uring --direct=1 writes the
 * data area of the same file once unmeasured (so that no side pays for
 * first writes into new extents), then writes and reads it, sequentially,
 * in blocks of one page with the same queue depth.
 * Without fio in PATH its columns are left out (null in --json).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvmem/kvmem.h"
#include "bench.h"
#include "kvmem-private.h"

#define LAYERS 8
#define KV_HEADS 8
#define HEAD_DIM 128
#define PAGE_TOKENS 32
#define SEQ_PAGES 16 /* sealed pages per layer of one sequence */
#define START_TIMEOUT_MS 30000

struct offload_cfg {
	const char *file; /* NULL: in the temporary directory */
	const char *kvmemd;
	const char *engine;
	uint64_t bytes;
	uint64_t qd;
	int json, no_fio;
};

struct offload {
	struct offload_cfg cfg;
	char dir[64], conf[128], log[128], sock[80], admin[80], store[512];
	pid_t pid;
	struct kvmem_geometry g;
	size_t page_bytes;
	uint64_t moved;
	double offload_s, reload_s;
	double fio_write, fio_read; /* bytes/s; < 0: not measured */
};

static void offload_usage(FILE *f)
{
	fprintf(f,
		"usage: kvmem-bench offload [--file PATH] [--bytes N] "
		"[--qd N]\n"
		"                           [--engine auto|io_uring|threads] "
		"[--kvmemd PATH]\n"
		"                           [--no-fio] [--json]\n"
		"\n"
		"Offload and reload bandwidth through a kvmemd started for the "
		"run, next to\n"
		"fio --ioengine=io_uring --direct=1 on the same file with the "
		"same block size\n"
		"(one page) and queue depth.\n"
		"\n"
		"  --file PATH    backing store file (default: in a temporary "
		"directory);\n"
		"                 it is formatted and overwritten\n"
		"  --bytes N      bytes of pages to move (default 256M)\n"
		"  --qd N         store queue depth, also fio's iodepth "
		"(default 32)\n"
		"  --engine E     store.engine of the daemon (default auto)\n"
		"  --kvmemd PATH  the daemon (default: next to this tool, then "
		"PATH)\n"
		"  --no-fio       skip the fio baseline\n"
		"  --json         one JSON object: offload_gbps, reload_gbps, "
		"fio_write_gbps,\n"
		"                 fio_read_gbps, ...\n");
}

static int parse_cfg(int argc, char **argv, struct offload_cfg *cfg)
{
	static const struct option opts[] = {
		{ "file", required_argument, NULL, 'f' },
		{ "bytes", required_argument, NULL, 'b' },
		{ "qd", required_argument, NULL, 'q' },
		{ "engine", required_argument, NULL, 'e' },
		{ "kvmemd", required_argument, NULL, 'k' },
		{ "no-fio", no_argument, NULL, 'n' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'f':
			cfg->file = optarg;
			break;
		case 'b':
			if (bench_parse_size("bytes", optarg, 1u << 20,
					     1ull << 40, &cfg->bytes))
				return -EINVAL;
			break;
		case 'q':
			if (bench_parse_u64("qd", optarg, 1, 1024, &cfg->qd))
				return -EINVAL;
			break;
		case 'e':
			if (strcmp(optarg, "auto") &&
			    strcmp(optarg, "io_uring") &&
			    strcmp(optarg, "threads")) {
				fprintf(stderr,
					"kvmem-bench: bad --engine '%s'\n",
					optarg);
				return -EINVAL;
			}
			cfg->engine = optarg;
			break;
		case 'k':
			cfg->kvmemd = optarg;
			break;
		case 'n':
			cfg->no_fio = 1;
			break;
		case 'j':
			cfg->json = 1;
			break;
		case 'h':
			offload_usage(stdout);
			return 1;
		default:
			offload_usage(stderr);
			return -EINVAL;
		}
	}
	if (optind != argc) {
		offload_usage(stderr);
		return -EINVAL;
	}
	return 0;
}

/* The daemon next to this tool in a build tree, else kvmemd from PATH. */
static const char *daemon_path(const struct offload_cfg *cfg, char *buf,
			       size_t len)
{
	ssize_t n;
	char *slash;

	if (cfg->kvmemd)
		return cfg->kvmemd;
	n = readlink("/proc/self/exe", buf, len - 1);
	if (n > 0) {
		buf[n] = 0;
		slash = strrchr(buf, '/');
		if (slash && (size_t)(slash - buf) + 20 < len) {
			strcpy(slash, "/../daemon/kvmemd");
			if (!access(buf, X_OK))
				return buf;
		}
	}
	return "kvmemd";
}

/* The store: room for the pages (sinks included) and the header. */
static uint64_t store_bytes(const struct offload *o)
{
	return (o->cfg.bytes + o->cfg.bytes / 4 + (64u << 20)) & ~4095ull;
}

/* The session's arena: the pages, and room for the library's spares. */
static uint64_t quota_bytes(const struct offload *o)
{
	return (o->cfg.bytes + o->cfg.bytes / 4 + (16u << 20)) & ~4095ull;
}

static int write_conf(struct offload *o)
{
	uint64_t quota = quota_bytes(o);
	FILE *f = fopen(o->conf, "w");

	if (!f)
		return -errno;
	fprintf(f,
		"[daemon]\nsocket = %s\nadmin_socket = %s\nstate_dir = %s/state\n"
		"[pool]\nhost_bytes = %llu\nsession_default_bytes = %llu\n"
		"session_max_bytes = %llu\nmlock = no\n"
		"[scrub]\nrate = 0\n"
		"[tier]\noffload = no\n"
		"[store]\npath = %s\nsize = %llu\nreformat = yes\n"
		"queue_depth = %llu\nengine = %s\n",
		o->sock, o->admin, o->dir,
		(unsigned long long)(quota + (64u << 20)),
		(unsigned long long)quota, (unsigned long long)quota, o->store,
		(unsigned long long)store_bytes(o),
		(unsigned long long)o->cfg.qd,
		o->cfg.engine ? o->cfg.engine : "auto");
	return fclose(f) ? -errno : 0;
}

static int start_daemon(struct offload *o, struct kvmem_cache **c)
{
	struct kvmem_connect_opts opts = { .quota_bytes = quota_bytes(o) };
	char path[4096];
	const char *bin = daemon_path(&o->cfg, path, sizeof(path));
	int i, ret = -ENOENT;

	o->pid = fork();
	if (o->pid < 0)
		return -errno;
	if (!o->pid) {
		int fd = open(o->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (fd >= 0)
			dup2(fd, STDERR_FILENO);
		execlp(bin, "kvmemd", "-f", "-c", o->conf, (char *)NULL);
		fprintf(stderr, "kvmem-bench: cannot run %s: %s\n", bin,
			strerror(errno));
		_exit(127);
	}
	for (i = 0; i < START_TIMEOUT_MS / 10; i++) {
		if (waitpid(o->pid, NULL, WNOHANG) == o->pid) {
			o->pid = 0;
			fprintf(stderr,
				"kvmem-bench: kvmemd exited at start\n");
			return -ECHILD;
		}
		ret = kvmem_connect(o->sock, &o->g, &opts, c);
		if (!ret)
			return 0;
		/* Not listening yet, or refused for good. */
		if (ret != -ENOENT && ret != -ECONNREFUSED)
			break;
		usleep(10000);
	}
	fprintf(stderr, "kvmem-bench: %s\n", kvmem_connect_error());
	return ret;
}

/* What the daemon said, when the run failed. */
static void show_log(const struct offload *o)
{
	char line[512];
	FILE *f = fopen(o->log, "r");

	if (!f)
		return;
	fprintf(stderr, "kvmem-bench: kvmemd's log:\n");
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fclose(f);
}

static void stop_daemon(struct offload *o)
{
	if (o->pid <= 0)
		return;
	kill(o->pid, SIGTERM);
	waitpid(o->pid, NULL, 0);
	o->pid = 0;
}

static double json_num(const char *json, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(json, pat);
	return p ? strtod(p + strlen(pat), NULL) : -1;
}

static int run_kvmemd(struct offload *o)
{
	const uint32_t tokens = PAGE_TOKENS * (SEQ_PAGES + 1);
	size_t row = (size_t)LAYERS * KV_HEADS * HEAD_DIM;
	uint64_t per_seq = (uint64_t)LAYERS * SEQ_PAGES * o->page_bytes, t0;
	uint32_t nseq = (uint32_t)((o->cfg.bytes + per_seq - 1) / per_seq), i;
	struct kvmem_seq **s = calloc(nseq, sizeof(*s));
	float *k = bench_alloc(tokens * row * sizeof(float));
	float *v = bench_alloc(tokens * row * sizeof(float));
	struct kvmem_cache *c = NULL;
	struct kvmem_rng r;
	char reply[8192];
	size_t j;
	int ret;

	if (!s)
		return -ENOMEM;
	kvmem_rng_seed(&r, 1);
	for (j = 0; j < tokens * row; j++) {
		k[j] = (float)kvmem_rng_unit(&r) - 0.5f;
		v[j] = (float)kvmem_rng_unit(&r) - 0.5f;
	}
	ret = start_daemon(o, &c);
	for (i = 0; !ret && i < nseq; i++) {
		ret = kvmem_seq_create(c, &s[i]);
		if (!ret)
			ret = kvmem_seq_append_all(s[i], k, v, tokens);
		if (!ret)
			ret = kvmem_seq_release(s[i]);
	}
	if (ret)
		fprintf(stderr, "kvmem-bench: writing sequences: %s\n",
			kvmem_strerror(ret));
	if (!ret) {
		ret = bench_admin(o->admin, "offload pool", reply,
				  sizeof(reply), 0);
		if (ret)
			fprintf(stderr, "kvmem-bench: offload: %s", reply);
	}
	if (!ret) {
		o->moved = (uint64_t)json_num(reply, "bytes");
		o->offload_s = json_num(reply, "seconds");
		t0 = bench_now_ns();
		for (i = 0; !ret && i < nseq; i++)
			ret = kvmem_seq_acquire(s[i]);
		o->reload_s = (double)(bench_now_ns() - t0) / 1e9;
		if (ret)
			fprintf(stderr, "kvmem-bench: reload: %s\n",
				kvmem_strerror(ret));
	}
	if (!ret && !bench_admin(o->admin, "tier", reply, sizeof(reply), 0) &&
	    (uint64_t)json_num(reply, "reload_bytes") != o->moved) {
		fprintf(stderr,
			"kvmem-bench: %llu bytes offloaded, %.0f "
			"reloaded\n",
			(unsigned long long)o->moved,
			json_num(reply, "reload_bytes"));
		ret = -EIO;
	}
	for (i = 0; i < nseq; i++)
		if (s[i])
			kvmem_seq_free(s[i]);
	kvmem_close(c);
	stop_daemon(o);
	free(s);
	free(k);
	free(v);
	return ret;
}

/* fio's bandwidth in bytes/s for @rw, or < 0 when it could not run. */
static double fio(const struct offload *o, const char *rw)
{
	char cmd[2048], line[4096], *p;
	double bw = -1;
	FILE *f;

	snprintf(cmd, sizeof(cmd),
		 "fio --name=kvmem --filename='%s' --rw=%s --bs=%zu "
		 "--iodepth=%llu --ioengine=io_uring --direct=1 --size=%llu "
		 "--offset=4096 --output-format=json 2>/dev/null",
		 o->store, rw, o->page_bytes, (unsigned long long)o->cfg.qd,
		 (unsigned long long)(store_bytes(o) - 4096));
	f = popen(cmd, "r");
	if (!f)
		return -1;
	/* The first "bw_bytes" of the job's read or write section. */
	while (fgets(line, sizeof(line), f)) {
		p = strstr(line, "\"bw_bytes\"");
		if (p && bw < 0 && strtod(strchr(p, ':') + 1, NULL) > 0)
			bw = strtod(strchr(p, ':') + 1, NULL);
	}
	if (pclose(f))
		return -1;
	return bw;
}

static int have_fio(void)
{
	return !system("command -v fio >/dev/null 2>&1");
}

static void print_gbps(const char *key, double bytes_per_s, int last)
{
	if (bytes_per_s < 0)
		printf("\"%s\": null%s", key, last ? "" : ", ");
	else
		printf("\"%s\": %.3f%s", key, bytes_per_s / 1e9,
		       last ? "" : ", ");
}

static void print_result(const struct offload *o)
{
	double off = (double)o->moved / o->offload_s;
	double rel = (double)o->moved / o->reload_s;

	if (o->cfg.json) {
		printf("{\"bytes\": %llu, \"page_bytes\": %zu, "
		       "\"queue_depth\": %llu, ",
		       (unsigned long long)o->moved, o->page_bytes,
		       (unsigned long long)o->cfg.qd);
		print_gbps("offload_gbps", off, 0);
		print_gbps("reload_gbps", rel, 0);
		print_gbps("fio_write_gbps", o->fio_write, 0);
		print_gbps("fio_read_gbps", o->fio_read, 1);
		printf("}\n");
		return;
	}
	printf("%llu MiB in pages of %zu bytes, queue depth %llu\n",
	       (unsigned long long)(o->moved >> 20), o->page_bytes,
	       (unsigned long long)o->cfg.qd);
	printf("%-8s %12s %12s %8s\n", "", "kvmemd GB/s", "fio GB/s", "ratio");
	if (o->fio_write >= 0)
		printf("%-8s %12.3f %12.3f %8.2f\n", "offload", off / 1e9,
		       o->fio_write / 1e9, off / o->fio_write);
	else
		printf("%-8s %12.3f %12s %8s\n", "offload", off / 1e9, "-",
		       "-");
	if (o->fio_read >= 0)
		printf("%-8s %12.3f %12.3f %8.2f\n", "reload", rel / 1e9,
		       o->fio_read / 1e9, rel / o->fio_read);
	else
		printf("%-8s %12.3f %12s %8s\n", "reload", rel / 1e9, "-", "-");
	if (o->fio_write < 0 && !o->cfg.no_fio)
		printf("(fio not found: no baseline)\n");
}

static int run_offload(int argc, char **argv)
{
	struct offload o = {
		.cfg = { .bytes = 256u << 20, .qd = 32 },
		.fio_write = -1,
		.fio_read = -1,
	};
	struct kvmem_page_layout l;
	const char *tmp = getenv("TMPDIR");
	int ret;

	ret = parse_cfg(argc, argv, &o.cfg);
	if (ret)
		return ret == 1 ? 0 : 2;
	snprintf(o.dir, sizeof(o.dir), "%s/kvmem-bench.XXXXXX",
		 tmp && *tmp && strlen(tmp) < 32 ? tmp : "/tmp");
	if (!mkdtemp(o.dir)) {
		fprintf(stderr, "kvmem-bench: mkdtemp: %s\n", strerror(errno));
		return 3;
	}
	snprintf(o.conf, sizeof(o.conf), "%s/kvmemd.conf", o.dir);
	snprintf(o.log, sizeof(o.log), "%s/kvmemd.log", o.dir);
	snprintf(o.sock, sizeof(o.sock), "%s/k.sock", o.dir);
	snprintf(o.admin, sizeof(o.admin), "%s/a.sock", o.dir);
	if (o.cfg.file && o.cfg.file[0] != '/') {
		if (!getcwd(o.store, sizeof(o.store) - 256)) {
			fprintf(stderr, "kvmem-bench: getcwd: %s\n",
				strerror(errno));
			return 3;
		}
		strcat(o.store, "/");
		strncat(o.store, o.cfg.file, 255);
	} else {
		snprintf(o.store, sizeof(o.store), "%s",
			 o.cfg.file ? o.cfg.file : "");
	}
	if (!o.cfg.file)
		snprintf(o.store, sizeof(o.store), "%s/store", o.dir);
	o.g = (struct kvmem_geometry){ .layers = LAYERS,
				       .kv_heads = KV_HEADS,
				       .head_dim = HEAD_DIM };
	kvmem_geometry_default(&o.g);
	o.g.tokens_per_page = PAGE_TOKENS;
	o.g.sink_tokens = PAGE_TOKENS;
	kvmem_page_layout(&o.g, 0, &l);
	o.page_bytes = l.size;
	ret = write_conf(&o);
	/* fio first, once unmeasured: every extent of the file is written
	 * before anything is timed, so no side pays for first writes into
	 * new space. kvmemd then formats the file and uses the same blocks. */
	if (!ret && !o.cfg.no_fio && have_fio() && fio(&o, "write") >= 0) {
		o.fio_write = fio(&o, "write");
		o.fio_read = fio(&o, "read");
	}
	if (!ret)
		ret = run_kvmemd(&o);
	if (!ret)
		print_result(&o);
	else
		show_log(&o);
	if (!o.cfg.file)
		unlink(o.store);
	unlink(o.conf);
	snprintf(o.conf, sizeof(o.conf), "rm -rf '%s'", o.dir);
	if (system(o.conf))
		fprintf(stderr, "kvmem-bench: could not remove %s\n", o.dir);
	return ret ? 3 : 0;
}

const struct bench_cmd bench_offload = {
	.name = "offload",
	.summary = "offload/reload GB/s through kvmemd vs fio on the same file",
	.run = run_offload,
};
