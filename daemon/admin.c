/* SPDX-License-Identifier: MIT */
/*
 * admin.c - the admin socket's requests: one line of words in, one JSON
 * object out (the protocol is in kvmemctl(8))
 *
 * Everything here runs on the event loop and only reads the daemon's own
 * tables, never a session's shared memory, so a request costs the clients
 * no more than the time to walk those tables.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "json.h"
#include "kvmem/inject.h"
#include "kvmemd.h"
#include "prefix.h"
#include "remote.h"
#include "session.h"

#define ADMIN_PROTOCOL 1
#define MAX_WORDS 16

void kvmemd_admin_error(struct jw *w, int err, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	jw_reset(w);
	jw_open(w, NULL, '{');
	jw_str(w, "error", msg);
	jw_i64(w, "errno", err);
	jw_close(w, '}');
	jw_end(w);
}

static int parse_u32(const char *s, uint32_t *v)
{
	unsigned long long x;
	char *end;

	errno = 0;
	x = strtoull(s, &end, 10);
	if (!*s || *end || errno || *s == '-' || x > UINT32_MAX)
		return -EINVAL;
	*v = (uint32_t)x;
	return 0;
}

static struct kvmemd_session *find_session(const struct kvmemd *d, uint32_t id)
{
	struct kvmemd_session *s;

	for (s = d->sessions; s; s = s->next)
		if (s->id == id)
			return s;
	return NULL;
}

/* Parse a target from @argc words; an error reply in @w when it fails. */
static int parse_target(const struct kvmemd *d, int argc, char **argv,
			struct kvmemd_target *t, struct jw *w)
{
	const struct kvmemd_session *s;

	memset(t, 0, sizeof(*t));
	if (!argc || (argc == 1 && !strcmp(argv[0], "pool"))) {
		t->type = KVMEMD_TARGET_POOL;
		return 0;
	}
	if (argc == 2 && !strcmp(argv[0], "session") &&
	    !parse_u32(argv[1], &t->session)) {
		t->type = KVMEMD_TARGET_SESSION;
	} else if (argc == 3 && !strcmp(argv[0], "seq") &&
		   !parse_u32(argv[1], &t->session) &&
		   !parse_u32(argv[2], &t->seq)) {
		t->type = KVMEMD_TARGET_SEQ;
	} else {
		kvmemd_admin_error(w, -EINVAL,
				   "a target is pool, session N or seq N S");
		return -EINVAL;
	}
	s = find_session(d, t->session);
	if (!s) {
		kvmemd_admin_error(w, -ENOENT, "no session %u", t->session);
		return -ENOENT;
	}
	if (t->type == KVMEMD_TARGET_SEQ && !session_seq(s, t->seq)) {
		kvmemd_admin_error(w, -ENOENT, "session %u has no sequence %u",
				   t->session, t->seq);
		return -ENOENT;
	}
	return 0;
}

static double uptime(const struct kvmemd *d)
{
	return (double)(kvmemd_now_ns() - d->start_mono) / 1e9;
}

static void daemon_counters(const struct kvmemd *d, struct jw *w)
{
	jw_u64(w, "sessions", d->n.sessions);
	jw_u64(w, "attached", d->n.attached);
	jw_u64(w, "refused", d->n.refused);
	jw_u64(w, "detached", d->n.detached);
	jw_u64(w, "dropped", d->n.dropped);
	jw_u64(w, "evicted", d->n.evicted);
	jw_u64(w, "accept_errors", d->n.accept_errors);
	jw_u64(w, "ops", d->n.ops);
	jw_u64(w, "kept_sessions", kvmemd_resume_waiting(d));
}

static void cmd_version(struct jw *w)
{
	jw_open(w, NULL, '{');
	jw_str(w, "version", KVMEM_VERSION);
	jw_u64(w, "abi", KVMEM_ABI_VERSION);
	jw_u64(w, "admin", ADMIN_PROTOCOL);
	jw_close(w, '}');
	jw_end(w);
}

/* The GPU tier's moves since start, all sessions that are attached. */
static void gpu_tier_json(const struct kvmemd *d, struct jw *w)
{
	uint64_t promoted = 0, demoted = 0, moved = 0, errors = 0;
	uint64_t changed = 0;
	const struct kvmemd_session *s;

	for (s = d->sessions; s; s = s->next) {
		promoted += s->gpu_promoted;
		demoted += s->gpu_demoted;
		moved += s->gpu_moved_bytes;
		errors += s->gpu_errors;
		changed += s->gpu_changed;
	}
	jw_u64(w, "promoted_pages", promoted);
	jw_u64(w, "demoted_pages", demoted);
	jw_u64(w, "moved_bytes", moved);
	jw_u64(w, "move_errors", errors);
	jw_u64(w, "changed_pages", changed);
	/* The scrubber's checks of pages there: by the kernels where they
	 * are, and in copies here. */
	jw_u64(w, "checked_in_place", d->gpu.scrub_device);
	jw_u64(w, "checked_in_copies", d->gpu.scrub_copied);
}

/* The GPU pool, or why there is none. */
static void gpu_json(struct kvmemd *d, struct jw *w)
{
	const struct kvmemd_gpu *g = &d->gpu;

	kvmemd_gpu_reap(d);
	jw_open(w, "gpu_pool", '{');
	if (g->ops) {
		jw_str(w, "device", g->uuid);
		jw_str(w, "name", g->name);
		jw_str(w, "backend", g->ops->name);
		jw_u64(w, "bytes", d->gpu.bytes);
		jw_u64(w, "used_bytes", g->used);
		jw_u64(w, "held_bytes", g->held);
		jw_u64(w, "pinned_bytes", g->pinned);
		jw_u64(w, "unpinned_sessions", g->unpinned);
		gpu_tier_json(d, w);
	} else {
		jw_null(w, "device");
		jw_str(w, "why", g->why);
	}
	jw_close(w, '}');
}

/* What the start took back of the sessions and published prefix blocks
 * the last kvmemd kept. */
static void restart_json(const struct kvmemd *d, struct jw *w)
{
	struct kvmemd_prefix_disk_stats ds;
	struct kvmemd_resume_counts c;
	uint64_t taken, refused;

	kvmemd_resume_counts(d, &c);
	kvmemd_prefix_save_counts(d, &taken, &refused);
	jw_open(w, "restart", '{');
	jw_u64(w, "taken_back", c.taken);
	jw_u64(w, "after_crash", c.after_crash);
	jw_u64(w, "refused", c.refused);
	jw_u64(w, "prefix_blocks_taken_back", taken);
	jw_u64(w, "prefix_blocks_refused", refused);
	kvmemd_prefix_disk_stats(d, &ds);
	jw_u64(w, "store_blocks_taken_back", ds.taken);
	jw_u64(w, "store_blocks_refused", ds.start_refused);
	jw_close(w, '}');
}

static void cmd_status(struct kvmemd *d, struct jw *w)
{
	jw_open(w, NULL, '{');
	jw_i64(w, "pid", getpid());
	jw_str(w, "version", KVMEM_VERSION);
	jw_f64(w, "uptime_s", uptime(d));
	jw_u64(w, "pool_bytes", d->cfg.host_bytes);
	jw_u64(w, "pool_used_bytes", d->n.pool_used);
	gpu_json(d, w);
	daemon_counters(d, w);
	restart_json(d, w);
	kvmemd_ras_status_json(d, w);
	jw_close(w, '}');
	jw_end(w);
}

static void cmd_stats(struct kvmemd *d, struct jw *w)
{
	const struct kvmemd_session *s;
	uint64_t open = 0, sealed = 0, degraded = 0, gpu_sealed = 0;
	uint64_t gpu_degraded = 0;

	for (s = d->sessions; s; s = s->next) {
		open += s->arena.used_bytes - s->arena.sealed_bytes;
		sealed += s->arena.sealed_bytes;
		degraded += s->arena.ndegraded - s->arena.gpu_ndegraded;
		gpu_degraded += s->arena.gpu_ndegraded;
		gpu_sealed += s->arena.gpu_used_bytes;
	}
	jw_open(w, NULL, '{');
	jw_f64(w, "uptime_s", uptime(d));
	jw_open(w, "daemon", '{');
	daemon_counters(d, w);
	jw_close(w, '}');
	jw_open(w, "pools", '[');
	jw_open(w, NULL, '{');
	jw_str(w, "pool", "host");
	jw_u64(w, "bytes", d->cfg.host_bytes);
	jw_u64(w, "reserved_bytes", d->n.pool_used);
	jw_u64(w, "releasing_bytes", d->n.pool_releasing);
	jw_u64(w, "open_bytes", open);
	jw_u64(w, "sealed_bytes", sealed);
	jw_u64(w, "free_bytes", d->cfg.host_bytes - d->n.pool_used);
	jw_u64(w, "degraded_pages", degraded);
	jw_close(w, '}');
	if (d->gpu.ops) {
		/* Device memory sessions have, and the GPU tier's pages in it. */
		kvmemd_gpu_reap(d);
		jw_open(w, NULL, '{');
		jw_str(w, "pool", "gpu");
		jw_str(w, "device", d->gpu.uuid);
		jw_u64(w, "bytes", d->gpu.bytes);
		jw_u64(w, "reserved_bytes", d->gpu.used);
		jw_u64(w, "held_bytes", d->gpu.held);
		jw_u64(w, "open_bytes", 0);
		jw_u64(w, "sealed_bytes", gpu_sealed);
		jw_u64(w, "free_bytes", d->gpu.bytes - d->gpu.used);
		gpu_tier_json(d, w);
		jw_u64(w, "degraded_pages", gpu_degraded);
		jw_close(w, '}');
	}
	jw_close(w, ']');
	kvmemd_ras_stats_json(d, w);
	kvmemd_prefix_stats_json(d, w);
	jw_close(w, '}');
	jw_end(w);
}

static void cmd_sessions(const struct kvmemd *d, struct jw *w)
{
	const struct kvmemd_session *s;
	char arch[32];

	jw_open(w, NULL, '{');
	jw_open(w, "sessions", '[');
	for (s = d->sessions; s; s = s->next) {
		jw_open(w, NULL, '{');
		jw_u64(w, "id", s->id);
		jw_i64(w, "pid", s->pid);
		jw_u64(w, "uid", s->uid);
		jw_u64(w, "arena_bytes", s->arena_bytes);
		jw_u64(w, "used_bytes", s->arena.used_bytes);
		jw_u64(w, "heap_bytes", s->arena.heap);
		jw_u64(w, "heap_max_bytes", s->arena.heap_max);
		jw_u64(w, "slots_open", s->arena.nopen);
		jw_u64(w, "slots_sealed", s->arena.nsealed);
		jw_u64(w, "seqs", s->nseqs);
		jw_u64(w, "seqs_acquired", s->nacquired);
		jw_u64(w, "ops", s->ops);
		jw_u64(w, "op_errors", s->op_errors);
		jw_u64(w, "ce", s->ce);
		jw_u64(w, "ue", s->ue);
		jw_u64(w, "crc", s->crc);
		jw_u64(w, "degraded_pages", s->arena.ndegraded);
		jw_u64(w, "cold_pages", s->arena.ncold);
		jw_u64(w, "cold_bytes", s->arena.cold_bytes);
		jw_u64(w, "offloads", s->offloads);
		jw_u64(w, "reloads", s->reloads);
		jw_str(w, "format", kvmem_format_get(s->g.format)->name);
		jw_str(w, "codec", kvmem_codec_get(s->g.codec)->name);
		jw_str(w, "rotation",
		       s->g.rotation == KVMEM_ROTATE_HADAMARD ? "hadamard"
							      : "none");
		if (s->arch.size)
			snprintf(arch, sizeof(arch), "%s+%s",
				 kvmem_format_get(s->arch.format)->name,
				 kvmem_codec_get(s->arch.codec)->name);
		jw_str(w, "archive", s->arch.size ? arch : "off");
		jw_u64(w, "archived", s->archived);
		jw_u64(w, "archive_refused", s->archive_refused);
		jw_u64(w, "tokens_per_page", s->g.tokens_per_page);
		jw_u64(w, "layers", s->g.layers);
		jw_u64(w, "kv_heads", s->g.kv_heads);
		jw_u64(w, "head_dim", s->g.head_dim);
		jw_close(w, '}');
	}
	jw_close(w, ']');
	jw_close(w, '}');
	jw_end(w);
}

static void seq_json(const struct kvmemd_session *s, const struct seq *q,
		     struct jw *w)
{
	uint64_t tokens = 0, degraded = 0, cold = 0;
	uint32_t i;

	for (i = 0; i < q->n; i++) {
		const struct page *p = &s->arena.pages[q->pages[i]];
		const struct slot *sl =
			p->unit == NO_UNIT || p->state == PAGE_READING
				? &p->cold
				: &s->arena.slots[p->unit];

		tokens += sl->ntokens;
		degraded += !!(sl->flags & SLOT_DEGRADED);
		cold += p->state == PAGE_COLD || p->state == PAGE_READING;
	}
	jw_open(w, NULL, '{');
	jw_u64(w, "session", s->id);
	jw_u64(w, "seq", q->id);
	jw_bool(w, "acquired", q->acquired);
	jw_u64(w, "pages", q->n);
	jw_u64(w, "tokens", tokens / s->g.layers);
	jw_u64(w, "degraded_pages", degraded);
	jw_u64(w, "cold_pages", cold);
	jw_close(w, '}');
}

static void cmd_seqs(const struct kvmemd *d, int argc, char **argv,
		     struct jw *w)
{
	const struct kvmemd_session *s;
	uint32_t id = 0, i;

	if (argc > 2 || (argc == 2 && parse_u32(argv[1], &id))) {
		kvmemd_admin_error(w, -EINVAL, "usage: seqs [SESSION]");
		return;
	}
	if (argc == 2 && !find_session(d, id)) {
		kvmemd_admin_error(w, -ENOENT, "no session %u", id);
		return;
	}
	jw_open(w, NULL, '{');
	jw_open(w, "seqs", '[');
	for (s = d->sessions; s; s = s->next) {
		if (argc == 2 && s->id != id)
			continue;
		for (i = 0; i < s->max_seqs; i++)
			if (s->seqs[i])
				seq_json(s, s->seqs[i], w);
	}
	jw_close(w, ']');
	jw_close(w, '}');
	jw_end(w);
}

static void policy_entry(void *ctx, const char *key, const char *value,
			 enum kvmemd_value_kind kind)
{
	struct jw *w = ctx;

	if (kind == KVMEMD_VALUE_STRING)
		jw_str(w, key, value);
	else
		jw_raw(w, key, value);
}

static void policy_show(const struct kvmemd *d, struct jw *w)
{
	jw_open(w, NULL, '{');
	jw_open(w, "policy", '{');
	kvmemd_config_policy(&d->cfg, policy_entry, w);
	jw_close(w, '}');
	jw_close(w, '}');
	jw_end(w);
}

static void cmd_policy(struct kvmemd *d, int argc, char **argv, struct jw *w)
{
	char err[512], *eq;

	if (argc == 1 || (argc == 2 && !strcmp(argv[1], "show"))) {
		policy_show(d, w);
		return;
	}
	if (argc != 3 || strcmp(argv[1], "set") ||
	    !(eq = strchr(argv[2], '='))) {
		kvmemd_admin_error(
			w, -EINVAL,
			"usage: policy {show|set SECTION.KEY=VALUE}");
		return;
	}
	*eq = 0;
	if (kvmemd_policy_set(d, argv[2], eq + 1, err, sizeof(err))) {
		kvmemd_admin_error(w, -EINVAL, "%s", err);
		return;
	}
	policy_show(d, w);
}

/* A request being answered. */
struct admin_req {
	struct kvmemd *d;
	int argc;
	char **argv;
	struct kvmemd_waiter *waiter;
	struct jw *w;
};

static int do_version(const struct admin_req *rq)
{
	cmd_version(rq->w);
	return 0;
}

static int do_status(const struct admin_req *rq)
{
	cmd_status(rq->d, rq->w);
	return 0;
}

static int do_stats(const struct admin_req *rq)
{
	cmd_stats(rq->d, rq->w);
	return 0;
}

static int do_sessions(const struct admin_req *rq)
{
	cmd_sessions(rq->d, rq->w);
	return 0;
}

static int do_seqs(const struct admin_req *rq)
{
	cmd_seqs(rq->d, rq->argc, rq->argv, rq->w);
	return 0;
}

static int do_scrub(const struct admin_req *rq)
{
	static const struct {
		const char *word, *key;
	} keys[] = {
		{ "rate", "scrub.rate" },
		{ "target", "scrub.target_ue_per_day" },
		{ "cycle", "scrub.cycle" },
	};
	const int argc = rq->argc;
	char **argv = rq->argv;
	struct kvmemd_target t;
	char why[512];
	size_t i;
	int ret;

	if (argc < 2 || !strcmp(argv[1], "status")) {
		if (argc > 2)
			goto usage;
	} else if (!strcmp(argv[1], "start") && argc == 2) {
		ret = kvmemd_ras_scrub_start(rq->d, why, sizeof(why));
		if (ret)
			goto fail;
	} else if (!strcmp(argv[1], "stop") && argc == 2) {
		kvmemd_ras_scrub_stop(rq->d);
	} else if (!strcmp(argv[1], "now")) {
		if (parse_target(rq->d, argc - 2, argv + 2, &t, rq->w))
			return 0;
		if (kvmemd_ras_scrub_now(rq->d, &t, rq->waiter)) {
			kvmemd_admin_error(rq->w, -EBUSY,
					   "an on-demand scrub is running");
			return 0;
		}
		return 1;
	} else {
		for (i = 0; i < ARRAY_SIZE(keys); i++)
			if (argc == 3 && !strcmp(argv[1], keys[i].word))
				break;
		if (i == ARRAY_SIZE(keys))
			goto usage;
		ret = kvmemd_policy_set(rq->d, keys[i].key, argv[2], why,
					sizeof(why));
		if (ret)
			goto fail;
	}
	kvmemd_ras_scrub_status(rq->d, rq->w);
	return 0;
fail:
	kvmemd_admin_error(rq->w, ret, "%s", why);
	return 0;
usage:
	kvmemd_admin_error(rq->w, -EINVAL,
			   "usage: scrub {status|start|stop|rate BYTES_PER_S|"
			   "cycle SECONDS|target UE_PER_DAY|now [pool|session "
			   "N|seq N S]}");
	return 0;
}

static int do_events(const struct admin_req *rq)
{
	unsigned long limit = 1000;
	double since = 0;
	char *end;
	int a;

	for (a = 1; a < rq->argc; a += 2) {
		if (a + 1 >= rq->argc)
			goto usage;
		errno = 0;
		if (!strcmp(rq->argv[a], "since")) {
			since = strtod(rq->argv[a + 1], &end);
			if (*end || errno || !isfinite(since))
				goto usage;
		} else if (!strcmp(rq->argv[a], "limit")) {
			limit = strtoul(rq->argv[a + 1], &end, 10);
			if (*end || errno || rq->argv[a + 1][0] == '-')
				goto usage;
		} else {
			goto usage;
		}
	}
	kvmemd_ras_events(rq->d, since, limit, rq->w);
	return 0;
usage:
	kvmemd_admin_error(rq->w, -EINVAL,
			   "usage: events [since UNIX_TIME] [limit N]");
	return 0;
}

static int do_errors(const struct admin_req *rq)
{
	return kvmemd_ras_errors(rq->d, rq->w);
}

static int do_reset(const struct admin_req *rq)
{
	kvmemd_ras_reset(rq->d);
	jw_open(rq->w, NULL, '{');
	jw_bool(rq->w, "ok", 1);
	jw_close(rq->w, '}');
	jw_end(rq->w);
	return 0;
}

/* The refusal of an injection while scrub.allow_inject is off. */
static int inject_off(const struct admin_req *rq)
{
	if (rq->d->cfg.allow_inject)
		return 0;
	kvmemd_admin_error(rq->w, -EPERM,
			   "error injection is off (scrub.allow_inject)");
	return -EPERM;
}

static int do_inject(const struct admin_req *rq)
{
	struct kvmemd_inject in = { .ber = -1,
				    .chan = { .mode = KVMEM_INJECT_BSC },
				    .spec = "bsc" };
	char **argv = rq->argv;
	struct kvmemd_target t;
	int i, n, ret;
	char *end;

	if (inject_off(rq))
		return 0;
	for (n = 1; n < rq->argc && strcmp(argv[n], "ber") &&
		    strcmp(argv[n], "channel");
	     n++)
		;
	if (parse_target(rq->d, n - 1, argv + 1, &t, rq->w))
		return 0;
	for (i = n; i < rq->argc; i++) {
		errno = 0;
		if (!strcmp(argv[i], "ber") && i + 1 < rq->argc) {
			in.ber = strtod(argv[++i], &end);
			if (*end || errno || !(in.ber >= 0 && in.ber <= 1))
				goto usage;
		} else if (!strcmp(argv[i], "seed") && i + 1 < rq->argc) {
			in.seed = strtoull(argv[++i], &end, 0);
			if (*end || errno)
				goto usage;
		} else if (!strcmp(argv[i], "all")) {
			in.all = 1;
		} else if (!strcmp(argv[i], "channel") && i + 1 < rq->argc) {
			in.spec = argv[++i];
			if (kvmem_inject_parse(&in.chan, in.spec)) {
				kvmemd_admin_error(
					rq->w, -EINVAL,
					"channel %.64s: want bsc, exact:K, "
					"burst:K, byte:K, adjacent:K, "
					"line[:BYTES] or column:ROW",
					in.spec);
				return 0;
			}
		} else {
			goto usage;
		}
	}
	if (in.ber < 0)
		goto usage;
	ret = kvmemd_ras_inject(rq->d, &t, &in, rq->w);
	if (ret)
		kvmemd_admin_error(rq->w, ret, "injection failed: %s",
				   strerror(-ret));
	return 0;
usage:
	kvmemd_admin_error(rq->w, -EINVAL,
			   "usage: inject (pool|session N|seq N S) ber P "
			   "[seed S] [all] [channel SPEC]");
	return 0;
}

/* Published blocks on the store (prefix-disk.c), null when none are kept
 * there. */
static void store_prefixes_json(const struct kvmemd *d, struct jw *w)
{
	struct kvmemd_prefix_disk_stats s;

	kvmemd_prefix_disk_stats(d, &s);
	if (!s.on) {
		jw_null(w, "store_prefixes");
		return;
	}
	jw_open(w, "store_prefixes", '{');
	jw_u64(w, "blocks", s.blocks);
	jw_u64(w, "bytes", s.bytes);
	jw_u64(w, "retain_bytes", s.limit);
	jw_u64(w, "retain_seconds", d->cfg.store_retain_s);
	jw_u64(w, "held_extents", s.held);
	jw_u64(w, "index_generation", s.generation);
	jw_u64(w, "indexed", s.indexed);
	jw_u64(w, "written", s.written);
	jw_u64(w, "written_bytes", s.written_bytes);
	jw_u64(w, "write_errors", s.write_errors);
	jw_u64(w, "skipped", s.skipped);
	jw_u64(w, "nospace", s.nospace);
	jw_u64(w, "reclaimed", s.reclaimed);
	jw_u64(w, "expired", s.expired);
	jw_u64(w, "dropped", s.dropped);
	jw_u64(w, "taken", s.taken);
	jw_u64(w, "refused", s.refused);
	jw_u64(w, "repaired", s.repaired);
	jw_u64(w, "fetched", s.fetched);
	jw_u64(w, "indexes", s.indexes);
	jw_u64(w, "index_errors", s.index_errors);
	jw_close(w, '}');
}

static int do_tier(const struct admin_req *rq)
{
	jw_open(rq->w, NULL, '{');
	kvmemd_tier_stats_json(rq->d, rq->w);
	store_prefixes_json(rq->d, rq->w);
	jw_close(rq->w, '}');
	jw_end(rq->w);
	return 0;
}

static int do_remote(const struct admin_req *rq)
{
	jw_open(rq->w, NULL, '{');
	kvmemd_remote_status(rq->d, rq->w);
	jw_close(rq->w, '}');
	jw_end(rq->w);
	return 0;
}

static int do_offload(const struct admin_req *rq)
{
	struct kvmemd_target t;

	if (!kvmemd_tier_has_store(rq->d)) {
		kvmemd_admin_error(rq->w, -EOPNOTSUPP,
				   "no backing store (set store.path)");
		return 0;
	}
	if (parse_target(rq->d, rq->argc - 1, rq->argv + 1, &t, rq->w))
		return 0;
	if (kvmemd_tier_offload(rq->d, &t, rq->waiter)) {
		kvmemd_admin_error(rq->w, -EBUSY, "an offload is running");
		return 0;
	}
	return 1;
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* A prefix key in hexadecimal: 0, or -EINVAL. */
static int parse_key(const char *s, uint8_t *key)
{
	size_t i;
	int hi, lo;

	if (strlen(s) != 2 * KVMEM_PREFIX_KEY_BYTES)
		return -EINVAL;
	for (i = 0; i < KVMEM_PREFIX_KEY_BYTES; i++) {
		hi = hex_digit(s[2 * i]);
		lo = hex_digit(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -EINVAL;
		key[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

/* A tenant as the admin wrote it, a uid or "@" and a gid: 0, or an error
 * reply in @w. */
static int parse_tenant(const char *s, uint64_t *tenant, struct jw *w)
{
	const char *n = s + (*s == '@');
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(n, &end, 10);
	if (*n < '0' || *n > '9' || *end || errno || v >= UINT32_MAX) {
		kvmemd_admin_error(w, -EINVAL,
				   "\"%s\" is neither a uid nor @ and a gid",
				   s);
		return -EINVAL;
	}
	*tenant = v | (*s == '@' ? KVMEMD_TENANT_GROUP : 0);
	return 0;
}

static int do_prefixes(const struct admin_req *rq)
{
	uint64_t tenant;

	if (rq->argc > 2) {
		kvmemd_admin_error(rq->w, -EINVAL, "usage: prefixes [TENANT]");
		return 0;
	}
	if (rq->argc == 2 && parse_tenant(rq->argv[1], &tenant, rq->w))
		return 0;
	kvmemd_prefix_list(rq->d, rq->argc == 2 ? &tenant : NULL, rq->w);
	return 0;
}

static int do_prefix_drop(const struct admin_req *rq)
{
	uint8_t key[KVMEM_PREFIX_KEY_BYTES];
	uint64_t tenant;

	if (rq->argc < 2 || rq->argc > 3) {
		kvmemd_admin_error(rq->w, -EINVAL,
				   "usage: prefix-drop TENANT [KEY]");
		return 0;
	}
	if (parse_tenant(rq->argv[1], &tenant, rq->w))
		return 0;
	if (rq->argc == 3 && parse_key(rq->argv[2], key)) {
		kvmemd_admin_error(rq->w, -EINVAL,
				   "a key is %d hexadecimal digits, not \"%s\"",
				   2 * KVMEM_PREFIX_KEY_BYTES, rq->argv[2]);
		return 0;
	}
	jw_open(rq->w, NULL, '{');
	jw_u64(rq->w, "dropped",
	       kvmemd_prefix_drop(rq->d, tenant, rq->argc == 3 ? key : NULL));
	jw_close(rq->w, '}');
	jw_end(rq->w);
	return 0;
}

static int do_prefix_inject(const struct admin_req *rq)
{
	char **argv = rq->argv;
	uint64_t tenant, flips, seed = 0, pages, bits;
	char *end;
	int ret;

	if (inject_off(rq))
		return 0;
	if ((rq->argc != 4 && rq->argc != 6) || strcmp(argv[2], "flips") ||
	    (rq->argc == 6 && strcmp(argv[4], "seed")))
		goto usage;
	if (parse_tenant(argv[1], &tenant, rq->w))
		return 0;
	errno = 0;
	flips = strtoull(argv[3], &end, 10);
	if (*end || errno || !flips || flips > 8)
		goto usage;
	if (rq->argc == 6) {
		seed = strtoull(argv[5], &end, 0);
		if (*end || errno)
			goto usage;
	}
	ret = kvmemd_prefix_inject(rq->d, tenant, (uint32_t)flips, seed, &pages,
				   &bits);
	if (ret) {
		kvmemd_admin_error(rq->w, ret, "injection failed: %s",
				   strerror(-ret));
		return 0;
	}
	jw_open(rq->w, NULL, '{');
	jw_u64(rq->w, "pages", pages);
	jw_u64(rq->w, "bits", bits);
	jw_close(rq->w, '}');
	jw_end(rq->w);
	return 0;
usage:
	kvmemd_admin_error(
		rq->w, -EINVAL,
		"usage: prefix-inject TENANT flips K [seed S], K 1..8");
	return 0;
}

static int do_policy(const struct admin_req *rq)
{
	cmd_policy(rq->d, rq->argc, rq->argv, rq->w);
	return 0;
}

struct admin_cmd {
	const char *name;
	int max_args; /* words after the name; the command checks further */
	int (*fn)(const struct admin_req *rq);
};

static const struct admin_cmd cmds[] = {
	{ .name = "version", .max_args = 0, .fn = do_version },
	{ .name = "status", .max_args = 0, .fn = do_status },
	{ .name = "stats", .max_args = 0, .fn = do_stats },
	{ .name = "sessions", .max_args = 0, .fn = do_sessions },
	{ .name = "seqs", .max_args = MAX_WORDS, .fn = do_seqs },
	{ .name = "scrub", .max_args = MAX_WORDS, .fn = do_scrub },
	{ .name = "events", .max_args = MAX_WORDS, .fn = do_events },
	{ .name = "errors", .max_args = 0, .fn = do_errors },
	{ .name = "reset-counters", .max_args = 0, .fn = do_reset },
	{ .name = "inject", .max_args = MAX_WORDS, .fn = do_inject },
	{ .name = "policy", .max_args = MAX_WORDS, .fn = do_policy },
	{ .name = "tier", .max_args = 0, .fn = do_tier },
	{ .name = "remote", .max_args = 0, .fn = do_remote },
	{ .name = "offload", .max_args = MAX_WORDS, .fn = do_offload },
	{ .name = "prefixes", .max_args = MAX_WORDS, .fn = do_prefixes },
	{ .name = "prefix-drop", .max_args = MAX_WORDS, .fn = do_prefix_drop },
	{ .name = "prefix-inject",
	  .max_args = MAX_WORDS,
	  .fn = do_prefix_inject },
};

int kvmemd_admin(struct kvmemd *d, char *req, struct kvmemd_waiter *waiter,
		 struct jw *w)
{
	char *argv[MAX_WORDS + 1], *save = NULL, *word;
	struct admin_req rq;
	size_t i;
	int argc = 0;

	jw_reset(w);
	for (word = strtok_r(req, " \t\n", &save); word;
	     word = strtok_r(NULL, " \t\n", &save)) {
		if (argc == MAX_WORDS) {
			kvmemd_admin_error(w, -EINVAL, "too many words");
			return 0;
		}
		argv[argc++] = word;
	}
	argv[argc] = NULL;
	if (!argc) {
		kvmemd_admin_error(w, -EINVAL, "empty request");
		return 0;
	}
	for (i = 0; i < ARRAY_SIZE(cmds); i++) {
		if (strcmp(argv[0], cmds[i].name))
			continue;
		if (argc - 1 > cmds[i].max_args) {
			kvmemd_admin_error(w, -EINVAL, "%s takes no arguments",
					   argv[0]);
			return 0;
		}
		rq.d = d;
		rq.argc = argc;
		rq.argv = argv;
		rq.waiter = waiter;
		rq.w = w;
		return cmds[i].fn(&rq);
	}
	kvmemd_admin_error(w, -EINVAL, "unknown request \"%s\"", argv[0]);
	return 0;
}
