#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""llama-text.py - a Llama model writes text, its KV cache in kvmem.

The model is a llama2.c checkpoint (stories260K.bin: a tiny Llama trained
on children's stories) run by kvmem.llama, the PyTorch forward pass whose
K and V go into kvmem pages as it computes them and whose attention reads
them back through the codes (kvmem_attend()). The cache lives in kvmemd
when one listens, else in this process. The same greedy generation over a
plain float32 cache says what the 4-bit pages changed.

Text needs the checkpoint's tokenizer, llama2.c's tokenizer.bin format
(stories260K uses tok512.bin). Without one, the token ids are all there is
to print, and the program says so.

    PYTHONPATH=python python3 examples/llama-text.py [--model PATH]
        [--tokenizer PATH] [--socket PATH | --embedded] [--tokens N]

Paths: --model, else $KVMEM_MODEL, else ../shared/models/stories260K.bin
from the repository root; --tokenizer, else $KVMEM_TOKENIZER, else
tok512.bin beside the model; --socket, else kvmemd's default
($KVMEM_SOCKET, ...). The library: $KVMEM_LIB, else build/libkvmem.so.
"""

import argparse
import errno
import os
import struct
import sys

import torch

import kvmem
from kvmem.llama import BOS, KVCache, Llama, TorchKVCache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.normpath(
    os.path.join(ROOT, "..", "shared", "models", "stories260K.bin"))


def load_vocab(path, size):
    """The pieces of a llama2.c tokenizer.bin: an int32 (the longest piece),
    then for each token a float32 score, an int32 length and the bytes."""
    vocab = []
    with open(path, "rb") as f:
        f.read(4)
        for _ in range(size):
            _score, n = struct.unpack("<fi", f.read(8))
            vocab.append(f.read(n))
    return vocab


def decode(vocab, tokens):
    """Text of @tokens after BOS, as llama2.c's decode() makes it: the
    piece after BOS loses its leading space, and <0xXX> pieces are the raw
    byte XX."""
    out, prev = b"", BOS
    for t in tokens:
        piece = vocab[t]
        if prev == BOS and piece.startswith(b" "):
            piece = piece[1:]
        if len(piece) == 6 and piece.startswith(b"<0x") and piece.endswith(b">"):
            piece = bytes([int(piece[3:5], 16)])
        out, prev = out + piece, t
    return out.decode("utf-8", errors="replace")


def generate(model, kv, n):
    """Up to @n tokens after BOS, greedily; a BOS ends the story."""
    token, out = BOS, []
    for pos in range(n):
        token = int(torch.argmax(model.forward(token, pos, kv)))
        if token == BOS:
            break
        out.append(token)
    return out


def open_cache(model, args):
    """A kvmemd session when one listens (and --embedded is not given),
    else a cache in this process; and words that say which."""
    if not args.embedded:
        try:
            kv = KVCache.for_model(model, connect=args.socket or "")
            return kv, "kvmemd session %d" % kv.cache.session_id
        except kvmem.Error as e:
            if e.errno not in (errno.ENOENT, errno.ECONNREFUSED):
                raise
            print("no kvmemd listens (%s): the cache is embedded" % e.strerror)
    return KVCache.for_model(model), "embedded in this process"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=os.environ.get("KVMEM_MODEL", MODEL))
    p.add_argument("--tokenizer", default=os.environ.get("KVMEM_TOKENIZER"))
    p.add_argument("--socket", help="kvmemd's socket (default: its own)")
    p.add_argument("--embedded", action="store_true", help="no kvmemd")
    p.add_argument("--tokens", type=int, default=64)
    args = p.parse_args()
    tokenizer = args.tokenizer or os.path.join(
        os.path.dirname(args.model), "tok512.bin")

    model = Llama(args.model)
    c = model.config
    print("model: %s: %d layers, %d heads (%d KV heads) of %d, vocabulary %d"
          % (os.path.basename(args.model), c.layers, c.heads, c.kv_heads,
             c.head_dim, c.vocab))
    kv, where = open_cache(model, args)
    g = kv.geometry
    print("cache: %s, %s + %s pages of %d tokens"
          % (where, g.format, g.codec, g.tokens_per_page))
    try:
        tokens = generate(model, kv, args.tokens)
        stats = kv.stats
    finally:
        kv.close()
    ref = generate(model, TorchKVCache(c.layers), args.tokens)

    print("tokens:", " ".join(map(str, tokens)))
    if os.path.exists(tokenizer):
        print("text:", decode(load_vocab(tokenizer, c.vocab), tokens))
    else:
        print("text: no tokenizer at %s (llama2.c's tok512.bin for "
              "stories260K; --tokenizer): the token ids above are the "
              "output" % tokenizer)
    same = sum(1 for _ in zip(tokens, ref))
    for i, (a, b) in enumerate(zip(tokens, ref)):
        if a != b:
            same = i
            break
    print("float32 cache: %s (%d of the first %d tokens the same)"
          % ("the same tokens" if tokens == ref else "other tokens", same,
             len(tokens)))
    print("codes: %(words_clean)d words clean, %(words_corrected)d "
          "corrected, %(words_uncorrectable)d uncorrectable, "
          "%(values_erased)d values erased" % stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
