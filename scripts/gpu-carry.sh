#!/usr/bin/env bash
# Packs what a GPU side-by-side run on an offline device machine needs (scripts/gpu-side-by-side.sh
# there) into target/gpucarry, small enough to travel with the working tree in one device call
# (about 11 MB; a call takes 64 MiB in all, the tracked tree about 51 MB):
#
#   oxinfer.xz        a stripped release build of the CLI with the CUDA backend only (its own
#                     target dir, target/cudaonly; about 5 MB compressed)
#   smol.skel.xz      tools/ref/make_synthetic_like.py skeletons of the real test models
#   gemma.skel.xz     (SmolLM2-135M Q4_1, Gemma 3 270M Q4_K_M; fetched first if missing)
#   gguf-*.whl        the gguf package, for expanding them and making the synthetic 7B there
#   llama-src.tar.xz  llama.cpp's source, pruned (scripts/build-llama-cpp.sh pack)
#
#   scripts/gpu-carry.sh [--tests] [--lib-tests] [--no-llama]
#       then run `bash scripts/gpu-side-by-side.sh` there with carry ["target/gpucarry"]
#
# --tests adds the device tests, stripped and compressed (about 1 MB): backend_ops.xz (run it
# there from the repository root: `xz -dc target/gpucarry/backend_ops.xz > /tmp/bo; chmod +x
# /tmp/bo; /tmp/bo --test-threads 1`); --lib-tests adds cuda_lib_tests.xz (oxinfer-cuda's unit
# tests, 2.5 MB; run with a filter such as `norm_kernels`, since a few read the source tree at
# its path here). --no-llama leaves llama.cpp's source out (3.4 MB), e.g. to make room for the
# tests. The device tool appears to count the tree's disk usage (about 56 MiB in 4 KiB blocks: it
# refused 52 MiB of tracked bytes with an 11 MB carry), so a carry has about 8 MiB: the CLI, the skeletons and the wheel with either llama.cpp's source or the
# tests, not both.
#
# Python: $OXINFER_REF_PYTHON, else the reference venv's (tools/ref/setup-venv.sh), else a venv
# made here with only gguf and numpy (~/.cache/oxinfer/gguf-venv).
set -euo pipefail
cd "$(dirname "$0")/.."
TESTS=0
LIB_TESTS=0
LLAMA=1
for a in "$@"; do
  case $a in
    --tests) TESTS=1 ;;
    --lib-tests) LIB_TESTS=1 ;;
    --no-llama) LLAMA=0 ;;
    *) echo "unknown argument $a (--tests, --lib-tests, --no-llama)" >&2; exit 2 ;;
  esac
done
OUT=target/gpucarry
CACHE="$HOME/.cache/oxinfer"
mkdir -p "$OUT"

PY=${OXINFER_REF_PYTHON:-$CACHE/refvenv/bin/python}
if ! "$PY" -c "import gguf, numpy" 2>/dev/null; then
  PY=$CACHE/gguf-venv/bin/python
  if ! "$PY" -c "import gguf, numpy" 2>/dev/null; then
    python3 -m venv "$CACHE/gguf-venv"
    "$CACHE/gguf-venv/bin/pip" install -q gguf numpy
  fi
fi

echo "== oxinfer (CUDA only, stripped)"
cargo build --release -q -p oxinfer-cli --no-default-features --features cuda --target-dir target/cudaonly
strip -o "$OUT/oxinfer" target/cudaonly/release/oxinfer
xz -T0 -9 -f "$OUT/oxinfer"

echo "== model skeletons"
bash scripts/fetch-test-models.sh >/dev/null
MODELS=${OXINFER_TEST_MODELS:-${OXINFER_CACHE:-$CACHE}/models}
"$PY" tools/ref/make_synthetic_like.py skeleton "$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf" "$OUT/smol.skel.xz"
"$PY" tools/ref/make_synthetic_like.py skeleton "$MODELS/gemma-3-270m-q4_k_m.gguf" "$OUT/gemma.skel.xz"

echo "== gguf wheel"
rm -f "$OUT"/gguf-*.whl
python3 -m pip download -q --no-deps gguf -d "$OUT"
rm -f "$OUT/llama-src.tar.xz" "$OUT/backend_ops.xz" "$OUT/cuda_lib_tests.xz"
if [ "$LLAMA" = 1 ]; then
  echo "== llama.cpp source"
  bash scripts/build-llama-cpp.sh pack "$OUT/llama-src.tar.xz"
fi
if [ "$TESTS" = 1 ] || [ "$LIB_TESTS" = 1 ]; then
  echo "== device tests"
  # The test executables cargo lists for oxinfer-cuda: its unit tests and backend_ops.
  exes=$(cargo test --release -q -p oxinfer-cuda --no-run --message-format=json 2>/dev/null |
    python3 -c "import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get('reason') == 'compiler-artifact' and m.get('executable') and m['target']['name'] in ('oxinfer_cuda', 'backend_ops'):
        print(m['target']['kind'][0], m['executable'])")
  while read -r kind exe; do
    name=backend_ops
    want=$TESTS
    [ "$kind" = lib ] && name=cuda_lib_tests && want=$LIB_TESTS
    [ "$want" = 1 ] || continue
    strip -o "$OUT/$name" "$exe"
    xz -T0 -9 -f "$OUT/$name"
  done <<<"$exes"
fi

du -ch "$OUT"/* | tail -1
# A device call sends the tracked tree and the carry together, at most 64 MiB, counted as disk
# usage (whole 4 KiB blocks: the tree's 52 MiB of bytes take about 56).
tree=$(($(git ls-files -z | du -c --files0-from=- | tail -1 | cut -f1) << 10))
carry=$(($(du -c "$OUT"/* | tail -1 | cut -f1) << 10))
limit=$((64 << 20))
echo "tracked tree $((tree >> 20)) MiB + carry $((carry >> 20)) MiB = $(((tree + carry) >> 20)) MiB of $((limit >> 20)) MiB"
if [ $((tree + carry)) -gt "$limit" ]; then
  echo "warning: over the device call's 64 MiB: drop --tests or the llama.cpp tarball (--no-llama)" >&2
fi
