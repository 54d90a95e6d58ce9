/* SPDX-License-Identifier: MIT */
/*
 * cuda_impl.h - between libkvmem's CUDA front end and the driver
 *
 * The public calls (kvmem/cuda.h) check their arguments, size the launches
 * and fill each kernel's parameter block (cuda.c); the driver code
 * (cuda_driver.c) loads libcuda, owns the context and runs each launch.
 * The tests put a fake libcuda under it that runs the same kernels on host
 * threads (tests/cuda), so everything but the GPU itself runs in CI.
 *
 * Included by cuda.c, cuda_driver.c and the tests; what kvmemd's GPU pool
 * uses of it is in kvmem-private.h.
 */
#ifndef KVMEM_CUDA_IMPL_H
#define KVMEM_CUDA_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "kvmem/cuda.h"
#include "kvmem-private.h"

enum kvmem__kernel {
	KVMEM__K_ENCODE,
	KVMEM__K_ATTEND,
	KVMEM__K_COMBINE,
	KVMEM__K_SCRUB,
	KVMEM__K_INJECT,
	KVMEM__K_ATTEND_F16,
	KVMEM__K_ATTEND_Q4,
	KVMEM__K_ATTEND_Q4W,
	KVMEM__K_CRC,
	KVMEM__K_NR,
};

struct kvmem__driver;

struct kvmem_cuda {
	struct kvmem__driver *drv;
	unsigned int sms; /* multiprocessors: how many CTAs keep it busy */
	unsigned int smem_optin; /* shared memory a CTA may have in all */
	/* Dynamic shared memory each kernel's CTA may have: the opt-in
	 * limit less what the kernel declares statically. */
	unsigned int smem_max[KVMEM__K_NR];
	char name[128];
	uint8_t uuid[16]; /* the device's, as nvidia-smi shows it */
	pthread_mutex_t lock; /* of caches */
	struct kvmem_cache *caches; /* registered, through ->cuda_next */
};

/* Launch @kernel, KVMEM_K_THREADS threads a CTA, with @params; 0 or -EIO. */
int kvmem__cuda_launch(struct kvmem_cuda *cu, int kernel, unsigned int gx,
		       unsigned int gy, unsigned int gz, unsigned int smem,
		       const void *params, void *stream);

/* CTAs of @kernel with @smem bytes of dynamic shared memory that one
 * multiprocessor runs at once, by the driver; 1 when it cannot say. */
unsigned int kvmem__cuda_occupancy(struct kvmem_cuda *cu, int kernel,
				   unsigned int smem);

/*
 * Where in the workspace of kvmem_cuda_attend() with @a the fast kernel
 * leaves its verdicts, a byte per (page, KV head) of the block table, 1
 * for a page it left to kvmem_k_attend (*@off); returns 1 when the fast
 * kernel runs, 0 when it does not, or a negative errno. For the tests.
 */
int kvmem__cuda_attend_flags(struct kvmem_cuda *cu,
			     const struct kvmem_geometry *g,
			     const struct kvmem_cuda_attend_args *a,
			     uint64_t *off);

/*
 * kvmem_cuda_open() with the driver library @lib and the module @image
 * (a fatbin) named: for the tests, which run the kernels on the CPU
 * behind a fake driver whether or not this build has a fatbin.
 */
int kvmem__cuda_open_image(int device, const char *lib, const void *image,
			   struct kvmem_cuda **out);

/*
 * Map the @bytes of device memory @fd shares (struct kvmem__vmm, made by
 * kvmemd: kvmem-private.h): 0, -EIO. @fd stays the caller's.
 */
int kvmem__cuda_vmm_import(struct kvmem_cuda *cu, int fd, size_t bytes,
			   struct kvmem__vmm *m);

/* Set kvmem_cuda_error() for this thread; returns @err. */
int kvmem__cuda_fail(int err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif /* KVMEM_CUDA_IMPL_H */
