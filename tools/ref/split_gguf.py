#!/usr/bin/env python3
"""Splits a GGUF file into parts laid out exactly as llama.cpp's
`llama-gguf-split --split --split-max-tensors N IN OUT` writes them, with the `gguf` package's own
writer (`GGUFWriter(split_max_tensors=N)`, the code path of `convert_hf_to_gguf.py
--split-max-tensors`), which follows the same layout
(llama.cpp tools/gguf-split/gguf-split.cpp, `split_strategy`):

* parts named `OUT-00001-of-0000N.gguf` (`llama_split_path`: "%s-%05d-of-%05d.gguf");
* part 1 holds every metadata key of IN in IN's order, then `split.no` (u16), `split.count` (u16)
  and `split.tensors.count` (i32); the other parts hold only those three keys;
* tensors in IN's order, N per part; each part's data section aligned to 32 bytes and every
  tensor padded to 32 bytes.

Then it checks the parts: every tensor's bytes read back equal IN's, and with --check-llama-cpp,
llama.cpp itself (llama-cpp-python, whose loader joins the parts) gives logits identical to the
single file's on a few tokens, recorded in OUT_DIR/split_check.json.

Usage (from the repository root, with the reference venv):
  ~/.cache/oxinfer/refvenv/bin/python tools/ref/split_gguf.py IN.gguf OUT_PREFIX \
      --split-max-tensors N [--check-llama-cpp TOKEN,TOKEN,...]

The fixture tests/fixtures/llama-tiny-split/ was made with
  tools/ref/split_gguf.py tests/fixtures/llama-tiny-a/model.gguf \
      tests/fixtures/llama-tiny-split/model --split-max-tensors 8 --check-llama-cpp 1,5,9,14,3
"""

import argparse
import hashlib
import json
import sys
from pathlib import Path

import gguf
import numpy as np


def split(src: Path, prefix: str, max_tensors: int) -> list[Path]:
    reader = gguf.GGUFReader(src)
    if "general.alignment" in reader.fields:
        sys.exit("general.alignment is set: gguf-split keeps it, GGUFWriter would not; not handled")
    fields = [f for f in reader.fields.values() if not f.name.startswith("GGUF.")]
    if not fields or fields[0].name != "general.architecture":
        sys.exit("general.architecture must be the first key (GGUFWriter writes it first)")
    writer = gguf.GGUFWriter(None, fields[0].contents(), split_max_tensors=max_tensors)
    for field in fields[1:]:
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    for t in reader.tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    out = Path(prefix + ".gguf")
    out.parent.mkdir(parents=True, exist_ok=True)
    writer.write_header_to_file(path=out)
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    writer.close()
    n = len(writer.tensors)
    return [Path(f"{prefix}-{i + 1:05d}-of-{n:05d}.gguf") for i in range(n)]


def check_bytes(src: Path, parts: list[Path]) -> None:
    want = {t.name: bytes(t.data.tobytes()) for t in gguf.GGUFReader(src).tensors}
    got = {}
    for i, p in enumerate(parts):
        r = gguf.GGUFReader(p)
        assert r.fields["split.no"].contents() == i, p
        assert r.fields["split.count"].contents() == len(parts), p
        assert r.fields["split.tensors.count"].contents() == len(want), p
        for t in r.tensors:
            got[t.name] = bytes(t.data.tobytes())
    assert got.keys() == want.keys(), "tensor names differ"
    for name in want:
        assert got[name] == want[name], f"{name}: bytes differ"


def llama_logits(path: Path, tokens: list[int]) -> np.ndarray:
    from llama_cpp import Llama

    llm = Llama(model_path=str(path), n_ctx=64, logits_all=True, verbose=False, n_threads=2)
    llm.eval(tokens)
    return np.array(llm.scores[: len(tokens)], dtype=np.float32)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", type=Path)
    ap.add_argument("prefix")
    ap.add_argument("--split-max-tensors", type=int, required=True)
    ap.add_argument("--check-llama-cpp", metavar="TOKENS", help="comma-separated token ids")
    a = ap.parse_args()
    parts = split(a.src, a.prefix, a.split_max_tensors)
    check_bytes(a.src, parts)
    print(f"{len(parts)} parts, tensor bytes identical to {a.src}")
    if a.check_llama_cpp:
        import llama_cpp

        tokens = [int(t) for t in a.check_llama_cpp.split(",")]
        single = llama_logits(a.src, tokens)
        joined = llama_logits(parts[0], tokens)
        identical = bool(np.array_equal(single, joined))
        print(f"llama.cpp logits, split vs single: identical={identical}, "
              f"max |diff| {float(np.abs(single - joined).max())}")
        record = {
            "source": str(a.src),
            "source_sha256": sha256(a.src),
            "parts": [p.name for p in parts],
            "parts_sha256": [sha256(p) for p in parts],
            "split_max_tensors": a.split_max_tensors,
            "llama_cpp_tokens": tokens,
            "llama_cpp_logits_identical": identical,
            "versions": {"gguf": gguf.__version__ if hasattr(gguf, "__version__") else "0.19.0",
                         "llama_cpp_python": llama_cpp.__version__, "numpy": np.__version__},
            "command": " ".join(sys.argv),
        }
        out = Path(a.prefix).parent / "split_check.json"
        out.write_text(json.dumps(record, indent=1) + "\n")
        if not identical:
            sys.exit("llama.cpp gives different logits for the split model")


if __name__ == "__main__":
    main()
