#!/usr/bin/env bash
# Perplexity of one model on the CPU and on the GPU (default fast path and the exact-product
# path), on a text long enough for the comparison to mean something, with the relative
# differences. The text is the first 120,000 characters of Python's own documentation topics
# (pydoc_data.topics, in every CPython; about 29,000 tokens, 56-57 windows of 512): on the
# 3,000-token tests/fixtures/texts/ppl-en.txt, int8 activation rounding flips that any change
# of summation order causes move the perplexity of these small models by up to 1 % between two
# CPU kernel sets alone.
#
#   scripts/ppl-device-vs-cpu.sh MODEL [OXINFER]   (OXINFER: the binary, default a release build)
set -euo pipefail
MODEL=${1:?usage: ppl-device-vs-cpu.sh MODEL [OXINFER]}
cd "$(dirname "$0")/.."
if [ -n "${2:-}" ]; then
  OX=$2
else
  cargo build --release -q -p oxinfer-cli
  OX=target/release/oxinfer
fi
TEXT=${TMPDIR:-/tmp}/oxinfer-pydoc-topics.txt
python3 -c "
from pydoc_data.topics import topics
s = '\n\n'.join(topics[k] for k in sorted(topics))
open('$TEXT', 'w').write(s[:120000])"

# The final perplexity of one run, or the run's last lines on stderr (and no value) if it failed.
ppl() {
  local out
  if out=$("$@" 2>&1) && grep -q 'PPL = ' <<<"$out"; then
    sed -n 's/.*PPL = \([0-9.]*\).*/\1/p' <<<"$out" | tail -1
  else
    echo "failed: $*" >&2
    tail -3 <<<"$out" >&2
  fi
}
cpu=$(ppl "$OX" perplexity -m "$MODEL" -f "$TEXT" -c 512 --device cpu)
cuda=$(ppl "$OX" perplexity -m "$MODEL" -f "$TEXT" -c 512 --device cuda)
exact=$(OXINFER_CUDA_QGEMM=exact ppl "$OX" perplexity -m "$MODEL" -f "$TEXT" -c 512 --device cuda)
[ -n "$cpu" ] || { echo "the CPU run failed" >&2; exit 1; }
python3 -c "
c = $cpu
line = f'cpu {c:.4f}'
for name, v in (('cuda', '$cuda'), ('cuda exact', '$exact')):
    line += f'  {name} ' + (f'{float(v):.4f} ({100 * (float(v) / c - 1):+.3f} %)' if v else 'failed')
print(line)"
[ -n "$cuda" ] && [ -n "$exact" ]
