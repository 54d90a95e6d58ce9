/* SPDX-License-Identifier: MIT */
/*
 * check_main.c - the one test runner: every registered suite, one summary
 *
 * Each suite runs in a process of its own, KVMEM_CHECK_JOBS of them at a
 * time (default: the CPUs this process may use). What a suite prints (its
 * tests' messages, Check's line for each test that failed) goes to a file
 * and is printed in one piece, under a line with its counts and time, when
 * the suite ends. At the end come each suite's time, the ten slowest tests
 * and Check's summary line over all suites; the exit status is 1 when a
 * test failed or a suite did not finish.
 *
 * CK_RUN_SUITE names the suites to run, CK_EXCLUDE_SUITES suites to leave
 * out (comma-separated, both); an unknown name is an error, not a run of
 * nothing. CK_RUN_CASE, CK_DEFAULT_TIMEOUT and Check's other variables
 * reach every suite; Check's log files (CK_LOG_FILE_NAME,
 * CK_TAP_LOG_FILE_NAME, CK_XML_LOG_FILE_NAME) are not written, as the
 * suites' processes would each overwrite them.
 *
 * Suites side by side share the build tree, which only the install suite
 * writes to (make install's generated files), and /tmp, where each daemon,
 * tool run and temporary file has a name mkdtemp() or mkstemp() made.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvmem_check.h"

#define MAX_SUITES 64
#define MAX_TESTS 2048
#define SLOWEST 10

struct suite {
	const char *name;
	kvmem_suite_fn fn;
	pid_t pid;
	FILE *out; /* what it printed */
	FILE *res; /* its counts and test times, from the suite's process */
	double start, secs;
};

struct test_time {
	double secs;
	const struct suite *suite;
	char name[64];
};

static struct suite suites[MAX_SUITES];
static int nsuites;

static struct test_time times[MAX_TESTS];
static int ntimes;

void kvmem_check_register(const char *name, kvmem_suite_fn fn)
{
	if (nsuites == MAX_SUITES) {
		fprintf(stderr, "kvmem-check: more than %d suites\n",
			MAX_SUITES);
		abort();
	}
	suites[nsuites].name = name;
	suites[nsuites++].fn = fn;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The text between <@tag> and </@tag> in [@p, @end), at most @len - 1
 * bytes of it, into @buf: 1, or 0 when it is not there. */
static int xml_field(const char *p, const char *end, const char *tag, char *buf,
		     size_t len)
{
	char open[32], close[32];
	const char *a, *b;

	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	a = strstr(p, open);
	if (!a || a >= end)
		return 0;
	a += strlen(open);
	b = strstr(a, close);
	if (!b || b > end)
		return 0;
	snprintf(buf, len, "%.*s", (int)(b - a), a);
	return 1;
}

/* The whole file at @path, NUL-terminated, or NULL. free() it. */
static char *read_all(const char *path)
{
	FILE *f = fopen(path, "r");
	size_t len = 0, cap = 0, got;
	char *buf = NULL, *more;

	if (!f)
		return NULL;
	do {
		if (cap - len < 4096) {
			cap = cap ? 2 * cap : 1 << 16;
			more = realloc(buf, cap);
			if (!more) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = more;
		}
		got = fread(buf + len, 1, cap - len - 1, f);
		len += got;
	} while (got);
	fclose(f);
	buf[len] = '\0';
	return buf;
}

/*
 * In the suite's process, after the run: a line in Check's words for each
 * test that did not pass, to stdout; to @res each test's time and name
 * ("T secs name"), then the counts ("S run failures errors"). Check's
 * results name no test, its XML report does, in the same order.
 */
static void report_tests(SRunner *sr, const char *xml_path, FILE *res)
{
	TestResult **tr = srunner_results(sr);
	const int n = srunner_ntests_run(sr);
	char *xml = read_all(xml_path);
	const char *p = xml, *end;
	int i, failures = 0, errors = 0;

	for (i = 0; i < n; i++) {
		char name[64] = "?", iter[16] = "0", dur[32] = "-1";

		p = p ? strstr(p, "<test ") : NULL;
		end = p ? strstr(p, "</test>") : NULL;
		if (p && end) {
			xml_field(p, end, "id", name, sizeof(name));
			xml_field(p, end, "iteration", iter, sizeof(iter));
			xml_field(p, end, "duration", dur, sizeof(dur));
			p = end;
		}
		fprintf(res, "T %s %s\n", dur, name);
		if (tr_rtype(tr[i]) == CK_PASS)
			continue;
		if (tr_rtype(tr[i]) == CK_FAILURE)
			failures++;
		else
			errors++;
		printf("%s:%d:%c:%s:%s:%s: %s%s\n", tr_lfile(tr[i]),
		       tr_lno(tr[i]), tr_rtype(tr[i]) == CK_FAILURE ? 'F' : 'E',
		       tr_tcname(tr[i]), name, iter,
		       tr_rtype(tr[i]) == CK_ERROR ? "(after this point) " : "",
		       tr_msg(tr[i]));
	}
	fprintf(res, "S %d %d %d\n", n, failures, errors);
	free(xml);
	free(tr);
}

/* The suite's process: run it, report, exit. */
static void __attribute__((noreturn)) run_suite(const struct suite *s)
{
	const char *tmp = getenv("TMPDIR");
	char xml[4096];
	SRunner *sr;
	int fd;

	if (dup2(fileno(s->out), STDOUT_FILENO) < 0 ||
	    dup2(fileno(s->out), STDERR_FILENO) < 0)
		_exit(125);
	unsetenv("CK_LOG_FILE_NAME");
	unsetenv("CK_TAP_LOG_FILE_NAME");
	unsetenv("CK_XML_LOG_FILE_NAME");
	snprintf(xml, sizeof(xml), "%s/kvmem-check-%s-XXXXXX",
		 tmp && *tmp ? tmp : "/tmp", s->name);
	fd = mkstemp(xml);
	if (fd < 0) {
		printf("kvmem-check: %s: mkstemp %s: %s\n", s->name, xml,
		       strerror(errno));
		exit(125);
	}
	close(fd);
	sr = srunner_create(s->fn());
	srunner_set_xml(sr, xml);
	srunner_run(sr, s->name, NULL, CK_SILENT);
	report_tests(sr, xml, s->res);
	unlink(xml);
	srunner_free(sr);
	exit(fflush(NULL) ? 125 : 0);
}

static void start(struct suite *s)
{
	s->out = tmpfile();
	s->res = tmpfile();
	if (!s->out || !s->res) {
		perror("kvmem-check: tmpfile");
		exit(2);
	}
	fflush(NULL);
	s->start = now_s();
	s->pid = fork();
	if (s->pid < 0) {
		perror("kvmem-check: fork");
		exit(2);
	}
	if (!s->pid)
		run_suite(s);
}

/*
 * Suite @s ended with wait status @st: its line, then what it printed.
 * Its counts go to *@run, *@failures and *@errors; a suite that did not
 * report them (it crashed, or a test in CK_FORK=no mode killed it) counts
 * as one check, an error.
 */
static void finish(struct suite *s, int st, int *run, int *failures,
		   int *errors)
{
	int n = -1, f = 0, e = 0, c;
	char line[256], name[64];
	double secs;

	s->secs = now_s() - s->start;
	rewind(s->res);
	while (fgets(line, sizeof(line), s->res)) {
		/* Check times only the tests that pass. */
		if (sscanf(line, "T %lf %63s", &secs, name) == 2 && secs >= 0 &&
		    ntimes < MAX_TESTS) {
			times[ntimes].secs = secs;
			times[ntimes].suite = s;
			snprintf(times[ntimes++].name, sizeof(name), "%s",
				 name);
		}
		sscanf(line, "S %d %d %d", &n, &f, &e);
	}
	fclose(s->res);
	if (n < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) {
		printf("%s: did not finish (%s %d) after %.1f s\n", s->name,
		       WIFSIGNALED(st) ? "signal" : "exit status",
		       WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
		       s->secs);
		n = 1;
		f = 0;
		e = 1;
	} else if (f || e) {
		printf("%s: %d checks, failures: %d, errors: %d, %.1f s\n",
		       s->name, n, f, e, s->secs);
	} else {
		printf("%s: %d checks, %.1f s\n", s->name, n, s->secs);
	}
	*run += n;
	*failures += f;
	*errors += e;
	rewind(s->out);
	while ((c = getc(s->out)) != EOF)
		putchar(c);
	fclose(s->out);
	fflush(stdout);
}

/* Whether @name is in the comma-separated list @list. */
static int listed(const char *list, const char *name)
{
	const size_t len = strlen(name);
	const char *p;

	for (p = list; p; p = strchr(p, ',')) {
		p += *p == ',';
		if (!strncmp(p, name, len) && (p[len] == ',' || !p[len]))
			return 1;
	}
	return 0;
}

/* Every name of @list (from variable @var) is a suite's, or exit. */
static void check_names(const char *var, const char *list)
{
	char name[64];
	const char *p = list;
	int i, len;

	while (*p) {
		len = (int)strcspn(p, ",");
		snprintf(name, sizeof(name), "%.*s", len, p);
		for (i = 0; i < nsuites && strcmp(suites[i].name, name); i++)
			;
		if (len && i == nsuites) {
			fprintf(stderr,
				"kvmem-check: %s: no suite \"%s\"; "
				"they are:",
				var, name);
			for (i = 0; i < nsuites; i++)
				fprintf(stderr, " %s", suites[i].name);
			fprintf(stderr, "\n");
			exit(2);
		}
		p += len + (p[len] == ',');
	}
}

static int jobs(void)
{
	const char *v = getenv("KVMEM_CHECK_JOBS");
	cpu_set_t set;
	char *end;
	long n;

	if (v && *v) {
		n = strtol(v, &end, 10);
		if (*end || n < 1 || n > MAX_SUITES) {
			fprintf(stderr,
				"kvmem-check: KVMEM_CHECK_JOBS=%s is "
				"not a number in 1..%d\n",
				v, MAX_SUITES);
			exit(2);
		}
		return (int)n;
	}
	if (sched_getaffinity(0, sizeof(set), &set))
		return 1;
	return CPU_COUNT(&set);
}

static int by_time(const void *a, const void *b)
{
	const double x = ((const struct test_time *)a)->secs;
	const double y = ((const struct test_time *)b)->secs;

	return (x < y) - (x > y);
}

static int suite_by_time(const void *a, const void *b)
{
	const double x = (*(struct suite *const *)a)->secs;
	const double y = (*(struct suite *const *)b)->secs;

	return (x < y) - (x > y);
}

/* Each suite's time, slowest first, three to a line; the slowest tests. */
static void print_times(struct suite **ran, int n, double wall, int njobs)
{
	int i;

	qsort(ran, (size_t)n, sizeof(*ran), suite_by_time);
	printf("\n%d suites in %.1f s, %d at a time; seconds each:\n", n, wall,
	       njobs);
	for (i = 0; i < n; i++)
		printf("  %-16s %6.1f%s", ran[i]->name, ran[i]->secs,
		       i % 3 == 2 || i == n - 1 ? "\n" : "");
	qsort(times, (size_t)ntimes, sizeof(times[0]), by_time);
	printf("The %d slowest tests:\n", ntimes < SLOWEST ? ntimes : SLOWEST);
	for (i = 0; i < ntimes && i < SLOWEST; i++)
		printf("  %6.1f s  %s: %s\n", times[i].secs,
		       times[i].suite->name, times[i].name);
}

int main(void)
{
	const char *only = getenv("CK_RUN_SUITE");
	const char *skip = getenv("CK_EXCLUDE_SUITES");
	struct suite *ran[MAX_SUITES];
	int i, st, next = 0, running = 0, n = 0, njobs = jobs();
	int run = 0, failures = 0, errors = 0, pct;
	double t0 = now_s();
	pid_t pid;

	if (!nsuites) {
		fprintf(stderr, "kvmem-check: no suites registered\n");
		return 2;
	}
	only = only && *only ? only : NULL;
	skip = skip && *skip ? skip : NULL;
	if (only)
		check_names("CK_RUN_SUITE", only);
	if (skip)
		check_names("CK_EXCLUDE_SUITES", skip);
	for (i = 0; i < nsuites; i++)
		if ((!only || listed(only, suites[i].name)) &&
		    (!skip || !listed(skip, suites[i].name)))
			ran[n++] = &suites[i];
	printf("Running %d suite%s, %d at a time\n", n, n == 1 ? "" : "s",
	       njobs);
	while (next < n || running) {
		if (next < n && running < njobs) {
			start(ran[next++]);
			running++;
			continue;
		}
		pid = waitpid(-1, &st, 0);
		if (pid < 0) {
			if (errno == EINTR)
				continue;
			perror("kvmem-check: waitpid");
			return 2;
		}
		for (i = 0; i < next && ran[i]->pid != pid; i++)
			;
		if (i == next)
			continue;
		running--;
		/* Its pid may be a later suite's once it is reaped. */
		ran[i]->pid = 0;
		finish(ran[i], st, &run, &failures, &errors);
	}
	print_times(ran, n, now_s() - t0, njobs);
	/* Check's summary line (sr_stat_str()), over every suite. */
	pct = failures || errors
		      ? (run ? (int)((float)(run - failures - errors) /
				     (float)run * 100)
			     : 0)
		      : 100;
	printf("%d%%: Checks: %d, Failures: %d, Errors: %d\n", pct, run,
	       failures, errors);
	return failures || errors ? EXIT_FAILURE : EXIT_SUCCESS;
}
