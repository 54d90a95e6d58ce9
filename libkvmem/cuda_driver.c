/* SPDX-License-Identifier: MIT */
/*
 * cuda_driver.c - the driver: libcuda.so.1 through dlopen
 *
 * No link dependency on CUDA: the driver is opened at run time and every
 * entry point resolved through cuGetProcAddress for the CUDA 12.0 ABI, so
 * libkvmem loads and works on machines with no driver, no GPU, or the
 * toolkit's stub library, and says which. $KVMEM_LIBCUDA names another
 * library to open; the tests use it, and kvmem__cuda_open_image(), to run
 * all of this file against a fake driver (tests/cuda/fakecuda.c).
 */
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "cuda_impl.h"
#include "kern.h"

/*
 * The little of cuda.h this file uses, with the values the driver ABI
 * fixes, so that libkvmem builds where no CUDA toolkit is installed.
 */
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_STUB_LIBRARY 34
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_NO_BINARY_FOR_GPU 209
#define CUDA_ERROR_INVALID_PTX 218
#define CUDA_ERROR_UNSUPPORTED_PTX_VERSION 222
#define CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN 97
#define CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES 1
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8
#define CU_GET_PROC_ADDRESS_DEFAULT 0
#define CU_GET_PROC_ADDRESS_SUCCESS 0
#define CU_MEMHOSTREGISTER_PORTABLE 0x01
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED 102
#define CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED 103
#define CU_MEM_ALLOCATION_TYPE_PINNED 1
#define CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 1
#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE 3
#define CU_MEM_ALLOC_GRANULARITY_MINIMUM 0

typedef unsigned long long CUmemGenericAllocationHandle;

typedef struct {
	int type; /* CU_MEM_LOCATION_TYPE_* */
	int id; /* the device, as this process numbers it */
} CUmemLocation;

typedef struct {
	int type; /* CU_MEM_ALLOCATION_TYPE_* */
	int requestedHandleTypes; /* CU_MEM_HANDLE_TYPE_* */
	CUmemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} CUmemAllocationProp;

typedef struct {
	CUmemLocation location;
	int flags; /* CU_MEM_ACCESS_FLAGS_* */
} CUmemAccessDesc;

/* The ABI every entry point is resolved for; the oldest driver we take. */
#define DRIVER_ABI 12000

/* The kernels, embedded by the build (kernels/fatbin.S); size 0 without. */
extern const unsigned char kvmem__fatbin[];
extern const size_t kvmem__fatbin_size;

static const char *const kernel_names[KVMEM__K_NR] = {
	[KVMEM__K_ENCODE] = "kvmem_k_encode",
	[KVMEM__K_ATTEND] = "kvmem_k_attend",
	[KVMEM__K_COMBINE] = "kvmem_k_combine",
	[KVMEM__K_SCRUB] = "kvmem_k_scrub",
	[KVMEM__K_INJECT] = "kvmem_k_inject",
	[KVMEM__K_ATTEND_F16] = "kvmem_k_attend_f16",
	[KVMEM__K_ATTEND_Q4] = "kvmem_k_attend_q4",
	[KVMEM__K_ATTEND_Q4W] = "kvmem_k_attend_q4w",
	[KVMEM__K_CRC] = "kvmem_k_crc",
};

struct kvmem__driver {
	void *lib;
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUfunction fn[KVMEM__K_NR];
	CUresult (*GetErrorString)(CUresult, const char **);
	CUresult (*Init)(unsigned int);
	CUresult (*DriverGetVersion)(int *);
	CUresult (*DeviceGetCount)(int *);
	CUresult (*DeviceGet)(CUdevice *, int);
	CUresult (*DeviceGetName)(char *, int, CUdevice);
	CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
	CUresult (*DeviceGetUuid)(unsigned char *, CUdevice);
	CUresult (*DeviceTotalMem)(size_t *, CUdevice);
	CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*DevicePrimaryCtxRelease)(CUdevice);
	CUresult (*CtxPushCurrent)(CUcontext);
	CUresult (*CtxPopCurrent)(CUcontext *);
	CUresult (*ModuleLoadData)(CUmodule *, const void *);
	CUresult (*ModuleUnload)(CUmodule);
	CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*FuncGetAttribute)(int *, int, CUfunction);
	CUresult (*FuncSetAttribute)(CUfunction, int, int);
	CUresult (*OccupancyMaxActiveBlocksPerMultiprocessor)(int *, CUfunction,
							      int, size_t);
	CUresult (*MemAlloc)(CUdeviceptr *, size_t);
	CUresult (*MemFree)(CUdeviceptr);
	CUresult (*MemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
	CUresult (*MemHostRegister)(void *, size_t, unsigned int);
	CUresult (*MemHostUnregister)(void *);
	CUresult (*MemHostGetDevicePointer)(CUdeviceptr *, void *,
					    unsigned int);
	CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
	CUresult (*MemGetAllocationGranularity)(size_t *,
						const CUmemAllocationProp *,
						int);
	CUresult (*MemCreate)(CUmemGenericAllocationHandle *, size_t,
			      const CUmemAllocationProp *, unsigned long long);
	CUresult (*MemRelease)(CUmemGenericAllocationHandle);
	CUresult (*MemExportToShareableHandle)(void *,
					       CUmemGenericAllocationHandle,
					       int, unsigned long long);
	CUresult (*MemImportFromShareableHandle)(CUmemGenericAllocationHandle *,
						 void *, int);
	CUresult (*MemAddressReserve)(CUdeviceptr *, size_t, size_t,
				      CUdeviceptr, unsigned long long);
	CUresult (*MemAddressFree)(CUdeviceptr, size_t);
	CUresult (*MemMap)(CUdeviceptr, size_t, size_t,
			   CUmemGenericAllocationHandle, unsigned long long);
	CUresult (*MemUnmap)(CUdeviceptr, size_t);
	CUresult (*MemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *,
				 size_t);
	CUresult (*StreamCreate)(CUstream *, unsigned int);
	CUresult (*StreamDestroy)(CUstream);
	CUresult (*StreamSynchronize)(CUstream);
	CUresult (*LaunchKernel)(CUfunction, unsigned int, unsigned int,
				 unsigned int, unsigned int, unsigned int,
				 unsigned int, unsigned int, CUstream, void **,
				 void **);
};

#define SYM(field, name)                                    \
	{                                                   \
		offsetof(struct kvmem__driver, field), name \
	}
static const struct {
	size_t off;
	const char *name;
} syms[] = {
	SYM(GetErrorString, "cuGetErrorString"),
	SYM(Init, "cuInit"),
	SYM(DriverGetVersion, "cuDriverGetVersion"),
	SYM(DeviceGetCount, "cuDeviceGetCount"),
	SYM(DeviceGet, "cuDeviceGet"),
	SYM(DeviceGetName, "cuDeviceGetName"),
	SYM(DeviceGetAttribute, "cuDeviceGetAttribute"),
	SYM(DeviceGetUuid, "cuDeviceGetUuid"),
	SYM(DeviceTotalMem, "cuDeviceTotalMem"),
	SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
	SYM(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease"),
	SYM(CtxPushCurrent, "cuCtxPushCurrent"),
	SYM(CtxPopCurrent, "cuCtxPopCurrent"),
	SYM(ModuleLoadData, "cuModuleLoadData"),
	SYM(ModuleUnload, "cuModuleUnload"),
	SYM(ModuleGetFunction, "cuModuleGetFunction"),
	SYM(FuncGetAttribute, "cuFuncGetAttribute"),
	SYM(FuncSetAttribute, "cuFuncSetAttribute"),
	SYM(OccupancyMaxActiveBlocksPerMultiprocessor,
	    "cuOccupancyMaxActiveBlocksPerMultiprocessor"),
	SYM(MemAlloc, "cuMemAlloc"),
	SYM(MemFree, "cuMemFree"),
	SYM(MemcpyAsync, "cuMemcpyAsync"),
	SYM(MemHostRegister, "cuMemHostRegister"),
	SYM(MemHostUnregister, "cuMemHostUnregister"),
	SYM(MemHostGetDevicePointer, "cuMemHostGetDevicePointer"),
	SYM(MemsetD8, "cuMemsetD8"),
	SYM(MemGetAllocationGranularity, "cuMemGetAllocationGranularity"),
	SYM(MemCreate, "cuMemCreate"),
	SYM(MemRelease, "cuMemRelease"),
	SYM(MemExportToShareableHandle, "cuMemExportToShareableHandle"),
	SYM(MemImportFromShareableHandle, "cuMemImportFromShareableHandle"),
	SYM(MemAddressReserve, "cuMemAddressReserve"),
	SYM(MemAddressFree, "cuMemAddressFree"),
	SYM(MemMap, "cuMemMap"),
	SYM(MemUnmap, "cuMemUnmap"),
	SYM(MemSetAccess, "cuMemSetAccess"),
	SYM(StreamCreate, "cuStreamCreate"),
	SYM(StreamDestroy, "cuStreamDestroy"),
	SYM(StreamSynchronize, "cuStreamSynchronize"),
	SYM(LaunchKernel, "cuLaunchKernel"),
};

static const char *errstr(const struct kvmem__driver *d, CUresult r)
{
	const char *s = NULL;

	if (d->GetErrorString && d->GetErrorString(r, &s) == CUDA_SUCCESS && s)
		return s;
	return "unknown CUDA error";
}

typedef CUresult (*gpa2_fn)(const char *, void **, int, uint64_t, int *);
typedef CUresult (*gpa1_fn)(const char *, void **, int, uint64_t);

static int resolve(struct kvmem__driver *d, const char *lib)
{
	gpa2_fn gpa2 = (gpa2_fn)dlsym(d->lib, "cuGetProcAddress_v2");
	gpa1_fn gpa1 = (gpa1_fn)dlsym(d->lib, "cuGetProcAddress");
	size_t i;

	if (!gpa2 && !gpa1)
		return kvmem__cuda_fail(-ENODEV,
					"%s has no cuGetProcAddress: not an "
					"NVIDIA driver",
					lib);
	for (i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void **slot = (void **)((char *)d + syms[i].off);
		int q = CU_GET_PROC_ADDRESS_SUCCESS;
		CUresult r;

		r = gpa2 ? gpa2(syms[i].name, slot, DRIVER_ABI,
				CU_GET_PROC_ADDRESS_DEFAULT, &q)
			 : gpa1(syms[i].name, slot, DRIVER_ABI,
				CU_GET_PROC_ADDRESS_DEFAULT);
		if (r == CUDA_ERROR_STUB_LIBRARY)
			return kvmem__cuda_fail(
				-ENODEV,
				"%s is the CUDA toolkit's stub library, not "
				"a driver: no GPU can be used",
				lib);
		if (r != CUDA_SUCCESS || q != CU_GET_PROC_ADDRESS_SUCCESS ||
		    !*slot)
			return kvmem__cuda_fail(
				-EOPNOTSUPP,
				"the NVIDIA driver (%s) has no %s for CUDA "
				"12.0: too old for kvmem",
				lib, syms[i].name);
	}
	return 0;
}

void kvmem_cuda_close(struct kvmem_cuda *cu)
{
	struct kvmem__driver *d;

	if (!cu)
		return;
	while (cu->caches)
		kvmem_cuda_unregister(cu->caches);
	pthread_mutex_destroy(&cu->lock);
	d = cu->drv;
	if (d) {
		if (d->mod && d->CtxPushCurrent(d->ctx) == CUDA_SUCCESS) {
			CUcontext old;

			d->ModuleUnload(d->mod);
			d->CtxPopCurrent(&old);
		}
		if (d->ctx)
			d->DevicePrimaryCtxRelease(d->dev);
		if (d->lib)
			dlclose(d->lib);
		free(d);
	}
	free(cu);
}

/* Make the device's context current for one call; -EIO if it cannot be. */
static int enter(struct kvmem__driver *d)
{
	CUresult r = d->CtxPushCurrent(d->ctx);

	if (r != CUDA_SUCCESS)
		return kvmem__cuda_fail(-EIO, "cuCtxPushCurrent: %s",
					errstr(d, r));
	return 0;
}

static void leave(struct kvmem__driver *d)
{
	CUcontext old;

	d->CtxPopCurrent(&old);
}

int kvmem__cuda_launch(struct kvmem_cuda *cu, int kernel, unsigned int gx,
		       unsigned int gy, unsigned int gz, unsigned int smem,
		       const void *params, void *stream)
{
	struct kvmem__driver *d = cu->drv;
	void *args[] = { (void *)params };
	CUresult r;
	int ret = enter(d);

	if (ret)
		return ret;
	r = d->LaunchKernel(d->fn[kernel], gx, gy, gz, KVMEM_K_THREADS, 1, 1,
			    smem, (CUstream)stream, args, NULL);
	leave(d);
	if (r != CUDA_SUCCESS)
		return kvmem__cuda_fail(-EIO, "launch of %s: %s",
					kernel_names[kernel], errstr(d, r));
	return 0;
}

unsigned int kvmem__cuda_occupancy(struct kvmem_cuda *cu, int kernel,
				   unsigned int smem)
{
	struct kvmem__driver *d = cu->drv;
	int n = 0;
	CUresult r;

	if (enter(d))
		return 1;
	r = d->OccupancyMaxActiveBlocksPerMultiprocessor(&n, d->fn[kernel],
							 KVMEM_K_THREADS, smem);
	leave(d);
	return r == CUDA_SUCCESS && n > 0 ? (unsigned int)n : 1;
}

int kvmem_cuda_alloc(struct kvmem_cuda *cu, size_t bytes, uint64_t *addr)
{
	CUdeviceptr p = 0;
	CUresult r;
	int ret;

	if (!cu || !bytes || !addr)
		return kvmem__cuda_fail(-EINVAL, "bad allocation arguments");
	ret = enter(cu->drv);
	if (ret)
		return ret;
	r = cu->drv->MemAlloc(&p, bytes);
	leave(cu->drv);
	if (r == CUDA_ERROR_OUT_OF_MEMORY)
		return kvmem__cuda_fail(-ENOMEM,
					"%s has no %zu bytes of memory free",
					cu->name, bytes);
	if (r != CUDA_SUCCESS)
		return kvmem__cuda_fail(-EIO, "cuMemAlloc of %zu bytes: %s",
					bytes, errstr(cu->drv, r));
	*addr = p;
	kvmem__cuda_fail(0, "%s", "");
	return 0;
}

void kvmem_cuda_free(struct kvmem_cuda *cu, uint64_t addr)
{
	if (!cu || !addr || enter(cu->drv))
		return;
	cu->drv->MemFree(addr);
	leave(cu->drv);
}

int kvmem_cuda_copy(struct kvmem_cuda *cu, uint64_t dst, uint64_t src,
		    size_t bytes, void *stream)
{
	CUresult r;
	int ret;

	if (!cu || ((!dst || !src) && bytes))
		return kvmem__cuda_fail(-EINVAL, "bad copy arguments");
	if (!bytes)
		return 0;
	ret = enter(cu->drv);
	if (ret)
		return ret;
	r = cu->drv->MemcpyAsync(dst, src, bytes, (CUstream)stream);
	leave(cu->drv);
	if (r != CUDA_SUCCESS)
		return kvmem__cuda_fail(-EIO, "copy of %zu bytes: %s", bytes,
					errstr(cu->drv, r));
	kvmem__cuda_fail(0, "%s", "");
	return 0;
}

int kvmem_cuda_sync(struct kvmem_cuda *cu, void *stream)
{
	CUresult r;
	int ret;

	if (!cu)
		return kvmem__cuda_fail(-EINVAL, "no handle");
	ret = enter(cu->drv);
	if (ret)
		return ret;
	r = cu->drv->StreamSynchronize((CUstream)stream);
	leave(cu->drv);
	if (r != CUDA_SUCCESS)
		return kvmem__cuda_fail(-EIO, "the stream failed: %s",
					errstr(cu->drv, r));
	kvmem__cuda_fail(0, "%s", "");
	return 0;
}

int kvmem__cuda_stream_create(struct kvmem_cuda *cu, void **stream)
{
	CUstream s = NULL;
	CUresult r;
	int ret;

	ret = enter(cu->drv);
	if (ret)
		return ret;
	r = cu->drv->StreamCreate(&s, CU_STREAM_NON_BLOCKING);
	leave(cu->drv);
	if (r != CUDA_SUCCESS)
		return kvmem__cuda_fail(-EIO, "creating a stream on %s: %s",
					cu->name, errstr(cu->drv, r));
	*stream = s;
	return 0;
}

void kvmem__cuda_stream_destroy(struct kvmem_cuda *cu, void *stream)
{
	if (stream && !enter(cu->drv)) {
		cu->drv->StreamDestroy((CUstream)stream);
		leave(cu->drv);
	}
}

/* Undo cuMemHostRegister() of @p; nothing to report if it cannot be. */
static void host_unregister(struct kvmem__driver *d, void *p)
{
	if (!enter(d)) {
		d->MemHostUnregister(p);
		leave(d);
	}
}

int kvmem__cuda_host_register(struct kvmem_cuda *cu, void *p, size_t bytes)
{
	struct kvmem__driver *d = cu->drv;
	CUresult r;
	int ret;

	ret = enter(d);
	if (ret)
		return ret;
	r = d->MemHostRegister(p, bytes,
			       CU_MEMHOSTREGISTER_PORTABLE |
				       CU_MEMHOSTREGISTER_DEVICEMAP);
	leave(d);
	if (r == CUDA_ERROR_OUT_OF_MEMORY)
		return kvmem__cuda_fail(-ENOMEM,
					"the driver cannot lock %zu bytes in "
					"memory",
					bytes);
	if (r == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
		return kvmem__cuda_fail(-EBUSY,
					"%zu bytes are registered "
					"with CUDA already",
					bytes);
	if (r != CUDA_SUCCESS)
		return kvmem__cuda_fail(-EIO,
					"registering %zu bytes for %s: %s",
					bytes, cu->name, errstr(d, r));
	return 0;
}

void kvmem__cuda_host_unregister(struct kvmem_cuda *cu, void *p)
{
	host_unregister(cu->drv, p);
}

/* Map the GPU memory kvmemd gave the cache's session, if it has some. */
static int map_session_gpu(struct kvmem_cuda *cu, struct kvmem_cache *c)
{
	struct kvmem__vmm m;
	char has[41], is[41];
	int ret;

	if (!c->gpu_bytes)
		return 0;
	if (memcmp(c->gpu_uuid, cu->uuid, sizeof(cu->uuid))) {
		kvmem__cuda_uuid_str(c->gpu_uuid, has);
		kvmem__cuda_uuid_str(cu->uuid, is);
		return kvmem__cuda_fail(-ENODEV,
					"the session's GPU memory is on %s; "
					"the handle is %s (%s)",
					has, is, cu->name);
	}
	ret = kvmem__cuda_vmm_import(cu, c->gpu_fd, c->gpu_bytes, &m);
	if (ret)
		return ret;
	c->gpu_addr = m.addr;
	c->gpu_handle = m.handle;
	return 0;
}

/*
 * The arena is locked and mapped for every context (PORTABLE), so it
 * stays usable from the runtime's contexts on this device as well.
 */
int kvmem_cuda_register(struct kvmem_cuda *cu, struct kvmem_cache *c)
{
	struct kvmem__driver *d;
	CUdeviceptr base = 0;
	CUresult r;
	int ret;

	if (!cu || !c)
		return kvmem__cuda_fail(-EINVAL, "no handle or no cache");
	if (c->cuda)
		return kvmem__cuda_fail(-EBUSY,
					"the cache is registered with %s "
					"already",
					c->cuda->name);
	d = cu->drv;
	ret = enter(d);
	if (ret)
		return ret;
	r = d->MemHostRegister(c->arena, c->arena_bytes,
			       CU_MEMHOSTREGISTER_PORTABLE |
				       CU_MEMHOSTREGISTER_DEVICEMAP);
	if (r == CUDA_SUCCESS) {
		r = d->MemHostGetDevicePointer(&base, c->arena, 0);
		if (r != CUDA_SUCCESS)
			d->MemHostUnregister(c->arena);
	}
	leave(d);
	if (r == CUDA_ERROR_OUT_OF_MEMORY)
		return kvmem__cuda_fail(-ENOMEM,
					"the driver cannot lock the cache's "
					"%zu bytes of pages in memory",
					c->arena_bytes);
	if (r == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
		return kvmem__cuda_fail(-EBUSY,
					"the cache's pages are registered "
					"with CUDA already, outside kvmem");
	if (r != CUDA_SUCCESS)
		return kvmem__cuda_fail(-EIO,
					"mapping the cache's %zu bytes of "
					"pages for %s: %s",
					c->arena_bytes, cu->name, errstr(d, r));
	ret = map_session_gpu(cu, c);
	if (ret) {
		host_unregister(d, c->arena);
		return ret;
	}
	c->cuda_base = base;
	pthread_mutex_lock(&cu->lock);
	c->cuda = cu;
	c->cuda_next = cu->caches;
	cu->caches = c;
	pthread_mutex_unlock(&cu->lock);
	kvmem__cuda_fail(0, "%s", "");
	return 0;
}

void kvmem_cuda_unregister(struct kvmem_cache *c)
{
	struct kvmem_cuda *cu = c ? c->cuda : NULL;
	struct kvmem_cache **pp;

	if (!cu)
		return;
	pthread_mutex_lock(&cu->lock);
	for (pp = &cu->caches; *pp != c; pp = &(*pp)->cuda_next)
		;
	*pp = c->cuda_next;
	pthread_mutex_unlock(&cu->lock);
	if (c->gpu_handle) {
		struct kvmem__vmm m = { .addr = c->gpu_addr,
					.bytes = c->gpu_bytes,
					.handle = c->gpu_handle };

		kvmem__cuda_vmm_free(cu, &m);
		c->gpu_addr = 0;
		c->gpu_handle = 0;
	}
	host_unregister(cu->drv, c->arena);
	c->cuda = NULL;
	c->cuda_base = 0;
	c->cuda_next = NULL;
}

static void vmm_prop(const struct kvmem__driver *d, CUmemAllocationProp *p)
{
	memset(p, 0, sizeof(*p));
	p->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	p->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p->location.id = d->dev;
}

size_t kvmem__cuda_vmm_granularity(struct kvmem_cuda *cu)
{
	struct kvmem__driver *d = cu->drv;
	CUmemAllocationProp prop;
	int vmm = 0, fds = 0;
	size_t g = 0;
	CUresult r;

	r = d->DeviceGetAttribute(
		&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
		d->dev);
	if (r != CUDA_SUCCESS || !vmm) {
		kvmem__cuda_fail(-EOPNOTSUPP,
				 "%s or its driver has no virtual memory "
				 "management (cuMemCreate)",
				 cu->name);
		return 0;
	}
	r = d->DeviceGetAttribute(
		&fds,
		CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
		d->dev);
	if (r != CUDA_SUCCESS || !fds) {
		kvmem__cuda_fail(-EOPNOTSUPP,
				 "%s cannot share memory as file descriptors",
				 cu->name);
		return 0;
	}
	vmm_prop(d, &prop);
	if (enter(d))
		return 0;
	r = d->MemGetAllocationGranularity(&g, &prop,
					   CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	leave(d);
	if (r != CUDA_SUCCESS || !g) {
		kvmem__cuda_fail(-EIO, "cuMemGetAllocationGranularity: %s",
				 errstr(d, r));
		return 0;
	}
	return g;
}

uint64_t kvmem__cuda_total_mem(struct kvmem_cuda *cu)
{
	struct kvmem__driver *d = cu->drv;
	size_t bytes = 0;
	CUresult r;

	r = d->DeviceTotalMem(&bytes, d->dev);
	if (r != CUDA_SUCCESS || !bytes) {
		kvmem__cuda_fail(-EIO, "cuDeviceTotalMem: %s", errstr(d, r));
		return 0;
	}
	return bytes;
}

/* Reserve addresses for @h here, map it, let the device read and write. */
static CUresult vmm_map(struct kvmem__driver *d, CUmemGenericAllocationHandle h,
			size_t bytes, struct kvmem__vmm *m)
{
	const CUmemAccessDesc rw = {
		.location = { CU_MEM_LOCATION_TYPE_DEVICE, d->dev },
		.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
	};
	CUdeviceptr a = 0;
	CUresult r;

	r = d->MemAddressReserve(&a, bytes, 0, 0, 0);
	if (r != CUDA_SUCCESS)
		return r;
	r = d->MemMap(a, bytes, 0, h, 0);
	if (r != CUDA_SUCCESS)
		goto free_va;
	r = d->MemSetAccess(a, bytes, &rw, 1);
	if (r != CUDA_SUCCESS)
		goto unmap;
	m->addr = a;
	m->bytes = bytes;
	m->handle = h;
	return CUDA_SUCCESS;
unmap:
	d->MemUnmap(a, bytes);
free_va:
	d->MemAddressFree(a, bytes);
	return r;
}

static void vmm_unmap(struct kvmem__driver *d, struct kvmem__vmm *m)
{
	d->MemUnmap(m->addr, m->bytes);
	d->MemAddressFree(m->addr, m->bytes);
	d->MemRelease(m->handle);
	memset(m, 0, sizeof(*m));
}

/*
 * Zeroed before it is shared: a session never sees another's KV. The
 * memset may return before the device is done with it, and neither
 * another process's work nor a non-blocking stream of this one waits for
 * the default stream: it is waited for here.
 */
int kvmem__cuda_vmm_create(struct kvmem_cuda *cu, size_t bytes,
			   struct kvmem__vmm *m, int *fd)
{
	struct kvmem__driver *d = cu->drv;
	CUmemGenericAllocationHandle h = 0;
	CUmemAllocationProp prop;
	int ofd = -1, ret;
	CUresult r;

	memset(m, 0, sizeof(*m));
	*fd = -1;
	vmm_prop(d, &prop);
	ret = enter(d);
	if (ret)
		return ret;
	r = d->MemCreate(&h, bytes, &prop, 0);
	if (r != CUDA_SUCCESS)
		goto out;
	r = d->MemExportToShareableHandle(
		&ofd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	if (r == CUDA_SUCCESS)
		r = vmm_map(d, h, bytes, m);
	if (r == CUDA_SUCCESS) {
		r = d->MemsetD8(m->addr, 0, bytes);
		if (r == CUDA_SUCCESS)
			r = d->StreamSynchronize(NULL);
		if (r != CUDA_SUCCESS)
			vmm_unmap(d, m);
	} else {
		d->MemRelease(h);
	}
	if (r != CUDA_SUCCESS && ofd >= 0)
		close(ofd);
out:
	leave(d);
	if (r == CUDA_ERROR_OUT_OF_MEMORY)
		return kvmem__cuda_fail(-ENOMEM, "%s has no %zu bytes free",
					cu->name, bytes);
	if (r != CUDA_SUCCESS)
		return kvmem__cuda_fail(-EIO,
					"%zu bytes of shareable memory on %s: "
					"%s",
					bytes, cu->name, errstr(d, r));
	*fd = ofd;
	return 0;
}

int kvmem__cuda_vmm_import(struct kvmem_cuda *cu, int fd, size_t bytes,
			   struct kvmem__vmm *m)
{
	struct kvmem__driver *d = cu->drv;
	CUmemGenericAllocationHandle h = 0;
	CUresult r;
	int ret;

	memset(m, 0, sizeof(*m));
	ret = enter(d);
	if (ret)
		return ret;
	r = d->MemImportFromShareableHandle(
		&h, (void *)(uintptr_t)fd,
		CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (r == CUDA_SUCCESS) {
		r = vmm_map(d, h, bytes, m);
		if (r != CUDA_SUCCESS)
			d->MemRelease(h);
	}
	leave(d);
	if (r != CUDA_SUCCESS)
		return kvmem__cuda_fail(-EIO,
					"mapping %zu bytes of shared memory "
					"on %s: %s",
					bytes, cu->name, errstr(d, r));
	return 0;
}

void kvmem__cuda_vmm_free(struct kvmem_cuda *cu, struct kvmem__vmm *m)
{
	if (!m->bytes || enter(cu->drv))
		return;
	vmm_unmap(cu->drv, m);
	leave(cu->drv);
}

int kvmem_cuda_session_memory(const struct kvmem_cache *c, uint64_t *addr,
			      size_t *bytes)
{
	if (!c || !addr || !bytes)
		return kvmem__cuda_fail(-EINVAL, "bad arguments");
	if (!c->gpu_bytes)
		return kvmem__cuda_fail(-ENXIO,
					"the cache has no GPU memory from "
					"kvmemd (kvmem_connect_opts.gpu_mib)");
	if (!c->gpu_handle)
		return kvmem__cuda_fail(-ENOENT,
					"the session's GPU memory is mapped "
					"by kvmem_cuda_register()");
	if (c->gpu_slot0)
		return kvmem__cuda_fail(-EBUSY,
					"the session's GPU memory is kvmemd's "
					"GPU tier (KVMEM_CONNECT_GPU_TIER)");
	*addr = c->gpu_addr;
	*bytes = c->gpu_bytes;
	kvmem__cuda_fail(0, "%s", "");
	return 0;
}

void kvmem__cuda_uuid_str(const uint8_t u[16], char out[41])
{
	snprintf(out, 41,
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
		 "%02x%02x%02x%02x%02x%02x",
		 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9],
		 u[10], u[11], u[12], u[13], u[14], u[15]);
}

/* Start the driver and find the device: everything before the module. */
static int driver_start(struct kvmem__driver *d, int device,
			struct kvmem_cuda *cu, const char *lib)
{
	int count = 0, version = 0, sms = 0, smem = 0;
	CUresult r;

	r = d->Init(0);
	if (r == CUDA_ERROR_STUB_LIBRARY)
		return kvmem__cuda_fail(-ENODEV,
					"%s is the CUDA toolkit's stub "
					"library, not a driver: no GPU can be "
					"used",
					lib);
	if (r == CUDA_ERROR_NO_DEVICE)
		return kvmem__cuda_fail(-ENODEV, "no CUDA GPU on this machine");
	if (r != CUDA_SUCCESS)
		return kvmem__cuda_fail(-ENODEV,
					"the NVIDIA driver failed to start: %s",
					errstr(d, r));
	if (d->DriverGetVersion(&version) != CUDA_SUCCESS ||
	    version < DRIVER_ABI)
		return kvmem__cuda_fail(-EOPNOTSUPP,
					"the NVIDIA driver supports CUDA "
					"%d.%d; kvmem needs 12.0 or later",
					version / 1000, version % 1000 / 10);
	r = d->DeviceGetCount(&count);
	if (r != CUDA_SUCCESS || device < 0 || device >= count)
		return kvmem__cuda_fail(-ENODEV,
					"no CUDA device %d (%d present)",
					device, count);
	r = d->DeviceGet(&d->dev, device);
	if (r == CUDA_SUCCESS)
		r = d->DeviceGetName(cu->name, sizeof(cu->name), d->dev);
	if (r == CUDA_SUCCESS)
		r = d->DeviceGetAttribute(
			&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->dev);
	if (r == CUDA_SUCCESS)
		r = d->DeviceGetAttribute(
			&smem,
			CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
			d->dev);
	if (r == CUDA_SUCCESS)
		r = d->DeviceGetUuid(cu->uuid, d->dev);
	if (r == CUDA_SUCCESS)
		r = d->DevicePrimaryCtxRetain(&d->ctx, d->dev);
	if (r != CUDA_SUCCESS) {
		d->ctx = NULL;
		return kvmem__cuda_fail(-ENODEV, "CUDA device %d: %s", device,
					errstr(d, r));
	}
	cu->sms = sms > 0 ? (unsigned int)sms : 1;
	cu->smem_optin = smem > 0 ? (unsigned int)smem : 48 * 1024;
	return 0;
}

/* Load the fatbin into the context and find the kernels. */
static int driver_module(struct kvmem__driver *d, struct kvmem_cuda *cu,
			 const void *image)
{
	CUcontext old;
	CUresult r;
	int i, ret = 0;

	r = d->CtxPushCurrent(d->ctx);
	if (r != CUDA_SUCCESS)
		return kvmem__cuda_fail(-ENODEV, "cuCtxPushCurrent: %s",
					errstr(d, r));
	r = d->ModuleLoadData(&d->mod, image);
	if (r == CUDA_ERROR_NO_BINARY_FOR_GPU ||
	    r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION ||
	    r == CUDA_ERROR_INVALID_PTX) {
		d->mod = NULL;
		ret = kvmem__cuda_fail(-EOPNOTSUPP,
				       "no kvmem kernel runs on %s: the fatbin "
				       "has sm_80 and sm_90 code and PTX the "
				       "driver cannot compile (%s); update "
				       "the driver",
				       cu->name, errstr(d, r));
		goto out;
	}
	if (r != CUDA_SUCCESS) {
		d->mod = NULL;
		ret = kvmem__cuda_fail(-ENODEV, "loading the kernels: %s",
				       errstr(d, r));
		goto out;
	}
	/*
	 * A CTA's static and dynamic shared memory together may not pass
	 * the opt-in limit, so each kernel may ask for the rest of it.
	 */
	for (i = 0; i < KVMEM__K_NR; i++) {
		int fixed = 0;

		r = d->ModuleGetFunction(&d->fn[i], d->mod, kernel_names[i]);
		if (r == CUDA_SUCCESS)
			r = d->FuncGetAttribute(
				&fixed, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
				d->fn[i]);
		if (r == CUDA_SUCCESS &&
		    (fixed < 0 || (unsigned int)fixed > cu->smem_optin)) {
			ret = kvmem__cuda_fail(-EOPNOTSUPP,
					       "kernel %s needs %d bytes of "
					       "shared memory; %s gives a CTA "
					       "%u",
					       kernel_names[i], fixed, cu->name,
					       cu->smem_optin);
			goto out;
		}
		if (r == CUDA_SUCCESS) {
			cu->smem_max[i] = cu->smem_optin - (unsigned int)fixed;
			r = d->FuncSetAttribute(
				d->fn[i],
				CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
				(int)cu->smem_max[i]);
		}
		if (r != CUDA_SUCCESS) {
			ret = kvmem__cuda_fail(-EOPNOTSUPP, "kernel %s: %s",
					       kernel_names[i], errstr(d, r));
			goto out;
		}
	}
out:
	d->CtxPopCurrent(&old);
	return ret;
}

int kvmem__cuda_open_image(int device, const char *lib, const void *image,
			   struct kvmem_cuda **out)
{
	struct kvmem_cuda *cu = calloc(1, sizeof(*cu));
	struct kvmem__driver *d = calloc(1, sizeof(*d));
	int ret;

	*out = NULL;
	if (!cu || !d) {
		free(cu);
		free(d);
		return kvmem__cuda_fail(-ENOMEM, "out of memory");
	}
	cu->drv = d;
	pthread_mutex_init(&cu->lock, NULL);
	d->lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!d->lib) {
		ret = kvmem__cuda_fail(-ENODEV,
				       "no NVIDIA driver: cannot load %s (%s)",
				       lib, dlerror());
		goto fail;
	}
	ret = resolve(d, lib);
	if (!ret)
		ret = driver_start(d, device, cu, lib);
	if (!ret)
		ret = driver_module(d, cu, image);
	if (ret)
		goto fail;
	kvmem__cuda_fail(0, "%s", "");
	*out = cu;
	return 0;
fail:
	kvmem_cuda_close(cu);
	return ret;
}

int kvmem_cuda_open(int device, struct kvmem_cuda **out)
{
	const char *lib = getenv("KVMEM_LIBCUDA");

	if (!out)
		return kvmem__cuda_fail(-EINVAL, "no handle to fill");
	*out = NULL;
	if (!kvmem__fatbin_size)
		return kvmem__cuda_fail(-EOPNOTSUPP,
					"libkvmem was built without nvcc: it "
					"carries no GPU kernels");
	if (!lib || !*lib)
		lib = "libcuda.so.1";
	return kvmem__cuda_open_image(device, lib, kvmem__fatbin, out);
}
