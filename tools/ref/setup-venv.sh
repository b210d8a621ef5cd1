#!/usr/bin/env bash
# Creates (or completes) the Python venv used by the scripts in tools/ref. Idempotent: a second run
# only checks that everything is installed. CI does not need it (the fixtures are committed); it is
# for developers who regenerate fixtures.
#
#   tools/ref/setup-venv.sh                 # venv at ~/.cache/oxinfer/refvenv (or $OXINFER_REFVENV)
#   tools/ref/setup-venv.sh --no-llamacpp   # skip llama-cpp-python (its build takes ~15 min on 2 cores)
#
# llama-cpp-python compiles llama.cpp from source. The CPU flags below are fixed (no -march=native)
# so the build is reproducible; AVX-512 and AMX stay off (AMX tiles SIGILL on some hosts).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${OXINFER_REFVENV:-$HOME/.cache/oxinfer/refvenv}"
PYTHON="${PYTHON:-python3}"
LLAMACPP_VERSION="0.3.36"
WITH_LLAMACPP=1
for arg in "$@"; do
    case "$arg" in
        --no-llamacpp) WITH_LLAMACPP=0 ;;
        -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
        *) echo "unknown argument: $arg" >&2; exit 2 ;;
    esac
done

if [ ! -x "$VENV/bin/python" ]; then
    echo "creating venv $VENV"
    mkdir -p "$(dirname "$VENV")"
    "$PYTHON" -m venv "$VENV"
fi

# pinned: pip only downloads what is missing or at another version
"$VENV/bin/python" -m pip install -q -r "$HERE/requirements.txt"

if [ "$WITH_LLAMACPP" = 1 ]; then
    if "$VENV/bin/python" -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '$LLAMACPP_VERSION')" 2>/dev/null; then
        echo "llama-cpp-python $LLAMACPP_VERSION already installed"
    else
        echo "building llama-cpp-python $LLAMACPP_VERSION (compiles llama.cpp; several minutes)"
        CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" \
        CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
            "$VENV/bin/python" -m pip install --no-cache-dir "llama-cpp-python==$LLAMACPP_VERSION"
    fi
fi

"$VENV/bin/python" -c "import torch, transformers, gguf, safetensors, accelerate; from importlib.metadata import version; \
print('ok: torch', torch.__version__, 'transformers', transformers.__version__, 'gguf', version('gguf'))"
echo "venv ready: $VENV  (run scripts as $VENV/bin/python tools/ref/<script>.py)"
