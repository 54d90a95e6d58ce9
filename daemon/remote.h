/* SPDX-License-Identifier: MIT */
/*
 * remote.h - the shared tier: published prefixes in a store that the
 * kvmemd of many machines share, every read checked end to end
 *
 * remote.c runs the tier: what the event loop asks of it (a publish to
 * push, a PREFIX_FETCH to answer, the admin socket's "remote"), the
 * thread that talks to the store, and what comes back. remote-record.c
 * lays out and checks a block's record; a store is a backend behind
 * struct kvmemd_remote_ops (remote-redis.c: a Redis Cluster).
 *
 * Included by remote.c, remote-record.c, remote-redis.c, share.c (what
 * is published goes out, PREFIX_FETCH asks), prefix-disk.c (whose blocks
 * on the backing store are such records), server.c, admin.c and main.c. remote.c knows no session: share.c turns an op into a fetch,
 * and its answer into the op's completion.
 */
#ifndef KVMEMD_REMOTE_H
#define KVMEMD_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "kvmem/uapi.h"
#include "kvmemd.h"

struct jw;
struct kvmemd_prefix_block;
struct remote_job;

/* ---- remote-record.c: a block's record --------------------------------- */

#define KVMEMD_REMOTE_MAGIC 0x524d564bu /* "KVMR" */
#define KVMEMD_REMOTE_VERSION 1

/*
 * A record: this header (little-endian), then a seal per layer (what the
 * page's header said when it was sealed), then the block's pages as kvmemd
 * keeps them, each with its code words and CRC. 128 bytes.
 */
struct kvmemd_remote_hdr {
	uint32_t magic; /* KVMEMD_REMOTE_MAGIC */
	uint16_t version; /* KVMEMD_REMOTE_VERSION */
	uint8_t kind; /* enum kvmem_slot_kind of the pages */
	uint8_t format, codec; /* of the pages, as their layout says */
	uint8_t resv0[7]; /* 0 */
	uint64_t tenant; /* as prefix.h says */
	uint64_t fingerprint; /* kvmemd_remote_fingerprint() */
	uint8_t hash[KVMEM_PREFIX_KEY_BYTES]; /* the block's key */
	uint8_t parent[KVMEM_PREFIX_KEY_BYTES]; /* the block before's; 0s */
	uint32_t token_start, ntokens, layers, page_bytes;
	uint64_t payload_len; /* seals and pages */
	uint32_t payload_crc; /* CRC-32C of them */
	uint32_t hcrc; /* CRC-32C of this header with hcrc 0 */
};

struct kvmemd_remote_seal {
	uint32_t crc, hdr_flags;
	uint64_t generation;
};

/*
 * kvmemd_remote_fingerprint() - names everything that makes the bytes of
 * a block's pages what they are, but its tokens: the record version, the
 * whole geometry (format, codec, scales, page tokens, sinks...), the slot
 * kind and page size. Blocks of two fingerprints never meet.
 */
uint64_t kvmemd_remote_fingerprint(const struct kvmem_geometry *g, int kind,
				   uint32_t page_bytes);

/* The store's key of a block: "kvmem:1:u1000:<fingerprint>:{<hash>}".
 * The hash tag spreads blocks over a cluster's nodes; everything of one
 * tenant starts "kvmem:1:u1000:" (a group's "kvmem:1:g2000:"), the
 * pattern a tenant's ACL user is given. */
#define KVMEMD_REMOTE_KEY_LEN 128
int kvmemd_remote_key(char *buf, size_t len, uint64_t tenant,
		      uint64_t fingerprint, const uint8_t *hash);

/* The bytes of the record of a block of @layers pages of @page_bytes. */
size_t kvmemd_remote_record_len(uint32_t layers, uint32_t page_bytes);

/*
 * kvmemd_remote_record() - the record of @b, under @parent (the key of
 * the block before it; NULL for the first), in a buffer of *@len bytes
 * to free(). The CRCs are left for kvmemd_remote_record_seal(), which
 * runs off the event loop. NULL when out of memory.
 */
uint8_t *kvmemd_remote_record(const struct kvmemd_prefix_block *b,
			      const uint8_t *parent, size_t *len);
/* The same into @rec, kvmemd_remote_record_len() bytes of the caller's. */
void kvmemd_remote_record_fill(const struct kvmemd_prefix_block *b,
			       const uint8_t *parent, uint8_t *rec);
/* The seals and pages of @rec, a record of @b's shape that passed
 * kvmemd_remote_record_check(), into @b, staged: all its layers. */
void kvmemd_remote_record_unpack(const uint8_t *rec,
				 struct kvmemd_prefix_block *b);
void kvmemd_remote_record_seal(uint8_t *rec, size_t len);

/* What a fetch expects of the record of one block. */
struct kvmemd_remote_want {
	const struct kvmem_geometry *g;
	uint64_t tenant, fingerprint;
	const uint8_t *hash, *parent;
	uint32_t token_start, ntokens, page_bytes;
	uint8_t kind;
};

/* Why a record was refused, each counted (KVMEMD_REMOTE_GOOD: it was not). */
enum kvmemd_remote_verdict {
	KVMEMD_REMOTE_GOOD,
	KVMEMD_REMOTE_REPAIRED, /* good once its pages were corrected */
	KVMEMD_REMOTE_BAD_HEADER, /* size, magic, version, header CRC */
	KVMEMD_REMOTE_BAD_TENANT, /* another tenant's record */
	KVMEMD_REMOTE_BAD_SHAPE, /* fingerprint, block, kind, sizes */
	KVMEMD_REMOTE_BAD_CHAIN, /* another key's or parent's record */
	/* a page past correcting (a word no code corrects, its CRC, a seal
	 * that is not its header's), in a payload that changed since it
	 * was written (its CRC) */
	KVMEMD_REMOTE_BAD_PAYLOAD,
	/* the same in a payload as it was written: pushed so */
	KVMEMD_REMOTE_BAD_PAGE,
	KVMEMD_REMOTE_VERDICTS,
};

extern const char *const kvmemd_remote_verdict_names[KVMEMD_REMOTE_VERDICTS];

/*
 * kvmemd_remote_record_check() - is @rec, @len bytes read under the key of
 * @w, the record of the block @w names?
 *
 * Checked in order, so that nothing is read before what says it is
 * there: the header (size, magic, version, its CRC), then what it names
 * against @w (tenant, shape, key and parent), then each page: its code
 * words, corrected in place where they need it (all of it scrubbed when
 * the payload CRC does not match), its CRC, its header against its seal.
 * A record that needed correcting gets its payload CRC again, to be
 * written back.
 *
 * Return: the verdict; the words of its pages (headers, scales and
 * values together) corrected and past correcting are added to @counts.
 */
enum kvmemd_remote_verdict
kvmemd_remote_record_check(uint8_t *rec, size_t len,
			   const struct kvmemd_remote_want *w,
			   struct kvmem_ecc_counts *counts);

/* ---- a backend -------------------------------------------------------- */

/* One request of a batch, as struct rcluster_req (rcluster.h) says. */
enum kvmemd_remote_op {
	KVMEMD_REMOTE_GET,
	KVMEMD_REMOTE_SETNX, /* write once */
	KVMEMD_REMOTE_SETXX, /* write back over, keeping the TTL */
	KVMEMD_REMOTE_EXISTS,
	KVMEMD_REMOTE_DEL,
};

struct kvmemd_remote_req {
	enum kvmemd_remote_op op;
	const char *key;
	const void *val;
	size_t vlen;
	uint32_t ttl_s; /* SETNX: expires after; 0: never */
	/* GET: the most bytes the value may have; one longer is read as
	 * max + 1 bytes, the rest left in the store (0: no limit) */
	size_t max;
	/* 0 (hit, stored, exists, deleted), -ENOENT (miss), -EEXIST (SETNX
	 * found one), or why it failed */
	int status;
	void *data; /* GET: what was there, to free() */
	size_t dlen;
};

/*
 * A backend's ops, each run on the tier's thread only.
 *
 * open:     a connection as @user (NULL: the store's default) with
 *           @password, to the store that @seeds names; 0 or a negative
 *           errno with a sentence in @why
 * exec:     run @n requests, each getting its own status: 0, or a
 *           negative errno when none could be tried
 * describe: what the connection knows of the store, a line per node,
 *           into @buf
 * stats:    its counters: requests, redirects, retries, timeouts,
 *           errors, bytes each way
 * close:    the connection goes
 */
struct kvmemd_remote_stats {
	uint64_t requests, redirects, retries, timeouts, errors;
	uint64_t bytes_out, bytes_in, refreshes;
	uint32_t masters, connected;
};

struct kvmemd_remote_ops {
	const char *name;
	int (*open)(const char *seeds, const char *user, const char *password,
		    int timeout_ms, int retries, void **ctx, char *why,
		    size_t len);
	int (*exec)(void *ctx, struct kvmemd_remote_req *reqs, size_t n);
	int (*describe)(void *ctx, char *buf, size_t len);
	void (*stats)(void *ctx, struct kvmemd_remote_stats *out);
	void (*close)(void *ctx);
};

extern const struct kvmemd_remote_ops kvmemd_remote_redis;

/* ---- remote.c: the tier ----------------------------------------------- */

/*
 * kvmemd_remote_init() - the shared tier as remote.* of @d's configuration
 * says, or none when remote.seeds is empty; its thread started, the
 * credentials read (remote.credentials). Nothing is connected yet: a
 * store that does not answer is said in status, never a reason not to
 * start. Return: 0, or a negative errno (logged) for a credentials file
 * that is unsafe or does not parse, or no thread.
 */
int kvmemd_remote_init(struct kvmemd *d);
/* Would kvmemd_remote_init() take @c's remote.* (kvmemd -n)? 0, or why
 * not in @err. */
int kvmemd_remote_check(const struct kvmemd_config *c, char *err, size_t len);
/* The eventfd the loop watches for what the thread finished. */
int kvmemd_remote_fd(const struct kvmemd *d);
/* Take what the thread finished: blocks fetched kept, ops completed. */
void kvmemd_remote_reap(struct kvmemd *d);
/* At stop: the thread ends, what it was doing is dropped (a fetch's op
 * was cancelled with its session by then). */
void kvmemd_remote_free(struct kvmemd *d);

/*
 * kvmemd_remote_push() - @b, just kept as the tenant's block, goes to the
 * shared tier in the background (remote.publish), under @parent (the key
 * of the block before it, zeros for block 0; NULL when it is not known:
 * then @b is not pushed, and counted as unchained). Nothing happens past
 * remote.queue_bytes: counted as dropped.
 */
void kvmemd_remote_push(struct kvmemd *d, const struct kvmemd_prefix_block *b,
			const uint8_t *parent);

/* What a fetch asks for: @n blocks of @tenant, of sessions of geometry
 * @g (digest @digest) whose slots have layouts @layout[kind], named by
 * @hash[1..n], @hash[0] the key of the block before the first; block i
 * holds @ntokens[i] tokens from @start[i]. */
struct kvmemd_remote_fetch {
	uint64_t tenant;
	struct kvmem_geometry g;
	uint64_t digest;
	struct kvmem_page_layout layout[2];
	uint32_t n;
	const uint8_t (*hash)[KVMEM_PREFIX_KEY_BYTES];
	const uint32_t *start, *ntokens;
	/* on the loop, once the leading blocks that passed are kept: how
	 * many, or why not even the first (-EHOSTUNREACH: the store did not
	 * answer, -EACCES: it refused the tenant's user, or an admission's
	 * error) */
	void (*done)(void *ctx, int res);
	void *ctx;
};

/*
 * kvmemd_remote_fetch() - read @f's blocks from the shared tier in one
 * batch, check each, keep the leading ones that pass as published blocks
 * of the tenant, and then call @f->done; @f is copied
 *
 * Return: 0 with the job in *@out (kvmemd_remote_forget() takes it back
 * from the caller), -EOPNOTSUPP without a shared tier, -EINVAL for more
 * than KVMEM_PREFIX_FETCH_MAX blocks, -EAGAIN when its queue is full,
 * -ENOMEM.
 */
int kvmemd_remote_fetch(struct kvmemd *d, const struct kvmemd_remote_fetch *f,
			struct remote_job **out);
/* Whoever waits for @job is gone: the blocks it brings back are kept all
 * the same, and its done is not called. */
void kvmemd_remote_forget(void *job);

/* The admin socket's "remote": configuration, state, counters. */
void kvmemd_remote_status(struct kvmemd *d, struct jw *w);

#endif /* KVMEMD_REMOTE_H */
