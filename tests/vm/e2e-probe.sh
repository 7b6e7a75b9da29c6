#!/usr/bin/env bash
# e2e-probe.sh [-t SEC]  --  the exporter's verbs probes against a real kernel.
#
# Boots the Soft-RoCE VM (tests/vm/README.md), runs guest/e2e-probe.sh in it
# (probes of rxe0 for >= 30 s, a GID index that does not exist, eth0 taken
# down and up, a CPU/RSS window with probes off and on, ib_send_lat and
# ibv_rc_pingpong as the latency baseline), then tests/vm/check_probe.py.
#
# Options:
#   -t, --timeout SEC   limit for the VM run (default 480)
#   --no-bench          skip the CPU/RSS and latency baseline phase (its
#                       figures are reported, not checked; CI saves a minute)
# Environment:
#   ROCE_VM_DIR=DIR         image cache (default /tmp/roce-exporter-vm)
#   ROCE_EXPORTER_BIN=FILE  use this binary instead of `cargo build --release`
#   E2E_OUT=DIR             where the guest's files go (default target/vm-e2e-probe)
# Exit status: 0 when every check passed; 1 when a check failed; 2 on usage or
# build errors.  The last line printed is "N passed, M failed".
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
log() { printf '[e2e-probe] %s\n' "$*" >&2; }
. "$HERE/host.sh"   # usage, e2e_prepare

TIMEOUT=480
BENCH=1
while (($#)); do
  case $1 in
    -t|--timeout) TIMEOUT=${2:?}; shift 2 ;;
    --no-bench) BENCH=0; shift ;;
    -h|--help) usage ;;
    *) log "unknown argument $1"; exit 2 ;;
  esac
done

e2e_prepare vm-e2e-probe

rm -rf "$OUT"; mkdir -p "$OUT/guest"
EXTRA=()
if ((BENCH == 0)); then
  : > "$OUT/no-bench"
  EXTRA=(-a "$OUT/no-bench:/guest/no-bench")
fi
log "guest run (limit ${TIMEOUT}s)"
set +e
bash "$HERE/run.sh" -t "$TIMEOUT" --share "$OUT/guest" -l "$OUT/console.log" \
  -a "$BIN:/guest/roce_exporter" "${EXTRA[@]}" "$VM" "$HERE/guest/e2e-probe.sh"
vm_rc=$?
python3 "$HERE/check_probe.py" --dir "$OUT/guest" --vm-rc "$vm_rc"
exit $?
