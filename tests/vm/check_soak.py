#!/usr/bin/env python3
"""Host side of tests/vm/soak.sh: judges the series guest/soak.sh wrote.

Prints one PASS/FAIL line per check, then the figures, and ends with
"N passed, M failed"; exit status 1 when anything failed, 2 on usage.
--markdown FILE also writes the report (docs/soak.md). Stdlib only.

Records before --warmup seconds are left out of the growth checks: the
rules' history fills to its cap (64 samples, one a second here) and the
allocator reaches its working set in that time.
"""
import argparse
import csv
import os
import re
import statistics
import sys

sys.dont_write_bytecode = True
from checks import check, counts, read, results  # noqa: E402  (this folder's shared parts)

# glibc malloc grows and trims the heap top in steps of about 128 KiB
# (M_TOP_PAD, M_TRIM_THRESHOLD), so a steady process can sit one step higher
# at the end than at the start without holding one byte more: two steps are
# noise. In a 600 s run the medians of the first and last third after the
# warm-up are ~340 samples apart, so this catches leaks above ~0.75 KiB per
# sample; finding smaller ones takes a longer run, not a tighter bound.
RSS_BOUND_KIB = 256
# Probe rounds send a few packets each (WRITE, SEND, their ACKs); the
# traffic must dwarf that for "ib_write_bw ran" to mean anything.
TRAFFIC_FACTOR = 50
PROBE_PKTS_PER_ROUND = 4
# Seconds without traffic between ib_write_bw runs: the 1 s the server gets
# to listen, connection setup and teardown; at the end, the last < 6 s in
# which no chunk is started.
TRAFFIC_GAP_S = 6

def kv(text):
    return dict(l.split("=", 1) for l in (text or "").splitlines() if "=" in l)


def num(v):
    """CSV cell -> float; an empty cell (a family with no sample) is None."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def parse_res(text, dev):
    """`rdma resource show` -> {pd, cq, qp, mr, ...} of dev"""
    for line in (text or "").splitlines():
        m = re.match(r'^\d+:\s+(\S+):\s+(.*)$', line.strip())
        if m and m.group(1) == dev:
            words = m.group(2).split()
            return {k: int(v) for k, v in zip(words[::2], words[1::2]) if v.isdigit()}
    return None


def prom_value(text, name):
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == name:
            return num(parts[1])
    return None


def thirds(rows):
    n = len(rows)
    k = max(1, n // 3)
    return rows[:k], rows[n - k:]


def slope_per_hour(rows, key):
    """least-squares slope of key over age, per hour"""
    xs = [r["age_s"] for r in rows]
    ys = [r[key] for r in rows]
    if len(xs) < 2:
        return 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx * 3600


def fmt(v):
    if v is None:
        return "-"
    return f"{v:.0f}" if float(v).is_integer() else f"{v:.1f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True, help="the guest's share folder")
    ap.add_argument("--host", help="host.txt written by soak.sh (machine facts)")
    ap.add_argument("--vm-rc", type=int, default=0)
    ap.add_argument("--warmup", type=float, default=90, help="seconds left out of growth checks")
    ap.add_argument("--markdown", help="write the report here as Markdown")
    a = ap.parse_args()
    d = a.dir
    if not os.path.isdir(d):
        print(f"no such directory {d}")
        return 2
    env = kv(read(d, "env.txt"))
    host = kv(read(os.path.dirname(a.host) or ".", os.path.basename(a.host))) if a.host else {}
    steps = read(d, "steps.txt") or ""
    duration = int(env.get("DURATION", "0") or 0)
    record = int(env.get("RECORD", "10") or 10)
    dev = "rxe0"

    check("guest script finished", a.vm_rc == 0, f"status {a.vm_rc}")
    rows = []
    text = read(d, "soak.csv")
    if text:
        for raw in csv.DictReader(text.splitlines()):
            rows.append({k: num(v) for k, v in raw.items()})
    check("series recorded", len(rows) >= 3, f"{len(rows)} records")
    if len(rows) < 3:
        return finish(a, host, env, rows, [], None)
    last_t = rows[-1]["t"] or 0
    check("the series covers the duration", last_t >= duration - record,
          f"last record at {last_t:.0f} s of {duration} s")
    check("the exporter stayed up and every scrape answered",
          "died" not in steps and "scrape failed" not in steps
          and all(r["samples_total"] is not None for r in rows),
          next((l for l in steps.splitlines() if "died" in l or "scrape failed" in l), ""))
    m = re.search(r'^exit=(\d+)', steps, re.M)
    check("the exporter stopped cleanly on SIGTERM", m and m.group(1) == "0",
          f"exit status {m.group(1) if m else 'not recorded'}")

    steady = [r for r in rows if r["age_s"] is not None and r["age_s"] >= a.warmup]
    check(f"enough records after the {a.warmup:.0f} s warm-up", len(steady) >= 6, f"{len(steady)} records")
    if len(steady) < 2:
        return finish(a, host, env, rows, steady, None)
    first, last = thirds(steady)

    # ---- memory
    rss0 = statistics.median(r["rss_kib"] for r in first)
    rss1 = statistics.median(r["rss_kib"] for r in last)
    check(f"RSS growth from the first to the last third <= {RSS_BOUND_KIB} KiB",
          rss1 - rss0 <= RSS_BOUND_KIB,
          f"median {rss0:.0f} -> {rss1:.0f} KiB ({rss1 - rss0:+.0f} KiB), "
          f"slope {slope_per_hour(steady, 'rss_kib'):+.0f} KiB/h")
    hwm0, hwm1 = steady[0]["hwm_kib"], steady[-1]["hwm_kib"]
    check(f"VmHWM growth after the warm-up <= {RSS_BOUND_KIB} KiB", hwm1 - hwm0 <= RSS_BOUND_KIB,
          f"{hwm0:.0f} -> {hwm1:.0f} KiB")

    # ---- descriptors, threads, verbs objects
    def flat(key):
        vals = sorted({r[key] for r in steady})
        return len(vals) == 1 and vals[0] is not None, vals

    ok, vals = flat("fds")
    check("open descriptors constant after the warm-up", ok, f"values {[fmt(v) for v in vals]}")
    ok, vals = flat("threads")
    check("threads constant after the warm-up", ok, f"values {[fmt(v) for v in vals]}")
    objs = ("qp", "cq", "mr", "pd")
    seen = sorted({tuple(r[k] for k in objs) for r in steady})
    check("verbs objects the exporter owns (qp, cq, mr, pd) constant after the warm-up",
          len(seen) == 1, f"values {[tuple(fmt(v) for v in s) for s in seen]}")
    check("the probes' verbs objects were seen (two QPs, a CQ, an MR and a PD per probed port)",
          seen and seen[0][0] is not None and seen[0][0] >= 2 and all((v or 0) >= 1 for v in seen[0][1:]),
          f"{tuple(fmt(v) for v in seen[0]) if seen else None}")
    before, after = parse_res(read(d, "res-before.txt"), dev), parse_res(read(d, "res-after.txt"), dev)
    pick = lambda r: tuple((r or {}).get(k) for k in objs)
    check("every verbs object freed once the exporter and the traffic stopped",
          before is not None and pick(before) == pick(after),
          f"{dev} before {pick(before)}, after {pick(after)} (qp, cq, mr, pd)")

    # ---- sampling
    interval = prom_value(read(d, "first.prom"), "roce_sample_interval_seconds") or 1.0
    missed = rows[-1]["ticks_missed"]
    check("no sample tick missed over the whole run (warm-up included)", missed == 0,
          f"roce_sample_ticks_missed_total {fmt(missed)}")
    s_last, age_last = rows[-1]["samples_total"], rows[-1]["age_s"]
    want = age_last / interval
    # the first sample is taken before the schedule starts and the schedule
    # begins with one more at once: two more than whole intervals elapsed
    check("roce_samples_total = exporter age / sample_interval (within 3 + 0.5 %)",
          abs(s_last - want) <= 3 + 0.005 * want,
          f"{fmt(s_last)} samples at age {age_last:.1f} s (interval {interval:g} s)")
    ds = steady[-1]["samples_total"] - steady[0]["samples_total"]
    da = steady[-1]["age_s"] - steady[0]["age_s"]
    check("samples after the warm-up kept pace with the clock (within 2)", abs(ds - da / interval) <= 2,
          f"{fmt(ds)} samples in {da:.1f} s")
    check("every collector succeeded in every record",
          all(r["collector_success_min"] == 1 and (r["collectors"] or 0) >= 4 for r in rows),
          f"collectors {fmt(rows[-1]['collectors'])}")

    # ---- probes (1 s interval, jittered)
    req = rows[-1]["probe_requests"] or 0
    fails = rows[-1]["probe_failures"] or 0
    rtt = rows[-1]["probe_rtt_count"] or 0
    pint = 1.0
    check("probe rounds kept coming (>= 90 % of age / probe interval)", req >= 0.9 * age_last / pint,
          f"{fmt(req)} rounds in {age_last:.0f} s")
    check("no probe failed", fails == 0 and all((r["probe_failures"] or 0) == 0 for r in rows),
          f"roce_probe_failures_total {fmt(fails)}")
    check("every probe round observed in the RTT histogram", rtt == req - fails,
          f"count {fmt(rtt)}, rounds {fmt(req)}")

    # ---- traffic
    runs = [kv(l.replace(" ", "\n")) for l in (read(d, "traffic.txt") or "").splitlines()]
    secs = sum(int(r.get("seconds", 0)) for r in runs)
    bad = [r for r in runs if r.get("client_rc") != "0" or r.get("server_rc") != "0"]
    check("every ib_write_bw run succeeded", runs and not bad,
          f"{len(runs)} runs" + (f"; failed: {bad}" if bad else ""))
    # Chunks follow each other with a short pause (the server must listen
    # before the client connects); the guest stops starting chunks 5 s
    # before the end. Longer pauses would leave the exporter idle.
    span = kv(steps.replace(" ", "\n"))
    gaps = []
    try:
        prev = int(span["traffic_start"])
        for r in runs:
            # a run's wall time beyond its -D seconds was setup, not traffic
            gaps.append(int(r["end"]) - int(r["seconds"]) - prev)
            prev = int(r["end"])
        gaps.append(max(0, int(span["traffic_until"]) - prev))
    except (KeyError, ValueError):
        gaps = []
    check(f"ib_write_bw ran for the whole duration, pauses between runs <= {TRAFFIC_GAP_S} s",
          gaps and max(gaps) <= TRAFFIC_GAP_S,
          f"{secs} s of -D time in {duration} s, pauses {gaps}")
    pairs = list(zip(steady, steady[1:]))
    short = []
    for p, q in pairs:
        dp = (q["sent_pkts"] or 0) - (p["sent_pkts"] or 0)
        dr = (q["probe_requests"] or 0) - (p["probe_requests"] or 0)
        if dp < TRAFFIC_FACTOR * PROBE_PKTS_PER_ROUND * max(dr, 1):
            short.append((fmt(q["t"]), dp))
    dsent = (steady[-1]["sent_pkts"] or 0) - (steady[0]["sent_pkts"] or 0)
    check(f"rxe0 sent_pkts rose in every record interval by >= {TRAFFIC_FACTOR}x what the probes send",
          pairs and not short, f"{dsent:.0f} packets after the warm-up" + (f"; short: {short[:5]}" if short else ""))
    bw = []
    for n in sorted(os.listdir(os.path.join(d, "traffic"))) if os.path.isdir(os.path.join(d, "traffic")) else []:
        if n.startswith("client-"):
            mm = re.search(r'^\s*\d+\s+\d+\s+[\d.]+\s+([\d.]+)\s+[\d.]+\s*$', read(os.path.join(d, "traffic"), n) or "", re.M)
            if mm:
                bw.append(float(mm.group(1)))
    traffic = dict(runs=len(runs), seconds=secs, bw=bw, sent=dsent)
    return finish(a, host, env, rows, steady, (first, last, rss0, rss1, interval, traffic))


def finish(a, host, env, rows, steady, figures):
    passed, failed = counts()
    table = []
    if figures:
        first, last, rss0, rss1, interval, traffic = figures
        s0, s1 = steady[0], steady[-1]
        objs = lambda r: "/".join(fmt(r[k]) for k in ("qp", "cq", "mr", "pd"))
        bw = traffic["bw"]
        table = [
            ("exporter age (s)", fmt(s0["age_s"]), fmt(s1["age_s"])),
            ("VmRSS (KiB), median of first / last third", fmt(rss0), fmt(rss1)),
            ("VmRSS (KiB), min..max after warm-up", "", f"{fmt(min(r['rss_kib'] for r in steady))}..{fmt(max(r['rss_kib'] for r in steady))}"),
            ("VmHWM (KiB)", fmt(s0["hwm_kib"]), fmt(s1["hwm_kib"])),
            ("open descriptors", fmt(s0["fds"]), fmt(s1["fds"])),
            ("threads", fmt(s0["threads"]), fmt(s1["threads"])),
            ("exporter's verbs objects qp/cq/mr/pd", objs(s0), objs(s1)),
            ("rxe0 totals qp/cq/mr/pd (ib_write_bw's included)",
             "/".join(fmt(s0[k]) for k in ("dev_qp", "dev_cq", "dev_mr", "dev_pd")),
             "/".join(fmt(s1[k]) for k in ("dev_qp", "dev_cq", "dev_mr", "dev_pd"))),
            ("roce_samples_total", fmt(s0["samples_total"]), fmt(s1["samples_total"])),
            ("roce_sample_ticks_missed_total", fmt(s0["ticks_missed"]), fmt(rows[-1]["ticks_missed"])),
            ("roce_probe_requests_total", fmt(s0["probe_requests"]), fmt(s1["probe_requests"])),
            ("roce_probe_failures_total", fmt(s0["probe_failures"] or 0), fmt(s1["probe_failures"] or 0)),
            ("rxe0 sent_pkts", fmt(s0["sent_pkts"]), fmt(s1["sent_pkts"])),
            ("ib_write_bw runs / seconds / mean BW (MB/s)", "",
             f"{traffic['runs']} / {traffic['seconds']} / {statistics.fmean(bw):.1f}" if bw else f"{traffic['runs']} / {traffic['seconds']} / -"),
        ]
        print(f"FIGURES sample_interval {interval:g} s, records every {env.get('RECORD')} s, warm-up {a.warmup:.0f} s")
        for name, x, y in table:
            print(f"FIGURES {name}: {x + ' -> ' if x else ''}{y}")
    print(f"{passed} passed, {failed} failed")
    if a.markdown:
        write_markdown(a, host, env, table, passed, failed)
    return 1 if failed else 0


def write_markdown(a, host, env, table, passed, failed):
    dur = env.get("DURATION", "?")
    rec = env.get("RECORD", "?")
    binary = host.get("binary", "")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    given = os.path.relpath(binary, root) if binary.startswith(root + os.sep) else binary
    build = "debug" if "/debug/" in binary else "release" if "/release/" in binary else "given"
    out = os.path.relpath(os.path.abspath(a.markdown), root)
    command = (f"ROCE_EXPORTER_BIN={given} " if given else "") + \
        f"bash tests/vm/soak.sh --duration {dur} --interval {rec} --markdown {out}"
    lines = [
        "# Soak: the exporter with probes under traffic",
        "",
        "Written by `tests/vm/check_soak.py --markdown` at the end of this command (rerun it to",
        "refresh this file; method and bounds: [tests/vm/README.md](../tests/vm/README.md#the-soak)):",
        "",
        "```sh",
        command,
        "```",
        "",
        f"The exporter (sample_interval 1 s, verbs probes every 1 s on rxe0) ran {dur} s in the Soft-RoCE VM",
        f"under continuous `ib_write_bw` loopback traffic on the same port; every {rec} s the guest recorded",
        "its VmRSS/VmHWM, descriptors, threads, the verbs objects its threads own",
        "(`rdma resource show qp|cq|mr|pd`), and the sampler and probe counters from a scrape. Records of",
        f"the first {a.warmup:.0f} s of the exporter's life are left out of the growth checks (the rules'",
        "history fills to its 64-sample cap in the first 64 s).",
        "",
        "## Machine",
        "",
        f"- host: {host.get('nproc', '?')} CPUs, {host.get('cpu', '?')}; qemu accelerator: {host.get('accel', '?')}"
        + (f"; load average {host['load_before']} before, {host['load_after']} after"
           if "load_before" in host and "load_after" in host else ""),
        f"- guest: {env.get('NPROC', '?')} vCPUs, kernel {env.get('KERNEL', '?')}, Soft-RoCE (rdma_rxe) on virtio-net",
        f"- exporter: {build} build from {host.get('revision', '?')}; run {host.get('date', '?')}",
        "",
        "## Figures",
        "",
        "| | first record after the warm-up | last record |",
        "|---|---|---|",
    ]
    lines += [f"| {n} | {x} | {y} |" for n, x, y in table]
    lines += ["", "## Checks", ""]
    lines += [f"- {'PASS' if ok else 'FAIL'} {n}" + (f": {det}" if det else "") for n, ok, det in results]
    lines += ["", f"{passed} passed, {failed} failed", ""]
    with open(a.markdown, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
