/* SPDX-License-Identifier: MIT */
/*
 * redis-cluster.h - a real Redis Cluster for the tests and kvmem-bench
 * remote: redis-server processes on 127.0.0.1, joined with redis-cli
 * --cluster create (or by hand, under 3 masters)
 *
 * Everything lives in a fresh /tmp/kvmem-rcluster-XXXXXX: a directory per
 * node (its nodes.conf, any RDB a replica receives, its log) and the log of
 * redis-cli --cluster create. The servers are children of the process that
 * started them (a Check suite's unchecked fixture, the bench), killed
 * with it (PR_SET_PDEATHSIG) should it die before redis_cluster_stop().
 *
 *	struct redis_cluster rc = { .extra = (const char *[]){
 *		"--maxmemory", "64mb", NULL } };
 *	const char *why;
 *	int r = redis_cluster_start(&rc, 3, 1, &why);
 *
 *	if (r > 0)
 *		printf("SKIP: ...: %s\n", why);	(no redis-server)
 *	else if (r < 0)
 *		fail with why			(has the log's tail)
 *	... rc.seeds, rc.node[i].port, redis_cluster_cli(&rc, i, ...) ...
 *	redis_cluster_stop(&rc);
 */
#ifndef KVMEM_TOOLS_REDIS_CLUSTER_H
#define KVMEM_TOOLS_REDIS_CLUSTER_H

#include <stddef.h>
#include <sys/types.h>

#define REDIS_CLUSTER_MAX_NODES 12

struct redis_cluster_node {
	pid_t pid; /* 0: not running (never started, killed, stopped) */
	int port; /* on 127.0.0.1; the cluster bus on port + 10000 */
	int master; /* a master when the cluster was created */
	char id[41]; /* CLUSTER MYID */
};

struct redis_cluster {
	/*
	 * Set before redis_cluster_start(), or NULL: more redis-server
	 * arguments for every node, NULL-terminated ("--maxmemory", "1mb").
	 */
	const char *const *extra;
	/* The rest is filled by redis_cluster_start(). */
	char dir[64]; /* "" when there is none */
	int nnodes; /* masters first: node[0 .. masters - 1] */
	int masters;
	struct redis_cluster_node node[REDIS_CLUSTER_MAX_NODES];
	char seeds[REDIS_CLUSTER_MAX_NODES * 24]; /* every node, "h:p,h:p" */
	char why[2048];
};

/*
 * Start @masters masters with @replicas_per_master replicas each (none
 * under 3 masters) and wait
 * (up to about 15 s) until every node says cluster_state:ok with all slots
 * served and every replica is in sync. @rc->extra is kept, the rest of
 * @rc is overwritten. Return: 0 when it runs; 1 when the machine lacks
 * redis-server or redis-cli (*@why says so: the test skips); -1 when it
 * failed (*@why says why, with the tail of the log at fault; nothing is
 * left running). *@why points into @rc.
 */
int redis_cluster_start(struct redis_cluster *rc, int masters,
			int replicas_per_master, const char **why);

/* Kill every node (SIGKILL), reap them and remove the directory. */
void redis_cluster_stop(struct redis_cluster *rc);

/*
 * SIGKILL the @idx-th master of the cluster as created (node[@idx]) and
 * reap it. Return: its node index, or -1 when it is not running.
 */
int redis_cluster_kill_master(struct redis_cluster *rc, int idx);

/*
 * Run redis-cli -h 127.0.0.1 -p <node's port> @args... (NULL-terminated)
 * and put what it printed, stdout then stderr, trailing newlines cut, in
 * @out (@len bytes, NUL-terminated). A run longer than 10 s is killed.
 * Return: its exit status, 128 + the signal that ended it, or -1 when it
 * could not be run.
 */
int redis_cluster_cli(const struct redis_cluster *rc, int node, char *out,
		      size_t len, ...) __attribute__((sentinel));
int redis_cluster_cliv(const struct redis_cluster *rc, int node, char *out,
		       size_t len, const char *const *args);

/*
 * The index of the node that serves @slot, from CLUSTER NODES of the
 * first running node that answers, or -1.
 */
int redis_cluster_slot_owner(const struct redis_cluster *rc, unsigned int slot);

/* The index of the running node whose port is @port, or -1. */
int redis_cluster_node_of_port(const struct redis_cluster *rc, int port);

/*
 * Wait up to @timeout_ms until every running master's replicas have
 * acknowledged all its replication stream (their offset in INFO
 * replication equals master_repl_offset). Return: 0, or -1 on timeout.
 */
int redis_cluster_sync_replicas(const struct redis_cluster *rc, int timeout_ms);

#endif /* KVMEM_TOOLS_REDIS_CLUSTER_H */
