/* SPDX-License-Identifier: MIT */
/*
 * bench-hangup.c - kvmemd's other clients while one hangs up in set-up
 *
 * A hello costs kvmemd an arena of the quota it asks for, mapped and
 * locked in memory on a worker; a client that hangs up right after its
 * hello makes kvmemd set the arena up and tear it down again for nobody.
 * A review found one uid doing that with 30 hellos of 1 GiB against a
 * pool of 8 GiB holding another session's NOP round trip for 14.8 s and
 * "kvmemctl status" for 28 s: the event loop unmapped each arena itself,
 * waiting for the memory-map lock that workers held while they locked
 * other arenas.
 *
 * Two windows of --seconds each, on one daemon and one polite session:
 *   baseline  the polite session's NOPs, one at a time, one due every
 *             NOP_PERIOD_US; beside them, on a thread, admin "status"
 *             round trips (connect, request, reply, as kvmemctl status
 *             makes them), one due every STATUS_PERIOD_MS
 *   attack    the same, while an attacker process sends a round of
 *             --hellos hellos of --quota every ROUND_PERIOD_MS, each on a
 *             connection it closes right after sending
 * The attack's figures are reported over the baseline's. Each round trip
 * is timed from when it was due (pace_next()), so that a daemon that
 * stalls for seconds shows in the percentiles as it would to a client
 * with work to do, not as one slow sample among few. A status kvmemd
 * leaves unanswered (it drops an admin connection it has not read within
 * its deadline) is counted, not timed.
 *
 * After the attack the pool must come back to what it held before
 * (stats: pools[0].reserved_bytes, and no releasing_bytes): a run after
 * which it does not is an error. What kvmemd made of the hellos comes from
 * its counters: those it refused, those it evicted before they spoke, and
 * the rest, for which it set an arena up.
 *
 * Unless told where a daemon runs (--connect and --admin), the benchmark
 * starts its own with pool.host_bytes of --pool and pool.session_max_bytes
 * of --quota, and, as bench-ring does, runs on the first of two CPUs and
 * the daemon on the second: a polling daemon and its client on one CPU
 * wait for each other's spin to run out, which would make the baseline
 * several times slower than the daemon is. The attacker and the admin
 * thread are this program's, on its CPU; kvmemd's workers, which set the
 * arenas up and tear them down, share the daemon's. --no-pin leaves all of
 * it to the scheduler.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvmem/kvmem.h"
#include "kvmem/uapi.h"
#include "bench.h"
#include "json.h"
#include "own-kvmemd.h"

#define DEFAULT_HELLOS 30u
#define MAX_HELLOS 10000u
#define DEFAULT_QUOTA (1ull << 30)
#define DEFAULT_POOL (8ull << 30)
#define DEFAULT_SECONDS 10u
#define MAX_SECONDS 3600u
/* The polite session's quota; also pool.session_default_bytes, which must
 * not be more than --quota (pool.session_max_bytes). */
#define POLITE_QUOTA (16ull << 20)
#define NOP_PERIOD_US 1000
#define STATUS_PERIOD_MS 10
#define ROUND_PERIOD_MS 100
#define WARM_NOPS 100
/* No answer for this long means the daemon is stuck: an error. */
#define WAIT_MS 60000
/* How long the pool may take to come back after the attack. */
#define POOL_WAIT_MS 60000
#define POOL_POLL_MS 10
#define REPLY_BYTES 16384

struct hangup_cfg {
	uint64_t hellos, quota, pool, seconds;
	int pool_set; /* --pool given */
	int json;
	const char *connect, *admin; /* a running daemon's sockets */
	const char *kvmemd; /* --kvmemd */
	int no_pin; /* --no-pin */
};

/* What the admin socket's stats say of the daemon and its host pool. */
struct daemon_view {
	uint64_t sessions, refused, evicted;
	uint64_t pool, reserved, releasing;
};

/* The attacker's report. */
struct attack {
	uint64_t sent, unsent, rounds;
};

/* Round trips of one window, in ns; as many as are due in it. */
struct window {
	uint64_t *nop, nnop, nop_cap;
	uint64_t *status, nstatus, status_cap;
	/* statuses that got no answer: not timed, counted */
	uint64_t status_errors;
	uint64_t sessions_peak; /* the most "sessions" a status said */
};

/* The admin thread of a window. */
struct prober {
	const char *admin;
	struct window *w;
	uint64_t start; /* of the window */
	int stop; /* set when the NOPs failed, __atomic */
};

/* A window's figures, in microseconds. */
struct lat {
	uint64_t nops, statuses, status_errors;
	double nop_p50, nop_p99, nop_max;
	double status_p50, status_max;
};

struct results {
	struct lat base, attack;
	struct attack a;
	struct daemon_view before, after;
	/* of the attack's hellos: refused, evicted, and the others, whose
	 * arenas kvmemd set up (from its counters, which count others' too) */
	uint64_t refused, evicted;
	long long set_up;
	uint64_t sessions_peak;
	double settle_ms;
};

static void hangup_usage(FILE *f)
{
	fprintf(f,
		"usage: kvmem-bench hangup [--hellos N] [--quota SIZE] "
		"[--pool SIZE] [--seconds S]\n"
		"                          [--connect PATH --admin PATH] "
		"[--kvmemd PATH] [--no-pin]\n"
		"                          [--json]\n\n"
		"  --hellos N       hellos a round of the attack, 1..%u "
		"(default %u)\n"
		"  --quota SIZE     the quota each asks for (default 1G)\n"
		"  --pool SIZE      pool.host_bytes of the kvmemd started here "
		"(default 8G, or\n"
		"                   half the memory available when that is "
		"less)\n"
		"  --seconds S      of the baseline, and of the attack, 1..%u "
		"(default %u)\n"
		"  --connect PATH   use the kvmemd listening at PATH, with its "
		"admin socket at\n"
		"  --admin PATH     PATH (both, or neither: start one here)\n"
		"  --kvmemd PATH    the kvmemd to start (default: $KVMEMD, "
		"else ../daemon/kvmemd\n"
		"                   next to this program's directory)\n"
		"  --no-pin         do not pin this program and the kvmemd it "
		"starts to two\n"
		"                   CPUs of their own\n"
		"  --json           one JSON object on stdout\n",
		MAX_HELLOS, DEFAULT_HELLOS, MAX_SECONDS, DEFAULT_SECONDS);
}

static int parse_cfg(int argc, char **argv, struct hangup_cfg *cfg)
{
	static const struct option opts[] = {
		{ "hellos", required_argument, NULL, 'n' },
		{ "quota", required_argument, NULL, 'q' },
		{ "pool", required_argument, NULL, 'p' },
		{ "seconds", required_argument, NULL, 's' },
		{ "connect", required_argument, NULL, 'c' },
		{ "admin", required_argument, NULL, 'a' },
		{ "kvmemd", required_argument, NULL, 'k' },
		{ "no-pin", no_argument, NULL, 'P' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int o;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'n':
			if (bench_parse_u64("hellos", optarg, 1, MAX_HELLOS,
					    &cfg->hellos))
				return 2;
			break;
		case 'q':
			if (bench_parse_size("quota", optarg, POLITE_QUOTA,
					     1ull << 40, &cfg->quota))
				return 2;
			break;
		case 'p':
			if (bench_parse_size("pool", optarg, 2 * POLITE_QUOTA,
					     1ull << 40, &cfg->pool))
				return 2;
			cfg->pool_set = 1;
			break;
		case 's':
			if (bench_parse_u64("seconds", optarg, 1, MAX_SECONDS,
					    &cfg->seconds))
				return 2;
			break;
		case 'c':
			cfg->connect = optarg;
			break;
		case 'a':
			cfg->admin = optarg;
			break;
		case 'k':
			cfg->kvmemd = optarg;
			break;
		case 'P':
			cfg->no_pin = 1;
			break;
		case 'j':
			cfg->json = 1;
			break;
		case 'h':
			hangup_usage(stdout);
			return 1;
		default:
			hangup_usage(stderr);
			return 2;
		}
	}
	if (optind != argc || !cfg->connect != !cfg->admin) {
		hangup_usage(stderr);
		return 2;
	}
	if (cfg->connect && (cfg->pool_set || cfg->kvmemd || cfg->no_pin)) {
		fprintf(stderr,
			"kvmem-bench: --pool, --kvmemd and --no-pin must not go "
			"with --connect: they are for a kvmemd started here\n");
		return 2;
	}
	return 0;
}

/*
 * The pool of the kvmemd started here: its arenas are locked in memory, so
 * it must fit in half of what the machine has available. The default is
 * lowered to fit, in whole quotas; a --pool that does not fit is refused.
 */
static int size_pool(struct hangup_cfg *cfg)
{
	uint64_t avail = bench_mem_available(), room = avail / 2;

	if (!cfg->pool_set) {
		cfg->pool = DEFAULT_POOL;
		if (room && room < cfg->pool)
			cfg->pool = room / cfg->quota * cfg->quota;
	} else if (room && cfg->pool > room) {
		fprintf(stderr,
			"kvmem-bench: --pool %llu MiB is more than half the "
			"%llu MiB of memory available, and the attack's arenas "
			"are locked in it\n",
			(unsigned long long)(cfg->pool >> 20),
			(unsigned long long)(avail >> 20));
		return -ENOMEM;
	}
	if (cfg->pool < 2 * cfg->quota) {
		fprintf(stderr,
			"kvmem-bench: a pool of %llu MiB does not hold the "
			"polite session and an arena of --quota %llu MiB\n",
			(unsigned long long)(cfg->pool >> 20),
			(unsigned long long)(cfg->quota >> 20));
		return -EINVAL;
	}
	return 0;
}

/* ---- the daemon's view ------------------------------------------------ */

/* Why admin request @req failed: the daemon's reply, else the errno. */
static void admin_fail(const char *req, const char *admin, int err,
		       const char *reply)
{
	if (*reply)
		fprintf(stderr, "kvmem-bench: %s at %s: %s", req, admin, reply);
	else
		fprintf(stderr, "kvmem-bench: %s at %s: %s\n", req, admin,
			strerror(-err));
}

/*
 * An admin request that kvmemd dropped (a connection it did not read
 * within its deadline) or did not answer within WAIT_MS: the daemon is
 * busy, not broken.
 */
static int unanswered(int err)
{
	return err == -ECONNRESET || err == -EPIPE || err == -ETIMEDOUT;
}

/* The stats, into @v; with @quiet, nothing said of an unanswered one. */
static int daemon_view(const char *admin, struct daemon_view *v, int quiet)
{
	const struct json *d, *pools, *pool = NULL;
	struct json *root;
	char reply[REPLY_BYTES];
	int ret;

	ret = bench_admin(admin, "stats", reply, sizeof(reply), WAIT_MS);
	if (ret) {
		if (!quiet || !unanswered(ret))
			admin_fail("stats", admin, ret, reply);
		return ret;
	}
	ret = json_parse(reply, strlen(reply), NULL, &root, NULL);
	if (ret) {
		fprintf(stderr, "kvmem-bench: stats: not JSON: %s", reply);
		return ret;
	}
	d = json_get(root, "daemon");
	pools = json_get(root, "pools");
	if (pools && pools->type == JSON_ARRAY && pools->u.arr.n)
		pool = &pools->u.arr.v[0];
	if (json_u64(json_get(d, "sessions"), &v->sessions) ||
	    json_u64(json_get(d, "refused"), &v->refused) ||
	    json_u64(json_get(d, "evicted"), &v->evicted) ||
	    json_u64(json_get(pool, "bytes"), &v->pool) ||
	    json_u64(json_get(pool, "reserved_bytes"), &v->reserved)) {
		fprintf(stderr, "kvmem-bench: stats: no daemon counters or "
				"host pool in the reply\n");
		ret = -EBADMSG;
	}
	/* A kvmemd older than releasing_bytes frees an ended arena at once
	 * on its loop: none is ever being released. */
	if (json_u64(json_get(pool, "releasing_bytes"), &v->releasing))
		v->releasing = 0;
	json_free(root);
	return ret;
}

/*
 * Wait until the pool holds what it held @before, with nothing being
 * released and no session more. Once is not enough: a connection made
 * before the request may be accepted in the pass that answers it and its
 * hello read only in the next; twice in a row, POOL_POLL_MS apart, it
 * cannot. A stats request left unanswered by a daemon still busy with the
 * attack is asked again. Return: 0, -ETIMEDOUT when the pool did not come
 * back within POOL_WAIT_MS, or the error of a stats request.
 */
static int pool_back(const char *admin, const struct daemon_view *before,
		     struct daemon_view *now)
{
	uint64_t end = bench_now_ns() + POOL_WAIT_MS * 1000000ull;
	int ret, seen = 0;

	for (;;) {
		ret = daemon_view(admin, now, 1);
		if (ret && !unanswered(ret))
			return ret;
		if (!ret && now->reserved == before->reserved &&
		    !now->releasing && now->sessions == before->sessions)
			seen++;
		else
			seen = 0;
		if (seen == 2)
			return 0;
		if (bench_now_ns() >= end)
			break;
		bench_sleep_ms(POOL_POLL_MS);
	}
	if (ret) {
		fprintf(stderr,
			"kvmem-bench: kvmemd did not answer stats within %d s "
			"of the attack: %s\n",
			POOL_WAIT_MS / 1000, strerror(-ret));
		return -ETIMEDOUT;
	}
	fprintf(stderr,
		"kvmem-bench: the pool did not come back within %d s of the "
		"attack: %llu bytes reserved (%llu before), %llu releasing, "
		"%llu sessions (%llu before)\n",
		POOL_WAIT_MS / 1000, (unsigned long long)now->reserved,
		(unsigned long long)before->reserved,
		(unsigned long long)now->releasing,
		(unsigned long long)now->sessions,
		(unsigned long long)before->sessions);
	return -ETIMEDOUT;
}

/* Every session's here, the smallest: their pages are never used. */
static struct kvmem_geometry geometry(void)
{
	struct kvmem_geometry g = { .layers = 1,
				    .kv_heads = 1,
				    .head_dim = 64 };

	kvmem_geometry_default(&g);
	return g;
}

/* ---- pacing ----------------------------------------------------------- */

/* Sleep until bench_now_ns() reads @t. */
static void sleep_until(uint64_t t)
{
	struct timespec ts = { .tv_sec = (time_t)(t / 1000000000),
			       .tv_nsec = (long)(t % 1000000000) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

/* Round trips due one every @period ns, the first at @due. */
struct pace {
	uint64_t due, period;
};

/*
 * Wait for the next round trip's turn, and return the time to time it
 * from. One due already, because one before it ran late, is timed from
 * when it was due: a stall counts for every round trip it held up, not
 * once (no coordinated omission). One not due yet is timed from when the
 * wait ended: how late this process woke up is not the daemon's doing.
 */
static uint64_t pace_next(struct pace *p)
{
	uint64_t now = bench_now_ns(), due = p->due;

	p->due += p->period;
	if (now >= due)
		return due;
	sleep_until(due);
	return bench_now_ns();
}

/* ---- the attacker ----------------------------------------------------- */

/*
 * One hello on a connection of its own, hung up right after. The connect
 * does not wait: a daemon too busy to take it from the backlog leaves it
 * unsent.
 */
static int hello_hangup(const struct sockaddr_un *sa,
			const struct kvmem_hello *h)
{
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC,
			0);
	int ret = 0;

	if (fd < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) ||
	    send(fd, h, sizeof(*h), MSG_NOSIGNAL) != sizeof(*h))
		ret = -errno;
	close(fd);
	return ret;
}

static void attacker(int ctl, const struct hangup_cfg *cfg, const char *sock)
	__attribute__((noreturn));

/*
 * Wait for the word on @ctl, then attack for cfg->seconds in whole rounds,
 * and send the counts back. EOF instead of the word: no attack.
 */
static void attacker(int ctl, const struct hangup_cfg *cfg, const char *sock)
{
	struct kvmem_hello h = {
		.magic = KVMEM_HELLO_MAGIC,
		.abi_version = KVMEM_ABI_VERSION,
		.size = sizeof(h),
		.features = KVMEM_FEAT_ALL,
		.geometry = geometry(),
		.quota_bytes = cfg->quota,
	};
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct pace pace = { .period = ROUND_PERIOD_MS * 1000000ull };
	struct attack a = { 0 };
	uint64_t end, i;
	char go;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	if (recv(ctl, &go, 1, 0) != 1)
		_exit(0);
	pace.due = bench_now_ns();
	end = pace.due + cfg->seconds * 1000000000ull;
	while (pace.due < end) {
		pace_next(&pace);
		for (i = 0; i < cfg->hellos; i++) {
			if (hello_hangup(&sa, &h))
				a.unsent++;
			else
				a.sent++;
		}
		a.rounds++;
	}
	_exit(send(ctl, &a, sizeof(a), MSG_NOSIGNAL) == sizeof(a) ? 0 : 1);
}

/* Fork the attacker; @ctl is this side of the socket pair to it. */
static int attacker_start(const struct hangup_cfg *cfg, const char *sock,
			  pid_t *pid, int *ctl)
{
	pid_t parent = getpid();
	int ret;

	ret = bench_fork_pair(pid, ctl);
	if (ret)
		return ret;
	if (!*pid) {
		/* Never outlive the benchmark, even when it is killed. */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
			_exit(127);
		attacker(*ctl, cfg, sock);
	}
	return 0;
}

/*
 * The attacker's counts once its window is over; @ctl closed and the
 * attacker reaped either way (without counts, @a NULL: it is told there is
 * no attack).
 */
static int attacker_end(pid_t pid, int ctl, struct attack *a)
{
	int status, ret = 0;

	if (a && recv(ctl, a, sizeof(*a), 0) != sizeof(*a))
		ret = -EIO;
	close(ctl);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status))
		ret = -EIO;
	if (ret && a)
		fprintf(stderr, "kvmem-bench: the attacker failed\n");
	return ret;
}

/* ---- the polite session and the admin prober ------------------------- */


static void *prober(void *arg)
{
	struct prober *p = arg;
	struct window *w = p->w;
	struct pace pace = { .due = p->start,
			     .period = STATUS_PERIOD_MS * 1000000ull };
	char reply[REPLY_BYTES];
	struct json *root;
	uint64_t t, sessions;
	int ret;

	while (!__atomic_load_n(&p->stop, __ATOMIC_RELAXED) &&
	       w->nstatus + w->status_errors < w->status_cap) {
		t = pace_next(&pace);
		ret = bench_admin(p->admin, "status", reply, sizeof(reply),
				  WAIT_MS);
		/* A daemon stalled past its deadline for a request drops the
		 * connection: an outcome to count, said once. */
		if (ret) {
			if (!w->status_errors++)
				admin_fail("status", p->admin, ret, reply);
			continue;
		}
		w->status[w->nstatus++] = bench_now_ns() - t;
		if (!json_parse(reply, strlen(reply), NULL, &root, NULL)) {
			if (!json_u64(json_get(root, "sessions"), &sessions) &&
			    sessions > w->sessions_peak)
				w->sessions_peak = sessions;
			json_free(root);
		}
	}
	return NULL;
}

/*
 * One window: the NOPs due in it here (the first numbered @seq), the
 * statuses due in it on a thread.
 */
static int window_run(struct kvmem_cache *c, const char *admin, uint64_t *seq,
		      struct window *w)
{
	struct prober p = { .admin = admin, .w = w, .start = bench_now_ns() };
	struct pace pace = { .due = p.start,
			     .period = NOP_PERIOD_US * 1000ull };
	pthread_t tid;
	uint64_t t;
	int ret;

	w->nnop = w->nstatus = w->status_errors = w->sessions_peak = 0;
	ret = -pthread_create(&tid, NULL, prober, &p);
	if (ret) {
		fprintf(stderr, "kvmem-bench: pthread_create: %s\n",
			strerror(-ret));
		return ret;
	}
	while (w->nnop < w->nop_cap) {
		t = pace_next(&pace);
		ret = bench_nop(c, (*seq)++);
		if (ret)
			break;
		w->nop[w->nnop++] = bench_now_ns() - t;
	}
	/* Otherwise the statuses due in the window are all made. */
	if (ret)
		__atomic_store_n(&p.stop, 1, __ATOMIC_RELAXED);
	pthread_join(tid, NULL);
	if (!ret && !w->nstatus) {
		fprintf(stderr, "kvmem-bench: not one status was answered in "
				"the window\n");
		ret = -EIO;
	}
	return ret;
}

/* ---- results ---------------------------------------------------------- */

/* p50, p99 and the largest of @n times in ns, in us; sorts them. */
static void lat_of(uint64_t *t, uint64_t n, double *p50, double *p99,
		   double *max)
{
	*p50 = (double)bench_median(t, (uint32_t)n) / 1e3;
	if (p99)
		*p99 = (double)t[n - 1 - n / 100] / 1e3;
	*max = (double)t[n - 1] / 1e3;
}

static void window_lat(struct window *w, struct lat *l)
{
	l->nops = w->nnop;
	l->statuses = w->nstatus;
	l->status_errors = w->status_errors;
	lat_of(w->nop, w->nnop, &l->nop_p50, &l->nop_p99, &l->nop_max);
	lat_of(w->status, w->nstatus, &l->status_p50, NULL, &l->status_max);
}

static void print_json(const struct hangup_cfg *cfg,
		       const struct own_kvmemd *own, const struct results *x)
{
	const struct lat *b = &x->base, *a = &x->attack;

	printf("{\"hellos\": %llu, \"quota_bytes\": %llu, \"pool_bytes\": "
	       "%llu, \"seconds\": %llu, \"started\": %s, \"pinned\": %s, "
	       "\"base_nops\": %llu, \"base_nop_p50_us\": %.1f, "
	       "\"base_nop_p99_us\": %.1f, \"base_nop_max_us\": %.1f, "
	       "\"base_statuses\": %llu, \"base_status_errors\": %llu, "
	       "\"base_status_p50_us\": %.1f, "
	       "\"base_status_max_us\": %.1f, "
	       "\"attack_nops\": %llu, \"attack_nop_p50_us\": %.1f, "
	       "\"attack_nop_p99_us\": %.1f, \"attack_nop_max_us\": %.1f, "
	       "\"attack_statuses\": %llu, \"attack_status_errors\": %llu, "
	       "\"attack_status_p50_us\": %.1f, "
	       "\"attack_status_max_us\": %.1f, "
	       "\"nop_p50_vs_base\": %.3f, \"nop_p99_vs_base\": %.3f, "
	       "\"nop_max_vs_base\": %.3f, \"status_p50_vs_base\": %.3f, "
	       "\"status_max_vs_base\": %.3f, "
	       "\"rounds\": %llu, \"hellos_sent\": %llu, "
	       "\"hellos_unsent\": %llu, \"refused\": %llu, "
	       "\"evicted\": %llu, \"set_up\": %lld, \"sessions_peak\": %llu, "
	       "\"reserved_bytes\": %llu, \"reserved_bytes_after\": %llu, "
	       "\"releasing_bytes_after\": %llu, \"settle_ms\": %.1f}\n",
	       (unsigned long long)cfg->hellos, (unsigned long long)cfg->quota,
	       (unsigned long long)x->before.pool,
	       (unsigned long long)cfg->seconds,
	       cfg->connect ? "false" : "true",
	       own->cpu >= 0 ? "true" : "false", (unsigned long long)b->nops,
	       b->nop_p50, b->nop_p99, b->nop_max,
	       (unsigned long long)b->statuses,
	       (unsigned long long)b->status_errors, b->status_p50,
	       b->status_max, (unsigned long long)a->nops, a->nop_p50,
	       a->nop_p99, a->nop_max, (unsigned long long)a->statuses,
	       (unsigned long long)a->status_errors, a->status_p50,
	       a->status_max, a->nop_p50 / b->nop_p50, a->nop_p99 / b->nop_p99,
	       a->nop_max / b->nop_max, a->status_p50 / b->status_p50,
	       a->status_max / b->status_max, (unsigned long long)x->a.rounds,
	       (unsigned long long)x->a.sent, (unsigned long long)x->a.unsent,
	       (unsigned long long)x->refused, (unsigned long long)x->evicted,
	       x->set_up, (unsigned long long)x->sessions_peak,
	       (unsigned long long)x->before.reserved,
	       (unsigned long long)x->after.reserved,
	       (unsigned long long)x->after.releasing, x->settle_ms);
}

static void row(const char *name, double base, double attack)
{
	printf("%-24s %12.1f %12.1f %11.2fx\n", name, base, attack,
	       attack / base);
}

static void print_table(const struct hangup_cfg *cfg,
			const struct own_kvmemd *own, const char *where,
			const struct results *x)
{
	const struct lat *b = &x->base, *a = &x->attack;

	printf("kvmem-bench hangup: %s, pool %llu MiB\n", where,
	       (unsigned long long)(x->before.pool >> 20));
	if (own->cpu >= 0)
		printf("this program (and the attacker) on CPU %d, kvmemd on "
		       "CPU %d\n",
		       own->cpu, own->peer_cpu);
	else
		printf("not pinned: the scheduler places both ends\n");
	printf("the attack: rounds of %llu hellos of %llu MiB, each hung up "
	       "once sent, %d ms apart\n",
	       (unsigned long long)cfg->hellos,
	       (unsigned long long)(cfg->quota >> 20), ROUND_PERIOD_MS);
	printf("%llu s without it, then %llu s with it: a NOP every %d us, a "
	       "status every %d ms\n\n",
	       (unsigned long long)cfg->seconds,
	       (unsigned long long)cfg->seconds, NOP_PERIOD_US,
	       STATUS_PERIOD_MS);
	printf("%-24s %12s %12s %12s\n", "round trip", "baseline", "attack",
	       "vs baseline");
	printf("%-24s %12llu %12llu\n", "NOPs", (unsigned long long)b->nops,
	       (unsigned long long)a->nops);
	row("NOP p50 us", b->nop_p50, a->nop_p50);
	row("NOP p99 us", b->nop_p99, a->nop_p99);
	row("NOP max us", b->nop_max, a->nop_max);
	printf("%-24s %12llu %12llu\n", "statuses answered",
	       (unsigned long long)b->statuses,
	       (unsigned long long)a->statuses);
	printf("%-24s %12llu %12llu\n", "statuses unanswered",
	       (unsigned long long)b->status_errors,
	       (unsigned long long)a->status_errors);
	row("status p50 us", b->status_p50, a->status_p50);
	row("status max us", b->status_max, a->status_max);
	printf("\nthe attack: %llu hellos sent in %llu rounds, %llu not "
	       "connected; kvmemd refused %llu,\nevicted %llu, and set up an "
	       "arena for %lld (at most %llu sessions at once)\n",
	       (unsigned long long)x->a.sent, (unsigned long long)x->a.rounds,
	       (unsigned long long)x->a.unsent, (unsigned long long)x->refused,
	       (unsigned long long)x->evicted, x->set_up,
	       (unsigned long long)x->sessions_peak);
	printf("the pool: %llu bytes reserved before, %llu after, back "
	       "%.0f ms after the attack\n",
	       (unsigned long long)x->before.reserved,
	       (unsigned long long)x->after.reserved, x->settle_ms);
}

/* ---- the run ---------------------------------------------------------- */

/*
 * Warm up, the baseline, then the attack and the pool's return. The
 * attacker is told to start (@ctl) and reaped here.
 */
static int measure(struct kvmem_cache *c, const char *admin, pid_t attacker_pid,
		   int ctl, struct window *w, struct results *x)
{
	uint64_t seq = 0, t;
	char reply[REPLY_BYTES];
	int ret = 0, i;

	for (i = 0; i < WARM_NOPS && !ret; i++)
		ret = bench_nop(c, seq++);
	if (!ret) {
		ret = bench_admin(admin, "status", reply, sizeof(reply),
				  WAIT_MS);
		if (ret)
			admin_fail("status", admin, ret, reply);
	}
	if (!ret)
		ret = daemon_view(admin, &x->before, 0);
	if (!ret)
		ret = window_run(c, admin, &seq, w);
	if (ret) {
		attacker_end(attacker_pid, ctl, NULL);
		return ret;
	}
	window_lat(w, &x->base);

	if (send(ctl, "", 1, MSG_NOSIGNAL) != 1) {
		fprintf(stderr, "kvmem-bench: the attacker is gone\n");
		attacker_end(attacker_pid, ctl, NULL);
		return -EIO;
	}
	ret = window_run(c, admin, &seq, w);
	t = bench_now_ns();
	if (attacker_end(attacker_pid, ctl, &x->a) && !ret)
		ret = -EIO;
	if (ret)
		return ret;
	x->sessions_peak = w->sessions_peak;
	window_lat(w, &x->attack);
	ret = pool_back(admin, &x->before, &x->after);
	x->settle_ms = (double)(bench_now_ns() - t) / 1e6;
	x->refused = x->after.refused - x->before.refused;
	x->evicted = x->after.evicted - x->before.evicted;
	x->set_up = (long long)x->a.sent - (long long)x->refused -
		    (long long)x->evicted;
	return ret;
}

static int run_hangup(int argc, char **argv)
{
	struct hangup_cfg cfg = {
		.hellos = DEFAULT_HELLOS,
		.quota = DEFAULT_QUOTA,
		.seconds = DEFAULT_SECONDS,
	};
	struct kvmem_geometry g = geometry();
	struct kvmem_connect_opts o = { .quota_bytes = POLITE_QUOTA };
	char set[3][64], where[PATH_MAX + 64];
	const char *const settings[] = { set[0], set[1], set[2], NULL };
	const char *sock, *admin;
	struct own_kvmemd own = { .cpu = -1, .peer_cpu = -1 };
	struct kvmem_cache *c = NULL;
	struct results x = { 0 };
	struct window w = { 0 };
	int ret, ctl = -1;
	pid_t pid = 0;

	ret = parse_cfg(argc, argv, &cfg);
	if (ret)
		return ret == 1 ? 0 : ret;
	if (!cfg.connect && size_pool(&cfg))
		return 1;
	w.nop_cap = cfg.seconds * (1000000 / NOP_PERIOD_US);
	w.status_cap = cfg.seconds * (1000 / STATUS_PERIOD_MS);
	w.nop = bench_alloc(w.nop_cap * sizeof(*w.nop));
	w.status = bench_alloc(w.status_cap * sizeof(*w.status));

	if (cfg.connect) {
		sock = cfg.connect;
		admin = cfg.admin;
	} else {
		snprintf(set[0], sizeof(set[0]), "pool.host_bytes=%llu",
			 (unsigned long long)cfg.pool);
		snprintf(set[1], sizeof(set[1]), "pool.session_max_bytes=%llu",
			 (unsigned long long)cfg.quota);
		snprintf(set[2], sizeof(set[2]),
			 "pool.session_default_bytes=%llu", POLITE_QUOTA);
		ret = own_kvmemd_start(&own, cfg.kvmemd, !cfg.no_pin, settings);
		if (ret)
			goto out;
		sock = own.sock;
		admin = own.admin;
	}
	snprintf(where, sizeof(where), "%s %s",
		 cfg.connect ? "kvmemd at" : "kvmemd started here at", sock);

	/* Before the polite session and the prober's thread: the attacker
	 * holds neither. */
	ret = attacker_start(&cfg, sock, &pid, &ctl);
	if (ret)
		goto out;
	ret = own_kvmemd_connect(sock, cfg.connect ? NULL : &own, &g, &o, &c);
	if (ret)
		attacker_end(pid, ctl, NULL);
	else
		ret = measure(c, admin, pid, ctl, &w, &x);
out:
	kvmem_close(c);
	if (!cfg.connect && own_kvmemd_stop(&own, ret))
		ret = -EIO;
	free(w.nop);
	free(w.status);
	if (ret)
		return 1;
	if (cfg.json)
		print_json(&cfg, &own, &x);
	else
		print_table(&cfg, &own, where, &x);
	return 0;
}

const struct bench_cmd bench_hangup = {
	.name = "hangup",
	.summary = "others' NOP and status while a client hangs up in set-up",
	.run = run_hangup,
};
