/* SPDX-License-Identifier: MIT */
/*
 * check_readme.c - the README's commands, as a new user types them
 *
 * Every command of a ```sh block of README.md, CONTRIBUTING.md and the
 * documents in docs/ that runs a built program
 * (build/tools/..., build/daemon/kvmemd) is run here, word for word, from
 * the source tree, against a kvmemd of the test's own (KVMEM_SOCKET,
 * KVMEM_ADMIN_SOCKET) with a backing store and a session holding three
 * sequences, so that `kvmemctl offload seq 1 3` has something to move. A
 * kvmemd command line is run with -n (check the configuration, write
 * nothing) in place of -f. Each must exit 0; a renamed option or
 * subcommand in the README fails here. Skipped, and said so: commands that
 * need root or systemd (make install, systemctl, ...), make itself (the
 * tests run under it), lines with a placeholder path (/path/on/...), and
 * files the machine lacks (the model in ../shared/models).
 *
 * test_python_readme runs each ```python block of python/README.md as a
 * script, from the source tree with PYTHONPATH=python and the build's
 * library, under the first python3 with NumPy ($PYTHON, /usr/bin/python3,
 * python3). Skipped, and said so: blocks that need PyTorch, a CUDA GPU or
 * the model where the machine lacks them, and all of them in a sanitizer
 * build (its libkvmem does not load into python3; check_python says the
 * same). Its sh blocks are the install commands, which check_python runs
 * (a venv, pip install) without writing into the source tree.
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvmem/kvmem.h"
#include "kvmem_check.h"
#include "kvmemd_harness.h"

/* The commands of the README's sh blocks: continuations joined, comments
 * and trailing blanks cut, one command per element (a && b is two). */
static int readme_commands(char *text, char **cmd, int max)
{
	char *line, *save = NULL, joined[2048] = "";
	int in_sh = 0, n = 0;

	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		size_t len;
		char *hash, *at, *amp;

		if (!strncmp(line, "```", 3)) {
			in_sh = !in_sh && !strcmp(line, "```sh");
			continue;
		}
		if (!in_sh)
			continue;
		if ((hash = strstr(line, "  #")) ||
		    (hash = strstr(line, "\t#")))
			*hash = 0;
		len = strlen(line);
		while (len && (line[len - 1] == ' ' || line[len - 1] == '\t'))
			line[--len] = 0;
		ck_assert_uint_lt(strlen(joined) + len + 1, sizeof(joined));
		if (len && line[len - 1] == '\\') {
			line[len - 1] = 0;
			strcat(joined, line);
			continue;
		}
		strcat(joined, line);
		for (at = joined; *at; at = amp + 4) {
			amp = strstr(at, " && ");
			if (amp)
				*amp = 0;
			while (*at == ' ')
				at++;
			if (*at) {
				ck_assert_int_lt(n, max);
				cmd[n++] = strdup(at);
			}
			if (!amp)
				break;
		}
		joined[0] = 0;
	}
	return n;
}

/* Why @cmd is not run here, or NULL. */
static const char *skip_reason(const char *cmd)
{
	const char *model = strstr(cmd, "../shared/models/");

	if (strncmp(cmd, "build/", 6))
		return "not a built program (make, root or systemd)";
	if (strstr(cmd, "/path/on/"))
		return "a placeholder path";
	if (model) {
		char path[256];

		sscanf(model, "%255s", path);
		if (access(path, R_OK))
			return "no model file here";
	}
	return NULL;
}

/*
 * Run @cmd with sh from the source tree, with the build tree's programs
 * for build/...; @watch: it runs until stopped, so 3 s of it are enough
 * (timeout's 124 is its success), and one that does not stop at SIGTERM
 * is killed 10 s later (137, a failure) rather than holding the suite.
 * Without LeakSanitizer there: its stop-the-world at the exit that the
 * SIGTERM brings was seen to hang in a SAN run (the tracer waiting, the
 * process spinning, for minutes); the kvmemctl suite runs these commands
 * under it. Returns its exit status; its output goes to @log.
 */
static int run_cmd(const char *cmd, int watch, const char *log)
{
	const char *limit =
		watch ? "ASAN_OPTIONS=detect_leaks=0 timeout -k 10 3"
		      : "timeout 120";
	char line[4096];
	pid_t pid;
	int st;

	/* build/ in the README is the build tree, wherever that is. */
	snprintf(line, sizeof(line), "%s %s/%s", limit, kvmem_check_builddir(),
		 cmd + strlen("build/"));
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		if (fd < 0 || chdir(kvmem_check_srcdir()))
			_exit(126);
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		execl("/bin/sh", "sh", "-c", line, (char *)NULL);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	if (!WIFEXITED(st))
		return 128 + WTERMSIG(st);
	return watch && WEXITSTATUS(st) == 124 ? 0 : WEXITSTATUS(st);
}

/* kvmemd -f ... becomes kvmemd -n ...: check it, write nothing. */
static void daemon_check_only(char *cmd)
{
	char *f = strstr(cmd, " -f");

	ck_assert_msg(f && (f[3] == ' ' || !f[3]),
		      "README starts kvmemd without -f: %s", cmd);
	f[2] = 'n';
}

/* The documents a user reads, one after the other: README.md,
 * CONTRIBUTING.md and docs/, in that order (docs/ by name). */
static char *docs_text(void)
{
	static const char *const top[] = { "README.md", "CONTRIBUTING.md" };
	char path[PATH_MAX], *all = NULL, *one;
	struct dirent **names;
	size_t len = 0;
	FILE *f;
	int i, n;

	f = open_memstream(&all, &len);
	ck_assert_ptr_nonnull(f);
	for (i = 0; i < (int)(sizeof(top) / sizeof(top[0])); i++) {
		snprintf(path, sizeof(path), "%s/%s", kvmem_check_srcdir(),
			 top[i]);
		one = kvmem_check_read_file(path, NULL);
		fprintf(f, "%s\n", one);
		free(one);
	}
	snprintf(path, sizeof(path), "%s/docs", kvmem_check_srcdir());
	n = scandir(path, &names, NULL, alphasort);
	ck_assert_msg(n >= 0, "%s: %s", path, strerror(errno));
	for (i = 0; i < n; i++) {
		size_t l = strlen(names[i]->d_name);

		if (l > 3 && !strcmp(names[i]->d_name + l - 3, ".md")) {
			snprintf(path, sizeof(path), "%s/docs/%s",
				 kvmem_check_srcdir(), names[i]->d_name);
			one = kvmem_check_read_file(path, NULL);
			fprintf(f, "%s\n", one);
			free(one);
		}
		free(names[i]);
	}
	free(names);
	ck_assert_int_eq(fclose(f), 0);
	return all;
}

START_TEST(test_readme_commands)
{
	char conf[512], env_sock[300], env_admin[300], log[300], *text;
	struct kvmem_geometry g = kvmemd_test_geo();
	struct kvmem_connect_opts o = { .quota_bytes = 8 << 20 };
	/* 64 tokens of 2 layers of 2 heads of 64: a sealed page each */
	float *k = malloc(64 * 256 * sizeof(float)),
	      *v = malloc(64 * 256 * sizeof(float));
	struct kvmem_seq *s[3];
	struct kvmem_cache *c;
	struct kvmemd_proc p;
	char *cmd[128];
	int n, i, ran = 0;

	kvmemd_start(&p, "[scrub]\nrate = 0\n", NULL);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	snprintf(conf, sizeof(conf),
		 "[scrub]\nrate = 0\n[store]\npath = %s/kvmem.store\n"
		 "size = 64M\n",
		 p.dir);
	kvmemd_write_conf(&p, conf);
	kvmemd_restart(&p, NULL);
	snprintf(env_sock, sizeof(env_sock), "%s", p.sock);
	snprintf(env_admin, sizeof(env_admin), "%s", p.admin);
	setenv("KVMEM_SOCKET", env_sock, 1);
	setenv("KVMEM_ADMIN_SOCKET", env_admin, 1);
	snprintf(log, sizeof(log), "%s/readme.log", p.dir);

	/* Session 1, sequences 1 to 3, released: offload can move them. */
	ck_assert_msg(!kvmem_connect(p.sock, &g, &o, &c), "%s",
		      kvmem_connect_error());
	ck_assert(k && v);
	for (i = 0; i < 64 * 256; i++) {
		k[i] = (float)(i % 17) / 17.0f;
		v[i] = (float)(i % 13) / 13.0f;
	}
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(kvmem_seq_create(c, &s[i]), 0);
		ck_assert_int_eq(kvmem_seq_append_all(s[i], k, v, 64), 0);
		ck_assert_int_eq(kvmem_seq_release(s[i]), 0);
	}

	text = docs_text();
	n = readme_commands(text, cmd, 128);
	ck_assert_int_gt(n, 10);
	for (i = 0; i < n; i++) {
		const char *why = skip_reason(cmd[i]);
		int st;

		if (why) {
			fprintf(stderr, "SKIP: readme: %s: %s\n", cmd[i], why);
			continue;
		}
		if (!strncmp(cmd[i], "build/daemon/kvmemd", 19))
			daemon_check_only(cmd[i]);
		st = run_cmd(cmd[i], strstr(cmd[i], "--watch") != NULL, log);
		EXPECT_EQ(st, 0, "README command \"%s\" (output in %s)", cmd[i],
			  log);
		ran++;
	}
	ck_assert_int_gt(ran, 10);
	for (i = 0; i < n; i++)
		free(cmd[i]);
	free(text);
	free(k);
	free(v);
	kvmem_close(c);
	unsetenv("KVMEM_SOCKET");
	unsetenv("KVMEM_ADMIN_SOCKET");
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif

/* The ```python blocks of @text, each one script. */
static int python_blocks(char *text, char **block, int max)
{
	char *at = text, *end;
	int n = 0;

	while ((at = strstr(at, "\n```python\n"))) {
		at += strlen("\n```python\n");
		end = strstr(at, "\n```");
		ck_assert_msg(end != NULL, "an unclosed python block");
		ck_assert_int_lt(n, max);
		block[n++] = strndup(at, (size_t)(end - at) + 1);
		at = end + 4;
	}
	return n;
}

/* Whether @python runs @code, quietly. */
static int python_ok(const char *python, const char *code)
{
	char *cmd;
	int st;

	ck_assert_int_gt(
		asprintf(&cmd, "'%s' -c '%s' >/dev/null 2>&1", python, code),
		0);
	st = system(cmd);
	free(cmd);
	return st == 0;
}

/* Why python/README.md's @block is not run here, or NULL. */
static const char *python_skip_reason(const char *python, const char *block)
{
	const char *model = strstr(block, "../shared/models/");

	if (model) {
		char path[256];

		sscanf(model, "%255[^\"' \n)]", path);
		if (access(path, R_OK))
			return "no model file here";
	}
	if ((strstr(block, "import torch") || strstr(block, "kvmem.llama")) &&
	    !python_ok(python, "import torch"))
		return "no PyTorch (python3-torch)";
	if (strstr(block, "kvmem.cuda") &&
	    !python_ok(python,
		       "import torch; assert torch.cuda.is_available()"))
		return "PyTorch has no CUDA GPU";
	return NULL;
}

START_TEST(test_python_readme)
{
	const char *cands[] = { getenv("PYTHON"), "/usr/bin/python3",
				"python3" };
	char path[PATH_MAX], dir[PATH_MAX], build[PATH_MAX], *block[16];
	const char *python = NULL, *tmp = getenv("TMPDIR");
	char *text, *cmd;
	int n, i, ran = 0;
	size_t k;

#ifdef SANITIZED
	fprintf(stderr, "SKIP: readme: python/README.md: a sanitizer build's "
			"libkvmem does not load into python3\n");
	return;
#endif
	for (k = 0; k < sizeof(cands) / sizeof(cands[0]) && !python; k++)
		if (cands[k] && *cands[k] &&
		    python_ok(cands[k], "import numpy"))
			python = cands[k];
	if (!python) {
		fprintf(stderr, "SKIP: readme: python/README.md: no python3 "
				"with NumPy (python3-numpy)\n");
		return;
	}
	ck_assert_ptr_nonnull(realpath(kvmem_check_builddir(), build));
	snprintf(path, sizeof(path), "%s/python/README.md",
		 kvmem_check_srcdir());
	text = kvmem_check_read_file(path, NULL);
	n = python_blocks(text, block, 16);
	ck_assert_int_ge(n, 3);
	snprintf(dir, sizeof(dir), "%s/kvmem-pyreadme-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	for (i = 0; i < n; i++) {
		const char *why = python_skip_reason(python, block[i]);
		char script[PATH_MAX + 32], log[PATH_MAX + 32];
		FILE *f;
		int st;

		if (why) {
			fprintf(stderr,
				"SKIP: readme: python/README.md block "
				"%d: %s\n",
				i + 1, why);
			continue;
		}
		snprintf(script, sizeof(script), "%s/block%d.py", dir, i + 1);
		snprintf(log, sizeof(log), "%s/block%d.log", dir, i + 1);
		f = fopen(script, "w");
		ck_assert_ptr_nonnull(f);
		fputs(block[i], f);
		ck_assert_int_eq(fclose(f), 0);
		ck_assert_int_gt(
			asprintf(&cmd,
				 "cd '%s' && PYTHONPATH=python "
				 "KVMEM_LIB='%s/libkvmem.so' "
				 "PYTHONDONTWRITEBYTECODE=1 timeout 300 '%s' "
				 "'%s' >'%s' 2>&1",
				 kvmem_check_srcdir(), build, python, script,
				 log),
			0);
		st = system(cmd);
		free(cmd);
		if (st) {
			char *out = kvmem_check_read_file(log, NULL);

			EXPECT_EQ(st, 0, "python/README.md block %d:\n%s\n%s",
				  i + 1, block[i], out);
			free(out);
		}
		unlink(script);
		unlink(log);
		ran++;
	}
	for (i = 0; i < n; i++)
		free(block[i]);
	free(text);
	ck_assert_int_eq(rmdir(dir), 0);
	ck_assert_int_ge(ran, 1);
}
END_TEST

KVMEM_SUITE(readme)
{
	Suite *s = suite_create("readme");
	TCase *tc = tcase_create("readme");

	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, test_readme_commands);
	tcase_add_test(tc, test_python_readme);
	suite_add_tcase(s, tc);
	return s;
}
