#!/usr/bin/env bash
# The newcomer path on a bare Debian 12 (README "Two commands on a fresh
# machine"), as root: debootstraps a minimal bookworm root, copies this
# checkout in (git ls-files), bind-mounts the host's Rust toolchain (rustup
# cannot download from CI), then runs the setup part of both README
# commands inside it: `.ci/run --packages-only` (the Debian packages .ci/run
# and .ci/packaging.sh use) and checks that what the suite calls exists and
# works there: cargo >= rust-version, cmake, clang, promtool,
# prometheus-alertmanager, python3 -m venv, node/npm. It does not compile
# the workspace (tens of minutes on a CI runner): `cargo test --workspace`
# itself is the quick test CI runs anyway.
#   bash .ci/bare-debian.sh        # about 5-10 minutes, ~1.5 GB in $TMPDIR
# Environment: MIRROR (default http://deb.debian.org/debian).
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
echo "== bare Debian 12: the setup of both README commands works"
