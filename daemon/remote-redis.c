/* SPDX-License-Identifier: MIT */
/*
 * remote-redis.c - the shared tier's backend on a Redis Cluster, through
 * the cluster client of rcluster.c
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rcluster.h"
#include "remote.h"

static int redis_open(const char *seeds, const char *user, const char *password,
		      int timeout_ms, int retries, void **ctx, char *why,
		      size_t len)
{
	const struct rcluster_opts o = {
		.seeds = seeds,
		.user = user,
		.password = password,
		.timeout_ms = timeout_ms,
		.retries = retries,
	};

	return rcluster_open(&o, (struct rcluster **)ctx, why, len);
}

/* The store did not answer at all, rather than about a key. */
static int node_trouble(int status)
{
	return status == -ETIMEDOUT || status == -ECONNREFUSED ||
	       status == -EHOSTUNREACH || status == -EIO;
}

static int redis_exec(void *ctx, struct kvmemd_remote_req *reqs, size_t n)
{
	static const enum rcluster_op ops[] = {
		[KVMEMD_REMOTE_GET] = RC_GET,
		[KVMEMD_REMOTE_SETNX] = RC_SETNX,
		[KVMEMD_REMOTE_SETXX] = RC_SETXX,
		[KVMEMD_REMOTE_EXISTS] = RC_EXISTS,
		[KVMEMD_REMOTE_DEL] = RC_DEL,
	};
	struct rcluster_req *q = calloc(n, sizeof(*q));
	size_t i, down = 0;
	int ret;

	if (!q)
		return -ENOMEM;
	for (i = 0; i < n; i++)
		q[i] = (struct rcluster_req){
			.op = ops[reqs[i].op],
			.key = reqs[i].key,
			.keylen = strlen(reqs[i].key),
			.val = reqs[i].val,
			.vlen = reqs[i].vlen,
			.ttl_s = reqs[i].ttl_s,
			.max = reqs[i].max,
		};
	ret = rcluster_exec(ctx, q, n);
	for (i = 0; !ret && i < n; i++) {
		reqs[i].status = q[i].status;
		reqs[i].data = q[i].data;
		reqs[i].dlen = q[i].dlen;
		down += node_trouble(q[i].status);
	}
	free(q);
	if (!ret && n && down == n)
		ret = reqs[0].status;
	return ret;
}

static int redis_describe(void *ctx, char *buf, size_t len)
{
	return rcluster_describe(ctx, buf, len);
}

static void redis_stats(void *ctx, struct kvmemd_remote_stats *out)
{
	struct rcluster_stats st;

	rcluster_stats(ctx, &st);
	*out = (struct kvmemd_remote_stats){
		.requests = st.requests,
		.redirects = st.moved + st.ask,
		.retries = st.retries,
		.timeouts = st.timeouts,
		.errors = st.errors,
		.bytes_out = st.bytes_out,
		.bytes_in = st.bytes_in,
		.refreshes = st.refreshes,
		.masters = st.masters,
		.connected = st.nodes_connected,
	};
}

static void redis_close(void *ctx)
{
	rcluster_close(ctx);
}

const struct kvmemd_remote_ops kvmemd_remote_redis = {
	.name = "redis",
	.open = redis_open,
	.exec = redis_exec,
	.describe = redis_describe,
	.stats = redis_stats,
	.close = redis_close,
};
