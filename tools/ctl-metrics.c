/* SPDX-License-Identifier: MIT */
/*
 * ctl-metrics.c - kvmemctl metrics: Prometheus's text exposition of
 * kvmemd's replies
 *
 * Text exposition format 0.0.4 from the replies to stats, errors, scrub
 * status, sessions, tier and remote. Each family is written whole, its
 * HELP and TYPE lines first; label values come from the daemon and are
 * escaped.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl-metrics.h"
#include "ctl.h"

/* The exposition being written, and the reply it is written from. */
struct metrics {
	struct rd *r;
	FILE *f;
};

static void m_family(struct metrics *m, const char *name, const char *type,
		     const char *help)
{
	fprintf(m->f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void m_label_value(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			fprintf(f, "\\%c", *s);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
}

/*
 * One sample: @labels is NULL or "k1", "v1", "k2", "v2", ..., NULL.
 */
static void m_sample(struct metrics *m, const char *name,
		     const char *const *labels, double v, const uint64_t *u)
{
	char buf[32];
	int i;

	fputs(name, m->f);
	for (i = 0; labels && labels[i]; i += 2) {
		fprintf(m->f, "%s%s=\"", i ? "," : "{", labels[i]);
		m_label_value(m->f, labels[i + 1]);
		fputc('"', m->f);
	}
	if (labels && labels[0])
		fputc('}', m->f);
	if (u) {
		fprintf(m->f, " %" PRIu64 "\n", *u);
	} else {
		fmt_shortest(buf, sizeof(buf), v);
		fprintf(m->f, " %s\n", buf);
	}
}

/* An integer member @key of @o as a sample. */
static void m_u64(struct metrics *m, const char *name,
		  const char *const *labels, const struct json *o,
		  const char *key)
{
	uint64_t v = g_u64(m->r, o, key);

	m_sample(m, name, labels, 0, &v);
}

static void m_num(struct metrics *m, const char *name,
		  const char *const *labels, const struct json *o,
		  const char *key)
{
	m_sample(m, name, labels, g_num(m->r, o, key), NULL);
}

/* A family with one unlabelled sample, integer member @key of @o. */
static void m_one(struct metrics *m, const char *name, const char *type,
		  const char *help, const struct json *o, const char *key)
{
	m_family(m, name, type, help);
	m_u64(m, name, NULL, o, key);
}

/* A gauge with one unlabelled sample, number member @key of @o. */
static void m_one_num(struct metrics *m, const char *name, const char *help,
		      const struct json *o, const char *key)
{
	m_family(m, name, "gauge", help);
	m_num(m, name, NULL, o, key);
}

/*
 * The pool's name into @pool, and its device's into @dev where it has one;
 * where not, the labels end at @tail[2] (the "device" pair is dropped).
 */
static void pool_labels(struct rd *r, const struct json *p, char *pool,
			size_t plen, char *dev, size_t dlen, const char **tail)
{
	g_str(r, p, "pool", pool, plen);
	if (json_get(p, "device"))
		g_str(r, p, "device", dev, dlen);
	else
		tail[2] = NULL;
}

/* Prefix sharing, from the stats of a kvmemd that has it. */
static void metrics_prefix(struct metrics *m, const struct json *v)
{
	static const struct {
		const char *name, *type, *key, *help;
	} series[] = {
		{ "kvmem_prefix_bytes", "gauge", "bytes",
		  "Bytes of published blocks kvmemd keeps." },
		{ "kvmem_prefix_blocks", "gauge", "blocks",
		  "Published blocks kvmemd keeps." },
		{ "kvmem_prefix_uids", "gauge", "tenants",
		  "Uids that keep published blocks." },
		{ "kvmem_prefix_hits_total", "counter", "hits",
		  "Published blocks attached." },
		{ "kvmem_prefix_misses_total", "counter", "misses",
		  "Attaches that ended on a block nobody published." },
		{ "kvmem_prefix_published_total", "counter", "published",
		  "Blocks published." },
		{ "kvmem_prefix_refused_total", "counter", "refused",
		  "Publishes refused: not a publisher, over a tenant's cap, no "
		  "room, sharing off." },
		{ "kvmem_prefix_evicted_total", "counter", "evicted",
		  "Published blocks evicted for a publish: of the tenant over "
		  "its cap, or of a tenant over its fair share." },
		{ "kvmem_prefix_expired_total", "counter", "expired",
		  "Published blocks dropped after prefix.idle_seconds "
		  "unused." },
		{ "kvmem_prefix_damaged_total", "counter", "damaged",
		  "Published blocks dropped because their copy no longer "
		  "verified." },
		{ "kvmem_prefix_corrected_total", "counter", "corrected",
		  "Words the scrubber corrected in published copies." },
	};
	const struct json *p = json_get(v, "prefix");
	size_t i;

	if (!p)
		return;
	p = g_obj(m->r, v, "prefix");
	for (i = 0; i < sizeof(series) / sizeof(series[0]); i++)
		m_one(m, series[i].name, series[i].type, series[i].help, p,
		      series[i].key);
}

/* The GPU tier's moves, of each pool that has one (a gpu pool of a
 * kvmemd that moves pages). */
static void metrics_gpu_tier(struct metrics *m, const struct json *pools,
			     size_t n)
{
	static const struct {
		const char *name, *key, *help, *label, *value;
	} series[] = {
		{ "kvmem_gpu_tier_moves_total", "promoted_pages",
		  "Pages moved into the GPU tier, and out of it.", "direction",
		  "to_gpu" },
		{ "kvmem_gpu_tier_moves_total", "demoted_pages", NULL,
		  "direction", "to_host" },
		{ "kvmem_gpu_tier_moved_bytes_total", "moved_bytes",
		  "Bytes of pages moved either way.", NULL, NULL },
		{ "kvmem_gpu_tier_move_errors_total", "move_errors",
		  "Copies to or from the GPU that failed, or arrived other "
		  "than they left.",
		  NULL, NULL },
		{ "kvmem_gpu_tier_changed_pages_total", "changed_pages",
		  "Pages that came back from the GPU changed, and were "
		  "checked by their code.",
		  NULL, NULL },
		{ "kvmem_gpu_tier_checked_pages_total", "checked_in_place",
		  "Pages in the GPU tier the scrubber checked where they "
		  "are, by the GPU's kernels, and in copies.",
		  "where", "in_place" },
		{ "kvmem_gpu_tier_checked_pages_total", "checked_in_copies",
		  NULL, "where", "in_copies" },
	};
	char pool[32], dev[48];
	size_t i, k;

	for (k = 0; k < sizeof(series) / sizeof(series[0]); k++) {
		if (series[k].help)
			m_family(m, series[k].name, "counter", series[k].help);
		for (i = 0; i < n; i++) {
			const char *l[] = { series[k].label,
					    series[k].value,
					    "pool",
					    pool,
					    "device",
					    dev,
					    NULL };
			const char **lp = series[k].label ? l : l + 2;

			if (!json_get(&pools[i], series[k].key))
				continue;
			pool_labels(m->r, &pools[i], pool, sizeof(pool), dev,
				    sizeof(dev), l + 2);
			m_u64(m, series[k].name, lp, &pools[i], series[k].key);
		}
	}
}

static void metrics_stats(struct metrics *m, const struct json *v)
{
	static const struct {
		const char *state, *key;
	} states[] = { { "free", "free_bytes" },
		       { "open", "open_bytes" },
		       { "sealed", "sealed_bytes" },
		       { "reserved", "reserved_bytes" } };
	static const struct {
		const char *name, *key, *help;
	} conns[] = {
		{ "kvmem_sessions_attached_total", "attached",
		  "Sessions attached since kvmemd started." },
		{ "kvmem_sessions_refused_total", "refused",
		  "Clients refused at attach since kvmemd started." },
		{ "kvmem_sessions_detached_total", "detached",
		  "Sessions that ended by the client's hang-up." },
		{ "kvmem_sessions_dropped_total", "dropped",
		  "Sessions kvmemd dropped for breaking the protocol." },
		{ "kvmem_connections_evicted_total", "evicted",
		  "Connections closed while waiting for their hello, to "
		  "make room for newer ones." },
		{ "kvmem_accept_errors_total", "accept_errors",
		  "Connections refused because kvmemd was out of file "
		  "descriptors." },
	};
	const struct json *d = g_obj(m->r, v, "daemon");
	const struct json *sc = g_obj(m->r, v, "scrub");
	const struct json *pools;
	char pool[32], dev[48];
	size_t n, i, k;

	m_one_num(m, "kvmem_uptime_seconds", "Seconds since kvmemd started.", v,
		  "uptime_s");
	m_one_num(m, "kvmem_seconds_since_reset",
		  "Seconds since the volatile counters were last reset "
		  "(kvmemctl reset-counters) or kvmemd started.",
		  v, "seconds_since_reset");
	m_one(m, "kvmem_sessions", "gauge", "Sessions attached now.", d,
	      "sessions");
	for (i = 0; i < sizeof(conns) / sizeof(conns[0]); i++)
		m_one(m, conns[i].name, "counter", conns[i].help, d,
		      conns[i].key);
	m_one(m, "kvmem_ops_total", "counter",
	      "Ring operations served since kvmemd started.", d, "ops");

	/* A pool on a GPU also carries its device's UUID. */
	pools = g_arr(m->r, v, "pools", &n);
	m_family(m, "kvmem_pool_size_bytes", "gauge", "Size of each pool.");
	for (i = 0; i < n; i++) {
		const char *l[] = { "pool", pool, "device", dev, NULL };

		pool_labels(m->r, &pools[i], pool, sizeof(pool), dev,
			    sizeof(dev), l);
		m_u64(m, "kvmem_pool_size_bytes", l, &pools[i], "bytes");
	}
	m_family(m, "kvmem_pool_bytes", "gauge",
		 "Pool bytes by state: free (not reserved), reserved "
		 "(promised to sessions), open and sealed (in slots being "
		 "written, and sealed).");
	for (i = 0; i < n; i++) {
		for (k = 0; k < sizeof(states) / sizeof(states[0]); k++) {
			const char *l[] = { "pool",   pool,
					    "state",  states[k].state,
					    "device", dev,
					    NULL };

			pool_labels(m->r, &pools[i], pool, sizeof(pool), dev,
				    sizeof(dev), l + 2);
			m_u64(m, "kvmem_pool_bytes", l, &pools[i],
			      states[k].key);
		}
	}
	metrics_gpu_tier(m, pools, n);
	m_family(m, "kvmem_degraded_pages", "gauge",
		 "Pages with values an uncorrectable error took away.");
	for (i = 0; i < n; i++) {
		const char *l[] = { "pool", pool, "device", dev, NULL };

		pool_labels(m->r, &pools[i], pool, sizeof(pool), dev,
			    sizeof(dev), l);
		m_u64(m, "kvmem_degraded_pages", l, &pools[i],
		      "degraded_pages");
	}
	m_one(m, "kvmem_scrub_pages_total", "counter",
	      "Pages the scrubber has checked.", sc, "pages_total");
	m_one(m, "kvmem_scrub_ce", "gauge",
	      "Words the scrubber corrected since the last reset-counters.", sc,
	      "ce");
	m_one(m, "kvmem_scrub_ue", "gauge",
	      "Uncorrectable words the scrubber found since the last "
	      "reset-counters.",
	      sc, "ue");
	metrics_prefix(m, v);
}

static void metrics_errors(struct metrics *m, const struct json *v)
{
	static const struct {
		const char *name, *type, *key, *help;
	} fam[] = {
		{ "kvmem_ce_total", "counter", "ce_total",
		  "Corrected words, persisted across restarts." },
		{ "kvmem_ue_total", "counter", "ue_total",
		  "Uncorrectable words, persisted across restarts." },
		{ "kvmem_ce", "gauge", "ce",
		  "Corrected words since kvmemd started or the last "
		  "reset-counters." },
		{ "kvmem_ue", "gauge", "ue",
		  "Uncorrectable words since kvmemd started or the last "
		  "reset-counters." },
	};
	const struct json *cn;
	char pool[32], tier[32], codec[32];
	size_t n, i, k;

	cn = g_arr(m->r, v, "counters", &n);
	for (k = 0; k < sizeof(fam) / sizeof(fam[0]); k++) {
		m_family(m, fam[k].name, fam[k].type, fam[k].help);
		for (i = 0; i < n; i++) {
			const char *l[] = {
				"pool",
				g_str(m->r, &cn[i], "pool", pool, sizeof(pool)),
				"tier",
				g_str(m->r, &cn[i], "tier", tier, sizeof(tier)),
				"codec",
				g_str(m->r, &cn[i], "codec", codec, sizeof(codec)),
				NULL,
			};

			m_u64(m, fam[k].name, l, &cn[i], fam[k].key);
		}
	}
}

static void metrics_scrub(struct metrics *m, const struct json *v)
{
	static const char *const states[] = { "idle", "patrol", "ondemand" };
	static const struct {
		const char *name, *key, *help;
	} est[] = {
		{ "kvmem_scrub_lambda_per_bit_hour", "lambda_per_bit_hour",
		  "Estimated bit error rate per hour over the last patrol "
		  "pass." },
		{ "kvmem_scrub_p_ue_word", "p_ue_word",
		  "Estimated probability that a word becomes uncorrectable "
		  "in one patrol cycle." },
		{ "kvmem_scrub_expected_ue_per_cycle", "expected_ue_per_cycle",
		  "Expected uncorrectable words per patrol cycle." },
	};
	const struct json *e, *last, *a;
	char state[32], codec[32];
	size_t n, i, k;
	uint64_t one;

	e = g_arr(m->r, v, "estimate", &n);
	m_family(m, "kvmem_scrub_enabled", "gauge",
		 "1 when the patrol scrubber is enabled.");
	one = g_bool(m->r, v, "enabled");
	m_sample(m, "kvmem_scrub_enabled", NULL, 0, &one);
	g_str(m->r, v, "state", state, sizeof(state));
	m_family(m, "kvmem_scrub_state", "gauge",
		 "1 for what the scrubber is doing now: idle, patrol or "
		 "ondemand.");
	for (i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
		const char *l[] = { "state", states[i], NULL };

		one = !strcmp(state, states[i]);
		m_sample(m, "kvmem_scrub_state", l, 0, &one);
	}
	m_one(m, "kvmem_scrub_rate_bytes_per_second", "gauge",
	      "Configured patrol rate (0: patrol off).", v, "rate_bytes_per_s");
	m_one(m, "kvmem_scrub_cycle_target_seconds", "gauge",
	      "Configured patrol cycle (0: use the rate).", v, "cycle_s");
	m_one_num(m, "kvmem_scrub_cycle_seconds",
		  "Seconds a full patrol pass takes at the effective rate.", v,
		  "current_cycle_duration");
	m_one(m, "kvmem_scrub_passes_total", "counter",
	      "Scrub passes completed.", v, "passes");
	m_one(m, "kvmem_scrub_bytes_total", "counter", "Bytes scrubbed.", v,
	      "bytes_total");
	last = g_obj_or_null(m->r, v, "last_pass");
	m_family(m, "kvmem_scrub_last_pass_start_time_seconds", "gauge",
		 "Unix time the last completed scrub pass started.");
	if (last)
		m_num(m, "kvmem_scrub_last_pass_start_time_seconds", NULL, last,
		      "started");
	m_family(m, "kvmem_scrub_last_pass_duration_seconds", "gauge",
		 "Duration of the last completed scrub pass.");
	if (last)
		m_num(m, "kvmem_scrub_last_pass_duration_seconds", NULL, last,
		      "duration_s");
	a = g_obj(m->r, v, "adapt");
	m_one_num(m, "kvmem_scrub_target_ue_per_day",
		  "Uncorrectable words a day the patrol adapts to stay under "
		  "(0: off).",
		  a, "target_ue_per_day");
	m_one(m, "kvmem_scrub_adapt_level", "gauge",
	      "The patrol runs at 2^level times its configured rate.", a,
	      "level");
	m_one_num(m, "kvmem_scrub_ue_per_day",
		  "Uncorrectable words a day predicted at the patrol's cycle.",
		  a, "ue_per_day");
	m_family(m, "kvmem_scrub_adapt_short_of_target", "gauge",
		 "1 when the prediction is over the target even at "
		 "scrub.rate_max.");
	one = g_bool(m->r, a, "short_of_target");
	m_sample(m, "kvmem_scrub_adapt_short_of_target", NULL, 0, &one);
	m_family(m, "kvmem_scrub_adapt_steps_total", "counter",
		 "Steps of the adaptive patrol, up (faster) and down.");
	for (i = 0; i < 2; i++) {
		const char *l[] = { "direction", i ? "down" : "up", NULL };

		one = g_u64(m->r, a, i ? "steps_down" : "steps_up");
		m_sample(m, "kvmem_scrub_adapt_steps_total", l, 0, &one);
	}
	for (k = 0; k < sizeof(est) / sizeof(est[0]); k++) {
		m_family(m, est[k].name, "gauge", est[k].help);
		for (i = 0; i < n; i++) {
			const char *l[] = { "codec",
					    g_str(m->r, &e[i], "codec", codec,
						  sizeof(codec)),
					    NULL };

			m_num(m, est[k].name, l, &e[i], est[k].key);
		}
	}
}

static void metrics_sessions(struct metrics *m, const struct json *v)
{
	static const struct {
		const char *name, *type, *key, *help;
	} fam[] = {
		{ "kvmem_session_arena_bytes", "gauge", "arena_bytes",
		  "Arena of each session." },
		{ "kvmem_session_used_bytes", "gauge", "used_bytes",
		  "Bytes of its arena each session uses." },
		{ "kvmem_session_seqs", "gauge", "seqs",
		  "Sequences of each session." },
		{ "kvmem_session_ops_total", "counter", "ops",
		  "Ring operations of each session." },
		{ "kvmem_session_ce", "gauge", "ce",
		  "Corrected words in each session's pages." },
		{ "kvmem_session_ue", "gauge", "ue",
		  "Uncorrectable words in each session's pages." },
		{ "kvmem_session_degraded_pages", "gauge", "degraded_pages",
		  "Degraded pages of each session." },
		{ "kvmem_session_cold_bytes", "gauge", "cold_bytes",
		  "Bytes of each session's pages on the backing store." },
		{ "kvmem_session_offloads_total", "counter", "offloads",
		  "Pages of each session written to the backing store." },
		{ "kvmem_session_reloads_total", "counter", "reloads",
		  "Pages of each session read back from the backing store." },
	};
	const struct json *s;
	char id[24], pid[24], uid[24], fmt[32], codec[32];
	size_t n, i, k;
	uint64_t one = 1;

	s = g_arr(m->r, v, "sessions", &n);
	m_family(m, "kvmem_session_info", "gauge",
		 "1 for each session, with its pid, uid and page format.");
	for (i = 0; i < n; i++) {
		const char *l[] = {
			"session",
			id,
			"pid",
			pid,
			"uid",
			uid,
			"format",
			g_str(m->r, &s[i], "format", fmt, sizeof(fmt)),
			"codec",
			g_str(m->r, &s[i], "codec", codec, sizeof(codec)),
			NULL,
		};

		snprintf(id, sizeof(id), "%" PRIu64, g_u64(m->r, &s[i], "id"));
		snprintf(pid, sizeof(pid), "%" PRIu64,
			 g_u64(m->r, &s[i], "pid"));
		snprintf(uid, sizeof(uid), "%" PRIu64,
			 g_u64(m->r, &s[i], "uid"));
		m_sample(m, "kvmem_session_info", l, 0, &one);
	}
	for (k = 0; k < sizeof(fam) / sizeof(fam[0]); k++) {
		m_family(m, fam[k].name, fam[k].type, fam[k].help);
		for (i = 0; i < n; i++) {
			const char *l[] = { "session", id, NULL };

			snprintf(id, sizeof(id), "%" PRIu64,
				 g_u64(m->r, &s[i], "id"));
			m_u64(m, fam[k].name, l, &s[i], fam[k].key);
		}
	}
}

/* Published blocks on the store: nothing where kvmemd keeps none there,
 * or is older than them. */
static void metrics_store_prefixes(struct metrics *m, const struct json *v)
{
	static const struct {
		const char *name, *type, *key, *help;
	} one[] = {
		{ "kvmem_store_prefix_blocks", "gauge", "blocks",
		  "Published prefix blocks on the backing store." },
		{ "kvmem_store_prefix_bytes", "gauge", "bytes",
		  "Bytes of the published prefix blocks on the backing store." },
		{ "kvmem_store_prefix_written_total", "counter", "written",
		  "Published prefix blocks written to the backing store." },
		{ "kvmem_store_prefix_read_total", "counter", "taken",
		  "Published prefix blocks read back from the backing store "
		  "at start." },
		{ "kvmem_store_prefix_fetched_total", "counter", "fetched",
		  "Published prefix blocks read back from the backing store "
		  "by attaches that missed them." },
		{ "kvmem_store_prefix_refused_total", "counter", "refused",
		  "Published prefix blocks on the backing store that failed "
		  "their checks, dropped." },
	};
	const struct json *p;
	size_t i;

	if (!json_get(v, "store_prefixes"))
		return;
	p = g_obj_or_null(m->r, v, "store_prefixes");
	if (!p)
		return;
	for (i = 0; i < sizeof(one) / sizeof(one[0]); i++)
		m_one(m, one[i].name, one[i].type, one[i].help, p, one[i].key);
}

static void metrics_tier(struct metrics *m, const struct json *v)
{
	static const char *const tiers[] = { "hot", "warm", "archive", "cold",
					     "gpu" };
	static const struct {
		const char *name, *key, *help;
		bool archive; /* the archive tier's */
	} moves[] = {
		{ "kvmem_offloads_total", "offloads",
		  "Pages written to the backing store.", false },
		{ "kvmem_offload_bytes_total", "offload_bytes",
		  "Bytes of pages written to the backing store.", false },
		{ "kvmem_reloads_total", "reloads",
		  "Pages read back from the backing store.", false },
		{ "kvmem_reload_bytes_total", "reload_bytes",
		  "Bytes of pages read back from the backing store.", false },
		{ "kvmem_reload_degraded_total", "reload_degraded",
		  "Pages that came back from the backing store degraded.",
		  false },
		{ "kvmem_reload_lost_total", "reload_lost",
		  "Pages that came back from the backing store as something "
		  "else, their values erased.",
		  false },
		{ "kvmem_archived_total", "archived",
		  "Pages re-encoded in the archive format and codec.", true },
		{ "kvmem_archived_bytes_total", "archived_bytes",
		  "Bytes of slots of pages re-encoded for the archive tier.",
		  true },
		{ "kvmem_archive_refused_total", "archive_refused",
		  "Pages the archive tier refused: not as they were sealed.",
		  true },
	};
	static const struct {
		const char *op, *key;
	} errs[] = { { "read", "read_errors" }, { "write", "write_errors" } };
	const struct json *ts = g_obj(m->r, v, "tiers");
	const struct json *st = g_obj_or_null(m->r, v, "store");
	const bool arch = has_archive(v);
	uint64_t used;
	size_t i;

	m_family(m, "kvmem_tier_pages", "gauge",
		 "Pages in each tier: hot, warm and archive in the sessions' "
		 "host memory, cold on the backing store, gpu in their GPU "
		 "memory.");
	for (i = 0; i < sizeof(tiers) / sizeof(tiers[0]); i++) {
		const char *l[] = { "tier", tiers[i], NULL };

		if (tier_shown(ts, tiers[i], arch))
			m_u64(m, "kvmem_tier_pages", l,
			      g_obj(m->r, ts, tiers[i]), "pages");
	}
	m_family(m, "kvmem_tier_bytes", "gauge",
		 "Bytes of the pages in each tier.");
	for (i = 0; i < sizeof(tiers) / sizeof(tiers[0]); i++) {
		const char *l[] = { "tier", tiers[i], NULL };

		if (tier_shown(ts, tiers[i], arch))
			m_u64(m, "kvmem_tier_bytes", l,
			      g_obj(m->r, ts, tiers[i]), "bytes");
	}
	for (i = 0; i < sizeof(moves) / sizeof(moves[0]); i++)
		if (arch || !moves[i].archive)
			m_one(m, moves[i].name, "counter", moves[i].help, v,
			      moves[i].key);
	/* The store's families only where there is one. */
	if (!st)
		return;
	m_one(m, "kvmem_store_size_bytes", "gauge",
	      "Size of the backing store, its header included.", st, "size");
	m_family(m, "kvmem_store_used_bytes", "gauge",
		 "Bytes of the backing store that hold pages.");
	used = g_u64(m->r, st, "used_units") * g_store_unit(m->r, st);
	m_sample(m, "kvmem_store_used_bytes", NULL, 0, &used);
	m_family(m, "kvmem_store_errors_total", "counter",
		 "Backing store I/Os that failed (an errno or short), by "
		 "operation.");
	for (i = 0; i < sizeof(errs) / sizeof(errs[0]); i++) {
		const char *l[] = { "op", errs[i].op, NULL };

		m_u64(m, "kvmem_store_errors_total", l, st, errs[i].key);
	}
	metrics_store_prefixes(m, v);
}

/* The shared tier: nothing where kvmemd has none, or is older than it. */
static void metrics_remote(struct metrics *m, const struct json *v)
{
	static const struct {
		const char *name, *type, *obj, *key, *help;
	} one[] = {
		{ "kvmem_remote_queued_bytes", "gauge", NULL, "queued_bytes",
		  "Bytes of records on their way to the shared tier." },
		{ "kvmem_remote_pushed_bytes_total", "counter", "push", "bytes",
		  "Bytes of records written to the shared tier." },
		{ "kvmem_remote_fetches_total", "counter", "fetch", "requests",
		  "Fetches of blocks from the shared tier (one an attach)." },
		{ "kvmem_remote_fetch_errors_total", "counter", "fetch",
		  "errors", "Fetches that the shared tier did not answer." },
		{ "kvmem_remote_kept_total", "counter", "fetch", "kept",
		  "Blocks fetched that passed every check and were kept as "
		  "published blocks here." },
		{ "kvmem_remote_keep_refused_total", "counter", "fetch",
		  "keep_refused",
		  "Blocks fetched and checked but not kept: no room here." },
		{ "kvmem_remote_fetched_bytes_total", "counter", "fetch",
		  "bytes", "Bytes of records read from the shared tier." },
		{ "kvmem_remote_repaired_total", "counter", "fetch", "repaired",
		  "Records whose pages needed correcting and were served "
		  "corrected." },
		{ "kvmem_remote_written_back_total", "counter", "fetch",
		  "written_back",
		  "Corrected records written back to the shared tier." },
		{ "kvmem_remote_deleted_total", "counter", "fetch", "deleted",
		  "Records past correcting deleted from the shared tier." },
		{ "kvmem_remote_words_corrected_total", "counter", "fetch",
		  "words_corrected",
		  "Words corrected in records read from the shared tier." },
		{ "kvmem_remote_words_uncorrectable_total", "counter", "fetch",
		  "words_uncorrectable",
		  "Uncorrectable words found in records read from the shared "
		  "tier." },
		{ "kvmem_remote_client_requests_total", "counter", "client",
		  "requests", "Requests sent to the cluster's nodes." },
		{ "kvmem_remote_client_redirects_total", "counter", "client",
		  "redirects",
		  "MOVED and ASK redirects the cluster client followed." },
		{ "kvmem_remote_client_retries_total", "counter", "client",
		  "retries",
		  "Passes of a batch after its first: redirects, failovers." },
		{ "kvmem_remote_client_timeouts_total", "counter", "client",
		  "timeouts",
		  "Connects and replies of the cluster that timed "
		  "out." },
		{ "kvmem_remote_client_errors_total", "counter", "client",
		  "errors", "Requests to the cluster that ended in an error." },
		{ "kvmem_remote_masters", "gauge", "client", "masters",
		  "Masters that serve slots in the client's map." },
		{ "kvmem_remote_connections", "gauge", "client", "connected",
		  "Connections open to the cluster's nodes." },
	};
	static const struct {
		const char *result, *key;
	} push[] = { { "pushed", "pushed" },
		     { "present", "present" },
		     { "dropped", "dropped" },
		     { "unchained", "unchained" },
		     { "error", "errors" } },
	  blocks[] = { { "hit", "hits" },
		       { "miss", "misses" },
		       { "unanswered", "unanswered" } };
	const struct json *rm, *fe, *ref, *cl;
	char state[32];
	uint64_t up;
	size_t i;

	if (!v)
		return;
	rm = g_obj(m->r, v, "remote");
	if (!g_bool(m->r, rm, "configured"))
		return;
	fe = g_obj(m->r, rm, "fetch");
	cl = g_obj(m->r, rm, "client");
	m_family(m, "kvmem_remote_up", "gauge",
		 "1 when the shared tier's cluster answers, 0 when it does "
		 "not.");
	up = !strcmp(g_str(m->r, rm, "state", state, sizeof(state)), "ok");
	m_sample(m, "kvmem_remote_up", NULL, 0, &up);
	for (i = 0; i < sizeof(one) / sizeof(one[0]); i++)
		m_one(m, one[i].name, one[i].type, one[i].help,
		      one[i].obj ? g_obj(m->r, rm, one[i].obj) : rm,
		      one[i].key);
	m_family(m, "kvmem_remote_push_total", "counter",
		 "Blocks kept here on their way to the shared tier, by "
		 "result: pushed, present (there already), dropped (queue "
		 "full), unchained (the block before was not there), error.");
	for (i = 0; i < sizeof(push) / sizeof(push[0]); i++) {
		const char *l[] = { "result", push[i].result, NULL };

		m_u64(m, "kvmem_remote_push_total", l, g_obj(m->r, rm, "push"),
		      push[i].key);
	}
	m_family(m, "kvmem_remote_fetch_blocks_total", "counter",
		 "Blocks asked of the shared tier, by result: hit, miss, "
		 "unanswered.");
	for (i = 0; i < sizeof(blocks) / sizeof(blocks[0]); i++) {
		const char *l[] = { "result", blocks[i].result, NULL };

		m_u64(m, "kvmem_remote_fetch_blocks_total", l, fe,
		      blocks[i].key);
	}
	/* The reasons as the reply names them: one kvmemd adds shows. */
	ref = g_obj(m->r, fe, "refused");
	m_family(m, "kvmem_remote_refused_total", "counter",
		 "Records read from the shared tier and refused, by reason: "
		 "header, tenant, shape, chain, payload, page.");
	for (i = 0; ref && i < ref->u.obj.n; i++) {
		const char *l[] = { "reason", ref->u.obj.m[i].key, NULL };

		m_u64(m, "kvmem_remote_refused_total", l, ref,
		      ref->u.obj.m[i].key);
	}
	m_family(m, "kvmem_remote_bytes_total", "counter",
		 "RESP bytes sent to the cluster (out) and read from it "
		 "(in).");
	for (i = 0; i < 2; i++) {
		const char *l[] = { "direction", i ? "in" : "out", NULL };

		m_u64(m, "kvmem_remote_bytes_total", l, cl,
		      i ? "bytes_in" : "bytes_out");
	}
}

/* The exposition of every reply in @text, or nothing when one fails. */
int metrics_text(struct ctl *c, char **text, size_t *len)
{
	static const struct {
		const char *req;
		void (*fn)(struct metrics *m, const struct json *v);
		bool new; /* older kvmemds do not know it: v is NULL */
	} parts[] = {
		{ "stats", metrics_stats, false },
		{ "errors", metrics_errors, false },
		{ "scrub status", metrics_scrub, false },
		{ "sessions", metrics_sessions, false },
		{ "tier", metrics_tier, false },
		{ "remote", metrics_remote, true },
	};
	enum { NPARTS = sizeof(parts) / sizeof(parts[0]) };
	struct rd r = { 0 };
	struct metrics m = { .r = &r };
	struct json *v[NPARTS] = { NULL };
	size_t i;
	int ret = CTL_OK;

	*text = NULL;
	*len = 0;
	/* Every reply first: no half an exposition when one fails. */
	for (i = 0; i < NPARTS && !ret; i++)
		ret = parts[i].new ? ctl_request_new(c, parts[i].req, &v[i])
				   : ctl_request(c, parts[i].req, &v[i]);
	if (!ret) {
		m.f = open_memstream(text, len);
		if (!m.f) {
			ctl_errx("out of memory");
			ret = CTL_FAILED;
		}
	}
	for (i = 0; i < NPARTS && !ret; i++) {
		r.req = parts[i].req;
		parts[i].fn(&m, v[i]);
		if (r.err[0]) {
			ctl_errx("%s: malformed reply from kvmemd: %s", r.req,
				 r.err);
			ret = CTL_FAILED;
		}
	}
	if (m.f && fclose(m.f) && !ret) {
		ctl_errx("out of memory");
		ret = CTL_FAILED;
	}
	if (ret) {
		free(*text);
		*text = NULL;
	}
	for (i = 0; i < NPARTS; i++)
		json_free(v[i]);
	return ret;
}
