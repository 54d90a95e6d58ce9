/* SPDX-License-Identifier: MIT */
/*
 * kvmemctl - the operator's command line for kvmemd
 *
 * Speaks kvmemd's admin protocol (version 1, man kvmemctl(8)): one request
 * per SOCK_SEQPACKET datagram, words separated by single spaces; the reply
 * is one JSON object ending in "\n", in datagrams of at most 32 KiB. Every
 * reply is untrusted input (ctl.c says how it is read).
 *
 * Human output is rendered into memory first and printed only when the
 * whole reply made sense; --json prints the reply itself, re-serialized
 * compactly. Exit status: 0 done, 1 the daemon refused or failed the
 * request (or its reply was unusable), 2 usage, 3 kvmemd unreachable,
 * 4 access denied.
 *
 * Here: the command line, and the commands of the daemon, its sessions,
 * tiers, prefixes, shared tier and policy. What every command uses (the
 * socket, the reading of replies, tables) is ctl.c's; the reliability
 * commands are ctl-ras.c's, the Prometheus exposition ctl-metrics.c's and
 * its HTTP exporter ctl-http.c's.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl-http.h"
#include "ctl-metrics.h"
#include "ctl-ras.h"
#include "ctl.h"
#include "json.h"
#include "kvmem/uapi.h"
#include "kvmem-private.h"

#define ADMIN_SOCKET_NAME "kvmemd-admin.sock"

/* ---- status, stats ---------------------------------------------------- */

/* The GPU pool: its device and use, or why kvmemd has none. */
static void gpu_line(struct rd *r, struct table *t, const struct json *g)
{
	const struct json *dev = json_get(g, "device");
	char a[32], b[32], c[32], name[128], uuid[48], why[256];
	uint64_t bytes, used;

	if (!g)
		return;
	if (dev && dev->type == JSON_NULL) {
		kv(t, "gpu pool", "none: %s",
		   g_str(r, g, "why", why, sizeof(why)));
		return;
	}
	bytes = g_u64(r, g, "bytes");
	used = g_u64(r, g, "used_bytes");
	kv(t, "gpu pool",
	   "%s of %s used (%s held by processes of ended "
	   "sessions) on %s, %s",
	   fmt_bytes(a, sizeof(a), (double)used),
	   fmt_bytes(b, sizeof(b), (double)bytes),
	   fmt_bytes(c, sizeof(c), (double)g_u64(r, g, "held_bytes")),
	   g_str(r, g, "name", name, sizeof(name)),
	   g_str(r, g, "device", uuid, sizeof(uuid)));
	if (!json_get(g, "promoted_pages")) /* an older kvmemd: no tier */
		return;
	kv(t, "gpu tier",
	   "%llu pages moved to the GPU, %llu back (%s in all); %llu copies "
	   "failed, %llu pages came back changed; %llu pages checked there "
	   "in place, %llu in copies; %s of host memory pinned, %llu "
	   "sessions unpinned",
	   (unsigned long long)g_u64(r, g, "promoted_pages"),
	   (unsigned long long)g_u64(r, g, "demoted_pages"),
	   fmt_bytes(a, sizeof(a), (double)g_u64(r, g, "moved_bytes")),
	   (unsigned long long)g_u64(r, g, "move_errors"),
	   (unsigned long long)g_u64(r, g, "changed_pages"),
	   (unsigned long long)g_u64(r, g, "checked_in_place"),
	   (unsigned long long)g_u64(r, g, "checked_in_copies"),
	   fmt_bytes(b, sizeof(b), (double)g_u64(r, g, "pinned_bytes")),
	   (unsigned long long)g_u64(r, g, "unpinned_sessions"));
}

/* What kvmemd took back at its start of the sessions the last one kept. */
static void restart_line(struct rd *r, struct table *t, const struct json *v)
{
	uint64_t taken = g_u64(r, v, "taken_back");
	uint64_t crash = g_u64(r, v, "after_crash");
	uint64_t refused = g_u64(r, v, "refused");
	uint64_t blocks = 0, dropped = 0, read = 0, bad = 0;
	char store[96] = "";

	/* A kvmemd older than kept prefixes, or than blocks on the store,
	 * says nothing of them. */
	if (json_get(v, "prefix_blocks_taken_back")) {
		blocks = g_u64(r, v, "prefix_blocks_taken_back");
		dropped = g_u64(r, v, "prefix_blocks_refused");
	}
	if (json_get(v, "store_blocks_taken_back")) {
		read = g_u64(r, v, "store_blocks_taken_back");
		bad = g_u64(r, v, "store_blocks_refused");
	}
	if (read || bad)
		snprintf(store, sizeof(store),
			 "; %" PRIu64 " read back from the store, %" PRIu64
			 " refused",
			 read, bad);
	if (!taken && !refused && !blocks && !dropped && !read && !bad)
		return;
	kv(t, "at start",
	   "%" PRIu64 " kept sessions taken back (%" PRIu64
	   " after a crash), %" PRIu64 " refused; %" PRIu64
	   " published prefix blocks taken back, %" PRIu64
	   " refused%s (the log says why)",
	   taken, crash, refused, blocks, dropped, store);
}

static void render_status(struct rd *r, FILE *f, const struct json *v)
{
	const struct json *sc = g_obj(r, v, "scrub");
	uint64_t bytes = g_u64(r, v, "pool_bytes");
	uint64_t used = g_u64(r, v, "pool_used_bytes");
	char a[32], b[32], ver[64], state[32];
	struct table t;

	t_init(&t, "ll");
	kv(&t, "kvmemd", "%s, pid %" PRIu64 ", up %s",
	   g_str(r, v, "version", ver, sizeof(ver)), g_u64(r, v, "pid"),
	   fmt_dur(a, sizeof(a), g_num(r, v, "uptime_s")));
	kv(&t, "sessions",
	   "%" PRIu64 " (%" PRIu64 " attached, %" PRIu64 " refused, %" PRIu64
	   " detached, %" PRIu64 " dropped since start)",
	   g_u64(r, v, "sessions"), g_u64(r, v, "attached"),
	   g_u64(r, v, "refused"), g_u64(r, v, "detached"),
	   g_u64(r, v, "dropped"));
	/* An older kvmemd keeps none, and says nothing of it. */
	if (json_get(v, "kept_sessions") && g_u64(r, v, "kept_sessions"))
		kv(&t, "kept",
		   "%" PRIu64 " of them wait for their clients after a "
		   "restart",
		   g_u64(r, v, "kept_sessions"));
	/* An older kvmemd says nothing of its start. */
	if (json_get(v, "restart"))
		restart_line(r, &t, g_obj(r, v, "restart"));
	kv(&t, "connections",
	   "%" PRIu64 " closed waiting for their hello, %" PRIu64
	   " refused for want of descriptors",
	   g_u64(r, v, "evicted"), g_u64(r, v, "accept_errors"));
	kv(&t, "host pool", "%s of %s used (%.1f%%)",
	   fmt_bytes(a, sizeof(a), (double)used),
	   fmt_bytes(b, sizeof(b), (double)bytes),
	   bytes ? 100.0 * (double)used / (double)bytes : 0.0);
	if (json_get(v, "gpu_pool")) /* an older kvmemd sends none */
		gpu_line(r, &t, g_obj(r, v, "gpu_pool"));
	kv(&t, "ops", "%" PRIu64, g_u64(r, v, "ops"));
	kv(&t, "scrub", "%s, %s",
	   g_bool(r, sc, "enabled") ? "enabled" : "disabled",
	   g_str(r, sc, "state", state, sizeof(state)));
	t_done(r, &t, f);
}

static int cmd_status(struct ctl *c, int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return ctl_simple(c, "status", REPLY_TIMEOUT_MS, render_status);
}

/* What the previous sample of stats --watch said, for rates. */
static struct {
	bool have;
	double uptime;
	uint64_t ops, scrub_bytes;
} prev;

static void render_stats(struct rd *r, FILE *f, const struct json *v)
{
	static const char *const head[] = { "POOL",	     "SIZE",
					    "RESERVED",	     "OPEN",
					    "SEALED",	     "FREE",
					    "DEGRADED PAGES" };
	const struct json *d = g_obj(r, v, "daemon");
	const struct json *sc = g_obj(r, v, "scrub");
	const struct json *pools;
	double up = g_num(r, v, "uptime_s"), dt;
	uint64_t ops = g_u64(r, d, "ops");
	uint64_t sbytes = g_u64(r, sc, "bytes_total");
	char a[32], b[32], name[32];
	struct table t;
	size_t n, i;

	dt = prev.have ? up - prev.uptime : 0;
	t_init(&t, "ll");
	kv(&t, "uptime", "%s (counters reset %s ago)",
	   fmt_dur(a, sizeof(a), up),
	   fmt_dur(b, sizeof(b), g_num(r, v, "seconds_since_reset")));
	kv(&t, "sessions",
	   "%" PRIu64 " (%" PRIu64 " attached, %" PRIu64 " refused, %" PRIu64
	   " detached, %" PRIu64 " dropped since start)",
	   g_u64(r, d, "sessions"), g_u64(r, d, "attached"),
	   g_u64(r, d, "refused"), g_u64(r, d, "detached"),
	   g_u64(r, d, "dropped"));
	if (dt > 0 && ops >= prev.ops)
		kv(&t, "ops", "%" PRIu64 " (%.1f/s)", ops,
		   (double)(ops - prev.ops) / dt);
	else
		kv(&t, "ops", "%" PRIu64, ops);
	kv(&t, "scrub",
	   "%" PRIu64 " passes, %s in %" PRIu64 " pages; CE %" PRIu64
	   ", UE %" PRIu64 " words since reset",
	   g_u64(r, sc, "passes"), fmt_bytes(a, sizeof(a), (double)sbytes),
	   g_u64(r, sc, "pages_total"), g_u64(r, sc, "ce"), g_u64(r, sc, "ue"));
	if (dt > 0 && sbytes >= prev.scrub_bytes)
		kv(&t, "scrub rate", "%s",
		   fmt_rate(a, sizeof(a),
			    (double)(sbytes - prev.scrub_bytes) / dt));
	t_done(r, &t, f);

	fputc('\n', f);
	t_init(&t, "lrrrrrr");
	t_row(&t, head);
	pools = g_arr(r, v, "pools", &n);
	for (i = 0; i < n; i++) {
		const struct json *p = &pools[i];

		t_cell(&t, "%s", g_str(r, p, "pool", name, sizeof(name)));
		t_cell(&t, "%s", fmt_bytes(a, sizeof(a), g_u64(r, p, "bytes")));
		t_cell(&t, "%s",
		       fmt_bytes(a, sizeof(a), g_u64(r, p, "reserved_bytes")));
		t_cell(&t, "%s",
		       fmt_bytes(a, sizeof(a), g_u64(r, p, "open_bytes")));
		t_cell(&t, "%s",
		       fmt_bytes(a, sizeof(a), g_u64(r, p, "sealed_bytes")));
		t_cell(&t, "%s",
		       fmt_bytes(a, sizeof(a), g_u64(r, p, "free_bytes")));
		t_cell(&t, "%" PRIu64, g_u64(r, p, "degraded_pages"));
	}
	t_done(r, &t, f);
	if (!r->err[0]) {
		prev.have = true;
		prev.uptime = up;
		prev.ops = ops;
		prev.scrub_bytes = sbytes;
	}
}

static int sleep_s(double s)
{
	struct timespec ts = { .tv_sec = (time_t)s };

	ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
	while (!ctl_stop && nanosleep(&ts, &ts) && errno == EINTR)
		;
	return ctl_stop;
}

static int cmd_stats(struct ctl *c, int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = ctl_on_stop };
	int ret, tty = isatty(STDOUT_FILENO);

	(void)argc;
	(void)argv;
	if (!(c->given & O_WATCH))
		return ctl_simple(c, "stats", REPLY_TIMEOUT_MS, render_stats);
	/* No SA_RESTART: Ctrl-C ends the wait at once. */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	for (;;) {
		if (tty && !(c->given & O_JSON)) {
			char now[32];

			fputs("\033[H\033[2J", stdout);
			printf("%s  every %gs  (Ctrl-C ends)\n\n",
			       fmt_time(now, sizeof(now), (double)time(NULL)),
			       c->watch);
		} else if (prev.have && !(c->given & O_JSON)) {
			putchar('\n');
		}
		/* A fresh connection each time: kvmemd closes idle ones. */
		ret = ctl_simple(c, "stats", REPLY_TIMEOUT_MS, render_stats);
		ctl_close(c);
		if (ctl_stop)
			return CTL_OK;
		if (ret)
			return ret;
		if (fflush(stdout))
			return CTL_FAILED;
		if (sleep_s(c->watch))
			return CTL_OK;
	}
}

/* ---- sessions, seqs --------------------------------------------------- */

static void render_sessions(struct rd *r, FILE *f, const struct json *v)
{
	static const char *const head[] = {
		"ID",	    "PID",    "UID",	"ARENA",  "USED",  "COLD",
		"OPEN",	    "SEALED", "SEQS",	"ACQ",	  "OPS",   "OP ERRS",
		"CE",	    "UE",     "DEGR",	"FORMAT", "CODEC", "LAYERS",
		"KV HEADS", "DIM",    "TOK/PG",
	};
	const struct json *s;
	char a[32], fmt[32], codec[32], rot[16];
	struct table t;
	size_t n, i;

	s = g_arr(r, v, "sessions", &n);
	if (!n) {
		fputs("no sessions\n", f);
		return;
	}
	t_init(&t, "rrrrrrrrrrrrrrrllrrrr");
	t_row(&t, head);
	for (i = 0; i < n; i++) {
		const struct json *e = &s[i];

		t_cell(&t, "%" PRIu64, g_u64(r, e, "id"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "pid"));
		/* Events recorded before kvmemd kept the user have none. */
		if (json_get(e, "uid"))
			t_cell(&t, "%" PRIu64, g_u64(r, e, "uid"));
		else
			t_cell(&t, "-");
		t_cell(&t, "%s",
		       fmt_bytes(a, sizeof(a), g_u64(r, e, "arena_bytes")));
		t_cell(&t, "%s",
		       fmt_bytes(a, sizeof(a), g_u64(r, e, "used_bytes")));
		t_cell(&t, "%s",
		       fmt_bytes(a, sizeof(a), g_u64(r, e, "cold_bytes")));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "slots_open"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "slots_sealed"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "seqs"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "seqs_acquired"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "ops"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "op_errors"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "ce"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "ue"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "degraded_pages"));
		/* Rotated rows (a kvmemd older than rotations sends none). */
		g_str(r, e, "format", fmt, sizeof(fmt));
		if (json_get(e, "rotation") &&
		    strcmp(g_str(r, e, "rotation", rot, sizeof(rot)), "none"))
			t_cell(&t, "%s/%s", fmt, rot);
		else
			t_cell(&t, "%s", fmt);
		t_cell(&t, "%s", g_str(r, e, "codec", codec, sizeof(codec)));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "layers"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "kv_heads"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "head_dim"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "tokens_per_page"));
	}
	t_done(r, &t, f);
}

static int cmd_sessions(struct ctl *c, int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return ctl_simple(c, "sessions", REPLY_TIMEOUT_MS, render_sessions);
}

static void render_seqs(struct rd *r, FILE *f, const struct json *v)
{
	static const char *const head[] = { "SESSION",	     "SEQ",  "ACQUIRED",
					    "PAGES",	     "COLD", "TOKENS",
					    "DEGRADED PAGES" };
	const struct json *s;
	struct table t;
	size_t n, i;

	s = g_arr(r, v, "seqs", &n);
	if (!n) {
		fputs("no sequences\n", f);
		return;
	}
	t_init(&t, "rrlrrrr");
	t_row(&t, head);
	for (i = 0; i < n; i++) {
		const struct json *e = &s[i];

		t_cell(&t, "%" PRIu64, g_u64(r, e, "session"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "seq"));
		t_cell(&t, "%s", g_bool(r, e, "acquired") ? "yes" : "no");
		t_cell(&t, "%" PRIu64, g_u64(r, e, "pages"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "cold_pages"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "tokens"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "degraded_pages"));
	}
	t_done(r, &t, f);
}

static int cmd_seqs(struct ctl *c, int argc, char **argv)
{
	char req[64];
	uint64_t id;

	if (argc == 0)
		return ctl_simple(c, "seqs", REPLY_TIMEOUT_MS, render_seqs);
	if (id_arg("SESSION", argv[0], &id))
		return CTL_USAGE;
	snprintf(req, sizeof(req), "seqs %" PRIu64, id);
	return ctl_simple(c, req, REPLY_TIMEOUT_MS, render_seqs);
}

/* ---- tier, offload ---------------------------------------------------- */

/* The archive tier's policy line of tier. */
static void archive_policy(struct rd *r, struct table *t,
			   const struct json *pol)
{
	uint64_t age = g_u64(r, pol, "archive_tokens");
	/* A kvmemd older than the budget sends none. */
	double budget = json_get(pol, "bits_budget")
				? g_num(r, pol, "bits_budget")
				: 0.0;
	char fmt[16], codec[16], a[32], b[128];

	g_str(r, pol, "archive_format", fmt, sizeof(fmt));
	g_str(r, pol, "archive_codec", codec, sizeof(codec));
	if (!age && budget <= 0) {
		kv(t, "archive", "off (tier.archive_tokens = 0)");
		return;
	}
	if (budget > 0 && age)
		snprintf(b, sizeof(b),
			 "%" PRIu64 " tokens old, the coldest while a session "
			 "averages over %g bits",
			 age, budget);
	else if (budget > 0)
		snprintf(b, sizeof(b),
			 "the coldest while a session averages over %g bits",
			 budget);
	else
		snprintf(b, sizeof(b), "%" PRIu64 " tokens old", age);
	kv(t, "archive", "released pages %s in %s%s%s, heat at most %.3g, %s/s",
	   b, strcmp(fmt, "same") ? fmt : "", strcmp(fmt, "same") ? " + " : "",
	   codec, g_num(r, pol, "archive_heat"),
	   fmt_bytes(a, sizeof(a), (double)g_u64(r, pol, "archive_rate")));
}

/* Published blocks kept on the store, when they are. */
static void render_store_prefixes(struct rd *r, FILE *f, const struct json *p)
{
	char a[32], b[32];
	struct table t;
	uint64_t keep;

	if (!p)
		return;
	fputc('\n', f);
	t_init(&t, "ll");
	kv(&t, "prefix blocks", "%" PRIu64 " on the store, %s of %s",
	   g_u64(r, p, "blocks"),
	   fmt_bytes(a, sizeof(a), (double)g_u64(r, p, "bytes")),
	   fmt_bytes(b, sizeof(b), (double)g_u64(r, p, "retain_bytes")));
	keep = g_u64(r, p, "retain_seconds");
	if (keep)
		kv(&t, "retained", "%" PRIu64 " s unattached", keep);
	else
		kv(&t, "retained", "until room is needed");
	kv(&t, "written",
	   "%" PRIu64 ", %s; %" PRIu64 " not (busy), %" PRIu64
	   " not (store full), %" PRIu64 " errors",
	   g_u64(r, p, "written"),
	   fmt_bytes(a, sizeof(a), (double)g_u64(r, p, "written_bytes")),
	   g_u64(r, p, "skipped"), g_u64(r, p, "nospace"),
	   g_u64(r, p, "write_errors"));
	kv(&t, "read back",
	   "%" PRIu64 " at start, %" PRIu64 " fetched; %" PRIu64
	   " refused, %" PRIu64 " corrected",
	   g_u64(r, p, "taken"), g_u64(r, p, "fetched"), g_u64(r, p, "refused"),
	   g_u64(r, p, "repaired"));
	kv(&t, "gone",
	   "%" PRIu64 " for room, %" PRIu64 " expired, %" PRIu64 " dropped",
	   g_u64(r, p, "reclaimed"), g_u64(r, p, "expired"),
	   g_u64(r, p, "dropped"));
	kv(&t, "index",
	   "generation %" PRIu64 ", %" PRIu64 " written, %" PRIu64
	   " failed, %" PRIu64 " extents held for the next",
	   g_u64(r, p, "index_generation"), g_u64(r, p, "indexes"),
	   g_u64(r, p, "index_errors"), g_u64(r, p, "held_extents"));
	t_done(r, &t, f);
}

static void render_tier(struct rd *r, FILE *f, const struct json *v)
{
	static const char *const head[] = { "TIER", "PAGES", "BYTES" };
	static const char *const tiers[] = { "hot", "warm", "archive", "cold",
					     "gpu" };
	const struct json *pol = g_obj(r, v, "policy");
	const struct json *ts = g_obj(r, v, "tiers");
	const struct json *st = g_obj_or_null(r, v, "store");
	const bool arch = has_archive(v);
	uint64_t stale = g_u64(r, pol, "stale_tokens");
	uint64_t units, used, unit;
	char a[32], b[32], stale_s[64], path[1024], engine[32], uuid[64];
	struct table t;
	size_t i;

	if (stale)
		snprintf(stale_s, sizeof(stale_s),
			 "stale after %" PRIu64 " tokens", stale);
	else
		snprintf(stale_s, sizeof(stale_s), "age does not count");
	t_init(&t, "ll");
	kv(&t, "policy",
	   "offload %s, watermarks %" PRIu64 "%% / %" PRIu64 "%% free, %s",
	   g_bool(r, pol, "offload") ? "on" : "off",
	   g_u64(r, pol, "low_watermark"), g_u64(r, pol, "high_watermark"),
	   stale_s);
	if (arch)
		archive_policy(r, &t, pol);
	t_done(r, &t, f);

	fputc('\n', f);
	t_init(&t, "lrr");
	t_row(&t, head);
	for (i = 0; i < sizeof(tiers) / sizeof(tiers[0]); i++) {
		const struct json *e;

		if (!tier_shown(ts, tiers[i], arch))
			continue;
		e = g_obj(r, ts, tiers[i]);
		t_cell(&t, "%s", tiers[i]);
		t_cell(&t, "%" PRIu64, g_u64(r, e, "pages"));
		t_cell(&t, "%s",
		       fmt_bytes(a, sizeof(a), (double)g_u64(r, e, "bytes")));
	}
	t_done(r, &t, f);

	fputc('\n', f);
	t_init(&t, "ll");
	kv(&t, "offloads", "%" PRIu64 " pages, %s", g_u64(r, v, "offloads"),
	   fmt_bytes(a, sizeof(a), (double)g_u64(r, v, "offload_bytes")));
	kv(&t, "reloads",
	   "%" PRIu64 " pages, %s, %" PRIu64 " degraded, %" PRIu64
	   " lost (values erased)",
	   g_u64(r, v, "reloads"),
	   fmt_bytes(a, sizeof(a), (double)g_u64(r, v, "reload_bytes")),
	   g_u64(r, v, "reload_degraded"), g_u64(r, v, "reload_lost"));
	kv(&t, "waits", "%" PRIu64 " ops waited for pages to move",
	   g_u64(r, v, "waits"));
	if (arch)
		kv(&t, "archived",
		   "%" PRIu64 " pages, %s, %" PRIu64 " refused (not as sealed)",
		   g_u64(r, v, "archived"),
		   fmt_bytes(a, sizeof(a),
			     (double)g_u64(r, v, "archived_bytes")),
		   g_u64(r, v, "archive_refused"));
	kv(&t, "errors",
	   "%" PRIu64 " writes, %" PRIu64 " reads, %" PRIu64 " out of space",
	   g_u64(r, v, "write_errors"), g_u64(r, v, "read_errors"),
	   g_u64(r, v, "nospace"));
	t_done(r, &t, f);

	fputc('\n', f);
	if (!st) {
		fputs("no backing store (store.path is empty)\n", f);
		return;
	}
	units = g_u64(r, st, "units");
	used = g_u64(r, st, "used_units");
	unit = g_store_unit(r, st);
	t_init(&t, "ll");
	kv(&t, "store", "%s", g_str(r, st, "path", path, sizeof(path)));
	kv(&t, "engine", "%s", g_str(r, st, "engine", engine, sizeof(engine)));
	kv(&t, "uuid", "%s", g_str(r, st, "uuid", uuid, sizeof(uuid)));
	kv(&t, "generation", "%" PRIu64, g_u64(r, st, "generation"));
	kv(&t, "size", "%s, %" PRIu64 " units of %s",
	   fmt_bytes(a, sizeof(a), (double)g_u64(r, st, "size")), units,
	   fmt_bytes(b, sizeof(b), (double)unit));
	kv(&t, "used", "%s in %" PRIu64 " units (%.1f%%)",
	   fmt_bytes(a, sizeof(a), (double)used * (double)unit), used,
	   units ? 100.0 * (double)used / (double)units : 0.0);
	kv(&t, "queue depth", "%" PRIu64, g_u64(r, st, "queue_depth"));
	kv(&t, "I/O size", "%s",
	   fmt_bytes(a, sizeof(a), (double)g_u64(r, st, "io_bytes")));
	kv(&t, "in flight", "%" PRIu64, g_u64(r, st, "inflight"));
	kv(&t, "reads", "%" PRIu64 ", %s", g_u64(r, st, "reads"),
	   fmt_bytes(a, sizeof(a), (double)g_u64(r, st, "read_bytes")));
	kv(&t, "writes", "%" PRIu64 ", %s", g_u64(r, st, "writes"),
	   fmt_bytes(a, sizeof(a), (double)g_u64(r, st, "write_bytes")));
	kv(&t, "I/O errors",
	   "%" PRIu64 " reads, %" PRIu64 " writes; %" PRIu64 " ENOSPC, %" PRIu64
	   " short",
	   g_u64(r, st, "read_errors"), g_u64(r, st, "write_errors"),
	   g_u64(r, st, "enospc"), g_u64(r, st, "short"));
	t_done(r, &t, f);
	/* A kvmemd older than blocks on the store sends no such key. */
	if (json_get(v, "store_prefixes"))
		render_store_prefixes(r, f,
				      g_obj_or_null(r, v, "store_prefixes"));
}

static int cmd_tier(struct ctl *c, int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return ctl_simple(c, "tier", REPLY_TIMEOUT_MS, render_tier);
}

static void render_offload(struct rd *r, FILE *f, const struct json *v)
{
	char a[32];

	fprintf(f,
		"offloaded %" PRIu64
		" pages, %s in %.3f s (%.2f GB/s), %" PRIu64 " errors\n",
		g_u64(r, v, "pages"),
		fmt_bytes(a, sizeof(a), (double)g_u64(r, v, "bytes")),
		g_num(r, v, "seconds"), g_num(r, v, "gbps"),
		g_u64(r, v, "errors"));
}

static int cmd_offload(struct ctl *c, int argc, char **argv)
{
	char req[REQ_MAX + 1], target[64];
	struct rd r = { .req = req };
	uint64_t errors;
	struct json *v;
	int n = 0, ret;

	snprintf(req, sizeof(req), "offload");
	if (argc) {
		n = target_arg(argc, argv, target, sizeof(target));
		if (n < 0)
			return CTL_USAGE;
		snprintf(req, sizeof(req), "offload %s", target);
	}
	if (n != argc) {
		ctl_errx("offload: unexpected argument '%s'", argv[n]);
		return CTL_USAGE;
	}
	/* The reply comes when every released page of the target is on
	 * the store: as long as that takes. */
	ret = ctl_request_timeout(c, req, -1, &v);
	if (ret)
		return ret;
	errors = g_u64(&r, v, "errors");
	if (r.err[0]) {
		ctl_errx("%s: malformed reply from kvmemd: %s", req, r.err);
		json_free(v);
		return CTL_FAILED;
	}
	ret = ctl_present(c, req, render_offload, v);
	json_free(v);
	if (!ret && errors) {
		ctl_errx("%s: %" PRIu64
			 " pages could not be written to the store "
			 "and stay in memory (kvmemd's log says why)",
			 req, errors);
		ret = CTL_FAILED;
	}
	return ret;
}

/* ---- prefixes --------------------------------------------------------- */

/*
 * A tenant as kvmemd's prefix requests take it: a uid, or "@" and a gid,
 * from @s: a uid, or "@" and a group's name or gid. Return: 0, or
 * CTL_USAGE after saying why.
 */
static int parse_tenant(const char *s, char *out, size_t len)
{
	struct group gr, *res = NULL;
	char buf[4096];
	uint64_t id;

	if (s[0] != '@' && !ctl_parse_uint(s, UINT32_MAX - 1, &id)) {
		snprintf(out, len, "%" PRIu64, id);
		return 0;
	}
	if (s[0] == '@' && s[1] &&
	    !ctl_parse_uint(s + 1, UINT32_MAX - 1, &id)) {
		snprintf(out, len, "@%" PRIu64, id);
		return 0;
	}
	if (s[0] == '@' && s[1] &&
	    !getgrnam_r(s + 1, &gr, buf, sizeof(buf), &res) && res) {
		snprintf(out, len, "@%u", (unsigned int)res->gr_gid);
		return 0;
	}
	ctl_errx("TENANT must be a uid, or @ and a group's name or gid, "
		 "not '%s'",
		 s);
	return CTL_USAGE;
}

static void render_prefixes(struct rd *r, FILE *f, const struct json *v)
{
	static const char *const thead[] = { "TENANT",	 "BLOCKS",  "BYTES",
					     "HITS",	 "MISSES",  "PUBLISHED",
					     "EVICTED",	 "EXPIRED", "DAMAGED",
					     "CORRECTED" };
	static const char *const bhead[] = { "KEY",  "TOKENS", "PAGES", "BYTES",
					     "HITS", "AGE",    "IDLE" };
	const struct json *p = g_obj(r, v, "prefix");
	const struct json *ts, *bs;
	char a[32], b[32], key[80];
	struct table t;
	size_t n, i;
	uint64_t start;

	t_init(&t, "ll");
	if (!g_u64(r, p, "bytes_max"))
		kv(&t, "sharing", "off (prefix.bytes = 0)");
	kv(&t, "kept", "%" PRIu64 " blocks, %s of %s; %" PRIu64 " tenants",
	   g_u64(r, p, "blocks"),
	   fmt_bytes(a, sizeof(a), (double)g_u64(r, p, "bytes")),
	   fmt_bytes(b, sizeof(b), (double)g_u64(r, p, "bytes_max")),
	   g_u64(r, p, "tenants"));
	/* A kvmemd of fixed shares, before fair ones, sends none. */
	if (json_get(p, "fair_share_bytes"))
		kv(&t, "share", "%s a tenant now, at most %s",
		   fmt_bytes(a, sizeof(a),
			     (double)g_u64(r, p, "fair_share_bytes")),
		   fmt_bytes(b, sizeof(b),
			     (double)g_u64(r, p, "uid_bytes_max")));
	kv(&t, "attaches", "%" PRIu64 " blocks hit, %" PRIu64 " missed",
	   g_u64(r, p, "hits"), g_u64(r, p, "misses"));
	kv(&t, "publishes", "%" PRIu64 " blocks, %" PRIu64 " refused",
	   g_u64(r, p, "published"), g_u64(r, p, "refused"));
	kv(&t, "dropped",
	   "%" PRIu64 " evicted, %" PRIu64 " expired, %" PRIu64
	   " damaged (no longer verified)",
	   g_u64(r, p, "evicted"), g_u64(r, p, "expired"),
	   g_u64(r, p, "damaged"));
	if (g_u64(r, p, "idle_seconds"))
		kv(&t, "expiry", "unused for %s",
		   fmt_dur(a, sizeof(a), (double)g_u64(r, p, "idle_seconds")));
	else
		kv(&t, "expiry", "never (prefix.idle_seconds = 0)");
	kv(&t, "scrubbed", "%" PRIu64 " words corrected in kept copies",
	   g_u64(r, p, "corrected"));
	t_done(r, &t, f);

	ts = g_arr(r, v, "tenants", &n);
	if (n) {
		fputc('\n', f);
		t_init(&t, "rrrrrrrrrr");
		t_row(&t, thead);
		for (i = 0; i < n; i++) {
			const struct json *e = &ts[i];

			if (json_get(e, "gid"))
				t_cell(&t, "@%" PRIu64, g_u64(r, e, "gid"));
			else
				t_cell(&t, "%" PRIu64, g_u64(r, e, "uid"));
			t_cell(&t, "%" PRIu64, g_u64(r, e, "blocks"));
			t_cell(&t, "%s",
			       fmt_bytes(a, sizeof(a),
					 (double)g_u64(r, e, "bytes")));
			t_cell(&t, "%" PRIu64, g_u64(r, e, "hits"));
			t_cell(&t, "%" PRIu64, g_u64(r, e, "misses"));
			t_cell(&t, "%" PRIu64, g_u64(r, e, "published"));
			t_cell(&t, "%" PRIu64, g_u64(r, e, "evicted"));
			t_cell(&t, "%" PRIu64, g_u64(r, e, "expired"));
			t_cell(&t, "%" PRIu64, g_u64(r, e, "damaged"));
			t_cell(&t, "%" PRIu64, g_u64(r, e, "corrected"));
		}
		t_done(r, &t, f);
	}
	if (!json_get(v, "blocks"))
		return;
	bs = g_arr(r, v, "blocks", &n);
	fputc('\n', f);
	if (!n) {
		fputs("no blocks\n", f);
		return;
	}
	t_init(&t, "lrrrrrr");
	t_row(&t, bhead);
	for (i = 0; i < n; i++) {
		const struct json *e = &bs[i];

		start = g_u64(r, e, "token_start");
		t_cell(&t, "%s", g_str(r, e, "key", key, sizeof(key)));
		t_cell(&t, "%" PRIu64 "-%" PRIu64, start,
		       start + g_u64(r, e, "ntokens") - 1);
		t_cell(&t, "%" PRIu64, g_u64(r, e, "pages"));
		t_cell(&t, "%s",
		       fmt_bytes(a, sizeof(a), (double)g_u64(r, e, "bytes")));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "hits"));
		t_cell(&t, "%s",
		       fmt_dur(b, sizeof(b), (double)g_u64(r, e, "age_s")));
		t_cell(&t, "%s",
		       fmt_dur(key, sizeof(key),
			       (double)g_u64(r, e, "idle_s")));
	}
	t_done(r, &t, f);
	if (g_u64(r, v, "more"))
		fprintf(f, "(%" PRIu64 " more, least recently used)\n",
			g_u64(r, v, "more"));
}

static int cmd_prefixes(struct ctl *c, int argc, char **argv)
{
	char req[64], tenant[16];

	if (argc == 0)
		return ctl_simple(c, "prefixes", REPLY_TIMEOUT_MS,
				  render_prefixes);
	if (parse_tenant(argv[0], tenant, sizeof(tenant)))
		return CTL_USAGE;
	snprintf(req, sizeof(req), "prefixes %s", tenant);
	return ctl_simple(c, req, REPLY_TIMEOUT_MS, render_prefixes);
}

static void render_dropped(struct rd *r, FILE *f, const struct json *v)
{
	fprintf(f, "dropped %" PRIu64 " blocks\n", g_u64(r, v, "dropped"));
}

static int cmd_prefix_drop(struct ctl *c, int argc, char **argv)
{
	char req[REQ_MAX + 1], tenant[16];
	size_t i;

	if (parse_tenant(argv[0], tenant, sizeof(tenant)))
		return CTL_USAGE;
	if (argc == 2) {
		for (i = 0; argv[1][i] && isxdigit((unsigned char)argv[1][i]);
		     i++)
			;
		if (argv[1][i] || i != 2 * KVMEM_PREFIX_KEY_BYTES) {
			ctl_errx("KEY must be %d hexadecimal digits, not '%s'",
				 2 * KVMEM_PREFIX_KEY_BYTES, argv[1]);
			return CTL_USAGE;
		}
	}
	snprintf(req, sizeof(req), "prefix-drop %s%s%s", tenant,
		 argc == 2 ? " " : "", argc == 2 ? argv[1] : "");
	return ctl_simple(c, req, REPLY_TIMEOUT_MS, render_dropped);
}

static void render_prefix_inject(struct rd *r, FILE *f, const struct json *v)
{
	fprintf(f, "injected %" PRIu64 " bit errors into %" PRIu64 " pages\n",
		g_u64(r, v, "bits"), g_u64(r, v, "pages"));
}

static int cmd_prefix_inject(struct ctl *c, int argc, char **argv)
{
	char req[REQ_MAX + 1], tenant[16];
	uint64_t flips, seed = 0;

	(void)argc;
	if (parse_tenant(argv[0], tenant, sizeof(tenant)))
		return CTL_USAGE;
	if (ctl_parse_uint(argv[1], 8, &flips) || !flips) {
		ctl_errx("FLIPS must be 1 to 8, not '%s'", argv[1]);
		return CTL_USAGE;
	}
	if (c->seed && ctl_parse_uint(c->seed, UINT64_MAX, &seed)) {
		ctl_errx("--seed must be a number, not '%s'", c->seed);
		return CTL_USAGE;
	}
	snprintf(req, sizeof(req),
		 "prefix-inject %s flips %" PRIu64 " seed %" PRIu64, tenant,
		 flips, seed);
	return ctl_simple(c, req, REPLY_TIMEOUT_MS, render_prefix_inject);
}

/* ---- the shared tier --------------------------------------------------- */

/* The masters of the cluster as kvmemd's client knows them, from @nodes:
 * "HOST:PORT slots=N connected=0|1" lines. */
static void remote_nodes(struct rd *r, FILE *f, const char *nodes)
{
	static const char *const head[] = { "MASTER", "SLOTS", "CONNECTED" };
	char line[256], addr[256], clean[256];
	unsigned int slots, conn;
	struct table t;
	size_t n;

	if (!*nodes) {
		fputs("no masters known yet\n", f);
		return;
	}
	t_init(&t, "lrl");
	t_row(&t, head);
	while (*nodes) {
		n = strcspn(nodes, "\n");
		snprintf(line, sizeof(line), "%.*s", (int)n, nodes);
		nodes += n + (nodes[n] == '\n');
		/* A line of another form is shown as it came. */
		if (sscanf(line, "%255s slots=%u connected=%u", addr, &slots,
			   &conn) == 3) {
			t_cell(&t, "%s", ctl_clean(addr, clean, sizeof(clean)));
			t_cell(&t, "%u", slots);
			t_cell(&t, "%s", conn ? "yes" : "no");
		} else {
			t_cell(&t, "%s", ctl_clean(line, clean, sizeof(clean)));
			t_cell(&t, "-");
			t_cell(&t, "-");
		}
	}
	t_done(r, &t, f);
}

/* "header 0, tenant 1, ..." of the refused records, in the reply's order,
 * so that a reason kvmemd adds later is shown too. */
static void remote_refused(struct rd *r, struct table *t,
			   const struct json *ref)
{
	char *text = NULL, key[64];
	size_t len = 0, i;
	FILE *m;

	if (!ref)
		return;
	m = open_memstream(&text, &len);
	if (!m) {
		t->oom = true;
		return;
	}
	for (i = 0; i < ref->u.obj.n; i++)
		fprintf(m, "%s%s %" PRIu64, i ? ", " : "",
			ctl_clean(ref->u.obj.m[i].key, key, sizeof(key)),
			g_u64(r, ref, ref->u.obj.m[i].key));
	if (fclose(m))
		t->oom = true;
	else
		kv(t, "refused", "%s", len ? text : "none");
	free(text);
}

static void render_remote(struct rd *r, FILE *f, const struct json *v)
{
	const struct json *rm = g_obj(r, v, "remote");
	const struct json *p, *fe, *cl;
	char a[32], b[32], c[32], seeds[512], backend[32], why[512];
	const char *nodes;
	struct table t;
	double since;

	if (!g_bool(r, rm, "configured")) {
		fputs("no shared tier: set remote.seeds in kvmemd.conf\n", f);
		return;
	}
	p = g_obj(r, rm, "push");
	fe = g_obj(r, rm, "fetch");
	cl = g_obj(r, rm, "client");
	nodes = json_str(json_get(rm, "nodes"));
	if (!nodes) {
		g_bad(r, "nodes", "a string", json_get(rm, "nodes"));
		nodes = "";
	}
	t_init(&t, "ll");
	kv(&t, "cluster", "%s at %s",
	   g_str(r, rm, "backend", backend, sizeof(backend)),
	   g_str(r, rm, "seeds", seeds, sizeof(seeds)));
	g_str(r, rm, "state", a, sizeof(a));
	if (!strcmp(a, "unreachable")) {
		since = g_num(r, rm, "since");
		kv(&t, "state", "unreachable since %s (%s ago): %s",
		   fmt_time(b, sizeof(b), since),
		   fmt_dur(c, sizeof(c), (double)time(NULL) - since),
		   g_str(r, rm, "reason", why, sizeof(why)));
	} else if (!strcmp(a, "ok") && !g_u64(r, cl, "requests")) {
		/* kvmemd connects at its first push or fetch. */
		kv(&t, "state", "ok, nothing asked of the cluster yet");
	} else {
		kv(&t, "state", "%s", a);
	}
	kv(&t, "masters", "%" PRIu64 " known, %" PRIu64 " connections open",
	   g_u64(r, cl, "masters"), g_u64(r, cl, "connected"));
	kv(&t, "queue",
	   "%s of records on their way, %" PRIu64 " jobs; %" PRIu64
	   " tenants with credentials",
	   fmt_bytes(a, sizeof(a), (double)g_u64(r, rm, "queued_bytes")),
	   g_u64(r, rm, "jobs"), g_u64(r, rm, "tenants_with_credentials"));
	kv(&t, "pushes",
	   "%" PRIu64 " blocks pushed (%s), %" PRIu64 " there already, %" PRIu64
	   " dropped (queue full), %" PRIu64 " unchained, %" PRIu64 " failed",
	   g_u64(r, p, "pushed"),
	   fmt_bytes(a, sizeof(a), (double)g_u64(r, p, "bytes")),
	   g_u64(r, p, "present"), g_u64(r, p, "dropped"),
	   g_u64(r, p, "unchained"), g_u64(r, p, "errors"));
	kv(&t, "fetches",
	   "%" PRIu64 " (%" PRIu64 " failed) for %" PRIu64 " blocks: %" PRIu64
	   " hits, %" PRIu64 " misses, %" PRIu64 " unanswered",
	   g_u64(r, fe, "requests"), g_u64(r, fe, "errors"),
	   g_u64(r, fe, "blocks_asked"), g_u64(r, fe, "hits"),
	   g_u64(r, fe, "misses"), g_u64(r, fe, "unanswered"));
	kv(&t, "kept",
	   "%" PRIu64 " blocks (%s read), %" PRIu64 " refused room here",
	   g_u64(r, fe, "kept"),
	   fmt_bytes(a, sizeof(a), (double)g_u64(r, fe, "bytes")),
	   g_u64(r, fe, "keep_refused"));
	kv(&t, "repaired",
	   "%" PRIu64 " records (%" PRIu64 " written back), %" PRIu64
	   " deleted; %" PRIu64 " words corrected, %" PRIu64 " uncorrectable",
	   g_u64(r, fe, "repaired"), g_u64(r, fe, "written_back"),
	   g_u64(r, fe, "deleted"), g_u64(r, fe, "words_corrected"),
	   g_u64(r, fe, "words_uncorrectable"));
	remote_refused(r, &t, g_obj(r, fe, "refused"));
	kv(&t, "client",
	   "%" PRIu64 " requests, %" PRIu64 " redirects, %" PRIu64
	   " retries, %" PRIu64 " timeouts, %" PRIu64 " errors, %" PRIu64
	   " slot map loads",
	   g_u64(r, cl, "requests"), g_u64(r, cl, "redirects"),
	   g_u64(r, cl, "retries"), g_u64(r, cl, "timeouts"),
	   g_u64(r, cl, "errors"), g_u64(r, cl, "refreshes"));
	kv(&t, "bytes", "%s out, %s in",
	   fmt_bytes(a, sizeof(a), (double)g_u64(r, cl, "bytes_out")),
	   fmt_bytes(b, sizeof(b), (double)g_u64(r, cl, "bytes_in")));
	t_done(r, &t, f);
	fputc('\n', f);
	remote_nodes(r, f, nodes);
}

static int cmd_remote(struct ctl *c, int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return ctl_simple(c, "remote", REPLY_TIMEOUT_MS, render_remote);
}

/* ---- policy ----------------------------------------------------------- */

static void render_policy(struct rd *r, FILE *f, const struct json *v)
{
	const struct json *p = g_obj(r, v, "policy");
	char key[128], val[256];
	struct table t;
	size_t i;

	if (!p)
		return;
	t_init(&t, "ll");
	t_cell(&t, "KEY");
	t_cell(&t, "VALUE");
	for (i = 0; i < p->u.obj.n; i++) {
		const struct json *e = &p->u.obj.m[i].v;

		t_cell(&t, "%s",
		       ctl_clean(p->u.obj.m[i].key, key, sizeof(key)));
		switch (e->type) {
		case JSON_BOOL:
			t_cell(&t, "%s", e->u.b ? "yes" : "no");
			break;
		case JSON_NUMBER:
			if (e->u.num.exact)
				t_cell(&t, "%" PRIu64, e->u.num.u);
			else
				t_cell(&t, "%g", e->u.num.d);
			break;
		case JSON_STRING:
			/* An empty value (an empty list) is seen as such. */
			t_cell(&t, "%s",
			       e->u.str.len
				       ? ctl_clean(e->u.str.s, val, sizeof(val))
				       : "\"\"");
			break;
		default:
			g_bad(r, key, "a number, string or boolean", e);
			t_cell(&t, "?");
			break;
		}
	}
	t_done(r, &t, f);
}

static int cmd_policy(struct ctl *c, int argc, char **argv)
{
	char req[REQ_MAX + 1];
	const char *eq;
	size_t i;

	if (argc == 1 && !strcmp(argv[0], "show"))
		return ctl_simple(c, "policy show", REPLY_TIMEOUT_MS,
				  render_policy);
	if (argc != 2 || strcmp(argv[0], "set")) {
		ctl_errx("policy: expected show, or set KEY=VALUE");
		return CTL_USAGE;
	}
	eq = strchr(argv[1], '=');
	if (!eq || eq == argv[1]) {
		ctl_errx("policy set: expected KEY=VALUE, not '%s'", argv[1]);
		return CTL_USAGE;
	}
	/* The protocol separates words by spaces: none may be in them. */
	for (i = 0; argv[1][i]; i++) {
		if ((unsigned char)argv[1][i] <= ' ' ||
		    (unsigned char)argv[1][i] >= 0x7f) {
			ctl_errx("policy set: KEY=VALUE must be printable "
				 "ASCII without spaces");
			return CTL_USAGE;
		}
	}
	if (snprintf(req, sizeof(req), "policy set %s", argv[1]) > REQ_MAX) {
		ctl_errx("policy set: longer than the %d bytes a request "
			 "may have",
			 REQ_MAX);
		return CTL_USAGE;
	}
	return ctl_simple(c, req, REPLY_TIMEOUT_MS, render_policy);
}

/* ---- metrics ---------------------------------------------------------- */

static int cmd_metrics(struct ctl *c, int argc, char **argv)
{
	char *text;
	size_t len;
	int ret;

	(void)argc;
	(void)argv;
	if ((c->given & O_HTTP_TIMEOUT) && !(c->given & O_HTTP)) {
		ctl_errx("metrics: --http-timeout needs --http");
		return CTL_USAGE;
	}
	if (c->given & O_HTTP)
		return http_metrics(c);
	ret = metrics_text(c, &text, &len);
	if (!ret)
		fwrite(text, 1, len, stdout);
	free(text);
	return ret;
}

/* ---- version ---------------------------------------------------------- */

static void render_version(struct rd *r, FILE *f, const struct json *v)
{
	char ver[64];

	fprintf(f,
		PROG " %s\nkvmemd   %s (ABI %" PRIu64
		     ", admin protocol %" PRIu64 ")\n",
		KVMEMCTL_VERSION, g_str(r, v, "version", ver, sizeof(ver)),
		g_u64(r, v, "abi"), g_u64(r, v, "admin"));
}

static int cmd_version(struct ctl *c, int argc, char **argv)
{
	char mine[] = KVMEMCTL_VERSION, key[] = "kvmemctl";
	struct json_member *members;
	struct json *v, out;
	size_t n;
	int ret;

	(void)argc;
	(void)argv;
	ret = ctl_request(c, "version", &v);
	if (ret) {
		printf(PROG " %s\n", mine);
		return ret;
	}
	if (!(c->given & O_JSON)) {
		ret = ctl_present(c, "version", render_version, v);
		json_free(v);
		return ret;
	}
	/* The daemon's reply with "kvmemctl" added: a shallow copy. */
	n = v->u.obj.n;
	members = calloc(n + 1, sizeof(*members));
	if (!members) {
		json_free(v);
		ctl_errx("out of memory");
		return CTL_FAILED;
	}
	memcpy(members, v->u.obj.m, n * sizeof(*members));
	members[n].key = key;
	members[n].len = strlen(key);
	members[n].v.type = JSON_STRING;
	members[n].v.u.str.s = mine;
	members[n].v.u.str.len = strlen(mine);
	out.type = JSON_OBJECT;
	out.u.obj.m = members;
	out.u.obj.n = n + 1;
	json_print(stdout, &out);
	putchar('\n');
	free(members);
	json_free(v);
	return CTL_OK;
}

/* ---- the command line ------------------------------------------------- */

struct cmd {
	const char *name;
	int (*fn)(struct ctl *c, int argc, char **argv);
	int min_args, max_args;
	unsigned int opts; /* O_* it takes */
	const char *usage;
};

static int cmd_help(struct ctl *c, int argc, char **argv);

static const struct cmd cmds[] = {
	{ "status", cmd_status, 0, 0, O_JSON, "status" },
	{ "stats", cmd_stats, 0, 0, O_JSON | O_WATCH, "stats [--watch SEC]" },
	{ "sessions", cmd_sessions, 0, 0, O_JSON, "sessions" },
	{ "seqs", cmd_seqs, 0, 1, O_JSON, "seqs [SESSION]" },
	{ "tier", cmd_tier, 0, 0, O_JSON, "tier" },
	{ "offload", cmd_offload, 0, 3, O_JSON, "offload [TARGET]" },
	{ "scrub", cmd_scrub, 1, 4, O_JSON,
	  "scrub status|start|stop|now [TARGET]|rate BYTES_PER_S|"
	  "cycle SECONDS|target UE_PER_DAY" },
	{ "events", cmd_events, 0, 1, O_JSON | O_SINCE | O_LIMIT,
	  "events [--since TIME] [--limit N]" },
	{ "errors", cmd_errors, 0, 0, O_JSON, "errors" },
	{ "reset-counters", cmd_reset, 0, 0, O_JSON, "reset-counters" },
	{ "inject", cmd_inject, 1, 3,
	  O_JSON | O_BER | O_SEED | O_ALL | O_CHANNEL,
	  "inject TARGET --ber P --seed S [--all] [--channel SPEC]" },
	{ "prefixes", cmd_prefixes, 0, 1, O_JSON, "prefixes [TENANT]" },
	{ "prefix-drop", cmd_prefix_drop, 1, 2, O_JSON,
	  "prefix-drop TENANT [KEY]" },
	{ "prefix-inject", cmd_prefix_inject, 2, 2, O_JSON | O_SEED,
	  "prefix-inject TENANT FLIPS [--seed S]" },
	{ "remote", cmd_remote, 0, 0, O_JSON, "remote" },
	{ "policy", cmd_policy, 1, 2, O_JSON, "policy show|set KEY=VALUE" },
	{ "metrics", cmd_metrics, 0, 0, O_HTTP | O_HTTP_TIMEOUT,
	  "metrics [--http [--http-timeout SEC]]" },
	{ "version", cmd_version, 0, 0, O_JSON, "version" },
	{ "help", cmd_help, 0, 0, 0, "help" },
};

static void usage(FILE *f)
{
	size_t i;

	fprintf(f, "usage: " PROG " [-a PATH] [--json] COMMAND [ARGS]\n\n"
		   "commands:\n");
	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		fprintf(f, "  %s\n", cmds[i].usage);
	fprintf(f,
		"\nTARGET is pool, session N or seq N S. TIME is Unix "
		"seconds or an age: 10m, 2h, '1d ago'.\n\n"
		"options:\n"
		"  -a, --admin-socket PATH  kvmemd's admin socket (default: "
		"$KVMEM_ADMIN_SOCKET,\n"
		"                           else /run/kvmem/" ADMIN_SOCKET_NAME
		" as root,\n"
		"                           else $XDG_RUNTIME_DIR/kvmem/" ADMIN_SOCKET_NAME
		",\n"
		"                           else ./run/" ADMIN_SOCKET_NAME ")\n"
		"      --json               print kvmemd's reply as JSON\n"
		"      --http               metrics: serve GET /metrics over "
		"HTTP on stdin,\n"
		"                           a listening socket or one "
		"connection\n"
		"      --http-timeout SEC   metrics --http: a peer's time to send "
		"its request,\n"
		"                           and again to take the answer "
		"(default 5)\n"
		"  -h, --help               this text\n"
		"  -V, --version            kvmemctl's version\n\n"
		"exit status: 0 done, 1 kvmemd refused or failed the request, "
		"2 usage error,\n"
		"3 kvmemd not running or not answering, 4 permission denied.\n"
		"See kvmemctl(8).\n");
}

static int cmd_help(struct ctl *c, int argc, char **argv)
{
	(void)c;
	(void)argc;
	(void)argv;
	usage(stdout);
	return CTL_OK;
}

static const char *const opt_names[] = {
	"--json", "--watch", "--since", "--limit",   "--ber",
	"--seed", "--all",   "--http",	"--channel", "--http-timeout",
};

_Static_assert(1u << (sizeof(opt_names) / sizeof(opt_names[0]) - 1) ==
		       O_HTTP_TIMEOUT,
	       "a name for each O_* bit, in order");

static int parse_args(int argc, char **argv, struct ctl *c, int *first)
{
	static const struct option opts[] = {
		{ "admin-socket", required_argument, NULL, 'a' },
		{ "json", no_argument, NULL, 'j' },
		{ "watch", required_argument, NULL, 'w' },
		{ "since", required_argument, NULL, 's' },
		{ "limit", required_argument, NULL, 'l' },
		{ "ber", required_argument, NULL, 'b' },
		{ "seed", required_argument, NULL, 'S' },
		{ "all", no_argument, NULL, 'A' },
		{ "http", no_argument, NULL, 'H' },
		{ "channel", required_argument, NULL, 'C' },
		{ "http-timeout", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	const char *path = getenv("KVMEM_ADMIN_SOCKET");
	double sec;
	char *end;
	int o;

	opterr = 0;
	while ((o = getopt_long(argc, argv, ":a:hV", opts, NULL)) != -1) {
		switch (o) {
		case 'a':
			path = optarg;
			break;
		case 'j':
			c->given |= O_JSON;
			break;
		case 'w':
			c->given |= O_WATCH;
			errno = 0;
			c->watch = strtod(optarg, &end);
			if (end == optarg || *end || errno ||
			    !(c->watch >= 0.1 && c->watch <= 86400)) {
				ctl_errx("--watch must be seconds from 0.1 to "
					 "86400, not '%s'",
					 optarg);
				return CTL_USAGE;
			}
			break;
		case 's':
			c->given |= O_SINCE;
			c->since = optarg;
			break;
		case 'l':
			c->given |= O_LIMIT;
			c->limit = optarg;
			break;
		case 'b':
			c->given |= O_BER;
			c->ber = optarg;
			break;
		case 'S':
			c->given |= O_SEED;
			c->seed = optarg;
			break;
		case 'A':
			c->given |= O_ALL;
			break;
		case 'H':
			c->given |= O_HTTP;
			break;
		case 'C':
			c->given |= O_CHANNEL;
			c->channel = optarg;
			break;
		case 'T':
			c->given |= O_HTTP_TIMEOUT;
			errno = 0;
			sec = strtod(optarg, &end);
			if (end == optarg || *end || errno ||
			    !(sec >= 0.1 && sec <= 3600)) {
				ctl_errx("--http-timeout must be seconds from "
					 "0.1 to 3600, not '%s'",
					 optarg);
				return CTL_USAGE;
			}
			c->http_timeout_ms = (int)(sec * 1000);
			break;
		case 'h':
			usage(stdout);
			return -1;
		case 'V':
			printf(PROG " %s\n", KVMEMCTL_VERSION);
			return -1;
		case ':':
			ctl_errx("option '%s' needs an argument",
				 argv[optind - 1]);
			return CTL_USAGE;
		default:
			ctl_errx("unknown option '%s' (" PROG
				 " --help lists them)",
				 argv[optind - 1]);
			return CTL_USAGE;
		}
	}
	if (path && *path) {
		if (strlen(path) >= sizeof(c->path)) {
			ctl_errx("admin socket path longer than %zu bytes: %s",
				 sizeof(c->path) - 1, path);
			return CTL_USAGE;
		}
		strcpy(c->path, path);
	} else if (kvmem__socket_path(c->path, sizeof(c->path),
				      ADMIN_SOCKET_NAME) < 0) {
		ctl_errx("the default admin socket path is too long; use -a");
		return CTL_USAGE;
	}
	*first = optind;
	return CTL_OK;
}

int main(int argc, char **argv)
{
	struct ctl c = { .fd = -1, .http_timeout_ms = HTTP_TIMEOUT_MS };
	const struct cmd *cmd = NULL;
	int first, nargs, ret;
	size_t i;

	ret = parse_args(argc, argv, &c, &first);
	if (ret)
		return ret < 0 ? CTL_OK : ret;
	if (first == argc) {
		usage(stderr);
		return CTL_USAGE;
	}
	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strcmp(argv[first], cmds[i].name))
			cmd = &cmds[i];
	if (!cmd) {
		ctl_errx("unknown command '%s' (" PROG " --help lists them)",
			 argv[first]);
		return CTL_USAGE;
	}
	for (i = 0; i < sizeof(opt_names) / sizeof(opt_names[0]); i++) {
		if ((c.given & ~cmd->opts) & (1u << i)) {
			ctl_errx("%s: %s does not apply (usage: " PROG " %s)",
				 cmd->name, opt_names[i], cmd->usage);
			return CTL_USAGE;
		}
	}
	nargs = argc - first - 1;
	if (nargs < cmd->min_args || nargs > cmd->max_args) {
		ctl_errx("usage: " PROG " %s", cmd->usage);
		return CTL_USAGE;
	}
	ret = cmd->fn(&c, nargs, argv + first + 1);
	ctl_close(&c);
	if (fflush(stdout) || ferror(stdout)) {
		ctl_errx("write error: %s", strerror(errno));
		return CTL_FAILED;
	}
	return ret;
}
