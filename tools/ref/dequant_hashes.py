#!/usr/bin/env python3
"""SHA-256 of every tensor of a GGUF file dequantized by the `gguf` package, for the bit-exact
dequantization check of oxinfer on real files (crates/oxinfer/tests/dequant_real_gguf.rs).

For each tensor: `gguf.quants.dequantize(data, type)` as little-endian float32 in GGUF's row
order (the flat array oxinfer's `TensorView::to_f32` returns), hashed with SHA-256. Writes
`<FILE>.dequant.json` beside each file (or under --out):

  {"file": "x.gguf", "bytes": N, "gguf": "0.19.0",
   "tensors": {"blk.0.ffn_down.weight": {"type": "IQ4_XS", "n": 884736, "sha256": "..."}, ...}}

  ~/.cache/oxinfer/refvenv/bin/python tools/ref/dequant_hashes.py FILE.gguf [FILE.gguf ...]

About 1-3 s per million weights of the IQ types on one core (numpy); F32/F16/BF16 are fast.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np

from gguf import GGUFReader
from gguf.quants import dequantize


def hashes(path: Path) -> dict:
    r = GGUFReader(str(path))
    out = {}
    for t in r.tensors:
        values = dequantize(t.data, t.tensor_type)
        flat = np.ascontiguousarray(values, dtype="<f4").reshape(-1)
        if flat.size != int(t.n_elements):
            sys.exit(f"{path}: {t.name}: gguf gave {flat.size} values, expected {t.n_elements}")
        out[t.name] = {
            "type": t.tensor_type.name,
            "n": int(flat.size),
            "sha256": hashlib.sha256(flat.tobytes()).hexdigest(),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", type=Path, nargs="+")
    ap.add_argument("--out", type=Path, help="folder for the JSON files (default: beside each file)")
    args = ap.parse_args()
    for f in args.files:
        t0 = time.time()
        tensors = hashes(f)
        doc = {"file": f.name, "bytes": f.stat().st_size, "gguf": version("gguf"), "tensors": tensors}
        dst = (args.out or f.parent) / (f.name + ".dequant.json")
        dst.write_text(json.dumps(doc, indent=1) + "\n")
        types = sorted({v["type"] for v in tensors.values()})
        print(f"{dst}: {len(tensors)} tensors ({', '.join(types)}) in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
