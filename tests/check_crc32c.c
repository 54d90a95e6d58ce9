/* SPDX-License-Identifier: MIT */
/*
 * check_crc32c.c - CRC-32C against a bitwise reference and published values
 *
 * The reference (ref_crc32c() of ecc_ref.c) is the textbook bit-at-a-time
 * loop over the reflected polynomial 0x82f63b78, with no tables, so it
 * shares nothing with either library path (slicing-by-8 tables, the SSE4.2
 * instruction). The check values are the catalogue's ("123456789") and RFC
 * 3720's (iSCSI, B.4).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ecc_ref.h"
#include "internal.h"
#include "kvmem/crc32c.h"
#include "kvmem_check.h"
#include "rng.h"

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);

/* The paths under test; the SSE4.2 one only where the CPU has it. */
static unsigned int crc_paths(crc_fn *fn, const char **name)
{
	unsigned int n = 0;

	fn[n] = kvmem_crc32c;
	name[n++] = "kvmem_crc32c";
	fn[n] = kvmem__crc32c_sw;
	name[n++] = "sw";
	if (kvmem__cpu_has_sse42()) {
		fn[n] = kvmem__crc32c_sse42;
		name[n++] = "sse42";
	}
	return n;
}

START_TEST(test_crc32c_check_values)
{
	uint8_t buf[32];
	crc_fn fn[3];
	const char *name[3];
	unsigned int n = crc_paths(fn, name), i, j;

	ck_assert_uint_eq(ref_crc32c(0, "123456789", 9), 0xe3069283u);
	for (i = 0; i < n; i++) {
		ck_assert_msg(fn[i](0, "123456789", 9) == 0xe3069283u,
			      "%s(\"123456789\") = 0x%08x, expected 0xe3069283",
			      name[i], fn[i](0, "123456789", 9));
		/* Nothing in, the CRC out unchanged. */
		ck_assert_uint_eq(fn[i](0, buf, 0), 0);
		ck_assert_uint_eq(fn[i](0xe3069283u, buf, 0), 0xe3069283u);
		/* RFC 3720 B.4: 32 bytes of 0, of 0xff, 0..31 and 31..0. */
		memset(buf, 0, sizeof(buf));
		ck_assert_uint_eq(fn[i](0, buf, 32), 0x8a9136aau);
		memset(buf, 0xff, sizeof(buf));
		ck_assert_uint_eq(fn[i](0, buf, 32), 0x62a8ab43u);
		for (j = 0; j < 32; j++)
			buf[j] = (uint8_t)j;
		ck_assert_uint_eq(fn[i](0, buf, 32), 0x46dd794eu);
		for (j = 0; j < 32; j++)
			buf[j] = (uint8_t)(31 - j);
		ck_assert_uint_eq(fn[i](0, buf, 32), 0x113fdb5cu);
	}
	/* The reference agrees with the RFC too. */
	memset(buf, 0, sizeof(buf));
	ck_assert_uint_eq(ref_crc32c(0, buf, 32), 0x8a9136aau);
}
END_TEST

/* crc(a ++ b) = crc(crc(a), b) for every split of a buffer, on every path. */
START_TEST(test_crc32c_resumable)
{
	enum { N = 523 };
	uint8_t buf[N];
	struct kvmem_rng r;
	crc_fn fn[3];
	const char *name[3];
	unsigned int n = crc_paths(fn, name), i;
	uint32_t whole, got;
	size_t s, t;

	kvmem_rng_seed(&r, 0xc2c);
	kvmem_check_fill_random(&r, buf, N);
	whole = ref_crc32c(0, buf, N);
	for (i = 0; i < n; i++) {
		ck_assert_uint_eq(fn[i](0, buf, N), whole);
		for (s = 0; s <= N; s++) {
			got = fn[i](fn[i](0, buf, s), buf + s, N - s);
			if (got != whole)
				ck_abort_msg("%s split at %zu: 0x%08x != "
					     "0x%08x",
					     name[i], s, got, whole);
		}
		/* Three pieces, split at an odd stride. */
		for (s = 0; s <= N; s += 37)
			for (t = s; t <= N; t += 11) {
				got = fn[i](
					fn[i](fn[i](0, buf, s), buf + s, t - s),
					buf + t, N - t);
				if (got != whole)
					ck_abort_msg("%s split at %zu, %zu: "
						     "0x%08x != 0x%08x",
						     name[i], s, t, got, whole);
			}
	}
}
END_TEST

/*
 * Software and SSE4.2 paths against the reference: every length to 300 and
 * some long ones, at every alignment mod 16, from random starting CRCs.
 */
START_TEST(test_crc32c_paths_agree)
{
	static const size_t longs[] = { 1024, 4095, 4096, 4097, 65536 + 13 };
	struct kvmem_rng r;
	uint8_t *mem;
	size_t len, off, i;
	uint32_t init, exp, sw, hw;
	int have_hw = kvmem__cpu_has_sse42();

	if (!have_hw) {
		printf("SKIP: crc32c paths agree: no SSE4.2 on this CPU (or "
		       "KVMEM_SIMD=portable); the SSE4.2 CRC was not "
		       "compared, the software one still is\n");
		fflush(stdout);
	}
	kvmem_rng_seed(&r, 0x55e42);
	mem = malloc(70000 + 16);
	ck_assert_ptr_nonnull(mem);
	kvmem_check_fill_random(&r, mem, 70000 + 16);
	for (len = 0; len < 300 + KVMEM_ARRAY_SIZE(longs); len++) {
		size_t l = len < 300 ? len : longs[len - 300];

		for (off = 0; off < 16; off++) {
			init = (uint32_t)kvmem_rng_next(&r);
			exp = ref_crc32c(init, mem + off, l);
			sw = kvmem__crc32c_sw(init, mem + off, l);
			if (sw != exp)
				ck_abort_msg("sw len %zu off %zu init 0x%08x: "
					     "0x%08x != 0x%08x",
					     l, off, init, sw, exp);
			if (!have_hw)
				continue;
			hw = kvmem__crc32c_sse42(init, mem + off, l);
			if (hw != exp)
				ck_abort_msg("sse42 len %zu off %zu init "
					     "0x%08x: 0x%08x != 0x%08x",
					     l, off, init, hw, exp);
		}
	}
	/* A single flipped bit anywhere changes the CRC. */
	exp = kvmem_crc32c(0, mem, 256);
	for (i = 0; i < 256 * 8; i++) {
		mem[i / 8] ^= (uint8_t)(1u << (i % 8));
		if (kvmem_crc32c(0, mem, 256) == exp)
			ck_abort_msg("flip of bit %zu not seen", i);
		mem[i / 8] ^= (uint8_t)(1u << (i % 8));
	}
	free(mem);
}
END_TEST

typedef void (*runs_fn)(const void *, size_t, size_t, size_t, uint32_t *);

/*
 * kvmem__crc32c_runs(), its software and SSE4.2 versions: each run's CRC
 * against the reference of that run alone, for runs of 1 .. 70 bytes, 0
 * .. 9 of them, the last one whole or cut anywhere, or @total past them
 * (as page.c's checks pass it, 64 runs at a time); the bytes end at a
 * page that cannot be read, so a version that reads past @total faults,
 * and nothing is written past out[n - 1].
 */
START_TEST(test_crc32c_runs)
{
	struct kvmem_check_guarded g;
	uint8_t *end = kvmem_check_guard_alloc(&g, 11 * 70) + 11 * 70;
	runs_fn fn[3] = { kvmem__crc32c_runs, kvmem__crc32c_runs_sw,
			  kvmem__crc32c_runs_sse42 };
	const char *name[3] = { "kvmem__crc32c_runs", "sw", "sse42" };
	const unsigned int nfn = kvmem__cpu_has_sse42() ? 3 : 2;
	uint32_t out[10], want;
	size_t len, n, total, j;
	struct kvmem_rng r;
	unsigned int f;

	kvmem_rng_seed(&r, 0xc7c5);
	kvmem_check_fill_random(&r, g.p, 11 * 70);
	for (len = 1; len <= 70; len++)
		for (n = 0; n <= 9; n++)
			for (total = n ? (n - 1) * len + 1 : 0;
			     total <= (n + 2) * len; total++) {
				const uint8_t *buf = end - total;

				for (f = 0; f < nfn; f++) {
					memset(out, 0xee, sizeof(out));
					fn[f](buf, len, total, n, out);
					for (j = 0; j < n; j++) {
						want = ref_crc32c(
							0, buf + j * len,
							total - j * len < len
								? total - j * len
								: len);
						if (out[j] != want)
							ck_abort_msg(
								"%s: run %zu of %zu, "
								"%zu bytes each, %zu "
								"in all: 0x%08x != "
								"0x%08x",
								name[f], j, n,
								len, total,
								out[j], want);
					}
					ck_assert_msg(out[n] == 0xeeeeeeeeu,
						      "%s: wrote past run %zu",
						      name[f], n);
				}
			}
	kvmem_check_guard_free(&g);
}
END_TEST

KVMEM_SUITE(crc32c)
{
	Suite *s = suite_create("crc32c");
	TCase *tc = tcase_create("crc32c");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_crc32c_check_values);
	tcase_add_test(tc, test_crc32c_resumable);
	tcase_add_test(tc, test_crc32c_paths_agree);
	tcase_add_test(tc, test_crc32c_runs);
	suite_add_tcase(s, tc);
	return s;
}
