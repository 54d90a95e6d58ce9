/* SPDX-License-Identifier: MIT */
/*
 * check_python.c - the Python package (python/kvmem), by its own tests
 *
 * Runs python/tests (unittest) with the package of the source tree
 * (KVMEM_SRCDIR, else the working directory) and the library and daemon of
 * the build (KVMEM_BUILD), under the first Python that has NumPy: $PYTHON,
 * Debian's /usr/bin/python3 (where scripts/install-deps.sh installs
 * python3-numpy), or python3 from PATH. Without one it skips and says so,
 * as it does in a sanitizer build, whose libkvmem cannot be loaded into an
 * interpreter that was not built with the sanitizers: the plain build runs
 * these tests.
 *
 * test_pip_install_venv installs the package the way python/README.md
 * says, offline: pip install --no-build-isolation --no-index into a venv
 * with the system's site-packages (NumPy, setuptools, wheel), from a copy
 * of python/ so that the build leaves nothing in the source tree; then
 * imports it from the venv with no KVMEM_LIB, the library found on the
 * loader's path (LD_LIBRARY_PATH=build), and checks its metadata version.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "kvmem_check.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif

/* Whether @python runs and imports NumPy. */
static int has_numpy(const char *python)
{
	char cmd[PATH_MAX + 64];

	snprintf(cmd, sizeof(cmd), "'%s' -c 'import numpy' >/dev/null 2>&1",
		 python);
	return system(cmd) == 0;
}

static const char *pick_python(void)
{
	const char *cands[] = { getenv("PYTHON"), "/usr/bin/python3",
				"python3" };
	size_t i;

	for (i = 0; i < sizeof(cands) / sizeof(cands[0]); i++)
		if (cands[i] && *cands[i] && has_numpy(cands[i]))
			return cands[i];
	return NULL;
}

START_TEST(test_python_package)
{
	char src[PATH_MAX], build[PATH_MAX], line[1024], *cmd;
	const char *python;
	int status;
	char *out = NULL;
	size_t len = 0;
	FILE *p, *o;

#ifdef SANITIZED
	fprintf(stderr, "SKIP: python: a sanitizer build's libkvmem does not "
			"load into python3; the plain build runs these\n");
	return;
#endif
	python = pick_python();
	if (!python) {
		fprintf(stderr, "SKIP: python: no python3 with NumPy "
				"(python3-numpy)\n");
		return;
	}
	ck_assert_ptr_nonnull(realpath(kvmem_check_srcdir(), src));
	ck_assert_ptr_nonnull(realpath(kvmem_check_builddir(), build));
	ck_assert_int_gt(
		asprintf(&cmd,
			 "cd '%s' && PYTHONPATH='%s/python' "
			 "KVMEM_LIB='%s/libkvmem.so' KVMEM_BUILD='%s' "
			 "PYTHONDONTWRITEBYTECODE=1 '%s' -m unittest discover "
			 "-s python/tests -v 2>&1",
			 src, src, build, build, python),
		0);
	p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	free(cmd);
	o = open_memstream(&out, &len);
	ck_assert_ptr_nonnull(o);
	while (fgets(line, sizeof(line), p)) {
		fputs(line, o);
		if (strstr(line, "... skipped"))
			fprintf(stderr, "SKIP: python: %s", line);
	}
	status = pclose(p);
	fclose(o);
	ck_assert_msg(WIFEXITED(status) && !WEXITSTATUS(status),
		      "%s: python/tests failed:\n%s", python, out);
	ck_assert_msg(strstr(out, "\nOK"), "%s", out);
	free(out);
}
END_TEST

/* Run @script with sh; its output (both streams) in *@out. */
static int run_sh(const char *script, char **out)
{
	char line[1024];
	size_t len = 0;
	FILE *p, *o;
	int status;

	*out = NULL;
	p = popen(script, "r");
	ck_assert_ptr_nonnull(p);
	o = open_memstream(out, &len);
	ck_assert_ptr_nonnull(o);
	while (fgets(line, sizeof(line), p))
		fputs(line, o);
	status = pclose(p);
	fclose(o);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

START_TEST(test_pip_install_venv)
{
	char src[PATH_MAX], build[PATH_MAX], dir[PATH_MAX], *cmd, *out;
	const char *python, *tmp = getenv("TMPDIR");
	const char *ver = kvmem_check_version();
	int st;

#ifdef SANITIZED
	fprintf(stderr, "SKIP: python: pip install: a sanitizer build's "
			"libkvmem does not load into python3\n");
	return;
#endif
	python = pick_python();
	if (!python) {
		fprintf(stderr, "SKIP: python: pip install: no python3 with "
				"NumPy (python3-numpy)\n");
		return;
	}
	ck_assert_int_gt(asprintf(&cmd,
				  "'%s' -c 'import ensurepip, venv, setuptools, "
				  "wheel' >/dev/null 2>&1",
				  python),
			 0);
	st = system(cmd);
	free(cmd);
	if (st) {
		fprintf(stderr, "SKIP: python: pip install: %s lacks venv, "
				"setuptools or wheel (python3-venv, "
				"python3-setuptools, python3-wheel)\n",
			python);
		return;
	}
	ck_assert_ptr_nonnull(realpath(kvmem_check_srcdir(), src));
	ck_assert_ptr_nonnull(realpath(kvmem_check_builddir(), build));
	snprintf(dir, sizeof(dir), "%s/kvmem-pip-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_gt(
		asprintf(&cmd,
			 "set -e; cd '%s'; mkdir src; "
			 "cp -R '%s/python/pyproject.toml' '%s/python/README.md' "
			 "'%s/python/kvmem' src/; "
			 "rm -rf src/kvmem/__pycache__ src/kvmem/_install.py; "
			 "'%s' -m venv --system-site-packages v; "
			 "v/bin/pip install --no-build-isolation --no-index "
			 "./src 2>&1; "
			 "env -u KVMEM_LIB -u PYTHONPATH "
			 "LD_LIBRARY_PATH='%s' PKG_CONFIG=false v/bin/python -c "
			 "'import importlib.metadata as m, kvmem; "
			 "print(kvmem.__file__.startswith(\"%s/v/\"), "
			 "kvmem.library_path, kvmem.__version__, "
			 "m.version(\"kvmem\"), "
			 "kvmem.Geometry(2, 8, 128).codec)' 2>&1",
			 dir, src, src, src, python, build, dir),
		0);
	st = run_sh(cmd, &out);
	free(cmd);
	ck_assert_msg(st == 0, "pip install into a venv: exit %d:\n%s", st,
		      out);
	ck_assert_int_gt(
		asprintf(&cmd, "\nTrue libkvmem.so.0 %s %s h84\n", ver, ver),
		0);
	ck_assert_msg(strstr(out, cmd) != NULL, "no \"%s\" in:\n%s", cmd + 1,
		      out);
	free(cmd);
	free(out);
	ck_assert_int_gt(asprintf(&cmd, "rm -rf '%s'", dir), 0);
	ck_assert_int_eq(system(cmd), 0);
	free(cmd);
}
END_TEST

KVMEM_SUITE(python)
{
	Suite *s = suite_create("python");
	TCase *tc = tcase_create("python");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_python_package);
	tcase_add_test(tc, test_pip_install_venv);
	suite_add_tcase(s, tc);
	return s;
}
