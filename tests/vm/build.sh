#!/usr/bin/env bash
# build.sh OUTDIR  --  build a tiny qemu-bootable Linux with Soft-RoCE (rdma_rxe)
# for roce_exporter's real-kernel tests (see tests/vm/README.md).
#
# Produces in OUTDIR:
#   vmlinuz              Debian's own signed kernel image (from linux-image-<KVER>)
#   initramfs.img        busybox + kernel modules (rxe, ib_core, ib_uverbs, rdma_cm,
#                        virtio, 9p, ...) + rdma-core userspace (libibverbs, librxe
#                        provider, ibv_* tools, perftest, rdma tool, ethtool, lspci,
#                        curl, tc with sch_netem, sch_prio
#                        and cls_u32)
#                        + the host's glibc, all copied with their ldd closure
#   manifest.txt         exact kernel/package versions that went in
#   config-<KVER>        the kernel's .config (for checking CONFIG_* options)
#   debs/                the downloaded kernel .deb (reused by the next build)
#   (kernel-root/ = dpkg -x of the kernel, ~400 MB, and stage/ = the unpacked
#    initramfs are deleted at the end unless KEEP_TREES=1)
#
# Why it works with no RDMA on the host: nothing is loaded into the host kernel;
# the Debian kernel package is only unpacked (dpkg -x) and booted by qemu.
#
# Userspace is copied from the HOST's installed Debian packages (installed here
# with apt-get if missing).  That is deliberate: the guest then has exactly the
# host's glibc/libibverbs, so a binary built on the host (e.g. the exporter,
# linked against glibc + libibverbs) runs unchanged in the guest.
#
# Environment knobs:
#   KVER=6.1.0-57-amd64      kernel ABI to use (default: whatever the
#                            linux-image-amd64 metapackage currently depends on)
#   EXTRA_BINS="/usr/bin/strace ..."   more host executables to copy (with libs)
#   EXTRA_MODULES="mlx5_ib ..."        more kernel modules (deps resolved)
#   NO_APT=1                 never call apt-get install (fail if tools missing)
#   KEEP_TREES=1             keep kernel-root/ and stage/ for inspection
#   COMPRESS=none|gzip       initramfs compression (default none: ~38 MB instead of
#                            15 MB, but the guest reaches /init seconds sooner under
#                            TCG because the kernel skips the decompression)
#
# Needs root only for apt-get install and mknod /dev/console (the init script
# copes without the node).  Idempotent: re-running reuses OUTDIR/debs.
set -euo pipefail

OUT=${1:?usage: build.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
log() { printf '[build] %s\n' "$*" >&2; }

# ---------------------------------------------------------------- host packages
HOST_PKGS=(qemu-system-x86 busybox-static kmod cpio gzip iproute2 ethtool curl
           rdma-core ibverbs-providers libibverbs1 ibverbs-utils perftest
           pciutils pci.ids)
missing=()
for p in "${HOST_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
APT=(apt-get -o DPkg::Lock::Timeout=300)
apt_updated=0
apt_update() { ((apt_updated)) || { log "apt-get update"; "${APT[@]}" update -q >&2; apt_updated=1; }; }
if ((${#missing[@]})); then
  [[ -n ${NO_APT:-} ]] && { log "missing host packages: ${missing[*]}"; exit 1; }
  log "apt-get install ${missing[*]}"
  # a fresh machine may have no (or stale) package lists: update once and retry
  DEBIAN_FRONTEND=noninteractive "${APT[@]}" install -y --no-install-recommends "${missing[@]}" >&2 ||
    { apt_update; DEBIAN_FRONTEND=noninteractive "${APT[@]}" install -y --no-install-recommends "${missing[@]}" >&2; }
fi

# ---------------------------------------------------------------- kernel
# linux-image-amd64 is a metapackage: "Depends: linux-image-6.1.0-NN-amd64 (= ver)"
kver_from_apt() {
  apt-cache depends linux-image-amd64 2>/dev/null |
    sed -n 's/^ *Depends: linux-image-\([0-9].*-amd64\)$/\1/p' | sort -V | tail -1
}
if [[ -z ${KVER:-} ]]; then
  # a kernel already downloaded into OUTDIR wins: rebuilds then need no network
  KVER=$(ls "$OUT"/debs/linux-image-*-amd64_*.deb 2>/dev/null | sed -n 's|.*/linux-image-\(.*-amd64\)_.*|\1|p' | sort -V | tail -1 || true)
  [[ -n $KVER ]] || KVER=$(kver_from_apt)
  [[ -n $KVER || -n ${NO_APT:-} ]] || { apt_update; KVER=$(kver_from_apt); }
  [[ -n $KVER ]] || { log "cannot find linux-image-*-amd64 via apt-cache (run apt-get update)"; exit 1; }
fi
KPKG=linux-image-$KVER
mkdir -p "$OUT/debs"
if ! ls "$OUT/debs/${KPKG}"_*.deb >/dev/null 2>&1; then
  log "apt-get download $KPKG"
  # apt-get download writes to cwd; the _apt sandbox warning as root is harmless.
  # Stale lists name a version the mirror no longer has: update once and retry.
  (cd "$OUT/debs" && apt-get download "$KPKG" >&2) ||
    { [[ -z ${NO_APT:-} ]] && apt_update && (cd "$OUT/debs" && apt-get download "$KPKG" >&2); }
fi
KDEB=$(ls "$OUT/debs/${KPKG}"_*.deb | sort -V | tail -1)
KROOT=$OUT/kernel-root
if [[ ! -f $KROOT/boot/vmlinuz-$KVER ]]; then
  log "dpkg -x $(basename "$KDEB")"
  rm -rf "$KROOT"; mkdir -p "$KROOT"
  dpkg -x "$KDEB" "$KROOT"
fi
# depmod of the full extracted tree, only used on the host to resolve deps
[[ -f $KROOT/lib/modules/$KVER/modules.dep ]] || depmod -b "$KROOT" "$KVER"
cp "$KROOT/boot/vmlinuz-$KVER" "$OUT/vmlinuz"
cp "$KROOT/boot/config-$KVER" "$OUT/config-$KVER"

# ---------------------------------------------------------------- staging tree
ST=$OUT/stage
rm -rf "$ST"
mkdir -p "$ST"/{usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu,usr/lib64,etc,proc,sys,dev,tmp,run,root,mnt/host,guest,var/tmp}
# Debian 12 is merged-/usr: keep the same layout so ldd paths resolve identically
ln -s usr/bin "$ST/bin"; ln -s usr/sbin "$ST/sbin"; ln -s usr/lib "$ST/lib"; ln -s usr/lib64 "$ST/lib64"
chmod 1777 "$ST/tmp" "$ST/var/tmp"

. "$HERE/lib.sh"   # copy_file / copy_elf (into $ST)

# busybox provides the small tools; real tools added below win because busybox
# links are only created for names that are not already present.
# /bin/sh is dash (bash also included), NOT busybox ash: Debian's busybox is built
# with FEATURE_SH_STANDALONE, so its ash runs its own applets (ip, modprobe, ...)
# even when the real tool is first in PATH.
cp /bin/busybox "$ST/usr/bin/busybox"
copy_elf /bin/dash /bin/bash
ln -s dash "$ST/usr/bin/sh"

BINS=(
  /usr/bin/ibv_devices /usr/bin/ibv_devinfo /usr/bin/ibv_rc_pingpong /usr/bin/ibv_uc_pingpong
  /usr/bin/ibv_ud_pingpong /usr/bin/ibv_srq_pingpong /usr/bin/ibv_xsrq_pingpong /usr/bin/ibv_asyncwatch
  /usr/bin/ib_write_bw /usr/bin/ib_write_lat /usr/bin/ib_read_bw /usr/bin/ib_read_lat
  /usr/bin/ib_send_bw /usr/bin/ib_send_lat /usr/bin/ib_atomic_bw /usr/bin/ib_atomic_lat
  /bin/ip /bin/rdma /bin/ss /usr/sbin/ethtool /bin/kmod /usr/bin/lspci /usr/bin/curl
  /sbin/tc
  ${EXTRA_BINS:-}
)
for b in "${BINS[@]}"; do
  [[ -e $b ]] || { log "warning: $b not on host, skipped"; continue; }
  copy_elf "$b"
done
for l in modprobe insmod rmmod lsmod modinfo depmod; do ln -sf kmod "$ST/usr/bin/$l"; done
ln -sf ../bin/kmod "$ST/usr/sbin/modprobe"   # kernel request_module() uses /sbin/modprobe

# libibverbs loads its provider with dlopen(), which ldd cannot see
mkdir -p "$ST/etc/libibverbs.d"
for drv in rxe; do
  cp "/etc/libibverbs.d/$drv.driver" "$ST/etc/libibverbs.d/"
  copy_elf /usr/lib/x86_64-linux-gnu/libibverbs/lib$drv-rdmav*.so
done
# glibc dlopen()s libgcc_s for pthread_exit/pthread_cancel unwinding (every Rust
# binary links it too)
copy_file /lib/x86_64-linux-gnu/libgcc_s.so.1

# now the busybox applet links (only for names not provided by real tools)
for a in $(/bin/busybox --list); do
  [[ -e $ST/usr/bin/$a || -e $ST/usr/sbin/$a ]] || ln -s busybox "$ST/usr/bin/$a"
done

# PCI names for lspci (PCIe topology tests)
[[ -f /usr/share/misc/pci.ids ]] && copy_file /usr/share/misc/pci.ids

# minimal /etc
cat > "$ST/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
printf 'root:x:0:\nnogroup:x:65534:\n' > "$ST/etc/group"
printf '127.0.0.1 localhost\n::1 localhost\n' > "$ST/etc/hosts"
printf 'passwd: files\ngroup: files\nhosts: files\n' > "$ST/etc/nsswitch.conf"
: > "$ST/etc/ld.so.conf"
# libc's getaddrinfo() wants /etc/services only for named ports; perftest uses numbers

# ---------------------------------------------------------------- modules
# (Debian's 6.1 kernel has CONFIG_RDMA_SIW unset, so no soft-iWARP)
MODS=(rdma_rxe ib_uverbs ib_umad rdma_ucm crc32_generic crc32_pclmul
      virtio_pci virtio_net 9p 9pnet_virtio e1000 e1000e veth dummy sch_netem
      sch_prio cls_u32 macvlan
      ${EXTRA_MODULES:-})
MDIR=lib/modules/$KVER
mkdir -p "$ST/usr/$MDIR"
declare -A seen=()
LOAD_ORDER=()
for m in "${MODS[@]}"; do
  # --show-depends prints "insmod /path/x.ko" in load order, "builtin x" if built in
  while read -r kind path _opts; do
    [[ $kind == insmod ]] || continue
    rel=${path#"$KROOT/lib/modules/$KVER/"}
    if [[ -z ${seen[$rel]:-} ]]; then
      seen[$rel]=1
      mkdir -p "$ST/usr/$MDIR/$(dirname "$rel")"
      cp "$path" "$ST/usr/$MDIR/$rel"
      LOAD_ORDER+=("$(basename "$rel" .ko)")
    fi
  done < <(modprobe -C /dev/null -d "$KROOT" -S "$KVER" --show-depends "$m" 2>/dev/null || log "warning: module $m not in $KPKG")
done
cp "$KROOT/lib/modules/$KVER"/modules.{order,builtin,builtin.modinfo} "$ST/usr/$MDIR/"
depmod -b "$ST" "$KVER"
printf '%s\n' "${LOAD_ORDER[@]}" > "$ST/etc/roce-vm-modules"

# ---------------------------------------------------------------- /init
cp "$HERE/guest-init.sh" "$ST/init"
chmod 755 "$ST/init"
# the kernel opens /dev/console before running /init; make the node if we can
mknod -m 600 "$ST/dev/console" c 5 1 2>/dev/null || true
mknod -m 666 "$ST/dev/null" c 1 3 2>/dev/null || true

# ---------------------------------------------------------------- manifest
{
  echo "built: $(date -u +%FT%TZ)"
  echo "kernel: $KPKG $(dpkg-deb -f "$KDEB" Version)"
  echo "modules: ${LOAD_ORDER[*]}"
  dpkg-query -W -f='${Package} ${Version}\n' "${HOST_PKGS[@]}" libc6 libibverbs1 librdmacm1 libibumad3 libnl-3-200 2>/dev/null
} > "$OUT/manifest.txt"
echo "$KVER" > "$OUT/kver"
# what the image was built from: tests/vm/e2e.sh rebuilds when this changes
cat "$HERE/build.sh" "$HERE/lib.sh" "$HERE/guest-init.sh" | cksum > "$OUT/stamp"

# ---------------------------------------------------------------- cpio
log "packing initramfs"
( cd "$ST" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 ) > "$OUT/initramfs.cpio"
case ${COMPRESS:-none} in
  gzip) gzip -6 -n -c "$OUT/initramfs.cpio" > "$OUT/initramfs.img" ;;
  none) cp "$OUT/initramfs.cpio" "$OUT/initramfs.img" ;;  # kernel detects a plain cpio by its magic
  *) log "bad COMPRESS"; exit 2 ;;
esac
rm -f "$OUT/initramfs.cpio"
log "done: $(du -h "$OUT/vmlinuz" | cut -f1) vmlinuz, $(du -h "$OUT/initramfs.img" | cut -f1) initramfs, $(du -sh "$ST" | cut -f1) unpacked"
[[ -n ${KEEP_TREES:-} ]] || rm -rf "$KROOT" "$ST"
cat "$OUT/manifest.txt" >&2
