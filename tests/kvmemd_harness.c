/* SPDX-License-Identifier: MIT */
/*
 * kvmemd_harness.c - see kvmemd_harness.h
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "kvmem_check.h"
#include "kvmemd_harness.h"
#include "rng.h"

static const char *daemon_path(void)
{
	static char path[4096];

	snprintf(path, sizeof(path), "%s/daemon/kvmemd",
		 kvmem_check_builddir());
	return path;
}

static int ready_timeout_ms(void)
{
	/* Sanitizers make start-up slower. */
	return getenv("CK_TIMEOUT_MULTIPLIER") ? 40000 : 10000;
}

/* ---- systemd's part: the notifications and the descriptor store ------ */

struct kvmemd_notes {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int wake[2]; /* a pipe: written to stop the thread */
	char text[KVMEMD_NOTES_MAX][512];
	unsigned int head, tail; /* queued: text[head..tail), modulo */
	int started; /* the thread runs: no fork() meets it starting */
};

static void stored_close(struct kvmemd_proc *p)
{
	while (p->nstored)
		close(p->stored[--p->nstored]);
}

/* Is @fd a descriptor of a file the store holds already? */
static int stored_has(const struct kvmemd_proc *p, int fd)
{
	struct stat a, b;
	int i;

	if (fstat(fd, &a))
		return 0;
	for (i = 0; i < p->nstored; i++)
		if (!fstat(p->stored[i], &b) && a.st_dev == b.st_dev &&
		    a.st_ino == b.st_ino)
			return 1;
	return 0;
}

/* The value of "NAME=" in @text, cut at its line's end, to @out. */
static int note_value(const char *text, const char *name, char *out, size_t len)
{
	const char *v = strstr(text, name);

	if (!v)
		return 0;
	v += strlen(name);
	snprintf(out, len, "%.*s", (int)strcspn(v, "\n"), v);
	return 1;
}

/* What systemd does with notification @text and descriptor @fd (-1:
 * none). Under the lock. */
static void note_take(struct kvmemd_proc *p, const char *text, int fd)
{
	struct kvmemd_notes *n = p->notes;
	char name[64];
	int i;

	if (strstr(text, "FDSTOREREMOVE=1")) {
		if (note_value(text, "FDNAME=", name, sizeof(name)))
			for (i = 0; i < p->nstored; i++) {
				if (strcmp(p->stored_name[i], name))
					continue;
				close(p->stored[i]);
				p->stored[i] = p->stored[--p->nstored];
				memcpy(p->stored_name[i],
				       p->stored_name[p->nstored],
				       sizeof(name));
				i--;
			}
	} else if (strstr(text, "FDSTORE=1")) {
		if (fd >= 0 && p->nstored < KVMEMD_FDSTORE_MAX &&
		    note_value(text, "FDNAME=", name, sizeof(name)) &&
		    !stored_has(p, fd)) {
			memcpy(p->stored_name[p->nstored], name, sizeof(name));
			p->stored[p->nstored++] = fd;
			fd = -1;
		}
	} else {
		if (n->tail - n->head == KVMEMD_NOTES_MAX)
			n->head++;
		snprintf(n->text[n->tail++ % KVMEMD_NOTES_MAX],
			 sizeof(n->text[0]), "%s", text);
		pthread_cond_broadcast(&n->cond);
	}
	if (fd >= 0)
		close(fd);
}

/* Take what waits on the socket. Under the lock. Return: how many. */
static int notes_read(struct kvmemd_proc *p)
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	char text[512];
	struct iovec iov = { .iov_base = text, .iov_len = sizeof(text) - 1 };
	struct msghdr m;
	struct cmsghdr *cm;
	int fd, got = 0;
	ssize_t len;

	for (;; got++) {
		m = (struct msghdr){ .msg_iov = &iov,
				     .msg_iovlen = 1,
				     .msg_control = u.buf,
				     .msg_controllen = sizeof(u.buf) };
		len = recvmsg(p->notify, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (len < 0)
			return got;
		text[len] = 0;
		fd = -1;
		for (cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm))
			if (cm->cmsg_level == SOL_SOCKET &&
			    cm->cmsg_type == SCM_RIGHTS)
				memcpy(&fd, CMSG_DATA(cm), sizeof(fd));
		note_take(p, text, fd);
	}
}

static void *notes_thread(void *arg)
{
	struct kvmemd_proc *p = arg;
	struct pollfd pfd[2] = { { .fd = p->notify, .events = POLLIN },
				 { .fd = p->notes->wake[0],
				   .events = POLLIN } };

	pthread_mutex_lock(&p->notes->lock);
	p->notes->started = 1;
	pthread_cond_broadcast(&p->notes->cond);
	pthread_mutex_unlock(&p->notes->lock);
	for (;;) {
		if (poll(pfd, 2, -1) < 0 && errno != EINTR)
			return NULL;
		if (pfd[1].revents)
			return NULL;
		pthread_mutex_lock(&p->notes->lock);
		notes_read(p);
		pthread_mutex_unlock(&p->notes->lock);
	}
}

static void notes_start(struct kvmemd_proc *p)
{
	struct kvmemd_notes *n = kvmem_check_xmalloc(sizeof(*n));

	memset(n, 0, sizeof(*n));
	pthread_mutex_init(&n->lock, NULL);
	pthread_cond_init(&n->cond, NULL);
	ck_assert_int_eq(pipe2(n->wake, O_CLOEXEC), 0);
	p->notes = n;
	ck_assert_int_eq(pthread_create(&n->thread, NULL, notes_thread, p), 0);
	/* A thread starting holds locks of the C library and of a
	 * sanitizer's runtime that a child forked then would never get. */
	pthread_mutex_lock(&n->lock);
	while (!n->started)
		pthread_cond_wait(&n->cond, &n->lock);
	pthread_mutex_unlock(&n->lock);
}

static void notes_stop(struct kvmemd_proc *p)
{
	struct kvmemd_notes *n = p->notes;

	if (!n)
		return;
	ck_assert_int_eq(write(n->wake[1], "", 1), 1);
	pthread_join(n->thread, NULL);
	close(n->wake[0]);
	close(n->wake[1]);
	pthread_mutex_destroy(&n->lock);
	pthread_cond_destroy(&n->cond);
	free(n);
	p->notes = NULL;
}

/* A daemon that exited said all it had to: in the store it is. */
static void notes_drain(struct kvmemd_proc *p)
{
	pthread_mutex_lock(&p->notes->lock);
	notes_read(p);
	pthread_mutex_unlock(&p->notes->lock);
}

void kvmemd_store_lose(struct kvmemd_proc *p, const char *prefix)
{
	int i;

	pthread_mutex_lock(&p->notes->lock);
	notes_read(p);
	for (i = 0; i < p->nstored; i++) {
		if (strncmp(p->stored_name[i], prefix, strlen(prefix)))
			continue;
		close(p->stored[i]);
		p->stored[i] = p->stored[--p->nstored];
		memcpy(p->stored_name[i], p->stored_name[p->nstored],
		       sizeof(p->stored_name[i]));
		i--;
	}
	pthread_mutex_unlock(&p->notes->lock);
}

int kvmemd_stored(struct kvmemd_proc *p, const char *prefix)
{
	int i, n = 0;

	pthread_mutex_lock(&p->notes->lock);
	notes_read(p);
	for (i = 0; i < p->nstored; i++)
		n += !strncmp(p->stored_name[i], prefix, strlen(prefix));
	pthread_mutex_unlock(&p->notes->lock);
	return n;
}

int kvmemd_notify_wait(struct kvmemd_proc *p, const char *prefix,
		       int timeout_ms, char *out, size_t len)
{
	struct kvmemd_notes *n = p->notes;
	size_t plen = strlen(prefix);
	struct timespec until;
	const char *line;
	int ret = 0;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&n->lock);
	while (!ret) {
		if (n->head == n->tail &&
		    pthread_cond_timedwait(&n->cond, &n->lock, &until))
			break;
		while (!ret && n->head != n->tail) {
			snprintf(out, len, "%s",
				 n->text[n->head++ % KVMEMD_NOTES_MAX]);
			for (line = out; line && !ret;
			     line = strchr(line, '\n')) {
				if (*line == '\n')
					line++;
				ret = !strncmp(line, prefix, plen);
			}
		}
	}
	pthread_mutex_unlock(&n->lock);
	return ret;
}

void kvmemd_write_conf(struct kvmemd_proc *p, const char *conf)
{
	FILE *f = fopen(p->conf, "w");
	const char *at;

	ck_assert_msg(f, "%s: %s", p->conf, strerror(errno));
	/* @DIR@ is the daemon's directory, unknown before it is made. */
	while (conf && (at = strstr(conf, "@DIR@"))) {
		fwrite(conf, 1, (size_t)(at - conf), f);
		fputs(p->dir, f);
		conf = at + 5;
	}
	if (conf)
		fputs(conf, f);
	ck_assert_int_eq(fclose(f), 0);
}

void kvmemd_start(struct kvmemd_proc *p, const char *conf,
		  const char *const *env)
{
	const char *tmp = getenv("TMPDIR");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char nsock[108];

	memset(p, 0, sizeof(*p));
	ck_assert_msg(
		(size_t)snprintf(p->dir, sizeof(p->dir), "%s/kvmemd.XXXXXX",
				 tmp && *tmp ? tmp : "/tmp") < sizeof(p->dir),
		"TMPDIR is too long for socket paths");
	ck_assert_msg(mkdtemp(p->dir), "mkdtemp: %s", strerror(errno));
	snprintf(p->sock, sizeof(p->sock), "%s/k.sock", p->dir);
	snprintf(p->admin, sizeof(p->admin), "%s/a.sock", p->dir);
	snprintf(p->conf, sizeof(p->conf), "%s/kvmemd.conf", p->dir);
	snprintf(p->log, sizeof(p->log), "%s/kvmemd.log", p->dir);
	snprintf(nsock, sizeof(nsock), "%s/notify", p->dir);
	kvmemd_write_conf(p, conf);

	p->notify = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(p->notify, 0);
	strcpy(sa.sun_path, nsock);
	ck_assert_msg(!bind(p->notify, (struct sockaddr *)&sa, sizeof(sa)),
		      "bind %s: %s", nsock, strerror(errno));
	notes_start(p);
	kvmemd_restart(p, env);
}

/*
 * System call @nr fails with ENOSYS from here on, in this process and what
 * it executes: a seccomp filter, which needs no privilege after
 * PR_SET_NO_NEW_PRIVS.
 */
static int deny_syscall(long nr)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned int)nr, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]),
				   .filter = f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -1;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

/*
 * Everything the child needs, made before fork(): the test process has a
 * thread (the notes), so its child may make only async-signal-safe calls
 * until it executes kvmemd (a lock another thread held at the fork, in the
 * C library or a sanitizer's runtime, is never released in the child).
 */
struct plan {
	const char *argv[12];
	char **envp;
	char state[300], nsock[160], nfds[32], names[KVMEMD_FDSTORE_MAX * 65];
	char pid_var[32]; /* "LISTEN_PID=" and room for the child's pid */
	long deny[8];
	int ndeny;
};

/* Is environment entry @e one of the names the child's own ones set? */
static int env_overridden(const char *e, const char *const *env)
{
	static const char *const ours[] = { "NOTIFY_SOCKET=",  "WATCHDOG_USEC=",
					    "WATCHDOG_PID=",   "LISTEN_FDS=",
					    "LISTEN_FDNAMES=", "LISTEN_PID=" };
	size_t i, n;

	for (i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
		if (!strncmp(e, ours[i], strlen(ours[i])))
			return 1;
	for (; env && *env; env++) {
		n = strcspn(*env, "=") + 1;
		if (!strncmp(e, *env, n))
			return 1;
	}
	return 0;
}

static void plan_make(struct plan *pl, const struct kvmemd_proc *p,
		      const char *const *env)
{
	extern char **environ;
	const size_t deny = strlen(KVMEMD_DENY_SYSCALL);
	size_t n = 0, i, j, first, len;
	int a = 0, k;

	memset(pl, 0, sizeof(*pl));
	snprintf(pl->state, sizeof(pl->state), "%s/state", p->dir);
	snprintf(pl->nsock, sizeof(pl->nsock), "NOTIFY_SOCKET=%s/notify",
		 p->dir);
	pl->argv[a++] = "kvmemd";
	pl->argv[a++] = "-f";
	pl->argv[a++] = "-c";
	pl->argv[a++] = p->conf;
	pl->argv[a++] = "-s";
	pl->argv[a++] = p->sock;
	pl->argv[a++] = "-a";
	pl->argv[a++] = p->admin;
	pl->argv[a++] = "-d";
	pl->argv[a++] = pl->state;
	pl->argv[a] = NULL;
	while (environ[n])
		n++;
	for (i = 0; env && env[i]; i++)
		n++;
	pl->envp = kvmem_check_xmalloc((n + 8) * sizeof(*pl->envp));
	n = 0;
	for (i = 0; environ[i]; i++)
		if (!env_overridden(environ[i], env))
			pl->envp[n++] = environ[i];
	pl->envp[n++] = pl->nsock;
	first = n;
	for (i = 0; env && env[i]; i++) {
		if (strncmp(env[i], KVMEMD_DENY_SYSCALL, deny)) {
			/* As putenv() in order: a later one of a name wins. */
			len = strcspn(env[i], "=") + 1;
			for (j = first; j < n; j++)
				if (!strncmp(pl->envp[j], env[i], len))
					break;
			pl->envp[j] = (char *)env[i];
			n += j == n;
			continue;
		}
		ck_assert_int_lt(pl->ndeny,
				 (int)(sizeof(pl->deny) / sizeof(pl->deny[0])));
		pl->deny[pl->ndeny++] = strtol(env[i] + deny, NULL, 10);
	}
	if (p->nstored) {
		/* What the store holds, at descriptors 3 on, named as
		 * sd_listen_fds_with_names() reads them. */
		snprintf(pl->nfds, sizeof(pl->nfds), "LISTEN_FDS=%d",
			 p->nstored);
		strcpy(pl->names, "LISTEN_FDNAMES=");
		for (k = 0; k < p->nstored; k++) {
			if (k)
				strcat(pl->names, ":");
			strcat(pl->names, p->stored_name[k]);
		}
		strcpy(pl->pid_var, "LISTEN_PID=");
		pl->envp[n++] = pl->nfds;
		pl->envp[n++] = pl->names;
		pl->envp[n++] = pl->pid_var;
	}
	pl->envp[n] = NULL;
}

/* In the child: the stored descriptors at 3 on, and LISTEN_PID. */
static void pass_stored(struct plan *pl, const struct kvmemd_proc *p)
{
	int high[KVMEMD_FDSTORE_MAX], i;
	char digits[16];
	size_t n = 0, at;
	long pid;

	if (!p->nstored)
		return;
	/* Out of the way first: 3.. may be taken by what is being moved. */
	for (i = 0; i < p->nstored; i++)
		high[i] = fcntl(p->stored[i], F_DUPFD, 100);
	for (i = 0; i < p->nstored; i++) {
		if (high[i] < 0 || dup2(high[i], 3 + i) < 0)
			_exit(125);
		close(high[i]);
	}
	for (pid = getpid(); pid; pid /= 10)
		digits[n++] = (char)('0' + pid % 10);
	at = strlen("LISTEN_PID=");
	while (n)
		pl->pid_var[at++] = digits[--n];
	pl->pid_var[at] = 0;
}

static void spawn(struct kvmemd_proc *p, const char *const *env)
{
	const char *path = daemon_path();
	struct plan pl;
	int i, fd;

	/* The child reads the store, and the plan names what it holds: not
	 * while the thread changes it. */
	pthread_mutex_lock(&p->notes->lock);
	plan_make(&pl, p, env);
	p->pid = fork();
	if (!p->pid) {
		fd = open(p->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(fd, STDERR_FILENO);
		if (fd != STDERR_FILENO)
			close(fd);
		for (i = 0; i < pl.ndeny; i++)
			if (deny_syscall(pl.deny[i]))
				_exit(126);
		pass_stored(&pl, p);
		execve(path, (char *const *)pl.argv, pl.envp);
		_exit(127);
	}
	pthread_mutex_unlock(&p->notes->lock);
	free(pl.envp);
	ck_assert_int_ge(p->pid, 0);
}

void kvmemd_restart(struct kvmemd_proc *p, const char *const *env)
{
	char buf[512];

	spawn(p, env);
	if (!kvmemd_notify_wait(p, "READY=1", ready_timeout_ms(), buf,
				sizeof(buf))) {
		char log[2048] = "";
		FILE *f = fopen(p->log, "r");

		if (f) {
			log[fread(log, 1, sizeof(log) - 1, f)] = 0;
			fclose(f);
		}
		kill(p->pid, SIGKILL);
		ck_abort_msg("kvmemd (%s) did not become ready; its log:\n%s",
			     daemon_path(), log);
	}
}

int kvmemd_try_restart(struct kvmemd_proc *p)
{
	int status;

	spawn(p, NULL);
	ck_assert_int_eq(waitpid(p->pid, &status, 0), p->pid);
	p->pid = 0;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Wait for the daemon to exit; its status, as kvmemd_stop() says it. */
static int reap(struct kvmemd_proc *p)
{
	int status, i;

	for (i = 0; i < 2000; i++) {
		if (waitpid(p->pid, &status, WNOHANG) == p->pid)
			break;
		usleep(10000);
	}
	if (i == 2000) {
		kill(p->pid, SIGKILL);
		waitpid(p->pid, &status, 0);
	}
	p->pid = 0;
	notes_drain(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int kvmemd_stop_keep(struct kvmemd_proc *p)
{
	if (p->pid <= 0)
		return -1;
	kill(p->pid, SIGTERM);
	return reap(p);
}

int kvmemd_stop(struct kvmemd_proc *p)
{
	int status = kvmemd_stop_keep(p);

	pthread_mutex_lock(&p->notes->lock);
	stored_close(p);
	pthread_mutex_unlock(&p->notes->lock);
	return status;
}

void kvmemd_kill(struct kvmemd_proc *p)
{
	ck_assert_int_gt(p->pid, 0);
	kill(p->pid, SIGKILL);
	ck_assert_int_eq(reap(p), 128 + SIGKILL);
}

static int rm_entry(const char *path, const struct stat *st, int flag,
		    struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

void kvmemd_cleanup(struct kvmemd_proc *p)
{
	notes_stop(p);
	stored_close(p);
	if (p->notify > 0)
		close(p->notify);
	nftw(p->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int kvmemd_log_lines(const struct kvmemd_proc *p, const char *needle)
{
	FILE *f = fopen(p->log, "r");
	char line[4096];
	int n = 0;

	ck_assert_msg(f, "%s: %s", p->log, strerror(errno));
	while (fgets(line, sizeof(line), f))
		n += !!strstr(line, needle);
	fclose(f);
	return n;
}
int kvmemd_fd_count(const struct kvmemd_proc *p)
{
	char path[64];
	struct dirent *d;
	DIR *dir;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)p->pid);
	dir = opendir(path);
	ck_assert_msg(dir, "%s: %s", path, strerror(errno));
	while ((d = readdir(dir)))
		n += d->d_name[0] != '.';
	closedir(dir);
	return n;
}

int kvmemd_admin_send(const struct kvmemd_proc *p, const char *req)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	strcpy(sa.sun_path, p->admin);
	ck_assert_msg(!connect(fd, (struct sockaddr *)&sa, sizeof(sa)),
		      "connect %s: %s", p->admin, strerror(errno));
	ck_assert_int_eq(send(fd, req, strlen(req), MSG_NOSIGNAL),
			 (ssize_t)strlen(req));
	return fd;
}

void kvmemd_admin(const struct kvmemd_proc *p, const char *req, char *out,
		  size_t len)
{
	int fd = kvmemd_admin_send(p, req);
	size_t got = 0;
	ssize_t n;

	/* A long reply comes in several datagrams; a newline ends it. */
	do {
		ck_assert_msg(got + 1 < len, "reply to \"%s\" longer than %zu",
			      req, len);
		n = recv(fd, out + got, len - 1 - got, 0);
		ck_assert_msg(n > 0, "reply to \"%s\": %s", req,
			      n ? strerror(errno) : "connection closed");
		got += (size_t)n;
	} while (out[got - 1] != '\n');
	out[got] = 0;
	close(fd);
}

const char *kvmemd_admin_ok(const struct kvmemd_proc *p, char *out, size_t len,
			    const char *fmt, ...)
{
	char req[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(req, sizeof(req), fmt, ap);
	va_end(ap);
	kvmemd_admin(p, req, out, len);
	ck_assert_msg(!strstr(out, "\"error\""), "%s: %s", req, out);
	return out;
}

unsigned long long kvmemd_json_after(const char *json, const char *anchor,
				     const char *key)
{
	const char *p = strstr(json, anchor);

	ck_assert_msg(p, "no %s in %s", anchor, json);
	return kvmemd_json_u64(p, key);
}

unsigned long long kvmemd_json_u64(const char *json, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(json, pat);
	ck_assert_msg(p, "no \"%s\" in %s", key, json);
	return strtoull(p + strlen(pat), NULL, 10);
}

void kvmemd_inject_flips(const char *json, const char *codec,
			 unsigned long long f[8])
{
	char anchor[64];
	const char *at;
	int i;

	snprintf(anchor, sizeof(anchor), "\"codec\":\"%s\"", codec);
	at = strstr(json, anchor);
	ck_assert_msg(at, "no %s in %s", anchor, json);
	at = strstr(at, "\"by_flips\":[");
	ck_assert_msg(at, "no by_flips in %s", json);
	at += strlen("\"by_flips\":[");
	for (i = 0; i < 8; i++) {
		f[i] = strtoull(at, (char **)&at, 10);
		at++;
	}
}

struct kvmem_geometry kvmemd_test_geo(void)
{
	struct kvmem_geometry g = { .layers = 2,
				    .kv_heads = 2,
				    .head_dim = 64 };

	kvmem_geometry_default(&g);
	return g;
}

struct kvmem_cache *kvmemd_connect(const struct kvmemd_proc *p, uint64_t quota)
{
	struct kvmem_connect_opts o = { .quota_bytes = quota };
	struct kvmem_geometry g = kvmemd_test_geo();
	struct kvmem_cache *c = NULL;
	int ret = kvmem_connect(p->sock, &g, &o, &c);

	ck_assert_msg(!ret, "kvmem_connect %s: %s (%s)", p->sock,
		      kvmem_strerror(ret), kvmem_connect_error());
	return c;
}

void kvmemd_release(struct kvmem_cache *c, struct kvmem_seq *s)
{
	struct kvmem_stats st;

	ck_assert_int_eq(kvmem_seq_release(s), 0);
	/* Completions come in order: the release went before this. */
	ck_assert_int_eq(kvmem_daemon_stats(c, &st), 0);
}

void kvmemd_wait_no_sessions(const struct kvmemd_proc *p)
{
	char out[4096];
	int i;

	for (i = 0; i < 500; i++) {
		kvmemd_admin_ok(p, out, sizeof(out), "status");
		if (!kvmemd_json_u64(out, "sessions") &&
		    !kvmemd_json_u64(out, "pool_used_bytes"))
			break;
		usleep(10000);
	}
	ck_assert_msg(!kvmemd_json_u64(out, "sessions"),
		      "kvmemd still serves sessions: %s", out);
	ck_assert_msg(!kvmemd_json_u64(out, "pool_used_bytes"),
		      "kvmemd's pool is not all free: %s", out);
}

struct kvmem_hello kvmemd_hello(uint64_t quota)
{
	struct kvmem_hello h = {
		.magic = KVMEM_HELLO_MAGIC,
		.abi_version = KVMEM_ABI_VERSION,
		.size = sizeof(h),
		.features = KVMEM_FEAT_ALL,
		.geometry = kvmemd_test_geo(),
		.quota_bytes = quota,
	};

	return h;
}

size_t kvmemd_welcome_size(const void *msg, size_t len)
{
	struct kvmem_hello h;

	if (len != sizeof(h))
		return KVMEM_WELCOME_V3_SIZE;
	memcpy(&h, msg, sizeof(h));
	return h.magic == KVMEM_HELLO_MAGIC && h.abi_version >= 4
		       ? sizeof(struct kvmem_welcome)
		       : KVMEM_WELCOME_V3_SIZE;
}

int kvmemd_raw_attach(struct kvmemd_raw *r, const struct kvmemd_proc *p,
		      const void *msg, size_t len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = &r->w, .iov_len = sizeof(r->w) };
	struct msghdr m = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = u.buf,
		.msg_controllen = sizeof(u.buf),
	};
	struct cmsghdr *cm;
	int fds[4] = { -1, -1, -1, -1 };
	ssize_t n;
	void *map;
	int nfds;

	memset(r, 0, sizeof(*r));
	r->memfd = r->sq_efd = r->cq_efd = r->gpu_fd = -1;
	r->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(r->sock, 0);
	strcpy(sa.sun_path, p->sock);
	ck_assert_msg(!connect(r->sock, (struct sockaddr *)&sa, sizeof(sa)),
		      "connect %s: %s", p->sock, strerror(errno));
	send(r->sock, msg, len, MSG_NOSIGNAL);
	n = recvmsg(r->sock, &m, MSG_CMSG_CLOEXEC);
	ck_assert_int_eq(n, kvmemd_welcome_size(msg, len));
	ck_assert_uint_eq(r->w.magic, KVMEM_WELCOME_MAGIC);
	ck_assert_uint_eq(r->w.size, n);
	ck_assert_uint_eq(r->w.abi_version, KVMEM_ABI_VERSION);
	cm = CMSG_FIRSTHDR(&m);
	if (r->w.error) {
		ck_assert_msg(!cm, "a refusal came with descriptors");
		ck_assert_msg(r->w.message[0], "a refusal without a reason");
		return r->w.error;
	}
	ck_assert_ptr_nonnull(cm);
	nfds = (size_t)n > offsetof(struct kvmem_welcome, gpu_bytes) &&
			       r->w.gpu_bytes
		       ? 4
		       : 3;
	ck_assert_uint_eq(cm->cmsg_len, CMSG_LEN(nfds * sizeof(int)));
	memcpy(fds, CMSG_DATA(cm), nfds * sizeof(int));
	r->memfd = fds[0];
	r->sq_efd = fds[1];
	r->cq_efd = fds[2];
	r->gpu_fd = fds[3];
	if (r->gpu_fd >= 0) {
		map = mmap(NULL, r->w.gpu_bytes, PROT_READ | PROT_WRITE,
			   MAP_SHARED, r->gpu_fd, 0);
		r->gpu = map == MAP_FAILED ? NULL : map;
	}
	map = mmap(NULL, r->w.map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
		   r->memfd, 0);
	ck_assert_msg(map != MAP_FAILED, "mmap: %s", strerror(errno));
	r->map = map;
	r->ring = (struct kvmem_ring *)(r->map + r->w.ring_off);
	r->sqes = (struct kvmem_sqe *)(r->map + r->w.sqes_off);
	r->cqes = (struct kvmem_cqe *)(r->map + r->w.cqes_off);
	r->buf = r->map + r->w.buf_off;
	r->arena = r->map + r->w.arena_off;
	return 0;
}

void kvmemd_raw_detach(struct kvmemd_raw *r)
{
	if (r->map)
		munmap(r->map, r->w.map_bytes);
	if (r->gpu)
		munmap(r->gpu, r->w.gpu_bytes);
	if (r->gpu_fd >= 0)
		close(r->gpu_fd);
	if (r->memfd >= 0)
		close(r->memfd);
	if (r->sq_efd >= 0)
		close(r->sq_efd);
	if (r->cq_efd >= 0)
		close(r->cq_efd);
	close(r->sock);
	memset(r, 0, sizeof(*r));
}

void kvmemd_raw_queue(struct kvmemd_raw *r, const struct kvmem_sqe *e)
{
	r->sqes[r->sq_tail & (r->w.sq_entries - 1)] = *e;
	__atomic_store_n(&r->ring->sq_tail, ++r->sq_tail, __ATOMIC_RELEASE);
}

void kvmemd_raw_doorbell(struct kvmemd_raw *r)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	eventfd_write(r->sq_efd, 1);
}

struct kvmem_cqe kvmemd_raw_reap(struct kvmemd_raw *r)
{
	struct kvmem_cqe c;
	int i;

	for (i = 0; i < 200000; i++) {
		if (__atomic_load_n(&r->ring->cq_tail, __ATOMIC_ACQUIRE) !=
		    r->cq_head)
			break;
		usleep(50);
	}
	ck_assert_msg(i < 200000, "no completion in 10 s");
	c = r->cqes[r->cq_head & (r->w.cq_entries - 1)];
	__atomic_store_n(&r->ring->cq_head, ++r->cq_head, __ATOMIC_RELEASE);
	return c;
}

struct kvmem_hello kvmemd_big_hello(uint32_t sq)
{
	struct kvmem_hello h = kvmemd_hello(24u << 20);

	h.geometry.kv_heads = 32;
	h.geometry.head_dim = 128;
	h.geometry.tokens_per_page = KVMEMD_BIG_TOKENS;
	h.geometry.sink_tokens = 0;
	h.geometry.format = KVMEM_FMT_INT8;
	h.geometry.codec = KVMEM_CODEC_SECDED72;
	h.sq_entries = sq;
	return h;
}

uint32_t kvmemd_raw_big_page(struct kvmemd_raw *r,
			     const struct kvmem_geometry *g, uint64_t seed)
{
	const size_t n = (size_t)g->tokens_per_page * g->kv_heads * g->head_dim;
	struct kvmem_page_hdr hdr = { .seq = 1,
				      .flags = KVMEM_HDR_SEALED,
				      .ntokens = g->tokens_per_page };
	struct kvmem_rng rng;
	uint32_t slot;
	float *k, *v;
	size_t i;

	ck_assert_int_eq(KVMEMD_OP(r, 1, .opcode = KVMEM_OP_SEQ_CREATE), 1);
	ck_assert_int_eq(
		KVMEMD_OP(r, 2, .opcode = KVMEM_OP_PAGE_ALLOC, .len = 1), 1);
	memcpy(&slot, r->buf, sizeof(slot));
	k = kvmem_check_xmalloc(n * sizeof(float));
	v = kvmem_check_xmalloc(n * sizeof(float));
	kvmem_rng_seed(&rng, seed);
	for (i = 0; i < n; i++) {
		k[i] = kvmem_check_rnd_value(&rng, 1.0);
		v[i] = kvmem_check_rnd_value(&rng, 1.0);
	}
	ck_assert_int_eq(kvmem_page_encode(r->arena + (size_t)slot * 4096, g,
					   &hdr, 0, k, v),
			 0);
	free(k);
	free(v);
	return slot;
}

void kvmemd_raw_seal_round(struct kvmemd_raw *r, uint32_t slot, uint32_t i)
{
	const struct kvmem_sqe e[3] = {
		{ .opcode = KVMEM_OP_PAGE_SEAL,
		  .slot = slot,
		  .seq = 1,
		  .ntokens = KVMEMD_BIG_TOKENS,
		  .user_data = 3ull * i },
		{ .opcode = KVMEM_OP_PAGE_FREE,
		  .slot = slot,
		  .seq = 1,
		  .user_data = 3ull * i + 1 },
		{ .opcode = KVMEM_OP_PAGE_ALLOC,
		  .len = 1,
		  .user_data = 3ull * i + 2 },
	};
	int j;

	for (j = 0; j < 3; j++)
		r->sqes[r->sq_tail++ & (r->w.sq_entries - 1)] = e[j];
}

void kvmemd_raw_publish(struct kvmemd_raw *r)
{
	__atomic_store_n(&r->ring->sq_tail, r->sq_tail, __ATOMIC_RELEASE);
	kvmemd_raw_doorbell(r);
}

struct kvmem_cqe kvmemd_raw_op(struct kvmemd_raw *r, const struct kvmem_sqe *e)
{
	kvmemd_raw_queue(r, e);
	kvmemd_raw_doorbell(r);
	return kvmemd_raw_reap(r);
}

struct kvmem_cqe kvmemd_raw_call(struct kvmemd_raw *r, struct kvmem_sqe e,
				 uint64_t ud)
{
	struct kvmem_cqe c;

	e.user_data = ud;
	c = kvmemd_raw_op(r, &e);
	ck_assert_uint_eq(c.user_data, ud);
	ck_assert_uint_eq(c.flags, 0);
	return c;
}

int kvmemd_raw_hung_up(struct kvmemd_raw *r, int timeout_ms)
{
	struct pollfd pfd = { .fd = r->sock, .events = POLLRDHUP };

	if (poll(&pfd, 1, timeout_ms) <= 0)
		return 0;
	return !!(pfd.revents & (POLLRDHUP | POLLHUP));
}

void kvmemd_tokens(struct kvmem_rng *r, uint32_t ntok, float **k, float **v)
{
	const struct kvmem_geometry g = kvmemd_test_geo();
	size_t n = (size_t)ntok * g.layers * g.kv_heads * g.head_dim, i;

	*k = kvmem_check_xmalloc(n * sizeof(float));
	*v = kvmem_check_xmalloc(n * sizeof(float));
	for (i = 0; i < n; i++) {
		(*k)[i] = kvmem_check_rnd_value(r, 1.0);
		(*v)[i] = kvmem_check_rnd_value(r, 1.0);
	}
}

struct kvmem_seq *kvmemd_seq_with(struct kvmem_cache *c, const float *k,
				  const float *v, uint32_t ntok)
{
	struct kvmem_seq *s;

	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append_all(s, k, v, ntok), 0);
	return s;
}

struct kvmem_seq *kvmemd_reference(struct kvmem_cache **e, const float *k,
				   const float *v, uint32_t ntok)
{
	const struct kvmem_geometry g = kvmemd_test_geo();

	ck_assert_int_eq(kvmem_open_embedded(&g, 8u << 20, e), 0);
	return kvmemd_seq_with(*e, k, v, ntok);
}

void kvmemd_expect_same(struct kvmem_seq *a, struct kvmem_seq *b,
			struct kvmem_rng *r)
{
	const struct kvmem_geometry g = kvmemd_test_geo();
	const uint32_t nh = 2 * g.kv_heads, D = g.head_dim;
	struct kvmem_attend_opts o = { .n_heads = nh };
	float q[4 * 64], oa[4 * 64], ob[4 * 64];
	uint32_t l, len, i;

	for (l = 0; l < g.layers; l++) {
		size_t n;
		float *ka, *va, *kb, *vb;

		len = kvmem_seq_len(b, l);
		ck_assert_uint_eq(kvmem_seq_len(a, l), len);
		n = (size_t)len * g.kv_heads * D;
		ka = kvmem_check_xmalloc(n * sizeof(float) + 1);
		va = kvmem_check_xmalloc(n * sizeof(float) + 1);
		kb = kvmem_check_xmalloc(n * sizeof(float) + 1);
		vb = kvmem_check_xmalloc(n * sizeof(float) + 1);
		ck_assert_int_eq(kvmem_seq_read(a, l, 0, len, 0, ka, va, NULL),
				 0);
		ck_assert_int_eq(kvmem_seq_read(b, l, 0, len, 0, kb, vb, NULL),
				 0);
		EXPECT_MEM(ka, kb, n * sizeof(float), "K of layer %u", l);
		EXPECT_MEM(va, vb, n * sizeof(float), "V of layer %u", l);
		for (i = 0; i < nh * D; i++)
			q[i] = kvmem_check_rnd_value(r, 1.0);
		if (len) {
			ck_assert_int_eq(kvmem_attend(a, l, q, oa, &o, NULL),
					 0);
			ck_assert_int_eq(kvmem_attend(b, l, q, ob, &o, NULL),
					 0);
			EXPECT_MEM(oa, ob, sizeof(oa), "attention of layer %u",
				   l);
		}
		free(ka);
		free(va);
		free(kb);
		free(vb);
	}
}
