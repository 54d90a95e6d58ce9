/* SPDX-License-Identifier: MIT */
/*
 * own-kvmemd.c - a kvmemd of a tool's own (own-kvmemd.h)
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

/* bin, -f, -c, -s, -a, -d and their arguments, -o and theirs, NULL */
#define ARGV_MAX (11 + 2 * OWN_KVMEMD_MAX_SET)

/* ---- systemd's part: notifications and the descriptor store --------- */

/* systemd's longest FDNAME=, and the name of a descriptor sent without */
#define FDNAME_MAX 255
#define FDNAME_DEFAULT "stored"
/* Descriptors one notification may carry; the kernel closes any more. */
#define NOTE_FDS 16
#define NOTE_BYTES 4096

struct stored {
	char name[FDNAME_MAX + 1];
	int fd;
};

struct own_fdstore {
	int sock; /* DIR/notify, NOTIFY_SOCKET of the daemon */
	int wake[2]; /* a pipe: written to end the thread */
	int thread_on;
	pthread_t thread;
	/* Held by the thread while it reads the socket, and across a fork,
	 * whose child passes the store on. */
	pthread_mutex_t lock;
	pthread_cond_t cond; /* READY=1 came */
	struct stored *fds;
	unsigned int n, cap;
	int ready; /* READY=1 since the last start */
	uint64_t ready_ns;
	/* the command line, for a restart */
	char state[PATH_MAX + 8];
	char *set[OWN_KVMEMD_MAX_SET + 1];
	const char *argv[ARGV_MAX];
	char notify[sizeof(((struct sockaddr_un *)0)->sun_path) + 16];
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Is @fd a descriptor of a file the store holds already? Under the lock. */
static int store_has(const struct own_fdstore *st, int fd)
{
	struct stat a, b;
	unsigned int i;

	if (fstat(fd, &a))
		return 0;
	for (i = 0; i < st->n; i++)
		if (!fstat(st->fds[i].fd, &b) && a.st_dev == b.st_dev &&
		    a.st_ino == b.st_ino)
			return 1;
	return 0;
}

/* Keep @fd under @name. Under the lock. Return: 0, or -1 when it is not
 * kept (a file kept already, a name systemd refuses, no memory). */
static int store_keep(struct own_fdstore *st, const char *name, int fd)
{
	struct stored *grown;
	unsigned int cap;

	if (strlen(name) > FDNAME_MAX || store_has(st, fd))
		return -1;
	if (st->n == st->cap) {
		cap = st->cap ? 2 * st->cap : 16;
		grown = realloc(st->fds, cap * sizeof(*grown));
		if (!grown)
			return -1;
		st->fds = grown;
		st->cap = cap;
	}
	strcpy(st->fds[st->n].name, name);
	st->fds[st->n++].fd = fd;
	return 0;
}

/* Close the descriptors kept under @name. Under the lock. */
static void store_remove(struct own_fdstore *st, const char *name)
{
	unsigned int i;

	for (i = 0; i < st->n;) {
		if (strcmp(st->fds[i].name, name)) {
			i++;
			continue;
		}
		close(st->fds[i].fd);
		st->fds[i] = st->fds[--st->n];
	}
}

/* What systemd does with notification @text and its @nfds descriptors.
 * Under the lock. */
static void store_take(struct own_fdstore *st, char *text, const int *fds,
		       int nfds)
{
	const char *name = FDNAME_DEFAULT;
	int keep = 0, drop = 0, i;
	char *line, *save = NULL;

	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (!strcmp(line, "FDSTORE=1")) {
			keep = 1;
		} else if (!strcmp(line, "FDSTOREREMOVE=1")) {
			drop = 1;
		} else if (!strncmp(line, "FDNAME=", 7)) {
			name = line + 7;
		} else if (!strcmp(line, "READY=1")) {
			st->ready = 1;
			st->ready_ns = now_ns();
			pthread_cond_broadcast(&st->cond);
		}
	}
	if (drop)
		store_remove(st, name);
	for (i = 0; i < nfds; i++)
		if (!keep || store_keep(st, name, fds[i]))
			close(fds[i]);
}

/* Take every notification waiting on the socket. Under the lock. */
static void store_read(struct own_fdstore *st)
{
	union {
		char buf[CMSG_SPACE(NOTE_FDS * sizeof(int))];
		struct cmsghdr align;
	} u;
	char text[NOTE_BYTES];
	struct iovec iov = { .iov_base = text, .iov_len = sizeof(text) - 1 };
	int fds[NOTE_FDS], nfds;
	struct cmsghdr *cm;
	struct msghdr m;
	ssize_t len;

	for (;;) {
		m = (struct msghdr){ .msg_iov = &iov,
				     .msg_iovlen = 1,
				     .msg_control = u.buf,
				     .msg_controllen = sizeof(u.buf) };
		len = recvmsg(st->sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (len < 0)
			return;
		text[len] = 0;
		nfds = 0;
		for (cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
			if (cm->cmsg_level != SOL_SOCKET ||
			    cm->cmsg_type != SCM_RIGHTS)
				continue;
			nfds = (int)((cm->cmsg_len - CMSG_LEN(0)) /
				     sizeof(int));
			memcpy(fds, CMSG_DATA(cm), (size_t)nfds * sizeof(int));
		}
		store_take(st, text, fds, nfds);
	}
}

static void *store_thread(void *arg)
{
	struct own_fdstore *st = arg;
	struct pollfd pfd[2] = { { .fd = st->sock, .events = POLLIN },
				 { .fd = st->wake[0], .events = POLLIN } };

	for (;;) {
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		if (pfd[1].revents)
			return NULL;
		pthread_mutex_lock(&st->lock);
		store_read(st);
		pthread_mutex_unlock(&st->lock);
	}
}

/* The store's socket at DIR/notify, its thread, and a copy of @set. */
static int store_open(struct own_kvmemd *d, const char *const *set)
{
	const char *prog = program_invocation_short_name;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct own_fdstore *st = calloc(1, sizeof(*st));
	pthread_condattr_t ca;
	int i, ret;

	if (!st)
		return -ENOMEM;
	st->sock = st->wake[0] = st->wake[1] = -1;
	pthread_mutex_init(&st->lock, NULL);
	/* Timed waits on the clock of now_ns(). */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&st->cond, &ca);
	pthread_condattr_destroy(&ca);
	d->store = st;
	for (i = 0; set && set[i]; i++)
		if (!(st->set[i] = strdup(set[i])))
			return -ENOMEM;
	if ((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/notify",
			     d->dir) >= sizeof(sa.sun_path)) {
		fprintf(stderr,
			"%s: %s is too long a directory for a socket; set "
			"TMPDIR to a shorter one\n",
			prog, d->dir);
		return -ENAMETOOLONG;
	}
	snprintf(st->notify, sizeof(st->notify), "NOTIFY_SOCKET=%s",
		 sa.sun_path);
	st->sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (st->sock < 0 ||
	    bind(st->sock, (struct sockaddr *)&sa, sizeof(sa)) ||
	    pipe2(st->wake, O_CLOEXEC)) {
		ret = -errno;
		fprintf(stderr, "%s: the notification socket %s: %s\n", prog,
			sa.sun_path, strerror(-ret));
		return ret;
	}
	ret = -pthread_create(&st->thread, NULL, store_thread, st);
	if (ret) {
		fprintf(stderr, "%s: pthread_create: %s\n", prog,
			strerror(-ret));
		return ret;
	}
	st->thread_on = 1;
	return 0;
}

/* The thread ended, every descriptor closed, @d without a store. */
static void store_close(struct own_kvmemd *d)
{
	struct own_fdstore *st = d->store;
	int i;

	if (!st)
		return;
	if (st->thread_on) {
		if (write(st->wake[1], "", 1) != 1)
			pthread_cancel(st->thread);
		pthread_join(st->thread, NULL);
	}
	while (st->n)
		close(st->fds[--st->n].fd);
	free(st->fds);
	for (i = 0; i < 2; i++)
		if (st->wake[i] >= 0)
			close(st->wake[i]);
	if (st->sock >= 0)
		close(st->sock);
	for (i = 0; st->set[i]; i++)
		free(st->set[i]);
	pthread_mutex_destroy(&st->lock);
	pthread_cond_destroy(&st->cond);
	free(st);
	d->store = NULL;
}

/* Does environment entry @e set one of @names ("NAME=")? */
static int env_is(const char *e, const char *const *names)
{
	for (; *names; names++)
		if (!strncmp(e, *names, strlen(*names)))
			return 1;
	return 0;
}

/*
 * The daemon's environment: this process's, less what systemd sets for a
 * service, with the store's NOTIFY_SOCKET and, when it holds descriptors,
 * LISTEN_FDS, LISTEN_FDNAMES and @listen_pid (the child writes its pid
 * in). One allocation, freed by the caller; NULL when out of memory.
 * Under the lock.
 */
static char **store_env(const struct own_fdstore *st, char *listen_pid)
{
	static const char *const systemd_set[] = {
		"NOTIFY_SOCKET=",
		"LISTEN_FDS=",
		"LISTEN_PID=",
		"LISTEN_FDNAMES=",
		"WATCHDOG_USEC=",
		"WATCHDOG_PID=",
		NULL,
	};
	size_t n = 0, names = sizeof("LISTEN_FDNAMES="), i, k = 0;
	char **env, *fds, *p;

	while (environ[n])
		n++;
	for (i = 0; i < st->n; i++)
		names += strlen(st->fds[i].name) + 1;
	/* the entries, NOTIFY_SOCKET, three LISTEN_*, NULL; then the text */
	env = malloc((n + 5) * sizeof(*env) + 32 + names);
	if (!env)
		return NULL;
	fds = (char *)(env + n + 5);
	p = fds + 32;
	for (i = 0; i < n; i++)
		if (!env_is(environ[i], systemd_set))
			env[k++] = environ[i];
	env[k++] = (char *)st->notify;
	if (st->n) {
		snprintf(fds, 32, "LISTEN_FDS=%u", st->n);
		env[k++] = fds;
		env[k++] = p;
		p += sprintf(p, "LISTEN_FDNAMES=");
		for (i = 0; i < st->n; i++)
			p += sprintf(p, "%s%s", i ? ":" : "", st->fds[i].name);
		env[k++] = listen_pid;
	}
	env[k] = NULL;
	return env;
}

/*
 * In the child: the store's descriptors at 3, 4, ... and this process's
 * pid after "LISTEN_PID=" in @listen_pid. Only async-signal-safe calls:
 * the parent has threads. The child's copy of the store is its own to
 * change. Return: 0, or -1.
 */
static int pass_stored(struct own_fdstore *st, char *listen_pid)
{
	const int top = 3 + (int)st->n;
	char digits[16];
	unsigned int i;
	int n = 0;
	pid_t pid;

	/* Each out of the way first, above where any of them goes; the
	 * copies close at exec. */
	for (i = 0; i < st->n; i++) {
		st->fds[i].fd = fcntl(st->fds[i].fd, F_DUPFD_CLOEXEC, top);
		if (st->fds[i].fd < 0)
			return -1;
	}
	/* dup2() leaves the new descriptor open across exec. */
	for (i = 0; i < st->n; i++)
		if (dup2(st->fds[i].fd, 3 + (int)i) < 0)
			return -1;
	for (pid = getpid(); pid; pid /= 10)
		digits[n++] = (char)('0' + pid % 10);
	listen_pid += strlen("LISTEN_PID=");
	while (n)
		*listen_pid++ = digits[--n];
	*listen_pid = 0;
	return 0;
}

/* ---- starting it ------------------------------------------------------ */

/*
 * Fork and exec kvmemd with @argv: @envp, or this process's environment
 * when NULL; with @st, the store's descriptors passed and @listen_pid
 * ("LISTEN_PID=" and room for a pid, in @envp) completed in the child.
 * The log is truncated unless @append.
 */
static int spawn(struct own_kvmemd *d, const char *const *argv,
		 char *const *envp, struct own_fdstore *st, char *listen_pid,
		 int append)
{
	const char *prog = program_invocation_short_name;
	char log[PATH_MAX + 16];
	pid_t parent = getpid();
	int ret, fd, null;

	snprintf(log, sizeof(log), "%s/kvmemd.log", d->dir);
	fflush(NULL);
	d->started_ns = now_ns();
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
		null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		fd = open(log,
			  O_WRONLY | O_CREAT | O_CLOEXEC |
				  (append ? O_APPEND : O_TRUNC),
			  0600);
		if (null < 0 || fd < 0 || dup2(null, 0) < 0 ||
		    dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(127);
		ret = pin(d->peer_cpu);
		if (ret) {
			fprintf(stderr, "pinning to CPU %d: %s\n", d->peer_cpu,
				strerror(-ret));
			_exit(127);
		}
		if (st && pass_stored(st, listen_pid)) {
			fprintf(stderr, "passing the descriptor store: %s\n",
				strerror(errno));
			_exit(127);
		}
		if (envp)
			execve(argv[0], (char *const *)argv, envp);
		else
			execv(argv[0], (char *const *)argv);
		fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	ret = pin(d->cpu);
	if (ret)
		fprintf(stderr, "%s: pinning to CPU %d: %s\n", prog, d->cpu,
			strerror(-ret));
	return ret;
}

/*
 * Before the first start: the binary, the directory, the sockets' paths
 * and the CPUs. Says what failed on stderr.
 */
static int prepare(struct own_kvmemd *d, const char *path, int pin_cpus,
		   const char *const *set)
{
	const char *prog = program_invocation_short_name;
	const char *tmp = getenv("TMPDIR");
	int ret, w, n;

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
	if (access(d->bin, X_OK)) {
		ret = -errno;
		fprintf(stderr,
			"%s: no kvmemd to start at %s: %s "
			"(--kvmemd, $KVMEMD; or --connect to a running one)\n",
			prog, d->bin, strerror(-ret));
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
	d->cpu = d->peer_cpu = -1;
	if (pin_cpus)
		pick_cpus(&d->cpu, &d->peer_cpu);
	return 0;
}

/* kvmemd's command line: @state holds DIR/state. */
static void fill_argv(const struct own_kvmemd *d, const char *const *set,
		      char *state, size_t len, const char **argv)
{
	int argc = 0;

	snprintf(state, len, "%s/state", d->dir);
	argv[argc++] = d->bin;
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
}

int own_kvmemd_start(struct own_kvmemd *d, const char *path, int pin_cpus,
		     const char *const *set)
{
	const char *argv[ARGV_MAX];
	char state[PATH_MAX + 8];
	int ret;

	ret = prepare(d, path, pin_cpus, set);
	if (ret)
		return ret;
	fill_argv(d, set, state, sizeof(state), argv);
	return spawn(d, argv, NULL, NULL, NULL, 0);
}

/* Start @d's daemon with its store (the lock held across the fork). */
static int store_spawn(struct own_kvmemd *d, int append)
{
	struct own_fdstore *st = d->store;
	char listen_pid[32] = "LISTEN_PID=";
	char **env;
	int ret;

	pthread_mutex_lock(&st->lock);
	st->ready = 0;
	env = store_env(st, listen_pid);
	ret = env ? spawn(d, st->argv, env, st, listen_pid, append) : -ENOMEM;
	pthread_mutex_unlock(&st->lock);
	free(env);
	if (ret == -ENOMEM)
		fprintf(stderr, "%s: out of memory\n",
			program_invocation_short_name);
	return ret;
}

int own_kvmemd_start_stored(struct own_kvmemd *d, const char *path,
			    int pin_cpus, const char *const *set)
{
	struct own_fdstore *st;
	int ret;

	ret = prepare(d, path, pin_cpus, set);
	if (!ret)
		ret = store_open(d, set);
	if (ret)
		return ret;
	st = d->store;
	fill_argv(d, (const char *const *)st->set, st->state, sizeof(st->state),
		  st->argv);
	return store_spawn(d, 0);
}

int own_kvmemd_ready(struct own_kvmemd *d, int timeout_ms)
{
	const char *prog = program_invocation_short_name;
	struct own_fdstore *st = d->store;
	uint64_t end = now_ns() + (uint64_t)timeout_ms * 1000000ull, t;
	struct timespec ts;
	int ret = 0;

	pthread_mutex_lock(&st->lock);
	while (!st->ready && !ret) {
		/* Woken by READY=1; every POLL_MS, a look at the daemon. */
		t = now_ns() + POLL_MS * 1000000ull;
		ts.tv_sec = (time_t)(t / 1000000000ull);
		ts.tv_nsec = (long)(t % 1000000000ull);
		pthread_cond_timedwait(&st->cond, &st->lock, &ts);
		if (st->ready)
			break;
		if (waitpid(d->pid, &d->status, WNOHANG) == d->pid) {
			d->pid = 0;
			ret = -ECHILD;
		} else if (now_ns() >= end) {
			ret = -ETIMEDOUT;
		}
	}
	if (!ret)
		d->ready_ns = st->ready_ns;
	pthread_mutex_unlock(&st->lock);
	if (ret == -ECHILD)
		fprintf(stderr, "%s: kvmemd exited before it was ready\n",
			prog);
	else if (ret)
		fprintf(stderr, "%s: kvmemd was not ready within %d ms\n", prog,
			timeout_ms);
	return ret;
}

int own_kvmemd_stored(struct own_kvmemd *d, const char *prefix)
{
	struct own_fdstore *st = d->store;
	unsigned int i;
	int n = 0;

	pthread_mutex_lock(&st->lock);
	store_read(st);
	for (i = 0; i < st->n; i++)
		n += !strncmp(st->fds[i].name, prefix, strlen(prefix));
	pthread_mutex_unlock(&st->lock);
	return n;
}

void own_kvmemd_forget(struct own_kvmemd *d, const char *prefix)
{
	struct own_fdstore *st = d->store;
	unsigned int i;

	pthread_mutex_lock(&st->lock);
	store_read(st);
	for (i = 0; i < st->n;) {
		if (strncmp(st->fds[i].name, prefix, strlen(prefix))) {
			i++;
			continue;
		}
		close(st->fds[i].fd);
		st->fds[i] = st->fds[--st->n];
	}
	pthread_mutex_unlock(&st->lock);
}

int own_kvmemd_kill(struct own_kvmemd *d)
{
	struct own_fdstore *st = d->store;

	if (!d->pid) {
		fprintf(stderr, "%s: no kvmemd to kill\n",
			program_invocation_short_name);
		return -ECHILD;
	}
	kill(d->pid, SIGKILL);
	waitpid(d->pid, &d->status, 0);
	d->pid = 0;
	/* Whatever it sent is on the socket by now. */
	pthread_mutex_lock(&st->lock);
	store_read(st);
	pthread_mutex_unlock(&st->lock);
	if (!WIFSIGNALED(d->status) || WTERMSIG(d->status) != SIGKILL) {
		fprintf(stderr, "%s: kvmemd had exited before it was killed\n",
			program_invocation_short_name);
		return -ECHILD;
	}
	return 0;
}

int own_kvmemd_restart(struct own_kvmemd *d)
{
	if (!d->store || d->pid)
		return -EINVAL;
	return store_spawn(d, 1);
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
	store_close(d);
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
