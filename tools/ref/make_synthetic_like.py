#!/usr/bin/env python3
"""A GGUF with a real file's metadata, tokenizer, tensor names, shapes and types, but random
weights: for speed measurements on machines the real file cannot reach.

The real small models (SmolLM2-135M Q4_1, Gemma 3 270M Q4_K_M) are 98 MB and 253 MB; the GPU
machine takes at most 64 MiB per call and has no network. Two steps:

  make_synthetic_like.py skeleton REAL.gguf OUT.skel.xz   (here: the real header, then zeros)
  make_synthetic_like.py expand OUT.skel.xz OUT.gguf       (there: the same file, random data)

The skeleton is the real file with every tensor's bytes zeroed, xz-compressed (the metadata and
the tokenizer are kept, so both engines tokenize and template as with the real file; 0.5-3 MB).
`expand` fills each tensor with random blocks of its type whose scales give weights of std
~0.02 (norm weights 1.0), so activations stay finite like the real model's. Decode and prefill
time do not depend on the weights' values; outputs do, so never use these files for
correctness. Seeded: the same skeleton gives the same file.

Run with the reference venv (numpy, gguf): ~/.cache/oxinfer/refvenv/bin/python
"""
from __future__ import annotations

import argparse
import lzma
import shutil
import sys
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType as Q

SEED = 4242
STD = 0.02
CHUNK = 1 << 24

# Block bytes and where each block's f16 scale fields sit, with the scale values giving weights
# of std ~STD for uniformly random quants: (byte offset, value) pairs. Q4_1 / Q5_1 minimum terms
# centre the weights; K-quant mins use dmin = 7.5 d as make_synthetic_7b.py does.
BLOCKS: dict[Q, tuple[int, list[tuple[int, float]]]] = {
    Q.Q4_0: (18, [(0, STD / 4.6)]),
    Q.Q4_1: (20, [(0, STD / 4.6), (2, -7.5 * STD / 4.6)]),
    Q.Q5_0: (22, [(0, STD / 9.2)]),
    Q.Q5_1: (24, [(0, STD / 9.2), (2, -15.5 * STD / 9.2)]),
    Q.Q8_0: (34, [(0, STD / 74.0)]),
    Q.Q2_K: (84, [(80, STD / (7.5 * 1.1)), (82, STD / (7.5 * 1.1) * 0.2)]),
    Q.Q3_K: (110, [(108, STD / (18.5 * 2.3))]),
    Q.Q4_K: (144, [(0, STD / (31.5 * 4.6)), (2, 7.5 * STD / (31.5 * 4.6))]),
    Q.Q5_K: (176, [(0, STD / (31.5 * 9.2)), (2, 15.5 * STD / (31.5 * 9.2))]),
    Q.Q6_K: (210, [(208, STD / (74.0 * 18.5))]),
}


def skeleton(real: Path, out: Path) -> None:
    """Writes `real` with its tensor data zeroed, xz-compressed, to `out`."""
    r = gguf.GGUFReader(real)
    size = real.stat().st_size
    with open(real, "rb") as f, lzma.open(out, "wb", preset=6) as o:
        o.write(f.read(r.data_offset))
        left = size - r.data_offset
        zeros = bytes(CHUNK)
        while left > 0:
            n = min(left, CHUNK)
            o.write(zeros[:n])
            left -= n
    print(f"{out}: {out.stat().st_size / 1e6:.1f} MB for a {size / 1e6:.0f} MB file")


def fill(rng: np.random.Generator, t) -> None:
    """Fills tensor `t` (a view into the writable mapping) with random weights of its type."""
    data = t.data
    if t.tensor_type in (Q.F32, Q.F16, Q.BF16):
        flat = data.reshape(-1)
        if "norm" in t.name:
            flat[:] = 1.0
        elif t.tensor_type == Q.BF16:
            v = (rng.standard_normal(flat.size).astype(np.float32) * STD).view(np.uint32)
            flat.view(np.uint16)[:] = (v >> 16).astype(np.uint16)
        else:
            flat[:] = rng.standard_normal(flat.size).astype(np.float32) * STD
        return
    if t.tensor_type not in BLOCKS:
        sys.exit(f"{t.name}: type {t.tensor_type.name} has no random block generator here")
    bb, scales = BLOCKS[t.tensor_type]
    blocks = data.reshape(-1, bb)
    for start in range(0, blocks.shape[0], CHUNK // bb):
        part = blocks[start:start + CHUNK // bb]
        part[:] = np.frombuffer(rng.bytes(part.size), dtype=np.uint8).reshape(part.shape)
        for off, value in scales:
            jitter = rng.uniform(0.5, 1.5, size=part.shape[0]).astype(np.float32)
            f16 = (jitter * np.float32(value)).astype(np.float16)
            part[:, off:off + 2] = f16.view(np.uint8).reshape(-1, 2)


def expand(skel: Path, out: Path) -> None:
    """Decompresses `skel` to `out` and fills every tensor with random weights."""
    with lzma.open(skel, "rb") as s, open(out, "wb") as o:
        shutil.copyfileobj(s, o, CHUNK)
    r = gguf.GGUFReader(out, "r+")
    rng = np.random.default_rng(SEED)
    for t in r.tensors:
        fill(rng, t)
    r.data.flush()
    print(f"{out}: {len(r.tensors)} tensors of random weights")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("skeleton", help="the real file with zeroed tensors, xz-compressed")
    a.add_argument("real", type=Path)
    a.add_argument("out", type=Path)
    b = sub.add_parser("expand", help="a skeleton to a GGUF of random weights")
    b.add_argument("skel", type=Path)
    b.add_argument("out", type=Path)
    args = ap.parse_args()
    if args.cmd == "skeleton":
        skeleton(args.real, args.out)
    else:
        expand(args.skel, args.out)


if __name__ == "__main__":
    main()
