/* SPDX-License-Identifier: MIT */
/*
 * check_remote_ctl.c - kvmemctl remote and the kvmem_remote_* series
 * against real kvmemd processes
 *
 * A kvmemd with no shared tier, one whose cluster does not answer
 * (remote.seeds names a port nothing listens on), and two that share a
 * real Redis Cluster (3 masters, started once for the tcase; where
 * redis-server is not installed the tests say so and skip): what one
 * publishes the other attaches, and each table line and series says the
 * numbers the scenario implies, counted by the test from what it did.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvmem/kvmem.h"
#include "kvmem_check.h"
#include "kvmemd_harness.h"
#include "redis_fixture.h"
#include "rng.h"

#define NBLOCKS 8
#define TOKENS 150

static struct redis_cluster rc;

static void cluster_setup(void)
{
	cluster_fixture_up(&rc, 3, 0);
}

static void cluster_teardown(void)
{
	cluster_fixture_down(&rc);
}

/* kvmemctl -a @p's admin socket @cmd, which must exit 0 and say nothing
 * on stderr; its output with runs of spaces squeezed into one. */
static char *ctl(const struct kvmemd_proc *p, const char *cmd)
{
	struct kvmem_run r;
	char *s, *o;
	const char *i;

	KVMEM_RUN(&r, "kvmemctl", "", "-a", p->admin, cmd);
	ck_assert_msg(r.status == 0 && !*r.err,
		      "kvmemctl %s: exit %d\nstdout:\n%s\nstderr:\n%s", cmd,
		      r.status, r.out, r.err);
	s = kvmem_check_xmalloc(strlen(r.out) + 1);
	for (i = r.out, o = s; *i; i++)
		if (*i != ' ' || o == s || o[-1] != ' ')
			*o++ = *i;
	*o = 0;
	kvmem_check_run_free(&r);
	return s;
}

/* @text has @line as a whole line. */
static void expect_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	const char *p;

	for (p = text; (p = strstr(p, line)); p++)
		if ((p == text || p[-1] == '\n') && p[n] == '\n')
			return;
	ck_abort_msg("no line \"%s\" in:\n%s", line, text);
}

/* The value of the sample @series in the exposition @text. */
static unsigned long long sample(const char *text, const char *series)
{
	size_t n = strlen(series);
	const char *p;

	for (p = text; (p = strstr(p, series)); p++)
		if ((p == text || p[-1] == '\n') && p[n] == ' ')
			return strtoull(p + n + 1, NULL, 10);
	ck_abort_msg("no sample %s in:\n%s", series, text);
	return 0;
}

/* Keys of a prompt of this test's own (@t), so that no other test's
 * blocks in the cluster match them. */
static void keys_of(struct kvmem_prefix_key *k, int t)
{
	uint32_t i;

	memset(k, 0, NBLOCKS * sizeof(*k));
	for (i = 0; i < NBLOCKS; i++) {
		k[i].bytes[0] = (uint8_t)t;
		k[i].bytes[1] = (uint8_t)(t >> 8);
		k[i].bytes[2] = (uint8_t)i;
		k[i].bytes[31] = 0x5a;
	}
}

/* The blocks of TOKENS tokens that are whole, on a session of @p. */
static uint32_t whole_blocks(struct kvmem_cache *c)
{
	uint32_t n = 0;

	while (n < NBLOCKS && kvmem_prefix_block_end(c, n) <= TOKENS)
		n++;
	return n;
}

static void remote_start(struct kvmemd_proc *p, const char *seeds)
{
	char conf[512];

	snprintf(conf, sizeof(conf),
		 "[remote]\nseeds = %s\ntimeout_ms = 500\nretries = 8\n",
		 seeds);
	kvmemd_start(p, conf, NULL);
}

/* No shared tier: one sentence, and no series of it. */
START_TEST(test_remote_ctl_none)
{
	struct kvmemd_proc p;
	char *out;

	kvmemd_start(&p, NULL, NULL);
	out = ctl(&p, "remote");
	ck_assert_str_eq(out,
			 "no shared tier: set remote.seeds in kvmemd.conf\n");
	free(out);
	out = ctl(&p, "metrics");
	ck_assert_ptr_null(strstr(out, "kvmem_remote_"));
	ck_assert_ptr_nonnull(strstr(out, "# TYPE kvmem_tier_pages gauge\n"));
	free(out);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* A cluster that does not answer: unreachable, with kvmemd's reason,
 * and the one fetch an attach of unpublished keys makes, failed. */
START_TEST(test_remote_ctl_unreachable)
{
	struct kvmem_prefix_key keys[NBLOCKS];
	struct kvmem_cache *c;
	struct kvmem_seq *t;
	struct kvmemd_proc p;
	char json[8192], line[600], *out, *reason, *end;

	keys_of(keys, 5101);
	remote_start(&p, "127.0.0.1:1");
	out = ctl(&p, "remote");
	expect_line(out, "state ok, nothing asked of the cluster yet");
	free(out);
	c = kvmemd_connect(&p, 8u << 20);
	ck_assert_int_eq(kvmem_prefix_attach(c, keys, NBLOCKS, &t), 0);
	kvmem_seq_free(t);
	kvmem_close(c);

	/* The reason as kvmemd gives it, shown as it is. */
	kvmemd_admin_ok(&p, json, sizeof(json), "remote");
	reason = strstr(json, "\"reason\":\"");
	ck_assert_ptr_nonnull(reason);
	reason += strlen("\"reason\":\"");
	end = strchr(reason, '"');
	ck_assert_ptr_nonnull(end);
	*end = 0;
	ck_assert_ptr_nonnull(strstr(reason, "127.0.0.1:1"));
	out = ctl(&p, "remote");
	ck_assert_msg(strstr(out, "\nstate unreachable since "), "%s", out);
	snprintf(line, sizeof(line), " ago): %s\n", reason);
	ck_assert_msg(strstr(out, line), "no \"%s\" in:\n%s", line, out);
	expect_line(out, "cluster redis at 127.0.0.1:1");
	expect_line(out, "fetches 1 (1 failed) for 8 blocks: 0 hits, 0 "
			 "misses, 0 unanswered");
	expect_line(out, "no masters known yet");
	free(out);

	out = ctl(&p, "metrics");
	ck_assert_uint_eq(sample(out, "kvmem_remote_up"), 0);
	ck_assert_uint_eq(sample(out, "kvmem_remote_fetches_total"), 1);
	ck_assert_uint_eq(sample(out, "kvmem_remote_fetch_errors_total"), 1);
	ck_assert_uint_eq(sample(out, "kvmem_remote_masters"), 0);
	ck_assert_uint_eq(
		sample(out, "kvmem_remote_fetch_blocks_total{result=\"hit\"}"),
		0);
	free(out);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* Published on A, attached on B: A's pushes and B's fetch, as counted
 * here, in both tables and both expositions. */
START_TEST(test_remote_ctl_cluster)
{
	struct kvmem_prefix_key keys[NBLOCKS];
	struct kvmemd_proc a, b;
	struct kvmem_cache *c;
	struct kvmem_seq *s, *t;
	struct kvmem_rng r;
	char json[8192], line[256], *out;
	unsigned long long slots = 0, bytes;
	uint32_t whole, got;
	float *k, *v;
	int i, n;
	const char *p;

	NEED_CLUSTER();
	kvmem_rng_seed(&r, 5102);
	keys_of(keys, 5102);
	remote_start(&a, rc.seeds);
	remote_start(&b, rc.seeds);

	c = kvmemd_connect(&a, 8u << 20);
	whole = whole_blocks(c);
	ck_assert_uint_gt(whole, 1);
	ck_assert_uint_lt(whole, NBLOCKS);
	kvmemd_tokens(&r, TOKENS, &k, &v);
	s = kvmemd_seq_with(c, k, v, TOKENS);
	ck_assert_int_eq(kvmem_prefix_publish(s, keys, NBLOCKS), (int)whole);
	got = kvmem_prefix_block_end(c, whole - 1);
	kvmem_seq_free(s);
	kvmem_close(c);
	for (i = 0; i < 1000; i++) {
		kvmemd_admin_ok(&a, json, sizeof(json), "remote");
		if (kvmemd_json_after(json, "\"push\"", "pushed") >= whole)
			break;
		usleep(10000);
	}
	c = kvmemd_connect(&b, 8u << 20);
	ck_assert_int_eq(kvmem_prefix_attach(c, keys, NBLOCKS, &t), (int)got);
	kvmem_seq_free(t);
	kvmem_close(c);

	out = ctl(&a, "remote");
	expect_line(out, "state ok");
	snprintf(line, sizeof(line), "\npushes %u blocks pushed (", whole);
	ck_assert_msg(strstr(out, line), "no \"%s\" in:\n%s", line, out);
	ck_assert_msg(strstr(out, "), 0 there already, 0 dropped (queue "
				  "full), 0 unchained, 0 failed\n"),
		      "%s", out);
	expect_line(out, "fetches 0 (0 failed) for 0 blocks: 0 hits, 0 "
			 "misses, 0 unanswered");
	expect_line(out, "MASTER SLOTS CONNECTED");
	/* Every master, its slots as the cluster was made: all of them. */
	for (i = 0; i < rc.masters; i++) {
		snprintf(line, sizeof(line), "\n127.0.0.1:%d ",
			 rc.node[i].port);
		p = strstr(out, line);
		ck_assert_msg(p, "no master %s in:\n%s", line + 1, out);
		slots += strtoull(p + strlen(line), NULL, 10);
	}
	ck_assert_uint_eq(slots, 16384);
	free(out);

	out = ctl(&b, "remote");
	snprintf(line, sizeof(line),
		 "fetches 1 (0 failed) for %u blocks: %u hits, %u misses, 0 "
		 "unanswered",
		 NBLOCKS, whole, NBLOCKS - whole);
	expect_line(out, line);
	snprintf(line, sizeof(line), "\nkept %u blocks (", whole);
	ck_assert_msg(strstr(out, line), "no \"%s\" in:\n%s", line, out);
	expect_line(out, "repaired 0 records (0 written back), 0 deleted; 0 "
			 "words corrected, 0 uncorrectable");
	expect_line(out, "refused header 0, tenant 0, shape 0, chain 0, "
			 "payload 0, page 0");
	expect_line(out, "pushes 0 blocks pushed (0 B), 0 there already, 0 "
			 "dropped (queue full), 0 unchained, 0 failed");
	free(out);

	out = ctl(&a, "metrics");
	ck_assert_uint_eq(sample(out, "kvmem_remote_up"), 1);
	ck_assert_uint_eq(
		sample(out, "kvmem_remote_push_total{result=\"pushed\"}"),
		whole);
	ck_assert_uint_eq(
		sample(out, "kvmem_remote_push_total{result=\"present\"}"), 0);
	ck_assert_uint_eq(sample(out, "kvmem_remote_masters"),
			  (unsigned)rc.masters);
	kvmemd_admin_ok(&a, json, sizeof(json), "remote");
	ck_assert_uint_eq(sample(out, "kvmem_remote_pushed_bytes_total"),
			  kvmemd_json_after(json, "\"push\"", "bytes"));
	/* Records go out whole, with the commands around them. */
	ck_assert_uint_gt(sample(out, "kvmem_remote_bytes_total{direction="
				      "\"out\"}"),
			  sample(out, "kvmem_remote_pushed_bytes_total"));
	free(out);

	out = ctl(&b, "metrics");
	ck_assert_uint_eq(sample(out, "kvmem_remote_fetches_total"), 1);
	ck_assert_uint_eq(sample(out, "kvmem_remote_fetch_errors_total"), 0);
	ck_assert_uint_eq(
		sample(out, "kvmem_remote_fetch_blocks_total{result=\"hit\"}"),
		whole);
	ck_assert_uint_eq(
		sample(out, "kvmem_remote_fetch_blocks_total{result=\"miss\"}"),
		NBLOCKS - whole);
	ck_assert_uint_eq(sample(out, "kvmem_remote_kept_total"), whole);
	ck_assert_uint_eq(sample(out, "kvmem_remote_repaired_total"), 0);
	ck_assert_uint_eq(sample(out, "kvmem_remote_deleted_total"), 0);
	for (n = 0, p = out; (p = strstr(p, "\nkvmem_remote_refused_total{"));
	     p++, n++)
		ck_assert_ptr_nonnull(strstr(p, "\"} 0\n"));
	ck_assert_int_eq(n, 6);
	bytes = sample(out, "kvmem_remote_fetched_bytes_total");
	free(out);
	/* What A pushed is what B read. */
	ck_assert_uint_eq(bytes, kvmemd_json_after(json, "\"push\"", "bytes"));

	ck_assert_int_eq(kvmemd_stop(&a), 0);
	ck_assert_int_eq(kvmemd_stop(&b), 0);
	kvmemd_cleanup(&a);
	kvmemd_cleanup(&b);
	free(k);
	free(v);
}
END_TEST

KVMEM_SUITE(remote_ctl)
{
	Suite *s = suite_create("remote_ctl");
	TCase *tc = tcase_create("cluster");
	TCase *alone = tcase_create("alone");

	tcase_add_unchecked_fixture(tc, cluster_setup, cluster_teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_remote_ctl_cluster);
	suite_add_tcase(s, tc);
	tcase_add_test(alone, test_remote_ctl_none);
	tcase_add_test(alone, test_remote_ctl_unreachable);
	suite_add_tcase(s, alone);
	return s;
}
