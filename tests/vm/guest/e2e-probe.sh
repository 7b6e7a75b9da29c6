#!/bin/bash
# Guest side of tests/vm/e2e-probe.sh: the exporter's verbs probes against
# the VM's real Soft-RoCE (rxe0). Collects, does not judge: the host-side
# tests/vm/check_probe.py reads everything written to /mnt/host.
#
# Phases (each a fresh exporter, probes every 1 s, samples every 1 s):
#   good      >= 32 s of probes with gid_index auto; rdma statistic and
#             rdma resource read before, during and after (the exporter
#             stopped, so every probe request it counted is in the kernel's)
#   badgid    gid_index 77 (an empty slot): failures with reason gid_index
#             while samples keep coming
#   portdown  probes succeed, eth0 goes down (failures: port_down), eth0 up
#             again (probes recover, resources recreated, counts flat)
#   unpriv    as nobody: uverbs node 0600 (device_open naming the node and
#             the permission), then memlock limit 0 (memlock); RDMA netlink
#             statistics and the netdev source work unprivileged
#   bench     CPU and RSS of the exporter over the same window, probes off
#             then on; ib_send_lat / ibv_rc_pingpong loopback latency
set -u
O=/mnt/host
grep -q ' /mnt/host ' /proc/mounts || { echo "no --share mounted at /mnt/host"; exit 2; }
EXP=/guest/roce_exporter
ADDR=127.0.0.1:9879
DEV=rxe0
P=/sys/class/infiniband/$DEV/ports/1
TMO=60

step() { echo "[probe $(cut -d' ' -f1 /proc/uptime)] $*"; }
scrape() { curl -sS -f --max-time 10 -o "$O/$1" "http://$ADDR/metrics"; }
res() { rdma resource show > "$O/$1" 2>&1; }
kstat() { rdma statistic show link $DEV/1 > "$O/$1" 2>&1; }
# metric NAME_REGEX FILE: first value of a sample line matching the regex
metric() { awk -v re="$1" '$0 ~ re && $1 !~ /^#/ { print $NF; exit }' "$O/$2"; }
# wait_metric REGEX MIN NAME: scrape into NAME until the sample is >= MIN
wait_metric() {
  local re=$1 min=$2 name=$3 v deadline=$((SECONDS + TMO))
  while ((SECONDS < deadline)); do
    if scrape "$name"; then
      v=$(metric "$re" "$name")
      [[ -n $v ]] && awk -v a="$v" -v b="$min" 'BEGIN { exit !(a >= b) }' && return 0
    fi
    sleep 0.5
  done
  echo "timeout waiting for $re >= $min"; return 1
}
start() { # start CONFIG_NAME: runs the exporter with /tmp/CONFIG_NAME.yml
  "$EXP" --config.file=/tmp/$1.yml --web.listen-address=$ADDR --log.level=debug \
    > "$O/$1.log" 2>&1 &
  EPID=$!
  answering
}
answering() { # until the exporter EPID answers /healthz (TMO s at most)
  local deadline=$((SECONDS + TMO))
  until curl -sS -f --max-time 2 -o /dev/null "http://$ADDR/healthz" 2>/dev/null; do
    ((SECONDS < deadline)) && kill -0 $EPID 2>/dev/null || { echo "exporter did not start"; return 1; }
    sleep 0.2
  done
}
stop() {
  kill -TERM $EPID 2>/dev/null
  local deadline=$((SECONDS + 20))
  while ((SECONDS < deadline)) && kill -0 $EPID 2>/dev/null; do sleep 0.1; done
  kill -KILL $EPID 2>/dev/null
  wait $EPID 2>/dev/null
  echo "exit=$?" >> "$O/steps.txt"
}
cpu_ticks() { awk '{ print $14 + $15 }' /proc/$EPID/stat; }
rss_kib() { awk '/^VmRSS/ { print $2 }' /proc/$EPID/status; }

: > "$O/steps.txt"
env | grep '^SR_' | sort > "$O/env.txt"
echo "CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)" >> "$O/env.txt"
echo "MEMLOCK=$(ulimit -l)" >> "$O/env.txt"
for g in 0 1; do echo "gid.$g=$(cat $P/gids/$g)"; done >> "$O/env.txt"

cat > /tmp/good.yml <<EOF
sample_interval: 1s
probes: {enabled: true, interval: 1s, gid_index: auto}
EOF
cat > /tmp/badgid.yml <<EOF
sample_interval: 1s
probes: {enabled: true, interval: 1s, gid_index: 77}
EOF
cat > /tmp/off.yml <<EOF
sample_interval: 1s
probes: {enabled: false}
EOF
cp /tmp/good.yml /tmp/portdown.yml
cp /tmp/good.yml /tmp/on.yml

# ---- good: >= 32 s of probes
step "phase good"
res res-0.txt; kstat stat-0.txt
start good || exit 3
wait_metric '^roce_probe_requests_total' 1 good-first.prom || exit 3
res res-good-early.txt
t0=$SECONDS
i=0
while ((SECONDS - t0 < 32)); do
  sleep 3; i=$((i + 1))
  scrape "good-$i.prom"; res "res-good-$i.txt"
done
scrape good-last.prom
stop
kstat stat-1.txt; res res-good-stopped.txt
echo "good_seconds=$((SECONDS - t0)) scrapes=$i" >> "$O/steps.txt"

# ---- badgid: a GID index that does not exist
step "phase badgid"
start badgid || exit 3
wait_metric '^roce_probe_failures_total.*reason="gid_index"' 3 badgid.prom
sleep 2; scrape badgid-2.prom
stop

# ---- portdown: eth0 down, then up again
step "phase portdown"
start portdown || exit 3
wait_metric '^roce_probe_requests_total' 2 portdown-before.prom
res res-portdown-before.txt
ip link set eth0 down
step "eth0 down: $(cat $P/state)"
wait_metric '^roce_probe_failures_total.*reason="port_down"' 2 portdown-down.prom
cat $P/state > "$O/state-down.txt"
res res-portdown-down.txt
ip link set eth0 up
for _ in $(seq 100); do grep -q ACTIVE $P/state && break; sleep 0.2; done
step "eth0 up: $(cat $P/state)"
cat $P/state > "$O/state-up.txt"
# recovered: successes beyond what they were when the port went down
down_ok=$(metric '^roce_probe_success\{' portdown-down.prom)
ok_before=$(awk '/^roce_probe_rtt_seconds_count/ { print $NF; exit }' "$O/portdown-down.prom")
wait_metric '^roce_probe_rtt_seconds_count' $((ok_before + 3)) portdown-up.prom
res res-portdown-up.txt
stop
res res-portdown-stopped.txt
echo "down_success_gauge=$down_ok" >> "$O/steps.txt"

# ---- unpriv: the exporter as nobody (docs/security.md). RDMA netlink
# statistics and sysfs need no privilege; the probes need rw access to the
# uverbs node and a memlock limit, and each refusal must name which.
step "phase unpriv"
NODE=$(ls /dev/infiniband/uverbs* 2>/dev/null | head -1)
MODE=$(stat -c %a "$NODE" 2>/dev/null)
echo "uverbs=$NODE mode=$MODE" >> "$O/steps.txt"
cp /tmp/good.yml /tmp/unpriv-node.yml; cp /tmp/good.yml /tmp/unpriv-memlock.yml
chmod 644 /tmp/unpriv-*.yml
start_nobody() { # start_nobody CONFIG_NAME MEMLOCK_KIB: start(), as uid 65534
  su -s /bin/sh nobody -c "ulimit -l $2; exec $EXP --config.file=/tmp/$1.yml --web.listen-address=$ADDR --log.level=debug" \
    > "$O/$1.log" 2>&1 &
  EPID=$!
  answering
}
chmod 0600 "$NODE"
start_nobody unpriv-node 8192 || exit 3
wait_metric '^roce_probe_failures_total.*reason="device_open"' 1 unpriv-node.prom
stop
chmod 0666 "$NODE"
start_nobody unpriv-memlock 0 || exit 3
wait_metric '^roce_probe_failures_total.*reason="memlock"' 1 unpriv-memlock.prom
stop
chmod "${MODE:-666}" "$NODE"

# ---- bench: the same window with probes off, then on
if [ -f /guest/no-bench ]; then
  step "done (bench phase skipped)"
  exit 0
fi
step "phase bench"
for mode in off on; do
  start $mode || exit 3
  sleep 3
  c0=$(cpu_ticks); s0=$SECONDS
  sleep 20
  c1=$(cpu_ticks); s1=$SECONDS
  echo "bench.$mode ticks=$((c1 - c0)) seconds=$((s1 - s0)) rss_kib=$(rss_kib)" >> "$O/bench.txt"
  [[ $mode == on ]] && scrape bench-on.prom
  stop
done
# baseline latency on the same device and GID
g=${SR_GID0:-1}
if command -v ib_send_lat >/dev/null; then
  timeout 60 ib_send_lat -d $DEV -x $g -n 200 > "$O/ib_send_lat-server.txt" 2>&1 &
  sleep 1
  timeout 60 ib_send_lat -d $DEV -x $g -n 200 127.0.0.1 > "$O/ib_send_lat.txt" 2>&1
  wait
fi
timeout 60 ibv_rc_pingpong -d $DEV -g $g -n 200 > "$O/pingpong-server.txt" 2>&1 &
sleep 1
timeout 60 ibv_rc_pingpong -d $DEV -g $g -n 200 127.0.0.1 > "$O/pingpong.txt" 2>&1
wait
step "done"
exit 0
