/*
 * own-kvmemd.h - a kvmemd of a tool's own
 *
 * kvmem-bench and kvmem-eval start a kvmemd for a run, in a temporary
 * directory with its sockets, state and log, so that what the run does
 * (its load, the bit errors it injects) never reaches a daemon that serves
 * others, nor that daemon's counters. Messages name the program that runs.
 */
#ifndef KVMEM_OWN_KVMEMD_H
#define KVMEM_OWN_KVMEMD_H

#include <limits.h>
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
 * log goes to stderr first when the run @failed or the daemon did.
 * Return: 0 when the daemon exited with status 0, else -EIO.
 */
int own_kvmemd_stop(struct own_kvmemd *d, int failed);

#endif /* KVMEM_OWN_KVMEMD_H */
