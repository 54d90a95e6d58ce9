/* SPDX-License-Identifier: MIT */
/*
 * ctl.h - what kvmemctl's files share (ctl.c): the run's options and exit
 * statuses, its messages, the admin socket, replies read field by field,
 * the words of requests and the human output
 *
 * Included by kvmemctl.c, ctl-ras.c, ctl-metrics.c and ctl-http.c.
 */
#ifndef KVMEM_TOOLS_CTL_H
#define KVMEM_TOOLS_CTL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/un.h>

#include "json.h"

#define PROG "kvmemctl"

/* The protocol's limit on a request. */
#define REQ_MAX 1024
/* How long to wait for a reply. */
#define REPLY_TIMEOUT_MS 30000

/* Exit statuses. */
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

/* Set by ctl_on_stop(), the handler of SIGINT and SIGTERM where a command
 * waits for them. */
extern volatile sig_atomic_t ctl_stop;
void ctl_on_stop(int sig);

/* "kvmemctl: " and the message on standard error. */
void ctl_errx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- text and numbers ------------------------------------------------- */

const char *ctl_clean(const char *s, char *buf, size_t len);
const char *fmt_bytes(char *buf, size_t len, double b);
const char *fmt_rate(char *buf, size_t len, double bps);
const char *fmt_dur(char *buf, size_t len, double s);
const char *fmt_time(char *buf, size_t len, double t);
void fmt_shortest(char *buf, size_t len, double d);

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

void t_init(struct table *t, const char *align);
void t_cell(struct table *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void t_row(struct table *t, const char *const *cells);
void t_free(struct table *t);

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

void g_bad(struct rd *r, const char *key, const char *want,
	   const struct json *v);
uint64_t g_u64(struct rd *r, const struct json *o, const char *key);
double g_num(struct rd *r, const struct json *o, const char *key);
bool g_bool(struct rd *r, const struct json *o, const char *key);
const char *g_str(struct rd *r, const struct json *o, const char *key,
		  char *buf, size_t len);
const struct json *g_obj(struct rd *r, const struct json *o, const char *key);
const struct json *g_obj_or_null(struct rd *r, const struct json *o,
				 const char *key);
const struct json *g_arr(struct rd *r, const struct json *o, const char *key,
			 size_t *n);

/* Parts of tier's reply that a kvmemd older than them leaves out. */
bool has_archive(const struct json *v);
/* Is tier @name in the "tiers" of tier's reply, @ts: the archive tier
 * with @arch, the GPU tier where kvmemd sends it (it has a GPU pool). */
bool tier_shown(const struct json *ts, const char *name, bool arch);
uint64_t g_store_unit(struct rd *r, const struct json *st);

/* ---- the socket ------------------------------------------------------- */

int ctl_request_timeout(struct ctl *c, const char *req, int timeout_ms,
			struct json **reply);
int ctl_request(struct ctl *c, const char *req, struct json **reply);
/* ctl_request() of a request that a kvmemd older than it does not know:
 * then CTL_OK, nothing said, and *@reply NULL. */
int ctl_request_new(struct ctl *c, const char *req, struct json **reply);
void ctl_close(struct ctl *c);

/* ---- output ----------------------------------------------------------- */

typedef void (*render_fn)(struct rd *r, FILE *f, const struct json *v);

int ctl_present(const struct ctl *c, const char *req, render_fn fn,
		const struct json *reply);
int ctl_simple(struct ctl *c, const char *req, int timeout_ms, render_fn fn);
void kv(struct table *t, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void t_done(struct rd *r, struct table *t, FILE *f);

/* ---- the words of requests -------------------------------------------- */

int ctl_parse_uint(const char *s, uint64_t max, uint64_t *out);
int id_arg(const char *what, const char *s, uint64_t *out);
int target_arg(int argc, char **argv, char *out, size_t len);

#endif /* KVMEM_TOOLS_CTL_H */
