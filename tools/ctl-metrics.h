/* SPDX-License-Identifier: MIT */
/*
 * ctl-metrics.h - Prometheus's text exposition of kvmemd's replies
 * (ctl-metrics.c)
 *
 * Included by kvmemctl.c (metrics) and ctl-http.c (metrics --http).
 */
#ifndef KVMEM_TOOLS_CTL_METRICS_H
#define KVMEM_TOOLS_CTL_METRICS_H

#include <stddef.h>

struct ctl;

/*
 * The exposition of the replies to stats, errors, scrub status, sessions
 * and tier in *@text, @len bytes (free() it); NULL when one of them fails.
 * Returns the exit status metrics has, after saying what went wrong.
 */
int metrics_text(struct ctl *c, char **text, size_t *len);

#endif /* KVMEM_TOOLS_CTL_METRICS_H */
