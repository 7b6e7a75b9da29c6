#!/usr/bin/env bash
# soak.sh [--duration SEC] [--interval SEC] [--out DIR] [--markdown FILE]
#   --  the exporter with probes for a long run in the Soft-RoCE VM.
#
# Boots the Soft-RoCE VM (tests/vm/README.md) and runs guest/soak.sh in it:
# the exporter (sample_interval 1s, probes every 1 s on rxe0) for --duration
# seconds under continuous ib_write_bw loopback traffic, recording its RSS,
# descriptors, threads, verbs objects and sampler/probe counters every
# --interval seconds; then tests/vm/check_soak.py judges the series (no
# growth after the warm-up, no missed sample ticks, probes all succeed,
# the traffic ran).  Not part of CI (the default run takes ~12 minutes).
#
# Options:
#   --duration SEC   exporter run under traffic (default 600)
#   --interval SEC   seconds between records (default 10)
#   --out DIR        where the guest's files go (default target/vm-soak)
#   --markdown FILE  also write the checker's report as Markdown (docs/soak.md)
# Environment:
#   ROCE_VM_DIR=DIR         image cache (default /tmp/roce-exporter-vm)
#   ROCE_EXPORTER_BIN=FILE  use this binary instead of `cargo build --release`
# Exit status: 0 when every check passed; 1 when a check failed; 2 on usage or
# build errors.  The last line printed is "N passed, M failed".
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
log() { printf '[soak] %s\n' "$*" >&2; }
. "$HERE/host.sh"   # vm_image, exporter_binary

DURATION=600
RECORD=10
OUT=$ROOT/target/vm-soak
MARKDOWN=()
while (($#)); do
  case $1 in
    --duration) DURATION=${2:?}; shift 2 ;;
    --interval) RECORD=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --markdown) MARKDOWN=(--markdown "${2:?}"); shift 2 ;;
    -h|--help) usage ;;
    *) log "unknown argument $1"; exit 2 ;;
  esac
done
[[ $DURATION =~ ^[0-9]+$ && $RECORD =~ ^[0-9]+$ && $RECORD -ge 1 ]] \
  || { log "--duration and --interval take whole seconds"; exit 2; }

VM=${ROCE_VM_DIR:-/tmp/roce-exporter-vm}
vm_image "$VM"
exporter_binary

rm -rf "$OUT"; mkdir -p "$OUT/guest"
printf 'DURATION=%s\nRECORD=%s\n' "$DURATION" "$RECORD" > "$OUT/soak.conf"
# What the report says about where it ran; the guest cannot see the host.
{
  echo "nproc=$(nproc)"
  echo "cpu=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
  echo "binary=$BIN"
  # what the binary is built from, as far as the checkout says: changes to
  # docs or scripts do not make it another exporter
  rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
  git -C "$ROOT" diff --quiet HEAD -- src crates build.rs Cargo.toml Cargo.lock 2>/dev/null || rev="$rev+uncommitted"
  echo "revision=$rev"
  echo "date=$(date -u +%Y-%m-%dT%H:%MZ)"
  echo "load_before=$(cut -d' ' -f1-3 /proc/loadavg)"
} > "$OUT/host.txt"
# Boot, exporter start-up and the last ib_write_bw chunk's end come on top
# of the duration; under TCG on a busy machine boot alone can take 2 min.
LIMIT=$((DURATION + 300))
log "guest run: ${DURATION}s soak (limit ${LIMIT}s)"
set +e
# run.sh's own lines name the accelerator it chose: kept for the report
bash "$HERE/run.sh" -t "$LIMIT" --share "$OUT/guest" -l "$OUT/console.log" \
  -a "$BIN:/guest/roce_exporter" -a "$OUT/soak.conf:/guest/soak.conf" \
  "$VM" "$HERE/guest/soak.sh" 2>&1 | tee "$OUT/run.txt"
vm_rc=${PIPESTATUS[0]}
# Other work on the host slows the emulated guest: the report says how busy it was.
echo "load_after=$(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/host.txt"
sed -n 's/^\[run\] accel=\([^ ]*\).*/accel=\1/p' "$OUT/run.txt" | head -1 >> "$OUT/host.txt"
python3 "$HERE/check_soak.py" --dir "$OUT/guest" --host "$OUT/host.txt" --vm-rc "$vm_rc" "${MARKDOWN[@]}"
exit $?
