#!/usr/bin/env bash
# The decode GEMVs on the device (run there, from the repository root, with the carry of
# scripts/gpu-carry.sh): tools/bench/cuda/gemv_bench.cu built with nvcc and run (the 7B step's
# GEMVs alone and as a chain against the staging-only and streaming ceilings, docs/gpu.md
# "The decode GEMVs against their own ceilings"), then the synthetic 7B in place: greedy ids
# and tg128 under each setting of SETTINGS, alternated over ROUNDS rounds.
#
#   bash scripts/gpu-gemv-ab.sh [ROUNDS]            (default 2)
#
# Env: GPU_SBS_CARRY (target/gpucarry), GPU_SBS_WORK (/tmp/gpu-sbs), GPU_SBS_PYTHON (python3),
# GEMV_AB_SETTINGS (one `VAR=value` a line; default below: the defaults, the cp.async staging,
# the split rule before session 29), GEMV_AB_DEFINES (-D options for extra harness builds, one
# set a line).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}
SETTINGS=${GEMV_AB_SETTINGS:-"OXINFER_CUDA_DEFINES=
OXINFER_CUDA_GEMV_BULK=0
OXINFER_CUDA_GEMV_SPLIT=old"}
DEFINES=${GEMV_AB_DEFINES:-""}
source scripts/gpu-work.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
(gpu_model q7b >"$W/model.log" 2>&1) &
MODEL=$!
K=crates/oxinfer-cuda/src/kernels
B=tools/bench/cuda/gemv_bench.cu
nvcc -O3 -std=c++17 -arch=sm_90 -I $K $B -o "$W/gemv_bench"
echo "== harness"
"$W/gemv_bench"
while IFS= read -r d; do
  [ -n "$d" ] || continue
  flags=$(for x in $d; do printf -- '-D%s ' "$x"; done)
  # shellcheck disable=SC2086
  nvcc -O3 -std=c++17 -arch=sm_90 $flags -I $K $B -o "$W/gemv_bench_x"
  echo "== harness with $d"
  "$W/gemv_bench_x" | sed -n '/alone/,$p'
done <<<"$DEFINES"
wait $MODEL
echo "== greedy ids (32 tokens after 1,2,3,4,5), md5 of the reply"
gpu_greedy_md5 q7b "$SETTINGS"
echo "== tg128 (oxinfer bench --device cuda -p 0 -n 128 -r 3)"
gpu_tg_rounds q7b "$ROUNDS" "$SETTINGS"
