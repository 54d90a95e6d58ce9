/* SPDX-License-Identifier: MIT */
/*
 * server.c - kvmemd's event loop: sockets, handshakes, doorbells, signals,
 * and systemd
 *
 * One epoll set holds the listening sockets, every connection, every
 * session's SQ doorbell and the workers' completion eventfd. While clients
 * are busy the loop also polls their rings, and lets them skip the doorbell
 * (NEED_WAKEUP clear); after ring.poll_idle_us without work it sets
 * NEED_WAKEUP everywhere and sleeps in epoll.
 *
 * A connection goes HELLO (waiting for struct kvmem_hello, with a deadline)
 * -> SETUP (a worker creates its memory) -> ACTIVE (welcome sent, ring
 * served). Whatever the client does, the worst outcome is that its own
 * connection is dropped and everything it held is freed.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "json.h"
#include "kvmemd.h"
#include "prefix.h"
#include "remote.h"

/* A client has this long to say hello, an admin connection between
 * requests. */
#define HELLO_TIMEOUT_NS (5ull * 1000000000ull)
/* Connections not yet attached, and admin connections, at any time: in
 * all, and of one user. A new one past either limit makes the oldest of
 * that user (or of the user with the most) go, so connections that never
 * speak cannot keep anyone out (kvmemd_fd_check() counts on these). */
#define MAX_PENDING 64
#define MAX_PENDING_UID 8
/* After accept() ran out of descriptors, the socket rests this long,
 * doubling up to the max. */
#define ACCEPT_BACKOFF_NS (50ull * 1000000ull)
#define ACCEPT_BACKOFF_MAX_NS (1000ull * 1000000ull)
#define MAX_EVENTS 64
#define POLL_PASSES 32
/* An admin request, and the datagrams a reply is cut into. */
#define ADMIN_REQ_MAX 1024
#define ADMIN_CHUNK (32u << 10)

enum watch_type {
	W_LISTEN,
	W_ADMIN_LISTEN,
	W_CONN,
	W_DOORBELL,
	W_WORKERS,
	W_STORE,
	W_REMOTE,
	W_SIGNAL,
};

/* What an epoll event points at. */
struct watch {
	enum watch_type type;
	struct conn *conn;
};

enum conn_state {
	CONN_HELLO,
	CONN_SETUP, /* a worker has it: only the loop's fields change */
	CONN_ACTIVE,
	CONN_ADMIN,
};

struct conn {
	struct kvmemd_work work; /* first: the worker hands it back */
	struct watch sock_w, bell_w;
	int fd;
	enum conn_state state;
	int hung_up; /* the client left during SETUP */
	int dead; /* freed at the end of this loop iteration */
	int setup_ret;
	char why[KVMEM_MESSAGE_LEN];
	struct ucred cred;
	uint64_t tenant; /* of a client's session, as authorize() found */
	uint16_t abi; /* the hello's version; 0 before a hello */
	uint64_t accepted; /* CLOCK_MONOTONIC ns */
	uint64_t deadline; /* CONN_HELLO, CONN_ADMIN */
	struct kvmemd_session *s;
	struct kvmem_welcome w;
	struct conn *prev, *next;
	struct server *sv;
	/* CONN_ADMIN: the reply being sent, and whether one is awaited */
	struct jw out;
	size_t out_off;
	int waiting;
	struct kvmemd_waiter waiter;
};

struct server {
	struct kvmemd *d;
	int ep;
	int lfd, afd; /* listening: clients, admin */
	int own_lfd, own_afd; /* bound here (unlink at exit) */
	struct watch lw, aw, ww, sw, rw, gw;
	struct kvmemd_workers *workers;
	struct conn *conns;
	struct conn *zombies; /* dead, events for them may still be queued */
	unsigned int npending[2]; /* not attached yet: [0] clients, [1] admin */
	int reserve_fd; /* closed to accept when descriptors run out */
	int sfd; /* signalfd of SIGTERM, SIGINT, SIGHUP, blocked */
	int stop, reload; /* signals taken, for the loop to act on */
	int state_fd; /* the state directory, locked while this runs */
	uint64_t accept_rest[2]; /* a listening socket is not watched until */
	uint64_t accept_backoff;
	/* log lines a client can cause at will */
	struct kvmemd_ratelimit log_conn, log_drop, log_accept, log_session;
	int polling;
	uint64_t last_busy;
	uint64_t watchdog_usec, next_watchdog;
	char status[256];
	uint64_t status_sessions, status_pool; /* what status says */
	const char *status_scrub;
	uint64_t scrub_next; /* when kvmemd_ras_run() wants to run */
	uint64_t tier_next; /* when kvmemd_tier_run() does */
	uint64_t prefix_next; /* when kvmemd_prefix_run() does */
	uint64_t resume_next; /* when kvmemd_resume_run() does */
	unsigned int polls; /* passes since the last epoll_wait() */
};

/*
 * Take the signals that came, from the signalfd. Read after every
 * epoll_wait(), whatever it returned: a loop with work left waits with a
 * timeout of 0 and may never see the signalfd among its events (nor would
 * epoll_pwait() deliver a signal then: it restores the mask unless it
 * slept), and a client that keeps the daemon busy would hold its stop.
 */
static void take_signals(struct server *sv)
{
	struct signalfd_siginfo si;

	while (read(sv->sfd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGHUP)
			sv->reload = 1;
		else
			sv->stop = 1;
	}
}

static int watch_add(struct server *sv, int fd, uint32_t events,
		     struct watch *w)
{
	struct epoll_event ev = { .events = events, .data.ptr = w };

	return epoll_ctl(sv->ep, EPOLL_CTL_ADD, fd, &ev) ? -errno : 0;
}

/* ---- status and systemd ----------------------------------------------- */

static void status_update(struct server *sv)
{
	const struct kvmemd *d = sv->d;
	char buf[sizeof(sv->status)];
	const char *scrub = kvmemd_ras_state(d);

	/* Called on every pass of the loop: cheap when nothing changed. */
	if (d->n.sessions == sv->status_sessions &&
	    d->n.pool_used == sv->status_pool && scrub == sv->status_scrub &&
	    sv->status[0])
		return;
	sv->status_sessions = d->n.sessions;
	sv->status_pool = d->n.pool_used;
	sv->status_scrub = scrub;

	snprintf(buf, sizeof(buf),
		 "sessions %llu, host pool %llu of %llu MiB used, scrub %s",
		 (unsigned long long)d->n.sessions,
		 (unsigned long long)(d->n.pool_used >> 20),
		 (unsigned long long)(d->cfg.host_bytes >> 20), scrub);
	if (!strcmp(buf, sv->status))
		return;
	memcpy(sv->status, buf, sizeof(buf));
	{
		char line[sizeof("STATUS=") + sizeof(buf)];

		snprintf(line, sizeof(line), "STATUS=%s", buf);
		kvmemd_notify(line, 0);
	}
}

/* ---- connections ------------------------------------------------------ */

static int is_admin(const struct conn *c)
{
	return c->state == CONN_ADMIN;
}

/* @c no longer waits to speak (it said hello, or it is gone). */
static void pending_put(struct server *sv, struct conn *c)
{
	sv->npending[is_admin(c)]--;
	/* The record exists while it counts something. */
	kvmemd_user(sv->d, c->cred.uid)->pending[is_admin(c)]--;
}

static void conn_link(struct server *sv, struct conn *c)
{
	c->next = sv->conns;
	if (sv->conns)
		sv->conns->prev = c;
	sv->conns = c;
}

/*
 * Release what a connection holds now; the struct itself goes at the end of
 * the loop iteration, since events for it may still be in the batch.
 */
static void conn_free(struct server *sv, struct conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		sv->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->state == CONN_HELLO || c->state == CONN_ADMIN)
		pending_put(sv, c);
	if (c->waiting) {
		kvmemd_ras_forget(sv->d, &c->waiter);
		kvmemd_tier_forget(sv->d, &c->waiter);
	}
	jw_free(&c->out);
	if (c->s) {
		epoll_ctl(sv->ep, EPOLL_CTL_DEL, kvmemd_session_sq_efd(c->s),
			  NULL);
		kvmemd_session_free(c->s);
		c->s = NULL;
	}
	if (c->fd >= 0)
		close(c->fd); /* also leaves the epoll set */
	c->fd = -1;
	c->dead = 1;
	c->next = sv->zombies;
	sv->zombies = c;
	status_update(sv);
}

static void reap_zombies(struct server *sv)
{
	struct conn *c;

	while ((c = sv->zombies)) {
		sv->zombies = c->next;
		free(c);
	}
}

/*
 * Send the welcome (with @nfds of the session's fds when it is not a
 * refusal): the whole of it to a client of ABI 4 or later, the welcome of
 * ABI 3 to others and to peers that sent no hello.
 */
static int send_welcome(struct conn *c, const int *fds, int nfds)
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	const size_t size = c->abi >= 4 ? sizeof(c->w) : KVMEM_WELCOME_V3_SIZE;
	struct iovec iov = { .iov_base = &c->w, .iov_len = size };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *cm;

	c->w.magic = KVMEM_WELCOME_MAGIC;
	c->w.abi_version = KVMEM_ABI_VERSION;
	c->w.size = (uint16_t)size;
	if (nfds) {
		memset(&u, 0, sizeof(u));
		m.msg_control = u.buf;
		m.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		cm = CMSG_FIRSTHDR(&m);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
	}
	if (sendmsg(c->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		return -errno;
	return 0;
}

/*
 * Read what the peer sent and did not get an answer to: a socket closed
 * with it unread resets the connection, and the peer would lose the
 * reason it is told.
 */
static void drain(int fd)
{
	char buf[256];
	int i;

	for (i = 0; i < 64; i++)
		if (recv(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC) <= 0)
			break;
}

static void conn_refuse(struct server *sv, struct conn *c)
{
	kvmemd_log_rl(&sv->log_conn, "connection refusals", LOG_NOTICE,
		      "refused pid %d uid %u: %s", (int)c->cred.pid,
		      (unsigned int)c->cred.uid, c->w.message);
	sv->d->n.refused++;
	drain(c->fd);
	send_welcome(c, NULL, 0);
	conn_free(sv, c);
}

/* @why NULL: the client hung up; else what it did to be dropped. */
static void conn_drop(struct server *sv, struct conn *c, const char *why)
{
	if (c->state == CONN_ACTIVE && why) {
		kvmemd_log_rl(&sv->log_drop, "session drops", LOG_NOTICE,
			      "session %u (pid %d uid %u) dropped: %s",
			      kvmemd_session_id(c->s), (int)c->cred.pid,
			      (unsigned int)c->cred.uid, why);
		sv->d->n.dropped++;
		kvmemd_session_shutdown(c->s);
		kvmemd_session_discard(c->s);
	} else if (c->state == CONN_ACTIVE) {
		kvmemd_log_rl(&sv->log_session, "attaches and detaches",
			      LOG_INFO, "session %u (pid %d) detached",
			      kvmemd_session_id(c->s), (int)c->cred.pid);
		sv->d->n.detached++;
		kvmemd_session_discard(c->s);
	}
	if (c->state == CONN_SETUP) {
		/* A worker still has it: finish when it comes back. */
		c->hung_up = 1;
		return;
	}
	conn_free(sv, c);
}

static int id_allowed(const struct kvmemd_config *cfg, const struct ucred *cr,
		      const gid_t *groups, int ngroups)
{
	unsigned int i;
	int j;

	for (i = 0; i < cfg->n_allow_uids; i++)
		if (cfg->allow_uids[i] == cr->uid)
			return 1;
	for (i = 0; i < cfg->n_allow_gids; i++) {
		if (cfg->allow_gids[i] == cr->gid)
			return 1;
		for (j = 0; j < ngroups; j++)
			if (cfg->allow_gids[i] == groups[j])
				return 1;
	}
	return 0;
}

/* Root, the daemon's own user, and members of daemon.admin_group. */
static int admin_allowed(const struct kvmemd_config *cfg,
			 const struct ucred *cr, const gid_t *groups,
			 int ngroups)
{
	struct group *gr;
	int j;

	if (cr->uid == 0 || cr->uid == geteuid())
		return 1;
	if (!cfg->admin_group[0])
		return 0;
	gr = getgrnam(cfg->admin_group);
	if (!gr)
		return 0;
	if (cr->gid == gr->gr_gid)
		return 1;
	for (j = 0; j < ngroups; j++)
		if (groups[j] == gr->gr_gid)
			return 1;
	return 0;
}

/*
 * SO_PEERCRED, and the peer's supplementary groups when the kernel says. A
 * refusal goes to c->w, to be sent when the client has spoken.
 */
static int authorize(const struct kvmemd_config *cfg, struct conn *c, int admin)
{
	gid_t groups[64];
	socklen_t len = sizeof(c->cred);
	int ngroups = 0;

	if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &c->cred, &len)) {
		c->w.error = -errno;
		snprintf(c->w.message, sizeof(c->w.message),
			 "cannot read the peer's credentials: %s",
			 strerror(errno));
		return c->w.error;
	}
	len = sizeof(groups);
	if (!getsockopt(c->fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len))
		ngroups = (int)(len / sizeof(gid_t));
	if (admin) {
		if (admin_allowed(cfg, &c->cred, groups, ngroups))
			return 0;
		snprintf(c->w.message, sizeof(c->w.message),
			 "permission denied: uid %u is not root, kvmemd's "
			 "user or in group %s (daemon.admin_group)",
			 (unsigned int)c->cred.uid,
			 cfg->admin_group[0] ? cfg->admin_group : "(none)");
		c->w.error = -EACCES;
		return -EACCES;
	}
	c->tenant = kvmemd_prefix_tenant(cfg, c->cred.uid, c->cred.gid, groups,
					 ngroups);
	if (id_allowed(cfg, &c->cred, groups, ngroups))
		return 0;
	snprintf(c->w.message, sizeof(c->w.message),
		 "uid %u gid %u is not allowed to attach "
		 "(daemon.allow_uids, daemon.allow_gids)",
		 (unsigned int)c->cred.uid, (unsigned int)c->cred.gid);
	c->w.error = -EACCES;
	return -EACCES;
}

/* May @c, a connection still in its handshake, be closed for another? */
static int evictable(const struct conn *c, int admin)
{
	if (admin)
		return is_admin(c) && !c->waiting && c->out_off == c->out.len;
	return c->state == CONN_HELLO;
}

/* The oldest connection of @uid (any user: (uid_t)-1) that may go. */
static struct conn *oldest(struct server *sv, uid_t uid, int admin)
{
	struct conn *c, *o = NULL;

	for (c = sv->conns; c; c = c->next)
		if (evictable(c, admin) &&
		    (uid == (uid_t)-1 || c->cred.uid == uid) &&
		    (!o || c->accepted < o->accepted))
			o = c;
	return o;
}

static void evict(struct server *sv, struct conn *c, const char *why)
{
	sv->d->n.evicted++;
	if (is_admin(c)) {
		kvmemd_log_rl(&sv->log_conn, "connection refusals", LOG_NOTICE,
			      "closed an idle admin connection of uid %u: %s",
			      (unsigned int)c->cred.uid, why);
		conn_free(sv, c);
		return;
	}
	snprintf(c->w.message, sizeof(c->w.message), "%s", why);
	c->w.error = -EAGAIN;
	conn_refuse(sv, c);
}

static void on_conn(struct server *sv, struct conn *c, uint32_t events);

/* Is there a message, or the end of the stream, to read on @fd? */
static int readable(int fd)
{
	char b;

	return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) >= 0;
}

/*
 * Serve the connections in their handshake whose first message is there
 * to read: a burst of clients that connect at once is accepted before any
 * hello is read, and must not push out one that already spoke.
 */
static void serve_spoken(struct server *sv, int admin)
{
	struct conn *c, *next;

	for (c = sv->conns; c; c = next) {
		next = c->next;
		if (evictable(c, admin) && readable(c->fd))
			on_conn(sv, c, EPOLLIN);
	}
}

/*
 * Make room for one more connection of @uid in its handshake: past
 * MAX_PENDING_UID of its own, its oldest that has not spoken goes; past
 * MAX_PENDING in all, the oldest of the user that has the most. Return:
 * 0, or -EAGAIN when none can go (all are being set up).
 */
static int make_room(struct server *sv, uid_t uid, int admin)
{
	const struct kvmemd_user *u = kvmemd_user_find(sv->d, uid);
	struct conn *c = NULL;
	char why[KVMEM_MESSAGE_LEN];
	uint32_t i, most = 0;
	uid_t heavy = uid;

	if ((u && u->pending[admin] >= MAX_PENDING_UID) ||
	    sv->npending[admin] >= MAX_PENDING) {
		serve_spoken(sv, admin);
		u = kvmemd_user_find(sv->d, uid);
	}

	if (u && u->pending[admin] >= MAX_PENDING_UID) {
		c = oldest(sv, uid, admin);
		snprintf(why, sizeof(why),
			 "uid %u has %u connections waiting to attach, "
			 "the most kvmemd keeps for one user",
			 (unsigned int)uid, MAX_PENDING_UID);
	} else if (sv->npending[admin] >= MAX_PENDING) {
		for (i = 0; i < sv->d->nusers; i++)
			if (sv->d->users[i].pending[admin] > most) {
				most = sv->d->users[i].pending[admin];
				heavy = sv->d->users[i].uid;
			}
		c = oldest(sv, heavy, admin);
		if (!c)
			c = oldest(sv, (uid_t)-1, admin);
		snprintf(why, sizeof(why),
			 "%u connections waiting to attach, the most kvmemd "
			 "keeps; uid %u has the most",
			 MAX_PENDING, (unsigned int)heavy);
	} else {
		return 0;
	}
	if (!c)
		return -EAGAIN;
	evict(sv, c, why);
	return 0;
}

/* A refusal to a peer that has no connection state (yet): the welcome,
 * or nothing for an admin peer, whose replies are JSON. */
static void refuse_fd(int fd, int admin, int err, const char *why)
{
	struct conn c = { .fd = fd };

	if (!admin) {
		c.w.error = err;
		snprintf(c.w.message, sizeof(c.w.message), "%s", why);
		drain(fd);
		send_welcome(&c, NULL, 0);
	}
	close(fd);
}

/*
 * accept() found no descriptor: the connection would stay in the backlog
 * and wake the loop on every pass. Take it with the one kept in reserve,
 * tell it why, and let the socket rest before trying again.
 */
static void accept_starved(struct server *sv, int lfd, int admin, int err)
{
	uint64_t now = kvmemd_now_ns();
	struct epoll_event ev = { .events = 0,
				  .data.ptr = admin ? &sv->aw : &sv->lw };
	struct rlimit rl = { 0 };
	char why[KVMEM_MESSAGE_LEN];
	int fd;

	getrlimit(RLIMIT_NOFILE, &rl);
	snprintf(why, sizeof(why),
		 "kvmemd is out of file descriptors (%s, RLIMIT_NOFILE %llu); "
		 "try again later",
		 strerror(-err), (unsigned long long)rl.rlim_cur);
	sv->d->n.accept_errors++;
	kvmemd_log_rl(&sv->log_accept, "accept errors", LOG_WARNING,
		      "accept on the %s socket: %s; refusing connections for "
		      "%llu ms (%llu refused so far)",
		      admin ? "admin" : "client", why,
		      (unsigned long long)(sv->accept_backoff / 1000000),
		      (unsigned long long)sv->d->n.accept_errors);
	if (sv->reserve_fd >= 0) {
		close(sv->reserve_fd);
		fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd >= 0)
			refuse_fd(fd, admin, err, why);
		sv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	}
	sv->accept_rest[admin] = now + sv->accept_backoff;
	sv->accept_backoff = sv->accept_backoff * 2 < ACCEPT_BACKOFF_MAX_NS
				     ? sv->accept_backoff * 2
				     : ACCEPT_BACKOFF_MAX_NS;
	epoll_ctl(sv->ep, EPOLL_CTL_MOD, lfd, &ev);
}

/* Watch the listening sockets again once their rest is over. */
static void accept_wake(struct server *sv, uint64_t now)
{
	int admin;

	for (admin = 0; admin < 2; admin++) {
		struct epoll_event ev = {
			.events = EPOLLIN,
			.data.ptr = admin ? &sv->aw : &sv->lw,
		};

		if (!sv->accept_rest[admin] || now < sv->accept_rest[admin])
			continue;
		sv->accept_rest[admin] = 0;
		epoll_ctl(sv->ep, EPOLL_CTL_MOD, admin ? sv->afd : sv->lfd,
			  &ev);
	}
}

static void on_accept(struct server *sv, int lfd, int admin)
{
	struct kvmemd_user *u;
	struct conn *c;
	int fd;

	for (;;) {
		fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE ||
			    errno == ENOBUFS || errno == ENOMEM)
				accept_starved(sv, lfd, admin, -errno);
			else if (errno != EAGAIN && errno != EINTR &&
				 errno != ECONNABORTED)
				kvmemd_log_rl(&sv->log_accept, "accept errors",
					      LOG_WARNING, "accept: %s",
					      strerror(errno));
			return;
		}
		sv->accept_backoff = ACCEPT_BACKOFF_NS;
		c = calloc(1, sizeof(*c));
		if (!c) {
			refuse_fd(fd, admin, -ENOMEM, "kvmemd: out of memory");
			continue;
		}
		c->fd = fd;
		c->sv = sv;
		c->state = admin ? CONN_ADMIN : CONN_HELLO;
		c->accepted = kvmemd_now_ns();
		c->deadline = c->accepted + HELLO_TIMEOUT_NS;
		c->sock_w.type = W_CONN;
		c->sock_w.conn = c;
		/* A refused client hears why after its request: closing with
		 * the request unread would reset the connection instead. */
		authorize(&sv->d->cfg, c, admin);
		if (make_room(sv, c->cred.uid, admin) ||
		    !(u = kvmemd_user(sv->d, c->cred.uid))) {
			refuse_fd(fd, admin, -EAGAIN,
				  "kvmemd has no room for another connection "
				  "waiting to attach; try again");
			free(c);
			continue;
		}
		u->pending[admin]++;
		sv->npending[admin]++;
		conn_link(sv, c);
		if (watch_add(sv, fd, EPOLLIN | EPOLLRDHUP, &c->sock_w))
			conn_free(sv, c);
	}
}

static void setup_work(struct kvmemd_work *w)
{
	struct conn *c = (struct conn *)w;

	c->setup_ret = kvmemd_session_setup(c->s, c->why, sizeof(c->why));
}

static void on_setup_done(struct server *sv, struct conn *c);

static void on_hello(struct server *sv, struct conn *c)
{
	struct kvmem_hello h;
	ssize_t n;
	int ret;

	/* One byte more than a hello, to see a longer message; recv() takes
	 * no ancillary data, so descriptors a client sends are closed. */
	n = recv(c->fd, &h, sizeof(h), MSG_TRUNC | MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		conn_free(sv, c);
		return;
	}
	if ((size_t)n == sizeof(h) && h.magic == KVMEM_HELLO_MAGIC)
		c->abi = h.abi_version;
	if (c->w.error) {
		conn_refuse(sv, c);
		return;
	}
	if ((size_t)n != sizeof(h)) {
		snprintf(c->w.message, sizeof(c->w.message),
			 "hello of %zd bytes, expected %zu", n, sizeof(h));
		c->w.error = -EPROTO;
		conn_refuse(sv, c);
		return;
	}
	if (h.resume_session || h.resume_token) {
		/* A session kept across a restart: set up already. */
		if (kvmemd_resume_take(sv->d, &h, c->cred.uid, c->tenant,
				       c->cred.pid, &c->w, &c->s)) {
			conn_refuse(sv, c);
			return;
		}
		pending_put(sv, c);
		c->state = CONN_SETUP;
		c->setup_ret = 0;
		on_setup_done(sv, c);
		return;
	}
	ret = kvmemd_session_new(sv->d, &h, c->cred.uid, c->tenant,
				 c->cred.pid, &c->w, &c->s);
	if (ret) {
		conn_refuse(sv, c);
		return;
	}
	c->work.fn = setup_work;
	if (kvmemd_workers_queue(sv->workers, &c->work)) {
		snprintf(c->w.message, sizeof(c->w.message),
			 "kvmemd is busy setting up other sessions, retry");
		c->w.error = -EAGAIN;
		conn_refuse(sv, c);
		return;
	}
	/* It spoke: its memory is set up on a worker, whose queue bounds
	 * how many wait for that. */
	pending_put(sv, c);
	c->state = CONN_SETUP;
	status_update(sv);
}

static void on_setup_done(struct server *sv, struct conn *c)
{
	int fds[4], nfds;

	if (c->hung_up) {
		conn_free(sv, c);
		return;
	}
	if (c->setup_ret) {
		snprintf(c->w.message, sizeof(c->w.message), "%s", c->why);
		c->w.error = c->setup_ret;
		conn_refuse(sv, c);
		return;
	}
	kvmemd_session_welcome(c->s, &c->w);
	nfds = kvmemd_session_fds(c->s, fds);
	/* A session taken back after a restart is mapped by its client
	 * already: what it holds is freed with it, as when it hangs up. */
	if (send_welcome(c, fds, nfds)) {
		kvmemd_session_discard(c->s);
		conn_free(sv, c);
		return;
	}
	kvmemd_resume_track(c->s);
	c->bell_w.type = W_DOORBELL;
	c->bell_w.conn = c;
	if (watch_add(sv, kvmemd_session_sq_efd(c->s), EPOLLIN, &c->bell_w)) {
		kvmemd_session_discard(c->s);
		conn_free(sv, c);
		return;
	}
	c->state = CONN_ACTIVE;
	kvmemd_session_activate(c->s);
	sv->d->n.attached++;
	/* A polling loop spares the new client its doorbell too. */
	if (sv->polling)
		kvmemd_session_need_wakeup(c->s, 0);
	kvmemd_log_rl(&sv->log_session, "attaches and detaches", LOG_INFO,
		      "session %u: pid %d uid %u, %llu MiB arena, %u/%u ring",
		      kvmemd_session_id(c->s), (int)c->cred.pid,
		      (unsigned int)c->cred.uid,
		      (unsigned long long)(c->w.arena_bytes >> 20),
		      c->w.sq_entries, c->w.cq_entries);
}

/*
 * What an admin connection waits for: a request (and its hang-up), room to
 * send, or nothing but an error. A half-closed peer is noticed only when
 * reading: it stays readable, and a watch for it while sending would fire
 * on every pass.
 */
static void admin_watch(struct server *sv, struct conn *c, uint32_t events)
{
	struct epoll_event ev = { .events = events & EPOLLIN
						    ? events | EPOLLRDHUP
						    : events,
				  .data.ptr = &c->sock_w };

	if (epoll_ctl(sv->ep, EPOLL_CTL_MOD, c->fd, &ev))
		conn_free(sv, c);
}

/* Send what is left of the reply, up to 32 KiB a datagram. */
static void admin_flush(struct server *sv, struct conn *c)
{
	size_t n;
	ssize_t sent;

	while (c->out_off < c->out.len) {
		n = c->out.len - c->out_off;
		if (n > ADMIN_CHUNK)
			n = ADMIN_CHUNK;
		sent = send(c->fd, c->out.buf + c->out_off, n,
			    MSG_NOSIGNAL | MSG_DONTWAIT);
		if (sent < 0 && errno == EINTR)
			continue;
		if (sent < 0 && (errno == EAGAIN || errno == ENOBUFS)) {
			/* A reader that keeps reading keeps its reply. */
			c->deadline = kvmemd_now_ns() + HELLO_TIMEOUT_NS;
			admin_watch(sv, c, EPOLLOUT);
			return;
		}
		if (sent < 0) {
			conn_free(sv, c);
			return;
		}
		c->out_off += (size_t)sent;
	}
	jw_reset(&c->out);
	c->out_off = 0;
	c->deadline = kvmemd_now_ns() + HELLO_TIMEOUT_NS;
	admin_watch(sv, c, EPOLLIN);
}

static void admin_send(struct server *sv, struct conn *c)
{
	if (jw_failed(&c->out))
		kvmemd_admin_error(&c->out, -ENOMEM, "out of memory");
	c->out_off = 0;
	admin_flush(sv, c);
}

/* The reply to a request that waited (struct kvmemd_waiter). */
static void admin_reply(struct kvmemd_waiter *wt, struct jw *reply)
{
	struct conn *c = (struct conn *)((char *)wt - offsetof(struct conn,
							       waiter));

	c->waiting = 0;
	jw_reset(&c->out);
	jw_raw(&c->out, NULL, reply->buf ? reply->buf : "");
	admin_send(c->sv, c);
}

/* One request in, one JSON reply out; a refused peer hears why, once. */
static void on_admin(struct server *sv, struct conn *c)
{
	char req[ADMIN_REQ_MAX + 1];
	ssize_t n;

	n = recv(c->fd, req, sizeof(req), MSG_DONTWAIT | MSG_TRUNC);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		conn_free(sv, c);
		return;
	}
	if (c->w.error) {
		kvmemd_admin_error(&c->out, c->w.error, "%s", c->w.message);
		admin_send(sv, c);
		if (!c->dead) {
			shutdown(c->fd, SHUT_RD);
			c->deadline = kvmemd_now_ns();
		}
		return;
	}
	if (n > ADMIN_REQ_MAX) {
		kvmemd_admin_error(&c->out, -EMSGSIZE,
				   "request longer than %d bytes",
				   ADMIN_REQ_MAX);
		admin_send(sv, c);
		return;
	}
	req[n] = 0;
	if (memchr(req, 0, (size_t)n)) {
		kvmemd_admin_error(&c->out, -EINVAL, "NUL byte in request");
		admin_send(sv, c);
		return;
	}
	c->waiter.reply = admin_reply;
	if (kvmemd_admin(sv->d, req, &c->waiter, &c->out)) {
		/* Nothing more is read until the reply is out. */
		c->waiting = 1;
		c->deadline = UINT64_MAX;
		admin_watch(sv, c, 0);
		return;
	}
	admin_send(sv, c);
}

static void on_conn(struct server *sv, struct conn *c, uint32_t events)
{
	switch (c->state) {
	case CONN_HELLO:
		if (events & EPOLLIN)
			on_hello(sv, c);
		else
			conn_free(sv, c);
		break;
	case CONN_SETUP:
		/* An event of the hello itself, read since by serve_spoken()
		 * in the same pass, is no news. */
		if (!(events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) &&
		    !readable(c->fd))
			break;
		/* A client says nothing until its welcome: data or a hang-up
		 * ends it when the worker is done. Stop watching, or the
		 * level-triggered event comes back on every pass until then. */
		epoll_ctl(sv->ep, EPOLL_CTL_DEL, c->fd, NULL);
		conn_drop(sv, c, NULL);
		break;
	case CONN_ACTIVE:
		/* After the welcome a client says nothing: data is a protocol
		 * violation, a hang-up its exit. */
		conn_drop(sv, c,
			  events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)
				  ? NULL
				  : "sent data on the control socket");
		break;
	case CONN_ADMIN:
		if (events & (EPOLLHUP | EPOLLERR))
			conn_free(sv, c);
		else if (events & EPOLLOUT)
			admin_flush(sv, c);
		else if (events & EPOLLIN)
			on_admin(sv, c);
		else if (!c->waiting && c->out_off == c->out.len)
			conn_free(sv, c);
		break;
	}
}

/* ---- rings ------------------------------------------------------------ */

/* SQEs one pass takes from one session: no client holds the loop long. */
#define PASS_BUDGET 256

/* Serve one session's ring; 1 when it had work. */
static int serve(struct server *sv, struct conn *c)
{
	char why[128];
	int n = kvmemd_session_run(c->s, PASS_BUDGET);

	if (n < 0) {
		snprintf(why, sizeof(why), "broke the ring protocol: %s",
			 kvmemd_session_broken(c->s));
		conn_drop(sv, c, why);
		return 0;
	}
	return n > 0;
}

/* Poll the rings, and let every client skip its doorbell meanwhile. */
static void start_polling(struct server *sv)
{
	struct conn *o;

	if (!sv->polling)
		for (o = sv->conns; o; o = o->next)
			if (o->state == CONN_ACTIVE)
				kvmemd_session_need_wakeup(o->s, 0);
	sv->polling = 1;
	sv->last_busy = kvmemd_now_ns();
}

static void on_doorbell(struct server *sv, struct conn *c)
{
	eventfd_t v;
	int busy;

	if (eventfd_read(kvmemd_session_sq_efd(c->s), &v))
		return;
	busy = serve(sv, c);
	if (c->dead)
		return;
	/* More than one pass of SQEs waits even when polling is off. */
	if ((busy && sv->d->cfg.poll_idle_us) || kvmemd_session_pending(c->s))
		start_polling(sv);
}

static void poll_rings(struct server *sv)
{
	struct conn *c, *next;
	int busy = 0;

	for (c = sv->conns; c; c = next) {
		next = c->next;
		if (c->state == CONN_ACTIVE && kvmemd_session_pending(c->s))
			busy |= serve(sv, c);
	}
	if (busy) {
		sv->last_busy = kvmemd_now_ns();
		return;
	}
	if (kvmemd_now_ns() - sv->last_busy < sv->d->cfg.poll_idle_us * 1000ull)
		return;
	/* Idle: ask for doorbells, then look once more, so an SQE published
	 * before a client saw the flag is not left behind. */
	for (c = sv->conns; c; c = c->next)
		if (c->state == CONN_ACTIVE)
			kvmemd_session_need_wakeup(c->s, 1);
	for (c = sv->conns; c; c = c->next) {
		if (c->state == CONN_ACTIVE && kvmemd_session_pending(c->s)) {
			for (c = sv->conns; c; c = c->next)
				if (c->state == CONN_ACTIVE)
					kvmemd_session_need_wakeup(c->s, 0);
			sv->last_busy = kvmemd_now_ns();
			return;
		}
	}
	sv->polling = 0;
}

/* ---- sockets ---------------------------------------------------------- */

/* mkdir -p for the socket's directory. */
static int make_parent(const char *path, mode_t mode)
{
	char dir[256];
	char *p;

	if (snprintf(dir, sizeof(dir), "%s", path) >= (int)sizeof(dir))
		return -ENAMETOOLONG;
	p = strrchr(dir, '/');
	if (!p || p == dir)
		return 0;
	*p = 0;
	for (p = dir + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(dir, mode) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(dir, mode) && errno != EEXIST)
		return -errno;
	return 0;
}

/* Bind @path for @group ("" leaves the socket's group as created). */
static int listen_on(const char *path, const char *group)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	mode_t old;
	int fd, ret;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	ret = make_parent(path, 0755);
	if (ret) {
		kvmemd_log_err(LOG_ERR, ret,
			       "cannot create the directory of %s", path);
		return ret;
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* A socket file nobody answers on is left over from a crash. */
	if (!connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		kvmemd_log(LOG_ERR, "%s: another kvmemd is listening there",
			   path);
		close(fd);
		return -EADDRINUSE;
	}
	close(fd);
	unlink(path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	old = umask(0117);
	ret = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ? -errno : 0;
	umask(old);
	if (!ret && group[0]) {
		struct group *gr = getgrnam(group);

		if (!gr || chown(path, (uid_t)-1, gr->gr_gid))
			kvmemd_log(LOG_WARNING,
				   "%s: cannot give it to group %s", path,
				   group);
	}
	if (!ret && listen(fd, 128))
		ret = -errno;
	if (ret) {
		kvmemd_log_err(LOG_ERR, ret, "%s", path);
		close(fd);
		return ret;
	}
	return fd;
}

/* Sockets systemd passed (kvmemd.socket): "admin" names the admin one;
 * and from its descriptor store, the memfds of kept sessions (resume.c)
 * and of kept prefix blocks (prefix-save.c). */
static void activated_sockets(struct server *sv)
{
	char **names = NULL;
	int n, i, fd, ret;

	n = sd_listen_fds_with_names(1, &names);
	for (i = 0; i < n; i++) {
		fd = SD_LISTEN_FDS_START + i;
		if (names && names[i] &&
		    (kvmemd_prefix_save_fd(sv->d, names[i], fd) ||
		     kvmemd_resume_fd(sv->d, names[i], fd)))
			continue;
		ret = sd_is_socket_unix(fd, SOCK_SEQPACKET, 1, NULL, 0);
		if (ret <= 0 || fcntl(fd, F_SETFL, O_NONBLOCK)) {
			kvmemd_log(LOG_WARNING,
				   "passed fd %d is not a listening AF_UNIX "
				   "SOCK_SEQPACKET socket (%d), ignored",
				   fd, ret);
			close(fd);
		} else if (names && names[i] && !strcmp(names[i], "admin")) {
			sv->afd = fd;
		} else {
			sv->lfd = fd;
		}
	}
	if (names)
		for (i = 0; names[i]; i++)
			free(names[i]);
	free(names);
}

/* ---- the loop --------------------------------------------------------- */

static int timeout_ms(struct server *sv)
{
	uint64_t now = kvmemd_now_ns(), next = UINT64_MAX;
	struct conn *c;
	int i;

	if (sv->polling)
		return 0;
	for (c = sv->conns; c; c = c->next)
		if ((c->state == CONN_HELLO || c->state == CONN_ADMIN) &&
		    c->deadline < next)
			next = c->deadline;
	if (sv->watchdog_usec && sv->next_watchdog < next)
		next = sv->next_watchdog;
	for (i = 0; i < 2; i++)
		if (sv->accept_rest[i] && sv->accept_rest[i] < next)
			next = sv->accept_rest[i];
	if (sv->scrub_next < next)
		next = sv->scrub_next;
	if (sv->tier_next < next)
		next = sv->tier_next;
	if (sv->prefix_next < next)
		next = sv->prefix_next;
	if (sv->resume_next < next)
		next = sv->resume_next;
	if (next == UINT64_MAX)
		return -1;
	if (next <= now)
		return 0;
	return (int)((next - now + 999999) / 1000000);
}

static void timers(struct server *sv)
{
	uint64_t now = kvmemd_now_ns();
	struct conn *c, *next;

	for (c = sv->conns; c; c = next) {
		next = c->next;
		if (c->deadline > now)
			continue;
		if (c->state == CONN_HELLO) {
			snprintf(c->w.message, sizeof(c->w.message),
				 "no hello within %llu s",
				 HELLO_TIMEOUT_NS / 1000000000ull);
			c->w.error = -ETIMEDOUT;
			conn_refuse(sv, c);
		} else if (c->state == CONN_ADMIN) {
			conn_free(sv, c);
		}
	}
	accept_wake(sv, now);
	kvmemd_rl_flush(&sv->log_conn, KVMEMD_RL_WINDOW_NS,
			"connection refusals");
	kvmemd_rl_flush(&sv->log_drop, KVMEMD_RL_WINDOW_NS, "session drops");
	kvmemd_rl_flush(&sv->log_accept, KVMEMD_RL_WINDOW_NS, "accept errors");
	kvmemd_rl_flush(&sv->log_session, KVMEMD_RL_WINDOW_NS,
			"attaches and detaches");
	if (sv->watchdog_usec && now >= sv->next_watchdog) {
		kvmemd_notify("WATCHDOG=1", 0);
		sv->next_watchdog = now + sv->watchdog_usec * 500ull;
	}
}

/*
 * SIGHUP: read everything again, keep only the policy keys, and take them
 * only when the result still passes the checks across keys.
 */
static void reload(struct server *sv)
{
	struct kvmemd *d = sv->d;
	struct kvmemd_config fresh, merged;
	char err[1024];

	kvmemd_notify("RELOADING=1", KVMEMD_NOTIFY_WAIT_MS);
	merged = d->cfg;
	if (!kvmemd_config_build(d, &fresh, err, sizeof(err))) {
		kvmemd_config_reload(&merged, &fresh);
		if (!kvmemd_config_check(&merged, err, sizeof(err)) &&
		    !kvmemd_fd_check(&merged, 1, err, sizeof(err))) {
			kvmemd_config_apply(d, &merged);
			kvmemd_log(LOG_INFO, "configuration reloaded");
			kvmemd_notify("READY=1", KVMEMD_NOTIFY_WAIT_MS);
			return;
		}
	}
	kvmemd_log(LOG_ERR, "reload: %s; keeping the old configuration", err);
	kvmemd_notify("READY=1", KVMEMD_NOTIFY_WAIT_MS);
}

static void handle(struct server *sv, struct epoll_event *ev)
{
	struct watch *w = ev->data.ptr;
	struct kvmemd_work *work;

	if (w->conn && w->conn->dead)
		return;
	switch (w->type) {
	case W_LISTEN:
		on_accept(sv, sv->lfd, 0);
		break;
	case W_ADMIN_LISTEN:
		on_accept(sv, sv->afd, 1);
		break;
	case W_CONN:
		on_conn(sv, w->conn, ev->events);
		break;
	case W_DOORBELL:
		on_doorbell(sv, w->conn);
		break;
	case W_WORKERS:
		while ((work = kvmemd_workers_reap(sv->workers))) {
			if (work->done)
				work->done(work);
			else
				on_setup_done(sv, (struct conn *)work);
		}
		break;
	case W_STORE:
		kvmemd_tier_reap(sv->d);
		break;
	case W_REMOTE:
		kvmemd_remote_reap(sv->d);
		break;
	case W_SIGNAL:
		take_signals(sv);
		break;
	}
}

/* Take what clients already submitted, tell them, let them go. */
static void shut_down(struct server *sv)
{
	static const struct kvmem_notice notice = {
		.magic = KVMEM_NOTICE_MAGIC,
		.type = KVMEM_NOTICE_SHUTDOWN,
	};
	struct kvmemd_keep *keep;
	struct kvmemd_work *work;
	struct conn *c;

	kvmemd_notify("STOPPING=1", 0);
	kvmemd_log(LOG_INFO, "stopping");
	if (sv->lfd >= 0)
		close(sv->lfd);
	if (sv->afd >= 0)
		close(sv->afd);
	if (sv->own_lfd)
		unlink(sv->d->cfg.socket);
	if (sv->own_afd)
		unlink(sv->d->cfg.admin_socket);
	kvmemd_workers_stop(sv->workers);
	while ((work = kvmemd_workers_reap(sv->workers))) {
		if (work->done) {
			work->done(work);
			continue;
		}
		c = (struct conn *)work;
		c->hung_up = 1;
		on_setup_done(sv, c);
	}
	/* Fetches that finished complete their ops before sessions stop. */
	kvmemd_remote_free(sv->d);
	keep = kvmemd_resume_begin(sv->d);
	while ((c = sv->conns)) {
		if (c->state == CONN_ACTIVE) {
			kvmemd_session_run(c->s, UINT32_MAX);
			kvmemd_resume_keep(keep, c->s);
			kvmemd_session_shutdown(c->s);
			send(c->fd, &notice, sizeof(notice),
			     MSG_NOSIGNAL | MSG_DONTWAIT);
		}
		conn_free(sv, c);
	}
	kvmemd_resume_end(keep);
	kvmemd_resume_exit(sv->d);
	/* The blocks stay in the store: the index says what they are. */
	kvmemd_prefix_save_flush(sv->d);
	kvmemd_prefix_disk_flush(sv->d);
	kvmemd_workers_free(sv->workers);
	sv->d->workers = NULL;
	kvmemd_tier_exit(sv->d);
	kvmemd_prefix_exit(sv->d);
	kvmemd_ras_exit(sv->d);
	kvmemd_gpu_close(sv->d);
	close(sv->ep);
	close(sv->sfd);
	if (sv->reserve_fd >= 0)
		close(sv->reserve_fd);
	close(sv->state_fd);
}

/*
 * The state directory is this daemon's alone: a second one with the same
 * directory (under other sockets) would overwrite the counters and events.
 */
static int lock_state(struct server *sv)
{
	const char *dir = sv->d->cfg.state_dir;
	int ret;

	sv->state_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sv->state_fd < 0) {
		ret = -errno;
		kvmemd_log_err(LOG_ERR, ret, "state directory %s", dir);
		return ret;
	}
	if (!flock(sv->state_fd, LOCK_EX | LOCK_NB))
		return 0;
	ret = errno == EWOULDBLOCK ? -EBUSY : -errno;
	if (ret == -EBUSY)
		kvmemd_log(LOG_ERR,
			   "state directory %s is in use by another kvmemd "
			   "(it holds the lock on it)",
			   dir);
	else
		kvmemd_log_err(LOG_ERR, ret, "locking state directory %s", dir);
	return ret;
}

static int start(struct server *sv)
{
	const struct kvmemd_config *cfg = &sv->d->cfg;

	char err[256];
	int ret;

	ret = kvmemd_fd_check(cfg, 1, err, sizeof(err));
	if (ret) {
		kvmemd_log(LOG_ERR, "%s", err);
		return ret;
	}
	sv->ep = epoll_create1(EPOLL_CLOEXEC);
	if (sv->ep < 0)
		return -errno;
	/* Kept to take a connection off the backlog when accept() runs out
	 * of descriptors (accept_starved()). */
	sv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	ret = kvmemd_workers_start(cfg->threads, cfg->queue_depth,
				   &sv->workers);
	if (ret) {
		kvmemd_log_err(LOG_ERR, ret, "worker threads");
		return ret;
	}
	sv->d->workers = sv->workers;
	sv->ww.type = W_WORKERS;
	ret = watch_add(sv, kvmemd_workers_fd(sv->workers), EPOLLIN, &sv->ww);
	if (ret)
		return ret;
	sv->gw.type = W_SIGNAL;
	ret = watch_add(sv, sv->sfd, EPOLLIN, &sv->gw);
	if (ret)
		return ret;
	ret = make_parent(cfg->state_dir, 0750);
	if (!ret && mkdir(cfg->state_dir, 0750) && errno != EEXIST)
		ret = -errno;
	if (ret) {
		kvmemd_log_err(LOG_ERR, ret, "state directory %s",
			       cfg->state_dir);
		return ret;
	}
	ret = lock_state(sv);
	if (ret)
		return ret;
	/* Before the state and the store are touched: a second daemon on
	 * the same sockets stops here, having written nothing. */
	activated_sockets(sv);
	if (sv->lfd < 0) {
		sv->lfd = listen_on(cfg->socket, cfg->group);
		if (sv->lfd < 0)
			return sv->lfd;
		sv->own_lfd = 1;
	}
	if (sv->afd < 0) {
		/* Admins are those of the admin group, not the clients. */
		sv->afd = listen_on(cfg->admin_socket,
				    cfg->admin_group[0] ? cfg->admin_group
							: cfg->group);
		if (sv->afd < 0)
			return sv->afd;
		sv->own_afd = 1;
	}
	ret = kvmemd_ras_init(sv->d);
	if (ret) {
		kvmemd_log_err(LOG_ERR, ret, "error accounting");
		return ret;
	}
	ret = kvmemd_tier_init(sv->d);
	if (ret)
		return ret;
	ret = kvmemd_prefix_init(sv->d);
	if (ret)
		return ret;
	ret = kvmemd_remote_init(sv->d);
	if (ret)
		return ret;
	if (kvmemd_remote_fd(sv->d) >= 0) {
		sv->rw.type = W_REMOTE;
		ret = watch_add(sv, kvmemd_remote_fd(sv->d), EPOLLIN, &sv->rw);
		if (ret)
			return ret;
	}
	kvmemd_gpu_open(sv->d);
	kvmemd_resume_load(sv->d);
	kvmemd_prefix_save_load(sv->d);
	kvmemd_prefix_disk_load(sv->d, kvmemd_tier_store(sv->d));
	if (kvmemd_tier_fd(sv->d) >= 0) {
		sv->sw.type = W_STORE;
		ret = watch_add(sv, kvmemd_tier_fd(sv->d), EPOLLIN, &sv->sw);
		if (ret)
			return ret;
	}
	sv->lw.type = W_LISTEN;
	sv->aw.type = W_ADMIN_LISTEN;
	ret = watch_add(sv, sv->lfd, EPOLLIN, &sv->lw);
	if (!ret)
		ret = watch_add(sv, sv->afd, EPOLLIN, &sv->aw);
	return ret;
}

/* Descriptors besides those of sessions and pending connections: stdio,
 * epoll, the listening sockets, eventfds, state files, the store. */
#define FD_BASE 32
/* A session's: its socket, memfd, two eventfds and GPU memory, and a
 * pidfd while its process holds that after it ended. */
#define FDS_PER_SESSION 6

int kvmemd_fd_check(const struct kvmemd_config *c, int raise, char *err,
		    size_t errlen)
{
	const rlim_t need = FD_BASE +
			    (rlim_t)FDS_PER_SESSION * c->max_sessions +
			    2 * MAX_PENDING;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl)) {
		snprintf(err, errlen, "getrlimit: %s", strerror(errno));
		return -errno;
	}
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur >= need)
		return 0;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
		snprintf(err, errlen,
			 "daemon.max_sessions = %u needs %llu file "
			 "descriptors, RLIMIT_NOFILE allows %llu (raise "
			 "LimitNOFILE= or ulimit -n, or lower "
			 "daemon.max_sessions)",
			 c->max_sessions, (unsigned long long)need,
			 (unsigned long long)rl.rlim_max);
		return -EMFILE;
	}
	if (!raise || rl.rlim_cur == RLIM_INFINITY)
		return 0;
	rl.rlim_cur = need;
	if (setrlimit(RLIMIT_NOFILE, &rl)) {
		snprintf(err, errlen, "setrlimit(RLIMIT_NOFILE, %llu): %s",
			 (unsigned long long)need, strerror(errno));
		return -errno;
	}
	return 0;
}

int kvmemd_run(struct kvmemd *d)
{
	struct server sv = { .d = d,
			     .lfd = -1,
			     .afd = -1,
			     .ep = -1,
			     .reserve_fd = -1,
			     .sfd = -1,
			     .state_fd = -1,
			     .accept_backoff = ACCEPT_BACKOFF_NS };
	struct epoll_event ev[MAX_EVENTS];
	struct kvmemd_work *work;
	sigset_t block;
	int i, n, ret;

	/* Blocked in every thread (the workers inherit the mask), and taken
	 * from a signalfd by the loop alone. */
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGHUP);
	sigprocmask(SIG_BLOCK, &block, NULL);
	signal(SIGPIPE, SIG_IGN);
	sv.sfd = signalfd(-1, &block, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sv.sfd < 0) {
		ret = -errno;
		kvmemd_log_err(LOG_ERR, ret, "signalfd");
		return ret;
	}

	d->start_mono = kvmemd_now_ns();
	/* Before start(): kept sessions may need it. */
	kvmemd_notify_open();
	ret = start(&sv);
	if (ret) {
		if (sv.own_lfd)
			unlink(d->cfg.socket);
		if (sv.own_afd)
			unlink(d->cfg.admin_socket);
		if (sv.lfd >= 0)
			close(sv.lfd);
		if (sv.afd >= 0)
			close(sv.afd);
		if (sv.state_fd >= 0)
			close(sv.state_fd);
		kvmemd_resume_exit(d);
		kvmemd_remote_free(d);
		/* Work the start queued (blocks going to the store) ends
		 * as it would have: its buffers are freed there. */
		kvmemd_workers_stop(sv.workers);
		while (sv.workers && (work = kvmemd_workers_reap(sv.workers)))
			if (work->done)
				work->done(work);
		kvmemd_workers_free(sv.workers);
		kvmemd_tier_exit(d);
		kvmemd_prefix_exit(d);
		kvmemd_ras_exit(d);
		kvmemd_gpu_close(d);
		if (sv.ep >= 0)
			close(sv.ep);
		close(sv.sfd);
		if (sv.reserve_fd >= 0)
			close(sv.reserve_fd);
		return ret;
	}
	kvmemd_resume_commit(d);
	kvmemd_prefix_save_commit(d);
	if (sd_watchdog_enabled(0, &sv.watchdog_usec) <= 0)
		sv.watchdog_usec = 0;
	kvmemd_log(LOG_INFO, "serving on %s (admin %s), host pool %llu MiB",
		   sv.own_lfd ? d->cfg.socket : "the socket systemd passed",
		   sv.own_afd ? d->cfg.admin_socket : "passed by systemd",
		   (unsigned long long)(d->cfg.host_bytes >> 20));
	kvmemd_notify("READY=1", KVMEMD_NOTIFY_WAIT_MS);
	status_update(&sv);

	while (!sv.stop) {
		/* While polling, the rings come first: look at the sockets
		 * (and take signals) every POLL_PASSES passes. */
		n = 0;
		if (!sv.polling || ++sv.polls % POLL_PASSES == 0) {
			n = epoll_wait(sv.ep, ev, MAX_EVENTS, timeout_ms(&sv));
			if (n < 0 && errno != EINTR) {
				kvmemd_log_err(LOG_ERR, -errno, "epoll_wait");
				break;
			}
			take_signals(&sv);
		}
		if (sv.stop)
			break;
		if (sv.reload) {
			sv.reload = 0;
			reload(&sv);
		}
		for (i = 0; i < n; i++)
			handle(&sv, &ev[i]);
		if (sv.polling)
			poll_rings(&sv);
		sv.scrub_next = kvmemd_ras_run(d, kvmemd_now_ns());
		sv.tier_next = kvmemd_tier_run(d, kvmemd_now_ns());
		sv.prefix_next = kvmemd_prefix_run(d, kvmemd_now_ns());
		sv.resume_next = kvmemd_resume_run(d, kvmemd_now_ns());
		kvmemd_resume_record(d);
		timers(&sv);
		status_update(&sv);
		reap_zombies(&sv);
	}
	shut_down(&sv);
	reap_zombies(&sv);
	kvmemd_policy_free(d);
	kvmemd_users_free(d);
	return 0;
}
