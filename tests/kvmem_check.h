/*
 * kvmem_check.h - glue for the Check suites
 *
 * Each tests/check_*.c file defines its suites with KVMEM_SUITE(name) and
 * they register themselves before main() runs, so adding a file is all it
 * takes to add a suite. One runner, one summary line.
 *
 * Run one suite:  CK_RUN_SUITE=ecc build/tests/kvmem-check
 */
#ifndef KVMEM_CHECK_H
#define KVMEM_CHECK_H

#include <check.h>

typedef Suite *(*kvmem_suite_fn)(void);

void kvmem_check_register(kvmem_suite_fn fn);

#define KVMEM_SUITE(name)                                                    \
	static Suite *kvmem_suite_##name(void);                              \
	__attribute__((constructor)) static void kvmem_register_##name(void) \
	{                                                                    \
		kvmem_check_register(kvmem_suite_##name);                    \
	}                                                                    \
	static Suite *kvmem_suite_##name(void)

/*
 * Path of a built tool, from KVMEM_BUILD (set by make test) or "build".
 * Returns a static buffer.
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

#endif /* KVMEM_CHECK_H */
