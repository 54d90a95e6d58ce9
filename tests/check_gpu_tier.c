/* SPDX-License-Identifier: MIT */
/*
 * check_gpu_tier.c - kvmemd's GPU tier on its host-memory stand-in
 * (pool.gpu_device = standin), and its cuda backend on the fake driver:
 * no GPU here, and these tests say so. The
 * daemon moves pages between a session's host slots and the slots of its
 * GPU memory as it would on a GPU, through the same backend table; the
 * client maps that memory (a memfd here) and compares every byte that
 * moved with the page it sealed, encoded here on its own.
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvmem/page.h"
#include "kvmem/uapi.h"
#include "kvmem_check.h"
#include "kvmemd_harness.h"
#include "rng.h"

static char reply[1 << 16];

#define admin(p, ...) kvmemd_admin_ok(p, reply, sizeof(reply), __VA_ARGS__)

#define NPAGES_MAX 512

/* A session of the stand-in's GPU tier, and the pages it sealed. */
struct gt {
	struct kvmemd_raw r;
	struct kvmem_geometry g;
	size_t page_bytes;
	uint32_t arena_units;
	uint32_t n[3]; /* pages of sequence [1], [2] */
	uint32_t slot[3][NPAGES_MAX]; /* where the client saw each last */
	uint8_t *ref[3][NPAGES_MAX]; /* each page as sealed */
	uint64_t ud;
};

static void gt_attach(struct gt *t, const struct kvmemd_proc *p, uint64_t quota,
		      uint32_t gpu_mib)
{
	struct kvmem_hello h = kvmemd_hello(quota);
	struct kvmem_page_layout l;

	memset(t, 0, sizeof(*t));
	h.gpu_mib = gpu_mib;
	ck_assert_int_eq(kvmemd_raw_attach(&t->r, p, &h, sizeof(h)), 0);
	ck_assert_msg(t->r.w.features & KVMEM_FEAT_GPU_TIER,
		      "the stand-in offers the GPU tier");
	ck_assert_ptr_nonnull(t->r.gpu);
	t->g = h.geometry;
	kvmem_page_layout(&t->g, 0, &l);
	t->page_bytes = l.size;
	t->arena_units = (uint32_t)(t->r.w.arena_bytes / KVMEM_SLOT_UNIT);
	t->ud = 100;
}

static void gt_free(struct gt *t)
{
	uint32_t q, i;

	for (q = 1; q < 3; q++)
		for (i = 0; i < t->n[q]; i++)
			free(t->ref[q][i]);
	kvmemd_raw_detach(&t->r);
}

static int gt_op(struct gt *t, struct kvmem_sqe e)
{
	return kvmemd_raw_call(&t->r, e, ++t->ud).res;
}

/* The bytes a sealed page's slot takes. */
static uint32_t gt_slot_bytes(const struct gt *t)
{
	return (uint32_t)((t->page_bytes + KVMEM_SLOT_UNIT - 1) /
			  KVMEM_SLOT_UNIT * KVMEM_SLOT_UNIT);
}

/* The bytes of the page the client last saw at @slot. */
static const uint8_t *gt_page(const struct gt *t, uint32_t slot)
{
	if (slot >= t->arena_units)
		return t->r.gpu +
		       (size_t)(slot - t->arena_units) * KVMEM_SLOT_UNIT;
	return t->r.arena + (size_t)slot * KVMEM_SLOT_UNIT;
}

/* Sequence @q (made here) gets @n sealed pages of random tokens. */
static void gt_fill(struct gt *t, uint32_t q, uint32_t n, uint64_t seed)
{
	const uint32_t tpp = t->g.tokens_per_page;
	const size_t vals = (size_t)tpp * t->g.kv_heads * t->g.head_dim;
	float *k = kvmem_check_xmalloc(vals * sizeof(float));
	float *v = kvmem_check_xmalloc(vals * sizeof(float));
	struct kvmem_rng rng;
	uint32_t i, slot;
	size_t j;

	ck_assert_int_eq(
		gt_op(t, (struct kvmem_sqe){ .opcode = KVMEM_OP_SEQ_CREATE }),
		(int)q);
	kvmem_rng_seed(&rng, seed);
	for (i = 0; i < n; i++) {
		struct kvmem_page_hdr hdr = { .seq = q,
					      .token_start = i * tpp,
					      .flags = KVMEM_HDR_SEALED,
					      .ntokens = tpp };

		ck_assert_int_eq(
			gt_op(t,
			      (struct kvmem_sqe){ .opcode = KVMEM_OP_PAGE_ALLOC,
						  .len = 1 }),
			1);
		memcpy(&slot, t->r.buf, sizeof(slot));
		for (j = 0; j < vals; j++) {
			k[j] = kvmem_check_rnd_value(&rng, 1.0);
			v[j] = kvmem_check_rnd_value(&rng, 1.0);
		}
		ck_assert_int_eq(
			kvmem_page_encode(t->r.arena + (size_t)slot *
							       KVMEM_SLOT_UNIT,
					  &t->g, &hdr, 0, k, v),
			0);
		t->ref[q][i] = kvmem_check_xmalloc(t->page_bytes);
		memcpy(t->ref[q][i], gt_page(t, slot), t->page_bytes);
		ck_assert_int_eq(
			gt_op(t,
			      (struct kvmem_sqe){ .opcode = KVMEM_OP_PAGE_SEAL,
						  .slot = slot,
						  .seq = q,
						  .token_start = i * tpp,
						  .ntokens = tpp }),
			0);
		t->slot[q][i] = slot;
	}
	t->n[q] = n;
	free(k);
	free(v);
}

/*
 * Acquire @q (on the GPU with @gpu), follow the moves it reports, and
 * check that each page is where the moves say, byte for byte the page
 * sealed. Return: the acquire's result; *@on_gpu: its pages on the GPU.
 */
static int gt_acquire(struct gt *t, uint32_t q, int gpu, uint32_t *on_gpu)
{
	struct kvmem_page_move_ex m;
	uint32_t i, n = 0;
	int res, j;

	res = gt_op(t, (struct kvmem_sqe){ .opcode = KVMEM_OP_SEQ_ACQUIRE,
					   .flags = gpu ? KVMEM_SQE_GPU : 0,
					   .seq = q,
					   .len = NPAGES_MAX * sizeof(m) });
	for (j = 0; j < res; j++) {
		memcpy(&m, t->r.buf + (size_t)j * sizeof(m), sizeof(m));
		i = m.token_start / t->g.tokens_per_page;
		ck_assert_uint_lt(i, t->n[q]);
		ck_assert_uint_eq(m.old_slot, t->slot[q][i]);
		t->slot[q][i] = m.new_slot;
	}
	for (i = 0; res >= 0 && i < t->n[q]; i++) {
		n += t->slot[q][i] >= t->arena_units;
		ck_assert_msg(!memcmp(gt_page(t, t->slot[q][i]), t->ref[q][i],
				      t->page_bytes),
			      "page %u of sequence %u at slot %u is not the "
			      "page sealed",
			      i, q, t->slot[q][i]);
	}
	if (on_gpu)
		*on_gpu = n;
	return res;
}

static int gt_release(struct gt *t, uint32_t q)
{
	return gt_op(t, (struct kvmem_sqe){ .opcode = KVMEM_OP_SEQ_RELEASE,
					    .seq = q });
}

static void gpu_pool_stats(const struct kvmemd_proc *p)
{
	admin(p, "stats");
}

static void start_standin(struct kvmemd_proc *p, const char *extra)
{
	char conf[512];

	/* @extra: keys of [scrub], then sections of their own */
	snprintf(conf, sizeof(conf),
		 "[scrub]\nrate = 0\n%s[pool]\ngpu_device = standin\n"
		 "gpu_bytes = 2M\n",
		 extra ? extra : "");
	kvmemd_start(p, conf, NULL);
}

/*
 * Pages go to the stand-in's GPU memory on an acquire with KVMEM_SQE_GPU,
 * come back on one without it, bit-exact both ways, each move reported
 * once; a flag the session was not granted, or that another op does not
 * take, is refused.
 */
START_TEST(test_gpu_tier_moves)
{
	struct kvmemd_proc p;
	uint32_t on_gpu;
	struct gt t;
	int n;

	fprintf(stderr, "NOTE: gpu_tier: host memory stands in for the GPU "
			"(pool.gpu_device = standin); no GPU ran here\n");
	start_standin(&p, NULL);
	admin(&p, "status");
	ck_assert_msg(strstr(reply, "\"backend\":\"standin\""), "%s", reply);
	gt_attach(&t, &p, 1u << 20, 2);
	ck_assert_uint_eq(t.r.w.gpu_bytes, 2u << 20);
	ck_assert_mem_eq(t.r.w.gpu_uuid, "kvmem stand-in", 14);
	gt_fill(&t, 1, 8, 1);

	/* An op that takes no flags refuses it. */
	ck_assert_int_eq(
		gt_op(&t, (struct kvmem_sqe){ .opcode = KVMEM_OP_SEQ_CREATE,
					      .flags = KVMEM_SQE_GPU }),
		-EINVAL);
	ck_assert_int_eq(
		gt_op(&t, (struct kvmem_sqe){ .opcode = KVMEM_OP_SEQ_ACQUIRE,
					      .flags = 2,
					      .seq = 1 }),
		-EINVAL);

	n = gt_acquire(&t, 1, 1, &on_gpu);
	ck_assert_int_eq(n, 8);
	ck_assert_uint_eq(on_gpu, 8);
	gpu_pool_stats(&p);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "sealed_bytes"),
		8 * t.page_bytes);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "promoted_pages"),
		8);
	/* A slot of the GPU tier is never the client's to seal, nor one
	 * past it to name. */
	ck_assert_int_eq(
		gt_op(&t, (struct kvmem_sqe){ .opcode = KVMEM_OP_PAGE_SEAL,
					      .slot = t.slot[1][7],
					      .seq = 1,
					      .token_start = 99 * 64,
					      .ntokens = t.g.tokens_per_page }),
		-EINVAL);
	ck_assert_int_eq(
		gt_op(&t, (struct kvmem_sqe){ .opcode = KVMEM_OP_PAGE_FREE,
					      .slot = t.arena_units + 512,
					      .seq = 1 }),
		-EINVAL);
	/* Where they are already: nothing moves, nothing is reported. */
	ck_assert_int_eq(gt_acquire(&t, 1, 1, &on_gpu), 0);
	ck_assert_uint_eq(on_gpu, 8);
	/* Back to host memory for a reader on the CPU. */
	ck_assert_int_eq(gt_acquire(&t, 1, 0, &on_gpu), 8);
	ck_assert_uint_eq(on_gpu, 0);
	gpu_pool_stats(&p);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "sealed_bytes"),
		0);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "demoted_pages"),
		8);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "move_errors"), 0);
	/* The operator's view of it. */
	ck_assert_int_eq(gt_acquire(&t, 1, 1, &on_gpu), 8);
	admin(&p, "tier");
	ck_assert_uint_eq(kvmemd_json_after(reply, "\"gpu\"", "pages"), 8);
	ck_assert_uint_eq(kvmemd_json_after(reply, "\"gpu\"", "bytes"),
			  8 * t.page_bytes);
	ck_assert_uint_eq(kvmemd_json_after(reply, "\"warm\"", "pages"), 0);
	{
		struct kvmem_run run;

		KVMEM_RUN(&run, "kvmemctl", "", "-a", p.admin, "tier");
		ck_assert_int_eq(run.status, 0);
		ck_assert_msg(strstr(run.out, "gpu"), "%s", run.out);
		kvmem_check_run_free(&run);
	}
	ck_assert_int_eq(gt_acquire(&t, 1, 0, &on_gpu), 8);
	{
		struct kvmem_run run;

		KVMEM_RUN(&run, "kvmemctl", "", "-a", p.admin, "status");
		ck_assert_int_eq(run.status, 0);
		ck_assert_msg(strstr(run.out, "host memory standing in for a "
					      "GPU"),
			      "%s", run.out);
		ck_assert_msg(strstr(run.out, "16 pages moved to the GPU, 16 "
					      "back"),
			      "%s", run.out);
		kvmem_check_run_free(&run);
	}
	/* A page dropped while on the GPU gives its slot back there. */
	ck_assert_int_eq(gt_acquire(&t, 1, 1, &on_gpu), 8);
	ck_assert_int_eq(
		gt_op(&t, (struct kvmem_sqe){ .opcode = KVMEM_OP_PAGE_FREE,
					      .slot = t.slot[1][7],
					      .seq = 1 }),
		0);
	gpu_pool_stats(&p);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "sealed_bytes"),
		7 * t.page_bytes);
	gt_free(&t);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* A session without the feature keeps its GPU memory to itself: no flag
 * is taken, and a hello of ABI 4 with GPU memory but without the tier is
 * served as before. */
START_TEST(test_gpu_tier_not_asked)
{
	struct kvmem_hello h = kvmemd_hello(1u << 20);
	struct kvmemd_proc p;
	struct kvmemd_raw r;

	start_standin(&p, NULL);
	h.features &= ~KVMEM_FEAT_GPU_TIER;
	h.gpu_mib = 2;
	ck_assert_int_eq(kvmemd_raw_attach(&r, &p, &h, sizeof(h)), 0);
	ck_assert_uint_eq(r.w.features & KVMEM_FEAT_GPU_TIER, 0);
	ck_assert_int_eq(KVMEMD_OP(&r, 1, .opcode = KVMEM_OP_SEQ_CREATE), 1);
	ck_assert_int_eq(KVMEMD_OP(&r, 2, .opcode = KVMEM_OP_SEQ_ACQUIRE,
				   .flags = KVMEM_SQE_GPU, .seq = 1),
			 -EINVAL);
	kvmemd_raw_detach(&r);
	/* No GPU memory, no tier. */
	h = kvmemd_hello(1u << 20);
	ck_assert_int_eq(kvmemd_raw_attach(&r, &p, &h, sizeof(h)), 0);
	ck_assert_uint_eq(r.w.features & KVMEM_FEAT_GPU_TIER, 0);
	kvmemd_raw_detach(&r);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * A page flipped while on the GPU (the client may write its GPU memory,
 * as a soft error would) comes back corrected by its code, counted in the
 * GPU pool; one with more flips in a word than the code corrects comes
 * back poisoned, never as the values it had: its bytes are not the page
 * sealed, and the loss is counted.
 */
START_TEST(test_gpu_tier_flips_on_the_gpu)
{
	struct kvmemd_proc p;
	uint32_t on_gpu, s0, s1;
	struct kvmem_page_layout l;
	uint8_t *page;
	struct gt t;

	start_standin(&p, NULL);
	gt_attach(&t, &p, 1u << 20, 2);
	kvmem_page_layout(&t.g, 0, &l);
	gt_fill(&t, 1, 2, 2);
	ck_assert_int_eq(gt_acquire(&t, 1, 1, &on_gpu), 2);
	ck_assert_uint_eq(on_gpu, 2);
	s0 = t.slot[1][0];
	/* One bit of page 0's payload: corrected on the way back. */
	page = t.r.gpu + (size_t)(s0 - t.arena_units) * KVMEM_SLOT_UNIT;
	page[l.k_off + 3] ^= 0x04;
	ck_assert_int_eq(gt_acquire(&t, 1, 0, &on_gpu), 2);
	ck_assert_uint_eq(on_gpu, 0);
	admin(&p, "sessions");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ce"), 1);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ue"), 0);
	gpu_pool_stats(&p);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "changed_pages"),
		1);

	/* Two bits of one word of page 1: the code cannot undo them. */
	ck_assert_int_eq(gt_acquire(&t, 1, 1, &on_gpu), 2);
	ck_assert_uint_eq(on_gpu, 2);
	s1 = t.slot[1][1];
	page = t.r.gpu + (size_t)(s1 - t.arena_units) * KVMEM_SLOT_UNIT;
	page[l.k_off] ^= 0x03;
	ck_assert_int_gt(
		gt_op(&t,
		      (struct kvmem_sqe){
			      .opcode = KVMEM_OP_SEQ_ACQUIRE,
			      .seq = 1,
			      .len = 4 * sizeof(struct kvmem_page_move_ex) }),
		0);
	admin(&p, "errors");
	ck_assert_msg(strstr(reply, "\"pool\":\"gpu\""), "%s", reply);
	admin(&p, "sessions");
	ck_assert_uint_gt(kvmemd_json_u64(reply, "ue"), 0);
	gt_free(&t);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * Pressure: more pages want the GPU than its slots hold. The released
 * pages there leave for host memory to make room (none attended: the
 * longest released first), and below tier.low_watermark the GPU tier
 * empties itself down to tier.high_watermark; every page, wherever it
 * went, is the page sealed.
 */
START_TEST(test_gpu_tier_pressure)
{
	struct kvmemd_proc p;
	uint32_t on_gpu, cap;
	uint64_t sealed;
	struct gt t;

	start_standin(&p, "[tier]\nlow_watermark = 20\nhigh_watermark = 40\n");
	gt_attach(&t, &p, 4u << 20, 2);
	cap = (uint32_t)((2u << 20) / t.page_bytes);
	ck_assert_uint_le(cap, NPAGES_MAX / 2);
	/* Sequence 1 fills three quarters of the GPU, and is released. */
	gt_fill(&t, 1, cap * 3 / 4, 3);
	ck_assert_int_ge(gt_acquire(&t, 1, 1, &on_gpu), 0);
	ck_assert_uint_eq(on_gpu, cap * 3 / 4);
	ck_assert_int_eq(gt_release(&t, 1), 0);
	/* Sequence 2 wants half of it: sequence 1's pages make room. */
	gt_fill(&t, 2, cap / 2, 4);
	ck_assert_int_ge(gt_acquire(&t, 2, 1, &on_gpu), 0);
	ck_assert_uint_eq(on_gpu, cap / 2);
	ck_assert_int_ge(gt_acquire(&t, 1, 0, &on_gpu), 0);
	ck_assert_uint_eq(on_gpu, 0);
	ck_assert_int_eq(gt_release(&t, 1), 0);
	/* Released, sequence 2 leaves the GPU down to its high watermark:
	 * at least 40% of it free, so at most 60% of its slots used. */
	ck_assert_int_eq(gt_release(&t, 2), 0);
	gpu_pool_stats(&p);
	sealed = kvmemd_json_after(reply, "\"pool\":\"gpu\"", "sealed_bytes");
	ck_assert_uint_le(sealed, (2u << 20) * 60 / 100);
	ck_assert_uint_gt(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "demoted_pages"),
		0);
	ck_assert_int_ge(gt_acquire(&t, 2, 0, &on_gpu), 0);
	ck_assert_uint_eq(on_gpu, 0);
	gt_free(&t);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * The stand-in with a GPU tier of 2 MiB, its watermarks out of the way,
 * all but two of its slots taken by sequence 1 (pages of random tokens
 * from @seed), acquired there. Return: the tier's slots.
 */
static uint32_t gpu_nearly_full(struct kvmemd_proc *p, struct gt *t,
				uint64_t seed)
{
	uint32_t on_gpu, slots;

	start_standin(p, "[tier]\nlow_watermark = 0\nhigh_watermark = 1\n");
	gt_attach(t, p, 8u << 20, 2);
	slots = (2u << 20) / gt_slot_bytes(t);
	gt_fill(t, 1, slots - 2, seed);
	ck_assert_int_eq(gt_acquire(t, 1, 1, &on_gpu), (int)slots - 2);
	ck_assert_uint_eq(on_gpu, slots - 2);
	return slots;
}

/*
 * An acquire for a GPU tier nearly full (the watermarks out of the way)
 * makes room for its pages, a batch of copies at a time: exactly as many
 * released pages leave as the free slots lack.
 */
START_TEST(test_gpu_tier_make_room)
{
	struct kvmemd_proc p;
	uint32_t on_gpu, slots;
	struct gt t;

	slots = gpu_nearly_full(&p, &t, 31);
	ck_assert_int_eq(gt_release(&t, 1), 0);
	gt_fill(&t, 2, slots / 3, 32);
	ck_assert_int_ge(gt_acquire(&t, 2, 1, &on_gpu), 0);
	ck_assert_uint_eq(on_gpu, slots / 3);
	gpu_pool_stats(&p);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "demoted_pages"),
		slots / 3 - 2);
	ck_assert_int_ge(gt_acquire(&t, 1, 0, &on_gpu), 0);
	ck_assert_int_eq(gt_release(&t, 1), 0);
	gt_free(&t);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * An acquire for the GPU while the GPU tier is full of pages another
 * acquired sequence holds: the pages that fit go there, the rest are read
 * in host memory, and the acquire is done. (It once looked for room again
 * for every page left, through every page of the session each time, for
 * 4 MiB of pages a pass: an acquire of a long sequence held the loop for
 * seconds.) Once the other sequence lets go, its pages make the room.
 */
START_TEST(test_gpu_tier_full_of_acquired)
{
	struct kvmemd_proc p;
	uint32_t on_gpu;
	struct gt t;

	gpu_nearly_full(&p, &t, 51);
	gt_fill(&t, 2, 10, 52);
	ck_assert_int_eq(gt_acquire(&t, 2, 1, &on_gpu), 2);
	ck_assert_uint_eq(on_gpu, 2);
	ck_assert_uint_ge(t.slot[2][0], t.arena_units);
	ck_assert_uint_ge(t.slot[2][1], t.arena_units);
	/* Asked again: nothing more fits, nothing moves. */
	ck_assert_int_eq(gt_acquire(&t, 2, 1, &on_gpu), 0);
	ck_assert_uint_eq(on_gpu, 2);
	gpu_pool_stats(&p);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "demoted_pages"),
		0);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "move_errors"), 0);
	/* Sequence 1 let go: eight of its pages make room for the rest. */
	ck_assert_int_eq(gt_release(&t, 1), 0);
	ck_assert_int_eq(gt_acquire(&t, 2, 1, &on_gpu), 8);
	ck_assert_uint_eq(on_gpu, 10);
	gpu_pool_stats(&p);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "demoted_pages"),
		8);
	ck_assert_int_ge(gt_acquire(&t, 1, 0, &on_gpu), 0);
	ck_assert_uint_eq(on_gpu, 0);
	gt_free(&t);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * Regression: a ring of acquires of one sequence, with and without
 * KVMEM_SQE_GPU in turn, had the loop copy the sequence to the GPU and
 * back up to 256 times in one pass, up to 4 MiB an op, before it looked
 * at another session: 1 GiB of copies a pass where a pass of seals does
 * 1 MiB. What moves now counts in the session's pass. No timing is
 * asserted: another session's NOP, sent once the ring is under way, is
 * answered before all of it is through (not before half: a test delayed
 * by a busy machine may send it late), and every acquire completes, each
 * move counted.
 */
START_TEST(test_gpu_tier_moves_take_turns)
{
	const uint32_t nacq = 256;
	struct kvmem_hello hb = kvmemd_hello(0);
	struct kvmemd_proc p;
	struct kvmemd_raw b;
	struct kvmem_cqe cq;
	uint32_t npages, slot, done, i;
	struct gt t;

	kvmemd_start(&p,
		     "[scrub]\nrate = 0\n[pool]\ngpu_device = standin\n"
		     "gpu_bytes = 8M\n",
		     NULL);
	gt_attach(&t, &p, 16u << 20, 8);
	ck_assert_int_eq(kvmemd_raw_attach(&b, &p, &hb, sizeof(hb)), 0);
	ck_assert_uint_ge(t.r.w.sq_entries, nacq);
	ck_assert_uint_ge(t.r.w.cq_entries, nacq);
	/* An acquire moves more than a pass's 1 MiB. */
	slot = gt_slot_bytes(&t);
	npages = (1u << 20) / slot + 1;
	ck_assert_uint_le(npages, NPAGES_MAX);
	gt_fill(&t, 1, npages, 61);
	for (i = 0; i < nacq; i++)
		t.r.sqes[t.r.sq_tail++ & (t.r.w.sq_entries - 1)] =
			(struct kvmem_sqe){
				.opcode = KVMEM_OP_SEQ_ACQUIRE,
				.flags = i % 2 ? 0 : KVMEM_SQE_GPU,
				.seq = 1,
				.len = npages *
				       sizeof(struct kvmem_page_move_ex),
				.user_data = i,
			};
	kvmemd_raw_publish(&t.r);
	for (i = 0; i < 600000 &&
		    __atomic_load_n(&t.r.ring->sq_head, __ATOMIC_ACQUIRE) ==
			    t.r.sq_tail - nacq;
	     i++)
		usleep(100);
	cq = kvmemd_raw_op(&b, &(struct kvmem_sqe){ .opcode = KVMEM_OP_NOP,
						    .user_data = 77 });
	ck_assert_int_eq(cq.res, 0);
	done = __atomic_load_n(&t.r.ring->cq_tail, __ATOMIC_ACQUIRE) -
	       t.r.cq_head;
	ck_assert_msg(done < nacq,
		      "a NOP of another session waited for %u of %u "
		      "acquires moving 1 MiB and more each",
		      done, nacq);
	for (i = 0; i < nacq; i++) {
		cq = kvmemd_raw_reap(&t.r);
		ck_assert_uint_eq(cq.user_data, i);
		ck_assert_int_eq(cq.res, (int)npages);
	}
	gpu_pool_stats(&p);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "promoted_pages"),
		nacq / 2 * npages);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "demoted_pages"),
		nacq / 2 * npages);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "sealed_bytes"),
		0);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "move_errors"), 0);
	kvmemd_raw_detach(&b);
	gt_free(&t);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * Wait for a GPU tier of 2 MiB, tier.high_watermark = 40, to empty itself
 * down to it. Return: its sealed bytes, the stats in reply.
 */
static uint64_t gpu_reclaimed(const struct kvmemd_proc *p)
{
	uint64_t sealed = 0;
	int i;

	for (i = 0; i < 500; i++) {
		gpu_pool_stats(p);
		sealed = kvmemd_json_after(reply, "\"pool\":\"gpu\"",
					   "sealed_bytes");
		if (sealed <= (2u << 20) * 60 / 100)
			break;
		usleep(10000);
	}
	ck_assert_uint_le(sealed, (2u << 20) * 60 / 100);
	return sealed;
}

/*
 * The watermarks on their own: two sequences fill 90% of the GPU tier;
 * the first released, its pages (and only its: the other is acquired)
 * leave, in batches of copies, until the high watermark is free, and not
 * a page more.
 */
START_TEST(test_gpu_tier_watermarks)
{
	struct kvmemd_proc p;
	uint32_t on_gpu, cap, n, slot;
	uint64_t sealed;
	struct gt t;

	start_standin(&p, "[tier]\nlow_watermark = 20\nhigh_watermark = 40\n");
	gt_attach(&t, &p, 8u << 20, 2);
	slot = gt_slot_bytes(&t);
	cap = (2u << 20) / slot;
	n = cap * 45 / 100;
	gt_fill(&t, 1, n, 21);
	gt_fill(&t, 2, n, 22);
	ck_assert_int_ge(gt_acquire(&t, 1, 1, &on_gpu), 0);
	ck_assert_uint_eq(on_gpu, n);
	ck_assert_int_ge(gt_acquire(&t, 2, 1, &on_gpu), 0);
	ck_assert_uint_eq(on_gpu, n);
	ck_assert_int_eq(gt_release(&t, 1), 0);
	sealed = gpu_reclaimed(&p);
	ck_assert_uint_gt(sealed + slot, (2u << 20) * 60 / 100);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "demoted_pages"),
		(2 * n * slot - sealed) / slot);
	/* Sequence 2 kept every page there; sequence 1 the rest. */
	ck_assert_int_eq(gt_acquire(&t, 2, 1, &on_gpu), 0);
	ck_assert_uint_eq(on_gpu, n);
	ck_assert_int_ge(gt_acquire(&t, 1, 0, &on_gpu), 0);
	ck_assert_uint_eq(on_gpu, 0);
	gt_free(&t);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* The session's heat array: host slots, then the GPU tier's. */
static uint16_t *gt_heat(const struct gt *t)
{
	return (uint16_t *)(t->r.map + t->r.w.heat_off);
}

/*
 * The heat array covers the GPU tier's slots, and a page keeps its heat
 * as it moves either way. Below the low watermark the pages that leave
 * the GPU are the least attended, not the longest released: sequence 1,
 * released first but hot, stays; sequence 2 makes the room. (Before, the
 * heat of GPU slots was not there to read, and sequence 1 left.)
 */
START_TEST(test_gpu_tier_heat)
{
	struct kvmemd_proc p;
	uint32_t on_gpu, cap, n, i, slot;
	uint64_t demoted;
	struct gt t;
	uint16_t *heat;

	start_standin(&p, "[tier]\nlow_watermark = 0\nhigh_watermark = 1\n"
			  "stale_tokens = 0\n");
	gt_attach(&t, &p, 8u << 20, 2);
	slot = gt_slot_bytes(&t);
	cap = (2u << 20) / slot;
	ck_assert_uint_eq(t.r.w.heat_units,
			  t.arena_units + (2u << 20) / KVMEM_SLOT_UNIT);
	heat = gt_heat(&t);
	n = cap * 45 / 100;
	gt_fill(&t, 1, n, 61);
	gt_fill(&t, 2, n, 62);
	for (i = 0; i < n; i++) {
		heat[t.slot[1][i]] = (uint16_t)(40000 + i);
		heat[t.slot[2][i]] = (uint16_t)i;
	}
	ck_assert_int_eq(gt_acquire(&t, 1, 1, &on_gpu), (int)n);
	ck_assert_uint_eq(on_gpu, n);
	ck_assert_int_eq(gt_acquire(&t, 2, 1, &on_gpu), (int)n);
	ck_assert_uint_eq(on_gpu, n);
	for (i = 0; i < n; i++) {
		ck_assert_uint_ge(t.slot[1][i], t.arena_units);
		ck_assert_uint_eq(heat[t.slot[1][i]], 40000 + i);
		ck_assert_uint_eq(heat[t.slot[2][i]], i);
	}
	ck_assert_int_eq(gt_release(&t, 1), 0);
	usleep(20000);
	ck_assert_int_eq(gt_release(&t, 2), 0);
	admin(&p, "policy set tier.high_watermark=40");
	admin(&p, "policy set tier.low_watermark=20");
	gpu_reclaimed(&p);
	demoted = kvmemd_json_after(reply, "\"pool\":\"gpu\"", "demoted_pages");
	ck_assert_uint_gt(demoted, 0);
	ck_assert_uint_lt(demoted, n);
	/* Sequence 1 all there still, and nothing of it moved. */
	ck_assert_int_eq(gt_acquire(&t, 1, 1, &on_gpu), 0);
	ck_assert_uint_eq(on_gpu, n);
	/* Each of its pages moved once: left, or brought back now. */
	ck_assert_int_eq(gt_acquire(&t, 2, 0, &on_gpu), (int)n);
	for (i = 0; i < n; i++) {
		ck_assert_uint_eq(t.slot[2][i] < t.arena_units, 1);
		ck_assert_uint_eq(heat[t.slot[2][i]], i);
	}
	gt_free(&t);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* The words corrected since start in h84 payload are @words, counted
 * where they were made: on the GPU, none in host memory. */
static void ce_counted_on_gpu(const struct kvmemd_proc *p, uint64_t words)
{
	admin(p, "errors");
	ck_assert_uint_eq(
		kvmemd_json_after(reply,
				  "\"pool\":\"gpu\",\"tier\":\"warm\","
				  "\"codec\":\"h84\"",
				  "ce"),
		words);
	ck_assert_uint_eq(
		kvmemd_json_after(reply,
				  "\"pool\":\"host\",\"tier\":\"warm\","
				  "\"codec\":\"h84\"",
				  "ce"),
		0);
}

/*
 * The scrubber on the stand-in's GPU memory, which the daemon can read:
 * one flip in every payload word of a sequence on the GPU (the injector's
 * exact channel), and a pass corrects each, counted in the GPU pool; the
 * pages come back to host memory as they were sealed. `kvmemctl scrub`
 * of the sequence reaches them too.
 */
START_TEST(test_gpu_tier_scrub)
{
	struct kvmemd_proc p;
	uint32_t on_gpu;
	uint64_t words;
	struct gt t;
	char cmd[64];

	start_standin(&p, "allow_inject = yes\n");
	gt_attach(&t, &p, 1u << 20, 2);
	gt_fill(&t, 1, 8, 7);
	ck_assert_int_eq(gt_acquire(&t, 1, 1, &on_gpu), 8);
	ck_assert_uint_eq(on_gpu, 8);
	snprintf(cmd, sizeof(cmd),
		 "inject seq %u 1 ber 0 seed 5 channel "
		 "exact:1",
		 t.r.w.session);
	admin(&p, "%s", cmd);
	words = kvmemd_json_u64(reply, "words");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "pages"), 8);
	ck_assert_uint_gt(words, 0);
	admin(&p, "scrub now");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ce"), words);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ue"), 0);
	ce_counted_on_gpu(&p, words);
	/* Back in host memory, every page as it was sealed. */
	ck_assert_int_eq(gt_acquire(&t, 1, 0, &on_gpu), 8);
	ck_assert_uint_eq(on_gpu, 0);
	gt_free(&t);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * SEQ_PREFETCH with KVMEM_SQE_GPU: a released sequence's pages move into
 * the GPU tier in the background, into free slots only; the acquire after
 * finds them there (the moves are reported to it, nothing more is
 * copied). A hint for more than the free slots moves what fits.
 */
START_TEST(test_gpu_tier_prefetch)
{
	struct kvmemd_proc p;
	uint64_t now = 0, last, sealed, low;
	uint32_t on_gpu, cap;
	struct gt t;
	int i;

	start_standin(&p, NULL);
	gt_attach(&t, &p, 4u << 20, 2);
	cap = (uint32_t)((2u << 20) / t.page_bytes);
	gt_fill(&t, 1, 8, 13);
	ck_assert_int_eq(gt_release(&t, 1), 0);
	ck_assert_int_eq(
		gt_op(&t, (struct kvmem_sqe){ .opcode = KVMEM_OP_SEQ_PREFETCH,
					      .flags = KVMEM_SQE_GPU,
					      .seq = 1 }),
		0);
	for (i = 0; i < 500; i++) {
		gpu_pool_stats(&p);
		if (kvmemd_json_after(reply, "\"pool\":\"gpu\"",
				      "promoted_pages") == 8)
			break;
		usleep(10000);
	}
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "promoted_pages"),
		8);
	ck_assert_int_eq(gt_acquire(&t, 1, 1, &on_gpu), 8);
	ck_assert_uint_eq(on_gpu, 8);
	gpu_pool_stats(&p);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "promoted_pages"),
		8);
	/* More than fits: the tier fills to its low watermark, and no
	 * page leaves it for the hint. */
	gt_fill(&t, 2, cap, 14);
	ck_assert_int_eq(gt_release(&t, 2), 0);
	ck_assert_int_eq(
		gt_op(&t, (struct kvmem_sqe){ .opcode = KVMEM_OP_SEQ_PREFETCH,
					      .flags = KVMEM_SQE_GPU,
					      .seq = 2 }),
		0);
	/* Until two looks 50 ms apart see the same count. */
	for (i = 0, last = 0; i < 200; i++) {
		usleep(50000);
		gpu_pool_stats(&p);
		now = kvmemd_json_after(reply, "\"pool\":\"gpu\"",
					"promoted_pages");
		if (now > 8 && now == last)
			break;
		last = now;
	}
	ck_assert_uint_gt(now, 8);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "demoted_pages"),
		0);
	sealed = kvmemd_json_after(reply, "\"pool\":\"gpu\"", "sealed_bytes");
	admin(&p, "tier");
	low = kvmemd_json_u64(reply, "low_watermark");
	ck_assert_uint_le(sealed, (2u << 20) * (100 - low) / 100);
	ck_assert_int_ge(gt_acquire(&t, 1, 0, &on_gpu), 0);
	ck_assert_uint_eq(on_gpu, 0);
	ck_assert_int_ge(gt_acquire(&t, 2, 0, &on_gpu), 0);
	ck_assert_uint_eq(on_gpu, 0);
	gt_free(&t);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * A sequence longer than one pass of the loop moves (4 MiB of pages) and
 * than one batch of copies waited for together (256 pages): the acquire
 * waits over passes, and every page lands, bit-exact, both ways.
 */
START_TEST(test_gpu_tier_long_sequence)
{
	struct kvmemd_proc p;
	uint32_t on_gpu;
	struct gt t;

	kvmemd_start(&p,
		     "[scrub]\nrate = 0\n[pool]\ngpu_device = standin\n"
		     "gpu_bytes = 8M\n",
		     NULL);
	gt_attach(&t, &p, 8u << 20, 6);
	gt_fill(&t, 1, 400, 12);
	ck_assert_uint_gt(400 * t.page_bytes, 4u << 20);
	ck_assert_int_eq(gt_acquire(&t, 1, 1, &on_gpu), 400);
	ck_assert_uint_eq(on_gpu, 400);
	ck_assert_int_eq(gt_acquire(&t, 1, 0, &on_gpu), 400);
	ck_assert_uint_eq(on_gpu, 0);
	gt_free(&t);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * A client killed while its pages are on the GPU and an acquire of them
 * sits in its ring unread: kvmemd frees the session, the GPU memory comes
 * back to the pool once the process is gone, and the next client is
 * served as the first was.
 */
START_TEST(test_gpu_tier_client_killed)
{
	struct kvmemd_proc p;
	uint32_t on_gpu;
	struct gt t;
	int i, st;
	pid_t pid;

	start_standin(&p, NULL);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid) {
		gt_attach(&t, &p, 1u << 20, 2);
		gt_fill(&t, 1, 8, 10);
		gt_acquire(&t, 1, 1, NULL);
		kvmemd_raw_queue(
			&t.r, &(struct kvmem_sqe){
				      .opcode = KVMEM_OP_SEQ_ACQUIRE,
				      .seq = 1,
				      .len = 8 * sizeof(struct kvmem_page_move),
				      .user_data = 1 });
		kill(getpid(), SIGKILL);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	for (i = 0; i < 500; i++) {
		admin(&p, "status");
		if (!kvmemd_json_u64(reply, "sessions") &&
		    !kvmemd_json_after(reply, "\"gpu_pool\"", "used_bytes"))
			break;
		usleep(10000);
	}
	ck_assert_uint_eq(kvmemd_json_u64(reply, "sessions"), 0);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"gpu_pool\"", "used_bytes"), 0);
	gt_attach(&t, &p, 1u << 20, 2);
	gt_fill(&t, 1, 8, 11);
	ck_assert_int_eq(gt_acquire(&t, 1, 1, &on_gpu), 8);
	ck_assert_uint_eq(on_gpu, 8);
	ck_assert_int_eq(gt_acquire(&t, 1, 0, &on_gpu), 8);
	gt_free(&t);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* libkvmem's kernels: without them kvmemd opens no GPU, fake or not. */
extern const size_t kvmem__fatbin_size;

/* kvmemd on the fake driver (tests/cuda/fakecuda.c), its kernels run by
 * the CPU executor (libkvmem-simt.so), with @extra in its environment and
 * @conf, keys of [pool], in its configuration: 0, or 1 when this build
 * cannot. */
static int start_fake(struct kvmemd_proc *p, const char *extra,
		      const char *conf)
{
	static char lib[PATH_MAX + 16];
	char path[PATH_MAX], c[256];
	const char *env[] = { lib, kvmem_check_simt_env(), extra, NULL };

	if (!kvmem__fatbin_size) {
		fprintf(stderr, "SKIP: gpu_tier: cuda backend: libkvmem was "
				"built without nvcc, kvmemd opens no GPU\n");
		return 1;
	}
	snprintf(path, sizeof(path), "%s/tests/libfakecuda.so",
		 kvmem_check_builddir());
	ck_assert_msg(realpath(path, lib + 14), "%s: %s", path,
		      strerror(errno));
	memcpy(lib, "KVMEM_LIBCUDA=", 14);
	snprintf(c, sizeof(c),
		 "[scrub]\nrate = 0\nallow_inject = yes\n[pool]\n"
		 "gpu_bytes = 64M\n%s",
		 conf ? conf : "");
	kvmemd_start(p, c, env);
	return 0;
}

/*
 * kvmemd on the fake driver with @env, whose copies to the GPU fail or
 * arrive other than they left: an acquire for the GPU leaves a sequence's
 * 8 pages (of random tokens from @seed) in host memory, where it reads
 * them as sealed, each move counted failed.
 */
static void copies_refused(const char *env, uint64_t seed)
{
	struct kvmemd_proc p;
	uint32_t on_gpu;
	struct gt t;

	if (start_fake(&p, env, NULL))
		return;
	gt_attach(&t, &p, 1u << 20, 2);
	gt_fill(&t, 1, 8, seed);
	ck_assert_int_eq(gt_acquire(&t, 1, 1, &on_gpu), 0);
	ck_assert_uint_eq(on_gpu, 0);
	gpu_pool_stats(&p);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "move_errors"), 8);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "sealed_bytes"),
		0);
	gt_free(&t);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}

/*
 * The cuda backend, the one a GPU runs, on the fake driver (device memory
 * is host memory there, copies memmove()): the same moves, bit-exact, the
 * injector's work on copies of the pages, the scrubber's on the pages
 * where they are (test_gpu_tier_cuda_checks). A
 * driver whose copies fail leaves the pages in host memory, where an
 * acquire for the GPU reads them, each failure counted.
 */
START_TEST(test_gpu_tier_cuda_backend)
{
	struct kvmemd_proc p;
	uint32_t on_gpu, i;
	uint64_t words;
	char cmd[32];
	struct gt t;

	if (start_fake(&p, NULL, NULL))
		return;
	admin(&p, "status");
	ck_assert_msg(strstr(reply, "\"backend\":\"cuda\""), "%s", reply);
	gt_attach(&t, &p, 1u << 20, 2);
	gt_fill(&t, 1, 8, 5);
	ck_assert_int_eq(gt_acquire(&t, 1, 1, &on_gpu), 8);
	ck_assert_uint_eq(on_gpu, 8);
	/* Device memory is not the daemon's to read: the injector works on
	 * a copy of each page, copied back, the scrubber with the kernels
	 * there; the pages in GPU memory (mapped here through the fake's
	 * memfd) are the pages sealed again. */
	snprintf(cmd, sizeof(cmd), "seq %u 1", t.r.w.session);
	admin(&p, "inject %s ber 0 seed 1 channel exact:1", cmd);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "pages"), 8);
	words = kvmemd_json_u64(reply, "words");
	ck_assert_uint_gt(words, 0);
	ck_assert_msg(
		memcmp(gt_page(&t, t.slot[1][0]), t.ref[1][0], t.page_bytes),
		"the flips did not reach the GPU");
	admin(&p, "scrub now %s", cmd);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ce"), words);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ue"), 0);
	admin(&p, "scrub now");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ce"), 0);
	for (i = 0; i < 8; i++)
		ck_assert_msg(!memcmp(gt_page(&t, t.slot[1][i]), t.ref[1][i],
				      t.page_bytes),
			      "page %u on the GPU not corrected", i);
	ce_counted_on_gpu(&p, words);
	ck_assert_int_eq(gt_acquire(&t, 1, 0, &on_gpu), 8);
	ck_assert_uint_eq(on_gpu, 0);
	gt_free(&t);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);

	copies_refused("FAKECUDA_COPY_FAIL=1", 6);
}
END_TEST

/* The pools' degraded pages: @host in host memory, @gpu on the GPU. */
static void degraded_in(const struct kvmemd_proc *p, uint64_t host,
			uint64_t gpu)
{
	admin(p, "stats");
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"host\"", "degraded_pages"),
		host);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"pool\":\"gpu\"", "degraded_pages"),
		gpu);
}

/* Pages the scrubber checked on the GPU where they are, and in copies. */
static void checked_at(const struct kvmemd_proc *p, uint64_t in_place,
		       uint64_t in_copies)
{
	admin(p, "status");
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"gpu_pool\"", "checked_in_place"),
		in_place);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"gpu_pool\"", "checked_in_copies"),
		in_copies);
}

/*
 * What the daemon cannot read on a GPU it checks there, with the kernels
 * (run here by the CPU executor), as an attacker of its checks would
 * have it: flips the scrub kernel corrects in place, counted as the
 * injector made them, no page copied; a word flipped beyond its code,
 * which sends the page to a copy to be counted as the scrubber here
 * counts; a word changed into another codeword, which no code sees and
 * the CRC kernel does (a CRC error, the page degraded); and a driver whose
 * copies to the GPU arrive with a bit flipped: no page is taken there,
 * every one stays in host memory as sealed, each move counted failed.
 */
START_TEST(test_gpu_tier_cuda_checks)
{
	struct kvmem_page_layout l;
	struct kvmemd_proc p;
	uint8_t data, *page;
	uint32_t on_gpu;
	uint64_t words;
	struct gt t;
	char cmd[32];

	if (start_fake(&p, NULL, NULL))
		return;
	gt_attach(&t, &p, 1u << 20, 2);
	kvmem_page_layout(&t.g, 0, &l);
	ck_assert_int_eq(l.codec, KVMEM_CODEC_H84);
	gt_fill(&t, 1, 8, 9);
	ck_assert_int_eq(gt_acquire(&t, 1, 1, &on_gpu), 8);
	ck_assert_uint_eq(on_gpu, 8);
	snprintf(cmd, sizeof(cmd), "seq %u 1", t.r.w.session);
	admin(&p, "inject %s ber 0 seed 3 channel exact:1", cmd);
	words = kvmemd_json_u64(reply, "words");
	ck_assert_uint_gt(words, 8);
	admin(&p, "scrub now %s", cmd);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ce"), words);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ue"), 0);
	checked_at(&p, 8, 0);
	ce_counted_on_gpu(&p, words);

	/* Two bits of one word of page 0: corrected by no code; checked in a
	 * copy, one uncorrectable word. */
	page = (uint8_t *)gt_page(&t, t.slot[1][0]);
	page[l.k_off] ^= 0x03;
	admin(&p, "scrub now %s", cmd);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ue"), 1);
	checked_at(&p, 15, 1);

	/* Page 1's first data byte changed, its two words encoded anew: every
	 * word a codeword, the seal's CRC not the page's. */
	page = (uint8_t *)gt_page(&t, t.slot[1][1]);
	ck_assert_int_eq(kvmem_ecc_decode(KVMEM_CODEC_H84, page + l.k_off,
					  &data, 2, NULL, NULL, NULL),
			 0);
	data ^= 0x01;
	ck_assert_int_eq(
		kvmem_ecc_encode(KVMEM_CODEC_H84, &data, page + l.k_off, 2), 0);
	admin(&p, "scrub now %s", cmd);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ce"), 0);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "crc"), 1);
	admin(&p, "sessions");
	ck_assert_uint_eq(kvmemd_json_u64(reply, "crc"), 1);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "degraded_pages"), 2);
	/* They are the GPU pool's, not host memory's; moved, they go along. */
	degraded_in(&p, 0, 2);
	ck_assert_int_eq(
		gt_op(&t,
		      (struct kvmem_sqe){
			      .opcode = KVMEM_OP_SEQ_ACQUIRE,
			      .seq = 1,
			      .len = NPAGES_MAX *
				     sizeof(struct kvmem_page_move_ex) }),
		8);
	degraded_in(&p, 2, 0);
	gt_free(&t);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);

	copies_refused("FAKECUDA_COPY_FLIP=1", 10);
}
END_TEST

/* The GPU pages the scrubber has checked in copies so far. */
static uint64_t copies_checked(const struct kvmemd_proc *p)
{
	admin(p, "status");
	return kvmemd_json_after(reply, "\"gpu_pool\"", "checked_in_copies");
}

/*
 * kvmemd on the fake driver, a sequence's 8 pages on the GPU; page 0 with
 * a header word past its code, so that the scrub kernel leaves the page
 * as it is and the patrol checks it in a copy (which goes back, with the
 * header put back from the seal record), a bit flipped in each of its last
 * @flips V words, and with @k one in its first K word. The patrol crawls,
 * a page in eight seconds, until it holds that copy.
 */
static void crawl_to_copy(struct kvmemd_proc *p, struct gt *t,
			  unsigned int flips, int k)
{
	struct kvmem_page_layout l;
	uint32_t on_gpu, i;
	uint8_t *page;

	gt_attach(t, p, 1u << 20, 2);
	kvmem_page_layout(&t->g, 0, &l);
	ck_assert_int_eq(l.codec, KVMEM_CODEC_H84);
	gt_fill(t, 1, 8, 21);
	ck_assert_int_eq(gt_acquire(t, 1, 1, &on_gpu), 8);
	ck_assert_uint_eq(on_gpu, 8);
	page = (uint8_t *)gt_page(t, t->slot[1][0]);
	page[0] ^= 0x0f;
	page[l.k_off] ^= k ? 0x01 : 0;
	for (i = 1; i <= flips; i++)
		page[l.v_off +
		     (size_t)t->g.kv_heads * t->g.tokens_per_page *
			     l.row_bytes -
		     i] ^= 0x01;
	admin(p, "scrub rate %zu", t->page_bytes / 8);
	for (i = 0; i < 1000 && !copies_checked(p); i++)
		usleep(10000);
	ck_assert_uint_eq(copies_checked(p), 1);
}

/* The patrol at full speed for two whole passes more (the one under way,
 * and one for what it had passed on page 0), then stopped. */
static void patrol_twice(const struct kvmemd_proc *p)
{
	uint64_t passes;
	unsigned int i;

	admin(p, "scrub rate 1G");
	admin(p, "scrub");
	passes = kvmemd_json_u64(reply, "passes");
	for (i = 0; i < 1000; i++) {
		admin(p, "scrub");
		if (kvmemd_json_u64(reply, "passes") >= passes + 2)
			break;
		usleep(10000);
	}
	ck_assert_uint_ge(kvmemd_json_u64(reply, "passes"), passes + 2);
	admin(p, "scrub rate 0");
}

/*
 * The end of a crawl_to_copy() test: two patrol passes more, the GPU pool
 * counting @words corrected, a pass over the sequence finding none left;
 * then kvmemd stopped.
 */
static void counted_once(struct kvmemd_proc *p, struct gt *t, uint64_t words)
{
	patrol_twice(p);
	ce_counted_on_gpu(p, words);
	admin(p, "scrub now seq %u 1", t->r.w.session);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ce"), 0);
	gt_free(t);
	ck_assert_int_eq(kvmemd_stop(p), 0);
	kvmemd_cleanup(p);
}

/*
 * The injector on a GPU page the patrol holds in its copy (crawl_to_copy()),
 * flipping a bit in every word of the sequence; then the patrol runs on:
 * each flip is corrected and counted once, none undone by the copy going
 * back as it was before the injector came.
 */
START_TEST(test_gpu_tier_inject_while_checked)
{
	struct kvmemd_proc p;
	uint64_t words;
	char cmd[32];
	struct gt t;
	uint32_t i;

	if (start_fake(&p, NULL, NULL))
		return;
	crawl_to_copy(&p, &t, 0, 0);
	snprintf(cmd, sizeof(cmd), "seq %u 1", t.r.w.session);
	admin(&p, "inject %s ber 0 seed 7 channel exact:1", cmd);
	words = kvmemd_json_u64(reply, "words");
	ck_assert_uint_gt(words, 8);
	patrol_twice(&p);
	ce_counted_on_gpu(&p, words);
	for (i = 1; i < 8; i++)
		ck_assert_msg(!memcmp(gt_page(&t, t.slot[1][i]), t.ref[1][i],
				      t.page_bytes),
			      "page %u on the GPU not corrected", i);
	gt_free(&t);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * `kvmemctl scrub now` over a sequence whose page 0 the patrol holds in
 * its copy (crawl_to_copy(), four flipped bits the patrol has not come
 * to): the pass takes up that copy rather than one of its own, corrects
 * and counts the four; the patrol, going on, finds nothing more there,
 * and its copy going back puts back nothing the pass corrected. Every
 * flip is counted once.
 */
START_TEST(test_gpu_tier_scrub_now_while_checked)
{
	struct kvmemd_proc p;
	struct gt t;

	if (start_fake(&p, NULL, NULL))
		return;
	crawl_to_copy(&p, &t, 4, 0);
	admin(&p, "scrub now seq %u 1", t.r.w.session);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ce"), 4);
	ck_assert_uint_eq(copies_checked(&p), 1);
	counted_once(&p, &t, 4);
}
END_TEST

/*
 * The same, but the patrol has corrected a K word in its copy before the
 * pass comes (found by a review): the pass counts that word too, as the
 * copy it writes back carries its correction, and the patrol, stopped
 * before its check reports (`scrub stop`), counts nothing; started again,
 * it finds nothing more. The word is counted once.
 */
START_TEST(test_gpu_tier_scrub_stopped_while_shared)
{
	struct kvmem_page_layout l;
	struct kvmemd_proc p;
	unsigned int i;
	struct gt t;

	if (start_fake(&p, NULL, NULL))
		return;
	crawl_to_copy(&p, &t, 0, 1);
	kvmem_page_layout(&t.g, 0, &l);
	/* Until the patrol is past the K word. */
	for (i = 0; i < 1000; i++) {
		admin(&p, "scrub");
		if (kvmemd_json_after(reply, "\"current\"", "bytes") >
		    l.k_off + 4 * l.row_bytes)
			break;
		usleep(10000);
	}
	admin(&p, "scrub now seq %u 1", t.r.w.session);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ce"), 1);
	admin(&p, "scrub stop");
	admin(&p, "scrub start");
	counted_once(&p, &t, 1);
}
END_TEST

/*
 * A client owns the bytes of its pages on the GPU and may write them. One
 * that gives the sealed page in its last GPU slot the header of a hot
 * page (FP16, four times the bytes) must not have the daemon's kernels
 * read or write past the slot, nor past the end of the memory: the page
 * is of the kind kvmemd sealed, its header is put back from the seal
 * record, and the daemon serves on. Nor may a header of fewer tokens have
 * the kernel take rows of the page for padding, nor one past its code
 * have a correction counted twice.
 */
START_TEST(test_gpu_tier_cuda_hostile_header)
{
	struct kvmem_page_layout l, lh;
	struct kvmemd_proc p;
	uint32_t on_gpu, cap, i, last = 0;
	uint8_t *hot, *page;
	struct gt t;
	char cmd[32];

	if (start_fake(&p, NULL, NULL))
		return;
	gt_attach(&t, &p, 4u << 20, 2);
	kvmem_page_layout(&t.g, 0, &l);
	kvmem_page_layout(&t.g, 1, &lh);
	ck_assert_uint_gt(lh.size, l.size);
	cap = (2u << 20) / gt_slot_bytes(&t);
	ck_assert_uint_le(cap, NPAGES_MAX);
	gt_fill(&t, 1, cap, 12);
	ck_assert_int_ge(gt_acquire(&t, 1, 1, &on_gpu), 0);
	ck_assert_uint_eq(on_gpu, cap);
	for (i = 1; i < cap; i++)
		if (t.slot[1][i] > t.slot[1][last])
			last = i;
	/* The slot ends where the GPU memory does. */
	ck_assert_uint_ge((uint64_t)(t.slot[1][last] - t.arena_units) *
					  KVMEM_SLOT_UNIT +
				  lh.size,
			  2u << 20);
	{
		struct kvmem_page_hdr h = { .seq = 1,
					    .token_start =
						    last * t.g.tokens_per_page,
					    .ntokens = 1 };
		const size_t vals = (size_t)t.g.kv_heads * t.g.head_dim;
		float *kv = kvmem_check_xmalloc(vals * sizeof(float));

		memset(kv, 0, vals * sizeof(float));
		hot = kvmem_check_xmalloc(lh.size);
		ck_assert_int_eq(kvmem_page_encode(hot, &t.g, &h, 1, kv, kv),
				 0);
		free(kv);
	}
	page = (uint8_t *)gt_page(&t, t.slot[1][last]);
	memcpy(page, hot, KVMEM_PAGE_HDR_BYTES);
	free(hot);
	snprintf(cmd, sizeof(cmd), "seq %u 1", t.r.w.session);
	admin(&p, "scrub now %s", cmd);
	ck_assert_msg(!memcmp(page, t.ref[1][last], l.size),
		      "the header was not put back");
	checked_at(&p, cap - 1, 1);

	/* Page 0 with the header of a page of one token less, valid in
	 * itself: the kernel would put back the last token's rows as
	 * padding. It is the seal record's page, checked in a copy. */
	{
		const size_t vals = (size_t)t.g.tokens_per_page * t.g.kv_heads *
				    t.g.head_dim;
		float *kv = kvmem_check_xmalloc(vals * sizeof(float));
		uint8_t *less = kvmem_check_xmalloc(l.size);
		struct kvmem_page_hdr h = {
			.seq = 1,
			.flags = KVMEM_HDR_SEALED,
			.ntokens = t.g.tokens_per_page - 1,
		};

		memset(kv, 0, vals * sizeof(float));
		ck_assert_int_eq(kvmem_page_encode(less, &t.g, &h, 0, kv, kv),
				 0);
		page = (uint8_t *)gt_page(&t, t.slot[1][0]);
		memcpy(page, less, KVMEM_PAGE_HDR_BYTES);
		free(less);
		free(kv);
	}
	/* Page 1: two header words swapped (each a codeword, the header's
	 * check fails) and a bit of a third flipped: the kernel stores
	 * nothing, the copy's walk corrects the flip, counted once. */
	{
		uint8_t w[3];

		page = (uint8_t *)gt_page(&t, t.slot[1][1]);
		for (i = 0;
		     i < 40 && !memcmp(page + 3 * i, page + 3 * i + 3, 3); i++)
			;
		ck_assert_uint_lt(i, 40);
		memcpy(w, page + 3 * i, 3);
		memcpy(page + 3 * i, page + 3 * i + 3, 3);
		memcpy(page + 3 * i + 3, w, 3);
		page[3 * ((i + 5) % 40)] ^= 0x01;
	}
	admin(&p, "scrub now %s", cmd);
	ck_assert_uint_eq(kvmemd_json_u64(reply, "ce"), 1);
	checked_at(&p, 2 * cap - 3, 3);
	for (i = 0; i < 2; i++)
		ck_assert_msg(
			!memcmp(gt_page(&t, t.slot[1][i]), t.ref[1][i], l.size),
			"page %u is not the page sealed", i);
	/* Every page, the last among them, back in host memory as sealed. */
	ck_assert_int_ge(gt_acquire(&t, 1, 0, &on_gpu), 0);
	ck_assert_uint_eq(on_gpu, 0);
	gt_free(&t);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

/* The GPU pool's pinned host memory and unpinned sessions, once kvmemd
 * counts @pinned bytes (it frees a session's after seeing the hang-up). */
static void pinned_at(const struct kvmemd_proc *p, uint64_t pinned,
		      uint64_t unpinned)
{
	int i;

	for (i = 0; i < 500; i++) {
		admin(p, "status");
		if (kvmemd_json_after(reply, "\"gpu_pool\"", "pinned_bytes") ==
		    pinned)
			break;
		usleep(10000);
	}
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"gpu_pool\"", "pinned_bytes"),
		pinned);
	ck_assert_uint_eq(
		kvmemd_json_after(reply, "\"gpu_pool\"", "unpinned_sessions"),
		unpinned);
}

/*
 * Pinned host memory (pool.gpu_pinned_bytes): a GPU-tier session's memory
 * is registered with the driver while the limit allows, given back when
 * the session ends; one over the limit, or one the driver will not lock,
 * runs unpinned and is counted. Sessions without the tier pin nothing, and
 * the stand-in (no driver) never pins.
 */
START_TEST(test_gpu_tier_pinned)
{
	struct kvmem_hello h = kvmemd_hello(1u << 20);
	struct kvmemd_proc p;
	struct kvmemd_raw r;
	struct gt t, u;

	if (start_fake(&p, NULL, "gpu_pinned_bytes = 3M\n"))
		return;
	gt_attach(&t, &p, 1u << 20, 2);
	pinned_at(&p, t.r.w.map_bytes, 0);
	/* A second one passes the 3 MiB: unpinned, served all the same. */
	gt_attach(&u, &p, 2u << 20, 2);
	pinned_at(&p, t.r.w.map_bytes, 1);
	gt_fill(&u, 1, 4, 8);
	ck_assert_int_eq(gt_acquire(&u, 1, 1, NULL), 4);
	gt_free(&u);
	/* No tier, no pinning. */
	h.gpu_mib = 2;
	h.features &= ~KVMEM_FEAT_GPU_TIER;
	ck_assert_int_eq(kvmemd_raw_attach(&r, &p, &h, sizeof(h)), 0);
	pinned_at(&p, t.r.w.map_bytes, 1);
	kvmemd_raw_detach(&r);
	gt_free(&t);
	pinned_at(&p, 0, 1);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);

	/* A driver that will not lock memory. */
	if (start_fake(&p, "FAKECUDA_NO_LOCK=1", NULL))
		return;
	gt_attach(&t, &p, 1u << 20, 2);
	pinned_at(&p, 0, 1);
	gt_fill(&t, 1, 4, 9);
	ck_assert_int_eq(gt_acquire(&t, 1, 1, NULL), 4);
	gt_free(&t);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);

	start_standin(&p, NULL);
	gt_attach(&t, &p, 1u << 20, 2);
	pinned_at(&p, 0, 0);
	gt_free(&t);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

KVMEM_SUITE(gpu_tier)
{
	Suite *s = suite_create("gpu_tier");
	TCase *tc = tcase_create("standin");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_gpu_tier_moves);
	tcase_add_test(tc, test_gpu_tier_not_asked);
	tcase_add_test(tc, test_gpu_tier_flips_on_the_gpu);
	tcase_add_test(tc, test_gpu_tier_pressure);
	tcase_add_test(tc, test_gpu_tier_watermarks);
	tcase_add_test(tc, test_gpu_tier_heat);
	tcase_add_test(tc, test_gpu_tier_make_room);
	tcase_add_test(tc, test_gpu_tier_full_of_acquired);
	tcase_add_test(tc, test_gpu_tier_moves_take_turns);
	tcase_add_test(tc, test_gpu_tier_scrub);
	tcase_add_test(tc, test_gpu_tier_client_killed);
	tcase_add_test(tc, test_gpu_tier_long_sequence);
	tcase_add_test(tc, test_gpu_tier_prefetch);
	tcase_add_test(tc, test_gpu_tier_cuda_backend);
	tcase_add_test(tc, test_gpu_tier_cuda_checks);
	tcase_add_test(tc, test_gpu_tier_inject_while_checked);
	tcase_add_test(tc, test_gpu_tier_scrub_now_while_checked);
	tcase_add_test(tc, test_gpu_tier_scrub_stopped_while_shared);
	tcase_add_test(tc, test_gpu_tier_cuda_hostile_header);
	tcase_add_test(tc, test_gpu_tier_pinned);
	suite_add_tcase(s, tc);
	return s;
}
