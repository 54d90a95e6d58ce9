"""Tests of kvmem.cuda: attention on a GPU over a cache's pages, from Python.

They run on one GPU, the first of: PyTorch's CUDA device (with CUDA
tensors), the NVIDIA driver's GPU 0 (with kvmem.cuda.DeviceArray), or the
fake driver of the build tree (tests/libfakecuda.so), which runs kvmem's
kernels on host threads (tests/libkvmem-simt.so, by FAKECUDA_SIMT), with
DeviceArray. Expected values: kvmem_attend() on the CPU over the same
pages (itself tested against NumPy in test_kvmem.py) and a float64
softmax over the values the pages decode to.
"""

import errno
import os
import subprocess
import unittest

import numpy as np

import kvmem
import kvmem.cuda as kcuda
from test_kvmem import BUILD, KvmemdFixture, attention, geometry, kv


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


class Attention(unittest.TestCase):
    """Attention over an embedded cache's pages, read where they are."""

    @classmethod
    def setUpClass(cls):
        cls.dev = _gpu()
        cls.gpu = GPU(cls.dev)

    @classmethod
    def tearDownClass(cls):
        cls.dev.close()

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
        with self.assertRaisesRegex(ValueError, "pos0 \\+ nq must be 70"):
            s.attend_causal(0, self.gpu.put(q), 60)

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

    conf_scrub = "allow_inject = yes\n"

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


if __name__ == "__main__":
    unittest.main()
