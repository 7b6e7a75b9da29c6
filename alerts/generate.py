#!/usr/bin/env python3
"""Generates the Prometheus rule files and Alertmanager inhibit rules of
roce_exporter (python3, stdlib only).

The exporter judges, Prometheus notifies: every rule of the exporter's rule
table (docs/rules.json, `roce_exporter docs rules`) gets one alert that fires
on its finding, `roce_finding{rule="<id>"}`, with the finding's severity and
the exporter's thresholds and windows (no PromQL re-implements a rule, so
none can drift from the exporter). PromQL remains only for what one node
cannot see: the exporter down or stuck, and comparisons across the fleet
(firmware, MTU, PFC priority and GID type drift, ports slower than their
peers of the same NIC model, an instance that lost RDMA devices, and the
peer-probe verdicts: which node, port, path or switch the fleet's probes
blame). The
committed `alerts/*.yml` are this script's output with the default
parameters; `tests/monitoring/run.py static` fails when they differ.

    python3 alerts/generate.py                      # rewrite alerts/*.yml
    python3 alerts/generate.py --selector 'job="rdma"' --out /etc/prometheus/rules
    python3 alerts/generate.py --scrape-interval 15 --runbook-url-base 'https://wiki.example/roce'
    python3 alerts/generate.py --runbook-url-base 'https://{instance}/runbook/{section}'
    python3 alerts/generate.py --for-override 0s --out /tmp/x   # tests only

Metric names and labels: docs/metrics.md (generated from crates/exposition/src/).
"""

import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RULES_JSON = os.path.join(ROOT, "docs", "rules.json")

DEFAULTS = {
    # PromQL label matchers selecting the exporter's series (mixin convention).
    "selector": 'job="roce_exporter"',
    # Labels that delimit one fleet for the cross-node rules.
    "fleet_by": "job",
    # Where runbook_url points: BASE#<anchor of the alert's section> (the
    # heading's anchor as GitHub renders docs/runbook.md), or a template
    # with `{section}` (the section's name, as the exporter's
    # /runbook/<section> takes it) or `{anchor}`; `{instance}` becomes the
    # alert's instance or, for alerts without a live instance, one exporter
    # of the selector that is up (`http://{instance}/runbook/{section}`: the
    # runbook each exporter serves). The default is the runbook of the
    # project's repository (Cargo.toml `repository`).
    "runbook_url_base": None,
    # Prometheus' scrape interval (seconds): every rate()/increase() range
    # and every `for:` is derived from it.
    "scrape_interval": 60,
    # Sample older than this many intervals (and at least 30 s) is stale.
    "stale_intervals": 3,
    # How far back an instance's RDMA device count is remembered.
    "nic_count_window": "1h",
    # Labels of roce_device_info that delimit NICs whose QoS settings are
    # comparable: drift is counted within one NIC model and driver, since
    # generations legitimately differ (DCQCN parameters, ETS classes). A
    # target label on every series (e.g. a `rail` label) can be added.
    # Firmware is left out: a rolling upgrade does not change the fabric's
    # QoS standard, and RoceFirmwareDrift reports firmware drift itself.
    "drift_group_by": "hca_type,driver",
    # Peer-probe localization (the fleet layer over roce_peer_probe_peer_lost,
    # which counts the lost ones of a pair's last 16 small probes): a pair
    # fails from this many lost (the exporter's path_loss needs two too:
    # one loss in 16 is noise) ...
    "peer_loss_min": 2,
    # ... and a verdict needs at least this many witnesses: probers of a
    # node, peers of a port, ports cabled to a switch (more than half of
    # them failing names the node, port or switch).
    "peer_min_witnesses": 2,
    # The switch a port is cabled to: a series that is 1 per (instance,
    # device, port) with the neighbour's name in `switch_label` (LLDP's
    # System Name). Where it is absent the switch rules return nothing.
    "switch_info": "roce_lldp_neighbor_info",
    "switch_label": "system_name",
    # Which exporter a probed node is: each exporter's own responder per port
    # (`node`, `device`, `port`), remembered this long after it was last
    # scraped (a dead node's exporter is not), so the verdict on a node names
    # its instance and port too.
    "node_info": "roce_peer_probe_endpoint_info",
    "node_info_window": "1h",
    # node_exporter's series the joins read (node_network_info,
    # node_uname_info): PromQL matchers, none by default (the names are
    # node_exporter's own); e.g. 'job="node-exporter"' where several jobs
    # export them.
    "node_exporter_selector": "",
}

# Severities of findings that notify; info findings are for /findings,
# `check` and dashboards.
NOTIFY = "critical|warning"


def notifies(rule):
    """Whether a rule of the table can report a finding that notifies: a
    rule that only reports info findings has no alert."""
    return any(sev in NOTIFY.split("|") for sev in rule["severities"])


def load_rules(path=RULES_JSON):
    """The exporter's rule table (docs/rules.json)."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=HERE, help="directory for the generated files")
    p.add_argument("--selector", default=DEFAULTS["selector"])
    p.add_argument("--fleet-by", default=DEFAULTS["fleet_by"],
                   help="comma separated labels that delimit a fleet")
    p.add_argument("--runbook-url-base", default=DEFAULTS["runbook_url_base"],
                   help="runbook_url is BASE#<section's anchor>, or a template with "
                        "{section}, {anchor} and {instance} (the alert's instance), e.g. "
                        "'http://{instance}/runbook/{section}' for the exporter's own")
    p.add_argument("--scrape-interval", type=int, default=DEFAULTS["scrape_interval"],
                   help="Prometheus' scrape interval in seconds (ranges are 4x it)")
    p.add_argument("--stale-intervals", type=int, default=DEFAULTS["stale_intervals"])
    p.add_argument("--nic-count-window", default=DEFAULTS["nic_count_window"])
    p.add_argument("--drift-group-by", default=DEFAULTS["drift_group_by"],
                   help="comma separated roce_device_info (or target) labels within which "
                        "QoS drift is counted")
    p.add_argument("--peer-loss-min", type=int, default=DEFAULTS["peer_loss_min"],
                   help="lost probes of a pair's last 16 small ones from which it fails")
    p.add_argument("--peer-min-witnesses", type=int, default=DEFAULTS["peer_min_witnesses"],
                   help="probers, peers or ports a peer-probe verdict needs at least")
    p.add_argument("--switch-info", default=DEFAULTS["switch_info"],
                   help="series naming the switch of each (instance, device, port), e.g. LLDP")
    p.add_argument("--switch-label", default=DEFAULTS["switch_label"],
                   help="the label of --switch-info that names the switch")
    p.add_argument("--node-info", default=DEFAULTS["node_info"],
                   help="series naming each exporter's node (labels node, device, port)")
    p.add_argument("--node-info-window", default=DEFAULTS["node_info_window"],
                   help="how long a node's --node-info is remembered")
    p.add_argument("--node-exporter-selector", default=DEFAULTS["node_exporter_selector"],
                   help="matchers of node_exporter's series for the netdev join (none: any job)")
    p.add_argument("--rules-json", default=RULES_JSON, help="the exporter's rule table")
    p.add_argument("--for-override", default=None,
                   help="use this `for:` in every alert (tests only)")
    return p.parse_args(argv)


def params_from(args):
    params = dict(DEFAULTS)
    params.update(selector=args.selector, fleet_by=args.fleet_by,
                  runbook_url_base=args.runbook_url_base,
                  scrape_interval=args.scrape_interval,
                  stale_intervals=args.stale_intervals,
                  nic_count_window=args.nic_count_window,
                  drift_group_by=args.drift_group_by,
                  peer_loss_min=args.peer_loss_min,
                  peer_min_witnesses=args.peer_min_witnesses,
                  switch_info=args.switch_info, switch_label=args.switch_label,
                  node_info=args.node_info, node_info_window=args.node_info_window,
                  node_exporter_selector=args.node_exporter_selector)
    params["for_override"] = args.for_override
    params["table"] = load_rules(args.rules_json)
    return params


def default_params():
    return dict(DEFAULTS, for_override=None, table=load_rules())


def published_runbook():
    """docs/runbook.md in the project's repository (Cargo.toml's
    `repository`, main branch)."""
    repo = "https://github.com/roce-exporter/roce_exporter"
    try:
        with open(os.path.join(ROOT, "Cargo.toml"), encoding="utf-8") as f:
            m = re.search(r'^repository\s*=\s*"([^"]+)"', f.read(), re.M)
        if m:
            repo = m.group(1).rstrip("/")
    except OSError:
        pass
    return repo + "/blob/main/docs/runbook.md"


DEFAULTS["runbook_url_base"] = published_runbook()


def anchor(section):
    """The anchor GitHub (and most Markdown renderers) gives the heading
    `## <section>`: lower case, punctuation other than `-` and `_` dropped,
    spaces as `-`."""
    return re.sub(r"[^\w\- ]", "", section.lower()).replace(" ", "-")


def duration(seconds):
    """Seconds as a Prometheus duration (4m, 90s, 1h)."""
    seconds = int(seconds)
    for unit, n in (("h", 3600), ("m", 60)):
        if seconds % n == 0 and seconds >= n:
            return f"{seconds // n}{unit}"
    return f"{seconds}s"


def rate_range(p):
    """The range of every rate()/increase(): four scrape intervals, so that
    a window holds at least three samples whatever their phase."""
    return duration(4 * p["scrape_interval"])


def finding_for(p, rule_id=None):
    """`for:` of the finding alerts: the finding in two consecutive
    scrapes (the exporter's own windows and hold time do the rest), or the
    scrapes FINDING_FOR_SCRAPES gives the rule."""
    return duration(FINDING_FOR_SCRAPES.get(rule_id, 2) * p["scrape_interval"])


# Findings whose alert fires sooner than after two scrapes, in scrapes.
# peer_probe_port_isolated: the exporter's verdict already holds (every
# probe to at least two peers lost, four each, and no answer at all) and
# a local port's history starts empty at each exporter start, so no
# restart or single loss makes it; alerting at the first evaluation that
# sees it puts a black-holed port's alert within a minute of the fault at
# a 30 s scrape (docs/peer-probes.md, "Time to an alert").
FINDING_FOR_SCRAPES = {"peer_probe_port_isolated": 0}


def peer_verdict_for(p):
    """`for:` of the fleet's verdicts on a node and on a local port: held
    over two evaluations one scrape apart, long enough that an exporter
    restart (its responder gone for seconds, its probers' losses reset
    once they read its new endpoints) does not page, short enough that a
    dead node is named within two minutes of the fault at a 30 s scrape."""
    return duration(p["scrape_interval"])


def camel(rule_id):
    return "Roce" + "".join(w[:1].upper() + w[1:] for w in rule_id.split("_"))


def alert_name(rule_id):
    """The alert of a rule: `Roce` + its id in CamelCase (pfc_storm:
    RocePfcStorm), a leading `roce` of the id not repeated (roce_tc_shared:
    RoceTcShared, rocev2_gid_missing: RoceV2GidMissing)."""
    if rule_id.startswith("roce") and len(rule_id) > 4:
        rule_id = rule_id[4:].lstrip("_")
    return camel(rule_id)


def num(x):
    """A threshold as PromQL writes it (1e-12, 0.2, 10000)."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(x) if isinstance(x, float) else str(x)


def sel(params, extra=""):
    """`{selector, extra}` for a series selector."""
    parts = [s for s in (params["selector"], extra) if s]
    return "{" + ", ".join(parts) + "}"


# Extra matchers (kept out of f-string expressions: python3.11 has no
# backslashes there).
M_FW = 'fw_version!=""'
M_DEV = 'device!=""'
M_DEV_PFC = 'device!="", pfc!=""'
M_SOCKET = 'transport="socket"'
M_AER = '__name__=~"roce_pcie_aer_errors_total|roce_pcie_bridge_aer_errors_total"'
M_TOTAL = 'lane=""'
M_LANES = 'lane!=""'



def runbook_url(p, section, live_instance=True):
    """BASE#<anchor>, or the template BASE with `{section}`, `{anchor}` and
    `{instance}` filled in: the alert's instance when it is a live
    exporter, else one exporter of the selector that is up."""
    base = p["runbook_url_base"]
    if "{section}" not in base and "{anchor}" not in base:
        base += "#{anchor}"
    if "{instance}" in base:
        if live_instance:
            instance = "{{ $labels.instance }}"
        else:
            q = "up{" + p["selector"] + "} == 1"
            instance = ("{{ with query `" + q + "` }}{{ . | first | label \"instance\" }}"
                        "{{ end }}")
        base = base.replace("{instance}", instance)
    return base.replace("{section}", section).replace("{anchor}", anchor(section))


def alert(params, name, expr, for_, labels, summary, description, section, live_instance=True):
    if params["for_override"] is not None:
        for_ = params["for_override"]
    rule = {"alert": name, "expr": expr}
    if for_ and for_ != "0s":
        rule["for"] = for_
    if labels:
        rule["labels"] = labels
    rule["annotations"] = {
        "summary": summary,
        "description": description,
        "runbook_url": runbook_url(params, section, live_instance),
    }
    return rule


# Subject of a finding alert, from the labels roce_finding carries (empty
# ones are dropped by Prometheus and render as nothing).
SUBJECT = ("{{ if $labels.gpu }}GPU {{ $labels.gpu }} {{ end }}"
           "{{ if $labels.device }}{{ $labels.device }}{{ if $labels.port }} port "
           "{{ $labels.port }}{{ end }} {{ end }}"
           "{{ if $labels.netdev }}({{ $labels.netdev }}) {{ end }}")


def finding_alert(p, rule):
    rid = rule["id"]
    config = rule.get("config")
    where = ""
    if config:
        where = " Thresholds and windows: the exporter's `" + config["section"] + "`."
    return alert(
        p, alert_name(rid),
        f'roce_finding{sel(p, "rule=" + json.dumps(rid) + ", severity=~" + json.dumps(NOTIFY))} == 1',
        finding_for(p, rid), None,
        rid + ": " + SUBJECT + "on {{ $labels.instance }}",
        "roce_exporter on {{ $labels.instance }} reports the {{ $labels.severity }} finding "
        + rid + " for " + SUBJECT + "(it checks that " + rule["checks"] + ")." + where
        + " Evidence, fix and verify command: http://{{ $labels.instance }}/findings, or "
        "`roce_exporter check` on the node.",
        rid)


def recording_rules(p):
    s = lambda extra="": sel(p, extra)  # noqa: E731
    by = p["fleet_by"]
    return [
        {
            # RDMA devices an exporter sees; 0 (not absent) when it is up
            # and sees none, so that losing the last one is a drop too.
            "record": "instance:roce_rdma_devices:count",
            "expr": (f"count by ({by}, instance) (roce_device_info{s()})\n"
                     f"or on ({by}, instance)\n"
                     f"sum by ({by}, instance) (0 * (up{s()} == 1))"),
        },
        {
            # Rate of each active port, with its NIC model for peer comparison.
            "record": "device_port:roce_port_rate_bytes_per_second:active_by_hca_type",
            "expr": (f"(roce_port_rate_bytes_per_second{s()} and on ({by}, instance, device, port) "
                     f"(roce_port_up{s()} == 1))\n"
                     f"* on ({by}, instance, device) group_left (hca_type)\n"
                     f"max by ({by}, instance, device, hca_type) (roce_device_info{s()})"),
        },
    ]


# The fleet layer: what one panel of the fleet dashboard (dashboards/
# generate.py, "RoCE / Fleet") reads instead of one raw series per node,
# port and priority. Three levels: per port (`instance_device_port:`, the
# raw series' own labels, so cluster and other target labels stay), per
# instance (`instance:`) and per rail (`rail:`, the same device and port
# on every node: GPU clusters wire NIC N of every node to the same leaf).
FLEET_RECORDING_FILE = "roce_exporter.recording.rules.yml"
FLEET_ALERTS_FILE = "roce_exporter.fleet.rules.yml"
PORT = "instance_device_port:"


def fleet_by_labels(p, *extra):
    """`fleet_by` plus `cluster` (absent labels group as empty) and extra."""
    out = []
    for label in [*p["fleet_by"].split(","), "cluster", *extra]:
        label = label.strip()
        if label and label not in out:
            out.append(label)
    return ", ".join(out)


def fleet_recording_rules(p):
    s = lambda extra="": sel(p, extra)  # noqa: E731
    r = rate_range(p)
    on_netdev = fleet_by_labels(p, "instance", "netdev", "priority")
    per_port = [
        # The most paused priority and direction of the port (seconds paused
        # per second; pfc_storm judges the same ratio).
        ("roce_pfc_pause_ratio:max_rate",
         f"max without (netdev, priority, direction) "
         f"(rate(roce_pfc_pause_duration_seconds_total{s()}[{r}]))"),
        ("roce_ecn_marked_per_packet:ratio_rate",
         f"rate(roce_ecn_marked_packets_total{s()}[{r}])\n"
         f"  / (rate(roce_port_packets_received_total{s()}[{r}]) > 0)"),
        # Notification point: CNPs sent per packet received.
        ("roce_cnp_sent_per_packet:ratio_rate",
         f"rate(roce_cnp_sent_total{s()}[{r}])\n"
         f"  / (rate(roce_port_packets_received_total{s()}[{r}]) > 0)"),
        # Symbol errors per bit at the port's rate (symbol_errors' max_ber).
        ("roce_bit_error_rate:ratio_rate",
         f"rate(roce_port_symbol_errors_total{s()}[{r}])\n"
         f"  / (8 * roce_port_rate_bytes_per_second{s()} > 0)"),
        # Discards on priorities with PFC on: loss of RoCE traffic.
        ("roce_lossless_discards:rate",
         f"sum without (netdev, priority, reason) (\n"
         f"  rate(roce_netdev_priority_discards_total{s()}[{r}])\n"
         f"  * on ({on_netdev}) group_left ()\n"
         f"  (roce_pfc_enabled{s()} == 1)\n)"),
        # The 64-bit ethtool link-down counter where the driver has one,
        # else the 8-bit PMA link_downed (link_flap reads them the same way).
        ("roce_link_flaps:increase",
         f"max without (netdev) (increase(roce_netdev_link_down_events_total{s()}[{r}]))\n"
         f"or increase(roce_port_link_downed_total{s()}[{r}])"),
        # Failed probe rounds over rounds attempted (0 when none failed).
        ("roce_probe_loss:ratio_rate",
         f"(\n  sum without (reason) (rate(roce_probe_failures_total{s()}[{r}]))\n"
         f"  or 0 * rate(roce_probe_requests_total{s()}[{r}])\n)\n"
         f"/ (rate(roce_probe_requests_total{s()}[{r}]) > 0)"),
        # Peer probes (between hosts) of the port not answered, over those
        # sent, both sizes together (peer_probe_* localize which peer).
        ("roce_peer_probe_loss:ratio_rate",
         f"1 - sum without (size) (rate(roce_peer_probe_answered_total{s()}[{r}]))\n"
         f"  / (sum without (size) (rate(roce_peer_probe_sent_total{s()}[{r}])) > 0)"),
        # Blocks the FEC could not correct: frames lost on the wire. The
        # kernel reports the total (lane="") ahead of the per-lane counts,
        # which add up to it: the total alone, or the lanes' sum where a
        # series set has no total.
        ("roce_fec_uncorrectable:rate",
         f"sum without (netdev, lane) (rate(roce_fec_uncorrectable_blocks_total{s(M_TOTAL)}[{r}]))\n"
         f"or sum without (netdev, lane) "
         f"(rate(roce_fec_uncorrectable_blocks_total{s(M_LANES)}[{r}]))"),
    ]
    rules = [{"record": PORT + name, "expr": expr} for name, expr in per_port]
    inst = fleet_by_labels(p, "instance")
    rail = fleet_by_labels(p, "device", "port")
    worst = [("roce_pfc_pause_ratio:max_rate", "max"),
             ("roce_ecn_marked_per_packet:ratio_rate", "max"),
             ("roce_cnp_sent_per_packet:ratio_rate", "max"),
             ("roce_bit_error_rate:ratio_rate", "max"),
             ("roce_lossless_discards:rate", "sum"),
             ("roce_link_flaps:increase", "sum"),
             ("roce_probe_loss:ratio_rate", "max"),
             ("roce_peer_probe_loss:ratio_rate", "max"),
             ("roce_fec_uncorrectable:rate", "sum")]
    # Per rail (the fleet dashboard's rail tables); the per-instance worst
    # port is the dashboard's own topk over the per-port series.
    for name, agg in worst:
        metric, op = name.split(":")
        rules.append({"record": f"rail:{metric}:{agg}_{op}",
                      "expr": f"{agg} by ({rail}) ({PORT}{name}{s()})"})
    rules += [
        {"record": "instance:roce_ports_down:count",
         "expr": f"count by ({inst}) (roce_port_up{s()} == 0)"},
        {"record": "rail:roce_ports_down:count",
         "expr": f"count by ({rail}) (roce_port_up{s()} == 0)"},
        # Per node only: AER and devlink health are per PCI function, not
        # per RDMA port; NCCL per job. AER of the NICs and GPUs and of the
        # bridge ports on their paths (each port once).
        {"record": "instance:roce_pcie_aer_errors:sum_rate",
         "expr": f"sum by ({fleet_by_labels(p, 'instance', 'severity')}) "
                 f"(rate({s(M_AER)}[{r}]))"},
        {"record": "instance:roce_devlink_unhealthy:count",
         "expr": f"count by ({inst}) (roce_devlink_reporter_healthy{s()} == 0)"},
        {"record": "instance:roce_nccl_socket_connections:sum",
         "expr": f"sum by ({inst}) (roce_nccl_connections{s(M_SOCKET)})"},
        {"record": "instance_rule:roce_findings:count",
         "expr": f"count by ({fleet_by_labels(p, 'instance', 'rule', 'severity')}) "
                 f"(roce_finding{s()} == 1)"},
    ]
    return rules


# Joins with the exporters that run beside this one (docs/deploy.md,
# "Joins with node_exporter and dcgm-exporter"): one series per netdev and
# per GPU that carries both exporters' names for it, so that a query joins
# the other exporter's series to ours in one `* on (...) group_left (...)`.
NODE_EXPORTER_JOIN = "node_exporter_device:roce_netdev_port:info"
DCGM_JOIN = "dcgm_exporter_gpu:roce_gpu:info"
# The host part of an `instance`: node1:9879, node1, 10.0.0.1:9100 and
# [fe80::1]:9100 give node1, node1, 10.0.0.1 and [fe80::1].
HOST_OF_INSTANCE = "(.+?)(?::[0-9]+)?"


def join_labels(p):
    """The target labels both exporters' series share within one fleet:
    `fleet_by` and `cluster`, without `job` (each exporter has its own)."""
    return [x for x in fleet_by_labels(p).split(", ") if x != "job"]


def relabel(expr, steps, pad):
    """`expr` through one label_replace per (label, source, regex) step,
    each step's label set to the regex's first group of `source`; written
    one step a line, indented by `pad`."""
    out = "label_replace(" * len(steps) + "\n" + pad + "  " + expr
    for label, source, regex in steps:
        out += f',\n{pad}  "{label}", "$1", "{source}", "{regex}")'
    return out


def join_recording_rules(p):
    """node_exporter: each RoCE netdev as node_exporter names it (its
    `instance` and `device`), with our RDMA device and port and our
    instance (`roce_instance`). The two exporters of one host are matched
    on the host part of their instances or, where node_exporter is scraped
    by address and we by node name (kube-prometheus-stack), on
    node_uname_info's nodename; one node_exporter target per host and
    netdev is kept.

    dcgm-exporter: each GPU with dcgm-exporter's keys beside ours:
    pci_bus_id (NVML's form of the address, which the exporter exports),
    UUID (NVML's, empty without NVML), and the host part of our instance as
    Hostname (dcgm-exporter's label up to 4.5.x) and hostname (its label
    since); roce_instance and roce_gpu copy our instance and gpu so that a
    join can take them into dcgm-exporter's series, whose own instance and
    gpu they would overwrite."""
    s = lambda extra="": sel(p, extra)  # noqa: E731
    ne = "{" + p["node_exporter_selector"] + "}"
    join = join_labels(p)
    on = ", ".join(join + ["host", "device"])
    target = ", ".join(join + ["job", "instance"])
    ours = relabel("roce_netdev_info" + s(),
                   [("roce_instance", "instance", "(.*)"), ("rdma_device", "device", "(.*)"),
                    ("device", "netdev", "(.*)"), ("host", "instance", HOST_OF_INSTANCE)], "  ")
    by_address = relabel("node_network_info" + ne, [("host", "instance", HOST_OF_INSTANCE)],
                         "    ")
    by_nodename = relabel(f"node_network_info{ne} * on ({target}) group_left (nodename) "
                          f"node_uname_info{ne}", [("host", "nodename", "(.+)")], "    ")
    node = f"{by_address}\n    or\n    {by_nodename}"
    by = fleet_by_labels(p, "instance", "device", "rdma_device", "port", "roce_instance")
    netdev = (f"max by ({by}) (\n"
              f"  {ours}\n"
              f"  * on ({on}) group_left (instance)\n"
              f"  topk by ({on}) (1,\n    {node}\n  )\n)")
    gpu = relabel("roce_gpu_info" + s(),
                  [("roce_instance", "instance", "(.*)"), ("roce_gpu", "gpu", "(.*)"),
                   ("UUID", "uuid", "(.*)"), ("Hostname", "instance", HOST_OF_INSTANCE),
                   ("hostname", "instance", HOST_OF_INSTANCE)], "  ")
    keys = fleet_by_labels(p, "instance", "gpu", "roce_instance", "roce_gpu", "pci_bus_id",
                           "UUID", "Hostname", "hostname")
    return [
        {"record": NODE_EXPORTER_JOIN, "expr": netdev},
        {"record": DCGM_JOIN, "expr": f"max by ({keys}) (\n  {gpu}\n)"},
    ]


# Fleet comparisons name what deviates. Each member of a comparison (an
# RDMA device, a RoCE netdev, a GID slot) carries its setting as a label (a
# gauge's value becomes one through count_values); its record is the number
# of members of its group that hold the same value. The alert names every
# member whose value is held by fewer members than the group's most common
# one, and every member of a group where no value is the most common alone
# (a tie: no majority to compare with, so each side is named).
DRIFT_RECORD = "instance_netdev:roce_qos_config:same_value_count"


def compare_hint(record):
    """Where an alert's reader finds every value of the group and how many
    members hold each."""
    return ("`" + record + "` by the group's labels lists every member with how many share "
            "its value.")


def drift_group(p):
    """The `drift_group_by` labels, in order, without blanks."""
    return [g.strip() for g in p["drift_group_by"].split(",") if g.strip()]


def same_value_rule(p, record, member, group, values, labels=None):
    """`record`: each member of `member` (its setting in the `values`
    labels), valued with how many members of its `group` hold the same
    setting."""
    gv = fleet_by_labels(p, *group, *values)
    rule = {"record": record,
            "expr": (f"{member}\n* on ({gv}) group_left ()\n"
                     f"count by ({gv}) (\n  {member}\n)")}
    if labels:
        rule["labels"] = labels
    return rule


def deviation_alert_expr(p, record, group):
    """Members of `record` whose value fewer members of their group hold
    than the most common one, or all members of a group whose most common
    count is shared by several values."""
    g = fleet_by_labels(p, *group)
    r = f"{record}{sel(p)}"
    top = f"max by ({g}) ({r})"
    return (f"{r}\n  < on ({g}) group_left ()\n  {top}\n"
            f"or\n{r}\n  and on ({g})\n"
            f"  (\n    count by ({g}) ({r} == on ({g}) group_left () {top})\n"
            f"    > on ({g}) {top}\n  )")


# Member labels of the comparisons: a netdev, an RDMA device, a GID slot.
NETDEV_MEMBER = ("instance", "netdev", "device", "port")


def deviation_defs(p):
    """{name: (record, group labels, member expression, setting labels)} of
    the fleet comparisons other than QoS drift."""
    s = lambda extra="": sel(p, extra)  # noqa: E731
    group = drift_group(p)
    return {
        "mtu": ("instance_netdev:roce_netdev_mtu_bytes:same_value_count", [],
                f'count_values without () ("mtu", roce_netdev_mtu_bytes{s(M_DEV)})', ["mtu"]),
        "firmware": ("instance_device:roce_device_fw_version:same_value_count", group,
                     f"max by ({fleet_by_labels(p, *group, 'instance', 'device', 'fw_version')}) "
                     f"(roce_device_info{s(M_FW)})", ["fw_version"]),
        "pfc": ("instance_netdev:roce_pfc_priorities:same_value_count", [],
                f"max by ({fleet_by_labels(p, *NETDEV_MEMBER, 'pfc')}) "
                f"(roce_qos_info{s(M_DEV_PFC)})", ["pfc"]),
        "gid": ("instance_device_port:roce_gid_type:same_value_count", ["index"],
                f"max by ({fleet_by_labels(p, 'instance', 'device', 'port', 'netdev', 'index', 'type', 'family')}) "
                f"(roce_gid_info{s()})", ["type", "family"]),
    }


def qos_deviation_group(p):
    """The labels of one QoS comparison group, over every drift entry (an
    entry's absent `per` labels group as empty)."""
    per = []
    for d in p["table"].get("drift", []):
        per += [x for x in d["per"] if x not in per]
    return ["config", *per, *drift_group(p)]


def deviation_rules(p):
    """The records the fleet alerts compare."""
    out = [same_value_rule(p, rec, member, group, values)
           for rec, group, member, values in deviation_defs(p).values()]
    return out + drift_recording_rules(p)


def drift_recording_rules(p):
    """One rule per entry of the rule table's `drift` list (crates/rules/src/
    table.rs DRIFT): each RoCE netdev (device set) with that setting,
    labelled config=<entry>, valued with how many netdevs of its fleet, per
    `per` label, hold the same value. Only NICs of one comparable group
    (`drift_group_by`, taken from roce_device_info of the netdev's RDMA
    device) are compared: two NIC generations in one fleet are two groups."""
    out = []
    group = drift_group(p)
    for d in p["table"].get("drift", []):
        # a part of an info series the driver does not report is empty:
        # not a setting to compare
        known = "".join(f', {v}!=""' for v in d["values"])
        series = f"{d['family']}{sel(p, M_DEV + known)}"
        if group:
            # roce_device_info is 1: the product keeps the setting's value.
            join = fleet_by_labels(p, "instance", "device")
            series = (f"({series}\n  * on ({join}) group_left ({', '.join(group)})\n"
                      f"  max by ({fleet_by_labels(p, 'instance', 'device', *group)}) "
                      f"(roce_device_info{sel(p)}))")
        members = fleet_by_labels(p, *NETDEV_MEMBER, *d["per"], *group, *d["values"])
        if d["values"]:
            member = f"max by ({members}) {series}"
            values = d["values"]
        else:
            member = f'count_values without () ("value", {series})'
            values = ["value"]
        out.append(same_value_rule(p, DRIFT_RECORD, member, [*d["per"], *group], values,
                                   {"config": d["config"]}))
    return out


# The peer-probe verdicts across nodes. One exporter sees one side of each
# pair it probes (roce_peer_probe_peer_lost: of a pair's last 16 small
# probes, how many were lost); the fleet's exporters together say which side
# is at fault. A pair *fails* when at least `peer_loss_min` were lost. A
# verdict needs more than half of at least `peer_min_witnesses` witnesses:
#   a peer port that the ports probing it fail towards: that node, or its
#     port, is named (RocePeerProbeNodeUnreachable);
#   a local port failing towards its peers: that port (NIC, cable, switch
#     port) (RocePeerProbePortLosesPeers);
#   a failing pair neither end of which is named: the path between the two
#     (RocePeerProbePairLoss);
#   the ports cabled to one switch named: that switch, where a `switch_info`
#     series (LLDP) names each port's switch; nothing without one
#     (RocePeerProbeSwitchLosesPeers).
# Each side leaves out what the other explains: a dead node's loss is not
# its probers' ports', and a black-holed prober's loss is not its peers'.
# So the first pass names suspects on the raw votes (peers, then ports
# without the suspect peers), the second names peers without the suspect
# ports' votes and ports without those peers.
PEER_T = "peer:roce_peer_probe_"
PEER_P = PORT + "roce_peer_probe_"
PEER_PAIR = "instance_device_port_peer:roce_peer_probe_path_lost:count"
PEER_SWITCH_OF_PORT = PORT + "roce_peer_probe_switch:info"
PEER_NODE_SEEN = "peer:roce_peer_probe_endpoint_info:last"
PEER_NODE_PORT = "peer:roce_peer_probe_port:info"
PEER_SWITCH = "switch:roce_peer_probe_"
M_SMALL = 'size="small"'


def peer_labels(p):
    """(fleet, per peer port, per local port) labels of the verdicts."""
    return (fleet_by_labels(p), fleet_by_labels(p, "peer", "peer_device"),
            fleet_by_labels(p, "instance", "device", "port"))


def peer_probe_recording_rules(p):
    s = lambda extra="": sel(p, extra)  # noqa: E731
    fleet, tgt, prt = peer_labels(p)
    lost = f"roce_peer_probe_peer_lost{s(M_SMALL)}"
    n, w = num(p["peer_loss_min"]), num(p["peer_min_witnesses"])
    sw, lab = p["switch_info"], p["switch_label"]
    pair = "peer, peer_device, size"

    def port_vote(unless):
        """Share of failing pairs per local port, and their number, over
        the pairs whose peer is not in `unless`."""
        return (f"avg without ({pair}) (\n  ({lost} >= bool {n})\n  unless on ({tgt}) {unless}\n)",
                f"count without ({pair}) (\n  {lost}\n  unless on ({tgt}) {unless}\n)")

    suspect_peer = f"{PEER_T}suspect:ratio{s()}"
    suspect_port = f"{PEER_P}suspect:ratio{s()}"
    named_peer = f"{PEER_T}unreachable:ratio{s()}"
    ratio1, count1 = port_vote(suspect_peer)
    return [
        # Per peer port (named by the probers' `peer` and `peer_device`
        # labels): the ports that report on it, and the share of them whose
        # pair fails; the suspects among them.
        {"record": PEER_T + "probers:count", "expr": f"count by ({tgt}) ({lost})"},
        {"record": PEER_T + "losing_probers:ratio",
         "expr": f"avg by ({tgt}) ({lost} >= bool {n})"},
        {"record": PEER_T + "suspect:ratio",
         "expr": (f"{PEER_T}losing_probers:ratio{s()} > 0.5\n"
                  f"and on ({tgt}) {PEER_T}probers:count{s()} >= {w}")},
        # Suspect local ports: failing towards the peers that are no suspects.
        {"record": PEER_P + "suspect:ratio",
         "expr": f"{ratio1}\n> 0.5\nand on ({prt})\n{count1}\n>= {w}"},
        # Named peers: on the votes of the ports that are no suspects.
        {"record": PEER_T + "unreachable:ratio",
         "expr": (f"avg by ({tgt}) (\n  ({lost} >= bool {n})\n"
                  f"  unless on ({prt}) {suspect_port}\n)\n> 0.5\n"
                  f"and on ({tgt})\n"
                  f"count by ({tgt}) (\n  {lost}\n  unless on ({prt}) {suspect_port}\n)\n"
                  f">= {w}")},
        # Per local port, over its peers not named (their loss is theirs):
        # how many, the share of them that fail, and the named ports.
        {"record": PEER_P + "judged_peers:count", "expr": port_vote(named_peer)[1]},
        {"record": PEER_P + "losing_peers:ratio", "expr": port_vote(named_peer)[0]},
        {"record": PEER_P + "isolated:ratio",
         "expr": (f"{PEER_P}losing_peers:ratio{s()} > 0.5\n"
                  f"and on ({prt}) {PEER_P}judged_peers:count{s()} >= {w}")},
        # Failing pairs neither end of which is named: the path between.
        {"record": PEER_PAIR,
         "expr": (f"max without (size) (\n  {lost} >= {n}\n"
                  f"  unless on ({tgt}) {named_peer}\n"
                  f"  unless on ({prt}) {PEER_P}isolated:ratio{s()}\n)")},
        # The switch each port is cabled to, where the series names exactly
        # one (a port with two neighbours is left out).
        # Each probed node's exporter and port (from its own endpoint info,
        # as the probers name it: `peer` and `peer_device`), where exactly one
        # was seen within the window (a node that moved is left out).
        {"record": PEER_NODE_SEEN,
         "expr": (f"max by ({tgt}, instance, device, port) (\n"
                  f"  label_join(\n    label_replace(last_over_time({p['node_info']}{s()}"
                  f"[{p['node_info_window']}]), \"peer\", \"$1\", \"node\", \"(.+)\"),\n"
                  f"    \"peer_device\", \"/\", \"device\", \"port\"\n  )\n)")},
        {"record": PEER_NODE_PORT,
         "expr": (f"{PEER_NODE_SEEN}{s()}\nunless on ({tgt})\n"
                  f"(count by ({tgt}) ({PEER_NODE_SEEN}{s()}) > 1)")},
        {"record": PEER_SWITCH_OF_PORT,
         "expr": (f"max by ({prt}, {lab}) ({sw}{s()})\n"
                  f"unless on ({prt})\n"
                  f"(count by ({prt}) (max by ({prt}, {lab}) ({sw}{s()})) > 1)")},
        {"record": PEER_SWITCH + "ports:count",
         "expr": (f"count by ({fleet}, {lab}) (\n"
                  f"  {PEER_P}judged_peers:count{s()}\n"
                  f"  * on ({prt}) group_left ({lab}) {PEER_SWITCH_OF_PORT}{s()}\n)")},
        {"record": PEER_SWITCH + "isolated_ports:ratio",
         "expr": (f"count by ({fleet}, {lab}) (\n"
                  f"  {PEER_P}isolated:ratio{s()}\n"
                  f"  * on ({prt}) group_left ({lab}) {PEER_SWITCH_OF_PORT}{s()}\n)\n"
                  f"/ on ({fleet}, {lab}) {PEER_SWITCH}ports:count{s()}")},
    ]


def peer_probe_alerts(p):
    s = lambda extra="": sel(p, extra)  # noqa: E731
    fleet, tgt, prt = peer_labels(p)
    lab = p["switch_label"]
    for_ = finding_for(p)
    verdict_for = peer_verdict_for(p)
    critical, warning = {"severity": "critical"}, {"severity": "warning"}
    n, w = num(p["peer_loss_min"]), num(p["peer_min_witnesses"])
    node = "{{ $labels.peer }} ({{ $labels.peer_device }})"
    port = "{{ $labels.device }} port {{ $labels.port }} on {{ $labels.instance }}"
    switch = "{{ $labels." + lab + " }}"
    fails = f"at least {n} of their last 16 small probes lost"
    named = f"{PEER_T}unreachable:ratio{s()}"
    exporter = ("{{ if $labels.instance }} ({{ $labels.instance }}{{ if $labels." + lab
                + " }}, on " + switch + "{{ end }}){{ end }}")
    return [
        # The node's own exporter, port and switch where they are known: a
        # dead exporter's RoceExporterDown and a switch's verdict inhibit it.
        alert(p, "RocePeerProbeNodeUnreachable",
              f"(\n  {named}\n  * on ({tgt}) group_left (instance, device, port, {lab})\n"
              f"  (\n    {PEER_NODE_PORT}{s()}\n"
              f"    * on ({prt}) group_left ({lab}) {PEER_SWITCH_OF_PORT}{s()}\n"
              f"    or on ({tgt}) {PEER_NODE_PORT}{s()}\n  )\n)\n"
              f"or on ({tgt}) {named}",
              verdict_for, critical,
              "Peers lose their probes to node " + node + exporter,
              "Node " + node + exporter + ": {{ $value | humanizePercentage }} of the ports "
              "probing it (at least " + w + ") fail towards it (" + fails + "): the node is "
              "down, its exporter and responder stopped, or its port (NIC, cable, switch "
              "port) drops RoCE traffic (then RocePeerProbePortLosesPeers names that port "
              "too). The other nodes' peer_probe findings about it are this one fault.",
              "RocePeerProbeNodeUnreachable", live_instance=False),
        alert(p, "RocePeerProbePortLosesPeers",
              f"(\n  {PEER_P}isolated:ratio{s()}\n"
              f"  * on ({prt}) group_left ({lab}) {PEER_SWITCH_OF_PORT}{s()}\n)\n"
              f"or on ({prt}) {PEER_P}isolated:ratio{s()}",
              verdict_for, critical,
              "RDMA port " + port + " loses its peers",
              "Probes from " + port + " fail towards {{ $value | humanizePercentage }} of the "
              "peers it probes (at least " + w + ", " + fails + ") while the other nodes "
              "reach those peers: the fault is on this port's side: its NIC, cable or "
              "optic, or its switch port{{ if $labels." + lab + " }} on " + switch
              + "{{ end }}.",
              "RocePeerProbePortLosesPeers"),
        alert(p, "RocePeerProbePairLoss",
              f"{PEER_PAIR}{s()}", for_, warning,
              "Probes from " + port + " to " + node + " are lost",
              "{{ $value }} of the last 16 small probes from " + port + " to " + node
              + " were lost, while neither end loses its other peers nor is lost by them: "
              "the path between the two (an ECMP member, a link between switches) drops "
              "them.",
              "RocePeerProbePairLoss"),
        alert(p, "RocePeerProbeSwitchLosesPeers",
              f"{PEER_SWITCH}isolated_ports:ratio{s()} > 0.5\n"
              f"and on ({fleet}, {lab}) {PEER_SWITCH}ports:count{s()} >= {w}",
              for_, critical,
              "The ports cabled to switch " + switch + " lose their peers",
              "{{ $value | humanizePercentage }} of the probing ports cabled to " + switch
              + " (at least " + w + ") lose most of their peers: the switch or its uplinks "
              "drop RoCE traffic; its ports' RocePeerProbePortLosesPeers are this one fault.",
              "RocePeerProbeSwitchLosesPeers", live_instance=False),
    ]


def node_alerts(p):
    s = lambda extra="": sel(p, extra)  # noqa: E731
    on = "on {{ $labels.instance }}"
    rules = [
        alert(p, "RoceExporterDown", f"up{s()} == 0", "5m", {"severity": "critical"},
              "roce_exporter {{ $labels.instance }} is down",
              "Prometheus could not scrape roce_exporter on {{ $labels.instance }} "
              "for 5 minutes: no RDMA fabric data from this node (its other alerts are "
              "inhibited meanwhile).",
              "RoceExporterDown", live_instance=False),
        alert(p, "RoceSampleStale",
              f"time() - roce_sample_timestamp_seconds{s()}\n"
              f"  > clamp_min({num(p['stale_intervals'])} * roce_sample_interval_seconds{s()}, 30)",
              "5m", {"severity": "warning"},
              "roce_exporter serves a stale sample " + on,
              "The sample served by {{ $labels.instance }} is {{ $value | humanizeDuration }} old, "
              "more than " + num(p["stale_intervals"]) + " sample intervals: the sampler is stuck "
              "(a hung sysfs read or netlink request), and its findings are frozen.",
              "RoceSampleStale"),
        alert(p, "RoceNicCountDropped",
              f"instance:roce_rdma_devices:count{s()}\n"
              f"  < max_over_time(instance:roce_rdma_devices:count{s()}[{p['nic_count_window']}])",
              "0s", {"severity": "critical"},
              "{{ $labels.instance }} lost RDMA devices",
              "roce_exporter on {{ $labels.instance }} sees {{ $value }} RDMA device(s), fewer than "
              "within the last " + p["nic_count_window"] + ": a NIC fell off the bus or its driver "
              "unbound (its series vanished with it).",
              "RoceNicCountDropped"),
    ]
    rules += [finding_alert(p, r) for r in p["table"]["rules"] if notifies(r)]
    return rules


def fleet_alerts(p):
    s = lambda extra="": sel(p, extra)  # noqa: E731
    by = p["fleet_by"]
    fleet = "{{ $labels." + by.split(",")[0].strip() + " }}"
    warning = {"severity": "warning"}
    rate = f"device_port:roce_port_rate_bytes_per_second:active_by_hca_type{s()}"
    return [
        alert(p, "RoceLinkRateBelowPeers",
              f"{rate}\n"
              f"  < on ({by}, hca_type) group_left ()\n"
              f"  max by ({by}, hca_type) ({rate})",
              "15m", warning,
              "RDMA port {{ $labels.device }} port {{ $labels.port }} runs below its peers "
              "on {{ $labels.instance }}",
              "{{ $labels.device }} port {{ $labels.port }} ({{ $labels.hca_type }}) on "
              "{{ $labels.instance }} is active at {{ $value | humanize }}B/s, below the fastest "
              "active port of the same NIC model in " + fleet + ": it negotiated a lower speed "
              "or fewer lanes.",
              "RoceLinkRateBelowPeers"),
        alert(p, "RoceFirmwareDrift",
              deviation_alert_expr(p, *deviation_defs(p)["firmware"][:2]),
              "1h", warning,
              "{{ $labels.device }} on {{ $labels.instance }} runs firmware "
              "{{ $labels.fw_version }}, not the most common of its " + fleet
              + " peers ({{ $labels.hca_type }})",
              "{{ $labels.device }} ({{ $labels.hca_type }}) on {{ $labels.instance }} runs "
              "firmware {{ $labels.fw_version }}, which only {{ $value }} RDMA device(s) of that "
              "NIC model and driver in " + fleet + " run: it is not the version most of them "
              "run (where no version has a majority, every device is named). "
              + compare_hint(deviation_defs(p)["firmware"][0]),
              "RoceFirmwareDrift"),
        alert(p, "RoceMtuInconsistent",
              deviation_alert_expr(p, *deviation_defs(p)["mtu"][:2]),
              "30m", warning,
              "{{ $labels.netdev }} on {{ $labels.instance }} has MTU {{ $labels.mtu }}, "
              "not the most common in " + fleet,
              "The RoCE netdev {{ $labels.netdev }} ({{ $labels.device }} port "
              "{{ $labels.port }}) on {{ $labels.instance }} has MTU {{ $labels.mtu }}, which "
              "only {{ $value }} RoCE netdev(s) of " + fleet + " use: RoCE traffic between it "
              "and the others runs at the smallest MTU or is dropped (where no MTU has a "
              "majority, every netdev is named). " + compare_hint(deviation_defs(p)["mtu"][0]),
              "RoceMtuInconsistent"),
        alert(p, "RocePfcPriorityInconsistent",
              deviation_alert_expr(p, *deviation_defs(p)["pfc"][:2]),
              "30m", warning,
              "PFC priorities of {{ $labels.netdev }} on {{ $labels.instance }} differ "
              "from " + fleet,
              "PFC is on for priorities {{ $labels.pfc }} on {{ $labels.netdev }} "
              "({{ $labels.device }} port {{ $labels.port }}) on {{ $labels.instance }}, as "
              "on only {{ $value }} RoCE netdev(s) of " + fleet + ": lossless traffic is "
              "dropped on a priority where one end has PFC off, and pauses on a priority "
              "that should be lossy stall it (where no set has a majority, every netdev is "
              "named). " + compare_hint(deviation_defs(p)["pfc"][0]),
              "RocePfcPriorityInconsistent"),
        alert(p, "RoceQosConfigDrift",
              deviation_alert_expr(p, DRIFT_RECORD, qos_deviation_group(p)),
              "1h", warning,
              "QoS setting {{ $labels.config }} of {{ $labels.netdev }} on "
              "{{ $labels.instance }} differs from its peers in " + fleet,
              "The value of {{ $labels.config }}{{ if $labels.priority }} (priority "
              "{{ $labels.priority }}){{ end }}{{ if $labels.parameter }} "
              "({{ $labels.parameter }}){{ end }}{{ if $labels.dscp }} (DSCP "
              "{{ $labels.dscp }}){{ end }} on {{ $labels.netdev }} ({{ $labels.device }} "
              "port {{ $labels.port }}) on {{ $labels.instance }} is shared by only "
              "{{ $value }} RoCE netdev(s) of " + fleet + "{{ if $labels.hca_type }} on "
              "{{ $labels.hca_type }} NICs{{ end }}: this node does not follow the fabric's "
              "QoS standard, and its RoCE traffic is classified, scheduled or paused "
              "differently from its peers' (where no value has a majority, every netdev is "
              "named). " + compare_hint(DRIFT_RECORD),
              "RoceQosConfigDrift"),
        alert(p, "RoceGidTypeInconsistent",
              deviation_alert_expr(p, *deviation_defs(p)["gid"][:2]),
              "30m", warning,
              "GID index {{ $labels.index }} of {{ $labels.device }} port {{ $labels.port }} "
              "on {{ $labels.instance }} differs from " + fleet,
              "GID index {{ $labels.index }} of {{ $labels.device }} port {{ $labels.port }} "
              "on {{ $labels.instance }} is {{ $labels.type }} ({{ $labels.family }}), as on "
              "only {{ $value }} RDMA port(s) of " + fleet + ": a fleet-wide GID index "
              "(NCCL_IB_GID_INDEX) selects RoCE v1 or a link-local GID on some nodes (where "
              "no type has a majority, every port is named). " + compare_hint(deviation_defs(p)["gid"][0]),
              "RoceGidTypeInconsistent"),
    ]


def inhibit_rules(p):
    """Alertmanager inhibit_rules: the exporter down silences that
    instance's other alerts; a port down silences the alerts on that port's
    counters (rules whose area judges port counters); a port below its
    configured rate silences the same port's peer comparison; a switch
    whose ports lose their peers silences those ports' peer-probe verdicts."""
    counters = [r["id"] for r in p["table"]["rules"] if r["port_counters"] and notifies(r)]
    return [
        {
            "source_matchers": ['alertname="RoceExporterDown"'],
            "target_matchers": ['alertname=~"Roce.+"', 'alertname!="RoceExporterDown"'],
            "equal": ["instance"],
        },
        {
            "source_matchers": ['alertname="' + alert_name("port_down") + '"'],
            "target_matchers": ['rule=~"' + "|".join(counters) + '"'],
            "equal": ["instance", "device", "port"],
        },
        {
            "source_matchers": ['alertname="' + alert_name("link_rate_below_expected") + '"'],
            "target_matchers": ['alertname="RoceLinkRateBelowPeers"'],
            "equal": ["instance", "device", "port"],
        },
        {
            # A switch that loses its ports' peers explains each port's loss
            # and each of its nodes lost.
            "source_matchers": ['alertname="RocePeerProbeSwitchLosesPeers"'],
            "target_matchers": ['alertname=~"RocePeerProbePortLosesPeers|'
                                'RocePeerProbeNodeUnreachable"'],
            "equal": fleet_by_labels(p, p["switch_label"]).split(", "),
        },
    ]


def lldp_rail_rules(p):
    """Cabling of rail-optimized clusters across the fleet, from the LLDP
    neighbour each RDMA port reports (roce_lldp_neighbor_info,
    docs/lldp.md), without a cabling plan: a node's pod is the switch its
    first NIC (the device whose name ends in a lone 0: mlx5_0, bnxt_re0,
    rxe0) reaches; within a pod, NIC k of every node should reach one switch
    (rail k's leaf). Records first, then the alerts on them (one group
    evaluates in order)."""
    s = lambda extra="": sel(p, extra)  # noqa: E731
    by = p["fleet_by"]
    critical, warning = {"severity": "critical"}, {"severity": "warning"}
    first_nic = 'device=~".*[^0-9]0"'
    named_switch = 'system_name!=""'
    named_port = 'port_id!=""'
    pod = "instance:roce_lldp_pod:info"
    switch_pod = "instance_device:roce_lldp_switch:pod"
    nodes = "pod_device_switch:roce_lldp_nodes:count"
    return [
        # A first NIC that reports two neighbours (a recabling in progress,
        # a host's LLDP agent beside the switch's) gives its node no pod:
        # one pod per node keeps the joins below one-to-one.
        {"record": pod,
         "expr": f"max by ({by}, instance, pod) (\n"
                 f"  label_replace(\n"
                 f"    roce_lldp_neighbor_info{s(first_nic)},\n"
                 f"    \"pod\", \"$1\", \"system_name\", \"(.+)\"\n"
                 f"  )\n)\n"
                 f"and on ({by}, instance)\n"
                 f"(count by ({by}, instance) (roce_lldp_neighbor_info{s(first_nic)}) == 1)"},
        {"record": switch_pod,
         "expr": f"max by ({by}, instance, device, system_name, pod) (\n"
                 f"  roce_lldp_neighbor_info{s(named_switch)}\n"
                 f"  * on ({by}, instance) group_left (pod) {pod}{s()}\n)"},
        {"record": nodes,
         "expr": f"count by ({by}, pod, device, system_name) ({switch_pod}{s()})"},
        alert(p, "RoceLldpRailOddOneOut",
              f"(\n  {switch_pod}{s()}\n"
              f"  * on ({by}, pod, device, system_name) group_left ()\n"
              f"  {nodes}{s()}\n)\n"
              f"< on ({by}, pod, device) group_left ()\n"
              f"max by ({by}, pod, device) ({nodes}{s()})",
              "10m", critical,
              "{{ $labels.device }} on {{ $labels.instance }} is cabled to another rail's switch",
              "{{ $labels.device }} on {{ $labels.instance }} reaches {{ $labels.system_name }}, "
              "where only {{ $value }} node(s) of pod {{ $labels.pod }} have their "
              "{{ $labels.device }}; most of the pod's nodes reach another switch: the cable is "
              "on the wrong rail (or in the wrong leaf), so this GPU's traffic crosses the spine.",
              "RoceLldpRailOddOneOut"),
        alert(p, "RoceLldpPodOfOne",
              f"{pod}{s()}\n"
              f"and on ({by}, pod) (count by ({by}, pod) ({pod}{s()}) == 1)\n"
              f"and on ({by}) (count by ({by}) ({pod}{s()}) >= 4)",
              "10m", warning,
              "The first NIC of {{ $labels.instance }} reaches a switch no other node's first "
              "NIC reaches",
              "The first RDMA NIC of {{ $labels.instance }} is cabled to {{ $labels.pod }}, "
              "which no other node's first NIC reaches: that cable is probably on the wrong "
              "rail, and the node's other NICs cannot be compared with a pod.",
              "RoceLldpPodOfOne"),
        alert(p, "RoceLldpTwoNicsOneSwitchPort",
              f"count by ({by}, instance, system_name, port_id) (\n"
              f"  roce_lldp_neighbor_info{s(named_port)}\n) > 1",
              "10m", critical,
              "Two NICs of {{ $labels.instance }} report the same switch port",
              "{{ $value }} RDMA ports of {{ $labels.instance }} report "
              "{{ $labels.system_name }} port {{ $labels.port_id }} as their LLDP neighbour: "
              "they share a link (a splitter, a hub or a mislabelled breakout), or one of them "
              "is cabled to the other's port.",
              "RoceLldpTwoNicsOneSwitchPort"),
    ]


def groups(p):
    fleet = fleet_alerts(p)
    return [
        ("roce_exporter.rules.yml", [
            {"name": "roce_exporter.recording", "rules": recording_rules(p)},
            {"name": "roce_exporter.node", "rules": node_alerts(p)},
        ]),
        (FLEET_RECORDING_FILE, [
            {"name": "roce_exporter.fleet.recording", "rules": fleet_recording_rules(p)},
            {"name": "roce_exporter.joins", "rules": join_recording_rules(p)},
        ]),
        (FLEET_ALERTS_FILE, [
            # The records each fleet alert compares, then the alerts: a group
            # evaluates in order, so each alert sees this evaluation's records.
            {"name": "roce_exporter.fleet", "interval": "1m",
             "rules": deviation_rules(p) + fleet},
            # Recording rules and the alerts on them in one group: a group
            # evaluates in order, so each alert sees this evaluation's verdicts.
            {"name": "roce_exporter.fleet.peer_probes",
             "rules": peer_probe_recording_rules(p) + peer_probe_alerts(p)},
            {"name": "roce_exporter.fleet.lldp_rails", "rules": lldp_rail_rules(p)},
        ]),
    ]


# A small YAML writer: keys in the order given, strings as JSON-quoted
# scalars (valid YAML) or block literals when they span lines.
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


HEADER = ("# Generated by alerts/generate.py from docs/rules.json: edit the generator\n"
          "# (or the exporter's rule table), not this file.\n"
          "# Runbook: docs/runbook.md (served by the exporter at /runbook). Metrics: docs/metrics.md.\n")

INHIBIT_FILE = "alertmanager.inhibit.yml"


def render(params):
    """{file name: text} of the Prometheus rule files."""
    return {name: HEADER + yaml_dump({"groups": gs}) + "\n" for name, gs in groups(params)}


def render_inhibit(params):
    """The Alertmanager `inhibit_rules:` to merge into alertmanager.yml."""
    return (HEADER + "# Alertmanager configuration fragment: merge into alertmanager.yml.\n"
            + yaml_dump({"inhibit_rules": inhibit_rules(params)}) + "\n")


def alert_names(params=None):
    params = params or default_params()
    return [r["alert"] for _, gs in groups(params) for g in gs for r in g["rules"] if "alert" in r]


def runbook_sections(params=None):
    """{alert name: runbook section} of every alert."""
    params = dict(params or default_params(), runbook_url_base="{section}")
    out = {}
    for _, gs in groups(params):
        for g in gs:
            for r in g["rules"]:
                if "alert" in r:
                    out[r["alert"]] = r["annotations"]["runbook_url"]
    return out


def main(argv):
    args = parse_args(argv)
    params = params_from(args)
    os.makedirs(args.out, exist_ok=True)
    files = dict(render(params))
    files[INHIBIT_FILE] = render_inhibit(params)
    for name, text in files.items():
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main(sys.argv[1:])
