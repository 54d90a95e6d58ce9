/* SPDX-License-Identifier: MIT */
/*
 * cpu.c - which SIMD code path the bulk functions take
 */
#include <cpuid.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char *const simd_names[KVMEM__SIMD_NR] = {
	[KVMEM__SIMD_PORTABLE] = "portable",
	[KVMEM__SIMD_AVX2] = "avx2",
	[KVMEM__SIMD_AVX512] = "avx512",
};

/* -1 until the first call decides; the decision is idempotent, so a race
 * between two first callers stores the same value twice. */
static int simd_level = -1;

/* F16C from CPUID leaf 1: not every compiler's __builtin_cpu_supports()
 * knows it (clang 14 does not). */
static int has_f16c(void)
{
	unsigned int a, b, c, d;

	return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

int kvmem__cpu_has_sse42(void)
{
	const char *env = getenv("KVMEM_SIMD");

	if (env && !strcmp(env, "portable"))
		return 0;
	__builtin_cpu_init();
	return __builtin_cpu_supports("sse4.2");
}

int kvmem__simd_supported(int level)
{
	switch (level) {
	case KVMEM__SIMD_PORTABLE:
		return 1;
	case KVMEM__SIMD_AVX2:
		/* The attention kernels of this level use FMA and F16C too;
		 * every CPU with AVX2 so far has both. */
		__builtin_cpu_init();
		return __builtin_cpu_supports("avx2") &&
		       __builtin_cpu_supports("fma") && has_f16c();
	case KVMEM__SIMD_AVX512:
		return kvmem__simd_supported(KVMEM__SIMD_AVX2) &&
		       __builtin_cpu_supports("avx512f") &&
		       __builtin_cpu_supports("avx512bw") &&
		       __builtin_cpu_supports("avx512vl") &&
		       __builtin_cpu_supports("avx512vbmi") &&
		       __builtin_cpu_supports("avx512vnni") &&
		       __builtin_cpu_supports("gfni");
	default:
		return 0;
	}
}

int kvmem__simd_active(void)
{
	int level = __atomic_load_n(&simd_level, __ATOMIC_RELAXED);
	int cap = KVMEM__SIMD_NR - 1;
	const char *env;

	if (level >= 0)
		return level;
	/* An unknown name caps nothing, as no variable at all. */
	env = getenv("KVMEM_SIMD");
	for (level = 0; env && level < KVMEM__SIMD_NR; level++)
		if (!strcmp(env, simd_names[level]))
			cap = level;
	for (level = cap; level > 0 && !kvmem__simd_supported(level); level--)
		;
	__atomic_store_n(&simd_level, level, __ATOMIC_RELAXED);
	return level;
}

int kvmem__simd_force(int level)
{
	if (!kvmem__simd_supported(level))
		return -EOPNOTSUPP;
	__atomic_store_n(&simd_level, level, __ATOMIC_RELAXED);
	return 0;
}

const char *kvmem__simd_name(int level)
{
	if (level < 0 || level >= KVMEM__SIMD_NR)
		return "unknown";
	return simd_names[level];
}
