#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""torch-sdpa.py - PyTorch's FP16 decode attention on the GPU, timed

Usage: scripts/torch-sdpa.py [--ctx N] [--batch B] [--heads H]
                             [--kv-heads K] [--dim D] [--reps N]

The outside check of kvmem-bench attend --gpu (scripts/gpu-check.sh): one
query token a sequence against N tokens of FP16 K and V, as
torch.nn.functional.scaled_dot_product_attention computes it, the median
of N timed calls by CUDA events after two warm-up calls. Prints one JSON
object: the shape, torch's version, the GPU, sdpa_us, and how the GQA
group was given (enable_gqa where torch has it, else K and V expanded to
every query head before timing, which reads H / K times the bytes: the
JSON says so). Exits 3, saying why on stderr, without torch or a GPU.
"""
import argparse
import json
import sys


def main(argv):
    ap = argparse.ArgumentParser(add_help=True)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args(argv)
    if a.heads % a.kv_heads or min(a.ctx, a.batch, a.heads, a.dim,
                                   a.reps) < 1:
        sys.stderr.write("torch-sdpa: bad shape\n")
        return 2
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        sys.stderr.write("torch-sdpa: no torch: skipped\n")
        return 3
    if not torch.cuda.is_available():
        sys.stderr.write("torch-sdpa: torch has no CUDA device: skipped\n")
        return 3
    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev).manual_seed(1)
    q = torch.randn(a.batch, a.heads, 1, a.dim, device=dev,
                    dtype=torch.float16, generator=g)
    k = torch.randn(a.batch, a.kv_heads, a.ctx, a.dim, device=dev,
                    dtype=torch.float16, generator=g)
    v = torch.randn_like(k)
    gqa = "enable_gqa"
    try:
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

        def call():
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    except TypeError:
        gqa = "expanded"
        ke = k.repeat_interleave(a.heads // a.kv_heads, dim=1)
        ve = v.repeat_interleave(a.heads // a.kv_heads, dim=1)

        def call():
            return F.scaled_dot_product_attention(q, ke, ve)
    call()
    torch.cuda.synchronize()
    times = []
    for _ in range(a.reps):
        t0 = torch.cuda.Event(enable_timing=True)
        t1 = torch.cuda.Event(enable_timing=True)
        t0.record()
        call()
        t1.record()
        torch.cuda.synchronize()
        times.append(t0.elapsed_time(t1) * 1000.0)
    times.sort()
    kv_bytes = 2 * a.batch * a.kv_heads * a.ctx * a.dim * 2
    us = times[len(times) // 2]
    print(json.dumps({
        "ctx": a.ctx, "batch": a.batch, "heads": a.heads,
        "kv_heads": a.kv_heads, "dim": a.dim, "reps": a.reps,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(dev),
        "gqa": gqa, "sdpa_us": us, "kv_bytes": kv_bytes,
        "sdpa_gbps": kv_bytes / us / 1e3,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
