/* SPDX-License-Identifier: MIT */
/*
 * fuzz_admin.c - the admin socket's request parser
 *
 * Each input is one datagram as an allowed admin peer sends it (the
 * server refuses NUL bytes and more than 1024 bytes before the parser
 * sees them). Whatever the request, the reply must be one JSON object and
 * a newline, as kvmemctl reads it; an on-demand scrub it starts is run to
 * its end as the event loop would.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../daemon/json.h"
#include "../../daemon/kvmemd.h"
#include "../../tools/json.h"
#include "fuzz_daemon.h"

#define REQ_MAX 1024 /* ADMIN_REQ_MAX in server.c */

static void reply_check(const struct jw *w, const char *req)
{
	struct json_error e;
	struct json *v = NULL;

	if (jw_failed(w) || !w->len || w->buf[w->len - 1] != '\n' ||
	    json_parse(w->buf, w->len, NULL, &v, &e) ||
	    v->type != JSON_OBJECT) {
		fprintf(stderr, "request \"%s\": reply is not a JSON object: "
				"%.*s\n",
			req, (int)w->len, w->buf ? w->buf : "");
		abort();
	}
	json_free(v);
}

/* A reply that comes after its request (scrub now) goes nowhere. */
static void drop_reply(struct kvmemd_waiter *wt, struct jw *reply)
{
	(void)wt;
	(void)reply;
}

static struct kvmemd_waiter nowhere = { .reply = drop_reply };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvmemd *d = fuzz_daemon();
	char req[REQ_MAX + 1], copy[REQ_MAX + 1];
	struct jw w = { 0 };
	int i, later;

	if (size > REQ_MAX || memchr(data, 0, size))
		return 0;
	memcpy(req, data, size);
	req[size] = 0;
	memcpy(copy, req, size + 1);
	later = kvmemd_admin(d, req, &nowhere, &w);
	if (!later)
		reply_check(&w, copy);
	for (i = 0; i < 8; i++)
		kvmemd_ras_run(d, kvmemd_now_ns());
	jw_free(&w);
	return 0;
}
