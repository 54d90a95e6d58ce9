# SPDX-License-Identifier: MIT
"""kvmem.llama against kvmem-eval, on shared/models/stories260K.bin.

kvmem-eval samples a reference stream from BOS with its float32 forward
(xoshiro256** from --sample-seed), then reports, teacher-forced on that
stream, each mode's perplexity and KL from the reference. Here the same
stream is sampled with the PyTorch forward over TorchKVCache (the sampler
written again below), and the same measures computed with kvmem.llama's
KVCache: equal perplexities say the tokens and the logits are the same,
and the protected modes' KL must agree with kvmem-eval's for the same
pages. Skipped without PyTorch or the model ($KVMEM_MODEL, else
../shared/models/stories260K.bin next to the tree).
"""

import json
import math
import os
import subprocess
import unittest

import numpy as np

try:
    import torch
except ImportError:
    torch = None

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BUILD = os.environ.get("KVMEM_BUILD", os.path.join(ROOT, "build"))
MODEL = os.environ.get(
    "KVMEM_MODEL", os.path.join(ROOT, "..", "shared", "models", "stories260K.bin")
)
NTOK = 48
M64 = (1 << 64) - 1


class Rng:
    """xoshiro256** seeded by splitmix64: libkvmem/rng.h."""

    def __init__(self, seed):
        self.s = []
        for _ in range(4):
            seed = (seed + 0x9E3779B97F4A7C15) & M64
            z = seed
            z = ((z ^ z >> 30) * 0xBF58476D1CE4E5B9) & M64
            z = ((z ^ z >> 27) * 0x94D049BB133111EB) & M64
            self.s.append(z ^ z >> 31)

    @staticmethod
    def _rotl(x, k):
        return (x << k | x >> (64 - k)) & M64

    def unit(self):
        s = self.s
        out = (self._rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = self._rotl(s[3], 45)
        return ((out >> 11) + 1) * 2.0**-53


def sample(logits, rng):
    """kvmem-eval's sample(): the first token whose cumulative weight
    reaches u times the sum, in double."""
    x = logits.double().numpy()
    e = np.exp(x - x.max())
    u = rng.unit() * e.sum()
    i = int(np.searchsorted(np.cumsum(e), u))
    return min(i, x.size - 1)


def log_softmax(x):
    x = x.double()
    return x - x.max() - torch.log(torch.exp(x - x.max()).sum())


@unittest.skipIf(torch is None, "PyTorch is not installed (python3-torch)")
@unittest.skipUnless(os.path.exists(MODEL), "no model at %s" % MODEL)
class LlamaAgainstEval(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from kvmem.llama import BOS, Llama, TorchKVCache

        cls.model = Llama(MODEL)
        rng = Rng(1)
        kv = TorchKVCache(cls.model.config.layers)
        cls.tokens, cls.ref = [BOS], []
        for pos in range(NTOK - 1):
            logits = cls.model.forward(cls.tokens[pos], pos, kv)
            cls.ref.append(logits)
            cls.tokens.append(sample(logits, rng))
        out = subprocess.run(
            [
                os.path.join(BUILD, "tools", "kvmem-eval"),
                "--model", MODEL,
                "--tokens", str(NTOK),
                "--modes", "fp32,int4-h84-interp,int8-secded72",
                "--ber", "0",
                "--seeds", "1",
                "--json",
            ],
            check=True, capture_output=True, text=True,
        ).stdout
        cls.eval = {r["mode"]: r for r in json.loads(out)}

    def measure(self, kv):
        """Teacher-forced on the stream: perplexity and mean KL."""
        nll = kl = 0.0
        for pos in range(NTOK - 1):
            lm = log_softmax(self.model.forward(self.tokens[pos], pos, kv))
            lr = log_softmax(self.ref[pos])
            nll -= float(lm[self.tokens[pos + 1]])
            kl += float((torch.exp(lr) * (lr - lm)).sum())
        return math.exp(nll / (NTOK - 1)), kl / (NTOK - 1)

    def test_reference_stream(self):
        """The stream and its logits are kvmem-eval's: same perplexity."""
        from kvmem.llama import TorchKVCache

        ppl, kl = self.measure(TorchKVCache(self.model.config.layers))
        self.assertAlmostEqual(kl, 0.0, places=9)
        want = self.eval["fp32"]["ppl"]
        self.assertLess(abs(ppl - want), 1e-4 * want, (ppl, want))

    def test_kvmem_modes(self):
        """Attention from kvmem pages: kvmem-eval's numbers for the modes."""
        from kvmem.llama import KVCache

        for mode, fmt, codec in (
            ("int4-h84-interp", "int4", "h84"),
            ("int8-secded72", "int8", "secded72"),
        ):
            kv = KVCache.for_model(self.model, format=fmt, codec=codec)
            ppl, kl = self.measure(kv)
            self.assertEqual(kv.stats["words_uncorrectable"], 0)
            self.assertGreater(kv.stats["words_clean"], 0)
            kv.close()
            want = self.eval[mode]
            self.assertGreater(kl, 0.0, mode)
            # The same pages up to float32 rounding in the matmuls: a
            # value can fall on the other side of a quantization step.
            self.assertLess(abs(kl - want["kl"]), 5e-3 * want["kl"],
                            (mode, kl, want["kl"]))
            self.assertLess(abs(ppl - want["ppl"]), 1e-4 * want["ppl"],
                            (mode, ppl, want["ppl"]))

    def test_generate(self):
        """Greedy text from kvmem int8 pages is the float cache's."""
        from kvmem.llama import KVCache, TorchKVCache

        kv = KVCache.for_model(self.model, format="int8", codec="secded72")
        got = self.model.generate(kv, 24)
        kv.close()
        want = self.model.generate(TorchKVCache(self.model.config.layers), 24)
        self.assertEqual(got, want)

    @unittest.skipUnless(
        torch is not None and torch.cuda.is_available(),
        "PyTorch has no CUDA GPU",
    )
    def test_attention_on_the_gpu(self):
        """The same pages attended by kvmem's kernels on the GPU: the
        logits of the CPU's attention, up to float32 rounding."""
        import kvmem.cuda
        from kvmem.llama import KVCache

        class OnGPU(KVCache):
            def attend(self, layer, q):
                out = super().attend(layer, q.cuda())
                self.on_gpu = out.is_cuda
                return out.cpu()

        with kvmem.cuda.Device(torch.cuda.current_device()) as dev:
            kv_gpu = OnGPU.for_model(self.model, format="int4", gpu=dev)
            kv_cpu = KVCache.for_model(self.model, format="int4")
            for pos in range(NTOK - 1):
                got = self.model.forward(self.tokens[pos], pos, kv_gpu)
                want = self.model.forward(self.tokens[pos], pos, kv_cpu)
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
            self.assertTrue(kv_gpu.on_gpu)
            self.assertEqual(kv_gpu.stats, kv_cpu.stats)
            kv_gpu.close()
            kv_cpu.close()

    @unittest.skipUnless(
        torch is not None and torch.cuda.is_available(),
        "PyTorch has no CUDA GPU",
    )
    def test_generate_on_the_gpu(self):
        """The whole model on the GPU, its KV in int8 pages: the greedy
        text of the float cache on the CPU."""
        import kvmem.cuda
        from kvmem.llama import KVCache, Llama, TorchKVCache

        model = Llama(MODEL, device="cuda")
        with kvmem.cuda.Device(torch.cuda.current_device()) as dev:
            kv = KVCache.for_model(model, format="int8", codec="secded72",
                                   gpu=dev)
            got = model.generate(kv, 24)
            kv.close()
        want = self.model.generate(TorchKVCache(self.model.config.layers), 24)
        self.assertEqual(got, want)

if __name__ == "__main__":
    unittest.main()
