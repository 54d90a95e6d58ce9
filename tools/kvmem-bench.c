/* SPDX-License-Identifier: MIT */
/*
 * kvmem-bench - kvmem's benchmarks
 *
 * Every number is printed next to a baseline measured in the same run on the
 * same machine, because these machines are shared and noisy: compare ratios,
 * not absolute values across runs. --json prints one object per run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "kvmem/kvmem.h"

static const struct bench_cmd *const cmds[] = {
	&bench_codec,  &bench_ber,     &bench_attend, &bench_ring,
	&bench_fill,   &bench_offload, &bench_attach, &bench_archive,
	&bench_prefix, &bench_hangup,  &bench_record, &bench_reboot,
	&bench_remote, &bench_tier,
};

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
		printf("kvmem-bench %s\n", kvmem_version());
		return 0;
	}
	for (i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strcmp(argv[1], cmds[i]->name))
			return cmds[i]->run(argc - 1, argv + 1);
	fprintf(stderr, "kvmem-bench: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
