#!/usr/bin/env bash
# Builds llama.cpp's C++ `llama-server` (the reference for scripts/bench-serve.sh) from the
# llama.cpp source vendored in the llama-cpp-python 0.3.36 sdist, for x86-64 with AVX2/FMA/F16C
# (no AVX-512, no AMX: the same instruction set oxinfer's kernels use), CPU only, no curl.
#
#   scripts/build-llama-server.sh
#
# Output: ~/.cache/oxinfer/llama-cpp-build/bin/llama-server. Needs cmake (pip install cmake
# ninja works) and a C++ compiler; takes a while on a loaded 2-core machine (run under nice).
set -euo pipefail
CACHE="$HOME/.cache/oxinfer"
SDIST="$CACHE/sdist"
SRC="$SDIST/llama_cpp_python-0.3.36/vendor/llama.cpp"
BUILD="$CACHE/llama-cpp-build"
if [ ! -d "$SRC" ]; then
  mkdir -p "$SDIST"
  # Only this package from source; its build tools (cmake, scikit-build-core) as wheels.
  python3 -m pip download --no-deps --no-binary llama-cpp-python llama-cpp-python==0.3.36 -d "$SDIST"
  tar -xzf "$SDIST/llama_cpp_python-0.3.36.tar.gz" -C "$SDIST"
fi
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
cmake -S "$SRC" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF \
  -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DBUILD_SHARED_LIBS=OFF
nice -n 15 cmake --build "$BUILD" --target llama-server -j "$(nproc)"
echo "built $BUILD/bin/llama-server"
