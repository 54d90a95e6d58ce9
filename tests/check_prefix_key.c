/* SPDX-License-Identifier: MIT */
/*
 * check_prefix_key.c - SHA-256 and the keys of prefix blocks
 *
 * SHA-256 against the example values of FIPS 180-4 (NIST's "abc", the
 * 448- and 896-bit messages, a million 'a') and the empty message's well
 * known digest, and against Python's hashlib at every length around the
 * padding's edges. kvmem_prefix_keys() against the chain computed by
 * hashlib in a python3 run at test time, which shares nothing with the
 * library: the chain SGLang's HiCache uses to name pages, seeded with the
 * model's name when there is one. Without python3 those comparisons skip
 * and say so.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvmem/kvmem.h"
#include "kvmem_check.h"
#include "sha256.h"

static void to_hex(const uint8_t *d, size_t n, char *hex)
{
	size_t i;

	for (i = 0; i < n; i++)
		sprintf(hex + 2 * i, "%02x", d[i]);
}

/* The digest of @len bytes at @msg, as lower-case hex, into @hex[65]. */
static void sha256_hex(const void *msg, size_t len, char *hex)
{
	uint8_t d[KVMEM_SHA256_BYTES];

	kvmem__sha256(msg, len, d);
	to_hex(d, sizeof(d), hex);
}

START_TEST(test_sha256_fips_examples)
{
	static const struct {
		const char *msg, *digest;
	} ex[] = {
		{ "abc", "ba7816bf8f01cfea414140de5dae2223"
			 "b00361a396177a9cb410ff61f20015ad" },
		{ "", "e3b0c44298fc1c149afbf4c8996fb924"
		      "27ae41e4649b934ca495991b7852b855" },
		{ "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
		  "248d6a61d20638b8e5c026930c3e6039"
		  "a33ce45964ff2167f6ecedd419db06c1" },
		{ "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
		  "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
		  "cf5b16a778af8380036ce59e7b049237"
		  "0b249b11e8f07a51afac45037afee9d1" },
	};
	char hex[2 * KVMEM_SHA256_BYTES + 1];
	size_t i;

	for (i = 0; i < KVMEM_ARRAY_SIZE(ex); i++) {
		sha256_hex(ex[i].msg, strlen(ex[i].msg), hex);
		ck_assert_str_eq(hex, ex[i].digest);
	}
}
END_TEST

/* A million 'a', whole and in pieces of 1, 2, ... 127 bytes, again and
 * again, so that pieces end at every offset of a block. */
START_TEST(test_sha256_million_a)
{
	static const char exp[] = "cdc76e5c9914fb9281a1c7e284d73e67"
				  "f1809a48a497200e046d39ccc7112cd0";
	enum { N = 1000000 };
	char hex[2 * KVMEM_SHA256_BYTES + 1];
	uint8_t d[KVMEM_SHA256_BYTES];
	struct kvmem__sha256 ctx;
	uint8_t *a = kvmem_check_xmalloc(N);
	size_t off = 0, piece = 1;

	memset(a, 'a', N);
	sha256_hex(a, N, hex);
	ck_assert_str_eq(hex, exp);
	kvmem__sha256_init(&ctx);
	while (off < N) {
		size_t n = piece < N - off ? piece : N - off;

		kvmem__sha256_update(&ctx, a + off, n);
		off += n;
		piece = piece % 127 + 1;
	}
	kvmem__sha256_update(&ctx, NULL, 0);
	kvmem__sha256_final(&ctx, d);
	to_hex(d, sizeof(d), hex);
	ck_assert_str_eq(hex, exp);
	free(a);
}
END_TEST

/* python3, or NULL after saying why the test skips. */
static const char *python_or_skip(const char *what)
{
	const char *py = getenv("PYTHON");

	if (py && *py)
		return py;
	if (kvmem_check_have("python3"))
		return "python3";
	printf("SKIP: prefix_key: %s: no python3 in PATH to compute the "
	       "expected digests with hashlib\n",
	       what);
	fflush(stdout);
	return NULL;
}

/* Run @py on @script with the arguments @args (already quoted for the
 * shell) and return its stdout; the test fails unless it exits 0. */
static char *python_output(const char *py, const char *script, const char *args)
{
	char *cmd, *out = NULL, line[256];
	size_t len = 0;
	FILE *p, *o;
	int status;

	ck_assert_int_gt(asprintf(&cmd, "'%s' -c '%s' %s", py, script, args),
			 0);
	p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	o = open_memstream(&out, &len);
	ck_assert_ptr_nonnull(o);
	while (fgets(line, sizeof(line), p))
		fputs(line, o);
	status = pclose(p);
	fclose(o);
	ck_assert_msg(status == 0, "%s: exit status %d, output:\n%s", cmd,
		      status, out);
	free(cmd);
	return out;
}

/* Lengths 0 to 200 of bytes i * 7 + 3 cover every way the padding falls:
 * in the last block, filling it exactly, or spilling into another. */
static const char py_lengths[] =
	"import hashlib\n"
	"m = bytes((i * 7 + 3) % 256 for i in range(200))\n"
	"for n in range(201):\n"
	"    print(hashlib.sha256(m[:n]).hexdigest())\n";

START_TEST(test_sha256_lengths_hashlib)
{
	char hex[2 * KVMEM_SHA256_BYTES + 1], *out, *line, *save = NULL;
	const char *py = python_or_skip("SHA-256 of lengths 0 to 200");
	uint8_t m[200];
	size_t i;

	if (!py)
		return;
	for (i = 0; i < sizeof(m); i++)
		m[i] = (uint8_t)(i * 7 + 3);
	out = python_output(py, py_lengths, "");
	line = strtok_r(out, "\n", &save);
	for (i = 0; i <= sizeof(m); i++) {
		ck_assert_msg(line, "hashlib gave %zu digests, not 201", i);
		sha256_hex(m, i, hex);
		EXPECT(!strcmp(hex, line), "length %zu: %s, hashlib %s", i, hex,
		       line);
		line = strtok_r(NULL, "\n", &save);
	}
	ck_assert_ptr_null(line);
	free(out);
}
END_TEST

/* The tokens of the sequences below: every bit of a token id in use. */
static uint32_t token_of(uint32_t j)
{
	return j * 2654435761u + 12345u;
}

/*
 * The keys, one hex line each, of argv: sink_tokens, tokens_per_page,
 * ntokens and the model ("" for none). HiCache's chain, page by page, the
 * previous digest fed raw; a sink block first when there is one.
 */
static const char py_keys[] =
	"import hashlib, sys\n"
	"sink, tpp, n, model = (int(sys.argv[1]), int(sys.argv[2]),\n"
	"                       int(sys.argv[3]), sys.argv[4])\n"
	"tok = [(j * 2654435761 + 12345) % 2**32 for j in range(n)]\n"
	"prior = hashlib.sha256(model.encode()).digest() if model else b\"\"\n"
	"start = 0\n"
	"size = sink if sink else tpp\n"
	"while start + size <= n:\n"
	"    h = hashlib.sha256(prior)\n"
	"    for t in tok[start:start + size]:\n"
	"        h.update(t.to_bytes(4, \"little\", signed=False))\n"
	"    prior = h.digest()\n"
	"    print(h.hexdigest())\n"
	"    start += size\n"
	"    size = tpp\n";

static struct kvmem_cache *open_geo(uint32_t sink, uint32_t tpp)
{
	struct kvmem_geometry g = { .layers = 1,
				    .kv_heads = 1,
				    .head_dim = 64 };
	struct kvmem_cache *c = NULL;

	kvmem_geometry_default(&g);
	g.sink_tokens = sink;
	g.tokens_per_page = tpp;
	ck_assert_int_eq(kvmem_open_embedded(&g, 1u << 20, &c), 0);
	return c;
}

START_TEST(test_prefix_keys_hashlib)
{
	static const struct {
		uint32_t sink, tpp, ntokens;
	} geo[] = {
		{ 4, 16, 4 + 16 * 5 + 9 }, /* a trailing partial block */
		{ 0, 32, 32 * 4 }, /* whole blocks only */
		{ 4, 32, 3 }, /* not even the sink block */
		{ 0, 16, 16 * 64 + 15 },
	};
	static const char *const models[] = {
		NULL,
		"",
		"meta-llama/Llama-3.1-8B@0e9e39f tp=0/2",
	};
	struct kvmem_prefix_key keys[80];
	char hex[2 * KVMEM_SHA256_BYTES + 1], args[256], *out, *line;
	char *save = NULL;
	const char *py = python_or_skip("keys of prefix blocks");
	uint32_t *tok, j;
	size_t gi, mi;
	int n, i;

	if (!py)
		return;
	for (gi = 0; gi < KVMEM_ARRAY_SIZE(geo); gi++) {
		struct kvmem_cache *c = open_geo(geo[gi].sink, geo[gi].tpp);

		tok = kvmem_check_xmalloc(geo[gi].ntokens * sizeof(*tok));
		for (j = 0; j < geo[gi].ntokens; j++)
			tok[j] = token_of(j);
		for (mi = 0; mi < KVMEM_ARRAY_SIZE(models); mi++) {
			const char *m = models[mi] ? models[mi] : "";

			snprintf(args, sizeof(args), "%u %u %u '%s'",
				 geo[gi].sink, geo[gi].tpp, geo[gi].ntokens, m);
			out = python_output(py, py_keys, args);
			n = kvmem_prefix_keys(c, models[mi], tok,
					      geo[gi].ntokens, keys,
					      KVMEM_ARRAY_SIZE(keys));
			ck_assert_int_ge(n, 0);
			line = strtok_r(out, "\n", &save);
			for (i = 0; i < n; i++) {
				ck_assert_msg(line,
					      "sink %u tpp %u: hashlib keyed "
					      "%d blocks, kvmem_prefix_keys() "
					      "%d",
					      geo[gi].sink, geo[gi].tpp, i, n);
				to_hex(keys[i].bytes, sizeof(keys[i].bytes),
				       hex);
				EXPECT(!strcmp(hex, line),
				       "sink %u tpp %u model \"%s\" block %d: "
				       "%s, hashlib %s",
				       geo[gi].sink, geo[gi].tpp, m, i, hex,
				       line);
				line = strtok_r(NULL, "\n", &save);
			}
			ck_assert_msg(!line,
				      "sink %u tpp %u: hashlib keyed more "
				      "than the %d blocks of "
				      "kvmem_prefix_keys()",
				      geo[gi].sink, geo[gi].tpp, n);
			free(out);
		}
		free(tok);
		kvmem_close(c);
	}
}
END_TEST

/* Whole blocks only, no more than there is room for, and a prefix's keys
 * are the start of a longer sequence's. */
START_TEST(test_prefix_keys_counts)
{
	struct kvmem_cache *c = open_geo(4, 16), *flat = open_geo(0, 16);
	struct kvmem_prefix_key keys[8], more[8], other[8];
	uint32_t tok[4 + 16 * 6], j;

	for (j = 0; j < KVMEM_ARRAY_SIZE(tok); j++)
		tok[j] = token_of(j);
	ck_assert_int_eq(kvmem_prefix_keys(c, NULL, tok, 4 + 16 * 6, keys, 8),
			 7);
	/* One token short of a block: that block gets no key. */
	ck_assert_int_eq(
		kvmem_prefix_keys(c, NULL, tok, 4 + 16 * 6 - 1, more, 8), 6);
	EXPECT_MEM(more, keys, 6 * sizeof(keys[0]), "%s", "prefix");
	ck_assert_int_eq(kvmem_prefix_keys(c, NULL, tok, 3, more, 8), 0);
	ck_assert_int_eq(kvmem_prefix_keys(c, NULL, tok, 4, more, 8), 1);
	EXPECT_MEM(more, keys, sizeof(keys[0]), "%s", "sink block");
	ck_assert_int_eq(kvmem_prefix_keys(c, NULL, tok, 0, more, 8), 0);
	ck_assert_int_eq(kvmem_prefix_keys(c, NULL, NULL, 0, more, 8), 0);
	/* Room for 3: 3 keyed, the rest of the array untouched. */
	memset(more, 0xa5, sizeof(more));
	memset(other, 0xa5, sizeof(other));
	ck_assert_int_eq(kvmem_prefix_keys(c, NULL, tok, 4 + 16 * 6, more, 3),
			 3);
	EXPECT_MEM(more, keys, 3 * sizeof(keys[0]), "%s", "room for 3");
	EXPECT_MEM(&more[3], &other[3], 5 * sizeof(keys[0]), "%s",
		   "past the room");
	ck_assert_int_eq(kvmem_prefix_keys(c, NULL, tok, 4 + 16 * 6, NULL, 0),
			 0);
	/* "" is no model; a model changes every key, and so does the
	 * geometry (block 0 is another block without the sink page). */
	ck_assert_int_eq(kvmem_prefix_keys(c, "", tok, 4 + 16 * 6, more, 8), 7);
	EXPECT_MEM(more, keys, 7 * sizeof(keys[0]), "%s", "\"\" as NULL");
	ck_assert_int_eq(kvmem_prefix_keys(c, "m", tok, 4 + 16 * 6, more, 8),
			 7);
	ck_assert_int_eq(
		kvmem_prefix_keys(flat, NULL, tok, 4 + 16 * 6, other, 8), 6);
	for (j = 0; j < 7; j++) {
		EXPECT(memcmp(&more[j], &keys[j], sizeof(keys[j])),
		       "block %u: the model changed nothing", j);
		EXPECT(j >= 6 || memcmp(&other[j], &keys[j], sizeof(keys[j])),
		       "block %u: the sink page changed nothing", j);
	}
	kvmem_close(flat);
	kvmem_close(c);
}
END_TEST

START_TEST(test_prefix_keys_einval)
{
	struct kvmem_cache *c = open_geo(4, 16);
	struct kvmem_prefix_key keys[2];
	uint32_t tok[20] = { 0 };

	ck_assert_int_eq(kvmem_prefix_keys(NULL, NULL, tok, 20, keys, 2),
			 -EINVAL);
	ck_assert_int_eq(kvmem_prefix_keys(c, NULL, NULL, 20, keys, 2),
			 -EINVAL);
	ck_assert_int_eq(kvmem_prefix_keys(c, NULL, tok, 20, NULL, 2), -EINVAL);
	ck_assert_int_eq(kvmem_prefix_keys(c, NULL, tok, 20, keys, 2), 2);
	kvmem_close(c);
}
END_TEST

KVMEM_SUITE(prefix_key)
{
	Suite *s = suite_create("prefix_key");
	TCase *tc = tcase_create("sha256");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_sha256_fips_examples);
	tcase_add_test(tc, test_sha256_million_a);
	tcase_add_test(tc, test_sha256_lengths_hashlib);
	suite_add_tcase(s, tc);
	tc = tcase_create("keys");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_prefix_keys_hashlib);
	tcase_add_test(tc, test_prefix_keys_counts);
	tcase_add_test(tc, test_prefix_keys_einval);
	suite_add_tcase(s, tc);
	return s;
}
