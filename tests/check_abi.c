/*
 * check_abi.c - what libkvmem.so exports
 *
 * The shared library exports the public API and nothing else: the version
 * script keeps kvmem__* internals local, and the SONAME carries the ABI
 * major version.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "kvmem/crc32c.h"
#include "kvmem/ecc.h"
#include "kvmem_check.h"

static void *open_lib(void)
{
	const char *dir = getenv("KVMEM_BUILD");
	char path[PATH_MAX];
	void *h;

	/* The SONAME link: what a program linked with -lkvmem loads. */
	snprintf(path, sizeof(path), "%s/libkvmem.so.0", dir ? dir : "build");
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	ck_assert_msg(h, "dlopen %s: %s", path, dlerror());
	return h;
}

START_TEST(test_public_symbols_exported)
{
	static const char *const pub[] = {
		"kvmem_codec_by_name",
		"kvmem_codec_get",
		"kvmem_crc32c",
		"kvmem_ecc_code_bytes",
		"kvmem_ecc_data_bytes",
		"kvmem_ecc_decode",
		"kvmem_ecc_encode",
		"kvmem_ecc_impl",
		"kvmem_ecc_scrub",
		"kvmem_inject",
		"kvmem_inject_params_for_codec",
	};
	void *h = open_lib();
	size_t i;

	for (i = 0; i < sizeof(pub) / sizeof(pub[0]); i++)
		ck_assert_msg(dlsym(h, pub[i]), "%s not exported", pub[i]);
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
