/* SPDX-License-Identifier: MIT */
/*
 * session.c - a KV cache in kvmemd, and taking it back after kvmemd
 * restarts
 *
 * kvmem_connect() attaches to a running kvmemd: the pages live in an arena
 * the daemon shares with this process, which writes and reads them
 * directly; allocations and seals go to the daemon through a ring. The
 * program appends a prompt's K and V (synthetic, the same on every run),
 * releases the sequence (kvmemd may then move its pages to a slower tier)
 * and acquires it again, attending before and after.
 *
 * With -w it then waits for a line on stdin: restart kvmemd meanwhile. A
 * kvmemd under systemd, whose unit keeps a descriptor store (the shipped
 * kvmemd.service does; kvmemd(8), RESTARTS), hands each session's memory to
 * systemd when it stops, and the next kvmemd takes it back: the client's
 * next call that needs the daemon fails with -ENOTCONN, kvmem_reconnect()
 * takes the session back, and every sequence is as it was. A kvmemd that
 * did not keep the session (run by hand without a descriptor store, killed
 * with keep_on_crash off, or back too late) answers -ESTALE: the client
 * then starts over with a new session and computes its prompt again.
 *
 *   session [-w] [SOCKET]     SOCKET: kvmem_socket_path() when not given
 *
 * Build (examples/README.md): cc -o session session.c
 * $(pkg-config --cflags --libs kvmem)
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <kvmem/kvmem.h>

#define LAYERS 2
#define KV_HEADS 2
#define HEAD_DIM 64
#define N_HEADS 8
#define PROMPT 70 /* tokens before the restart */
#define NTOK 110 /* and after it */
#define ROW (KV_HEADS * HEAD_DIM)

/* K and V of every token, layer by layer: [LAYERS][NTOK][ROW]. */
static float k[LAYERS * NTOK * ROW], v[LAYERS * NTOK * ROW];
static float q[N_HEADS * HEAD_DIM];

/* Deterministic stand-ins for a model's values: xorshift, in [-1, 1). */
static float synth(uint32_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 17;
	*x ^= *x << 5;
	return (float)(*x >> 8) / (float)(1u << 23) - 1.0f;
}

static void make_values(void)
{
	uint32_t x = 88172645u;
	size_t i;

	for (i = 0; i < LAYERS * NTOK * ROW; i++) {
		k[i] = synth(&x);
		v[i] = synth(&x);
	}
	for (i = 0; i < N_HEADS * HEAD_DIM; i++)
		q[i] = synth(&x);
}

/*
 * kvmem_reconnect() after a call failed with -ENOTCONN. It says hello to
 * the kvmemd now at the same socket, waiting up to 30 s for one to listen.
 */
static int take_back(struct kvmem_cache *c)
{
	int ret;

	printf("kvmemd connection lost: taking the session back\n");
	ret = kvmem_reconnect(c);
	if (ret == 0)
		printf("took session %u back\n", kvmem_session_id(c));
	return ret;
}

/*
 * Append tokens up to @to of every layer, a layer at a time as a model's
 * forward pass makes them. An append that fills a page asks kvmemd to seal
 * it; if kvmemd is gone that fails with -ENOTCONN, keeping the tokens
 * before. After taking the session back, go on from where kvmem_seq_len()
 * says each layer stopped.
 */
static int append_to(struct kvmem_cache *c, struct kvmem_seq *s, uint32_t to)
{
	uint32_t l, len;
	int ret;

	for (l = 0; l < LAYERS; l++) {
		do {
			len = kvmem_seq_len(s, l);
			ret = kvmem_seq_append(s, l, k + (l * NTOK + len) * ROW,
					       v + (l * NTOK + len) * ROW,
					       to - len);
		} while (ret == -ENOTCONN && (ret = take_back(c)) == 0);
		if (ret)
			return ret;
	}
	return 0;
}

/* Attention of the query over layer 0; @out receives it. */
static int attend(struct kvmem_seq *s, float *out)
{
	struct kvmem_attend_opts opts = { 0 };

	opts.n_heads = N_HEADS;
	return kvmem_attend(s, 0, q, out, &opts, NULL);
}

static const char *same(const float *a, const float *b)
{
	return memcmp(a, b, sizeof(float) * N_HEADS * HEAD_DIM) ? "no" : "yes";
}

/* A new session holding the prompt: at the start, and to start over. */
static int start(const char *path, const struct kvmem_geometry *g,
		 struct kvmem_cache **c, struct kvmem_seq **s)
{
	int ret = kvmem_connect(path, g, NULL, c);

	if (ret) {
		fprintf(stderr, "kvmem_connect: %s%s%s\n", kvmem_strerror(ret),
			*kvmem_connect_error() ? ": " : "",
			kvmem_connect_error());
		return ret;
	}
	ret = kvmem_seq_create(*c, s);
	if (!ret)
		ret = append_to(*c, *s, PROMPT);
	if (ret) {
		fprintf(stderr, "the prompt: %s\n", kvmem_strerror(ret));
		kvmem_close(*c);
		return ret;
	}
	printf("session %u: appended %u tokens to %u layers\n",
	       kvmem_session_id(*c), kvmem_seq_len(*s, 0), LAYERS);
	return 0;
}

int main(int argc, char **argv)
{
	float before[N_HEADS * HEAD_DIM], after[N_HEADS * HEAD_DIM];
	struct kvmem_geometry g = { 0 };
	struct kvmem_stats st;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	char path[108], line[16];
	int wait = 0, ret;

	if (argc > 1 && !strcmp(argv[1], "-w")) {
		wait = 1;
		argc--;
		argv++;
	}
	if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
		fprintf(stderr, "usage: session [-w] [SOCKET]\n");
		return 2;
	}
	if (argc == 2)
		snprintf(path, sizeof(path), "%s", argv[1]);
	else if (!kvmem_socket_path(path, sizeof(path)))
		return 1;
	printf("kvmemd socket: %s\n", path);

	make_values();
	g.layers = LAYERS;
	g.kv_heads = KV_HEADS;
	g.head_dim = HEAD_DIM;
	kvmem_geometry_default(&g);
	if (start(path, &g, &c, &s))
		return 1;

	ret = attend(s, before);
	if (ret)
		goto err;
	/* Between two turns of a conversation, say: the pages may go. */
	ret = kvmem_seq_release(s);
	if (ret)
		goto err;
	printf("released: kvmemd may move its pages to a slower tier\n");
	ret = kvmem_seq_acquire(s);
	if (ret)
		goto err;
	ret = attend(s, after);
	if (ret)
		goto err;
	printf("acquired: resident again, attention the same bits: %s\n",
	       same(before, after));

	if (wait) {
		printf("restart kvmemd now (systemctl restart kvmemd), then "
		       "press Enter\n");
		fflush(stdout);
		if (!fgets(line, sizeof(line), stdin))
			printf("no line on stdin: going on\n");
	}

	/*
	 * Reads and attention over resident pages never ask the daemon, so
	 * they would go on working; ask it for the session's counters, as
	 * an engine's next allocation, seal or release would.
	 */
	ret = kvmem_daemon_stats(c, &st);
	if (ret == -ENOTCONN)
		ret = take_back(c);
	if (ret == -ESTALE || ret == -EOPNOTSUPP) {
		printf("kvmemd did not keep the session (%s): starting over\n",
		       ret == -EOPNOTSUPP ? "it offered no way to: it runs "
					    "without a descriptor store"
					  : kvmem_strerror(ret));
		kvmem_close(c);
		if (start(path, &g, &c, &s))
			return 1;
		ret = 0;
	}
	if (ret)
		goto err;
	ret = attend(s, after);
	if (ret)
		goto err;
	printf("session %u holds %u tokens, attention the same bits: %s\n",
	       kvmem_session_id(c), kvmem_seq_len(s, 0), same(before, after));

	ret = append_to(c, s, NTOK);
	if (ret)
		goto err;
	printf("appended up to %u tokens\n", kvmem_seq_len(s, 0));
	kvmem_close(c);
	return 0;
err:
	fprintf(stderr, "kvmem: %s\n", kvmem_strerror(ret));
	kvmem_close(c);
	return 1;
}
