/* SPDX-License-Identifier: MIT */
/*
 * json.h - a small JSON reader (RFC 8259) for untrusted input
 *
 * json_parse() builds a tree of struct json from a buffer that need not be
 * NUL-terminated, under a size and a nesting limit, and says where and why
 * it stopped when the text is not JSON. It accepts exactly the grammar:
 * no comments, no trailing commas, no leading zeros or '+', UTF-8 checked
 * (no overlong forms, no surrogates), \u escapes with surrogate pairs, no
 * lone surrogates. Numbers that do not fit a double (1e400) are refused.
 * Duplicate keys are kept; json_get() finds the first.
 *
 * json_print() writes a tree back as compact JSON, escaping every control
 * character (C0, DEL and C1), so what it prints is safe for a terminal.
 *
 * Included by json.c, kvmemctl's files (through ctl.h), bench-hangup.c,
 * and the tests that read kvmemd's replies (check_kvmemctl.c, the admin
 * fuzzer).
 */
#ifndef KVMEM_TOOLS_JSON_H
#define KVMEM_TOOLS_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum json_type {
	JSON_NULL,
	JSON_BOOL,
	JSON_NUMBER,
	JSON_STRING,
	JSON_ARRAY,
	JSON_OBJECT,
};

struct json_member;

struct json {
	enum json_type type;
	union {
		bool b;
		struct {
			double d;
			uint64_t u; /* when exact */
			bool exact; /* written as an integer <= UINT64_MAX */
		} num;
		struct {
			char *s; /* NUL-terminated; may hold NULs (\u0000) */
			size_t len;
		} str;
		struct {
			struct json *v;
			size_t n;
		} arr;
		struct {
			struct json_member *m;
			size_t n;
		} obj;
	} u;
};

struct json_member {
	char *key; /* as str.s */
	size_t len;
	struct json v;
};

/* Defaults when json_parse() gets no limits. */
#define JSON_MAX_BYTES (16u << 20)
#define JSON_MAX_DEPTH 64u

struct json_limits {
	size_t max_bytes; /* longest input accepted */
	unsigned int max_depth; /* arrays and objects nested at most */
};

struct json_error {
	size_t offset; /* byte of the input where it went wrong */
	char msg[96];
};

/*
 * json_parse() - read one JSON value; only white space may follow it
 * @text, @len: the input
 * @lim: limits, or NULL for JSON_MAX_BYTES and JSON_MAX_DEPTH
 * @out: receives the tree (free with json_free()) on success
 * @err: receives the offset and a sentence on failure; may be NULL
 *
 * Return: 0, -EINVAL when the text is not JSON, -E2BIG when it breaks a
 * limit, -ENOMEM.
 */
int json_parse(const char *text, size_t len, const struct json_limits *lim,
	       struct json **out, struct json_error *err);

void json_free(struct json *v);

/* The member @key of object @o; NULL when @o is no object or lacks it. */
const struct json *json_get(const struct json *o, const char *key);

/*
 * Typed reads of a value that may be NULL: 0 and *@out set when @v has the
 * type, else -1. json_u64() takes only exact numbers: written as an integer
 * (no sign, fraction or exponent) no larger than UINT64_MAX.
 */
int json_u64(const struct json *v, uint64_t *out);
int json_num(const struct json *v, double *out);
int json_bool(const struct json *v, bool *out);
/* The text of a string value, or NULL. */
const char *json_str(const struct json *v);

/* "null", "boolean", "number", "string", "array" or "object". */
const char *json_type_name(enum json_type t);

/* Write @v as compact JSON. Return: 0, or -1 when writing to @f failed. */
int json_print(FILE *f, const struct json *v);

#endif /* KVMEM_TOOLS_JSON_H */
