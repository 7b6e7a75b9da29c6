#!/usr/bin/env bash
# e2e-phys.sh [-t SEC]  --  the physical-layer source against a real kernel.
#
# Boots the Soft-RoCE VM (tests/vm/run.sh) with rxe0 on a virtio-net-pci (with
# its AER capability, aer=on) that sits
# behind a pcie-root-port of the q35 machine, and the qemu monitor on a unix
# socket. The guest (guest/e2e-phys.sh) runs the exporter and asks, through
# files in the shared folder, for two events this script makes with the
# monitor: a correctable AER error on the NIC (`pcie_aer_inject_error nic0
# BAD_TLP`), a nonfatal one on the root port above it (`pcie_aer_inject_error
# rp0 0x4000`) and a link flap (`set_link nic0 off`, then on). The guest
# checks that the kernel's counters moved and that the exporter's families
# and findings (pcie_aer_errors, pcie_bridge_aer_errors, link_flap from
# carrier_down_count) followed.
#
# Options:
#   -t, --timeout SEC   limit for the VM run (default 240)
# Environment: ROCE_VM_DIR, ROCE_EXPORTER_BIN, E2E_OUT (default
# target/vm-phys) as for e2e.sh.
# Exit status: 0 when every guest check passed, 1 otherwise, 2 on usage or
# build errors.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
log() { printf '[e2e-phys] %s\n' "$*" >&2; }
. "$HERE/host.sh"   # timeout_args, e2e_prepare

timeout_args 240 "$@"

e2e_prepare vm-phys
command -v setpci >/dev/null || { log "setpci (pciutils) missing on the host"; exit 2; }
rm -rf "$OUT"; mkdir -p "$OUT/guest"
MON=$OUT/monitor.sock

# monitor CMD: one human-monitor command over the unix socket; prints the reply
monitor() {
  python3 - "$MON" "$1" <<'EOF'
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.settimeout(5)
def drain():
    out = b""
    try:
        while not out.rstrip().endswith(b"(qemu)"):
            chunk = s.recv(4096)
            if not chunk:
                break
            out += chunk
    except socket.timeout:
        pass
    return out
drain()
s.sendall(sys.argv[2].encode() + b"\n")
print(drain().decode(errors="replace").replace("\r", ""))
EOF
}

log "guest run (virtio-net-pci with AER behind pcie-root-port, limit ${TIMEOUT}s)"
bash "$HERE/run.sh" -t "$TIMEOUT" --nic-model virtio-net-pci --root-port --monitor "$MON" \
  --share "$OUT/guest" -l "$OUT/console.log" -a "$BIN:/guest/roce_exporter" \
  -a "$(command -v setpci):/usr/bin/setpci" \
  "$VM" "$HERE/guest/e2e-phys.sh" &
RUN=$!
aer_done=0 rp_done=0 flap_done=0
while kill -0 "$RUN" 2>/dev/null; do
  if ((!aer_done)) && [[ -e $OUT/guest/want-aer ]]; then
    # BAD_TLP: correctable; 0x4000: PCI_ERR_UNC_COMP_TIME, nonfatal by default
    monitor "pcie_aer_inject_error nic0 BAD_TLP" > "$OUT/aer-inject.txt" 2>&1 || true
    sleep 2
    monitor "pcie_aer_inject_error nic0 0x4000" >> "$OUT/aer-inject.txt" 2>&1 || true
    printf 'pcie_aer_inject_error nic0 BAD_TLP\npcie_aer_inject_error nic0 0x4000\n' > "$OUT/guest/aer-injected"
    aer_done=1
  fi
  if ((!rp_done)) && [[ -e $OUT/guest/want-rp-aer ]]; then
    # a Completion Timeout the root port itself detects: counted on the port
    monitor "pcie_aer_inject_error rp0 0x4000" > "$OUT/aer-inject-root-port.txt" 2>&1 || true
    echo "pcie_aer_inject_error rp0 0x4000" > "$OUT/guest/rp-aer-injected"
    rp_done=1
  fi
  if ((!flap_done)) && [[ -e $OUT/guest/want-flap ]]; then
    monitor "set_link nic0 off" > "$OUT/set-link.txt" 2>&1 || true
    sleep 3
    monitor "set_link nic0 on" >> "$OUT/set-link.txt" 2>&1 || true
    echo "set_link nic0 off/on" > "$OUT/guest/flapped"
    flap_done=1
  fi
  sleep 0.5
done
set +e
wait "$RUN"
rc=$?
set -e
grep -E '^(ok|FAIL) ' "$OUT/console.log" || true
log "guest exit status $rc; files in $OUT"
((rc == 0)) && exit 0 || exit 1
