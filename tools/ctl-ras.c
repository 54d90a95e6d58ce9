/* SPDX-License-Identifier: MIT */
/*
 * ctl-ras.c - kvmemctl's reliability commands: scrub, events, errors,
 * reset-counters and inject, over what kvmemd's ras.c answers
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl-ras.h"
#include "ctl.h"
#include "kvmem/inject.h"

/* ---- scrub ------------------------------------------------------------ */

/* One PASS object in a line. */
static void pass_line(struct rd *r, struct table *t, const char *key,
		      const struct json *p)
{
	char kind[32], target[64], at[32], dur[32], bytes[32];

	if (!p) {
		kv(t, key, "none");
		return;
	}
	kv(t, key,
	   "%s %s at %s, %s: %s in %" PRIu64 " pages; CE %" PRIu64
	   ", UE %" PRIu64 ", CRC %" PRIu64 ", %" PRIu64 " degraded, %" PRIu64
	   " restored",
	   g_str(r, p, "kind", kind, sizeof(kind)),
	   g_str(r, p, "target", target, sizeof(target)),
	   fmt_time(at, sizeof(at), g_num(r, p, "started")),
	   fmt_dur(dur, sizeof(dur), g_num(r, p, "duration_s")),
	   fmt_bytes(bytes, sizeof(bytes), (double)g_u64(r, p, "bytes")),
	   g_u64(r, p, "pages"), g_u64(r, p, "ce"), g_u64(r, p, "ue"),
	   g_u64(r, p, "crc"), g_u64(r, p, "degraded_pages"),
	   g_u64(r, p, "restored_pages"));
}

/* 2^level of @key: kvmemd's levels are at most 20; more is not shifted. */
static unsigned int times(struct rd *r, const struct json *o, const char *key)
{
	uint64_t k = g_u64(r, o, key);

	return k < 32 ? 1u << k : 0;
}

/* The adaptive patrol: its target, where it stands, its last steps. */
static void adapt_lines(struct rd *r, struct table *t, const struct json *a)
{
	double target = g_num(r, a, "target_ue_per_day");
	const struct json *st;
	char at[32], cyc[32];
	size_t n, i;

	if (!target) {
		kv(t, "adaptive", "off (scrub.target_ue_per_day = 0)");
		return;
	}
	kv(t, "adaptive",
	   "target %.3g UE/day: %ux the rate (at most %ux), %.3g UE/day "
	   "predicted%s",
	   target, times(r, a, "level"), times(r, a, "max_level"),
	   g_num(r, a, "ue_per_day"),
	   g_bool(r, a, "short_of_target")
		   ? ", over the target at rate_max: released pages are "
		     "archived at any age"
		   : "");
	st = g_arr(r, a, "steps", &n);
	for (i = n > 4 ? n - 4 : 0; i < n; i++)
		kv(t, "step", "%s: %ux -> %ux at %.3g UE/day, a %s cycle",
		   fmt_time(at, sizeof(at), g_num(r, &st[i], "time")),
		   times(r, &st[i], "from"), times(r, &st[i], "to"),
		   g_num(r, &st[i], "ue_per_day"),
		   fmt_dur(cyc, sizeof(cyc), g_num(r, &st[i], "cycle_s")));
}

static void render_scrub(struct rd *r, FILE *f, const struct json *v)
{
	static const char *const head[] = { "CODEC",	  "T",
					    "N",	  "WORDS",
					    "CE",	  "LAMBDA/BIT/HOUR",
					    "P(UE)/WORD", "E[UE]/CYCLE" };
	uint64_t rate = g_u64(r, v, "rate_bytes_per_s");
	uint64_t cycle = g_u64(r, v, "cycle_s");
	const struct json *est;
	char a[32], b[32], state[32], codec[32];
	struct table t;
	size_t n, i;

	t_init(&t, "ll");
	kv(&t, "patrol", "%s (enable_background %" PRIu64 "), %s now",
	   g_bool(r, v, "enabled") ? "enabled" : "disabled",
	   g_u64(r, v, "enable_background"),
	   g_str(r, v, "state", state, sizeof(state)));
	kv(&t, "rate", "%s",
	   rate ? fmt_rate(a, sizeof(a), (double)rate) : "0 (patrol off)");
	kv(&t, "cycle target", "%s",
	   cycle ? fmt_dur(a, sizeof(a), (double)cycle) : "0 (use the rate)");
	kv(&t, "full pass", "%s at the effective rate, %s",
	   fmt_dur(a, sizeof(a), g_num(r, v, "current_cycle_duration")),
	   fmt_rate(b, sizeof(b), g_num(r, v, "effective_rate_bytes_per_s")));
	adapt_lines(r, &t, g_obj(r, v, "adapt"));
	kv(&t, "verify on seal", "%s",
	   g_bool(r, v, "verify_on_seal") ? "yes" : "no");
	kv(&t, "passes", "%" PRIu64 ", %s scrubbed", g_u64(r, v, "passes"),
	   fmt_bytes(b, sizeof(b), (double)g_u64(r, v, "bytes_total")));
	pass_line(r, &t, "current pass", g_obj_or_null(r, v, "current"));
	pass_line(r, &t, "last pass", g_obj_or_null(r, v, "last_pass"));
	t_done(r, &t, f);

	est = g_arr(r, v, "estimate", &n);
	if (!n)
		return;
	fputc('\n', f);
	t_init(&t, "lrrrrrrr");
	t_row(&t, head);
	for (i = 0; i < n; i++) {
		const struct json *e = &est[i];

		t_cell(&t, "%s", g_str(r, e, "codec", codec, sizeof(codec)));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "t"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "n"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "words"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "ce"));
		t_cell(&t, "%.3g", g_num(r, e, "lambda_per_bit_hour"));
		t_cell(&t, "%.3g", g_num(r, e, "p_ue_word"));
		t_cell(&t, "%.3g", g_num(r, e, "expected_ue_per_cycle"));
	}
	t_done(r, &t, f);
}

static void render_pass(struct rd *r, FILE *f, const struct json *p)
{
	double dur = g_num(r, p, "duration_s");
	uint64_t bytes = g_u64(r, p, "bytes");
	char kind[32], target[64], a[32], b[32];
	struct table t;

	t_init(&t, "ll");
	kv(&t, "pass", "%s %s", g_str(r, p, "kind", kind, sizeof(kind)),
	   g_str(r, p, "target", target, sizeof(target)));
	kv(&t, "started", "%s", fmt_time(a, sizeof(a), g_num(r, p, "started")));
	kv(&t, "duration", "%s", fmt_dur(a, sizeof(a), dur));
	kv(&t, "scrubbed", "%s in %" PRIu64 " pages (%s)",
	   fmt_bytes(a, sizeof(a), (double)bytes), g_u64(r, p, "pages"),
	   fmt_rate(b, sizeof(b), dur > 0 ? (double)bytes / dur : 0));
	kv(&t, "words", "CE %" PRIu64 ", UE %" PRIu64, g_u64(r, p, "ce"),
	   g_u64(r, p, "ue"));
	kv(&t, "pages",
	   "%" PRIu64 " CRC mismatches, %" PRIu64 " degraded, %" PRIu64
	   " restored",
	   g_u64(r, p, "crc"), g_u64(r, p, "degraded_pages"),
	   g_u64(r, p, "restored_pages"));
	/* A pool pass of a kvmemd that shares prefixes ends with them. */
	if (!strcmp(target, "pool") && json_get(p, "prefix_pages"))
		kv(&t, "prefixes",
		   "%" PRIu64 " pages of published blocks, %" PRIu64
		   " blocks dropped (no longer verified)",
		   g_u64(r, p, "prefix_pages"), g_u64(r, p, "prefix_dropped"));
	t_done(r, &t, f);
}

/* N[K|M|G] bytes per second, passed on as the protocol allows. */
static int rate_arg(const char *s, char *out, size_t len)
{
	size_t n = strspn(s, "0123456789");
	uint64_t v;
	char num[24];

	if (n && n < sizeof(num) &&
	    (!s[n] || (strchr("kKmMgG", s[n]) && !s[n + 1]))) {
		memcpy(num, s, n);
		num[n] = 0;
		if (!ctl_parse_uint(num, UINT64_MAX, &v)) {
			snprintf(out, len, "%" PRIu64 "%s", v,
				 !s[n]			      ? ""
				 : s[n] == 'k' || s[n] == 'K' ? "K"
				 : s[n] == 'm' || s[n] == 'M' ? "M"
							      : "G");
			return 0;
		}
	}
	ctl_errx("BYTES_PER_S must be a number with an optional K, M or G, not "
		 "'%s'",
		 s);
	return -1;
}

/* A count of seconds with an optional s, m, h or d, in seconds. */
static int seconds_arg(const char *s, uint64_t *out)
{
	static const struct {
		char unit;
		uint64_t mul;
	} units[] = { { 's', 1 }, { 'm', 60 }, { 'h', 3600 }, { 'd', 86400 } };
	size_t n = strspn(s, "0123456789"), i;
	uint64_t v, mul = 1;
	char num[24];

	if (!n || n >= sizeof(num))
		return -1;
	if (s[n]) {
		if (s[n + 1])
			return -1;
		for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
			if (s[n] == units[i].unit)
				break;
		if (i == sizeof(units) / sizeof(units[0]))
			return -1;
		mul = units[i].mul;
	}
	memcpy(num, s, n);
	num[n] = 0;
	if (ctl_parse_uint(num, UINT32_MAX / mul, &v))
		return -1;
	*out = v * mul;
	return 0;
}

int cmd_scrub(struct ctl *c, int argc, char **argv)
{
	char req[REQ_MAX + 1], arg[64];
	const char *sub = argc ? argv[0] : "";
	uint64_t secs;
	int n, want = 1;

	if (!strcmp(sub, "status") || !strcmp(sub, "start") ||
	    !strcmp(sub, "stop")) {
		snprintf(req, sizeof(req), "scrub %s", sub);
	} else if (!strcmp(sub, "now")) {
		if (argc == 1) {
			snprintf(req, sizeof(req), "scrub now");
		} else {
			n = target_arg(argc - 1, argv + 1, arg, sizeof(arg));
			if (n < 0)
				return CTL_USAGE;
			want = 1 + n;
			snprintf(req, sizeof(req), "scrub now %s", arg);
		}
		if (argc != want)
			goto extra;
		/* A pass at full speed takes as long as the pool needs. */
		return ctl_simple(c, req, -1, render_pass);
	} else if (!strcmp(sub, "rate") && argc >= 2) {
		if (rate_arg(argv[1], arg, sizeof(arg)))
			return CTL_USAGE;
		want = 2;
		snprintf(req, sizeof(req), "scrub rate %s", arg);
	} else if (!strcmp(sub, "cycle") && argc >= 2) {
		if (seconds_arg(argv[1], &secs)) {
			ctl_errx("SECONDS must be a number with an optional "
				 "s, m, h or d, not '%s'",
				 argv[1]);
			return CTL_USAGE;
		}
		want = 2;
		snprintf(req, sizeof(req), "scrub cycle %" PRIu64, secs);
	} else if (!strcmp(sub, "target") && argc >= 2) {
		/* kvmemd checks the number, as it does in the file. */
		want = 2;
		if ((size_t)snprintf(req, sizeof(req), "scrub target %s",
				     argv[1]) >= sizeof(req)) {
			ctl_errx("UE_PER_DAY '%s' is too long", argv[1]);
			return CTL_USAGE;
		}
	} else {
		ctl_errx("scrub: expected status, start, stop, now [TARGET], "
			 "rate BYTES_PER_S, cycle SECONDS or target "
			 "UE_PER_DAY");
		return CTL_USAGE;
	}
	if (argc != want)
		goto extra;
	return ctl_simple(c, req, REPLY_TIMEOUT_MS, render_scrub);
extra:
	ctl_errx("scrub %s: unexpected argument '%s'", sub, argv[want]);
	return CTL_USAGE;
}

/* ---- events, errors, reset-counters ----------------------------------- */

static void render_events(struct rd *r, FILE *f, const struct json *v)
{
	static const char *const head[] = {
		"TIME",	  "UID",  "SESSION",  "SEQ",	"LAYER",
		"TOKENS", "POOL", "TIER",     "CODEC",	"REGION",
		"WORDS",  "KIND", "RESTORED", "SOURCE",
	};
	const struct json *ev;
	char at[32], pool[32], tier[32], codec[32], region[32], kind[32],
		source[32];
	uint64_t lost = g_u64(r, v, "lost");
	struct table t;
	size_t n, i;

	ev = g_arr(r, v, "events", &n);
	if (!n)
		fputs("no events\n", f);
	t_init(&t, "lrrrrrllllrlll");
	if (n)
		t_row(&t, head);
	for (i = 0; i < n; i++) {
		const struct json *e = &ev[i];

		t_cell(&t, "%s", fmt_time(at, sizeof(at), g_num(r, e, "time")));
		/* Events recorded before kvmemd kept the user have none. */
		if (json_get(e, "uid"))
			t_cell(&t, "%" PRIu64, g_u64(r, e, "uid"));
		else
			t_cell(&t, "-");
		t_cell(&t, "%" PRIu64, g_u64(r, e, "session"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "seq"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "layer"));
		t_cell(&t, "%" PRIu64 "-%" PRIu64, g_u64(r, e, "token_start"),
		       g_u64(r, e, "token_end"));
		t_cell(&t, "%s", g_str(r, e, "pool", pool, sizeof(pool)));
		t_cell(&t, "%s", g_str(r, e, "tier", tier, sizeof(tier)));
		t_cell(&t, "%s", g_str(r, e, "codec", codec, sizeof(codec)));
		t_cell(&t, "%s", g_str(r, e, "region", region, sizeof(region)));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "words"));
		t_cell(&t, "%s", g_str(r, e, "kind", kind, sizeof(kind)));
		t_cell(&t, "%s", g_bool(r, e, "restored") ? "yes" : "no");
		t_cell(&t, "%s", g_str(r, e, "source", source, sizeof(source)));
	}
	t_done(r, &t, f);
	if (lost)
		fprintf(f,
			"%" PRIu64 " older events fell out of kvmemd's "
			"in-memory log\n",
			lost);
}

/*
 * --since: Unix seconds, or an age N[.F]{s,m,h,d,w} with an optional
 * " ago" ("10m", "2h ago"), as whole Unix seconds.
 */
static int since_arg(const char *s, long long *out)
{
	static const struct {
		char unit;
		double mul;
	} units[] = { { 's', 1 },
		      { 'm', 60 },
		      { 'h', 3600 },
		      { 'd', 86400 },
		      { 'w', 604800 } };
	size_t n = strspn(s, "0123456789."), i;
	const char *rest = s + n;
	double v;
	char *end;

	if (!n || n > 20)
		return -1;
	v = strtod(s, &end);
	if (end != rest || !isfinite(v))
		return -1;
	if (!*rest) {
		*out = (long long)v;
		return 0;
	}
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (*rest == units[i].unit)
			break;
	if (i == sizeof(units) / sizeof(units[0]))
		return -1;
	rest++;
	if (*rest && strcmp(rest, " ago"))
		return -1;
	v = (double)time(NULL) - v * units[i].mul;
	*out = v > 0 ? (long long)v : 0;
	return 0;
}

int cmd_events(struct ctl *c, int argc, char **argv)
{
	char req[128];
	long long since;
	uint64_t limit;
	int n;

	n = snprintf(req, sizeof(req), "events");
	if (c->since) {
		if (since_arg(c->since, &since)) {
			ctl_errx("--since must be Unix seconds or an age like "
				 "10m, 2h or '1d ago', not '%s'",
				 c->since);
			return CTL_USAGE;
		}
		n += snprintf(req + n, sizeof(req) - (size_t)n, " since %lld",
			      since);
	}
	if (c->limit) {
		if (ctl_parse_uint(c->limit, UINT32_MAX, &limit)) {
			ctl_errx("--limit must be a number, not '%s'",
				 c->limit);
			return CTL_USAGE;
		}
		snprintf(req + n, sizeof(req) - (size_t)n, " limit %" PRIu64,
			 limit);
	}
	if (argc) {
		ctl_errx("events: unexpected argument '%s'%s", argv[0],
			 !strcmp(argv[0], "ago") ? " (quote the time: --since "
						   "'10m ago')"
						 : "");
		return CTL_USAGE;
	}
	return ctl_simple(c, req, REPLY_TIMEOUT_MS, render_events);
}

static void render_errors(struct rd *r, FILE *f, const struct json *v)
{
	static const char *const head[] = { "POOL", "TIER",	"CODEC",   "CE",
					    "UE",   "CE TOTAL", "UE TOTAL" };
	const struct json *cn;
	char pool[32], tier[32], codec[32], at[32], ago[32];
	struct table t;
	size_t n, i;

	cn = g_arr(r, v, "counters", &n);
	t_init(&t, "lllrrrr");
	t_row(&t, head);
	for (i = 0; i < n; i++) {
		const struct json *e = &cn[i];

		t_cell(&t, "%s", g_str(r, e, "pool", pool, sizeof(pool)));
		t_cell(&t, "%s", g_str(r, e, "tier", tier, sizeof(tier)));
		t_cell(&t, "%s", g_str(r, e, "codec", codec, sizeof(codec)));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "ce"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "ue"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "ce_total"));
		t_cell(&t, "%" PRIu64, g_u64(r, e, "ue_total"));
	}
	if (n)
		t_done(r, &t, f);
	else
		t_free(&t);
	fprintf(f,
		"%sCE/UE: corrected/uncorrectable words since %s (%s ago); "
		"the totals persist across restarts.\n",
		n ? "\n" : "no pool, tier or codec in use and no errors ever\n",
		fmt_time(at, sizeof(at), g_num(r, v, "since")),
		fmt_dur(ago, sizeof(ago), g_num(r, v, "seconds_since_reset")));
}

int cmd_errors(struct ctl *c, int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return ctl_simple(c, "errors", REPLY_TIMEOUT_MS, render_errors);
}

static void render_ok(struct rd *r, FILE *f, const struct json *v)
{
	if (!g_bool(r, v, "ok") && !r->err[0])
		snprintf(r->err, sizeof(r->err), "\"ok\" is false");
	fputs("volatile counters reset; the persistent totals are kept\n", f);
}

int cmd_reset(struct ctl *c, int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return ctl_simple(c, "reset-counters", REPLY_TIMEOUT_MS, render_ok);
}

/* ---- inject ----------------------------------------------------------- */

#define MAX_FLIP_BUCKETS 16
_Static_assert(MAX_FLIP_BUCKETS + 3 <= MAX_COLS, "the inject table fits");

/* by_flips of @o: its @n counts, n the same for every row. */
static void flips_cells(struct rd *r, struct table *t, const struct json *o,
			size_t n)
{
	const struct json *a = json_get(o, "by_flips");
	size_t i;
	uint64_t x;

	if (!a || a->type != JSON_ARRAY || a->u.arr.n != n) {
		if (!r->err[0])
			snprintf(r->err, sizeof(r->err),
				 "\"by_flips\" is not an array of %zu "
				 "integers",
				 n);
		return;
	}
	for (i = 0; i < n; i++) {
		if (json_u64(&a->u.arr.v[i], &x))
			g_bad(r, "by_flips", "an integer", &a->u.arr.v[i]);
		t_cell(t, "%" PRIu64, x);
	}
}

static void render_inject(struct rd *r, FILE *f, const struct json *v)
{
	const struct json *bf = json_get(v, "by_flips"), *cs;
	char align[MAX_FLIP_BUCKETS + 4], codec[32];
	size_t nb, n, i;
	struct table t;

	fprintf(f,
		"flipped %" PRIu64 " bits in %" PRIu64 " words of %" PRIu64
		" pages\n\n",
		g_u64(r, v, "bits"), g_u64(r, v, "words"),
		g_u64(r, v, "pages"));
	nb = bf && bf->type == JSON_ARRAY ? bf->u.arr.n : 0;
	if (nb < 2 || nb > MAX_FLIP_BUCKETS) {
		if (!r->err[0])
			snprintf(r->err, sizeof(r->err),
				 "\"by_flips\" is not an array of 2 to %d "
				 "integers",
				 MAX_FLIP_BUCKETS);
		return;
	}
	memset(align, 'r', sizeof(align));
	align[0] = 'l';
	align[nb + 3] = 0;
	t_init(&t, align);
	t_cell(&t, "CODEC");
	t_cell(&t, "WORDS");
	t_cell(&t, "BITS");
	for (i = 0; i < nb; i++)
		t_cell(&t, i + 1 < nb ? "%zu FLIPS" : "%zu+ FLIPS", i);
	cs = g_arr(r, v, "codecs", &n);
	for (i = 0; i < n; i++) {
		t_cell(&t, "%s",
		       g_str(r, &cs[i], "codec", codec, sizeof(codec)));
		t_cell(&t, "%" PRIu64, g_u64(r, &cs[i], "words"));
		t_cell(&t, "%" PRIu64, g_u64(r, &cs[i], "bits"));
		flips_cells(r, &t, &cs[i], nb);
	}
	t_cell(&t, "all");
	t_cell(&t, "%" PRIu64, g_u64(r, v, "words"));
	t_cell(&t, "%" PRIu64, g_u64(r, v, "bits"));
	flips_cells(r, &t, v, nb);
	if (r->err[0])
		t_free(&t);
	else
		t_done(r, &t, f);
}

int cmd_inject(struct ctl *c, int argc, char **argv)
{
	struct kvmem_inject_params chan;
	char req[REQ_MAX + 1], target[64], ber[32];
	uint64_t seed;
	double p;
	char *end;
	int n;

	n = target_arg(argc, argv, target, sizeof(target));
	if (n < 0)
		return CTL_USAGE;
	if (n != argc) {
		ctl_errx("inject: unexpected argument '%s'", argv[n]);
		return CTL_USAGE;
	}
	if (!c->ber || !c->seed) {
		ctl_errx("inject needs --ber P and --seed S");
		return CTL_USAGE;
	}
	errno = 0;
	p = strtod(c->ber, &end);
	if (end == c->ber || *end || errno || !(p >= 0 && p <= 1)) {
		ctl_errx("--ber must be a probability from 0 to 1, not '%s'",
			 c->ber);
		return CTL_USAGE;
	}
	if (ctl_parse_uint(c->seed, UINT64_MAX, &seed)) {
		ctl_errx("--seed must be a number, not '%s'", c->seed);
		return CTL_USAGE;
	}
	if (c->channel && kvmem_inject_parse(&chan, c->channel)) {
		ctl_errx("--channel must be bsc, exact:K, burst:K, byte:K, "
			 "adjacent:K, line[:BYTES] or column:ROW, not '%s'",
			 c->channel);
		return CTL_USAGE;
	}
	fmt_shortest(ber, sizeof(ber), p);
	snprintf(req, sizeof(req), "inject %s ber %s seed %" PRIu64 "%s%s%s",
		 target, ber, seed, c->given & O_ALL ? " all" : "",
		 c->channel ? " channel " : "", c->channel ? c->channel : "");
	return ctl_simple(c, req, -1, render_inject);
}
