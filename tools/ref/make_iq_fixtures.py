#!/usr/bin/env python3
"""Make tests/fixtures/iq-tiny/: the tiny random Llama of tests/fixtures/llama-tiny-a with its
2-D weights stored in the 32-weight table formats, and its float twin.

* model-iq.gguf: same metadata and tensors as llama-tiny-a/model.gguf, but every 2-D weight
  (token_embd, which is also the tied output head, attention and MLP projections) in IQ4_NL or
  MXFP4, alternating tensor by tensor so both types meet every kind of layer. IQ4_NL blocks come
  from a plain nearest-value quantizer written here (llama.cpp's imatrix-aware search is not
  needed: the test compares against the same bytes decoded); MXFP4 from gguf.quants.quantize.
* model-deq.gguf: the same tensors dequantized to F32 by gguf.quants.dequantize, so the two
  models hold exactly the same weights and differ only in how the engine multiplies them.

(The 256-weight IQ/TQ types need rows of 256 weights, which this 64-wide model lacks.)

  /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_iq_fixtures.py
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader, GGUFValueType, GGUFWriter

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "tests" / "fixtures" / "llama-tiny-a"
OUT = REPO / "tests" / "fixtures" / "iq-tiny"
KVALUES = np.array(gguf.quants.IQ4_NL.kvalues, dtype=np.float32)


def quantize_iq4_nl(x: np.ndarray) -> np.ndarray:
    """Rows of f32 (last dim a multiple of 32) -> IQ4_NL bytes: d = the block's largest-magnitude
    value / -127 (f16), each weight the nearest table value."""
    blocks = x.reshape(-1, 32).astype(np.float32)
    amax_at = np.abs(blocks).argmax(axis=1)
    vmax = blocks[np.arange(len(blocks)), amax_at]
    d = (vmax / KVALUES[0]).astype(np.float16)
    df = d.astype(np.float32)
    inv = np.where(df == 0, 0, 1 / np.where(df == 0, 1, df))
    q = np.abs(blocks[:, :, None] * inv[:, None, None] - KVALUES[None, None, :]).argmin(axis=2)
    q = q.astype(np.uint8)
    qs = q[:, :16] | (q[:, 16:] << 4)
    out = np.concatenate([d.view(np.uint8).reshape(-1, 2), qs], axis=1)
    return out.reshape(*x.shape[:-1], x.shape[-1] // 32 * 18)


def copy_metadata(r: GGUFReader, w: GGUFWriter) -> None:
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name in ("general.architecture", "general.file_type"):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        w.add_key_value(name, field.contents(), vtype, sub_type=sub)


def main() -> None:
    r = GGUFReader(str(SRC / "model.gguf"))
    arch = r.fields["general.architecture"].contents()
    OUT.mkdir(parents=True, exist_ok=True)
    wq = GGUFWriter(str(OUT / "model-iq.gguf"), arch)
    wd = GGUFWriter(str(OUT / "model-deq.gguf"), arch)
    copy_metadata(r, wq)
    copy_metadata(r, wd)
    k = 0
    for t in r.tensors:
        shape = tuple(int(x) for x in reversed(t.shape))
        x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        if len(shape) == 2 and shape[-1] % 32 == 0:
            qtype = T.IQ4_NL if k % 2 == 0 else T.MXFP4
            k += 1
            raw = quantize_iq4_nl(x) if qtype == T.IQ4_NL else gguf.quants.quantize(x, qtype)
            raw = np.ascontiguousarray(raw, dtype=np.uint8)
            wq.add_tensor(t.name, raw, raw_shape=raw.shape, raw_dtype=qtype)
            deq = gguf.quants.dequantize(raw, qtype).astype(np.float32).reshape(shape)
            wd.add_tensor(t.name, np.ascontiguousarray(deq))
            print(f"{t.name:28} {str(shape):12} {qtype.name}")
        else:
            wq.add_tensor(t.name, np.ascontiguousarray(x))
            wd.add_tensor(t.name, np.ascontiguousarray(x))
    for w in (wq, wd):
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
