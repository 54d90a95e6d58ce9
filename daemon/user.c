/* SPDX-License-Identifier: MIT */
/*
 * user.c - what each user (uid) has of the daemon: sessions, connections
 * still in their handshake, GPU memory, and a budget of error events
 *
 * Limits that count per session or per connection are undone by opening
 * more of them; these count per uid, which a client cannot multiply. The
 * table holds the users that have something now or had an event in the
 * last minute, and is searched linearly: it is as long as the number of
 * distinct users at once.
 */
#include <stdlib.h>
#include <string.h>

#include "kvmemd.h"

#define MINUTE_NS (60ull * 1000000000ull)

/* A record with nothing in it and no event budget running can go. */
static int idle(const struct kvmemd_user *u, uint64_t now)
{
	return !u->sessions && !u->pending[0] && !u->pending[1] &&
	       !u->gpu_bytes && !u->ring_events &&
	       now - u->events.start >= MINUTE_NS &&
	       now - u->log.start >= MINUTE_NS;
}

static void prune(struct kvmemd *d, uint64_t now)
{
	uint32_t i = 0;

	while (i < d->nusers) {
		if (idle(&d->users[i], now))
			d->users[i] = d->users[--d->nusers];
		else
			i++;
	}
}

struct kvmemd_user *kvmemd_user(struct kvmemd *d, uid_t uid)
{
	struct kvmemd_user *u;
	uint32_t i, cap;

	for (i = 0; i < d->nusers; i++)
		if (d->users[i].uid == uid)
			return &d->users[i];
	if (d->nusers == d->users_cap) {
		prune(d, kvmemd_now_ns());
		if (d->nusers == d->users_cap) {
			cap = d->users_cap ? 2 * d->users_cap : 16;
			u = realloc(d->users, cap * sizeof(*u));
			if (!u)
				return NULL;
			d->users = u;
			d->users_cap = cap;
		}
	}
	u = &d->users[d->nusers++];
	memset(u, 0, sizeof(*u));
	u->uid = uid;
	/* A budget that starts now would be a minute long already. */
	u->events.start = u->log.start = kvmemd_now_ns() - MINUTE_NS;
	return u;
}

const struct kvmemd_user *kvmemd_user_find(const struct kvmemd *d, uid_t uid)
{
	uint32_t i;

	for (i = 0; i < d->nusers; i++)
		if (d->users[i].uid == uid)
			return &d->users[i];
	return NULL;
}

void kvmemd_users_free(struct kvmemd *d)
{
	free(d->users);
	d->users = NULL;
	d->nusers = d->users_cap = 0;
}
