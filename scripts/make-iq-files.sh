#!/usr/bin/env bash
# Real GGUF files of every IQ / TQ / MXFP4 / BF16 type, written by llama.cpp's own quantizer from
# the real SmolLM2-135M-Instruct and Gemma 3 270M weights, and the checks of oxinfer on them:
# dequantization bit for bit against the `gguf` package, and perplexity against llama-perplexity
# on the same file, text and windows (the table of docs/quantization.md).
#
#   scripts/make-iq-files.sh [STAGE...]     STAGE: files hashes dequant ppl (default: all four)
#
# files:   F16 base (`llama-quantize --allow-requantize SRC F16`), an importance matrix
#          (`llama-imatrix`, -c 512, on a slice of CPython's pydoc topics disjoint from the
#          perplexity text), then one file per type (with the imatrix; MXFP4 as `--pure
#          MXFP4_MOE`, since the plain MXFP4_MOE mixture quantizes only MoE experts, and IQ2_S as
#          llama.cpp's IQ2_M mixture, whose default type is IQ2_S (its IQ2_S mixture's is IQ2_XS); BF16 from
#          the base without one). Rows whose length is not a multiple of 256 (576 and 640, the
#          models' hidden sizes) fall back to llama.cpp's 32-weight types (IQ4_NL, Q4_0, ...). Existing files are kept (delete them to remake).
# hashes:  tools/ref/dequant_hashes.py → <file>.dequant.json (gguf.quants.dequantize SHA-256s).
# dequant: crates/oxinfer/tests/dequant_real_gguf.rs on every file (OXINFER_DEQUANT_FILES).
# ppl:     `oxinfer perplexity` and `llama-perplexity`, -c 512, $PPL_CHUNKS windows, $THREADS
#          threads, one after the other per file; prints the markdown table.
#
# Environment: OUT (default ~/.cache/oxinfer/iq-files), LLAMA_BIN (default
# ~/.cache/oxinfer/llama-cpp-native/bin, scripts/build-llama-cpp.sh native), MODELS_DIR (default
# ~/.cache/oxinfer/models, scripts/fetch-test-models.sh), TYPES, MODELS (smollm2 gemma3),
# THREADS (2), PPL_CHUNKS (4), IMATRIX_CHUNKS (8). Not run by CI (needs the llama.cpp tools;
# about 45 min on 2 cores, most of it perplexity).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="$HOME/.cache/oxinfer"
OUT=${OUT:-$CACHE/iq-files}
LLAMA_BIN=${LLAMA_BIN:-$CACHE/llama-cpp-native/bin}
MODELS_DIR=${MODELS_DIR:-$CACHE/models}
PY=${OXINFER_REF_PYTHON:-$CACHE/refvenv/bin/python}
TYPES=${TYPES:-IQ4_NL IQ4_XS IQ3_XXS IQ3_S IQ2_XXS IQ2_XS IQ2_S IQ1_S IQ1_M TQ1_0 TQ2_0 MXFP4 BF16}
MODELS=${MODELS:-smollm2 gemma3}
THREADS=${THREADS:-2}
PPL_CHUNKS=${PPL_CHUNKS:-4}
IMATRIX_CHUNKS=${IMATRIX_CHUNKS:-8}
STAGES=("${@:-files hashes dequant ppl}")
[ ${#STAGES[@]} -eq 1 ] && read -r -a STAGES <<<"${STAGES[0]}"
mkdir -p "$OUT"

source_of() {
  case $1 in
    smollm2) echo "$MODELS_DIR/SmolLM2-135M-Instruct.Q4_1.gguf" ;;
    gemma3) echo "$MODELS_DIR/gemma-3-270m-q4_k_m.gguf" ;;
    *) echo "unknown model $1 (smollm2|gemma3)" >&2; exit 2 ;;
  esac
}
file_of() { echo "$OUT/$1-$2.gguf"; }
has_stage() { [[ " ${STAGES[*]} " == *" $1 "* ]]; }

# The texts: CPython's pydoc topics (sorted keys, as scripts/ppl-device-vs-cpu.sh), the first
# 120,000 characters for perplexity, characters 200,000-300,000 for the importance matrix.
PPL_TEXT="$OUT/ppl-text.txt"
CALIB_TEXT="$OUT/imatrix-text.txt"
"$PY" -c "
from pydoc_data.topics import topics
s = '\n\n'.join(topics[k] for k in sorted(topics))
open('$PPL_TEXT', 'w').write(s[:120000])
open('$CALIB_TEXT', 'w').write(s[200000:300000])"

if has_stage files; then
  for m in $MODELS; do
    base=$(file_of "$m" F16)
    [ -f "$base" ] || "$LLAMA_BIN/llama-quantize" --allow-requantize "$(source_of "$m")" "$base" F16 \
      >"$OUT/$m-F16.log" 2>&1
    imatrix="$OUT/$m.imatrix.gguf"
    [ -f "$imatrix" ] || "$LLAMA_BIN/llama-imatrix" -m "$base" -f "$CALIB_TEXT" -o "$imatrix" \
      -c 512 --chunks "$IMATRIX_CHUNKS" -t "$THREADS" >"$OUT/$m.imatrix.log" 2>&1
    for t in $TYPES; do
      f=$(file_of "$m" "$t")
      [ -f "$f" ] && continue
      case $t in
        BF16) args=("$base" "$f" BF16) ;;
        MXFP4) args=(--pure --imatrix "$imatrix" "$base" "$f" MXFP4_MOE) ;;
        IQ2_S) args=(--imatrix "$imatrix" "$base" "$f" IQ2_M) ;;
        *) args=(--imatrix "$imatrix" "$base" "$f" "$t") ;;
      esac
      if ! "$LLAMA_BIN/llama-quantize" --allow-requantize "${args[@]}" "$THREADS" \
        >"$OUT/$m-$t.log" 2>&1; then
        echo "llama-quantize failed for $m $t: see $OUT/$m-$t.log" >&2
        tail -3 "$OUT/$m-$t.log" >&2
        rm -f "$f"
      fi
    done
  done
fi

files=()
for m in $MODELS; do
  for t in $TYPES; do
    f=$(file_of "$m" "$t")
    [ -f "$f" ] && files+=("$f")
  done
done

if has_stage hashes; then
  for f in "${files[@]}"; do
    [ -f "$f.dequant.json" ] || "$PY" tools/ref/dequant_hashes.py "$f"
  done
fi

if has_stage dequant; then
  list=$(IFS=:; echo "${files[*]}")
  OXINFER_DEQUANT_FILES="$list" nice -n 5 cargo test --release --workspace \
    --test dequant_real_gguf -- --nocapture 2>&1 | grep -E 'tensors|differ|test result|panicked'
fi

if has_stage ppl; then
  cargo build --release -q -p oxinfer-cli
  OX=target/release/oxinfer
  ppl() {
    local out
    if out=$("$@" 2>&1) && grep -q 'PPL = ' <<<"$out"; then
      sed -n 's/.*PPL = \([0-9.]*\).*/\1/p' <<<"$out" | tail -1
    else
      echo "failed: $*" >&2
      tail -3 <<<"$out" >&2
    fi
  }
  echo "| model | type | tensor types (count) | MiB | oxinfer PPL | llama.cpp PPL | Δ |"
  echo "| --- | --- | --- | ---: | ---: | ---: | ---: |"
  for f in "${files[@]}"; do
    name=$(basename "$f" .gguf)
    mix=$("$PY" -c "
import json, collections
t = json.load(open('$f.dequant.json'))['tensors'].values()
c = collections.Counter(v['type'] for v in t if v['type'] != 'F32')
print(', '.join(f'{k} ×{n}' for k, n in c.most_common()))" 2>/dev/null || echo "?")
    mib=$(( $(stat -c %s "$f") / 1048576 ))
    ours=$(ppl "$OX" perplexity -m "$f" -f "$PPL_TEXT" -c 512 --chunks "$PPL_CHUNKS" -t "$THREADS")
    ref=$(ppl "$LLAMA_BIN/llama-perplexity" -m "$f" -f "$PPL_TEXT" -c 512 --chunks "$PPL_CHUNKS" \
      -t "$THREADS")
    delta=$("$PY" -c "
o, r = '$ours', '$ref'
print(f'{100 * (float(o) / float(r) - 1):+.2f} %' if o and r else 'n/a')")
    echo "| ${name%%-*} | ${name#*-} | $mix | $mib | ${ours:-failed} | ${ref:-failed} | $delta |"
  done
  echo "llama.cpp: $("$LLAMA_BIN/llama-perplexity" --version 2>&1 | grep -m1 version)"
fi
