/* SPDX-License-Identifier: MIT */
/*
 * rcluster.c - a Redis Cluster client for the remote tier, on hiredis 0.14
 *
 * Debian's hiredis has no cluster support, so this carries the part of it
 * kvmemd needs (https://redis.io/docs/reference/cluster-spec/):
 *
 * - The slot map: which node serves each of the 16384 hash slots, from
 *   CLUSTER SLOTS, loaded at open and again whenever the topology may have
 *   changed (a MOVED, a lost node, CLUSTERDOWN). Nodes are kept in a table
 *   of at most RCLUSTER_MAX_NODES; the map holds indices into it.
 * - Batches: the requests of a pass are grouped by node, each node's
 *   commands appended to its connection and its replies read back in
 *   order, so a pass costs one round trip per node.
 * - Redirects: MOVED changes the slot's owner in the map at once (the
 *   next pass goes there) and has the map loaded again; ASK sends ASKING
 *   and that request alone to the node named, for one pass.
 * - Trouble (TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN, READONLY,
 *   timeouts, lost connections): the map is loaded again, asking the
 *   nodes that gave no trouble first, and the pass is retried after a
 *   backoff, up to the batch's retries.
 *
 * Every reply is checked for its type and its range before use: what a
 * confused or hostile server sends ends a request with -EPROTO, never in
 * a crash. What hiredis itself buffers is not bounded (0.14 has no limit
 * on a bulk string's length): a server can make it allocate what it
 * claims, slowly, each read under the timeout.
 *
 * hiredis writes with write(), which raises SIGPIPE on a connection the
 * peer closed; open and exec block SIGPIPE in the calling thread and take
 * back any they caused, so the caller's disposition does not matter.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "rcluster.h"

#define RC_NONE 0xffffu /* no node: in the map and in a request's work */
#define RC_HOST_MAX 256
#define RC_BACKOFF_MS 50

_Static_assert(RCLUSTER_MAX_NODES < RC_NONE, "node index fits the map");

struct rc_node {
	char host[RC_HOST_MAX];
	int port;
	redisContext *ctx; /* NULL: not connected */
	uint32_t slots; /* in the map */
	uint8_t seed; /* named in the options: never reused */
	uint8_t failed; /* gave trouble in this batch: asked last */
	uint8_t busy; /* has requests in this pass */
};

struct rcluster {
	struct rc_node *node;
	uint32_t nnodes;
	uint32_t prefer; /* ask it first for the map (a MOVED's target) */
	char *user, *password;
	struct timeval tv;
	int retries;
	uint16_t map[RCLUSTER_SLOTS]; /* slot -> node, RC_NONE: unknown */
	uint16_t next[RCLUSTER_SLOTS]; /* the map being loaded */
	struct rcluster_stats st;
};

/* What exec keeps per request, for the batch. */
struct rc_work {
	uint16_t node; /* where this pass sends it */
	uint16_t ask; /* an ASK's target for the next pass, or RC_NONE */
	uint8_t pending;
	uint8_t sent; /* appended to its node's connection this pass */
	int err; /* its status should the retries run out */
};

/* What a pass found out, for the next. */
enum {
	RC_REFRESH = 1 << 0, /* load the map again */
	RC_BACKOFF = 1 << 1, /* wait before the next pass */
};

unsigned int rcluster_slot(const char *key, size_t len)
{
	const unsigned char *p = (const unsigned char *)key;
	size_t s, e, i;
	uint16_t crc = 0;
	int b;

	/* A hash tag: from the first '{' to the first '}' after it. */
	for (s = 0; s < len && p[s] != '{'; s++)
		;
	if (s < len) {
		for (e = s + 1; e < len && p[e] != '}'; e++)
			;
		if (e < len && e > s + 1) {
			p += s + 1;
			len = e - s - 1;
		}
	}
	/* CRC16-XMODEM: polynomial 0x1021, not reflected, starting at 0. */
	for (i = 0; i < len; i++) {
		crc ^= (uint16_t)(p[i] << 8);
		for (b = 0; b < 8; b++)
			crc = crc & 0x8000 ? (uint16_t)(crc << 1) ^ 0x1021
					   : (uint16_t)(crc << 1);
	}
	return crc & (RCLUSTER_SLOTS - 1);
}

/* The RESP length of a command, for the byte counters. */
static uint64_t resp_cmd_len(int argc, const size_t *argvlen)
{
	char tmp[32];
	uint64_t n;
	int i;

	n = (uint64_t)snprintf(tmp, sizeof(tmp), "*%d\r\n", argc);
	for (i = 0; i < argc; i++)
		n += (uint64_t)snprintf(tmp, sizeof(tmp), "$%zu\r\n",
					argvlen[i]) +
		     argvlen[i] + 2;
	return n;
}

/* The RESP length of a reply, as the server sent it (RESP2). */
static uint64_t resp_reply_len(const redisReply *r, unsigned int depth)
{
	char tmp[32];
	uint64_t n;
	size_t i;

	switch (r->type) {
	case REDIS_REPLY_STRING:
		return (uint64_t)snprintf(tmp, sizeof(tmp), "$%zu\r\n",
					  r->len) +
		       r->len + 2;
	case REDIS_REPLY_STATUS:
	case REDIS_REPLY_ERROR:
		return r->len + 3;
	case REDIS_REPLY_INTEGER:
		return (uint64_t)snprintf(tmp, sizeof(tmp), ":%lld\r\n",
					  r->integer);
	case REDIS_REPLY_NIL:
		return 5;
	case REDIS_REPLY_ARRAY:
		n = (uint64_t)snprintf(tmp, sizeof(tmp), "*%zu\r\n",
				       r->elements);
		/* hiredis 0.14 nests at most 7 deep; this is a counter. */
		for (i = 0; depth < 8 && i < r->elements; i++)
			if (r->element[i])
				n += resp_reply_len(r->element[i], depth + 1);
		return n;
	}
	return 0;
}

static int is_timeout_errno(int e)
{
	return e == EAGAIN || e == EWOULDBLOCK || e == ETIMEDOUT ||
	       e == EINPROGRESS;
}

/*
 * The negative errno for a context hiredis gave up on; @saved is errno as
 * it was right after the failing call, which hiredis sets for I/O errors.
 */
static int ctx_err(struct rcluster *c, const redisContext *ctx, int saved)
{
	switch (ctx->err) {
	case REDIS_ERR_IO:
		if (is_timeout_errno(saved)) {
			c->st.timeouts++;
			return -ETIMEDOUT;
		}
		if (saved == ECONNREFUSED || saved == EHOSTUNREACH)
			return -saved;
		if (saved == ENETUNREACH)
			return -EHOSTUNREACH;
		return -EIO;
	case REDIS_ERR_PROTOCOL:
		return -EPROTO;
	case REDIS_ERR_OOM:
		return -ENOMEM;
	default: /* REDIS_ERR_EOF, REDIS_ERR_OTHER */
		return -EIO;
	}
}

static void node_drop(struct rc_node *nd)
{
	if (nd->ctx) {
		redisFree(nd->ctx);
		nd->ctx = NULL;
	}
}

/* Whether the error reply @r starts with the word @word. */
static int err_is(const redisReply *r, const char *word)
{
	size_t n = strlen(word);

	return r->len >= n && !memcmp(r->str, word, n) &&
	       (r->len == n || r->str[n] == ' ');
}

/*
 * Send AUTH on a new connection. Return: 0, -EACCES when refused, or the
 * connection's error.
 */
static int node_auth(struct rcluster *c, struct rc_node *nd, char *why,
		     size_t len)
{
	const char *argv[3] = { "AUTH", c->user, c->password };
	size_t argvlen[3] = { 4, strlen(c->user), strlen(c->password) };
	redisReply *r;
	int err = 0;

	errno = 0;
	r = redisCommandArgv(nd->ctx, 3, argv, argvlen);
	if (!r) {
		err = ctx_err(c, nd->ctx, errno);
		snprintf(why, len, "%s:%d: AUTH: %s", nd->host, nd->port,
			 nd->ctx->errstr);
		return err;
	}
	c->st.bytes_out += resp_cmd_len(3, argvlen);
	c->st.bytes_in += resp_reply_len(r, 0);
	if (r->type == REDIS_REPLY_ERROR) {
		err = -EACCES;
		snprintf(why, len, "%s:%d: AUTH as %s refused: %.*s", nd->host,
			 nd->port, c->user, (int)(r->len > 200 ? 200 : r->len),
			 r->str);
	} else if (r->type != REDIS_REPLY_STATUS || r->len != 2 ||
		   memcmp(r->str, "OK", 2)) {
		err = -EPROTO;
		snprintf(why, len, "%s:%d: AUTH: reply of type %d, not +OK",
			 nd->host, nd->port, r->type);
	}
	freeReplyObject(r);
	return err;
}

/* The node's connection, opened (and authenticated) when it has none. */
static int node_connect(struct rcluster *c, struct rc_node *nd, char *why,
			size_t len)
{
	int err, saved;

	if (nd->ctx)
		return 0;
	errno = 0;
	nd->ctx = redisConnectWithTimeout(nd->host, nd->port, c->tv);
	saved = errno;
	if (!nd->ctx) {
		snprintf(why, len, "%s:%d: no memory for a connection",
			 nd->host, nd->port);
		return -ENOMEM;
	}
	if (nd->ctx->err) {
		err = ctx_err(c, nd->ctx, saved);
		snprintf(why, len, "%s:%d: connect: %s", nd->host, nd->port,
			 nd->ctx->errstr);
		node_drop(nd);
		return err;
	}
	if (redisSetTimeout(nd->ctx, c->tv) != REDIS_OK) {
		snprintf(why, len, "%s:%d: cannot set the timeout", nd->host,
			 nd->port);
		node_drop(nd);
		return -EIO;
	}
	if (c->user) {
		err = node_auth(c, nd, why, len);
		if (err) {
			node_drop(nd);
			return err;
		}
	}
	return 0;
}

/*
 * The index of the node @host:@port, added when new. A full table reuses
 * a node that serves no slot and is no seed. Return: the index, or
 * RC_NONE when there is no room.
 */
static uint32_t node_get(struct rcluster *c, const char *host, size_t hlen,
			 int port)
{
	struct rc_node *nd;
	uint32_t i;

	if (!hlen || hlen >= RC_HOST_MAX || port <= 0 || port > 65535)
		return RC_NONE;
	for (i = 0; i < c->nnodes; i++)
		if (c->node[i].port == port &&
		    strlen(c->node[i].host) == hlen &&
		    !memcmp(c->node[i].host, host, hlen))
			return i;
	if (c->nnodes < RCLUSTER_MAX_NODES) {
		nd = realloc(c->node, (c->nnodes + 1) * sizeof(*nd));
		if (!nd)
			return RC_NONE;
		c->node = nd;
		i = c->nnodes++;
	} else {
		for (i = 0; i < c->nnodes; i++)
			if (!c->node[i].slots && !c->node[i].seed &&
			    !c->node[i].busy && i != c->prefer)
				break;
		if (i == c->nnodes)
			return RC_NONE;
		node_drop(&c->node[i]);
	}
	nd = &c->node[i];
	memset(nd, 0, sizeof(*nd));
	memcpy(nd->host, host, hlen);
	nd->port = port;
	return i;
}

/*
 * Parse "host:port" of @len bytes (a seed, or a redirect's target), the
 * port after the last ':'; "[v6]:port" too. An empty host is @dflt's.
 * Return: the node's index, or RC_NONE.
 */
static uint32_t node_parse(struct rcluster *c, const char *s, size_t len,
			   const struct rc_node *dflt)
{
	char dhost[RC_HOST_MAX];
	const char *colon = NULL;
	size_t i, hlen;
	long port = 0;

	for (i = 0; i < len; i++)
		if (s[i] == ':')
			colon = s + i;
	if (!colon || colon == s + len - 1 || s + len - colon > 6)
		return RC_NONE;
	for (i = (size_t)(colon - s) + 1; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return RC_NONE;
		port = port * 10 + (s[i] - '0');
	}
	hlen = (size_t)(colon - s);
	if (hlen >= 2 && s[0] == '[' && s[hlen - 1] == ']') {
		s++;
		hlen -= 2;
	}
	/* node_get() may move the table @dflt is in. */
	if (!hlen && dflt) {
		snprintf(dhost, sizeof(dhost), "%s", dflt->host);
		return node_get(c, dhost, strlen(dhost), (int)port);
	}
	return node_get(c, s, hlen, (int)port);
}

/* Recount what each node serves after a change of the map. */
static void map_count(struct rcluster *c)
{
	uint32_t i;

	for (i = 0; i < c->nnodes; i++)
		c->node[i].slots = 0;
	for (i = 0; i < RCLUSTER_SLOTS; i++)
		if (c->map[i] != RC_NONE)
			c->node[c->map[i]].slots++;
}

/* A node of CLUSTER SLOTS: [host, port, id?, ...]. */
static int slots_node(struct rcluster *c, const redisReply *r,
		      const struct rc_node *from, uint32_t *idx)
{
	const redisReply *h, *p;

	if (r->type != REDIS_REPLY_ARRAY || r->elements < 2)
		return -EPROTO;
	h = r->element[0];
	p = r->element[1];
	if (h->type != REDIS_REPLY_STRING || p->type != REDIS_REPLY_INTEGER ||
	    p->integer <= 0 || p->integer > 65535 || h->len >= RC_HOST_MAX)
		return -EPROTO;
	/* "?": the node does not know its endpoint; "": the node asked. */
	if (h->len == 1 && h->str[0] == '?') {
		*idx = RC_NONE;
		return 0;
	}
	if (!h->len)
		*idx = node_get(c, from->host, strlen(from->host),
				(int)p->integer);
	else
		*idx = node_get(c, h->str, h->len, (int)p->integer);
	return *idx == RC_NONE ? -ENOMEM : 0;
}

/*
 * Load the map from CLUSTER SLOTS of node @i into c->map. Return: 0 or
 * -errno, with why in @why.
 */
static int map_load_from(struct rcluster *c, uint32_t i, char *why, size_t len)
{
	static const char *const argv[2] = { "CLUSTER", "SLOTS" };
	static const size_t argvlen[2] = { 7, 5 };
	const redisReply *e;
	redisReply *r;
	struct rc_node from;
	uint32_t owner, covered = 0;
	size_t k, j;
	long long s;
	int err;

	err = node_connect(c, &c->node[i], why, len);
	if (err)
		return err;
	errno = 0;
	r = redisCommandArgv(c->node[i].ctx, 2, (const char **)argv, argvlen);
	if (!r) {
		err = ctx_err(c, c->node[i].ctx, errno);
		snprintf(why, len, "%s:%d: CLUSTER SLOTS: %s", c->node[i].host,
			 c->node[i].port, c->node[i].ctx->errstr);
		node_drop(&c->node[i]);
		return err;
	}
	c->st.bytes_out += resp_cmd_len(2, argvlen);
	c->st.bytes_in += resp_reply_len(r, 0);
	/* node_get() may move the table: work from a copy of the asked. */
	from = c->node[i];
	snprintf(why, len, "%s:%d: CLUSTER SLOTS: ", from.host, from.port);
	if (r->type == REDIS_REPLY_ERROR) {
		err = err_is(r, "NOPERM") || err_is(r, "NOAUTH") ? -EACCES
								 : -EPROTO;
		snprintf(why + strlen(why), len - strlen(why), "%.*s",
			 (int)(r->len > 200 ? 200 : r->len), r->str);
		goto out;
	}
	err = -EPROTO;
	if (r->type != REDIS_REPLY_ARRAY) {
		snprintf(why + strlen(why), len - strlen(why),
			 "reply of type %d, not an array", r->type);
		goto out;
	}
	for (k = 0; k < RCLUSTER_SLOTS; k++)
		c->next[k] = RC_NONE;
	for (k = 0; k < r->elements; k++) {
		e = r->element[k];
		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
		    e->element[0]->type != REDIS_REPLY_INTEGER ||
		    e->element[1]->type != REDIS_REPLY_INTEGER ||
		    e->element[0]->integer < 0 ||
		    e->element[1]->integer >= RCLUSTER_SLOTS ||
		    e->element[0]->integer > e->element[1]->integer) {
			snprintf(why + strlen(why), len - strlen(why),
				 "entry %zu is not [start, end, node...]", k);
			goto out;
		}
		for (j = 2; j < e->elements; j++) {
			err = slots_node(c, e->element[j], &from, &owner);
			if (err) {
				snprintf(why + strlen(why), len - strlen(why),
					 "entry %zu: bad node %zu", k, j - 2);
				goto out;
			}
			if (j > 2 || owner == RC_NONE)
				continue;
			for (s = e->element[0]->integer;
			     s <= e->element[1]->integer; s++)
				c->next[s] = (uint16_t)owner;
		}
	}
	for (k = 0; k < RCLUSTER_SLOTS; k++)
		covered += c->next[k] != RC_NONE;
	err = -EPROTO;
	if (!covered) {
		snprintf(why + strlen(why), len - strlen(why),
			 "the map covers no slot");
		goto out;
	}
	memcpy(c->map, c->next, sizeof(c->map));
	map_count(c);
	c->st.refreshes++;
	err = 0;
	why[0] = 0;
out:
	freeReplyObject(r);
	return err;
}

/*
 * Load the map from the first node that gives one: the preferred one, then
 * the connected, the others, and last those that gave trouble in this
 * batch (a stopped node costs a timeout). Return: 0, or the last node's
 * error, with why.
 */
static int map_load(struct rcluster *c, char *why, size_t len)
{
	uint32_t i, round, tried = RC_NONE;
	int err = -EHOSTUNREACH;

	snprintf(why, len, "no node to ask for the slot map");
	if (c->prefer < c->nnodes && !c->node[c->prefer].failed) {
		tried = c->prefer;
		err = map_load_from(c, tried, why, len);
		if (!err)
			return 0;
		c->node[tried].failed = 1;
	}
	for (round = 0; round < 3; round++) {
		for (i = 0; i < c->nnodes; i++) {
			const struct rc_node *nd = &c->node[i];

			if (i == tried)
				continue;
			if (round == 0 && (nd->failed || !nd->ctx))
				continue;
			if (round == 1 && (nd->failed || nd->ctx))
				continue;
			if (round == 2 && !nd->failed)
				continue;
			err = map_load_from(c, i, why, len);
			if (!err)
				return 0;
			c->node[i].failed = 1;
		}
	}
	return err;
}

/* Block SIGPIPE in this thread; see the top comment. */
static void sigpipe_block(sigset_t *old, int *was_pending)
{
	sigset_t set, pend;

	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, old);
	sigpending(&pend);
	*was_pending = sigismember(&pend, SIGPIPE);
}

static void sigpipe_restore(const sigset_t *old, int was_pending)
{
	static const struct timespec zero;
	sigset_t set, pend;

	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	sigpending(&pend);
	if (!was_pending && sigismember(&pend, SIGPIPE))
		sigtimedwait(&set, NULL, &zero);
	pthread_sigmask(SIG_SETMASK, old, NULL);
}

static char *dup_opt(const char *s, int *err)
{
	char *d;

	if (!s)
		return NULL;
	d = strdup(s);
	if (!d)
		*err = -ENOMEM;
	return d;
}

int rcluster_open(const struct rcluster_opts *o, struct rcluster **out,
		  char *why, size_t len)
{
	struct rcluster *c;
	const char *s, *end;
	sigset_t old;
	int err = 0, was_pending;
	uint32_t i;

	*out = NULL;
	if (!o || !o->seeds || !*o->seeds || o->timeout_ms <= 0 ||
	    o->retries < 0 || (o->user && !o->password)) {
		snprintf(why, len,
			 "bad options: seeds, a timeout > 0, "
			 "retries >= 0 and a password with a user "
			 "are needed");
		return -EINVAL;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(why, len, "no memory for the client");
		return -ENOMEM;
	}
	c->prefer = RC_NONE;
	c->tv.tv_sec = o->timeout_ms / 1000;
	c->tv.tv_usec = (o->timeout_ms % 1000) * 1000;
	c->retries = o->retries;
	c->user = dup_opt(o->user, &err);
	c->password = dup_opt(o->password, &err);
	if (err) {
		snprintf(why, len, "no memory for the client");
		goto err_client;
	}
	for (i = 0; i < RCLUSTER_SLOTS; i++)
		c->map[i] = RC_NONE;
	for (s = o->seeds; *s; s = *end ? end + 1 : end) {
		end = strchr(s, ',');
		if (!end)
			end = s + strlen(s);
		while (s < end && *s == ' ')
			s++;
		i = node_parse(c, s, (size_t)(end - s), NULL);
		if (i == RC_NONE) {
			err = -EINVAL;
			snprintf(why, len, "seed \"%.*s\" is not host:port",
				 (int)(end - s > 200 ? 200 : end - s), s);
			goto err_client;
		}
		c->node[i].seed = 1;
	}
	sigpipe_block(&old, &was_pending);
	err = map_load(c, why, len);
	sigpipe_restore(&old, was_pending);
	if (err)
		goto err_client;
	for (i = 0; i < c->nnodes; i++)
		c->node[i].failed = 0;
	*out = c;
	return 0;

err_client:
	rcluster_close(c);
	return err;
}

void rcluster_close(struct rcluster *c)
{
	uint32_t i;

	if (!c)
		return;
	for (i = 0; i < c->nnodes; i++)
		node_drop(&c->node[i]);
	free(c->node);
	free(c->user);
	free(c->password);
	free(c);
}

/* Append @q's command to @ctx. Return: 0 or -ENOMEM. */
static int req_append(struct rcluster *c, redisContext *ctx,
		      const struct rcluster_req *q)
{
	const char *argv[6];
	size_t argvlen[6];
	char ttl[16], end[24];
	int argc = 0;

	switch (q->op) {
	case RC_GET:
		argv[argc] = q->max ? "GETRANGE" : "GET";
		argvlen[argc++] = q->max ? 8 : 3;
		break;
	case RC_EXISTS:
		argv[argc] = "EXISTS";
		argvlen[argc++] = 6;
		break;
	case RC_DEL:
		argv[argc] = "DEL";
		argvlen[argc++] = 3;
		break;
	default:
		argv[argc] = "SET";
		argvlen[argc++] = 3;
		break;
	}
	argv[argc] = q->keylen ? q->key : "";
	argvlen[argc++] = q->keylen;
	if (q->op == RC_GET && q->max) {
		argv[argc] = "0";
		argvlen[argc++] = 1;
		argv[argc] = end;
		argvlen[argc++] =
			(size_t)snprintf(end, sizeof(end), "%zu", q->max);
	}
	if (q->op == RC_SET || q->op == RC_SETNX || q->op == RC_SETXX) {
		argv[argc] = q->vlen ? q->val : "";
		argvlen[argc++] = q->vlen;
		if (q->op != RC_SET) {
			argv[argc] = q->op == RC_SETNX ? "NX" : "XX";
			argvlen[argc++] = 2;
		}
		if (q->ttl_s) {
			argv[argc] = "EX";
			argvlen[argc++] = 2;
			argv[argc] = ttl;
			argvlen[argc++] = (size_t)snprintf(ttl, sizeof(ttl),
							   "%u", q->ttl_s);
		} else if (q->op == RC_SETXX) {
			argv[argc] = "KEEPTTL";
			argvlen[argc++] = 7;
		}
	}
	if (redisAppendCommandArgv(ctx, argc, argv, argvlen) != REDIS_OK)
		return -ENOMEM;
	c->st.bytes_out += resp_cmd_len(argc, argvlen);
	return 0;
}

/* The status of a request from its reply, when the reply is no error. */
static int req_result(struct rcluster_req *q, const redisReply *r)
{
	switch (q->op) {
	case RC_GET:
		if (r->type == REDIS_REPLY_NIL)
			return -ENOENT;
		if (r->type != REDIS_REPLY_STRING)
			return -EPROTO;
		/* GETRANGE of a missing key is the empty string. */
		if (q->max && !r->len)
			return -ENOENT;
		if (q->max && r->len > q->max + 1)
			return -EPROTO;
		if (r->len > RCLUSTER_MAX_VALUE)
			return -E2BIG;
		/* One byte more: malloc(0) may return NULL. */
		q->data = malloc(r->len + 1);
		if (!q->data)
			return -ENOMEM;
		memcpy(q->data, r->str, r->len);
		q->dlen = r->len;
		return 0;
	case RC_SET:
	case RC_SETNX:
	case RC_SETXX:
		if (r->type == REDIS_REPLY_NIL && q->op != RC_SET)
			return q->op == RC_SETNX ? -EEXIST : -ENOENT;
		if (r->type == REDIS_REPLY_STATUS && r->len == 2 &&
		    !memcmp(r->str, "OK", 2))
			return 0;
		return -EPROTO;
	case RC_EXISTS:
	case RC_DEL:
		if (r->type != REDIS_REPLY_INTEGER ||
		    (r->integer != 0 && r->integer != 1))
			return -EPROTO;
		return r->integer ? 0 : -ENOENT;
	}
	return -EINVAL;
}

static void req_done(struct rcluster *c, struct rcluster_req *q,
		     struct rc_work *w, int status)
{
	q->status = status;
	w->pending = 0;
	if (status && status != -ENOENT && status != -EEXIST)
		c->st.errors++;
}

/*
 * What an error reply means for request @q sent to node @ni: done with a
 * status, or redirected or to retry. Return: RC_REFRESH | RC_BACKOFF
 * flags for the next pass.
 */
static int req_error(struct rcluster *c, uint32_t ni, struct rcluster_req *q,
		     struct rc_work *w, const redisReply *r)
{
	const char *p, *sp;
	long slot = 0;
	uint32_t to;
	int moved = err_is(r, "MOVED");

	if (moved || err_is(r, "ASK")) {
		/* "MOVED 3999 127.0.0.1:6381": the slot, then the node. */
		p = r->str + (moved ? 6 : 4);
		sp = memchr(p, ' ', r->len - (size_t)(p - r->str));
		if (!sp || sp == p || sp - p > 5)
			goto proto;
		for (; p < sp; p++) {
			if (*p < '0' || *p > '9')
				goto proto;
			slot = slot * 10 + (*p - '0');
		}
		if (slot >= (long)RCLUSTER_SLOTS ||
		    (unsigned int)slot != rcluster_slot(q->key, q->keylen))
			goto proto;
		to = node_parse(c, sp + 1, r->len - (size_t)(sp + 1 - r->str),
				&c->node[ni]);
		if (to == RC_NONE)
			goto proto;
		w->err = -EIO;
		if (!moved) {
			c->st.ask++;
			w->ask = (uint16_t)to;
			return 0;
		}
		c->st.moved++;
		if (c->map[slot] != RC_NONE)
			c->node[c->map[slot]].slots--;
		c->map[slot] = (uint16_t)to;
		c->node[to].slots++;
		c->prefer = to;
		return RC_REFRESH;
	}
	if (err_is(r, "TRYAGAIN") || err_is(r, "CLUSTERDOWN") ||
	    err_is(r, "LOADING") || err_is(r, "MASTERDOWN") ||
	    err_is(r, "READONLY")) {
		w->err = -EIO;
		return RC_REFRESH | RC_BACKOFF;
	}
	if (err_is(r, "NOPERM") || err_is(r, "NOAUTH") ||
	    err_is(r, "WRONGPASS"))
		req_done(c, q, w, -EACCES);
	else if (err_is(r, "OOM"))
		req_done(c, q, w, -ENOMEM);
	else
		goto proto;
	return 0;
proto:
	req_done(c, q, w, -EPROTO);
	return 0;
}

/*
 * Read one reply of @nd's pipeline. Return: 0 with *@out set, or the
 * connection's error, the connection dropped.
 */
static int node_reply(struct rcluster *c, struct rc_node *nd, redisReply **out)
{
	void *r = NULL;
	int err;

	errno = 0;
	if (redisGetReply(nd->ctx, &r) != REDIS_OK || !r) {
		err = nd->ctx->err ? ctx_err(c, nd->ctx, errno) : -EIO;
		node_drop(nd);
		return err;
	}
	c->st.bytes_in += resp_reply_len(r, 0);
	*out = r;
	return 0;
}

/*
 * One pass over node @ni: its requests appended, then their replies read
 * in the same order. Return: RC_* flags for the next pass.
 */
static int node_pass(struct rcluster *c, uint32_t ni, struct rcluster_req *reqs,
		     struct rc_work *w, size_t n)
{
	static const char *const asking[1] = { "ASKING" };
	static const size_t askinglen[1] = { 6 };
	redisReply *r;
	char why[256];
	int flags = 0, err = 0;
	size_t i;

	/* req_error() may add nodes, moving the table: no pointer into it. */
	err = node_connect(c, &c->node[ni], why, sizeof(why));
	for (i = 0; !err && i < n; i++) {
		if (!w[i].pending || w[i].node != ni)
			continue;
		if (w[i].ask != RC_NONE) {
			if (redisAppendCommandArgv(c->node[ni].ctx, 1,
						   (const char **)asking,
						   askinglen) != REDIS_OK) {
				err = -ENOMEM;
				break;
			}
			c->st.bytes_out += resp_cmd_len(1, askinglen);
		}
		err = req_append(c, c->node[ni].ctx, &reqs[i]);
		/* Nothing was sent yet: what was appended goes with it. */
		if (err)
			node_drop(&c->node[ni]);
		else
			w[i].sent = 1;
	}
	for (i = 0; !err && i < n; i++) {
		if (!w[i].sent || w[i].node != ni)
			continue;
		if (w[i].ask != RC_NONE) {
			/* The command's own reply says whether it helped. */
			w[i].ask = RC_NONE;
			err = node_reply(c, &c->node[ni], &r);
			if (err)
				break;
			freeReplyObject(r);
		}
		err = node_reply(c, &c->node[ni], &r);
		if (err)
			break;
		w[i].sent = 0;
		if (r->type == REDIS_REPLY_ERROR)
			flags |= req_error(c, ni, &reqs[i], &w[i], r);
		else
			req_done(c, &reqs[i], &w[i], req_result(&reqs[i], r));
		freeReplyObject(r);
	}
	if (!err)
		return flags;
	/*
	 * Every request of the node not answered waits for the next pass;
	 * but a refused AUTH will be refused again.
	 */
	c->node[ni].failed = 1;
	for (i = 0; i < n; i++) {
		if (!w[i].pending || w[i].node != ni)
			continue;
		w[i].err = err;
		w[i].sent = 0;
		w[i].ask = RC_NONE;
		if (err == -EACCES)
			req_done(c, &reqs[i], &w[i], err);
	}
	return flags | RC_REFRESH | RC_BACKOFF;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* Check each request; those that cannot be sent are done at once. */
static void exec_prepare(struct rcluster *c, struct rcluster_req *reqs,
			 struct rc_work *w, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		struct rcluster_req *q = &reqs[i];

		q->data = NULL;
		q->dlen = 0;
		w[i].pending = 1;
		w[i].sent = 0;
		w[i].ask = RC_NONE;
		w[i].err = -EHOSTUNREACH;
		c->st.requests++;
		if ((unsigned int)q->op > RC_DEL)
			req_done(c, q, &w[i], -EINVAL);
		else if (!q->key && q->keylen)
			req_done(c, q, &w[i], -EINVAL);
		else if (q->op >= RC_SET && q->op <= RC_SETXX && !q->val &&
			 q->vlen)
			req_done(c, q, &w[i], -EINVAL);
		else if (q->keylen > RCLUSTER_MAX_VALUE ||
			 (q->op >= RC_SET && q->op <= RC_SETXX &&
			  q->vlen > RCLUSTER_MAX_VALUE))
			req_done(c, q, &w[i], -E2BIG);
	}
}

/* Route the pending requests. Return: RC_* flags (a slot nobody serves). */
static int exec_route(struct rcluster *c, struct rcluster_req *reqs,
		      struct rc_work *w, size_t n)
{
	int flags = 0;
	size_t i;

	for (i = 0; i < c->nnodes; i++)
		c->node[i].busy = 0;
	for (i = 0; i < n; i++) {
		if (!w[i].pending)
			continue;
		if (w[i].ask != RC_NONE)
			w[i].node = w[i].ask;
		else
			w[i].node = c->map[rcluster_slot(reqs[i].key,
							 reqs[i].keylen)];
		if (w[i].node == RC_NONE) {
			w[i].err = -EHOSTUNREACH;
			flags |= RC_REFRESH | RC_BACKOFF;
			continue;
		}
		c->node[w[i].node].busy = 1;
	}
	return flags;
}

int rcluster_exec(struct rcluster *c, struct rcluster_req *reqs, size_t n)
{
	struct rc_work *w;
	sigset_t old;
	char why[256];
	size_t i, left;
	int pass, flags, was_pending;
	long backoff = RC_BACKOFF_MS;
	long tmo = c->tv.tv_sec * 1000L + c->tv.tv_usec / 1000;

	if (!n)
		return 0;
	if (!reqs)
		return -EINVAL;
	w = calloc(n, sizeof(*w));
	if (!w)
		return -ENOMEM;
	exec_prepare(c, reqs, w, n);
	sigpipe_block(&old, &was_pending);
	for (i = 0; i < c->nnodes; i++)
		c->node[i].failed = 0;
	for (pass = 0;; pass++) {
		flags = exec_route(c, reqs, w, n);
		for (i = 0; i < c->nnodes; i++)
			if (c->node[i].busy)
				flags |= node_pass(c, (uint32_t)i, reqs, w, n);
		for (left = 0, i = 0; i < n; i++)
			left += w[i].pending;
		if (!left)
			break;
		if (pass == c->retries) {
			for (i = 0; i < n; i++)
				if (w[i].pending)
					req_done(c, &reqs[i], &w[i], w[i].err);
			break;
		}
		c->st.retries++;
		if (flags & RC_REFRESH)
			map_load(c, why, sizeof(why));
		if (flags & RC_BACKOFF) {
			sleep_ms(backoff < tmo ? backoff : tmo);
			backoff *= 2;
		}
	}
	sigpipe_restore(&old, was_pending);
	free(w);
	return 0;
}

void rcluster_stats(const struct rcluster *c, struct rcluster_stats *out)
{
	uint32_t i;

	*out = c->st;
	out->masters = 0;
	out->nodes_connected = 0;
	for (i = 0; i < c->nnodes; i++) {
		out->masters += c->node[i].slots > 0;
		out->nodes_connected += c->node[i].ctx != NULL;
	}
}

int rcluster_describe(const struct rcluster *c, char *buf, size_t len)
{
	size_t off = 0;
	uint32_t i;
	int k;

	if (len)
		buf[0] = 0;
	for (i = 0; i < c->nnodes; i++) {
		const struct rc_node *nd = &c->node[i];

		if (!nd->slots)
			continue;
		k = snprintf(off < len ? buf + off : NULL,
			     off < len ? len - off : 0,
			     "%s:%d slots=%u connected=%d\n", nd->host,
			     nd->port, nd->slots, nd->ctx != NULL);
		if (k < 0)
			return k;
		off += (size_t)k;
	}
	return off > INT_MAX ? INT_MAX : (int)off;
}
