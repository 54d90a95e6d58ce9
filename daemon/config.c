/* SPDX-License-Identifier: MIT */
/*
 * config.c - kvmemd's configuration: defaults, the file, overrides, checks
 *
 * Every key is one entry of keys[]: its section and name, where it lives in
 * struct kvmemd_config, its type, its bounds, whether SIGHUP takes it, and
 * a line saying what it is. Setting a key (from the file or from the
 * command line), printing the configuration and reloading it all walk that
 * table; what a type means (how its text is parsed and written back) is
 * one entry of type_ops[]. A new key is one table entry, its field and its
 * default.
 *
 * The file is parsed into a copy of the configuration which replaces the
 * caller's only when every line and the checks across keys pass, so a bad
 * file (at start-up or on SIGHUP) changes nothing.
 *
 * Values are stored canonically (strings and id lists zero-filled past
 * their end), so two configurations holding the same values compare equal
 * byte for byte, and kvmemd_config_print() writes every value in a form
 * that reads back to the same bytes: setters refuse text that the file
 * syntax could not carry (leading or trailing blanks, control characters,
 * a comment marker after a blank).
 */
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <syslog.h>
#include <unistd.h>

#include "config.h"
#include "kvmem/ecc.h"
#include "kvmem/quant.h"
#include "kvmem-private.h"
#include "store.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* The longest line of the file, without its newline. */
#define CONFIG_LINE_MAX 1023

/* Room for a message quoting a whole line. */
#define MSG_MAX (CONFIG_LINE_MAX + 256)

#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)
#define TIB (UINT64_C(1) << 40)

/* Blanks between the entries of an id list, besides commas. */
#define ID_BLANKS " \t\n\v\f\r"
#define ID_SEPARATORS "," ID_BLANKS

_Static_assert(sizeof(uid_t) <= sizeof(id_t) && sizeof(gid_t) <= sizeof(id_t),
	       "id_t holds a uid and a gid");

enum key_type {
	KEY_PATH, /* a non-empty path */
	KEY_PATH_OPT, /* a path, or "" for none */
	KEY_GROUP, /* a group name that exists, or "" */
	KEY_UIDS, /* user names and uids; the count at count_off */
	KEY_GIDS, /* group names and gids; the count at count_off */
	KEY_U32, /* decimal in min..max */
	KEY_POW2, /* a power of two in min..max */
	KEY_SIZE, /* bytes, with an optional K/M/G/T suffix, in min..max */
	KEY_REAL, /* a decimal number, 1e-3 too, in min..max, as a double */
	KEY_SIZE_PCT, /* a KEY_SIZE, or "N%" (1..100) to the uint32_t at
		       * count_off */
	KEY_ENUM, /* one of names[], stored as an int */
	KEY_GPU, /* "auto", or a GPU's UUID: GPU-8hex-4hex-4hex-4hex-12hex */
	KEY_PUBLISHERS, /* "GROUP:USER,USER ..."; the count at count_off */
	KEY_NODES, /* "HOST:PORT,HOST:PORT ...", or "" */
	KEY_NTYPES,
};

struct key_name {
	const char *name;
	int value;
};

struct key {
	const char *section;
	const char *name;
	enum key_type type;
	size_t off; /* of the field in struct kvmemd_config */
	size_t size; /* of the field */
	size_t count_off; /* KEY_UIDS, KEY_GIDS: of the entry count;
			   * KEY_SIZE_PCT: of the percentage */
	uint64_t min, max; /* KEY_U32, KEY_POW2, KEY_SIZE */
	const struct key_name *names; /* KEY_ENUM; ends with a NULL name */
	bool reload; /* SIGHUP takes a new value */
	const char *desc;
};

/*
 * The field @f, which must have type @T (a compile error otherwise: the
 * _Generic has no association for any other type).
 */
#define KEY_FIELD(f, T)                                                     \
	.off = offsetof(struct kvmemd_config, f) +                          \
	       0 * sizeof(_Generic(((struct kvmemd_config *)0)->f, T : 1)), \
	.size = sizeof(((struct kvmemd_config *)0)->f)

#define KEY_COUNT(f)                                                     \
	.count_off = offsetof(struct kvmemd_config, f) +                 \
		     0 * sizeof(_Generic(((struct kvmemd_config *)0)->f, \
					 unsigned int : 1))

/* The first entry of each value is the name kvmemd_config_print() writes. */
static const struct key_name log_levels[] = {
	{ "err", LOG_ERR },	  { "warning", LOG_WARNING },
	{ "notice", LOG_NOTICE }, { "info", LOG_INFO },
	{ "debug", LOG_DEBUG },	  { NULL, 0 },
};

static const struct key_name booleans[] = {
	{ "yes", 1 }, { "no", 0 }, { "true", 1 }, { "false", 0 }, { "on", 1 },
	{ "off", 0 }, { "1", 1 },  { "0", 0 },	  { NULL, 0 },
};

static const struct key_name engines[] = {
	{ "auto", KVMEMD_ENGINE_AUTO },
	{ "io_uring", KVMEMD_ENGINE_URING },
	{ "threads", KVMEMD_ENGINE_THREADS },
	{ NULL, 0 },
};

static const struct key_name archive_formats[] = {
	{ "same", KVMEMD_ARCHIVE_SAME },
	{ "int8", KVMEM_FMT_INT8 },
	{ "int4", KVMEM_FMT_INT4 },
	{ "int2", KVMEM_FMT_INT2 },
	{ "fp8", KVMEM_FMT_FP8 },
	{ "lm4", KVMEM_FMT_LM4 },
	{ "lm3", KVMEM_FMT_LM3 },
	{ "lm2", KVMEM_FMT_LM2 },
	{ NULL, 0 },
};

static const struct key_name codecs[] = {
	{ "h74", KVMEM_CODEC_H74 },
	{ "h84", KVMEM_CODEC_H84 },
	{ "golay24", KVMEM_CODEC_GOLAY24 },
	{ "secded72", KVMEM_CODEC_SECDED72 },
	{ NULL, 0 },
};

static const struct key_name tristates[] = {
	{ "yes", KVMEMD_YES },	 { "no", KVMEMD_NO },
	{ "auto", KVMEMD_AUTO }, { "true", KVMEMD_YES },
	{ "false", KVMEMD_NO },	 { "on", KVMEMD_YES },
	{ "off", KVMEMD_NO },	 { "1", KVMEMD_YES },
	{ "0", KVMEMD_NO },	 { NULL, 0 },
};

/* In the order kvmemd_config_print() writes them, sections together. */
static const struct key keys[] = {
	{
		.section = "daemon",
		.name = "socket",
		.type = KEY_PATH,
		KEY_FIELD(socket, char *),
		.desc = "socket the clients connect to",
	},
	{
		.section = "daemon",
		.name = "admin_socket",
		.type = KEY_PATH,
		KEY_FIELD(admin_socket, char *),
		.desc = "socket of the administration commands",
	},
	{
		.section = "daemon",
		.name = "state_dir",
		.type = KEY_PATH,
		KEY_FIELD(state_dir, char *),
		.desc = "directory of the daemon's persistent state",
	},
	{
		.section = "daemon",
		.name = "group",
		.type = KEY_GROUP,
		KEY_FIELD(group, char *),
		.desc = "group given the sockets, empty: left as it is",
	},
	{
		.section = "daemon",
		.name = "allow_uids",
		.type = KEY_UIDS,
		KEY_FIELD(allow_uids, uid_t *),
		KEY_COUNT(n_allow_uids),
		.reload = true,
		.desc = "users (names or uids) admitted as clients",
	},
	{
		.section = "daemon",
		.name = "allow_gids",
		.type = KEY_GIDS,
		KEY_FIELD(allow_gids, gid_t *),
		KEY_COUNT(n_allow_gids),
		.reload = true,
		.desc = "groups (names or gids) whose members are admitted",
	},
	{
		.section = "daemon",
		.name = "tenants",
		.type = KEY_GIDS,
		KEY_FIELD(tenant_gids, gid_t *),
		KEY_COUNT(n_tenant_gids),
		.reload = true,
		.desc = "groups (names or gids) whose members share published "
			"prefixes, each group a tenant; the first listed that "
			"a client is in is its tenant, none: its uid",
	},
	{
		.section = "daemon",
		.name = "admin_group",
		.type = KEY_GROUP,
		KEY_FIELD(admin_group, char *),
		.reload = true,
		.desc = "group whose members may use the admin socket (and "
			"its group), besides root and the daemon's user",
	},
	{
		.section = "daemon",
		.name = "max_sessions",
		.type = KEY_U32,
		KEY_FIELD(max_sessions, uint32_t),
		.min = 1,
		.max = 65536,
		.reload = true,
		.desc = "most client sessions at once",
	},
	{
		.section = "daemon",
		.name = "max_sessions_per_uid",
		.type = KEY_U32,
		KEY_FIELD(max_sessions_per_uid, uint32_t),
		.min = 1,
		.max = 65536,
		.reload = true,
		.desc = "most client sessions of one user at once",
	},
	{
		.section = "daemon",
		.name = "keep_sessions",
		.type = KEY_ENUM,
		KEY_FIELD(keep_sessions, int),
		.names = booleans,
		.reload = true,
		.desc = "keep sessions across a restart in systemd's file "
			"descriptor store (NOTIFY_SOCKET and "
			"FileDescriptorStoreMax= needed)",
	},
	{
		.section = "daemon",
		.name = "keep_on_crash",
		.type = KEY_ENUM,
		KEY_FIELD(keep_on_crash, int),
		.names = booleans,
		.reload = true,
		.desc = "keep each kept session's record current while it runs, "
			"so that it survives a crash of kvmemd too; its "
			"completions wait for the record",
	},
	{
		.section = "daemon",
		.name = "resume_seconds",
		.type = KEY_U32,
		KEY_FIELD(resume_seconds, uint32_t),
		.min = 1,
		.max = 86400,
		.reload = true,
		.desc = "how long a kept session waits for its client after a "
			"restart before it is freed",
	},
	{
		.section = "daemon",
		.name = "log_level",
		.type = KEY_ENUM,
		KEY_FIELD(log_level, int),
		.names = log_levels,
		.reload = true,
		.desc = "least severe message logged",
	},
	{
		.section = "pool",
		.name = "host_bytes",
		.type = KEY_SIZE,
		KEY_FIELD(host_bytes, uint64_t),
		.min = MIB,
		.max = TIB,
		.desc = "host memory of all sessions' arenas together",
	},
	{
		.section = "pool",
		.name = "session_default_bytes",
		.type = KEY_SIZE,
		KEY_FIELD(session_default_bytes, uint64_t),
		.min = 64 * KIB,
		.max = TIB,
		.reload = true,
		.desc = "quota of a session that asks for 0",
	},
	{
		.section = "pool",
		.name = "session_max_bytes",
		.type = KEY_SIZE,
		KEY_FIELD(session_max_bytes, uint64_t),
		.min = 64 * KIB,
		.max = TIB,
		.reload = true,
		.desc = "largest quota a session may ask for",
	},
	{
		.section = "pool",
		.name = "hugepages",
		.type = KEY_ENUM,
		KEY_FIELD(hugepages, int),
		.names = tristates,
		.reload = true,
		.desc = "ask for transparent huge pages for arenas",
	},
	{
		.section = "pool",
		.name = "mlock",
		.type = KEY_ENUM,
		KEY_FIELD(mlock, int),
		.names = tristates,
		.reload = true,
		.desc = "lock arenas in memory",
	},
	{
		.section = "pool",
		.name = "gpu_device",
		.type = KEY_GPU,
		KEY_FIELD(gpu_device, char *),
		.desc = "GPU of the GPU pool: auto (the first), its UUID, or "
			"standin (host memory playing a GPU, for tests)",
	},
	{
		.section = "pool",
		.name = "gpu_bytes",
		.type = KEY_SIZE_PCT,
		KEY_FIELD(gpu_bytes, uint64_t),
		.count_off = offsetof(struct kvmemd_config, gpu_percent),
		.min = 0,
		.max = 64 * TIB,
		.desc = "device memory of all sessions together, or a "
			"percentage of the GPU's, 0: no GPU pool",
	},
	{
		.section = "pool",
		.name = "gpu_session_max_bytes",
		.type = KEY_SIZE,
		KEY_FIELD(gpu_session_max_bytes, uint64_t),
		.min = 0,
		.max = 64 * TIB,
		.reload = true,
		.desc = "most device memory one session may have, 0: all of "
			"gpu_bytes",
	},
	{
		.section = "pool",
		.name = "gpu_pinned_bytes",
		.type = KEY_SIZE,
		KEY_FIELD(gpu_pinned_bytes, uint64_t),
		.min = 0,
		.max = 64 * TIB,
		.reload = true,
		.desc = "host memory of GPU-tier sessions pinned for the "
			"driver's copies, all together, 0: as much as "
			"host_bytes",
	},
	{
		.section = "ring",
		.name = "sq_entries",
		.type = KEY_POW2,
		KEY_FIELD(sq_entries, uint32_t),
		.min = 8,
		.max = 4096,
		.reload = true,
		.desc = "submission queue entries when a client asks for 0",
	},
	{
		.section = "ring",
		.name = "max_entries",
		.type = KEY_POW2,
		KEY_FIELD(max_entries, uint32_t),
		.min = 8,
		.max = 65536,
		.reload = true,
		.desc = "largest submission or completion queue",
	},
	{
		.section = "ring",
		.name = "poll_idle_us",
		.type = KEY_U32,
		KEY_FIELD(poll_idle_us, uint32_t),
		.min = 0,
		.max = 1000000,
		.reload = true,
		.desc = "microseconds of polling after the last SQE, 0: none",
	},
	{
		.section = "ring",
		.name = "max_seqs",
		.type = KEY_U32,
		KEY_FIELD(max_seqs, uint32_t),
		.min = 1,
		.max = 1048576,
		.reload = true,
		.desc = "sequences per session",
	},
	{
		.section = "scrub",
		.name = "rate",
		.type = KEY_SIZE,
		KEY_FIELD(scrub_rate, uint64_t),
		.min = 0,
		.max = 64 * GIB,
		.reload = true,
		.desc = "patrol scrub bytes per second, 0: no patrol",
	},
	{
		.section = "scrub",
		.name = "cycle",
		.type = KEY_U32,
		KEY_FIELD(scrub_cycle, uint32_t),
		.min = 0,
		.max = 31536000,
		.reload = true,
		.desc = "seconds a full patrol pass should take, 0: use the rate",
	},
	{
		.section = "scrub",
		.name = "target_ue_per_day",
		.type = KEY_REAL,
		KEY_FIELD(scrub_target_ue, double),
		.min = 0,
		.max = 1000000000,
		.reload = true,
		.desc = "uncorrectable words a day the patrol adapts its rate "
			"to keep below, 0: a fixed rate",
	},
	{
		.section = "scrub",
		.name = "rate_max",
		.type = KEY_SIZE,
		KEY_FIELD(scrub_rate_max, uint64_t),
		.min = 0,
		.max = 64 * GIB,
		.reload = true,
		.desc = "patrol bytes per second adapting may go up to",
	},
	{
		.section = "scrub",
		.name = "verify_on_seal",
		.type = KEY_ENUM,
		KEY_FIELD(verify_on_seal, int),
		.names = booleans,
		.reload = true,
		.desc = "check and correct every page when it is sealed",
	},
	{
		.section = "scrub",
		.name = "allow_inject",
		.type = KEY_ENUM,
		KEY_FIELD(allow_inject, int),
		.names = booleans,
		.reload = true,
		.desc = "let admins inject bit errors (tests and demos only)",
	},
	{
		.section = "scrub",
		.name = "events",
		.type = KEY_U32,
		KEY_FIELD(events, uint32_t),
		.min = 16,
		.max = 1048576,
		.desc = "error events kept in memory",
	},
	{
		.section = "tier",
		.name = "low_watermark",
		.type = KEY_U32,
		KEY_FIELD(low_watermark, uint32_t),
		.min = 0,
		.max = 99,
		.reload = true,
		.desc = "percent of a session's arena free below which released "
			"pages go to the store",
	},
	{
		.section = "tier",
		.name = "high_watermark",
		.type = KEY_U32,
		KEY_FIELD(high_watermark, uint32_t),
		.min = 1,
		.max = 100,
		.reload = true,
		.desc = "percent free at which they stop going",
	},
	{
		.section = "tier",
		.name = "stale_tokens",
		.type = KEY_U32,
		KEY_FIELD(stale_tokens, uint32_t),
		.min = 0,
		.max = UINT32_MAX,
		.reload = true,
		.desc = "a page this many tokens behind the end of its sequence "
			"leaves first, 0: age does not count",
	},
	{
		.section = "tier",
		.name = "offload",
		.type = KEY_ENUM,
		KEY_FIELD(offload, int),
		.names = booleans,
		.reload = true,
		.desc = "move released pages to the store under pressure",
	},
	{
		.section = "tier",
		.name = "archive_tokens",
		.type = KEY_U32,
		KEY_FIELD(archive_tokens, uint32_t),
		.min = 0,
		.max = UINT32_MAX,
		.reload = true,
		.desc = "a released sealed page this many tokens behind the end "
			"of its sequence is re-encoded in the archive format, "
			"0: no archive tier",
	},
	{
		.section = "tier",
		.name = "archive_heat",
		.type = KEY_REAL,
		KEY_FIELD(archive_heat, double),
		.min = 0,
		.max = 1,
		.reload = true,
		.desc = "only pages with at most this share of their "
			"sequence's attention are archived, 1: any",
	},
	{
		.section = "tier",
		.name = "bits_budget",
		.type = KEY_REAL,
		KEY_FIELD(bits_budget, double),
		.min = 0,
		.max = 16,
		.reload = true,
		.desc = "precision by attention: while a session's sealed "
			"pages average more payload bits a value than this, "
			"its least attended released page goes to the "
			"archive format (which must have fewer bits than the "
			"session's), 0: no budget",
	},
	{
		.section = "tier",
		.name = "archive_format",
		.type = KEY_ENUM,
		KEY_FIELD(archive_format, int),
		.names = archive_formats,
		.reload = true,
		.desc = "format of archived pages, same: the session's own (for "
			"sessions attached after a change)",
	},
	{
		.section = "tier",
		.name = "archive_codec",
		.type = KEY_ENUM,
		KEY_FIELD(archive_codec, int),
		.names = codecs,
		.reload = true,
		.desc = "codec of archived pages (for sessions attached after "
			"a change)",
	},
	{
		.section = "tier",
		.name = "archive_rate",
		.type = KEY_SIZE,
		KEY_FIELD(archive_rate, uint64_t),
		.min = 4 * KIB,
		.max = TIB,
		.reload = true,
		.desc = "bytes of pages a second re-encoded, all sessions",
	},
	{
		.section = "prefix",
		.name = "bytes",
		.type = KEY_SIZE,
		KEY_FIELD(prefix_bytes, uint64_t),
		.min = 0,
		.max = 64 * TIB,
		.reload = true,
		.desc = "published prefixes of all tenants together, in fair "
			"shares: when full, a publish evicts blocks of tenants "
			"over theirs, 0: no prefix sharing",
	},
	{
		.section = "prefix",
		.name = "uid_bytes",
		.type = KEY_SIZE,
		KEY_FIELD(prefix_uid_bytes, uint64_t),
		.min = 0,
		.max = 64 * TIB,
		.reload = true,
		.desc = "the most one tenant (uid) keeps; its least recently "
			"used blocks go first, 0: bytes",
	},
	{
		.section = "prefix",
		.name = "idle_seconds",
		.type = KEY_U32,
		KEY_FIELD(prefix_idle_s, uint32_t),
		.min = 0,
		.max = UINT32_MAX,
		.reload = true,
		.desc = "a block no session attached for this long is dropped, "
			"0: never",
	},
	{
		.section = "prefix",
		.name = "publishers",
		.type = KEY_PUBLISHERS,
		KEY_FIELD(publishers, struct kvmemd_publisher *),
		KEY_COUNT(n_publishers),
		.reload = true,
		.desc = "GROUP:USER,USER ...: in each group of daemon.tenants "
			"listed, only these users publish, the others attach; "
			"a group not listed: every member publishes",
	},
	{
		.section = "prefix",
		.name = "keep",
		.type = KEY_ENUM,
		KEY_FIELD(prefix_keep, int),
		.names = booleans,
		.reload = true,
		.desc = "with daemon.keep_sessions, keep published blocks "
			"across restarts and crashes of kvmemd: each in a memfd "
			"in the descriptor store, with an index in the state "
			"directory; with a store, on it too "
			"(store.retain_bytes)",
	},
	{
		.section = "remote",
		.name = "seeds",
		.type = KEY_NODES,
		KEY_FIELD(remote_seeds, char *),
		.desc = "HOST:PORT of nodes of the shared tier's Redis "
			"Cluster, separated by commas; empty: no shared tier",
	},
	{
		.section = "remote",
		.name = "credentials",
		.type = KEY_PATH_OPT,
		KEY_FIELD(remote_credentials, char *),
		.desc = "file of TENANT USER PASSWORD lines (TENANT: uid:N, "
			"gid:N or *), readable by kvmemd's user only; empty: "
			"the cluster's default user for every tenant",
	},
	{
		.section = "remote",
		.name = "timeout_ms",
		.type = KEY_U32,
		KEY_FIELD(remote_timeout_ms, uint32_t),
		.min = 1,
		.max = 60000,
		.desc = "milliseconds a connection or a reply may take",
	},
	{
		.section = "remote",
		.name = "retries",
		.type = KEY_U32,
		KEY_FIELD(remote_retries, uint32_t),
		.min = 0,
		.max = 20,
		.desc = "tries again of a request redirected, or whose node "
			"failed over",
	},
	{
		.section = "remote",
		.name = "ttl_seconds",
		.type = KEY_U32,
		KEY_FIELD(remote_ttl_s, uint32_t),
		.min = 0,
		.max = UINT32_MAX,
		.reload = true,
		.desc = "a block pushed expires after this long, 0: never",
	},
	{
		.section = "remote",
		.name = "publish",
		.type = KEY_ENUM,
		KEY_FIELD(remote_publish, int),
		.names = booleans,
		.reload = true,
		.desc = "push each block published here to the shared tier",
	},
	{
		.section = "remote",
		.name = "queue_bytes",
		.type = KEY_SIZE,
		KEY_FIELD(remote_queue_bytes, uint64_t),
		.min = MIB,
		.max = 64 * GIB,
		.reload = true,
		.desc = "blocks on their way to the shared tier, at most: "
			"past it a push is dropped (counted)",
	},
	{
		.section = "store",
		.name = "path",
		.type = KEY_PATH_OPT,
		KEY_FIELD(store_path, char *),
		.desc = "backing file or block device, empty: no cold tier",
	},
	{
		.section = "store",
		.name = "size",
		.type = KEY_SIZE,
		KEY_FIELD(store_size, uint64_t),
		.min = 0,
		.max = 1ull << 50,
		.desc = "bytes of the store, 0 for a block device: all of it",
	},
	{
		.section = "store",
		.name = "reformat",
		.type = KEY_ENUM,
		KEY_FIELD(store_reformat, int),
		.names = booleans,
		.desc = "format a store that does not match this configuration "
			"(what it held is lost)",
	},
	{
		.section = "store",
		.name = "queue_depth",
		.type = KEY_U32,
		KEY_FIELD(store_queue_depth, uint32_t),
		.min = 1,
		.max = 1024,
		.desc = "store I/Os in flight at most",
	},
	{
		.section = "store",
		.name = "io_bytes",
		.type = KEY_SIZE,
		KEY_FIELD(store_io_bytes, uint64_t),
		.min = 4096,
		.max = 64 * MIB,
		.desc = "largest I/O; larger pages stay in memory",
	},
	{
		.section = "store",
		.name = "engine",
		.type = KEY_ENUM,
		KEY_FIELD(store_engine, int),
		.names = engines,
		.desc = "I/O engine: io_uring, threads (pread/pwrite), or auto "
			"(io_uring, else threads)",
	},
	{
		.section = "store",
		.name = "retain_bytes",
		.type = KEY_SIZE_PCT,
		KEY_FIELD(store_retain_bytes, uint64_t),
		.count_off = offsetof(struct kvmemd_config,
				      store_retain_percent),
		.min = 0,
		.max = 1ull << 50,
		.reload = true,
		.desc = "with prefix.keep, published blocks kept on the store, "
			"where they outlive a reboot, at most: bytes or a "
			"percentage of the store, least recently used going "
			"first; 0: none",
	},
	{
		.section = "store",
		.name = "retain_seconds",
		.type = KEY_U32,
		KEY_FIELD(store_retain_s, uint32_t),
		.min = 0,
		.max = UINT32_MAX,
		.reload = true,
		.desc = "a block only on the store that no session attached "
			"or fetched for this long goes, 0: never",
	},
	{
		.section = "workers",
		.name = "threads",
		.type = KEY_U32,
		KEY_FIELD(threads, uint32_t),
		.min = 1,
		.max = 64,
		.desc = "worker threads",
	},
	{
		.section = "workers",
		.name = "queue_depth",
		.type = KEY_U32,
		KEY_FIELD(queue_depth, uint32_t),
		.min = 1,
		.max = 4096,
		.desc = "requests queued per worker",
	},
};

/* What a type means: parse @v into @k's field, or write the field out. */
struct key_type_ops {
	/* 0, or -EINVAL with what is wrong (no key name) in @msg */
	int (*set)(struct kvmemd_config *c, const struct key *k, const char *v,
		   char *msg, size_t len);
	void (*format)(const struct kvmemd_config *c, const struct key *k,
		       char *buf, size_t len);
	/* the range, for messages and comments; "" when there is none */
	void (*range)(const struct key *k, char *buf, size_t len);
	bool empty_ok; /* "" is a value */
};

static void *field(struct kvmemd_config *c, const struct key *k)
{
	return (char *)c + k->off;
}

static const void *cfield(const struct kvmemd_config *c, const struct key *k)
{
	return (const char *)c + k->off;
}

static unsigned int *count_field(struct kvmemd_config *c, const struct key *k)
{
	return (unsigned int *)((char *)c + k->count_off);
}

static const unsigned int *ccount_field(const struct kvmemd_config *c,
					const struct key *k)
{
	return (const unsigned int *)((const char *)c + k->count_off);
}

static __attribute__((format(printf, 3, 4))) void
seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* The largest exact binary suffix: 1048576 is "1M", 1048577 stays. */
static void fmt_size(uint64_t v, char *buf, size_t len)
{
	static const char suffix[] = "KMGT";
	int i;

	for (i = 3; i >= 0; i--) {
		unsigned int shift = 10 * (i + 1);

		if (v && !(v & ((UINT64_C(1) << shift) - 1))) {
			snprintf(buf, len, "%llu%c",
				 (unsigned long long)(v >> shift), suffix[i]);
			return;
		}
	}
	snprintf(buf, len, "%llu", (unsigned long long)v);
}

/*
 * Plain decimal digits, nothing before them (no blank, no sign); @end
 * receives where they stop. Return: 0, or -EINVAL for no digits or a value
 * beyond 64 bits.
 */
static int parse_digits(const char *s, uint64_t *v, const char **end)
{
	unsigned long long x;
	char *e;

	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	x = strtoull(s, &e, 10);
	if (errno)
		return -EINVAL;
	*v = x;
	*end = e;
	return 0;
}

static int parse_uint(const char *s, uint64_t *v)
{
	const char *end;

	if (parse_digits(s, v, &end) || *end)
		return -EINVAL;
	return 0;
}

static int parse_size(const char *s, uint64_t *v)
{
	static const struct {
		const char *suffix;
		unsigned int shift;
	} suffixes[] = {
		{ "", 0 },     { "k", 10 },   { "kib", 10 },
		{ "m", 20 },   { "mib", 20 }, { "g", 30 },
		{ "gib", 30 }, { "t", 40 },   { "tib", 40 },
	};
	const char *end;
	uint64_t x;
	size_t i;

	if (parse_digits(s, &x, &end))
		return -EINVAL;
	for (i = 0; i < ARRAY_SIZE(suffixes); i++) {
		if (strcasecmp(end, suffixes[i].suffix))
			continue;
		if (x > UINT64_MAX >> suffixes[i].shift)
			return -EINVAL;
		*v = x << suffixes[i].shift;
		return 0;
	}
	return -EINVAL;
}

/*
 * Whether the file syntax carries @v as it is: no control character, no
 * blank at either end, no '#' or ';' at the start or after a blank (which
 * would start a comment).
 */
static bool text_ok(const char *v)
{
	size_t i, n = strlen(v);

	if (n &&
	    (isspace((unsigned char)v[0]) || isspace((unsigned char)v[n - 1])))
		return false;
	for (i = 0; i < n; i++) {
		if (iscntrl((unsigned char)v[i]))
			return false;
		if ((v[i] == '#' || v[i] == ';') &&
		    (!i || isspace((unsigned char)v[i - 1])))
			return false;
	}
	return true;
}

/*
 * Look a user or group name up in the system's databases (NSS: may block).
 * Return: 0, -ENOENT when there is no such name, or another -errno when the
 * lookup itself failed.
 */
static int lookup_id(bool group, const char *name, id_t *id)
{
	size_t len = 1024;
	char *buf;
	int ret;

	for (;;) {
		buf = malloc(len);
		if (!buf)
			return -ENOMEM;
		if (group) {
			struct group gr, *res;

			ret = getgrnam_r(name, &gr, buf, len, &res);
			if (!ret && res)
				*id = res->gr_gid;
			else if (!ret)
				ret = ENOENT;
		} else {
			struct passwd pw, *res;

			ret = getpwnam_r(name, &pw, buf, len, &res);
			if (!ret && res)
				*id = res->pw_uid;
			else if (!ret)
				ret = ENOENT;
		}
		free(buf);
		if (ret != ERANGE || len >= (1u << 24))
			break;
		len *= 2;
	}
	/* Some NSS modules report "not found" as one of these. */
	if (ret == ESRCH || ret == EBADF || ret == EPERM)
		ret = ENOENT;
	return -ret;
}

/* ---- the types ----------------------------------------------------- */

static void range_none(const struct key *k, char *buf, size_t len)
{
	(void)k;
	snprintf(buf, len, "%s", "");
}

/* "auto", or "GPU-" and 32 hex digits in groups of 8-4-4-4-12. */
static bool gpu_name_ok(const char *v)
{
	static const char shape[] = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
	size_t i;

	if (!strcmp(v, "auto") || !strcmp(v, "standin"))
		return true;
	if (strlen(v) != sizeof(shape) - 1)
		return false;
	for (i = 0; shape[i]; i++)
		if (shape[i] == 'x' ? !isxdigit((unsigned char)v[i])
				    : v[i] != shape[i])
			return false;
	return true;
}

/* "" or HOST:PORT entries separated by commas, no blanks: a host of
 * letters, digits, dots, dashes (or an IPv6 address in brackets). */
static bool nodes_ok(const char *v)
{
	const char *p = v, *colon;
	unsigned long port;
	char *end;

	while (*p) {
		colon = p + strcspn(p, ",");
		while (colon > p && *colon != ':')
			colon--;
		if (colon == p || *colon != ':')
			return false;
		for (; p < colon; p++)
			if (!isalnum((unsigned char)*p) &&
			    !strchr(".-_[]:", *p))
				return false;
		errno = 0;
		port = strtoul(colon + 1, &end, 10);
		if (errno || end == colon + 1 || port < 1 || port > 65535 ||
		    (*end && *end != ',') || !isdigit((unsigned char)colon[1]))
			return false;
		p = *end ? end + 1 : end;
		if (*end && !*p)
			return false;
	}
	return true;
}

static int set_string(struct kvmemd_config *c, const struct key *k,
		      const char *v, char *msg, size_t len)
{
	size_t n = strlen(v);
	id_t gid;
	int ret;

	if (n >= k->size) {
		snprintf(msg, len, "\"%s\" is %zu bytes long, more than %zu", v,
			 n, k->size - 1);
		return -EINVAL;
	}
	if (!text_ok(v)) {
		snprintf(msg, len,
			 "\"%s\" has a control character, a blank at an end, "
			 "or a '#' or ';' at the start or after a blank",
			 v);
		return -EINVAL;
	}
	if (k->type == KEY_GPU && !gpu_name_ok(v)) {
		snprintf(msg, len,
			 "\"%s\" is not auto, standin nor a GPU UUID as "
			 "nvidia-smi -L shows it (GPU-8c3b1f2a-...)",
			 v);
		return -EINVAL;
	}
	if (k->type == KEY_NODES && !nodes_ok(v)) {
		snprintf(msg, len,
			 "\"%s\" is not a list of HOST:PORT, separated by "
			 "commas (port 1-65535)",
			 v);
		return -EINVAL;
	}
	if (k->type == KEY_GROUP && n) {
		ret = lookup_id(true, v, &gid);
		if (ret == -ENOENT) {
			snprintf(msg, len, "no such group \"%s\"", v);
			return -EINVAL;
		} else if (ret) {
			snprintf(msg, len, "cannot look group \"%s\" up: %s", v,
				 strerror(-ret));
			return -EINVAL;
		}
	}
	memset(field(c, k), 0, k->size);
	memcpy(field(c, k), v, n);
	return 0;
}

static void format_string(const struct kvmemd_config *c, const struct key *k,
			  char *buf, size_t len)
{
	snprintf(buf, len, "%.*s", (int)k->size, (const char *)cfield(c, k));
}

/* One entry of an id list: digits are an id, anything else a name. */
static int parse_id(bool group, const char *tok, id_t *id, char *msg,
		    size_t len)
{
	const char *what = group ? "group" : "user";
	uint64_t v;
	int ret;

	if (tok[strspn(tok, "0123456789")] == '\0') {
		/* (uid_t)-1 means "no change" to chown() and setreuid() */
		if (parse_uint(tok, &v) ||
		    (group ? (gid_t)v != v || (gid_t)v == (gid_t)-1
			   : (uid_t)v != v || (uid_t)v == (uid_t)-1)) {
			snprintf(msg, len, "\"%s\" is not a valid %cid", tok,
				 group ? 'g' : 'u');
			return -EINVAL;
		}
		*id = (id_t)v;
		return 0;
	}
	ret = lookup_id(group, tok, id);
	if (ret == -ENOENT) {
		snprintf(msg, len, "no such %s \"%s\"", what, tok);
		return -EINVAL;
	} else if (ret) {
		snprintf(msg, len, "cannot look %s \"%s\" up: %s", what, tok,
			 strerror(-ret));
		return -EINVAL;
	}
	return 0;
}

static int set_ids(struct kvmemd_config *c, const struct key *k, const char *v,
		   char *msg, size_t len)
{
	bool group = k->type == KEY_GIDS;
	id_t ids[KVMEMD_MAX_IDS];
	unsigned int n = 0, i;
	char tok[256];
	size_t tl;
	int ret;

	for (;;) {
		v += strspn(v, ID_SEPARATORS);
		if (!*v)
			break;
		tl = strcspn(v, ID_SEPARATORS);
		if (tl >= sizeof(tok)) {
			snprintf(msg, len, "\"%.*s\" is not a %s", (int)tl, v,
				 group ? "group" : "user");
			return -EINVAL;
		}
		if (n == KVMEMD_MAX_IDS) {
			snprintf(msg, len, "more than %d entries",
				 KVMEMD_MAX_IDS);
			return -EINVAL;
		}
		memcpy(tok, v, tl);
		tok[tl] = '\0';
		v += tl;
		ret = parse_id(group, tok, &ids[n], msg, len);
		if (ret)
			return ret;
		n++;
	}
	memset(field(c, k), 0, k->size);
	for (i = 0; i < n; i++) {
		if (group)
			((gid_t *)field(c, k))[i] = (gid_t)ids[i];
		else
			((uid_t *)field(c, k))[i] = (uid_t)ids[i];
	}
	*count_field(c, k) = n;
	return 0;
}

static void format_ids(const struct kvmemd_config *c, const struct key *k,
		       char *buf, size_t len)
{
	unsigned int n = *ccount_field(c, k), i;
	size_t at = 0;
	id_t id;

	buf[0] = '\0';
	if (n > KVMEMD_MAX_IDS)
		n = KVMEMD_MAX_IDS;
	for (i = 0; i < n && at < len; i++) {
		if (k->type == KEY_GIDS)
			id = ((const gid_t *)cfield(c, k))[i];
		else
			id = ((const uid_t *)cfield(c, k))[i];
		at += snprintf(buf + at, len - at, "%s%lu", i ? "," : "",
			       (unsigned long)id);
	}
}

/*
 * Blank-separated entries GROUP:USER[,USER...], names or ids; each group
 * once and each of its users once, so that format_publishers() writes
 * them back in the same order. Whether the groups are tenants is
 * kvmemd_config_check()'s to say: daemon.tenants may come later.
 */
static int set_publishers(struct kvmemd_config *c, const struct key *k,
			  const char *v, char *msg, size_t len)
{
	struct kvmemd_publisher pub[KVMEMD_MAX_PUBLISHERS];
	unsigned int n = 0, first, i;
	char tok[256], *user, *next;
	id_t gid, uid;
	size_t tl;
	int ret;

	for (;;) {
		v += strspn(v, ID_BLANKS);
		if (!*v)
			break;
		tl = strcspn(v, ID_BLANKS);
		snprintf(tok, sizeof(tok), "%.*s", (int)tl, v);
		user = strchr(tok, ':');
		/* A group, a colon, and users none of which is empty. */
		if (tl >= sizeof(tok) || !user || user == tok || !user[1] ||
		    strstr(user, ",,") || tok[tl - 1] == ',') {
			snprintf(msg, len,
				 "\"%.*s\" is not GROUP:USER[,USER...]",
				 (int)tl, v);
			return -EINVAL;
		}
		v += tl;
		*user++ = '\0';
		ret = parse_id(true, tok, &gid, msg, len);
		if (ret)
			return ret;
		for (i = 0; i < n; i++) {
			if (pub[i].gid == (gid_t)gid) {
				snprintf(msg, len, "group %s is listed twice",
					 tok);
				return -EINVAL;
			}
		}
		for (first = n; user; user = next) {
			next = strchr(user, ',');
			if (next)
				*next++ = '\0';
			ret = parse_id(false, user, &uid, msg, len);
			if (ret)
				return ret;
			for (i = first; i < n; i++) {
				if (pub[i].uid == (uid_t)uid) {
					snprintf(msg, len,
						 "user %s is listed twice for "
						 "group %s",
						 user, tok);
					return -EINVAL;
				}
			}
			if (n == KVMEMD_MAX_PUBLISHERS) {
				snprintf(msg, len, "more than %d users in all",
					 KVMEMD_MAX_PUBLISHERS);
				return -EINVAL;
			}
			pub[n].gid = (gid_t)gid;
			pub[n].uid = (uid_t)uid;
			n++;
		}
	}
	memset(field(c, k), 0, k->size);
	memcpy(field(c, k), pub, n * sizeof(*pub));
	*count_field(c, k) = n;
	return 0;
}

static void format_publishers(const struct kvmemd_config *c,
			      const struct key *k, char *buf, size_t len)
{
	const struct kvmemd_publisher *pub = cfield(c, k);
	unsigned int n = *ccount_field(c, k), i;
	size_t at = 0;

	buf[0] = '\0';
	if (n > KVMEMD_MAX_PUBLISHERS)
		n = KVMEMD_MAX_PUBLISHERS;
	for (i = 0; i < n && at < len; i++) {
		if (i && pub[i].gid == pub[i - 1].gid)
			at += snprintf(buf + at, len - at, ",%lu",
				       (unsigned long)pub[i].uid);
		else
			at += snprintf(buf + at, len - at, "%s%lu:%lu",
				       i ? " " : "", (unsigned long)pub[i].gid,
				       (unsigned long)pub[i].uid);
	}
}

static void range_number(const struct key *k, char *buf, size_t len)
{
	char lo[32], hi[32];

	if (k->type == KEY_SIZE || k->type == KEY_SIZE_PCT) {
		fmt_size(k->min, lo, sizeof(lo));
		fmt_size(k->max, hi, sizeof(hi));
	} else {
		snprintf(lo, sizeof(lo), "%llu", (unsigned long long)k->min);
		snprintf(hi, sizeof(hi), "%llu", (unsigned long long)k->max);
	}
	snprintf(buf, len, "%s..%s", lo, hi);
}

static int set_number(struct kvmemd_config *c, const struct key *k,
		      const char *v, char *msg, size_t len)
{
	const char *what = k->type == KEY_SIZE	 ? "a size"
			   : k->type == KEY_POW2 ? "a power of two"
						 : "an integer";
	char range[64];
	bool ok;
	uint64_t x;

	if (k->type == KEY_SIZE)
		ok = !parse_size(v, &x);
	else
		ok = !parse_uint(v, &x);
	ok = ok && x >= k->min && x <= k->max;
	if (ok && k->type == KEY_POW2)
		ok = !(x & (x - 1));
	if (!ok) {
		range_number(k, range, sizeof(range));
		snprintf(msg, len, "\"%s\" is not %s in %s", v, what, range);
		return -EINVAL;
	}
	if (k->type == KEY_SIZE)
		*(uint64_t *)field(c, k) = x;
	else
		*(uint32_t *)field(c, k) = (uint32_t)x;
	return 0;
}

/*
 * A decimal number as strtod() reads it, but starting with a digit (no
 * sign, blank, "inf" or "nan") and without hexadecimal ("0x1p3").
 */
static int set_real(struct kvmemd_config *c, const struct key *k, const char *v,
		    char *msg, size_t len)
{
	char range[64], *end = NULL;
	double x = -1;

	errno = 0;
	if (isdigit((unsigned char)*v) && !strpbrk(v, "xX"))
		x = strtod(v, &end);
	if (!end || *end || errno || x < (double)k->min || x > (double)k->max) {
		range_number(k, range, sizeof(range));
		snprintf(msg, len, "\"%s\" is not a number in %s", v, range);
		return -EINVAL;
	}
	*(double *)field(c, k) = x;
	return 0;
}

/* The shortest form that reads back to the same double. */
static void format_real(const struct kvmemd_config *c, const struct key *k,
			char *buf, size_t len)
{
	double x = *(const double *)cfield(c, k);
	int prec;

	for (prec = 6; prec < 17; prec++) {
		snprintf(buf, len, "%.*g", prec, x);
		if (strtod(buf, NULL) == x)
			return;
	}
	snprintf(buf, len, "%.17g", x);
}

/* A size, or a percentage of what the daemon finds at start. */
static int set_size_pct(struct kvmemd_config *c, const struct key *k,
			const char *v, char *msg, size_t len)
{
	uint32_t *pct = count_field(c, k);
	size_t n = strlen(v);
	char range[64], num[32];
	uint64_t x;

	if (n && v[n - 1] == '%' && n < sizeof(num)) {
		snprintf(num, sizeof(num), "%.*s", (int)(n - 1), v);
		if (!parse_uint(num, &x) && x >= 1 && x <= 100) {
			*pct = (uint32_t)x;
			*(uint64_t *)field(c, k) = 0;
			return 0;
		}
	} else if (!parse_size(v, &x) && x >= k->min && x <= k->max) {
		*pct = 0;
		*(uint64_t *)field(c, k) = x;
		return 0;
	}
	range_number(k, range, sizeof(range));
	snprintf(msg, len,
		 "\"%s\" is not a size in %s or a percentage in 1%%..100%%", v,
		 range);
	return -EINVAL;
}

static void format_size_pct(const struct kvmemd_config *c, const struct key *k,
			    char *buf, size_t len)
{
	uint32_t pct = *(const uint32_t *)((const char *)c + k->count_off);

	if (pct)
		snprintf(buf, len, "%u%%", pct);
	else
		fmt_size(*(const uint64_t *)cfield(c, k), buf, len);
}

static void format_number(const struct kvmemd_config *c, const struct key *k,
			  char *buf, size_t len)
{
	if (k->type == KEY_SIZE)
		fmt_size(*(const uint64_t *)cfield(c, k), buf, len);
	else
		snprintf(buf, len, "%u", *(const uint32_t *)cfield(c, k));
}

/* The canonical names, the first of each value: "yes, no, auto". */
static void range_enum(const struct key *k, char *buf, size_t len)
{
	const struct key_name *n, *m;
	size_t at = 0;

	buf[0] = '\0';
	for (n = k->names; n->name && at < len; n++) {
		for (m = k->names; m->value != n->value; m++)
			;
		if (m == n)
			at += snprintf(buf + at, len - at, "%s%s",
				       at ? ", " : "", n->name);
	}
}

static int set_enum(struct kvmemd_config *c, const struct key *k, const char *v,
		    char *msg, size_t len)
{
	const struct key_name *n;
	char names[128];

	for (n = k->names; n->name; n++) {
		if (!strcasecmp(v, n->name)) {
			*(int *)field(c, k) = n->value;
			return 0;
		}
	}
	range_enum(k, names, sizeof(names));
	snprintf(msg, len, "\"%s\" is not one of %s", v, names);
	return -EINVAL;
}

static void format_enum(const struct kvmemd_config *c, const struct key *k,
			char *buf, size_t len)
{
	int v = *(const int *)cfield(c, k);
	const struct key_name *n;

	for (n = k->names; n->name; n++) {
		if (n->value == v) {
			snprintf(buf, len, "%s", n->name);
			return;
		}
	}
	snprintf(buf, len, "%d", v); /* not a value the file can set */
}

static const struct key_type_ops type_ops[] = {
	[KEY_PATH] = { set_string, format_string, range_none, false },
	[KEY_PATH_OPT] = { set_string, format_string, range_none, true },
	[KEY_GROUP] = { set_string, format_string, range_none, true },
	[KEY_UIDS] = { set_ids, format_ids, range_none, true },
	[KEY_GIDS] = { set_ids, format_ids, range_none, true },
	[KEY_U32] = { set_number, format_number, range_number, false },
	[KEY_POW2] = { set_number, format_number, range_number, false },
	[KEY_SIZE] = { set_number, format_number, range_number, false },
	[KEY_REAL] = { set_real, format_real, range_number, false },
	[KEY_SIZE_PCT] = { set_size_pct, format_size_pct, range_number, false },
	[KEY_ENUM] = { set_enum, format_enum, range_enum, false },
	[KEY_GPU] = { set_string, format_string, range_none, false },
	[KEY_PUBLISHERS] = { set_publishers, format_publishers, range_none,
			     true },
	[KEY_NODES] = { set_string, format_string, range_none, true },
};
_Static_assert(ARRAY_SIZE(type_ops) == KEY_NTYPES, "type_ops covers the types");

/* ---- keys ---------------------------------------------------------- */

static const struct key *find_key(const char *section, const char *name)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(keys); i++)
		if (!strcmp(keys[i].section, section) &&
		    !strcmp(keys[i].name, name))
			return &keys[i];
	return NULL;
}

/* The section as spelled in keys[], or NULL when no key has it. */
static const char *find_section(const char *name)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(keys); i++)
		if (!strcmp(keys[i].section, name))
			return keys[i].section;
	return NULL;
}

/* Set @k to @v; on error "section.key: what is wrong" in @msg. */
static int set_key(struct kvmemd_config *c, const struct key *k, const char *v,
		   char *msg, size_t len)
{
	size_t n = (size_t)snprintf(msg, len, "%s.%s: ", k->section, k->name);

	/* The set functions write what is wrong after the prefix. */
	if (n >= len)
		n = 0;
	if (!*v && !type_ops[k->type].empty_ok) {
		snprintf(msg + n, len - n, "empty value");
		return -EINVAL;
	}
	return type_ops[k->type].set(c, k, v, msg + n, len - n);
}

/*
 * Write the built-in @dir/@file into @buf; false (and @buf all 0) when it
 * does not fit.
 */
static bool default_path(char *buf, size_t len, const char *dir,
			 const char *file)
{
	int n = snprintf(buf, len, "%s/%s", dir, file);

	if (n < 0 || (size_t)n >= len) {
		memset(buf, 0, len);
		return false;
	}
	return true;
}

/* $@name when it is an absolute path, as the XDG base directory spec asks. */
static const char *xdg_dir(const char *name)
{
	const char *v = getenv(name);

	return v && v[0] == '/' ? v : NULL;
}

/**
 * kvmemd_config_defaults() - the built-in configuration
 * @c: filled in whole (padding and the bytes past each string zeroed)
 *
 * Context: reads the environment and the group database (may block).
 */
void kvmemd_config_defaults(struct kvmemd_config *c)
{
	const char *state;
	id_t gid;

	memset(c, 0, sizeof(*c));
	/* Where clients look (kvmem_socket_path()); both sockets in one
	 * directory, or both in ./run. */
	if (kvmem__socket_path(c->socket, sizeof(c->socket), "kvmemd.sock") ||
	    kvmem__socket_path(c->admin_socket, sizeof(c->admin_socket),
			       "kvmemd-admin.sock")) {
		memset(c->socket, 0, sizeof(c->socket));
		memset(c->admin_socket, 0, sizeof(c->admin_socket));
		default_path(c->socket, sizeof(c->socket), "./run",
			     "kvmemd.sock");
		default_path(c->admin_socket, sizeof(c->admin_socket), "./run",
			     "kvmemd-admin.sock");
	}
	if (geteuid() == 0) {
		default_path(c->state_dir, sizeof(c->state_dir), "/var/lib",
			     "kvmem");
	} else {
		state = xdg_dir("XDG_STATE_HOME");
		if (!state || !default_path(c->state_dir, sizeof(c->state_dir),
					    state, "kvmem"))
			default_path(c->state_dir, sizeof(c->state_dir),
				     "./run", "state");
	}
	if (!lookup_id(true, "kvmem", &gid)) {
		strcpy(c->group, "kvmem");
		c->allow_gids[0] = (gid_t)gid;
		c->n_allow_gids = 1;
	}
	if (!lookup_id(true, "kvmem-admin", &gid))
		strcpy(c->admin_group, "kvmem-admin");
	c->allow_uids[0] = getuid();
	c->n_allow_uids = 1;
	c->max_sessions = 64;
	c->max_sessions_per_uid = 32;
	c->log_level = LOG_INFO;
	c->host_bytes = GIB;
	c->session_default_bytes = 64 * MIB;
	c->session_max_bytes = 512 * MIB;
	c->hugepages = KVMEMD_AUTO;
	c->mlock = KVMEMD_AUTO;
	snprintf(c->gpu_device, sizeof(c->gpu_device), "auto");
	c->sq_entries = 256;
	c->max_entries = 8192;
	c->poll_idle_us = 200;
	c->max_seqs = 4096;
	c->scrub_rate = 16 * MIB;
	c->scrub_rate_max = 256 * MIB;
	c->low_watermark = 10;
	c->high_watermark = 20;
	c->stale_tokens = 1024;
	c->offload = 1;
	c->archive_heat = 1.0;
	c->archive_format = KVMEMD_ARCHIVE_SAME;
	c->archive_codec = KVMEM_CODEC_GOLAY24;
	c->archive_rate = 64 * MIB;
	c->prefix_bytes = 256 * MIB;
	c->prefix_uid_bytes = 64 * MIB;
	c->prefix_idle_s = 3600;
	c->prefix_keep = KVMEMD_YES;
	c->remote_timeout_ms = 1000;
	c->remote_retries = 5;
	c->remote_ttl_s = 7 * 24 * 3600;
	c->remote_publish = KVMEMD_YES;
	c->remote_queue_bytes = 64 * MIB;
	c->keep_sessions = KVMEMD_YES;
	c->keep_on_crash = KVMEMD_YES;
	c->resume_seconds = 60;
	c->store_size = GIB;
	c->store_queue_depth = 32;
	c->store_io_bytes = MIB;
	c->store_retain_percent = 25;
	c->store_retain_s = 7 * 24 * 3600;
	c->verify_on_seal = 1;
	c->events = 1024;
	c->threads = 2;
	c->queue_depth = 64;
}

/**
 * kvmemd_config_set() - set one key, as the file would
 * @c: the configuration; unchanged on error
 * @key: "section.key"
 * @value: the value as text, taken as it is (no blanks are trimmed)
 * @err, @errlen: receives "section.key: what is wrong" on error
 *
 * Context: names in daemon.group and the id lists are looked up in the
 * user and group databases (may block).
 * Return: 0 or -EINVAL.
 */
int kvmemd_config_set(struct kvmemd_config *c, const char *key,
		      const char *value, char *err, size_t errlen)
{
	char msg[MSG_MAX];
	const char *dot = strchr(key, '.');
	size_t i;
	int ret;

	for (i = 0; dot && i < ARRAY_SIZE(keys); i++) {
		const struct key *k = &keys[i];

		if (strlen(k->section) != (size_t)(dot - key) ||
		    strncmp(k->section, key, dot - key) ||
		    strcmp(k->name, dot + 1))
			continue;
		ret = set_key(c, k, value, msg, sizeof(msg));
		if (ret)
			seterr(err, errlen, "%s", msg);
		return ret;
	}
	seterr(err, errlen, "%s: unknown key", key);
	return -EINVAL;
}

/**
 * kvmemd_config_check() - checks across keys
 * @c: the configuration
 * @err, @errlen: receives "section.key: what is wrong" on error
 *
 * Each key's own range is checked when it is set; this checks the keys
 * against each other: session_default_bytes <= session_max_bytes <=
 * host_bytes, sq_entries <= max_entries, two distinct sockets, the groups
 * of prefix.publishers among daemon.tenants.
 *
 * Return: 0 or -EINVAL.
 */
int kvmemd_config_check(const struct kvmemd_config *c, char *err, size_t errlen)
{
	char a[32], b[32];
	unsigned int i, j;

	if (c->n_allow_uids > KVMEMD_MAX_IDS) {
		seterr(err, errlen, "daemon.allow_uids: more than %d entries",
		       KVMEMD_MAX_IDS);
		return -EINVAL;
	}
	if (c->n_allow_gids > KVMEMD_MAX_IDS) {
		seterr(err, errlen, "daemon.allow_gids: more than %d entries",
		       KVMEMD_MAX_IDS);
		return -EINVAL;
	}
	if (c->n_tenant_gids > KVMEMD_MAX_IDS) {
		seterr(err, errlen, "daemon.tenants: more than %d entries",
		       KVMEMD_MAX_IDS);
		return -EINVAL;
	}
	if (c->n_publishers > KVMEMD_MAX_PUBLISHERS) {
		seterr(err, errlen, "prefix.publishers: more than %d users",
		       KVMEMD_MAX_PUBLISHERS);
		return -EINVAL;
	}
	/* A group that is not a tenant would restrict nobody, silently. */
	for (i = 0; i < c->n_publishers; i++) {
		for (j = 0; j < c->n_tenant_gids; j++)
			if (c->tenant_gids[j] == c->publishers[i].gid)
				break;
		if (j == c->n_tenant_gids) {
			seterr(err, errlen,
			       "prefix.publishers: group %lu is not one of "
			       "daemon.tenants",
			       (unsigned long)c->publishers[i].gid);
			return -EINVAL;
		}
	}
	if (c->session_default_bytes > c->session_max_bytes) {
		fmt_size(c->session_default_bytes, a, sizeof(a));
		fmt_size(c->session_max_bytes, b, sizeof(b));
		seterr(err, errlen,
		       "pool.session_default_bytes: %s is more than "
		       "pool.session_max_bytes (%s)",
		       a, b);
		return -EINVAL;
	}
	if (c->session_max_bytes > c->host_bytes) {
		fmt_size(c->session_max_bytes, a, sizeof(a));
		fmt_size(c->host_bytes, b, sizeof(b));
		seterr(err, errlen,
		       "pool.session_max_bytes: %s is more than "
		       "pool.host_bytes (%s)",
		       a, b);
		return -EINVAL;
	}
	/* A percentage is checked when the GPU is found (kvmemd_gpu_open). */
	if (!c->gpu_percent && c->gpu_session_max_bytes > c->gpu_bytes) {
		fmt_size(c->gpu_session_max_bytes, a, sizeof(a));
		fmt_size(c->gpu_bytes, b, sizeof(b));
		seterr(err, errlen,
		       "pool.gpu_session_max_bytes: %s is more than "
		       "pool.gpu_bytes (%s)",
		       a, b);
		return -EINVAL;
	}
	if (c->sq_entries > c->max_entries) {
		seterr(err, errlen,
		       "ring.sq_entries: %u is more than ring.max_entries (%u)",
		       c->sq_entries, c->max_entries);
		return -EINVAL;
	}
	if (c->low_watermark >= c->high_watermark) {
		seterr(err, errlen,
		       "tier.low_watermark: %u is not below "
		       "tier.high_watermark (%u)",
		       c->low_watermark, c->high_watermark);
		return -EINVAL;
	}
	if (c->store_path[0] && c->store_path[0] != '/') {
		seterr(err, errlen, "store.path: \"%s\" is not absolute",
		       c->store_path);
		return -EINVAL;
	}
	if (c->store_io_bytes % KVMEMD_STORE_UNIT) {
		seterr(err, errlen,
		       "store.io_bytes: %llu is not a multiple of %u",
		       (unsigned long long)c->store_io_bytes,
		       KVMEMD_STORE_UNIT);
		return -EINVAL;
	}
	if (!strncmp(c->socket, c->admin_socket, sizeof(c->socket))) {
		seterr(err, errlen,
		       "daemon.admin_socket: \"%.*s\" is daemon.socket too",
		       (int)sizeof(c->admin_socket), c->admin_socket);
		return -EINVAL;
	}
	return 0;
}

/* ---- the file ------------------------------------------------------ */

/*
 * Read one line, without its newline, into @buf.
 * Return: 1, 0 at the end of the file, -E2BIG for a line longer than
 * @size - 1, -EILSEQ for a NUL byte, or -errno for a read error.
 */
static int read_line(FILE *f, char *buf, size_t size)
{
	bool nul = false;
	size_t n = 0;
	int ch;

	errno = 0;
	while ((ch = getc(f)) != EOF && ch != '\n') {
		if (n + 1 >= size)
			return -E2BIG;
		nul |= ch == '\0';
		buf[n++] = (char)ch;
	}
	if (ch == EOF && ferror(f))
		return errno ? -errno : -EIO;
	if (ch == EOF && !n)
		return 0;
	buf[n] = '\0';
	return nul ? -EILSEQ : 1;
}

static char *skip_blanks(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	return s;
}

static char *trim(char *s)
{
	size_t n;

	s = skip_blanks(s);
	n = strlen(s);
	while (n && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
	return s;
}

/* Whether @s starts a comment: '#' or ';' */
static bool is_comment(const char *s)
{
	return *s == '#' || *s == ';';
}

/* The value after '=': blanks and a trailing comment cut off. */
static char *value_of(char *v)
{
	char *p;

	v = skip_blanks(v);
	for (p = v; *p; p++) {
		if (is_comment(p) &&
		    (p == v || isspace((unsigned char)p[-1]))) {
			*p = '\0';
			break;
		}
	}
	return trim(v);
}

/*
 * Parse the lines of @f over @c. Return: 0, -EINVAL with
 * "path:line: ..." in @err, or -errno for a read error.
 */
static int parse_file(struct kvmemd_config *c, FILE *f, const char *path,
		      char *err, size_t errlen)
{
	unsigned int seen[ARRAY_SIZE(keys)] = { 0 }; /* line that set it */
	const char *section = NULL;
	char line[CONFIG_LINE_MAX + 1], msg[MSG_MAX];
	const struct key *k;
	unsigned int lineno = 0;
	char *s, *e, *name, *value;
	int ret;

	for (;;) {
		ret = read_line(f, line, sizeof(line));
		if (ret <= 0)
			break;
		lineno++;
		s = skip_blanks(line);
		if (!*s || is_comment(s))
			continue;
		if (*s == '[') {
			e = strchr(s, ']');
			if (!e) {
				seterr(err, errlen, "%s:%u: missing ']'", path,
				       lineno);
				return -EINVAL;
			}
			*e = '\0';
			name = trim(s + 1);
			e = skip_blanks(e + 1);
			if (*e && !is_comment(e)) {
				seterr(err, errlen, "%s:%u: \"%s\" after [%s]",
				       path, lineno, e, name);
				return -EINVAL;
			}
			section = find_section(name);
			if (!section) {
				seterr(err, errlen,
				       "%s:%u: unknown section [%s]", path,
				       lineno, name);
				return -EINVAL;
			}
			continue;
		}
		e = strchr(s, '=');
		if (!e) {
			seterr(err, errlen,
			       "%s:%u: \"%s\" is not \"key = value\"", path,
			       lineno, trim(s));
			return -EINVAL;
		}
		*e = '\0';
		name = trim(s);
		value = value_of(e + 1);
		if (!*name) {
			seterr(err, errlen, "%s:%u: no key before '='", path,
			       lineno);
			return -EINVAL;
		}
		if (!section) {
			seterr(err, errlen,
			       "%s:%u: %s: key before any [section]", path,
			       lineno, name);
			return -EINVAL;
		}
		k = find_key(section, name);
		if (!k) {
			seterr(err, errlen, "%s:%u: %s.%s: unknown key", path,
			       lineno, section, name);
			return -EINVAL;
		}
		if (seen[k - keys]) {
			seterr(err, errlen,
			       "%s:%u: %s.%s: set twice, first on line %u",
			       path, lineno, section, name, seen[k - keys]);
			return -EINVAL;
		}
		seen[k - keys] = lineno;
		ret = set_key(c, k, value, msg, sizeof(msg));
		if (ret) {
			seterr(err, errlen, "%s:%u: %s", path, lineno, msg);
			return ret;
		}
	}
	if (ret == -E2BIG || ret == -EILSEQ) {
		seterr(err, errlen, "%s:%u: %s", path, lineno + 1,
		       ret == -E2BIG ? "line longer than 1023 characters"
				     : "NUL byte in the line");
		return -EINVAL;
	}
	if (ret < 0)
		seterr(err, errlen, "%s: %s", path, strerror(-ret));
	return ret;
}

int kvmemd_config_read(struct kvmemd_config *c, FILE *f, const char *name,
		       char *err, size_t errlen)
{
	struct kvmemd_config tmp;
	char msg[MSG_MAX];
	int ret;

	memcpy(&tmp, c, sizeof(tmp));
	ret = parse_file(&tmp, f, name, err, errlen);
	if (ret)
		return ret;
	ret = kvmemd_config_check(&tmp, msg, sizeof(msg));
	if (ret) {
		seterr(err, errlen, "%s: %s", name, msg);
		return ret;
	}
	memcpy(c, &tmp, sizeof(*c));
	return 0;
}

/**
 * kvmemd_config_load() - read a configuration file over @c
 * @c: the configuration, usually from kvmemd_config_defaults(); changed
 *     only when the whole file and kvmemd_config_check() pass
 * @path: the file
 * @must_exist: when 0, a missing file is not an error
 * @err, @errlen: receives "path:line: section.key: what is wrong" (or
 *     "path: ..." when no line is at fault) on error
 *
 * Context: may block (file, user and group databases).
 * Return: 0, -errno when the file cannot be read, -EINVAL when it is
 * malformed or fails kvmemd_config_check().
 */
int kvmemd_config_load(struct kvmemd_config *c, const char *path,
		       int must_exist, char *err, size_t errlen)
{
	FILE *f;
	int ret;

	f = fopen(path, "re");
	if (!f) {
		ret = -errno;
		if (ret == -ENOENT && !must_exist)
			return 0;
		seterr(err, errlen, "%s: %s", path, strerror(-ret));
		return ret;
	}
	ret = kvmemd_config_read(c, f, path, err, errlen);
	fclose(f);
	return ret;
}

/**
 * kvmemd_config_print() - write @c as a configuration file
 * @c: the configuration
 * @f: where to
 *
 * Every key, by section, each after a comment line saying what it is, its
 * range, its built-in default and whether SIGHUP reloads it. Loading the
 * output over any configuration gives @c again, byte for byte.
 *
 * Context: computes the defaults for the comments (may block).
 */
void kvmemd_config_print(const struct kvmemd_config *c, FILE *f)
{
	const char *section = NULL;
	struct kvmemd_config def;
	char val[CONFIG_LINE_MAX + 1], dval[CONFIG_LINE_MAX + 1], range[128];
	size_t i;

	kvmemd_config_defaults(&def);
	fprintf(f, "# kvmemd configuration; see kvmemd.conf(5)\n");
	for (i = 0; i < ARRAY_SIZE(keys); i++) {
		const struct key *k = &keys[i];
		const struct key_type_ops *ops = &type_ops[k->type];

		if (section != k->section) {
			section = k->section;
			fprintf(f, "\n[%s]\n", section);
		}
		ops->format(c, k, val, sizeof(val));
		ops->format(&def, k, dval, sizeof(dval));
		ops->range(k, range, sizeof(range));
		fprintf(f, "# %s%s%s%s; default %s; %s\n", k->desc,
			*range ? " (" : "", range, *range ? ")" : "",
			*dval ? dval : "empty",
			k->reload ? "SIGHUP reloads" : "restart to change");
		fprintf(f, "%s =%s%s\n", k->name, *val ? " " : "", val);
	}
}

/**
 * kvmemd_config_reload() - take the policy keys of @fresh into @live
 * @live: the running configuration
 * @fresh: a configuration just loaded and checked
 *
 * Copies the keys marked reload in keys[]; paths, the pool size and the
 * worker pool keep their values until a restart.
 */
void kvmemd_config_reload(struct kvmemd_config *live,
			  const struct kvmemd_config *fresh)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(keys); i++) {
		const struct key *k = &keys[i];

		if (!k->reload)
			continue;
		memcpy(field(live, k), cfield(fresh, k), k->size);
		if (k->type == KEY_UIDS || k->type == KEY_GIDS ||
		    k->type == KEY_PUBLISHERS)
			*count_field(live, k) = *ccount_field(fresh, k);
	}
}

/**
 * kvmemd_config_policy() - the keys that change at run time, with values
 * @c: the configuration
 * @fn: called for each key marked reload, in file order, with its
 *      "section.key", its value as text (numbers in decimal without
 *      suffixes, yes/no keys as true/false) and its kind
 * @ctx: passed to @fn
 */
void kvmemd_config_policy(const struct kvmemd_config *c,
			  void (*fn)(void *ctx, const char *key,
				     const char *value,
				     enum kvmemd_value_kind kind),
			  void *ctx)
{
	char name[64], val[CONFIG_LINE_MAX + 1];
	enum kvmemd_value_kind kind;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(keys); i++) {
		const struct key *k = &keys[i];

		if (!k->reload)
			continue;
		snprintf(name, sizeof(name), "%s.%s", k->section, k->name);
		kind = KVMEMD_VALUE_STRING;
		if (k->type == KEY_U32 || k->type == KEY_POW2) {
			snprintf(val, sizeof(val), "%u",
				 *(const uint32_t *)cfield(c, k));
			kind = KVMEMD_VALUE_NUMBER;
		} else if (k->type == KEY_SIZE) {
			snprintf(val, sizeof(val), "%llu",
				 (unsigned long long)*(const uint64_t *)cfield(
					 c, k));
			kind = KVMEMD_VALUE_NUMBER;
		} else if (k->type == KEY_REAL) {
			format_real(c, k, val, sizeof(val));
			kind = KVMEMD_VALUE_NUMBER;
		} else if (k->names == booleans) {
			snprintf(val, sizeof(val), "%s",
				 *(const int *)cfield(c, k) ? "true" : "false");
			kind = KVMEMD_VALUE_BOOL;
		} else {
			type_ops[k->type].format(c, k, val, sizeof(val));
		}
		fn(ctx, name, val, kind);
	}
}

/**
 * kvmemd_config_reloads() - whether a key takes a new value without a
 * restart
 * @key: "section.key"
 *
 * Return: 1 or 0, or -EINVAL for an unknown key.
 */
int kvmemd_config_reloads(const char *key)
{
	const char *dot = strchr(key, '.');
	size_t i;

	for (i = 0; dot && i < ARRAY_SIZE(keys); i++)
		if (strlen(keys[i].section) == (size_t)(dot - key) &&
		    !strncmp(keys[i].section, key, dot - key) &&
		    !strcmp(keys[i].name, dot + 1))
			return keys[i].reload;
	return -EINVAL;
}
