# SPDX-License-Identifier: MIT
"""kvmem.cuda - decode-on-load attention on an NVIDIA GPU, from Python.

A binding of kvmem/cuda.h. Device(n) loads the driver (libcuda.so.1,
through dlopen: no CUDA toolkit is needed) and kvmem's kernels for GPU n.
A cache registered with it keeps its pages where they are, in host memory
(this process's, or the kvmemd session's), and the GPU reads them over the
bus; its sequences then take queries that are in GPU memory, and the
output is left there:

    import torch, kvmem, kvmem.cuda

    dev = kvmem.cuda.Device(0)
    with kvmem.Cache.embedded(g, 64 << 20) as cache:   # or Cache.connect(g)
        cache.register(dev)
        seq = cache.sequence()
        seq.append(0, k, v)                   # CPU or CUDA tensors
        out, stats = seq.attend(0, q.cuda())  # out: a CUDA tensor

Pages keeps pages in GPU memory instead, under block tables the caller
keeps, as paged-attention engines do: the encode kernel writes them from
K and V on the GPU, the attention and scrub kernels read them.

kvmemd can keep them there itself: a session of
Cache.connect(g, gpu_mib=N, gpu_tier=True) has kvmemd's GPU tier in its
GPU memory. Attention on the GPU (a query in GPU memory) first has kvmemd
move the sequence's sealed pages into it, as far as they fit, and reads
them there; the pages that do not fit, and the unsealed tail, stay in host
memory and are read over the bus. The CPU's calls on the sequence
(attend() with a host query, read()) have them moved back first. Each move
is a copy of the page over the bus by kvmemd, checked by the page's
CRC-32C where it lands (on the GPU by a kernel of kvmemd's, a batch of
pages a launch); appending moves nothing. Such a
session's gpu_memory() is kvmemd's, not the caller's: it raises.

GPU memory is a PyTorch CUDA tensor (any dtype torch can make float32 of),
or any object with __cuda_array_interface__ holding C-contiguous float32
(a DeviceArray, memory kvmem allocates for programs without a CUDA
framework; CuPy and Numba arrays). Work runs on PyTorch's current stream
of the tensor's device, else on the stream the array names, else on the
default stream, and the call waits for it: the stats it returns are the
kernel's. Failures raise kvmem.Error with
kvmem_cuda_error()'s sentence.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import sys
import weakref
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Sequence as _Seq, Tuple

import numpy as np
import numpy.typing as npt

from . import ArrayOut, Counts, Stats
from . import ERASURES, Error, _Geometry, _lib, _name, _PageCounts, _struct_dict

__all__ = ["Device", "DeviceArray", "DeviceView", "Pages", "on_device", "to_host"]

if TYPE_CHECKING:
    from . import Cache, Geometry

# GPU memory: a CUDA tensor of PyTorch, or an object with
# __cuda_array_interface__ (DeviceArray, DeviceView, CuPy, Numba)
GpuArray = Any
# A block table entry of Pages.attend(): (page, token_start, ntokens, hot)
TableEntry = Tuple[int, int, int, bool]

HDR_SEALED = 1  # KVMEM_HDR_SEALED
HDR_HOT = 2  # KVMEM_HDR_HOT


class _Page(ctypes.Structure):
    _fields_ = [
        ("addr", ctypes.c_uint64),
        ("token_start", ctypes.c_uint32),
        ("ntokens", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("resv", ctypes.c_uint32),
    ]


class _AttendArgs(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "pages",
            "seq_pages",
            "q",
            "out",
            "mass",
            "stats",
            "workspace",
        )
    ] + [
        (name, ctypes.c_uint32)
        for name in (
            "batch",
            "n_heads",
            "nq",
            "erasure",
            "total_pages",
            "max_pages",
            "splits",
        )
    ] + [("scale", ctypes.c_float)]


class _EncodeJob(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in ("page", "k", "v", "seq", "generation")
    ] + [
        (name, ctypes.c_uint32)
        for name in ("stride", "layer", "token_start", "t0", "n", "flags")
    ]


class _Layout(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("size", "scales_off", "k_off", "v_off")
    ] + [
        (name, ctypes.c_uint32)
        for name in (
            "nscales_k",
            "nscales_v",
            "scale_words",
            "row_words",
            "row_bytes",
            "row_data",
        )
    ] + [
        (name, ctypes.c_uint8) for name in ("format", "codec", "key_scales", "hot")
    ] + [("checks_off", ctypes.c_size_t), ("nchecks", ctypes.c_uint32)]


_DTYPES = {"<f4": 0, "<f2": 1}  # enum kvmem_cuda_dtype: F32, F16 (BF16: torch)

_STATS = (
    "words_clean",
    "words_corrected",
    "words_uncorrectable",
    "values_erased",
    "headers_uncorrectable",
)

# The sizes kvmem/cuda.h fixes.
assert ctypes.sizeof(_Page) == 24
assert ctypes.sizeof(_AttendArgs) == 88
assert ctypes.sizeof(_EncodeJob) == 64
assert ctypes.sizeof(_Layout) == 80

_vp = ctypes.c_void_p
_u32 = ctypes.c_uint32
_u64 = ctypes.c_uint64
_int = ctypes.c_int
_size = ctypes.c_size_t
_gp = ctypes.POINTER(_Geometry)
_ap = ctypes.POINTER(_AttendArgs)

for _fn, (_res, _args) in {
    "kvmem_cuda_open": (_int, [_int, ctypes.POINTER(_vp)]),
    "kvmem_cuda_close": (None, [_vp]),
    "kvmem_cuda_error": (ctypes.c_char_p, []),
    "kvmem_cuda_name": (ctypes.c_char_p, [_vp]),
    "kvmem_cuda_alloc": (_int, [_vp, _size, ctypes.POINTER(_u64)]),
    "kvmem_cuda_free": (None, [_vp, _u64]),
    "kvmem_cuda_copy": (_int, [_vp, _u64, _u64, _size, _vp]),
    "kvmem_cuda_sync": (_int, [_vp, _vp]),
    "kvmem_cuda_register": (_int, [_vp, _vp]),
    "kvmem_cuda_unregister": (None, [_vp]),
    "kvmem_cuda_seq_pages": (
        _int,
        [_vp, _vp, _u32, ctypes.POINTER(_Page), _size],
    ),
    "kvmem_cuda_attend_workspace": (
        _int,
        [_vp, _gp, _ap, ctypes.POINTER(_size)],
    ),
    "kvmem_cuda_attend": (_int, [_vp, _gp, _ap, _vp]),
    "kvmem_cuda_encode": (_int, [_vp, _gp, _u32, _u64, _u32, _vp]),
    "kvmem_cuda_scrub": (_int, [_vp, _gp, _u64, _u32, _u64, _u64, _vp]),
    "kvmem_cuda_session_memory": (
        _int,
        [_vp, ctypes.POINTER(_u64), ctypes.POINTER(_size)],
    ),
    "kvmem_page_layout": (_int, [_gp, _int, ctypes.POINTER(_Layout)]),
    "kvmem_seq_attended": (
        _int,
        [
            _vp,
            _u32,
            ctypes.POINTER(ctypes.c_float),
            _size,
            _u32,
            _u32,
            ctypes.c_float,
        ],
    ),
}.items():
    getattr(_lib, _fn).restype = _res
    getattr(_lib, _fn).argtypes = _args


def _fail(ret, what):
    raise Error(-ret, "%s: %s" % (what, _lib.kvmem_cuda_error().decode()))


def _is_torch(x):
    return hasattr(x, "is_cuda") and hasattr(x, "detach")


def on_device(x: Any) -> bool:
    """Whether @x is GPU memory: a CUDA tensor, or a CUDA array."""
    if _is_torch(x):
        return bool(x.is_cuda)
    return hasattr(x, "__cuda_array_interface__")


class Device:
    """One GPU with kvmem's kernels loaded (kvmem_cuda_open()).

    Raises kvmem.Error: ENODEV without a driver or that GPU, EOPNOTSUPP
    when libkvmem was built without nvcc or the driver is too old. close()
    (or the end of a with block) frees its DeviceArrays and unregisters
    the caches registered with it.
    """

    def __init__(self, ordinal: int = 0) -> None:
        self._cu = None
        h = _vp()
        ret = _lib.kvmem_cuda_open(ordinal, ctypes.byref(h))
        if ret:
            _fail(ret, "kvmem_cuda_open")
        self._cu = h
        self.ordinal = ordinal
        self._arrays: weakref.WeakSet[DeviceArray] = weakref.WeakSet()
        self._caches: weakref.WeakSet[Cache] = weakref.WeakSet()

    def _handle(self):
        if not self._cu:
            raise ValueError("the device is closed")
        return self._cu

    @property
    def name(self) -> str:
        """The GPU's name, as the driver gives it."""
        return _lib.kvmem_cuda_name(self._handle()).decode()

    def empty(
        self, shape: int | _Seq[int], dtype: npt.DTypeLike = np.float32
    ) -> DeviceArray:
        """An uninitialised DeviceArray on this GPU."""
        return DeviceArray(self, shape, dtype)

    def array(self, a: npt.ArrayLike) -> DeviceArray:
        """A DeviceArray holding a copy of the host array @a."""
        a = np.ascontiguousarray(a)
        d = DeviceArray(self, a.shape, a.dtype)
        d.copy_from(a)
        return d

    def synchronize(self, stream: int | None = None) -> None:
        """Wait for everything enqueued on @stream (a CUstream, or None)."""
        ret = _lib.kvmem_cuda_sync(self._handle(), stream)
        if ret:
            _fail(ret, "kvmem_cuda_sync")

    def _copy(self, dst, src, nbytes, stream=None):
        if nbytes:
            ret = _lib.kvmem_cuda_copy(self._handle(), dst, src, nbytes, stream)
            if ret:
                _fail(ret, "kvmem_cuda_copy")

    def _register(self, cache):
        ret = _lib.kvmem_cuda_register(self._handle(), cache._handle())
        if ret:
            _fail(ret, "kvmem_cuda_register")
        cache._cuda = self
        cache._cuda_gen += 1
        self._caches.add(cache)

    def close(self) -> None:
        if self._cu:
            for c in list(self._caches):
                c.unregister()
            for a in list(self._arrays):
                a.free()
            _lib.kvmem_cuda_close(self._cu)
            self._cu = None

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if _lib is not None:
            self.close()

    def __repr__(self) -> str:
        return "Device(%d: %s)" % (
            self.ordinal,
            self.name if self._cu else "closed",
        )


class DeviceArray:
    """A C-contiguous array in GPU memory that kvmem allocated.

    For programs without a CUDA framework (kvmem_cuda_alloc()): it has
    __cuda_array_interface__, numpy() copies it to the host and
    copy_from() fills it from there. Freed by free(), by garbage
    collection, or with its Device.
    """

    def __init__(
        self,
        device: Device,
        shape: int | _Seq[int],
        dtype: npt.DTypeLike = np.float32,
    ) -> None:
        self.ptr = 0
        self.device = device
        self.shape = tuple(int(n) for n in np.atleast_1d(shape))
        if any(n < 0 for n in self.shape):
            raise ValueError("a device array of shape %s" % (self.shape,))
        self.dtype = np.dtype(dtype)
        self.nbytes = self.dtype.itemsize
        for n in self.shape:
            self.nbytes *= n
        if self.nbytes >= 1 << 62:
            raise ValueError("a device array of %d bytes" % self.nbytes)
        if self.nbytes:
            addr = _u64()
            ret = _lib.kvmem_cuda_alloc(
                device._handle(), self.nbytes, ctypes.byref(addr)
            )
            if ret:
                _fail(ret, "kvmem_cuda_alloc")
            self.ptr = addr.value
        device._arrays.add(self)

    def _live(self):
        if self.nbytes and not self.ptr:
            raise ValueError("the device array is freed")
        return self.ptr

    @property
    def __cuda_array_interface__(self):
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self._live(), False),
            "strides": None,
            "version": 3,
        }

    def numpy(self) -> np.ndarray:
        """A host copy."""
        a = np.empty(self.shape, self.dtype)
        self.device._copy(a.ctypes.data, self._live(), self.nbytes)
        self.device.synchronize()
        return a

    def copy_from(self, a: npt.ArrayLike) -> None:
        """Fill the array from the host array @a, of its shape and dtype."""
        a = np.ascontiguousarray(a, dtype=self.dtype)
        if a.shape != self.shape:
            raise ValueError(
                "a host array of shape %s into one of %s" % (a.shape, self.shape)
            )
        self.device._copy(self._live(), a.ctypes.data, self.nbytes)
        self.device.synchronize()

    def free(self) -> None:
        if self.ptr and self.device._cu:
            _lib.kvmem_cuda_free(self.device._cu, self.ptr)
        self.ptr = 0

    def __del__(self) -> None:
        if _lib is not None:
            self.free()

    def __repr__(self) -> str:
        return "DeviceArray(%s, %s, on %r)" % (self.shape, self.dtype, self.device)


def to_host(x: GpuArray) -> np.ndarray:
    """GPU memory @x as a host array: a NumPy copy of it."""
    if _is_torch(x):
        return x.detach().cpu().numpy()
    if isinstance(x, DeviceArray):
        return x.numpy()
    raise TypeError(
        "%s in GPU memory is neither a PyTorch tensor nor a "
        "kvmem.cuda.DeviceArray: copy it to the host first" % type(x).__name__
    )


class _TorchMemory:
    """Scratch and output as tensors of PyTorch's caching allocator, work
    on its current stream of the query's device."""

    def __init__(self, dev, like):
        self.torch = sys.modules["torch"]
        if like.device.index != dev.ordinal:
            raise ValueError(
                "a tensor on %s, kvmem's kernels on GPU %d"
                % (like.device, dev.ordinal)
            )
        self.device = like.device
        self.stream = _vp(self.torch.cuda.current_stream(like.device).cuda_stream)

    def floats(self, x):
        x = x.detach().to(self.torch.float32).contiguous()
        return x, x.data_ptr()

    def empty(self, nbytes):
        t = self.torch.empty(nbytes, dtype=self.torch.uint8, device=self.device)
        return t, t.data_ptr()

    def empty_like(self, x):
        t = self.torch.empty_like(x)
        return t, t.data_ptr()

    def done(self, keep):
        pass


def _cai_stream(cai):
    """The CUstream a __cuda_array_interface__ producer names: its own,
    or 1 (CU_STREAM_LEGACY) and 2 (CU_STREAM_PER_THREAD), which the driver
    takes as handles too; None for the default stream."""
    stream = cai.get("stream")
    return _vp(stream) if stream else None


class _ArrayMemory:
    """Scratch and output as DeviceArrays, work on the stream the query's
    producer names (the default stream for a DeviceArray)."""

    def __init__(self, dev, like):
        if isinstance(like, DeviceArray) and like.device is not dev:
            raise ValueError(
                "GPU memory on %r, kvmem's kernels on %r" % (like.device, dev)
            )
        self.dev = dev
        cai = getattr(like, "__cuda_array_interface__", None)
        self.stream = _cai_stream(cai) if cai else None

    def floats(self, x):
        cai = x.__cuda_array_interface__
        shape = tuple(cai["shape"])
        if np.dtype(cai["typestr"]) != np.float32:
            raise ValueError("q in GPU memory must be float32, not %s" % cai["typestr"])
        strides = cai.get("strides")
        if strides is not None:
            want = [4] * len(shape)
            for i in range(len(shape) - 2, -1, -1):
                want[i] = want[i + 1] * shape[i + 1]
            if tuple(strides) != tuple(want) and np.prod(shape) > 1:
                raise ValueError("q in GPU memory must be C-contiguous")
        return _Shaped(shape), cai["data"][0]

    def empty(self, nbytes):
        a = DeviceArray(self.dev, (nbytes,), np.uint8)
        return a, a.ptr

    def empty_like(self, x):
        a = DeviceArray(self.dev, x.shape, np.float32)
        return a, a.ptr

    def done(self, keep):
        for a in keep:
            a.free()


class _Shaped:
    def __init__(self, shape):
        self.shape = shape


def _table(dev, seq, layer):
    """The block table of @seq's @layer (kvmem_cuda_seq_pages())."""
    g = seq.cache.geometry
    cap = seq.len(layer) // g.tokens_per_page + 2
    while True:
        t = (_Page * cap)()
        n = _lib.kvmem_cuda_seq_pages(dev._handle(), seq._handle(), layer, t, cap)
        if n < 0:
            _fail(n, "kvmem_cuda_seq_pages")
        if n <= cap:
            return t[:n]
        cap = n


def attend(cache, seqs, layer, q, shape, nq, erasure, scale, alpha):
    """kvmem_cuda_attend() for the Sequence methods: @q in GPU memory,
    @shape what it must be (-1: any), @nq query tokens a sequence; each
    page's share of the attention into its importance with weight @alpha
    (kvmem_seq_attended()), as the CPU's attention does."""
    dev = getattr(cache, "_cuda", None)
    if dev is None:
        raise ValueError(
            "q is in GPU memory, and the cache is not registered with a GPU: "
            "cache.register(kvmem.cuda.Device(n)) first"
        )
    if not seqs:
        raise Error(errno.EINVAL, "kvmem_cuda_attend: an empty batch")
    tables = []
    for s in seqs:
        if s.cache is not cache:
            raise ValueError("a batch of sequences of another cache")
        layer = s._layer(layer)
        t = _table(dev, s, layer)
        if not t:
            raise Error(errno.EINVAL, "kvmem_cuda_attend: layer %d is empty" % layer)
        tables.append(t)
    mass = (ctypes.c_float * sum(len(t) for t in tables))()
    out, stats = _attend(
        dev, cache.geometry, tables, q, shape, nq, erasure, scale, mass
    )
    first = 0
    for s, t in zip(seqs if alpha >= 0 else (), tables):
        ret = _lib.kvmem_seq_attended(
            s._handle(),
            layer,
            (ctypes.c_float * len(t)).from_buffer(
                mass, first * ctypes.sizeof(ctypes.c_float)
            ),
            len(t),
            out.shape[-2],
            nq,
            alpha,
        )
        if ret:
            _fail(ret, "kvmem_seq_attended")
        first += len(t)
    return out, stats


def _attend(dev, g, tables, q, shape, nq, erasure, scale, mass=None):
    """kvmem_cuda_attend() over @tables, one list of _Page a sequence;
    each page's mass into @mass (host memory, a float a page) if given."""
    if not on_device(q):
        raise ValueError("q must be in GPU memory")
    mem = (_TorchMemory if _is_torch(q) else _ArrayMemory)(dev, q)
    q, qptr = mem.floats(q)
    got = tuple(q.shape)
    if len(got) != len(shape) or any(w not in (-1, n) for w, n in zip(shape, got)):
        raise ValueError(
            "q has shape %s, expected %s"
            % (got, tuple("n" if w == -1 else w for w in shape))
        )
    n_heads = got[-2]
    pages = (_Page * sum(len(t) for t in tables))(*[p for t in tables for p in t])
    offsets = (_u32 * (len(tables) + 1))(
        *itertools.accumulate([0] + [len(t) for t in tables])
    )
    stats = (_u64 * len(_STATS))()
    a = _AttendArgs(
        q=qptr,
        batch=len(tables),
        n_heads=n_heads,
        nq=nq,
        erasure=_name(ERASURES, erasure, "erasure"),
        total_pages=len(pages),
        max_pages=max(len(t) for t in tables),
        scale=scale,
    )
    ws = _size()
    ret = _lib.kvmem_cuda_attend_workspace(
        dev._handle(), ctypes.byref(g._g), ctypes.byref(a), ctypes.byref(ws)
    )
    if ret:
        _fail(ret, "kvmem_cuda_attend_workspace")
    out, a.out = mem.empty_like(q)
    keep = []
    try:
        # (field, bytes, what to copy there first: the kernels add to
        # the stats, and write every page's mass and the workspace)
        for field, nbytes, host in (
            ("pages", ctypes.sizeof(pages), pages),
            ("seq_pages", ctypes.sizeof(offsets), offsets),
            ("stats", ctypes.sizeof(stats), stats),
            ("workspace", ws.value, None),
        ) + ((("mass", ctypes.sizeof(mass), None),) if mass is not None else ()):
            buf, ptr = mem.empty(max(nbytes, 1))
            keep.append(buf)
            setattr(a, field, ptr)
            if host is not None:
                dev._copy(ptr, ctypes.addressof(host), nbytes, mem.stream)
        ret = _lib.kvmem_cuda_attend(
            dev._handle(), ctypes.byref(g._g), ctypes.byref(a), mem.stream
        )
        if ret:
            _fail(ret, "kvmem_cuda_attend")
        dev._copy(ctypes.addressof(stats), a.stats, ctypes.sizeof(stats), mem.stream)
        if mass is not None:
            dev._copy(
                ctypes.addressof(mass), a.mass, ctypes.sizeof(mass), mem.stream
            )
    finally:
        # The host tables and the scratch must outlive what the stream
        # does with them, a failed call's included.
        synced = _lib.kvmem_cuda_sync(dev._handle(), mem.stream)
        mem.done(keep)
    if synced:
        _fail(synced, "kvmem_cuda_sync")
    return out, dict(zip(_STATS, stats))


class DeviceView:
    """GPU memory that is not the caller's to free: a kvmemd session's
    (Cache.gpu_memory()), valid while its cache is registered. uint8, with
    __cuda_array_interface__."""

    def __init__(self, cache: Cache, addr: int, nbytes: int) -> None:
        self.cache = cache
        self.device = cache.device
        self._gen = cache._cuda_gen
        self.ptr = addr
        self.nbytes = nbytes
        self.shape = (nbytes,)

    @property
    def __cuda_array_interface__(self):
        c = self.cache
        if not c._c or c.device is not self.device or c._cuda_gen != self._gen:
            raise ValueError("the session's GPU memory is unmapped")
        return {
            "shape": self.shape,
            "typestr": "|u1",
            "data": (self.ptr, False),
            "strides": None,
            "version": 3,
        }


def session_memory(cache: Cache) -> DeviceView:
    """Cache.gpu_memory(): kvmem_cuda_session_memory()."""
    addr, nbytes = _u64(), _size()
    ret = _lib.kvmem_cuda_session_memory(
        cache._handle(), ctypes.byref(addr), ctypes.byref(nbytes)
    )
    if ret:
        _fail(ret, "kvmem_cuda_session_memory")
    return DeviceView(cache, addr.value, nbytes.value)


def _contiguous(cai, itemsize):
    shape, strides = tuple(cai["shape"]), cai.get("strides")
    if strides is None or int(np.prod(shape)) <= 1:
        return True
    want, step = [], itemsize
    for n in reversed(shape):
        want.insert(0, step)
        step *= n
    return tuple(strides) == tuple(want)


def _values(x, what, dev):
    """K or V in GPU memory: (keep, address, shape, enum kvmem_cuda_dtype,
    stream)."""
    if _is_torch(x):
        torch = sys.modules["torch"]
        codes = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
        if not x.is_cuda or x.dtype not in codes:
            raise ValueError("%s must be a CUDA tensor of float32, float16 or "
                             "bfloat16, not %s on %s" % (what, x.dtype, x.device))
        mem = _TorchMemory(dev, x)
        x = x.detach().contiguous()
        return x, x.data_ptr(), tuple(x.shape), codes[x.dtype], mem.stream
    if isinstance(x, DeviceArray) and x.device is not dev:
        raise ValueError("%s is on %r, the pages on %r" % (what, x.device, dev))
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is None:
        raise ValueError("%s must be in GPU memory" % what)
    code = _DTYPES.get(np.dtype(cai["typestr"]).str)
    if code is None or not _contiguous(cai, np.dtype(cai["typestr"]).itemsize):
        raise ValueError(
            "%s in GPU memory must be C-contiguous float32 or float16, not %s"
            % (what, cai["typestr"])
        )
    return x, cai["data"][0], tuple(cai["shape"]), code, _cai_stream(cai)


def _check_range(what, value, bits):
    if not 0 <= value < 1 << bits:
        raise ValueError("%s %d does not fit in %d bits" % (what, value, bits))


class Pages:
    """Pages in GPU memory, kept the way a paged-attention engine keeps its
    blocks: the caller decides which page holds which tokens and passes
    block tables. kvmem writes them (the encode kernel, from K and V on the
    GPU), attends over them (decode-on-load) and checks them (the scrub
    kernel), with the byte layout of kvmem/page.h.

    @npages pages of @geometry, each page_bytes long (the larger of the
    sealed and the FP16 kind), in @memory: None to allocate a DeviceArray,
    else C-contiguous GPU memory of at least npages * page_bytes bytes,
    16-byte aligned (a uint8 CUDA tensor, Cache.gpu_memory() of a kvmemd
    session). The memory must stay: a call after it was freed or unmapped
    raises ValueError. Block tables may name only pages this object wrote,
    as it wrote them.
    """

    def __init__(
        self,
        device: Device,
        geometry: Geometry,
        npages: int,
        memory: GpuArray | None = None,
    ) -> None:
        self.device = device
        self.geometry = geometry
        self.npages = int(npages)
        if self.npages < 1:
            raise ValueError("Pages of %d pages" % self.npages)
        sizes = []
        for hot in (0, 1):
            lay = _Layout()
            ret = _lib.kvmem_page_layout(
                ctypes.byref(geometry._g), hot, ctypes.byref(lay)
            )
            if ret:
                _fail(ret, "kvmem_page_layout")
            sizes.append(lay.size)
        self.page_bytes = max(sizes)
        if memory is None:
            memory = DeviceArray(device, (self.npages * self.page_bytes,), np.uint8)
        if isinstance(memory, (DeviceArray, DeviceView)):
            if memory.device is not device:
                raise ValueError(
                    "the memory is on %r, not %r" % (memory.device, device)
                )
        elif _is_torch(memory):
            _TorchMemory(device, memory)  # on this GPU, or ValueError
        self.memory = memory
        self.base()
        # page -> (hot, token_start, ntokens, sealed): what write() left
        self._written: Dict[int, Tuple[bool, int, int, bool]] = {}

    def base(self) -> int:
        """The device address of page 0: the memory's, checked again on
        every call."""
        cai = self.memory.__cuda_array_interface__
        dt = np.dtype(cai["typestr"])
        have = dt.itemsize
        for n in cai["shape"]:
            have *= n
        need = self.npages * self.page_bytes
        if not _contiguous(cai, dt.itemsize):
            raise ValueError("the pages' memory must be C-contiguous")
        if have < need:
            raise ValueError(
                "%d pages of %d bytes need %d bytes of GPU memory, not %d"
                % (self.npages, self.page_bytes, need, have)
            )
        if not cai["data"][0] or cai["data"][0] % 16:
            raise ValueError("the pages' memory must be 16-byte aligned")
        return cai["data"][0]

    def address(self, page: int, base: int | None = None) -> int:
        """The device address of page @page."""
        if not 0 <= page < self.npages:
            raise ValueError("page %d of %d" % (page, self.npages))
        return (self.base() if base is None else base) + page * self.page_bytes

    def write(
        self,
        page: int,
        k: GpuArray,
        v: GpuArray,
        layer: int,
        token_start: int,
        t0: int = 0,
        hot: bool = False,
        sealed: bool | None = None,
        seq: int = 0,
        generation: int = 0,
    ) -> None:
        """Rows [t0, t0 + n) of page @page from @k and @v, [n, kv_heads,
        head_dim] in GPU memory (float32, float16, or bfloat16 tensors).

        A page of the geometry's format (@hot False) is written whole, t0
        0, and sealed; an FP16 page (@hot True: sink tokens, the tail) can
        take rows as they come and is sealed when @sealed says so. The
        header gets @seq, @layer, @token_start, @generation and ntokens t0
        + n. One launch; the call waits for it.
        """
        g = self.geometry
        sealed = not hot if sealed is None else sealed
        kp = _values(k, "k", self.device)
        vp = _values(v, "v", self.device)
        n = kp[2][0] if kp[2] else 0
        want = (n, g.kv_heads, g.head_dim)
        if kp[2] != want or vp[2] != want or kp[3] != vp[3]:
            raise ValueError(
                "k %s and v %s must both be [n, %d, %d] of one dtype"
                % (kp[2], vp[2], g.kv_heads, g.head_dim)
            )
        if not 0 <= layer < g.layers:
            raise ValueError("layer %d of %d" % (layer, g.layers))
        if n < 1 or t0 < 0 or t0 + n > g.tokens_per_page:
            raise ValueError(
                "rows %d..%d of a page of %d tokens" % (t0, t0 + n, g.tokens_per_page)
            )
        if not hot and (t0 or not sealed):
            raise ValueError("a page of the sealed kind is written whole and sealed")
        _check_range("token_start + ntokens", token_start + t0 + n, 32)
        _check_range("token_start", token_start, 32)
        _check_range("seq", seq, 64)
        _check_range("generation", generation, 64)
        was = self._written.get(page)
        if t0 and (not was or was != (True, token_start, t0, False)):
            raise ValueError(
                "rows from %d of page %d, which holds %s"
                % (t0, page, "%d rows" % was[2] if was else "none")
                + (", sealed" if was and was[3] else "")
            )
        job = _EncodeJob(
            page=self.address(page),
            k=kp[1],
            v=vp[1],
            seq=seq,
            generation=generation,
            layer=layer,
            token_start=token_start,
            t0=t0,
            n=n,
            flags=(HDR_HOT if hot else 0) | (HDR_SEALED if sealed else 0),
        )
        stream = kp[4]
        if vp[4] is not None and (stream is None or vp[4].value != stream.value):
            self.device.synchronize(vp[4])  # v's producer is done with it
        mem: _TorchMemory | _ArrayMemory
        if _is_torch(k):
            mem = _TorchMemory(self.device, k)
        else:
            mem = _ArrayMemory(self.device, k)
        self._written.pop(page, None)
        buf, ptr = mem.empty(ctypes.sizeof(job))
        try:
            self.device._copy(ptr, ctypes.addressof(job), ctypes.sizeof(job), stream)
            ret = _lib.kvmem_cuda_encode(
                self.device._handle(), ctypes.byref(g._g), kp[3], ptr, 1, stream
            )
            if ret:
                _fail(ret, "kvmem_cuda_encode")
        finally:
            synced = _lib.kvmem_cuda_sync(self.device._handle(), stream)
            mem.done([buf])
        if synced:
            _fail(synced, "kvmem_cuda_sync")
        self._written[page] = (bool(hot), token_start, t0 + n, bool(sealed))

    def _table(self, entries, base):
        """A block table of (page, token_start, ntokens, hot) in token
        order from 0 without gaps, each entry what write() left in its
        page: the kernel trusts the table."""
        tpp = self.geometry.tokens_per_page
        out, end = [], 0
        for page, start, ntokens, hot in entries:
            if start != end or not 1 <= ntokens <= tpp:
                raise ValueError(
                    "a block table entry of tokens %d..%d after token %d: "
                    "entries are in token order without gaps, 1 to %d tokens"
                    % (start, start + ntokens, end, tpp)
                )
            addr = self.address(page, base)
            was = self._written.get(page)
            if not was or was[:3] != (bool(hot), start, ntokens):
                raise ValueError(
                    "block table entry %r: page %d holds %s"
                    % ((page, start, ntokens, hot), page,
                       "(hot %s, tokens %d.., %d of them)" % was[:3]
                       if was else "nothing written")
                )
            out.append(
                _Page(
                    addr=addr,
                    token_start=start,
                    ntokens=ntokens,
                    flags=HDR_HOT if hot else 0,
                )
            )
            end += ntokens
        if not out:
            raise ValueError("an empty block table")
        return out, end

    def attend(
        self,
        tables: Iterable[Iterable[TableEntry]],
        q: GpuArray,
        nq: int = 1,
        erasure: str = "interpolate",
        scale: float = 0.0,
    ) -> Tuple[ArrayOut, Stats]:
        """Attention over the pages for a batch of sequences, one launch.

        @tables holds, for each sequence, its pages in token order:
        (page, token_start, ntokens, hot) tuples. q is [batch, n_heads,
        head_dim] in GPU memory, or [batch, nq, n_heads, head_dim] for
        @nq query tokens a sequence, its last nq (causal). Returns (out,
        stats): out float32 like q on the GPU, stats the kernel's counts
        for the batch.
        """
        base = self.base()
        built = [self._table(t, base) for t in tables]
        if not built:
            raise ValueError("an empty batch")
        if nq < 1 or any(end < nq for _, end in built):
            raise ValueError("%d query tokens of sequences this short" % nq)
        D = self.geometry.head_dim
        shape = (len(built), -1, D) if nq == 1 else (len(built), nq, -1, D)
        return _attend(
            self.device,
            self.geometry,
            [t for t, _ in built],
            q,
            shape,
            nq,
            erasure,
            scale,
        )

    def scrub(self, pages: Iterable[int]) -> List[Tuple[int, Counts]]:
        """Check pages @pages (indices) and correct them in place
        (kvmem_page_scrub() on the GPU). Returns, for each, (status, counts):
        kvmem_page_scrub()'s return (0, or a negative errno) and what it
        found, by region, as Sequence.read() reports it."""
        pages = list(pages)
        if not pages:
            return []
        base = self.base()
        table = (_Page * len(pages))(
            *[_Page(addr=self.address(p, base)) for p in pages]
        )
        counts = (_PageCounts * len(pages))()
        status = (ctypes.c_int32 * len(pages))()
        mem: _TorchMemory | _ArrayMemory
        if _is_torch(self.memory):
            mem = _TorchMemory(self.device, self.memory)
        else:
            mem = _ArrayMemory(self.device, self.memory)
        stream = mem.stream
        keep = []
        try:
            ptrs = []
            host: Any
            for host in (table, counts, status):
                buf, ptr = mem.empty(ctypes.sizeof(host))
                keep.append(buf)
                ptrs.append(ptr)
            d = self.device
            d._copy(ptrs[0], ctypes.addressof(table), ctypes.sizeof(table), stream)
            ret = _lib.kvmem_cuda_scrub(
                d._handle(),
                ctypes.byref(self.geometry._g),
                ptrs[0],
                len(pages),
                ptrs[1],
                ptrs[2],
                stream,
            )
            if ret:
                _fail(ret, "kvmem_cuda_scrub")
            d._copy(ctypes.addressof(counts), ptrs[1], ctypes.sizeof(counts), stream)
            d._copy(ctypes.addressof(status), ptrs[2], ctypes.sizeof(status), stream)
        finally:
            synced = _lib.kvmem_cuda_sync(self.device._handle(), stream)
            mem.done(keep)
        if synced:
            _fail(synced, "kvmem_cuda_sync")
        out = []
        for st, c in zip(status, counts):
            found: Counts = {
                part: _struct_dict(getattr(c, part))
                for part in ("header", "scales", "payload")
            }
            found["values_erased"] = c.values_erased
            out.append((st, found))
        return out
