#!/bin/sh
# Guest script for the Soft-RoCE VM (tests/vm): prints, before
# and after ibv_rc_pingpong loopback traffic, `rdma statistic show` (rdma-core)
# next to roce-netlink's example `rdma_stat`, whose port lines use the same
# layout, plus the sysfs hw_counters; then `rdma_stat --probe` (kernel refusals,
# socket reuse, cost of one STAT_GET). Run from the workspace root:
#   cargo build --release -p roce-netlink --example rdma_stat
#   bash tests/vm/build.sh /tmp/roce-exporter-vm          # once, as root
#   bash tests/vm/run.sh -a target/release/examples/rdma_stat \
#       /tmp/roce-exporter-vm crates/netlink/vm/compare.sh
# The two `link rxe0/1 ...` lines of each phase must be identical.
dump() {
  echo "=== [$1] rdma dev show"; rdma dev show
  echo "=== [$1] rdma statistic show"; rdma statistic show
  echo "=== [$1] rdma_stat"; /guest/rdma_stat; echo "rdma_stat rc=$?"
  echo "=== [$1] sysfs hw_counters"
  for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do
    printf '%s %s\n' "${f##*/}" "$(cat "$f")"
  done
}
dump before
echo "=== traffic"
ibv_rc_pingpong -d rxe0 -g "$SR_GID0" -n 500 > /tmp/srv.log 2>&1 &
sleep 1
ibv_rc_pingpong -d rxe0 -g "$SR_GID0" -n 500 127.0.0.1 2>&1 | tail -2
wait
tail -2 /tmp/srv.log
dump after
echo "=== probe"; /guest/rdma_stat --probe; echo "probe rc=$?"
echo "=== rdma statistic mode supported"; rdma statistic mode supported link rxe0/1 2>&1
exit 0
