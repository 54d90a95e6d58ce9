/* SPDX-License-Identifier: MIT */
/*
 * notify.c - systemd's notification socket: readiness, reloads, status
 * lines, the watchdog, and the descriptor store that keeps sessions across
 * a restart (resume.c)
 *
 * sd_notify() blocks while the receiver's queue is full, and the loop must
 * never wait on whoever reads NOTIFY_SOCKET. Messages go out non-blocking;
 * those systemd waits for (READY=1, RELOADING=1) may wait up to
 * KVMEMD_NOTIFY_WAIT_MS for room, the rest are dropped when the reader is
 * behind (the next change sends a whole new STATUS= line).
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvmemd.h"

static int notify_fd = -1;

/* Connected, so that poll() sees the room in the reader's queue. */
void kvmemd_notify_open(void)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t len = path ? strlen(path) : 0;

	if (!len || (path[0] != '/' && path[0] != '@') ||
	    len >= sizeof(sa.sun_path))
		return;
	memcpy(sa.sun_path, path, len);
	if (path[0] == '@')
		sa.sun_path[0] = 0; /* abstract namespace */
	notify_fd =
		socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (notify_fd >= 0 &&
	    connect(notify_fd, (struct sockaddr *)&sa,
		    (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
				len))) {
		kvmemd_log_err(LOG_WARNING, -errno, "NOTIFY_SOCKET %s", path);
		close(notify_fd);
		notify_fd = -1;
	}
}

int kvmemd_notify_fd(const char *msg, int fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = strlen(msg) };
	struct msghdr m = { .msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = u.buf,
			    .msg_controllen = sizeof(u.buf) };
	struct pollfd pfd = { .fd = notify_fd, .events = POLLOUT };
	struct cmsghdr *cm;

	if (notify_fd < 0)
		return -ENOTCONN;
	memset(&u, 0, sizeof(u));
	cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	if (fd < 0) {
		m.msg_control = NULL;
		m.msg_controllen = 0;
	}
	if (sendmsg(notify_fd, &m, MSG_NOSIGNAL) >= 0)
		return 0;
	if (errno == EAGAIN && poll(&pfd, 1, KVMEMD_NOTIFY_WAIT_MS) > 0 &&
	    sendmsg(notify_fd, &m, MSG_NOSIGNAL) >= 0)
		return 0;
	return -errno;
}

void kvmemd_notify(const char *msg, int wait_ms)
{
	struct pollfd pfd = { .fd = notify_fd, .events = POLLOUT };
	size_t len = strlen(msg);

	if (notify_fd < 0 || send(notify_fd, msg, len, MSG_NOSIGNAL) >= 0)
		return;
	if (errno == EAGAIN && wait_ms && poll(&pfd, 1, wait_ms) > 0 &&
	    send(notify_fd, msg, len, MSG_NOSIGNAL) >= 0)
		return;
	kvmemd_log(LOG_DEBUG, "notify %s: dropped, the reader is behind", msg);
}

int kvmemd_notify_keeping(const struct kvmemd *d)
{
	const char *n = getenv("NOTIFY_SOCKET");

	return d->cfg.keep_sessions == KVMEMD_YES && n && *n;
}
