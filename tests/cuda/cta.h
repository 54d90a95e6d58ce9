/*
 * cta.h - run CUDA kernel sources on the CPU: one host thread per CUDA
 * thread, a barrier per block (tests only)
 *
 * Compile a kernel source as C++ after this header. Blocks of a launch run
 * one after another and launches one at a time (a process-wide lock), so a
 * function-static array is exactly one block's __shared__ memory; it is
 * not zeroed between blocks, as on a GPU. __syncthreads() names its call
 * site: threads of a block that meet at different ones, or a thread that
 * leaves the kernel while others wait, abort the program with a message.
 * Synchronisation is pthread mutexes and condition variables only, which
 * ThreadSanitizer understands, so a missing barrier shows up as a race.
 */
#ifndef KVMEM_CTA_H
#define KVMEM_CTA_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

struct uint3 {
	unsigned int x, y, z;
};

struct dim3 {
	unsigned int x, y, z;
	dim3(unsigned int a = 1, unsigned int b = 1, unsigned int c = 1)
	    : x(a), y(b), z(c)
	{
	}
};

/* Through functions: an extern thread_local is reached through a TLS
 * wrapper that UBSan reports as a null access. */
const uint3 &cta_thread_idx(void);
const uint3 &cta_block_idx(void);
extern dim3 blockDim, gridDim;
#define threadIdx (cta_thread_idx())
#define blockIdx (cta_block_idx())

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__ static

int cta_sync(int pred, const char *file, int line, int op);
void *cta_dyn_smem(void);

#define CTA_OR 1
#define CTA_AND 2
#define CTA_COUNT 3

#define __syncthreads() ((void)cta_sync(0, __FILE__, __LINE__, 0))
#define __syncthreads_or(p) cta_sync(!!(p), __FILE__, __LINE__, CTA_OR)
#define __syncthreads_and(p) cta_sync(!!(p), __FILE__, __LINE__, CTA_AND)
#define __syncthreads_count(p) cta_sync(!!(p), __FILE__, __LINE__, CTA_COUNT)

/* Relaxed, as on the GPU: atomics order nothing else. */
static inline unsigned long long atomicAdd(unsigned long long *p,
					   unsigned long long v)
{
	return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

static inline unsigned int atomicAdd(unsigned int *p, unsigned int v)
{
	return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

/* Run @body on every thread of every block; 0 or -errno. */
typedef void (*cta_body)(void *ctx);
int cta_run(dim3 grid, dim3 block, size_t smem, cta_body body, void *ctx);

template <typename P> struct cta_call {
	void (*kernel)(P);
	P params;
	static void run(void *c)
	{
		cta_call *self = (cta_call *)c;

		self->kernel(self->params);
	}
};

template <typename P>
int cta_launch(void (*kernel)(P), dim3 grid, dim3 block, size_t smem, P p)
{
	cta_call<P> c = { kernel, p };

	return cta_run(grid, block, smem, cta_call<P>::run, &c);
}

#endif /* KVMEM_CTA_H */
