# SPDX-License-Identifier: MIT
"""A Llama-2 model in PyTorch whose KV cache and attention are kvmem's.

It reads llama2.c checkpoints, the format kvmem-eval reads (7 int32: dim,
hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, negative when the
classifier has weights of its own, and seq_len; then the float32
weights), and computes what kvmem-eval's forward computes, one token at a
time:

    from kvmem.llama import Llama, KVCache
    model = Llama("stories260K.bin")
    kv = KVCache.for_model(model, format="int4", codec="h84")
    tokens = model.generate(kv, 32)

KVCache keeps a sequence's K and V in protected kvmem pages (embedded, or
in kvmemd with connect=) and attends from them; TorchKVCache is the same
interface over float32 tensors, the reference kvmem-eval calls fp32.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, List

import numpy as np
import torch

import kvmem

if TYPE_CHECKING:
    import os

    import kvmem.cuda

BOS: int = 1


class Config:
    def __init__(
        self,
        dim: int,
        hidden: int,
        layers: int,
        heads: int,
        kv_heads: int,
        vocab: int,
        seq_len: int,
    ) -> None:
        self.dim, self.hidden, self.layers = dim, hidden, layers
        self.heads, self.kv_heads, self.vocab = heads, kv_heads, vocab
        self.seq_len = seq_len
        self.head_dim = dim // heads
        self.kv_dim = self.head_dim * kv_heads


class Llama:
    """The weights of a llama2.c checkpoint and the forward pass, on the
    CPU or on @device (a torch.device, or "cuda")."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        device: str | torch.device = "cpu",
    ) -> None:
        with open(path, "rb") as f:
            head = f.read(28)
            if len(head) != 28:
                raise ValueError("%s: too short for a llama2.c header" % path)
            h = struct.unpack("<7i", head)
            data = np.fromfile(f, dtype="<f4")
        if min(h) == 0 or min(h[:5]) < 0 or h[0] % h[3] or h[3] % h[4]:
            raise ValueError("%s: not a llama2.c header: %s" % (path, h))
        c = Config(h[0], h[1], h[2], h[3], h[4], abs(h[5]), h[6])
        shared = h[5] > 0
        d, hd, kv, L = c.dim, c.head_dim, c.kv_dim, c.layers
        sizes = [
            ("tok", (c.vocab, d)),
            ("rms_att", (L, d)),
            ("wq", (L, d, d)),
            ("wk", (L, kv, d)),
            ("wv", (L, kv, d)),
            ("wo", (L, d, d)),
            ("rms_ffn", (L, d)),
            ("w1", (L, c.hidden, d)),
            ("w2", (L, d, c.hidden)),
            ("w3", (L, c.hidden, d)),
            ("rms_final", (d,)),
            ("rope", (c.seq_len, hd)),  # the old freq_cis tables: unused
        ]
        if not shared:
            sizes.append(("wcls", (c.vocab, d)))
        want = sum(int(np.prod(s)) for _, s in sizes)
        if data.size != want:
            raise ValueError(
                "%s: %d floats of weights, but the header needs %d"
                % (path, data.size, want)
            )
        w, at = {}, 0
        for name, shape in sizes:
            n = int(np.prod(shape))
            w[name] = torch.from_numpy(data[at : at + n].reshape(shape).copy())
            w[name] = w[name].to(device)
            at += n
        if shared:
            w["wcls"] = w["tok"]
        self.config, self.w = c, w
        i = torch.arange(0, hd, 2, dtype=torch.float32)
        self._freq = (1.0 / torch.pow(torch.tensor(10000.0), i / hd)).to(device)

    def _rope(self, x, pos):
        """Rotate pairs (2i, 2i + 1) of each head by pos * 10000^(-2i/hd)."""
        a = pos * self._freq
        c, s = torch.cos(a), torch.sin(a)
        x = x.view(-1, self.config.head_dim // 2, 2)
        x0, x1 = x[..., 0], x[..., 1]
        return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).reshape(-1)

    @staticmethod
    def _rmsnorm(x, w):
        return w * (x * torch.rsqrt((x * x).mean() + 1e-5))

    @torch.no_grad()
    def forward(
        self, token: int, pos: int, kv: KVCache | TorchKVCache
    ) -> torch.Tensor:
        """The logits after @token at position @pos; its K and V go to @kv."""
        c, w = self.config, self.w
        x = w["tok"][token].clone()
        for l in range(c.layers):
            xb = self._rmsnorm(x, w["rms_att"][l])
            q = self._rope(w["wq"][l] @ xb, pos)
            k = self._rope(w["wk"][l] @ xb, pos)
            v = w["wv"][l] @ xb
            kv.update(l, k.view(1, c.kv_heads, c.head_dim),
                      v.view(1, c.kv_heads, c.head_dim))
            att = kv.attend(l, q.view(c.heads, c.head_dim)).reshape(c.dim)
            x = x + w["wo"][l] @ att
            xb = self._rmsnorm(x, w["rms_ffn"][l])
            hb = w["w1"][l] @ xb
            x = x + w["w2"][l] @ (hb * torch.sigmoid(hb) * (w["w3"][l] @ xb))
        return w["wcls"] @ self._rmsnorm(x, w["rms_final"])

    def generate(
        self, kv: KVCache | TorchKVCache, n: int, token: int = BOS
    ) -> List[int]:
        """@n tokens after @token, greedily."""
        out = []
        for pos in range(n):
            token = int(torch.argmax(self.forward(token, pos, kv)))
            out.append(token)
        return out


class KVCache:
    """A sequence's KV cache in kvmem pages: update() stores a token's K
    and V of a layer ([tokens, kv_heads, head_dim]), attend() is attention
    of one query token ([heads, head_dim]) over what the layer holds. With
    @gpu (a kvmem.cuda.Device), a model on that GPU attends there, over
    the pages where they are (Cache.register())."""

    def __init__(
        self,
        geometry: kvmem.Geometry,
        arena_bytes: int = 64 << 20,
        connect: str | None = None,
        erasure: str = "interpolate",
        gpu: kvmem.cuda.Device | None = None,
    ) -> None:
        self.geometry = geometry
        if connect is not None:
            self.cache = kvmem.Cache.connect(
                geometry, connect or None, quota_bytes=arena_bytes
            )
        else:
            self.cache = kvmem.Cache.embedded(geometry, arena_bytes)
        try:
            if gpu is not None:
                self.cache.register(gpu)
            self.seq = self.cache.sequence()
        except BaseException:
            self.cache.close()
            raise
        self.erasure = erasure
        self.stats = dict.fromkeys(
            ("words_clean", "words_corrected", "words_uncorrectable",
             "values_erased", "headers_uncorrectable"), 0)

    @classmethod
    def for_model(
        cls,
        model: Llama,
        format: str = "int4",
        codec: str = "h84",
        tokens_per_page: int = 32,
        sink_tokens: int = 4,
        **kw: Any,
    ) -> KVCache:
        """A cache of @model's shape; groups of 32 channels, or the head's."""
        c = model.config
        g = kvmem.Geometry(
            c.layers, c.kv_heads, c.head_dim,
            tokens_per_page=tokens_per_page,
            group_size=32 if c.head_dim % 32 == 0 else c.head_dim,
            sink_tokens=sink_tokens, format=format, codec=codec)
        return cls(g, **kw)

    def __len__(self) -> int:
        return self.seq.len(0)

    def update(self, layer: int, k: kvmem.ArrayIn, v: kvmem.ArrayIn) -> None:
        self.seq.append(layer, k, v)

    def attend(self, layer: int, q: kvmem.ArrayIn) -> torch.Tensor:
        out, st = self.seq.attend(layer, q, erasure=self.erasure, threads=0,
                                  importance_alpha=-1.0)
        for key, n in st.items():
            self.stats[key] += n
        return torch.from_numpy(out) if isinstance(out, np.ndarray) else out

    def close(self) -> None:
        self.cache.close()


class TorchKVCache:
    """The same interface over float32 tensors: no quantization, no code."""

    def __init__(self, layers: int) -> None:
        self.k: List[List[torch.Tensor]] = [[] for _ in range(layers)]
        self.v: List[List[torch.Tensor]] = [[] for _ in range(layers)]

    def __len__(self) -> int:
        return sum(t.shape[0] for t in self.k[0])

    def update(self, layer: int, k: kvmem.ArrayIn, v: kvmem.ArrayIn) -> None:
        self.k[layer].append(torch.as_tensor(k, dtype=torch.float32))
        self.v[layer].append(torch.as_tensor(v, dtype=torch.float32))

    def attend(self, layer: int, q: kvmem.ArrayIn) -> torch.Tensor:
        q = torch.as_tensor(q, dtype=torch.float32)
        k = torch.cat(self.k[layer])  # [T, kv_heads, hd]
        v = torch.cat(self.v[layer])
        group = q.shape[0] // k.shape[1]
        k = k.repeat_interleave(group, 1).transpose(0, 1)  # [heads, T, hd]
        v = v.repeat_interleave(group, 1).transpose(0, 1)
        s = (k @ q.unsqueeze(-1)).squeeze(-1) / q.shape[-1] ** 0.5
        return (torch.softmax(s, -1).unsqueeze(1) @ v).squeeze(1)

    def close(self) -> None:
        pass
