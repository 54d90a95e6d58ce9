/* SPDX-License-Identifier: MIT */
/*
 * check_simt.c - the CPU executor of CUDA kernels (tests/simt)
 *
 * The kernels of tests/simt/selftest.cc run on the executor; every value
 * they hand back is compared with one derived here in plain loops from
 * CUDA's documented rules (shuffle segments, votes, reducing barriers,
 * atomics, index layout). Then simt-race, built with ThreadSanitizer, must
 * stay silent on a correct kernel, report the data race of the same kernel
 * without its __syncthreads, and abort with the call site on a divergent
 * __syncthreads, a divergent shuffle and a deadlock between the two.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvmem_check.h"

/* tests/simt/selftest.cc */
int simt_selftest_block_sum(const uint32_t *in, unsigned int per,
			    unsigned int blocks, unsigned int threads,
			    unsigned long long *out);
int simt_selftest_warp_reduce_int(const int *in, unsigned int threads,
				  int *xor_out, int *down_out);
int simt_selftest_warp_reduce_double(const double *in, unsigned int threads,
				     double *xor_out, double *down_out);
int simt_selftest_warp_reduce_ull(const unsigned long long *in,
				  unsigned int threads,
				  unsigned long long *xor_out,
				  unsigned long long *down_out);
int simt_selftest_shfl(unsigned int threads, int width, int *out, float *fout);
int simt_selftest_vote(const int *pred, unsigned int threads,
		       unsigned int *out);
int simt_selftest_partial_sum(const int *in, unsigned int threads, int *out);
int simt_selftest_atomics(unsigned int blocks, unsigned int threads, int *ires,
			  unsigned int *ures, unsigned long long *ullres,
			  float *fres, double *dres);
int simt_selftest_index(const unsigned int *grid, const unsigned int *block,
			unsigned int *out, unsigned int *order);
int simt_selftest_dyn(unsigned int blocks, unsigned int threads,
		      unsigned int words, unsigned int *bad, unsigned int *out);
int simt_selftest_count(const unsigned int *grid, const unsigned int *block,
			size_t dyn_smem, unsigned int fail_at,
			unsigned long long *ran);
int simt_selftest_nested(int *rc);
void simt_selftest_bits(uint32_t x, uint32_t y, uint32_t s, uint32_t *out);
int simt_selftest_broken(int which);
int simt_selftest_mma(const uint16_t *a, const uint16_t *b, const float *c,
		      float *d);

static uint32_t lcg(uint32_t *s)
{
	*s = *s * 1664525u + 1013904223u;
	return *s >> 8;
}

/* ---- shared memory, warps, votes ------------------------------------ */

START_TEST(test_simt_block_sum)
{
	/* Powers of 2 or not, one warp or many, partial last warps. */
	static const unsigned int threads[] = { 1, 32, 40, 128, 200 };
	enum { BLOCKS = 3, PER = 1500 };
	uint32_t *in = kvmem_check_xmalloc(BLOCKS * PER * sizeof(*in));
	unsigned long long out[BLOCKS], exp;
	uint32_t seed = 1;
	unsigned int i, b, k;

	for (i = 0; i < BLOCKS * PER; i++)
		in[i] = lcg(&seed);
	for (k = 0; k < sizeof(threads) / sizeof(threads[0]); k++) {
		memset(out, 0, sizeof(out));
		ck_assert_int_eq(simt_selftest_block_sum(in, PER, BLOCKS,
							 threads[k], out),
				 0);
		for (b = 0; b < BLOCKS; b++) {
			for (exp = 0, i = 0; i < PER; i++)
				exp += in[b * PER + i];
			EXPECT_EQ(out[b], exp, "block %u of %u threads", b,
				  threads[k]);
		}
	}
	free(in);
}
END_TEST

/* What __shfl_down_sync by 16, 8, 4, 2, 1 leaves in each lane. */
#define DOWN_TREE(T, v, lane, res)                                            \
	do {                                                                  \
		T d_[32], n_[32];                                             \
		unsigned int o_, j_;                                          \
		memcpy(d_, v, sizeof(d_));                                    \
		for (o_ = 16; o_; o_ >>= 1) {                                 \
			for (j_ = 0; j_ < 32; j_++)                           \
				n_[j_] = d_[j_] + (j_ + o_ < 32 ? d_[j_ + o_] \
								: d_[j_]);    \
			memcpy(d_, n_, sizeof(d_));                           \
		}                                                             \
		res = d_[lane];                                               \
	} while (0)

START_TEST(test_simt_warp_reduce)
{
	enum { N = 96 };
	int in[N], x[N], d[N], ei;
	double din[N], dx[N], dd[N], ed;
	unsigned long long uin[N], ux[N], ud[N], eu;
	uint32_t seed = 7;
	unsigned int t, w, j;

	for (t = 0; t < N; t++) {
		in[t] = (int)(lcg(&seed) % 2001) - 1000;
		din[t] = in[t] * 0.25; /* sums of these are exact */
		uin[t] = (unsigned long long)lcg(&seed) << 40 | lcg(&seed);
	}
	ck_assert_int_eq(simt_selftest_warp_reduce_int(in, N, x, d), 0);
	ck_assert_int_eq(simt_selftest_warp_reduce_double(din, N, dx, dd), 0);
	ck_assert_int_eq(simt_selftest_warp_reduce_ull(uin, N, ux, ud), 0);
	for (w = 0; w < N / 32; w++) {
		int s = 0;
		double ds = 0;
		unsigned long long us = 0;

		for (j = 0; j < 32; j++) {
			s += in[32 * w + j];
			ds += din[32 * w + j];
			us += uin[32 * w + j];
		}
		for (j = 0; j < 32; j++) {
			t = 32 * w + j;
			/* The butterfly gives every lane the total. */
			EXPECT_EQ(x[t], s, "xor, thread %u", t);
			EXPECT_FEQ(dx[t], ds, "xor double, thread %u", t);
			EXPECT_EQ(ux[t], us, "xor ull, thread %u", t);
			/* The tree only lane 0; the others keep own values. */
			DOWN_TREE(int, &in[32 * w], j, ei);
			DOWN_TREE(double, &din[32 * w], j, ed);
			DOWN_TREE(unsigned long long, &uin[32 * w], j, eu);
			EXPECT_EQ(d[t], ei, "down, thread %u", t);
			EXPECT_FEQ(dd[t], ed, "down double, thread %u", t);
			EXPECT_EQ(ud[t], eu, "down ull, thread %u", t);
		}
		EXPECT_EQ(d[32 * w], s, "down total, warp %u", w);
	}
}
END_TEST

START_TEST(test_simt_shfl_width)
{
	enum { N = 64 };
	static const int widths[] = { 32, 16, 8, 4, 2, 1 };
	int out[4 * N], v[N], e;
	float fout[N];
	unsigned int k, t, lane, base, seg, w, p;

	for (t = 0; t < N; t++)
		v[t] = (int)(7 * t + 1);
	for (k = 0; k < sizeof(widths) / sizeof(widths[0]); k++) {
		w = (unsigned int)widths[k];
		ck_assert_int_eq(simt_selftest_shfl(N, widths[k], out, fout),
				 0);
		for (t = 0; t < N; t++) {
			lane = t % 32;
			base = t - lane;
			seg = lane / w * w;
			/* srcLane modulo width, within the segment */
			e = v[base + seg + (5 * lane + 3) % 37 % w];
			EXPECT_EQ(out[4 * t], e, "idx, width %u thread %u", w,
				  t);
			/* own value where the source leaves the segment */
			e = lane - seg >= 3 ? v[t - 3] : v[t];
			EXPECT_EQ(out[4 * t + 1], e, "up, width %u thread %u",
				  w, t);
			e = lane - seg + 5 < w ? v[t + 5] : v[t];
			EXPECT_EQ(out[4 * t + 2], e, "down, width %u thread %u",
				  w, t);
			/* earlier segments can be read, later ones not */
			p = lane ^ 9;
			e = p / w <= lane / w ? v[base + p] : v[t];
			EXPECT_EQ(out[4 * t + 3], e, "xor, width %u thread %u",
				  w, t);
			EXPECT_FEQ(fout[t],
				   (float)v[lane < 31 ? t + 1 : t] + 0.5f,
				   "float down, thread %u", t);
		}
	}
}
END_TEST

START_TEST(test_simt_vote)
{
	/* 40 threads: a full warp and one of 8 lanes. */
	enum { N = 40 };
	unsigned int out[8 * N], t, j, w, m, b, cnt, pat;
	int pred[N];
	uint32_t seed = 3;

	for (pat = 0; pat < 4; pat++) {
		for (t = 0; t < N; t++)
			pred[t] = pat == 0   ? 0
				  : pat == 1 ? 1
				  : pat == 2 ? t == 37
					     : (int)(lcg(&seed) & 1);
		ck_assert_int_eq(simt_selftest_vote(pred, N, out), 0);
		for (cnt = 0, t = 0; t < N; t++)
			cnt += pred[t] != 0;
		for (t = 0; t < N; t++) {
			w = t / 32;
			m = w == 0 ? 0xffffffffu : 0xffu;
			for (b = 0, j = 0; j < 32 && 32 * w + j < N; j++)
				if (pred[32 * w + j])
					b |= 1u << j;
			EXPECT_EQ(out[8 * t], m, "activemask, thread %u", t);
			EXPECT_EQ(out[8 * t + 1], b,
				  "ballot, pattern %u thread %u", pat, t);
			EXPECT_EQ(out[8 * t + 2], b != 0, "any, thread %u", t);
			EXPECT_EQ(out[8 * t + 3], b == m, "all, thread %u", t);
			EXPECT_EQ(out[8 * t + 4], __builtin_popcount(b),
				  "popc, thread %u", t);
			EXPECT_EQ(out[8 * t + 5], cnt, "count, pattern %u",
				  pat);
			EXPECT_EQ(out[8 * t + 6], cnt != 0, "or, pattern %u",
				  pat);
			EXPECT_EQ(out[8 * t + 7], cnt == N, "and, pattern %u",
				  pat);
		}
	}
}
END_TEST

START_TEST(test_simt_partial_warp)
{
	/* Last warps of 8, 4 and 1 lanes. */
	static const unsigned int threads[] = { 40, 68, 33 };
	int in[96], out[96], s;
	unsigned int k, t, j, n, w;

	for (t = 0; t < 96; t++)
		in[t] = (int)(t * t % 97);
	for (k = 0; k < 3; k++) {
		n = threads[k];
		ck_assert_int_eq(simt_selftest_partial_sum(in, n, out), 0);
		for (w = 0; 32 * w < n; w++) {
			for (s = 0, j = 32 * w; j < n && j < 32 * w + 32; j++)
				s += in[j];
			for (j = 32 * w; j < n && j < 32 * w + 32; j++)
				EXPECT_EQ(out[j], s, "%u threads, thread %u", n,
					  j);
		}
	}
}
END_TEST

/* ---- atomics, indices, dynamic shared memory ---------------------- */

START_TEST(test_simt_atomics)
{
	enum { BLOCKS = 6, THREADS = 96, N = BLOCKS * THREADS };
	int ires[3] = { 0, INT_MIN, INT_MAX }, emax = INT_MIN, emin = INT_MAX;
	unsigned int ures[6] = { 0, 0, ~0u, 0, 0, 0 };
	unsigned int eor = 0, eand = ~0u, exor = 0;
	unsigned long long ullres[3] = { 0, 0, 5 }, eadd = 0;
	float fres[1] = { 0 };
	double dres[1] = { 0 };
	long long esum = 0;
	unsigned int g;
	int k;

	ck_assert_int_eq(simt_selftest_atomics(BLOCKS, THREADS, ires, ures,
					       ullres, fres, dres),
			 0);
	for (g = 0; g < N; g++) {
		k = (int)(7 * g % 1000) - 500;
		esum += (int)g - 5;
		emax = k > emax ? k : emax;
		emin = k < emin ? k : emin;
		eor |= 1u << (g % 32);
		eand &= ~(1u << (g % 32));
		exor ^= g;
		eadd += (unsigned long long)g << 33;
	}
	EXPECT_EQ(ires[0], esum, "%s", "atomicAdd(int)");
	EXPECT_EQ(ires[1], emax, "%s", "atomicMax(int)");
	EXPECT_EQ(ires[2], emin, "%s", "atomicMin(int)");
	EXPECT_EQ(ures[0], (unsigned int)N * (N - 1) / 2, "%s",
		  "atomicAdd(unsigned)");
	EXPECT_EQ(ures[1], eor, "%s", "atomicOr");
	EXPECT_EQ(ures[2], eand, "%s", "atomicAnd");
	EXPECT_EQ(ures[3], exor, "%s", "atomicXor");
	EXPECT_EQ(ures[4], 3u * N, "%s", "atomicCAS loop");
	EXPECT_EQ(ures[5], N % 100, "%s", "atomicInc wrapping at 99");
	EXPECT_EQ(ullres[0], eadd, "%s", "atomicAdd(ull)");
	EXPECT_EQ(ullres[1], (unsigned long long)(N - 1) << 40, "%s",
		  "atomicMax(ull)");
	EXPECT_EQ(ullres[2], 1, "%s", "atomicExch(ull)");
	EXPECT_FEQ(fres[0], 0.5f * N, "%s", "atomicAdd(float)");
	EXPECT_FEQ(dres[0], 0.25 * N, "%s", "atomicAdd(double)");
}
END_TEST

static unsigned int pack3(unsigned int x, unsigned int y, unsigned int z)
{
	return x | y << 10 | z << 20;
}

START_TEST(test_simt_index)
{
	static const unsigned int shapes[][6] = {
		{ 3, 2, 1, 8, 4, 1 },
		{ 2, 2, 2, 4, 2, 3 },
		{ 5, 1, 1, 40, 1, 1 },
		{ 1, 3, 2, 1, 1, 5 },
	};
	unsigned int *out, order[16], k, nb, nt, b, t, g;
	unsigned int bx, by, bz, tx, ty, tz;

	out = kvmem_check_xmalloc(4 * 1024 * sizeof(*out));
	for (k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
		const unsigned int *gr = shapes[k], *bl = shapes[k] + 3;

		nb = gr[0] * gr[1] * gr[2];
		nt = bl[0] * bl[1] * bl[2];
		memset(out, 0xff, 4 * nb * nt * sizeof(*out));
		ck_assert_int_eq(simt_selftest_index(gr, bl, out, order), 0);
		/* x fastest, for blocks as for threads */
		for (b = 0; b < nb; b++) {
			EXPECT_EQ(order[b], b, "shape %u: block run %u", k, b);
			bx = b % gr[0];
			by = b / gr[0] % gr[1];
			bz = b / gr[0] / gr[1];
			for (t = 0; t < nt; t++) {
				tx = t % bl[0];
				ty = t / bl[0] % bl[1];
				tz = t / bl[0] / bl[1];
				g = b * nt + t;
				EXPECT_EQ(
					out[4 * g], pack3(tx, ty, tz),
					"threadIdx, shape %u block %u thread %u",
					k, b, t);
				EXPECT_EQ(out[4 * g + 1], pack3(bx, by, bz),
					  "blockIdx, shape %u block %u", k, b);
				EXPECT_EQ(out[4 * g + 2],
					  pack3(bl[0], bl[1], bl[2]),
					  "blockDim, shape %u", k);
				EXPECT_EQ(out[4 * g + 3],
					  pack3(gr[0], gr[1], gr[2]),
					  "gridDim, shape %u", k);
			}
		}
	}
	free(out);
}
END_TEST

START_TEST(test_simt_dyn_smem)
{
	/* The last: 228 KiB, the most an H100 block can have. */
	static const unsigned int words[] = { 0, 1, 1000, 228 * 256 };
	enum { BLOCKS = 3, THREADS = 50 };
	unsigned int bad[BLOCKS], out[BLOCKS * THREADS], k, b, t, i, n, e;

	for (k = 0; k < sizeof(words) / sizeof(words[0]); k++) {
		n = words[k];
		memset(bad, 0, sizeof(bad));
		ck_assert_int_eq(
			simt_selftest_dyn(BLOCKS, THREADS, n, bad, out), 0);
		for (b = 0; b < BLOCKS; b++) {
			/* 0xa5 again in every block, 16-byte aligned */
			EXPECT_EQ(bad[b], 0, "%u words, block %u", n, b);
			for (t = 0; t < THREADS; t++) {
				for (e = 0, i = t; i < n; i += THREADS)
					e += b * 1000 + (i + 1) % n;
				EXPECT_EQ(out[b * THREADS + t], e,
					  "%u words, block %u thread %u", n, b,
					  t);
			}
		}
	}
}
END_TEST

/* ---- launches ----------------------------------------------------------- */

START_TEST(test_simt_launch_limits)
{
	static const struct {
		unsigned int grid[3], block[3];
		size_t dyn;
		int rc;
	} c[] = {
		{ { 1, 1, 1 }, { 1024, 1, 1 }, 0, 0 },
		{ { 1, 1, 1 }, { 32, 32, 1 }, 0, 0 },
		{ { 1, 1, 1 }, { 1, 1, 64 }, 228 << 10, 0 },
		{ { 1, 1, 1 }, { 1025, 1, 1 }, 0, -EINVAL },
		{ { 1, 1, 1 }, { 33, 32, 1 }, 0, -EINVAL },
		{ { 1, 1, 1 }, { 1, 1, 65 }, 0, -EINVAL },
		{ { 1, 1, 1 }, { 0, 1, 1 }, 0, -EINVAL },
		{ { 0, 1, 1 }, { 32, 1, 1 }, 0, -EINVAL },
		{ { 1, 1, 0 }, { 32, 1, 1 }, 0, -EINVAL },
		{ { 1, 1, 1 }, { 32, 1, 1 }, (228 << 10) + 1, -EINVAL },
	};
	unsigned long long ran;
	unsigned int k;

	for (k = 0; k < sizeof(c) / sizeof(c[0]); k++) {
		ran = 0;
		EXPECT_EQ(simt_selftest_count(c[k].grid, c[k].block, c[k].dyn,
					      0, &ran),
			  c[k].rc, "case %u", k);
		EXPECT_EQ(ran,
			  c[k].rc ? 0
				  : c[k].grid[0] * c[k].grid[1] * c[k].grid[2] *
					    c[k].block[0] * c[k].block[1] *
					    c[k].block[2],
			  "case %u", k);
	}
}
END_TEST

/* A thread that cannot start: nothing runs, the next launch is fine. */
START_TEST(test_simt_create_failure)
{
	static const unsigned int grid[3] = { 2, 1, 1 },
				  block[3] = { 96, 1, 1 };
	static const unsigned int fail_at[] = { 1, 50, 96 };
	unsigned long long ran;
	unsigned int k;

	for (k = 0; k < 3; k++) {
		ran = 0;
		EXPECT_EQ(simt_selftest_count(grid, block, 0, fail_at[k], &ran),
			  -EAGAIN, "thread %u fails", fail_at[k] - 1);
		EXPECT_EQ(ran, 0, "thread %u fails", fail_at[k] - 1);
	}
	ran = 0;
	ck_assert_int_eq(simt_selftest_count(grid, block, 0, 0, &ran), 0);
	ck_assert_uint_eq(ran, 192);
}
END_TEST

START_TEST(test_simt_nested_launch)
{
	int rc = 1;

	ck_assert_int_eq(simt_selftest_nested(&rc), 0);
	ck_assert_int_eq(rc, -EDEADLK);
}
END_TEST

/* ---- intrinsics -----------------------------------------------------------
 */

static uint32_t ref_clz64(uint64_t v)
{
	uint32_t n = 0;

	while (n < 64 && !(v >> (63 - n) & 1))
		n++;
	return n;
}

static uint32_t ref_ffs64(uint64_t v)
{
	uint32_t i;

	for (i = 0; i < 64; i++)
		if (v >> i & 1)
			return i + 1;
	return 0;
}

static uint64_t ref_brev(uint64_t v, unsigned int bits)
{
	uint64_t r = 0;
	unsigned int i;

	for (i = 0; i < bits; i++)
		if (v >> i & 1)
			r |= 1ull << (bits - 1 - i);
	return r;
}

static uint32_t ref_popc(uint64_t v)
{
	uint32_t n = 0;

	for (; v; v >>= 1)
		n += v & 1;
	return n;
}

/* hi:lo shifted left by k <= 32, the high word */
static uint32_t ref_shl_hi(uint32_t lo, uint32_t hi, uint32_t k)
{
	return k == 0 ? hi : k == 32 ? lo : hi << k | lo >> (32 - k);
}

/* hi:lo shifted right by k <= 32, the low word */
static uint32_t ref_shr_lo(uint32_t lo, uint32_t hi, uint32_t k)
{
	return k == 0 ? lo : k == 32 ? hi : lo >> k | hi << (32 - k);
}

START_TEST(test_simt_bits)
{
	static const uint32_t fixed[][3] = {
		{ 0, 0, 0 },
		{ 0xffffffffu, 0xffffffffu, 0x3210 },
		{ 0x80000000u, 1, 31 },
		{ 0x12345678u, 0x9abcdef0u, 0x7654 },
		{ 0x12345678u, 0x9abcdef0u, 32 },
		{ 0x00010000u, 0, 33 },
		{ 0x7fc00000u, 0x3f800000u, 0x1054 }, /* NaN, 1.0f */
		{ 0x40000000u, 0xbf800000u, 0xffff }, /* 2.0f, -1.0f */
		{ 0x3f000000u, 0, 0x4321 }, /* 0.5f */
	};
	uint32_t out[16], x, y, s, k, e, n, seed = 11;
	uint64_t w;
	float f;
	uint8_t by[8];

	for (n = 0; n < 200; n++) {
		if (n < sizeof(fixed) / sizeof(fixed[0])) {
			x = fixed[n][0];
			y = fixed[n][1];
			s = fixed[n][2];
		} else {
			x = lcg(&seed) << 8 ^ lcg(&seed);
			y = lcg(&seed) << 8 ^ lcg(&seed);
			s = lcg(&seed) % (n & 1 ? 64 : 0x10000);
		}
		w = (uint64_t)y << 32 | x;
		simt_selftest_bits(x, y, s, out);
		EXPECT_EQ(out[0], ref_popc(x), "__popc(0x%08x)", x);
		EXPECT_EQ(out[1], ref_ffs64(x), "__ffs(0x%08x)", x);
		EXPECT_EQ(out[2], ref_clz64(x) - 32, "__clz(0x%08x)", x);
		EXPECT_EQ(out[3], ref_brev(x, 32), "__brev(0x%08x)", x);
		memcpy(by, &x, 4); /* little-endian: x bytes 0-3, y 4-7 */
		memcpy(by + 4, &y, 4);
		for (e = 0, k = 0; k < 4; k++)
			e |= (uint32_t)by[(s >> (4 * k)) & 7] << (8 * k);
		EXPECT_EQ(out[4], e, "__byte_perm(0x%08x, 0x%08x, 0x%x)", x, y,
			  s);
		EXPECT_EQ(out[5], ref_shl_hi(x, y, s % 32),
			  "__funnelshift_l(0x%08x, 0x%08x, %u)", x, y, s);
		EXPECT_EQ(out[6], ref_shr_lo(x, y, s % 32),
			  "__funnelshift_r(0x%08x, 0x%08x, %u)", x, y, s);
		EXPECT_EQ(out[7], ref_shl_hi(x, y, s < 32 ? s : 32),
			  "__funnelshift_lc(0x%08x, 0x%08x, %u)", x, y, s);
		EXPECT_EQ(out[8], ref_shr_lo(x, y, s < 32 ? s : 32),
			  "__funnelshift_rc(0x%08x, 0x%08x, %u)", x, y, s);
		EXPECT_EQ(out[9], (uint32_t)((uint64_t)x * y >> 32),
			  "__umulhi(0x%08x, 0x%08x)", x, y);
		EXPECT_EQ(out[10], ref_popc(w), "__popcll(0x%016jx)",
			  (uintmax_t)w);
		EXPECT_EQ(out[11], ref_ffs64(w), "__ffsll(0x%016jx)",
			  (uintmax_t)w);
		EXPECT_EQ(out[12], ref_clz64(w), "__clzll(0x%016jx)",
			  (uintmax_t)w);
		EXPECT_EQ((uint64_t)out[14] << 32 | out[13], ref_brev(w, 64),
			  "__brevll(0x%016jx)", (uintmax_t)w);
		memcpy(&f, &x, 4);
		f = f >= 1.0f ? 1.0f : f > 0.0f ? f : 0.0f; /* NaN: 0 */
		memcpy(&e, &f, 4);
		EXPECT_EQ(out[15], e, "__saturatef(0x%08x)", x);
	}
}
END_TEST

/* ---- kernel bugs --------------------------------------------------------- */

/* simt_selftest_broken(@which) must abort and say @what on stderr. */
static void expect_abort(int which, const char *what)
{
	char dir[4096], path[4200], *err;
	int st, fd;
	pid_t pid;

	kvmem_check_tmpdir_make(dir, sizeof(dir), "simt");
	ck_assert_msg(dir[0], "mkdtemp: %s", strerror(errno));
	snprintf(path, sizeof(path), "%s/err", dir);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd < 0 || dup2(fd, 2) < 0)
			_exit(126);
		simt_selftest_broken(which);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	err = kvmem_check_read_file(path, NULL);
	kvmem_check_tmpdir_remove(dir);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
		      "bug %d: status 0x%x, not SIGABRT; stderr: %s", which, st,
		      err);
	ck_assert_msg(strstr(err, "simt: ") == err && strstr(err, what) &&
			      strstr(err, "selftest.cc:"),
		      "bug %d: stderr lacks \"%s\": %s", which, what, err);
	free(err);
}

/* ---- tensor cores ------------------------------------------------------ */

/* An FP16 value from its bits, by the IEEE 754 binary16 rules. */
static double half_bits(uint16_t h)
{
	const int e = h >> 10 & 0x1f, m = h & 0x3ff;
	const double v = e ? ldexp(1.0 + m / 1024.0, e - 15) : ldexp(m, -24);

	return h & 0x8000 ? -v : v;
}

/*
 * The executor's mma.sync m16n8k16: D = A.B + C for FP16 A and B (normal,
 * subnormal and zero values of both signs) and FP32 C, each element of D
 * the float nearest the exact sum, with the fragments laid out by the PTX
 * ISA's formulas (selftest.cc).
 */
START_TEST(test_simt_mma)
{
	uint16_t a[16 * 16], b[16 * 8];
	float c[16 * 8], d[16 * 8];
	uint32_t seed = 99;
	unsigned int n, i, r, k, x;
	double e;

	for (n = 0; n < 20; n++) {
		for (i = 0; i < 16 * 16 + 16 * 8; i++) {
			x = lcg(&seed);
			/* exponents 0 (subnormal) to 20, so sums stay far
			 * from overflow */
			x = (x & 0x83ff) | (x >> 16) % 21 << 10;
			if (i < 16 * 16)
				a[i] = (uint16_t)x;
			else
				b[i - 16 * 16] = (uint16_t)x;
		}
		for (i = 0; i < 16 * 8; i++)
			c[i] = (float)((int)(lcg(&seed) % 2001) - 1000) / 8.0f;
		ck_assert_int_eq(simt_selftest_mma(a, b, c, d), 0);
		for (r = 0; r < 16; r++)
			for (i = 0; i < 8; i++) {
				for (e = c[r * 8 + i], k = 0; k < 16; k++)
					e += half_bits(a[r * 16 + k]) *
					     half_bits(b[k * 8 + i]);
				EXPECT_FEQ(d[r * 8 + i], (float)e,
					   "D[%u][%u] of case %u", r, i, n);
			}
	}
}
END_TEST

START_TEST(test_simt_bugs_caught)
{
	static const char *const what[] = {
		"divergent __syncthreads",
		"is not in its mask",
		"which does not exist",
		"divergent __shfl_xor_sync",
		"reads lane 20, which is not in mask 0x0000ffff",
		"divergent __syncwarp",
		"width 12 is not a power of 2",
		"deadlock in __shfl_sync",
		"__syncthreads outside a kernel",
		"divergent mma.sync.m16n8k16: mask 0xffffffff names lane 8 of "
		"warp 1",
	};
	int k;

	for (k = 0; k < (int)(sizeof(what) / sizeof(what[0])); k++)
		expect_abort(k, what[k]);
}
END_TEST

/* ---- simt-race: TSAN and the divergence checks --------------------------- */

/*
 * Run simt-race @mode from $KVMEM_BUILD/tests with ASLR off, as setarch -R
 * does: TSAN's fixed shadow layout fails ("FATAL: ThreadSanitizer:
 * unexpected memory mapping") on kernels that randomise mmap with more bits
 * than it expects.
 */
static void run_race(struct kvmem_run *r, const char *mode)
{
	char bin[4096], dir[4096], out[4200], err[4200];
	int st, p;
	pid_t pid;

	snprintf(bin, sizeof(bin), "%s/tests/simt-race",
		 kvmem_check_builddir());
	ck_assert_msg(access(bin, X_OK) == 0, "%s not built: %s", bin,
		      strerror(errno));
	kvmem_check_tmpdir_make(dir, sizeof(dir), "simt");
	ck_assert_msg(dir[0], "mkdtemp: %s", strerror(errno));
	snprintf(out, sizeof(out), "%s/out", dir);
	snprintf(err, sizeof(err), "%s/err", dir);

	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fi = open("/dev/null", O_RDONLY);
		int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (fi < 0 || fo < 0 || fe < 0 || dup2(fi, 0) < 0 ||
		    dup2(fo, 1) < 0 || dup2(fe, 2) < 0)
			_exit(126);
		p = personality(0xffffffff);
		if (p != -1)
			personality((unsigned long)p | ADDR_NO_RANDOMIZE);
		execl(bin, bin, mode, (char *)NULL);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	r->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	r->out = kvmem_check_read_file(out, NULL);
	r->err = kvmem_check_read_file(err, NULL);
	kvmem_check_tmpdir_remove(dir);
	ck_assert_msg(r->status != 126 && r->status != 127,
		      "could not start %s (status %d)", bin, r->status);
	ck_assert_msg(!strstr(r->err, "FATAL: ThreadSanitizer"),
		      "TSAN could not start: %s", r->err);
}

/* "race.cc:N" for the line of race.cc holding @marker. */
static void race_site(char *buf, size_t len, const char *marker)
{
	char path[4096], *text, *at, *c;
	unsigned int line = 1;

	snprintf(path, sizeof(path), "%s/tests/simt/race.cc",
		 kvmem_check_srcdir());
	text = kvmem_check_read_file(path, NULL);
	at = strstr(text, marker);
	ck_assert_msg(at != NULL, "%s: no \"%s\"", path, marker);
	for (c = text; c < at; c++)
		line += *c == '\n';
	free(text);
	snprintf(buf, len, "race.cc:%u", line);
}

#define assert_err_has(r, needle)                       \
	ck_assert_msg(strstr((r)->err, needle) != NULL, \
		      "stderr lacks \"%s\": %s", needle, (r)->err)

START_TEST(test_simt_race_sync)
{
	struct kvmem_run r;

	run_race(&r, "sync");
	ck_assert_msg(r.status == 0 && !strstr(r.err, "ThreadSanitizer"),
		      "status %d; stderr: %s", r.status, r.err);
	ck_assert_msg(strstr(r.out, "sync: sum ") == r.out, "stdout: %s",
		      r.out);
	kvmem_check_run_free(&r);
}
END_TEST

START_TEST(test_simt_race_nosync)
{
	struct kvmem_run r;

	run_race(&r, "nosync");
	/* TSAN's exit code when it reported something */
	ck_assert_msg(r.status == 66, "status %d; stderr: %s", r.status, r.err);
	assert_err_has(&r, "WARNING: ThreadSanitizer: data race");
	/* the write of s[t] and the read of s[(t + 33) % NT] */
	assert_err_has(&r, "exchange<false>");
	kvmem_check_run_free(&r);
}
END_TEST

/* simt-race @mode aborts with "simt: race.cc:N: @what" for @marker's N. */
static void check_caught(const char *mode, const char *marker, const char *what)
{
	struct kvmem_run r;
	char site[64], want[160];

	race_site(site, sizeof(site), marker);
	snprintf(want, sizeof(want), "%s: %s", site, what);
	run_race(&r, mode);
	ck_assert_msg(r.status == 128 + SIGABRT, "status %d; stderr: %s",
		      r.status, r.err);
	assert_err_has(&r, "simt: ");
	assert_err_has(&r, want);
	ck_assert_msg(!strstr(r.err, "not caught"), "stderr: %s", r.err);
	kvmem_check_run_free(&r);
}

START_TEST(test_simt_divergent_barrier)
{
	check_caught("divergent-barrier", "/* divergent-barrier */",
		     "divergent __syncthreads");
}
END_TEST

START_TEST(test_simt_divergent_shfl)
{
	check_caught("divergent-shfl", "/* divergent-shfl */",
		     "divergent __shfl_xor_sync");
}
END_TEST

START_TEST(test_simt_deadlock)
{
	check_caught("deadlock", "/* deadlock-shfl */",
		     "deadlock in __shfl_sync");
}
END_TEST

KVMEM_SUITE(simt)
{
	Suite *s = suite_create("simt");
	TCase *tc = tcase_create("semantics");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_simt_block_sum);
	tcase_add_test(tc, test_simt_warp_reduce);
	tcase_add_test(tc, test_simt_shfl_width);
	tcase_add_test(tc, test_simt_vote);
	tcase_add_test(tc, test_simt_partial_warp);
	tcase_add_test(tc, test_simt_atomics);
	tcase_add_test(tc, test_simt_index);
	tcase_add_test(tc, test_simt_dyn_smem);
	tcase_add_test(tc, test_simt_launch_limits);
	tcase_add_test(tc, test_simt_create_failure);
	tcase_add_test(tc, test_simt_nested_launch);
	tcase_add_test(tc, test_simt_bits);
	tcase_add_test(tc, test_simt_mma);
	tcase_add_test(tc, test_simt_bugs_caught);
	suite_add_tcase(s, tc);

	tc = tcase_create("race");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_simt_race_sync);
	tcase_add_test(tc, test_simt_race_nosync);
	tcase_add_test(tc, test_simt_divergent_barrier);
	tcase_add_test(tc, test_simt_divergent_shfl);
	tcase_add_test(tc, test_simt_deadlock);
	suite_add_tcase(s, tc);
	return s;
}
