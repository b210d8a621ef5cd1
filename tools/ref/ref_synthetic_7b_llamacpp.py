#!/usr/bin/env python3
"""llama.cpp perplexity on the synthetic Qwen2-7B Q4_K_M GGUF (tools/ref/make_synthetic_7b.py).

Tokenizes tests/fixtures/texts/ppl-en.txt with llama.cpp, scores the first N_CHUNKS windows of
N_CTX tokens the way llama-perplexity does (second half of each window), and writes
tests/fixtures/qwen2-7b-synthetic/llamacpp_ppl.json (tokens, PPL, per-chunk NLL, top-1 ids).

Run: /root/.cache/oxinfer/refvenv/bin/python tools/ref/ref_synthetic_7b_llamacpp.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ref_llamacpp as ref  # noqa: E402
import llama_cpp  # noqa: E402

N_CTX, N_CHUNKS = 128, 4
MODEL = Path.home() / ".cache/oxinfer/models/qwen2-7b-synthetic-q4_k_m.gguf"
OUT = ref.REPO / "tests/fixtures/qwen2-7b-synthetic/llamacpp_ppl.json"


def main() -> None:
    text = (ref.REPO / "tests/fixtures/texts/ppl-en.txt").read_text()
    llm = ref.open_model(MODEL, N_CTX, vocab_only=True)
    tokens = llm.tokenize(text.encode(), add_bos=False, special=False)
    del llm
    tokens = tokens[: N_CTX * N_CHUNKS]
    res = ref.perplexity(MODEL, tokens, N_CTX, add_bos=False, bos=151643)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    out = {"generator": "tools/ref/ref_synthetic_7b_llamacpp.py",
           "model": MODEL.name, "model_sha256": ref.sha256_of(MODEL),
           "llama_cpp_python": llama_cpp.__version__, "n_threads": ref.N_THREADS,
           "text": "tests/fixtures/texts/ppl-en.txt", "tokens": tokens, **res}
    OUT.write_text(json.dumps(out) + "\n")
    print(f"{OUT}: PPL {res['ppl']:.4f} +/- {res['ppl_err']:.4f}, top-1 {res['top1_hit_rate']:.3f}")


if __name__ == "__main__":
    main()
