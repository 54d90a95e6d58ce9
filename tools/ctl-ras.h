/* SPDX-License-Identifier: MIT */
/*
 * ctl-ras.h - kvmemctl's reliability commands (ctl-ras.c): scrub, events,
 * errors, reset-counters and inject
 *
 * Included by kvmemctl.c, whose table of commands runs them.
 */
#ifndef KVMEM_TOOLS_CTL_RAS_H
#define KVMEM_TOOLS_CTL_RAS_H

struct ctl;

int cmd_scrub(struct ctl *c, int argc, char **argv);
int cmd_events(struct ctl *c, int argc, char **argv);
int cmd_errors(struct ctl *c, int argc, char **argv);
int cmd_reset(struct ctl *c, int argc, char **argv);
int cmd_inject(struct ctl *c, int argc, char **argv);

#endif /* KVMEM_TOOLS_CTL_RAS_H */
