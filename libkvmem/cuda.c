/* SPDX-License-Identifier: MIT */
/*
 * cuda.c - the CUDA calls of kvmem/cuda.h: check, size, fill, launch
 *
 * Everything here is independent of the driver: cuda_driver.c runs each
 * launch. Kernel parameter blocks are kernels/kern.h.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cache.h"
#include "cuda_impl.h"
#include "kern.h"
#include "kvmem/kvmem.h"

_Static_assert(sizeof(struct kvmem_cuda_page) == sizeof(struct kvmem_k_page),
	       "block table entry");
_Static_assert(sizeof(struct kvmem_cuda_encode_job) ==
		       sizeof(struct kvmem_k_encode_job),
	       "encode job");
_Static_assert(KVMEM_CUDA_BF16 == KVMEM_K_DTYPE_BF16 &&
		       KVMEM_CUDA_F16 == KVMEM_K_DTYPE_F16,
	       "dtypes");
_Static_assert(KVMEM_PAGE_META_CODEC == KVMEM_CODEC_GOLAY24 &&
		       KVMEM_K_HDR_WORDS == KVMEM_PAGE_HDR_WORDS &&
		       KVMEM_K_HDR_BYTES == KVMEM_PAGE_HDR_BYTES,
	       "the kernels read the header and the scales as golay24");
_Static_assert(KVMEM_K_HDR_HCRC == offsetof(struct kvmem_page_hdr, hcrc) &&
		       KVMEM_K_CHECK_SCALES == KVMEM_PAGE_CHECK_SCALES,
	       "the kernels find the checks as page.h has them");

/* Rows a tile of attention decodes at once, at most: a warp, as its
 * softmax takes a lane a token. */
#define ATTEND_TILE 32

static __thread char cuda_err[256];

int kvmem__cuda_fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cuda_err, sizeof(cuda_err), fmt, ap);
	va_end(ap);
	return err;
}

const char *kvmem_cuda_error(void)
{
	return cuda_err;
}

const char *kvmem_cuda_name(const struct kvmem_cuda *cu)
{
	return cu ? cu->name : "";
}

const uint8_t *kvmem__cuda_uuid(const struct kvmem_cuda *cu)
{
	return cu->uuid;
}

int kvmem_cuda_seq_pages(struct kvmem_cuda *cu, struct kvmem_seq *s,
			 uint32_t layer, struct kvmem_cuda_page *out,
			 size_t cap)
{
	const struct kvmem__layer *l;
	struct kvmem_cache *c;
	uint32_t i;
	int ret;

	if (!cu || !s || (cap && !out) || layer >= s->c->g.layers)
		return kvmem__cuda_fail(-EINVAL, "bad block table arguments");
	c = s->c;
	if (c->cuda != cu)
		return kvmem__cuda_fail(-ENXIO,
					"the cache is not registered with %s "
					"(kvmem_cuda_register())",
					cu->name);
	ret = kvmem__seq_acquire_gpu(s);
	if (ret)
		return kvmem__cuda_fail(ret,
					"the sequence's pages cannot be made "
					"resident: %s",
					kvmem_strerror(ret));
	l = &s->layer[layer];
	for (i = 0; i < l->npages; i++)
		if (l->pages[i]->layout->format !=
			    c->layout[l->pages[i]->hot].format ||
		    l->pages[i]->layout->codec !=
			    c->layout[l->pages[i]->hot].codec)
			return kvmem__cuda_fail(
				-EOPNOTSUPP,
				"page %u of layer %u is archived in %s + %s; "
				"the kernels read the geometry's format only "
				"(connect with KVMEM_CONNECT_NO_ARCHIVE)",
				i, layer,
				kvmem_format_get(l->pages[i]->layout->format)
					->name,
				kvmem_codec_get(l->pages[i]->layout->codec)
					->name);
	for (i = 0; i < l->npages && i < cap; i++) {
		const struct kvmem__page *p = l->pages[i];

		/* In the GPU tier, or in host memory the GPU maps. */
		out[i].addr =
			p->data ? c->cuda_base + (uint64_t)(p->data - c->arena)
				: c->gpu_addr +
					  (uint64_t)(p->slot - c->gpu_slot0) *
						  KVMEM_SLOT_UNIT;
		out[i].token_start = p->token_start;
		out[i].ntokens = p->ntokens;
		out[i].flags = p->hot ? KVMEM_HDR_HOT : 0;
		out[i].resv = 0;
	}
	kvmem__cuda_fail(0, "%s", "");
	return (int)l->npages;
}

static int geom(const struct kvmem_geometry *g, struct kvmem_k_geom *kg)
{
	char why[160];
	int kind;

	if (kvmem_geometry_explain(g, why, sizeof(why)))
		return kvmem__cuda_fail(-EINVAL, "invalid geometry: %s", why);
	if (g->rotation || kvmem_format_levels(g->format))
		return kvmem__cuda_fail(-EOPNOTSUPP,
					"the kernels have no rotation and no "
					"lm formats yet (geometry: %s, "
					"rotation %u)",
					kvmem_format_get(g->format)->name,
					g->rotation);
	memset(kg, 0, sizeof(*kg));
	kg->kv_heads = g->kv_heads;
	kg->head_dim = g->head_dim;
	kg->tokens_per_page = g->tokens_per_page;
	kg->group_size = g->group_size;
	kg->digest = kvmem_geometry_digest(g);
	for (kind = 0; kind < 2; kind++) {
		struct kvmem_k_layout *kl = &kg->l[kind];
		const struct kvmem_codec_info *ci;
		struct kvmem_page_layout l;

		kvmem_page_layout(g, kind, &l);
		ci = kvmem_codec_get(l.codec);
		kl->size = (uint32_t)l.size;
		kl->scales_off = (uint32_t)l.scales_off;
		kl->k_off = (uint32_t)l.k_off;
		kl->v_off = (uint32_t)l.v_off;
		kl->nscales_k = l.nscales_k;
		kl->nscales_v = l.nscales_v;
		kl->scale_words = l.scale_words;
		kl->checks_off = (uint32_t)l.checks_off;
		kl->nchecks = l.nchecks;
		kl->row_words = l.row_words;
		kl->row_bytes = l.row_bytes;
		kl->row_data = l.row_data;
		kl->format = l.format;
		kl->codec = l.codec;
		kl->chan = l.key_scales == KVMEM_SCALES_CHANNEL;
		kl->bits = (uint8_t)kvmem_format_get(l.format)->bits;
		kl->qmax = (uint16_t)kvmem_format_get(l.format)->qmax;
		kl->k = (uint8_t)ci->data_bits;
		kl->wbytes = (uint8_t)ci->word_bytes;
		kl->unit = ci->data_bits % 8 == 0 ? 1 : 2;
	}
	return 0;
}

static int launch(struct kvmem_cuda *cu, int kernel, unsigned int gx,
		  unsigned int gy, unsigned int gz, unsigned int smem,
		  const void *params, void *stream)
{
	cuda_err[0] = '\0';
	return kvmem__cuda_launch(cu, kernel, gx, gy, gz, smem, params, stream);
}

int kvmem_cuda_encode(struct kvmem_cuda *cu, const struct kvmem_geometry *g,
		      uint32_t dtype, uint64_t jobs, uint32_t njobs,
		      void *stream)
{
	struct kvmem_k_encode p;
	int ret;

	if (!cu || dtype > KVMEM_CUDA_BF16 || (njobs && !jobs))
		return kvmem__cuda_fail(-EINVAL, "bad encode arguments");
	ret = geom(g, &p.g);
	if (ret)
		return ret;
	if (!njobs)
		return 0;
	p.jobs = jobs;
	p.njobs = njobs;
	p.dtype = dtype;
	p.smem = KVMEM_K_ALIGN16((p.g.l[0].nscales_k + p.g.l[0].nscales_v) * 2);
	p.resv = 0;
	if (p.smem > cu->smem_max[KVMEM__K_ENCODE])
		return kvmem__cuda_fail(-EOPNOTSUPP,
					"a page's %u scales do not fit in "
					"shared memory",
					p.g.l[0].nscales_k +
						p.g.l[0].nscales_v);
	return launch(cu, KVMEM__K_ENCODE, njobs, 1, 1, p.smem, &p, stream);
}

/*
 * An attention launch: the kernels' parameters (the launch shape is
 * p.splits, p.tile), kvmem_k_attend's shared memory, and q4, the fast
 * kernel that takes the sealed pages first, with q4_smem bytes of shared
 * memory (kvmem_k_attend_q4 for up to 4 query rows, kvmem_k_attend_q4w
 * for up to 8), kvmem_k_attend then only the pages it leaves; 0 when there
 * is none for these pages.
 */
struct attend_shape {
	struct kvmem_k_attend p;
	uint32_t smem;
	int q4;
	uint32_t q4_smem;
	uint64_t ws; /* workspace bytes */
};

static int attend_params(struct kvmem_cuda *cu, const struct kvmem_geometry *g,
			 const struct kvmem_cuda_attend_args *a,
			 struct attend_shape *sh)
{
	struct kvmem_k_attend *p = &sh->p;
	struct kvmem_k_attend_smem o;
	struct kvmem_k_q4_smem o4;
	uint64_t mo, fo, ctas;
	uint32_t qr, warp_fill;
	int ret;

	if (!cu || !a)
		return kvmem__cuda_fail(-EINVAL, "no arguments");
	memset(sh, 0, sizeof(*sh));
	ret = geom(g, &p->g);
	if (ret)
		return ret;
	if (!a->batch || !a->nq || !a->n_heads || a->n_heads % g->kv_heads ||
	    a->erasure > KVMEM_ERASE_KEEP || !a->max_pages ||
	    a->total_pages < a->max_pages || a->nq > 4096 ||
	    a->n_heads > 4096 || !(a->scale >= 0.0f))
		return kvmem__cuda_fail(-EINVAL, "bad attention arguments");
	qr = a->n_heads / g->kv_heads * a->nq;
	p->batch = a->batch;
	p->n_heads = a->n_heads;
	p->nq = a->nq;
	p->erasure = a->erasure;
	p->total_pages = a->total_pages;
	p->scale =
		a->scale != 0.0f ? a->scale : 1.0f / sqrtf((float)g->head_dim);
	for (p->tile = ATTEND_TILE < g->tokens_per_page ? ATTEND_TILE
							: g->tokens_per_page;
	     p->tile; p->tile /= 2) {
		kvmem_k_attend_carve(&p->g, qr, p->tile, &o);
		if (o.size <= cu->smem_max[KVMEM__K_ATTEND])
			break;
	}
	if (!p->tile)
		return kvmem__cuda_fail(-EOPNOTSUPP,
					"%u query rows of dimension %u do not "
					"fit in shared memory",
					qr, g->head_dim);
	sh->smem = o.size;
	if ((uint64_t)g->kv_heads * qr * 8 > cu->smem_max[KVMEM__K_COMBINE])
		return kvmem__cuda_fail(-EOPNOTSUPP, "too many query rows");
	kvmem_k_q4_carve(&p->g, qr, &o4);
	sh->q4 = qr <= 4 ? KVMEM__K_ATTEND_Q4 : KVMEM__K_ATTEND_Q4W;
	if (!kvmem_k_q4_ok(&p->g, qr) || o4.size > cu->smem_max[sh->q4])
		sh->q4 = 0;
	sh->q4_smem = o4.size;
	/* One wave of CTAs of the kernel that attends most pages, as many
	 * as the multiprocessors run at once, never more splits than a
	 * sequence has pages, nor, for the fast kernel, more than one per
	 * KVMEM_K_WARPS pages of the longest sequence, so that a CTA's warps
	 * have a page each where the pages divide evenly: a CTA's fixed
	 * work (its tables, the query rows, its partial result) is then
	 * shared by more pages, and a multiprocessor runs as many warps
	 * that have a page. */
	p->splits = a->splits;
	if (!p->splits) {
		ctas = (uint64_t)a->batch * g->kv_heads;
		p->splits =
			(uint32_t)((kvmem__cuda_occupancy(
					    cu,
					    sh->q4 ? sh->q4 : KVMEM__K_ATTEND,
					    sh->q4 ? o4.size : o.size) *
					    (uint64_t)cu->sms +
				    ctas - 1) /
				   ctas);
		warp_fill = (a->max_pages + KVMEM_K_WARPS - 1) / KVMEM_K_WARPS;
		if (sh->q4 && p->splits > warp_fill)
			p->splits = warp_fill;
	}
	if (p->splits > a->max_pages)
		p->splits = a->max_pages;
	p->parts = sh->q4 ? 2 * p->splits : p->splits;
	sh->ws = kvmem_k_attend_ws(&p->g, a->batch, p->parts, qr,
				   a->total_pages, &mo, &fo);
	return 0;
}

/*
 * The FP16 baseline's launch, for arguments attend_params() passed: its
 * shared memory and its own splits, one wave of its CTAs (or a->splits),
 * so that it is measured at its best rather than at kvmem's choice.
 * Return: 0, or -EOPNOTSUPP (nothing said) where it has no kernel.
 */
static int f16_shape(struct kvmem_cuda *cu, const struct kvmem_geometry *g,
		     const struct kvmem_cuda_attend_args *a, uint32_t *smem,
		     uint32_t *splits)
{
	const uint32_t qr = a->n_heads / g->kv_heads * a->nq;
	const uint64_t ctas = (uint64_t)a->batch * g->kv_heads;

	if (g->head_dim != 64 && g->head_dim != 128 && g->head_dim != 256)
		return -EOPNOTSUPP;
	*smem = kvmem_k_f16_smem(qr, g->head_dim);
	if (*smem > cu->smem_max[KVMEM__K_ATTEND_F16])
		return -EOPNOTSUPP;
	*splits = a->splits;
	if (!*splits)
		*splits = (uint32_t)((kvmem__cuda_occupancy(
					      cu, KVMEM__K_ATTEND_F16, *smem) *
					      (uint64_t)cu->sms +
				      ctas - 1) /
				     ctas);
	if (*splits > a->max_pages)
		*splits = a->max_pages;
	return 0;
}

/* What kvmem_cuda_attend() needs, or the FP16 baseline if it needs more. */
int kvmem_cuda_attend_workspace(struct kvmem_cuda *cu,
				const struct kvmem_geometry *g,
				const struct kvmem_cuda_attend_args *a,
				size_t *bytes)
{
	struct attend_shape sh;
	uint32_t smem, splits;
	uint64_t f16, mo, fo;
	int ret = attend_params(cu, g, a, &sh);

	if (ret)
		return ret;
	if (!f16_shape(cu, g, a, &smem, &splits)) {
		f16 = kvmem_k_attend_ws(&sh.p.g, a->batch, splits,
					a->n_heads / g->kv_heads * a->nq,
					a->total_pages, &mo, &fo);
		sh.ws = f16 > sh.ws ? f16 : sh.ws;
	}
	*bytes = sh.ws;
	return 0;
}

/* Where in the workspace the fast kernel leaves its verdicts on pages. */
static uint64_t flags_off(const struct kvmem_k_attend *p,
			  const struct kvmem_cuda_attend_args *a)
{
	uint64_t mo, fo;

	kvmem_k_attend_ws(&p->g, a->batch, p->parts,
			  p->n_heads / p->g.kv_heads * p->nq, a->total_pages,
			  &mo, &fo);
	return fo;
}

int kvmem__cuda_attend_flags(struct kvmem_cuda *cu,
			     const struct kvmem_geometry *g,
			     const struct kvmem_cuda_attend_args *a,
			     uint64_t *off)
{
	struct attend_shape sh;
	int ret = attend_params(cu, g, a, &sh);

	if (ret)
		return ret;
	*off = flags_off(&sh.p, a);
	return sh.q4 != 0;
}

/*
 * Fill in the addresses, then the attention kernel (the fast kernel
 * sh->q4 first unless it is 0, @kernel with sh->smem on what it leaves)
 * and the combine.
 */
static int attend_run(struct kvmem_cuda *cu, const struct kvmem_geometry *g,
		      const struct kvmem_cuda_attend_args *a,
		      struct attend_shape *sh, int kernel, void *stream)
{
	const uint32_t qr = a->n_heads / g->kv_heads * a->nq;
	struct kvmem_k_attend *p = &sh->p;
	int ret;

	if (!a->pages || !a->seq_pages || !a->q || !a->out || !a->workspace)
		return kvmem__cuda_fail(-EINVAL, "a NULL device address");
	p->pages = a->pages;
	p->seq_pages = a->seq_pages;
	p->q = a->q;
	p->out = a->out;
	p->ws = a->workspace;
	if (sh->q4) {
		p->flags = a->workspace + flags_off(p, a);
		ret = launch(cu, sh->q4, g->kv_heads, a->batch, p->splits,
			     sh->q4_smem, p, stream);
		if (ret)
			return ret;
	}
	ret = launch(cu, kernel, g->kv_heads, a->batch, p->splits, sh->smem, p,
		     stream);
	if (ret)
		return ret;
	return launch(cu, KVMEM__K_COMBINE, a->batch, g->kv_heads, 1,
		      KVMEM_K_ALIGN16(g->kv_heads * qr * 8), p, stream);
}

int kvmem_cuda_attend(struct kvmem_cuda *cu, const struct kvmem_geometry *g,
		      const struct kvmem_cuda_attend_args *a, void *stream)
{
	struct attend_shape sh;
	int ret = attend_params(cu, g, a, &sh);

	if (ret)
		return ret;
	sh.p.mass = a->mass;
	sh.p.stats = a->stats;
	return attend_run(cu, g, a, &sh, KVMEM__K_ATTEND, stream);
}

int kvmem_cuda_attend_f16(struct kvmem_cuda *cu, const struct kvmem_geometry *g,
			  const struct kvmem_cuda_attend_args *a, void *stream)
{
	struct attend_shape sh;
	int ret = attend_params(cu, g, a, &sh);

	if (ret)
		return ret;
	if (g->head_dim != 64 && g->head_dim != 128 && g->head_dim != 256)
		return kvmem__cuda_fail(-EOPNOTSUPP,
					"the FP16 kernel takes head_dim 64, "
					"128 or 256, not %u",
					g->head_dim);
	if (f16_shape(cu, g, a, &sh.smem, &sh.p.splits))
		return kvmem__cuda_fail(-EOPNOTSUPP,
					"%u query rows of dimension %u do not "
					"fit in shared memory",
					a->n_heads / g->kv_heads * a->nq,
					g->head_dim);
	sh.p.parts = sh.p.splits;
	sh.q4 = 0;
	return attend_run(cu, g, a, &sh, KVMEM__K_ATTEND_F16, stream);
}

int kvmem_cuda_scrub(struct kvmem_cuda *cu, const struct kvmem_geometry *g,
		     uint64_t pages, uint32_t npages, uint64_t counts,
		     uint64_t status, void *stream)
{
	return kvmem__cuda_scrub(cu, g, pages, npages, counts, status, 0,
				 stream);
}

int kvmem__cuda_scrub(struct kvmem_cuda *cu, const struct kvmem_geometry *g,
		      uint64_t pages, uint32_t npages, uint64_t counts,
		      uint64_t status, int kinds, void *stream)
{
	struct kvmem_k_scrub p;
	int ret;

	if (!cu || (npages && (!pages || !counts || !status)))
		return kvmem__cuda_fail(-EINVAL, "bad scrub arguments");
	memset(&p, 0, sizeof(p));
	ret = geom(g, &p.g);
	if (ret || !npages)
		return ret;
	p.pages = pages;
	p.counts = counts;
	p.status = status;
	p.npages = npages;
	p.kinds = kinds ? 1 : 0;
	return launch(cu, KVMEM__K_SCRUB, npages, 1, 1, 0, &p, stream);
}

int kvmem__cuda_crc32c(struct kvmem_cuda *cu, uint64_t base, uint64_t ranges,
		       uint32_t n, uint64_t out, void *stream)
{
	struct kvmem_k_crc p;

	if (!cu || (n && (!ranges || !out)) || n > 0x7fffffffu)
		return kvmem__cuda_fail(-EINVAL, "bad CRC arguments");
	if (!n)
		return 0;
	memset(&p, 0, sizeof(p));
	p.base = base;
	p.ranges = ranges;
	p.out = out;
	p.n = n;
	return launch(cu, KVMEM__K_CRC, n, 1, 1, 0, &p, stream);
}

int kvmem_cuda_inject(struct kvmem_cuda *cu, uint64_t buf, uint64_t nwords,
		      const struct kvmem_inject_params *ip, uint64_t flips,
		      uint64_t report, void *stream)
{
	struct kvmem_k_inject p;
	uint64_t blocks;

	if (!cu || !ip || !report || (nwords && !buf) || !ip->word_bytes ||
	    ip->word_bytes > 64 || !ip->word_bits ||
	    ip->word_bits > ip->word_bytes * 8 || !(ip->ber >= 0.0) ||
	    ip->ber > 1.0)
		return kvmem__cuda_fail(-EINVAL, "bad injection arguments");
	if (ip->mode != KVMEM_INJECT_BSC)
		return kvmem__cuda_fail(-EOPNOTSUPP,
					"only BSC injection runs on the GPU");
	blocks = (nwords + KVMEM_K_THREADS - 1) / KVMEM_K_THREADS;
	if (blocks > 0x7fffffffu)
		return kvmem__cuda_fail(-EINVAL, "too many words");
	if (!nwords)
		return 0;
	memset(&p, 0, sizeof(p));
	p.buf = buf;
	p.nwords = nwords;
	p.seed = ip->seed;
	/* P(draw < threshold) = ber, for a uniform 64-bit draw. */
	p.threshold =
		ip->ber >= 1.0 ? UINT64_MAX : (uint64_t)ldexp(ip->ber, 64);
	p.flips = flips;
	p.report = report;
	p.word_bits = ip->word_bits;
	p.word_bytes = ip->word_bytes;
	return launch(cu, KVMEM__K_INJECT, (unsigned int)blocks, 1, 1, 0, &p,
		      stream);
}
