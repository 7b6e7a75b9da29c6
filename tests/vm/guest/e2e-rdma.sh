#!/bin/bash
# Guest side of tests/vm/e2e.sh: runs roce_exporter against the VM's real
# Soft-RoCE kernel, makes RDMA traffic, and writes everything the host-side
# check (tests/vm/check_e2e.py) needs into /mnt/host (the --share folder).
#
# Expects /guest/roce_exporter (injected by run.sh -a) and SR_GID0/SR_IP0 from
# the VM's /init. Collects, does not judge: the exit status is non-zero only
# when a step the check needs could not run (the check reports what is missing).
#
# Order of reads, so that the host can compare exposition and kernel exactly:
#   rdma-before  scrape-1  rdma-mid  | traffic |  rdma-after-traffic (at time T)
#   scrape-2 (the second sample stamped after T: it started after T whether the
#   stamp is a sample's start or its end)  scrape-3 (the next sample)  rdma-after
# With no traffic between rdma-after-traffic and rdma-after, every counter in
# scrape-2 and scrape-3 must lie between those two kernel reads. Waiting on the
# exporter's own roce_sample_timestamp_seconds, not on sleeps, keeps this true
# however slow the emulated CPU is.
set -u
O=/mnt/host
grep -q ' /mnt/host ' /proc/mounts || { echo "no --share mounted at /mnt/host"; exit 2; }
EXP=/guest/roce_exporter
IB=/sys/class/infiniband/rxe0
P=$IB/ports/1
ADDR=127.0.0.1:9879
INTERVAL=1   # seconds; matches sample_interval in the config below
TMO=30       # limit for any single tool run
fails=0

step() { echo "[e2e $(cut -d' ' -f1 /proc/uptime)] $*"; }
note() { echo "$*" >> "$O/guest-steps.txt"; }
scrape() { curl -sS -f --max-time 10 -o "$O/$2" "http://$ADDR$1"; }
rdma_stat() { rdma statistic show link rxe0/1 > "$O/$1" 2>&1; }
sample_ts() { awk '$1 == "roce_sample_timestamp_seconds" { print $2 }' "$O/$1"; }
# scrape_after T NAME: scrape /metrics into NAME until its sample is stamped
# later than T (epoch seconds); prints that stamp
scrape_after() {
  local t=$1 name=$2 ts deadline=$((SECONDS + TMO))
  while ((SECONDS < deadline)); do
    if scrape /metrics "$name"; then
      ts=$(sample_ts "$name")
      [[ -n $ts ]] && awk -v a="$ts" -v b="$t" 'BEGIN { exit !(a > b) }' && { echo "$ts"; return 0; }
    fi
    sleep 0.3
  done
  return 1
}

: > "$O/guest-steps.txt"
env | grep '^SR_' | sort > "$O/env.txt"
echo "NIC_DRIVER=$(basename "$(readlink /sys/class/net/eth0/device/driver)")" >> "$O/env.txt"
echo "NETDEV_DEVICE=$(readlink -f /sys/class/net/eth0/device)" >> "$O/env.txt"
echo "NOFILE=$(ulimit -Sn)/$(ulimit -Hn)" >> "$O/env.txt"   # what the exporter inherits

# ---- kernel facts the check compares against (sysfs text as is)
{
  for f in node_guid fw_ver node_type parent; do echo "$f=$(cat "$IB/$f" 2>&1)"; done
  for f in state phys_state rate link_layer; do echo "port.$f=$(cat "$P/$f" 2>&1)"; done
  echo "netdev.mtu=$(cat /sys/class/net/eth0/mtu)"
} > "$O/sysfs.txt"
# populated GID slots only: index|gid|type|ndev (empty ones read as zeros and
# their gid_attrs fail with EINVAL)
Z=0000:0000:0000:0000:0000:0000:0000:0000
: > "$O/gids.txt"
for g in "$P"/gids/*; do
  IFS= read -r v < "$g" || continue
  [[ $v == "$Z" ]] && continue
  k=${g##*/}
  IFS= read -r t < "$P/gid_attrs/types/$k" 2>/dev/null || t=""
  IFS= read -r n < "$P/gid_attrs/ndevs/$k" 2>/dev/null || n=""
  echo "$k|$v|$t|$n" >> "$O/gids.txt"
done
uname -r > "$O/uname.txt"

# ---- the exporter: one-shot output first (needs no HTTP server)
# hw_stat (off by default): rxe's counters have no mapped meaning, and the
# check compares every statistic the kernel reports with the exposition.
cat > /tmp/e2e.yml <<EOF
sample_interval: ${INTERVAL}s
metrics:
  hw_stat: true
EOF
[[ -x $EXP ]] || { echo "$EXP missing"; exit 2; }
step "roce_exporter once"
timeout $TMO "$EXP" --config.file=/tmp/e2e.yml once > "$O/once.txt" 2> "$O/once.stderr"
note "once rc=$?"

step "start roce_exporter on $ADDR"
"$EXP" --config.file=/tmp/e2e.yml --web.listen-address=$ADDR --log.level=debug \
  > "$O/exporter.log" 2>&1 &
EPID=$!
up=0
deadline=$((SECONDS + TMO))
while ((SECONDS < deadline)); do
  if curl -s -f --max-time 2 -o "$O/healthz.txt" "http://$ADDR/healthz" 2>/dev/null; then up=1; break; fi
  kill -0 $EPID 2>/dev/null || break
  sleep 0.2
done
note "healthz up=$up"
if ((up == 0)); then
  step "exporter did not answer /healthz"; fails=$((fails + 1))
else
  rdma_stat rdma-before.txt
  ts1=$(scrape_after 0 scrape-1.txt); note "scrape-1 rc=$? ts=$ts1"
  rdma_stat rdma-mid.txt
fi

# ---- RDMA traffic: RC SEND/RECV ping-pong, looped back inside rxe
step "ibv_rc_pingpong loopback"
timeout $TMO ibv_rc_pingpong -d rxe0 -g "$SR_GID0" -n 500 > "$O/pingpong-server.txt" 2>&1 &
SPID=$!
crc=1
for _ in 1 2 3 4 5; do
  sleep 1
  timeout $TMO ibv_rc_pingpong -d rxe0 -g "$SR_GID0" -n 500 127.0.0.1 > "$O/pingpong-client.txt" 2>&1
  crc=$?
  ((crc == 0)) && break
  kill -0 $SPID 2>/dev/null || break
done
wait $SPID; src=$?
note "pingpong client rc=$crc server rc=$src"
((crc == 0 && src == 0)) || fails=$((fails + 1))

# ---- after the traffic
rdma_stat rdma-after-traffic.txt
T=$(($(date +%s) + 1))   # whole seconds, rounded up
if ((up == 1)); then
  ts=$(scrape_after $T scrape-2.txt) &&
    ts=$(scrape_after "$ts" scrape-2.txt); note "scrape-2 rc=$? after=$T ts=$ts"
  ts=$(scrape_after "${ts:-$T}" scrape-3.txt); note "scrape-3 rc=$? ts=$ts"
  rdma_stat rdma-after.txt
  # same request, OpenMetrics negotiated through Accept (kept for inspection)
  curl -sS -f --max-time 10 -H 'Accept: application/openmetrics-text;version=1.0.0' \
    -D "$O/scrape-om.headers" -o "$O/scrape-om.txt" "http://$ADDR/metrics"
  if kill -0 $EPID 2>/dev/null; then
    note "exporter alive=1"
    kill -TERM $EPID
    deadline=$((SECONDS + 5))
    while ((SECONDS < deadline)) && kill -0 $EPID 2>/dev/null; do sleep 0.1; done
    if kill -0 $EPID 2>/dev/null; then note "exporter sigterm-exit=timeout"; kill -KILL $EPID; else wait $EPID; note "exporter sigterm-exit=$?"; fi
  else
    wait $EPID; note "exporter alive=0 rc=$?"
  fi
else
  kill -KILL $EPID 2>/dev/null
fi
{ rdma link show; rdma dev show; ibv_devinfo -v -d rxe0; } > "$O/rdma-info.txt" 2>&1
for f in "$P"/hw_counters/*; do echo "${f##*/}=$(cat "$f" 2>&1)"; done > "$O/hw_counters-after.txt"
# ---- the netdev checks (issue 3) on the e1000 variant: e1000 has the
# classic 802.3x flow-control counters they look for
if [[ -x /guest/e2e-netdev.sh && $(basename "$(readlink /sys/class/net/eth0/device/driver)") == e1000 ]]; then
  step "netdev checks"
  /guest/e2e-netdev.sh > "$O/netdev-checks.txt" 2>&1
  note "netdev checks rc=$?"
fi
# ---- `roce_exporter check` (issue 6): healthy with jumbo frames, then the
# broken configuration of a 1500-byte MTU must give mtu_below_jumbo and exit 1
check_run() { # check_run NAME
  timeout $TMO "$EXP" check --window 2s --format json > "$O/check-$1.json" 2> "$O/check-$1.stderr"
  note "check $1 rc=$?"
}
MTU0=$(cat /sys/class/net/eth0/mtu)
step "check with MTU 9000"
ip link set eth0 mtu 9000 && note "mtu 9000 set=1"
i=0; while ((i < 50)) && ! grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state; do sleep 0.1; i=$((i + 1)); done
check_run mtu9000
step "check with MTU 1500"
ip link set eth0 mtu 1500
i=0; while ((i < 50)) && ! grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state; do sleep 0.1; i=$((i + 1)); done
check_run mtu1500
ip link set eth0 mtu "$MTU0"
step "done, $fails step(s) failed"
exit $fails
