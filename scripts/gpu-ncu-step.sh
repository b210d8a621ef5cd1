#!/usr/bin/env bash
# Kernel by kernel, one decode pass on the device (run there, from the repository root, with
# target/gpucarry from scripts/gpu-carry.sh): ncu over `oxinfer run` of a short prompt and a few
# generated tokens, graphs off so each kernel is its own launch, clocks left free; prints the
# per-kernel table of the last pass (tools/bench/ncu_summary.py) and keeps the CSV. With
# --full N, also ncu's full section set on N GEMV launches of that pass (stall reasons,
# occupancy, memory workload), as text.
#
#   bash scripts/gpu-ncu-step.sh MODEL [--full N]      MODEL: smol gemma q7b
#
# Env: GPU_SBS_CARRY (target/gpucarry), GPU_SBS_WORK (/tmp/gpu-sbs; the models of
# scripts/gpu-side-by-side.sh are reused), GPU_SBS_PYTHON (python3), NCU (/usr/local/cuda/bin/ncu), NCU_OUT (the work dir,
# or $OUT on a device call). Written in session 23 and checked only here (bash -n, the summary on
# a hand-made CSV): no device time was left to run it.
set -euo pipefail
cd "$(dirname "$0")/.."
M=${1:?model: smol, gemma or q7b}
FULL=0
[ "${2:-}" = --full ] && FULL=${3:?--full N}
NCU=${NCU:-/usr/local/cuda/bin/ncu}
source scripts/gpu-work.sh
O=${NCU_OUT:-${OUT:-$W}}
mkdir -p "$O"
gpu_model "$M"
f=$W/m/$M.gguf
X=$OX
# Kernels compiled (NVRTC, cached on disk) before ncu sees anything.
"$X" run -m "$f" --device cuda --tokens 1,2,3 -n 2 >/dev/null 2>&1
# A 4-token prompt and 3 generated tokens: the prompt pass, then decode passes.
RUN=("$X" run -m "$f" --device cuda --tokens 1,2,3,4 -n 3 --temp 0)
OXINFER_CUDA_GRAPHS=0 "$NCU" --clock-control none --csv --metrics \
  gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
  "${RUN[@]}" >"$O/ncu_$M.csv" 2>"$O/ncu_$M.err"
# Three passes (the prompt's, two decode steps) of about the same launches: the last third of
# the launches is about the last decode step.
n=$(python3 -c "import sys; sys.path.insert(0, 'tools/bench'); import ncu_summary as s; print(len(s.launches('$O/ncu_$M.csv')))")
per=$((n / 3))
echo "== $M: $n launches; the last $per (about the last decode step)"
python3 tools/bench/ncu_summary.py "$O/ncu_$M.csv" --skip $((n - per))
if [ "$FULL" -gt 0 ]; then
  g=$(python3 -c "import sys; sys.path.insert(0, 'tools/bench'); import ncu_summary as s; print(sum('gemv' in d['name'] for d in s.launches('$O/ncu_$M.csv')))")
  OXINFER_CUDA_GRAPHS=0 "$NCU" --clock-control none -k regex:gemv --launch-skip $((g - g / 3)) \
    --launch-count "$FULL" --set full "${RUN[@]}" >"$O/ncu_${M}_full.txt" 2>&1
  echo "== full sections of $FULL GEMV launches: $O/ncu_${M}_full.txt"
fi
