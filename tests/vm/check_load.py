#!/usr/bin/env python3
"""Host side of the load test in the two- and three-VM runs: judges what
guest/load.sh wrote (DIR/<requester>/load-*, DIR/<responder>/load-*).

  --dir SHARE --requester a --responder b [--rails 2]

Checks: the exporter's bandwidth within 15 % of ib_write_bw's between the
same VMs (the mean of the runs before and after it, same size and shape;
of two such brackets, the one whose ib_write_bw runs agree best);
both ends counting the same bytes; the bytes in rxe0's own counters;
check's per-port and node lines; the refusals (busy, no or wrong
credentials, over the caps, off the rail) with their statuses and
counters; a killed requester's session released to the responder's
resource baseline; a link taken down mid-run ending the run within its
deadline with a finding. With --rails N (the three-VM run): every port at
once and each alone, each with its figures.

Prints one PASS/FAIL line per check and ends with "N passed, M failed";
exit status 1 when anything failed. Stdlib only.
"""
import argparse
import json
import os
import re
import sys

sys.dont_write_bytecode = True
from checks import check, counts, get, parse_prom, read  # noqa: E402

TOLERANCE = 0.15
MIB = 1 << 20
# the responder's idle end (roce_fleet::load::responder::IDLE) and room
# for the guest's polling
IDLE_S = 5
RELEASE_BOUND_S = IDLE_S + 15
# a 6 s run that stalls: the stall time, the end request's deadline and
# the samples around it, below the 60 s the guest allows
LINKDOWN_BOUND_S = 50


def perftest_mb(text):
    """BW average of an ib_write_bw report (MB/sec: MiB/s), bytes/s."""
    lines = (text or "").splitlines()
    for i, line in enumerate(lines):
        if "BW average" in line and i + 1 < len(lines):
            cols = lines[i + 1].split()
            if len(cols) >= 4:
                try:
                    return float(cols[3]) * MIB
                except ValueError:
                    return None
    return None


def stat(text, key):
    m = re.search(r"\b%s (\d+)" % re.escape(key), text or "")
    return int(m.group(1)) if m else None


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def status_of(text):
    m = re.search(r"status=(\d+)", text or "")
    return int(m.group(1)) if m else None


def figure(req, name):
    """The exporter's figure and its port in a results file, or (None, None)."""
    res = load(os.path.join(req, name))
    port = None
    if isinstance(res, dict) and res.get("runs"):
        ports = res["runs"][0].get("ports") or []
        port = ports[0] if ports else None
    ours = None
    if port:
        sizes = [s for s in port.get("sizes", []) if s.get("bytes_per_second")]
        ours = sizes[-1]["bytes_per_second"] if sizes else None
    return ours, port


def measure(req, resp):
    # (exporter's results, ib_write_bw before, after): the first run, and
    # the second the guest made when ib_write_bw moved by more than the
    # tolerance around the first; the pair of ib_write_bw runs that agree
    # best decides (the host's own drift, not the exporter's, is what
    # makes two runs a minute apart differ)
    triples = [("load-results-measure.json", 1, 2), ("load-results-measure-2.json", 2, 3)]
    seen = []
    for name, a, b in triples:
        ours, port = figure(req, name)
        p1 = perftest_mb(read(req, f"load-perftest-{a}.txt"))
        p2 = perftest_mb(read(req, f"load-perftest-{b}.txt"))
        if None in (ours, p1, p2) or p1 <= 0 or p2 <= 0:
            continue
        mean = (p1 + p2) / 2
        seen.append((abs(p1 - p2) / mean, ours, p1, p2, mean, ours / mean))
    ok = bool(seen)
    best = min(seen) if seen else None
    detail = "; ".join(
        f"exporter {o / 1e6:.2f} MB/s, ib_write_bw {a / 1e6:.2f} and {b / 1e6:.2f} MB/s around it "
        f"(mean {m / 1e6:.2f}, they differ by {sp:.0%}): ratio {r:.3f}" for sp, o, a, b, m, r in seen)
    check("the exporter's bandwidth within 15% of ib_write_bw's (64 KiB, 1 QP x 4, same VMs, same run)",
          ok and abs(best[5] - 1) <= TOLERANCE, detail or "figures missing")
    ours, port = figure(req, "load-results-measure.json")
    if not port:
        check("the measured run's results", False, "no results file")
        return
    check("the stream completed", (port.get("outcome") or {}).get("kind") == "completed", str(port.get("outcome")))
    written, counted = port.get("bytes", 0), port.get("responder_bytes")
    check("requester and responder count the same bytes", written > 0 and counted == written,
          f"written {written}, responder counted {counted}")
    before, after = read(req, "load-stat-measure-before.txt"), read(req, "load-stat-measure-after.txt")
    sent = (stat(after, "sent_pkts") or 0) - (stat(before, "sent_pkts") or 0)
    txb = (stat(after, "tx_bytes") or 0) - (stat(before, "tx_bytes") or 0)
    # 4096-byte RoCE payloads (active MTU 4096 behind eth0 at 9000)
    check("the bytes moved are in rxe0's packet counters and eth0's bytes",
          sent >= 0.95 * written / 4096 and txb >= written,
          f"sent_pkts +{sent} (>= {0.95 * written / 4096:.0f}), eth0 tx_bytes +{txb} (>= {written})")
    c = port.get("counters") or {}
    check("the exporter read the port's counters around the run", (c.get("tx_packets") or 0) >= 0.95 * written / 4096,
          f"tx_packets {c.get('tx_packets')}")
    text = read(req, "load-measure.out") or ""
    line = re.search(r"^\s+\[[^\]]+\]\s+rxe0 port 1 \(eth0\) -> node-\w+ rxe0 port 1: Measured: [0-9.]+ GB/s vs expected [0-9.]+ GB/s \([0-9.]+%\) at 64 KiB.*$",
                     text, re.M)
    check("check --load prints the port's line in the operator's form", line is not None,
          line.group(0).strip()[:200] if line else text[:300])
    node = re.search(r"^\s+\[[^\]]+\]\s+node \(\d+ ports?\): Measured: [0-9.]+ GB/s vs expected [0-9.]+ GB/s.*$", text, re.M)
    check("check --load prints the node's line", node is not None, node.group(0).strip() if node else "")
    under = re.search(r"^Counter rules under load: every port at once\n\s+\[[^\]]+\]\s+rxe0 port 1 \(eth0\): .*written.*$", text, re.M)
    check("the counters are judged under load, with the bytes moved beside", under is not None,
          under.group(0).splitlines()[-1].strip() if under else "")


def refusals(req, resp):
    want = {
        "busy": (409, "busy"),
        "noauth": (401, None),
        "wrongpass": (401, None),
        "overcap": (422, "over_cap"),
        "offrail": (422, "off_rail"),
    }
    for name, (code, reason) in want.items():
        t = read(req, f"load-refused-{name}.txt")
        ok = status_of(t) == code and (reason is None or f'"refused":"{reason}"' in (t or ""))
        check(f"the responder refuses: {name}", ok, (t or "no answer").replace("\n", " ")[:160])
    prom = parse_prom(read(resp, "load-responder.prom"))
    for reason in ("busy", "over_cap", "off_rail"):
        v = get(prom, "roce_load_test_responder_refused_total", reason=reason)
        check(f"roce_load_test_responder_refused_total{{reason=\"{reason}\"}} counts it", (v or 0) >= 1, f"{v}")


def killed(req, resp):
    base = (read(resp, "load-res-baseline.txt") or "").strip()
    after = (read(resp, "load-res-after-kill.txt") or "").strip().splitlines()
    # both times on the responder's clock
    at = (read(resp, "load-kill-seen.txt") or "").strip()
    ok = len(after) == 2 and after[1].strip() == base and base != ""
    dt = None
    try:
        dt = float(after[0]) - float(at)
    except (ValueError, IndexError):
        pass
    check("a killed requester's session leaves the responder at its rdma resource baseline",
          ok and dt is not None and dt <= RELEASE_BOUND_S,
          f"baseline {base!r}, after {after[1:] if after else None}, {dt and round(dt, 1)} s after the kill")
    prom = parse_prom(read(resp, "load-responder.prom"))
    v = get(prom, "roce_load_test_responder_sessions_total", ended="idle")
    check("the responder ended it as idle", (v or 0) >= 1, f"{v}")


def linkdown(req):
    rc = read(req, "load-linkdown.rc") or ""
    m = re.search(r"rc=(\d+) seconds=([0-9.]+)", rc)
    check("a link down mid-run ends the run within its deadline, never a hang",
          m is not None and float(m.group(2)) <= LINKDOWN_BOUND_S and m.group(1) in ("0", "1"),
          rc.strip())
    doc = load(os.path.join(req, "load-linkdown.out"))
    ok = isinstance(doc, dict) and isinstance(doc.get("load"), list) and doc["load"]
    check("check's JSON form carries the load test", bool(ok), "" if ok else "no `load` in the JSON")
    if not ok:
        return
    ports = doc["load"][0]["run"]["ports"]
    outcome = ports[0].get("outcome", {}) if ports else {}
    rules = {f.get("rule") for f in doc.get("findings", [])}
    check("the aborted stream is a finding", outcome.get("kind") == "aborted" and "load_test_aborted" in rules,
          f"outcome {outcome}, findings {sorted(r for r in rules if r)}")


def rails(req, n):
    res = load(os.path.join(req, "load-results-measure.json"))
    runs = res.get("runs", []) if isinstance(res, dict) else []
    every = [r for r in runs if r.get("scope") == "all"]
    alone = [r for r in runs if r.get("scope") == "alone"]
    fig = lambda p: [s.get("bytes_per_second") for s in p.get("sizes", []) if s.get("bytes_per_second")]
    ok_all = len(every) == 1 and len(every[0]["ports"]) == n and all(fig(p) for p in every[0]["ports"])
    check(f"every port at once: {n} ports, each with its figure", ok_all,
          str([(p["device"], fig(p)) for r in every for p in r["ports"]]))
    ok_alone = len(alone) == n and all(len(r["ports"]) == 1 and fig(r["ports"][0]) for r in alone)
    check("each port alone, each with its figure", ok_alone,
          str([(r["ports"][0]["device"], fig(r["ports"][0])) for r in alone if r.get("ports")]))
    text = read(req, "load-measure.out") or ""
    check("check --load prints both sections", "Load test: every port at once" in text and "Load test: each port alone" in text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--requester", default="a")
    ap.add_argument("--responder", default="b")
    ap.add_argument("--rails", type=int, default=0)
    a = ap.parse_args()
    req, resp = os.path.join(a.dir, a.requester), os.path.join(a.dir, a.responder)
    steps = read(req, "steps.txt") or ""
    check("the load steps ran to their end", "load: done" in steps,
          [l for l in steps.splitlines() if "load:" in l][-1:] if steps else "no steps")
    if a.rails:
        rails(req, a.rails)
    else:
        measure(req, resp)
        refusals(req, resp)
        killed(req, resp)
        linkdown(req)
    passed, failed = counts()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
