/*
 * kvmem_check.c - what the suites share: finding and running the built tools
 *
 * A tool runs as a process with its stdin read from a file and its stdout
 * and stderr written to files, all in a fresh temporary directory that is
 * removed again before kvmem_check_run() returns.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvmem_check.h"

#define MAX_ARGS 32

const char *kvmem_check_tool(const char *name)
{
	static char path[4096];
	const char *dir = getenv("KVMEM_BUILD");

	snprintf(path, sizeof(path), "%s/tools/%s", dir ? dir : "build", name);
	return path;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t len = 0, cap = 0, got;

	ck_assert_msg(f != NULL, "open %s: %s", path, strerror(errno));
	for (;;) {
		if (cap - len < 4096) {
			cap = cap ? cap * 2 : 8192;
			buf = realloc(buf, cap);
			ck_assert_ptr_nonnull(buf);
		}
		got = fread(buf + len, 1, cap - len - 1, f);
		len += got;
		if (!got)
			break;
	}
	ck_assert_msg(!ferror(f), "read %s", path);
	fclose(f);
	buf[len] = '\0';
	return buf;
}

static void spit(const char *path, const char *text)
{
	FILE *f = fopen(path, "wb");

	ck_assert_msg(f != NULL, "create %s: %s", path, strerror(errno));
	ck_assert_uint_eq(fwrite(text, 1, strlen(text), f), strlen(text));
	ck_assert_int_eq(fclose(f), 0);
}

void kvmem_check_run(struct kvmem_run *r, const char *name, const char *input,
		     const char *out_path, const char *const *args)
{
	const char *tool = kvmem_check_tool(name);
	const char *tmp = getenv("TMPDIR");
	char dir[4096], in[4200], out[4200], err[4200];
	const char *argv[MAX_ARGS];
	int argc = 0, wstatus;
	pid_t pid;

	ck_assert_msg(access(tool, X_OK) == 0,
		      "%s not built (set KVMEM_BUILD): %s", tool,
		      strerror(errno));
	argv[argc++] = tool;
	while ((argv[argc] = *args++) != NULL) {
		argc++;
		ck_assert_int_lt(argc, MAX_ARGS - 1);
	}

	snprintf(dir, sizeof(dir), "%s/kvmem-check-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
	snprintf(in, sizeof(in), "%s/in", dir);
	snprintf(out, sizeof(out), "%s/out", dir);
	snprintf(err, sizeof(err), "%s/err", dir);
	spit(in, input);

	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fi = open(in, O_RDONLY);
		int fo = open(out_path ? out_path : out,
			      O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (fi < 0 || fo < 0 || fe < 0 || dup2(fi, 0) < 0 ||
		    dup2(fo, 1) < 0 || dup2(fe, 2) < 0)
			_exit(126);
		execv(tool, (char *const *)argv);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &wstatus, 0), pid);
	if (WIFEXITED(wstatus))
		r->status = WEXITSTATUS(wstatus);
	else
		r->status = 128 + WTERMSIG(wstatus);
	r->out = out_path ? strdup("") : slurp(out);
	r->err = slurp(err);
	ck_assert_ptr_nonnull(r->out);
	unlink(in);
	unlink(out);
	unlink(err);
	ck_assert_msg(rmdir(dir) == 0, "rmdir %s: %s", dir, strerror(errno));
	ck_assert_msg(r->status != 126 && r->status != 127,
		      "could not start %s (status %d)", tool, r->status);
}

void kvmem_check_run_free(struct kvmem_run *r)
{
	free(r->out);
	free(r->err);
}
