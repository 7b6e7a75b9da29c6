#!/bin/bash
# Guest side of tests/vm/e2e-fleet.sh: one of three Soft-RoCE VMs (A, B, C)
# on one emulated L2 segment (the host's tests/vm/hub.py), each running its
# own exporter with peer probes to the other two. Collects, does not judge:
# tests/vm/check_fleet.py reads what lands in /mnt/host/<role>/.
#
# The kernel command line says which side this is: fleet.role=a|b|c. All
# three walk the same phases; at the end of each, every side scrapes
# (/metrics, /findings) into <phase>.prom and <phase>-findings.json, and
# waits for the other two (a barrier: files in /mnt/host/ctl):
#   up          answers from both peers (small and large)
#   c-stopped   C stops its exporter; A and B wait for peer_unreachable
#               naming node-c
#   c-back      C starts a new exporter (a new QPN); all wait until every
#               pair passes again
#   a-dropped   A drops its own RoCE traffic (tc: UDP to 4791 leaving eth0
#               lost); A waits for port_isolated, B and C for
#               peer_unreachable naming node-a; then A lets it through and
#               all wait until every pair passes again (a-clean)
#   ab-lossy    A loses half of its RoCE traffic to B only (tc: a netem band
#               for B's address and UDP 4791); A and B wait for path_loss
#               naming the other; then clean again (ab-clean)
#   forge       A asks the host (ctl/want-forge) to inject a forged probe to
#               A's responder in the name of B's responder; all wait 12 s
#               (the host counts the datagrams carrying it on the wire)
#   flood       A asks (ctl/want-flood) for 10,000 probes forged in B's
#               name at 1,000 a second; B goes on probing A meanwhile (the
#               host's capture tells whether A still answers B, and A's
#               total echo rate)
#   third       A asks (ctl/want-third) for 300 probes forged in the name
#               of 10.0.2.99, an address of the segment that never asked
#               (A must send it nothing)
# A also lists two peers of its own making, served on its loopback by
# busybox httpd: one whose document holds hostile addresses (the subnet's
# broadcast and network addresses, off the fabric, documentation,
# multicast, link-local: each refused with its reason, never probed), and
# an impostor at 127.0.0.2 claiming node-b with a responder of its own;
# A's /etc/hosts says node-b is 10.0.2.16, so the real node-b keeps the
# name and is probed throughout, both claims reported.
# Beside the phases, on A only, the LLDP walk: the host sends a switch
# port's LLDP on A's wire (tests/vm/lldp_switch.py); A's exporter captures
# it (lldp.mode capture; root, so CAP_NET_RAW). A waits for each state and
# scrapes it as lldp-<state>, then asks the host for the next
# (ctl/want-lldp-moved, ctl/want-lldp-rails):
#   switch      the neighbour leaf-p1-r0 swp1, its PFC (4) and APP (26 -> 4),
#               and switch_pfc_mismatch (A expects priority 3)
#   moved       the port ID swp2: lldp_neighbor_changed
#   rails       leaf-p1-r1, rail 1's switch: lldp_rail_mismatch
# B and C capture too and hear nothing (the hub filters LLDP's group
# address and sends the switch's frames to A only).
# The control files do not ride the wire the phases break. Every wait is
# bounded by its own limit and by the run's budget (fleet.budget=SEC), so a
# side that never gets there makes the run end early with the files so far.
set -u
arg() { sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" /proc/cmdline; }
ROLE=$(arg fleet.role)
declare -A IP=([a]=10.0.2.15 [b]=10.0.2.16 [c]=10.0.2.17)
[[ -n ${IP[$ROLE]:-} ]] || { echo "need fleet.role=a|b|c on the kernel command line"; exit 2; }
grep -q ' /mnt/host ' /proc/mounts || { echo "no --share mounted at /mnt/host"; exit 2; }
OTHERS=()
for r in a b c; do [[ $r != "$ROLE" ]] && OTHERS+=("$r"); done
O=/mnt/host/$ROLE
C=/mnt/host/ctl
mkdir -p "$O" "$C"
EXP=/guest/roce_exporter
PORT=9879
LOCAL=http://127.0.0.1:$PORT
BUDGET=$(arg fleet.budget)
DEADLINE=$((SECONDS + ${BUDGET:-400}))

now() { cut -d' ' -f1 /proc/uptime; }
step() { echo "[fleet-$ROLE $(now)] $*"; echo "$(now) $*" >> "$O/steps.txt"; }
left() { local l=$((DEADLINE - SECONDS)); ((l < $1)) && echo $((l > 0 ? l : 0)) || echo "$1"; }
# until_ok SEC CMD...: true once CMD is, tried every 0.5 s
until_ok() {
  local sec=$1; shift
  local end=$((SECONDS + $(left "$sec")))
  while ((SECONDS < end)); do
    "$@" && return 0
    sleep 0.5
  done
  return 1
}
# barrier NAME SEC: this side is at NAME; wait for the other two
barrier() {
  now > "$C/$1-$ROLE"
  local end=$((SECONDS + $(left "$2"))) r all
  while ((SECONDS < end)); do
    all=1
    for r in "${OTHERS[@]}"; do [[ -e $C/$1-$r ]] || all=0; done
    ((all)) && { step "barrier $1"; return 0; }
    [[ -e $C/end ]] && { step "end while at barrier $1"; return 2; }
    sleep 0.2
  done
  step "timeout at barrier $1"; return 1
}
metrics() { curl -sS -f --max-time 5 "$LOCAL/metrics" 2>/dev/null; }
findings() { curl -sS -f --max-time 5 "$LOCAL/findings" 2>/dev/null; }
scrape() { curl -sS -f --max-time 5 -o "$O/$1.prom" "$LOCAL/metrics"; curl -sS -f --max-time 5 -o "$O/$1-findings.json" "$LOCAL/findings"; }
# lost PEER: the lost ones of the last small probes to node-PEER ("" when none judged yet)
lost() { metrics | awk -v p="peer=\"node-$1\"" '$1 ~ /^roce_peer_probe_peer_lost\{/ && index($1, p) && index($1, "size=\"small\"") { print $NF; exit }'; }
answered() { metrics | grep "^roce_peer_probe_answered_total{.*size=\"$1\"" | awk '{ s += $NF } END { print s + 0 }'; }
# a finding of RULE whose text names node-PEER (or any, without PEER): one
# line per finding, each from its "rule" key (the first of a finding)
has_finding() {
  findings | tr -d '\n' | awk '{ gsub(/"rule"/, "\n\"rule\""); print }' \
    | grep "\"rule\": *\"$1\"" | grep -q "${2:+node-$2 }"
}
# every pair of this side passes: its last small probes to each peer lost at most one
clean() {
  local r l
  for r in "${OTHERS[@]}"; do
    l=$(lost "$r"); [[ -n $l ]] && awk -v l="$l" 'BEGIN { exit !(l <= 1) }' || return 1
  done
}
# clean, and still 5 s later: a peer restarted or a fault just lifted
# leaves the losses of the probes before in the last 16 for a while
steady() { clean && sleep 5 && clean; }
answers() { steady && [[ $(answered small) -ge 20 && $(answered large) -ge 20 ]]; }
active_mtu() { ibv_devinfo -d rxe0 | awk '/active_mtu:/ { print $2; exit }'; }

EPID=""
NSTART=0
start() {
  NSTART=$((NSTART + 1))
  "$EXP" --config.file=/tmp/fleet.yml --web.listen-address=0.0.0.0:$PORT --log.level=debug \
    > "$O/exporter-$NSTART.log" 2>&1 &
  EPID=$!
  local end=$((SECONDS + 60))
  until curl -sS -f --max-time 2 -o /dev/null "$LOCAL/healthz" 2>/dev/null; do
    ((SECONDS < end)) && kill -0 $EPID 2>/dev/null || { step "exporter did not start"; return 1; }
    sleep 0.2
  done
  step "exporter $NSTART up, pid $EPID"
  until_ok 20 own_endpoint "$NSTART"
  step "own endpoints $NSTART: $(tr -d '\n' < "$O/own-endpoints-$NSTART.json" | head -c 300)"
}
own_endpoint() {
  curl -sS --max-time 5 -o "$O/own-endpoints-$1.json" "$LOCAL/peer-probe/endpoints" 2>/dev/null
  grep -q '"qpn"' "$O/own-endpoints-$1.json" 2>/dev/null
}
stop() {
  kill -TERM "$EPID" 2>/dev/null
  local end=$((SECONDS + 20))
  while ((SECONDS < end)) && kill -0 "$EPID" 2>/dev/null; do sleep 0.1; done
  kill -KILL "$EPID" 2>/dev/null
  wait "$EPID" 2>/dev/null
  step "exporter $NSTART stopped, exit $?"
  EPID=""
}
# RoCE leaving eth0 for DST (an address, or 0.0.0.0/0 for all) into a
# netem band losing PCT percent; everything else in band 1 untouched
tc_loss() {
  local dst=$1 pct=$2
  {
    tc qdisc add dev eth0 root handle 1: prio bands 3 priomap 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
    tc qdisc add dev eth0 parent 1:3 handle 30: netem loss "$pct%"
    tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst "$dst" \
      match ip protocol 17 0xff match ip dport 4791 0xffff flowid 1:3
    echo "rc=$?"; tc -s qdisc show dev eth0; tc filter show dev eth0
  } >> "$O/tc.txt" 2>&1
  step "tc: RoCE to $dst loses $pct%"
}
tc_clear() { tc qdisc del dev eth0 root >> "$O/tc.txt" 2>&1; step "tc: cleared"; }
finish() {
  lldp_done
  scrape final
  [[ -n $EPID ]] && stop
  rdma statistic show link rxe0/1 > "$O/rdma-stat.txt" 2>&1
  { ip -s link show eth0; tc -s qdisc show dev eth0; echo "active_mtu=$(active_mtu)"; } > "$O/link.txt" 2>&1
  dmesg | tail -80 > "$O/dmesg.txt"
  step "done"
  exit 0
}
# The LLDP walk (A, in the background): the neighbour whose port ID and
# system name are $1 and $2 is the current one on eth0
neighbour() {
  metrics | grep '^roce_lldp_neighbor_info{' | grep 'netdev="eth0"' | grep "port_id=\"$1\"" \
    | grep -q "system_name=\"$2\""
}
lldp_state() { neighbour "$1" "$2" && has_finding "$3"; }
lldp_walk() {
  local state port name rule want
  for state in "switch swp1 leaf-p1-r0 switch_pfc_mismatch -" \
      "moved swp2 leaf-p1-r0 lldp_neighbor_changed want-lldp-moved" \
      "rails swp1 leaf-p1-r1 lldp_rail_mismatch want-lldp-rails"; do
    read -r state port name rule want <<< "$state"
    [[ $want != - ]] && now > "$C/$want"
    if until_ok 60 lldp_state "$port" "$name" "$rule"; then step "lldp $state: seen"
    else step "lldp $state: not seen"; fi
    scrape "lldp-$state"
  done
}
LWALK=""
# waits (bounded) for the walk, then stops it
lldp_done() {
  [[ -n $LWALK ]] || return 0
  local end=$((SECONDS + 30))
  while ((SECONDS < end)) && kill -0 "$LWALK" 2>/dev/null; do sleep 0.2; done
  kill "$LWALK" 2>/dev/null; wait "$LWALK" 2>/dev/null
  LWALK=""
}
# phase NAME SEC CMD...: wait (bounded) for CMD, scrape as NAME, barrier
phase() {
  local name=$1 sec=$2; shift 2
  if [[ $# -eq 0 ]] || until_ok "$sec" "$@"; then step "$name: seen"; else step "$name: not seen"; fi
  scrape "$name"
  barrier "$name" $((sec + 60)) || finish
}

# the load test's steps (guest/load.sh), run at the end
. /guest/load.sh

hostname "node-$ROLE"
peers=""
for r in "${OTHERS[@]}"; do peers+="${peers:+, }${IP[$r]}:$PORT"; done
# endpoint DIR NODE GID QPN: one endpoint of a document (wire version 2)
endpoint() {
  printf '{"node":"%s","device":"rxe0","device_index":0,"port":1,"gid":"::ffff:%s","gid_index":1,"qpn":%s,"qkey":1380994353,"mtu":1024,"incarnation":1,"wire":2}' "$1" "$2" "$3"
}
if [[ $ROLE == a ]]; then
  # the hostile document and the impostor, on A's loopback
  mkdir -p /tmp/hostile/peer-probe /tmp/impostor/peer-probe
  eps=""
  qpn=100
  for gid in 10.0.2.255 10.0.2.0 192.168.77.7 192.0.2.9 224.0.0.9 169.254.9.9; do
    eps+="${eps:+,}$(endpoint node-x "$gid" "$qpn")"; qpn=$((qpn + 1))
  done
  echo "{\"version\":3,\"endpoints\":[$eps]}" > /tmp/hostile/peer-probe/endpoints
  echo "{\"version\":3,\"endpoints\":[$(endpoint node-b 10.0.2.50 4242)]}" > /tmp/impostor/peer-probe/endpoints
  busybox httpd -p 127.0.0.1:9901 -h /tmp/hostile
  busybox httpd -p 127.0.0.2:9902 -h /tmp/impostor
  cp /tmp/hostile/peer-probe/endpoints "$O/hostile-document.json"
  cp /tmp/impostor/peer-probe/endpoints "$O/impostor-document.json"
  # what proves node-b: its name resolves to the real one's address
  printf '127.0.0.1 localhost\n10.0.2.15 node-a\n10.0.2.16 node-b\n10.0.2.17 node-c\n' > /etc/hosts
  echo 'hosts: files' > /etc/nsswitch.conf
  peers+=", 127.0.0.1:9901, 127.0.0.2:9902"
fi
cat > /tmp/fleet.yml <<EOF
sample_interval: 1s
# the loopback probe is another test's (e2e-probe.sh)
probes: {enabled: false}
# the traffic class NCCL's jobs use (NCCL_IB_TC=106: DSCP 26, ECT(0)):
# the probes are to ride it
# and their priority 3, where the switch of the LLDP walk has PFC on 4;
# rail k's leaf is named leaf-<pod>-r<k>
expect:
  nccl_ib_tc: 106
  pfc_priority: 3
  rails: {switch_pattern: "leaf-*-r{rail}"}
# the switch's LLDP frames on eth0, captured (the guest runs as root)
lldp: {mode: capture}
peer_probes:
  enabled: true
  peers: [$peers]
  packets_per_second: 50
  timeout: 500ms
  refresh: 5s
rules:
  hold: 1s
EOF
cp /tmp/fleet.yml "$O/config.yml"
: > "$O/steps.txt"
{ env | grep '^SR_' | sort; echo "role=$ROLE node=$(hostname) mac=$(cat /sys/class/net/eth0/address)"
  echo "gid=$(cat /sys/class/infiniband/rxe0/ports/1/gids/${SR_GID0:-1})"; echo "active_mtu=$(active_mtu)"; } > "$O/env.txt"
step "start, kernel $(uname -r)"

# ---- the segment: the others may still be booting
for r in "${OTHERS[@]}"; do
  if until_ok 90 ping -c 1 -W 1 "${IP[$r]}" >/dev/null 2>&1; then step "wire: ${IP[$r]} answers"
  else step "wire: ${IP[$r]} never answered"; fi
done
start || { now > "$C/failed-$ROLE"; finish; }
[[ $ROLE == a ]] && { lldp_walk & LWALK=$!; }

phase up 90 answers
step "answers: small $(answered small), large $(answered large)"

# (a) C's exporter stopped
[[ $ROLE == c ]] && stop
case $ROLE in
  c) phase c-stopped 90 ;;
  *) phase c-stopped 90 has_finding peer_probe_peer_unreachable c ;;
esac
[[ $ROLE == c ]] && { start || { now > "$C/failed-$ROLE"; finish; }; }
phase c-back 90 steady

# (b) A's RoCE traffic dropped on A
[[ $ROLE == a ]] && tc_loss 0.0.0.0/0 100
case $ROLE in
  a) phase a-dropped 90 has_finding peer_probe_port_isolated ;;
  *) phase a-dropped 90 has_finding peer_probe_peer_unreachable a ;;
esac
[[ $ROLE == a ]] && tc_clear
phase a-clean 90 steady

# (c) loss on the A-B path only
[[ $ROLE == a ]] && tc_loss "${IP[b]}/32" 50
case $ROLE in
  a) phase ab-lossy 90 has_finding peer_probe_path_loss b ;;
  b) phase ab-lossy 90 has_finding peer_probe_path_loss a ;;
  c) phase ab-lossy 90 ;;
esac
[[ $ROLE == a ]] && tc_clear
phase ab-clean 90 steady

# (d) a forged probe: the host injects it, everyone waits while the host's
# capture counts what it draws
if [[ $ROLE == a ]]; then
  now > "$C/want-forge"
  until_ok 30 test -e "$C/forged" && step "forged probe injected" || step "no forged probe"
fi
until_ok 40 test -e "$C/forged"
sleep 12
scrape forge
barrier forge 60 || finish

# (e) a flood of probes forged in B's name while B probes A
scrape flood-before
[[ $ROLE == a ]] && now > "$C/want-flood"
if until_ok 60 test -e "$C/flooded"; then step "flood injected"; else step "no flood"; fi
sleep 3
scrape flood
barrier flood 60 || finish

# (f) probes forged in the name of a third party
scrape third-before
[[ $ROLE == a ]] && now > "$C/want-third"
if until_ok 40 test -e "$C/thirded"; then step "third-party probes injected"; else step "no third-party probes"; fi
sleep 3
scrape third
barrier third 60
load_fleet
[[ $ROLE == a ]] && now > "$C/end"
finish
