#!/usr/bin/env bash
# e2e-peer.sh [-t SEC]  --  peer probes between two real kernels.
#
# Boots two Soft-RoCE VMs (tests/vm/README.md) whose eth0s are joined by an
# emulated wire (qemu `dgram` netdevs over two unix datagram sockets): A is
# 10.0.2.15, B 10.0.2.16, rxe0 on each. Each runs its own exporter with
# peer_probes on and the other as its static peer; guest/e2e-peer.sh walks
# them through the scenarios (both ways answered; netem loss 30% on B; B's
# exporter stopped and started again; B's MTU lowered), then
# tests/vm/check_peer.py judges what both wrote.
#
# Options:
#   -t, --timeout SEC   limit for each VM run (default 300); the guests keep
#                       their own budget 30 s below it
# Environment:
#   ROCE_VM_DIR=DIR         image cache (default /tmp/roce-exporter-vm)
#   ROCE_EXPORTER_BIN=FILE  use this binary instead of `cargo build --release`
#   E2E_OUT=DIR             where the files go (default target/vm-e2e-peer):
#                           share/{a,b,ctl}/ and the consoles a.log, b.log
# Exit status: 0 when every check passed; 1 when a check failed; 2 on usage or
# build errors.  The last line printed is "N passed, M failed".
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
log() { printf '[e2e-peer] %s\n' "$*" >&2; }
. "$HERE/host.sh"   # timeout_args, e2e_prepare

timeout_args 300 "$@"
((TIMEOUT > 60)) || { log "-t must exceed 60"; exit 2; }

e2e_prepare vm-e2e-peer

rm -rf "$OUT"; mkdir -p "$OUT/share/a" "$OUT/share/b" "$OUT/share/ctl"
. "$HERE/load.sh"; load_prepare "$OUT/share" || exit 2   # the load test's credentials
# unix socket paths are limited to 107 bytes: keep them short, outside OUT
SOCKS=$(mktemp -d "${TMPDIR:-/tmp}/roce-wire.XXXXXX")
declare -A PID=()
cleanup() {
  local p
  # run.sh kills its qemu on TERM
  for p in "${PID[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$SOCKS"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# vm ROLE IP PEER_IP MAC_PREFIX LOCAL_SOCK REMOTE_SOCK: one VM in the
# background (its run.sh in PID[ROLE]), its lines prefixed with the role
vm() {
  local role=$1 ip=$2 peer=$3 mac=$4 lsock=$5 rsock=$6
  bash "$HERE/run.sh" -q -t "$TIMEOUT" --smp 2 --mem 384 --share "$OUT/share" \
    -l "$OUT/$role.log" --wire "$lsock:$rsock" --mac-prefix "$mac" \
    --append "sr.ip0=$ip/24 peer.role=$role peer.ip=$peer peer.budget=$((TIMEOUT - 30))" \
    -a "$BIN:/guest/roce_exporter" $(load_add) "$VM" "$HERE/guest/e2e-peer.sh" \
    > >(sed -u "s/^/[$role] /") 2>&1 &
  PID[$role]=$!
}
log "two VMs on one wire (limit ${TIMEOUT}s each)"
T0=$SECONDS
vm a 10.0.2.15 10.0.2.16 52:54:00:00:00 "$SOCKS/a" "$SOCKS/b"
vm b 10.0.2.16 10.0.2.15 52:54:00:00:01 "$SOCKS/b" "$SOCKS/a"
declare -A RC=()
for role in a b; do
  set +e; wait "${PID[$role]}"; RC[$role]=$?; set -e
  unset "PID[$role]"
done
log "both VMs done in $((SECONDS - T0)) s"
for role in a b; do
  # the guests' step lines, in the CI log
  sed "s/^/[$role steps] /" "$OUT/share/$role/steps.txt" 2>/dev/null || true
done
set +e
python3 "$HERE/check_peer.py" --dir "$OUT/share" --a-rc "${RC[a]}" --b-rc "${RC[b]}"; rc=$?
python3 "$HERE/check_load.py" --dir "$OUT/share" --requester a --responder b || rc=1
exit $rc
