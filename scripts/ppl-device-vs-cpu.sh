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

ppl() { "$@" 2>&1 | sed -n 's/.*PPL = \([0-9.]*\).*/\1/p' | tail -1; }
cpu=$(ppl "$OX" perplexity -m "$MODEL" -f "$TEXT" -c 512 --device cpu)
cuda=$(ppl "$OX" perplexity -m "$MODEL" -f "$TEXT" -c 512 --device cuda)
exact=$(OXINFER_CUDA_QGEMM=exact ppl "$OX" perplexity -m "$MODEL" -f "$TEXT" -c 512 --device cuda)
python3 -c "
c, g, e = $cpu, ${cuda:-0}, ${exact:-0}
print(f'cpu {c:.4f}  cuda {g:.4f} ({100 * (g / c - 1):+.3f} %)  cuda exact {e:.4f} ({100 * (e / c - 1):+.3f} %)')"
