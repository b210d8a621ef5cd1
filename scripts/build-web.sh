#!/usr/bin/env bash
# Builds the browser package: crates/oxinfer-web for wasm32-unknown-unknown twice, then
# wasm-bindgen's JS glue for each (ignored by git), which web/worker.js imports:
#   web/pkg          SIMD128 (.cargo/config.toml's flags), for every browser with wasm SIMD;
#   web/pkg-relaxed  SIMD128 + relaxed SIMD (faster int8 kernels), which the worker picks where
#                    the browser validates a relaxed-SIMD instruction (Chromium 114+).
# Needs scripts/setup-web.sh first. Serve web/ (any static server) and open web/index.html;
# see docs/wasm.md. `bash scripts/build-web.sh simd128` (or `relaxed`) builds one of the two.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${OXINFER_CACHE:-$HOME/.cache/oxinfer}"
version="$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)"
bindgen="${WASM_BINDGEN:-$CACHE/wasm-bindgen-$version/bin/wasm-bindgen}"
[ -x "$bindgen" ] || { echo "build-web: no $bindgen: run scripts/setup-web.sh" >&2; exit 1; }
builds="${1:-simd128 relaxed}"
module=target/wasm32-unknown-unknown/release/oxinfer_web.wasm
for build in $builds; do
  # The release profile as it is (with line tables, which wasm-bindgen drops from the module):
  # the host build scripts and proc macros are then shared with the other release builds.
  # RUSTFLAGS replaces the target's flags from .cargo/config.toml (and, with --target, does not
  # reach the host build scripts); cargo keeps the two builds' artifacts apart by their flags,
  # so rebuilding one does not throw the other away. Each module is copied out of the shared
  # output path right after its build.
  case "$build" in
    simd128) out=web/pkg; cargo build --release -p oxinfer-web --target wasm32-unknown-unknown ;;
    relaxed)
      out=web/pkg-relaxed
      RUSTFLAGS="-C target-feature=+simd128,+relaxed-simd" \
        cargo build --release -p oxinfer-web --target wasm32-unknown-unknown
      ;;
    *) echo "build-web: unknown build '$build' (simd128 or relaxed)" >&2; exit 1 ;;
  esac
  "$bindgen" --target web --out-dir "$out" "$module"
  ls -l "$out/oxinfer_web_bg.wasm"
done
