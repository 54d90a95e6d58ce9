/* SPDX-License-Identifier: MIT */
/*
 * fuzz_hello.c - the handshake: a client's hello, checked, and when it is
 * admitted, the session set up as the worker would and freed as a hang-up
 * frees it
 *
 * The server passes on only datagrams of exactly the hello's size; a
 * shorter input is padded with zeros. An admitted session's welcome must
 * describe a memfd that holds everything it places in it, and the pool
 * must be whole again once the session is gone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../daemon/kvmemd.h"
#include "fuzz_daemon.h"
#include "kvmem/uapi.h"

static void fail(const char *what, const struct kvmem_welcome *w)
{
	fprintf(stderr,
		"admitted hello breaks the welcome: %s (map %llu, sqes %llu, "
		"cqes %llu, buf %llu+%llu, heat %llu, arena %llu+%llu)\n",
		what, (unsigned long long)w->map_bytes,
		(unsigned long long)w->sqes_off,
		(unsigned long long)w->cqes_off,
		(unsigned long long)w->buf_off,
		(unsigned long long)w->buf_bytes,
		(unsigned long long)w->heat_off,
		(unsigned long long)w->arena_off,
		(unsigned long long)w->arena_bytes);
	abort();
}

static void welcome_check(const struct kvmem_welcome *w, uint64_t quota_max)
{
	const uint64_t map = w->map_bytes;

	if (w->sqes_off + (uint64_t)w->sq_entries * sizeof(struct kvmem_sqe) >
		    w->cqes_off ||
	    w->cqes_off + (uint64_t)w->cq_entries * sizeof(struct kvmem_cqe) >
		    w->buf_off)
		fail("the rings overlap what follows them", w);
	if (w->buf_off + w->buf_bytes > w->heat_off ||
	    w->heat_off > w->arena_off)
		fail("the buffer or the heat array overlap", w);
	if (w->arena_off + w->arena_bytes > map || w->arena_bytes > quota_max)
		fail("the arena is not inside the memfd or over the quota", w);
	if (!w->slot_bytes[0] || !w->slot_bytes[1] ||
	    w->slot_bytes[0] > w->arena_bytes ||
	    w->slot_bytes[1] > w->arena_bytes)
		fail("a page does not fit the arena", w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvmemd *d = fuzz_daemon();
	struct kvmemd_session *s = NULL;
	struct kvmem_welcome w;
	struct kvmem_hello h;
	char why[KVMEM_MESSAGE_LEN];

	memset(&h, 0, sizeof(h));
	memcpy(&h, data, size < sizeof(h) ? size : sizeof(h));
	memset(&w, 0, sizeof(w));
	if (kvmemd_session_new(d, &h, getuid(), getuid(), getpid(), &w, &s)) {
		if (s || !w.message[0] || w.error >= 0) {
			fprintf(stderr, "a refusal without a reason or errno\n");
			abort();
		}
		return 0;
	}
	if (!kvmemd_session_setup(s, why, sizeof(why))) {
		kvmemd_session_welcome(s, &w);
		welcome_check(&w, d->cfg.session_max_bytes);
	}
	kvmemd_session_discard(s);
	kvmemd_session_free(s);
	if (d->n.pool_used || d->n.sessions) {
		fprintf(stderr, "a freed session left %llu bytes, %llu "
				"sessions in the pool\n",
			(unsigned long long)d->n.pool_used,
			(unsigned long long)d->n.sessions);
		abort();
	}
	return 0;
}
