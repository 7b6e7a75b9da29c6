#!/usr/bin/env bash
# CI's arm64 check (GH200/GB200 nodes): the exporter, probes included,
# cross-compiled and linked for aarch64-unknown-linux-gnu with Debian's
# gcc-aarch64-linux-gnu as linker and C compiler. libibverbs is loaded at run
# time (sideway over rdma-mummy-sys); rdma-mummy-sys' build script compiles
# its own stub of rdma-core with cmake for the target (CC_<target>) and runs
# bindgen, whose clang needs the target's libc headers (--sysroot, from
# libc6-dev-arm64-cross). No aarch64 machine runs the binary here: the check
# is that it builds and links, and that the result is an aarch64 ELF.
#
# Needs the Rust target (`rustup target add aarch64-unknown-linux-gnu`);
# where it is not installed (a fresh machine, no registry to fetch it from)
# the step says so and is skipped, not failed. Debug profile without debug
# info: the build is what is checked, and it reuses nothing of the host
# build but the build scripts' dependencies. Bounded by a timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
target=aarch64-unknown-linux-gnu
if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  echo "SKIPPED: the Rust target $target is not installed (rustup target add $target);"
  echo "         the arm64 cross-compile was NOT checked on this machine."
  exit 0
fi
command -v aarch64-linux-gnu-gcc >/dev/null \
  || { echo "missing aarch64-linux-gnu-gcc (apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross)"; exit 1; }
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
export BINDGEN_EXTRA_CLANG_ARGS_aarch64_unknown_linux_gnu=--sysroot=/usr/aarch64-linux-gnu
export CARGO_PROFILE_DEV_DEBUG=0
start=$(date +%s)
timeout "${ROCE_CROSS_TIMEOUT:-900}" cargo build --quiet --locked --target "$target" --bin roce_exporter
bin=${CARGO_TARGET_DIR:-target}/$target/debug/roce_exporter
info=$(file -b "$bin")
echo "$bin: $info"
[[ $info == *"ARM aarch64"* ]] || { echo "not an aarch64 executable"; exit 1; }
echo "arm64 cross-compile took $(( $(date +%s) - start )) s"
