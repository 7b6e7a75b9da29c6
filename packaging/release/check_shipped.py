#!/usr/bin/env python3
"""Fails on a runbook link or an image name under the placeholder domain
example.invalid (any name under .invalid, RFC 6761: it never resolves) in
any file a user gets: the
release's artifacts (tarball, deb, rpm, chart, OCI image) or, before a
release, the files they are built from. A runbook link is a URL on a line
that names a runbook (`runbook_url:`, `/runbook`, `runbook.md`); an image
name is the value of `image:`, `repository:`/`registry:` of an image,
kustomize's `newName:` or an OCI image annotation. Other placeholder
occurrences (an e-mail address, a `Source:` field) are listed, not failed.
Exit status 1 when any link or image name is a placeholder.

    python3 packaging/release/check_shipped.py PATH...

Each PATH is a folder (walked), a file, or an archive unpacked in memory:
.tar/.tar.gz/.tgz (tarball, chart, OCI layout: every layer too), .deb
(dpkg-deb --fsys-tarfile), .rpm (rpm2cpio and cpio). Only the placeholder
names are looked for; a real domain passes whatever it is.
"""

import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

# .invalid never resolves (RFC 6761): no registry, no site. Examples under
# example.com in documentation are examples, not placeholders left behind.
PLACEHOLDER = re.compile(rb"(?i)\b(?:[a-z0-9-]+\.)+invalid\b")
# a URL on such a host, and an image reference on one (host/path)
PLACEHOLDER_URL = re.compile(rb"(?i)\b[a-z][a-z0-9+.-]*://[^/\s\"'<>]*\.invalid\b")
PLACEHOLDER_REF = re.compile(rb"(?i)\b(?:[a-z0-9-]+\.)+invalid(?::[0-9]+)?/")
RUNBOOK = re.compile(rb"(?i)runbook")
IMAGE = re.compile(rb"(?i)(\bimage\s*[:=]|\brepository\s*:|\bregistry\s*:|\bnewName\s*:|org\.opencontainers\.image\.(?:source|url|ref\.name)|\bFROM\b)")
# Lines that document a placeholder on purpose: examples in comments and in
# ci/ values files of the chart are not what a user installs.
EXEMPT_PATHS = re.compile(r"(^|/)ci/[^/]*-values\.yaml$")
MAX_MEMBER = 64 << 20


def lines_with(data, name):
    """(line number, line) of every line of `data` naming a placeholder."""
    if not PLACEHOLDER.search(data):
        return []
    out = []
    for n, line in enumerate(data.split(b"\n"), 1):
        if PLACEHOLDER.search(line):
            out.append((n, line.strip()[:300]))
    return out


def judge(name, data, failures, notes):
    if EXEMPT_PATHS.search(name):
        return
    for n, line in lines_with(data, name):
        text = line.decode("utf-8", "replace")
        where = f"{name}:{n}: {text}"
        stripped = line.lstrip()
        comment = stripped.startswith((b"#", b"//"))
        link = RUNBOOK.search(line) and PLACEHOLDER_URL.search(line)
        image = IMAGE.search(line) and PLACEHOLDER_REF.search(line)
        if (link or image) and not comment:
            failures.append(where)
        else:
            notes.append(where)


def walk_tar(label, tar, failures, notes, depth=0):
    for m in tar:
        if not m.isfile() or m.size > MAX_MEMBER:
            continue
        f = tar.extractfile(m)
        if f is None:
            continue
        data = f.read()
        name = f"{label}!{m.name}"
        if depth < 2 and (data[:2] == b"\x1f\x8b" or data[257:262] == b"ustar"):
            try:
                with tarfile.open(fileobj=io.BytesIO(data)) as inner:
                    walk_tar(name, inner, failures, notes, depth + 1)
                continue
            except tarfile.TarError:
                pass
        judge(name, data, failures, notes)


def scan(path, failures, notes):
    if os.path.isdir(path):
        for root, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if d not in (".git", "target", "__pycache__", "node_modules")]
            for f in sorted(files):
                scan(os.path.join(root, f), failures, notes)
        return
    if path.endswith((".tar", ".tar.gz", ".tgz")):
        with tarfile.open(path) as tar:
            walk_tar(path, tar, failures, notes)
        return
    if path.endswith(".deb"):
        data = subprocess.run(["dpkg-deb", "--fsys-tarfile", path], capture_output=True,
                              check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            walk_tar(path, tar, failures, notes)
        return
    if path.endswith(".rpm"):
        # rpm2archive (rpm's own package) writes the payload as a tar.gz;
        # else rpm2cpio and cpio
        if shutil.which("rpm2archive"):
            with open(path, "rb") as f:
                data = subprocess.run(["rpm2archive", "-"], stdin=f, capture_output=True,
                                      check=True).stdout
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                walk_tar(path, tar, failures, notes)
            return
        with tempfile.TemporaryDirectory() as d:
            cpio = subprocess.run(["rpm2cpio", path], capture_output=True, check=True).stdout
            subprocess.run(["cpio", "-idm", "--quiet"], input=cpio, cwd=d, check=True)
            for root, _, files in os.walk(d):
                for f in files:
                    p = os.path.join(root, f)
                    with open(p, "rb") as fh:
                        judge(f"{path}!{os.path.relpath(p, d)}", fh.read(), failures, notes)
        return
    if os.path.getsize(path) > MAX_MEMBER:
        return
    with open(path, "rb") as f:
        judge(path, f.read(), failures, notes)


def main(paths):
    failures, notes = [], []
    for p in paths:
        scan(p, failures, notes)
    for n in notes:
        print("note (not a link or image):", n)
    for f in failures:
        print("FAIL placeholder runbook link or image name:", f)
    print(f"{len(failures)} placeholder runbook links or image names, {len(notes)} other "
          f"placeholder mentions in {', '.join(paths)}")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
