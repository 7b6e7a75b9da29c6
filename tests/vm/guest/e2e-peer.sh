#!/bin/bash
# Guest side of tests/vm/e2e-peer.sh: one of two Soft-RoCE VMs on one wire,
# each running its own exporter with peer probes to the other. Collects, does
# not judge: tests/vm/check_peer.py reads what lands in /mnt/host/<role>/.
#
# The kernel command line says which side this is: peer.role=a|b and
# peer.ip=<the other VM's address>. A observes and drives, B obeys:
#   both     each side waits for answered small and large probes (its own
#            scrape), then says so
#   loss     B: tc netem loss 30% on eth0; A waits for peer_probe_path_loss;
#            B removes the qdisc; A waits for the finding to clear
#   stop     B stops its exporter; A waits for peer_probe_peer_unreachable,
#            then measures its prober with every probe lost (nothing answers,
#            nothing probes it: its port thread's CPU over 10 s, lost-cpu.txt);
#            B starts a new one (new QPN); A, not restarted, waits for
#            answers again and the finding to clear
#   mtu      B: eth0 MTU 1000 (rxe MTU 512: A's 1024-byte probes do not fit
#            B's echo); A waits for peer_probe_path_mtu
#
# The two sides coordinate through files in /mnt/host/ctl: both VMs mount the
# same host folder over 9p (uncached: a file one side creates is seen by the
# other's next lookup). The control messages do not ride the wire the
# scenarios break (30% loss, a lowered MTU, a stopped exporter). Every wait is
# bounded by its own limit and by the run's deadline, so a side that never
# answers makes the run end early with the files so far, never hang it.
set -u
arg() { sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" /proc/cmdline; }
ROLE=$(arg peer.role)
PEER=$(arg peer.ip)
[[ $ROLE == a || $ROLE == b ]] && [[ -n $PEER ]] || { echo "need peer.role=a|b and peer.ip= on the kernel command line"; exit 2; }
grep -q ' /mnt/host ' /proc/mounts || { echo "no --share mounted at /mnt/host"; exit 2; }
O=/mnt/host/$ROLE
C=/mnt/host/ctl
mkdir -p "$O" "$C"
EXP=/guest/roce_exporter
PORT=9879
LOCAL=http://127.0.0.1:$PORT
REMOTE=http://$PEER:$PORT
# the run's own budget (peer.budget=SEC): the host gives the VM more
# (run.sh -t), so the files are written before it is killed
BUDGET=$(arg peer.budget)
DEADLINE=$((SECONDS + ${BUDGET:-170}))

step() { echo "[peer-$ROLE $(cut -d' ' -f1 /proc/uptime)] $*"; echo "$(cut -d' ' -f1 /proc/uptime) $*" >> "$O/steps.txt"; }
left() { local l=$((DEADLINE - SECONDS)); ((l < $1)) && echo $((l > 0 ? l : 0)) || echo "$1"; }
signal() { echo "$(cut -d' ' -f1 /proc/uptime)" > "$C/$1"; step "signal $1"; }
# await NAME SEC: until ctl/NAME exists; 2 when ctl/end appears first
await() {
  local end=$((SECONDS + $(left "$2")))
  while ((SECONDS < end)); do
    [[ -e $C/$1 ]] && { step "got $1"; return 0; }
    [[ $1 != end && -e $C/end ]] && { step "end while waiting for $1"; return 2; }
    sleep 0.2
  done
  step "timeout waiting for $1"; return 1
}
scrape() { curl -sS -f --max-time 5 -o "$O/$1.prom" "$LOCAL/metrics" && curl -sS -f --max-time 5 -o "$O/$1-findings.json" "$LOCAL/findings"; }
# metric REGEX FILE: value of the first sample line matching REGEX (0 if none)
metric() { awk -v re="$1" '$1 !~ /^#/ && $0 ~ re { print $NF; f = 1; exit } END { if (!f) print 0 }' "$2"; }
answered() { curl -sS -f --max-time 5 "$LOCAL/metrics" 2>/dev/null | grep "^roce_peer_probe_answered_total{.*size=\"$1\"" | awk '{ s += $NF } END { print s + 0 }'; }
has_finding() { curl -sS -f --max-time 5 "$LOCAL/findings" 2>/dev/null | grep -q "\"rule\": \"$1\""; }
# until CMD... with limit SEC: true once CMD is; every 0.5 s
until_ok() {
  local sec=$1; shift
  local end=$((SECONDS + $(left "$sec")))
  while ((SECONDS < end)); do
    "$@" && return 0
    sleep 0.5
  done
  return 1
}
# rxe has no active_mtu in sysfs; ibv_devinfo reads it from the port attributes
active_mtu() { ibv_devinfo -d rxe0 | awk '/active_mtu:/ { print $2; exit }'; }
at_least() { [[ $(answered "$1") -ge $2 ]]; }
sent() { curl -sS -f --max-time 5 "$LOCAL/metrics" 2>/dev/null | grep "^roce_peer_probe_sent_total{.*size=\"$1\"" | awk '{ s += $NF } END { print s + 0 }'; }
# utime + stime (clock ticks) of the exporter's thread named $1, or of the
# process without $1 (/proc/PID[/task/TID]/stat fields 14 and 15)
ticks() {
  local t f=/proc/$EPID/stat
  if [[ -n ${1:-} ]]; then
    f=""
    for t in /proc/$EPID/task/*; do [[ $(cat "$t/comm" 2>/dev/null) == "$1" ]] && f=$t/stat; done
  fi
  [[ -n $f ]] && awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "$f" || echo "?"
}
# the wake-ups of the exporter's thread named $1: its context switches
# (voluntary: it slept and was woken; a thread polling in a loop has
# thousands a second)
switches() {
  local t
  for t in /proc/$EPID/task/*; do
    [[ $(cat "$t/comm" 2>/dev/null) == "$1" ]] && awk '/^voluntary_ctxt_switches/ { print $2 }' "$t/status"
  done
}
no_finding() { curl -sS -f --max-time 5 -o /dev/null "$LOCAL/findings" && ! has_finding "$1"; }

EPID=""
NSTART=0
start() {
  NSTART=$((NSTART + 1))
  "$EXP" --config.file=/tmp/peer.yml --web.listen-address=0.0.0.0:$PORT --log.level=debug \
    > "$O/exporter-$NSTART.log" 2>&1 &
  EPID=$!
  local end=$((SECONDS + 60))
  until curl -sS -f --max-time 2 -o /dev/null "$LOCAL/healthz" 2>/dev/null; do
    ((SECONDS < end)) && kill -0 $EPID 2>/dev/null || { step "exporter did not start"; return 1; }
    sleep 0.2
  done
  echo "$EPID" > "$O/exporter-$NSTART.pid"
  step "exporter $NSTART up, pid $EPID"
  # the responder comes up beside the server: its endpoint may follow a moment later
  until_ok 20 own_endpoint "$NSTART"
  step "own endpoints $NSTART: HTTP $(cat "$O/own-endpoints-$NSTART.status")"
}
own_endpoint() {
  curl -sS --max-time 5 -o "$O/own-endpoints-$1.json" -w '%{http_code}\n' "$LOCAL/peer-probe/endpoints" > "$O/own-endpoints-$1.status" 2>&1
  grep -q '"qpn"' "$O/own-endpoints-$1.json" 2>/dev/null
}
stop() {
  kill -TERM "$EPID" 2>/dev/null
  local end=$((SECONDS + 20))
  while ((SECONDS < end)) && kill -0 "$EPID" 2>/dev/null; do sleep 0.1; done
  kill -KILL "$EPID" 2>/dev/null
  wait "$EPID" 2>/dev/null
  step "exporter $NSTART stopped, exit $?"
}
# fetch_peer N: the other side's endpoints over the wire, until a 200 with
# an endpoint in it (its responder may come up after its server) or the limit
fetch_peer() {
  local code end=$((SECONDS + $(left 40)))
  while ((SECONDS < end)); do
    code=$(curl -sS --max-time 5 -o "$O/peer-endpoints-$1.json" -w '%{http_code}' "$REMOTE/peer-probe/endpoints" 2>>"$O/peer-endpoints-$1.err")
    [[ $code == 200 ]] && grep -q '"qpn"' "$O/peer-endpoints-$1.json" && break
    sleep 1
  done
  echo "${code:-none}" > "$O/peer-endpoints-$1.status"
  step "peer endpoints $1: HTTP ${code:-none}"
}
finish() {
  scrape final
  [[ -n $EPID ]] && stop
  rdma statistic show link rxe0/1 > "$O/rdma-stat.txt" 2>&1
  { ip -s link show eth0; tc -s qdisc show dev eth0; echo "active_mtu=$(active_mtu)"; } > "$O/link.txt" 2>&1
  dmesg | tail -50 > "$O/dmesg.txt"
  step "done"
  exit 0
}

# the load test's steps (guest/load.sh), run at the end
. /guest/load.sh
declare -A LOAD_ROLE=([10.0.2.16]=b)

hostname "node-$ROLE"
cat > /tmp/peer.yml <<EOF
sample_interval: 1s
# the loopback probe is another test's (e2e-probe.sh); off, it takes no
# guest CPU from the peer prober
probes: {enabled: false}
peer_probes:
  enabled: true
  peers: [$PEER:$PORT]
  packets_per_second: 50
  timeout: 500ms
  refresh: 5s
rules:
  hold: 1s
EOF
cp /tmp/peer.yml "$O/config.yml"
: > "$O/steps.txt"
{ env | grep '^SR_' | sort; echo "role=$ROLE peer=$PEER node=$(hostname)"; cat /sys/class/infiniband/rxe0/ports/1/gids/${SR_GID0:-1}; } > "$O/env.txt"
step "start, kernel $(uname -r)"

# ---- the wire: the other VM may still be booting
if until_ok 60 ping -c 1 -W 1 "$PEER" >/dev/null 2>&1; then
  ping -c 3 -W 2 "$PEER" > "$O/ping.txt" 2>&1
  step "wire: $PEER answers"
else
  step "wire: $PEER never answered"
fi

start || { signal "failed-$ROLE"; finish; }
fetch_peer 0

# ---- both: answers both ways
step "phase both"
if until_ok 40 at_least small 20 && until_ok 10 at_least large 20; then
  step "answers: small $(answered small), large $(answered large)"
else
  step "no answers: small $(answered small), large $(answered large)"
fi
scrape both
signal "both-$ROLE"

if [[ $ROLE == b ]]; then
  # B obeys A until A says end
  await go-loss 60 || finish
  tc qdisc add dev eth0 root netem loss 30% > "$O/tc-add.txt" 2>&1; echo "rc=$?" >> "$O/tc-add.txt"
  tc -s qdisc show dev eth0 >> "$O/tc-add.txt" 2>&1
  signal loss-on
  await go-unloss 90 || finish
  tc qdisc del dev eth0 root >> "$O/tc-add.txt" 2>&1
  signal loss-off
  await go-stop 90 || finish
  stop
  signal stopped
  await go-start 90 || finish
  start || { signal "failed-$ROLE"; finish; }
  signal started
  await go-mtu 90 || finish
  ip link set dev eth0 mtu 1000 > "$O/mtu.txt" 2>&1; echo "rc=$?" >> "$O/mtu.txt"
  # rxe follows the netdev MTU (NETDEV_CHANGEMTU): 1000 less its headers -> 512
  { ip link show eth0; echo "active_mtu=$(active_mtu)"; } >> "$O/mtu.txt" 2>&1
  signal mtu-on
  load_serve
  await end 90
  finish
fi

# ---- A drives
await both-b 60
if [[ $(answered small) -lt 1 ]]; then
  step "no answers at all: the scenarios need a working prober, skipped"
  signal end; finish
fi

step "phase loss"
signal go-loss
await loss-on 30
if until_ok 40 has_finding peer_probe_path_loss; then step "path_loss fired"; else step "path_loss did not fire"; fi
scrape loss
signal go-unloss
await loss-off 30
if until_ok 30 no_finding peer_probe_path_loss; then step "path_loss cleared"; else step "path_loss did not clear"; fi
scrape loss-cleared

step "phase stop"
scrape stop-before
signal go-stop
await stopped 40
if until_ok 40 has_finding peer_probe_peer_unreachable; then step "peer_unreachable fired"; else step "peer_unreachable did not fire"; fi
# every probe lost, nothing probing A: what waiting for lost probes costs
t0=$(ticks roce-peer-rxe0); p0=$(ticks); s0=$(sent small); w0=$(switches roce-peer-rxe0)
u0=$(cut -d' ' -f1 /proc/uptime)
sleep 10
t1=$(ticks roce-peer-rxe0); p1=$(ticks); s1=$(sent small); w1=$(switches roce-peer-rxe0)
u1=$(cut -d' ' -f1 /proc/uptime)
echo "thread=$t0,$t1 process=$p0,$p1 sent_small=$s0,$s1 wakeups=$w0,$w1 uptime=$u0,$u1" > "$O/lost-cpu.txt"
step "lost probes: $(cat "$O/lost-cpu.txt")"
scrape stop
base=$(answered small)
signal go-start
await started 70
fetch_peer 1
if until_ok 60 at_least small $((base + 20)) && until_ok 30 no_finding peer_probe_peer_unreachable; then
  step "recovered: small $(answered small) (was $base)"
else
  step "did not recover: small $(answered small) (was $base)"
fi
scrape restart
kill -0 "$EPID" 2>/dev/null && echo "$EPID" > "$O/exporter-alive.pid"

step "phase mtu"
signal go-mtu
await mtu-on 30
if until_ok 40 has_finding peer_probe_path_mtu; then step "path_mtu fired"; else step "path_mtu did not fire"; fi
scrape mtu
sleep 3
scrape mtu-later
load_request 10.0.2.16
signal end
finish
