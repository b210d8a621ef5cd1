#!/usr/bin/env bash
# Browser decode speed against native (docs/wasm.md#verified-in-headless-chromium): ROUNDS
# rounds (default 4), each running native `oxinfer run` on one thread three times, then the
# page on the SIMD128 module (web/pkg), then on the relaxed-SIMD module (web/pkg-relaxed), in
# headless Chromium through web/tests/drive_browser.py --bench (three replies per page, each
# from an empty cache). Prints one line per measurement (round, what, prompt tok/s, decode
# tok/s), then each one's mean decode tok/s and its ratio to native's.
#
#   bash scripts/bench-web.sh [ROUNDS]
#
# Needs target/release/oxinfer (OXINFER_BIN overrides), both modules (scripts/build-web.sh),
# Chromium and the driver's venv (scripts/setup-web.sh), and the model in the model cache.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${OXINFER_CACHE:-$HOME/.cache/oxinfer}"
rounds="${1:-4}"
bin="${OXINFER_BIN:-target/release/oxinfer}"
model_file="SmolLM2-135M-Instruct.Q4_1.gguf"
prompt="Write a long story about a dragon who learns to fly."
n=64
python="${OXINFER_WEB_VENV:-$CACHE/webvenv}/bin/python"
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
ln -s "$PWD/web" "$root/web"
ln -s "$CACHE/models" "$root/models"
for round in $(seq "$rounds"); do
  for _ in 1 2 3; do
    line="$("$bin" run -m "$CACHE/models/$model_file" -p "$prompt" -n "$n" -t 1 --temp 0 2>&1 >/dev/null |
      grep 'generation')"
    # "load … | prompt 42 tokens, P tok/s | generation 64 tokens, D tok/s | stop: …"
    echo "$line" | sed -E "s/.*prompt [0-9]+ tokens, ([0-9.]+) tok\/s \| generation [0-9]+ tokens, ([0-9.]+) tok\/s.*/$round native \1 \2/"
  done
  for build in simd128 relaxed; do
    "$python" web/tests/drive_browser.py --root "$root" --model "/models/$model_file" --bench \
      -n "$n" --prompt "$prompt" --build "$build" |
      "$python" -c '
import json, sys
r = json.load(sys.stdin)
isa = r["load"]["info"]["isa"]
for run in r["runs"]:
    p = 1000 * run["prefillTokens"] / run["prefillMs"]
    d = 1000 * run["decodeTokens"] / run["decodeMs"]
    print(f"'"$round"' browser-{isa} {p:.1f} {d:.1f}")'
  done
done | tee "$root/lines"
awk '{ n[$2]++; d[$2] += $4 } END {
  for (w in n) printf "mean decode %s: %.1f tok/s over %d runs, %.2f x native\n", w, d[w] / n[w], n[w], (d[w] / n[w]) / (d["native"] / n["native"])
}' "$root/lines" | sort
