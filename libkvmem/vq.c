/* SPDX-License-Identifier: MIT */
/*
 * vq.c - the codebooks of vq2 pages (see kvmem/quant.h)
 *
 * A layer of a sequence has one codebook for K and one for V of each KV
 * head: 256 entries of four values. Learned by k-means from the values of
 * the sequence's own pages (Shard's prompt middle), or given by the
 * engine. One flipped bit in an entry would change every value that uses
 * it, so the entries are kept as the page headers and scales are: FP16 in
 * golay24 words, and each entry checked over its decoded bytes by the low
 * 24 bits of their CRC-32C, itself in two golay24 words. An entry whose
 * words are uncorrectable or whose check fails is lost: the values that
 * index it are erased, never read as something else.
 *
 * The k-means here is plain Lloyd's, deterministic so that the tests can
 * repeat it: entry j starts as point floor(j * n / 256), each round gives
 * every point the nearest entry (squared distance in float, channel 0
 * first, the lowest index on a tie) and every entry the mean of its points
 * (an entry with none keeps its value), until no point changes entry or
 * KVMEM__VQ_ROUNDS rounds have run. More than KVMEM__VQ_TRAIN_MAX points
 * are thinned first to points floor(i * n / KVMEM__VQ_TRAIN_MAX).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvmem/crc32c.h"
#include "kvmem/ecc.h"
#include "kvmem/quant.h"
#include "internal.h"

#define VQ_CODEC KVMEM_CODEC_GOLAY24
#define ENTRY_BYTES (KVMEM__VQ_DIM * 2)

/* Golay24 words of the entries of @books codebooks: whole bytes, so pairs. */
static size_t entry_words(uint32_t books)
{
	size_t bits = (size_t)books * KVMEM__VQ_ENTRIES * ENTRY_BYTES * 8;

	return (bits + 23) / 24 * 2;
}

static size_t nentries(const struct kvmem__vq *vq)
{
	return (size_t)vq->books * KVMEM__VQ_ENTRIES;
}

static uint32_t check_of(const uint8_t *data)
{
	return kvmem_crc32c(0, data, ENTRY_BYTES) & 0xffffff;
}

/* A book's entries as four rows of KVMEM__VQ_ENTRIES: channel k of entry
 * e at [k * KVMEM__VQ_ENTRIES + e], so that a distance loop runs along
 * the entries. */
static void book_soa(const float *entries, float *soa)
{
	unsigned int j, k;

	for (j = 0; j < KVMEM__VQ_ENTRIES; j++)
		for (k = 0; k < KVMEM__VQ_DIM; k++)
			soa[k * KVMEM__VQ_ENTRIES + j] =
				entries[j * KVMEM__VQ_DIM + k];
}

/*
 * Every squared distance first, channel 0 first in each, a loop the
 * compiler vectorises along the entries (each lane sums in the same
 * order); then the first smallest, lost entries left out.
 */
static unsigned int nearest_soa(const float *soa, const uint8_t *lost,
				const float *x)
{
	const float *e0 = soa, *e1 = soa + KVMEM__VQ_ENTRIES,
		    *e2 = soa + 2 * KVMEM__VQ_ENTRIES,
		    *e3 = soa + 3 * KVMEM__VQ_ENTRIES;
	float d[KVMEM__VQ_ENTRIES], bd = INFINITY;
	unsigned int j, best = 0;

	for (j = 0; j < KVMEM__VQ_ENTRIES; j++) {
		float d0 = x[0] - e0[j], d1 = x[1] - e1[j], d2 = x[2] - e2[j],
		      d3 = x[3] - e3[j];

		d[j] = d0 * d0 + d1 * d1 + d2 * d2 + d3 * d3;
	}
	for (j = 0; j < KVMEM__VQ_ENTRIES; j++)
		if (d[j] < bd && !(lost && lost[j])) {
			bd = d[j];
			best = j;
		}
	return best;
}

void kvmem__vq_nearest(const float *entries, const uint8_t *lost,
		       const float *x, size_t n, uint8_t *out)
{
	float soa[KVMEM__VQ_ENTRIES * KVMEM__VQ_DIM];
	size_t i;

	book_soa(entries, soa);
	for (i = 0; i < n; i++)
		out[i] = (uint8_t)nearest_soa(soa, lost, x + i * KVMEM__VQ_DIM);
}

/* Lloyd's rounds over @n points (see above); @c holds the start. */
static int lloyd(const float *x, size_t n, float *c)
{
	double(*sum)[KVMEM__VQ_DIM] = malloc(KVMEM__VQ_ENTRIES * sizeof(*sum));
	uint32_t *cnt = malloc(KVMEM__VQ_ENTRIES * sizeof(*cnt));
	uint16_t *owner = malloc((n ? n : 1) * sizeof(*owner));
	float soa[KVMEM__VQ_ENTRIES * KVMEM__VQ_DIM];
	unsigned int round, j, k;
	size_t i;

	if (!sum || !cnt || !owner) {
		free(sum);
		free(cnt);
		free(owner);
		return -ENOMEM;
	}
	for (i = 0; i < n; i++)
		owner[i] = UINT16_MAX;
	for (round = 0; round < KVMEM__VQ_ROUNDS; round++) {
		size_t moved = 0;

		book_soa(c, soa);
		for (i = 0; i < n; i++) {
			unsigned int a =
				nearest_soa(soa, NULL, x + i * KVMEM__VQ_DIM);

			moved += a != owner[i];
			owner[i] = (uint16_t)a;
		}
		if (!moved)
			break;
		memset(sum, 0, KVMEM__VQ_ENTRIES * sizeof(*sum));
		memset(cnt, 0, KVMEM__VQ_ENTRIES * sizeof(*cnt));
		for (i = 0; i < n; i++) {
			cnt[owner[i]]++;
			for (k = 0; k < KVMEM__VQ_DIM; k++)
				sum[owner[i]][k] += x[i * KVMEM__VQ_DIM + k];
		}
		for (j = 0; j < KVMEM__VQ_ENTRIES; j++)
			for (k = 0; cnt[j] && k < KVMEM__VQ_DIM; k++)
				c[j * KVMEM__VQ_DIM + k] =
					(float)(sum[j][k] / cnt[j]);
	}
	free(sum);
	free(cnt);
	free(owner);
	return 0;
}

int kvmem__vq_train(const float *x, size_t n, float *entries)
{
	float *thin = NULL;
	unsigned int j;
	size_t i;
	int ret;

	if (n > KVMEM__VQ_TRAIN_MAX) {
		thin = malloc(KVMEM__VQ_TRAIN_MAX * KVMEM__VQ_DIM *
			      sizeof(*thin));
		if (!thin)
			return -ENOMEM;
		for (i = 0; i < KVMEM__VQ_TRAIN_MAX; i++)
			memcpy(thin + i * KVMEM__VQ_DIM,
			       x + i * n / KVMEM__VQ_TRAIN_MAX * KVMEM__VQ_DIM,
			       KVMEM__VQ_DIM * sizeof(*thin));
		x = thin;
		n = KVMEM__VQ_TRAIN_MAX;
	}
	for (j = 0; j < KVMEM__VQ_ENTRIES; j++)
		if (n)
			memcpy(entries + j * KVMEM__VQ_DIM,
			       x + (size_t)j * n / KVMEM__VQ_ENTRIES *
					       KVMEM__VQ_DIM,
			       KVMEM__VQ_DIM * sizeof(*entries));
		else
			memset(entries + j * KVMEM__VQ_DIM, 0,
			       KVMEM__VQ_DIM * sizeof(*entries));
	ret = lloyd(x, n, entries);
	free(thin);
	return ret;
}

int kvmem__vq_new(uint32_t kv_heads, const float *entries,
		  struct kvmem__vq **out)
{
	const uint32_t books = 2 * kv_heads;
	const size_t ne = (size_t)books * KVMEM__VQ_ENTRIES;
	const size_t ew = entry_words(books);
	const size_t bytes = kvmem_ecc_code_bytes(VQ_CODEC, ew + 2 * ne);
	uint8_t *halves, *checks;
	struct kvmem__vq *vq;
	size_t i;

	vq = calloc(1, sizeof(*vq) + bytes);
	halves = calloc(kvmem_ecc_data_bytes(VQ_CODEC, ew), 1);
	checks = malloc(3 * ne);
	if (!vq || !halves || !checks) {
		free(vq);
		free(halves);
		free(checks);
		return -ENOMEM;
	}
	vq->refs = 1;
	vq->books = books;
	vq->entry_words = (uint32_t)ew;
	vq->bytes = bytes;
	for (i = 0; i < ne * KVMEM__VQ_DIM; i++) {
		uint16_t h = kvmem_half_from_float(entries[i]);

		halves[2 * i] = (uint8_t)h;
		halves[2 * i + 1] = (uint8_t)(h >> 8);
	}
	for (i = 0; i < ne; i++) {
		uint32_t v = check_of(halves + i * ENTRY_BYTES);

		checks[3 * i] = (uint8_t)v;
		checks[3 * i + 1] = (uint8_t)(v >> 8);
		checks[3 * i + 2] = (uint8_t)(v >> 16);
	}
	kvmem_ecc_encode(VQ_CODEC, halves, vq->data, ew);
	kvmem_ecc_encode(VQ_CODEC, checks,
			 vq->data + kvmem_ecc_code_bytes(VQ_CODEC, ew), 2 * ne);
	free(halves);
	free(checks);
	*out = vq;
	return 0;
}

void kvmem__vq_put(struct kvmem__vq *vq)
{
	if (vq && !--vq->refs)
		free(vq);
}

size_t kvmem__vq_words(const struct kvmem__vq *vq)
{
	return vq->entry_words + 2 * nentries(vq);
}

long kvmem__vq_read(const struct kvmem__vq *vq, float *entries, uint8_t *lost,
		    struct kvmem_ecc_counts *counts)
{
	const size_t ne = nentries(vq), ew = vq->entry_words;
	struct kvmem_ecc_counts wc, cc;
	uint8_t *halves, *checks, *st;
	long nlost = 0;
	size_t i, k, mismatched = 0;

	halves = malloc(kvmem_ecc_data_bytes(VQ_CODEC, ew));
	checks = malloc(3 * ne);
	st = malloc(ew > 2 * ne ? ew : 2 * ne);
	if (!halves || !checks || !st) {
		free(halves);
		free(checks);
		free(st);
		return -ENOMEM;
	}
	kvmem_ecc_decode(VQ_CODEC,
			 vq->data + kvmem_ecc_code_bytes(VQ_CODEC, ew), checks,
			 2 * ne, &cc, st, NULL);
	for (i = 0; i < ne; i++)
		lost[i] = st[2 * i] == KVMEM_ECC_UNCORRECTABLE ||
			  st[2 * i + 1] == KVMEM_ECC_UNCORRECTABLE;
	kvmem_ecc_decode(VQ_CODEC, vq->data, halves, ew, &wc, st, NULL);
	for (i = 0; i < ne; i++) {
		/* Entry i is bits [64i, 64i + 64) of the stream. */
		const size_t w0 = i * 64 / 12, w1 = (i * 64 + 63) / 12;
		const uint8_t *cb = checks + 3 * i;
		uint32_t want =
			cb[0] | (uint32_t)cb[1] << 8 | (uint32_t)cb[2] << 16;

		for (k = w0; k <= w1; k++)
			lost[i] |= st[k] == KVMEM_ECC_UNCORRECTABLE;
		/* Words that decoded but do not match their check count as
		 * one uncorrectable word more, as in a page. */
		if (!lost[i] && check_of(halves + i * ENTRY_BYTES) != want) {
			lost[i] = 1;
			mismatched++;
		}
		for (k = 0; k < KVMEM__VQ_DIM; k++) {
			const uint8_t *hb = halves + i * ENTRY_BYTES + 2 * k;
			float v = kvmem_half_to_float(
				(uint16_t)(hb[0] | hb[1] << 8));

			/* Never written: damage the check did not see. */
			lost[i] |= !isfinite(v);
			entries[i * KVMEM__VQ_DIM + k] = v;
		}
		if (lost[i])
			memset(entries + i * KVMEM__VQ_DIM, 0,
			       KVMEM__VQ_DIM * sizeof(*entries));
		nlost += lost[i];
	}
	if (counts) {
		kvmem__counts_add(counts, &wc);
		kvmem__counts_add(counts, &cc);
		counts->uncorrectable += mismatched;
	}
	free(halves);
	free(checks);
	free(st);
	return nlost;
}
