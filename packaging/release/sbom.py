#!/usr/bin/env python3
"""The SBOM of a roce_exporter release (python3 >= 3.11, stdlib only): an
SPDX 2.3 JSON document of the crates the shipped binary links, from
`cargo metadata` (the dependency graph, licenses, sources) and Cargo.lock
(each registry crate's SHA-256).

The binary links the normal dependencies of the package, for the host
target, with the features a build of it turns on: build dependencies and
proc macros run at build time and are not linked, dev-dependencies only
build the tests. `cargo metadata` resolves features for the whole
workspace, tests included (an optional crate that only a dev-dependency's
features turn on is in its graph, yet not in the binary), so the features
are resolved here from the default ones down, as Cargo's resolver 2 does
for `cargo build`: per dependency its `features`, `default-features`, and
the `dep:`, `dep/feature` and `dep?/feature` entries of the features each
package turns on.

    python3 packaging/release/sbom.py write OUT.spdx.json [--revision REV]
    python3 packaging/release/sbom.py check OUT.spdx.json
        the document lists exactly the crates (name and version) that
        `cargo tree -e normal,no-proc-macro` shows for the binary, each
        registry crate with Cargo.lock's checksum

Exit status: 0, 1 when the check fails, 2 when cargo cannot be run.
"""

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PACKAGE = "roce_exporter"
CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"


def cargo(*args):
    try:
        r = subprocess.run(["cargo", *args], cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        sys.exit(f"cargo {' '.join(args)}: {e}")
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        sys.exit(2)
    return r.stdout


def host_target():
    out = subprocess.run(["rustc", "-vV"], capture_output=True, text=True, check=True).stdout
    (host,) = re.findall(r"^host: (\S+)$", out, re.M)
    return host


def metadata(target):
    return json.loads(cargo("metadata", "--format-version", "1", "--locked",
                            "--filter-platform", target))


def is_proc_macro(pkg):
    return any("proc-macro" in t["kind"] for t in pkg["targets"])


def linked(meta, root_features=("default",)):
    """({package id: features}, {package id: [dependency ids]}) of the
    crates the root package's build links."""
    pkgs = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    root = next(p["id"] for p in meta["packages"]
                if p["name"] == PACKAGE and p["source"] is None)

    def edges(pid):
        """(dependency entry, resolved id) of each normal dependency that
        applies to the target."""
        out = []
        for d in pkgs[pid]["dependencies"]:
            if d["kind"] is not None:
                continue
            extern = (d["rename"] or d["name"]).replace("-", "_")
            for e in nodes[pid]["deps"]:
                if e["name"] == extern and any(k["kind"] is None for k in e["dep_kinds"]):
                    out.append((d, e["pkg"]))
        return out

    def expand(pid, features):
        """The package's own features that `features` turn on, the optional
        dependencies they turn on, and the features they ask of each
        dependency (strong, and weak: only if it is on otherwise)."""
        table = pkgs[pid]["features"]
        own, deps, strong, weak = set(), set(), {}, {}
        todo = list(features)
        while todo:
            f = todo.pop()
            if f in own:
                continue
            own.add(f)
            for item in table.get(f, []):
                if item.startswith("dep:"):
                    deps.add(item[4:])
                elif "/" in item:
                    dep, feat = item.split("/", 1)
                    if dep.endswith("?"):
                        weak.setdefault(dep[:-1], set()).add(feat)
                    else:
                        deps.add(dep)
                        strong.setdefault(dep, set()).add(feat)
                elif item in table:
                    todo.append(item)
                else:
                    deps.add(item)  # an optional dependency's implicit feature
        return own, deps, strong, weak

    features = {root: set(root_features)}
    graph = {}
    changed = True
    while changed:
        changed = False
        for pid in list(features):
            own, deps, strong, weak = expand(pid, features[pid])
            children = []
            for d, child in edges(pid):
                key = d["rename"] or d["name"]
                if d["optional"] and key not in deps:
                    continue
                if is_proc_macro(pkgs[child]):
                    continue
                want = set(d["features"]) | strong.get(key, set()) | weak.get(key, set())
                if d["uses_default_features"]:
                    want.add("default")
                children.append(child)
                if not want <= features.get(child, set()) or child not in features:
                    features.setdefault(child, set()).update(want)
                    changed = True
            graph[pid] = sorted(set(children))
    return root, features, graph, pkgs


def lock_checksums():
    with open(os.path.join(ROOT, "Cargo.lock"), "rb") as f:
        lock = tomllib.load(f)
    return {(p["name"], p["version"]): p.get("checksum") for p in lock["package"]}


def spdx_license(text):
    """A crate's `license` as an SPDX expression: the old `A/B` form is
    `A OR B`; none is NOASSERTION."""
    if not text:
        return "NOASSERTION"
    return re.sub(r"\s*/\s*", " OR ", text.strip())


def spdx_id(pkg):
    return "SPDXRef-Package-" + re.sub(r"[^A-Za-z0-9.\-]", "-", f"{pkg['name']}-{pkg['version']}")


def created(revision):
    """The commit's time (reproducible), or SOURCE_DATE_EPOCH's."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if not epoch:
        r = subprocess.run(["git", "log", "-1", "--format=%ct", revision], cwd=ROOT,
                           capture_output=True, text=True)
        epoch = r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else "0"
    t = datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def document(revision):
    target = host_target()
    root, features, graph, pkgs = linked(metadata(target))
    sums = lock_checksums()
    top = pkgs[root]
    repo = (top.get("repository") or "https://example.invalid/roce_exporter").rstrip("/")
    packages, relationships = [], [
        {"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES",
         "relatedSpdxElement": spdx_id(top)}]
    for pid in sorted(features, key=lambda i: (pkgs[i]["name"], pkgs[i]["version"])):
        p = pkgs[pid]
        entry = {
            "SPDXID": spdx_id(p),
            "name": p["name"],
            "versionInfo": p["version"],
            "downloadLocation": "NOASSERTION",
            "filesAnalyzed": False,
            "licenseConcluded": "NOASSERTION",
            "licenseDeclared": spdx_license(p.get("license")),
            "copyrightText": "NOASSERTION",
            "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER",
                              "referenceType": "purl",
                              "referenceLocator": f"pkg:cargo/{p['name']}@{p['version']}"}],
        }
        if p.get("description"):
            entry["summary"] = " ".join(p["description"].split())
        if p["source"] == CRATES_IO:
            entry["downloadLocation"] = (f"https://crates.io/api/v1/crates/{p['name']}/"
                                         f"{p['version']}/download")
            checksum = sums.get((p["name"], p["version"]))
            if checksum:
                entry["checksums"] = [{"algorithm": "SHA256", "checksumValue": checksum}]
        elif p["source"] is None:
            entry["downloadLocation"] = repo
        if pid == root:
            entry["primaryPackagePurpose"] = "APPLICATION"
            entry["comment"] = (f"the {PACKAGE} binary for {target}, features: "
                                + ", ".join(sorted(features[root])))
        else:
            entry["primaryPackagePurpose"] = "LIBRARY"
        packages.append(entry)
        for child in graph.get(pid, []):
            relationships.append({"spdxElementId": spdx_id(p), "relationshipType": "DEPENDS_ON",
                                  "relatedSpdxElement": spdx_id(pkgs[child])})
    name = f"{PACKAGE}-{top['version']}"
    return {
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": name,
        "documentNamespace": f"{repo}/spdx/{name}-{revision}",
        "creationInfo": {
            "created": created(revision),
            "creators": ["Tool: roce_exporter packaging/release/sbom.py"],
            "comment": "The crates the binary links: normal dependencies for the target, "
                       "build dependencies and proc macros left out (not linked).",
        },
        "packages": packages,
        "relationships": relationships,
    }


def cargo_tree_crates():
    """(name, version) of every crate `cargo tree` shows the binary
    linking."""
    out = cargo("tree", "--locked", "-p", PACKAGE, "-e", "normal,no-proc-macro",
                "--target", host_target(), "--prefix", "none", "--format", "{p}")
    crates = set()
    for line in out.splitlines():
        m = re.match(r"^(\S+) v(\S+)", line.strip())
        if m:
            crates.add((m.group(1), m.group(2)))
    return crates


def check(path):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    errors = []
    if doc.get("spdxVersion") != "SPDX-2.3":
        errors.append(f"spdxVersion {doc.get('spdxVersion')}")
    listed = {(p["name"], p["versionInfo"]) for p in doc["packages"]}
    want = cargo_tree_crates()
    for name, version in sorted(listed - want):
        errors.append(f"{name} {version} is in the SBOM, but cargo tree does not link it")
    for name, version in sorted(want - listed):
        errors.append(f"{name} {version} is linked (cargo tree), but not in the SBOM")
    sums = lock_checksums()
    for p in doc["packages"]:
        lock = sums.get((p["name"], p["versionInfo"]))
        got = [c["checksumValue"] for c in p.get("checksums", [])]
        if lock and got != [lock]:
            errors.append(f"{p['name']} {p['versionInfo']}: checksum {got}, Cargo.lock {lock}")
    ids = {p["SPDXID"] for p in doc["packages"]}
    for r in doc["relationships"]:
        for end in (r["spdxElementId"], r["relatedSpdxElement"]):
            if end != "SPDXRef-DOCUMENT" and end not in ids:
                errors.append(f"relationship to an unknown element {end}")
    for e in errors:
        print("FAIL", e)
    print(f"{path}: {len(listed)} crates, cargo tree: {len(want)}; "
          f"{sum(1 for p in doc['packages'] if p.get('checksums'))} with Cargo.lock's SHA-256"
          + ("" if errors else "; they match"))
    return 1 if errors else 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("out")
    w.add_argument("--revision", default="HEAD", help="the commit the release is built from")
    c = sub.add_parser("check")
    c.add_argument("sbom")
    args = p.parse_args(argv)
    if args.cmd == "check":
        return check(args.sbom)
    rev = subprocess.run(["git", "rev-parse", args.revision], cwd=ROOT, capture_output=True,
                         text=True).stdout.strip() or args.revision
    doc = document(rev)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, sort_keys=False)
        f.write("\n")
    print(f"{args.out}: SPDX 2.3, {len(doc['packages'])} crates")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
