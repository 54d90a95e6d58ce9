/*
 * bench.c - what the kvmem-bench subcommands share (bench.h)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "rng.h"

float bench_rnd_unit(struct kvmem_rng *r)
{
	return (float)(kvmem_rng_next(r) >> 40) * 0x1p-24f * 2.0f - 1.0f;
}

uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

uint64_t bench_median(uint64_t *t, uint32_t n)
{
	qsort(t, n, sizeof(*t), cmp_u64);
	return t[n / 2];
}

void *bench_alloc(size_t size)
{
	void *p = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);

	if (!p) {
		fprintf(stderr, "kvmem-bench: cannot allocate %zu bytes\n",
			size);
		exit(1);
	}
	memset(p, 0, size);
	return p;
}

int bench_parse_u64(const char *opt, const char *arg, uint64_t min,
		    uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(arg, &end, 0);
	if (errno || end == arg || *end || arg[0] == '-') {
		fprintf(stderr, "kvmem-bench: bad --%s '%s'\n", opt, arg);
		return -EINVAL;
	}
	if (v < min || v > max) {
		fprintf(stderr,
			"kvmem-bench: bad --%s '%s': must be %llu..%llu\n", opt,
			arg, (unsigned long long)min, (unsigned long long)max);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

int bench_parse_double(const char *opt, const char *arg, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(arg, &end);
	if (errno || end == arg || *end || v != v) {
		fprintf(stderr, "kvmem-bench: bad --%s '%s'\n", opt, arg);
		return -EINVAL;
	}
	*out = v;
	return 0;
}
