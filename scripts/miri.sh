#!/usr/bin/env bash
# Runs the kernel crate's thread pool and scalar-code tests under Miri (undefined behaviour in
# `unsafe`: the pool's task hand-off and panic propagation, block decoding and row arithmetic).
# SIMD kernels are not covered (run-time feature detection reports no SIMD under Miri, so the
# dispatched paths are the scalar twins). Needs `rustup +nightly component add miri rust-src`.
#
#   scripts/miri.sh [extra test filters...]
set -euo pipefail
cd "$(dirname "$0")/.."
# Isolation off: the pool reads the CPU count and the dispatch reads environment switches.
export MIRIFLAGS="${MIRIFLAGS:--Zmiri-disable-isolation}"
filters=("$@")
if [ ${#filters[@]} -eq 0 ]; then
    # The pool's long loops (10 000 regions, 4 callers x 200 rounds) take too long under Miri;
    # these cover the same hand-off, nesting and panic paths.
    filters=(pool::tests::every_task_runs_once pool::tests::nested_regions_run_inline
        pool::tests::a_panicking_task_ends_its_region_and_the_pool_survives
        dequant::tests::q4_0_hand_example dequant::tests::rejects_bad_sizes
        dequant::kquants:: format::tests::row_bytes_edges)
fi
for f in "${filters[@]}"; do
    echo "== miri: $f"
    cargo +nightly miri test -q -p oxinfer-kernels --lib -- "$f"
done
