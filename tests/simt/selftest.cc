/* SPDX-License-Identifier: MIT */
/*
 * selftest.cc - kernels that pin the executor's CUDA semantics, for
 * tests/check_simt.c
 *
 * Each simt_selftest_*() runs one small launch and hands back what the
 * kernel computed; the C suite compares it with values it derives in plain
 * loops from CUDA's documented rules. They return simt_launch()'s result.
 * The prototypes are repeated in check_simt.c: keep the two in step.
 */
#include "simt.h"

#define FULL 0xffffffffu

/* ---- shared memory and __syncthreads: a sum per block -------------- */

/* Block b sums in[b * per, (b + 1) * per) into out[b], any thread count. */
__global__ void block_sum(const uint32_t *in, unsigned int per,
			  unsigned long long *out)
{
	__shared__ unsigned long long part[1024];
	unsigned int t = threadIdx.x, n = blockDim.x, s, i;
	unsigned long long acc = 0;

	for (i = t; i < per; i += n)
		acc += in[blockIdx.x * per + i];
	part[t] = acc;
	__syncthreads();
	for (s = 1; s < n; s <<= 1)
		;
	for (s >>= 1; s; s >>= 1) {
		if (t < s && t + s < n)
			part[t] += part[t + s];
		__syncthreads();
	}
	if (!t)
		out[blockIdx.x] = part[0];
}

extern "C" int simt_selftest_block_sum(const uint32_t *in, unsigned int per,
				       unsigned int blocks,
				       unsigned int threads,
				       unsigned long long *out)
{
	return simt_launch(block_sum, dim3(blocks), dim3(threads), 0, in, per,
			   out);
}

/* ---- warp reductions -------------------------------------------------- */

/* Butterfly with __shfl_xor_sync, tree with __shfl_down_sync. */
template <typename T>
__global__ void warp_reduce(const T *in, T *xor_out, T *down_out)
{
	unsigned int t = threadIdx.x, o;
	T x = in[t], d = in[t];

	for (o = 16; o; o >>= 1)
		x += __shfl_xor_sync(FULL, x, (int)o);
	__syncwarp();
	for (o = 16; o; o >>= 1)
		d += __shfl_down_sync(FULL, d, o);
	xor_out[t] = x;
	down_out[t] = d;
}

extern "C" int simt_selftest_warp_reduce_int(const int *in,
					     unsigned int threads, int *xor_out,
					     int *down_out)
{
	return simt_launch(warp_reduce<int>, dim3(1), dim3(threads), 0, in,
			   xor_out, down_out);
}

extern "C" int simt_selftest_warp_reduce_double(const double *in,
						unsigned int threads,
						double *xor_out,
						double *down_out)
{
	return simt_launch(warp_reduce<double>, dim3(1), dim3(threads), 0, in,
			   xor_out, down_out);
}

extern "C" int simt_selftest_warp_reduce_ull(const unsigned long long *in,
					     unsigned int threads,
					     unsigned long long *xor_out,
					     unsigned long long *down_out)
{
	return simt_launch(warp_reduce<unsigned long long>, dim3(1),
			   dim3(threads), 0, in, xor_out, down_out);
}

/* ---- shuffles with a width -------------------------------------------- */

/*
 * Thread t holds 7t + 1; out[4t..4t+3]: __shfl_sync from lane
 * (5 * lane + 3) % 37, __shfl_up_sync by 3, __shfl_down_sync by 5,
 * __shfl_xor_sync with 9, all with @width. The float variant checks a
 * 4-byte type that is not an integer.
 */
__global__ void shfl_width(int width, int *out, float *fout)
{
	unsigned int t = threadIdx.x, lane = t % 32;
	int v = (int)(7 * t + 1);
	float f = (float)v + 0.5f;

	out[4 * t] = __shfl_sync(FULL, v, (int)(5 * lane + 3) % 37, width);
	out[4 * t + 1] = __shfl_up_sync(FULL, v, 3, width);
	out[4 * t + 2] = __shfl_down_sync(FULL, v, 5, width);
	out[4 * t + 3] = __shfl_xor_sync(FULL, v, 9, width);
	fout[t] = __shfl_down_sync(FULL, f, 1);
}

extern "C" int simt_selftest_shfl(unsigned int threads, int width, int *out,
				  float *fout)
{
	return simt_launch(shfl_width, dim3(1), dim3(threads), 0, width, out,
			   fout);
}

/* ---- votes and reducing barriers, with a partial last warp --------- */

/*
 * Per thread: out[8t..8t+7] = __activemask(), __ballot_sync, __any_sync,
 * __all_sync (over the active lanes), __popc of the ballot,
 * __syncthreads_count, _or and _and of pred[t].
 */
__global__ void vote(const int *pred, unsigned int *out)
{
	unsigned int t = threadIdx.x, m = __activemask();
	int p = pred[t];
	unsigned int b = __ballot_sync(m, p);

	out[8 * t] = m;
	out[8 * t + 1] = b;
	out[8 * t + 2] = (unsigned int)__any_sync(m, p);
	out[8 * t + 3] = (unsigned int)__all_sync(m, p);
	out[8 * t + 4] = (unsigned int)__popc(b);
	out[8 * t + 5] = (unsigned int)__syncthreads_count(p);
	out[8 * t + 6] = (unsigned int)__syncthreads_or(p);
	out[8 * t + 7] = (unsigned int)__syncthreads_and(p);
}

extern "C" int simt_selftest_vote(const int *pred, unsigned int threads,
				  unsigned int *out)
{
	return simt_launch(vote, dim3(1), dim3(threads), 0, pred, out);
}

/* A butterfly over the lanes that exist: a warp of 2^k lanes. */
__global__ void partial_sum(const int *in, int *out)
{
	unsigned int t = threadIdx.x, m = __activemask();
	int x = in[t], o;

	__syncwarp(m);
	for (o = 1; o < __popc(m); o <<= 1)
		x += __shfl_xor_sync(m, x, o);
	__syncwarp(m);
	out[t] = x;
}

extern "C" int simt_selftest_partial_sum(const int *in, unsigned int threads,
					 int *out)
{
	return simt_launch(partial_sum, dim3(1), dim3(threads), 0, in, out);
}

/* ---- atomics from many blocks ----------------------------------------- */

/*
 * g: global thread number. ires: add (g - 5), max, min of (7g) % 1000 - 500.
 * ures: add g, or and and of bit g % 32, xor g, a CAS-loop add of 3, inc
 * wrapping at 100. ullres: add g << 33, max g * 2^40, exch (the last
 * one's). fres: add 0.5f and atomicAdd(double) 0.25.
 */
__global__ void atomics(int *ires, unsigned int *ures,
			unsigned long long *ullres, float *fres, double *dres)
{
	unsigned int g = blockIdx.x * blockDim.x + threadIdx.x, old;
	int k = (int)(7 * g % 1000) - 500;

	atomicAdd(&ires[0], (int)g - 5);
	atomicMax(&ires[1], k);
	atomicMin(&ires[2], k);
	atomicAdd(&ures[0], g);
	atomicOr(&ures[1], 1u << (g % 32));
	atomicAnd(&ures[2], ~(1u << (g % 32)));
	atomicXor(&ures[3], g);
	old = 0; /* a guess: the loop corrects it */
	for (;;) {
		unsigned int seen = atomicCAS(&ures[4], old, old + 3);

		if (seen == old)
			break;
		old = seen;
	}
	atomicInc(&ures[5], 99);
	atomicAdd(&ullres[0], (unsigned long long)g << 33);
	atomicMax(&ullres[1], (unsigned long long)g << 40);
	atomicExch(&ullres[2], 1ull);
	atomicAdd(&fres[0], 0.5f);
	atomicAdd(&dres[0], 0.25);
}

extern "C" int simt_selftest_atomics(unsigned int blocks, unsigned int threads,
				     int *ires, unsigned int *ures,
				     unsigned long long *ullres, float *fres,
				     double *dres)
{
	return simt_launch(atomics, dim3(blocks), dim3(threads), 0, ires, ures,
			   ullres, fres, dres);
}

/* ---- indices of 2D and 3D grids --------------------------------------- */

static __device__ unsigned int pack(uint3 v)
{
	return v.x | v.y << 10 | v.z << 20;
}

/*
 * out[4g..4g+3]: threadIdx, blockIdx, blockDim, gridDim packed 10 bits a
 * field, g the thread's number in the grid; order[]: the blocks in the
 * order they ran.
 */
__global__ void indices(unsigned int *out, unsigned int *order,
			unsigned int *next)
{
	unsigned int b =
		blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
	unsigned int nt = blockDim.x * blockDim.y * blockDim.z;
	unsigned int t = threadIdx.x +
			 blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
	unsigned int g = b * nt + t;

	out[4 * g] = pack(threadIdx);
	out[4 * g + 1] = pack(blockIdx);
	out[4 * g + 2] = pack(blockDim);
	out[4 * g + 3] = pack(gridDim);
	if (!t)
		order[atomicAdd(next, 1u)] = b;
}

extern "C" int simt_selftest_index(const unsigned int *grid,
				   const unsigned int *block, unsigned int *out,
				   unsigned int *order)
{
	unsigned int next = 0;

	return simt_launch(indices, dim3(grid[0], grid[1], grid[2]),
			   dim3(block[0], block[1], block[2]), 0, out, order,
			   &next);
}

/* ---- dynamic shared memory -------------------------------------------- */

/*
 * Every block: bad[b] counts words not 0xa5a5a5a5 before any write and a
 * misaligned base; then word i = b * 1000 + i, and out[b * threads + t]
 * sums the words after thread t's, which other threads wrote.
 */
__global__ void dyn(unsigned int words, unsigned int *bad, unsigned int *out)
{
	uint32_t *s = (uint32_t *)simt_dyn_smem();
	unsigned int t = threadIdx.x, i, nbad = 0, sum = 0;

	if ((uintptr_t)s % 16)
		nbad++;
	for (i = t; i < words; i += blockDim.x)
		nbad += s[i] != 0xa5a5a5a5u;
	atomicAdd(&bad[blockIdx.x], nbad);
	__syncthreads();
	for (i = t; i < words; i += blockDim.x)
		s[i] = blockIdx.x * 1000 + i;
	__syncthreads();
	for (i = t; i < words; i += blockDim.x)
		sum += s[(i + 1) % words];
	out[blockIdx.x * blockDim.x + t] = sum;
}

extern "C" int simt_selftest_dyn(unsigned int blocks, unsigned int threads,
				 unsigned int words, unsigned int *bad,
				 unsigned int *out)
{
	return simt_launch(dyn, dim3(blocks), dim3(threads), words * 4, words,
			   bad, out);
}

/* ---- launches: limits, failures, nesting ------------------------------ */

__global__ void count(unsigned long long *ran)
{
	atomicAdd(ran, 1ull);
}

/*
 * A launch of grid[3] x block[3] threads with @dyn_smem bytes that counts
 * its threads into *ran; thread @fail_at - 1 fails to start when @fail_at.
 */
extern "C" int simt_selftest_count(const unsigned int *grid,
				   const unsigned int *block, size_t dyn_smem,
				   unsigned int fail_at,
				   unsigned long long *ran)
{
	if (fail_at)
		simt__inject_create_failure(fail_at - 1);
	return simt_launch(count, dim3(grid[0], grid[1], grid[2]),
			   dim3(block[0], block[1], block[2]), dyn_smem, ran);
}

__global__ void nested(int *rc)
{
	unsigned long long ran = 0;

	if (!threadIdx.x)
		*rc = simt_launch(count, dim3(1), dim3(1), 0, &ran);
}

/* What a launch from inside a kernel returns. */
extern "C" int simt_selftest_nested(int *rc)
{
	return simt_launch(nested, dim3(1), dim3(2), 0, rc);
}

/* ---- intrinsics ------------------------------------------------------- */

/*
 * out[]: __popc(x), __ffs(x), __clz(x), __brev(x), __byte_perm(x, y, s),
 * __funnelshift_l, _r, _lc, _rc (x, y, s), __umulhi(x, y); then of
 * (y:x): __popcll, __ffsll, __clzll, __brevll (two words); 13 + 3 = 16.
 */
extern "C" void simt_selftest_bits(uint32_t x, uint32_t y, uint32_t s,
				   uint32_t *out)
{
	unsigned long long w = (unsigned long long)y << 32 | x;
	unsigned long long r = __brevll(w);

	out[0] = (uint32_t)__popc(x);
	out[1] = (uint32_t)__ffs((int)x);
	out[2] = (uint32_t)__clz((int)x);
	out[3] = __brev(x);
	out[4] = __byte_perm(x, y, s);
	out[5] = __funnelshift_l(x, y, s);
	out[6] = __funnelshift_r(x, y, s);
	out[7] = __funnelshift_lc(x, y, s);
	out[8] = __funnelshift_rc(x, y, s);
	out[9] = __umulhi(x, y);
	out[10] = (uint32_t)__popcll(w);
	out[11] = (uint32_t)__ffsll((long long)w);
	out[12] = (uint32_t)__clzll((long long)w);
	out[13] = (uint32_t)r;
	out[14] = (uint32_t)(r >> 32);
	out[15] = __float_as_uint(__saturatef(__uint_as_float(x)));
}

/* ---- tensor cores ----------------------------------------------------- */

/*
 * D = A.B + C by one warp's mma: each lane gathers its fragments of @a
 * (16x16 FP16 bits, row-major), @b (16x8, B[k][n] at 8k + n) and @c (16x8
 * floats) by the PTX ISA's formulas for mma.m16n8k16 with .f16 inputs,
 * and scatters its part of D into @d by the same.
 */
__global__ void mma(const uint16_t *a, const uint16_t *b, const float *c,
		    float *d)
{
	const unsigned int g = threadIdx.x % 32 >> 2, t = threadIdx.x % 4;
	uint32_t fa[4] = { 0, 0, 0, 0 }, fb[2] = { 0, 0 };
	float fc[4];
	unsigned int i, row, col;

	for (i = 0; i < 8; i++) {
		row = i < 2 || (i >= 4 && i < 6) ? g : g + 8;
		col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
		fa[i / 2] |= (uint32_t)a[row * 16 + col] << (16 * (i % 2));
	}
	for (i = 0; i < 4; i++) {
		row = t * 2 + (i & 1) + (i >= 2 ? 8 : 0);
		fb[i / 2] |= (uint32_t)b[row * 8 + g] << (16 * (i % 2));
	}
	for (i = 0; i < 4; i++)
		fc[i] = c[(i < 2 ? g : g + 8) * 8 + t * 2 + (i & 1)];
	simt_mma_f16(fc, fa, fb);
	for (i = 0; i < 4; i++)
		d[(i < 2 ? g : g + 8) * 8 + t * 2 + (i & 1)] = fc[i];
}

extern "C" int simt_selftest_mma(const uint16_t *a, const uint16_t *b,
				 const float *c, float *d)
{
	return simt_launch(mma, dim3(1), dim3(32), 0, a, b, c, d);
}

/* ---- what the executor must refuse -------------------------------- */

/* Kernel bugs, each caught with a "simt:" report and abort(). */
__global__ void broken(int which, int *out)
{
	unsigned int t = threadIdx.x, lane = t % 32;
	int v = (int)t;

	switch (which) {
	case 0: /* threads at two __syncthreads */
		if (t & 1)
			__syncthreads();
		else
			__syncthreads();
		break;
	case 1: /* lane 0 not in its own mask */
		v = __shfl_sync(0xfffffffeu, v, 1);
		break;
	case 2: /* run with 40 threads: lanes 8-31 of warp 1 do not exist */
		v = __shfl_xor_sync(FULL, v, 1);
		break;
	case 3: /* lanes 0 and 1 disagree with the others on the mask */
		v = __shfl_xor_sync(lane < 2 ? 0x3u : FULL, v, 1);
		break;
	case 4: /* reads lane 20, outside the mask */
		if (lane < 16)
			v = __shfl_sync(0xffffu, v, 20);
		break;
	case 5: /* lane 0 leaves while the others wait for it */
		if (lane)
			__syncwarp();
		break;
	case 6:
		v = __shfl_down_sync(FULL, v, 1, 12);
		break;
	case 7: /* thread 32 waits for 33, which waits for 32 */
		if (t == 32)
			v = __shfl_sync(0x3u, v, 1);
		__syncthreads();
		break;
	case 9: { /* run with 40 threads: an mma by lanes 0-7 of warp 1 */
		const uint32_t a[4] = { 0, 0, 0, 0 }, b[2] = { 0, 0 };
		float c[4] = { 0.0f, 0.0f, 0.0f, 0.0f };

		simt_mma_f16(c, a, b);
		v = (int)c[0];
	} break;
	}
	out[t] = v;
}

/* Run bug @which (0-7, 9); 8: a __syncthreads outside any kernel. */
extern "C" int simt_selftest_broken(int which)
{
	static int out[64];

	if (which == 8)
		__syncthreads();
	return simt_launch(broken, dim3(1),
			   dim3(which == 2 || which == 9 ? 40 : 64), 0, which,
			   out);
}
