#!/usr/bin/env bash
# Runs a wasm32-wasip1-threads program under wasmtime with WASI threads, shared memory and the
# current folder visible: cargo's runner for that target (.cargo/config.toml), so
# `cargo test --target wasm32-wasip1-threads` runs the tests there.
#
#   scripts/wasm-run.sh PROGRAM.wasm [ARGS...]
#
# The wasmtime binary: $WASMTIME, else the one scripts/setup-wasm.sh installs
# (~/.cache/oxinfer/wasmvenv), else `wasmtime` on PATH. WASI threads need wasmtime 46 or older
# (docs/wasm.md).
# The OXINFER_*, PROPTEST_CASES and RUST_BACKTRACE variables are passed through when set.
set -euo pipefail
wt="${WASMTIME:-}"
if [ -z "$wt" ]; then
  wt="${OXINFER_WASM_VENV:-$HOME/.cache/oxinfer/wasmvenv}/bin/wasmtime"
  [ -x "$wt" ] || wt="$(command -v wasmtime || echo wasmtime)"
fi
envs=()
for v in $(compgen -e | grep -E '^(OXINFER_|PROPTEST_CASES$|RUST_BACKTRACE$)' || true); do
  envs+=(--env "$v")
done
exec "$wt" run -W threads=y,shared-memory=y -S threads=y --dir . "${envs[@]}" "$@"
