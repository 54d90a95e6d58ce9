/* SPDX-License-Identifier: MIT */
/*
 * check_kvmemctl.c - kvmemctl and the JSON reader under it
 *
 * json: the reader against valid and invalid text, truncation at every
 * byte, nesting and size limits, and mutated documents (no input crashes
 * it; what it accepts prints back to the same text).
 *
 * kvmemctl: the tool run as a process, first against a fake admin server
 * that answers with replies written from the protocol's specification
 * (so the exact request words, every rendering, malformed and hostile
 * replies and the exit statuses are pinned down without a daemon), then
 * against real kvmemd processes: every command, --json replies checked
 * against the specification's schema, metrics checked as Prometheus text,
 * and the ways of being refused.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../tools/json.h"
#include "internal.h"
#include "kvmem/kvmem.h"
#include "kvmem_check.h"
#include "kvmemd_harness.h"
#include "rng.h"

/* ---- json: helpers ---------------------------------------------------- */

static struct json *parse_ok(const char *text)
{
	struct json_error e = { 0 };
	struct json *v = NULL;
	int ret = json_parse(text, strlen(text), NULL, &v, &e);

	ck_assert_msg(!ret, "json_parse(%s) = %d: byte %zu: %s", text, ret,
		      e.offset, e.msg);
	return v;
}

/* @v printed by json_print(), in a malloc'ed string. */
static char *print_json(const struct json *v)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(json_print(f, v), 0);
	ck_assert_int_eq(fclose(f), 0);
	return text;
}

static void expect_fail(const char *text, size_t len, int want, size_t off,
			const char *msg)
{
	struct json_error e = { 0 };
	struct json *v = NULL;
	int ret = json_parse(text, len, NULL, &v, &e);

	ck_assert_msg(ret == want, "json_parse(\"%.*s\") = %d, expected %d",
		      (int)len, text, ret, want);
	ck_assert_ptr_null(v);
	ck_assert_msg(e.offset == off,
		      "json_parse(\"%.*s\"): error at byte %zu, expected %zu "
		      "(%s)",
		      (int)len, text, e.offset, off, e.msg);
	ck_assert_msg(strstr(e.msg, msg),
		      "json_parse(\"%.*s\"): \"%s\" does not say \"%s\"",
		      (int)len, text, e.msg, msg);
}

/* ---- json: tests ------------------------------------------------------ */

START_TEST(test_json_values)
{
	struct json *v = parse_ok(
		" {\"a\": [1, -2, 3.5, true, false, null, \"x\"],\n"
		"  \"b\": {\"c\": {}}, \"d\": [], \"e\": \"\", \"a\": 0 }\t");
	const struct json *a = json_get(v, "a"), *c;
	uint64_t u;
	double d;
	bool b;

	ck_assert_int_eq(v->type, JSON_OBJECT);
	ck_assert_uint_eq(v->u.obj.n, 5);
	/* Duplicate keys: the first wins. */
	ck_assert_int_eq(a->type, JSON_ARRAY);
	ck_assert_uint_eq(a->u.arr.n, 7);
	ck_assert_int_eq(json_u64(&a->u.arr.v[0], &u), 0);
	ck_assert_uint_eq(u, 1);
	/* Negative and fractional numbers are numbers, not exact. */
	ck_assert_int_eq(json_u64(&a->u.arr.v[1], &u), -1);
	ck_assert_int_eq(json_num(&a->u.arr.v[1], &d), 0);
	ck_assert(d == -2.0);
	ck_assert_int_eq(json_u64(&a->u.arr.v[2], &u), -1);
	ck_assert_int_eq(json_num(&a->u.arr.v[2], &d), 0);
	ck_assert(d == 3.5);
	ck_assert_int_eq(json_bool(&a->u.arr.v[3], &b), 0);
	ck_assert(b);
	ck_assert_int_eq(json_bool(&a->u.arr.v[4], &b), 0);
	ck_assert(!b);
	ck_assert_int_eq(a->u.arr.v[5].type, JSON_NULL);
	ck_assert_str_eq(json_str(&a->u.arr.v[6]), "x");
	/* Wrong types are refused, not converted. */
	ck_assert_int_eq(json_bool(&a->u.arr.v[0], &b), -1);
	ck_assert_int_eq(json_num(&a->u.arr.v[6], &d), -1);
	ck_assert_ptr_null(json_str(&a->u.arr.v[0]));
	ck_assert_int_eq(json_u64(NULL, &u), -1);
	c = json_get(json_get(v, "b"), "c");
	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(c->type, JSON_OBJECT);
	ck_assert_uint_eq(c->u.obj.n, 0);
	ck_assert_ptr_null(json_get(v, "z"));
	ck_assert_ptr_null(json_get(a, "a"));
	ck_assert_str_eq(json_str(json_get(v, "e")), "");
	ck_assert_str_eq(json_type_name(JSON_OBJECT), "object");
	ck_assert_str_eq(json_type_name(JSON_BOOL), "boolean");
	json_free(v);
	json_free(NULL);
}
END_TEST

START_TEST(test_json_numbers)
{
	static const struct {
		const char *text;
		int exact;
		uint64_t u;
		double d;
	} cases[] = {
		{ "0", 1, 0, 0 },
		{ "-0", 0, 0, -0.0 },
		{ "123", 1, 123, 123 },
		{ "18446744073709551615", 1, UINT64_MAX,
		  18446744073709551615.0 },
		{ "18446744073709551616", 0, 0, 18446744073709551616.0 },
		{ "99999999999999999999999", 0, 0, 1e23 },
		{ "1e3", 0, 0, 1000 },
		{ "1.0", 0, 0, 1 },
		{ "-1.5E-3", 0, 0, -0.0015 },
		{ "2.5e+2", 0, 0, 250 },
		{ "1e-400", 0, 0, 0 },
		{ "1.7976931348623157e308", 0, 0, 1.7976931348623157e308 },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct json *v = parse_ok(cases[i].text);
		uint64_t u = 7;
		double d;

		ck_assert_int_eq(v->type, JSON_NUMBER);
		ck_assert_int_eq(json_num(v, &d), 0);
		ck_assert_msg(d == cases[i].d, "%s: %.17g != %.17g",
			      cases[i].text, d, cases[i].d);
		ck_assert_int_eq(json_u64(v, &u), cases[i].exact ? 0 : -1);
		if (cases[i].exact)
			ck_assert_uint_eq(u, cases[i].u);
		json_free(v);
	}
}
END_TEST

START_TEST(test_json_strings)
{
	struct json *v = parse_ok("[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\", "
				  "\"\\u00e9\\u20ac\", \"\\ud83d\\ude00\", "
				  "\"a\\u0000b\", \"\xc3\xa9\xe2\x82\xac\"]");
	const struct json *a = v->u.arr.v;

	ck_assert_str_eq(json_str(&a[0]), "\"\\/\b\f\n\r\t");
	ck_assert_str_eq(json_str(&a[1]), "\xc3\xa9\xe2\x82\xac");
	ck_assert_str_eq(json_str(&a[2]), "\xf0\x9f\x98\x80");
	/* An escaped NUL is kept: the length says where the string ends. */
	ck_assert_uint_eq(a[3].u.str.len, 3);
	ck_assert_mem_eq(a[3].u.str.s, "a\0b", 4);
	ck_assert_str_eq(json_str(&a[4]), "\xc3\xa9\xe2\x82\xac");
	json_free(v);
}
END_TEST

START_TEST(test_json_invalid)
{
	static const struct {
		const char *text;
		int ret;
		size_t off;
		const char *msg;
	} cases[] = {
		{ "", -EINVAL, 0, "end of input" },
		{ "   ", -EINVAL, 3, "end of input" },
		{ "{", -EINVAL, 1, "end of input" },
		{ "[1,]", -EINVAL, 3, "']' where a value" },
		{ "{\"a\":1,}", -EINVAL, 7, "'}' where a string key" },
		{ "{1:2}", -EINVAL, 1, "'1' where a string key" },
		{ "{\"a\" 1}", -EINVAL, 5, "':' after a key" },
		{ "[1 2]", -EINVAL, 3, "',' or ']'" },
		{ "{\"a\":1 \"b\":2}", -EINVAL, 7, "',' or '}'" },
		{ "1 2", -EINVAL, 2, "the end of the input" },
		{ "[1]x", -EINVAL, 3, "the end of the input" },
		{ "01", -EINVAL, 1, "leading zero" },
		{ "-01", -EINVAL, 2, "leading zero" },
		{ "1.", -EINVAL, 2, "end of input" },
		{ "1.x", -EINVAL, 2, "a digit after '.'" },
		{ ".5", -EINVAL, 0, "'.' where a value" },
		{ "+1", -EINVAL, 0, "'+' where a value" },
		{ "1e", -EINVAL, 2, "end of input" },
		{ "1e+", -EINVAL, 3, "end of input" },
		{ "1ex", -EINVAL, 2, "exponent" },
		{ "-", -EINVAL, 1, "end of input" },
		{ "-x", -EINVAL, 1, "a digit" },
		{ "1e400", -EINVAL, 0, "range of a double" },
		{ "-1e400", -EINVAL, 0, "range of a double" },
		{ "NaN", -EINVAL, 0, "'N' where a value" },
		{ "Infinity", -EINVAL, 0, "'I' where a value" },
		{ "True", -EINVAL, 0, "'T' where a value" },
		{ "tru", -EINVAL, 3, "end of input" },
		{ "trUe", -EINVAL, 0, "expected true" },
		{ "nul", -EINVAL, 3, "end of input" },
		{ "'a'", -EINVAL, 0, "''' where a value" },
		{ "\"abc", -EINVAL, 4, "end of input" },
		{ "\"\\x\"", -EINVAL, 2, "an escape" },
		{ "\"\\u12\"", -EINVAL, 1, "four hex digits" },
		{ "\"\\u12", -EINVAL, 5, "end of input" },
		{ "\"\\ud800\"", -EINVAL, 1, "without its low half" },
		{ "\"\\ud800\\u0041\"", -EINVAL, 1, "without its low half" },
		{ "\"\\udc00\"", -EINVAL, 1, "lone low surrogate" },
		{ "\"a\tb\"", -EINVAL, 2, "control character 0x09" },
		{ "\"a\nb\"", -EINVAL, 2, "control character 0x0a" },
		{ "\"\xc3\x28\"", -EINVAL, 1, "invalid UTF-8" },
		{ "\"\xc0\xaf\"", -EINVAL, 1, "invalid UTF-8" },
		{ "\"\xe0\x80\xaf\"", -EINVAL, 1, "invalid UTF-8" },
		{ "\"\xed\xa0\x80\"", -EINVAL, 1, "invalid UTF-8" },
		{ "\"\xf4\x90\x80\x80\"", -EINVAL, 1, "invalid UTF-8" },
		{ "\"\xff\"", -EINVAL, 1, "invalid UTF-8" },
		{ "\"\x80\"", -EINVAL, 1, "invalid UTF-8" },
		{ "[\x01]", -EINVAL, 1, "byte 0x01 where a value" },
		{ "/* c */ 1", -EINVAL, 0, "'/' where a value" },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_fail(cases[i].text, strlen(cases[i].text), cases[i].ret,
			    cases[i].off, cases[i].msg);
	/* A NUL byte is not the end of the input. */
	expect_fail("[1]\0", 4, -EINVAL, 3, "byte 0x00");
	expect_fail("\"a\0b\"", 5, -EINVAL, 2, "control character 0x00");
}
END_TEST

/* Every strict prefix of a document is refused as unfinished. */
START_TEST(test_json_truncated)
{
	static const char doc[] =
		"{\"pools\":[{\"pool\":\"h\xc3\xa9st\",\"bytes\":1073741824,"
		"\"f\":-1.5e-3,\"t\":true,\"n\":null,\"x\":false}],"
		"\"s\":\"\\u00e9\\ud83d\\ude00\\n\",\"e\":[],\"o\":{}}";
	struct json_error e;
	struct json *v;
	size_t len;

	for (len = 0; len < strlen(doc); len++) {
		memset(&e, 0, sizeof(e));
		v = NULL;
		ck_assert_msg(json_parse(doc, len, NULL, &v, &e) == -EINVAL,
			      "a prefix of %zu bytes was taken", len);
		ck_assert_ptr_null(v);
		ck_assert_msg(strstr(e.msg, "end of input"),
			      "prefix of %zu bytes: \"%s\"", len, e.msg);
		ck_assert_uint_eq(e.offset, len);
	}
	v = parse_ok(doc);
	json_free(v);
}
END_TEST

START_TEST(test_json_limits)
{
	struct json_limits lim = { .max_bytes = 64, .max_depth = 3 };
	struct json_error e = { 0 };
	struct json *v = NULL;
	char deep[200001];
	size_t i;

	ck_assert_int_eq(json_parse("[[[1]]]", 7, &lim, &v, &e), 0);
	json_free(v);
	v = NULL;
	ck_assert_int_eq(json_parse("[[[[1]]]]", 9, &lim, &v, &e), -E2BIG);
	ck_assert_ptr_null(v);
	ck_assert_uint_eq(e.offset, 3);
	ck_assert_ptr_nonnull(strstr(e.msg, "nested deeper than 3"));
	ck_assert_int_eq(
		json_parse("{\"a\":{\"b\":{\"c\":{}}}}", 20, &lim, &v, &e),
		-E2BIG);
	/* The size limit is checked before a byte is read. */
	memset(deep, ' ', 65);
	ck_assert_int_eq(json_parse(deep, 65, &lim, &v, &e), -E2BIG);
	ck_assert_ptr_nonnull(strstr(e.msg, "65 bytes"));
	ck_assert_int_eq(json_parse(deep, 64, &lim, &v, &e), -EINVAL);

	/* The default depth, exactly, and far beyond without recursing. */
	for (i = 0; i < JSON_MAX_DEPTH; i++) {
		deep[i] = '[';
		deep[2 * JSON_MAX_DEPTH - 1 - i] = ']';
	}
	ck_assert_int_eq(json_parse(deep, 2 * JSON_MAX_DEPTH, NULL, &v, &e), 0);
	json_free(v);
	memset(deep, '[', sizeof(deep));
	ck_assert_int_eq(json_parse(deep, sizeof(deep), NULL, &v, &e), -E2BIG);
	ck_assert_uint_eq(e.offset, JSON_MAX_DEPTH);
	memset(deep, '{', sizeof(deep));
	ck_assert_int_eq(json_parse(deep, sizeof(deep), NULL, &v, &e), -EINVAL);
	ck_assert_ptr_nonnull(strstr(e.msg, "a string key"));
	/* A number too long to convert is refused as such. */
	deep[0] = '1';
	memset(deep + 1, '0', 2000);
	ck_assert_int_eq(json_parse(deep, 2001, NULL, &v, &e), -E2BIG);
	ck_assert_uint_eq(e.offset, 0);
	/* An error pointer is optional. */
	ck_assert_int_eq(json_parse("x", 1, NULL, &v, NULL), -EINVAL);
}
END_TEST

START_TEST(test_json_print)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ " { \"a\" : [ 1 , 2.5 , -0 , 1e3 ] } ",
		  "{\"a\":[1,2.5,-0,1000]}" },
		{ "[0.1, 1e-7, 123456789012345678901234567890, -22]",
		  "[0.1,1e-07,1.2345678901234568e+29,-22]" },
		{ "\"\\u0001\\u001f\\u007f\\u0085\\u00a0\\n\\t\\\"\\\\\\/\"",
		  "\"\\u0001\\u001f\\u007f\\u0085\xc2\xa0\\n\\t\\\"\\\\/\"" },
		{ "{\"\\u0000\":null,\"k\":true}",
		  "{\"\\u0000\":null,\"k\":true}" },
		{ "18446744073709551615", "18446744073709551615" },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct json *v = parse_ok(cases[i].in), *w;
		char *out = print_json(v), *again;

		ck_assert_str_eq(out, cases[i].out);
		/* What it prints reads back to the same values. */
		w = parse_ok(out);
		again = print_json(w);
		ck_assert_str_eq(again, out);
		json_free(v);
		json_free(w);
		free(out);
		free(again);
	}
}
END_TEST

/*
 * Every byte of a document replaced by bytes that matter to the grammar,
 * and random garbage: the reader accepts or refuses without crashing
 * (ASan and UBSan watch with SAN=1), reports an offset inside the input,
 * and what it accepts prints to text it accepts again, unchanged.
 */
START_TEST(test_json_mutations)
{
	static const char doc[] =
		"{\"a\":[1,-2.5e3,\"x\\u00e9\\\"\",true,null,{\"b\":[]}],"
		"\"c\":\"\xe2\x82\xac\"}";
	static const char subst[] = "{}[],:\"\\0123456789-+.eEtfnu \x01\x80"
				    "\xc3\xed\xff";
	char buf[sizeof(doc)];
	struct kvmem_rng r;
	size_t i, k, len = strlen(doc);
	int n;

	for (i = 0; i < len; i++) {
		for (k = 0; k < sizeof(subst) - 1; k++) {
			struct json_error e = { 0 };
			struct json *v = NULL, *w = NULL;

			memcpy(buf, doc, len);
			buf[i] = subst[k];
			if (json_parse(buf, len, NULL, &v, &e)) {
				ck_assert_ptr_null(v);
				ck_assert_uint_le(e.offset, len);
				ck_assert(e.msg[0]);
				continue;
			}
			{
				char *out = print_json(v), *again;

				ck_assert_int_eq(json_parse(out, strlen(out),
							    NULL, &w, &e),
						 0);
				again = print_json(w);
				ck_assert_str_eq(again, out);
				free(out);
				free(again);
			}
			json_free(v);
			json_free(w);
		}
	}
	kvmem_rng_seed(&r, 11);
	for (n = 0; n < 20000; n++) {
		struct json_error e = { 0 };
		struct json *v = NULL;

		len = 1 + kvmem_rng_below(&r, sizeof(buf) - 1);
		for (i = 0; i < len; i++)
			buf[i] = subst[kvmem_rng_below(&r, sizeof(subst) - 1)];
		if (!json_parse(buf, len, NULL, &v, &e))
			json_free(v);
		else
			ck_assert_uint_le(e.offset, len);
	}
}
END_TEST

KVMEM_SUITE(json)
{
	Suite *s = suite_create("json");
	TCase *tc = tcase_create("reader");

	tcase_add_test(tc, test_json_values);
	tcase_add_test(tc, test_json_numbers);
	tcase_add_test(tc, test_json_strings);
	tcase_add_test(tc, test_json_invalid);
	tcase_add_test(tc, test_json_truncated);
	tcase_add_test(tc, test_json_limits);
	tcase_add_test(tc, test_json_print);
	tcase_add_test(tc, test_json_mutations);
	suite_add_tcase(s, tc);
	return s;
}

/* ---- running kvmemctl ------------------------------------------------- */

struct ctl_opts {
	const char *env[4]; /* "NAME=value" put into its environment */
	uid_t uid; /* when not 0: run as uid and gid @uid... */
	gid_t group; /* ...with this supplementary group when not 0 */
	int sigint_ms; /* when > 0: SIGINT after that many milliseconds */
};

/*
 * kvmem_check_run() with the extras the access and --watch tests need; its
 * output goes to files opened before privileges are dropped.
 */
static void ctl_run(struct kvmem_run *r, const struct ctl_opts *o,
		    const char *const *args)
{
	const char *tool = kvmem_check_tool("kvmemctl");
	const char *tmp = getenv("TMPDIR");
	char dir[256], out[300], err[300];
	const char *argv[32];
	int argc = 0, status, i;
	FILE *f;
	pid_t pid;

	ck_assert_msg(!access(tool, X_OK), "%s not built: %s", tool,
		      strerror(errno));
	argv[argc++] = tool;
	while ((argv[argc] = *args++)) {
		argc++;
		ck_assert_int_lt(argc, 31);
	}
	snprintf(dir, sizeof(dir), "%s/kvmemctl-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(out, sizeof(out), "%s/out", dir);
	snprintf(err, sizeof(err), "%s/err", dir);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid) {
		int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int fi = open("/dev/null", O_RDONLY);

		if (fo < 0 || fe < 0 || fi < 0 || dup2(fi, 0) < 0 ||
		    dup2(fo, 1) < 0 || dup2(fe, 2) < 0)
			_exit(126);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (i = 0; o && i < 4 && o->env[i]; i++)
			putenv((char *)o->env[i]);
		if (o && o->uid) {
			gid_t g = o->group;

			if (setgroups(o->group ? 1 : 0, &g) ||
			    setgid((gid_t)o->uid) || setuid(o->uid))
				_exit(126);
		}
		execv(tool, (char *const *)argv);
		_exit(127);
	}
	if (o && o->sigint_ms > 0) {
		usleep((useconds_t)o->sigint_ms * 1000);
		kill(pid, SIGINT);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	r->status = WIFEXITED(status) ? WEXITSTATUS(status)
				      : 128 + WTERMSIG(status);
	ck_assert_msg(r->status != 126 && r->status != 127,
		      "could not start %s (status %d)", tool, r->status);
	for (i = 0; i < 2; i++) {
		char **dst = i ? &r->err : &r->out;
		size_t len = 0, cap = 4096;

		f = fopen(i ? err : out, "r");
		ck_assert_ptr_nonnull(f);
		*dst = kvmem_check_xmalloc(cap);
		for (;;) {
			len += fread(*dst + len, 1, cap - len - 1, f);
			if (len < cap - 1)
				break;
			cap *= 2;
			*dst = realloc(*dst, cap);
			ck_assert_ptr_nonnull(*dst);
		}
		(*dst)[len] = 0;
		fclose(f);
	}
	unlink(out);
	unlink(err);
	rmdir(dir);
}

#define CTL(r, o, ...) ctl_run(r, o, (const char *const[]){ __VA_ARGS__, NULL })

/* @out with every run of spaces made one, for matching table rows. */
static char *squeeze(const char *out)
{
	char *s = kvmem_check_xmalloc(strlen(out) + 1), *o = s;

	for (; *out; out++)
		if (*out != ' ' || o == s || o[-1] != ' ')
			*o++ = *out;
	*o = 0;
	return s;
}

#define EXPECT_HAS(text, needle)                                             \
	ck_assert_msg(strstr((text), (needle)), "no \"%s\" in:\n%s", needle, \
		      text)

/* The output holds @line (spaces squeezed) as a whole line. */
static void expect_line(const struct kvmem_run *r, const char *line)
{
	char *s = squeeze(r->out), *want;
	size_t n = strlen(line);
	const char *p;

	want = kvmem_check_xmalloc(n + 3);
	snprintf(want, n + 3, "\n%s\n", line);
	p = strstr(s, want + 1);
	ck_assert_msg(p && (p == s || p[-1] == '\n') && p[n] == '\n',
		      "no line \"%s\" in:\n%s", line, r->out);
	free(want);
	free(s);
}

static void expect_status(const struct kvmem_run *r, int status)
{
	ck_assert_msg(r->status == status,
		      "exit %d, expected %d\nstdout:\n%s\nstderr:\n%s",
		      r->status, status, r->out, r->err);
}

/* ---- a fake admin server ---------------------------------------------- */

/*
 * Replies written from the specification. A request the table does not
 * hold gets kvmemd's answer to an unknown request.
 */
struct fake_reply {
	const char *req; /* exact; or ending in '*': a prefix */
	const char *reply; /* sent as it is, then a hang-up unless it ends
			    * in "\n"; NULL: hang up instead */
};

struct fake {
	pid_t pid;
	char dir[64], sock[108], log[108];
};

static const struct fake_reply *fake_find(const struct fake_reply *t, size_t n,
					  const char *req)
{
	size_t i, len;

	for (i = 0; i < n; i++) {
		len = strlen(t[i].req);
		if (!strcmp(t[i].req, req) ||
		    (len && t[i].req[len - 1] == '*' &&
		     !strncmp(t[i].req, req, len - 1)))
			return &t[i];
	}
	return NULL;
}

/* The server's loop (in a child: no Check calls). */
static void fake_serve(int lfd, const char *log, const struct fake_reply *t,
		       size_t n, size_t chunk)
{
	static const char unknown[] =
		"{\"error\":\"unknown request\",\"errno\":-22}\n";
	char req[2048];
	ssize_t got;
	int fd, lf;

	for (;;) {
		fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			_exit(1);
		while ((got = recv(fd, req, sizeof(req) - 1, 0)) > 0) {
			const struct fake_reply *r;
			const char *text;
			size_t len, off, k;

			req[got] = 0;
			lf = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
			if (lf < 0 || write(lf, req, (size_t)got) != got ||
			    write(lf, "|", 1) != 1)
				_exit(1);
			close(lf);
			r = fake_find(t, n, req);
			if (r && !r->reply)
				break;
			text = r ? r->reply : unknown;
			len = strlen(text);
			for (off = 0; off < len; off += k) {
				k = len - off < chunk ? len - off : chunk;
				if (send(fd, text + off, k, MSG_NOSIGNAL) < 0)
					break;
			}
			/* An unfinished reply is followed by a hang-up. */
			if (!len || text[len - 1] != '\n')
				break;
		}
		close(fd);
	}
}

/* Serve @t in datagrams of @chunk bytes at most. */
static void fake_start(struct fake *f, const struct fake_reply *t, size_t n,
		       size_t chunk)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *tmp = getenv("TMPDIR");
	int lfd;

	memset(f, 0, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "%s/kvfake.XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(f->dir));
	snprintf(f->sock, sizeof(f->sock), "%s/a.sock", f->dir);
	snprintf(f->log, sizeof(f->log), "%s/log", f->dir);
	strcpy(sa.sun_path, f->sock);
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(lfd, 0);
	ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(lfd, 8), 0);
	fflush(NULL);
	f->pid = fork();
	ck_assert_int_ge(f->pid, 0);
	if (!f->pid) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		fake_serve(lfd, f->log, t, n, chunk);
	}
	close(lfd);
}

/* The requests it got so far, each followed by '|'. */
static char *fake_log(const struct fake *f)
{
	char *buf = kvmem_check_xmalloc(65536);
	FILE *lf = fopen(f->log, "r");
	size_t n = 0;

	if (lf) {
		n = fread(buf, 1, 65535, lf);
		fclose(lf);
	}
	buf[n] = 0;
	return buf;
}

static void fake_stop(struct fake *f)
{
	kill(f->pid, SIGKILL);
	waitpid(f->pid, NULL, 0);
	unlink(f->sock);
	unlink(f->log);
	rmdir(f->dir);
}

/* ---- replies as the specification writes them ------------------------ */

#define R_VERSION "{\"version\":\"0.4.0\",\"abi\":1,\"admin\":1}\n"
#define R_STATUS                                                      \
	"{\"pid\":4242,\"version\":\"0.4.0\",\"uptime_s\":3723.5,"    \
	"\"sessions\":2,\"pool_bytes\":1073741824,"                   \
	"\"pool_used_bytes\":268435456,\"attached\":5,\"refused\":1," \
	"\"detached\":3,\"dropped\":0,\"evicted\":4,"                 \
	"\"accept_errors\":2,\"ops\":123456,\"kept_sessions\":1,"     \
	"\"restart\":{\"taken_back\":3,\"after_crash\":2,"            \
	"\"refused\":1,\"prefix_blocks_taken_back\":5,"               \
	"\"prefix_blocks_refused\":1,\"store_blocks_taken_back\":4,"  \
	"\"store_blocks_refused\":2},"                                \
	"\"gpu_pool\":{\"device\":"                                   \
	"\"GPU-8c3b1f2a-0d4e-4f6a-9b1c-2d3e4f5a6b7c\","               \
	"\"name\":\"NVIDIA H100 80GB HBM3\",\"bytes\":68719476736,"   \
	"\"used_bytes\":34359738368,\"held_bytes\":8589934592,"       \
	"\"pinned_bytes\":3145728,\"unpinned_sessions\":1,"           \
	"\"promoted_pages\":40,\"demoted_pages\":24,"                 \
	"\"moved_bytes\":5242880,\"move_errors\":1,"                  \
	"\"changed_pages\":2,\"checked_in_place\":70,"                \
	"\"checked_in_copies\":3},"                                   \
	"\"scrub\":{\"enabled\":true,\"state\":\"patrol\"}}\n"
#define R_STATS                                                           \
	"{\"uptime_s\":3723.5,\"daemon\":{\"sessions\":2,\"attached\":5," \
	"\"refused\":1,\"detached\":3,\"dropped\":0,\"evicted\":4,"       \
	"\"accept_errors\":2,\"ops\":123456},"                            \
	"\"pools\":[{\"pool\":\"host\",\"bytes\":1073741824,"             \
	"\"reserved_bytes\":268435456,\"open_bytes\":1048576,"            \
	"\"sealed_bytes\":16777216,\"free_bytes\":805306368,"             \
	"\"degraded_pages\":1},{\"pool\":\"gpu\",\"device\":"             \
	"\"GPU-6b766d65-6d20-6661-6b65-204750552030\","                   \
	"\"bytes\":67108864,\"reserved_bytes\":8388608,"                  \
	"\"held_bytes\":2097152,\"open_bytes\":0,"                        \
	"\"sealed_bytes\":2097152,\"free_bytes\":58720256,"               \
	"\"promoted_pages\":40,\"demoted_pages\":24,"                     \
	"\"moved_bytes\":5242880,\"move_errors\":1,"                      \
	"\"changed_pages\":2,\"checked_in_place\":70,"                    \
	"\"checked_in_copies\":3,\"degraded_pages\":0}],"                 \
	"\"scrub\":{\"passes\":12,"                                       \
	"\"bytes_total\":201326592,\"pages_total\":49152,\"ce\":3,"       \
	"\"ue\":1},\"seconds_since_reset\":600.25}\n"
#define SESSION(id, pid, fmt, codec)                                         \
	"{\"id\":" id ",\"pid\":" pid ",\"uid\":0,\"arena_bytes\":67108864," \
	"\"used_bytes\":1048576,\"slots_open\":2,\"slots_sealed\":8,"        \
	"\"seqs\":3,\"seqs_acquired\":1,\"ops\":500,\"op_errors\":0,"        \
	"\"ce\":2,\"ue\":0,\"degraded_pages\":0,\"cold_pages\":6,"           \
	"\"cold_bytes\":196608,\"offloads\":9,\"reloads\":3,"                \
	"\"heap_bytes\":4096,\"heap_max_bytes\":8454144,"                    \
	"\"format\":\"" fmt "\","                                            \
	"\"codec\":\"" codec "\",\"rotation\":\"none\","                     \
	"\"archive\":\"int4+golay24\","                                      \
	"\"archived\":4,\"archive_refused\":0,"                              \
	"\"tokens_per_page\":32,\"layers\":2,"                               \
	"\"kv_heads\":2,\"head_dim\":64}"
#define R_SESSIONS                                                        \
	"{\"sessions\":[" SESSION("1", "100", "int4", "h84") "," SESSION( \
		"2", "200", "int8", "secded72") "]}\n"
#define R_SEQS                                                   \
	"{\"seqs\":[{\"session\":1,\"seq\":0,\"acquired\":true," \
	"\"pages\":8,\"tokens\":128,\"degraded_pages\":0,"       \
	"\"cold_pages\":0},{\"session\":1,\"seq\":1,"            \
	"\"acquired\":false,\"pages\":2,\"tokens\":40,"          \
	"\"degraded_pages\":1,\"cold_pages\":2}]}\n"
#define PASS_LAST                                                        \
	"{\"kind\":\"patrol\",\"target\":\"pool\","                      \
	"\"started\":1700000000.25,\"duration_s\":65.5,"                 \
	"\"bytes\":16777216,\"pages\":4096,\"ce\":3,\"ue\":1,\"crc\":0," \
	"\"degraded_pages\":1,\"restored_pages\":0,\"padding\":0,"       \
	"\"prefix_pages\":0,\"prefix_dropped\":0}"
#define R_SCRUB                                                            \
	"{\"enabled\":true,\"enable_background\":1,"                       \
	"\"rate_bytes_per_s\":16777216,\"cycle_s\":0,"                     \
	"\"current_cycle_duration\":1.0,\"verify_on_seal\":true,"          \
	"\"state\":\"idle\",\"current\":null,\"last_pass\":" PASS_LAST "," \
	"\"passes\":12,\"bytes_total\":201326592,"                         \
	"\"effective_rate_bytes_per_s\":67108864,"                         \
	"\"estimate_exposure_s\":66.25,\"estimate\":[{"                    \
	"\"codec\":\"h84\",\"t\":1,\"n\":8,\"words\":1048576,\"ce\":3,"    \
	"\"lambda_per_bit_hour\":1.25e-6,\"p_ue_word\":4.1e-11,"           \
	"\"expected_ue_per_cycle\":4.3e-5}],\"adapt\":{"                   \
	"\"target_ue_per_day\":0.001,\"rate_max_bytes_per_s\":268435456,"  \
	"\"level\":2,\"max_level\":4,\"from\":1,\"base_cycle_s\":4.0,"     \
	"\"ue_per_day\":0.0004,\"short_of_target\":false,"                 \
	"\"archive_escalations\":0,"                                       \
	"\"steps_up\":2,\"steps_down\":0,\"steps\":[{"                     \
	"\"time\":1700000000.25,\"from\":1,\"to\":2,"                      \
	"\"ue_per_day\":0.0016,\"cycle_s\":1.0}]}}\n"
#define R_PASS                                                             \
	"{\"kind\":\"ondemand\",\"target\":\"session 1\","                 \
	"\"started\":1700000100.5,\"duration_s\":0.5,\"bytes\":8388608,"   \
	"\"pages\":2048,\"ce\":1,\"ue\":0,\"crc\":0,\"degraded_pages\":0," \
	"\"restored_pages\":0,\"padding\":0,\"prefix_pages\":0,"           \
	"\"prefix_dropped\":0}\n"
#define R_PASS_POOL                                                        \
	"{\"kind\":\"ondemand\",\"target\":\"pool\","                      \
	"\"started\":1700000100.5,\"duration_s\":0.5,\"bytes\":8388608,"   \
	"\"pages\":2048,\"ce\":1,\"ue\":0,\"crc\":0,\"degraded_pages\":0," \
	"\"restored_pages\":0,\"padding\":0,\"prefix_pages\":16,"          \
	"\"prefix_dropped\":1}\n"
#define R_EVENTS                                                             \
	"{\"events\":[{\"time\":1700000000.5,\"uid\":1000,\"session\":1,"    \
	"\"seq\":2,"                                                         \
	"\"layer\":1,\"token_start\":32,\"token_end\":64,\"pool\":\"host\"," \
	"\"tier\":\"warm\",\"codec\":\"h84\",\"region\":\"payload\","        \
	"\"words\":2,\"kind\":\"uncorrectable\",\"restored\":false,"         \
	"\"source\":\"patrol\"}],\"lost\":3}\n"
#define R_ERRORS                                                  \
	"{\"since\":1700000000.0,\"seconds_since_reset\":600.25," \
	"\"counters\":[{\"pool\":\"host\",\"tier\":\"warm\","     \
	"\"codec\":\"h84\",\"ce\":3,\"ue\":1,\"ce_total\":15,"    \
	"\"ue_total\":2},{\"pool\":\"host\",\"tier\":\"hot\","    \
	"\"codec\":\"golay24\",\"ce\":0,\"ue\":0,\"ce_total\":0," \
	"\"ue_total\":0}]}\n"
#define R_INJECT                                                       \
	"{\"pages\":10,\"words\":40960,\"bits\":45,"                   \
	"\"by_flips\":[40916,43,1,0,0,0,0,0],\"codecs\":[{"            \
	"\"codec\":\"h84\",\"words\":40000,\"bits\":44,"               \
	"\"by_flips\":[39957,42,1,0,0,0,0,0]},{\"codec\":\"golay24\"," \
	"\"words\":960,\"bits\":1,\"by_flips\":[959,1,0,0,0,0,0,0]}]}\n"
#define TIER_HEAD_B(offload, stale, budget)                                \
	"{\"policy\":{\"offload\":" offload ",\"low_watermark\":10,"       \
	"\"high_watermark\":20,\"stale_tokens\":" stale ","                \
	"\"archive_tokens\":" stale ",\"archive_heat\":0.25,"              \
	"\"bits_budget\":" budget ","                                      \
	"\"archive_format\":\"int4\",\"archive_codec\":\"golay24\","       \
	"\"archive_rate\":67108864},"                                      \
	"\"tiers\":{\"hot\":{\"pages\":4,\"bytes\":131072},"               \
	"\"warm\":{\"pages\":12,\"bytes\":393216},"                        \
	"\"archive\":{\"pages\":2,\"bytes\":65536},\"cold\":{\"pages\":6," \
	"\"bytes\":196608}},\"offloads\":9,\"offload_bytes\":294912,"      \
	"\"reloads\":3,\"reload_bytes\":98304,\"reload_degraded\":1,"      \
	"\"reload_lost\":1,"                                               \
	"\"write_errors\":2,\"read_errors\":1,\"nospace\":5,\"waits\":7,"  \
	"\"archived\":5,\"archived_bytes\":163840,\"archive_refused\":1,"  \
	"\"store\":"
/* The store of tier, @unit its "unit_bytes" member or "" for none. */
#define TIER_STORE(unit)                                                      \
	"{\"path\":\"/var/lib/kvmem/store\",\"engine\":\"io_uring\","         \
	"\"uuid\":\"5bc44f14-daf4-412e-b07f-d3eaee54e66d\",\"generation\":3," \
	"\"size\":16777216," unit "\"units\":4095,\"used_units\":48,"         \
	"\"queue_depth\":32,\"io_bytes\":1048576,\"inflight\":2,"             \
	"\"reads\":3,\"writes\":11,\"read_bytes\":98304,"                     \
	"\"write_bytes\":360448,\"read_errors\":1,\"write_errors\":2,"        \
	"\"enospc\":1,\"short\":0},"                                          \
	"\"store_prefixes\":{\"blocks\":3,\"bytes\":135168,"                  \
	"\"retain_bytes\":4194304,\"retain_seconds\":604800,"                 \
	"\"held_extents\":1,\"index_generation\":12,\"indexed\":3,"           \
	"\"written\":5,\"written_bytes\":225280,\"write_errors\":0,"          \
	"\"skipped\":1,\"nospace\":0,\"reclaimed\":1,\"expired\":0,"          \
	"\"dropped\":1,\"taken\":2,\"refused\":1,\"repaired\":1,"             \
	"\"fetched\":4,\"indexes\":9,\"index_errors\":0}}\n"
#define TIER_HEAD(offload, stale) TIER_HEAD_B(offload, stale, "0")
#define R_TIER TIER_HEAD("true", "1024") TIER_STORE("")
#define R_TIER_NOSTORE TIER_HEAD("false", "0") "null,\"store_prefixes\":null}\n"
#define R_OFFLOAD                                                           \
	"{\"pages\":123,\"bytes\":9017753,\"errors\":0,\"seconds\":0.0121," \
	"\"gbps\":0.7452}\n"
#define R_OFFLOAD_ERRORS                                               \
	"{\"pages\":10,\"bytes\":327680,\"errors\":2,\"seconds\":0.5," \
	"\"gbps\":0.00065536}\n"
#define R_POLICY                                                                 \
	"{\"policy\":{\"daemon.log_level\":\"info\",\"daemon.allow_gids\":\"\"," \
	"\"scrub.rate\":16777216,\"scrub.cycle\":0,"                             \
	"\"scrub.verify_on_seal\":true,\"scrub.allow_inject\":false}}\n"

/* The shared tier's counters, @state its state and what goes with it. */
#define REMOTE_OF(state)                                                   \
	"{\"remote\":{\"configured\":true,\"backend\":\"redis\","          \
	"\"seeds\":\"10.0.0.1:7000,10.0.0.2:7000\"," state                 \
	",\"nodes\":\"10.0.0.1:7000 slots=8192 connected=1\\n"             \
	"10.0.0.2:7000 slots=8192 connected=0\\n\","                       \
	"\"tenants_with_credentials\":2,\"queued_bytes\":1048576,"         \
	"\"jobs\":3,\"push\":{\"pushed\":40,\"present\":7,\"dropped\":2,"  \
	"\"unchained\":1,\"errors\":4,\"bytes\":2621440},"                 \
	"\"fetch\":{\"requests\":12,\"errors\":5,\"blocks_asked\":96,"     \
	"\"hits\":60,\"misses\":30,\"unanswered\":6,\"kept\":57,"          \
	"\"keep_refused\":1,\"bytes\":3932160,\"repaired\":3,"             \
	"\"written_back\":2,\"deleted\":8,\"words_corrected\":11,"         \
	"\"words_uncorrectable\":9,\"refused\":{\"header\":1,"             \
	"\"tenant\":2,\"shape\":0,\"chain\":1,\"payload\":3,\"page\":0}}," \
	"\"client\":{\"requests\":500,\"redirects\":13,\"retries\":21,"    \
	"\"timeouts\":6,\"errors\":17,\"refreshes\":4,"                    \
	"\"bytes_out\":3145728,\"bytes_in\":4194304,\"masters\":2,"        \
	"\"connected\":1}}}\n"
#define R_REMOTE REMOTE_OF("\"state\":\"ok\"")
#define R_REMOTE_DOWN                                                      \
	REMOTE_OF("\"state\":\"unreachable\",\"reason\":\"10.0.0.1:7000: " \
		  "Connection refused\",\"since\":1700000000")
#define R_REMOTE_OFF "{\"remote\":{\"configured\":false}}\n"

static const struct fake_reply spec_replies[] = {
	{ "version", R_VERSION },
	{ "status", R_STATUS },
	{ "stats", R_STATS },
	{ "sessions", R_SESSIONS },
	{ "seqs", R_SEQS },
	{ "seqs 1", R_SEQS },
	{ "seqs 9", "{\"error\":\"no session 9\",\"errno\":-2}\n" },
	{ "scrub status", R_SCRUB },
	{ "scrub start", R_SCRUB },
	{ "scrub stop", R_SCRUB },
	{ "scrub rate 16M", R_SCRUB },
	{ "scrub cycle 86400", R_SCRUB },
	{ "scrub target 0.001", R_SCRUB },
	{ "scrub now", R_PASS_POOL },
	{ "scrub now pool", R_PASS_POOL },
	{ "scrub now session 1", R_PASS },
	{ "scrub now seq 1 2", R_PASS },
	{ "scrub now seq 1 3",
	  "{\"error\":\"an on-demand scrub is already running\","
	  "\"errno\":-16}\n" },
	{ "events", R_EVENTS },
	{ "events since*", R_EVENTS },
	{ "errors", R_ERRORS },
	{ "reset-counters", "{\"ok\":true}\n" },
	{ "inject seq 1 2 ber 0.001 seed 7 all", R_INJECT },
	{ "inject seq 1 2 ber 0.001 seed 7 channel line:128", R_INJECT },
	{ "inject pool ber 1e-05 seed 18446744073709551615", R_INJECT },
	{ "inject session 1 ber 0.5 seed 1",
	  "{\"error\":\"injection is off (scrub.allow_inject)\","
	  "\"errno\":-1}\n" },
	{ "tier", R_TIER },
	{ "offload", R_OFFLOAD },
	{ "offload pool", R_OFFLOAD },
	{ "offload session 1", R_OFFLOAD },
	{ "offload seq 1 2", R_OFFLOAD_ERRORS },
	{ "offload seq 1 3",
	  "{\"error\":\"an offload is running\",\"errno\":-16}\n" },
	{ "remote", R_REMOTE },
	{ "policy show", R_POLICY },
	{ "policy set scrub.rate=1M", R_POLICY },
	{ "policy set x=1", "{\"error\":\"x: no such key\",\"errno\":-22}\n" },
};

#define NSPEC (sizeof(spec_replies) / sizeof(spec_replies[0]))

/* ---- checkers --------------------------------------------------------- */

static int name_ok(const char *s, size_t n, int colon)
{
	size_t i;

	if (!n)
		return 0;
	for (i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      c == '_' || (colon && c == ':') ||
		      (i && c >= '0' && c <= '9')))
			return 0;
	}
	return 1;
}

/*
 * Prometheus text exposition format 0.0.4, strictly: every sample line is
 * name{label="value",...} value, its family declared by a # TYPE line
 * before it (and only once), names and label names well formed, label
 * values with only the escapes \\ \" \n, values that parse as floats.
 * Returns the number of samples.
 */
static int check_prometheus(const char *text)
{
	char typed[256][96], family[96] = "";
	int ntyped = 0, samples = 0, i, lineno = 0;
	const char *line, *end;

	for (line = text; *line; line = end + 1) {
		const char *p, *q;
		char *fend;
		size_t n;

		lineno++;
		end = strchr(line, '\n');
		ck_assert_msg(end, "line %d does not end in a newline", lineno);
		if (!strncmp(line, "# TYPE ", 7)) {
			p = line + 7;
			q = strchr(p, ' ');
			ck_assert_msg(q && q < end, "line %d: %.*s", lineno,
				      (int)(end - line), line);
			n = (size_t)(q - p);
			ck_assert_msg(name_ok(p, n, 1) && n < sizeof(family),
				      "line %d: bad name", lineno);
			memcpy(family, p, n);
			family[n] = 0;
			for (i = 0; i < ntyped; i++)
				ck_assert_msg(strcmp(typed[i], family),
					      "line %d: %s typed twice", lineno,
					      family);
			ck_assert_int_lt(ntyped, 256);
			strcpy(typed[ntyped++], family);
			q++;
			ck_assert_msg(
				(end - q == 7 && !strncmp(q, "counter", 7)) ||
					(end - q == 5 &&
					 !strncmp(q, "gauge", 5)) ||
					(end - q == 8 &&
					 !strncmp(q, "untyped", 7)),
				"line %d: type %.*s", lineno, (int)(end - q),
				q);
			continue;
		}
		if (!strncmp(line, "# HELP ", 7)) {
			p = line + 7;
			q = strchr(p, ' ');
			ck_assert_msg(q && q < end &&
					      name_ok(p, (size_t)(q - p), 1),
				      "line %d: %.*s", lineno,
				      (int)(end - line), line);
			continue;
		}
		ck_assert_msg(line[0] != '#' || line[1] == ' ', "line %d: %.*s",
			      lineno, (int)(end - line), line);
		if (line[0] == '#')
			continue;
		/* A sample. */
		for (p = line; p < end && *p != '{' && *p != ' '; p++)
			;
		n = (size_t)(p - line);
		ck_assert_msg(name_ok(line, n, 1), "line %d: bad name %.*s",
			      lineno, (int)n, line);
		ck_assert_msg(strlen(family) == n && !strncmp(line, family, n),
			      "line %d: %.*s has no # TYPE before it", lineno,
			      (int)n, line);
		if (*p == '{') {
			p++;
			while (*p != '}') {
				q = p;
				while (p < end && *p != '=')
					p++;
				ck_assert_msg(name_ok(q, (size_t)(p - q), 0),
					      "line %d: label name", lineno);
				ck_assert_msg(p[0] == '=' && p[1] == '"',
					      "line %d: label", lineno);
				for (p += 2; p < end && *p != '"'; p++) {
					if (*p != '\\')
						continue;
					p++;
					ck_assert_msg(*p == '\\' || *p == '"' ||
							      *p == 'n',
						      "line %d: escape \\%c",
						      lineno, *p);
				}
				ck_assert_msg(p < end, "line %d: open label",
					      lineno);
				p++;
				if (*p == ',')
					p++;
				ck_assert_msg(p < end, "line %d: labels",
					      lineno);
			}
			p++;
		}
		ck_assert_msg(*p == ' ', "line %d: no value", lineno);
		p++;
		if (strncmp(p, "NaN", 3) && strncmp(p, "+Inf", 4) &&
		    strncmp(p, "-Inf", 4)) {
			strtod(p, &fend);
			ck_assert_msg(fend > p && (fend == end || *fend == ' '),
				      "line %d: value %.*s", lineno,
				      (int)(end - p), p);
		}
		samples++;
	}
	return samples;
}

/* The value of the sample written exactly @series, or fail. */
static double prom_value(const char *text, const char *series)
{
	size_t n = strlen(series);
	const char *p;

	for (p = text; (p = strstr(p, series)); p++)
		if ((p == text || p[-1] == '\n') && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	ck_abort_msg("no sample %s in:\n%s", series, text);
	return 0;
}

/*
 * @v against @schema, itself JSON: an object lists keys that must be
 * present (others may be too), an array holds the schema of every element,
 * {"?": S} is S or null, and a string names a type: "u" an integer >= 0,
 * "n" a number, "b" a boolean, "s" a string, "s:a|b" one of those strings.
 */
static void check_schema(const struct json *v, const struct json *schema,
			 const char *where)
{
	char sub[256];
	const char *t;
	size_t i;

	if (schema->type == JSON_OBJECT && schema->u.obj.n == 1 &&
	    !strcmp(schema->u.obj.m[0].key, "?")) {
		if (v->type != JSON_NULL)
			check_schema(v, &schema->u.obj.m[0].v, where);
		return;
	}
	switch (schema->type) {
	case JSON_OBJECT:
		ck_assert_msg(v->type == JSON_OBJECT, "%s: %s, not an object",
			      where, json_type_name(v->type));
		for (i = 0; i < schema->u.obj.n; i++) {
			const struct json *m =
				json_get(v, schema->u.obj.m[i].key);

			snprintf(sub, sizeof(sub), "%s.%s", where,
				 schema->u.obj.m[i].key);
			ck_assert_msg(m, "%s is missing", sub);
			check_schema(m, &schema->u.obj.m[i].v, sub);
		}
		break;
	case JSON_ARRAY:
		ck_assert_msg(v->type == JSON_ARRAY, "%s: %s, not an array",
			      where, json_type_name(v->type));
		for (i = 0; i < v->u.arr.n; i++) {
			snprintf(sub, sizeof(sub), "%s[%zu]", where, i);
			check_schema(&v->u.arr.v[i], &schema->u.arr.v[0], sub);
		}
		break;
	case JSON_STRING:
		t = schema->u.str.s;
		if (!strcmp(t, "u")) {
			uint64_t x;

			ck_assert_msg(!json_u64(v, &x), "%s: not an integer",
				      where);
		} else if (!strcmp(t, "n")) {
			ck_assert_msg(v->type == JSON_NUMBER,
				      "%s: not a number", where);
		} else if (!strcmp(t, "b")) {
			ck_assert_msg(v->type == JSON_BOOL, "%s: not a boolean",
				      where);
		} else {
			const char *s = json_str(v), *opts = t + 2;
			size_t n;

			ck_assert_msg(s, "%s: not a string", where);
			if (t[1] != ':')
				break;
			n = strlen(s);
			for (;;) {
				const char *bar = strchr(opts, '|');
				size_t k = bar ? (size_t)(bar - opts)
					       : strlen(opts);

				if (k == n && !strncmp(opts, s, n))
					break;
				ck_assert_msg(bar,
					      "%s: \"%s\" is not one of %s",
					      where, s, t + 2);
				opts = bar + 1;
			}
		}
		break;
	default:
		ck_abort_msg("bad schema at %s", where);
	}
}

/* Event kinds: kvmemd also reports "mismatch", a header that decoded
 * cleanly to another page's and was restored. */
#define S_POOL "\"s:host|gpu|nvme\""
#define S_TIER "\"s:hot|warm|archive|cold\""
#define S_CODEC "\"s:h74|h84|golay24|secded72\""
#define S_PASS                                                     \
	"{\"kind\":\"s:patrol|ondemand|seal\",\"target\":\"s\","   \
	"\"started\":\"n\",\"duration_s\":\"n\",\"bytes\":\"u\","  \
	"\"pages\":\"u\",\"ce\":\"u\",\"ue\":\"u\",\"crc\":\"u\"," \
	"\"degraded_pages\":\"u\",\"restored_pages\":\"u\","       \
	"\"padding\":\"u\",\"prefix_pages\":\"u\",\"prefix_dropped\":\"u\"}"
#define S_PAGES_BYTES "{\"pages\":\"u\",\"bytes\":\"u\"}"
#define S_STORE                                                             \
	"{\"path\":\"s\",\"engine\":\"s:io_uring|threads\",\"uuid\":\"s\"," \
	"\"generation\":\"u\",\"size\":\"u\",\"units\":\"u\","              \
	"\"used_units\":\"u\",\"queue_depth\":\"u\",\"io_bytes\":\"u\","    \
	"\"inflight\":\"u\",\"reads\":\"u\",\"writes\":\"u\","              \
	"\"read_bytes\":\"u\",\"write_bytes\":\"u\",\"read_errors\":\"u\"," \
	"\"write_errors\":\"u\",\"enospc\":\"u\",\"short\":\"u\"}"
#define S_STORE_PREFIXES                                                          \
	"{\"blocks\":\"u\",\"bytes\":\"u\",\"retain_bytes\":\"u\","               \
	"\"retain_seconds\":\"u\",\"held_extents\":\"u\","                        \
	"\"index_generation\":\"u\",\"indexed\":\"u\",\"written\":\"u\","         \
	"\"written_bytes\":\"u\",\"write_errors\":\"u\",\"skipped\":\"u\","       \
	"\"nospace\":\"u\",\"reclaimed\":\"u\",\"expired\":\"u\","                \
	"\"dropped\":\"u\",\"taken\":\"u\",\"refused\":\"u\",\"repaired\":\"u\"," \
	"\"fetched\":\"u\",\"indexes\":\"u\",\"index_errors\":\"u\"}"

static const struct {
	const char *cmd, *schema;
} schemas[] = {
	{ "version", "{\"version\":\"s\",\"abi\":\"u\",\"admin\":\"u\"}" },
	{ "status",
	  "{\"pid\":\"u\",\"version\":\"s\",\"uptime_s\":\"n\","
	  "\"sessions\":\"u\",\"pool_bytes\":\"u\",\"pool_used_bytes\":\"u\","
	  "\"attached\":\"u\",\"refused\":\"u\",\"detached\":\"u\","
	  "\"dropped\":\"u\",\"evicted\":\"u\",\"accept_errors\":\"u\","
	  "\"ops\":\"u\",\"kept_sessions\":\"u\","
	  "\"restart\":{\"taken_back\":\"u\",\"after_crash\":\"u\","
	  "\"refused\":\"u\",\"prefix_blocks_taken_back\":\"u\","
	  "\"prefix_blocks_refused\":\"u\",\"store_blocks_taken_back\":\"u\","
	  "\"store_blocks_refused\":\"u\"},\"scrub\":{\"enabled\":\"b\","
	  "\"state\":\"s:idle|patrol|ondemand\"},"
	  "\"gpu_pool\":{\"device\":{\"?\":\"s\"}}}" },
	{ "stats",
	  "{\"uptime_s\":\"n\",\"daemon\":{\"sessions\":\"u\","
	  "\"attached\":\"u\",\"refused\":\"u\",\"detached\":\"u\","
	  "\"dropped\":\"u\",\"evicted\":\"u\",\"accept_errors\":\"u\","
	  "\"ops\":\"u\"},\"pools\":[{\"pool\":" S_POOL
	  ",\"bytes\":\"u\",\"reserved_bytes\":\"u\",\"open_bytes\":\"u\","
	  "\"sealed_bytes\":\"u\",\"free_bytes\":\"u\","
	  "\"degraded_pages\":\"u\"}],\"scrub\":{\"passes\":\"u\","
	  "\"bytes_total\":\"u\",\"pages_total\":\"u\",\"ce\":\"u\","
	  "\"ue\":\"u\"},\"seconds_since_reset\":\"n\"}" },
	{ "sessions",
	  "{\"sessions\":[{\"id\":\"u\",\"pid\":\"u\",\"uid\":\"u\","
	  "\"arena_bytes\":\"u\",\"used_bytes\":\"u\",\"slots_open\":\"u\","
	  "\"slots_sealed\":\"u\",\"seqs\":\"u\",\"seqs_acquired\":\"u\","
	  "\"ops\":\"u\",\"op_errors\":\"u\",\"ce\":\"u\",\"ue\":\"u\","
	  "\"degraded_pages\":\"u\",\"cold_pages\":\"u\","
	  "\"cold_bytes\":\"u\",\"offloads\":\"u\",\"reloads\":\"u\","
	  "\"heap_bytes\":\"u\",\"heap_max_bytes\":\"u\","
	  "\"format\":\"s:fp16|int8|int4|int2|fp8|lm2|lm3|lm4\","
	  "\"codec\":" S_CODEC ",\"rotation\":\"s:none|hadamard\","
	  "\"archive\":\"s\",\"archived\":\"u\","
	  "\"archive_refused\":\"u\",\"tokens_per_page\":\"u\","
	  "\"layers\":\"u\",\"kv_heads\":\"u\",\"head_dim\":\"u\"}]}" },
	{ "seqs",
	  "{\"seqs\":[{\"session\":\"u\",\"seq\":\"u\",\"acquired\":\"b\","
	  "\"pages\":\"u\",\"tokens\":\"u\",\"degraded_pages\":\"u\","
	  "\"cold_pages\":\"u\"}]}" },
	{ "scrub",
	  "{\"enabled\":\"b\",\"enable_background\":\"u\","
	  "\"rate_bytes_per_s\":\"u\",\"cycle_s\":\"u\","
	  "\"current_cycle_duration\":\"n\",\"verify_on_seal\":\"b\","
	  "\"state\":\"s:idle|patrol|ondemand\",\"current\":{\"?\":" S_PASS
	  "},\"last_pass\":{\"?\":" S_PASS "},\"passes\":\"u\","
	  "\"bytes_total\":\"u\",\"effective_rate_bytes_per_s\":\"n\","
	  "\"estimate_exposure_s\":\"n\",\"estimate\":[{\"codec\":" S_CODEC
	  ",\"t\":\"u\",\"n\":\"u\",\"words\":\"u\",\"ce\":\"u\","
	  "\"lambda_per_bit_hour\":\"n\",\"p_ue_word\":\"n\","
	  "\"expected_ue_per_cycle\":\"n\"}],\"adapt\":{"
	  "\"target_ue_per_day\":\"n\",\"rate_max_bytes_per_s\":\"u\","
	  "\"level\":\"u\",\"max_level\":\"u\",\"from\":\"u\","
	  "\"base_cycle_s\":\"n\",\"ue_per_day\":\"n\","
	  "\"short_of_target\":\"b\",\"archive_escalations\":\"u\","
	  "\"steps_up\":\"u\","
	  "\"steps_down\":\"u\",\"steps\":[{\"time\":\"n\",\"from\":\"u\","
	  "\"to\":\"u\",\"ue_per_day\":\"n\",\"cycle_s\":\"n\"}]}}" },
	{ "pass", S_PASS },
	{ "events",
	  "{\"events\":[{\"time\":\"n\",\"uid\":\"u\",\"session\":\"u\","
	  "\"seq\":\"u\","
	  "\"layer\":\"u\",\"token_start\":\"u\",\"token_end\":\"u\","
	  "\"pool\":" S_POOL ",\"tier\":" S_TIER ",\"codec\":" S_CODEC ","
	  "\"region\":\"s:header|scales|payload\",\"words\":\"u\","
	  "\"kind\":\"s:uncorrectable|crc|mismatch|lost\",\"restored\":\"b\","
	  "\"source\":\"s:patrol|ondemand|seal|reload\"}],\"lost\":\"u\"}" },
	{ "errors",
	  "{\"since\":\"n\",\"seconds_since_reset\":\"n\",\"counters\":[{"
	  "\"pool\":" S_POOL ",\"tier\":" S_TIER ",\"codec\":" S_CODEC ","
	  "\"ce\":\"u\",\"ue\":\"u\",\"ce_total\":\"u\","
	  "\"ue_total\":\"u\"}]}" },
	{ "reset-counters", "{\"ok\":\"b\"}" },
	{ "inject", "{\"pages\":\"u\",\"words\":\"u\",\"bits\":\"u\","
		    "\"by_flips\":[\"u\"],\"codecs\":[{\"codec\":" S_CODEC ","
		    "\"words\":\"u\",\"bits\":\"u\",\"by_flips\":[\"u\"]}]}" },
	{ "policy",
	  "{\"policy\":{\"scrub.rate\":\"u\",\"scrub.cycle\":\"u\","
	  "\"scrub.verify_on_seal\":\"b\",\"scrub.allow_inject\":\"b\"}}" },
	{ "tier",
	  "{\"policy\":{\"offload\":\"b\",\"low_watermark\":\"u\","
	  "\"high_watermark\":\"u\",\"stale_tokens\":\"u\","
	  "\"archive_tokens\":\"u\",\"archive_heat\":\"n\","
	  "\"bits_budget\":\"n\","
	  "\"archive_format\":\"s:same|int8|int4|int2|fp8|lm4|lm3|lm2\","
	  "\"archive_codec\":" S_CODEC ",\"archive_rate\":\"u\"},"
	  "\"tiers\":{\"hot\":" S_PAGES_BYTES ",\"warm\":" S_PAGES_BYTES
	  ",\"archive\":" S_PAGES_BYTES ",\"cold\":" S_PAGES_BYTES "},"
	  "\"offloads\":\"u\","
	  "\"offload_bytes\":\"u\",\"reloads\":\"u\",\"reload_bytes\":\"u\","
	  "\"reload_degraded\":\"u\",\"reload_lost\":\"u\","
	  "\"write_errors\":\"u\",\"read_errors\":\"u\",\"nospace\":\"u\",\"waits\":\"u\","
	  "\"archived\":\"u\",\"archived_bytes\":\"u\","
	  "\"archive_refused\":\"u\","
	  "\"store\":{\"?\":" S_STORE "},"
	  "\"store_prefixes\":{\"?\":" S_STORE_PREFIXES "}}" },
	{ "offload", "{\"pages\":\"u\",\"bytes\":\"u\",\"errors\":\"u\","
		     "\"seconds\":\"n\",\"gbps\":\"n\"}" },
};

/* --json output: one line of JSON that fits the schema named @name. */
static struct json *expect_schema(const char *out, const char *name)
{
	const struct json *sch = NULL;
	struct json *v, *schema;
	size_t i;

	ck_assert_msg(*out && strchr(out, '\n') == out + strlen(out) - 1,
		      "not one line: %s", out);
	v = parse_ok(out);
	for (i = 0; i < sizeof(schemas) / sizeof(schemas[0]); i++)
		if (!strcmp(schemas[i].cmd, name))
			break;
	ck_assert_uint_lt(i, sizeof(schemas) / sizeof(schemas[0]));
	schema = parse_ok(schemas[i].schema);
	sch = schema;
	check_schema(v, sch, name);
	json_free(schema);
	return v;
}

/* ---- kvmemctl against the specification ------------------------------- */

static const struct ctl_opts utc = { .env = { "TZ=UTC" } };

/* One run against the fake: exit 0 and what it printed. */
#define FAKE_OK(r, f, ...)                                         \
	do {                                                       \
		CTL(r, &utc, "-a", (f)->sock, __VA_ARGS__);        \
		expect_status(r, 0);                               \
		ck_assert_msg(!*(r)->err, "stderr: %s", (r)->err); \
	} while (0)

START_TEST(test_spec_tables)
{
	static const struct {
		const char *args[6];
		const char *lines[5];
	} cases[] = {
		{ { "status" },
		  { "kvmemd 0.4.0, pid 4242, up 1h 02m",
		    "sessions 2 (5 attached, 1 refused, 3 detached, 0 "
		    "dropped since start)",
		    "kept 1 of them wait for their clients after a restart",
		    "host pool 256.0 MiB of 1.0 GiB used (25.0%)",
		    "scrub enabled, patrol" } },
		{ { "status" },
		  { "connections 4 closed waiting for their hello, 2 refused "
		    "for want of descriptors",
		    "at start 3 kept sessions taken back (2 after a crash), 1 "
		    "refused; 5 published prefix blocks taken back, 1 refused; "
		    "4 read back from the store, 2 refused (the log says why)",
		    "gpu pool 32.0 GiB of 64.0 GiB used (8.0 GiB held by "
		    "processes of ended sessions) on NVIDIA H100 80GB HBM3, "
		    "GPU-8c3b1f2a-0d4e-4f6a-9b1c-2d3e4f5a6b7c",
		    "gpu tier 40 pages moved to the GPU, 24 back (5.0 MiB in "
		    "all); 1 copies failed, 2 pages came back changed; 70 "
		    "pages checked there in place, 3 in copies; 3.0 MiB of "
		    "host memory pinned, 1 sessions unpinned" } },
		{ { "stats" },
		  { "uptime 1h 02m (counters reset 10m 00s ago)",
		    "scrub 12 passes, 192.0 MiB in 49152 pages; CE 3, UE 1 "
		    "words since reset",
		    "POOL SIZE RESERVED OPEN SEALED FREE DEGRADED PAGES",
		    "host 1.0 GiB 256.0 MiB 1.0 MiB 16.0 MiB 768.0 MiB 1" } },
		{ { "sessions" },
		  { "ID PID UID ARENA USED COLD OPEN SEALED SEQS ACQ OPS OP "
		    "ERRS CE UE DEGR FORMAT CODEC LAYERS KV HEADS DIM TOK/PG",
		    " 1 100 0 64.0 MiB 1.0 MiB 192.0 KiB 2 8 3 1 500 0 2 0 0 "
		    "int4 h84 2 2 64 32",
		    " 2 200 0 64.0 MiB 1.0 MiB 192.0 KiB 2 8 3 1 500 0 2 0 0 "
		    "int8 secded72 2 2 64 32" } },
		{ { "seqs", "1" },
		  { "SESSION SEQ ACQUIRED PAGES COLD TOKENS DEGRADED PAGES",
		    " 1 0 yes 8 0 128 0", " 1 1 no 2 2 40 1" } },
		{ { "tier" },
		  { "policy offload on, watermarks 10% / 20% free, stale "
		    "after 1024 tokens",
		    "archive released pages 1024 tokens old in int4 + golay24, "
		    "heat at most 0.25, 64.0 MiB/s",
		    "TIER PAGES BYTES", "hot 4 128.0 KiB" } },
		{ { "tier" }, { "archive 2 64.0 KiB", "cold 6 192.0 KiB" } },
		{ { "tier" },
		  { "offloads 9 pages, 288.0 KiB",
		    "reloads 3 pages, 96.0 KiB, 1 degraded, 1 lost (values "
		    "erased)",
		    "waits 7 ops waited for pages to move",
		    "archived 5 pages, 160.0 KiB, 1 refused (not as sealed)" } },
		{ { "tier" }, { "errors 2 writes, 1 reads, 5 out of space" } },
		{ { "tier" },
		  { "store /var/lib/kvmem/store",
		    "size 16.0 MiB, 4095 units of 4.0 KiB",
		    "used 192.0 KiB in 48 units (1.2%)",
		    "I/O errors 1 reads, 2 writes; 1 ENOSPC, 0 short" } },
		{ { "tier" },
		  { "engine io_uring",
		    "uuid 5bc44f14-daf4-412e-b07f-d3eaee54e66d", "generation 3",
		    "queue depth 32" } },
		{ { "tier" },
		  { "I/O size 1.0 MiB", "in flight 2", "reads 3, 96.0 KiB",
		    "writes 11, 352.0 KiB" } },
		{ { "tier" },
		  { "prefix blocks 3 on the store, 132.0 KiB of 4.0 MiB",
		    "retained 604800 s unattached",
		    "written 5, 220.0 KiB; 1 not (busy), 0 not (store full), 0 "
		    "errors",
		    "read back 2 at start, 4 fetched; 1 refused, 1 corrected" } },
		{ { "tier" },
		  { "gone 1 for room, 0 expired, 1 dropped",
		    "index generation 12, 9 written, 0 failed, 1 extents held "
		    "for the next" } },
		{ { "offload", "pool" },
		  { "offloaded 123 pages, 8.6 MiB in 0.012 s (0.75 GB/s), 0 "
		    "errors" } },
		{ { "scrub", "status" },
		  { "patrol enabled (enable_background 1), idle now",
		    "rate 16.0 MiB/s", "cycle target 0 (use the rate)",
		    "last pass patrol pool at 2023-11-14 22:13:20, 1m 05s: "
		    "16.0 MiB in 4096 pages; CE 3, UE 1, CRC 0, 1 degraded, "
		    "0 restored" } },
		{ { "scrub", "status" },
		  { "current pass none", "passes 12, 192.0 MiB scrubbed",
		    "h84 1 8 1048576 3 1.25e-06 4.1e-11 4.3e-05",
		    "full pass 1.0 s at the effective rate, 64.0 MiB/s" } },
		{ { "scrub", "status" },
		  { "adaptive target 0.001 UE/day: 4x the rate (at most 16x), "
		    "0.0004 UE/day predicted",
		    "step 2023-11-14 22:13:20: 2x -> 4x at 0.0016 UE/day, a "
		    "1.0 s cycle" } },
		{ { "scrub", "now", "session", "1" },
		  { "pass ondemand session 1", "started 2023-11-14 22:15:00",
		    "duration 500 ms",
		    "scrubbed 8.0 MiB in 2048 pages (16.0 MiB/s)" } },
		{ { "scrub", "now" },
		  { "pass ondemand pool",
		    "prefixes 16 pages of published blocks, 1 blocks dropped "
		    "(no longer verified)" } },
		{ { "events" },
		  { "TIME UID SESSION SEQ LAYER TOKENS POOL TIER CODEC "
		    "REGION WORDS KIND RESTORED SOURCE",
		    "2023-11-14 22:13:20 1000 1 2 1 32-64 host warm h84 "
		    "payload 2 uncorrectable no patrol",
		    "3 older events fell out of kvmemd's in-memory log" } },
		{ { "errors" },
		  { "POOL TIER CODEC CE UE CE TOTAL UE TOTAL",
		    "host warm h84 3 1 15 2", "host hot golay24 0 0 0 0",
		    "CE/UE: corrected/uncorrectable words since 2023-11-14 "
		    "22:13:20 (10m 00s ago); the totals persist across "
		    "restarts." } },
		{ { "reset-counters" },
		  { "volatile counters reset; the persistent totals are "
		    "kept" } },
		{ { "inject", "seq", "1", "2", "--ber", "1e-3" },
		  { "flipped 45 bits in 40960 words of 10 pages",
		    "CODEC WORDS BITS 0 FLIPS 1 FLIPS 2 FLIPS 3 FLIPS 4 FLIPS "
		    "5 FLIPS 6 FLIPS 7+ FLIPS",
		    "h84 40000 44 39957 42 1 0 0 0 0 0",
		    "all 40960 45 40916 43 1 0 0 0 0 0" } },
		{ { "remote" },
		  { "cluster redis at 10.0.0.1:7000,10.0.0.2:7000", "state ok",
		    "masters 2 known, 1 connections open",
		    "queue 1.0 MiB of records on their way, 3 jobs; 2 "
		    "tenants with credentials",
		    "pushes 40 blocks pushed (2.5 MiB), 7 there already, 2 "
		    "dropped (queue full), 1 unchained, 4 failed" } },
		{ { "remote" },
		  { "fetches 12 (5 failed) for 96 blocks: 60 hits, 30 misses, "
		    "6 unanswered",
		    "kept 57 blocks (3.8 MiB read), 1 refused room here",
		    "repaired 3 records (2 written back), 8 deleted; 11 words "
		    "corrected, 9 uncorrectable",
		    "refused header 1, tenant 2, shape 0, chain 1, payload 3, "
		    "page 0" } },
		{ { "remote" },
		  { "client 500 requests, 13 redirects, 21 retries, 6 "
		    "timeouts, 17 errors, 4 slot map loads",
		    "bytes 3.0 MiB out, 4.0 MiB in", "MASTER SLOTS CONNECTED",
		    "10.0.0.1:7000 8192 yes", "10.0.0.2:7000 8192 no" } },
		{ { "policy", "show" },
		  { "KEY VALUE", "daemon.log_level info", "scrub.rate 16777216",
		    "scrub.verify_on_seal yes" } },
		{ { "policy", "set", "scrub.rate=1M" },
		  { "scrub.allow_inject no", "scrub.cycle 0",
		    "daemon.allow_gids \"\"" } },
	};
	struct kvmem_run r;
	struct fake f;
	size_t i, k;

	fake_start(&f, spec_replies, NSPEC, 32768);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *const *a = cases[i].args;

		if (!strcmp(a[0], "inject"))
			FAKE_OK(&r, &f, a[0], a[1], a[2], a[3], a[4], a[5],
				"--seed", "7", "--all");
		else if (!a[1])
			FAKE_OK(&r, &f, a[0]);
		else if (!a[2])
			FAKE_OK(&r, &f, a[0], a[1]);
		else if (!a[3])
			FAKE_OK(&r, &f, a[0], a[1], a[2]);
		else
			FAKE_OK(&r, &f, a[0], a[1], a[2], a[3]);
		for (k = 0; k < 5 && cases[i].lines[k]; k++)
			expect_line(&r, cases[i].lines[k]);
		kvmem_check_run_free(&r);
	}
	fake_stop(&f);
}
END_TEST

/*
 * The shared tier unreachable, not configured, and a kvmemd older than
 * it: remote says which, metrics has kvmem_remote_up 0, no kvmem_remote_
 * family, and all the rest.
 */
START_TEST(test_spec_remote_states)
{
	static const struct fake_reply down[] = {
		{ "stats", R_STATS },	     { "errors", R_ERRORS },
		{ "scrub status", R_SCRUB }, { "sessions", R_SESSIONS },
		{ "tier", R_TIER },	     { "remote", R_REMOTE_DOWN },
	};
	static const struct fake_reply off[] = {
		{ "stats", R_STATS },	     { "errors", R_ERRORS },
		{ "scrub status", R_SCRUB }, { "sessions", R_SESSIONS },
		{ "tier", R_TIER },	     { "remote", R_REMOTE_OFF },
	};
	struct kvmem_run r;
	struct fake f;
	int older;

	fake_start(&f, down, sizeof(down) / sizeof(down[0]), 32768);
	FAKE_OK(&r, &f, "remote");
	/* 2023-11-14 22:13:20 UTC, as long ago as it is. */
	EXPECT_HAS(r.out, "state     unreachable since 2023-11-14 22:13:20 (");
	EXPECT_HAS(r.out, " ago): 10.0.0.1:7000: Connection refused\n");
	kvmem_check_run_free(&r);
	FAKE_OK(&r, &f, "metrics");
	ck_assert_int_gt(check_prometheus(r.out), 40);
	ck_assert_double_eq(prom_value(r.out, "kvmem_remote_up"), 0);
	ck_assert_double_eq(
		prom_value(r.out, "kvmem_remote_client_timeouts_total"), 6);
	kvmem_check_run_free(&r);
	fake_stop(&f);

	/* Not configured, then not known: said, and no series at all. */
	for (older = 0; older < 2; older++) {
		fake_start(&f, off, sizeof(off) / sizeof(off[0]) - older,
			   32768);
		CTL(&r, &utc, "-a", f.sock, "remote");
		if (older) {
			expect_status(&r, 1);
			EXPECT_HAS(r.err, "remote: unknown request");
		} else {
			expect_status(&r, 0);
			ck_assert_str_eq(r.out,
					 "no shared tier: set "
					 "remote.seeds in kvmemd.conf\n");
		}
		kvmem_check_run_free(&r);
		FAKE_OK(&r, &f, "metrics");
		ck_assert_int_gt(check_prometheus(r.out), 40);
		ck_assert_ptr_null(strstr(r.out, "kvmem_remote_"));
		EXPECT_HAS(r.out, "# TYPE kvmem_tier_pages gauge\n");
		kvmem_check_run_free(&r);
		fake_stop(&f);
	}
}
END_TEST

/* The words on the wire for each way of writing a command. */
START_TEST(test_spec_requests)
{
	static const struct {
		const char *args[10];
		const char *req;
	} cases[] = {
		{ { "seqs" }, "seqs" },
		{ { "seqs", "1" }, "seqs 1" },
		{ { "scrub", "start" }, "scrub start" },
		{ { "scrub", "stop" }, "scrub stop" },
		{ { "scrub", "rate", "16m" }, "scrub rate 16M" },
		{ { "scrub", "cycle", "1d" }, "scrub cycle 86400" },
		{ { "scrub", "target", "0.001" }, "scrub target 0.001" },
		{ { "scrub", "now" }, "scrub now" },
		{ { "scrub", "now", "pool" }, "scrub now pool" },
		{ { "scrub", "now", "seq", "1", "2" }, "scrub now seq 1 2" },
		{ { "events", "--limit", "5", "--since", "1700000000.9" },
		  "events since 1700000000 limit 5" },
		{ { "--json", "inject", "--all", "seq", "1", "--seed", "7", "2",
		    "--ber", "0.001" },
		  "inject seq 1 2 ber 0.001 seed 7 all" },
		{ { "inject", "pool", "--ber", "1e-5", "--seed",
		    "18446744073709551615" },
		  "inject pool ber 1e-05 seed 18446744073709551615" },
		{ { "inject", "seq", "1", "2", "--channel", "line:128", "--ber",
		    "0.001", "--seed", "7" },
		  "inject seq 1 2 ber 0.001 seed 7 channel line:128" },
		{ { "policy", "set", "scrub.rate=1M" },
		  "policy set scrub.rate=1M" },
		{ { "tier" }, "tier" },
		{ { "offload" }, "offload" },
		{ { "offload", "pool" }, "offload pool" },
		{ { "--json", "offload", "session", "1" },
		  "offload session 1" },
		{ { "metrics" },
		  "stats|errors|scrub status|sessions|tier|remote" },
		{ { "remote" }, "remote" },
		{ { "version" }, "version" },
	};
	struct kvmem_run r;
	struct fake f;
	char *log, want[128];
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *const *a = cases[i].args;
		const char *argv[13] = { "-a" };
		int n = 1, k;

		fake_start(&f, spec_replies, NSPEC, 32768);
		argv[n++] = f.sock;
		for (k = 0; k < 10 && a[k]; k++)
			argv[n++] = a[k];
		argv[n] = NULL;
		ctl_run(&r, &utc, argv);
		expect_status(&r, 0);
		log = fake_log(&f);
		snprintf(want, sizeof(want), "%s|", cases[i].req);
		ck_assert_str_eq(log, want);
		free(log);
		kvmem_check_run_free(&r);
		fake_stop(&f);
	}
}
END_TEST

/* --since with an age: the time it means, in whole Unix seconds. */
START_TEST(test_spec_since_age)
{
	static const struct {
		const char *arg;
		long long age;
	} cases[] = {
		{ "10m", 600 },	  { "2h ago", 7200 }, { "1d", 86400 },
		{ "1.5h", 5400 }, { "30s ago", 30 },  { "1w", 604800 },
	};
	struct kvmem_run r;
	struct fake f;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		long long before = (long long)time(NULL), got, after;
		char *log;

		fake_start(&f, spec_replies, NSPEC, 32768);
		CTL(&r, NULL, "-a", f.sock, "events", "--since", cases[i].arg);
		after = (long long)time(NULL);
		expect_status(&r, 0);
		log = fake_log(&f);
		ck_assert_int_eq(sscanf(log, "events since %lld|", &got), 1);
		ck_assert_int_ge(got, before - cases[i].age - 1);
		ck_assert_int_le(got, after - cases[i].age);
		free(log);
		kvmem_check_run_free(&r);
		fake_stop(&f);
	}
}
END_TEST

/* --json: the reply itself, compact, for every command that has one. */
START_TEST(test_spec_json)
{
	static const struct {
		const char *args[4];
		const char *reply, *schema;
	} cases[] = {
		{ { "status" }, R_STATUS, "status" },
		{ { "stats" }, R_STATS, "stats" },
		{ { "sessions" }, R_SESSIONS, "sessions" },
		{ { "seqs" }, R_SEQS, "seqs" },
		{ { "scrub", "status" }, R_SCRUB, "scrub" },
		{ { "scrub", "rate", "16M" }, R_SCRUB, "scrub" },
		{ { "scrub", "now", "pool" }, R_PASS_POOL, "pass" },
		{ { "events" }, R_EVENTS, "events" },
		{ { "errors" }, R_ERRORS, "errors" },
		{ { "reset-counters" }, "{\"ok\":true}", "reset-counters" },
		{ { "policy", "show" }, R_POLICY, "policy" },
		{ { "tier" }, R_TIER, "tier" },
		{ { "offload", "pool" }, R_OFFLOAD, "offload" },
	};
	struct kvmem_run r;
	struct json *v, *want;
	struct fake f;
	char *text;
	size_t i;

	fake_start(&f, spec_replies, NSPEC, 32768);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *const *a = cases[i].args;

		if (!a[1])
			FAKE_OK(&r, &f, "--json", a[0]);
		else if (!a[2])
			FAKE_OK(&r, &f, a[0], a[1], "--json");
		else
			FAKE_OK(&r, &f, a[0], "--json", a[1], a[2]);
		v = expect_schema(r.out, cases[i].schema);
		want = parse_ok(cases[i].reply);
		text = print_json(want);
		ck_assert_uint_eq(strlen(r.out), strlen(text) + 1);
		ck_assert_mem_eq(r.out, text, strlen(text));
		free(text);
		json_free(v);
		json_free(want);
		kvmem_check_run_free(&r);
	}
	FAKE_OK(&r, &f, "inject", "--json", "seq", "1", "2", "--ber", "0.001",
		"--seed", "7", "--all");
	json_free(expect_schema(r.out, "inject"));
	kvmem_check_run_free(&r);
	/* version adds kvmemctl's own to the daemon's. */
	FAKE_OK(&r, &f, "version", "--json");
	v = expect_schema(r.out, "version");
	ck_assert_str_eq(json_str(json_get(v, "version")), "0.4.0");
	ck_assert_ptr_nonnull(json_str(json_get(v, "kvmemctl")));
	json_free(v);
	kvmem_check_run_free(&r);
	fake_stop(&f);
}
END_TEST

START_TEST(test_spec_metrics)
{
	static const struct {
		const char *series;
		double value;
	} samples[] = {
		{ "kvmem_ce_total{pool=\"host\",tier=\"warm\",codec=\"h84\"}",
		  15 },
		{ "kvmem_ue_total{pool=\"host\",tier=\"warm\",codec=\"h84\"}",
		  2 },
		{ "kvmem_ce{pool=\"host\",tier=\"warm\",codec=\"h84\"}", 3 },
		{ "kvmem_ue{pool=\"host\",tier=\"hot\",codec=\"golay24\"}", 0 },
		{ "kvmem_pool_bytes{pool=\"host\",state=\"free\"}", 805306368 },
		{ "kvmem_pool_bytes{pool=\"host\",state=\"open\"}", 1048576 },
		{ "kvmem_pool_bytes{pool=\"host\",state=\"sealed\"}",
		  16777216 },
		{ "kvmem_pool_bytes{pool=\"host\",state=\"reserved\"}",
		  268435456 },
		{ "kvmem_pool_size_bytes{pool=\"host\"}", 1073741824 },
		{ "kvmem_pool_size_bytes{pool=\"gpu\",device=\"GPU-6b766d65-"
		  "6d20-6661-6b65-204750552030\"}",
		  67108864 },
		{ "kvmem_pool_bytes{pool=\"gpu\",state=\"reserved\",device=\""
		  "GPU-6b766d65-6d20-6661-6b65-204750552030\"}",
		  8388608 },
		{ "kvmem_pool_bytes{pool=\"gpu\",state=\"sealed\",device=\""
		  "GPU-6b766d65-6d20-6661-6b65-204750552030\"}",
		  2097152 },
		{ "kvmem_gpu_tier_moves_total{direction=\"to_gpu\",pool=\"gpu\","
		  "device=\"GPU-6b766d65-6d20-6661-6b65-204750552030\"}",
		  40 },
		{ "kvmem_gpu_tier_moves_total{direction=\"to_host\",pool=\"gpu\","
		  "device=\"GPU-6b766d65-6d20-6661-6b65-204750552030\"}",
		  24 },
		{ "kvmem_gpu_tier_moved_bytes_total{pool=\"gpu\",device=\""
		  "GPU-6b766d65-6d20-6661-6b65-204750552030\"}",
		  5242880 },
		{ "kvmem_gpu_tier_move_errors_total{pool=\"gpu\",device=\""
		  "GPU-6b766d65-6d20-6661-6b65-204750552030\"}",
		  1 },
		{ "kvmem_gpu_tier_changed_pages_total{pool=\"gpu\",device=\""
		  "GPU-6b766d65-6d20-6661-6b65-204750552030\"}",
		  2 },
		{ "kvmem_gpu_tier_checked_pages_total{where=\"in_place\","
		  "pool=\"gpu\",device=\"GPU-6b766d65-6d20-6661-6b65-"
		  "204750552030\"}",
		  70 },
		{ "kvmem_gpu_tier_checked_pages_total{where=\"in_copies\","
		  "pool=\"gpu\",device=\"GPU-6b766d65-6d20-6661-6b65-"
		  "204750552030\"}",
		  3 },
		{ "kvmem_degraded_pages{pool=\"host\"}", 1 },
		{ "kvmem_sessions", 2 },
		{ "kvmem_ops_total", 123456 },
		{ "kvmem_uptime_seconds", 3723.5 },
		{ "kvmem_seconds_since_reset", 600.25 },
		{ "kvmem_sessions_refused_total", 1 },
		{ "kvmem_scrub_bytes_total", 201326592 },
		{ "kvmem_scrub_passes_total", 12 },
		{ "kvmem_scrub_pages_total", 49152 },
		{ "kvmem_scrub_enabled", 1 },
		{ "kvmem_scrub_state{state=\"idle\"}", 1 },
		{ "kvmem_scrub_state{state=\"patrol\"}", 0 },
		{ "kvmem_scrub_rate_bytes_per_second", 16777216 },
		{ "kvmem_scrub_last_pass_duration_seconds", 65.5 },
		{ "kvmem_scrub_expected_ue_per_cycle{codec=\"h84\"}", 4.3e-5 },
		{ "kvmem_scrub_target_ue_per_day", 0.001 },
		{ "kvmem_scrub_adapt_level", 2 },
		{ "kvmem_scrub_ue_per_day", 0.0004 },
		{ "kvmem_scrub_adapt_short_of_target", 0 },
		{ "kvmem_scrub_adapt_steps_total{direction=\"up\"}", 2 },
		{ "kvmem_scrub_adapt_steps_total{direction=\"down\"}", 0 },
		{ "kvmem_session_info{session=\"2\",pid=\"200\",uid=\"0\","
		  "format=\"int8\",codec=\"secded72\"}",
		  1 },
		{ "kvmem_session_used_bytes{session=\"1\"}", 1048576 },
		{ "kvmem_session_ops_total{session=\"2\"}", 500 },
		{ "kvmem_session_cold_bytes{session=\"1\"}", 196608 },
		{ "kvmem_session_offloads_total{session=\"2\"}", 9 },
		{ "kvmem_session_reloads_total{session=\"1\"}", 3 },
		{ "kvmem_tier_pages{tier=\"hot\"}", 4 },
		{ "kvmem_tier_pages{tier=\"cold\"}", 6 },
		{ "kvmem_tier_pages{tier=\"archive\"}", 2 },
		{ "kvmem_archived_total", 5 },
		{ "kvmem_archive_refused_total", 1 },
		{ "kvmem_tier_bytes{tier=\"warm\"}", 393216 },
		{ "kvmem_tier_bytes{tier=\"cold\"}", 196608 },
		{ "kvmem_offloads_total", 9 },
		{ "kvmem_offload_bytes_total", 294912 },
		{ "kvmem_reloads_total", 3 },
		{ "kvmem_reload_bytes_total", 98304 },
		{ "kvmem_reload_degraded_total", 1 },
		{ "kvmem_reload_lost_total", 1 },
		{ "kvmem_connections_evicted_total", 4 },
		{ "kvmem_accept_errors_total", 2 },
		{ "kvmem_store_size_bytes", 16777216 },
		{ "kvmem_store_used_bytes", 48 * 4096 },
		{ "kvmem_store_errors_total{op=\"read\"}", 1 },
		{ "kvmem_store_errors_total{op=\"write\"}", 2 },
		{ "kvmem_store_prefix_blocks", 3 },
		{ "kvmem_store_prefix_bytes", 135168 },
		{ "kvmem_store_prefix_written_total", 5 },
		{ "kvmem_store_prefix_read_total", 2 },
		{ "kvmem_store_prefix_fetched_total", 4 },
		{ "kvmem_store_prefix_refused_total", 1 },
		{ "kvmem_remote_up", 1 },
		{ "kvmem_remote_push_total{result=\"pushed\"}", 40 },
		{ "kvmem_remote_push_total{result=\"present\"}", 7 },
		{ "kvmem_remote_push_total{result=\"dropped\"}", 2 },
		{ "kvmem_remote_push_total{result=\"unchained\"}", 1 },
		{ "kvmem_remote_push_total{result=\"error\"}", 4 },
		{ "kvmem_remote_fetch_blocks_total{result=\"hit\"}", 60 },
		{ "kvmem_remote_fetch_blocks_total{result=\"miss\"}", 30 },
		{ "kvmem_remote_fetch_blocks_total{result=\"unanswered\"}", 6 },
		{ "kvmem_remote_kept_total", 57 },
		{ "kvmem_remote_keep_refused_total", 1 },
		{ "kvmem_remote_fetches_total", 12 },
		{ "kvmem_remote_fetch_errors_total", 5 },
		{ "kvmem_remote_refused_total{reason=\"tenant\"}", 2 },
		{ "kvmem_remote_refused_total{reason=\"payload\"}", 3 },
		{ "kvmem_remote_refused_total{reason=\"page\"}", 0 },
		{ "kvmem_remote_repaired_total", 3 },
		{ "kvmem_remote_written_back_total", 2 },
		{ "kvmem_remote_deleted_total", 8 },
		{ "kvmem_remote_words_corrected_total", 11 },
		{ "kvmem_remote_words_uncorrectable_total", 9 },
		{ "kvmem_remote_bytes_total{direction=\"out\"}", 3145728 },
		{ "kvmem_remote_bytes_total{direction=\"in\"}", 4194304 },
		{ "kvmem_remote_pushed_bytes_total", 2621440 },
		{ "kvmem_remote_fetched_bytes_total", 3932160 },
		{ "kvmem_remote_client_requests_total", 500 },
		{ "kvmem_remote_client_redirects_total", 13 },
		{ "kvmem_remote_client_retries_total", 21 },
		{ "kvmem_remote_client_timeouts_total", 6 },
		{ "kvmem_remote_client_errors_total", 17 },
		{ "kvmem_remote_masters", 2 },
		{ "kvmem_remote_connections", 1 },
		{ "kvmem_remote_queued_bytes", 1048576 },
	};
	struct kvmem_run r;
	struct fake f;
	size_t i;

	fake_start(&f, spec_replies, NSPEC, 32768);
	FAKE_OK(&r, &f, "metrics");
	ck_assert_int_gt(check_prometheus(r.out), 40);
	for (i = 0; i < sizeof(samples) / sizeof(samples[0]); i++)
		ck_assert_msg(prom_value(r.out, samples[i].series) ==
				      samples[i].value,
			      "%s is not %g", samples[i].series,
			      samples[i].value);
	EXPECT_HAS(r.out, "# TYPE kvmem_ce_total counter\n");
	EXPECT_HAS(r.out, "# TYPE kvmem_ce gauge\n");
	EXPECT_HAS(r.out, "# HELP kvmem_ue_total ");
	EXPECT_HAS(r.out, "# TYPE kvmem_offloads_total counter\n");
	EXPECT_HAS(r.out, "# TYPE kvmem_tier_pages gauge\n");
	kvmem_check_run_free(&r);
	/* --json has no meaning here. */
	CTL(&r, NULL, "-a", f.sock, "metrics", "--json");
	expect_status(&r, 2);
	kvmem_check_run_free(&r);
	fake_stop(&f);
}
END_TEST

/* metrics --http with @request on stdin, against @f (NULL: no daemon). */
static void http_run(struct kvmem_run *r, const struct fake *f,
		     const char *request)
{
	KVMEM_RUN(r, "kvmemctl", request, "-a",
		  f ? f->sock : "/nonexistent/kvmemd-admin.sock", "metrics",
		  "--http");
}

/* The body of an HTTP response, after checking its status line and
 * that Content-Length says its length. */
static const char *http_body(const char *out, const char *status)
{
	const char *body = strstr(out, "\r\n\r\n");
	const char *cl = strstr(out, "\r\nContent-Length: ");

	ck_assert_msg(!strncmp(out, status, strlen(status)), "%s", out);
	ck_assert_msg(body && cl && cl < body, "%s", out);
	ck_assert_uint_eq(strtoull(cl + 18, NULL, 10), strlen(body + 4));
	return body + 4;
}

/*
 * metrics --http: one request on stdin, as an inetd-style service
 * (Accept=yes) hands it a connection. GET /metrics gets exactly what metrics prints; HEAD
 * its headers; anything else a status and no metrics. Hostile requests
 * first: no blank line, no version, a long head, NUL bytes.
 */
START_TEST(test_metrics_http)
{
	static const struct {
		const char *request, *status;
		int exit;
	} bad[] = {
		{ "GET /metrics HTTP/1.1\r\n", "HTTP/1.1 400 ", 2 },
		{ "GET /metrics\r\n\r\n", "HTTP/1.1 400 ", 2 },
		{ "\r\n\r\n", "HTTP/1.1 400 ", 2 },
		{ "GET /metrics SPDY/3\r\n\r\n", "HTTP/1.1 400 ", 2 },
		{ "POST /metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 405 ", 2 },
		{ "GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 404 ", 2 },
		{ "GET /metrics/x HTTP/1.0\n\n", "HTTP/1.1 404 ", 2 },
	};
	char *plain, *big;
	struct kvmem_run r;
	struct fake f;
	size_t i;

	fake_start(&f, spec_replies, NSPEC, 32768);
	FAKE_OK(&r, &f, "metrics");
	plain = strdup(r.out);
	kvmem_check_run_free(&r);
	http_run(&r, &f, "GET /metrics?name[]=x HTTP/1.1\r\nHost: h\r\n\r\n");
	expect_status(&r, 0);
	ck_assert_str_eq(http_body(r.out, "HTTP/1.1 200 OK\r\n"), plain);
	EXPECT_HAS(r.out, "\r\nContent-Type: text/plain; version=0.0.4");
	kvmem_check_run_free(&r);
	http_run(&r, &f, "HEAD /metrics HTTP/1.0\n\n");
	expect_status(&r, 0);
	ck_assert_msg(!strcmp(strstr(r.out, "\r\n\r\n"), "\r\n\r\n"), "%s",
		      r.out);
	kvmem_check_run_free(&r);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		http_run(&r, &f, bad[i].request);
		expect_status(&r, bad[i].exit);
		http_body(r.out, bad[i].status);
		ck_assert_msg(!strstr(r.out, "kvmem_"), "%zu: %s", i, r.out);
		kvmem_check_run_free(&r);
	}
	http_run(&r, &f, "POST /metrics HTTP/1.1\r\n\r\n");
	EXPECT_HAS(r.out, "\r\nAllow: GET, HEAD\r\n");
	kvmem_check_run_free(&r);
	/* A head past 8 KiB, and one with a NUL in it. */
	big = kvmem_check_xmalloc(9000);
	memcpy(big, "GET /metrics HTTP/1.1\r\nX: ", 26);
	memset(big + 26, 'a', 9000 - 27);
	big[8999] = 0;
	http_run(&r, &f, big);
	expect_status(&r, 2);
	http_body(r.out, "HTTP/1.1 431 ");
	kvmem_check_run_free(&r);
	free(big);
	fake_stop(&f);
	/* No daemon: 503, and kvmemctl's own exit status. */
	http_run(&r, NULL, "GET /metrics HTTP/1.1\r\n\r\n");
	expect_status(&r, 3);
	http_body(r.out, "HTTP/1.1 503 ");
	EXPECT_HAS(r.err, "is kvmemd running?");
	kvmem_check_run_free(&r);
	free(plain);
}
END_TEST

/* ---- metrics --http serving a listening socket ------------------------ */

/* The most connections the exporter keeps open (kvmemctl(8), metrics). */
#define EXPORTER_CONNS 128

/*
 * kvmemctl metrics --http with a listening TCP socket on loopback as its
 * standard input, as a socket unit with Accept=no hands it over.
 */
struct exporter {
	pid_t pid;
	struct sockaddr_in addr;
	char err[160]; /* its stderr */
};

/* Against @f, with --http-timeout @timeout unless that is NULL. */
static void exporter_start(struct exporter *x, const struct fake *f,
			   const char *timeout)
{
	const char *tool = kvmem_check_tool("kvmemctl");
	socklen_t alen = sizeof(x->addr);
	int lfd;

	memset(x, 0, sizeof(*x));
	snprintf(x->err, sizeof(x->err), "%s/exporter.err", f->dir);
	x->addr.sin_family = AF_INET;
	x->addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(lfd, 0);
	ck_assert_int_eq(bind(lfd, (struct sockaddr *)&x->addr, alen), 0);
	ck_assert_int_eq(getsockname(lfd, (struct sockaddr *)&x->addr, &alen),
			 0);
	/* Room for every connection a test opens before it is accepted. */
	ck_assert_int_eq(listen(lfd, 4096), 0);
	fflush(NULL);
	x->pid = fork();
	ck_assert_int_ge(x->pid, 0);
	if (!x->pid) {
		int fo = open("/dev/null", O_WRONLY);
		int fe = open(x->err, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (fo < 0 || fe < 0 || dup2(lfd, 0) < 0 || dup2(fo, 1) < 0 ||
		    dup2(fe, 2) < 0)
			_exit(126);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		execl(tool, tool, "-a", f->sock, "metrics", "--http",
		      timeout ? "--http-timeout" : NULL, timeout, (char *)NULL);
		_exit(127);
	}
	close(lfd);
}

/* SIGTERM ends it, with exit status 0 (and, under ASan, no leak). */
static void exporter_stop(struct exporter *x)
{
	char *err;
	int status;

	ck_assert_int_eq(kill(x->pid, SIGTERM), 0);
	ck_assert_int_eq(waitpid(x->pid, &status, 0), x->pid);
	err = kvmem_check_read_file(x->err, NULL);
	ck_assert_msg(WIFEXITED(status) && !WEXITSTATUS(status),
		      "exporter: wait status 0x%x, stderr:\n%s", status, err);
	free(err);
	unlink(x->err);
}

/* A connection to @x from @from (0: any address), nothing sent on it. */
static int peer_connect(const struct exporter *x, in_addr_t from)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	if (from) {
		sa.sin_addr.s_addr = from;
		ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)),
				 0);
	}
	ck_assert_msg(!connect(fd, (const struct sockaddr *)&x->addr,
			       sizeof(x->addr)),
		      "connect to the exporter: %s", strerror(errno));
	return fd;
}

/* Has the exporter written to @fd, or closed it? */
static int peer_readable(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1;
}

/*
 * All that @fd receives until the exporter closes it (a reset counts as a
 * close), then closed here; meanwhile the next byte of *@trickle (unless
 * NULL) goes out each second. Fails the test when it is still open after
 * @wait_s seconds without a byte: a bound on "eventually", not a timing.
 */
static char *peer_answer(int fd, int wait_s, const char **trickle)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	size_t len = 0, cap = 8192;
	char *buf = kvmem_check_xmalloc(cap);
	int quiet = 0, ready;
	ssize_t n;

	for (;;) {
		ready = poll(&p, 1, 1000);
		ck_assert_int_ge(ready, 0);
		if (!ready) {
			ck_assert_msg(++quiet < wait_s,
				      "the exporter left a connection open "
				      "for %d s; it sent:\n%.*s",
				      wait_s, (int)len, buf);
			/* A failed send is the close, read next. */
			if (trickle && **trickle &&
			    send(fd, *trickle, 1, MSG_NOSIGNAL) == 1)
				(*trickle)++;
			continue;
		}
		if (cap - len < 4096) {
			cap *= 2;
			buf = realloc(buf, cap);
			ck_assert_ptr_nonnull(buf);
		}
		n = recv(fd, buf + len, cap - len - 1, 0);
		if (n < 0 && errno == ECONNRESET)
			break;
		ck_assert_msg(n >= 0, "recv: %s", strerror(errno));
		if (!n)
			break;
		len += (size_t)n;
	}
	buf[len] = 0;
	close(fd);
	return buf;
}

/* GET /metrics from @x, from @from: the whole answer. */
static char *scrape(const struct exporter *x, in_addr_t from)
{
	static const char req[] = "GET /metrics HTTP/1.1\r\n"
				  "Host: 127.0.0.1\r\n\r\n";
	int fd = peer_connect(x, from);

	ck_assert_int_eq(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL),
			 sizeof(req) - 1);
	return peer_answer(fd, 60, NULL);
}

/* The answer on @fd, once closed, says @status. */
static void expect_closed_with(int fd, const char *status, const char **trickle)
{
	char *out = peer_answer(fd, 60, trickle);

	http_body(out, status);
	free(out);
}

/*
 * Issue 44: 8 idle connections from loopback, as many as
 * MaxConnectionsPerSource= let systemd hand to kvmem-exporter@.service,
 * left a scraper 11 answers out of 40. Now one process serves every
 * connection: with 64 idle ones open (each opened again when the exporter
 * closes it) and one trickling a request that never ends, a byte a round,
 * every scrape gets the whole exposition; and each idle connection and the
 * trickler, still at it, are closed with 408 once their time is up.
 */
START_TEST(test_metrics_http_idle_peers)
{
	enum { IDLE = 64, SCRAPES = 40 };
	int idle[IDLE], loris, i, k;
	char slow[256], *plain, *out;
	const char *trickle = slow;
	struct kvmem_run r;
	struct exporter x;
	struct fake f;

	memset(slow, 'a', sizeof(slow) - 1);
	slow[sizeof(slow) - 1] = 0;
	memcpy(slow, "GET /metrics HTTP/1.1\r\nX-Slow: ", 31);
	fake_start(&f, spec_replies, NSPEC, 32768);
	FAKE_OK(&r, &f, "metrics");
	plain = strdup(r.out);
	kvmem_check_run_free(&r);
	exporter_start(&x, &f, NULL);
	for (k = 0; k < IDLE; k++)
		idle[k] = peer_connect(&x, 0);
	loris = peer_connect(&x, 0);
	for (i = 0; i < SCRAPES; i++) {
		for (k = 0; k < IDLE; k++) {
			if (!peer_readable(idle[k]))
				continue;
			expect_closed_with(idle[k], "HTTP/1.1 408 ", NULL);
			idle[k] = peer_connect(&x, 0);
		}
		if (peer_readable(loris)) {
			expect_closed_with(loris, "HTTP/1.1 408 ", NULL);
			loris = peer_connect(&x, 0);
			trickle = slow;
		}
		/* A failed send is the close, seen next round. */
		if (send(loris, trickle, 1, MSG_NOSIGNAL) == 1)
			trickle++;
		out = scrape(&x, 0);
		ck_assert_str_eq(http_body(out, "HTTP/1.1 200 OK\r\n"), plain);
		EXPECT_HAS(out, "\r\nContent-Type: text/plain; version=0.0.4");
		free(out);
		usleep(500 * 1000);
	}
	for (k = 0; k < IDLE; k++)
		expect_closed_with(idle[k], "HTTP/1.1 408 ", NULL);
	expect_closed_with(loris, "HTTP/1.1 408 ", &trickle);
	exporter_stop(&x);
	fake_stop(&f);
	free(plain);
}
END_TEST

/*
 * Past EXPORTER_CONNS open connections, each new one makes the oldest
 * that has not sent its request go, with 503, of the address that has
 * the most. A client from 127.0.0.2 that connected first outlives the
 * idle ones from 127.0.0.1 opened after it, a scraper from 127.0.0.1 is
 * answered, and the idle ones newer than those that went stay open. A
 * timeout of 600 s: nothing here is closed for its time.
 */
START_TEST(test_metrics_http_full)
{
	enum { IDLE = EXPORTER_CONNS + 8, GONE = IDLE + 2 - EXPORTER_CONNS };
	static const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
	in_addr_t other = inet_addr("127.0.0.2");
	int idle[IDLE], first, k;
	struct kvmem_run r;
	struct exporter x;
	char *plain, *out;
	struct fake f;

	fake_start(&f, spec_replies, NSPEC, 32768);
	FAKE_OK(&r, &f, "metrics");
	plain = strdup(r.out);
	kvmem_check_run_free(&r);
	exporter_start(&x, &f, "600");
	first = peer_connect(&x, other);
	for (k = 0; k < IDLE; k++)
		idle[k] = peer_connect(&x, 0);
	/* 1 + IDLE + this one: GONE too many, all of 127.0.0.1. */
	out = scrape(&x, 0);
	ck_assert_str_eq(http_body(out, "HTTP/1.1 200 OK\r\n"), plain);
	free(out);
	for (k = 0; k < GONE; k++)
		expect_closed_with(idle[k], "HTTP/1.1 503 ", NULL);
	for (k = GONE; k < IDLE; k++) {
		ck_assert_msg(!peer_readable(idle[k]),
			      "idle connection %d of %d went, not only the "
			      "oldest %d",
			      k, IDLE, GONE);
		close(idle[k]);
	}
	ck_assert_int_eq(send(first, req, sizeof(req) - 1, MSG_NOSIGNAL),
			 sizeof(req) - 1);
	out = peer_answer(first, 60, NULL);
	ck_assert_str_eq(http_body(out, "HTTP/1.1 200 OK\r\n"), plain);
	free(out);
	exporter_stop(&x);
	fake_stop(&f);
	free(plain);
}
END_TEST

/* Every kvmem_* name in @text is a family "# TYPE"d in @metrics. */
static int expect_known_series(const char *what, const char *text,
			       const char *metrics)
{
	const char *p = text;
	char name[128], want[160];
	int n = 0;

	while ((p = strstr(p, "kvmem_"))) {
		size_t len = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_");

		ck_assert_uint_lt(len, sizeof(name));
		memcpy(name, p, len);
		name[len] = 0;
		snprintf(want, sizeof(want), "# TYPE %s ", name);
		ck_assert_msg(strstr(metrics, want),
			      "%s uses %s, which kvmemctl metrics does not "
			      "export",
			      what, name);
		p += len;
		n++;
	}
	return n;
}

/*
 * The alert rules and the Grafana dashboard of ops/ ask only for series
 * kvmemctl metrics exports (all of them, store included, from the
 * specification's replies); the dashboard is JSON. With promtool
 * installed, the rules load and the exposition passes its lint.
 */
START_TEST(test_ops_series)
{
	char path[2][PATH_MAX], prom[PATH_MAX], cmd[3 * PATH_MAX];
	char *text[2];
	struct kvmem_run r;
	struct json *v;
	struct fake f;
	int i, n;
	FILE *o;

	snprintf(path[0], sizeof(path[0]),
		 "%s/ops/grafana/kvmem-dashboard.json", kvmem_check_srcdir());
	snprintf(path[1], sizeof(path[1]), "%s/ops/prometheus/kvmem-alerts.yml",
		 kvmem_check_srcdir());
	fake_start(&f, spec_replies, NSPEC, 32768);
	FAKE_OK(&r, &f, "metrics");
	fake_stop(&f);
	for (i = 0; i < 2; i++) {
		text[i] = kvmem_check_read_file(path[i], NULL);
		n = expect_known_series(path[i], text[i], r.out);
		ck_assert_msg(n >= 6, "%s: only %d series", path[i], n);
	}
	v = parse_ok(text[0]);
	ck_assert_ptr_nonnull(json_get(v, "panels"));
	json_free(v);
	if (!kvmem_check_have("promtool")) {
		fprintf(stderr, "SKIP: test_ops_series: no promtool in PATH; "
				"rules and exposition not linted\n");
	} else {
		snprintf(cmd, sizeof(cmd),
			 "promtool check rules '%s' >/dev/null", path[1]);
		ck_assert_msg(!system(cmd), "%s", cmd);
		snprintf(prom, sizeof(prom), "%s/metrics.prom",
			 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
		o = fopen(prom, "w");
		ck_assert_ptr_nonnull(o);
		fputs(r.out, o);
		fclose(o);
		snprintf(cmd, sizeof(cmd),
			 "promtool check metrics < '%s' >/dev/null", prom);
		ck_assert_msg(!system(cmd), "%s", cmd);
		unlink(prom);
	}
	for (i = 0; i < 2; i++)
		free(text[i]);
	kvmem_check_run_free(&r);
}
END_TEST

/* Label values from the daemon are escaped, control characters dropped. */
START_TEST(test_spec_metrics_escapes)
{
	static const struct fake_reply t[] = {
		{ "stats",
		  "{\"uptime_s\":1,\"daemon\":{\"sessions\":0,\"attached\":0,"
		  "\"refused\":0,\"detached\":0,\"dropped\":0,\"evicted\":0,"
		  "\"accept_errors\":0,\"ops\":0},"
		  "\"pools\":[{\"pool\":\"a\\\"b\\\\c\\nd\",\"bytes\":1,"
		  "\"reserved_bytes\":0,\"open_bytes\":0,\"sealed_bytes\":0,"
		  "\"free_bytes\":1,\"degraded_pages\":0}],\"scrub\":{"
		  "\"passes\":0,\"bytes_total\":0,\"pages_total\":0,\"ce\":0,"
		  "\"ue\":0},\"seconds_since_reset\":1}\n" },
		{ "errors",
		  "{\"since\":0,\"seconds_since_reset\":1,\"counters\":[]}\n" },
		{ "scrub status", R_SCRUB },
		{ "sessions", "{\"sessions\":[]}\n" },
		{ "tier", R_TIER_NOSTORE },
	};
	struct kvmem_run r;
	struct fake f;

	fake_start(&f, t, sizeof(t) / sizeof(t[0]), 32768);
	FAKE_OK(&r, &f, "metrics");
	check_prometheus(r.out);
	ck_assert(prom_value(r.out,
			     "kvmem_pool_size_bytes{pool=\"a\\\"b\\\\c?d\"}") ==
		  1);
	kvmem_check_run_free(&r);
	fake_stop(&f);
}
END_TEST

/* tier from a kvmemd older than the archive tier (b8fdbf4). */
#define R_TIER_NOARCHIVE                                                  \
	"{\"policy\":{\"offload\":true,\"low_watermark\":10,"             \
	"\"high_watermark\":20,\"stale_tokens\":1024},"                   \
	"\"tiers\":{\"hot\":{\"pages\":4,\"bytes\":131072},"              \
	"\"warm\":{\"pages\":12,\"bytes\":393216},\"cold\":{\"pages\":6," \
	"\"bytes\":196608}},\"offloads\":9,\"offload_bytes\":294912,"     \
	"\"reloads\":3,\"reload_bytes\":98304,\"reload_degraded\":1,"     \
	"\"reload_lost\":1,\"write_errors\":2,\"read_errors\":1,"         \
	"\"nospace\":5,\"waits\":7,\"store\":null}\n"

/*
 * A kvmemd from before the archive tier: tier and metrics show what it
 * has, the archive's lines and series left out, rather than refuse the
 * whole reply for the keys it never sent.
 */
START_TEST(test_spec_no_archive)
{
	static const struct fake_reply t[] = {
		{ "stats", R_STATS },	      { "errors", R_ERRORS },
		{ "scrub status", R_SCRUB },  { "sessions", R_SESSIONS },
		{ "tier", R_TIER_NOARCHIVE },
	};
	struct kvmem_run r;
	struct fake f;

	fake_start(&f, t, sizeof(t) / sizeof(t[0]), 32768);
	FAKE_OK(&r, &f, "tier");
	expect_line(&r, "policy offload on, watermarks 10% / 20% free, stale "
			"after 1024 tokens");
	expect_line(&r, "hot 4 128.0 KiB");
	expect_line(&r, "cold 6 192.0 KiB");
	expect_line(&r, "waits 7 ops waited for pages to move");
	ck_assert_msg(!strstr(r.out, "archive"), "%s", r.out);
	kvmem_check_run_free(&r);
	FAKE_OK(&r, &f, "metrics");
	check_prometheus(r.out);
	ck_assert(prom_value(r.out, "kvmem_tier_pages{tier=\"warm\"}") == 12);
	ck_assert(prom_value(r.out, "kvmem_reloads_total") == 3);
	ck_assert(!strstr(r.out, "kvmem_archive"));
	ck_assert(!strstr(r.out, "tier=\"archive\""));
	kvmem_check_run_free(&r);
	fake_stop(&f);
}
END_TEST

/*
 * The store's unit is what kvmemd says it is ("unit_bytes"), in tier and
 * in metrics; R_TIER, from a kvmemd that does not say, has 4 KiB units
 * (test_spec_tables, test_spec_metrics).
 */
#define R_TIER_8K TIER_HEAD("true", "1024") TIER_STORE("\"unit_bytes\":8192,")

START_TEST(test_spec_store_unit)
{
	static const struct fake_reply t[] = {
		{ "stats", R_STATS },	     { "errors", R_ERRORS },
		{ "scrub status", R_SCRUB }, { "sessions", R_SESSIONS },
		{ "tier", R_TIER_8K },
	};
	struct kvmem_run r;
	struct fake f;

	fake_start(&f, t, sizeof(t) / sizeof(t[0]), 32768);
	FAKE_OK(&r, &f, "tier");
	expect_line(&r, "size 16.0 MiB, 4095 units of 8.0 KiB");
	expect_line(&r, "used 384.0 KiB in 48 units (1.2%)");
	kvmem_check_run_free(&r);
	FAKE_OK(&r, &f, "metrics");
	check_prometheus(r.out);
	ck_assert_double_eq(prom_value(r.out, "kvmem_store_used_bytes"),
			    48 * 8192);
	kvmem_check_run_free(&r);
	fake_stop(&f);
}
END_TEST

/* tier.bits_budget in tier's archive line, with and without an age. */
START_TEST(test_tier_budget_line)
{
	static const struct fake_reply any_age[] = {
		{ "tier", TIER_HEAD_B("true", "0", "2.5") "null}\n" },
	};
	static const struct fake_reply aged[] = {
		{ "tier", TIER_HEAD_B("true", "1024", "3") "null}\n" },
	};
	struct kvmem_run r;
	struct fake f;

	fake_start(&f, any_age, 1, 32768);
	FAKE_OK(&r, &f, "tier");
	expect_line(&r, "archive released pages the coldest while a session "
			"averages over 2.5 bits in int4 + golay24, heat at "
			"most 0.25, 64.0 MiB/s");
	kvmem_check_run_free(&r);
	fake_stop(&f);
	fake_start(&f, aged, 1, 32768);
	FAKE_OK(&r, &f, "tier");
	expect_line(&r, "archive released pages 1024 tokens old, the coldest "
			"while a session averages over 3 bits in int4 + "
			"golay24, heat at most 0.25, 64.0 MiB/s");
	kvmem_check_run_free(&r);
	fake_stop(&f);
}
END_TEST

/*
 * A daemon without a backing store: tier says so (store null), metrics
 * leave the store's families out, offload is refused (EOPNOTSUPP).
 */
START_TEST(test_spec_no_store)
{
	static const struct fake_reply t[] = {
		{ "stats", R_STATS },
		{ "errors", R_ERRORS },
		{ "scrub status", R_SCRUB },
		{ "sessions", R_SESSIONS },
		{ "tier", R_TIER_NOSTORE },
		{ "offload*",
		  "{\"error\":\"no backing store (set store.path)\","
		  "\"errno\":-95}\n" },
	};
	struct kvmem_run r;
	struct json *v;
	struct fake f;

	fake_start(&f, t, sizeof(t) / sizeof(t[0]), 32768);
	FAKE_OK(&r, &f, "tier");
	expect_line(&r, "policy offload off, watermarks 10% / 20% free, age "
			"does not count");
	expect_line(&r, "archive off (tier.archive_tokens = 0)");
	expect_line(&r, "cold 6 192.0 KiB");
	expect_line(&r, "errors 2 writes, 1 reads, 5 out of space");
	expect_line(&r, "no backing store (store.path is empty)");
	ck_assert_msg(!strstr(r.out, "\nstore ") && !strstr(r.out, "uuid"),
		      "%s", r.out);
	kvmem_check_run_free(&r);
	FAKE_OK(&r, &f, "tier", "--json");
	v = expect_schema(r.out, "tier");
	ck_assert_int_eq(json_get(v, "store")->type, JSON_NULL);
	json_free(v);
	kvmem_check_run_free(&r);
	FAKE_OK(&r, &f, "metrics");
	check_prometheus(r.out);
	ck_assert(prom_value(r.out, "kvmem_tier_pages{tier=\"cold\"}") == 6);
	ck_assert(prom_value(r.out, "kvmem_offloads_total") == 9);
	ck_assert_msg(!strstr(r.out, "kvmem_store_"), "%s", r.out);
	kvmem_check_run_free(&r);
	CTL(&r, NULL, "-a", f.sock, "offload");
	expect_status(&r, 1);
	ck_assert_str_eq(r.out, "");
	ck_assert_str_eq(
		r.err,
		"kvmemctl: offload: no backing store (set store.path)\n");
	kvmem_check_run_free(&r);
	fake_stop(&f);
}
END_TEST

/*
 * An offload the daemon finished with failed writes: its line still, the
 * count on stderr, exit 1 (with --json too); one refused: exit 1, nothing
 * on stdout.
 */
START_TEST(test_spec_offload_errors)
{
	struct kvmem_run r;
	struct fake f;

	fake_start(&f, spec_replies, NSPEC, 32768);
	CTL(&r, NULL, "-a", f.sock, "offload", "seq", "1", "2");
	expect_status(&r, 1);
	ck_assert_str_eq(r.out, "offloaded 10 pages, 320.0 KiB in 0.500 s "
				"(0.00 GB/s), 2 errors\n");
	ck_assert_str_eq(r.err, "kvmemctl: offload seq 1 2: 2 pages could not "
				"be written to the store and stay in memory "
				"(kvmemd's log says why)\n");
	kvmem_check_run_free(&r);
	CTL(&r, NULL, "-a", f.sock, "offload", "--json", "seq", "1", "2");
	expect_status(&r, 1);
	json_free(expect_schema(r.out, "offload"));
	EXPECT_HAS(r.err, "2 pages could not be written");
	kvmem_check_run_free(&r);
	CTL(&r, NULL, "-a", f.sock, "offload", "seq", "1", "3");
	expect_status(&r, 1);
	ck_assert_str_eq(r.out, "");
	ck_assert_str_eq(r.err,
			 "kvmemctl: offload seq 1 3: an offload is running\n");
	kvmem_check_run_free(&r);
	fake_stop(&f);
}
END_TEST

/* Replies in many datagrams, and one as large as the reader takes. */
START_TEST(test_spec_datagrams)
{
	static const struct fake_reply small[] = { { "stats", R_STATS } };
	struct fake_reply big[1] = { { "status", NULL } };
	size_t pad = 4u << 20, n;
	struct kvmem_run r;
	struct fake f;
	char *text;

	fake_start(&f, small, 1, 7);
	FAKE_OK(&r, &f, "stats");
	expect_line(&r, "host 1.0 GiB 256.0 MiB 1.0 MiB 16.0 MiB 768.0 MiB 1");
	kvmem_check_run_free(&r);
	fake_stop(&f);

	/* A status with a 4 MiB member it does not know, in 32 KiB
	 * datagrams. */
	n = strlen(R_STATUS);
	text = kvmem_check_xmalloc(n + pad + 16);
	memcpy(text, R_STATUS, n - 2);
	memcpy(text + n - 2, ",\"x\":\"", 6);
	memset(text + n + 4, 'a', pad);
	strcpy(text + n + 4 + pad, "\"}\n");
	big[0].reply = text;
	fake_start(&f, big, 1, 32768);
	FAKE_OK(&r, &f, "status");
	expect_line(&r, "ops 123456");
	kvmem_check_run_free(&r);
	fake_stop(&f);
	free(text);
}
END_TEST

/*
 * The daemon's errors: its sentence and exit 1, or exit 4 for EACCES, and
 * nothing on stdout.
 */
START_TEST(test_spec_error_replies)
{
	static const struct fake_reply t[] = {
		{ "status", "{\"error\":\"not an admin\",\"errno\":-13}\n" },
		{ "stats", "{\"error\":\"kvmemd is \\u001b[31mbusy\"}\n" },
		{ "sessions", "{\"error\":5,\"errno\":\"x\"}\n" },
	};
	struct kvmem_run r;
	struct fake f;

	fake_start(&f, spec_replies, NSPEC, 32768);
	CTL(&r, NULL, "-a", f.sock, "seqs", "9");
	expect_status(&r, 1);
	ck_assert_str_eq(r.out, "");
	ck_assert_str_eq(r.err, "kvmemctl: seqs 9: no session 9\n");
	kvmem_check_run_free(&r);
	CTL(&r, NULL, "-a", f.sock, "inject", "session", "1", "--ber", "0.5",
	    "--seed", "1");
	expect_status(&r, 1);
	ck_assert_str_eq(r.err, "kvmemctl: inject session 1 ber 0.5 seed 1: "
				"injection is off (scrub.allow_inject)\n");
	kvmem_check_run_free(&r);
	CTL(&r, NULL, "-a", f.sock, "scrub", "now", "seq", "1", "3");
	expect_status(&r, 1);
	EXPECT_HAS(r.err, "an on-demand scrub is already running");
	kvmem_check_run_free(&r);
	CTL(&r, NULL, "-a", f.sock, "policy", "set", "x=1", "--json");
	expect_status(&r, 1);
	ck_assert_str_eq(r.out, "");
	EXPECT_HAS(r.err, "x: no such key");
	kvmem_check_run_free(&r);
	fake_stop(&f);

	fake_start(&f, t, 3, 32768);
	CTL(&r, NULL, "-a", f.sock, "status");
	expect_status(&r, 4);
	ck_assert_str_eq(r.err,
			 "kvmemctl: permission denied: kvmemctl needs root or "
			 "membership in group kvmem-admin\n"
			 "kvmemctl: kvmemd: not an admin\n");
	kvmem_check_run_free(&r);
	/* The sentence reaches the terminal without its escape. */
	CTL(&r, NULL, "-a", f.sock, "stats");
	expect_status(&r, 1);
	ck_assert_str_eq(r.err, "kvmemctl: stats: kvmemd is ?[31mbusy\n");
	kvmem_check_run_free(&r);
	CTL(&r, NULL, "-a", f.sock, "sessions");
	expect_status(&r, 1);
	ck_assert_str_eq(r.err, "kvmemctl: sessions: (no reason given)\n");
	kvmem_check_run_free(&r);
	fake_stop(&f);
}
END_TEST

/*
 * Replies that break the protocol or the schema: exit 1 (or 3 when the
 * daemon hangs up), a sentence saying what was wrong, nothing on stdout,
 * and never a crash.
 */
START_TEST(test_spec_malformed_replies)
{
	static const struct {
		const char *reply;
		int status;
		const char *err;
	} cases[] = {
		{ "not json\n", 1,
		  "malformed reply from kvmemd: byte 0: not a JSON value" },
		{ "[1,2]\n", 1, "array, not an object" },
		{ "{\"pid\":1}\n", 1, "\"scrub\" is missing" },
		{ "{\"pid\":1,\"scrub\":{\"enabled\":true,\"state\":\"idle\"}}\n",
		  1, "\"pool_bytes\" is missing" },
		{ "{\"pid\":-1,\"version\":\"0.4.0\",\"uptime_s\":1,"
		  "\"sessions\":0,\"pool_bytes\":1,\"pool_used_bytes\":0,"
		  "\"attached\":0,\"refused\":0,\"detached\":0,"
		  "\"dropped\":0,\"ops\":0,\"scrub\":{\"enabled\":true,"
		  "\"state\":\"idle\"}}\n",
		  1, "\"pid\" is number, not an integer" },
		{ "{\"a\":1}\n{}\n", 1, "a newline inside the JSON" },
		{ "{\"a\":1", 3, "closed the connection in the middle" },
		{ NULL, 3, "closed the connection without replying" },
		{ "{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
		  "[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
		  "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}\n",
		  1, "nested deeper than 64" },
		{ "{\"a\":\"\xff\"}\n", 1, "invalid UTF-8" },
		{ "{\"a\":1e999}\n", 1, "range of a double" },
	};
	struct fake_reply t[1] = { { "status", NULL } };
	struct kvmem_run r;
	struct fake f;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		t[0].reply = cases[i].reply;
		fake_start(&f, t, 1, 32768);
		CTL(&r, NULL, "-a", f.sock, "status");
		expect_status(&r, cases[i].status);
		ck_assert_str_eq(r.out, "");
		EXPECT_HAS(r.err, cases[i].err);
		kvmem_check_run_free(&r);
		fake_stop(&f);
	}
}
END_TEST

/* Fields of the wrong type in every command's tables: exit 1, no output. */
START_TEST(test_spec_wrong_types)
{
	static const struct {
		const char *req, *reply, *args[4], *err;
	} cases[] = {
		{ "stats",
		  "{\"uptime_s\":\"1\",\"daemon\":{},\"pools\":[],\"scrub\":{},"
		  "\"seconds_since_reset\":1}\n",
		  { "stats" },
		  "\"uptime_s\" is string, not a number" },
		{ "sessions",
		  "{\"sessions\":[{\"id\":-1}]}\n",
		  { "sessions" },
		  "\"id\" is number, not an integer" },
		{ "sessions",
		  "{\"sessions\":{}}\n",
		  { "sessions" },
		  "\"sessions\" is object, not an array" },
		{ "seqs",
		  "{\"seqs\":[1]}\n",
		  { "seqs" },
		  "\"session\" is missing" },
		{ "scrub status",
		  "{\"enabled\":1,\"enable_background\":1}\n",
		  { "scrub", "status" },
		  "\"rate_bytes_per_s\" is missing" },
		{ "scrub status",
		  "{\"enabled\":true,\"enable_background\":1,"
		  "\"rate_bytes_per_s\":0,\"cycle_s\":0,"
		  "\"current_cycle_duration\":0,\"verify_on_seal\":true,"
		  "\"state\":\"idle\",\"current\":[],\"last_pass\":null,"
		  "\"passes\":0,\"bytes_total\":0,"
		  "\"effective_rate_bytes_per_s\":0,\"estimate\":[],"
		  "\"adapt\":{\"target_ue_per_day\":0}}\n",
		  { "scrub", "status" },
		  "\"current\" is array, not an object" },
		{ "events",
		  "{\"events\":[{}],\"lost\":0}\n",
		  { "events" },
		  "\"time\" is missing" },
		{ "errors",
		  "{\"since\":0,\"counters\":[]}\n",
		  { "errors" },
		  "\"seconds_since_reset\" is missing" },
		{ "reset-counters",
		  "{\"ok\":false}\n",
		  { "reset-counters" },
		  "\"ok\" is false" },
		{ "inject pool ber 0.5 seed 1",
		  "{\"pages\":1,\"words\":1,\"bits\":1,\"by_flips\":[1],"
		  "\"codecs\":[]}\n",
		  { "inject", "pool" },
		  "\"by_flips\" is not an array of 2" },
		{ "inject pool ber 0.5 seed 1",
		  "{\"pages\":1,\"words\":1,\"bits\":1,\"by_flips\":[1,0],"
		  "\"codecs\":[{\"codec\":\"h84\",\"words\":1,\"bits\":1,"
		  "\"by_flips\":[1,0,0]}]}\n",
		  { "inject", "pool" },
		  "not an array of 2 integers" },
		{ "policy show",
		  "{\"policy\":{\"a\":[]}}\n",
		  { "policy", "show" },
		  "\"a\" is array, not a number, string or boolean" },
		{ "version",
		  "{\"version\":1,\"abi\":1,\"admin\":1}\n",
		  { "version" },
		  "\"version\" is number, not a string" },
		{ "tier",
		  "{\"policy\":{\"offload\":true,\"low_watermark\":10,"
		  "\"high_watermark\":20,\"stale_tokens\":1}}\n",
		  { "tier" },
		  "\"tiers\" is missing" },
		{ "tier",
		  TIER_HEAD("true", "1") "[]}\n",
		  { "tier" },
		  "\"store\" is array, not an object" },
		{ "tier",
		  TIER_HEAD("true", "1") "{\"path\":\"/x\"}}\n",
		  { "tier" },
		  "\"units\" is missing" },
		{ "offload",
		  "{\"pages\":1,\"bytes\":1,\"seconds\":0,\"gbps\":0}\n",
		  { "offload" },
		  "\"errors\" is missing" },
		{ "offload pool",
		  "{\"pages\":1,\"bytes\":1,\"errors\":0,\"seconds\":\"1\","
		  "\"gbps\":0}\n",
		  { "offload", "pool" },
		  "\"seconds\" is string, not a number" },
	};
	struct fake_reply t[1];
	struct kvmem_run r;
	struct fake f;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *const *a = cases[i].args;

		t[0].req = cases[i].req;
		t[0].reply = cases[i].reply;
		fake_start(&f, t, 1, 32768);
		if (!strcmp(a[0], "inject"))
			CTL(&r, NULL, "-a", f.sock, a[0], a[1], "--ber", "0.5",
			    "--seed", "1");
		else if (a[1])
			CTL(&r, NULL, "-a", f.sock, a[0], a[1]);
		else
			CTL(&r, NULL, "-a", f.sock, a[0]);
		expect_status(&r, 1);
		ck_assert_str_eq(r.out, "");
		EXPECT_HAS(r.err, "malformed reply from kvmemd");
		EXPECT_HAS(r.err, cases[i].err);
		kvmem_check_run_free(&r);
		fake_stop(&f);
	}
}
END_TEST

/* A datagram over the protocol's 32 KiB is refused, not truncated. */
START_TEST(test_spec_oversized_datagram)
{
	struct fake_reply t[1] = { { "status", NULL } };
	size_t n = 40000;
	struct kvmem_run r;
	struct fake f;
	char *text = kvmem_check_xmalloc(n + 16);

	memcpy(text, "{\"x\":\"", 6);
	memset(text + 6, 'a', n);
	strcpy(text + 6 + n, "\"}\n");
	t[0].reply = text;
	fake_start(&f, t, 1, n + 16);
	CTL(&r, NULL, "-a", f.sock, "status");
	expect_status(&r, 1);
	EXPECT_HAS(r.err, "a datagram of 40009 bytes, over the protocol's "
			  "32768");
	kvmem_check_run_free(&r);
	fake_stop(&f);
	free(text);
}
END_TEST

/* Terminal escapes in the daemon's strings never reach the terminal. */
START_TEST(test_spec_control_characters)
{
	static const struct fake_reply t[] = {
		{ "version", "{\"version\":\"\\u001b]0;pwned\\u0007\\u009b2J\","
			     "\"abi\":1,\"admin\":1}\n" },
	};
	struct kvmem_run r;
	struct fake f;

	fake_start(&f, t, 1, 32768);
	FAKE_OK(&r, &f, "version");
	EXPECT_HAS(r.out, "kvmemd   ?]0;pwned??2J (ABI 1, admin protocol 1)\n");
	kvmem_check_run_free(&r);
	FAKE_OK(&r, &f, "version", "--json");
	EXPECT_HAS(r.out, "\"version\":\"\\u001b]0;pwned\\u0007\\u009b2J\"");
	kvmem_check_run_free(&r);
	fake_stop(&f);
}
END_TEST

START_TEST(test_usage_errors)
{
	static const struct {
		const char *args[8];
		const char *err;
	} cases[] = {
		{ { "frobnicate" }, "unknown command 'frobnicate'" },
		{ { "--frob", "status" }, "unknown option '--frob'" },
		{ { "status", "--watch" },
		  "option '--watch' needs an argument" },
		{ { "sessions", "--watch", "1" }, "--watch does not apply" },
		{ { "stats", "--watch", "0" }, "--watch must be seconds" },
		{ { "status", "--ber", "1" }, "--ber does not apply" },
		{ { "status", "extra" }, "usage: kvmemctl status" },
		{ { "seqs", "x" }, "SESSION must be a number" },
		{ { "seqs", "1", "2" }, "usage: kvmemctl seqs [SESSION]" },
		{ { "prefixes", "x" },
		  "TENANT must be a uid, or @ and a group's name or gid, "
		  "not 'x'" },
		{ { "prefixes", "@" }, "TENANT must be a uid, or @" },
		{ { "prefixes", "@no-such-group-kvmem" },
		  "TENANT must be a uid, or @" },
		{ { "prefix-drop", "@4294967295" },
		  "TENANT must be a uid, or @" },
		{ { "prefix-drop" },
		  "usage: kvmemctl prefix-drop TENANT [KEY]" },
		{ { "prefix-drop", "0", "zz" },
		  "KEY must be 64 hexadecimal digits" },
		{ { "prefix-inject", "0", "9" }, "FLIPS must be 1 to 8" },
		{ { "scrub" }, "usage: kvmemctl scrub" },
		{ { "scrub", "go" }, "scrub: expected status, start" },
		{ { "scrub", "start", "now" }, "unexpected argument 'now'" },
		{ { "scrub", "now", "session" }, "expected a target" },
		{ { "scrub", "now", "pool", "x" }, "unexpected argument 'x'" },
		{ { "scrub", "rate", "fast" }, "BYTES_PER_S must be" },
		{ { "scrub", "rate", "1T" }, "BYTES_PER_S must be" },
		{ { "scrub", "cycle", "1y" }, "SECONDS must be" },
		{ { "scrub", "cycle", "99999999999" }, "SECONDS must be" },
		{ { "events", "--since", "10m", "ago" }, "quote the time" },
		{ { "events", "--since", "yesterday" }, "--since must be" },
		{ { "events", "--limit", "-1" }, "--limit must be a number" },
		{ { "inject", "pool", "--ber", "0.1" },
		  "needs --ber P and --seed" },
		{ { "inject", "pool", "--ber", "2", "--seed", "1" },
		  "--ber must be a probability" },
		{ { "inject", "pool", "--ber", "0.1", "--seed", "1",
		    "--channel", "byte:9" },
		  "--channel must be bsc, exact:K" },
		{ { "status", "--channel", "bsc" },
		  "--channel does not apply" },
		{ { "status", "--http-timeout", "5" },
		  "--http-timeout does not apply" },
		{ { "metrics", "--http-timeout", "5" },
		  "--http-timeout needs --http" },
		{ { "metrics", "--http", "--http-timeout", "0" },
		  "--http-timeout must be seconds from 0.1 to 3600" },
		{ { "metrics", "--http", "--http-timeout", "5s" },
		  "--http-timeout must be seconds" },
		{ { "inject", "pool", "--ber", "nan", "--seed", "1" },
		  "--ber must be a probability" },
		{ { "inject", "pool", "--ber", "0.1", "--seed", "-1" },
		  "--seed must be a number" },
		{ { "inject", "seq", "1", "--ber", "0.1", "--seed", "1" },
		  "expected a target" },
		{ { "tier", "x" }, "usage: kvmemctl tier" },
		{ { "tier", "--watch", "1" }, "--watch does not apply" },
		{ { "offload", "all" }, "expected a target" },
		{ { "offload", "seq", "1" }, "expected a target" },
		{ { "offload", "session", "x" }, "SESSION must be a number" },
		{ { "offload", "seq", "1", "x" }, "SEQ must be a number" },
		{ { "offload", "pool", "now" },
		  "offload: unexpected argument 'now'" },
		{ { "offload", "seq", "1", "2", "3" },
		  "usage: kvmemctl offload [TARGET]" },
		{ { "offload", "pool", "--seed", "1" },
		  "--seed does not apply" },
		{ { "policy", "get" }, "policy: expected show" },
		{ { "policy", "set", "novalue" }, "expected KEY=VALUE" },
		{ { "policy", "set", "=1" }, "expected KEY=VALUE" },
		{ { "policy", "set", "a=b c" }, "without spaces" },
		{ { "-a",
		    "/x/0123456789012345678901234567890123456789012345678"
		    "901234567890123456789012345678901234567890123456789"
		    "0123456789",
		    "status" },
		  "admin socket path longer than 107 bytes" },
	};
	struct kvmem_run r;
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *const *a = cases[i].args;
		const char *argv[12] = { "-a", "/nonexistent/a.sock" };
		int n = 2, k;

		for (k = 0; k < 8 && a[k]; k++)
			argv[n++] = a[k];
		argv[n] = NULL;
		ctl_run(&r, NULL, argv);
		expect_status(&r, 2);
		ck_assert_str_eq(r.out, "");
		EXPECT_HAS(r.err, cases[i].err);
		kvmem_check_run_free(&r);
	}
	CTL(&r, NULL, "-a", "/nonexistent/a.sock");
	expect_status(&r, 2);
	EXPECT_HAS(r.err, "usage: kvmemctl [-a PATH] [--json] COMMAND");
	kvmem_check_run_free(&r);
}
END_TEST

START_TEST(test_help_and_version)
{
	struct kvmem_run r;

	CTL(&r, NULL, "--help");
	expect_status(&r, 0);
	EXPECT_HAS(r.out, "exit status: 0 done, 1 kvmemd refused or failed");
	EXPECT_HAS(r.out, "  metrics [--http [--http-timeout SEC]]\n");
	EXPECT_HAS(r.out, "      --http  ");
	EXPECT_HAS(r.out, "      --http-timeout SEC  ");
	EXPECT_HAS(r.out, "  inject TARGET --ber P --seed S [--all] "
			  "[--channel SPEC]\n");
	EXPECT_HAS(r.out, "  tier\n");
	EXPECT_HAS(r.out, "  offload [TARGET]\n");
	kvmem_check_run_free(&r);
	CTL(&r, NULL, "help");
	expect_status(&r, 0);
	EXPECT_HAS(r.out, "usage: kvmemctl");
	kvmem_check_run_free(&r);
	CTL(&r, NULL, "-V");
	expect_status(&r, 0);
	ck_assert_msg(!strncmp(r.out, "kvmemctl ", 9) && strlen(r.out) > 10,
		      "%s", r.out);
	kvmem_check_run_free(&r);
}
END_TEST

/* KVMEM_ADMIN_SOCKET names the socket; -a wins over it. */
START_TEST(test_admin_socket_env)
{
	struct ctl_opts o = { 0 };
	struct kvmem_run r;
	struct fake f;
	char env[160];

	fake_start(&f, spec_replies, NSPEC, 32768);
	snprintf(env, sizeof(env), "KVMEM_ADMIN_SOCKET=%s", f.sock);
	o.env[0] = env;
	CTL(&r, &o, "reset-counters");
	expect_status(&r, 0);
	kvmem_check_run_free(&r);
	CTL(&r, &o, "-a", "/nonexistent/b.sock", "reset-counters");
	expect_status(&r, 3);
	EXPECT_HAS(r.err, "/nonexistent/b.sock");
	kvmem_check_run_free(&r);
	fake_stop(&f);
}
END_TEST

/*
 * Without -a or the variable, kvmemctl asks libkvmem where the admin socket
 * is, as kvmemd does.
 */
START_TEST(test_default_admin_socket)
{
	static const struct ctl_opts o = {
		.env = { "KVMEM_ADMIN_SOCKET=",
			 "XDG_RUNTIME_DIR=/nonexistent" },
	};
	char path[108], want[256];
	struct kvmem_run r;
	struct stat sb;

	ck_assert_int_ge(
		kvmem__socket_path(path, sizeof(path), "kvmemd-admin.sock"), 0);
	if (!stat(path, &sb)) {
		fprintf(stderr,
			"SKIP: test_default_admin_socket: %s exists "
			"(a kvmemd runs here)\n",
			path);
		return;
	}
	CTL(&r, &o, "status");
	expect_status(&r, 3);
	snprintf(want, sizeof(want),
		 "kvmemctl: cannot reach kvmemd at %s: No such file or "
		 "directory \u2014 is kvmemd running?\n",
		 geteuid() ? "/nonexistent/kvmem/kvmemd-admin.sock" : path);
	ck_assert_str_eq(r.err, want);
	kvmem_check_run_free(&r);
}
END_TEST

/* stats --watch: a sample every interval until SIGINT, which exits 0. */
START_TEST(test_spec_watch)
{
	struct ctl_opts o = { .sigint_ms = 1500 };
	struct kvmem_run r;
	struct fake f;
	const char *p;
	int lines = 0;

	fake_start(&f, spec_replies, NSPEC, 32768);
	CTL(&r, &o, "-a", f.sock, "stats", "--watch", "0.2", "--json");
	expect_status(&r, 0);
	for (p = r.out; (p = strchr(p, '\n')); p++)
		lines++;
	ck_assert_int_ge(lines, 3);
	p = strchr(r.out, '\n');
	{
		char *first = strndup(r.out, (size_t)(p - r.out + 1));

		json_free(expect_schema(first, "stats"));
		free(first);
	}
	kvmem_check_run_free(&r);
	/* Human samples, a blank line apart (not a terminal: no redraw). */
	CTL(&r, &o, "-a", f.sock, "stats", "--watch", "0.3");
	expect_status(&r, 0);
	p = strstr(r.out, "\n\nuptime ");
	ck_assert_msg(p && strstr(p + 1, "\n\nuptime "), "%s", r.out);
	ck_assert_msg(!strncmp(r.out, "uptime ", 7), "%s", r.out);
	kvmem_check_run_free(&r);
	fake_stop(&f);
}
END_TEST

/* Nobody home: exit 3 and the sentence, for a missing or dead socket. */
START_TEST(test_daemon_down)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kvmemd_proc p;
	struct kvmem_run r;
	char want[300];
	int fd;

	kvmemd_start(&p, NULL, NULL);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	CTL(&r, NULL, "-a", p.admin, "status");
	expect_status(&r, 3);
	ck_assert_str_eq(r.out, "");
	snprintf(want, sizeof(want),
		 "kvmemctl: cannot reach kvmemd at %s: No such file or "
		 "directory \u2014 is kvmemd running?\n",
		 p.admin);
	ck_assert_str_eq(r.err, want);
	kvmem_check_run_free(&r);

	/* A socket file left over, nobody listening. */
	fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	strcpy(sa.sun_path, p.admin);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	CTL(&r, NULL, "-a", p.admin, "metrics");
	expect_status(&r, 3);
	ck_assert_str_eq(r.out, "");
	snprintf(want, sizeof(want),
		 "kvmemctl: cannot reach kvmemd at %s: Connection refused "
		 "\u2014 is kvmemd running?\n",
		 p.admin);
	ck_assert_str_eq(r.err, want);
	kvmem_check_run_free(&r);
	/* version still says its own. */
	CTL(&r, NULL, "-a", p.admin, "version");
	expect_status(&r, 3);
	ck_assert_msg(!strncmp(r.out, "kvmemctl ", 9), "%s", r.out);
	kvmem_check_run_free(&r);
	unlink(p.admin);
	kvmemd_cleanup(&p);
}
END_TEST

/* A user the file system keeps out: exit 4 at connect(). */
START_TEST(test_denied_at_connect)
{
	static const struct ctl_opts nobody = { .uid = 65534 };
	struct kvmemd_proc p;
	struct kvmem_run r;

	if (geteuid()) {
		fprintf(stderr, "SKIP: test_denied_at_connect: needs root to "
				"run kvmemctl as another uid\n");
		return;
	}
	kvmemd_start(&p, NULL, NULL);
	/* The directory is open, the 0660 root socket is not. */
	chmod(p.dir, 0755);
	CTL(&r, &nobody, "-a", p.admin, "status");
	expect_status(&r, 4);
	ck_assert_str_eq(r.out, "");
	EXPECT_HAS(r.err, "kvmemctl: permission denied: kvmemctl needs root "
			  "or membership in group kvmem-admin\n");
	EXPECT_HAS(r.err, "Permission denied\n");
	kvmem_check_run_free(&r);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* ---- kvmemctl against kvmemd ------------------------------------------ */

static uint64_t u64_at(const struct json *o, const char *key)
{
	uint64_t x = 0;

	ck_assert_msg(!json_u64(json_get(o, key), &x), "\"%s\" is no integer",
		      key);
	return x;
}

/* kvmemctl --json @args on @p's admin socket: the reply, schema checked. */
static struct json *live_json(const struct kvmemd_proc *p, const char *schema,
			      const char *const *args)
{
	const char *argv[16] = { "-a", p->admin, "--json" };
	struct kvmem_run r;
	struct json *v;
	int n = 3;

	while ((argv[n] = *args++)) {
		n++;
		ck_assert_int_lt(n, 15);
	}
	ctl_run(&r, NULL, argv);
	expect_status(&r, 0);
	v = expect_schema(r.out, schema);
	kvmem_check_run_free(&r);
	return v;
}

#define LIVE(p, schema, ...) \
	live_json(p, schema, (const char *const[]){ __VA_ARGS__, NULL })

/* A sequence of @ntok tokens in every layer. */
static struct kvmem_seq *live_seq(struct kvmem_cache *c, uint32_t ntok)
{
	const struct kvmem_geometry g = kvmemd_test_geo();
	size_t n = (size_t)ntok * g.layers * g.kv_heads * g.head_dim, i;
	float *k = kvmem_check_xmalloc(n * sizeof(float));
	float *v = kvmem_check_xmalloc(n * sizeof(float));
	struct kvmem_seq *s;
	struct kvmem_rng r;

	kvmem_rng_seed(&r, 9);
	for (i = 0; i < n; i++) {
		k[i] = kvmem_check_rnd_value(&r, 1.0);
		v[i] = kvmem_check_rnd_value(&r, 1.0);
	}
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append_all(s, k, v, ntok), 0);
	free(k);
	free(v);
	return s;
}

/* The element of array @arr of @v whose string members match @match. */
static const struct json *row(const struct json *v, const char *arr,
			      const char *const *match)
{
	const struct json *a = json_get(v, arr);
	size_t i, k;

	for (i = 0; i < a->u.arr.n; i++) {
		for (k = 0; match[k]; k += 2)
			if (strcmp(json_str(json_get(&a->u.arr.v[i], match[k])),
				   match[k + 1]))
				break;
		if (!match[k])
			return &a->u.arr.v[i];
	}
	ck_abort_msg("no such element of %s", arr);
	return NULL;
}

#define ROW(v, arr, ...) row(v, arr, (const char *const[]){ __VA_ARGS__, NULL })

/* The words of @codec an injection gave exactly one flip. */
static uint64_t one_flip(const struct json *inj, const char *codec)
{
	const struct json *c = ROW(inj, "codecs", "codec", codec);

	return json_get(c, "by_flips")->u.arr.v[1].u.num.u;
}

/* The patrol is off (rate 0): only the test's passes scrub. */
#define LIVE_CONF                                                    \
	"[pool]\nhost_bytes = 64M\nsession_max_bytes = 32M\n"        \
	"session_default_bytes = 16M\n[scrub]\nallow_inject = yes\n" \
	"rate = 0\n"

/*
 * Every command against kvmemd with one session: the --json replies fit
 * the specification, and what they say agrees with what the test did
 * (the injector's report of which words got how many flips is the
 * independent count the scrubber's is held to).
 */
START_TEST(test_live_commands)
{
	static const char *const human[][2] = {
		{ "status" },	      { "stats" },	     { "sessions" },
		{ "seqs" },	      { "scrub", "status" }, { "errors" },
		{ "policy", "show" }, { "version" },
	};
	const struct kvmem_geometry g = kvmemd_test_geo();
	struct kvmemd_proc p;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	struct json *v, *inj, *pass;
	const struct json *e, *bf;
	char sid[16], qid[16], line[160];
	uint64_t ce, h84, flips1, total;
	struct kvmem_run r;
	size_t i;

	kvmemd_start(&p, LIVE_CONF, NULL);
	c = kvmemd_connect(&p, 0);
	/* Three full pages and 4 tokens of tail in each layer. */
	s = live_seq(c, 3 * g.tokens_per_page + 4);

	v = LIVE(&p, "status", "status");
	ck_assert_uint_eq(u64_at(v, "pid"), (uint64_t)p.pid);
	ck_assert_uint_eq(u64_at(v, "sessions"), 1);
	ck_assert_uint_eq(u64_at(v, "pool_bytes"), 64u << 20);
	json_free(v);
	v = LIVE(&p, "version", "version");
	ck_assert_uint_eq(u64_at(v, "admin"), 1);
	json_free(v);
	v = LIVE(&p, "stats", "stats");
	ck_assert_uint_eq(u64_at(json_get(v, "daemon"), "sessions"), 1);
	e = &json_get(v, "pools")->u.arr.v[0];
	ck_assert_uint_eq(u64_at(e, "bytes"), 64u << 20);
	ck_assert_uint_eq(u64_at(e, "free_bytes") + u64_at(e, "reserved_bytes"),
			  64u << 20);
	json_free(v);

	v = LIVE(&p, "sessions", "sessions");
	ck_assert_uint_eq(json_get(v, "sessions")->u.arr.n, 1);
	e = &json_get(v, "sessions")->u.arr.v[0];
	ck_assert_uint_eq(u64_at(e, "pid"), (uint64_t)getpid());
	ck_assert_uint_eq(u64_at(e, "layers"), g.layers);
	ck_assert_uint_eq(u64_at(e, "kv_heads"), g.kv_heads);
	ck_assert_uint_eq(u64_at(e, "head_dim"), g.head_dim);
	ck_assert_uint_eq(u64_at(e, "tokens_per_page"), g.tokens_per_page);
	ck_assert_str_eq(json_str(json_get(e, "format")), "int4");
	ck_assert_str_eq(json_str(json_get(e, "codec")), "h84");
	ck_assert_uint_eq(u64_at(e, "seqs"), 1);
	snprintf(sid, sizeof(sid), "%" PRIu64, u64_at(e, "id"));
	json_free(v);

	v = LIVE(&p, "seqs", "seqs", sid);
	ck_assert_uint_eq(json_get(v, "seqs")->u.arr.n, 1);
	e = &json_get(v, "seqs")->u.arr.v[0];
	ck_assert_uint_eq(u64_at(e, "session"), strtoull(sid, NULL, 10));
	/* libkvmem seals the FP16 tail too (a hot page): every token
	 * appended is in a sealed page. */
	ck_assert_uint_eq(u64_at(e, "tokens"), 3 * g.tokens_per_page + 4);
	ck_assert_uint_eq(u64_at(e, "pages"), 4 * g.layers);
	snprintf(qid, sizeof(qid), "%" PRIu64, u64_at(e, "seq"));
	json_free(v);
	CTL(&r, NULL, "-a", p.admin, "seqs", "999");
	expect_status(&r, 1);
	ck_assert_str_eq(r.err, "kvmemctl: seqs 999: no session 999\n");
	kvmem_check_run_free(&r);

	/* Flip payload bits; one on-demand pass corrects exactly the words
	 * that got one flip (and this seed gave none two). */
	inj = LIVE(&p, "inject", "inject", "seq", sid, qid, "--ber", "1e-4",
		   "--seed", "3");
	bf = json_get(inj, "by_flips");
	for (i = 0, total = 0; i < bf->u.arr.n; i++)
		total += bf->u.arr.v[i].u.num.u;
	ck_assert_uint_eq(total, u64_at(inj, "words"));
	flips1 = bf->u.arr.v[1].u.num.u;
	ck_assert_uint_gt(flips1, 0);
	for (i = 2; i < bf->u.arr.n; i++)
		ck_assert_uint_eq(bf->u.arr.v[i].u.num.u, 0);
	pass = LIVE(&p, "pass", "scrub", "now", "seq", sid, qid);
	ck_assert_str_eq(json_str(json_get(pass, "kind")), "ondemand");
	ck_assert_uint_eq(u64_at(pass, "ce"), flips1);
	ck_assert_uint_eq(u64_at(pass, "ue"), 0);
	ck_assert_uint_eq(u64_at(pass, "pages"), 4 * g.layers);
	ce = u64_at(pass, "ce");
	json_free(pass);

	/* Warm pages hold h84 payload, the FP16 tails golay24. */
	v = LIVE(&p, "errors", "errors");
	e = ROW(v, "counters", "pool", "host", "tier", "warm", "codec", "h84");
	h84 = u64_at(e, "ce");
	ck_assert_uint_eq(h84, one_flip(inj, "h84"));
	ck_assert_uint_eq(u64_at(e, "ce_total"), h84);
	ck_assert_uint_eq(u64_at(e, "ue"), 0);
	e = ROW(v, "counters", "pool", "host", "tier", "hot", "codec",
		"golay24");
	ck_assert_uint_eq(u64_at(e, "ce"), one_flip(inj, "golay24"));
	ck_assert_uint_eq(h84 + u64_at(e, "ce"), ce);
	json_free(v);
	json_free(inj);
	CTL(&r, NULL, "-a", p.admin, "errors");
	expect_status(&r, 0);
	snprintf(line, sizeof(line),
		 "host warm h84 %" PRIu64 " 0 %" PRIu64 " 0", h84, h84);
	expect_line(&r, line);
	kvmem_check_run_free(&r);
	CTL(&r, NULL, "-a", p.admin, "metrics");
	expect_status(&r, 0);
	ck_assert_int_gt(check_prometheus(r.out), 30);
	ck_assert(prom_value(r.out,
			     "kvmem_ce_total{pool=\"host\",tier=\"warm\","
			     "codec=\"h84\"}") == (double)h84);
	ck_assert(prom_value(r.out, "kvmem_sessions") == 1);
	ck_assert(prom_value(r.out, "kvmem_scrub_passes_total") >= 1);
	kvmem_check_run_free(&r);

	/* reset-counters clears the volatile counters only. */
	json_free(LIVE(&p, "reset-counters", "reset-counters"));
	v = LIVE(&p, "errors", "errors");
	e = ROW(v, "counters", "pool", "host", "tier", "warm", "codec", "h84");
	ck_assert_uint_eq(u64_at(e, "ce"), 0);
	ck_assert_uint_eq(u64_at(e, "ce_total"), h84);
	json_free(v);

	/* Enough flips for uncorrectable words: events name them. */
	json_free(LIVE(&p, "inject", "inject", "seq", sid, qid, "--ber", "1e-2",
		       "--seed", "5", "--all"));
	pass = LIVE(&p, "pass", "scrub", "now", "session", sid);
	ck_assert_uint_gt(u64_at(pass, "ue"), 0);
	json_free(pass);
	v = LIVE(&p, "events", "events");
	ck_assert_uint_gt(json_get(v, "events")->u.arr.n, 1);
	e = &json_get(v, "events")->u.arr.v[0];
	ck_assert_uint_eq(u64_at(e, "session"), strtoull(sid, NULL, 10));
	ck_assert_uint_eq(u64_at(e, "seq"), strtoull(qid, NULL, 10));
	ck_assert_str_eq(json_str(json_get(e, "source")), "ondemand");
	json_free(v);
	v = LIVE(&p, "events", "events", "--limit", "1", "--since", "1h");
	ck_assert_uint_eq(json_get(v, "events")->u.arr.n, 1);
	json_free(v);
	v = LIVE(&p, "events", "events", "--since", "4000000000");
	ck_assert_uint_eq(json_get(v, "events")->u.arr.n, 0);
	json_free(v);
	CTL(&r, NULL, "-a", p.admin, "events");
	expect_status(&r, 0);
	EXPECT_HAS(r.out, " uncorrectable ");
	kvmem_check_run_free(&r);

	/* The patrol's knobs; with rate and cycle 0 it cannot start. */
	CTL(&r, NULL, "-a", p.admin, "scrub", "start");
	expect_status(&r, 1);
	EXPECT_HAS(r.err, "kvmemctl: scrub start: ");
	kvmem_check_run_free(&r);
	v = LIVE(&p, "scrub", "scrub", "rate", "2M");
	ck_assert_uint_eq(u64_at(v, "rate_bytes_per_s"), 2u << 20);
	json_free(v);
	v = LIVE(&p, "scrub", "scrub", "cycle", "1h");
	ck_assert_uint_eq(u64_at(v, "cycle_s"), 3600);
	json_free(v);
	v = LIVE(&p, "scrub", "scrub", "start");
	ck_assert(json_get(v, "enabled")->u.b);
	json_free(v);
	v = LIVE(&p, "scrub", "scrub", "stop");
	ck_assert(!json_get(v, "enabled")->u.b);
	json_free(v);
	v = LIVE(&p, "scrub", "scrub", "status");
	ck_assert_uint_ge(u64_at(v, "passes"), 2);
	json_free(v);
	CTL(&r, NULL, "-a", p.admin, "scrub", "status");
	expect_status(&r, 0);
	expect_line(&r, "rate 2.0 MiB/s");
	expect_line(&r, "cycle target 1h 00m");
	kvmem_check_run_free(&r);

	v = LIVE(&p, "policy", "policy", "set", "scrub.rate=1M");
	ck_assert_uint_eq(u64_at(json_get(v, "policy"), "scrub.rate"),
			  1u << 20);
	ck_assert(json_get(json_get(v, "policy"), "scrub.allow_inject")->u.b);
	json_free(v);
	json_free(LIVE(&p, "policy", "policy", "show"));
	CTL(&r, NULL, "-a", p.admin, "policy", "set", "no.such_key=1");
	expect_status(&r, 1);
	EXPECT_HAS(r.err, "kvmemctl: policy set no.such_key=1: ");
	kvmem_check_run_free(&r);

	/* Every table renders from the real replies. */
	for (i = 0; i < sizeof(human) / sizeof(human[0]); i++) {
		if (human[i][1])
			CTL(&r, NULL, "-a", p.admin, human[i][0], human[i][1]);
		else
			CTL(&r, NULL, "-a", p.admin, human[i][0]);
		expect_status(&r, 0);
		ck_assert_str_eq(r.err, "");
		ck_assert_uint_gt(strlen(r.out), 10);
		kvmem_check_run_free(&r);
	}
	kvmem_seq_free(s);
	kvmem_close(c);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* A backing store, and no offloads of the daemon's own: only the offload
 * command moves pages. */
#define LIVE_STORE_CONF                             \
	LIVE_CONF "[tier]\noffload = no\n[store]\n" \
		  "path = @DIR@/store\nsize = 16M\n"
#define LIVE_SEQS 4

/* @out with runs of spaces squeezed holds @fmt's text. */
static void expect_squeezed(const char *out, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void expect_squeezed(const char *out, const char *fmt, ...)
{
	char want[256], *s = squeeze(out);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(want, sizeof(want), fmt, ap);
	va_end(ap);
	ck_assert_msg(strstr(s, want), "no \"%s\" in:\n%s", want, out);
	free(s);
}

/*
 * The cold tier through kvmemctl: sequences written with libkvmem, all but
 * one released, offloaded by one sequence and then the pool. The pages
 * each command reports are the ones the test released (three full pages
 * and a tail in every layer per sequence); tier, sessions, seqs, metrics
 * and the client's own STATS op agree on what is cold; an acquire brings
 * one sequence back as reloads.
 */
START_TEST(test_live_tier)
{
	const struct kvmem_geometry g = kvmemd_test_geo();
	const uint64_t per_seq = 4 * g.layers;
	struct kvmem_seq *s[LIVE_SEQS];
	const struct json *e, *a, *tiers, *store;
	uint64_t pages, cold, cold_bytes, seq_bytes, id;
	char sid[16], qid[16] = "", series[96];
	struct json *v, *off;
	struct kvmemd_proc p;
	struct kvmem_stats st;
	struct kvmem_cache *c;
	struct kvmem_run r;
	size_t i;

	kvmemd_start(&p, LIVE_STORE_CONF, NULL);
	c = kvmemd_connect(&p, 0);
	for (i = 0; i < LIVE_SEQS; i++)
		s[i] = live_seq(c, 3 * g.tokens_per_page + 4);
	/* The last stays acquired: its pages never leave. */
	for (i = 0; i + 1 < LIVE_SEQS; i++)
		kvmemd_release(c, s[i]);

	v = LIVE(&p, "tier", "tier");
	ck_assert(!json_get(json_get(v, "policy"), "offload")->u.b);
	tiers = json_get(v, "tiers");
	ck_assert_uint_eq(u64_at(json_get(tiers, "hot"), "pages") +
				  u64_at(json_get(tiers, "warm"), "pages"),
			  LIVE_SEQS * per_seq);
	ck_assert_uint_eq(u64_at(json_get(tiers, "cold"), "pages"), 0);
	store = json_get(v, "store");
	ck_assert_uint_eq(u64_at(store, "size"), 16u << 20);
	ck_assert_uint_eq(u64_at(store, "unit_bytes"), 4096);
	ck_assert_uint_eq(u64_at(store, "used_units"), 0);
	json_free(v);

	v = LIVE(&p, "sessions", "sessions");
	id = u64_at(&json_get(v, "sessions")->u.arr.v[0], "id");
	snprintf(sid, sizeof(sid), "%" PRIu64, id);
	json_free(v);
	v = LIVE(&p, "seqs", "seqs", sid);
	a = json_get(v, "seqs");
	ck_assert_uint_eq(a->u.arr.n, LIVE_SEQS);
	for (i = 0; i < a->u.arr.n; i++) {
		ck_assert_uint_eq(u64_at(&a->u.arr.v[i], "pages"), per_seq);
		ck_assert_uint_eq(u64_at(&a->u.arr.v[i], "cold_pages"), 0);
		if (!json_get(&a->u.arr.v[i], "acquired")->u.b && !qid[0])
			snprintf(qid, sizeof(qid), "%" PRIu64,
				 u64_at(&a->u.arr.v[i], "seq"));
	}
	json_free(v);

	/* One released sequence by itself, as JSON... */
	off = LIVE(&p, "offload", "offload", "seq", sid, qid);
	ck_assert_uint_eq(u64_at(off, "pages"), per_seq);
	ck_assert_uint_eq(u64_at(off, "errors"), 0);
	seq_bytes = u64_at(off, "bytes");
	ck_assert_uint_gt(seq_bytes, 0);
	json_free(off);
	/* ...then the rest of the pool, as a line. */
	CTL(&r, NULL, "-a", p.admin, "offload", "pool");
	expect_status(&r, 0);
	ck_assert_str_eq(r.err, "");
	ck_assert_int_eq(sscanf(r.out, "offloaded %" SCNu64 " pages, ", &pages),
			 1);
	ck_assert_uint_eq(pages, (LIVE_SEQS - 2) * per_seq);
	EXPECT_HAS(r.out, ", 0 errors\n");
	kvmem_check_run_free(&r);
	/* Nothing released is left in memory. */
	off = LIVE(&p, "offload", "offload");
	ck_assert_uint_eq(u64_at(off, "pages"), 0);
	json_free(off);

	/* Cold: what the commands moved, as the client's STATS sees it. */
	ck_assert_int_eq(kvmem_daemon_stats(c, &st), 0);
	v = LIVE(&p, "tier", "tier");
	tiers = json_get(v, "tiers");
	cold = u64_at(json_get(tiers, "cold"), "pages");
	cold_bytes = u64_at(json_get(tiers, "cold"), "bytes");
	ck_assert_uint_eq(cold, per_seq + pages);
	ck_assert_uint_eq(cold, st.cold_pages);
	ck_assert_uint_eq(cold_bytes, st.cold_bytes);
	ck_assert_uint_eq(cold_bytes, (LIVE_SEQS - 1) * seq_bytes);
	ck_assert_uint_eq(u64_at(json_get(tiers, "hot"), "pages") +
				  u64_at(json_get(tiers, "warm"), "pages"),
			  per_seq);
	ck_assert_uint_eq(u64_at(v, "offloads"), cold);
	ck_assert_uint_eq(u64_at(v, "offload_bytes"), cold_bytes);
	ck_assert_uint_eq(u64_at(v, "write_errors"), 0);
	store = json_get(v, "store");
	ck_assert_uint_eq(u64_at(store, "used_units") * 4096, cold_bytes);
	ck_assert_uint_eq(u64_at(store, "writes"), cold);
	ck_assert_uint_eq(u64_at(store, "write_bytes"), cold_bytes);
	ck_assert_uint_eq(u64_at(store, "inflight"), 0);
	json_free(v);

	v = LIVE(&p, "sessions", "sessions");
	e = &json_get(v, "sessions")->u.arr.v[0];
	ck_assert_uint_eq(u64_at(e, "cold_pages"), cold);
	ck_assert_uint_eq(u64_at(e, "cold_bytes"), cold_bytes);
	ck_assert_uint_eq(u64_at(e, "offloads"), cold);
	ck_assert_uint_eq(u64_at(e, "reloads"), 0);
	json_free(v);
	v = LIVE(&p, "seqs", "seqs");
	a = json_get(v, "seqs");
	for (i = 0; i < a->u.arr.n; i++)
		ck_assert_uint_eq(u64_at(&a->u.arr.v[i], "cold_pages"),
				  json_get(&a->u.arr.v[i], "acquired")->u.b
					  ? 0
					  : per_seq);
	json_free(v);

	/* The tables say the same. */
	CTL(&r, NULL, "-a", p.admin, "tier");
	expect_status(&r, 0);
	expect_line(&r, "policy offload off, watermarks 10% / 20% free, "
			"stale after 1024 tokens");
	expect_squeezed(r.out, "\ncold %" PRIu64 " ", cold);
	expect_squeezed(r.out, "\noffloads %" PRIu64 " pages, ", cold);
	expect_squeezed(r.out, " in %" PRIu64 " units (", cold_bytes / 4096);
	expect_line(&r, "size 16.0 MiB, 4095 units of 4.0 KiB");
	kvmem_check_run_free(&r);
	CTL(&r, NULL, "-a", p.admin, "seqs", sid);
	expect_status(&r, 0);
	expect_squeezed(r.out, " %s %s no %" PRIu64 " %" PRIu64 " %u 0\n", sid,
			qid, per_seq, per_seq, 3 * g.tokens_per_page + 4);
	kvmem_check_run_free(&r);
	CTL(&r, NULL, "-a", p.admin, "sessions");
	expect_status(&r, 0);
	expect_squeezed(r.out, " USED COLD OPEN ");
	kvmem_check_run_free(&r);

	CTL(&r, NULL, "-a", p.admin, "metrics");
	expect_status(&r, 0);
	check_prometheus(r.out);
	ck_assert(prom_value(r.out, "kvmem_tier_pages{tier=\"cold\"}") ==
		  (double)cold);
	ck_assert(prom_value(r.out, "kvmem_tier_bytes{tier=\"cold\"}") ==
		  (double)cold_bytes);
	ck_assert(prom_value(r.out, "kvmem_offloads_total") == (double)cold);
	ck_assert(prom_value(r.out, "kvmem_offload_bytes_total") ==
		  (double)cold_bytes);
	ck_assert(prom_value(r.out, "kvmem_reloads_total") == 0);
	ck_assert(prom_value(r.out, "kvmem_store_used_bytes") ==
		  (double)cold_bytes);
	ck_assert(prom_value(r.out, "kvmem_store_size_bytes") == 16u << 20);
	ck_assert(prom_value(r.out, "kvmem_store_errors_total{op=\"write\"}") ==
		  0);
	snprintf(series, sizeof(series),
		 "kvmem_session_cold_bytes{session=\"%s\"}", sid);
	ck_assert(prom_value(r.out, series) == (double)cold_bytes);
	kvmem_check_run_free(&r);

	/* An acquire brings one sequence back. */
	ck_assert_int_eq(kvmem_seq_acquire(s[0]), 0);
	v = LIVE(&p, "tier", "tier");
	ck_assert_uint_eq(u64_at(v, "reloads"), per_seq);
	ck_assert_uint_eq(u64_at(v, "reload_bytes"), seq_bytes);
	ck_assert_uint_eq(u64_at(v, "reload_degraded"), 0);
	ck_assert_uint_eq(
		u64_at(json_get(json_get(v, "tiers"), "cold"), "pages"),
		cold - per_seq);
	json_free(v);
	CTL(&r, NULL, "-a", p.admin, "metrics");
	expect_status(&r, 0);
	ck_assert(prom_value(r.out, "kvmem_reloads_total") == (double)per_seq);
	ck_assert(prom_value(r.out, "kvmem_tier_pages{tier=\"cold\"}") ==
		  (double)(cold - per_seq));
	kvmem_check_run_free(&r);

	/* Targets that are not there. */
	CTL(&r, NULL, "-a", p.admin, "offload", "seq", "999", "999");
	expect_status(&r, 1);
	ck_assert_str_eq(r.out, "");
	ck_assert_str_eq(r.err,
			 "kvmemctl: offload seq 999 999: no session 999\n");
	kvmem_check_run_free(&r);
	CTL(&r, NULL, "-a", p.admin, "offload", "seq", sid, "999999");
	expect_status(&r, 1);
	EXPECT_HAS(r.err, "has no sequence 999999");
	kvmem_check_run_free(&r);

	/* The tier's keys change at run time. */
	v = LIVE(&p, "policy", "policy", "set", "tier.offload=yes");
	ck_assert(json_get(json_get(v, "policy"), "tier.offload")->u.b);
	json_free(v);
	v = LIVE(&p, "tier", "tier");
	ck_assert(json_get(json_get(v, "policy"), "offload")->u.b);
	json_free(v);

	for (i = 0; i < LIVE_SEQS; i++)
		kvmem_seq_free(s[i]);
	kvmem_close(c);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* Without store.path: tier says so, offload is refused, no store series. */
START_TEST(test_live_no_store)
{
	struct kvmemd_proc p;
	struct kvmem_run r;
	struct json *v;

	kvmemd_start(&p, LIVE_CONF, NULL);
	v = LIVE(&p, "tier", "tier");
	ck_assert_int_eq(json_get(v, "store")->type, JSON_NULL);
	json_free(v);
	CTL(&r, NULL, "-a", p.admin, "tier");
	expect_status(&r, 0);
	expect_line(&r, "no backing store (store.path is empty)");
	expect_line(&r, "cold 0 0 B");
	kvmem_check_run_free(&r);
	CTL(&r, NULL, "-a", p.admin, "offload");
	expect_status(&r, 1);
	ck_assert_str_eq(r.out, "");
	ck_assert_str_eq(
		r.err,
		"kvmemctl: offload: no backing store (set store.path)\n");
	kvmem_check_run_free(&r);
	CTL(&r, NULL, "-a", p.admin, "offload", "seq", "999", "999");
	expect_status(&r, 1);
	EXPECT_HAS(r.err, "no backing store");
	kvmem_check_run_free(&r);
	CTL(&r, NULL, "-a", p.admin, "metrics");
	expect_status(&r, 0);
	check_prometheus(r.out);
	ck_assert(prom_value(r.out, "kvmem_tier_pages{tier=\"cold\"}") == 0);
	ck_assert(prom_value(r.out, "kvmem_offloads_total") == 0);
	ck_assert_msg(!strstr(r.out, "kvmem_store_"), "%s", r.out);
	kvmem_check_run_free(&r);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* Injection is off unless the configuration allows it: EPERM, exit 1. */
START_TEST(test_live_inject_refused)
{
	struct kvmemd_proc p;
	struct kvmem_run r;

	kvmemd_start(&p, NULL, NULL);
	CTL(&r, NULL, "-a", p.admin, "inject", "pool", "--ber", "0.1", "--seed",
	    "1");
	expect_status(&r, 1);
	ck_assert_str_eq(r.out, "");
	EXPECT_HAS(r.err, "kvmemctl: inject pool ber 0.1 seed 1: ");
	EXPECT_HAS(r.err, "allow_inject");
	kvmem_check_run_free(&r);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* prefixes, prefix-drop and prefix-inject on blocks a session published. */
START_TEST(test_live_prefixes)
{
	const struct kvmem_geometry g = kvmemd_test_geo();
	const size_t n = (size_t)40 * g.layers * g.kv_heads * g.head_dim;
	struct kvmem_prefix_key keys[2];
	char hex[2 * KVMEM_PREFIX_KEY_BYTES + 1];
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	struct kvmemd_proc p;
	struct kvmem_run r;
	float *k = kvmem_check_xmalloc(n * sizeof(float));
	size_t i;

	for (i = 0; i < n; i++)
		k[i] = (float)(i % 13) / 13.0f;
	memset(keys, 0, sizeof(keys));
	keys[0].bytes[0] = 0xab;
	keys[1].bytes[0] = 0xcd;
	for (i = 0; i < KVMEM_PREFIX_KEY_BYTES; i++)
		snprintf(hex + 2 * i, 3, "%02x", keys[1].bytes[i]);
	kvmemd_start(&p, "[scrub]\nallow_inject = yes\n", NULL);
	c = kvmemd_connect(&p, 8u << 20);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append_all(s, k, k, 40), 0);
	ck_assert_int_eq(kvmem_prefix_publish(s, keys, 2), 2);

	CTL(&r, NULL, "-a", p.admin, "prefixes");
	expect_status(&r, 0);
	EXPECT_HAS(r.out, "kept       2 blocks, ");
	EXPECT_HAS(r.out, "; 1 tenants\n");
	EXPECT_HAS(r.out, "share      64.0 MiB a tenant now, at most 64.0 MiB");
	EXPECT_HAS(r.out, "publishes  2 blocks, 0 refused\n");
	expect_line(&r, "TENANT BLOCKS BYTES HITS MISSES PUBLISHED EVICTED "
			"EXPIRED DAMAGED CORRECTED");
	EXPECT_HAS(r.out, "expiry     unused for 1h 00m");
	ck_assert_msg(!strstr(r.out, "KEY"), "%s", r.out);
	kvmem_check_run_free(&r);
	CTL(&r, NULL, "-a", p.admin, "prefixes", "0");
	expect_status(&r, 0);
	EXPECT_HAS(r.out, hex);
	EXPECT_HAS(r.out, " 4-35 ");
	EXPECT_HAS(r.out, " 0-3 ");
	kvmem_check_run_free(&r);
	CTL(&r, NULL, "-a", p.admin, "prefix-inject", "0", "1", "--seed", "3");
	expect_status(&r, 0);
	expect_line(&r, "injected 4 bit errors into 4 pages");
	kvmem_check_run_free(&r);
	CTL(&r, NULL, "-a", p.admin, "prefix-drop", "0", hex);
	expect_status(&r, 0);
	expect_line(&r, "dropped 1 blocks");
	kvmem_check_run_free(&r);
	CTL(&r, NULL, "-a", p.admin, "metrics");
	expect_status(&r, 0);
	check_prometheus(r.out);
	ck_assert(prom_value(r.out, "kvmem_prefix_blocks") == 1);
	ck_assert(prom_value(r.out, "kvmem_prefix_published_total") == 2);
	ck_assert(prom_value(r.out, "kvmem_prefix_uids") == 1);
	ck_assert(prom_value(r.out, "kvmem_prefix_damaged_total") == 0);
	ck_assert(prom_value(r.out, "kvmem_prefix_expired_total") == 0);
	/* The patrol may have corrected the flips by now, or not. */
	ck_assert(prom_value(r.out, "kvmem_prefix_corrected_total") <= 4);
	kvmem_check_run_free(&r);
	CTL(&r, NULL, "-a", p.admin, "--json", "prefixes", "0");
	expect_status(&r, 0);
	EXPECT_HAS(r.out, "\"blocks\":1,");
	EXPECT_HAS(r.out, "\"token_start\":0,");
	kvmem_check_run_free(&r);

	kvmem_seq_free(s);
	kvmem_close(c);
	free(k);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* stats --watch on a live daemon: rates from the second sample on. */
START_TEST(test_live_watch)
{
	struct ctl_opts o = { .sigint_ms = 1200 };
	struct kvmemd_proc p;
	struct kvmem_run r;

	kvmemd_start(&p, LIVE_CONF, NULL);
	CTL(&r, &o, "-a", p.admin, "stats", "--watch", "0.3");
	expect_status(&r, 0);
	EXPECT_HAS(r.out, "(0.0/s)\n");
	EXPECT_HAS(r.out, "scrub rate  0 B/s\n");
	kvmem_check_run_free(&r);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * A user the file system lets through: kvmemd refuses with EACCES and
 * kvmemctl exits 4, whatever the command, unless the user is in
 * daemon.admin_group.
 */
START_TEST(test_live_denied_by_daemon)
{
	struct ctl_opts nobody = { .uid = 65534 };
	struct kvmemd_proc p;
	struct kvmem_run r;
	struct group *gr;
	char conf[128];
	gid_t admin_gid;

	if (geteuid()) {
		fprintf(stderr, "SKIP: test_live_denied_by_daemon: needs root "
				"to run kvmemctl as another uid\n");
		return;
	}
	/* Any group but root's and nobody's stands in for kvmem-admin. */
	setgrent();
	while ((gr = getgrent()) && (!gr->gr_gid || gr->gr_gid == 65534))
		;
	ck_assert_msg(gr, "no group to make the admin group");
	snprintf(conf, sizeof(conf), "[daemon]\nadmin_group = %s\n",
		 gr->gr_name);
	admin_gid = gr->gr_gid;
	endgrent();
	kvmemd_start(&p, conf, NULL);
	/* Open the way through the file system: kvmemd decides. */
	chmod(p.dir, 0755);
	chmod(p.admin, 0666);
	CTL(&r, &nobody, "-a", p.admin, "status");
	expect_status(&r, 4);
	ck_assert_str_eq(r.out, "");
	EXPECT_HAS(r.err, "kvmemctl: permission denied: kvmemctl needs root "
			  "or membership in group kvmem-admin\n"
			  "kvmemctl: kvmemd: ");
	kvmem_check_run_free(&r);
	CTL(&r, &nobody, "-a", p.admin, "metrics");
	expect_status(&r, 4);
	ck_assert_str_eq(r.out, "");
	kvmem_check_run_free(&r);
	nobody.group = admin_gid;
	CTL(&r, &nobody, "-a", p.admin, "status");
	expect_status(&r, 0);
	expect_line(&r, "ops 0");
	kvmem_check_run_free(&r);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

KVMEM_SUITE(kvmemctl)
{
	Suite *s = suite_create("kvmemctl");
	TCase *tc = tcase_create("spec");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_spec_tables);
	tcase_add_test(tc, test_spec_requests);
	tcase_add_test(tc, test_spec_since_age);
	tcase_add_test(tc, test_spec_json);
	tcase_add_test(tc, test_spec_metrics);
	tcase_add_test(tc, test_spec_metrics_escapes);
	tcase_add_test(tc, test_spec_remote_states);
	tcase_add_test(tc, test_metrics_http);
	tcase_add_test(tc, test_ops_series);
	tcase_add_test(tc, test_spec_no_store);
	tcase_add_test(tc, test_tier_budget_line);
	tcase_add_test(tc, test_spec_no_archive);
	tcase_add_test(tc, test_spec_store_unit);
	tcase_add_test(tc, test_spec_offload_errors);
	tcase_add_test(tc, test_spec_datagrams);
	tcase_add_test(tc, test_spec_error_replies);
	tcase_add_test(tc, test_spec_malformed_replies);
	tcase_add_test(tc, test_spec_wrong_types);
	tcase_add_test(tc, test_spec_oversized_datagram);
	tcase_add_test(tc, test_spec_control_characters);
	tcase_add_test(tc, test_usage_errors);
	tcase_add_test(tc, test_help_and_version);
	tcase_add_test(tc, test_admin_socket_env);
	tcase_add_test(tc, test_default_admin_socket);
	tcase_add_test(tc, test_spec_watch);
	tcase_add_test(tc, test_daemon_down);
	tcase_add_test(tc, test_denied_at_connect);
	suite_add_tcase(s, tc);
	tc = tcase_create("kvmemd");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_live_commands);
	tcase_add_test(tc, test_live_tier);
	tcase_add_test(tc, test_live_no_store);
	tcase_add_test(tc, test_live_inject_refused);
	tcase_add_test(tc, test_live_prefixes);
	tcase_add_test(tc, test_live_watch);
	tcase_add_test(tc, test_live_denied_by_daemon);
	suite_add_tcase(s, tc);
	tc = tcase_create("http");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_metrics_http_idle_peers);
	tcase_add_test(tc, test_metrics_http_full);
	suite_add_tcase(s, tc);
	return s;
}
