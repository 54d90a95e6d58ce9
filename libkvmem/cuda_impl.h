/*
 * cuda_impl.h - between libkvmem's CUDA front end and the driver
 *
 * The public calls (kvmem/cuda.h) check their arguments, size the launches
 * and fill each kernel's parameter block (cuda.c); the driver code
 * (cuda_driver.c) loads libcuda, owns the context and runs each launch.
 * The tests put a fake libcuda under it that runs the same kernels on host
 * threads (tests/cuda), so everything but the GPU itself runs in CI.
 */
#ifndef KVMEM_CUDA_IMPL_H
#define KVMEM_CUDA_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "kvmem/cuda.h"

enum kvmem__kernel {
	KVMEM__K_ENCODE,
	KVMEM__K_ATTEND,
	KVMEM__K_COMBINE,
	KVMEM__K_SCRUB,
	KVMEM__K_INJECT,
	KVMEM__K_ATTEND_F16,
	KVMEM__K_ATTEND_Q4,
	KVMEM__K_ATTEND_Q4W,
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
 * Device memory another process can map: the driver's virtual memory
 * management, shared as a POSIX file descriptor. kvmemd's GPU pool makes
 * it; a client maps what its session was given (kvmem_cuda_register()).
 */
struct kvmem__vmm {
	uint64_t addr; /* mapped in this process, read-write for the device */
	size_t bytes; /* 0: nothing */
	unsigned long long handle;
};

/*
 * The size such memory comes in; 0, with the reason in kvmem_cuda_error(),
 * when the GPU or its driver cannot share memory by descriptor.
 */
size_t kvmem__cuda_vmm_granularity(struct kvmem_cuda *cu);

/* Bytes of memory the GPU has; 0, with the reason in kvmem_cuda_error(),
 * when the driver does not say. */
uint64_t kvmem__cuda_total_mem(struct kvmem_cuda *cu);

/* @bytes (a multiple of the granularity) of device memory, zeroed and
 * mapped here, and a descriptor that shares it in @fd: 0, -ENOMEM, -EIO. */
int kvmem__cuda_vmm_create(struct kvmem_cuda *cu, size_t bytes,
			   struct kvmem__vmm *m, int *fd);

/* Map the @bytes @fd shares: 0, -EIO. @fd stays the caller's. */
int kvmem__cuda_vmm_import(struct kvmem_cuda *cu, int fd, size_t bytes,
			   struct kvmem__vmm *m);

/* Unmap and release; the memory is freed once no process maps it. */
void kvmem__cuda_vmm_free(struct kvmem_cuda *cu, struct kvmem__vmm *m);

/* "GPU-" and the UUID in the form nvidia-smi prints; @out of 41 bytes. */
void kvmem__cuda_uuid_str(const uint8_t uuid[16], char out[41]);

/* Set kvmem_cuda_error() for this thread; returns @err. */
int kvmem__cuda_fail(int err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif /* KVMEM_CUDA_IMPL_H */
