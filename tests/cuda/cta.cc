/*
 * cta.cc - the executor of cta.h
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cta.h"

static thread_local uint3 thread_idx, block_idx;
dim3 blockDim, gridDim;

const uint3 &cta_thread_idx(void)
{
	return thread_idx;
}

const uint3 &cta_block_idx(void)
{
	return block_idx;
}

static pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;

/* The block being run. */
static struct {
	pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
	unsigned int threads, arrived, exited;
	unsigned long gen;
	const char *file;
	int line, op, acc, result;
	unsigned char *smem;
	cta_body body;
	void *ctx;
} blk;

static void diverged(const char *what, const char *file, int line)
{
	fprintf(stderr,
		"cta: divergent __syncthreads in block (%u,%u,%u): %s at "
		"%s:%d\n",
		blockIdx.x, blockIdx.y, blockIdx.z, what, file, line);
	abort();
}

int cta_sync(int pred, const char *file, int line, int op)
{
	unsigned long gen;
	int r;

	pthread_mutex_lock(&blk.mu);
	if (blk.exited)
		diverged("a thread of the block has returned; another waits",
			 file, line);
	if (!blk.arrived) {
		blk.file = file;
		blk.line = line;
		blk.op = op;
		blk.acc = op == CTA_AND ? 1 : 0;
	} else if (blk.line != line || strcmp(blk.file, file)) {
		fprintf(stderr, "cta: other threads wait at %s:%d\n", blk.file,
			blk.line);
		diverged("threads at different barriers", file, line);
	}
	if (op == CTA_OR)
		blk.acc |= pred;
	else if (op == CTA_AND)
		blk.acc &= pred;
	else if (op == CTA_COUNT)
		blk.acc += pred;
	gen = blk.gen;
	if (++blk.arrived == blk.threads) {
		blk.result = blk.acc;
		blk.arrived = 0;
		blk.gen++;
		pthread_cond_broadcast(&blk.cv);
	} else {
		while (blk.gen == gen)
			pthread_cond_wait(&blk.cv, &blk.mu);
	}
	r = blk.result;
	pthread_mutex_unlock(&blk.mu);
	return r;
}

void *cta_dyn_smem(void)
{
	return blk.smem;
}

struct thread_arg {
	uint3 tid, bid;
};

static void *thread_main(void *p)
{
	struct thread_arg *a = (struct thread_arg *)p;

	thread_idx = a->tid;
	block_idx = a->bid;
	blk.body(blk.ctx);
	pthread_mutex_lock(&blk.mu);
	blk.exited++;
	if (blk.arrived)
		diverged("a thread returned while others wait", blk.file,
			 blk.line);
	pthread_mutex_unlock(&blk.mu);
	return NULL;
}

static int run_block(uint3 bid, pthread_t *th, struct thread_arg *args)
{
	pthread_attr_t attr;
	unsigned int i, started = 0;
	int ret = 0;

	blk.arrived = blk.exited = 0;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 1 << 20);
	for (i = 0; i < blk.threads; i++) {
		args[i].bid = bid;
		args[i].tid.x = i % blockDim.x;
		args[i].tid.y = i / blockDim.x % blockDim.y;
		args[i].tid.z = i / (blockDim.x * blockDim.y);
		ret = pthread_create(&th[i], &attr, thread_main, &args[i]);
		if (ret)
			break;
		started++;
	}
	pthread_attr_destroy(&attr);
	if (ret) {
		/* The started threads wait at a barrier for ever: a half
		 * run block cannot be undone. */
		fprintf(stderr, "cta: cannot start thread %u of %u: %s\n",
			started, blk.threads, strerror(ret));
		abort();
	}
	for (i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	return 0;
}

int cta_run(dim3 grid, dim3 block, size_t smem, cta_body body, void *ctx)
{
	unsigned int n = block.x * block.y * block.z, x, y, z;
	struct thread_arg *args;
	pthread_t *th;
	int ret = 0;

	if (!n || n > 1024 || smem > 228 * 1024)
		return -EINVAL;
	th = (pthread_t *)calloc(n, sizeof(*th));
	args = (struct thread_arg *)calloc(n, sizeof(*args));
	pthread_mutex_lock(&launch_lock);
	blk.smem = (unsigned char *)aligned_alloc(
		16, smem ? (smem + 15) / 16 * 16 : 16);
	if (!th || !args || !blk.smem) {
		ret = -ENOMEM;
		goto out;
	}
	blockDim = block;
	gridDim = grid;
	blk.threads = n;
	blk.body = body;
	blk.ctx = ctx;
	for (z = 0; z < grid.z && !ret; z++)
		for (y = 0; y < grid.y && !ret; y++)
			for (x = 0; x < grid.x && !ret; x++) {
				/* Garbage, so reading shared memory before
				 * writing it shows in the results. */
				memset(blk.smem, 0xa5, smem);
				ret = run_block(uint3{ x, y, z }, th, args);
			}
out:
	free(blk.smem);
	blk.smem = NULL;
	pthread_mutex_unlock(&launch_lock);
	free(th);
	free(args);
	return ret;
}
