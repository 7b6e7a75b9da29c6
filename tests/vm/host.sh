# Helpers shared by the host-side drivers e2e.sh, e2e-probe.sh and soak.sh
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
