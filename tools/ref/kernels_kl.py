#!/usr/bin/env python3
"""KL divergence of oxinfer's default kernels against its exact path (`OXINFER_KERNELS=scalar`).

The kernel set is chosen once per process, so `oxinfer kl` cannot put the two side by side;
this script runs `oxinfer run --tokens ... --dump-logits` once per kernel set on each window
and scores the windows the way `oxinfer kl` / `llama-perplexity --kl-divergence` do: windows
of `--ctx` tokens from the start of the text (the first replaced by BOS), positions
`ctx/2 .. ctx-2` scored, KL(P_exact || P_default), top-1 agreement.

    python tools/ref/kernels_kl.py --oxinfer target/release/oxinfer -m MODEL.gguf -f TEXT \
        [--ctx 512] [--chunks N] [--cache DIR] [--env VAR=VALUE ...]

The exact logits are cached in --cache (one .npy per model and window, kept between runs);
--env sets variables for the default-kernel run only (debug switches for A/B runs).
Tokenization: llama.cpp's tokenizer on the GGUF (llama-cpp-python, vocab only), which
`oxinfer kl` checks itself against on these models; where llama-cpp-python is not installed
(the reference venv), transformers' GGUF tokenizer.
"""
import argparse
import hashlib
import os
import subprocess
import sys
import tempfile

import numpy as np


def tokenize(model, text):
    try:
        from llama_cpp import Llama
    except ImportError:
        # The reference venv has transformers and gguf but not llama-cpp-python: transformers'
        # GGUF tokenizer. Both kernel sets score the same windows, so the KL compares like with
        # like; token counts may differ slightly from llama.cpp's.
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(
            os.path.dirname(os.path.abspath(model)), gguf_file=os.path.basename(model)
        )
        ids = tok.encode(text, add_special_tokens=False)
        return [tok.bos_token_id] + ids, tok.bos_token_id
    llm = Llama(model_path=model, vocab_only=True, verbose=False)
    toks = llm.tokenize(text.encode(), add_bos=True, special=False)
    bos = llm.token_bos()
    return toks, bos


def dump(oxinfer, model, ids, path, env):
    cmd = [oxinfer, "run", "-m", model, "--device", "cpu", "-n", "0",
           "--tokens", ",".join(map(str, ids)), "--dump-logits", path]
    e = dict(os.environ)
    e.update(env)
    r = subprocess.run(cmd, env=e, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd[:6])} ... failed:\n{r.stderr}")
    return np.load(path)


def log_softmax(z):
    z = z.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--oxinfer", default="target/release/oxinfer")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-f", "--file", required=True)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int)
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "oxinfer-kernels-kl"))
    ap.add_argument("--env", action="append", default=[], help="VAR=VALUE for the default run")
    a = ap.parse_args()
    text = open(a.file, encoding="utf-8").read()
    toks, bos = tokenize(a.model, text)
    n = len(toks) // a.ctx
    if a.chunks:
        n = min(n, a.chunks)
    if n == 0:
        sys.exit(f"the text has {len(toks)} tokens; --ctx {a.ctx} needs at least {a.ctx}")
    env = dict(kv.split("=", 1) for kv in a.env)
    os.makedirs(a.cache, exist_ok=True)
    key = hashlib.sha256(
        (os.path.abspath(a.model) + "\0" + text + f"\0{a.ctx}").encode()
    ).hexdigest()[:16]
    kls, agree, nll_m, nll_r = [], 0, [], []
    first = a.ctx // 2
    for c in range(n):
        win = list(toks[c * a.ctx:(c + 1) * a.ctx])
        win[0] = bos
        ref_path = os.path.join(a.cache, f"{key}-{c}.npy")
        if os.path.exists(ref_path):
            ref = np.load(ref_path, mmap_mode="r")
        else:
            ref = dump(a.oxinfer, a.model, win, ref_path, {"OXINFER_KERNELS": "scalar"})
        with tempfile.TemporaryDirectory() as d:
            out = dump(a.oxinfer, a.model, win, os.path.join(d, "m.npy"), env)
        for j in range(first, a.ctx - 1):
            lr, lm = log_softmax(ref[j]), log_softmax(out[j])
            kls.append(float((np.exp(lr) * (lr - lm)).sum()))
            agree += int(lr.argmax() == lm.argmax())
            tgt = toks[c * a.ctx + j + 1]
            nll_m.append(-lm[tgt])
            nll_r.append(-lr[tgt])
        print(f"[{c + 1}/{n}] mean KL so far {np.mean(kls):.6f}", file=sys.stderr)
    k = np.array(kls)
    s = len(k)
    p = agree / s
    print(f"model: {a.model}  env: {env or 'default'}")
    print(f"{n} windows of {a.ctx}, {s} positions, {len(toks)} tokens in the text")
    print(f"PPL(default) = {np.exp(np.mean(nll_m)):.4f}  PPL(exact) = {np.exp(np.mean(nll_r)):.4f}")
    print(f"Mean KLD    = {k.mean():.6f} +/- {k.std(ddof=1) / np.sqrt(s):.6f}")
    print(f"99.0%   KLD = {np.quantile(k, 0.99):.6f}")
    print(f"Maximum KLD = {k.max():.6f}")
    print(f"Same top-1  = {100 * p:.3f} +/- {100 * np.sqrt(p * (1 - p) / s):.3f} %")


if __name__ == "__main__":
    main()
