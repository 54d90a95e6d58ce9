/* SPDX-License-Identifier: MIT */
/*
 * fakecuda.c - the driver API calls libkvmem makes, without a GPU
 *
 * Built as a shared library (libfakecuda.so) that libkvmem loads in place
 * of libcuda.so.1, so the tests run every line of cuda_driver.c: symbol
 * resolution, the version and device checks, the context discipline, the
 * module and its kernels, launches and device memory. The fake checks what
 * a real driver would refuse (a launch or copy with no context current, a
 * module that is not a fatbin, more shared memory than the device has) and
 * counts what libkvmem must give back.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fakecuda.h"

typedef int CUresult;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_IMAGE = 200,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
	CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
	CUDA_ERROR_LAUNCH_FAILED = 719,
};

#define FATBIN_MAGIC 0xba55ed50u
#define ATTR_SMS 16
#define ATTR_SMEM_OPTIN 97
#define FUNC_ATTR_STATIC_SMEM 1
#define FUNC_ATTR_MAX_DYN_SMEM 8
#define HOSTREGISTER_FLAGS 0x0f /* PORTABLE, DEVICEMAP, IOMEMORY, READ_ONLY */
#define ATTR_VMM 102
#define ATTR_VMM_POSIX_FD 103
#define VMM_GRANULARITY (2u << 20)
#define VMM_PINNED 1
#define VMM_POSIX_FD 1
#define VMM_LOC_DEVICE 1
#define VMM_PROT_RW 3

static struct fakecuda fake = {
	.version = 12080,
	.devices = 1,
	.sms = 4,
	.smem = 227 * 1024,
	.total_mem = 8L << 30,
};

/* The context and module handles: any non-NULL pointer will do. */
static char the_ctx, the_mod;

struct func {
	char name[64];
	int max_smem;
};

__attribute__((visibility("default"))) struct fakecuda *fakecuda_state(void)
{
	return &fake;
}

/*
 * A daemon or an interpreter under test has no test to set the state: its
 * environment does. FAKECUDA_SIMT names the executor to run launches in
 * (libkvmem-simt.so, the kernels on host threads) for a process that has
 * none linked in.
 */
__attribute__((constructor)) static void fake_env(void)
{
	static const struct {
		const char *name;
		int *i; /* or */
		long *l;
	} knobs[] = {
		{ "FAKECUDA_DEVICES", &fake.devices, NULL },
		{ "FAKECUDA_NO_VMM", &fake.no_vmm, NULL },
		{ "FAKECUDA_MEM_LIMIT", NULL, &fake.mem_limit },
		{ "FAKECUDA_TOTAL_MEM", NULL, &fake.total_mem },
		{ "FAKECUDA_NO_LOCK", &fake.no_lock, NULL },
		{ "FAKECUDA_COPY_FAIL", &fake.copy_fail, NULL },
		{ "FAKECUDA_COPY_FLIP", &fake.copy_flip, NULL },
	};
	const char *v;
	void *simt;
	size_t k;

	for (k = 0; k < sizeof(knobs) / sizeof(knobs[0]); k++) {
		v = getenv(knobs[k].name);
		if (v && knobs[k].i)
			*knobs[k].i = atoi(v);
		else if (v)
			*knobs[k].l = atol(v);
	}
	v = getenv("FAKECUDA_SIMT");
	if (v) {
		simt = dlopen(v, RTLD_NOW | RTLD_LOCAL);
		if (!simt) {
			fprintf(stderr, "fakecuda: FAKECUDA_SIMT: %s\n",
				dlerror());
			return;
		}
		*(void **)&fake.launch = dlsym(simt, "kvmem__simt_run");
	}
}

static CUresult cuGetErrorString(CUresult r, const char **s)
{
	switch (r) {
	case CUDA_ERROR_OUT_OF_MEMORY:
		*s = "out of memory";
		return CUDA_SUCCESS;
	case CUDA_ERROR_NO_BINARY_FOR_GPU:
		*s = "no kernel image is available for execution on the device";
		return CUDA_SUCCESS;
	case CUDA_ERROR_LAUNCH_FAILED:
		*s = "unspecified launch failure";
		return CUDA_SUCCESS;
	case CUDA_ERROR_INVALID_CONTEXT:
		*s = "invalid device context";
		return CUDA_SUCCESS;
	}
	return CUDA_ERROR_INVALID_VALUE;
}

static CUresult cuInit(unsigned int flags)
{
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	return fake.devices ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

static CUresult cuDriverGetVersion(int *v)
{
	*v = fake.version;
	return CUDA_SUCCESS;
}

static CUresult cuDeviceGetCount(int *n)
{
	*n = fake.devices;
	return CUDA_SUCCESS;
}

static CUresult cuDeviceGet(int *dev, int ordinal)
{
	if (ordinal < 0 || ordinal >= fake.devices)
		return CUDA_ERROR_INVALID_DEVICE;
	*dev = ordinal;
	return CUDA_SUCCESS;
}

static CUresult cuDeviceGetName(char *name, int len, int dev)
{
	(void)dev;
	snprintf(name, (size_t)len, "kvmem fake GPU (CPU threads)");
	return CUDA_SUCCESS;
}

static CUresult cuDeviceTotalMem(size_t *bytes, int dev)
{
	(void)dev;
	*bytes = (size_t)fake.total_mem;
	return CUDA_SUCCESS;
}

static CUresult cuDeviceGetAttribute(int *v, int attr, int dev)
{
	(void)dev;
	if (attr == ATTR_SMS)
		*v = fake.sms;
	else if (attr == ATTR_SMEM_OPTIN)
		*v = fake.smem;
	else if (attr == ATTR_VMM || attr == ATTR_VMM_POSIX_FD)
		*v = !fake.no_vmm;
	else
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

static CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
	(void)dev;
	*ctx = &the_ctx;
	fake.contexts++;
	return CUDA_SUCCESS;
}

static CUresult cuDevicePrimaryCtxRelease(int dev)
{
	(void)dev;
	if (fake.contexts <= 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	fake.contexts--;
	return CUDA_SUCCESS;
}

static CUresult cuCtxPushCurrent(void *ctx)
{
	if (ctx != &the_ctx || fake.contexts <= 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	fake.depth++;
	return CUDA_SUCCESS;
}

static CUresult cuCtxPopCurrent(void **ctx)
{
	if (fake.depth <= 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	fake.depth--;
	*ctx = &the_ctx;
	return CUDA_SUCCESS;
}

static CUresult cuModuleLoadData(void **mod, const void *image)
{
	uint32_t magic;

	if (!fake.depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	memcpy(&magic, image, sizeof(magic));
	if (magic != FATBIN_MAGIC)
		return CUDA_ERROR_INVALID_IMAGE;
	if (fake.no_binary)
		return CUDA_ERROR_NO_BINARY_FOR_GPU;
	*mod = &the_mod;
	fake.modules++;
	return CUDA_SUCCESS;
}

static CUresult cuModuleUnload(void *mod)
{
	if (mod != &the_mod || !fake.depth || fake.modules <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	fake.modules--;
	return CUDA_SUCCESS;
}

/* Function handles live as long as the library: libkvmem holds a few. */
static CUresult cuModuleGetFunction(struct func **fn, void *mod,
				    const char *name)
{
	static struct func funcs[16];
	static int nfuncs;
	int i;

	if (mod != &the_mod || strlen(name) >= sizeof(funcs[0].name))
		return CUDA_ERROR_NOT_FOUND;
	for (i = 0; i < nfuncs; i++)
		if (!strcmp(funcs[i].name, name))
			break;
	if (i == nfuncs) {
		if (nfuncs == 16)
			return CUDA_ERROR_OUT_OF_MEMORY;
		strcpy(funcs[nfuncs++].name, name);
	}
	funcs[i].max_smem = 48 * 1024 - fake.static_smem;
	*fn = &funcs[i];
	return CUDA_SUCCESS;
}

/* What libkvmem asks of a kernel: the shared memory it declares. */
static CUresult cuFuncGetAttribute(int *v, int attr, struct func *fn)
{
	if (!fn || attr != FUNC_ATTR_STATIC_SMEM)
		return CUDA_ERROR_INVALID_VALUE;
	*v = fake.static_smem;
	return CUDA_SUCCESS;
}

/* As the driver: static and dynamic shared memory within the opt-in. */
static CUresult cuFuncSetAttribute(struct func *fn, int attr, int v)
{
	if (attr != FUNC_ATTR_MAX_DYN_SMEM || v < 0 ||
	    v > fake.smem - fake.static_smem)
		return CUDA_ERROR_INVALID_VALUE;
	fn->max_smem = v;
	return CUDA_SUCCESS;
}

/* As the driver would, counting shared memory alone: at most 8. */
static CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n,
							    struct func *fn,
							    int block,
							    size_t smem)
{
	const size_t per = smem + (size_t)fake.static_smem;

	if (!fn || block <= 0 || (int)smem > fn->max_smem || fake.no_occupancy)
		return CUDA_ERROR_INVALID_VALUE;
	*n = per ? (int)((size_t)fake.smem / per) : 8;
	if (*n > 8)
		*n = 8;
	return CUDA_SUCCESS;
}

static CUresult cuLaunchKernel(struct func *fn, unsigned int gx,
			       unsigned int gy, unsigned int gz,
			       unsigned int bx, unsigned int by,
			       unsigned int bz, unsigned int smem, void *stream,
			       void **params, void **extra)
{
	(void)stream;
	if (!fake.depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!gx || !gy || !gz || !bx || by != 1 || bz != 1 ||
	    (int)smem > fn->max_smem || !params || extra || !fake.launch)
		return CUDA_ERROR_INVALID_VALUE;
	fake.launches++;
	snprintf(fake.last_kernel, sizeof(fake.last_kernel), "%s", fn->name);
	if (fake.launch(fn->name, gx, gy, gz, bx, smem, params[0]))
		return CUDA_ERROR_LAUNCH_FAILED;
	return CUDA_SUCCESS;
}

/* Each allocation carries its size ahead of it, for the accounting. */
static CUresult cuMemAlloc(unsigned long long *p, size_t bytes)
{
	long *a;

	if (!fake.depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (fake.mem_limit && (long)bytes > fake.mem_limit - fake.allocated)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a = aligned_alloc(256, 256 + (bytes + 255) / 256 * 256);
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a[0] = (long)bytes;
	fake.allocated += (long)bytes;
	*p = (uintptr_t)a + 256;
	return CUDA_SUCCESS;
}

static CUresult cuMemFree(unsigned long long p)
{
	long *a = (long *)(uintptr_t)(p - 256);

	if (!fake.depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	fake.allocated -= a[0];
	free(a);
	return CUDA_SUCCESS;
}

static CUresult cuStreamSynchronize(void *stream)
{
	(void)stream;
	return fake.depth ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/*
 * Registered host ranges. Unified addressing as on a real GPU: a range's
 * device address is its host address, which the kernels here read as is.
 */
static struct {
	uintptr_t start;
	size_t bytes;
} ranges[16];

static int range_of(uintptr_t p)
{
	int i;

	for (i = 0; i < 16; i++)
		if (ranges[i].bytes && p >= ranges[i].start &&
		    p - ranges[i].start < ranges[i].bytes)
			return i;
	return -1;
}

static CUresult cuMemcpyAsync(unsigned long long dst, unsigned long long src,
			      size_t bytes, void *stream)
{
	(void)stream;
	if (!fake.depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (fake.copy_fail)
		return CUDA_ERROR_LAUNCH_FAILED;
	memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
	if (fake.copy_flip && bytes && range_of((uintptr_t)src) >= 0)
		((unsigned char *)(uintptr_t)dst)[bytes / 2] ^= 0x10;
	fake.copies++;
	return CUDA_SUCCESS;
}

/* Streams are in order with each other here: any handle will do. */
static CUresult cuStreamCreate(void **stream, unsigned int flags)
{
	if (!fake.depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (flags > 1)
		return CUDA_ERROR_INVALID_VALUE;
	*stream = &fake.streams;
	fake.streams++;
	return CUDA_SUCCESS;
}

static CUresult cuStreamDestroy(void *stream)
{
	if (stream != &fake.streams || !fake.streams)
		return CUDA_ERROR_INVALID_VALUE;
	fake.streams--;
	return CUDA_SUCCESS;
}

static CUresult cuMemHostRegister(void *p, size_t bytes, unsigned int flags)
{
	const uintptr_t a = (uintptr_t)p;
	int i, free_at = -1;
	size_t off;

	if (!fake.depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!p || !bytes || flags & ~HOSTREGISTER_FLAGS)
		return CUDA_ERROR_INVALID_VALUE;
	for (i = 0; i < 16; i++) {
		if (!ranges[i].bytes) {
			free_at = free_at < 0 ? i : free_at;
			continue;
		}
		if (a < ranges[i].start + ranges[i].bytes &&
		    ranges[i].start < a + bytes)
			return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	}
	if (fake.no_lock || free_at < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* The driver makes every page resident: read each, as it would
	 * fault it in (a write could undo the daemon's, in a session). */
	for (off = 0; off < bytes; off += 4096)
		(void)*(volatile const char *)(a + off);
	ranges[free_at].start = a;
	ranges[free_at].bytes = bytes;
	fake.registered += (long)bytes;
	return CUDA_SUCCESS;
}

static CUresult cuMemHostUnregister(void *p)
{
	int i = range_of((uintptr_t)p);

	if (!fake.depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (i < 0 || ranges[i].start != (uintptr_t)p)
		return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	fake.registered -= (long)ranges[i].bytes;
	ranges[i].bytes = 0;
	return CUDA_SUCCESS;
}

static CUresult cuMemHostGetDevicePointer(unsigned long long *d, void *p,
					  unsigned int flags)
{
	if (!fake.depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (flags || range_of((uintptr_t)p) < 0)
		return CUDA_ERROR_INVALID_VALUE;
	*d = (uintptr_t)p;
	return CUDA_SUCCESS;
}

/* "kvmem fake GPU" and the device number, as the 16 bytes of a UUID. */
static CUresult cuDeviceGetUuid(unsigned char *uuid, int dev)
{
	if (dev < 0 || dev >= fake.devices)
		return CUDA_ERROR_INVALID_DEVICE;
	memcpy(uuid, "kvmem fake GPU ", 15);
	uuid[15] = (unsigned char)dev;
	return CUDA_SUCCESS;
}

static CUresult cuMemsetD8(unsigned long long p, unsigned char v, size_t n)
{
	if (!fake.depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	memset((void *)(uintptr_t)p, v, n);
	return CUDA_SUCCESS;
}

/* ---- the virtual memory API: memory a descriptor shares ---------------- */

struct vmm_loc {
	int type, id;
};

struct vmm_prop {
	int type, handle_types;
	struct vmm_loc loc;
	void *win32;
	unsigned char flags[8];
};

struct vmm_access {
	struct vmm_loc loc;
	int flags;
};

struct vmm {
	int fd; /* a memfd: what a descriptor shares, between processes too */
	size_t bytes;
};

static int prop_ok(const struct vmm_prop *p)
{
	return p->type == VMM_PINNED && p->handle_types == VMM_POSIX_FD &&
	       p->loc.type == VMM_LOC_DEVICE && p->loc.id >= 0 &&
	       p->loc.id < fake.devices && !p->win32;
}

static CUresult
cuMemGetAllocationGranularity(size_t *g, const struct vmm_prop *p, int option)
{
	if (fake.no_vmm || !prop_ok(p) || option < 0 || option > 1)
		return CUDA_ERROR_INVALID_VALUE;
	*g = VMM_GRANULARITY;
	return CUDA_SUCCESS;
}

static CUresult cuMemCreate(unsigned long long *h, size_t bytes,
			    const struct vmm_prop *p, unsigned long long flags)
{
	struct vmm *m;

	if (!fake.depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (fake.no_vmm || !prop_ok(p) || flags || !bytes ||
	    bytes % VMM_GRANULARITY)
		return CUDA_ERROR_INVALID_VALUE;
	if (fake.mem_limit && (long)bytes > fake.mem_limit - fake.allocated)
		return CUDA_ERROR_OUT_OF_MEMORY;
	m = calloc(1, sizeof(*m));
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	m->fd = memfd_create("fakecuda-vmm", MFD_CLOEXEC);
	if (m->fd < 0 || ftruncate(m->fd, (off_t)bytes)) {
		if (m->fd >= 0)
			close(m->fd);
		free(m);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	m->bytes = bytes;
	fake.allocated += (long)bytes;
	*h = (uintptr_t)m;
	return CUDA_SUCCESS;
}

/* Each handle, created or imported, is released once. */
static CUresult cuMemRelease(unsigned long long h)
{
	struct vmm *m = (struct vmm *)(uintptr_t)h;

	if (!m)
		return CUDA_ERROR_INVALID_VALUE;
	fake.allocated -= (long)m->bytes;
	close(m->fd);
	free(m);
	return CUDA_SUCCESS;
}

static CUresult cuMemExportToShareableHandle(void *out, unsigned long long h,
					     int type, unsigned long long flags)
{
	struct vmm *m = (struct vmm *)(uintptr_t)h;
	int fd;

	if (!m || type != VMM_POSIX_FD || flags)
		return CUDA_ERROR_INVALID_VALUE;
	fd = fcntl(m->fd, F_DUPFD_CLOEXEC, 0);
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memcpy(out, &fd, sizeof(fd));
	return CUDA_SUCCESS;
}

static CUresult cuMemImportFromShareableHandle(unsigned long long *h, void *os,
					       int type)
{
	const int fd = (int)(uintptr_t)os;
	struct stat st;
	struct vmm *m;

	if (!fake.depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (type != VMM_POSIX_FD || fstat(fd, &st) || !st.st_size)
		return CUDA_ERROR_INVALID_VALUE;
	m = calloc(1, sizeof(*m));
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	m->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (m->fd < 0) {
		free(m);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	m->bytes = (size_t)st.st_size;
	fake.allocated += (long)m->bytes;
	*h = (uintptr_t)m;
	return CUDA_SUCCESS;
}

static CUresult cuMemAddressReserve(unsigned long long *p, size_t bytes,
				    size_t align, unsigned long long addr,
				    unsigned long long flags)
{
	void *a;

	if (!bytes || bytes % VMM_GRANULARITY || align || addr || flags)
		return CUDA_ERROR_INVALID_VALUE;
	a = mmap(NULL, bytes, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (a == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p = (uintptr_t)a;
	return CUDA_SUCCESS;
}

static CUresult cuMemAddressFree(unsigned long long p, size_t bytes)
{
	return munmap((void *)(uintptr_t)p, bytes) ? CUDA_ERROR_INVALID_VALUE
						   : CUDA_SUCCESS;
}

/* As the driver: offset 0 only, the whole allocation or less of it. */
static CUresult cuMemMap(unsigned long long p, size_t bytes, size_t offset,
			 unsigned long long h, unsigned long long flags)
{
	struct vmm *m = (struct vmm *)(uintptr_t)h;

	if (!m || offset || flags || !bytes || bytes > m->bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (mmap((void *)(uintptr_t)p, bytes, PROT_NONE, MAP_SHARED | MAP_FIXED,
		 m->fd, 0) == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	return CUDA_SUCCESS;
}

/* Back to reserved addresses, nothing behind them. */
static CUresult cuMemUnmap(unsigned long long p, size_t bytes)
{
	if (mmap((void *)(uintptr_t)p, bytes, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
		 0) == MAP_FAILED)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

static CUresult cuMemSetAccess(unsigned long long p, size_t bytes,
			       const struct vmm_access *desc, size_t count)
{
	if (count != 1 || desc->loc.type != VMM_LOC_DEVICE ||
	    desc->flags != VMM_PROT_RW)
		return CUDA_ERROR_INVALID_VALUE;
	if (mprotect((void *)(uintptr_t)p, bytes, PROT_READ | PROT_WRITE))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

#define ENTRY(f)              \
	{                     \
#f, (void *)f \
	}
static const struct {
	const char *name;
	void *fn;
} entries[] = {
	ENTRY(cuGetErrorString),
	ENTRY(cuInit),
	ENTRY(cuDriverGetVersion),
	ENTRY(cuDeviceGetCount),
	ENTRY(cuDeviceGet),
	ENTRY(cuDeviceGetName),
	ENTRY(cuDeviceGetAttribute),
	ENTRY(cuDeviceGetUuid),
	ENTRY(cuDeviceTotalMem),
	ENTRY(cuDevicePrimaryCtxRetain),
	ENTRY(cuDevicePrimaryCtxRelease),
	ENTRY(cuCtxPushCurrent),
	ENTRY(cuCtxPopCurrent),
	ENTRY(cuModuleLoadData),
	ENTRY(cuModuleUnload),
	ENTRY(cuModuleGetFunction),
	ENTRY(cuFuncGetAttribute),
	ENTRY(cuFuncSetAttribute),
	ENTRY(cuOccupancyMaxActiveBlocksPerMultiprocessor),
	ENTRY(cuLaunchKernel),
	ENTRY(cuMemAlloc),
	ENTRY(cuMemFree),
	ENTRY(cuMemcpyAsync),
	ENTRY(cuMemHostRegister),
	ENTRY(cuMemHostUnregister),
	ENTRY(cuMemHostGetDevicePointer),
	ENTRY(cuMemsetD8),
	ENTRY(cuMemGetAllocationGranularity),
	ENTRY(cuMemCreate),
	ENTRY(cuMemRelease),
	ENTRY(cuMemExportToShareableHandle),
	ENTRY(cuMemImportFromShareableHandle),
	ENTRY(cuMemAddressReserve),
	ENTRY(cuMemAddressFree),
	ENTRY(cuMemMap),
	ENTRY(cuMemUnmap),
	ENTRY(cuMemSetAccess),
	ENTRY(cuStreamCreate),
	ENTRY(cuStreamDestroy),
	ENTRY(cuStreamSynchronize),
};

/* The 12.0 entry point: status 1 is CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND. */
__attribute__((visibility("default"))) CUresult
cuGetProcAddress_v2(const char *name, void **fn, int version,
		    unsigned long long flags, int *status);

CUresult cuGetProcAddress_v2(const char *name, void **fn, int version,
			     unsigned long long flags, int *status)
{
	size_t i;

	*fn = NULL;
	if (version < 12000 || flags)
		return CUDA_ERROR_INVALID_VALUE;
	for (i = 0; i < sizeof(entries) / sizeof(entries[0]); i++)
		if (!strcmp(entries[i].name, name) &&
		    !(fake.missing && !strcmp(fake.missing, name))) {
			*fn = entries[i].fn;
			if (status)
				*status = 0;
			return CUDA_SUCCESS;
		}
	if (status)
		*status = 1;
	return CUDA_ERROR_NOT_FOUND;
}
