#!/usr/bin/env bash
# Installs what the browser package and its test need (idempotent; ~4-5 min the first time on
# 2 cores, seconds after): the rustup target wasm32-unknown-unknown; wasm-bindgen-cli at exactly
# the version of the `wasm-bindgen` crate in Cargo.lock (the CLI refuses a module made by another
# version), built once into ~/.cache/oxinfer/wasm-bindgen-VERSION; headless Chromium (Debian's
# `chromium`); and websocket-client for the test's DevTools driver in a venv
# (~/.cache/oxinfer/webvenv, or $OXINFER_WEB_VENV). See docs/wasm.md.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${OXINFER_CACHE:-$HOME/.cache/oxinfer}"
VENV="${OXINFER_WEB_VENV:-$CACHE/webvenv}"
WEBSOCKET_CLIENT_VERSION=1.9.2

rustup target list --installed | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown

version="$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/"/, "", $3); print $3; exit }' Cargo.lock)"
[ -n "$version" ] || { echo "setup-web: no wasm-bindgen in Cargo.lock" >&2; exit 1; }
bindgen="$CACHE/wasm-bindgen-$version/bin/wasm-bindgen"
if ! "$bindgen" --version 2>/dev/null | grep -q " $version\$"; then
  # Without --locked: the CLI's own lock file pins webpki-roots 1.0.11, which this machine's
  # crates.io index does not have (1.0.10 is the newest), so a locked install cannot resolve.
  # Without default features: no TLS stack (ring's C build); the CLI only needs TLS for its
  # test runner's downloads, which nothing here uses.
  cargo install wasm-bindgen-cli --version "=$version" --no-default-features \
    --root "$CACHE/wasm-bindgen-$version"
fi
"$bindgen" --version

if ! command -v chromium >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium \
    || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; }
fi
chromium --version

if ! "$VENV/bin/python" -c "import websocket; assert websocket.__version__ == '$WEBSOCKET_CLIENT_VERSION'" 2>/dev/null; then
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "websocket-client==$WEBSOCKET_CLIENT_VERSION"
fi
echo "web test venv: $VENV (websocket-client $WEBSOCKET_CLIENT_VERSION)"
