#!/usr/bin/env python3
"""GGUF twins of the tiny multimodal fixtures, written by llama.cpp's own converter: the text
model (`model.gguf`) and the towers (`mmproj-f32.gguf`, `convert_hf_to_gguf.py --mmproj`), so
that `oxinfer run -m model.gguf --mmproj mmproj-f32.gguf --image ...` is checked against the
transformers references the safetensors fixtures already hold (same weights, float32).

Per fixture, into tests/fixtures/mmproj-gguf/NAME/:
  model.gguf, mmproj-f32.gguf   llama.cpp's files
  *_config.json                 the fixture's processor files (llama.cpp's mmproj keeps no
                                processor settings; oxinfer reads them beside the mmproj file,
                                else the released checkpoints' defaults apply)
  source.json                   which fixture, which converter, what was changed

Two things are done around the converter, both recorded in source.json:
  * Qwen 3.5: the tiny tokenizer's pre-tokenizer has no hash in llama.cpp's table; it is the
    real Qwen 3.5 one, so the converter is told `qwen35` (`get_vocab_base_pre`).
  * Gemma 4: the tiny tokenizer lists `<mask>` at id 272 past the 272-row embedding; the text
    GGUF gets `gemma4.vocab_size = 272` (the embedding's rows), which oxinfer's loader honours.

llama.cpp's source: --llama-cpp DIR, else the llama-cpp-python sdist (tools/ref/llamacpp_convert.py
downloads it). Nothing of llama.cpp is copied into this repository.

Usage (reference venv):
  ~/.cache/oxinfer/refvenv/bin/python tools/ref/make_mmproj_fixtures.py [--llama-cpp DIR]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FIXTURES = REPO / "tests" / "fixtures"
OUT = FIXTURES / "mmproj-gguf"
SOURCES = ["tiny_gemma4_bidir", "tiny_gemma4_mm", "qwen35-vl-tiny"]
PROCESSOR_FILES = ["preprocessor_config.json", "processor_config.json",
                   "video_preprocessor_config.json"]

CONVERT = r"""
import sys
src, fixture, out, mmproj = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
sys.path.insert(0, src + "/gguf-py")
sys.path.insert(0, src)
import convert_hf_to_gguf as conv
from conversion import base
# The tiny tokenizers stand in for the real ones, whose pre-tokenizers llama.cpp knows.
if "qwen35" in fixture:
    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen35"
args = ["convert_hf_to_gguf.py", fixture, "--outtype", "f32", "--outfile", out]
if mmproj:
    args.append("--mmproj")
elif "qwen35" in fixture:
    args.append("--no-mtp")
sys.argv = args
conv.main()
"""


def run_converter(src: Path, fixture: Path, out: Path, mmproj: bool) -> None:
    subprocess.run([sys.executable, "-c", CONVERT, str(src), str(fixture), str(out),
                    "1" if mmproj else "0"], check=True, stdout=subprocess.DEVNULL)


def with_vocab_size(path: Path, src: Path, arch: str) -> int | None:
    """Adds `{arch}.vocab_size` = the embedding's rows when the token list is longer."""
    sys.path.insert(0, str(src / "gguf-py"))
    import gguf  # noqa: E402

    r = gguf.GGUFReader(path)
    rows = next(int(t.shape[1]) for t in r.tensors if t.name == "token_embd.weight")
    tokens = len(r.fields["tokenizer.ggml.tokens"].data)
    if tokens <= rows:
        return None
    tmp = path.with_suffix(".tmp")
    w = gguf.GGUFWriter(tmp, arch)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_array(name, field.contents())
        else:
            w.add_key_value(name, field.contents(), vtype)
    w.add_uint32(f"{arch}.vocab_size", rows)
    for t in r.tensors:
        w.add_tensor(t.name, t.data, raw_shape=list(reversed([int(d) for d in t.shape])),
                     raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(path)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-cpp", help="llama.cpp source tree (default: the sdist's)")
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    from llamacpp_convert import SDIST_VERSION, llama_cpp_source  # noqa: E402

    src = llama_cpp_source(args.llama_cpp)
    for name in SOURCES:
        fixture = FIXTURES / name
        out = OUT / name
        out.mkdir(parents=True, exist_ok=True)
        run_converter(src, fixture, out / "model.gguf", mmproj=False)
        run_converter(src, fixture, out / "mmproj-f32.gguf", mmproj=True)
        arch = json.loads((fixture / "config.json").read_text())["model_type"]
        arch = {"qwen3_5": "qwen35"}.get(arch, arch)
        rows = with_vocab_size(out / "model.gguf", src, arch)
        copied = [f for f in PROCESSOR_FILES if (fixture / f).is_file()]
        for f in copied:
            shutil.copy(fixture / f, out / f)
        notes = []
        if "qwen35" in name:
            notes.append("converter told the pre-tokenizer is qwen35 (the tiny tokenizer's hash is unknown to it)")
        if rows is not None:
            notes.append(f"{arch}.vocab_size = {rows} added (the tokenizer lists ids past the embedding)")
        (out / "source.json").write_text(json.dumps({
            "fixture": f"tests/fixtures/{name}",
            "writer": f"llama.cpp convert_hf_to_gguf.py (llama-cpp-python {SDIST_VERSION} sdist), "
                      "--outtype f32; towers with --mmproj",
            "processor_files": copied,
            "changes": notes,
        }, indent=1) + "\n")
        sizes = {p.name: p.stat().st_size for p in out.glob("*.gguf")}
        print(name, sizes)


if __name__ == "__main__":
    main()
