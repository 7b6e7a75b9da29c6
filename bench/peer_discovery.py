#!/usr/bin/env python3
"""Fleet-wide request rate of peer-probe endpoint discovery, per mode, at
1,000 and 10,000 nodes.

Runs the ignored test `runner::bench::fleet_request_rates` of roce-fleet
(release build), which drives the coordinator's own planning code
(`Catalog::plan` / `Catalog::apply` in crates/fleet/src/runner/catalog.rs) for one
node over simulated time, every request answered at once, with
`refresh: 60s` and the default 5 packets/s:

- baseline, in the same run: every node fetching every peer's document
  every refresh (what the exporter did before the walk);
- documents: the walk (16 at once, then packets_per_second/2 new peers a
  second), first hour (the whole fleet started at once) and a steady hour
  (hour 2), healthy and with 1 % of peers dead plus 1 % whose probes keep
  failing;
- SRV: the same documents plus one DNS query per refresh;
- Prometheus: one query per refresh, with the size of the fleet's answer
  (JSON as Prometheus writes it, and gzip-compressed) and the time
  `parse_query_response` takes to parse it.

All nodes behave alike, so the fleet-wide rate is nodes x one node's rate.
Prints a markdown table (figures with the baseline and the ratio).

    python3 bench/peer_discovery.py
"""

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

TEST = "runner::bench::fleet_request_rates"


def main():
    cmd = ["cargo", "test", "--release", "-p", "roce-fleet", "--lib", TEST, "--", "--ignored", "--nocapture", "--exact"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stdout[-4000:] + out.stderr[-4000:])
        return 1
    rows = []
    for line in out.stdout.splitlines():
        if not line.startswith("BENCH ") or " mode " in line:
            continue
        f = line.split()
        extra = dict(kv.split("=", 1) for kv in f[6:] if "=" in kv)
        rows.append((f[1], int(f[2]), int(f[3]), float(f[4]), float(f[5]), extra))
    print("| mode | nodes | requests per node per hour | fleet-wide requests/s | baseline (every refresh) | ratio |")
    print("|---|---|---|---|---|---|")
    for mode, nodes, per_node, fleet, base, _ in rows:
        ratio = "-" if mode == "every_refresh" else ("0" if fleet == 0 else f"1/{base / fleet:,.0f}")
        print(f"| {mode} | {nodes:,} | {per_node:,} | {fleet:,.1f} | {base:,.1f} | {ratio} |")
    print()
    for mode, nodes, _, _, _, extra in rows:
        if mode == "prometheus":
            print(
                f"Prometheus answer for {nodes:,} nodes x 8 ports: {int(extra['answer_bytes']):,} bytes, "
                f"{int(extra['gzip_bytes']):,} gzip-compressed, parsed in {float(extra['parse_ms']):.0f} ms"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
