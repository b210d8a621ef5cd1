#!/usr/bin/env bash
# oxinfer vs llama.cpp on the same model, threads and sizes, interleaved test by test in one
# run, with the ratio. llama.cpp comes from llama-cpp-python (see tools/ref/setup-venv.sh; built
# with AMX off, see tools/ref/README.md).
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
cd "$(dirname "$0")/.."
cargo build --release -q -p oxinfer-cli
OX=target/release/oxinfer

echo "| test | oxinfer t/s | llama.cpp t/s | ratio |"
echo "| --- | ---: | ---: | ---: |"
for t in "${TESTS[@]}"; do
  n=${t:2}
  if [[ $t == pp* ]]; then args=(-p "$n" -n 0); else args=(-p 0 -n "$n"); fi
  ox=$("$OX" bench -m "$MODEL" -t "$THREADS" -r "$REPS" -o json "${args[@]}" | "$PY" -c "import json,sys; r=json.load(sys.stdin)[0]; print('%.2f %.2f' % (r['avg_ts'], r['stddev_ts']))")
  lc=$("$PY" tools/bench/llamacpp_bench.py "$MODEL" --threads "$THREADS" --test "$t" --reps "$REPS" | "$PY" -c "import json,sys; r=json.load(sys.stdin); print('%.2f %.2f' % (r['avg_ts'], r['stddev_ts']))")
  read -r oa os <<<"$ox"
  read -r la ls <<<"$lc"
  ratio=$("$PY" -c "print(f'{$oa/$la:.2f}')")
  echo "| $t | $oa ± $os | $la ± $ls | ${ratio}x |"
done
