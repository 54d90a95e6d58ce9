# SPDX-License-Identifier: MIT
"""Tests of the kvmem Python package against libkvmem and kvmemd.

Expected values are computed here with NumPy: FP16 rounding, the bound on
int8 quantization error, softmax attention in float64. Run by `make test`
(tests/check_python.c) with the package and library of the build tree, or
by hand: PYTHONPATH=python python3 -m unittest discover -s python/tests
"""

import errno
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

import numpy as np

import kvmem

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BUILD = os.environ.get("KVMEM_BUILD", os.path.join(ROOT, "build"))


def geometry(**kw):
    args = dict(layers=2, kv_heads=2, head_dim=64)
    args.update(kw)
    return kvmem.Geometry(**args)


def kv(rng, n, g):
    shape = (n, g.kv_heads, g.head_dim)
    return (
        rng.standard_normal(shape).astype(np.float32),
        rng.standard_normal(shape).astype(np.float32),
    )


def fp16(x):
    return x.astype(np.float16).astype(np.float32)


def attention(q, k, v, scale=None):
    """Softmax attention of q [n_heads, D] over k, v [T, kv_heads, D]."""
    nh, d = q.shape
    group = nh // k.shape[1]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    out = np.empty((nh, d))
    for h in range(nh):
        kh = k[:, h // group, :].astype(np.float64)
        vh = v[:, h // group, :].astype(np.float64)
        s = kh @ q[h].astype(np.float64) * scale
        w = np.exp(s - s.max())
        out[h] = w @ vh / w.sum()
    return out


def shares(q, k, bounds, scale=None):
    """Each token range of @bounds' share of the softmax weights of q
    [n_heads, D] over k [T, kv_heads, D], summed over the heads."""
    nh, d = q.shape
    group = nh // k.shape[1]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    total = np.zeros(len(bounds))
    for h in range(nh):
        s = k[:, h // group, :].astype(np.float64) @ q[h].astype(np.float64)
        w = np.exp(s * scale - (s * scale).max())
        w /= w.sum()
        total += [w[a:b].sum() for a, b in bounds]
    return total


class Embedded(unittest.TestCase):
    def setUp(self):
        self.rng = np.random.default_rng(2611)

    def test_geometry(self):
        g = geometry(format="int8", codec="golay24")
        self.assertEqual((g.layers, g.kv_heads, g.head_dim), (2, 2, 64))
        self.assertEqual((g.format, g.codec), ("int8", "golay24"))
        self.assertEqual(g.tokens_per_page, 32)
        with self.assertRaises(kvmem.Error) as e:
            geometry(head_dim=30)
        self.assertEqual(e.exception.errno, errno.EINVAL)
        self.assertEqual(
            e.exception.strerror,
            "geometry: head_dim 30 is not a multiple of group_size 32",
        )
        with self.assertRaisesRegex(ValueError, "codec 'h99' is not one of"):
            geometry(codec="h99")

    def test_fp16_round_trip(self):
        """FP16 pages give back exactly the FP16 rounding of what went in."""
        g = geometry(format="fp16", codec="h84")
        k, v = kv(self.rng, 77, g)
        with kvmem.Cache.embedded(g, 8 << 20) as c:
            s = c.sequence()
            s.append(0, k[:40], v[:40])
            s.append(0, k[40:], v[40:])
            self.assertEqual((s.len(0), s.len(1), len(s)), (77, 0, 77))
            rk, rv, counts = s.read(0)
            np.testing.assert_array_equal(rk, fp16(k))
            np.testing.assert_array_equal(rv, fp16(v))
            self.assertEqual(counts["values_erased"], 0)
            self.assertEqual(counts["payload"]["uncorrectable"], 0)
            self.assertGreater(counts["payload"]["clean"], 0)
            rk, _, _ = s.read(0, start=70, ntokens=5)
            np.testing.assert_array_equal(rk, fp16(k[70:75]))

    def test_int8_round_trip(self):
        """int8 values are within half a step of the group's scale (amax
        over 127), rounded scale and all: a step bounds the error."""
        g = geometry(format="int8", codec="secded72", sink_tokens=0)
        k, v = kv(self.rng, 64, g)
        with kvmem.Cache.embedded(g, 8 << 20) as c:
            s = c.sequence()
            s.append(1, k, v)
            rk, rv, _ = s.read(1)
        for want, got in ((k, rk), (v, rv)):
            groups = want.reshape(64, g.kv_heads, -1, 32)
            step = np.abs(groups).max(axis=-1, keepdims=True) / 127
            err = np.abs(got.reshape(groups.shape) - groups)
            self.assertTrue((err <= step).all(), err.max())
            self.assertGreater(err.max(), 0)

    def test_attend_matches_numpy(self):
        g = geometry(format="fp16", codec="golay24")
        k, v = kv(self.rng, 100, g)
        q = self.rng.standard_normal((8, 64)).astype(np.float32)
        with kvmem.Cache.embedded(g, 8 << 20) as c:
            s = c.sequence()
            s.append(0, k, v)
            out, st = s.attend(0, q)
            self.assertEqual(out.shape, (8, 64))
            np.testing.assert_allclose(
                out, attention(q, fp16(k), fp16(v)), rtol=1e-4, atol=1e-5
            )
            self.assertEqual(st["words_uncorrectable"], 0)
            self.assertGreater(st["words_clean"], 0)
            out2, _ = s.attend(0, q, scale=0.5, threads=0)
            np.testing.assert_allclose(
                out2,
                attention(q, fp16(k), fp16(v), scale=0.5),
                rtol=1e-4,
                atol=1e-5,
            )

    def test_importance(self):
        """Each page's importance: with importance_alpha 1 its share of
        this call's attention, as NumPy computes it; a negative alpha
        leaves it alone."""
        g = geometry(format="fp16", codec="golay24", tokens_per_page=16)
        k, v = kv(self.rng, 53, g)
        q = self.rng.standard_normal((4, 64)).astype(np.float32)
        # 4 sink tokens, 3 sealed pages of 16, a tail of 1
        bounds = [(0, 4), (4, 20), (20, 36), (36, 52), (52, 53)]
        with kvmem.Cache.embedded(g, 8 << 20) as c:
            s = c.sequence()
            s.append(0, k, v)
            np.testing.assert_array_equal(s.importance(0), np.zeros(5))
            s.attend(0, q, importance_alpha=1.0)
            want = shares(q, fp16(k), bounds)
            np.testing.assert_allclose(
                s.importance(0), want, rtol=1e-4, atol=1e-6
            )
            s.attend(0, -q, importance_alpha=-1.0)
            np.testing.assert_allclose(
                s.importance(0), want, rtol=1e-4, atol=1e-6
            )
            with self.assertRaises(ValueError):
                s.importance(2)

    def test_rotated_lm3(self):
        """Hadamard-rotated lm3: reads come back unrotated, within the
        codebook's error, and attention is numpy's over what reads give."""
        g = geometry(format="lm3", codec="h84", rotation="hadamard")
        self.assertEqual((g.format, g.rotation), ("lm3", "hadamard"))
        k, v = kv(self.rng, 100, g)
        k[:, :, 3] *= 10  # an outlier channel
        q = self.rng.standard_normal((8, 64)).astype(np.float32)
        with kvmem.Cache.embedded(g, 8 << 20) as c:
            s = c.sequence()
            s.append(0, k, v)
            dk, dv, _ = s.read(0)
            # lm3's mean square error is 0.0345 of the variance: well
            # under a third of each row's norm, outlier channel or not
            sealed = slice(4, 100 - 100 % 32 + 4 - 32)
            for x, d in ((k, dk), (v, dv)):
                err = np.linalg.norm(d[sealed] - x[sealed], axis=-1)
                self.assertLess(
                    (err / np.linalg.norm(x[sealed], axis=-1)).max(), 0.33
                )
            out, _ = s.attend(0, q)
            np.testing.assert_allclose(
                out, attention(q, dk, dv), rtol=1e-4, atol=1e-5
            )
        with self.assertRaisesRegex(ValueError, "rotation 'dct' is not"):
            geometry(rotation="dct")

    def test_rotation_spreads_outliers(self):
        """Keys with three outlier channels eight times the rest: rotated,
        int4 reads back with a quarter of the error it has unrotated (the
        outliers no longer set every group's scale), and lm2 with under
        half of int2's."""
        k = self.rng.standard_normal((4 + 32 * 4, 2, 128)).astype(np.float32)
        k[:, :, [3, 40, 77]] *= 8

        def error(fmt, rotation):
            g = geometry(layers=1, head_dim=128, format=fmt,
                         rotation=rotation)
            with kvmem.Cache.embedded(g, 16 << 20) as c:
                s = c.sequence()
                s.append(0, k, k)
                back = s.read(0)[0][4:]
            return float(((back - k[4:]) ** 2).sum() / (k[4:] ** 2).sum())

        self.assertLess(error("int4", "hadamard"), error("int4", "none") / 3)
        self.assertLess(error("lm2", "hadamard"), error("int2", "none") / 2)

    def test_attend_int8_scores_within_bound(self):
        """kvmem.h's bound on what int8 scores change, from the decoded
        values: (e^(2 delta) - 1) * max |v| per head and channel."""
        g = geometry(format="int4", codec="h84")
        k, v = kv(self.rng, 100, g)
        q = self.rng.standard_normal((8, 64)).astype(np.float32)
        with kvmem.Cache.embedded(g, 8 << 20) as c:
            s = c.sequence()
            s.append(0, k, v)
            out, _ = s.attend(0, q)
            out8, _ = s.attend(0, q, int8_scores=True, threads=0)
            dk, dv, _ = s.read(0)
            # the last token as a chunk of one, and a batch of one: the
            # same call
            c8, _ = s.attend_causal(0, q[None], 99, int8_scores=True)
            b8, _ = c.attend_batch([s], 0, q[None], int8_scores=True)
            np.testing.assert_array_equal(c8[0], out8)
            np.testing.assert_array_equal(b8[0], out8)
        self.assertFalse(np.array_equal(out, out8))
        scale = 1 / np.sqrt(64)
        for h in range(8):
            kh = h // 4
            m = np.abs(q[h]).max()
            delta = scale * m / 254 * np.abs(dk[:, kh]).sum(axis=1).max()
            amax = np.abs(dv[:, kh]).max(axis=0)
            tol = np.expm1(2 * delta) * amax * (1 + 1e-3) + 2e-5 * amax
            self.assertTrue((np.abs(out8[h] - out[h]) <= tol).all())

    def test_attend_causal_matches_numpy(self):
        """Query i of a chunk from token 40 sees tokens 0 .. 40 + i."""
        g = geometry(format="fp16", codec="golay24")
        k, v = kv(self.rng, 100, g)
        q = self.rng.standard_normal((20, 8, 64)).astype(np.float32)
        with kvmem.Cache.embedded(g, 8 << 20) as c:
            s = c.sequence()
            s.append(0, k, v)
            out, st = s.attend_causal(0, q, 40, threads=0)
            self.assertEqual(out.shape, (20, 8, 64))
            for i in range(20):
                n = 40 + i + 1
                np.testing.assert_allclose(
                    out[i],
                    attention(q[i], fp16(k[:n]), fp16(v[:n])),
                    rtol=1e-4,
                    atol=1e-5,
                )
            self.assertEqual(st["words_uncorrectable"], 0)
            with self.assertRaises(kvmem.Error) as e:
                s.attend_causal(0, q, 81)
            self.assertEqual(e.exception.errno, errno.EINVAL)

    def test_attend_batch_matches_each(self):
        """A batch gives what attending each sequence in turn gives."""
        g = geometry(format="fp16", codec="golay24")
        with kvmem.Cache.embedded(g, 8 << 20) as c:
            seqs = []
            for n in (3, 40, 100):
                k, v = kv(self.rng, n, g)
                s = c.sequence()
                s.append(0, k, v)
                seqs.append(s)
            q = self.rng.standard_normal((3, 8, 64)).astype(np.float32)
            out, st = c.attend_batch(seqs, 0, q, threads=0)
            self.assertEqual(out.shape, (3, 8, 64))
            for i, s in enumerate(seqs):
                one, st1 = s.attend(0, q[i])
                np.testing.assert_array_equal(out[i], one)
                self.assertEqual(st[i], st1)
            with self.assertRaises(ValueError):
                c.attend_batch(seqs, 0, q[:2])

    def test_append_all(self):
        g = geometry(format="fp16")
        x = self.rng.standard_normal((10, 2, 2, 64)).astype(np.float32)
        with kvmem.Cache.embedded(g, 8 << 20) as c:
            s = c.sequence()
            s.append_all(x, -x)
            for layer in range(2):
                rk, rv, _ = s.read(layer)
                np.testing.assert_array_equal(rk, fp16(x[:, layer]))
                np.testing.assert_array_equal(rv, fp16(-x[:, layer]))

    def test_fork_truncate_free(self):
        g = geometry(format="fp16")
        k, v = kv(self.rng, 70, g)
        with kvmem.Cache.embedded(g, 8 << 20) as c:
            s = c.sequence()
            s.append(0, k[:50], v[:50])
            f = s.fork()
            f.append(0, k[50:], v[50:])
            self.assertEqual((s.len(0), f.len(0)), (50, 70))
            np.testing.assert_array_equal(f.read(0)[0], fp16(k))
            f.truncate(45)
            self.assertEqual(f.len(0), 45)
            np.testing.assert_array_equal(s.read(0)[0], fp16(k[:50]))
            self.assertEqual(c.stats()["seqs"], 2)
            f.free()
            self.assertEqual(c.stats()["seqs"], 1)
            with self.assertRaises(ValueError):
                f.len(0)
        with self.assertRaisesRegex(ValueError, "closed"):
            s.len(0)
        with self.assertRaisesRegex(ValueError, "closed"):
            c.stats()

    def test_archive_budget(self):
        """A budget of 3 bits over three int4 pages takes two down to lm2
        (the least attended: tests/check_archive.c checks which); a met
        budget nothing; 0 the last one."""
        g = geometry(format="int4", codec="h84")
        k, v = kv(self.rng, 100, g)
        q = self.rng.standard_normal((8, 64)).astype(np.float32)
        with kvmem.Cache.embedded(g, 8 << 20) as c:
            s = c.sequence()
            s.append(0, k, v)
            s.attend(0, q, importance_alpha=0.5)
            was = s.read(0)[0]
            self.assertEqual(s.archive_budget(3.0), 2)
            self.assertEqual(s.archive_budget(3.0), 0)
            got = s.read(0)[0]
            # two pages of 32 tokens changed, sinks and the third not
            self.assertEqual(
                int((got != was).any(axis=(1, 2)).sum() // 32), 2
            )
            np.testing.assert_array_equal(got[:4], was[:4])
            self.assertEqual(s.archive_budget(0.0, "lm2", "h84"), 1)
            with self.assertRaises(kvmem.Error) as e:
                s.archive_budget(float("nan"))
            self.assertEqual(e.exception.errno, errno.EINVAL)

    def test_archive(self):
        """Archived int4 + golay24 pages read the same bits as before;
        int2 ones within half a step (amax over 1) of the int4 values."""
        g = geometry(format="int4", codec="h84")
        k, v = kv(self.rng, 100, g)
        with kvmem.Cache.embedded(g, 8 << 20) as c:
            s = c.sequence()
            s.append(0, k, v)
            was = s.read(0)[0]
            # A sink page of 4, sealed pages from 4, 36 and 68: two end
            # at or before token 70.
            self.assertEqual(s.archive(70, "int4", "golay24"), 2)
            self.assertEqual(s.archive(70, "int4", "golay24"), 0)
            np.testing.assert_array_equal(s.read(0)[0], was)
            self.assertEqual(s.archive(100), 3)
            got = s.read(0)[0]
            with self.assertRaisesRegex(ValueError, "format 'fp4' is not"):
                s.archive(10, "fp4")
            # fp8 pages are larger than the geometry's int4 ones.
            with self.assertRaises(kvmem.Error) as e:
                s.archive(10, "fp8")
            self.assertEqual(e.exception.errno, errno.E2BIG)
        # int2: a group's scale s is amax over 1 rounded up to FP16, the
        # values within s / 2 of what they were.
        groups = was[4:100].reshape(96, g.kv_heads, -1, 32)
        scale = np.abs(groups).max(axis=-1, keepdims=True) * (1 + 2**-10)
        err = np.abs(got[4:100].reshape(groups.shape) - groups)
        self.assertTrue((err <= scale / 2).all(), err.max())
        self.assertGreater(err.max(), 0)
        # and a group's largest value is a step, not 0
        gmax = np.abs(got[4:100].reshape(groups.shape)).max(axis=-1)
        self.assertTrue((gmax > 0).all())
        np.testing.assert_array_equal(got[:4], was[:4])

    def test_vq2_codebooks(self):
        """vq2: the engine's codebooks given, every four of an archived
        page reads as its book's entry nearest what it was (found here in
        float64); learned ones on another sequence, every four one of
        their entries. (The C suite check_vq damages codebooks.)"""
        g = geometry(format="int4", codec="h84", head_dim=16, group_size=16)
        k, v = kv(self.rng, 70, g)
        books = fp16(
            self.rng.uniform(-2, 2, (2, g.kv_heads, 256, 4)).astype(np.float32)
        )
        with kvmem.Cache.embedded(g, 8 << 20) as c:
            s = c.sequence()
            s.append(0, k, v)
            with self.assertRaises(kvmem.Error) as e:
                s.codebook(0)
            self.assertEqual(e.exception.errno, errno.ENOENT)
            s.set_codebook(0, books)
            was = s.read(0)[:2]
            # Sealed pages from 4, 36: one ends at or before token 40.
            self.assertEqual(s.archive(40, "vq2", "h84"), 1)
            got = s.read(0)[:2]
            for side in range(2):
                fours = was[side][4:36].reshape(32, g.kv_heads, 4, 4)
                for h in range(g.kv_heads):
                    b = books[side, h].astype(np.float64)
                    x = fours[:, h].reshape(-1, 1, 4).astype(np.float64)
                    near = ((x - b) ** 2).sum(-1).argmin(-1)
                    np.testing.assert_array_equal(
                        got[side][4:36, h].reshape(-1, 4), books[side, h][near]
                    )
            np.testing.assert_array_equal(got[0][36:], was[0][36:])
            e, lost, counts = s.codebook(0)
            np.testing.assert_array_equal(e, books)
            self.assertFalse(lost.any())
            self.assertEqual(counts["uncorrectable"], 0)
            with self.assertRaises(kvmem.Error) as err:
                s.set_codebook(0, books)
            self.assertEqual(err.exception.errno, errno.EEXIST)

            t = c.sequence()
            t.append(1, k, v)
            self.assertEqual(t.archive(40, "vq2", "golay24"), 1)
            learned = t.codebook(1)[0]
            kk = t.read(1)[0][4:36].reshape(-1, g.kv_heads, 4, 4)
            for h in range(g.kv_heads):
                entries = {tuple(x) for x in learned[0, h]}
                fours = kk[:, h].reshape(-1, 4)
                self.assertTrue(all(tuple(x) in entries for x in fours))
        with self.assertRaisesRegex(ValueError, "entries has shape"):
            with kvmem.Cache.embedded(g, 8 << 20) as c:
                c.sequence().set_codebook(0, books[0])

    def test_bad_calls(self):
        g = geometry()
        with kvmem.Cache.embedded(g, 8 << 20) as c:
            s = c.sequence()
            with self.assertRaisesRegex(ValueError, "shape"):
                s.append(0, np.zeros((3, 2, 32)), np.zeros((3, 2, 32)))
            with self.assertRaisesRegex(ValueError, "layer 2 of 2"):
                s.append(2, np.zeros((1, 2, 64)), np.zeros((1, 2, 64)))
            with self.assertRaises(kvmem.Error) as e:
                s.attend(0, np.zeros((2, 64)))  # an empty layer
            self.assertEqual(e.exception.errno, errno.EINVAL)
            s.append(0, np.ones((3, 2, 64)), np.ones((3, 2, 64)))
            with self.assertRaises(kvmem.Error) as e:
                s.attend(0, np.zeros((3, 64)))  # 3 heads over 2 KV heads
            self.assertEqual(e.exception.errno, errno.EINVAL)
            with self.assertRaises(kvmem.Error) as e:
                s.read(0, start=2, ntokens=5)
            self.assertEqual(e.exception.errno, errno.EINVAL)
        with self.assertRaises(kvmem.Error) as e:
            kvmem.Cache.embedded(g, 4096)  # no page of each kind fits
        self.assertEqual(e.exception.errno, errno.EINVAL)

    def test_prefix_keys_are_hashlibs(self):
        """Cache.prefix_keys(): the SHA-256 chain of kvmem_prefix_keys(),
        HiCache's page keys, computed here with hashlib; with and without
        sink tokens and a model, a partial last block unkeyed."""
        import hashlib
        import struct

        def chain(tokens, bounds, model=None):
            prev = hashlib.sha256(model).digest() if model else b""
            keys = []
            for start, end in bounds:
                if end > len(tokens):
                    break
                h = hashlib.sha256(prev)
                h.update(struct.pack("<%dI" % (end - start), *tokens[start:end]))
                prev = h.digest()
                keys.append(prev)
            return keys

        tokens = [int(t) for t in self.rng.integers(0, 2**32, 150, dtype=np.uint64)]
        tokens[:3] = [0, 1, 0xFFFFFFFF]
        for sink, whole, bounds in (
            (4, 5, [(0, 4)] + [(4 + 32 * i, 36 + 32 * i) for i in range(6)]),
            (0, 4, [(32 * i, 32 * i + 32) for i in range(6)]),
        ):
            with kvmem.Cache.embedded(geometry(sink_tokens=sink), 1 << 20) as c:
                for model in (None, "stories260K", b"stories260K"):
                    want = chain(
                        tokens,
                        bounds,
                        model.encode() if isinstance(model, str) else model,
                    )
                    got = c.prefix_keys(tokens, model=model)
                    self.assertEqual(len(got), whole)  # of 150 tokens
                    self.assertEqual(got, want)
                    self.assertTrue(all(type(k) is bytes for k in got))
                # as NumPy arrays too; cut short, no partial block keyed
                self.assertEqual(
                    c.prefix_keys(np.array(tokens[:37], np.uint32)),
                    chain(tokens[:37], bounds),
                )
                self.assertEqual(c.prefix_keys([]), [])
                self.assertEqual(c.prefix_keys(tokens[:3]), [])
                self.assertEqual(c.prefix_keys(tokens, model=""), c.prefix_keys(tokens))
                for bad in ([-1], [2**32], [[1, 2]], [1.5]):
                    with self.assertRaises(ValueError):
                        c.prefix_keys(bad)

    def test_torch_tensors(self):
        try:
            import torch
        except ImportError:
            self.skipTest("PyTorch is not installed (python3-torch)")
        g = geometry(format="fp16")
        k, v = kv(self.rng, 20, g)
        with kvmem.Cache.embedded(g, 8 << 20) as c:
            s = c.sequence()
            s.append(0, torch.from_numpy(k), torch.from_numpy(v))
            q = torch.randn(4, 64, requires_grad=True)
            out, _ = s.attend(0, q)
            ref = attention(q.detach().numpy(), fp16(k), fp16(v))
            np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def _free_dir():
    return tempfile.mkdtemp(prefix="kvmem-py-", dir=os.environ.get("TMPDIR"))


class KvmemdFixture:
    """A kvmemd of the build tree for a TestCase, on a configuration of its
    own, with conf_extra after its [scrub] section's keys."""

    conf_extra = ""

    @classmethod
    def setUpClass(cls):
        daemon = os.path.join(BUILD, "daemon", "kvmemd")
        if not os.access(daemon, os.X_OK):
            raise unittest.SkipTest("%s is not built" % daemon)
        cls.dir = _free_dir()
        cls.sock = os.path.join(cls.dir, "s.sock")
        cls.admin = os.path.join(cls.dir, "a.sock")
        conf = os.path.join(cls.dir, "kvmemd.conf")
        with open(conf, "w") as f:
            f.write(
                "[daemon]\nsocket = %s\nadmin_socket = %s\nstate_dir = %s\n"
                "[scrub]\nrate = 0\n%s"
                % (cls.sock, cls.admin, cls.dir, cls.conf_extra)
            )
        cls.log = open(os.path.join(cls.dir, "log"), "w")
        cls.proc = subprocess.Popen(
            [daemon, "-f", "-c", conf], stdout=cls.log, stderr=cls.log
        )
        for _ in range(500):
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as t:
                    t.connect(cls.sock)
                break
            except OSError:
                if cls.proc.poll() is not None:
                    break
                time.sleep(0.01)
        else:
            cls.tearDownClass()
            raise RuntimeError("kvmemd did not start")

    @classmethod
    def tearDownClass(cls):
        cls.proc.terminate()
        cls.proc.wait(10)
        cls.log.close()
        shutil.rmtree(cls.dir)


class Daemon(KvmemdFixture, unittest.TestCase):
    """The package over a kvmemd session."""

    def test_session_matches_embedded(self):
        """The same calls over kvmemd give the bits of the embedded cache."""
        g = geometry(format="int4", codec="h84")
        rng = np.random.default_rng(7)
        k, v = kv(rng, 90, g)
        q = rng.standard_normal((4, 64)).astype(np.float32)
        got = []
        for c in (
            kvmem.Cache.embedded(g, 8 << 20),
            kvmem.Cache.connect(g, self.sock, quota_bytes=8 << 20),
        ):
            with c:
                s = c.sequence()
                s.append(0, k, v)
                got.append((s.read(0)[0], s.attend(0, q)[0], c.session_id))
        np.testing.assert_array_equal(got[0][0], got[1][0])
        np.testing.assert_array_equal(got[0][1], got[1][1])
        self.assertEqual(got[0][2], 0)
        self.assertGreater(got[1][2], 0)

    def test_reconnect_while_connected(self):
        """reconnect() with the connection up changes nothing: the
        sequence reads the same bits after it."""
        g = geometry(format="int4", codec="h84")
        rng = np.random.default_rng(10)
        k, v = kv(rng, 40, g)
        with kvmem.Cache.connect(g, self.sock, quota_bytes=8 << 20) as c:
            s = c.sequence()
            s.append(0, k, v)
            before = s.read(0)[0]
            c.reconnect()
            np.testing.assert_array_equal(s.read(0)[0], before)

    def test_batch_over_kvmemd(self):
        """A batch of released sequences of a session: each result the
        bits of attending that sequence alone in an embedded cache."""
        g = geometry(format="int4", codec="golay24")
        rng = np.random.default_rng(8)
        data = [kv(rng, n, g) for n in (5, 70, 300)]
        q = rng.standard_normal((3, 4, 64)).astype(np.float32)
        with kvmem.Cache.connect(g, self.sock, quota_bytes=8 << 20) as c:
            seqs = []
            for k, v in data:
                s = c.sequence()
                s.append(0, k, v)
                s.release()
                seqs.append(s)
            out, st = c.attend_batch(seqs, 0, q, threads=2)
        with kvmem.Cache.embedded(g, 8 << 20) as e:
            for i, (k, v) in enumerate(data):
                s = e.sequence()
                s.append(0, k, v)
                one, st1 = s.attend(0, q[i])
                np.testing.assert_array_equal(out[i], one)
                self.assertEqual(st[i], st1)

    def test_prefix_shared_between_sessions(self):
        """A prefix published by one session and attached by another
        holds the bits an embedded cache holds of the same tokens."""
        g = geometry(format="int4", codec="h84")
        rng = np.random.default_rng(9)
        shape = (90, g.layers, g.kv_heads, g.head_dim)
        k = rng.standard_normal(shape).astype(np.float32)
        v = rng.standard_normal(shape).astype(np.float32)
        q = rng.standard_normal((4, 64)).astype(np.float32)
        with kvmem.Cache.connect(g, self.sock) as a, kvmem.Cache.connect(
            g, self.sock
        ) as b:
            # the keys of 100 tokens, of which the first 90 are appended
            keys = a.prefix_keys(list(range(100)), model="test")
            self.assertEqual(len(keys), 4)
            self.assertEqual(keys, b.prefix_keys(range(100), model="test"))
            s = a.sequence()
            s.append_all(k, v)
            # blocks end at 4, 36, 68 and 100: the fourth is not whole
            self.assertEqual(a.block_end(3), 100)
            self.assertEqual(s.publish_prefix(keys), 3)
            t, n = b.attach_prefix(keys)
            self.assertEqual(n, 68)
            with kvmem.Cache.embedded(g, 8 << 20) as e:
                r = e.sequence()
                r.append_all(k[:68], v[:68])
                for layer in range(g.layers):
                    np.testing.assert_array_equal(
                        t.read(layer)[0], r.read(layer)[0]
                    )
                    np.testing.assert_array_equal(
                        t.attend(layer, q)[0], r.attend(layer, q)[0]
                    )
            t2, n2 = b.attach_prefix([b"\0" * 32] + keys[1:])
            self.assertEqual(n2, 0)
            self.assertEqual(t2.len(0), 0)
            with self.assertRaises(ValueError):
                b.attach_prefix([b"short"])
        with kvmem.Cache.embedded(g, 1 << 20) as e:
            with self.assertRaises(kvmem.Error) as err:
                e.attach_prefix(keys)
        self.assertEqual(err.exception.errno, errno.EOPNOTSUPP)

    def test_archive_is_the_daemons(self):
        with kvmem.Cache.connect(geometry(), self.sock) as c:
            with self.assertRaises(kvmem.Error) as e:
                c.sequence().archive(64)
        self.assertEqual(e.exception.errno, errno.EOPNOTSUPP)

    def test_refusals_carry_the_reason(self):
        g = geometry()
        with self.assertRaises(kvmem.Error) as e:
            kvmem.Cache.connect(g, self.sock, gpu_mib=16)
        self.assertEqual(e.exception.errno, errno.EOPNOTSUPP)
        self.assertIn("no GPU pool: pool.gpu_bytes is 0", str(e.exception))
        with self.assertRaises(kvmem.Error) as e:
            kvmem.Cache.connect(g, self.sock, quota_bytes=1 << 40)
        self.assertEqual(e.exception.errno, errno.EDQUOT)
        self.assertIn("pool.session_max_bytes", str(e.exception))
        missing = os.path.join(self.dir, "nobody.sock")
        with self.assertRaises(kvmem.Error) as e:
            kvmem.Cache.connect(g, missing)
        self.assertEqual(e.exception.errno, errno.ENOENT)
        self.assertIn(missing, str(e.exception))


if __name__ == "__main__":
    unittest.main()
