/* SPDX-License-Identifier: MIT */
/*
 * check_install.c - make install into a temporary root, and what it puts
 * there
 *
 * Each test runs "make install" from the source tree (KVMEM_SRCDIR, set by
 * make test; else the working directory) into a directory of its own, with
 * BUILD and SAN naming the build the tests run from (KVMEM_BUILD), so a
 * SAN=1 run installs its own build and nothing is compiled again. Then:
 *   - every file is where it belongs, with its mode and its content;
 *   - the library's links lead to it, and a program built with pkg-config
 *     against the installed tree, in C and in C++, links and runs;
 *   - each installed header compiles alone as C (C99 on) and C++ (C++11
 *     on), warnings as errors;
 *   - the filled templates have no @PLACEHOLDER@ left;
 *   - systemd-analyze verify, systemd-sysusers and systemd-tmpfiles accept
 *     the units and entries (skipped, with a message, without systemd);
 *   - etc/kvmemd.conf lists every key kvmemd --print-config prints.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvmem_check.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static const char *version(void)
{
	return kvmem_check_version();
}

/* @dir/@name in a buffer of the caller's. */
static char *join(char *buf, size_t len, const char *dir, const char *name)
{
	int n = snprintf(buf, len, "%s/%s", dir, name);

	ck_assert_msg(n > 0 && (size_t)n < len, "path too long: %s/%s", dir,
		      name);
	return buf;
}

static int remove_entry(const char *path, const struct stat *st, int flag,
			struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void remove_tree(const char *dir)
{
	ck_assert_msg(nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) == 0,
		      "remove %s: %s", dir, strerror(errno));
}

static void make_tmpdir(char *buf, size_t len)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(buf, len, "%s/kvmem-install-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	ck_assert_msg(mkdtemp(buf) != NULL, "mkdtemp: %s", strerror(errno));
}

/*
 * Run @argv, argv[0] looked up in PATH, with stdout and stderr in @log and
 * the variables of @env ("NAME=value", NULL-terminated; may be NULL) set.
 * The MAKEFLAGS of a make running the tests (SAN=1, its jobserver) would
 * reach a make started here: they are dropped.
 *
 * Return: the exit status, 127 when @argv[0] could not be run, 128 + the
 * signal that killed it.
 */
static int run(const char *log, const char *const *env, const char *const *argv)
{
	int status, fd;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
			_exit(126);
		unsetenv("MAKEFLAGS");
		unsetenv("MFLAGS");
		unsetenv("MAKELEVEL");
		for (; env && *env; env++)
			if (putenv((char *)*env))
				_exit(126);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}

/* Fail with @what and the log of the command that failed. */
static void fail_log(const char *log, const char *what, int status)
{
	char *text = kvmem_check_read_file(log, NULL);

	fprintf(stderr, "---- %s ----\n%s---- end ----\n", log, text);
	free(text);
	ck_abort_msg("%s: exit %d (its output is above)", what, status);
}

/*
 * The make variables that name the build these tests run from: BUILD=DIR
 * SAN=0 for DIR, or BUILD=DIR SAN=1 for DIR/san, where SAN=1 puts its
 * objects (and whose fatbin is in DIR/kernels). The build directory's
 * objects are then all up to date: nothing is compiled or linked again.
 */
static void build_vars(char *build_var, size_t len, const char **san_var)
{
	char build[PATH_MAX];

	ck_assert_msg(realpath(kvmem_check_builddir(), build) != NULL,
		      "build directory %s: %s", kvmem_check_builddir(),
		      strerror(errno));
#ifdef __SANITIZE_ADDRESS__
	char *slash = strrchr(build, '/');

	ck_assert_msg(slash && !strcmp(slash, "/san"),
		      "a SAN=1 build is in BUILD/san, not in %s", build);
	*slash = '\0';
	*san_var = "SAN=1";
#else
	*san_var = "SAN=0";
#endif
	snprintf(build_var, len, "BUILD=%s", build);
}

/*
 * make install with @vars ("NAME=value", NULL-terminated) added; @log
 * receives its output.
 */
static void make_install(const char *log, const char *const *vars)
{
	const char *argv[16] = { "make", "-C", kvmem_check_srcdir(),
				 "install" };
	char build_var[PATH_MAX + 8];
	int argc = 4, status;

	build_vars(build_var, sizeof(build_var), &argv[argc + 1]);
	argv[argc] = build_var;
	argc += 2;
	for (; *vars; vars++) {
		ck_assert_int_lt(argc, (int)ARRAY_SIZE(argv) - 1);
		argv[argc++] = *vars;
	}
	argv[argc] = NULL;
	status = run(log, NULL, argv);
	if (status)
		fail_log(log, "make install", status);
}

/* make install DESTDIR=@dest PREFIX=/usr */
static void install_usr(const char *dest)
{
	char destdir[PATH_MAX + 8], log[PATH_MAX];

	snprintf(destdir, sizeof(destdir), "DESTDIR=%s", dest);
	snprintf(log, sizeof(log), "%s.log", dest);
	make_install(log,
		     (const char *const[]){ destdir, "PREFIX=/usr", NULL });
	unlink(log);
}

/* install copies: the same bytes. */
static void expect_same_file(const char *got, const char *want)
{
	size_t na, nb;
	char *a = kvmem_check_read_file(got, &na);
	char *b = kvmem_check_read_file(want, &nb);

	ck_assert_msg(na == nb && !memcmp(a, b, na),
		      "%s differs from %s (%zu and %zu bytes)", got, want, na,
		      nb);
	free(a);
	free(b);
}

static void expect_mode(const char *path, mode_t mode)
{
	struct stat st;

	ck_assert_msg(lstat(path, &st) == 0, "%s not installed: %s", path,
		      strerror(errno));
	ck_assert_msg(S_ISREG(st.st_mode), "%s is not a regular file", path);
	ck_assert_msg((st.st_mode & 07777) == mode, "%s: mode %04o, not %04o",
		      path, (unsigned int)(st.st_mode & 07777),
		      (unsigned int)mode);
}

/*
 * Each source file @dir/NAME whose NAME ends in @suffix, installed as
 * @dest/@to/NAME.
 */
static void expect_dir_installed(const char *dir, const char *suffix,
				 const char *dest, const char *to)
{
	char src[PATH_MAX], got[PATH_MAX * 3], from[PATH_MAX * 2];
	struct dirent *e;
	size_t n, ls = strlen(suffix);
	int count = 0;
	DIR *d;

	d = opendir(join(src, sizeof(src), kvmem_check_srcdir(), dir));
	ck_assert_msg(d != NULL, "%s: %s", src, strerror(errno));
	while ((e = readdir(d))) {
		n = strlen(e->d_name);
		if (n <= ls || strcmp(e->d_name + n - ls, suffix))
			continue;
		snprintf(got, sizeof(got), "%s/%s/%s", dest, to, e->d_name);
		expect_mode(got, 0644);
		expect_same_file(got, join(from, sizeof(from), src, e->d_name));
		count++;
	}
	closedir(d);
	ck_assert_msg(count > 0, "no %s files in %s", suffix, src);
}

/*
 * Pages of one function (man kvmem_connect) are ".so" links: each leads
 * to an installed page that describes that function.
 */
static void expect_man_links(const char *dest)
{
	char dir[PATH_MAX * 2], path[PATH_MAX * 3], target[PATH_MAX * 3];
	char name[256], *text, *page;
	struct dirent *e;
	int links = 0;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s/usr/share/man/man3", dest);
	d = opendir(dir);
	ck_assert_msg(d != NULL, "%s: %s", dir, strerror(errno));
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		text = kvmem_check_read_file(path, NULL);
		if (strncmp(text, ".so ", 4)) {
			free(text);
			continue;
		}
		text[strcspn(text, "\n")] = 0;
		snprintf(target, sizeof(target), "%s/usr/share/man/%s", dest,
			 text + 4);
		page = kvmem_check_read_file(target, NULL);
		snprintf(name, sizeof(name), "%.*s ()",
			 (int)(strlen(e->d_name) - 2), e->d_name);
		ck_assert_msg(strstr(page, name),
			      "%s leads to %s, which does not describe it",
			      e->d_name, text + 4);
		free(page);
		free(text);
		links++;
	}
	closedir(d);
	ck_assert_int_gt(links, 10);
}

/* The number of source files @dir/NAME whose NAME ends in @suffix. */
static int count_suffix(const char *dir, const char *suffix)
{
	char src[PATH_MAX];
	struct dirent *e;
	size_t n, ls = strlen(suffix);
	int count = 0;
	DIR *d;

	d = opendir(join(src, sizeof(src), kvmem_check_srcdir(), dir));
	ck_assert_msg(d != NULL, "%s: %s", src, strerror(errno));
	while ((e = readdir(d))) {
		n = strlen(e->d_name);
		count += n > ls && !strcmp(e->d_name + n - ls, suffix);
	}
	closedir(d);
	return count;
}

static void expect_link(const char *path, const char *target)
{
	char buf[PATH_MAX];
	ssize_t n = readlink(path, buf, sizeof(buf) - 1);

	ck_assert_msg(n > 0, "%s is not a symbolic link: %s", path,
		      strerror(errno));
	buf[n] = '\0';
	ck_assert_str_eq(buf, target);
}

/* "@NAME@" with NAME in capitals: a template variable make did not fill. */
static void expect_filled(const char *path)
{
	char *text = kvmem_check_read_file(path, NULL), *p, *q;

	for (p = strchr(text, '@'); p; p = strchr(p + 1, '@')) {
		for (q = p + 1; (*q >= 'A' && *q <= 'Z') || *q == '_'; q++)
			;
		ck_assert_msg(*q != '@' || q == p + 1, "%s: %.*s left unfilled",
			      path, (int)(q - p + 1), p);
	}
	free(text);
}

START_TEST(test_install_tree)
{
	static const struct {
		const char *src; /* in the source tree; NULL: built */
		const char *built; /* in the build directory */
		const char *dest; /* under DESTDIR */
		mode_t mode;
	} files[] = {
		{ NULL, "daemon/kvmemd", "usr/sbin/kvmemd", 0755 },
		{ NULL, "tools/kvmemctl", "usr/sbin/kvmemctl", 0755 },
		{ NULL, "tools/kvmem-bench", "usr/bin/kvmem-bench", 0755 },
		{ NULL, "tools/kvmem-ecc", "usr/bin/kvmem-ecc", 0755 },
		{ NULL, "tools/kvmem-eval", "usr/bin/kvmem-eval", 0755 },
		{ NULL, "libkvmem.a", "usr/lib/libkvmem.a", 0644 },
		{ "etc/kvmemd.conf", NULL, "etc/kvmem/kvmemd.conf", 0644 },
		{ "systemd/kvmemd.socket", NULL,
		  "usr/lib/systemd/system/kvmemd.socket", 0644 },
		{ "systemd/kvmemd-admin.socket", NULL,
		  "usr/lib/systemd/system/kvmemd-admin.socket", 0644 },
		{ "systemd/kvmem-exporter.socket", NULL,
		  "usr/lib/systemd/system/kvmem-exporter.socket", 0644 },
		{ "systemd/kvmem.sysusers.conf", NULL,
		  "usr/lib/sysusers.d/kvmem.conf", 0644 },
		{ "systemd/kvmem.tmpfiles.conf", NULL,
		  "usr/lib/tmpfiles.d/kvmem.conf", 0644 },
		{ "python/kvmem/__init__.py", NULL,
		  "usr/lib/python3/dist-packages/kvmem/__init__.py", 0644 },
		{ "python/kvmem/llama.py", NULL,
		  "usr/lib/python3/dist-packages/kvmem/llama.py", 0644 },
		{ "python/kvmem/cuda.py", NULL,
		  "usr/lib/python3/dist-packages/kvmem/cuda.py", 0644 },
		{ "python/kvmem/_version.py", NULL,
		  "usr/lib/python3/dist-packages/kvmem/_version.py", 0644 },
		{ "python/kvmem/py.typed", NULL,
		  "usr/lib/python3/dist-packages/kvmem/py.typed", 0644 },
		{ "systemd/kvmemd-store.conf", NULL,
		  "usr/share/doc/kvmem/examples/kvmemd-store.conf", 0644 },
		{ "ops/prometheus/kvmem-alerts.yml", NULL,
		  "usr/share/doc/kvmem/examples/kvmem-alerts.yml", 0644 },
		{ "ops/grafana/kvmem-dashboard.json", NULL,
		  "usr/share/doc/kvmem/examples/kvmem-dashboard.json", 0644 },
	};
	static const char sections[] = "1358";
	char dest[PATH_MAX], path[PATH_MAX * 2], from[PATH_MAX * 2];
	char so[64], ext[4], man[32], *text;
	size_t i;

	make_tmpdir(dest, sizeof(dest));
	install_usr(dest);
	for (i = 0; i < ARRAY_SIZE(files); i++) {
		join(path, sizeof(path), dest, files[i].dest);
		expect_mode(path, files[i].mode);
		if (files[i].src)
			join(from, sizeof(from), kvmem_check_srcdir(),
			     files[i].src);
		else
			join(from, sizeof(from), kvmem_check_builddir(),
			     files[i].built);
		expect_same_file(path, from);
	}
	expect_dir_installed("libkvmem/include/kvmem", ".h", dest,
			     "usr/include/kvmem");
	for (i = 0; sections[i]; i++) {
		snprintf(ext, sizeof(ext), ".%c", sections[i]);
		snprintf(man, sizeof(man), "usr/share/man/man%c", sections[i]);
		expect_dir_installed("man", ext, dest, man);
	}
	expect_man_links(dest);

	/* libkvmem.so -> libkvmem.so.0 -> libkvmem.so.VERSION */
	snprintf(so, sizeof(so), "usr/lib/libkvmem.so.%s", version());
	expect_mode(join(path, sizeof(path), dest, so), 0755);
	snprintf(so, sizeof(so), "libkvmem.so.%s", version());
	expect_link(join(path, sizeof(path), dest, "usr/lib/libkvmem.so.0"),
		    so);
	expect_link(join(path, sizeof(path), dest, "usr/lib/libkvmem.so"),
		    "libkvmem.so.0");

	join(path, sizeof(path), dest, "usr/lib/pkgconfig/kvmem.pc");
	expect_mode(path, 0644);
	expect_filled(path);
	text = kvmem_check_read_file(path, NULL);
	ck_assert_msg(!strncmp(text, "prefix=/usr\n", 12),
		      "kvmem.pc does not start with prefix=/usr: %s", text);
	snprintf(from, sizeof(from), "\nVersion: %s\n", version());
	ck_assert_msg(strstr(text, from) != NULL, "kvmem.pc has no \"%s\": %s",
		      from + 1, text);
	free(text);

	join(path, sizeof(path), dest, "usr/lib/systemd/system/kvmemd.service");
	expect_mode(path, 0644);
	expect_filled(path);
	text = kvmem_check_read_file(path, NULL);
	ck_assert_msg(strstr(text, "\nExecStart=/usr/sbin/kvmemd -f ") != NULL,
		      "kvmemd.service does not start /usr/sbin/kvmemd -f");
	ck_assert_msg(strstr(text, " -c /etc/kvmem/kvmemd.conf ") != NULL,
		      "kvmemd.service does not read /etc/kvmem/kvmemd.conf");
	free(text);
	join(path, sizeof(path), dest,
	     "usr/lib/systemd/system/kvmem-exporter.service");
	expect_mode(path, 0644);
	expect_filled(path);
	text = kvmem_check_read_file(path, NULL);
	ck_assert_msg(strstr(text, "\nExecStart=/usr/sbin/kvmemctl -a "
				   "/run/kvmem/kvmemd-admin.sock metrics "
				   "--http\n") != NULL,
		      "kvmem-exporter.service does not run kvmemctl metrics "
		      "--http: %s",
		      text);
	free(text);
	/* One kvmemctl for every connection, not one each (issue 44). */
	join(path, sizeof(path), dest,
	     "usr/lib/systemd/system/kvmem-exporter.socket");
	text = kvmem_check_read_file(path, NULL);
	ck_assert_msg(strstr(text, "\nAccept=no\n") != NULL,
		      "kvmem-exporter.socket does not hand over its listening "
		      "socket (Accept=no): %s",
		      text);
	free(text);
	/* The installed package loads the installed library (LIBDIR). */
	join(path, sizeof(path), dest,
	     "usr/lib/python3/dist-packages/kvmem/_install.py");
	expect_mode(path, 0644);
	text = kvmem_check_read_file(path, NULL);
	ck_assert_msg(strstr(text, "\nLIBDIR = \"/usr/lib\"\n") != NULL,
		      "_install.py does not name LIBDIR /usr/lib: %s", text);
	free(text);
	remove_tree(dest);
}
END_TEST

/*
 * make install PREFIX=DIR, nowhere the loader looks: the installed Python
 * package, imported by a python3 with NumPy with no hint (no KVMEM_LIB,
 * no LD_LIBRARY_PATH, a pkg-config that finds nothing), loads the
 * installed library of DIR/lib and reports the Makefile's version.
 */
START_TEST(test_install_python_finds_library)
{
	const char *python = getenv("PYTHON");
	char dir[PATH_MAX], prefix[PATH_MAX + 16], sysconf[PATH_MAX + 24];
	char site[PATH_MAX + 64], log[PATH_MAX + 16], want[PATH_MAX + 96];
	char *out;
	int status;

#ifdef __SANITIZE_ADDRESS__
	fprintf(stderr, "SKIP: test_install_python_finds_library: a sanitizer "
			"build's libkvmem does not load into python3; the "
			"plain build runs it\n");
	return;
#endif
	if (!python || !*python)
		python = "/usr/bin/python3";
	if (run("/dev/null", NULL,
		(const char *const[]){ python, "-c", "import numpy", NULL })) {
		fprintf(stderr, "SKIP: test_install_python_finds_library: %s "
				"does not import NumPy (python3-numpy)\n",
			python);
		return;
	}
	make_tmpdir(dir, sizeof(dir));
	snprintf(prefix, sizeof(prefix), "PREFIX=%s/usr", dir);
	snprintf(sysconf, sizeof(sysconf), "SYSCONFDIR=%s/etc", dir);
	snprintf(log, sizeof(log), "%s.log", dir);
	make_install(log, (const char *const[]){ prefix, sysconf, NULL });
	snprintf(site, sizeof(site), "PYTHONPATH=%s/usr/lib/python3/dist-packages",
		 dir);
	status = run(log, NULL,
		     (const char *const[]){
			     "env", "-u", "KVMEM_LIB", "-u", "LD_LIBRARY_PATH",
			     site, "PKG_CONFIG=false", python, "-c",
			     "import kvmem; print(kvmem.library_path, "
			     "kvmem.__version__, kvmem.Geometry(2, 8, 128).codec)",
			     NULL });
	out = kvmem_check_read_file(log, NULL);
	ck_assert_msg(status == 0, "the installed package: exit %d:\n%s",
		      status, out);
	snprintf(want, sizeof(want), "%s/usr/lib/libkvmem.so.0 %s h84\n", dir,
		 version());
	ck_assert_str_eq(out, want);
	free(out);
	unlink(log);
	remove_tree(dir);
}
END_TEST

/* A program of the library's users, built as man/libkvmem.3 says. */
static const char consumer[] =
	"#include <errno.h>\n"
	"#include <stdio.h>\n"
	"#include <kvmem/kvmem.h>\n"
	"\n"
	"int main(void)\n"
	"{\n"
	"	struct kvmem_geometry g = { .layers = 1, .kv_heads = 1,\n"
	"				    .head_dim = 32 };\n"
	"	struct kvmem_attend_opts opts = { .n_heads = 1 };\n"
	"	float k[32] = { 1 }, v[32] = { 2 }, q[32] = { 1 }, out[32];\n"
	"	struct kvmem_cache *c;\n"
	"	struct kvmem_seq *s;\n"
	"	int ret;\n"
	"\n"
	"	kvmem_geometry_default(&g);\n"
	"	if (kvmem_open_embedded(&g, 1 << 20, &c))\n"
	"		return 1;\n"
	"	ret = kvmem_seq_create(c, &s);\n"
	"	if (!ret)\n"
	"		ret = kvmem_seq_append(s, 0, k, v, 1);\n"
	"	if (!ret)\n"
	"		ret = kvmem_attend(s, 0, q, out, &opts, NULL);\n"
	"	if (!ret)\n"
	"		printf(\"%g %s\\n\", out[0], kvmem_strerror(-ENOTCONN));\n"
	"	kvmem_close(c);\n"
	"	return ret ? 2 : 0;\n"
	"}\n";

/*
 * The same program in C++11, as an engine written in C++ builds it: the
 * headers' extern "C" blocks must hold, or it does not link.
 */
static const char consumer_cxx[] =
	"#include <cerrno>\n"
	"#include <cstdio>\n"
	"#include <kvmem/kvmem.h>\n"
	"\n"
	"int main()\n"
	"{\n"
	"	struct kvmem_geometry g = {};\n"
	"	struct kvmem_attend_opts opts = {};\n"
	"	float k[32] = { 1 }, v[32] = { 2 }, q[32] = { 1 }, out[32];\n"
	"	struct kvmem_cache *c;\n"
	"	struct kvmem_seq *s;\n"
	"	int ret;\n"
	"\n"
	"	g.layers = 1;\n"
	"	g.kv_heads = 1;\n"
	"	g.head_dim = 32;\n"
	"	opts.n_heads = 1;\n"
	"	kvmem_geometry_default(&g);\n"
	"	if (kvmem_open_embedded(&g, 1 << 20, &c))\n"
	"		return 1;\n"
	"	ret = kvmem_seq_create(c, &s);\n"
	"	if (!ret)\n"
	"		ret = kvmem_seq_append(s, 0, k, v, 1);\n"
	"	if (!ret)\n"
	"		ret = kvmem_attend(s, 0, q, out, &opts, nullptr);\n"
	"	if (!ret)\n"
	"		std::printf(\"%g %s\\n\", out[0],\n"
	"			    kvmem_strerror(-ENOTCONN));\n"
	"	kvmem_close(c);\n"
	"	return ret ? 2 : 0;\n"
	"}\n";

/*
 * pkg-config output, from the installed kvmem.pc moved under @dest
 * (--define-prefix), into @buf without its newline.
 */
static void pkg_config(char *buf, size_t len, const char *dest,
		       const char *what, const char *log)
{
	char env[PATH_MAX + 32];
	const char *argv[] = { "pkg-config", "--define-prefix", what, "kvmem",
			       NULL };
	char *text;
	int status;

	snprintf(env, sizeof(env), "PKG_CONFIG_PATH=%s/usr/lib/pkgconfig",
		 dest);
	status = run(log, (const char *const[]){ env, NULL }, argv);
	if (status)
		fail_log(log, "pkg-config", status);
	text = kvmem_check_read_file(log, NULL);
	text[strcspn(text, "\n")] = '\0';
	ck_assert_msg(strlen(text) < len, "pkg-config output too long");
	strcpy(buf, text);
	free(text);
}

/*
 * @text, saved as @dest/@name, built by @cc (with @std and warnings as
 * errors) against the installed tree as pkg-config's @cflags and @libs
 * say, then run; its output must be what the consumers print.
 */
static void build_user(const char *dest, const char *cc, const char *std,
		       const char *name, const char *text, const char *cflags,
		       const char *libs)
{
	char src[PATH_MAX + 16], exe[PATH_MAX + 16], log[PATH_MAX + 16];
	char env[PATH_MAX + 32], words[PATH_MAX * 4];
	char *argv[64], *out, *save = NULL, *w;
	int argc = 0, status;

	snprintf(src, sizeof(src), "%s/%s", dest, name);
	snprintf(exe, sizeof(exe), "%s/%s.exe", dest, name);
	snprintf(log, sizeof(log), "%s.log", dest);
	snprintf(words, sizeof(words), "%s %s", cflags, libs);
	kvmem_check_write_file(src, text);
	argv[argc++] = (char *)cc;
	argv[argc++] = (char *)std;
	argv[argc++] = "-Wall";
	argv[argc++] = "-Wextra";
	argv[argc++] = "-Wpedantic";
	argv[argc++] = "-Werror";
#ifdef __SANITIZE_ADDRESS__
	/* The library carries this build's sanitizers; so must its users. */
	argv[argc++] = "-fsanitize=address,undefined";
#endif
	argv[argc++] = "-o";
	argv[argc++] = exe;
	argv[argc++] = src;
	for (w = strtok_r(words, " ", &save); w; w = strtok_r(NULL, " ", &save))
		argv[argc++] = w;
	argv[argc] = NULL;
	ck_assert_int_lt(argc, (int)ARRAY_SIZE(argv));
	status = run(log, NULL, (const char *const *)argv);
	if (status)
		fail_log(log, name, status);

	/* Found through the SONAME link, by the dynamic loader. */
	snprintf(env, sizeof(env), "LD_LIBRARY_PATH=%s/usr/lib", dest);
	status = run(log, (const char *const[]){ env, NULL },
		     (const char *const[]){ exe, NULL });
	if (status)
		fail_log(log, exe, status);
	out = kvmem_check_read_file(log, NULL);
	ck_assert_msg(!strcmp(out, "2 kvmemd connection lost\n"),
		      "%s printed \"%s\"", exe, out);
	free(out);
	unlink(log);
}

START_TEST(test_install_builds_users)
{
	char dest[PATH_MAX], log[PATH_MAX + 16], want[PATH_MAX + 16];
	char ver[64], cflags[PATH_MAX * 2], libs[PATH_MAX * 2];

	if (!kvmem_check_have("pkg-config")) {
		fprintf(stderr, "SKIP: test_install_builds_users: no "
				"pkg-config in PATH; kvmem.pc not tried\n");
		return;
	}
	make_tmpdir(dest, sizeof(dest));
	install_usr(dest);
	snprintf(log, sizeof(log), "%s.log", dest);
	pkg_config(ver, sizeof(ver), dest, "--modversion", log);
	ck_assert_str_eq(ver, version());
	pkg_config(cflags, sizeof(cflags), dest, "--cflags", log);
	pkg_config(libs, sizeof(libs), dest, "--libs", log);
	unlink(log);
	snprintf(want, sizeof(want), "-I%s/usr/include", dest);
	ck_assert_msg(strstr(cflags, want) != NULL, "--cflags: %s", cflags);
	ck_assert_msg(strstr(libs, "-lkvmem") != NULL, "--libs: %s", libs);

	build_user(dest, "cc", "-std=c99", "user.c", consumer, cflags, libs);
	build_user(dest, "c++", "-std=c++11", "user.cc", consumer_cxx, cflags,
		   libs);
	remove_tree(dest);
}
END_TEST

/*
 * Against the tree, not installed: PKG_CONFIG_PATH naming the build
 * directory makes pkg-config take kvmem-uninstalled.pc, whose flags build
 * the same consumers, which run from the tree (an rpath) with nothing
 * installed.
 */
START_TEST(test_uninstalled_pc)
{
	char dir[PATH_MAX], log[PATH_MAX + 16], env[PATH_MAX + 32];
	char flags[2][PATH_MAX * 2], want[PATH_MAX * 2], *text;
	const char *what[2] = { "--cflags", "--libs" };
	char build[PATH_MAX], src[PATH_MAX];
	int i, status;

	if (!kvmem_check_have("pkg-config")) {
		fprintf(stderr, "SKIP: test_uninstalled_pc: no pkg-config in "
				"PATH\n");
		return;
	}
	ck_assert_ptr_nonnull(realpath(kvmem_check_builddir(), build));
	ck_assert_ptr_nonnull(realpath(kvmem_check_srcdir(), src));
	make_tmpdir(dir, sizeof(dir));
	snprintf(log, sizeof(log), "%s.log", dir);
	snprintf(env, sizeof(env), "PKG_CONFIG_PATH=%s", build);
	for (i = 0; i < 2; i++) {
		status = run(log, (const char *const[]){ env, NULL },
			     (const char *const[]){ "pkg-config", what[i],
						    "kvmem", NULL });
		if (status)
			fail_log(log, "pkg-config", status);
		text = kvmem_check_read_file(log, NULL);
		text[strcspn(text, "\n")] = '\0';
		ck_assert_uint_lt(strlen(text), sizeof(flags[i]));
		strcpy(flags[i], text);
		free(text);
	}
	unlink(log);
	snprintf(want, sizeof(want), "-I%s/libkvmem/include", src);
	ck_assert_msg(strstr(flags[0], want), "--cflags: %s", flags[0]);
	snprintf(want, sizeof(want), "-Wl,-rpath,%s", build);
	ck_assert_msg(strstr(flags[1], want), "--libs: %s", flags[1]);
	build_user(dir, "cc", "-std=c99", "user.c", consumer, flags[0],
		   flags[1]);
	build_user(dir, "c++", "-std=c++11", "user.cc", consumer_cxx, flags[0],
		   flags[1]);
	remove_tree(dir);
}
END_TEST

/*
 * Each installed header alone, twice over (its guard), in a translation
 * unit of its own, in every language and standard the library promises:
 * C99 and later, C++11 and later. Warnings are errors, as in the builds of
 * the programs that include them.
 */
START_TEST(test_install_headers_alone)
{
	static const struct {
		const char *cc, *lang, *std;
	} builds[] = {
		{ "cc", "c", "-std=c99" },	{ "cc", "c", "-std=c11" },
		{ "cc", "c", "-std=c17" },	{ "c++", "c++", "-std=c++11" },
		{ "c++", "c++", "-std=c++14" }, { "c++", "c++", "-std=c++17" },
		{ "c++", "c++", "-std=c++20" },
	};
	char dest[PATH_MAX], inc[PATH_MAX + 16], dir[PATH_MAX + 32];
	char src[PATH_MAX + 16], log[PATH_MAX + 16], text[512];
	struct dirent *e;
	size_t i, n;
	int headers = 0, status;
	DIR *d;

	make_tmpdir(dest, sizeof(dest));
	install_usr(dest);
	snprintf(inc, sizeof(inc), "%s/usr/include", dest);
	snprintf(dir, sizeof(dir), "%s/kvmem", inc);
	snprintf(src, sizeof(src), "%s/alone.src", dest);
	snprintf(log, sizeof(log), "%s.log", dest);
	d = opendir(dir);
	ck_assert_msg(d != NULL, "%s: %s", dir, strerror(errno));
	while ((e = readdir(d))) {
		n = strlen(e->d_name);
		if (n < 3 || strcmp(e->d_name + n - 2, ".h"))
			continue;
		snprintf(text, sizeof(text),
			 "#include <kvmem/%s>\n#include <kvmem/%s>\n",
			 e->d_name, e->d_name);
		kvmem_check_write_file(src, text);
		for (i = 0; i < ARRAY_SIZE(builds); i++) {
			status = run(log, NULL,
				     (const char *const[]){
					     builds[i].cc, "-x", builds[i].lang,
					     builds[i].std, "-Wall", "-Wextra",
					     "-Wpedantic", "-Werror",
					     "-fsyntax-only", "-I", inc, src,
					     NULL });
			if (status) {
				fprintf(stderr, "<kvmem/%s> as %s %s:\n",
					e->d_name, builds[i].cc, builds[i].std);
				fail_log(log, e->d_name, status);
			}
		}
		headers++;
	}
	closedir(d);
	ck_assert_int_eq(headers, count_suffix("libkvmem/include/kvmem", ".h"));
	unlink(log);
	remove_tree(dest);
}
END_TEST

/*
 * The units, as systemd reads them. Installed with PREFIX in a temporary
 * directory and no DESTDIR, so the programs and manual pages they name are
 * where they say: systemd-analyze checks that ExecStart= can be run and
 * that Documentation= pages exist (found through MANPATH). A warning is a
 * failure too: systemd ignores a line it does not understand.
 */
START_TEST(test_units_verify)
{
	char dir[PATH_MAX], prefix[PATH_MAX + 16], conf[PATH_MAX + 16];
	char log[PATH_MAX + 16], units[5][PATH_MAX + 64];
	char dropin[PATH_MAX + 64], from[PATH_MAX + 96];
	char manpath[PATH_MAX + 32], *text;
	int status;

	if (!kvmem_check_have("systemd-analyze")) {
		fprintf(stderr, "SKIP: test_units_verify: no systemd-analyze "
				"in PATH; the units are not verified\n");
		return;
	}
	make_tmpdir(dir, sizeof(dir));
	snprintf(prefix, sizeof(prefix), "PREFIX=%s/usr", dir);
	snprintf(conf, sizeof(conf), "SYSCONFDIR=%s/etc", dir);
	snprintf(log, sizeof(log), "%s.log", dir);
	make_install(log,
		     (const char *const[]){ "DESTDIR=", prefix, conf, NULL });
	snprintf(units[0], sizeof(units[0]),
		 "%s/usr/lib/systemd/system/kvmemd.service", dir);
	snprintf(units[1], sizeof(units[1]),
		 "%s/usr/lib/systemd/system/kvmemd.socket", dir);
	snprintf(units[2], sizeof(units[2]),
		 "%s/usr/lib/systemd/system/kvmemd-admin.socket", dir);
	snprintf(units[3], sizeof(units[3]),
		 "%s/usr/lib/systemd/system/kvmem-exporter.socket", dir);
	snprintf(units[4], sizeof(units[4]),
		 "%s/usr/lib/systemd/system/kvmem-exporter.service", dir);
	/* With the store drop-in in place, as its comment says to. */
	snprintf(dropin, sizeof(dropin),
		 "%s/usr/lib/systemd/system/kvmemd.service.d", dir);
	ck_assert_int_eq(mkdir(dropin, 0755), 0);
	snprintf(from, sizeof(from),
		 "%s/usr/share/doc/kvmem/examples/kvmemd-store.conf", dir);
	text = kvmem_check_read_file(from, NULL);
	snprintf(from, sizeof(from), "%s/store.conf", dropin);
	kvmem_check_write_file(from, text);
	free(text);
	snprintf(manpath, sizeof(manpath), "MANPATH=%s/usr/share/man", dir);
	status = run(log, (const char *const[]){ manpath, NULL },
		     (const char *const[]){ "systemd-analyze", "verify",
					    units[0], units[1], units[2],
					    units[3], units[4], NULL });
	if (status)
		fail_log(log, "systemd-analyze verify", status);
	text = kvmem_check_read_file(log, NULL);
	if (*text)
		fail_log(log, "systemd-analyze verify warned", status);
	free(text);
	unlink(log);
	remove_tree(dir);
}
END_TEST

/* Line "NAME:x:ID:..." of an /etc/passwd or /etc/group: the ID, or -1. */
static long file_id(const char *path, const char *name)
{
	char *text = kvmem_check_read_file(path, NULL), *line, *save = NULL;
	size_t n = strlen(name);
	long id = -1;

	for (line = strtok_r(text, "\n", &save); line && id < 0;
	     line = strtok_r(NULL, "\n", &save))
		if (!strncmp(line, name, n) && !strncmp(line + n, ":x:", 3))
			id = strtol(line + n + 3, NULL, 10);
	free(text);
	return id;
}

static void expect_dir(const char *path, mode_t mode, long uid, long gid)
{
	struct stat st;

	ck_assert_msg(lstat(path, &st) == 0, "%s: %s", path, strerror(errno));
	ck_assert_msg(S_ISDIR(st.st_mode), "%s is not a directory", path);
	ck_assert_msg((st.st_mode & 07777) == mode, "%s: mode %04o, not %04o",
		      path, (unsigned int)(st.st_mode & 07777),
		      (unsigned int)mode);
	ck_assert_int_eq(st.st_uid, uid);
	ck_assert_int_eq(st.st_gid, gid);
}

/*
 * systemd-sysusers and systemd-tmpfiles on the installed tree, as at boot:
 * they find the entries where make install put them, make the user and
 * groups, then the directories, owned by that user.
 */
START_TEST(test_sysusers_tmpfiles)
{
	char dest[PATH_MAX], root[PATH_MAX + 16], log[PATH_MAX + 16];
	char path[PATH_MAX * 2];
	long uid, gid;
	int status;

	if (!kvmem_check_have("systemd-sysusers") ||
	    !kvmem_check_have("systemd-tmpfiles")) {
		fprintf(stderr, "SKIP: test_sysusers_tmpfiles: no "
				"systemd-sysusers or systemd-tmpfiles in "
				"PATH; the entries are not tried\n");
		return;
	}
	if (geteuid()) {
		fprintf(stderr, "SKIP: test_sysusers_tmpfiles: needs root to "
				"give the directories to kvmem\n");
		return;
	}
	make_tmpdir(dest, sizeof(dest));
	install_usr(dest);
	snprintf(root, sizeof(root), "--root=%s", dest);
	snprintf(log, sizeof(log), "%s.log", dest);
	status = run(log, NULL,
		     (const char *const[]){ "systemd-sysusers", root, NULL });
	if (status)
		fail_log(log, "systemd-sysusers", status);
	uid = file_id(join(path, sizeof(path), dest, "etc/passwd"), "kvmem");
	gid = file_id(join(path, sizeof(path), dest, "etc/group"), "kvmem");
	ck_assert_msg(uid > 0 && gid > 0, "no user or group kvmem: %ld %ld",
		      uid, gid);
	ck_assert_int_gt(file_id(path, "kvmem-admin"), 0);

	status = run(log, NULL,
		     (const char *const[]){ "systemd-tmpfiles", root,
					    "--create", NULL });
	if (status)
		fail_log(log, "systemd-tmpfiles --create", status);
	expect_dir(join(path, sizeof(path), dest, "run/kvmem"), 0755, uid, gid);
	expect_dir(join(path, sizeof(path), dest, "var/lib/kvmem"), 0750, uid,
		   gid);
	unlink(log);
	remove_tree(dest);
}
END_TEST

/* ---- etc/kvmemd.conf ------------------------------------------------- */

#define MAX_KEYS 256

struct keys {
	char name[MAX_KEYS][96]; /* "section.key" */
	int n;
};

static int has_key(const struct keys *k, const char *name)
{
	int i;

	for (i = 0; i < k->n; i++)
		if (!strcmp(k->name[i], name))
			return 1;
	return 0;
}

/*
 * The "section.key" of each "key = value" line of @text: lines that start
 * with @mark ("" or "#"), "[section]" lines setting the section.
 */
static void collect_keys(struct keys *k, char *text, const char *mark)
{
	char section[64] = "", *line, *save = NULL, *eq;
	size_t m = strlen(mark);
	int n;

	k->n = 0;
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (line[0] == '[') {
			n = (int)strcspn(line + 1, "]");
			snprintf(section, sizeof(section), "%.*s", n, line + 1);
			continue;
		}
		if (strncmp(line, mark, m) || line[m] < 'a' || line[m] > 'z')
			continue;
		eq = strstr(line + m, " =");
		if (!eq)
			continue;
		ck_assert_int_lt(k->n, MAX_KEYS);
		snprintf(k->name[k->n++], sizeof(k->name[0]), "%s.%.*s",
			 section, (int)(eq - line - m), line + m);
	}
}

/*
 * Every key kvmemd knows is in the shipped file, commented out, and the
 * file names no other: a new key that is not added there fails here.
 */
START_TEST(test_config_lists_every_key)
{
	static struct keys printed, listed, set;
	char path[PATH_MAX], *text;
	struct kvmem_run r;
	int i;

	KVMEM_RUN(&r, "../daemon/kvmemd", "", "--print-config", "-c",
		  "/dev/null");
	ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
	collect_keys(&printed, r.out, "");
	kvmem_check_run_free(&r);
	ck_assert_int_gt(printed.n, 0);

	join(path, sizeof(path), kvmem_check_srcdir(), "etc/kvmemd.conf");
	text = kvmem_check_read_file(path, NULL);
	collect_keys(&listed, text, "#");
	free(text);
	text = kvmem_check_read_file(path, NULL);
	collect_keys(&set, text, "");
	free(text);

	for (i = 0; i < printed.n; i++)
		ck_assert_msg(has_key(&listed, printed.name[i]),
			      "%s is not in etc/kvmemd.conf: add it there, "
			      "commented out, with its default",
			      printed.name[i]);
	for (i = 0; i < listed.n; i++)
		ck_assert_msg(has_key(&printed, listed.name[i]),
			      "etc/kvmemd.conf lists %s, which kvmemd does "
			      "not know",
			      listed.name[i]);
	/* The defaults stand until the administrator changes them. */
	ck_assert_msg(set.n == 0, "etc/kvmemd.conf sets %s", set.name[0]);

	KVMEM_RUN(&r, "../daemon/kvmemd", "", "-n", "-c", path);
	ck_assert_msg(r.status == 0, "kvmemd -n -c %s: exit %d: %s", path,
		      r.status, r.err);
	kvmem_check_run_free(&r);
}
END_TEST

/*
 * make run is kvmemd on built-in defaults whoever runs it: an installed
 * configuration file is not read, and the state (error counters, kept
 * sessions) goes to the build directory, not the system's /var/lib/kvmem
 * that root's default would adopt. RUN_FLAGS win.
 */
START_TEST(test_make_run_own_state)
{
	char build[PATH_MAX], build_var[PATH_MAX + 8], want[PATH_MAX + 32];
	char dir[PATH_MAX], log[PATH_MAX + 16], *out;
	const char *argv[] = { "make",
			       "-s",
			       "-C",
			       kvmem_check_srcdir(),
			       "run",
			       build_var,
			       NULL, /* SAN= */
			       "RUN_FLAGS=--print-config",
			       NULL };
	int status;

	ck_assert_msg(realpath(kvmem_check_builddir(), build) != NULL,
		      "build directory %s: %s", kvmem_check_builddir(),
		      strerror(errno));
	build_vars(build_var, sizeof(build_var), &argv[6]);
	make_tmpdir(dir, sizeof(dir));
	snprintf(log, sizeof(log), "%s/make.log", dir);
	status = run(log, NULL, argv);
	if (status)
		fail_log(log, "make run RUN_FLAGS=--print-config", status);
	out = kvmem_check_read_file(log, NULL);
	snprintf(want, sizeof(want), "state_dir = %s/state\n", build);
	ck_assert_msg(strstr(out, want), "no '%s' in:\n%.1000s", want, out);
	ck_assert_ptr_null(strstr(out, "= /var/lib/kvmem"));
	free(out);
	remove_tree(dir);
}
END_TEST

KVMEM_SUITE(install)
{
	Suite *s = suite_create("install");
	TCase *tree = tcase_create("tree");
	TCase *conf = tcase_create("conf");

	tcase_set_timeout(tree, 120);
	tcase_add_test(tree, test_install_tree);
	tcase_add_test(tree, test_install_builds_users);
	tcase_add_test(tree, test_install_python_finds_library);
	tcase_add_test(tree, test_uninstalled_pc);
	tcase_add_test(tree, test_install_headers_alone);
	tcase_add_test(tree, test_units_verify);
	tcase_add_test(tree, test_sysusers_tmpfiles);
	tcase_add_test(conf, test_config_lists_every_key);
	tcase_add_test(conf, test_make_run_own_state);
	suite_add_tcase(s, tree);
	suite_add_tcase(s, conf);
	return s;
}
