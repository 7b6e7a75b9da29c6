# The load test's guest steps (sourced by guest/e2e-peer.sh and
# guest/e2e-fleet.sh, which provide O, C, ROLE, EXP, step, left, until_ok;
# bash). Collects, does not judge: tests/vm/check_load.py reads what lands
# in /mnt/host/<role>/load-*.
#
# One side requests (load_request: A), the others serve (load_serve: a
# second exporter on :9443 with TLS, basic auth and load_test.responder,
# beside the peer-probe one). The requester drives, through files in
# /mnt/host/ctl/load-*, the serving sides obey:
#   measure   ib_write_bw (B its server, A its client: 64 KiB, 1 QP, 4
#             outstanding, -D 8: perftest's own sample window, the middle
#             4 s), then A's `check --load=8s` to B with the same size and
#             shape (text; the results file has the figures), then
#             ib_write_bw again: the exporter's figure is judged against
#             the mean of the two around it (the shared host's load
#             drifts; when those two differ by more than 15 %, one more
#             exporter run and ib_write_bw run follow); rxe0's counters are
#             read around the exporter's run.
#             While it streams, a second session for the same port (409).
#             The run is forced (--load-force): perftest's traffic just
#             before is still in the responder's last sample of the port
#             (the refusal of a loaded port is a unit test's). B's bcrypt
#             check of the credentials is made (and cached) first: done
#             during the run it would take B's CPU from Soft-RoCE
#   refusals  one without credentials and one with a wrong password (401),
#             one over the caps (422 over_cap), one from off the rail (422
#             off_rail)
#   kill      `check --load=6s` killed (SIGKILL) once it streams; B records
#             `rdma resource show` until it is back to its baseline
#   linkdown  `check --load=6s --format json` while B takes eth0 down for
#             5 s once the stream arrives: the run must end within its
#             deadline with a finding
# In the three-VM run (load_fleet) A and B each get a second rail first: a
# macvlan on eth0 (mv1, its own MAC, 10.0.3.x/24; the hub learns it like
# any station) with rxe1 on it (rxe refuses VLAN devices, not macvlans). A runs `check --load=3s` to B over both: every port at
# once (rxe0 to B's rxe0 and rxe1 to B's rxe1 together), then each alone.
# Both sides run eth0 at MTU 9000 meanwhile (rxe's active MTU 4096): at
# 1024, Soft-RoCE between two emulated VMs loses enough bursts that the
# figures are mostly retransmission timeouts. A stream is seen running in
# eth0's packet counters, not guessed with a sleep. Every wait is
# bounded; a side that never gets somewhere ends the steps early with the
# files so far.
LOAD_CTL=/mnt/host/ctl/load
LOAD_PORT=9443
LOAD_SIZE=65536
LOAD_PERFTEST="-s $LOAD_SIZE -q 1 -t 4 -D 8"
load_now() { cut -d' ' -f1 /proc/uptime; }
load_sig() { load_now > "$C/load-$1"; step "load: signal $1"; }
# load_wait NAME SEC: until ctl/load-NAME exists; 2 when the run's
# ctl/end comes first
load_wait() {
  local end=$((SECONDS + $(left "$2")))
  while ((SECONDS < end)); do
    [[ -e $C/load-$1 ]] && return 0
    [[ -e $C/end ]] && { step "load: end while waiting for $1"; return 2; }
    sleep 0.2
  done
  step "load: timeout waiting for $1"; return 1
}
# load_wait_either A B SEC: until ctl/load-A or ctl/load-B exists
load_wait_either() {
  local end=$((SECONDS + $(left "$3")))
  while ((SECONDS < end)); do
    [[ -e $C/load-$1 || -e $C/load-$2 ]] && return 0
    sleep 0.2
  done
  return 1
}
load_curl() { curl -sS --max-time 10 --cacert "$LOAD_CTL/ca.crt" -u "load:$(cat "$LOAD_CTL/password")" "$@"; }
# load_up: this side's responder answers over TLS (401 without
# credentials: no password check needed to know it serves)
load_up() {
  [[ $(curl -sS --max-time 10 --cacert "$LOAD_CTL/ca.crt" -o /dev/null -w '%{http_code}' \
    "https://127.0.0.1:$LOAD_PORT/healthz" 2>/dev/null) == 401 ]]
}
load_res() { rdma resource show 2>&1 | grep 'rxe0:'; }
load_stat() {
  { rdma statistic show link rxe0/1
    echo "eth0 tx_bytes $(cat /sys/class/net/eth0/statistics/tx_bytes) rx_bytes $(cat /sys/class/net/eth0/statistics/rx_bytes)"
  } > "$O/load-$1.txt" 2>&1
}
# load_moving rx|tx: eth0 carries 50 packets or more that way within
# 0.3 s: a stream runs (sysfs, cheap enough to ask often)
load_moving() {
  local f=/sys/class/net/eth0/statistics/$1_packets a b
  a=$(cat "$f"); sleep 0.3; b=$(cat "$f")
  ((b - a >= 50))
}

# load_serve: once the requester starts, a responder beside the
# peer-probe exporter until the requester is done
load_serve() {
  local epid end n
  [[ -n ${LOAD_RAILS:-} ]] || load_wait start 300 || return 0
  ip link set dev eth0 mtu 9000 2>/dev/null
  {
    echo "# what each port carries is measured between samples; every 5 s keeps"
    echo "# the exporter's own reads from competing with Soft-RoCE for the CPU"
    echo "sample_interval: 5s"
    echo "probes: {enabled: false}"
    echo "load_test: {responder: true}"
  } > /tmp/load-responder.yml
  "$EXP" --config.file=/tmp/load-responder.yml --web.config.file="$LOAD_CTL/web.yml" \
    --web.listen-address=0.0.0.0:$LOAD_PORT --log.level=info > "$O/load-responder.log" 2>&1 &
  epid=$!
  if ! until_ok 30 load_up; then
    step "load: the responder did not come up"; load_sig "failed-$ROLE"; kill "$epid"; return 1
  fi
  load_res > "$O/load-res-baseline.txt"
  step "load: responder up, $(cat "$O/load-res-baseline.txt")"
  load_sig "ready-$ROLE"
  if [[ $ROLE == b && -z ${LOAD_RAILS:-} ]]; then
    for n in 1 2 3; do
      # the third only when A asks for it (before its kill step)
      [[ $n == 3 ]] && ! load_wait_either perftest-3 killed 200 && break
      [[ $n == 3 && ! -e $C/load-perftest-3 ]] && break
      load_wait "perftest-$n" 120 || break
      # shellcheck disable=SC2086
      timeout 40 ib_write_bw -d rxe0 -x "${SR_GID0:-1}" $LOAD_PERFTEST -F -p $((18515 + n)) \
        > "$O/load-perftest-server-$n.txt" 2>&1 &
      sleep 1; load_sig "perftest-up-$n"
      wait $!
    done
    if load_wait killed 120; then
      # times on this side's clock: from the kill's news to the baseline
      load_now > "$O/load-kill-seen.txt"
      end=$((SECONDS + 30))
      while ((SECONDS < end)) && [[ $(load_res) != "$(cat "$O/load-res-baseline.txt")" ]]; do sleep 0.5; done
      { load_now; load_res; } > "$O/load-res-after-kill.txt"
      load_sig released
    fi
    if load_wait linkdown 90; then
      until_ok 30 load_moving rx
      ip link set dev eth0 down; step "load: eth0 down"
      sleep 5
      ip link set dev eth0 up; step "load: eth0 up"
      load_sig linkup
    fi
  fi
  load_wait done 200
  load_curl -o "$O/load-responder.prom" "https://127.0.0.1:$LOAD_PORT/metrics"
  kill -TERM "$epid"; wait "$epid" 2>/dev/null
  step "load: responder stopped"
  load_sig "done-$ROLE"
}

# load_check NAME SEC ARGS...: check --load to the peers, output in
# load-NAME.out, status and seconds in load-NAME.rc
load_check() {
  local name=$1 sec=$2 t0 rc; shift 2
  t0=$(load_now)
  timeout -s KILL "$sec" "$EXP" check --config.file=/tmp/load-client.yml --window=1s "$@" \
    > "$O/load-$name.out" 2> "$O/load-$name.err"
  rc=$?
  echo "rc=$rc seconds=$(awk -v a="$t0" -v b="$(load_now)" 'BEGIN { print b - a }')" > "$O/load-$name.rc"
  step "load: check $name: $(cat "$O/load-$name.rc")"
}

# load_refuse NAME QUERY [CURL ARGS]: one POST to B's responder, its status
# and body in load-refused-NAME.txt
load_refuse() {
  local name=$1 query=$2; shift 2
  curl -sS --max-time 20 --cacert "$LOAD_CTL/ca.crt" "$@" -X POST -w '\nstatus=%{http_code}\n' \
    "https://$LOAD_B:$LOAD_PORT/load-test/session?$query" > "$O/load-refused-$name.txt" 2>&1
  step "load: $name: $(tail -1 "$O/load-refused-$name.txt")"
}

# load_perftest N: ib_write_bw's client against B's N-th server
load_perftest() {
  load_sig "perftest-$1"
  load_wait "perftest-up-$1" 30
  # shellcheck disable=SC2086
  timeout 40 ib_write_bw -d rxe0 -x "${SR_GID0:-1}" $LOAD_PERFTEST -F -p $((18515 + $1)) "$LOAD_B" \
    > "$O/load-perftest-$1.txt" 2>&1
  step "load: perftest $1: $(grep -A1 'BW average' "$O/load-perftest-$1.txt" | tail -1)"
}

# load_bw N: ib_write_bw's BW average of run N (MB/sec: MiB/s), 0 if none
load_bw() { grep -A1 'BW average' "$O/load-perftest-$1.txt" 2>/dev/null | awk 'NR == 2 { print $4 + 0; f = 1 } END { if (!f) print 0 }'; }
# load_steady N M: ib_write_bw runs N and M within 15 % of their mean
load_steady() {
  awk -v a="$(load_bw "$1")" -v b="$(load_bw "$2")" 'BEGIN { m = (a + b) / 2; d = a - b; if (d < 0) d = -d; exit !(m > 0 && d / m <= 0.15) }'
}

# load_request PEERS...: the requester's steps, to the responders at
# PEERS (the first is B, which runs the faults); LOAD_ROLE maps each
# address to its role
load_request() {
  LOAD_B=$1
  local peers=() p q auth
  auth="load:$(cat "$LOAD_CTL/password")"
  for p in "$@"; do peers+=(--peer "https://$p:$LOAD_PORT"); done
  {
    echo "# a sample of the RDMA source may take over a second under emulation"
    echo "sample_interval: 5s"
    echo "probes: {enabled: false}"
    echo "peer_probes:"
    echo "  tls_ca_file: $LOAD_CTL/ca.crt"
    echo "  username: load"
    echo "  password_file: $LOAD_CTL/password"
    echo "load_test:"
    echo "  sizes: [$LOAD_SIZE]"
    echo "  qps: 1"
    echo "  depth: 4"
    echo "  results_file: $O/load-results.json"
    echo "rules: {hold: 1s}"
  } > /tmp/load-client.yml
  cp /tmp/load-client.yml "$O/load-client.yml"
  load_sig start
  ip link set dev eth0 mtu 9000
  for p in "$@"; do load_wait "ready-${LOAD_ROLE[$p]}" 120 || return 1; done
  q="gid=::ffff:${SR_IP0:-10.0.2.15}&qpn=100,101,102,103&psn=1&mtu=1024&seconds=30&bytes=1000000000&message=$LOAD_SIZE&force=0"

  step "load: measure"
  load_curl -o /dev/null "https://$LOAD_B:$LOAD_PORT/metrics"
  load_perftest 1
  load_stat stat-measure-before
  load_check measure 90 --load=8s --load-force "${peers[@]}" &
  p=$!
  if until_ok 30 load_moving tx; then
    load_refuse busy "$q" -u "$auth"
  else
    step "load: the stream never started: no busy request"
  fi
  wait "$p"
  load_stat stat-measure-after
  cp "$O/load-results.json" "$O/load-results-measure.json" 2>/dev/null
  load_perftest 2
  # ib_write_bw itself varying by more than the tolerance between the two
  # runs around the exporter's (the shared host's load moved): one more
  # exporter run between two ib_write_bw runs; the checker takes the pair
  # of ib_write_bw runs that agree best
  if ! load_steady 1 2; then
    step "load: ib_write_bw varied by more than 15% around the exporter's run: once more"
    load_check measure-2 90 --load=8s --load-force "${peers[@]}"
    cp "$O/load-results.json" "$O/load-results-measure-2.json" 2>/dev/null
    load_perftest 3
  fi

  step "load: refusals"
  load_refuse noauth "$q"
  load_refuse wrongpass "$q" -u load:wrong
  load_refuse overcap "${q/seconds=30/seconds=100000}" -u "$auth"
  load_refuse offrail "${q/::ffff:10.0.2./::ffff:10.0.9.}" -u "$auth"

  step "load: kill"
  "$EXP" check --config.file=/tmp/load-client.yml --window=1s --load=6s --load-force "${peers[@]}" \
    > "$O/load-kill.out" 2>&1 &
  p=$!
  until_ok 30 load_moving tx || step "load: the stream to kill never started"
  kill -KILL "$p"; wait "$p" 2>/dev/null
  load_now > "$O/load-killed-at.txt"
  load_sig killed
  load_wait released 40

  step "load: linkdown"
  load_sig linkdown
  load_check linkdown 60 --load=6s --load-force "${peers[@]}" --format json
  load_wait linkup 30
  load_sig done
  for p in "$@"; do load_wait "done-${LOAD_ROLE[$p]}" 30; done
  step "load: done"
}

# load_rail1 IP: rxe1 on a macvlan of eth0 at IP/24, ACTIVE with its RoCE
# v2 IPv4 GID
load_rail1() {
  local g i
  # ARP answered only by the interface holding the address: by default
  # eth0 answers for mv1's address too, and rxe1's packets would land on
  # rxe0
  { echo 1 > /proc/sys/net/ipv4/conf/all/arp_ignore
    echo 2 > /proc/sys/net/ipv4/conf/all/arp_announce
    ip link set dev eth0 mtu 9000
    ip link add link eth0 name mv1 type macvlan mode bridge
    ip addr add "$1/24" dev mv1
    ip link set dev mv1 up
    rdma link add rxe1 type rxe netdev mv1
  } >> "$O/load-rail1.txt" 2>&1
  for i in $(seq 50); do
    for g in /sys/class/infiniband/rxe1/ports/1/gids/*; do
      case $(cat "$g" 2>/dev/null) in 0000:0000:0000:0000:0000:ffff:*)
        grep -q ACTIVE /sys/class/infiniband/rxe1/ports/1/state && { step "load: rxe1 on mv1 $1, GID ${g##*/}"; return 0; } ;;
      esac
    done
    sleep 0.1
  done
  step "load: rxe1 did not come up: $(tail -3 "$O/load-rail1.txt" | tr '\n' ' ')"; return 1
}

# load_fleet: the three-VM run's load steps: A requests over two rails,
# B serves both, C sits out
load_fleet() {
  local p
  case $ROLE in
    b) load_wait start 200 || return 0
       load_rail1 10.0.3.16
       LOAD_RAILS=1 load_serve ;;
    a) load_sig start
       load_rail1 10.0.3.15 || return 0
       {
         echo "sample_interval: 5s"
         echo "probes: {enabled: false}"
         echo "peer_probes:"
         echo "  tls_ca_file: $LOAD_CTL/ca.crt"
         echo "  username: load"
         echo "  password_file: $LOAD_CTL/password"
         echo "load_test: {sizes: [$LOAD_SIZE], qps: 1, depth: 4, results_file: $O/load-results.json}"
         echo "rules: {hold: 1s}"
       } > /tmp/load-client.yml
       cp /tmp/load-client.yml "$O/load-client.yml"
       load_wait ready-b 120 || return 0
       ip neigh flush dev mv1 2>/dev/null
       ping -c 2 -W 2 -I mv1 10.0.3.16 > "$O/load-ping-rail1.txt" 2>&1
       load_curl -o /dev/null "https://10.0.2.16:$LOAD_PORT/metrics"
       step "load: rails"
       load_check measure 120 --load=3s --load-force --peer "https://10.0.2.16:$LOAD_PORT"
       cp "$O/load-results.json" "$O/load-results-measure.json" 2>/dev/null
       load_sig done
       load_wait done-b 30
       step "load: done" ;;
  esac
}
