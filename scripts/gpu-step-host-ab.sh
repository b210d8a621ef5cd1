#!/usr/bin/env bash
# The host's preparation of a decode step, new against old (session 30, docs/gpu.md "Side by
# side again; chunked bulk staging (dropped); the host's share of a decode step"), on the device
# (run there, from the repository root, with the carry of `scripts/gpu-carry.sh --tests
# --no-llama`): backend_ops' plan tests under the new preparation, then tg128 alternated
# between OXINFER_CUDA_STEP_HOST=new and =old on the three models, and the 7B's greedy ids
# under both (their md5s must agree).
#
#   bash scripts/gpu-step-host-ab.sh [ROUNDS]            (default 2)
#
# Env: GPU_SBS_CARRY (target/gpucarry), GPU_SBS_WORK (/tmp/gpu-sbs), GPU_SBS_PYTHON (python3).
set -uo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}
S=$(date +%s)
say() { echo "[$(($(date +%s) - S)) s] $*"; }
source scripts/gpu-work.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for m in smol gemma; do gpu_model "$m"; done >"$W/models.log" 2>&1
(gpu_model q7b >>"$W/models.log" 2>&1) &
MODEL=$!
if [ -f "$C/backend_ops.xz" ]; then
  xz -dc "$C/backend_ops.xz" >"$W/bin/backend_ops"
  chmod +x "$W/bin/backend_ops"
  OXINFER_CUDA_STEP_HOST=new timeout 300 "$W/bin/backend_ops" plan decode 2>&1 |
    grep -E "^test |test result|panicked" | tail -12
  say "backend_ops"
fi
SETTINGS="OXINFER_CUDA_STEP_HOST=new
OXINFER_CUDA_STEP_HOST=old"
gpu_tg_rounds gemma "$ROUNDS" "$SETTINGS"
gpu_tg_rounds smol "$ROUNDS" "$SETTINGS"
wait $MODEL
gpu_tg_rounds q7b "$ROUNDS" "$SETTINGS"
echo "== greedy ids of the 7B (32 tokens after 1,2,3,4,5), md5 of the reply"
gpu_greedy_md5 q7b "$SETTINGS"
say "end"
