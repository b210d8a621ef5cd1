#!/usr/bin/env bash
# Builds the browser package: crates/oxinfer-web for wasm32-unknown-unknown (SIMD128, from
# .cargo/config.toml), then wasm-bindgen's JS glue into web/pkg (ignored by git), which
# web/worker.js imports. Needs scripts/setup-web.sh first. Serve web/ (any static server) and
# open web/index.html; see docs/wasm.md.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${OXINFER_CACHE:-$HOME/.cache/oxinfer}"
version="$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)"
bindgen="${WASM_BINDGEN:-$CACHE/wasm-bindgen-$version/bin/wasm-bindgen}"
[ -x "$bindgen" ] || { echo "build-web: no $bindgen: run scripts/setup-web.sh" >&2; exit 1; }
# The release profile as it is (with line tables, which wasm-bindgen drops from the module):
# the host build scripts and proc macros are then shared with the other release builds.
cargo build --release -p oxinfer-web --target wasm32-unknown-unknown
"$bindgen" --target web --out-dir web/pkg target/wasm32-unknown-unknown/release/oxinfer_web.wasm
ls -l web/pkg/oxinfer_web_bg.wasm
