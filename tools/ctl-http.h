/* SPDX-License-Identifier: MIT */
/*
 * ctl-http.h - kvmemctl metrics --http: the exposition served over HTTP
 * (ctl-http.c)
 *
 * Included by kvmemctl.c.
 */
#ifndef KVMEM_TOOLS_CTL_HTTP_H
#define KVMEM_TOOLS_CTL_HTTP_H

/* A peer's time to send its request, and again to take the answer,
 * without --http-timeout. */
#define HTTP_TIMEOUT_MS 5000

struct ctl;

/*
 * Serve GET /metrics on standard input: a listening socket until SIGTERM
 * or SIGINT, or the one connection it is. Returns the exit status.
 */
int http_metrics(struct ctl *c);

#endif /* KVMEM_TOOLS_CTL_HTTP_H */
