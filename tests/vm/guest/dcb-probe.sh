#!/bin/sh
# Guest script of docs/qos.md "What the test VM can and cannot show": what dcb
# (iproute2, added with run.sh -a /usr/sbin/dcb) and the exporter see of DCB on
# the VM's NICs (virtio-net or --nic-model e1000e), veth and dummy. Run:
#   tests/vm/run.sh -a /usr/sbin/dcb -a target/debug/roce_exporter /tmp/roce-exporter-vm tests/vm/guest/dcb-probe.sh
echo "=== uname"; uname -r
echo "=== drivers"
for i in /sys/class/net/*; do d=$(readlink "$i/device/driver" 2>/dev/null); echo "${i##*/} ${d##*/}"; done
ip link add veth0 type veth peer name veth1 2>&1; ip link add dummy0 type dummy 2>&1
for dev in eth0 veth0 dummy0; do
  for obj in pfc ets app apptrust buffer dcbx; do
    echo "=== dcb $obj show dev $dev"; /guest/dcb "$obj" show dev "$dev" 2>&1; echo "rc=$?"
  done
done
echo "=== dcb pfc set dev eth0 prio-pfc 3:on"; /guest/dcb pfc set dev eth0 prio-pfc 3:on 2>&1; echo "rc=$?"
echo "=== ls /sys/class/net/eth0/ecn"; ls /sys/class/net/eth0/ecn 2>&1
echo "=== ls /sys/kernel/debug/mlx5"; ls /sys/kernel/debug/mlx5 2>&1
echo "=== roce_exporter check"
[ -x /guest/roce_exporter ] && /guest/roce_exporter check --path.sysfs=/sys --path.procfs=/proc 2>&1 | grep -iE "dcb|pfc|qos" | head -20
exit 0
