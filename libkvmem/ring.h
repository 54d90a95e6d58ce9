/* SPDX-License-Identifier: MIT */
/*
 * ring.h - memory ordering for the shared rings (kvmem/uapi.h), used by both
 * the client library and kvmemd (through kvmem-private.h)
 *
 * Each ring index has one writer. The writer fills entries, then publishes
 * the index with a release store; the reader loads the index with an
 * acquire load before it touches the entries the index covers. The doorbell
 * flags (NEED_WAKEUP, CQ_WAIT) need a full barrier between "publish" and
 * "look at the other side's flag", on both sides, or each could miss the
 * other (store-load reordering is the one x86 does).
 */
#ifndef KVMEM_RING_H
#define KVMEM_RING_H

#include <stdint.h>

static inline uint32_t kvmem__load_acquire(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline void kvmem__store_release(uint32_t *p, uint32_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* A field only its writer changes, read by the other side as a hint. */
static inline uint32_t kvmem__load_relaxed(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static inline void kvmem__smp_mb(void)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

#endif /* KVMEM_RING_H */
