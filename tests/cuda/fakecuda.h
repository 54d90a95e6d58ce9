/* SPDX-License-Identifier: MIT */
/*
 * fakecuda.h - a libcuda.so.1 for machines without a GPU (fakecuda.c)
 *
 * libkvmem opens it through $KVMEM_LIBCUDA like the real driver; the test
 * opens it too, takes fakecuda_state() with dlsym and sets how the "driver"
 * behaves before kvmem_cuda_open(); in another process (kvmemd) the
 * environment sets it: FAKECUDA_DEVICES, FAKECUDA_NO_VMM,
 * FAKECUDA_MEM_LIMIT, FAKECUDA_TOTAL_MEM, FAKECUDA_NO_LOCK,
 * FAKECUDA_COPY_FAIL, FAKECUDA_COPY_FLIP and
 * FAKECUDA_SIMT, the path of
 * libkvmem-simt.so to run launches in. Device memory is host memory
 * (memory of the virtual memory API a memfd, so that its descriptor shares
 * it between processes as the driver's does), and a launch hands the
 * kernel's name and parameter block to @launch, which runs the kernels of
 * kernels/ on host threads (simt_kernels.cc: linked into the test runner,
 * and built alone as libkvmem-simt.so).
 */
#ifndef KVMEM_FAKECUDA_H
#define KVMEM_FAKECUDA_H

struct fakecuda {
	/* How the driver behaves; the test sets these. */
	int version; /* cuDriverGetVersion(): 12080 is CUDA 12.8 */
	int devices; /* 0: cuInit() fails with CUDA_ERROR_NO_DEVICE */
	int sms, smem; /* multiprocessors, opt-in shared memory per CTA */
	int static_smem; /* shared memory every kernel declares statically */
	int no_binary; /* cuModuleLoadData(): CUDA_ERROR_NO_BINARY_FOR_GPU */
	int no_occupancy; /* cuOccupancyMaxActiveBlocks...(): it fails */
	const char *missing; /* an entry point cuGetProcAddress lacks */
	long mem_limit; /* bytes cuMemAlloc gives out in all; 0: no limit */
	long total_mem; /* cuDeviceTotalMem(): 8 GiB */
	int no_lock; /* cuMemHostRegister(): CUDA_ERROR_OUT_OF_MEMORY */
	int no_vmm; /* no virtual memory management, nor its descriptors */
	int copy_fail; /* cuMemcpyAsync(): CUDA_ERROR_LAUNCH_FAILED */
	int copy_flip; /* a copy out of registered host memory arrives with
			* a bit of its middle byte flipped */
	int (*launch)(const char *kernel, unsigned int gx, unsigned int gy,
		      unsigned int gz, unsigned int block, unsigned int smem,
		      void *params);
	/* What libkvmem did with it; the fake keeps these. */
	int contexts; /* primary contexts retained and not released */
	int modules; /* modules loaded and not unloaded */
	int depth; /* contexts pushed and not popped */
	long allocated; /* bytes allocated and not freed */
	long registered; /* host bytes registered and not unregistered */
	long launches;
	long copies; /* cuMemcpyAsync() calls that copied */
	int streams; /* created and not destroyed */
	char last_kernel[64];
};

/* The fake's one state; the test finds it with dlsym. */
struct fakecuda *fakecuda_state(void);
typedef struct fakecuda *(*fakecuda_state_fn)(void);

#endif /* KVMEM_FAKECUDA_H */
