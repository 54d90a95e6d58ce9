/* SPDX-License-Identifier: MIT */
/*
 * ctl.c - what kvmemctl's commands share: the admin socket, replies read
 * field by field, the words of requests, and the human output
 *
 * Every reply is untrusted input: it is parsed with limits (json.h), each
 * field a table needs is checked for its type before anything is printed
 * (struct rd), and text from the daemon reaches the terminal without
 * control characters (ctl_clean()).
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"

#define ADMIN_GROUP "kvmem-admin"

/* The protocol's limit on a datagram. */
#define DGRAM_MAX (32u << 10)
/* The longest reply taken. */
#define REPLY_MAX (16u << 20)

volatile sig_atomic_t ctl_stop;

void ctl_on_stop(int sig)
{
	(void)sig;
	ctl_stop = 1;
}

void ctl_errx(const char *fmt, ...)
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
const char *ctl_clean(const char *s, char *buf, size_t len)
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

const char *fmt_bytes(char *buf, size_t len, double b)
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

const char *fmt_rate(char *buf, size_t len, double bps)
{
	size_t n;

	fmt_bytes(buf, len, bps);
	n = strlen(buf);
	snprintf(buf + n, len - n, "/s");
	return buf;
}

const char *fmt_dur(char *buf, size_t len, double s)
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
const char *fmt_time(char *buf, size_t len, double t)
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

/* The shortest decimal that reads back as @d, for the wire. */
void fmt_shortest(char *buf, size_t len, double d)
{
	int prec;

	for (prec = 1; prec < 17; prec++) {
		snprintf(buf, len, "%.*g", prec, d);
		if (strtod(buf, NULL) == d)
			return;
	}
	snprintf(buf, len, "%.17g", d);
}

/* ---- tables ----------------------------------------------------------- */

void t_init(struct table *t, const char *align)
{
	memset(t, 0, sizeof(*t));
	t->align = align;
	t->ncols = (unsigned int)strlen(align);
}

void t_cell(struct table *t, const char *fmt, ...)
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
void t_row(struct table *t, const char *const *cells)
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

void t_free(struct table *t)
{
	size_t i;

	for (i = 0; i < t->n; i++)
		free(t->cells[i]);
	free(t->cells);
}

/* ---- reading replies -------------------------------------------------- */

void g_bad(struct rd *r, const char *key, const char *want,
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

uint64_t g_u64(struct rd *r, const struct json *o, const char *key)
{
	const struct json *v = json_get(o, key);
	uint64_t x = 0;

	if (json_u64(v, &x))
		g_bad(r, key, "an integer", v);
	return x;
}

double g_num(struct rd *r, const struct json *o, const char *key)
{
	const struct json *v = json_get(o, key);
	double x = 0;

	if (json_num(v, &x))
		g_bad(r, key, "a number", v);
	return x;
}

bool g_bool(struct rd *r, const struct json *o, const char *key)
{
	const struct json *v = json_get(o, key);
	bool x = false;

	if (json_bool(v, &x))
		g_bad(r, key, "true or false", v);
	return x;
}

/* A string, cleaned for the terminal into @buf. */
const char *g_str(struct rd *r, const struct json *o, const char *key,
		  char *buf, size_t len)
{
	const struct json *v = json_get(o, key);
	const char *s = json_str(v);

	if (!s) {
		g_bad(r, key, "a string", v);
		s = "";
	}
	return ctl_clean(s, buf, len);
}

static const struct json *g_typed(struct rd *r, const struct json *o,
				  const char *key, enum json_type t,
				  bool nullable)
{
	const struct json *v = json_get(o, key);

	if (v && (v->type == t || (nullable && v->type == JSON_NULL)))
		return v->type == t ? v : NULL;
	g_bad(r, key, t == JSON_ARRAY ? "an array" : "an object", v);
	return NULL;
}

const struct json *g_obj(struct rd *r, const struct json *o, const char *key)
{
	return g_typed(r, o, key, JSON_OBJECT, false);
}

/* An object or null (NULL for both). */
const struct json *g_obj_or_null(struct rd *r, const struct json *o,
				 const char *key)
{
	return g_typed(r, o, key, JSON_OBJECT, true);
}

/* The elements of an array (NULL and 0 when it is not one). */
const struct json *g_arr(struct rd *r, const struct json *o, const char *key,
			 size_t *n)
{
	const struct json *a = g_typed(r, o, key, JSON_ARRAY, false);

	*n = a ? a->u.arr.n : 0;
	return a ? a->u.arr.v : NULL;
}

/* Does tier's reply @v have the archive tier? A kvmemd older than it
 * sends none of its keys. */
bool has_archive(const struct json *v)
{
	return json_get(v, "archived");
}

bool tier_shown(const struct json *ts, const char *name, bool arch)
{
	if (!strcmp(name, "archive"))
		return arch;
	return strcmp(name, "gpu") || json_get(ts, "gpu");
}

/*
 * The bytes of a unit of tier's store @st; a kvmemd older than its
 * "unit_bytes" had units of 4 KiB.
 */
uint64_t g_store_unit(struct rd *r, const struct json *st)
{
	if (!json_get(st, "unit_bytes"))
		return 4096;
	return g_u64(r, st, "unit_bytes");
}

/* ---- the socket ------------------------------------------------------- */

static int denied(const char *detail)
{
	ctl_errx("permission denied: " PROG
		 " needs root or membership in group " ADMIN_GROUP);
	ctl_errx("%s", detail);
	return CTL_DENIED;
}

static int ctl_connect(struct ctl *c)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int e;

	memcpy(sa.sun_path, c->path, sizeof(sa.sun_path));
	c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		ctl_errx("socket: %s", strerror(errno));
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
	ctl_errx("cannot reach kvmemd at %s: %s%s", c->path, strerror(e),
		 e == ENOENT || e == ECONNREFUSED ? " \u2014 is kvmemd running?"
						  : "");
	return CTL_DOWN;
}

void ctl_close(struct ctl *c)
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
				ctl_errx("out of memory");
				ret = CTL_FAILED;
				goto err;
			}
			buf = nb;
		}
		ret = poll(&pfd, 1, timeout_ms);
		if (ret < 0 && errno == EINTR && !ctl_stop)
			continue;
		if (ret <= 0) {
			if (ret < 0 && errno != EINTR)
				ctl_errx("poll: %s", strerror(errno));
			else if (!ret)
				ctl_errx("%s: no reply from kvmemd at %s "
					 "within %d s",
					 req, c->path, timeout_ms / 1000);
			ret = CTL_DOWN;
			goto err;
		}
		n = recv(c->fd, buf + len, DGRAM_MAX + 1, MSG_TRUNC);
		if (n < 0 && errno == EINTR && !ctl_stop)
			continue;
		if (n <= 0) {
			if (n < 0 && !ctl_stop)
				ctl_errx("%s: %s", req, strerror(errno));
			else if (!ctl_stop)
				ctl_errx("%s: kvmemd at %s closed the "
					 "connection %s",
					 req, c->path,
					 len ? "in the middle of its reply"
					     : "without replying");
			ret = CTL_DOWN;
			goto err;
		}
		if ((size_t)n > DGRAM_MAX) {
			ctl_errx("%s: malformed reply: a datagram of %zd "
				 "bytes, over the protocol's %u",
				 req, n, DGRAM_MAX);
			ret = CTL_FAILED;
			goto err;
		}
		if (memchr(buf + len, '\n', (size_t)n - 1) ||
		    len + (size_t)n > REPLY_MAX) {
			ctl_errx("%s: malformed reply: %s", req,
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
 * error reply is reported here, but for kvmemd's answer to a request it
 * does not know when @unknown_ok: then CTL_OK and *@reply NULL.
 */
static int request(struct ctl *c, const char *req, int timeout_ms,
		   bool unknown_ok, struct json **reply)
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
		ctl_errx("%s: cannot send to kvmemd at %s: %s", req, c->path,
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
		ctl_errx("%s: malformed reply from kvmemd: byte %zu: %s", req,
			 jerr.offset, jerr.msg);
		return CTL_FAILED;
	}
	if (v->type != JSON_OBJECT) {
		ctl_errx("%s: malformed reply from kvmemd: %s, not an object",
			 req, json_type_name(v->type));
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
	ctl_clean(json_str(e) ? json_str(e) : "(no reason given)", msg,
		  sizeof(msg));
	json_free(v);
	if (unknown_ok && eno == -EINVAL &&
	    !strncmp(msg, "unknown request", strlen("unknown request"))) {
		*reply = NULL;
		return CTL_OK;
	}
	if (eno == -EACCES) {
		char detail[sizeof(msg) + 16];

		snprintf(detail, sizeof(detail), "kvmemd: %s", msg);
		ctl_close(c);
		return denied(detail);
	}
	ctl_errx("%s: %s", req, msg);
	return CTL_FAILED;
}

int ctl_request_timeout(struct ctl *c, const char *req, int timeout_ms,
			struct json **reply)
{
	return request(c, req, timeout_ms, false, reply);
}

int ctl_request(struct ctl *c, const char *req, struct json **reply)
{
	return request(c, req, REPLY_TIMEOUT_MS, false, reply);
}

int ctl_request_new(struct ctl *c, const char *req, struct json **reply)
{
	return request(c, req, REPLY_TIMEOUT_MS, true, reply);
}

/* ---- output ----------------------------------------------------------- */

/*
 * @reply as JSON, or rendered by @fn into memory and printed only when
 * every field it needed was there.
 */
int ctl_present(const struct ctl *c, const char *req, render_fn fn,
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
		ctl_errx("out of memory");
		return CTL_FAILED;
	}
	fn(&r, m, reply);
	if (fclose(m)) {
		free(text);
		ctl_errx("out of memory");
		return CTL_FAILED;
	}
	if (r.err[0]) {
		free(text);
		ctl_errx("%s: malformed reply from kvmemd: %s", req, r.err);
		return CTL_FAILED;
	}
	fwrite(text, 1, len, stdout);
	free(text);
	return CTL_OK;
}

/* ctl_request() then ctl_present(). */
int ctl_simple(struct ctl *c, const char *req, int timeout_ms, render_fn fn)
{
	struct json *v;
	int ret = ctl_request_timeout(c, req, timeout_ms, &v);

	if (ret)
		return ret;
	ret = ctl_present(c, req, fn, v);
	json_free(v);
	return ret;
}

/* "key  value" lines, the keys aligned. */
void kv(struct table *t, const char *key, const char *fmt, ...)
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

void t_done(struct rd *r, struct table *t, FILE *f)
{
	if (t_print(t, f) && !r->err[0])
		snprintf(r->err, sizeof(r->err), "out of memory");
	t_free(t);
}

/* ---- the words of requests -------------------------------------------- */

/* A decimal number of at most @max: 0, else -1. */
int ctl_parse_uint(const char *s, uint64_t max, uint64_t *out)
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

int id_arg(const char *what, const char *s, uint64_t *out)
{
	if (!ctl_parse_uint(s, UINT32_MAX, out))
		return 0;
	ctl_errx("%s must be a number, not '%s'", what, s);
	return -1;
}

/*
 * pool | session N | seq N S, from argv: the protocol's words to @out.
 * Returns how many arguments it took, or -1.
 */
int target_arg(int argc, char **argv, char *out, size_t len)
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
	ctl_errx("expected a target: pool, session N or seq N S");
	return -1;
}
