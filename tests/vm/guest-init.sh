#!/bin/sh
# /init of roce_exporter's Soft-RoCE test VM (runs as PID 1 under dash; busybox gives the applets).
#
# 1. mounts proc/sys/dev/tmp, loads the modules listed in /etc/roce-vm-modules
# 2. gives every ethN an address (sr.ip0=, sr.ip1=, ... on the kernel command line;
#    defaults 10.0.2.15/24, 10.0.3.15/24, ...) -- these addresses exist only inside
#    this VM (the NICs are on an isolated qemu hub unless run.sh says otherwise)
# 3. creates rxe<N> on ethN (unless sr.rxe=0), waits (max 5 s each) until the port is
#    ACTIVE and its RoCE v2 IPv4 GID shows; exports SR_IP<N>, SR_GID<N> (that index)
# 4. mounts the 9p share tagged "host" (if run.sh passed --share) at /mnt/host
# 5. runs /guest/run (put there by run.sh's extra cpio) with env from /etc/roce-vm.env
# 6. prints "ROCE-VM-EXIT=<status>" and powers off; run.sh turns that into its
#    own exit status.
# Kernel command line knobs: sr.ip<N>=ADDR/LEN  sr.rxe=0  sr.shell=1 (interactive sh
# instead of /guest/run)  sr.quiet=1 (no setup chatter)

export PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=${TERM:-vt100}
umask 022

mount -t devtmpfs devtmpfs /dev 2>/dev/null
# if the cpio had no /dev/console the kernel could not give us stdio: take it now
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
# /dev/fd etc. (bash process substitution needs /dev/fd; devtmpfs lacks these links)
ln -sf /proc/self/fd /dev/fd; ln -sf fd/0 /dev/stdin; ln -sf fd/1 /dev/stdout; ln -sf fd/2 /dev/stderr
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t configfs configfs /sys/kernel/config 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null

CMDLINE=$(cat /proc/cmdline)
arg() { # arg NAME DEFAULT -> value of NAME= on the kernel command line
  for w in $CMDLINE; do case $w in "$1="*) echo "${w#*=}"; return;; esac; done
  echo "$2"
}
QUIET=$(arg sr.quiet 0)
say() { [ "$QUIET" = 1 ] || echo "[init] $*"; }
T0=$(cut -d' ' -f1 /proc/uptime)
say "kernel $(uname -r) up ${T0}s, $(grep -c ^processor /proc/cpuinfo) cpu, $(awk '/MemTotal/{print $2" kB"}' /proc/meminfo)"

# ---- modules (order computed on the host by modprobe --show-depends)
failed=""
for m in $(cat /etc/roce-vm-modules); do
  modprobe "$m" 2>/dev/null || failed="$failed $m"
done
[ -n "$failed" ] && say "modules that did not load:$failed"

ip link set lo up

# ---- 9p share
for t in /sys/bus/virtio/drivers/9pnet_virtio/virtio*/mount_tag; do
  [ -e "$t" ] || continue
  if [ "$(tr -d '\0' < "$t")" = host ]; then
    mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 host /mnt/host && say "9p share at /mnt/host"
  fi
done

# ---- NICs, addresses, rxe devices
# wait (max 3 s) for the NICs to register
i=0; while [ $i -lt 30 ] && ! ls /sys/class/net | grep -q '^eth'; do sleep 0.1; i=$((i+1)); done
RXE=$(arg sr.rxe 1)
: > /etc/roce-vm.env
for dev in $(ls /sys/class/net | grep '^eth' | sort); do
  n=${dev#eth}
  addr=$(arg "sr.ip$n" "10.0.$((n+2)).15/24")
  ip addr add "$addr" dev "$dev"
  ip link set "$dev" up
  say "$dev $(cat /sys/class/net/$dev/address) $addr driver=$(basename "$(readlink /sys/class/net/$dev/device/driver 2>/dev/null)" 2>/dev/null)"
  echo "SR_IP$n=${addr%/*}" >> /etc/roce-vm.env
  if [ "$RXE" = 1 ]; then
    rdma link add "rxe$n" type rxe netdev "$dev" || say "rdma link add rxe$n failed"
  fi
done

# ---- wait for each rxe's RoCE v2 GID for its IPv4 address (max 5 s), export index
if [ "$RXE" = 1 ]; then
  for ib in /sys/class/infiniband/rxe*; do
    [ -d "$ib" ] || continue
    name=${ib##*/}; n=${name#rxe}
    # port goes ACTIVE once the netdev has carrier (e1000 autoneg takes ~2 s)
    i=0; while [ $i -lt 50 ] && ! grep -q ACTIVE "$ib/ports/1/state"; do sleep 0.1; i=$((i+1)); done
    idx=""; i=0
    while [ -z "$idx" ] && [ $i -lt 50 ]; do
      for g in "$ib"/ports/1/gids/*; do
        k=${g##*/}
        case $(cat "$g" 2>/dev/null) in 0000:0000:0000:0000:0000:ffff:*)
          [ "$(cat "$ib/ports/1/gid_attrs/types/$k" 2>/dev/null)" = "RoCE v2" ] && { idx=$k; break; } ;;
        esac
      done
      [ -z "$idx" ] && { sleep 0.1; i=$((i+1)); }
    done
    say "$name state=$(cat "$ib/ports/1/state") roce-v2-ipv4-gid-index=${idx:-none}"
    echo "SR_GID$n=${idx}" >> /etc/roce-vm.env
  done
fi
. /etc/roce-vm.env
export $(cut -d= -f1 /etc/roce-vm.env)
say "setup done at $(cut -d' ' -f1 /proc/uptime)s"

# ---- run the payload
rc=0
if [ "$(arg sr.shell 0)" = 1 ]; then
  setsid cttyhack sh -l; rc=$?
elif [ -x /guest/run ]; then
  cd /guest
  /guest/run; rc=$?
  cd /
else
  echo "[init] no /guest/run given"; rc=127
fi

echo "ROCE-VM-EXIT=$rc"
sync
umount /mnt/host 2>/dev/null
poweroff -f
# should not get here; make the kernel power off if poweroff failed
echo o > /proc/sysrq-trigger
sleep 10
