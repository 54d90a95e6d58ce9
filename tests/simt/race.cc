/* SPDX-License-Identifier: MIT */
/*
 * race.cc - simt-race: broken kernels, to show that the executor and
 * ThreadSanitizer catch them (tests/check_simt.c runs it)
 *
 *   simt-race sync                a correct exchange through shared memory
 *   simt-race nosync              the same without its __syncthreads: a
 *                                 data race TSAN must report
 *   simt-race divergent-barrier   a __syncthreads only some threads reach
 *   simt-race divergent-shfl      a full-mask shuffle half the warp skips
 *   simt-race deadlock            warp 0 in __syncthreads, half of warp 1
 *                                 in a shuffle waiting for the other half
 *
 * The last three abort with a "simt:" report naming the call site; the
 * test finds the lines by the comments that mark them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "simt.h"

#define NT 64 /* threads: two warps */
#define NB 2 /* blocks */

/*
 * Each thread publishes a value, swaps one with its neighbour lane, then
 * reads what a thread of the other warp published: that needs the
 * __syncthreads, which the shuffle in between does not replace.
 */
template <bool SYNC> __global__ void exchange(int *out)
{
	__shared__ int s[NT];
	unsigned int t = threadIdx.x;
	int v = (int)(blockIdx.x * 1000 + t);

	s[t] = v * 3;
	v = __shfl_xor_sync(0xffffffffu, v, 1);
	if (SYNC)
		__syncthreads();
	v += s[(t + 33) % NT];
	out[blockIdx.x * NT + t] = v;
}

__global__ void divergent_barrier(int *out)
{
	if (threadIdx.x < 40)
		__syncthreads(); /* divergent-barrier */
	out[threadIdx.x] = 1;
}

__global__ void divergent_shfl(int *out)
{
	int v = (int)threadIdx.x;

	if ((threadIdx.x & 31) < 16)
		v = __shfl_xor_sync(0xffffffffu, v, 1); /* divergent-shfl */
	out[threadIdx.x] = v;
}

__global__ void deadlock(int *out)
{
	int v = (int)threadIdx.x;

	if (threadIdx.x >= 32 && threadIdx.x < 48)
		v = __shfl_sync(0xffffffffu, v, 0); /* deadlock-shfl */
	__syncthreads(); /* deadlock-barrier */
	out[threadIdx.x] = v;
}

static int run_exchange(bool sync)
{
	int out[NB * NT], b, t, want, err;
	long sum = 0;

	err = sync ? simt_launch(exchange<true>, dim3(NB), dim3(NT), 0, out)
		   : simt_launch(exchange<false>, dim3(NB), dim3(NT), 0, out);
	if (err) {
		fprintf(stderr, "simt-race: launch: %s\n", strerror(-err));
		return 1;
	}
	for (b = 0; b < NB; b++) {
		for (t = 0; t < NT; t++) {
			want = b * 1000 + (t ^ 1) +
			       3 * (b * 1000 + (t + 33) % NT);
			if (sync && out[b * NT + t] != want) {
				fprintf(stderr,
					"simt-race: block %d thread %d: %d, "
					"want %d\n",
					b, t, out[b * NT + t], want);
				return 1;
			}
			sum += out[b * NT + t];
		}
	}
	printf("%s: sum %ld\n", sync ? "sync" : "nosync", sum);
	return 0;
}

int main(int argc, char **argv)
{
	int out[NT];
	int err;

	if (argc != 2) {
		fprintf(stderr,
			"usage: simt-race sync|nosync|divergent-barrier|"
			"divergent-shfl|deadlock\n");
		return 2;
	}
	if (!strcmp(argv[1], "sync"))
		return run_exchange(true);
	if (!strcmp(argv[1], "nosync"))
		return run_exchange(false);
	if (!strcmp(argv[1], "divergent-barrier"))
		err = simt_launch(divergent_barrier, dim3(1), dim3(NT), 0, out);
	else if (!strcmp(argv[1], "divergent-shfl"))
		err = simt_launch(divergent_shfl, dim3(1), dim3(32), 0, out);
	else if (!strcmp(argv[1], "deadlock"))
		err = simt_launch(deadlock, dim3(1), dim3(NT), 0, out);
	else
		err = -EINVAL;
	/* Only reached when the executor missed it. */
	fprintf(stderr, "simt-race: %s: not caught (%d)\n", argv[1], err);
	return 1;
}
