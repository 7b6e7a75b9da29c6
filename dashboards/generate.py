#!/usr/bin/env python3
"""Writes the Grafana dashboards of roce_exporter from the monitoring mixin
(mixin/dashboards/, jsonnet; python3, stdlib only, and Debian's `jsonnet`):
this maps the flags below to the mixin's _config and writes what
mixin/render.jsonnet renders.

    python3 dashboards/generate.py                   # rewrite alerts/ and dashboards/
    python3 dashboards/generate.py --job rdma-nodes --out /var/lib/grafana/dashboards/roce
"""

import argparse
import os
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "mixin"))
import render as mixin  # noqa: E402  (mixin/render.py)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=None, help="directory for the dashboards (default: "
                   "dashboards/; without flags, alerts/ and dashboards/ at the default _config)")
    p.add_argument("--job", help="the job the dashboards' job variable starts on")
    p.add_argument("--selector", help="PromQL matchers of the exporter's series (its job "
                   "matcher is the job variable's default, the others stay in every query)")
    p.add_argument("--cluster-label", help="the label that tells clusters apart")
    p.add_argument("--scrape-interval", type=int,
                   help="Prometheus' scrape interval in seconds (rate ranges are 4x it)")
    p.add_argument("--uid-prefix", help="prefix of every dashboard's uid")
    p.add_argument("--runbook-url-base", help="as alerts/generate.py's")
    p.add_argument("--node-exporter-selector", help="matchers of node_exporter's series")
    p.add_argument("--dcgm-selector", help="matchers of dcgm-exporter's series")
    args = p.parse_args(argv)
    keys = {"job": "job", "selector": "selector", "cluster_label": "clusterLabel",
            "scrape_interval": "scrapeIntervalSeconds", "uid_prefix": "dashboardUIDPrefix",
            "runbook_url_base": "runbookURLBase",
            "node_exporter_selector": "nodeExporterSelector",
            "dcgm_selector": "dcgmExporterSelector"}
    config = {keys[k]: v for k, v in vars(args).items() if k in keys and v is not None}
    if args.out is None and not config:
        return mixin.main([])
    out = args.out or HERE
    os.makedirs(out, exist_ok=True)
    for path, text in mixin.render(config, part="dashboards").items():
        with open(os.path.join(out, os.path.basename(path)), "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
