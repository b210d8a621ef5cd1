#!/usr/bin/env python3
"""Make the dequantization reference fixtures in tests/fixtures/dequant/.

For every weight format oxinfer-kernels supports, this writes a few blocks of raw
bytes (`<NAME>.bin`) and their float32 dequantization (`<NAME>.f32`, little
endian) as computed by the `gguf` Python package (`gguf.quants.dequantize`),
plus `manifest.json` recording the package versions and where each run of blocks
came from:

* real tensors: the first blocks of the first tensor of each type found in the
  GGUF files given with --gguf (default: the two models in ~/.cache/oxinfer/models);
* "random": random bytes with the f16/f32 scale fields set to finite values in
  [-0.1, 0.1] (and, for the float formats, random finite values plus specials);
* "quantize": `gguf.quants.quantize` of random normal data, where the package
  implements quantization for that type.

Q8_K has no dequantize in the gguf package; its reference is computed here with
numpy (`d * qs`, the definition in ggml-quants.c) and the manifest says so.

Run with the reference venv:
    /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_dequant_fixtures.py
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import quants

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "fixtures" / "dequant"
MODELS = Path.home() / ".cache" / "oxinfer" / "models"
DEFAULT_GGUF = [
    MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf",
    MODELS / "gemma-3-270m-q4_k_m.gguf",
]

# (name as gguf spells it, GGML type). Order = order in the manifest.
TYPES = [
    ("F32", T.F32), ("F16", T.F16), ("BF16", T.BF16),
    ("Q4_0", T.Q4_0), ("Q4_1", T.Q4_1), ("Q5_0", T.Q5_0), ("Q5_1", T.Q5_1), ("Q8_0", T.Q8_0),
    ("Q2_K", T.Q2_K), ("Q3_K", T.Q3_K), ("Q4_K", T.Q4_K), ("Q5_K", T.Q5_K), ("Q6_K", T.Q6_K),
    ("Q8_K", T.Q8_K),
    # Table-lookup, ternary and FP4 types (appended last so the random draws of the types
    # above, and thus their fixtures, are unchanged).
    ("IQ2_XXS", T.IQ2_XXS), ("IQ2_XS", T.IQ2_XS), ("IQ3_XXS", T.IQ3_XXS), ("IQ1_S", T.IQ1_S),
    ("IQ4_NL", T.IQ4_NL), ("IQ3_S", T.IQ3_S), ("IQ2_S", T.IQ2_S), ("IQ4_XS", T.IQ4_XS),
    ("IQ1_M", T.IQ1_M), ("TQ1_0", T.TQ1_0), ("TQ2_0", T.TQ2_0), ("MXFP4", T.MXFP4),
]

# Byte offsets of the f16 scale fields (d, dmin, m) inside one block.
F16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
    T.IQ2_XXS: [0], T.IQ2_XS: [0], T.IQ3_XXS: [0], T.IQ1_S: [0], T.IQ4_NL: [0], T.IQ3_S: [0],
    T.IQ2_S: [0], T.IQ4_XS: [0], T.TQ1_0: [52], T.TQ2_0: [64],
}
# IQ1_M keeps its f16 d in the top nibbles of the four u16 scale words at byte 48.
IQ1_M_SCALES = 48
# MXFP4's E8M0 exponent byte: random in this range keeps d * 12 finite and not tiny.
MXFP4_EXPONENTS = (100, 150)
# Byte offsets of f32 scale fields.
F32_FIELDS = {T.Q8_K: [0]}

REAL_BLOCKS = 4  # blocks taken from a real tensor
RANDOM_BLOCKS = 8  # blocks of random bytes
QUANTIZE_BLOCKS = 2  # blocks from gguf.quants.quantize of random data
FLOAT_VALUES = 64  # "blocks" (= single values) per run for F32/F16/BF16


def block_info(qtype: T) -> tuple[int, int]:
    return gguf.GGML_QUANT_SIZES[qtype]


def first_blocks_of_tensors(paths: list[Path]) -> dict[T, tuple[str, str, bytes]]:
    """For each type, (file name, tensor name, raw bytes) of the first tensor of that type."""
    found: dict[T, tuple[str, str, bytes]] = {}
    for path in paths:
        if not path.exists():
            print(f"note: {path} not found, skipping", file=sys.stderr)
            continue
        reader = gguf.GGUFReader(path)
        for t in reader.tensors:
            qtype = T(t.tensor_type)
            if qtype in found:
                continue
            raw = np.ascontiguousarray(t.data).view(np.uint8).reshape(-1)
            found[qtype] = (path.name, t.name, raw.tobytes())
    return found


def random_blocks(qtype: T, n: int, rng: np.random.Generator) -> bytes:
    """n blocks of random bytes with sane scale fields (or random finite floats)."""
    if qtype == T.F32:
        v = (rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)).astype(np.float32)
        specials = np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, 3.4028235e38, 1.0],
                            dtype=np.float32)
        v[: len(specials)] = specials
        return v.tobytes()
    if qtype == T.F16:
        bits = rng.integers(0, 1 << 16, n, dtype=np.uint32).astype(np.uint16)
        # no NaN: exponent all ones -> clear it to zero (subnormal or zero)
        nan_or_inf = (bits & 0x7C00) == 0x7C00
        bits[nan_or_inf] &= 0x83FF
        specials = np.array([0x0000, 0x8000, 0x7C00, 0xFC00, 0x0001, 0x8001, 0x03FF, 0x7BFF],
                            dtype=np.uint16)
        bits[: len(specials)] = specials
        return bits.tobytes()
    if qtype == T.BF16:
        bits = rng.integers(0, 1 << 16, n, dtype=np.uint32).astype(np.uint16)
        nan_or_inf = (bits & 0x7F80) == 0x7F80
        bits[nan_or_inf] &= 0x807F
        specials = np.array([0x0000, 0x8000, 0x7F80, 0xFF80, 0x0001, 0x8001, 0x7F7F, 0x3F80],
                            dtype=np.uint16)
        bits[: len(specials)] = specials
        return bits.tobytes()

    _, type_size = block_info(qtype)
    blocks = rng.integers(0, 256, (n, type_size), dtype=np.uint16).astype(np.uint8)
    for off in F16_FIELDS.get(qtype, []):
        scale = rng.uniform(-0.1, 0.1, n).astype(np.float16)
        blocks[:, off:off + 2] = scale.view(np.uint8).reshape(n, 2)
    for off in F32_FIELDS.get(qtype, []):
        scale = rng.uniform(-0.1, 0.1, n).astype(np.float32)
        blocks[:, off:off + 4] = scale.view(np.uint8).reshape(n, 4)
    if qtype == T.IQ1_M:
        d = rng.uniform(-0.1, 0.1, n).astype(np.float16).view(np.uint16)
        words = blocks[:, IQ1_M_SCALES:IQ1_M_SCALES + 8].copy().view(np.uint16)  # (n, 4)
        for k in range(4):
            nibble = (d >> np.uint16(4 * k)) & np.uint16(0xF)
            words[:, k] = (words[:, k] & np.uint16(0x0FFF)) | (nibble << np.uint16(12))
        blocks[:, IQ1_M_SCALES:IQ1_M_SCALES + 8] = words.view(np.uint8).reshape(n, 8)
    if qtype == T.MXFP4:
        blocks[:, 0] = rng.integers(*MXFP4_EXPONENTS, n).astype(np.uint8)
    return blocks.tobytes()


def quantized_blocks(qtype: T, n: int, rng: np.random.Generator) -> bytes | None:
    block_size, _ = block_info(qtype)
    data = rng.standard_normal((1, n * block_size)).astype(np.float32)
    try:
        q = quants.quantize(data, qtype)
    except NotImplementedError:
        return None
    return np.ascontiguousarray(q).view(np.uint8).tobytes()


def reference(qtype: T, raw: bytes) -> tuple[np.ndarray, str]:
    """Dequantize raw bytes (a whole number of blocks) and say which code did it."""
    arr = np.frombuffer(raw, dtype=np.uint8).reshape(1, -1).copy()
    if qtype == T.Q8_K:
        # gguf has no Q8_K; ggml-quants.c dequantize_row_q8_K: y = d * qs.
        blocks = arr.reshape(-1, 292)
        d = blocks[:, :4].copy().view(np.float32)
        qs = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
        return (d * qs).reshape(-1).astype(np.float32), "numpy in make_dequant_fixtures.py (gguf has no Q8_K dequantize)"
    out = quants.dequantize(arr, qtype)
    return np.asarray(out, dtype=np.float32).reshape(-1), "gguf.quants.dequantize"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", type=Path, nargs="*", default=DEFAULT_GGUF, help="GGUF files to take real blocks from")
    ap.add_argument("--out", type=Path, default=OUT_DIR)
    ap.add_argument("--seed", type=int, default=20260601)
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    real = first_blocks_of_tensors(args.gguf)
    args.out.mkdir(parents=True, exist_ok=True)

    manifest = {
        "generator": "tools/ref/make_dequant_fixtures.py",
        "gguf_version": importlib.metadata.version("gguf"),
        "numpy_version": np.__version__,
        "seed": args.seed,
        "layout": "<NAME>.bin: raw blocks concatenated; <NAME>.f32: little-endian float32 dequantization, "
                  "block_size values per block, same order",
        "types": [],
    }
    total = 0
    for name, qtype in TYPES:
        block_size, type_size = block_info(qtype)
        float_fmt = block_size == 1
        runs: list[tuple[bytes, dict]] = []

        n_real = FLOAT_VALUES if float_fmt else REAL_BLOCKS
        if qtype in real:
            fname, tname, raw = real[qtype]
            take = min(n_real, len(raw) // type_size)
            runs.append((raw[: take * type_size], {"source": tname, "file": fname, "first_block": 0}))

        n_rand = FLOAT_VALUES if float_fmt else RANDOM_BLOCKS
        runs.append((random_blocks(qtype, n_rand, rng), {"source": "random"}))

        if not float_fmt or qtype == T.BF16:
            n_q = FLOAT_VALUES if float_fmt else QUANTIZE_BLOCKS
            q = quantized_blocks(qtype, n_q, rng)
            if q is not None:
                runs.append((q, {"source": "quantize(random normal)"}))

        raw = b"".join(r for r, _ in runs)
        assert len(raw) % type_size == 0
        n_blocks = len(raw) // type_size
        ref, ref_by = reference(qtype, raw)
        assert ref.dtype == np.float32 and ref.size == n_blocks * block_size, (name, ref.shape)
        assert np.all(~np.isnan(ref)), name

        (args.out / f"{name}.bin").write_bytes(raw)
        (args.out / f"{name}.f32").write_bytes(ref.astype("<f4").tobytes())
        total += len(raw) + ref.nbytes

        segments = []
        first = 0
        for r, meta in runs:
            nb = len(r) // type_size
            segments.append({"blocks": [first, first + nb], **meta})
            first += nb
        manifest["types"].append({
            "name": name,
            "ggml_type": int(qtype),
            "block_size": block_size,
            "block_bytes": type_size,
            "n_blocks": n_blocks,
            "raw": f"{name}.bin",
            "dequant": f"{name}.f32",
            "reference": ref_by,
            "segments": segments,
        })
        print(f"{name:5} {n_blocks:3} blocks  " + ", ".join(f"{s['blocks']}: {s['source']}" for s in segments))

    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {args.out} ({total} bytes of data)")


if __name__ == "__main__":
    main()
