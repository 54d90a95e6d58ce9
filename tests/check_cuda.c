/* SPDX-License-Identifier: MIT */
/*
 * check_cuda.c - the GPU kernels and their driver code, against the CPU
 *
 * Every test runs the kernels through the whole of libkvmem's CUDA code,
 * kvmem/cuda.h down to cuda_driver.c, loaded on a fake libcuda
 * (tests/cuda/fakecuda.c) whose launches run the unchanged kernels of
 * kernels/ on host threads (tests/simt); where this machine has a GPU,
 * each kernel test runs on it too. Encode must write the bytes
 * kvmem_page_encode() writes, attention must give kvmem_attend()'s result
 * and counts, scrub kvmem_page_scrub()'s. The loader's failures are tested
 * with the libraries a machine without a GPU has and with the fake driver
 * playing an old or broken one.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../tools/bench.h"
#include "../tools/json.h"
#include "cuda/fakecuda.h"
#include "cuda_impl.h"
#include "ecc_ref.h"
#include "kern.h"
#include "kvmem/cuda.h"
#include "kvmem/kvmem.h"
#include "kvmem_check.h"
#include "kvmemd_harness.h"
#include "quant_ref.h"
#include "quant_word.h"
#include "rng.h"

/* The kernels libkvmem carries; 0 bytes when it was built without nvcc. */
extern const size_t kvmem__fatbin_size;

/* tests/cuda/simt_kernels.cc: the fake driver's launches. */
uint32_t kvmem__simt_h8x4_dirty(uint32_t w, int ext);
uint32_t kvmem__simt_h16(uint32_t w, int hi);
int kvmem__simt_run(const char *kernel, unsigned int gx, unsigned int gy,
		    unsigned int gz, unsigned int block, unsigned int smem,
		    void *params);

#define FAKE_SMEM (227 * 1024)
/* Shared memory the fake says each kernel declares statically. */
#define FAKE_STATIC_SMEM 1600

/*
 * The page's metadata as kvmem/page.h has it, written down: the 64 header
 * bytes and 4 zero bits in 43 golay24 words, hcrc (at byte 52) the
 * CRC-32C of those bytes with it 0; the FP16 scales from offset 192 as one
 * bitstream in golay24 words (in pairs); right after them the checks, 24
 * bits in two golay24 words each, the low 24 bits of a CRC-32C: one per 24
 * scales (48 bytes of the bitstream), or in a page without scales one per
 * row, [K, V][kv_head][token], over the row's data bytes; the K block at
 * the next multiple of 64; hot pages FP16 in golay24.
 */
#define META KVMEM_CODEC_GOLAY24
#define HDR_WORDS 43
#define HDR_BYTES (HDR_WORDS * 3)
#define HDR_HCRC 52
#define SCALES_OFF 192
#define CHECK_SCALES 24

static const char *const codecs[] = { "h74", "h84", "golay24", "secded72" };

static void geometry(struct kvmem_geometry *g, int fmt, int codec, int chan,
		     uint32_t kvh, uint32_t dim)
{
	memset(g, 0, sizeof(*g));
	kvmem_geometry_default(g);
	g->layers = 1;
	g->kv_heads = kvh;
	g->head_dim = dim;
	g->tokens_per_page = 16;
	g->group_size = 32 < dim ? 32 : dim;
	g->sink_tokens = 4;
	g->format = (uint8_t)fmt;
	g->codec = (uint8_t)codec;
	g->key_scales = (uint8_t)chan;
}

static void fill(struct kvmem_rng *r, float *x, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		x[i] = kvmem_check_rnd_value(r, 2.0);
}

/*
 * Queries: small, so that softmax spreads its weight over many positions
 * and one position more or less, or one value rebuilt otherwise, shows in
 * the output.
 */
/* Query head h's values times query_scale[h % 4] when set
 * (test_cuda_attend_query_scales), of @d dims a head. */
static const float *query_scale;

static void fill_query(struct kvmem_rng *r, float *x, size_t n, uint32_t d)
{
	size_t i;

	for (i = 0; i < n; i++)
		x[i] = (float)((kvmem_rng_unit(r) - 0.5) * 0.1) *
		       (query_scale ? query_scale[i / d % 4] : 1.0f);
}

/* ---- the fake driver, and the GPU where there is one ------------------ */

static const char *fake_path(void)
{
	static char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/tests/libfakecuda.so",
		 kvmem_check_builddir());
	return path;
}

/*
 * The fake driver's state, back to a healthy GPU with @sms multiprocessors
 * and @smem bytes of shared memory a CTA. The test's own reference to the
 * library keeps the state alive across kvmem_cuda_open()/close().
 */
static struct fakecuda *fake;

static struct fakecuda *fake_setup(int sms, int smem)
{
	void *lib = dlopen(fake_path(), RTLD_NOW | RTLD_LOCAL);
	fakecuda_state_fn state;
	struct fakecuda *f;

	ck_assert_msg(lib, "%s", dlerror());
	state = (fakecuda_state_fn)dlsym(lib, "fakecuda_state");
	ck_assert_ptr_nonnull(state);
	f = state();
	memset(f, 0, sizeof(*f));
	f->version = 12080;
	f->devices = 1;
	f->sms = sms;
	f->smem = smem;
	f->static_smem = FAKE_STATIC_SMEM;
	f->launch = kvmem__simt_run;
	fake = f;
	return f;
}

/* The start of a fatbin, all the fake driver looks at. */
static const uint32_t fake_image[4] = { 0xba55ed50u };

static struct kvmem_cuda *fake_open(int sms, int smem)
{
	struct kvmem_cuda *cu = NULL;

	fake_setup(sms, smem);
	ck_assert_msg(!kvmem__cuda_open_image(0, fake_path(), fake_image, &cu),
		      "%s", kvmem_cuda_error());
	return cu;
}

/*
 * The handles a kernel test runs on: the fake driver with @sms and @smem,
 * then GPU 0 where this machine has one; GPU 0 alone there with
 * KVMEM_CHECK_CUDA=gpu. Returns how many.
 */
static int targets(struct kvmem_cuda *cu[2], int sms, int smem)
{
	/* scripts/gpu-check.sh: the fake is CI's, and on a GPU machine
	 * its CPU threads only take the run's minutes */
	const char *only = getenv("KVMEM_CHECK_CUDA");
	const int gpu_only = only && !strcmp(only, "gpu");
	static int said;
	struct kvmem_cuda *gpu;
	int n = 0;

	if (kvmem_cuda_open(0, &gpu)) {
		if (!said++)
			fprintf(stderr,
				"SKIP: cuda: on the CPU only, no GPU: %s\n",
				kvmem_cuda_error());
		gpu = NULL;
	}
	if (!gpu || !gpu_only)
		cu[n++] = fake_open(sms, smem);
	if (gpu)
		cu[n++] = gpu;
	return n;
}

/* Device buffers of one test, freed together. */
struct dev {
	struct kvmem_cuda *cu;
	uint64_t buf[512];
	int n;
	int q4_unfit; /* the test leaves the fast kernel too little shared
		       * memory */
};

static uint64_t dev_put(struct dev *d, const void *p, size_t n)
{
	uint64_t a;

	ck_assert_int_lt(d->n, 512);
	ck_assert_msg(!kvmem_cuda_alloc(d->cu, n, &a), "%s",
		      kvmem_cuda_error());
	d->buf[d->n++] = a;
	if (p)
		ck_assert_msg(!kvmem_cuda_copy(d->cu, a, (uintptr_t)p, n, NULL),
			      "%s", kvmem_cuda_error());
	return a;
}

/* A buffer the kernel is to fill: 0xa5 bytes, so what it skips shows. */
static uint64_t dev_junk(struct dev *d, size_t n)
{
	void *p = kvmem_check_xmalloc(n);
	uint64_t a;

	memset(p, 0xa5, n);
	a = dev_put(d, p, n);
	ck_assert_msg(!kvmem_cuda_sync(d->cu, NULL), "%s", kvmem_cuda_error());
	free(p);
	return a;
}

static void dev_set(struct dev *d, uint64_t a, const void *p, size_t n)
{
	ck_assert_msg(!kvmem_cuda_copy(d->cu, a, (uintptr_t)p, n, NULL), "%s",
		      kvmem_cuda_error());
}

static void dev_get(struct dev *d, void *p, uint64_t a, size_t n)
{
	ck_assert_msg(!kvmem_cuda_copy(d->cu, (uintptr_t)p, a, n, NULL), "%s",
		      kvmem_cuda_error());
	ck_assert_msg(!kvmem_cuda_sync(d->cu, NULL), "%s", kvmem_cuda_error());
}

static void dev_done(struct dev *d)
{
	while (d->n)
		kvmem_cuda_free(d->cu, d->buf[--d->n]);
}

/* Run @fn on each target (targets()), closing each handle after it. */
static void on_targets(int sms, void (*fn)(struct dev *dv))
{
	struct kvmem_cuda *cus[2];
	int t, n = targets(cus, sms, FAKE_SMEM);

	for (t = 0; t < n; t++) {
		struct dev dv = { .cu = cus[t] };

		fn(&dv);
		dev_done(&dv);
		kvmem_cuda_close(cus[t]);
	}
}

/* ---- loading ---------------------------------------------------------- */

static int open_with(const char *lib, struct kvmem_cuda **cu)
{
	return kvmem__cuda_open_image(0, lib, fake_image, cu);
}

START_TEST(test_cuda_open_without_driver)
{
	struct kvmem_cuda *cu = (struct kvmem_cuda *)1;
	int ret = open_with("/nonexistent/libcuda.so.1", &cu);

	EXPECT_EQ(ret, -ENODEV, "%s", kvmem_cuda_error());
	EXPECT(cu == NULL, "%p", (void *)cu);
	EXPECT(strstr(kvmem_cuda_error(), "no NVIDIA driver"), "%s",
	       kvmem_cuda_error());
	EXPECT(strstr(kvmem_cuda_error(), "/nonexistent/libcuda.so.1"), "%s",
	       kvmem_cuda_error());
	/* Not a driver at all: a library without cuGetProcAddress. */
	ret = open_with("libm.so.6", &cu);
	EXPECT_EQ(ret, -ENODEV, "%s", kvmem_cuda_error());
	EXPECT(strstr(kvmem_cuda_error(), "not an NVIDIA driver"), "%s",
	       kvmem_cuda_error());
	EXPECT_EQ(kvmem_cuda_open(0, NULL), -EINVAL, "%s", "NULL out");
}
END_TEST

START_TEST(test_cuda_open_stub_library)
{
	static const char *const stubs[] = {
		"/usr/local/cuda/lib64/stubs/libcuda.so",
		"/usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so",
	};
	struct kvmem_cuda *cu = NULL;
	const char *stub = NULL;
	size_t i;
	int ret;

	for (i = 0; i < sizeof(stubs) / sizeof(stubs[0]) && !stub; i++)
		if (!access(stubs[i], R_OK))
			stub = stubs[i];
	if (!stub) {
		fprintf(stderr, "SKIP: cuda stub: no CUDA toolkit stub "
				"library here\n");
		return;
	}
	ret = open_with(stub, &cu);
	EXPECT_EQ(ret, -ENODEV, "%s", kvmem_cuda_error());
	EXPECT(cu == NULL, "%p", (void *)cu);
	EXPECT(strstr(kvmem_cuda_error(), "stub library"), "%s",
	       kvmem_cuda_error());
}
END_TEST

/* What a failed open must leave behind: nothing held in the driver. */
static void expect_released(const struct fakecuda *f, const char *what)
{
	EXPECT_EQ(f->contexts, 0, "%s: a primary context kept", what);
	EXPECT_EQ(f->modules, 0, "%s: a module kept", what);
	EXPECT_EQ(f->depth, 0, "%s: a context left current", what);
	EXPECT_EQ(f->registered, 0, "%s: host memory left registered", what);
}

/* The fake driver plays the drivers a fleet has that kvmem cannot use. */
START_TEST(test_cuda_open_broken_drivers)
{
	static const struct {
		const char *what;
		int version, devices, device, no_binary, fixed;
		const char *missing;
		int err;
		const char *says;
	} cases[] = {
		{ "CUDA 11.8 driver", 11080, 1, 0, 0, 0, NULL, -EOPNOTSUPP,
		  "supports CUDA 11.8; kvmem needs 12.0" },
		{ "an entry point missing", 12080, 1, 0, 0, 0, "cuMemcpyAsync",
		  -EOPNOTSUPP, "has no cuMemcpyAsync" },
		{ "no GPU", 12080, 0, 0, 0, 0, NULL, -ENODEV, "no CUDA GPU" },
		{ "device 1 of 1", 12080, 1, 1, 0, 0, NULL, -ENODEV,
		  "no CUDA device 1 (1 present)" },
		{ "no code for this GPU", 12080, 1, 0, 1, 0, NULL, -EOPNOTSUPP,
		  "no kvmem kernel runs on kvmem fake GPU" },
		{ "static shared memory past the limit", 12080, 1, 0, 0,
		  FAKE_SMEM + 16, NULL, -EOPNOTSUPP,
		  "kernel kvmem_k_encode needs 232464 bytes of shared memory" },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct fakecuda *f = fake_setup(4, FAKE_SMEM);
		struct kvmem_cuda *cu = (struct kvmem_cuda *)1;

		f->version = cases[i].version;
		f->devices = cases[i].devices;
		f->no_binary = cases[i].no_binary;
		f->missing = cases[i].missing;
		if (cases[i].fixed)
			f->static_smem = cases[i].fixed;
		EXPECT_EQ(kvmem__cuda_open_image(cases[i].device, fake_path(),
						 fake_image, &cu),
			  cases[i].err, "%s: %s", cases[i].what,
			  kvmem_cuda_error());
		EXPECT(strstr(kvmem_cuda_error(), cases[i].says), "%s: %s",
		       cases[i].what, kvmem_cuda_error());
		EXPECT(cu == NULL, "%s: handle %p", cases[i].what, (void *)cu);
		expect_released(f, cases[i].what);
	}
}
END_TEST

/* A driver that works: what libkvmem holds, memory, and giving it back. */
START_TEST(test_cuda_driver_resources)
{
	struct kvmem_cuda *cu = fake_open(4, FAKE_SMEM);
	struct fakecuda *f = fake;
	uint64_t a = 0, b = 0;
	char in[100], out[100];

	EXPECT_EQ(f->contexts, 1, "%s", "primary context retained");
	EXPECT_EQ(f->modules, 1, "%s", "module loaded");
	EXPECT(!strcmp(kvmem_cuda_name(cu), "kvmem fake GPU (CPU threads)"),
	       "%s", kvmem_cuda_name(cu));
	EXPECT_EQ(kvmem_cuda_alloc(cu, 0, &a), -EINVAL, "%s", "0 bytes");
	EXPECT_EQ(kvmem_cuda_copy(cu, 0, (uintptr_t)in, 1, NULL), -EINVAL, "%s",
		  "NULL destination");
	f->mem_limit = 1000;
	EXPECT_EQ(kvmem_cuda_alloc(cu, 1001, &a), -ENOMEM, "%s",
		  kvmem_cuda_error());
	EXPECT(strstr(kvmem_cuda_error(), "no 1001 bytes"), "%s",
	       kvmem_cuda_error());
	EXPECT_EQ(kvmem_cuda_alloc(cu, 100, &a), 0, "%s", kvmem_cuda_error());
	EXPECT_EQ(kvmem_cuda_alloc(cu, 100, &b), 0, "%s", kvmem_cuda_error());
	EXPECT_EQ(f->allocated, 200, "%s", "bytes held");
	memset(in, 7, sizeof(in));
	in[99] = 9;
	EXPECT_EQ(kvmem_cuda_copy(cu, a, (uintptr_t)in, 100, NULL), 0, "%s",
		  kvmem_cuda_error());
	EXPECT_EQ(kvmem_cuda_copy(cu, b, a, 100, NULL), 0, "%s",
		  kvmem_cuda_error());
	EXPECT_EQ(kvmem_cuda_copy(cu, (uintptr_t)out, b, 100, NULL), 0, "%s",
		  kvmem_cuda_error());
	EXPECT_EQ(kvmem_cuda_sync(cu, NULL), 0, "%s", kvmem_cuda_error());
	EXPECT_MEM(out, in, 100, "%s", "host -> a -> b -> host");
	kvmem_cuda_free(cu, a);
	kvmem_cuda_free(cu, b);
	kvmem_cuda_free(cu, 0);
	EXPECT_EQ(f->allocated, 0, "%s", "bytes held after free");
	EXPECT_EQ(f->depth, 0, "%s", "a context left current");
	/* A launch the driver refuses is an error with its reason. */
	f->launch = NULL;
	{
		struct kvmem_geometry g;

		geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 2, 64);
		EXPECT_EQ(kvmem_cuda_scrub(cu, &g, 64, 1, 64, 64, NULL), -EIO,
			  "%s", kvmem_cuda_error());
		EXPECT(strstr(kvmem_cuda_error(), "launch of kvmem_k_scrub"),
		       "%s", kvmem_cuda_error());
	}
	kvmem_cuda_close(cu);
	expect_released(f, "close");
}
END_TEST

/* The public open hands the driver the fatbin libkvmem carries. */
START_TEST(test_cuda_open_embedded_kernels)
{
	struct fakecuda *f = fake_setup(4, FAKE_SMEM);
	struct kvmem_cuda *cu = NULL;
	int ret;

	setenv("KVMEM_LIBCUDA", fake_path(), 1);
	ret = kvmem_cuda_open(0, &cu);
	unsetenv("KVMEM_LIBCUDA");
	if (ret == -EOPNOTSUPP && strstr(kvmem_cuda_error(), "without nvcc")) {
		fprintf(stderr, "SKIP: cuda: libkvmem built without nvcc\n");
		return;
	}
	/* The fake loads only an image that starts as a fatbin does. */
	EXPECT_EQ(ret, 0, "%s", kvmem_cuda_error());
	EXPECT_EQ(f->modules, 1, "%s", "module loaded");
	kvmem_cuda_close(cu);
	expect_released(f, "close");
}
END_TEST

/* ---- encode ----------------------------------------------------------- */

/* FP16 of @x as the encoder stores it: a non-finite value as 0. */
static uint16_t half_of(float x)
{
	return isfinite(x) ? ref_f2h(x) : 0;
}

/* The golay24 words of the bitstream @data at @code, against ref_word(). */
static void expect_meta_words(const uint8_t *code, const uint8_t *data,
			      size_t nwords, const char *gpu, const char *what)
{
	uint8_t w[3];
	size_t i;

	for (i = 0; i < nwords; i++) {
		ref_word(META, ref_get_bits(data, 12 * i, 12), w);
		EXPECT_MEM(code + 3 * i, w, 3, "%s: %s word %zu", gpu, what, i);
	}
}

/* Check @i of @page, as written down above, against @len bytes of @data. */
static void expect_check(const uint8_t *page, size_t checks_off, size_t i,
			 const void *data, size_t len, const char *gpu,
			 const char *what)
{
	uint32_t crc = len ? ref_crc32c(0, data, len) & 0xffffff : 0;
	uint8_t c[3] = { (uint8_t)crc, (uint8_t)(crc >> 8),
			 (uint8_t)(crc >> 16) };
	char name[64];

	snprintf(name, sizeof(name), "%s check %zu", what, i);
	expect_meta_words(page + checks_off + 6 * i, c, 2, gpu, name);
}

/*
 * A page the kernel encoded from @hdr, @k and @v against the format as
 * kvmem/page.h writes it down, through the reference codec and quantizer:
 * its header and hcrc, its scales and their checks, and for a hot page the
 * first row of K and of V's last head, their checks, and the check of a
 * row it does not have.
 */
static void expect_format(const char *gpu, const uint8_t *page,
			  const struct kvmem_geometry *g,
			  const struct kvmem_page_layout *l, int hot,
			  const struct kvmem_page_hdr *hdr, const float *k,
			  const float *v)
{
	const uint32_t D = g->head_dim, G = g->group_size, groups = D / G;
	const uint32_t tpp = g->tokens_per_page;
	const size_t tok = (size_t)g->kv_heads * D;
	const int qmax = hot ? 0 : ref_fmts[g->format].qmax;
	const int chan = qmax && g->key_scales == KVMEM_SCALES_CHANNEL;
	const size_t nv = qmax ? (size_t)g->kv_heads * tpp * groups : 0;
	const size_t nk = chan ? tok : nv;
	const size_t sw = ((nk + nv) * 16 + 23) / 24 * 2;
	const size_t checks_off = SCALES_OFF + sw * 3;
	const size_t nchecks =
		qmax ? (nk + nv + CHECK_SCALES - 1) / CHECK_SCALES
		     : 2 * (size_t)g->kv_heads * tpp;
	uint8_t hb[HDR_WORDS * 12 / 8 + 1] = { 0 };
	struct kvmem_page_hdr h = *hdr;
	uint16_t *sc = calloc(sw + 1, sizeof(*sc));
	uint32_t hh, t, c, crc;
	size_t ci;

	ck_assert_ptr_nonnull(sc);
	h.magic = 0x4750564bu; /* "KVPG" */
	h.version = 3;
	h.format = hot ? KVMEM_FMT_FP16 : g->format;
	h.codec = hot ? META : g->codec;
	h.geometry = kvmem_geometry_digest(g);
	h.flags |= hot ? KVMEM_HDR_HOT : 0;
	h.crc = h.flags & KVMEM_HDR_SEALED
			? ref_crc32c(0, page + HDR_BYTES, l->size - HDR_BYTES)
			: 0;
	memcpy(hb, &h, sizeof(h));
	memset(hb + HDR_HCRC, 0, 4);
	crc = ref_crc32c(0, hb, 64);
	ref_put_le(hb + HDR_HCRC, 4, crc);
	expect_meta_words(page, hb, HDR_WORDS, gpu, "header");

	EXPECT_EQ(l->scales_off, SCALES_OFF, "%s", gpu);
	EXPECT_EQ(l->scale_words, sw, "%s: hot %d", gpu, hot);
	EXPECT_EQ(l->checks_off, checks_off, "%s: hot %d", gpu, hot);
	EXPECT_EQ(l->nchecks, nchecks, "%s: hot %d", gpu, hot);
	EXPECT_EQ(l->k_off, (checks_off + 6 * nchecks + 63) / 64 * 64,
		  "%s: hot %d", gpu, hot);
	for (hh = 0; hh < g->kv_heads; hh++) {
		for (t = 0; t < hdr->ntokens && qmax; t++)
			for (c = 0; c < groups; c++) {
				const size_t x = t * tok + hh * D + c * G;
				const size_t i =
					((size_t)hh * tpp + t) * groups + c;

				if (!chan)
					sc[i] = ref_scale(g->format, k + x, G,
							  1);
				sc[nk + i] = ref_scale(g->format, v + x, G, 1);
			}
		for (c = 0; c < D && chan; c++)
			sc[hh * D + c] = ref_scale(g->format, k + hh * D + c,
						   hdr->ntokens, tok);
	}
	expect_meta_words(page + SCALES_OFF, (const uint8_t *)sc, sw, gpu,
			  "scale");
	/* Each 48 bytes of the stream, the last fewer. */
	for (ci = 0; qmax && ci < nchecks; ci++)
		expect_check(page, checks_off, ci,
			     (const uint8_t *)sc + 2 * CHECK_SCALES * ci,
			     2 * (nk + nv) - 2 * CHECK_SCALES * ci <
					     2 * CHECK_SCALES
				     ? 2 * (nk + nv) - 2 * CHECK_SCALES * ci
				     : 2 * CHECK_SCALES,
			     gpu, "scale");
	free(sc);

	if (hot) {
		const size_t rw = ((size_t)D * 16 + 23) / 24 * 2;
		const size_t kvh = g->kv_heads;
		uint16_t *row = calloc(rw + 1, sizeof(*row));

		ck_assert_ptr_nonnull(row);
		EXPECT_EQ(l->codec, META, "%s", gpu);
		EXPECT_EQ(l->row_words, rw, "%s", gpu);
		for (c = 0; c < D; c++)
			row[c] = half_of(k[c]);
		expect_meta_words(page + l->k_off, (const uint8_t *)row, rw,
				  gpu, "hot K row 0");
		/* Over the row's data: its values, then the zero padding. */
		expect_check(page, checks_off, 0, row, rw * 12 / 8, gpu,
			     "hot K row 0");
		for (c = 0; c < D; c++)
			row[c] = half_of(v[(kvh - 1) * D + c]);
		expect_meta_words(page + l->v_off +
					  (kvh - 1) * tpp * l->row_bytes,
				  (const uint8_t *)row, rw, gpu,
				  "hot V row 0 of the last head");
		expect_check(page, checks_off, (2 * kvh - 1) * tpp, row,
			     rw * 12 / 8, gpu, "hot V row 0 of the last head");
		/* A row past ntokens: zero words, as its data. */
		if (hdr->ntokens < tpp)
			expect_check(page, checks_off, hdr->ntokens, NULL, 0,
				     gpu, "hot K row past ntokens");
		free(row);
	}
}

/* One page through both encoders, compared byte for byte. */
static void encode_case(struct dev *dv, const struct kvmem_geometry *g, int hot,
			uint32_t flags, uint32_t ntok, uint32_t dtype,
			struct kvmem_rng *r)
{
	const size_t tok = (size_t)g->kv_heads * g->head_dim;
	const size_t esz = dtype == KVMEM_CUDA_F16 ? 2 : 4;
	struct kvmem_cuda_encode_job job;
	struct kvmem_page_layout l;
	struct kvmem_page_hdr hdr;
	float *k = kvmem_check_xmalloc(ntok * tok * 4);
	float *v = kvmem_check_xmalloc(ntok * tok * 4);
	uint16_t *k16 = kvmem_check_xmalloc(ntok * tok * 2);
	uint16_t *v16 = kvmem_check_xmalloc(ntok * tok * 2);
	uint64_t dk, dv_, dpage, djob;
	uint8_t *exp, *got;
	size_t i;

	ck_assert_int_eq(kvmem_page_layout(g, hot, &l), 0);
	exp = kvmem_check_xmalloc(l.size);
	got = kvmem_check_xmalloc(l.size);
	fill(r, k, ntok * tok);
	fill(r, v, ntok * tok);
	/* Values the quantizer must handle: a non-finite, a zero group. */
	k[1] = INFINITY;
	v[2] = NAN;
	for (i = 0; i < g->group_size && i < tok; i++)
		v[tok * (ntok - 1) + i] = 0.0f;
	for (i = 0; i < ntok * tok; i++) {
		k16[i] = kvmem_f2h(k[i]);
		v16[i] = kvmem_f2h(v[i]);
		if (dtype == KVMEM_CUDA_F16) {
			k[i] = kvmem_h2f(k16[i]);
			v[i] = kvmem_h2f(v16[i]);
		}
	}
	memset(&hdr, 0, sizeof(hdr));
	hdr.seq = 77;
	hdr.layer = 0;
	hdr.token_start = 4;
	hdr.ntokens = ntok;
	hdr.flags = flags;
	hdr.generation = 9;
	ck_assert_int_eq(kvmem_page_encode(exp, g, &hdr, hot, k, v), 0);

	dk = dev_put(dv, dtype == KVMEM_CUDA_F16 ? (void *)k16 : (void *)k,
		     ntok * tok * esz);
	dv_ = dev_put(dv, dtype == KVMEM_CUDA_F16 ? (void *)v16 : (void *)v,
		      ntok * tok * esz);
	dpage = dev_junk(dv, l.size);
	memset(&job, 0, sizeof(job));
	job.page = dpage;
	job.k = dk;
	job.v = dv_;
	job.seq = 77;
	job.generation = 9;
	job.token_start = 4;
	job.n = ntok;
	job.flags = flags | (hot ? KVMEM_HDR_HOT : 0);
	djob = dev_put(dv, &job, sizeof(job));
	EXPECT_EQ(kvmem_cuda_encode(dv->cu, g, dtype, djob, 1, NULL), 0, "%s",
		  kvmem_cuda_error());
	dev_get(dv, got, dpage, l.size);
	EXPECT_MEM(got + HDR_BYTES, exp + HDR_BYTES, l.size - HDR_BYTES,
		   "%s: fmt %u codec %s chan %u hot %d ntok %u dtype %u",
		   kvmem_cuda_name(dv->cu), g->format, codecs[g->codec],
		   g->key_scales, hot, ntok, dtype);
	EXPECT_MEM(got, exp, HDR_BYTES,
		   "%s: header: fmt %u codec %s hot %d flags %u",
		   kvmem_cuda_name(dv->cu), g->format, codecs[g->codec], hot,
		   flags);
	expect_format(kvmem_cuda_name(dv->cu), got, g, &l, hot, &hdr, k, v);

	/* Appending to an FP16 page row by row gives the same page. */
	if (hot && ntok > 1) {
		memset(got, 0xa5, l.size);
		dev_set(dv, dpage, got, l.size);
		for (i = 0; i < ntok; i++) {
			job.t0 = (uint32_t)i;
			job.n = 1;
			job.flags = KVMEM_HDR_HOT;
			job.k = dk + i * tok * esz;
			job.v = dv_ + i * tok * esz;
			dev_set(dv, djob, &job, sizeof(job));
			EXPECT_EQ(kvmem_cuda_encode(dv->cu, g, dtype, djob, 1,
						    NULL),
				  0, "%s", kvmem_cuda_error());
			/* the job's host copy changes next round */
			ck_assert_int_eq(kvmem_cuda_sync(dv->cu, NULL), 0);
		}
		hdr.flags = 0;
		ck_assert_int_eq(kvmem_page_encode(exp, g, &hdr, 1, k, v), 0);
		dev_get(dv, got, dpage, l.size);
		EXPECT_MEM(got, exp, l.size, "appended page ntok %u dtype %u",
			   ntok, dtype);
	}
	free(k);
	free(v);
	free(k16);
	free(v16);
	free(exp);
	free(got);
}

static void encode_matches_cpu_on(struct dev *dv)
{
	struct kvmem_geometry g;
	struct kvmem_rng r;
	int fmt, codec, chan;

	kvmem_rng_seed(&r, 14);
	/* The formats the kernels have (not the lm ones: refused above). */
	for (fmt = 0; fmt <= KVMEM_FMT_FP8; fmt++)
		for (codec = 0; codec < KVMEM_CODEC_NR; codec++)
			for (chan = 0; chan < (fmt ? 2 : 1); chan++) {
				geometry(&g, fmt, codec, chan, 2, 64);
				encode_case(dv, &g, 0, KVMEM_HDR_SEALED, 16,
					    KVMEM_CUDA_F32, &r);
				encode_case(dv, &g, 0, KVMEM_HDR_SEALED, 16,
					    KVMEM_CUDA_F16, &r);
				dev_done(dv);
			}
	geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 3, 96);
	encode_case(dv, &g, 1, 0, 5, KVMEM_CUDA_F32, &r);
	encode_case(dv, &g, 1, 0, 3, KVMEM_CUDA_F16, &r);
	encode_case(dv, &g, 1, KVMEM_HDR_SEALED, 16, KVMEM_CUDA_F32, &r);
}

START_TEST(test_cuda_encode_matches_cpu)
{
	on_targets(1, encode_matches_cpu_on);
}
END_TEST

/* Jobs that do not fit their page must leave it alone, not overrun it. */
static void encode_refuses_misfit_jobs_on(struct dev *dv)
{
	struct kvmem_cuda_encode_job job[4];
	struct kvmem_page_layout l;
	struct kvmem_geometry g;
	struct kvmem_rng r;
	uint64_t dk, dpages;
	uint8_t *pages, *exp;
	float *k;
	size_t tok, i;

	kvmem_rng_seed(&r, 3);
	geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 2, 64);
	ck_assert_int_eq(kvmem_page_layout(&g, 0, &l), 0);
	tok = (size_t)g.kv_heads * g.head_dim;
	k = kvmem_check_xmalloc((g.tokens_per_page + 1) * tok * 4);
	fill(&r, k, (g.tokens_per_page + 1) * tok);
	dk = dev_put(dv, k, (g.tokens_per_page + 1) * tok * 4);
	/* Each page sits in a buffer of two, so an overrun stays in
	 * it. */
	pages = kvmem_check_xmalloc(4 * 2 * l.size);
	exp = kvmem_check_xmalloc(4 * 2 * l.size);
	memset(exp, 0xa5, 4 * 2 * l.size);
	dpages = dev_junk(dv, 4 * 2 * l.size);
	memset(job, 0, sizeof(job));
	for (i = 0; i < 4; i++) {
		job[i].page = dpages + i * 2 * l.size;
		job[i].k = job[i].v = dk;
		job[i].n = g.tokens_per_page;
		job[i].flags = KVMEM_HDR_SEALED;
	}
	job[0].n = g.tokens_per_page + 1; /* more rows than it has */
	job[1].n = 0;
	job[2].t0 = 1; /* a sealed page is written whole */
	job[2].n = 1;
	job[3].flags = KVMEM_HDR_HOT; /* t0 + n wraps past the page */
	job[3].t0 = UINT32_MAX;
	job[3].n = 2;
	EXPECT_EQ(kvmem_cuda_encode(dv->cu, &g, KVMEM_CUDA_F32,
				    dev_put(dv, job, sizeof(job)), 4, NULL),
		  0, "%s", kvmem_cuda_error());
	dev_get(dv, pages, dpages, 4 * 2 * l.size);
	EXPECT_MEM(pages, exp, 4 * 2 * l.size, "%s: misfit jobs wrote",
		   kvmem_cuda_name(dv->cu));
	free(k);
	free(pages);
	free(exp);
}

START_TEST(test_cuda_encode_refuses_misfit_jobs)
{
	on_targets(1, encode_refuses_misfit_jobs_on);
}
END_TEST

/* ---- attention -------------------------------------------------------- */

struct table {
	struct kvmem_cuda_page *pages; /* device addresses of the pages */
	uint32_t npages;
};

/* The block table of @s, its pages copied to the device. */
static void table_of(struct dev *dv, const struct kvmem_geometry *g,
		     struct kvmem_seq *s, struct table *t)
{
	struct kvmem_page_desc d[256];
	int i, n = kvmem_seq_pages(s, 0, d, 256);

	ck_assert_int_gt(n, 0);
	ck_assert_int_le(n, 256);
	t->pages = kvmem_check_xmalloc((size_t)n * sizeof(*t->pages));
	for (i = 0; i < n; i++) {
		struct kvmem_page_layout l;

		kvmem_page_layout(g, d[i].hot, &l);
		t->pages[i].addr = dev_put(dv, d[i].data, l.size);
		t->pages[i].token_start = d[i].token_start;
		t->pages[i].ntokens = d[i].ntokens;
		t->pages[i].flags = d[i].hot ? KVMEM_HDR_HOT : 0;
		t->pages[i].resv = 0;
	}
	t->npages = (uint32_t)n;
}

/*
 * Make FP16 value @i of the golay24 row at @row read @h: its two words
 * re-encoded, so they decode clean to a value the encoder never writes
 * (damage past what the code saw).
 */
static void put_half(uint8_t *row, unsigned int i, uint16_t h)
{
	const unsigned int w = 16 * i / 12;
	uint8_t data[3];
	unsigned int j;

	for (j = 0; j < 2; j++)
		ref_put_bits(data, 12 * j, 12,
			     ref_get_le(row + 3 * (w + j), 3) & 0xfff);
	ref_put_bits(data, 16 * i - 12 * w, 16, h);
	for (j = 0; j < 2; j++)
		ref_word(META, ref_get_bits(data, 12 * j, 12),
			 row + 3 * (w + j));
}

/*
 * A hot page of @ntok tokens (FP16 in golay24, whatever the codec): a
 * corrected flip, values lost to four flips in their word, and one that
 * reads +inf from clean words. All are rebuilt under every policy but
 * zero, keep included.
 */
static void damage_hot(uint8_t *p, const struct kvmem_geometry *g,
		       uint32_t ntok)
{
	struct kvmem_page_layout l;

	kvmem_page_layout(g, 1, &l);
	p[l.v_off + 4] ^= 0x20;
	/* Word 2 of K row 0 of head 0: data bits 3..6 are bits 11..14 of
	 * value 1, its exponent, so that kept it would show. */
	p[l.k_off + 2 * 3] ^= 0x78;
	/* Word 9 of V's last row of head 0: bits 12..15 of value 6. */
	p[l.v_off + (ntok - 1) * l.row_bytes + 9 * 3] ^= 0x0f;
	put_half(p + l.v_off +
			 ((size_t)(g->kv_heads - 1) * g->tokens_per_page +
			  ntok - 1) *
				 l.row_bytes,
		 3, 0x7c00);
}

/*
 * Flip bits in the pages of @s: single errors everywhere the codes
 * correct, and double errors in h84/secded72 (and 4 bits in golay24 words)
 * that they only detect, so values are lost and rebuilt. In every sealed
 * page with scales, a scale is lost (keep must rebuild its values too);
 * hot pages lose values as damage_hot() says.
 */
static void damage(struct kvmem_seq *s, const struct kvmem_geometry *g)
{
	struct kvmem_page_desc d[256];
	struct kvmem_page_layout l;
	int i, n = kvmem_seq_pages(s, 0, d, 256);
	unsigned int wb;

	kvmem_page_layout(g, 0, &l);
	wb = kvmem_codec_get(g->codec)->word_bytes;
	for (i = 0; i < n; i++) {
		uint8_t *p = d[i].data;

		if (d[i].hot) {
			damage_hot(p, g, d[i].ntokens);
			continue;
		}
		p[l.k_off + 3 * wb] ^= 0x01; /* corrected */
		p[l.v_off + 5 * l.row_bytes] ^= 0x02;
		if (l.scale_words) {
			/* Scale words: word 3 and the last corrected (the
			 * last carries no scale when the count is 2 more
			 * than a multiple of 3, as here with group scales);
			 * four flips in word 4, stream bits 48..59, lose
			 * scale 3, bits 8..11 of it so that kept it would
			 * show. */
			p[l.scales_off + 9] ^= 0x10;
			p[l.scales_off + 3 * (l.scale_words - 1) + 2] ^= 0x80;
			p[l.scales_off + 3 * 4 + 1] ^= 0x0f;
		}
		if (g->codec == KVMEM_CODEC_H74)
			continue;
		/* Lost: word 1 of row 0 of K, the last row of V, row 2's
		 * first word of K of the last head. */
		p[l.k_off + wb] ^= 0x03;
		p[l.v_off + (g->tokens_per_page - 1) * l.row_bytes] ^= 0x06;
		p[l.k_off +
		  ((g->kv_heads - 1) * g->tokens_per_page + 2) * l.row_bytes] ^=
			g->codec == KVMEM_CODEC_GOLAY24 ? 0x0f : 0x03;
	}
}

/* Data byte @byte of the @nwords words of @codec at @code, as decoded. */
static uint8_t ref_read_byte(const uint8_t *code, int codec, size_t nwords,
			     size_t byte)
{
	uint8_t *data =
		kvmem_check_xmalloc(kvmem_ecc_data_bytes(codec, nwords));
	uint8_t b;

	kvmem_ecc_decode(codec, code, data, nwords, NULL, NULL, NULL);
	b = data[byte];
	free(data);
	return b;
}

/*
 * Damage past what a code sees, as a garbled line leaves it: data byte
 * @byte of the @nwords words of @codec at @code changed by @x and the
 * words encoded again, so they decode clean to data never written.
 */
static void plant(uint8_t *code, int codec, size_t nwords, size_t byte,
		  uint8_t x)
{
	size_t nb = kvmem_ecc_data_bytes(codec, nwords);
	uint8_t *data = kvmem_check_xmalloc(nb);

	ck_assert_uint_lt(byte, nb);
	ck_assert_int_eq(
		kvmem_ecc_decode(codec, code, data, nwords, NULL, NULL, NULL),
		0);
	data[byte] ^= x;
	ck_assert_int_eq(kvmem_ecc_encode(codec, data, code, nwords), 0);
	free(data);
}

/*
 * In every sealed FP8 page, the NaN codes no encoder writes, in words that
 * decode clean (plant()): K value 7 of row 1 of head 0 and V value 0 of row
 * 3 of the last head. Each is lost under every policy, as on the CPU.
 */
static void damage_nan(struct kvmem_seq *s, const struct kvmem_geometry *g)
{
	struct kvmem_page_desc d[256];
	struct kvmem_page_layout l;
	int i, n = kvmem_seq_pages(s, 0, d, 256);
	uint8_t *row;

	kvmem_page_layout(g, 0, &l);
	for (i = 0; i < n; i++) {
		if (d[i].hot)
			continue;
		row = (uint8_t *)d[i].data + l.k_off + l.row_bytes;
		plant(row, g->codec, l.row_words, 7,
		      (uint8_t)(ref_read_byte(row, g->codec, l.row_words, 7) ^
				0x7f));
		row = (uint8_t *)d[i].data + l.v_off +
		      ((size_t)(g->kv_heads - 1) * g->tokens_per_page + 3) *
			      l.row_bytes;
		plant(row, g->codec, l.row_words, 0,
		      (uint8_t)(ref_read_byte(row, g->codec, l.row_words, 0) ^
				0xff));
	}
}

/* The bytes of FP16 value @i of a row: the high one's low bit is in the
 * mantissa, so the value stays finite and only its check sees it. */
#define HALF_HI(i) (2 * (i) + 1)

/*
 * Miscorrections each check must catch, in every page of @s: the header
 * of the first page (hcrc); in a page with scales, scale 30 (segment 1,
 * across the K scales of two heads with group scales) and the last one
 * (the shorter last segment); in a page without, K row ntokens - 1 of head
 * 0 and K row 0 of the last head, rows next to the pages around it. Each
 * page then verifies as the checks say: one uncorrectable word for each.
 */
static void miscorrect(struct kvmem_seq *s, const struct kvmem_geometry *g)
{
	struct kvmem_page_desc d[256];
	int i, n = kvmem_seq_pages(s, 0, d, 256);

	for (i = 0; i < n; i++) {
		struct kvmem_page_counts pc;
		struct kvmem_page_layout l;
		uint8_t *p = d[i].data, *copy;
		const uint32_t kvh = g->kv_heads, last = d[i].ntokens - 1;
		size_t nlost = 1;

		kvmem_page_layout(g, d[i].hot, &l);
		if (l.scale_words) {
			ck_assert_uint_gt(l.nscales_k + l.nscales_v, 30);
			plant(p + l.scales_off, META, l.scale_words,
			      HALF_HI(30), 0x01);
			plant(p + l.scales_off, META, l.scale_words,
			      HALF_HI(l.nscales_k + l.nscales_v - 1), 0x01);
			nlost = 2;
		} else {
			plant(p + l.k_off + (size_t)last * l.row_bytes, l.codec,
			      l.row_words, HALF_HI(3), 0x01);
			if (kvh > 1 || last > 0) {
				plant(p + l.k_off +
					      (size_t)(kvh - 1) *
						      g->tokens_per_page *
						      l.row_bytes,
				      l.codec, l.row_words, HALF_HI(5), 0x01);
				nlost = 2;
			}
		}
		copy = kvmem_check_xmalloc(l.size);
		memcpy(copy, p, l.size);
		EXPECT_EQ(kvmem_page_verify(copy, g, &pc), -EBADMSG,
			  "page %d: planted damage not seen", i);
		EXPECT_EQ(l.scale_words ? pc.scales.uncorrectable
					: pc.payload.uncorrectable,
			  nlost, "page %d hot %d", i, d[i].hot);
		EXPECT_EQ(pc.header.uncorrectable + pc.scales.corrected +
				  pc.payload.corrected,
			  0, "page %d", i);
		free(copy);
		if (i)
			continue;
		/* The generation's low byte: a header whose words decode
		 * clean and whose hcrc does not match. */
		plant(p, META, HDR_WORDS, 40, 0x01);
		EXPECT_EQ(kvmem_page_verify(p, g, &pc), -EBADMSG, "%s",
			  "planted header");
		EXPECT_EQ(pc.header.uncorrectable, 1, "%s", "planted header");
	}
}

/*
 * Damage to the checks and to runs the checks leave unverified, after
 * damage(): in a page with scales, a corrected flip in check 2, a check
 * beyond repair (four flips) over segment 3, one of whose scale words is
 * corrected, so its scales are lost; in a page without, a corrected flip
 * in the check of K row 0 of head 0, and, in V row 2 of the last head, a
 * corrected word with its check beyond repair.
 */
static void damage_checks(struct kvmem_seq *s, const struct kvmem_geometry *g)
{
	const unsigned int wb = kvmem_codec_get(g->codec)->word_bytes;
	struct kvmem_page_desc d[256];
	int i, n = kvmem_seq_pages(s, 0, d, 256);

	for (i = 0; i < n; i++) {
		struct kvmem_page_layout l;
		uint8_t *p = d[i].data;
		const uint32_t kvh = g->kv_heads;

		kvmem_page_layout(g, d[i].hot, &l);
		if (l.scale_words) {
			if (l.nchecks < 4)
				continue;
			p[l.checks_off + 6 * 2 + 3] ^= 0x10;
			p[l.checks_off + 6 * 3] ^= 0x0f;
			p[l.scales_off + 3 * (32 * 3 + 1) + 1] ^= 0x02;
			continue;
		}
		p[l.checks_off + 3] ^= 0x04;
		if (d[i].ntokens < 3)
			continue;
		p[l.v_off +
		  ((size_t)(kvh - 1) * g->tokens_per_page + 2) * l.row_bytes +
		  (d[i].hot ? 3 : wb)] ^= 0x01;
		p[l.checks_off +
		  6 * ((2 * (size_t)kvh - 1) * g->tokens_per_page + 2)] ^= 0x0f;
	}
}

/*
 * Damage for the kernels' fast path: in every sealed page, single flips
 * (corrected) in every third row of K and V of each head, at bytes that
 * move across the whole row from row to row; in every third page, a
 * double flip in V row 1 of the last head, uncorrectable in h84 and
 * secded72 (four flips in one word in golay24), so the general path takes
 * that tile while the fast path takes its neighbours.
 */
static void damage_mixed(struct kvmem_seq *s, const struct kvmem_geometry *g)
{
	struct kvmem_page_desc d[256];
	struct kvmem_page_layout l;
	int i, n = kvmem_seq_pages(s, 0, d, 256);
	uint32_t h, t;

	kvmem_page_layout(g, 0, &l);
	for (i = 0; i < n; i++) {
		uint8_t *p = d[i].data;

		if (d[i].hot)
			continue;
		for (h = 0; h < g->kv_heads; h++)
			for (t = 0; t < d[i].ntokens; t += 3) {
				size_t row =
					((size_t)h * g->tokens_per_page + t) *
					l.row_bytes;

				p[l.k_off + row + (t * 7 + h) % l.row_bytes] ^=
					(uint8_t)(1u << t % 8);
				p[l.v_off + row +
				  (t * 5 + 2 * h) % l.row_bytes] ^=
					(uint8_t)(1u << (t + 3) % 8);
			}
		if (i % 3 == 1 && d[i].ntokens > 1)
			p[l.v_off +
			  ((size_t)(g->kv_heads - 1) * g->tokens_per_page + 1) *
				  l.row_bytes +
			  6] ^= g->codec == KVMEM_CODEC_GOLAY24 ? 0x0f : 0x11;
	}
}

/*
 * The fast kernel's verdicts after attend_case(): it runs on sealed pages
 * of INT4 in h74 or h84 words of head_dim 64 or 128 with rows aligned to
 * 16 bytes, INT4 in golay24 words and INT8 in secded72 words of head_dim
 * 64 or 128 where a head's rows make whole 16-byte pieces, up to 32
 * tokens a page, groups of whole quads of values, up to 8 query rows; it
 * takes every sealed page of a head whose rows hold no uncorrectable word
 * and leaves the rest to kvmem_k_attend (damage_mixed() puts one, but in
 * h74, in V row 1 of the last head of every third page; h74 words are
 * miscorrected, not lost), unless the test left it too little shared
 * memory (dv->q4_unfit). A fast path that gave up on pages it should take
 * would still give the right attention.
 */
static void expect_fast(struct dev *dv, const struct kvmem_geometry *g,
			const struct kvmem_cuda_attend_args *a,
			const struct table *t, int hurt)
{
	const uint32_t kvh = g->kv_heads, qr = a->n_heads / kvh * a->nq;
	struct kvmem_page_layout l;
	uint32_t i, h;
	uint64_t off;
	uint8_t *fl;
	int want, q4 = kvmem__cuda_attend_flags(dv->cu, g, a, &off);

	kvmem_page_layout(g, 0, &l);
	if (g->codec == KVMEM_CODEC_GOLAY24)
		want = g->format == KVMEM_FMT_INT4 &&
		       (g->head_dim == 64 || g->head_dim == 128) &&
		       g->tokens_per_page * l.row_bytes % 16 == 0;
	else if (g->codec == KVMEM_CODEC_SECDED72)
		want = g->format == KVMEM_FMT_INT8 &&
		       (g->head_dim == 64 || g->head_dim == 128) &&
		       g->tokens_per_page * l.row_bytes % 16 == 0;
	else
		want = g->format == KVMEM_FMT_INT4 &&
		       (g->head_dim == 64 || g->head_dim == 128) &&
		       l.row_bytes % 16 == 0;
	want = want && g->group_size % 4 == 0 && g->tokens_per_page <= 32 &&
	       qr <= 8 && l.k_off % 16 == 0 && l.v_off % 16 == 0 &&
	       !dv->q4_unfit;
	EXPECT_EQ(q4, want, "%s", kvmem_cuda_error());
	if (q4 != 1 || !(hurt == 0 || hurt == 3))
		return;
	fl = kvmem_check_xmalloc((size_t)t->npages * kvh);
	dev_get(dv, fl, a->workspace + off, (size_t)t->npages * kvh);
	for (i = 0; i < t->npages; i++)
		for (h = 0; h < kvh; h++) {
			const int hot = !!(t->pages[i].flags & KVMEM_HDR_HOT);
			const int left =
				hot ||
				(hurt == 3 && g->codec != KVMEM_CODEC_H74 &&
				 i % 3 == 1 && t->pages[i].ntokens > 1 &&
				 h == kvh - 1);

			EXPECT_EQ(fl[(size_t)i * kvh + h], left,
				  "page %u of %u, KV head %u, hot %d, hurt %d",
				  i, t->npages, h, hot, hurt);
		}
	free(fl);
}

/* kvmem_attend() and the kernels on one sequence of @len tokens. */
static void attend_case(struct dev *dv, const struct kvmem_geometry *g,
			uint32_t G, uint32_t len, int hurt, uint32_t policy,
			uint32_t splits, struct kvmem_rng *r)
{
	const uint32_t D = g->head_dim, nh = g->kv_heads * G;
	const size_t tok = (size_t)g->kv_heads * D;
	struct kvmem_attend_opts o = { .n_heads = nh,
				       .erasure = policy,
				       .importance_alpha = 1.0f };
	struct kvmem_cuda_attend_args a;
	struct kvmem_attend_stats st, gst;
	struct kvmem_page_desc d[256];
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	struct table t;
	float *k = kvmem_check_xmalloc(len * tok * 4);
	float *v = kvmem_check_xmalloc(len * tok * 4);
	float *q = kvmem_check_xmalloc((size_t)nh * D * 4);
	float *exp = kvmem_check_xmalloc((size_t)nh * D * 4);
	float *got = kvmem_check_xmalloc((size_t)nh * D * 4);
	const char *gpu = kvmem_cuda_name(dv->cu);
	uint32_t sp[2];
	float *mass;
	size_t wsb, i;
	int np;

	ck_assert_int_eq(kvmem_open_embedded(g, 64 << 20, &c), 0);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	fill(r, k, len * tok);
	fill(r, v, len * tok);
	fill_query(r, q, (size_t)nh * D, D);
	ck_assert_int_eq(kvmem_seq_append(s, 0, k, v, len), 0);
	if (hurt == 2)
		miscorrect(s, g);
	if (hurt == 1 || hurt == 2)
		damage(s, g);
	if (hurt == 1 && g->format == KVMEM_FMT_FP8)
		damage_nan(s, g);
	if (hurt == 2)
		damage_checks(s, g);
	if (hurt == 3)
		damage_mixed(s, g);
	table_of(dv, g, s, &t);
	sp[0] = 0;
	sp[1] = t.npages;

	memset(&a, 0, sizeof(a));
	a.pages = dev_put(dv, t.pages, t.npages * sizeof(*t.pages));
	a.seq_pages = dev_put(dv, sp, sizeof(sp));
	a.q = dev_put(dv, q, (size_t)nh * D * 4);
	a.out = dev_junk(dv, (size_t)nh * D * 4);
	mass = kvmem_check_xmalloc(t.npages * sizeof(float));
	a.mass = dev_junk(dv, t.npages * sizeof(float));
	memset(&gst, 0, sizeof(gst));
	a.stats = dev_put(dv, &gst, sizeof(gst));
	a.batch = 1;
	a.n_heads = nh;
	a.nq = 1;
	a.erasure = policy;
	a.total_pages = t.npages;
	a.max_pages = t.npages;
	a.splits = splits;
	EXPECT_EQ(kvmem_cuda_attend_workspace(dv->cu, g, &a, &wsb), 0, "%s",
		  kvmem_cuda_error());
	a.workspace = dev_junk(dv, wsb);
	EXPECT_EQ(kvmem_cuda_attend(dv->cu, g, &a, NULL), 0, "%s",
		  kvmem_cuda_error());
	dev_get(dv, got, a.out, (size_t)nh * D * 4);
	dev_get(dv, mass, a.mass, t.npages * sizeof(float));
	dev_get(dv, &gst, a.stats, sizeof(gst));
	expect_fast(dv, g, &a, &t, hurt);

	ck_assert_int_eq(kvmem_attend(s, 0, q, exp, &o, &st), 0);
	for (i = 0; i < (size_t)nh * D; i++)
		EXPECT_NEAR(got[i], exp[i], 1e-4 + 1e-4 * fabsf(exp[i]),
			    "%s: out[%zu] fmt %u codec %s G %u D %u len %u "
			    "hurt %d policy %u splits %u",
			    gpu, i, g->format, codecs[g->codec], G, D, len,
			    hurt, policy, splits);
	EXPECT_EQ(gst.words_clean, st.words_clean, "%s: codec %s hurt %d", gpu,
		  codecs[g->codec], hurt);
	EXPECT_EQ(gst.words_corrected, st.words_corrected,
		  "%s: codec %s hurt %d", gpu, codecs[g->codec], hurt);
	EXPECT_EQ(gst.words_uncorrectable, st.words_uncorrectable,
		  "%s: codec %s hurt %d", gpu, codecs[g->codec], hurt);
	EXPECT_EQ(gst.values_erased, st.values_erased, "%s: codec %s hurt %d",
		  gpu, codecs[g->codec], hurt);
	EXPECT_EQ(gst.headers_uncorrectable, st.headers_uncorrectable,
		  "%s: codec %s", gpu, codecs[g->codec]);
	if (hurt && g->codec != KVMEM_CODEC_H74)
		EXPECT(st.values_erased > 0, "codec %s: nothing lost",
		       codecs[g->codec]);
	if (hurt == 2)
		EXPECT_EQ(st.headers_uncorrectable, 1, "codec %s",
			  codecs[g->codec]);
	if (hurt == 3)
		EXPECT(st.words_corrected > 0, "codec %s: nothing corrected",
		       codecs[g->codec]);
	/* alpha 1: each page's importance is this call's share. */
	np = kvmem_seq_pages(s, 0, d, 256);
	for (i = 0; i < (size_t)np; i++)
		EXPECT_NEAR(mass[i], d[i].importance, 1e-4,
			    "%s: page %zu codec %s G %u", gpu, i,
			    codecs[g->codec], G);

	kvmem_seq_free(s);
	kvmem_close(c);
	dev_done(dv);
	free(t.pages);
	free(k);
	free(v);
	free(q);
	free(exp);
	free(got);
	free(mass);
}

static void attend_matches_cpu_on(struct dev *dv)
{
	struct kvmem_geometry g;
	struct kvmem_rng r;
	int fmt, codec;

	kvmem_rng_seed(&r, 1414);
	for (fmt = 0; fmt <= KVMEM_FMT_FP8; fmt++)
		for (codec = 0; codec < KVMEM_CODEC_NR; codec++) {
			geometry(&g, fmt, codec, 0, 2, 64);
			attend_case(dv, &g, 4, 37, 0, KVMEM_ERASE_INTERPOLATE,
				    0, &r);
			attend_case(dv, &g, 1, 53, 1, KVMEM_ERASE_INTERPOLATE,
				    2, &r);
		}
}

START_TEST(test_cuda_attend_matches_cpu)
{
	on_targets(4, attend_matches_cpu_on);
}
END_TEST

static void attend_shapes_on(struct dev *dv)
{
	static const uint32_t gqa[] = { 1, 4, 8 };
	struct kvmem_geometry g;
	struct kvmem_rng r;
	uint32_t policy;
	size_t i;

	kvmem_rng_seed(&r, 2828);
	for (i = 0; i < 3; i++) {
		geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 2, 128);
		attend_case(dv, &g, gqa[i], 41, 1, KVMEM_ERASE_INTERPOLATE, 3,
			    &r);
		geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24, 1, 1, 64);
		attend_case(dv, &g, gqa[i], 21, 1, KVMEM_ERASE_INTERPOLATE, 1,
			    &r);
	}
	/* Each policy over quantized values kept or lost (their own word,
	 * their scale), FP16 sealed pages and the hot sink and tail. */
	for (policy = 0; policy <= KVMEM_ERASE_KEEP; policy++) {
		geometry(&g, KVMEM_FMT_INT2, KVMEM_CODEC_SECDED72, 0, 2, 64);
		attend_case(dv, &g, 2, 70, 1, policy, 0, &r);
		geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24, 1, 2, 64);
		attend_case(dv, &g, 2, 70, 1, policy, 2, &r);
		geometry(&g, KVMEM_FMT_FP16, KVMEM_CODEC_H84, 0, 2, 64);
		attend_case(dv, &g, 2, 45, 1, policy, 0, &r);
		geometry(&g, KVMEM_FMT_FP8, KVMEM_CODEC_H84, 1, 2, 64);
		attend_case(dv, &g, 2, 70, 1, policy, 2, &r);
	}
	/* A sequence shorter than its sink: one FP16 page. */
	geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 2, 64);
	attend_case(dv, &g, 2, 3, 0, KVMEM_ERASE_INTERPOLATE, 0, &r);
}

START_TEST(test_cuda_attend_shapes)
{
	on_targets(4, attend_shapes_on);
}
END_TEST

/*
 * The fast path (INT4 in one-byte codewords and in golay24 words, INT8
 * in secded72 words, head_dim 64 and 128; up to 8 query rows): words it
 * corrects, tiles with an uncorrectable word that the general path takes
 * in the same CTA (damage_mixed()), group scales narrower and wider than
 * a warp's columns, channel key scales, 4 to 32 tokens a page, each
 * policy (golay24 and secded72 with damage() too: lost scales, lost words
 * in K); golay24 pages of 2 tokens (4 at head_dim 64) and secded72 pages
 * of 3 at head_dim 64, whose head's rows end inside a 16-byte piece, left
 * to the general path.
 */
static void attend_fast_on(struct dev *dv)
{
	static const uint32_t gqa[] = { 1, 4, 8 };
	/* Tokens a page and group size 0: geometry()'s. */
	static const struct fast_case {
		int fmt, codec, chan;
		uint32_t kvh, dim, tpp, group, G, len, policy, splits;
	} cases[] = {
		{ KVMEM_FMT_INT8, KVMEM_CODEC_SECDED72, 0, 3, 64, 4, 64, 2, 37,
		  KVMEM_ERASE_ZERO, 0 },
		{ KVMEM_FMT_INT8, KVMEM_CODEC_SECDED72, 0, 2, 64, 3, 0, 4, 29,
		  KVMEM_ERASE_INTERPOLATE, 0 },
		{ KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24, 0, 3, 128, 4, 16, 4, 41,
		  KVMEM_ERASE_KEEP, 0 },
		{ KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24, 1, 2, 128, 2, 0, 4, 23,
		  KVMEM_ERASE_INTERPOLATE, 0 },
		{ KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24, 1, 2, 64, 8, 0, 8, 47,
		  KVMEM_ERASE_KEEP, 0 },
		{ KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24, 0, 2, 64, 4, 16, 2, 30,
		  KVMEM_ERASE_ZERO, 0 },
		{ KVMEM_FMT_INT4, KVMEM_CODEC_H84, 1, 3, 64, 0, 16, 2, 90,
		  KVMEM_ERASE_ZERO, 0 },
		{ KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 2, 128, 0, 128, 4, 60,
		  KVMEM_ERASE_KEEP, 3 },
		/* Four tokens a page and a key scale per channel: the words
		 * of a head's scale segments take more of a warp's copy than
		 * its V rows (kvmem_k_q4_stage_bytes()). */
		{ KVMEM_FMT_INT4, KVMEM_CODEC_H84, 1, 2, 128, 4, 0, 4, 45,
		  KVMEM_ERASE_INTERPOLATE, 0 },
	};
	struct kvmem_geometry g;
	struct kvmem_rng r;
	size_t i;

	kvmem_rng_seed(&r, 3131);
	for (i = 0; i < 3; i++) {
		geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 2, 128);
		g.tokens_per_page = 32;
		attend_case(dv, &g, gqa[i], 150, 3, KVMEM_ERASE_INTERPOLATE, 2,
			    &r);
		geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H74, 1, 2, 64);
		attend_case(dv, &g, gqa[i], 77, 3, (uint32_t)i, 1, &r);
		geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24, i == 1, 2,
			 128);
		g.tokens_per_page = i ? 32 : 16;
		attend_case(dv, &g, gqa[i], 130, 3, (uint32_t)i, 2, &r);
		attend_case(dv, &g, gqa[i], 70, 1, (uint32_t)i, 1, &r);
		geometry(&g, KVMEM_FMT_INT8, KVMEM_CODEC_SECDED72, i == 2, 2,
			 i ? 128 : 64);
		g.tokens_per_page = i == 1 ? 32 : 16;
		attend_case(dv, &g, gqa[i], 110, 3, (uint32_t)i, 1, &r);
		attend_case(dv, &g, gqa[i], 60, 1, (uint32_t)i, 0, &r);
	}
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct fast_case *f = &cases[i];

		geometry(&g, f->fmt, f->codec, f->chan, f->kvh, f->dim);
		if (f->tpp) {
			g.tokens_per_page = f->tpp;
			if (g.sink_tokens > f->tpp)
				g.sink_tokens = f->tpp;
		}
		if (f->group)
			g.group_size = f->group;
		attend_case(dv, &g, f->G, f->len, 3, f->policy, f->splits, &r);
	}
}

/*
 * The fast kernel's word helpers against the reference codes and the
 * INT4 values as the format defines them: kvmem_k_h8x4_dirty() says a
 * word of four one-byte codewords is clean exactly when each byte is
 * ref_h84() (or ref_h74()) of its low nibble, for every pair of bytes in
 * every pair of places, the others clean; kvmem_k_h16() gives each
 * value plus 24 as an FP16, for every four nibbles under any high ones.
 */
START_TEST(test_cuda_word_helpers)
{
	uint64_t seed = 7;
	uint32_t x, y, w, nib, i, j, k, want, got;
	uint8_t by[4];
	int ext;

	for (ext = 0; ext < 2; ext++)
		for (i = 0; i < 4; i++)
			for (j = i + 1; j < 4; j++)
				for (x = 0; x < 256; x++)
					for (y = 0; y < 256; y++) {
						for (k = 0; k < 4; k++) {
							nib = (uint32_t)ref_rnd(
								      &seed) &
							      15;
							by[k] = ext ? ref_h84(nib)
								    : ref_h74(nib);
						}
						by[i] = (uint8_t)x;
						by[j] = (uint8_t)y;
						memcpy(&w, by, 4);
						want = 0;
						for (k = 0; k < 4; k++)
							want |= by[k] !=
								(ext ? ref_h84(by[k] &
									       15u)
								     : ref_h74(by[k] &
									       15u));
						got = kvmem__simt_h8x4_dirty(
							w, ext);
						EXPECT_EQ(!!got, want,
							  "ext %d word 0x%08x",
							  ext, w);
					}
	for (nib = 0; nib < 0x10000; nib++) {
		w = (uint32_t)ref_rnd(&seed) & 0xf0f0f0f0u;
		for (k = 0; k < 4; k++)
			w |= (nib >> (4 * k) & 15) << (8 * k);
		for (k = 0; k < 4; k++) {
			const uint32_t h = kvmem__simt_h16(w, (int)(k % 2));
			const uint32_t c = w >> (8 * k) & 15;

			EXPECT_FEQ(kvmem_h2f((uint16_t)(h >> (k / 2 * 16))),
				   (float)((int)c - (c >= 8 ? 16 : 0) + 24),
				   "word 0x%08x value %u", w, k);
		}
	}
}
END_TEST

/*
 * Query rows of very different sizes in one GQA group (1e-4 to 400 times
 * the usual, 0.005 to 20 at most a value): the tensor cores take each
 * row scaled by a power of two of its own and in two FP16 halves, so
 * every row matches the CPU library as the usual ones do, in h84 (K and
 * V on the tensor cores), golay24 with groups of 16 (K only) and int8
 * in secded72 (K and V with four query rows, K only with eight).
 */
static void attend_query_scales_on(struct dev *dv)
{
	static const float scales[4] = { 1e-4f, 1.0f, 40.0f, 400.0f };
	struct kvmem_geometry g;
	struct kvmem_rng r;

	kvmem_rng_seed(&r, 5151);
	query_scale = scales;
	geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 2, 128);
	attend_case(dv, &g, 4, 100, 0, KVMEM_ERASE_INTERPOLATE, 2, &r);
	geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24, 0, 2, 64);
	g.group_size = 16;
	attend_case(dv, &g, 8, 70, 0, KVMEM_ERASE_INTERPOLATE, 1, &r);
	geometry(&g, KVMEM_FMT_INT8, KVMEM_CODEC_SECDED72, 0, 2, 128);
	attend_case(dv, &g, 4, 64, 0, KVMEM_ERASE_INTERPOLATE, 0, &r);
	attend_case(dv, &g, 8, 64, 0, KVMEM_ERASE_INTERPOLATE, 0, &r);
	query_scale = NULL;
}

START_TEST(test_cuda_attend_query_scales)
{
	on_targets(4, attend_query_scales_on);
}
END_TEST

START_TEST(test_cuda_attend_fast)
{
	on_targets(4, attend_fast_on);
}
END_TEST

/*
 * What the checks catch (miscorrect(), damage_checks()): scale segments,
 * sealed FP16 rows and hot rows lost whole, unverified ones losing what
 * the decoder changed, across heads and into the rows next to a tile, and
 * a header that does not match its hcrc.
 */
static void attend_checks_on(struct dev *dv)
{
	struct kvmem_geometry g;
	struct kvmem_rng r;
	uint32_t policy;

	kvmem_rng_seed(&r, 2424);
	for (policy = 0; policy <= KVMEM_ERASE_KEEP; policy++) {
		geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 2, 64);
		attend_case(dv, &g, 2, 53, 2, policy, 2, &r);
		geometry(&g, KVMEM_FMT_FP16, KVMEM_CODEC_SECDED72, 0, 2, 64);
		attend_case(dv, &g, 2, 45, 2, policy, 0, &r);
	}
	geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24, 1, 2, 64);
	attend_case(dv, &g, 2, 70, 2, KVMEM_ERASE_INTERPOLATE, 3, &r);
	geometry(&g, KVMEM_FMT_INT8, KVMEM_CODEC_H74, 0, 1, 128);
	attend_case(dv, &g, 4, 41, 2, KVMEM_ERASE_INTERPOLATE, 0, &r);
	geometry(&g, KVMEM_FMT_INT2, KVMEM_CODEC_SECDED72, 0, 3, 96);
	attend_case(dv, &g, 1, 37, 2, KVMEM_ERASE_INTERPOLATE, 2, &r);
}

/*
 * A kernel's static shared memory comes out of the opt-in limit: with
 * all but 24 KiB of it declared statically, every launch asks for no more
 * than the rest (the fake refuses one that does), and attention runs with
 * a smaller tile and still matches the CPU, also when the driver cannot
 * say how many CTAs fit. The fast kernel needs more for these pages
 * (30 KiB, its warps' copies of their rows among it), so the general one
 * takes them all; with 48 KiB it fits again.
 */
START_TEST(test_cuda_static_smem)
{
	struct fakecuda *f = fake_setup(4, FAKE_SMEM);
	struct dev dv = { 0 };
	struct kvmem_geometry g;
	struct kvmem_rng r;

	f->static_smem = FAKE_SMEM - 24 * 1024;
	ck_assert_msg(
		!kvmem__cuda_open_image(0, fake_path(), fake_image, &dv.cu),
		"%s", kvmem_cuda_error());
	kvmem_rng_seed(&r, 77);
	geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 2, 128);
	dv.q4_unfit = 1;
	attend_case(&dv, &g, 4, 70, 2, KVMEM_ERASE_INTERPOLATE, 2, &r);
	/* A driver that cannot say how many CTAs fit: the splits chosen
	 * (0 asks for them) still give the same attention. */
	f->no_occupancy = 1;
	attend_case(&dv, &g, 4, 70, 2, KVMEM_ERASE_INTERPOLATE, 0, &r);
	dev_done(&dv);
	kvmem_cuda_close(dv.cu);
	expect_released(f, "close");

	f->static_smem = FAKE_SMEM - 48 * 1024;
	f->no_occupancy = 0;
	ck_assert_msg(
		!kvmem__cuda_open_image(0, fake_path(), fake_image, &dv.cu),
		"%s", kvmem_cuda_error());
	dv.q4_unfit = 0;
	attend_case(&dv, &g, 4, 70, 2, KVMEM_ERASE_INTERPOLATE, 0, &r);
	dev_done(&dv);
	kvmem_cuda_close(dv.cu);
	expect_released(f, "close");
}
END_TEST

START_TEST(test_cuda_attend_checks)
{
	on_targets(4, attend_checks_on);
}
END_TEST

/*
 * Attention arguments for a batch of two sequences, pages [sp[b],
 * sp[b + 1]) of @table each, and @nq query tokens of @nh heads from @q.
 */
static void batch_args(struct dev *dv, struct kvmem_cuda_attend_args *a,
		       const struct kvmem_cuda_page *table, const uint32_t *sp,
		       const float *q, uint32_t nq, uint32_t nh, uint32_t D)
{
	const size_t qbytes = 2 * (size_t)nq * nh * D * 4;

	memset(a, 0, sizeof(*a));
	a->pages = dev_put(dv, table, sp[2] * sizeof(*table));
	a->seq_pages = dev_put(dv, sp, 3 * sizeof(*sp));
	a->q = dev_put(dv, q, qbytes);
	a->out = dev_junk(dv, qbytes);
	a->batch = 2;
	a->n_heads = nh;
	a->nq = nq;
	a->total_pages = sp[2];
	a->max_pages =
		sp[1] - sp[0] > sp[2] - sp[1] ? sp[1] - sp[0] : sp[2] - sp[1];
}

/*
 * Check the @nq query tokens of sequence @b of a batch (@out and @q as
 * kvmem_cuda_attend() has them) against softmax attention in double over
 * @k and @v, token-major [len][kvh][D]: query token j sees positions up to
 * len - nq + j. A query row with a NaN gets NaN, and only that row.
 */
static void expect_causal(const char *gpu, uint32_t b, const float *out,
			  const float *q, const float *k, const float *v,
			  uint32_t kvh, uint32_t len, uint32_t nq, uint32_t nh,
			  uint32_t D)
{
	const size_t tok = (size_t)kvh * D;
	const uint32_t G = nh / kvh;
	uint32_t j, h, t, d;

	for (j = 0; j < nq; j++)
		for (h = 0; h < nh; h++) {
			const size_t row = ((size_t)b * nq + j) * nh + h;
			const float *qh = q + row * D;
			const float *kh = k + h / G * D, *vh = v + h / G * D;
			double mx = -INFINITY, sum = 0, acc[256] = { 0 };
			double *dots =
				kvmem_check_xmalloc(len * sizeof(double));

			for (t = 0; t <= len - nq + j; t++) {
				double dot = 0;

				for (d = 0; d < D; d++)
					dot += (double)qh[d] * kh[t * tok + d];
				dots[t] = dot / sqrt((double)D);
				mx = dots[t] > mx ? dots[t] : mx;
			}
			for (t = 0; t <= len - nq + j; t++) {
				double w = exp(dots[t] - mx);

				sum += w;
				for (d = 0; d < D; d++)
					acc[d] += w * vh[t * tok + d];
			}
			for (d = 0; d < D; d++) {
				if (isnan(acc[d] / sum)) {
					EXPECT(isnan(out[row * D + d]),
					       "%s: seq %u query %u head %u dim "
					       "%u: %g, not NaN",
					       gpu, b, j, h, d,
					       out[row * D + d]);
					continue;
				}
				EXPECT_NEAR(
					out[row * D + d], acc[d] / sum, 2e-4,
					"%s: seq %u query %u head %u dim %u",
					gpu, b, j, h, d);
			}
			free(dots);
		}
}

/*
 * Several query tokens per sequence and a batch of two: each query token
 * against softmax over the decoded sequence up to its position, computed
 * here in double from kvmem_seq_read().
 */
static void batch_causal_case(struct dev *dv, int fmt, int codec, uint32_t nq,
			      uint32_t G,
			      void (*hurt)(struct kvmem_seq *,
					   const struct kvmem_geometry *))
{
	const uint32_t lens[2] = { 29, 45 };
	struct kvmem_cuda_attend_args a;
	struct kvmem_cuda_page *all;
	struct kvmem_geometry g;
	struct kvmem_cache *c;
	struct kvmem_seq *s[2];
	struct table t[2];
	struct kvmem_rng r;
	uint32_t sp[3], b, nh, D;
	float *q, *out, *kk, *vv;
	size_t tok, wsb;

	kvmem_rng_seed(&r, 99);
	geometry(&g, fmt, codec, 0, 2, 64);
	D = g.head_dim;
	nh = g.kv_heads * G;
	tok = (size_t)g.kv_heads * D;
	ck_assert_int_eq(kvmem_open_embedded(&g, 64 << 20, &c), 0);
	for (b = 0; b < 2; b++) {
		float *k = kvmem_check_xmalloc(lens[b] * tok * 4);
		float *v = kvmem_check_xmalloc(lens[b] * tok * 4);

		fill(&r, k, lens[b] * tok);
		fill(&r, v, lens[b] * tok);
		ck_assert_int_eq(kvmem_seq_create(c, &s[b]), 0);
		ck_assert_int_eq(kvmem_seq_append(s[b], 0, k, v, lens[b]), 0);
		hurt(s[b], &g);
		table_of(dv, &g, s[b], &t[b]);
		free(k);
		free(v);
	}
	all = kvmem_check_xmalloc((t[0].npages + t[1].npages) * sizeof(*all));
	memcpy(all, t[0].pages, t[0].npages * sizeof(*all));
	memcpy(all + t[0].npages, t[1].pages, t[1].npages * sizeof(*all));
	sp[0] = 0;
	sp[1] = t[0].npages;
	sp[2] = t[0].npages + t[1].npages;
	q = kvmem_check_xmalloc(2 * nq * nh * D * 4);
	out = kvmem_check_xmalloc(2 * nq * nh * D * 4);
	fill_query(&r, q, 2 * nq * nh * D, D);
	batch_args(dv, &a, all, sp, q, nq, nh, D);
	a.splits = 2;
	ck_assert_int_eq(kvmem_cuda_attend_workspace(dv->cu, &g, &a, &wsb), 0);
	a.workspace = dev_junk(dv, wsb);
	EXPECT_EQ(kvmem_cuda_attend(dv->cu, &g, &a, NULL), 0, "%s",
		  kvmem_cuda_error());
	dev_get(dv, out, a.out, 2 * nq * nh * D * 4);

	kk = kvmem_check_xmalloc(lens[1] * tok * 4);
	vv = kvmem_check_xmalloc(lens[1] * tok * 4);
	for (b = 0; b < 2; b++) {
		ck_assert_int_eq(kvmem_seq_read(s[b], 0, 0, lens[b],
						KVMEM_ERASE_INTERPOLATE, kk, vv,
						NULL),
				 0);
		expect_causal(kvmem_cuda_name(dv->cu), b, out, q, kk, vv,
			      g.kv_heads, lens[b], nq, nh, D);
	}
	for (b = 0; b < 2; b++) {
		kvmem_seq_free(s[b]);
		free(t[b].pages);
	}
	kvmem_close(c);
	free(all);
	free(q);
	free(out);
	free(kk);
	free(vv);
}

/* The general path (12 query rows of INT8), and the fast one (8 of INT4
 * in h84 words, some pages with an uncorrectable word). */
static void batch_causal(struct dev *dv)
{
	batch_causal_case(dv, KVMEM_FMT_INT8, KVMEM_CODEC_GOLAY24, 3, 2,
			  damage);
	batch_causal_case(dv, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 4, 2,
			  damage_mixed);
}

START_TEST(test_cuda_attend_batch_causal)
{
	on_targets(2, batch_causal);
}
END_TEST

/* The grid depth (splits) of the fake's last FP16 kernel launch. */
static unsigned int f16_splits;

static int record_f16(const char *kernel, unsigned int gx, unsigned int gy,
		      unsigned int gz, unsigned int block, unsigned int smem,
		      void *params)
{
	if (!strcmp(kernel, "kvmem_k_attend_f16"))
		f16_splits = gz;
	return kvmem__simt_run(kernel, gx, gy, gz, block, smem, params);
}

/*
 * The FP16 baseline over plain pages: a batch of two of @lens tokens, @nq
 * causal query tokens, against attention in double over the same FP16
 * values. With @nan_row, that query row (of [batch][nq][heads]) has a NaN:
 * the tensor-core loop, which scales the rows of a GQA group together,
 * leaves such a CTA to the per-token loop, and only that row reads NaN.
 */
static void f16_case(struct dev *dv, uint32_t D, uint32_t G, uint32_t nq,
		     uint32_t splits, const uint32_t lens[2],
		     struct kvmem_rng *r, int nan_row)
{
	const uint32_t kvh = 2, nh = kvh * G;
	const size_t tok = (size_t)kvh * D;
	struct kvmem_cuda_page table[40];
	struct kvmem_cuda_attend_args a;
	struct kvmem_geometry g;
	uint32_t sp[3], b, np = 0;
	float *k[2], *v[2], *q, *out;
	size_t wsb, i;

	/* The shape only; golay24's attention, the general kernel, fits
	 * fewer CTAs than the FP16 one, whose splits are its own. */
	geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24, 0, kvh, D);
	sp[0] = 0;
	for (b = 0; b < 2; b++) {
		const uint32_t tpp = g.tokens_per_page;
		uint16_t *page = kvmem_check_xmalloc(2 * tok * tpp * 2);
		uint32_t t0, t, h, d;

		k[b] = kvmem_check_xmalloc(lens[b] * tok * 4);
		v[b] = kvmem_check_xmalloc(lens[b] * tok * 4);
		fill(r, k[b], lens[b] * tok);
		fill(r, v[b], lens[b] * tok);
		for (i = 0; i < lens[b] * tok; i++) {
			k[b][i] = kvmem_h2f(kvmem_f2h(k[b][i]));
			v[b][i] = kvmem_h2f(kvmem_f2h(v[b][i]));
		}
		for (t0 = 0; t0 < lens[b]; t0 += tpp, np++) {
			const uint32_t n =
				lens[b] - t0 < tpp ? lens[b] - t0 : tpp;

			memset(page, 0xff, 2 * tok * tpp * 2); /* NaN */
			for (h = 0; h < kvh; h++)
				for (t = 0; t < n; t++)
					for (d = 0; d < D; d++) {
						size_t src = (t0 + t) * tok +
							     h * D + d;
						size_t dst = ((size_t)h * tpp +
							      t) * D +
							     d;

						page[dst] =
							kvmem_f2h(k[b][src]);
						page[tok * tpp + dst] =
							kvmem_f2h(v[b][src]);
					}
			ck_assert_uint_lt(np, 40);
			table[np].addr = dev_put(dv, page, 2 * tok * tpp * 2);
			table[np].token_start = t0;
			table[np].ntokens = n;
			table[np].flags = 0;
			table[np].resv = 0;
		}
		sp[b + 1] = np;
		free(page);
	}
	q = kvmem_check_xmalloc(2 * nq * nh * D * 4);
	out = kvmem_check_xmalloc(2 * nq * nh * D * 4);
	fill_query(r, q, 2 * nq * nh * D, D);
	if (nan_row >= 0)
		q[(size_t)nan_row * D + 7] = NAN;
	batch_args(dv, &a, table, sp, q, nq, nh, D);
	a.splits = splits;
	ck_assert_int_eq(kvmem_cuda_attend_workspace(dv->cu, &g, &a, &wsb), 0);
	a.workspace = dev_junk(dv, wsb);
	f16_splits = 0;
	EXPECT_EQ(kvmem_cuda_attend_f16(dv->cu, &g, &a, NULL), 0, "%s",
		  kvmem_cuda_error());
	/*
	 * On the fake: the splits asked for, or one wave of the FP16
	 * kernel's own CTAs (the fake fits as many as its shared memory
	 * holds, 8 at most, on each of its multiprocessors), never more
	 * than a sequence has pages.
	 */
	if (fake->launch == record_f16) {
		uint32_t want = splits, occ;

		if (!want) {
			occ = FAKE_SMEM /
			      (kvmem_k_f16_smem(nq * G, D) + FAKE_STATIC_SMEM);
			occ = occ > 8 ? 8 : occ;
			want = (occ * (uint32_t)fake->sms + 2 * kvh - 1) /
			       (2 * kvh);
		}
		want = want < a.max_pages ? want : a.max_pages;
		EXPECT_EQ(f16_splits, want, "D %u G %u nq %u splits %u", D, G,
			  nq, splits);
	}
	dev_get(dv, out, a.out, 2 * nq * nh * D * 4);
	for (b = 0; b < 2; b++) {
		expect_causal(kvmem_cuda_name(dv->cu), b, out, q, k[b], v[b],
			      kvh, lens[b], nq, nh, D);
		free(k[b]);
		free(v[b]);
	}
	free(q);
	free(out);
	dev_done(dv);
}

static void attend_f16_baseline_on(struct dev *dv)
{
	struct kvmem_cuda_attend_args a;
	struct kvmem_geometry g;
	struct kvmem_rng r;

	static const uint32_t lens[2][2] = { { 37, 50 }, { 60, 100 } };

	kvmem_rng_seed(&r, 16);
	if (strstr(kvmem_cuda_name(dv->cu), "kvmem fake GPU"))
		fake->launch = record_f16;
	f16_case(dv, 64, 4, 1, 0, lens[0], &r, -1);
	f16_case(dv, 128, 2, 3, 2, lens[0], &r, -1);
	f16_case(dv, 256, 1, 2, 3, lens[0], &r, -1);
	/* 4 and 7 pages: room for a wave of the FP16 kernel, of 8 CTAs a
	 * multiprocessor, 16 CTAs over 4 sequence heads: 4 splits (of 1
	 * and of 2 pages); and with 16 query rows of 128, of 5 (its shared
	 * memory), 10 CTAs: 3 splits, which 3 and 4 pages have room for
	 * (the rows cost more than the pages). */
	f16_case(dv, 64, 1, 1, 0, lens[1], &r, -1);
	f16_case(dv, 128, 4, 1, 0, lens[1], &r, -1);
	f16_case(dv, 128, 4, 4, 0, lens[0], &r, -1);
	/* A NaN in head 1 of sequence 0's query: the rest of its group (heads
	 * 0, 2, 3) and of the batch as without it. */
	f16_case(dv, 128, 4, 1, 0, lens[0], &r, 1);
	f16_case(dv, 64, 4, 2, 0, lens[1], &r, 9);
	fake->launch = kvmem__simt_run;
	/* Only the head sizes it has code for. */
	geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 2, 96);
	g.group_size = 32;
	memset(&a, 0, sizeof(a));
	a.batch = a.nq = a.total_pages = a.max_pages = 1;
	a.n_heads = 2;
	a.pages = a.seq_pages = a.q = a.out = a.workspace = 64;
	EXPECT_EQ(kvmem_cuda_attend_f16(dv->cu, &g, &a, NULL), -EOPNOTSUPP,
		  "%s", kvmem_cuda_error());
	EXPECT(strstr(kvmem_cuda_error(), "not 96"), "%s", kvmem_cuda_error());
}

START_TEST(test_cuda_attend_f16_baseline)
{
	on_targets(2, attend_f16_baseline_on);
}
END_TEST

START_TEST(test_cuda_attend_bad_args)
{
	struct kvmem_cuda *cu = fake_open(1, 16 * 1024);
	struct kvmem_cuda_attend_args a;
	struct kvmem_geometry g;
	size_t wsb;

	geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 2, 64);
	memset(&a, 0, sizeof(a));
	a.batch = 1;
	a.n_heads = 3; /* not a multiple of kv_heads */
	a.nq = 1;
	a.total_pages = a.max_pages = 1;
	EXPECT_EQ(kvmem_cuda_attend_workspace(cu, &g, &a, &wsb), -EINVAL, "%s",
		  kvmem_cuda_error());
	a.n_heads = 4;
	a.erasure = 7;
	EXPECT_EQ(kvmem_cuda_attend_workspace(cu, &g, &a, &wsb), -EINVAL, "%s",
		  "bad policy");
	a.erasure = 0;
	EXPECT_EQ(kvmem_cuda_attend(cu, &g, &a, NULL), -EINVAL, "%s",
		  "NULL addresses");
	/* 16 KiB of shared memory cannot hold 512 query rows of 64. */
	a.nq = 256;
	EXPECT_EQ(kvmem_cuda_attend_workspace(cu, &g, &a, &wsb), -EOPNOTSUPP,
		  "%s", kvmem_cuda_error());
	EXPECT(strstr(kvmem_cuda_error(), "shared memory"), "%s",
	       kvmem_cuda_error());
	/* No kernel knows the lm formats or the rotation: said, not
	 * misread. */
	a.nq = 1;
	g.format = KVMEM_FMT_LM3;
	EXPECT_EQ(kvmem_cuda_attend_workspace(cu, &g, &a, &wsb), -EOPNOTSUPP,
		  "%s", kvmem_cuda_error());
	EXPECT_EQ(kvmem_cuda_encode(cu, &g, KVMEM_CUDA_F32, 0, 0, NULL),
		  -EOPNOTSUPP, "%s", kvmem_cuda_error());
	EXPECT(strstr(kvmem_cuda_error(), "lm formats"), "%s",
	       kvmem_cuda_error());
	g.format = KVMEM_FMT_INT4;
	g.rotation = KVMEM_ROTATE_HADAMARD;
	EXPECT_EQ(kvmem_cuda_attend_workspace(cu, &g, &a, &wsb), -EOPNOTSUPP,
		  "%s", kvmem_cuda_error());
	kvmem_cuda_close(cu);
}
END_TEST

/* ---- scrub and inject ------------------------------------------------- */

static void scrub_case(struct dev *dv, int codec, struct kvmem_rng *r)
{
	const uint32_t ntok = 16;
	const char *gpu = kvmem_cuda_name(dv->cu);
	struct kvmem_inject_params ip;
	struct kvmem_page_counts pc, exp;
	struct kvmem_cuda_page pg;
	struct kvmem_page_layout l;
	struct kvmem_geometry g;
	struct kvmem_page_hdr hdr;
	uint64_t rep[2 + KVMEM_INJECT_HIST] = { 0 };
	uint64_t bits = 0, words = 0, dpage, dflips, drep, dpg, dpc, dstatus;
	int32_t status;
	float *k, *v;
	uint8_t *page, *ref, *flips;
	size_t tok, nw, i;
	int want;

	geometry(&g, KVMEM_FMT_INT4, codec, 0, 2, 64);
	kvmem_page_layout(&g, 0, &l);
	tok = (size_t)g.kv_heads * g.head_dim;
	k = kvmem_check_xmalloc(ntok * tok * 4);
	v = kvmem_check_xmalloc(ntok * tok * 4);
	fill(r, k, ntok * tok);
	fill(r, v, ntok * tok);
	page = kvmem_check_xmalloc(l.size);
	ref = kvmem_check_xmalloc(l.size);
	memset(&hdr, 0, sizeof(hdr));
	hdr.ntokens = ntok;
	hdr.flags = KVMEM_HDR_SEALED;
	ck_assert_int_eq(kvmem_page_encode(page, &g, &hdr, 0, k, v), 0);
	dpage = dev_put(dv, page, l.size);

	/* Flip bits in the K block on the device. */
	nw = (size_t)g.kv_heads * g.tokens_per_page * l.row_words;
	flips = kvmem_check_xmalloc(nw);
	dflips = dev_junk(dv, nw);
	drep = dev_put(dv, rep, sizeof(rep));
	ck_assert_int_eq(
		kvmem_inject_params_for_codec(&ip, codec, 0.02, 42 + codec), 0);
	EXPECT_EQ(kvmem_cuda_inject(dv->cu, dpage + l.k_off, nw, &ip, dflips,
				    drep, NULL),
		  0, "%s", kvmem_cuda_error());
	dev_get(dv, flips, dflips, nw);
	dev_get(dv, rep, drep, sizeof(rep));
	dev_get(dv, page, dpage, l.size);
	for (i = 0; i < nw; i++) {
		bits += flips[i];
		words += flips[i] > 0;
	}
	EXPECT_EQ(rep[0], bits, "%s: codec %s", gpu, codecs[codec]);
	EXPECT_EQ(rep[1], words, "%s: codec %s", gpu, codecs[codec]);
	EXPECT(bits > 0, "%s: codec %s: no flips", gpu, codecs[codec]);
	/* Flips in the padding gaps too, after V and after the header:
	 * put back by the scrub. */
	page[l.size - 1] ^= 0x80;
	page[HDR_BYTES + 3] ^= 0x40;
	/* The metadata, golay24: a corrected flip in the last header word
	 * and in scale word 1, four flips (beyond repair) in scale word 5. */
	page[3 * (HDR_WORDS - 1) + 1] ^= 0x04;
	page[SCALES_OFF + 3 * 1] ^= 0x01;
	page[SCALES_OFF + 3 * 5 + 1] ^= 0x0f;
	dev_set(dv, dpage, page, l.size);

	memcpy(ref, page, l.size);
	want = kvmem_page_scrub(ref, &g, &exp);
	memset(&pg, 0, sizeof(pg));
	pg.addr = dpage;
	dpg = dev_put(dv, &pg, sizeof(pg));
	dpc = dev_junk(dv, sizeof(pc));
	dstatus = dev_junk(dv, sizeof(status));
	EXPECT_EQ(kvmem_cuda_scrub(dv->cu, &g, dpg, 1, dpc, dstatus, NULL), 0,
		  "%s", kvmem_cuda_error());
	dev_get(dv, &status, dstatus, sizeof(status));
	dev_get(dv, &pc, dpc, sizeof(pc));
	dev_get(dv, page, dpage, l.size);
	EXPECT_EQ(status, want, "%s: codec %s", gpu, codecs[codec]);
	EXPECT_MEM(&pc, &exp, sizeof(exp), "%s: counts, codec %s", gpu,
		   codecs[codec]);
	EXPECT_MEM(page, ref, l.size, "%s: scrubbed page, codec %s", gpu,
		   codecs[codec]);
	EXPECT_EQ(status, -EBADMSG, "%s: codec %s", gpu, codecs[codec]);
	EXPECT_EQ(pc.header.clean, HDR_WORDS - 1, "%s", gpu);
	EXPECT_EQ(pc.header.corrected, 1, "%s", gpu);
	EXPECT_EQ(pc.scales.clean, l.scale_words + 2 * l.nchecks - 2, "%s",
		  gpu);
	EXPECT_EQ(pc.scales.corrected, 1, "%s", gpu);
	EXPECT_EQ(pc.scales.uncorrectable, 1, "%s", gpu);
	EXPECT_EQ(page[HDR_BYTES + 3], 0, "%s: the gap after the header", gpu);
	/* Every word with one flip was corrected. */
	for (i = 0; i < nw; i++)
		if (flips[i] == 1)
			break;
	EXPECT(exp.payload.corrected > 0 || i == nw, "codec %s", codecs[codec]);

	/* A header beyond repair (four flips in a golay24 word): nothing
	 * else is touched. */
	page[0] ^= 0x0f;
	dev_set(dv, dpage, page, l.size);
	memcpy(ref, page, l.size);
	want = kvmem_page_scrub(ref, &g, &exp);
	EXPECT_EQ(kvmem_cuda_scrub(dv->cu, &g, dpg, 1, dpc, dstatus, NULL), 0,
		  "%s", kvmem_cuda_error());
	dev_get(dv, &status, dstatus, sizeof(status));
	dev_get(dv, &pc, dpc, sizeof(pc));
	dev_get(dv, page, dpage, l.size);
	EXPECT_EQ(status, -EBADMSG, "%s: codec %s", gpu, codecs[codec]);
	EXPECT_EQ(want, -EBADMSG, "codec %s", codecs[codec]);
	EXPECT_MEM(&pc, &exp, sizeof(exp), "%s: bad header, codec %s", gpu,
		   codecs[codec]);
	EXPECT_MEM(page, ref, l.size, "%s: bad header page, codec %s", gpu,
		   codecs[codec]);
	free(k);
	free(v);
	free(page);
	free(ref);
	free(flips);
	dev_done(dv);
}

/*
 * kvmem_page_scrub() and the kernel on a copy each of @page, which gets
 * the result; the CPU's counts go to @counts.
 */
static void scrub_both(struct dev *dv, const struct kvmem_geometry *g,
		       uint8_t *page, size_t size, int want,
		       struct kvmem_page_counts *counts, const char *what)
{
	const char *gpu = kvmem_cuda_name(dv->cu);
	struct kvmem_page_counts pc, exp;
	struct kvmem_cuda_page pg;
	uint8_t *ref = kvmem_check_xmalloc(size);
	uint64_t dpage = dev_put(dv, page, size), dpc, dstatus;
	int32_t status;

	memcpy(ref, page, size);
	EXPECT_EQ(kvmem_page_scrub(ref, g, &exp), want, "%s", what);
	memset(&pg, 0, sizeof(pg));
	pg.addr = dpage;
	dpc = dev_junk(dv, sizeof(pc));
	dstatus = dev_junk(dv, sizeof(status));
	EXPECT_EQ(kvmem_cuda_scrub(dv->cu, g, dev_put(dv, &pg, sizeof(pg)), 1,
				   dpc, dstatus, NULL),
		  0, "%s", kvmem_cuda_error());
	dev_get(dv, &status, dstatus, sizeof(status));
	dev_get(dv, &pc, dpc, sizeof(pc));
	dev_get(dv, page, dpage, size);
	EXPECT_EQ(status, want, "%s: %s", gpu, what);
	EXPECT_MEM(&pc, &exp, sizeof(exp), "%s: counts, %s", gpu, what);
	EXPECT_MEM(page, ref, size, "%s: scrubbed page, %s", gpu, what);
	*counts = exp;
	free(ref);
}

/*
 * Scrub against the checks: a page of @ntok tokens (sealed unless @hot)
 * with a segment or row miscorrected (plant()), check words corrected and
 * beyond repair, in a page with scales the pad word after the last scale
 * beyond repair, in one without the check of a row past ntokens beyond
 * repair; then a header that does not match its hcrc.
 */
static void scrub_checks_case(struct dev *dv, int fmt, int codec, int hot,
			      uint32_t ntok, struct kvmem_rng *r)
{
	struct kvmem_page_counts pc;
	struct kvmem_page_layout l;
	struct kvmem_geometry g;
	struct kvmem_page_hdr hdr;
	char what[96];
	uint8_t *page;
	float *k, *v;
	size_t tok;

	geometry(&g, fmt, codec, 0, 2, 64);
	kvmem_page_layout(&g, hot, &l);
	tok = (size_t)g.kv_heads * g.head_dim;
	k = kvmem_check_xmalloc(ntok * tok * 4);
	v = kvmem_check_xmalloc(ntok * tok * 4);
	fill(r, k, ntok * tok);
	fill(r, v, ntok * tok);
	page = kvmem_check_xmalloc(l.size);
	memset(&hdr, 0, sizeof(hdr));
	hdr.ntokens = ntok;
	hdr.flags = hot ? 0 : KVMEM_HDR_SEALED;
	ck_assert_int_eq(kvmem_page_encode(page, &g, &hdr, hot, k, v), 0);
	snprintf(what, sizeof(what), "fmt %d codec %s hot %d ntok %u", fmt,
		 codecs[codec], hot, ntok);

	if (l.scale_words) {
		const size_t vw =
			((size_t)(l.nscales_k + l.nscales_v) * 16 + 11) / 12;

		ck_assert_uint_ge(l.nchecks, 4);
		ck_assert_uint_eq(vw + 1, l.scale_words);
		plant(page + l.scales_off, META, l.scale_words, HALF_HI(30),
		      0x01);
		page[l.checks_off + 6 * 2 + 4] ^= 0x01;
		page[l.checks_off + 6 * 3 + 3] ^= 0x0f;
		page[l.scales_off + 3 * vw] ^= 0x0f;
	} else {
		ck_assert_uint_lt(ntok, g.tokens_per_page);
		plant(page + l.k_off +
			      ((size_t)g.tokens_per_page + 1) * l.row_bytes,
		      l.codec, l.row_words, HALF_HI(7), 0x01);
		page[l.checks_off + 1] ^= 0x08;
		page[l.checks_off + 6 * (g.tokens_per_page + ntok)] ^= 0x0f;
	}
	scrub_both(dv, &g, page, l.size, -EBADMSG, &pc, what);
	/* What both found, as this test made it, check words counted with
	 * what they check: a corrected check; the pad word and a check
	 * beyond repair and a lost segment, or a check beyond repair and a
	 * lost row. */
	{
		const struct kvmem_ecc_counts *in =
			l.scale_words ? &pc.scales : &pc.payload;
		const struct kvmem_ecc_counts *out =
			l.scale_words ? &pc.payload : &pc.scales;

		EXPECT_EQ(in->corrected, 1, "%s", what);
		EXPECT_EQ(in->uncorrectable, l.scale_words ? 3 : 2, "%s", what);
		EXPECT_EQ(out->corrected + out->uncorrectable, 0, "%s", what);
	}

	plant(page, META, HDR_WORDS, 40, 0x01);
	scrub_both(dv, &g, page, l.size, -EBADMSG, &pc, what);
	EXPECT_EQ(pc.header.uncorrectable, 1, "%s: planted header", what);
	free(k);
	free(v);
	free(page);
	dev_done(dv);
}

static void scrub_matches_cpu_on(struct dev *dv)
{
	struct kvmem_rng r;
	int codec;

	kvmem_rng_seed(&r, 5);
	for (codec = 0; codec < KVMEM_CODEC_NR; codec++)
		scrub_case(dv, codec, &r);
	scrub_checks_case(dv, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 16, &r);
	scrub_checks_case(dv, KVMEM_FMT_INT8, KVMEM_CODEC_GOLAY24, 0, 9, &r);
	scrub_checks_case(dv, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 1, 5, &r);
	scrub_checks_case(dv, KVMEM_FMT_FP16, KVMEM_CODEC_SECDED72, 0, 11, &r);
}

START_TEST(test_cuda_scrub_matches_cpu)
{
	on_targets(1, scrub_matches_cpu_on);
}
END_TEST

/* CRC-32C a bit at a time, from the polynomial alone: the reference. */
static uint32_t crc_ref(const uint8_t *p, size_t n)
{
	uint32_t c = 0xffffffffu;
	int k;

	while (n--) {
		c ^= *p++;
		for (k = 0; k < 8; k++)
			c = c & 1 ? c >> 1 ^ 0x82f63b78u : c >> 1;
	}
	return ~c;
}

/*
 * kvmem__cuda_crc32c() on ranges of every shape: empty, shorter than a
 * CTA's threads, not a multiple of them, a page and more, at odd offsets,
 * many at once (a CTA each), on a stream of its own.
 */
static void crc_on(struct dev *dv)
{
	static const uint64_t shapes[][2] = {
		{ 0, 0 },    { 0, 1 },		{ 5, 9 },     { 3, 127 },
		{ 1, 128 },  { 7, 129 },	{ 0, 4095 },  { 13, 4096 },
		{ 2, 8191 }, { 11, 65536 + 3 }, { 69999, 1 }, { 0, 70000 },
	};
	enum { N = 12 + 40, BYTES = 70000 };
	uint8_t *buf = kvmem_check_xmalloc(BYTES);
	uint64_t rg[2 * N], a, ra, oa;
	uint32_t out[N];
	struct kvmem_rng r;
	void *stream = NULL;
	size_t i;

	kvmem_rng_seed(&r, 11);
	for (i = 0; i < BYTES; i++)
		buf[i] = (uint8_t)kvmem_rng_next(&r);
	memcpy(buf + 5, "123456789", 9);
	ck_assert_uint_eq(crc_ref(buf + 5, 9), 0xe3069283u);
	for (i = 0; i < N; i++) {
		if (i < 12) {
			rg[2 * i] = shapes[i][0];
			rg[2 * i + 1] = shapes[i][1];
			continue;
		}
		rg[2 * i] = kvmem_rng_next(&r) % BYTES;
		rg[2 * i + 1] = kvmem_rng_next(&r) % (BYTES - rg[2 * i] + 1);
	}
	a = dev_put(dv, buf, BYTES);
	ra = dev_put(dv, rg, sizeof(rg));
	oa = dev_junk(dv, sizeof(out));
	ck_assert_msg(!kvmem__cuda_stream_create(dv->cu, &stream), "%s",
		      kvmem_cuda_error());
	ck_assert_int_eq(kvmem__cuda_crc32c(dv->cu, a, ra, N, oa, stream), 0);
	ck_assert_msg(!kvmem_cuda_sync(dv->cu, stream), "%s",
		      kvmem_cuda_error());
	dev_get(dv, out, oa, sizeof(out));
	for (i = 0; i < N; i++)
		ck_assert_msg(out[i] == crc_ref(buf + rg[2 * i], rg[2 * i + 1]),
			      "range %zu (%llu bytes at %llu): %08x", i,
			      (unsigned long long)rg[2 * i + 1],
			      (unsigned long long)rg[2 * i], out[i]);
	ck_assert_uint_eq(out[2], 0xe3069283u);
	ck_assert_int_eq(kvmem__cuda_crc32c(dv->cu, a, 0, 1, 0, NULL), -EINVAL);
	ck_assert_int_eq(kvmem__cuda_crc32c(dv->cu, a, 0, 0, 0, NULL), 0);
	kvmem__cuda_stream_destroy(dv->cu, stream);
	free(buf);
}

START_TEST(test_cuda_crc32c)
{
	on_targets(1, crc_on);
	ck_assert_int_eq(fake->streams, 0);
}
END_TEST

/* ---- pages read where the cache keeps them ---------------------------- */

static int on_fake(const struct kvmem_cuda *cu)
{
	return !strcmp(kvmem_cuda_name(cu), "kvmem fake GPU (CPU threads)");
}

/*
 * Attention on the device over @s where its cache keeps it, through the
 * table kvmem_cuda_seq_pages() gives, against kvmem_attend(): the same
 * output and counts. Return: the words the device corrected.
 */
static uint64_t attend_in_place(struct dev *dv, struct kvmem_seq *s,
				const struct kvmem_geometry *g, uint32_t G,
				struct kvmem_rng *r)
{
	const uint32_t D = g->head_dim, nh = g->kv_heads * G;
	const size_t nqd = (size_t)nh * D;
	struct kvmem_attend_opts o = { .n_heads = nh,
				       .erasure = KVMEM_ERASE_INTERPOLATE,
				       .importance_alpha = 1.0f };
	struct kvmem_cuda_page table[64];
	struct kvmem_cuda_attend_args a;
	struct kvmem_attend_stats st, gst;
	float *q = kvmem_check_xmalloc(nqd * 4);
	float *exp = kvmem_check_xmalloc(nqd * 4);
	float *got = kvmem_check_xmalloc(nqd * 4);
	const char *gpu = kvmem_cuda_name(dv->cu);
	uint32_t sp[2];
	size_t wsb, i;
	int n;

	n = kvmem_cuda_seq_pages(dv->cu, s, 0, table, 64);
	ck_assert_msg(n > 0 && n <= 64, "%d: %s", n, kvmem_cuda_error());
	fill_query(r, q, nqd, D);
	sp[0] = 0;
	sp[1] = (uint32_t)n;
	memset(&a, 0, sizeof(a));
	a.pages = dev_put(dv, table, (size_t)n * sizeof(*table));
	a.seq_pages = dev_put(dv, sp, sizeof(sp));
	a.q = dev_put(dv, q, nqd * 4);
	a.out = dev_junk(dv, nqd * 4);
	memset(&gst, 0, sizeof(gst));
	a.stats = dev_put(dv, &gst, sizeof(gst));
	a.batch = 1;
	a.n_heads = nh;
	a.nq = 1;
	a.erasure = KVMEM_ERASE_INTERPOLATE;
	a.total_pages = (uint32_t)n;
	a.max_pages = (uint32_t)n;
	ck_assert_msg(!kvmem_cuda_attend_workspace(dv->cu, g, &a, &wsb), "%s",
		      kvmem_cuda_error());
	a.workspace = dev_junk(dv, wsb);
	EXPECT_EQ(kvmem_cuda_attend(dv->cu, g, &a, NULL), 0, "%s",
		  kvmem_cuda_error());
	dev_get(dv, got, a.out, nqd * 4);
	dev_get(dv, &gst, a.stats, sizeof(gst));

	ck_assert_int_eq(kvmem_attend(s, 0, q, exp, &o, &st), 0);
	for (i = 0; i < nqd; i++)
		EXPECT_NEAR(got[i], exp[i], 1e-4 + 1e-4 * fabsf(exp[i]),
			    "%s: out[%zu] of pages read in place", gpu, i);
	EXPECT_EQ(gst.words_clean, st.words_clean, "%s", gpu);
	EXPECT_EQ(gst.words_corrected, st.words_corrected, "%s", gpu);
	EXPECT_EQ(gst.words_uncorrectable, st.words_uncorrectable, "%s", gpu);
	EXPECT_EQ(gst.values_erased, st.values_erased, "%s", gpu);
	dev_done(dv);
	free(q);
	free(exp);
	free(got);
	return gst.words_corrected;
}

static void append_random(struct kvmem_seq *s, const struct kvmem_geometry *g,
			  uint32_t len, struct kvmem_rng *r)
{
	const size_t n = (size_t)len * g->kv_heads * g->head_dim;
	float *k = kvmem_check_xmalloc(n * 4);
	float *v = kvmem_check_xmalloc(n * 4);

	fill(r, k, n);
	fill(r, v, n);
	ck_assert_int_eq(kvmem_seq_append(s, 0, k, v, len), 0);
	free(k);
	free(v);
}

static void register_embedded_on(struct dev *dv)
{
	struct kvmem_cuda_page table[4];
	struct kvmem_geometry g;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	struct kvmem_rng r;

	kvmem_rng_seed(&r, 1701);
	geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 2, 64);
	ck_assert_int_eq(kvmem_open_embedded(&g, 8 << 20, &c), 0);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	append_random(s, &g, 53, &r);
	EXPECT_EQ(kvmem_cuda_seq_pages(dv->cu, s, 0, table, 4), -ENXIO, "%s",
		  "a table of a cache the GPU does not map");
	EXPECT(strstr(kvmem_cuda_error(), "not registered"), "%s",
	       kvmem_cuda_error());
	ck_assert_msg(!kvmem_cuda_register(dv->cu, c), "%s",
		      kvmem_cuda_error());
	EXPECT_EQ(kvmem_cuda_register(dv->cu, c), -EBUSY, "%s",
		  "registered twice");
	if (on_fake(dv->cu)) {
		struct kvmem_cache_stats cs;

		kvmem_cache_stats(c, &cs);
		EXPECT_EQ(fake->registered, (long)cs.arena_bytes, "%s",
			  "the arena is what is locked");
	}
	/* 53 tokens: 4 sink, 3 sealed pages of 16 and a hot tail of 1;
	 * @cap 4 takes 4 of the 5, and the count says so. */
	EXPECT_EQ(kvmem_cuda_seq_pages(dv->cu, s, 0, table, 4), 5, "%s",
		  kvmem_cuda_error());
	EXPECT_EQ(kvmem_cuda_seq_pages(dv->cu, s, g.layers, table, 4), -EINVAL,
		  "%s", "a layer past the geometry");
	EXPECT_EQ(attend_in_place(dv, s, &g, 2, &r), 0, "%s", "clean pages");
	/* Damage written after the table was taken reaches the kernel: it
	 * reads the pages where they are, not a copy. */
	damage(s, &g);
	EXPECT(attend_in_place(dv, s, &g, 2, &r) > 0, "%s",
	       "the device did not see the damage");
	/* Pages appended after registering are as good. */
	append_random(s, &g, 40, &r);
	attend_in_place(dv, s, &g, 1, &r);
	/* An archived page is in a layout the kernels do not read: the
	 * table is refused, not handed out to be misread. */
	EXPECT(kvmem_seq_archive(s, UINT32_MAX, KVMEM_FMT_INT2,
				 KVMEM_CODEC_GOLAY24) > 0,
	       "%s", "archived");
	EXPECT_EQ(kvmem_cuda_seq_pages(dv->cu, s, 0, table, 4), -EOPNOTSUPP,
		  "%s", "a layer with archived pages");
	EXPECT(strstr(kvmem_cuda_error(), "archived in int2 + golay24"), "%s",
	       kvmem_cuda_error());
	kvmem_cuda_unregister(c);
	kvmem_cuda_unregister(c);
	EXPECT_EQ(kvmem_cuda_seq_pages(dv->cu, s, 0, table, 4), -ENXIO, "%s",
		  "a table after unregistering");
	if (on_fake(dv->cu))
		EXPECT_EQ(fake->registered, 0, "%s", "unregistered");
	/* kvmem_close() lets go of what is still registered. */
	ck_assert_msg(!kvmem_cuda_register(dv->cu, c), "%s",
		      kvmem_cuda_error());
	kvmem_close(c);
	if (on_fake(dv->cu))
		EXPECT_EQ(fake->registered, 0, "%s",
			  "kvmem_close() of a registered cache");
}

START_TEST(test_cuda_register_embedded)
{
	on_targets(4, register_embedded_on);
}
END_TEST

/* The driver refuses, or the handle goes first: the cache lives on. */
START_TEST(test_cuda_register_refused)
{
	struct kvmem_cuda *cu = fake_open(4, FAKE_SMEM);
	struct kvmem_cuda_page table[8];
	struct kvmem_geometry g;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	struct kvmem_rng r;
	struct dev dv;

	kvmem_rng_seed(&r, 1702);
	geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_GOLAY24, 0, 2, 64);
	ck_assert_int_eq(kvmem_open_embedded(&g, 8 << 20, &c), 0);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	append_random(s, &g, 30, &r);
	EXPECT_EQ(kvmem_cuda_register(NULL, c), -EINVAL, "%s", "no handle");
	EXPECT_EQ(kvmem_cuda_register(cu, NULL), -EINVAL, "%s", "no cache");
	fake->no_lock = 1;
	EXPECT_EQ(kvmem_cuda_register(cu, c), -ENOMEM, "%s",
		  kvmem_cuda_error());
	EXPECT(strstr(kvmem_cuda_error(), "cannot lock"), "%s",
	       kvmem_cuda_error());
	EXPECT_EQ(kvmem_cuda_seq_pages(cu, s, 0, table, 8), -ENXIO, "%s",
		  "a refused registration leaves none");
	EXPECT_EQ(fake->registered, 0, "%s", "bytes left locked");
	fake->no_lock = 0;
	ck_assert_msg(!kvmem_cuda_register(cu, c), "%s", kvmem_cuda_error());
	dv = (struct dev){ .cu = cu };
	attend_in_place(&dv, s, &g, 1, &r);
	/* The handle closes first: it unregisters, and the cache stays
	 * whole on the CPU. */
	kvmem_cuda_close(cu);
	expect_released(fake, "kvmem_cuda_close() with a cache registered");
	{
		const size_t nqd = (size_t)2 * 64;
		struct kvmem_attend_opts o = { .n_heads = 2 };
		float q[2 * 64], out[2 * 64];

		fill_query(&r, q, nqd, 64);
		EXPECT_EQ(kvmem_attend(s, 0, q, out, &o, NULL), 0, "%s",
			  "the cache after its GPU went");
	}
	kvmem_close(c);
}
END_TEST

/*
 * A session's pages, in this process's mapping of the shared arena, read
 * in place by the device: what libkvmem wrote there is what the kernel
 * sees. The patrol is off so that nothing changes the pages between the
 * two attentions.
 */
static void register_session_on(struct dev *dv)
{
	struct kvmem_geometry g;
	struct kvmemd_proc p;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	struct kvmem_rng r;

	kvmem_rng_seed(&r, 1703);
	geometry(&g, KVMEM_FMT_INT8, KVMEM_CODEC_SECDED72, 0, 2, 64);
	kvmemd_start(&p, "[scrub]\nrate = 0\n", NULL);
	ck_assert_msg(!kvmem_connect(p.sock, &g, NULL, &c), "%s",
		      kvmem_connect_error());
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	append_random(s, &g, 45, &r);
	ck_assert_msg(!kvmem_cuda_register(dv->cu, c), "%s",
		      kvmem_cuda_error());
	EXPECT_EQ(attend_in_place(dv, s, &g, 2, &r), 0, "%s", "clean pages");
	damage(s, &g);
	EXPECT(attend_in_place(dv, s, &g, 2, &r) > 0, "%s",
	       "the device did not see the damage");
	kvmem_close(c);
	if (on_fake(dv->cu))
		EXPECT_EQ(fake->registered, 0, "%s",
			  "kvmem_close() of a registered session");
	EXPECT_EQ(kvmemd_stop(&p), 0, "%s", "kvmemd exit status");
	kvmemd_cleanup(&p);
}

START_TEST(test_cuda_register_session)
{
	on_targets(4, register_session_on);
}
END_TEST

/* ---- kvmemd's GPU pool, on the fake driver ---------------------------- */

/* What the daemon loads for libcuda.so.1: the fake, by absolute path. */
static const char *fake_env(void)
{
	static char env[PATH_MAX + 16];
	char path[PATH_MAX];

	ck_assert_msg(realpath(fake_path(), path), "%s: %s", fake_path(),
		      strerror(errno));
	snprintf(env, sizeof(env), "KVMEM_LIBCUDA=%s", path);
	return env;
}

/* The fake's UUID of device @dev ("kvmem fake GPU " and @dev) as
 * nvidia-smi would print it, spelled out byte by byte here. */
static void fake_uuid(int dev, char out[41])
{
	const unsigned char *b = (const unsigned char *)"kvmem fake GPU ";
	char *o = out;
	int i;

	o += sprintf(o, "GPU-");
	for (i = 0; i < 16; i++) {
		o += sprintf(o, "%02x", i < 15 ? b[i] : dev);
		if (i == 3 || i == 5 || i == 7 || i == 9)
			*o++ = '-';
	}
	*o = 0;
}

static int gpu_connect(const struct kvmemd_proc *p, uint32_t mib,
		       struct kvmem_cache **c)
{
	struct kvmem_geometry g = kvmemd_test_geo();
	struct kvmem_connect_opts o = { .quota_bytes = 1 << 20,
					.gpu_mib = mib };

	return kvmem_connect(p->sock, &g, &o, c);
}

static int no_fatbin(void)
{
	if (kvmem__fatbin_size)
		return 0;
	fprintf(stderr, "SKIP: cuda: GPU pool: libkvmem was built without "
			"nvcc, so kvmemd has no kernels to open a GPU with\n");
	return 1;
}

/*
 * A process that attaches with @mib of GPU memory, hangs up at once and
 * keeps the memory's descriptor until told to go (a byte on @go): what a
 * client that keeps its mapping after hanging up looks like to the daemon.
 * Writes a byte to @ready when it holds the descriptor.
 */
static pid_t holder(const struct kvmemd_proc *p, uint32_t mib, int ready,
		    int go)
{
	pid_t pid = fork();
	struct kvmem_hello h;
	struct kvmem_welcome w;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = &w, .iov_len = sizeof(w) };
	struct msghdr m = { .msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = u.buf,
			    .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm;
	char byte = 1;
	int sock;

	ck_assert_int_ge(pid, 0);
	if (pid)
		return pid;
	h = kvmemd_hello(1 << 20);
	h.gpu_mib = mib;
	sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", p->sock);
	if (sock < 0 || connect(sock, (struct sockaddr *)&sa, sizeof(sa)) ||
	    send(sock, &h, sizeof(h), 0) != sizeof(h) ||
	    recvmsg(sock, &m, 0) != sizeof(w) || w.error || !w.gpu_bytes)
		_exit(1);
	cm = CMSG_FIRSTHDR(&m);
	if (!cm || cm->cmsg_len != CMSG_LEN(4 * sizeof(int)))
		_exit(2);
	close(sock);
	if (write(ready, &byte, 1) != 1 || read(go, &byte, 1) < 0)
		_exit(3);
	_exit(0);
}

/* kvmemctl status says @a and @b on its gpu pool line. */
static void ctl_status_has(const struct kvmemd_proc *p, const char *a,
			   const char *b)
{
	struct kvmem_run r;
	const char *line;

	KVMEM_RUN(&r, "kvmemctl", "", "-a", p->admin, "status");
	EXPECT_EQ(r.status, 0, "%s", r.err);
	line = strstr(r.out, "gpu pool");
	EXPECT(line && strstr(line, a) && strstr(line, b), "%s", r.out);
	kvmem_check_run_free(&r);
}

/* The daemon's status, once it has @sessions attached. */
static void status_at(const struct kvmemd_proc *p, unsigned long long sessions,
		      char *out, size_t len)
{
	int i;

	for (i = 0; i < 200; i++) {
		kvmemd_admin_ok(p, out, len, "status");
		if (kvmemd_json_u64(out, "sessions") == sessions)
			return;
		usleep(10 * 1000);
	}
	ck_abort_msg("kvmemd keeps %llu sessions, not %llu: %s",
		     kvmemd_json_u64(out, "sessions"), sessions, out);
}

#define MIB (1ull << 20)

/*
 * kvmemd with a GPU pool on the fake driver: the memory a session is given
 * is rounded to the driver's 2 MiB, zeroed, mapped in the client by
 * kvmem_cuda_register(), and charged until the process that attached
 * exits, whether or not it hung up; quotas and the pool refuse what they
 * cannot hold, and clients of ABI 3 are served as before.
 */
START_TEST(test_cuda_gpu_pool)
{
	const char *env[] = { fake_env(), NULL };
	struct kvmem_cache *a, *b, *c;
	struct kvmem_cuda *cu, *other;
	char st[4096], uuid[41];
	uint8_t buf[4096], zero[4096];
	int ready[2], go[2], wst;
	struct kvmemd_proc p;
	struct kvmemd_raw raw;
	struct kvmem_hello h;
	uint64_t addr;
	size_t bytes;
	pid_t pid;

	if (no_fatbin())
		return;
	kvmemd_start(&p,
		     "[scrub]\nrate = 0\n[pool]\ngpu_bytes = 64M\n"
		     "gpu_session_max_bytes = 32M\n",
		     env);
	fake_uuid(0, uuid);
	kvmemd_admin_ok(&p, st, sizeof(st), "status");
	EXPECT(strstr(st, uuid), "%s not in %s", uuid, st);
	EXPECT_EQ(kvmemd_json_after(st, "\"gpu_pool\"", "bytes"), 64 * MIB,
		  "%s", st);
	EXPECT_EQ(kvmemd_json_after(st, "\"gpu_pool\"", "used_bytes"), 0, "%s",
		  st);

	ctl_status_has(&p, uuid, "0 B of 64.0 MiB used");

	/* 5 MiB asked, 6 given: whole units of the driver's 2 MiB. */
	ck_assert_msg(!gpu_connect(&p, 5, &a), "%s", kvmem_connect_error());
	EXPECT_EQ(kvmem_cuda_session_memory(a, &addr, &bytes), -ENOENT, "%s",
		  "memory before the cache is registered");
	cu = fake_open(4, FAKE_SMEM);
	ck_assert_msg(!kvmem_cuda_register(cu, a), "%s", kvmem_cuda_error());
	ck_assert_msg(!kvmem_cuda_session_memory(a, &addr, &bytes), "%s",
		      kvmem_cuda_error());
	EXPECT_EQ(bytes, 6 * MIB, "%s", "rounded to the granularity");
	memset(zero, 0, sizeof(zero));
	memset(buf, 0x5a, sizeof(buf));
	ck_assert(!kvmem_cuda_copy(cu, (uintptr_t)buf,
				   addr + bytes - sizeof(buf), sizeof(buf),
				   NULL));
	EXPECT_MEM(buf, zero, sizeof(buf), "%s", "new GPU memory is zeroed");
	memset(buf, 0xc3, sizeof(buf));
	ck_assert(
		!kvmem_cuda_copy(cu, addr, (uintptr_t)buf, sizeof(buf), NULL));
	memset(zero, 0, sizeof(zero));
	ck_assert(
		!kvmem_cuda_copy(cu, (uintptr_t)zero, addr, sizeof(buf), NULL));
	EXPECT_MEM(zero, buf, sizeof(buf), "%s", "GPU memory keeps writes");
	kvmemd_admin_ok(&p, st, sizeof(st), "status");
	EXPECT_EQ(kvmemd_json_after(st, "\"gpu_pool\"", "used_bytes"), 6 * MIB,
		  "%s", st);

	/* Over the session's limit; then the pool: 6 + 32 + 32 > 64. */
	EXPECT_EQ(gpu_connect(&p, 33, &b), -EDQUOT, "%s",
		  kvmem_connect_error());
	EXPECT(strstr(kvmem_connect_error(), "pool.gpu_session_max_bytes"),
	       "%s", kvmem_connect_error());
	ck_assert_msg(!gpu_connect(&p, 32, &b), "%s", kvmem_connect_error());
	EXPECT_EQ(gpu_connect(&p, 32, &c), -ENOSPC, "%s",
		  kvmem_connect_error());
	EXPECT(strstr(kvmem_connect_error(), "GPU pool has 27262976 of"), "%s",
	       kvmem_connect_error());
	/* A handle on another GPU cannot map b's memory. */
	fake->devices = 2;
	ck_assert_msg(
		!kvmem__cuda_open_image(1, fake_path(), fake_image, &other),
		"%s", kvmem_cuda_error());
	EXPECT_EQ(kvmem_cuda_register(other, b), -ENODEV, "%s",
		  kvmem_cuda_error());
	EXPECT(strstr(kvmem_cuda_error(), uuid), "%s", kvmem_cuda_error());
	EXPECT_EQ(fake->registered, (long)(1 << 20), "%s",
		  "only a's arena is registered");
	kvmem_cuda_close(other);
	kvmem_close(b);

	/* The pool's GPU named by UUID, and another. */
	h = kvmemd_hello(1 << 20);
	h.gpu_mib = 2;
	h.gpu_uuid[15] = 1;
	EXPECT_EQ(kvmemd_raw_attach(&raw, &p, &h, sizeof(h)), -ENODEV, "%s",
		  raw.w.message);
	kvmemd_raw_detach(&raw);

	/* A client of ABI 3 gets the welcome of ABI 3 and is served. */
	h = kvmemd_hello(1 << 20);
	h.abi_version = 3;
	ck_assert_int_eq(kvmemd_raw_attach(&raw, &p, &h, sizeof(h)), 0);
	EXPECT_EQ(raw.w.size, KVMEM_WELCOME_V3_SIZE, "%s", "ABI 3 welcome");
	{
		struct kvmem_sqe e = { .opcode = KVMEM_OP_NOP, .user_data = 7 };
		struct kvmem_cqe r = kvmemd_raw_op(&raw, &e);

		EXPECT_EQ(r.res, 0, "%s", "a NOP of an ABI 3 client");
	}
	kvmemd_raw_detach(&raw);

	/*
	 * A process that hung up but keeps the descriptor: its 8 MiB stay
	 * charged, as held, until it exits. b's 32 MiB are held too: this
	 * process, which attached b, lives.
	 */
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(go), 0);
	pid = holder(&p, 8, ready[1], go[0]);
	ck_assert_int_eq(read(ready[0], buf, 1), 1);
	status_at(&p, 1, st, sizeof(st));
	EXPECT_EQ(kvmemd_json_after(st, "\"gpu_pool\"", "used_bytes"),
		  (6 + 32 + 8) * MIB, "%s", st);
	EXPECT_EQ(kvmemd_json_after(st, "\"gpu_pool\"", "held_bytes"),
		  (32 + 8) * MIB, "%s", st);
	EXPECT_EQ(gpu_connect(&p, 20, &c), -ENOSPC, "%s",
		  "memory held by a live process is not free");
	ck_assert_int_eq(write(go[1], buf, 1), 1);
	ck_assert_int_eq(waitpid(pid, &wst, 0), pid);
	EXPECT(WIFEXITED(wst) && !WEXITSTATUS(wst), "holder status %d", wst);
	kvmemd_admin_ok(&p, st, sizeof(st), "status");
	EXPECT_EQ(kvmemd_json_after(st, "\"gpu_pool\"", "used_bytes"),
		  (6 + 32) * MIB, "%s", st);
	EXPECT_EQ(kvmemd_json_after(st, "\"gpu_pool\"", "held_bytes"), 32 * MIB,
		  "%s", st);
	ck_assert_msg(!gpu_connect(&p, 20, &c), "%s", kvmem_connect_error());
	kvmem_close(c);
	close(ready[0]);
	close(ready[1]);
	close(go[0]);
	close(go[1]);

	kvmem_close(a);
	EXPECT_EQ(fake->allocated, 0, "%s", "a's mapping let go");
	EXPECT_EQ(fake->registered, 0, "%s", "a's arena let go");
	kvmem_cuda_close(cu);
	EXPECT_EQ(kvmemd_stop(&p), 0, "%s", "kvmemd exit status");
	EXPECT_EQ(kvmemd_log_lines(&p, "GPU pool: 64 MiB of kvmem fake GPU"), 1,
		  "%s", p.log);
	kvmemd_cleanup(&p);
}
END_TEST

/* The GPU pool's counter @key, from kvmemd's stats. */
static uint64_t gpu_stat(const struct kvmemd_proc *p, const char *key)
{
	char st[4096];

	kvmemd_admin_ok(p, st, sizeof(st), "stats");
	return kvmemd_json_after(st, "\"pool\":\"gpu\"", key);
}

/*
 * The environment of a kvmemd on @dv's GPU: on the fake driver, the fake
 * (by absolute path) with its kernels on the CPU executor; on a GPU, none
 * (the real driver).
 */
static const char *const *daemon_env(const struct dev *dv)
{
	static const char *env[3];

	if (!on_fake(dv->cu))
		return NULL;
	env[0] = fake_env();
	env[1] = kvmem_check_simt_env();
	return env;
}

/*
 * KVMEM_CONNECT_GPU_TIER on the fake driver: kvmem_cuda_seq_pages() moves
 * the sequence's sealed pages into the session's GPU memory and gives
 * their addresses there, the device's attention over them matches
 * kvmem_attend() (which has them brought back first), damage made in host
 * memory goes with them and is corrected on the device, and appending
 * leaves them where they are. The GPU memory is not the caller's then.
 */
static void gpu_tier_session_on(struct dev *dv)
{
	struct kvmem_connect_opts o = { .quota_bytes = 4u << 20,
					.gpu_mib = 2,
					.flags = KVMEM_CONNECT_GPU_TIER };
	struct kvmem_cuda_page table[8];
	struct kvmem_page_layout l[2];
	struct kvmem_geometry g;
	struct kvmemd_proc p;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	struct kvmem_rng r;
	uint64_t addr, promoted;
	size_t bytes;
	int n;

	if (!on_fake(dv->cu) || no_fatbin())
		return;
	kvmem_rng_seed(&r, 1709);
	geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 2, 64);
	/* kvmemd checks the pages it moves with the kernels */
	kvmemd_start(&p, "[scrub]\nrate = 0\n[pool]\ngpu_bytes = 64M\n",
		     daemon_env(dv));
	o.gpu_mib = 0;
	EXPECT_EQ(kvmem_connect(p.sock, &g, &o, &c), -EINVAL, "%s",
		  "the tier without GPU memory");
	o.gpu_mib = 2;
	ck_assert_msg(!kvmem_connect(p.sock, &g, &o, &c), "%s",
		      kvmem_connect_error());
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	append_random(s, &g, 45, &r);
	ck_assert_msg(!kvmem_cuda_register(dv->cu, c), "%s",
		      kvmem_cuda_error());
	EXPECT_EQ(kvmem_cuda_session_memory(c, &addr, &bytes), -EBUSY, "%s",
		  kvmem_cuda_error());

	/* 45 tokens: the sink page and two sealed pages of 16, the tail
	 * open; the sealed ones go to the GPU. */
	n = kvmem_cuda_seq_pages(dv->cu, s, 0, table, 8);
	ck_assert_int_eq(n, 4);
	promoted = gpu_stat(&p, "promoted_pages");
	EXPECT_EQ(promoted, 3, "%s", "the sealed pages, sink included");
	/* Side by side in the tier's first slots, in the order they moved:
	 * the FP16 sink page, then the sealed ones. */
	kvmem_page_layout(&g, 1, &l[1]);
	kvmem_page_layout(&g, 0, &l[0]);
	EXPECT_EQ(table[1].addr - table[0].addr, l[1].size, "%s", "sink");
	EXPECT_EQ(table[2].addr - table[1].addr, l[0].size, "%s", "sealed");
	EXPECT_EQ(attend_in_place(dv, s, &g, 2, &r), 0, "%s", "clean pages");
	EXPECT_EQ(gpu_stat(&p, "demoted_pages"), promoted, "%s",
		  "kvmem_attend() had them back in host memory");
	damage(s, &g);
	EXPECT(attend_in_place(dv, s, &g, 2, &r) > 0, "%s",
	       "the device did not see the damage");
	/* Appending, acquired for the GPU: nothing comes back. */
	n = kvmem_cuda_seq_pages(dv->cu, s, 0, table, 8);
	ck_assert_int_eq(n, 4);
	promoted = gpu_stat(&p, "demoted_pages");
	append_random(s, &g, 20, &r);
	EXPECT_EQ(gpu_stat(&p, "demoted_pages"), promoted, "%s",
		  "an append moved pages back");
	n = kvmem_cuda_seq_pages(dv->cu, s, 0, table, 8);
	ck_assert_int_eq(n, 5);
	kvmem_close(c);
	EXPECT_EQ(kvmemd_stop(&p), 0, "%s", "kvmemd exit status");
	kvmemd_cleanup(&p);
}

START_TEST(test_cuda_gpu_tier_session)
{
	on_targets(4, gpu_tier_session_on);
}
END_TEST

/*
 * Attention that ran on the GPU orders the GPU tier: the masses of pages
 * there, given to kvmem_seq_attended(), reach the session's heat array at
 * their GPU slots, and below the low watermark the least attended pages
 * leave first. Sequence A, released first but attended, stays; B, never
 * attended, makes the room. (Were the heat of those slots not written, A
 * would leave first, the longest released.) B's masses given after its
 * release change its importance only: its pages might have moved. (Were
 * its heat written, the two would tie, and A leave first.) On the fake
 * driver and, where there is one, on GPU 0 (the daemon then on the real
 * driver).
 */
static void gpu_tier_heat_on(struct dev *dv)
{
	struct kvmem_connect_opts o = { .quota_bytes = 8u << 20,
					.gpu_mib = 2,
					.flags = KVMEM_CONNECT_GPU_TIER };
	struct kvmem_cuda_page table[128];
	struct kvmem_page_layout l;
	struct kvmem_geometry g;
	struct kvmemd_proc p;
	struct kvmem_cache *c;
	struct kvmem_seq *s[2];
	struct kvmem_rng r;
	/* At most 60% used, in the tier's whole units: 2 MiB of 512. */
	const uint64_t most = (512 - 512 * 40 / 100) * KVMEM_SLOT_UNIT;
	uint64_t sealed = 0, promoted;
	uint32_t slots, n, i;
	float mass[128];
	char st[4096];
	int np[2], k;

	if (no_fatbin())
		return;
	kvmem_rng_seed(&r, 2417);
	geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 2, 64);
	g.sink_tokens = 0;
	kvmem_page_layout(&g, 0, &l);
	slots = (2u << 20) / (uint32_t)((l.size + KVMEM_SLOT_UNIT - 1) /
					KVMEM_SLOT_UNIT * KVMEM_SLOT_UNIT);
	n = slots * 45 / 100;
	ck_assert_uint_lt(n, 128);
	kvmemd_start(&p,
		     "[scrub]\nrate = 0\n[tier]\nlow_watermark = 0\n"
		     "high_watermark = 1\nstale_tokens = 0\n[pool]\n"
		     "gpu_bytes = 64M\n",
		     daemon_env(dv));
	ck_assert_msg(!kvmem_connect(p.sock, &g, &o, &c), "%s",
		      kvmem_connect_error());
	ck_assert_msg(!kvmem_cuda_register(dv->cu, c), "%s",
		      kvmem_cuda_error());
	/* n sealed pages each, and an open tail, which stays in host
	 * memory */
	for (k = 0; k < 2; k++) {
		ck_assert_int_eq(kvmem_seq_create(c, &s[k]), 0);
		append_random(s[k], &g, n * 16 + 1, &r);
		np[k] = kvmem_cuda_seq_pages(dv->cu, s[k], 0, table, 128);
		ck_assert_int_eq(np[k], (int)n + 1);
	}
	EXPECT_EQ(gpu_stat(&p, "promoted_pages"), 2 * n, "%s",
		  "the sealed pages went to the GPU");
	for (i = 0; i < n + 1; i++)
		mass[i] = 1.0f;
	ck_assert_int_eq(
		kvmem_seq_attended(s[0], 0, mass, n + 1, g.kv_heads, 1, 1.0f),
		0);
	ck_assert_int_eq(kvmem_seq_release(s[0]), 0);
	usleep(20 * 1000);
	ck_assert_int_eq(kvmem_seq_release(s[1]), 0);
	ck_assert_int_eq(
		kvmem_seq_attended(s[1], 0, mass, n + 1, g.kv_heads, 1, 1.0f),
		0);
	kvmemd_admin_ok(&p, st, sizeof(st),
			"policy set tier.high_watermark=40");
	kvmemd_admin_ok(&p, st, sizeof(st), "policy set tier.low_watermark=20");
	for (i = 0; i < 500; i++) {
		sealed = gpu_stat(&p, "sealed_bytes");
		if (sealed <= most)
			break;
		usleep(10 * 1000);
	}
	ck_assert_uint_le(sealed, most);
	EXPECT(gpu_stat(&p, "demoted_pages") > 0, "%s", "nothing left");
	promoted = gpu_stat(&p, "promoted_pages");
	ck_assert_int_eq(kvmem_cuda_seq_pages(dv->cu, s[0], 0, table, 128),
			 (int)n + 1);
	EXPECT_EQ(gpu_stat(&p, "promoted_pages"), promoted, "%s",
		  "pages of the attended sequence had left the GPU");
	for (k = 0; k < 2; k++)
		kvmem_seq_free(s[k]);
	kvmem_close(c);
	EXPECT_EQ(kvmemd_stop(&p), 0, "%s", "kvmemd exit status");
	kvmemd_cleanup(&p);
}

START_TEST(test_cuda_gpu_tier_heat)
{
	on_targets(4, gpu_tier_heat_on);
}
END_TEST

/*
 * kvmemd's patrol over the pages of a GPU tier, on the fake driver and,
 * where there is one, on GPU 0 (the daemon then on the real driver): one
 * flip in every word of the sequence's pages there (kvmemctl inject's
 * exact channel, made in copies of them), corrected where the pages are
 * by the scrub kernel, each counted as injected, no page copied to be
 * checked; read back, the values are those read before.
 */
static void gpu_tier_scrub_on(struct dev *dv)
{
	struct kvmem_connect_opts o = { .quota_bytes = 4u << 20,
					.gpu_mib = 2,
					.flags = KVMEM_CONNECT_GPU_TIER };
	const size_t n = (size_t)45 * 2 * 64;
	float *k0 = kvmem_check_xmalloc(n * 4),
	      *v0 = kvmem_check_xmalloc(n * 4);
	float *k1 = kvmem_check_xmalloc(n * 4),
	      *v1 = kvmem_check_xmalloc(n * 4);
	struct kvmem_cuda_page table[8];
	struct kvmem_geometry g;
	struct kvmemd_proc p;
	struct kvmem_cache *c;
	struct kvmem_seq *s;
	struct kvmem_rng r;
	char st[8192];
	uint64_t words;
	uint32_t sid;

	if (no_fatbin())
		goto out;
	kvmem_rng_seed(&r, 1733);
	geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 2, 64);
	kvmemd_start(&p,
		     "[scrub]\nrate = 0\nallow_inject = yes\n[pool]\n"
		     "gpu_bytes = 64M\n",
		     daemon_env(dv));
	ck_assert_msg(!kvmem_connect(p.sock, &g, &o, &c), "%s",
		      kvmem_connect_error());
	sid = kvmem_session_id(c);
	ck_assert_int_eq(kvmem_seq_create(c, &s), 0);
	append_random(s, &g, 45, &r);
	ck_assert_int_eq(kvmem_seq_read(s, 0, 0, 45, KVMEM_ERASE_INTERPOLATE,
					k0, v0, NULL),
			 0);
	ck_assert_msg(!kvmem_cuda_register(dv->cu, c), "%s",
		      kvmem_cuda_error());
	/* The sink page and two sealed pages go there; the tail stays. */
	ck_assert_int_eq(kvmem_cuda_seq_pages(dv->cu, s, 0, table, 8), 4);
	EXPECT_EQ(gpu_stat(&p, "promoted_pages"), 3, "%s", "pages moved");
	kvmemd_admin_ok(&p, st, sizeof(st),
			"inject session %u ber 0 seed 2 channel exact:1", sid);
	EXPECT_EQ(kvmemd_json_u64(st, "pages"), 3, "%s", st);
	words = kvmemd_json_u64(st, "words");
	ck_assert_uint_gt(words, 3);
	kvmemd_admin_ok(&p, st, sizeof(st), "scrub now session %u", sid);
	EXPECT_EQ(kvmemd_json_u64(st, "ce"), words, "%s", st);
	EXPECT_EQ(kvmemd_json_u64(st, "ue"), 0, "%s", st);
	kvmemd_admin_ok(&p, st, sizeof(st), "status");
	EXPECT_EQ(kvmemd_json_after(st, "\"gpu_pool\"", "checked_in_place"), 3,
		  "%s", st);
	EXPECT_EQ(kvmemd_json_after(st, "\"gpu_pool\"", "checked_in_copies"), 0,
		  "%s", st);
	ck_assert_int_eq(kvmem_seq_read(s, 0, 0, 45, KVMEM_ERASE_INTERPOLATE,
					k1, v1, NULL),
			 0);
	EXPECT_MEM(k1, k0, n * 4, "%s", "K after the scrub on the GPU");
	EXPECT_MEM(v1, v0, n * 4, "%s", "V after the scrub on the GPU");
	kvmem_close(c);
	EXPECT_EQ(kvmemd_stop(&p), 0, "%s", "kvmemd exit status");
	kvmemd_cleanup(&p);
out:
	free(k0);
	free(v0);
	free(k1);
	free(v1);
}

START_TEST(test_cuda_gpu_tier_scrub)
{
	on_targets(4, gpu_tier_scrub_on);
}
END_TEST

/*
 * Hostile: attach with GPU memory and hang up, again and again. Each ended
 * session's memory stays held while the process lives, and a user holds
 * no more than its sessions could have at once (daemon.max_sessions_per_uid
 * of pool.gpu_session_max_bytes), however much of the pool is free.
 */
START_TEST(test_cuda_gpu_pool_per_user)
{
	const char *env[] = { fake_env(), NULL };
	struct kvmem_cache *c;
	struct kvmemd_proc p;
	char st[4096];
	int i;

	if (no_fatbin())
		return;
	kvmemd_start(&p,
		     "[daemon]\nmax_sessions_per_uid = 2\n[scrub]\nrate = 0\n"
		     "[pool]\ngpu_bytes = 64M\ngpu_session_max_bytes = 8M\n",
		     env);
	for (i = 0; i < 2; i++) {
		ck_assert_msg(!gpu_connect(&p, 8, &c), "%s",
			      kvmem_connect_error());
		kvmem_close(c);
	}
	status_at(&p, 0, st, sizeof(st));
	EXPECT_EQ(kvmemd_json_after(st, "\"gpu_pool\"", "held_bytes"), 16 * MIB,
		  "%s", st);
	EXPECT_EQ(gpu_connect(&p, 2, &c), -EDQUOT, "%s", kvmem_connect_error());
	EXPECT(strstr(kvmem_connect_error(),
		      "has 16777216 bytes of GPU memory"),
	       "%s", kvmem_connect_error());
	/* Host sessions are not held back by it. */
	ck_assert_msg(!gpu_connect(&p, 0, &c), "%s", kvmem_connect_error());
	kvmem_close(c);
	EXPECT_EQ(kvmemd_stop(&p), 0, "%s", "kvmemd exit status");
	kvmemd_cleanup(&p);
}
END_TEST

/* The GPU pool's used bytes, once they are @want (or the test fails). */
static void gpu_used_at(const struct kvmemd_proc *p, unsigned long long want,
			char *st, size_t len)
{
	int i;

	for (i = 0; i < 500; i++) {
		kvmemd_admin_ok(p, st, len, "status");
		if (kvmemd_json_after(st, "\"gpu_pool\"", "used_bytes") == want)
			return;
		usleep(10 * 1000);
	}
	ck_abort_msg("the GPU pool keeps %llu bytes used, not %llu: %s",
		     kvmemd_json_after(st, "\"gpu_pool\"", "used_bytes"), want,
		     st);
}

/* kvmemd with a GPU pool of 32 MiB that one session may take whole. */
static void start_pool32(struct kvmemd_proc *p, const char *const *env)
{
	kvmemd_start(p,
		     "[scrub]\nrate = 0\n[pool]\ngpu_bytes = 32M\n"
		     "gpu_session_max_bytes = 32M\n",
		     env);
}

/*
 * Hostile: a client killed by SIGKILL while attached, its GPU memory
 * mapped (kvmem_cuda_register()); then 16 clients that send a hello for
 * GPU memory and die without reading the welcome, so that the daemon's
 * descriptors go to a socket nobody reads. Each session ends, its memory
 * goes back to the pool once its process is gone, nothing is charged
 * twice, and a client that asks for the whole pool gets it.
 */
START_TEST(test_cuda_gpu_pool_killed)
{
	const char *env[] = { fake_env(), NULL };
	struct kvmem_cache *c;
	struct kvmemd_proc p;
	char st[4096], byte;
	int ready[2], wst, i;
	pid_t pid;

	if (no_fatbin())
		return;
	start_pool32(&p, env);
	fake_setup(4, FAKE_SMEM);
	ck_assert_int_eq(pipe(ready), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid) {
		struct kvmem_cuda *cu = NULL;
		uint64_t addr;
		size_t bytes;

		if (gpu_connect(&p, 16, &c) ||
		    kvmem__cuda_open_image(0, fake_path(), fake_image, &cu) ||
		    kvmem_cuda_register(cu, c) ||
		    kvmem_cuda_session_memory(c, &addr, &bytes) ||
		    bytes != 16 * MIB || write(ready[1], "r", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	ck_assert_int_eq(read(ready[0], &byte, 1), 1);
	status_at(&p, 1, st, sizeof(st));
	EXPECT_EQ(kvmemd_json_after(st, "\"gpu_pool\"", "used_bytes"), 16 * MIB,
		  "%s", st);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(pid, &wst, 0), pid);
	EXPECT(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL, "status %d", wst);
	status_at(&p, 0, st, sizeof(st));
	gpu_used_at(&p, 0, st, sizeof(st));
	EXPECT_EQ(kvmemd_json_after(st, "\"gpu_pool\"", "held_bytes"), 0, "%s",
		  st);

	for (i = 0; i < 16; i++) {
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (!pid) {
			struct kvmem_hello h = kvmemd_hello(1 << 20);
			struct sockaddr_un sa = { .sun_family = AF_UNIX };
			int sock = socket(AF_UNIX, SOCK_SEQPACKET, 0);

			h.gpu_mib = 2 + 2 * (i % 8);
			snprintf(sa.sun_path, sizeof(sa.sun_path), "%s",
				 p.sock);
			if (sock < 0 ||
			    connect(sock, (struct sockaddr *)&sa, sizeof(sa)) ||
			    send(sock, &h, sizeof(h), 0) != sizeof(h))
				_exit(1);
			_exit(0);
		}
		ck_assert_int_eq(waitpid(pid, &wst, 0), pid);
		EXPECT(WIFEXITED(wst) && !WEXITSTATUS(wst), "client %d: %d", i,
		       wst);
	}
	status_at(&p, 0, st, sizeof(st));
	gpu_used_at(&p, 0, st, sizeof(st));
	ck_assert_msg(!gpu_connect(&p, 32, &c), "%s", kvmem_connect_error());
	kvmemd_admin_ok(&p, st, sizeof(st), "status");
	EXPECT_EQ(kvmemd_json_after(st, "\"gpu_pool\"", "used_bytes"), 32 * MIB,
		  "%s", st);
	kvmem_close(c);
	close(ready[0]);
	close(ready[1]);
	EXPECT_EQ(kvmemd_stop(&p), 0, "%s", "kvmemd exit status");
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * The end of a GPU pool test with @mib of pool: once every session is gone
 * nothing is used or held, a client gets the whole pool, and kvmemd stops
 * cleanly.
 */
static void expect_pool_freed(struct kvmemd_proc *p, uint32_t mib)
{
	struct kvmem_cache *c;
	char st[4096];

	status_at(p, 0, st, sizeof(st));
	gpu_used_at(p, 0, st, sizeof(st));
	EXPECT_EQ(kvmemd_json_after(st, "\"gpu_pool\"", "held_bytes"), 0, "%s",
		  st);
	ck_assert_msg(!gpu_connect(p, mib, &c), "%s", kvmem_connect_error());
	kvmem_close(c);
	EXPECT_EQ(kvmemd_stop(p), 0, "%s", "kvmemd exit status");
	kvmemd_cleanup(p);
}

/*
 * Hostile to itself: a client with room for its socket and one descriptor
 * more asks for GPU memory. The welcome's four descriptors do not fit, and
 * the client fails with -EMFILE and a sentence that says so (not -EPROTO);
 * kvmemd gives the memory back once the process is gone and serves the
 * next client the whole pool.
 */
START_TEST(test_cuda_gpu_pool_out_of_fds)
{
	const char *env[] = { fake_env(), NULL };
	struct kvmem_cache *c;
	struct kvmemd_proc p;
	int wst;
	pid_t pid;

	if (no_fatbin())
		return;
	start_pool32(&p, env);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid) {
		struct rlimit rl;
		int fd, prev = -1, last = -1;

		/* Fill the table, then free two places. */
		if (getrlimit(RLIMIT_NOFILE, &rl))
			_exit(1);
		rl.rlim_cur = rl.rlim_max < 64 ? rl.rlim_max : 64;
		if (setrlimit(RLIMIT_NOFILE, &rl))
			_exit(1);
		while ((fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0) {
			prev = last;
			last = fd;
		}
		if (errno != EMFILE || prev < 0)
			_exit(2);
		close(prev);
		close(last);
		if (gpu_connect(&p, 16, &c) != -EMFILE)
			_exit(3);
		if (!strstr(kvmem_connect_error(), "out of file descriptors") ||
		    !strstr(kvmem_connect_error(), "GPU memory held"))
			_exit(4);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &wst, 0), pid);
	EXPECT(WIFEXITED(wst) && !WEXITSTATUS(wst),
	       "client status %d (2: no EMFILE, 3: not -EMFILE, 4: sentence)",
	       wst);
	expect_pool_freed(&p, 32);
}
END_TEST

/*
 * A kernel without pidfd_open(2) (before Linux 5.3; here a seccomp filter
 * on kvmemd): the daemon cannot watch a process whose GPU session ended,
 * says so once in its log, and counts the memory free at once rather than
 * held for ever; it goes on serving GPU sessions.
 */
START_TEST(test_cuda_gpu_pool_no_pidfd)
{
	char deny[64];
	const char *env[] = { fake_env(), deny, NULL };
	struct kvmem_cache *c;
	struct kvmemd_proc p;
	char st[4096];

	if (no_fatbin())
		return;
	snprintf(deny, sizeof(deny), KVMEMD_DENY_SYSCALL "%ld",
		 (long)SYS_pidfd_open);
	start_pool32(&p, env);
	ck_assert_msg(!gpu_connect(&p, 16, &c), "%s", kvmem_connect_error());
	kvmem_close(c);
	status_at(&p, 0, st, sizeof(st));
	EXPECT_EQ(kvmemd_log_lines(&p, "cannot watch pid"), 1, "%s", p.log);
	expect_pool_freed(&p, 32);
}
END_TEST

/*
 * pool.gpu_bytes as a percentage: of the memory the driver says the GPU
 * has, down to whole allocations (5% of 1 GiB is 53687091 bytes, 25 of
 * the fake's 2 MiB: 50 MiB), and a session gets no more than that pool
 * even when pool.gpu_session_max_bytes says more. A percentage smaller than
 * one allocation is no pool, and says so.
 */
START_TEST(test_cuda_gpu_pool_percent)
{
	const char *env[] = { fake_env(), "FAKECUDA_TOTAL_MEM=1073741824",
			      NULL };
	const char *tiny[] = { fake_env(), "FAKECUDA_TOTAL_MEM=104857600",
			       NULL };
	struct kvmem_cache *c;
	struct kvmemd_proc p;
	char st[4096];

	if (no_fatbin())
		return;
	kvmemd_start(&p,
		     "[scrub]\nrate = 0\n[pool]\ngpu_bytes = 5%\n"
		     "gpu_session_max_bytes = 64M\n",
		     env);
	kvmemd_admin_ok(&p, st, sizeof(st), "status");
	EXPECT_EQ(kvmemd_json_after(st, "\"gpu_pool\"", "bytes"), 50 * MIB,
		  "%s", st);
	ctl_status_has(&p, "GPU", "0 B of 50.0 MiB used");
	EXPECT_EQ(gpu_connect(&p, 51, &c), -EDQUOT, "%s",
		  kvmem_connect_error());
	ck_assert_msg(!gpu_connect(&p, 50, &c), "%s", kvmem_connect_error());
	kvmem_close(c);
	EXPECT_EQ(kvmemd_stop(&p), 0, "%s", "kvmemd exit status");
	EXPECT_EQ(kvmemd_log_lines(&p, "GPU pool: 5% of the GPU's 1024 MiB, "
				       "in 2 MiB allocations"),
		  1, "%s", p.log);
	EXPECT_EQ(kvmemd_log_lines(&p, "GPU pool: 50 MiB of kvmem fake GPU"), 1,
		  "%s", p.log);
	EXPECT_EQ(kvmemd_log_lines(&p, "pool.gpu_session_max_bytes (64 MiB) "
				       "is more than the GPU pool"),
		  1, "%s", p.log);
	kvmemd_cleanup(&p);

	/* 1% of 100 MiB: less than one 2 MiB allocation. */
	kvmemd_start(&p, "[scrub]\nrate = 0\n[pool]\ngpu_bytes = 1%\n", tiny);
	kvmemd_admin_ok(&p, st, sizeof(st), "status");
	EXPECT(strstr(st, "\"device\":null") &&
		       strstr(st, "less than one allocation"),
	       "%s", st);
	EXPECT_EQ(gpu_connect(&p, 2, &c), -EOPNOTSUPP, "%s",
		  kvmem_connect_error());
	EXPECT_EQ(kvmemd_stop(&p), 0, "%s", "kvmemd exit status");
	kvmemd_cleanup(&p);
}
END_TEST

/*
 * Without a GPU pool kvmemd says why in one line and serves host sessions;
 * a client that asks for GPU memory hears why.
 */
START_TEST(test_cuda_gpu_pool_absent)
{
	static const struct {
		const char *env, *conf, *why;
	} cases[] = {
		{ "KVMEM_LIBCUDA=/nonexistent/libcuda.so.1", "",
		  "no NVIDIA driver" },
		{ "FAKECUDA_NO_VMM=1", "", "no virtual memory management" },
		{ "FAKECUDA_DEVICES=0", "", "no CUDA GPU" },
		{ NULL,
		  "gpu_device = GPU-00000000-0000-0000-0000-000000000000\n",
		  "no GPU GPU-00000000-0000-0000-0000-000000000000 among the "
		  "1 here" },
	};
	size_t i;

	if (no_fatbin())
		return;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		/* putenv() in order: a later KVMEM_LIBCUDA wins. */
		const char *env[] = { fake_env(), cases[i].env, NULL };
		char conf[256], st[4096];
		struct kvmem_cache *c;
		struct kvmemd_proc p;

		snprintf(conf, sizeof(conf),
			 "[scrub]\nrate = 0\n[pool]\ngpu_bytes = 64M\n%s",
			 cases[i].conf);
		kvmemd_start(&p, conf, env);
		kvmemd_admin_ok(&p, st, sizeof(st), "status");
		EXPECT(strstr(st, "\"device\":null") &&
			       strstr(st, cases[i].why),
		       "case %zu: %s", i, st);
		ctl_status_has(&p, "none: ", cases[i].why);
		EXPECT_EQ(gpu_connect(&p, 4, &c), -EOPNOTSUPP, "case %zu: %s",
			  i, kvmem_connect_error());
		EXPECT(strstr(kvmem_connect_error(), cases[i].why),
		       "case %zu: %s", i, kvmem_connect_error());
		ck_assert_msg(!gpu_connect(&p, 0, &c), "case %zu: %s", i,
			      kvmem_connect_error());
		kvmem_close(c);
		EXPECT_EQ(kvmemd_stop(&p), 0, "case %zu", i);
		EXPECT_EQ(kvmemd_log_lines(&p, "no GPU pool, serving host"), 1,
			  "case %zu: %s", i, p.log);
		kvmemd_cleanup(&p);
	}
}
END_TEST

/* ---- kvmem-bench attend --gpu ----------------------------------------- */

/*
 * kvmem-bench attend with @argv on the fake driver, its stdout in @buf.
 * Return: its exit status, or -1 when this libkvmem has no kernels (the
 * test then skips, and says so).
 */
static int bench_json(char **argv, int argc, char *buf, size_t len)
{
	char path[] = "/tmp/kvmem-bench-gpu-XXXXXX";
	int fd = mkstemp(path), saved, ret;
	ssize_t n;

	ck_assert_int_ge(fd, 0);
	unlink(path);
	fake_setup(2, FAKE_SMEM);
	setenv("KVMEM_LIBCUDA", fake_path(), 1);
	fflush(stdout);
	saved = dup(1);
	dup2(fd, 1);
	optind = 0;
	ret = bench_attend.run(argc, argv);
	fflush(stdout);
	dup2(saved, 1);
	close(saved);
	unsetenv("KVMEM_LIBCUDA");
	n = pread(fd, buf, len - 1, 0);
	close(fd);
	if (ret == 2 && strstr(kvmem_cuda_error(), "without nvcc")) {
		fprintf(stderr, "SKIP: cuda bench: %s\n", kvmem_cuda_error());
		return -1;
	}
	ck_assert_int_gt(n, 0);
	buf[n] = '\0';
	return ret;
}

/* The number after "@key": in the bench's JSON; fails the test without. */
static double bench_field(const char *json, const char *key)
{
	char pat[64];
	const char *p;
	double v;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = strstr(json, pat);
	ck_assert_msg(p && sscanf(p + strlen(pat), "%lf", &v) == 1,
		      "no %s in %s", key, json);
	return v;
}

/* ---- kvmem-bench tier -------------------------------------------------- */

/*
 * kvmem-bench tier on the fake driver, its daemon on it too: the bytes
 * kvmemd moved are those of the pages it wrote (the sealed pages and each
 * layer's sink page, both ways), computed here from the layouts; the
 * rates and ratios are there (the fake's copies are memmove(), so their
 * values say nothing), and every page the scrubber checked on the GPU
 * was checked where it is. Without a driver it says why and exits 2.
 */
START_TEST(test_cuda_bench_tier)
{
	struct kvmem_geometry g = { .layers = 8,
				    .kv_heads = 8,
				    .head_dim = 128 };
	static const char *const keys[] = {
		"to_gpu_gbps",	  "to_host_gbps",    "copy_h2d_gbps",
		"copy_d2h_gbps",  "page_h2d_gbps",   "page_d2h_gbps",
		"to_gpu_vs_copy", "to_host_vs_copy", "reacquire_ms",
		"scrub_gpu_gbps", "scrub_host_gbps", "scrub_gpu_vs_host",
	};
	struct kvmem_page_layout l, lh;
	struct kvmem_run r;
	uint64_t seqs;
	size_t i;

	if (no_fatbin())
		return;
	kvmem_geometry_default(&g);
	g.tokens_per_page = 32;
	kvmem_page_layout(&g, 0, &l);
	kvmem_page_layout(&g, 1, &lh);
	/* 8 sealed pages a layer a sequence, as many as 4 MiB needs */
	seqs = ((4u << 20) + 64 * l.size - 1) / (64 * l.size);
	setenv("KVMEM_LIBCUDA", fake_path(), 1);
	putenv((char *)kvmem_check_simt_env());
	KVMEM_RUN(&r, "kvmem-bench", "", "tier", "--bytes", "4M", "--json");
	unsetenv("KVMEM_LIBCUDA");
	unsetenv("FAKECUDA_SIMT");
	ck_assert_msg(r.status == 0, "%s", r.err);
	EXPECT_EQ((uint64_t)bench_field(r.out, "bytes"),
		  2 * seqs * 8 * (8 * l.size + lh.size), "%s", r.out);
	EXPECT_EQ((uint64_t)bench_field(r.out, "pages"), seqs * 8 * 9, "%s",
		  r.out);
	EXPECT_EQ((uint64_t)bench_field(r.out, "sequences"), seqs, "%s", r.out);
	/* Every page the scrubber checked on the GPU was checked there. */
	EXPECT_EQ((uint64_t)bench_field(r.out, "checked_in_place"),
		  seqs * 8 * 9, "%s", r.out);
	EXPECT_EQ((uint64_t)bench_field(r.out, "checked_in_copies"), 0, "%s",
		  r.out);
	for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		EXPECT(bench_field(r.out, keys[i]) > 0, "%s in %s", keys[i],
		       r.out);
	kvmem_check_run_free(&r);

	setenv("KVMEM_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
	KVMEM_RUN(&r, "kvmem-bench", "", "tier", "--bytes", "4M");
	unsetenv("KVMEM_LIBCUDA");
	EXPECT_EQ(r.status, 2, "%s", r.err);
	EXPECT(strstr(r.err, "no NVIDIA driver"), "%s", r.err);
	kvmem_check_run_free(&r);
	KVMEM_RUN(&r, "kvmem-bench", "", "tier", "--bytes", "12");
	EXPECT_EQ(r.status, 2, "%s", r.err);
	kvmem_check_run_free(&r);
}
END_TEST

/*
 * The benchmark's whole path on the fake driver: options, device encode,
 * both page layouts, the rounds, the copy, and the agreement check between
 * kvmem and FP16 attention; its JSON must describe what it measured.
 *
 * The bench stores the batch 16 times over (its layers) and every launch
 * runs on the CPU executor, so the shape is the smallest that has each
 * part: a batch (of 2), GQA (4 heads on 2 KV heads), a sealed page and a
 * partial one (20 tokens in pages of 16). The kernels' shapes are
 * test_cuda_attend_*'s.
 */
START_TEST(test_cuda_bench_attend_gpu)
{
	char *argv[] = { "attend",
			 "--gpu",
			 "--ctx",
			 "30",
			 "--heads",
			 "4",
			 "--kv-heads",
			 "2",
			 "--dim",
			 "64",
			 "--page-tokens",
			 "16",
			 "--reps",
			 "1",
			 "--batch",
			 "2",
			 "--json",
			 "--sealed",
			 NULL };
	const int argc = sizeof(argv) / sizeof(argv[0]) - 1;
	char buf[2048];
	struct kvmem_page_layout l, lh;
	struct kvmem_geometry g;
	double diff, kbytes, fbytes, layers, batch, ctx;
	int ret, sealed;

	geometry(&g, KVMEM_FMT_INT4, KVMEM_CODEC_H84, 0, 2, 64);
	g.sink_tokens = 0;
	kvmem_page_layout(&g, 0, &l);
	kvmem_page_layout(&g, 1, &lh);
	/*
	 * The real shape: 4 sink tokens in an FP16 page, a sealed page of
	 * 16, a tail of 8 (--ctx 30 rounded down to 28); then --sealed: two
	 * sealed pages of 16 and 14. Two sequences; K and V of 2 heads of
	 * 64 in FP16.
	 */
	for (sealed = 0; sealed < 2; sealed++) {
		ret = bench_json(argv, argc - !sealed, buf, sizeof(buf));
		if (ret < 0)
			return;
		EXPECT_EQ(ret, 0, "%s", buf);
		layers = bench_field(buf, "layers");
		batch = bench_field(buf, "batch");
		ctx = bench_field(buf, "ctx");
		kbytes = bench_field(buf, "kvmem_bytes");
		fbytes = bench_field(buf, "fp16_bytes");
		diff = bench_field(buf, "max_diff_fp16");
		EXPECT_EQ(batch, 2, "%s", buf);
		EXPECT_EQ(ctx, sealed ? 30 : 28, "%s", buf);
		EXPECT_EQ(kbytes,
			  sealed ? 2 * 2.0 * l.size
				 : 2 * (l.size + 2.0 * lh.size),
			  "%s", buf);
		EXPECT_EQ(fbytes, 2 * ctx * 2 * 64 * 2 * 2, "%s", buf);
		EXPECT_EQ(layers, 16, "%s", "tiny layers are stored 16 times");
		EXPECT(strstr(buf, sealed ? "\"shape\": \"sealed\""
					  : "\"shape\": \"real\""),
		       "%s", buf);
		/* int4 against FP16: quantization error, not a wrong
		 * answer */
		EXPECT(diff >= 0 && diff < 0.05, "%s", buf);
	}
}
END_TEST

/*
 * --host: the same pages encoded on the CPU into a registered cache and
 * read where they are give the device pages' output to the bit (the
 * real shape: 4 sink tokens in an FP16 page, a sealed page of 16 and a
 * tail of 8, --ctx 32 rounded down to 28, as the cache makes them), and
 * the copy is timed.
 */
START_TEST(test_cuda_bench_attend_host)
{
	char *argv[] = { "attend", "--gpu",   "--host", "--ctx",
			 "32",	   "--heads", "4",	"--kv-heads",
			 "2",	   "--dim",   "64",	"--page-tokens",
			 "16",	   "--reps",  "1",	"--batch",
			 "2",	   "--json",  NULL };
	char buf[2048];
	int ret;

	ret = bench_json(argv, sizeof(argv) / sizeof(argv[0]) - 1, buf,
			 sizeof(buf));
	if (ret < 0)
		return;
	EXPECT_EQ(ret, 0, "%s", buf);
	/* EXPECT_EQ compares integers: a difference below 1 would pass. */
	EXPECT(bench_field(buf, "max_diff_host") == 0.0, "%s", buf);
	EXPECT(bench_field(buf, "host_us") > 0 &&
		       bench_field(buf, "h2d_gbps") > 0,
	       "%s", buf);
	EXPECT_EQ(fake->registered, 0, "%s", "the cache is unregistered");
}
END_TEST

/* A runner or bench stand-in for gpu-check.sh: a script that waits
 * @secs seconds, then prints @text. */
static void gpu_check_stub(const char *dir, const char *name, const char *text,
			   unsigned int secs)
{
	char path[512], body[512];

	snprintf(path, sizeof(path), "%s/%.5s", dir, name);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(body, sizeof(body), "#!/bin/sh\nsleep %u\necho '%s'\n", secs,
		 text);
	kvmem_check_write_file(path, body);
	ck_assert_int_eq(chmod(path, 0755), 0);
}

/* A build directory for gpu-check.sh, made in @dir: its library, and
 * stand-ins for the runner (printing @suite after @secs seconds) and the
 * bench (printing @bench). */
static void gpu_check_build(char *dir, size_t len, const char *suite,
			    unsigned int secs, const char *bench)
{
	char path[512];

	kvmem_check_tmpdir_make(dir, len, "gpu-check");
	snprintf(path, sizeof(path), "%s/libkvmem.a", dir);
	kvmem_check_write_file(path, "");
	gpu_check_stub(dir, "tests/kvmem-check", suite, secs);
	gpu_check_stub(dir, "tools/kvmem-bench", bench, 0);
}

/* Run gpu-check.sh from the source tree on @dir's build, its output in
 * @dir/out and @dir/log, with @env before it and @args after. Return: what
 * system() returns. */
static int gpu_check_run(const char *dir, const char *env, const char *args)
{
	char cmd[2048];

	snprintf(cmd, sizeof(cmd),
		 "cd %s && %s KVMEM_BUILD=%s sh scripts/gpu-check.sh %s "
		 "%s/out >%s/log 2>&1",
		 kvmem_check_srcdir(), env, dir, args, dir, dir);
	return system(cmd);
}

/* gpu_check_build()'s directory and what the run left there, removed. */
static void gpu_check_done(const char *dir)
{
	char cmd[1024], path[512];

	snprintf(cmd, sizeof(cmd), "rm -rf %s/out %s/log %s/tests %s/tools",
		 dir, dir, dir, dir);
	ck_assert_int_eq(system(cmd), 0);
	snprintf(path, sizeof(path), "%s/libkvmem.a", dir);
	unlink(path);
	kvmem_check_tmpdir_remove(dir);
}

/*
 * gpu-check.sh -q, with stand-ins for the runner (its suite says it found
 * no GPU) and the bench (one JSON object), and no torch with a GPU: it
 * fails (no GPU), says why, skips PyTorch's case and what it lacks, and
 * still writes gpu-run.json with the bench's case, each step's exit
 * status and the commit of the tree it ran from.
 */
START_TEST(test_cuda_gpu_check_report)
{
	char dir[256], path[512], cmd[2048], head[64] = "", *text;
	const struct json *b, *st, *c;
	struct json *v = NULL;
	size_t len;
	double us;
	FILE *p;
	int rc;

	gpu_check_build(dir, sizeof(dir), "SKIP: cuda: on the CPU only", 0,
			"{\"kvmem_us\": 123.5}");
	rc = gpu_check_run(dir, "", "-q");
	EXPECT(WIFEXITED(rc) && WEXITSTATUS(rc) == 1, "status %#x", rc);
	snprintf(path, sizeof(path), "%s/out/summary", dir);
	text = kvmem_check_read_file(path, NULL);
	EXPECT(strstr(text, "cuda suite: no GPU, the fake driver only"), "%s",
	       text);
	EXPECT(strstr(text, "ptx cost skipped"), "%s", text);
	free(text);
	snprintf(path, sizeof(path), "%s/out/gpu-run.json", dir);
	text = kvmem_check_read_file(path, &len);
	ck_assert_int_eq(json_parse(text, len, NULL, &v, NULL), 0);
	free(text);
	b = json_get(json_get(json_get(v, "bench"), "h84-32k"), "kvmem_us");
	ck_assert_msg(b && !json_num(b, &us) && us == 123.5, "bench case");
	st = json_get(v, "steps");
	ck_assert(st && st->type == JSON_ARRAY && st->u.arr.n > 2);
	c = json_get(&st->u.arr.v[0], "step");
	ck_assert(c && c->type == JSON_STRING &&
		  !strcmp(c->u.str.s, "cuda suite"));
	b = json_get(&st->u.arr.v[0], "rc");
	ck_assert_msg(b && !json_num(b, &us) && us == 0, "cuda suite rc");
	snprintf(cmd, sizeof(cmd), "cd %s && git rev-parse HEAD 2>/dev/null",
		 kvmem_check_srcdir());
	p = popen(cmd, "r");
	if (p && fgets(head, sizeof(head), p) && strlen(head) > 1) {
		head[strcspn(head, "\n")] = 0;
		c = json_get(v, "commit");
		ck_assert_msg(c && c->type == JSON_STRING &&
				      !strcmp(c->u.str.s, head),
			      "commit, not %s", head);
	} else {
		fprintf(stderr, "SKIP: cuda: gpu-run.json's commit: the "
				"source tree is not a git checkout\n");
	}
	if (p)
		pclose(p);
	json_free(v);
	gpu_check_done(dir);
}
END_TEST

/*
 * gpu-check.sh ends within GPU_CHECK_SECONDS: with 21, a suite that takes
 * 2 s leaves under 20, so no other step starts, and the summary says so
 * of each; gpu-run.json is still written, and holds no case an earlier
 * run left in the output directory. A budget that is not whole seconds,
 * has a leading zero (octal to sh) or is under 20 is refused before
 * anything runs.
 */
START_TEST(test_cuda_gpu_check_deadline)
{
	static const char *const bad[] = { "2x", "021", "19" };
	char dir[256], path[512], env[64], *text;
	struct timespec t0, t1;
	size_t i;
	int rc;

	gpu_check_build(dir, sizeof(dir), "cuda: 1 checks", 2,
			"{\"kvmem_us\": 1}");
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(env, sizeof(env), "GPU_CHECK_SECONDS='%s'", bad[i]);
		rc = gpu_check_run(dir, env, "");
		EXPECT(WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "%s: status %#x",
		       env, rc);
		snprintf(path, sizeof(path), "%s/log", dir);
		text = kvmem_check_read_file(path, NULL);
		EXPECT(strstr(text, "GPU_CHECK_SECONDS: "), "%s: %s", env,
		       text);
		free(text);
	}

	snprintf(path, sizeof(path), "%s/out", dir);
	ck_assert_int_eq(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/out/bench-h84-32k.json", dir);
	kvmem_check_write_file(path, "{\"kvmem_us\": 999}");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = gpu_check_run(dir, "GPU_CHECK_SECONDS=21", "");
	clock_gettime(CLOCK_MONOTONIC, &t1);
	EXPECT(WIFEXITED(rc), "status %#x", rc);
	EXPECT(t1.tv_sec - t0.tv_sec < 21, "took %ld s",
	       (long)(t1.tv_sec - t0.tv_sec));
	snprintf(path, sizeof(path), "%s/out/summary", dir);
	text = kvmem_check_read_file(path, NULL);
	EXPECT(strncmp(text, "cuda suite rc=0 ", 16) == 0, "%s", text);
	EXPECT(strstr(text, "bench h84-32k skipped: out of time "
			    "(GPU_CHECK_SECONDS=21)"),
	       "%s", text);
	EXPECT(strstr(text, "torch 32k skipped: out of time"), "%s", text);
	EXPECT(strstr(text, "bench h84-128k skipped: out of time"), "%s", text);
	EXPECT(!strstr(text, "bench h84-32k rc="), "%s", text);
	free(text);
	snprintf(path, sizeof(path), "%s/out/gpu-run.json", dir);
	text = kvmem_check_read_file(path, NULL);
	EXPECT(!strstr(text, "999"), "an earlier run's case: %s", text);
	free(text);
	gpu_check_done(dir);
}
END_TEST

/*
 * scripts/gpu-check.sh refuses a test runner or bench older than the
 * library of its build (make does not relink the runner, which would then
 * test the kernels it was linked with), before it runs or writes anything.
 */
START_TEST(test_cuda_gpu_check_stale)
{
	static const char *const built[] = { "tools/kvmem-bench",
					     "tests/kvmem-check" };
	struct timespec lib[2] = { { 2000, 0 }, { 2000, 0 } };
	struct timespec old[2] = { { 1000, 0 }, { 1000, 0 } };
	char dir[256], path[512], cmd[2048], *err;
	size_t i;
	int st;

	kvmem_check_tmpdir_make(dir, sizeof(dir), "gpu-check");
	for (i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%.5s", dir, built[i]);
		ck_assert_int_eq(mkdir(path, 0755), 0);
		snprintf(path, sizeof(path), "%s/%s", dir, built[i]);
		kvmem_check_write_file(path, "#!/bin/sh\nexit 0\n");
		ck_assert_int_eq(chmod(path, 0755), 0);
	}
	snprintf(path, sizeof(path), "%s/libkvmem.a", dir);
	kvmem_check_write_file(path, "");
	ck_assert_int_eq(utimensat(AT_FDCWD, path, lib, 0), 0);
	snprintf(path, sizeof(path), "%s/tests/kvmem-check", dir);
	ck_assert_int_eq(utimensat(AT_FDCWD, path, old, 0), 0);
	snprintf(cmd, sizeof(cmd),
		 "KVMEM_BUILD=%s sh %s/scripts/gpu-check.sh %s/out 2>%s/err",
		 dir, kvmem_check_srcdir(), dir, dir);
	st = system(cmd);
	EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 2, "status %#x", st);
	snprintf(path, sizeof(path), "%s/err", dir);
	err = kvmem_check_read_file(path, NULL);
	EXPECT(strstr(err, "tests/kvmem-check is older than") != NULL, "%s",
	       err);
	free(err);
	snprintf(path, sizeof(path), "%s/out", dir);
	EXPECT(access(path, F_OK) != 0, "%s", "it made its output directory");
	for (i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, built[i]);
		unlink(path);
		snprintf(path, sizeof(path), "%s/%.5s", dir, built[i]);
		rmdir(path);
	}
	kvmem_check_tmpdir_remove(dir);
}
END_TEST

KVMEM_SUITE(cuda)
{
	Suite *s = suite_create("cuda");
	TCase *tc = tcase_create("cuda"), *tb;

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_cuda_open_without_driver);
	tcase_add_test(tc, test_cuda_open_stub_library);
	tcase_add_test(tc, test_cuda_open_broken_drivers);
	tcase_add_test(tc, test_cuda_driver_resources);
	tcase_add_test(tc, test_cuda_open_embedded_kernels);
	tcase_add_test(tc, test_cuda_encode_matches_cpu);
	tcase_add_test(tc, test_cuda_encode_refuses_misfit_jobs);
	tcase_add_test(tc, test_cuda_attend_matches_cpu);
	tcase_add_test(tc, test_cuda_attend_shapes);
	tcase_add_test(tc, test_cuda_word_helpers);
	tcase_add_test(tc, test_cuda_attend_fast);
	tcase_add_test(tc, test_cuda_attend_query_scales);
	tcase_add_test(tc, test_cuda_static_smem);
	tcase_add_test(tc, test_cuda_attend_checks);
	tcase_add_test(tc, test_cuda_attend_batch_causal);
	tcase_add_test(tc, test_cuda_attend_f16_baseline);
	tcase_add_test(tc, test_cuda_attend_bad_args);
	tcase_add_test(tc, test_cuda_scrub_matches_cpu);
	tcase_add_test(tc, test_cuda_crc32c);
	tcase_add_test(tc, test_cuda_register_embedded);
	tcase_add_test(tc, test_cuda_register_refused);
	tcase_add_test(tc, test_cuda_register_session);
	tcase_add_test(tc, test_cuda_gpu_pool);
	tcase_add_test(tc, test_cuda_gpu_tier_session);
	tcase_add_test(tc, test_cuda_gpu_tier_heat);
	tcase_add_test(tc, test_cuda_gpu_tier_scrub);
	tcase_add_test(tc, test_cuda_bench_tier);
	tcase_add_test(tc, test_cuda_gpu_pool_per_user);
	tcase_add_test(tc, test_cuda_gpu_pool_killed);
	tcase_add_test(tc, test_cuda_gpu_pool_out_of_fds);
	tcase_add_test(tc, test_cuda_gpu_pool_no_pidfd);
	tcase_add_test(tc, test_cuda_gpu_pool_absent);
	tcase_add_test(tc, test_cuda_gpu_pool_percent);
	tcase_add_test(tc, test_cuda_gpu_check_stale);
	tcase_add_test(tc, test_cuda_gpu_check_report);
	tcase_add_test(tc, test_cuda_gpu_check_deadline);
	suite_add_tcase(s, tc);
	/* Whole benchmark runs, every launch on the CPU: not in make check. */
	tb = tcase_create("bench");
	tcase_set_tags(tb, "slow");
	tcase_set_timeout(tb, 300);
	tcase_add_test(tb, test_cuda_bench_attend_gpu);
	tcase_add_test(tb, test_cuda_bench_attend_host);
	suite_add_tcase(s, tb);
	return s;
}
