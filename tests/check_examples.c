/* SPDX-License-Identifier: MIT */
/*
 * check_examples.c - the programs of examples/, run as examples/README.md
 * runs them
 *
 * make builds them into KVMEM_BUILD/examples before the runner (as a user
 * builds them, with pkg-config and kvmem-uninstalled.pc: mk/examples.mk);
 * here each runs and what it prints is held to what the library promises:
 *   - embedded-attention: kvmem_attend() agrees with float attention over
 *     the decoded values to float rounding, with the originals within
 *     int4's bound, and the code corrected the one bit it flipped;
 *   - session and session-cc, against a kvmemd of the test's: released,
 *     acquired, and taken back across a restart that kept the session,
 *     started over after one that did not;
 *   - prefix-sharing: the second process attaches as many tokens as the
 *     geometry's blocks make whole in the system prompt, with the
 *     publisher's attention to the bit;
 *   - llama-text.py, with the tree's package (PYTHONPATH=python,
 *     KVMEM_LIB), under a python3 with NumPy and PyTorch: tokens from a
 *     kvmemd session, turned into text by a tokenizer file the test
 *     writes. Skipped, and said so, without them or in a sanitizer build;
 *   - examples/README.md's compile commands build them.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvmem/kvmem.h"
#include "kvmem_check.h"
#include "kvmemd_harness.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#endif

/* A running example: its stdin, and its stdout and stderr together. */
struct example {
	pid_t pid;
	FILE *in, *out;
};

/*
 * Start @argv (argv[0] a path) in @dir (NULL: here) with @env
 * ("NAME=value", NULL-terminated, or NULL) added to the environment.
 */
static void example_start(struct example *x, const char *dir,
			  const char *const *env, const char *const *argv)
{
	int in[2], out[2];

	ck_assert_int_eq(pipe(in), 0);
	ck_assert_int_eq(pipe(out), 0);
	fflush(NULL);
	x->pid = fork();
	ck_assert_int_ge(x->pid, 0);
	if (x->pid == 0) {
		if (dup2(in[0], 0) < 0 || dup2(out[1], 1) < 0 ||
		    dup2(out[1], 2) < 0 || (dir && chdir(dir)))
			_exit(126);
		close(in[1]);
		close(out[0]);
		for (; env && *env; env++)
			if (putenv((char *)*env))
				_exit(126);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	x->in = fdopen(in[1], "w");
	x->out = fdopen(out[0], "r");
	ck_assert_ptr_nonnull(x->in);
	ck_assert_ptr_nonnull(x->out);
}

/* Read its output up to a line that starts with @prefix; fail at EOF. */
static void example_wait_line(struct example *x, const char *prefix, char *log,
			      size_t len)
{
	char line[1024];

	while (fgets(line, sizeof(line), x->out)) {
		strncat(log, line, len - strlen(log) - 1);
		if (!strncmp(line, prefix, strlen(prefix)))
			return;
	}
	ck_abort_msg("no line \"%s...\" came; the output:\n%s", prefix, log);
}

/*
 * Close its stdin, read the rest of its output after what @log holds (the
 * whole of it in a malloc()ed string) and wait for it. Return: its exit
 * status, 128 + the signal that killed it.
 */
static int example_finish(struct example *x, const char *log, char **text)
{
	char buf[4096];
	size_t n, len;
	FILE *o;
	int st;

	fclose(x->in);
	o = open_memstream(text, &len);
	ck_assert_ptr_nonnull(o);
	fputs(log, o);
	while ((n = fread(buf, 1, sizeof(buf), x->out)) > 0)
		fwrite(buf, 1, n, o);
	fclose(o);
	fclose(x->out);
	ck_assert_int_eq(waitpid(x->pid, &st, 0), x->pid);
	ck_assert_msg(WIFEXITED(st) || WIFSIGNALED(st), "status 0x%x", st);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Run it to the end with nothing on stdin; its output in @text, which
 * must end with exit status 0. */
static char *example_run(const char *dir, const char *const *env,
			 const char *const *argv)
{
	struct example x;
	char *text;
	int status;

	example_start(&x, dir, env, argv);
	status = example_finish(&x, "", &text);
	ck_assert_msg(status == 0, "%s: exit %d; its output:\n%s", argv[0],
		      status, text);
	return text;
}

/* The built example @name, in a static buffer. */
static const char *example_path(const char *name)
{
	static char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/examples/%s", kvmem_check_builddir(),
		 name);
	ck_assert_msg(access(path, X_OK) == 0,
		      "%s not built (make examples, or make with the runner): "
		      "%s",
		      path, strerror(errno));
	return path;
}

/* The line of @text that starts with @prefix, after the prefix; or fail. */
static const char *line_of(const char *text, const char *prefix)
{
	const char *at = text;

	while (at && *at) {
		if (!strncmp(at, prefix, strlen(prefix)))
			return at + strlen(prefix);
		at = strchr(at, '\n');
		at = at ? at + 1 : NULL;
	}
	ck_abort_msg("no line \"%s...\" in:\n%s", prefix, text);
	return NULL;
}

/* The start of the line of @text that holds @needle; or fail. */
static const char *line_with(const char *text, const char *needle)
{
	const char *at = strstr(text, needle);

	ck_assert_msg(at, "no \"%s\" in:\n%s", needle, text);
	while (at > text && at[-1] != '\n')
		at--;
	return at;
}

START_TEST(test_example_embedded_attention)
{
	struct kvmem_geometry g = { 0 };
	unsigned long long clean, fixed, bad, erased;
	double dec, dec_bound, orig, orig_bound;
	unsigned int pages;
	char *out;

	out = example_run(
		NULL, NULL,
		(const char *[]){ example_path("embedded-attention"), NULL });
	/* 90 tokens of the default geometry: the sink, two sealed pages
	 * and a tail. */
	kvmem_geometry_default(&g);
	ck_assert_int_eq(sscanf(line_of(out, "layer 0 holds "), "%u", &pages),
			 1);
	ck_assert_uint_eq(pages, 1 + (90 - g.sink_tokens + g.tokens_per_page -
				      1) / g.tokens_per_page);
	ck_assert_int_eq(sscanf(line_of(out, "codes found: "),
				"%llu words clean, %llu corrected, %llu "
				"uncorrectable, %llu values erased",
				&clean, &fixed, &bad, &erased),
			 4);
	ck_assert_uint_gt(clean, 0);
	ck_assert_uint_eq(fixed, 1); /* the bit it flipped */
	ck_assert_uint_eq(bad, 0);
	ck_assert_uint_eq(erased, 0);
	ck_assert_int_eq(sscanf(line_of(out, "max difference vs float "
					     "attention over decoded values: "),
				"%lf (bound %lf", &dec, &dec_bound),
			 2);
	ck_assert_double_le(dec, dec_bound);
	ck_assert_double_le(dec_bound, 1e-5);
	ck_assert_int_eq(
		sscanf(line_of(out, "max difference vs float "
				    "attention over original values: "),
		       "%lf (bound %lf", &orig, &orig_bound),
		2);
	/* int4 moved something, and no more than its rule allows: a bound
	 * under 1 says something about values of magnitude 1. */
	ck_assert_double_gt(orig, dec_bound);
	ck_assert_double_le(orig, orig_bound);
	ck_assert_double_lt(orig_bound, 1.0);
	free(out);
}
END_TEST

static const char *const sessions[] = { "session", "session-cc" };

/*
 * The example waits on stdin after its first part; the daemon restarts
 * meanwhile, keeping the sessions (@keep) as under systemd's descriptor
 * store, or losing them. Its output: @text.
 */
static char *session_across_restart(struct kvmemd_proc *p, const char *name,
				    int keep)
{
	static char log[16384];
	struct example x;
	char *text;
	int status;

	log[0] = 0;
	example_start(
		&x, NULL, NULL,
		(const char *[]){ example_path(name), "-w", p->sock, NULL });
	example_wait_line(&x, "restart kvmemd now", log, sizeof(log));
	if (keep) {
		ck_assert_int_eq(kvmemd_stop_keep(p), 0);
	} else {
		ck_assert_int_eq(kvmemd_stop(p), 0);
	}
	kvmemd_restart(p, NULL);
	fputs("\n", x.in);
	fflush(x.in);
	status = example_finish(&x, log, &text);
	ck_assert_msg(status == 0, "%s: exit %d; its output:\n%s", name, status,
		      text);
	return text;
}

START_TEST(test_example_session)
{
	const char *name = sessions[_i];
	unsigned int id, back, now, tokens;
	struct kvmemd_proc p;
	char *out;

	kvmemd_start(&p, NULL, NULL);
	out = session_across_restart(&p, name, 1);
	ck_assert_int_eq(sscanf(line_of(out, "session "), "%u", &id), 1);
	ck_assert_int_eq(strncmp(line_of(out, "kvmemd socket: "), p.sock,
				 strlen(p.sock)),
			 0);
	line_of(out, "released: ");
	ck_assert_ptr_nonnull(
		strstr(line_of(out, "acquired: "), "the same bits: yes\n"));
	line_of(out, "kvmemd connection lost: taking the session back");
	ck_assert_int_eq(sscanf(line_of(out, "took session "), "%u", &back), 1);
	ck_assert_uint_eq(back, id);
	ck_assert_int_eq(sscanf(line_with(out, " holds "),
				"session %u holds %u tokens", &now, &tokens),
			 2);
	ck_assert_uint_eq(now, id);
	ck_assert_uint_eq(tokens, 70);
	ck_assert_ptr_nonnull(strstr(out, "holds 70 tokens, attention the "
					  "same bits: yes\n"));
	ck_assert_ptr_nonnull(strstr(out, "\nappended up to 110 tokens\n"));
	ck_assert_ptr_null(strstr(out, "starting over"));
	free(out);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* A restart that did not keep the session: -ESTALE, and a new one. */
START_TEST(test_example_session_not_kept)
{
	const char *name = sessions[_i];
	struct kvmemd_proc p;
	char *out;

	kvmemd_start(&p, NULL, NULL);
	out = session_across_restart(&p, name, 0);
	/* -ESTALE, in kvmem_strerror()'s words. */
	ck_assert_ptr_nonnull(strstr(line_of(out, "kvmemd did not keep the "
						  "session ("),
				     "across its restart): starting over\n"));
	ck_assert_ptr_null(strstr(out, "took session"));
	ck_assert_ptr_nonnull(strstr(out, "holds 70 tokens, attention the "
					  "same bits: yes\n"));
	ck_assert_ptr_nonnull(strstr(out, "\nappended up to 110 tokens\n"));
	free(out);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * System prompts of several lengths, one kvmemd: the second process
 * matches the system prompt's whole blocks, what the geometry says they
 * are, whatever an earlier run published.
 */
START_TEST(test_example_prefix_sharing)
{
	static const unsigned int lengths[] = { 110, 40, 3, 4, 300 };
	struct kvmem_geometry g = { 0 };
	struct kvmemd_proc p;
	unsigned int i, want;
	char arg[16], *out;
	int matched;

	kvmem_geometry_default(&g);
	kvmemd_start(&p, NULL, NULL);
	for (i = 0; i < sizeof(lengths) / sizeof(lengths[0]); i++) {
		snprintf(arg, sizeof(arg), "%u", lengths[i]);
		out = example_run(
			NULL, NULL,
			(const char *[]){ example_path("prefix-sharing"),
					  p.sock, arg, NULL });
		want = 0;
		if (lengths[i] >= g.sink_tokens)
			want = lengths[i] -
			       (lengths[i] - g.sink_tokens) % g.tokens_per_page;
		ck_assert_int_eq(sscanf(strstr(line_of(out, "second process, "
							    "session "),
					       "matched "),
					"matched %d tokens", &matched),
				 1);
		ck_assert_msg(matched == (int)want,
			      "a system prompt of %u tokens: %d matched, not "
			      "%u; the output:\n%s",
			      lengths[i], matched, want, out);
		if (want)
			ck_assert_ptr_nonnull(strstr(
				out,
				"the same bits as the publisher's: yes\n"));
		else
			line_of(out, "publisher: the system prompt holds no "
				     "whole block");
		free(out);
	}
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* A python3 that imports NumPy and PyTorch, as kvmem.llama needs. */
static const char *pick_python(void)
{
	const char *cands[] = { getenv("PYTHON"), "/usr/bin/python3",
				"python3" };
	char cmd[PATH_MAX + 64];
	size_t i;

	for (i = 0; i < sizeof(cands) / sizeof(cands[0]); i++) {
		if (!cands[i] || !*cands[i])
			continue;
		snprintf(cmd, sizeof(cmd),
			 "'%s' -c 'import numpy, torch' >/dev/null 2>&1",
			 cands[i]);
		if (system(cmd) == 0)
			return cands[i];
	}
	return NULL;
}

/*
 * A llama2.c tokenizer.bin of @n pieces, piece i " t<i>", at @path: any
 * text the model writes is then the ids it wrote, in words.
 */
static void write_tokenizer(const char *path, int n)
{
	FILE *f = fopen(path, "wb");
	char piece[16];
	int32_t len, max = 8;
	float score = 0;
	int i;

	ck_assert_ptr_nonnull(f);
	fwrite(&max, sizeof(max), 1, f);
	for (i = 0; i < n; i++) {
		len = snprintf(piece, sizeof(piece), " t%d", i);
		fwrite(&score, sizeof(score), 1, f);
		fwrite(&len, sizeof(len), 1, f);
		fwrite(piece, 1, (size_t)len, f);
	}
	ck_assert_int_eq(fclose(f), 0);
}

START_TEST(test_example_llama_text)
{
	char src[PATH_MAX], build[PATH_MAX], model[PATH_MAX + 64];
	char dir[PATH_MAX], tok[PATH_MAX + 80], script[PATH_MAX + 32];
	char env[2][PATH_MAX + 32], want[4096] = "", *out, *ids, *end;
	const char *text;
	char *slash;
	const char *python;
	struct kvmemd_proc p;
	unsigned int n = 0;
	long id;

#ifdef SANITIZED
	fprintf(stderr, "SKIP: examples: llama-text.py: a sanitizer build's "
			"libkvmem does not load into python3; the plain build "
			"runs it\n");
	return;
#endif
	python = pick_python();
	if (!python) {
		fprintf(stderr, "SKIP: examples: llama-text.py: no python3 "
				"with NumPy and PyTorch\n");
		return;
	}
	ck_assert_ptr_nonnull(realpath(kvmem_check_srcdir(), src));
	ck_assert_ptr_nonnull(realpath(kvmem_check_builddir(), build));
	if (getenv("KVMEM_MODEL"))
		snprintf(model, sizeof(model), "%s", getenv("KVMEM_MODEL"));
	else
		snprintf(model, sizeof(model),
			 "%s/../shared/models/stories260K.bin", src);
	if (access(model, R_OK)) {
		fprintf(stderr,
			"SKIP: examples: llama-text.py: no model at "
			"%s (KVMEM_MODEL)\n",
			model);
		return;
	}
	/* The tree has no tokenizer of the model's (tok512.bin is not in
	 * ../shared/models): one the test makes turns the ids into words. */
	snprintf(tok, sizeof(tok), "%s", model);
	slash = strrchr(tok, '/');
	if (slash)
		slash[1] = 0;
	else
		tok[0] = 0;
	strncat(tok, "tok512.bin", sizeof(tok) - strlen(tok) - 1);
	if (access(tok, R_OK))
		fprintf(stderr,
			"SKIP: examples: llama-text.py: no tok512.bin "
			"beside %s: its text in the model's own words "
			"is not checked, only in the test's\n",
			model);
	kvmem_check_tmpdir_make(dir, sizeof(dir), "examples");
	snprintf(tok, sizeof(tok), "%s/tok.bin", dir);
	write_tokenizer(tok, 512);
	snprintf(script, sizeof(script), "%s/examples/llama-text.py", src);
	snprintf(env[0], sizeof(env[0]), "PYTHONPATH=%s/python", src);
	snprintf(env[1], sizeof(env[1]), "KVMEM_LIB=%s/libkvmem.so", build);

	kvmemd_start(&p, NULL, NULL);
	out = example_run(src,
			  (const char *[]){ env[0], env[1],
					    "PYTHONDONTWRITEBYTECODE=1", NULL },
			  (const char *[]){ python, script, "--model", model,
					    "--tokenizer", tok, "--socket",
					    p.sock, "--tokens", "24", NULL });
	ck_assert_ptr_nonnull(
		strstr(line_of(out, "cache: "), "kvmemd session "));
	for (ids = (char *)line_of(out, "tokens: ");; ids = end) {
		id = strtol(ids, &end, 10);
		if (end == ids)
			break;
		ck_assert_int_ge(id, 0);
		ck_assert_int_lt(id, 512);
		snprintf(want + strlen(want), sizeof(want) - strlen(want),
			 n ? " t%ld" : "t%ld", id);
		n++;
	}
	ck_assert_uint_gt(n, 0);
	ck_assert_uint_le(n, 24);
	strcat(want, "\n");
	text = line_of(out, "text: ");
	ck_assert_msg(!strncmp(text, want, strlen(want)),
		      "the text of the test's tokenizer: %.*s, not %s",
		      (int)strcspn(text, "\n"), text, want);
	ck_assert_ptr_nonnull(
		strstr(line_of(out, "codes: "), " 0 uncorrectable"));
	line_of(out, "float32 cache: ");
	free(out);
	kvmem_check_tmpdir_remove(dir);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * The compile commands of examples/README.md, word for word but for where
 * -o puts the program (a directory of the test's, not the tree), from the
 * source tree with PKG_CONFIG_PATH naming the build: each builds, and what
 * embedded-attention's command built runs.
 */
START_TEST(test_example_readme_commands)
{
	char src[PATH_MAX], build[PATH_MAX], dir[PATH_MAX], path[PATH_MAX + 32];
	char env[PATH_MAX + 32], cmd[PATH_MAX * 2], *text, *line, *save = NULL;
	char *o;
	const char *san = "";
	int in_sh = 0, n = 0, status;
	pid_t pid;

	if (!kvmem_check_have("pkg-config")) {
		fprintf(stderr, "SKIP: examples: README's commands: no "
				"pkg-config in PATH\n");
		return;
	}
#ifdef SANITIZED
	/* The library carries this build's sanitizers; so must its users. */
	san = " -fsanitize=address,undefined";
#endif
	ck_assert_ptr_nonnull(realpath(kvmem_check_srcdir(), src));
	ck_assert_ptr_nonnull(realpath(kvmem_check_builddir(), build));
	kvmem_check_tmpdir_make(dir, sizeof(dir), "examples");
	snprintf(env, sizeof(env), "PKG_CONFIG_PATH=%s", build);
	snprintf(path, sizeof(path), "%s/examples/README.md", src);
	text = kvmem_check_read_file(path, NULL);
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (!strncmp(line, "```", 3)) {
			in_sh = !in_sh && !strcmp(line, "```sh");
			continue;
		}
		if (!in_sh ||
		    (strncmp(line, "cc ", 3) && strncmp(line, "c++ ", 4)))
			continue;
		o = strstr(line, " -o ");
		ck_assert_msg(o, "no -o in \"%s\"", line);
		ck_assert_int_lt(snprintf(cmd, sizeof(cmd), "%.*s%s -o %s/%s",
					  (int)(o - line), line, san, dir,
					  o + 4),
				 (int)sizeof(cmd));
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (!pid) {
			if (chdir(src) || putenv(env))
				_exit(126);
			execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
			_exit(127);
		}
		ck_assert_int_eq(waitpid(pid, &status, 0), pid);
		ck_assert_msg(WIFEXITED(status) && !WEXITSTATUS(status),
			      "examples/README.md: \"%s\": status 0x%x", cmd,
			      status);
		n++;
	}
	free(text);
	ck_assert_int_eq(n, 4);
	snprintf(path, sizeof(path), "%s/embedded-attention", dir);
	free(example_run(NULL, NULL, (const char *[]){ path, NULL }));
	kvmem_check_tmpdir_remove(dir);
}
END_TEST

KVMEM_SUITE(examples)
{
	Suite *s = suite_create("examples");
	TCase *tc = tcase_create("examples");

	/* Compilers, kvmemd restarts, a model's forward pass in Python. */
	tcase_set_timeout(tc, 120);

	tcase_add_test(tc, test_example_embedded_attention);
	tcase_add_loop_test(tc, test_example_session, 0, 2);
	tcase_add_loop_test(tc, test_example_session_not_kept, 0, 2);
	tcase_add_test(tc, test_example_prefix_sharing);
	tcase_add_test(tc, test_example_llama_text);
	tcase_add_test(tc, test_example_readme_commands);
	suite_add_tcase(s, tc);
	return s;
}
