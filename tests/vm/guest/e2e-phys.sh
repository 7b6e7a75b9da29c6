#!/bin/bash
# Guest side of tests/vm/e2e-phys.sh: the physical-layer source against a
# real kernel. The NIC (virtio-net-pci with AER) sits behind a
# pcie-root-port; the host
# injects AER errors with qemu's `pcie_aer_inject_error` (a correctable one,
# then a nonfatal Completion Timeout) and toggles the link with `set_link`
# when this script asks (files in the --share folder: want-aer /
# aer-injected, want-flap / flapped). Checks,
# printing ok/FAIL lines:
#   - the kernel's AER totals of the NIC function moved (correctable where
#     qemu forwards ERR_COR, 8.0 on; nonfatal), the exporter's
#     roce_pcie_aer_errors_total{role="nic",severity=...} shows the new
#     totals, and /findings has pcie_aer_errors for the NIC;
#   - the root port above the NIC, found from the kernel's sysfs nesting,
#     is roce_pcie_bridge_aer_errors_total{link="nic",netdevs=<netdev>}
#     with the kernel's TOTAL_ERR_COR (absent where it has no AER files);
#     a nonfatal error injected on the port itself (want-rp-aer /
#     rp-aer-injected) moves the port's count, the series follows and
#     /findings has pcie_bridge_aer_errors for the netdev;
#   - carrier_down_count moved, roce_netdev_carrier_transitions_total
#     {direction="down"} shows it, and /findings has link_flap for rxe0
#     with carrier_down_count as its evidence;
#   - FEC, module EEPROM and devlink: virtio-net has none of them, so their
#     families are absent (never 0) and roce_collector_success{collector="phys"}
#     is 1.
# Exit status: number of failed checks.
set -u
O=/mnt/host
grep -q ' /mnt/host ' /proc/mounts || { echo "no --share mounted at /mnt/host"; exit 2; }
EXP=/guest/roce_exporter
ADDR=127.0.0.1:9879
TMO=60
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
step() { echo "[phys $(cut -d' ' -f1 /proc/uptime)] $*"; }

IF=$(cat /sys/class/infiniband/rxe0/parent 2>/dev/null || echo eth0)
# the PCI function: the device itself, or its parent for virtio-net (virtio0)
DEV=$(readlink -f "/sys/class/net/$IF/device")
DRV=$(basename "$(readlink "$DEV/driver")")
[[ $(basename "$DEV") == ????:??:??.? ]] || DEV=$(dirname "$DEV")
PCI=$(basename "$DEV")
echo "netdev $IF pci $PCI driver $DRV"
lspci -tv > "$O/lspci-tree.txt" 2>&1
lspci -vvv -s "$PCI" > "$O/lspci-nic.txt" 2>&1
lspci -vvv -s "$(basename "$(dirname "$DEV")")" > "$O/lspci-root-port.txt" 2>&1
# Linux 6.1 enables a device's error reporting only when its driver asks
# (pci_enable_pcie_error_reporting; the PCI core does it for every device
# from 6.4 on). Without Correctable Error Reporting Enable in Device Control
# the device sends no ERR_COR message and qemu's injection stays in its
# status register.
if grep -q 'DevCtl:.*CorrErr-' "$O/lspci-nic.txt"; then
  # Device Control (PCI Express capability + 8): CorrErr, NonFatalErr,
  # FatalErr and UnsupReq reporting enable (bits 0-3); setpci comes from the
  # host (e2e-phys.sh -a).
  setpci -s "$PCI" CAP_EXP+8.w=000f:000f \
    && echo "note: error reporting was off in $PCI's Device Control (Linux 6.1); enabled with setpci"
  lspci -vvv -s "$PCI" | grep 'DevCtl:' >> "$O/lspci-nic.txt"
fi
# qemu before 8.0 forwards no ERR_COR at all and an uncorrectable error only
# where SERR# is enabled (pcie_aer_msg_alldev before "hw/pci/aer: Implement
# PCI_ERR_UNCOR_MASK register"/"Add missing routing for AER errors",
# QEMU 8.0): SERR# on the NIC and on the root port, and the root port's
# bridge control SERR#, so that the host's nonfatal injection reaches the
# AER driver.
RP=$(basename "$(dirname "$DEV")")
setpci -s "$PCI" COMMAND=0100:0100 && setpci -s "$RP" COMMAND=0100:0100 \
  && setpci -s "$RP" BRIDGE_CONTROL=0002:0002 && echo "note: SERR# enabled on $PCI and $RP"
ls "$DEV" > "$O/nic-sysfs.txt" 2>&1
dmesg | grep -iE 'aer|pcieport' > "$O/dmesg-aer-boot.txt" 2>&1
total() { awk '$1 ~ /^TOTAL_ERR_COR$/ { print $2 }' "$DEV/aer_dev_correctable" 2>/dev/null; }
nonfatal() { awk '$1 ~ /^TOTAL_ERR_NONFATAL$/ { print $2 }' "$DEV/aer_dev_nonfatal" 2>/dev/null; }
carrier_down() { cat "/sys/class/net/$IF/carrier_down_count" 2>/dev/null; }
[[ -r $DEV/aer_dev_correctable ]] && ok "aer_dev_correctable present: $(total)" || bad "no $DEV/aer_dev_correctable (AER capability or CONFIG_PCIEAER missing)"

# The phys source reads AER every netdevs.phys_interval (30 s by default):
# 2 s here, so that each injected error shows within seconds.
cat > /tmp/phys.yml <<EOF
sample_interval: 1s
netdevs:
  phys_interval: 2s
EOF
"$EXP" --config.file=/tmp/phys.yml --web.listen-address=$ADDR > "$O/phys-exporter.log" 2>&1 &
EPID=$!
scrape() { curl -sS -f --max-time 10 -o "$O/$2" "http://$ADDR$1"; }
val() { awk -v s="$1" 'index($0, s" ") == 1 { print $2; exit }' "$O/$2"; }
# scrape_until NAME SERIES WANT: scrape /metrics until SERIES has value WANT
scrape_until() {
  local deadline=$((SECONDS + TMO))
  while ((SECONDS < deadline)); do
    if scrape /metrics "$1" && [[ "$(val "$2" "$1")" == "$3" ]]; then return 0; fi
    sleep 0.5
  done
  return 1
}
# wait_file NAME: wait for the host's answer in the share
wait_file() {
  local deadline=$((SECONDS + TMO))
  while ((SECONDS < deadline)); do [[ -e $O/$1 ]] && return 0; sleep 0.3; done
  return 1
}

NIC="pci=\"$PCI\",role=\"nic\",netdev=\"$IF\""
before=$(total)
step "waiting for the exporter's first AER reading ($before)"
scrape_until scrape-before.txt "roce_pcie_aer_errors_total{$NIC,severity=\"correctable\"}" "$before" \
  && ok "exporter reads TOTAL_ERR_COR $before" || bad "roce_pcie_aer_errors_total{$NIC,severity=\"correctable\"} never read $before"
# The root port above the NIC, found from the kernel's own sysfs nesting:
# one series per severity with what it serves, the kernel's totals.
RPDIR=$(dirname "$DEV")
BRIDGE="pci=\"$RP\",link=\"nic\",netdevs=\"$IF\",gpus=\"\""
if [[ -r $RPDIR/aer_dev_correctable ]]; then
  rp_before=$(awk '$1 == "TOTAL_ERR_COR" { print $2 }' "$RPDIR/aer_dev_correctable")
  scrape_until scrape-bridge.txt "roce_pcie_bridge_aer_errors_total{$BRIDGE,severity=\"correctable\"}" "$rp_before" \
    && ok "root port $RP: roce_pcie_bridge_aer_errors_total{link=\"nic\",netdevs=\"$IF\"} reads TOTAL_ERR_COR $rp_before" \
    || bad "roce_pcie_bridge_aer_errors_total{$BRIDGE,severity=\"correctable\"} never read $rp_before"
else
  grep -q "^roce_pcie_bridge_aer_errors_total{pci=\"$RP\"" "$O/scrape-before.txt" \
    && bad "root port $RP has no AER files but a series" || ok "root port $RP without AER files: no series (absent, not 0)"
fi
grep -q '^roce_fec_' "$O/scrape-before.txt" && bad "FEC families on $DRV (it has no FEC)" || ok "no FEC families on $DRV (absent, not 0)"
grep -q '^roce_module_' "$O/scrape-before.txt" && bad "module families on $DRV" || ok "no module families on $DRV"
[[ "$(val 'roce_collector_success{collector="phys"}' scrape-before.txt)" == 1 ]] && ok "phys collector success" || bad "phys collector not successful"

step "asking the host for AER errors (a correctable one, then a nonfatal one)"
nf_before=$(nonfatal)
touch "$O/want-aer"
wait_file aer-injected && ok "host injected: $(tr '\n' ' ' < "$O/aer-injected")" || bad "host did not inject"
deadline=$((SECONDS + 20))
while ((SECONDS < deadline)) && [[ "$(total)" == "$before" && "$(nonfatal)" == "$nf_before" ]]; do sleep 0.3; done
sleep 1
after=$(total) nf_after=$(nonfatal)
dmesg | grep -iE 'aer|pcieport' > "$O/dmesg-aer.txt" 2>&1
lspci -vvv -s "$RP" > "$O/lspci-root-port-after.txt" 2>&1
if [[ $after != "$before" ]]; then
  ok "kernel TOTAL_ERR_COR $before -> $after"
  scrape_until scrape-aer.txt "roce_pcie_aer_errors_total{$NIC,severity=\"correctable\"}" "$after" \
    && ok "exporter shows TOTAL_ERR_COR $after" || bad "exporter did not show TOTAL_ERR_COR $after"
else
  echo "note: TOTAL_ERR_COR did not move ($before): qemu before 8.0 forwards no ERR_COR"
fi
if [[ -n $nf_after && $nf_after != "$nf_before" ]]; then
  ok "kernel TOTAL_ERR_NONFATAL $nf_before -> $nf_after"
  scrape_until scrape-aer.txt "roce_pcie_aer_errors_total{$NIC,severity=\"nonfatal\"}" "$nf_after" \
    && ok "exporter shows TOTAL_ERR_NONFATAL $nf_after" || bad "exporter did not show TOTAL_ERR_NONFATAL $nf_after"
fi
[[ $after != "$before" || $nf_after != "$nf_before" ]] || bad "no AER counter moved in the kernel (TOTAL_ERR_COR $before, TOTAL_ERR_NONFATAL $nf_before)"
sleep 2
scrape /findings findings-aer.json
grep -q '"pcie_aer_errors"' "$O/findings-aer.json" && ok "finding pcie_aer_errors" || bad "no pcie_aer_errors finding"

# An error the root port itself detects is counted on the port, not on the
# NIC: the exporter's bridge series follows it and pcie_bridge_aer_errors
# names the NIC the port serves.
if [[ -r $RPDIR/aer_dev_nonfatal ]]; then
  rp_nonfatal() { awk '$1 == "TOTAL_ERR_NONFATAL" { print $2 }' "$RPDIR/aer_dev_nonfatal" 2>/dev/null; }
  rp_nf_before=$(rp_nonfatal)
  step "asking the host for a nonfatal AER error on the root port $RP ($rp_nf_before)"
  touch "$O/want-rp-aer"
  wait_file rp-aer-injected && ok "host injected: $(tr '\n' ' ' < "$O/rp-aer-injected")" || bad "host did not inject on the root port"
  deadline=$((SECONDS + 20))
  while ((SECONDS < deadline)) && [[ "$(rp_nonfatal)" == "$rp_nf_before" ]]; do sleep 0.3; done
  rp_nf_after=$(rp_nonfatal)
  dmesg | grep -iE 'aer|pcieport' > "$O/dmesg-aer-root-port.txt" 2>&1
  if [[ $rp_nf_after != "$rp_nf_before" ]]; then
    ok "kernel root port TOTAL_ERR_NONFATAL $rp_nf_before -> $rp_nf_after"
    scrape_until scrape-bridge.txt "roce_pcie_bridge_aer_errors_total{$BRIDGE,severity=\"nonfatal\"}" "$rp_nf_after" \
      && ok "exporter shows the root port's TOTAL_ERR_NONFATAL $rp_nf_after" || bad "exporter did not show the root port's TOTAL_ERR_NONFATAL $rp_nf_after"
    sleep 2
    scrape /findings findings-bridge.json
    grep -q '"pcie_bridge_aer_errors"' "$O/findings-bridge.json" && grep -q "\"netdev\": *\"$IF\"" "$O/findings-bridge.json" \
      && ok "finding pcie_bridge_aer_errors for $IF" || bad "no pcie_bridge_aer_errors finding for $IF"
  else
    echo "note: the root port's TOTAL_ERR_NONFATAL did not move ($rp_nf_before): qemu did not report the injected error"
  fi
fi

down=$(carrier_down)
step "asking the host to toggle the link (carrier_down_count $down)"
# set_link: virtio-net keeps its carrier on an administrative down, so the
# link is taken away under it, as a pulled cable would
touch "$O/want-flap"
wait_file flapped && ok "host toggled the link" || bad "host did not toggle the link"
deadline=$((SECONDS + 20))
while ((SECONDS < deadline)) && [[ "$(carrier_down)" == "$down" ]]; do sleep 0.3; done
down2=$(carrier_down)
[[ $down2 != "$down" ]] && ok "kernel carrier_down_count $down -> $down2" || bad "carrier_down_count did not move"
L="netdev=\"$IF\",device=\"rxe0\",port=\"1\""
scrape_until scrape-flap.txt "roce_netdev_carrier_transitions_total{$L,direction=\"down\"}" "$down2" \
  && ok "exporter shows carrier down $down2" || bad "exporter did not show carrier down $down2"
sleep 2
scrape /findings findings-flap.json
grep -q '"link_flap"' "$O/findings-flap.json" && grep -q 'carrier_down_count +' "$O/findings-flap.json" \
  && ok "finding link_flap from carrier_down_count" || bad "no link_flap finding from carrier_down_count"

kill "$EPID" 2>/dev/null
wait "$EPID" 2>/dev/null
echo "$fails failed"
exit "$fails"
