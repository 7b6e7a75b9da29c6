#!/usr/bin/env python3
"""Regenerates docs/performance.md: every performance figure the project
claims, each measured in the same run as its baseline.

Runs, in order, with the release binary:
  1. bench/sample_cost.py  sample cost at 1, 8, 32 and 128 ports against the
                           read floor and node_exporter, per-port slopes, and
                           the kernel requests per sample;
  2. bench/bench.py        scrape latency and CPU, plain and gzip, at 8 and
                           128 ports against node_exporter (also the
                           foundation targets; writes bench/results.md);
                           then twice with --equal-work at 8 ports (both
                           exporters read the same files): the ratio
                           against node_exporter and each source's CPU and
                           system calls per sample;
  3. bench/memory.py       RSS over an hour's worth of samples at 8 and 128
                           ports;
  4. bench/load.py         200 concurrent scrapers, slowloris and oversized
                           requests (when present);
  then the peer-probe, NCCL memory, endpoint discovery and LLDP capture
  (bench/lldp_cost.py, root) figures;
and writes their sections under a header naming the machine, the commit
and the command. Needs prometheus-node-exporter, strace and rustc.

    python3 bench/performance.py            # cargo build --release first
    python3 bench/performance.py --no-build --quick
"""

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
import bench  # noqa: E402
OUT = os.path.join(REPO, "docs", "performance.md")


def run(cmd):
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=REPO)


def section(path, title=None, keep=None):
    """The Markdown at path (only the `## ` sections named in keep)."""
    if not os.path.exists(path):
        return "## %s\n\nnot measured: %s was not written.\n" % (title or path, path)
    text = open(path).read()
    if keep is None:
        return text
    out, on = [], False
    for line in text.splitlines():
        if line.startswith("## "):
            on = any(line[3:].startswith(k) for k in keep)
        if on:
            out.append(line)
    return "\n".join(out) + "\n"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--no-build", action="store_true")
    p.add_argument("--quick", action="store_true", help="shorter windows (a smoke run)")
    p.add_argument("--binary", default=os.path.join(REPO, "target/release/roce_exporter"))
    args = p.parse_args(argv)
    if not args.no_build:
        if run(["cargo", "build", "--release", "--bin", "roce_exporter"]).returncode:
            sys.exit("build failed")
    tmp = tempfile.mkdtemp(prefix="roce-perf-")
    # (the per-script sections land in tmp; removed at the end)
    py = sys.executable
    cost, memory, load, peer, nccl, discovery, lldp = (
        os.path.join(tmp, n)
        for n in ("cost.md", "memory.md", "load.md", "peer.md", "nccl.md", "discovery.md",
                  "lldp.md"))
    # bench.py's own report stays where it always was, for its README.
    scrape = os.path.join(HERE, "results.md")
    load_report = os.path.join(HERE, "load-results.md")
    status = {}
    status["sample cost"] = run([py, "bench/sample_cost.py", "--binary", args.binary,
                                 "--out", cost] + (["--idle", "2"] if args.quick else [])).returncode
    status["scrape"] = run([py, "bench/bench.py", "--binary", args.binary, "--ports", "8,128",
                            "--encodings", "identity,gzip", "--out", scrape]
                           + (["--scrapes", "60", "--idle", "4"] if args.quick else [])).returncode
    equal = []
    for n in (1, 2):
        path = os.path.join(tmp, "equal-%d.md" % n)
        equal.append(path)
        status["equal work %d" % n] = run(
            [py, "bench/bench.py", "--binary", args.binary, "--ports", "8", "--equal-work",
             "--out", path] + (["--scrapes", "60", "--idle", "4"] if args.quick else [])
        ).returncode
    status["memory"] = run([py, "bench/memory.py", "--binary", args.binary, "--out", memory]
                           + (["--samples", "200"] if args.quick else [])).returncode
    if os.path.exists(os.path.join(HERE, "load.py")):
        status["load"] = run([py, "bench/load.py", "--binary", args.binary, "--out", load_report]
                             + (["--duration", "10"] if args.quick else [])).returncode
        load = load_report
    status["peer probes"] = run([py, "bench/peer_probes.py", "--binary", args.binary,
                                 "--out", peer]
                                + (["--seconds", "20"] if args.quick else [])).returncode
    status["nccl memory"] = run([py, "bench/nccl_memory.py", "--binary", args.binary,
                                 "--out", nccl]).returncode
    status["lldp capture"] = run([py, "bench/lldp_cost.py", "--binary", args.binary,
                                  "--out", lldp]
                                 + (["--seconds", "30", "--rounds", "1"] if args.quick
                                    else [])).returncode
    with open(discovery, "w") as out:
        print("+ bench/peer_discovery.py", flush=True)
        status["peer discovery"] = subprocess.run([py, "bench/peer_discovery.py"], cwd=REPO,
                                                  stdout=out).returncode
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                         text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                           capture_output=True, text=True).stdout.strip()
    cpu = bench.cpu_model("?")
    with open("/proc/loadavg") as f:
        load_avg = " ".join(f.read().split()[:3])
    header = [
        "# Performance",
        "",
        "Generated by `python3 bench/performance.py%s`; rerun it to refresh. Every figure is "
        "measured in the same run as the baseline it is compared with; on a shared machine "
        "absolute times vary between runs, the ratios much less." % (" --quick" if args.quick
                                                                     else ""),
        "",
        "- date: %s UTC" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "- machine: %d CPUs (%s), kernel %s, load average at the end %s"
        % (os.cpu_count(), cpu, os.uname().release, load_avg),
        "- roce_exporter: git %s%s, release build" % (rev, " (with local changes)" if dirty else ""),
        "- results: " + ", ".join("%s %s" % (k, "ok" if v == 0 else "exit %d" % v)
                                  for k, v in status.items()),
        "",
    ]
    body = [
        section(cost, "Sample cost"),
        # counted from the driver's source, not measured: kept by hand
        open(os.path.join(HERE, "firmware.md")).read(),
        "## Scrape cost, plain and gzip, against node_exporter\n\nFrom `bench/bench.py --ports "
        "8,128 --encodings identity,gzip` (method: [bench/README.md](../bench/README.md)).\n",
        section(scrape, keep=["Figures", "Ratios", "Targets"]).replace("## ", "### "),
    ]
    body.append(
        "## Equal work against node_exporter, and each source's cost\n\nFrom `bench/bench.py "
        "--ports 8 --equal-work`, twice in a row (the budget is to hold in both): the ports' "
        "`hw_counters/` and GID tables are removed from the tree, so both exporters read the "
        "same `counters/` and port files. Budget: CPU per sample + scrape <= 0.12 of "
        "node_exporter's CPU per scrape, RSS <= 10 MiB.\n")
    for n, path in enumerate(equal, 1):
        body.append("### Run %d\n" % n)
        body.append(section(path, keep=["Ratios", "Targets", "Cost of one sample"])
                    .replace("## ", "#### "))
    body.append(section(memory, "Memory"))
    if "load" in status:
        body.append(section(load, "Load"))
    body.append(section(peer, "Peer probes"))
    body.append(section(nccl, "NCCL source memory"))
    body.append(section(discovery, "Peer-probe endpoint discovery"))
    body.append(section(lldp, "LLDP capture"))
    with open(OUT, "w") as f:
        f.write("\n".join(header) + "\n" + "\n".join(body))
    print("wrote " + os.path.relpath(OUT, REPO))
    shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if any(status.values()) else 0)


if __name__ == "__main__":
    main(sys.argv[1:])
