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
. "$HERE/host.sh"   # timeout_args, e2e_prepare

timeout_args 300 "$@"

e2e_prepare vm-e2e-peer-probe

rm -rf "$OUT"; mkdir -p "$OUT/guest"
log "guest run (limit ${TIMEOUT}s)"
set +e
bash "$HERE/run.sh" -t "$TIMEOUT" --share "$OUT/guest" -l "$OUT/console.log" \
  -a "$BIN:/guest/roce_exporter" "$VM" "$HERE/guest/e2e-peer-probe.sh"
vm_rc=$?
python3 "$HERE/check_peer_probe.py" --dir "$OUT/guest" --vm-rc "$vm_rc"
exit $?
