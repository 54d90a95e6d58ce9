/* SPDX-License-Identifier: MIT */
/*
 * ctl-http.c - kvmemctl metrics --http: the exposition served over HTTP
 *
 * Prometheus's HTTP/1.x on standard input, as a socket unit hands it over.
 * A listening socket (kvmem-exporter.socket, Accept=no) is served until
 * SIGTERM; a connection (inetd style) gets its one answer on standard
 * output. GET or HEAD of /metrics, the request and its headers in at most
 * HTTP_MAX bytes.
 *
 * A peer has the timeout (--http-timeout, else HTTP_TIMEOUT_MS) from its
 * accept to send its whole request, however it trickles it in, and as long
 * again to take the answer; then it is closed, an unfinished request with
 * 408. One poll() loop serves every connection, each in a slot of its own,
 * so a silent or slow peer holds up nobody but itself. At most HTTP_CONNS
 * are open: past that, a new one makes the oldest of the address with the
 * most go (one that has not sent its request first, with 503), so idle
 * connections cannot keep a scraper out, nor one address another.
 *
 * kvmemd is asked at most once in HTTP_FRESH_MS, and the answers of that
 * time share its exposition: a flood of requests neither loads kvmemd nor
 * makes a copy of the exposition for each peer slow to take it.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ctl-http.h"
#include "ctl-metrics.h"
#include "ctl.h"

#define HTTP_MAX 8192
#define HTTP_CONNS 128
#define HTTP_FRESH_MS 1000

/* kvmemd's exposition, or why there is none; shared, counted. */
struct http_expo {
	int refs;
	int ret; /* metrics_text()'s */
	uint64_t made; /* now_ms() */
	size_t len;
	char *text;
};

enum http_state {
	HTTP_FREE,
	HTTP_READING, /* the request, into in */
	HTTP_WRITING, /* the answer: its head in in, its body in body */
};

struct http_conn {
	enum http_state state;
	int fd;
	uint64_t seq; /* accepts before it: the oldest has the least */
	uint64_t deadline; /* of the state it is in, now_ms() */
	struct sockaddr_storage peer;
	struct http_expo *body; /* NULL: none past the head */
	size_t in_len; /* the request's, then the answer head's */
	size_t out_off; /* of the head and body, sent */
	char in[HTTP_MAX];
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void http_expo_put(struct http_expo *e)
{
	if (e && !--e->refs) {
		free(e->text);
		free(e);
	}
}

/*
 * kvmemd's exposition: *@fresh while it is younger than HTTP_FRESH_MS,
 * else a new one put there. NULL when out of memory.
 */
static struct http_expo *http_expo_get(struct ctl *c, struct http_expo **fresh)
{
	uint64_t now = now_ms();
	struct http_expo *e = *fresh;

	if (e && now - e->made < HTTP_FRESH_MS)
		return e;
	e = calloc(1, sizeof(*e));
	if (!e) {
		ctl_errx("out of memory");
		return NULL;
	}
	e->refs = 1;
	e->made = now;
	e->ret = metrics_text(c, &e->text, &e->len);
	/* A fresh connection each time: kvmemd closes idle ones. */
	ctl_close(c);
	http_expo_put(*fresh);
	*fresh = e;
	return e;
}

/*
 * @h's answer, the request it replaces: status line and headers in in,
 * and, unless @head, @e's text as its body (or the error's text).
 */
static void http_reply(struct http_conn *h, int status, const char *reason,
		       const char *extra, struct http_expo *e, bool head)
{
	const char *type = e ? "text/plain; version=0.0.4; charset=utf-8"
			     : "text/plain; charset=utf-8";
	char body[64] = "";
	int n, blen = 0;

	if (!e)
		blen = snprintf(body, sizeof(body), "%d %s\n", status, reason);
	n = snprintf(h->in, sizeof(h->in),
		     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
		     "Content-Length: %zu\r\nConnection: close\r\n%s\r\n%s",
		     status, reason, type, e ? e->len : (size_t)blen, extra,
		     head ? "" : body);
	h->in_len = (size_t)n;
	h->out_off = 0;
	if (e && !head) {
		e->refs++;
		h->body = e;
	}
}

/*
 * One read of @h's request: 0 when its head is complete, -EAGAIN when
 * more is to come, else the status to answer. Only the bytes new in it
 * are searched for the head's end, so a request trickled in a byte at a
 * time costs no more than one sent whole.
 */
static int http_read(struct http_conn *h)
{
	size_t from = h->in_len > 3 ? h->in_len - 3 : 0;
	ssize_t n;

	n = read(h->fd, h->in + h->in_len, sizeof(h->in) - 1 - h->in_len);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return -EAGAIN;
	if (n <= 0 || memchr(h->in + h->in_len, 0, (size_t)n))
		return 400;
	h->in_len += (size_t)n;
	h->in[h->in_len] = 0;
	if (strstr(h->in + from, "\r\n\r\n") || strstr(h->in + from, "\n\n"))
		return 0;
	return h->in_len == sizeof(h->in) - 1 ? 431 : -EAGAIN;
}

/*
 * The answer to @h's request, or to @st, the status its reading ended
 * with; the exposition from @fresh (http_expo_get()). Returns the exit
 * status metrics would have.
 */
static int http_answer(struct ctl *c, struct http_conn *h, int st,
		       struct http_expo **fresh)
{
	char method[16], target[256], version[16];
	struct http_expo *e;
	bool head;

	if (st == 431) {
		http_reply(h, 431, "Request Header Fields Too Large", "", NULL,
			   false);
		return CTL_USAGE;
	}
	if (st == 408) {
		http_reply(h, 408, "Request Timeout", "", NULL, false);
		return CTL_USAGE;
	}
	if (st ||
	    sscanf(h->in, "%15s %255s %15s", method, target, version) != 3 ||
	    strncmp(version, "HTTP/1.", 7)) {
		http_reply(h, 400, "Bad Request", "", NULL, false);
		return CTL_USAGE;
	}
	head = !strcmp(method, "HEAD");
	if (!head && strcmp(method, "GET")) {
		http_reply(h, 405, "Method Not Allowed", "Allow: GET, HEAD\r\n",
			   NULL, false);
		return CTL_USAGE;
	}
	target[strcspn(target, "?")] = 0;
	if (strcmp(target, "/metrics")) {
		http_reply(h, 404, "Not Found", "", NULL, head);
		return CTL_USAGE;
	}
	e = http_expo_get(c, fresh);
	if (!e || e->ret) {
		http_reply(h, 503, "Service Unavailable", "", NULL, head);
		return e ? e->ret : CTL_FAILED;
	}
	http_reply(h, 200, "OK", "", e, head);
	return CTL_OK;
}

/* One request on standard input, its answer on standard output. */
static int http_one(struct ctl *c)
{
	const uint64_t end = now_ms() + (uint64_t)c->http_timeout_ms;
	struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
	struct http_conn h = { .fd = STDIN_FILENO };
	struct http_expo *fresh = NULL;
	uint64_t now;
	int ret, st;

	do {
		now = now_ms();
		if (now >= end || !poll(&p, 1, (int)(end - now)))
			st = 408;
		else
			st = http_read(&h);
	} while (st == -EAGAIN);
	ret = http_answer(c, &h, st, &fresh);
	fwrite(h.in, 1, h.in_len, stdout);
	if (h.body)
		fwrite(h.body->text, 1, h.body->len, stdout);
	http_expo_put(h.body);
	http_expo_put(fresh);
	return ret;
}

/* Send what is left of @h's answer: true once it is all sent, or cannot
 * be. */
static bool http_write(struct http_conn *h)
{
	const size_t blen = h->body ? h->body->len : 0;
	struct msghdr m = { 0 };
	struct iovec iov[2];
	size_t off;
	ssize_t n;

	while (h->out_off < h->in_len + blen) {
		off = h->out_off;
		m.msg_iov = iov;
		m.msg_iovlen = 0;
		if (off < h->in_len) {
			iov[m.msg_iovlen++] = (struct iovec){
				.iov_base = h->in + off,
				.iov_len = h->in_len - off,
			};
			off = h->in_len;
		}
		if (blen)
			iov[m.msg_iovlen++] = (struct iovec){
				.iov_base = h->body->text + (off - h->in_len),
				.iov_len = h->in_len + blen - off,
			};
		n = sendmsg(h->fd, &m, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno != EAGAIN;
		h->out_off += (size_t)n;
	}
	return true;
}

/*
 * Close @h's connection. What its peer sent past its request is read
 * first: a close with unread bytes would reset the connection and could
 * throw away the answer still on its way.
 */
static void http_close(struct http_conn *h)
{
	char sink[4096];
	int i;

	for (i = 0; i < 16 && recv(h->fd, sink, sizeof(sink), 0) > 0; i++)
		;
	close(h->fd);
	http_expo_put(h->body);
	memset(h, 0, offsetof(struct http_conn, in));
	h->fd = -1;
}

/* The listening socket and its connections. */
struct http_server {
	struct ctl *c;
	int lfd;
	uint64_t rest; /* accept() failed: not before then, now_ms() */
	uint64_t accepts;
	struct http_expo *fresh; /* the latest exposition */
	struct http_conn conns[HTTP_CONNS];
};

/* Go on with @h, which poll() found ready. */
static void http_step(struct http_server *sv, struct http_conn *h)
{
	int st;

	if (h->state == HTTP_READING) {
		st = http_read(h);
		if (st == -EAGAIN)
			return;
		http_answer(sv->c, h, st, &sv->fresh);
		h->state = HTTP_WRITING;
		h->deadline = now_ms() + (uint64_t)sv->c->http_timeout_ms;
	}
	if (http_write(h))
		http_close(h);
}

/* @h's time is up: 408 for a request not yet complete, if it fits. */
static void http_expire(struct http_server *sv, struct http_conn *h)
{
	if (h->state == HTTP_READING) {
		http_answer(sv->c, h, 408, &sv->fresh);
		http_write(h);
	}
	http_close(h);
}

/* Do @a and @b come from one address? Unix peers are all one. */
static bool same_source(const struct sockaddr_storage *a,
			const struct sockaddr_storage *b)
{
	const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)a;
	const struct sockaddr_in6 *b6 = (const struct sockaddr_in6 *)b;

	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	if (a->ss_family == AF_INET6)
		return !memcmp(&a6->sin6_addr, &b6->sin6_addr,
			       sizeof(a6->sin6_addr));
	return true;
}

static struct http_conn *http_free_slot(struct http_server *sv)
{
	int i;

	for (i = 0; i < HTTP_CONNS; i++)
		if (sv->conns[i].state == HTTP_FREE)
			return &sv->conns[i];
	return NULL;
}

/* Serve the connections whose request waits to be read. */
static void http_spoken(struct http_server *sv)
{
	struct pollfd p[HTTP_CONNS];
	int i;

	for (i = 0; i < HTTP_CONNS; i++) {
		p[i].fd = sv->conns[i].state == HTTP_READING ? sv->conns[i].fd
							     : -1;
		p[i].events = POLLIN;
	}
	if (poll(p, HTTP_CONNS, 0) <= 0)
		return;
	for (i = 0; i < HTTP_CONNS; i++)
		if (p[i].fd >= 0 && p[i].revents)
			http_step(sv, &sv->conns[i]);
}

/*
 * The connection that goes for a new one when every slot is taken: of
 * the address with the most, the oldest still sending its request, else
 * its oldest.
 */
static struct http_conn *http_victim(struct http_server *sv)
{
	const struct http_conn *heavy = NULL;
	struct http_conn *h, *v = NULL;
	int i, j, n, most = 0;
	bool reading;

	for (i = 0; i < HTTP_CONNS; i++) {
		for (n = 0, j = 0; j < HTTP_CONNS; j++)
			n += same_source(&sv->conns[i].peer,
					 &sv->conns[j].peer);
		if (n > most) {
			most = n;
			heavy = &sv->conns[i];
		}
	}
	for (i = 0; i < HTTP_CONNS; i++) {
		h = &sv->conns[i];
		if (!same_source(&h->peer, &heavy->peer))
			continue;
		reading = h->state == HTTP_READING;
		if (!v || reading > (v->state == HTTP_READING) ||
		    (reading == (v->state == HTTP_READING) && h->seq < v->seq))
			v = h;
	}
	return v;
}

/*
 * A slot for a new connection: a free one, else one freed by answering
 * the requests already there to read (a burst of new connections must not
 * push out a peer that spoke), else the victim's, closed with 503.
 */
static struct http_conn *http_slot(struct http_server *sv)
{
	struct http_conn *h = http_free_slot(sv);

	if (h)
		return h;
	http_spoken(sv);
	h = http_free_slot(sv);
	if (h)
		return h;
	h = http_victim(sv);
	if (h->state == HTTP_READING) {
		http_reply(h, 503, "Service Unavailable", "", NULL, false);
		http_write(h);
	}
	http_close(h);
	return h;
}

/*
 * Take the connections waiting to be accepted, at most HTTP_CONNS in a
 * pass, so that a flood of them leaves time for the open ones. Out of
 * descriptors or memory, the socket rests a second instead of spinning.
 */
static void http_accept(struct http_server *sv)
{
	struct sockaddr_storage peer;
	struct http_conn *h;
	socklen_t alen;
	int fd, i;

	for (i = 0; i < HTTP_CONNS; i++) {
		alen = sizeof(peer);
		fd = accept4(sv->lfd, (struct sockaddr *)&peer, &alen,
			     SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
			continue;
		if (fd < 0) {
			if (errno != EAGAIN) {
				ctl_errx("accept: %s", strerror(errno));
				sv->rest = now_ms() + 1000;
			}
			return;
		}
		h = http_slot(sv);
		h->state = HTTP_READING;
		h->fd = fd;
		h->seq = sv->accepts++;
		h->deadline = now_ms() + (uint64_t)sv->c->http_timeout_ms;
		h->peer = peer;
	}
}

/* Serve the listening socket @lfd until SIGTERM or SIGINT. */
static int http_serve(struct ctl *c, int lfd)
{
	struct sigaction sa = { .sa_handler = ctl_on_stop };
	struct pollfd p[1 + HTTP_CONNS];
	struct http_server *sv;
	struct http_conn *h;
	uint64_t now, next;
	int i, n, fl, ret = CTL_OK;

	fl = fcntl(lfd, F_GETFL);
	if (fl < 0 || fcntl(lfd, F_SETFL, fl | O_NONBLOCK)) {
		ctl_errx("the listening socket: %s", strerror(errno));
		return CTL_FAILED;
	}
	sv = calloc(1, sizeof(*sv));
	if (!sv) {
		ctl_errx("out of memory");
		return CTL_FAILED;
	}
	sv->c = c;
	sv->lfd = lfd;
	for (i = 0; i < HTTP_CONNS; i++)
		sv->conns[i].fd = -1;
	/* No SA_RESTART: a stop ends the wait at once. */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	while (!ctl_stop) {
		now = now_ms();
		next = sv->rest > now ? sv->rest : UINT64_MAX;
		p[0].fd = sv->rest > now ? -1 : lfd;
		p[0].events = POLLIN;
		for (i = 0; i < HTTP_CONNS; i++) {
			h = &sv->conns[i];
			if (h->state != HTTP_FREE && now >= h->deadline)
				http_expire(sv, h);
			p[1 + i].fd = h->fd;
			p[1 + i].events =
				h->state == HTTP_READING ? POLLIN : POLLOUT;
			if (h->state != HTTP_FREE && h->deadline < next)
				next = h->deadline;
		}
		n = poll(p, 1 + HTTP_CONNS,
			 next == UINT64_MAX ? -1 : (int)(next - now));
		if (n < 0 && errno != EINTR) {
			ctl_errx("poll: %s", strerror(errno));
			ret = CTL_FAILED;
			break;
		}
		for (i = 0; n > 0 && i < HTTP_CONNS; i++)
			if (p[1 + i].fd >= 0 && p[1 + i].revents)
				http_step(sv, &sv->conns[i]);
		if (n > 0 && p[0].revents)
			http_accept(sv);
	}
	for (i = 0; i < HTTP_CONNS; i++)
		if (sv->conns[i].state != HTTP_FREE)
			http_close(&sv->conns[i]);
	http_expo_put(sv->fresh);
	free(sv);
	return ret;
}

/* Is @fd a listening socket (else a connection, a pipe or a file)? */
static bool listening(int fd)
{
	socklen_t len = sizeof(int);
	int on = 0;

	return !getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &on, &len) && on;
}

int http_metrics(struct ctl *c)
{
	return listening(STDIN_FILENO) ? http_serve(c, STDIN_FILENO)
				       : http_one(c);
}
