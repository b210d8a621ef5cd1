#!/usr/bin/env python3
"""Draft-model speculative decoding, oxinfer against llama.cpp, side by side on the same files.

For each prompt (raw text, no chat template, greedy, `-n` tokens): oxinfer plain and with
`--draft DRAFT --draft-max K` (the generated token ids of the two must be identical: the
output of speculative decoding is the target's own), then llama.cpp's `llama-bench -p 0 -n N`
on the target (plain decode speed) and `llama-speculative -m TARGET -md DRAFT --draft-max K`.
Reports generation tok/s, the speed-up over the same engine's plain decode, and the acceptance
rate (accepted / drafted tokens). Engines and prompts alternate; results are appended as JSON
lines.

The target: `tools/ref/make_deep_target.py` (SmolLM2-135M plus perturbed layers, so SmolLM2 is
a good but imperfect draft). llama.cpp: `LLAMA_TARGETS="llama-bench llama-speculative"
scripts/build-llama-cpp.sh native`.

  ~/.cache/oxinfer/refvenv/bin/python tools/bench/spec_bench.py \\
      --target /tmp/spec/target.gguf --draft ~/.cache/oxinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf \\
      --oxinfer target/release/oxinfer --llama-bin ~/.cache/oxinfer/llama-cpp-native/bin \\
      --draft-max 6 -n 128 --threads 2 --out /tmp/spec/results.jsonl
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

PROMPTS = [
    "Explain how a refrigerator works.",
    "The history of the printing press begins",
    "Write a Python function that checks whether a number is prime.",
    "Three tips for a good night's sleep:",
    "Once upon a time, in a small village by the sea,",
]


def run(cmd: list[str], timeout: int = 900) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd[:3])} ... failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return p.stdout + p.stderr


def oxinfer(a, prompt: str, draft: bool) -> dict:
    cmd = [a.oxinfer, "run", "-m", str(a.target), "-p", prompt, "--raw", "--temp", "0",
           "-n", str(a.n), "-t", str(a.threads), "--show-tokens"]
    if draft:
        cmd += ["--draft", str(a.draft), "--draft-max", str(a.draft_max)]
    out = run(cmd)
    m = re.search(r"generation (\d+) tokens, ([\d.]+) tok/s", out)
    if not m:
        sys.exit(f"no generation line in oxinfer's output:\n{out[-1500:]}")
    r = {"tokens": int(m.group(1)), "tok_s": float(m.group(2))}
    ids = [l for l in out.splitlines() if re.fullmatch(r"[\d ]+", l.strip() or "x")]
    r["ids"] = ids[0].split() if ids else []
    d = re.search(r"draft (\d+) of (\d+) accepted", out)
    if d:
        r["accepted"], r["drafted"] = int(d.group(1)), int(d.group(2))
    return r


def llama_plain(a) -> float:
    out = run([str(a.llama_bin / "llama-bench"), "-m", str(a.target), "-p", "0", "-n", str(a.n),
               "-t", str(a.threads), "-r", "3", "-o", "json"])
    rows = json.loads(out[out.index("["):out.rindex("]") + 1])
    return float(rows[0]["avg_ts"])


def llama_spec(a, prompt: str) -> dict:
    out = run([str(a.llama_bin / "llama-speculative"), "-m", str(a.target), "-md", str(a.draft),
               "-p", prompt, "-n", str(a.n), "--temp", "0", "--top-k", "1",
               "--spec-draft-n-max", str(a.draft_max), "-t", str(a.threads), "-td", str(a.threads),
               "-c", "4096"])
    dec = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", out)
    dr = re.search(r"n_drafted\s*=\s*(\d+)", out)
    ac = re.search(r"n_accept\s*=\s*(\d+)", out)
    if not (dec and dr and ac):
        sys.exit(f"unexpected llama-speculative output:\n{out[-2000:]}")
    return {"tokens": int(dec.group(1)), "tok_s": float(dec.group(3)),
            "drafted": int(dr.group(1)), "accepted": int(ac.group(1))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", type=Path, required=True)
    ap.add_argument("--draft", type=Path, required=True)
    ap.add_argument("--oxinfer", required=True)
    ap.add_argument("--llama-bin", type=Path, default=None, help="llama.cpp's bin/ (skipped without)")
    ap.add_argument("--draft-max", type=int, default=6)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=len(PROMPTS))
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()

    rows = []
    llama_plain_tok_s = None
    for prompt in PROMPTS[:a.prompts]:
        row = {"prompt": prompt, "time": time.strftime("%H:%M:%S"), "load": os.getloadavg()[0]}
        plain = oxinfer(a, prompt, draft=False)
        spec = oxinfer(a, prompt, draft=True)
        row["oxinfer"] = {"plain_tok_s": plain["tok_s"], "spec_tok_s": spec["tok_s"],
                          "accepted": spec.get("accepted"), "drafted": spec.get("drafted"),
                          "same_tokens": plain["ids"] == spec["ids"] and bool(plain["ids"])}
        if a.llama_bin:
            if llama_plain_tok_s is None:  # plain decode does not depend on a short prompt
                llama_plain_tok_s = llama_plain(a)
            ls = llama_spec(a, prompt)
            row["llama.cpp"] = {"plain_tok_s": llama_plain_tok_s, "spec_tok_s": ls["tok_s"],
                                "accepted": ls["accepted"], "drafted": ls["drafted"]}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if a.out:
            with a.out.open("a") as f:
                f.write(json.dumps(row) + "\n")

    print(f"\n| engine | plain tok/s | draft tok/s | speed-up | accepted |\n|---|---:|---:|---:|---:|")
    for eng in ["oxinfer", "llama.cpp"]:
        rs = [r[eng] for r in rows if eng in r]
        if not rs:
            continue
        plain = sum(r["plain_tok_s"] for r in rs) / len(rs)
        spec = sum(r["spec_tok_s"] for r in rs) / len(rs)
        acc = sum(r["accepted"] or 0 for r in rs) / max(1, sum(r["drafted"] or 0 for r in rs))
        print(f"| {eng} | {plain:.1f} | {spec:.1f} | {spec / plain:.2f}x | {100 * acc:.0f} % |")
    same = all(r["oxinfer"]["same_tokens"] for r in rows)
    print(f"oxinfer: speculative tokens identical to plain greedy for every prompt: {same}")


if __name__ == "__main__":
    main()
