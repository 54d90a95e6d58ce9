#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""format-error.py - how far each format reads keys back, rotated or not

Usage: PYTHONPATH=python scripts/format-error.py [SEED]

Keys as a model has them at head_dim 128: Gaussian rows, 4 KV heads, with
three outlier channels eight times the others. They go through an
embedded cache of each format (h84 words, groups of 32, 32 tokens a page)
with and without the geometry's Hadamard rotation, and come back with
kvmem_seq_read(); printed is the error's energy over the keys' in the
sealed pages (the FP16 sinks and tail left out). Needs the built library
(KVMEM_LIB or build/) and NumPy.
"""
import sys

import numpy as np

import kvmem

TOKENS, HEADS, DIM, SINKS = 4 + 32 * 16, 4, 128, 4
OUTLIERS = [3, 40, 77]


def relative_error(k, fmt, rotation):
    g = kvmem.Geometry(layers=1, kv_heads=HEADS, head_dim=DIM, format=fmt,
                       codec="h84", rotation=rotation)
    with kvmem.Cache.embedded(g, 64 << 20) as c:
        s = c.sequence()
        s.append(0, k, k)
        back, _, _ = s.read(0)
    sealed = slice(SINKS, TOKENS)
    e = back[sealed] - k[sealed]
    return float((e ** 2).sum() / (k[sealed] ** 2).sum())


def main(argv):
    if len(argv) > 1 or (argv and not argv[0].isdigit()):
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        return 2
    rng = np.random.default_rng(int(argv[0]) if argv else 7)
    k = rng.standard_normal((TOKENS, HEADS, DIM)).astype(np.float32)
    k[:, :, OUTLIERS] *= 8
    print("%-6s %12s %12s" % ("format", "unrotated", "hadamard"))
    for fmt in ("int4", "lm4", "lm3", "int2", "lm2"):
        print("%-6s %12.5f %12.5f" % (fmt, relative_error(k, fmt, "none"),
                                      relative_error(k, fmt, "hadamard")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
