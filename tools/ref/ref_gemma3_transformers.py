#!/usr/bin/env python3
"""Float32 transformers reference for Gemma 3 270M Q4_K_M (a base model: raw prompts only).

transformers dequantizes the GGUF to float32 (norms: the file's 1 + w minus 1) and runs its own
gemma3_text code with eager attention: a dequantize-then-multiply reference on the real weights.

Writes into --out (default tests/fixtures/gemma3/):
  transformers_ref.json  versions, model file + sha256, tokenizer facts, and per prompt: text, ids,
                         greedy_ids (32, transformers KV cache), greedy_text, eos_at, margins,
                         top20 (per prompt position: [[id, logit], ...] best first),
                         logits_file
  logits_<i>.npy         float32 [vocab / 64]: last-position logits of ids 0, 64, 128, ...
                         (a strided sample; the whole row is 1 MiB)

The last prompt is longer than the model's 512-token sliding window, so the local layers' window
is exercised on real weights.

Run: /root/.cache/oxinfer/refvenv/bin/python tools/ref/ref_gemma3_transformers.py
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

import gguf
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ref_smollm2_transformers import (  # noqa: E402
    N_GREEDY, TOPK, _dist_version, gguf_tokenizer_facts, run_prompt, sha256_of)

REPO = Path(__file__).resolve().parents[2]
DEFAULT_GGUF = Path("/root/.cache/oxinfer/models/gemma-3-270m-q4_k_m.gguf")
STRIDE = 64

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "The three primary colors are",
    "Water boils at a temperature of",
    "In 1969, the first humans to walk on the Moon were",
]
# > 512 tokens: numbered sentences, then a question about the start.
LONG = ("Here is a list of facts.\n" + "".join(
    f"Fact {i}: the number {i} squared is {i * i}, and {i} plus {i} is {2 * i}.\n"
    for i in range(1, 31)) + "The first fact in the list says that")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", type=Path, default=DEFAULT_GGUF)
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "gemma3")
    args = ap.parse_args()
    torch.set_num_threads(2)
    args.out.mkdir(parents=True, exist_ok=True)
    d, name = str(args.gguf.parent), args.gguf.name
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(
        d, gguf_file=name, dtype=torch.float32, attn_implementation="eager").eval()
    cfg = model.config
    print("config:", cfg.layer_types, cfg.sliding_window, cfg.rope_parameters, cfg.query_pre_attn_scalar)
    eos_ids = {tok.eos_token_id}
    results = []
    for i, text in enumerate(PROMPTS + [LONG]):
        ids = [int(x) for x in tok(text)["input_ids"]]
        logits, greedy, margins = run_prompt(model, ids)
        last = logits[-1].numpy().astype(np.float32)
        np.save(args.out / f"logits_{i}.npy", np.ascontiguousarray(last[::STRIDE]))
        # top-20 of every position (short prompts) or of the last 16 (the long one)
        first = 0 if len(ids) <= 64 else len(ids) - 16
        top = torch.topk(logits[first:], TOPK, dim=-1)
        top20 = [[[int(j), float(v)] for j, v in zip(ix.tolist(), vs.tolist())]
                 for ix, vs in zip(top.indices, top.values)]
        eos_at = next((k for k, t in enumerate(greedy) if t in eos_ids), None)
        results.append({
            "index": i, "kind": "raw", "text": text, "ids": ids, "n_ids": len(ids),
            "greedy_ids": greedy,
            "greedy_text": tok.decode(greedy, skip_special_tokens=False),
            "eos_at": eos_at,
            "min_greedy_margin": min(margins),
            "greedy_margins": margins,
            "logits_file": f"logits_{i}.npy",
            "logits_stride": STRIDE,
            "top20_first_position": first,
            "top20": top20,
        })
        print(f"[{i}] {len(ids)} ids, margin {min(margins):.4g}: {text[:40]!r} -> "
              f"{results[-1]['greedy_text']!r}", flush=True)
    ref = {
        "generator": "tools/ref/ref_gemma3_transformers.py",
        "versions": {
            "python": sys.version.split()[0], "torch": torch.__version__,
            "transformers": transformers.__version__, "numpy": np.__version__,
            "gguf": getattr(gguf, "__version__", None) or _dist_version("gguf"),
        },
        "model_file": name,
        "model_sha256": sha256_of(args.gguf),
        "load": "AutoModelForCausalLM.from_pretrained(dir, gguf_file=NAME, dtype=float32, "
                "attn_implementation='eager'): weights dequantized to float32",
        "vocab_size": int(cfg.vocab_size),
        "config": {"layer_types": list(cfg.layer_types), "sliding_window": cfg.sliding_window,
                   "rope_parameters": cfg.rope_parameters,
                   "query_pre_attn_scalar": cfg.query_pre_attn_scalar},
        "gguf_tokenizer_metadata": gguf_tokenizer_facts(args.gguf),
        "tokenizer": {"class": type(tok).__name__, "bos_token_id": tok.bos_token_id,
                      "eos_token_id": tok.eos_token_id},
        "n_greedy": N_GREEDY,
        "greedy_method": "argmax, transformers KV cache (prefill then one token per step), "
                         "exactly 32 tokens, no stop at EOS",
        "tokenization": "tok(text) (adds BOS)",
        "top_k_per_position": TOPK,
        "prompts": results,
    }
    (args.out / "transformers_ref.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
    print("wrote", args.out / "transformers_ref.json")


if __name__ == "__main__":
    main()
