/* SPDX-License-Identifier: MIT */
/*
 * store.h - the backing store: a file or block device that holds pages
 * which left memory (the cold tier), and the I/O engine that moves them
 *
 * On disk, in units of KVMEMD_STORE_UNIT (4 KiB) bytes:
 *
 *   unit 0        struct kvmemd_store_hdr, zero-padded to the unit
 *   unit 1 ...    nunits data units: a page occupies consecutive units
 *
 * Every multi-byte field of the header is little-endian. The header is
 * written once, when the store is formatted, and again at each start with
 * generation + 1 (after an fsync). Nothing else in it changes while the
 * daemon runs, so a daemon killed at any moment leaves a valid header.
 *
 * Pages belong to sessions, or are published prefix blocks (prefix-disk.c).
 * At each start every data unit is free but those of the pages of sessions
 * kept across the restart, which the daemon's state records name, and
 * those of the blocks the index of blocks on the store names
 * (kvmemd_store_claim()). The allocator lives in memory only.
 *
 * All I/O is O_DIRECT from buffers the store owns (registered with
 * io_uring), so the page cache never holds a page, and never blocks the
 * caller: kvmemd_store_io_submit() queues, kvmemd_store_io_reap() runs the
 * completions that arrived. The event loop watches kvmemd_store_io_fd().
 * Everything here is called from the event loop thread only.
 *
 * Included by store.c, tier.c (which moves pages to and from the store),
 * prefix-disk.c (which keeps published blocks there),
 * config.c (the store.* keys) and the tests of the store.
 */
#ifndef KVMEMD_STORE_H
#define KVMEMD_STORE_H

#include <stdint.h>

#define KVMEMD_STORE_UNIT 4096u
#define KVMEMD_STORE_MAGIC "KVMSTORE" /* 8 bytes, no NUL */
#define KVMEMD_STORE_VERSION 1

/* The header as it is on disk. */
struct kvmemd_store_hdr {
	char magic[8]; /* KVMEMD_STORE_MAGIC */
	uint32_t version; /* KVMEMD_STORE_VERSION */
	uint32_t unit; /* KVMEMD_STORE_UNIT */
	uint64_t size; /* bytes the store was formatted for */
	uint64_t nunits; /* data units after the header's */
	uint8_t uuid[16]; /* random, at format time */
	uint64_t digest; /* of version, unit, size, nunits (geometry) */
	uint64_t generation; /* starts, since the format */
	uint64_t formatted; /* Unix time of the format */
	uint32_t resv[13]; /* 0 */
	uint32_t crc; /* CRC-32C of the bytes before it */
};

_Static_assert(sizeof(struct kvmemd_store_hdr) == 128, "store header size");

enum kvmemd_store_engine {
	KVMEMD_ENGINE_AUTO = 0, /* io_uring, else threads with a warning */
	KVMEMD_ENGINE_URING = 1, /* io_uring or fail */
	KVMEMD_ENGINE_THREADS = 2, /* pread/pwrite on a thread pool */
};

struct kvmemd_store_cfg {
	const char *path; /* regular file (created) or block device */
	uint64_t size; /* bytes; 0 for a block device: all of it */
	int reformat; /* format over a store that does not match */
	uint32_t queue_depth; /* I/Os in flight at most, 1..1024 */
	uint32_t io_bytes; /* largest I/O, a multiple of the unit */
	int engine; /* enum kvmemd_store_engine */
};

struct kvmemd_store;

/*
 * kvmemd_store_open() - open (creating or formatting if need be) a store
 * @cfg: what to open
 * @out: receives the store
 * @err, @errlen: receives why it failed, e.g. "/var/lib/kvmem/store: holds
 *                a store of 1073741824 bytes, the config says 2147483648
 *                (set store.reformat = yes to format it, losing nothing
 *                kvmemd still needs)"
 *
 * A missing file is created and given @cfg->size bytes (fallocate); a file
 * whose first unit is all zero is formatted too. A file whose header is
 * corrupt, of another version or of another size, and a block device that
 * holds no store header, are refused with -EEXIST (kvmemd does not write
 * over what it did not make) unless @cfg->reformat, which formats them
 * anew. O_DIRECT is required: a file system without it is
 * refused with -EINVAL.
 *
 * Return: 0 or a negative errno.
 */
int kvmemd_store_open(const struct kvmemd_store_cfg *cfg,
		      struct kvmemd_store **out, char *err, size_t errlen);
/* Wait for the I/O in flight (its completions run), then close. */
void kvmemd_store_close(struct kvmemd_store *st);

/*
 * kvmemd_store_check() - would kvmemd_store_open() of @cfg succeed, as far
 * as can be told without writing: the path, the size, the header. It
 * opens the store to read only and formats nothing; a store another
 * daemon holds is fine (kvmemd -n runs beside the daemon it checks for).
 * Return: 0 or the negative errno kvmemd_store_open() would return, with
 * why in @err.
 */
int kvmemd_store_check(const struct kvmemd_store_cfg *cfg, char *err,
		       size_t errlen);

/* What to do with a store, from its unit 0. */
enum {
	KVMEMD_STORE_KEEP = 0, /* a store of this size: used as it is */
	KVMEMD_STORE_FORMAT = 1, /* unused, or store.reformat says so */
};

/*
 * kvmemd_store_judge() - what kvmemd does with a store of @size bytes whose
 * unit 0 holds @unit0 (KVMEMD_STORE_UNIT bytes, untrusted): a file or
 * device it did not make is never written over without @reformat
 * @is_file: a regular file (all zeros counts as unused); else a device
 * @hdr: receives the header when there is one
 * @why: what @unit0 held when it is refused or formatted over, else ""
 *
 * Return: KVMEMD_STORE_KEEP, KVMEMD_STORE_FORMAT, or -EEXIST.
 */
int kvmemd_store_judge(const uint8_t *unit0, uint64_t size, int is_file,
		       int reformat, struct kvmemd_store_hdr *hdr, char *why,
		       size_t len);

/* ---- the allocator ---------------------------------------------------- */

/* @units consecutive free data units: 0 and @unit set, or -ENOSPC. */
int kvmemd_store_alloc(struct kvmemd_store *st, uint32_t units, uint64_t *unit);
/* An allocation failed, and nothing was freed since. */
int kvmemd_store_full(const struct kvmemd_store *st);
/* Units @unit.. in use from now on (a page kept across a restart): 0, or
 * -EINVAL when they are not all free and inside the store. */
int kvmemd_store_claim(struct kvmemd_store *st, uint64_t unit, uint32_t units);
void kvmemd_store_free(struct kvmemd_store *st, uint64_t unit, uint32_t units);

/* ---- I/O -------------------------------------------------------------- */

/*
 * kvmemd_store_pio() - move @len bytes (a multiple of the unit) between
 * @buf (aligned to the unit) and the data units from @unit, and wait
 * @op: KVMEMD_IO_READ or KVMEMD_IO_WRITE
 *
 * Blocks: for a worker thread (any thread: it touches nothing the loop
 * changes), or the loop before it serves. Units out of the store are
 * refused. Return: 0, -EIO for a short transfer, or a negative errno.
 */
int kvmemd_store_pio(struct kvmemd_store *st, int op, uint64_t unit,
		     void *buf, size_t len);
/* What was written is on the medium (fdatasync): 0 or a negative errno.
 * Blocks, as kvmemd_store_pio(). */
int kvmemd_store_sync(struct kvmemd_store *st);

enum kvmemd_io_op {
	KVMEMD_IO_READ,
	KVMEMD_IO_WRITE,
};

/*
 * One I/O. kvmemd_store_io_get() hands it out with a buffer; the caller
 * fills in the fields above the line (and the buffer, for a write) and
 * queues it. done() runs from kvmemd_store_io_reap() with @res: the bytes
 * transferred, or a negative errno; anything but @len is a failure the
 * caller handles (a short write, a short read). The io and its buffer go
 * back to the store when done() returns.
 */
struct kvmemd_io {
	enum kvmemd_io_op op;
	uint64_t unit; /* first data unit */
	uint32_t len; /* bytes, a multiple of the unit, <= io_bytes */
	void (*done)(struct kvmemd_io *io, int res);
	void *priv;
	/* ---- the store's ---- */
	uint8_t *buf; /* io_bytes, aligned to the unit */
	uint32_t index; /* of the buffer */
	struct kvmemd_io *next;
};

/* An idle io and its buffer, or NULL when queue_depth are in use. */
struct kvmemd_io *kvmemd_store_io_get(struct kvmemd_store *st);
/* Give back an io from kvmemd_store_io_get() that was not queued. */
void kvmemd_store_io_put(struct kvmemd_store *st, struct kvmemd_io *io);
/* Queue @io; it is submitted by the next kvmemd_store_io_submit(). */
void kvmemd_store_io_queue(struct kvmemd_store *st, struct kvmemd_io *io);
/* Submit what was queued, in one batch. Never blocks. */
void kvmemd_store_io_submit(struct kvmemd_store *st);
/* Readable (an eventfd) when completions wait. */
int kvmemd_store_io_fd(const struct kvmemd_store *st);
/* Run done() of every completion that arrived. Return: how many. */
unsigned int kvmemd_store_io_reap(struct kvmemd_store *st);

struct kvmemd_store_stats {
	const char *path;
	const char *engine; /* "io_uring" or "threads" */
	uint8_t uuid[16];
	uint64_t generation;
	uint64_t size, nunits, used_units;
	uint32_t unit; /* bytes, as the header has it */
	uint32_t queue_depth, io_bytes, inflight;
	uint64_t reads, writes; /* completed without error */
	uint64_t read_bytes, write_bytes;
	uint64_t read_errors, write_errors; /* errno or short */
	uint64_t enospc, short_ios; /* of which ENOSPC, short */
};

void kvmemd_store_stats(const struct kvmemd_store *st,
			struct kvmemd_store_stats *out);

#endif /* KVMEMD_STORE_H */
