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

static void __attribute__((format(printf, 3, 0)))
vlog(int prio, int err, const char *fmt, va_list ap)
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

int kvmemd_ratelimit(struct kvmemd_ratelimit *rl, uint64_t now, uint64_t window,
		     uint64_t burst, uint64_t *missed)
{
	*missed = 0;
	if (now - rl->start >= window) {
		*missed = rl->missed;
		rl->start = now;
		rl->n = 0;
		rl->missed = 0;
	}
	if (rl->n++ < burst)
		return 1;
	rl->missed++;
	return 0;
}

int kvmemd_rl(struct kvmemd_ratelimit *rl, uint64_t window, uint64_t burst,
	      const char *what)
{
	uint64_t missed;

	if (kvmemd_ratelimit(rl, kvmemd_now_ns(), window, burst, &missed)) {
		if (missed)
			kvmemd_log(LOG_WARNING, "%llu %s were not logged",
				   (unsigned long long)missed, what);
		return 1;
	}
	if (rl->missed == 1)
		kvmemd_log(LOG_WARNING,
			   "more than %llu %s in %llu s: the rest are not "
			   "logged until then",
			   (unsigned long long)burst, what,
			   (unsigned long long)(window / 1000000000ull));
	return 0;
}

void kvmemd_rl_flush(struct kvmemd_ratelimit *rl, uint64_t window,
		     const char *what)
{
	uint64_t now = kvmemd_now_ns();

	if (!rl->missed || now - rl->start < window)
		return;
	kvmemd_log(LOG_WARNING, "%llu %s were not logged",
		   (unsigned long long)rl->missed, what);
	rl->missed = 0;
	rl->n = 0;
}

void kvmemd_log_rl(struct kvmemd_ratelimit *rl, const char *what, int prio,
		   const char *fmt, ...)
{
	va_list ap;

	if (prio > log_level ||
	    !kvmemd_rl(rl, KVMEMD_RL_WINDOW_NS, KVMEMD_RL_BURST, what))
		return;
	va_start(ap, fmt);
	vlog(prio, 0, fmt, ap);
	va_end(ap);
}
