/* SPDX-License-Identifier: MIT */
/*
 * json.h - a JSON writer for the admin socket's replies
 *
 * Appends to a growing buffer. Commas are put in by looking at what came
 * last, so callers write keys and values in order and never count. Running
 * out of memory is sticky: the writer stops and jw_failed() says so, and the
 * caller sends an error instead of a truncated reply.
 *
 * Included by json.c; admin.c and the result objects of archive.c,
 * prefix.c, ras.c and tier.c, which write replies; server.c, which sends
 * them.
 */
#ifndef KVMEMD_JSON_H
#define KVMEMD_JSON_H

#include <stddef.h>
#include <stdint.h>

struct jw {
	char *buf;
	size_t len, cap;
	int failed;
};

void jw_reset(struct jw *w);
void jw_free(struct jw *w);
static inline int jw_failed(const struct jw *w)
{
	return w->failed;
}

/* '{' or '[' after @key (NULL inside an array or at the top). */
void jw_open(struct jw *w, const char *key, char bracket);
void jw_close(struct jw *w, char bracket);

/* A member (@key) or an array element (@key NULL) of each type. */
void jw_str(struct jw *w, const char *key, const char *v);
void jw_u64(struct jw *w, const char *key, uint64_t v);
void jw_i64(struct jw *w, const char *key, int64_t v);
void jw_f64(struct jw *w, const char *key, double v);
void jw_bool(struct jw *w, const char *key, int v);
void jw_null(struct jw *w, const char *key);
/* A value already in JSON, e.g. a number as the configuration prints it. */
void jw_raw(struct jw *w, const char *key, const char *json);
/* The terminating newline of a reply. */
void jw_end(struct jw *w);

#endif /* KVMEMD_JSON_H */
