/* SPDX-License-Identifier: MIT */
/*
 * check_store.c - kvmemd's backing store: format and header, refusals, the
 * allocator, and I/O through both engines
 *
 * Expected values come from store.h's contract, computed here: the header
 * is decoded byte by byte from a plain pread() of unit 0, its CRC and
 * digest recomputed; data read back through the store and through the
 * page cache is compared with what was written; the allocator is checked
 * against a bit-by-bit model. Every test that moves data runs once per
 * engine (the loop index into engines[]); io_uring's runs skip, saying so,
 * where the kernel has no io_uring.
 *
 * Stores go to a fresh directory under /tmp made before the test case runs
 * and removed after it, in the parent, whatever the tests did.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/loop.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "../daemon/kvmemd.h"
#include "../daemon/store.h"
#include "kvmem/crc32c.h"
#include "kvmem_check.h"
#include "rng.h"

#define UNIT 4096u
#define DEPTH 8u
#define IO_UNITS 4u
#define WAIT_MS 30000

static const struct {
	int engine;
	const char *name;
} engines[] = {
	{ KVMEMD_ENGINE_URING, "io_uring" },
	{ KVMEMD_ENGINE_THREADS, "threads" },
};

/* ---- files --------------------------------------------------------- */

static char tmpdir[64];

static void tmpdir_make(void)
{
	kvmem_check_tmpdir_make(tmpdir, sizeof(tmpdir), "store");
}

static void tmpdir_remove(void)
{
	kvmem_check_tmpdir_remove(tmpdir);
}

/* In each test's child: warnings and errors only, not every open. */
static void quiet_log(void)
{
	kvmemd_log_init(LOG_WARNING);
}

/* The path of @name (and @i) in tmpdir, into @path; the file is removed. */
static void tmp_path(char *path, size_t size, const char *name, int i)
{
	ck_assert_msg(tmpdir[0], "no temporary directory");
	snprintf(path, size, "%s/%s.%d", tmpdir, name, i);
	ck_assert_msg(!unlink(path) || errno == ENOENT, "unlink %s: %s", path,
		      strerror(errno));
}

static void pread_file(const char *path, void *buf, size_t len, off_t off)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
	ck_assert_int_eq(pread(fd, buf, len, off), (ssize_t)len);
	ck_assert_int_eq(close(fd), 0);
}

static void pwrite_file(const char *path, const void *buf, size_t len,
			off_t off)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);

	ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
	ck_assert_int_eq(pwrite(fd, buf, len, off), (ssize_t)len);
	ck_assert_int_eq(close(fd), 0);
}

static off_t file_size(const char *path)
{
	struct stat sb;

	ck_assert_msg(!stat(path, &sb), "stat %s: %s", path, strerror(errno));
	return sb.st_size;
}

/* ---- the header, decoded from its bytes ---------------------------- */

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
	return le32(p) | (uint64_t)le32(p + 4) << 32;
}

static void put_le32(uint8_t *p, uint32_t v)
{
	int i;

	for (i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> 8 * i);
}

/* Offsets in unit 0, from the struct's field sizes in store.h. */
enum {
	H_MAGIC = 0,
	H_VERSION = 8,
	H_UNIT = 12,
	H_SIZE = 16,
	H_NUNITS = 24,
	H_UUID = 32,
	H_DIGEST = 48,
	H_GENERATION = 56,
	H_FORMATTED = 64,
	H_RESV = 72,
	H_CRC = 124,
	H_END = 128,
};

/* FNV-1a 64 of version, unit, size and nunits, little-endian (store.c). */
static uint64_t expect_digest(uint32_t version, uint32_t unit, uint64_t size,
			      uint64_t nunits)
{
	uint8_t b[24];
	uint64_t x = 0xcbf29ce484222325ull;
	int i;

	for (i = 0; i < 4; i++) {
		b[i] = (uint8_t)(version >> 8 * i);
		b[4 + i] = (uint8_t)(unit >> 8 * i);
	}
	for (i = 0; i < 8; i++) {
		b[8 + i] = (uint8_t)(size >> 8 * i);
		b[16 + i] = (uint8_t)(nunits >> 8 * i);
	}
	for (i = 0; i < 24; i++) {
		x ^= b[i];
		x *= 0x100000001b3ull;
	}
	return x;
}

/* Make the CRC of unit 0 in @u0 right again after an edit. */
static void fix_crc(uint8_t *u0)
{
	put_le32(u0 + H_CRC, kvmem_crc32c(0, u0, H_CRC));
}

/* Unit 0 of @path holds a valid header for @size bytes; its uuid out. */
static void expect_header(const char *path, uint64_t size, uint64_t gen,
			  uint8_t uuid[16])
{
	uint8_t u0[UNIT];
	size_t i;

	pread_file(path, u0, sizeof(u0), 0);
	EXPECT_MEM(u0 + H_MAGIC, "KVMSTORE", 8, "%s magic", path);
	ck_assert_uint_eq(le32(u0 + H_VERSION), 1);
	ck_assert_uint_eq(le32(u0 + H_UNIT), UNIT);
	ck_assert_uint_eq(le64(u0 + H_SIZE), size);
	ck_assert_uint_eq(le64(u0 + H_NUNITS), size / UNIT - 1);
	ck_assert_uint_eq(le64(u0 + H_DIGEST),
			  expect_digest(1, UNIT, size, size / UNIT - 1));
	ck_assert_uint_eq(le64(u0 + H_GENERATION), gen);
	ck_assert_uint_eq(le32(u0 + H_CRC), kvmem_crc32c(0, u0, H_CRC));
	for (i = H_RESV; i < H_CRC; i++)
		EXPECT_EQ(u0[i], 0, "reserved byte %zu", i);
	for (i = H_END; i < UNIT; i++)
		EXPECT_EQ(u0[i], 0, "byte %zu of unit 0 after the header", i);
	/* A version 4 UUID: the version nibble and the RFC variant bits */
	ck_assert_uint_eq(u0[H_UUID + 6] >> 4, 4);
	ck_assert_uint_eq(u0[H_UUID + 8] >> 6, 2);
	memcpy(uuid, u0 + H_UUID, 16);
}

/* ---- opening ------------------------------------------------------- */

static struct kvmemd_store_cfg cfg_of(const char *path, uint64_t nunits,
				      int engine)
{
	return (struct kvmemd_store_cfg){
		.path = path,
		.size = (nunits + 1) * UNIT,
		.queue_depth = DEPTH,
		.io_bytes = IO_UNITS * UNIT,
		.engine = engine,
	};
}

static struct kvmemd_store *open_ok(const struct kvmemd_store_cfg *cfg)
{
	struct kvmemd_store *st = NULL;
	char err[1024] = "";
	int ret;

	ret = kvmemd_store_open(cfg, &st, err, sizeof(err));
	ck_assert_msg(ret == 0, "open %s: %d (%s): %s", cfg->path, ret,
		      strerror(-ret), err);
	ck_assert_ptr_nonnull(st);
	return st;
}

/* Open fails with @want and an error that contains each of @words. */
static void open_fails(const struct kvmemd_store_cfg *cfg, int want,
		       const char *const *words)
{
	struct kvmemd_store *st = NULL;
	char err[1024] = "";
	int ret;

	ret = kvmemd_store_open(cfg, &st, err, sizeof(err));
	ck_assert_msg(ret == want, "open %s: %d (%s), want %d (%s); %s",
		      cfg->path, ret, strerror(-ret), want, strerror(-want),
		      err);
	ck_assert_ptr_null(st);
	for (; *words; words++)
		ck_assert_msg(strstr(err, *words), "\"%s\" not in \"%s\"",
			      *words, err);
}

#define OPEN_FAILS(cfg, want, ...) \
	open_fails(cfg, want, (const char *const[]){ __VA_ARGS__, NULL })

static int uring_probe(void)
{
	struct io_uring ring;
	int ret;

	ret = io_uring_queue_init(1, &ring, 0);
	if (!ret)
		io_uring_queue_exit(&ring);
	return ret;
}

/* 1 to run @test with engine @e, 0 (saying so) when it must skip. */
static int engine_or_skip(const char *test, int e)
{
	int ret;

	if (engines[e].engine != KVMEMD_ENGINE_URING)
		return 1;
	ret = uring_probe();
	if (ret != -ENOSYS && ret != -EPERM)
		return 1;
	/* Check has no skip: say so loudly rather than pass in silence. */
	printf("SKIP: %s (io_uring): io_uring_queue_init: %s; the io_uring "
	       "engine was not tested\n",
	       test, strerror(-ret));
	fflush(stdout);
	return 0;
}

static struct kvmemd_store_stats stats_of(const struct kvmemd_store *st)
{
	struct kvmemd_store_stats s;

	kvmemd_store_stats(st, &s);
	return s;
}

/* Wait for the store's eventfd, then reap. Return: what reap ran. */
static unsigned int wait_reap(struct kvmemd_store *st)
{
	struct pollfd pfd = { .fd = kvmemd_store_io_fd(st), .events = POLLIN };
	int ret = poll(&pfd, 1, WAIT_MS);

	ck_assert_msg(ret == 1, "no completion in %d ms: poll %d (%s)", WAIT_MS,
		      ret, strerror(errno));
	return kvmemd_store_io_reap(st);
}

/* ---- I/O jobs -------------------------------------------------------- */

/* One I/O of @units units at @unit, and how it went. */
struct job {
	uint64_t unit;
	uint32_t units;
	int res;
	int ndone;
	struct batch *b;
};

/* Jobs run with up to the queue depth in flight. */
struct batch {
	struct kvmemd_store *st;
	enum kvmemd_io_op op;
	struct job *jobs;
	size_t njobs, next, ndone;
	uint8_t *image; /* written from, or read into (if not NULL) */
	uint32_t max_inflight;
};

static void job_done(struct kvmemd_io *io, int res)
{
	struct job *j = io->priv;

	j->res = res;
	j->ndone++;
	j->b->ndone++;
	if (io->op == KVMEMD_IO_READ && res > 0 && j->b->image)
		memcpy(j->b->image + j->unit * UNIT, io->buf, (size_t)res);
}

static void batch_run(struct batch *b)
{
	struct kvmemd_io *io;
	struct job *j;
	size_t i;

	b->next = b->ndone = 0;
	for (i = 0; i < b->njobs; i++) {
		b->jobs[i].ndone = 0;
		b->jobs[i].b = b;
	}
	while (b->ndone < b->njobs) {
		while (b->next < b->njobs &&
		       (io = kvmemd_store_io_get(b->st))) {
			j = &b->jobs[b->next++];
			io->op = b->op;
			io->unit = j->unit;
			io->len = j->units * UNIT;
			io->done = job_done;
			io->priv = j;
			if (b->op == KVMEMD_IO_WRITE)
				memcpy(io->buf, b->image + j->unit * UNIT,
				       io->len);
			kvmemd_store_io_queue(b->st, io);
		}
		kvmemd_store_io_submit(b->st);
		if (stats_of(b->st).inflight > b->max_inflight)
			b->max_inflight = stats_of(b->st).inflight;
		wait_reap(b->st);
	}
	for (i = 0; i < b->njobs; i++) {
		j = &b->jobs[i];
		EXPECT_EQ(j->ndone, 1, "job %zu: done() runs", i);
		EXPECT_EQ(j->res, j->units * UNIT, "job %zu at unit %ju", i,
			  (uintmax_t)j->unit);
	}
}

/* ---- format and header --------------------------------------------- */

START_TEST(test_format_and_reopen)
{
	struct kvmemd_store_cfg cfg;
	struct kvmemd_store_stats s;
	struct kvmemd_store *st;
	uint8_t uuid[16], uuid2[16], u0[UNIT];
	uint64_t formatted;
	char path[256];
	struct stat sb;
	time_t t0, t1;

	if (!engine_or_skip("format_and_reopen", _i))
		return;
	tmp_path(path, sizeof(path), "format", _i);
	cfg = cfg_of(path, 64, engines[_i].engine);

	t0 = time(NULL);
	st = open_ok(&cfg);
	t1 = time(NULL);
	s = stats_of(st);
	ck_assert_str_eq(s.path, path);
	ck_assert_str_eq(s.engine, engines[_i].name);
	ck_assert_uint_eq(s.generation, 1);
	ck_assert_uint_eq(s.size, 65 * UNIT);
	ck_assert_uint_eq(s.nunits, 64);
	ck_assert_uint_eq(s.used_units, 0);
	ck_assert_uint_eq(s.queue_depth, DEPTH);
	ck_assert_uint_eq(s.io_bytes, IO_UNITS * UNIT);
	ck_assert_uint_eq(s.inflight, 0);
	ck_assert_uint_eq(s.reads + s.writes + s.read_errors + s.write_errors,
			  0);
	kvmemd_store_close(st);

	ck_assert_int_eq(stat(path, &sb), 0);
	ck_assert_msg(S_ISREG(sb.st_mode), "%s is not a regular file", path);
	ck_assert_uint_eq(sb.st_mode & 07777, 0600);
	ck_assert_int_eq(sb.st_size, 65 * UNIT);
	expect_header(path, 65 * UNIT, 1, uuid);
	EXPECT_MEM(uuid, s.uuid, 16, "%s", "uuid on disk and in the stats");
	pread_file(path, u0, sizeof(u0), 0);
	formatted = le64(u0 + H_FORMATTED);
	ck_assert_uint_ge(formatted, (uint64_t)t0);
	ck_assert_uint_le(formatted, (uint64_t)t1);

	/* Kept, not formatted: the same uuid, one more start */
	st = open_ok(&cfg);
	s = stats_of(st);
	ck_assert_uint_eq(s.generation, 2);
	EXPECT_MEM(s.uuid, uuid, 16, "%s", "uuid after the reopen");
	kvmemd_store_close(st);
	expect_header(path, 65 * UNIT, 2, uuid2);
	EXPECT_MEM(uuid2, uuid, 16, "%s", "uuid on disk after the reopen");
	pread_file(path, u0, sizeof(u0), 0);
	ck_assert_uint_eq(le64(u0 + H_FORMATTED), formatted);
	/* reformat formats only what does not match */
	cfg.reformat = 1;
	st = open_ok(&cfg);
	ck_assert_uint_eq(stats_of(st).generation, 3);
	kvmemd_store_close(st);
	expect_header(path, 65 * UNIT, 3, uuid2);
	EXPECT_MEM(uuid2, uuid, 16, "%s", "uuid after a reopen with reformat");
}
END_TEST

/* An all-zero file is unused: formatted without store.reformat. */
START_TEST(test_zero_file_formatted)
{
	struct kvmemd_store_cfg cfg;
	struct kvmemd_store *st;
	uint8_t uuid[16];
	char path[256];
	int fd;

	tmp_path(path, sizeof(path), "zero", 0);
	cfg = cfg_of(path, 16, KVMEMD_ENGINE_THREADS);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 17 * UNIT), 0);
	ck_assert_int_eq(close(fd), 0);
	st = open_ok(&cfg);
	ck_assert_uint_eq(stats_of(st).generation, 1);
	kvmemd_store_close(st);
	expect_header(path, 17 * UNIT, 1, uuid);

	/* Empty: formatted and given its size */
	tmp_path(path, sizeof(path), "empty", 0);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(close(fd), 0);
	cfg.path = path;
	st = open_ok(&cfg);
	kvmemd_store_close(st);
	ck_assert_int_eq(file_size(path), 17 * UNIT);
	expect_header(path, 17 * UNIT, 1, uuid);
}
END_TEST

START_TEST(test_mismatch_refused)
{
	struct kvmemd_store_cfg cfg, big;
	struct kvmemd_store *st;
	uint8_t good[UNIT], bad[UNIT], now[UNIT], uuid[16], uuid2[16];
	struct kvmem_rng r;
	char path[256], other[256];

	kvmem_rng_seed(&r, 0x5707e);
	tmp_path(path, sizeof(path), "mismatch", 0);
	cfg = cfg_of(path, 16, KVMEMD_ENGINE_THREADS);
	st = open_ok(&cfg);
	kvmemd_store_close(st);
	expect_header(path, 17 * UNIT, 1, uuid);
	pread_file(path, good, sizeof(good), 0);

	/* Another size: both named, the way out given, nothing written */
	big = cfg;
	big.size += UNIT;
	OPEN_FAILS(&big, -EEXIST, path, "69632", "73728",
		   "set store.reformat = yes");
	pread_file(path, now, sizeof(now), 0);
	EXPECT_MEM(now, good, UNIT, "%s", "unit 0 after a refusal");
	ck_assert_int_eq(file_size(path), 17 * UNIT);

	/* Garbage */
	kvmem_check_fill_random(&r, bad, sizeof(bad));
	pwrite_file(path, bad, sizeof(bad), 0);
	OPEN_FAILS(&cfg, -EEXIST, path, "not a kvmem store",
		   "set store.reformat = yes");
	pread_file(path, now, sizeof(now), 0);
	EXPECT_MEM(now, bad, UNIT, "%s", "garbage after a refusal");

	/* A corrupt uuid, then a corrupt CRC */
	memcpy(bad, good, UNIT);
	bad[H_UUID + 3] ^= 0x10;
	pwrite_file(path, bad, sizeof(bad), 0);
	OPEN_FAILS(&cfg, -EEXIST, path, "corrupt", "reformat");
	memcpy(bad, good, UNIT);
	bad[H_CRC] ^= 0x01;
	pwrite_file(path, bad, sizeof(bad), 0);
	OPEN_FAILS(&cfg, -EEXIST, path, "corrupt", "reformat");

	/* Intact but of another version, or of a wrong geometry digest */
	memcpy(bad, good, UNIT);
	put_le32(bad + H_VERSION, 2);
	fix_crc(bad);
	pwrite_file(path, bad, sizeof(bad), 0);
	OPEN_FAILS(&cfg, -EEXIST, path, "version 2", "reformat");
	memcpy(bad, good, UNIT);
	bad[H_DIGEST] ^= 0x80;
	fix_crc(bad);
	pwrite_file(path, bad, sizeof(bad), 0);
	OPEN_FAILS(&cfg, -EEXIST, path, "digest", "reformat");

	/* reformat: a new store */
	cfg.reformat = 1;
	st = open_ok(&cfg);
	ck_assert_uint_eq(stats_of(st).generation, 1);
	kvmemd_store_close(st);
	expect_header(path, 17 * UNIT, 1, uuid2);
	ck_assert_msg(memcmp(uuid, uuid2, 16), "reformat kept the uuid");

	/* Zero where a header would be, but not unused: an ext4 superblock
	 * begins at byte 1024. */
	tmp_path(other, sizeof(other), "superblock", 0);
	memset(bad, 0, sizeof(bad));
	bad[1024 + 56] = 0x53;
	bad[1024 + 57] = 0xef;
	pwrite_file(other, bad, sizeof(bad), 0);
	cfg.path = other;
	cfg.reformat = 0;
	OPEN_FAILS(&cfg, -EEXIST, other, "not a kvmem store", "reformat");
	pread_file(other, now, sizeof(now), 0);
	EXPECT_MEM(now, bad, UNIT, "%s", "the superblock after a refusal");
	ck_assert_int_eq(file_size(other), UNIT);
}
END_TEST

START_TEST(test_bad_config)
{
	struct kvmemd_store_cfg cfg;
	char path[256];

	tmp_path(path, sizeof(path), "bad", 0);
	cfg = cfg_of(path, 16, KVMEMD_ENGINE_THREADS);
	cfg.size = UNIT;
	OPEN_FAILS(&cfg, -EINVAL, path, "4096 bytes are too few", "8192");
	ck_assert_msg(access(path, F_OK) && errno == ENOENT,
		      "%s left behind by a failed open", path);
	cfg.size = 0;
	OPEN_FAILS(&cfg, -EINVAL, path, "store.size");
	ck_assert_msg(access(path, F_OK) && errno == ENOENT,
		      "%s left behind by a failed open", path);

	cfg = cfg_of(path, 16, KVMEMD_ENGINE_THREADS);
	cfg.queue_depth = 0;
	OPEN_FAILS(&cfg, -EINVAL, "queue depth 0");
	cfg.queue_depth = 1025;
	OPEN_FAILS(&cfg, -EINVAL, "queue depth 1025");
	cfg.queue_depth = DEPTH;
	cfg.io_bytes = 1000;
	OPEN_FAILS(&cfg, -EINVAL, "I/O size 1000");
	cfg.io_bytes = 0;
	OPEN_FAILS(&cfg, -EINVAL, "I/O size 0");
	cfg.io_bytes = UNIT;
	cfg.engine = 3;
	OPEN_FAILS(&cfg, -EINVAL, "engine 3");
	ck_assert_msg(access(path, F_OK) && errno == ENOENT,
		      "%s made by an open that was refused", path);

	cfg = cfg_of(tmpdir, 16, KVMEMD_ENGINE_THREADS);
	OPEN_FAILS(&cfg, -EISDIR, tmpdir);
	cfg = cfg_of("/nonexistent-kvmem-dir/store", 16, KVMEMD_ENGINE_THREADS);
	OPEN_FAILS(&cfg, -ENOENT, "/nonexistent-kvmem-dir/store");
	cfg = cfg_of("/dev/null", 16, KVMEMD_ENGINE_THREADS);
	OPEN_FAILS(&cfg, -EINVAL, "/dev/null");
}
END_TEST

/* ---- the allocator --------------------------------------------------- */

static void alloc_at(struct kvmemd_store *st, uint32_t units, uint64_t want)
{
	uint64_t unit = UINT64_MAX;

	ck_assert_int_eq(kvmemd_store_alloc(st, units, &unit), 0);
	ck_assert_uint_eq(unit, want);
}

START_TEST(test_alloc)
{
	struct kvmemd_store_cfg cfg;
	struct kvmemd_store *st;
	uint64_t unit;
	char path[256];

	tmp_path(path, sizeof(path), "alloc", 0);
	cfg = cfg_of(path, 10, KVMEMD_ENGINE_THREADS);
	st = open_ok(&cfg);
	ck_assert_int_eq(kvmemd_store_alloc(st, 0, &unit), -EINVAL);
	ck_assert_int_eq(kvmemd_store_alloc(st, 11, &unit), -ENOSPC);
	alloc_at(st, 3, 0);
	alloc_at(st, 3, 3);
	alloc_at(st, 3, 6);
	ck_assert_uint_eq(stats_of(st).used_units, 9);
	ck_assert_int_eq(kvmemd_store_alloc(st, 3, &unit), -ENOSPC);
	alloc_at(st, 1, 9);
	ck_assert_uint_eq(stats_of(st).used_units, 10);
	ck_assert_int_eq(kvmemd_store_alloc(st, 1, &unit), -ENOSPC);

	kvmemd_store_free(st, 3, 3);
	ck_assert_uint_eq(stats_of(st).used_units, 7);
	alloc_at(st, 3, 3);

	/* Next fit: from where the last one ended (6), not from 0 */
	kvmemd_store_free(st, 0, 3);
	kvmemd_store_free(st, 6, 3);
	ck_assert_uint_eq(stats_of(st).used_units, 4);
	alloc_at(st, 2, 6);
	/* 8 is free but 9 is not: wraps to 0 */
	alloc_at(st, 3, 0);
	alloc_at(st, 1, 8);
	ck_assert_uint_eq(stats_of(st).used_units, 10);

	/* A caller's bugs, logged (quietly here) and ignored */
	kvmemd_log_init(LOG_CRIT);
	kvmemd_store_free(st, 3, 3);
	kvmemd_store_free(st, 3, 3); /* twice */
	kvmemd_store_free(st, 2, 2); /* 2 is in use, 3 is not */
	kvmemd_store_free(st, 9, 2); /* past the end */
	kvmemd_store_free(st, UINT64_MAX, 1);
	kvmemd_store_free(st, 5, 0);
	ck_assert_uint_eq(stats_of(st).used_units, 7);
	alloc_at(st, 3, 3);
	ck_assert_int_eq(kvmemd_store_alloc(st, 1, &unit), -ENOSPC);
	kvmemd_store_close(st);
}
END_TEST

/* Next fit, bit by bit: the reference for the word-wise allocator. */
struct model {
	uint8_t used[1000];
	uint64_t n, rover, nused;
};

static int model_run_free(const struct model *m, uint64_t s, uint32_t units)
{
	uint32_t k;

	for (k = 0; k < units; k++)
		if (m->used[s + k])
			return 0;
	return 1;
}

static int model_alloc(struct model *m, uint32_t units, uint64_t *unit)
{
	uint64_t s;

	for (s = m->rover; s + units <= m->n; s++)
		if (model_run_free(m, s, units))
			goto found;
	for (s = 0; s < m->rover && s + units <= m->n; s++)
		if (model_run_free(m, s, units))
			goto found;
	return -ENOSPC;
found:
	memset(m->used + s, 1, units);
	m->nused += units;
	m->rover = (s + units) % m->n;
	*unit = s;
	return 0;
}

START_TEST(test_alloc_model)
{
	struct {
		uint64_t unit;
		uint32_t units;
	} runs[1000];
	struct kvmemd_store_cfg cfg;
	struct kvmemd_store *st;
	struct kvmem_rng r;
	struct model m = { .n = 1000 };
	uint64_t got, want;
	size_t nruns = 0, k;
	uint32_t units;
	char path[256];
	int i, ret, mret;

	kvmem_rng_seed(&r, 0xa110c);
	tmp_path(path, sizeof(path), "model", 0);
	/* 1000 units: 15 words of the bitmap and 40 bits of a 16th */
	cfg = cfg_of(path, 1000, KVMEMD_ENGINE_THREADS);
	st = open_ok(&cfg);
	for (i = 0; i < 20000; i++) {
		if (nruns && kvmem_rng_below(&r, 100) < 45) {
			k = kvmem_rng_below(&r, nruns);
			kvmemd_store_free(st, runs[k].unit, runs[k].units);
			memset(m.used + runs[k].unit, 0, runs[k].units);
			m.nused -= runs[k].units;
			runs[k] = runs[--nruns];
		} else {
			/* Mostly small, sometimes over a 64-bit word */
			units = 1 + (uint32_t)kvmem_rng_below(&r, 8);
			if (!kvmem_rng_below(&r, 8))
				units = 1 + (uint32_t)kvmem_rng_below(&r, 130);
			ret = kvmemd_store_alloc(st, units, &got);
			mret = model_alloc(&m, units, &want);
			EXPECT_EQ(ret, mret, "step %d: alloc %u", i, units);
			if (!ret) {
				EXPECT_EQ(got, want, "step %d: alloc %u", i,
					  units);
				runs[nruns].unit = got;
				runs[nruns++].units = units;
			}
		}
		EXPECT_EQ(stats_of(st).used_units, m.nused, "step %d", i);
	}
	kvmemd_store_close(st);
}
END_TEST

/* ---- I/O ------------------------------------------------------------- */

/*
 * Fill a store of 300 units with runs of 1..4 units, written from distinct
 * random bytes with the queue full; read them back through the store in
 * another order and from the file through the page cache.
 */
START_TEST(test_round_trip)
{
	const uint64_t n = 300;
	struct kvmemd_store_cfg cfg;
	struct kvmemd_store_stats s;
	struct kvmemd_store *st;
	struct job jobs[300], t;
	struct batch b;
	struct kvmem_rng r;
	uint8_t *image, *back;
	uint64_t unit, bytes = 0;
	uint32_t units;
	size_t njobs = 0, i, k;
	char path[256];
	int ret;

	if (!engine_or_skip("round_trip", _i))
		return;
	kvmem_rng_seed(&r, 0x10ad + (uint64_t)_i);
	tmp_path(path, sizeof(path), "round-trip", _i);
	cfg = cfg_of(path, n, engines[_i].engine);
	st = open_ok(&cfg);
	image = kvmem_check_xmalloc(n * UNIT);
	back = kvmem_check_xmalloc(n * UNIT);
	kvmem_check_fill_random(&r, image, n * UNIT);
	memset(back, 0, n * UNIT);

	/* Random lengths until they no longer fit, then single units */
	for (;;) {
		units = 1 + (uint32_t)kvmem_rng_below(&r, IO_UNITS);
		ret = kvmemd_store_alloc(st, units, &unit);
		if (ret) {
			units = 1;
			ret = kvmemd_store_alloc(st, units, &unit);
		}
		if (ret)
			break;
		jobs[njobs++] = (struct job){ .unit = unit, .units = units };
		bytes += units * UNIT;
	}
	ck_assert_uint_eq(bytes, n * UNIT);
	ck_assert_uint_eq(stats_of(st).used_units, n);

	b = (struct batch){ .st = st,
			    .op = KVMEMD_IO_WRITE,
			    .jobs = jobs,
			    .njobs = njobs,
			    .image = image };
	batch_run(&b);
	ck_assert_uint_eq(b.max_inflight, DEPTH);
	s = stats_of(st);
	ck_assert_uint_eq(s.writes, njobs);
	ck_assert_uint_eq(s.write_bytes, bytes);
	ck_assert_uint_eq(s.write_errors + s.read_errors + s.short_ios, 0);
	ck_assert_uint_eq(s.inflight, 0);

	for (i = njobs - 1; i > 0; i--) {
		k = kvmem_rng_below(&r, i + 1);
		t = jobs[i];
		jobs[i] = jobs[k];
		jobs[k] = t;
	}
	b = (struct batch){ .st = st,
			    .op = KVMEMD_IO_READ,
			    .jobs = jobs,
			    .njobs = njobs,
			    .image = back };
	batch_run(&b);
	EXPECT_MEM(back, image, n * UNIT, "%s", "read through the store");
	s = stats_of(st);
	ck_assert_uint_eq(s.reads, njobs);
	ck_assert_uint_eq(s.read_bytes, bytes);
	ck_assert_uint_eq(s.write_errors + s.read_errors + s.short_ios, 0);
	kvmemd_store_close(st);

	memset(back, 0, n * UNIT);
	pread_file(path, back, n * UNIT, UNIT);
	EXPECT_MEM(back, image, n * UNIT, "%s", "read from the file");
	free(image);
	free(back);
}
END_TEST

static int io_get_none;

static void count_done(struct kvmemd_io *io, int res)
{
	struct job *j = io->priv;

	j->res = res;
	j->ndone++;
	/* Closing: nothing new starts. */
	io_get_none += !kvmemd_store_io_get(j->b->st);
}

/* Every io has its own aligned buffer; there are queue_depth of them. */
START_TEST(test_io_get_limits)
{
	struct kvmemd_io *ios[DEPTH];
	struct kvmemd_store_cfg cfg;
	struct kvmemd_store *st;
	struct job jobs[DEPTH];
	struct batch b;
	char path[256];
	uint32_t i, k;

	if (!engine_or_skip("io_get_limits", _i))
		return;
	tmp_path(path, sizeof(path), "limits", _i);
	cfg = cfg_of(path, 16, engines[_i].engine);
	st = open_ok(&cfg);
	b = (struct batch){ .st = st, .jobs = jobs };
	for (i = 0; i < DEPTH; i++) {
		ios[i] = kvmemd_store_io_get(st);
		ck_assert_ptr_nonnull(ios[i]);
		ck_assert_uint_lt(ios[i]->index, DEPTH);
		ck_assert_uint_eq((uintptr_t)ios[i]->buf % UNIT, 0);
		for (k = 0; k < i; k++) {
			ck_assert_uint_ne(ios[i]->index, ios[k]->index);
			ck_assert_msg(ios[i]->buf + IO_UNITS * UNIT <=
						      ios[k]->buf ||
					      ios[k]->buf + IO_UNITS * UNIT <=
						      ios[i]->buf,
				      "buffers %u and %u overlap", i, k);
		}
	}
	ck_assert_ptr_null(kvmemd_store_io_get(st));

	/* The only way back is through done(): all at close, once each */
	for (i = 0; i < DEPTH; i++) {
		jobs[i] = (struct job){ .res = -1, .b = &b };
		ios[i]->op = KVMEMD_IO_WRITE;
		ios[i]->unit = 2 * i;
		ios[i]->len = 2 * UNIT;
		ios[i]->done = count_done;
		ios[i]->priv = &jobs[i];
		memset(ios[i]->buf, 'a' + (int)i, 2 * UNIT);
		kvmemd_store_io_queue(st, ios[i]);
	}
	kvmemd_store_io_submit(st);
	kvmemd_store_close(st);
	ck_assert_int_eq(io_get_none, DEPTH);
	for (i = 0; i < DEPTH; i++) {
		uint8_t got[2 * UNIT], want[2 * UNIT];

		ck_assert_int_eq(jobs[i].ndone, 1);
		ck_assert_int_eq(jobs[i].res, 2 * UNIT);
		memset(want, 'a' + (int)i, sizeof(want));
		pread_file(path, got, sizeof(got), (off_t)(1 + 2 * i) * UNIT);
		EXPECT_MEM(got, want, sizeof(want), "write %u", i);
	}
}
END_TEST

/* Queued, not submitted: close submits and waits for them too. */
START_TEST(test_close_submits_queued)
{
	struct kvmemd_store_cfg cfg;
	struct kvmemd_store *st;
	struct kvmemd_io *io;
	struct job job = { .res = -1 };
	struct batch b;
	uint8_t got[UNIT], want[UNIT];
	char path[256];

	if (!engine_or_skip("close_submits_queued", _i))
		return;
	tmp_path(path, sizeof(path), "close", _i);
	cfg = cfg_of(path, 16, engines[_i].engine);
	st = open_ok(&cfg);
	b = (struct batch){ .st = st };
	job.b = &b;
	io = kvmemd_store_io_get(st);
	ck_assert_ptr_nonnull(io);
	io->op = KVMEMD_IO_WRITE;
	io->unit = 15;
	io->len = UNIT;
	io->done = count_done;
	io->priv = &job;
	memset(io->buf, 0x5a, UNIT);
	kvmemd_store_io_queue(st, io);
	kvmemd_store_close(st);
	ck_assert_int_eq(io_get_none, 1);
	ck_assert_int_eq(job.ndone, 1);
	ck_assert_int_eq(job.res, UNIT);
	memset(want, 0x5a, sizeof(want));
	pread_file(path, got, sizeof(got), 16 * UNIT);
	EXPECT_MEM(got, want, UNIT, "%s", "unit 15");
}
END_TEST

/* One I/O through the store, writing @data if not NULL; its result. */
static int io_one(struct kvmemd_store *st, enum kvmemd_io_op op, uint64_t unit,
		  uint32_t len, const void *data)
{
	struct job job = { .res = 1 };
	struct kvmemd_io *io;
	struct batch b = { .st = st };

	job.b = &b;
	io = kvmemd_store_io_get(st);
	ck_assert_ptr_nonnull(io);
	io->op = op;
	io->unit = unit;
	io->len = len;
	io->done = job_done;
	io->priv = &job;
	if (data)
		memcpy(io->buf, data, len);
	kvmemd_store_io_queue(st, io);
	kvmemd_store_io_submit(st);
	while (!job.ndone)
		wait_reap(st);
	ck_assert_int_eq(job.ndone, 1);
	return job.res;
}

/* The file shrinks under the store: reads past its end come back short. */
START_TEST(test_read_past_truncation)
{
	struct kvmemd_store_cfg cfg;
	struct kvmemd_store_stats s;
	struct kvmemd_store *st;
	char path[256];
	int res, res2;

	if (!engine_or_skip("read_past_truncation", _i))
		return;
	tmp_path(path, sizeof(path), "truncated", _i);
	cfg = cfg_of(path, 16, engines[_i].engine);
	st = open_ok(&cfg);
	ck_assert_int_eq(io_one(st, KVMEMD_IO_WRITE, 2, 2 * UNIT, NULL),
			 2 * UNIT);
	/* The header and data units 0..2 are left */
	ck_assert_int_eq(truncate(path, 4 * UNIT), 0);

	res = io_one(st, KVMEMD_IO_READ, 8, UNIT, NULL);
	ck_assert_int_ne(res, UNIT);
	s = stats_of(st);
	ck_assert_uint_eq(s.reads, 0);
	ck_assert_uint_eq(s.read_errors, 1);
	ck_assert_uint_eq(s.short_ios, res >= 0);
	ck_assert_uint_eq(s.read_bytes, 0);

	/* Straddling the end: unit 2 is there, unit 3 is not */
	res2 = io_one(st, KVMEMD_IO_READ, 2, 2 * UNIT, NULL);
	ck_assert_int_ne(res2, 2 * UNIT);
	s = stats_of(st);
	ck_assert_uint_eq(s.read_errors, 2);
	ck_assert_uint_eq(s.short_ios, (res >= 0) + (res2 >= 0));
	ck_assert_uint_eq(s.enospc, 0);
	ck_assert_uint_eq(s.writes, 1);
	ck_assert_uint_eq(s.write_errors, 0);
	kvmemd_store_close(st);
}
END_TEST

/* I/O outside the data units or of a bad length fails with -EINVAL. */
START_TEST(test_bad_io_refused)
{
	static const struct {
		uint64_t unit;
		uint32_t len;
	} bad[] = {
		{ 16, UNIT }, /* past the end */
		{ 15, 2 * UNIT }, /* over the end */
		{ UINT64_MAX, UNIT }, /* offset wraps onto the header */
		{ 0, 0 },
		{ 0, 100 },
		{ 0, (IO_UNITS + 1) * UNIT }, /* over io_bytes */
	};
	struct kvmemd_store_cfg cfg;
	struct kvmemd_store_stats s;
	struct kvmemd_store *st;
	uint8_t before[17 * UNIT], after[17 * UNIT];
	char path[256];
	size_t i;

	if (!engine_or_skip("bad_io_refused", _i))
		return;
	tmp_path(path, sizeof(path), "bad-io", _i);
	cfg = cfg_of(path, 16, engines[_i].engine);
	st = open_ok(&cfg);
	pread_file(path, before, sizeof(before), 0);
	kvmemd_log_init(LOG_CRIT);
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		EXPECT_EQ(io_one(st, KVMEMD_IO_WRITE, bad[i].unit, bad[i].len,
				 NULL),
			  -EINVAL, "write %zu", i);
		EXPECT_EQ(io_one(st, KVMEMD_IO_READ, bad[i].unit, bad[i].len,
				 NULL),
			  -EINVAL, "read %zu", i);
	}
	s = stats_of(st);
	ck_assert_uint_eq(s.write_errors, ARRAY_SIZE(bad));
	ck_assert_uint_eq(s.read_errors, ARRAY_SIZE(bad));
	ck_assert_uint_eq(s.reads + s.writes + s.short_ios, 0);
	/* The last unit still works */
	ck_assert_int_eq(io_one(st, KVMEMD_IO_READ, 15, UNIT, NULL), UNIT);
	kvmemd_store_close(st);
	pread_file(path, after, sizeof(after), 0);
	EXPECT_MEM(after, before, sizeof(after), "%s", "the file");
}
END_TEST

/* ---- engines ------------------------------------------------------- */

START_TEST(test_engine_names)
{
	struct kvmemd_store_cfg cfg;
	struct kvmemd_store *st;
	char path[256];
	int no_uring = uring_probe(); /* 0 or why not */

	tmp_path(path, sizeof(path), "engines", 0);
	cfg = cfg_of(path, 16, KVMEMD_ENGINE_THREADS);
	st = open_ok(&cfg);
	ck_assert_str_eq(stats_of(st).engine, "threads");
	kvmemd_store_close(st);

	cfg.engine = KVMEMD_ENGINE_AUTO;
	kvmemd_log_init(LOG_ERR); /* the fall-back's warning */
	st = open_ok(&cfg);
	ck_assert_str_eq(stats_of(st).engine,
			 no_uring ? "threads" : "io_uring");
	kvmemd_store_close(st);

	cfg.engine = KVMEMD_ENGINE_URING;
	if (no_uring) {
		OPEN_FAILS(&cfg, no_uring, path, "io_uring");
	} else {
		st = open_ok(&cfg);
		ck_assert_str_eq(stats_of(st).engine, "io_uring");
		kvmemd_store_close(st);
	}
}
END_TEST

/* io_uring_setup() fails with ENOSYS in this process from now on. */
static int deny_io_uring(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = ARRAY_SIZE(f), .filter = f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
		return -errno;
	return 0;
}

/* What the child of test_fallback_without_io_uring found: "" when fine. */
static void fallback_child(const char *path, char *msg, size_t len)
{
	struct kvmemd_store_cfg cfg = cfg_of(path, 16, KVMEMD_ENGINE_AUTO);
	struct kvmemd_store *st = NULL;
	char err[1024] = "";
	int ret;

	ret = kvmemd_store_open(&cfg, &st, err, sizeof(err));
	if (ret) {
		snprintf(msg, len, "auto: open: %d: %s", ret, err);
		return;
	}
	if (strcmp(stats_of(st).engine, "threads"))
		snprintf(msg, len, "auto: engine %s", stats_of(st).engine);
	kvmemd_store_close(st);
	if (msg[0])
		return;
	cfg.engine = KVMEMD_ENGINE_URING;
	ret = kvmemd_store_open(&cfg, &st, err, sizeof(err));
	if (ret != -ENOSYS || !strstr(err, "io_uring_queue_init"))
		snprintf(msg, len, "io_uring: open: %d, want %d: %s", ret,
			 -ENOSYS, err);
}

/*
 * A kernel without io_uring, made by a seccomp filter in a child of this
 * test's own (so the filter cannot outlive the test, whatever CK_FORK).
 */
START_TEST(test_fallback_without_io_uring)
{
	char path[256], msg[1200] = "";
	int pfd[2], status, ret;
	ssize_t n;
	pid_t pid;

	tmp_path(path, sizeof(path), "fallback", 0);
	ck_assert_int_eq(pipe2(pfd, O_CLOEXEC), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid) {
		close(pfd[0]);
		kvmemd_log_init(LOG_ERR); /* the fall-back's warning */
		ret = deny_io_uring();
		if (ret)
			snprintf(msg, sizeof(msg), "skip: seccomp: %s",
				 strerror(-ret));
		else
			fallback_child(path, msg, sizeof(msg));
		n = write(pfd[1], msg, strlen(msg));
		_exit(n == (ssize_t)strlen(msg) ? 0 : 1);
	}
	close(pfd[1]);
	n = read(pfd[0], msg, sizeof(msg) - 1);
	close(pfd[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && !WEXITSTATUS(status),
		      "child status 0x%x", status);
	ck_assert_int_ge(n, 0);
	msg[n] = '\0';
	if (!strncmp(msg, "skip: ", 6)) {
		printf("SKIP: fallback_without_io_uring: %s; the fall-back "
		       "to threads was not tested\n",
		       msg + 6);
		return;
	}
	ck_assert_msg(!msg[0], "%s", msg);
}
END_TEST

/* ---- a block device --------------------------------------------------- */

/*
 * A loop device over a file in tmpdir, detached when its last fd closes;
 * its path into @dev. Return: that fd, or -1 (said why) to skip.
 */
static int loop_attach(const char *backing, char *dev, size_t size)
{
	struct loop_config lc = { .info.lo_flags = LO_FLAGS_AUTOCLEAR };
	int ctl, nr, fd, bfd;

	ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (ctl < 0) {
		printf("SKIP: block_device: /dev/loop-control: %s; a block "
		       "device store was not tested\n",
		       strerror(errno));
		return -1;
	}
	nr = ioctl(ctl, LOOP_CTL_GET_FREE);
	ck_assert_msg(nr >= 0, "LOOP_CTL_GET_FREE: %s", strerror(errno));
	ck_assert_int_eq(close(ctl), 0);
	snprintf(dev, size, "/dev/loop%d", nr);
	fd = open(dev, O_RDWR | O_CLOEXEC);
	ck_assert_msg(fd >= 0, "%s: %s", dev, strerror(errno));
	bfd = open(backing, O_RDWR | O_CLOEXEC);
	ck_assert_msg(bfd >= 0, "%s: %s", backing, strerror(errno));
	lc.fd = (uint32_t)bfd;
	ck_assert_msg(!ioctl(fd, LOOP_CONFIGURE, &lc), "LOOP_CONFIGURE %s: %s",
		      dev, strerror(errno));
	ck_assert_int_eq(close(bfd), 0);
	return fd;
}

START_TEST(test_block_device)
{
	struct kvmemd_store_cfg cfg;
	struct kvmemd_store_stats s;
	struct kvmemd_store *st;
	uint8_t uuid[16], want[2 * UNIT], got[2 * UNIT];
	char backing[256], dev[64];
	int fd, lfd, i;

	if (!engine_or_skip("block_device", _i))
		return;
	if (geteuid()) {
		printf("SKIP: block_device: needs root for a loop device; a "
		       "block device store was not tested\n");
		return;
	}
	tmp_path(backing, sizeof(backing), "loop", _i);
	fd = open(backing, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 33 * UNIT), 0);
	ck_assert_int_eq(close(fd), 0);
	lfd = loop_attach(backing, dev, sizeof(dev));
	if (lfd < 0)
		return;

	/* Larger than the device */
	cfg = cfg_of(dev, 33, engines[_i].engine);
	OPEN_FAILS(&cfg, -EINVAL, dev, "135168", "139264");
	/* size 0: all of it; a device that holds no store is formatted
	 * only when asked */
	cfg.size = 0;
	OPEN_FAILS(&cfg, -EEXIST, dev, "holds no kvmem store", "reformat");
	cfg.reformat = 1;
	st = open_ok(&cfg);
	cfg.reformat = 0;
	s = stats_of(st);
	ck_assert_uint_eq(s.size, 33 * UNIT);
	ck_assert_uint_eq(s.nunits, 32);
	ck_assert_uint_eq(s.generation, 1);
	for (i = 0; i < 2 * (int)UNIT; i++)
		want[i] = (uint8_t)(i * 7 + 3);
	ck_assert_int_eq(io_one(st, KVMEMD_IO_WRITE, 30, 2 * UNIT, want),
			 2 * UNIT);
	kvmemd_store_close(st);
	/* A smaller store on it is another geometry */
	cfg.size = 17 * UNIT;
	OPEN_FAILS(&cfg, -EEXIST, dev, "135168", "69632", "reformat");
	ck_assert_int_eq(close(lfd), 0);

	expect_header(backing, 33 * UNIT, 1, uuid);
	pread_file(backing, got, sizeof(got), 31 * UNIT);
	EXPECT_MEM(got, want, sizeof(want), "%s", "units 30, 31");
}
END_TEST

KVMEM_SUITE(store)
{
	Suite *s = suite_create("store");
	TCase *tc = tcase_create("store");
	const int ne = (int)ARRAY_SIZE(engines);

	tcase_set_timeout(tc, 60);
	tcase_add_unchecked_fixture(tc, tmpdir_make, tmpdir_remove);
	tcase_add_checked_fixture(tc, quiet_log, NULL);
	tcase_add_loop_test(tc, test_format_and_reopen, 0, ne);
	tcase_add_test(tc, test_zero_file_formatted);
	tcase_add_test(tc, test_mismatch_refused);
	tcase_add_test(tc, test_bad_config);
	tcase_add_test(tc, test_alloc);
	tcase_add_test(tc, test_alloc_model);
	tcase_add_loop_test(tc, test_round_trip, 0, ne);
	tcase_add_loop_test(tc, test_io_get_limits, 0, ne);
	tcase_add_loop_test(tc, test_close_submits_queued, 0, ne);
	tcase_add_loop_test(tc, test_read_past_truncation, 0, ne);
	tcase_add_loop_test(tc, test_bad_io_refused, 0, ne);
	tcase_add_test(tc, test_engine_names);
	tcase_add_test(tc, test_fallback_without_io_uring);
	tcase_add_loop_test(tc, test_block_device, 0, ne);
	suite_add_tcase(s, tc);
	return s;
}
