# Sourced by the device scripts (gpu-side-by-side.sh, gpu-ncu-step.sh): the carry unpacked into
# the work folder and the models made there. Expects C (the carry, from scripts/gpu-carry.sh),
# W (the work folder) and PY (a python with numpy); defines OX (the unpacked CLI) and gpu_model.

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
