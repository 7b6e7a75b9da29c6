#!/usr/bin/env bash
# The newcomer path on a bare Debian 12, as root: debootstraps a minimal
# bookworm root, copies this checkout in (git ls-files) where the README's
# clone would put it (/root/roce_exporter), bind-mounts the host's Rust
# toolchain (rustup cannot download from CI), then
#   1. runs the setup part of the full suite: `.ci/run --packages-only` (the
#      Debian packages .ci/run and .ci/packaging.sh use) and checks that what
#      the suite calls exists and works there: cargo >= rust-version, cmake,
#      clang, promtool, prometheus-alertmanager, python3 -m venv, node/npm;
#   2. with ROCE_EXPORTER_BIN (a binary built on the host), runs the README's
#      first block line by line as written, but for three lines CI cannot run
#      as written: the rustup line (the host's toolchain is bound in), the
#      `git clone` (the copied checkout; its `cd` is kept) and `cargo build
#      --release` (ROCE_EXPORTER_BIN is put at target/release/roce_exporter:
#      a second full build would take tens of minutes; `cargo test
#      --workspace` on the host is that build). Its last command (curl |
#      grep of /metrics) must print the README's sample; then /findings and
#      /healthz are fetched too: what a newcomer sees, on nothing but Debian
#      12 and glibc.
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
SRC=/root/roce_exporter
mkdir -p "$ROOT$SRC"
git ls-files -z | tar --null -T - -cf - | tar -C "$ROOT$SRC" -xf -
bind /proc "$ROOT/proc"; bind /dev "$ROOT/dev"; bind /sys "$ROOT/sys"
bind "$RUSTUP" "$ROOT/root/.rustup"; bind "$CARGO" "$ROOT/root/.cargo"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"

echo "== .ci/run --packages-only in the bare root"
chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/root/.cargo/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  bash -c "cd $SRC && bash .ci/run --packages-only"

echo "== what the suite calls, in the bare root"
chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/root/.cargo/bin:/usr/sbin:/usr/bin:/sbin:/bin bash -euc '
  cd /root/roce_exporter
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
  echo "== the README's first block in the bare root"
  # the block, and the sample its last command prints
  block=$(awk '/^```sh$/ { f = 1; next } f && /^```$/ { exit } f' README.md)
  sample=$(awk '/^The last command prints/ { f = 1; next } f && /^```$/ { if (in_block) exit; in_block = 1; next } in_block' README.md)
  [[ -n $block && -n $sample ]] || { echo "README: no first block or no sample"; exit 1; }
  # Two parts: the setup lines (apt-get needs the mirror) on the host's
  # network, then, from the line that starts the exporter, the rest in a
  # network namespace of its own, where the block's fixed port 9879 is the
  # exporter's whatever else runs on this machine.
  last=$(tail -1 <<< "$block")
  part=setup
  : > "$ROOT/root/readme-setup.sh"
  {
    echo 'set -euo pipefail'
    echo 'trap "kill \$(jobs -p) 2>/dev/null || :" EXIT'
    # what the lines before the last print goes to the log, the last's is compared
    echo 'exec 3>&1 1>&2'
    echo 'cd "$(cat /root/readme-cwd)"'
  } > "$ROOT/root/readme-serve.sh"
  echo 'set -euo pipefail; cd /root' >> "$ROOT/root/readme-setup.sh"
  while IFS= read -r line; do
    [[ $line == target/release/roce_exporter* ]] && part=serve
    {
      [[ $line == "$last" ]] && echo 'exec 1>&3'
      case $line in
        "curl -sSf https://sh.rustup.rs"*) echo "cargo --version  # README: $line" ;;
        "git clone "*) echo "${line#*&& }  # README: ${line%% &&*}" ;;
        "cargo build --release"*)
          echo "install -D -m 0755 /tmp/roce_exporter target/release/roce_exporter  # README: $line" ;;
        *) printf '%s\n' "$line" ;;
      esac
    } >> "$ROOT/root/readme-$part.sh"
  done <<< "$block"
  echo 'pwd > /root/readme-cwd' >> "$ROOT/root/readme-setup.sh"
  [[ $part == serve ]] || { echo "README: the first block starts no target/release/roce_exporter"; exit 1; }
  printf '%s\n' "$sample" > "$ROOT/root/readme-sample.txt"
  sed 's/^/  | /' "$ROOT/root/readme-setup.sh" "$ROOT/root/readme-serve.sh"
  install -m 0755 "$ROCE_EXPORTER_BIN" "$ROOT/tmp/roce_exporter"
  chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/root/.cargo/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash /root/readme-setup.sh > "$ROOT/root/readme-setup.log" 2>&1 ||
    { tail -20 "$ROOT/root/readme-setup.log"; echo "the README's setup lines failed"; exit 1; }
  unshare --net sh -c 'ip link set lo up && exec "$@"' sh \
    chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/root/.cargo/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c 'bash /root/readme-serve.sh > /root/readme-out.txt 2>/root/readme-err.txt' ||
    echo "(the README's run lines exited with an error; their output is judged below)"
  if ! cmp -s "$ROOT/root/readme-out.txt" "$ROOT/root/readme-sample.txt"; then
    echo "the README's block did not print its sample:"
    diff "$ROOT/root/readme-sample.txt" "$ROOT/root/readme-out.txt" | head -20
    tail -20 "$ROOT/root/readme-err.txt"
    exit 1
  fi
  echo "README block: its last command printed the README's sample ($(wc -l < "$ROOT/root/readme-out.txt") lines)"
  chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin bash -euc '
    cd /root/roce_exporter
    target/release/roce_exporter --config.file=examples/demo-gpu-node/demo.yml \
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
echo "== bare Debian 12: the suite's setup and the README's first block work"
