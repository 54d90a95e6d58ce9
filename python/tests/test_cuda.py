# SPDX-License-Identifier: MIT
"""Tests of kvmem.cuda: attention on a GPU over a cache's pages, from Python.

They run on one GPU, the first of: PyTorch's CUDA device (with CUDA
tensors), the NVIDIA driver's GPU 0 (with kvmem.cuda.DeviceArray), or the
fake driver of the build tree (tests/libfakecuda.so), which runs kvmem's
kernels on host threads (tests/libkvmem-simt.so, by FAKECUDA_SIMT), with
DeviceArray. Expected values: kvmem_attend() on the CPU over the same
pages (itself tested against NumPy in test_kvmem.py) and a float64
softmax over the values the pages decode to.
"""

import ctypes
import errno
import json
import os
import subprocess
import unittest

import numpy as np

import kvmem
import kvmem.cuda as kcuda
from test_kvmem import (
    BUILD,
    KvmemdFixture,
    attention,
    fp16,
    geometry,
    kv,
    shares,
)


def _torch_gpu():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _pick():
    """(kind, why not) of the GPU these tests run on."""
    if _torch_gpu():
        return "torch", None
    try:
        kcuda.Device(0).close()
        return "driver", None
    except kvmem.Error as e:
        if e.errno == errno.EOPNOTSUPP and "nvcc" in str(e):
            return None, str(e)
    fake = os.path.join(BUILD, "tests", "libfakecuda.so")
    simt = os.path.join(BUILD, "tests", "libkvmem-simt.so")
    if not (os.path.exists(fake) and os.path.exists(simt)):
        return None, "no GPU, and no fake driver built (%s)" % fake
    os.environ["KVMEM_LIBCUDA"] = os.path.abspath(fake)
    os.environ["FAKECUDA_SIMT"] = os.path.abspath(simt)
    return "fake", None


KIND, WHY_NOT = _pick()


def _gpu():
    if not KIND:
        raise unittest.SkipTest("kvmem.cuda: %s" % WHY_NOT)
    return kcuda.Device(0)


class GPU:
    """What the tests put on the GPU and take back: CUDA tensors where
    PyTorch has the GPU, DeviceArrays elsewhere."""

    def __init__(self, dev):
        self.dev = dev
        self.torch = _torch_gpu() if KIND == "torch" else None

    def put(self, a):
        if self.torch:
            return self.torch.from_numpy(np.ascontiguousarray(a)).cuda()
        return self.dev.array(a)

    def get(self, x):
        if self.torch:
            self.assert_torch(x)
            return x.cpu().numpy()
        assert isinstance(x, kcuda.DeviceArray), type(x)
        return x.numpy()

    def assert_torch(self, x):
        assert self.torch.is_tensor(x) and x.is_cuda, x


def decoded(s, layer=0):
    k, v, _ = s.read(layer)
    return k, v


class OnGPU:
    """A TestCase's GPU, opened once for its tests."""

    @classmethod
    def setUpClass(cls):
        cls.dev = _gpu()
        cls.gpu = GPU(cls.dev)

    @classmethod
    def tearDownClass(cls):
        cls.dev.close()


class Attention(OnGPU, unittest.TestCase):
    """Attention over an embedded cache's pages, read where they are."""

    def setUp(self):
        self.rng = np.random.default_rng(41)

    def cache(self, g):
        c = kvmem.Cache.embedded(g, 8 << 20)
        c.register(self.dev)
        self.addCleanup(c.close)
        return c

    def test_device(self):
        if KIND == "fake":
            self.assertEqual(self.dev.name, "kvmem fake GPU (CPU threads)")
        self.assertTrue(self.dev.name)
        self.assertIn(self.dev.name, repr(self.dev))

    def test_attend_every_kind_of_page(self):
        """The kernel's output is the CPU's over the same pages, and both
        are softmax attention over what the pages decode to."""
        kinds = [
            ("int4", "h84", "group"),
            ("int4", "h74", "channel"),
            ("int2", "golay24", "group"),
            ("int8", "secded72", "group"),
            ("fp16", "golay24", "group"),
        ]
        for fmt, codec, ks in kinds:
            with self.subTest(format=fmt, codec=codec, key_scales=ks):
                g = geometry(
                    format=fmt, codec=codec, key_scales=ks, tokens_per_page=16
                )
                c = self.cache(g)
                s = c.sequence()
                # 4 sink tokens, 3 sealed pages and a hot tail of 1
                s.append(0, *kv(self.rng, 53, g))
                q = self.rng.standard_normal((4, 64)).astype(np.float32)
                out, st = s.attend(0, self.gpu.put(q))
                got = self.gpu.get(out)
                self.assertEqual(got.shape, (4, 64))
                cpu, cst = s.attend(0, q)
                np.testing.assert_allclose(got, cpu, rtol=1e-4, atol=1e-5)
                self.assertEqual(st, cst)
                self.assertGreater(st["words_clean"], 0)
                np.testing.assert_allclose(
                    got, attention(q, *decoded(s)), rtol=1e-4, atol=1e-5
                )
                out, _ = s.attend(0, self.gpu.put(q), scale=0.25)
                np.testing.assert_allclose(
                    self.gpu.get(out),
                    attention(q, *decoded(s), scale=0.25),
                    rtol=1e-4,
                    atol=1e-5,
                )

    def test_importance(self):
        """Attention on the GPU keeps the pages' importance as the CPU's
        does (kvmem_seq_attended() of the kernel's mass): with
        importance_alpha 1 each page's share of the call, as NumPy
        computes it, for one query and for a prefill chunk of three."""
        g = geometry(format="int4", codec="h84", tokens_per_page=16)
        c = self.cache(g)
        s = c.sequence()
        s.append(0, *kv(self.rng, 53, g))
        k, _ = decoded(s)
        bounds = [(0, 4), (4, 20), (20, 36), (36, 52), (52, 53)]
        q = self.rng.standard_normal((4, 64)).astype(np.float32)
        s.attend(0, self.gpu.put(q), importance_alpha=1.0)
        np.testing.assert_allclose(
            s.importance(0), shares(q, k, bounds), rtol=1e-4, atol=1e-6
        )
        # A chunk of 3 queries, each over the tokens up to its own: the
        # mean of their shares, after a default weight of 0.1.
        before = s.importance(0)
        qs = self.rng.standard_normal((3, 4, 64)).astype(np.float32)
        s.attend_causal(0, self.gpu.put(qs), 50)
        want = np.zeros(len(bounds))
        for i in range(3):
            n = 51 + i
            b = [(a, min(e, n)) for a, e in bounds]
            want += shares(qs[i], k[:n], b) / 3
        np.testing.assert_allclose(
            s.importance(0), 0.9 * before + 0.1 * want, rtol=1e-4, atol=1e-6
        )

    def test_attend_causal(self):
        """A chunk of the layer's last three tokens: query i sees tokens up
        to its own."""
        g = geometry(tokens_per_page=16)
        c = self.cache(g)
        s = c.sequence()
        s.append(0, *kv(self.rng, 70, g))
        q = self.rng.standard_normal((3, 4, 64)).astype(np.float32)
        out, st = s.attend_causal(0, self.gpu.put(q), 67)
        got = self.gpu.get(out)
        self.assertEqual(got.shape, (3, 4, 64))
        k, v = decoded(s)
        for i in range(3):
            np.testing.assert_allclose(
                got[i],
                attention(q[i], k[: 68 + i], v[: 68 + i]),
                rtol=1e-4,
                atol=1e-5,
            )
        cpu, cst = s.attend_causal(0, q, 67)
        np.testing.assert_allclose(got, cpu, rtol=1e-4, atol=1e-5)
        self.assertEqual(st, cst)
        for pos0 in (60, -2):
            with self.assertRaisesRegex(ValueError, "pos0 \\+ nq must be 70"):
                s.attend_causal(0, self.gpu.put(q), pos0)

    def test_attend_batch(self):
        """One launch for three sequences: each row what that sequence
        alone gives, the counts the sum of theirs."""
        g = geometry(format="int4", codec="golay24")
        c = self.cache(g)
        seqs = []
        for n in (3, 40, 100):
            s = c.sequence()
            s.append(0, *kv(self.rng, n, g))
            seqs.append(s)
        q = self.rng.standard_normal((3, 8, 64)).astype(np.float32)
        out, st = c.attend_batch(seqs, 0, self.gpu.put(q))
        got = self.gpu.get(out)
        total = dict.fromkeys(st, 0)
        for i, s in enumerate(seqs):
            one, st1 = s.attend(0, q[i])
            np.testing.assert_allclose(got[i], one, rtol=1e-4, atol=1e-5)
            for key in total:
                total[key] += st1[key]
        self.assertEqual(st, total)
        with self.assertRaisesRegex(ValueError, "shape"):
            c.attend_batch(seqs, 0, self.gpu.put(q[:2]))
        with self.assertRaises(kvmem.Error) as e:
            c.attend_batch([], 0, self.gpu.put(q[:0]))
        self.assertEqual(e.exception.errno, errno.EINVAL)
        # a sequence of another cache, even one on the same GPU, has
        # pages of another geometry: refused as the CPU refuses it
        other = self.cache(geometry(format="fp16", codec="golay24"))
        o = other.sequence()
        o.append(0, *kv(self.rng, 10, other.geometry))
        with self.assertRaisesRegex(ValueError, "another cache"):
            c.attend_batch(seqs[:2] + [o], 0, self.gpu.put(q))

    def test_append_from_gpu_memory(self):
        """K and V in GPU memory make the pages host arrays make."""
        g = geometry(tokens_per_page=16)
        k, v = kv(self.rng, 40, g)
        c = self.cache(g)
        a, b = c.sequence(), c.sequence()
        a.append(0, k, v)
        b.append(0, self.gpu.put(k), self.gpu.put(v))
        for x, y in zip(a.read(0)[:2], b.read(0)[:2]):
            np.testing.assert_array_equal(x, y)

    def test_refusals(self):
        g = geometry()
        c = kvmem.Cache.embedded(g, 8 << 20)
        self.addCleanup(c.close)
        s = c.sequence()
        q = self.gpu.put(np.zeros((2, 64), np.float32))
        with self.assertRaisesRegex(ValueError, "not registered with a GPU"):
            s.attend(0, q)
        c.register(self.dev)
        self.assertIs(c.device, self.dev)
        with self.assertRaises(kvmem.Error) as e:
            c.register(self.dev)
        self.assertEqual(e.exception.errno, errno.EBUSY)
        with self.assertRaises(kvmem.Error) as e:
            s.attend(0, q)  # an empty layer, as on the CPU
        self.assertEqual(e.exception.errno, errno.EINVAL)
        s.append(0, *kv(self.rng, 5, g))
        with self.assertRaisesRegex(ValueError, "shape"):
            s.attend(0, self.gpu.put(np.zeros((2, 32), np.float32)))
        with self.assertRaisesRegex(ValueError, "layer 2 of 2"):
            s.attend(2, q)
        with self.assertRaises(kvmem.Error) as e:
            s.attend(0, self.gpu.put(np.zeros((3, 64), np.float32)))
        self.assertEqual(e.exception.errno, errno.EINVAL)  # 3 heads, 2 KV
        c.unregister()
        self.assertIsNone(c.device)
        with self.assertRaisesRegex(ValueError, "not registered"):
            s.attend(0, q)

    def test_device_arrays(self):
        d = self.dev.array(np.arange(12, dtype=np.float32).reshape(3, 4))
        cai = d.__cuda_array_interface__
        self.assertEqual(cai["shape"], (3, 4))
        self.assertEqual(cai["typestr"], "<f4")
        self.assertNotEqual(cai["data"][0], 0)
        np.testing.assert_array_equal(d.numpy(), np.arange(12).reshape(3, 4))
        with self.assertRaisesRegex(ValueError, "shape"):
            d.copy_from(np.zeros(12, np.float32))
        self.assertEqual(self.dev.empty((0, 4)).numpy().shape, (0, 4))
        with self.assertRaisesRegex(ValueError, "shape"):
            self.dev.empty((2, -4))
        g = geometry()
        c = self.cache(g)
        s = c.sequence()
        s.append(0, *kv(self.rng, 5, g))
        with self.assertRaisesRegex(ValueError, "float32"):
            s.attend(0, self.dev.array(np.zeros((2, 64))))
        d.free()
        with self.assertRaisesRegex(ValueError, "freed"):
            d.numpy()


def layout(g, hot):
    lay = kcuda._Layout()
    assert not kcuda._lib.kvmem_page_layout(ctypes.byref(g._g), hot, ctypes.byref(lay))
    return lay


def kv16(rng, n, g):
    """K and V that FP16 holds exactly. A cache keeps a page's tokens FP16
    until it is full and quantizes those, so pages written from these
    values are the cache's."""
    k, v = kv(rng, n, g)
    return fp16(k), fp16(v)


def write_seq(pages, gpu, k, v, first=0, layer=0):
    """@k, @v as a sequence lays them out (sink tokens, full pages, a
    tail) in pages first, first + 1, ...: its block table."""
    g = pages.geometry
    table, t, p = [], 0, first
    while t < len(k):
        sink = t < g.sink_tokens
        n = g.sink_tokens - t if sink else min(g.tokens_per_page, len(k) - t)
        n = min(n, len(k) - t)
        hot = sink or n < g.tokens_per_page
        pages.write(p, gpu.put(k[t : t + n]), gpu.put(v[t : t + n]), layer, t,
                    hot=hot, sealed=sink or not hot)
        table.append((p, t, n, hot))
        t, p = t + n, p + 1
    return table


class DevicePages(OnGPU, unittest.TestCase):
    """Pages in GPU memory, written by the encode kernel: what a cache
    makes of the same values, attended and scrubbed there."""

    def setUp(self):
        self.rng = np.random.default_rng(5)
        self.g = geometry(tokens_per_page=16)
        self.k, self.v = kv16(self.rng, 53, self.g)
        self.cache = kvmem.Cache.embedded(self.g, 8 << 20)
        self.addCleanup(self.cache.close)
        self.seq = self.cache.sequence()
        self.seq.append(0, self.k, self.v)

    def test_attend_as_the_cache_does(self):
        pages = kcuda.Pages(self.dev, self.g, 8)
        table = write_seq(pages, self.gpu, self.k, self.v)
        # 4 sink tokens, 3 sealed pages of 16, a tail of 1
        self.assertEqual([n for _, _, n, _ in table], [4, 16, 16, 16, 1])
        q = self.rng.standard_normal((1, 4, 64)).astype(np.float32)
        out, st = pages.attend([table], self.gpu.put(q))
        want, wst = self.seq.attend(0, q[0])
        np.testing.assert_allclose(self.gpu.get(out)[0], want, rtol=1e-4, atol=1e-5)
        self.assertEqual(st, wst)
        # a prefill chunk: the last three tokens
        q3 = self.rng.standard_normal((1, 3, 4, 64)).astype(np.float32)
        out, st = pages.attend([table], self.gpu.put(q3), nq=3)
        want, wst = self.seq.attend_causal(0, q3[0], 50)
        np.testing.assert_allclose(self.gpu.get(out)[0], want, rtol=1e-4, atol=1e-5)
        self.assertEqual(st, wst)
        # a batch: the sequence, and its first 20 tokens on pages of
        # their own
        short = write_seq(pages, self.gpu, self.k[:20], self.v[:20], first=5)
        s20 = self.cache.sequence()
        s20.append(0, self.k[:20], self.v[:20])
        q2 = self.rng.standard_normal((2, 4, 64)).astype(np.float32)
        out, st = pages.attend([table, short], self.gpu.put(q2))
        got = self.gpu.get(out)
        np.testing.assert_allclose(got[0], self.seq.attend(0, q2[0])[0],
                                   rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(got[1], s20.attend(0, q2[1])[0],
                                   rtol=1e-4, atol=1e-5)

    def test_half_precision_input(self):
        """float16 K and V make the pages their float32 values make."""
        pages = kcuda.Pages(self.dev, self.g, 16)
        a = write_seq(pages, self.gpu, self.k, self.v)
        b = write_seq(pages, self.gpu, self.k.astype(np.float16),
                      self.v.astype(np.float16), first=8)
        raw = pages.memory.numpy().reshape(16, -1)
        for (i, _, _, hot), (j, _, _, _) in zip(a, b):
            size = layout(self.g, hot).size  # what the kind has of the slot
            np.testing.assert_array_equal(raw[i, :size], raw[j, :size])

    def test_hot_page_row_by_row(self):
        """An FP16 page takes rows as they come: four one-row writes, the
        last sealing it, make the page one write makes."""
        pages = kcuda.Pages(self.dev, self.g, 2)
        size = layout(self.g, 1).size
        k, v = self.gpu.put(self.k[:4]), self.gpu.put(self.v[:4])
        pages.write(0, k, v, 1, 0, hot=True, sealed=True, seq=7)
        for t in range(4):
            pages.write(1, self.gpu.put(self.k[t : t + 1]),
                        self.gpu.put(self.v[t : t + 1]), 1, 0, t0=t,
                        hot=True, sealed=t == 3, seq=7)
            if t == 2:
                open3 = pages.memory.numpy().reshape(2, -1)[1, :size]
        raw = pages.memory.numpy().reshape(2, -1)
        np.testing.assert_array_equal(raw[0, :size], raw[1, :size])
        # the header says whether a page is sealed
        pages.write(0, self.gpu.put(self.k[:3]), self.gpu.put(self.v[:3]), 1,
                    0, hot=True, sealed=True, seq=7)
        sealed3 = pages.memory.numpy().reshape(2, -1)[0, :size]
        self.assertFalse(np.array_equal(open3, sealed3))
        pages.write(0, self.gpu.put(self.k[:3]), self.gpu.put(self.v[:3]), 1,
                    0, hot=True, sealed=False, seq=7)
        np.testing.assert_array_equal(
            pages.memory.numpy().reshape(2, -1)[0, :size], open3
        )

    def test_scrub_corrects_in_place(self):
        """One flipped payload bit: corrected as attention loads it, and
        for good by the scrub kernel."""
        if KIND == "torch":
            self.skipTest("the flip goes through a DeviceArray")
        pages = kcuda.Pages(self.dev, self.g, 8)
        table = write_seq(pages, self.gpu, self.k, self.v)
        q = self.rng.standard_normal((1, 4, 64)).astype(np.float32)
        clean, cst = pages.attend([table], self.gpu.put(q))
        clean = self.gpu.get(clean)
        self.assertEqual(cst["words_corrected"], 0)
        raw = pages.memory.numpy()
        at = pages.page_bytes + layout(self.g, 0).k_off + 7
        raw[at] ^= 0x10
        pages.memory.copy_from(raw)
        out, st = pages.attend([table], self.gpu.put(q))
        self.assertEqual(st["words_corrected"], 1)
        np.testing.assert_array_equal(self.gpu.get(out), clean)
        (status, counts), (status2, counts2) = pages.scrub([1, 2])
        self.assertEqual((status, status2), (0, 0))
        self.assertEqual(counts["payload"]["corrected"], 1)
        self.assertEqual(counts2["payload"]["corrected"], 0)
        self.assertEqual(counts["payload"]["uncorrectable"], 0)
        np.testing.assert_array_equal(pages.memory.numpy()[at], raw[at] ^ 0x10)
        out, st = pages.attend([table], self.gpu.put(q))
        self.assertEqual(st, cst)

    def test_refusals(self):
        g = self.g
        pages = kcuda.Pages(self.dev, g, 4)
        k, v = self.gpu.put(self.k[:16]), self.gpu.put(self.v[:16])
        with self.assertRaisesRegex(ValueError, "page 4 of 4"):
            pages.write(4, k, v, 0, 0)
        with self.assertRaisesRegex(ValueError, "written whole"):
            pages.write(0, self.gpu.put(self.k[:8]), self.gpu.put(self.v[:8]),
                        0, 0, t0=1)
        with self.assertRaisesRegex(ValueError, "rows 8..24"):
            pages.write(0, k, v, 0, 0, t0=8, hot=True)
        with self.assertRaisesRegex(ValueError, "layer 2 of 2"):
            pages.write(0, k, v, 2, 0)
        with self.assertRaisesRegex(ValueError, "must both be"):
            pages.write(0, k, self.gpu.put(self.v[:8]), 0, 0)
        with self.assertRaisesRegex(ValueError, "GPU memory"):
            pages.write(0, self.k[:16], self.v[:16], 0, 0)
        pages.write(0, k, v, 0, 0)
        q = self.gpu.put(np.zeros((1, 4, 64), np.float32))
        for bad in ([(0, 1, 16, False)], [(0, 0, 17, False)], [(0, 0, 0, False)],
                    [(0, 0, 16, False), (1, 20, 16, False)], []):
            with self.assertRaises(ValueError, msg=bad):
                pages.attend([bad], q)
        with self.assertRaisesRegex(ValueError, "page 9 of 4"):
            pages.attend([[(9, 0, 16, False)]], q)
        with self.assertRaisesRegex(ValueError, "query tokens"):
            pages.attend([[(0, 0, 16, False)]], q, nq=17)
        with self.assertRaisesRegex(ValueError, "shape"):
            pages.attend([[(0, 0, 16, False)]] * 2, q)
        with self.assertRaisesRegex(ValueError, "GPU memory"):
            pages.attend([[(0, 0, 16, False)]], np.zeros((1, 4, 64), np.float32))
        with self.assertRaisesRegex(ValueError, "empty batch"):
            pages.attend([], q)
        # a table says what write() left, or it is refused: the kernel
        # would read the page with another layout, or past its rows
        for bad in ([(1, 0, 16, False)], [(0, 0, 16, True)], [(0, 0, 8, False)]):
            with self.assertRaisesRegex(ValueError, "holds", msg=bad):
                pages.attend([bad], q)
        # header fields that do not fit are refused, not wrapped
        for kw in (dict(token_start=-1), dict(token_start=(1 << 32) - 8),
                   dict(seq=-5), dict(generation=1 << 64)):
            args = dict(token_start=0)
            args.update(kw)
            with self.assertRaisesRegex(ValueError, "bits", msg=kw):
                pages.write(1, k, v, 0, **args)
        # rows go after the rows of an open FP16 page only
        one = self.gpu.put(self.k[:1]), self.gpu.put(self.v[:1])
        pages.write(2, *one, 0, 0, hot=True, sealed=False)
        with self.assertRaisesRegex(ValueError, "holds 1 rows"):
            pages.write(2, *one, 0, 0, t0=2, hot=True)
        pages.write(2, *one, 0, 0, t0=1, hot=True, sealed=True)
        with self.assertRaisesRegex(ValueError, "sealed"):
            pages.write(2, *one, 0, 0, t0=2, hot=True)
        with self.assertRaisesRegex(ValueError, "need"):
            kcuda.Pages(self.dev, g, 4, memory=self.dev.empty(4096, np.uint8))
        with self.assertRaisesRegex(ValueError, "0 pages"):
            kcuda.Pages(self.dev, g, 0)
        with self.assertRaisesRegex(ValueError, "bytes"):
            self.dev.empty((1 << 62) + 1)

        class Strided:
            """Every other byte of an array: as many bytes, half of them
            someone else's."""

            def __init__(self, a):
                self.a = a
                cai = dict(a.__cuda_array_interface__)
                cai["shape"] = (a.nbytes // 2,)
                cai["strides"] = (2,)
                self.__cuda_array_interface__ = cai

        big = self.dev.empty(8 * pages.page_bytes + 16, np.uint8)
        with self.assertRaisesRegex(ValueError, "C-contiguous"):
            kcuda.Pages(self.dev, g, 4, memory=Strided(big))
        on_big = kcuda.Pages(self.dev, g, 4, memory=big)
        big.free()
        with self.assertRaisesRegex(ValueError, "freed"):
            on_big.write(0, k, v, 0, 0)


class Lifetimes(unittest.TestCase):
    def test_close_the_device_first(self):
        """Closing the device unregisters its caches and frees its arrays;
        the caches go on on the CPU."""
        dev = _gpu()
        g = geometry()
        rng = np.random.default_rng(3)
        with kvmem.Cache.embedded(g, 8 << 20) as c:
            c.register(dev)
            s = c.sequence()
            s.append(0, *kv(rng, 20, g))
            d = dev.empty((2, 64))
            dev.close()
            self.assertIsNone(c.device)
            self.assertEqual(d.ptr, 0)
            with self.assertRaisesRegex(ValueError, "closed"):
                dev.empty(4)
            out, _ = s.attend(0, np.ones((2, 64), np.float32))
            self.assertEqual(out.shape, (2, 64))

    def test_close_the_cache_first(self):
        dev = _gpu()
        self.addCleanup(dev.close)
        c = kvmem.Cache.embedded(geometry(), 8 << 20)
        c.register(dev)
        c.close()
        self.assertIsNone(c.device)
        self.assertEqual(len(dev._caches), 0)

    def test_no_driver(self):
        """A driver that is not there: ENODEV and the sentence that says
        so (EOPNOTSUPP where libkvmem carries no kernels)."""
        old = os.environ.get("KVMEM_LIBCUDA")
        os.environ["KVMEM_LIBCUDA"] = "/nonexistent/libcuda.so.1"
        try:
            with self.assertRaises(kvmem.Error) as e:
                kcuda.Device(0)
        finally:
            if old is None:
                del os.environ["KVMEM_LIBCUDA"]
            else:
                os.environ["KVMEM_LIBCUDA"] = old
        if e.exception.errno == errno.EOPNOTSUPP:
            self.assertIn("built without nvcc", str(e.exception))
        else:
            self.assertEqual(e.exception.errno, errno.ENODEV)
            self.assertIn("no NVIDIA driver", str(e.exception))
            self.assertIn("/nonexistent/libcuda.so.1", str(e.exception))


class Session(KvmemdFixture, unittest.TestCase):
    """A kvmemd session's pages, damaged by kvmemctl inject, read by the
    GPU where the session keeps them."""

    conf_extra = "allow_inject = yes\n[pool]\ngpu_bytes = 64M\n"

    def test_damaged_session(self):
        dev = _gpu()
        self.addCleanup(dev.close)
        gpu = GPU(dev)
        g = geometry(format="int4", codec="h84", tokens_per_page=16)
        rng = np.random.default_rng(11)
        q = rng.standard_normal((4, 64)).astype(np.float32)
        with kvmem.Cache.connect(g, self.sock, quota_bytes=8 << 20) as c:
            c.register(dev)
            s = c.sequence()
            s.append(0, *kv(rng, 90, g))
            ctl = os.path.join(BUILD, "tools", "kvmemctl")
            run = subprocess.run(
                [ctl, "-a", self.admin, "inject", "session", str(c.session_id),
                 "--ber", "0.01", "--seed", "5"],
                capture_output=True,
                text=True,
            )
            self.assertEqual(run.returncode, 0, run.stderr)
            seen = {}
            for erasure in ("interpolate", "zero", "keep"):
                out, st = s.attend(0, gpu.put(q), erasure=erasure)
                cpu, cst = s.attend(0, q, erasure=erasure)
                np.testing.assert_allclose(
                    gpu.get(out), cpu, rtol=1e-4, atol=1e-5, err_msg=erasure
                )
                self.assertEqual(st, cst, erasure)
                seen[erasure] = gpu.get(out)
            self.assertGreater(st["words_corrected"], 0)
            self.assertGreater(st["words_uncorrectable"], 0)
            # the policies differ only where values were lost
            self.assertFalse(np.array_equal(seen["zero"], seen["keep"]))

    def _gpu_pool(self):
        """The gpu pool of kvmemctl stats --json."""
        ctl = os.path.join(BUILD, "tools", "kvmemctl")
        run = subprocess.run([ctl, "-a", self.admin, "stats", "--json"],
                             capture_output=True, text=True)
        self.assertEqual(run.returncode, 0, run.stderr)
        pools = json.loads(run.stdout)["pools"]
        return next(p for p in pools if p["pool"] == "gpu")

    def test_gpu_tier(self):
        """Pages in kvmemd's GPU tier, read there by the GPU; the CPU has
        them back first."""
        dev = _gpu()
        self.addCleanup(dev.close)
        gpu = GPU(dev)
        g = geometry(format="int4", codec="h84", tokens_per_page=16)
        rng = np.random.default_rng(13)
        q = rng.standard_normal((4, 64)).astype(np.float32)
        with kvmem.Cache.connect(g, self.sock, quota_bytes=8 << 20,
                                 gpu_mib=4, gpu_tier=True) as c:
            c.register(dev)
            with self.assertRaises(kvmem.Error) as err:
                c.gpu_memory()
            self.assertEqual(err.exception.errno, errno.EBUSY)
            s = c.sequence()
            s.append(0, *kv(rng, 90, g))
            before = self._gpu_pool()
            out, st = s.attend(0, gpu.put(q))
            moved = self._gpu_pool()
            # 90 tokens: the sink page and five sealed pages of 16 moved
            self.assertEqual(
                moved["promoted_pages"] - before["promoted_pages"], 6)
            cpu, cst = s.attend(0, q)
            np.testing.assert_allclose(gpu.get(out), cpu, rtol=1e-4,
                                       atol=1e-5)
            self.assertEqual(st, cst)
            back = self._gpu_pool()
            self.assertEqual(back["demoted_pages"] - moved["demoted_pages"], 6)
        with self.assertRaises(kvmem.Error) as err:
            kvmem.Cache.connect(g, self.sock, gpu_tier=True)
        self.assertEqual(err.exception.errno, errno.EINVAL)

    def test_session_gpu_memory(self):
        """Pages in the GPU memory kvmemd gave the session."""
        dev = _gpu()
        self.addCleanup(dev.close)
        gpu = GPU(dev)
        g = geometry(tokens_per_page=16)
        rng = np.random.default_rng(12)
        k, v = kv16(rng, 40, g)
        q = rng.standard_normal((1, 4, 64)).astype(np.float32)
        with kvmem.Cache.embedded(g, 8 << 20) as e:
            s = e.sequence()
            s.append(0, k, v)
            want, wst = s.attend(0, q[0])
        with kvmem.Cache.connect(g, self.sock, quota_bytes=8 << 20,
                                 gpu_mib=4) as c:
            with self.assertRaises(kvmem.Error) as err:
                c.gpu_memory()
            self.assertEqual(err.exception.errno, errno.ENOENT)
            c.register(dev)
            mem = c.gpu_memory()
            self.assertGreaterEqual(mem.nbytes, 4 << 20)
            pages = kcuda.Pages(dev, g, 4, memory=mem)
            table = write_seq(pages, gpu, k, v)
            out, st = pages.attend([table], gpu.put(q))
            np.testing.assert_allclose(gpu.get(out)[0], want, rtol=1e-4,
                                       atol=1e-5)
            self.assertEqual(st, wst)
            c.unregister()
            with self.assertRaisesRegex(ValueError, "unmapped"):
                mem.__cuda_array_interface__
            with self.assertRaisesRegex(ValueError, "unmapped"):
                pages.attend([table], gpu.put(q))
            # mapped again, maybe elsewhere: the old view stays dead
            c.register(dev)
            with self.assertRaisesRegex(ValueError, "unmapped"):
                pages.write(0, gpu.put(k[:4]), gpu.put(v[:4]), 0, 0, hot=True)
            kcuda.Pages(dev, g, 4, memory=c.gpu_memory())
        with kvmem.Cache.connect(g, self.sock, quota_bytes=8 << 20) as c:
            c.register(dev)
            with self.assertRaises(kvmem.Error) as err:
                c.gpu_memory()
            self.assertEqual(err.exception.errno, errno.ENXIO)


if __name__ == "__main__":
    unittest.main()
