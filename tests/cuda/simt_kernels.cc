/* SPDX-License-Identifier: MIT */
/*
 * simt_kernels.cc - the kernels of kernels/, compiled unchanged as C++ and
 * run by the CPU executor of tests/simt
 *
 * kvmem__simt_run() is the fake driver's cuLaunchKernel (fakecuda.h): it
 * takes the parameter block libkvmem's driver code passes and runs the
 * kernel of that name as a grid of CTAs on host threads.
 */
#include <string.h>

#include "simt.h"

#include "kvmem.cu"

/* The fast kernel's word helpers, for check_cuda.c to test on their own. */
extern "C" uint32_t kvmem__simt_h8x4_dirty(uint32_t w, int ext)
{
	return ext ? kvmem_k_h8x4_dirty<1>(w) : kvmem_k_h8x4_dirty<0>(w);
}

extern "C" uint32_t kvmem__simt_h16(uint32_t w, int hi)
{
	return kvmem_k_h16(w, hi);
}

template <typename P>
static int run(void (*k)(P), unsigned int gx, unsigned int gy, unsigned int gz,
	       unsigned int block, unsigned int smem, const void *params)
{
	P p;

	memcpy(&p, params, sizeof(p));
	return simt_launch(k, dim3(gx, gy, gz), dim3(block), smem, p);
}

extern "C" int kvmem__simt_run(const char *kernel, unsigned int gx,
			       unsigned int gy, unsigned int gz,
			       unsigned int block, unsigned int smem,
			       void *params)
{
	if (!strcmp(kernel, "kvmem_k_encode"))
		return run(kvmem_k_encode, gx, gy, gz, block, smem, params);
	if (!strcmp(kernel, "kvmem_k_attend"))
		return run(kvmem_k_attend, gx, gy, gz, block, smem, params);
	if (!strcmp(kernel, "kvmem_k_attend_q4"))
		return run(kvmem_k_attend_q4, gx, gy, gz, block, smem, params);
	if (!strcmp(kernel, "kvmem_k_attend_q4w"))
		return run(kvmem_k_attend_q4w, gx, gy, gz, block, smem, params);
	if (!strcmp(kernel, "kvmem_k_combine"))
		return run(kvmem_k_combine, gx, gy, gz, block, smem, params);
	if (!strcmp(kernel, "kvmem_k_scrub"))
		return run(kvmem_k_scrub, gx, gy, gz, block, smem, params);
	if (!strcmp(kernel, "kvmem_k_inject"))
		return run(kvmem_k_inject, gx, gy, gz, block, smem, params);
	if (!strcmp(kernel, "kvmem_k_crc"))
		return run(kvmem_k_crc, gx, gy, gz, block, smem, params);
	if (!strcmp(kernel, "kvmem_k_attend_f16"))
		return run(kvmem_k_attend_f16, gx, gy, gz, block, smem, params);
	return -1;
}
