#!/usr/bin/env python3
"""llama.cpp reference for a GGUF: perplexity exactly as llama-perplexity computes it, and greedy text.

Uses llama.cpp through its Python binding (llama-cpp-python; see setup-venv.sh for the build flags).

Perplexity (the default method of llama.cpp's tools/perplexity/perplexity.cpp, no --ppl-stride):
  * the whole text is tokenized once, with the model's special tokens (BOS when the GGUF says
    add_bos_token) and without parsing special-token text: common_tokenize(ctx, text, true);
  * n_chunk = n_tokens / n_ctx (floor; at least 2 * n_ctx tokens are required), chunk i holds
    tokens [i*n_ctx, (i+1)*n_ctx), run from an empty KV cache at positions 0..n_ctx-1;
  * when the model adds BOS, the chunk's FIRST token is REPLACED by BOS (not prepended);
  * only the second half is scored: with first = n_ctx/2, the logits at positions
    first .. n_ctx-2 predict tokens first+1 .. n_ctx-1 of the chunk (n_ctx - first - 1 per chunk);
  * nll_k = log(sum exp(logits - max)) + max - logit[target]; PPL = exp(mean nll);
    error = sqrt((mean(nll^2) - mean(nll)^2) / (count - 1)) * PPL  (the "+/-" llama-perplexity prints).
  llama-perplexity packs n_batch/n_ctx chunks into one batch as separate sequences; this script runs
  each chunk alone in a context of exactly n_ctx. The two are mathematically the same; results agree
  to float rounding.

Greedy: prompts (raw text: tokenized with add_special=true, parse_special=false, like
llama-cli/llama-simple; chat prompts: the rendered template string, parse_special=true) are
evaluated in one batch, then 32 tokens are taken by argmax one at a time through llama.cpp's KV cache
(no EOS stop).

Writes one JSON (see --out). Run:
  /root/.cache/oxinfer/refvenv/bin/python tools/ref/ref_llamacpp.py \
      --gguf /root/.cache/oxinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf \
      --prompts tests/fixtures/smollm2/transformers_ref.json \
      --out tests/fixtures/smollm2/llamacpp_ref.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

import llama_cpp
from llama_cpp import Llama

REPO = Path(__file__).resolve().parents[2]
N_GREEDY = 32
N_THREADS = 2

DEFAULT_RAW_PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
]


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def nll_row(logits: np.ndarray, target: int) -> float:
    """-log softmax(logits)[target], as llama-perplexity's log_softmax (float logits, double sum)."""
    m = float(np.max(logits))
    s = float(np.sum(np.exp((logits - np.float32(m)).astype(np.float32)), dtype=np.float64))
    return math.log(s) + m - float(logits[target])


def open_model(path: Path, n_ctx: int, **kw) -> Llama:
    return Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=min(n_ctx, 512),
                 n_threads=N_THREADS, n_threads_batch=N_THREADS, logits_all=True, verbose=False,
                 seed=0, **kw)


def perplexity(path: Path, tokens: list[int], n_ctx: int, add_bos: bool, bos: int, **kw) -> dict:
    if len(tokens) < 2 * n_ctx:
        raise ValueError(f"need at least {2 * n_ctx} tokens for n_ctx={n_ctx}, have {len(tokens)}")
    llm = open_model(path, n_ctx, **kw)
    n_chunk = len(tokens) // n_ctx
    first = n_ctx // 2
    nll = nll2 = 0.0
    count = 0
    running, top1, hits, chunk_nll = [], [], 0, []
    t0 = time.time()
    for i in range(n_chunk):
        window = list(tokens[i * n_ctx:(i + 1) * n_ctx])
        if add_bos:
            window[0] = bos
        llm.reset()
        llm.eval(window)
        logits = np.array(llm.scores[:n_ctx], dtype=np.float32)
        c_nll = 0.0
        argmax = [int(x) for x in np.argmax(logits[first:n_ctx - 1], axis=-1)]
        for j in range(first, n_ctx - 1):
            v = nll_row(logits[j], window[j + 1])
            nll += v
            nll2 += v * v
            c_nll += v
            count += 1
            hits += argmax[j - first] == window[j + 1]
        top1.append(argmax)
        chunk_nll.append(c_nll / (n_ctx - first - 1))
        running.append(math.exp(nll / count))
    secs = time.time() - t0
    del llm
    mean = nll / count
    ppl = math.exp(mean)
    var = nll2 / count - mean * mean
    err = math.sqrt(var / (count - 1)) * ppl if var > 0 else float("nan")
    print(f"n_ctx={n_ctx}: {n_chunk} chunks, PPL = {ppl:.4f} +/- {err:.5f} ({secs:.1f} s)")
    return {
        "n_ctx": n_ctx, "n_chunk": n_chunk, "first": first,
        "scored_per_chunk": n_ctx - first - 1, "n_scored": count,
        "ppl": ppl, "ppl_err": err, "mean_nll": mean,
        "running_ppl": running,  # llama-perplexity's "[1]x,[2]y,..." line
        "chunk_mean_nll": chunk_nll,
        "top1_hit_rate": hits / count,
        "top1_ids": top1,  # per chunk: argmax at positions first .. n_ctx-2 (predicting first+1 ..)
    }


def greedy(llm: Llama, ids: list[int]) -> tuple[list[int], list[float], np.ndarray]:
    llm.reset()
    llm.eval(ids)
    last_prompt = np.array(llm.scores[len(ids) - 1], dtype=np.float32)
    toks, margins = [], []
    for _ in range(N_GREEDY):
        last = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        order = np.argsort(-last, kind="stable")[:2]
        margins.append(float(last[order[0]] - last[order[1]]))
        t = int(order[0])
        toks.append(t)
        llm.eval([t])
    return toks, margins, last_prompt


def f32_twin(args, tokens: list[int], add_bos: bool, bos: int, items: list) -> dict:
    """Dequantize the GGUF to F32 (tools/ref/gguf_to_f32.py) and run it with an f32 KV cache."""
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        twin_path = Path(tmp) / "twin-f32.gguf"
        subprocess.run([sys.executable, str(Path(__file__).with_name("gguf_to_f32.py")),
                        str(args.gguf), str(twin_path)], check=True)
        f32kv = dict(type_k=0, type_v=0)  # GGML_TYPE_F32
        print("F32 twin:")
        ppl = [perplexity(twin_path, tokens, n, add_bos, bos, **f32kv) for n in args.ctx]
        for p in ppl:
            p.pop("top1_ids")
        vocab = Llama(model_path=str(twin_path), vocab_only=True, verbose=False)
        max_len = max(len(vocab.tokenize(r.encode(), add_bos=True, special=True)) for _, _, _, r, _ in items)
        llm = open_model(twin_path, max_len + N_GREEDY + 8, **f32kv)
        prompts = []
        for idx, kind, text, rendered, tp in items:
            ids = vocab.tokenize(rendered.encode("utf-8"), add_bos=True, special=kind == "chat")
            toks, margins, last = greedy(llm, ids)
            rec = {"index": idx, "ids": ids, "greedy_ids": toks, "min_greedy_margin": min(margins)}
            if tp is not None:
                same = 0
                for a, b in zip(toks, tp["greedy_ids"]):
                    if a != b:
                        break
                    same += 1
                rec["greedy_common_prefix_with_transformers"] = same
                lf = args.prompts.parent / tp["logits_file"]
                if lf.exists() and ids == tp["ids"]:
                    rec["last_prompt_logits_max_abs_diff_vs_transformers"] = float(
                        np.abs(np.load(lf) - last).max())
            print(f"  [{idx}] {rec}")
            prompts.append(rec)
        del llm, vocab
    return {
        "what": "the GGUF dequantized to F32 with gguf-py (tools/ref/gguf_to_f32.py), run through "
                "the same llama.cpp with an f32 KV cache: no quantized-activation matmuls, so this "
                "is llama.cpp's float path on the same weights transformers uses",
        "kv_cache_type": "f32",
        "perplexity": ppl,
        "prompts": prompts,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", type=Path, required=True)
    ap.add_argument("--text", type=Path, default=REPO / "tests" / "fixtures" / "texts" / "ppl-en.txt")
    ap.add_argument("--ctx", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--prompts", type=Path, default=None,
                    help="a transformers_ref.json: use its prompts (raw and chat) and compare")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--f32-twin", action="store_true",
                    help="also run an F32 (dequantized) twin of the GGUF with an f32 KV cache: "
                         "perplexity, prompt logits vs transformers, greedy ids")
    args = ap.parse_args()

    vocab = Llama(model_path=str(args.gguf), vocab_only=True, verbose=False)
    md = dict(vocab.metadata)
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(llama_cpp.llama_model_get_vocab(vocab.model)))
    bos, eos = int(vocab.token_bos()), int(vocab.token_eos())
    n_vocab = int(vocab.n_vocab())
    text = args.text.read_text(encoding="utf-8")
    tokens = vocab.tokenize(text.encode("utf-8"), add_bos=True, special=False)
    print(f"{args.gguf.name}: add_bos={add_bos} bos={bos} eos={eos} n_vocab={n_vocab}; "
          f"text -> {len(tokens)} tokens")

    ppl = [perplexity(args.gguf, tokens, n, add_bos, bos) for n in args.ctx]

    # prompts
    if args.prompts:
        tref = json.loads(args.prompts.read_text())
        items = [(p["index"], p["kind"], p["text"], p["rendered"], p) for p in tref["prompts"]]
    else:
        tref = None
        items = [(i, "raw", t, t, None) for i, t in enumerate(DEFAULT_RAW_PROMPTS)]
    max_len = max(len(vocab.tokenize(r.encode(), add_bos=True, special=True)) for _, _, _, r, _ in items)
    llm = open_model(args.gguf, max_len + N_GREEDY + 8)
    vocab_ptr = llama_cpp.llama_model_get_vocab(vocab.model)

    def is_eog(t: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(vocab_ptr, t))

    results = []
    for idx, kind, text, rendered, tp in items:
        special = kind == "chat"
        ids = vocab.tokenize(rendered.encode("utf-8"), add_bos=True, special=special)
        toks, margins, last = greedy(llm, ids)
        eos_at = next((k for k, t in enumerate(toks) if is_eog(t)), None)
        top = np.argsort(-last, kind="stable")[:20]
        rec = {
            "index": idx, "kind": kind, "text": text, "rendered": rendered,
            "tokenize": {"add_special": True, "parse_special": special},
            "ids": ids, "greedy_ids": toks,
            "greedy_text": vocab.detokenize(toks, special=True).decode("utf-8", errors="replace"),
            "eos_at": eos_at,
            "min_greedy_margin": min(margins), "greedy_margins": margins,
            "last_prompt_top20": [[int(i), float(last[i])] for i in top],
        }
        if tp is not None:
            rec["ids_match_transformers"] = ids == tp["ids"]
            same = 0
            for a, b in zip(toks, tp["greedy_ids"]):
                if a != b:
                    break
                same += 1
            rec["greedy_common_prefix_with_transformers"] = same
            lf = args.prompts.parent / tp["logits_file"]
            if lf.exists() and ids == tp["ids"]:
                rec["last_prompt_logits_max_abs_diff_vs_transformers"] = float(
                    np.abs(np.load(lf) - last).max())
        results.append(rec)
        print(f"[{idx}] {kind} {len(ids)} ids, margin {min(margins):.4g}, eos_at {eos_at}"
              + (f", same as transformers for {rec.get('greedy_common_prefix_with_transformers')}"
                 f" tokens, ids match {rec.get('ids_match_transformers')}" if tp else "")
              + f": {rec['greedy_text']!r}")

    twin = None
    if args.f32_twin:
        twin = f32_twin(args, tokens, add_bos, bos, items)

    out = {
        "generator": "tools/ref/ref_llamacpp.py",
        "versions": {
            "python": sys.version.split()[0], "numpy": np.__version__,
            "llama_cpp_python": llama_cpp.__version__,
        },
        "model_file": args.gguf.name,
        "model_sha256": sha256_of(args.gguf),
        "architecture": md.get("general.architecture"),
        "settings": {
            "n_threads": N_THREADS, "kv_cache_type": "f16 (llama.cpp default)",
            "flash_attn": False, "logits_all": True,
            "ppl_batching": "each chunk alone, n_batch = n_ctx, n_ubatch = min(n_ctx, 512)",
            "cpu_build": "GGML_NATIVE=OFF AVX AVX2 FMA F16C; AVX512/AMX off",
        },
        "tokenizer": {"add_bos": add_bos, "bos_id": bos, "eos_id": eos, "n_vocab": n_vocab,
                      "gguf_add_bos_token": {"true": True, "false": False}.get(
                          md.get("tokenizer.ggml.add_bos_token"), md.get("tokenizer.ggml.add_bos_token")),
                      "model": md.get("tokenizer.ggml.model"), "pre": md.get("tokenizer.ggml.pre")},
        "text_file": str(args.text.relative_to(REPO)) if args.text.is_relative_to(REPO) else str(args.text),
        "text_sha256": sha256_of(args.text),
        "n_text_tokens": len(tokens),
        "text_tokens": tokens,
        "perplexity": ppl,
        "n_greedy": N_GREEDY,
        "greedy_method": "prompt in one batch, then argmax one token at a time through the KV cache; "
                         "exactly 32 tokens, no stop at EOS",
        "prompts": results,
    }
    if twin is not None:
        out["f32_twin"] = twin
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
