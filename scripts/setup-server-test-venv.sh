#!/usr/bin/env bash
# Builds the Python venv the server tests use: the official `openai` client, pytest and
# jsonschema (crates/oxinfer-server/tests/python), and huggingface_hub (the hub tests check
# that its cache and ours are shared: crates/oxinfer/tests/hub_fake.rs). Idempotent: an existing venv with the
# packages importable is kept. rfc3339-validator, fqdn and rfc3986-validator let jsonschema
# check the date-time/time, hostname and uri formats (without them it skips those formats).
#
#   scripts/setup-server-test-venv.sh
#
# Location: ${OXINFER_SERVER_VENV:-$HOME/.cache/oxinfer/servervenv}.
set -euo pipefail

VENV="${OXINFER_SERVER_VENV:-$HOME/.cache/oxinfer/servervenv}"
PACKAGES=(openai pytest jsonschema rfc3339-validator fqdn rfc3986-validator huggingface_hub)

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import openai, pytest, jsonschema, rfc3339_validator, fqdn, rfc3986_validator, huggingface_hub" 2>/dev/null; then
  echo "server test venv: $VENV (ready)"
  exit 0
fi
PY=""
for cand in python3 python; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import venv" >/dev/null 2>&1; then
    PY="$cand"
    break
  fi
done
if [ -z "$PY" ]; then
  echo "setup-server-test-venv: no Python with the venv module found (tried python3, python)" >&2
  exit 1
fi
mkdir -p "$(dirname "$VENV")"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PACKAGES[@]}"
"$VENV/bin/python" -c "import openai; print('server test venv:', '$VENV', 'openai', openai.__version__)"
