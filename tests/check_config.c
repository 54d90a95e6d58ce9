/* SPDX-License-Identifier: MIT */
/*
 * check_config.c - kvmemd's configuration: defaults, the file, overrides,
 * checks across keys, printing and reload
 *
 * Expected values are literals typed in from kvmemd.conf(5) (defaults,
 * ranges, the error format), never read from config.c's tables. Files go to
 * a fresh directory under /tmp made before the test case runs and removed
 * after it, in the parent, whatever the tests did. Each test runs in a
 * forked child, so the tests that change the environment change only their
 * own.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "../daemon/config.h"
#include "internal.h"
#include "kvmem/quant.h"
#include "kvmem_check.h"

/* ---- files --------------------------------------------------------- */

static char tmpdir[64];

static void tmpdir_make(void)
{
	kvmem_check_tmpdir_make(tmpdir, sizeof(tmpdir), "config");
}

static void tmpdir_remove(void)
{
	kvmem_check_tmpdir_remove(tmpdir);
}

/* Write @len bytes of @text to @name in tmpdir; its path into @path. */
static void write_conf_len(char *path, size_t size, const char *name,
			   const char *text, size_t len)
{
	FILE *f;

	ck_assert_msg(tmpdir[0], "no temporary directory");
	snprintf(path, size, "%s/%s", tmpdir, name);
	f = fopen(path, "w");
	ck_assert_msg(f != NULL, "cannot create %s", path);
	ck_assert_uint_eq(fwrite(text, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

static void write_conf(char *path, size_t size, const char *name,
		       const char *text)
{
	write_conf_len(path, size, name, text, strlen(text));
}

static void defaults(struct kvmemd_config *c)
{
	memset(c, 0, sizeof(*c));
	kvmemd_config_defaults(c);
}

/*
 * Load @text as file @name over the defaults and expect -EINVAL with
 * "path:line: " followed by @what, and the configuration unchanged.
 */
static void expect_load_error_len(const char *name, const char *text,
				  size_t len, unsigned int line,
				  const char *what)
{
	struct kvmemd_config c, before;
	char path[256], prefix[320], err[2048];
	size_t n;
	int ret;

	defaults(&c);
	memcpy(&before, &c, sizeof(c));
	write_conf_len(path, sizeof(path), name, text, len);
	err[0] = '\0';
	ret = kvmemd_config_load(&c, path, 1, err, sizeof(err));
	ck_assert_msg(ret == -EINVAL, "%s: load returned %d, want -EINVAL; %s",
		      name, ret, err);
	n = (size_t)snprintf(prefix, sizeof(prefix), "%s:%u: %s", path, line,
			     what);
	ck_assert_msg(!strncmp(err, prefix, n), "%s: error \"%s\", want \"%s\"",
		      name, err, prefix);
	EXPECT_MEM(&c, &before, sizeof(c),
		   "config changed by failed load of %s", name);
}

static void expect_load_error(const char *name, const char *text,
			      unsigned int line, const char *what)
{
	expect_load_error_len(name, text, strlen(text), line, what);
}

/* kvmemd_config_set() fails with "@key: @what..." and changes nothing. */
static void expect_set_error(const char *key, const char *value,
			     const char *what)
{
	struct kvmemd_config c, before;
	char want[512], err[2048];
	size_t n;
	int ret;

	defaults(&c);
	memcpy(&before, &c, sizeof(c));
	err[0] = '\0';
	ret = kvmemd_config_set(&c, key, value, err, sizeof(err));
	ck_assert_msg(ret == -EINVAL, "%s = \"%s\": %d, want -EINVAL", key,
		      value, ret);
	n = (size_t)snprintf(want, sizeof(want), "%s: %s", key, what);
	ck_assert_msg(!strncmp(err, want, n),
		      "%s = \"%s\": error \"%s\", want \"%s\"", key, value, err,
		      want);
	EXPECT_MEM(&c, &before, sizeof(c), "%s = \"%s\" changed the config",
		   key, value);
}

static void set_ok(struct kvmemd_config *c, const char *key, const char *value)
{
	char err[2048] = "";
	int ret = kvmemd_config_set(c, key, value, err, sizeof(err));

	ck_assert_msg(ret == 0, "%s = \"%s\": %d: %s", key, value, ret, err);
}

/* Every key away from its default (on a machine without a kvmem group). */
static const char every_key[] = "[daemon]\n"
				"socket = /tmp/kv/k.sock\n"
				"admin_socket = /tmp/kv/k-admin.sock\n"
				"state_dir = /tmp/kv/state\n"
				"group = root\n"
				"allow_uids = root, 1000 2000\n"
				"allow_gids = root,4242\n"
				"tenants = 4243 root\n"
				"max_sessions = 100\n"
				"log_level = debug\n"
				"[pool]\n"
				"host_bytes = 8G\n"
				"session_default_bytes = 1M\n"
				"session_max_bytes = 2G\n"
				"hugepages = yes\n"
				"mlock = no\n"
				"[ring]\n"
				"sq_entries = 64\n"
				"max_entries = 1024\n"
				"poll_idle_us = 0\n"
				"max_seqs = 100000\n"
				"[prefix]\n"
				"publishers = 4243:root,1000\n"
				"[workers]\n"
				"threads = 8\n"
				"queue_depth = 16\n";

static void load_ok(struct kvmemd_config *c, const char *name, const char *text)
{
	char path[256], err[2048] = "";
	int ret;

	write_conf(path, sizeof(path), name, text);
	ret = kvmemd_config_load(c, path, 1, err, sizeof(err));
	ck_assert_msg(ret == 0, "load of %s: %d: %s", name, ret, err);
}

/* ---- defaults ------------------------------------------------------ */

START_TEST(test_config_defaults_values)
{
	struct kvmemd_config c;
	struct group *gr = getgrnam("kvmem");
	char err[256] = "";

	defaults(&c);
	ck_assert_uint_eq(c.max_sessions, 64);
	ck_assert_int_eq(c.log_level, LOG_INFO);
	ck_assert_uint_eq(c.host_bytes, 1073741824ull);
	ck_assert_uint_eq(c.session_default_bytes, 67108864ull);
	ck_assert_uint_eq(c.session_max_bytes, 536870912ull);
	ck_assert_int_eq(c.hugepages, KVMEMD_AUTO);
	ck_assert_int_eq(c.mlock, KVMEMD_AUTO);
	ck_assert_uint_eq(c.sq_entries, 256);
	ck_assert_uint_eq(c.max_entries, 8192);
	ck_assert_uint_eq(c.poll_idle_us, 200);
	ck_assert_uint_eq(c.max_seqs, 4096);
	ck_assert_uint_eq(c.threads, 2);
	ck_assert_uint_eq(c.queue_depth, 64);
	ck_assert_uint_eq(c.archive_tokens, 0);
	ck_assert(c.archive_heat == 1.0);
	ck_assert(c.bits_budget == 0.0);
	ck_assert_int_eq(c.archive_format, KVMEMD_ARCHIVE_SAME);
	ck_assert_int_eq(c.archive_codec, KVMEM_CODEC_GOLAY24);
	ck_assert_uint_eq(c.archive_rate, 67108864ull);
	ck_assert_uint_eq(c.n_allow_uids, 1);
	ck_assert_uint_eq(c.allow_uids[0], getuid());
	if (gr) {
		ck_assert_str_eq(c.group, "kvmem");
		ck_assert_uint_eq(c.n_allow_gids, 1);
		ck_assert_uint_eq(c.allow_gids[0], gr->gr_gid);
	} else {
		ck_assert_str_eq(c.group, "");
		ck_assert_uint_eq(c.n_allow_gids, 0);
	}
	ck_assert_uint_eq(c.n_tenant_gids, 0);
	ck_assert_msg(kvmemd_config_check(&c, err, sizeof(err)) == 0,
		      "defaults fail the check: %s", err);
}
END_TEST

START_TEST(test_config_defaults_paths)
{
	struct kvmemd_config c;
	char want[256], longdir[160];

	ck_assert_msg(tmpdir[0], "no temporary directory");
	if (geteuid() == 0) {
		/* Root ignores the XDG variables. */
		setenv("XDG_RUNTIME_DIR", tmpdir, 1);
		setenv("XDG_STATE_HOME", tmpdir, 1);
		defaults(&c);
		ck_assert_str_eq(c.socket, "/run/kvmem/kvmemd.sock");
		ck_assert_str_eq(c.admin_socket,
				 "/run/kvmem/kvmemd-admin.sock");
		ck_assert_str_eq(c.state_dir, "/var/lib/kvmem");
		fprintf(stderr, "config: running as root: the ./run and "
				"$XDG_* defaults are not checked\n");
		return;
	}

	setenv("XDG_RUNTIME_DIR", tmpdir, 1);
	setenv("XDG_STATE_HOME", tmpdir, 1);
	defaults(&c);
	snprintf(want, sizeof(want), "%s/kvmem/kvmemd.sock", tmpdir);
	ck_assert_str_eq(c.socket, want);
	snprintf(want, sizeof(want), "%s/kvmem/kvmemd-admin.sock", tmpdir);
	ck_assert_str_eq(c.admin_socket, want);
	snprintf(want, sizeof(want), "%s/kvmem", tmpdir);
	ck_assert_str_eq(c.state_dir, want);

	unsetenv("XDG_RUNTIME_DIR");
	unsetenv("XDG_STATE_HOME");
	defaults(&c);
	ck_assert_str_eq(c.socket, "./run/kvmemd.sock");
	ck_assert_str_eq(c.admin_socket, "./run/kvmemd-admin.sock");
	ck_assert_str_eq(c.state_dir, "./run/state");

	/* Empty or relative: not set, as the XDG spec says. */
	setenv("XDG_RUNTIME_DIR", "", 1);
	setenv("XDG_STATE_HOME", "rel", 1);
	defaults(&c);
	ck_assert_str_eq(c.socket, "./run/kvmemd.sock");
	ck_assert_str_eq(c.state_dir, "./run/state");

	/*
	 * 90 bytes of directory: "/kvmem/kvmemd.sock" fits in sun_path (108),
	 * "/kvmem/kvmemd-admin.sock" does not; both sockets go to ./run.
	 */
	memset(longdir, 'd', 90);
	longdir[0] = '/';
	longdir[90] = '\0';
	setenv("XDG_RUNTIME_DIR", longdir, 1);
	defaults(&c);
	ck_assert_str_eq(c.socket, "./run/kvmemd.sock");
	ck_assert_str_eq(c.admin_socket, "./run/kvmemd-admin.sock");
}
END_TEST

/* ---- the file ------------------------------------------------------ */

START_TEST(test_config_every_key)
{
	struct kvmemd_config c;

	defaults(&c);
	load_ok(&c, "every.conf", every_key);
	ck_assert_str_eq(c.socket, "/tmp/kv/k.sock");
	ck_assert_str_eq(c.admin_socket, "/tmp/kv/k-admin.sock");
	ck_assert_str_eq(c.state_dir, "/tmp/kv/state");
	ck_assert_str_eq(c.group, "root");
	ck_assert_uint_eq(c.n_allow_uids, 3);
	ck_assert_uint_eq(c.allow_uids[0], 0);
	ck_assert_uint_eq(c.allow_uids[1], 1000);
	ck_assert_uint_eq(c.allow_uids[2], 2000);
	ck_assert_uint_eq(c.n_allow_gids, 2);
	ck_assert_uint_eq(c.allow_gids[0], 0);
	ck_assert_uint_eq(c.allow_gids[1], 4242);
	ck_assert_uint_eq(c.n_tenant_gids, 2);
	ck_assert_uint_eq(c.tenant_gids[0], 4243);
	ck_assert_uint_eq(c.tenant_gids[1], 0);
	ck_assert_uint_eq(c.max_sessions, 100);
	ck_assert_int_eq(c.log_level, LOG_DEBUG);
	ck_assert_uint_eq(c.host_bytes, 8589934592ull);
	ck_assert_uint_eq(c.session_default_bytes, 1048576ull);
	ck_assert_uint_eq(c.session_max_bytes, 2147483648ull);
	ck_assert_int_eq(c.hugepages, 1);
	ck_assert_int_eq(c.mlock, 0);
	ck_assert_uint_eq(c.sq_entries, 64);
	ck_assert_uint_eq(c.max_entries, 1024);
	ck_assert_uint_eq(c.poll_idle_us, 0);
	ck_assert_uint_eq(c.max_seqs, 100000);
	ck_assert_uint_eq(c.threads, 8);
	ck_assert_uint_eq(c.queue_depth, 16);
}
END_TEST

START_TEST(test_config_comments_whitespace)
{
	static const char text[] =
		"# a comment\n"
		"; another\n"
		"   \t \n"
		"\n"
		"\t[ daemon ]   # after the header\n"
		"  max_sessions\t=\t 12   # after the value\n"
		"log_level=notice ; after the value\n"
		"group = # empty, not a comment's text\n"
		"state_dir = /tmp/a#b;c\n"
		"[pool]; right after the bracket\n"
		"mlock = off\r\n"
		"   hugepages   =   ON   \n"
		"[daemon]\n"
		"socket=/tmp/x.sock\n"
		"# last line without a newline";
	struct kvmemd_config c;

	defaults(&c);
	set_ok(&c, "daemon.group", "root");
	load_ok(&c, "ws.conf", text);
	ck_assert_uint_eq(c.max_sessions, 12);
	ck_assert_int_eq(c.log_level, LOG_NOTICE);
	ck_assert_str_eq(c.group, "");
	ck_assert_str_eq(c.state_dir, "/tmp/a#b;c");
	ck_assert_int_eq(c.mlock, 0);
	ck_assert_int_eq(c.hugepages, 1);
	ck_assert_str_eq(c.socket, "/tmp/x.sock");

	/* A value on the last line, no newline after it. */
	load_ok(&c, "last.conf", "[workers]\nthreads = 7");
	ck_assert_uint_eq(c.threads, 7);
}
END_TEST

START_TEST(test_config_syntax_errors)
{
	char buf[2200];

	expect_load_error("unknown-key.conf", "[daemon]\n# c\nbogus = 1\n", 3,
			  "daemon.bogus: unknown key");
	expect_load_error("wrong-section.conf", "[pool]\nthreads = 4\n", 2,
			  "pool.threads: unknown key");
	expect_load_error("unknown-section.conf",
			  "# c\n[daemon]\nmax_sessions = 2\n\n[bogus]\n", 5,
			  "unknown section [bogus]");
	expect_load_error("outside.conf", "\n# c\nsocket = /x\n[daemon]\n", 3,
			  "socket: key before any [section]");
	expect_load_error("no-equals.conf", "[daemon]\n\nsocket /x\n", 3,
			  "\"socket /x\" is not \"key = value\"");
	expect_load_error("no-key.conf", "[pool]\n = 5\n", 2,
			  "no key before '='");
	expect_load_error("no-bracket.conf", "[ring]\nmax_seqs = 5\n[daemon\n",
			  3, "missing ']'");
	expect_load_error("junk-header.conf", "[ring] x\n", 1,
			  "\"x\" after [ring]");
	expect_load_error("dup.conf", "[pool]\nmlock = yes\n\nmlock = no\n", 4,
			  "pool.mlock: set twice, first on line 2");
	/* Twice across two [pool] sections is still twice. */
	expect_load_error("dup2.conf",
			  "[pool]\nmlock = yes\n[ring]\n[pool]\nmlock = yes\n",
			  5, "pool.mlock: set twice, first on line 2");
	expect_load_error("empty.conf", "[pool]\nmlock =\n", 2,
			  "pool.mlock: empty value");
	expect_load_error("empty-socket.conf", "[daemon]\nsocket = # none\n", 2,
			  "daemon.socket: empty value");
	expect_load_error("bad-user.conf",
			  "[daemon]\nmax_sessions = 3\n"
			  "allow_uids = 0, no-such-user-kvmem\n",
			  3,
			  "daemon.allow_uids: no such user "
			  "\"no-such-user-kvmem\"");
	expect_load_error("bad-group.conf",
			  "[daemon]\nallow_gids = no-such-group-kvmem\n", 2,
			  "daemon.allow_gids: no such group "
			  "\"no-such-group-kvmem\"");
	expect_load_error(
		"bad-sockgroup.conf",
		"[daemon]\n\ngroup = no-such-group-kvmem\n", 3,
		"daemon.group: no such group \"no-such-group-kvmem\"");

	/* Lines: 1023 characters are fine, 1024 are not, comment or not. */
	snprintf(buf, sizeof(buf), "[pool]\n#%01022d\nmlock = yes\n", 0);
	ck_assert_uint_eq(strlen(strchr(buf, '#')), 1023 + 13);
	{
		struct kvmemd_config c;

		defaults(&c);
		load_ok(&c, "1023.conf", buf);
		ck_assert_int_eq(c.mlock, 1);
	}
	snprintf(buf, sizeof(buf), "[pool]\nmlock = yes\n#%01023d\n", 0);
	expect_load_error("1024.conf", buf, 3,
			  "line longer than 1023 characters");
	/* 1024 on the last line, no newline after it. */
	snprintf(buf, sizeof(buf), "[pool]\n#%01023d", 0);
	expect_load_error("1024-last.conf", buf, 2,
			  "line longer than 1023 characters");
	/* A value that would fit if truncated at 1023. */
	snprintf(buf, sizeof(buf), "[daemon]\nstate_dir = /%01011d\n", 0);
	ck_assert_uint_eq(strlen(buf), 9 + 1024 + 1);
	expect_load_error("long-value.conf", buf, 2,
			  "line longer than 1023 characters");

	expect_load_error_len("nul.conf", "[pool]\nmlock = yes\0x\n", 20, 2,
			      "NUL byte in the line");
}
END_TEST

START_TEST(test_config_value_errors)
{
	/* The same errors from the file, at the right line, and from set(). */
	expect_load_error("pow2.conf",
			  "[ring]\n\nmax_seqs = 4\nsq_entries = 100\n", 4,
			  "ring.sq_entries: \"100\" is not a power of two in "
			  "8..4096");
	expect_load_error("overflow.conf",
			  "[daemon]\nmax_sessions = 99999999999999999999\n", 2,
			  "daemon.max_sessions: \"99999999999999999999\"");
	expect_load_error("negative.conf", "[daemon]\nmax_sessions = -1\n", 2,
			  "daemon.max_sessions: \"-1\" is not an integer in "
			  "1..65536");
	expect_load_error("range.conf", "[workers]\nthreads = 65\n", 2,
			  "workers.threads: \"65\" is not an integer in 1..64");
	expect_load_error("size.conf", "[pool]\n\n\n\nhost_bytes = 2T\n", 5,
			  "pool.host_bytes: \"2T\" is not a size in 1M..1T");
	expect_load_error("enum.conf", "[daemon]\nlog_level = warn\n", 2,
			  "daemon.log_level: \"warn\"");
	expect_load_error("tristate.conf", "[pool]\nhugepages = maybe\n", 2,
			  "pool.hugepages: \"maybe\"");

	expect_set_error("ring.sq_entries", "100",
			 "\"100\" is not a power of two in 8..4096");
	expect_set_error("daemon.bogus", "1", "unknown key");
	expect_set_error("pool.threads", "1", "unknown key");
	expect_set_error("socket", "/x", "unknown key");
	expect_set_error("daemon.socket.x", "/x", "unknown key");
	expect_set_error("daemon.socket", "", "empty value");
}
END_TEST

START_TEST(test_config_missing_file)
{
	struct kvmemd_config c, before;
	char path[256], err[512] = "";
	int ret;

	ck_assert_msg(tmpdir[0], "no temporary directory");
	defaults(&c);
	memcpy(&before, &c, sizeof(c));
	snprintf(path, sizeof(path), "%s/none.conf", tmpdir);
	ck_assert_int_eq(kvmemd_config_load(&c, path, 0, err, sizeof(err)), 0);
	EXPECT_MEM(&c, &before, sizeof(c), "%s", "missing file, must_exist 0");
	ret = kvmemd_config_load(&c, path, 1, err, sizeof(err));
	ck_assert_int_eq(ret, -ENOENT);
	ck_assert_msg(!strncmp(err, path, strlen(path)) &&
			      err[strlen(path)] == ':',
		      "error \"%s\" does not start with \"%s:\"", err, path);
	EXPECT_MEM(&c, &before, sizeof(c), "%s", "missing file, must_exist 1");
	/* A directory opens but does not read. */
	ret = kvmemd_config_load(&c, tmpdir, 0, err, sizeof(err));
	ck_assert_int_eq(ret, -EISDIR);
	EXPECT_MEM(&c, &before, sizeof(c), "%s", "directory");
}
END_TEST

/* ---- values -------------------------------------------------------- */

START_TEST(test_config_sizes)
{
	static const struct {
		const char *key, *text;
		unsigned long long want;
	} good[] = {
		{ "pool.session_max_bytes", "65536", 65536ull },
		{ "pool.session_max_bytes", "64K", 65536ull },
		{ "pool.session_max_bytes", "64k", 65536ull },
		{ "pool.session_max_bytes", "64KiB", 65536ull },
		{ "pool.session_max_bytes", "64kib", 65536ull },
		{ "pool.session_max_bytes", "65537", 65537ull },
		{ "pool.session_max_bytes", "3M", 3145728ull },
		{ "pool.session_max_bytes", "3m", 3145728ull },
		{ "pool.session_max_bytes", "3MiB", 3145728ull },
		{ "pool.session_max_bytes", "5G", 5368709120ull },
		{ "pool.session_max_bytes", "5g", 5368709120ull },
		{ "pool.session_max_bytes", "5GiB", 5368709120ull },
		{ "pool.session_max_bytes", "1536M", 1610612736ull },
		{ "pool.host_bytes", "1T", 1099511627776ull },
		{ "pool.host_bytes", "1t", 1099511627776ull },
		{ "pool.host_bytes", "1TiB", 1099511627776ull },
		{ "pool.host_bytes", "1024G", 1099511627776ull },
		{ "pool.host_bytes", "1M", 1048576ull },
		{ "pool.host_bytes", "1048576", 1048576ull },
		{ "pool.host_bytes", "1099511627776", 1099511627776ull },
		{ "pool.host_bytes", "007M", 7340032ull },
		{ "pool.session_default_bytes", "64K", 65536ull },
	};
	static const char *const bad_host[] = {
		"K",
		"1.5G",
		"1 G",
		"1GB",
		"1Gi",
		"-1G",
		"+1G",
		" 1G",
		"1G ",
		"0x100000",
		"1E",
		/* out of 1M..1T */
		"2T",
		"1025G",
		"1048575",
		"1023K",
		"0",
		/* beyond 64 bits */
		"99999999999999999999",
		"18446744073709551616",
		"17179869184G",
		"16777216T",
		"18014398509481984K",
		/* beyond 64 bits, and wrapped they would be 1G, 1T, 1M */
		"17179869185G",
		"16777217T",
		"18014398509483008K",
	};
	struct kvmemd_config c;
	char err[512];
	size_t i;

	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		uint64_t *field =
			!strcmp(good[i].key, "pool.host_bytes") ? &c.host_bytes
			: !strcmp(good[i].key, "pool.session_max_bytes")
				? &c.session_max_bytes
				: &c.session_default_bytes;

		defaults(&c);
		ck_assert_msg(kvmemd_config_set(&c, good[i].key, good[i].text,
						err, sizeof(err)) == 0,
			      "%s = %s: %s", good[i].key, good[i].text, err);
		EXPECT_EQ(*field, good[i].want, "%s = %s", good[i].key,
			  good[i].text);
	}
	for (i = 0; i < sizeof(bad_host) / sizeof(bad_host[0]); i++)
		expect_set_error("pool.host_bytes", bad_host[i], "\"");
	expect_set_error("pool.host_bytes", "", "empty value");
	expect_set_error("pool.session_default_bytes", "65535",
			 "\"65535\" is not a size in 64K..1T");
	expect_set_error("pool.session_max_bytes", "63K",
			 "\"63K\" is not a size in 64K..1T");
	expect_set_error("pool.session_max_bytes", "1025G",
			 "\"1025G\" is not a size in 64K..1T");
	expect_set_error("pool.host_bytes", "1048575",
			 "\"1048575\" is not a size in 1M..1T");
}
END_TEST

/*
 * pool.gpu_bytes is a size or a percentage of the GPU (1% to 100%): one
 * or the other is kept, the other 0, and it prints back as it was given.
 */
START_TEST(test_config_gpu_percent)
{
	static const char *const bad[] = {
		"0%",  "101%", "5.5%", "%",   "-5%", "+5%",
		" 5%", "5 %",  "5%%",  "5%M", "M%",  "99999999999999999999%",
		"65T",
	};
	struct kvmemd_config c;
	char want[256], *text = NULL;
	size_t i, len = 0;
	FILE *f;

	defaults(&c);
	set_ok(&c, "pool.gpu_bytes", "80%");
	ck_assert_uint_eq(c.gpu_percent, 80);
	ck_assert_uint_eq(c.gpu_bytes, 0);
	/* checked against the pool when the GPU is found, not here */
	set_ok(&c, "pool.gpu_session_max_bytes", "64G");
	ck_assert_int_eq(kvmemd_config_check(&c, want, sizeof(want)), 0);
	f = open_memstream(&text, &len);
	ck_assert_ptr_nonnull(f);
	kvmemd_config_print(&c, f);
	ck_assert_int_eq(fclose(f), 0);
	EXPECT(strstr(text, "\ngpu_bytes = 80%\n"), "%s", text);
	free(text);
	set_ok(&c, "pool.gpu_bytes", "100%");
	ck_assert_uint_eq(c.gpu_percent, 100);
	set_ok(&c, "pool.gpu_bytes", "1%");
	ck_assert_uint_eq(c.gpu_percent, 1);
	set_ok(&c, "pool.gpu_bytes", "96G");
	ck_assert_uint_eq(c.gpu_percent, 0);
	ck_assert_uint_eq(c.gpu_bytes, 96ull << 30);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(want, sizeof(want),
			 "\"%s\" is not a size in 0..64T or a percentage in "
			 "1%%..100%%",
			 bad[i]);
		expect_set_error("pool.gpu_bytes", bad[i], want);
	}
}
END_TEST

START_TEST(test_config_integers)
{
	static const struct {
		const char *key, *text;
		unsigned int want;
	} good[] = {
		{ "daemon.max_sessions", "1", 1 },
		{ "daemon.max_sessions", "65536", 65536 },
		{ "daemon.max_sessions", "007", 7 },
		{ "ring.sq_entries", "8", 8 },
		{ "ring.sq_entries", "4096", 4096 },
		{ "ring.max_entries", "8", 8 },
		{ "ring.max_entries", "65536", 65536 },
		{ "ring.poll_idle_us", "0", 0 },
		{ "ring.poll_idle_us", "1000000", 1000000 },
		{ "ring.max_seqs", "1", 1 },
		{ "ring.max_seqs", "1048576", 1048576 },
		{ "workers.threads", "1", 1 },
		{ "workers.threads", "64", 64 },
		{ "workers.queue_depth", "1", 1 },
		{ "workers.queue_depth", "4096", 4096 },
	};
	static const struct {
		const char *key, *text, *what;
	} bad[] = {
		{ "daemon.max_sessions", "0", "an integer in 1..65536" },
		{ "daemon.max_sessions", "65537", "an integer in 1..65536" },
		{ "daemon.max_sessions", "-1", "an integer in 1..65536" },
		{ "daemon.max_sessions", "+5", "an integer in 1..65536" },
		{ "daemon.max_sessions", "5x", "an integer in 1..65536" },
		{ "daemon.max_sessions", "x5", "an integer in 1..65536" },
		{ "daemon.max_sessions", " 5", "an integer in 1..65536" },
		{ "daemon.max_sessions", "1e3", "an integer in 1..65536" },
		{ "daemon.max_sessions", "0x10", "an integer in 1..65536" },
		{ "daemon.max_sessions", "5K", "an integer in 1..65536" },
		{ "daemon.max_sessions", "4294967297",
		  "an integer in 1..65536" },
		{ "daemon.max_sessions", "99999999999999999999",
		  "an integer in 1..65536" },
		{ "ring.sq_entries", "4", "a power of two in 8..4096" },
		{ "ring.sq_entries", "0", "a power of two in 8..4096" },
		{ "ring.sq_entries", "12", "a power of two in 8..4096" },
		{ "ring.sq_entries", "8192", "a power of two in 8..4096" },
		{ "ring.max_entries", "65535", "a power of two in 8..65536" },
		{ "ring.max_entries", "131072", "a power of two in 8..65536" },
		{ "ring.max_entries", "4294967296",
		  "a power of two in 8..65536" },
		{ "ring.poll_idle_us", "1000001", "an integer in 0..1000000" },
		{ "ring.poll_idle_us", "-0", "an integer in 0..1000000" },
		{ "ring.max_seqs", "0", "an integer in 1..1048576" },
		{ "ring.max_seqs", "1048577", "an integer in 1..1048576" },
		{ "workers.threads", "0", "an integer in 1..64" },
		{ "workers.threads", "65", "an integer in 1..64" },
		{ "workers.queue_depth", "0", "an integer in 1..4096" },
		{ "workers.queue_depth", "4097", "an integer in 1..4096" },
	};
	struct kvmemd_config c;
	char want[256];
	size_t i;

	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		const char *dot = strchr(good[i].key, '.') + 1;
		uint32_t *field = !strcmp(dot, "max_sessions") ? &c.max_sessions
				  : !strcmp(dot, "sq_entries") ? &c.sq_entries
				  : !strcmp(dot, "max_entries") ? &c.max_entries
				  : !strcmp(dot, "poll_idle_us")
					  ? &c.poll_idle_us
				  : !strcmp(dot, "max_seqs") ? &c.max_seqs
				  : !strcmp(dot, "threads")  ? &c.threads
							     : &c.queue_depth;

		defaults(&c);
		set_ok(&c, good[i].key, good[i].text);
		EXPECT_EQ(*field, good[i].want, "%s = %s", good[i].key,
			  good[i].text);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(want, sizeof(want), "\"%s\" is not %s", bad[i].text,
			 bad[i].what);
		expect_set_error(bad[i].key, bad[i].text, want);
	}
	expect_set_error("ring.max_seqs", "", "empty value");
}
END_TEST

/*
 * scrub.target_ue_per_day is a decimal number, 1e-3 too: what strtod()
 * reads, but nothing it reads that the file should not carry (a sign,
 * "inf", hexadecimal, a value beyond a double).
 */
START_TEST(test_config_reals)
{
	static const struct {
		const char *text;
		double want;
	} good[] = {
		{ "0", 0 },	  { "0.001", 0.001 }, { "1e-3", 0.001 },
		{ "2000", 2000 }, { "2.5E2", 250 },   { "1000000000", 1e9 },
		{ "1.", 1 },
	};
	static const char *const bad[] = {
		"-1",	    "+1",    ".5",     "inf",	     "nan",
		"0x1p3",    "1e400", "1e-400", "1,5",	     " 1",
		"1 ",	    "1e",    "5e9",    "1000000001", "1000000000.5",
		"infinity", "0.5x",
	};
	struct kvmemd_config c;
	char want[256], *text = NULL;
	size_t i, len = 0;
	FILE *f;

	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		defaults(&c);
		set_ok(&c, "scrub.target_ue_per_day", good[i].text);
		EXPECT(c.scrub_target_ue == good[i].want,
		       "target_ue_per_day = %s: %g", good[i].text,
		       c.scrub_target_ue);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(want, sizeof(want),
			 "\"%s\" is not a number in 0..1000000000", bad[i]);
		expect_set_error("scrub.target_ue_per_day", bad[i], want);
	}
	expect_set_error("scrub.target_ue_per_day", "", "empty value");
	/* written back in its shortest form */
	defaults(&c);
	set_ok(&c, "scrub.target_ue_per_day", "0.1");
	f = open_memstream(&text, &len);
	ck_assert_ptr_nonnull(f);
	kvmemd_config_print(&c, f);
	ck_assert_int_eq(fclose(f), 0);
	EXPECT(strstr(text, "\ntarget_ue_per_day = 0.1\n"), "%s", text);
	free(text);
	defaults(&c);
	EXPECT(c.scrub_target_ue == 0, "default target %g", c.scrub_target_ue);
	ck_assert_uint_eq(c.scrub_rate_max, 268435456ull);
}
END_TEST

START_TEST(test_config_enums)
{
	static const struct {
		const char *key, *text;
		int want;
	} good[] = {
		{ "daemon.log_level", "err", LOG_ERR },
		{ "daemon.log_level", "warning", LOG_WARNING },
		{ "daemon.log_level", "notice", LOG_NOTICE },
		{ "daemon.log_level", "info", LOG_INFO },
		{ "daemon.log_level", "debug", LOG_DEBUG },
		{ "daemon.log_level", "DEBUG", LOG_DEBUG },
		{ "pool.hugepages", "yes", 1 },
		{ "pool.hugepages", "no", 0 },
		{ "pool.hugepages", "auto", 2 },
		{ "pool.hugepages", "true", 1 },
		{ "pool.hugepages", "false", 0 },
		{ "pool.hugepages", "on", 1 },
		{ "pool.hugepages", "off", 0 },
		{ "pool.hugepages", "1", 1 },
		{ "pool.hugepages", "0", 0 },
		{ "pool.hugepages", "Yes", 1 },
		{ "pool.mlock", "yes", 1 },
		{ "pool.mlock", "no", 0 },
		{ "pool.mlock", "auto", 2 },
	};
	struct kvmemd_config c;
	size_t i;

	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		int *field =
			!strcmp(good[i].key, "daemon.log_level") ? &c.log_level
			: !strcmp(good[i].key, "pool.hugepages") ? &c.hugepages
								 : &c.mlock;

		defaults(&c);
		/* start away from the value so a no-op cannot pass */
		*field = -1;
		set_ok(&c, good[i].key, good[i].text);
		EXPECT_EQ(*field, good[i].want, "%s = %s", good[i].key,
			  good[i].text);
	}
	expect_set_error("daemon.log_level", "warn",
			 "\"warn\" is not one of err, warning, notice, info, "
			 "debug");
	expect_set_error("daemon.log_level", "error", "\"error\"");
	expect_set_error("daemon.log_level", "7", "\"7\"");
	expect_set_error("pool.hugepages", "maybe",
			 "\"maybe\" is not one of yes, no, auto");
	expect_set_error("pool.hugepages", "2", "\"2\"");
	expect_set_error("pool.mlock", "", "empty value");
	/* The archive's format is quantized; its codec, any of the four. */
	defaults(&c);
	set_ok(&c, "tier.archive_format", "int2");
	EXPECT_EQ(c.archive_format, KVMEM_FMT_INT2, "%s", "int2");
	set_ok(&c, "tier.archive_codec", "h84");
	EXPECT_EQ(c.archive_codec, KVMEM_CODEC_H84, "%s", "h84");
	set_ok(&c, "tier.archive_format", "fp8");
	EXPECT_EQ(c.archive_format, KVMEM_FMT_FP8, "%s", "fp8");
	set_ok(&c, "tier.archive_format", "lm3");
	EXPECT_EQ(c.archive_format, KVMEM_FMT_LM3, "%s", "lm3");
	set_ok(&c, "tier.archive_format", "same");
	EXPECT_EQ(c.archive_format, KVMEMD_ARCHIVE_SAME, "%s", "same");
	expect_set_error("tier.archive_format", "fp16",
			 "\"fp16\" is not one of same, int8, int4, int2, fp8, "
			 "lm4, lm3, lm2");
	expect_set_error("tier.archive_codec", "golay23",
			 "\"golay23\" is not one of h74, h84, golay24, "
			 "secded72");
	expect_set_error("tier.archive_heat", "1.5",
			 "\"1.5\" is not a number in 0..1");
	expect_set_error("tier.bits_budget", "17",
			 "\"17\" is not a number in 0..16");
	set_ok(&c, "tier.bits_budget", "2.5");
	EXPECT(c.bits_budget == 2.5, "%s", "bits_budget");
	expect_set_error("tier.archive_rate", "1K",
			 "\"1K\" is not a size in 4K..1T");
}
END_TEST

START_TEST(test_config_ids)
{
	struct kvmemd_config c;
	char list[512];
	size_t at = 0;
	unsigned int i;

	defaults(&c);
	set_ok(&c, "daemon.allow_uids", "root");
	ck_assert_uint_eq(c.n_allow_uids, 1);
	ck_assert_uint_eq(c.allow_uids[0], 0);
	set_ok(&c, "daemon.allow_uids", " 0, 1000 ,2000\t3000 , ");
	ck_assert_uint_eq(c.n_allow_uids, 4);
	ck_assert_uint_eq(c.allow_uids[0], 0);
	ck_assert_uint_eq(c.allow_uids[1], 1000);
	ck_assert_uint_eq(c.allow_uids[2], 2000);
	ck_assert_uint_eq(c.allow_uids[3], 3000);
	set_ok(&c, "daemon.allow_uids", "4294967294");
	ck_assert_uint_eq(c.n_allow_uids, 1);
	ck_assert_uint_eq(c.allow_uids[0], 4294967294u);
	set_ok(&c, "daemon.allow_uids", "");
	ck_assert_uint_eq(c.n_allow_uids, 0);
	ck_assert_uint_eq(c.allow_uids[0], 0);

	set_ok(&c, "daemon.allow_gids", "root, 77");
	ck_assert_uint_eq(c.n_allow_gids, 2);
	ck_assert_uint_eq(c.allow_gids[0], 0);
	ck_assert_uint_eq(c.allow_gids[1], 77);
	set_ok(&c, "daemon.allow_gids", "");
	ck_assert_uint_eq(c.n_allow_gids, 0);
	set_ok(&c, "daemon.tenants", "78 root");
	ck_assert_uint_eq(c.n_tenant_gids, 2);
	ck_assert_uint_eq(c.tenant_gids[0], 78);
	ck_assert_uint_eq(c.tenant_gids[1], 0);
	set_ok(&c, "daemon.tenants", "");
	ck_assert_uint_eq(c.n_tenant_gids, 0);

	/* 32 entries fit, 33 do not. */
	for (i = 0; i < 32; i++)
		at += (size_t)snprintf(list + at, sizeof(list) - at, "%u,",
				       100 + i);
	set_ok(&c, "daemon.allow_uids", list);
	ck_assert_uint_eq(c.n_allow_uids, 32);
	ck_assert_uint_eq(c.allow_uids[31], 131);
	snprintf(list + at, sizeof(list) - at, "999");
	expect_set_error("daemon.allow_uids", list, "more than 32 entries");

	expect_set_error("daemon.allow_uids", "4294967295",
			 "\"4294967295\" is not a valid uid");
	expect_set_error("daemon.allow_uids", "4294967296",
			 "\"4294967296\" is not a valid uid");
	expect_set_error("daemon.allow_gids", "4294967295",
			 "\"4294967295\" is not a valid gid");
	expect_set_error("daemon.allow_uids", "0, no-such-user-kvmem",
			 "no such user \"no-such-user-kvmem\"");
	expect_set_error("daemon.allow_gids", "no-such-group-kvmem",
			 "no such group \"no-such-group-kvmem\"");
	expect_set_error("daemon.tenants", "4242 no-such-group-kvmem",
			 "no such group \"no-such-group-kvmem\"");
	expect_set_error("daemon.tenants", "-1", "no such group \"-1\"");

	set_ok(&c, "daemon.group", "root");
	ck_assert_str_eq(c.group, "root");
	set_ok(&c, "daemon.group", "");
	ck_assert_str_eq(c.group, "");
	expect_set_error("daemon.group", "no-such-group-kvmem",
			 "no such group \"no-such-group-kvmem\"");
}
END_TEST

/* The line kvmemd_config_print() writes for @key must be "@key = @value". */
static void expect_printed(const struct kvmemd_config *c, const char *key,
			   const char *value)
{
	char *text = NULL, want[1200];
	size_t len = 0;
	FILE *f;

	f = open_memstream(&text, &len);
	ck_assert_msg(f != NULL, "%s", "open_memstream");
	kvmemd_config_print(c, f);
	ck_assert_int_eq(fclose(f), 0);
	snprintf(want, sizeof(want), "\n%s =%s%s\n", key, *value ? " " : "",
		 value);
	ck_assert_msg(strstr(text, want) != NULL, "no line \"%.*s\" printed",
		      (int)strlen(want) - 2, want + 1);
	free(text);
}

/*
 * prefix.publishers: blank-separated GROUP:USER,USER entries, names or
 * ids; each group once, each of its users once, 32 users in all, and
 * every group one of daemon.tenants.
 */
START_TEST(test_config_publishers)
{
	struct kvmemd_config c, before;
	char list[512], err[512], path[256], want[320];
	size_t at, n;
	unsigned int i;

	defaults(&c);
	expect_printed(&c, "publishers", "");
	set_ok(&c, "daemon.tenants", "4242 root 4243");
	set_ok(&c, "prefix.publishers", "4242:root,1000\t0:2000  4243:7");
	expect_printed(&c, "publishers", "4242:0,1000 0:2000 4243:7");
	ck_assert_msg(kvmemd_config_check(&c, err, sizeof(err)) == 0, "%s",
		      err);
	set_ok(&c, "prefix.publishers", "");
	expect_printed(&c, "publishers", "");

	/* 32 users fit, 33 do not, however they are grouped. */
	at = (size_t)snprintf(list, sizeof(list), "4242:");
	for (i = 0; i < 32; i++)
		at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%u",
				       i ? "," : "", 100 + i);
	set_ok(&c, "prefix.publishers", list);
	snprintf(list + at, sizeof(list) - at, " 4243:1");
	expect_set_error("prefix.publishers", list,
			 "more than 32 users in all");

	expect_set_error("prefix.publishers", "4242",
			 "\"4242\" is not GROUP:USER[,USER...]");
	expect_set_error("prefix.publishers",
			 "4242:", "\"4242:\" is not GROUP:USER[,USER...]");
	expect_set_error("prefix.publishers", ":0",
			 "\":0\" is not GROUP:USER[,USER...]");
	expect_set_error("prefix.publishers", "4242:0,,1",
			 "\"4242:0,,1\" is not GROUP:USER[,USER...]");
	expect_set_error("prefix.publishers", "4242:0,",
			 "\"4242:0,\" is not GROUP:USER[,USER...]");
	expect_set_error("prefix.publishers", "4242:0:1",
			 "no such user \"0:1\"");
	expect_set_error("prefix.publishers", "4242:0 root:1 4242:2",
			 "group 4242 is listed twice");
	expect_set_error("prefix.publishers", "4242:root,1,0",
			 "user 0 is listed twice for group 4242");
	expect_set_error("prefix.publishers", "no-such-group-kvmem:0",
			 "no such group \"no-such-group-kvmem\"");
	expect_set_error("prefix.publishers", "4242:no-such-user-kvmem",
			 "no such user \"no-such-user-kvmem\"");
	expect_set_error("prefix.publishers", "4242:4294967295",
			 "\"4294967295\" is not a valid uid");
	expect_set_error("prefix.publishers", "4294967295:0",
			 "\"4294967295\" is not a valid gid");

	/* A group that is not a tenant: an error of the check, naming it. */
	defaults(&c);
	set_ok(&c, "prefix.publishers", "4242:0");
	ck_assert_int_eq(kvmemd_config_check(&c, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "prefix.publishers: group 4242 is not one of "
			      "daemon.tenants");
	defaults(&c);
	memcpy(&before, &c, sizeof(c));
	write_conf(path, sizeof(path), "publishers.conf",
		   "[daemon]\ntenants = 4243\n[prefix]\npublishers = 4242:0\n");
	ck_assert_int_eq(kvmemd_config_load(&c, path, 1, err, sizeof(err)),
			 -EINVAL);
	n = (size_t)snprintf(want, sizeof(want),
			     "%s: prefix.publishers: group 4242 is not one of "
			     "daemon.tenants",
			     path);
	ck_assert_msg(!strncmp(err, want, n), "error \"%s\", want \"%s\"", err,
		      want);
	EXPECT_MEM(&c, &before, sizeof(c), "%s", "failed cross check");
	/* In either order in the file. */
	load_ok(&c, "publishers2.conf",
		"[prefix]\npublishers = 4242:0\n[daemon]\ntenants = 4242\n");
	expect_printed(&c, "publishers", "4242:0");
}
END_TEST

START_TEST(test_config_paths)
{
	struct kvmemd_config c;
	char p[300];

	/* sun_path is 108 bytes on Linux: 107 characters and the NUL. */
	memset(p, 'a', sizeof(p));
	p[0] = '/';
	p[107] = '\0';
	defaults(&c);
	set_ok(&c, "daemon.socket", p);
	ck_assert_uint_eq(strlen(c.socket), 107);
	set_ok(&c, "daemon.admin_socket", p + 1);
	ck_assert_uint_eq(strlen(c.admin_socket), 106);
	p[107] = 'a';
	p[108] = '\0';
	expect_set_error("daemon.socket", p, "\"");
	expect_set_error("daemon.admin_socket", p, "\"");
	/* state_dir: 255 and the NUL. */
	memset(p, 'b', sizeof(p));
	p[255] = '\0';
	set_ok(&c, "daemon.state_dir", p);
	ck_assert_uint_eq(strlen(c.state_dir), 255);
	p[255] = 'b';
	p[256] = '\0';
	expect_set_error("daemon.state_dir", p, "\"");
	/* What the file could not carry back. */
	set_ok(&c, "daemon.socket", "/a#b;c");
	ck_assert_str_eq(c.socket, "/a#b;c");
	expect_set_error("daemon.socket", " /x", "\" /x\"");
	expect_set_error("daemon.socket", "/x ", "\"/x \"");
	expect_set_error("daemon.socket", "/x #y", "\"/x #y\"");
	expect_set_error("daemon.socket", "#x", "\"#x\"");
	expect_set_error("daemon.socket", "/x\ny", "\"/x\ny\"");
}
END_TEST

/* ---- checks across keys -------------------------------------------- */

START_TEST(test_config_cross_checks)
{
	struct kvmemd_config c, before;
	char err[512], path[256], want[320];
	size_t n;

	defaults(&c);
	c.session_default_bytes = 1048576;
	c.session_max_bytes = 1048576;
	c.host_bytes = 1048576;
	c.sq_entries = 64;
	c.max_entries = 64;
	ck_assert_msg(kvmemd_config_check(&c, err, sizeof(err)) == 0,
		      "equal values: %s", err);

	c.session_default_bytes = 2097152;
	ck_assert_int_eq(kvmemd_config_check(&c, err, sizeof(err)), -EINVAL);
	ck_assert_msg(!strncmp(err, "pool.session_default_bytes: ", 28), "%s",
		      err);
	c.session_default_bytes = 1048576;

	c.session_max_bytes = 2097152;
	ck_assert_int_eq(kvmemd_config_check(&c, err, sizeof(err)), -EINVAL);
	ck_assert_msg(!strncmp(err, "pool.session_max_bytes: ", 24), "%s", err);
	c.session_max_bytes = 1048576;

	c.sq_entries = 128;
	ck_assert_int_eq(kvmemd_config_check(&c, err, sizeof(err)), -EINVAL);
	ck_assert_msg(!strncmp(err, "ring.sq_entries: ", 17), "%s", err);
	c.sq_entries = 64;

	strcpy(c.admin_socket, c.socket);
	ck_assert_int_eq(kvmemd_config_check(&c, err, sizeof(err)), -EINVAL);
	ck_assert_msg(!strncmp(err, "daemon.admin_socket: ", 21), "%s", err);

	/* From a file: "path: key: ...", no line, and nothing taken. */
	defaults(&c);
	memcpy(&before, &c, sizeof(c));
	write_conf(path, sizeof(path), "cross.conf",
		   "[pool]\nsession_default_bytes = 1G\n");
	ck_assert_int_eq(kvmemd_config_load(&c, path, 1, err, sizeof(err)),
			 -EINVAL);
	n = (size_t)snprintf(want, sizeof(want),
			     "%s: pool.session_default_bytes: ", path);
	ck_assert_msg(!strncmp(err, want, n), "error \"%s\", want \"%s\"", err,
		      want);
	EXPECT_MEM(&c, &before, sizeof(c), "%s", "failed cross check");

	write_conf(path, sizeof(path), "cross2.conf",
		   "[daemon]\nsocket = /tmp/s\nadmin_socket = /tmp/s\n");
	ck_assert_int_eq(kvmemd_config_load(&c, path, 1, err, sizeof(err)),
			 -EINVAL);
	n = (size_t)snprintf(want, sizeof(want),
			     "%s: daemon.admin_socket: ", path);
	ck_assert_msg(!strncmp(err, want, n), "error \"%s\", want \"%s\"", err,
		      want);
	EXPECT_MEM(&c, &before, sizeof(c), "%s", "failed cross check");

	/* The same keys raised together pass. */
	load_ok(&c, "cross3.conf",
		"[pool]\nsession_default_bytes = 1G\nsession_max_bytes = 1G\n");
	ck_assert_uint_eq(c.session_default_bytes, 1073741824ull);
}
END_TEST

/* ---- print and reload ---------------------------------------------- */

/* Print @c to a file, load it over @over, expect @c back byte for byte. */
static void round_trip(const struct kvmemd_config *c,
		       const struct kvmemd_config *over, const char *name)
{
	struct kvmemd_config got;
	char path[256], err[2048] = "";
	FILE *f;
	int ret;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	f = fopen(path, "w");
	ck_assert_msg(f != NULL, "cannot create %s", path);
	kvmemd_config_print(c, f);
	ck_assert_int_eq(fclose(f), 0);
	memcpy(&got, over, sizeof(got));
	ret = kvmemd_config_load(&got, path, 1, err, sizeof(err));
	ck_assert_msg(ret == 0, "load of printed %s: %d: %s", name, ret, err);
	EXPECT_MEM(&got, c, sizeof(got), "printed and loaded back: %s", name);
}

START_TEST(test_config_print_round_trip)
{
	struct kvmemd_config def, all, odd;

	ck_assert_msg(tmpdir[0], "no temporary directory");
	defaults(&def);
	defaults(&all);
	load_ok(&all, "every.conf", every_key);
	/* every key differs from the defaults: print must write each one */
	round_trip(&all, &def, "all.printed");
	/* and back: the defaults over everything changed, empty lists too */
	set_ok(&def, "daemon.allow_gids", "");
	set_ok(&def, "daemon.tenants", "");
	set_ok(&def, "daemon.group", "");
	round_trip(&def, &all, "def.printed");

	/* sizes that are not whole units, ids at their ends, odd paths */
	defaults(&odd);
	set_ok(&odd, "pool.host_bytes", "1099511627775");
	set_ok(&odd, "pool.session_max_bytes", "1048577");
	set_ok(&odd, "pool.session_default_bytes", "65537");
	set_ok(&odd, "daemon.allow_uids", "0 4294967294");
	set_ok(&odd, "daemon.allow_gids", "4294967294");
	set_ok(&odd, "daemon.socket", "/tmp/a#b;c d");
	set_ok(&odd, "daemon.log_level", "err");
	/* decimals with no short binary form, and 1e-7 */
	set_ok(&odd, "scrub.target_ue_per_day", "0.1");
	set_ok(&odd, "scrub.rate_max", "3");
	round_trip(&odd, &all, "odd.printed");
	set_ok(&odd, "scrub.target_ue_per_day", "1e-7");
	set_ok(&odd, "pool.gpu_bytes", "37%");
	round_trip(&odd, &all, "odd.printed");
}
END_TEST

START_TEST(test_config_print_format)
{
	static const char *const names[] = {
		"socket",
		"admin_socket",
		"state_dir",
		"group",
		"allow_uids",
		"allow_gids",
		"tenants",
		"admin_group",
		"max_sessions",
		"max_sessions_per_uid",
		"keep_sessions",
		"keep_on_crash",
		"resume_seconds",
		"log_level",
		"host_bytes",
		"session_default_bytes",
		"session_max_bytes",
		"hugepages",
		"mlock",
		"gpu_device",
		"gpu_bytes",
		"gpu_session_max_bytes",
		"gpu_pinned_bytes",
		"sq_entries",
		"max_entries",
		"poll_idle_us",
		"max_seqs",
		"rate",
		"cycle",
		"target_ue_per_day",
		"rate_max",
		"verify_on_seal",
		"allow_inject",
		"events",
		"low_watermark",
		"high_watermark",
		"stale_tokens",
		"offload",
		"archive_tokens",
		"archive_heat",
		"bits_budget",
		"archive_format",
		"archive_codec",
		"archive_rate",
		"bytes",
		"uid_bytes",
		"idle_seconds",
		"publishers",
		"keep",
		"seeds",
		"credentials",
		"timeout_ms",
		"retries",
		"ttl_seconds",
		"publish",
		"queue_bytes",
		"path",
		"size",
		"reformat",
		"queue_depth",
		"io_bytes",
		"engine",
		"retain_bytes",
		"retain_seconds",
		"threads",
		"queue_depth",
	};
	static const char *const sections[] = {
		"[daemon]", "[pool]",	"[ring]",  "[scrub]",  "[tier]",
		"[prefix]", "[remote]", "[store]", "[workers]"
	};
	struct kvmemd_config c;
	char *text = NULL, *line, *save, prev[1024] = "";
	size_t len = 0, n_keys = 0, n_sections = 0, klen;
	FILE *f;

	defaults(&c);
	f = open_memstream(&text, &len);
	ck_assert_msg(f != NULL, "%s", "open_memstream");
	kvmemd_config_print(&c, f);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_msg(strstr(text, "\nhost_bytes = 1G\n") != NULL, "%s", text);
	ck_assert_msg(strstr(text, "\nlog_level = info\n") != NULL, "%s", text);
	ck_assert_msg(strstr(text, "\nhugepages = auto\n") != NULL, "%s", text);
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (line[0] == '[') {
			ck_assert_uint_lt(n_sections,
					  KVMEM_ARRAY_SIZE(sections));
			ck_assert_str_eq(line, sections[n_sections]);
			n_sections++;
		} else if (line[0] != '#') {
			ck_assert_uint_lt(n_keys, KVMEM_ARRAY_SIZE(names));
			klen = strlen(names[n_keys]);
			ck_assert_msg(!strncmp(line, names[n_keys], klen) &&
					      !strncmp(line + klen, " =", 2),
				      "line \"%s\", want key %s", line,
				      names[n_keys]);
			/* one comment line with the default before each */
			ck_assert_msg(prev[0] == '#' &&
					      strstr(prev, "default") != NULL,
				      "no comment before \"%s\": \"%s\"", line,
				      prev);
			n_keys++;
		}
		snprintf(prev, sizeof(prev), "%s", line);
	}
	ck_assert_uint_eq(n_sections, KVMEM_ARRAY_SIZE(sections));
	ck_assert_uint_eq(n_keys, KVMEM_ARRAY_SIZE(names));
	free(text);
}
END_TEST

START_TEST(test_config_reload)
{
	struct kvmemd_config live, fresh, want;

	defaults(&live);
	defaults(&fresh);
	load_ok(&fresh, "every.conf", every_key);

	/* What a restart needs stays as it was; the rest is fresh's. */
	memcpy(&want, &fresh, sizeof(want));
	memcpy(want.socket, live.socket, sizeof(want.socket));
	memcpy(want.admin_socket, live.admin_socket, sizeof(want.admin_socket));
	memcpy(want.state_dir, live.state_dir, sizeof(want.state_dir));
	memcpy(want.group, live.group, sizeof(want.group));
	want.host_bytes = live.host_bytes;
	want.threads = live.threads;
	want.queue_depth = live.queue_depth;

	kvmemd_config_reload(&live, &fresh);
	EXPECT_MEM(&live, &want, sizeof(live), "%s", "after reload");
	ck_assert_uint_eq(live.host_bytes, 1073741824ull);
	ck_assert_uint_eq(live.threads, 2);
	ck_assert_uint_eq(live.queue_depth, 64);
	ck_assert_uint_eq(live.n_allow_uids, 3);
	ck_assert_uint_eq(live.allow_uids[2], 2000);
	ck_assert_uint_eq(live.n_allow_gids, 2);
	ck_assert_uint_eq(live.session_max_bytes, 2147483648ull);
	ck_assert_uint_eq(live.sq_entries, 64);
	ck_assert_int_eq(live.log_level, LOG_DEBUG);
}
END_TEST

KVMEM_SUITE(config)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("config");

	tcase_set_timeout(tc, 60);
	tcase_add_unchecked_fixture(tc, tmpdir_make, tmpdir_remove);
	tcase_add_test(tc, test_config_defaults_values);
	tcase_add_test(tc, test_config_defaults_paths);
	tcase_add_test(tc, test_config_every_key);
	tcase_add_test(tc, test_config_comments_whitespace);
	tcase_add_test(tc, test_config_syntax_errors);
	tcase_add_test(tc, test_config_value_errors);
	tcase_add_test(tc, test_config_missing_file);
	tcase_add_test(tc, test_config_sizes);
	tcase_add_test(tc, test_config_integers);
	tcase_add_test(tc, test_config_reals);
	tcase_add_test(tc, test_config_gpu_percent);
	tcase_add_test(tc, test_config_enums);
	tcase_add_test(tc, test_config_ids);
	tcase_add_test(tc, test_config_publishers);
	tcase_add_test(tc, test_config_paths);
	tcase_add_test(tc, test_config_cross_checks);
	tcase_add_test(tc, test_config_print_round_trip);
	tcase_add_test(tc, test_config_print_format);
	tcase_add_test(tc, test_config_reload);
	suite_add_tcase(s, tc);
	return s;
}
