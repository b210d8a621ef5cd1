#!/usr/bin/env python3
"""Convert a tiny random fixture (config.json + model.safetensors) to GGUF with llama.cpp's own
converter (`convert_hf_to_gguf.py`), then check llama.cpp's logits on it against the fixture's
transformers reference.

This is how the GGUF layout of an architecture is pinned to llama.cpp's rather than to our reading
of it: the file is written by llama.cpp's converter (so tensor names, reorderings such as Qwen 3.5's
tiled V heads, `1 + w` norms, `-exp(A_log)` and metadata keys are exactly llama.cpp's), and
llama.cpp's forward pass on that file must reproduce transformers' logits.

The tiny fixtures have no tokenizer files, so the converter's vocabulary step is replaced by the
260-token byte-level BPE vocabulary of make_tiny_llama.py (the only change made to its behaviour).

llama.cpp's source comes from the llama-cpp-python sdist on PyPI (the converter is not in the
wheel): pass --llama-cpp DIR (a llama.cpp source tree) or let the script download the sdist into
~/.cache/oxinfer/llama-cpp-src/. Nothing of llama.cpp is copied into this repository.

Usage (reference venv):
  /root/.cache/oxinfer/refvenv/bin/python tools/ref/llamacpp_convert.py tests/fixtures/qwen35-tiny

A real HuggingFace checkpoint (with its own tokenizer files) is converted with the converter
unchanged, to any of its output types, and not checked (the README's Q8 comparison: llama.cpp's
own Q8_0 of a bf16 checkpoint):
  .../python tools/ref/llamacpp_convert.py BF16_DIR --real --outtype q8_0 --outfile OUT.gguf
"""
from __future__ import annotations

import argparse
import json
import sys
import tarfile
import urllib.request
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SDIST_VERSION = "0.3.36"
CACHE = Path.home() / ".cache" / "oxinfer" / "llama-cpp-src"


def llama_cpp_source(explicit: str | None) -> Path:
    """A llama.cpp source tree holding convert_hf_to_gguf.py."""
    if explicit:
        return Path(explicit)
    root = CACHE / f"llama_cpp_python-{SDIST_VERSION}" / "vendor" / "llama.cpp"
    if (root / "convert_hf_to_gguf.py").exists():
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    meta = json.load(urllib.request.urlopen(f"https://pypi.org/pypi/llama-cpp-python/{SDIST_VERSION}/json"))
    url = next(u["url"] for u in meta["urls"] if u["packagetype"] == "sdist")
    tar = CACHE / url.rsplit("/", 1)[1]
    print(f"downloading {url}", flush=True)
    urllib.request.urlretrieve(url, tar)
    with tarfile.open(tar) as tf:
        tf.extractall(CACHE, filter="data")
    return root


def convert(fixture: Path, out: Path, src: Path) -> None:
    sys.path.insert(0, str(src / "gguf-py"))
    sys.path.insert(0, str(src))
    sys.path.insert(1, str(HERE))
    import make_tiny_llama as base  # noqa: E402  (after the path change: uses llama.cpp's gguf-py)
    import convert_hf_to_gguf as conv  # noqa: E402
    from conversion import base as conv_base  # noqa: E402

    def tiny_vocab(self) -> None:
        tokens, types, merges = base.gguf_vocab()
        self.gguf_writer.add_tokenizer_model("gpt2")
        self.gguf_writer.add_tokenizer_pre("qwen2")
        self.gguf_writer.add_token_list(tokens)
        self.gguf_writer.add_token_types(types)
        self.gguf_writer.add_token_merges(merges)
        self.gguf_writer.add_bos_token_id(base.BOS_ID)
        self.gguf_writer.add_eos_token_id(base.EOS_ID)
        self.gguf_writer.add_add_bos_token(False)

    conv_base.TextModel._set_vocab_gpt2 = tiny_vocab
    conv_base.TextModel._set_vocab_sentencepiece = tiny_vocab
    conv_base.TextModel._set_vocab_qwen = tiny_vocab
    sys.argv = ["convert_hf_to_gguf.py", str(fixture), "--outtype", "f32", "--outfile", str(out), "--no-mtp"]
    conv.main()


def convert_real(model: Path, outtype: str, out: Path, src: Path) -> None:
    """llama.cpp's converter as it is (the checkpoint's own vocabulary)."""
    sys.path.insert(0, str(src / "gguf-py"))
    sys.path.insert(0, str(src))
    import convert_hf_to_gguf as conv  # noqa: E402

    sys.argv = ["convert_hf_to_gguf.py", str(model), "--outtype", outtype, "--outfile", str(out)]
    conv.main()


def check(fixture: Path, gguf_path: Path) -> dict:
    sys.path.insert(0, str(HERE))
    import make_tiny_llama as base  # noqa: E402

    ref = json.loads((fixture / "reference.json").read_text())
    logits = {p["name"]: np.load(fixture / p["logits_file"]) for p in ref["prompts"]}
    tmp = gguf_path.parent
    if gguf_path.name != "model.gguf":
        raise SystemExit("the GGUF must be named model.gguf")
    return base.llamacpp_check(tmp, ref["prompts"], logits)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("fixture", type=Path)
    ap.add_argument("--llama-cpp", help="llama.cpp source tree (default: download the sdist)")
    ap.add_argument("--check-only", action="store_true", help="only run llama.cpp on the existing GGUF")
    ap.add_argument("--real", action="store_true",
                    help="a real checkpoint: convert with its own vocabulary, no check")
    ap.add_argument("--outtype", default="f32", help="with --real: the converter's --outtype")
    ap.add_argument("--outfile", type=Path, help="with --real: the GGUF to write")
    args = ap.parse_args()
    if args.real:
        if args.outfile is None:
            raise SystemExit("--real needs --outfile")
        convert_real(args.fixture, args.outtype, args.outfile, llama_cpp_source(args.llama_cpp))
        print(f"wrote {args.outfile} ({args.outfile.stat().st_size / 1e6:.1f} MB)")
        return
    out = args.fixture / "model.gguf"
    if not args.check_only:
        convert(args.fixture, out, llama_cpp_source(args.llama_cpp))
        print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB)")
    res = check(args.fixture, out)
    print(json.dumps(res, indent=1))
    ref_path = args.fixture / "reference.json"
    ref = json.loads(ref_path.read_text())
    ref["gguf"] = {"file": "model.gguf", "tensor_type": "F32",
                   "writer": f"llama.cpp convert_hf_to_gguf.py (llama-cpp-python {SDIST_VERSION} sdist), "
                             "--outtype f32 --no-mtp, vocabulary of make_tiny_llama.py"}
    ref["llamacpp_gguf_check"] = res
    ref_path.write_text(json.dumps(ref, indent=1) + "\n")


if __name__ == "__main__":
    main()
