#!/usr/bin/env bash
# e2e-peer-probe.sh [-t SEC]  --  the peer probes' UD verbs layer on a real
# kernel, in one Soft-RoCE VM.
#
# Boots the VM (tests/vm/README.md), runs guest/e2e-peer-probe.sh in it
# (three exporters on rxe0, each with its own UD responder: A and B probe
# each other, C probes A without being A's peer, B stopped and restarted),
# then tests/vm/check_peer_probe.py. One VM has one port, so this proves
# the verbs layer (address handles, GRH, Q_Key, sender check, echo) and the
# re-fetch, not a fabric path: the two-VM mode does that.
#
# Environment:
#   ROCE_VM_DIR=DIR         image cache (default /tmp/roce-exporter-vm)
#   ROCE_EXPORTER_BIN=FILE  use this binary instead of `cargo build --release`
#   E2E_OUT=DIR             where the guest's files go (default target/vm-e2e-peer-probe)
# Exit status: 0 when every check passed; 1 when a check failed; 2 on usage
# or build errors. The last line printed is "N passed, M failed".
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
log() { printf '[e2e-peer-probe] %s\n' "$*" >&2; }
. "$HERE/host.sh"   # vm_image, exporter_binary

TIMEOUT=300
while (($#)); do
  case $1 in
    -t|--timeout) TIMEOUT=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;/^set -e/d'; exit 0 ;;
    *) log "unknown argument $1"; exit 2 ;;
  esac
done

VM=${ROCE_VM_DIR:-/tmp/roce-exporter-vm}
OUT=${E2E_OUT:-$ROOT/target/vm-e2e-peer-probe}
vm_image "$VM"
exporter_binary

rm -rf "$OUT"; mkdir -p "$OUT/guest"
log "guest run (limit ${TIMEOUT}s)"
set +e
bash "$HERE/run.sh" -t "$TIMEOUT" --share "$OUT/guest" -l "$OUT/console.log" \
  -a "$BIN:/guest/roce_exporter" "$VM" "$HERE/guest/e2e-peer-probe.sh"
vm_rc=$?
python3 "$HERE/check_peer_probe.py" --dir "$OUT/guest" --vm-rc "$vm_rc"
exit $?
