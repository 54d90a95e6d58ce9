# SPDX-License-Identifier: MIT
"""kvmem - protected, quantized KV-cache pages and decode-on-load attention.

A binding of libkvmem (man 3 libkvmem) with ctypes: no compiler is needed
beyond the one that built the library. Arrays go in as NumPy arrays or
anything NumPy can read without copying twice (CPU PyTorch tensors
included) and come back as NumPy float32 arrays; torch.from_numpy() makes
tensors of them without a copy.

    import numpy as np, kvmem

    g = kvmem.Geometry(layers=2, kv_heads=8, head_dim=128)
    with kvmem.Cache.embedded(g, 64 << 20) as cache:   # or Cache.connect(g)
        seq = cache.sequence()
        seq.append(0, k, v)             # k, v: [tokens, kv_heads, head_dim]
        out, stats = seq.attend(0, q)   # q: [n_heads, head_dim]

The library is $KVMEM_LIB when that is set; else the first that loads
of build/libkvmem.so of the source tree this package sits in, the one
make install put in its LIBDIR, libkvmem.so.0 on the dynamic loader's
path, and libkvmem.so.0 in kvmem.pc's libdir (pkg-config). Without one,
importing kvmem raises ImportError saying what it tried; kvmem.library_path
names the one loaded, kvmem.library_version its version (kvmem_version(),
the package's __version__ when the two were built together). Failures of calls raise kvmem.Error, an OSError with
the errno and libkvmem's sentence.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import weakref
from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Tuple

import numpy as np

from ._version import __version__

if TYPE_CHECKING:
    from .cuda import Device, DeviceView

# Arrays in: NumPy arrays, what NumPy reads (lists, CPU PyTorch tensors),
# or GPU memory (a CUDA tensor, __cuda_array_interface__). Arrays out:
# NumPy float32 arrays, or on the GPU memory of the query's kind.
ArrayIn = Any
ArrayOut = Any
# attend()'s counts, by name; read()'s, by region, and values_erased
Stats = Dict[str, int]
Counts = Dict[str, Any]

__all__ = [
    "__version__",
    "library_path",
    "library_version",
    "Cache",
    "Error",
    "Geometry",
    "Sequence",
    "FORMATS",
    "CODECS",
    "ERASURES",
    "PREFIX_KEY_BYTES",
]

FORMATS: Dict[str, int] = {
    "fp16": 0,
    "int8": 1,
    "int4": 2,
    "int2": 3,
    "fp8": 4,
    "lm2": 5,
    "lm3": 6,
    "lm4": 7,
    "vq2": 8,
}
CODECS: Dict[str, int] = {"h74": 0, "h84": 1, "golay24": 2, "secded72": 3}
ERASURES: Dict[str, int] = {"interpolate": 0, "zero": 1, "keep": 2}
_KEY_SCALES = {"group": 0, "channel": 1}
_ROTATIONS = {"none": 0, "hadamard": 1}


class Error(OSError):
    """A libkvmem call failed: .errno, and .strerror in the library's words."""

    errno: int
    strerror: str


# ---- the library -------------------------------------------------------


def _pkg_config_libdir() -> str | None:
    """The libdir of kvmem.pc, as $PKG_CONFIG (else pkg-config) finds it."""
    prog = os.environ.get("PKG_CONFIG") or "pkg-config"
    try:
        r = subprocess.run(
            [prog, "--variable=libdir", "kvmem"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    out = r.stdout.decode(errors="replace").strip()
    return out if r.returncode == 0 and out else None


def _candidates() -> Iterator[Tuple[str, str | None]]:
    """Where the library may be, in order: (how it was found, path).

    $KVMEM_LIB alone when it is set: a library named on purpose is not
    replaced by another one. Else the build tree next to this package, the
    library directory make install wrote into _install.py, the dynamic
    loader's search (LD_LIBRARY_PATH, ld.so.cache), and kvmem.pc's libdir.
    """
    path = os.environ.get("KVMEM_LIB")
    if path:
        yield "$KVMEM_LIB", path
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield "the source tree's build", os.path.normpath(
        os.path.join(here, "..", "..", "build", "libkvmem.so")
    )
    try:
        from ._install import LIBDIR
    except ImportError:
        pass
    else:
        yield "make install's LIBDIR", os.path.join(LIBDIR, "libkvmem.so.0")
    yield "the dynamic loader's path", "libkvmem.so.0"
    libdir = _pkg_config_libdir()
    if libdir:
        yield "pkg-config --variable=libdir kvmem", os.path.join(
            libdir, "libkvmem.so.0"
        )
    else:
        yield "pkg-config --variable=libdir kvmem", None


def _open_library() -> Tuple[ctypes.CDLL, str]:
    """The first library of _candidates() that loads, and its path; an
    ImportError listing every try and what to do when none does."""
    tried = []
    for how, path in _candidates():
        if path is None:
            tried.append("%s: kvmem.pc not found" % how)
            continue
        if os.sep in path and not os.path.exists(path):
            tried.append("%s: %s: no such file" % (how, path))
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s: %s" % (how, e))
    raise ImportError(
        "kvmem: libkvmem could not be loaded. Tried:\n  %s\n"
        "Build it (make, in the source tree: build/libkvmem.so), or set "
        "KVMEM_LIB to the path of libkvmem.so, or install it (make install; "
        "then ldconfig, or LD_LIBRARY_PATH=$PREFIX/lib)."
        % "\n  ".join(tried),
        name="kvmem",
    )


class _Geometry(ctypes.Structure):
    _fields_ = [
        ("layers", ctypes.c_uint32),
        ("kv_heads", ctypes.c_uint32),
        ("head_dim", ctypes.c_uint32),
        ("tokens_per_page", ctypes.c_uint32),
        ("group_size", ctypes.c_uint32),
        ("sink_tokens", ctypes.c_uint32),
        ("format", ctypes.c_uint8),
        ("codec", ctypes.c_uint8),
        ("key_scales", ctypes.c_uint8),
        ("rotation", ctypes.c_uint8),
        ("resv", ctypes.c_uint8 * 4),
    ]


# kvmem_connect_opts.flags (kvmem/kvmem.h)
_CONNECT_NO_ARCHIVE = 1 << 0
_CONNECT_GPU_TIER = 1 << 1


class _ConnectOpts(ctypes.Structure):
    _fields_ = [
        ("quota_bytes", ctypes.c_uint64),
        ("sq_entries", ctypes.c_uint32),
        ("cq_entries", ctypes.c_uint32),
        ("spin_us", ctypes.c_int32),
        ("gpu_mib", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("resv", ctypes.c_uint32),
    ]


class _CacheStats(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "arena_bytes",
            "used_bytes",
            "hot_pages",
            "sealed_pages",
            "seqs",
            "ring_errors",
        )
    ]


class _PageDesc(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("size", ctypes.c_size_t),
        ("token_start", ctypes.c_uint32),
        ("ntokens", ctypes.c_uint32),
        ("refs", ctypes.c_uint32),
        ("sealed", ctypes.c_uint8),
        ("hot", ctypes.c_uint8),
        ("format", ctypes.c_uint8),
        ("codec", ctypes.c_uint8),
        ("importance", ctypes.c_float),
    ]


class _AttendOpts(ctypes.Structure):
    _fields_ = [
        ("n_heads", ctypes.c_uint32),
        ("erasure", ctypes.c_uint32),
        ("scale", ctypes.c_float),
        ("importance_alpha", ctypes.c_float),
        ("threads", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("resv", ctypes.c_uint32 * 2),
    ]


_ATTEND_INT8_SCORES = 1 << 0


class _AttendStats(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "words_clean",
            "words_corrected",
            "words_uncorrectable",
            "values_erased",
            "headers_uncorrectable",
        )
    ]


class _EccCounts(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in ("clean", "corrected", "uncorrectable", "bits_corrected")
    ]


class _PageCounts(ctypes.Structure):
    _fields_ = [
        ("header", _EccCounts),
        ("scales", _EccCounts),
        ("payload", _EccCounts),
        ("values_erased", ctypes.c_uint64),
    ]


# The sizes kvmem/kvmem.h and kvmem/page.h fix.
assert ctypes.sizeof(_Geometry) == 32
assert ctypes.sizeof(_ConnectOpts) == 32
assert ctypes.sizeof(_AttendOpts) == 32
assert ctypes.sizeof(_PageCounts) == 104
assert ctypes.sizeof(_PageDesc) == 40

_vp = ctypes.c_void_p
_u32 = ctypes.c_uint32
_int = ctypes.c_int
_fp = ctypes.POINTER(ctypes.c_float)


library_path: str = ""  # the libkvmem loaded, as it was opened


def _load():
    global library_path
    lib, library_path = _open_library()
    sigs = {
        "kvmem_geometry_default": (None, [ctypes.POINTER(_Geometry)]),
        "kvmem_geometry_explain": (
            _int,
            [ctypes.POINTER(_Geometry), ctypes.c_char_p, ctypes.c_size_t],
        ),
        "kvmem_open_embedded": (
            _int,
            [ctypes.POINTER(_Geometry), ctypes.c_size_t, ctypes.POINTER(_vp)],
        ),
        "kvmem_connect": (
            _int,
            [
                ctypes.c_char_p,
                ctypes.POINTER(_Geometry),
                ctypes.POINTER(_ConnectOpts),
                ctypes.POINTER(_vp),
            ],
        ),
        "kvmem_connect_error": (ctypes.c_char_p, []),
        "kvmem_strerror": (ctypes.c_char_p, [_int]),
        "kvmem_version": (ctypes.c_char_p, []),
        "kvmem_session_id": (_u32, [_vp]),
        "kvmem_reconnect": (_int, [_vp]),
        "kvmem_close": (None, [_vp]),
        "kvmem_cache_stats": (None, [_vp, ctypes.POINTER(_CacheStats)]),
        "kvmem_seq_create": (_int, [_vp, ctypes.POINTER(_vp)]),
        "kvmem_seq_append": (_int, [_vp, _u32, _fp, _fp, _u32]),
        "kvmem_seq_append_all": (_int, [_vp, _fp, _fp, _u32]),
        "kvmem_seq_len": (_u32, [_vp, _u32]),
        "kvmem_seq_pages": (
            _int,
            [_vp, _u32, ctypes.POINTER(_PageDesc), ctypes.c_size_t],
        ),
        "kvmem_seq_fork": (_int, [_vp, ctypes.POINTER(_vp)]),
        "kvmem_seq_truncate": (_int, [_vp, _u32]),
        "kvmem_seq_archive": (_int, [_vp, _u32, _u32, _u32]),
        "kvmem_seq_archive_budget": (_int, [_vp, ctypes.c_float, _u32, _u32]),
        "kvmem_seq_codebook_read": (
            ctypes.c_long,
            [
                _vp,
                _u32,
                _fp,
                ctypes.POINTER(ctypes.c_uint8),
                ctypes.POINTER(_EccCounts),
            ],
        ),
        "kvmem_seq_codebook_set": (_int, [_vp, _u32, _fp]),
        "kvmem_seq_free": (None, [_vp]),
        "kvmem_prefix_publish": (_int, [_vp, ctypes.c_char_p, _u32]),
        "kvmem_prefix_attach": (
            _int,
            [_vp, ctypes.c_char_p, _u32, ctypes.POINTER(_vp)],
        ),
        "kvmem_prefix_block_end": (_u32, [_vp, _u32]),
        "kvmem_prefix_keys": (
            _int,
            [_vp, ctypes.c_char_p, ctypes.POINTER(_u32), _u32, _vp, _u32],
        ),
        "kvmem_seq_release": (_int, [_vp]),
        "kvmem_seq_acquire": (_int, [_vp]),
        "kvmem_seq_read": (
            _int,
            [_vp, _u32, _u32, _u32, _u32, _fp, _fp, ctypes.POINTER(_PageCounts)],
        ),
        "kvmem_attend": (
            _int,
            [
                _vp,
                _u32,
                _fp,
                _fp,
                ctypes.POINTER(_AttendOpts),
                ctypes.POINTER(_AttendStats),
            ],
        ),
        "kvmem_attend_batch": (
            _int,
            [
                ctypes.POINTER(_vp),
                _u32,
                _u32,
                _fp,
                _fp,
                ctypes.POINTER(_AttendOpts),
                ctypes.POINTER(_AttendStats),
            ],
        ),
        "kvmem_attend_causal": (
            _int,
            [
                _vp,
                _u32,
                _fp,
                _u32,
                _u32,
                _fp,
                ctypes.POINTER(_AttendOpts),
                ctypes.POINTER(_AttendStats),
            ],
        ),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


_lib = _load()
library_version: str = _lib.kvmem_version().decode()


def _fail(ret, what, why=None):
    err = -ret
    raise Error(err, "%s: %s" % (what, why or _lib.kvmem_strerror(ret).decode()))


def _floats(x, shape, what):
    """@x as a C-contiguous float32 array of @shape (-1: any length), in
    host memory: GPU memory is copied here."""
    if hasattr(x, "detach"):  # a PyTorch tensor, on the CPU or a GPU
        x = x.detach().float().cpu().numpy()
    elif cuda.on_device(x):
        x = cuda.to_host(x)
    a = np.ascontiguousarray(x, dtype=np.float32)
    want = tuple(shape)
    if a.ndim != len(want) or any(w not in (-1, n) for w, n in zip(want, a.shape)):
        raise ValueError(
            "%s has shape %s, expected %s"
            % (what, a.shape, tuple("n" if w == -1 else w for w in want))
        )
    return a


def _ptr(a):
    return a.ctypes.data_as(_fp)


def _attend_opts(n_heads, erasure, scale, threads, importance_alpha, int8_scores):
    return _AttendOpts(
        n_heads=n_heads,
        erasure=_name(ERASURES, erasure, "erasure"),
        scale=scale,
        importance_alpha=importance_alpha,
        threads=threads,
        flags=_ATTEND_INT8_SCORES if int8_scores else 0,
    )


def _struct_dict(s):
    return {name: getattr(s, name) for name, _ in s._fields_}


# ---- geometry ----------------------------------------------------------


class Geometry:
    """The shape of every page of a cache (struct kvmem_geometry).

    Defaults are libkvmem's: 32 tokens a page, groups of 32 channels, 4
    sink tokens kept FP16, int4 values in extended Hamming(8,4), scales per
    token and group, no rotation. format is one of FORMATS, codec of
    CODECS, key_scales "group" or "channel", rotation "none" or "hadamard"
    (K and V rows stored rotated, as the lm formats want; reads and
    attention give the values back unrotated).
    """

    layers: int
    kv_heads: int
    head_dim: int
    tokens_per_page: int
    group_size: int
    sink_tokens: int

    def __init__(
        self,
        layers: int,
        kv_heads: int,
        head_dim: int,
        tokens_per_page: int | None = None,
        group_size: int | None = None,
        sink_tokens: int | None = None,
        format: str | int | None = None,
        codec: str | int | None = None,
        key_scales: str | int | None = None,
        rotation: str | int | None = None,
    ) -> None:
        g = _Geometry()
        _lib.kvmem_geometry_default(ctypes.byref(g))
        g.layers, g.kv_heads, g.head_dim = layers, kv_heads, head_dim
        if tokens_per_page is not None:
            g.tokens_per_page = tokens_per_page
        if group_size is not None:
            g.group_size = group_size
        if sink_tokens is not None:
            g.sink_tokens = sink_tokens
        if format is not None:
            g.format = _name(FORMATS, format, "format")
        if codec is not None:
            g.codec = _name(CODECS, codec, "codec")
        if key_scales is not None:
            g.key_scales = _name(_KEY_SCALES, key_scales, "key_scales")
        if rotation is not None:
            g.rotation = _name(_ROTATIONS, rotation, "rotation")
        why = ctypes.create_string_buffer(160)
        ret = _lib.kvmem_geometry_explain(ctypes.byref(g), why, len(why))
        if ret:
            _fail(ret, "geometry", why.value.decode())
        self._g = g

    @staticmethod
    def _describe(g):
        return {name: getattr(g, name) for name, _ in _Geometry._fields_[:6]}

    def __getattr__(self, name: str) -> int:
        g = self.__dict__.get("_g")
        if g is not None and name in self._describe(g):
            return getattr(g, name)
        raise AttributeError(name)

    @property
    def format(self) -> str:
        return _key_of(FORMATS, self._g.format)

    @property
    def codec(self) -> str:
        return _key_of(CODECS, self._g.codec)

    @property
    def rotation(self) -> str:
        return _key_of(_ROTATIONS, self._g.rotation)

    def __repr__(self) -> str:
        return "Geometry(%s, format=%r, codec=%r, rotation=%r)" % (
            ", ".join("%s=%d" % kv for kv in self._describe(self._g).items()),
            self.format,
            self.codec,
            self.rotation,
        )


def _name(table, value, what):
    if isinstance(value, int) and value in table.values():
        return value
    try:
        return table[value]
    except (KeyError, TypeError):
        raise ValueError(
            "%s %r is not one of %s" % (what, value, ", ".join(table))
        ) from None


def _key_of(table, value):
    for k, v in table.items():
        if v == value:
            return k
    return value


# ---- the cache ---------------------------------------------------------


PREFIX_KEY_BYTES: int = 32


def _keys(keys: List[bytes]) -> bytes:
    """The prefix keys as one buffer: a list of 32-byte bytes objects."""
    for k in keys:
        if not isinstance(k, (bytes, bytearray)) or len(k) != PREFIX_KEY_BYTES:
            raise ValueError("a prefix key is %d bytes" % PREFIX_KEY_BYTES)
    return b"".join(bytes(k) for k in keys)


class Cache:
    """A cache of sequences of pages: in this process, or a kvmemd session.

    Close it (or use it as a context manager) to free every sequence in it;
    its Sequence objects are unusable after that.
    """

    def __init__(self, handle: ctypes.c_void_p, geometry: Geometry) -> None:
        self._c: ctypes.c_void_p | None = handle
        self.geometry = geometry
        self._seqs: weakref.WeakSet[Sequence] = weakref.WeakSet()
        self._cuda: Device | None = None
        self._cuda_gen = 0  # registrations so far: kvmem.cuda.DeviceView

    @classmethod
    def embedded(cls, geometry: Geometry, arena_bytes: int) -> Cache:
        """A cache with @arena_bytes of pages in this process."""
        h = _vp()
        ret = _lib.kvmem_open_embedded(
            ctypes.byref(geometry._g), arena_bytes, ctypes.byref(h)
        )
        if ret:
            _fail(ret, "kvmem_open_embedded")
        return cls(h, geometry)

    @classmethod
    def connect(
        cls,
        geometry: Geometry,
        path: str | None = None,
        quota_bytes: int = 0,
        sq_entries: int = 0,
        cq_entries: int = 0,
        gpu_mib: int = 0,
        archive: bool = True,
        gpu_tier: bool = False,
    ) -> Cache:
        """A session of kvmemd at @path (None: where it listens by default).
        archive=False keeps every page in the geometry's format and codec
        (KVMEM_CONNECT_NO_ARCHIVE), as the CUDA kernels need. gpu_tier=True
        (with gpu_mib) makes the session's GPU memory kvmemd's GPU tier
        (KVMEM_CONNECT_GPU_TIER): see kvmem.cuda."""
        o = _ConnectOpts(
            quota_bytes=quota_bytes,
            sq_entries=sq_entries,
            cq_entries=cq_entries,
            gpu_mib=gpu_mib,
            flags=(0 if archive else _CONNECT_NO_ARCHIVE)
            | (_CONNECT_GPU_TIER if gpu_tier else 0),
        )
        h = _vp()
        ret = _lib.kvmem_connect(
            path.encode() if path else None,
            ctypes.byref(geometry._g),
            ctypes.byref(o),
            ctypes.byref(h),
        )
        if ret:
            _fail(ret, "kvmem_connect", _lib.kvmem_connect_error().decode())
        return cls(h, geometry)

    def _handle(self):
        if not self._c:
            raise ValueError("the cache is closed")
        return self._c

    @property
    def session_id(self) -> int:
        """kvmemd's id for the session; 0 for an embedded cache."""
        return _lib.kvmem_session_id(self._handle())

    def reconnect(self) -> None:
        """Take the session back from a kvmemd that restarted and kept
        it (kvmem_reconnect()): every sequence goes on as it was. A no-op
        while the connection holds; raises Error (ESTALE) when kvmemd did
        not keep the session."""
        ret = _lib.kvmem_reconnect(self._handle())
        if ret:
            _fail(ret, "kvmem_reconnect", _lib.kvmem_connect_error().decode())

    def stats(self) -> Stats:
        st = _CacheStats()
        _lib.kvmem_cache_stats(self._handle(), ctypes.byref(st))
        return _struct_dict(st)

    def sequence(self) -> Sequence:
        """A new, empty sequence."""
        h = _vp()
        ret = _lib.kvmem_seq_create(self._handle(), ctypes.byref(h))
        if ret:
            _fail(ret, "kvmem_seq_create")
        return Sequence(self, h)

    def block_end(self, block: int) -> int:
        """The token at which prefix block @block ends (its key covers
        tokens 0 to this one, excluded)."""
        return _lib.kvmem_prefix_block_end(self._handle(), block)

    def prefix_keys(
        self, tokens: Iterable[int] | np.ndarray, model: str | bytes | None = None
    ) -> List[bytes]:
        """The keys of the whole blocks of a sequence of @tokens (token
        ids, 0 to 2^32 - 1), block 0 first: 32 bytes each, for
        Sequence.publish_prefix() and attach_prefix().

        kvmem_prefix_keys(): key i is the SHA-256 chain over the tokens of
        blocks 0 to i, each token 4 bytes little-endian, which are SGLang
        HiCache's page keys; a non-empty @model (str or bytes: the model,
        its revision...) seeds the chain with its SHA-256. A trailing
        partial block gets no key. Works on an embedded cache too.
        """
        t = np.asarray(tokens)
        if t.ndim != 1 or (t.size and t.dtype.kind not in "iu"):
            raise ValueError("tokens are a list of token ids")
        if t.size and (t.min() < 0 or t.max() > 0xFFFFFFFF):
            raise ValueError("a token id is 0 to 2^32 - 1")
        t = np.ascontiguousarray(t, dtype=np.uint32)
        if isinstance(model, str):
            model = model.encode()
        # whole blocks: the sink block, if any, then one a page
        cap = t.size // self.geometry.tokens_per_page + 1
        buf = ctypes.create_string_buffer(cap * PREFIX_KEY_BYTES)
        ret = _lib.kvmem_prefix_keys(
            self._handle(),
            model or None,
            t.ctypes.data_as(ctypes.POINTER(_u32)),
            t.size,
            buf,
            cap,
        )
        if ret < 0:
            _fail(ret, "kvmem_prefix_keys")
        raw = buf.raw
        return [
            raw[i * PREFIX_KEY_BYTES : (i + 1) * PREFIX_KEY_BYTES]
            for i in range(ret)
        ]

    def attach_prefix(self, keys: List[bytes]) -> Tuple[Sequence, int]:
        """A new sequence holding the published blocks that @keys (32
        bytes each, block 0 first) name, as far as they match, and the
        number of tokens it holds (kvmem_prefix_attach(); kvmemd only)."""
        h = _vp()
        raw = _keys(keys)
        ret = _lib.kvmem_prefix_attach(
            self._handle(), raw, len(keys), ctypes.byref(h)
        )
        if ret < 0:
            _fail(ret, "kvmem_prefix_attach")
        return Sequence(self, h), ret

    def register(self, device: Device) -> None:
        """Let @device (a kvmem.cuda.Device) read the pages where they are.

        kvmem_cuda_register(): the memory the pages are in is locked and
        mapped for the GPU. From then on the attend methods take queries
        in GPU memory and run on it, acquiring each sequence they read
        (its pages stay put until release()). One GPU at a time.
        """
        device._register(self)

    def unregister(self) -> None:
        """Undo register(); nothing if the cache is not registered."""
        if self._cuda is not None:
            if self._c:
                _lib.kvmem_cuda_unregister(self._c)
            self._cuda._caches.discard(self)
            self._cuda = None

    @property
    def device(self) -> Device | None:
        """The kvmem.cuda.Device the cache is registered with, or None."""
        return self._cuda

    def gpu_memory(self) -> DeviceView:
        """The GPU memory kvmemd gave the session (connect(gpu_mib=)), as
        mapped on the GPU the cache is registered with: a
        kvmem.cuda.DeviceView of uint8, the session's to lay out (for
        kvmem.cuda.Pages). Valid until the cache is unregistered."""
        return cuda.session_memory(self)

    def attend_batch(
        self,
        seqs: List[Sequence],
        layer: int,
        q: ArrayIn,
        erasure: str = "interpolate",
        scale: float = 0.0,
        threads: int = 1,
        importance_alpha: float = 0.0,
        int8_scores: bool = False,
    ) -> Tuple[ArrayOut, List[Stats] | Stats]:
        """One query for each sequence of @seqs (a decode step of a batch).

        q is [len(seqs), n_heads, head_dim]. Returns (out, stats): out
        like q, stats a list of what Sequence.attend() returns for each;
        the same as attending each sequence in turn. With q in GPU memory
        the batch is one launch, and stats one dict for all of it.
        """
        g = self.geometry
        if cuda.on_device(q):
            return cuda.attend(
                self,
                seqs,
                layer,
                q,
                (len(seqs), -1, g.head_dim),
                1,
                erasure,
                scale,
                importance_alpha,
            )
        q = _floats(q, (len(seqs), -1, g.head_dim), "q")
        out = np.empty_like(q)
        handles = (_vp * len(seqs))(*[s._handle() for s in seqs])
        o = _attend_opts(
            q.shape[1], erasure, scale, threads, importance_alpha, int8_scores
        )
        st = (_AttendStats * len(seqs))()
        ret = _lib.kvmem_attend_batch(
            handles,
            len(seqs),
            layer,
            _ptr(q),
            _ptr(out),
            ctypes.byref(o),
            st,
        )
        if ret:
            _fail(ret, "kvmem_attend_batch")
        return out, [_struct_dict(x) for x in st]

    def close(self) -> None:
        if self._c:
            self.unregister()
            for s in list(self._seqs):
                s._s = None
            _lib.kvmem_close(self._c)
            self._c = None

    def __enter__(self) -> Cache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if _lib is not None:
            self.close()


class Sequence:
    """A sequence: for each layer, its tokens' K and V in pages."""

    def __init__(self, cache: Cache, handle: ctypes.c_void_p) -> None:
        self.cache = cache
        self._s: ctypes.c_void_p | None = handle
        cache._seqs.add(self)

    def _handle(self):
        if not self._s:
            raise ValueError("the sequence is freed, or its cache closed")
        return self._s

    def _layer(self, layer):
        if not 0 <= layer < self.cache.geometry.layers:
            raise ValueError(
                "layer %d of %d" % (layer, self.cache.geometry.layers)
            )
        return layer

    def __len__(self) -> int:
        return self.len(0)

    def len(self, layer: int) -> int:
        """Tokens stored in @layer."""
        return _lib.kvmem_seq_len(self._handle(), self._layer(layer))

    def append(self, layer: int, k: ArrayIn, v: ArrayIn) -> None:
        """Append tokens to @layer: k and v are [tokens, kv_heads, head_dim]."""
        g = self.cache.geometry
        shape = (-1, g.kv_heads, g.head_dim)
        k = _floats(k, shape, "k")
        v = _floats(v, shape, "v")
        if k.shape[0] != v.shape[0]:
            raise ValueError("k has %d tokens, v %d" % (k.shape[0], v.shape[0]))
        ret = _lib.kvmem_seq_append(
            self._handle(), self._layer(layer), _ptr(k), _ptr(v), k.shape[0]
        )
        if ret:
            _fail(ret, "kvmem_seq_append")

    def append_all(self, k: ArrayIn, v: ArrayIn) -> None:
        """Append tokens to every layer: [tokens, layers, kv_heads, head_dim]."""
        g = self.cache.geometry
        shape = (-1, g.layers, g.kv_heads, g.head_dim)
        k = _floats(k, shape, "k")
        v = _floats(v, shape, "v")
        if k.shape[0] != v.shape[0]:
            raise ValueError("k has %d tokens, v %d" % (k.shape[0], v.shape[0]))
        ret = _lib.kvmem_seq_append_all(
            self._handle(), _ptr(k), _ptr(v), k.shape[0]
        )
        if ret:
            _fail(ret, "kvmem_seq_append_all")

    def read(
        self,
        layer: int,
        start: int = 0,
        ntokens: int | None = None,
        erasure: str = "interpolate",
    ) -> Tuple[np.ndarray, np.ndarray, Counts]:
        """Tokens [start, start + ntokens) of @layer, decoded.

        Returns (k, v, counts): k and v [ntokens, kv_heads, head_dim], and
        what the decode found (header, scales and payload codewords clean,
        corrected and uncorrectable; values erased).
        """
        g = self.cache.geometry
        if ntokens is None:
            ntokens = max(self.len(layer) - start, 0)
        k = np.empty((ntokens, g.kv_heads, g.head_dim), np.float32)
        v = np.empty_like(k)
        c = _PageCounts()
        ret = _lib.kvmem_seq_read(
            self._handle(),
            self._layer(layer),
            start,
            ntokens,
            _name(ERASURES, erasure, "erasure"),
            _ptr(k),
            _ptr(v),
            ctypes.byref(c),
        )
        if ret:
            _fail(ret, "kvmem_seq_read")
        counts = {
            part: _struct_dict(getattr(c, part))
            for part in ("header", "scales", "payload")
        }
        counts["values_erased"] = c.values_erased
        return k, v, counts

    def importance(self, layer: int) -> np.ndarray:
        """Each page of @layer's share of the attention, in token order:
        the moving average the attend methods keep (importance_alpha), on
        the CPU or the GPU, and what archive_budget() and kvmemd's tier
        policy order pages by (kvmem_page_desc.importance)."""
        layer = self._layer(layer)
        n = _lib.kvmem_seq_pages(self._handle(), layer, None, 0)
        if n < 0:
            _fail(n, "kvmem_seq_pages")
        d = (_PageDesc * max(n, 1))()
        n = _lib.kvmem_seq_pages(self._handle(), layer, d, n)
        if n < 0:
            _fail(n, "kvmem_seq_pages")
        return np.array([d[i].importance for i in range(n)], np.float32)

    def attend(
        self,
        layer: int,
        q: ArrayIn,
        erasure: str = "interpolate",
        scale: float = 0.0,
        threads: int = 1,
        importance_alpha: float = 0.0,
        int8_scores: bool = False,
    ) -> Tuple[ArrayOut, Stats]:
        """Attention of one query token over @layer, from the pages.

        q is [n_heads, head_dim], n_heads a multiple of kv_heads (grouped
        query attention). Returns (out, stats): out like q, and the
        codewords decoded clean, corrected and uncorrectable, the values
        erased and the uncorrectable headers.

        int8_scores: scores from int8 dot products where the pages allow
        (KVMEM_ATTEND_INT8_SCORES in kvmem.h, which states the bound on
        what that changes); faster, and no longer the float result.

        With q in GPU memory (the cache registered with its GPU), the
        kernel attends and out is left on the GPU, float32; threads and
        int8_scores do not apply there. The pages' importance is kept
        either way: on the GPU from the kernel's share of each page
        (kvmem_seq_attended()), which over kvmemd orders the GPU tier too.
        """
        g = self.cache.geometry
        if cuda.on_device(q):
            return cuda.attend(
                self.cache,
                [self],
                layer,
                q,
                (-1, g.head_dim),
                1,
                erasure,
                scale,
                importance_alpha,
            )
        q = _floats(q, (-1, g.head_dim), "q")
        out = np.empty_like(q)
        o = _attend_opts(
            q.shape[0], erasure, scale, threads, importance_alpha, int8_scores
        )
        st = _AttendStats()
        ret = _lib.kvmem_attend(
            self._handle(),
            self._layer(layer),
            _ptr(q),
            _ptr(out),
            ctypes.byref(o),
            ctypes.byref(st),
        )
        if ret:
            _fail(ret, "kvmem_attend")
        return out, _struct_dict(st)

    def attend_causal(
        self,
        layer: int,
        q: ArrayIn,
        pos0: int,
        erasure: str = "interpolate",
        scale: float = 0.0,
        threads: int = 1,
        importance_alpha: float = 0.0,
        int8_scores: bool = False,
    ) -> Tuple[ArrayOut, Stats]:
        """Attention of consecutive query tokens (a prefill chunk).

        q is [nq, n_heads, head_dim], query i at token pos0 + i, which
        sees tokens 0 .. pos0 + i of @layer (appended before the call).
        Returns (out, stats) as attend() does, out like q. On the GPU the
        queries must be the layer's last nq tokens (pos0 + nq = len).
        """
        g = self.cache.geometry
        if cuda.on_device(q):
            n = self.len(layer)
            if len(q.shape) != 3 or pos0 < 0 or pos0 + q.shape[0] != n:
                raise ValueError(
                    "on the GPU the queries are the layer's last tokens: "
                    "pos0 + nq must be %d" % n
                )
            return cuda.attend(
                self.cache,
                [self],
                layer,
                q,
                (-1, -1, g.head_dim),
                q.shape[0],
                erasure,
                scale,
                importance_alpha,
            )
        q = _floats(q, (-1, -1, g.head_dim), "q")
        out = np.empty_like(q)
        o = _attend_opts(
            q.shape[1], erasure, scale, threads, importance_alpha, int8_scores
        )
        st = _AttendStats()
        ret = _lib.kvmem_attend_causal(
            self._handle(),
            self._layer(layer),
            _ptr(q),
            q.shape[0],
            pos0,
            _ptr(out),
            ctypes.byref(o),
            ctypes.byref(st),
        )
        if ret:
            _fail(ret, "kvmem_attend_causal")
        return out, _struct_dict(st)

    def publish_prefix(self, keys: List[bytes]) -> int:
        """Publish the first len(@keys) blocks for the sessions of this
        uid, @keys[i] (32 bytes) naming block i; returns how many are
        (kvmem_prefix_publish(); kvmemd only)."""
        ret = _lib.kvmem_prefix_publish(self._handle(), _keys(keys), len(keys))
        if ret < 0:
            _fail(ret, "kvmem_prefix_publish")
        return ret

    def fork(self) -> Sequence:
        """A new sequence sharing this one's sealed pages."""
        h = _vp()
        ret = _lib.kvmem_seq_fork(self._handle(), ctypes.byref(h))
        if ret:
            _fail(ret, "kvmem_seq_fork")
        return Sequence(self.cache, h)

    def truncate(self, ntokens: int) -> None:
        """Keep the first @ntokens tokens of every layer; kvmem.Error
        (EBADMSG, nothing changed) when a cut inside a sealed page would
        keep a value flagged lost."""
        ret = _lib.kvmem_seq_truncate(self._handle(), ntokens)
        if ret:
            _fail(ret, "kvmem_seq_truncate")

    def archive(
        self, before: int, format: str | int = "int2", codec: str | int = "golay24"
    ) -> int:
        """Re-encode the sealed pages that end at or before token @before
        in @format and @codec (kvmem_seq_archive(): the archive tier);
        returns how many were. Embedded caches only."""
        ret = _lib.kvmem_seq_archive(
            self._handle(),
            before,
            _name(FORMATS, format, "format"),
            _name(CODECS, codec, "codec"),
        )
        if ret < 0:
            _fail(ret, "kvmem_seq_archive")
        return ret

    def archive_budget(
        self, bits: float, format: str | int = "lm2", codec: str | int = "h84"
    ) -> int:
        """Re-encode the least attended sealed pages of each layer in
        @format and @codec until they average at most @bits payload bits a
        value (kvmem_seq_archive_budget(): precision by attention); returns
        how many were. Embedded caches only."""
        ret = _lib.kvmem_seq_archive_budget(
            self._handle(),
            bits,
            _name(FORMATS, format, "format"),
            _name(CODECS, codec, "codec"),
        )
        if ret < 0:
            _fail(ret, "kvmem_seq_archive_budget")
        return ret

    def codebook(self, layer: int) -> Tuple[np.ndarray, np.ndarray, Dict]:
        """Layer @layer's vq2 codebooks (kvmem_seq_codebook_read()).

        Returns (entries, lost, counts): entries float32 [2, kv_heads, 256,
        4], K's books then V's (index e of a vq2 row reads channels 4j to
        4j + 3 as entries[side, head, e]); lost bool [2, kv_heads, 256],
        an entry past its code or its check (it reads as zeros, and the
        values that index it are erased); counts, the golay24 words' (clean,
        corrected, uncorrectable). kvmem.Error, errno ENOENT, when the
        layer has none: learned by archive(..., "vq2"), or set_codebook().
        """
        g = self.cache.geometry
        e = np.empty((2, g.kv_heads, 256, 4), np.float32)
        lost = np.empty((2, g.kv_heads, 256), np.uint8)
        c = _EccCounts()
        ret = _lib.kvmem_seq_codebook_read(
            self._handle(),
            self._layer(layer),
            _ptr(e),
            lost.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)),
            ctypes.byref(c),
        )
        if ret < 0:
            _fail(ret, "kvmem_seq_codebook_read")
        return e, lost.astype(bool), _struct_dict(c)

    def set_codebook(self, layer: int, entries: ArrayIn) -> None:
        """Give @layer the engine's vq2 codebooks, [2, kv_heads, 256, 4]
        as codebook() returns them (kvmem_seq_codebook_set()): before any
        of its pages go to vq2, which then use them instead of learning
        their own. Made FP16; in a rotated geometry's rotated space."""
        g = self.cache.geometry
        e = _floats(entries, (2, g.kv_heads, 256, 4), "entries")
        ret = _lib.kvmem_seq_codebook_set(
            self._handle(), self._layer(layer), _ptr(e)
        )
        if ret:
            _fail(ret, "kvmem_seq_codebook_set")

    def release(self) -> None:
        """The pages may move (to kvmemd's backing store) until acquire()."""
        ret = _lib.kvmem_seq_release(self._handle())
        if ret:
            _fail(ret, "kvmem_seq_release")

    def acquire(self) -> None:
        """The pages are resident until release()."""
        ret = _lib.kvmem_seq_acquire(self._handle())
        if ret:
            _fail(ret, "kvmem_seq_acquire")

    def free(self) -> None:
        """Free the sequence now; garbage collection does it otherwise."""
        if self._s:
            _lib.kvmem_seq_free(self._s)
            self._s = None

    def __del__(self) -> None:
        if _lib is not None:
            self.free()


# The GPU side (kvmem/cuda.h): nothing is loaded until a Device is opened.
from . import cuda  # noqa: E402
