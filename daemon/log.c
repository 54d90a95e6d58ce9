/*
 * log.c - messages to stderr, with syslog priority prefixes ("<3>") when
 * stderr is not a terminal, so journald files them at the right level
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "kvmemd.h"

static int log_level = LOG_INFO;
static int log_prefix;

void kvmemd_log_init(int level)
{
	log_level = level;
	log_prefix = !isatty(STDERR_FILENO);
}

static void vlog(int prio, int err, const char *fmt, va_list ap)
{
	char buf[1024];
	int n;

	if (prio > log_level)
		return;
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	if (n < 0)
		return;
	if (err && (size_t)n < sizeof(buf))
		snprintf(buf + n, sizeof(buf) - (size_t)n, ": %s",
			 strerror(-err));
	if (log_prefix)
		fprintf(stderr, "<%d>kvmemd: %s\n", prio, buf);
	else
		fprintf(stderr, "kvmemd: %s\n", buf);
}

void kvmemd_log(int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(prio, 0, fmt, ap);
	va_end(ap);
}

void kvmemd_log_err(int prio, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(prio, err, fmt, ap);
	va_end(ap);
}
