# Helpers shared by the host-side drivers (e2e*.sh, soak.sh)
# (sourced; bash). The caller sets HERE (this folder) and ROOT (the
# repository) and defines log(). Not part of the image: editing this file
# does not rebuild it.

# vm_image VM: the VM image in folder VM, built unless the one there was
# built from the current build.sh, lib.sh and guest-init.sh (its stamp).
vm_image() {
  local vm=$1 want
  want=$(cat "$HERE/build.sh" "$HERE/lib.sh" "$HERE/guest-init.sh" | cksum)
  if [[ -f $vm/vmlinuz && -f $vm/initramfs.img && "$(cat "$vm/stamp" 2>/dev/null)" == "$want" ]]; then
    log "VM image: $vm (cached, $(cat "$vm/kver" 2>/dev/null))"
  else
    log "building the VM image into $vm"
    bash "$HERE/build.sh" "$vm" || { log "build.sh failed"; exit 2; }
  fi
}

# exporter_binary: sets BIN to $ROCE_EXPORTER_BIN (made absolute), else to a
# fresh `cargo build --release`; exits 2 when there is no executable there.
exporter_binary() {
  if [[ -n ${ROCE_EXPORTER_BIN:-} ]]; then
    BIN=$(realpath "$ROCE_EXPORTER_BIN" 2>/dev/null || printf '%s' "$ROCE_EXPORTER_BIN")
  else
    log "cargo build --release"
    (cd "$ROOT" && cargo build --release --quiet) || { log "cargo build failed"; exit 2; }
    BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/roce_exporter
  fi
  [[ -x $BIN ]] || { log "no exporter binary at $BIN"; exit 2; }
}

# usage: prints the calling script's header comment (its help), exits 0.
usage() {
  sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;/^set -e/d'
  exit 0
}

# timeout_args DEFAULT [ARGS...]: the options of a driver that takes only
# -t/--timeout SEC (TIMEOUT, DEFAULT without) and -h/--help; exits 2 on any
# other argument.
timeout_args() {
  TIMEOUT=$1
  shift
  while (($#)); do
    case $1 in
      -t|--timeout) TIMEOUT=${2:?}; shift 2 ;;
      -h|--help) usage ;;
      *) log "unknown argument $1"; exit 2 ;;
    esac
  done
}

# e2e_prepare DIR: VM (the image cache, $ROCE_VM_DIR), OUT ($E2E_OUT, else
# target/DIR), the image built when stale, and BIN (exporter_binary).
e2e_prepare() {
  VM=${ROCE_VM_DIR:-/tmp/roce-exporter-vm}
  OUT=${E2E_OUT:-$ROOT/target/$1}
  vm_image "$VM"
  exporter_binary
}
