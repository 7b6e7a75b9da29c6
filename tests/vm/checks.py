"""What the host-side checkers of the VM tests share (check_probe.py,
check_soak.py, check_peer.py; stdlib only): the PASS/FAIL lines, the files
the guest brought back and the samples of a scrape."""

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
