/* SPDX-License-Identifier: MIT */
/*
 * kvmem.cu - the one module libkvmem loads: every kernel, one fatbin
 */
#include "attend.cu"
#include "attend_q4.cu"
#include "encode.cu"
#include "scrub.cu"
#include "baseline.cu"
