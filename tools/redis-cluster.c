/* SPDX-License-Identifier: MIT */
/*
 * redis-cluster.c - a real Redis Cluster for the tests and kvmem-bench
 * remote (redis-cluster.h)
 *
 * Ports are picked at random in 20000..29999 and bind-tested, with the
 * cluster bus's port + 10000; suites running side by side can still race
 * for one, so a node that exits before it answers PING has all the nodes
 * started again on other ports, up to three times.
 *
 * Replicas must be in sync before a test kills their master: the nodes
 * run with repl-diskless-sync-delay 0, as Redis 7's default waits 5 s
 * before it sends a replica its first copy.
 *
 * redis-cli --cluster create wants 3 masters or more; a smaller cluster
 * without replicas is made by hand, each node given its share of the
 * slots (CLUSTER ADDSLOTSRANGE) and introduced to the first (CLUSTER
 * MEET).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "redis-cluster.h"

#define MAX_ARGS 64
#define CLI_TIMEOUT_MS 10000
#define START_TIMEOUT_MS 15000
#define PING_TIMEOUT_MS 5000

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* Whether @name is an executable in $PATH. */
static int in_path(const char *name)
{
	const char *p = getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin";
	char buf[4096];
	size_t n;

	for (; *p; p += n + (p[n] == ':')) {
		n = strcspn(p, ":");
		if (n && n < sizeof(buf) - strlen(name) - 2) {
			snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, p, name);
			if (!access(buf, X_OK))
				return 1;
		}
	}
	return 0;
}

/* Whether 127.0.0.1:@port can be bound now. */
static int port_free(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM, 0), ok;

	if (fd < 0)
		return 0;
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ok = !bind(fd, (struct sockaddr *)&a, sizeof(a));
	close(fd);
	return ok;
}

/* @n ports, each free with its bus port, none the same. */
static int pick_ports(struct redis_cluster *rc, int n)
{
	unsigned int seed =
		(unsigned int)getpid() * 2654435761u ^ (unsigned int)now_ms();
	int i, tries, port, j, dup;

	for (i = 0; i < n; i++) {
		for (tries = 0; tries < 1000; tries++) {
			port = 20000 + (int)(rand_r(&seed) % 10000);
			for (dup = 0, j = 0; j < i; j++)
				dup |= rc->node[j].port == port;
			if (!dup && port_free(port) && port_free(port + 10000))
				break;
		}
		if (tries == 1000)
			return -1;
		rc->node[i].port = port;
	}
	return 0;
}

/* The last @max bytes of the file @path into @rc->why after its text. */
static void why_tail(struct redis_cluster *rc, const char *path, size_t max)
{
	size_t used = strlen(rc->why), n;
	char buf[1024];
	FILE *f = fopen(path, "r");
	long size;

	if (!f)
		return;
	if (max > sizeof(buf) - 1)
		max = sizeof(buf) - 1;
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	fseek(f, size > (long)max ? size - (long)max : 0, SEEK_SET);
	n = fread(buf, 1, max, f);
	buf[n] = 0;
	fclose(f);
	snprintf(rc->why + used, sizeof(rc->why) - used, "; %s ends: %s", path,
		 buf);
}

/* Fork and exec @argv, stdout and stderr to @log (or a pipe @fd). */
static pid_t spawn(const char *const *argv, const char *log, int fd)
{
	pid_t pid = fork();
	int out;

	if (pid)
		return pid;
	/* Not left running when the suite's process dies. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	out = fd >= 0 ? fd : open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
	if (out < 0)
		_exit(126);
	dup2(out, 1);
	dup2(out, 2);
	if (out > 2)
		close(out);
	execvp(argv[0], (char *const *)argv);
	_exit(127);
}

/* waitpid with a deadline; SIGKILL after it. Return: the exit status. */
static int reap(pid_t pid, long deadline)
{
	int st;

	while (waitpid(pid, &st, WNOHANG) == 0) {
		if (now_ms() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			break;
		}
		sleep_ms(5);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int redis_cluster_cliv(const struct redis_cluster *rc, int node, char *out,
		       size_t len, const char *const *args)
{
	const char *argv[MAX_ARGS + 6];
	char port[16], buf[4096];
	long deadline = now_ms() + CLI_TIMEOUT_MS;
	size_t used = 0;
	int p[2], i = 0, n;
	pid_t pid;
	ssize_t got;
	struct pollfd pfd;

	if (len)
		out[0] = 0;
	if (node < 0 || node >= rc->nnodes)
		return -1;
	snprintf(port, sizeof(port), "%d", rc->node[node].port);
	argv[i++] = "redis-cli";
	argv[i++] = "-h";
	argv[i++] = "127.0.0.1";
	argv[i++] = "-p";
	argv[i++] = port;
	for (n = 0; args[n] && n < MAX_ARGS; n++)
		argv[i++] = args[n];
	argv[i] = NULL;
	if (pipe2(p, O_CLOEXEC))
		return -1;
	pid = spawn(argv, NULL, p[1]);
	close(p[1]);
	if (pid < 0) {
		close(p[0]);
		return -1;
	}
	pfd.fd = p[0];
	pfd.events = POLLIN;
	while (now_ms() < deadline &&
	       poll(&pfd, 1, (int)(deadline - now_ms())) > 0) {
		got = read(p[0], buf, sizeof(buf));
		if (got <= 0)
			break;
		n = (int)got;
		if (used + 1 < len) {
			if ((size_t)n > len - 1 - used)
				n = (int)(len - 1 - used);
			memcpy(out + used, buf, (size_t)n);
			used += (size_t)n;
		}
	}
	close(p[0]);
	while (used && (out[used - 1] == '\n' || out[used - 1] == '\r'))
		used--;
	if (len)
		out[used] = 0;
	return reap(pid, deadline);
}

int redis_cluster_cli(const struct redis_cluster *rc, int node, char *out,
		      size_t len, ...)
{
	const char *args[MAX_ARGS + 1];
	va_list ap;
	int n = 0;

	va_start(ap, len);
	while (n < MAX_ARGS && (args[n] = va_arg(ap, const char *)))
		n++;
	va_end(ap);
	args[n] = NULL;
	return redis_cluster_cliv(rc, node, out, len, args);
}

/* Whether the node answers PING with +PONG, over a socket of our own. */
static int node_pings(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct timeval tv = { 0, 200000 };
	char buf[16] = { 0 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok = 0;

	if (fd < 0)
		return 0;
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (!connect(fd, (struct sockaddr *)&a, sizeof(a)) &&
	    write(fd, "PING\r\n", 6) == 6 && read(fd, buf, 7) > 0)
		ok = !strncmp(buf, "+PONG", 5);
	close(fd);
	return ok;
}

static void node_log(const struct redis_cluster *rc, int i, char *path,
		     size_t len)
{
	snprintf(path, len, "%s/%d/log", rc->dir, rc->node[i].port);
}

/* Start node @i; return 0, or -1 with why. */
static int node_start(struct redis_cluster *rc, int i)
{
	const char *argv[MAX_ARGS + 32];
	char port[16], conf[32], dir[96], log[128];
	int n = 0, k;

	snprintf(port, sizeof(port), "%d", rc->node[i].port);
	snprintf(conf, sizeof(conf), "nodes-%d.conf", rc->node[i].port);
	snprintf(dir, sizeof(dir), "%s/%d", rc->dir, rc->node[i].port);
	node_log(rc, i, log, sizeof(log));
	if (mkdir(dir, 0700) && errno != EEXIST) {
		snprintf(rc->why, sizeof(rc->why), "mkdir %s: %s", dir,
			 strerror(errno));
		return -1;
	}
	argv[n++] = "redis-server";
	argv[n++] = "--port";
	argv[n++] = port;
	argv[n++] = "--cluster-enabled";
	argv[n++] = "yes";
	argv[n++] = "--cluster-config-file";
	argv[n++] = conf;
	argv[n++] = "--dir";
	argv[n++] = dir;
	argv[n++] = "--save";
	argv[n++] = "";
	argv[n++] = "--appendonly";
	argv[n++] = "no";
	argv[n++] = "--daemonize";
	argv[n++] = "no";
	argv[n++] = "--bind";
	argv[n++] = "127.0.0.1";
	argv[n++] = "--cluster-node-timeout";
	argv[n++] = "2000";
	argv[n++] = "--repl-diskless-sync-delay";
	argv[n++] = "0";
	for (k = 0; rc->extra && rc->extra[k] && k < MAX_ARGS; k++)
		argv[n++] = rc->extra[k];
	argv[n] = NULL;
	rc->node[i].pid = spawn(argv, log, -1);
	if (rc->node[i].pid < 0) {
		rc->node[i].pid = 0;
		snprintf(rc->why, sizeof(rc->why), "fork: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* Wait for node @i's PING. Return: 0, 1 when it exited (a port race?). */
static int node_wait(struct redis_cluster *rc, int i)
{
	long deadline = now_ms() + PING_TIMEOUT_MS;
	char log[128];
	int st;

	while (!node_pings(rc->node[i].port)) {
		if (waitpid(rc->node[i].pid, &st, WNOHANG) == rc->node[i].pid) {
			rc->node[i].pid = 0;
			snprintf(rc->why, sizeof(rc->why),
				 "redis-server on port %d exited",
				 rc->node[i].port);
			node_log(rc, i, log, sizeof(log));
			why_tail(rc, log, 600);
			return 1;
		}
		if (now_ms() > deadline) {
			snprintf(rc->why, sizeof(rc->why),
				 "redis-server on port %d: no PONG in %d ms",
				 rc->node[i].port, PING_TIMEOUT_MS);
			node_log(rc, i, log, sizeof(log));
			why_tail(rc, log, 600);
			return -1;
		}
		sleep_ms(20);
	}
	return 0;
}

static void kill_all(struct redis_cluster *rc)
{
	int i;

	for (i = 0; i < rc->nnodes; i++)
		if (rc->node[i].pid > 0)
			kill(rc->node[i].pid, SIGKILL);
	for (i = 0; i < rc->nnodes; i++) {
		if (rc->node[i].pid > 0)
			waitpid(rc->node[i].pid, NULL, 0);
		rc->node[i].pid = 0;
	}
}

/* Every node up, or -1 (or 1: a node exited early) with why. */
static int start_nodes(struct redis_cluster *rc)
{
	int i, r = 0;

	if (pick_ports(rc, rc->nnodes)) {
		snprintf(rc->why, sizeof(rc->why),
			 "no %d free ports in 20000..29999", rc->nnodes);
		return -1;
	}
	for (i = 0; i < rc->nnodes && !r; i++)
		r = node_start(rc, i);
	for (i = 0; i < rc->nnodes && !r; i++)
		r = node_wait(rc, i);
	if (r)
		kill_all(rc);
	return r;
}

/* Whether every node says the cluster is ok and its replicas online. */
static int cluster_ready(struct redis_cluster *rc, int replicas)
{
	char out[4096], want[32];
	const char *p;
	int i, k;

	for (i = 0; i < rc->nnodes; i++) {
		if (redis_cluster_cli(rc, i, out, sizeof(out), "CLUSTER",
				      "INFO", NULL) ||
		    !strstr(out, "cluster_state:ok") ||
		    !strstr(out, "cluster_slots_ok:16384"))
			return 0;
		if (redis_cluster_cli(rc, i, out, sizeof(out), "INFO",
				      "replication", NULL))
			return 0;
		rc->node[i].master = strstr(out, "role:master") != NULL;
		if (!rc->node[i].master)
			continue;
		snprintf(want, sizeof(want), "connected_slaves:%d", replicas);
		if (!strstr(out, want))
			return 0;
		for (p = out, k = 0; (p = strstr(p, "state=")); p++, k++)
			if (strncmp(p, "state=online", 12))
				return 0;
		if (k != replicas)
			return 0;
	}
	return 1;
}

/* Node ids, the seeds, and the masters in front. */
static int cluster_describe(struct redis_cluster *rc)
{
	struct redis_cluster_node t;
	size_t off = 0;
	int i, j, m = 0;

	for (i = 0; i < rc->nnodes; i++) {
		if (redis_cluster_cli(rc, i, rc->node[i].id,
				      sizeof(rc->node[i].id), "CLUSTER", "MYID",
				      NULL) ||
		    strlen(rc->node[i].id) != 40) {
			snprintf(rc->why, sizeof(rc->why),
				 "CLUSTER MYID on port %d: \"%s\"",
				 rc->node[i].port, rc->node[i].id);
			return -1;
		}
	}
	for (i = 0; i < rc->nnodes; i++) {
		if (!rc->node[i].master)
			continue;
		for (j = i; j > m; j--) {
			t = rc->node[j];
			rc->node[j] = rc->node[j - 1];
			rc->node[j - 1] = t;
		}
		m++;
	}
	if (m != rc->masters) {
		snprintf(rc->why, sizeof(rc->why),
			 "%d masters, %d were asked for", m, rc->masters);
		return -1;
	}
	for (i = 0; i < rc->nnodes; i++)
		off += (size_t)snprintf(
			rc->seeds + off, sizeof(rc->seeds) - off,
			"%s127.0.0.1:%d", i ? "," : "", rc->node[i].port);
	return 0;
}

/* Under 3 masters, no replicas: the slots shared out, the nodes met. */
static int cluster_assign(struct redis_cluster *rc)
{
	char lo[16], hi[16], port[16], out[256];
	int i;

	snprintf(port, sizeof(port), "%d", rc->node[0].port);
	for (i = 0; i < rc->nnodes; i++) {
		snprintf(lo, sizeof(lo), "%u",
			 i * 16384u / (unsigned)rc->nnodes);
		snprintf(hi, sizeof(hi), "%u",
			 (i + 1) * 16384u / (unsigned)rc->nnodes - 1);
		if (redis_cluster_cli(rc, i, out, sizeof(out), "CLUSTER",
				      "ADDSLOTSRANGE", lo, hi, NULL) ||
		    strcmp(out, "OK") ||
		    (i && (redis_cluster_cli(rc, i, out, sizeof(out), "CLUSTER",
					     "MEET", "127.0.0.1", port, NULL) ||
			   strcmp(out, "OK")))) {
			snprintf(rc->why, sizeof(rc->why),
				 "node on port %d: CLUSTER ADDSLOTSRANGE or "
				 "MEET: \"%s\"",
				 rc->node[i].port, out);
			return -1;
		}
	}
	return 0;
}

static int cluster_create(struct redis_cluster *rc, int replicas)
{
	const char *argv[REDIS_CLUSTER_MAX_NODES + 8];
	char addr[REDIS_CLUSTER_MAX_NODES][24], reps[16], log[96];
	long deadline;
	int i, n = 0, st;
	pid_t pid;

	snprintf(log, sizeof(log), "%s/create.log", rc->dir);
	if (rc->masters < 3) {
		if (cluster_assign(rc))
			return -1;
		goto wait;
	}
	snprintf(reps, sizeof(reps), "%d", replicas);
	argv[n++] = "redis-cli";
	argv[n++] = "--cluster";
	argv[n++] = "create";
	for (i = 0; i < rc->nnodes; i++) {
		snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%d",
			 rc->node[i].port);
		argv[n++] = addr[i];
	}
	argv[n++] = "--cluster-replicas";
	argv[n++] = reps;
	argv[n++] = "--cluster-yes";
	argv[n] = NULL;
	pid = spawn(argv, log, -1);
	if (pid < 0) {
		snprintf(rc->why, sizeof(rc->why), "fork: %s", strerror(errno));
		return -1;
	}
	st = reap(pid, now_ms() + START_TIMEOUT_MS);
	if (st) {
		snprintf(rc->why, sizeof(rc->why),
			 "redis-cli --cluster create: status %d", st);
		why_tail(rc, log, 800);
		return -1;
	}
wait:
	deadline = now_ms() + START_TIMEOUT_MS;
	while (!cluster_ready(rc, replicas)) {
		if (now_ms() > deadline) {
			snprintf(rc->why, sizeof(rc->why),
				 "the cluster was not ok (all slots, replicas "
				 "online) after %d ms",
				 START_TIMEOUT_MS);
			why_tail(rc, log, 400);
			return -1;
		}
		sleep_ms(100);
	}
	return cluster_describe(rc);
}

int redis_cluster_start(struct redis_cluster *rc, int masters,
			int replicas_per_master, const char **why)
{
	const char *const *extra = rc->extra;
	int tries, r = 1;

	memset(rc, 0, sizeof(*rc));
	rc->extra = extra;
	*why = rc->why;
	if (!in_path("redis-server") || !in_path("redis-cli")) {
		snprintf(rc->why, sizeof(rc->why),
			 "no redis-server or redis-cli in PATH (Debian: "
			 "redis-server, redis-tools)");
		return 1;
	}
	rc->masters = masters;
	rc->nnodes = masters * (1 + replicas_per_master);
	if (masters < 1 || replicas_per_master < 0 ||
	    (masters < 3 && replicas_per_master) ||
	    rc->nnodes > REDIS_CLUSTER_MAX_NODES) {
		snprintf(rc->why, sizeof(rc->why),
			 "%d masters with %d replicas each: a cluster has a "
			 "master or more (3 or more with replicas), %d nodes "
			 "at most",
			 masters, replicas_per_master, REDIS_CLUSTER_MAX_NODES);
		return -1;
	}
	snprintf(rc->dir, sizeof(rc->dir), "/tmp/kvmem-rcluster-XXXXXX");
	if (!mkdtemp(rc->dir)) {
		snprintf(rc->why, sizeof(rc->why), "mkdtemp %s: %s", rc->dir,
			 strerror(errno));
		rc->dir[0] = 0;
		return -1;
	}
	for (tries = 0; tries < 3 && r > 0; tries++)
		r = start_nodes(rc);
	if (!r)
		r = cluster_create(rc, replicas_per_master);
	if (r) {
		fprintf(stderr, "redis_cluster_start: %s\n", rc->why);
		redis_cluster_stop(rc);
		return -1;
	}
	return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

void redis_cluster_stop(struct redis_cluster *rc)
{
	kill_all(rc);
	if (rc->dir[0])
		nftw(rc->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	rc->dir[0] = 0;
}

int redis_cluster_kill_master(struct redis_cluster *rc, int idx)
{
	if (idx < 0 || idx >= rc->masters || rc->node[idx].pid <= 0)
		return -1;
	kill(rc->node[idx].pid, SIGKILL);
	waitpid(rc->node[idx].pid, NULL, 0);
	rc->node[idx].pid = 0;
	return idx;
}

int redis_cluster_node_of_port(const struct redis_cluster *rc, int port)
{
	int i;

	for (i = 0; i < rc->nnodes; i++)
		if (rc->node[i].port == port && rc->node[i].pid > 0)
			return i;
	return -1;
}

/* Whether "a-b", "a" or "[...]" of CLUSTER NODES covers @slot. */
static int range_has(const char *tok, unsigned int slot)
{
	unsigned long a, b;
	char *end;

	if (*tok == '[')
		return 0;
	a = strtoul(tok, &end, 10);
	b = *end == '-' ? strtoul(end + 1, NULL, 10) : a;
	return slot >= a && slot <= b;
}

int redis_cluster_slot_owner(const struct redis_cluster *rc, unsigned int slot)
{
	static char out[16384];
	char *line, *save = NULL, *tok, *tsave, *addr;
	int i, field, port;

	for (i = 0; i < rc->nnodes; i++)
		if (rc->node[i].pid > 0 &&
		    !redis_cluster_cli(rc, i, out, sizeof(out), "CLUSTER",
				       "NODES", NULL) &&
		    strstr(out, "myself"))
			break;
	if (i == rc->nnodes)
		return -1;
	/* <id> <ip:port@bus> <flags> <master> <ping> <pong> <epoch>
	 * <link> <slot>... */
	for (line = strtok_r(out, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		addr = NULL;
		field = 0;
		for (tok = strtok_r(line, " ", &tsave); tok;
		     tok = strtok_r(NULL, " ", &tsave), field++) {
			if (field == 1)
				addr = tok;
			if (field == 2 && !strstr(tok, "master"))
				break;
			if (field >= 8 && range_has(tok, slot) && addr &&
			    strchr(addr, ':')) {
				port = atoi(strchr(addr, ':') + 1);
				return redis_cluster_node_of_port(rc, port);
			}
		}
	}
	return -1;
}

/* A number after @key in INFO text, or -1. */
static long long info_num(const char *text, const char *key)
{
	const char *p = strstr(text, key);

	return p ? atoll(p + strlen(key)) : -1;
}

int redis_cluster_sync_replicas(const struct redis_cluster *rc, int timeout_ms)
{
	long deadline = now_ms() + timeout_ms;
	char out[4096];
	const char *p;
	long long want;
	int i, behind;

	do {
		behind = 0;
		for (i = 0; i < rc->nnodes; i++) {
			if (rc->node[i].pid <= 0 ||
			    redis_cluster_cli(rc, i, out, sizeof(out), "INFO",
					      "replication", NULL) ||
			    !strstr(out, "role:master"))
				continue;
			want = info_num(out, "master_repl_offset:");
			for (p = out; (p = strstr(p, ",offset=")); p++)
				behind |= atoll(p + 8) != want;
		}
		if (!behind)
			return 0;
		sleep_ms(20);
	} while (now_ms() < deadline);
	return -1;
}
