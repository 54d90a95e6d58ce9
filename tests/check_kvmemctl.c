/*
 * check_kvmemctl.c - the JSON reader kvmemctl reads kvmemd's replies with
 *
 * json: the reader against valid and invalid text, truncation at every
 * byte, nesting and size limits, and mutated documents (no input crashes
 * it; what it accepts prints back to the same text).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tools/json.h"
#include "kvmem_check.h"
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
