/* SPDX-License-Identifier: MIT */
/*
 * prefix-sharing.c - two processes share the K/V of a system prompt
 * through kvmemd
 *
 * Two requests start with the same system prompt and go on with questions
 * of their own. The first process computes the whole prompt's K and V,
 * names each block of the system prompt by a key and publishes those
 * blocks. The second, a process of its own with a kvmemd session of its
 * own, computes the keys of its own prompt the same way, attaches what was
 * published under them, and computes K and V only for the tokens after the
 * match. Attention over the attached tokens is then the same, bit for bit,
 * as the publisher's over its own.
 *
 * A block is the sink page (the first sink_tokens tokens) or one page of
 * tokens_per_page tokens after it, in every layer; the blocks of the
 * default geometry end at tokens 4, 36, 68, 100, ... Only whole blocks are
 * shared. The K/V of a token depends on the model and on every token
 * before it, so the key of block i is a SHA-256 chain over the model's
 * name and the tokens of blocks 0..i (kvmem_prefix_keys()): equal keys,
 * equal prefixes. kvmemd shares blocks between the sessions of one user.
 *
 *   prefix-sharing [SOCKET [SYSTEM_TOKENS]]   (default socket, 110 tokens)
 *
 * Build (examples/README.md): cc -o prefix-sharing prefix-sharing.c
 * $(pkg-config --cflags --libs kvmem)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <kvmem/kvmem.h>

#define LAYERS 2
#define KV_HEADS 2
#define HEAD_DIM 64
#define N_HEADS 8
#define ROW (KV_HEADS * HEAD_DIM)
#define MAX_TOKENS 1024
#define MAX_BLOCKS 64
#define QUESTION 20 /* tokens of each process's own question */
#define MODEL "example-model-v1" /* names the weights the K/V come from */

/* The publisher's attention over the shared tokens, which the second
 * process gets as a copy of this memory at fork(), to compare with. */
static float published_out[N_HEADS * HEAD_DIM];

static float synth(uint32_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 17;
	*x ^= *x << 5;
	return (float)(*x >> 8) / (float)(1u << 23) - 1.0f;
}

/*
 * What a model's forward pass would compute for @token at @pos in @layer.
 * Here values drawn from a seed made of the three, so that both processes
 * compute the same K/V for the same tokens; a real model's depend on all
 * the tokens before too, which the chained keys account for.
 */
static void forward(uint32_t layer, uint32_t pos, uint32_t token, float *k,
		    float *v)
{
	uint32_t x = 2166136261u ^ (layer * 16777619u + pos * 40503u + token);
	unsigned int i;

	x = x ? x : 1;
	for (i = 0; i < ROW; i++) {
		k[i] = synth(&x);
		v[i] = synth(&x);
	}
}

/* Compute and append tokens @from..@n-1 of @tokens, layer by layer. */
static int compute(struct kvmem_seq *s, const uint32_t *tokens, uint32_t from,
		   uint32_t n)
{
	float k[ROW], v[ROW];
	uint32_t l, t;
	int ret;

	for (l = 0; l < LAYERS; l++)
		for (t = from; t < n; t++) {
			forward(l, t, tokens[t], k, v);
			ret = kvmem_seq_append(s, l, k, v, 1);
			if (ret)
				return ret;
		}
	return 0;
}

/*
 * Attention of a fixed query over tokens 0..@ntok-1 of layer 0, however
 * long the sequence is: kvmem_attend_causal() with the query at the last
 * of them.
 */
static int attend_first(struct kvmem_seq *s, uint32_t ntok, float *out)
{
	struct kvmem_attend_opts opts = { 0 };
	float q[N_HEADS * HEAD_DIM];
	uint32_t x = 12345u;
	unsigned int i;

	for (i = 0; i < N_HEADS * HEAD_DIM; i++)
		q[i] = synth(&x);
	opts.n_heads = N_HEADS;
	return kvmem_attend_causal(s, 0, q, 1, ntok - 1, out, &opts, NULL);
}

/* A prompt: the system prompt's tokens, then a question from @first. */
static uint32_t prompt(uint32_t *tokens, uint32_t system, uint32_t first)
{
	uint32_t i;

	for (i = 0; i < system; i++)
		tokens[i] = (i * 37 + 11) % 256;
	for (i = 0; i < QUESTION; i++)
		tokens[system + i] = first + i;
	return system + QUESTION;
}

static int connect_to(const char *path, const struct kvmem_geometry *g,
		      struct kvmem_cache **c)
{
	int ret = kvmem_connect(path, g, NULL, c);

	if (ret)
		fprintf(stderr, "kvmem_connect: %s: %s\n", kvmem_strerror(ret),
			kvmem_connect_error());
	return ret;
}

/* The second process: attach what matches, compute the rest. */
static int second(const char *path, const struct kvmem_geometry *g,
		  uint32_t system, uint32_t shared)
{
	struct kvmem_prefix_key keys[MAX_BLOCKS];
	uint32_t tokens[MAX_TOKENS], n;
	float out[N_HEADS * HEAD_DIM];
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	int nkeys, matched, ret;

	if (connect_to(path, g, &c))
		return 1;
	n = prompt(tokens, system, 300);
	/* Keys of every whole block of this process's prompt: the engine
	 * does not know how much of it another request shares. */
	nkeys = kvmem_prefix_keys(c, MODEL, tokens, n, keys, MAX_BLOCKS);
	matched = kvmem_prefix_attach(c, keys, (uint32_t)nkeys, &s);
	if (matched < 0) {
		fprintf(stderr, "kvmem_prefix_attach: %s\n",
			kvmem_strerror(matched));
		kvmem_close(c);
		return 1;
	}
	printf("second process, session %u: its prompt of %u tokens has %d "
	       "whole blocks; matched %d tokens\n",
	       kvmem_session_id(c), n, nkeys, matched);

	/* Only the tokens after the match go through the model. */
	ret = compute(s, tokens, (uint32_t)matched, n);
	if (ret)
		goto out;
	printf("second process: computed tokens %d..%u, %u in the sequence\n",
	       matched, n - 1, kvmem_seq_len(s, 0));
	if (matched) {
		ret = attend_first(s, (uint32_t)matched, out);
		if (ret)
			goto out;
		printf("attention over the %d attached tokens, the same bits "
		       "as the publisher's: %s\n",
		       matched,
		       memcmp(out, published_out, sizeof(out)) ? "no" : "yes");
		if (memcmp(out, published_out, sizeof(out)) ||
		    (uint32_t)matched != shared)
			ret = 1;
	}
out:
	if (ret < 0)
		fprintf(stderr, "kvmem: %s\n", kvmem_strerror(ret));
	kvmem_close(c);
	return ret ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct kvmem_prefix_key keys[MAX_BLOCKS];
	uint32_t tokens[MAX_TOKENS], system = 110, n, shared = 0;
	const char *path = argc > 1 ? argv[1] : NULL;
	struct kvmem_geometry g = { 0 };
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	int nkeys, published, status, ret;
	pid_t pid;

	if (argc > 2)
		system = (uint32_t)strtoul(argv[2], NULL, 10);
	if (argc > 3 || system < 1 || system > MAX_TOKENS - QUESTION) {
		fprintf(stderr,
			"usage: prefix-sharing [SOCKET [SYSTEM_TOKENS"
			" (1 to %d)]]\n",
			MAX_TOKENS - QUESTION);
		return 2;
	}
	g.layers = LAYERS;
	g.kv_heads = KV_HEADS;
	g.head_dim = HEAD_DIM;
	kvmem_geometry_default(&g);
	if (connect_to(path, &g, &c))
		return 1;

	/* The publisher: the whole of its prompt through the model. */
	n = prompt(tokens, system, 200);
	ret = kvmem_seq_create(c, &s);
	if (!ret)
		ret = compute(s, tokens, 0, n);
	if (ret)
		goto err;
	printf("publisher, session %u: computed a prompt of %u tokens, the "
	       "first %u the system prompt\n",
	       kvmem_session_id(c), n, system);

	/* Keys of the system prompt's whole blocks: its tail, the part of
	 * a block it does not fill, is not shared. */
	nkeys = kvmem_prefix_keys(c, MODEL, tokens, system, keys, MAX_BLOCKS);
	if (nkeys > 0) {
		published = kvmem_prefix_publish(s, keys, (uint32_t)nkeys);
		if (published < 0) {
			ret = published;
			goto err;
		}
		/* At least one: a refusal of the first is an error. */
		shared = kvmem_prefix_block_end(c, published - 1);
		printf("publisher: published %d blocks, tokens 0..%u; the "
		       "first key begins %02x%02x%02x%02x\n",
		       published, shared - 1, keys[0].bytes[0],
		       keys[0].bytes[1], keys[0].bytes[2], keys[0].bytes[3]);
		ret = attend_first(s, shared, published_out);
		if (ret)
			goto err;
	} else {
		printf("publisher: the system prompt holds no whole block: "
		       "nothing to publish\n");
	}

	/* A process of its own, as another worker of the engine would be;
	 * it opens a session of its own and leaves this one alone. */
	fflush(stdout);
	pid = fork();
	if (pid < 0) {
		perror("fork");
		kvmem_close(c);
		return 1;
	}
	if (pid == 0) {
		/* _exit(): the publisher's cache is not the child's to
		 * close, but the child's output is its to flush. */
		status = second(path, &g, system, shared);
		fflush(stdout);
		_exit(status);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status)) {
		fprintf(stderr, "the second process failed\n");
		kvmem_close(c);
		return 1;
	}
	kvmem_close(c);
	return 0;
err:
	fprintf(stderr, "kvmem: %s\n", kvmem_strerror(ret));
	kvmem_close(c);
	return 1;
}
