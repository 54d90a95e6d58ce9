/* SPDX-License-Identifier: MIT */
/*
 * check_abi.c - what libkvmem.so exports
 *
 * The shared library exports the public API and nothing else: the version
 * script keeps kvmem__* internals local, and the SONAME carries the ABI
 * major version.
 */
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvmem/crc32c.h"
#include "kvmem/ecc.h"
#include "kvmem_check.h"

/* Tests run from the top of the tree. */
#define PUBLIC_HEADERS "libkvmem/include/kvmem"

static void *open_lib(void)
{
	char path[PATH_MAX];
	void *h;

	/* The SONAME link: what a program linked with -lkvmem loads. */
	snprintf(path, sizeof(path), "%s/libkvmem.so.0",
		 kvmem_check_builddir());
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	ck_assert_msg(h, "dlopen %s: %s", path, dlerror());
	return h;
}

/*
 * Every function the installed headers declare: a declaration starts in
 * column 0 with its type, and the name is the kvmem_ identifier right
 * before the first '('.
 */
static size_t header_functions(const char *path, char names[][64], size_t cap)
{
	char line[512];
	size_t n = 0;
	FILE *f = fopen(path, "r");

	ck_assert_msg(f, "%s: cannot open", path);
	while (fgets(line, sizeof(line), f)) {
		char *paren = strchr(line, '('), *p;

		if (!paren || !isalpha((unsigned char)line[0]) ||
		    !strncmp(line, "typedef", 7))
			continue;
		p = paren;
		while (p > line &&
		       (isalnum((unsigned char)p[-1]) || p[-1] == '_'))
			p--;
		if (strncmp(p, "kvmem_", 6) || paren - p >= 64)
			continue;
		ck_assert_uint_lt(n, cap);
		memcpy(names[n], p, (size_t)(paren - p));
		names[n][paren - p] = 0;
		n++;
	}
	fclose(f);
	return n;
}

START_TEST(test_public_symbols_exported)
{
	static char names[256][64];
	char path[PATH_MAX];
	size_t i, n, total = 0;
	struct dirent *d;
	void *h = open_lib();
	DIR *dir = opendir(PUBLIC_HEADERS);

	ck_assert_msg(dir, "%s: cannot open", PUBLIC_HEADERS);
	while ((d = readdir(dir))) {
		if (!strstr(d->d_name, ".h"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", PUBLIC_HEADERS,
			 d->d_name);
		n = header_functions(path, names, 256);
		for (i = 0; i < n; i++)
			ck_assert_msg(dlsym(h, names[i]),
				      "%s (%s) not exported", names[i],
				      d->d_name);
		total += n;
	}
	closedir(dir);
	/* The parse found the API: at least the codec and cache calls. */
	ck_assert_uint_ge(total, 40);
	dlclose(h);
}
END_TEST

START_TEST(test_internal_symbols_hidden)
{
	static const char *const internal[] = {
		"kvmem__simd_force",
		"kvmem__ecc_tables",
		"kvmem__ecc_portable",
		"kvmem__crc32c_sw",
		"kvmem__sha256",
		"kvmem__prefix_block_range",
	};
	void *h = open_lib();
	size_t i;

	for (i = 0; i < sizeof(internal) / sizeof(internal[0]); i++)
		ck_assert_msg(!dlsym(h, internal[i]), "%s is exported",
			      internal[i]);
	dlclose(h);
}
END_TEST

START_TEST(test_shared_matches_static)
{
	uint32_t (*crc)(uint32_t, const void *, size_t);
	int (*by_name)(const char *);
	void *h = open_lib();

	*(void **)&crc = dlsym(h, "kvmem_crc32c");
	*(void **)&by_name = dlsym(h, "kvmem_codec_by_name");
	ck_assert_ptr_nonnull(crc);
	ck_assert_ptr_nonnull(by_name);
	ck_assert_uint_eq(crc(0, "123456789", 9), 0xe3069283u);
	ck_assert_int_eq(by_name("golay24"), KVMEM_CODEC_GOLAY24);
	dlclose(h);
}
END_TEST

KVMEM_SUITE(abi)
{
	Suite *s = suite_create("abi");
	TCase *tc = tcase_create("shared library");

	tcase_add_test(tc, test_public_symbols_exported);
	tcase_add_test(tc, test_internal_symbols_hidden);
	tcase_add_test(tc, test_shared_matches_static);
	suite_add_tcase(s, tc);
	return s;
}
