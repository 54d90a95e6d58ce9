/* SPDX-License-Identifier: MIT */
/*
 * fuzz_daemon.h - a kvmemd without its event loop, for the fuzz targets
 * that drive the daemon's request and handshake parsers
 */
#ifndef KVMEM_FUZZ_DAEMON_H
#define KVMEM_FUZZ_DAEMON_H

#include <stddef.h>
#include <stdint.h>

struct kvmemd;

/* The daemon: built-in defaults, a small host pool, no store, a state
 * directory of its own (removed at exit), only critical messages. */
struct kvmemd *fuzz_daemon(void);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* KVMEM_FUZZ_DAEMON_H */
