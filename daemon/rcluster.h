/* SPDX-License-Identifier: MIT */
/*
 * rcluster.h - the small part of a Redis Cluster client that kvmemd's
 * remote tier needs, on hiredis 0.14 (which has no cluster support)
 *
 * The client keeps the slot map of CLUSTER SLOTS, one connection per node
 * it talks to (opened on first use, dropped on any error and opened again
 * on the next), and runs batches of requests pipelined per node. It
 * follows MOVED and ASK redirects and retries across a failover, with
 * every connect and every reply under a timeout: the caller's thread
 * blocks, but never without bound. The only queue is the caller's array
 * of requests.
 *
 * A struct rcluster is used by one thread at a time (kvmemd's remote tier
 * thread); nothing in it is locked.
 *
 * Included by rcluster.c, the remote tier and the tests of the client.
 */
#ifndef KVMEMD_RCLUSTER_H
#define KVMEMD_RCLUSTER_H

#include <stddef.h>
#include <stdint.h>

/* Largest value stored or read back; Redis itself allows 512 MiB. */
#define RCLUSTER_MAX_VALUE (64u << 20)
/* Redis Cluster's hash slots. */
#define RCLUSTER_SLOTS 16384u
/* Nodes known at most (seeds, masters, replicas, redirect targets). */
#define RCLUSTER_MAX_NODES 1024u

struct rcluster;

struct rcluster_opts {
	const char *seeds; /* "host:port[,host:port...]", at least one */
	const char *user; /* ACL user, NULL: none (AUTH not sent) */
	const char *password; /* with user; NULL: none */
	int timeout_ms; /* connect and each reply; > 0 */
	int retries; /* redirect/failover passes per batch, e.g. 5; >= 0 */
};

enum rcluster_op { RC_GET, RC_SET, RC_SETNX, RC_SETXX, RC_EXISTS, RC_DEL };

struct rcluster_req {
	enum rcluster_op op;
	const char *key;
	size_t keylen;
	const void *val; /* SET*: the value */
	size_t vlen;
	uint32_t ttl_s; /* SET*: EX ttl_s when > 0; RC_SETXX: KEEPTTL at 0 */
	/*
	 * RC_GET: when > 0, at most max + 1 bytes are read (GETRANGE key 0
	 * max): a longer value comes back cut to max + 1 bytes, which says
	 * it is too long without its bytes crossing the network or memory.
	 * An empty value reads as -ENOENT then (GETRANGE cannot tell it from
	 * a missing key). 0: the whole value, as GET.
	 */
	size_t max;
	/*
	 * Result. 0: done (GET hit, SET* stored, EXISTS: exists, DEL:
	 * deleted). -ENOENT: GET miss, EXISTS no, DEL nothing, SETXX with no
	 * key. -EEXIST: SETNX found the key (not stored). -EACCES: NOPERM
	 * (ACL refused) or authentication failed. -ETIMEDOUT,
	 * -ECONNREFUSED, -EHOSTUNREACH (no node serves the slot), -EIO
	 * (connection lost, CLUSTERDOWN, TRYAGAIN, LOADING): node trouble
	 * that outlasted the retries. -ENOMEM: no memory here, or the server
	 * is over its maxmemory (OOM). -EPROTO: a reply that makes no
	 * sense. -E2BIG: value (or key) over RCLUSTER_MAX_VALUE. -EINVAL:
	 * unknown op, or a NULL key or value with a length.
	 */
	int status;
	void *data; /* GET hit: malloc'd copy, the caller frees it */
	size_t dlen;
};

/* What the client saw since rcluster_open(). */
struct rcluster_stats {
	uint64_t refreshes; /* slot maps loaded (CLUSTER SLOTS) */
	uint64_t moved; /* MOVED redirects followed */
	uint64_t ask; /* ASK redirects followed */
	uint64_t retries; /* passes of a batch after its first */
	uint64_t timeouts; /* connects and replies that timed out */
	uint64_t errors; /* requests that ended in an error */
	uint64_t requests; /* requests run */
	uint64_t bytes_out; /* RESP bytes of the commands sent */
	uint64_t bytes_in; /* RESP bytes of the replies read */
	uint32_t masters; /* nodes that serve slots in the map */
	uint32_t nodes_connected; /* open connections */
};

/**
 * rcluster_open() - connect to a seed and load the slot map
 * @o: the seeds and options; copied, not kept
 * @out: receives the client
 * @why: receives a sentence saying why it failed
 * @len: size of @why
 *
 * Tries the seeds in order until one answers CLUSTER SLOTS with a map
 * that covers at least one slot. Blocks, up to about @o->timeout_ms per
 * seed tried.
 *
 * Return: 0; -EINVAL for bad options; -EACCES when AUTH was refused;
 * -EPROTO when a seed's reply makes no sense (not a cluster node, or a
 * garbled map); -ECONNREFUSED, -ETIMEDOUT, -EHOSTUNREACH, -EIO when no
 * seed could be reached (the last seed's error); -ENOMEM.
 */
int rcluster_open(const struct rcluster_opts *o, struct rcluster **out,
		  char *why, size_t len);

/* Close every connection and free @c; NULL is fine. */
void rcluster_close(struct rcluster *c);

/**
 * rcluster_exec() - run a batch of requests
 * @c: the client
 * @reqs: the requests; each gets a status (and a GET hit its data)
 * @n: how many
 *
 * Requests are pipelined per node: one round trip per node per pass when
 * nothing is redirected. A MOVED reply updates the map (and it is loaded
 * again from CLUSTER SLOTS) and the request goes to the new owner in the
 * next pass; an ASK sends ASKING and the request to that node, for that
 * request only. TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN, timeouts and
 * lost connections load the map again and retry after a short backoff
 * (doubling from 50 ms, at most @timeout_ms). At most @retries passes
 * follow the first. Blocks for about (retries + 1) * timeout_ms * (nodes
 * touched) at most.
 *
 * Return: 0 when every request has a status (errors included), -EINVAL
 * when @reqs is NULL with @n > 0.
 */
int rcluster_exec(struct rcluster *c, struct rcluster_req *reqs, size_t n);

/**
 * rcluster_slot() - the hash slot of a key
 * @key: the key, binary
 * @len: its length
 *
 * CRC16-XMODEM of the key, or of its hash tag (what lies between the
 * first '{' and the first '}' after it, when that is not empty), modulo
 * 16384, as the Redis Cluster specification says.
 *
 * Return: 0 .. RCLUSTER_SLOTS - 1.
 */
unsigned int rcluster_slot(const char *key, size_t len);

/* Copy @c's counters into @out. */
void rcluster_stats(const struct rcluster *c, struct rcluster_stats *out);

/**
 * rcluster_describe() - one line per master, for status output
 * @c: the client
 * @buf: receives "host:port slots=N connected=0|1\n" lines, NUL-terminated
 * @len: size of @buf
 *
 * Return: the length the text has, whether or not it fit (snprintf's
 * semantics).
 */
int rcluster_describe(const struct rcluster *c, char *buf, size_t len);

#endif /* KVMEMD_RCLUSTER_H */
