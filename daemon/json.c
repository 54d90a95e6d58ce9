/* SPDX-License-Identifier: MIT */
/*
 * json.c - a JSON writer for the admin socket's replies
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

static int reserve(struct jw *w, size_t more)
{
	size_t cap = w->cap ? w->cap : 1024;
	char *p;

	if (w->failed)
		return -1;
	while (cap - w->len < more + 1) {
		if (cap > SIZE_MAX / 2)
			goto fail;
		cap *= 2;
	}
	if (cap != w->cap) {
		p = realloc(w->buf, cap);
		if (!p)
			goto fail;
		w->buf = p;
		w->cap = cap;
	}
	return 0;
fail:
	w->failed = 1;
	return -1;
}

static void put(struct jw *w, const char *s, size_t n)
{
	if (reserve(w, n))
		return;
	memcpy(w->buf + w->len, s, n);
	w->len += n;
	w->buf[w->len] = 0;
}

static void __attribute__((format(printf, 2, 3)))
putf(struct jw *w, const char *fmt, ...)
{
	char tmp[64];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0)
		put(w, tmp,
		    (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* Bytes past ASCII are escaped one by one: the request words an error
 * echoes need not be UTF-8, and the reply must stay valid JSON. */
static void put_string(struct jw *w, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	put(w, "\"", 1);
	for (; *p; p++) {
		if (*p == '"' || *p == '\\')
			putf(w, "\\%c", *p);
		else if (*p < 0x20 || *p >= 0x7f)
			putf(w, "\\u%04x", *p);
		else
			put(w, (const char *)p, 1);
	}
	put(w, "\"", 1);
}

/* A comma unless this is the first thing inside its object or array. */
static void member(struct jw *w, const char *key)
{
	char last = w->len ? w->buf[w->len - 1] : '{';

	if (last != '{' && last != '[')
		put(w, ",", 1);
	if (key) {
		put_string(w, key);
		put(w, ":", 1);
	}
}

void jw_reset(struct jw *w)
{
	w->len = 0;
	w->failed = 0;
	if (w->buf)
		w->buf[0] = 0;
}

void jw_free(struct jw *w)
{
	free(w->buf);
	memset(w, 0, sizeof(*w));
}

void jw_open(struct jw *w, const char *key, char bracket)
{
	member(w, key);
	put(w, &bracket, 1);
}

void jw_close(struct jw *w, char bracket)
{
	put(w, &bracket, 1);
}

void jw_str(struct jw *w, const char *key, const char *v)
{
	member(w, key);
	put_string(w, v);
}

void jw_u64(struct jw *w, const char *key, uint64_t v)
{
	member(w, key);
	putf(w, "%llu", (unsigned long long)v);
}

void jw_i64(struct jw *w, const char *key, int64_t v)
{
	member(w, key);
	putf(w, "%lld", (long long)v);
}

/* JSON has no NaN or infinity: those are written as null. */
void jw_f64(struct jw *w, const char *key, double v)
{
	member(w, key);
	if (isfinite(v))
		putf(w, "%.15g", v);
	else
		put(w, "null", 4);
}

void jw_bool(struct jw *w, const char *key, int v)
{
	member(w, key);
	put(w, v ? "true" : "false", v ? 4 : 5);
}

void jw_null(struct jw *w, const char *key)
{
	member(w, key);
	put(w, "null", 4);
}

void jw_raw(struct jw *w, const char *key, const char *json)
{
	member(w, key);
	put(w, json, strlen(json));
}

void jw_end(struct jw *w)
{
	put(w, "\n", 1);
}
