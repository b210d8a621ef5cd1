#!/usr/bin/env bash
# Cross-compiles the kernel crate for aarch64 and runs its tests under qemu-user, once per NEON
# level so that every kernel runs against its scalar twin and the run-time detection is checked:
# the emulated `max` CPU (NEON + dotprod + i8mm: all three levels are tested in this run),
# Neoverse N1 (NEON + dotprod) and Cortex-A53 (plain NEON).
#
#   scripts/test-aarch64.sh
#
# Needs Debian's `qemu-user` and `gcc-aarch64-linux-gnu` (installed here with apt-get when
# missing and running as root) and the rustup target; linker and runner are set in
# .cargo/config.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=aarch64-unknown-linux-gnu

if ! command -v qemu-aarch64 >/dev/null 2>&1 || ! command -v aarch64-linux-gnu-gcc >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross >/dev/null
  else
    echo "test-aarch64: need qemu-aarch64 and aarch64-linux-gnu-gcc" \
      "(Debian: apt-get install qemu-user gcc-aarch64-linux-gnu)" >&2
    exit 1
  fi
fi
rustup target list --installed | grep -qx "$TARGET" || rustup target add "$TARGET"

# QEMU_CPU picks the emulated CPU; OXINFER_TEST_EXPECT_ISA makes the tests fail if the kernels
# detected on it are not the expected level.
for cpu in max:neon+dotprod+i8mm neoverse-n1:neon+dotprod cortex-a53:neon; do
  echo "-- qemu -cpu ${cpu%%:*} (expect ${cpu#*:})"
  QEMU_CPU="${cpu%%:*}" OXINFER_TEST_EXPECT_ISA="${cpu#*:}" \
    cargo test -q -p oxinfer-kernels --target "$TARGET"
done
