#!/usr/bin/env python3
"""A larger target model for draft-model speculative decoding, made from a small GGUF Llama-family
model (SmolLM2-135M-Instruct by default) so that the small model is a good but imperfect draft.

No larger model with SmolLM2's vocabulary can be fetched here, and a random-weight model of a
larger geometry would agree with SmolLM2 on next to nothing (an acceptance rate near 0, which
says nothing about the engine). This script keeps all of the small model's layers and appends
`--extra-layers` more: their norms are the last original layer's, their matrices are Gaussian
with each original matrix's standard deviation, and their two output projections
(`attn_output`, `ffn_down`) are scaled by `--eps`, so each extra layer adds a small update to
the residual stream. The result computes the small model's function plus a perturbation that
grows with `--eps` × the layer count: greedy tokens where the small model is confident stay the
same, near-ties flip. Its per-token cost grows with the layer count like a larger model's
(every extra layer reads its own weights). The acceptance rate the engines measure with the
small model as the draft depends on `--eps`; state it with any speed-up.

With `--ffn N` (wider than the model's) every layer's MLP is N wide: the original layers'
gate / up rows and down columns are padded with zero blocks (exact: they add silu(0) · 0 = 0,
and the original blocks keep their bytes), the extra layers are random at N. Fewer, wider
layers make a target whose decode reads its weights like a larger model's instead of being
bound by per-layer overheads.

`--distinct N` layers of random weights are generated and repeated in turn (quantizing 300
layers one by one takes minutes); each extra layer is still its own tensors in the file.

Usage (the reference venv has the `gguf` package):
  ~/.cache/oxinfer/refvenv/bin/python tools/ref/make_deep_target.py \\
      ~/.cache/oxinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf /tmp/smollm2-deep.gguf \\
      --extra-layers 300 --eps 0.05
"""

import argparse
import sys
from pathlib import Path

import gguf
import numpy as np

MATRICES = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]
NORMS = ["attn_norm", "ffn_norm"]
SCALED = {"attn_output", "ffn_down"}


def layer_tensors(reader: gguf.GGUFReader, layer: int) -> dict:
    prefix = f"blk.{layer}."
    return {t.name[len(prefix):].removesuffix(".weight"): t for t in reader.tensors
            if t.name.startswith(prefix)}


def padded_ffn(name: str, t, ffn: int) -> np.ndarray:
    """Tensor `name`'s stored bytes with its MLP width padded to `ffn` by zero blocks (rows of
    gate / up, input columns of down); zero bytes decode to 0 in every block format."""
    data = np.array(t.data)
    if name in ("ffn_gate", "ffn_up"):  # [ffn rows, row bytes]
        return np.concatenate([data, np.zeros((ffn - data.shape[0],) + data.shape[1:], data.dtype)])
    if name == "ffn_down":  # [d rows, ffn input features as blocks]
        n_in = int(t.shape[0])  # bytes scale with whole blocks: ffn - n_in is a multiple of 256
        extra = np.zeros((data.shape[0], (ffn - n_in) * data.shape[1] // n_in), data.dtype)
        return np.concatenate([data, extra], axis=1)
    return data


def matrix_stats(last: dict) -> dict:
    """Each matrix of the last layer: name -> (shape, standard deviation of its weights)."""
    stats = {}
    for name in MATRICES:
        w = gguf.quants.dequantize(last[name].data, last[name].tensor_type)
        stats[name] = (list(w.shape), float(w.std()))
    return stats


def random_layer(rng: np.random.Generator, last: dict, stats: dict, eps: float, ffn: int) -> dict:
    """One extra layer with an MLP `ffn` wide: name -> (array in GGUF byte layout, quant type)."""
    out = {}
    for name in NORMS:
        t = last[name]
        out[name] = (np.array(t.data, dtype=np.float32), gguf.GGMLQuantizationType.F32)
    for name in MATRICES:
        shape, std = stats[name]
        std *= eps if name in SCALED else 1.0
        if name in ("ffn_gate", "ffn_up"):
            shape = [ffn, shape[1]]
        elif name == "ffn_down":
            std *= (shape[1] / ffn) ** 0.5  # the same update size from a wider sum
            shape = [shape[0], ffn]
        r = (rng.standard_normal(shape) * std).astype(np.float32)
        out[name] = (gguf.quants.quantize(r, last[name].tensor_type), last[name].tensor_type)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--extra-layers", type=int, default=300)
    ap.add_argument("--eps", type=float, default=0.05)
    ap.add_argument("--distinct", type=int, default=8)
    ap.add_argument("--ffn", type=int, default=0, help="MLP width of every layer (0: the model's)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    reader = gguf.GGUFReader(a.src)
    arch = reader.fields["general.architecture"].contents()
    n_key = f"{arch}.block_count"
    n = int(reader.fields[n_key].contents())
    last = layer_tensors(reader, n - 1)
    missing = [m for m in MATRICES + NORMS if m not in last]
    if missing:
        sys.exit(f"{a.src}: layer {n - 1} lacks {missing} (not a plain Llama-family layer)")
    ff_key = f"{arch}.feed_forward_length"
    ffn0 = int(reader.fields[ff_key].contents())
    ffn = a.ffn or ffn0
    if ffn < ffn0 or ffn % 256:
        sys.exit(f"--ffn {ffn}: must be a multiple of 256 and at least the model's {ffn0}")
    rng = np.random.default_rng(a.seed)
    stats = matrix_stats(last)
    pool = [random_layer(rng, last, stats, a.eps, ffn)
            for _ in range(min(a.distinct, a.extra_layers))]

    writer = gguf.GGUFWriter(a.out, arch)
    for f in reader.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        value = f.contents()
        if f.name == n_key:
            value = n + a.extra_layers
        elif f.name == ff_key:
            value = ffn
        elif f.name == "general.name":
            value = f"{value} + {a.extra_layers} perturbed layers (eps {a.eps})"
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(f.name, value, vtype, sub_type=sub)
    for t in reader.tensors:
        name = t.name.split(".")[2] if t.name.startswith("blk.") else ""
        data = padded_ffn(name, t, ffn) if ffn != ffn0 else np.array(t.data)
        writer.add_tensor(t.name, data, raw_shape=data.shape, raw_dtype=t.tensor_type)
    for i in range(a.extra_layers):
        for name, (data, qtype) in pool[i % len(pool)].items():
            writer.add_tensor(f"blk.{n + i}.{name}.weight", data, raw_shape=data.shape, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file(progress=False)
    writer.close()
    print(f"{a.out}: {n} + {a.extra_layers} layers, eps {a.eps}, {a.out.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
