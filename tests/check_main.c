/*
 * check_main.c - the one test runner: every registered suite, one summary
 */
#include <stdio.h>
#include <stdlib.h>

#include "kvmem_check.h"

#define MAX_SUITES 64

static kvmem_suite_fn suites[MAX_SUITES];
static int nsuites;

void kvmem_check_register(kvmem_suite_fn fn)
{
	if (nsuites == MAX_SUITES) {
		fprintf(stderr, "kvmem-check: more than %d suites\n",
			MAX_SUITES);
		abort();
	}
	suites[nsuites++] = fn;
}

int main(void)
{
	SRunner *sr;
	int i, failed;

	if (!nsuites) {
		fprintf(stderr, "kvmem-check: no suites registered\n");
		return 1;
	}
	sr = srunner_create(suites[0]());
	for (i = 1; i < nsuites; i++)
		srunner_add_suite(sr, suites[i]());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
