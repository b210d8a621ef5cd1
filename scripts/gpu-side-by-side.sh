#!/usr/bin/env bash
# oxinfer against llama.cpp's CUDA build on the same GPU and files, in one run, from what
# scripts/gpu-carry.sh packed (run there, from the repository root, with target/gpucarry):
# the synthetic files of the test models' geometry (tools/ref/make_synthetic_like.py) and the
# synthetic 7B (make_synthetic_7b.py) are made here, llama-bench is built here
# (scripts/build-llama-cpp.sh cuda, in the background while oxinfer warms up), then for each
# model: oxinfer, llama.cpp (`-ngl 99 -fa 1`), oxinfer again, tg then pp. Prints a markdown
# table. Times are for speed only: the weights are random.
#
#   bash scripts/gpu-side-by-side.sh [MODEL...]      MODEL: smol gemma q7b (default: all three)
#
# Env: GPU_SBS_CARRY (default target/gpucarry), GPU_SBS_REPS (3), GPU_SBS_TG (128), GPU_SBS_PP
# (512), GPU_SBS_DEVICE (cuda; cpu checks the script on a machine without a GPU),
# LLAMA_BENCH (a built llama-bench: no build), GPU_SBS_WORK (/tmp/gpu-sbs), GPU_SBS_PYTHON
# (python3; needs numpy, which the device machines have with PyTorch).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${GPU_SBS_REPS:-3}
TG=${GPU_SBS_TG:-128}
PP=${GPU_SBS_PP:-512}
DEV=${GPU_SBS_DEVICE:-cuda}
read -r -a MODELS <<<"${*:-smol gemma q7b}"
S=$(date +%s)
say() { echo "[$(($(date +%s) - S)) s] $*" >&2; }
source scripts/gpu-work.sh
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >&2

LB=${LLAMA_BENCH:-}
if [ -z "$LB" ]; then
  mkdir -p "$W/llsrc"
  tar -xJf "$C/llama-src.tar.xz" -C "$W/llsrc"
  LB=$W/llama-build/bin/llama-bench
  (LLAMA_SRC=$W/llsrc/llama.cpp LLAMA_BUILD=$W/llama-build LLAMA_TARGETS=llama-bench \
    nice -n 19 bash scripts/build-llama-cpp.sh cuda >"$W/llama-build.log" 2>&1 || true) &
  BUILD=$!
fi

for m in "${MODELS[@]}"; do
  gpu_model "$m"
done
say "models ready"
# The first open compiles the device kernels (NVRTC, cached on disk): not timed.
"$OX" run -m "$W/m/${MODELS[0]}.gguf" --device "$DEV" --tokens 1,2,3 -n 2 >/dev/null 2>&1 || true
say "kernels compiled"
if [ -n "${BUILD:-}" ]; then
  wait "$BUILD"
  say "llama.cpp built"
fi
[ -x "$LB" ] || { echo "no llama-bench ($LB; see $W/llama-build.log)" >&2; exit 1; }

# tok/s (mean ± sd) of one engine for test $2 (tg or pp) on model $1.
ox() {
  local a=(-p 0 -n "$TG")
  [ "$2" = pp ] && a=(-p "$PP" -n 0)
  "$OX" bench -m "$W/m/$1.gguf" --device "$DEV" -r "$REPS" -o json "${a[@]}" 2>/dev/null |
    python3 -c "import json,sys; r=json.load(sys.stdin)[0]; print('%.1f ± %.1f' % (r['avg_ts'], r['stddev_ts']))"
}
ll() {
  local a=(-p 0 -n "$TG")
  [ "$2" = pp ] && a=(-p "$PP" -n 0)
  local ngl=(-ngl 99 -fa 1)
  [ "$DEV" = cpu ] && ngl=(-ngl 0 -t "$(nproc)")
  "$LB" -m "$W/m/$1.gguf" "${ngl[@]}" -r "$REPS" -o json "${a[@]}" 2>/dev/null |
    python3 -c "import json,sys; r=json.load(sys.stdin)[0]; print('%.1f ± %.1f' % (r['avg_ts'], r['stddev_ts']))"
}
ratio() { python3 -c "a=float('$1'.split()[0]); b=float('$2'.split()[0]); c=float('$3'.split()[0]); print('%.2f×' % ((a + c) / 2 / b))"; }

echo "| model | test | oxinfer | llama.cpp | oxinfer again | ratio (oxinfer's mean) |"
echo "|---|---|---:|---:|---:|---:|"
for m in "${MODELS[@]}"; do
  for t in tg pp; do
    a=$(ox "$m" $t)
    b=$(ll "$m" $t)
    c=$(ox "$m" $t)
    n=$TG
    [ $t = pp ] && n=$PP
    echo "| $m | $t$n | $a | $b | $c | $(ratio "$a" "$b" "$c") |"
  done
  say "$m done"
done
