/* SPDX-License-Identifier: MIT */
/*
 * rng.h - small, seeded, deterministic random numbers (xoshiro256**)
 *
 * Not for secrets. Seeded through splitmix64 so that neighbouring seeds give
 * unrelated streams. Internal to libkvmem, its tests and its tools (which
 * include it through kvmem-private.h).
 */
#ifndef KVMEM_RNG_H
#define KVMEM_RNG_H

#include <stdint.h>

struct kvmem_rng {
	uint64_t s[4];
};

static inline uint64_t kvmem_splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ z >> 30) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ z >> 27) * 0x94d049bb133111ebull;
	return z ^ z >> 31;
}

static inline void kvmem_rng_seed(struct kvmem_rng *r, uint64_t seed)
{
	int i;

	for (i = 0; i < 4; i++)
		r->s[i] = kvmem_splitmix64(&seed);
}

static inline uint64_t kvmem_rotl64(uint64_t x, int k)
{
	return x << k | x >> (64 - k);
}

static inline uint64_t kvmem_rng_next(struct kvmem_rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = kvmem_rotl64(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = kvmem_rotl64(s[3], 45);
	return out;
}

/* Uniform in [0, n), unbiased (Lemire's multiply-and-reject). */
static inline uint64_t kvmem_rng_below(struct kvmem_rng *r, uint64_t n)
{
	unsigned __int128 m = (unsigned __int128)kvmem_rng_next(r) * n;
	uint64_t lo = (uint64_t)m;

	if (lo < n) {
		uint64_t floor = (0 - n) % n;

		while (lo < floor) {
			m = (unsigned __int128)kvmem_rng_next(r) * n;
			lo = (uint64_t)m;
		}
	}
	return (uint64_t)(m >> 64);
}

/* Uniform in (0, 1]: never 0, so log() of it is finite. */
static inline double kvmem_rng_unit(struct kvmem_rng *r)
{
	return (double)((kvmem_rng_next(r) >> 11) + 1) * 0x1p-53;
}

#endif /* KVMEM_RNG_H */
