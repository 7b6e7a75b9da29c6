"""What the host-side checkers of the VM tests share (check_probe.py,
check_soak.py; stdlib only): the PASS/FAIL lines and the files the guest
brought back."""

import os

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
