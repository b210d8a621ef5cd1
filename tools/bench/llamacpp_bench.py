#!/usr/bin/env python3
"""llama-bench-style pp/tg measurement of llama.cpp through llama-cpp-python.

Prints one JSON row per test with the same keys as `oxinfer bench -o json`
(test, n_prompt, n_gen, n_threads, avg_ts, stddev_ts, samples_ts), so
scripts/bench-vs-llamacpp.sh can put the two side by side.

    python tools/bench/llamacpp_bench.py MODEL --threads 2 --test pp512 --reps 3
"""
import argparse
import json
import random
import statistics
import time

import llama_cpp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--test", required=True, help="ppN or tgN")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    kind, n = a.test[:2], int(a.test[2:])
    llm = llama_cpp.Llama(
        model_path=a.model,
        n_ctx=max(n + 8, 512),
        n_batch=512,
        n_ubatch=512,
        n_threads=a.threads,
        n_threads_batch=a.threads,
        verbose=False,
    )
    vocab = llm.n_vocab()
    rng = random.Random(1)

    def run(seed_tokens):
        llm.reset()
        t0 = time.perf_counter()
        if kind == "pp":
            llm.eval(seed_tokens)
        else:
            for tok in seed_tokens:
                llm.eval([tok])
        return n / (time.perf_counter() - t0)

    toks = lambda: [rng.randrange(vocab) for _ in range(n)]
    run(toks()[: min(n, 16)] if kind == "pp" else toks()[:4])  # warm-up
    samples = [run(toks()) for _ in range(a.reps)]
    print(json.dumps({
        "test": a.test,
        "n_prompt": n if kind == "pp" else 0,
        "n_gen": n if kind == "tg" else 0,
        "n_threads": a.threads,
        "avg_ts": statistics.mean(samples),
        "stddev_ts": statistics.stdev(samples) if len(samples) > 1 else 0.0,
        "samples_ts": samples,
        "build": "llama-cpp-python " + llama_cpp.__version__,
    }))


if __name__ == "__main__":
    main()
