#!/usr/bin/env python3
"""Writes the Prometheus rule files and Alertmanager inhibit rules of
roce_exporter from the monitoring mixin (mixin/, jsonnet; python3, stdlib
only, and Debian's `jsonnet`). The alerts, their thresholds and the rule
table they follow are the mixin's: this maps the flags below to its
_config and writes what mixin/render.jsonnet renders.

    python3 alerts/generate.py        # rewrite alerts/ and dashboards/ (the shipped files)
    python3 alerts/generate.py --selector 'job="rdma"' --out /etc/prometheus/rules
    python3 alerts/generate.py --scrape-interval 20 --runbook-url-base 'https://wiki.example/roce'
    python3 alerts/generate.py --for-override 0s --out /tmp/x    # tests only

Module use (tests, charts/check.py): groups(params), render(params),
yaml_dump(value); params is a dict of the flags' names (scrape_interval,
selector, ...) over default_params().
"""

import argparse
import json
import os
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "mixin"))
import render as mixin  # noqa: E402  (mixin/render.py)

INHIBIT_FILE = "alertmanager.inhibit.yml"

# flag's name: (_config key, how its text becomes the value)
FLAGS = {
    "selector": ("selector", str),
    "fleet_by": ("fleetBy", lambda s: [x.strip() for x in s.split(",") if x.strip()]),
    "cluster_label": ("clusterLabel", str),
    "runbook_url_base": ("runbookURLBase", str),
    "scrape_interval": ("scrapeIntervalSeconds", int),
    "stale_intervals": ("staleIntervals", int),
    "nic_count_window": ("nicCountWindow", str),
    "drift_group_by": ("driftGroupBy", lambda s: [x.strip() for x in s.split(",") if x.strip()]),
    "peer_loss_min": ("peerLossMin", int),
    "peer_min_witnesses": ("peerMinWitnesses", int),
    "switch_info": ("switchInfo", str),
    "switch_label": ("switchLabel", str),
    "node_info": ("nodeInfo", str),
    "node_info_window": ("nodeInfoWindow", str),
    "node_exporter_selector": ("nodeExporterSelector", str),
}


def default_params():
    """No override: the mixin's default _config."""
    return {}


def config(params):
    """The _config overrides of params (`for_override` is a render option)."""
    out = {}
    for name, value in params.items():
        if name == "for_override" or value is None:
            continue
        key, convert = FLAGS[name]
        out[key] = convert(value) if isinstance(value, str) else value
    return out


def render(params):
    """{file name: text} of the Prometheus rule files."""
    files = mixin.render(config(params), params.get("for_override"), "alerts")
    return {os.path.basename(p): t for p, t in files.items() if p.endswith(".rules.yml")}


def render_inhibit(params):
    return mixin.render(config(params), params.get("for_override"), "alerts")[
        "alerts/" + INHIBIT_FILE]


def groups(params):
    """[(rule file name, its groups)]."""
    files = mixin.data(config(params), params.get("for_override"), "alerts")
    return [(os.path.basename(p), d["groups"]) for p, d in sorted(files.items())
            if p.endswith(".rules.yml")]


# YAML of the test files that accompany the rule files (promtool's test
# files): keys in the order given, strings as JSON-quoted scalars (valid
# YAML) or block literals when they span lines.
def yaml_scalar(value, indent):
    if isinstance(value, str):
        if "\n" in value:
            pad = " " * indent
            return "|-\n" + "\n".join(pad + line if line else "" for line in value.split("\n"))
        if '"' in value and "'" not in value and "\\" not in value:
            return "'" + value + "'"
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def yaml_dump(value, indent=0):
    pad = " " * indent
    out = []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                out.append(f"{pad}{k}:")
                out.append(yaml_dump(v, indent + 2))
            else:
                out.append(f"{pad}{k}: {yaml_scalar(v, indent + 2)}")
    elif isinstance(value, list):
        for item in value:
            text = yaml_dump(item, indent + 2)
            out.append(pad + "- " + text[indent + 2:])
    else:
        out.append(pad + yaml_scalar(value, indent))
    return "\n".join(out)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=None,
                   help="directory for the rule files (default: alerts/; without flags, "
                        "alerts/ and dashboards/ at the default _config)")
    p.add_argument("--selector", help="PromQL matchers of the exporter's series")
    p.add_argument("--fleet-by", help="comma separated labels that delimit a fleet")
    p.add_argument("--cluster-label", help="the label that tells clusters apart")
    p.add_argument("--runbook-url-base",
                   help="runbook_url template: {section}, {anchor}, {instance}; without "
                        "{section} or {anchor}, BASE#{anchor}")
    p.add_argument("--scrape-interval", type=int,
                   help="Prometheus' scrape interval in seconds (ranges are 4x it)")
    p.add_argument("--stale-intervals", type=int)
    p.add_argument("--nic-count-window")
    p.add_argument("--drift-group-by",
                   help="comma separated roce_device_info (or target) labels within which "
                        "firmware and QoS drift are counted")
    p.add_argument("--peer-loss-min", type=int,
                   help="lost probes of a pair's last 16 small ones from which it fails")
    p.add_argument("--peer-min-witnesses", type=int,
                   help="probers, peers or ports a peer-probe verdict needs at least")
    p.add_argument("--switch-info", help="series naming the switch of each port, e.g. LLDP")
    p.add_argument("--switch-label", help="the label of --switch-info that names the switch")
    p.add_argument("--node-info", help="series naming each exporter's node")
    p.add_argument("--node-info-window", help="how long a node's --node-info is remembered")
    p.add_argument("--node-exporter-selector",
                   help="matchers of node_exporter's series for the netdev join (none: any job)")
    p.add_argument("--for-override", help="use this `for:` in every alert (tests only)")
    args = vars(p.parse_args(argv))
    out = args.pop("out")
    params = {k: v for k, v in args.items() if v is not None}
    if out is None and not params:
        return mixin.main([])
    out = out or HERE
    os.makedirs(out, exist_ok=True)
    files = mixin.render(config(params), params.get("for_override"), "alerts")
    for path, text in files.items():
        with open(os.path.join(out, os.path.basename(path)), "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
