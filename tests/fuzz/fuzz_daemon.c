/* SPDX-License-Identifier: MIT */
/*
 * fuzz_daemon.c - the daemon the admin and hello targets drive: what
 * kvmemd_run() sets up, less the sockets and the loop (with no
 * NOTIFY_SOCKET, notify.c keeps no session)
 */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../../daemon/kvmemd.h"
#include "fuzz_daemon.h"

static struct kvmemd d;
static char dir[] = "/tmp/kvmem-fuzz.XXXXXX";

static int rm_entry(const char *path, const struct stat *st, int flag,
		    struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void done(void)
{
	kvmemd_tier_exit(&d);
	kvmemd_prefix_exit(&d);
	kvmemd_ras_exit(&d);
	kvmemd_policy_free(&d);
	kvmemd_users_free(&d);
	nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

struct kvmemd *fuzz_daemon(void)
{
	static int ready;

	if (ready)
		return &d;
	kvmemd_config_defaults(&d.cfg);
	kvmemd_log_init(LOG_CRIT);
	d.cfg.log_level = LOG_CRIT;
	d.cfg.host_bytes = 256ull << 20;
	d.cfg.session_max_bytes = 64ull << 20;
	d.cfg.session_default_bytes = 1ull << 20;
	d.cfg.hugepages = KVMEMD_NO;
	d.cfg.mlock = KVMEMD_NO;
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		abort();
	}
	snprintf(d.cfg.state_dir, sizeof(d.cfg.state_dir), "%s", dir);
	d.start_mono = kvmemd_now_ns();
	if (kvmemd_ras_init(&d) || kvmemd_tier_init(&d) ||
	    kvmemd_prefix_init(&d)) {
		fprintf(stderr, "fuzz: cannot set up the daemon\n");
		abort();
	}
	atexit(done);
	ready = 1;
	return &d;
}
