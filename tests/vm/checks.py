"""What the host-side checkers of the VM tests share (check_probe.py,
check_soak.py, check_peer.py, check_fleet.py, ...; stdlib only): the
PASS/FAIL lines, the guest's folder and exit status, the files and findings
the guests brought back and the samples of a scrape."""

import argparse
import json
import os
import re

# (name, ok, detail) of every check so far, in order
results = []


def check(name, ok, detail=""):
    """Records a check and prints its PASS/FAIL line."""
    results.append((name, bool(ok), detail))
    print(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {detail}" if detail else ""))


def counts():
    """(passed, failed) so far."""
    passed = sum(1 for _, ok, _ in results if ok)
    return passed, len(results) - passed


def read(d, name):
    """The text of file `name` in folder `d`; None when it cannot be read."""
    try:
        with open(os.path.join(d, name)) as f:
            return f.read()
    except OSError:
        return None


def guest_dir():
    """The folder the guest brought back (`--dir`) after checking that the
    guest script finished (`--vm-rc`); None when there is no such folder."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--vm-rc", type=int, default=0)
    a = ap.parse_args()
    if not os.path.isdir(a.dir):
        print(f"no such directory {a.dir}")
        return None
    check("guest script finished", a.vm_rc == 0, f"status {a.vm_rc}")
    return a.dir


def load_json(path):
    """The JSON document in `path`; None when it cannot be read or parsed."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def findings(share, role, name):
    """The findings `role` saved as `<name>-findings.json` in the share."""
    f = load_json(os.path.join(share, role, f"{name}-findings.json"))
    return [x for x in f if isinstance(x, dict)] if isinstance(f, list) else []


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prom(text):
    """[(name, {labels}, value)]"""
    out = []
    for line in (text or "").splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            continue
        labels = dict(LABEL.findall(m.group(3) or ""))
        try:
            v = float(m.group(4))
        except ValueError:
            continue
        out.append((m.group(1), labels, v))
    return out


def get(samples, name, **want):
    for n, labels, v in samples:
        if n == name and all(labels.get(k) == w for k, w in want.items()):
            return v
    return None


def all_of(samples, name, **want):
    return [(labels, v) for n, labels, v in samples
            if n == name and all(labels.get(k) == w for k, w in want.items())]
