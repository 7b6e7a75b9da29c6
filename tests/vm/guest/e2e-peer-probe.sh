#!/bin/bash
# Guest side of tests/vm/e2e-peer-probe.sh: the peer probes' UD verbs layer
# on the VM's real Soft-RoCE (rxe0, one port). Collects, does not judge:
# tests/vm/check_peer_probe.py reads what is written to /mnt/host.
#
# One VM has one RoCE port, so the peers are exporters on the same port:
# each opens its own UD queue pair on rxe0 (its own QPN), and the probes go
# through the rxe stack (UD send, address handle with GRH, the IPv4/UDP
# encapsulation of RoCE v2, the receive with its GRH) to the other's QP.
#   A (:9879) and B (:9880) list each other as peers;
#   C (:9881) lists A, but A does not list C: A never answers C and
#   counts its probes as not admitted; C sees them lost;
#   B is stopped (A loses its probes) and started again with new QPNs: A
#   must recover without a restart (the re-fetch after failures).
set -u
O=/mnt/host
grep -q ' /mnt/host ' /proc/mounts || { echo "no --share mounted at /mnt/host"; exit 2; }
EXP=/guest/roce_exporter
TMO=60
step() { echo "[peer $(cut -d' ' -f1 /proc/uptime)] $*" | tee -a "$O/steps.txt"; }
: > "$O/steps.txt"
hostname peer-vm 2>/dev/null || echo peer-vm > /proc/sys/kernel/hostname

conf() { # conf NAME PEERS...
  local name=$1; shift
  local list; list=$(printf '"%s",' "$@"); list=${list%,}
  cat > /tmp/$name.yml <<EOF
sample_interval: 1s
probes: {enabled: false}
peer_probes:
  enabled: true
  peers: [$list]
  packets_per_second: 20
  sample: 8
  timeout: 200ms
  refresh: 60s
EOF
}
declare -A PID
start() { # start NAME PORT
  "$EXP" --config.file=/tmp/$1.yml --web.listen-address=127.0.0.1:$2 --log.level=debug \
    >> "$O/$1.log" 2>&1 &
  PID[$1]=$!
  local deadline=$((SECONDS + TMO))
  until curl -sS -f --max-time 2 -o /dev/null "http://127.0.0.1:$2/healthz" 2>/dev/null; do
    ((SECONDS < deadline)) && kill -0 ${PID[$1]} 2>/dev/null || { step "$1 did not start"; return 1; }
    sleep 0.2
  done
  # The responder is up once the endpoints route answers 200.
  until curl -sS -f --max-time 2 -o /dev/null "http://127.0.0.1:$2/peer-probe/endpoints" 2>/dev/null; do
    ((SECONDS < deadline)) || { step "$1 published no endpoint"; return 1; }
    sleep 0.2
  done
  step "started $1 on :$2 pid ${PID[$1]}"
}
stop() {
  kill -TERM ${PID[$1]} 2>/dev/null
  local deadline=$((SECONDS + 20))
  while ((SECONDS < deadline)) && kill -0 ${PID[$1]} 2>/dev/null; do sleep 0.1; done
  kill -KILL ${PID[$1]} 2>/dev/null
  wait ${PID[$1]} 2>/dev/null
  step "stopped $1 exit=$?"
}
grab() { # grab NAME PORT TAG
  curl -sS --max-time 10 -o "$O/$1-$3.prom" "http://127.0.0.1:$2/metrics"
  curl -sS --max-time 10 -o "$O/$1-$3.endpoints.json" "http://127.0.0.1:$2/peer-probe/endpoints"
}

ip -o addr show dev eth0 > "$O/ip.txt"
rdma link show >> "$O/ip.txt" 2>&1
cat /sys/class/infiniband/rxe0/ports/1/gids/1 >> "$O/ip.txt"

conf A 127.0.0.1:9880
conf B 127.0.0.1:9879
conf C 127.0.0.1:9879
start A 9879 || exit 1
start B 9880 || exit 1
start C 9881 || exit 1
step "probing for 25 s"
sleep 25
grab A 9879 run; grab B 9880 run; grab C 9881 run
rdma resource show qp > "$O/qp.txt" 2>&1

step "B stopped"
stop B
sleep 10
grab A 9879 bdown
step "B started again (new QPN)"
start B 9880 || exit 1
grab B 9880 restarted
sleep 25
grab A 9879 recovered; grab B 9880 recovered
stop A; stop B; stop C
# The UD round trip of rdma-core's own example on the same port and GID,
# the floor the peer probes' RTT is read against (in a TCG VM, mostly the
# emulation's cost).
step "ibv_ud_pingpong baseline"
timeout 60 ibv_ud_pingpong -d rxe0 -g 1 -n 200 -s 64 > "$O/ud-pingpong-server.txt" 2>&1 &
sleep 1
timeout 60 ibv_ud_pingpong -d rxe0 -g 1 -n 200 -s 64 127.0.0.1 > "$O/ud-pingpong.txt" 2>&1
wait
step "done"
