/* SPDX-License-Identifier: MIT */
/*
 * fatbin_none.c - what libkvmem carries when the build had no nvcc: no
 * kernels, which kvmem_cuda_open() reports as -EOPNOTSUPP
 */
#include <stddef.h>

extern const unsigned char kvmem__fatbin[];
extern const size_t kvmem__fatbin_size;

const unsigned char kvmem__fatbin[1];
const size_t kvmem__fatbin_size;
