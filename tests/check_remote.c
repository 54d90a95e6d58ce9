/* SPDX-License-Identifier: MIT */
/*
 * check_remote.c - the shared tier on a real Redis Cluster: a block
 * published on one kvmemd is attached on another bit for bit, and no
 * record the cluster hands back is served unless it is the block asked
 * for: flipped bytes are corrected (and written back) or refused, a
 * record under another key or of another tenant is refused, a chain cut
 * keeps its good leading blocks, a failover loses nothing, a cluster that
 * does not answer leaves local service as it was.
 *
 * The cluster (3 masters, 3 replicas) is started once for the tcase from
 * Debian's redis-server; where it is not installed the tests say so and
 * skip.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../daemon/rcluster.h"
#include "kvmem/kvmem.h"
#include "kvmem_check.h"
#include "kvmemd_harness.h"
#include "redis_fixture.h"
#include "rng.h"

/*
 * A record as kvmemd.conf(5) documents it: a 128-byte header, 16 bytes of
 * seal per layer, then the pages; its key "kvmem:1:TENANT:FINGERPRINT:
 * {HASH}", TENANT u<uid> or g<gid>, HASH the block's key in hex.
 */
#define REC_HDR 128
#define REC_SEAL 16
#define KEY_LEN 128

#define NBLOCKS 8
#define TOKENS 150 /* blocks end at 4, 36, 68, 100, 132: 5 are whole */
#define WHOLE 5

static struct redis_cluster rc;

static void cluster_setup(void)
{
	cluster_fixture_up(&rc, 3, 1);
}

static void cluster_teardown(void)
{
	cluster_fixture_down(&rc);
}

static uint32_t block_end(uint32_t i)
{
	const struct kvmem_geometry g = kvmemd_test_geo();

	return g.sink_tokens + i * g.tokens_per_page;
}

/* A prompt's keys, @t its tokens: each test's own, since the cluster
 * keeps what the tests before it pushed. */
static void keys_of(struct kvmem_prefix_key *k, uint32_t n, int t)
{
	uint32_t i;

	memset(k, 0, n * sizeof(*k));
	for (i = 0; i < n; i++) {
		k[i].bytes[0] = (uint8_t)t;
		k[i].bytes[1] = (uint8_t)(t >> 8);
		k[i].bytes[2] = (uint8_t)i;
		k[i].bytes[31] = 0xa5;
	}
}

static void node_start(struct kvmemd_proc *p, const char *seeds,
		       const char *more)
{
	char conf[1024];

	snprintf(conf, sizeof(conf), "[remote]\nseeds = %s\n%s", seeds,
		 more ? more : "timeout_ms = 500\nretries = 8\n");
	kvmemd_start(p, conf, NULL);
}

/* The admin socket's "remote" reply. */
static void remote_of(const struct kvmemd_proc *p, char *out, size_t len)
{
	kvmemd_admin_ok(p, out, len, "remote");
}

/* Wait until @p pushed @n blocks (or found them there). */
static void pushed_wait(const struct kvmemd_proc *p, unsigned long long n)
{
	char out[8192];
	int i;

	for (i = 0; i < 1000; i++) {
		remote_of(p, out, sizeof(out));
		if (kvmemd_json_after(out, "\"push\"", "pushed") +
			    kvmemd_json_after(out, "\"push\"", "present") >=
		    n)
			return;
		usleep(10000);
	}
	ck_abort_msg("%llu blocks not pushed in 10 s: %s", n, out);
}

/* The key of block @i of @keys for @tenant ("u0", "g0"), as the cluster
 * has it: looked for on every master. */
static void key_of(char *buf, size_t len, const struct kvmem_prefix_key *keys,
		   uint32_t i, const char *tenant)
{
	char pattern[200], out[4096];
	int n, m, found = 0;

	n = snprintf(pattern, sizeof(pattern), "kvmem:1:%s:*:{", tenant);
	for (m = 0; m < 32; m++)
		n += snprintf(pattern + n, sizeof(pattern) - (size_t)n, "%02x",
			      keys[i].bytes[m]);
	snprintf(pattern + n, sizeof(pattern) - (size_t)n, "}");
	for (m = 0; m < rc.nnodes && !found; m++) {
		if (!rc.node[m].pid ||
		    redis_cluster_cli(&rc, m, out, sizeof(out), "KEYS", pattern,
				      NULL) ||
		    !strstr(out, "kvmem:1:"))
			continue;
		out[strcspn(out, "\n")] = '\0';
		ck_assert_uint_lt(strlen(out), len);
		memcpy(buf, out, strlen(out) + 1);
		found = 1;
	}
	ck_assert_msg(found, "no key %s in the cluster", pattern);
}

static struct rcluster *client(void)
{
	struct rcluster_opts o = {
		.seeds = rc.seeds,
		.timeout_ms = 2000,
		.retries = 10,
	};
	struct rcluster *c = NULL;
	char why[256];

	ck_assert_msg(!rcluster_open(&o, &c, why, sizeof(why)), "%s", why);
	return c;
}

/* GET @key: its value (free it) and length, or NULL when there is none. */
static uint8_t *get(struct rcluster *c, const char *key, size_t *len)
{
	struct rcluster_req q = { .op = RC_GET,
				  .key = key,
				  .keylen = strlen(key) };

	ck_assert_int_eq(rcluster_exec(c, &q, 1), 0);
	if (q.status == -ENOENT)
		return NULL;
	ck_assert_msg(!q.status, "GET %s: %s", key, strerror(-q.status));
	*len = q.dlen;
	return q.data;
}

static void set(struct rcluster *c, const char *key, const void *v, size_t len)
{
	struct rcluster_req q = { .op = RC_SET,
				  .key = key,
				  .keylen = strlen(key),
				  .val = v,
				  .vlen = len };

	ck_assert_int_eq(rcluster_exec(c, &q, 1), 0);
	ck_assert_msg(!q.status, "SET %s: %s", key, strerror(-q.status));
}

/* Node A publishes the first WHOLE blocks of a prompt under @keys, and
 * they reach the cluster; its tokens in *@k, *@v. */
static void publish(struct kvmemd_proc *a, const struct kvmem_prefix_key *keys,
		    struct kvmem_rng *r, float **k, float **v)
{
	struct kvmem_cache *c;
	struct kvmem_seq *s;

	kvmemd_tokens(r, TOKENS, k, v);
	c = kvmemd_connect(a, 8u << 20);
	s = kvmemd_seq_with(c, *k, *v, TOKENS);
	ck_assert_int_eq(kvmem_prefix_publish(s, keys, NBLOCKS), WHOLE);
	pushed_wait(a, WHOLE);
	kvmem_seq_free(s);
	kvmem_close(c);
}

/* Node B attaches @keys: tokens matched, and those match an embedded
 * cache of the same tokens bit for bit (attention included). */
static int attach_same(struct kvmemd_proc *b,
		       const struct kvmem_prefix_key *keys, struct kvmem_rng *r,
		       const float *k, const float *v)
{
	struct kvmem_cache *c = kvmemd_connect(b, 8u << 20), *e;
	struct kvmem_seq *t, *ref;
	int n = kvmem_prefix_attach(c, keys, NBLOCKS, &t);

	ck_assert_int_ge(n, 0);
	if (n) {
		ref = kvmemd_reference(&e, k, v, (uint32_t)n);
		kvmemd_expect_same(t, ref, r);
		kvmem_seq_free(ref);
		kvmem_close(e);
	}
	kvmem_seq_free(t);
	kvmem_close(c);
	return n;
}

/*
 * What most tests share: kvmemd A, which published the first WHOLE blocks
 * of a prompt of its seed, and kvmemd B, which has not; the prompt's keys
 * and tokens; a client of the cluster.
 */
struct two {
	struct kvmemd_proc a, b;
	struct kvmem_prefix_key keys[NBLOCKS];
	struct kvmem_rng r;
	float *k, *v;
	struct rcluster *c;
};

/* @conf_a, @conf_b: more of each one's configuration, as node_start()
 * takes it. */
static void two_start(struct two *t, int seed, const char *conf_a,
		      const char *conf_b)
{
	t->c = client();
	kvmem_rng_seed(&t->r, (uint64_t)seed);
	keys_of(t->keys, NBLOCKS, seed);
	node_start(&t->a, rc.seeds, conf_a);
	node_start(&t->b, rc.seeds, conf_b);
	publish(&t->a, t->keys, &t->r, &t->k, &t->v);
}

static void two_stop(struct two *t)
{
	rcluster_close(t->c);
	ck_assert_int_eq(kvmemd_stop(&t->a), 0);
	kvmemd_cleanup(&t->a);
	ck_assert_int_eq(kvmemd_stop(&t->b), 0);
	kvmemd_cleanup(&t->b);
	free(t->k);
	free(t->v);
}

START_TEST(test_remote_attach_on_another_node)
{
	struct two t;
	char out[8192];

	NEED_CLUSTER();
	two_start(&t, 4901, NULL, NULL);

	/* B never saw the prompt: every whole block comes from the
	 * cluster, bit for bit what A published. */
	ck_assert_int_eq(attach_same(&t.b, t.keys, &t.r, t.k, t.v),
			 (int)block_end(4));
	remote_of(&t.b, out, sizeof(out));
	ck_assert_uint_eq(kvmemd_json_after(out, "\"fetch\"", "hits"), WHOLE);
	ck_assert_uint_eq(kvmemd_json_after(out, "\"fetch\"", "kept"), WHOLE);
	ck_assert_uint_eq(kvmemd_json_after(out, "\"fetch\"", "misses"),
			  NBLOCKS - WHOLE);
	ck_assert_uint_eq(kvmemd_json_after(out, "\"fetch\"", "requests"), 1);
	ck_assert_ptr_nonnull(strstr(out, "\"state\":\"ok\""));
	/* Kept on B: the next attach asks the cluster only for the blocks
	 * no one published. */
	ck_assert_int_eq(attach_same(&t.b, t.keys, &t.r, t.k, t.v),
			 (int)block_end(4));
	remote_of(&t.b, out, sizeof(out));
	ck_assert_uint_eq(kvmemd_json_after(out, "\"fetch\"", "requests"), 2);
	ck_assert_uint_eq(kvmemd_json_after(out, "\"fetch\"", "blocks_asked"),
			  NBLOCKS + NBLOCKS - WHOLE);
	ck_assert_uint_eq(kvmemd_json_after(out, "\"fetch\"", "hits"), WHOLE);

	/* Published again on A: written once, found there. */
	{
		struct kvmem_cache *c = kvmemd_connect(&t.a, 8u << 20);
		struct kvmem_seq *s;

		kvmemd_admin_ok(&t.a, out, sizeof(out), "prefix-drop %u",
				(unsigned int)geteuid());
		s = kvmemd_seq_with(c, t.k, t.v, TOKENS);
		ck_assert_int_eq(kvmem_prefix_publish(s, t.keys, NBLOCKS),
				 WHOLE);
		pushed_wait(&t.a, 2 * WHOLE);
		remote_of(&t.a, out, sizeof(out));
		ck_assert_uint_eq(kvmemd_json_after(out, "\"push\"", "pushed"),
				  WHOLE);
		ck_assert_uint_eq(kvmemd_json_after(out, "\"push\"", "present"),
				  WHOLE);
		kvmem_seq_free(s);
		kvmem_close(c);
	}
	two_stop(&t);
}
END_TEST

/*
 * Node B keeps the first two blocks of the prompt on its backing store
 * only (published there, then out of memory; not pushed), and the cluster
 * has them all (from A): an attach on B reads the two from its store and
 * the rest from the cluster, bit for bit, the whole prompt.
 */
START_TEST(test_remote_after_the_store)
{
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	struct two t;
	char out[8192];
	int i;

	NEED_CLUSTER();
	two_start(&t, 4911, NULL,
		  "timeout_ms = 500\nretries = 8\npublish = no\n"
		  "[store]\npath = @DIR@/store\nsize = 16M\n");
	c = kvmemd_connect(&t.b, 8u << 20);
	s = kvmemd_seq_with(c, t.k, t.v, block_end(1));
	ck_assert_int_eq(kvmem_prefix_publish(s, t.keys, 2), 2);
	kvmem_seq_free(s);
	kvmem_close(c);
	kvmemd_admin_ok(&t.b, out, sizeof(out),
			"policy set prefix.idle_seconds=1");
	for (i = 0; i < 3000; i++) {
		kvmemd_admin_ok(&t.b, out, sizeof(out), "tier");
		if (kvmemd_json_after(out, "\"store_prefixes\"", "indexed") ==
			    2 &&
		    (kvmemd_admin_ok(&t.b, out, sizeof(out), "prefixes"),
		     kvmemd_json_after(out, "\"prefix\"", "blocks") == 0))
			break;
		usleep(10000);
	}
	ck_assert_uint_eq(kvmemd_json_after(out, "\"prefix\"", "blocks"), 0);
	kvmemd_admin_ok(&t.b, out, sizeof(out),
			"policy set prefix.idle_seconds=0");
	ck_assert_int_eq(attach_same(&t.b, t.keys, &t.r, t.k, t.v),
			 (int)block_end(WHOLE - 1));
	kvmemd_admin_ok(&t.b, out, sizeof(out), "tier");
	ck_assert_uint_eq(kvmemd_json_after(out, "\"store_prefixes\"",
					    "fetched"),
			  2);
	remote_of(&t.b, out, sizeof(out));
	ck_assert_uint_eq(kvmemd_json_after(out, "\"fetch\"", "kept"),
			  WHOLE - 2);
	two_stop(&t);
}
END_TEST

/* Bytes of block @i's record at @off flipped by @mask, @n of them. */
static void flip(struct rcluster *c, const char *key, size_t off, uint8_t mask,
		 size_t n)
{
	uint8_t *val;
	size_t len, i;

	val = get(c, key, &len);
	ck_assert_ptr_nonnull(val);
	ck_assert_uint_lt(off + n, len);
	for (i = 0; i < n; i++)
		val[off + i] ^= mask;
	set(c, key, val, len);
	free(val);
}

START_TEST(test_remote_flips_corrected_or_refused)
{
	struct two t;
	const struct kvmem_geometry g = kvmemd_test_geo();
	const size_t pages_at = REC_HDR + g.layers * REC_SEAL;
	char key1[KEY_LEN], key3[KEY_LEN];
	uint8_t *good, *back;
	size_t glen, blen;
	char out[8192], me[16];

	NEED_CLUSTER();
	two_start(&t, 4902, NULL, NULL);
	snprintf(me, sizeof(me), "u%u", (unsigned int)geteuid());
	key_of(key1, sizeof(key1), t.keys, 1, me);
	key_of(key3, sizeof(key3), t.keys, 3, me);
	good = get(t.c, key1, &glen);
	ck_assert_ptr_nonnull(good);

	/* One bit of block 1's first page, and one of its last page's:
	 * the code corrects them, the block is served bit for bit, and the
	 * record goes back to the cluster as it was written. A byte of
	 * block 3 is ruined past what any code corrects: the match ends
	 * before it, and the record leaves the cluster. */
	flip(t.c, key1, pages_at + 200, 0x10, 1);
	flip(t.c, key1, glen - 300, 0x01, 1);
	flip(t.c, key3, pages_at + 256, 0xff, 64);
	ck_assert_int_eq(attach_same(&t.b, t.keys, &t.r, t.k, t.v),
			 (int)block_end(2));
	remote_of(&t.b, out, sizeof(out));
	ck_assert_uint_eq(kvmemd_json_after(out, "\"fetch\"", "repaired"), 1);
	ck_assert_uint_eq(kvmemd_json_after(out, "\"fetch\"", "written_back"),
			  1);
	ck_assert_uint_eq(kvmemd_json_after(out, "\"refused\"", "payload"), 1);
	ck_assert_uint_eq(kvmemd_json_after(out, "\"fetch\"", "deleted"), 1);
	ck_assert_uint_ge(
		kvmemd_json_after(out, "\"fetch\"", "words_corrected"), 1);
	back = get(t.c, key1, &blen);
	ck_assert_ptr_nonnull(back);
	ck_assert_uint_eq(blen, glen);
	EXPECT_MEM(back, good, glen, "%s", "record written back");
	ck_assert_ptr_null(get(t.c, key3, &blen));
	ck_assert_int_ge(kvmemd_log_lines(&t.b, "does not verify (payload)"),
			 1);

	free(good);
	free(back);
	two_stop(&t);
}
END_TEST

START_TEST(test_remote_wrong_key_or_tenant_refused)
{
	struct two t;
	char key1[KEY_LEN], key2[KEY_LEN];
	char gkey[KEY_LEN], tenants[64];
	uint8_t *val;
	char out[8192], grp[16], me[16], *tail;
	size_t len;

	NEED_CLUSTER();
	snprintf(grp, sizeof(grp), "g%u", (unsigned int)getegid());
	snprintf(me, sizeof(me), "u%u", (unsigned int)geteuid());
	/* A's clients are the tenant of their group (daemon.tenants), B's
	 * of their uid: the same t.keys, two tenants. */
	snprintf(tenants, sizeof(tenants), "[daemon]\ntenants = %u\n",
		 (unsigned int)getegid());
	two_start(&t, 4903, tenants, NULL);

	/* Block 1's record under block 2's key of the group: the right
	 * pages under the wrong key. */
	key_of(key1, sizeof(key1), t.keys, 1, grp);
	key_of(key2, sizeof(key2), t.keys, 2, grp);
	val = get(t.c, key1, &len);
	ck_assert_ptr_nonnull(val);
	set(t.c, key2, val, len);
	free(val);
	/* And the group's block 0 under the uid's key: another tenant's. */
	key_of(gkey, sizeof(gkey), t.keys, 0, grp);
	val = get(t.c, gkey, &len);
	ck_assert_ptr_nonnull(val);
	/* the same fingerprint and hash, the uid's tenant */
	tail = strchr(gkey + strlen("kvmem:1:"), ':');
	ck_assert_ptr_nonnull(tail);
	snprintf(out, sizeof(out), "kvmem:1:%s%s", me, tail);
	ck_assert_uint_lt(strlen(out), sizeof(gkey));
	memcpy(gkey, out, strlen(out) + 1);
	set(t.c, gkey, val, len);
	free(val);

	ck_assert_int_eq(attach_same(&t.b, t.keys, &t.r, t.k, t.v), 0);
	remote_of(&t.b, out, sizeof(out));
	ck_assert_uint_eq(kvmemd_json_after(out, "\"refused\"", "tenant"), 1);
	ck_assert_uint_eq(kvmemd_json_after(out, "\"fetch\"", "kept"), 0);
	ck_assert_ptr_null(get(t.c, gkey, &len));

	/* A's other session, same group: the chain breaks at block 2. */
	ck_assert_int_eq(attach_same(&t.a, t.keys, &t.r, t.k, t.v),
			 (int)block_end(4));
	kvmemd_admin_ok(&t.a, out, sizeof(out), "prefix-drop @%u",
			(unsigned int)getegid());
	ck_assert_int_eq(attach_same(&t.a, t.keys, &t.r, t.k, t.v),
			 (int)block_end(1));
	remote_of(&t.a, out, sizeof(out));
	ck_assert_uint_eq(kvmemd_json_after(out, "\"refused\"", "chain"), 1);

	two_stop(&t);
}
END_TEST

/* A value far larger than any block, planted under a block's key: read
 * no further than a block's size, refused on its length, deleted. */
START_TEST(test_remote_oversized_value_refused)
{
	struct two t;
	const size_t huge = 8u << 20;
	char key[KEY_LEN], me[16];
	size_t len, records = 0;
	uint8_t *val;
	char out[8192];
	uint32_t i;

	NEED_CLUSTER();
	snprintf(me, sizeof(me), "u%u", (unsigned int)geteuid());
	two_start(&t, 4908, NULL, NULL);
	/* What the five records weigh as they were pushed, the planted one
	 * a byte more. */
	for (i = 0; i < WHOLE; i++) {
		key_of(key, sizeof(key), t.keys, i, me);
		val = get(t.c, key, &len);
		ck_assert_ptr_nonnull(val);
		free(val);
		records += len + (i == 2);
	}
	key_of(key, sizeof(key), t.keys, 2, me);
	val = kvmem_check_xmalloc(huge);
	memset(val, 0x5a, huge);
	set(t.c, key, val, huge);
	free(val);

	ck_assert_int_eq(attach_same(&t.b, t.keys, &t.r, t.k, t.v),
			 (int)block_end(1));
	remote_of(&t.b, out, sizeof(out));
	ck_assert_uint_eq(kvmemd_json_after(out, "\"refused\"", "header"), 1);
	ck_assert_uint_eq(kvmemd_json_after(out, "\"fetch\"", "deleted"), 1);
	ck_assert_uint_eq(kvmemd_json_after(out, "\"fetch\"", "bytes"),
			  records);
	ck_assert_ptr_null(get(t.c, key, &len));
	two_stop(&t);
}
END_TEST

START_TEST(test_remote_chain_cut_keeps_leading)
{
	struct two t;
	char key[KEY_LEN];
	struct rcluster_req q;
	char out[8192], me[16];

	NEED_CLUSTER();
	snprintf(me, sizeof(me), "u%u", (unsigned int)geteuid());
	two_start(&t, 4904, NULL, NULL);
	/* Block 3 gone, as an eviction would take it. */
	key_of(key, sizeof(key), t.keys, 3, me);
	q = (struct rcluster_req){ .op = RC_DEL,
				   .key = key,
				   .keylen = strlen(key) };
	ck_assert_int_eq(rcluster_exec(t.c, &q, 1), 0);
	ck_assert_int_eq(q.status, 0);
	ck_assert_int_eq(attach_same(&t.b, t.keys, &t.r, t.k, t.v),
			 (int)block_end(2));
	remote_of(&t.b, out, sizeof(out));
	ck_assert_uint_eq(kvmemd_json_after(out, "\"fetch\"", "kept"), 3);
	/* block 3, and the blocks 5 to 7 no one published */
	ck_assert_uint_eq(kvmemd_json_after(out, "\"fetch\"", "misses"),
			  1 + NBLOCKS - WHOLE);
	two_stop(&t);
}
END_TEST

START_TEST(test_remote_master_killed)
{
	struct two t;
	char out[8192];

	NEED_CLUSTER();
	two_start(&t, 4905, NULL, "timeout_ms = 1000\nretries = 12\n");
	ck_assert_int_eq(redis_cluster_sync_replicas(&rc, 5000), 0);
	/* A master dies while B reads: B retries until its replica is
	 * promoted, and loses nothing. */
	ck_assert_int_ge(redis_cluster_kill_master(&rc, 1), 0);
	ck_assert_int_eq(attach_same(&t.b, t.keys, &t.r, t.k, t.v),
			 (int)block_end(4));
	remote_of(&t.b, out, sizeof(out));
	ck_assert_uint_eq(kvmemd_json_after(out, "\"fetch\"", "kept"), WHOLE);
	two_stop(&t);
}
END_TEST

/* ACL users as remote.credentials names them, on every node (ACLs are
 * each node's own). */
static void acl_user(const char *user, const char *pw, const char *tenant)
{
	char pass[80], pattern[80], out[512];
	int i;

	snprintf(pass, sizeof(pass), ">%s", pw);
	snprintf(pattern, sizeof(pattern), "~kvmem:1:%s:*", tenant);
	for (i = 0; i < rc.nnodes; i++) {
		if (!rc.node[i].pid)
			continue;
		ck_assert_int_eq(redis_cluster_cli(&rc, i, out, sizeof(out),
						   "ACL", "SETUSER", user, "on",
						   pass, pattern, "+@all",
						   NULL),
				 0);
		ck_assert_str_eq(out, "OK");
	}
}

START_TEST(test_remote_tenant_users)
{
	struct kvmem_prefix_key keys[NBLOCKS];
	char dir[64], creds[128], conf[512], me[16];
	struct kvmemd_proc a, b;
	struct kvmem_rng r;
	char out[8192];
	float *k, *v;

	NEED_CLUSTER();
	kvmem_rng_seed(&r, 4907);
	keys_of(keys, NBLOCKS, 4907);
	snprintf(me, sizeof(me), "u%u", (unsigned int)geteuid());
	acl_user("kv_mine", "pw-mine", me);
	acl_user("kv_other", "pw-other", "u4000000");
	kvmem_check_tmpdir_make(dir, sizeof(dir), "remote-acl");

	/* A talks as the tenant's own user: its pushes land. */
	snprintf(creds, sizeof(creds), "%s/a.creds", dir);
	snprintf(conf, sizeof(conf), "uid:%u kv_mine pw-mine\n",
		 (unsigned int)geteuid());
	kvmem_check_write_file(creds, conf);
	ck_assert_int_eq(chmod(creds, 0600), 0);
	snprintf(conf, sizeof(conf), "credentials = %s\n", creds);
	node_start(&a, rc.seeds, conf);
	publish(&a, keys, &r, &k, &v);
	remote_of(&a, out, sizeof(out));
	ck_assert_uint_eq(kvmemd_json_after(out, "\"push\"", "pushed"), WHOLE);

	/* B's file gives the tenant a user whose keys are another
	 * tenant's: the cluster refuses every read, nothing is served. */
	snprintf(creds, sizeof(creds), "%s/b.creds", dir);
	snprintf(conf, sizeof(conf), "uid:%u kv_other pw-other\n",
		 (unsigned int)geteuid());
	kvmem_check_write_file(creds, conf);
	ck_assert_int_eq(chmod(creds, 0600), 0);
	snprintf(conf, sizeof(conf), "credentials = %s\n", creds);
	node_start(&b, rc.seeds, conf);
	ck_assert_int_eq(attach_same(&b, keys, &r, k, v), 0);
	remote_of(&b, out, sizeof(out));
	ck_assert_uint_eq(kvmemd_json_after(out, "\"fetch\"", "unanswered"),
			  NBLOCKS);
	ck_assert_uint_eq(kvmemd_json_after(out, "\"fetch\"", "kept"), 0);
	ck_assert_int_eq(kvmemd_stop(&b), 0);
	kvmemd_cleanup(&b);

	/* A file that names no user for the tenant: no shared tier for it. */
	kvmem_check_write_file(creds, "uid:4000000 kv_other pw-other\n");
	node_start(&b, rc.seeds, conf);
	ck_assert_int_eq(attach_same(&b, keys, &r, k, v), 0);
	remote_of(&b, out, sizeof(out));
	ck_assert_ptr_nonnull(strstr(out, "names no user for uid"));
	ck_assert_uint_eq(kvmemd_json_after(out, "\"fetch\"", "kept"), 0);

	ck_assert_int_eq(kvmemd_stop(&a), 0);
	kvmemd_cleanup(&a);
	ck_assert_int_eq(kvmemd_stop(&b), 0);
	kvmemd_cleanup(&b);
	kvmem_check_tmpdir_remove(dir);
	free(k);
	free(v);
}
END_TEST

/* No cluster at all: a port nothing listens on. */
START_TEST(test_remote_unreachable_local_goes_on)
{
	struct kvmem_prefix_key keys[NBLOCKS];
	struct kvmem_cache *c;
	struct kvmem_seq *s, *t;
	struct kvmemd_proc a;
	struct kvmem_rng r;
	char out[8192];
	float *k, *v;

	kvmem_rng_seed(&r, 4906);
	keys_of(keys, NBLOCKS, 99);
	node_start(&a, "127.0.0.1:1", NULL);
	c = kvmemd_connect(&a, 8u << 20);
	kvmemd_tokens(&r, TOKENS, &k, &v);
	s = kvmemd_seq_with(c, k, v, TOKENS);
	/* Published here as ever; the push fails in the background. */
	ck_assert_int_eq(kvmem_prefix_publish(s, keys, NBLOCKS), WHOLE);
	ck_assert_int_eq(kvmem_prefix_attach(c, keys, NBLOCKS, &t),
			 (int)block_end(4));
	kvmem_seq_free(t);
	/* Keys no one published here: no match, no error. */
	keys_of(keys, NBLOCKS, 98);
	ck_assert_int_eq(kvmem_prefix_attach(c, keys, NBLOCKS, &t), 0);
	kvmem_seq_free(t);
	remote_of(&a, out, sizeof(out));
	ck_assert_ptr_nonnull(strstr(out, "\"state\":\"unreachable\""));
	ck_assert_ptr_nonnull(strstr(out, "\"reason\":\"127.0.0.1:1"));
	ck_assert_uint_eq(kvmemd_json_after(out, "\"fetch\"", "errors"), 2);
	ck_assert_int_ge(kvmemd_log_lines(&a, "does not answer"), 1);
	kvmem_seq_free(s);
	kvmem_close(c);
	ck_assert_int_eq(kvmemd_stop(&a), 0);
	kvmemd_cleanup(&a);
	free(k);
	free(v);
}
END_TEST

/* What a hostile client writes on the ring: refused, and kvmemd goes on. */
START_TEST(test_remote_fetch_hostile)
{
	const struct kvmem_geometry g = kvmemd_test_geo();
	struct kvmemd_proc a, plain;
	struct kvmem_hello h = kvmemd_hello(8u << 20);
	struct kvmemd_raw raw;
	struct kvmem_sqe e;
	struct kvmem_cqe q;

	h.features |= KVMEM_FEAT_PREFIX | KVMEM_FEAT_REMOTE;
	node_start(&a, "127.0.0.1:1", NULL);
	ck_assert_int_eq(kvmemd_raw_attach(&raw, &a, &h, sizeof(h)), 0);
	ck_assert(raw.w.features & KVMEM_FEAT_REMOTE);
	memset(&e, 0, sizeof(e));
	e.opcode = KVMEM_OP_PREFIX_FETCH;
	e.len = 3 * KVMEM_PREFIX_KEY_BYTES;
	/* not a block's start, ntokens set, a length of no whole key, no
	 * key past the parent, more keys than the op takes, a buffer
	 * outside the region, a stray field */
	e.token_start = g.sink_tokens + 1;
	ck_assert_int_eq(kvmemd_raw_call(&raw, e, 0).res, -EINVAL);
	e.token_start = 0;
	e.ntokens = 4;
	ck_assert_int_eq(kvmemd_raw_call(&raw, e, 0).res, -EINVAL);
	e.ntokens = 0;
	e.len = 3 * KVMEM_PREFIX_KEY_BYTES + 1;
	ck_assert_int_eq(kvmemd_raw_call(&raw, e, 0).res, -EINVAL);
	e.len = KVMEM_PREFIX_KEY_BYTES;
	ck_assert_int_eq(kvmemd_raw_call(&raw, e, 0).res, -EINVAL);
	e.len = (KVMEM_PREFIX_FETCH_MAX + 2) * KVMEM_PREFIX_KEY_BYTES;
	ck_assert_int_eq(kvmemd_raw_call(&raw, e, 0).res, -EINVAL);
	e.len = 3 * KVMEM_PREFIX_KEY_BYTES;
	e.addr = 1ull << 40;
	ck_assert_int_eq(kvmemd_raw_call(&raw, e, 0).res, -EFAULT);
	e.addr = 0;
	e.seq = 1;
	ck_assert_int_eq(kvmemd_raw_call(&raw, e, 0).res, -EINVAL);
	e.seq = 0;
	/* A well-formed one: the cluster does not answer. */
	q = kvmemd_raw_call(&raw, e, 0);
	ck_assert_int_eq(q.res, -EHOSTUNREACH);
	kvmemd_raw_detach(&raw);
	ck_assert_int_eq(kvmemd_stop(&a), 0);
	kvmemd_cleanup(&a);

	/* A kvmemd with no shared tier offers no fetch. */
	kvmemd_start(&plain, NULL, NULL);
	ck_assert_int_eq(kvmemd_raw_attach(&raw, &plain, &h, sizeof(h)), 0);
	ck_assert(!(raw.w.features & KVMEM_FEAT_REMOTE));
	ck_assert_int_eq(kvmemd_raw_call(&raw, e, 0).res, -EOPNOTSUPP);
	kvmemd_raw_detach(&raw);
	ck_assert_int_eq(kvmemd_stop(&plain), 0);
	kvmemd_cleanup(&plain);
}
END_TEST

/* Passwords others can read are refused at start, with a sentence;
 * malformed lines and seeds too. */
START_TEST(test_remote_config_checked)
{
	char dir[64], creds[128], conf[128], text[400];
	struct kvmem_run run;

	kvmem_check_tmpdir_make(dir, sizeof(dir), "remote-conf");
	snprintf(creds, sizeof(creds), "%s/creds", dir);
	snprintf(conf, sizeof(conf), "%s/kvmemd.conf", dir);
	snprintf(text, sizeof(text),
		 "[remote]\nseeds = 127.0.0.1:7000,localhost:7001\n"
		 "credentials = %s\n",
		 creds);
	kvmem_check_write_file(conf, text);

	kvmem_check_write_file(creds, "uid:0 t0 secret\n* other pw\n");
	ck_assert_int_eq(chmod(creds, 0644), 0);
	KVMEM_RUN(&run, "../daemon/kvmemd", "", "-n", "-c", conf);
	ck_assert_int_eq(run.status, 1);
	ck_assert_ptr_nonnull(strstr(run.err, "is mode 0644"));
	ck_assert_ptr_nonnull(strstr(run.err, "chmod 600"));
	kvmem_check_run_free(&run);

	ck_assert_int_eq(chmod(creds, 0600), 0);
	KVMEM_RUN(&run, "../daemon/kvmemd", "", "-n", "-c", conf);
	ck_assert_msg(run.status == 0, "%s", run.err);
	kvmem_check_run_free(&run);

	kvmem_check_write_file(creds, "# tenants\nuid:12 t12 pw\nuid:x a b\n");
	KVMEM_RUN(&run, "../daemon/kvmemd", "", "-n", "-c", conf);
	ck_assert_int_eq(run.status, 1);
	ck_assert_ptr_nonnull(strstr(run.err, ":3: \"uid:x\" is not uid:N"));
	kvmem_check_run_free(&run);

	kvmem_check_write_file(creds, "uid:12 t12\n");
	KVMEM_RUN(&run, "../daemon/kvmemd", "", "-n", "-c", conf);
	ck_assert_int_eq(run.status, 1);
	ck_assert_ptr_nonnull(strstr(run.err, "not TENANT USER PASSWORD"));
	kvmem_check_run_free(&run);

	KVMEM_RUN(&run, "../daemon/kvmemd", "", "-n", "-c", "/dev/null", "-o",
		  "remote.seeds=127.0.0.1");
	ck_assert_int_eq(run.status, 1);
	ck_assert_ptr_nonnull(strstr(run.err, "not a list of HOST:PORT"));
	kvmem_check_run_free(&run);
	KVMEM_RUN(&run, "../daemon/kvmemd", "", "-n", "-c", "/dev/null", "-o",
		  "remote.seeds=a:1,b:70000");
	ck_assert_int_eq(run.status, 1);
	kvmem_check_run_free(&run);
	KVMEM_RUN(&run, "../daemon/kvmemd", "", "-n", "-c", "/dev/null", "-o",
		  "remote.seeds=a:1,");
	ck_assert_int_eq(run.status, 1);
	kvmem_check_run_free(&run);
	kvmem_check_tmpdir_remove(dir);
}
END_TEST

KVMEM_SUITE(remote)
{
	Suite *s = suite_create("remote");
	TCase *tc = tcase_create("cluster");
	TCase *alone = tcase_create("alone");

	tcase_add_unchecked_fixture(tc, cluster_setup, cluster_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_remote_attach_on_another_node);
	tcase_add_test(tc, test_remote_after_the_store);
	tcase_add_test(tc, test_remote_flips_corrected_or_refused);
	tcase_add_test(tc, test_remote_wrong_key_or_tenant_refused);
	tcase_add_test(tc, test_remote_chain_cut_keeps_leading);
	tcase_add_test(tc, test_remote_oversized_value_refused);
	tcase_add_test(tc, test_remote_tenant_users);
	tcase_add_test(tc, test_remote_master_killed);
	suite_add_tcase(s, tc);
	tcase_add_test(alone, test_remote_unreachable_local_goes_on);
	tcase_add_test(alone, test_remote_fetch_hostile);
	tcase_add_test(alone, test_remote_config_checked);
	suite_add_tcase(s, alone);
	return s;
}
