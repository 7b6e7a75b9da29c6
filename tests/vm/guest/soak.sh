#!/bin/bash
# Guest side of tests/vm/soak.sh: the exporter with probes on rxe0 for a long
# run under continuous ib_write_bw loopback traffic. Collects, does not judge:
# tests/vm/check_soak.py reads what is written to /mnt/host.
#
# /guest/soak.conf (injected by soak.sh) sets DURATION (seconds of exporter
# run under traffic) and RECORD (seconds between records).
#
# Every RECORD seconds one row of soak.csv: the exporter's age, VmRSS, VmHWM,
# open descriptors, threads, the verbs objects its threads own (rdma resource
# show qp/cq/mr/pd), rxe0's totals (rdma resource show), the sampler and
# probe counters from a scrape, and rxe0's packet counters (rdma statistic).
# /proc is read before the scrape, so the scrape's own connection is not
# among the descriptors counted.
set -u
O=/mnt/host
grep -q ' /mnt/host ' /proc/mounts || { echo "no --share mounted at /mnt/host"; exit 2; }
. /guest/soak.conf
DURATION=${DURATION:-600}
RECORD=${RECORD:-10}
EXP=/guest/roce_exporter
ADDR=127.0.0.1:9879
DEV=rxe0
G=${SR_GID0:-1}
TMO=60
HZ=$(getconf CLK_TCK 2>/dev/null || echo 100)

step() { echo "[soak $(cut -d' ' -f1 /proc/uptime)] $*"; }
mkdir -p "$O/traffic"
: > "$O/steps.txt"
{
  env | grep '^SR_' | sort
  echo "DURATION=$DURATION"
  echo "RECORD=$RECORD"
  echo "CLK_TCK=$HZ"
  echo "NPROC=$(nproc)"
  echo "MEMLOCK=$(ulimit -l)"
  echo "KERNEL=$(uname -r)"
} > "$O/env.txt"

cat > /tmp/soak.yml <<EOF
sample_interval: 1s
probes: {enabled: true, interval: 1s, gid_index: auto}
EOF
cp /tmp/soak.yml "$O/config.yml"

rdma resource show > "$O/res-before.txt" 2>&1
rdma statistic show link $DEV/1 > "$O/stat-before.txt" 2>&1

"$EXP" --config.file=/tmp/soak.yml --web.listen-address=$ADDR --log.level=info \
  > "$O/exporter.log" 2>&1 &
EPID=$!
deadline=$((SECONDS + TMO))
until curl -sS -f --max-time 2 -o /dev/null "http://$ADDR/healthz" 2>/dev/null; do
  ((SECONDS < deadline)) && kill -0 $EPID 2>/dev/null || { echo "exporter did not start"; exit 3; }
  sleep 0.2
done
# The first probe round creates the exporter's verbs objects; records taken
# before it would count a rise as a leak.
deadline=$((SECONDS + TMO))
until curl -sS -f --max-time 5 "http://$ADDR/metrics" 2>/dev/null \
    | awk '/^roce_probe_requests_total\{/ && $NF >= 1 { found = 1 } END { exit !found }'; do
  ((SECONDS < deadline)) || { echo "no probe round within ${TMO}s"; exit 3; }
  sleep 0.5
done
step "exporter $EPID up, probes running"

# ib_write_bw in chunks of at most 60 s until the end: each chunk's report
# is kept, and one failed run does not end the traffic for good.
traffic() {
  local end=$1 n=0 chunk sp rc start
  while ((end - SECONDS > 5)); do
    chunk=$((end - SECONDS)); ((chunk > 60)) && chunk=60
    n=$((n + 1)) start=$SECONDS
    timeout $((chunk + 60)) ib_write_bw -d $DEV -x $G -D $chunk -F \
      > "$O/traffic/server-$n.txt" 2>&1 &
    sp=$!
    sleep 1
    timeout $((chunk + 60)) ib_write_bw -d $DEV -x $G -D $chunk -F 127.0.0.1 \
      > "$O/traffic/client-$n.txt" 2>&1
    rc=$?
    wait $sp
    echo "run=$n seconds=$chunk client_rc=$rc server_rc=$? start=$start end=$SECONDS" >> "$O/traffic.txt"
    ((rc == 0)) || sleep 1
  done
}
: > "$O/traffic.txt"
T0=$SECONDS
END=$((T0 + DURATION))
echo "traffic_start=$T0 traffic_until=$END" >> "$O/steps.txt"
traffic $END &
TPID=$!

# the verbs objects of one kind that the exporter owns, from `rdma resource
# show KIND`: the kernel names the thread that created each (the probe
# thread), so every task id of the process counts
owned() {
  rdma resource show "$1" 2>/dev/null | awk -v tids="$(ls /proc/$EPID/task | tr '\n' ' ')" '
    BEGIN { split(tids, t, " "); for (i in t) mine[t[i]] = 1 }
    { for (i = 1; i < NF; i++) if ($i == "pid" && ($(i + 1) in mine)) { n++; break } }
    END { print n + 0 }'
}
# rxe0's totals of one kind from the summary line of `rdma resource show`
total() { awk -v k="$1" -v d="$DEV:" '$2 == d { for (i = 3; i < NF; i++) if ($i == k) print $(i + 1) }' /tmp/res.txt; }
status_kib() { awk -v k="$1:" '$1 == k { print $2 }' /proc/$EPID/status; }
# sum of the samples of a family in /tmp/m.prom (empty when it has none)
msum() { awk -v f="$1" 'index($1, f "{") == 1 || $1 == f { s += $NF; n++ } END { if (n) printf "%.0f", s }' /tmp/m.prom; }
mmin() { awk -v f="$1" 'index($1, f "{") == 1 { if (n++ == 0 || $NF < m) m = $NF } END { if (n) print m }' /tmp/m.prom; }
kstat() { awk -v k="$1" '{ for (i = 1; i < NF; i++) if ($i == k) print $(i + 1) }' /tmp/stat.txt; }

COLS="t age_s rss_kib hwm_kib fds threads qp cq mr pd dev_qp dev_cq dev_mr dev_pd samples_total ticks_missed probe_requests probe_failures probe_rtt_count collector_success_min collectors sent_pkts rcvd_pkts rdma_sends traffic_runs"
echo "$COLS" | tr ' ' ',' > "$O/soak.csv"
record() {
  local start now age rss hwm fds thr
  start=$(awk '{ print $22 }' /proc/$EPID/stat)
  now=$(cut -d' ' -f1 /proc/uptime)
  age=$(awk -v u="$now" -v s="$start" -v hz="$HZ" 'BEGIN { printf "%.1f", u - s / hz }')
  rss=$(status_kib VmRSS); hwm=$(status_kib VmHWM); thr=$(status_kib Threads)
  fds=$(ls /proc/$EPID/fd | wc -l)
  local qp cq mr pd
  qp=$(owned qp); cq=$(owned cq); mr=$(owned mr); pd=$(owned pd)
  rdma resource show > /tmp/res.txt 2>&1
  rdma statistic show link $DEV/1 > /tmp/stat.txt 2>&1
  if ! curl -sS -f --max-time 10 -o /tmp/m.prom "http://$ADDR/metrics"; then
    : > /tmp/m.prom
    echo "scrape failed at $SECONDS" >> "$O/steps.txt"
  fi
  [ -s "$O/first.prom" ] || cp /tmp/m.prom "$O/first.prom"
  echo "$((SECONDS - T0)),$age,$rss,$hwm,$fds,$thr,$qp,$cq,$mr,$pd,$(total qp),$(total cq),$(total mr),$(total pd),$(msum roce_samples_total),$(msum roce_sample_ticks_missed_total),$(msum roce_probe_requests_total),$(msum roce_probe_failures_total),$(msum roce_probe_rtt_seconds_count),$(mmin roce_collector_success),$(grep -c '^roce_collector_success{' /tmp/m.prom),$(kstat sent_pkts),$(kstat rcvd_pkts),$(kstat rdma_sends),$(wc -l < "$O/traffic.txt")" >> "$O/soak.csv"
}

step "recording every ${RECORD}s for ${DURATION}s"
record
cp /tmp/res.txt "$O/res-first.txt"
for k in qp cq mr pd; do rdma resource show $k; done > "$O/res-objects-first.txt" 2>&1
next=$((T0 + RECORD))
while ((SECONDS < END)); do
  while ((SECONDS < next)); do sleep 0.5; done
  kill -0 $EPID 2>/dev/null || { echo "exporter died at $((SECONDS - T0)) s" >> "$O/steps.txt"; break; }
  record
  next=$((next + RECORD))
done
cp /tmp/m.prom "$O/last.prom"
cp /tmp/res.txt "$O/res-last.txt"
for k in qp cq mr pd; do rdma resource show $k; done > "$O/res-objects-last.txt" 2>&1
ls /proc/$EPID/task > "$O/tasks-last.txt"
cp /proc/$EPID/status "$O/status-last.txt" 2>/dev/null
step "duration over; waiting for the traffic"
wait $TPID
echo "traffic_end=$((SECONDS - T0))" >> "$O/steps.txt"

kill -TERM $EPID 2>/dev/null
deadline=$((SECONDS + 20))
while ((SECONDS < deadline)) && kill -0 $EPID 2>/dev/null; do sleep 0.1; done
kill -KILL $EPID 2>/dev/null
wait $EPID
echo "exit=$?" >> "$O/steps.txt"
rdma resource show > "$O/res-after.txt" 2>&1
rdma statistic show link $DEV/1 > "$O/stat-after.txt" 2>&1
step "done"
exit 0
