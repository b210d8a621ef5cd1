#!/usr/bin/env bash
# oxinfer vs llama.cpp on the same model, threads and sizes, interleaved test by test in one
# run, with the ratio. llama.cpp is its own `llama-bench` when $LLAMA_BENCH (default
# ~/.cache/oxinfer/llama-cpp-native/bin/llama-bench, built by scripts/build-llama-cpp.sh: native
# ISA, AMX off) exists, else llama-cpp-python from the reference venv (tools/ref/setup-venv.sh:
# AVX2 build, AMX off). The last line names which one ran.
#
#   scripts/bench-vs-llamacpp.sh MODEL [THREADS] [REPS] [TESTS...]   (TESTS default: pp512 tg128)
set -euo pipefail
MODEL=${1:?usage: bench-vs-llamacpp.sh MODEL [THREADS] [REPS] [TESTS...]}
THREADS=${2:-2}
REPS=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
TESTS=("${@:-pp512 tg128}")
[ ${#TESTS[@]} -eq 1 ] && read -r -a TESTS <<<"${TESTS[0]}"
PY=${OXINFER_REF_PYTHON:-$HOME/.cache/oxinfer/refvenv/bin/python}
LLAMA_BENCH=${LLAMA_BENCH:-$HOME/.cache/oxinfer/llama-cpp-native/bin/llama-bench}
cd "$(dirname "$0")/.."
cargo build --release -q -p oxinfer-cli
OX=target/release/oxinfer

echo "| test | oxinfer t/s | llama.cpp t/s | ratio |"
echo "| --- | ---: | ---: | ---: |"
for t in "${TESTS[@]}"; do
  n=${t:2}
  if [[ $t == pp* ]]; then args=(-p "$n" -n 0); else args=(-p 0 -n "$n"); fi
  ox=$("$OX" bench -m "$MODEL" -t "$THREADS" -r "$REPS" -o json "${args[@]}" | "$PY" -c "import json,sys; r=json.load(sys.stdin)[0]; print('%.2f %.2f' % (r['avg_ts'], r['stddev_ts']))")
  if [ -x "$LLAMA_BENCH" ]; then
    if [[ $t == pp* ]]; then largs=(-p "$n" -n 0); else largs=(-p 0 -n "$n"); fi
    lc=$("$LLAMA_BENCH" -m "$MODEL" -t "$THREADS" -r "$REPS" -o json "${largs[@]}" 2>/dev/null | "$PY" -c "import json,sys; r=json.load(sys.stdin)[0]; print('%.2f %.2f' % (r['avg_ts'], r['stddev_ts']))")
  else
    lc=$("$PY" tools/bench/llamacpp_bench.py "$MODEL" --threads "$THREADS" --test "$t" --reps "$REPS" | "$PY" -c "import json,sys; r=json.load(sys.stdin); print('%.2f %.2f' % (r['avg_ts'], r['stddev_ts']))")
  fi
  read -r oa os <<<"$ox"
  read -r la ls <<<"$lc"
  ratio=$("$PY" -c "print(f'{$oa/$la:.2f}')")
  echo "| $t | $oa ± $os | $la ± $ls | ${ratio}x |"
done
if [ -x "$LLAMA_BENCH" ]; then
  echo "llama.cpp: $LLAMA_BENCH ($("$LLAMA_BENCH" --version 2>&1 | head -1))"
else
  echo "llama.cpp: llama-cpp-python from $PY"
fi
