/* SPDX-License-Identifier: MIT */
/*
 * check_rcluster.c - the Redis Cluster client against a real cluster
 *
 * Each tcase with a cluster starts its own (3 masters, 3 replicas;
 * tools/redis-cluster.h) in an unchecked fixture; its tests share it in
 * order, so a test that moves a slot leaves it moved for the next. What a test
 * asserts comes from the servers through redis-cli (CLUSTER KEYSLOT,
 * DBSIZE, CLUSTER NODES, TTL), not from the client under test. Where the
 * machine has no redis-server, the tests print SKIP and return.
 *
 * The failover tcase stops a master (SIGSTOP, for less than the cluster's
 * 2 s node timeout, so no failover starts) and then kills one.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../daemon/rcluster.h"
#include "kvmem_check.h"
#include "redis_fixture.h"
#include "rng.h"

static struct redis_cluster rc;

static void cluster_up(void)
{
	cluster_fixture_up(&rc, 3, 1);
}

static void cluster_down(void)
{
	cluster_fixture_down(&rc);
}

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static struct rcluster *open_client(const char *seeds, int timeout_ms,
				    int retries)
{
	struct rcluster_opts o = { .seeds = seeds,
				   .timeout_ms = timeout_ms,
				   .retries = retries };
	struct rcluster *c = NULL;
	char why[256];
	int err = rcluster_open(&o, &c, why, sizeof(why));

	ck_assert_msg(err == 0, "rcluster_open(%s): %d: %s", seeds, err, why);
	return c;
}

/* One request through rcluster_exec(); its status. */
static int exec1(struct rcluster *c, struct rcluster_req *q,
		 enum rcluster_op op, const char *key, const void *val,
		 size_t vlen)
{
	memset(q, 0, sizeof(*q));
	q->op = op;
	q->key = key;
	q->keylen = strlen(key);
	q->val = val;
	q->vlen = vlen;
	ck_assert_int_eq(rcluster_exec(c, q, 1), 0);
	return q->status;
}

static unsigned int cli_keyslot(const char *key)
{
	char out[64];

	ck_assert_int_eq(redis_cluster_cli(&rc, 0, out, sizeof(out), "CLUSTER",
					   "KEYSLOT", key, NULL),
			 0);
	return (unsigned int)strtoul(out, NULL, 10);
}

START_TEST(test_rcluster_slot)
{
	static const char *const keys[] = {
		"",
		"foo",
		"bar",
		"123456789",
		"{user1000}.following",
		"{user1000}.followers",
		"foo{}{bar}",
		"foo{{bar}}zap",
		"{bar",
		"a{b}c{d}",
		"}{x}",
		"{}",
		"kvmem:1:u1:x{a}",
	};
	unsigned int i;

	/* The specification's check value: CRC16-XMODEM("123456789"). */
	ck_assert_uint_eq(rcluster_slot("123456789", 9), 0x31c3);
	ck_assert_uint_eq(rcluster_slot("{user1000}.following", 20),
			  rcluster_slot("{user1000}.followers", 20));
	ck_assert_uint_eq(rcluster_slot("{user1000}.following", 20),
			  rcluster_slot("user1000", 8));
	ck_assert_uint_ne(rcluster_slot("foo{}{bar}", 10),
			  rcluster_slot("bar", 3));
	ck_assert_uint_eq(rcluster_slot("foo{{bar}}zap", 13),
			  rcluster_slot("{bar", 4));
	/* A NUL is a byte of the key like any other. */
	ck_assert_uint_ne(rcluster_slot("a\0b", 3), rcluster_slot("a", 1));
	NEED_CLUSTER();
	for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		ck_assert_msg(rcluster_slot(keys[i], strlen(keys[i])) ==
				      cli_keyslot(keys[i]),
			      "\"%s\": %u, the server says %u", keys[i],
			      rcluster_slot(keys[i], strlen(keys[i])),
			      cli_keyslot(keys[i]));
}
END_TEST

#define NKEYS 2000
#define BIG (1u << 20)

START_TEST(test_rcluster_batch)
{
	struct rcluster_req *q = kvmem_check_xmalloc(NKEYS * sizeof(*q));
	char(*key)[48] = kvmem_check_xmalloc(NKEYS * sizeof(*key));
	uint8_t **val = kvmem_check_xmalloc(NKEYS * sizeof(*val));
	size_t *vlen = kvmem_check_xmalloc(NKEYS * sizeof(*vlen));
	struct rcluster_stats st;
	struct kvmem_rng rng;
	struct rcluster *c;
	long long total = 0, n;
	char out[4096];
	unsigned int i;
	int m;

	NEED_CLUSTER();
	c = open_client(rc.seeds, 2000, 5);
	kvmem_rng_seed(&rng, 0x5eed);
	for (i = 0; i < NKEYS; i++) {
		snprintf(key[i], sizeof(key[i]), "kvmem:t:{%u}:%u", i % 97, i);
		vlen[i] = i == 7 ? BIG : (size_t)kvmem_rng_below(&rng, 1500);
		val[i] = kvmem_check_xmalloc(vlen[i]);
		kvmem_check_fill_random(&rng, val[i], vlen[i]);
		if (vlen[i] > 2)
			val[i][1] = 0;
	}
	/* SETNX all, then again: stored, then found. */
	for (int pass = 0; pass < 2; pass++) {
		memset(q, 0, NKEYS * sizeof(*q));
		for (i = 0; i < NKEYS; i++) {
			q[i].op = RC_SETNX;
			q[i].key = key[i];
			q[i].keylen = strlen(key[i]);
			q[i].val = val[i];
			q[i].vlen = vlen[i];
		}
		ck_assert_int_eq(rcluster_exec(c, q, NKEYS), 0);
		for (i = 0; i < NKEYS; i++)
			EXPECT_EQ(q[i].status, pass ? -EEXIST : 0,
				  "SETNX %s, pass %d", key[i], pass);
	}
	/* Every master holds some, and they hold all. */
	for (m = 0; m < rc.masters; m++) {
		ck_assert_int_eq(redis_cluster_cli(&rc, m, out, sizeof(out),
						   "DBSIZE", NULL),
				 0);
		n = atoll(out);
		ck_assert_msg(n > 0, "master %d holds %lld keys", m, n);
		total += n;
	}
	ck_assert_int_eq(total, NKEYS);
	/* GET: bit-exact, the 1 MiB value too. */
	memset(q, 0, NKEYS * sizeof(*q));
	for (i = 0; i < NKEYS; i++) {
		q[i].op = RC_GET;
		q[i].key = key[i];
		q[i].keylen = strlen(key[i]);
	}
	ck_assert_int_eq(rcluster_exec(c, q, NKEYS), 0);
	for (i = 0; i < NKEYS; i++) {
		EXPECT_EQ(q[i].status, 0, "GET %s", key[i]);
		EXPECT_EQ(q[i].dlen, vlen[i], "GET %s", key[i]);
		EXPECT_MEM(q[i].data, val[i], vlen[i], "GET %s", key[i]);
		free(q[i].data);
	}
	/* EXISTS, DEL, then EXISTS, GET and DEL find nothing. */
	for (int op = 0; op < 5; op++) {
		static const enum rcluster_op ops[5] = { RC_EXISTS, RC_DEL,
							 RC_EXISTS, RC_GET,
							 RC_DEL };
		memset(q, 0, NKEYS * sizeof(*q));
		for (i = 0; i < NKEYS; i++) {
			q[i].op = ops[op];
			q[i].key = key[i];
			q[i].keylen = strlen(key[i]);
		}
		ck_assert_int_eq(rcluster_exec(c, q, NKEYS), 0);
		for (i = 0; i < NKEYS; i++) {
			EXPECT_EQ(q[i].status, op < 2 ? 0 : -ENOENT,
				  "op %d of %s", op, key[i]);
			EXPECT(q[i].data == NULL, "op %d of %s", op, key[i]);
		}
	}
	for (m = 0; m < rc.masters; m++) {
		redis_cluster_cli(&rc, m, out, sizeof(out), "DBSIZE", NULL);
		ck_assert_str_eq(out, "0");
	}
	rcluster_stats(c, &st);
	ck_assert_uint_eq(st.masters, 3);
	ck_assert_uint_eq(st.requests, 8 * NKEYS);
	ck_assert_uint_eq(st.errors, 0);
	ck_assert_uint_gt(st.bytes_out, BIG);
	ck_assert_uint_gt(st.bytes_in, BIG);
	ck_assert_uint_ge(st.refreshes, 1);
	for (i = 0; i < NKEYS; i++)
		free(val[i]);
	free(val);
	free(vlen);
	free(key);
	free(q);
	rcluster_close(c);
}
END_TEST

/* SET with a TTL, SETXX keeps it (KEEPTTL), SETXX on no key, E2BIG. */
START_TEST(test_rcluster_set_ttl)
{
	struct rcluster_req q;
	struct rcluster *c;
	char out[64];
	int node;

	NEED_CLUSTER();
	c = open_client(rc.seeds, 2000, 5);
	memset(&q, 0, sizeof(q));
	ck_assert_int_eq(exec1(c, &q, RC_SETXX, "kvmem:ttl", "a", 1), -ENOENT);
	q.op = RC_SET;
	q.ttl_s = 100;
	ck_assert_int_eq(rcluster_exec(c, &q, 1), 0);
	ck_assert_int_eq(q.status, 0);
	ck_assert_int_eq(exec1(c, &q, RC_SETXX, "kvmem:ttl", "bb", 2), 0);
	node = redis_cluster_slot_owner(&rc, rcluster_slot("kvmem:ttl", 9));
	ck_assert_int_ge(node, 0);
	redis_cluster_cli(&rc, node, out, sizeof(out), "TTL", "kvmem:ttl",
			  NULL);
	ck_assert_msg(atoi(out) > 0 && atoi(out) <= 100, "TTL %s", out);
	redis_cluster_cli(&rc, node, out, sizeof(out), "GET", "kvmem:ttl",
			  NULL);
	ck_assert_str_eq(out, "bb");
	/* Refused before anything is sent: the value is never read. */
	ck_assert_int_eq(
		exec1(c, &q, RC_SET, "kvmem:big", "x", RCLUSTER_MAX_VALUE + 1),
		-E2BIG);
	rcluster_close(c);
}
END_TEST

/* A GET with a limit reads no more than the limit and a byte: a value
 * longer than the caller takes costs it nothing more. */
START_TEST(test_rcluster_get_at_most)
{
	static char big[100000];
	struct rcluster_req q;
	struct rcluster *c;
	size_t i;

	NEED_CLUSTER();
	c = open_client(rc.seeds, 2000, 5);
	for (i = 0; i < sizeof(big); i++)
		big[i] = (char)(i * 7 + 3);
	ck_assert_int_eq(exec1(c, &q, RC_SET, "kvmem:max", big, sizeof(big)),
			 0);
	memset(&q, 0, sizeof(q));
	q.op = RC_GET;
	q.key = "kvmem:max";
	q.keylen = 9;
	q.max = 1000;
	ck_assert_int_eq(rcluster_exec(c, &q, 1), 0);
	ck_assert_int_eq(q.status, 0);
	ck_assert_uint_eq(q.dlen, 1001);
	EXPECT_MEM(q.data, big, 1001, "%s", "the first 1001 bytes");
	free(q.data);
	/* A limit the value is within: all of it. */
	q.data = NULL;
	q.max = sizeof(big);
	ck_assert_int_eq(rcluster_exec(c, &q, 1), 0);
	ck_assert_int_eq(q.status, 0);
	ck_assert_uint_eq(q.dlen, sizeof(big));
	EXPECT_MEM(q.data, big, sizeof(big), "%s", "the whole value");
	free(q.data);
	/* No such key: a miss, as without a limit. */
	q.data = NULL;
	q.key = "kvmem:max-none";
	q.keylen = 14;
	q.max = 1000;
	ck_assert_int_eq(rcluster_exec(c, &q, 1), 0);
	ck_assert_int_eq(q.status, -ENOENT);
	ck_assert_ptr_null(q.data);
	rcluster_close(c);
}
END_TEST

/* Tell every master that @slot is node @dst's, @dst first (spec). */
static void slot_assign(unsigned int slot, int dst)
{
	char s[16], out[256];
	int i;

	snprintf(s, sizeof(s), "%u", slot);
	redis_cluster_cli(&rc, dst, out, sizeof(out), "CLUSTER", "SETSLOT", s,
			  "NODE", rc.node[dst].id, NULL);
	ck_assert_str_eq(out, "OK");
	for (i = 0; i < rc.nnodes; i++) {
		if (i == dst || !rc.node[i].master)
			continue;
		redis_cluster_cli(&rc, i, out, sizeof(out), "CLUSTER",
				  "SETSLOT", s, "NODE", rc.node[dst].id, NULL);
		ck_assert_msg(!strcmp(out, "OK"), "SETSLOT on %d: %s", i, out);
	}
}

/*
 * Start moving @slot from node @src to node @dst as redis-cli --cluster
 * reshard does: IMPORTING, MIGRATING, then its keys.
 */
static void migrate_slot(unsigned int slot, int src, int dst)
{
	char s[16], port[16], out[4096], *k, *save = NULL;

	snprintf(s, sizeof(s), "%u", slot);
	snprintf(port, sizeof(port), "%d", rc.node[dst].port);
	redis_cluster_cli(&rc, dst, out, sizeof(out), "CLUSTER", "SETSLOT", s,
			  "IMPORTING", rc.node[src].id, NULL);
	ck_assert_str_eq(out, "OK");
	redis_cluster_cli(&rc, src, out, sizeof(out), "CLUSTER", "SETSLOT", s,
			  "MIGRATING", rc.node[dst].id, NULL);
	ck_assert_str_eq(out, "OK");
	redis_cluster_cli(&rc, src, out, sizeof(out), "CLUSTER",
			  "GETKEYSINSLOT", s, "1000", NULL);
	for (k = strtok_r(out, "\n", &save); k;
	     k = strtok_r(NULL, "\n", &save)) {
		char res[256];

		redis_cluster_cli(&rc, src, res, sizeof(res), "MIGRATE",
				  "127.0.0.1", port, k, "0", "5000", NULL);
		ck_assert_msg(!strcmp(res, "OK"), "MIGRATE %s: %s", k, res);
	}
}

/* A binary value of @len bytes, NULs in it, from @seed. */
static uint8_t *value(uint64_t seed, size_t len)
{
	uint8_t *v = kvmem_check_xmalloc(len);
	struct kvmem_rng rng;

	kvmem_rng_seed(&rng, seed);
	kvmem_check_fill_random(&rng, v, len);
	v[0] = 0;
	return v;
}

START_TEST(test_rcluster_moved)
{
	static const char key[] = "kvmem:moved:{m1}";
	unsigned int slot = rcluster_slot(key, strlen(key));
	uint8_t *v = value(1, 3000);
	struct rcluster_stats st;
	struct rcluster_req q;
	struct rcluster *c;
	char seed[32];
	int src, dst;

	NEED_CLUSTER();
	/* One seed: all the client knows comes from its map. */
	snprintf(seed, sizeof(seed), "127.0.0.1:%d", rc.node[0].port);
	c = open_client(seed, 2000, 5);
	ck_assert_int_eq(exec1(c, &q, RC_SET, key, v, 3000), 0);
	src = redis_cluster_slot_owner(&rc, slot);
	ck_assert_int_ge(src, 0);
	dst = (src + 1) % rc.masters;
	migrate_slot(slot, src, dst);
	slot_assign(slot, dst);
	ck_assert_int_eq(redis_cluster_slot_owner(&rc, slot), dst);

	ck_assert_int_eq(exec1(c, &q, RC_GET, key, NULL, 0), 0);
	ck_assert_uint_eq(q.dlen, 3000);
	EXPECT_MEM(q.data, v, 3000, "%s", key);
	free(q.data);
	rcluster_stats(c, &st);
	ck_assert_uint_ge(st.moved, 1);
	ck_assert_uint_eq(st.ask, 0);
	ck_assert_uint_ge(st.refreshes, 2);
	free(v);
	rcluster_close(c);
}
END_TEST

START_TEST(test_rcluster_ask)
{
	static const char key[] = "kvmem:ask:{k2}";
	unsigned int slot = rcluster_slot(key, strlen(key));
	uint8_t *v = value(2, 777);
	struct rcluster_stats st;
	struct rcluster_req q;
	struct rcluster *c;
	char seed[32];
	int src, dst;

	NEED_CLUSTER();
	snprintf(seed, sizeof(seed), "127.0.0.1:%d", rc.node[1].port);
	c = open_client(seed, 2000, 5);
	ck_assert_int_eq(exec1(c, &q, RC_SET, key, v, 777), 0);
	src = redis_cluster_slot_owner(&rc, slot);
	ck_assert_int_ge(src, 0);
	dst = (src + 2) % rc.masters;
	/* Mid-migration: the key is on the target, the slot the source's. */
	migrate_slot(slot, src, dst);
	ck_assert_int_eq(redis_cluster_slot_owner(&rc, slot), src);

	ck_assert_int_eq(exec1(c, &q, RC_GET, key, NULL, 0), 0);
	ck_assert_uint_eq(q.dlen, 777);
	EXPECT_MEM(q.data, v, 777, "%s", key);
	free(q.data);
	rcluster_stats(c, &st);
	ck_assert_uint_ge(st.ask, 1);
	ck_assert_uint_eq(st.moved, 0);
	/* Finish it: the slot is the target's from now on. */
	slot_assign(slot, dst);
	free(v);
	rcluster_close(c);
}
END_TEST

START_TEST(test_rcluster_acl)
{
	struct rcluster_opts o = { .seeds = rc.seeds,
				   .user = "t1",
				   .password = "pw1",
				   .timeout_ms = 2000,
				   .retries = 3 };
	struct rcluster_req q;
	struct rcluster_stats st;
	struct rcluster *c = NULL;
	char out[256], why[256];
	int i, err;

	NEED_CLUSTER();
	for (i = 0; i < rc.nnodes; i++) {
		redis_cluster_cli(&rc, i, out, sizeof(out), "ACL", "SETUSER",
				  "t1", "on", ">pw1", "~kvmem:1:u1:*", "+@all",
				  NULL);
		ck_assert_str_eq(out, "OK");
		redis_cluster_cli(&rc, i, out, sizeof(out), "ACL", "SETUSER",
				  "t2", "on", ">pw2", "~kvmem:1:u2:*", "+@all",
				  NULL);
		ck_assert_str_eq(out, "OK");
	}
	err = rcluster_open(&o, &c, why, sizeof(why));
	ck_assert_msg(err == 0, "open as t1: %d: %s", err, why);
	ck_assert_int_eq(exec1(c, &q, RC_SETNX, "kvmem:1:u1:x{a}", "v1", 2), 0);
	ck_assert_int_eq(exec1(c, &q, RC_SETNX, "kvmem:1:u2:x{a}", "v2", 2),
			 -EACCES);
	ck_assert_int_eq(exec1(c, &q, RC_GET, "kvmem:1:u2:x{a}", NULL, 0),
			 -EACCES);
	ck_assert_int_eq(exec1(c, &q, RC_GET, "kvmem:1:u1:x{a}", NULL, 0), 0);
	ck_assert_uint_eq(q.dlen, 2);
	ck_assert_int_eq(memcmp(q.data, "v1", 2), 0);
	free(q.data);
	rcluster_stats(c, &st);
	ck_assert_uint_eq(st.errors, 2);
	rcluster_close(c);

	o.password = "wrong";
	c = NULL;
	err = rcluster_open(&o, &c, why, sizeof(why));
	ck_assert_int_eq(err, -EACCES);
	ck_assert_ptr_null(c);
	ck_assert_msg(strstr(why, "AUTH") != NULL, "why: %s", why);
}
END_TEST

/* ---- servers that are no Redis -------------------------------------- */

struct fake {
	int fd; /* listening */
	int port;
	const char *const *script; /* one reply per command, NULL-ended */
	pthread_t thread;
};

/* Commands in @buf: lines that start with '*' (text keys only). */
static int count_cmds(const char *buf, size_t len)
{
	int n = 0;
	size_t i;

	for (i = 0; i < len; i++)
		n += buf[i] == '*' && (i == 0 || buf[i - 1] == '\n');
	return n;
}

static void *fake_serve(void *arg)
{
	struct fake *f = arg;
	const char *const *next = f->script;
	char buf[4096];
	ssize_t got;
	int fd, n;

	while ((fd = accept(f->fd, NULL, NULL)) >= 0) {
		while ((got = read(fd, buf, sizeof(buf))) > 0) {
			for (n = count_cmds(buf, (size_t)got); n > 0; n--) {
				const char *r =
					*next ? *next++ : "-ERR end\r\n";

				if (write(fd, r, strlen(r)) < 0)
					break;
			}
		}
		close(fd);
	}
	return NULL;
}

static void fake_start(struct fake *f, const char *const *script)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t alen = sizeof(a);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	f->script = script;
	f->fd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(f->fd, 0);
	ck_assert_int_eq(bind(f->fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(f->fd, 8), 0);
	getsockname(f->fd, (struct sockaddr *)&a, &alen);
	f->port = ntohs(a.sin_port);
	ck_assert_int_eq(pthread_create(&f->thread, NULL, fake_serve, f), 0);
}

static void fake_stop(struct fake *f)
{
	/* Wakes the thread's accept() with an error. */
	shutdown(f->fd, SHUT_RDWR);
	pthread_join(f->thread, NULL);
	close(f->fd);
}

START_TEST(test_rcluster_hostile_map)
{
	static const char *const garbage[] = {
		"+OK\r\n",
		"*1\r\n:5\r\n",
		":7\r\n",
		"$-1\r\n",
		"*0\r\n",
		"-ERR This instance has cluster support disabled\r\n",
		"*1\r\n*3\r\n:0\r\n:99999\r\n*2\r\n$9\r\n127.0.0.1\r\n:1\r\n",
		"*1\r\n*3\r\n:9\r\n:3\r\n*2\r\n$9\r\n127.0.0.1\r\n:1\r\n",
		"*1\r\n*3\r\n:0\r\n:10\r\n*2\r\n:1\r\n:1\r\n",
		"*1\r\n*3\r\n:0\r\n:10\r\n*2\r\n$9\r\n127.0.0.1\r\n:0\r\n",
		"*1\r\n*3\r\n:0\r\n:10\r\n*1\r\n$9\r\n127.0.0.1\r\n",
		"*1\r\n*2\r\n:0\r\n:10\r\n",
		"*1\r\n*3\r\n$1\r\n0\r\n:10\r\n*2\r\n$1\r\nh\r\n:1\r\n",
		"hello\r\n",
	};
	struct rcluster_opts o = { .timeout_ms = 1000, .retries = 1 };
	struct rcluster *c;
	char seed[32], why[256];
	unsigned int i;
	int err;

	for (i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++) {
		const char *script[2] = { garbage[i], NULL };
		struct fake f;

		fake_start(&f, script);
		snprintf(seed, sizeof(seed), "127.0.0.1:%d", f.port);
		o.seeds = seed;
		c = NULL;
		why[0] = 0;
		err = rcluster_open(&o, &c, why, sizeof(why));
		fake_stop(&f);
		ck_assert_msg(err == -EPROTO, "reply %u: %d (%s)", i, err, why);
		ck_assert_ptr_null(c);
		ck_assert_msg(why[0] != 0, "reply %u: no sentence", i);
	}
}
END_TEST

START_TEST(test_rcluster_hostile_replies)
{
	/*
	 * A map with all slots on this server, then a reply to the GET of
	 * "k" (slot 7629) and what it must come to.
	 */
	static const struct {
		const char *reply;
		int want;
	} replies[] = {
		{ ":5\r\n", -EPROTO },
		{ "*2\r\n$1\r\na\r\n$1\r\nb\r\n", -EPROTO },
		{ "+OK\r\n", -EPROTO },
		{ "-MOVED 99999 127.0.0.1:1\r\n", -EPROTO },
		{ "-MOVED 5 127.0.0.1:1\r\n", -EPROTO },
		{ "-MOVED 7629 127.0.0.1:notaport\r\n", -EPROTO },
		{ "-MOVED 7629 127.0.0.1:99999\r\n", -EPROTO },
		{ "-ASK x 127.0.0.1:1\r\n", -EPROTO },
		{ "-WRONGTYPE no\r\n", -EPROTO },
		{ "-NOPERM no\r\n", -EACCES },
		{ "-OOM command not allowed\r\n", -ENOMEM },
		{ "$-1\r\n", -ENOENT },
		{ "-CLUSTERDOWN The cluster is down\r\n", -EIO },
	};
	struct rcluster_opts o = { .timeout_ms = 1000, .retries = 0 };
	char seed[32], why[256], map[128];
	const char *script[3];
	struct rcluster_req q;
	struct rcluster *c;
	unsigned int i;
	int err;

	ck_assert_uint_eq(rcluster_slot("k", 1), 7629);
	for (i = 0; i < sizeof(replies) / sizeof(replies[0]); i++) {
		struct fake f;

		script[0] = map;
		script[1] = replies[i].reply;
		script[2] = NULL;
		fake_start(&f, script);
		snprintf(map, sizeof(map),
			 "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1"
			 "\r\n:%d\r\n",
			 f.port);
		snprintf(seed, sizeof(seed), "127.0.0.1:%d", f.port);
		o.seeds = seed;
		c = NULL;
		err = rcluster_open(&o, &c, why, sizeof(why));
		ck_assert_msg(err == 0, "open: %d: %s", err, why);
		err = exec1(c, &q, RC_GET, "k", NULL, 0);
		rcluster_close(c);
		fake_stop(&f);
		ck_assert_msg(err == replies[i].want, "reply %u: %d, not %d", i,
			      err, replies[i].want);
		ck_assert_ptr_null(q.data);
	}
}
END_TEST

START_TEST(test_rcluster_unreachable)
{
	struct rcluster_opts o = { .timeout_ms = 1000, .retries = 1 };
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t alen = sizeof(a);
	struct rcluster *c = NULL;
	char seed[32], why[256];
	int fd, err;

	/* A port that was free a moment ago: nobody listens on it. */
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	getsockname(fd, (struct sockaddr *)&a, &alen);
	close(fd);
	snprintf(seed, sizeof(seed), "127.0.0.1:%d", ntohs(a.sin_port));
	o.seeds = seed;
	err = rcluster_open(&o, &c, why, sizeof(why));
	ck_assert_int_eq(err, -ECONNREFUSED);
	ck_assert_ptr_null(c);
	ck_assert_msg(strstr(why, seed) != NULL, "why: %s", why);

	o.seeds = "nocolon";
	ck_assert_int_eq(rcluster_open(&o, &c, why, sizeof(why)), -EINVAL);
	o.seeds = seed;
	o.timeout_ms = 0;
	ck_assert_int_eq(rcluster_open(&o, &c, why, sizeof(why)), -EINVAL);
}
END_TEST

/* ---- a master stopped, a master killed ------------------------------- */

/* A key whose slot master @m serves. */
static void key_on(int m, const char *prefix, char *key, size_t len)
{
	unsigned int i;

	for (i = 0; i < 100000; i++) {
		snprintf(key, len, "%s{%u}", prefix, i);
		if (redis_cluster_slot_owner(
			    &rc, rcluster_slot(key, strlen(key))) == m)
			return;
	}
	ck_abort_msg("no key on master %d", m);
}

START_TEST(test_rcluster_timeout)
{
	const int timeout = 150, retries = 3;
	struct rcluster_stats st;
	struct rcluster_req q;
	struct rcluster *c;
	char key[64];
	long t0, took;
	int err;

	NEED_CLUSTER();
	c = open_client(rc.seeds, timeout, retries);
	key_on(1, "kvmem:stop:", key, sizeof(key));
	ck_assert_int_eq(exec1(c, &q, RC_SET, key, "v", 1), 0);
	kill(rc.node[1].pid, SIGSTOP);
	t0 = now_ms();
	err = exec1(c, &q, RC_GET, key, NULL, 0);
	took = now_ms() - t0;
	kill(rc.node[1].pid, SIGCONT);
	ck_assert_msg(err == -ETIMEDOUT || err == -EIO ||
			      err == -ECONNREFUSED || err == -EHOSTUNREACH,
		      "GET from a stopped master: %d", err);
	ck_assert_msg(took < retries * timeout * 4, "took %ld ms", took);
	rcluster_stats(c, &st);
	ck_assert_uint_ge(st.timeouts, 1);
	/* Back: the dropped connection is opened again. */
	ck_assert_int_eq(exec1(c, &q, RC_GET, key, NULL, 0), 0);
	ck_assert_uint_eq(q.dlen, 1);
	free(q.data);
	rcluster_close(c);
}
END_TEST

#define NFAIL 300

START_TEST(test_rcluster_failover)
{
	struct rcluster_req *q = kvmem_check_xmalloc(NFAIL * sizeof(*q));
	char(*key)[48] = kvmem_check_xmalloc(NFAIL * sizeof(*key));
	struct rcluster_stats st;
	struct rcluster *c;
	char out[4096];
	uint8_t *v;
	long t0, took;
	unsigned int i, on0 = 0, slot0 = RCLUSTER_SLOTS;
	int owner;

	NEED_CLUSTER();
	c = open_client(rc.seeds, 1000, 15);
	for (i = 0; i < NFAIL; i++) {
		snprintf(key[i], sizeof(key[i]), "kvmem:f:{%u}:%u", i % 31, i);
		memset(&q[i], 0, sizeof(q[i]));
		q[i].op = RC_SETNX;
		q[i].key = key[i];
		q[i].keylen = strlen(key[i]);
		q[i].val = value(i, 100 + i);
		q[i].vlen = 100 + i;
	}
	ck_assert_int_eq(rcluster_exec(c, q, NFAIL), 0);
	for (i = 0; i < NFAIL; i++)
		EXPECT_EQ(q[i].status, 0, "SETNX %s", key[i]);
	ck_assert_int_eq(redis_cluster_sync_replicas(&rc, 5000), 0);
	redis_cluster_cli(&rc, 0, out, sizeof(out), "DBSIZE", NULL);
	on0 = (unsigned int)atoi(out);
	ck_assert_uint_gt(on0, 0);
	for (i = 0; i < NFAIL && slot0 == RCLUSTER_SLOTS; i++)
		if (!redis_cluster_slot_owner(
			    &rc, rcluster_slot(key[i], strlen(key[i]))))
			slot0 = rcluster_slot(key[i], strlen(key[i]));
	ck_assert_uint_lt(slot0, RCLUSTER_SLOTS);

	ck_assert_int_eq(redis_cluster_kill_master(&rc, 0), 0);
	for (i = 0; i < NFAIL; i++) {
		free((void *)q[i].val);
		q[i].op = RC_GET;
	}
	t0 = now_ms();
	ck_assert_int_eq(rcluster_exec(c, q, NFAIL), 0);
	took = now_ms() - t0;
	for (i = 0; i < NFAIL; i++) {
		v = value(i, 100 + i);
		EXPECT_EQ(q[i].status, 0, "GET %s after %ld ms", key[i], took);
		EXPECT_EQ(q[i].dlen, 100 + i, "GET %s", key[i]);
		EXPECT_MEM(q[i].data, v, 100 + i, "GET %s", key[i]);
		free(v);
		free(q[i].data);
	}
	ck_assert_msg(took < 20000, "took %ld ms", took);
	/* A replica of the dead master serves its slots now. */
	owner = redis_cluster_slot_owner(&rc, slot0);
	ck_assert_int_ge(owner, rc.masters);
	rcluster_stats(c, &st);
	ck_assert_uint_ge(st.retries, 1);
	ck_assert_uint_eq(st.masters, 3);
	ck_assert_int_gt(rcluster_describe(c, out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "slots=") != NULL, "%s", out);
	printf("rcluster failover: %u keys on the killed master, read back "
	       "after %ld ms, %llu retries\n",
	       on0, took, (unsigned long long)st.retries);
	free(key);
	free(q);
	rcluster_close(c);
}
END_TEST

KVMEM_SUITE(rcluster)
{
	Suite *s = suite_create("rcluster");
	TCase *tc = tcase_create("data");

	tcase_set_timeout(tc, 60);
	tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
	tcase_add_test(tc, test_rcluster_slot);
	tcase_add_test(tc, test_rcluster_batch);
	tcase_add_test(tc, test_rcluster_set_ttl);
	tcase_add_test(tc, test_rcluster_get_at_most);
	tcase_add_test(tc, test_rcluster_moved);
	tcase_add_test(tc, test_rcluster_ask);
	tcase_add_test(tc, test_rcluster_acl);
	suite_add_tcase(s, tc);

	tc = tcase_create("hostile");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_rcluster_hostile_map);
	tcase_add_test(tc, test_rcluster_hostile_replies);
	tcase_add_test(tc, test_rcluster_unreachable);
	suite_add_tcase(s, tc);

	tc = tcase_create("failover");
	tcase_set_timeout(tc, 60);
	tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
	tcase_add_test(tc, test_rcluster_timeout);
	tcase_add_test(tc, test_rcluster_failover);
	suite_add_tcase(s, tc);
	return s;
}
