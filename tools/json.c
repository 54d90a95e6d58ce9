/* SPDX-License-Identifier: MIT */
/*
 * json.c - see json.h
 *
 * Recursive descent over a bounded buffer. Recursion is bounded by
 * max_depth; every read checks the end of the input first, so truncated
 * text fails with "unexpected end of input" wherever it stops. On failure
 * everything built so far is freed and *out is left alone.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

/* glibc's strtod() on a long run of digits is slow: no number is longer. */
#define MAX_NUMBER_CHARS 1024

struct parser {
	const unsigned char *start, *p, *end;
	unsigned int depth, max_depth;
	struct json_error *err;
};

static int fail(struct parser *ps, int ret, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(struct parser *ps, int ret, const char *fmt, ...)
{
	va_list ap;

	if (!ps->err)
		return ret;
	ps->err->offset = (size_t)(ps->p - ps->start);
	va_start(ap, fmt);
	vsnprintf(ps->err->msg, sizeof(ps->err->msg), fmt, ap);
	va_end(ap);
	return ret;
}

static int fail_eof(struct parser *ps, const char *what)
{
	return fail(ps, -EINVAL, "unexpected end of input in %s", what);
}

/* "unexpected 'x'" with the byte quoted safely. */
static int fail_byte(struct parser *ps, const char *expected)
{
	unsigned char c = *ps->p;

	if (c > 0x20 && c < 0x7f)
		return fail(ps, -EINVAL, "'%c' where %s was expected", c,
			    expected);
	return fail(ps, -EINVAL, "byte 0x%02x where %s was expected", c,
		    expected);
}

static void skip_ws(struct parser *ps)
{
	while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' ||
				   *ps->p == '\n' || *ps->p == '\r'))
		ps->p++;
}

static void free_value(struct json *v)
{
	size_t i;

	switch (v->type) {
	case JSON_STRING:
		free(v->u.str.s);
		break;
	case JSON_ARRAY:
		for (i = 0; i < v->u.arr.n; i++)
			free_value(&v->u.arr.v[i]);
		free(v->u.arr.v);
		break;
	case JSON_OBJECT:
		for (i = 0; i < v->u.obj.n; i++) {
			free(v->u.obj.m[i].key);
			free_value(&v->u.obj.m[i].v);
		}
		free(v->u.obj.m);
		break;
	default:
		break;
	}
}

/* Room for one more of @size bytes in *@items, which holds @n. */
static int grow(void **items, size_t n, size_t *cap, size_t size)
{
	size_t ncap = *cap ? *cap * 2 : 4;
	void *p;

	if (n < *cap)
		return 0;
	p = realloc(*items, ncap * size);
	if (!p)
		return -ENOMEM;
	*items = p;
	*cap = ncap;
	return 0;
}

/* ---- strings ---------------------------------------------------------- */

/*
 * The four hex digits of the \u escape at @at (its backslash) to *@cp:
 * 0, 1 when the input ends first, -1 when they are not hex digits.
 */
static int escape_u(const struct parser *ps, const unsigned char *at,
		    unsigned int *cp)
{
	unsigned int v = 0;
	int i;

	for (i = 2; i < 6; i++) {
		unsigned char c;

		if (at + i >= ps->end)
			return 1;
		c = at[i];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			return -1;
	}
	*cp = v;
	return 0;
}

static size_t put_utf8(char *o, unsigned int cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | cp >> 6);
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | cp >> 12);
		o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | cp >> 18);
	o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/*
 * Bytes of the well-formed UTF-8 sequence at @p (@avail readable): its
 * length, 0 when it is not one (Unicode 15, table 3-7: no overlong forms,
 * no surrogates, <= U+10FFFF), -1 when the input ends inside one that is
 * well-formed so far.
 */
static int utf8_len(const unsigned char *p, size_t avail)
{
	unsigned char c = p[0], lo = 0x80, hi = 0xbf;
	size_t n, i;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4;
	else
		return 0;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	for (i = 1; i < n; i++) {
		if (i == avail)
			return -1;
		if (p[i] < (i == 1 ? lo : 0x80) || p[i] > (i == 1 ? hi : 0xbf))
			return 0;
	}
	return (int)n;
}

/* The string at ps->p (its opening quote) to *@s, *@len. */
static int parse_string(struct parser *ps, char **s, size_t *len)
{
	const unsigned char *q;
	char *buf, *o;
	unsigned int cp, lo;
	int ret;

	/* The decoded text is never longer than the escaped one. */
	for (q = ps->p + 1; q < ps->end && *q != '"'; q++)
		if (*q == '\\' && q + 1 < ps->end)
			q++;
	buf = malloc((size_t)(q - ps->p));
	if (!buf)
		return fail(ps, -ENOMEM, "out of memory");
	o = buf;
	ps->p++;
	for (;;) {
		if (ps->p == ps->end) {
			free(buf);
			return fail_eof(ps, "a string");
		}
		if (*ps->p == '"')
			break;
		if (*ps->p < 0x20) {
			free(buf);
			return fail(ps, -EINVAL,
				    "control character 0x%02x in a string "
				    "(must be escaped)",
				    *ps->p);
		}
		if (*ps->p != '\\') {
			ret = utf8_len(ps->p, (size_t)(ps->end - ps->p));
			if (ret <= 0) {
				free(buf);
				if (ret < 0) {
					ps->p = ps->end;
					return fail_eof(ps, "a string");
				}
				return fail(ps, -EINVAL,
					    "invalid UTF-8 in a string");
			}
			memcpy(o, ps->p, (size_t)ret);
			o += ret;
			ps->p += ret;
			continue;
		}
		if (ps->end - ps->p < 2) {
			ps->p = ps->end;
			free(buf);
			return fail_eof(ps, "a string");
		}
		switch (ps->p[1]) {
		case '"':
		case '\\':
		case '/':
			*o++ = (char)ps->p[1];
			break;
		case 'b':
			*o++ = '\b';
			break;
		case 'f':
			*o++ = '\f';
			break;
		case 'n':
			*o++ = '\n';
			break;
		case 'r':
			*o++ = '\r';
			break;
		case 't':
			*o++ = '\t';
			break;
		case 'u':
			ret = escape_u(ps, ps->p, &cp);
			if (ret)
				goto bad_u;
			if (cp >= 0xdc00 && cp <= 0xdfff) {
				free(buf);
				return fail(ps, -EINVAL,
					    "lone low surrogate \\u%04x", cp);
			}
			if (cp >= 0xd800 && cp <= 0xdbff) {
				/* A high surrogate: its pair must follow. */
				q = ps->p + 6;
				ret = q >= ps->end ? 1 : *q != '\\' ? -1 : 0;
				if (!ret && q + 1 < ps->end && q[1] != 'u')
					ret = -1;
				if (!ret)
					ret = escape_u(ps, q, &lo);
				if (!ret && (lo < 0xdc00 || lo > 0xdfff))
					ret = -1;
				if (ret > 0)
					goto bad_u;
				if (ret) {
					free(buf);
					return fail(ps, -EINVAL,
						    "high surrogate \\u%04x "
						    "without its low half",
						    cp);
				}
				cp = 0x10000 + ((cp - 0xd800) << 10) +
				     (lo - 0xdc00);
				ps->p += 6;
			}
			o += put_utf8(o, cp);
			ps->p += 4;
			break;
		default:
			ps->p++;
			free(buf);
			return fail_byte(ps, "an escape (\"\\/bfnrtu)");
		}
		ps->p += 2;
	}
	ps->p++;
	*o = 0;
	*s = buf;
	*len = (size_t)(o - buf);
	return 0;

bad_u:
	free(buf);
	if (ret > 0) {
		ps->p = ps->end;
		return fail_eof(ps, "a \\u escape");
	}
	return fail(ps, -EINVAL, "\\u needs four hex digits");
}

/* ---- numbers ---------------------------------------------------------- */

static int digits(struct parser *ps)
{
	const unsigned char *p0 = ps->p;

	while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
		ps->p++;
	return ps->p > p0;
}

static int parse_number(struct parser *ps, struct json *v)
{
	const unsigned char *p0 = ps->p;
	char tok[MAX_NUMBER_CHARS + 1];
	bool integer = true;
	uint64_t u = 0;
	size_t n, i;

	if (*ps->p == '-') {
		integer = false;
		ps->p++;
	}
	if (ps->p == ps->end)
		return fail_eof(ps, "a number");
	if (*ps->p == '0') {
		ps->p++;
		if (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
			return fail(ps, -EINVAL, "leading zero in a number");
	} else if (!digits(ps)) {
		return ps->p == ps->end ? fail_eof(ps, "a number")
					: fail_byte(ps, "a digit");
	}
	if (ps->p < ps->end && *ps->p == '.') {
		integer = false;
		ps->p++;
		if (!digits(ps))
			return ps->p == ps->end
				       ? fail_eof(ps, "a number")
				       : fail_byte(ps, "a digit after '.'");
	}
	if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
		integer = false;
		ps->p++;
		if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
			ps->p++;
		if (!digits(ps))
			return ps->p == ps->end
				       ? fail_eof(ps, "a number")
				       : fail_byte(ps,
						   "a digit of the exponent");
	}
	n = (size_t)(ps->p - p0);
	if (n > MAX_NUMBER_CHARS) {
		ps->p = p0;
		return fail(ps, -E2BIG, "a number of more than %d characters",
			    MAX_NUMBER_CHARS);
	}
	memcpy(tok, p0, n);
	tok[n] = 0;
	v->type = JSON_NUMBER;
	v->u.num.d = strtod(tok, NULL);
	if (isinf(v->u.num.d)) {
		ps->p = p0;
		return fail(ps, -EINVAL, "number out of the range of a double");
	}
	v->u.num.exact = integer;
	for (i = 0; integer && i < n; i++) {
		unsigned int d = (unsigned int)(tok[i] - '0');

		if (u > (UINT64_MAX - d) / 10)
			v->u.num.exact = integer = false;
		else
			u = u * 10 + d;
	}
	v->u.num.u = v->u.num.exact ? u : 0;
	return 0;
}

/* ---- values ----------------------------------------------------------- */

static int parse_value(struct parser *ps, struct json *v);

static int literal(struct parser *ps, const char *word)
{
	size_t n = strlen(word);

	if ((size_t)(ps->end - ps->p) < n) {
		if (!memcmp(ps->p, word, (size_t)(ps->end - ps->p))) {
			ps->p = ps->end;
			return fail_eof(ps, "a literal");
		}
	} else if (!memcmp(ps->p, word, n)) {
		ps->p += n;
		return 0;
	}
	return fail(ps, -EINVAL, "not a JSON value (expected %s?)", word);
}

static int enter(struct parser *ps)
{
	if (++ps->depth > ps->max_depth)
		return fail(ps, -E2BIG, "nested deeper than %u levels",
			    ps->max_depth);
	ps->p++;
	skip_ws(ps);
	return 0;
}

static int parse_array(struct parser *ps, struct json *v)
{
	size_t cap = 0;
	int ret = enter(ps);

	v->type = JSON_ARRAY;
	v->u.arr.v = NULL;
	v->u.arr.n = 0;
	if (ret)
		return ret;
	if (ps->p < ps->end && *ps->p == ']')
		goto done;
	for (;;) {
		ret = grow((void **)&v->u.arr.v, v->u.arr.n, &cap,
			   sizeof(*v->u.arr.v));
		if (ret)
			return fail(ps, ret, "out of memory");
		ret = parse_value(ps, &v->u.arr.v[v->u.arr.n]);
		if (ret) {
			/* Not counted yet: the array would not free it. */
			free_value(&v->u.arr.v[v->u.arr.n]);
			return ret;
		}
		v->u.arr.n++;
		skip_ws(ps);
		if (ps->p == ps->end)
			return fail_eof(ps, "an array");
		if (*ps->p == ']')
			break;
		if (*ps->p != ',')
			return fail_byte(ps, "',' or ']' in an array");
		ps->p++;
	}
done:
	ps->p++;
	ps->depth--;
	return 0;
}

static int parse_object(struct parser *ps, struct json *v)
{
	struct json_member *m;
	size_t cap = 0;
	int ret = enter(ps);

	v->type = JSON_OBJECT;
	v->u.obj.m = NULL;
	v->u.obj.n = 0;
	if (ret)
		return ret;
	if (ps->p < ps->end && *ps->p == '}')
		goto done;
	for (;;) {
		skip_ws(ps);
		if (ps->p == ps->end)
			return fail_eof(ps, "an object");
		if (*ps->p != '"')
			return fail_byte(ps, "a string key");
		ret = grow((void **)&v->u.obj.m, v->u.obj.n, &cap,
			   sizeof(*v->u.obj.m));
		if (ret)
			return fail(ps, ret, "out of memory");
		m = &v->u.obj.m[v->u.obj.n];
		ret = parse_string(ps, &m->key, &m->len);
		if (ret)
			return ret;
		/* The key is the object's now, the value not yet. */
		m->v.type = JSON_NULL;
		v->u.obj.n++;
		skip_ws(ps);
		if (ps->p == ps->end)
			return fail_eof(ps, "an object");
		if (*ps->p != ':')
			return fail_byte(ps, "':' after a key");
		ps->p++;
		ret = parse_value(ps, &m->v);
		if (ret)
			return ret;
		skip_ws(ps);
		if (ps->p == ps->end)
			return fail_eof(ps, "an object");
		if (*ps->p == '}')
			break;
		if (*ps->p != ',')
			return fail_byte(ps, "',' or '}' in an object");
		ps->p++;
	}
done:
	ps->p++;
	ps->depth--;
	return 0;
}

/* On failure @v holds what was built (freed by the caller), or nothing. */
static int parse_value(struct parser *ps, struct json *v)
{
	v->type = JSON_NULL;
	skip_ws(ps);
	if (ps->p == ps->end)
		return fail_eof(ps, "a value");
	switch (*ps->p) {
	case '{':
		return parse_object(ps, v);
	case '[':
		return parse_array(ps, v);
	case '"':
		v->type = JSON_STRING;
		v->u.str.s = NULL;
		return parse_string(ps, &v->u.str.s, &v->u.str.len);
	case 't':
		v->type = JSON_BOOL;
		v->u.b = true;
		return literal(ps, "true");
	case 'f':
		v->type = JSON_BOOL;
		v->u.b = false;
		return literal(ps, "false");
	case 'n':
		return literal(ps, "null");
	default:
		if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))
			return parse_number(ps, v);
		return fail_byte(ps, "a value");
	}
}

int json_parse(const char *text, size_t len, const struct json_limits *lim,
	       struct json **out, struct json_error *err)
{
	struct parser ps = {
		.start = (const unsigned char *)text,
		.p = (const unsigned char *)text,
		.end = (const unsigned char *)text + len,
		.max_depth = lim ? lim->max_depth : JSON_MAX_DEPTH,
		.err = err,
	};
	size_t max_bytes = lim ? lim->max_bytes : JSON_MAX_BYTES;
	struct json *v;
	int ret;

	if (len > max_bytes) {
		ps.p += max_bytes;
		return fail(&ps, -E2BIG,
			    "input of %zu bytes is over the %zu "
			    "allowed",
			    len, max_bytes);
	}
	v = malloc(sizeof(*v));
	if (!v)
		return fail(&ps, -ENOMEM, "out of memory");
	ret = parse_value(&ps, v);
	if (!ret) {
		skip_ws(&ps);
		if (ps.p != ps.end)
			ret = fail_byte(&ps, "the end of the input");
	}
	if (ret) {
		free_value(v);
		free(v);
		return ret;
	}
	*out = v;
	return 0;
}

void json_free(struct json *v)
{
	if (!v)
		return;
	free_value(v);
	free(v);
}

/* ---- reading the tree ------------------------------------------------- */

const struct json *json_get(const struct json *o, const char *key)
{
	size_t i, n = strlen(key);

	if (!o || o->type != JSON_OBJECT)
		return NULL;
	for (i = 0; i < o->u.obj.n; i++)
		if (o->u.obj.m[i].len == n &&
		    !memcmp(o->u.obj.m[i].key, key, n))
			return &o->u.obj.m[i].v;
	return NULL;
}

int json_u64(const struct json *v, uint64_t *out)
{
	if (!v || v->type != JSON_NUMBER || !v->u.num.exact)
		return -1;
	*out = v->u.num.u;
	return 0;
}

int json_num(const struct json *v, double *out)
{
	if (!v || v->type != JSON_NUMBER)
		return -1;
	*out = v->u.num.d;
	return 0;
}

int json_bool(const struct json *v, bool *out)
{
	if (!v || v->type != JSON_BOOL)
		return -1;
	*out = v->u.b;
	return 0;
}

const char *json_str(const struct json *v)
{
	return v && v->type == JSON_STRING ? v->u.str.s : NULL;
}

const char *json_type_name(enum json_type t)
{
	static const char *const names[] = {
		[JSON_NULL] = "null",	  [JSON_BOOL] = "boolean",
		[JSON_NUMBER] = "number", [JSON_STRING] = "string",
		[JSON_ARRAY] = "array",	  [JSON_OBJECT] = "object",
	};

	return (unsigned int)t < sizeof(names) / sizeof(names[0]) ? names[t]
								  : "?";
}

/* ---- writing ---------------------------------------------------------- */

static void print_string(FILE *f, const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i;

	fputc('"', f);
	for (i = 0; i < len; i++) {
		unsigned char c = p[i];

		if (c == '"' || c == '\\') {
			fputc('\\', f);
			fputc(c, f);
		} else if (c == '\n') {
			fputs("\\n", f);
		} else if (c == '\t') {
			fputs("\\t", f);
		} else if (c < 0x20 || c == 0x7f) {
			fprintf(f, "\\u%04x", c);
		} else if (c == 0xc2 && i + 1 < len && p[i + 1] < 0xa0) {
			/* C1 controls, U+0080..U+009F: the parser saw to it
			 * that a continuation byte follows. */
			fprintf(f, "\\u%04x", p[++i]);
		} else {
			fputc(c, f);
		}
	}
	fputc('"', f);
}

/* The shortest of %.15g, %.16g, %.17g that reads back as @d. */
static void print_double(FILE *f, double d)
{
	char buf[32];
	int prec;

	for (prec = 15; prec < 17; prec++) {
		snprintf(buf, sizeof(buf), "%.*g", prec, d);
		if (strtod(buf, NULL) == d)
			break;
	}
	snprintf(buf, sizeof(buf), "%.*g", prec, d);
	fputs(buf, f);
}

static void print_value(FILE *f, const struct json *v)
{
	size_t i;

	switch (v->type) {
	case JSON_NULL:
		fputs("null", f);
		break;
	case JSON_BOOL:
		fputs(v->u.b ? "true" : "false", f);
		break;
	case JSON_NUMBER:
		if (v->u.num.exact)
			fprintf(f, "%" PRIu64, v->u.num.u);
		else
			print_double(f, v->u.num.d);
		break;
	case JSON_STRING:
		print_string(f, v->u.str.s, v->u.str.len);
		break;
	case JSON_ARRAY:
		fputc('[', f);
		for (i = 0; i < v->u.arr.n; i++) {
			if (i)
				fputc(',', f);
			print_value(f, &v->u.arr.v[i]);
		}
		fputc(']', f);
		break;
	case JSON_OBJECT:
		fputc('{', f);
		for (i = 0; i < v->u.obj.n; i++) {
			if (i)
				fputc(',', f);
			print_string(f, v->u.obj.m[i].key, v->u.obj.m[i].len);
			fputc(':', f);
			print_value(f, &v->u.obj.m[i].v);
		}
		fputc('}', f);
		break;
	}
}

int json_print(FILE *f, const struct json *v)
{
	print_value(f, v);
	return ferror(f) ? -1 : 0;
}
