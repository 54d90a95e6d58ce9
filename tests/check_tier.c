/* SPDX-License-Identifier: MIT */
/*
 * check_tier.c - the cold tier: pages that leave a session's arena for the
 * backing store and come back, through a real kvmemd
 *
 * What a page holds after a round trip is compared with the same data in
 * an embedded cache that never moved: the library quantizes both the same
 * way, so every value must be equal, bit for bit. Each test runs with the
 * io_uring engine and with the pread/pwrite thread pool that replaces it
 * where io_uring is refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "kvmem/crc32c.h"
#include "kvmem/kvmem.h"
#include "kvmem/uapi.h"
#include "kvmem_check.h"
#include "kvmemd_harness.h"
#include "rng.h"
#include "../daemon/store.h"

static const char *const engines[] = { "io_uring", "threads" };

static char reply[1 << 20];

/* An admin request that must succeed; its reply in reply[]. */
#define admin(p, ...) kvmemd_admin_ok(p, reply, sizeof(reply), __VA_ARGS__)

/* A daemon with a store of @store_bytes in its directory. */
static void start(struct kvmemd_proc *p, int engine, const char *store_size,
		  const char *extra)
{
	char conf[1024];

	/* The directory is made by kvmemd_start(); the store goes in it. */
	snprintf(conf, sizeof(conf),
		 "[scrub]\nrate = 0\n"
		 "[store]\npath = @DIR@/store\nsize = %s\nengine = %s\n"
		 "queue_depth = 8\n%s",
		 store_size, engines[engine], extra ? extra : "");
	kvmemd_start(p, conf, NULL);
}

struct ref {
	struct kvmem_geometry g;
	struct kvmem_cache *emb;
	struct kvmem_seq **es; /* the same sequences, embedded */
	float *k, *v; /* one sequence's tokens */
	uint32_t tokens;
};

static void ref_init(struct ref *r, uint32_t nseq, uint32_t tokens)
{
	size_t row;

	r->g = kvmemd_test_geo();
	r->tokens = tokens;
	row = (size_t)r->g.layers * r->g.kv_heads * r->g.head_dim;
	ck_assert_int_eq(kvmem_open_embedded(&r->g, 64u << 20, &r->emb), 0);
	r->es = calloc(nseq, sizeof(*r->es));
	r->k = malloc(tokens * row * sizeof(float));
	r->v = malloc(tokens * row * sizeof(float));
	ck_assert(r->es && r->k && r->v);
}

/* Sequence @j's tokens (a function of @j alone). */
static void ref_data(struct ref *r, uint32_t j)
{
	size_t n =
		(size_t)r->tokens * r->g.layers * r->g.kv_heads * r->g.head_dim;
	struct kvmem_rng rng;
	size_t i;

	kvmem_rng_seed(&rng, 1000 + j);
	for (i = 0; i < n; i++) {
		r->k[i] = kvmem_check_rnd_value(&rng, 1.0);
		r->v[i] = kvmem_check_rnd_value(&rng, 1.0);
	}
}

/* @tokens of @r's data written to a new sequence of @c and to the
 * embedded reference's sequence 0; returns the one of @c. */
static struct kvmem_seq *ref_seq0(struct ref *r, struct kvmem_cache *c,
				  uint32_t tokens)
{
	struct kvmem_seq *s;

	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append_all(s, r->k, r->v, tokens), 0);
	ck_assert_int_eq(kvmem_seq_create(r->emb, &r->es[0]), 0);
	ck_assert_int_eq(kvmem_seq_append_all(r->es[0], r->k, r->v, tokens), 0);
	return s;
}

static void ref_free(struct ref *r, uint32_t nseq)
{
	uint32_t j;

	for (j = 0; j < nseq; j++)
		if (r->es[j])
			kvmem_seq_free(r->es[j]);
	kvmem_close(r->emb);
	free(r->es);
	free(r->k);
	free(r->v);
}

/* Every value of @s equals the embedded reference's; return the values
 * the decode had to rebuild. */
static uint64_t same_as_ref(struct ref *r, struct kvmem_seq *s,
			    struct kvmem_seq *es, uint32_t id)
{
	size_t n = (size_t)r->tokens * r->g.kv_heads * r->g.head_dim;
	float *a = malloc(2 * n * sizeof(float));
	float *b = malloc(2 * n * sizeof(float));
	struct kvmem_page_counts pc;
	uint64_t erased = 0;
	uint32_t l;
	size_t i;

	ck_assert(a && b);
	for (l = 0; l < r->g.layers; l++) {
		ck_assert_int_eq(kvmem_seq_read(s, l, 0, r->tokens,
						KVMEM_ERASE_INTERPOLATE, a,
						a + n, &pc),
				 0);
		erased += pc.values_erased;
		ck_assert_int_eq(kvmem_seq_read(es, l, 0, r->tokens,
						KVMEM_ERASE_INTERPOLATE, b,
						b + n, NULL),
				 0);
		if (pc.values_erased)
			continue;
		for (i = 0; i < 2 * n; i++)
			EXPECT(a[i] == b[i],
			       "seq %u layer %u value %zu: %g, %g", id, l, i,
			       (double)a[i], (double)b[i]);
	}
	free(a);
	free(b);
	return erased;
}

static struct kvmem_cache *attach(const struct kvmemd_proc *p, uint64_t quota)
{
	struct kvmem_geometry g = kvmemd_test_geo();
	struct kvmem_connect_opts o = { .quota_bytes = quota };
	struct kvmem_cache *c = NULL;
	int ret = kvmem_connect(p->sock, &g, &o, &c);

	ck_assert_msg(!ret, "kvmem_connect: %s (%s)", kvmem_strerror(ret),
		      kvmem_connect_error());
	return c;
}

#define PRESSURE_SEQS 24
/* Whole pages: the unsealed tail of a sequence never leaves memory. */
#define PRESSURE_TOKENS 196
#define PRESSURE_ARENA (1u << 20)

/*
 * Many sequences, each about a fifth of a 1 MiB arena, written, released,
 * then acquired and read in random order, over and over, with more written
 * in between: every value equals the embedded copy's, and the daemon says
 * pages went out and came back.
 */
static void pressure(int engine)
{
	struct kvmemd_proc p;
	struct kvmem_seq *s[PRESSURE_SEQS];
	struct kvmem_stats st;
	struct kvmem_cache *c;
	struct kvmem_rng rng;
	struct ref r;
	uint32_t j, round;
	int ret;

	start(&p, engine, "64M", NULL);
	c = attach(&p, PRESSURE_ARENA);
	ref_init(&r, PRESSURE_SEQS, PRESSURE_TOKENS);
	kvmem_rng_seed(&rng, 7);
	for (j = 0; j < PRESSURE_SEQS; j++) {
		ref_data(&r, j);
		ck_assert_int_eq(kvmem_seq_create(c, &s[j]), 0);
		ret = kvmem_seq_append_all(s[j], r.k, r.v, r.tokens);
		ck_assert_msg(!ret, "seq %u: %s", j, kvmem_strerror(ret));
		kvmemd_release(c, s[j]);
		ck_assert_int_eq(kvmem_seq_create(r.emb, &r.es[j]), 0);
		ck_assert_int_eq(
			kvmem_seq_append_all(r.es[j], r.k, r.v, r.tokens), 0);
	}
	for (round = 0; round < 3 * PRESSURE_SEQS; round++) {
		j = (uint32_t)(kvmem_rng_next(&rng) % PRESSURE_SEQS);
		ck_assert_int_eq(same_as_ref(&r, s[j], r.es[j], j), 0);
		kvmemd_release(c, s[j]);
	}
	/* Once the last writes are done, the store holds the cold pages
	 * and nothing else. */
	for (round = 0; round < 500; round++) {
		admin(&p, "tier");
		if (!kvmemd_json_after(reply, "\"store\"", "inflight"))
			break;
		usleep(10000);
	}
	ck_assert_int_eq(kvmem_daemon_stats(c, &st), 0);
	ck_assert_uint_gt(st.cold_pages, 0);
	ck_assert_uint_le(st.used_bytes, PRESSURE_ARENA);
	ck_assert_uint_gt(kvmemd_json_u64(reply, "offloads"), 0);
	ck_assert_uint_gt(kvmemd_json_u64(reply, "reloads"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "write_errors"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "read_errors"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "reload_degraded"), 0);
	ck_assert_msg(strstr(reply, engines[engine]), "engine: %s", reply);
	/* What is cold is on the store: its units hold those pages. */
	ck_assert_uint_eq(kvmemd_json_after(reply, "\"cold\"", "pages"),
			  st.cold_pages);
	ck_assert_uint_eq(kvmemd_json_after(reply, "\"store\"", "used_units") *
				  4096,
			  st.cold_bytes);
	ck_assert_uint_eq(kvmemd_json_after(reply, "\"cold\"", "bytes"),
			  st.cold_bytes);
	for (j = 0; j < PRESSURE_SEQS; j++)
		kvmem_seq_free(s[j]);
	kvmem_close(c);
	ref_free(&r, PRESSURE_SEQS);
	/* Freed sequences give their store units back. */
	admin(&p, "tier");
	ck_assert_uint_eq(kvmemd_json_after(reply, "\"store\"", "used_units"),
			  0);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}

START_TEST(test_pressure)
{
	pressure(_i);
}
END_TEST

/* Where data unit @u of the store begins: after the header's unit. */
static off_t unit_off(long u)
{
	return (off_t)(u + 1) * KVMEMD_STORE_UNIT;
}

/* Where on the store a page of (seq, layer, token_start) lies: its unit
 * number, found by decoding the header of every unit; the newest
 * generation when copies of earlier ones are left in free units. */
static long find_page(int fd, const struct kvmem_geometry *g, uint64_t seq,
		      uint32_t layer, uint32_t token_start)
{
	uint8_t unit[KVMEMD_STORE_UNIT];
	struct kvmem_page_hdr h;
	uint64_t gen = 0;
	long u, at = -1;

	for (u = 0; pread(fd, unit, sizeof(unit), unit_off(u)) ==
		    (ssize_t)sizeof(unit);
	     u++) {
		if (kvmem_page_read_header(unit, g, &h, NULL))
			continue;
		if (h.seq == seq && h.layer == layer &&
		    h.token_start == token_start &&
		    !(h.flags & KVMEM_HDR_HOT) &&
		    (at < 0 || h.generation > gen)) {
			at = u;
			gen = h.generation;
		}
	}
	return at;
}

/*
 * Bytes of the store changed while pages are there: one flipped bit is
 * corrected on reload and the data is exact; a smashed stretch of a page is
 * detected, the page is degraded and reported (an event from "reload", on
 * the nvme pool's cold tier), and the values it lost are rebuilt, never
 * returned as they came off the disk.
 */
static void corrupt(int engine)
{
	const uint32_t tokens = 128;
	struct kvmem_page_layout l;
	struct kvmemd_proc p;
	struct kvmem_seq *s;
	struct kvmem_stats st;
	struct kvmem_cache *c;
	struct ref r;
	char path[400];
	uint8_t byte, junk[64];
	long u1, u2;
	off_t off;
	int fd;

	start(&p, engine, "16M", NULL);
	c = attach(&p, 4u << 20);
	ref_init(&r, 1, tokens);
	ref_data(&r, 0);
	s = ref_seq0(&r, c, tokens);
	kvmemd_release(c, s);
	admin(&p, "offload pool");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "errors"), 0);
	ck_assert_uint_gt(kvmemd_json_u64(reply, "pages"), 0);
	ck_assert_int_eq(kvmem_daemon_stats(c, &st), 0);
	ck_assert_uint_eq(st.cold_pages, kvmemd_json_u64(reply, "pages"));

	snprintf(path, sizeof(path), "%s/store", p.dir);
	fd = open(path, O_RDWR);
	ck_assert_int_ge(fd, 0);
	kvmem_page_layout(&r.g, 0, &l);
	/* Layer 0's second sealed page: one bit of its K payload. */
	u1 = find_page(fd, &r.g, 1, 0, r.g.sink_tokens + r.g.tokens_per_page);
	ck_assert_int_ge(u1, 0);
	off = unit_off(u1) + (off_t)l.k_off + 5;
	ck_assert_int_eq(pread(fd, &byte, 1, off), 1);
	byte ^= 0x10;
	ck_assert_int_eq(pwrite(fd, &byte, 1, off), 1);
	/* Layer 1's first sealed page: two bits of each of 64 h84 words of
	 * its V payload (all eight would make another codeword). */
	u2 = find_page(fd, &r.g, 1, 1, r.g.sink_tokens);
	ck_assert_int_ge(u2, 0);
	off = unit_off(u2) + (off_t)l.v_off;
	ck_assert_int_eq(pread(fd, junk, sizeof(junk), off),
			 (ssize_t)sizeof(junk));
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] ^= 0x03;
	ck_assert_int_eq(pwrite(fd, junk, sizeof(junk), off),
			 (ssize_t)sizeof(junk));
	ck_assert_int_eq(fsync(fd), 0);
	close(fd);

	/* The reload finds both; layer 0 is exact, layer 1 lost values. */
	ck_assert_int_eq(kvmem_seq_acquire(s), 0);
	ck_assert_int_eq(kvmem_daemon_stats(c, &st), 0);
	ck_assert_uint_eq(st.cold_pages, 0);
	ck_assert_uint_eq(st.degraded_pages, 1);
	ck_assert_uint_eq(st.ce_words, 1);
	ck_assert_uint_eq(st.ue_words, sizeof(junk));
	ck_assert_uint_gt(same_as_ref(&r, s, r.es[0], 1), 0);
	admin(&p, "events");
	ck_assert_msg(strstr(reply, "\"source\":\"reload\"") &&
			      strstr(reply, "\"pool\":\"nvme\"") &&
			      strstr(reply, "\"tier\":\"cold\""),
		      "events: %s", reply);
	ck_assert_msg(strstr(reply, "\"layer\":1"), "events: %s", reply);
	admin(&p, "tier");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "reload_degraded"), 1);
	admin(&p, "seqs");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "degraded_pages"), 1);
	kvmem_seq_free(s);
	kvmem_close(c);
	ref_free(&r, 1);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}

START_TEST(test_corrupt_store)
{
	corrupt(_i);
}
END_TEST

/*
 * Every value of @s is right (bit for bit what the embedded copy @es
 * decodes to) or flagged lost by the page's own decode: nothing comes back
 * wrong and unflagged. Return: the values flagged.
 */
/* Cut @s to @keep tokens and append r's tokens from there on. */
static void rewrite_tail(struct kvmem_seq *s, struct ref *r, uint32_t keep)
{
	size_t row = (size_t)r->g.layers * r->g.kv_heads * r->g.head_dim;

	ck_assert_int_eq(kvmem_seq_truncate(s, keep), 0);
	ck_assert_int_eq(kvmem_seq_append_all(s, r->k + keep * row,
					      r->v + keep * row,
					      r->tokens - keep),
			 0);
}

static uint64_t right_or_flagged(struct ref *r, struct kvmem_seq *s,
				 struct kvmem_seq *es)
{
	const size_t tok = (size_t)r->g.kv_heads * r->g.head_dim;
	const size_t n = (size_t)r->g.tokens_per_page * tok;
	struct kvmem_page_desc d[64], ed[64];
	float *a = malloc(4 * n * sizeof(float));
	uint8_t *ea = malloc(4 * n), *eb = malloc(4 * n);
	uint64_t lost = 0;
	int np, i, ra, rb;
	uint32_t l;
	size_t j;

	ck_assert(a && ea && eb);
	ck_assert_int_eq(kvmem_seq_acquire(s), 0);
	for (l = 0; l < r->g.layers; l++) {
		np = kvmem_seq_pages(s, l, d, 64);
		ck_assert_int_eq(kvmem_seq_pages(es, l, ed, 64), np);
		for (i = 0; i < np; i++) {
			ck_assert_uint_eq(d[i].token_start, ed[i].token_start);
			ra = kvmem_page_decode(d[i].data, &r->g, a, a + n, ea,
					       NULL);
			rb = kvmem_page_decode(ed[i].data, &r->g, a + 2 * n,
					       a + 3 * n, eb, NULL);
			ck_assert_int_eq(ra, (int)d[i].ntokens);
			ck_assert_int_eq(rb, ra);
			for (j = 0; j < 2 * (size_t)ra * tok; j++) {
				size_t at = j < (size_t)ra * tok
						    ? j
						    : n + j - (size_t)ra * tok;

				ck_assert_uint_eq(eb[j], 0);
				if (ea[j]) {
					lost++;
					continue;
				}
				EXPECT(a[at] == a[2 * n + at],
				       "layer %u page %d value %zu: %g, "
				       "expected %g, not flagged",
				       l, i, j, (double)a[at],
				       (double)a[2 * n + at]);
			}
		}
	}
	free(a);
	free(ea);
	free(eb);
	return lost;
}

enum replace {
	REPLACE_ZEROS, /* a discarded or never-written extent */
	REPLACE_OTHER, /* another page of the same size: a misdirected write */
	REPLACE_BURST, /* 512 random bytes in the payload */
	REPLACE_STALE, /* the same page of an earlier generation: lost write */
	REPLACE_NR,
};

static const char *const replace_names[REPLACE_NR] = { "zeros", "other page",
						       "burst", "stale" };

/*
 * Regression: a cold page replaced on the store by content that decodes
 * without an ECC error came back as good. Each way a store can do that,
 * with both engines: the acquire succeeds, the page's every value reads
 * as lost (flagged, so a client rebuilds or refuses them), every other
 * value is right, and kvmemd says so (tier reload_lost, a "lost" event).
 */
static void replaced(int engine, enum replace how)
{
	const uint32_t tokens = 100;
	struct kvmem_page_layout l;
	struct kvmemd_proc p;
	struct kvmem_seq *s;
	struct kvmem_cache *c;
	struct kvmem_rng rng;
	struct ref r;
	char path[400];
	uint8_t *old = NULL, *buf;
	size_t row;
	long u, v;
	uint64_t lost;
	int fd;

	start(&p, engine, "16M", NULL);
	c = attach(&p, 4u << 20);
	ref_init(&r, 1, tokens);
	ref_data(&r, 0);
	kvmem_page_layout(&r.g, 0, &l);
	row = (size_t)r.g.layers * r.g.kv_heads * r.g.head_dim;
	buf = malloc(l.size);
	ck_assert_ptr_nonnull(buf);
	snprintf(path, sizeof(path), "%s/store", p.dir);
	s = ref_seq0(&r, c, tokens);
	if (how == REPLACE_STALE) {
		/* Offload, keep the store's copy of layer 0's first sealed
		 * page, then cut the sequence inside that page and write it
		 * again with other values: the page at the same tokens is
		 * sealed anew, a new generation. */
		kvmemd_release(c, s);
		admin(&p, "offload pool");
		fd = open(path, O_RDONLY);
		ck_assert_int_ge(fd, 0);
		u = find_page(fd, &r.g, 1, 0, r.g.sink_tokens);
		ck_assert_int_ge(u, 0);
		old = malloc(l.size);
		ck_assert_int_eq(pread(fd, old, l.size, unit_off(u)),
				 (ssize_t)l.size);
		close(fd);
		kvmem_rng_seed(&rng, 99);
		for (size_t i = (r.g.sink_tokens + 5) * row; i < tokens * row;
		     i++) {
			r.k[i] = kvmem_check_rnd_value(&rng, 1.0);
			r.v[i] = kvmem_check_rnd_value(&rng, 1.0);
		}
		rewrite_tail(s, &r, r.g.sink_tokens + 5);
		rewrite_tail(r.es[0], &r, r.g.sink_tokens + 5);
	}
	kvmemd_release(c, s);
	admin(&p, "offload pool");
	ck_assert_uint_gt(kvmemd_json_u64(reply, "pages"), 0);

	fd = open(path, O_RDWR);
	ck_assert_int_ge(fd, 0);
	/* Layer 0's first sealed page is the one replaced. */
	u = find_page(fd, &r.g, 1, 0, r.g.sink_tokens);
	ck_assert_int_ge(u, 0);
	switch (how) {
	case REPLACE_ZEROS:
		memset(buf, 0, l.size);
		break;
	case REPLACE_OTHER:
		v = find_page(fd, &r.g, 1, 1, r.g.sink_tokens + 32);
		ck_assert_int_ge(v, 0);
		ck_assert_int_eq(pread(fd, buf, l.size, unit_off(v)),
				 (ssize_t)l.size);
		break;
	case REPLACE_BURST:
		ck_assert_int_eq(pread(fd, buf, l.size, unit_off(u)),
				 (ssize_t)l.size);
		kvmem_rng_seed(&rng, 0xb0b0 + engine);
		for (size_t i = 0; i < 512; i++)
			buf[l.k_off + 1000 + i] = (uint8_t)kvmem_rng_next(&rng);
		break;
	case REPLACE_STALE:
		memcpy(buf, old, l.size);
		break;
	default:
		ck_abort();
	}
	ck_assert_int_eq(pwrite(fd, buf, l.size, unit_off(u)), (ssize_t)l.size);
	ck_assert_int_eq(fsync(fd), 0);
	close(fd);

	ck_assert_int_eq(kvmem_seq_acquire(s), 0);
	lost = right_or_flagged(&r, s, r.es[0]);
	ck_assert_msg(lost == 2 * (uint64_t)r.g.tokens_per_page * r.g.kv_heads *
				      r.g.head_dim,
		      "%s, %s: %llu values flagged, a page has %u",
		      replace_names[how], engines[engine],
		      (unsigned long long)lost,
		      2 * r.g.tokens_per_page * r.g.kv_heads * r.g.head_dim);
	admin(&p, "tier");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "reload_lost"), 1);
	admin(&p, "events");
	ck_assert_msg(strstr(reply, "\"kind\":\"lost\",\"restored\":false,"
				    "\"source\":\"reload\""),
		      "events: %s", reply);
	kvmem_seq_free(s);
	kvmem_close(c);
	ref_free(&r, 1);
	free(buf);
	free(old);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}

START_TEST(test_store_replaced_page_flagged)
{
	replaced(_i % 2, (enum replace)(_i / 2));
}
END_TEST

/*
 * A store with room for a few pages only: once no page that could leave
 * fits in it, allocations that would need pages to leave fail with -ENOMEM
 * instead of waiting; once the client frees some, everything else written
 * before reads back exactly; the daemon goes on.
 */
static void tiny(int engine)
{
	struct kvmemd_proc p;
	struct kvmem_seq *s[32];
	struct kvmem_page_layout l;
	struct kvmem_cache *c;
	unsigned long long used;
	struct ref r;
	uint32_t j, n = 0;
	int ret = 0;

	/* The header's unit and 12: four sealed pages. */
	start(&p, engine, "52K", NULL);
	c = attach(&p, 512u << 10);
	ref_init(&r, 32, 64);
	for (j = 0; j < 32 && !ret; j++) {
		ref_data(&r, j);
		ck_assert_int_eq(kvmem_seq_create(c, &s[j]), 0);
		ret = kvmem_seq_append_all(s[j], r.k, r.v, r.tokens);
		ck_assert_int_eq(kvmem_seq_create(r.emb, &r.es[j]), 0);
		ck_assert_int_eq(
			kvmem_seq_append_all(r.es[j], r.k, r.v, r.tokens), 0);
		n++;
		if (!ret)
			kvmemd_release(c, s[j]);
	}
	ck_assert_int_eq(ret, -ENOMEM);
	/* The store is full: not one more page fits. */
	kvmem_page_layout(&r.g, 0, &l);
	admin(&p, "tier");
	used = kvmemd_json_after(reply, "\"store\"", "used_units");
	ck_assert_uint_gt(used + l.size / KVMEMD_STORE_UNIT,
			  kvmemd_json_after(reply, "\"store\"", "units"));
	ck_assert_uint_eq(kvmemd_json_u64(reply, "write_errors"), 0);
	/* Nothing can leave for a page to come back to: the client makes
	 * room, giving up the sequence that did not fit and the newest one
	 * that did. */
	kvmem_seq_free(s[--n]);
	kvmem_seq_free(s[--n]);
	/* Everything else the arena and the store took is intact. */
	for (j = 0; j < n; j++) {
		ck_assert_int_eq(same_as_ref(&r, s[j], r.es[j], j), 0);
		kvmemd_release(c, s[j]);
	}
	admin(&p, "status");
	for (j = 0; j < n; j++)
		kvmem_seq_free(s[j]);
	kvmem_close(c);
	ref_free(&r, 32);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}

START_TEST(test_tiny_store)
{
	tiny(_i);
}
END_TEST

/*
 * Room left on the store, but less than any page that could leave: every
 * page is an FP16 sink page (9 units of the test geometry; the store takes
 * 12), so after the first none fits, and an allocation that needs one to
 * leave fails with -ENOMEM at once instead of waiting for ever.
 */
static void room_too_small(int engine)
{
	struct kvmem_geometry g = kvmemd_test_geo();
	struct kvmem_connect_opts o = { .quota_bytes = 512u << 10 };
	struct kvmem_seq *s[32];
	struct kvmem_page_layout lh;
	struct kvmem_cache *c = NULL;
	struct kvmemd_proc p;
	unsigned long long used, units, hot;
	struct ref r;
	uint32_t j, n = 0;
	int ret = 0;

	g.sink_tokens = g.tokens_per_page;
	ck_assert_int_eq(kvmem_page_layout(&g, 1, &lh), 0);
	hot = lh.size / KVMEMD_STORE_UNIT;
	start(&p, engine, "52K", NULL);
	ck_assert_int_eq(kvmem_connect(p.sock, &g, &o, &c), 0);
	ref_init(&r, 1, g.tokens_per_page);
	ref_data(&r, 0);
	for (j = 0; j < 32 && !ret; j++) {
		ck_assert_int_eq(kvmem_seq_create(c, &s[j]), 0);
		n++;
		ret = kvmem_seq_append_all(s[j], r.k, r.v, r.tokens);
		if (!ret)
			kvmemd_release(c, s[j]);
	}
	ck_assert_int_eq(ret, -ENOMEM);
	admin(&p, "tier");
	used = kvmemd_json_after(reply, "\"store\"", "used_units");
	units = kvmemd_json_after(reply, "\"store\"", "units");
	ck_assert_uint_eq(units, 12);
	ck_assert_uint_eq(used, hot);
	ck_assert_uint_gt(used + hot, units);
	for (j = 0; j < n; j++)
		kvmem_seq_free(s[j]);
	kvmem_close(c);
	ref_free(&r, 1);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}

START_TEST(test_store_room_too_small)
{
	room_too_small(_i);
}
END_TEST

static void read_header(const char *path, struct kvmemd_store_hdr *h)
{
	int fd = open(path, O_RDONLY);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, h, sizeof(*h), 0), (ssize_t)sizeof(*h));
	close(fd);
	ck_assert_int_eq(memcmp(h->magic, KVMEMD_STORE_MAGIC, 8), 0);
	ck_assert_uint_eq(h->crc,
			  kvmem_crc32c(0, h, offsetof(typeof(*h), crc)));
}

/*
 * SIGKILL while pages are on their way to the store: the next start on the
 * same store finds a valid header (same uuid, one more start), every unit
 * free (the dead sessions' pages are gone with them), and works.
 */
static void killed(int engine)
{
	struct kvmemd_store_hdr h1, h2;
	struct kvmemd_proc p;
	struct kvmem_seq *s[8];
	struct kvmem_cache *c;
	struct ref r;
	char path[400];
	uint32_t j;
	int fd;

	start(&p, engine, "64M", NULL);
	snprintf(path, sizeof(path), "%s/store", p.dir);
	read_header(path, &h1);
	c = attach(&p, 4u << 20);
	ref_init(&r, 8, 256);
	for (j = 0; j < 8; j++) {
		ref_data(&r, j);
		ck_assert_int_eq(kvmem_seq_create(c, &s[j]), 0);
		ck_assert_int_eq(kvmem_seq_append_all(s[j], r.k, r.v, r.tokens),
				 0);
		kvmemd_release(c, s[j]);
	}
	/* Ask for the offload and kill the daemon before it answers. */
	fd = kvmemd_admin_send(&p, "offload pool");
	ck_assert_int_eq(kill(p.pid, SIGKILL), 0);
	ck_assert_int_eq(kvmemd_stop(&p), 128 + SIGKILL);
	close(fd);
	kvmem_close(c);

	kvmemd_restart(&p, NULL);
	read_header(path, &h2);
	ck_assert_int_eq(memcmp(h1.uuid, h2.uuid, sizeof(h1.uuid)), 0);
	ck_assert_uint_eq(h2.generation, h1.generation + 1);
	admin(&p, "tier");
	ck_assert_uint_eq(kvmemd_json_after(reply, "\"store\"", "used_units"),
			  0);
	/* And pages go out and come back again. */
	c = attach(&p, 4u << 20);
	ref_data(&r, 0);
	s[0] = ref_seq0(&r, c, r.tokens);
	kvmemd_release(c, s[0]);
	admin(&p, "offload pool");
	ck_assert_uint_gt(kvmemd_json_u64(reply, "pages"), 0);
	ck_assert_int_eq(same_as_ref(&r, s[0], r.es[0], 0), 0);
	kvmem_seq_free(s[0]);
	kvmem_close(c);
	ref_free(&r, 8);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}

START_TEST(test_sigkill_restart)
{
	killed(_i);
}
END_TEST

/*
 * A store that does not match the configuration is refused with a clear
 * error, and left as it was, unless store.reformat says otherwise.
 */
START_TEST(test_store_mismatch)
{
	struct kvmemd_store_hdr h1, h2;
	struct kvmemd_proc p;
	char path[400], conf[1024], *log;

	start(&p, 1, "8M", NULL);
	snprintf(path, sizeof(path), "%s/store", p.dir);
	read_header(path, &h1);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	snprintf(conf, sizeof(conf),
		 "[scrub]\nrate = 0\n[store]\npath = %s\nsize = 16M\n", path);
	kvmemd_write_conf(&p, conf);
	ck_assert_int_ne(kvmemd_try_restart(&p), 0);
	log = kvmem_check_read_file(p.log, NULL);
	ck_assert_msg(log && strstr(log, "store.reformat"), "log: %s", log);
	free(log);
	read_header(path, &h2);
	ck_assert_int_eq(memcmp(&h1, &h2, sizeof(h1)) == 0 ||
				 h2.generation == h1.generation,
			 1);
	snprintf(conf, sizeof(conf),
		 "[scrub]\nrate = 0\n[store]\npath = %s\nsize = 16M\n"
		 "reformat = yes\n",
		 path);
	kvmemd_write_conf(&p, conf);
	kvmemd_restart(&p, NULL);
	read_header(path, &h2);
	ck_assert_int_ne(memcmp(h1.uuid, h2.uuid, sizeof(h1.uuid)), 0);
	ck_assert_uint_eq(h2.size, 16u << 20);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * The ABI below libkvmem: pages of a released sequence are named by slots
 * that may be stale, so sealing into it or freeing from it is refused;
 * an acquire with no room for the moves it has to report fails, and with
 * room it reports each move once.
 */
START_TEST(test_acquire_remap)
{
	struct kvmemd_proc p;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	struct kvmem_page_desc d[8];
	struct ref r;
	int n;

	start(&p, 0, "16M", NULL);
	c = attach(&p, 4u << 20);
	ref_init(&r, 1, 96);
	ref_data(&r, 0);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append_all(s, r.k, r.v, r.tokens), 0);
	n = kvmem_seq_pages(s, 0, d, 8);
	ck_assert_int_gt(n, 1);
	kvmemd_release(c, s);
	admin(&p, "offload pool");
	ck_assert_uint_gt(kvmemd_json_u64(reply, "pages"), 0);
	/* The library learns the new slots: its pages read right. */
	ck_assert_int_eq(kvmem_seq_acquire(s), 0);
	ck_assert_int_eq(kvmem_seq_create(r.emb, &r.es[0]), 0);
	ck_assert_int_eq(kvmem_seq_append_all(r.es[0], r.k, r.v, r.tokens), 0);
	ck_assert_int_eq(same_as_ref(&r, s, r.es[0], 0), 0);
	kvmem_seq_free(s);
	kvmem_close(c);
	ref_free(&r, 1);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * A prefetch hint reads a released sequence's pages back without waiting
 * and without acquiring it; the acquire then finds them resident, in the
 * slots it is told of, and they read right.
 */
START_TEST(test_prefetch)
{
	struct kvmemd_proc p;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	struct kvmem_stats st;
	unsigned long long out;
	struct ref r;
	int i;

	start(&p, _i, "16M", NULL);
	c = attach(&p, 4u << 20);
	ref_init(&r, 1, 160);
	ref_data(&r, 0);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append_all(s, r.k, r.v, r.tokens), 0);
	kvmemd_release(c, s);
	admin(&p, "offload pool");
	out = kvmemd_json_u64(reply, "pages");
	ck_assert_uint_gt(out, 0);
	ck_assert_int_eq(kvmem_seq_prefetch(s), 0);
	for (i = 0; i < 500; i++) {
		admin(&p, "tier");
		if (!kvmemd_json_after(reply, "\"cold\"", "pages"))
			break;
		usleep(10000);
	}
	ck_assert_uint_eq(kvmemd_json_after(reply, "\"cold\"", "pages"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "reloads"), out);
	admin(&p, "seqs");
	ck_assert_msg(strstr(reply, "\"acquired\":false"), "seqs: %s", reply);
	ck_assert_int_eq(kvmem_seq_create(r.emb, &r.es[0]), 0);
	ck_assert_int_eq(kvmem_seq_append_all(r.es[0], r.k, r.v, r.tokens), 0);
	ck_assert_int_eq(same_as_ref(&r, s, r.es[0], 0), 0);
	ck_assert_int_eq(kvmem_daemon_stats(c, &st), 0);
	ck_assert_uint_eq(st.cold_pages, 0);
	kvmem_seq_free(s);
	kvmem_close(c);
	ref_free(&r, 1);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * A prompt and a fork of it that goes on: both released and offloaded, the
 * prompt acquired first (its pages, shared with the fork, come back and may
 * land in slots the fork's own pages had), then the fork. Every value of
 * both must still be right: moves name pages by position, not by a slot
 * number another page may have taken since.
 */
START_TEST(test_fork_remap)
{
	const uint32_t t1 = 100, t2 = 100;
	struct kvmem_seq *x, *y, *ex, *ey;
	struct kvmemd_proc p;
	struct kvmem_cache *c;
	size_t row;
	struct ref r;

	start(&p, _i, "64M", NULL);
	c = attach(&p, 4u << 20);
	ref_init(&r, 1, t1 + t2);
	ref_data(&r, 0);
	row = (size_t)r.g.layers * r.g.kv_heads * r.g.head_dim;
	ck_assert_int_eq(kvmem_seq_create(c, &y), 0);
	ck_assert_int_eq(kvmem_seq_append_all(y, r.k, r.v, t1), 0);
	ck_assert_int_eq(kvmem_seq_fork(y, &x), 0);
	ck_assert_int_eq(
		kvmem_seq_append_all(x, r.k + t1 * row, r.v + t1 * row, t2), 0);
	ck_assert_int_eq(kvmem_seq_create(r.emb, &ey), 0);
	ck_assert_int_eq(kvmem_seq_append_all(ey, r.k, r.v, t1), 0);
	ck_assert_int_eq(kvmem_seq_fork(ey, &ex), 0);
	ck_assert_int_eq(
		kvmem_seq_append_all(ex, r.k + t1 * row, r.v + t1 * row, t2),
		0);
	kvmemd_release(c, x);
	kvmemd_release(c, y);
	admin(&p, "offload pool");
	ck_assert_uint_gt(kvmemd_json_u64(reply, "pages"), 0);
	r.tokens = t1;
	ck_assert_int_eq(same_as_ref(&r, y, ey, 1), 0);
	r.tokens = t1 + t2;
	ck_assert_int_eq(same_as_ref(&r, x, ex, 2), 0);
	r.tokens = t1;
	ck_assert_int_eq(same_as_ref(&r, y, ey, 1), 0);
	kvmem_seq_free(x);
	kvmem_seq_free(y);
	kvmem_seq_free(ex);
	kvmem_seq_free(ey);
	kvmem_close(c);
	ref_free(&r, 1);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * The store loses the pages behind the daemon's back (truncated): the
 * acquire fails with -EIO instead of waiting for ever or handing back
 * something else, the errors are counted, and the daemon goes on.
 */
START_TEST(test_read_error)
{
	struct kvmemd_proc p;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	char path[400];
	struct ref r;

	start(&p, _i, "16M", NULL);
	c = attach(&p, 4u << 20);
	ref_init(&r, 1, 160);
	ref_data(&r, 0);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append_all(s, r.k, r.v, r.tokens), 0);
	kvmemd_release(c, s);
	admin(&p, "offload pool");
	ck_assert_uint_gt(kvmemd_json_u64(reply, "pages"), 0);
	snprintf(path, sizeof(path), "%s/store", p.dir);
	ck_assert_int_eq(truncate(path, KVMEMD_STORE_UNIT), 0);
	ck_assert_int_eq(kvmem_seq_acquire(s), -EIO);
	admin(&p, "tier");
	ck_assert_uint_gt(kvmemd_json_u64(reply, "read_errors"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "reloads"), 0);
	admin(&p, "seqs");
	ck_assert_msg(strstr(reply, "\"acquired\":false"), "seqs: %s", reply);
	admin(&p, "status");
	kvmem_seq_free(s);
	kvmem_close(c);
	ref_free(&r, 1);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * "offload pool" with more released pages than the store holds: the reply
 * comes, with the pages that went and an error, and nothing is lost.
 */
START_TEST(test_offload_store_full)
{
	struct kvmemd_proc p;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	struct ref r;

	start(&p, _i, "52K", "[tier]\noffload = no\n");
	c = attach(&p, 4u << 20);
	ref_init(&r, 1, 256);
	ref_data(&r, 0);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append_all(s, r.k, r.v, r.tokens), 0);
	kvmemd_release(c, s);
	kvmemd_admin(&p, "offload pool", reply, sizeof(reply));
	ck_assert_uint_gt(kvmemd_json_u64(reply, "errors"), 0);
	ck_assert_uint_gt(kvmemd_json_u64(reply, "pages"), 0);
	ck_assert_int_eq(kvmem_seq_create(r.emb, &r.es[0]), 0);
	ck_assert_int_eq(kvmem_seq_append_all(r.es[0], r.k, r.v, r.tokens), 0);
	ck_assert_int_eq(same_as_ref(&r, s, r.es[0], 0), 0);
	kvmem_seq_free(s);
	kvmem_close(c);
	ref_free(&r, 1);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * A client that goes away while its pages are on their way to the store:
 * the offload still answers, the writes that were in flight give their
 * store units back when they end, and the next session works.
 */
START_TEST(test_session_gone_mid_io)
{
	struct kvmem_seq *s[8];
	struct kvmemd_proc p;
	struct kvmem_cache *c;
	struct ref r;
	ssize_t n;
	uint32_t j;
	int fd, i;

	start(&p, _i, "64M", "[tier]\noffload = no\n");
	c = attach(&p, 4u << 20);
	ref_init(&r, 8, 256);
	for (j = 0; j < 8; j++) {
		ref_data(&r, j);
		ck_assert_int_eq(kvmem_seq_create(c, &s[j]), 0);
		ck_assert_int_eq(kvmem_seq_append_all(s[j], r.k, r.v, r.tokens),
				 0);
		kvmemd_release(c, s[j]);
	}
	fd = kvmemd_admin_send(&p, "offload pool");
	kvmem_close(c);
	n = recv(fd, reply, sizeof(reply) - 1, 0);
	ck_assert_int_gt(n, 0);
	reply[n] = 0;
	ck_assert_msg(strstr(reply, "\"pages\""), "offload: %s", reply);
	close(fd);
	for (i = 0; i < 500; i++) {
		admin(&p, "tier");
		if (!kvmemd_json_after(reply, "\"store\"", "inflight") &&
		    !kvmemd_json_after(reply, "\"store\"", "used_units"))
			break;
		usleep(10000);
	}
	ck_assert_uint_eq(kvmemd_json_after(reply, "\"store\"", "used_units"),
			  0);
	ck_assert_uint_eq(kvmemd_json_after(reply, "\"cold\"", "pages"), 0);
	c = attach(&p, 4u << 20);
	ref_data(&r, 0);
	s[0] = ref_seq0(&r, c, r.tokens);
	kvmemd_release(c, s[0]);
	admin(&p, "offload pool");
	ck_assert_uint_gt(kvmemd_json_u64(reply, "pages"), 0);
	ck_assert_int_eq(same_as_ref(&r, s[0], r.es[0], 0), 0);
	kvmem_seq_free(s[0]);
	kvmem_close(c);
	ref_free(&r, 8);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* ---- the archive tier -------------------------------------------------- */

#define ARCHIVE_TOKENS 196 /* a sink of 4 and six whole pages of 32 */
#define ARCHIVE_AGE 40 /* tier.archive_tokens in these tests */

/* Pages of @s's layer @l that kvmemd archives once it is released. */
static int archivable(struct kvmem_seq *s, uint32_t l)
{
	struct kvmem_page_desc d[16];
	int n = kvmem_seq_pages(s, l, d, 16), i, want = 0;

	ck_assert_int_le(n, 16);
	for (i = 0; i < n; i++)
		want += d[i].sealed && !d[i].hot &&
			d[i].token_start + d[i].ntokens + ARCHIVE_AGE <=
				ARCHIVE_TOKENS;
	return want;
}

/* Wait until kvmemd has archived or refused @n pages; its tier reply. */
static void archive_wait(struct kvmemd_proc *p, uint64_t n)
{
	int i;

	for (i = 0; i < 1000; i++) {
		admin(p, "tier");
		if (kvmemd_json_u64(reply, "archived") +
			    kvmemd_json_u64(reply, "archive_refused") >=
		    n)
			return;
		usleep(5000);
	}
	ck_abort_msg("kvmemd archived no %llu pages: %s", (unsigned long long)n,
		     reply);
}

/*
 * Released pages old enough are re-encoded in int4 + golay24 (the default
 * archive format and codec); those of an acquired sequence and the recent
 * ones are not. The library learns the new slots and codec at the next
 * acquire and reads the same bits; archived pages go to the store and come
 * back checked in their own layout. A client without KVMEM_FEAT_ARCHIVE is
 * never archived.
 */
START_TEST(test_archive)
{
	struct kvmem_hello h = kvmemd_hello(1u << 20);
	struct kvmem_page_layout al;
	struct kvmem_page_desc d[16];
	struct kvmemd_proc p;
	struct kvmemd_raw raw;
	struct kvmem_cache *c;
	struct kvmem_seq *s[2];
	struct ref r;
	uint32_t j, l;
	uint8_t *copy;
	int want = 0, n, i, seen = 0;

	start(&p, 0, "16M", "[tier]\narchive_tokens = 40\n");
	c = attach(&p, 4u << 20);
	ref_init(&r, 2, ARCHIVE_TOKENS);
	ck_assert_int_eq(kvmem_page_layout_as(&r.g, KVMEM_FMT_INT4,
					      KVMEM_CODEC_GOLAY24, &al),
			 0);
	for (j = 0; j < 2; j++) {
		ref_data(&r, j);
		ck_assert_int_eq(kvmem_seq_create(c, &s[j]), 0);
		ck_assert_int_eq(kvmem_seq_append_all(s[j], r.k, r.v, r.tokens),
				 0);
		ck_assert_int_eq(kvmem_seq_create(r.emb, &r.es[j]), 0);
		ck_assert_int_eq(
			kvmem_seq_append_all(r.es[j], r.k, r.v, r.tokens), 0);
	}
	for (l = 0; l < r.g.layers; l++)
		want += archivable(s[0], l);
	ck_assert_int_gt(want, 0);
	kvmemd_release(c, s[0]);
	archive_wait(&p, (uint64_t)want);
	/* Exactly those: s[1] is acquired, its pages pinned. */
	usleep(200000);
	admin(&p, "tier");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "archived"), want);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "archive_refused"), 0);
	ck_assert_uint_eq(kvmemd_json_after(reply, "\"archive\"", "pages"),
			  want);
	ck_assert_int_eq(kvmem_seq_acquire(s[0]), 0);
	for (l = 0; l < r.g.layers; l++) {
		int arch = archivable(s[0], l);

		n = kvmem_seq_pages(s[0], l, d, 16);
		for (i = 0; i < n; i++) {
			int a = d[i].sealed && !d[i].hot && i <= arch;

			EXPECT_EQ(d[i].codec,
				  a || d[i].hot ? KVMEM_CODEC_GOLAY24
						: KVMEM_CODEC_H84,
				  "layer %u page %d", l, i);
			if (a)
				EXPECT_EQ(d[i].size, al.size,
					  "layer %u page %d", l, i);
			seen += a;
		}
	}
	ck_assert_int_eq(seen, want);
	ck_assert_int_eq(same_as_ref(&r, s[0], r.es[0], 0), 0);
	ck_assert_int_eq(same_as_ref(&r, s[1], r.es[1], 1), 0);

	/* The patrol reads an archived page in its own layout: three flips
	 * in one golay24 word are corrected in place. */
	kvmem_seq_pages(s[0], 0, d, 16);
	copy = malloc(al.size);
	ck_assert_ptr_nonnull(copy);
	memcpy(copy, d[1].data, al.size);
	((uint8_t *)d[1].data)[al.k_off + 30] ^= 0x01;
	((uint8_t *)d[1].data)[al.k_off + 31] ^= 0x10;
	((uint8_t *)d[1].data)[al.k_off + 32] ^= 0x80;
	admin(&p, "scrub now pool");
	ck_assert_int_eq(memcmp(d[1].data, copy, al.size), 0);
	free(copy);
	admin(&p, "sessions");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ce"), 1);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ue"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "degraded_pages"), 0);

	/* To the store and back: checked against what was written. */
	kvmemd_release(c, s[0]);
	admin(&p, "offload pool");
	ck_assert_uint_gt(kvmemd_json_u64(reply, "pages"), 0);
	ck_assert_int_eq(kvmem_seq_acquire(s[0]), 0);
	ck_assert_int_eq(same_as_ref(&r, s[0], r.es[0], 0), 0);
	admin(&p, "tier");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "reload_degraded"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "reload_lost"), 0);

	/* The sessions say who is archived and how. */
	h.features &= ~KVMEM_FEAT_ARCHIVE;
	ck_assert_int_eq(kvmemd_raw_attach(&raw, &p, &h, sizeof(h)), 0);
	ck_assert_uint_eq(raw.w.features & KVMEM_FEAT_ARCHIVE, 0);
	/* Without the feature, moves are 16 bytes, as they were. */
	{
		struct kvmem_sqe e = { .opcode = KVMEM_OP_SEQ_CREATE,
				       .user_data = 1 };

		ck_assert_int_eq(kvmemd_raw_op(&raw, &e).res, 1);
		e = (struct kvmem_sqe){ .opcode = KVMEM_OP_SEQ_ACQUIRE,
					.user_data = 2,
					.seq = 1,
					.len = sizeof(struct kvmem_page_move) };
		ck_assert_int_eq(kvmemd_raw_op(&raw, &e).res, 0);
		e.user_data = 3;
		e.len = sizeof(struct kvmem_page_move_ex);
		ck_assert_int_eq(kvmemd_raw_op(&raw, &e).res, -EINVAL);
	}
	admin(&p, "sessions");
	ck_assert_msg(strstr(reply, "\"archive\":\"int4+golay24\""), "%s",
		      reply);
	ck_assert_msg(strstr(reply, "\"archive\":\"off\""), "%s", reply);
	kvmemd_raw_detach(&raw);
	for (j = 0; j < 2; j++)
		kvmem_seq_free(s[j]);
	kvmem_close(c);
	ref_free(&r, 2);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * A client that writes into a sealed page of its own: one sequence of
 * ARCHIVE_TOKENS tokens, and the first sealed page of its layer 0 (index
 * @i in the layer, at @page), for the test to change before the release.
 */
struct changed {
	struct kvmemd_proc p;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	struct ref r;
	struct kvmem_page_layout sl;
	uint8_t *page;
	int i, want;
};

static void changed_open(struct changed *x)
{
	struct kvmem_page_desc d[16];
	uint32_t l;
	int n;

	start(&x->p, 0, "16M", "[tier]\narchive_tokens = 40\n");
	x->c = attach(&x->p, 4u << 20);
	ref_init(&x->r, 1, ARCHIVE_TOKENS);
	ck_assert_int_eq(kvmem_page_layout(&x->r.g, 0, &x->sl), 0);
	ref_data(&x->r, 0);
	ck_assert_int_eq(kvmem_seq_create(x->c, &x->s), 0);
	ck_assert_int_eq(
		kvmem_seq_append_all(x->s, x->r.k, x->r.v, x->r.tokens), 0);
	x->want = 0;
	for (l = 0; l < x->r.g.layers; l++)
		x->want += archivable(x->s, l);
	n = kvmem_seq_pages(x->s, 0, d, 16);
	for (x->i = 0; x->i < n && (d[x->i].hot || !d[x->i].sealed); x->i++)
		;
	ck_assert_int_lt(x->i, n);
	x->page = d[x->i].data;
}

/* Released: the archive refuses the changed page (once) and leaves it
 * where it is; the others are archived. */
static void changed_refused(struct changed *x)
{
	struct kvmem_page_desc d[16];

	kvmemd_release(x->c, x->s);
	archive_wait(&x->p, (uint64_t)x->want);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "archive_refused"), 1);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "archived"), x->want - 1);
	ck_assert_int_eq(kvmem_seq_acquire(x->s), 0);
	kvmem_seq_pages(x->s, 0, d, 16);
	EXPECT_EQ(d[x->i].codec, KVMEM_CODEC_H84, "%s", "left where it was");
	EXPECT(d[x->i].data == x->page, "%s", "in its slot");
}

static void changed_close(struct changed *x)
{
	kvmem_seq_free(x->s);
	kvmem_close(x->c);
	ref_free(&x->r, 1);
	ck_assert_int_eq(kvmemd_stop(&x->p), 0);
	kvmemd_cleanup(&x->p);
}

/* A page that is not as it was sealed (one codeword turned into another,
 * which no code sees and the page's CRC does). */
START_TEST(test_archive_refuses_changed_page)
{
	struct changed x;
	size_t w;

	changed_open(&x);
	for (w = x.sl.k_off; x.page[w] == x.page[w + 1]; w++)
		;
	x.page[w] = x.page[w + 1];
	changed_refused(&x);
	changed_close(&x);
}
END_TEST

/*
 * A page rewritten whole behind its seal: other values, and a header
 * with their CRC, so that the page verifies on its own. Only the CRC
 * recorded at seal tells: the archive refuses the page rather than adopt
 * the new CRC, and the patrol then writes the header back and reports
 * the page's bytes as not the sealed ones.
 */
START_TEST(test_archive_refuses_page_rewritten)
{
	struct kvmem_page_hdr h, now;
	struct changed x;

	changed_open(&x);
	ck_assert_int_eq(kvmem_page_read_header(x.page, &x.r.g, &h, NULL), 0);
	/* K and V swapped: other values of the same magnitudes. */
	ck_assert_int_eq(kvmem_page_encode(x.page, &x.r.g, &h, 0, x.r.v, x.r.k),
			 0);
	ck_assert_int_eq(kvmem_page_verify(x.page, &x.r.g, NULL), 0);
	ck_assert_int_eq(kvmem_page_read_header(x.page, &x.r.g, &now, NULL), 0);
	ck_assert_uint_ne(now.crc, h.crc);
	changed_refused(&x);
	admin(&x.p, "scrub now");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "restored_pages"), 1);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "crc"), 1);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "degraded_pages"), 1);
	ck_assert_int_eq(kvmem_page_read_header(x.page, &x.r.g, &now, NULL), 0);
	ck_assert_uint_eq(now.crc, h.crc);
	changed_close(&x);
}
END_TEST

/*
 * tier.archive_heat: pages that attention leans on stay as they are. Of
 * two sequences, the one attended first keeps its pages (its heat, its
 * pages' share of the attention, is over the threshold); the other, never
 * attended, is archived. Its pages come after the first's in the order
 * the archive looks at pages, so by the time they are archived the
 * first's were passed over.
 */
START_TEST(test_archive_heat)
{
	struct kvmem_attend_opts o = { .importance_alpha = 1.0f };
	struct kvmemd_proc p;
	struct kvmem_cache *c;
	struct kvmem_seq *s[2];
	struct ref r;
	float *q, *out;
	uint32_t j, l;
	int want = 0;

	start(&p, 0, "16M",
	      "[tier]\narchive_tokens = 40\narchive_heat = 0.001\n");
	c = attach(&p, 4u << 20);
	ref_init(&r, 2, ARCHIVE_TOKENS);
	o.n_heads = 2 * r.g.kv_heads;
	q = calloc((size_t)o.n_heads * r.g.head_dim, sizeof(float));
	out = calloc((size_t)o.n_heads * r.g.head_dim, sizeof(float));
	ck_assert(q && out);
	for (j = 0; j < 2; j++) {
		ref_data(&r, j);
		ck_assert_int_eq(kvmem_seq_create(c, &s[j]), 0);
		ck_assert_int_eq(kvmem_seq_append_all(s[j], r.k, r.v, r.tokens),
				 0);
	}
	for (l = 0; l < r.g.layers; l++) {
		ck_assert_int_eq(kvmem_attend(s[0], l, q, out, &o, NULL), 0);
		want += archivable(s[1], l);
	}
	kvmemd_release(c, s[0]);
	kvmemd_release(c, s[1]);
	archive_wait(&p, (uint64_t)want);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "archived"), want);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "archive_refused"), 0);
	/* Which ones: the cold sequence's, none of the hot one's. */
	for (j = 0; j < 2; j++) {
		struct kvmem_page_desc d[16];
		int n, i, seen = 0;

		ck_assert_int_eq(kvmem_seq_acquire(s[j]), 0);
		for (l = 0; l < r.g.layers; l++) {
			n = kvmem_seq_pages(s[j], l, d, 16);
			for (i = 0; i < n; i++)
				seen += !d[i].hot &&
					d[i].codec == KVMEM_CODEC_GOLAY24;
		}
		ck_assert_int_eq(seen, j ? want : 0);
	}
	free(q);
	free(out);
	for (j = 0; j < 2; j++)
		kvmem_seq_free(s[j]);
	kvmem_close(c);
	ref_free(&r, 2);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * tier.bits_budget = 3 with lm2 + h84 as the archive: a session of int4
 * pages whose sealed pages average 4 bits a value has its coldest
 * released pages re-encoded until the average is 3, half of its twelve
 * (six a layer), and no more; they are the ones attention leaned on least
 * (the heat the client writes, the importance it keeps). No age is asked
 * (tier.archive_tokens is 0): the budget alone runs the archive.
 */
START_TEST(test_archive_budget)
{
	struct kvmem_attend_opts o = { .importance_alpha = 1.0f };
	struct kvmem_page_desc d[16];
	struct kvmemd_proc p;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	struct kvmem_rng rng;
	struct ref r;
	float *q, *out, hot_min = INFINITY, cold_max = -INFINITY;
	uint32_t l, i;
	int n, k, sealed = 0, down = 0;

	start(&p, 0, "16M",
	      "[tier]\nbits_budget = 3\narchive_format = lm2\n"
	      "archive_codec = h84\n");
	c = attach(&p, 4u << 20);
	ref_init(&r, 1, ARCHIVE_TOKENS);
	o.n_heads = 2 * r.g.kv_heads;
	q = calloc((size_t)o.n_heads * r.g.head_dim, sizeof(float));
	out = calloc((size_t)o.n_heads * r.g.head_dim, sizeof(float));
	ck_assert(q && out);
	ref_data(&r, 0);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append_all(s, r.k, r.v, r.tokens), 0);
	/* A query like some tokens' keys: the pages' heat differs. */
	kvmem_rng_seed(&rng, 77);
	for (l = 0; l < r.g.layers; l++) {
		for (i = 0; i < o.n_heads * r.g.head_dim; i++)
			q[i] = 4.0f * r.k[((size_t)(37 + 29 * l) * r.g.layers +
					   l) * r.g.kv_heads *
						  r.g.head_dim +
					  i % (r.g.kv_heads * r.g.head_dim)] +
			       (float)(kvmem_rng_unit(&rng) - 0.5);
		ck_assert_int_eq(kvmem_attend(s, l, q, out, &o, NULL), 0);
	}
	kvmemd_release(c, s);
	archive_wait(&p, 6);
	usleep(300000);
	admin(&p, "tier");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "archived"), 6);
	ck_assert_msg(strstr(reply, "\"bits_budget\":3"), "%s", reply);
	ck_assert_int_eq(kvmem_seq_acquire(s), 0);
	for (l = 0; l < r.g.layers; l++) {
		n = kvmem_seq_pages(s, l, d, 16);
		for (k = 0; k < n; k++) {
			if (!d[k].sealed || d[k].hot)
				continue;
			sealed++;
			if (d[k].format == KVMEM_FMT_LM2) {
				down++;
				cold_max = fmaxf(cold_max, d[k].importance);
			} else {
				hot_min = fminf(hot_min, d[k].importance);
			}
		}
	}
	ck_assert_int_eq(sealed, 12);
	ck_assert_int_eq(down, 6);
	/* The daemon sees the importance as a share in 16 bits. */
	ck_assert_msg(cold_max <= hot_min + (float)o.n_heads / 65535.0f,
		      "an archived page had importance %g, a kept one %g",
		      cold_max, hot_min);
	ref_free(&r, 1);
	free(q);
	free(out);
	kvmem_seq_free(s);
	kvmem_close(c);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * Another format, at a rate below one page a second: int2 pages, started
 * on a full bucket and paid for after. The library learns their format,
 * counts them at their own size, and gives every byte back.
 */
START_TEST(test_archive_int2_slow)
{
	struct kvmem_page_layout al, sl;
	struct kvmem_cache_stats st0, st1;
	struct kvmem_page_desc d[16];
	struct kvmem_page_counts pc;
	struct kvmemd_proc p;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	struct ref r;
	uint64_t archived;
	uint32_t l;
	size_t n;
	float *kv;
	int i, np, seen = 0;

	start(&p, 0, "16M",
	      "[tier]\narchive_tokens = 40\narchive_format = int2\n"
	      "archive_rate = 4K\n");
	c = attach(&p, 4u << 20);
	ref_init(&r, 1, ARCHIVE_TOKENS);
	ck_assert_int_eq(kvmem_page_layout(&r.g, 0, &sl), 0);
	ck_assert_int_eq(kvmem_page_layout_as(&r.g, KVMEM_FMT_INT2,
					      KVMEM_CODEC_GOLAY24, &al),
			 0);
	ck_assert_uint_lt(al.size, sl.size);
	ref_data(&r, 0);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	ck_assert_int_eq(kvmem_seq_append_all(s, r.k, r.v, r.tokens), 0);
	kvmem_cache_stats(c, &st0);
	kvmemd_release(c, s);
	archive_wait(&p, 1);
	/* Pinned: what is archived now is all there will be. */
	ck_assert_int_eq(kvmem_seq_acquire(s), 0);
	admin(&p, "tier");
	archived = kvmemd_json_u64(reply, "archived");
	for (l = 0; l < r.g.layers; l++) {
		np = kvmem_seq_pages(s, l, d, 16);
		for (i = 0; i < np; i++)
			seen += d[i].format == KVMEM_FMT_INT2;
	}
	ck_assert_uint_eq(seen, archived);
	kvmem_cache_stats(c, &st1);
	ck_assert_uint_eq(st0.used_bytes - st1.used_bytes,
			  archived * (sl.size - al.size));
	n = (size_t)r.tokens * r.g.kv_heads * r.g.head_dim;
	kv = malloc(2 * n * sizeof(float));
	ck_assert_ptr_nonnull(kv);
	for (l = 0; l < r.g.layers; l++) {
		ck_assert_int_eq(kvmem_seq_read(s, l, 0, r.tokens,
						KVMEM_ERASE_INTERPOLATE, kv,
						kv + n, &pc),
				 0);
		ck_assert_uint_eq(pc.values_erased, 0);
		ck_assert_uint_eq(pc.payload.uncorrectable, 0);
	}
	free(kv);
	kvmem_seq_free(s);
	kvmem_cache_stats(c, &st1);
	ck_assert_uint_eq(st1.used_bytes, 0);
	kvmem_close(c);
	ref_free(&r, 1);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * Archived pages the client has not been told of go to the store and come
 * back before it acquires. Each archived page moved into the slot the one
 * before it left, so reloads put some back into the very slots the client
 * knows them by, now in the archive's codec: the acquire must still report
 * them (their codec changed), or the client reads golay24 words as h84
 * and loses them. Found by test_archive_races under ASan's timing.
 */
START_TEST(test_archive_offload_before_acquire)
{
	struct kvmemd_proc p;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	struct ref r;
	uint64_t archived;

	start(&p, 0, "16M", "[tier]\narchive_tokens = 1\n");
	c = attach(&p, 4u << 20);
	ref_init(&r, 1, ARCHIVE_TOKENS);
	ref_data(&r, 0);
	s = ref_seq0(&r, c, r.tokens);
	kvmemd_release(c, s);
	/* Six sealed pages a layer, all but the last old enough. */
	archive_wait(&p, 5 * r.g.layers);
	archived = kvmemd_json_u64(reply, "archived");
	ck_assert_uint_eq(archived, 5 * r.g.layers);
	admin(&p, "offload pool");
	admin(&p, "tier");
	ck_assert_uint_ge(kvmemd_json_u64(reply, "offloads"), archived);
	ck_assert_int_eq(kvmem_seq_acquire(s), 0);
	ck_assert_int_eq(same_as_ref(&r, s, r.es[0], 0), 0);
	kvmem_seq_free(s);
	kvmem_close(c);
	ref_free(&r, 1);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * Archiving races the client: released, acquired again at random moments
 * while the tier archives, forked while acquired, offloaded by the
 * operator meanwhile. Whatever the order, every read is the same bits as
 * the embedded copy (the archive keeps int4 values bit for bit), and in
 * the end the pages are archived.
 */
START_TEST(test_archive_races)
{
	struct kvmemd_proc p;
	struct kvmem_cache *c;
	struct kvmem_seq *s, *f;
	struct kvmem_rng rng;
	struct ref r;
	uint32_t round;

	start(&p, 0, "16M", "[tier]\narchive_tokens = 40\n");
	c = attach(&p, 4u << 20);
	ref_init(&r, 1, ARCHIVE_TOKENS);
	ref_data(&r, 0);
	s = ref_seq0(&r, c, r.tokens);
	kvmem_rng_seed(&rng, 31);
	for (round = 0; round < 60; round++) {
		uint64_t x = kvmem_rng_next(&rng);

		kvmemd_release(c, s);
		if (x % 4 == 0)
			admin(&p, "offload pool");
		usleep((useconds_t)(x >> 40) % 3000);
		ck_assert_int_eq(kvmem_seq_acquire(s), 0);
		ck_assert_int_eq(same_as_ref(&r, s, r.es[0], 0), 0);
		if (x % 3 == 0) {
			ck_assert_int_eq(kvmem_seq_fork(s, &f), 0);
			ck_assert_int_eq(same_as_ref(&r, f, r.es[0], 0), 0);
			kvmem_seq_free(f);
		}
	}
	kvmemd_release(c, s);
	archive_wait(&p, 1);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "archive_refused"), 0);
	ck_assert_int_eq(kvmem_seq_acquire(s), 0);
	ck_assert_int_eq(same_as_ref(&r, s, r.es[0], 0), 0);
	kvmem_seq_free(s);
	kvmem_close(c);
	ref_free(&r, 1);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * A client of pages of 256 tokens (512 KiB in int4 + h84, the archive
 * re-encodes each in milliseconds): @toks tokens written and released.
 * No Check assertion: a forked child calls it too. Return: 0 and the
 * cache in *@out, or what failed.
 */
static int big_pages_client(const struct kvmemd_proc *p, uint32_t toks,
			    struct kvmem_cache **out)
{
	struct kvmem_geometry g = kvmemd_test_geo();
	struct kvmem_connect_opts o = { .quota_bytes = 24u << 20 };
	struct kvmem_cache *c = NULL;
	struct kvmem_stats st;
	struct kvmem_seq *s;
	struct kvmem_rng rng;
	size_t n, i;
	float *kv;
	int ret;

	g.layers = 1;
	g.kv_heads = 8;
	g.head_dim = 128;
	g.tokens_per_page = 256;
	n = (size_t)toks * g.kv_heads * g.head_dim;
	kv = malloc(2 * n * sizeof(float));
	if (!kv)
		return -ENOMEM;
	kvmem_rng_seed(&rng, toks);
	for (i = 0; i < 2 * n; i++)
		kv[i] = kvmem_check_rnd_value(&rng, 1.0);
	ret = kvmem_connect(p->sock, &g, &o, &c);
	if (!ret)
		ret = kvmem_seq_create(c, &s);
	if (!ret)
		ret = kvmem_seq_append(s, 0, kv, kv + n, toks);
	if (!ret)
		ret = kvmem_seq_release(s);
	/* Completions come in order: the release went before this. */
	if (!ret)
		ret = kvmem_daemon_stats(c, &st);
	free(kv);
	if (ret && c)
		kvmem_close(c);
	*out = ret ? NULL : c;
	return ret;
}

/*
 * A client killed (SIGKILL) while the archive tier re-encodes its pages,
 * one job after another (int2, no rate to speak of), most likely with a
 * job on a worker (in runs here, one page of 14 was archived when the
 * kill came): kvmemd goes on, the session ends and its memory goes back
 * to the pool, and the next client's pages are archived as before.
 */
START_TEST(test_archive_client_killed)
{
	struct kvmemd_proc p;
	struct kvmem_cache *c;
	uint64_t done;
	int ready[2], hold[2], st;
	char b;
	pid_t pid;

	start(&p, 0, "64M",
	      "[tier]\narchive_tokens = 1\narchive_format = int2\n"
	      "archive_rate = 1G\n");
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(hold), 0);
	fflush(NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid) {
		/* Whatever CK_FORK: no assertion here, and gone with the
		 * test (its death signal, or hold's end of file). */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(ready[0]);
		close(hold[1]);
		if (big_pages_client(&p, 16 * 256, &c) ||
		    write(ready[1], "r", 1) != 1)
			_exit(1);
		_exit(read(hold[0], &b, 1) < 0);
	}
	close(ready[1]);
	close(hold[0]);
	ck_assert_msg(read(ready[0], &b, 1) == 1, "%s",
		      "the client did not write its pages");
	close(ready[0]);
	archive_wait(&p, 1);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	close(hold[1]);
	ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	kvmemd_wait_no_sessions(&p);
	admin(&p, "tier");
	done = kvmemd_json_u64(reply, "archived");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "archive_refused"), 0);
	/* Page 0 holds the sink (hot), page 3 the sequence's end. */
	ck_assert_int_eq(big_pages_client(&p, 4 * 256, &c), 0);
	archive_wait(&p, done + 2);
	kvmem_close(c);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

KVMEM_SUITE(tier)
{
	Suite *s = suite_create("tier");
	TCase *tc = tcase_create("cold");

	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_pressure, 0, 2);
	tcase_add_loop_test(tc, test_corrupt_store, 0, 2);
	tcase_add_loop_test(tc, test_store_replaced_page_flagged, 0,
			    2 * REPLACE_NR);
	tcase_add_loop_test(tc, test_tiny_store, 0, 2);
	tcase_add_loop_test(tc, test_store_room_too_small, 0, 2);
	tcase_add_loop_test(tc, test_sigkill_restart, 0, 2);
	tcase_add_test(tc, test_store_mismatch);
	tcase_add_test(tc, test_acquire_remap);
	tcase_add_loop_test(tc, test_prefetch, 0, 2);
	tcase_add_loop_test(tc, test_fork_remap, 0, 2);
	tcase_add_loop_test(tc, test_read_error, 0, 2);
	tcase_add_loop_test(tc, test_offload_store_full, 0, 2);
	tcase_add_loop_test(tc, test_session_gone_mid_io, 0, 2);
	tcase_add_test(tc, test_archive);
	tcase_add_test(tc, test_archive_refuses_changed_page);
	tcase_add_test(tc, test_archive_refuses_page_rewritten);
	tcase_add_test(tc, test_archive_heat);
	tcase_add_test(tc, test_archive_budget);
	tcase_add_test(tc, test_archive_int2_slow);
	tcase_add_test(tc, test_archive_races);
	tcase_add_test(tc, test_archive_offload_before_acquire);
	tcase_add_test(tc, test_archive_client_killed);
	suite_add_tcase(s, tc);
	return s;
}
