/* SPDX-License-Identifier: MIT */
/*
 * redis_fixture.c - the Redis Cluster of a tcase (redis_fixture.h)
 */
#include <stdio.h>
#include <string.h>

#include "kvmem_check.h"
#include "redis_fixture.h"

/* What the last cluster_fixture_up() got from redis_cluster_start(). */
static int state = -1;
static const char *why = "no cluster was started";

void cluster_fixture_up(struct redis_cluster *rc, int masters,
			int replicas_per_master)
{
	state = redis_cluster_start(rc, masters, replicas_per_master, &why);
}

void cluster_fixture_down(struct redis_cluster *rc)
{
	if (!state)
		redis_cluster_stop(rc);
	state = -1;
	why = "no cluster was started";
}

int cluster_fixture_skip(const char *test)
{
	size_t n = strlen(test);

	/* START_TEST(name) defines name_fn. */
	if (n > 3 && !strcmp(test + n - 3, "_fn"))
		n -= 3;
	if (state > 0) {
		printf("SKIP: %.*s: no Redis Cluster: %s\n", (int)n, test, why);
		return 1;
	}
	ck_assert_msg(state == 0, "cannot start a Redis Cluster: %s", why);
	return 0;
}
