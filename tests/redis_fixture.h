/* SPDX-License-Identifier: MIT */
/*
 * redis_fixture.h - the Redis Cluster of a tcase, for the suites of the
 * shared tier (rcluster, remote, remote_ctl)
 *
 * A tcase's unchecked fixture starts a cluster (tools/redis-cluster.h)
 * with cluster_fixture_up() and stops it with cluster_fixture_down(); each
 * test begins with NEED_CLUSTER(), which skips it, saying so, where the
 * machine has no redis-server, and fails it where the cluster did not
 * start. One cluster at a time in a suite's process.
 */
#ifndef KVMEM_TESTS_REDIS_FIXTURE_H
#define KVMEM_TESTS_REDIS_FIXTURE_H

#include "../tools/redis-cluster.h"

void cluster_fixture_up(struct redis_cluster *rc, int masters,
			int replicas_per_master);
void cluster_fixture_down(struct redis_cluster *rc);
/* 1 when @test is to be skipped (the line said); fails @test when the
 * cluster did not start; 0 when it runs. */
int cluster_fixture_skip(const char *test);

#define NEED_CLUSTER()                               \
	do {                                         \
		if (cluster_fixture_skip(__func__)) \
			return;                      \
	} while (0)

#endif /* KVMEM_TESTS_REDIS_FIXTURE_H */
