/* SPDX-License-Identifier: MIT */
/*
 * own-kvmemd.h - a kvmemd of a tool's own
 *
 * kvmem-bench and kvmem-eval start a kvmemd for a run, in a temporary
 * directory with its sockets, state and log, so that what the run does
 * (its load, the bit errors it injects) never reaches a daemon that serves
 * others, nor that daemon's counters. Messages name the program that runs.
 *
 * own_kvmemd_start_stored() also plays systemd's part for kvmemd's crash
 * survival (kvmemd(8), RESTARTS): a notification socket with a descriptor
 * store, and a restart after kill -9 that passes the store back, so that
 * kvmem-bench record can time what a crash costs without systemd.
 */
#ifndef KVMEM_OWN_KVMEMD_H
#define KVMEM_OWN_KVMEMD_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>

/* A kvmemd a tool started. */
struct own_kvmemd {
	pid_t pid; /* 0 once reaped */
	int status; /* its wait status, once reaped */
	char bin[PATH_MAX]; /* the binary started */
	char dir[PATH_MAX];
	char sock[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char admin[sizeof(((struct sockaddr_un *)0)->sun_path)];
	/* the CPUs of this program and of the daemon; -1: not pinned */
	int cpu, peer_cpu;
	struct own_fdstore *store; /* NULL: none (own_kvmemd_start()) */
	/* CLOCK_MONOTONIC ns: the last start's fork, and when its READY=1
	 * was read (own_kvmemd_ready()) */
	uint64_t started_ns, ready_ns;
};

/* Settings own_kvmemd_start() passes on, at the most. */
#define OWN_KVMEMD_MAX_SET 8

/*
 * own_kvmemd_start() - start kvmemd in a fresh temporary directory
 * @d: receives the process, the binary, the directory, the socket paths
 *     and the CPUs
 * @path: the kvmemd binary (--kvmemd), or NULL: $KVMEMD, else
 *        ../daemon/kvmemd next to this program's directory (the build
 *        tree's layout)
 * @pin_cpus: with two CPUs or more to run on, run this process on the
 *            first of them and the daemon on the second (a polling
 *            daemon and its client on one CPU wait for each other's spin
 *            to run out)
 * @set: NULL, or "SECTION.KEY=VALUE" settings (at most
 *       OWN_KVMEMD_MAX_SET) ending in NULL, each passed as -o
 *
 * Foreground, an empty configuration otherwise, its sockets and state in
 * the directory (PROGRAM-XXXXXX under $TMPDIR, else /tmp), its output in
 * kvmemd.log there. It gets SIGKILL when this process dies. Says what
 * failed on stderr. Return: 0 or a negative errno; own_kvmemd_stop()
 * cleans up either way.
 */
int own_kvmemd_start(struct own_kvmemd *d, const char *path, int pin_cpus,
		     const char *const *set);
/*
 * own_kvmemd_start_stored() - start kvmemd with a descriptor store
 * @d, @path, @pin_cpus, @set: as own_kvmemd_start()
 *
 * As own_kvmemd_start(), and the daemon's NOTIFY_SOCKET is DIR/notify
 * (one set in this process's environment is not passed on), read on a
 * thread of this process as systemd reads it: a descriptor sent with
 * FDSTORE=1 is kept under its FDNAME= (one of a file kept already is
 * closed, as systemd does), FDSTOREREMOVE=1 closes those of its FDNAME=,
 * any other is closed, and READY=1 is noted for own_kvmemd_ready(). The
 * settings are copied, for own_kvmemd_restart(). Return: as
 * own_kvmemd_start().
 */
int own_kvmemd_start_stored(struct own_kvmemd *d, const char *path,
			    int pin_cpus, const char *const *set);
/*
 * Wait up to @timeout_ms for the READY=1 of the last start of @d, a
 * kvmemd with a store, and set d->ready_ns. Says what failed on stderr.
 * Return: 0, -ETIMEDOUT, or -ECHILD when the daemon exited first.
 */
int own_kvmemd_ready(struct own_kvmemd *d, int timeout_ms);
/* How many descriptors the store of @d holds under names that begin
 * with @prefix, once what the daemon sent so far is read. */
int own_kvmemd_stored(struct own_kvmemd *d, const char *prefix);
/* The descriptors the store of @d holds under names that begin with
 * @prefix ("": all) are lost, as a reboot loses them all. */
void own_kvmemd_forget(struct own_kvmemd *d, const char *prefix);
/*
 * kill -9 @d, a kvmemd with a store, and reap it; what it sent before it
 * died is read into the store. Return: 0, or -ECHILD when it had exited
 * already (said on stderr).
 */
int own_kvmemd_kill(struct own_kvmemd *d);
/*
 * Start @d, killed (own_kvmemd_kill()), again with the same binary,
 * settings, directory, state and CPU, and the store's descriptors passed
 * as systemd passes them (LISTEN_FDS, LISTEN_PID, LISTEN_FDNAMES, at
 * descriptors 3 on). Its log goes on in the same file. Return: 0 or a
 * negative errno, said on stderr.
 */
int own_kvmemd_restart(struct own_kvmemd *d);

struct kvmem_connect_opts;
struct kvmem_cache;
struct kvmem_geometry;
/*
 * kvmem_connect() to @sock, retrying while @d, a kvmemd started here (NULL:
 * a running one), is not listening yet. Says what failed on stderr.
 */
int own_kvmemd_connect(const char *sock, struct own_kvmemd *d,
		       const struct kvmem_geometry *g,
		       const struct kvmem_connect_opts *o,
		       struct kvmem_cache **c);
/*
 * SIGTERM, wait (SIGKILL after 5 s), remove the directory; the daemon's
 * log goes to stderr first when the run @failed or the daemon did. A
 * store's thread ends and its descriptors are closed.
 * Return: 0 when the daemon exited with status 0, else -EIO.
 */
int own_kvmemd_stop(struct own_kvmemd *d, int failed);

#endif /* KVMEM_OWN_KVMEMD_H */
