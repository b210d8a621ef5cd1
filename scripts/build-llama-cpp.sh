#!/usr/bin/env bash
# Builds llama.cpp's C++ `llama-server` and `llama-bench` (the references for
# scripts/bench-serve.sh and scripts/bench-vs-llamacpp.sh) from the llama.cpp source vendored in
# the llama-cpp-python 0.3.36 sdist, no curl.
#
#   scripts/build-llama-cpp.sh [native|avx2|cuda]     (default: native)
#   scripts/build-llama-cpp.sh pack OUT.tar.gz|OUT.tar.xz   (pruned source for an offline machine;
#                                                      .tar.xz: about 4.8 MB, for GPU device calls)
#
# native: `-march=native` (llama.cpp's strongest CPU configuration: AVX-512/VNNI/BF16 where the
#         CPU has them) with AMX off — gcc 12 miscompiles llama.cpp's AMX tile set-up (SIGILL).
#         GGML_AMX_* only act without GGML_NATIVE: on a CPU that lists amx_* flags, -march=native
#         alone compiles the AMX kernels in (SIGILL on VMs that do not grant AMX state), so the
#         -mno-amx-* flags below turn them off explicitly (gcc lets them override -march).
# avx2:   AVX2/FMA/F16C only (the instruction set of oxinfer's AVX2 kernels).
# cuda:   the CUDA backend (`GGML_CUDA=ON`) for CUDA_ARCH (default 90, Hopper), CPU part native;
#         needs nvcc; ~4 min on 16 cores. On a machine without network, `pack` the source here
#         (~7 MB: no models/docs/tests/media, no other GPU backends) and point LLAMA_SRC at the
#         unpacked tree there.
# Output: ~/.cache/oxinfer/llama-cpp-<flavor>/bin/{llama-server,llama-bench,llama-cli,llama-perplexity,
# llama-quantize,llama-imatrix} (LLAMA_TARGETS overrides the list; `llama-embedding`, `llama-speculative`, `llama-lookup` turn examples on). Needs cmake
# (`pip install cmake ninja` works) and a C++ compiler; ~20 min on a quiet 2-core machine.
set -euo pipefail
FLAVOR=${1:-native}
CACHE="$HOME/.cache/oxinfer"
SDIST="$CACHE/sdist"
SRC="${LLAMA_SRC:-$SDIST/llama_cpp_python-0.3.36/vendor/llama.cpp}"
BUILD="${LLAMA_BUILD:-$CACHE/llama-cpp-$FLAVOR}"
if [ ! -d "$SRC" ]; then
  mkdir -p "$SDIST"
  # Only this package from source; its build tools (cmake, scikit-build-core) as wheels.
  python3 -m pip download --no-deps --no-binary llama-cpp-python llama-cpp-python==0.3.36 -d "$SDIST"
  tar -xzf "$SDIST/llama_cpp_python-0.3.36.tar.gz" -C "$SDIST"
fi
if ! command -v cmake >/dev/null 2>&1; then
  TOOLS="$CACHE/buildtools"
  [ -x "$TOOLS/bin/cmake" ] || { python3 -m venv "$TOOLS" && "$TOOLS/bin/pip" install -q cmake ninja; }
  export PATH="$TOOLS/bin:$PATH"
fi
NOAMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
case "$FLAVOR" in
  native) ISA=(-DGGML_NATIVE=ON "-DCMAKE_C_FLAGS=$NOAMX" "-DCMAKE_CXX_FLAGS=$NOAMX") ;;
  avx2) ISA=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF) ;;
  cuda) ISA=(-DGGML_NATIVE=ON "-DCMAKE_C_FLAGS=$NOAMX" "-DCMAKE_CXX_FLAGS=$NOAMX" -DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-90}") ;;
  pack)
    OUT=${2:?usage: build-llama-cpp.sh pack OUT.tar.gz|OUT.tar.xz}
    # The compression follows OUT's suffix (tar -a); xz at its strongest level.
    XZ_OPT=-9 tar -caf "$OUT" -C "$(dirname "$SRC")" \
      --exclude=llama.cpp/models --exclude=llama.cpp/docs --exclude=llama.cpp/tests \
      --exclude=llama.cpp/media --exclude=llama.cpp/examples --exclude=llama.cpp/.git \
      --exclude=llama.cpp/benches --exclude='llama.cpp/tools/ui/tests' \
      --exclude='package-lock.json' --exclude='*.mp4' \
      --exclude='ggml-vulkan' --exclude='ggml-sycl' --exclude='ggml-metal' \
      --exclude='ggml-cann' --exclude='ggml-opencl' --exclude='ggml-musa' \
      --exclude='ggml-webgpu' --exclude='ggml-kompute' --exclude='ggml-zdnn' \
      --exclude='ggml-hexagon' --exclude='ggml-openvino' --exclude='ggml-zendnn' \
      --exclude=llama.cpp/gguf-py --exclude=llama.cpp/tools/ui/src --exclude=llama.cpp/tools/ui/static \
      --exclude=llama.cpp/tools/mtmd/tests --exclude='ggml-cpu/arch/arm' \
      --exclude='ggml-cpu/arch/riscv' --exclude='ggml-cpu/arch/loongarch' \
      --exclude='ggml-cpu/arch/powerpc' --exclude='ggml-cpu/arch/s390' \
      --exclude='ggml-cpu/arch/wasm' --exclude='ggml-cpu/spacemit' --exclude='ggml-cpu/kleidiai' \
      "$(basename "$SRC")"
    echo "packed $OUT ($(du -h "$OUT" | cut -f1))"
    exit 0 ;;
  *) echo "unknown flavor $FLAVOR (native|avx2|cuda|pack)" >&2; exit 2 ;;
esac
TARGETS=(${LLAMA_TARGETS:-llama-server llama-bench llama-cli llama-perplexity llama-quantize llama-imatrix})
# llama-embedding (tools/bench/embed_bench.py's reference), llama-speculative and llama-lookup
# (tools/bench/spec_bench.py's) live in examples/; without them examples stay off.
EXAMPLES=OFF
case " ${TARGETS[*]} " in *" llama-embedding "* | *" llama-speculative"* | *" llama-lookup "*) EXAMPLES=ON ;; esac
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
cmake -S "$SRC" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release "${ISA[@]}" \
  -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=$EXAMPLES \
  -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=OFF
nice -n 15 cmake --build "$BUILD" --target "${TARGETS[@]}" -j "$(nproc)"
echo "built ${TARGETS[*]} in $BUILD/bin"
