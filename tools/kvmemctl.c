/*
 * kvmemctl - the operator's command line for kvmemd
 *
 * Speaks kvmemd's admin protocol (version 1, man kvmemctl(8)): one request
 * per SOCK_SEQPACKET datagram, words separated by single spaces; the reply
 * is one JSON object ending in "\n", in datagrams of at most 32 KiB. Every
 * reply is untrusted input: it is parsed with limits (json.h), each field a
 * table needs is checked for its type before anything is printed, and text
 * from the daemon reaches the terminal without control characters.
 *
 * Human output is rendered into memory first and printed only when the
 * whole reply made sense; --json prints the reply itself, re-serialized
 * compactly. Exit status: 0 done, 1 the daemon refused or failed the
 * request (or its reply was unusable), 2 usage, 3 kvmemd unreachable,
 * 4 access denied.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "../daemon/store.h" /* KVMEMD_STORE_UNIT: the store's format */
#include "json.h"
#include "kvmem/inject.h"
#include "kvmem/uapi.h"
#include "kvmem-private.h"

#define PROG "kvmemctl"
#define ADMIN_SOCKET_NAME "kvmemd-admin.sock"
#define ADMIN_GROUP "kvmem-admin"

/* The protocol's limits. */
#define REQ_MAX 1024
#define DGRAM_MAX (32u << 10)
/* The longest reply taken, and how long to wait for one. */
#define REPLY_MAX (16u << 20)
#define REPLY_TIMEOUT_MS 30000

enum {
	CTL_OK = 0,
	CTL_FAILED = 1, /* the daemon refused or failed the request */
	CTL_USAGE = 2,
	CTL_DOWN = 3, /* kvmemd not running or not answering */
	CTL_DENIED = 4,
};

/* Options, as bits of what a command accepts. */
enum {
	O_JSON = 1u << 0,
	O_WATCH = 1u << 1,
	O_SINCE = 1u << 2,
	O_LIMIT = 1u << 3,
	O_BER = 1u << 4,
	O_SEED = 1u << 5,
	O_ALL = 1u << 6,
	O_HTTP = 1u << 7,
	O_CHANNEL = 1u << 8,
	O_HTTP_TIMEOUT = 1u << 9,
};

struct ctl {
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int fd; /* -1 until the first request */
	unsigned int given; /* O_* on the command line */
	double watch;
	int http_timeout_ms;
	const char *since, *limit, *ber, *seed, *channel;
};

static volatile sig_atomic_t stop;

static void on_stop(int sig)
{
	(void)sig;
	stop = 1;
}

static void errx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void errx(const char *fmt, ...)
{
	va_list ap;

	fputs(PROG ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ---- text from the daemon --------------------------------------------- */

/*
 * Copy @s to @buf for a terminal: UTF-8 stays (the parser checked it),
 * C0 and C1 controls and DEL become '?'.
 */
static const char *clean(const char *s, char *buf, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t o = 0;

	for (; *p && o + 1 < len; p++) {
		if (*p < 0x20 || *p == 0x7f) {
			buf[o++] = '?';
		} else if (*p == 0xc2 && p[1] >= 0x80 && p[1] < 0xa0) {
			buf[o++] = '?';
			p++;
		} else {
			/* Never end on half a character. */
			if (*p >= 0xc0 && o + 5 > len)
				break;
			buf[o++] = (char)*p;
		}
	}
	buf[o] = 0;
	return buf;
}

/* Columns a cleaned string takes: one per character. */
static size_t width(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		n += ((unsigned char)*s & 0xc0) != 0x80;
	return n;
}

/* ---- units ------------------------------------------------------------ */

static const char *fmt_bytes(char *buf, size_t len, double b)
{
	static const char *const units[] = { "KiB", "MiB", "GiB",
					     "TiB", "PiB", "EiB" };
	int u = -1;

	if (b < 1024) {
		snprintf(buf, len, "%.0f B", b);
		return buf;
	}
	while (b >= 1024 && u < 5) {
		b /= 1024;
		u++;
	}
	snprintf(buf, len, "%.1f %s", b, units[u]);
	return buf;
}

static const char *fmt_rate(char *buf, size_t len, double bps)
{
	size_t n;

	fmt_bytes(buf, len, bps);
	n = strlen(buf);
	snprintf(buf + n, len - n, "/s");
	return buf;
}

static const char *fmt_dur(char *buf, size_t len, double s)
{
	unsigned long long t;

	if (!(s >= 0))
		s = 0;
	if (s < 1) {
		snprintf(buf, len, "%.0f ms", s * 1000);
		return buf;
	}
	if (s < 60) {
		snprintf(buf, len, "%.1f s", s);
		return buf;
	}
	t = s < 1e15 ? (unsigned long long)s : 999999999999999ull;
	if (t < 3600)
		snprintf(buf, len, "%llum %02llus", t / 60, t % 60);
	else if (t < 86400)
		snprintf(buf, len, "%lluh %02llum", t / 3600, t / 60 % 60);
	else
		snprintf(buf, len, "%llud %02lluh", t / 86400, t / 3600 % 24);
	return buf;
}

/* A Unix time as local time, to the second. */
static const char *fmt_time(char *buf, size_t len, double t)
{
	struct tm tm;
	time_t tt;

	if (!(t >= 0 && t < 1e12)) {
		snprintf(buf, len, "?");
		return buf;
	}
	tt = (time_t)t;
	if (!localtime_r(&tt, &tm) || !strftime(buf, len, "%F %T", &tm))
		snprintf(buf, len, "?");
	return buf;
}

/* ---- tables ----------------------------------------------------------- */

/*
 * Cells are added row by row; the header (when there is one) is the first
 * row. align[i] is 'l' or 'r' for column i; the last column is never
 * padded. No table is wider than MAX_COLS (sessions has 21 columns).
 */
#define MAX_COLS 32
struct table {
	const char *align;
	unsigned int ncols;
	char **cells;
	size_t n, cap;
	bool oom;
};

static void t_init(struct table *t, const char *align)
{
	memset(t, 0, sizeof(*t));
	t->align = align;
	t->ncols = (unsigned int)strlen(align);
}

static void t_cell(struct table *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void t_cell(struct table *t, const char *fmt, ...)
{
	va_list ap;
	char *s;

	if (t->oom)
		return;
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 64;
		char **c = realloc(t->cells, cap * sizeof(*c));

		if (!c) {
			t->oom = true;
			return;
		}
		t->cells = c;
		t->cap = cap;
	}
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		t->oom = true;
	else
		t->cells[t->n++] = s;
	va_end(ap);
}

/* A whole row of fixed strings, e.g. the header. */
static void t_row(struct table *t, const char *const *cells)
{
	unsigned int i;

	for (i = 0; i < t->ncols; i++)
		t_cell(t, "%s", cells[i]);
}

/* Returns -ENOMEM when a cell could not be stored. */
static int t_print(struct table *t, FILE *f)
{
	size_t w[MAX_COLS] = { 0 }, i, c, pad;

	if (t->oom)
		return -ENOMEM;
	for (i = 0; i < t->n; i++) {
		c = i % t->ncols;
		if (width(t->cells[i]) > w[c])
			w[c] = width(t->cells[i]);
	}
	for (i = 0; i < t->n; i++) {
		c = i % t->ncols;
		pad = w[c] - width(t->cells[i]);
		if (c)
			fputs("  ", f);
		if (t->align[c] == 'r')
			fprintf(f, "%*s", (int)pad, "");
		fputs(t->cells[i], f);
		if (t->align[c] != 'r' && c + 1 < t->ncols)
			fprintf(f, "%*s", (int)pad, "");
		if (c + 1 == t->ncols)
			fputc('\n', f);
	}
	return 0;
}

static void t_free(struct table *t)
{
	size_t i;

	for (i = 0; i < t->n; i++)
		free(t->cells[i]);
	free(t->cells);
}

/* ---- reading replies -------------------------------------------------- */

/*
 * A reply being rendered: the getters below record the first field that
 * is missing or of the wrong type and return a neutral value, so a
 * renderer runs to its end and the caller throws its output away.
 */
struct rd {
	const char *req;
	char err[192];
};

static void bad(struct rd *r, const char *key, const char *want,
		const struct json *v)
{
	if (r->err[0])
		return;
	if (!v)
		snprintf(r->err, sizeof(r->err), "\"%s\" is missing", key);
	else
		snprintf(r->err, sizeof(r->err), "\"%s\" is %s, not %s", key,
			 json_type_name(v->type), want);
}

static uint64_t g_u64(struct rd *r, const struct json *o, const char *key)
{
	const struct json *v = json_get(o, key);
	uint64_t x = 0;

	if (json_u64(v, &x))
		bad(r, key, "an integer", v);
	return x;
}

static double g_num(struct rd *r, const struct json *o, const char *key)
{
	const struct json *v = json_get(o, key);
	double x = 0;

	if (json_num(v, &x))
		bad(r, key, "a number", v);
	return x;
}

static bool g_bool(struct rd *r, const struct json *o, const char *key)
{
	const struct json *v = json_get(o, key);
	bool x = false;

	if (json_bool(v, &x))
		bad(r, key, "true or false", v);
	return x;
}

/* A string, cleaned for the terminal into @buf. */
static const char *g_str(struct rd *r, const struct json *o, const char *key,
			 char *buf, size_t len)
{
	const struct json *v = json_get(o, key);
	const char *s = json_str(v);

	if (!s) {
		bad(r, key, "a string", v);
		s = "";
	}
	return clean(s, buf, len);
}

static const struct json *g_typed(struct rd *r, const struct json *o,
				  const char *key, enum json_type t,
				  bool nullable)
{
	const struct json *v = json_get(o, key);

	if (v && (v->type == t || (nullable && v->type == JSON_NULL)))
		return v->type == t ? v : NULL;
	bad(r, key, t == JSON_ARRAY ? "an array" : "an object", v);
	return NULL;
}

static const struct json *g_obj(struct rd *r, const struct json *o,
				const char *key)
{
	return g_typed(r, o, key, JSON_OBJECT, false);
}

/* An object or null (NULL for both). */
static const struct json *g_obj_or_null(struct rd *r, const struct json *o,
					const char *key)
{
	return g_typed(r, o, key, JSON_OBJECT, true);
}

/* The elements of an array (NULL and 0 when it is not one). */
static const struct json *g_arr(struct rd *r, const struct json *o,
				const char *key, size_t *n)
{
	const struct json *a = g_typed(r, o, key, JSON_ARRAY, false);

	*n = a ? a->u.arr.n : 0;
	return a ? a->u.arr.v : NULL;
}

/* ---- the socket ------------------------------------------------------- */

static int denied(const char *detail)
{
	errx("permission denied: " PROG
	     " needs root or membership in group " ADMIN_GROUP);
	errx("%s", detail);
	return CTL_DENIED;
}

static int ctl_connect(struct ctl *c)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int e;

	memcpy(sa.sun_path, c->path, sizeof(sa.sun_path));
	c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		errx("socket: %s", strerror(errno));
		return CTL_FAILED;
	}
	if (!connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)))
		return CTL_OK;
	e = errno;
	close(c->fd);
	c->fd = -1;
	if (e == EACCES || e == EPERM) {
		char detail[sizeof(sa.sun_path) + 64];

		snprintf(detail, sizeof(detail), "%s: %s", c->path,
			 strerror(e));
		return denied(detail);
	}
	errx("cannot reach kvmemd at %s: %s%s", c->path, strerror(e),
	     e == ENOENT || e == ECONNREFUSED ? " \u2014 is kvmemd running?"
					      : "");
	return CTL_DOWN;
}

static void ctl_close(struct ctl *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

/* The reply to one request, complete when its bytes end in "\n". */
static int recv_reply(struct ctl *c, const char *req, int timeout_ms,
		      char **out, size_t *outlen)
{
	struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
	size_t len = 0, cap = 0;
	char *buf = NULL, *nb;
	ssize_t n;
	int ret;

	do {
		if (cap - len < DGRAM_MAX + 1) {
			cap = cap ? 2 * cap : 2 * (DGRAM_MAX + 1);
			nb = realloc(buf, cap);
			if (!nb) {
				errx("out of memory");
				ret = CTL_FAILED;
				goto err;
			}
			buf = nb;
		}
		ret = poll(&pfd, 1, timeout_ms);
		if (ret < 0 && errno == EINTR && !stop)
			continue;
		if (ret <= 0) {
			if (ret < 0 && errno != EINTR)
				errx("poll: %s", strerror(errno));
			else if (!ret)
				errx("%s: no reply from kvmemd at %s within "
				     "%d s",
				     req, c->path, timeout_ms / 1000);
			ret = CTL_DOWN;
			goto err;
		}
		n = recv(c->fd, buf + len, DGRAM_MAX + 1, MSG_TRUNC);
		if (n < 0 && errno == EINTR && !stop)
			continue;
		if (n <= 0) {
			if (n < 0 && !stop)
				errx("%s: %s", req, strerror(errno));
			else if (!stop)
				errx("%s: kvmemd at %s closed the connection "
				     "%s",
				     req, c->path,
				     len ? "in the middle of its reply"
					 : "without replying");
			ret = CTL_DOWN;
			goto err;
		}
		if ((size_t)n > DGRAM_MAX) {
			errx("%s: malformed reply: a datagram of %zd bytes, "
			     "over the protocol's %u",
			     req, n, DGRAM_MAX);
			ret = CTL_FAILED;
			goto err;
		}
		if (memchr(buf + len, '\n', (size_t)n - 1) ||
		    len + (size_t)n > REPLY_MAX) {
			errx("%s: malformed reply: %s", req,
			     len + (size_t)n > REPLY_MAX
				     ? "larger than 16 MiB"
				     : "a newline inside the JSON");
			ret = CTL_FAILED;
			goto err;
		}
		len += (size_t)n;
	} while (buf[len - 1] != '\n');
	*out = buf;
	*outlen = len;
	return CTL_OK;
err:
	free(buf);
	return ret;
}

/*
 * Send @req, wait (@timeout_ms, -1 for ever) and parse its reply into
 * *@reply: CTL_OK, or the exit status after saying what went wrong. An
 * error reply is reported here.
 */
static int request_timeout(struct ctl *c, const char *req, int timeout_ms,
			   struct json **reply)
{
	const struct json *e, *en;
	struct json_error jerr;
	struct json *v;
	char *buf, msg[512];
	double eno = 0;
	size_t len;
	int ret;

	if (c->fd < 0) {
		ret = ctl_connect(c);
		if (ret)
			return ret;
	}
	if (send(c->fd, req, strlen(req), MSG_NOSIGNAL) < 0) {
		errx("%s: cannot send to kvmemd at %s: %s", req, c->path,
		     strerror(errno));
		ctl_close(c);
		return CTL_DOWN;
	}
	ret = recv_reply(c, req, timeout_ms, &buf, &len);
	if (ret) {
		ctl_close(c);
		return ret;
	}
	ret = json_parse(buf, len, NULL, &v, &jerr);
	free(buf);
	if (ret) {
		errx("%s: malformed reply from kvmemd: byte %zu: %s", req,
		     jerr.offset, jerr.msg);
		return CTL_FAILED;
	}
	if (v->type != JSON_OBJECT) {
		errx("%s: malformed reply from kvmemd: %s, not an object", req,
		     json_type_name(v->type));
		json_free(v);
		return CTL_FAILED;
	}
	e = json_get(v, "error");
	if (!e) {
		*reply = v;
		return CTL_OK;
	}
	en = json_get(v, "errno");
	json_num(en, &eno);
	clean(json_str(e) ? json_str(e) : "(no reason given)", msg,
	      sizeof(msg));
	json_free(v);
	if (eno == -EACCES) {
		char detail[sizeof(msg) + 16];

		snprintf(detail, sizeof(detail), "kvmemd: %s", msg);
		ctl_close(c);
		return denied(detail);
	}
	errx("%s: %s", req, msg);
	return CTL_FAILED;
}

static int request(struct ctl *c, const char *req, struct json **reply)
{
	return request_timeout(c, req, REPLY_TIMEOUT_MS, reply);
}

/* ---- output ----------------------------------------------------------- */

typedef void (*render_fn)(struct rd *r, FILE *f, const struct json *v);

/*
 * @reply as JSON, or rendered by @fn into memory and printed only when
 * every field it needed was there.
 */
static int present(const struct ctl *c, const char *req, render_fn fn,
		   const struct json *reply)
{
	struct rd r = { .req = req };
	char *text = NULL;
	size_t len = 0;
	FILE *m;

	if (c->given & O_JSON) {
		json_print(stdout, reply);
		putchar('\n');
		return CTL_OK;
	}
	m = open_memstream(&text, &len);
	if (!m) {
		errx("out of memory");
		return CTL_FAILED;
	}
	fn(&r, m, reply);
	if (fclose(m)) {
		free(text);
		errx("out of memory");
		return CTL_FAILED;
	}
	if (r.err[0]) {
		free(text);
		errx("%s: malformed reply from kvmemd: %s", req, r.err);
		return CTL_FAILED;
	}
	fwrite(text, 1, len, stdout);
	free(text);
	return CTL_OK;
}

/* request() then present(). */
static int simple(struct ctl *c, const char *req, int timeout_ms, render_fn fn)
{
	struct json *v;
	int ret = request_timeout(c, req, timeout_ms, &v);

	if (ret)
		return ret;
	ret = present(c, req, fn, v);
	json_free(v);
	return ret;
}

/* "key  value" lines, the keys aligned. */
static void kv(struct table *t, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void kv(struct table *t, const char *key, const char *fmt, ...)
{
	va_list ap;
	char *s;

	t_cell(t, "%s", key);
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0) {
		t->oom = true;
	} else {
		t_cell(t, "%s", s);
		free(s);
	}
	va_end(ap);
}

static void t_done(struct rd *r, struct table *t, FILE *f)
{
	if (t_print(t, f) && !r->err[0])
		snprintf(r->err, sizeof(r->err), "out of memory");
	t_free(t);
}

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
	return simple(c, "status", REPLY_TIMEOUT_MS, render_status);
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
	while (!stop && nanosleep(&ts, &ts) && errno == EINTR)
		;
	return stop;
}

static int cmd_stats(struct ctl *c, int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_stop };
	int ret, tty = isatty(STDOUT_FILENO);

	(void)argc;
	(void)argv;
	if (!(c->given & O_WATCH))
		return simple(c, "stats", REPLY_TIMEOUT_MS, render_stats);
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
		ret = simple(c, "stats", REPLY_TIMEOUT_MS, render_stats);
		ctl_close(c);
		if (stop)
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
	char a[32], fmt[32], codec[32];
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
		t_cell(&t, "%s", g_str(r, e, "format", fmt, sizeof(fmt)));
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
	return simple(c, "sessions", REPLY_TIMEOUT_MS, render_sessions);
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

/* A decimal number of at most @max: 0, else -1. */
static int parse_uint(const char *s, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (!*s)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || (uint64_t)(*s - '0') > max ||
		    v > (max - (uint64_t)(*s - '0')) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*out = v;
	return 0;
}

static int id_arg(const char *what, const char *s, uint64_t *out)
{
	if (!parse_uint(s, UINT32_MAX, out))
		return 0;
	errx("%s must be a number, not '%s'", what, s);
	return -1;
}

static int cmd_seqs(struct ctl *c, int argc, char **argv)
{
	char req[64];
	uint64_t id;

	if (argc == 0)
		return simple(c, "seqs", REPLY_TIMEOUT_MS, render_seqs);
	if (id_arg("SESSION", argv[0], &id))
		return CTL_USAGE;
	snprintf(req, sizeof(req), "seqs %" PRIu64, id);
	return simple(c, req, REPLY_TIMEOUT_MS, render_seqs);
}

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

/*
 * pool | session N | seq N S, from argv: the protocol's words to @out.
 * Returns how many arguments it took, or -1.
 */
static int target_arg(int argc, char **argv, char *out, size_t len)
{
	uint64_t n, s;

	if (argc >= 1 && !strcmp(argv[0], "pool")) {
		snprintf(out, len, "pool");
		return 1;
	}
	if (argc >= 2 && !strcmp(argv[0], "session")) {
		if (id_arg("SESSION", argv[1], &n))
			return -1;
		snprintf(out, len, "session %" PRIu64, n);
		return 2;
	}
	if (argc >= 3 && !strcmp(argv[0], "seq")) {
		if (id_arg("SESSION", argv[1], &n) ||
		    id_arg("SEQ", argv[2], &s))
			return -1;
		snprintf(out, len, "seq %" PRIu64 " %" PRIu64, n, s);
		return 3;
	}
	errx("expected a target: pool, session N or seq N S");
	return -1;
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
		if (!parse_uint(num, UINT64_MAX, &v)) {
			snprintf(out, len, "%" PRIu64 "%s", v,
				 !s[n]			      ? ""
				 : s[n] == 'k' || s[n] == 'K' ? "K"
				 : s[n] == 'm' || s[n] == 'M' ? "M"
							      : "G");
			return 0;
		}
	}
	errx("BYTES_PER_S must be a number with an optional K, M or G, not "
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
	if (parse_uint(num, UINT32_MAX / mul, &v))
		return -1;
	*out = v * mul;
	return 0;
}

static int cmd_scrub(struct ctl *c, int argc, char **argv)
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
		return simple(c, req, -1, render_pass);
	} else if (!strcmp(sub, "rate") && argc >= 2) {
		if (rate_arg(argv[1], arg, sizeof(arg)))
			return CTL_USAGE;
		want = 2;
		snprintf(req, sizeof(req), "scrub rate %s", arg);
	} else if (!strcmp(sub, "cycle") && argc >= 2) {
		if (seconds_arg(argv[1], &secs)) {
			errx("SECONDS must be a number with an optional s, m, "
			     "h or d, not '%s'",
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
			errx("UE_PER_DAY '%s' is too long", argv[1]);
			return CTL_USAGE;
		}
	} else {
		errx("scrub: expected status, start, stop, now [TARGET], "
		     "rate BYTES_PER_S, cycle SECONDS or target UE_PER_DAY");
		return CTL_USAGE;
	}
	if (argc != want)
		goto extra;
	return simple(c, req, REPLY_TIMEOUT_MS, render_scrub);
extra:
	errx("scrub %s: unexpected argument '%s'", sub, argv[want]);
	return CTL_USAGE;
}

/* ---- tier, offload ---------------------------------------------------- */

/* Does tier's reply @v have the archive tier? A kvmemd older than it
 * sends none of its keys. */
static bool has_archive(const struct json *v)
{
	return json_get(v, "archived");
}

/* The archive tier's policy line of tier. */
static void archive_policy(struct rd *r, struct table *t,
			   const struct json *pol)
{
	uint64_t age = g_u64(r, pol, "archive_tokens");
	char fmt[16], codec[16], a[32];

	g_str(r, pol, "archive_format", fmt, sizeof(fmt));
	g_str(r, pol, "archive_codec", codec, sizeof(codec));
	if (!age) {
		kv(t, "archive", "off (tier.archive_tokens = 0)");
		return;
	}
	kv(t, "archive",
	   "released pages %" PRIu64 " tokens old in %s%s%s, heat at most "
	   "%.3g, %s/s",
	   age, strcmp(fmt, "same") ? fmt : "",
	   strcmp(fmt, "same") ? " + " : "", codec,
	   g_num(r, pol, "archive_heat"),
	   fmt_bytes(a, sizeof(a), (double)g_u64(r, pol, "archive_rate")));
}

static void render_tier(struct rd *r, FILE *f, const struct json *v)
{
	static const char *const head[] = { "TIER", "PAGES", "BYTES" };
	static const char *const tiers[] = { "hot", "warm", "archive", "cold" };
	const struct json *pol = g_obj(r, v, "policy");
	const struct json *ts = g_obj(r, v, "tiers");
	const struct json *st = g_obj_or_null(r, v, "store");
	const bool arch = has_archive(v);
	uint64_t stale = g_u64(r, pol, "stale_tokens");
	uint64_t units, used;
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

		if (!arch && !strcmp(tiers[i], "archive"))
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
	t_init(&t, "ll");
	kv(&t, "store", "%s", g_str(r, st, "path", path, sizeof(path)));
	kv(&t, "engine", "%s", g_str(r, st, "engine", engine, sizeof(engine)));
	kv(&t, "uuid", "%s", g_str(r, st, "uuid", uuid, sizeof(uuid)));
	kv(&t, "generation", "%" PRIu64, g_u64(r, st, "generation"));
	kv(&t, "size", "%s, %" PRIu64 " units of %s",
	   fmt_bytes(a, sizeof(a), (double)g_u64(r, st, "size")), units,
	   fmt_bytes(b, sizeof(b), KVMEMD_STORE_UNIT));
	kv(&t, "used", "%s in %" PRIu64 " units (%.1f%%)",
	   fmt_bytes(a, sizeof(a), (double)used * KVMEMD_STORE_UNIT), used,
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
}

static int cmd_tier(struct ctl *c, int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return simple(c, "tier", REPLY_TIMEOUT_MS, render_tier);
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
		errx("offload: unexpected argument '%s'", argv[n]);
		return CTL_USAGE;
	}
	/* The reply comes when every released page of the target is on
	 * the store: as long as that takes. */
	ret = request_timeout(c, req, -1, &v);
	if (ret)
		return ret;
	errors = g_u64(&r, v, "errors");
	if (r.err[0]) {
		errx("%s: malformed reply from kvmemd: %s", req, r.err);
		json_free(v);
		return CTL_FAILED;
	}
	ret = present(c, req, render_offload, v);
	json_free(v);
	if (!ret && errors) {
		errx("%s: %" PRIu64 " pages could not be written to the store "
		     "and stay in memory (kvmemd's log says why)",
		     req, errors);
		ret = CTL_FAILED;
	}
	return ret;
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

static int cmd_events(struct ctl *c, int argc, char **argv)
{
	char req[128];
	long long since;
	uint64_t limit;
	int n;

	n = snprintf(req, sizeof(req), "events");
	if (c->since) {
		if (since_arg(c->since, &since)) {
			errx("--since must be Unix seconds or an age like "
			     "10m, 2h or '1d ago', not '%s'",
			     c->since);
			return CTL_USAGE;
		}
		n += snprintf(req + n, sizeof(req) - (size_t)n, " since %lld",
			      since);
	}
	if (c->limit) {
		if (parse_uint(c->limit, UINT32_MAX, &limit)) {
			errx("--limit must be a number, not '%s'", c->limit);
			return CTL_USAGE;
		}
		snprintf(req + n, sizeof(req) - (size_t)n, " limit %" PRIu64,
			 limit);
	}
	if (argc) {
		errx("events: unexpected argument '%s'%s", argv[0],
		     !strcmp(argv[0], "ago") ? " (quote the time: --since "
					       "'10m ago')"
					     : "");
		return CTL_USAGE;
	}
	return simple(c, req, REPLY_TIMEOUT_MS, render_events);
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

static int cmd_errors(struct ctl *c, int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return simple(c, "errors", REPLY_TIMEOUT_MS, render_errors);
}

static void render_ok(struct rd *r, FILE *f, const struct json *v)
{
	if (!g_bool(r, v, "ok") && !r->err[0])
		snprintf(r->err, sizeof(r->err), "\"ok\" is false");
	fputs("volatile counters reset; the persistent totals are kept\n", f);
}

static int cmd_reset(struct ctl *c, int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return simple(c, "reset-counters", REPLY_TIMEOUT_MS, render_ok);
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
			bad(r, "by_flips", "an integer", &a->u.arr.v[i]);
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

/* The shortest decimal that reads back as @d, for the wire. */
static void shortest(char *buf, size_t len, double d)
{
	int prec;

	for (prec = 1; prec < 17; prec++) {
		snprintf(buf, len, "%.*g", prec, d);
		if (strtod(buf, NULL) == d)
			return;
	}
	snprintf(buf, len, "%.17g", d);
}

static int cmd_inject(struct ctl *c, int argc, char **argv)
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
		errx("inject: unexpected argument '%s'", argv[n]);
		return CTL_USAGE;
	}
	if (!c->ber || !c->seed) {
		errx("inject needs --ber P and --seed S");
		return CTL_USAGE;
	}
	errno = 0;
	p = strtod(c->ber, &end);
	if (end == c->ber || *end || errno || !(p >= 0 && p <= 1)) {
		errx("--ber must be a probability from 0 to 1, not '%s'",
		     c->ber);
		return CTL_USAGE;
	}
	if (parse_uint(c->seed, UINT64_MAX, &seed)) {
		errx("--seed must be a number, not '%s'", c->seed);
		return CTL_USAGE;
	}
	if (c->channel && kvmem_inject_parse(&chan, c->channel)) {
		errx("--channel must be bsc, exact:K, burst:K, byte:K, "
		     "adjacent:K, line[:BYTES] or column:ROW, not '%s'",
		     c->channel);
		return CTL_USAGE;
	}
	shortest(ber, sizeof(ber), p);
	snprintf(req, sizeof(req), "inject %s ber %s seed %" PRIu64 "%s%s%s",
		 target, ber, seed, c->given & O_ALL ? " all" : "",
		 c->channel ? " channel " : "", c->channel ? c->channel : "");
	return simple(c, req, -1, render_inject);
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

	if (s[0] != '@' && !parse_uint(s, UINT32_MAX - 1, &id)) {
		snprintf(out, len, "%" PRIu64, id);
		return 0;
	}
	if (s[0] == '@' && s[1] && !parse_uint(s + 1, UINT32_MAX - 1, &id)) {
		snprintf(out, len, "@%" PRIu64, id);
		return 0;
	}
	if (s[0] == '@' && s[1] &&
	    !getgrnam_r(s + 1, &gr, buf, sizeof(buf), &res) && res) {
		snprintf(out, len, "@%u", (unsigned int)res->gr_gid);
		return 0;
	}
	errx("TENANT must be a uid, or @ and a group's name or gid, not '%s'",
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
		return simple(c, "prefixes", REPLY_TIMEOUT_MS, render_prefixes);
	if (parse_tenant(argv[0], tenant, sizeof(tenant)))
		return CTL_USAGE;
	snprintf(req, sizeof(req), "prefixes %s", tenant);
	return simple(c, req, REPLY_TIMEOUT_MS, render_prefixes);
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
			errx("KEY must be %d hexadecimal digits, not '%s'",
			     2 * KVMEM_PREFIX_KEY_BYTES, argv[1]);
			return CTL_USAGE;
		}
	}
	snprintf(req, sizeof(req), "prefix-drop %s%s%s", tenant,
		 argc == 2 ? " " : "", argc == 2 ? argv[1] : "");
	return simple(c, req, REPLY_TIMEOUT_MS, render_dropped);
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
	if (parse_uint(argv[1], 8, &flips) || !flips) {
		errx("FLIPS must be 1 to 8, not '%s'", argv[1]);
		return CTL_USAGE;
	}
	if (c->seed && parse_uint(c->seed, UINT64_MAX, &seed)) {
		errx("--seed must be a number, not '%s'", c->seed);
		return CTL_USAGE;
	}
	snprintf(req, sizeof(req),
		 "prefix-inject %s flips %" PRIu64 " seed %" PRIu64, tenant,
		 flips, seed);
	return simple(c, req, REPLY_TIMEOUT_MS, render_prefix_inject);
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

		t_cell(&t, "%s", clean(p->u.obj.m[i].key, key, sizeof(key)));
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
				       ? clean(e->u.str.s, val, sizeof(val))
				       : "\"\"");
			break;
		default:
			bad(r, key, "a number, string or boolean", e);
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
		return simple(c, "policy show", REPLY_TIMEOUT_MS,
			      render_policy);
	if (argc != 2 || strcmp(argv[0], "set")) {
		errx("policy: expected show, or set KEY=VALUE");
		return CTL_USAGE;
	}
	eq = strchr(argv[1], '=');
	if (!eq || eq == argv[1]) {
		errx("policy set: expected KEY=VALUE, not '%s'", argv[1]);
		return CTL_USAGE;
	}
	/* The protocol separates words by spaces: none may be in them. */
	for (i = 0; argv[1][i]; i++) {
		if ((unsigned char)argv[1][i] <= ' ' ||
		    (unsigned char)argv[1][i] >= 0x7f) {
			errx("policy set: KEY=VALUE must be printable ASCII "
			     "without spaces");
			return CTL_USAGE;
		}
	}
	if (snprintf(req, sizeof(req), "policy set %s", argv[1]) > REQ_MAX) {
		errx("policy set: longer than the %d bytes a request may have",
		     REQ_MAX);
		return CTL_USAGE;
	}
	return simple(c, req, REPLY_TIMEOUT_MS, render_policy);
}

/* ---- metrics ---------------------------------------------------------- */

/*
 * Prometheus text exposition format 0.0.4 from the replies to stats,
 * errors, scrub status, sessions and tier. Each family is written whole, its
 * HELP and TYPE lines first; label values come from the daemon and are
 * escaped.
 */
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
		shortest(buf, sizeof(buf), v);
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

static void metrics_tier(struct metrics *m, const struct json *v)
{
	static const char *const tiers[] = { "hot", "warm", "archive", "cold" };
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
		 "arenas, cold on the backing store.");
	for (i = 0; i < sizeof(tiers) / sizeof(tiers[0]); i++) {
		const char *l[] = { "tier", tiers[i], NULL };

		if (arch || strcmp(tiers[i], "archive"))
			m_u64(m, "kvmem_tier_pages", l,
			      g_obj(m->r, ts, tiers[i]), "pages");
	}
	m_family(m, "kvmem_tier_bytes", "gauge",
		 "Bytes of the pages in each tier.");
	for (i = 0; i < sizeof(tiers) / sizeof(tiers[0]); i++) {
		const char *l[] = { "tier", tiers[i], NULL };

		if (arch || strcmp(tiers[i], "archive"))
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
	used = g_u64(m->r, st, "used_units") * KVMEMD_STORE_UNIT;
	m_sample(m, "kvmem_store_used_bytes", NULL, 0, &used);
	m_family(m, "kvmem_store_errors_total", "counter",
		 "Backing store I/Os that failed (an errno or short), by "
		 "operation.");
	for (i = 0; i < sizeof(errs) / sizeof(errs[0]); i++) {
		const char *l[] = { "op", errs[i].op, NULL };

		m_u64(m, "kvmem_store_errors_total", l, st, errs[i].key);
	}
}

/* The exposition of every reply in @text, or nothing when one fails. */
static int metrics_text(struct ctl *c, char **text, size_t *len)
{
	static const struct {
		const char *req;
		void (*fn)(struct metrics *m, const struct json *v);
	} parts[] = {
		{ "stats", metrics_stats },
		{ "errors", metrics_errors },
		{ "scrub status", metrics_scrub },
		{ "sessions", metrics_sessions },
		{ "tier", metrics_tier },
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
		ret = request(c, parts[i].req, &v[i]);
	if (!ret) {
		m.f = open_memstream(text, len);
		if (!m.f) {
			errx("out of memory");
			ret = CTL_FAILED;
		}
	}
	for (i = 0; i < NPARTS && !ret; i++) {
		r.req = parts[i].req;
		parts[i].fn(&m, v[i]);
		if (r.err[0]) {
			errx("%s: malformed reply from kvmemd: %s", r.req,
			     r.err);
			ret = CTL_FAILED;
		}
	}
	if (m.f && fclose(m.f) && !ret) {
		errx("out of memory");
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

/*
 * --http: Prometheus's HTTP/1.x on standard input, as a socket unit hands
 * it over. A listening socket (kvmem-exporter.socket, Accept=no) is served
 * until SIGTERM; a connection (inetd style) gets its one answer on standard
 * output. GET or HEAD of /metrics, the request and its headers in at most
 * HTTP_MAX bytes.
 *
 * A peer has the timeout (--http-timeout, else HTTP_TIMEOUT_MS) from its
 * accept to send its whole request, however it trickles it in, and as long
 * again to take the answer; then it is closed, an unfinished request with
 * 408. One poll() loop serves every connection, each in a slot of its own,
 * so a silent or slow peer holds up nobody but itself. At most HTTP_CONNS
 * are open: past that, a new one makes the oldest of the address with the
 * most go (one that has not sent its request first, with 503), so idle
 * connections cannot keep a scraper out, nor one address another.
 *
 * kvmemd is asked at most once in HTTP_FRESH_MS, and the answers of that
 * time share its exposition: a flood of requests neither loads kvmemd nor
 * makes a copy of the exposition for each peer slow to take it.
 */
#define HTTP_MAX 8192
#define HTTP_TIMEOUT_MS 5000
#define HTTP_CONNS 128
#define HTTP_FRESH_MS 1000

/* kvmemd's exposition, or why there is none; shared, counted. */
struct http_expo {
	int refs;
	int ret; /* metrics_text()'s */
	uint64_t made; /* now_ms() */
	size_t len;
	char *text;
};

enum http_state {
	HTTP_FREE,
	HTTP_READING, /* the request, into in */
	HTTP_WRITING, /* the answer: its head in in, its body in body */
};

struct http_conn {
	enum http_state state;
	int fd;
	uint64_t seq; /* accepts before it: the oldest has the least */
	uint64_t deadline; /* of the state it is in, now_ms() */
	struct sockaddr_storage peer;
	struct http_expo *body; /* NULL: none past the head */
	size_t in_len; /* the request's, then the answer head's */
	size_t out_off; /* of the head and body, sent */
	char in[HTTP_MAX];
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void http_expo_put(struct http_expo *e)
{
	if (e && !--e->refs) {
		free(e->text);
		free(e);
	}
}

/*
 * kvmemd's exposition: *@fresh while it is younger than HTTP_FRESH_MS,
 * else a new one put there. NULL when out of memory.
 */
static struct http_expo *http_expo_get(struct ctl *c, struct http_expo **fresh)
{
	uint64_t now = now_ms();
	struct http_expo *e = *fresh;

	if (e && now - e->made < HTTP_FRESH_MS)
		return e;
	e = calloc(1, sizeof(*e));
	if (!e) {
		errx("out of memory");
		return NULL;
	}
	e->refs = 1;
	e->made = now;
	e->ret = metrics_text(c, &e->text, &e->len);
	/* A fresh connection each time: kvmemd closes idle ones. */
	ctl_close(c);
	http_expo_put(*fresh);
	*fresh = e;
	return e;
}

/*
 * @h's answer, the request it replaces: status line and headers in in,
 * and, unless @head, @e's text as its body (or the error's text).
 */
static void http_reply(struct http_conn *h, int status, const char *reason,
		       const char *extra, struct http_expo *e, bool head)
{
	const char *type = e ? "text/plain; version=0.0.4; charset=utf-8"
			     : "text/plain; charset=utf-8";
	char body[64] = "";
	int n, blen = 0;

	if (!e)
		blen = snprintf(body, sizeof(body), "%d %s\n", status, reason);
	n = snprintf(h->in, sizeof(h->in),
		     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
		     "Content-Length: %zu\r\nConnection: close\r\n%s\r\n%s",
		     status, reason, type, e ? e->len : (size_t)blen, extra,
		     head ? "" : body);
	h->in_len = (size_t)n;
	h->out_off = 0;
	if (e && !head) {
		e->refs++;
		h->body = e;
	}
}

/*
 * One read of @h's request: 0 when its head is complete, -EAGAIN when
 * more is to come, else the status to answer. Only the bytes new in it
 * are searched for the head's end, so a request trickled in a byte at a
 * time costs no more than one sent whole.
 */
static int http_read(struct http_conn *h)
{
	size_t from = h->in_len > 3 ? h->in_len - 3 : 0;
	ssize_t n;

	n = read(h->fd, h->in + h->in_len, sizeof(h->in) - 1 - h->in_len);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return -EAGAIN;
	if (n <= 0 || memchr(h->in + h->in_len, 0, (size_t)n))
		return 400;
	h->in_len += (size_t)n;
	h->in[h->in_len] = 0;
	if (strstr(h->in + from, "\r\n\r\n") || strstr(h->in + from, "\n\n"))
		return 0;
	return h->in_len == sizeof(h->in) - 1 ? 431 : -EAGAIN;
}

/*
 * The answer to @h's request, or to @st, the status its reading ended
 * with; the exposition from @fresh (http_expo_get()). Returns the exit
 * status metrics would have.
 */
static int http_answer(struct ctl *c, struct http_conn *h, int st,
		       struct http_expo **fresh)
{
	char method[16], target[256], version[16];
	struct http_expo *e;
	bool head;

	if (st == 431) {
		http_reply(h, 431, "Request Header Fields Too Large", "", NULL,
			   false);
		return CTL_USAGE;
	}
	if (st == 408) {
		http_reply(h, 408, "Request Timeout", "", NULL, false);
		return CTL_USAGE;
	}
	if (st ||
	    sscanf(h->in, "%15s %255s %15s", method, target, version) != 3 ||
	    strncmp(version, "HTTP/1.", 7)) {
		http_reply(h, 400, "Bad Request", "", NULL, false);
		return CTL_USAGE;
	}
	head = !strcmp(method, "HEAD");
	if (!head && strcmp(method, "GET")) {
		http_reply(h, 405, "Method Not Allowed", "Allow: GET, HEAD\r\n",
			   NULL, false);
		return CTL_USAGE;
	}
	target[strcspn(target, "?")] = 0;
	if (strcmp(target, "/metrics")) {
		http_reply(h, 404, "Not Found", "", NULL, head);
		return CTL_USAGE;
	}
	e = http_expo_get(c, fresh);
	if (!e || e->ret) {
		http_reply(h, 503, "Service Unavailable", "", NULL, head);
		return e ? e->ret : CTL_FAILED;
	}
	http_reply(h, 200, "OK", "", e, head);
	return CTL_OK;
}

/* One request on standard input, its answer on standard output. */
static int http_one(struct ctl *c)
{
	const uint64_t end = now_ms() + (uint64_t)c->http_timeout_ms;
	struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
	struct http_conn h = { .fd = STDIN_FILENO };
	struct http_expo *fresh = NULL;
	uint64_t now;
	int ret, st;

	do {
		now = now_ms();
		if (now >= end || !poll(&p, 1, (int)(end - now)))
			st = 408;
		else
			st = http_read(&h);
	} while (st == -EAGAIN);
	ret = http_answer(c, &h, st, &fresh);
	fwrite(h.in, 1, h.in_len, stdout);
	if (h.body)
		fwrite(h.body->text, 1, h.body->len, stdout);
	http_expo_put(h.body);
	http_expo_put(fresh);
	return ret;
}

/* Send what is left of @h's answer: true once it is all sent, or cannot
 * be. */
static bool http_write(struct http_conn *h)
{
	const size_t blen = h->body ? h->body->len : 0;
	struct msghdr m = { 0 };
	struct iovec iov[2];
	size_t off;
	ssize_t n;

	while (h->out_off < h->in_len + blen) {
		off = h->out_off;
		m.msg_iov = iov;
		m.msg_iovlen = 0;
		if (off < h->in_len) {
			iov[m.msg_iovlen++] = (struct iovec){
				.iov_base = h->in + off,
				.iov_len = h->in_len - off,
			};
			off = h->in_len;
		}
		if (blen)
			iov[m.msg_iovlen++] = (struct iovec){
				.iov_base = h->body->text + (off - h->in_len),
				.iov_len = h->in_len + blen - off,
			};
		n = sendmsg(h->fd, &m, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno != EAGAIN;
		h->out_off += (size_t)n;
	}
	return true;
}

/*
 * Close @h's connection. What its peer sent past its request is read
 * first: a close with unread bytes would reset the connection and could
 * throw away the answer still on its way.
 */
static void http_close(struct http_conn *h)
{
	char sink[4096];
	int i;

	for (i = 0; i < 16 && recv(h->fd, sink, sizeof(sink), 0) > 0; i++)
		;
	close(h->fd);
	http_expo_put(h->body);
	memset(h, 0, offsetof(struct http_conn, in));
	h->fd = -1;
}

/* The listening socket and its connections. */
struct http_server {
	struct ctl *c;
	int lfd;
	uint64_t rest; /* accept() failed: not before then, now_ms() */
	uint64_t accepts;
	struct http_expo *fresh; /* the latest exposition */
	struct http_conn conns[HTTP_CONNS];
};

/* Go on with @h, which poll() found ready. */
static void http_step(struct http_server *sv, struct http_conn *h)
{
	int st;

	if (h->state == HTTP_READING) {
		st = http_read(h);
		if (st == -EAGAIN)
			return;
		http_answer(sv->c, h, st, &sv->fresh);
		h->state = HTTP_WRITING;
		h->deadline = now_ms() + (uint64_t)sv->c->http_timeout_ms;
	}
	if (http_write(h))
		http_close(h);
}

/* @h's time is up: 408 for a request not yet complete, if it fits. */
static void http_expire(struct http_server *sv, struct http_conn *h)
{
	if (h->state == HTTP_READING) {
		http_answer(sv->c, h, 408, &sv->fresh);
		http_write(h);
	}
	http_close(h);
}

/* Do @a and @b come from one address? Unix peers are all one. */
static bool same_source(const struct sockaddr_storage *a,
			const struct sockaddr_storage *b)
{
	const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)a;
	const struct sockaddr_in6 *b6 = (const struct sockaddr_in6 *)b;

	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	if (a->ss_family == AF_INET6)
		return !memcmp(&a6->sin6_addr, &b6->sin6_addr,
			       sizeof(a6->sin6_addr));
	return true;
}

static struct http_conn *http_free_slot(struct http_server *sv)
{
	int i;

	for (i = 0; i < HTTP_CONNS; i++)
		if (sv->conns[i].state == HTTP_FREE)
			return &sv->conns[i];
	return NULL;
}

/* Serve the connections whose request waits to be read. */
static void http_spoken(struct http_server *sv)
{
	struct pollfd p[HTTP_CONNS];
	int i;

	for (i = 0; i < HTTP_CONNS; i++) {
		p[i].fd = sv->conns[i].state == HTTP_READING ? sv->conns[i].fd
							     : -1;
		p[i].events = POLLIN;
	}
	if (poll(p, HTTP_CONNS, 0) <= 0)
		return;
	for (i = 0; i < HTTP_CONNS; i++)
		if (p[i].fd >= 0 && p[i].revents)
			http_step(sv, &sv->conns[i]);
}

/*
 * The connection that goes for a new one when every slot is taken: of
 * the address with the most, the oldest still sending its request, else
 * its oldest.
 */
static struct http_conn *http_victim(struct http_server *sv)
{
	const struct http_conn *heavy = NULL;
	struct http_conn *h, *v = NULL;
	int i, j, n, most = 0;
	bool reading;

	for (i = 0; i < HTTP_CONNS; i++) {
		for (n = 0, j = 0; j < HTTP_CONNS; j++)
			n += same_source(&sv->conns[i].peer,
					 &sv->conns[j].peer);
		if (n > most) {
			most = n;
			heavy = &sv->conns[i];
		}
	}
	for (i = 0; i < HTTP_CONNS; i++) {
		h = &sv->conns[i];
		if (!same_source(&h->peer, &heavy->peer))
			continue;
		reading = h->state == HTTP_READING;
		if (!v || reading > (v->state == HTTP_READING) ||
		    (reading == (v->state == HTTP_READING) && h->seq < v->seq))
			v = h;
	}
	return v;
}

/*
 * A slot for a new connection: a free one, else one freed by answering
 * the requests already there to read (a burst of new connections must not
 * push out a peer that spoke), else the victim's, closed with 503.
 */
static struct http_conn *http_slot(struct http_server *sv)
{
	struct http_conn *h = http_free_slot(sv);

	if (h)
		return h;
	http_spoken(sv);
	h = http_free_slot(sv);
	if (h)
		return h;
	h = http_victim(sv);
	if (h->state == HTTP_READING) {
		http_reply(h, 503, "Service Unavailable", "", NULL, false);
		http_write(h);
	}
	http_close(h);
	return h;
}

/*
 * Take the connections waiting to be accepted, at most HTTP_CONNS in a
 * pass, so that a flood of them leaves time for the open ones. Out of
 * descriptors or memory, the socket rests a second instead of spinning.
 */
static void http_accept(struct http_server *sv)
{
	struct sockaddr_storage peer;
	struct http_conn *h;
	socklen_t alen;
	int fd, i;

	for (i = 0; i < HTTP_CONNS; i++) {
		alen = sizeof(peer);
		fd = accept4(sv->lfd, (struct sockaddr *)&peer, &alen,
			     SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
			continue;
		if (fd < 0) {
			if (errno != EAGAIN) {
				errx("accept: %s", strerror(errno));
				sv->rest = now_ms() + 1000;
			}
			return;
		}
		h = http_slot(sv);
		h->state = HTTP_READING;
		h->fd = fd;
		h->seq = sv->accepts++;
		h->deadline = now_ms() + (uint64_t)sv->c->http_timeout_ms;
		h->peer = peer;
	}
}

/* Serve the listening socket @lfd until SIGTERM or SIGINT. */
static int http_serve(struct ctl *c, int lfd)
{
	struct sigaction sa = { .sa_handler = on_stop };
	struct pollfd p[1 + HTTP_CONNS];
	struct http_server *sv;
	struct http_conn *h;
	uint64_t now, next;
	int i, n, fl, ret = CTL_OK;

	fl = fcntl(lfd, F_GETFL);
	if (fl < 0 || fcntl(lfd, F_SETFL, fl | O_NONBLOCK)) {
		errx("the listening socket: %s", strerror(errno));
		return CTL_FAILED;
	}
	sv = calloc(1, sizeof(*sv));
	if (!sv) {
		errx("out of memory");
		return CTL_FAILED;
	}
	sv->c = c;
	sv->lfd = lfd;
	for (i = 0; i < HTTP_CONNS; i++)
		sv->conns[i].fd = -1;
	/* No SA_RESTART: a stop ends the wait at once. */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	while (!stop) {
		now = now_ms();
		next = sv->rest > now ? sv->rest : UINT64_MAX;
		p[0].fd = sv->rest > now ? -1 : lfd;
		p[0].events = POLLIN;
		for (i = 0; i < HTTP_CONNS; i++) {
			h = &sv->conns[i];
			if (h->state != HTTP_FREE && now >= h->deadline)
				http_expire(sv, h);
			p[1 + i].fd = h->fd;
			p[1 + i].events =
				h->state == HTTP_READING ? POLLIN : POLLOUT;
			if (h->state != HTTP_FREE && h->deadline < next)
				next = h->deadline;
		}
		n = poll(p, 1 + HTTP_CONNS,
			 next == UINT64_MAX ? -1 : (int)(next - now));
		if (n < 0 && errno != EINTR) {
			errx("poll: %s", strerror(errno));
			ret = CTL_FAILED;
			break;
		}
		for (i = 0; n > 0 && i < HTTP_CONNS; i++)
			if (p[1 + i].fd >= 0 && p[1 + i].revents)
				http_step(sv, &sv->conns[i]);
		if (n > 0 && p[0].revents)
			http_accept(sv);
	}
	for (i = 0; i < HTTP_CONNS; i++)
		if (sv->conns[i].state != HTTP_FREE)
			http_close(&sv->conns[i]);
	http_expo_put(sv->fresh);
	free(sv);
	return ret;
}

/* Is @fd a listening socket (else a connection, a pipe or a file)? */
static bool listening(int fd)
{
	socklen_t len = sizeof(int);
	int on = 0;

	return !getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len) && on;
}

static int cmd_metrics(struct ctl *c, int argc, char **argv)
{
	char *text;
	size_t len;
	int ret;

	(void)argc;
	(void)argv;
	if ((c->given & O_HTTP_TIMEOUT) && !(c->given & O_HTTP)) {
		errx("metrics: --http-timeout needs --http");
		return CTL_USAGE;
	}
	if (c->given & O_HTTP)
		return listening(STDIN_FILENO) ? http_serve(c, STDIN_FILENO)
					       : http_one(c);
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
	ret = request(c, "version", &v);
	if (ret) {
		printf(PROG " %s\n", mine);
		return ret;
	}
	if (!(c->given & O_JSON)) {
		ret = present(c, "version", render_version, v);
		json_free(v);
		return ret;
	}
	/* The daemon's reply with "kvmemctl" added: a shallow copy. */
	n = v->u.obj.n;
	members = calloc(n + 1, sizeof(*members));
	if (!members) {
		json_free(v);
		errx("out of memory");
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
				errx("--watch must be seconds from 0.1 to "
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
				errx("--http-timeout must be seconds from 0.1 "
				     "to 3600, not '%s'",
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
			errx("option '%s' needs an argument", argv[optind - 1]);
			return CTL_USAGE;
		default:
			errx("unknown option '%s' (" PROG " --help lists them)",
			     argv[optind - 1]);
			return CTL_USAGE;
		}
	}
	if (path && *path) {
		if (strlen(path) >= sizeof(c->path)) {
			errx("admin socket path longer than %zu bytes: %s",
			     sizeof(c->path) - 1, path);
			return CTL_USAGE;
		}
		strcpy(c->path, path);
	} else if (kvmem__socket_path(c->path, sizeof(c->path),
				      ADMIN_SOCKET_NAME) < 0) {
		errx("the default admin socket path is too long; use -a");
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
		errx("unknown command '%s' (" PROG " --help lists them)",
		     argv[first]);
		return CTL_USAGE;
	}
	for (i = 0; i < sizeof(opt_names) / sizeof(opt_names[0]); i++) {
		if ((c.given & ~cmd->opts) & (1u << i)) {
			errx("%s: %s does not apply (usage: " PROG " %s)",
			     cmd->name, opt_names[i], cmd->usage);
			return CTL_USAGE;
		}
	}
	nargs = argc - first - 1;
	if (nargs < cmd->min_args || nargs > cmd->max_args) {
		errx("usage: " PROG " %s", cmd->usage);
		return CTL_USAGE;
	}
	ret = cmd->fn(&c, nargs, argv + first + 1);
	ctl_close(&c);
	if (fflush(stdout) || ferror(stdout)) {
		errx("write error: %s", strerror(errno));
		return CTL_FAILED;
	}
	return ret;
}
