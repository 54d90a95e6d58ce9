/* SPDX-License-Identifier: MIT */
/*
 * fatbin.S - the kernels' fatbin, embedded in libkvmem
 *
 * The build assembles this with the directory of kvmem.fatbin on the
 * assembler's include path; cuda_driver.c loads it with cuModuleLoadData.
 */
	.section .rodata
	.balign 64
	.globl kvmem__fatbin
	.type kvmem__fatbin, @object
kvmem__fatbin:
	.incbin "kvmem.fatbin"
.Lend:
	.size kvmem__fatbin, .Lend - kvmem__fatbin
	.balign 8
	.globl kvmem__fatbin_size
	.type kvmem__fatbin_size, @object
kvmem__fatbin_size:
	.quad .Lend - kvmem__fatbin
	.size kvmem__fatbin_size, 8
	.section .note.GNU-stack, "", @progbits
