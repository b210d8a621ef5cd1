#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for SECONDS each (default 60) from its committed seed
# corpus (fuzz/corpus/<target>/; new inputs go to a scratch copy, the committed corpus is not
# touched). Fails on a crash, an input slower than 1 s (-timeout=1) or more than 2 GiB of
# memory (-rss_limit_mb=2048). Needs a nightly toolchain and cargo-fuzz
# (`cargo install cargo-fuzz`); .ci/run installs both when missing.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#   FUZZ_JOBS=N (targets run at once; default: the cores)
#   FUZZ_EXTRA="..."  (extra libFuzzer flags)
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
cargo +nightly fuzz build
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failed=()
# Each target runs on one core (libFuzzer's default single process); FUZZ_JOBS of them at once
# (default: the machine's cores), so every target still gets its full SECONDS.
jobs_max="${FUZZ_JOBS:-$(nproc)}"
run_one() {
    local t="$1" log="$work/$1.log"
    # -close_fd_mask=3: the targets print nothing worth keeping.
    if cargo +nightly fuzz run "$t" "$work/$t" -- \
        -max_total_time="$secs" -timeout=1 -rss_limit_mb=2048 -close_fd_mask=3 \
        -print_final_stats=1 ${FUZZ_EXTRA:-} >"$log" 2>&1; then
        echo ok >"$work/$t.status"
    else
        echo failed >"$work/$t.status"
    fi
}
for t in "${targets[@]}"; do
    mkdir -p "$work/$t"
    if [ -d "fuzz/corpus/$t" ]; then
        cp -r "fuzz/corpus/$t/." "$work/$t/"
    fi
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do
        wait -n || true
    done
    echo "== fuzz $t for ${secs}s"
    run_one "$t" &
done
wait
for t in "${targets[@]}"; do
    log="$work/$t.log"
    if [ "$(cat "$work/$t.status" 2>/dev/null)" = ok ]; then
        echo -n "$t: "
        grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$log" | tr '\n' ' '
        echo
    else
        echo "!! $t failed; the reproducer is under fuzz/artifacts/$t/. Last lines:"
        tail -n 40 "$log"
        failed+=("$t")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: failures in ${failed[*]}"
    exit 1
fi
echo "fuzz: ${#targets[@]} targets, no crash, no timeout"
