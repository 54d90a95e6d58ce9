/*
 * kvmem-bench - kvmem's benchmarks
 *
 * Every number is printed next to a baseline measured in the same run on the
 * same machine, because these machines are shared and noisy: compare ratios,
 * not absolute values across runs. --json prints one object per run.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define VERSION "0.1.0"

static const struct bench_cmd *const cmds[] = {
	&bench_codec,
	&bench_ber,
	&bench_attend,
	&bench_ring,
	&bench_fill,
	&bench_offload,
	&bench_attach,
};

uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
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

static void usage(FILE *f)
{
	size_t i;

	fprintf(f, "usage: kvmem-bench COMMAND [OPTIONS]\n"
		   "       kvmem-bench COMMAND --help\n\n"
		   "commands:\n");
	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		fprintf(f, "  %-8s %s\n", cmds[i]->name, cmds[i]->summary);
	fprintf(f, "\nEvery timing is reported next to a baseline measured in "
		   "the same run.\n");
}

int main(int argc, char **argv)
{
	size_t i;

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("kvmem-bench " VERSION "\n");
		return 0;
	}
	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strcmp(argv[1], cmds[i]->name))
			return cmds[i]->run(argc - 1, argv + 1);
	fprintf(stderr, "kvmem-bench: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
