/* SPDX-License-Identifier: MIT */
/*
 * kvmem_check.c - what the suites share: finding and running the built
 * tools, and the helpers behind kvmem_check.h's assertions and fixtures
 *
 * A tool runs as a process with its stdin read from a file and its stdout
 * and stderr written to files, all in a fresh temporary directory that is
 * removed again before kvmem_check_run() returns.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvmem/page.h"
#include "kvmem_check.h"
#include "rng.h"

#define MAX_ARGS 32

const char *kvmem_check_srcdir(void)
{
	const char *dir = getenv("KVMEM_SRCDIR");

	return dir && *dir ? dir : ".";
}

const char *kvmem_check_builddir(void)
{
	const char *dir = getenv("KVMEM_BUILD");

	return dir && *dir ? dir : "build";
}

const char *kvmem_check_simt_env(void)
{
	static char env[4096 + 16];
	char path[4096];

	snprintf(path, sizeof(path), "%s/tests/libkvmem-simt.so",
		 kvmem_check_builddir());
	ck_assert_msg(realpath(path, env + 14), "%s: %s", path,
		      strerror(errno));
	memcpy(env, "FAKECUDA_SIMT=", 14);
	return env;
}

const char *kvmem_check_version(void)
{
	static char version[32];
	char path[4096], *text, *p;
	size_t n;

	if (version[0])
		return version;
	snprintf(path, sizeof(path), "%s/Makefile", kvmem_check_srcdir());
	text = kvmem_check_read_file(path, NULL);
	p = strstr(text, "\nVERSION := ");
	ck_assert_msg(p != NULL, "%s: no VERSION := line", path);
	p += strlen("\nVERSION := ");
	n = strcspn(p, " \t\n");
	ck_assert_msg(n > 0 && n < sizeof(version), "%s: VERSION %.*s", path,
		      (int)n, p);
	memcpy(version, p, n);
	version[n] = 0;
	free(text);
	return version;
}

int kvmem_check_have(const char *name)
{
	char *path = strdup(getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
	char *dir, *save = NULL, buf[4096];
	int found = 0;

	ck_assert_ptr_nonnull(path);
	for (dir = strtok_r(path, ":", &save); dir && !found;
	     dir = strtok_r(NULL, ":", &save)) {
		snprintf(buf, sizeof(buf), "%s/%s", dir, name);
		found = access(buf, X_OK) == 0;
	}
	free(path);
	return found;
}

const char *kvmem_check_tool(const char *name)
{
	static char path[4096];

	snprintf(path, sizeof(path), "%s/tools/%s", kvmem_check_builddir(),
		 name);
	return path;
}

char *kvmem_check_read_file(const char *path, size_t *size)
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
	if (size)
		*size = len;
	return buf;
}

void kvmem_check_write_file(const char *path, const char *text)
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
	kvmem_check_write_file(in, input);

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
	r->out = out_path ? strdup("") : kvmem_check_read_file(out, NULL);
	r->err = kvmem_check_read_file(err, NULL);
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

size_t kvmem_check_mem_diff(const void *a, const void *b, size_t len)
{
	const uint8_t *p = a, *q = b;
	size_t i;

	if (!memcmp(a, b, len))
		return (size_t)-1;
	for (i = 0; p[i] == q[i]; i++)
		;
	return i;
}

void *kvmem_check_xmalloc(size_t len)
{
	void *p = malloc(len ? len : 1);

	ck_assert_ptr_nonnull(p);
	return p;
}

uint8_t *kvmem_check_guard_alloc(struct kvmem_check_guarded *g, size_t len)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	g->maplen = (len + pg - 1) / pg * pg + pg;
	g->map = mmap(NULL, g->maplen, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(g->map, MAP_FAILED);
	ck_assert_int_eq(
		mprotect((uint8_t *)g->map + g->maplen - pg, pg, PROT_NONE), 0);
	g->p = (uint8_t *)g->map + g->maplen - pg - len;
	return g->p;
}

void kvmem_check_guard_free(struct kvmem_check_guarded *g)
{
	munmap(g->map, g->maplen);
}

void kvmem_check_fill_random(struct kvmem_rng *r, void *buf, size_t len)
{
	uint8_t *p = buf;
	size_t i;

	for (i = 0; i < len; i++)
		p[i] = (uint8_t)kvmem_rng_next(r);
}

float kvmem_check_rnd_value(struct kvmem_rng *r, double mag)
{
	double u = kvmem_rng_unit(r) + kvmem_rng_unit(r) + kvmem_rng_unit(r) +
		   kvmem_rng_unit(r) - 2;

	switch (kvmem_rng_below(r, 32)) {
	case 0:
		return 0.0f;
	case 1:
		return (float)(u * mag * 40);
	case 2:
		return (float)(mag / 8 *
			       ((double)kvmem_rng_below(r, 33) - 16.0));
	default:
		return (float)(u * mag);
	}
}

struct kvmem_geometry kvmem_check_geo(uint32_t layers, uint32_t kv_heads,
				      uint32_t head_dim, uint32_t tpp,
				      uint32_t group, uint32_t sink, int fmt,
				      int codec, int key_scales)
{
	struct kvmem_geometry g;

	memset(&g, 0, sizeof(g));
	g.layers = layers;
	g.kv_heads = kv_heads;
	g.head_dim = head_dim;
	g.tokens_per_page = tpp;
	g.group_size = group;
	g.sink_tokens = sink;
	g.format = (uint8_t)fmt;
	g.codec = (uint8_t)codec;
	g.key_scales = (uint8_t)key_scales;
	return g;
}

void kvmem_check_tmpdir_make(char *dir, size_t len, const char *name)
{
	snprintf(dir, len, "/tmp/kvmem-%s-XXXXXX", name);
	if (!mkdtemp(dir))
		dir[0] = '\0';
}

void kvmem_check_tmpdir_remove(const char *dir)
{
	struct dirent *d;
	DIR *dp;

	if (!dir[0])
		return;
	dp = opendir(dir);
	if (dp) {
		while ((d = readdir(dp)))
			if (strcmp(d->d_name, ".") && strcmp(d->d_name, ".."))
				unlinkat(dirfd(dp), d->d_name, 0);
		closedir(dp);
	}
	rmdir(dir);
}
