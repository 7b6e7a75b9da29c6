#!/usr/bin/env bash
# e2e-fleet.sh [-t SEC]  --  peer probes between three real kernels on one
# L2 segment, and the fleet rules on what they report.
#
# Boots three Soft-RoCE VMs (tests/vm/README.md), A 10.0.2.15, B 10.0.2.16,
# C 10.0.2.17, rxe0 on each, whose eth0s hang off a learning switch on the
# host (tests/vm/hub.py: qemu `dgram` netdevs over unix datagram sockets, a
# pcap of the segment, an injection socket). Each runs its own exporter
# probing the other two; guest/e2e-fleet.sh walks them through the phases
# (C's exporter stopped; A's RoCE traffic dropped on A; loss on the A-B path
# only; a forged probe; a flood of probes forged in B's name, 1,000 a second
# for 10 s; probes forged in the name of a third party that never asked:
# all injected by this script with tests/vm/forge.py when A asks for them).
# Then tests/vm/check_fleet.py judges what the three wrote, the capture
# (ToS byte and sizes of the probes, the datagrams the forged probes drew,
# B's real probes to A answered under the flood, A's total echo rate, no
# datagram to the third party nor to the hostile addresses of a document
# A reads) and the fleet alerts of alerts/ (promtool) on the scraped series
# of each phase.
#
# Beside the phases, the host plays the switch's LLDP on A's port
# (tests/vm/lldp_switch.py through the hub's SOCKS/own-a: frames built byte
# by byte, PFC on priority 4 and DSCP 26 -> 4, while A expects priority 3):
# A's exporter, capturing, must report the neighbour, the switch's PFC and
# APP and switch_pfc_mismatch; then, as A asks, the port ID changes
# (lldp_neighbor_changed) and a switch of another rail answers
# (lldp_rail_mismatch, expect.rails). tests/vm/check_lldp.py judges it
# (check_fleet.py runs its checks with its own).
#
# Options:
#   -t, --timeout SEC   limit for each VM run (default 600); the guests keep
#                       their own budget 30 s below it
# Environment:
#   ROCE_VM_DIR=DIR         image cache (default /tmp/roce-exporter-vm)
#   ROCE_EXPORTER_BIN=FILE  use this binary instead of `cargo build --release`
#   E2E_OUT=DIR             where the files go (default target/vm-e2e-fleet):
#                           share/{a,b,c,ctl}/, the consoles {a,b,c}.log, the
#                           capture wire.pcap, hub-stats.json, forged.json,
#                           flood.json, third.json, lldp-sent.json
# Exit status: 0 when every check passed; 1 when a check failed; 2 on usage or
# build errors.  The last line printed is "N passed, M failed".
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
log() { printf '[e2e-fleet] %s\n' "$*" >&2; }
. "$HERE/host.sh"   # timeout_args, e2e_prepare

timeout_args 600 "$@"
((TIMEOUT > 120)) || { log "-t must exceed 120"; exit 2; }

e2e_prepare vm-e2e-fleet

rm -rf "$OUT"; mkdir -p "$OUT/share/a" "$OUT/share/b" "$OUT/share/c" "$OUT/share/ctl"
. "$HERE/load.sh"; load_prepare "$OUT/share" || exit 2   # the load test's credentials
# unix socket paths are limited to 107 bytes: keep them short, outside OUT
SOCKS=$(mktemp -d "${TMPDIR:-/tmp}/roce-hub.XXXXXX")
declare -A PID=()
HUB=""
LLDP=""
cleanup() {
  local p
  # run.sh kills its qemu on TERM
  for p in "${PID[@]}"; do kill "$p" 2>/dev/null || true; done
  [[ -n $LLDP ]] && { kill "$LLDP" 2>/dev/null; wait "$LLDP" 2>/dev/null; } || true
  [[ -n $HUB ]] && { kill "$HUB" 2>/dev/null; wait "$HUB" 2>/dev/null; } || true
  rm -rf "$SOCKS"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

python3 "$HERE/hub.py" --dir "$SOCKS" --ports a,b,c --pcap "$OUT/wire.pcap" \
  --stats "$OUT/hub-stats.json" &
HUB=$!
for _ in $(seq 50); do [[ -S $SOCKS/inject ]] && break; sleep 0.1; done
[[ -S $SOCKS/inject ]] || { log "the hub did not start"; exit 2; }
# the switch's LLDP out of A's port, one frame a second (a switch sends one
# every 30 s; the TTL, 120 s, is a switch's default)
python3 "$HERE/lldp_switch.py" --inject "$SOCKS/own-a" --ctl "$OUT/share/ctl" \
  --out "$OUT/lldp-sent.json" &
LLDP=$!

# vm ROLE IP MAC_PREFIX: one VM in the background (its run.sh in PID[ROLE]),
# its lines prefixed with the role
vm() {
  local role=$1 ip=$2 mac=$3
  bash "$HERE/run.sh" -q -t "$TIMEOUT" --smp 2 --mem 384 --share "$OUT/share" \
    -l "$OUT/$role.log" --wire "$SOCKS/$role:$SOCKS/hub-$role" --mac-prefix "$mac" \
    --append "sr.ip0=$ip/24 fleet.role=$role fleet.budget=$((TIMEOUT - 30))" \
    -a "$BIN:/guest/roce_exporter" $(load_add) "$VM" "$HERE/guest/e2e-fleet.sh" \
    > >(sed -u "s/^/[$role] /") 2>&1 &
  PID[$role]=$!
}
log "three VMs on one segment (limit ${TIMEOUT}s each)"
T0=$SECONDS
vm a 10.0.2.15 52:54:00:00:00
vm b 10.0.2.16 52:54:00:00:01
vm c 10.0.2.17 52:54:00:00:02

# A asks for the forged probe (ctl/want-forge): to A's responder, in the
# name of B's, from the endpoint documents they published
CTL=$OUT/share/ctl
running() { local p; for p in "${PID[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
# forge WANT DONE OUT ARGS...: when A asks (ctl/WANT), forged probes to A's
# responder (forge.py ARGS), then ctl/DONE
forge() {
  local want=$1 done=$2 out=$3; shift 3
  [[ -e $CTL/$want && ! -e $CTL/$done ]] || return 0
  local to as
  to=$(ls "$OUT"/share/a/own-endpoints-*.json 2>/dev/null | sort -V | tail -1)
  as=$(ls "$OUT"/share/b/own-endpoints-*.json 2>/dev/null | sort -V | tail -1)
  if [[ -n $to && -n $as ]] && python3 "$HERE/forge.py" --inject "$SOCKS/inject" \
      --to "$to" --to-mac 52:54:00:00:00:01 --as "$as" --out "$OUT/$out" "$@"; then
    date +%s > "$CTL/$done"
  else
    log "no forged probes ($want): endpoint documents of A and B missing or unusable"
    echo none > "$CTL/$done"
  fi
}
while running; do
  forge want-forge forged forged.json
  # 1,000 a second for 10 s in B's name
  forge want-flood flooded flood.json --count 10000 --rate 1000
  # 100 a second for 3 s in the name of 10.0.2.99, on the segment's subnet,
  # never a peer, never probing
  forge want-third thirded third.json --as-ip 10.0.2.99 --as-qpn 4242 --count 300 --rate 100
  sleep 0.2
done
declare -A RC=()
for role in a b c; do
  set +e; wait "${PID[$role]}"; RC[$role]=$?; set -e
  unset "PID[$role]"
done
kill "$LLDP" 2>/dev/null; wait "$LLDP" 2>/dev/null || true; LLDP=""
kill "$HUB" 2>/dev/null; wait "$HUB" 2>/dev/null || true; HUB=""
log "three VMs done in $((SECONDS - T0)) s"
for role in a b c; do
  sed "s/^/[$role steps] /" "$OUT/share/$role/steps.txt" 2>/dev/null || true
done
set +e
python3 "$HERE/check_fleet.py" --dir "$OUT" --rc "a=${RC[a]}" --rc "b=${RC[b]}" --rc "c=${RC[c]}"; rc=$?
python3 "$HERE/check_load.py" --dir "$OUT/share" --requester a --responder b --rails 2 || rc=1
exit $rc
