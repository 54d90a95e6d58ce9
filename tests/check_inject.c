/* SPDX-License-Identifier: MIT */
/*
 * check_inject.c - the bit-error injector, checked by recounting its work
 *
 * The injector reports what it flipped; every test here XORs the buffer
 * against a copy of the original and recounts bit by bit, so the report is
 * checked against the buffer, never against itself. Rates are checked
 * against the binomial (or renewal) mean with a 6 sigma bound: with the
 * fixed seeds used the tests are deterministic, and a real bias of even a
 * few percent is far outside the bound at these sample sizes.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvmem/inject.h"
#include "kvmem_check.h"
#include "rng.h"

/* |got - mean| within 6 sigma (plus one for tiny means). */
#define EXPECT_6SIGMA(got, mean, sigma, fmt, ...)                             \
	do {                                                                  \
		double x_g_ = (double)(got), x_m_ = (mean), x_s_ = (sigma);   \
		if (fabs(x_g_ - x_m_) > 6 * x_s_ + 1)                         \
			ck_abort_msg(                                         \
				"%s = %.0f, expected %.1f +- 6 * %.2f; " fmt, \
				#got, x_g_, x_m_, x_s_, __VA_ARGS__);         \
	} while (0)

static struct kvmem_inject_params mkparams(uint32_t mode, uint32_t k,
					   double ber, uint64_t seed,
					   uint32_t word_bits,
					   uint32_t word_bytes)
{
	struct kvmem_inject_params p;

	memset(&p, 0, sizeof(p));
	p.mode = mode;
	p.k = k;
	p.ber = ber;
	p.seed = seed;
	p.word_bits = word_bits;
	p.word_bytes = word_bytes;
	return p;
}

/* Was bit @b of word @w changed? */
static int flipped(const uint8_t *orig, const uint8_t *buf,
		   const struct kvmem_inject_params *p, size_t w,
		   unsigned int b)
{
	size_t i = w * p->word_bytes + b / 8;

	return (orig[i] ^ buf[i]) >> (b % 8) & 1;
}

/* Bits that changed in word @w; fails if one outside the live bits did. */
static unsigned int word_flips(const uint8_t *orig, const uint8_t *buf,
			       const struct kvmem_inject_params *p, size_t w)
{
	unsigned int i, n = 0, live;
	size_t at = w * p->word_bytes;
	uint8_t x;

	for (i = 0; i < p->word_bytes; i++) {
		x = orig[at + i] ^ buf[at + i];
		if (!x)
			continue;
		/* Live bits of byte i: all, none, or the low ones. */
		if (p->word_bits >= 8 * (i + 1))
			live = 0xff;
		else if (p->word_bits <= 8 * i)
			live = 0;
		else
			live = (1u << (p->word_bits - 8 * i)) - 1;
		if (x & ~live)
			ck_abort_msg("word %zu: byte %u changed by 0x%02x, "
				     "only %u bits are live",
				     w, i, x, p->word_bits);
		n += (unsigned int)__builtin_popcount(x);
	}
	return n;
}

/* Add word @w's flips to the per-position counts @pos. */
static void count_positions(const uint8_t *orig, const uint8_t *buf,
			    const struct kvmem_inject_params *p, size_t w,
			    uint64_t *pos)
{
	unsigned int i, b;
	size_t at = w * p->word_bytes;
	uint8_t x;

	for (i = 0; i < p->word_bytes; i++) {
		x = orig[at + i] ^ buf[at + i];
		for (b = 0; x; b++, x >>= 1)
			pos[8 * i + b] += x & 1;
	}
}

/* by_flips[] index of a word with @f flips: the last counts "or more". */
static unsigned int bucket(unsigned int f)
{
	return f < KVMEM_INJECT_HIST ? f : KVMEM_INJECT_HIST - 1;
}

struct recount {
	uint64_t bits, words, by_flips[KVMEM_INJECT_HIST];
};

/*
 * Recount from the buffers and check the report against it: totals,
 * histogram, and the hit list (the first hits_cap hit words, increasing,
 * nothing written past hits_len).
 */
static void expect_report(const uint8_t *orig, const uint8_t *buf, size_t n,
			  const struct kvmem_inject_params *p,
			  const struct kvmem_inject_report *rep,
			  struct recount *rc, const char *what)
{
	size_t w, h = 0;
	unsigned int f, i;

	memset(rc, 0, sizeof(*rc));
	for (w = 0; w < n; w++) {
		f = word_flips(orig, buf, p, w);
		if (!f)
			continue;
		rc->bits += f;
		rc->words++;
		rc->by_flips[bucket(f)]++;
		if (rep->hits && h < rep->hits_cap) {
			EXPECT_EQ(rep->hits[h].word, w, "%s hit %zu", what, h);
			EXPECT_EQ(rep->hits[h].flips, f, "%s hit %zu", what, h);
		}
		h++;
	}
	EXPECT_EQ(rep->bits, rc->bits, "%s", what);
	EXPECT_EQ(rep->words, rc->words, "%s", what);
	for (i = 0; i < KVMEM_INJECT_HIST; i++)
		EXPECT_EQ(rep->by_flips[i], rc->by_flips[i], "%s by_flips[%u]",
			  what, i);
	if (rep->hits) {
		EXPECT_EQ(rep->hits_len, h < rep->hits_cap ? h : rep->hits_cap,
			  "%s", what);
		/* The slot after the last one written is untouched. */
		if (rep->hits_len < rep->hits_cap)
			EXPECT_EQ(rep->hits[rep->hits_len].word, UINT64_MAX,
				  "%s: written past hits_len", what);
	} else {
		EXPECT_EQ(rep->hits_len, 0, "%s", what);
	}
}

/* A report with room for @cap hits, marked so overruns show. */
static void report_init(struct kvmem_inject_report *rep,
			struct kvmem_inject_hit *hits, size_t cap, size_t room)
{
	size_t i;

	memset(rep, 0xee, sizeof(*rep));
	rep->hits = hits;
	rep->hits_cap = cap;
	for (i = 0; hits && i < room; i++) {
		hits[i].word = UINT64_MAX;
		hits[i].flips = UINT32_MAX;
		hits[i].resv = UINT32_MAX;
	}
}

/* Same seed, same flips and same report; another seed, other flips. */
START_TEST(test_inject_deterministic)
{
	enum { N = 20000, CAP = 64 };
	static const uint32_t modes[] = {
		KVMEM_INJECT_BSC,    KVMEM_INJECT_EXACT,    KVMEM_INJECT_BURST,
		KVMEM_INJECT_BYTE,   KVMEM_INJECT_ADJACENT, KVMEM_INJECT_LINE,
		KVMEM_INJECT_COLUMN,
	};
	struct kvmem_inject_hit h1[CAP + 1], h2[CAP + 1];
	struct kvmem_inject_report r1, r2;
	struct kvmem_inject_params p;
	struct kvmem_rng r;
	uint8_t *orig = kvmem_check_xmalloc(3 * N),
		*a = kvmem_check_xmalloc(3 * N),
		*b = kvmem_check_xmalloc(3 * N);
	unsigned int m;

	kvmem_rng_seed(&r, 0xde7);
	kvmem_check_fill_random(&r, orig, 3 * N);
	for (m = 0; m < KVMEM_ARRAY_SIZE(modes); m++) {
		/* Rows of 64 bytes: 512 columns, about 5 of them stuck. */
		p = mkparams(modes[m], modes[m] == KVMEM_INJECT_COLUMN ? 64 : 2,
			     0.01, 42, 24, 3);
		memcpy(a, orig, 3 * N);
		memcpy(b, orig, 3 * N);
		report_init(&r1, h1, CAP, CAP + 1);
		report_init(&r2, h2, CAP, CAP + 1);
		ck_assert_int_eq(kvmem_inject(a, N, &p, &r1), 0);
		ck_assert_int_eq(kvmem_inject(b, N, &p, &r2), 0);
		ck_assert_mem_eq(a, b, 3 * N);
		ck_assert_int_ne(memcmp(a, orig, 3 * N), 0);
		ck_assert_uint_eq(r1.bits, r2.bits);
		ck_assert_uint_eq(r1.words, r2.words);
		ck_assert_mem_eq(r1.by_flips, r2.by_flips, sizeof(r1.by_flips));
		ck_assert_uint_eq(r1.hits_len, r2.hits_len);
		ck_assert_mem_eq(h1, h2, sizeof(h1));
		/* Without a report, the same flips still. */
		memcpy(b, orig, 3 * N);
		ck_assert_int_eq(kvmem_inject(b, N, &p, NULL), 0);
		ck_assert_mem_eq(a, b, 3 * N);
		/* The next seed flips other bits. */
		p.seed = 43;
		memcpy(b, orig, 3 * N);
		ck_assert_int_eq(kvmem_inject(b, N, &p, NULL), 0);
		ck_assert_int_ne(memcmp(a, b, 3 * N), 0);
	}
	free(orig);
	free(a);
	free(b);
}
END_TEST

/*
 * BSC: the number of flips is Binomial(N, ber), each live bit position of
 * a word is hit equally often, and the words' flip counts follow
 * Binomial(word_bits, ber).
 */
START_TEST(test_inject_bsc_rate)
{
	static const double bers[] = { 1e-4, 1e-3, 1e-2, 0.05, 0.25, 0.5, 0.9 };
	static const uint32_t layouts[][2] = {
		{ 8, 1 }, { 7, 1 }, { 24, 3 }, { 72, 9 }
	};
	struct kvmem_inject_report rep;
	struct kvmem_inject_params p;
	struct recount rc;
	unsigned int bi, li, i;

	for (li = 0; li < 4; li++)
		for (bi = 0; bi < 7; bi++) {
			double ber = bers[bi];
			uint32_t wbits = layouts[li][0],
				 wbytes = layouts[li][1];
			/* Enough bits for ~400k flips, at most 2^21. */
			double want = 4e5 / ber < 2097152 ? 4e5 / ber : 2097152;
			size_t n = (size_t)(want / wbits) + 1, w;
			uint8_t *orig = kvmem_check_xmalloc(n * wbytes);
			uint8_t *buf = kvmem_check_xmalloc(n * wbytes);
			double bits = (double)n * wbits, mean, pw;
			uint64_t *pos =
				kvmem_check_xmalloc(8 * wbytes * sizeof(*pos));
			unsigned int b;

			memset(orig, 0, n * wbytes);
			memcpy(buf, orig, n * wbytes);
			memset(pos, 0, 8 * wbytes * sizeof(*pos));
			p = mkparams(KVMEM_INJECT_BSC, 0, ber,
				     1000 + li * 10 + bi, wbits, wbytes);
			report_init(&rep, NULL, 0, 0);
			ck_assert_int_eq(kvmem_inject(buf, n, &p, &rep), 0);
			expect_report(orig, buf, n, &p, &rep, &rc, "bsc");
			EXPECT_6SIGMA(rc.bits, bits * ber,
				      sqrt(bits * ber * (1 - ber)),
				      "ber %g layout %u/%u", ber, wbits,
				      wbytes);
			/* Per position within the word. */
			for (w = 0; w < n; w++)
				count_positions(orig, buf, &p, w, pos);
			for (b = 0; b < wbits; b++)
				EXPECT_6SIGMA(pos[b], n * ber,
					      sqrt(n * ber * (1 - ber)),
					      "ber %g layout %u/%u bit %u", ber,
					      wbits, wbytes, b);
			/* Histogram of flips per word (buckets below 7). */
			for (i = 1; i < KVMEM_INJECT_HIST - 1 && i <= wbits;
			     i++) {
				pw = exp(lgamma(wbits + 1.0) - lgamma(i + 1.0) -
					 lgamma(wbits - i + 1.0) +
					 i * log(ber) +
					 (wbits - i) * log1p(-ber));
				mean = n * pw;
				EXPECT_6SIGMA(
					rc.by_flips[i], mean,
					sqrt(mean * (1 - pw)),
					"ber %g layout %u/%u by_flips[%u]", ber,
					wbits, wbytes, i);
			}
			free(orig);
			free(buf);
			free(pos);
		}
}
END_TEST

/* The report against a recount, for several layouts and hit capacities. */
START_TEST(test_inject_report_recount)
{
	static const struct {
		uint32_t bits, bytes;
		double ber;
	} lay[] = {
		{ 24, 3, 0.3 }, /* fills the "7 or more" bucket */
		{ 7, 1, 0.2 }, /* h74: bit 7 is not live */
		{ 13, 3, 0.1 }, /* live bits end mid-byte */
		{ 72, 9, 0.05 }, /* secded72 */
		{ 512, 64, 0.01 } /* the widest word */
	};
	enum { N = 5000 };
	static struct kvmem_inject_hit hits[N + 1];
	const size_t caps[] = { 0, 1, 5, 100, N };
	struct kvmem_inject_report rep;
	struct kvmem_inject_params p;
	struct kvmem_rng r;
	struct recount rc;
	unsigned int li, ci;
	uint8_t *orig = kvmem_check_xmalloc(64 * N),
		*buf = kvmem_check_xmalloc(64 * N);

	kvmem_rng_seed(&r, 0x2ec0);
	for (li = 0; li < KVMEM_ARRAY_SIZE(lay); li++) {
		size_t nb = (size_t)N * lay[li].bytes;

		kvmem_check_fill_random(&r, orig, nb);
		for (ci = 0; ci <= KVMEM_ARRAY_SIZE(caps); ci++) {
			/* The last round: hits NULL with a capacity. */
			int nohits = ci == KVMEM_ARRAY_SIZE(caps);

			p = mkparams(KVMEM_INJECT_BSC, 0, lay[li].ber, 7 + li,
				     lay[li].bits, lay[li].bytes);
			memcpy(buf, orig, nb);
			report_init(&rep, nohits ? NULL : hits,
				    nohits ? 10 : caps[ci], N + 1);
			ck_assert_int_eq(kvmem_inject(buf, N, &p, &rep), 0);
			/* The caller's fields are kept. */
			ck_assert_ptr_eq(rep.hits, nohits ? NULL : hits);
			ck_assert_uint_eq(rep.hits_cap, nohits ? 10 : caps[ci]);
			expect_report(orig, buf, N, &p, &rep, &rc, "recount");
			ck_assert_uint_eq(rep.by_flips[0], 0);
		}
		if (lay[li].bits == 24)
			ck_assert_uint_gt(rc.by_flips[KVMEM_INJECT_HIST - 1],
					  0);
	}
	free(orig);
	free(buf);
}
END_TEST

/* EXACT: k flips in every word, all live, at uniform positions. */
START_TEST(test_inject_exact)
{
	static const uint32_t layouts[][2] = {
		{ 7, 1 }, { 8, 1 }, { 13, 3 }, { 24, 3 }, { 72, 9 }, { 512, 64 }
	};
	enum { N = 3000 };
	static struct kvmem_inject_hit hits[N + 1];
	struct kvmem_inject_report rep;
	struct kvmem_inject_params p;
	struct kvmem_rng r;
	struct recount rc;
	uint8_t *orig = kvmem_check_xmalloc(64 * N),
		*buf = kvmem_check_xmalloc(64 * N);
	uint64_t pos[512];
	unsigned int li, ki, b;
	size_t w;

	kvmem_rng_seed(&r, 0xe8ac7);
	for (li = 0; li < KVMEM_ARRAY_SIZE(layouts); li++) {
		uint32_t wbits = layouts[li][0], wbytes = layouts[li][1];
		const uint32_t ks[] = { 1, 2, 3, wbits - 1, wbits };

		kvmem_check_fill_random(&r, orig, (size_t)N * wbytes);
		for (ki = 0; ki < KVMEM_ARRAY_SIZE(ks); ki++) {
			uint32_t k = ks[ki];

			p = mkparams(KVMEM_INJECT_EXACT, k, 0.0, 99 + ki, wbits,
				     wbytes);
			memcpy(buf, orig, (size_t)N * wbytes);
			report_init(&rep, hits, N, N + 1);
			ck_assert_int_eq(kvmem_inject(buf, N, &p, &rep), 0);
			expect_report(orig, buf, N, &p, &rep, &rc, "exact");
			memset(pos, 0, sizeof(pos));
			for (w = 0; w < N; w++) {
				EXPECT_EQ(word_flips(orig, buf, &p, w), k,
					  "layout %u/%u word %zu", wbits,
					  wbytes, w);
				count_positions(orig, buf, &p, w, pos);
			}
			ck_assert_uint_eq(rep.bits, (uint64_t)N * k);
			ck_assert_uint_eq(rep.words, N);
			ck_assert_uint_eq(rep.by_flips[bucket(k)], N);
			/* Each position is in the k-subset with
			 * probability k / word_bits. */
			for (b = 0; b < wbits; b++) {
				double q = (double)k / wbits;

				EXPECT_6SIGMA(pos[b], N * q,
					      sqrt(N * q * (1 - q)),
					      "layout %u/%u k %u bit %u", wbits,
					      wbytes, k, b);
			}
		}
	}
	free(orig);
	free(buf);
}
END_TEST

/* EXACT k = 2 on h84 words draws every one of the 28 pairs. */
START_TEST(test_inject_exact_pairs)
{
	enum { N = 4000 };
	struct kvmem_inject_params p =
		mkparams(KVMEM_INJECT_EXACT, 2, 0.0, 5, 8, 1);
	unsigned int seen[256] = { 0 }, pairs = 0, v;
	uint8_t buf[N];
	size_t w;

	memset(buf, 0, sizeof(buf));
	ck_assert_int_eq(kvmem_inject(buf, N, &p, NULL), 0);
	for (w = 0; w < N; w++) {
		EXPECT_EQ(__builtin_popcount(buf[w]), 2, "word %zu", w);
		seen[buf[w]]++;
	}
	for (v = 0; v < 256; v++)
		if (seen[v])
			pairs++;
	ck_assert_uint_eq(pairs, 28);
}
END_TEST

/* Channel bit @c: bit c % word_bits of word c / word_bits. */
static int chan_flipped(const uint8_t *orig, const uint8_t *buf,
			const struct kvmem_inject_params *p, uint64_t c)
{
	return flipped(orig, buf, p, c / p->word_bits,
		       (unsigned int)(c % p->word_bits));
}

/*
 * BURST: flipped channel bits come in runs of k (runs of 2k, 3k... where
 * bursts touch), the last one possibly clipped at the buffer end; bursts
 * cross word boundaries along the channel index; their number follows the
 * renewal mean N p / (1 - p + k p).
 */
START_TEST(test_inject_burst)
{
	static const struct {
		uint32_t bits, bytes, k;
		double ber;
	} cases[] = {
		{ 7, 1, 3, 0.002 }, /* h74 layout: skips bit 7 */
		{ 7, 1, 10, 0.001 }, /* longer than a word */
		{ 24, 3, 2, 0.005 },
		{ 72, 9, 4, 0.003 },
	};
	static struct kvmem_inject_hit hits[100];
	struct kvmem_inject_report rep;
	struct kvmem_inject_params p;
	struct recount rc;
	unsigned int ci;

	for (ci = 0; ci < KVMEM_ARRAY_SIZE(cases); ci++) {
		/* About 700k channel bits per case. */
		size_t N = 700000 / cases[ci].bits;
		size_t nb = N * cases[ci].bytes;
		uint8_t *orig = kvmem_check_xmalloc(nb),
			*buf = kvmem_check_xmalloc(nb);
		uint64_t total = (uint64_t)N * cases[ci].bits, c, run = 0;
		uint64_t runs = 0, crossing = 0, start = 0, kk = cases[ci].k;
		double pb = cases[ci].ber, mean;

		memset(orig, 0, nb);
		memcpy(buf, orig, nb);
		p = mkparams(KVMEM_INJECT_BURST, cases[ci].k, pb, 77 + ci,
			     cases[ci].bits, cases[ci].bytes);
		report_init(&rep, hits, 100, 100);
		ck_assert_int_eq(kvmem_inject(buf, N, &p, &rep), 0);
		expect_report(orig, buf, N, &p, &rep, &rc, "burst");
		for (c = 0; c <= total; c++) {
			if (c < total && chan_flipped(orig, buf, &p, c)) {
				if (!run++)
					start = c;
				continue;
			}
			if (!run)
				continue;
			if (c < total && run % kk)
				ck_abort_msg("case %u: run of %ju at channel "
					     "bit %ju, not a multiple of %ju",
					     ci, (uintmax_t)run,
					     (uintmax_t)start, (uintmax_t)kk);
			runs += (run + kk - 1) / kk;
			if (start / cases[ci].bits != (c - 1) / cases[ci].bits)
				crossing++;
			run = 0;
		}
		ck_assert_uint_gt(crossing, 0);
		mean = total * pb / (1 - pb + kk * pb);
		EXPECT_6SIGMA(runs, mean, sqrt(mean), "case %u", ci);
		free(orig);
		free(buf);
	}
}
END_TEST

/* ber = 1: bursts tile the channel from bit 0 and the last is clipped. */
START_TEST(test_inject_burst_clipped)
{
	struct kvmem_inject_params p =
		mkparams(KVMEM_INJECT_BURST, 5, 1.0, 1, 7, 1);
	struct kvmem_inject_report rep;
	uint8_t buf[3] = { 0, 0, 0 };

	/* 21 channel bits: bursts at 0, 5, 10, 15 and a 1-bit one at 20. */
	report_init(&rep, NULL, 0, 0);
	ck_assert_int_eq(kvmem_inject(buf, 3, &p, &rep), 0);
	ck_assert_uint_eq(buf[0], 0x7f);
	ck_assert_uint_eq(buf[1], 0x7f);
	ck_assert_uint_eq(buf[2], 0x7f);
	ck_assert_uint_eq(rep.bits, 21);
	ck_assert_uint_eq(rep.words, 3);
	ck_assert_uint_eq(rep.by_flips[7], 3);
}
END_TEST

/* Live bits of stored byte @j of a word of @p's layout. */
static unsigned int byte_live(const struct kvmem_inject_params *p, size_t j)
{
	if (p->word_bits >= 8 * (j + 1))
		return 8;
	return p->word_bits <= 8 * j ? 0 : p->word_bits - 8 * (unsigned int)j;
}

/* Stored bytes of @n words of @p's layout with at least one live bit. */
static size_t live_bytes(const struct kvmem_inject_params *p, size_t n)
{
	size_t j, per = 0;

	for (j = 0; j < p->word_bytes; j++)
		per += byte_live(p, j) > 0;
	return per * n;
}

/*
 * @p over a copy of @orig in @buf (@bytes of each): the number of words
 * it covered, with its report checked against the buffer.
 */
static size_t inject_checked(const uint8_t *orig, uint8_t *buf, size_t bytes,
			     const struct kvmem_inject_params *p,
			     const char *what)
{
	size_t n = bytes / p->word_bytes;
	struct kvmem_inject_report rep;
	struct recount rc;

	memcpy(buf, orig, bytes);
	report_init(&rep, NULL, 0, 0);
	ck_assert_int_eq(kvmem_inject(buf, n, p, &rep), 0);
	expect_report(orig, buf, n, p, &rep, &rc, what);
	return n;
}

static const uint32_t phys_layouts[][2] = {
	{ 7, 1 }, /* h74: bit 7 dead */
	{ 8, 1 }, /* h84 */
	{ 13, 3 }, /* a word whose last byte is padding */
	{ 24, 3 }, /* golay24 */
	{ 72, 9 }, /* secded72 */
};

/*
 * BYTE: every changed stored byte has exactly min(k, its live bits) bits
 * changed, and the number of hit bytes (among those with a live bit) is
 * Binomial(bytes, ber).
 */
START_TEST(test_inject_byte)
{
	enum { BYTES = 300000 };
	static struct kvmem_inject_hit hits[64];
	struct kvmem_inject_report rep;
	struct kvmem_inject_params p;
	struct kvmem_rng r;
	struct recount rc;
	uint8_t *orig = kvmem_check_xmalloc(BYTES),
		*buf = kvmem_check_xmalloc(BYTES);
	unsigned int li, k, want;
	size_t n, i, hit, live;
	const double pb = 0.004;

	kvmem_rng_seed(&r, 0xb17e);
	kvmem_check_fill_random(&r, orig, BYTES);
	for (li = 0; li < KVMEM_ARRAY_SIZE(phys_layouts); li++) {
		for (k = 1; k <= 8; k++) {
			p = mkparams(KVMEM_INJECT_BYTE, k, pb, 100 * li + k,
				     phys_layouts[li][0], phys_layouts[li][1]);
			n = BYTES / p.word_bytes;
			memcpy(buf, orig, BYTES);
			report_init(&rep, hits, 63, 64);
			ck_assert_int_eq(kvmem_inject(buf, n, &p, &rep), 0);
			expect_report(orig, buf, n, &p, &rep, &rc, "byte");
			hit = 0;
			for (i = 0; i < n * p.word_bytes; i++) {
				uint8_t x = orig[i] ^ buf[i];

				if (!x)
					continue;
				want = byte_live(&p, i % p.word_bytes);
				want = want < k ? want : k;
				EXPECT_EQ((unsigned int)__builtin_popcount(x),
					  want, "layout %u k %u byte %zu", li,
					  k, i);
				hit++;
			}
			live = live_bytes(&p, n);
			EXPECT_6SIGMA(hit, live * pb,
				      sqrt(live * pb * (1 - pb)),
				      "layout %u k %u", li, k);
		}
	}
	free(orig);
	free(buf);
}
END_TEST

/*
 * ADJACENT: changed bytes have one bit each, and come in runs of k (2k...
 * where hits touch; the last one may be clipped); their number follows the
 * renewal mean B p / (1 - p + k p).
 */
START_TEST(test_inject_adjacent)
{
	enum { BYTES = 300000 };
	static const uint32_t ks[] = { 1, 2, 3, 8, 64 };
	struct kvmem_inject_params p;
	uint8_t *orig = kvmem_check_xmalloc(BYTES),
		*buf = kvmem_check_xmalloc(BYTES);
	unsigned int li, ki;
	size_t n, i, run, runs, nb;
	const double pb = 0.002;
	double mean;

	memset(orig, 0, BYTES);
	/* Layouts whose every byte has a live bit: a hit shows in each. */
	for (li = 0; li < KVMEM_ARRAY_SIZE(phys_layouts); li++) {
		if (li == 2)
			continue;
		for (ki = 0; ki < KVMEM_ARRAY_SIZE(ks); ki++) {
			p = mkparams(KVMEM_INJECT_ADJACENT, ks[ki], pb,
				     7 * li + ki, phys_layouts[li][0],
				     phys_layouts[li][1]);
			n = inject_checked(orig, buf, BYTES, &p, "adjacent");
			nb = n * p.word_bytes;
			run = runs = 0;
			for (i = 0; i <= nb; i++) {
				if (i < nb && buf[i]) {
					EXPECT_EQ(__builtin_popcount(buf[i]), 1,
						  "byte %zu", i);
					run++;
					continue;
				}
				if (!run)
					continue;
				if (i < nb && run % ks[ki])
					ck_abort_msg("layout %u k %u: run of "
						     "%zu bytes ending at %zu",
						     li, ks[ki], run, i);
				runs += (run + ks[ki] - 1) / ks[ki];
				run = 0;
			}
			mean = nb * pb / (1 - pb + ks[ki] * pb);
			EXPECT_6SIGMA(runs, mean, sqrt(mean), "layout %u k %u",
				      li, ks[ki]);
		}
	}
	free(orig);
	free(buf);
}
END_TEST

/*
 * LINE: changes fall in whole lines counted from the start of the buffer;
 * a hit line has about half its live bits flipped (a line of 64 bytes
 * with none flipped has odds 2^-512), and the hit lines are
 * Binomial(lines, ber). At ber 1 every line is hit, the last one clipped.
 */
START_TEST(test_inject_line)
{
	enum { BYTES = 64 * 6000 + 40 };
	static const uint32_t lines[] = { 64, 48, 4096 };
	struct kvmem_inject_params p;
	struct kvmem_rng r;
	uint8_t *orig = kvmem_check_xmalloc(BYTES),
		*buf = kvmem_check_xmalloc(BYTES);
	unsigned int li, lk, pass;
	size_t n, nb, l, i, nl, hit, bits, live;
	double pb, mean;

	kvmem_rng_seed(&r, 0x11e);
	kvmem_check_fill_random(&r, orig, BYTES);
	for (li = 0; li < KVMEM_ARRAY_SIZE(phys_layouts); li++)
		for (lk = 0; lk < KVMEM_ARRAY_SIZE(lines); lk++)
			for (pass = 0; pass < 2; pass++) {
				pb = pass ? 1.0 : 0.02;
				p = mkparams(KVMEM_INJECT_LINE, lines[lk], pb,
					     31 * li + lk, phys_layouts[li][0],
					     phys_layouts[li][1]);
				n = inject_checked(orig, buf, BYTES, &p,
						   "line");
				nb = n * p.word_bytes;
				nl = (nb + lines[lk] - 1) / lines[lk];
				hit = 0;
				for (l = 0; l < nl; l++) {
					bits = live = 0;
					for (i = l * lines[lk];
					     i < nb && i < (l + 1) * lines[lk];
					     i++) {
						bits += (size_t)
							__builtin_popcount(
								orig[i] ^
								buf[i]);
						live += byte_live(
							&p, i % p.word_bytes);
					}
					if (!bits)
						continue;
					hit++;
					EXPECT_6SIGMA(bits, live / 2.0,
						      sqrt(live) / 2,
						      "layout %u line %u #%zu",
						      li, lines[lk], l);
				}
				mean = nl * pb;
				EXPECT_6SIGMA(hit, mean, sqrt(mean * (1 - pb)),
					      "layout %u line %u", li,
					      lines[lk]);
			}
	free(orig);
	free(buf);
}
END_TEST

/*
 * COLUMN: in rows of k bytes from the start of the buffer, a column (bit
 * position in a row) that changed anywhere holds one value in every row
 * where it is live afterwards, and changed in about half those rows
 * (random data); the
 * columns that changed are Binomial(k * 8, ber) (a stuck column that never
 * shows has odds 2^-rows). Dead bits never change (expect_report).
 */
START_TEST(test_inject_column)
{
	enum { BYTES = 200000 };
	static const uint32_t rows[] = { 64, 1000, 8192 };
	struct kvmem_inject_params p;
	struct kvmem_rng r;
	uint8_t *orig = kvmem_check_xmalloc(BYTES),
		*buf = kvmem_check_xmalloc(BYTES);
	unsigned int li, rk, b, v;
	size_t n, nb, c, at, nrows, changed, stuck, cols;
	const double pb = 0.01;
	double mean;

	kvmem_rng_seed(&r, 0xc01);
	kvmem_check_fill_random(&r, orig, BYTES);
	for (li = 0; li < KVMEM_ARRAY_SIZE(phys_layouts); li++)
		for (rk = 0; rk < KVMEM_ARRAY_SIZE(rows); rk++) {
			p = mkparams(KVMEM_INJECT_COLUMN, rows[rk], pb,
				     17 * li + rk, phys_layouts[li][0],
				     phys_layouts[li][1]);
			n = inject_checked(orig, buf, BYTES, &p, "column");
			nb = n * p.word_bytes;
			stuck = cols = 0;
			for (c = 0; c < (size_t)rows[rk] * 8; c++) {
				b = (unsigned int)(c % 8);
				changed = nrows = 0;
				v = 2;
				for (at = c / 8; at < nb; at += rows[rk]) {
					nrows += byte_live(&p,
							   at % p.word_bytes) >
						 b;
					changed +=
						(orig[at] ^ buf[at]) >> b & 1;
				}
				if (!changed)
					continue;
				stuck++;
				for (at = c / 8; at < nb; at += rows[rk]) {
					if (byte_live(&p, at % p.word_bytes) <=
					    b)
						continue;
					if (v == 2)
						v = buf[at] >> b & 1;
					EXPECT_EQ(buf[at] >> b & 1u, v,
						  "layout %u row %u column "
						  "%zu at %zu",
						  li, rows[rk], c, at);
				}
				EXPECT_6SIGMA(changed, nrows / 2.0,
					      sqrt((double)nrows) / 2,
					      "layout %u column %zu", li, c);
			}
			for (c = 0; c < (size_t)rows[rk] * 8; c++)
				cols += byte_live(&p, c / 8 % p.word_bytes) >
					c % 8;
			/* Rows of a multiple of the word size: a column is
			 * always on the same byte of a word. */
			if (rows[rk] % p.word_bytes == 0) {
				mean = cols * pb;
				EXPECT_6SIGMA(stuck, mean,
					      sqrt(mean * (1 - pb)),
					      "layout %u row %u", li, rows[rk]);
			}
		}
	free(orig);
	free(buf);
}
END_TEST

/* The names the tools take, and what they are refused. */
START_TEST(test_inject_parse)
{
	static const struct {
		const char *spec;
		int ret;
		uint32_t mode, k;
	} cases[] = {
		{ "bsc", 0, KVMEM_INJECT_BSC, 1 },
		{ "exact:3", 0, KVMEM_INJECT_EXACT, 3 },
		{ "burst:10", 0, KVMEM_INJECT_BURST, 10 },
		{ "byte:1", 0, KVMEM_INJECT_BYTE, 1 },
		{ "byte:8", 0, KVMEM_INJECT_BYTE, 8 },
		{ "adjacent:2", 0, KVMEM_INJECT_ADJACENT, 2 },
		{ "line", 0, KVMEM_INJECT_LINE, 64 },
		{ "line:4096", 0, KVMEM_INJECT_LINE, 4096 },
		{ "column:8192", 0, KVMEM_INJECT_COLUMN, 8192 },
		{ "column:4294967295", 0, KVMEM_INJECT_COLUMN, UINT32_MAX },
		{ "byte:9", -EINVAL, 0, 0 },
		{ "byte", -EINVAL, 0, 0 },
		{ "byte:", -EINVAL, 0, 0 },
		{ "byte:0", -EINVAL, 0, 0 },
		{ "exact", -EINVAL, 0, 0 },
		{ "column", -EINVAL, 0, 0 },
		{ "bsc:2", -EINVAL, 0, 0 },
		{ "line:-1", -EINVAL, 0, 0 },
		{ "line:+1", -EINVAL, 0, 0 },
		{ "line: 5", -EINVAL, 0, 0 },
		{ "line:5x", -EINVAL, 0, 0 },
		{ "line:4294967296", -EINVAL, 0, 0 },
		{ "line:99999999999999999999999", -EINVAL, 0, 0 },
		{ "lines", -EINVAL, 0, 0 },
		{ "lin", -EINVAL, 0, 0 },
		{ "BSC", -EINVAL, 0, 0 },
		{ "", -EINVAL, 0, 0 },
		{ ":3", -EINVAL, 0, 0 },
	};
	struct kvmem_inject_params p, before;
	unsigned int i;

	for (i = 0; i < KVMEM_ARRAY_SIZE(cases); i++) {
		memset(&p, 0xee, sizeof(p));
		before = p;
		EXPECT_EQ(kvmem_inject_parse(&p, cases[i].spec), cases[i].ret,
			  "\"%s\"", cases[i].spec);
		if (cases[i].ret) {
			ck_assert_mem_eq(&p, &before, sizeof(p));
			continue;
		}
		EXPECT_EQ(p.mode, cases[i].mode, "\"%s\"", cases[i].spec);
		EXPECT_EQ(p.k, cases[i].k, "\"%s\"", cases[i].spec);
		/* The rest is the caller's. */
		EXPECT_EQ(p.seed, before.seed, "\"%s\"", cases[i].spec);
		EXPECT_EQ(p.word_bits, before.word_bits, "\"%s\"",
			  cases[i].spec);
	}
	ck_assert_int_eq(kvmem_inject_parse(&p, NULL), -EINVAL);
	ck_assert_int_eq(kvmem_inject_parse(NULL, "bsc"), -EINVAL);
}
END_TEST

/* ber = 0 flips nothing; ber = 1 flips every live bit and nothing else. */
START_TEST(test_inject_ber_edges)
{
	static const uint32_t layouts[][2] = {
		{ 7, 1 }, { 8, 1 }, { 13, 3 }, { 24, 3 }, { 72, 9 }
	};
	enum { N = 1001 };
	static struct kvmem_inject_hit hits[N + 1];
	struct kvmem_inject_report rep;
	struct kvmem_inject_params p;
	struct kvmem_rng r;
	struct recount rc;
	uint8_t *orig = kvmem_check_xmalloc(9 * N),
		*buf = kvmem_check_xmalloc(9 * N);
	unsigned int li, mode;
	size_t w;

	kvmem_rng_seed(&r, 0xed9e);
	for (li = 0; li < KVMEM_ARRAY_SIZE(layouts); li++) {
		uint32_t wbits = layouts[li][0], wbytes = layouts[li][1];
		size_t nb = (size_t)N * wbytes;

		kvmem_check_fill_random(&r, orig, nb);
		for (mode = KVMEM_INJECT_BSC; mode <= KVMEM_INJECT_BURST;
		     mode += KVMEM_INJECT_BURST) {
			p = mkparams(mode, 3, 0.0, 3, wbits, wbytes);
			memcpy(buf, orig, nb);
			report_init(&rep, hits, N, N + 1);
			ck_assert_int_eq(kvmem_inject(buf, N, &p, &rep), 0);
			ck_assert_mem_eq(buf, orig, nb);
			ck_assert_uint_eq(rep.bits, 0);
			ck_assert_uint_eq(rep.words, 0);
			ck_assert_uint_eq(rep.hits_len, 0);
			expect_report(orig, buf, N, &p, &rep, &rc, "ber 0");

			p.ber = 1.0;
			memcpy(buf, orig, nb);
			report_init(&rep, hits, N, N + 1);
			ck_assert_int_eq(kvmem_inject(buf, N, &p, &rep), 0);
			expect_report(orig, buf, N, &p, &rep, &rc, "ber 1");
			for (w = 0; w < N; w++)
				EXPECT_EQ(word_flips(orig, buf, &p, w), wbits,
					  "layout %u/%u mode %u word %zu",
					  wbits, wbytes, mode, w);
			ck_assert_uint_eq(rep.bits, (uint64_t)N * wbits);
			ck_assert_uint_eq(rep.words, N);
			ck_assert_uint_eq(rep.hits_len, N);
		}
	}
	/* No words, nothing to do. */
	p = mkparams(KVMEM_INJECT_BSC, 0, 0.5, 1, 8, 1);
	report_init(&rep, hits, 4, 4);
	ck_assert_int_eq(kvmem_inject(buf, 0, &p, &rep), 0);
	ck_assert_uint_eq(rep.bits, 0);
	ck_assert_uint_eq(rep.words, 0);
	ck_assert_uint_eq(rep.hits_len, 0);
	free(orig);
	free(buf);
}
END_TEST

START_TEST(test_inject_einval)
{
	const struct kvmem_inject_params good =
		mkparams(KVMEM_INJECT_BSC, 2, 0.5, 1, 8, 1);
	struct kvmem_inject_params bad[32];
	uint8_t buf[64 * 4], orig[64 * 4];
	unsigned int n = 0, i;

	/* The baseline is valid; each case below breaks one thing. */
	memset(buf, 0x5a, sizeof(buf));
	ck_assert_int_eq(kvmem_inject(buf, 4, &good, NULL), 0);
	bad[n] = good;
	bad[n++].ber = -0.01;
	bad[n] = good;
	bad[n++].ber = 1.01;
	bad[n] = good;
	bad[n++].ber = NAN;
	bad[n] = good;
	bad[n].mode = KVMEM_INJECT_BURST;
	bad[n++].ber = -1;
	bad[n] = good;
	bad[n].mode = KVMEM_INJECT_BURST;
	bad[n++].ber = NAN;
	bad[n] = good;
	bad[n].mode = KVMEM_INJECT_EXACT;
	bad[n++].k = 0;
	bad[n] = good;
	bad[n].mode = KVMEM_INJECT_EXACT;
	bad[n++].k = 9;
	bad[n] = good;
	bad[n].mode = KVMEM_INJECT_BURST;
	bad[n++].k = 0;
	bad[n] = good;
	bad[n++].word_bits = 9;
	bad[n] = good;
	bad[n].word_bytes = 3;
	bad[n++].word_bits = 25;
	bad[n] = good;
	bad[n++].word_bits = 0;
	bad[n] = good;
	bad[n++].word_bytes = 0;
	bad[n] = good;
	bad[n].word_bytes = 65;
	bad[n++].word_bits = 8;
	bad[n] = good;
	bad[n++].mode = 7;
	bad[n] = good;
	bad[n++].mode = UINT32_MAX;
	for (i = KVMEM_INJECT_BYTE; i <= KVMEM_INJECT_COLUMN; i++) {
		bad[n] = good;
		bad[n].mode = i;
		bad[n++].k = 0;
		bad[n] = good;
		bad[n].mode = i;
		bad[n++].ber = NAN;
	}
	bad[n] = good;
	bad[n].mode = KVMEM_INJECT_BYTE;
	bad[n++].k = 9;
	for (i = 0; i < n; i++) {
		memcpy(orig, buf, sizeof(buf));
		EXPECT_EQ(kvmem_inject(buf, 4, &bad[i], NULL), -EINVAL,
			  "case %u", i);
		ck_assert_mem_eq(buf, orig, sizeof(buf));
	}
	ck_assert_int_eq(kvmem_inject(buf, 4, NULL, NULL), -EINVAL);
	ck_assert_int_eq(kvmem_inject(NULL, 4, &good, NULL), -EINVAL);
	/* The widest layout is fine. */
	bad[0] = good;
	bad[0].word_bytes = 64;
	bad[0].word_bits = 512;
	bad[0].mode = KVMEM_INJECT_EXACT;
	bad[0].k = 512;
	ck_assert_int_eq(kvmem_inject(buf, 4, &bad[0], NULL), 0);
	for (i = 0; i < sizeof(buf); i++)
		EXPECT_EQ(buf[i], (uint8_t)~orig[i], "byte %u", i);
}
END_TEST

START_TEST(test_inject_params_for_codec)
{
	static const uint32_t bits[] = { 7, 8, 24, 72 };
	static const uint32_t bytes[] = { 1, 1, 3, 9 };
	struct kvmem_inject_params p;
	int c;

	for (c = 0; c < 4; c++) {
		memset(&p, 0xee, sizeof(p));
		ck_assert_int_eq(kvmem_inject_params_for_codec(&p, c, 0.25, 9),
				 0);
		ck_assert_uint_eq(p.mode, KVMEM_INJECT_BSC);
		ck_assert_double_eq(p.ber, 0.25);
		ck_assert_uint_eq(p.seed, 9);
		ck_assert_uint_eq(p.word_bits, bits[c]);
		ck_assert_uint_eq(p.word_bytes, bytes[c]);
	}
	ck_assert_int_eq(kvmem_inject_params_for_codec(&p, -1, 0.1, 1),
			 -EINVAL);
	ck_assert_int_eq(kvmem_inject_params_for_codec(&p, 4, 0.1, 1), -EINVAL);
}
END_TEST

KVMEM_SUITE(inject)
{
	Suite *s = suite_create("inject");
	TCase *tc = tcase_create("inject");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_inject_deterministic);
	tcase_add_test(tc, test_inject_bsc_rate);
	tcase_add_test(tc, test_inject_report_recount);
	tcase_add_test(tc, test_inject_exact);
	tcase_add_test(tc, test_inject_exact_pairs);
	tcase_add_test(tc, test_inject_burst);
	tcase_add_test(tc, test_inject_burst_clipped);
	tcase_add_test(tc, test_inject_byte);
	tcase_add_test(tc, test_inject_adjacent);
	tcase_add_test(tc, test_inject_line);
	tcase_add_test(tc, test_inject_column);
	tcase_add_test(tc, test_inject_parse);
	tcase_add_test(tc, test_inject_ber_edges);
	tcase_add_test(tc, test_inject_einval);
	tcase_add_test(tc, test_inject_params_for_codec);
	suite_add_tcase(s, tc);
	return s;
}
