#!/usr/bin/env python3
"""Float32 transformers reference for a real GGUF (SmolLM2-135M-Instruct Q4_1 by default).

transformers dequantizes the GGUF to float32 and runs its own Llama code (eager attention), so
this is a dequantize-then-multiply reference on the real weights.

Writes into --out (default tests/fixtures/smollm2/):
  transformers_ref.json   versions, model file, tokenizer facts, and per prompt:
                          text, kind (raw|chat), rendered (the string tokenized), ids (prompt token ids
                          exactly as the tokenizer gives them), greedy_ids (32), greedy_text,
                          eos_at (index in greedy_ids of the first EOS, or null), min_greedy_margin
                          (over all 32 steps), min_greedy_margin_until_eos (steps 0..eos_at),
                          greedy_margins (top-1 minus top-2 logit at each step),
                          top20 (per prompt position: [[id, logit], ...] best first), logits_file
  logits_<i>.npy          float32 [vocab]: logits of the LAST prompt position of prompt i

Run: /root/.cache/oxinfer/refvenv/bin/python tools/ref/ref_smollm2_transformers.py \
        [--gguf /root/.cache/oxinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf] [--out DIR]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import torch

import gguf
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

REPO = Path(__file__).resolve().parents[2]
DEFAULT_GGUF = Path("/root/.cache/oxinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf")
N_GREEDY = 32
TOPK = 20

RAW_PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
]
CHAT_PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the ocean.",
    "Explain in one sentence why the sky is blue.",
]


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def gguf_tokenizer_facts(path: Path) -> dict:
    r = gguf.GGUFReader(str(path))
    facts = {}
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.add_bos_token",
                "tokenizer.ggml.add_eos_token", "tokenizer.ggml.add_space_prefix",
                "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                "tokenizer.ggml.padding_token_id", "tokenizer.ggml.unknown_token_id",
                "tokenizer.chat_template"):
        if key in r.fields:
            facts[key] = r.fields[key].contents()
    return facts


@torch.no_grad()
def run_prompt(model, ids: list[int]) -> tuple[torch.Tensor, list[int], list[float]]:
    """Prompt logits (all positions) and a greedy continuation through transformers' KV cache."""
    out = model(input_ids=torch.tensor([ids]), use_cache=True)
    prompt_logits = out.logits[0].float()
    cache = out.past_key_values
    last = prompt_logits[-1]
    toks, margins = [], []
    for _ in range(N_GREEDY):
        top = torch.topk(last, 2)
        margins.append(float(top.values[0] - top.values[1]))
        tok = int(top.indices[0])
        toks.append(tok)
        out = model(input_ids=torch.tensor([[tok]]), past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        last = out.logits[0, -1].float()
    return prompt_logits, toks, margins


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", type=Path, default=DEFAULT_GGUF)
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "smollm2")
    args = ap.parse_args()
    torch.set_num_threads(2)
    args.out.mkdir(parents=True, exist_ok=True)

    d, name = str(args.gguf.parent), args.gguf.name
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(
        d, gguf_file=name, dtype=torch.float32, attn_implementation="eager").eval()

    eos_ids = model.generation_config.eos_token_id
    eos_ids = set(eos_ids if isinstance(eos_ids, list) else [eos_ids]) | {tok.eos_token_id}
    eos_ids.discard(None)

    probe = tok("Hello")["input_ids"]
    bos_added = tok.bos_token_id is not None and len(probe) > 0 and probe[0] == tok.bos_token_id

    items = [("raw", p) for p in RAW_PROMPTS]
    if getattr(tok, "chat_template", None):
        items += [("chat", p) for p in CHAT_PROMPTS]
    else:
        print("the tokenizer has no chat template: raw prompts only")
    results = []
    for i, (kind, text) in enumerate(items):
        if kind == "raw":
            rendered = text
            ids = tok(text)["input_ids"]
        else:
            rendered = tok.apply_chat_template([{"role": "user", "content": text}],
                                               tokenize=False, add_generation_prompt=True)
            # the template already holds every special token: add no others
            ids = tok(rendered, add_special_tokens=False)["input_ids"]
        ids = [int(x) for x in ids]
        logits, greedy, margins = run_prompt(model, ids)
        np.save(args.out / f"logits_{i}.npy", logits[-1].numpy().astype(np.float32))
        top = torch.topk(logits, TOPK, dim=-1)
        top20 = [[[int(j), float(v)] for j, v in zip(ix.tolist(), vs.tolist())]
                 for ix, vs in zip(top.indices, top.values)]
        eos_at = next((k for k, t in enumerate(greedy) if t in eos_ids), None)
        results.append({
            "index": i, "kind": kind, "text": text, "rendered": rendered, "ids": ids,
            "greedy_ids": greedy,
            "greedy_text": tok.decode(greedy, skip_special_tokens=False),
            "greedy_text_until_eos": tok.decode(greedy[:eos_at] if eos_at is not None else greedy,
                                                skip_special_tokens=True),
            "eos_at": eos_at,
            "min_greedy_margin": min(margins),
            "min_greedy_margin_until_eos": min(margins[: (eos_at + 1) if eos_at is not None else N_GREEDY]),
            "greedy_margins": margins,
            "logits_file": f"logits_{i}.npy",
            "top20": top20,
        })
        print(f"[{i}] {kind} {len(ids)} ids, margin {min(margins):.4g}, eos_at {eos_at}: "
              f"{rendered!r} -> {results[-1]['greedy_text']!r}")

    ref = {
        "generator": "tools/ref/ref_smollm2_transformers.py",
        "versions": {
            "python": sys.version.split()[0], "torch": torch.__version__,
            "transformers": transformers.__version__, "numpy": np.__version__,
            "gguf": getattr(gguf, "__version__", None) or _dist_version("gguf"),
        },
        "model_file": name,
        "model_sha256": sha256_of(args.gguf),
        "load": "AutoModelForCausalLM.from_pretrained(dir, gguf_file=NAME, dtype=float32, "
                "attn_implementation='eager'): weights dequantized to float32",
        "vocab_size": int(model.config.vocab_size),
        "gguf_tokenizer_metadata": {k: v for k, v in gguf_tokenizer_facts(args.gguf).items()},
        "tokenizer": {
            "class": type(tok).__name__,
            "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id,
            "adds_bos": bos_added,
            "ids_of_Hello": probe,
        },
        "eos_ids": sorted(eos_ids),
        "n_greedy": N_GREEDY,
        "greedy_method": "argmax, transformers KV cache (prefill then one token per step), "
                         "exactly 32 tokens, no stop at EOS",
        "raw_prompt_tokenization": "tok(text) (its default special-token handling; see tokenizer.adds_bos)",
        "chat_prompt_tokenization": "tok.apply_chat_template([{role:user, content:text}], "
                                    "tokenize=False, add_generation_prompt=True), then "
                                    "tok(rendered, add_special_tokens=False)",
        "top_k_per_position": TOPK,
        "logits_npy": "logits_<index>.npy: float32 [vocab], last prompt position",
        "prompts": results,
    }
    (args.out / "transformers_ref.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
    print("wrote", args.out / "transformers_ref.json")


def _dist_version(name: str) -> str | None:
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:
        return None


if __name__ == "__main__":
    main()
