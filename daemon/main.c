/* SPDX-License-Identifier: MIT */
/*
 * main.c - kvmemd: command line, configuration, start-up
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvmemd.h"
#include "remote.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kvmemd [-f] [-n] [-c FILE] [--print-config] [OPTIONS]\n"
		"\n"
		"The kvmem memory daemon: owns the protected KV-cache pages of\n"
		"this machine and serves them to inference processes.\n"
		"\n"
		"  -c, --config FILE     configuration file (default %s;\n"
		"                        built-in defaults when it is missing)\n"
		"  -f, --foreground      stay in the foreground (systemd, make run)\n"
		"  -n, --check           check the configuration and exit\n"
		"      --print-config    print the effective configuration and exit\n"
		"  -s, --socket PATH     client socket (daemon.socket)\n"
		"  -a, --admin-socket PATH\n"
		"                        admin socket (daemon.admin_socket)\n"
		"  -d, --state-dir DIR   state directory (daemon.state_dir)\n"
		"  -o, --set SECTION.KEY=VALUE\n"
		"                        set any configuration key\n"
		"  -h, --help            this text\n"
		"  -V, --version         kvmemd's version and ABI, and exit\n"
		"\n"
		"Every key and its default: kvmemd.conf(5), or --print-config.\n",
		KVMEMD_CONFIG_PATH);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "foreground", no_argument, NULL, 'f' },
		{ "check", no_argument, NULL, 'n' },
		{ "print-config", no_argument, NULL, 'P' },
		{ "socket", required_argument, NULL, 's' },
		{ "admin-socket", required_argument, NULL, 'a' },
		{ "state-dir", required_argument, NULL, 'd' },
		{ "set", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	static struct kvmemd d;
	int foreground = 0, check = 0, print = 0;
	int opt, ret;
	char err[1024];

	d.config_path = KVMEMD_CONFIG_PATH;
	while ((opt = getopt_long(argc, argv, "c:fns:a:d:o:hV", opts, NULL)) !=
	       -1) {
		const char *key = NULL;

		switch (opt) {
		case 'c':
			d.config_path = optarg;
			d.config_must_exist = 1;
			continue;
		case 'f':
			foreground = 1;
			continue;
		case 'n':
			check = 1;
			continue;
		case 'P':
			print = 1;
			continue;
		case 's':
			key = "daemon.socket";
			break;
		case 'a':
			key = "daemon.admin_socket";
			break;
		case 'd':
			key = "daemon.state_dir";
			break;
		case 'o': {
			char *eq = strchr(optarg, '=');

			if (!eq) {
				fprintf(stderr,
					"kvmemd: --set wants SECTION.KEY=VALUE, "
					"not \"%s\"\n",
					optarg);
				return 2;
			}
			*eq = 0;
			key = optarg;
			optarg = eq + 1;
			break;
		}
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("kvmemd %s (ABI %u, clients of ABI %u to %u; page "
			       "format %u)\n",
			       KVMEM_VERSION, KVMEM_ABI_VERSION,
			       KVMEM_ABI_VERSION_MIN, KVMEM_ABI_VERSION,
			       KVMEM_PAGE_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
		/* Flags apply after the file, in order: collect them. */
		if (d.nset == KVMEMD_MAX_SETS) {
			fprintf(stderr, "kvmemd: too many options\n");
			return 2;
		}
		d.set_keys[d.nset] = key;
		d.set_vals[d.nset++] = optarg;
	}
	if (optind != argc) {
		fprintf(stderr, "kvmemd: unexpected argument \"%s\"\n",
			argv[optind]);
		usage(stderr);
		return 2;
	}

	if (kvmemd_config_build(&d, &d.cfg, err, sizeof(err))) {
		fprintf(stderr, "kvmemd: %s\n", err);
		return 1;
	}
	if (print) {
		kvmemd_config_print(&d.cfg, stdout);
		return 0;
	}
	if (check) {
		/* What start-up would refuse, short of binding and writing. */
		if (kvmemd_fd_check(&d.cfg, 0, err, sizeof(err)) ||
		    kvmemd_tier_check(&d.cfg, err, sizeof(err)) ||
		    kvmemd_remote_check(&d.cfg, err, sizeof(err))) {
			fprintf(stderr, "kvmemd: %s\n", err);
			return 1;
		}
		printf("kvmemd: configuration ok\n");
		return 0;
	}
	kvmemd_log_init(d.cfg.log_level);
	if (!foreground && daemon(1, 1)) {
		kvmemd_log_err(LOG_ERR, -errno, "daemon");
		return 1;
	}
	ret = kvmemd_run(&d);
	return ret ? 1 : 0;
}
