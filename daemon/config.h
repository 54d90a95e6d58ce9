/* SPDX-License-Identifier: MIT */
/*
 * config.h - kvmemd's configuration: built-in defaults, overridden by an
 * INI-style file (/etc/kvmem/kvmemd.conf) and then by command-line flags
 *
 * Included by config.c, by kvmemd.h (so by every file of the daemon) and
 * by the tests of the parser.
 */
#ifndef KVMEMD_CONFIG_H
#define KVMEMD_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/un.h>

#define KVMEMD_CONFIG_PATH "/etc/kvmem/kvmemd.conf"
#define KVMEMD_MAX_IDS 32
/* prefix.publishers: users in all, whatever their groups */
#define KVMEMD_MAX_PUBLISHERS 32
#define KVMEMD_SOCK_PATH_MAX sizeof(((struct sockaddr_un *)0)->sun_path)

enum kvmemd_tristate {
	KVMEMD_NO = 0,
	KVMEMD_YES = 1,
	KVMEMD_AUTO = 2,
};

/* A user that may publish the prefixes of a group of daemon.tenants. */
struct kvmemd_publisher {
	gid_t gid;
	uid_t uid;
};

/* tier.archive_format: each session's own format, another codec */
#define KVMEMD_ARCHIVE_SAME (-1)

struct kvmemd_config {
	/* [daemon] */
	char socket[KVMEMD_SOCK_PATH_MAX];
	char admin_socket[KVMEMD_SOCK_PATH_MAX];
	char state_dir[256];
	char group[64]; /* owner group of the sockets; "" leaves it */
	char admin_group[64]; /* may use the admin socket; "" for none */
	uid_t allow_uids[KVMEMD_MAX_IDS];
	unsigned int n_allow_uids;
	gid_t allow_gids[KVMEMD_MAX_IDS];
	unsigned int n_allow_gids;
	/* groups each a tenant of prefix sharing; the first a client is in */
	gid_t tenant_gids[KVMEMD_MAX_IDS];
	unsigned int n_tenant_gids;
	uint32_t max_sessions;
	uint32_t max_sessions_per_uid;
	int keep_sessions; /* KVMEMD_YES or KVMEMD_NO */
	int keep_on_crash; /* KVMEMD_YES or KVMEMD_NO */
	uint32_t resume_seconds; /* a kept session waits this long */
	int log_level; /* LOG_ERR .. LOG_DEBUG */
	/* [pool] */
	uint64_t host_bytes; /* all sessions' arenas together */
	uint64_t session_default_bytes; /* quota when a client asks for 0 */
	uint64_t session_max_bytes;
	int hugepages; /* enum kvmemd_tristate */
	int mlock; /* enum kvmemd_tristate */
	char gpu_device[48]; /* "auto", or a UUID as nvidia-smi -L shows it */
	uint64_t gpu_bytes; /* device memory of all sessions; 0: no GPU pool */
	uint32_t gpu_percent; /* or this percent of the GPU's memory; 0: not */
	uint64_t gpu_session_max_bytes; /* 0: gpu_bytes */
	uint64_t gpu_pinned_bytes; /* host memory pinned for the GPU tier;
				    * 0: as much as host_bytes */
	/* [ring] */
	uint32_t sq_entries; /* default SQ size */
	uint32_t max_entries; /* largest SQ or CQ a client may ask for */
	uint32_t poll_idle_us; /* SQ polling after the last SQE; 0: never */
	uint32_t max_seqs; /* sequences per session */
	/* [scrub] */
	uint64_t scrub_rate; /* patrol bytes per second; 0: none */
	uint64_t scrub_rate_max; /* the most adapting may raise it to */
	double scrub_target_ue; /* uncorrectable words a day; 0: no adapting */
	uint32_t scrub_cycle; /* seconds per patrol pass; 0: use the rate */
	int verify_on_seal; /* 0 or 1 */
	int allow_inject; /* 0 or 1 */
	uint32_t events; /* error events kept in memory */
	/* [tier] */
	uint32_t low_watermark, high_watermark; /* percent of an arena free */
	uint32_t stale_tokens; /* token age of a page that leaves first */
	int offload; /* 0 or 1 */
	uint32_t archive_tokens; /* token age of an archived page; 0: none */
	double archive_heat; /* the most heat (0..1) it may have */
	/* payload bits a value a session's sealed pages may average; the
	 * least attended go to the archive format first; 0: no budget */
	double bits_budget;
	/* as at a session's admission; a format or KVMEMD_ARCHIVE_SAME */
	int archive_format, archive_codec;
	uint64_t archive_rate; /* bytes of pages a second */
	/* [prefix] */
	uint64_t prefix_bytes; /* published blocks in all; 0: no sharing */
	uint64_t prefix_uid_bytes; /* of one tenant; 0: prefix_bytes */
	uint32_t prefix_idle_s; /* a block unused this long goes; 0: never */
	int prefix_keep; /* KVMEMD_YES or KVMEMD_NO */
	/* the groups that restrict who publishes, each with its users, a
	 * group's together, in the order first listed */
	struct kvmemd_publisher publishers[KVMEMD_MAX_PUBLISHERS];
	unsigned int n_publishers;
	/* [remote] */
	char remote_seeds[512]; /* "" for no shared tier */
	char remote_credentials[256]; /* "" for none */
	uint32_t remote_timeout_ms, remote_retries;
	uint32_t remote_ttl_s; /* 0: never */
	int remote_publish; /* KVMEMD_YES or KVMEMD_NO */
	uint64_t remote_queue_bytes;
	/* [store] */
	char store_path[256]; /* "" for none */
	uint64_t store_size;
	int store_reformat; /* 0 or 1 */
	uint32_t store_queue_depth;
	uint64_t store_io_bytes;
	int store_engine; /* enum kvmemd_store_engine */
	/* published blocks on the store, at most: bytes, or this percent of
	 * it; both 0: none there */
	uint64_t store_retain_bytes;
	uint32_t store_retain_percent;
	uint32_t store_retain_s; /* a cold block unattached this long goes */
	/* [workers] */
	uint32_t threads;
	uint32_t queue_depth;
};

/*
 * kvmemd_config_defaults() - the built-in configuration
 *
 * Paths depend on who runs the daemon: as root, /run/kvmem/kvmemd.sock,
 * /run/kvmem/kvmemd-admin.sock and /var/lib/kvmem; otherwise
 * $XDG_RUNTIME_DIR/kvmem/... and $XDG_STATE_HOME/kvmem when those are set
 * (to absolute paths), else ./run/... and ./run/state. allow_uids holds the
 * daemon's uid, allow_gids the group "kvmem" when it exists, and group is
 * "kvmem" when it exists, else "".
 */
void kvmemd_config_defaults(struct kvmemd_config *c);

/*
 * kvmemd_config_read() - kvmemd_config_load() of an open stream, @name
 * standing for its path in the messages (the fuzz harness reads from
 * memory)
 */
int kvmemd_config_read(struct kvmemd_config *c, FILE *f, const char *name,
		       char *err, size_t errlen);

/*
 * kvmemd_config_load() - read a configuration file over @c
 * @c: the configuration, usually from kvmemd_config_defaults()
 * @path: the file
 * @must_exist: when 0, a missing file is not an error (the default path)
 * @err, @errlen: receives "path:line: key: what is wrong" on error
 *
 * The file is all or nothing: on error @c is unchanged.
 *
 * Return: 0, -ENOENT/-EACCES/... when it cannot be read, -EINVAL when it is
 * malformed.
 */
int kvmemd_config_load(struct kvmemd_config *c, const char *path,
		       int must_exist, char *err, size_t errlen);

/*
 * kvmemd_config_set() - set one key, as the file would
 * @c: the configuration
 * @key: "section.key", e.g. "daemon.socket"
 * @value: the value as text
 * @err, @errlen: receives "key: what is wrong" on error
 *
 * Return: 0 or -EINVAL.
 */
int kvmemd_config_set(struct kvmemd_config *c, const char *key,
		      const char *value, char *err, size_t errlen);

/*
 * kvmemd_config_check() - checks across keys (session_max_bytes <=
 * host_bytes, ...); @err as above. Return: 0 or -EINVAL.
 */
int kvmemd_config_check(const struct kvmemd_config *c, char *err,
			size_t errlen);

/* Write @c as a configuration file that loads back to the same values. */
void kvmemd_config_print(const struct kvmemd_config *c, FILE *f);

/*
 * kvmemd_config_reload() - take the policy keys of @fresh into @live
 *
 * Paths, the pool size and the worker pool need a restart and keep their
 * values; everything else (access lists, quotas, ring sizes, polling, log
 * level) is copied.
 */
void kvmemd_config_reload(struct kvmemd_config *live,
			  const struct kvmemd_config *fresh);

enum kvmemd_value_kind {
	KVMEMD_VALUE_STRING,
	KVMEMD_VALUE_NUMBER,
	KVMEMD_VALUE_BOOL,
};

/*
 * kvmemd_config_policy() - call @fn for each key that SIGHUP (and the admin
 * socket's "policy set") can change, with its value as text
 */
void kvmemd_config_policy(const struct kvmemd_config *c,
			  void (*fn)(void *ctx, const char *key,
				     const char *value,
				     enum kvmemd_value_kind kind),
			  void *ctx);

/* 1 when "section.key" changes without a restart, 0 when not, -EINVAL
 * for an unknown key. */
int kvmemd_config_reloads(const char *key);

#endif /* KVMEMD_CONFIG_H */
