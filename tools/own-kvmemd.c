/*
 * own-kvmemd.c - a kvmemd of a tool's own (own-kvmemd.h)
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvmem/kvmem.h"
#include "own-kvmemd.h"

#define START_WAIT_MS 10000
#define STOP_WAIT_MS 5000
/* How often the daemon is looked at while it starts and stops. */
#define POLL_MS 10

static void poll_wait(void)
{
	static const struct timespec ts = { .tv_nsec = POLL_MS * 1000000L };

	nanosleep(&ts, NULL);
}

/* The first two CPUs this process may use, or -1 and -1. */
static void pick_cpus(int *cpu, int *peer_cpu)
{
	cpu_set_t set;
	int i, n = 0;

	*cpu = *peer_cpu = -1;
	if (sched_getaffinity(0, sizeof(set), &set))
		return;
	for (i = 0; i < CPU_SETSIZE && n < 2; i++) {
		if (!CPU_ISSET(i, &set))
			continue;
		if (n++)
			*peer_cpu = i;
		else
			*cpu = i;
	}
	if (n < 2)
		*cpu = -1;
}

/* Run the calling process on @cpu only (-1: leave it). */
static int pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return 0;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof(set), &set) ? -errno : 0;
}

/* --kvmemd, $KVMEMD, or where the build puts it next to this program. */
static int kvmemd_path(const char *opt, char *buf, size_t len)
{
	const char *env = getenv("KVMEMD");
	char exe[PATH_MAX];
	char *slash;
	ssize_t n;
	int w;

	if (opt) {
		w = snprintf(buf, len, "%s", opt);
	} else if (env && *env) {
		w = snprintf(buf, len, "%s", env);
	} else {
		n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		if (n < 0)
			return -errno;
		exe[n] = 0;
		slash = strrchr(exe, '/');
		if (!slash)
			return -ENOENT;
		*slash = 0;
		w = snprintf(buf, len, "%s/../daemon/kvmemd", exe);
	}
	return w < 0 || (size_t)w >= len ? -ENAMETOOLONG : 0;
}

static int rm_entry(const char *path, const struct stat *st, int type,
		    struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	if (remove(path))
		fprintf(stderr, "%s: cannot remove %s: %s\n",
			program_invocation_short_name, path, strerror(errno));
	return 0;
}

static void dump_log(const struct own_kvmemd *d)
{
	char path[PATH_MAX + 16], line[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/kvmemd.log", d->dir);
	f = fopen(path, "r");
	if (!f)
		return;
	fprintf(stderr, "%s: kvmemd's log:\n", program_invocation_short_name);
	while (fgets(line, sizeof(line), f))
		fprintf(stderr, "  %s", line);
	fclose(f);
}

int own_kvmemd_start(struct own_kvmemd *d, const char *path, int pin_cpus,
		     const char *const *set)
{
	const char *prog = program_invocation_short_name;
	const char *tmp = getenv("TMPDIR");
	const char *bin = d->bin;
	/* bin, -f, -c, -s, -a, -d and their arguments, -o and theirs, NULL */
	const char *argv[11 + 2 * OWN_KVMEMD_MAX_SET];
	char state[PATH_MAX + 8], log[PATH_MAX + 16];
	pid_t parent = getpid();
	int ret, w, fd, null, n, argc = 0;

	for (n = 0; set && set[n]; n++)
		;
	if (n > OWN_KVMEMD_MAX_SET) {
		fprintf(stderr, "%s: %d kvmemd settings, at most %d\n", prog, n,
			OWN_KVMEMD_MAX_SET);
		return -E2BIG;
	}
	ret = kvmemd_path(path, d->bin, sizeof(d->bin));
	if (ret) {
		fprintf(stderr, "%s: where is kvmemd: %s\n", prog,
			strerror(-ret));
		return ret;
	}
	if (access(bin, X_OK)) {
		ret = -errno;
		fprintf(stderr,
			"%s: no kvmemd to start at %s: %s "
			"(--kvmemd, $KVMEMD; or --connect to a running one)\n",
			prog, bin, strerror(-ret));
		return ret;
	}
	snprintf(d->dir, sizeof(d->dir), "%s/%s-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp", prog);
	if (!mkdtemp(d->dir)) {
		ret = -errno;
		fprintf(stderr, "%s: mkdtemp %s: %s\n", prog, d->dir,
			strerror(-ret));
		d->dir[0] = 0;
		return ret;
	}
	w = snprintf(d->sock, sizeof(d->sock), "%s/k.sock", d->dir);
	if (w < 0 || (size_t)w >= sizeof(d->sock) ||
	    (size_t)snprintf(d->admin, sizeof(d->admin), "%s/a.sock", d->dir) >=
		    sizeof(d->admin)) {
		fprintf(stderr,
			"%s: %s is too long a directory for a socket; set "
			"TMPDIR to a shorter one\n",
			prog, d->dir);
		return -ENAMETOOLONG;
	}
	snprintf(state, sizeof(state), "%s/state", d->dir);
	snprintf(log, sizeof(log), "%s/kvmemd.log", d->dir);
	argv[argc++] = bin;
	argv[argc++] = "-f";
	argv[argc++] = "-c";
	argv[argc++] = "/dev/null";
	argv[argc++] = "-s";
	argv[argc++] = d->sock;
	argv[argc++] = "-a";
	argv[argc++] = d->admin;
	argv[argc++] = "-d";
	argv[argc++] = state;
	for (; set && *set; set++) {
		argv[argc++] = "-o";
		argv[argc++] = *set;
	}
	argv[argc] = NULL;
	d->cpu = d->peer_cpu = -1;
	if (pin_cpus)
		pick_cpus(&d->cpu, &d->peer_cpu);

	fflush(NULL);
	d->pid = fork();
	if (d->pid < 0) {
		ret = -errno;
		d->pid = 0;
		fprintf(stderr, "%s: fork: %s\n", prog, strerror(-ret));
		return ret;
	}
	if (!d->pid) {
		/* Never outlive the tool, even when it is killed. */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
			_exit(127);
		null = open("/dev/null", O_RDONLY);
		fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (null < 0 || fd < 0 || dup2(null, 0) < 0 ||
		    dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(127);
		ret = pin(d->peer_cpu);
		if (ret) {
			fprintf(stderr, "pinning to CPU %d: %s\n", d->peer_cpu,
				strerror(-ret));
			_exit(127);
		}
		execv(bin, (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	ret = pin(d->cpu);
	if (ret)
		fprintf(stderr, "%s: pinning to CPU %d: %s\n", prog, d->cpu,
			strerror(-ret));
	return ret;
}

int own_kvmemd_connect(const char *sock, struct own_kvmemd *d,
		       const struct kvmem_geometry *g,
		       const struct kvmem_connect_opts *o,
		       struct kvmem_cache **c)
{
	const char *prog = program_invocation_short_name;
	int ret, waited;

	for (waited = 0;; waited += POLL_MS) {
		ret = kvmem_connect(sock, g, o, c);
		if (!d || (ret != -ENOENT && ret != -ECONNREFUSED))
			break;
		if (waitpid(d->pid, &d->status, WNOHANG) == d->pid) {
			d->pid = 0;
			fprintf(stderr,
				"%s: kvmemd exited before it listened\n", prog);
			return -ECHILD;
		}
		if (waited >= START_WAIT_MS) {
			fprintf(stderr,
				"%s: kvmemd did not listen at %s within %d s\n",
				prog, sock, START_WAIT_MS / 1000);
			return -ETIMEDOUT;
		}
		poll_wait();
	}
	if (ret)
		fprintf(stderr, "%s: %s\n", prog,
			*kvmem_connect_error() ? kvmem_connect_error()
					       : kvmem_strerror(ret));
	return ret;
}

int own_kvmemd_stop(struct own_kvmemd *d, int failed)
{
	const char *prog = program_invocation_short_name;
	pid_t got = 0;
	int ret = 0, waited;

	if (d->pid) {
		kill(d->pid, SIGTERM);
		for (waited = 0; waited < STOP_WAIT_MS; waited += POLL_MS) {
			got = waitpid(d->pid, &d->status, WNOHANG);
			if (got)
				break;
			poll_wait();
		}
		if (!got) {
			fprintf(stderr,
				"%s: kvmemd did not stop within %d s, killed\n",
				prog, STOP_WAIT_MS / 1000);
			kill(d->pid, SIGKILL);
			waitpid(d->pid, &d->status, 0);
			ret = -EIO;
		}
		d->pid = 0;
	}
	if (!ret && WIFSIGNALED(d->status)) {
		fprintf(stderr, "%s: kvmemd died of signal %d\n", prog,
			WTERMSIG(d->status));
		ret = -EIO;
	} else if (!ret && WEXITSTATUS(d->status)) {
		fprintf(stderr, "%s: kvmemd exited with status %d\n", prog,
			WEXITSTATUS(d->status));
		ret = -EIO;
	}
	if (!d->dir[0])
		return ret;
	if (ret || failed)
		dump_log(d);
	nftw(d->dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
	return ret;
}
