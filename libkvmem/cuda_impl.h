/*
 * cuda_impl.h - libkvmem's CUDA front end and the backends that run it
 *
 * The public calls (kvmem/cuda.h) check their arguments, size the launches
 * and fill each kernel's parameter block; a backend runs the launch. The
 * driver backend (cuda.c) calls cuLaunchKernel; the tests' backend runs
 * the same kernels on host threads (tests/simt), so everything but the
 * driver itself is tested without a GPU.
 */
#ifndef KVMEM_CUDA_IMPL_H
#define KVMEM_CUDA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "kvmem/cuda.h"

enum kvmem__kernel {
	KVMEM__K_ENCODE,
	KVMEM__K_ATTEND,
	KVMEM__K_COMBINE,
	KVMEM__K_SCRUB,
	KVMEM__K_INJECT,
	KVMEM__K_NR,
};

struct kvmem__cuda_backend {
	/* Launch @kernel with one parameter block; 0 or -EIO. */
	int (*launch)(struct kvmem_cuda *cu, int kernel, unsigned int gx,
		      unsigned int gy, unsigned int gz, unsigned int smem,
		      const void *params, size_t size, void *stream);
	void (*close)(struct kvmem_cuda *cu);
};

struct kvmem_cuda {
	const struct kvmem__cuda_backend *be;
	void *priv; /* the backend's */
	unsigned int sms; /* multiprocessors: how many CTAs keep it busy */
	unsigned int smem_max; /* dynamic shared memory a CTA may have */
	char name[128];
};

/* Set kvmem_cuda_error() for this thread; returns @err. */
int kvmem__cuda_fail(int err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif /* KVMEM_CUDA_IMPL_H */
