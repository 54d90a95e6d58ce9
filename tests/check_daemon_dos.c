/*
 * check_daemon_dos.c - kvmemd stays up for everyone: clients that make the
 * daemon work for them, hold what it gives them, or just never speak
 *
 * Each test starts its own daemon and pits an abusive client against a
 * well-behaved one (or against kvmemd's own accounting). No timing is
 * asserted: where "the daemon was not held up" is the claim, the test
 * shows it by order (the polite client's answer came before the abuser's
 * work was done) or by counts, and the waits only bound a hang.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "kvmem/kvmem.h"
#include "kvmem_check.h"
#include "kvmemd_harness.h"
#include "rng.h"

#define MIB (1ull << 20)

static char reply[1 << 16];

#define admin(p, ...) kvmemd_admin_ok(p, reply, sizeof(reply), __VA_ARGS__)

/* Queue @e on @r without publishing it. */
static void raw_queue(struct kvmemd_raw *r, const struct kvmem_sqe *e)
{
	r->sqes[r->sq_tail++ & (r->w.sq_entries - 1)] = *e;
}

static void raw_publish(struct kvmemd_raw *r)
{
	__atomic_store_n(&r->ring->sq_tail, r->sq_tail, __ATOMIC_RELEASE);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	eventfd_write(r->sq_efd, 1);
}

/* Completions @r has been sent since its CQ head was last moved. */
static uint32_t raw_posted(const struct kvmemd_raw *r)
{
	return __atomic_load_n(&r->ring->cq_tail, __ATOMIC_ACQUIRE) -
	       r->cq_head;
}

/* Wait (bounded) until @r has @n completions waiting. */
static void raw_wait_posted(const struct kvmemd_raw *r, uint32_t n)
{
	int i;

	for (i = 0; i < 600000 && raw_posted(r) < n; i++)
		usleep(100);
	ck_assert_uint_ge(raw_posted(r), n);
}

/* ---- verify-on-seal is charged to the session that seals --------------- */

#define FLOOD_SEALS 64

/*
 * Regression: one client looping PAGE_SEAL -> PAGE_FREE -> PAGE_ALLOC with
 * pages of 5 MiB made verify-on-seal scrub every page on the event loop
 * before anything else was looked at: other clients' NOPs waited for the
 * whole batch. The checks now run a bounded step a pass, and the sealing
 * session's ring waits for its own: a NOP from another session, sent once
 * the flood is under way, is answered long before the flood is through.
 */
START_TEST(test_dos_seal_flood_others_served)
{
	struct kvmem_hello big = kvmemd_hello(24 * MIB),
			   small = kvmemd_hello(0);
	struct kvmem_page_hdr hdr = { .seq = 1, .flags = KVMEM_HDR_SEALED };
	struct kvmem_page_layout l;
	struct kvmem_sqe e;
	struct kvmem_cqe cq;
	struct kvmemd_proc p;
	struct kvmemd_raw a, b;
	struct kvmem_rng rng;
	float *k, *v;
	uint32_t slot, done, i;
	size_t n;

	/* int8 + secded72, 32 heads of 128, 512 tokens: 5 MiB pages. */
	big.geometry.kv_heads = 32;
	big.geometry.head_dim = 128;
	big.geometry.tokens_per_page = 512;
	big.geometry.sink_tokens = 0;
	big.geometry.format = KVMEM_FMT_INT8;
	big.geometry.codec = KVMEM_CODEC_SECDED72;
	big.sq_entries = 256;
	ck_assert_int_eq(kvmem_page_layout(&big.geometry, 0, &l), 0);
	ck_assert_uint_gt(l.size, 4 * MIB);

	kvmemd_start(&p, "[scrub]\nrate = 0\n", NULL);
	ck_assert_int_eq(kvmemd_raw_attach(&a, &p, &big, sizeof(big)), 0);
	ck_assert_int_eq(kvmemd_raw_attach(&b, &p, &small, sizeof(small)), 0);

	memset(&e, 0, sizeof(e));
	e.opcode = KVMEM_OP_SEQ_CREATE;
	ck_assert_int_eq(kvmemd_raw_op(&a, &e).res, 1);
	e.opcode = KVMEM_OP_PAGE_ALLOC;
	e.len = 1;
	cq = kvmemd_raw_op(&a, &e);
	ck_assert_int_eq(cq.res, 1);
	memcpy(&slot, a.buf, sizeof(slot));

	/* One real page, sealed, freed and taken again, over and over. */
	n = (size_t)512 * 32 * 128;
	k = kvmem_check_xmalloc(n * sizeof(float));
	v = kvmem_check_xmalloc(n * sizeof(float));
	kvmem_rng_seed(&rng, 5);
	for (i = 0; i < n; i++) {
		k[i] = kvmem_check_rnd_value(&rng, 1.0);
		v[i] = kvmem_check_rnd_value(&rng, 1.0);
	}
	hdr.ntokens = 512;
	ck_assert_int_eq(kvmem_page_encode(a.arena + (size_t)slot * 4096,
					   &big.geometry, &hdr, 0, k, v),
			 0);
	free(k);
	free(v);
	for (i = 0; i < FLOOD_SEALS; i++) {
		memset(&e, 0, sizeof(e));
		e.opcode = KVMEM_OP_PAGE_SEAL;
		e.slot = slot;
		e.seq = 1;
		e.ntokens = 512;
		e.user_data = 3 * i;
		raw_queue(&a, &e);
		memset(&e, 0, sizeof(e));
		e.opcode = KVMEM_OP_PAGE_FREE;
		e.slot = slot;
		e.seq = 1;
		e.user_data = 3 * i + 1;
		raw_queue(&a, &e);
		memset(&e, 0, sizeof(e));
		e.opcode = KVMEM_OP_PAGE_ALLOC;
		e.len = 1;
		e.user_data = 3 * i + 2;
		raw_queue(&a, &e);
	}
	raw_publish(&a);
	/* The flood is under way: the daemon took some of it. */
	for (i = 0; i < 600000 &&
		    __atomic_load_n(&a.ring->sq_head, __ATOMIC_ACQUIRE) == 0;
	     i++)
		usleep(100);
	memset(&e, 0, sizeof(e));
	e.opcode = KVMEM_OP_NOP;
	e.user_data = 77;
	cq = kvmemd_raw_op(&b, &e);
	ck_assert_int_eq(cq.res, 0);
	done = raw_posted(&a);
	ck_assert_msg(done < 3 * FLOOD_SEALS / 2,
		      "a NOP of another session waited for %u of the %u ops "
		      "of a verify-on-seal flood",
		      done, 3 * FLOOD_SEALS);

	/* The flood itself is served in full, every op right. */
	raw_wait_posted(&a, 3 * FLOOD_SEALS);
	for (i = 0; i < 3 * FLOOD_SEALS; i++) {
		cq = a.cqes[a.cq_head++ & (a.w.cq_entries - 1)];
		ck_assert_uint_eq(cq.user_data, i);
		ck_assert_int_eq(cq.res, i % 3 == 2 ? 1 : 0);
	}
	admin(&p, "errors");
	kvmemd_raw_detach(&a);
	kvmemd_raw_detach(&b);
	ck_assert_int_eq(kvmemd_stop(&p), 0);
	kvmemd_cleanup(&p);
}
END_TEST

KVMEM_SUITE(daemon_dos)
{
	Suite *s = suite_create("daemon_dos");
	TCase *tc = tcase_create("dos");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_dos_seal_flood_others_served);
	suite_add_tcase(s, tc);
	return s;
}
