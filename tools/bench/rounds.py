#!/usr/bin/env python3
"""Interleaved rounds of `oxinfer bench` variants and llama.cpp's `llama-bench` on one model.

Each round runs every variant once, in the order given, with the same -t/-r/-p/-n; the machine's
drift then touches every variant alike, and the per-round numbers show how far it moved.

    python3 tools/bench/rounds.py MODEL ROUNDS REPS P N VARIANT...

A VARIANT is `llama` (the native `llama-bench`, $LLAMA_BENCH or
~/.cache/oxinfer/llama-cpp-native/bin/llama-bench) or `LABEL=[VAR~VALUE,...:]BINARY`, an oxinfer
binary run with those environment variables, e.g.
`before=OXINFER_ZMM~0:/tmp/ox-main after=:target/release/oxinfer llama`. Prints one line per
run (t/s mean ± standard deviation over REPS) and each label's values per round with their mean.
Threads: $THREADS (default 2).
"""
import json
import os
import statistics
import subprocess
import sys
import time


def command(label, spec, model, reps, p, n, threads):
    """The command line and environment of one variant."""
    env = dict(os.environ)
    common = ["-m", model, "-t", threads, "-r", reps, "-p", p, "-n", n, "-o", "json"]
    if label == "llama":
        default = os.path.expanduser("~/.cache/oxinfer/llama-cpp-native/bin/llama-bench")
        return [os.environ.get("LLAMA_BENCH", default)] + common, env
    envs, binary = spec.rsplit(":", 1) if ":" in spec else ("", spec)
    for kv in filter(None, envs.split(",")):
        k, v = kv.split("~", 1)
        env[k] = v
    return [binary, "bench"] + common, env


def main():
    if len(sys.argv) < 7:
        sys.exit(__doc__)
    model, rounds, reps, p, n = sys.argv[1:6]
    threads = os.environ.get("THREADS", "2")
    results = {}
    for r in range(int(rounds)):
        for v in sys.argv[6:]:
            label, spec = v.split("=", 1) if "=" in v else (v, "")
            cmd, env = command(label, spec, model, reps, p, n, threads)
            started = time.strftime("%H:%M:%S")
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
            for row in json.loads(out):
                test = f"pp{row['n_prompt']}" if row["n_prompt"] else f"tg{row['n_gen']}"
                results.setdefault((label, test), []).append(row["avg_ts"])
                print(f"round {r + 1} {started} {label:10s} {test}: "
                      f"{row['avg_ts']:.2f} ± {row['stddev_ts']:.2f}", flush=True)
    for (label, test), values in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        rounds_text = " / ".join(f"{x:.2f}" for x in values)
        print(f"{test} {label}: {rounds_text} (mean {statistics.mean(values):.2f})")


if __name__ == "__main__":
    main()
