/* SPDX-License-Identifier: MIT */
/*
 * worker.c - a fixed set of threads for work that may block
 *
 * The queue is bounded: kvmemd_workers_queue() refuses work past the depth
 * instead of letting a burst of clients grow it. Finished work goes on a
 * done list and an eventfd wakes the event loop, which reaps it; a worker
 * never calls back into the loop's data.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "kvmemd.h"

struct kvmemd_workers {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct kvmemd_work *head, **tail; /* queued, under lock */
	struct kvmemd_work *done; /* finished, under lock */
	unsigned int inflight, depth; /* queued + running, under lock */
	int stopping; /* under lock */
	int efd;
	unsigned int nthreads;
	pthread_t threads[];
};

static void *worker_main(void *arg)
{
	struct kvmemd_workers *wp = arg;
	struct kvmemd_work *w;

	pthread_mutex_lock(&wp->lock);
	for (;;) {
		while (!wp->head && !wp->stopping)
			pthread_cond_wait(&wp->cond, &wp->lock);
		if (!wp->head)
			break;
		w = wp->head;
		wp->head = w->next;
		if (!wp->head)
			wp->tail = &wp->head;
		pthread_mutex_unlock(&wp->lock);

		w->fn(w);

		pthread_mutex_lock(&wp->lock);
		w->next = wp->done;
		wp->done = w;
		wp->inflight--;
		if (eventfd_write(wp->efd, 1))
			kvmemd_log(LOG_ERR, "worker: eventfd write failed");
	}
	pthread_mutex_unlock(&wp->lock);
	return NULL;
}

int kvmemd_workers_start(unsigned int threads, unsigned int depth,
			 struct kvmemd_workers **out)
{
	struct kvmemd_workers *wp;
	unsigned int i;
	int ret;

	wp = calloc(1, sizeof(*wp) + threads * sizeof(wp->threads[0]));
	if (!wp)
		return -ENOMEM;
	pthread_mutex_init(&wp->lock, NULL);
	pthread_cond_init(&wp->cond, NULL);
	wp->tail = &wp->head;
	wp->depth = depth;
	wp->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (wp->efd < 0) {
		ret = -errno;
		goto err_free;
	}
	for (i = 0; i < threads; i++) {
		ret = -pthread_create(&wp->threads[i], NULL, worker_main, wp);
		if (ret)
			goto err_threads;
		wp->nthreads++;
	}
	*out = wp;
	return 0;

err_threads:
	kvmemd_workers_free(wp);
	return ret;
err_free:
	free(wp);
	return ret;
}

/*
 * Queue @w unless the workers stop, or (@bounded) @depth items are queued
 * or running: 0, -ESHUTDOWN or -EAGAIN.
 */
static int enqueue(struct kvmemd_workers *wp, struct kvmemd_work *w,
		   int bounded)
{
	int ret = 0;

	pthread_mutex_lock(&wp->lock);
	if (wp->stopping) {
		ret = -ESHUTDOWN;
	} else if (bounded && wp->inflight >= wp->depth) {
		ret = -EAGAIN;
	} else {
		w->next = NULL;
		*wp->tail = w;
		wp->tail = &w->next;
		wp->inflight++;
		pthread_cond_signal(&wp->cond);
	}
	pthread_mutex_unlock(&wp->lock);
	return ret;
}

int kvmemd_workers_queue(struct kvmemd_workers *wp, struct kvmemd_work *w)
{
	/* A stopping pool is as full as one can be. */
	return enqueue(wp, w, 1) ? -EAGAIN : 0;
}

int kvmemd_workers_push(struct kvmemd_workers *wp, struct kvmemd_work *w)
{
	return enqueue(wp, w, 0);
}

int kvmemd_workers_fd(const struct kvmemd_workers *wp)
{
	return wp->efd;
}

struct kvmemd_work *kvmemd_workers_reap(struct kvmemd_workers *wp)
{
	struct kvmemd_work *w;
	eventfd_t v;

	pthread_mutex_lock(&wp->lock);
	w = wp->done;
	if (w)
		wp->done = w->next;
	else
		eventfd_read(wp->efd, &v);
	pthread_mutex_unlock(&wp->lock);
	return w;
}

void kvmemd_workers_stop(struct kvmemd_workers *wp)
{
	unsigned int i;

	if (!wp)
		return;
	pthread_mutex_lock(&wp->lock);
	wp->stopping = 1;
	pthread_cond_broadcast(&wp->cond);
	pthread_mutex_unlock(&wp->lock);
	for (i = 0; i < wp->nthreads; i++)
		pthread_join(wp->threads[i], NULL);
	wp->nthreads = 0;
}

void kvmemd_workers_free(struct kvmemd_workers *wp)
{
	if (!wp)
		return;
	kvmemd_workers_stop(wp);
	close(wp->efd);
	pthread_mutex_destroy(&wp->lock);
	pthread_cond_destroy(&wp->cond);
	free(wp);
}
