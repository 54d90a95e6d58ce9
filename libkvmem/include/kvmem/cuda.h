/* SPDX-License-Identifier: MIT */
/*
 * kvmem/cuda.h - the kernels on an NVIDIA GPU: encode, decode-on-load
 * attention, scrub and error injection on device pages
 *
 * libkvmem has no link dependency on CUDA: kvmem_cuda_open() loads
 * libcuda.so.1 (the driver) with dlopen, resolves the driver API through
 * cuGetProcAddress and loads the kernels, which libkvmem carries as a fatbin
 * (sm_80, sm_90, and PTX for newer GPUs). Without a driver, a GPU, or a
 * driver new enough, it fails with a sentence in kvmem_cuda_error() and
 * everything else in libkvmem works as before.
 *
 * Pages on the device have the byte layout of kvmem/page.h. The caller owns
 * all device memory: pages, tables, inputs, outputs and the attention
 * workspace are device addresses (CUdeviceptr) on the handle's device,
 * from cudaMalloc(), the caller's own allocator, or kvmem_cuda_alloc() for
 * programs without the CUDA runtime. libkvmem keeps no pointer after a
 * call returns. Calls only enqueue work on @stream (a CUstream, NULL for
 * the default stream): results are there when the stream has run it, and
 * a fault in a kernel shows up in kvmem_cuda_sync().
 */
#ifndef KVMEM_CUDA_H
#define KVMEM_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "kvmem/inject.h"
#include "kvmem/page.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kvmem_cuda;
struct kvmem_cache;
struct kvmem_seq;

enum kvmem_cuda_dtype {
	KVMEM_CUDA_F32 = 0,
	KVMEM_CUDA_F16 = 1,
	KVMEM_CUDA_BF16 = 2,
};

/* One page of a sequence, in token order: an entry of a block table. */
struct kvmem_cuda_page {
	uint64_t addr; /* device address of the page */
	uint32_t token_start; /* position of its first token */
	uint32_t ntokens;
	uint32_t flags; /* KVMEM_HDR_HOT for FP16 (sink and tail) pages */
	uint32_t resv; /* 0 */
};

/**
 * kvmem_cuda_open() - load the driver and the kernels for one GPU
 * @device: CUDA device ordinal
 * @out: receives the handle
 *
 * Uses the device's primary context (the one the CUDA runtime uses), so
 * device memory from cudaMalloc() works with every call below.
 *
 * Return: 0; -ENODEV when there is no driver (libcuda.so.1 missing, or the
 * toolkit's stub library), no such device, or the driver fails to start;
 * -EOPNOTSUPP when libkvmem was built without nvcc, or the driver is too
 * old for the kernels; -ENOMEM. kvmem_cuda_error() says which in words.
 */
int kvmem_cuda_open(int device, struct kvmem_cuda **out);

/* Unload the kernels and release the context; @cu may be NULL. */
void kvmem_cuda_close(struct kvmem_cuda *cu);

/*
 * Why the last kvmem_cuda_*() call of this thread failed, in a sentence;
 * "" after a success.
 */
const char *kvmem_cuda_error(void);

/* The device's name ("NVIDIA H100 80GB HBM3"). */
const char *kvmem_cuda_name(const struct kvmem_cuda *cu);

/*
 * Device memory for programs without the CUDA runtime (tools, tests,
 * bindings): kvmem_cuda_alloc() returns 0 and the address in @addr,
 * -ENOMEM when the device has no @bytes free, -EINVAL, -EIO.
 * kvmem_cuda_free() takes 0 too.
 */
int kvmem_cuda_alloc(struct kvmem_cuda *cu, size_t bytes, uint64_t *addr);
void kvmem_cuda_free(struct kvmem_cuda *cu, uint64_t addr);

/*
 * Copy @bytes from @src to @dst on @stream, in any direction: addresses are
 * device addresses or host pointers ((uintptr_t)p), which unified
 * addressing tells apart. A host buffer must stay as it is until the
 * stream has run the copy. Return: 0, -EINVAL, -EIO.
 */
int kvmem_cuda_copy(struct kvmem_cuda *cu, uint64_t dst, uint64_t src,
		    size_t bytes, void *stream);

/*
 * Wait until @stream has run everything enqueued on it. Return: 0, or -EIO
 * with the driver's reason when something on it failed (a kernel that
 * faulted); the context is then unusable, as CUDA makes it.
 */
int kvmem_cuda_sync(struct kvmem_cuda *cu, void *stream);

/*
 * One page write: rows [t0, t0 + n) of the page at @page from token-major
 * K and V (token t at k + t * stride elements, [kv_heads][head_dim] each),
 * then its header (ntokens = t0 + n). A sealed page (flags without
 * KVMEM_HDR_HOT) is written whole: t0 = 0, and it gets its scales and, with
 * KVMEM_HDR_SEALED, its CRC. An FP16 page can be appended to row by row.
 * A job with n = 0, t0 + n past tokens_per_page, or a sealed page with
 * t0 > 0 writes nothing: its page is left as it was.
 */
struct kvmem_cuda_encode_job {
	uint64_t page;
	uint64_t k, v; /* device addresses of the first of the n tokens */
	uint64_t seq, generation; /* header fields */
	uint32_t stride; /* elements between tokens; 0: kv_heads * head_dim */
	uint32_t layer, token_start; /* header fields */
	uint32_t t0, n;
	uint32_t flags; /* KVMEM_HDR_HOT, KVMEM_HDR_SEALED */
};

/**
 * kvmem_cuda_register() - let the GPU read a cache's pages where they are
 * @cu: the handle
 * @c: an embedded cache, or one attached to kvmemd
 *
 * Locks the memory the cache keeps its pages in (its own arena, or this
 * process's mapping of the session's shared arena) and maps it for the
 * device (cuMemHostRegister, portable and device-mapped): kernels then read
 * pages over the bus without copies, at the bandwidth of the link, and
 * kvmem_cuda_seq_pages() gives their device addresses. The whole arena
 * becomes resident. A session given GPU memory by kvmemd
 * (kvmem_connect_opts.gpu_mib) has it mapped here too
 * (kvmem_cuda_session_memory()). A cache is registered with one GPU at a
 * time.
 *
 * kvmem_cuda_unregister(), kvmem_close() and kvmem_cuda_close() undo it;
 * work that reads the pages or the memory must have finished first
 * (kvmem_cuda_sync()).
 *
 * Return: 0; -EBUSY when the cache is registered already; -ENOMEM when the
 * driver cannot lock that much memory; -ENODEV when the session's GPU
 * memory is on another GPU than @cu's; -EINVAL; -EIO.
 */
int kvmem_cuda_register(struct kvmem_cuda *cu, struct kvmem_cache *c);

/**
 * kvmem_cuda_session_memory() - the GPU memory of a kvmemd session
 * @c: a cache from kvmem_connect() with gpu_mib, registered
 * @addr: receives its device address on the registered GPU
 * @bytes: receives its size: gpu_mib rounded up to the driver's unit
 *
 * The session's alone, zeroed when it was created, and the caller's to
 * lay out (pages written with kvmem_cuda_encode(), workspaces). It is
 * mapped until the cache is unregistered.
 *
 * Return: 0; -ENXIO when the session has no GPU memory; -ENOENT when the
 * cache is not registered; -EBUSY when that memory is kvmemd's GPU tier
 * (KVMEM_CONNECT_GPU_TIER); -EINVAL.
 */
int kvmem_cuda_session_memory(const struct kvmem_cache *c, uint64_t *addr,
			      size_t *bytes);

/* Undo kvmem_cuda_register(); @c may be NULL or not registered. */
void kvmem_cuda_unregister(struct kvmem_cache *c);

/**
 * kvmem_cuda_seq_pages() - the block table of a sequence in a registered
 * cache
 * @cu: the handle the cache is registered with
 * @s: the sequence; acquired here (kvmem_seq_acquire()), so its pages stay
 *     where they are until kvmem_seq_release()
 * @layer: the layer
 * @out: receives up to @cap entries, in host memory: copy them to the
 *       device for kvmem_cuda_attend() or kvmem_cuda_scrub()
 * @cap: capacity of @out
 *
 * The table is the sequence as it is now: take it again after appending.
 * In a session with the GPU tier (KVMEM_CONNECT_GPU_TIER) the call moves
 * the sealed pages into the session's GPU memory first, as far as they
 * fit (kvmemd copies them; the ones sealed since the last call too), and
 * their addresses are there; the others are read over the bus.
 *
 * Kernels launched on the table read the pages asynchronously: finish
 * them (cuStreamSynchronize() of their stream, or an event) before
 * kvmem_seq_release(). A released page may move at once, and its slot
 * hold another page, while a kernel still reads it.
 *
 * Return: the number of pages (which may exceed @cap); -ENXIO when the
 * cache is not registered with @cu; -EOPNOTSUPP when a page of the layer
 * is archived in another format or codec (kvmem_seq_archive()); -EINVAL;
 * what kvmem_seq_acquire() returns when the pages cannot be made resident.
 */
int kvmem_cuda_seq_pages(struct kvmem_cuda *cu, struct kvmem_seq *s,
			 uint32_t layer, struct kvmem_cuda_page *out,
			 size_t cap);

/**
 * kvmem_cuda_encode() - quantize and encode K/V into pages
 * @cu: the handle
 * @g: the geometry of the pages
 * @dtype: enum kvmem_cuda_dtype of K and V
 * @jobs: device address of @njobs struct kvmem_cuda_encode_job
 * @njobs: number of jobs, one page each; pages must differ
 * @stream: a CUstream
 *
 * Writes exactly what kvmem_page_encode() writes from the same values.
 *
 * Return: 0, -EINVAL (bad geometry or dtype), -EOPNOTSUPP (a page's scales
 * do not fit in shared memory), -EIO when the launch fails.
 */
int kvmem_cuda_encode(struct kvmem_cuda *cu, const struct kvmem_geometry *g,
		      uint32_t dtype, uint64_t jobs, uint32_t njobs,
		      void *stream);

struct kvmem_cuda_attend_args {
	uint64_t pages; /* struct kvmem_cuda_page[total_pages] */
	uint64_t seq_pages; /* uint32_t[batch + 1]: sequence b owns pages
			     * [seq_pages[b], seq_pages[b + 1]) */
	uint64_t q; /* float [batch][nq][n_heads][head_dim] */
	uint64_t out; /* float, as q */
	uint64_t mass; /* float [total_pages]: each page's share of the
			* softmax weights, summed over query rows; or 0 */
	uint64_t stats; /* struct kvmem_attend_stats, added to; or 0 */
	uint64_t workspace; /* kvmem_cuda_attend_workspace() bytes */
	uint32_t batch;
	uint32_t n_heads; /* a multiple of kv_heads */
	uint32_t nq; /* query tokens per sequence: its last nq positions */
	uint32_t erasure; /* enum kvmem_erasure_policy */
	uint32_t total_pages;
	uint32_t max_pages; /* most pages of one sequence */
	uint32_t splits; /* CTAs per sequence and KV head; 0: chosen, for
			  * each kernel its own wave of CTAs */
	float scale; /* 0: 1 / sqrt(head_dim) */
};

/**
 * kvmem_cuda_attend_workspace() - device memory kvmem_cuda_attend() needs
 * @cu: the handle
 * @g: the geometry
 * @a: the arguments (batch, n_heads, nq, total_pages, max_pages, splits)
 * @bytes: receives the size, enough for kvmem_cuda_attend_f16() too
 *
 * Return: 0, -EINVAL, -EOPNOTSUPP (see kvmem_cuda_attend()).
 */
int kvmem_cuda_attend_workspace(struct kvmem_cuda *cu,
				const struct kvmem_geometry *g,
				const struct kvmem_cuda_attend_args *a,
				size_t *bytes);

/**
 * kvmem_cuda_attend() - decode-on-load attention for a batch of sequences
 * @cu: the handle
 * @g: the geometry
 * @a: the arguments
 * @stream: a CUstream
 *
 * kvmem_attend() on the device for every sequence and query token at once:
 * query token j of a sequence of len tokens attends positions up to
 * len - nq + j (causal). Codewords are corrected as they load; values that
 * uncorrectable words took away are rebuilt per @a->erasure from the
 * stored sequence, as kvmem_attend() does. Counts match kvmem_attend()'s
 * for each sequence, summed.
 *
 * Sealed pages of INT4 in h74, h84 or golay24 words and of INT8 in
 * secded72 words, head_dim 64 or 128, up to 32 tokens a page, group
 * scales a multiple of 4 wide, up to 8 query rows a KV head, are attended
 * by a fast kernel first, a warp a page (golay24 and secded72 pages where
 * a head's rows, one after another, end on a 16-byte boundary); the pages
 * it leaves (hot, or with a lost scale or an uncorrectable word) and every
 * other kind go to the general kernel, then a combine merges both. All
 * run on @stream; the workspace holds what passes between them.
 *
 * The block table is trusted as it is: each entry must name a page of @g
 * with 1..tokens_per_page tokens, in token order without gaps; the kernel
 * reads it in device memory and does not check it.
 *
 * Return: 0; -EINVAL (bad sizes, policy, or n_heads); -EOPNOTSUPP when the
 * geometry needs more shared memory than the GPU has (head_dim and query
 * rows too large); -EIO when the launch fails.
 */
int kvmem_cuda_attend(struct kvmem_cuda *cu, const struct kvmem_geometry *g,
		      const struct kvmem_cuda_attend_args *a, void *stream);

/**
 * kvmem_cuda_attend_f16() - the same attention over unprotected FP16 pages
 * @cu: the handle
 * @g: the geometry: kv_heads, head_dim (64, 128 or 256), tokens_per_page
 * @a: as for kvmem_cuda_attend(), with the same workspace; mass, stats and
 *     erasure are not used
 * @stream: a CUstream
 *
 * Pages here are plain FP16: K then V, each [kv_heads][tokens_per_page]
 * [head_dim], 16-byte aligned, with no header, code or scales. This is
 * the baseline kvmem's protection is measured against (kvmem-bench attend
 * --gpu), and serves KV a caller chose not to protect.
 *
 * Return: as kvmem_cuda_attend(); -EOPNOTSUPP for another head_dim.
 */
int kvmem_cuda_attend_f16(struct kvmem_cuda *cu, const struct kvmem_geometry *g,
			  const struct kvmem_cuda_attend_args *a, void *stream);

/**
 * kvmem_cuda_scrub() - check pages and correct them in place
 * @cu: the handle
 * @g: the geometry
 * @pages: device address of @npages struct kvmem_cuda_page (addr only)
 * @npages: number of pages
 * @counts: device address of @npages struct kvmem_page_counts
 * @status: device address of @npages int32_t: kvmem_page_scrub()'s return
 * @stream: a CUstream
 *
 * kvmem_page_scrub() for each page: stores only corrections, safe with
 * attention running on the same pages.
 *
 * Return: 0, -EINVAL, -EIO when the launch fails.
 */
int kvmem_cuda_scrub(struct kvmem_cuda *cu, const struct kvmem_geometry *g,
		     uint64_t pages, uint32_t npages, uint64_t counts,
		     uint64_t status, void *stream);

/**
 * kvmem_cuda_inject() - flip bits of device codewords, for tests
 * @cu: the handle
 * @buf: device address of @nwords words
 * @nwords: number of words
 * @p: BSC parameters (kvmem/inject.h); the other modes are not offered
 * @flips: device address of @nwords bytes: flips per word; or 0
 * @report: device address of 2 + KVMEM_INJECT_HIST uint64_t, added to:
 *          bits flipped, words hit, then words by flips as by_flips[]
 * @stream: a CUstream
 *
 * The same seed gives the same flips on every run and launch shape, not
 * the ones kvmem_inject() makes on the CPU.
 *
 * Return: 0, -EINVAL, -EOPNOTSUPP (a mode other than BSC), -EIO.
 */
int kvmem_cuda_inject(struct kvmem_cuda *cu, uint64_t buf, uint64_t nwords,
		      const struct kvmem_inject_params *p, uint64_t flips,
		      uint64_t report, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* KVMEM_CUDA_H */
