#!/usr/bin/env bash
# The newcomer path on a bare Debian 12 (README "Two commands on a fresh
# machine"), as root: debootstraps a minimal bookworm root, copies this
# checkout in (git ls-files), bind-mounts the host's Rust toolchain (rustup
# cannot download from CI), then runs the setup part of both README
# commands inside it: `.ci/run --packages-only` (the Debian packages .ci/run
# and .ci/packaging.sh use) and checks that what the suite calls exists and
# works there: cargo >= rust-version, cmake, clang, promtool,
# prometheus-alertmanager, python3 -m venv, node/npm. With ROCE_EXPORTER_BIN
# (a binary built on the host) it then runs the README's run command's
# exporter in the bare root (the demo tree, no RDMA device) and scrapes
# /metrics, /findings and /healthz: what a newcomer sees, on nothing but
# Debian 12 and glibc. It does not compile the workspace in the bare root (a
# second full build, tens of minutes on a CI runner): `cargo test
# --workspace` on the host is that build.
#   bash .ci/bare-debian.sh        # about 2-10 minutes (mirror speed), ~1.5 GB in $TMPDIR
# Environment: MIRROR (default http://deb.debian.org/debian), ROCE_EXPORTER_BIN.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) == 0 ]] || { echo "run as root (debootstrap, chroot)" >&2; exit 1; }
command -v debootstrap >/dev/null || apt-get install -y -q --no-install-recommends debootstrap
MIRROR=${MIRROR:-http://deb.debian.org/debian}
ROOT=$(mktemp -d "${TMPDIR:-/tmp}/bare-debian.XXXXXX")
RUSTUP=${RUSTUP_HOME:-$HOME/.rustup} CARGO=${CARGO_HOME:-$HOME/.cargo}
mounts=()
cleanup() {
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || :; done
  rm -rf --one-file-system "$ROOT"
}
trap cleanup EXIT
bind() { mkdir -p "$2"; mount --bind "$1" "$2"; mounts+=("$2"); }

echo "== debootstrap bookworm (minbase) into $ROOT"
debootstrap --variant=minbase bookworm "$ROOT" "$MIRROR" > "$ROOT.debootstrap.log" 2>&1 ||
  { tail -20 "$ROOT.debootstrap.log"; exit 1; }
rm -f "$ROOT.debootstrap.log"
mkdir -p "$ROOT/src"
git ls-files -z | tar --null -T - -cf - | tar -C "$ROOT/src" -xf -
bind /proc "$ROOT/proc"; bind /dev "$ROOT/dev"; bind /sys "$ROOT/sys"
bind "$RUSTUP" "$ROOT/root/.rustup"; bind "$CARGO" "$ROOT/root/.cargo"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"

echo "== .ci/run --packages-only in the bare root"
chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/root/.cargo/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  bash -c 'cd /src && bash .ci/run --packages-only'

echo "== what the suite calls, in the bare root"
chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/root/.cargo/bin:/usr/sbin:/usr/bin:/sbin:/bin bash -euc '
  cd /src
  need=$(sed -n "s/^rust-version = \"\(.*\)\"/\1/p" Cargo.toml)
  have=$(cargo --version | cut -d" " -f2)
  printf "%s\n%s\n" "$need" "$have" | sort -V -C || { echo "cargo $have < $need"; exit 1; }
  echo "cargo $have (rust-version $need)"
  cmake --version | head -1; clang --version | head -1
  promtool --version 2>&1 | head -1; prometheus-alertmanager --version 2>&1 | head -1
  python3 -m venv /tmp/venv && /tmp/venv/bin/pip --version
  node --version; npm --version
'
if [[ -n ${ROCE_EXPORTER_BIN:-} ]]; then
  echo "== the README's run command's exporter in the bare root"
  install -m 0755 "$ROCE_EXPORTER_BIN" "$ROOT/usr/local/bin/roce_exporter"
  chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin bash -euc '
    cd /src
    roce_exporter --config.file=examples/demo-gpu-node/demo.yml \
      --path.sysfs=examples/demo-gpu-node/sys --path.procfs=examples/demo-gpu-node/proc \
      --web.listen-address=127.0.0.1:19879 >/tmp/exporter.log 2>&1 &
    pid=$!
    trap "kill $pid 2>/dev/null || :" EXIT
    for _ in $(seq 50); do curl -sf -o /dev/null http://127.0.0.1:19879/healthz && break; sleep 0.2; done
    curl -sf http://127.0.0.1:19879/metrics >/tmp/metrics || { cat /tmp/exporter.log; exit 1; }
    curl -sf http://127.0.0.1:19879/findings >/tmp/findings || { cat /tmp/exporter.log; exit 1; }
    n=$(grep -vc "^#" /tmp/metrics)
    ((n > 100)) || { echo "only $n series in /metrics"; exit 1; }
    grep -q "^roce_collector_success{collector=\"rdma\"} 1" /tmp/metrics || { echo "rdma collector failed"; exit 1; }
    echo "/metrics: $n series, /findings: $(wc -c </tmp/findings) bytes"
  '
fi
echo "== bare Debian 12: the setup of both README commands works"
