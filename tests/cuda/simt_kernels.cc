/*
 * simt_kernels.cc - the kernels of kernels/, compiled unchanged as C++ and
 * run by the CPU executor of tests/simt, behind the same front end
 * (libkvmem/cuda.c) the driver backend serves
 *
 * kvmem__cuda_simt() gives the tests a struct kvmem_cuda whose "device
 * memory" is host memory: device addresses are plain pointers.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "simt.h"

#include "kvmem.cu"

extern "C" {
#include "cuda_impl.h"
}

template <typename P>
static int run(void (*k)(P), unsigned int gx, unsigned int gy, unsigned int gz,
	       unsigned int smem, const void *params)
{
	P p;

	memcpy(&p, params, sizeof(p));
	return simt_launch(k, dim3(gx, gy, gz), dim3(KVMEM_K_THREADS), smem, p)
		       ? -EIO
		       : 0;
}

static int simt_backend_launch(struct kvmem_cuda *, int kernel, unsigned int gx,
			       unsigned int gy, unsigned int gz,
			       unsigned int smem, const void *params, size_t,
			       void *)
{
	switch (kernel) {
	case KVMEM__K_ENCODE:
		return run(kvmem_k_encode, gx, gy, gz, smem, params);
	case KVMEM__K_ATTEND:
		return run(kvmem_k_attend, gx, gy, gz, smem, params);
	case KVMEM__K_COMBINE:
		return run(kvmem_k_combine, gx, gy, gz, smem, params);
	case KVMEM__K_SCRUB:
		return run(kvmem_k_scrub, gx, gy, gz, smem, params);
	case KVMEM__K_INJECT:
		return run(kvmem_k_inject, gx, gy, gz, smem, params);
	}
	return -EINVAL;
}

static void simt_backend_close(struct kvmem_cuda *cu)
{
	free(cu);
}

static const struct kvmem__cuda_backend simt_backend = {
	simt_backend_launch,
	simt_backend_close,
};

/* A handle whose kernels run on the CPU: @sms and @smem as a GPU's. */
extern "C" struct kvmem_cuda *kvmem__cuda_simt(unsigned int sms,
					       unsigned int smem)
{
	struct kvmem_cuda *cu = (struct kvmem_cuda *)calloc(1, sizeof(*cu));

	if (!cu)
		return NULL;
	cu->be = &simt_backend;
	cu->sms = sms;
	cu->smem_max = smem;
	strcpy(cu->name, "simt (CPU)");
	return cu;
}
