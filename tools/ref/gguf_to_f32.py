#!/usr/bin/env python3
"""Write an F32 twin of a (quantized) GGUF: same metadata, every tensor dequantized with gguf-py.

Used to tell apart two sources of difference between llama.cpp and the transformers float32
reference on a real quantized model: running the F32 twin through llama.cpp removes llama.cpp's
quantized-activation matmuls (and, with an f32 KV cache, its f16 cache), leaving only float
rounding. The twin is big (4 bytes per weight): write it outside the repository.

  /root/.cache/oxinfer/refvenv/bin/python tools/ref/gguf_to_f32.py IN.gguf /tmp/OUT-f32.gguf
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import gguf
from gguf import GGUFReader, GGUFValueType, GGUFWriter


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    args = ap.parse_args()

    r = GGUFReader(str(args.src))
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(str(args.dst), arch)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if name == "general.file_type":
            w.add_file_type(gguf.LlamaFileType.ALL_F32)
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        w.add_key_value(name, field.contents(), vtype, sub_type=sub)
    for t in r.tensors:
        shape = tuple(int(x) for x in reversed(t.shape))
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        w.add_tensor(t.name, np.ascontiguousarray(data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {args.dst} ({len(r.tensors)} tensors, F32)")


if __name__ == "__main__":
    main()
