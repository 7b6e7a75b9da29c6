#!/usr/bin/env bash
# run.sh [options] BUILD_DIR [GUEST_SCRIPT]
#
# Boots the kernel+initramfs made by build.sh under qemu, with rxe0 already
# created on eth0, runs GUEST_SCRIPT inside as /guest/run, and exits with the
# script's exit status.  Console output (script stdout/stderr + kernel warnings)
# streams to stdout and is saved to --log.
#
# Options:
#   -a, --add SRC[:DEST]   put host file SRC into the guest at DEST (default
#                          /guest/<name>).  If SRC is a dynamically linked ELF its
#                          ldd libraries are copied too (same paths as on the host),
#                          so host-built binaries run as-is.  Repeatable.  A directory
#                          SRC is copied recursively (no ldd scan).
#   --share DIR            export host DIR read-write over virtio-9p; guest mounts
#                          it at /mnt/host (use it to bring back capture files)
#   -l, --log FILE         console log (default: ./roce-vm.log); \r stripped
#   -t, --timeout SEC      hard limit for the whole qemu run (default 170); on
#                          expiry qemu is killed and run.sh exits 124
#   --accel auto|kvm|tcg   auto (default): KVM if /dev/kvm is usable and not PVM
#                          (kvm_pvm cannot run a stock kernel), else TCG
#   -m, --mem MB           guest RAM (default 512)
#   --smp N                guest vCPUs (default 2)
#   --nics N               number of NICs (default 1); all on one isolated qemu hub
#   --nic-model MODEL      virtio-net-pci (default), e1000, e1000e
#   --wire LOCAL:REMOTE    put NIC 0 on a qemu `dgram` netdev over two unix
#                          datagram sockets instead of the hub: the "wire" to
#                          another VM started with the two paths swapped (and
#                          another --mac-prefix and sr.ip0=)
#   --mac-prefix P         first five bytes of the NICs' MACs (default
#                          52:54:00:00:00; NIC i ends in i+1)
#   --append "ARGS"        extra kernel command line (sr.ip0=, sr.rxe=0, sr.quiet=1)
#   --root-port            put each NIC behind its own pcie-root-port (PCIe
#                          AER reaches the guest's AER driver through it;
#                          virtio-net-pci gets aer=on); the NICs' qdev ids
#                          are nic0, nic1, ...
#   --monitor PATH         the qemu human monitor on unix socket PATH (for the
#                          host: pcie_aer_inject_error, set_link)
#   --shell                interactive shell on the console instead of a script
#   -q, --quiet            do not stream the console, only write the log
# Exit status: the guest script's status; 124 timeout; 125 harness/boot failure.
#
# Networking: the NICs hang off a qemu "hub" with no backend, so no packet can
# leave the VM; rxe loopback traffic never needs the wire anyway. With --wire
# NIC 0 reaches exactly one other qemu process, through sockets on the host's
# file system: still no host IP traffic.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
log() { printf '[run] %s\n' "$*" >&2; }

ADDS=() SHARE="" LOG=./roce-vm.log TIMEOUT=170 ACCEL=auto MEM=512 SMP=2 NICS=1
NIC_MODEL=virtio-net-pci APPEND="" SHELL_MODE=0 QUIET=0 ROOT_PORT=0 MONITOR=
WIRE="" MAC_PREFIX=52:54:00:00:00 LSOCK=""
POS=()
while (($#)); do
  case $1 in
    -a|--add) ADDS+=("$2"); shift 2 ;;
    --share) SHARE=$2; shift 2 ;;
    -l|--log) LOG=$2; shift 2 ;;
    -t|--timeout) TIMEOUT=$2; shift 2 ;;
    --accel) ACCEL=$2; shift 2 ;;
    -m|--mem) MEM=$2; shift 2 ;;
    --smp) SMP=$2; shift 2 ;;
    --nics) NICS=$2; shift 2 ;;
    --nic-model) NIC_MODEL=$2; shift 2 ;;
    --append) APPEND=$2; shift 2 ;;
    --wire) WIRE=$2; shift 2 ;;
    --mac-prefix) MAC_PREFIX=$2; shift 2 ;;
    --root-port) ROOT_PORT=1; shift ;;
    --monitor) MONITOR=$2; shift 2 ;;
    --shell) SHELL_MODE=1; shift ;;
    -q|--quiet) QUIET=1; shift ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;/^set -e/d'; exit 0 ;;
    --) shift; POS+=("$@"); break ;;
    -*) log "unknown option $1"; exit 125 ;;
    *) POS+=("$1"); shift ;;   # options may also follow the positional args
  esac
done
BUILD=${POS[0]:?usage: run.sh [options] BUILD_DIR [GUEST_SCRIPT]}
SCRIPT=${POS[1]:-}
[[ -f $BUILD/vmlinuz && -f $BUILD/initramfs.img ]] || { log "$BUILD: run build.sh first"; exit 125; }
[[ -n $SCRIPT || $SHELL_MODE = 1 ]] || { log "need a GUEST_SCRIPT (or --shell)"; exit 125; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/roce-vm.XXXXXX")
QPID=""
cleanup() {
  [[ -n $QPID ]] && kill "$QPID" 2>/dev/null || true
  rm -rf "$WORK"
  [[ -n $LSOCK ]] && rm -f "$LSOCK"
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---------------------------------------------------------------- extra cpio
# Everything per-run (script, injected files) goes into a second, uncompressed
# cpio appended to the base image; the kernel unpacks both, later entries win.
ST=$WORK/extra
mkdir -p "$ST/guest"
if [[ -n $SCRIPT ]]; then
  cp "$SCRIPT" "$ST/guest/run"; chmod 755 "$ST/guest/run"
fi
for spec in "${ADDS[@]}"; do
  src=${spec%%:*}; dest=${spec#*:}
  [[ $dest == "$spec" ]] && dest=/guest/$(basename "$src")
  [[ -e $src ]] || { log "--add: $src not found"; exit 125; }
  if [[ -d $src ]]; then
    mkdir -p "$ST$dest"; cp -a "$src/." "$ST$dest/"
  else
    mkdir -p "$ST$(dirname "$dest")"; cp -L "$src" "$ST$dest"
    # A debug build carries ~100 MB of debug info the guest never reads; in
    # the initramfs (RAM) it would not fit a small VM's rootfs.
    if is_dynamic_elf "$src" && command -v objcopy >/dev/null; then
      objcopy --strip-debug "$ST$dest" 2>/dev/null || cp -L "$src" "$ST$dest"
    fi
    # libraries of a host binary (already in the base image for glibc/libibverbs;
    # the copies are identical, extra ones e.g. libgcc_s are added here)
    is_dynamic_elf "$src" && copy_libs "$src"
  fi
done
# directories the base image creates as symlinks must not be replaced by dirs
for d in bin sbin lib lib64; do
  if [[ -d $ST/$d && ! -L $ST/$d ]]; then
    mkdir -p "$ST/usr/$d"; cp -a "$ST/$d/." "$ST/usr/$d/"; rm -rf "${ST:?}/$d"
  fi
done
INITRD=$WORK/initrd.img
cp "$BUILD/initramfs.img" "$INITRD"
# pad to a 512-byte boundary: an uncompressed cpio that follows a compressed one
# is only recognised at a 4-byte aligned offset (zero bytes are skipped)
sz=$(stat -c %s "$INITRD"); pad=$(( (512 - sz % 512) % 512 ))
head -c "$pad" /dev/zero >> "$INITRD"
(cd "$ST" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) >> "$INITRD"

# ---------------------------------------------------------------- qemu command
case $ACCEL in
  # auto: KVM only if /dev/kvm is usable AND is real hardware virtualisation.
  # Some sandboxes (e.g. Firecracker VMs with the kvm_pvm module) offer a /dev/kvm
  # backed by PVM, which only runs specially built PVM guest kernels: Debian's
  # kernel hangs right after "Probing EDD" there, and qemu's "-accel kvm -accel
  # tcg" fallback does not help because KVM itself initialises fine.
  auto) if [[ -r /dev/kvm && -w /dev/kvm && ! -d /sys/module/kvm_pvm ]]; then
          ACC=(-accel kvm -accel tcg); ACCEL=auto:kvm
        else
          ACC=(-accel tcg); ACCEL=auto:tcg
        fi ;;
  kvm)  ACC=(-accel kvm) ;;
  tcg)  ACC=(-accel tcg) ;;   # multi-threaded TCG is the default for x86 on x86
  *) log "bad --accel"; exit 125 ;;
esac
NETARGS=()
# fixed MACs: the rxe node GUID derives from the MAC, so tests can rely on it
for ((i = 0; i < NICS; i++)); do
  BUS=""
  if ((ROOT_PORT)); then
    NETARGS+=(-device "pcie-root-port,id=rp$i,chassis=$((i + 1)),slot=$((i + 1))")
    BUS=",bus=rp$i"
    # virtio-pci has the AER capability only when asked for
    [[ $NIC_MODEL == virtio-net-pci ]] && BUS+=",aer=on"
  fi
  if ((i == 0)) && [[ -n $WIRE ]]; then
    # qemu binds LOCAL and sends to REMOTE; frames sent before the other VM
    # has bound REMOTE are dropped, as on an unplugged cable
    IFS=: read -r lsock rsock <<<"$WIRE"
    [[ -n $lsock && -n $rsock ]] || { log "--wire wants LOCAL:REMOTE"; exit 125; }
    rm -f "$lsock"; LSOCK=$lsock
    NETARGS+=(-netdev "dgram,id=n$i,local.type=unix,local.path=$lsock,remote.type=unix,remote.path=$rsock")
  else
    NETARGS+=(-netdev "hubport,id=n$i,hubid=0")
  fi
  NETARGS+=(-device "$NIC_MODEL,netdev=n$i,id=nic$i$BUS,mac=$MAC_PREFIX:$(printf %02x $((i + 1)))")
done
[[ -n $MONITOR ]] && NETARGS+=(-monitor "unix:$MONITOR,server=on,wait=off")
SHAREARGS=()
if [[ -n $SHARE ]]; then
  mkdir -p "$SHARE"
  SHAREARGS=(-virtfs "local,path=$(cd "$SHARE" && pwd),mount_tag=host,security_model=none,id=host")
fi
KARGS="console=ttyS0 loglevel=4 panic=-1 rdinit=/init"
((SHELL_MODE)) && KARGS+=" sr.shell=1"
[[ -n $APPEND ]] && KARGS+=" $APPEND"

RAWLOG=$WORK/console.raw
if ((SHELL_MODE)); then
  CHAR=(-chardev "stdio,id=con,signal=on,logfile=$RAWLOG")
elif ((QUIET)); then
  CHAR=(-chardev "file,id=con,path=$RAWLOG")
else
  CHAR=(-chardev "stdio,id=con,signal=off,logfile=$RAWLOG")
fi
QEMU=(qemu-system-x86_64 -name roce-vm -machine q35 "${ACC[@]}" -cpu max
      -smp "$SMP" -m "$MEM" -nodefaults -no-user-config -display none -no-reboot
      "${CHAR[@]}" -serial chardev:con
      -kernel "$BUILD/vmlinuz" -initrd "$INITRD" -append "$KARGS"
      "${NETARGS[@]}" "${SHAREARGS[@]}")

log "accel=${ACCEL} mem=${MEM}M smp=$SMP nics=$NICS nic-model=$NIC_MODEL${WIRE:+ wire=$WIRE} timeout=${TIMEOUT}s"
T0=$(date +%s.%N)
set +e
if ((SHELL_MODE)); then
  timeout -k 5 "$TIMEOUT" "${QEMU[@]}"
  qrc=$?
else
  # stdin from /dev/null: qemu must not grab the caller's terminal
  # (the hub warning is expected: the hub deliberately has no host-side port)
  timeout -k 5 "$TIMEOUT" "${QEMU[@]}" </dev/null \
    2> >(grep -v 'is not connected to host network' >&2) &
  QPID=$!
  wait "$QPID"; qrc=$?
  QPID=""
fi
set -e
T1=$(date +%s.%N)
tr -d '\r' < "$RAWLOG" > "$LOG" 2>/dev/null || true
ELAPSED=$(awk -v a="$T0" -v b="$T1" 'BEGIN{printf "%.1f", b-a}')

rc=$(sed -n 's/.*ROCE-VM-EXIT=\([0-9][0-9]*\).*/\1/p' "$LOG" | tail -1)
if [[ $qrc == 124 || $qrc == 137 ]]; then
  log "TIMEOUT after ${ELAPSED}s (limit ${TIMEOUT}s); log: $LOG"; exit 124
elif [[ -z $rc ]]; then
  log "no exit marker (qemu rc=$qrc) after ${ELAPSED}s; log: $LOG"
  tail -20 "$LOG" >&2; exit 125
fi
log "guest exit status $rc, ${ELAPSED}s wall (qemu rc=$qrc); log: $LOG"
exit "$rc"
