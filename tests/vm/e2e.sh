#!/usr/bin/env bash
# e2e.sh [--nic-model MODEL] [-t SEC]  --  roce_exporter against a real kernel.
#
# Boots Debian's kernel with Soft-RoCE (rxe0 on eth0) in qemu, runs the
# exporter built here inside it, makes RDMA traffic, and checks the scrapes
# against what the same kernel reports (tests/vm/check_e2e.py).  Run from
# anywhere; CI calls `bash tests/vm/e2e.sh` from the repository root.
# Needs root the first time (build.sh apt-installs the host packages).
#
# Options:
#   --nic-model MODEL   NIC under rxe0: virtio-net-pci (default), e1000, e1000e
#   -t, --timeout SEC   limit for the VM run (default 180)
# Environment:
#   ROCE_VM_DIR=DIR         image cache (default /tmp/roce-exporter-vm); rebuilt
#                           when tests/vm/{build,lib,guest-init}.sh change
#   ROCE_EXPORTER_BIN=FILE  use this binary instead of `cargo build --release`
#   E2E_OUT=DIR             where the guest's files and the console log go
#                           (default target/vm-e2e; emptied first)
# Exit status: 0 when every check passed; 1 when a check failed; 2 on usage or
# build errors.  The last line printed is "N passed, M failed".
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
log() { printf '[e2e] %s\n' "$*" >&2; }
. "$HERE/host.sh"   # vm_image, exporter_binary

NIC_MODEL=virtio-net-pci TIMEOUT=180
while (($#)); do
  case $1 in
    --nic-model) NIC_MODEL=${2:?}; shift 2 ;;
    --nic-model=*) NIC_MODEL=${1#*=}; shift ;;
    -t|--timeout) TIMEOUT=${2:?}; shift 2 ;;
    -h|--help) usage ;;
    *) log "unknown argument $1"; exit 2 ;;
  esac
done
case $NIC_MODEL in virtio-net-pci|e1000|e1000e) ;; *) log "unsupported --nic-model $NIC_MODEL"; exit 2 ;; esac

T0=$(date +%s)
VM=${ROCE_VM_DIR:-/tmp/roce-exporter-vm}
OUT=${E2E_OUT:-$ROOT/target/vm-e2e}

# ---- 1. the VM image, built once per harness version
vm_image "$VM"

# the host-side check is python3 (stdlib only); a minimal Debian may lack it
if ! command -v python3 >/dev/null; then
  log "apt-get install python3"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y \
    --no-install-recommends python3 >&2 || { log "python3 missing"; exit 2; }
fi

# ---- 2. the exporter
exporter_binary
T1=$(date +%s)

# ---- 3. the guest run
rm -rf "$OUT"; mkdir -p "$OUT/guest"
# the driver -> family table of this very binary (hidden `docs` subcommand)
"$BIN" docs metrics > "$OUT/metrics-reference.md" 2>/dev/null || : > "$OUT/metrics-reference.md"
log "guest run (nic-model $NIC_MODEL, limit ${TIMEOUT}s)"
set +e
bash "$HERE/run.sh" -t "$TIMEOUT" --nic-model "$NIC_MODEL" --share "$OUT/guest" \
  -l "$OUT/console.log" -a "$BIN:/guest/roce_exporter" -a "$HERE/guest/e2e-netdev.sh:/guest/e2e-netdev.sh" \
  "$VM" "$HERE/guest/e2e-rdma.sh"
vm_rc=$?
set -e
T2=$(date +%s)
log "guest run: status $vm_rc, $((T2 - T1))s (image + build $((T1 - T0))s)"

# ---- 4. the checks (their summary is the last line printed)
log "files: $OUT (total so far $(($(date +%s) - T0))s)"
set +e
python3 "$HERE/check_e2e.py" --dir "$OUT/guest" --vm-rc "$vm_rc" --nic-model "$NIC_MODEL" \
  --reference "$OUT/metrics-reference.md" --table-source "$ROOT/crates/exposition/src/hw_counters.rs"
rc=$?
set -e
exit "$rc"
