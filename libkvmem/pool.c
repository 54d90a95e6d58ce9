/* SPDX-License-Identifier: MIT */
/*
 * pool.c - the small persistent thread pool a cache runs attention on
 *
 * kvmem__pool_run() runs one function on the calling thread and on up to
 * n - 1 pool threads, and returns when all have finished; the function
 * itself hands out the work (attend.c claims chunks of pages with an atomic
 * counter). Threads are created on first need, kept until the cache is
 * closed, sleep on a condition variable in between, and block every
 * signal so that the application's handlers keep running on its own
 * threads. A pool that cannot grow runs with the threads it has; with none
 * the caller does all the work. A child process after fork() has none of
 * the parent's threads: it does all the work on the calling thread.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"

#define MAX_THREADS 256

struct kvmem__pool {
	pthread_mutex_t lock;
	pthread_cond_t go, done;
	pthread_t tid[MAX_THREADS];
	unsigned int nthreads; /* started */
	unsigned long gen; /* bumped for each run */
	unsigned int active; /* threads 1..active take part in this run */
	unsigned int running; /* of those, still working */
	int stop;
	pid_t pid; /* of the process that started the threads */
	void (*fn)(void *arg, unsigned int worker);
	void *arg;
};

struct thread_arg {
	struct kvmem__pool *p;
	unsigned int id; /* 1.. */
	unsigned long seen; /* the run before its first */
};

static void *pool_thread(void *v)
{
	struct thread_arg ta = *(struct thread_arg *)v;
	struct kvmem__pool *p = ta.p;
	unsigned long seen;

	seen = ta.seen;
	free(v);
	pthread_mutex_lock(&p->lock);
	for (;;) {
		void (*fn)(void *, unsigned int);
		void *arg;

		while (!p->stop && (p->gen == seen || ta.id > p->active))
			pthread_cond_wait(&p->go, &p->lock);
		if (p->stop)
			break;
		seen = p->gen;
		fn = p->fn;
		arg = p->arg;
		pthread_mutex_unlock(&p->lock);
		fn(arg, ta.id);
		pthread_mutex_lock(&p->lock);
		if (!--p->running)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

unsigned int kvmem__cpus(void)
{
	cpu_set_t set;
	long n;

	if (!sched_getaffinity(0, sizeof(set), &set) && CPU_COUNT(&set) > 0)
		return (unsigned int)CPU_COUNT(&set);
	n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned int)n : 1;
}

/* Start threads until there are @want (the lock held, no run under way). */
static void pool_grow(struct kvmem__pool *p, unsigned int want)
{
	sigset_t all, old;

	if (want > MAX_THREADS)
		want = MAX_THREADS;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	while (p->nthreads < want) {
		struct thread_arg *ta = malloc(sizeof(*ta));

		if (!ta)
			break;
		ta->p = p;
		ta->id = p->nthreads + 1;
		ta->seen = p->gen;
		if (pthread_create(&p->tid[p->nthreads], NULL, pool_thread,
				   ta)) {
			free(ta);
			break;
		}
		p->nthreads++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

unsigned int kvmem__pool_run(struct kvmem__pool **pp, unsigned int n,
			     void (*fn)(void *arg, unsigned int worker),
			     void *arg)
{
	struct kvmem__pool *p = *pp;

	if (n > 1 && !p) {
		p = calloc(1, sizeof(*p));
		if (p && (pthread_mutex_init(&p->lock, NULL) ||
			  pthread_cond_init(&p->go, NULL) ||
			  pthread_cond_init(&p->done, NULL))) {
			free(p);
			p = NULL;
		}
		if (p)
			p->pid = getpid();
		*pp = p;
	}
	if (n <= 1 || !p || p->pid != getpid()) {
		fn(arg, 0);
		return 1;
	}
	pthread_mutex_lock(&p->lock);
	if (p->nthreads < n - 1)
		pool_grow(p, n - 1);
	p->active = n - 1 < p->nthreads ? n - 1 : p->nthreads;
	p->running = p->active;
	p->fn = fn;
	p->arg = arg;
	p->gen++;
	n = p->active + 1;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->lock);

	fn(arg, 0);

	pthread_mutex_lock(&p->lock);
	while (p->running)
		pthread_cond_wait(&p->done, &p->lock);
	pthread_mutex_unlock(&p->lock);
	return n;
}

void kvmem__pool_free(struct kvmem__pool *p)
{
	unsigned int i;

	if (!p)
		return;
	/* A child after fork() cannot join its parent's threads. */
	if (p->pid != getpid())
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = 1;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->lock);
	for (i = 0; i < p->nthreads; i++)
		pthread_join(p->tid[i], NULL);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	pthread_mutex_destroy(&p->lock);
	free(p);
}
