/* SPDX-License-Identifier: MIT */
/*
 * version.c - the release this library is, as the Makefile's VERSION names
 * it for kvmemd, kvmemctl and the tools too
 */
#include "kvmem/kvmem.h"

#ifndef KVMEM_VERSION
#error "KVMEM_VERSION is set by the Makefile"
#endif

const char *kvmem_version(void)
{
	return KVMEM_VERSION;
}
