#!/usr/bin/env bash
# Portability checks. Usage: targets.sh check | aarch64
#   check:   the library (crates/locklab) checks and lints clean for every target it supports:
#            aarch64 Linux, x86-64 and aarch64 macOS, x86-64 Windows (gnu and msvc), x86-64 FreeBSD
#            (cargo check needs no linker or SDK for these), plus the lab and the preload library
#            for aarch64 Linux.
#   aarch64: the library's unit and integration tests cross-built for aarch64-unknown-linux-gnu and
#            run under qemu-aarch64, a short torture of every primitive there, and the unlock
#            disassembly check in its aarch64 form. qemu-user runs arm64 code on this x86 host with the
#            host's (strong) memory ordering: this proves the code paths, system calls and fallbacks,
#            not the orderings (those are argued by loom and review; docs/design/portability.md).
# Installs what it needs (rustup targets; Debian's gcc-aarch64-linux-gnu, libc6-dev-arm64-cross,
# qemu-user).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-check}
targets=(aarch64-unknown-linux-gnu x86_64-apple-darwin aarch64-apple-darwin x86_64-pc-windows-gnu
  x86_64-pc-windows-msvc x86_64-unknown-freebsd)

add_targets() {
  local have
  have=$(rustup target list --installed)
  for t in "$@"; do
    grep -qx "$t" <<<"$have" || rustup target add "$t" >/dev/null
  done
}

case $mode in
check)
  add_targets "${targets[@]}"
  for t in "${targets[@]}"; do
    echo "targets: clippy -p locklab --target $t"
    cargo clippy -q -p locklab --target "$t" -- -D warnings
  done
  echo "targets: clippy of the whole workspace (the lab, the preload library) for aarch64 Linux and macOS"
  cargo clippy -q --workspace --target aarch64-unknown-linux-gnu -- -D warnings
  cargo clippy -q --workspace --target aarch64-apple-darwin -- -D warnings
  echo "targets: every target checks and lints clean"
  ;;
aarch64)
  add_targets aarch64-unknown-linux-gnu
  if ! command -v qemu-aarch64 >/dev/null || ! command -v aarch64-linux-gnu-gcc >/dev/null \
    || [ ! -d /usr/aarch64-linux-gnu/lib ]; then
    (apt-get update -qq && apt-get install -y -qq gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user) >/dev/null
  fi
  export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
  export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
  export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
  t=aarch64-unknown-linux-gnu
  echo "targets: the library's tests on $t under qemu"
  # Left out (they run natively above): the fork tests (qemu-user's own threads hold qemu's locks at
  # a fork, and a forked child that then starts threads can hang inside qemu), and three tests that
  # re-execute their own test binary (the host cannot run an arm64 binary without binfmt_misc).
  cargo test --release -p locklab --target $t --lib --tests -- --skip fork \
    --skip a_refused_membarrier_falls_back_to_fences --skip a_stall_warning_into_a_closed_stderr \
    --skip every_increment_aborts_at_the_bound
  echo "targets: torture of every primitive on $t under qemu"
  cargo build --release -q -p locklab-bench --target $t
  qemu-aarch64 -L /usr/aarch64-linux-gnu target/$t/release/locklab torture --lock all --duration 1
  echo "targets: the unlock disassembly check on $t"
  bash .ci/check-unlock-asm.sh $t
  ;;
*)
  echo "usage: targets.sh check|aarch64"; exit 2 ;;
esac
