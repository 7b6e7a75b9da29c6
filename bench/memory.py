#!/usr/bin/env python3
"""Resident memory of roce_exporter over an hour's worth of samples.

At the default 5 s interval an hour is 720 samples. This runs the real
binary on generated mlx5 trees (roce-testkit's bench tree, tmpfs) with the fastest
interval the configuration accepts (100 ms), so that 720 samples take 72 s,
scrapes it as Prometheus would (one scrape per three samples, 15 s at the
default interval; plain and gzip alternately), and reads VmRSS every few
samples. The history the rules keep is full after 64 samples (its cap), so
the second half of the run is the steady state: its RSS must be flat.

Prints, per tree size, RSS at start, at the half, at the end and its peak,
and a least-squares slope over the second half; writes a Markdown section
(--out) that bench/performance.py folds into docs/performance.md. Exit
status 1 when a size is over its limit (10 MiB at 8 ports, 25 MiB at 128)
or grows.

    python3 bench/memory.py --binary target/release/roce_exporter
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
import bench  # noqa: E402

LIMITS_MIB = {8: 10.0, 128: 25.0}
# Flat: the second half may not grow by more than this (allocator noise:
# glibc returns freed pages lazily).
GROWTH_TOLERANCE_KIB = 256


def fit_slope(points):
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0


def run(args, ports, workdir):
    tree = os.path.join(args.tree_dir, "roce-mem-%d-%d" % (ports, os.getpid()))
    bench.generate_tree(tree, ports)
    config = os.path.join(workdir, "mem-%d.yml" % ports)
    with open(config, "w") as f:
        f.write("sample_interval: %gms\n" % (args.interval * 1000))
    port = bench.free_port()
    exp = bench.Exporter("roce_exporter", [args.binary, "--config.file=" + config,
                                           "--path.sysfs=" + tree,
                                           "--web.listen-address=127.0.0.1:%d" % port,
                                           "--log.level=warn"], port, workdir, args.nofile)
    points = []  # (samples since start, RSS KiB)
    try:
        exp.wait_ready(timeout=60.0, needle="roce_port_")
        start = time.monotonic()
        next_scrape = 0.0
        gz = False
        while True:
            elapsed = time.monotonic() - start
            samples = elapsed / args.interval
            if samples >= args.samples:
                break
            if elapsed >= next_scrape:
                exp.client.get("/metrics", accept_encoding="gzip" if gz else None)
                gz = not gz
                next_scrape += 3 * args.interval
            rss, _ = bench.memory_kib(exp.pid)
            points.append((samples, rss))
            time.sleep(args.interval * 2)
        rss, hwm = bench.memory_kib(exp.pid)
        points.append((args.samples, rss))
    finally:
        exp.stop()
        shutil.rmtree(tree, ignore_errors=True)
    half = [p for p in points if p[0] >= args.samples / 2]
    r = {
        "ports": ports,
        "start": points[0][1],
        "half": half[0][1],
        "end": points[-1][1],
        "peak": hwm,
        "second_half_max_minus_min": max(v for _, v in half) - min(v for _, v in half),
        "slope_per_100": fit_slope(half) * 100,
        "growth_second_half": points[-1][1] - half[0][1],
    }
    limit = LIMITS_MIB.get(ports)
    r["limit_mib"] = limit
    r["within_limit"] = limit is None or r["peak"] / 1024 <= limit
    r["flat"] = r["growth_second_half"] <= GROWTH_TOLERANCE_KIB
    return r


def render(results, meta):
    mib = lambda k: "%.1f MiB" % (k / 1024)  # noqa: E731
    lines = [
        "## Memory over an hour of samples",
        "",
        "`%s` on %s: %d samples (an hour at the default 5 s interval) at %g ms, scraped every "
        "third sample (plain and gzip alternately), VmRSS read every other sample. The rules' "
        "history is full after 64 samples, so the second half is the steady state."
        % (meta["command"], meta["machine"], meta["samples"], meta["interval_ms"]),
        "",
        "| ports | RSS at start | at the half | at the end | peak (VmHWM) | second half: growth, "
        "max - min, slope per 100 samples | limit | |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        verdict = []
        verdict.append("flat" if r["flat"] else "GROWS")
        if r["limit_mib"] is not None:
            verdict.append("within" if r["within_limit"] else "OVER")
        lines.append("| %d | %s | %s | %s | %s | %+d KiB, %d KiB, %+.1f KiB | %s | %s |" % (
            r["ports"], mib(r["start"]), mib(r["half"]), mib(r["end"]), mib(r["peak"]),
            r["growth_second_half"], r["second_half_max_minus_min"], r["slope_per_100"],
            "%g MiB" % r["limit_mib"] if r["limit_mib"] else "—", ", ".join(verdict)))
    lines.append("")
    return "\n".join(lines)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", default=os.path.join(bench.REPO, "target/release/roce_exporter"))
    p.add_argument("--ports", default="8,128")
    p.add_argument("--samples", type=int, default=720)
    p.add_argument("--interval", type=float, default=0.1)
    p.add_argument("--tree-dir", default="/dev/shm")
    p.add_argument("--nofile", type=int, default=20000)
    p.add_argument("--out")
    args = p.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="roce-mem-")
    try:
        results = []
        for n in [int(x) for x in args.ports.split(",")]:
            r = run(args, n, workdir)
            print("%4d ports: RSS %.1f -> %.1f -> %.1f MiB (peak %.1f), second half %+d KiB"
                  % (n, r["start"] / 1024, r["half"] / 1024, r["end"] / 1024, r["peak"] / 1024,
                     r["growth_second_half"]), flush=True)
            results.append(r)
        meta = {"command": "python3 bench/memory.py " + " ".join(argv),
                "machine": "%d CPUs, %s" % (os.cpu_count(), os.uname().release),
                "samples": args.samples, "interval_ms": args.interval * 1000}
        text = render(results, meta)
        print(text)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text)
        bad = [r for r in results if not (r["flat"] and r["within_limit"])]
        sys.exit(1 if bad else 0)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
