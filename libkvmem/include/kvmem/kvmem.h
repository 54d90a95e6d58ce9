/* SPDX-License-Identifier: MIT */
/*
 * kvmem/kvmem.h - the KV cache: sequences of protected pages, and
 * decode-on-load attention over them
 *
 * A cache has one geometry (kvmem/page.h). A sequence holds, per layer, a
 * table of pages:
 *
 *   [sink page]  [sealed page] ... [sealed page]  [tail page]
 *    FP16, the    format + codec of the geometry,   FP16, being
 *    first        quantized and encoded when the    written
 *    sink_tokens  tail filled up; immutable
 *
 * Tokens 0 .. sink_tokens-1 live in the sink page; after it, page p holds
 * tokens sink_tokens + p * tokens_per_page onwards. Sealed pages (and a full
 * sink page) are shared between forks with reference counts; the tail is
 * copied on fork.
 *
 * Embedded mode (kvmem_open_embedded()) keeps the pages in an arena of this
 * process. kvmem_connect() attaches to kvmemd instead: the pages live in a
 * shared arena the daemon owns and the client writes and reads directly,
 * while allocation, sealing, forks and frees go to the daemon through a ring
 * (kvmem/uapi.h). Every call below works the same on both.
 *
 * Errors are negative errno values (kvmem_strerror()). Over kvmemd,
 * -ENOTCONN means the daemon is gone (stopped, restarted, or it dropped
 * this client): nothing new can be allocated, but the pages already in the
 * arena stay mapped and readable until kvmem_close().
 *
 * A cache and its sequences are not thread-safe: use one thread at a time,
 * or lock around every call.
 */
#ifndef KVMEM_KVMEM_H
#define KVMEM_KVMEM_H

#include <stddef.h>
#include <stdint.h>

#include "kvmem/ecc.h"
#include "kvmem/page.h"
#include "kvmem/quant.h"
#include "kvmem/uapi.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kvmem_cache;
struct kvmem_seq;

/**
 * kvmem_open_embedded() - an in-process cache
 * @g: the geometry of every page (kvmem_geometry_check())
 * @arena_bytes: memory for pages, one mapping (huge pages when the system
 *               has them); allocation past it fails with -ENOMEM
 * @out: receives the cache
 *
 * Return: 0, -EINVAL for a bad geometry or an arena too small for one page of
 * each kind, -ENOMEM.
 */
int kvmem_open_embedded(const struct kvmem_geometry *g, size_t arena_bytes,
			struct kvmem_cache **out);

struct kvmem_connect_opts {
	uint64_t quota_bytes; /* arena wanted; 0: the daemon's default */
	uint32_t sq_entries; /* power of two; 0: the daemon's default */
	uint32_t cq_entries; /* power of two >= sq_entries; 0: 2 x SQ, or SQ
			     * when that is over the largest ring */
	int32_t spin_us; /* busy-wait this long for a completion before
			  * sleeping; 0: 50, < 0: never spin */
	uint32_t gpu_mib; /* GPU memory from kvmemd's GPU pool, MiB; 0: none
			   * (kvmem_cuda_register() maps it) */
	uint32_t flags; /* KVMEM_CONNECT_* */
	uint32_t resv; /* must be 0 */
};

/*
 * Keep every page in the geometry's format and codec: kvmemd's archive
 * tier (tier.archive_tokens) leaves the session alone. For caches whose
 * pages the CUDA kernels read (kvmem_cuda_register()), which do not read
 * archived pages.
 */
#define KVMEM_CONNECT_NO_ARCHIVE (1u << 0)

/*
 * With gpu_mib: the session's GPU memory is kvmemd's GPU tier
 * (KVMEM_FEAT_GPU_TIER, kvmem/uapi.h) instead of the caller's.
 * kvmem_cuda_seq_pages() moves a sequence's sealed pages there as far as
 * they fit and gives their addresses there; the CPU's calls on the
 * sequence (kvmem_attend(), kvmem_seq_read(), ...) bring them back to host
 * memory first, a copy each way. kvmem_cuda_session_memory() refuses such
 * a session. kvmem_connect() fails with -EOPNOTSUPP where kvmemd does not
 * offer the tier.
 */
#define KVMEM_CONNECT_GPU_TIER (1u << 1)

/**
 * kvmem_socket_path() - where kvmemd listens by default
 * @buf: receives the path
 * @len: size of @buf
 *
 * $KVMEM_SOCKET when set; else /run/kvmem/kvmemd.sock for root,
 * $XDG_RUNTIME_DIR/kvmem/kvmemd.sock when that is an absolute path,
 * ./run/kvmemd.sock otherwise: kvmemd's own default, computed by the same
 * code.
 *
 * Return: @buf, or NULL when the path does not fit.
 */
char *kvmem_socket_path(char *buf, size_t len);

/**
 * kvmem_connect() - attach to kvmemd
 * @path: its socket; NULL: kvmem_socket_path()
 * @g: the geometry of every page (kvmem_geometry_check())
 * @opts: NULL for the defaults
 * @out: receives the cache
 *
 * Blocks until the daemon has set up the session's memory, at most 30 s;
 * while the daemon answers that it is busy, it attaches again, after a
 * pause of half to all of a step that doubles from 1 ms to 100 ms.
 *
 * Return: 0; -ENOENT or -ECONNREFUSED when no daemon listens at @path;
 * -EACCES when the daemon does not admit this user; -EDQUOT when the quota
 * is over the daemon's per-session limit; -ENOSPC when its pool cannot take
 * the session; -EOPNOTSUPP when GPU memory is asked of a daemon without a
 * GPU pool; -EUSERS at its session limit; -EAGAIN when it stayed busy
 * setting up others for 30 s; -EPROTONOSUPPORT for another ABI version;
 * -EINVAL for a bad geometry or options; -ETIMEDOUT when the daemon does
 * not answer within 30 s; -EMFILE when this process has no room for the
 * session's descriptors; -ENOMEM. kvmem_connect_error() says why in words.
 */
int kvmem_connect(const char *path, const struct kvmem_geometry *g,
		  const struct kvmem_connect_opts *opts,
		  struct kvmem_cache **out);

/*
 * The reason the last kvmem_connect() of this thread failed, as the daemon
 * gave it when it refused; "" after a success.
 */
const char *kvmem_connect_error(void);

/**
 * kvmem_reconnect() - take the session back from a kvmemd that restarted
 * @c: a cache from kvmem_connect() whose calls fail with -ENOTCONN
 *
 * A kvmemd that runs under systemd with a descriptor store keeps its
 * sessions when it stops (kvmemd(8), RESTARTS): the arena, the sequences
 * and their pages, those on the backing store too. Once a call failed with
 * -ENOTCONN, this says hello to the new kvmemd at the same socket and
 * takes the session back: every sequence and page is as it was, the calls
 * that failed did nothing (calls that completed before the stop stay
 * done; an op that was waiting, an acquire or an allocation into a full
 * arena, failed with -ECANCELED). Ops of the raw ring that were submitted
 * and never completed are dropped and never complete. Tries for up to
 * 30 s while the new kvmemd is not there yet.
 *
 * Return: 0 (also when the connection was not lost); -ESTALE when kvmemd
 * did not keep the session (it was killed, its record did not verify, or
 * the client came back too late); -EOPNOTSUPP when kvmemd never offered
 * to keep it; as kvmem_connect() otherwise. The cache stays usable for
 * nothing but kvmem_close() after a failure, or another try.
 */
int kvmem_reconnect(struct kvmem_cache *c);

/**
 * kvmem_session_id() - the daemon's id for the session behind a cache
 * @c: the cache
 *
 * The id kvmemd's log names the session by ("session 3: pid 1234 ..."), so
 * that an operator can tell which session is which process's.
 *
 * Return: the id (1 or more), or 0 for an embedded cache.
 */
uint32_t kvmem_session_id(const struct kvmem_cache *c);

/**
 * kvmem_strerror() - a message for a negative errno from this library
 * @err: the value
 *
 * Return: a static string; kvmem's own meaning where it has one (-ENOTCONN:
 * "kvmemd connection lost"), else strerror()'s.
 */
const char *kvmem_strerror(int err);

/**
 * kvmem_version() - the release of this library
 *
 * The Makefile's VERSION, which kvmemd --version and kvmemctl --version
 * print too. A program linked against the shared library learns the
 * release it runs with, which may be newer than the one it was built
 * against (the SONAME only changes with the ABI).
 *
 * Context: any thread; does not block.
 * Return: a static string, "MAJOR.MINOR.PATCH".
 */
const char *kvmem_version(void);

/**
 * kvmem_close() - free a cache and every sequence still in it
 * @c: the cache, or NULL
 *
 * Over kvmemd this detaches: the daemon frees the session.
 */
void kvmem_close(struct kvmem_cache *c);

/* The geometry the cache was opened with. */
const struct kvmem_geometry *kvmem_cache_geometry(const struct kvmem_cache *c);

struct kvmem_cache_stats {
	uint64_t arena_bytes; /* size of the arena */
	uint64_t used_bytes; /* in pages */
	uint64_t hot_pages; /* FP16 pages (tails and sinks) */
	uint64_t sealed_pages;
	uint64_t seqs;
	uint64_t ring_errors; /* kvmemd: batched ring ops that failed */
};

void kvmem_cache_stats(const struct kvmem_cache *c,
		       struct kvmem_cache_stats *st);

/**
 * kvmem_seq_create() - a new, empty sequence
 * @c: the cache
 * @out: receives the sequence
 *
 * A new sequence is acquired (see kvmem_seq_release()).
 *
 * Return: 0, -ENOMEM, -ENOSPC at kvmemd's sequence limit, -ENOTCONN.
 */
int kvmem_seq_create(struct kvmem_cache *c, struct kvmem_seq **out);

/**
 * kvmem_seq_append() - append tokens to one layer
 * @s: the sequence
 * @layer: the layer
 * @k: @ntokens rows of [kv_heads][head_dim] floats
 * @v: the same for V
 * @ntokens: number of tokens
 *
 * A model appends layer by layer as its forward pass produces K and V, then
 * attends that layer. Each layer has its own length. Tokens are written to
 * the FP16 tail; a tail that fills up is quantized from those FP16 values,
 * encoded and sealed on the way.
 *
 * Over kvmemd, appends within a tail page write only the arena; one that
 * fills a tail page asks the daemon to seal it. When K/V written so is
 * kept, and how its loss is reported: libkvmem(3), WHEN K/V IS SAFE.
 *
 * Return: 0; -ENOMEM when the arena is full (a token that fills a page
 * needs room for the page's sealed copy too), in which case the tokens that
 * fitted are kept (kvmem_seq_len() says how many) and nothing stored before
 * is touched; -EINVAL for a bad layer; -ENOTCONN when the tail page filled
 * and kvmemd is gone (the tokens before it are kept, as for -ENOMEM).
 */
int kvmem_seq_append(struct kvmem_seq *s, uint32_t layer, const float *k,
		     const float *v, uint32_t ntokens);

/**
 * kvmem_seq_append_all() - append tokens to every layer
 * @s: the sequence
 * @k: @ntokens rows of [layers][kv_heads][head_dim] floats
 * @v: the same for V
 * @ntokens: number of tokens
 *
 * Return: as kvmem_seq_append().
 */
int kvmem_seq_append_all(struct kvmem_seq *s, const float *k, const float *v,
			 uint32_t ntokens);

/* Tokens stored in @layer. */
uint32_t kvmem_seq_len(const struct kvmem_seq *s, uint32_t layer);

/**
 * kvmem_seq_fork() - a new sequence with the same contents
 * @s: the sequence
 * @out: receives the fork
 *
 * Sealed pages are shared (reference counts), the tails are copied; the two
 * sequences then grow independently.
 *
 * Return: 0 or -ENOMEM (nothing is allocated then).
 */
int kvmem_seq_fork(struct kvmem_seq *s, struct kvmem_seq **out);

/**
 * kvmem_seq_truncate() - keep only the first @ntokens tokens of every layer
 * @s: the sequence
 * @ntokens: tokens to keep; layers already shorter are left alone
 *
 * When the cut falls inside a sealed page, its kept tokens move back to an
 * FP16 tail (their dequantized values, rounded to FP16).
 *
 * Return: 0, or (the sequence unchanged) -ENOMEM, or -EBADMSG when the
 * cut falls inside a sealed page and a value it keeps is flagged lost (an
 * uncorrectable word, a failed check, a lost vq2 entry): the tail would
 * hold it as good. Cut at a page boundary, or read and append again.
 */
int kvmem_seq_truncate(struct kvmem_seq *s, uint32_t ntokens);

/**
 * kvmem_seq_archive() - re-encode a sequence's old pages for keeping
 * @s: the sequence, embedded mode
 * @before: pages whose tokens all lie before this position are archived
 * @format: enum kvmem_format of the archived pages: int8, int4, int2, fp8,
 *          lm4, lm3, lm2 or vq2
 * @codec: enum kvmem_codec of the archived pages
 *
 * The archive tier: old tokens, which attention reads less, kept in a
 * stronger code (int4 + golay24 corrects three flips in 24 bits where h84
 * corrects one in 8) or fewer bits (int2 + golay24 takes about 60% of the
 * memory of int4 + h84). Every sealed page of every layer of @s that ends
 * at or before @before is re-encoded with kvmem_page_archive(): in the same
 * format its values stay bit for bit what they were, in another they are
 * quantized again. Sinks and the FP16 tail stay as they are. A page that
 * has values flagged lost is left as it is (its losses stay flagged). A
 * page whose bytes changed since its seal without a word reporting it (a
 * miscorrection: the seal's CRC no longer matches once every word is
 * corrected) is left where it is with every value made to read as lost,
 * as kvmemd does with a page that comes back from its store as something
 * else: reads and attention then count and rebuild them. Pages are
 * shared: the forks holding one see it archived too. An archived page
 * moves: ->data of earlier kvmem_seq_pages() and earlier
 * kvmem_cuda_seq_pages() tables no longer point at it. Reads, attention,
 * forks and truncation honour each page's own format and codec
 * (kvmem_seq_pages() shows them); the CUDA kernels do not yet, and
 * kvmem_cuda_seq_pages() refuses a layer with archived pages. In the
 * arena, archived pages take slots of their own size: the slots they
 * leave are reused by pages sealed later, not by other archived pages.
 *
 *
 * vq2 (kvmem/quant.h) reads a layer's codebooks. A layer that has none
 * when its pages first go to vq2 learns them here, by k-means, from the
 * pages this call archives (Shard's prompt middle: archive the pages
 * before the end of the prompt once it is in), or takes the engine's
 * from kvmem_seq_codebook_set(). Later archives to vq2 use the same
 * codebooks, which never change, so that pages once encoded keep their
 * meaning: values unlike the first ones are encoded less well. A vq2 page
 * keeps the codebooks it was encoded with wherever it is shared: a fork
 * that learns codebooks of its own later reads the pages another fork
 * archived by theirs.
 *
 * Return: the number of pages re-encoded; -EINVAL or -E2BIG as
 * kvmem_page_layout_as(); -ENOMEM when the arena has no room for the next
 * archived page (those before it stay archived); -EOPNOTSUPP over kvmemd,
 * whose pages only the daemon may re-encode.
 */
int kvmem_seq_archive(struct kvmem_seq *s, uint32_t before, unsigned int format,
		      unsigned int codec);

/**
 * kvmem_seq_archive_budget() - fewer bits for the pages attention reads less
 * @s: the sequence, embedded mode
 * @bits: the most payload bits a value the sealed pages of a layer may
 *        average (their formats' bits, weighted by their tokens)
 * @format: enum kvmem_format the pages go down to, with fewer bits a
 *          value than the geometry's (lm2, int2, ...)
 * @codec: enum kvmem_codec of those pages
 *
 * Precision by attention, as SmartKV spends a budget of bits: in every
 * layer whose sealed pages average more than @bits a value, pages are
 * re-encoded as kvmem_seq_archive() does, least attended first (their
 * importance, the moving average of their share of attention that
 * kvmem_attend() keeps; between equals the older first), until the
 * average is at most @bits or no page with more bits than @format is
 * left. Sinks and the FP16 tail are not sealed pages and keep their
 * precision. Re-encoding to fewer bits loses what it drops: a page whose
 * attention mass comes back later keeps the bits it was left with (its
 * importance only keeps it from going lower), since nothing of the
 * first encoding is kept to restore it from.
 *
 * With vq2, a layer without codebooks learns them from all its sealed
 * pages when it first goes over @bits.
 *
 * Return: the number of pages re-encoded; -EINVAL for a negative or NaN
 * @bits, a @format of as many bits as the geometry's or more, or as
 * kvmem_seq_archive().
 */
int kvmem_seq_archive_budget(struct kvmem_seq *s, float bits,
			     unsigned int format, unsigned int codec);

/* A layer's vq2 codebooks, as kvmem_seq_codebook() describes them. */
struct kvmem_codebook_desc {
	/* The encoded codebooks (embedded mode): K's and V's of each KV
	 * head, 256 entries of four FP16 values each, in golay24 words,
	 * then a check an entry (the low 24 bits of the CRC-32C of its
	 * eight bytes) in two golay24 words. Writing here bypasses their
	 * protection; it is how tests inject errors. */
	void *data;
	size_t size; /* bytes */
	uint32_t words; /* golay24 codewords in @data */
	uint32_t entries; /* 2 * kv_heads * 256 */
	uint32_t refs; /* holders: layers of forks, and vq2 pages */
};

/**
 * kvmem_seq_codebook() - where a layer's vq2 codebooks are
 * @s: the sequence
 * @layer: the layer
 * @d: receives their description
 *
 * Nothing patrols an embedded cache's codebooks, as nothing patrols its
 * pages: kvmem_ecc_scrub(KVMEM_CODEC_GOLAY24, d->data, d->words, ...)
 * corrects them in place, as kvmem_page_scrub() does a page.
 *
 * Return: 0, -ENOENT when the layer has none, -EINVAL.
 */
int kvmem_seq_codebook(const struct kvmem_seq *s, uint32_t layer,
		       struct kvmem_codebook_desc *d);

/**
 * kvmem_seq_codebook_read() - a layer's vq2 codebooks, decoded
 * @s: the sequence
 * @layer: the layer
 * @entries: receives [2 * kv_heads][256][4] floats: book is_v * kv_heads
 *           + h holds the entries of K (is_v 0) or V of KV head h; index
 *           e of a vq2 row reads as channels 4j..4j+3 entry e of its book
 * @lost: receives [2 * kv_heads][256] flags, 1 for an entry whose words
 *        were uncorrectable or whose check failed; it reads as zeros, and
 *        the values that index it are erased (rebuilt from neighbouring
 *        tokens under KVMEM_ERASE_INTERPOLATE and KVMEM_ERASE_KEEP, 0
 *        under KVMEM_ERASE_ZERO)
 * @counts: if not NULL, receives the word counts of the decode
 *
 * The codebooks are never corrected in place by a read.
 *
 * Return: the number of lost entries, -ENOENT when the layer has no
 * codebooks, -EINVAL, -ENOMEM.
 */
long kvmem_seq_codebook_read(const struct kvmem_seq *s, uint32_t layer,
			     float *entries, uint8_t *lost,
			     struct kvmem_ecc_counts *counts);

/**
 * kvmem_seq_codebook_set() - give a layer the engine's vq2 codebooks
 * @s: the sequence, embedded mode
 * @layer: the layer
 * @entries: [2 * kv_heads][256][4] floats, as kvmem_seq_codebook_read()
 *           gives them, each made the nearest FP16; entries of a rotated
 *           geometry are in the rotated space its pages store
 *
 * For codebooks learned elsewhere (offline, or from another sequence).
 * Forks made after this share them.
 *
 * Return: 0, -EEXIST when the layer has codebooks already (pages may read
 * them), -EINVAL for a value that is not finite or beyond FP16's range,
 * -EOPNOTSUPP over kvmemd (whose sessions do not archive to vq2),
 * -ENOMEM.
 */
int kvmem_seq_codebook_set(struct kvmem_seq *s, uint32_t layer,
			   const float *entries);

/**
 * kvmem_seq_free() - free a sequence and its references to pages
 * @s: the sequence, or NULL
 */
void kvmem_seq_free(struct kvmem_seq *s);

/**
 * kvmem_seq_release() - let the daemon move a sequence's pages
 * @s: the sequence
 *
 * Over kvmemd, the pages of a released sequence may be demoted or moved out
 * to a slower tier; the next call that touches them (append, read, attend,
 * fork, truncate, or kvmem_seq_acquire()) waits until they are back. In
 * embedded mode pages never move and this only records the state.
 *
 * Return: 0, -EINVAL, -ENOTCONN.
 */
int kvmem_seq_release(struct kvmem_seq *s);

/**
 * kvmem_seq_acquire() - make a released sequence resident again
 * @s: the sequence
 *
 * Blocks until its pages are resident. Over kvmemd, pages that come back
 * from the backing store are checked first; a page that cannot be read
 * fails the acquire with -EIO (the sequence stays released), and one that
 * does not fit the arena with -ENOMEM.
 *
 * Return: 0, -EINVAL, -EIO, -ENOMEM, -ENOTCONN.
 */
int kvmem_seq_acquire(struct kvmem_seq *s);

/**
 * kvmem_seq_prefetch() - a hint that a released sequence is wanted soon
 * @s: the sequence
 *
 * Over kvmemd, starts reading its pages back from the backing store
 * without waiting, so that the kvmem_seq_acquire() that follows finds
 * them resident or on their way. It stays released. Embedded: nothing to
 * do.
 *
 * Return: 0, -EINVAL, -ENOTCONN.
 */
int kvmem_seq_prefetch(struct kvmem_seq *s);

enum kvmem_erasure_policy {
	KVMEM_ERASE_INTERPOLATE = 0, /* mean of the same channel at t-1, t+1 */
	KVMEM_ERASE_ZERO = 1, /* erased values read as 0 */
	/* Quantized values decoded from the bits as received; their scale
	 * bounds them. FP16 values and values whose scale is lost are not
	 * bounded by anything: they are rebuilt as by INTERPOLATE. */
	KVMEM_ERASE_KEEP = 2,
};

/**
 * kvmem_seq_read() - decode tokens back to floats
 * @s: the sequence
 * @layer: the layer
 * @start: first token
 * @ntokens: number of tokens, within kvmem_seq_len()
 * @erasure: enum kvmem_erasure_policy for values that uncorrectable words
 *           took away, exactly as kvmem_attend() rebuilds them
 * @k: receives @ntokens rows of [kv_heads][head_dim]
 * @v: the same for V
 * @counts: if not NULL, receives what the decode found, summed over pages
 *
 * Return: 0, -EINVAL for a range outside the layer or a bad policy, -ENOMEM.
 */
int kvmem_seq_read(struct kvmem_seq *s, uint32_t layer, uint32_t start,
		   uint32_t ntokens, uint32_t erasure, float *k, float *v,
		   struct kvmem_page_counts *counts);

/* One page of a sequence's layer, as kvmem_seq_pages() describes it. */
struct kvmem_page_desc {
	void *data; /* the page's bytes (embedded mode) */
	size_t size;
	uint32_t token_start;
	uint32_t ntokens;
	uint32_t refs; /* sequences sharing the page */
	uint8_t sealed;
	uint8_t hot;
	uint8_t format; /* enum kvmem_format: the geometry's, fp16 when hot,
			 * or what kvmem_seq_archive() made it */
	uint8_t codec; /* enum kvmem_codec, the same way */
	float importance; /* attention mass, moving average */
};

/**
 * kvmem_seq_pages() - the pages of a layer, in token order
 * @s: the sequence
 * @layer: the layer
 * @out: receives up to @cap descriptions
 * @cap: capacity of @out
 *
 * For tests, tools and the tier policy. Writing through ->data bypasses the
 * codes' protection; it is how tests inject errors.
 *
 * Return: the number of pages (which may exceed @cap), or -EINVAL.
 */
int kvmem_seq_pages(const struct kvmem_seq *s, uint32_t layer,
		    struct kvmem_page_desc *out, size_t cap);

/**
 * kvmem_seq_attended() - attention computed elsewhere, into the pages'
 * importance
 * @s: the sequence
 * @layer: the layer
 * @mass: for each of the layer's first @npages pages, in token order, its
 *        share of the softmax weights summed over all query rows (heads
 *        and query tokens): the mass kvmem_cuda_attend() gives, copied to
 *        host memory
 * @npages: entries of @mass: at most the layer's pages (a block table
 *          taken before later appends covers the pages it had)
 * @n_heads: query heads of that attention, a multiple of kv_heads
 * @nq: its query tokens
 * @alpha: as kvmem_attend_opts.importance_alpha: 0 means 0.1, < 0 leaves
 *         importance alone
 *
 * What kvmem_attend() does with the shares it computes: each page's
 * importance (kvmem_page_desc.importance) becomes (1 - @alpha) x itself
 * + @alpha x @mass / @nq, and over kvmemd the session's heat array hears
 * of it, so the daemon's tier policy (the GPU tier's too) and
 * kvmem_seq_archive_budget() weigh attention that ran on a GPU as they
 * weigh attention on the CPU. The daemon hears of it while @s is acquired
 * (as it is from kvmem_cuda_seq_pages() until kvmem_seq_release()): a
 * released sequence's pages may have moved, and only their importance
 * changes, which the next attention over them tells.
 *
 * Return: 0; -EINVAL (bad layer, @npages over the layer's pages, a mass
 * negative or not finite, @n_heads not a multiple of kv_heads, @nq 0,
 * @alpha over 1 or NaN), with nothing changed.
 */
int kvmem_seq_attended(struct kvmem_seq *s, uint32_t layer, const float *mass,
		       size_t npages, uint32_t n_heads, uint32_t nq,
		       float alpha);

/*
 * Prefix sharing, over kvmemd (KVMEM_FEAT_PREFIX): a sequence's blocks,
 * one page of every layer each, copied under keys the engine computes, and
 * attached by any session of the same uid as the start of a new sequence.
 * Block 0 is the sink page when the geometry has sink tokens; every other
 * block is one page of tokens_per_page tokens. The key of block i must
 * name everything its K/V depend on: the model (and its weights' version)
 * and the tokens from 0 to kvmem_prefix_block_end(c, i), e.g. the chained
 * SHA-256 of kvmem_prefix_keys(). kvmemd adds the uid and the geometry's
 * digest; a session never sees, nor can time, another uid's keys.
 */
struct kvmem_prefix_key {
	uint8_t bytes[KVMEM_PREFIX_KEY_BYTES];
};

/**
 * kvmem_prefix_block_end() - tokens the first @block + 1 blocks hold
 * @c: the cache, for its geometry
 * @block: the block's index
 *
 * Return: the token at which block @block ends, or 0 past 2^32 - 1.
 */
uint32_t kvmem_prefix_block_end(const struct kvmem_cache *c, uint32_t block);

/**
 * kvmem_prefix_keys() - the keys of a sequence's blocks, from its tokens
 * @c: the cache (its geometry says where blocks end)
 * @model: names the model (and its revision, tensor-parallel rank...);
 *         NULL or "" for none
 * @tokens: the sequence's token ids
 * @ntokens: how many
 * @keys: receives a key per whole block, from block 0
 * @nkeys: room in @keys
 *
 * Key i is a SHA-256 chain over the tokens of blocks 0 to i, each token
 * 4 bytes little-endian: h_0 = SHA-256(tokens of block 0) and h_i =
 * SHA-256(h_{i-1} || tokens of block i), which are SGLang HiCache's page
 * keys (as raw bytes, not hex). A non-empty @model seeds the chain:
 * h_0 = SHA-256(SHA-256(@model) || tokens of block 0), so that no two
 * models share keys. Only hashes: it works on an embedded cache too, and
 * may be called from any thread.
 *
 * Return: the number of whole blocks keyed, at most @nkeys (a trailing
 * partial block gets no key), or -EINVAL.
 */
int kvmem_prefix_keys(const struct kvmem_cache *c, const char *model,
		      const uint32_t *tokens, uint32_t ntokens,
		      struct kvmem_prefix_key *keys, uint32_t nkeys);

/**
 * kvmem_prefix_publish() - publish the first blocks of a sequence
 * @s: the sequence
 * @keys: the key of each block, from block 0
 * @nkeys: how many blocks to publish
 *
 * kvmemd copies block i's sealed pages, checked against their seal, under
 * @keys[i], for the sessions of this uid; the copies stay when @s, or the
 * session, is gone, until kvmemd evicts them (least recently used first,
 * over the uid's cap or, when another uid needs the room, over its fair
 * share: [prefix] in kvmemd.conf(5)) or an operator drops them. A block
 * published before counts as published. Publishing stops at the first
 * block that is not whole in every layer (its last page still open).
 *
 * Every session of the tenant that attaches a key gets what was published
 * under it: kvmemd checks the copies against the seal, never the K/V
 * against the key, so the sessions of a tenant trust each other's
 * publishes. For a group of daemon.tenants, prefix.publishers in
 * kvmemd.conf(5) names the members that may publish.
 *
 * Return: how many blocks are published, from block 0; a negative errno
 * when the first one was refused: -EOPNOTSUPP embedded or when kvmemd
 * did not offer sharing, -EPERM when this user is not among the
 * publishers kvmemd lists for its tenant's group (it may still attach),
 * -EIO for a page that no longer matches its seal, -EDQUOT when one
 * block is over the uid's cap (prefix.uid_bytes), -ENOSPC when sharing
 * was turned off since, or prefix.bytes is full and the uids over their
 * fair share cannot make the room (the same whatever their number; never
 * while this uid stays within its own fair share), -ENOMEM, -EPROTO when
 * kvmemd's answer made no sense, -EINVAL, -ENOTCONN.
 */
int kvmem_prefix_publish(struct kvmem_seq *s,
			 const struct kvmem_prefix_key *keys, uint32_t nkeys);

/**
 * kvmem_prefix_attach() - a new sequence that starts with published blocks
 * @c: the cache
 * @keys: the key of each block the engine has, from block 0
 * @nkeys: how many
 * @out: receives the new sequence, acquired, holding the blocks that
 *       matched (none, when none did): append the rest of the prompt to it
 *
 * Attaches blocks 0, 1, ... while this uid has them published, with this
 * geometry, and the arena has room. What it attaches is what a session of
 * the same tenant published under the keys, checked to be the pages it
 * sealed but not to be the K/V of those tokens: attach only where the
 * tenant's publishers are trusted (kvmem_prefix_publish()). Their pages are
 * copied into the session's arena and checked first (a copy that no longer
 * verifies is dropped, never handed out): from then on they are the
 * sequence's own, a write to them changes no one else's, and they count
 * against the session's quota like any other page.
 *
 * Where kvmemd keeps published blocks on its backing store
 * (store.retain_bytes in kvmemd.conf(5)), or has a shared tier (remote.*),
 * the blocks from the first it does not have in memory are asked for
 * once, in one batch: of the store (those it has there, which outlive a
 * reboot), then of the shared tier (those after them): those that come,
 * each checked end to end, are then published blocks of the tenant in
 * memory again, and attached as above. A tier that does not answer ends the match there, as
 * a key never published does.
 *
 * Return: the number of tokens attached, kvmem_prefix_block_end() of the
 * last block that matched or 0; a negative errno (and no sequence) when
 * the first block could not be attached for another reason than its key:
 * -EOPNOTSUPP as for kvmem_prefix_publish(), -ENOMEM when the arena has no
 * room and nothing can leave it, -EIO when its copy was damaged, -EPROTO
 * when kvmemd's answer made no sense, -EINVAL, -ENOTCONN.
 */
int kvmem_prefix_attach(struct kvmem_cache *c,
			const struct kvmem_prefix_key *keys, uint32_t nkeys,
			struct kvmem_seq **out);

struct kvmem_attend_opts {
	uint32_t n_heads; /* query heads, a multiple of kv_heads */
	uint32_t erasure; /* enum kvmem_erasure_policy */
	float scale; /* softmax scale; 0 means 1 / sqrt(head_dim) */
	float importance_alpha; /* weight of this call in the page importance
				 * moving average; 0 means 0.1, < 0 leaves
				 * importance alone */
	uint32_t threads; /* at most this many threads; 0 means one per CPU
			   * the process may run on, 1 the caller's only */
	uint32_t flags; /* KVMEM_ATTEND_* */
	uint32_t resv[2]; /* must be 0 */
};

/*
 * Scores from int8 dot products where the page allows: each query row is
 * quantized to int8 with its own scale, m / 127 for its largest |q_d| m
 * (q8_d = the integer nearest q_d * (127 / m) in float arithmetic), and
 * dotted exactly with the integers of K rows of int4 pages (h74, h84,
 * golay24) or int8 pages (any code) with group scales, each group's sum
 * then times its scale. A tile (up to 64 tokens of a page and KV head)
 * holding a value that needs a rebuild, int4 + secded72, FP16 and INT2
 * pages, and scales per value or per channel take the float scores; so
 * does the whole call where a query row is not finite or m / 127 would be
 * subnormal. Head dims over 256 and groups that are not a multiple of 32
 * take a scalar kernel, slower than the float scores' vector ones. A
 * score moves by at most scale * (m / 254) * sum_d
 * |k_d| (k the decoded K row), so an output by at most (e^(2 delta) - 1)
 * * max_t |v_t| for delta the largest such move among the tokens, each
 * to float rounding (tests/check_attend.c checks both). The scores are
 * the same bits on every SIMD path, the output for every thread count.
 */
#define KVMEM_ATTEND_INT8_SCORES (1u << 0)

struct kvmem_attend_stats {
	uint64_t words_clean; /* codewords read, by outcome */
	uint64_t words_corrected;
	uint64_t words_uncorrectable; /* scales and payload */
	uint64_t values_erased; /* values those words took away */
	uint64_t headers_uncorrectable;
};

/**
 * kvmem_attend() - attention of one query token over a layer's cache
 * @s: the sequence
 * @layer: the layer
 * @q: [n_heads][head_dim] floats; query head h uses KV head
 *     h / (n_heads / kv_heads) (grouped-query attention)
 * @out: receives [n_heads][head_dim] floats
 * @opts: the options
 * @stats: if not NULL, receives what was decoded
 *
 * One pass over the pages with online softmax: each page is decoded tile by
 * tile into a small buffer (codewords checked and corrected, values
 * dequantized) and never materialised for the whole sequence. A value that
 * an uncorrectable word took away is rebuilt per @opts->erasure; with
 * interpolation, from the same channel of the tokens before and after it as
 * they decode (across page boundaries; an erased or missing neighbour is left
 * out, and with neither it reads 0).
 *
 * Each page's share of the softmax weights, summed over the query heads, is
 * folded into its importance (kvmem_page_desc.importance).
 *
 * Threads: the layer's pages are cut into chunks of about 256 tokens (at
 * most 128 chunks: longer for layers past 32K tokens) that do not depend
 * on @opts->threads; each chunk keeps its own softmax state,
 * up to @opts->threads threads (the caller's and a pool the cache keeps
 * until kvmem_close()) take chunks in turn, and the states are combined in
 * chunk order. So every thread count gives the same bits, counts and
 * importance. The pool's threads block all signals. A process forked from
 * one whose cache has started them runs on the calling thread only.
 *
 * Memory: the cache keeps the softmax states' memory from call to call,
 * as much as its largest call needed up to 256 MiB (a long prefill chunk's
 * is tens of MiB), until kvmem_close(); a call that needs more has its own.
 *
 * Return: 0, -EINVAL (bad layer, n_heads not a multiple of kv_heads, empty
 * layer, a reserved field not 0), -ENOMEM.
 */
int kvmem_attend(struct kvmem_seq *s, uint32_t layer, const float *q,
		 float *out, const struct kvmem_attend_opts *opts,
		 struct kvmem_attend_stats *stats);

/**
 * kvmem_attend_causal() - attention of a chunk of consecutive query tokens
 * (a prefill chunk, or a few speculative tokens), each over the tokens up
 * to its own position
 * @s: the sequence
 * @layer: the layer; its K/V for the queries' own tokens already appended
 * @q: [nq][n_heads][head_dim] floats, query i at token pos0 + i
 * @nq: how many queries, at least 1
 * @pos0: the first query's token
 * @out: receives [nq][n_heads][head_dim] floats
 * @opts: the options, as for kvmem_attend()
 * @stats: if not NULL, receives what was decoded
 *
 * Query i attends to tokens 0 .. pos0 + i of the layer as kvmem_attend()
 * would to a layer that ended there, in one pass: each tile is decoded
 * once for every query and head of its KV group, and tokens past pos0 +
 * nq - 1 are not read. The values are decoded as the layer stands
 * (kvmem_seq_read()): an erased value is rebuilt from its neighbours even
 * where one of them lies past a query's position. kvmem_attend() is this
 * call with @nq 1 and @pos0 the layer's last token.
 *
 * Importance: each page's share, summed over the query heads and averaged
 * over the queries, is one step of the moving average. Threads: as for
 * kvmem_attend(), with fewer chunks where many queries would need more than
 * 64 MiB of softmax state for them; still the same bits for every
 * @opts->threads.
 *
 * Return: 0, -EINVAL (as kvmem_attend(), and @nq 0 or pos0 + nq past the
 * layer's length), -ENOMEM.
 */
int kvmem_attend_causal(struct kvmem_seq *s, uint32_t layer, const float *q,
			uint32_t nq, uint32_t pos0, float *out,
			const struct kvmem_attend_opts *opts,
			struct kvmem_attend_stats *stats);

/**
 * kvmem_attend_batch() - kvmem_attend() for a batch of sequences in one call
 * @seqs: @n sequences of one cache (one may appear more than once)
 * @n: how many, at least 1
 * @layer: the layer, in each
 * @q: [n][n_heads][head_dim] floats, sequence i's query at q + i * n_heads
 *     * head_dim
 * @out: receives [n][n_heads][head_dim] floats
 * @opts: the options, as for kvmem_attend(), the same for every sequence
 * @stats: if not NULL, receives [n] entries, one per sequence
 *
 * The chunks of every sequence (kvmem_attend(), Threads) are shared out
 * among up to @opts->threads threads in one pass, so a batch of short
 * sequences keeps the threads busy where one call of each would not; then
 * each sequence is finished in order. Every output, count and importance
 * is the same bits as n calls of kvmem_attend() one after the other.
 *
 * Return: 0; -EINVAL (@n 0, sequences of different caches, or any
 * sequence's arguments as kvmem_attend() refuses them), and then nothing
 * was done; -ENOMEM; an error of making a sequence's pages resident
 * (kvmem_seq_acquire()).
 */
int kvmem_attend_batch(struct kvmem_seq *const *seqs, uint32_t n,
		       uint32_t layer, const float *q, float *out,
		       const struct kvmem_attend_opts *opts,
		       struct kvmem_attend_stats *stats);

/*
 * The ring itself, for programs that batch their own ops (kvmem-bench ring,
 * tests). Only on a cache from kvmem_connect(); the library's own ops share
 * the ring and mark their user_data with KVMEM_USER_DATA_LIB, which callers
 * must leave clear.
 */
#define KVMEM_USER_DATA_LIB (1ULL << 63)

/**
 * kvmem_ring_sqe() - the next free SQE, zeroed
 * @c: a connected cache
 *
 * Return: the entry, or NULL when the SQ is full (submit and reap
 * completions first) or @c is not connected.
 */
struct kvmem_sqe *kvmem_ring_sqe(struct kvmem_cache *c);

/**
 * kvmem_ring_submit() - publish the SQEs taken since the last submit, and
 * ring the daemon's doorbell if it sleeps
 * @c: a connected cache
 *
 * Return: the number published, -ENOTCONN.
 */
int kvmem_ring_submit(struct kvmem_cache *c);

/**
 * kvmem_ring_wait() - the next completion of a caller's SQE
 * @c: a connected cache
 * @cqe: receives it
 * @timeout_ms: 0: do not wait; < 0: wait as long as it takes
 *
 * Return: 1 with @cqe filled, 0 when none came in time, -ENOTCONN when the
 * daemon is gone.
 */
int kvmem_ring_wait(struct kvmem_cache *c, struct kvmem_cqe *cqe,
		    int timeout_ms);

/**
 * kvmem_ring_buffer() - the part of the shared buffer region that is the
 * caller's, for the results of PAGE_ALLOC and STATS
 * @c: a connected cache
 * @addr: receives its offset, the value to put in kvmem_sqe.addr
 * @len: receives its size in bytes
 *
 * Return: its address, or NULL when @c is not connected.
 */
void *kvmem_ring_buffer(struct kvmem_cache *c, uint64_t *addr, size_t *len);

/**
 * kvmem_daemon_stats() - the session's and the daemon's counters
 * @c: a connected cache
 * @st: receives them
 *
 * Return: 0, -EOPNOTSUPP in embedded mode, -ENOTCONN.
 */
int kvmem_daemon_stats(struct kvmem_cache *c, struct kvmem_stats *st);

#ifdef __cplusplus
}
#endif

#endif /* KVMEM_KVMEM_H */
