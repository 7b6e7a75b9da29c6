#!/usr/bin/env python3
"""Writes mixin/mixin.libsonnet, roce_exporter's monitoring mixin, from the
generators of the shipped files (alerts/generate.py, dashboards/generate.py;
python3, stdlib only), so the mixin and alerts/*.yml, dashboards/*.json
cannot drift: `tests/monitoring/run.py mixin` renders the mixin with
jsonnet at its default `_config` and compares the result with the shipped
files, and with another `_config` with what the generators write for it.

The generators run with placeholders (`%(selector)s`, ...) in place of the
parameters, and every string that holds one becomes a Jsonnet format
string applied to `$._config`. The scrape interval sets every rate range
and `for:`; the generators run once per supported interval and `_config`
picks one.

    python3 mixin/generate.py            # rewrite mixin/mixin.libsonnet

Use (jsonnet-bundler, kube-prometheus):
    local roce = (import 'roce-exporter-mixin/mixin.libsonnet') + {
      _config+:: { selector: 'job="rdma-nodes"', scrapeIntervalSeconds: 30 },
    };
    roce.prometheusAlerts  // and .prometheusRules, .grafanaDashboards
"""

import json
import os
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "alerts"))
import generate as alerts_gen  # noqa: E402  (alerts/generate.py)

sys.path.insert(0, os.path.join(ROOT, "dashboards"))
import importlib.util  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "dash_gen", os.path.join(ROOT, "dashboards", "generate.py"))
dash_gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dash_gen)

OUT = os.path.join(HERE, "mixin.libsonnet")
SCRAPE_INTERVALS = (15, 30, 60)

# _config key, alerts/generate.py parameter, the placeholder's format.
CONFIG = [
    ("selector", "selector", "s"),
    ("runbookUrlBase", "runbook_url_base", "s"),
    ("peerLossMin", "peer_loss_min", "d"),
    ("peerMinWitnesses", "peer_min_witnesses", "d"),
    ("nicCountWindow", "nic_count_window", "s"),
    ("staleIntervals", "stale_intervals", "d"),
    # node_exporter's and dcgm-exporter's series, for the joins with them
    # (the recording rules read node_exporter's, dashboards both)
    ("nodeExporterSelector", "node_exporter_selector", "s"),
    ("dcgmExporterSelector", "dcgm_selector", "s"),
]


def placeholders():
    return {param: f"\x00{key}\x00" for key, param, _ in CONFIG}


def config_defaults():
    defaults = dict(dash_gen.DEFAULTS, **alerts_gen.DEFAULTS)
    out = {key: defaults[param] for key, param, _ in CONFIG}
    out["scrapeIntervalSeconds"] = alerts_gen.DEFAULTS["scrape_interval"]
    return out


def to_format(text):
    """A string with placeholders as a Jsonnet format string (`%` doubled),
    or None when it has none."""
    if "\x00" not in text:
        return None
    text = text.replace("%", "%%")
    for key, _, fmt in CONFIG:
        text = text.replace(f"\x00{key}\x00", f"%({key}){fmt}")
    return text


def jsonnet(value, indent):
    """Jsonnet text of a JSON value; strings with placeholders are format
    strings over $._config."""
    pad = "  " * indent
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [f"{pad}  {json.dumps(k)}: {jsonnet(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list):
        if not value:
            return "[]"
        items = [f"{pad}  {jsonnet(v, indent + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    if isinstance(value, str):
        fmt = to_format(value)
        if fmt is not None:
            return f"({json.dumps(fmt)} % c)"
        return json.dumps(value)
    return json.dumps(value)


def rule_groups(scrape):
    params = dict(alerts_gen.default_params(), scrape_interval=scrape, **placeholders())
    alerts, records = [], []
    for name, groups in alerts_gen.groups(params):
        (records if name == alerts_gen.FLEET_RECORDING_FILE else alerts).extend(groups)
    return alerts, records


# The fleet dashboard compares the jobs its `job` variable picks (every job
# exporting roce_exporter_build_info), not the selector's.
FLEET_DASHBOARD = "roce-fleet.json"


def dashboards(scrape):
    params = dict(dash_gen.DEFAULTS, scrape_interval=scrape,
                  **{k: v for k, v in placeholders().items() if k in dash_gen.DEFAULTS})
    out = {name: json.loads(text) for name, text in dash_gen.render(params).items()}
    fleet = dash_gen.render(dict(dash_gen.DEFAULTS, scrape_interval=scrape))[FLEET_DASHBOARD]
    out[FLEET_DASHBOARD] = json.loads(fleet)
    return out


def render():
    per = {}
    for scrape in SCRAPE_INTERVALS:
        alerts, records = rule_groups(scrape)
        per[str(scrape)] = {"alerts": alerts, "records": records, "dashboards": dashboards(scrape)}
    cfg = config_defaults()
    cfg_lines = "\n".join(f"    {k}: {json.dumps(v)}," for k, v in cfg.items())
    return f"""// roce_exporter's monitoring mixin. Generated by mixin/generate.py from
// alerts/generate.py and dashboards/generate.py: edit those, not this file.
// The shipped alerts/*.yml and dashboards/*.json are this mixin at its
// default _config (tests/monitoring/run.py mixin compares them).
local byInterval(c) = {jsonnet(per, 0)};
{{
  _config+:: {{
    // PromQL matchers of the exporter's series.
{cfg_lines}
    // Prometheus' scrape interval: rate ranges are 4x it, the finding
    // alerts' `for:` 2x; one of {', '.join(map(str, SCRAPE_INTERVALS))}.
    // runbookUrlBase: runbook_url is <base>#<anchor of the alert's section
    // of docs/runbook.md>. peerLossMin, peerMinWitnesses: the peer-probe
    // verdicts' thresholds; nicCountWindow: how long RoceNicCountDropped
    // remembers a higher device count; staleIntervals: sample intervals
    // after which RoceSampleStale fires. nodeExporterSelector,
    // dcgmExporterSelector: matchers of node_exporter's and dcgm-exporter's
    // series, whose joins with ours the recording rules and dashboards make
    // (none: any job). The findings' own thresholds are the exporter's
    // `rules:` configuration, not the alerts'.
  }},
  local set = byInterval($._config)[std.toString($._config.scrapeIntervalSeconds)],
  prometheusAlerts+:: {{ groups+: set.alerts }},
  prometheusRules+:: {{ groups+: set.records }},
  grafanaDashboards+:: set.dashboards,
}}
"""


def main():
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(render())


if __name__ == "__main__":
    main()
