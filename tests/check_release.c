/* SPDX-License-Identifier: MIT */
/*
 * check_release.c - what a release carries: one version, a license, a
 * changelog
 *
 *   - the Makefile's VERSION is what kvmem_version() returns (from the
 *     static and the shared library), what kvmemd, kvmemctl, kvmem-bench,
 *     kvmem-ecc and kvmem-eval --version print, the release CHANGELOG.md
 *     starts with, and the Python package's __version__
 *     (python/kvmem/_version.py);
 *   - LICENSE is the MIT license of the kvmem authors, and every source
 *     file git tracks says so in an SPDX-License-Identifier line at its
 *     top (skipped, with a message, outside a git checkout).
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvmem/kvmem.h"
#include "kvmem_check.h"

/* The Makefile's "VERSION := x.y.z", in a static buffer. */
START_TEST(test_library_version)
{
	const char *(*shared)(void);
	char path[PATH_MAX];
	void *h;

	ck_assert_str_eq(kvmem_version(), kvmem_check_version());
	snprintf(path, sizeof(path), "%s/libkvmem.so.0",
		 kvmem_check_builddir());
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	ck_assert_msg(h, "dlopen %s: %s", path, dlerror());
	*(void **)&shared = dlsym(h, "kvmem_version");
	ck_assert_ptr_nonnull(shared);
	ck_assert_str_eq(shared(), kvmem_check_version());
	dlclose(h);
}
END_TEST

/* @tool --version prints "@name VERSION" and then @rest. */
static void expect_version(const char *tool, const char *name,
			   const char *rest)
{
	struct kvmem_run r;
	char want[128];

	snprintf(want, sizeof(want), "%s %s%s", name, kvmem_check_version(), rest);
	KVMEM_RUN(&r, tool, "", "--version");
	ck_assert_int_eq(r.status, 0);
	ck_assert_msg(!strncmp(r.out, want, strlen(want)),
		      "%s --version: \"%s\", not \"%s...\"", tool, r.out,
		      want);
	kvmem_check_run_free(&r);
}

START_TEST(test_programs_version)
{
	expect_version("../daemon/kvmemd", "kvmemd", " (ABI ");
	expect_version("kvmemctl", "kvmemctl", "\n");
	expect_version("kvmem-bench", "kvmem-bench", "\n");
	expect_version("kvmem-ecc", "kvmem-ecc", "\n");
	expect_version("kvmem-eval", "kvmem-eval", "\n");
}
END_TEST

START_TEST(test_changelog_version)
{
	char path[PATH_MAX], want[64], *text, *first;

	snprintf(path, sizeof(path), "%s/CHANGELOG.md", kvmem_check_srcdir());
	text = kvmem_check_read_file(path, NULL);
	/* The first release heading is the Makefile's version; changes
	 * not yet released may come before it, under "## Unreleased". */
	first = strstr(text, "\n## ");
	if (first && !strncmp(first, "\n## Unreleased\n", 15))
		first = strstr(first + 1, "\n## ");
	ck_assert_msg(first != NULL, "%s: no \"## VERSION\" heading", path);
	snprintf(want, sizeof(want), "\n## %s ", kvmem_check_version());
	ck_assert_msg(!strncmp(first, want, strlen(want)),
		      "%s: the first release is %.20s, not %s", path,
		      first + 4, kvmem_check_version());
	free(text);
}
END_TEST

START_TEST(test_python_version)
{
	char path[PATH_MAX], want[64], *text;

	/* The package's one source of its version (pyproject.toml reads it
	 * too). */
	snprintf(path, sizeof(path), "%s/python/kvmem/_version.py",
		 kvmem_check_srcdir());
	text = kvmem_check_read_file(path, NULL);
	snprintf(want, sizeof(want), "\n__version__ = \"%s\"\n",
		 kvmem_check_version());
	ck_assert_msg(strstr(text, want), "%s: no %s", path, want + 1);
	free(text);
}
END_TEST

START_TEST(test_license)
{
	char path[PATH_MAX], *text;

	snprintf(path, sizeof(path), "%s/LICENSE", kvmem_check_srcdir());
	text = kvmem_check_read_file(path, NULL);
	ck_assert_msg(!strncmp(text, "MIT License\n", 12), "%s: not MIT",
		      path);
	ck_assert_ptr_nonnull(strstr(text, "Copyright (c) 2026 the kvmem authors\n"));
	free(text);
}
END_TEST

/* Whether git's path @f is a source file: by its name, or a "#!" script. */
static int is_source(const char *f, const char *text)
{
	static const char *const ext[] = { ".c",  ".h",	 ".cc", ".cu",
					   ".cuh", ".S", ".py", ".sh",
					   ".mk" };
	const char *base = strrchr(f, '/') ? strrchr(f, '/') + 1 : f;
	size_t i, n = strlen(f);

	if (!strcmp(base, "Makefile") || !strncmp(text, "#!", 2))
		return 1;
	for (i = 0; i < sizeof(ext) / sizeof(ext[0]); i++)
		if (n > strlen(ext[i]) && !strcmp(f + n - strlen(ext[i]), ext[i]))
			return 1;
	return 0;
}

/*
 * The line each kind of file starts with: C's comment first, a script's
 * right after its "#!" line.
 */
static int has_spdx(const char *f, const char *text)
{
	static const char c[] = "/* SPDX-License-Identifier: MIT */\n";
	static const char sh[] = "# SPDX-License-Identifier: MIT\n";
	size_t n = strlen(f);

	if (!strncmp(text, "#!", 2)) {
		text = strchr(text, '\n');
		return text && !strncmp(text + 1, sh, strlen(sh));
	}
	if ((n > 3 && !strcmp(f + n - 3, ".py")) ||
	    (n > 3 && !strcmp(f + n - 3, ".mk")) ||
	    (n > 3 && !strcmp(f + n - 3, ".sh")) ||
	    !strcmp(strrchr(f, '/') ? strrchr(f, '/') + 1 : f, "Makefile"))
		return !strncmp(text, sh, strlen(sh));
	return !strncmp(text, c, strlen(c));
}

START_TEST(test_spdx_lines)
{
	char cmd[PATH_MAX + 64], f[PATH_MAX], path[PATH_MAX * 2];
	size_t missing = 0, files = 0;
	FILE *p;

	snprintf(path, sizeof(path), "%s/.git", kvmem_check_srcdir());
	if (!kvmem_check_have("git") || access(path, F_OK)) {
		fprintf(stderr, "SKIP: test_spdx_lines: not a git checkout "
				"(or no git); the SPDX lines are not checked\n");
		return;
	}
	snprintf(cmd, sizeof(cmd), "git -C '%s' ls-files", kvmem_check_srcdir());
	p = popen(cmd, "r");
	ck_assert_msg(p != NULL, "%s: cannot run", cmd);
	while (fgets(f, sizeof(f), p)) {
		char *text;

		f[strcspn(f, "\n")] = 0;
		snprintf(path, sizeof(path), "%s/%s", kvmem_check_srcdir(), f);
		if (access(path, F_OK))
			continue; /* deleted in the work tree */
		text = kvmem_check_read_file(path, NULL);
		if (is_source(f, text)) {
			files++;
			if (!has_spdx(f, text)) {
				fprintf(stderr, "%s: no SPDX line at its top\n",
					f);
				missing++;
			}
		}
		free(text);
	}
	ck_assert_int_eq(pclose(p), 0);
	ck_assert_uint_gt(files, 100);
	ck_assert_msg(missing == 0, "%zu of %zu source files lack the line",
		      missing, files);
}
END_TEST

KVMEM_SUITE(release)
{
	Suite *s = suite_create("release");
	TCase *tc = tcase_create("release");

	tcase_add_test(tc, test_library_version);
	tcase_add_test(tc, test_programs_version);
	tcase_add_test(tc, test_changelog_version);
	tcase_add_test(tc, test_python_version);
	tcase_add_test(tc, test_license);
	tcase_add_test(tc, test_spdx_lines);
	suite_add_tcase(s, tc);
	return s;
}
