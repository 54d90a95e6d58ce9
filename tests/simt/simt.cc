/* SPDX-License-Identifier: MIT */
/*
 * simt.cc - the CTA executor: CUDA kernels on host threads (see simt.h)
 *
 * A launch starts one pthread per thread of a block and runs every block
 * of the grid on them, one block after another. Before a block, each
 * thread waits at a gate of its own; the last thread to leave a block opens
 * the gates for the next one, so no thread learns through the gates what
 * another did in the new block.
 *
 * Happens-before is exactly the kernel's, because ThreadSanitizer is the
 * point: __syncthreads() goes through the block's mutex and its count of
 * completed barriers (released by the last thread in, acquired by the
 * others), a warp operation through its warp's mutex and each lane's state
 * (released by the lane that completes it) only, atomics are relaxed. A
 * missing __syncthreads between two warps therefore stays a race even when
 * both warps shuffle. (Two things order more than CUDA does: a thread
 * leaving the kernel takes its warp's mutex, and the lanes of one warp
 * share one mutex whatever their masks.) Released threads wake from a
 * futex, each on its own: waking a block's threads on a condition variable
 * queued them for its mutex again, one context switch after the other.
 *
 * The checks are exact, not timeouts. Each lane has a state (running,
 * waiting in a warp operation, at a __syncthreads, exited), changed under
 * its warp's mutex. A warp operation completes when every lane of its mask
 * waits in it with the same call site and mask. When a lane arrives
 * somewhere or exits, it looks at the lanes of its warp it could wait for
 * (those of its mask) and those that could wait for it (whose masks name
 * it); any of them waiting at another site, with another mask, at a
 * __syncthreads, or exited means the operation can never complete: that
 * is reported at once as divergent or as a deadlock. A __syncthreads
 * completes when every thread of the block is in it; threads at two call
 * sites, or a thread exiting while others are in one (or arriving after
 * one exited), are divergent. Between them these cover every state in
 * which all live threads wait and none can go on.
 *
 * Lock order: launch_mu, then a block's mu, then a warp's mu or a gate;
 * fail_mu last. The fields a report prints are relaxed atomics, so a
 * report reads them without taking the locks other threads may hold.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "simt.h"

constinit thread_local uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

#define SIMT_MAX_THREADS 1024u
#define SIMT_MAX_DYN_SMEM (228u << 10)
#define SIMT_STACK (256u << 10)

#define GATE_CLOSED UINT64_MAX
#define GATE_STOP (UINT64_MAX - 1)

#define RD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define WR(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

enum lane_state {
	LANE_RUNNING,
	LANE_WARP, /* waiting in a warp operation */
	LANE_BARRIER, /* waiting in a __syncthreads */
	LANE_EXITED,
};

/* state, op, file, line and mask: relaxed atomics (reports). */
struct lane {
	int state, op, line;
	const char *file;
	unsigned int mask;
	int arg, width;
	uint64_t val, res;
};

struct warp {
	pthread_mutex_t mu;
	uint32_t done; /* bumped when an operation completes (futex) */
	unsigned int nlanes;
	struct lane lane[32];
};

struct launch;

struct thr {
	pthread_t pt;
	struct launch *l;
	struct warp *w;
	unsigned int tid, lane;
	uint3 idx;
	/* The gate: the next block to run, GATE_CLOSED or GATE_STOP. */
	pthread_mutex_t gmu;
	pthread_cond_t gcv;
	uint64_t go;
};

struct launch {
	void (*fn)(void *);
	void *ctx;
	dim3 grid, block;
	unsigned int nthreads, nwarps;
	uint64_t nblocks, cur;
	uint3 bidx;
	void *dyn;
	size_t dyn_size;

	/* mu protects the rest: the __syncthreads and the exits. */
	pthread_mutex_t mu;
	unsigned int nexited, nbar;
	uint32_t bar_gen; /* completed __syncthreads (futex) */
	int bar_op, bar_line, bar_res;
	const char *bar_file;
	unsigned int bar_count;

	struct warp *warps;
	struct thr *thr;
};

static pthread_mutex_t launch_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t fail_mu = PTHREAD_MUTEX_INITIALIZER;
static thread_local struct thr *self;
static unsigned int inject_create_failure; /* thread number + 1 */

/* Sleep while *@word is @val; wake every sleeper on @word. */
static void futex_wait(uint32_t *word, uint32_t val)
{
	syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(uint32_t *word)
{
	syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static const char *const op_name[] = {
	[SIMT__SYNCTHREADS] = "__syncthreads",
	[SIMT__SYNCTHREADS_COUNT] = "__syncthreads_count",
	[SIMT__SYNCTHREADS_AND] = "__syncthreads_and",
	[SIMT__SYNCTHREADS_OR] = "__syncthreads_or",
	[SIMT__SYNCWARP] = "__syncwarp",
	[SIMT__SHFL] = "__shfl_sync",
	[SIMT__SHFL_UP] = "__shfl_up_sync",
	[SIMT__SHFL_DOWN] = "__shfl_down_sync",
	[SIMT__SHFL_XOR] = "__shfl_xor_sync",
	[SIMT__BALLOT] = "__ballot_sync",
	[SIMT__ANY] = "__any_sync",
	[SIMT__ALL] = "__all_sync",
	[SIMT__MMA_F16] = "mma.sync.m16n8k16",
};

static bool same_site(const char *f1, int l1, const char *f2, int l2)
{
	return l1 == l2 && (f1 == f2 || !strcmp(f1, f2));
}

/* ---- reports ---------------------------------------------------------- */

static int describe(char *buf, size_t len, const struct lane *ln)
{
	int st = RD(ln->state), op = RD(ln->op);

	switch (st) {
	case LANE_WARP:
		return snprintf(buf, len, "in %s(0x%08x) at %s:%d", op_name[op],
				RD(ln->mask), RD(ln->file), RD(ln->line));
	case LANE_BARRIER:
		return snprintf(buf, len, "in %s at %s:%d", op_name[op],
				RD(ln->file), RD(ln->line));
	case LANE_EXITED:
		return snprintf(buf, len, "exited");
	default:
		return snprintf(buf, len, "running");
	}
}

/* Where every thread of the block is, in runs of the same place. */
static void dump(const struct launch *l)
{
	char cur[512], next[512];
	unsigned int from = 0, t;

	fprintf(stderr,
		"simt: block (%u,%u,%u) of grid (%u,%u,%u), threads "
		"(%u,%u,%u)%s:\n",
		l->bidx.x, l->bidx.y, l->bidx.z, l->grid.x, l->grid.y,
		l->grid.z, l->block.x, l->block.y, l->block.z,
		l->block.y * l->block.z > 1 ? " numbered x + y * X + z * X * Y"
					    : "");
	describe(cur, sizeof(cur), &l->warps[0].lane[0]);
	for (t = 1; t <= l->nthreads; t++) {
		if (t < l->nthreads) {
			describe(next, sizeof(next),
				 &l->warps[t / 32].lane[t % 32]);
			if (!strcmp(cur, next))
				continue;
		}
		if (t - 1 == from)
			fprintf(stderr, "simt:   thread %u: %s\n", from, cur);
		else
			fprintf(stderr, "simt:   threads %u-%u: %s\n", from,
				t - 1, cur);
		from = t;
		memcpy(cur, next, sizeof(cur));
	}
}

/*
 * Report what went wrong at @file:@line in the block of @l and abort. The
 * first report wins: fail_mu is never released.
 */
[[noreturn]] __attribute__((format(printf, 4, 5))) static void
fail(const struct launch *l, const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&fail_mu);
	fprintf(stderr, "simt: %s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (l)
		dump(l);
	fflush(stderr);
	abort();
}

static struct thr *self_at(const char *what, const char *file, int line)
{
	if (!self)
		fail(NULL, file, line, "%s outside a kernel", what);
	return self;
}

/* ---- __syncthreads and exits -------------------------------------- */

/*
 * Lanes of @w other than @i waiting in a warp operation whose mask names
 * lane @i: they wait for it, so it must not go elsewhere. The caller holds
 * w->mu; @what says where lane @i goes.
 */
static void __check_waiters(const struct launch *l, struct warp *w,
			    unsigned int i, const char *what, bool deadlock)
{
	unsigned int j;

	for (j = 0; j < w->nlanes; j++) {
		struct lane *ln = &w->lane[j];

		if (j == i || ln->state != LANE_WARP || !(ln->mask >> i & 1))
			continue;
		fail(l, ln->file, ln->line,
		     "%s %s: lane %u waits here for lane %u of its warp "
		     "(thread %u), which %s",
		     deadlock ? "deadlock in" : "divergent", op_name[ln->op], j,
		     i, (unsigned int)(w - l->warps) * 32 + i, what);
	}
}

/* Every lane of the block back to running; the caller holds l->mu. */
static void __release_lanes(struct launch *l)
{
	unsigned int i, j;

	for (i = 0; i < l->nwarps; i++) {
		struct warp *w = &l->warps[i];

		pthread_mutex_lock(&w->mu);
		for (j = 0; j < w->nlanes; j++)
			WR(w->lane[j].state, (int)LANE_RUNNING);
		pthread_mutex_unlock(&w->mu);
	}
}

int simt__bar(int op, int pred, const char *file, int line)
{
	struct thr *t = self_at(op_name[op], file, line);
	struct launch *l = t->l;
	struct warp *w = t->w;
	struct lane *me = &w->lane[t->lane];
	uint32_t gen;
	int res;

	pthread_mutex_lock(&l->mu);
	pthread_mutex_lock(&w->mu);
	WR(me->op, op);
	WR(me->file, file);
	WR(me->line, line);
	WR(me->mask, 0u);
	WR(me->state, (int)LANE_BARRIER);
	__check_waiters(l, w, t->lane, "is in a __syncthreads instead", true);
	pthread_mutex_unlock(&w->mu);

	if (l->nexited)
		fail(l, file, line,
		     "divergent %s: thread %u arrives after %u of the "
		     "block's %u threads exited",
		     op_name[op], t->tid, l->nexited, l->nthreads);
	if (!l->nbar) {
		l->bar_op = op;
		l->bar_file = file;
		l->bar_line = line;
		l->bar_count = 0;
	} else if (op != l->bar_op ||
		   !same_site(file, line, l->bar_file, l->bar_line)) {
		fail(l, file, line,
		     "divergent %s: thread %u is here while %u thread(s) "
		     "wait in %s at %s:%d",
		     op_name[op], t->tid, l->nbar, op_name[l->bar_op],
		     l->bar_file, l->bar_line);
	}
	l->bar_count += pred;
	if (++l->nbar == l->nthreads) {
		if (op == SIMT__SYNCTHREADS_COUNT)
			l->bar_res = (int)l->bar_count;
		else if (op == SIMT__SYNCTHREADS_AND)
			l->bar_res = l->bar_count == l->nthreads;
		else if (op == SIMT__SYNCTHREADS_OR)
			l->bar_res = l->bar_count != 0;
		else
			l->bar_res = 0;
		__release_lanes(l);
		l->nbar = 0;
		res = l->bar_res;
		/* What each thread did before it came: they all took l->mu
		 * on the way in, and the others acquire this. */
		__atomic_store_n(&l->bar_gen, l->bar_gen + 1, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&l->mu);
		futex_wake(&l->bar_gen);
		return res;
	}
	gen = l->bar_gen;
	pthread_mutex_unlock(&l->mu);
	while (__atomic_load_n(&l->bar_gen, __ATOMIC_ACQUIRE) == gen)
		futex_wait(&l->bar_gen, gen);
	/* Stays until all have left: the next barrier needs them all. */
	return l->bar_res;
}

static void gate_open(struct thr *t, uint64_t block)
{
	pthread_mutex_lock(&t->gmu);
	t->go = block;
	pthread_cond_signal(&t->gcv);
	pthread_mutex_unlock(&t->gmu);
}

static uint64_t gate_wait(struct thr *t)
{
	uint64_t b;

	pthread_mutex_lock(&t->gmu);
	while (t->go == GATE_CLOSED)
		pthread_cond_wait(&t->gcv, &t->gmu);
	b = t->go;
	t->go = GATE_CLOSED;
	pthread_mutex_unlock(&t->gmu);
	return b;
}

/*
 * Block @l->cur from its linear number; its dynamic shared memory reset.
 * The caller holds l->mu, or no thread has started yet.
 */
static void __enter_block(struct launch *l)
{
	uint64_t b = l->cur;

	l->bidx.x = (unsigned int)(b % l->grid.x);
	b /= l->grid.x;
	l->bidx.y = (unsigned int)(b % l->grid.y);
	l->bidx.z = (unsigned int)(b / l->grid.y);
	if (l->dyn_size)
		memset(l->dyn, 0xa5, l->dyn_size);
}

/* The last thread left the block: the next one, or the end; l->mu held. */
static void __next_block(struct launch *l)
{
	unsigned int i;

	l->nexited = 0;
	__release_lanes(l);
	if (++l->cur < l->nblocks)
		__enter_block(l);
	for (i = 0; i < l->nthreads; i++)
		gate_open(&l->thr[i], l->cur < l->nblocks ? l->cur : GATE_STOP);
}

static void thread_exit(struct thr *t)
{
	struct launch *l = t->l;
	struct warp *w = t->w;

	pthread_mutex_lock(&l->mu);
	pthread_mutex_lock(&w->mu);
	WR(w->lane[t->lane].state, (int)LANE_EXITED);
	__check_waiters(l, w, t->lane, "exited", false);
	pthread_mutex_unlock(&w->mu);
	if (l->nbar)
		fail(l, l->bar_file, l->bar_line,
		     "divergent %s: thread %u exited while %u thread(s) "
		     "wait here",
		     op_name[l->bar_op], t->tid, l->nbar);
	if (++l->nexited == l->nthreads)
		__next_block(l);
	pthread_mutex_unlock(&l->mu);
}

static void *thread_main(void *arg)
{
	struct thr *t = static_cast<struct thr *>(arg);

	self = t;
	threadIdx = t->idx;
	while (gate_wait(t) != GATE_STOP) {
		blockIdx = t->l->bidx;
		t->l->fn(t->l->ctx);
		thread_exit(t);
	}
	self = NULL;
	return NULL;
}

/* ---- warp operations ------------------------------------------------ */

/* The lane whose value lane @j of a shuffle gets (CUDA's rules). */
static unsigned int shfl_src(const struct lane *ln, unsigned int j)
{
	long seg = (long)(j & ~(unsigned int)(ln->width - 1));
	long src;

	switch (ln->op) {
	case SIMT__SHFL:
		return (unsigned int)(seg + (ln->arg & (ln->width - 1)));
	case SIMT__SHFL_UP:
		src = (long)j - (long)(unsigned int)ln->arg;
		return src < seg ? j : (unsigned int)src;
	case SIMT__SHFL_DOWN:
		src = (long)j + (long)(unsigned int)ln->arg;
		return src >= seg + ln->width ? j : (unsigned int)src;
	default: /* SIMT__SHFL_XOR: earlier segments, not later ones */
		src = (long)(j ^ (unsigned int)ln->arg);
		return src >= seg + ln->width ? j : (unsigned int)src;
	}
}

/* An FP16 value, exactly. */
static double half_value(uint16_t h)
{
	const int e = h >> 10 & 0x1f, m = h & 0x3ff;
	double v;

	if (e == 31)
		v = m ? NAN : INFINITY;
	else
		v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
	return h & 0x8000 ? -v : v;
}

/* Element @i (0..7 of a, 0..3 of b) of a lane's mma fragment. */
static double frag(const uint32_t *r, unsigned int i)
{
	return half_value((uint16_t)(r[i / 2] >> (16 * (i % 2))));
}

/* D = A.B + C of a warp's simt__mma fragments (simt.h); w->mu held. */
static void mma_f16(struct warp *w)
{
	double a[16][16], b[16][8], s;
	float d[32][4];
	unsigned int l, g, j, i, r, n, k;

	for (l = 0; l < 32; l++) {
		const struct simt__mma *m =
			(const struct simt__mma *)(uintptr_t)w->lane[l].val;

		g = l / 4;
		j = l % 4;
		for (i = 0; i < 8; i++)
			a[g + 8 * (i / 2 % 2)][2 * j + i % 2 + 8 * (i / 4)] =
				frag(m->a, i);
		for (i = 0; i < 4; i++)
			b[2 * j + i % 2 + 8 * (i / 2)][g] = frag(m->b, i);
	}
	for (l = 0; l < 32; l++) {
		const struct simt__mma *m =
			(const struct simt__mma *)(uintptr_t)w->lane[l].val;

		for (i = 0; i < 4; i++) {
			r = l / 4 + 8 * (i / 2);
			n = 2 * (l % 4) + i % 2;
			s = m->c[i];
			for (k = 0; k < 16; k++)
				s += a[r][k] * b[k][n];
			d[l][i] = (float)s;
		}
	}
	for (l = 0; l < 32; l++)
		memcpy(((const struct simt__mma *)(uintptr_t)w->lane[l].val)->c,
		       d[l], sizeof(d[l]));
}

/* All lanes of @mask have arrived: their results; w->mu held. */
static void __warp_complete(const struct launch *l, struct warp *w,
			    unsigned int mask)
{
	unsigned int ballot = 0, j, src;

	/* simt__warp() let in only a whole warp (its mask is full). */
	if (w->lane[__builtin_ctz(mask)].op == SIMT__MMA_F16)
		mma_f16(w);
	for (j = 0; j < w->nlanes; j++)
		if ((mask >> j & 1) && w->lane[j].val)
			ballot |= 1u << j;
	for (j = 0; j < w->nlanes; j++) {
		struct lane *ln = &w->lane[j];

		if (!(mask >> j & 1))
			continue;
		switch (ln->op) {
		case SIMT__SHFL:
		case SIMT__SHFL_UP:
		case SIMT__SHFL_DOWN:
		case SIMT__SHFL_XOR:
			src = shfl_src(ln, j);
			if (!(mask >> src & 1))
				fail(l, ln->file, ln->line,
				     "%s: lane %u of warp %u reads lane %u, "
				     "which is not in mask 0x%08x",
				     op_name[ln->op], j,
				     (unsigned int)(w - l->warps), src, mask);
			ln->res = w->lane[src].val;
			break;
		case SIMT__BALLOT:
			ln->res = ballot;
			break;
		case SIMT__ANY:
			ln->res = ballot != 0;
			break;
		case SIMT__ALL:
			ln->res = ballot == mask;
			break;
		default:
			ln->res = 0;
		}
		/* The lane's result, for it to acquire. */
		__atomic_store_n(&ln->state, (int)LANE_RUNNING,
				 __ATOMIC_RELEASE);
	}
	/* After the states: a lane that sees the count sees its state. */
	__atomic_store_n(&w->done, w->done + 1, __ATOMIC_RELEASE);
}

uint64_t simt__warp(int op, unsigned int mask, uint64_t val, int arg, int width,
		    const char *file, int line)
{
	struct thr *t = self_at(op_name[op], file, line);
	struct launch *l = t->l;
	struct warp *w = t->w;
	unsigned int i = t->lane, wn = t->tid / 32, exist, j, arrived = 0;
	struct lane *me = &w->lane[i];
	uint64_t res;

	if (width < 1 || width > 32 || (width & (width - 1)))
		fail(l, file, line, "%s: width %d is not a power of 2 <= 32",
		     op_name[op], width);
	exist = w->nlanes == 32 ? ~0u : (1u << w->nlanes) - 1;

	pthread_mutex_lock(&w->mu);
	WR(me->op, op);
	WR(me->file, file);
	WR(me->line, line);
	WR(me->mask, mask);
	WR(me->state, (int)LANE_WARP);
	me->val = val;
	me->arg = arg;
	me->width = width;
	if (!(mask >> i & 1))
		fail(l, file, line,
		     "divergent %s: lane %u of warp %u (thread %u) is not in "
		     "its mask 0x%08x",
		     op_name[op], i, wn, t->tid, mask);
	if (mask & ~exist)
		fail(l, file, line,
		     "divergent %s: mask 0x%08x names lane %d of warp %u, "
		     "which does not exist (%u threads in that warp)",
		     op_name[op], mask, __builtin_ctz(mask & ~exist), wn,
		     w->nlanes);
	for (j = 0; j < w->nlanes; j++) {
		struct lane *ln = &w->lane[j];

		if (j == i)
			continue;
		if (mask >> j & 1) {
			if (ln->state == LANE_EXITED)
				fail(l, file, line,
				     "divergent %s: lane %u of warp %u "
				     "(thread %u) waits for lane %u, which "
				     "exited",
				     op_name[op], i, wn, t->tid, j);
			if (ln->state == LANE_BARRIER)
				fail(l, file, line,
				     "deadlock in %s: lane %u of warp %u "
				     "(thread %u) waits for lane %u, which "
				     "waits in %s at %s:%d",
				     op_name[op], i, wn, t->tid, j,
				     op_name[ln->op], ln->file, ln->line);
		} else if (ln->state != LANE_WARP || !(ln->mask >> i & 1)) {
			continue;
		}
		if (ln->state == LANE_WARP &&
		    (ln->op != op || ln->mask != mask ||
		     !same_site(ln->file, ln->line, file, line)))
			fail(l, file, line,
			     "divergent %s(0x%08x): lane %u of warp %u "
			     "(thread %u) is here while lane %u waits in "
			     "%s(0x%08x) at %s:%d",
			     op_name[op], mask, i, wn, t->tid, j,
			     op_name[ln->op], ln->mask, ln->file, ln->line);
		arrived += ln->state == LANE_WARP;
	}
	if (arrived + 1 == (unsigned int)__builtin_popcount(mask)) {
		__warp_complete(l, w, mask);
		res = me->res;
		pthread_mutex_unlock(&w->mu);
		futex_wake(&w->done);
		return res;
	}
	pthread_mutex_unlock(&w->mu);
	/* done first: a completion after it is seen, or wakes the wait. */
	for (;;) {
		uint32_t done = __atomic_load_n(&w->done, __ATOMIC_ACQUIRE);

		if (__atomic_load_n(&me->state, __ATOMIC_ACQUIRE) != LANE_WARP)
			return me->res;
		futex_wait(&w->done, done);
	}
}

unsigned int simt__activemask(void)
{
	struct thr *t = self_at("__activemask", __FILE__, __LINE__);
	struct warp *w = t->w;
	unsigned int m = 0, j;

	pthread_mutex_lock(&w->mu);
	for (j = 0; j < w->nlanes; j++)
		if (w->lane[j].state != LANE_EXITED)
			m |= 1u << j;
	pthread_mutex_unlock(&w->mu);
	return m;
}

void simt__fence(void)
{
	/*
	 * TSAN neither models nor accepts fences (-Wtsan); a fence orders,
	 * it does not synchronise, so the instruction alone is right.
	 */
#if defined(__SANITIZE_THREAD__) && defined(__x86_64__)
	asm volatile("mfence" ::: "memory");
#elif defined(__SANITIZE_THREAD__) && defined(__aarch64__)
	asm volatile("dmb ish" ::: "memory");
#else
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

void *simt_dyn_smem(void)
{
	return self_at("simt_dyn_smem", __FILE__, __LINE__)->l->dyn;
}

void simt__inject_create_failure(unsigned int nth)
{
	__atomic_store_n(&inject_create_failure, nth + 1, __ATOMIC_RELAXED);
}

/* ---- launches ------------------------------------------------------- */

static void launch_free(struct launch *l)
{
	unsigned int i;

	for (i = 0; i < l->nwarps; i++)
		pthread_mutex_destroy(&l->warps[i].mu);
	for (i = 0; i < l->nthreads; i++) {
		pthread_cond_destroy(&l->thr[i].gcv);
		pthread_mutex_destroy(&l->thr[i].gmu);
	}
	pthread_mutex_destroy(&l->mu);
	free(l->dyn);
	free(l->thr);
	free(l->warps);
	free(l);
}

static struct launch *launch_alloc(dim3 grid, dim3 block, size_t dyn_smem)
{
	struct launch *l = (struct launch *)calloc(1, sizeof(*l));
	unsigned int i;

	if (!l)
		return NULL;
	l->grid = grid;
	l->block = block;
	l->nblocks = (uint64_t)grid.x * grid.y * grid.z;
	l->dyn_size = dyn_smem;
	pthread_mutex_init(&l->mu, NULL);
	if (posix_memalign(&l->dyn, 16, dyn_smem ? dyn_smem : 16))
		goto err;
	i = block.x * block.y * block.z;
	l->warps = (struct warp *)calloc((i + 31) / 32, sizeof(*l->warps));
	l->thr = (struct thr *)calloc(i, sizeof(*l->thr));
	if (!l->warps || !l->thr)
		goto err;
	for (; l->nwarps < (i + 31) / 32; l->nwarps++) {
		struct warp *w = &l->warps[l->nwarps];

		pthread_mutex_init(&w->mu, NULL);
		w->nlanes = i - l->nwarps * 32 < 32 ? i - l->nwarps * 32 : 32;
	}
	for (; l->nthreads < i; l->nthreads++) {
		struct thr *t = &l->thr[l->nthreads];
		unsigned int n = l->nthreads;

		t->l = l;
		t->tid = n;
		t->w = &l->warps[n / 32];
		t->lane = n % 32;
		t->idx.x = n % block.x;
		t->idx.y = n / block.x % block.y;
		t->idx.z = n / block.x / block.y;
		t->go = GATE_CLOSED;
		pthread_mutex_init(&t->gmu, NULL);
		pthread_cond_init(&t->gcv, NULL);
	}
	return l;
err:
	launch_free(l);
	return NULL;
}

/* pthread_create() of every thread, or of none: a positive errno. */
static int launch_start(struct launch *l)
{
	unsigned int fail_at = __atomic_exchange_n(&inject_create_failure, 0,
						   __ATOMIC_RELAXED);
	pthread_attr_t attr;
	unsigned int i, j;
	int err;

	err = pthread_attr_init(&attr);
	if (err)
		return err;
	err = pthread_attr_setstacksize(&attr, SIMT_STACK);
	for (i = 0; !err && i < l->nthreads; i++) {
		if (i + 1 == fail_at)
			err = EAGAIN;
		else
			err = pthread_create(&l->thr[i].pt, &attr, thread_main,
					     &l->thr[i]);
	}
	pthread_attr_destroy(&attr);
	if (!err)
		return 0;
	/* Those started have run nothing yet: stop them at their gates. */
	for (j = 0; j + 1 < i; j++) {
		gate_open(&l->thr[j], GATE_STOP);
		pthread_join(l->thr[j].pt, NULL);
	}
	return err;
}

int simt__launch(void (*fn)(void *), void *ctx, dim3 grid, dim3 block,
		 size_t dyn_smem)
{
	uint64_t nt = (uint64_t)block.x * block.y * block.z;
	struct launch *l;
	unsigned int i;
	int err;

	if (self)
		return -EDEADLK;
	if (!nt || nt > SIMT_MAX_THREADS || block.x > 1024 || block.y > 1024 ||
	    block.z > 64)
		return -EINVAL;
	if (!grid.x || !grid.y || !grid.z || grid.x > 0x7fffffffu ||
	    grid.y > 65535 || grid.z > 65535)
		return -EINVAL;
	if (dyn_smem > SIMT_MAX_DYN_SMEM)
		return -EINVAL;

	pthread_mutex_lock(&launch_mu);
	l = launch_alloc(grid, block, dyn_smem);
	if (!l) {
		err = -ENOMEM;
		goto out;
	}
	l->fn = fn;
	l->ctx = ctx;
	blockDim = block;
	gridDim = grid;
	__enter_block(l);
	err = -launch_start(l);
	if (!err) {
		for (i = 0; i < l->nthreads; i++)
			gate_open(&l->thr[i], 0);
		for (i = 0; i < l->nthreads; i++)
			pthread_join(l->thr[i].pt, NULL);
	}
	launch_free(l);
out:
	pthread_mutex_unlock(&launch_mu);
	return err;
}
