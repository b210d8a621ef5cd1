#!/usr/bin/env bash
# Server throughput under concurrency: starts `oxinfer serve` and llama.cpp's C++
# `llama-server` on loopback with the same model, threads, slots (16) and total context
# (16 × 1024 positions), then drives 1, 4 and 16 concurrent streaming clients with
# tools/bench/serve_bench.py. Prints aggregate generated tok/s and TTFT p50/p99.
#
#   scripts/bench-serve.sh [MODEL.gguf] [THREADS] [CLIENTS] [REQUESTS_PER_CLIENT] [MAX_TOKENS]
#
# Defaults: the SmolLM2-135M-Instruct Q4_1 test model, 2 threads, 1,4,16 clients, 2 requests
# each, 64 tokens. Run it on a quiet machine; each level is bounded to 300 s.
#
# llama-server: $LLAMA_SERVER, else ~/.cache/oxinfer/llama-cpp-native/bin/llama-server (built by
# scripts/build-llama-cpp.sh from the llama.cpp source in the llama-cpp-python 0.3.36 sdist);
# without it, llama-cpp-python's Python server from the reference venv is used if importable
# (it serves one sequence at a time).
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL="${1:-${OXINFER_TEST_MODELS:-$HOME/.cache/oxinfer/models}/SmolLM2-135M-Instruct.Q4_1.gguf}"
THREADS="${2:-2}"
CLIENTS="${3:-1,4,16}"
REQS="${4:-2}"
MAXTOK="${5:-64}"
PARALLEL=16
SLOT_CTX=1024
LLAMA_SERVER="${LLAMA_SERVER:-$HOME/.cache/oxinfer/llama-cpp-native/bin/llama-server}"
REFPY="${OXINFER_REF_PYTHON:-$HOME/.cache/oxinfer/refvenv/bin/python}"
PORT_OX=18431
PORT_LC=18432

cargo build --release -q -p oxinfer-cli
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

wait_up() {
  for _ in $(seq 1 120); do
    if python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$1/v1/models', timeout=1)" 2>/dev/null; then
      return 0
    fi
    sleep 0.5
  done
  echo "server on port $1 did not come up" >&2
  return 1
}

target/release/oxinfer serve -m "$MODEL" -t "$THREADS" --port "$PORT_OX" --parallel "$PARALLEL" --ctx "$SLOT_CTX" --queue 64 2>/dev/null &
pids+=($!)
wait_up "$PORT_OX"
python3 tools/bench/serve_bench.py --url "http://127.0.0.1:$PORT_OX" --label oxinfer \
  --model "$(basename "$MODEL" .gguf)" --clients "$CLIENTS" --requests "$REQS" --max-tokens "$MAXTOK"
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true; pids=()

if [ -x "$LLAMA_SERVER" ]; then
  "$LLAMA_SERVER" -m "$MODEL" -t "$THREADS" --parallel "$PARALLEL" -c $((PARALLEL * SLOT_CTX)) \
    --host 127.0.0.1 --port "$PORT_LC" >/dev/null 2>&1 &
  pids+=($!)
  wait_up "$PORT_LC"
  python3 tools/bench/serve_bench.py --url "http://127.0.0.1:$PORT_LC" --label "llama.cpp llama-server" \
    --model "$(basename "$MODEL" .gguf)" --clients "$CLIENTS" --requests "$REQS" --max-tokens "$MAXTOK" | tail -n +3
elif [ -x "$REFPY" ] && "$REFPY" -c "import llama_cpp.server.app" 2>/dev/null; then
  "$REFPY" -m llama_cpp.server --model "$MODEL" --n_threads "$THREADS" --n_ctx 4096 --interrupt_requests False \
    --host 127.0.0.1 --port "$PORT_LC" >/dev/null 2>&1 &
  pids+=($!)
  wait_up "$PORT_LC"
  python3 tools/bench/serve_bench.py --url "http://127.0.0.1:$PORT_LC" --label "llama.cpp (llama-cpp-python server)" \
    --model "$MODEL" --clients "$CLIENTS" --requests "$REQS" --max-tokens "$MAXTOK" | tail -n +3
else
  echo "(llama.cpp server not measured: no $LLAMA_SERVER (scripts/build-llama-cpp.sh builds it),"
  echo " and llama_cpp.server.app is not importable with $REFPY)"
fi
