/* SPDX-License-Identifier: MIT */
/*
 * kvmem_check.h - glue for the Check suites
 *
 * Each tests/check_*.c file defines its suites with KVMEM_SUITE(name) and
 * they register themselves before main() runs, so adding a file is all it
 * takes to add a suite; @name must be the suite_create() name. One runner,
 * one summary line (check_main.c).
 *
 * Run some suites:  CK_RUN_SUITE=ecc_h84,page build/tests/kvmem-check
 * All but some:     CK_EXCLUDE_SUITES=cuda,readme build/tests/kvmem-check
 * One at a time:    KVMEM_CHECK_JOBS=1 build/tests/kvmem-check
 */
#ifndef KVMEM_CHECK_H
#define KVMEM_CHECK_H

#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

struct kvmem_geometry;
struct kvmem_rng;

typedef Suite *(*kvmem_suite_fn)(void);

void kvmem_check_register(const char *name, kvmem_suite_fn fn);

#define KVMEM_SUITE(name)                                                    \
	static Suite *kvmem_suite_##name(void);                              \
	__attribute__((constructor)) static void kvmem_register_##name(void) \
	{                                                                    \
		kvmem_check_register(#name, kvmem_suite_##name);             \
	}                                                                    \
	static Suite *kvmem_suite_##name(void)

/*
 * The source tree (KVMEM_SRCDIR, set by make test; else ".") and the build
 * directory (KVMEM_BUILD; else "build").
 */
const char *kvmem_check_srcdir(void);
const char *kvmem_check_builddir(void);

/*
 * "FAKECUDA_SIMT=" and the absolute path of libkvmem-simt.so: in the
 * environment of a process on the fake driver (a kvmemd, a tool), its
 * launches run the kernels on host threads. A static buffer.
 */
const char *kvmem_check_simt_env(void);

/* The Makefile's VERSION, the one the library and the tools report. */
const char *kvmem_check_version(void);

/* Whether @name is an executable in one of PATH's directories. */
int kvmem_check_have(const char *name);

/*
 * Path of a built tool, under kvmem_check_builddir(). Returns a static
 * buffer.
 */
const char *kvmem_check_tool(const char *name);

/* A finished run of a tool. */
struct kvmem_run {
	int status; /* exit status, or 128 + signal number */
	char *out; /* stdout; "" when it went to a file */
	char *err; /* stderr */
};

/*
 * Run the built tool @name (see kvmem_check_tool()) with the NULL-terminated
 * arguments @args, its stdin read from @input. Its stdout goes to @out_path
 * when that is not NULL (to provoke write errors), else is captured. Fails
 * the test when the tool cannot be started.
 */
void kvmem_check_run(struct kvmem_run *r, const char *name, const char *input,
		     const char *out_path, const char *const *args);
void kvmem_check_run_free(struct kvmem_run *r);

/* KVMEM_RUN(&r, "kvmem-ecc", "52\n", "decode", "-c", "h74") */
#define KVMEM_RUN(r, name, input, ...)        \
	kvmem_check_run(r, name, input, NULL, \
			(const char *const[]){ __VA_ARGS__, NULL })

/*
 * ck_assert_*() records a mark point (a write to Check's pipe) on every
 * success, which costs more than what it checks in the exhaustive loops.
 * These fail with both operands and the case at hand (a printf format and
 * at least one argument) and cost nothing when they pass.
 */
#define EXPECT(cond, fmt, ...)                                        \
	do {                                                          \
		if (!(cond))                                          \
			ck_abort_msg("%s; " fmt, #cond, __VA_ARGS__); \
	} while (0)

#define EXPECT_EQ(a, b, fmt, ...)                                        \
	do {                                                             \
		uintmax_t x_a_ = (uintmax_t)(a), x_b_ = (uintmax_t)(b);  \
		if (x_a_ != x_b_)                                        \
			ck_abort_msg("(%s) == (%s): 0x%jx (%jd) != "     \
				     "0x%jx (%jd); " fmt,                \
				     #a, #b, x_a_, (intmax_t)x_a_, x_b_, \
				     (intmax_t)x_b_, __VA_ARGS__);       \
	} while (0)

/* Same float value (+0 and -0 alike), printed exactly when not. */
#define EXPECT_FEQ(got, exp, fmt, ...)                                         \
	do {                                                                   \
		float x_g_ = (got), x_e_ = (exp);                              \
		if (!(x_g_ == x_e_))                                           \
			ck_abort_msg("%s == %s: %.9g (%a) != %.9g (%a); " fmt, \
				     #got, #exp, x_g_, x_g_, x_e_, x_e_,       \
				     __VA_ARGS__);                             \
	} while (0)

/* |got - exp| <= tol, in double. */
#define EXPECT_NEAR(got, exp, tol, fmt, ...)                                  \
	do {                                                                  \
		double x_g_ = (got), x_e_ = (exp), x_t_ = (tol);              \
		if (!(fabs(x_g_ - x_e_) <= x_t_))                             \
			ck_abort_msg("|%s - %s| <= %s: |%.9g - %.9g| = %.3g " \
				     "> %.3g; " fmt,                          \
				     #got, #exp, #tol, x_g_, x_e_,            \
				     fabs(x_g_ - x_e_), x_t_, __VA_ARGS__);   \
	} while (0)

/* memcmp that names the first differing byte. */
#define EXPECT_MEM(got, exp, len, fmt, ...)                                  \
	do {                                                                 \
		size_t x_off_ = kvmem_check_mem_diff((got), (exp), (len));   \
		if (x_off_ != (size_t)-1)                                    \
			ck_abort_msg("%s vs %s: byte %zu of %zu: 0x%02x != " \
				     "0x%02x; " fmt,                         \
				     #got, #exp, x_off_, (size_t)(len),      \
				     ((const uint8_t *)(got))[x_off_],       \
				     ((const uint8_t *)(exp))[x_off_],       \
				     __VA_ARGS__);                           \
	} while (0)

/*
 * The whole file at @path, NUL-terminated, its size in *@size unless that is
 * NULL; fails the test when it cannot be read. free() it.
 */
char *kvmem_check_read_file(const char *path, size_t *size);

/*
 * A fresh directory /tmp/kvmem-@name-XXXXXX into @dir (@dir[0] = 0 when it
 * cannot be made: each test using it then fails), and its removal, for a
 * directory that holds plain files only. For Check's unchecked fixtures.
 */
void kvmem_check_tmpdir_make(char *dir, size_t len, const char *name);
void kvmem_check_tmpdir_remove(const char *dir);

/* Create or truncate @path and write @text to it, or fail the test. */
void kvmem_check_write_file(const char *path, const char *text);

/* The first byte at which @a and @b differ, or (size_t)-1. */
size_t kvmem_check_mem_diff(const void *a, const void *b, size_t len);

/* malloc() that fails the test instead of returning NULL (also for 0). */
void *kvmem_check_xmalloc(size_t len);

/* @len bytes of @r's stream at @buf. */
void kvmem_check_fill_random(struct kvmem_rng *r, void *buf, size_t len);

/*
 * @len bytes that end where an inaccessible page begins: a read or write one
 * byte past them faults, sanitizer or not (GCC's ASan does not instrument
 * masked vector loads and stores). kvmem_check_guard_alloc() returns their
 * start (->p); kvmem_check_guard_free() unmaps them.
 */
struct kvmem_check_guarded {
	void *map;
	size_t maplen;
	uint8_t *p;
};

uint8_t *kvmem_check_guard_alloc(struct kvmem_check_guarded *g, size_t len);
void kvmem_check_guard_free(struct kvmem_check_guarded *g);

/*
 * A value of a mixed distribution: roughly normal around 0 with magnitude
 * @mag, with exact zeros, outliers and exact multiples of mag / 8 (which
 * make exact ties against power-of-two scales) mixed in.
 */
float kvmem_check_rnd_value(struct kvmem_rng *r, double mag);

/* A geometry with these fields, the rest zero. */
struct kvmem_geometry kvmem_check_geo(uint32_t layers, uint32_t kv_heads,
				      uint32_t head_dim, uint32_t tpp,
				      uint32_t group, uint32_t sink, int fmt,
				      int codec, int key_scales);

#endif /* KVMEM_CHECK_H */
