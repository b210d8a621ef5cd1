# Sourced by the device scripts (gpu-side-by-side.sh, gpu-ncu-step.sh, gpu-gemv-ab.sh,
# gpu-step-host-ab.sh): the carry unpacked into the work folder and the models made there.
# Sets, unless the caller did, C (the carry, from scripts/gpu-carry.sh: $GPU_SBS_CARRY, default
# target/gpucarry), W (the work folder: $GPU_SBS_WORK, default /tmp/gpu-sbs) and PY (a python
# with numpy: $GPU_SBS_PYTHON, default python3); defines OX (the unpacked CLI) and gpu_model.

C=${C:-${GPU_SBS_CARRY:-target/gpucarry}}
W=${W:-${GPU_SBS_WORK:-/tmp/gpu-sbs}}
PY=${PY:-${GPU_SBS_PYTHON:-python3}}
mkdir -p "$W/site" "$W/m" "$W/bin"
# Always unpacked afresh: a warm machine may hold an older call's binary here.
xz -dc "$C/oxinfer.xz" >"$W/bin/oxinfer"
chmod +x "$W/bin/oxinfer"
python3 -m zipfile -e "$(ls "$C"/gguf-*.whl | head -1)" "$W/site"
OX=$W/bin/oxinfer

# Makes model $1 (smol, gemma: the synthetic files of the test models' geometry; q7b: the
# synthetic 7B) at $W/m/$1.gguf unless it is there.
gpu_model() {
  local f=$W/m/$1.gguf
  [ -s "$f" ] && return 0
  case $1 in
    q7b) PYTHONPATH=$W/site "$PY" tools/ref/make_synthetic_7b.py --out "$f" >&2 ;;
    smol | gemma) PYTHONPATH=$W/site "$PY" tools/ref/make_synthetic_like.py expand "$C/$1.skel.xz" "$f" >&2 ;;
    *) echo "unknown model $1 (smol, gemma, q7b)" >&2; return 2 ;;
  esac
}

# The md5 of the greedy reply (32 tokens after the ids 1..5) of model $1 (smol, gemma, q7b)
# under each `VAR=value` line of $2: equal sums, the same ids.
gpu_greedy_md5() {
  local v
  while IFS= read -r v; do
    env "$v" "$OX" run -m "$W/m/$1.gguf" --device cuda --tokens 1,2,3,4,5 -n 32 --temp 0 2>/dev/null |
      tail -c 400 | md5sum | sed "s|^|$1 [$v] |"
  done <<<"$2"
}

# tg128 (`bench -p 0 -n 128 -r 3`) of model $1 under each `VAR=value` line of $3, the settings
# alternated over $2 rounds.
gpu_tg_rounds() {
  local round v r
  for round in $(seq "$2"); do
    while IFS= read -r v; do
      r=$(env "$v" "$OX" bench -m "$W/m/$1.gguf" --device cuda -p 0 -n 128 -r 3 2>/dev/null |
        grep tg128 | tail -1 | awk -F'|' '{print $(NF-1)}')
      echo "round $round $1 [$v] tg128 $r"
    done <<<"$3"
  done
}
