/* SPDX-License-Identifier: MIT */
/*
 * simt.h - CUDA's built-ins for kernel sources compiled as C++ and run on
 * the CPU by the CTA executor of simt.cc, for tests on machines without a
 * GPU
 *
 * A kernel source (the .cu files of kernels/) is compiled unchanged with g++
 * -std=gnu++20 and this header; simt_launch() then runs the kernel with one
 * host pthread per CUDA thread. The blocks of a launch run one after
 * another in blockIdx order (x fastest), on the same threads; one launch
 * runs at a time in the process (a global mutex). Hence:
 *
 *  - __shared__ is "static": a function-static variable is exactly the
 *    shared memory of the one block running. It is zero before the first
 *    block of the process and holds whatever the previous block left in it
 *    afterwards, so a kernel that reads shared memory it did not write sees
 *    stale values, not the GPU's garbage: do not rely on either.
 *  - The dynamic shared memory (simt_dyn_smem()) is filled with 0xa5 before
 *    every block, so reads of it that precede the writes show up in tests.
 *  - Races between blocks are not seen: blocks never overlap.
 *
 * Synchronisation is what the kernel asked for and no more, so that
 * ThreadSanitizer still sees the races the kernel has: __syncthreads()
 * orders all threads of the block, a warp operation (__shfl_*_sync,
 * __ballot_sync, __syncwarp, ...) orders only the lanes of that warp, and
 * the atomics are relaxed. Every barrier and warp operation passes its call
 * site to the runtime, which aborts with a report naming it ("simt:
 * file:line: ...", the block, where each thread was) on a divergent
 * __syncthreads, a divergent warp operation or a deadlock between the two;
 * see simt.cc. Stricter than sm_70 and later, as portable code must be:
 * the lanes of a mask meet at one call site with one mask, every lane of
 * a mask exists and has not exited (a full mask in a partial last warp is
 * a bug; __activemask() gives the lanes there are), and a shuffle reads
 * only lanes of its mask.
 *
 * Limits: 1 to 1024 threads per block (x, y <= 1024, z <= 64; a last
 * partial warp is fine), at most 228 KiB of dynamic shared memory, 256 KiB
 * of stack per thread, no launches from inside a kernel.
 */
#ifndef KVMEM_SIMT_H
#define KVMEM_SIMT_H

#ifndef __cplusplus
#error "simt.h: compile kernel sources as C++"
#endif
#ifdef __CUDACC__
#error "simt.h is for host compilers; nvcc has the real built-ins"
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <type_traits>

/* ---- qualifiers ----------------------------------------------------- */

#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
/* One block at a time: a static is one block's shared memory. */
#define __shared__ static

/* ---- thread and block indices -------------------------------------- */

struct uint3 {
	unsigned int x, y, z;
};

struct dim3 {
	unsigned int x, y, z;

	constexpr dim3(unsigned int vx = 1, unsigned int vy = 1,
		       unsigned int vz = 1)
	    : x(vx), y(vy), z(vz)
	{
	}
	constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z)
	{
	}
	constexpr operator uint3() const
	{
		return uint3{ x, y, z };
	}
};

/* Set by the executor; kernels only read them. */
extern thread_local constinit uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;
static constexpr int warpSize = 32;

/* ---- the runtime (simt.cc) ------------------------------------------ */

enum simt__op {
	SIMT__SYNCTHREADS,
	SIMT__SYNCTHREADS_COUNT,
	SIMT__SYNCTHREADS_AND,
	SIMT__SYNCTHREADS_OR,
	SIMT__SYNCWARP,
	SIMT__SHFL,
	SIMT__SHFL_UP,
	SIMT__SHFL_DOWN,
	SIMT__SHFL_XOR,
	SIMT__BALLOT,
	SIMT__ANY,
	SIMT__ALL,
	SIMT__MMA_F16,
};

/* A __syncthreads*() of kind @op at @file:@line; the reduced @pred. */
int simt__bar(int op, int pred, const char *file, int line);

/*
 * A warp operation @op of the lanes in @mask at @file:@line: this lane
 * gives @val and gets what @op makes of the values of the others (@arg: the
 * source lane, delta or lane mask of a shuffle; @width its segment).
 */
uint64_t simt__warp(int op, unsigned int mask, uint64_t val, int arg, int width,
		    const char *file, int line);

unsigned int simt__activemask(void);
void simt__fence(void);

/*
 * The dynamic shared memory of the running block: as many bytes as the
 * launch asked for, 16-byte aligned, filled with 0xa5 before each block.
 * Only from inside a kernel.
 */
void *simt_dyn_smem(void);

int simt__launch(void (*fn)(void *), void *ctx, dim3 grid, dim3 block,
		 size_t dyn_smem);

/*
 * Test hook: thread @nth of the next launch fails to start (EAGAIN), to
 * check that a launch which cannot start all its threads runs nothing.
 */
void simt__inject_create_failure(unsigned int nth);

/**
 * simt_launch() - run @kernel(@args...) as a grid of @grid blocks of @block
 * threads with @dyn_smem bytes of dynamic shared memory
 *
 * Every thread gets its own copy of the arguments, as on the GPU. Blocks
 * run one after another; threads of a block run concurrently. Returns once
 * the grid has finished.
 *
 * Return: 0; -EINVAL for an empty grid or block, more than 1024 threads or
 * more than 228 KiB of dynamic shared memory; -EDEADLK from inside a
 * kernel; -ENOMEM or pthread_create()'s error (negated) when the threads
 * cannot be started, and then no thread ran any of the kernel.
 * Context: any thread; waits for another launch to finish first.
 */
template <typename K, typename... A>
int simt_launch(K kernel, dim3 grid, dim3 block, size_t dyn_smem, A... args)
{
	struct call {
		K k;
		std::tuple<A...> a;

		static void run(void *p)
		{
			call *c = static_cast<call *>(p);

			std::apply(c->k, c->a);
		}
	} c{ kernel, std::tuple<A...>(args...) };

	return simt__launch(call::run, &c, grid, block, dyn_smem);
}

/* ---- barriers and warp operations ----------------------------------- */

#define __syncthreads() \
	((void)simt__bar(SIMT__SYNCTHREADS, 0, __FILE__, __LINE__))
#define __syncthreads_count(pred) \
	simt__bar(SIMT__SYNCTHREADS_COUNT, !!(pred), __FILE__, __LINE__)
#define __syncthreads_and(pred) \
	simt__bar(SIMT__SYNCTHREADS_AND, !!(pred), __FILE__, __LINE__)
#define __syncthreads_or(pred) \
	simt__bar(SIMT__SYNCTHREADS_OR, !!(pred), __FILE__, __LINE__)

static inline void simt__syncwarp(const char *file, int line,
				  unsigned int mask = 0xffffffffu)
{
	simt__warp(SIMT__SYNCWARP, mask, 0, 0, 32, file, line);
}

#define __syncwarp(...) \
	simt__syncwarp(__FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__)

/* A shuffled value as CUDA's overloads take it: promoted, 4 or 8 bytes. */
template <typename T> using simt__shfl_t = decltype(+T());

template <typename T>
static inline simt__shfl_t<T> simt__shfl(int op, const char *file, int line,
					 unsigned int mask, T var, int arg,
					 int width = 32)
{
	using U = simt__shfl_t<T>;
	U v = var;
	uint64_t u = 0;

	static_assert(std::is_arithmetic_v<U> &&
			      (sizeof(U) == 4 || sizeof(U) == 8),
		      "shuffles take 4- and 8-byte arithmetic types");
	memcpy(&u, &v, sizeof(v));
	u = simt__warp(op, mask, u, arg, width, file, line);
	memcpy(&v, &u, sizeof(v));
	return v;
}

/* (mask, var, srcLane [, width]) and so on, as in CUDA. */
#define __shfl_sync(...) simt__shfl(SIMT__SHFL, __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) \
	simt__shfl(SIMT__SHFL_UP, __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) \
	simt__shfl(SIMT__SHFL_DOWN, __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) \
	simt__shfl(SIMT__SHFL_XOR, __FILE__, __LINE__, __VA_ARGS__)

#define __ballot_sync(mask, pred)                                        \
	((unsigned int)simt__warp(SIMT__BALLOT, (mask), !!(pred), 0, 32, \
				  __FILE__, __LINE__))
#define __any_sync(mask, pred)                                         \
	((int)simt__warp(SIMT__ANY, (mask), !!(pred), 0, 32, __FILE__, \
			 __LINE__))
#define __all_sync(mask, pred)                                         \
	((int)simt__warp(SIMT__ALL, (mask), !!(pred), 0, 32, __FILE__, \
			 __LINE__))

/*
 * mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 of the whole warp: D
 * = A.B + C, A 16x16 and B 16x8 in FP16, C and D 16x8 in FP32, each lane
 * holding the fragments the PTX ISA gives it (lane l, g = l / 4, j = l %
 * 4: @a the pairs A[g][2j..], A[g + 8][2j..], A[g][2j + 8..], A[g + 8][2j
 * + 8..], the lower column in the low half; @b B[2j..][g], B[2j + 8..][g];
 * @c C[g][2j], C[g][2j + 1], C[g + 8][2j], C[g + 8][2j + 1]), which it
 * turns into D in place. The products are exact and summed in double,
 * then rounded once: the tensor cores' sum is within a few FP32 rounding
 * steps of it.
 */
struct simt__mma {
	const uint32_t *a, *b;
	float *c;
};

static inline void simt__mma_f16(float *c, const uint32_t *a, const uint32_t *b,
				 const char *file, int line)
{
	struct simt__mma m = { a, b, c };

	simt__warp(SIMT__MMA_F16, 0xffffffffu, (uint64_t)(uintptr_t)&m, 0, 32,
		   file, line);
}

#define simt_mma_f16(c, a, b) simt__mma_f16(c, a, b, __FILE__, __LINE__)

/* The lanes of this warp that exist and have not exited. */
static inline unsigned int __activemask(void)
{
	return simt__activemask();
}

static inline void __threadfence(void)
{
	simt__fence();
}

static inline void __threadfence_block(void)
{
	simt__fence();
}

/* ---- atomics: relaxed, return the old value ------------------------- */

#define SIMT__RLX __ATOMIC_RELAXED

#define SIMT__ATOMIC_RMW(name, T, builtin)       \
	static inline T name(T *p, T v)          \
	{                                        \
		return builtin(p, v, SIMT__RLX); \
	}

SIMT__ATOMIC_RMW(atomicAdd, int, __atomic_fetch_add)
SIMT__ATOMIC_RMW(atomicAdd, unsigned int, __atomic_fetch_add)
SIMT__ATOMIC_RMW(atomicAdd, unsigned long long, __atomic_fetch_add)
SIMT__ATOMIC_RMW(atomicSub, int, __atomic_fetch_sub)
SIMT__ATOMIC_RMW(atomicSub, unsigned int, __atomic_fetch_sub)
SIMT__ATOMIC_RMW(atomicOr, int, __atomic_fetch_or)
SIMT__ATOMIC_RMW(atomicOr, unsigned int, __atomic_fetch_or)
SIMT__ATOMIC_RMW(atomicOr, unsigned long long, __atomic_fetch_or)
SIMT__ATOMIC_RMW(atomicAnd, int, __atomic_fetch_and)
SIMT__ATOMIC_RMW(atomicAnd, unsigned int, __atomic_fetch_and)
SIMT__ATOMIC_RMW(atomicAnd, unsigned long long, __atomic_fetch_and)
SIMT__ATOMIC_RMW(atomicXor, int, __atomic_fetch_xor)
SIMT__ATOMIC_RMW(atomicXor, unsigned int, __atomic_fetch_xor)
SIMT__ATOMIC_RMW(atomicXor, unsigned long long, __atomic_fetch_xor)
SIMT__ATOMIC_RMW(atomicExch, int, __atomic_exchange_n)
SIMT__ATOMIC_RMW(atomicExch, unsigned int, __atomic_exchange_n)
SIMT__ATOMIC_RMW(atomicExch, unsigned long long, __atomic_exchange_n)

#undef SIMT__ATOMIC_RMW

/* *p = f(*p, v) in a compare-and-swap loop, for what has no builtin. */
template <typename T, typename F>
static inline T simt__atomic_update(T *p, T v, F f)
{
	T old, next;

	__atomic_load(p, &old, SIMT__RLX);
	do
		next = f(old, v);
	while (!__atomic_compare_exchange(p, &old, &next, true, SIMT__RLX,
					  SIMT__RLX));
	return old;
}

static inline float atomicAdd(float *p, float v)
{
	return simt__atomic_update(p, v,
				   [](float a, float b) { return a + b; });
}

static inline double atomicAdd(double *p, double v)
{
	return simt__atomic_update(p, v,
				   [](double a, double b) { return a + b; });
}

static inline float atomicExch(float *p, float v)
{
	float old;

	__atomic_exchange(p, &v, &old, SIMT__RLX);
	return old;
}

#define SIMT__ATOMIC_MINMAX(T)                                         \
	static inline T atomicMax(T *p, T v)                           \
	{                                                              \
		return simt__atomic_update(                            \
			p, v, [](T a, T b) { return a < b ? b : a; }); \
	}                                                              \
	static inline T atomicMin(T *p, T v)                           \
	{                                                              \
		return simt__atomic_update(                            \
			p, v, [](T a, T b) { return b < a ? b : a; }); \
	}

SIMT__ATOMIC_MINMAX(int)
SIMT__ATOMIC_MINMAX(unsigned int)
SIMT__ATOMIC_MINMAX(long long)
SIMT__ATOMIC_MINMAX(unsigned long long)

#undef SIMT__ATOMIC_MINMAX

/* ((old >= v) ? 0 : old + 1) and ((old == 0 || old > v) ? v : old - 1) */
static inline unsigned int atomicInc(unsigned int *p, unsigned int v)
{
	return simt__atomic_update(p, v, [](unsigned int a, unsigned int b) {
		return a >= b ? 0 : a + 1;
	});
}

static inline unsigned int atomicDec(unsigned int *p, unsigned int v)
{
	return simt__atomic_update(p, v, [](unsigned int a, unsigned int b) {
		return a == 0 || a > b ? b : a - 1;
	});
}

#define SIMT__ATOMIC_CAS(T)                                               \
	static inline T atomicCAS(T *p, T cmp, T v)                       \
	{                                                                 \
		__atomic_compare_exchange_n(p, &cmp, v, false, SIMT__RLX, \
					    SIMT__RLX);                   \
		return cmp;                                               \
	}

SIMT__ATOMIC_CAS(int)
SIMT__ATOMIC_CAS(unsigned int)
SIMT__ATOMIC_CAS(unsigned long long)

#undef SIMT__ATOMIC_CAS

/* ---- intrinsics ------------------------------------------------------ */

static inline int __popc(unsigned int x)
{
	return __builtin_popcount(x);
}

static inline int __popcll(unsigned long long x)
{
	return __builtin_popcountll(x);
}

static inline int __ffs(int x)
{
	return __builtin_ffs(x);
}

static inline int __ffsll(long long x)
{
	return __builtin_ffsll(x);
}

static inline int __clz(int x)
{
	return x ? __builtin_clz((unsigned int)x) : 32;
}

static inline int __clzll(long long x)
{
	return x ? __builtin_clzll((unsigned long long)x) : 64;
}

static inline unsigned int __brev(unsigned int x)
{
	x = (x >> 1 & 0x55555555u) | (x & 0x55555555u) << 1;
	x = (x >> 2 & 0x33333333u) | (x & 0x33333333u) << 2;
	x = (x >> 4 & 0x0f0f0f0fu) | (x & 0x0f0f0f0fu) << 4;
	return __builtin_bswap32(x);
}

static inline unsigned long long __brevll(unsigned long long x)
{
	return (unsigned long long)__brev((unsigned int)x) << 32 |
	       __brev((unsigned int)(x >> 32));
}

/* Byte n of the result is byte (s >> 4n) & 7 of y:x. */
static inline unsigned int __byte_perm(unsigned int x, unsigned int y,
				       unsigned int s)
{
	uint64_t v = (uint64_t)y << 32 | x;
	unsigned int r = 0, n;

	for (n = 0; n < 4; n++)
		r |= (unsigned int)(v >> 8 * (s >> 4 * n & 7) & 0xff) << 8 * n;
	return r;
}

/* The high word of hi:lo << (s & 31), the low word of hi:lo >> (s & 31). */
static inline unsigned int __funnelshift_l(unsigned int lo, unsigned int hi,
					   unsigned int s)
{
	return (unsigned int)(((uint64_t)hi << 32 | lo) << (s & 31) >> 32);
}

static inline unsigned int __funnelshift_r(unsigned int lo, unsigned int hi,
					   unsigned int s)
{
	return (unsigned int)(((uint64_t)hi << 32 | lo) >> (s & 31));
}

/* The same with the shift clamped to 32 instead of taken modulo 32. */
static inline unsigned int __funnelshift_lc(unsigned int lo, unsigned int hi,
					    unsigned int s)
{
	return (unsigned int)(((uint64_t)hi << 32 | lo) << (s < 32 ? s : 32) >>
			      32);
}

static inline unsigned int __funnelshift_rc(unsigned int lo, unsigned int hi,
					    unsigned int s)
{
	return (unsigned int)(((uint64_t)hi << 32 | lo) >> (s < 32 ? s : 32));
}

static inline unsigned int __umulhi(unsigned int a, unsigned int b)
{
	return (unsigned int)((uint64_t)a * b >> 32);
}

static inline unsigned long long __umul64hi(unsigned long long a,
					    unsigned long long b)
{
	return (unsigned long long)((unsigned __int128)a * b >> 64);
}

static inline unsigned int __float_as_uint(float x)
{
	return __builtin_bit_cast(unsigned int, x);
}

static inline float __uint_as_float(unsigned int x)
{
	return __builtin_bit_cast(float, x);
}

static inline int __float_as_int(float x)
{
	return __builtin_bit_cast(int, x);
}

static inline float __int_as_float(int x)
{
	return __builtin_bit_cast(float, x);
}

static inline long long __double_as_longlong(double x)
{
	return __builtin_bit_cast(long long, x);
}

static inline double __longlong_as_double(long long x)
{
	return __builtin_bit_cast(double, x);
}

/*
 * The fast-math forms, at full precision. Macros where libm declares the
 * name itself (glibc's __expf, C23's rsqrtf).
 */
#define __expf(x) expf(x)
#define __logf(x) logf(x)
#define rsqrtf(x) simt__rsqrtf(x)

static inline float simt__rsqrtf(float x)
{
	return 1.0f / sqrtf(x);
}

static inline float __fdividef(float a, float b)
{
	return a / b;
}

static inline float __frcp_rn(float x)
{
	return 1.0f / x;
}

static inline float __fsqrt_rn(float x)
{
	return sqrtf(x);
}

static inline float __fmaf_rn(float a, float b, float c)
{
	return fmaf(a, b, c);
}

/* Clamped to [0, 1]; NaN gives 0. */
static inline float __saturatef(float x)
{
	return x >= 1.0f ? 1.0f : x > 0.0f ? x : 0.0f;
}

template <typename T> static inline T __ldg(const T *p)
{
	return *p;
}

/* min() and max() in the usual arithmetic conversions, as CUDA's. */
template <typename A, typename B>
requires(std::is_arithmetic_v<A> &&std::is_arithmetic_v<
	 B>) static inline std::common_type_t<A, B> min(A a, B b)
{
	std::common_type_t<A, B> x = a, y = b;

	if constexpr (std::is_floating_point_v<decltype(x)>)
		return fmin(x, y);
	else
		return y < x ? y : x;
}

template <typename A, typename B>
requires(std::is_arithmetic_v<A> &&std::is_arithmetic_v<
	 B>) static inline std::common_type_t<A, B> max(A a, B b)
{
	std::common_type_t<A, B> x = a, y = b;

	if constexpr (std::is_floating_point_v<decltype(x)>)
		return fmax(x, y);
	else
		return y > x ? y : x;
}

#endif /* KVMEM_SIMT_H */
