#!/usr/bin/env bash
# The release of roce_exporter, from a tag vX.Y.Z (docs/deploy.md, "Release"):
#
#   packaging/release/release.sh vX.Y.Z [OUT]
#
# writes into OUT (default target/release-artifacts/vX.Y.Z):
#   roce_exporter-X.Y.Z.linux-ARCH.tar.gz   the binary, LICENSE, README.md, the example configuration
#   roce-exporter_X.Y.Z-1_ARCH.deb          cargo deb
#   roce-exporter-X.Y.Z-1.MACHINE.rpm       cargo generate-rpm
#   roce_exporter-X.Y.Z.oci.tar             the image of packaging/container/Containerfile as an
#                                           OCI archive, tagged X.Y.Z
#   roce_exporter-X.Y.Z.spdx.json           SPDX 2.3 SBOM of the crates the binary links
#                                           (packaging/release/sbom.py)
#   roce-exporter-X.Y.Z.tgz                 the Helm chart, packaged by Helm's engine
#                                           (helm-python-sdk), its image ROCE_EXPORTER_IMAGE
#   SHA256SUMS                              the SHA-256 of each of them, verified with sha256sum -c
# and checks that every artifact carries version X.Y.Z (binary --version, deb
# and rpm headers, the image's org.opencontainers.image.version label, the SBOM,
# the chart and the image it names), and that no artifact holds a runbook link
# or an image name under example.invalid (packaging/release/check_shipped.py).
#
# The image's published name (registry/path, no tag) is one variable:
#   ROCE_EXPORTER_IMAGE   default: the chart's image.registry/image.repository
#                         (charts/roce-exporter/values.yaml; the kustomize base
#                         names the same); the packaged chart names it, with tag
#                         X.Y.Z, and docs/deploy.md pushes the OCI archive there
#
# Refuses, with exit status 2 and before building anything, a tag that is not
# vX.Y.Z (semver, an optional pre-release) or whose X.Y.Z is not Cargo.toml's
# version, or whose version the chart (version, appVersion), the kustomize
# base's image tag or the Debian changelog do not name; and, unless RELEASE_DRY_RUN=1, a tag that does not point at HEAD or
# a work tree with uncommitted changes. Publishing (the release page, the
# registry) is left to the one who runs it: docs/deploy.md.
#
# Inputs built elsewhere (.ci/packaging.sh's dry run passes its own, so CI
# builds nothing twice):
#   RELEASE_BINARY        the binary (default: cargo build --release --locked)
#   RELEASE_DEB, RELEASE_RPM  the packages (default: cargo deb, cargo generate-rpm of the binary)
#   RELEASE_IMAGE         an image in buildah's storage (default: buildah bud of the Containerfile)
#   RELEASE_BUILDAH_OPTS  buildah's global options (storage driver, root), word-split
#   RUNTIME_IMAGE         the image's base (default docker.io/library/debian:bookworm-slim)
#   RELEASE_HELM_PYTHON   a python with PyPI's helm-python-sdk (default python3)
#   RUNBOOK_URL_BASE      the packaged chart's prometheusRule.runbookUrlBase (default
#                         empty: each exporter's own /runbook)
# Needs: cargo, cargo-deb, cargo-generate-rpm, buildah, dpkg-deb, rpm, python3 >= 3.11, git,
# helm-python-sdk (pip install helm-python-sdk==0.2.2).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

refuse() { echo "release: refusing: $*" >&2; exit 2; }
die() { echo "release: $*" >&2; exit 1; }
log() { printf '[release %s] %s\n' "$(date -u +%T)" "$*"; }

(($# >= 1 && $# <= 2)) || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
TAG=$1
[[ $TAG =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] ||
  refuse "tag '$TAG' is not vX.Y.Z"
VERSION=$(cargo metadata --no-deps --format-version 1 --locked |
  python3 -c 'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "roce_exporter"))') ||
  die "cargo metadata"
[[ ${TAG#v} == "$VERSION" ]] || refuse "tag $TAG does not match Cargo.toml's version $VERSION"
# the other files that name the version must name the same
for f in "charts/roce-exporter/Chart.yaml:^version: " "charts/roce-exporter/Chart.yaml:^appVersion: " \
         "packaging/kubernetes/base/kustomization.yaml:^ *newTag: " "packaging/debian/changelog:^roce-exporter "; do
  file=${f%%:*} prefix=${f#*:}
  named=$(grep -m1 -E "$prefix" "$file" | sed -E "s/$prefix//; s/[\"()]//g; s/-[0-9]+ .*$//; s/ .*$//")
  [[ $named == "$VERSION" ]] || refuse "$file names version '$named', Cargo.toml $VERSION"
done
# The image's name: ROCE_EXPORTER_IMAGE, else the chart's default
chart_image=$(awk '/^image:/ { f = 1; next } f && /^[^ #]/ { f = 0 }
  f && /^  registry:/ { r = $2 } f && /^  repository:/ { p = $2 }
  END { print (r != "" && r != "\"\"" ? r "/" : "") p }' charts/roce-exporter/values.yaml)
IMAGE_NAME=${ROCE_EXPORTER_IMAGE:-$chart_image}
[[ $IMAGE_NAME =~ ^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)+$ ]] ||
  refuse "image name '$IMAGE_NAME' (ROCE_EXPORTER_IMAGE) is not registry/path without a tag"
[[ ${IMAGE_NAME%%/*} != *.invalid ]] || refuse "image name '$IMAGE_NAME' is a placeholder (.invalid)"
HELM_PY=${RELEASE_HELM_PYTHON:-python3}
"$HELM_PY" -c 'import helm_python' 2>/dev/null ||
  refuse "$HELM_PY has no helm_python: pip install helm-python-sdk==0.2.2, or set RELEASE_HELM_PYTHON"
REVISION=$(git rev-parse HEAD)
if [[ ${RELEASE_DRY_RUN:-0} != 1 ]]; then
  tagged=$(git rev-parse -q --verify "refs/tags/$TAG^{commit}") || refuse "no tag $TAG in this repository"
  [[ $tagged == "$REVISION" ]] || refuse "tag $TAG is $tagged, HEAD is $REVISION"
  [[ -z $(git status --porcelain --untracked-files=no) ]] || refuse "the work tree has uncommitted changes"
else
  log "dry run: tag $TAG not required to exist or to point at HEAD ($REVISION)"
fi

OUT=${2:-target/release-artifacts/$TAG}
rm -rf "$OUT" && mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
case $(uname -m) in x86_64) ARCH=amd64 ;; aarch64) ARCH=arm64 ;; *) ARCH=$(uname -m) ;; esac
read -r -a BUILDAH <<< "${RELEASE_BUILDAH_OPTS:-}"
# file times and the SBOM's date: the commit's, so a rebuild is byte-equal
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct HEAD)
export SOURCE_DATE_EPOCH

# ---- binary: cargo-deb and cargo-generate-rpm take it from <target>/release
mkdir -p "$WORK/stage/release"
if [[ -n ${RELEASE_BINARY:-} ]]; then
  cp "$RELEASE_BINARY" "$WORK/stage/release/roce_exporter"
else
  log "cargo build --release --locked"
  ROCE_EXPORTER_REVISION=$REVISION ROCE_EXPORTER_BRANCH=$TAG cargo build --release --locked --bin roce_exporter
  cp "${CARGO_TARGET_DIR:-target}/release/roce_exporter" "$WORK/stage/release/roce_exporter"
fi
strip "$WORK/stage/release/roce_exporter"
BIN=$WORK/stage/release/roce_exporter
got=$("$BIN" --version | head -1)
[[ $got == "roce_exporter version $VERSION "* ]] || die "the binary says '$got', not version $VERSION"

# ---- binary tarball (reproducible: sorted, the commit's time, no owner)
dir=roce_exporter-$VERSION.linux-$ARCH
mkdir -p "$WORK/tar/$dir"
install -m 0755 "$BIN" "$WORK/tar/$dir/roce_exporter"
install -m 0644 LICENSE README.md examples/roce_exporter.yml "$WORK/tar/$dir/"
tar -C "$WORK/tar" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
  -cf - "$dir" | gzip -n -9 > "$OUT/$dir.tar.gz"

# ---- deb and rpm
if [[ -n ${RELEASE_DEB:-} ]]; then
  cp "$RELEASE_DEB" "$OUT/"
else
  CARGO_TARGET_DIR=$WORK/stage cargo deb --no-build --quiet -o "$OUT/" >/dev/null
fi
if [[ -n ${RELEASE_RPM:-} ]]; then
  cp "$RELEASE_RPM" "$OUT/"
else
  cargo generate-rpm --target-dir "$WORK/stage" -o "$OUT/" >/dev/null
fi
DEB=$(ls "$OUT"/roce-exporter_*.deb) && RPM=$(ls "$OUT"/roce-exporter-*.rpm) || die "deb or rpm missing"
[[ $(dpkg-deb -f "$DEB" Package) == roce-exporter && $(dpkg-deb -f "$DEB" Version) == "$VERSION"-* ]] ||
  die "$DEB: $(dpkg-deb -f "$DEB" Package Version | tr '\n' ' ')is not roce-exporter $VERSION"
[[ $(rpm -qp --qf '%{NAME} %{VERSION}' "$RPM" 2>/dev/null) == "roce-exporter $VERSION" ]] ||
  die "$RPM: $(rpm -qp --qf '%{NAME} %{VERSION}' "$RPM") is not roce-exporter $VERSION"

# ---- image, as an OCI archive
IMAGE=${RELEASE_IMAGE:-}
if [[ -z $IMAGE ]]; then
  IMAGE=localhost/roce_exporter:$VERSION
  mkdir -p "$WORK/ctx/prebuilt" "$WORK/ctx/packaging/config"
  cp "$BIN" "$WORK/ctx/prebuilt/"
  cp packaging/config/roce_exporter.yml "$WORK/ctx/packaging/config/"
  runtime=${RUNTIME_IMAGE:-docker.io/library/debian:bookworm-slim}
  log "buildah bud ($runtime)"
  # with a prebuilt binary the build stage only copies it: the runtime base will do
  buildah "${BUILDAH[@]}" bud --quiet --build-arg BUILD_IMAGE="$runtime" \
    --build-arg RUNTIME_IMAGE="$runtime" --build-arg VERSION="$VERSION" \
    --build-arg REVISION="$REVISION" --build-arg BRANCH="$TAG" \
    -f packaging/container/Containerfile -t "$IMAGE" "$WORK/ctx" >/dev/null
fi
OCI=$OUT/roce_exporter-$VERSION.oci.tar
buildah "${BUILDAH[@]}" push --quiet "$IMAGE" "oci-archive:$OCI:$VERSION" >/dev/null
python3 - "$OCI" "$VERSION" <<'EOF' || die "$OCI is not an OCI image of version $VERSION"
# the archive's index names the tag, its blobs have their digests, and the
# image's config carries the version label
import hashlib, json, sys, tarfile
path, version = sys.argv[1:]
with tarfile.open(path) as t:
    def blob(digest):
        data = t.extractfile("blobs/" + digest.replace(":", "/")).read()
        assert "sha256:" + hashlib.sha256(data).hexdigest() == digest, digest
        return data
    layout = json.load(t.extractfile("oci-layout"))
    assert layout["imageLayoutVersion"] == "1.0.0", layout
    (m,) = json.load(t.extractfile("index.json"))["manifests"]
    assert m["annotations"]["org.opencontainers.image.ref.name"] == version, m
    manifest = json.loads(blob(m["digest"]))
    config = json.loads(blob(manifest["config"]["digest"]))
    for layer in manifest["layers"]:
        blob(layer["digest"])
    label = config["config"]["Labels"]["org.opencontainers.image.version"]
    assert label == version, label
    print(f"{path}: tag {version}, {len(manifest['layers'])} layer(s), user {config['config'].get('User')}")
EOF

# ---- SBOM
SBOM=$OUT/roce_exporter-$VERSION.spdx.json
python3 packaging/release/sbom.py write "$SBOM" --revision "$REVISION"
python3 - "$SBOM" "$VERSION" <<'EOF' || die "$SBOM does not describe roce_exporter $VERSION"
import json, sys
doc = json.load(open(sys.argv[1]))
(top,) = [r["relatedSpdxElement"] for r in doc["relationships"] if r["relationshipType"] == "DESCRIBES"]
(pkg,) = [p for p in doc["packages"] if p["SPDXID"] == top]
assert pkg["name"] == "roce_exporter" and pkg["versionInfo"] == sys.argv[2], pkg
EOF

# ---- Helm chart: the links to alerts/ and dashboards/ copied as files, the
# image named IMAGE_NAME, packaged and checked by Helm's engine
cp -rL charts/roce-exporter "$WORK/chart" || die "copy of the chart"
first=${IMAGE_NAME%%/*}
if [[ $first == *.* || $first == *:* || $first == localhost ]]; then
  registry=$first repository=${IMAGE_NAME#*/}
else
  registry='""' repository=$IMAGE_NAME
fi
sed -i "/^image:/,/^[^ #]/ { s|^  registry: .*|  registry: $registry|; s|^  repository: .*|  repository: $repository| }" \
  "$WORK/chart/values.yaml"
if [[ -n ${RUNBOOK_URL_BASE:-} ]]; then
  [[ $RUNBOOK_URL_BASE =~ ^https?://[^[:space:]\"|]+$ && $RUNBOOK_URL_BASE != *.invalid/* ]] ||
    die "RUNBOOK_URL_BASE '$RUNBOOK_URL_BASE' is not an http(s) URL off .invalid"
  sed -i "/^prometheusRule:/,/^[^ #]/ s|^  runbookUrlBase: .*|  runbookUrlBase: \"$RUNBOOK_URL_BASE\"|" "$WORK/chart/values.yaml"
fi
"$HELM_PY" - "$WORK/chart" "$OUT" "$VERSION" "$IMAGE_NAME" <<'PACKAGE' || die "helm package"
# lint, package, and render the archive: its DaemonSet runs IMAGE:VERSION
import sys
import helm_python as helm
path, out, version, image = sys.argv[1:]
lint = helm.lint(path)
bad = [m for m in lint.get("messages", []) if m.get("severity", 0) > 1]
assert not lint.get("errors") and not bad, lint
tgz = helm.package(path, destination=out)
assert tgz.endswith(f"/roce-exporter-{version}.tgz"), tgz
with helm.Chart.load(tgz) as chart:
    assert chart.metadata["version"] == version and chart.metadata["appVersion"] == version, chart.metadata
    ds = chart.render({}, name="roce-exporter", namespace="monitoring")["roce-exporter/templates/daemonset.yaml"]
want = f'image: "{image}:{version}"'
assert want in ds, f"{want} not in the rendered DaemonSet"
print(f"{tgz}: chart {version}, image {image}:{version}")
PACKAGE

# ---- no runbook link or image name under example.invalid in any artifact
python3 packaging/release/check_shipped.py "$OUT"/* > "$WORK/shipped.txt" ||
  { grep -v '^note' "$WORK/shipped.txt" | tail -20; die "placeholder runbook links or image names in the artifacts"; }
tail -1 "$WORK/shipped.txt"

# ---- checksums
(cd "$OUT" && sha256sum -- *.tar.gz *.deb *.rpm *.oci.tar *.spdx.json *.tgz > SHA256SUMS && sha256sum --quiet -c SHA256SUMS) ||
  die "SHA256SUMS"
log "release $TAG ($REVISION) in $OUT:"
(cd "$OUT" && ls -l --time-style=+ | tail -n +2 | awk '{ print "  " $5 "\t" $NF }')
