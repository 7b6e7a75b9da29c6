#!/bin/bash
# Guest side of the netdev check (issue 3, Soft-RoCE VM with the e1000 NIC
# variant: run.sh --nic-model e1000). Runs `roce_exporter once` against the
# running kernel and judges the netdev families itself:
#   - the netdev behind rxe0 (rxe's `parent`) is reported with device/port,
#     with the MTU sysfs shows;
#   - the e1000 flow-control counters come through: roce_link_pause_frames
#     equals rx/tx_flow_control_xon + _xoff of `ethtool -S` (e1000 has no
#     standard pause statistics, so the driver's names are the source);
#   - e1000 discards (rx_no_buffer_count, rx_missed_errors) are mapped;
#   - DCB is reported as unsupported (roce_netdev_info dcb="unsupported"), not as a
#     failure: roce_collector_success{collector="netdev"} is 1.
# Usage: run.sh --nic-model e1000 -a BIN:/guest/roce_exporter BUILD_DIR tests/vm/guest/e2e-netdev.sh
# Exit status: number of failed checks (0 = all good). Output files go to
# /mnt/host when run.sh --share is given.
set -u
EXP=/guest/roce_exporter
O=/tmp/netdev-e2e
grep -q ' /mnt/host ' /proc/mounts && O=/mnt/host
mkdir -p "$O"
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

IF=$(cat /sys/class/infiniband/rxe0/parent 2>/dev/null || echo eth0)
DRV=$(basename "$(readlink /sys/class/net/$IF/device/driver)")
echo "netdev $IF driver $DRV"
[[ $DRV == e1000 ]] || echo "note: NIC driver is $DRV, not e1000 (run.sh --nic-model e1000)"

echo "sample_interval: 1s" > /tmp/netdev.yml
timeout 30 "$EXP" --config.file=/tmp/netdev.yml once > "$O/netdev-once.txt" 2> "$O/netdev-once.stderr"
rc=$?
((rc == 0)) && ok "roce_exporter once" || bad "roce_exporter once exit $rc"
ethtool -S "$IF" > "$O/netdev-ethtool-S.txt" 2>&1

L="netdev=\"$IF\",device=\"rxe0\",port=\"1\""
val() { # exact series -> value (first match)
  awk -v s="$1" 'index($0, s" ") == 1 { print $2; exit }' "$O/netdev-once.txt"
}
stat() { awk -v n="$1:" '$1 == n { print $2 }' "$O/netdev-ethtool-S.txt"; }

mtu=$(cat /sys/class/net/$IF/mtu)
v=$(val "roce_netdev_mtu_bytes{$L}")
[[ $v == "$mtu" ]] && ok "mtu $v" || bad "roce_netdev_mtu_bytes{$L} = '$v', sysfs says $mtu"

for d in rx tx; do
  want=$(( $(stat ${d}_flow_control_xon) + $(stat ${d}_flow_control_xoff) ))
  v=$(val "roce_link_pause_frames_total{$L,direction=\"$d\"}")
  # counters only grow: the exposition was sampled before ethtool ran
  if [[ -n $v ]] && ((v <= want)); then ok "link pause $d $v (ethtool now $want)"; else bad "link pause $d = '$v', ethtool -S $want"; fi
done
for r in rx_no_buffer:rx_no_buffer_count rx_missed:rx_missed_errors; do
  reason=${r%%:*} name=${r#*:}
  v=$(val "roce_netdev_discards_total{$L,reason=\"$reason\"}")
  want=$(stat "$name")
  if [[ -n $v ]] && ((v <= want)); then ok "discards $reason $v"; else bad "discards $reason = '$v', ethtool -S $name $want"; fi
done

dcb=$(grep -o "^roce_netdev_info{$L,[^}]*}" "$O/netdev-once.txt" | grep -o 'dcb="[^"]*"')
[[ $dcb == 'dcb="unsupported"' ]] && ok "DCB unsupported" || bad "roce_netdev_info{$L} has '$dcb', want dcb=\"unsupported\""
v=$(val 'roce_collector_success{collector="netdev"}')
[[ $v == 1 ]] && ok "netdev collector success" || bad "roce_collector_success{collector=\"netdev\"} = '$v'"
grep -q "roce_pfc_enabled{$L" "$O/netdev-once.txt" && bad "PFC series for a netdev without DCB" || ok "no PFC series without DCB"

echo "netdev e2e: $fails failed"
exit $fails
