/* SPDX-License-Identifier: MIT */
/*
 * log.c - messages to the journal, or to stderr
 *
 * Under systemd with stderr connected to the journal ($JOURNAL_STREAM
 * names stderr's device and inode, as systemd.exec(5) sets it), each
 * message is one datagram of the journal's native protocol on its socket
 * (/run/systemd/journal/socket, or $KVMEMD_JOURNAL_SOCKET): MESSAGE,
 * PRIORITY, SYSLOG_IDENTIFIER, ERRNO where an error goes with it, and the
 * fields a caller adds (kvmemd_log_fields(): MESSAGE_ID, SESSION, SEQ,
 * CODEC, POOL ... of an error event), so that journalctl can select on
 * them. Elsewhere, and for a datagram the journal does not take at once
 * (its queue full: the event loop never waits for it), a line on stderr,
 * with a syslog priority prefix ("<3>") when stderr is not a terminal, so
 * that journald files a plain line at the right level too.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvmemd.h"

#define JOURNAL_SOCKET "/run/systemd/journal/socket"

static int log_level = LOG_INFO;
static int log_prefix;
static int journal_fd = -1;
static int journal_tried;

/* The journal's socket, when stderr is the journal's stream. */
static void journal_open(void)
{
	const char *stream = getenv("JOURNAL_STREAM");
	const char *path = getenv("KVMEMD_JOURNAL_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	unsigned long long dev, ino;
	struct stat st;
	int fd;

	journal_tried = 1;
	if (!stream || sscanf(stream, "%llu:%llu", &dev, &ino) != 2 ||
	    fstat(STDERR_FILENO, &st) || st.st_dev != dev || st.st_ino != ino)
		return;
	if (!path || !*path)
		path = JOURNAL_SOCKET;
	if (strlen(path) >= sizeof(sa.sun_path))
		return;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(fd);
		return;
	}
	journal_fd = fd;
}

void kvmemd_log_init(int level)
{
	log_level = level;
	log_prefix = !isatty(STDERR_FILENO);
	if (!journal_tried)
		journal_open();
}

/* One datagram; 0 when the journal took it. */
static int journal_send(int prio, int err, const char *fields, const char *msg)
{
	char buf[4096];
	int n;

	n = snprintf(buf, sizeof(buf),
		     "MESSAGE=%s\nPRIORITY=%d\nSYSLOG_IDENTIFIER=kvmemd\n%s",
		     msg, prio, fields ? fields : "");
	if (n > 0 && err && (size_t)n < sizeof(buf))
		n += snprintf(buf + n, sizeof(buf) - (size_t)n, "ERRNO=%d\n",
			      -err);
	if (n <= 0 || (size_t)n >= sizeof(buf))
		return -1;
	/* Never wait: a journal that is behind gets the line on stderr. */
	if (send(journal_fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) != n)
		return -1;
	return 0;
}

static void __attribute__((format(printf, 4, 0)))
vlog(int prio, int err, const char *fields, const char *fmt, va_list ap)
{
	char buf[1024], *nl;
	int n;

	if (prio > log_level)
		return;
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	if (n < 0)
		return;
	if (err && (size_t)n < sizeof(buf))
		snprintf(buf + n, sizeof(buf) - (size_t)n, ": %s",
			 strerror(-err));
	/* One record, one line. */
	while ((nl = strchr(buf, '\n')))
		*nl = ' ';
	if (journal_fd >= 0 && !journal_send(prio, err, fields, buf))
		return;
	if (log_prefix)
		fprintf(stderr, "<%d>kvmemd: %s\n", prio, buf);
	else
		fprintf(stderr, "kvmemd: %s\n", buf);
}

void kvmemd_log(int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(prio, 0, NULL, fmt, ap);
	va_end(ap);
}

void kvmemd_log_err(int prio, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(prio, err, NULL, fmt, ap);
	va_end(ap);
}

void kvmemd_log_fields(int prio, const char *fields, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(prio, 0, fields, fmt, ap);
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
	vlog(prio, 0, NULL, fmt, ap);
	va_end(ap);
}
