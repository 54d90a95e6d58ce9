/* SPDX-License-Identifier: MIT */
/*
 * check_attend_threads.c - kvmem_attend() on several threads
 *
 * The contract (kvmem.h): opts.threads changes who computes, never the
 * result. So every thread count must give the same bits as one thread: the
 * output, the counts and the page importance, on every SIMD path, under
 * every erasure policy, with uncorrectable damage spread over the pages
 * (interpolation then reads neighbours across the chunks that threads
 * split the layer into). That the results are right is check_attend.c's
 * business; it runs with the default, one thread per CPU.
 *
 * The threads must be real (they show up in /proc/self/task and are gone
 * after kvmem_close()), and a child forked after they started must still
 * get its answer, on its own thread.
 *
 * kvmem_attend_batch() shares the chunks of several sequences among the
 * threads: each result, count and importance must be the bits of
 * kvmem_attend() on each sequence in turn.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "kvmem/inject.h"
#include "kvmem/kvmem.h"
#include "kvmem_check.h"
#include "rng.h"

#define NTOK 1100 /* several chunks of 256 tokens, and a tail */
#define MAXP 160

struct tcase {
	const char *name;
	int fmt, codec, key_scales;
	uint32_t kv_heads, head_dim, tpp, group, mult;
	/* enough for uncorrectable words: golay24 (payload, or the scales
	 * of every page) takes four flips in 24 bits, h74 detects nothing */
	double ber;
};

static const struct tcase tcases[] = {
	{ "int4+h84, GQA 4", KVMEM_FMT_INT4, KVMEM_CODEC_H84,
	  KVMEM_SCALES_GROUP, 2, 64, 16, 32, 4, 2e-3 },
	{ "int4+golay24, MHA", KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24,
	  KVMEM_SCALES_GROUP, 2, 32, 32, 16, 1, 2e-2 },
	{ "int8+secded72, GQA 2, pages of 8", KVMEM_FMT_INT8,
	  KVMEM_CODEC_SECDED72, KVMEM_SCALES_GROUP, 2, 32, 8, 32, 2, 2e-3 },
	{ "int4+h74 channel keys, GQA 4", KVMEM_FMT_INT4, KVMEM_CODEC_H74,
	  KVMEM_SCALES_CHANNEL, 1, 128, 32, 32, 4, 2e-2 },
};

struct result {
	float *out;
	struct kvmem_attend_stats st;
	float imp[MAXP];
};

/*
 * An embedded cache of @tc's geometry, and in *@k, *@v (the caller frees
 * them) NTOK rows of K and V uniform in [-1, 1) from @seed, *@row floats
 * a row.
 */
static struct kvmem_cache *open_kv(const struct tcase *tc, uint64_t seed,
				   float **k, float **v, size_t *row)
{
	struct kvmem_geometry g = kvmem_check_geo(
		1, tc->kv_heads, tc->head_dim, tc->tpp, tc->group, 2, tc->fmt,
		tc->codec, tc->key_scales);
	struct kvmem_cache *c;
	struct kvmem_rng r;
	size_t i;

	*row = (size_t)g.kv_heads * g.head_dim;
	*k = kvmem_check_xmalloc(NTOK * *row * sizeof(float));
	*v = kvmem_check_xmalloc(NTOK * *row * sizeof(float));
	kvmem_rng_seed(&r, seed);
	for (i = 0; i < NTOK * *row; i++) {
		(*k)[i] = (float)(2 * kvmem_rng_unit(&r) - 1);
		(*v)[i] = (float)(2 * kvmem_rng_unit(&r) - 1);
	}
	ck_assert_int_eq(kvmem_open_embedded(&g, 64u << 20, &c), 0);
	return c;
}

static struct kvmem_seq *build(const struct tcase *tc, struct kvmem_cache **c,
			       uint32_t *nh, uint64_t seed)
{
	struct kvmem_seq *s;
	float *k, *v;
	size_t row;

	*c = open_kv(tc, seed, &k, &v, &row);
	ck_assert_int_eq(kvmem_seq_create(*c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append(s, 0, k, v, NTOK), 0);
	*nh = tc->kv_heads * tc->mult;
	free(k);
	free(v);
	return s;
}

/* Flip bits anywhere in every page: header, scales, payload, padding. */
static void damage(struct kvmem_seq *s, double ber, uint64_t seed)
{
	struct kvmem_page_desc pd[MAXP];
	struct kvmem_inject_params ip = {
		.mode = KVMEM_INJECT_BSC,
		.ber = ber,
		.word_bits = 8,
		.word_bytes = 1,
	};
	int np = kvmem_seq_pages(s, 0, pd, MAXP), p;

	ck_assert_int_gt(np, 0);
	ck_assert_int_le(np, MAXP);
	for (p = 0; p < np; p++) {
		ip.seed = seed + (uint64_t)p;
		ck_assert_int_eq(
			kvmem_inject(pd[p].data, pd[p].size, &ip, NULL), 0);
	}
}

static void run(struct kvmem_seq *s, uint32_t nh, uint32_t D, const float *q,
		uint32_t erasure, uint32_t threads, struct result *res)
{
	struct kvmem_attend_opts o = {
		.n_heads = nh,
		.erasure = erasure,
		/* all of this call's share: the importance is a function of
		 * this call alone */
		.importance_alpha = 1.0f,
		.threads = threads,
	};
	struct kvmem_page_desc pd[MAXP];
	int np, p;

	memset(res->out, 0xa5, (size_t)nh * D * sizeof(float));
	memset(&res->st, 0xee, sizeof(res->st));
	ck_assert_int_eq(kvmem_attend(s, 0, q, res->out, &o, &res->st), 0);
	np = kvmem_seq_pages(s, 0, pd, MAXP);
	memset(res->imp, 0, sizeof(res->imp));
	for (p = 0; p < np; p++)
		res->imp[p] = pd[p].importance;
}

static const char *const pol_name[] = { "interpolate", "zero", "keep" };

START_TEST(test_threads_same_bits)
{
	static const uint32_t counts[] = { 2, 3, 4, 7, 64 };
	const struct tcase *tc = &tcases[_i];
	const int active = kvmem__simd_active();
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	struct result one, many;
	struct kvmem_rng r;
	uint32_t nh, D = tc->head_dim, pol, i;
	float *q;
	int lv;
	size_t j;

	s = build(tc, &c, &nh, 7 + (uint64_t)_i);
	damage(s, tc->ber, 100 + (uint64_t)_i);
	q = kvmem_check_xmalloc((size_t)nh * D * sizeof(float));
	one.out = kvmem_check_xmalloc((size_t)nh * D * sizeof(float));
	many.out = kvmem_check_xmalloc((size_t)nh * D * sizeof(float));
	kvmem_rng_seed(&r, 11);
	for (j = 0; j < (size_t)nh * D; j++)
		q[j] = (float)(4 * kvmem_rng_unit(&r) - 2) / sqrtf((float)D);

	for (lv = 0; lv < KVMEM__SIMD_NR; lv++) {
		if (!kvmem__simd_supported(lv))
			continue;
		ck_assert_int_eq(kvmem__simd_force(lv), 0);
		for (pol = 0; pol <= KVMEM_ERASE_KEEP; pol++) {
			run(s, nh, D, q, pol, 1, &one);
			/* The damage reached what the test is about. */
			ck_assert_uint_gt(one.st.words_uncorrectable, 0);
			ck_assert_uint_gt(one.st.values_erased, 0);
			ck_assert_uint_gt(one.st.words_corrected, 0);
			for (j = 0; j < (size_t)nh * D; j++)
				ck_assert_msg(isfinite(one.out[j]),
					      "%s %s %s: output %zu is %g",
					      tc->name, kvmem__simd_name(lv),
					      pol_name[pol], j,
					      (double)one.out[j]);
			for (i = 0; i < KVMEM_ARRAY_SIZE(counts); i++) {
				run(s, nh, D, q, pol, counts[i], &many);
				ck_assert_msg(
					!memcmp(one.out, many.out,
						(size_t)nh * D * sizeof(float)),
					"%s %s %s: %u threads give another "
					"output than one",
					tc->name, kvmem__simd_name(lv),
					pol_name[pol], counts[i]);
				ck_assert_msg(!memcmp(&one.st, &many.st,
						      sizeof(one.st)),
					      "%s %s %s: %u threads count "
					      "otherwise",
					      tc->name, kvmem__simd_name(lv),
					      pol_name[pol], counts[i]);
				ck_assert_msg(!memcmp(one.imp, many.imp,
						      sizeof(one.imp)),
					      "%s %s %s: %u threads weigh "
					      "pages otherwise",
					      tc->name, kvmem__simd_name(lv),
					      pol_name[pol], counts[i]);
			}
		}
	}
	ck_assert_int_eq(kvmem__simd_force(active), 0);
	free(q);
	free(one.out);
	free(many.out);
	kvmem_seq_free(s);
	kvmem_close(c);
}
END_TEST

static int tasks(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/*
 * The number of tasks once it has come down to @want, or what it still is
 * after ten seconds. pthread_join() returns when the kernel clears the
 * thread's tid, which it does before the thread leaves /proc/self/task:
 * a joined thread may still be listed for a moment.
 */
static int tasks_down_to(int want)
{
	int i, n = tasks();

	for (i = 0; i < 1000 && n > want; i++) {
		usleep(10000);
		n = tasks();
	}
	return n;
}

/*
 * Threads come into being for a call that asks for them, stay for the
 * next, and leave with the cache. A child forked meanwhile runs the same
 * call on its own thread to the same bits.
 */
START_TEST(test_threads_lifetime_fork)
{
	const struct tcase *tc = &tcases[0];
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	struct result a, b;
	uint32_t nh, D = tc->head_dim;
	int before = tasks(), status;
	float *q;
	pid_t pid;
	size_t j;

	s = build(tc, &c, &nh, 3);
	q = kvmem_check_xmalloc((size_t)nh * D * sizeof(float));
	a.out = kvmem_check_xmalloc((size_t)nh * D * sizeof(float));
	b.out = kvmem_check_xmalloc((size_t)nh * D * sizeof(float));
	for (j = 0; j < (size_t)nh * D; j++)
		q[j] = (float)((j * 37 % 101) / 101.0 - 0.5);

	run(s, nh, D, q, KVMEM_ERASE_INTERPOLATE, 1, &a);
	ck_assert_int_eq(tasks(), before);
	run(s, nh, D, q, KVMEM_ERASE_INTERPOLATE, 3, &b);
	ck_assert_int_eq(tasks(), before + 2);
	ck_assert(!memcmp(a.out, b.out, (size_t)nh * D * sizeof(float)));
	run(s, nh, D, q, KVMEM_ERASE_INTERPOLATE, 2, &b);
	ck_assert_int_eq(tasks(), before + 2);

	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid) {
		alarm(30);
		run(s, nh, D, q, KVMEM_ERASE_INTERPOLATE, 4, &b);
		_exit(tasks() == 1 && !memcmp(a.out, b.out,
					      (size_t)nh * D * sizeof(float))
			      ? 0
			      : 1);
	}
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "the forked child got no answer, or another one "
		      "(status %#x)",
		      status);

	kvmem_seq_free(s);
	kvmem_close(c);
	ck_assert_int_eq(tasks_down_to(before), before);
	free(q);
	free(a.out);
	free(b.out);
}
END_TEST

START_TEST(test_threads_bad_opts)
{
	const struct tcase *tc = &tcases[0];
	struct kvmem_attend_opts o = { 0 };
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	uint32_t nh, i;
	float *q, *out;

	s = build(tc, &c, &nh, 5);
	q = kvmem_check_xmalloc((size_t)nh * tc->head_dim * sizeof(float));
	out = kvmem_check_xmalloc((size_t)nh * tc->head_dim * sizeof(float));
	memset(q, 0, (size_t)nh * tc->head_dim * sizeof(float));
	o.n_heads = nh;
	for (i = 0; i < 2; i++) {
		o.resv[i] = 1;
		ck_assert_int_eq(kvmem_attend(s, 0, q, out, &o, NULL), -EINVAL);
		o.resv[i] = 0;
	}
	o.flags = 1u << 31;
	ck_assert_int_eq(kvmem_attend(s, 0, q, out, &o, NULL), -EINVAL);
	o.flags = 0;
	/* More threads than anyone has: as many as there is work for. */
	o.threads = UINT32_MAX;
	ck_assert_int_eq(kvmem_attend(s, 0, q, out, &o, NULL), 0);
	free(q);
	free(out);
	kvmem_seq_free(s);
	kvmem_close(c);
}
END_TEST

/* ---- Batches --------------------------------------------------------- */

/* Lengths of the batch's sequences: a tail alone, a page, several chunks. */
static const uint32_t blens[] = { 1, 9, 45, 300, 700 };
#define NB 6 /* the five, and the 300-token one again */

/* The caches of two identical batches, built from one seed. */
static struct kvmem_cache *batch_build(const struct tcase *tc,
				       struct kvmem_seq *s[NB], uint32_t *nh,
				       uint64_t seed)
{
	struct kvmem_cache *c;
	float *k, *v;
	size_t row;
	int b;

	c = open_kv(tc, seed, &k, &v, &row);
	for (b = 0; b < 5; b++) {
		ck_assert_int_eq(kvmem_seq_create(c, &s[b]), 0);
		ck_assert_int_eq(kvmem_seq_append(s[b], 0, k + b * 7 * row,
						  v + b * 7 * row, blens[b]),
				 0);
	}
	s[5] = s[3];
	*nh = tc->kv_heads * tc->mult;
	free(k);
	free(v);
	return c;
}

/*
 * kvmem_attend_batch() over sequences of 1 to 700 tokens, one of them
 * twice, with uncorrectable damage: each output and count is the same
 * bits as kvmem_attend() on its sequence alone, for 1, 2, 3 and 8
 * threads; the page importance after a batch is what the same calls one
 * after the other leave (a second, identical cache gets those).
 */
START_TEST(test_batch_same_bits)
{
	static const uint32_t counts[] = { 1, 2, 3, 8 };
	const struct tcase *tc = &tcases[_i];
	const uint32_t D = tc->head_dim;
	struct kvmem_seq *s[NB], *t[NB];
	struct kvmem_attend_stats one[NB], st[NB];
	struct kvmem_page_desc pa[MAXP], pb[MAXP];
	struct kvmem_attend_opts o = { .importance_alpha = -1 };
	struct kvmem_cache *a, *b;
	float *q, *want, *got;
	struct kvmem_rng r;
	uint32_t nh, i, c;
	size_t per;
	int np, p;

	a = batch_build(tc, s, &nh, 0xba7c + (uint64_t)_i);
	b = batch_build(tc, t, &nh, 0xba7c + (uint64_t)_i);
	per = (size_t)nh * D;
	q = kvmem_check_xmalloc(NB * per * sizeof(float));
	want = kvmem_check_xmalloc(NB * per * sizeof(float));
	got = kvmem_check_xmalloc(NB * per * sizeof(float));
	kvmem_rng_seed(&r, 0x9e + (uint64_t)_i);
	for (i = 0; i < NB * per; i++)
		q[i] = (float)(2 * kvmem_rng_unit(&r) - 1);
	for (i = 0; i < 5; i++) {
		damage(s[i], tc->ber, 77 + i);
		damage(t[i], tc->ber, 77 + i);
	}
	o.n_heads = nh;
	o.threads = 1;
	for (i = 0, c = 0; i < NB; i++) {
		ck_assert_int_eq(kvmem_attend(s[i], 0, q + i * per,
					      want + i * per, &o, &one[i]),
				 0);
		c += one[i].values_erased > 0;
	}
	ck_assert_msg(c > 0, "%s: the damage erased nothing", tc->name);
	for (c = 0; c < KVMEM_ARRAY_SIZE(counts); c++) {
		o.threads = counts[c];
		memset(got, 0xa5, NB * per * sizeof(float));
		memset(st, 0xee, sizeof(st));
		ck_assert_int_eq(kvmem_attend_batch(s, NB, 0, q, got, &o, st),
				 0);
		for (i = 0; i < NB; i++) {
			EXPECT_MEM(got + i * per, want + i * per,
				   per * sizeof(float),
				   "%s: sequence %u, %u threads", tc->name, i,
				   counts[c]);
			EXPECT_MEM(&st[i], &one[i], sizeof(st[i]),
				   "%s: counts of sequence %u, %u threads",
				   tc->name, i, counts[c]);
		}
	}
	/* Importance: the batch on a, the calls one by one on b. */
	o.importance_alpha = 0.5f;
	o.threads = 0;
	ck_assert_int_eq(kvmem_attend_batch(s, NB, 0, q, got, &o, NULL), 0);
	for (i = 0; i < NB; i++)
		ck_assert_int_eq(
			kvmem_attend(t[i], 0, q + i * per, want, &o, NULL), 0);
	for (i = 0; i < 5; i++) {
		np = kvmem_seq_pages(s[i], 0, pa, MAXP);
		ck_assert_int_eq(kvmem_seq_pages(t[i], 0, pb, MAXP), np);
		for (p = 0; p < np; p++)
			EXPECT_MEM(&pa[p].importance, &pb[p].importance,
				   sizeof(float), "%s: sequence %u page %d",
				   tc->name, i, p);
	}
	for (i = 0; i < 5; i++) {
		kvmem_seq_free(s[i]);
		kvmem_seq_free(t[i]);
	}
	kvmem_close(a);
	kvmem_close(b);
	free(q);
	free(want);
	free(got);
}
END_TEST

/*
 * One sequence four times in a batch, of one page, of two and of several
 * chunks: each entry's counts are what kvmem_attend() counts on it alone,
 * whichever worker's chunk ended on the page another entry starts on.
 */
START_TEST(test_batch_repeats_a_sequence)
{
	static const uint32_t lens[] = { 3, 40, 261 };
	struct kvmem_geometry g = kvmem_check_geo(
		1, 2, 64, 32, 32, 4, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0);
	const size_t per = 4 * 64, row = 2 * 64;
	struct kvmem_attend_opts o = { .n_heads = 4, .importance_alpha = -1 };
	struct kvmem_attend_stats one, st[4];
	struct kvmem_seq *s, *b[4];
	struct kvmem_cache *c;
	float *k, *v, q[4 * 4 * 64], out[4 * 4 * 64];
	struct kvmem_rng r;
	uint32_t l, i, th;

	kvmem_rng_seed(&r, 0xd0b1e);
	for (i = 0; i < 4 * per; i++)
		q[i] = (float)(2 * kvmem_rng_unit(&r) - 1);
	for (l = 0; l < KVMEM_ARRAY_SIZE(lens); l++) {
		k = kvmem_check_xmalloc(lens[l] * row * sizeof(float));
		v = kvmem_check_xmalloc(lens[l] * row * sizeof(float));
		for (i = 0; i < lens[l] * row; i++) {
			k[i] = (float)(2 * kvmem_rng_unit(&r) - 1);
			v[i] = (float)(2 * kvmem_rng_unit(&r) - 1);
		}
		ck_assert_int_eq(kvmem_open_embedded(&g, 8 << 20, &c), 0);
		ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
		ck_assert_int_eq(kvmem_seq_append(s, 0, k, v, lens[l]), 0);
		o.threads = 1;
		ck_assert_int_eq(kvmem_attend(s, 0, q, out, &o, &one), 0);
		for (i = 0; i < 4; i++)
			b[i] = s;
		for (th = 1; th <= 4; th += 3) {
			o.threads = th;
			ck_assert_int_eq(
				kvmem_attend_batch(b, 4, 0, q, out, &o, st), 0);
			for (i = 0; i < 4; i++)
				EXPECT_EQ(st[i].words_clean, one.words_clean,
					  "%u tokens, entry %u, %u threads",
					  lens[l], i, th);
		}
		kvmem_seq_free(s);
		kvmem_close(c);
		free(k);
		free(v);
	}
}
END_TEST

/*
 * A batch that kvmem_attend_batch() refuses changes nothing: no output, no
 * importance, whichever of its sequences is wrong.
 */
START_TEST(test_batch_bad_args)
{
	const struct tcase *tc = &tcases[0];
	struct kvmem_seq *s[NB], *x[NB], *other, *empty;
	struct kvmem_attend_opts o = { .importance_alpha = 1 };
	struct kvmem_page_desc pd[MAXP];
	struct kvmem_cache *c, *c2;
	float *q, *out, imp;
	uint32_t nh;
	size_t per;
	int i;

	c = batch_build(tc, s, &nh, 0xbad);
	c2 = batch_build(tc, x, &nh, 0xbad);
	other = x[2];
	ck_assert_int_eq(kvmem_seq_create(c, &empty), 0);
	per = (size_t)nh * tc->head_dim;
	q = kvmem_check_xmalloc(NB * per * sizeof(float));
	out = kvmem_check_xmalloc(NB * per * sizeof(float));
	for (i = 0; i < (int)(NB * per); i++)
		q[i] = (float)(i % 7) / 7.0f;
	o.n_heads = nh;
	ck_assert_int_eq(kvmem_seq_pages(s[4], 0, pd, MAXP) > 0, 1);
	imp = pd[0].importance;
	memset(out, 0x5a, NB * per * sizeof(float));
	EXPECT_EQ(kvmem_attend_batch(s, 0, 0, q, out, &o, NULL), -EINVAL, "%s",
		  "n 0");
	EXPECT_EQ(kvmem_attend_batch(NULL, 1, 0, q, out, &o, NULL), -EINVAL,
		  "%s", "no sequences");
	EXPECT_EQ(kvmem_attend_batch(s, NB, 1, q, out, &o, NULL), -EINVAL, "%s",
		  "layer 1 of 1");
	s[5] = other;
	EXPECT_EQ(kvmem_attend_batch(s, NB, 0, q, out, &o, NULL), -EINVAL, "%s",
		  "a sequence of another cache");
	s[5] = empty;
	EXPECT_EQ(kvmem_attend_batch(s, NB, 0, q, out, &o, NULL), -EINVAL, "%s",
		  "an empty sequence");
	s[5] = NULL;
	EXPECT_EQ(kvmem_attend_batch(s, NB, 0, q, out, &o, NULL), -EINVAL, "%s",
		  "a NULL sequence");
	s[5] = s[3];
	o.n_heads = 3;
	EXPECT_EQ(kvmem_attend_batch(s, NB, 0, q, out, &o, NULL), -EINVAL, "%s",
		  "n_heads not a multiple of kv_heads");
	o.n_heads = nh;
	for (i = 0; i < (int)(NB * per * sizeof(float)); i++)
		if (((uint8_t *)out)[i] != 0x5a)
			ck_abort_msg("byte %d of the output was written", i);
	ck_assert_int_eq(kvmem_seq_pages(s[4], 0, pd, MAXP) > 0, 1);
	EXPECT_MEM(&pd[0].importance, &imp, sizeof(imp), "%s",
		   "importance after refused batches");
	/* and the batch itself is fine */
	ck_assert_int_eq(kvmem_attend_batch(s, NB, 0, q, out, &o, NULL), 0);
	kvmem_seq_free(empty);
	for (i = 0; i < 5; i++) {
		kvmem_seq_free(s[i]);
		kvmem_seq_free(x[i]);
	}
	kvmem_close(c);
	kvmem_close(c2);
	free(q);
	free(out);
}
END_TEST

KVMEM_SUITE(attend_threads)
{
	Suite *s = suite_create("attend_threads");
	TCase *tc = tcase_create("threads");

	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_threads_same_bits, 0,
			    (int)KVMEM_ARRAY_SIZE(tcases));
	tcase_add_test(tc, test_threads_lifetime_fork);
	tcase_add_test(tc, test_threads_bad_opts);
	tcase_add_loop_test(tc, test_batch_same_bits, 0,
			    (int)KVMEM_ARRAY_SIZE(tcases));
	tcase_add_test(tc, test_batch_bad_args);
	tcase_add_test(tc, test_batch_repeats_a_sequence);
	suite_add_tcase(s, tc);
	return s;
}
