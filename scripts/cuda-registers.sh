#!/usr/bin/env bash
# Registers, shared memory and spills of the CUDA kernels without a GPU: compiles one kernel
# unit (default gemv.cu; OXINFER_PTX_UNIT) to PTX with NVRTC through the nvrtc_check example,
# then runs ptxas -v for sm_90 on it and prints one line per entry point matching PATTERN.
#
#   scripts/cuda-registers.sh [PATTERN] [UNIT]      e.g. scripts/cuda-registers.sh 'gemv_q4_k' gemv.cu
#
# NVRTC and ptxas come from the reference venv (tools/ref: its torch pulls nvidia-cuda-nvrtc,
# and the triton wheel carries a ptxas); NVRTC 13 writes PTX ISA 9.x, which that ptxas (12.9)
# does not read, so the version line is lowered to 8.8 (the kernels use nothing newer).
set -euo pipefail
PATTERN=${1:-.}
UNIT=${2:-gemv.cu}
VENV=${OXINFER_REF_VENV:-$HOME/.cache/oxinfer/refvenv}
SITE=$(echo "$VENV"/lib/python3*/site-packages)
PTXAS=$SITE/triton/backends/nvidia/bin/ptxas
[ -x "$PTXAS" ] || { echo "no ptxas at $PTXAS (make the reference venv: tools/ref)" >&2; exit 1; }
export LD_LIBRARY_PATH=$SITE/nvidia/cu13/lib:${LD_LIBRARY_PATH:-}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
cargo build --release -q -p oxinfer-cuda --example nvrtc_check
OXINFER_PTX_UNIT=$UNIT OXINFER_PTX_OUT=$OUT/unit.ptx target/release/examples/nvrtc_check 9 0 >&2
sed 's/^\.version 9\.[0-9]*/.version 8.8/' "$OUT/unit.ptx" > "$OUT/unit88.ptx"
"$PTXAS" -arch=sm_90 -v "$OUT/unit88.ptx" -o "$OUT/unit.cubin" 2> "$OUT/ptxas.txt"
grep -A3 "Compiling entry function" "$OUT/ptxas.txt" | grep -E "Compiling|Used" | paste - - |
  sed -E "s/ptxas info +: //g; s/Compiling entry function '([^']*)' for 'sm_90'/\1/" |
  grep -E -- "$PATTERN" || true
